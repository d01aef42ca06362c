//! `build --sign-key`: the image index signed and its SBOM and provenance attested in the format
//! the real cosign v3.1.1 verifies (installed by scripts/test into .tools/bin through the Go
//! module proxy), checked by `verify`, carried by `copy`, on a real docker-registry.

use crate::common;

use std::path::Path;
use std::process::{Command, Output};

use common::sigstore::*;
use common::*;
use serde_json::Value;

/// cosign with a home of its own (no TUF cache or config from the caller).
fn cosign(home: &Path, args: &[&str]) -> Output {
    Command::new(cosign_bin())
        .args(args)
        .env("HOME", home)
        .env("COSIGN_PASSWORD", "correct horse")
        .env("COSIGN_YES", "true")
        .output()
        .unwrap()
}

/// `cosign verify` (or `verify-attestation` with `extra`) of `reference` with `public_key`, the
/// test registry being plain HTTP and no transparency log.
fn cosign_verify(
    home: &Path,
    command: &str,
    public_key: &Path,
    reference: &str,
    extra: &[&str],
) -> Output {
    let key = public_key.to_str().unwrap();
    let mut args = vec![
        command,
        "--key",
        key,
        "--insecure-ignore-tlog=true",
        "--allow-insecure-registry",
        "--allow-http-registry",
    ];
    args.extend_from_slice(extra);
    args.push(reference);
    cosign(home, &args)
}

fn forge(f: &Fixture, reg: &TestRegistry, password: &str, args: &[&str]) -> Output {
    occm_forge(f.path())
        .args(args)
        .args(["--insecure-registry", &reg.addr, "--source"])
        .arg(&f.upstream)
        .env("COSIGN_PASSWORD", password)
        .output()
        .unwrap()
}

/// `occm-forge verify --k8s 1.34`.
fn verify(f: &Fixture, reg: &TestRegistry) -> Output {
    forge(f, reg, "", &["verify", "--k8s", "1.34"])
}

/// `occm-forge verify --k8s 1.34`, which must find mismatches (exit 10): its findings (stdout).
fn findings(f: &Fixture, reg: &TestRegistry) -> String {
    let o = verify(f, reg);
    assert_eq!(o.status.code(), Some(10), "verify: {}", text(&o));
    stdout(&o)
}

/// `occm-forge copy --k8s 1.34 --to <to>`.
fn copy(f: &Fixture, reg: &TestRegistry, to: &str) -> Output {
    occm_forge(f.path())
        .args([
            "copy",
            "--k8s",
            "1.34",
            "--to",
            to,
            "--insecure-registry",
            &reg.addr,
        ])
        .output()
        .unwrap()
}

/// The referrers tag-schema index `sha256-<hex>` of `subject`, parsed.
fn referrers(reg: &TestRegistry, name: &str, subject: &str) -> Value {
    let bytes = reg
        .get_bytes(&format!(
            "/v2/{name}/manifests/{}",
            subject.replace(':', "-")
        ))
        .unwrap();
    serde_json::from_slice(&bytes).unwrap()
}

/// Pushes a copy of each bundle referrer in `digests` whose bundle `change` alters, and lists
/// the copies instead of the originals in the subject's referrers index; returns the original
/// index bytes.
fn replace_bundles(
    reg: &TestRegistry,
    name: &str,
    subject: &str,
    digests: &[String],
    change: impl Fn(&mut Value),
) -> Vec<u8> {
    let tag = subject.replace(':', "-");
    let original = reg
        .get_bytes(&format!("/v2/{name}/manifests/{tag}"))
        .unwrap();
    let mut index: Value = serde_json::from_slice(&original).unwrap();
    for digest in digests {
        let manifest: Value = serde_json::from_slice(
            &reg.get_bytes(&format!("/v2/{name}/manifests/{digest}"))
                .unwrap(),
        )
        .unwrap();
        let layer = manifest["layers"][0]["digest"].as_str().unwrap();
        let mut bundle: Value =
            serde_json::from_slice(&reg.get_bytes(&format!("/v2/{name}/blobs/{layer}")).unwrap())
                .unwrap();
        change(&mut bundle);
        let bundle = serde_json::to_vec(&bundle).unwrap();
        let mut forged = manifest.clone();
        forged["layers"][0]["digest"] = reg.put_blob(name, &bundle).into();
        forged["layers"][0]["size"] = bundle.len().into();
        let forged = serde_json::to_vec(&forged).unwrap();
        let forged_digest = reg.put_manifest(
            name,
            &format!("sha256:{}", sha256_hex(&forged)),
            "application/vnd.oci.image.manifest.v1+json",
            &forged,
        );
        for m in index["manifests"].as_array_mut().unwrap() {
            if m["digest"] == digest.as_str() {
                m["digest"] = forged_digest.clone().into();
                m["size"] = forged.len().into();
            }
        }
    }
    reg.put_manifest(
        name,
        &tag,
        "application/vnd.oci.image.index.v1+json",
        &serde_json::to_vec(&index).unwrap(),
    );
    original
}

/// Flips one bit of the base64-decoded field at `pointer` (a JSON pointer into the bundle).
fn flip(pointer: &'static str) -> impl Fn(&mut Value) {
    move |bundle: &mut Value| {
        use base64::Engine as _;
        let b64 = base64::engine::general_purpose::STANDARD;
        let field = bundle.pointer_mut(pointer).unwrap();
        let mut bytes = b64.decode(field.as_str().unwrap()).unwrap();
        let at = bytes.len() / 2;
        bytes[at] ^= 1;
        *field = b64.encode(bytes).into();
    }
}

#[test]
fn a_signed_build_verifies_with_cosign_and_verify_and_copy_keep_the_signature() {
    let reg = TestRegistry::start();
    let f = fixture(&["linux/amd64"]);
    let name = "occm/openstack-cloud-controller-manager";
    let repo = reg.repo(name);
    f.write_config(&repo, &["linux/amd64"], "static", &[]);
    let home = tempfile::tempdir().unwrap();
    let keys = tempfile::tempdir().unwrap();
    generate_key_pair(home.path(), keys.path(), "cosign", "correct horse");
    let key = keys.path().join("cosign.key");
    let public = keys.path().join("cosign.pub");
    let key_arg = key.to_str().unwrap();

    // A wrong password: one line naming the key file, exit 2, before anything is fetched.
    let o = forge(
        &f,
        &reg,
        "battery staple",
        &["build", "--k8s", "1.34", "--push", "--sign-key", key_arg],
    );
    assert_eq!(o.status.code(), Some(2), "{}", text(&o));
    assert_eq!(
        stderr(&o),
        format!(
            "occm-forge: error: signing key {}: the password in COSIGN_PASSWORD does not open this cosign key\n",
            key.display()
        )
    );
    assert!(!f.lock.exists());

    let o = forge(
        &f,
        &reg,
        "correct horse",
        &["build", "--k8s", "1.34", "--push", "--sign-key", key_arg],
    );
    assert!(o.status.success(), "{}", text(&o));
    assert!(!text(&o).contains("correct horse"));
    let lock = read_lock(&f.lock);
    let entry = &lock["images"]["1.34"];
    let digest = entry["digest"].as_str().unwrap().to_string();
    let signature = &entry["signature"];
    let public_pem = std::fs::read_to_string(&public).unwrap();
    assert_eq!(signature["public_key"].as_str(), Some(public_pem.as_str()));
    assert_eq!(
        signature["key"].as_str().unwrap(),
        occm_forge_core::signing::public_key_fingerprint(&public_pem).unwrap()
    );
    let sig_digest = signature["digest"].as_str().unwrap().to_string();
    let attestations: Vec<String> = signature["attestations"]
        .as_mapping()
        .unwrap()
        .keys()
        .map(|k| k.as_str().unwrap().to_string())
        .collect();
    assert_eq!(attestations, ["provenance", "sbom linux/amd64"]);
    let reference = format!("{repo}@{digest}");

    // Signed with the same key again: up to date, nothing rebuilt or pushed.
    let o = forge(
        &f,
        &reg,
        "correct horse",
        &["build", "--k8s", "1.34", "--push", "--sign-key", key_arg],
    );
    assert!(o.status.success(), "{}", text(&o));
    assert!(stderr(&o).contains("1.34 is up to date"), "{}", text(&o));

    // The real cosign verifies the signature and both kinds of attestation.
    let o = cosign_verify(home.path(), "verify", &public, &reference, &[]);
    assert!(o.status.success(), "cosign verify: {}", text(&o));
    for kind in ["spdxjson", "slsaprovenance1"] {
        let o = cosign_verify(
            home.path(),
            "verify-attestation",
            &public,
            &reference,
            &["--type", kind],
        );
        assert!(
            o.status.success(),
            "cosign verify-attestation --type {kind}: {}",
            text(&o)
        );
    }
    let o = verify(&f, &reg);
    assert!(o.status.success(), "verify: {}", text(&o));

    // copy carries them, every digest unchanged: cosign verifies at the destination.
    let mirror = reg.repo("mirror/openstack-cloud-controller-manager");
    let o = copy(&f, &reg, &mirror);
    assert!(o.status.success(), "copy: {}", text(&o));
    let o = cosign_verify(
        home.path(),
        "verify",
        &public,
        &format!("{mirror}@{digest}"),
        &[],
    );
    assert!(
        o.status.success(),
        "cosign verify at the copy: {}",
        text(&o)
    );
    let o = cosign_verify(
        home.path(),
        "verify-attestation",
        &public,
        &format!("{mirror}@{digest}"),
        &["--type", "spdxjson"],
    );
    assert!(
        o.status.success(),
        "cosign verify-attestation at the copy: {}",
        text(&o)
    );
    let listed = referrers(&reg, "mirror/openstack-cloud-controller-manager", &digest);
    assert!(
        listed["manifests"]
            .as_array()
            .unwrap()
            .iter()
            .any(|m| m["digest"] == sig_digest.as_str()),
        "{listed}"
    );

    // One changed byte of each bundle's signature, or of its signed payload: cosign refuses the
    // signature and the attestations (`cosign verify` accepts any bundle of the key about the
    // image, attestations included, so every one is changed), and verify finds the recorded ones
    // no longer among the index's referrers.
    let mut bundles = vec![sig_digest.clone()];
    bundles.extend(
        signature["attestations"]
            .as_mapping()
            .unwrap()
            .values()
            .map(|d| d.as_str().unwrap().to_string()),
    );
    for pointer in ["/dsseEnvelope/signatures/0/sig", "/dsseEnvelope/payload"] {
        let original = replace_bundles(&reg, name, &digest, &bundles, flip(pointer));
        let o = cosign_verify(
            home.path(),
            "verify-attestation",
            &public,
            &reference,
            &["--type", "spdxjson"],
        );
        assert!(
            !o.status.success(),
            "cosign verify-attestation passed with {pointer} changed: {}",
            text(&o)
        );
        let o = cosign_verify(home.path(), "verify", &public, &reference, &[]);
        assert!(
            !o.status.success(),
            "cosign verify passed with {pointer} changed: {}",
            text(&o)
        );
        let found = findings(&f, &reg);
        assert!(
            found.contains(&format!(
                "1.34: signature: {} is not listed among the referrers",
                &sig_digest[..19]
            )),
            "{found}"
        );
        reg.put_manifest(
            name,
            &digest.replace(':', "-"),
            "application/vnd.oci.image.index.v1+json",
            &original,
        );
    }
    let o = cosign_verify(home.path(), "verify", &public, &reference, &[]);
    assert!(
        o.status.success(),
        "cosign verify after the restore: {}",
        text(&o)
    );

    // A digest manifest that names another key: the image's signature is foreign to it.
    generate_key_pair(home.path(), keys.path(), "other", "");
    let other = std::fs::read_to_string(keys.path().join("other.pub")).unwrap();
    let other_key = occm_forge_core::signing::public_key_fingerprint(&other).unwrap();
    let original_lock = std::fs::read_to_string(&f.lock).unwrap();
    let mut edited: serde_norway::Value = serde_norway::from_str(&original_lock).unwrap();
    edited["images"]["1.34"]["signature"]["public_key"] = other.clone().into();
    edited["images"]["1.34"]["signature"]["key"] = other_key.clone().into();
    std::fs::write(&f.lock, serde_norway::to_string(&edited).unwrap()).unwrap();
    let found = findings(&f, &reg);
    assert!(
        found.contains(&format!(
            "1.34: signature: {}: no signature verifies with the recorded public key (key {other_key})",
            &sig_digest[..19]
        )),
        "{found}"
    );
    assert!(found.contains("1.34: attestation provenance:"), "{found}");
    std::fs::write(&f.lock, original_lock).unwrap();

    // The signature gone from the registry: a finding.
    assert_eq!(
        reg.delete(&format!("/v2/{name}/manifests/{sig_digest}")),
        Some(202)
    );
    let found = findings(&f, &reg);
    assert!(
        found.contains(&format!("1.34: signature: {sig_digest} is not in {repo}")),
        "{found}"
    );

    // Signing with another key signs again (the same image digest) and records that key.
    let other_arg = keys.path().join("other.key");
    let o = forge(
        &f,
        &reg,
        "",
        &[
            "build",
            "--k8s",
            "1.34",
            "--push",
            "--sign-key",
            other_arg.to_str().unwrap(),
        ],
    );
    assert!(o.status.success(), "{}", text(&o));
    let old_key = signature["key"].as_str().unwrap();
    assert!(
        stderr(&o).contains(&format!(
            "records 1.34 signed by key {old_key}, and --sign-key signs with key {other_key}"
        )),
        "{}",
        text(&o)
    );
    // The build says the mirror lacks the new bundles, as record-signatures does.
    assert!(
        stderr(&o).contains(&format!(
            "1.34: the mirrors {mirror} do not have these bundles until they are copied again"
        )),
        "{}",
        text(&o)
    );
    let lock = read_lock(&f.lock);
    assert_eq!(
        lock["images"]["1.34"]["digest"].as_str(),
        Some(digest.as_str())
    );
    assert_eq!(
        lock["images"]["1.34"]["signature"]["key"].as_str(),
        Some(other_key.as_str())
    );
    // The mirror copied before holds the old signature only: verify says so, and copying again
    // brings the new one.
    let found = findings(&f, &reg);
    let new_sig = lock["images"]["1.34"]["signature"]["digest"]
        .as_str()
        .unwrap();
    assert!(
        found.starts_with(&format!(
            "1.34: mirror {mirror}: signature: {new_sig} is not in {mirror}\n"
        )),
        "{found}"
    );
    let o = copy(&f, &reg, &mirror);
    assert!(o.status.success(), "copy again: {}", text(&o));
    let o = verify(&f, &reg);
    assert!(o.status.success(), "verify: {}", text(&o));
    let o = cosign_verify(
        home.path(),
        "verify",
        &keys.path().join("other.pub"),
        &format!("{mirror}@{digest}"),
        &[],
    );
    assert!(
        o.status.success(),
        "cosign verify with the new key: {}",
        text(&o)
    );
}

/// `occm-forge manifest record-signatures --k8s 1.34` by `identity`.
fn record_signatures(f: &Fixture, reg: &TestRegistry, identity: &str) -> Output {
    occm_forge(f.path())
        .args([
            "manifest",
            "record-signatures",
            "--k8s",
            "1.34",
            "--certificate-identity",
            identity,
            "--certificate-oidc-issuer",
            ISSUER,
            "--insecure-registry",
            &reg.addr,
        ])
        .output()
        .unwrap()
}

/// The pipeline's keyless path (pipelines/build.yml): `build --push` unsigned; the `sign` job's
/// scripts sign and attest with the real cosign and a certificate as Fulcio issues one to the
/// workflow (here from a CA of the test's own; no Fulcio or Rekor is reachable), once however
/// often they run; then `manifest record-signatures` records what that identity signed,
/// `verify` checks it, and `copy` carries it.
#[test]
fn keyless_signatures_by_cosign_are_recorded_by_identity_checked_by_verify_and_copied() {
    let reg = TestRegistry::start();
    let f = fixture(&["linux/amd64"]);
    let name = "occm/openstack-cloud-controller-manager";
    let repo = reg.repo(name);
    f.write_config(&repo, &["linux/amd64"], "static", &[]);
    let o = forge(&f, &reg, "", &["build", "--k8s", "1.34", "--push"]);
    assert!(o.status.success(), "{}", text(&o));
    let lock = read_lock(&f.lock);
    let entry = &lock["images"]["1.34"];
    let digest = entry["digest"].as_str().unwrap().to_string();
    let tag = entry["tag"].as_str().unwrap();
    let reference = format!("{repo}@{digest}");

    // Nothing signed yet: said so, exit 10, nothing recorded.
    let o = record_signatures(&f, &reg, IDENTITY);
    assert_eq!(o.status.code(), Some(10), "{}", text(&o));
    assert!(
        stderr(&o).contains(&format!(
            "has no signature by {IDENTITY} (issuer {ISSUER}): among its 1 referrers or in cosign's tags"
        )),
        "{}",
        text(&o)
    );

    // The sign job's own scripts (pipelines/build.yml), with a cosign that signs with the test's
    // certificate instead of Fulcio's and trusts the test's CA instead of Sigstore's root.
    let home = tempfile::tempdir().unwrap();
    let pki = keyless_pki(home.path(), IDENTITY);
    let dir = pki.path();
    let job = SignJob::new(
        home.path(),
        dir,
        &f.path().join("out/attestations").join(tag),
        &format!("{repo}:{tag}@{digest}"),
    );
    let outputs = job.run("The image to sign", &[("BUILD_RESULT", "success")]);
    assert_eq!(outputs["image"], reference);
    assert_eq!(outputs["identity"], IDENTITY);
    let image = [("IMAGE", reference.as_str()), ("IDENTITY", IDENTITY)];
    job.run("Sign ", &image);
    job.run("Attest the SBOMs and the provenance", &image);
    job.run("Verify as users do", &image);
    let bundles = |reg: &TestRegistry| {
        referrers(reg, name, &digest)["manifests"]
            .as_array()
            .unwrap()
            .len()
    };
    let signed = bundles(&reg);
    assert_eq!(
        signed,
        1 + 3,
        "the provenance, the signature and two attestations"
    );
    // A rerun (of a failed job, or of the whole run) signs and attests nothing again.
    assert!(job.run_logged("Sign ", &image).contains("is signed by"));
    let again = job.run_logged("Attest the SBOMs and the provenance", &image);
    assert!(again.contains("is attested already"), "{again}");
    assert_eq!(bundles(&reg), signed);

    // Recorded by identity: the signature and both attestations.
    let o = record_signatures(&f, &reg, IDENTITY);
    assert!(o.status.success(), "{}", text(&o));
    let lock = read_lock(&f.lock);
    let signature = &lock["images"]["1.34"]["signature"];
    assert_eq!(signature["certificate_identity"].as_str(), Some(IDENTITY));
    assert_eq!(signature["certificate_oidc_issuer"].as_str(), Some(ISSUER));
    assert!(signature.get("public_key").is_none(), "{signature:?}");
    let sig_digest = signature["digest"].as_str().unwrap().to_string();
    let attested: Vec<&str> = signature["attestations"]
        .as_mapping()
        .unwrap()
        .keys()
        .map(|k| k.as_str().unwrap())
        .collect();
    assert_eq!(attested, ["provenance", "sbom linux/amd64"]);
    assert_eq!(
        stdout(&o),
        format!(
            "1.34 {reference} signature {repo}@{sig_digest} by {IDENTITY} (issuer {ISSUER}); attested: provenance, sbom linux/amd64\n"
        )
    );
    let o = verify(&f, &reg);
    assert!(o.status.success(), "verify: {}", text(&o));

    // Another workflow signed nothing here: exit 10, naming who did.
    let o = record_signatures(&f, &reg, FORK);
    assert_eq!(o.status.code(), Some(10), "{}", text(&o));
    assert!(
        stderr(&o).contains(&format!("signed by {IDENTITY} (issuer {ISSUER}) instead")),
        "{}",
        text(&o)
    );

    // A digest manifest that names another identity: the signature is foreign to it.
    let original_lock = std::fs::read_to_string(&f.lock).unwrap();
    std::fs::write(&f.lock, original_lock.replace(IDENTITY, FORK)).unwrap();
    let found = findings(&f, &reg);
    assert!(
        found.contains(&format!(
            "1.34: signature: {}: its certificate names {IDENTITY} (issuer {ISSUER}), not {FORK} (issuer {ISSUER})",
            &sig_digest[..19]
        )),
        "{found}"
    );
    std::fs::write(&f.lock, original_lock).unwrap();

    // copy carries them, every digest unchanged: cosign verifies the identity at the copy.
    let mirror = reg.repo("mirror/openstack-cloud-controller-manager");
    let o = copy(&f, &reg, &mirror);
    assert!(o.status.success(), "copy: {}", text(&o));
    let copied = format!("{mirror}@{digest}");
    let o = cosign_verify_keyless(home.path(), dir, "verify", IDENTITY, &copied, &[]);
    assert!(
        o.status.success(),
        "cosign verify at the copy: {}",
        text(&o)
    );
    let o = cosign_verify_keyless(
        home.path(),
        dir,
        "verify-attestation",
        IDENTITY,
        &copied,
        &["--type", "slsaprovenance1"],
    );
    assert!(
        o.status.success(),
        "cosign verify-attestation at the copy: {}",
        text(&o)
    );
    let o = cosign_verify_keyless(home.path(), dir, "verify", FORK, &copied, &[]);
    assert!(
        !o.status.success(),
        "cosign verify of another identity: {}",
        text(&o)
    );
}
