//! Bad inputs: each ends in a one-line cause naming the file, patch, test or registry, a
//! non-zero exit status, and a digest manifest that is byte-for-byte unchanged.

use crate::common;

use std::process::{Command, Output};

use common::*;

/// Runs `build --k8s <minor>` (offline, fixture source) with extra args.
fn build(f: &Fixture, minor: &str, extra: &[&str]) -> Output {
    occm_forge(f.path())
        .args(["build", "--k8s", minor, "--source"])
        .arg(&f.upstream)
        .arg("--output")
        .arg(f.path().join("out"))
        .args(extra)
        .output()
        .unwrap()
}

/// The error line: the last stderr line, which must start with `occm-forge: error: `.
fn error_line(o: &Output) -> String {
    let err = stderr(o);
    let last = err.lines().last().unwrap_or_default().to_string();
    assert!(
        last.starts_with("occm-forge: error: "),
        "no error line in: {err}"
    );
    last
}

fn assert_failed(f: &Fixture, o: &Output, code: i32, lock_before: &[u8]) -> String {
    assert_eq!(o.status.code(), Some(code), "stderr: {}", stderr(o));
    assert_eq!(stdout(o), "", "stdout must carry results only");
    assert_eq!(
        std::fs::read(&f.lock).unwrap(),
        lock_before,
        "the digest manifest changed"
    );
    assert!(
        !f.path().join("out/index.json").exists() || code == 8,
        "an image was written although an earlier stage failed"
    );
    error_line(o)
}

/// `verify` without a digest manifest, or with one without entries, checks nothing and says so
/// (it passed silently without `--k8s`, and named "no entry …; it has " with `--k8s`); `render`
/// names the missing file too (it said "no entry for 1.34").
#[test]
fn verify_without_a_digest_manifest_fails_instead_of_checking_nothing() {
    let f = fixture(&["linux/amd64"]);
    let _ = std::fs::remove_file(&f.lock);
    for args in [
        &["verify"][..],
        &["verify", "--k8s", "1.34"],
        &["render", "--format", "helm-values", "--k8s", "1.34"],
    ] {
        let o = occm_forge(f.path()).args(args).output().unwrap();
        assert_eq!(o.status.code(), Some(9), "{args:?}: {}", stderr(&o));
        let line = error_line(&o);
        assert!(
            line.ends_with(
                "images.lock.yaml: no such file (a digest manifest is written by `occm-forge build`)"
            ),
            "{line}"
        );
    }
    std::fs::write(&f.lock, "schema_version: 1\nimages: {}\n").unwrap();
    let o = occm_forge(f.path()).arg("verify").output().unwrap();
    assert_eq!(o.status.code(), Some(2), "{}", stderr(&o));
    assert!(
        error_line(&o).ends_with(
            "images.lock.yaml: no entries to verify (a digest manifest is written by `occm-forge build`)"
        ),
        "{}",
        stderr(&o)
    );
}

#[test]
fn moved_tag_is_refused_naming_both_commits() {
    let f = fixture(&["linux/amd64"]);
    let lock = f.seed_lock();
    run(git(&f.upstream).args(["tag", "-f", "v1.34.1", &f.commits.v1_35]));
    let o = build(&f, "1.34", &[]);
    let line = assert_failed(&f, &o, 3, &lock);
    assert_eq!(
        line,
        format!(
            "occm-forge: error: source: tag v1.34.1 in {} points at {}, but images.toml pins {}; refusing to build a moved tag",
            f.upstream.display(),
            f.commits.v1_35,
            f.commits.v1_34
        )
    );
}

#[test]
fn messages_name_the_config_file_given() {
    let f = fixture(&["linux/amd64"]);
    let lock = f.seed_lock();
    let forge_toml = f.path().join("forge.toml");
    std::fs::rename(&f.config, &forge_toml).unwrap();
    run(git(&f.upstream).args(["tag", "-f", "v1.34.1", &f.commits.v1_35]));
    let o = build(&f, "1.34", &["--config", "forge.toml"]);
    let line = assert_failed(&f, &o, 3, &lock);
    assert!(line.contains(" but forge.toml pins "), "{line}");
}

/// `git rev-parse v1.34.1` of an annotated tag prints the tag object, not the commit: a pin set
/// to it is not a moved tag, and the message says which commit to pin.
#[test]
fn pin_set_to_an_annotated_tag_object_names_the_commit_to_pin() {
    let f = fixture(&["linux/amd64"]);
    let lock = f.seed_lock();
    run(git(&f.upstream).args([
        "tag",
        "-f",
        "-a",
        "-m",
        "fixture v1.34.1",
        "v1.34.1",
        &f.commits.v1_34,
    ]));
    let tag_object = run(git(&f.upstream).args(["rev-parse", "v1.34.1"]))
        .trim()
        .to_string();
    assert_ne!(tag_object, f.commits.v1_34);
    let cfg = std::fs::read_to_string(&f.config).unwrap();
    std::fs::write(&f.config, cfg.replace(&f.commits.v1_34, &tag_object)).unwrap();
    let o = build(&f, "1.34", &[]);
    let line = assert_failed(&f, &o, 3, &lock);
    assert_eq!(
        line,
        format!(
            "occm-forge: error: source: images.toml pins {tag_object} for v1.34.1, which is the annotated tag object in {}, not a commit; pin the commit it points at: {}",
            f.upstream.display(),
            f.commits.v1_34
        )
    );
}

/// A pin set to the tag object next to a recorded entry for the same tag: the cause is the pin
/// (the source's check), not the tag guard's "bump revision" about another upstream commit.
#[test]
fn tag_object_pin_next_to_a_recorded_entry_names_the_pin_before_the_tag_guard() {
    let f = fixture(&["linux/amd64"]);
    run(git(&f.upstream).args([
        "tag",
        "-f",
        "-a",
        "-m",
        "fixture v1.34.1",
        "v1.34.1",
        &f.commits.v1_34,
    ]));
    let tag_object = run(git(&f.upstream).args(["rev-parse", "v1.34.1"]))
        .trim()
        .to_string();
    // An earlier build of v1.34.1-occmforge.1, from the commit.
    let seeded = String::from_utf8(f.seed_lock()).unwrap();
    let entry_1_34 = seeded
        .split_once("images:\n")
        .unwrap()
        .1
        .replace("'1.33'", "'1.34'")
        .replace("v1.33.1", "v1.34.1")
        .replace(&f.commits.v1_33, &f.commits.v1_34);
    let lock = format!("{seeded}{entry_1_34}");
    std::fs::write(&f.lock, &lock).unwrap();
    let cfg = std::fs::read_to_string(&f.config).unwrap();
    std::fs::write(&f.config, cfg.replace(&f.commits.v1_34, &tag_object)).unwrap();
    let o = build(&f, "1.34", &[]);
    let line = assert_failed(&f, &o, 3, lock.as_bytes());
    assert_eq!(
        line,
        format!(
            "occm-forge: error: source: images.toml pins {tag_object} for v1.34.1, which is the annotated tag object in {}, not a commit; pin the commit it points at: {}",
            f.upstream.display(),
            f.commits.v1_34
        )
    );
}

/// A partial clone (`git clone --filter=blob:none`) as `--source`: libgit2 reads no promisor
/// remote, so the blobs of the tag are missing. The error says so and gives the command that
/// fetches them; after it, the same repository (still a partial clone, its other tags still
/// without blobs) works, as the upstream mirror does.
#[test]
fn a_partial_clone_as_source_is_named_with_the_command_that_completes_it() {
    let f = fixture(&["linux/amd64"]);
    let lock = f.seed_lock();
    let go = local_go_version();
    let commit = f.release(
        "v1.34.2",
        &go,
        "127.0.0.1:1/build-image/go-runner:v2.4.0-go1.25.3-bookworm.0",
    );
    // A tag off the release line, whose blob stays absent from the partial clone.
    run(git(&f.upstream).args(["checkout", "-q", "-b", "side", "v1.33.1"]));
    std::fs::write(f.upstream.join("SIDE"), "not on the release line\n").unwrap();
    run(git(&f.upstream).args(["add", "SIDE"]));
    run(git(&f.upstream).args(["commit", "-q", "-m", "side"]));
    run(git(&f.upstream).args(["tag", "-a", "-m", "side", "openstack-side-1.0.0"]));
    run(git(&f.upstream).args(["checkout", "-q", "master"]));
    run(git(&f.upstream).args(["config", "uploadpack.allowFilter", "true"]));
    let partial = f.path().join("partial.git");
    run(git(f.path())
        .args(["clone", "-q", "--bare", "--filter=blob:none"])
        .arg(format!("file://{}", f.upstream.display()))
        .arg(&partial));
    let partial = std::fs::canonicalize(&partial).unwrap();
    // An object store of its own: the shared one already holds the fixture's commits.
    let cache = f.path().join("cache");
    let forge = |args: &[&str]| {
        occm_forge(f.path())
            .env("OCCM_FORGE_CACHE", &cache)
            .args(args)
            .arg("--source")
            .arg(&partial)
            .output()
            .unwrap()
    };
    let advice = |tag: &str| {
        format!(
            "cannot fetch tag {tag} from {p}: it is a partial clone (remote.origin.promisor, filter blob:none) without the objects of {tag}, and occm-forge reads no promisor remote: fetch them with `git -C {p} -c remote.origin.partialclonefilter= fetch --refetch origin tag {tag}`, or clone without --filter (a shallow clone works)",
            p = partial.display()
        )
    };

    let o = forge(&["build", "--k8s", "1.34", "--output", "out"]);
    let line = assert_failed(&f, &o, 3, &lock);
    assert_eq!(
        line,
        format!("occm-forge: error: source: {}", advice("v1.34.1"))
    );

    let before = std::fs::read_to_string(&f.config).unwrap();
    let o = forge(&["pin", "--k8s", "1.34", "--tag", "v1.34.2"]);
    assert_eq!(o.status.code(), Some(3), "{}", stderr(&o));
    assert_eq!(
        error_line(&o),
        format!("occm-forge: error: source: {}", advice("v1.34.2"))
    );
    assert_eq!(std::fs::read_to_string(&f.config).unwrap(), before);

    // The command the message gives, as a user would paste it.
    let command = advice("v1.34.2").split('`').nth(1).unwrap().to_string();
    run(Command::new("sh")
        .args(["-c", &command])
        .env("GIT_CONFIG_GLOBAL", "/dev/null")
        .env("GIT_CONFIG_NOSYSTEM", "1"));
    let missing = run(git(&partial).args(["rev-list", "--objects", "--missing=print", "--all"]));
    assert!(
        missing.lines().any(|l| l.starts_with('?')),
        "the side tag's blob should still be absent: {missing}"
    );
    let o = forge(&["pin", "--k8s", "1.34", "--tag", "v1.34.2"]);
    assert!(o.status.success(), "{}", stderr(&o));
    let toml: toml::Table = std::fs::read_to_string(&f.config).unwrap().parse().unwrap();
    let m = &toml["minors"]["1.34"];
    assert_eq!(m["commit"].as_str(), Some(commit.as_str()));
    assert_eq!(
        m["go"].as_str(),
        Some(go.as_str()),
        "read from the Dockerfile blob"
    );

    // Git before 2.26 marked a partial clone with `extensions.partialclone`, which libgit2
    // cannot open at all: the same explanation, not "unsupported extension name".
    run(git(&partial).args(["config", "--unset", "remote.origin.promisor"]));
    run(git(&partial).args(["config", "extensions.partialclone", "origin"]));
    let o = forge(&["pin", "--k8s", "1.33", "--tag", "v1.33.1"]);
    assert_eq!(o.status.code(), Some(3), "{}", stderr(&o));
    assert_eq!(
        error_line(&o),
        format!("occm-forge: error: source: {}", advice("v1.33.1"))
            .replace("remote.origin.promisor", "extensions.partialclone")
    );
}

#[test]
fn patch_that_does_not_apply_names_patch_file_and_hunk() {
    let f = fixture(&["linux/amd64"]);
    let lock = f.seed_lock();
    f.add_patch(
        "1.34",
        "0003-broken.patch",
        r#"From: Someone <someone@example.org>
Subject: [PATCH] broken

---
diff --git a/pkg/version/version.go b/pkg/version/version.go
--- a/pkg/version/version.go
+++ b/pkg/version/version.go
@@ -1,4 +1,4 @@
 package version
 
-// This line is not in the file.
+// Neither is this one.
 var Version string
"#,
    );
    let o = build(&f, "1.34", &[]);
    let line = assert_failed(&f, &o, 4, &lock);
    assert!(
        line.starts_with(
            "occm-forge: error: patches: patch 0003-broken.patch does not apply: pkg/version/version.go, hunk 1 (@@ -1,4 +1,4 @@): "
        ),
        "{line}"
    );
}

#[test]
fn failing_go_test_fails_the_build_and_shows_its_output() {
    let f = fixture(&["linux/amd64"]);
    let lock = f.seed_lock();
    f.add_patch(
        "1.34",
        "0003-add-a-failing-test.patch",
        r#"From: Someone <someone@example.org>
Subject: [PATCH] a failing test

---
diff --git a/pkg/openstack/broken_test.go b/pkg/openstack/broken_test.go
new file mode 100644
--- /dev/null
+++ b/pkg/openstack/broken_test.go
@@ -0,0 +1,7 @@
+package openstack
+
+import "testing"
+
+func TestBroken(t *testing.T) {
+	t.Fatal("this test always fails")
+}
"#,
    );
    let o = build(&f, "1.34", &[]);
    let line = assert_failed(&f, &o, 5, &lock);
    assert!(
        line.starts_with("occm-forge: error: test: go test: 1 failed (k8s.io/cloud-provider-openstack/pkg/openstack.TestBroken); "),
        "{line}"
    );
    assert!(
        stderr(&o).contains("this test always fails"),
        "the failing test's output is not shown"
    );
}

#[test]
fn required_test_that_never_ran_fails_the_build() {
    let f = fixture(&["linux/amd64"]);
    f.write_config(
        "127.0.0.1:1/occm/openstack-cloud-controller-manager",
        &["linux/amd64"],
        "static",
        &["TestDoesNotExist"],
    );
    let lock = f.seed_lock();
    let o = build(&f, "1.34", &[]);
    let line = assert_failed(&f, &o, 5, &lock);
    assert_eq!(
        line,
        "occm-forge: error: test: go test: required test(s) did not run and pass: TestDoesNotExist (did not run)"
    );
}

/// A patch whose code needs a module go.mod does not require.
const NEEDS_A_MODULE_PATCH: &str = r#"From: Someone <someone@example.org>
Subject: [PATCH] openstack: use x/text

---
diff --git a/pkg/openstack/extra.go b/pkg/openstack/extra.go
new file mode 100644
--- /dev/null
+++ b/pkg/openstack/extra.go
@@ -0,0 +1,3 @@
+package openstack
+
+import _ "golang.org/x/text/language"
"#;

#[test]
fn a_patch_that_needs_a_go_mod_change_it_does_not_carry_is_named() {
    let f = fixture(&["linux/amd64"]);
    let lock = f.seed_lock();
    f.add_patch("1.34", "0003-needs-a-module.patch", NEEDS_A_MODULE_PATCH);
    let o = build(&f, "1.34", &[]);
    let line = assert_failed(&f, &o, 4, &lock);
    assert!(
        line.contains("golang.org/x/text/language")
            && line.contains("the patch series needs go.mod/go.sum changes it does not carry"),
        "{line}"
    );
}

#[test]
fn a_go_toolchain_that_cannot_be_had_is_its_own_cause() {
    let f = fixture(&["linux/amd64"]);
    let lock = f.seed_lock();
    let text = std::fs::read_to_string(&f.config).unwrap();
    let go = format!("go = \"{}\"", local_go_version());
    std::fs::write(&f.config, text.replace(&go, "go = \"1.99.0\"")).unwrap();
    let o = build(&f, "1.34", &[]);
    // Said by the preflight, before the source stage, with the module proxy's word for it.
    let line = assert_failed(&f, &o, 6, &lock);
    assert!(
        line.starts_with("occm-forge: error: preflight: Go toolchain go1.99.0: ")
            && line.contains("GOPROXY is off and the module cache (")
            && line.contains("does not hold golang.org/toolchain@v0.0.1-go1.99.0."),
        "{line}"
    );
    assert!(
        !stderr(&o).contains("occm-forge: source "),
        "{}",
        stderr(&o)
    );
}

#[test]
fn guard_test_of_a_fix_is_required() {
    // Without the fix patch's guard test in the tree, the build must fail even though every test
    // that ran passed.
    let f = fixture(&["linux/amd64"]);
    let cfg = std::fs::read_to_string(&f.config).unwrap();
    let cfg = cfg.replacen(
        &format!("patches = [\"{PATCH_TEST}\", \"{PATCH_FIX}\"]"),
        &format!("patches = [\"{PATCH_FIX}\"]"),
        2,
    );
    std::fs::write(&f.config, cfg).unwrap();
    let lock = f.seed_lock();
    let o = build(&f, "1.34", &[]);
    let line = assert_failed(&f, &o, 5, &lock);
    assert!(
        line.ends_with("TestInstanceExistsNoServer (did not run)"),
        "{line}"
    );
}

#[test]
fn malformed_images_toml_names_line_and_column() {
    let f = fixture(&["linux/amd64"]);
    let lock = f.seed_lock();
    let cfg = std::fs::read_to_string(&f.config).unwrap();
    let line_no = cfg
        .lines()
        .position(|l| l.starts_with("platforms = "))
        .unwrap()
        + 1;
    std::fs::write(&f.config, cfg.replacen("platforms = ", "platfroms = ", 1)).unwrap();
    let o = build(&f, "1.34", &[]);
    let line = assert_failed(&f, &o, 2, &lock);
    assert!(
        line.starts_with(&format!(
            "occm-forge: error: images.toml:{line_no}:1: unknown field `platfroms`"
        )),
        "{line}"
    );
}

#[test]
fn unknown_minor_lists_the_known_ones() {
    let f = fixture(&["linux/amd64"]);
    let lock = f.seed_lock();
    let o = build(&f, "1.99", &[]);
    let line = assert_failed(&f, &o, 2, &lock);
    assert_eq!(
        line,
        "occm-forge: error: images.toml: unknown Kubernetes minor 1.99; images.toml has 1.33, 1.34, 1.35"
    );
}

#[test]
fn unreachable_registry_fails_without_recording() {
    let f = fixture(&["linux/amd64"]);
    let lock = f.seed_lock();
    let addr = format!("127.0.0.1:{}", free_port());
    let repo = format!("{addr}/occm/openstack-cloud-controller-manager");
    let o = build(
        &f,
        "1.34",
        &[
            "--push",
            "--insecure-registry",
            &addr,
            "--repository",
            &repo,
            "--retries",
            "1",
        ],
    );
    let line = assert_failed(&f, &o, 8, &lock);
    assert!(
        stderr(&o).contains("retrying in"),
        "a connection refusal is retried: {}",
        stderr(&o)
    );
    // Found before any build work: the push rights are asked for first.
    assert!(
        line.starts_with(&format!(
            "occm-forge: error: preflight: push to {repo}: registry {addr}: check push permission"
        )),
        "{line}"
    );
    assert!(line.contains("unreachable"), "{line}");
    assert!(
        !stderr(&o).contains("occm-forge: source "),
        "{}",
        stderr(&o)
    );
}

/// `accept --output docs/acceptance.md` beside a reports file that is not one (here empty, as a
/// shell redirect leaves it) is refused in one line naming that file before anything runs: no
/// layout is read, no apiserver started, and the document is not touched.
#[test]
fn accept_refuses_an_unreadable_reports_file_before_it_runs() {
    let f = fixture(&["linux/amd64"]);
    let doc = f.path().join("acceptance.md");
    std::fs::write(&doc, "# kept\n").unwrap();
    std::fs::write(f.path().join("acceptance.json"), "").unwrap();
    let o = occm_forge(f.path())
        .args(["accept", "--k8s", "1.34", "--source"])
        .arg(&f.upstream)
        .arg("--layout")
        .arg(f.path().join("no-layout"))
        .arg("--output")
        .arg(&doc)
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(1), "stderr: {}", stderr(&o));
    assert_eq!(stdout(&o), "");
    let line = error_line(&o);
    assert!(
        line.contains("acceptance.json: not the reports of an acceptance document"),
        "{line}"
    );
    assert_eq!(stderr(&o).lines().count(), 1, "{}", stderr(&o));
    assert_eq!(std::fs::read_to_string(&doc).unwrap(), "# kept\n");
}

/// A patch that raises go.mod's `go` line above the Go images.toml pins is one line naming the
/// requirement, the patch and the pinned Go, exit 2, before any Go process (it used to surface
/// as failed tests, exit 5); so is an upstream tag whose go.mod requires it.
#[test]
fn a_go_line_newer_than_the_pinned_go_is_one_line_before_any_go_process() {
    let f = fixture(&["linux/amd64"]);
    let lock = f.seed_lock();
    let work = f.path().join("go-line-work");
    run(git(f.path())
        .args(["clone", "-q"])
        .arg(&f.upstream)
        .arg(&work));
    run(git(&work).args(["checkout", "-q", "v1.34.1"]));
    let go_mod = std::fs::read_to_string(work.join("go.mod")).unwrap();
    std::fs::write(
        work.join("go.mod"),
        go_mod.replace("\ngo 1.22\n", "\ngo 1.99.0\n"),
    )
    .unwrap();
    run(git(&work).args(["commit", "-q", "-am", "go: require Go 1.99.0"]));
    let text = run(git(&work).args(["format-patch", "-1", "--stdout"]));
    let name = "0003-go-require-Go-1.99.0.patch";
    f.add_patch("1.34", name, &text);
    let o = build(&f, "1.34", &[]);
    let line = assert_failed(&f, &o, 2, &lock);
    let go = local_go_version();
    assert_eq!(
        line,
        format!(
            "occm-forge: error: 1.34: go.mod requires go >= 1.99.0 (patch {name}), but images.toml pins go {go}: move the minor to a Go that has it (`occm-forge pin --k8s <minor> --go 1.99.0` or newer, docs/building.md, \"Go versions\")"
        )
    );
    assert!(!stderr(&o).contains("occm-forge: test"), "{}", stderr(&o));
}

/// A `--source` another user owns (a mirror shared on a build host): libgit2 refuses it as git
/// does (safe.directory); the line names the owner and git's remedy. Needs root, as CI runs.
#[test]
fn a_source_owned_by_another_user_names_the_owner_and_safe_directory() {
    let f = fixture(&["linux/amd64"]);
    let before = f.seed_lock();
    let chown = Command::new("chown")
        .args(["-R", "65534:65534"])
        .arg(&f.upstream)
        .status()
        .unwrap();
    assert!(
        chown.success(),
        "this test makes the fixture upstream another user's and needs root (CI runs as root)"
    );
    let o = build(&f, "1.34", &[]);
    let line = assert_failed(&f, &o, 3, &before);
    let path = f.upstream.display().to_string();
    assert!(
        line.contains("it is owned by ")
            && line.contains("(uid 65534), not by ")
            && line.ends_with(&format!(
                "if you trust it, run `git config --global --add safe.directory {path}`"
            )),
        "{line}"
    );

    // safe.directory is the one setting of git's configuration occm-forge honours: in the
    // user's ~/.gitconfig (also as `<dir>/*`), or in GIT_CONFIG_GLOBAL, it trusts the source.
    let home = f.path().join("home");
    std::fs::create_dir_all(&home).unwrap();
    let parent = f.upstream.parent().unwrap().display().to_string();
    for (file, value) in [
        (home.join(".gitconfig"), path.clone()),
        (home.join(".gitconfig"), format!("{parent}/*")),
        (f.path().join("global.gitconfig"), "*".to_string()),
    ] {
        std::fs::write(&file, format!("[safe]\n\tdirectory = {value}\n")).unwrap();
        let mut cmd = occm_forge(f.path());
        cmd.args(["build", "--k8s", "1.34", "--source"])
            .arg(&f.upstream)
            .arg("--output")
            .arg(f.path().join("out"))
            .env("HOME", &home)
            .env_remove("XDG_CONFIG_HOME")
            .env_remove("GIT_CONFIG_GLOBAL");
        if !file.starts_with(&home) {
            cmd.env("GIT_CONFIG_GLOBAL", &file);
        }
        let o = cmd.output().unwrap();
        assert!(
            o.status.success(),
            "safe.directory = {value}: {}",
            stderr(&o)
        );
        std::fs::remove_file(&file).unwrap();
        std::fs::remove_file(&f.lock).unwrap();
        std::fs::write(&f.lock, &before).unwrap();
    }
}

/// A test that finds its testdata through `runtime.Caller` fails under `-trimpath`
/// (gkampitakis/go-snaps#118): the failure says why, once.
#[test]
fn a_test_failing_on_a_module_relative_path_gets_the_trimpath_hint() {
    let f = fixture(&["linux/amd64"]);
    let lock = f.seed_lock();
    f.add_patch(
        "1.34",
        "0003-add-a-golden-test.patch",
        r#"From: Someone <someone@example.org>
Subject: [PATCH] a golden-file test

---
diff --git a/pkg/openstack/golden_test.go b/pkg/openstack/golden_test.go
new file mode 100644
--- /dev/null
+++ b/pkg/openstack/golden_test.go
@@ -0,0 +1,15 @@
+package openstack
+
+import (
+	"os"
+	"path/filepath"
+	"runtime"
+	"testing"
+)
+
+func TestGolden(t *testing.T) {
+	_, file, _, _ := runtime.Caller(0)
+	if _, err := os.ReadFile(filepath.Join(filepath.Dir(file), "testdata", "golden.txt")); err != nil {
+		t.Fatal(err)
+	}
+}
diff --git a/pkg/openstack/testdata/golden.txt b/pkg/openstack/testdata/golden.txt
new file mode 100644
--- /dev/null
+++ b/pkg/openstack/testdata/golden.txt
@@ -0,0 +1 @@
+golden
"#,
    );
    let o = build(&f, "1.34", &[]);
    let line = assert_failed(&f, &o, 5, &lock);
    assert!(
        line.ends_with("; k8s.io/cloud-provider-openstack/pkg/openstack.TestGolden: its output names k8s.io/cloud-provider-openstack/pkg/openstack/testdata/golden.txt, a module-relative path of pkg/openstack/testdata/golden.txt: occm-forge runs the tests with -trimpath (as it builds), so a test that finds its files through runtime.Caller looks for them there"),
        "{line}"
    );
    assert_eq!(line.matches("-trimpath").count(), 1, "{line}");
}

/// An output flag (`accept --output`, `build --accept-output`, `patches matrix --output`,
/// `build --timings`) naming one of the project's own files is refused before anything runs,
/// and the file is unchanged (`accept --all --output images.toml` replaced images.toml with the
/// acceptance document, found by a break-it pass).
#[test]
fn output_flags_never_replace_images_toml_the_digest_manifest_or_a_patch() {
    let f = fixture(&["linux/amd64"]);
    let o = build(&f, "1.34", &[]);
    assert!(o.status.success(), "{}", stderr(&o));
    let patch = std::fs::read_dir(&f.patches)
        .unwrap()
        .map(|e| e.unwrap().path())
        .find(|p| p.extension().is_some_and(|x| x == "patch"))
        .unwrap();
    let files = [f.config.clone(), f.lock.clone(), patch];
    let before: Vec<Vec<u8>> = files.iter().map(|p| std::fs::read(p).unwrap()).collect();
    for file in &files {
        let file = file.to_str().unwrap();
        let runs: [&[&str]; 4] = [
            &[
                "accept", "--k8s", "1.34", "--layout", "out", "--output", file,
            ],
            &[
                "build",
                "--k8s",
                "1.34",
                "--accept",
                "--accept-output",
                file,
            ],
            &["patches", "matrix", "--k8s", "1.34", "--output", file],
            &["build", "--k8s", "1.34", "--timings", file],
        ];
        for args in runs {
            let o = occm_forge(f.path()).args(args).output().unwrap();
            assert_eq!(o.status.code(), Some(2), "{args:?}: {}", stderr(&o));
            let line = error_line(&o);
            assert!(
                line.contains(&format!("{file}: that is"))
                    || line.contains("that is in the patches directory"),
                "{args:?}: {line}"
            );
            assert!(stdout(&o).is_empty(), "{args:?}: {}", stdout(&o));
        }
    }
    let after: Vec<Vec<u8>> = files.iter().map(|p| std::fs::read(p).unwrap()).collect();
    assert!(before == after, "a project file changed");
}
