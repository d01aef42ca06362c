//! OCI image-spec and Docker image-manifest v2 structures, serialised deterministically.
//!
//! These are our own small serde types rather than `oci-spec`'s because `oci-spec` keeps
//! annotations in a `HashMap`, whose serialisation order changes from run to run; a manifest
//! digest must not. Field order follows the specs' examples; maps are `BTreeMap`s (sorted keys).
//! Sources: opencontainers/image-spec `descriptor.md`, `manifest.md`, `image-index.md`,
//! `config.md`; distribution/distribution `docs/spec/manifest-v2-2.md`.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

/// OCI image manifest.
pub const OCI_MANIFEST: &str = "application/vnd.oci.image.manifest.v1+json";
/// OCI image index.
pub const OCI_INDEX: &str = "application/vnd.oci.image.index.v1+json";
/// OCI image config.
pub const OCI_CONFIG: &str = "application/vnd.oci.image.config.v1+json";
/// OCI gzip layer.
pub const OCI_LAYER_GZIP: &str = "application/vnd.oci.image.layer.v1.tar+gzip";
/// Docker v2 schema 2 manifest.
pub const DOCKER_MANIFEST: &str = "application/vnd.docker.distribution.manifest.v2+json";
/// Docker manifest list.
pub const DOCKER_LIST: &str = "application/vnd.docker.distribution.manifest.list.v2+json";
/// Docker image config.
pub const DOCKER_CONFIG: &str = "application/vnd.docker.container.image.v1+json";
/// Docker gzip layer.
pub const DOCKER_LAYER_GZIP: &str = "application/vnd.docker.image.rootfs.diff.tar.gzip";

/// Every manifest media type occm-forge reads; sent as `Accept` (docker-registry 2.8 answers 404
/// for an OCI index unless its type is accepted).
pub const MANIFEST_MEDIA_TYPES: &[&str] = &[OCI_INDEX, OCI_MANIFEST, DOCKER_LIST, DOCKER_MANIFEST];

/// Annotation / label keys (image-spec `annotations.md`).
pub mod keys {
    /// URL of the source the image was built from.
    pub const SOURCE: &str = "org.opencontainers.image.source";
    /// Source revision (the upstream commit).
    pub const REVISION: &str = "org.opencontainers.image.revision";
    /// Version of the packaged software (the image tag).
    pub const VERSION: &str = "org.opencontainers.image.version";
    /// RFC 3339 creation time (derived from SOURCE_DATE_EPOCH, never the wall clock).
    pub const CREATED: &str = "org.opencontainers.image.created";
    /// Human-readable title.
    pub const TITLE: &str = "org.opencontainers.image.title";
    /// SPDX licence expression.
    pub const LICENSES: &str = "org.opencontainers.image.licenses";
    /// Fully qualified reference of the base image.
    pub const BASE_NAME: &str = "org.opencontainers.image.base.name";
    /// Digest of the base image manifest.
    pub const BASE_DIGEST: &str = "org.opencontainers.image.base.digest";
    /// Tag of a manifest in an OCI layout's `index.json`.
    pub const REF_NAME: &str = "org.opencontainers.image.ref.name";
}

/// The media-type family of an image; never mixed inside one image (ko follows the base's).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Family {
    /// OCI image-spec media types.
    Oci,
    /// Docker image-manifest v2 schema 2 media types.
    Docker,
}

impl Family {
    /// The family of a manifest or index media type, if it is one.
    pub fn of(media_type: &str) -> Option<Family> {
        match media_type {
            OCI_MANIFEST | OCI_INDEX => Some(Family::Oci),
            DOCKER_MANIFEST | DOCKER_LIST => Some(Family::Docker),
            _ => None,
        }
    }
    /// Image manifest media type.
    pub fn manifest(self) -> &'static str {
        match self {
            Family::Oci => OCI_MANIFEST,
            Family::Docker => DOCKER_MANIFEST,
        }
    }
    /// Index / manifest list media type.
    pub fn index(self) -> &'static str {
        match self {
            Family::Oci => OCI_INDEX,
            Family::Docker => DOCKER_LIST,
        }
    }
    /// Config media type.
    pub fn config(self) -> &'static str {
        match self {
            Family::Oci => OCI_CONFIG,
            Family::Docker => DOCKER_CONFIG,
        }
    }
    /// Gzip layer media type.
    pub fn layer_gzip(self) -> &'static str {
        match self {
            Family::Oci => OCI_LAYER_GZIP,
            Family::Docker => DOCKER_LAYER_GZIP,
        }
    }
    /// Docker schema 2 has no annotations; OCI does.
    pub fn has_annotations(self) -> bool {
        self == Family::Oci
    }
}

/// The `platform` object of an index entry.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct PlatformSpec {
    /// CPU architecture (GOARCH).
    pub architecture: String,
    /// Operating system (GOOS).
    pub os: String,
    /// OS version, Windows only.
    #[serde(
        rename = "os.version",
        default,
        skip_serializing_if = "Option::is_none"
    )]
    pub os_version: Option<String>,
    /// CPU variant, e.g. `v8`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub variant: Option<String>,
}

/// A content descriptor (image-spec `descriptor.md`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Descriptor {
    /// Media type of the referenced content.
    pub media_type: String,
    /// `sha256:<hex>` of the referenced bytes.
    pub digest: String,
    /// Size in bytes.
    pub size: u64,
    /// Platform, in index entries.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub platform: Option<PlatformSpec>,
    /// Artifact type, for artifacts.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub artifact_type: Option<String>,
    /// Annotations.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub annotations: BTreeMap<String, String>,
    /// Foreign-layer URLs.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub urls: Vec<String>,
}

impl Descriptor {
    /// A descriptor of `bytes` with `media_type`.
    pub fn of(media_type: &str, bytes: &[u8]) -> Self {
        Descriptor {
            media_type: media_type.to_string(),
            digest: crate::base::util::sha256_digest(bytes),
            size: bytes.len() as u64,
            platform: None,
            artifact_type: None,
            annotations: BTreeMap::new(),
            urls: Vec::new(),
        }
    }
}

/// An image manifest (OCI `manifest.md` or Docker schema 2).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Manifest {
    /// Always 2.
    pub schema_version: u32,
    /// The manifest's own media type.
    #[serde(default)]
    pub media_type: String,
    /// Artifact type, for artifacts.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub artifact_type: Option<String>,
    /// The config blob.
    pub config: Descriptor,
    /// The layers, base first.
    pub layers: Vec<Descriptor>,
    /// The subject, for referrers.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub subject: Option<Descriptor>,
    /// Annotations (OCI only).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub annotations: BTreeMap<String, String>,
}

/// An image index (OCI `image-index.md`) or Docker manifest list.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Index {
    /// Always 2.
    pub schema_version: u32,
    /// The index's own media type.
    #[serde(default)]
    pub media_type: String,
    /// Artifact type, for artifacts.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub artifact_type: Option<String>,
    /// One entry per platform manifest.
    pub manifests: Vec<Descriptor>,
    /// The subject, for referrers.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub subject: Option<Descriptor>,
    /// Annotations (OCI only).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub annotations: BTreeMap<String, String>,
}

/// Serialises a spec object to the exact bytes that are hashed, written and pushed.
pub fn to_bytes<T: Serialize>(value: &T) -> Vec<u8> {
    serde_json::to_vec(value).expect("spec types always serialise")
}
