//! Publishing through faults: a fault-injecting proxy in front of a real docker-registry injects
//! 500s and connection resets (recovered by retry), and kills the registry mid-push (a clear
//! error, the digest manifest unchanged, the tag not moved; a rerun completes and skips the blobs
//! already present); an upload `POST` redirected to another host whose `Location` is relative; a
//! registry that accepts connections and never answers; a registry whose disk is read-only; a
//! referrer upload that fails (the tag is the last write: it does not move, nothing is recorded);
//! a registry that refuses manifests carrying `subject` (`--referrers`); a registry whose storage
//! is full (507, not retried); a registry that ignores the body of a monolithic upload `PUT`
//! (chunked uploads) and answers `416` to a chunk.

use crate::common;

use std::process::Output;
use std::time::{Duration, Instant};

use common::*;

fn push(f: &Fixture, proxy: &FaultProxy, retries: &str) -> Output {
    push_with(f, proxy, retries, &[])
}

fn push_with(f: &Fixture, proxy: &FaultProxy, retries: &str, extra: &[&str]) -> Output {
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
        .args(extra)
        .output()
        .unwrap()
}

const REPO: &str = "occm/openstack-cloud-controller-manager";
const TAG: &str = "v1.34.1-occmforge.1";

/// The raw manifest `reference` (tag or digest) of the fixture repository, read from the
/// registry directly with skopeo; `None` when it has none.
fn raw_manifest(reg: &TestRegistry, reference: &str) -> Option<String> {
    let sep = if reference.starts_with("sha256:") {
        "@"
    } else {
        ":"
    };
    let o = std::process::Command::new("skopeo")
        .args(["inspect", "--tls-verify=false", "--raw"])
        .arg(format!("docker://{}{sep}{reference}", reg.repo(REPO)))
        .output()
        .unwrap();
    o.status
        .success()
        .then(|| String::from_utf8_lossy(&o.stdout).into_owned())
}

fn last_line(o: &Output) -> String {
    stderr(o).lines().last().unwrap_or_default().to_string()
}

fn stage_line(o: &Output, stage: &str) -> String {
    stderr(o)
        .lines()
        .find(|l| l.starts_with(&format!("occm-forge: {stage}")))
        .unwrap_or_default()
        .to_string()
}

/// The recorded entry's referrer manifest digests: each platform's SBOM, then the provenance.
fn recorded_referrers(f: &Fixture) -> Vec<String> {
    let lock = read_lock(&f.lock);
    let e = &lock["images"]["1.34"];
    let mut out: Vec<String> = e["sbom"]
        .as_mapping()
        .map(|m| {
            m.values()
                .filter_map(|v| v.as_str().map(String::from))
                .collect()
        })
        .unwrap_or_default();
    out.extend(e["provenance"].as_str().map(String::from));
    out
}

const MANIFEST_INVALID: &str = r#"{"errors":[{"code":"MANIFEST_INVALID","message":"manifest invalid","detail":"unknown field subject"}]}"#;

/// The tag is the last write: a referrer manifest whose upload fails (storage full) leaves the
/// tag where it was (nowhere), the digest manifest byte for byte, and a rerun completes.
#[test]
fn a_failed_referrer_upload_leaves_the_tag_unmoved_and_nothing_recorded() {
    let reg = TestRegistry::start();
    let f = fixture(&["linux/amd64"]);
    let lock_before = f.seed_lock();
    let proxy = FaultProxy::start(
        &reg.addr,
        vec![rule(
            "PUT",
            "/manifests/",
            Fault::AnswerIfBody("\"subject\"", 507, ""),
            usize::MAX,
            0,
        )],
    );
    let o = push(&f, &proxy, "1");
    assert_eq!(o.status.code(), Some(8), "{}", stderr(&o));
    let last = last_line(&o);
    assert!(
        last.starts_with(&format!(
            "occm-forge: error: publish: registry {}: push manifest {REPO}:sha256:",
            proxy.addr
        )),
        "{last}"
    );
    assert!(
        proxy
            .counts
            .answered
            .load(std::sync::atomic::Ordering::SeqCst)
            >= 1
    );
    assert_eq!(
        std::fs::read(&f.lock).unwrap(),
        lock_before,
        "the digest manifest changed"
    );
    assert_eq!(
        reg.get_status(&format!("/v2/{REPO}/manifests/{TAG}")),
        Some(404),
        "the tag was written before the referrers"
    );

    // Without the fault the rerun completes: the tag serves what is recorded.
    proxy.set_rules(vec![]);
    let o = push(&f, &proxy, "1");
    assert!(o.status.success(), "{}", stderr(&o));
    let digest = read_lock(&f.lock)["images"]["1.34"]["digest"]
        .as_str()
        .unwrap()
        .to_string();
    let raw = raw_manifest(&reg, TAG).expect("the tag");
    assert_eq!(format!("sha256:{}", sha256_hex(raw.as_bytes())), digest);
}

/// A registry that refuses manifests carrying `subject` (Docker Hub and older Harbor/Quay,
/// oras-project/oras#738): by default the referrers go in without `subject`, listed in the
/// referrers tag schema index `sha256-<hex>` of their subject; the entry records that, and
/// `verify` accepts it.
#[test]
fn a_registry_that_refuses_subject_gets_the_referrers_in_the_tag_schema() {
    let reg = TestRegistry::start();
    let f = fixture(&["linux/amd64"]);
    let proxy = FaultProxy::start(
        &reg.addr,
        vec![rule(
            "PUT",
            "/manifests/",
            Fault::AnswerIfBody("\"subject\"", 400, MANIFEST_INVALID),
            usize::MAX,
            0,
        )],
    );
    let o = push(&f, &proxy, "1");
    assert!(o.status.success(), "{}", stderr(&o));
    let publish = stage_line(&o, "publish");
    eprintln!("{publish}");
    assert!(
        publish.contains("without subject") && publish.contains("refuses"),
        "{publish}"
    );
    let lock = read_lock(&f.lock);
    let entry = &lock["images"]["1.34"];
    assert_eq!(entry["referrers"].as_str(), Some("tag-schema"), "{entry:?}");
    let digest = entry["digest"].as_str().unwrap().to_string();
    let raw = raw_manifest(&reg, TAG).expect("the tag");
    assert_eq!(format!("sha256:{}", sha256_hex(raw.as_bytes())), digest);

    // Each recorded referrer is there, without subject, and listed in its subject's index.
    let referrers = recorded_referrers(&f);
    assert_eq!(referrers.len(), 2, "{entry:?}");
    let subjects = [
        entry["manifests"]["linux/amd64"]
            .as_str()
            .unwrap()
            .to_string(),
        digest.clone(),
    ];
    for (referrer, subject) in referrers.iter().zip(&subjects) {
        let m = raw_manifest(&reg, referrer).expect("the referrer manifest");
        assert!(!m.contains("\"subject\""), "{m}");
        assert!(m.contains("\"artifactType\""), "{m}");
        let index = raw_manifest(&reg, &subject.replacen(':', "-", 1)).expect("the tag schema");
        assert!(index.contains(referrer.as_str()), "{index}");
    }

    // verify checks them in that form.
    let o = occm_forge(f.path())
        .args([
            "verify",
            "--k8s",
            "1.34",
            "--insecure-registry",
            &proxy.addr,
        ])
        .output()
        .unwrap();
    assert!(o.status.success(), "{}{}", stdout(&o), stderr(&o));
}

/// `--referrers=require` fails before the tag moves when the registry refuses `subject`;
/// `--referrers=skip` pushes no referrer and records that.
#[test]
fn referrers_require_fails_before_the_tag_and_skip_pushes_none() {
    let reg = TestRegistry::start();
    let f = fixture(&["linux/amd64"]);
    let lock_before = f.seed_lock();
    let proxy = FaultProxy::start(
        &reg.addr,
        vec![rule(
            "PUT",
            "/manifests/",
            Fault::AnswerIfBody("\"subject\"", 400, MANIFEST_INVALID),
            usize::MAX,
            0,
        )],
    );
    let o = push_with(&f, &proxy, "1", &["--referrers", "require"]);
    assert_eq!(o.status.code(), Some(8), "{}", stderr(&o));
    let last = last_line(&o);
    assert!(
        last.starts_with(&format!(
            "occm-forge: error: publish: registry {}: ",
            proxy.addr
        )) && last.contains("refused a manifest carrying `subject`")
            && last.contains("--referrers=fallback"),
        "{last}"
    );
    assert_eq!(std::fs::read(&f.lock).unwrap(), lock_before);
    assert_eq!(
        reg.get_status(&format!("/v2/{REPO}/manifests/{TAG}")),
        Some(404),
        "the tag moved"
    );

    let o = push_with(&f, &proxy, "1", &["--referrers", "skip"]);
    assert!(o.status.success(), "{}", stderr(&o));
    let publish = stage_line(&o, "publish");
    assert!(publish.contains("no referrers pushed"), "{publish}");
    let lock = read_lock(&f.lock);
    assert_eq!(
        lock["images"]["1.34"]["referrers"].as_str(),
        Some("skipped")
    );
    let tags = reg
        .get_body(&format!("/v2/{REPO}/tags/list"))
        .unwrap_or_default();
    assert!(
        tags.contains(TAG) && !tags.contains("sha256-"),
        "a referrers index was pushed: {tags}"
    );
    // The SBOM and provenance stay files beside the layout.
    let attestations = f.path().join("out").join("attestations").join(TAG);
    assert!(attestations.join("provenance.intoto.json").is_file());
    // verify does not ask the registry for referrers that were not pushed.
    let o = occm_forge(f.path())
        .args([
            "verify",
            "--k8s",
            "1.34",
            "--insecure-registry",
            &proxy.addr,
        ])
        .output()
        .unwrap();
    assert!(o.status.success(), "{}{}", stdout(&o), stderr(&o));
}

/// HTTP 507 is the registry's storage being full: named at once, in one line, not retried.
#[test]
fn storage_full_is_named_at_once_and_not_retried() {
    let reg = TestRegistry::start();
    let f = fixture(&["linux/amd64"]);
    let lock_before = f.seed_lock();
    let proxy = FaultProxy::start(
        &reg.addr,
        vec![rule(
            "PUT",
            "/manifests/",
            Fault::Answer(507, ""),
            usize::MAX,
            0,
        )],
    );
    let o = push(&f, &proxy, "5");
    assert_eq!(o.status.code(), Some(8), "{}", stderr(&o));
    let last = last_line(&o);
    assert!(
        last.starts_with(&format!(
            "occm-forge: error: publish: registry {}: ",
            proxy.addr
        )) && last.contains("storage full (507)"),
        "{last}"
    );
    assert_eq!(
        proxy
            .counts
            .answered
            .load(std::sync::atomic::Ordering::SeqCst),
        1,
        "the 507 was retried: {:?}",
        proxy.counts.seen("PUT")
    );
    assert!(!stderr(&o).contains("retrying in"), "{}", stderr(&o));
    assert_eq!(std::fs::read(&f.lock).unwrap(), lock_before);
}

/// pulp/pulp_container#1219: a registry that ignores the body of a monolithic upload `PUT`
/// answers `DIGEST_INVALID`; the blob then goes up in chunks (`PATCH` with `Content-Range`, an
/// empty closing `PUT`), and a `416` to a chunk is resumed from the upload's status (`GET`). The
/// pushed image copies out completely with skopeo.
#[test]
fn a_registry_that_ignores_the_put_body_gets_chunked_uploads() {
    let reg = TestRegistry::start();
    let f = fixture(&["linux/amd64"]);
    let proxy = FaultProxy::start(
        &reg.addr,
        vec![
            rule("PUT", "/blobs/uploads/", Fault::DropBody, usize::MAX, 0),
            rule("PATCH", "/blobs/uploads/", Fault::Answer(416, ""), 1, 0),
        ],
    );
    let o = push(&f, &proxy, "1");
    assert!(o.status.success(), "{}", stderr(&o));
    assert!(
        stderr(&o).contains(&format!(
            "occm-forge: warning: registry {} refused a blob sent in one PUT (DIGEST_INVALID); sending its blobs in chunks (PATCH) instead",
            proxy.addr
        )),
        "{}",
        stderr(&o)
    );
    use std::sync::atomic::Ordering::SeqCst;
    assert!(proxy.counts.dropped_bodies.load(SeqCst) >= 1);
    assert_eq!(proxy.counts.answered.load(SeqCst), 1, "no 416 was sent");
    assert!(
        proxy
            .counts
            .seen("GET ")
            .iter()
            .any(|r| r.contains("/blobs/uploads/")),
        "the upload status was not read after the 416: {:?}",
        proxy.counts.seen("/blobs/uploads/")
    );
    let digest = read_lock(&f.lock)["images"]["1.34"]["digest"]
        .as_str()
        .unwrap()
        .to_string();
    let raw = raw_manifest(&reg, TAG).expect("the tag");
    assert_eq!(format!("sha256:{}", sha256_hex(raw.as_bytes())), digest);
    skopeo(&[
        "copy",
        "--quiet",
        "--all",
        "--src-tls-verify=false",
        &format!("docker://{}:{TAG}", reg.repo(REPO)),
        &format!("oci:{}:x", f.path().join("copied").display()),
    ]);
}

/// pulp_container 2.25 as its users met it: the body of a monolithic `PUT` dropped
/// (pulp/pulp_container#1219), so blobs go in chunks, and every chunk `PATCH` answered `204 No
/// Content` with `Location` and `Range` where the spec says `202 Accepted`
/// (pulp/pulp_container#2199): the push goes through (it failed with `push blob …: HTTP 204`).
#[test]
fn pulp_answering_a_chunk_with_204_takes_the_push() {
    let reg = TestRegistry::start();
    let f = fixture(&["linux/amd64"]);
    let proxy = FaultProxy::start(
        &reg.addr,
        vec![
            rule("PUT", "/blobs/uploads/", Fault::DropBody, usize::MAX, 0),
            rule(
                "PATCH",
                "/blobs/uploads/",
                Fault::StatusAs(202, 204),
                usize::MAX,
                0,
            ),
        ],
    );
    let o = push(&f, &proxy, "1");
    assert!(o.status.success(), "{}", stderr(&o));
    use std::sync::atomic::Ordering::SeqCst;
    assert!(
        proxy.counts.answered.load(SeqCst) >= 1,
        "no PATCH was answered 204"
    );
    let digest = read_lock(&f.lock)["images"]["1.34"]["digest"]
        .as_str()
        .unwrap()
        .to_string();
    let raw = raw_manifest(&reg, TAG).expect("the tag");
    assert_eq!(format!("sha256:{}", sha256_hex(raw.as_bytes())), digest);
}

/// The tag's path on the registry behind `proxy`.
fn tag_path() -> String {
    format!("/v2/{REPO}/manifests/{TAG}")
}

/// A registry past its rate limit (429 `TOOMANYREQUESTS`, `Retry-After: 2`) for the first check
/// of the tag: occm-forge waits what it names (it retried after 0.9–4.4 s, never naming it) and
/// asks again with a `HEAD` only — never a `GET`, which counts against Docker Hub's pull limit
/// (it sent a HEAD and a GET per attempt).
#[test]
fn a_429_is_asked_again_after_its_retry_after_with_heads_only() {
    let reg = TestRegistry::start();
    let f = fixture(&["linux/amd64"]);
    let proxy = FaultProxy::start(
        &reg.addr,
        vec![rule(
            "HEAD",
            "/manifests/",
            Fault::TooManyRequests("2"),
            1,
            0,
        )],
    );
    let o = push(&f, &proxy, "1");
    assert!(o.status.success(), "{}", stderr(&o));
    let warned = stderr(&o)
        .lines()
        .find(|l| l.contains("429"))
        .unwrap_or_default()
        .to_string();
    assert!(
        warned.contains("(Retry-After: 2 s); retrying in 2.0s"),
        "{}",
        stderr(&o)
    );
    let on_tag = proxy.counts.seen(&tag_path());
    assert!(
        on_tag.iter().filter(|r| r.starts_with("HEAD ")).count() >= 2
            && !on_tag.iter().any(|r| r.starts_with("GET ")),
        "{on_tag:?}"
    );
}

/// A `Retry-After` past the operation's bound is not waited for: one request, and the error
/// says when the registry takes requests again (it gave up after 12 requests in 22 s, before
/// the time the registry named).
#[test]
fn a_retry_after_past_the_bound_says_when_the_registry_takes_requests_again() {
    let reg = TestRegistry::start();
    let f = fixture(&["linux/amd64"]);
    let lock_before = f.seed_lock();
    let proxy = FaultProxy::start(
        &reg.addr,
        vec![rule(
            "HEAD",
            "/manifests/",
            Fault::TooManyRequests("60"),
            usize::MAX,
            0,
        )],
    );
    let mut cmd = occm_forge(f.path());
    cmd.args(["build", "--k8s", "1.34", "--push", "--repository"])
        .arg(proxy.repo(REPO))
        .args(["--insecure-registry", &proxy.addr, "--source"])
        .arg(&f.upstream)
        .arg("--output")
        .arg(f.path().join("out"))
        .env("OCCM_FORGE_REGISTRY_OPERATION_TIMEOUT", "10");
    let o = cmd.output().unwrap();
    assert_eq!(o.status.code(), Some(8), "{}", stderr(&o));
    let last = stderr(&o).lines().last().unwrap_or_default().to_string();
    assert!(
        last.contains("429")
            && last.contains("(Retry-After: 60 s)")
            && last.contains("the registry takes requests again in 60 s, at ")
            && last
                .ends_with("after this operation's bound of 10 s (--registry-operation-timeout)"),
        "{last}"
    );
    let on_tag = proxy.counts.seen(&tag_path());
    assert_eq!(
        on_tag,
        [format!("HEAD {} (0 bytes)", tag_path())],
        "{on_tag:?}"
    );
    assert_eq!(std::fs::read(&f.lock).unwrap(), lock_before);
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
        last.starts_with(&format!(
            "occm-forge: error: preflight: push to {addr}/occm/openstack-cloud-controller-manager: registry {addr}: check push permission"
        )) && last.contains("no answer within 2 s"),
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
        // Found before any build work, by the upload the push check starts.
        last.starts_with(&format!(
            "occm-forge: error: preflight: push to {repo}: registry {}: check push permission (start and cancel an upload): HTTP 500: ",
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

/// A registry in distribution's read-only maintenance mode (how Atmosphere runs its in-cloud
/// registry) answers every write with 405 and `Method not allowed`: `copy` to it says so in one
/// line, is not retried, and records no mirror.
#[test]
fn copy_to_a_read_only_registry_is_named_in_one_line() {
    let src = TestRegistry::start();
    let ro = TestRegistry::start_with(&RegistryOptions {
        maintenance_read_only: true,
        ..Default::default()
    });
    let f = fixture(&["linux/amd64"]);
    f.seed_lock();
    let repo = src.repo("occm/openstack-cloud-controller-manager");
    let o = occm_forge(f.path())
        .args(["build", "--k8s", "1.34", "--push", "--repository", &repo])
        .args(["--insecure-registry", &src.addr, "--source"])
        .arg(&f.upstream)
        .arg("--output")
        .arg(f.path().join("out"))
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", stderr(&o));
    let lock_before = std::fs::read(&f.lock).unwrap();
    let o = occm_forge(f.path())
        .args([
            "copy",
            "--k8s",
            "1.34",
            "--prefix",
            &format!("{}/magnum", ro.addr),
        ])
        .args([
            "--insecure-registry",
            &src.addr,
            "--insecure-registry",
            &ro.addr,
        ])
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(8), "{}", stderr(&o));
    let last = stderr(&o).lines().last().unwrap_or_default().to_string();
    eprintln!("{last}");
    assert!(
        last.contains(&ro.addr)
            && last.contains("HTTP 405 (Method not allowed): the registry refuses writes here (a read-only registry")
            && last.contains("Atmosphere's in-cloud registry"),
        "{last}"
    );
    assert!(!stderr(&o).contains("retrying in"), "{}", stderr(&o));
    assert_eq!(
        std::fs::read(&f.lock).unwrap(),
        lock_before,
        "a mirror was recorded"
    );
}

/// The chunked upload itself, through the library's registry client with small chunks: a blob
/// over the threshold goes in `PATCH`es from the start (no monolithic `PUT` with a body); a
/// `416` to its third chunk is resumed at the byte the upload status names; a blob under the
/// threshold goes in one `PUT`. The registry then serves both blobs with their digests.
#[tokio::test(flavor = "multi_thread")]
async fn large_blobs_go_in_chunks_and_a_416_resumes_from_the_upload_status() {
    use occm_forge_core::base::reference::RepositoryName;
    use occm_forge_core::registry::Registry;
    use occm_forge_core::registry::oci::{OciRegistry, OciRegistryConfig};
    use std::sync::atomic::Ordering::SeqCst;

    let reg = TestRegistry::start();
    let proxy = FaultProxy::start(
        &reg.addr,
        vec![rule(
            "PATCH",
            "/blobs/uploads/",
            Fault::Answer(416, ""),
            1,
            2,
        )],
    );
    let client = OciRegistry::new(&OciRegistryConfig {
        insecure: vec![proxy.addr.clone()],
        chunked: occm_forge_core::registry::ChunkedUploads {
            above: 1 << 20,
            chunk: 256 << 10,
        },
        ..OciRegistryConfig::default()
    })
    .unwrap();
    let repo: RepositoryName = proxy.repo("chunked/blob").parse().unwrap();
    // 1.5 MiB that do not repeat: six chunks of 256 KiB.
    let large: Vec<u8> = (0..(3u32 << 19))
        .map(|i| (i.wrapping_mul(2_654_435_761) >> 13) as u8)
        .collect();
    let large_digest = format!("sha256:{}", sha256_hex(&large));
    client
        .push_blob(&repo, &large_digest, large.clone().into())
        .await
        .unwrap();
    assert_eq!(proxy.counts.answered.load(SeqCst), 1, "no 416 was sent");
    let patches = proxy.counts.seen("PATCH ");
    assert_eq!(
        patches.len(),
        6 + 1,
        "six chunks and one sent again: {patches:?}"
    );
    assert!(
        patches
            .iter()
            .all(|p| p.ends_with(&format!("({} bytes)", 256 << 10))),
        "{patches:?}"
    );
    let statuses: Vec<String> = proxy
        .counts
        .seen("GET ")
        .into_iter()
        .filter(|r| r.contains("/blobs/uploads/"))
        .collect();
    assert_eq!(statuses.len(), 1, "{statuses:?}");
    assert!(
        proxy
            .counts
            .seen("PUT ")
            .iter()
            .all(|r| r.ends_with("(0 bytes)")),
        "a monolithic PUT for a large blob: {:?}",
        proxy.counts.seen("PUT ")
    );

    let small = b"a small blob in one PUT".to_vec();
    let small_digest = format!("sha256:{}", sha256_hex(&small));
    client
        .push_blob(&repo, &small_digest, small.clone().into())
        .await
        .unwrap();
    assert!(
        proxy
            .counts
            .seen("PUT ")
            .iter()
            .any(|r| r.ends_with(&format!("({} bytes)", small.len()))),
        "{:?}",
        proxy.counts.seen("PUT ")
    );

    // What the registry serves, read directly, is the blobs' bytes.
    for (digest, bytes) in [(&large_digest, &large), (&small_digest, &small)] {
        let served = reg
            .get_bytes(&format!("/v2/chunked/blob/blobs/{digest}"))
            .expect("the blob");
        assert_eq!(served.len(), bytes.len(), "{digest}");
        assert_eq!(&format!("sha256:{}", sha256_hex(&served)), digest);
    }
}

/// A registry that keeps answering the blob existence check with 500 (distribution after a crash
/// mid-upload does, for the blob it was writing) gets the blobs uploaded: the check only saves
/// uploads, and by digest an upload is the same content. The push completes and says so.
#[test]
fn a_blob_check_that_keeps_failing_uploads_the_blob() {
    let reg = TestRegistry::start();
    let f = fixture(&["linux/amd64"]);
    let proxy = FaultProxy::start(
        &reg.addr,
        vec![rule("HEAD", "/blobs/", Fault::Status500, 1000, 0)],
    );
    let o = push(&f, &proxy, "1");
    assert!(o.status.success(), "{}", stderr(&o));
    assert!(
        stderr(&o).contains("; uploading the blob instead"),
        "{}",
        stderr(&o)
    );
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
}
