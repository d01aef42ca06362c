//! The `go` line of upstream's go.mod against the Go images.toml pins, checked before any Go
//! process runs: with `GOTOOLCHAIN=go<pinned>` the go command refuses a module that requires a
//! newer Go (`go.mod requires go >= 1.26.9 (running go 1.26.8; GOTOOLCHAIN=go1.26.8)`), which
//! would otherwise surface as failed tests. ("Go toolchains", go.dev/doc/toolchain: the `go`
//! line is a minimum requirement.)

use std::path::Path;

use git2::Oid;

use super::release::GoRelease;
use crate::pipeline::patches::PatchFile;

/// The Go release a go.mod's `go` line requires (`go 1.22` → 1.22.0, `go 1.26.9` → 1.26.9);
/// `None` without one, or for a pre-release (`go 1.27rc1`).
pub fn required(go_mod: &str) -> Option<GoRelease> {
    go_mod.lines().find_map(|l| {
        let l = l.split("//").next().unwrap_or("").trim();
        GoRelease::parse_lenient(l.strip_prefix("go ")?.trim()).ok()
    })
}

/// The `go` lines a patch writes into go.mod (the `+go …` lines of its go.mod hunks).
fn written_by(patch: &PatchFile) -> Option<GoRelease> {
    let text = String::from_utf8_lossy(&patch.bytes);
    let mut in_go_mod = false;
    let mut newest: Option<GoRelease> = None;
    for line in text.lines() {
        if let Some(rest) = line.strip_prefix("diff --git ") {
            in_go_mod = rest.ends_with(" b/go.mod");
        } else if in_go_mod
            && let Some(go) = line.strip_prefix("+go ")
            && let Ok(r) = GoRelease::parse_lenient(go.trim())
        {
            newest = newest.max(Some(r));
        }
    }
    newest
}

/// Checks that Go `pinned` satisfies the `go` line of upstream's go.mod at `upstream_commit` (in
/// the work tree's repository `dir`) and of every patch of `series` that writes one. Returns the
/// one-line cause otherwise, naming the requirement, where it came from (the upstream tag or the
/// patch) and the pinned Go.
pub fn check(
    dir: &Path,
    upstream_commit: &str,
    upstream_tag: &str,
    series: &[PatchFile],
    pinned: &str,
) -> Result<(), String> {
    let Ok(pinned_release) = pinned.parse::<GoRelease>() else {
        return Ok(());
    };
    let too_new = |need: GoRelease, from: &str| {
        format!(
            "go.mod requires go >= {need} ({from}), but images.toml pins go {pinned}: move the minor to a Go that has it (`occm-forge pin --k8s <minor> --go {need}` or newer, docs/building.md, \"Go versions\")"
        )
    };
    let upstream_go_mod = crate::base::git::open(dir).ok().and_then(|repo| {
        let commit = repo
            .find_commit(Oid::from_str(upstream_commit).ok()?)
            .ok()?;
        let entry = commit.tree().ok()?.get_path(Path::new("go.mod")).ok()?;
        let blob = repo.find_blob(entry.id()).ok()?;
        Some(String::from_utf8_lossy(blob.content()).into_owned())
    });
    if let Some(need) = upstream_go_mod.as_deref().and_then(required)
        && need > pinned_release
    {
        return Err(too_new(need, &format!("upstream tag {upstream_tag}")));
    }
    for patch in series {
        if let Some(need) = written_by(patch)
            && need > pinned_release
        {
            return Err(too_new(need, &format!("patch {}", patch.name)));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_go_line_is_read_from_go_mod_and_from_patches() {
        assert_eq!(
            required("module x\n\ngo 1.22 // old\n\nrequire y v1\n"),
            Some("1.22.0".parse().unwrap())
        );
        assert_eq!(
            required("module x\ngo 1.26.9\n"),
            Some("1.26.9".parse().unwrap())
        );
        assert_eq!(required("module x\ngo 1.27rc1\n"), None);
        assert_eq!(required("module x\n"), None);
        let patch = PatchFile {
            name: "0005-x.patch".into(),
            bytes: b"diff --git a/go.mod b/go.mod\n--- a/go.mod\n+++ b/go.mod\n@@ -1,3 +1,3 @@\n module x\n-go 1.25.0\n+go 1.26.9\ndiff --git a/x.go b/x.go\n+go 1.99.0\n".to_vec(),
        };
        assert_eq!(written_by(&patch), Some("1.26.9".parse().unwrap()));
    }
}
