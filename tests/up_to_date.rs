//! No work done twice: a build whose inputs fingerprint matches the recorded entry and whose
//! result is still there is a no-op (no Go process, nothing written, the same stdout); any
//! changed input, a lost tag or blob, or `--force` rebuilds and says why; several minors build
//! in one run with a summary and a documented exit status.

use crate::common;

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use common::*;

/// A `go` that records its arguments and fails: a run that starts any Go process is caught.
fn failing_go(dir: &Path) -> (PathBuf, PathBuf) {
    let bin = dir.join("fake-go-bin");
    std::fs::create_dir_all(&bin).unwrap();
    let log = dir.join("go-invocations.log");
    let script = bin.join("go");
    std::fs::write(
        &script,
        format!(
            "#!/bin/sh\necho \"go $*\" >> '{}'\necho 'this go must not run' >&2\nexit 1\n",
            log.display()
        ),
    )
    .unwrap();
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(&script, std::fs::Permissions::from_mode(0o755)).unwrap();
    (bin, log)
}

fn forge(f: &Fixture, args: &[&str]) -> Command {
    let mut c = occm_forge(f.path());
    c.args(["build", "--source"]).arg(&f.upstream).args(args);
    c
}

fn with_path_first(mut c: Command, bin: &Path) -> Command {
    let path = std::env::var("PATH").unwrap_or_default();
    c.env("PATH", format!("{}:{path}", bin.display()));
    c
}

fn inputs_line(o: &Output) -> String {
    stderr(o)
        .lines()
        .find(|l| l.starts_with("occm-forge: inputs") || l.contains(" inputs "))
        .unwrap_or_default()
        .to_string()
}

fn ok(o: &Output) {
    assert!(
        o.status.success(),
        "exit {:?}\n{}",
        o.status.code(),
        stderr(o)
    );
}

#[test]
fn an_unchanged_minor_is_up_to_date_without_any_go_process() {
    let f = fixture(&["linux/amd64", "linux/arm64"]);
    let first = forge(&f, &["--k8s", "1.34"]).output().unwrap();
    ok(&first);
    let lock = std::fs::read(&f.lock).unwrap();
    let layout_index = std::fs::read(f.path().join("out/index.json")).unwrap();

    let (bin, log) = failing_go(f.path());
    let second = with_path_first(forge(&f, &["--k8s", "1.34"]), &bin)
        .output()
        .unwrap();
    ok(&second);
    assert_eq!(
        stdout(&second),
        stdout(&first),
        "the same result as a build"
    );
    assert!(
        !log.exists(),
        "a Go process ran: {:?}",
        std::fs::read_to_string(&log)
    );
    let line = inputs_line(&second);
    assert!(
        line.contains("1.34 is up to date: inputs sha256:"),
        "{line}"
    );
    assert!(
        line.contains("match images.lock.yaml; out holds v1.34.1-occmforge.1"),
        "{line}"
    );
    assert_eq!(
        stderr(&second)
            .lines()
            .filter(|l| l.starts_with("occm-forge: "))
            .count(),
        1,
        "one line: {}",
        stderr(&second)
    );
    assert_eq!(std::fs::read(&f.lock).unwrap(), lock, "nothing written");
    assert_eq!(
        std::fs::read(f.path().join("out/index.json")).unwrap(),
        layout_index
    );

    // A fragment is written from the recorded entry, still without Go.
    let fragment = f.path().join("fragment.yaml");
    let o = with_path_first(forge(&f, &["--k8s", "1.34", "--manifest-fragment"]), &bin)
        .arg(&fragment)
        .output()
        .unwrap();
    ok(&o);
    let frag = read_lock(&fragment);
    assert_eq!(frag["images"]["1.34"], read_lock(&f.lock)["images"]["1.34"]);

    // --force rebuilds (and Go runs: here it is the failing one, which the preflight finds).
    let o = with_path_first(forge(&f, &["--k8s", "1.34", "--force"]), &bin)
        .output()
        .unwrap();
    assert!(!o.status.success());
    assert!(
        inputs_line(&o).contains("1.34 needs a build: --force"),
        "{}",
        stderr(&o)
    );
    assert!(
        std::fs::read_to_string(&log)
            .unwrap()
            .contains("go env GOVERSION")
    );

    // A blob lost from the layout rebuilds, to the same digest.
    let digest = read_lock(&f.lock)["images"]["1.34"]["digest"]
        .as_str()
        .unwrap()
        .to_string();
    let index: serde_json::Value = serde_json::from_slice(
        &std::fs::read(f.path().join("out/blobs/sha256").join(&digest[7..])).unwrap(),
    )
    .unwrap();
    let manifest = index["manifests"][1]["digest"].as_str().unwrap();
    std::fs::remove_file(f.path().join("out/blobs/sha256").join(&manifest[7..])).unwrap();
    let o = forge(&f, &["--k8s", "1.34"]).output().unwrap();
    ok(&o);
    assert!(
        inputs_line(&o).contains(&format!("lacks blob {manifest}")),
        "{}",
        stderr(&o)
    );
    assert_eq!(stdout(&o), stdout(&first));
}

/// Rewrites images.toml with `from` replaced by `to` (once, must be present).
fn edit_config(f: &Fixture, from: &str, to: &str) {
    let text = std::fs::read_to_string(&f.config).unwrap();
    assert!(text.contains(from), "{from} not in images.toml");
    std::fs::write(&f.config, text.replacen(from, to, 1)).unwrap();
}

#[test]
fn each_changed_input_rebuilds_and_is_named() {
    let f = fixture(&["linux/amd64", "linux/arm64"]);
    ok(&forge(&f, &["--k8s", "1.33"]).output().unwrap());
    let rebuild = |what: &str| {
        let o = forge(&f, &["--k8s", "1.33"]).output().unwrap();
        let line = inputs_line(&o);
        assert!(
            line.contains("1.33 needs a build: inputs changed since images.lock.yaml: ")
                && line.contains(what),
            "{what}: {line}\n{}",
            stderr(&o)
        );
        o
    };
    // A required test (the guard tests already are; this one is the fixture's other test).
    edit_config(
        &f,
        "required_tests = []",
        "required_tests = [\"TestInstanceExistsFound\"]",
    );
    ok(&rebuild(
        "required tests TestInstanceExistsNoServer → TestInstanceExistsFound,TestInstanceExistsNoServer",
    ));
    // A platform (with a new revision: the tag is bound to the platforms).
    edit_config(
        &f,
        "platforms = [\"linux/amd64\", \"linux/arm64\"]\nrevision = 1",
        "platforms = [\"linux/amd64\"]\nrevision = 2",
    );
    ok(&rebuild("platforms linux/amd64,linux/arm64 → linux/amd64"));
    // The tag scheme.
    edit_config(
        &f,
        "tag = \"{upstream_tag}-occmforge.{revision}\"",
        "tag = \"{upstream_tag}-occmforge.{revision}.{series}\"",
    );
    let o = rebuild("tag v1.33.1-occmforge.2 → v1.33.1-occmforge.2.");
    ok(&o);
    // A byte of a patch (the tag scheme now follows the series).
    let patch = f.patches.join(PATCH_TEST);
    let mut bytes = std::fs::read(&patch).unwrap();
    bytes.extend_from_slice(b"\n");
    std::fs::write(&patch, bytes).unwrap();
    ok(&rebuild("patch series "));
    // The Go version: named before any Go runs (this toolchain cannot be had offline).
    edit_config(&f, "revision = 2", "revision = 3");
    let go = local_go_version();
    let text = std::fs::read_to_string(&f.config).unwrap();
    let at = text.find("[minors.\"1.33\"]").unwrap();
    let go_line = format!("go = \"{go}\"");
    let pos = at + text[at..].find(&go_line).unwrap();
    std::fs::write(
        &f.config,
        format!(
            "{}go = \"1.99.0\"{}",
            &text[..pos],
            &text[pos + go_line.len()..]
        ),
    )
    .unwrap();
    let o = rebuild(&format!("Go {go} → 1.99.0"));
    assert_eq!(o.status.code(), Some(6), "{}", stderr(&o));
}

#[test]
fn a_published_minor_is_up_to_date_while_the_registry_serves_it() {
    let reg = TestRegistry::start();
    let f = fixture(&["linux/amd64"]);
    let repo = reg.repo("occm/openstack-cloud-controller-manager");
    f.write_config(&repo, &["linux/amd64"], "static", &[]);
    let push = |f: &Fixture, extra: &[&str]| {
        forge(
            f,
            &["--k8s", "1.34", "--push", "--insecure-registry", &reg.addr],
        )
        .args(extra)
        .output()
        .unwrap()
    };
    let first = push(&f, &[]);
    ok(&first);
    let (bin, log) = failing_go(f.path());
    let second = with_path_first(
        forge(
            &f,
            &["--k8s", "1.34", "--push", "--insecure-registry", &reg.addr],
        ),
        &bin,
    )
    .output()
    .unwrap();
    ok(&second);
    assert_eq!(stdout(&second), stdout(&first));
    assert!(!log.exists());
    assert!(
        inputs_line(&second).contains(&format!("{repo}:v1.34.1-occmforge.1 serves sha256:")),
        "{}",
        stderr(&second)
    );

    // A new base digest rebuilds: a pulled base instead of the static one.
    let base_digest = push_base(f.path(), &reg.repo("base/go-runner"), "v1");
    let base = format!("{}:v1@{base_digest}", reg.repo("base/go-runner"));
    f.write_config(&repo, &["linux/amd64"], &base, &[]);
    let text = std::fs::read_to_string(&f.config).unwrap();
    let at = text.find("[minors.\"1.34\"]").unwrap();
    let fixed = format!(
        "{}{}",
        &text[..at],
        text[at..].replacen("revision = 1", "revision = 2", 1)
    );
    std::fs::write(&f.config, fixed).unwrap();
    let o = push(&f, &[]);
    ok(&o);
    assert!(
        inputs_line(&o).contains(&format!("base static → {base}")),
        "{}",
        stderr(&o)
    );

    // The tag deleted from the registry: rebuilt and pushed again.
    let tag = "v1.34.1-occmforge.2";
    let digest = read_lock(&f.lock)["images"]["1.34"]["digest"]
        .as_str()
        .unwrap()
        .to_string();
    assert_eq!(
        reg.delete(&format!(
            "/v2/occm/openstack-cloud-controller-manager/manifests/{digest}"
        )),
        Some(202)
    );
    let o = push(&f, &[]);
    ok(&o);
    assert!(
        inputs_line(&o).contains(&format!("{repo}:{tag} serves nothing")),
        "{}",
        stderr(&o)
    );
    assert_eq!(
        read_lock(&f.lock)["images"]["1.34"]["digest"].as_str(),
        Some(digest.as_str())
    );
}

#[test]
fn several_minors_in_one_run_with_a_summary_and_the_first_failures_status() {
    let f = fixture(&["linux/amd64"]);
    // 1.33's pin is wrong: its source stage fails (exit 3); 1.34 and 1.35 build.
    let bad = "0".repeat(40);
    edit_config(&f, &f.commits.v1_33.clone(), &bad);
    let o = forge(&f, &["--all"]).output().unwrap();
    assert_eq!(o.status.code(), Some(3), "{}", stderr(&o));
    assert_eq!(
        stdout(&o),
        "oci:out:v1.34.1-occmforge.1\noci:out:v1.35.0-occmforge.1\n"
    );
    let err = stderr(&o);
    assert!(
        err.contains("occm-forge: error: 1.33: source: tag v1.33.1"),
        "{err}"
    );
    let summary: Vec<&str> = err
        .lines()
        .skip_while(|l| !l.starts_with("occm-forge: minor "))
        .collect();
    assert!(
        summary[1].starts_with("occm-forge: 1.33   failed      exit 3: source: "),
        "{summary:?}"
    );
    assert!(
        summary[2].starts_with("occm-forge: 1.34   built       sha256:"),
        "{summary:?}"
    );
    assert!(
        summary[3].starts_with("occm-forge: 1.35   built       sha256:"),
        "{summary:?}"
    );
    assert_eq!(summary[4], "occm-forge: 3 minors, 1 failed");
    let lock = read_lock(&f.lock);
    assert!(lock["images"]["1.34"].is_mapping() && lock["images"]["1.35"].is_mapping());

    // Again: the two built minors are up to date; --fail-fast stops at the broken one.
    let (bin, log) = failing_go(f.path());
    let o = with_path_first(forge(&f, &["--k8s", "1.34", "--k8s", "1.35"]), &bin)
        .output()
        .unwrap();
    ok(&o);
    assert!(!log.exists());
    assert!(
        stderr(&o).contains("occm-forge: 1.34   up to date  sha256:"),
        "{}",
        stderr(&o)
    );
    let o = forge(&f, &["--all", "--fail-fast"]).output().unwrap();
    assert_eq!(o.status.code(), Some(3));
    assert_eq!(stdout(&o), "");
    assert!(
        stderr(&o).contains("occm-forge: 1 minor, 1 failed"),
        "{}",
        stderr(&o)
    );
}

#[test]
fn the_minors_work_tree_is_kept_only_while_untouched() {
    let f = fixture(&["linux/amd64"]);
    let cache = f.path().join("cache");
    let build = || {
        let o = forge(&f, &["--k8s", "1.34", "--force"])
            .env("OCCM_FORGE_CACHE", &cache)
            .output()
            .unwrap();
        ok(&o);
        o
    };
    let source_line = |o: &Output| {
        stderr(o)
            .lines()
            .find(|l| l.starts_with("occm-forge: source"))
            .unwrap()
            .to_string()
    };
    let first = build();
    assert!(!source_line(&first).contains("kept"), "{}", stderr(&first));
    let second = build();
    assert!(
        source_line(&second).contains("work tree kept: unchanged since it was patched"),
        "{}",
        stderr(&second)
    );
    assert!(stderr(&second).contains("in the kept work tree"));
    assert_eq!(stdout(&second), stdout(&first));

    // An edited file or a file nobody tracks: checked out and patched again.
    let tree = cache.join("trees/1.34");
    let file = tree.join("pkg/openstack/instances.go");
    let text = std::fs::read_to_string(&file).unwrap();
    std::fs::write(
        &file,
        text.replace("failed to find object", "failed to find object!"),
    )
    .unwrap();
    let third = build();
    assert!(!source_line(&third).contains("kept"), "{}", stderr(&third));
    assert_eq!(
        stdout(&third),
        stdout(&first),
        "the edit did not reach the image"
    );
    std::fs::write(tree.join("pkg/openstack/left_by_a_test.txt"), "x").unwrap();
    let fourth = build();
    assert!(
        !source_line(&fourth).contains("kept"),
        "{}",
        stderr(&fourth)
    );
    assert!(!tree.join("pkg/openstack/left_by_a_test.txt").exists());
}

/// Replaces the `n`th (0-based) occurrence of `from` in the digest manifest with `to`.
fn edit_lock(f: &Fixture, from: &str, to: &str, n: usize) {
    let text = std::fs::read_to_string(&f.lock).unwrap();
    let (at, _) = text
        .match_indices(from)
        .nth(n)
        .unwrap_or_else(|| panic!("no {from} #{n} in {text}"));
    let edited = format!("{}{to}{}", &text[..at], &text[at + from.len()..]);
    std::fs::write(&f.lock, edited).unwrap();
}

#[test]
fn a_hand_edited_entry_is_rebuilt_not_up_to_date() {
    let f = fixture(&["linux/amd64"]);
    let first = forge(&f, &["--k8s", "1.34"]).output().unwrap();
    ok(&first);
    let digest = read_lock(&f.lock)["images"]["1.34"]["digest"].clone();
    let go = local_go_version();
    let edited = |o: &Output| {
        let line = inputs_line(o);
        assert!(
            line.contains("1.34 needs a build: images.lock.yaml entry for 1.34 was edited: its fields hash to sha256:")
                && line.contains(" not its inputs sha256:"),
            "{line}\n{}",
            stderr(o)
        );
        assert_eq!(stdout(o), stdout(&first));
        let lock = read_lock(&f.lock);
        assert_eq!(lock["images"]["1.34"]["digest"], digest);
        assert_eq!(
            lock["images"]["1.34"]["inputs"]["go_version"].as_str(),
            Some(go.as_str())
        );
        assert_eq!(
            lock["images"]["1.34"]["go_version"].as_str(),
            Some(go.as_str())
        );
    };
    // The Go version in `inputs:` edited, its fingerprint left as it was.
    let go_line = format!("go_version: {go}\n");
    edit_lock(&f, &go_line, "go_version: 1.25.1\n", 1);
    let o = forge(&f, &["--k8s", "1.34"]).output().unwrap();
    ok(&o);
    edited(&o);

    // The entry's own `go_version:` edited, its `inputs:` left: rebuilt too, not refused by
    // the tag guard (an edited entry is no record of inputs).
    edit_lock(&f, &go_line, "go_version: 1.25.1\n", 0);
    let o = forge(&f, &["--k8s", "1.34"]).output().unwrap();
    ok(&o);
    edited(&o);

    // Rebuilt and recorded: up to date again.
    let o = forge(&f, &["--k8s", "1.34"]).output().unwrap();
    ok(&o);
    assert!(
        inputs_line(&o).contains("1.34 is up to date"),
        "{}",
        stderr(&o)
    );
}

#[test]
fn the_tag_guard_and_the_inputs_stage_name_a_change_in_the_same_words() {
    let f = fixture(&["linux/amd64"]);
    ok(&forge(&f, &["--k8s", "1.34"]).output().unwrap());
    let go = local_go_version();
    let phrase = format!("Go {go} → 1.99.0");
    let text = std::fs::read_to_string(&f.config).unwrap();
    let at = text.find("[minors.\"1.34\"]").unwrap();
    let bumped = format!(
        "{}{}",
        &text[..at],
        text[at..].replacen(&format!("go = \"{go}\""), "go = \"1.99.0\"", 1)
    );
    std::fs::write(&f.config, &bumped).unwrap();
    // The same tag: the tag guard refuses.
    let o = forge(&f, &["--k8s", "1.34"]).output().unwrap();
    assert_eq!(o.status.code(), Some(9), "{}", stderr(&o));
    let refused = stderr(&o).lines().last().unwrap_or_default().to_string();
    assert!(
        refused.contains(&format!(
            "tag v1.34.1-occmforge.1 was recorded with other inputs: {phrase}; tags never move"
        )),
        "{refused}"
    );
    // A new revision: the inputs stage names the same change (then the toolchain cannot be had
    // offline: exit 6).
    std::fs::write(
        &f.config,
        format!(
            "{}{}",
            &bumped[..at],
            bumped[at..].replacen("revision = 1", "revision = 2", 1)
        ),
    )
    .unwrap();
    let o = forge(&f, &["--k8s", "1.34"]).output().unwrap();
    assert_eq!(o.status.code(), Some(6), "{}", stderr(&o));
    let line = inputs_line(&o);
    assert!(
        line.contains("inputs changed since images.lock.yaml: ") && line.contains(&phrase),
        "{line}"
    );
}

/// The no-op check with `--push` asks the registry what the tag serves. When nobody listens on
/// the registry's port, that is one line of the inputs stage naming the registry and the cause,
/// without the HTTP client's nested error chain; nothing is written.
#[test]
fn an_unreachable_registry_in_the_no_op_check_is_one_line_of_the_inputs_stage() {
    let mut reg = TestRegistry::start();
    let f = fixture(&["linux/amd64"]);
    let repo = reg.repo("occm/openstack-cloud-controller-manager");
    f.write_config(&repo, &["linux/amd64"], "static", &[]);
    let addr = reg.addr.clone();
    let push = |f: &Fixture| {
        forge(
            f,
            &[
                "--k8s",
                "1.34",
                "--push",
                "--insecure-registry",
                &addr,
                "--retries",
                "0",
            ],
        )
        .output()
        .unwrap()
    };
    ok(&push(&f));
    let lock = std::fs::read(&f.lock).unwrap();
    reg.kill();
    let o = push(&f);
    assert_eq!(o.status.code(), Some(8), "{}", stderr(&o));
    let errors: Vec<String> = stderr(&o)
        .lines()
        .filter(|l| l.contains("error"))
        .map(str::to_string)
        .collect();
    assert_eq!(errors.len(), 1, "{}", stderr(&o));
    let line = &errors[0];
    assert!(
        line.starts_with(&format!(
            "occm-forge: error: inputs: registry {addr}: check manifest occm/openstack-cloud-controller-manager:v1.34.1-occmforge.1: "
        )),
        "{line}"
    );
    assert!(line.contains("connection refused"), "{line}");
    for chain in [
        "error sending request",
        "client error",
        "tcp connect error",
        "os error",
    ] {
        assert!(!line.contains(chain), "{chain} in {line}");
    }
    assert_eq!(std::fs::read(&f.lock).unwrap(), lock, "nothing written");
}
