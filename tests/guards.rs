//! What protects a release: a published tag never moves to other inputs or content (neither in
//! the digest manifest nor in the registry), an unpublished build never replaces a published
//! entry, merged fragments are held to the same rules, and a misspelt patch key is an error.

use crate::common;

use std::process::Output;

use common::*;

fn build(f: &Fixture, reg: &TestRegistry, extra: &[&str]) -> Output {
    occm_forge(f.path())
        .args([
            "build",
            "--k8s",
            "1.34",
            "--insecure-registry",
            &reg.addr,
            "--source",
        ])
        .arg(&f.upstream)
        .args(extra)
        .output()
        .unwrap()
}

fn last_line(o: &Output) -> String {
    stderr(o).lines().last().unwrap_or_default().to_string()
}

#[test]
fn a_published_tag_never_moves() {
    let reg = TestRegistry::start();
    let f = fixture(&["linux/amd64"]);
    let repo = reg.repo("occm/openstack-cloud-controller-manager");
    f.write_config(&repo, &["linux/amd64"], "static", &[]);
    let o = build(&f, &reg, &["--push"]);
    assert!(o.status.success(), "{}", stderr(&o));
    let published = std::fs::read(&f.lock).unwrap();
    let digest = read_lock(&f.lock)["images"]["1.34"]["digest"]
        .as_str()
        .unwrap()
        .to_string();

    // Another base under the same tag (the path docs/getting-started.md warns about: "build
    // with --base static, then pin the go-runner base") is refused before anything is built.
    let base = format!(
        "{}@{}",
        reg.repo("base/runner:v1"),
        push_base(f.path(), &reg.repo("base/runner"), "v1")
    );
    let o = build(&f, &reg, &["--push", "--base", &base]);
    assert_eq!(o.status.code(), Some(9), "{}", stderr(&o));
    assert!(
        last_line(&o).contains(&format!(
            "tag v1.34.1-occmforge.1 was recorded with other inputs: base static → {base};"
        )),
        "{}",
        last_line(&o)
    );
    assert!(
        last_line(&o).contains("bump `revision` for 1.34"),
        "{}",
        last_line(&o)
    );
    assert_eq!(std::fs::read(&f.lock).unwrap(), published);

    // Without the digest manifest's memory, the registry still refuses to move the tag.
    std::fs::remove_file(&f.lock).unwrap();
    let o = build(&f, &reg, &["--push", "--base", &base]);
    assert_eq!(o.status.code(), Some(8), "{}", stderr(&o));
    assert!(
        last_line(&o).contains(&format!("the tag already serves {digest}")),
        "{}",
        last_line(&o)
    );
    assert!(!f.lock.exists());
    assert_eq!(
        skopeo(&[
            "inspect",
            "--tls-verify=false",
            "--format",
            "{{.Digest}}",
            &format!("docker://{repo}:v1.34.1-occmforge.1")
        ])
        .trim(),
        digest
    );
    // Deliberately, it can.
    let o = build(&f, &reg, &["--push", "--base", &base, "--replace-tag"]);
    assert!(o.status.success(), "{}", stderr(&o));
}

#[test]
fn an_unpublished_build_keeps_the_published_entry() {
    let reg = TestRegistry::start();
    let f = fixture(&["linux/amd64"]);
    let repo = reg.repo("occm/openstack-cloud-controller-manager");
    f.write_config(&repo, &["linux/amd64"], "static", &[]);
    assert!(build(&f, &reg, &["--push"]).status.success());
    let published = std::fs::read(&f.lock).unwrap();
    let out = f.path().join("local-out");
    let o = build(&f, &reg, &["--output", out.to_str().unwrap()]);
    assert!(o.status.success(), "{}", stderr(&o));
    assert_eq!(
        std::fs::read(&f.lock).unwrap(),
        published,
        "the published entry changed"
    );
    assert!(
        stderr(&o).contains("kept: it is published and this build was not pushed"),
        "{}",
        stderr(&o)
    );
    // stdout names the image where it is: the layout.
    assert_eq!(
        stdout(&o),
        format!("oci:{}:v1.34.1-occmforge.1\n", out.display())
    );
    skopeo(&["inspect", "--raw", stdout(&o).trim()]);
}

#[test]
fn merged_fragments_cannot_move_a_published_tag() {
    let reg = TestRegistry::start();
    let f = fixture(&["linux/amd64"]);
    let repo = reg.repo("occm/openstack-cloud-controller-manager");
    f.write_config(&repo, &["linux/amd64"], "static", &[]);
    let frag = f.path().join("1.34.yaml");
    let o = build(
        &f,
        &reg,
        &["--push", "--manifest-fragment", frag.to_str().unwrap()],
    );
    assert!(o.status.success(), "{}", stderr(&o));
    let o = occm_forge(f.path())
        .args(["manifest", "merge"])
        .arg(&frag)
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", stderr(&o));
    let merged = std::fs::read(&f.lock).unwrap();
    // A hand-edited fragment: same tag, another upstream commit.
    let edited = f.path().join("edited.yaml");
    let text = std::fs::read_to_string(&frag)
        .unwrap()
        .replace(&f.commits.v1_34, &"1".repeat(40));
    std::fs::write(&edited, text).unwrap();
    let o = occm_forge(f.path())
        .args(["manifest", "merge"])
        .arg(&edited)
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(9), "{}", stderr(&o));
    assert!(
        last_line(&o).contains(&format!(
            "1.34: tag v1.34.1-occmforge.1 was recorded with other inputs: upstream commit {} → {};",
            f.commits.v1_34,
            "1".repeat(40)
        )),
        "{}",
        last_line(&o)
    );
    assert_eq!(std::fs::read(&f.lock).unwrap(), merged);
    let o = occm_forge(f.path())
        .args(["manifest", "merge", "missing.yaml"])
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(9));
    assert!(
        last_line(&o).contains("missing.yaml: no such fragment file"),
        "{}",
        last_line(&o)
    );
}

#[test]
fn a_misspelt_patch_key_is_an_error() {
    let f = fixture(&["linux/amd64"]);
    let cfg = std::fs::read_to_string(&f.config).unwrap();
    let line = cfg
        .lines()
        .position(|l| l.starts_with("[patches."))
        .unwrap()
        + 1;
    std::fs::write(
        &f.config,
        cfg.replacen(
            "[patches.\"0002-openstack-treat",
            "[patches.\"0002-openstack-trat",
            1,
        ),
    )
    .unwrap();
    let o = occm_forge(f.path())
        .args(["patches", "verify", "--k8s", "1.34", "--source"])
        .arg(&f.upstream)
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(2), "{}", stderr(&o));
    assert!(
        last_line(&o).starts_with(&format!("occm-forge: error: images.toml:{line}:"))
            && last_line(&o).contains("no such file in"),
        "{}",
        last_line(&o)
    );
}
