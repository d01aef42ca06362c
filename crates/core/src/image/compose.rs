//! Image composition as pure functions (the go-containerregistry `mutate` idea): from a resolved
//! base and one binary layer per platform to the config, manifest and index bytes, and the list
//! of blobs the layout must hold. Nothing touches disk here; [`super::layout::write_image`] does.
//!
//! Per platform (OCI image-spec `config.md`, `manifest.md`; Docker manifest v2 schema 2): the
//! base's config kept as JSON (unknown fields survive) with `created`, `architecture`, `os`,
//! `variant`, the program's `Cmd` or `Entrypoint`, the labels, `rootfs.diff_ids` and one history entry per added
//! layer; a manifest in the base's media-type family, with the labels as annotations for OCI.
//! On top, an image index (a manifest list for the Docker family) listing every platform.

use std::collections::BTreeMap;
use std::path::PathBuf;

use serde_json::{Value, json};

use super::base::{LayerData, PlatformBase, ResolvedBase, STATIC_HISTORY};
use super::layer::FileLayer;
use super::spec::{self, Descriptor, Family, Index, Manifest, PlatformSpec, keys};
use super::{ImageError, PlatformImage, Program, Start};
use crate::base::util::rfc3339;
use crate::config::Platform;

/// The largest manifest or index registries accept, in bytes: 4 MiB. distribution refuses a
/// larger manifest body (`maxManifestBodySize`, distribution/distribution#4636) and the
/// distribution-spec only asks registries to take "at least 4 megabytes" ("Pushing Manifests").
pub const MAX_MANIFEST_SIZE: usize = 4 << 20;

/// Refuses manifest bytes over [`MAX_MANIFEST_SIZE`]: the one place the rule is applied, for
/// every manifest and index composed here, so that the image stage fails with or without
/// `--push`, before the layout is written.
fn fits(what: impl FnOnce() -> String, bytes: &[u8]) -> Result<(), ImageError> {
    if bytes.len() > MAX_MANIFEST_SIZE {
        return Err(ImageError::TooLarge {
            what: what(),
            size: bytes.len(),
        });
    }
    Ok(())
}

/// What an image is composed from.
#[derive(Debug, Clone)]
pub struct Composition<'a> {
    /// The program the image runs.
    pub program: &'a Program,
    /// The base, covering every platform of `binaries`.
    pub base: &'a ResolvedBase,
    /// One finished binary layer per platform, in index order (in files: never in memory).
    pub binaries: &'a [(Platform, FileLayer)],
    /// Image tag (`org.opencontainers.image.version`).
    pub tag: &'a str,
    /// Seconds since the epoch for every time (config `created`, history, the created label).
    pub epoch: i64,
    /// `org.opencontainers.image.source`.
    pub source: &'a str,
    /// `org.opencontainers.image.revision` (the upstream commit).
    pub revision: &'a str,
}

/// Where a blob's bytes are.
#[derive(Debug, Clone)]
pub enum BlobData {
    /// In memory (our layers, configs, manifests, the index, the static base layer).
    Bytes(Vec<u8>),
    /// A verified file in the blob cache (a pulled base layer).
    File(PathBuf),
}

/// One content-addressed blob of the layout.
#[derive(Debug, Clone)]
pub struct Blob {
    /// `sha256:<hex>` of the bytes.
    pub digest: String,
    /// The bytes.
    pub data: BlobData,
}

/// A composed image: every blob, the per-platform descriptors and the index descriptor.
#[derive(Debug, Clone)]
pub struct Composed {
    /// Every blob (base layers, binary layers, configs, manifests, the index), possibly repeated.
    pub blobs: Vec<Blob>,
    /// Per platform, in index order.
    pub platforms: Vec<PlatformImage>,
    /// The index descriptor (its digest is the image digest).
    pub index: Descriptor,
    /// Media-type family of the whole image.
    pub family: Family,
}

/// The labels (config) and annotations (OCI manifests and index) every image gets
/// (image-spec `annotations.md`).
pub fn labels(c: &Composition<'_>) -> BTreeMap<String, String> {
    let mut l = BTreeMap::new();
    l.insert(keys::SOURCE.to_string(), c.source.to_string());
    l.insert(keys::REVISION.to_string(), c.revision.to_string());
    l.insert(keys::VERSION.to_string(), c.tag.to_string());
    l.insert(keys::CREATED.to_string(), rfc3339(c.epoch));
    l.insert(keys::TITLE.to_string(), c.program.title.to_string());
    l.insert(keys::LICENSES.to_string(), "Apache-2.0".to_string());
    if let Some(n) = &c.base.name {
        l.insert(keys::BASE_NAME.to_string(), n.clone());
    }
    l
}

/// The labels upstream's Dockerfile gives the OCCM image (cloud-provider-openstack `Dockerfile`
/// L74-80, the same from v1.31 to v1.36), with ours where they differ (the description says
/// the binary carries a downstream patch series). Config labels only, as `docker build` sets them.
pub const DOCKERFILE_LABELS: &[(&str, &str)] = &[
    ("name", "openstack-cloud-controller-manager"),
    ("license", "Apache Version 2.0"),
    ("maintainers", "Kubernetes Authors"),
    (
        "description",
        "OpenStack cloud controller manager, built by occm-forge with a downstream patch series",
    ),
    ("distribution-scope", "public"),
    ("summary", "OpenStack cloud controller manager"),
    ("help", "none"),
];

/// Composes the image; see the module documentation.
///
/// Errors: [`ImageError::Base`] when the base lacks a platform, mixes media-type families or has
/// a config that is not a JSON object; [`ImageError::TooLarge`] when a manifest or the index
/// exceeds [`MAX_MANIFEST_SIZE`].
pub fn compose(c: &Composition<'_>) -> Result<Composed, ImageError> {
    let labels = labels(c);
    let mut family = None;
    let mut blobs = Vec::new();
    let mut platforms = Vec::new();
    for (platform, bin) in c.binaries {
        let base = c.base.platforms.get(platform).ok_or_else(|| {
            ImageError::Base(format!("base {} has no {platform} image", c.base.reference))
        })?;
        if *family.get_or_insert(base.family) != base.family {
            return Err(ImageError::Base(format!(
                "base {} mixes OCI and Docker media types across platforms",
                c.base.reference
            )));
        }
        platforms.push(compose_platform(
            c, platform, base, bin, &labels, &mut blobs,
        )?);
    }
    let family = family.ok_or_else(|| ImageError::Base("no platforms to build".into()))?;
    let mut annotations = BTreeMap::new();
    if family.has_annotations() {
        annotations = labels;
        if let Some(d) = &c.base.digest {
            annotations.insert(keys::BASE_DIGEST.to_string(), d.clone());
        }
    }
    let index_bytes = spec::to_bytes(&Index {
        schema_version: 2,
        media_type: family.index().to_string(),
        artifact_type: None,
        manifests: platforms.iter().map(|p| p.manifest.clone()).collect(),
        subject: None,
        annotations,
    });
    fits(|| "image index".to_string(), &index_bytes)?;
    let index = Descriptor::of(family.index(), &index_bytes);
    blobs.push(Blob {
        digest: index.digest.clone(),
        data: BlobData::Bytes(index_bytes),
    });
    Ok(Composed {
        blobs,
        platforms,
        index,
        family,
    })
}

/// One platform: the base layers and the binary layer, the config and the manifest; their blobs
/// are appended to `blobs`.
fn compose_platform(
    c: &Composition<'_>,
    platform: &Platform,
    base: &PlatformBase,
    bin: &FileLayer,
    labels: &BTreeMap<String, String>,
    blobs: &mut Vec<Blob>,
) -> Result<PlatformImage, ImageError> {
    let f = base.family;
    let created = rfc3339(c.epoch);
    let mut layers = Vec::new();
    let mut diff_ids = Vec::new();
    let mut history_added = Vec::new();
    for l in &base.layers {
        let data = match &l.data {
            LayerData::Cached(p) => BlobData::File(p.clone()),
            LayerData::Inline(bytes) => {
                history_added.push(json!({"created": created, "created_by": STATIC_HISTORY}));
                BlobData::Bytes(bytes.clone())
            }
        };
        blobs.push(Blob {
            digest: l.descriptor.digest.clone(),
            data,
        });
        layers.push(l.descriptor.clone());
        diff_ids.push(l.diff_id.clone());
    }
    blobs.push(Blob {
        digest: bin.digest.clone(),
        data: BlobData::File(bin.path.clone()),
    });
    let mut bin_desc = Descriptor::of(f.layer_gzip(), &[]);
    bin_desc.digest = bin.digest.clone();
    bin_desc.size = bin.size;
    layers.push(bin_desc);
    diff_ids.push(bin.diff_id.clone());
    history_added.push(json!({
        "created": created,
        "created_by": format!("occm-forge: COPY {} {}", c.program.title, c.program.path),
    }));

    let config_bytes = config(c, platform, base, labels, &diff_ids, history_added)?;
    let config_desc = Descriptor::of(f.config(), &config_bytes);
    blobs.push(Blob {
        digest: config_desc.digest.clone(),
        data: BlobData::Bytes(config_bytes),
    });

    let mut annotations = BTreeMap::new();
    if f.has_annotations() {
        annotations = labels.clone();
        if let Some(d) = &base.manifest_digest {
            annotations.insert(keys::BASE_DIGEST.to_string(), d.clone());
        }
    }
    let manifest_bytes = spec::to_bytes(&Manifest {
        schema_version: 2,
        media_type: f.manifest().to_string(),
        artifact_type: None,
        config: config_desc.clone(),
        layers: layers.clone(),
        subject: None,
        annotations,
    });
    fits(|| format!("{platform} image manifest"), &manifest_bytes)?;
    let mut manifest_desc = Descriptor::of(f.manifest(), &manifest_bytes);
    blobs.push(Blob {
        digest: manifest_desc.digest.clone(),
        data: BlobData::Bytes(manifest_bytes),
    });
    manifest_desc.platform = Some(PlatformSpec {
        architecture: platform.arch.clone(),
        os: platform.os.clone(),
        os_version: None,
        variant: platform.variant().map(str::to_string),
    });
    Ok(PlatformImage {
        platform: platform.clone(),
        manifest: manifest_desc,
        config: config_desc,
        layers,
    })
}

/// The platform's config bytes: the base config with our fields set (see the module docs).
fn config(
    c: &Composition<'_>,
    platform: &Platform,
    base: &PlatformBase,
    labels: &BTreeMap<String, String>,
    diff_ids: &[String],
    history_added: Vec<Value>,
) -> Result<Vec<u8>, ImageError> {
    let mut config = base.config.clone();
    let obj = config.as_object_mut().ok_or_else(|| {
        ImageError::Base(format!("base {} config is not an object", c.base.reference))
    })?;
    obj.insert("created".into(), json!(rfc3339(c.epoch)));
    obj.insert("architecture".into(), json!(platform.arch));
    obj.insert("os".into(), json!(platform.os));
    match platform.variant() {
        Some(v) => obj.insert("variant".into(), json!(v)),
        None => obj.remove("variant"),
    };
    let exec = obj.entry("config").or_insert_with(|| json!({}));
    if exec.is_null() {
        *exec = json!({});
    }
    let exec = exec
        .as_object_mut()
        .ok_or_else(|| ImageError::Base("base config.config is not an object".into()))?;
    match c.program.start {
        Start::Cmd => {
            exec.insert("Cmd".into(), json!([c.program.path]));
        }
        Start::Entrypoint => {
            exec.insert("Entrypoint".into(), json!([c.program.path]));
            exec.remove("Cmd");
        }
    }
    let mut all_labels: BTreeMap<String, String> = exec
        .get("Labels")
        .and_then(Value::as_object)
        .map(|m| {
            m.iter()
                .filter_map(|(k, v)| v.as_str().map(|s| (k.clone(), s.to_string())))
                .collect()
        })
        .unwrap_or_default();
    all_labels.extend(
        c.program
            .dockerfile_labels
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string())),
    );
    all_labels.extend(labels.clone());
    if let Some(d) = &base.manifest_digest {
        all_labels.insert(keys::BASE_DIGEST.to_string(), d.clone());
    }
    exec.insert("Labels".into(), json!(all_labels));
    obj.insert(
        "rootfs".into(),
        json!({"type": "layers", "diff_ids": diff_ids}),
    );
    let mut history = obj
        .get("history")
        .and_then(Value::as_array)
        .cloned()
        .unwrap_or_default();
    history.extend(history_added);
    obj.insert("history".into(), Value::Array(history));
    Ok(serde_json::to_vec(&config).expect("JSON values serialise"))
}
