//! Refreshing the series on a new upstream tree, as a release engineer does it:
//! `patches edit` lays the series out as commits on the minor's tag (three-way where upstream
//! moved the context, stopping with markers where it changed the patched lines), `--continue`
//! commits a resolution, and `patches export` writes the series back: an unchanged series changes
//! no byte, a changed patch shared with other minors becomes the minor's own variant. What
//! `export` refuses leaves patches/ and images.toml as they were.

use crate::common;

use std::path::{Path, PathBuf};
use std::process::Output;

use common::*;

fn forge(f: &Fixture, args: &[&str]) -> Output {
    occm_forge(f.path())
        .args(args)
        .args(["--k8s", "1.34", "--dir"])
        .arg(edit_dir(f))
        .output()
        .unwrap()
}

fn edit(f: &Fixture, extra: &[&str]) -> Output {
    let mut args = vec!["patches", "edit", "--source"];
    let up = f.upstream.to_str().unwrap();
    args.push(up);
    args.extend_from_slice(extra);
    forge(f, &args)
}

fn export(f: &Fixture) -> Output {
    forge(f, &["patches", "export"])
}

fn edit_dir(f: &Fixture) -> PathBuf {
    f.path().join("edit-1.34")
}

/// Every file of patches/ and images.toml, by name, with its bytes.
fn inputs(f: &Fixture) -> Vec<(String, Vec<u8>)> {
    let mut out: Vec<(String, Vec<u8>)> = std::fs::read_dir(&f.patches)
        .unwrap()
        .map(|e| e.unwrap().path())
        .chain([f.config.clone()])
        .map(|p| {
            (
                p.file_name().unwrap().to_string_lossy().into_owned(),
                std::fs::read(&p).unwrap(),
            )
        })
        .collect();
    out.sort();
    out
}

fn ok(o: &Output) {
    assert!(o.status.success(), "{}{}", stdout(o), stderr(o));
}

fn variant() -> String {
    PATCH_FIX.replace(".patch", ".k8s-1.34.patch")
}

fn log(dir: &Path, since: &str) -> String {
    run(git(dir).args(["log", "--format=%an <%ae> %s", &format!("{since}..HEAD")]))
}

/// Upstream v1.34.2 edits the comment two lines below the fix's changed line (in the fix
/// patch's context).
fn release_moving_the_context(f: &Fixture) {
    f.release_1_34_2(
        "// InstanceExists reports whether a server named name exists.",
        "// InstanceExists reports whether a server with that name exists.",
    );
}

/// Upstream v1.34.2 changes the very line the fix changes.
fn release_changing_the_fixed_line(f: &Fixture) {
    f.release_1_34_2(
        "\treturn ErrNotFound\n}",
        "\treturn ErrNotFound // nothing by that name\n}",
    );
}

/// Resolves the fix's conflict in the work tree `dir`: upstream's comment, the patch's change,
/// in place of the markers (not staged).
fn resolve(dir: &Path) {
    let text = std::fs::read_to_string(dir.join(INSTANCES)).unwrap();
    let ours = text.split("<<<<<<< HEAD\n").next().unwrap();
    let rest = text
        .split(&format!(">>>>>>> {PATCH_FIX}\n"))
        .nth(1)
        .unwrap();
    std::fs::write(
        dir.join(INSTANCES),
        format!("{ours}\treturn InstanceNotFound // nothing by that name\n{rest}"),
    )
    .unwrap();
}

#[test]
fn an_unchanged_series_is_laid_out_and_exported_without_changing_a_byte() {
    let f = fixture(&["linux/amd64"]);
    let before = inputs(&f);
    let o = edit(&f, &[]);
    ok(&o);
    let out = stdout(&o);
    assert!(out.contains(&format!("{PATCH_FIX}  applied")), "{out}");
    assert!(
        out.contains("occm-forge patches export --k8s 1.34"),
        "{out}"
    );
    let dir = edit_dir(&f);
    // One commit per patch on the branch, with each patch's author and subject.
    assert_eq!(
        run(git(&dir).args(["rev-parse", "--abbrev-ref", "HEAD"])).trim(),
        "occm-forge/1.34"
    );
    let subjects = run(git(&dir).args(["log", "--format=%s", "--reverse", "v1.34.1..HEAD"]));
    assert_eq!(
        subjects,
        "openstack: add InstanceExists regression test\nopenstack: treat a missing server as InstanceNotFound\n"
    );
    let o = export(&f);
    ok(&o);
    assert!(
        stdout(&o).contains("No patch of 1.34 changed."),
        "{}",
        stdout(&o)
    );
    assert_eq!(inputs(&f), before, "an unchanged series changed bytes");
    // Again: still nothing.
    ok(&export(&f));
    assert_eq!(inputs(&f), before);
    // An edit under way is not laid out again without --restart.
    let o = edit(&f, &[]);
    assert_eq!(o.status.code(), Some(2), "{}", stderr(&o));
    assert!(
        stderr(&o).contains("an edit of 1.34 is under way"),
        "{}",
        stderr(&o)
    );
    ok(&edit(&f, &["--restart"]));
}

#[test]
fn a_moved_context_applies_three_way_and_exports_the_minors_own_refreshed_patch() {
    let f = fixture(&["linux/amd64"]);
    release_moving_the_context(&f);
    let before = inputs(&f);
    let o = edit(&f, &[]);
    ok(&o);
    let out = stdout(&o);
    assert!(
        out.contains(&format!(
            "{PATCH_FIX}  applied three-way ({INSTANCES}: 1 hunk merged"
        )),
        "{out}"
    );
    let o = export(&f);
    ok(&o);
    let out = stdout(&o);
    assert!(
        out.contains(&format!("patches/{PATCH_TEST}  unchanged")),
        "{out}"
    );
    assert!(
        out.contains(&format!(
            "patches/{}  written: 1.34's own variant ({PATCH_FIX} stays for 1.33, 1.35)",
            variant()
        )),
        "{out}"
    );
    // The shared files keep every byte; the variant is new; images.toml lists it for 1.34 only.
    let after = inputs(&f);
    for (name, bytes) in &before {
        if name != "images.toml" {
            assert_eq!(after.iter().find(|(n, _)| n == name).unwrap().1, *bytes);
        }
    }
    let cfg = std::fs::read_to_string(&f.config).unwrap();
    assert_eq!(cfg.matches(&variant()).count(), 1, "{cfg}");
    // The refreshed patch carries the upstream line as context and the fix as its change, with
    // the series' fixed From/Date lines, and applies to v1.34.2 as it is (no three-way).
    let new = std::fs::read_to_string(f.patches.join(variant())).unwrap();
    let old = std::fs::read_to_string(f.patches.join(PATCH_FIX)).unwrap();
    assert!(new.contains(" // InstanceExists reports whether a server with that name exists.\n"));
    assert!(new.contains("-\treturn ErrNotFound\n+\treturn InstanceNotFound\n"));
    let header = |t: &str| {
        t.lines()
            .filter(|l| l.starts_with("From: ") || l.starts_with("Date: "))
            .map(String::from)
            .collect::<Vec<_>>()
    };
    assert_eq!(header(&new), header(&old));
    ok(&edit(&f, &["--restart"]));
    let o = edit(&f, &[]);
    assert_eq!(o.status.code(), Some(2));
    let o = edit(&f, &["--restart"]);
    ok(&o);
    assert!(
        stdout(&o).contains(&format!("{}  applied\n", variant())),
        "{}",
        stdout(&o)
    );
    // Exporting the refreshed series again changes nothing.
    let refreshed = inputs(&f);
    ok(&export(&f));
    assert_eq!(inputs(&f), refreshed);
}

#[test]
fn a_conflict_stops_with_markers_and_continue_commits_the_resolution_as_the_patch() {
    let f = fixture(&["linux/amd64"]);
    release_changing_the_fixed_line(&f);
    let before = inputs(&f);
    let o = edit(&f, &[]);
    assert_eq!(o.status.code(), Some(4), "{}{}", stdout(&o), stderr(&o));
    let (out, err) = (stdout(&o), stderr(&o));
    assert!(
        err.contains(&format!(
            "patch {PATCH_FIX} conflicts: {INSTANCES}, hunk 1 (@@ "
        )),
        "{err}"
    );
    assert!(
        out.contains(&format!(
            "{PATCH_FIX}  CONFLICT in {INSTANCES} (markers at line "
        )),
        "{out}"
    );
    assert!(
        out.contains("occm-forge patches edit --k8s 1.34 --dir "),
        "{out}"
    );
    assert!(out.contains(" --continue\n"), "{out}");
    assert!(out.contains(&format!("git add {INSTANCES}")), "{out}");
    let dir = edit_dir(&f);
    let text = std::fs::read_to_string(dir.join(INSTANCES)).unwrap();
    assert!(
        text.contains("<<<<<<< HEAD\n\treturn ErrNotFound // nothing by that name\n"),
        "{text}"
    );
    assert!(text.contains(&format!(">>>>>>> {PATCH_FIX}\n")), "{text}");
    assert_eq!(
        run(git(&dir).args(["status", "--porcelain"])),
        format!("UU {INSTANCES}\n")
    );
    // Nothing to export yet, and --continue wants the conflict resolved.
    let o = export(&f);
    assert_eq!(o.status.code(), Some(2), "{}", stderr(&o));
    assert!(
        stderr(&o).contains("the conflict of patch"),
        "{}",
        stderr(&o)
    );
    let o = edit(&f, &["--continue"]);
    assert_eq!(o.status.code(), Some(2), "{}", stderr(&o));
    assert!(
        stderr(&o).contains(&format!(
            "{INSTANCES}: the conflict of patch {PATCH_FIX} is not resolved"
        )),
        "{}",
        stderr(&o)
    );
    assert_eq!(inputs(&f), before);

    resolve(&dir);
    let o = edit(&f, &["--continue"]);
    assert_eq!(o.status.code(), Some(2), "not added yet: {}", stderr(&o));
    assert!(stderr(&o).contains("is not resolved"), "{}", stderr(&o));
    run(git(&dir).args(["add", INSTANCES]));
    let o = edit(&f, &["--continue"]);
    ok(&o);
    assert!(
        stdout(&o).contains(&format!("{PATCH_FIX}  resolved and committed")),
        "{}",
        stdout(&o)
    );
    // The resolution is the patch's commit, with the patch's author and subject.
    let patch_author = std::fs::read_to_string(f.patches.join(PATCH_FIX))
        .unwrap()
        .lines()
        .find_map(|l| l.strip_prefix("From: ").map(String::from))
        .unwrap();
    assert!(
        log(&dir, "v1.34.2").starts_with(&format!(
            "{patch_author} openstack: treat a missing server as InstanceNotFound\n"
        )),
        "{}",
        log(&dir, "v1.34.2")
    );
    let o = export(&f);
    ok(&o);
    let out = stdout(&o);
    assert!(
        out.contains(&format!("patches/{PATCH_TEST}  unchanged")),
        "{out}"
    );
    assert!(
        out.contains(&format!("patches/{}  written", variant())),
        "{out}"
    );
    let new = std::fs::read_to_string(f.patches.join(variant())).unwrap();
    assert!(
        new.contains("-\treturn ErrNotFound // nothing by that name\n+\treturn InstanceNotFound // nothing by that name\n"),
        "{new}"
    );
}

/// Runs export expecting a one-line refusal (exit 2) containing `want`, with nothing written.
fn refused(f: &Fixture, want: &str) {
    let before = inputs(f);
    let o = export(f);
    let err = stderr(&o);
    assert_eq!(o.status.code(), Some(2), "{}{err}", stdout(&o));
    assert!(err.contains(want), "{err}");
    assert_eq!(err.trim().lines().count(), 1, "{err}");
    assert_eq!(inputs(f), before, "a refused export wrote something");
}

#[test]
fn export_refuses_what_would_lose_work_and_writes_nothing() {
    let f = fixture(&["linux/amd64"]);
    refused(&f, "no edit of 1.34 here");
    ok(&edit(&f, &[]));
    let dir = edit_dir(&f);
    // Uncommitted changes.
    std::fs::write(dir.join("README.md"), "edited\n").unwrap();
    refused(
        &f,
        "README.md has changes that are not committed (modified, not staged)",
    );
    run(git(&dir).args(["checkout", "--", "README.md"]));
    std::fs::write(dir.join("notes.txt"), "new\n").unwrap();
    refused(
        &f,
        "notes.txt has changes that are not committed (untracked)",
    );
    std::fs::remove_file(dir.join("notes.txt")).unwrap();
    // A patch file edited by hand since the edit read it.
    let fix = f.patches.join(PATCH_FIX);
    let original = std::fs::read(&fix).unwrap();
    let mut edited = original.clone();
    edited.extend_from_slice(b"\n");
    std::fs::write(&fix, &edited).unwrap();
    refused(&f, &format!("{PATCH_FIX}: edited by hand since"));
    std::fs::write(&fix, &original).unwrap();
    // Another run holds the digest manifest's run lock.
    {
        let _held =
            occm_forge_core::pipeline::record::lock_run(&f.lock, false, &mut |_| {}).unwrap();
        refused(&f, "another occm-forge run");
    }
    // The branch moved: a commit squashed away, or images.toml pinning another commit.
    let head = run(git(&dir).args(["rev-parse", "HEAD"]))
        .trim()
        .to_string();
    run(git(&dir).args(["reset", "-q", "--hard", "HEAD~1"]));
    refused(
        &f,
        "HEAD is not v1.34.1 plus one commit per patch (2 expected)",
    );
    run(git(&dir).args(["reset", "-q", "--hard", &head]));
    f.release_1_34_2("// InstanceNotFound means", "// InstanceNotFound says");
    refused(&f, "the edit is on v1.34.1");
    // And the series itself changed in images.toml.
    ok(&edit(&f, &["--restart"]));
    let cfg = std::fs::read_to_string(&f.config).unwrap();
    let series = format!("patches = [\"{PATCH_TEST}\", \"{PATCH_FIX}\"]");
    let mut parts = cfg.splitn(2, "[minors.\"1.34\"]");
    let (head_part, minor_part) = (parts.next().unwrap(), parts.next().unwrap());
    let minor_part = minor_part.replacen(&series, &format!("patches = [\"{PATCH_TEST}\"]"), 1);
    std::fs::write(
        &f.config,
        format!("{head_part}[minors.\"1.34\"]{minor_part}"),
    )
    .unwrap();
    refused(&f, "the series of 1.34 changed since");
}

/// `occm-forge <args> --k8s <minor>` in `cwd`.
fn forge_in(cwd: &Path, minor: &str, args: &[&str]) -> Output {
    occm_forge(cwd)
        .args(args)
        .args(["--k8s", minor])
        .output()
        .unwrap()
}

/// A one-line refusal with exit 2 containing `want`.
fn one_line_refusal(o: &Output, want: &str) {
    let err = stderr(o);
    assert_eq!(o.status.code(), Some(2), "{}{err}", stdout(o));
    assert!(err.contains(want), "{err}");
    assert_eq!(err.trim().lines().count(), 1, "{err}");
}

#[test]
fn edit_refuses_a_dir_that_holds_other_files_or_is_a_file_and_an_unknown_minor() {
    let f = fixture(&["linux/amd64"]);
    let up = f.upstream.to_str().unwrap().to_string();
    let before = inputs(&f);
    let notes = f.path().join("notes");
    std::fs::create_dir(&notes).unwrap();
    std::fs::write(notes.join("todo.txt"), "keep me\n").unwrap();
    for dir in [notes.as_path(), f.path()] {
        let o = forge_in(
            f.path(),
            "1.34",
            &[
                "patches",
                "edit",
                "--source",
                &up,
                "--dir",
                dir.to_str().unwrap(),
            ],
        );
        one_line_refusal(&o, "no `occm-forge patches edit` under way");
    }
    assert_eq!(std::fs::read_dir(&notes).unwrap().count(), 1);
    assert_eq!(
        std::fs::read_to_string(notes.join("todo.txt")).unwrap(),
        "keep me\n"
    );
    assert_eq!(inputs(&f), before);
    let o = forge_in(
        f.path(),
        "1.34",
        &["patches", "edit", "--source", &up, "--dir", "images.toml"],
    );
    one_line_refusal(&o, "images.toml: not a directory");
    // A minor images.toml does not have is a configuration error, not a failure.
    let o = forge_in(f.path(), "1.99", &["patches", "edit", "--source", &up]);
    one_line_refusal(&o, "unknown Kubernetes minor 1.99");
    let o = forge_in(f.path(), "1.99", &["patches", "export"]);
    one_line_refusal(&o, "unknown Kubernetes minor 1.99");
    assert_eq!(inputs(&f), before);
}

#[test]
fn export_refuses_commits_out_of_order_an_empty_commit_and_a_message_that_does_not_read_back() {
    let f = fixture(&["linux/amd64"]);
    ok(&edit(&f, &[]));
    let dir = edit_dir(&f);
    let rev = |r: &str| run(git(&dir).args(["rev-parse", r])).trim().to_string();
    let (first, second) = (rev("HEAD~1"), rev("HEAD"));
    // The two commits swapped.
    run(git(&dir).args(["reset", "-q", "--hard", "v1.34.1"]));
    run(git(&dir).args(["cherry-pick", &second, &first]));
    refused(
        &f,
        "the commits are not in the series' order (branch: openstack: treat",
    );
    // The fix's commit emptied.
    run(git(&dir).args(["reset", "-q", "--hard", &first]));
    run(git(&dir).args([
        "commit",
        "-q",
        "--allow-empty",
        "-m",
        "openstack: treat a missing server as InstanceNotFound",
    ]));
    refused(&f, &format!("(patch {PATCH_FIX}) changes nothing"));
    // A message with a line that ends a patch's message when read back.
    run(git(&dir).args(["reset", "-q", "--hard", &second]));
    run(git(&dir).args([
        "commit",
        "-q",
        "--amend",
        "-m",
        "openstack: treat a missing server as InstanceNotFound\n\nWhy:\n---\nthe server is gone",
    ]));
    refused(
        &f,
        &format!("(patch {PATCH_FIX}) cannot be written as a patch that gives it back"),
    );
    // Put right, it exports.
    run(git(&dir).args(["reset", "-q", "--hard", &second]));
    ok(&export(&f));
}

#[test]
fn export_keeps_the_comments_of_the_minors_series_and_exports_again_after_a_revert() {
    let f = fixture(&["linux/amd64"]);
    release_moving_the_context(&f);
    let cfg = std::fs::read_to_string(&f.config).unwrap();
    let at = cfg.find("[minors.\"1.34\"]").unwrap();
    let one_line = format!("patches = [\"{PATCH_TEST}\", \"{PATCH_FIX}\"]");
    let commented = format!(
        "patches = [\n  # the guard test first: it fails without the fix\n  \"{PATCH_TEST}\",\n  \"{PATCH_FIX}\", # issue 3114\n]"
    );
    let cfg = format!(
        "{}{}",
        &cfg[..at],
        cfg[at..].replacen(&one_line, &commented, 1)
    );
    std::fs::write(&f.config, &cfg).unwrap();
    let before = inputs(&f);
    ok(&edit(&f, &[]));
    ok(&export(&f));
    let after = std::fs::read_to_string(&f.config).unwrap();
    assert!(
        after.contains(&format!(
            "  # the guard test first: it fails without the fix\n  \"{PATCH_TEST}\",\n  \"{}\", # issue 3114\n]",
            variant()
        )),
        "{after}"
    );
    // Thrown away (git checkout of images.toml and patches/), the export is written again.
    let exported = inputs(&f);
    std::fs::remove_file(f.patches.join(variant())).unwrap();
    std::fs::write(&f.config, &cfg).unwrap();
    assert_eq!(inputs(&f), before);
    let o = export(&f);
    ok(&o);
    assert!(stdout(&o).contains("1.34's own variant"), "{}", stdout(&o));
    assert_eq!(inputs(&f), exported);
}

#[test]
fn continue_refuses_leftovers_a_git_rebase_and_a_new_pin_and_works_from_inside_the_work_tree() {
    let f = fixture(&["linux/amd64"]);
    release_changing_the_fixed_line(&f);
    let o = edit(&f, &[]);
    assert_eq!(o.status.code(), Some(4), "{}{}", stdout(&o), stderr(&o));
    let dir = edit_dir(&f);
    resolve(&dir);
    run(git(&dir).args(["add", INSTANCES]));
    // A .rej left by `git apply --reject`.
    let rej = dir.join(format!("{INSTANCES}.rej"));
    std::fs::write(&rej, "@@ -1 +1 @@\n").unwrap();
    let o = edit(&f, &["--continue"]);
    one_line_refusal(
        &o,
        &format!("{INSTANCES}.rej has changes that are not committed (untracked): "),
    );
    assert!(stderr(&o).contains("rm "), "{}", stderr(&o));
    std::fs::remove_file(&rej).unwrap();
    // A git rebase under way.
    std::fs::create_dir(dir.join(".git/rebase-merge")).unwrap();
    let o = edit(&f, &["--continue"]);
    one_line_refusal(
        &o,
        "a git rebase is under way: finish it (`git rebase --continue`)",
    );
    std::fs::remove_dir(dir.join(".git/rebase-merge")).unwrap();
    // images.toml pins another commit since the edit.
    let cfg = std::fs::read_to_string(&f.config).unwrap();
    let pinned = run(git(&f.upstream).args(["rev-parse", "v1.34.2"]));
    let moved = cfg.replace(pinned.trim(), &f.commits.v1_34);
    std::fs::write(&f.config, &moved).unwrap();
    let o = edit(&f, &["--continue"]);
    one_line_refusal(&o, "--restart");
    assert!(
        stderr(&o).contains("the edit is on v1.34.2"),
        "{}",
        stderr(&o)
    );
    std::fs::write(&f.config, &cfg).unwrap();
    // From inside the work tree, where there is no images.toml: the edit's own is used.
    let o = occm_forge(&dir)
        .args(["patches", "edit", "--k8s", "1.34", "--continue", "--dir"])
        .arg(&dir)
        .output()
        .unwrap();
    ok(&o);
    let o = occm_forge(&dir)
        .args(["patches", "export", "--k8s", "1.34", "--dir"])
        .arg(&dir)
        .output()
        .unwrap();
    ok(&o);
    assert!(stdout(&o).contains("1.34's own variant"), "{}", stdout(&o));
}

#[test]
fn the_next_steps_repeat_the_cache_dir_given() {
    let f = fixture(&["linux/amd64"]);
    release_changing_the_fixed_line(&f);
    let cache = f.path().join("cache");
    let o = occm_forge(f.path())
        .arg("--cache-dir")
        .arg(&cache)
        .args(["patches", "edit", "--k8s", "1.34", "--source"])
        .arg(&f.upstream)
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(4), "{}", stderr(&o));
    let out = stdout(&o);
    let flag = format!("--cache-dir {}", cache.display());
    assert!(
        out.contains(&format!(
            "occm-forge patches edit --k8s 1.34 {flag} --continue\n"
        )) && out.contains(&format!("occm-forge patches export --k8s 1.34 {flag}\n")),
        "{out}"
    );
    assert!(cache.join("edit/1.34/.git").exists());
}
