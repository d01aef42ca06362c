//! Base images pulled from a registry by digest: the top-level manifest or image index, the
//! platform manifests, the configs and the layers, each verified against its digest (OCI
//! image-spec `descriptor.md`, "Verification"); blobs are kept in occm-forge's blob cache
//! `<cache>/blobs/sha256/<hex>` and re-verified before reuse.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use serde_json::Value;

use super::{Registry, RegistryError};
use crate::base::reference::ImageRef;
use crate::base::util::{is_sha256_digest, sha256_digest, short, write_file_atomically};
use crate::config::Platform;
use crate::image::base::{BaseLayer, LayerData, PlatformBase, ResolvedBase};
use crate::image::spec::{self, Family, Index, Manifest};

/// A base that could not be pulled.
#[derive(Debug, thiserror::Error)]
pub enum PullError {
    /// The registry could not be asked or refused (unreachable, unauthorised, not found).
    #[error("{0}")]
    Registry(#[from] RegistryError),
    /// The base is not what its reference promises: a digest mismatch, a missing platform,
    /// invalid JSON, a layer type occm-forge cannot stack on.
    #[error("base {subject}: {message}")]
    Invalid {
        /// The base reference (or repository, for a blob).
        subject: String,
        /// What did not match, in one line.
        message: String,
    },
    /// The blob cache could not be read or written.
    #[error("image layout: {path}: {message}")]
    Cache {
        /// The cache file.
        path: PathBuf,
        /// The I/O error.
        message: String,
    },
}

/// The top-level manifest or index of `base`, fetched by digest — by tag only when
/// `allow_unpinned` and the reference has no digest — and checked against the digest; with its
/// digest, its media type and, for an index (or Docker manifest list), the index.
async fn top_of(
    registry: &dyn Registry,
    base: &ImageRef,
    text: &str,
    allow_unpinned: bool,
) -> Result<(bytes::Bytes, String, String, Option<Index>), PullError> {
    let invalid = |message: String| PullError::Invalid {
        subject: text.to_string(),
        message,
    };
    let top_ref = match (&base.digest, &base.tag) {
        (Some(d), _) => d.clone(),
        (None, Some(t)) if allow_unpinned => t.clone(),
        _ => {
            return Err(invalid(
                "has no @sha256 digest; pin it by digest with `occm-forge pin` (or pass --allow-unpinned-base to build from the tag)".into(),
            ));
        }
    };
    let top = registry.pull_manifest(&base.repository, &top_ref).await?;
    let top_digest = sha256_digest(&top);
    if let Some(d) = &base.digest
        && *d != top_digest
    {
        return Err(invalid(format!(
            "manifest digest mismatch: expected {d}, got {top_digest}"
        )));
    }
    let top_json: Value =
        serde_json::from_slice(&top).map_err(|e| invalid(format!("invalid manifest: {e}")))?;
    let top_type = top_json["mediaType"]
        .as_str()
        .unwrap_or_default()
        .to_string();
    // An index (or manifest list) names platform manifests; the base then has one per platform.
    let index: Option<Index> = if is_index(&top_type, &top_json) {
        Some(serde_json::from_slice(&top).map_err(|e| invalid(format!("invalid index: {e}")))?)
    } else {
        None
    };
    Ok((top, top_digest, top_type, index))
}

/// Whether a manifest of media type `media_type` (its JSON `json`) is an image index or a Docker
/// manifest list.
fn is_index(media_type: &str, json: &Value) -> bool {
    matches!(media_type, spec::OCI_INDEX | spec::DOCKER_LIST) || json.get("manifests").is_some()
}

/// Checks, in seconds and before any build work, that `base` gives an image for each of
/// `platforms`: the top-level manifest or index (fetched as [`pull_base`] fetches it), and for
/// each platform its manifest, found through nested indexes as [`pull_base`] finds it, read as
/// an image manifest, and its config (a few KiB), whose `os` and `architecture` must be the
/// platform's (a single-platform base asked for two platforms fails here, not after the Go
/// build). Layers are not fetched.
///
/// Errors: as [`pull_base`]'s.
pub async fn check_base(
    registry: &dyn Registry,
    base: &ImageRef,
    text: &str,
    platforms: &[Platform],
    allow_unpinned: bool,
) -> Result<(), PullError> {
    let (top, _, _, index) = top_of(registry, base, text, allow_unpinned).await?;
    for p in platforms {
        let bytes = match &index {
            Some(index) => platform_manifest(registry, base, text, index, p).await?.0,
            None => top.to_vec(),
        };
        let invalid = |message: String| PullError::Invalid {
            subject: text.to_string(),
            message,
        };
        let manifest: Manifest = serde_json::from_slice(&bytes)
            .map_err(|e| invalid(format!("the {p} entry is not an image manifest: {e}")))?;
        let config = registry
            .pull_blob(&base.repository, &manifest.config.digest)
            .await?;
        let config: Value =
            serde_json::from_slice(&config).map_err(|e| invalid(format!("invalid config: {e}")))?;
        let (os, arch) = (
            config["os"].as_str().unwrap_or(""),
            config["architecture"].as_str().unwrap_or(""),
        );
        if os != p.os || arch != p.arch {
            return Err(invalid(format!("the image chosen for {p} is {os}/{arch}")));
        }
    }
    Ok(())
}

/// Pulls `base` (`text` is the reference as configured, for messages) for every platform.
///
/// The top-level manifest or index is fetched by digest — by tag only when `allow_unpinned` and
/// the reference has no digest — and its sha256 checked; for an index each platform's manifest is
/// selected ([`Platform::matches`]) and fetched by digest, through nested indexes (a platform
/// entry that is itself an index, as buildx writes with attestations: image-spec
/// `image-index.md`, implementations SHOULD support a nested index); configs and layers are
/// fetched by digest, verified and cached under `blob_cache`.
///
/// Errors: [`PullError::Registry`] when the registry fails, [`PullError::Invalid`] naming the base
/// and what did not match, [`PullError::Cache`] for local I/O.
pub async fn pull_base(
    registry: &dyn Registry,
    base: &ImageRef,
    text: &str,
    platforms: &[Platform],
    blob_cache: &Path,
    allow_unpinned: bool,
) -> Result<ResolvedBase, PullError> {
    let (top, top_digest, top_type, index) = top_of(registry, base, text, allow_unpinned).await?;
    let mut out = BTreeMap::new();
    for p in platforms {
        let (bytes, digest) = match &index {
            Some(index) => platform_manifest(registry, base, text, index, p).await?,
            None => (top.to_vec(), top_digest.clone()),
        };
        let platform_base = pull_platform(
            registry, base, text, p, &bytes, digest, &top_type, blob_cache,
        )
        .await?;
        out.insert(p.clone(), platform_base);
    }
    Ok(ResolvedBase {
        reference: text.to_string(),
        name: Some(
            ImageRef {
                digest: None,
                ..base.clone()
            }
            .to_string(),
        ),
        repository: Some(base.repository.to_string()),
        digest: Some(top_digest),
        platforms: out,
    })
}

/// How many indexes deep a platform's manifest is looked for (drydock follows three,
/// CodesWhat/drydock#816).
const MAX_NESTING: usize = 3;

/// Selects `p`'s manifest in `index`, fetches it by digest and verifies it; where the entry is
/// itself an index (buildx with attestations: a platform's index holding its image manifest and
/// an attestation manifest whose platform is `unknown/unknown`), selects `p` in that one too, up
/// to [`MAX_NESTING`] deep.
async fn platform_manifest(
    registry: &dyn Registry,
    base: &ImageRef,
    text: &str,
    index: &Index,
    p: &Platform,
) -> Result<(Vec<u8>, String), PullError> {
    let invalid = |message: String| PullError::Invalid {
        subject: text.to_string(),
        message,
    };
    let mut index = index.clone();
    let mut path: Vec<String> = Vec::new();
    loop {
        let entry = index
            .manifests
            .iter()
            .find(|m| {
                m.platform
                    .as_ref()
                    .is_some_and(|pl| p.matches(&pl.os, &pl.architecture, pl.variant.as_deref()))
            })
            .ok_or_else(|| match path.last() {
                None => invalid(format!("has no {p} image")),
                Some(inner) => invalid(format!(
                    "has no {p} image in the nested index {inner} its {p} entry names"
                )),
            })?
            .clone();
        let bytes = registry
            .pull_manifest(&base.repository, &entry.digest)
            .await?;
        let got = sha256_digest(&bytes);
        if got != entry.digest {
            return Err(invalid(format!(
                "{p} manifest digest mismatch: expected {}, got {got}",
                entry.digest
            )));
        }
        let json: Value = serde_json::from_slice(&bytes)
            .map_err(|e| invalid(format!("invalid {p} manifest {}: {e}", short(&got))))?;
        let media_type = json["mediaType"]
            .as_str()
            .unwrap_or(entry.media_type.as_str())
            .to_string();
        if !is_index(&media_type, &json) {
            if !path.is_empty() {
                tracing::debug!(
                    "base {text}: {p} through the nested index {}",
                    path.join(" → ")
                );
            }
            return Ok((bytes.to_vec(), got));
        }
        path.push(short(&got).to_string());
        if path.len() > MAX_NESTING {
            return Err(invalid(format!(
                "its {p} entry is an image index nested more than {MAX_NESTING} deep ({})",
                path.join(" → ")
            )));
        }
        index = serde_json::from_slice(&bytes)
            .map_err(|e| invalid(format!("invalid nested index {}: {e}", short(&got))))?;
    }
}

/// One platform's base from its manifest bytes: config and layers fetched, verified, cached.
#[allow(clippy::too_many_arguments)]
async fn pull_platform(
    registry: &dyn Registry,
    base: &ImageRef,
    text: &str,
    p: &Platform,
    manifest_bytes: &[u8],
    manifest_digest: String,
    top_type: &str,
    blob_cache: &Path,
) -> Result<PlatformBase, PullError> {
    let invalid = |message: String| PullError::Invalid {
        subject: text.to_string(),
        message,
    };
    let manifest: Manifest = serde_json::from_slice(manifest_bytes)
        .map_err(|e| invalid(format!("invalid manifest: {e}")))?;
    let family = Family::of(&manifest.media_type)
        .or_else(|| Family::of(top_type))
        .unwrap_or(if manifest.config.media_type == spec::DOCKER_CONFIG {
            Family::Docker
        } else {
            Family::Oci
        });
    let config_path = fetch_blob(registry, base, &manifest.config.digest, blob_cache).await?;
    let config_bytes = std::fs::read(&config_path).map_err(|e| PullError::Cache {
        path: config_path.clone(),
        message: e.to_string(),
    })?;
    let config: Value = serde_json::from_slice(&config_bytes)
        .map_err(|e| invalid(format!("invalid config: {e}")))?;
    let (os, arch) = (
        config["os"].as_str().unwrap_or(""),
        config["architecture"].as_str().unwrap_or(""),
    );
    if os != p.os || arch != p.arch {
        return Err(invalid(format!("the image chosen for {p} is {os}/{arch}")));
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
        return Err(invalid(format!(
            "{} layers but {} diff_ids in its config",
            manifest.layers.len(),
            diff_ids.len()
        )));
    }
    let mut layers = Vec::new();
    for (d, diff_id) in manifest.layers.iter().zip(diff_ids) {
        if Family::of_layer(&d.media_type) != Some(family) {
            return Err(invalid(format!(
                "layer {} has unsupported media type {}",
                short(&d.digest),
                d.media_type
            )));
        }
        let path = fetch_blob(registry, base, &d.digest, blob_cache).await?;
        layers.push(BaseLayer {
            descriptor: d.clone(),
            diff_id,
            data: LayerData::Cached(path),
        });
    }
    Ok(PlatformBase {
        family,
        config,
        layers,
        manifest_digest: Some(manifest_digest),
    })
}

/// The blob `digest` of `base`'s repository in the cache, fetched and verified when absent or
/// corrupt.
async fn fetch_blob(
    registry: &dyn Registry,
    base: &ImageRef,
    digest: &str,
    cache: &Path,
) -> Result<PathBuf, PullError> {
    let invalid = |message: String| PullError::Invalid {
        subject: base.repository.to_string(),
        message,
    };
    let hex = digest
        .strip_prefix("sha256:")
        .filter(|_| is_sha256_digest(digest))
        .ok_or_else(|| invalid(format!("unsupported digest {digest}")))?;
    let path = cache.join("sha256").join(hex);
    if let Ok(bytes) = std::fs::read(&path)
        && sha256_digest(&bytes) == digest
    {
        return Ok(path);
    }
    let bytes = registry.pull_blob(&base.repository, digest).await?;
    let got = sha256_digest(&bytes);
    if got != digest {
        return Err(invalid(format!(
            "blob digest mismatch: expected {digest}, got {got}"
        )));
    }
    write_file_atomically(&path, &bytes).map_err(|e| PullError::Cache {
        path: path.clone(),
        message: e.to_string(),
    })?;
    Ok(path)
}
