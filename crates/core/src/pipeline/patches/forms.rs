//! The forms a patch file's diff can take, read before libgit2 sees it: paths without the `a/`
//! and `b/` prefixes, paths with spaces, copies, and binary changes without their data.
//!
//! libgit2's patch parser, like `git am` (which runs `git apply -p1`), strips the first
//! component of every path. A patch made with `diff.noprefix` or `format-patch --no-prefix`
//! (jesseduffield/lazygit#3107, pulumi/ci-mgmt#697) names `pkg/x.go` as `pkg/x.go`, so both
//! would put a new `pkg/openstack/extra.go` at `openstack/extra.go` and fail on the rest. Its
//! `diff --git` line tells it apart (git-diff(1), "generating patch text"): with the usual
//! prefixes the two names differ by them (`a/P b/P`); without, they are equal (`P P`) — as they
//! are with equal custom prefixes (`--src-prefix=x/ --dst-prefix=x/`), so the tree the patch
//! applies to decides: the path that exists (for a change or a deletion), or the directory that
//! exists (for a new file). A rename is told by its `rename from`/`rename to` paths, which
//! never carry prefixes. A section without prefixes gets them back, so it applies at the paths
//! its author changed; a patch the tree cannot decide is refused.
//!
//! libgit2 cannot parse names with spaces unless quoted (git writes them bare, with a tab after
//! the `---`/`+++` names): such names are quoted for it, as git quotes other special names.
//!
//! libgit2 applies a copy (`copy from`/`copy to`, what `-C` writes) as a rename — the original
//! is deleted — and a binary change written without `--binary` ("Binary files … differ") has
//! no data to apply; both are refused in one line ([`Refusal`]). Everything here works on bytes:
//! a path that is not UTF-8 keeps its bytes.

use std::borrow::Cow;

/// A patch that cannot be applied as `git am` applies it: what it holds and how to make one that
/// applies (one line, without the patch's name).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Refusal(pub String);

/// What is known of the tree a patch applies to: whether a path (a file or a directory,
/// `/`-separated, no leading slash) exists in it.
pub trait Tree {
    /// Whether `path` exists.
    fn has(&self, path: &[u8]) -> bool;
}

impl<F: Fn(&[u8]) -> bool> Tree for F {
    fn has(&self, path: &[u8]) -> bool {
        self(path)
    }
}

/// One file section's header.
struct Section {
    /// Line indices of the header (from its `diff --git` line to its first hunk, binary data or
    /// the next section).
    lines: std::ops::Range<usize>,
    /// The two names of its `diff --git` line, as written (quoted ones with their quotes).
    names: (Vec<u8>, Vec<u8>),
    /// What its names say of their prefixes.
    form: Form,
}

/// How a section names its paths.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Form {
    /// Different names, as with prefixes (`a/P b/P`, or a rename `a/P b/Q`).
    Prefixed,
    /// A rename whose names are its `rename from`/`rename to` paths: no prefixes.
    BareRename,
    /// Equal names (`P P`): no prefixes, or equal ones; the tree decides.
    Equal {
        /// The section adds a file.
        new_file: bool,
    },
}

/// `bytes` (a patch file as `git am` reads its lines) as libgit2 must read it to apply what `git
/// am` would to the paths its author meant: every section without prefixes given `a/` and `b/`,
/// names with spaces quoted. Also whether any section lacked prefixes. Borrowed when nothing
/// changes.
///
/// Errors: a [`Refusal`] for a copy, a binary change without its data, or names that may or may
/// not carry prefixes where `tree` does not tell which.
pub fn normalise<'a>(bytes: &'a [u8], tree: &dyn Tree) -> Result<(Cow<'a, [u8]>, bool), Refusal> {
    let lines: Vec<&[u8]> = bytes.split_inclusive(|b| *b == b'\n').collect();
    let sections = sections(&lines)?;
    let bare_equal = decide(&sections, tree)?;
    let rewrite: Vec<(&Section, bool)> = sections
        .iter()
        .map(|s| {
            let bare = match s.form {
                Form::Prefixed => false,
                Form::BareRename => true,
                Form::Equal { .. } => bare_equal,
            };
            (s, bare)
        })
        .filter(|(s, bare)| *bare || has_space(&s.names.0) || has_space(&s.names.1))
        .collect();
    if rewrite.is_empty() {
        return Ok((Cow::Borrowed(bytes), false));
    }
    let any_bare = rewrite.iter().any(|(_, bare)| *bare);
    let mut out = Vec::with_capacity(bytes.len() + 64);
    for (n, line) in lines.iter().enumerate() {
        match rewrite.iter().find(|(s, _)| s.lines.contains(&n)) {
            Some((s, bare)) => out.extend_from_slice(&header_line(line, s, *bare)),
            None => out.extend_from_slice(line),
        }
    }
    Ok((Cow::Owned(out), any_bare))
}

/// The file sections of the patch, each checked for what cannot be applied.
fn sections(lines: &[&[u8]]) -> Result<Vec<Section>, Refusal> {
    let mut out = Vec::new();
    let mut i = 0;
    while i < lines.len() {
        if !lines[i].starts_with(b"diff --git ") {
            i += 1;
            continue;
        }
        let start = i;
        i += 1;
        while i < lines.len()
            && !lines[i].starts_with(b"diff --git ")
            && !lines[i].starts_with(b"@@ ")
            && !lines[i].starts_with(b"GIT binary patch")
        {
            i += 1;
        }
        let header = &lines[start..i];
        let rest = &body(header[0])[b"diff --git ".len()..];
        let from = value(header, b"rename from ");
        let to = value(header, b"rename to ");
        let (names, form) = match (&from, &to) {
            (Some(f), Some(t)) if rest == [f.as_slice(), b" ", t].concat() => {
                ((f.clone(), t.clone()), Form::BareRename)
            }
            (Some(f), Some(t)) => (split_rename(rest, f, t), Form::Prefixed),
            _ => match equal_halves(rest) {
                Some(p) => (
                    (p.to_vec(), p.to_vec()),
                    Form::Equal {
                        new_file: header.iter().any(|l| l.starts_with(b"new file mode ")),
                    },
                ),
                None => (split_prefixed(rest), Form::Prefixed),
            },
        };
        refuse(header, &names.1)?;
        out.push(Section {
            lines: start..i,
            names,
            form,
        });
    }
    Ok(out)
}

/// Whether the sections with equal names have no prefixes: what the tree says of each (see the
/// module documentation), or, where it says nothing, the patch's other sections (a patch is
/// written with one kind of prefix).
///
/// Errors: a [`Refusal`] where the tree says both, or nothing and no other section tells.
fn decide(sections: &[Section], tree: &dyn Tree) -> Result<bool, Refusal> {
    let equal: Vec<&Section> = sections
        .iter()
        .filter(|s| matches!(s.form, Form::Equal { .. }))
        .collect();
    if equal.is_empty() {
        return Ok(false);
    }
    let mut said = Vec::new();
    for s in &equal {
        let Form::Equal { new_file } = s.form else {
            continue;
        };
        if let Some(bare) = evidence(&unquote(&s.names.0), new_file, tree) {
            said.push(bare);
        }
    }
    if said.is_empty() {
        if sections.iter().any(|s| s.form == Form::Prefixed) {
            return Ok(false);
        }
        if sections.iter().any(|s| s.form == Form::BareRename) {
            return Ok(true);
        }
    }
    match (said.contains(&true), said.contains(&false)) {
        (true, false) => Ok(true),
        (false, true) => Ok(false),
        _ => Err(Refusal(format!(
            "its diff --git lines name each file the same on both sides (`{p} {p}`): made without prefixes (diff.noprefix, --no-prefix) or with equal ones (--src-prefix the same as --dst-prefix), and the tree does not tell which; write it again with `git format-patch` and its usual a/ and b/ prefixes",
            p = String::from_utf8_lossy(&equal[0].names.0)
        ))),
    }
}

/// What the tree says of a path `p` written the same on both sides: `Some(true)` when it has no
/// prefix (the path itself exists, or for a new file a directory above it does), `Some(false)`
/// when its first component is a prefix (the rest exists, or a directory above that does),
/// `None` when the tree says both or neither. A one-component path cannot carry a prefix. The
/// tree's root is no evidence for a new file: every reading has it.
fn evidence(p: &[u8], new_file: bool, tree: &dyn Tree) -> Option<bool> {
    let Some(slash) = p.iter().position(|b| *b == b'/') else {
        return Some(true);
    };
    let stripped = &p[slash + 1..];
    let (as_is, as_stripped) = if new_file {
        let dir = |q: &[u8]| {
            q.iter()
                .enumerate()
                .filter(|(_, b)| **b == b'/')
                .any(|(i, _)| tree.has(&q[..i]))
        };
        (dir(p), dir(stripped))
    } else {
        (tree.has(p), tree.has(stripped))
    };
    match (as_is, as_stripped) {
        (true, false) => Some(true),
        (false, true) => Some(false),
        _ => None,
    }
}

/// A line without its line ending.
fn body(line: &[u8]) -> &[u8] {
    let mut end = line.len();
    while end > 0 && matches!(line[end - 1], b'\n' | b'\r') {
        end -= 1;
    }
    &line[..end]
}

/// The value after `key` in the header, if a line has it (`rename from pkg/x.go`).
fn value(header: &[&[u8]], key: &[u8]) -> Option<Vec<u8>> {
    header
        .iter()
        .find_map(|l| body(l).strip_prefix(key).map(<[u8]>::to_vec))
}

/// `P` when `rest` is `P P`: two equal halves around the middle space.
fn equal_halves(rest: &[u8]) -> Option<&[u8]> {
    let n = rest.len();
    (n % 2 == 1 && rest[n / 2] == b' ' && rest[..n / 2] == rest[n / 2 + 1..])
        .then(|| &rest[..n / 2])
}

/// The names of a prefixed rename's `diff --git` line, `<p1><from> <p2><to>`.
fn split_rename(rest: &[u8], from: &[u8], to: &[u8]) -> (Vec<u8>, Vec<u8>) {
    let at = (0..rest.len())
        .filter(|i| rest[*i] == b' ')
        .find(|i| rest[..*i].ends_with(from) && rest[i + 1..].ends_with(to));
    match at {
        Some(i) => (rest[..i].to_vec(), rest[i + 1..].to_vec()),
        None => split_prefixed(rest),
    }
}

/// The names of a `diff --git` line whose names differ by their prefixes: quoted ones by their
/// quotes; else the space after which both names, without their first component, are the same
/// path (a path may hold spaces: git's own rule); else the first space.
fn split_prefixed(rest: &[u8]) -> (Vec<u8>, Vec<u8>) {
    if rest.first() == Some(&b'"')
        && let Some(end) = rest[1..]
            .windows(2)
            .position(|w| w == b"\" ")
            .map(|i| i + 2)
    {
        return (rest[..end].to_vec(), rest[end + 1..].to_vec());
    }
    let strip = |n: &[u8]| -> Option<Vec<u8>> {
        let n = unquote(n);
        let slash = n.iter().position(|b| *b == b'/')?;
        Some(n[slash + 1..].to_vec())
    };
    let at = (0..rest.len())
        .filter(|i| rest[*i] == b' ')
        .find(|i| strip(&rest[..*i]).is_some() && strip(&rest[..*i]) == strip(&rest[i + 1..]))
        .or_else(|| rest.iter().position(|b| *b == b' '));
    match at {
        Some(i) => (rest[..i].to_vec(), rest[i + 1..].to_vec()),
        None => (rest.to_vec(), rest.to_vec()),
    }
}

/// A quoted name (`"a/x\"y"`) without its quotes and escapes; any other as it is.
fn unquote(name: &[u8]) -> Vec<u8> {
    let Some(inner) = name.strip_prefix(b"\"").and_then(|n| n.strip_suffix(b"\"")) else {
        return name.to_vec();
    };
    let mut out = Vec::with_capacity(inner.len());
    let mut i = 0;
    while i < inner.len() {
        if inner[i] == b'\\' && i + 1 < inner.len() {
            let c = inner[i + 1];
            // `\ooo`: a byte in octal (git quotes non-ASCII bytes so).
            if c.is_ascii_digit()
                && i + 3 < inner.len()
                && let Ok(v) = u8::from_str_radix(&String::from_utf8_lossy(&inner[i + 1..i + 4]), 8)
            {
                out.push(v);
                i += 4;
                continue;
            }
            out.push(match c {
                b'n' => b'\n',
                b't' => b'\t',
                other => other,
            });
            i += 2;
            continue;
        }
        out.push(inner[i]);
        i += 1;
    }
    out
}

/// Whether `name` is unquoted and holds a space (libgit2 then cannot read it).
fn has_space(name: &[u8]) -> bool {
    name.first() != Some(&b'"') && name.contains(&b' ')
}

/// `name` with `prefix` added (inside its quotes when quoted; `/dev/null` as it is) and quoted
/// when it holds a space.
fn fix_name(name: &[u8], prefix: Option<&[u8]>) -> Vec<u8> {
    if name == b"/dev/null" {
        return name.to_vec();
    }
    let (quoted, inner) = match name.strip_prefix(b"\"") {
        Some(rest) => (true, rest.strip_suffix(b"\"").unwrap_or(rest)),
        None => (false, name),
    };
    let mut path = prefix.unwrap_or_default().to_vec();
    path.extend_from_slice(inner);
    if quoted {
        return [b"\"".as_slice(), &path, b"\""].concat();
    }
    if !path.contains(&b' ') {
        return path;
    }
    let mut out = vec![b'"'];
    for b in path {
        if matches!(b, b'"' | b'\\') {
            out.push(b'\\');
        }
        out.push(b);
    }
    out.push(b'"');
    out
}

/// A header line of section `s`, as libgit2 must read it: the names of `diff --git`, `---` and
/// `+++` lines given prefixes where the section has none (`bare`) and quoted where they hold a
/// space (git's tab after such a name dropped), `rename from`/`rename to` paths quoted likewise;
/// any other line as it is.
fn header_line(line: &[u8], s: &Section, bare: bool) -> Vec<u8> {
    let text = body(line);
    let ending = &line[text.len()..];
    let prefix = |p: &'static [u8]| bare.then_some(p);
    let new: Vec<u8> = if text.starts_with(b"diff --git ") {
        [
            b"diff --git ".as_slice(),
            &fix_name(&s.names.0, prefix(b"a/")),
            b" ",
            &fix_name(&s.names.1, prefix(b"b/")),
        ]
        .concat()
    } else if let Some(name) = text.strip_prefix(b"--- ") {
        let name = name.strip_suffix(b"\t").unwrap_or(name);
        [b"--- ".as_slice(), &fix_name(name, prefix(b"a/"))].concat()
    } else if let Some(name) = text.strip_prefix(b"+++ ") {
        let name = name.strip_suffix(b"\t").unwrap_or(name);
        [b"+++ ".as_slice(), &fix_name(name, prefix(b"b/"))].concat()
    } else if let Some(path) = text.strip_prefix(b"rename from ") {
        [b"rename from ".as_slice(), &fix_name(path, None)].concat()
    } else if let Some(path) = text.strip_prefix(b"rename to ") {
        [b"rename to ".as_slice(), &fix_name(path, None)].concat()
    } else {
        return line.to_vec();
    };
    [new.as_slice(), ending].concat()
}

/// A section git cannot be followed in: a copy, or a binary change without its data (`path` the
/// section's new name, for the message).
fn refuse(header: &[&[u8]], path: &[u8]) -> Result<(), Refusal> {
    if let (Some(from), Some(to)) = (value(header, b"copy from "), value(header, b"copy to ")) {
        return Err(Refusal(format!(
            "holds a copy (copy from {} to {}), which occm-forge cannot apply as git am does; make it without copy detection (`git format-patch` without -C or --find-copies, with diff.renames not set to copies)",
            String::from_utf8_lossy(&from),
            String::from_utf8_lossy(&to)
        )));
    }
    if header.iter().any(|l| {
        let t = body(l);
        t.starts_with(b"Binary files ") && t.ends_with(b" differ")
    }) {
        let path = unquote(path);
        let path = path
            .strip_prefix(b"b/")
            .or_else(|| path.strip_prefix(b"a/"))
            .unwrap_or(&path);
        return Err(Refusal(format!(
            "holds a binary change of {} without its data (made without --binary, or with --no-binary); make it with `git format-patch`, which writes the data",
            String::from_utf8_lossy(path)
        )));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A tree holding `pkg/openstack/instances.go` (and its directories) and `a/x.go`.
    fn tree(p: &[u8]) -> bool {
        [
            "pkg",
            "pkg/openstack",
            "pkg/openstack/instances.go",
            "a",
            "a/x.go",
        ]
        .iter()
        .any(|t| t.as_bytes() == p)
    }

    fn run(p: &str) -> Result<(String, bool), Refusal> {
        normalise(p.as_bytes(), &tree).map(|(b, c)| (String::from_utf8(b.into_owned()).unwrap(), c))
    }

    #[test]
    fn sections_without_prefixes_get_them_and_prefixed_ones_stay() {
        let bare = "Subject: x\n---\ndiff --git pkg/openstack/new.go pkg/openstack/new.go\nnew file mode 100644\n--- /dev/null\n+++ pkg/openstack/new.go\n@@ -0,0 +1 @@\n+--- not a header\n";
        assert_eq!(
            run(bare).unwrap(),
            (
                "Subject: x\n---\ndiff --git a/pkg/openstack/new.go b/pkg/openstack/new.go\nnew file mode 100644\n--- /dev/null\n+++ b/pkg/openstack/new.go\n@@ -0,0 +1 @@\n+--- not a header\n".to_string(),
                true
            )
        );
        let prefixed = "diff --git a/x.go b/x.go\n--- a/x.go\n+++ b/x.go\n@@ -1 +1 @@\n-a\n+b\n";
        assert_eq!(run(prefixed).unwrap(), (prefixed.to_string(), false));
        // The tree has `a/x.go`: a change to it without prefixes.
        let in_a = "diff --git a/x.go a/x.go\n--- a/x.go\n+++ a/x.go\n@@ -1 +1 @@\n-a\n+b\n";
        assert_eq!(
            run(in_a).unwrap().0,
            "diff --git a/a/x.go b/a/x.go\n--- a/a/x.go\n+++ b/a/x.go\n@@ -1 +1 @@\n-a\n+b\n"
        );
    }

    #[test]
    fn equal_custom_prefixes_are_told_by_the_tree_or_refused() {
        // --src-prefix=x/ --dst-prefix=x/: the tree has pkg/openstack, not x/pkg/openstack.
        let equal = "diff --git x/pkg/openstack/instances.go x/pkg/openstack/instances.go\n--- x/pkg/openstack/instances.go\n+++ x/pkg/openstack/instances.go\n@@ -1 +1 @@\n-a\n+b\n";
        assert_eq!(run(equal).unwrap(), (equal.to_string(), false));
        let new_in_pkg = "diff --git x/pkg/openstack/extra.go x/pkg/openstack/extra.go\nnew file mode 100644\n--- /dev/null\n+++ x/pkg/openstack/extra.go\n@@ -0,0 +1 @@\n+x\n";
        assert!(!run(new_in_pkg).unwrap().1);
        // A new file in a new directory: either reading is possible.
        let unknown = "diff --git docs/new.md docs/new.md\nnew file mode 100644\n--- /dev/null\n+++ docs/new.md\n@@ -0,0 +1 @@\n+x\n";
        assert!(run(unknown).unwrap_err().0.starts_with(
            "its diff --git lines name each file the same on both sides (`docs/new.md docs/new.md`)"
        ));
        // A one-component path has no room for a prefix.
        let top = "diff --git new.md new.md\nnew file mode 100644\n--- /dev/null\n+++ new.md\n@@ -0,0 +1 @@\n+x\n";
        assert!(run(top).unwrap().1);
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
    fn names_with_spaces_are_quoted_and_other_bytes_kept() {
        let spaced = "diff --git a/pkg/with space.go b/pkg/with space.go\nnew file mode 100644\n--- /dev/null\n+++ b/pkg/with space.go\t\n@@ -0,0 +1 @@\n+x\n";
        assert_eq!(
            run(spaced).unwrap(),
            (
                "diff --git \"a/pkg/with space.go\" \"b/pkg/with space.go\"\nnew file mode 100644\n--- /dev/null\n+++ \"b/pkg/with space.go\"\n@@ -0,0 +1 @@\n+x\n".to_string(),
                false
            )
        );
        let latin1 = b"diff --git pkg/openstack/caf\xe9.txt pkg/openstack/caf\xe9.txt\nnew file mode 100644\n--- /dev/null\n+++ pkg/openstack/caf\xe9.txt\n@@ -0,0 +1 @@\n+x\n";
        let (out, bare) = normalise(latin1, &tree).unwrap();
        assert!(bare);
        assert!(
            out.windows(b"+++ b/pkg/openstack/caf\xe9.txt\n".len())
                .any(|w| w == b"+++ b/pkg/openstack/caf\xe9.txt\n")
        );
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
        let binary = "diff --git a/d/x and y.bin b/d/x and y.bin\nnew file mode 100644\nindex 0000000..1111111\nBinary files /dev/null and b/d/x and y.bin differ\n";
        assert!(
            run(binary)
                .unwrap_err()
                .0
                .starts_with("holds a binary change of d/x and y.bin without its data")
        );
        let terse = "diff --git a/b.bin b/b.bin\nBinary files differ\n";
        assert!(
            run(terse)
                .unwrap_err()
                .0
                .contains("of b.bin without its data")
        );
        let with_data = "diff --git a/d/b.bin b/d/b.bin\nnew file mode 100644\nindex 0000000..1111111\nGIT binary patch\nliteral 9\nQcmZQzWMXAvWa8ih0058G0RR91\n\nliteral 0\nHcmV?d00001\n\n";
        assert!(run(with_data).is_ok());
    }
}
