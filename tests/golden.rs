//! Golden tests: the exact bytes occm-forge produces for fixed inputs. They pin image assembly
//! (static base and a synthetic Docker-family base), the SBOM and provenance documents, the
//! digest-manifest file and every minor's resolved images.toml, so that a refactor that changes
//! any output byte fails here first. A change of these values is a change of the image format:
//! update them only on purpose, together with `inputs::IMAGE_FORMAT` (now 4: the SBOM's
//! standard library as syft writes it; the image digests stayed as in format 2).

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use occm_forge_core::config::{self, Minor, Platform};
use occm_forge_core::digest_manifest;
use occm_forge_core::image::base::{self, BaseLayer, LayerData, PlatformBase, ResolvedBase};
use occm_forge_core::image::layer;
use occm_forge_core::image::spec::{Descriptor, Family};
use occm_forge_core::image::{self, ImageRequest};
use occm_forge_core::pipeline::describe;
use occm_forge_core::pipeline::go::build::{BuildInfo, Module};
use occm_forge_core::pipeline::record;
use occm_forge_core::registry::publish::ReferrersPushed;

const EPOCH: i64 = 1_760_539_416;
const TAG: &str = "v1.34.1-occmforge.1";
const SOURCE: &str = "https://github.com/kubernetes/cloud-provider-openstack";
const REVISION: &str = "63ec67a04b40fee4ff43fec11c3d31f2a90c9ad2";
const REPOSITORY: &str = "registry.example.internal/occm/openstack-cloud-controller-manager";

fn sha256(b: &[u8]) -> String {
    use sha2::Digest;
    format!("sha256:{}", hex::encode(sha2::Sha256::digest(b)))
}

fn platforms() -> Vec<Platform> {
    vec![
        "linux/amd64".parse().unwrap(),
        "linux/arm64".parse().unwrap(),
    ]
}

/// Fixed fake binaries, one per platform, written to `dir`.
fn fake_binaries(dir: &Path) -> Vec<(Platform, PathBuf)> {
    platforms()
        .into_iter()
        .map(|p| {
            let path = dir.join(format!("occm-{}", p.arch));
            let mut bytes =
                format!("fake openstack-cloud-controller-manager for {p}\n").into_bytes();
            bytes.extend((0..4096u32).map(|i| (i * 31 % 251) as u8));
            std::fs::write(&path, bytes).unwrap();
            (p, path)
        })
        .collect()
}

/// A Docker-family base with one layer and a config carrying an entrypoint, env and labels.
fn docker_base(dir: &Path) -> ResolvedBase {
    let layer = layer::build(
        &[
            layer::Entry::dir("go-runner-dir", 0o755),
            layer::Entry::file("go-runner", 0o755, b"#!/bin/sh\nexec \"$@\"\n".to_vec()),
        ],
        1_700_000_000,
    )
    .unwrap();
    let blob_path = dir.join("base-layer.tar.gz");
    std::fs::write(&blob_path, &layer.blob).unwrap();
    let mut out = BTreeMap::new();
    for p in platforms() {
        let config = serde_json::json!({
            "architecture": p.arch,
            "os": p.os,
            "config": {
                "Entrypoint": ["/go-runner"],
                "Env": ["PATH=/usr/bin:/bin"],
                "Labels": {"vendor": "synthetic"},
            },
            "rootfs": {"type": "layers", "diff_ids": [layer.diff_id]},
            "history": [{"created": "2023-11-14T22:13:20Z", "created_by": "synthetic base"}],
        });
        let mut descriptor = Descriptor::of(Family::Docker.layer_gzip(), &layer.blob);
        descriptor.digest = layer.digest.clone();
        out.insert(
            p.clone(),
            PlatformBase {
                family: Family::Docker,
                config,
                layers: vec![BaseLayer {
                    descriptor,
                    diff_id: layer.diff_id.clone(),
                    data: LayerData::Cached(blob_path.clone()),
                }],
                manifest_digest: Some(format!(
                    "sha256:{}",
                    if p.arch == "amd64" { "e" } else { "f" }.repeat(64)
                )),
            },
        );
    }
    ResolvedBase {
        reference: format!(
            "registry.example.internal/base/go-runner:v2.4.0@sha256:{}",
            "b".repeat(64)
        ),
        name: Some("registry.example.internal/base/go-runner:v2.4.0".into()),
        repository: Some("registry.example.internal/base/go-runner".into()),
        digest: Some(format!("sha256:{}", "b".repeat(64))),
        platforms: out,
    }
}

/// Assembles an image from the fake binaries on `base`; returns (index digest, platform →
/// manifest digest, the layout's index.json bytes).
fn assemble(base: &ResolvedBase, dir: &Path) -> (String, BTreeMap<String, String>, Vec<u8>) {
    let layout = dir.join("layout");
    let bins = fake_binaries(dir);
    let built = image::assemble(&ImageRequest {
        program: &occm_forge_core::image::OCCM,
        binaries: &bins,
        base,
        tag: TAG,
        epoch: EPOCH,
        source: SOURCE,
        revision: REVISION,
        layout_dir: &layout,
        layer_cache: None,
    })
    .unwrap();
    let manifests = built
        .platforms
        .iter()
        .map(|p| (p.platform.to_string(), p.manifest.digest.clone()))
        .collect();
    (
        built.index.digest,
        manifests,
        std::fs::read(layout.join("index.json")).unwrap(),
    )
}

/// The image's digests as one text: index, platform manifests, and the layout's index.json.
fn digests(index: &str, manifests: &BTreeMap<String, String>, index_json: &[u8]) -> String {
    let mut s = format!("index {index}\n");
    for (p, d) in manifests {
        s.push_str(&format!("manifest {p} {d}\n"));
    }
    s.push_str(&format!("index.json {}\n", sha256(index_json)));
    s
}

#[test]
fn image_on_the_static_base() {
    let dir = tempfile::tempdir().unwrap();
    let base = base::static_base(&platforms(), EPOCH).unwrap();
    let (index, manifests, index_json) = assemble(&base, dir.path());
    assert_eq!(
        digests(&index, &manifests, &index_json),
        concat!(
            "index sha256:83f60cc94ef02a273f1d61216358fa55331c6ba23ab4a582cbaa97905db1d164\n",
            "manifest linux/amd64 sha256:fd62bd98c99df40e2e38bf24eb39f3a4a99717b7f0ab9e3a83f4ef1403fc7cee\n",
            "manifest linux/arm64 sha256:7943e3301e7cb67e90b9a17e0a293b930425cf94e75189ec8e56d5694751597c\n",
            "index.json sha256:41939c8507f7278a89289dc7089142914eb83d0f7fbf6eb1eb4c18dfc490a1d7\n",
        )
    );
}

#[test]
fn image_on_a_docker_family_base() {
    let dir = tempfile::tempdir().unwrap();
    let base = docker_base(dir.path());
    let (index, manifests, index_json) = assemble(&base, dir.path());
    assert_eq!(
        digests(&index, &manifests, &index_json),
        concat!(
            "index sha256:424def9b3d02852b783b03c2762fdd6f1d329124269d59adb500e6da7b8781da\n",
            "manifest linux/amd64 sha256:d9c6c77241fc5c94953df0ff2650454307a7b2003f43d21770345f68e1154e89\n",
            "manifest linux/arm64 sha256:3050ba500485e4ebe1aaddefca02a8740d8eea65c9eed644f21d87b70b99218c\n",
            "index.json sha256:c7a9d469ef83bf28cbac9797567a6ee64712d96d3b998626d60c2427e273f61e\n",
        )
    );
}

fn build_info() -> BuildInfo {
    let m = |path: &str, version: &str, sum: &str| Module {
        path: path.into(),
        version: version.into(),
        sum: sum.into(),
        replace: None,
    };
    BuildInfo {
        go_version: "go1.25.1".into(),
        path: "k8s.io/cloud-provider-openstack/cmd/openstack-cloud-controller-manager".into(),
        main: m("k8s.io/cloud-provider-openstack", "(devel)", ""),
        deps: vec![
            m(
                "github.com/gophercloud/gophercloud/v2",
                "v2.8.0",
                "h1:gopher=",
            ),
            m("k8s.io/client-go", "v0.34.1", "h1:client="),
            Module {
                replace: Some(Box::new(m("k8s.io/api", "v0.34.1", "h1:api="))),
                ..m("k8s.io/api", "v0.0.0", "")
            },
        ],
    }
}

#[test]
fn sbom_bytes() {
    let bi = build_info();
    let manifest = format!("sha256:{}", "a".repeat(64));
    let base_manifest = format!("sha256:{}", "c".repeat(64));
    let mut input = describe::SbomInput {
        repository: REPOSITORY,
        tag: TAG,
        platform: "linux/arm64",
        arch: "arm64",
        manifest_digest: &manifest,
        build_info: &bi,
        upstream_tag: "v1.34.1",
        upstream_commit: REVISION,
        upstream_url: SOURCE,
        base: None,
        epoch: EPOCH,
    };
    let on_static = sha256(&describe::spdx_sbom(&input));
    input.base = Some((
        "registry.k8s.io/build-image/go-runner:v2.4.0",
        &base_manifest,
    ));
    let on_pulled = sha256(&describe::spdx_sbom(&input));
    assert_eq!(
        format!("{on_static} {on_pulled}"),
        "sha256:ba8483bfe53bc853ccb618e413c8614c10b170e965e52f55f1a75872ba1ca916 sha256:b22f5c91a40d578f914bd2ddbf3d87f4cceb63e3159fcdf2219b9d5d88fd6a40"
    );
}

#[test]
fn provenance_bytes() {
    let index = format!("sha256:{}", "d".repeat(64));
    let manifests = BTreeMap::from([
        (
            "linux/amd64".to_string(),
            format!("sha256:{}", "1".repeat(64)),
        ),
        (
            "linux/arm64".to_string(),
            format!("sha256:{}", "2".repeat(64)),
        ),
    ]);
    let patches = [
        describe::PatchRef {
            name: "0001-a.patch",
            sha256: &"3".repeat(64),
        },
        describe::PatchRef {
            name: "0002-b.patch",
            sha256: &"4".repeat(64),
        },
    ];
    let platforms = vec!["linux/amd64".to_string(), "linux/arm64".to_string()];
    let ldflags = occm_forge_core::pipeline::go::build::ldflags(TAG);
    let base_digest = format!("sha256:{}", "5".repeat(64));
    let mut input = describe::ProvenanceInput {
        repository: REPOSITORY,
        tag: TAG,
        index_digest: &index,
        minor: "1.34",
        upstream_url: SOURCE,
        upstream_tag: "v1.34.1",
        upstream_commit: REVISION,
        patches: &patches,
        series_sha256: &"6".repeat(64),
        platforms: &platforms,
        manifests: &manifests,
        go_version: "1.25.1",
        go_env: &occm_forge_core::pipeline::go::platforms_env(&self::platforms()),
        ldflags: &ldflags,
        go_overrides: &BTreeMap::new(),
        base: ("static", None),
        epoch: EPOCH,
    };
    let on_static = sha256(&describe::slsa_provenance(&input));
    let pulled = format!("registry.k8s.io/build-image/go-runner:v2.4.0@{base_digest}");
    input.base = (&pulled, Some(&base_digest));
    let on_pulled = sha256(&describe::slsa_provenance(&input));
    assert_eq!(
        format!("{on_static} {on_pulled}"),
        "sha256:aeb6ae9864fce89feb927cd704cbd3e91d5865472f14ac2064b7f47f7e8a6747 sha256:16cb59a939adb1a58db06f667b30137a8f57dc8367997abd47992f96c3c3bda4"
    );
}

#[test]
fn digest_manifest_bytes() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("images.lock.yaml");
    let h = |c: &str| format!("sha256:{}", c.repeat(64));
    let entry = digest_manifest::Entry {
        image: format!("{REPOSITORY}:{TAG}@{}", h("a")),
        repository: REPOSITORY.into(),
        tag: TAG.into(),
        digest: h("a"),
        published: true,
        upstream_tag: "v1.34.1".into(),
        upstream_commit: REVISION.into(),
        patch_series_sha256: "6".repeat(64),
        patches: vec!["0001-a.patch".into(), "0002-b.patch".into()],
        already_upstream: vec!["0002-b.patch".into()],
        applied_three_way: Default::default(),
        platforms: vec!["linux/amd64".into(), "linux/arm64".into()],
        manifests: BTreeMap::from([
            ("linux/amd64".into(), h("1")),
            ("linux/arm64".into(), h("2")),
        ]),
        sbom: BTreeMap::from([
            ("linux/amd64".into(), h("7")),
            ("linux/arm64".into(), h("8")),
        ]),
        provenance: Some(h("9")),
        go_version: "1.25.1".into(),
        base_image: "static".into(),
        base_digest: None,
        source_date_epoch: EPOCH,
        built_at: "2026-12-01T00:00:00Z".into(),
        inputs: None,
        accepted: false,
        accepted_scenarios: vec![],
        referrers: Some(ReferrersPushed::TagSchema),
        signature: None,
        // Empty mirrors are not written: digest manifests without copies stay byte-identical.
        mirrors: vec![],
    };
    let minor: Minor = "1.34".parse().unwrap();
    record::record(&path, "images.toml", minor, entry.clone()).unwrap();
    let mut other = entry;
    other.base_image = format!("registry.k8s.io/build-image/go-runner:v2.4.0@{}", h("5"));
    other.base_digest = Some(h("5"));
    other.already_upstream = vec![];
    other.published = false;
    other.referrers = None;
    record::record(&path, "images.toml", "1.9".parse().unwrap(), other).unwrap();
    assert_eq!(
        std::fs::read_to_string(&path).unwrap(),
        include_str!("golden/digest-manifest.yaml")
    );
}

/// Every minor of the project's images.toml as the build sees it: upstream tag, commit, Go,
/// base, platforms, revision, the rendered tag, the patch series, the test packages, the
/// required tests (guards included; as a sorted set: their order carries no meaning) and the Go
/// module overrides.
#[test]
fn resolved_project_config() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let cfg = config::load(&root.join("images.toml")).unwrap();
    let mut out = String::new();
    for (minor, m) in &cfg.minors {
        let mut required = cfg.required_tests(m);
        required.sort();
        let tag = config::render_tag(
            &cfg.tag_scheme,
            &config::TagInputs {
                upstream_tag: &m.upstream_tag,
                revision: m.revision,
                minor: *minor,
                series_sha256: &"0".repeat(64),
            },
        );
        out.push_str(&format!(
            "[{minor}] {} {} go{} base={} platforms={} revision={} tag={tag}\n  patches: {}\n  test_packages: {}\n  required: {}\n",
            m.upstream_tag,
            m.commit,
            m.go,
            m.base,
            m.platforms
                .iter()
                .map(ToString::to_string)
                .collect::<Vec<_>>()
                .join(","),
            m.revision,
            m.patches.join(" "),
            m.test_packages.join(" "),
            required.join(" "),
        ));
        if !m.go_overrides.is_empty() {
            let overrides: Vec<String> = m
                .go_overrides
                .iter()
                .map(|(module, v)| format!("{module}@{v}"))
                .collect();
            out.push_str(&format!("  go_overrides: {}\n", overrides.join(" ")));
        }
    }
    assert_eq!(out, include_str!("golden/resolved-config.txt"));
}
