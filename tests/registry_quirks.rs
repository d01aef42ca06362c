//! Registries people run, as their users reported them, emulated by a proxy in front of a real
//! docker-registry (tests/common/quirks.rs): a signed build pushed through the proxy must be
//! recorded (`manifest record-signatures`), verified (`verify`) and copied (`copy`), and the real
//! cosign must verify the copy.
//!
//! - Harbor lists every referrer's `artifactType` as the empty config's media type, served as
//!   `application/json` (goharbor/harbor#19867): the signature is found by the type its
//!   manifest declares.
//! - A registry that pages the referrers API (`Link: <…>; rel="next"`): every page is read.
//! - GitLab has no referrers API and resolves the tag `sha256-<hex>` to the manifest
//!   `sha256:<hex>`: not a referrers index; the recorded referrers are read by digest.
//! - Signatures pushed the way cosign does without referrers (`sha256-<hex>.sig` tags) are
//!   recorded with `form: cosign-tags`, verified and copied.
//! - A mirror with immutable tags (ECR's `TAG_INVALID`) refuses `copy` before any push.
//! - distribution v3.1.2, a second real registry (`.tools/bin/registry-v3`).

use crate::common;

use std::path::Path;
use std::process::Output;

use common::quirks::ReferrersApi;
use common::sigstore::*;
use common::*;

const NAME: &str = "occm/openstack-cloud-controller-manager";

/// The proxy rule that answers the referrers API as `api` says.
fn referrers_rule(api: ReferrersApi) -> FaultRule {
    FaultRule {
        method: "GET",
        path_contains: "/referrers/",
        fault: Fault::Referrers(api),
        times: usize::MAX,
        after: 0,
    }
}

/// A proxy that answers the referrers API as `api` says, in front of `reg`.
fn proxy(reg: &TestRegistry, api: ReferrersApi) -> FaultProxy {
    FaultProxy::start(&reg.addr, vec![referrers_rule(api)])
}

/// A proxy in front of `reg` as GitLab's container registry is: no referrers API (the
/// registry behind it, distribution 2.8, answers `/referrers/` with 404, as GitLab does), and
/// a `GET` or `HEAD` of the tag `sha256-<hex>` answered with the manifest `sha256:<hex>` itself
/// (oras-project/oras-go#1396, #1403); tags that only start so (`sha256-<hex>.sig`) are tags.
fn gitlab(reg: &TestRegistry) -> FaultProxy {
    let tag_as_digest = |method| FaultRule {
        method,
        path_contains: "/manifests/sha256-",
        fault: Fault::TagAsDigest,
        times: usize::MAX,
        after: 0,
    };
    FaultProxy::start(&reg.addr, vec![tag_as_digest("GET"), tag_as_digest("HEAD")])
}

fn forge(f: &Fixture, registries: &[&str], args: &[&str]) -> Output {
    let mut c = occm_forge(f.path());
    c.args(args).env("COSIGN_PASSWORD", "correct horse");
    for r in registries {
        c.args(["--insecure-registry", r]);
    }
    c.output().unwrap()
}

/// A fixture's 1.34 built, pushed to `addr` (plain HTTP) and signed with a new key, then
/// recorded with `manifest record-signatures --key` (which must find the signature among the
/// referrers) and checked with `verify`.
struct Signed {
    f: Fixture,
    home: tempfile::TempDir,
    keys: tempfile::TempDir,
    /// The image index digest.
    digest: String,
}

fn signed_recorded_and_verified(addr: &str) -> Signed {
    let f = fixture(&["linux/amd64"]);
    f.write_config(&format!("{addr}/{NAME}"), &["linux/amd64"], "static", &[]);
    let home = tempfile::tempdir().unwrap();
    let keys = tempfile::tempdir().unwrap();
    generate_key_pair(home.path(), keys.path(), "cosign", "correct horse");
    let key = keys.path().join("cosign.key");
    let public = keys.path().join("cosign.pub");
    let mut build = vec!["build", "--k8s", "1.34", "--push", "--sign-key"];
    build.extend([
        key.to_str().unwrap(),
        "--source",
        f.upstream.to_str().unwrap(),
    ]);
    let o = forge(&f, &[addr], &build);
    assert!(o.status.success(), "build: {}", text(&o));
    let record = ["manifest", "record-signatures", "--k8s", "1.34", "--key"];
    let o = forge(
        &f,
        &[addr],
        &[&record[..], &[public.to_str().unwrap()]].concat(),
    );
    assert!(o.status.success(), "record-signatures: {}", text(&o));
    let o = forge(&f, &[addr], &["verify", "--k8s", "1.34"]);
    assert!(o.status.success(), "verify: {}", text(&o));
    let digest = read_lock(&f.lock)["images"]["1.34"]["digest"]
        .as_str()
        .unwrap()
        .to_string();
    Signed {
        f,
        home,
        keys,
        digest,
    }
}

impl Signed {
    /// `copy` from `from` to `to` (a repository), then cosign verifies the copy.
    fn copied_and_verified(&self, from: &str, to: &str) {
        let to_registry = to.split('/').next().unwrap();
        let o = forge(
            &self.f,
            &[from, to_registry],
            &["copy", "--k8s", "1.34", "--to", to],
        );
        assert!(o.status.success(), "copy to {to}: {}", text(&o));
        cosign_verifies(
            self.home.path(),
            self.keys.path(),
            &format!("{to}@{}", self.digest),
        );
    }
}

/// The real cosign verifies the signature of `reference` with the key pair in `keys`.
fn cosign_verifies(home: &Path, keys: &Path, reference: &str) {
    let o = std::process::Command::new(cosign_bin())
        .args(["verify", "--key"])
        .arg(keys.join("cosign.pub"))
        .args([
            "--insecure-ignore-tlog=true",
            "--allow-insecure-registry",
            "--allow-http-registry",
            reference,
        ])
        .env("HOME", home)
        .output()
        .unwrap();
    assert!(
        o.status.success(),
        "cosign verify {reference}: {}",
        text(&o)
    );
}

#[test]
fn harbor_listing_the_config_type_as_artifact_type_still_gives_the_signature() {
    let reg = TestRegistry::start();
    let api = ReferrersApi {
        page_size: 0,
        harbor: true,
    };
    let proxy = proxy(&reg, api);
    signed_recorded_and_verified(&proxy.addr);
    assert!(
        !proxy.counts.seen("/referrers/").is_empty(),
        "the referrers API was not asked"
    );
}

#[test]
fn a_paged_referrers_api_is_read_to_its_last_page_by_record_verify_and_copy() {
    let reg = TestRegistry::start();
    let api = ReferrersApi {
        page_size: 1,
        harbor: false,
    };
    let proxy = proxy(&reg, api);
    let signed = signed_recorded_and_verified(&proxy.addr);
    let pages = proxy.counts.seen("/referrers/");
    assert!(
        pages.iter().any(|r| r.contains("?page=")),
        "no second page was read: {pages:?}"
    );
    let to = TestRegistry::start();
    signed.copied_and_verified(&proxy.addr, &to.repo("mirror/occm"));
}

/// GitLab has no referrers API and answers the tag `sha256-<hex>` with the image itself, so no
/// referrer can be listed there (record-signatures and verify exited 10, "0 referrers"): the
/// build's signature is recorded and verified from the digests the entry records, fetched by
/// digest (verify says so), copied to a registry that lists them, and cosign verifies the copy.
#[test]
fn gitlab_without_a_referrers_api_records_verifies_and_copies_by_digest() {
    let reg = TestRegistry::start();
    let proxy = gitlab(&reg);
    let signed = signed_recorded_and_verified(&proxy.addr);
    assert!(
        proxy
            .counts
            .seen("/referrers/")
            .iter()
            .all(|r| r.starts_with("GET ")),
        "the stand-in answered something but a GET of the referrers API"
    );
    let o = forge(&signed.f, &[&proxy.addr], &["verify", "--k8s", "1.34"]);
    assert!(o.status.success(), "verify: {}", text(&o));
    let said = stderr(&o);
    assert!(
        said.contains(&format!("registry {} resolves the tag sha256-", proxy.addr))
            && said.contains("to the subject sha256:")
            && said.contains("can list no referrers (no referrers API")
            && said.contains("the referrers the digest manifest records are checked by digest"),
        "{said}"
    );
    // Said once, not once a subject.
    assert_eq!(said.matches("resolves the tag").count(), 1, "{said}");
    assert_eq!(said.matches("can list no referrers").count(), 1, "{said}");
    let to = TestRegistry::start();
    signed.copied_and_verified(&proxy.addr, &to.repo("mirror/occm"));
}

/// distribution v3 (v3.1.2: no referrers API, the tag schema as 2.8) as a second real registry:
/// the signed build is pushed, recorded, verified, copied to distribution 2.8 and within v3, and
/// cosign verifies the original and both copies.
#[test]
fn distribution_v3_takes_the_signed_build_record_verify_and_copy() {
    let v3 = TestRegistry::start_with(&RegistryOptions {
        program: Some(distribution_v3()),
        ..RegistryOptions::default()
    });
    let signed = signed_recorded_and_verified(&v3.addr);
    cosign_verifies(
        signed.home.path(),
        signed.keys.path(),
        &format!("{}/{NAME}@{}", v3.addr, signed.digest),
    );
    let v2 = TestRegistry::start();
    signed.copied_and_verified(&v3.addr, &v2.repo("mirror/occm"));
    signed.copied_and_verified(&v3.addr, &v3.repo("mirror/occm"));
}

/// A copy of the project's images.toml (publishing to `repository`) and patches/ in `dir`.
fn project_config(dir: &Path, repository: &str) {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let patches = dir.join("patches");
    std::fs::create_dir_all(&patches).unwrap();
    for e in std::fs::read_dir(root.join("patches")).unwrap() {
        let p = e.unwrap().path();
        std::fs::copy(&p, patches.join(p.file_name().unwrap())).unwrap();
    }
    let text = std::fs::read_to_string(root.join("images.toml")).unwrap();
    let line = text
        .lines()
        .find(|l| l.starts_with("repository = "))
        .unwrap()
        .to_string();
    std::fs::write(
        dir.join("images.toml"),
        text.replacen(&line, &format!("repository = \"{repository}\""), 1),
    )
    .unwrap();
}

/// Gated: the real v1.34.1, built from the mirror and signed with a key, pushed through each
/// registry's quirk (Harbor's listing, a paged listing, GitLab without a referrers API) and to
/// distribution v3; recorded, verified and copied from there to distribution 2.8; cosign verifies
/// each original (not GitLab's: no referrer can be found there, by cosign either) and each copy.
/// Then the same image pushed to GitLab unsigned and signed by cosign in its own tags
/// (`--new-bundle-format=false`): recorded, verified, copied, and cosign verifies the copy.
#[test]
#[ignore = "needs OCCM_FORGE_UPSTREAM_MIRROR (a mirror of kubernetes/cloud-provider-openstack) and the Go module proxy"]
fn real_v1_34_1_signed_goes_through_each_quirk_and_distribution_v3() {
    let mirror = std::env::var("OCCM_FORGE_UPSTREAM_MIRROR").expect(
        "set OCCM_FORGE_UPSTREAM_MIRROR to a mirror of kubernetes/cloud-provider-openstack",
    );
    let cache = gated_cache();
    let reg = TestRegistry::start();
    let v3 = TestRegistry::start_with(&RegistryOptions {
        program: Some(distribution_v3()),
        ..RegistryOptions::default()
    });
    let copies = TestRegistry::start();
    let api = |page_size, harbor| ReferrersApi { page_size, harbor };
    let harbor = proxy(&reg, api(0, true));
    let paged = proxy(&reg, api(1, false));
    let gitlab = gitlab(&reg);
    let home = tempfile::tempdir().unwrap();
    let keys = tempfile::tempdir().unwrap();
    generate_key_pair(home.path(), keys.path(), "cosign", "correct horse");
    let key = keys.path().join("cosign.key");
    let public = keys.path().join("cosign.pub");
    for (name, addr) in [
        ("harbor", &harbor.addr),
        ("paged", &paged.addr),
        ("gitlab", &gitlab.addr),
        ("distribution-v3", &v3.addr),
    ] {
        let dir = tempfile::tempdir().unwrap();
        let repository = format!("{addr}/occm/openstack-cloud-controller-manager");
        project_config(dir.path(), &repository);
        let forge = |args: &[&str]| {
            let started = std::time::Instant::now();
            let o = std::process::Command::new(env!("CARGO_BIN_EXE_occm-forge"))
                .current_dir(dir.path())
                .env_remove("SOURCE_DATE_EPOCH")
                .env("COSIGN_PASSWORD", "correct horse")
                .arg("--cache-dir")
                .arg(cache.path())
                .args(args)
                .args([
                    "--insecure-registry",
                    addr,
                    "--insecure-registry",
                    &copies.addr,
                ])
                .output()
                .unwrap();
            eprintln!(
                "{name}: occm-forge {}: exit {:?} in {:.0} s\n{}",
                args[0],
                o.status.code(),
                started.elapsed().as_secs_f64(),
                stderr(&o)
            );
            assert!(
                o.status.success(),
                "{name}: occm-forge {}: {}",
                args.join(" "),
                text(&o)
            );
        };
        let (key, public) = (key.to_str().unwrap(), public.to_str().unwrap());
        forge(&[
            "build",
            "--k8s",
            "1.34",
            "--base",
            "static",
            "--push",
            "--sign-key",
            key,
            "--source",
            &mirror,
        ]);
        forge(&[
            "manifest",
            "record-signatures",
            "--k8s",
            "1.34",
            "--key",
            public,
        ]);
        forge(&["verify", "--k8s", "1.34"]);
        let to = copies.repo(&format!("{name}/occm"));
        forge(&["copy", "--k8s", "1.34", "--to", &to]);
        let digest = read_lock(&dir.path().join("images.lock.yaml"))["images"]["1.34"]["digest"]
            .as_str()
            .unwrap()
            .to_string();
        // cosign (go-containerregistry) reads the first page of a paged listing only
        // (google/go-containerregistry#2446): with one referrer a page it finds the signature
        // or not by the order of digests. It checks the paged original where the bytes are.
        let original = if name == "paged" {
            format!("{}/occm/openstack-cloud-controller-manager", reg.addr)
        } else {
            repository.clone()
        };
        if name != "gitlab" {
            cosign_verifies(home.path(), keys.path(), &format!("{original}@{digest}"));
        }
        cosign_verifies(home.path(), keys.path(), &format!("{to}@{digest}"));
    }

    // cosign's own tags on GitLab.
    let dir = tempfile::tempdir().unwrap();
    let repository = format!("{}/occm/tagged", gitlab.addr);
    project_config(dir.path(), &repository);
    let forge = |args: &[&str]| {
        let o = std::process::Command::new(env!("CARGO_BIN_EXE_occm-forge"))
            .current_dir(dir.path())
            .env_remove("SOURCE_DATE_EPOCH")
            .arg("--cache-dir")
            .arg(cache.path())
            .args(args)
            .args([
                "--insecure-registry",
                &gitlab.addr,
                "--insecure-registry",
                &copies.addr,
            ])
            .output()
            .unwrap();
        eprintln!("cosign-tags: occm-forge {}: {}", args[0], stderr(&o));
        assert!(
            o.status.success(),
            "occm-forge {}: {}",
            args.join(" "),
            text(&o)
        );
    };
    forge(&[
        "build", "--k8s", "1.34", "--base", "static", "--push", "--source", &mirror,
    ]);
    let digest = read_lock(&dir.path().join("images.lock.yaml"))["images"]["1.34"]["digest"]
        .as_str()
        .unwrap()
        .to_string();
    let o = std::process::Command::new(cosign_bin())
        .args([
            "sign",
            "--key",
            key.to_str().unwrap(),
            "--tlog-upload=false",
            "--use-signing-config=false",
            "--new-bundle-format=false",
            "--allow-insecure-registry",
            "--allow-http-registry",
            "--yes",
        ])
        .arg(format!("{repository}@{digest}"))
        .env("HOME", home.path())
        .env("COSIGN_PASSWORD", "correct horse")
        .output()
        .unwrap();
    assert!(o.status.success(), "cosign sign: {}", text(&o));
    forge(&[
        "manifest",
        "record-signatures",
        "--k8s",
        "1.34",
        "--key",
        public.to_str().unwrap(),
    ]);
    forge(&["verify", "--k8s", "1.34"]);
    let to = copies.repo("cosign-tags/occm");
    forge(&["copy", "--k8s", "1.34", "--to", &to]);
    cosign_verifies(home.path(), keys.path(), &format!("{to}@{digest}"));
}

/// `cosign sign --key` and `cosign attest` with cosign's own tags (`sha256-<hex>.sig`, `.att`:
/// cosign 2's default, cosign 3 with `--new-bundle-format=false`), on GitLab, which lists no
/// referrers: `manifest record-signatures` finds and records them (it could not: not read),
/// `verify` checks them, `copy` carries the tags and cosign verifies the copy; a `.sig` by
/// another key is not recorded and is named.
#[test]
fn signatures_in_cosigns_tags_are_recorded_verified_and_copied() {
    let reg = TestRegistry::start();
    let proxy = gitlab(&reg);
    let f = fixture(&["linux/amd64"]);
    f.write_config(
        &format!("{}/{NAME}", proxy.addr),
        &["linux/amd64"],
        "static",
        &[],
    );
    let home = tempfile::tempdir().unwrap();
    let keys = tempfile::tempdir().unwrap();
    generate_key_pair(home.path(), keys.path(), "cosign", "correct horse");
    generate_key_pair(home.path(), keys.path(), "other", "correct horse");
    let o = forge(
        &f,
        &[&proxy.addr],
        &[
            "build",
            "--k8s",
            "1.34",
            "--push",
            "--source",
            f.upstream.to_str().unwrap(),
        ],
    );
    assert!(o.status.success(), "build: {}", text(&o));
    let entry = read_lock(&f.lock)["images"]["1.34"].clone();
    let digest = entry["digest"].as_str().unwrap().to_string();
    let image = format!("{}/{NAME}@{digest}", proxy.addr);
    let cosign = |args: &[&str]| {
        let o = std::process::Command::new(cosign_bin())
            .args(args)
            .args([
                "--tlog-upload=false",
                "--use-signing-config=false",
                "--new-bundle-format=false",
                "--allow-insecure-registry",
                "--allow-http-registry",
                "--yes",
            ])
            .arg(&image)
            .current_dir(keys.path())
            .env("HOME", home.path())
            .env("COSIGN_PASSWORD", "correct horse")
            .output()
            .unwrap();
        assert!(o.status.success(), "cosign {args:?}: {}", text(&o));
    };
    // Another key's signature first: not the signer's, named when nothing else is there.
    cosign(&["sign", "--key", "other.key"]);
    let public = keys.path().join("cosign.pub");
    let record = |f: &Fixture| {
        forge(
            f,
            &[&proxy.addr],
            &[
                "manifest",
                "record-signatures",
                "--k8s",
                "1.34",
                "--key",
                public.to_str().unwrap(),
            ],
        )
    };
    let o = record(&f);
    assert_eq!(o.status.code(), Some(10), "{}", text(&o));
    assert!(
        stderr(&o).contains(&format!(
            "a signature in sha256-{}.sig by another key",
            digest.trim_start_matches("sha256:")
        )),
        "{}",
        stderr(&o)
    );
    // The signer's signature and its SBOM attestation, in cosign's tags.
    let sbom = f
        .path()
        .join("out/attestations/v1.34.1-occmforge.1/sbom.linux-amd64.spdx.json");
    cosign(&["sign", "--key", "cosign.key"]);
    cosign(&[
        "attest",
        "--key",
        "cosign.key",
        "--type",
        "spdxjson",
        "--predicate",
        sbom.to_str().unwrap(),
    ]);
    let o = record(&f);
    assert!(o.status.success(), "record-signatures: {}", text(&o));
    let signature = read_lock(&f.lock)["images"]["1.34"]["signature"].clone();
    assert_eq!(signature["form"], "cosign-tags", "{signature:?}");
    let sig_tag = format!("sha256-{}.sig", digest.trim_start_matches("sha256:"));
    let served = skopeo(&[
        "inspect",
        "--tls-verify=false",
        "--raw",
        &format!("docker://{}/{NAME}:{sig_tag}", reg.addr),
    ]);
    assert_eq!(
        signature["digest"].as_str().unwrap(),
        format!("sha256:{}", sha256_hex(served.as_bytes()))
    );
    assert!(
        signature["attestations"]["sbom linux/amd64"].is_string(),
        "{signature:?}"
    );
    let o = forge(&f, &[&proxy.addr], &["verify", "--k8s", "1.34"]);
    assert!(o.status.success(), "verify: {}", text(&o));
    // The copy carries cosign's tags; cosign verifies there.
    let to = TestRegistry::start();
    let mirror = to.repo("mirror/occm");
    let o = forge(
        &f,
        &[&proxy.addr, &to.addr],
        &["copy", "--k8s", "1.34", "--to", &mirror],
    );
    assert!(o.status.success(), "copy: {}", text(&o));
    cosign_verifies(home.path(), keys.path(), &format!("{mirror}@{digest}"));
    let o = forge(&f, &[&proxy.addr, &to.addr], &["verify", "--k8s", "1.34"]);
    assert!(o.status.success(), "verify with the mirror: {}", text(&o));
}

/// A mirror whose tags are immutable as ECR's `IMMUTABLE` makes them (a tag takes the same
/// bytes again, not others) and that has no referrers API: after the image is signed again,
/// copying it there must rewrite its referrers index `sha256-<hex>`, which the mirror refuses.
/// The refusal, with the rule to change, comes before anything is pushed (it came after 11
/// new manifests, which no index then listed).
#[test]
fn an_immutable_mirror_refuses_before_any_push_not_after() {
    let reg = TestRegistry::start();
    let signed = signed_recorded_and_verified(&reg.addr);
    let target = TestRegistry::start();
    let ecr = FaultProxy::start(
        &target.addr,
        vec![FaultRule {
            method: "PUT",
            path_contains: "/manifests/",
            fault: Fault::ImmutableTags,
            times: usize::MAX,
            after: 0,
        }],
    );
    let mirror = ecr.repo("mirror/occm");
    let copy = |f: &Fixture| {
        forge(
            f,
            &[&reg.addr, &ecr.addr],
            &["copy", "--k8s", "1.34", "--to", &mirror],
        )
    };
    let o = copy(&signed.f);
    assert!(o.status.success(), "first copy: {}", text(&o));

    // Signed again, with another key: new bundles, which the index of the mirror must list.
    generate_key_pair(
        signed.home.path(),
        signed.keys.path(),
        "again",
        "correct horse",
    );
    let key = signed.keys.path().join("again.key");
    let o = forge(
        &signed.f,
        &[&reg.addr],
        &[
            "build",
            "--k8s",
            "1.34",
            "--push",
            "--sign-key",
            key.to_str().unwrap(),
            "--source",
            signed.f.upstream.to_str().unwrap(),
        ],
    );
    assert!(o.status.success(), "signing again: {}", text(&o));
    let puts_before = ecr.counts.seen("PUT ").len();
    let o = copy(&signed.f);
    assert_eq!(o.status.code(), Some(8), "{}", text(&o));
    let last = stderr(&o).lines().last().unwrap_or_default().to_string();
    let subject = signed.digest.replacen(':', "-", 1);
    assert!(
        last.contains(&format!(
            "check that {subject} can be rewritten, before any push"
        )) && last.contains("TAG_INVALID")
            && last.contains(&format!("the registry keeps the tag {subject} immutable"))
            && last.contains("ECR: IMMUTABLE_WITH_EXCLUSION with the filter sha256-*"),
        "{last}"
    );
    let puts: Vec<String> = ecr
        .counts
        .seen("PUT ")
        .into_iter()
        .skip(puts_before)
        .collect();
    assert_eq!(puts.len(), 1, "only the check was put: {puts:?}");
    assert!(
        puts[0].contains(&format!("/manifests/{subject} ")),
        "{puts:?}"
    );
}
