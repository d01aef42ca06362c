//! Base images: the built-in `static` base, or a base pulled from a registry by digest, with every
//! manifest and blob verified against its digest.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use serde_json::{Value, json};

use super::ImageError;
use super::layer::{self, Entry};
use super::spec::{Descriptor, Family, Index, Manifest};
use crate::config::Platform;
use crate::registry::{ImageRef, Registry, sha256_digest, short};

/// The bytes of a base layer.
#[derive(Debug, Clone)]
pub enum LayerData {
    /// A verified blob in occm-forge's blob cache.
    Cached(PathBuf),
    /// Generated in memory (the static base).
    Inline(Vec<u8>),
}

/// One base layer.
#[derive(Debug, Clone)]
pub struct BaseLayer {
    /// Its descriptor as the base manifest lists it (or as generated).
    pub descriptor: Descriptor,
    /// Its diff_id from the base config.
    pub diff_id: String,
    /// Where its bytes are.
    pub data: LayerData,
}

/// The base for one platform.
#[derive(Debug, Clone)]
pub struct PlatformBase {
    /// Media-type family; our layer, config, manifest and index follow it.
    pub family: Family,
    /// The base config, to be extended (kept as JSON so unknown fields survive).
    pub config: Value,
    /// Base layers, bottom first.
    pub layers: Vec<BaseLayer>,
    /// Digest of the base's platform manifest (`org.opencontainers.image.base.digest`); `None` for static.
    pub manifest_digest: Option<String>,
}

/// A base resolved for every requested platform.
#[derive(Debug, Clone)]
pub struct ResolvedBase {
    /// `static`, or the reference as configured (e.g. `registry.k8s.io/build-image/go-runner:v2.4.0-go1.25.1-bookworm.0@sha256:…`).
    pub reference: String,
    /// The base's name without digest (`org.opencontainers.image.base.name`); `None` for static.
    pub name: Option<String>,
    /// The digest the base was pulled by (its top-level manifest or index); `None` for static.
    pub digest: Option<String>,
    /// Per platform.
    pub platforms: BTreeMap<Platform, PlatformBase>,
}

/// Path of the CA bundle in the static base (Go's crypto/x509 reads it on Linux).
pub const CA_BUNDLE: &str = "etc/ssl/certs/ca-certificates.crt";
/// uid/gid of the `nonroot` user in the static base (as in distroless).
pub const NONROOT: u64 = 65532;

/// The built-in static base: one layer with a CA bundle (the Mozilla roots shipped by the
/// `webpki-root-certs` crate), `/etc/passwd` and `/etc/group` with `root` and `nonroot` (65532),
/// `/home/nonroot`, `/root` and `/tmp` (1777); config user `65532`, `PATH` and `WorkingDir /`.
pub fn static_base(platforms: &[Platform], epoch: i64) -> Result<ResolvedBase, ImageError> {
    let layer = layer::build(&static_entries(), epoch)
        .map_err(|e| ImageError::Io(format!("static base layer: {e}")))?;
    let mut out = BTreeMap::new();
    for p in platforms {
        let config = json!({
            "architecture": p.arch,
            "os": p.os,
            "config": {
                "Env": ["PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"],
                "User": NONROOT.to_string(),
                "WorkingDir": "/",
            },
            "rootfs": {"type": "layers", "diff_ids": []},
            "history": [],
        });
        let mut descriptor = Descriptor::of(Family::Oci.layer_gzip(), &layer.blob);
        descriptor.digest = layer.digest.clone();
        out.insert(
            p.clone(),
            PlatformBase {
                family: Family::Oci,
                config,
                layers: vec![BaseLayer {
                    descriptor,
                    diff_id: layer.diff_id.clone(),
                    data: LayerData::Inline(layer.blob.clone()),
                }],
                manifest_digest: None,
            },
        );
    }
    Ok(ResolvedBase {
        reference: crate::config::STATIC_BASE.into(),
        name: None,
        digest: None,
        platforms: out,
    })
}

/// The history entry for the static base layer.
pub const STATIC_HISTORY: &str = "occm-forge static base: CA certificates (webpki-root-certs), /etc/passwd, /etc/group, /home/nonroot, /tmp";

fn static_entries() -> Vec<Entry> {
    let mut bundle = String::new();
    for der in webpki_root_certs::TLS_SERVER_ROOT_CERTS {
        bundle.push_str("-----BEGIN CERTIFICATE-----\n");
        let b64 = base64::Engine::encode(&base64::engine::general_purpose::STANDARD, der.as_ref());
        for chunk in b64.as_bytes().chunks(64) {
            bundle.push_str(std::str::from_utf8(chunk).expect("base64 is ASCII"));
            bundle.push('\n');
        }
        bundle.push_str("-----END CERTIFICATE-----\n");
    }
    let passwd = format!(
        "root:x:0:0:root:/root:/sbin/nologin\nnonroot:x:{NONROOT}:{NONROOT}:nonroot:/home/nonroot:/sbin/nologin\n"
    );
    let group = format!("root:x:0:\nnonroot:x:{NONROOT}:\n");
    let mut home = Entry::dir("home/nonroot", 0o700);
    home.owner = (NONROOT, NONROOT);
    vec![
        Entry::dir("bin", 0o755),
        Entry::dir("etc", 0o755),
        Entry::file("etc/group", 0o644, group.into_bytes()),
        Entry::file("etc/passwd", 0o644, passwd.into_bytes()),
        Entry::dir("etc/ssl", 0o755),
        Entry::dir("etc/ssl/certs", 0o755),
        Entry::file(CA_BUNDLE, 0o644, bundle.into_bytes()),
        Entry::dir("home", 0o755),
        home,
        Entry::dir("root", 0o700),
        Entry::dir("tmp", 0o1777),
    ]
}

/// Pulls `reference` (which must carry a digest unless `allow_unpinned`) for every platform.
///
/// The top-level manifest or index is fetched by digest and its sha256 checked; for an index the
/// platform's manifest is selected (`arm64` matches variant `v8` or none) and fetched by digest;
/// config and layers are fetched by digest, verified, and kept in `<blob_cache>/sha256/<hex>`
/// (a cached blob is re-verified before use). Errors name the base and what did not match.
pub async fn pull_base(
    registry: &dyn Registry,
    reference: &str,
    platforms: &[Platform],
    blob_cache: &Path,
    allow_unpinned: bool,
) -> Result<ResolvedBase, ImageError> {
    let r: ImageRef = reference.parse().map_err(|e: String| ImageError::Base(e))?;
    let base_err = |m: String| ImageError::Base(format!("base {reference}: {m}"));
    let top_ref = match (&r.digest, &r.tag) {
        (Some(d), _) => d.clone(),
        (None, Some(t)) if allow_unpinned => t.clone(),
        _ => {
            return Err(base_err(
                "has no @sha256 digest; pin it in images.toml (or pass --allow-unpinned-base to build from the tag)".into(),
            ));
        }
    };
    let repo = &r.repository;
    let top = registry
        .pull_manifest(repo, &top_ref)
        .await
        .map_err(|e| ImageError::Base(e.to_string()))?;
    let top_digest = sha256_digest(&top);
    if let Some(d) = &r.digest
        && *d != top_digest
    {
        return Err(base_err(format!(
            "manifest digest mismatch: expected {d}, got {top_digest}"
        )));
    }
    let top_json: Value =
        serde_json::from_slice(&top).map_err(|e| base_err(format!("invalid manifest: {e}")))?;
    let media_type = top_json["mediaType"]
        .as_str()
        .unwrap_or_default()
        .to_string();
    // An index (or manifest list) names platform manifests; the base then has one per platform.
    let index: Option<Index> = if matches!(
        media_type.as_str(),
        super::spec::OCI_INDEX | super::spec::DOCKER_LIST
    ) || top_json.get("manifests").is_some()
    {
        Some(serde_json::from_slice(&top).map_err(|e| base_err(format!("invalid index: {e}")))?)
    } else {
        None
    };

    let mut out = BTreeMap::new();
    for p in platforms {
        let (manifest_bytes, manifest_digest) = if let Some(index) = &index {
            let entry = index
                .manifests
                .iter()
                .find(|m| {
                    m.platform.as_ref().is_some_and(|pl| {
                        pl.os == p.os
                            && pl.architecture == p.arch
                            && (pl.variant.as_deref() == p.variant()
                                || (p.variant.is_none() && pl.variant.is_none()))
                    })
                })
                .ok_or_else(|| base_err(format!("has no {p} image")))?;
            let bytes = registry
                .pull_manifest(repo, &entry.digest)
                .await
                .map_err(|e| ImageError::Base(e.to_string()))?;
            let got = sha256_digest(&bytes);
            if got != entry.digest {
                return Err(base_err(format!(
                    "{p} manifest digest mismatch: expected {}, got {got}",
                    entry.digest
                )));
            }
            (bytes, got)
        } else {
            (top.clone(), top_digest.clone())
        };
        let manifest: Manifest = serde_json::from_slice(&manifest_bytes)
            .map_err(|e| base_err(format!("invalid manifest: {e}")))?;
        let family = Family::of(&manifest.media_type)
            .or_else(|| Family::of(&media_type))
            .unwrap_or(
                if manifest.config.media_type == super::spec::DOCKER_CONFIG {
                    Family::Docker
                } else {
                    Family::Oci
                },
            );
        let config_path = fetch_blob(registry, &r, &manifest.config.digest, blob_cache).await?;
        let config_bytes = std::fs::read(&config_path)
            .map_err(|e| ImageError::Io(format!("{}: {e}", config_path.display())))?;
        let config: Value = serde_json::from_slice(&config_bytes)
            .map_err(|e| base_err(format!("invalid config: {e}")))?;
        let (os, arch) = (
            config["os"].as_str().unwrap_or(""),
            config["architecture"].as_str().unwrap_or(""),
        );
        if os != p.os || arch != p.arch {
            return Err(base_err(format!("the image chosen for {p} is {os}/{arch}")));
        }
        let diff_ids: Vec<String> = config["rootfs"]["diff_ids"]
            .as_array()
            .map(|a| {
                a.iter()
                    .filter_map(|v| v.as_str().map(str::to_string))
                    .collect()
            })
            .unwrap_or_default();
        if diff_ids.len() != manifest.layers.len() {
            return Err(base_err(format!(
                "{} layers but {} diff_ids in its config",
                manifest.layers.len(),
                diff_ids.len()
            )));
        }
        let mut layers = Vec::new();
        for (d, diff_id) in manifest.layers.iter().zip(diff_ids) {
            if Family::of_layer(&d.media_type) != Some(family) {
                return Err(base_err(format!(
                    "layer {} has unsupported media type {}",
                    short(&d.digest),
                    d.media_type
                )));
            }
            let path = fetch_blob(registry, &r, &d.digest, blob_cache).await?;
            layers.push(BaseLayer {
                descriptor: d.clone(),
                diff_id,
                data: LayerData::Cached(path),
            });
        }
        out.insert(
            p.clone(),
            PlatformBase {
                family,
                config,
                layers,
                manifest_digest: Some(manifest_digest),
            },
        );
    }
    let name = ImageRef {
        digest: None,
        ..r.clone()
    }
    .to_string();
    Ok(ResolvedBase {
        reference: reference.to_string(),
        name: Some(name),
        digest: Some(top_digest),
        platforms: out,
    })
}

impl Family {
    /// The family of a layer media type (gzip or uncompressed tar).
    pub fn of_layer(media_type: &str) -> Option<Family> {
        match media_type {
            super::spec::OCI_LAYER_GZIP | "application/vnd.oci.image.layer.v1.tar" => {
                Some(Family::Oci)
            }
            super::spec::DOCKER_LAYER_GZIP => Some(Family::Docker),
            _ => None,
        }
    }
}

async fn fetch_blob(
    registry: &dyn Registry,
    r: &ImageRef,
    digest: &str,
    cache: &Path,
) -> Result<PathBuf, ImageError> {
    let hex = digest
        .strip_prefix("sha256:")
        .filter(|_| crate::config::is_sha256_digest(digest))
        .ok_or_else(|| {
            ImageError::Base(format!(
                "base {}: unsupported digest {digest}",
                r.repository
            ))
        })?;
    let path = cache.join("sha256").join(hex);
    if let Ok(bytes) = std::fs::read(&path)
        && sha256_digest(&bytes) == digest
    {
        return Ok(path);
    }
    let bytes = registry
        .pull_blob(&r.repository, digest)
        .await
        .map_err(|e| ImageError::Base(e.to_string()))?;
    let got = sha256_digest(&bytes);
    if got != digest {
        return Err(ImageError::Base(format!(
            "base {}: blob digest mismatch: expected {digest}, got {got}",
            r.repository
        )));
    }
    super::layout::write_file_atomically(&path, &bytes)
        .map_err(|e| ImageError::Io(format!("{}: {e}", path.display())))?;
    Ok(path)
}
