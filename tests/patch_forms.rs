//! Patches read as `git am` reads them, and never misplaced: every form `git format-patch`
//! writes — a new file, a rename, a copy, a mode change, a binary file — applies to the same
//! tree as real `git am` gives (the reference), and a patch made without `a/`/`b/` prefixes
//! (`diff.noprefix`, `format-patch --no-prefix`; jesseduffield/lazygit#3107, pulumi/ci-mgmt#697)
//! applies at the paths its `diff --git` lines name, where `git am`'s `-p1` would strip a
//! directory (a new `pkg/openstack/extra.go` at `openstack/extra.go`). What cannot be applied as
//! `git am` applies it is refused in one line saying what the patch holds.

use crate::common;

use std::path::{Path, PathBuf};

use common::*;
use occm_forge_core::pipeline::patches::{self, PatchFile, PatchOutcome};

/// A clone of the fixture upstream checked out at v1.34.1.
fn clone_at_v1_34(f: &Fixture, name: &str) -> PathBuf {
    let dir = f.path().join(name);
    run(git(f.path())
        .args(["clone", "-q"])
        .arg(&f.upstream)
        .arg(&dir));
    run(git(&dir).args(["checkout", "-q", "v1.34.1"]));
    dir
}

/// Commits on v1.34.1, one per change (run in a work tree), as `git format-patch` writes them
/// with `args` (`--no-prefix`, `-M`, `-C`, …); with `prefixed`, the same commits written with
/// the default `a/` and `b/` prefixes (the patch its author meant).
fn patches_of(
    f: &Fixture,
    name: &str,
    args: &[&str],
    changes: &[&dyn Fn(&Path)],
) -> (Vec<PatchFile>, Vec<PatchFile>) {
    let dir = clone_at_v1_34(f, &format!("make-{name}"));
    for (i, change) in changes.iter().enumerate() {
        change(&dir);
        run(git(&dir).args(["add", "-A"]));
        run(git(&dir).args(["commit", "-q", "-m", &format!("{name} {i}")]));
    }
    let n = changes.len().to_string();
    let series = |args: &[&str]| -> Vec<PatchFile> {
        let out = f.path().join(format!("series-{name}-{}", args.join("")));
        run(git(&dir)
            .args(["format-patch", "-q", "-o"])
            .arg(&out)
            .arg(format!("-{n}"))
            .args(args));
        let mut files: Vec<PathBuf> = std::fs::read_dir(&out)
            .unwrap()
            .map(|e| e.unwrap().path())
            .collect();
        files.sort();
        files
            .iter()
            .map(|p| PatchFile {
                name: p.file_name().unwrap().to_string_lossy().into_owned(),
                bytes: std::fs::read(p).unwrap(),
            })
            .collect()
    };
    let plain: Vec<&str> = args
        .iter()
        .copied()
        .filter(|a| *a != "--no-prefix")
        .collect();
    (series(args), series(&plain))
}

/// The tree `git am` makes of `series` on v1.34.1 (or its error), and the tree occm-forge makes
/// (or its one-line error).
fn trees(
    f: &Fixture,
    tag: &str,
    series: &[PatchFile],
) -> (Result<String, String>, Result<String, String>) {
    let by_git = clone_at_v1_34(f, &format!("git-am-{tag}"));
    let files: Vec<PathBuf> = series
        .iter()
        .map(|p| {
            let file = f.path().join(format!("{tag}-{}", p.name));
            std::fs::write(&file, &p.bytes).unwrap();
            file
        })
        .collect();
    let am = git(&by_git)
        .args(["am", "-q"])
        .args(&files)
        .output()
        .unwrap();
    let git_tree = if am.status.success() {
        Ok(run(git(&by_git).args(["rev-parse", "HEAD^{tree}"])))
    } else {
        Err(String::from_utf8_lossy(&am.stderr).into_owned())
    };
    let ours = clone_at_v1_34(f, &format!("ours-{tag}"));
    let our_tree = match patches::apply_series(&ours, series, 0) {
        Ok(applied) => {
            assert!(
                applied
                    .iter()
                    .all(|a| matches!(a.outcome, PatchOutcome::Applied(_))),
                "{applied:?}"
            );
            Ok(run(git(&ours).args(["rev-parse", "HEAD^{tree}"])))
        }
        Err(e) => Err(e.to_string()),
    };
    (git_tree, our_tree)
}

fn write(dir: &Path, path: &str, bytes: &[u8]) {
    let p = dir.join(path);
    std::fs::create_dir_all(p.parent().unwrap()).unwrap();
    std::fs::write(p, bytes).unwrap();
}

fn new_file(dir: &Path) {
    write(
        dir,
        "pkg/openstack/extra.go",
        b"package openstack\n\nconst Extra = 1\n",
    );
}

fn edit_and_add(dir: &Path) {
    let text = std::fs::read_to_string(dir.join(INSTANCES)).unwrap();
    std::fs::write(
        dir.join(INSTANCES),
        text.replace(FIXED_LOOKUP.0, FIXED_LOOKUP.1),
    )
    .unwrap();
    new_file(dir);
}

/// A case: its name, `git format-patch`'s options, the changes (one commit each).
type Case<'a> = (&'a str, Vec<&'a str>, Vec<&'a dyn Fn(&Path)>);

fn mode(dir: &Path) {
    use std::os::unix::fs::PermissionsExt;
    let p = dir.join("pkg/version/version.go");
    std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o755)).unwrap();
}

fn rename(dir: &Path) {
    std::fs::create_dir_all(dir.join("docs")).unwrap();
    std::fs::rename(dir.join("README.md"), dir.join("docs/README.md")).unwrap();
}

fn rename_and_edit(dir: &Path) {
    std::fs::rename(dir.join(INSTANCES), dir.join("pkg/openstack/servers.go")).unwrap();
    let text = std::fs::read_to_string(dir.join("pkg/openstack/servers.go")).unwrap();
    std::fs::write(
        dir.join("pkg/openstack/servers.go"),
        text.replace(FIXED_LOOKUP.0, FIXED_LOOKUP.1),
    )
    .unwrap();
}

fn copy(dir: &Path) {
    std::fs::copy(
        dir.join(INSTANCES),
        dir.join("pkg/openstack/instances_copy.go"),
    )
    .unwrap();
}

fn binary(dir: &Path) {
    write(
        dir,
        "pkg/openstack/testdata/blob.bin",
        &[0, 1, 2, 3, 255, 0, 7, 8, 9],
    );
}

fn binary_edit(dir: &Path) {
    write(
        dir,
        "pkg/openstack/testdata/blob.bin",
        &[0, 1, 2, 3, 254, 0, 7, 8, 9, 10],
    );
}

fn spaced(dir: &Path) {
    write(
        dir,
        "pkg/openstack/with space.go",
        b"package openstack\n\nconst Spaced = 1\n",
    );
}

fn rename_to_spaced(dir: &Path) {
    std::fs::rename(
        dir.join("pkg/version/version.go"),
        dir.join("pkg/version/v ersion.go"),
    )
    .unwrap();
}

fn latin1_name(dir: &Path) {
    use std::os::unix::ffi::OsStrExt;
    let name = std::ffi::OsStr::from_bytes(b"pkg/openstack/testdata/caf\xe9.txt");
    let p = dir.join(name);
    std::fs::create_dir_all(p.parent().unwrap()).unwrap();
    std::fs::write(p, b"latin-1\n").unwrap();
}

fn delete(dir: &Path) {
    std::fs::remove_file(dir.join("README.md")).unwrap();
}

#[test]
fn every_form_format_patch_writes_applies_as_git_am_applies_it() {
    let f = fixture(&["linux/amd64"]);
    let cases: Vec<Case> = vec![
        ("new-file", vec![], vec![&new_file]),
        ("edit-and-new-file", vec![], vec![&edit_and_add]),
        ("delete", vec![], vec![&delete]),
        ("mode-change", vec![], vec![&mode]),
        ("rename", vec!["-M"], vec![&rename]),
        ("rename-and-edit", vec!["-M"], vec![&rename_and_edit]),
        ("binary", vec!["--binary"], vec![&binary]),
        ("binary-edit", vec!["--binary"], vec![&binary, &binary_edit]),
        ("spaced-name", vec![], vec![&spaced]),
        ("rename-to-spaced-name", vec!["-M"], vec![&rename_to_spaced]),
        // --src-prefix = --dst-prefix: names equal on both sides, the tree tells the prefix.
        (
            "equal-prefixes",
            vec!["--src-prefix=x/", "--dst-prefix=x/"],
            vec![&edit_and_add],
        ),
    ];
    for (name, args, changes) in cases {
        let (series, _) = patches_of(&f, name, &args, &changes);
        let (git_tree, our_tree) = trees(&f, name, &series);
        assert!(git_tree.is_ok(), "{name}: git am: {git_tree:?}");
        assert_eq!(our_tree, git_tree, "{name}");
    }
}

/// Without prefixes, each applies at the paths its author changed: the tree `git am` gives of
/// the same commits written with prefixes. `git am` itself misplaces the new file (exit 0) or
/// fails on the others; occm-forge did the same before.
#[test]
fn a_patch_without_prefixes_applies_at_its_real_paths() {
    let f = fixture(&["linux/amd64"]);
    let cases: Vec<Case> = vec![
        ("new-file", vec!["--no-prefix"], vec![&new_file]),
        (
            "edit-and-new-file",
            vec!["--no-prefix"],
            vec![&edit_and_add],
        ),
        ("delete", vec!["--no-prefix"], vec![&delete]),
        ("mode-change", vec!["--no-prefix"], vec![&mode]),
        (
            "rename-and-edit",
            vec!["--no-prefix", "-M"],
            vec![&rename_and_edit],
        ),
        ("binary", vec!["--no-prefix", "--binary"], vec![&binary]),
        ("not-utf-8-name", vec!["--no-prefix"], vec![&latin1_name]),
    ];
    for (name, args, changes) in cases {
        let (bare, prefixed) = patches_of(&f, name, &args, &changes);
        assert!(
            String::from_utf8_lossy(&bare[0].bytes).contains("\n+++ pkg/")
                || !String::from_utf8_lossy(&bare[0].bytes).contains("+++ b/"),
            "{name}: not a patch without prefixes"
        );
        let (meant, _) = trees(&f, &format!("{name}-prefixed"), &prefixed);
        let (git_am, ours) = trees(&f, &format!("{name}-bare"), &bare);
        assert!(meant.is_ok(), "{meant:?}");
        assert_ne!(
            git_am, meant,
            "{name}: git am applied it where it was meant to go"
        );
        assert_eq!(ours, meant, "{name}");
    }
}

/// What libgit2 cannot apply as `git am` does is refused in one line naming what the patch
/// holds and how to make one that applies: a copy (libgit2 applies `copy from`/`copy to` as a
/// rename, deleting the original), and a binary change made without `--binary`.
#[test]
fn a_copy_and_a_binary_change_without_its_data_are_refused_saying_so() {
    let f = fixture(&["linux/amd64"]);
    let (series, _) = patches_of(&f, "copy", &["-C", "--find-copies-harder"], &[&copy]);
    let (git_am, ours) = trees(&f, "copy", &series);
    assert!(git_am.is_ok(), "{git_am:?}");
    let e = ours.unwrap_err();
    assert_eq!(
        e,
        format!(
            "patch {}: holds a copy (copy from {INSTANCES} to pkg/openstack/instances_copy.go), which occm-forge cannot apply as git am does; make it without copy detection (`git format-patch` without -C or --find-copies, with diff.renames not set to copies)",
            series[0].name
        )
    );

    // `git diff` without --binary writes only that the files differ.
    let (series, _) = patches_of(&f, "binary-no-data", &["--no-binary"], &[&binary]);
    let (git_am, ours) = trees(&f, "binary-no-data", &series);
    assert!(
        git_am.is_err(),
        "git am applied a binary patch without data"
    );
    let e = ours.unwrap_err();
    assert_eq!(
        e,
        format!(
            "patch {}: holds a binary change of pkg/openstack/testdata/blob.bin without its data (made without --binary, or with --no-binary); make it with `git format-patch`, which writes the data",
            series[0].name
        )
    );
}
