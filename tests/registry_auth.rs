//! Credentials and TLS against a real docker-registry with htpasswd and a CA-signed leaf
//! certificate: the right password works from each kind of auth file; a wrong password, an
//! unknown CA, a plain-HTTP registry without opt-in and a missing credential helper each end in
//! one line; and the password appears in no output and no file occm-forge writes.

use crate::common;

use std::path::{Path, PathBuf};
use std::process::Output;

use common::*;

const USER: &str = "forge";
const PASSWORD: &str = "s3cret-Pa55word-9f1c";

struct Secured {
    reg: TestRegistry,
    ca: PathBuf,
    _certs: tempfile::TempDir,
}

fn secured_registry() -> Secured {
    let certs = tempfile::tempdir().unwrap();
    let (ca, leaf, key) = make_ca_and_leaf(certs.path());
    let htpasswd = make_htpasswd(certs.path(), USER, PASSWORD);
    let reg = TestRegistry::start_with(&RegistryOptions {
        tls: Some((leaf, key)),
        htpasswd: Some(htpasswd),
        ..Default::default()
    });
    Secured {
        reg,
        ca,
        _certs: certs,
    }
}

fn auth_file(dir: &Path, registry: &str, password: &str) -> PathBuf {
    use base64::Engine;
    let token = base64::engine::general_purpose::STANDARD.encode(format!("{USER}:{password}"));
    let path = dir.join(format!(
        "auth-{}.json",
        &sha256_hex(password.as_bytes())[..8]
    ));
    std::fs::write(
        &path,
        format!(r#"{{"auths":{{"{registry}":{{"auth":"{token}"}}}}}}"#),
    )
    .unwrap();
    path
}

/// `build --k8s 1.34 --push` to `repo`, with extra arguments and environment.
fn push(f: &Fixture, repo: &str, args: &[&str], env: &[(&str, &Path)]) -> Output {
    let mut c = occm_forge(f.path());
    c.args([
        "build",
        "--k8s",
        "1.34",
        "--push",
        "--repository",
        repo,
        "--source",
    ])
    .arg(&f.upstream)
    .arg("--output")
    .arg(f.path().join("out"))
    .args(args)
    .env_remove("DOCKER_CONFIG")
    .env_remove("REGISTRY_AUTH_FILE")
    .env("HOME", f.path().join("home"))
    .env("XDG_RUNTIME_DIR", f.path().join("run"));
    for (k, v) in env {
        c.env(k, v);
    }
    c.output().unwrap()
}

fn last_line(o: &Output) -> String {
    stderr(o).lines().last().unwrap_or_default().to_string()
}

/// Every file under `dir`, recursively.
fn files(dir: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    let mut todo = vec![dir.to_path_buf()];
    while let Some(d) = todo.pop() {
        for e in std::fs::read_dir(&d).into_iter().flatten().flatten() {
            let p = e.path();
            if p.is_dir() {
                todo.push(p)
            } else {
                out.push(p)
            }
        }
    }
    out
}

#[test]
fn credentials_tls_and_refusals() {
    let s = secured_registry();
    let f = fixture(&["linux/amd64"]);
    let repo = s.reg.repo("occm/openstack-cloud-controller-manager");
    let lock_before = f.seed_lock();
    let secrets_dir = tempfile::tempdir().unwrap();
    let good = auth_file(secrets_dir.path(), &s.reg.addr, PASSWORD);
    let bad = auth_file(secrets_dir.path(), &s.reg.addr, "wrong-password");
    let ca = s.ca.to_str().unwrap();
    let mut outputs: Vec<Output> = Vec::new();

    // Wrong password: one line, 401, no secret.
    let o = push(
        &f,
        &repo,
        &["--ca-file", ca, "--registry-config", bad.to_str().unwrap()],
        &[],
    );
    assert_eq!(o.status.code(), Some(8), "{}", stderr(&o));
    let line = last_line(&o);
    assert!(
        line.starts_with(&format!(
            "occm-forge: error: preflight: push to {repo}: registry {}: ",
            s.reg.addr
        )),
        "{line}"
    );
    assert!(
        line.contains("401") && line.contains("check the credentials"),
        "{line}"
    );
    outputs.push(o);

    // Unknown CA: TLS is verified by default.
    let o = push(
        &f,
        &repo,
        &["--registry-config", good.to_str().unwrap()],
        &[],
    );
    assert_eq!(o.status.code(), Some(8), "{}", stderr(&o));
    let line = last_line(&o);
    assert!(
        line.contains("UnknownIssuer") && line.contains("--ca-file"),
        "{line}"
    );
    outputs.push(o);

    // A missing credential helper is named.
    let helper_cfg = secrets_dir.path().join("helper.json");
    std::fs::write(
        &helper_cfg,
        format!(
            r#"{{"credHelpers":{{"{}":"occmforge-nosuch"}}}}"#,
            s.reg.addr
        ),
    )
    .unwrap();
    let o = push(
        &f,
        &repo,
        &[
            "--ca-file",
            ca,
            "--registry-config",
            helper_cfg.to_str().unwrap(),
        ],
        &[],
    );
    assert_eq!(o.status.code(), Some(8), "{}", stderr(&o));
    assert!(
        last_line(&o)
            .contains("credential helper `docker-credential-occmforge-nosuch` is not installed"),
        "{}",
        last_line(&o)
    );
    outputs.push(o);
    assert_eq!(
        std::fs::read(&f.lock).unwrap(),
        lock_before,
        "a refused push changed the digest manifest"
    );

    // The right password works from --registry-config, from DOCKER_CONFIG and from
    // REGISTRY_AUTH_FILE; skopeo, given the same CA and credentials, sees the recorded digest.
    let docker_dir = secrets_dir.path().join("docker");
    std::fs::create_dir_all(&docker_dir).unwrap();
    std::fs::copy(&good, docker_dir.join("config.json")).unwrap();
    type Run<'a> = (&'a [&'a str], &'a [(&'a str, &'a Path)]);
    let runs: [Run<'_>; 3] = [
        (
            &["--ca-file", ca, "--registry-config", good.to_str().unwrap()],
            &[],
        ),
        (
            &["--ca-file", ca],
            &[("DOCKER_CONFIG", docker_dir.as_path())],
        ),
        (
            &["--ca-file", ca],
            &[("REGISTRY_AUTH_FILE", good.as_path())],
        ),
    ];
    for (args, env) in runs {
        let o = push(&f, &repo, args, env);
        assert!(
            o.status.success(),
            "push with {args:?} {env:?}: {}",
            stderr(&o)
        );
        outputs.push(o);
    }
    let digest = read_lock(&f.lock)["images"]["1.34"]["digest"]
        .as_str()
        .unwrap()
        .to_string();
    let cert_dir = secrets_dir.path().join("certs.d");
    std::fs::create_dir_all(&cert_dir).unwrap();
    std::fs::copy(&s.ca, cert_dir.join("ca.crt")).unwrap();
    let raw = skopeo(&[
        "inspect",
        "--raw",
        "--cert-dir",
        cert_dir.to_str().unwrap(),
        "--creds",
        &format!("{USER}:{PASSWORD}"),
        &format!("docker://{repo}:v1.34.1-occmforge.1"),
    ]);
    assert_eq!(format!("sha256:{}", sha256_hex(raw.as_bytes())), digest);

    // No password, in clear or base64, in any output or any file occm-forge wrote.
    use base64::Engine;
    let b64 = base64::engine::general_purpose::STANDARD.encode(format!("{USER}:{PASSWORD}"));
    for o in &outputs {
        for text in [stdout(o), stderr(o)] {
            assert!(
                !text.contains(PASSWORD) && !text.contains(&b64),
                "secret in output: {text}"
            );
        }
    }
    let mut written = files(&f.path().join("out"));
    written.push(f.lock.clone());
    written.extend(files(&shared_cache().join("tmp")));
    assert!(written.len() > 5);
    for file in written {
        let bytes = std::fs::read(&file).unwrap_or_default();
        let text = String::from_utf8_lossy(&bytes);
        assert!(
            !text.contains(PASSWORD) && !text.contains(&b64),
            "secret in {}",
            file.display()
        );
    }
}

#[test]
fn a_plain_http_registry_needs_an_explicit_opt_in() {
    let reg = TestRegistry::start();
    let f = fixture(&["linux/amd64"]);
    let repo = reg.repo("occm/openstack-cloud-controller-manager");
    let o = push(&f, &repo, &[], &[]);
    assert_eq!(o.status.code(), Some(8), "{}", stderr(&o));
    let line = last_line(&o);
    assert!(
        line.contains(&format!("--insecure-registry {}", reg.addr)),
        "{line}"
    );
    assert_eq!(
        stderr(&o).lines().filter(|l| l.contains("error")).count(),
        1,
        "{}",
        stderr(&o)
    );
    let o = push(&f, &repo, &["--insecure-registry", &reg.addr], &[]);
    assert!(o.status.success(), "{}", stderr(&o));
}

/// A credential helper that fails says so on stdout (docker-credential-helpers' `Serve` prints
/// the error there and exits 1): the error is one line naming the helper and the registry, from
/// the stage that looked the credentials up (publish's check of the tag on a first push, the
/// inputs stage's no-op check once the minor is recorded). Nothing is pushed anonymously.
#[test]
fn a_failing_credential_helper_is_one_line_naming_it_and_the_registry() {
    let reg = TestRegistry::start();
    let f = fixture(&["linux/amd64"]);
    let repo = reg.repo("occm/openstack-cloud-controller-manager");
    let dir = tempfile::tempdir().unwrap();
    let bin = dir.path().join("bin");
    std::fs::create_dir_all(&bin).unwrap();
    let helper = bin.join("docker-credential-occmforge-broken");
    std::fs::write(
        &helper,
        "#!/bin/sh\nread -r server\necho 'error getting credentials - err: exit status 1, out: `password store is empty`'\nexit 1\n",
    )
    .unwrap();
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(&helper, std::fs::Permissions::from_mode(0o755)).unwrap();
    let config = dir.path().join("helper.json");
    std::fs::write(
        &config,
        format!(r#"{{"credHelpers":{{"{}":"occmforge-broken"}}}}"#, reg.addr),
    )
    .unwrap();
    let path = PathBuf::from(format!(
        "{}:{}",
        bin.display(),
        std::env::var("PATH").unwrap_or_default()
    ));
    let with_helper = [
        "--insecure-registry",
        &reg.addr,
        "--registry-config",
        config.to_str().unwrap(),
    ];
    let expected = |stage: &str| {
        format!(
            "occm-forge: error: {stage}: credentials for {} from {}: credential helper `docker-credential-occmforge-broken` failed: error getting credentials - err: exit status 1, out: `password store is empty`",
            reg.addr,
            config.display()
        )
    };
    let errors = |o: &Output| -> Vec<String> {
        stderr(o)
            .lines()
            .filter(|l| l.contains("error"))
            .map(str::to_string)
            .collect()
    };

    let o = push(&f, &repo, &with_helper, &[("PATH", path.as_path())]);
    assert_eq!(o.status.code(), Some(8), "{}", stderr(&o));
    // Found by the preflight's push check, before any build work.
    assert_eq!(
        errors(&o),
        [expected(&format!(
            "preflight: push to {}",
            reg.repo("occm/openstack-cloud-controller-manager")
        ))],
        "{}",
        stderr(&o)
    );
    assert_eq!(
        reg.get_status("/v2/occm/openstack-cloud-controller-manager/manifests/v1.34.1-occmforge.1"),
        Some(404),
        "pushed without the helper's credentials"
    );

    // Recorded (anonymously, the registry needs no credentials), then the no-op check.
    let o = push(&f, &repo, &["--insecure-registry", &reg.addr], &[]);
    assert!(o.status.success(), "{}", stderr(&o));
    let o = push(&f, &repo, &with_helper, &[("PATH", path.as_path())]);
    assert_eq!(o.status.code(), Some(8), "{}", stderr(&o));
    assert_eq!(errors(&o), [expected("inputs")], "{}", stderr(&o));
}
