//! pipelines/watch.yml's refresh job, its own `run:` scripts run as GitHub runs them, on the
//! fixture upstream with 1.34 pinned to a new tag: a tag that leaves the series alone and one
//! that moved a patch's context are proposed (the refreshed patches/ and images.toml handed
//! over), a tag that changed a patched line fails the job naming the patch, the file and the
//! hunk with the commands that resolve it.

use crate::common;

use std::path::Path;

use common::workflow::Job;
use common::*;

/// The refresh job for minors `1.34`, occm-forge on PATH, upstream read from the fixture.
fn job(f: &Fixture) -> Job {
    let bin = f.path().join("bin");
    std::fs::create_dir_all(&bin).unwrap();
    std::os::unix::fs::symlink(env!("CARGO_BIN_EXE_occm-forge"), bin.join("occm-forge")).unwrap();
    let cfg = std::fs::read_to_string(&f.config).unwrap().replace(
        "upstream = \"https://github.com/kubernetes/cloud-provider-openstack\"",
        &format!("upstream = \"{}\"", f.upstream.display()),
    );
    std::fs::write(&f.config, cfg).unwrap();
    // The workspace is the repository's checkout.
    run(git(f.path()).args(["init", "-q", "-b", "main"]));
    run(git(f.path()).args(["add", "images.toml", "patches"]));
    run(git(f.path()).args(["commit", "-q", "-m", "checkout"]));
    let path = format!("{}:{}", bin.display(), std::env::var("PATH").unwrap());
    let job = Job::new(
        "watch.yml",
        "refresh",
        &[
            ("PATH", path),
            ("OCCM_FORGE_CACHE", shared_cache().display().to_string()),
            ("GOPROXY", "off".into()),
        ],
    );
    let pin = job.runner_temp().join("pin");
    std::fs::create_dir_all(&pin).unwrap();
    std::fs::write(pin.join("pr-body.md"), "Pinned with occm-forge pin.\n").unwrap();
    job
}

fn refresh(job: &Job, workspace: &Path) -> (std::process::Output, String) {
    let (o, minors, _) = refresh_minors(job, workspace, "1.34");
    (o, minors)
}

/// Runs the refresh step for `minors`; returns its output, the minors it refreshed and those
/// whose series does not apply.
fn refresh_minors(
    job: &Job,
    workspace: &Path,
    minors: &str,
) -> (std::process::Output, String, String) {
    let (o, outputs) = job.run("Refresh the patch series", workspace, &[("MINORS", minors)]);
    let get = |k: &str| outputs.get(k).cloned().unwrap_or_default();
    (o, get("minors"), get("conflicts"))
}

/// Runs the step that fails the job for `conflicts` (when there are any, as its `if:` says).
fn fail_step(job: &Job, workspace: &Path, conflicts: &str) -> std::process::Output {
    let (o, _) = job.run(
        "Fail for the minors whose series does not apply",
        workspace,
        &[("CONFLICTS", conflicts)],
    );
    o
}

/// Runs the hand-over step; returns the handed-over directory.
fn hand_over(job: &Job, workspace: &Path) -> std::path::PathBuf {
    let (o, _) = job.run("Hand over the refreshed series", workspace, &[]);
    assert!(o.status.success(), "{}{}", stdout(&o), stderr(&o));
    job.runner_temp().join("refreshed")
}

fn read(path: &Path) -> Vec<u8> {
    std::fs::read(path).unwrap()
}

#[test]
fn a_tag_that_leaves_the_series_alone_is_proposed_as_it_is() {
    let f = fixture(&["linux/amd64"]);
    f.release_1_34_2(
        "// ErrNotFound is what a lookup by name returns",
        "// ErrNotFound is what a lookup by its name returns",
    );
    let job = job(&f);
    let (o, minors) = refresh(&job, f.path());
    assert!(o.status.success(), "{}{}", stdout(&o), stderr(&o));
    assert_eq!(minors, "1.34", "the minor goes on to prove and accept");
    let out = hand_over(&job, f.path());
    assert_eq!(read(&out.join("images.toml")), read(&f.config));
    for name in [PATCH_TEST, PATCH_FIX] {
        assert_eq!(
            read(&out.join("patches").join(name)),
            read(&f.patches.join(name))
        );
    }
    let body = std::fs::read_to_string(out.join("pr-body.md")).unwrap();
    assert!(
        body.starts_with("Pinned with occm-forge pin.\n### 1.34: the patch series on v1.34.2\n"),
        "{body}"
    );
    assert!(body.contains(&format!("{PATCH_FIX}  applied\n")), "{body}");
    assert!(body.contains("No patch of 1.34 changed."), "{body}");
}

#[test]
fn a_moved_context_is_proposed_as_the_minors_refreshed_patch() {
    let f = fixture(&["linux/amd64"]);
    f.release_1_34_2(
        "// InstanceExists reports whether a server named name exists.",
        "// InstanceExists reports whether a server with that name exists.",
    );
    let job = job(&f);
    let (o, minors) = refresh(&job, f.path());
    assert!(o.status.success(), "{}{}", stdout(&o), stderr(&o));
    assert_eq!(minors, "1.34");
    let out = hand_over(&job, f.path());
    let variant = PATCH_FIX.replace(".patch", ".k8s-1.34.patch");
    let refreshed = std::fs::read_to_string(out.join("patches").join(&variant)).unwrap();
    assert!(
        refreshed.contains(" // InstanceExists reports whether a server with that name exists.\n")
    );
    // The shared file stays for 1.33 and 1.35; images.toml lists the variant for 1.34.
    assert_eq!(
        read(&out.join("patches").join(PATCH_FIX)),
        read(&f.patches.join(PATCH_FIX))
    );
    let cfg = std::fs::read_to_string(out.join("images.toml")).unwrap();
    assert_eq!(cfg.matches(&variant).count(), 1, "{cfg}");
    let body = std::fs::read_to_string(out.join("pr-body.md")).unwrap();
    assert!(
        body.contains(&format!(
            "{PATCH_FIX}  applied three-way ({INSTANCES}: 1 hunk merged"
        )),
        "{body}"
    );
    assert!(
        body.contains(&format!("patches/{variant}  written: 1.34's own variant")),
        "{body}"
    );
}

#[test]
fn a_conflict_fails_the_job_naming_the_patch_file_and_hunk_and_what_to_run() {
    let f = fixture(&["linux/amd64"]);
    f.release_1_34_2(
        "\treturn ErrNotFound\n}",
        "\treturn ErrNotFound // nothing by that name\n}",
    );
    let job = job(&f);
    let before = (read(&f.config), read(&f.patches.join(PATCH_FIX)));
    let (o, minors, conflicts) = refresh_minors(&job, f.path(), "1.34");
    assert!(o.status.success(), "{}{}", stdout(&o), stderr(&o));
    assert_eq!(minors, "", "nothing goes on to be proposed");
    assert_eq!(conflicts, "1.34");
    let out = stdout(&o);
    let error = out
        .lines()
        .find(|l| l.starts_with("::error "))
        .unwrap_or_else(|| panic!("no error annotation: {out}"));
    assert!(
        error.starts_with(&format!(
            "::error title=1.34: a patch does not apply on v1.34.2::patch {PATCH_FIX} conflicts: {INSTANCES}, hunk 1 (@@ -14,7 +14,7 @@ func lookup"
        )),
        "{error}"
    );
    assert!(
        error.ends_with("Resolve it locally: occm-forge pin --k8s 1.34 --tag v1.34.2 --go current; occm-forge patches edit --k8s 1.34 (then --continue, and occm-forge patches export --k8s 1.34)"),
        "{error}"
    );
    assert!(
        job.summary()
            .contains("### 1.34: a patch does not apply on v1.34.2")
    );
    assert!(
        (read(&f.config), read(&f.patches.join(PATCH_FIX))) == before,
        "the failed refresh wrote images.toml or patches/"
    );
    // The job fails, after handing over.
    let o = fail_step(&job, f.path(), &conflicts);
    assert_eq!(o.status.code(), Some(1), "{}{}", stdout(&o), stderr(&o));
}

/// One minor's patch conflicting on its new tag does not hold back another's (it did: the
/// pull-request job needed the whole refresh job, which failed): 1.33 on a new tag that leaves
/// its series alone is refreshed and handed over, 1.34's conflict is named, its pin goes back to
/// the checkout's, and the job fails only at its end.
#[test]
fn one_minors_conflict_leaves_the_others_proposed() {
    let f = fixture(&["linux/amd64"]);
    let job = job(&f);
    let checkout = read(&f.config);
    // 1.33 on v1.33.2, which changes nothing the series touches.
    let up = &f.upstream;
    run(git(up).args(["checkout", "-q", "-b", "release-1.33", "v1.33.1"]));
    std::fs::write(up.join("NOTES.md"), "1.33.2\n").unwrap();
    run(git(up).args(["add", "NOTES.md"]));
    run(git(up).args(["commit", "-q", "-m", "v1.33.2"]));
    run(git(up).args(["tag", "v1.33.2"]));
    let v1_33_2 = run(git(up).args(["rev-parse", "HEAD"])).trim().to_string();
    run(git(up).args(["checkout", "-q", "master"]));
    let cfg = std::fs::read_to_string(&f.config).unwrap().replace(
        &format!(
            "upstream_tag = \"v1.33.1\"\ncommit = \"{}\"",
            f.commits.v1_33
        ),
        &format!("upstream_tag = \"v1.33.2\"\ncommit = \"{v1_33_2}\""),
    );
    std::fs::write(&f.config, cfg).unwrap();
    // 1.34 on v1.34.2, which changed a patched line.
    f.release_1_34_2(
        "\treturn ErrNotFound\n}",
        "\treturn ErrNotFound // nothing by that name\n}",
    );
    let (o, minors, conflicts) = refresh_minors(&job, f.path(), "1.33 1.34");
    assert!(o.status.success(), "{}{}", stdout(&o), stderr(&o));
    assert_eq!((minors.as_str(), conflicts.as_str()), ("1.33", "1.34"));
    assert!(stdout(&o).contains("::error title=1.34: a patch does not apply on v1.34.2::"));
    let cfg = std::fs::read_to_string(&f.config).unwrap();
    let before = String::from_utf8(checkout).unwrap();
    assert!(cfg.contains("upstream_tag = \"v1.33.2\""), "{cfg}");
    let entry = |text: &str| {
        let at = text.find("[minors.\"1.34\"]").unwrap();
        let end = text[at + 1..]
            .find("[minors.")
            .map_or(text.len(), |e| at + 1 + e);
        text[at..end].to_string()
    };
    assert_eq!(entry(&cfg), entry(&before), "1.34's pin was not taken back");
    let out = hand_over(&job, f.path());
    let body = std::fs::read_to_string(out.join("pr-body.md")).unwrap();
    assert!(
        body.contains("### 1.33: the patch series on v1.33.2")
            && body.contains("### 1.34: not proposed, a patch does not apply on v1.34.2"),
        "{body}"
    );
    assert_eq!(read(&out.join("images.toml")), read(&f.config));
    let o = fail_step(&job, f.path(), &conflicts);
    assert_eq!(o.status.code(), Some(1), "{}{}", stdout(&o), stderr(&o));
}
