//! Publishing through faults: a fault-injecting proxy in front of a real docker-registry injects
//! 500s and connection resets (recovered by retry), and kills the registry mid-push (a clear
//! error, the digest manifest unchanged, the tag not moved; a rerun completes and skips the blobs
//! already present).

mod common;

use std::process::Output;

use common::*;

fn push(f: &Fixture, proxy: &FaultProxy, retries: &str) -> Output {
    let repo = proxy.repo("occm/openstack-cloud-controller-manager");
    occm_forge(f.path())
        .args([
            "build",
            "--k8s",
            "1.34",
            "--push",
            "--repository",
            &repo,
            "--insecure-registry",
            &proxy.addr,
        ])
        .args(["--retries", retries, "--source"])
        .arg(&f.upstream)
        .arg("--output")
        .arg(f.path().join("out"))
        .output()
        .unwrap()
}

fn rule(
    method: &'static str,
    path: &'static str,
    fault: Fault,
    times: usize,
    after: usize,
) -> FaultRule {
    FaultRule {
        method,
        path_contains: path,
        fault,
        times,
        after,
    }
}

#[test]
fn injected_500s_and_resets_are_retried() {
    let reg = TestRegistry::start();
    let f = fixture(&["linux/amd64", "linux/arm64"]);
    let proxy = FaultProxy::start(
        &reg.addr,
        vec![
            rule("HEAD", "/manifests/", Fault::Reset, 1, 0),
            rule("HEAD", "/blobs/", Fault::Status500, 2, 0),
            rule("POST", "/blobs/uploads/", Fault::Reset, 2, 1),
            rule("PUT", "/blobs/uploads/", Fault::Status500, 2, 0),
            rule("PUT", "/manifests/", Fault::Status500, 1, 0),
            rule("PUT", "/manifests/v1.34.1", Fault::Reset, 1, 0),
        ],
    );
    let o = push(&f, &proxy, "5");
    let (s500, resets, _) = proxy.injected();
    eprintln!("faults injected: {s500} HTTP 500s, {resets} connection resets");
    assert!(o.status.success(), "{}", stderr(&o));
    assert_eq!((s500, resets), (5, 4), "every planned fault was injected");
    assert!(
        stderr(&o).matches("retrying in").count() >= 9,
        "{}",
        stderr(&o)
    );

    // What the registry holds, read directly (not through the proxy), is what was recorded.
    let lock = read_lock(&f.lock);
    let digest = lock["images"]["1.34"]["digest"].as_str().unwrap();
    let direct = reg.repo("occm/openstack-cloud-controller-manager");
    let raw = skopeo(&[
        "inspect",
        "--tls-verify=false",
        "--raw",
        &format!("docker://{direct}:v1.34.1-occmforge.1"),
    ]);
    assert_eq!(format!("sha256:{}", sha256_hex(raw.as_bytes())), digest);
    let all = f.path().join("copied");
    skopeo(&[
        "copy",
        "--quiet",
        "--all",
        "--src-tls-verify=false",
        &format!("docker://{direct}:v1.34.1-occmforge.1"),
        &format!("oci:{}:x", all.display()),
    ]);
}

#[test]
fn registry_killed_mid_push_then_rerun_completes() {
    let mut reg = TestRegistry::start();
    let f = fixture(&["linux/amd64", "linux/arm64"]);
    let lock_before = f.seed_lock();
    // The second blob upload reaches the registry, which then dies before answering.
    let proxy = FaultProxy::start(
        &reg.addr,
        vec![rule(
            "PUT",
            "/blobs/uploads/",
            Fault::KillUpstream(reg.pid()),
            1,
            1,
        )],
    );
    let o = push(&f, &proxy, "1");
    assert_eq!(o.status.code(), Some(8), "{}", stderr(&o));
    let last = stderr(&o).lines().last().unwrap_or_default().to_string();
    assert!(
        last.starts_with(&format!(
            "occm-forge: error: publish: registry {}: ",
            proxy.addr
        )),
        "{last}"
    );
    assert_eq!(
        std::fs::read(&f.lock).unwrap(),
        lock_before,
        "the digest manifest changed"
    );
    assert_eq!(proxy.injected().2, 1);

    // Back up: the tag was never written.
    reg.kill();
    reg.restart();
    let direct = reg.repo("occm/openstack-cloud-controller-manager");
    assert_eq!(
        reg.get_status("/v2/occm/openstack-cloud-controller-manager/manifests/v1.34.1-occmforge.1"),
        Some(404),
        "the tag points at a half-pushed image"
    );

    // The rerun completes and reuses what reached the registry.
    proxy.set_rules(vec![]);
    let o = push(&f, &proxy, "1");
    assert!(o.status.success(), "{}", stderr(&o));
    let publish = stderr(&o)
        .lines()
        .find(|l| l.starts_with("occm-forge: publish"))
        .unwrap()
        .to_string();
    assert!(
        !publish.contains(" 0 already present"),
        "the rerun uploaded everything again: {publish}"
    );
    let lock = read_lock(&f.lock);
    let digest = lock["images"]["1.34"]["digest"].as_str().unwrap();
    let raw = skopeo(&[
        "inspect",
        "--tls-verify=false",
        "--raw",
        &format!("docker://{direct}:v1.34.1-occmforge.1"),
    ]);
    assert_eq!(format!("sha256:{}", sha256_hex(raw.as_bytes())), digest);
    // Exactly one complete image: every blob of both platforms can be copied out.
    skopeo(&[
        "copy",
        "--quiet",
        "--all",
        "--src-tls-verify=false",
        &format!("docker://{direct}:v1.34.1-occmforge.1"),
        &format!("oci:{}:x", f.path().join("copied").display()),
    ]);
    let tags = reg
        .get_body("/v2/occm/openstack-cloud-controller-manager/tags/list")
        .unwrap_or_default();
    assert!(tags.contains("\"v1.34.1-occmforge.1\""), "{tags}");
}
