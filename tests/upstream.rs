//! Gated: the real upstream. Every test here is `#[ignore]`d, so an ordinary run lists them as
//! ignored instead of counting them as passed; run them with
//! `OCCM_FORGE_UPSTREAM_MIRROR=/path/to/cloud-provider-openstack.git cargo test --test suite upstream:: -- --ignored`
//! (a clone or bare mirror of kubernetes/cloud-provider-openstack). Run with `--ignored` and
//! without the variable, they fail and say so. The run needs the Go module proxy and starts from
//! a new, empty cache directory, as a new user and a new CI runner do (`OCCM_FORGE_GATED_CACHE`
//! names one to reuse instead; tests/common `gated_cache`). It builds and pushes v1.34.1
//! with the project's images.toml and patches to a loopback registry, then checks the image with
//! skopeo and umoci and runs the binary.

use crate::common;

use std::process::Command;

use common::sigstore::*;
use common::*;

/// The mirror named by OCCM_FORGE_UPSTREAM_MIRROR; panics when it is unset (the tests are
/// ignored unless asked for with `--ignored`, and then they must not pass without running).
/// The image index digest of upstream v1.34.1 with the project's patch series, go1.25.14
/// (revision 2, images.toml) and `--base static`, both platforms, as every build of these pins
/// has given it since 1.34 moved to go1.25.14 (docs/acceptance.md's 1.34 row; the gated runs
/// since). Under go1.25.1 (revision 1) the same source gave `sha256:bc42e125d6cc…`
/// (docs/getting-started.md's example).
const V1_34_1_STATIC: &str =
    "sha256:29ba60fe37c2ac9fef41a89098d43602a4bffd398fe69086a9e8d76f421d2e9d";

fn mirror() -> String {
    std::env::var("OCCM_FORGE_UPSTREAM_MIRROR")
        .ok()
        .filter(|m| !m.is_empty())
        .expect("set OCCM_FORGE_UPSTREAM_MIRROR to a clone or bare mirror of kubernetes/cloud-provider-openstack")
}

/// The project's images.toml, with the patch directory made absolute and the digest manifest in `dir`.
fn project_config(dir: &std::path::Path) -> std::path::PathBuf {
    let root = env!("CARGO_MANIFEST_DIR");
    let text = std::fs::read_to_string(format!("{root}/images.toml")).unwrap();
    let text = text.replace(
        "patches_dir = \"patches\"",
        &format!("patches_dir = \"{root}/patches\""),
    );
    let path = dir.join("images.toml");
    std::fs::write(&path, text).unwrap();
    path
}

#[test]
#[ignore = "needs OCCM_FORGE_UPSTREAM_MIRROR (a cloud-provider-openstack mirror) and the Go module proxy; run with -- --ignored"]
fn real_v1_34_build_push_and_run() {
    let mirror = mirror();
    let reg = TestRegistry::start();
    let dir = tempfile::tempdir().unwrap();
    let config = project_config(dir.path());
    let repo = reg.repo("occm/openstack-cloud-controller-manager");
    let timings = dir.path().join("timings.json");
    let cache = gated_cache();
    let started = std::time::Instant::now();
    let o = Command::new(env!("CARGO_BIN_EXE_occm-forge"))
        .current_dir(dir.path())
        .arg("--cache-dir")
        .arg(cache.path())
        .args([
            "build",
            "--k8s",
            "1.34",
            "--push",
            "--base",
            "static",
            "--source",
            &mirror,
            "--repository",
            &repo,
        ])
        .args(["--insecure-registry", &reg.addr, "--config"])
        .arg(&config)
        .arg("--timings")
        .arg(&timings)
        .output()
        .unwrap();
    eprintln!("{}", stderr(&o));
    assert!(o.status.success(), "real build failed");
    eprintln!(
        "build: {:.0} s, timings: {}",
        started.elapsed().as_secs_f64(),
        std::fs::read_to_string(&timings).unwrap()
    );

    let lock = read_lock(&dir.path().join("images.lock.yaml"));
    let entry = &lock["images"]["1.34"];
    let tag = entry["tag"].as_str().unwrap();
    let digest = entry["digest"].as_str().unwrap();
    assert_eq!(
        entry["upstream_commit"],
        "63ec67a04b40fee4ff43fec11c3d31f2a90c9ad2"
    );
    let docker_ref = format!("docker://{repo}:{tag}");
    let raw = skopeo(&["inspect", "--tls-verify=false", "--raw", &docker_ref]);
    assert_eq!(format!("sha256:{}", sha256_hex(raw.as_bytes())), digest);
    let inspect: serde_json::Value =
        serde_json::from_str(&skopeo(&["inspect", "--tls-verify=false", &docker_ref])).unwrap();
    assert_eq!(inspect["Digest"], digest);
    assert_eq!(inspect["Labels"]["org.opencontainers.image.version"], tag);

    let rootfs = pull_and_unpack(&repo, tag, dir.path());
    let out = Command::new(rootfs.join("bin/openstack-cloud-controller-manager"))
        .arg("--version")
        .output()
        .unwrap();
    let version = text(&out);
    eprintln!("binary --version: {version}");
    // The tag's suffix as semver build metadata (docs/building.md, "What build does"), for the
    // revision images.toml gives 1.34 (2 since its Go bump): `v1.34.1-occmforge.2` →
    // `v1.34.1+occmforge.2`.
    assert!(tag.starts_with("v1.34.1-occmforge."), "{tag}");
    let want = tag.replacen('-', "+", 1);
    assert!(
        version.contains(&want),
        "the binary does not report {want}: {version}"
    );

    // The image the pins give, on any machine: the digest of this build as every earlier run
    // recorded it (docs/getting-started.md's example; docs/acceptance.md).
    assert_eq!(
        digest, V1_34_1_STATIC,
        "the pins of v1.34.1 on the static base no longer give the image they gave"
    );

    // A second build from scratch — an empty cache (git objects, Go modules and build cache),
    // another build path, a HOME whose ~/.gitconfig turns on core.autocrlf, CRLF attributes and
    // filters, umask 077, another time zone and locale — gives the same index digest for both
    // platforms.
    let other = tempfile::tempdir().unwrap();
    let cwd = other.path().join("another build path").join("ünïcödé");
    std::fs::create_dir_all(other.path().join("home")).unwrap();
    std::fs::write(
        other.path().join("home/.gitconfig"),
        hostile_gitconfig(&other.path().join("git")),
    )
    .unwrap();
    std::fs::create_dir_all(&cwd).unwrap();
    let o = Command::new("sh")
        .current_dir(&cwd)
        .args([
            "-c",
            "umask 077 && exec \"$0\" \"$@\"",
            env!("CARGO_BIN_EXE_occm-forge"),
        ])
        .args([
            "build", "--k8s", "1.34", "--json", "--base", "static", "--source", &mirror,
        ])
        .args(["--repository", &repo, "--config"])
        .arg(&config)
        .arg("--output")
        .arg(other.path().join("out"))
        .arg("--cache-dir")
        .arg(other.path().join("cache"))
        .env("HOME", other.path().join("home"))
        .env("TZ", "Pacific/Chatham")
        .env("LANG", "tr_TR.UTF-8")
        .env("LC_ALL", "tr_TR.UTF-8")
        .output()
        .unwrap();
    eprintln!("clean rebuild: {}", stderr(&o));
    assert!(o.status.success(), "clean rebuild failed");
    let j: serde_json::Value = serde_json::from_str(&stdout(&o)).unwrap();
    assert_eq!(
        j["digest"].as_str().unwrap(),
        digest,
        "a clean rebuild gave another digest"
    );
    assert_eq!(
        j["manifests"],
        serde_json::to_value(&entry["manifests"]).unwrap()
    );

    // verify passes on the pushed image, and names the tag once someone retags it.
    let verify = || {
        Command::new(env!("CARGO_BIN_EXE_occm-forge"))
            .current_dir(dir.path())
            .arg("--cache-dir")
            .arg(cache.path())
            .args([
                "verify",
                "--k8s",
                "1.34",
                "--insecure-registry",
                &reg.addr,
                "--config",
            ])
            .arg(&config)
            .output()
            .unwrap()
    };
    // The clean rebuild above recorded an unpublished entry; record the pushed one again.
    let o = Command::new(env!("CARGO_BIN_EXE_occm-forge"))
        .current_dir(dir.path())
        .arg("--cache-dir")
        .arg(cache.path())
        .args([
            "build", "--k8s", "1.34", "--push", "--base", "static", "--source", &mirror,
        ])
        .args([
            "--repository",
            &repo,
            "--insecure-registry",
            &reg.addr,
            "--config",
        ])
        .arg(&config)
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", stderr(&o));
    let o = verify();
    assert!(o.status.success(), "verify: {}{}", stdout(&o), stderr(&o));

    // Signed keylessly as pipelines/build.yml's sign job signs it (its own scripts and the real
    // cosign; a CA of the test's own stands in for Fulcio), recorded by identity, checked by
    // verify, carried by copy: the real image's SBOMs and provenance.
    let home = tempfile::tempdir().unwrap();
    let pki = keyless_pki(home.path(), IDENTITY);
    let reference = format!("{repo}@{digest}");
    let job = SignJob::new(
        home.path(),
        pki.path(),
        &dir.path().join("out/attestations").join(tag),
        &format!("{repo}:{tag}@{digest}"),
    );
    let outputs = job.run("The image to sign", &[("BUILD_RESULT", "success")]);
    assert_eq!(outputs["image"], reference);
    let image = [("IMAGE", reference.as_str()), ("IDENTITY", IDENTITY)];
    for step in [
        "Sign ",
        "Attest the SBOMs and the provenance",
        "Verify as users do",
    ] {
        job.run(step, &image);
    }
    let forge = |args: &[&str]| {
        Command::new(env!("CARGO_BIN_EXE_occm-forge"))
            .current_dir(dir.path())
            .arg("--cache-dir")
            .arg(cache.path())
            .args(args)
            .args(["--insecure-registry", &reg.addr, "--config"])
            .arg(&config)
            .output()
            .unwrap()
    };
    let o = forge(&[
        "manifest",
        "record-signatures",
        "--k8s",
        "1.34",
        "--certificate-identity",
        IDENTITY,
        "--certificate-oidc-issuer",
        ISSUER,
    ]);
    assert!(o.status.success(), "record-signatures: {}", text(&o));
    assert!(
        stdout(&o).ends_with("; attested: provenance, sbom linux/amd64, sbom linux/arm64\n"),
        "{}",
        text(&o)
    );
    let o = verify();
    assert!(
        o.status.success(),
        "verify of the signed image: {}",
        text(&o)
    );
    let mirror = reg.repo("mirror/openstack-cloud-controller-manager");
    let o = forge(&["copy", "--k8s", "1.34", "--to", &mirror]);
    assert!(o.status.success(), "copy: {}", text(&o));
    for (command, extra) in [
        ("verify", &[][..]),
        ("verify-attestation", &["--type", "spdxjson"][..]),
        ("verify-attestation", &["--type", "slsaprovenance1"][..]),
    ] {
        let o = cosign_verify_keyless(
            home.path(),
            pki.path(),
            command,
            IDENTITY,
            &format!("{mirror}@{digest}"),
            extra,
        );
        assert!(
            o.status.success(),
            "cosign {command} at the copy: {}",
            text(&o)
        );
    }

    skopeo(&[
        "copy",
        "--quiet",
        "--src-tls-verify=false",
        "--dest-tls-verify=false",
        &format!(
            "docker://{repo}@{}",
            entry["manifests"]["linux/amd64"].as_str().unwrap()
        ),
        &docker_ref,
    ]);
    let o = verify();
    assert_eq!(o.status.code(), Some(10), "{}", stderr(&o));
    eprintln!("verify after retag: {}", stdout(&o));
    assert!(
        stdout(&o).starts_with(&format!("1.34: tag: {repo}:{tag} serves sha256:")),
        "{}",
        stdout(&o)
    );
}

/// Upstream PR #3083 carries the same change as patch 0002: on its tree the fix must be reported
/// as already upstream while the other patches still apply (no Go needed).
#[test]
#[ignore = "needs OCCM_FORGE_UPSTREAM_MIRROR (a cloud-provider-openstack mirror with refs/pull/3083/head); run with -- --ignored"]
fn real_pr_3083_tree_reports_patch_0002_as_already_upstream() {
    use occm_forge_core::pipeline::patches::{self, PatchOutcome};
    use occm_forge_core::pipeline::source;
    let mirror = mirror();
    let dir = tempfile::tempdir().unwrap();
    let clone = dir.path().join("clone");
    run(Command::new("git")
        .args(["clone", "-q", "--shared", "--no-checkout", &mirror])
        .arg(&clone));
    let pr_head =
        run(Command::new("git").args(["-C", &mirror, "rev-parse", "refs/pull/3083/head"]))
            .trim()
            .to_string();
    run(git(&clone).args(["tag", "v1.36.99", &pr_head]));

    let tree = source::checkout(&source::SourceRequest {
        url: clone.to_str().unwrap(),
        tag: "v1.36.99",
        pinned_commit: &pr_head,
        config: "images.toml",
        cache_dir: &dir.path().join("cache"),
        tree_dir: &dir.path().join("tree"),
    })
    .unwrap();
    let root = env!("CARGO_MANIFEST_DIR");
    let names: Vec<String> = std::fs::read_dir(format!("{root}/patches"))
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect::<std::collections::BTreeSet<_>>()
        .into_iter()
        .collect();
    let series =
        patches::load_series(std::path::Path::new(&format!("{root}/patches")), &names).unwrap();
    let applied = patches::apply_series(&tree.path, &series, tree.commit_time).unwrap();
    let outcomes: Vec<(&str, bool)> = applied
        .iter()
        .map(|a| (&a.name[..4], a.outcome == PatchOutcome::AlreadyUpstream))
        .collect();
    assert_eq!(
        outcomes,
        [
            ("0001", false),
            ("0002", true),
            ("0003", false),
            ("0004", false)
        ]
    );
}

/// The real OCCM chart of v1.34.1, rendered by `helm template` with `render --format helm-values`,
/// runs exactly the image of the digest manifest (the chart has no digest field; the digest rides
/// in the tag).
#[test]
#[ignore = "needs OCCM_FORGE_UPSTREAM_MIRROR (a cloud-provider-openstack mirror) and the Go module proxy; run with -- --ignored"]
fn real_chart_renders_the_pinned_image() {
    let mirror = mirror();
    let helm = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join(".tools/bin/helm");
    assert!(
        helm.is_file(),
        "`helm` is not installed in .tools/bin: run scripts/test"
    );
    let dir = tempfile::tempdir().unwrap();
    let archive = Command::new("git")
        .args([
            "-C",
            &mirror,
            "archive",
            "v1.34.1",
            "charts/openstack-cloud-controller-manager",
        ])
        .output()
        .unwrap();
    assert!(archive.status.success());
    let mut tar = Command::new("tar")
        .arg("-x")
        .arg("-C")
        .arg(dir.path())
        .stdin(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    std::io::Write::write_all(tar.stdin.as_mut().unwrap(), &archive.stdout).unwrap();
    assert!(tar.wait().unwrap().success());

    // The chart depends on Bitnami's `common` chart (not reachable here) for one helper,
    // `common.labels.standard`; a stub library chart provides it.
    let common = dir
        .path()
        .join("charts/openstack-cloud-controller-manager/charts/common");
    std::fs::create_dir_all(common.join("templates")).unwrap();
    std::fs::write(
        common.join("Chart.yaml"),
        "apiVersion: v2\nname: common\nversion: 2.14.1\ntype: library\n",
    )
    .unwrap();
    std::fs::write(
        common.join("templates/_labels.tpl"),
        "{{- define \"common.labels.standard\" -}}\napp.kubernetes.io/name: {{ .Chart.Name }}\napp.kubernetes.io/instance: {{ .Release.Name }}\n{{- end -}}\n",
    )
    .unwrap();

    let config = project_config(dir.path());
    let digest = format!("sha256:{}", "ab".repeat(32));
    let repo = "registry.example.internal/occm/openstack-cloud-controller-manager";
    let image = format!("{repo}:v1.34.1-occmforge.1@{digest}");
    std::fs::write(
        dir.path().join("images.lock.yaml"),
        format!(
            "schema_version: 1\nimages:\n  '1.34':\n    image: {image}\n    repository: {repo}\n    tag: v1.34.1-occmforge.1\n    digest: {digest}\n    published: true\n    upstream_tag: v1.34.1\n    upstream_commit: 63ec67a04b40fee4ff43fec11c3d31f2a90c9ad2\n    patch_series_sha256: {h}\n    patches: []\n    platforms: [linux/amd64]\n    manifests: {{linux/amd64: {digest}}}\n    go_version: 1.25.1\n    base_image: static\n    source_date_epoch: 0\n    built_at: '2026-11-29T00:00:00Z'\n",
            h = "0".repeat(64)
        ),
    )
    .unwrap();
    let o = Command::new(env!("CARGO_BIN_EXE_occm-forge"))
        .current_dir(dir.path())
        .args([
            "render",
            "--k8s",
            "1.34",
            "--format",
            "helm-values",
            "--config",
        ])
        .arg(&config)
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", stderr(&o));
    let values = dir.path().join("values.yaml");
    std::fs::write(&values, &o.stdout).unwrap();
    let out = run(Command::new(&helm)
        .args(["template", "occm"])
        .arg(dir.path().join("charts/openstack-cloud-controller-manager"))
        .arg("--values")
        .arg(&values));
    let lines: Vec<&str> = out
        .lines()
        .filter(|l| l.trim_start().starts_with("image:"))
        .collect();
    assert_eq!(lines.len(), 1, "{out}");
    assert_eq!(lines[0].trim(), format!("image: \"{image}\""));
}
