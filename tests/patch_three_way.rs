//! A patch whose context upstream edited applies three-way, as `git am -3` applies it: the blob
//! its `index` line names is patched and merged with the file as upstream has it now; the
//! outcome says so per file. A patch whose own lines upstream changed still does not apply,
//! naming the file and the conflict.

use crate::common;

use std::path::Path;

use common::*;
use occm_forge_core::pipeline::patches::{self, PatchError, PatchFile, PatchOutcome};

fn lines(n: usize, edit: &[(usize, &str)]) -> String {
    (1..=n)
        .map(|i| {
            edit.iter()
                .find(|(at, _)| *at == i)
                .map_or(format!("line {i}\n"), |(_, t)| format!("{t}\n"))
        })
        .collect()
}

/// An upstream repository with `main.go` at `v1`, a patch made against `v1` that edits line 15,
/// and a clone of upstream at `v2`, where upstream wrote `upstream_edit` into main.go.
fn setup(dir: &Path, upstream_edit: (usize, &str)) -> (std::path::PathBuf, PatchFile) {
    setup_adding(dir, upstream_edit, None)
}

/// [`setup`], the patch also adding `adds` (path, content).
fn setup_adding(
    dir: &Path,
    upstream_edit: (usize, &str),
    adds: Option<(&str, &str)>,
) -> (std::path::PathBuf, PatchFile) {
    let up = dir.join("upstream");
    std::fs::create_dir_all(&up).unwrap();
    run(git(&up).args(["init", "-q", "-b", "main"]));
    std::fs::write(up.join("main.go"), lines(30, &[])).unwrap();
    run(git(&up).args(["add", "-A"]));
    run(git(&up).args(["commit", "-q", "-m", "v1"]));
    run(git(&up).args(["checkout", "-q", "-b", "downstream"]));
    std::fs::write(up.join("main.go"), lines(30, &[(15, "line 15 patched")])).unwrap();
    if let Some((path, text)) = adds {
        std::fs::create_dir_all(up.join(path).parent().unwrap()).unwrap();
        std::fs::write(up.join(path), text).unwrap();
    }
    run(git(&up).args(["add", "-A"]));
    run(git(&up).args(["commit", "-q", "-m", "patch line 15"]));
    let text = run(git(&up).args(["format-patch", "-1", "--stdout"]));
    run(git(&up).args(["checkout", "-q", "main"]));
    std::fs::write(up.join("main.go"), lines(30, &[upstream_edit])).unwrap();
    run(git(&up).args(["commit", "-q", "-am", "v2"]));
    run(git(&up).args(["branch", "-q", "-D", "downstream"]));
    let tree = dir.join("tree");
    run(git(dir).args(["clone", "-q"]).arg(&up).arg(&tree));
    (
        tree,
        PatchFile {
            name: "0003-patch-line-15.patch".into(),
            bytes: text.into_bytes(),
        },
    )
}

#[test]
fn a_patch_whose_context_upstream_edited_applies_three_way() {
    let dir = tempfile::tempdir().unwrap();
    // Line 13 is in the patch's context (lines 12 to 18).
    let (tree, patch) = setup(dir.path(), (13, "line 13 upstream"));
    let applied = patches::apply_series(&tree, &[patch], 0).unwrap();
    let PatchOutcome::AppliedThreeWay { commit, files } = &applied[0].outcome else {
        panic!("not three-way: {:?}", applied[0].outcome);
    };
    assert_eq!(commit.len(), 40);
    assert_eq!(files.len(), 1, "{files:?}");
    assert!(
        files[0].starts_with("main.go: 1 hunk merged with upstream's changes since blob "),
        "{files:?}"
    );
    assert_eq!(
        std::fs::read_to_string(tree.join("main.go")).unwrap(),
        lines(30, &[(13, "line 13 upstream"), (15, "line 15 patched")])
    );
    // Committed: the work tree is clean and HEAD carries the patch's subject.
    assert_eq!(run(git(&tree).args(["status", "--porcelain"])), "");
    assert_eq!(
        run(git(&tree).args(["log", "-1", "--format=%s"])).trim(),
        "patch line 15"
    );
}

/// Upstream's patch 0003 adds main_test.go beside its change to main.go: the added file is
/// taken as it is, the changed one merged.
#[test]
fn a_patch_that_also_adds_a_file_applies_three_way() {
    let dir = tempfile::tempdir().unwrap();
    let (tree, patch) = setup_adding(
        dir.path(),
        (13, "line 13 upstream"),
        Some(("cmd/main_test.go", "package main\n")),
    );
    let applied = patches::apply_series(&tree, &[patch], 0).unwrap();
    let PatchOutcome::AppliedThreeWay { files, .. } = &applied[0].outcome else {
        panic!("not three-way: {:?}", applied[0].outcome);
    };
    assert_eq!(files.len(), 1, "only the merged file is named: {files:?}");
    assert!(files[0].starts_with("main.go: 1 hunk merged"), "{files:?}");
    assert_eq!(
        std::fs::read_to_string(tree.join("cmd/main_test.go")).unwrap(),
        "package main\n"
    );
    assert_eq!(run(git(&tree).args(["status", "--porcelain"])), "");
    assert_eq!(
        run(git(&tree).args(["show", "--stat", "--format=", "HEAD"]))
            .lines()
            .count(),
        3,
        "main.go and main_test.go committed"
    );
}

#[test]
fn a_patch_whose_own_line_upstream_changed_still_does_not_apply() {
    let dir = tempfile::tempdir().unwrap();
    let (tree, patch) = setup(dir.path(), (15, "line 15 upstream"));
    let err = patches::apply_series(&tree, &[patch], 0).unwrap_err();
    assert!(
        matches!(&err, PatchError::DoesNotApply { file, .. } if file == "main.go"),
        "{err}"
    );
    assert_eq!(run(git(&tree).args(["status", "--porcelain"])), "");
}

#[test]
fn a_patch_whose_context_only_moved_applies_and_says_by_how_many_lines() {
    let dir = tempfile::tempdir().unwrap();
    // Upstream adds two lines above the hunk (lines 12 to 18): `git apply` calls that an offset;
    // libgit2 applies a hunk only at its recorded line.
    let (tree, patch) = setup(dir.path(), (2, "line 2\nupstream adds a line\nand another"));
    let applied = patches::apply_series(&tree, &[patch], 0).unwrap();
    let PatchOutcome::AppliedThreeWay { files, .. } = &applied[0].outcome else {
        panic!("not three-way: {:?}", applied[0].outcome);
    };
    assert_eq!(files, &["main.go: context moved by 2 lines"]);
    let text = std::fs::read_to_string(tree.join("main.go")).unwrap();
    assert_eq!(text.lines().nth(16), Some("line 15 patched"), "{text}");
}
