//! `patches prove` and "already upstream" on the fixture upstream: the real binary, real git,
//! the real Go toolchain.

use crate::common;

use std::process::Output;

use common::*;

fn verify(f: &Fixture, minor: &str) -> Output {
    occm_forge(f.path())
        .args(["patches", "prove", "--k8s", minor, "--source"])
        .arg(&f.upstream)
        .output()
        .unwrap()
}

/// The table row (stdout line) for `patch` in `minor`.
fn row<'a>(out: &'a str, minor: &str, patch: &str) -> &'a str {
    out.lines()
        .find(|l| l.starts_with(&format!("| {minor} |")) && l.contains(&format!("`{patch}`")))
        .unwrap_or_else(|| panic!("no row for {patch} in:\n{out}"))
}

#[test]
fn verify_shows_the_guard_red_without_the_fix_and_green_with_it() {
    let f = fixture(&["linux/amd64"]);
    let o = verify(&f, "1.34");
    assert!(o.status.success(), "{}", stderr(&o));
    let out = stdout(&o);
    assert_eq!(
        row(&out, "1.34", PATCH_FIX),
        format!(
            "| 1.34 | v1.34.1 | `{PATCH_FIX}` | applied | `TestInstanceExistsNoServer` | FAIL | PASS | ok: red without the fix, green with it |"
        )
    );
    assert_eq!(
        row(&out, "1.34", PATCH_TEST),
        format!("| 1.34 | v1.34.1 | `{PATCH_TEST}` | applied | — | — | — | applies |")
    );
    assert!(
        out.lines()
            .any(|l| l.starts_with("| 1.34 |") && l.ends_with("| 2 / 0 / 1 | ok |")),
        "{out}"
    );
}

#[test]
fn a_guard_that_passes_without_the_fix_fails_verification() {
    let f = fixture(&["linux/amd64"]);
    let cfg = std::fs::read_to_string(&f.config).unwrap();
    std::fs::write(
        &f.config,
        cfg.replace(
            "guarded_by = [\"TestInstanceExistsNoServer\"]",
            "guarded_by = [\"TestInstanceExistsFound\"]",
        ),
    )
    .unwrap();
    let o = verify(&f, "1.34");
    assert_eq!(o.status.code(), Some(5), "{}", stderr(&o));
    assert!(
        row(&stdout(&o), "1.34", PATCH_FIX)
            .ends_with("| PASS | PASS | FAILED: the guard passes without the fix |")
    );
    assert_eq!(
        stderr(&o).lines().last().unwrap(),
        "occm-forge: error: prove: 1.34 is not proven: see the table"
    );
}

#[test]
fn a_fix_already_upstream_is_reported_and_skipped_by_build_and_verify() {
    let f = fixture(&["linux/amd64"]);
    let o = verify(&f, "1.35");
    assert!(o.status.success(), "{}", stderr(&o));
    assert!(row(&stdout(&o), "1.35", PATCH_FIX).contains("| already upstream | `TestInstanceExistsNoServer` | PASS | PASS | already upstream — drop it from the series |"));

    let o = occm_forge(f.path())
        .args(["build", "--k8s", "1.35", "--source"])
        .arg(&f.upstream)
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", stderr(&o));
    assert!(
        stderr(&o).contains(&format!(
            "patch {PATCH_FIX}: already upstream in v1.35.0 — drop it from the series"
        )),
        "{}",
        stderr(&o)
    );
    let lock = read_lock(&f.lock);
    assert_eq!(
        lock["images"]["1.35"]["already_upstream"][0].as_str(),
        Some(PATCH_FIX)
    );
    assert_eq!(lock["images"]["1.35"]["published"].as_bool(), Some(false));
}

#[test]
fn an_uncarried_fix_whose_guard_passes_is_reported_as_bug_absent() {
    let f = fixture(&["linux/amd64"]);
    let cfg = std::fs::read_to_string(&f.config).unwrap();
    // 1.35 (upstream already fixed) carries only the test patch.
    let at = cfg.find("[minors.\"1.35\"]").unwrap();
    let tail = cfg[at..].replace(
        &format!("patches = [\"{PATCH_TEST}\", \"{PATCH_FIX}\"]"),
        &format!("patches = [\"{PATCH_TEST}\"]"),
    );
    std::fs::write(&f.config, format!("{}{tail}", &cfg[..at])).unwrap();
    let o = verify(&f, "1.35");
    assert!(o.status.success(), "{}", stderr(&o));
    assert!(row(&stdout(&o), "1.35", PATCH_FIX).ends_with(
        "| not in series | `TestInstanceExistsNoServer` | PASS | — | not carried: the guard passes unpatched (bug absent in this release) |"
    ));
}
