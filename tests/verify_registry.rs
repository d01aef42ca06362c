//! `occm-forge verify`: the registry against the digest manifest, on a real docker-registry.

use crate::common;

use std::process::Output;

use common::*;

fn forge(f: &Fixture, reg: &TestRegistry, args: &[&str]) -> Output {
    occm_forge(f.path())
        .args(args)
        .args(["--insecure-registry", &reg.addr, "--source"])
        .arg(&f.upstream)
        .output()
        .unwrap()
}

#[test]
fn verify_passes_then_names_a_retagged_image_and_a_lost_referrer() {
    let reg = TestRegistry::start();
    let f = fixture(&["linux/amd64", "linux/arm64"]);
    let repo = reg.repo("occm/openstack-cloud-controller-manager");
    f.write_config(&repo, &["linux/amd64", "linux/arm64"], "static", &[]);
    for minor in ["1.33", "1.34"] {
        let o = forge(&f, &reg, &["build", "--k8s", minor, "--push"]);
        assert!(o.status.success(), "build {minor}: {}", stderr(&o));
    }

    let o = forge(&f, &reg, &["verify", "--rebuild"]);
    assert!(o.status.success(), "verify: {}{}", stdout(&o), stderr(&o));
    assert_eq!(stdout(&o), "");
    assert!(
        stderr(&o).contains("verify 1.34: the rebuild gives the same digest"),
        "{}",
        stderr(&o)
    );

    // Someone points the 1.34 tag at the 1.33 image.
    let lock = read_lock(&f.lock);
    let d34 = lock["images"]["1.34"]["digest"]
        .as_str()
        .unwrap()
        .to_string();
    let d33 = lock["images"]["1.33"]["digest"]
        .as_str()
        .unwrap()
        .to_string();
    skopeo(&[
        "copy",
        "--quiet",
        "--all",
        "--src-tls-verify=false",
        "--dest-tls-verify=false",
        &format!("docker://{repo}:v1.33.1-occmforge.1"),
        &format!("docker://{repo}:v1.34.1-occmforge.1"),
    ]);
    let o = forge(&f, &reg, &["verify", "--k8s", "1.34"]);
    assert_eq!(o.status.code(), Some(10), "{}", stderr(&o));
    assert_eq!(
        stdout(&o),
        format!(
            "1.34: tag: {repo}:v1.34.1-occmforge.1 serves {d33}, the digest manifest records {d34}\n"
        )
    );
    assert!(
        stderr(&o).ends_with(
            "occm-forge: error: verify: 1 mismatch between the registry and images.lock.yaml\n"
        ),
        "{}",
        stderr(&o)
    );

    // The referrers index of the 1.33 amd64 image disappears.
    let amd64 = lock["images"]["1.33"]["manifests"]["linux/amd64"]
        .as_str()
        .unwrap();
    skopeo(&[
        "delete",
        "--tls-verify=false",
        &format!("docker://{repo}:{}", amd64.replace(':', "-")),
    ]);
    let o = forge(&f, &reg, &["verify", "--k8s", "1.33"]);
    assert_eq!(o.status.code(), Some(10), "{}", stderr(&o));
    let sbom = lock["images"]["1.33"]["sbom"]["linux/amd64"]
        .as_str()
        .unwrap();
    assert_eq!(
        stdout(&o),
        format!(
            "1.33: sbom linux/amd64: {} is not listed among the referrers of {}\n",
            &sbom[..19],
            &amd64[..19]
        )
    );
}
