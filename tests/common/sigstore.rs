//! Sigstore parts for tests: the pinned cosign, a Fulcio stand-in (a CA of the test's own and
//! certificates shaped like Fulcio's), and pipelines/build.yml's `sign` job run as GitHub runs
//! it.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use serde_json::Value;

use super::{stderr, stdout};

/// `.tools/bin/cosign`, the pinned release.
pub fn cosign_bin() -> PathBuf {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join(".tools/bin/cosign");
    assert!(
        path.is_file(),
        "`cosign` is not installed in .tools/bin: run scripts/test, which installs the test dependencies"
    );
    path
}

/// stdout then stderr.
pub fn text(o: &Output) -> String {
    format!("{}{}", stdout(o), stderr(o))
}

/// The identity Fulcio gives pipelines/build.yml run on `main` of `example/occm`.
pub const IDENTITY: &str =
    "https://github.com/example/occm/.github/workflows/build.yml@refs/heads/main";
/// The same workflow in a fork: another identity.
pub const FORK: &str = "https://github.com/fork/occm/.github/workflows/build.yml@refs/heads/main";
/// GitHub Actions' OIDC issuer.
pub const ISSUER: &str = "https://token.actions.githubusercontent.com";

/// A Fulcio stand-in in `dir`: a CA (`ca.pem`) and a code-signing certificate (`leaf.pem`) it
/// issued for a fresh key (`leaf.key`, PKCS#8) naming `identity` and, in Fulcio's issuer
/// extension 1.3.6.1.4.1.57264.1.8, [`ISSUER`]: what Fulcio gives a GitHub workflow.
pub fn fulcio_certificate(dir: &Path, identity: &str) {
    use rcgen::{
        BasicConstraints, CertificateParams, CustomExtension, DnType, ExtendedKeyUsagePurpose,
        IsCa, Issuer, KeyPair, KeyUsagePurpose, SanType,
    };
    let now = time::OffsetDateTime::now_utc();
    let mut ca = CertificateParams::new(Vec::<String>::new()).unwrap();
    ca.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    ca.distinguished_name
        .push(DnType::CommonName, "test fulcio");
    ca.key_usages = vec![KeyUsagePurpose::KeyCertSign];
    ca.not_before = now - time::Duration::hours(1);
    ca.not_after = now + time::Duration::days(1);
    let ca_key = KeyPair::generate_for(&rcgen::PKCS_ECDSA_P256_SHA256).unwrap();
    let ca_cert = ca.self_signed(&ca_key).unwrap();
    let issuer = Issuer::new(ca, ca_key);
    let mut leaf = CertificateParams::new(Vec::<String>::new()).unwrap();
    leaf.subject_alt_names = vec![SanType::URI(identity.try_into().unwrap())];
    leaf.key_usages = vec![KeyUsagePurpose::DigitalSignature];
    leaf.extended_key_usages = vec![ExtendedKeyUsagePurpose::CodeSigning];
    let mut utf8 = vec![0x0c, ISSUER.len() as u8];
    utf8.extend_from_slice(ISSUER.as_bytes());
    leaf.custom_extensions = vec![CustomExtension::from_oid_content(
        &[1, 3, 6, 1, 4, 1, 57264, 1, 8],
        utf8,
    )];
    leaf.not_before = now - time::Duration::hours(1);
    leaf.not_after = now + time::Duration::days(1);
    let leaf_key = KeyPair::generate_for(&rcgen::PKCS_ECDSA_P256_SHA256).unwrap();
    let leaf_cert = leaf.signed_by(&leaf_key, &issuer).unwrap();
    std::fs::write(dir.join("ca.pem"), ca_cert.pem()).unwrap();
    std::fs::write(dir.join("leaf.pem"), leaf_cert.pem()).unwrap();
    std::fs::write(dir.join("leaf.key"), leaf_key.serialize_pem()).unwrap();
}

/// Runs cosign in `dir`, asserting success.
pub fn cosign_ok(home: &Path, dir: &Path, args: &[&str]) -> Output {
    let o = Command::new(cosign_bin())
        .args(args)
        .current_dir(dir)
        .env("HOME", home)
        .env("COSIGN_PASSWORD", "")
        .env("COSIGN_YES", "true")
        .output()
        .unwrap();
    assert!(o.status.success(), "cosign {args:?}: {}", text(&o));
    o
}

/// `cosign verify` (or `verify-attestation` with `extra`) of `reference` by `identity` with
/// [`ISSUER`], trusting `trusted_root` (our CA as Fulcio's), no transparency log or SCT.
pub fn cosign_verify_keyless(
    home: &Path,
    dir: &Path,
    command: &str,
    identity: &str,
    reference: &str,
    extra: &[&str],
) -> Output {
    let mut args = vec![
        command,
        "--certificate-identity",
        identity,
        "--certificate-oidc-issuer",
        ISSUER,
        "--trusted-root",
        "trusted_root.json",
        "--insecure-ignore-tlog=true",
        "--insecure-ignore-sct=true",
        "--allow-insecure-registry",
        "--allow-http-registry",
    ];
    args.extend_from_slice(extra);
    args.push(reference);
    Command::new(cosign_bin())
        .args(&args)
        .current_dir(dir)
        .env("HOME", home)
        .output()
        .unwrap()
}

/// The steps of pipelines/build.yml's `sign` job, run as GitHub runs them (bash -eo pipefail,
/// `$GITHUB_OUTPUT`, `$RUNNER_TEMP`), with `cosign` on PATH a wrapper of the real one that signs
/// with the test's certificate and trusts the test's CA (what `--certificate` and
/// `--trusted-root` do; Fulcio, Rekor and the OIDC token are what cannot be had here).
pub struct SignJob {
    temp: tempfile::TempDir,
    env: Vec<(String, String)>,
    steps: Vec<Value>,
}

impl SignJob {
    /// The job for the build of 1.34 that printed `built` (`<repo>:<tag>@<digest>`) and wrote
    /// `attestations` (`<output>/attestations/<tag>`), both where the build job uploads them;
    /// `pki` as [`keyless_pki`] makes it.
    pub fn new(home: &Path, pki: &Path, attestations: &Path, built: &str) -> SignJob {
        let temp = tempfile::tempdir().unwrap();
        let runner = temp.path();
        let out = runner.join("built");
        std::fs::create_dir_all(&out).unwrap();
        std::fs::write(out.join("1.34.ref"), format!("{built}\n")).unwrap();
        let copy = std::process::Command::new("cp")
            .arg("-R")
            .arg(attestations)
            .arg(out.join("1.34.attestations"))
            .status()
            .unwrap();
        assert!(copy.success());
        let bin = runner.join("bin");
        std::fs::create_dir_all(&bin).unwrap();
        let real = cosign_bin();
        let p = |name: &str| pki.join(name).display().to_string();
        let wrapper = format!(
            "#!/bin/bash\ncase \"$1\" in\n  sign|attest) exec {real} \"$@\" --key {key} --certificate {cert} --signing-config {config} --allow-insecure-registry --allow-http-registry ;;\n  verify|verify-attestation) exec {real} \"$@\" --trusted-root {root} --insecure-ignore-tlog=true --insecure-ignore-sct=true --allow-insecure-registry --allow-http-registry ;;\n  *) exec {real} \"$@\" ;;\nesac\n",
            real = real.display(),
            key = p("leaf-cosign.key"),
            cert = p("leaf.pem"),
            config = p("signing_config.json"),
            root = p("trusted_root.json"),
        );
        let cosign = bin.join("cosign");
        std::fs::write(&cosign, wrapper).unwrap();
        use std::os::unix::fs::PermissionsExt as _;
        std::fs::set_permissions(&cosign, std::fs::Permissions::from_mode(0o755)).unwrap();
        let workflow: serde_norway::Value = serde_norway::from_str(
            &std::fs::read_to_string(
                Path::new(env!("CARGO_MANIFEST_DIR")).join("pipelines/build.yml"),
            )
            .unwrap(),
        )
        .unwrap();
        let steps: Value = serde_json::to_value(&workflow["jobs"]["sign"]["steps"]).unwrap();
        let env = [
            (
                "PATH",
                format!("{}:{}", bin.display(), std::env::var("PATH").unwrap()),
            ),
            ("HOME", home.display().to_string()),
            ("COSIGN_PASSWORD", String::new()),
            ("RUNNER_TEMP", runner.display().to_string()),
            ("GITHUB_OUTPUT", runner.join("output").display().to_string()),
            (
                "GITHUB_STEP_SUMMARY",
                runner.join("summary").display().to_string(),
            ),
            ("GITHUB_REPOSITORY", "example/occm".into()),
            ("GITHUB_REF", "refs/heads/main".into()),
            ("MINOR", "1.34".into()),
            ("OIDC_ISSUER", ISSUER.into()),
        ];
        SignJob {
            env: env.into_iter().map(|(k, v)| (k.to_string(), v)).collect(),
            steps: steps.as_array().unwrap().clone(),
            temp,
        }
    }

    /// Runs the step whose name starts with `name`, with `env`; returns its stdout and stderr.
    pub fn run_logged(&self, name: &str, env: &[(&str, &str)]) -> String {
        let step = self
            .steps
            .iter()
            .find(|s| s["name"].as_str().is_some_and(|n| n.starts_with(name)))
            .unwrap_or_else(|| panic!("build.yml's sign job has no step {name:?}"));
        let o = Command::new("bash")
            .args(["--noprofile", "--norc", "-eo", "pipefail", "-c"])
            .arg(step["run"].as_str().unwrap())
            .env_clear()
            .envs(self.env.iter().map(|(k, v)| (k.as_str(), v.as_str())))
            .envs(env.iter().copied())
            .current_dir(self.temp.path())
            .output()
            .unwrap();
        assert!(o.status.success(), "sign job step {name:?}: {}", text(&o));
        text(&o)
    }

    /// [`SignJob::run_logged`], returning what the step wrote to `$GITHUB_OUTPUT`.
    pub fn run(
        &self,
        name: &str,
        env: &[(&str, &str)],
    ) -> std::collections::BTreeMap<String, String> {
        let output = self.temp.path().join("output");
        let _ = std::fs::remove_file(&output);
        self.run_logged(name, env);
        std::fs::read_to_string(&output)
            .unwrap_or_default()
            .lines()
            .filter_map(|l| l.split_once('='))
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }
}

/// A Fulcio and trust-root stand-in in a new directory, for cosign: [`fulcio_certificate`] for
/// `identity`, the leaf key imported as cosign's `leaf-cosign.key` (empty password),
/// `signing_config.json` without any Fulcio, Rekor or TSA, and `trusted_root.json` trusting the
/// CA as Fulcio's.
pub fn keyless_pki(home: &Path, identity: &str) -> tempfile::TempDir {
    let pki = tempfile::tempdir().unwrap();
    let dir = pki.path();
    fulcio_certificate(dir, identity);
    cosign_ok(
        home,
        dir,
        &[
            "import-key-pair",
            "--key",
            "leaf.key",
            "--output-key-prefix",
            "leaf-cosign",
        ],
    );
    cosign_ok(
        home,
        dir,
        &[
            "signing-config",
            "create",
            "--no-default-fulcio",
            "--no-default-oidc",
            "--no-default-rekor",
            "--no-default-tsa",
            "--out",
            "signing_config.json",
        ],
    );
    cosign_ok(
        home,
        dir,
        &[
            "trusted-root",
            "create",
            "--no-default-fulcio",
            "--no-default-rekor",
            "--no-default-ctfe",
            "--no-default-tsa",
            "--fulcio=url=https://fulcio.test,certificate-chain=ca.pem",
            "--out",
            "trusted_root.json",
        ],
    );
    pki
}

/// `cosign generate-key-pair` into `dir` as `<prefix>.key` / `<prefix>.pub`.
pub fn generate_key_pair(home: &Path, dir: &Path, prefix: &str, password: &str) {
    let o = Command::new(cosign_bin())
        .args(["generate-key-pair", "--output-key-prefix", prefix])
        .current_dir(dir)
        .env("HOME", home)
        .env("COSIGN_PASSWORD", password)
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", text(&o));
}
