//! Patch files with Windows line endings (a `core.autocrlf=true` checkout of patches/): the
//! series applies as `git am` applies it (real `git am` is the reference: same tree), the series
//! sha256 stays over the file bytes as they are, and a patch that still does not apply says its
//! lines end in CRLF.

use crate::common;

use std::path::Path;

use common::*;
use occm_forge_core::pipeline::patches::{self, PatchError, PatchFile, PatchOutcome};

/// A clone of the fixture upstream checked out at `tag`.
fn clone_at(f: &Fixture, tag: &str, dir: &Path) {
    run(git(f.path())
        .args(["clone", "-q"])
        .arg(&f.upstream)
        .arg(dir));
    run(git(dir).args(["checkout", "-q", tag]));
}

/// The fixture series with every `\n` turned into `\r\n`, as autocrlf checks it out.
fn crlf_series(f: &Fixture) -> Vec<PatchFile> {
    [PATCH_TEST, PATCH_FIX]
        .iter()
        .map(|name| {
            let lf = std::fs::read_to_string(f.patches.join(name)).unwrap();
            PatchFile {
                name: name.to_string(),
                bytes: lf.replace('\n', "\r\n").into_bytes(),
            }
        })
        .collect()
}

#[test]
fn crlf_patch_files_apply_like_git_am() {
    let f = fixture(&["linux/amd64"]);
    let series = crlf_series(&f);
    let dir = f.path().join("crlf");
    std::fs::create_dir_all(&dir).unwrap();
    let mut files = Vec::new();
    for p in &series {
        let path = dir.join(&p.name);
        std::fs::write(&path, &p.bytes).unwrap();
        files.push(path);
    }

    // The reference: git am applies the CRLF files.
    let by_git = f.path().join("by-git-am");
    clone_at(&f, "v1.34.1", &by_git);
    run(git(&by_git).args(["am", "-q"]).args(&files));
    let git_tree = run(git(&by_git).args(["rev-parse", "HEAD^{tree}"]));

    let ours = f.path().join("by-occm-forge");
    clone_at(&f, "v1.34.1", &ours);
    let applied = patches::apply_series(&ours, &series, 0)
        .unwrap_or_else(|e| panic!("the CRLF series does not apply: {e}"));
    assert!(
        applied
            .iter()
            .all(|p| matches!(p.outcome, PatchOutcome::Applied(_))),
        "{applied:?}"
    );
    let our_tree = run(git(&ours).args(["rev-parse", "HEAD^{tree}"]));
    assert_eq!(our_tree, git_tree, "the tree differs from git am's");

    // The recorded hashes are over the files as they are on disk.
    let loaded = patches::load_series(&dir, &[PATCH_TEST.into(), PATCH_FIX.into()]).unwrap();
    assert_eq!(loaded[1].sha256(), sha256_hex(&series[1].bytes));
    assert_eq!(applied[1].sha256, sha256_hex(&series[1].bytes));
    assert_ne!(
        patches::series_sha256(&loaded),
        patches::series_sha256(
            &patches::load_series(&f.patches, &[PATCH_TEST.into(), PATCH_FIX.into()]).unwrap()
        ),
        "the series sha256 must be over the bytes as they are"
    );
}

#[test]
fn patch_with_crlf_content_lines_that_does_not_apply_names_the_line_endings() {
    let f = fixture(&["linux/amd64"]);
    // LF headers, CRLF hunk lines: not an autocrlf checkout, and the tree's file has LF lines.
    let lf = std::fs::read_to_string(f.patches.join(PATCH_FIX)).unwrap();
    let mixed: String = lf
        .split_inclusive('\n')
        .map(|l| {
            if l.starts_with([' ', '+', '-']) && !l.starts_with("---") && !l.starts_with("+++") {
                l.replace('\n', "\r\n")
            } else {
                l.to_string()
            }
        })
        .collect();
    let series = vec![
        PatchFile {
            name: PATCH_TEST.into(),
            bytes: std::fs::read(f.patches.join(PATCH_TEST)).unwrap(),
        },
        PatchFile {
            name: PATCH_FIX.into(),
            bytes: mixed.into_bytes(),
        },
    ];
    let tree = f.path().join("tree");
    clone_at(&f, "v1.34.1", &tree);
    let e = patches::apply_series(&tree, &series, 0).unwrap_err();
    assert!(matches!(e, PatchError::DoesNotApply { .. }), "{e}");
    let msg = e.to_string();
    assert!(
        msg.starts_with(&format!(
            "patch {PATCH_FIX} does not apply: pkg/openstack/instances.go, hunk 1"
        )) && msg.contains("of its lines end in CRLF"),
        "{msg}"
    );
}

#[test]
fn crlf_checkout_of_a_patch_whose_context_does_not_match_names_the_line_endings() {
    let f = fixture(&["linux/amd64"]);
    let mut series = crlf_series(&f);
    // A real context mismatch in the CRLF fix patch: its first context line is changed.
    let text = String::from_utf8(series[1].bytes.clone()).unwrap();
    let mut in_hunk = false;
    let mut changed = false;
    let broken: String = text
        .split_inclusive('\n')
        .map(|l| {
            in_hunk |= l.starts_with("@@");
            if in_hunk && !changed && l.starts_with(' ') && l.trim().len() > 3 {
                changed = true;
                format!(" // not upstream{}", &l[1..])
            } else {
                l.to_string()
            }
        })
        .collect();
    assert!(changed);
    series[1].bytes = broken.into_bytes();
    let tree = f.path().join("tree");
    clone_at(&f, "v1.34.1", &tree);
    let e = patches::apply_series(&tree, &series, 0).unwrap_err();
    assert!(matches!(e, PatchError::DoesNotApply { .. }), "{e}");
    let msg = e.to_string();
    assert!(msg.contains("of its lines end in CRLF"), "{msg}");
}
