//! Publishing through faults: a fault-injecting proxy in front of a real docker-registry injects
//! 500s and connection resets (recovered by retry), and kills the registry mid-push (a clear
//! error, the digest manifest unchanged, the tag not moved; a rerun completes and skips the blobs
//! already present); an upload `POST` redirected to another host whose `Location` is relative; a
//! registry that accepts connections and never answers; a registry whose disk is read-only.

mod common;

use std::process::Output;
use std::time::{Duration, Instant};

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

/// containerd#11949: the upload `POST` is answered `307` to another host, whose registry answers
/// with a relative `Location`. RFC 7231 §7.1.2 resolves it against the redirect target; resolving
/// it against the first host sends the `PUT` where no such upload exists (404
/// `BLOB_UPLOAD_UNKNOWN`).
#[test]
fn upload_redirected_to_another_host_with_a_relative_location() {
    let reg = TestRegistry::start_with(&RegistryOptions {
        relative_urls: true,
        ..Default::default()
    });
    let f = fixture(&["linux/amd64"]);
    let second = FaultProxy::start(&reg.addr, vec![]);
    let second_port: u16 = second.addr.rsplit(':').next().unwrap().parse().unwrap();
    let first = FaultProxy::start(
        &reg.addr,
        vec![
            rule(
                "POST",
                "/blobs/uploads/",
                Fault::Redirect307(second_port),
                usize::MAX,
                0,
            ),
            rule(
                "PUT",
                "/blobs/uploads/",
                Fault::UploadUnknown,
                usize::MAX,
                0,
            ),
        ],
    );
    let o = push(&f, &first, "1");
    assert!(o.status.success(), "{}", stderr(&o));
    use std::sync::atomic::Ordering::SeqCst;
    let redirected = first.counts.redirects.load(SeqCst);
    assert!(redirected >= 3, "uploads redirected: {redirected}");
    assert_eq!(
        first.counts.upload_unknown.load(SeqCst),
        0,
        "a PUT went to the first host"
    );
    // Each redirected POST and its PUT went through the second host.
    assert!(second.counts.forwarded.load(SeqCst) >= 2 * redirected);
    let digest = read_lock(&f.lock)["images"]["1.34"]["digest"]
        .as_str()
        .unwrap()
        .to_string();
    let raw = skopeo(&[
        "inspect",
        "--tls-verify=false",
        "--raw",
        &format!(
            "docker://{}:v1.34.1-occmforge.1",
            reg.repo("occm/openstack-cloud-controller-manager")
        ),
    ]);
    assert_eq!(format!("sha256:{}", sha256_hex(raw.as_bytes())), digest);
}

/// A registry that accepts the connection and never answers: with the idle timeout at 2 s and
/// the operation bound at 10 s (set through their environment variables), the push fails in
/// seconds, not after 300 s × 6 tries, with one line naming the registry and the cause.
#[test]
fn a_registry_that_never_answers_fails_within_the_operation_timeout() {
    let f = fixture(&["linux/amd64"]);
    let (addr, first_connection) = silent_listener();
    let (o, ended) = output_within(
        occm_forge(f.path())
            .args(["build", "--k8s", "1.34", "--push", "--repository"])
            .arg(format!("{addr}/occm/openstack-cloud-controller-manager"))
            .args(["--insecure-registry", &addr, "--source"])
            .arg(&f.upstream)
            .arg("--output")
            .arg(f.path().join("out"))
            .env("OCCM_FORGE_REGISTRY_TIMEOUT", "2")
            .env("OCCM_FORGE_REGISTRY_OPERATION_TIMEOUT", "10"),
        Duration::from_secs(180),
    );
    let done = Instant::now();
    assert!(ended, "still running after 180 s: {}", stderr(&o));
    let started = first_connection
        .lock()
        .unwrap()
        .expect("occm-forge never connected");
    let waited = done - started;
    assert!(
        waited < Duration::from_secs(30),
        "took {waited:?} after the first connection: {}",
        stderr(&o)
    );
    assert_eq!(o.status.code(), Some(8), "{}", stderr(&o));
    let last = stderr(&o).lines().last().unwrap_or_default().to_string();
    eprintln!("{last}");
    assert!(
        // (How many attempts fit in the bound depends on the machine's load; that it is
        // bounded, and the cause, do not.)
        last.starts_with(&format!("occm-forge: error: publish: registry {addr}: "))
            && last.contains("no answer within 2 s"),
        "{last}"
    );
}

/// docker-registry with a read-only storage directory answers 500 with its storage driver's
/// error as JSON: the error says what it means in one line, without the JSON, and is not retried.
#[test]
fn a_read_only_registry_disk_is_named_in_one_line() {
    let reg = TestRegistry::start_with(&RegistryOptions {
        read_only: true,
        ..Default::default()
    });
    let f = fixture(&["linux/amd64"]);
    let lock_before = f.seed_lock();
    let repo = reg.repo("occm/openstack-cloud-controller-manager");
    let o = occm_forge(f.path())
        .args(["build", "--k8s", "1.34", "--push", "--repository", &repo])
        .args(["--insecure-registry", &reg.addr, "--source"])
        .arg(&f.upstream)
        .arg("--output")
        .arg(f.path().join("out"))
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(8), "{}", stderr(&o));
    let last = stderr(&o).lines().last().unwrap_or_default().to_string();
    eprintln!("{last}");
    assert!(
        last.starts_with(&format!(
            "occm-forge: error: publish: registry {}: push blob sha256:",
            reg.addr
        )) && last.contains("read-only file system")
            && last.contains("the registry's storage is mounted read-only")
            && !last.contains('{'),
        "{last}\nregistry log: {}",
        reg.log()
    );
    assert!(
        !stderr(&o).contains("retrying in"),
        "a read-only disk was retried: {}",
        stderr(&o)
    );
    assert_eq!(std::fs::read(&f.lock).unwrap(), lock_before);
}
