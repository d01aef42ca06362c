//! The forms a patch file's diff can take, read before libgit2 sees it: paths without the `a/`
//! and `b/` prefixes, copies, and binary changes without their data.
//!
//! libgit2's patch parser, like `git am` (which runs `git apply -p1`), strips the first
//! component of every path. A patch made with `diff.noprefix` or `format-patch --no-prefix`
//! (jesseduffield/lazygit#3107, pulumi/ci-mgmt#697) names `pkg/x.go` as `pkg/x.go`, so both
//! would put a new `pkg/openstack/extra.go` at `openstack/extra.go` and fail on the rest. Its
//! `diff --git` line tells it apart (git-diff(1), "generating patch text"): with prefixes the
//! two names differ by them (`a/P b/P`), without they are equal (`P P`), and for a rename or
//! copy they equal the `rename from`/`rename to` paths, which never carry prefixes. Such a
//! section gets its prefixes back, so it applies at the paths its author changed.
//!
//! libgit2 applies a copy (`copy from`/`copy to`, what `-C` writes) as a rename — the original
//! is deleted — and a binary change written without `--binary` ("Binary files … differ") has
//! no data to apply; both are refused in one line ([`Refusal`]).

use std::borrow::Cow;

/// A patch that cannot be applied as `git am` applies it: what it holds and how to make one that
/// applies (one line, without the patch's name).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Refusal(pub String);

/// How one file section names its paths.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Names {
    /// With one leading component on each side (`a/P b/P`, or other prefixes such as
    /// `--src-prefix`): as `-p1` reads it.
    Prefixed,
    /// Without (`P P`): the prefixes must be added.
    Bare,
}

/// `bytes` (a patch file as `git am` reads its lines) with every section that lacks prefixes
/// given `a/` and `b/` ones, and whether any did; unchanged (borrowed) when every section has
/// them.
///
/// Errors: a [`Refusal`] for a copy or a binary change without its data.
pub fn with_prefixes(bytes: &[u8]) -> Result<(Cow<'_, [u8]>, bool), Refusal> {
    let lines: Vec<&[u8]> = bytes.split_inclusive(|b| *b == b'\n').collect();
    let mut bare = Vec::new();
    let mut i = 0;
    while i < lines.len() {
        if !lines[i].starts_with(b"diff --git ") {
            i += 1;
            continue;
        }
        let start = i;
        i += 1;
        // The section's header: up to its first hunk, binary data or the next section.
        while i < lines.len()
            && !lines[i].starts_with(b"diff --git ")
            && !lines[i].starts_with(b"@@ ")
            && !lines[i].starts_with(b"GIT binary patch")
        {
            i += 1;
        }
        let header = &lines[start..i];
        refuse(header)?;
        if names(header) == Names::Bare {
            bare.push(start..i);
        }
    }
    if bare.is_empty() {
        return Ok((Cow::Borrowed(bytes), false));
    }
    let mut out = Vec::with_capacity(bytes.len() + 64);
    for (n, line) in lines.iter().enumerate() {
        if bare.iter().any(|r| r.contains(&n)) {
            out.extend_from_slice(&prefixed(line));
        } else {
            out.extend_from_slice(line);
        }
    }
    Ok((Cow::Owned(out), true))
}

/// A line's text without its line ending.
fn text(line: &[u8]) -> String {
    let t = String::from_utf8_lossy(line);
    t.trim_end_matches(['\n', '\r']).to_string()
}

/// The value after `key` in the header, if a line has it (`rename from pkg/x.go`).
fn value<'a>(header: &'a [&'a [u8]], key: &str) -> Option<String> {
    header.iter().find_map(|l| {
        let t = text(l);
        t.strip_prefix(key).map(str::to_string)
    })
}

/// A section git cannot be followed in: a copy, or a binary change without its data.
fn refuse(header: &[&[u8]]) -> Result<(), Refusal> {
    if let (Some(from), Some(to)) = (value(header, "copy from "), value(header, "copy to ")) {
        return Err(Refusal(format!(
            "holds a copy (copy from {from} to {to}), which occm-forge cannot apply as git am does; make it without copy detection (`git format-patch` without -C or --find-copies, with diff.renames not set to copies), or with `occm-forge patches export`"
        )));
    }
    if let Some(line) = header
        .iter()
        .map(|l| text(l))
        .find(|t| t.starts_with("Binary files ") && t.ends_with(" differ"))
    {
        let names = &line["Binary files ".len()..line.len() - " differ".len()];
        let path = names
            .rsplit(" and ")
            .next()
            .filter(|p| *p != "/dev/null")
            .or_else(|| names.split(" and ").next())
            .unwrap_or(names);
        let path = path
            .strip_prefix("b/")
            .or_else(|| path.strip_prefix("a/"))
            .unwrap_or(path);
        return Err(Refusal(format!(
            "holds a binary change of {path} without its data (made without --binary); make it with `git format-patch`, which writes the data, or with `occm-forge patches export`"
        )));
    }
    Ok(())
}

/// How the section whose header is `header` names its paths (see the module documentation).
fn names(header: &[&[u8]]) -> Names {
    let first = text(header[0]);
    let rest = first.strip_prefix("diff --git ").unwrap_or(&first);
    if let (Some(from), Some(to)) = (value(header, "rename from "), value(header, "rename to ")) {
        return if rest == format!("{from} {to}") || rest == format!("\"{from}\" \"{to}\"") {
            Names::Bare
        } else {
            Names::Prefixed
        };
    }
    // `P P`: two equal halves around the middle space.
    let n = rest.len();
    if n % 2 == 1 && rest.as_bytes()[n / 2] == b' ' && rest[..n / 2] == rest[n / 2 + 1..] {
        return Names::Bare;
    }
    Names::Prefixed
}

/// A header line of a section without prefixes, with them: `diff --git P Q` → `diff --git a/P
/// b/Q`, `--- P` → `--- a/P`, `+++ Q` → `+++ b/Q` (`/dev/null` kept), quoted names quoted
/// after the prefix; any other line as it is.
fn prefixed(line: &[u8]) -> Vec<u8> {
    let t = String::from_utf8_lossy(line);
    let ending = &t[t.trim_end_matches(['\n', '\r']).len()..];
    let body = t.trim_end_matches(['\n', '\r']);
    let add = |prefix: &str, name: &str| -> String {
        if name == "/dev/null" {
            name.to_string()
        } else if let Some(quoted) = name.strip_prefix('"') {
            format!("\"{prefix}{quoted}")
        } else {
            format!("{prefix}{name}")
        }
    };
    let new = if let Some(rest) = body.strip_prefix("diff --git ") {
        let (a, b) = split_names(rest);
        format!("diff --git {} {}", add("a/", a), add("b/", b))
    } else if let Some(name) = body.strip_prefix("--- ") {
        format!("--- {}", add("a/", name))
    } else if let Some(name) = body.strip_prefix("+++ ") {
        format!("+++ {}", add("b/", name))
    } else {
        return line.to_vec();
    };
    format!("{new}{ending}").into_bytes()
}

/// The two names of a `diff --git` line's rest: quoted ones by their quotes, else split at the
/// middle space when the halves are equal (a path may hold spaces), else at the first space.
fn split_names(rest: &str) -> (&str, &str) {
    if rest.starts_with('"')
        && let Some(end) = rest[1..].find("\" ").map(|i| i + 2)
    {
        return (&rest[..end], &rest[end + 1..]);
    }
    let n = rest.len();
    if n % 2 == 1 && rest.as_bytes()[n / 2] == b' ' && rest[..n / 2] == rest[n / 2 + 1..] {
        return (&rest[..n / 2], &rest[n / 2 + 1..]);
    }
    rest.split_once(' ').unwrap_or((rest, rest))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn run(p: &str) -> Result<(String, bool), Refusal> {
        with_prefixes(p.as_bytes()).map(|(b, c)| (String::from_utf8(b.into_owned()).unwrap(), c))
    }

    #[test]
    fn sections_without_prefixes_get_them_and_prefixed_ones_stay() {
        let bare = "Subject: x\n---\ndiff --git pkg/a b.go pkg/a b.go\nnew file mode 100644\n--- /dev/null\n+++ pkg/a b.go\n@@ -0,0 +1 @@\n+--- not a header\n";
        assert_eq!(
            run(bare).unwrap(),
            (
                "Subject: x\n---\ndiff --git a/pkg/a b.go b/pkg/a b.go\nnew file mode 100644\n--- /dev/null\n+++ b/pkg/a b.go\n@@ -0,0 +1 @@\n+--- not a header\n".to_string(),
                true
            )
        );
        let prefixed = "diff --git a/x.go b/x.go\n--- a/x.go\n+++ b/x.go\n@@ -1 +1 @@\n-a\n+b\n";
        assert_eq!(run(prefixed).unwrap(), (prefixed.to_string(), false));
        // A directory named `a` is a path, not a prefix.
        let in_a = "diff --git a/x.go a/x.go\n--- a/x.go\n+++ a/x.go\n@@ -1 +1 @@\n-a\n+b\n";
        assert_eq!(
            run(in_a).unwrap().0,
            "diff --git a/a/x.go b/a/x.go\n--- a/a/x.go\n+++ b/a/x.go\n@@ -1 +1 @@\n-a\n+b\n"
        );
    }

    #[test]
    fn renames_are_told_by_their_from_and_to_lines() {
        let bare = "diff --git old.go new/new.go\nsimilarity index 90%\nrename from old.go\nrename to new/new.go\n--- old.go\n+++ new/new.go\n";
        assert_eq!(
            run(bare).unwrap().0,
            "diff --git a/old.go b/new/new.go\nsimilarity index 90%\nrename from old.go\nrename to new/new.go\n--- a/old.go\n+++ b/new/new.go\n"
        );
        let prefixed = "diff --git a/old.go b/new.go\nsimilarity index 100%\nrename from old.go\nrename to new.go\n";
        assert!(!run(prefixed).unwrap().1);
    }

    #[test]
    fn copies_and_binary_changes_without_data_are_refused() {
        let copy =
            "diff --git a/x.go b/y.go\nsimilarity index 100%\ncopy from x.go\ncopy to y.go\n";
        assert!(
            run(copy)
                .unwrap_err()
                .0
                .starts_with("holds a copy (copy from x.go to y.go)")
        );
        let binary = "diff --git a/d/b.bin b/d/b.bin\nnew file mode 100644\nindex 0000000..1111111\nBinary files /dev/null and b/d/b.bin differ\n";
        assert!(
            run(binary)
                .unwrap_err()
                .0
                .starts_with("holds a binary change of d/b.bin without its data")
        );
        let with_data = "diff --git a/d/b.bin b/d/b.bin\nnew file mode 100644\nindex 0000000..1111111\nGIT binary patch\nliteral 9\nQcmZQzWMXAvWa8ih0058G0RR91\n\nliteral 0\nHcmV?d00001\n\n";
        assert!(run(with_data).is_ok());
    }
}
