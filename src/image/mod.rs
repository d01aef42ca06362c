//! Image stage: assemble the OCI image without a daemon and write it as an OCI image layout.
//!
//! Per platform: the base's layers, plus one layer holding `/bin/openstack-cloud-controller-manager`
//! (mode 0755, root), a config that keeps the base's `Entrypoint`, sets
//! `Cmd ["/bin/openstack-cloud-controller-manager"]` (the Helm chart's `args` begin with that path)
//! and carries the labels; one manifest. On top, always an image index (a Docker manifest list for
//! a Docker-family base), even for one platform, so the recorded digest has one meaning.
//! No wall-clock time enters any byte: every time is the given epoch.

pub mod base;
pub mod layer;
pub mod layout;
pub mod referrer;
pub mod spec;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use serde_json::{Value, json};

use crate::config::Platform;
use base::{LayerData, ResolvedBase};
use spec::{Descriptor, Family, Index, Manifest, PlatformSpec, keys};

/// Where the binary sits in the image (upstream Dockerfile L72).
pub const BINARY_PATH: &str = "/bin/openstack-cloud-controller-manager";

/// Image-stage failures.
#[derive(Debug, thiserror::Error)]
pub enum ImageError {
    /// The base could not be pulled or did not verify.
    #[error("{0}")]
    Base(String),
    /// Reading a binary or writing the layout failed.
    #[error("image layout: {0}")]
    Io(String),
}

/// What to assemble.
#[derive(Debug, Clone)]
pub struct ImageRequest<'a> {
    /// One binary per platform, in the order the index should list them.
    pub binaries: &'a [(Platform, PathBuf)],
    /// The resolved base, covering every platform.
    pub base: &'a ResolvedBase,
    /// Image tag; also the layout's `ref.name`.
    pub tag: &'a str,
    /// Seconds since the epoch used for every time (config `created`, history, tar mtimes).
    pub epoch: i64,
    /// `org.opencontainers.image.source` value.
    pub source: &'a str,
    /// `org.opencontainers.image.revision` value (upstream commit).
    pub revision: &'a str,
    /// The OCI layout directory to write into (created if missing; other refs are kept).
    pub layout_dir: &'a Path,
}

/// One platform's image.
#[derive(Debug, Clone)]
pub struct PlatformImage {
    /// The platform.
    pub platform: Platform,
    /// Descriptor of the manifest (with `platform`), as listed in the index.
    pub manifest: Descriptor,
    /// Descriptor of the config blob.
    pub config: Descriptor,
    /// Layer descriptors, base first.
    pub layers: Vec<Descriptor>,
}

/// The assembled image, all of whose blobs are in the layout.
#[derive(Debug, Clone)]
pub struct BuiltImage {
    /// Image tag.
    pub tag: String,
    /// Descriptor of the top-level index (its digest is the image digest).
    pub index: Descriptor,
    /// Per-platform images, in index order.
    pub platforms: Vec<PlatformImage>,
    /// The layout holding every blob and manifest.
    pub layout_dir: PathBuf,
    /// Media-type family.
    pub family: Family,
    /// The pulled base's repository (`registry/path`), whose layers can be mounted on the same
    /// registry; `None` for the static base.
    pub base_repository: Option<String>,
    /// Digests of the base's layers.
    pub base_layers: std::collections::BTreeSet<String>,
}

impl BuiltImage {
    /// Every config and layer blob, each once, in upload order (layers, then configs).
    pub fn blobs(&self) -> Vec<Descriptor> {
        let mut seen = std::collections::BTreeSet::new();
        let mut out = Vec::new();
        for p in &self.platforms {
            for d in p.layers.iter().chain(std::iter::once(&p.config)) {
                if seen.insert(d.digest.clone()) {
                    out.push(d.clone());
                }
            }
        }
        out
    }
}

/// The labels and annotations every image gets.
fn common_labels(req: &ImageRequest<'_>) -> BTreeMap<String, String> {
    let mut l = BTreeMap::new();
    l.insert(keys::SOURCE.to_string(), req.source.to_string());
    l.insert(keys::REVISION.to_string(), req.revision.to_string());
    l.insert(keys::VERSION.to_string(), req.tag.to_string());
    l.insert(keys::CREATED.to_string(), spec::rfc3339(req.epoch));
    l.insert(
        keys::TITLE.to_string(),
        "openstack-cloud-controller-manager".to_string(),
    );
    l.insert(keys::LICENSES.to_string(), "Apache-2.0".to_string());
    if let Some(n) = &req.base.name {
        l.insert(keys::BASE_NAME.to_string(), n.clone());
    }
    l
}

/// Assembles the image and writes it into the layout; see the module documentation.
///
/// Errors: [`ImageError::Io`] when a binary cannot be read or the layout cannot be written;
/// [`ImageError::Base`] when the base lacks a requested platform or mixes media-type families.
pub fn assemble(req: &ImageRequest<'_>) -> Result<BuiltImage, ImageError> {
    let io = |what: &Path, e: std::io::Error| ImageError::Io(format!("{}: {e}", what.display()));
    let labels = common_labels(req);
    let created = spec::rfc3339(req.epoch);
    let mut family = None;
    let mut platforms = Vec::new();
    // Compressing the binaries is the expensive part: one thread per platform.
    let bin_layers: Vec<Result<layer::Layer, ImageError>> = std::thread::scope(|s| {
        let handles: Vec<_> = req
            .binaries
            .iter()
            .map(|(_, binary)| {
                s.spawn(move || {
                    let data = std::fs::read(binary).map_err(|e| io(binary, e))?;
                    let entry =
                        layer::Entry::file(BINARY_PATH.trim_start_matches('/'), 0o755, data);
                    layer::build(&[entry], req.epoch).map_err(|e| io(binary, e))
                })
            })
            .collect();
        handles
            .into_iter()
            .map(|h| h.join().expect("a layer thread panicked"))
            .collect()
    });
    for ((platform, _), bin) in req.binaries.iter().zip(bin_layers) {
        let base = req.base.platforms.get(platform).ok_or_else(|| {
            ImageError::Base(format!(
                "base {} has no {platform} image",
                req.base.reference
            ))
        })?;
        if *family.get_or_insert(base.family) != base.family {
            return Err(ImageError::Base(format!(
                "base {} mixes OCI and Docker media types across platforms",
                req.base.reference
            )));
        }
        let f = base.family;

        // Base layers into the layout.
        let mut layers = Vec::new();
        let mut diff_ids = Vec::new();
        let mut history_added = Vec::new();
        for l in &base.layers {
            match &l.data {
                LayerData::Cached(p) => {
                    layout::copy_blob(req.layout_dir, &l.descriptor.digest, p)
                        .map_err(|e| io(p, e))?;
                }
                LayerData::Inline(bytes) => {
                    layout::write_blob(req.layout_dir, &l.descriptor.digest, bytes)
                        .map_err(|e| io(req.layout_dir, e))?;
                    history_added
                        .push(json!({"created": created, "created_by": base::STATIC_HISTORY}));
                }
            }
            layers.push(l.descriptor.clone());
            diff_ids.push(l.diff_id.clone());
        }

        // The binary layer.
        let bin = bin?;
        layout::write_blob(req.layout_dir, &bin.digest, &bin.blob)
            .map_err(|e| io(req.layout_dir, e))?;
        let mut bin_desc = Descriptor::of(f.layer_gzip(), &[]);
        bin_desc.digest = bin.digest.clone();
        bin_desc.size = bin.blob.len() as u64;
        layers.push(bin_desc);
        diff_ids.push(bin.diff_id.clone());
        history_added.push(json!({
            "created": created,
            "created_by": format!("occm-forge: COPY openstack-cloud-controller-manager {BINARY_PATH}"),
        }));

        // The config.
        let mut config = base.config.clone();
        let obj = config.as_object_mut().ok_or_else(|| {
            ImageError::Base(format!(
                "base {} config is not an object",
                req.base.reference
            ))
        })?;
        obj.insert("created".into(), json!(created));
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
        exec.insert("Cmd".into(), json!([BINARY_PATH]));
        let mut all_labels: BTreeMap<String, String> = exec
            .get("Labels")
            .and_then(Value::as_object)
            .map(|m| {
                m.iter()
                    .filter_map(|(k, v)| v.as_str().map(|s| (k.clone(), s.to_string())))
                    .collect()
            })
            .unwrap_or_default();
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
        let config_bytes = serde_json::to_vec(&config).expect("JSON values serialise");
        let config_desc = Descriptor::of(f.config(), &config_bytes);
        layout::write_blob(req.layout_dir, &config_desc.digest, &config_bytes)
            .map_err(|e| io(req.layout_dir, e))?;

        // The manifest.
        let mut annotations = BTreeMap::new();
        if f.has_annotations() {
            annotations = labels.clone();
            if let Some(d) = &base.manifest_digest {
                annotations.insert(keys::BASE_DIGEST.to_string(), d.clone());
            }
        }
        let manifest = Manifest {
            schema_version: 2,
            media_type: f.manifest().to_string(),
            artifact_type: None,
            config: config_desc.clone(),
            layers: layers.clone(),
            subject: None,
            annotations,
        };
        let manifest_bytes = spec::to_bytes(&manifest);
        let mut manifest_desc = Descriptor::of(f.manifest(), &manifest_bytes);
        layout::write_blob(req.layout_dir, &manifest_desc.digest, &manifest_bytes)
            .map_err(|e| io(req.layout_dir, e))?;
        manifest_desc.platform = Some(PlatformSpec {
            architecture: platform.arch.clone(),
            os: platform.os.clone(),
            os_version: None,
            variant: platform.variant().map(str::to_string),
        });
        platforms.push(PlatformImage {
            platform: platform.clone(),
            manifest: manifest_desc,
            config: config_desc,
            layers,
        });
    }
    let family = family.ok_or_else(|| ImageError::Base("no platforms to build".into()))?;

    let mut annotations = BTreeMap::new();
    if family.has_annotations() {
        annotations = labels;
        if let Some(d) = &req.base.digest {
            annotations.insert(keys::BASE_DIGEST.to_string(), d.clone());
        }
    }
    let index = Index {
        schema_version: 2,
        media_type: family.index().to_string(),
        artifact_type: None,
        manifests: platforms.iter().map(|p| p.manifest.clone()).collect(),
        subject: None,
        annotations,
    };
    let index_bytes = spec::to_bytes(&index);
    let index_desc = Descriptor::of(family.index(), &index_bytes);
    layout::write_blob(req.layout_dir, &index_desc.digest, &index_bytes)
        .map_err(|e| io(req.layout_dir, e))?;
    layout::set_ref(req.layout_dir, &index_desc, req.tag).map_err(|e| io(req.layout_dir, e))?;
    Ok(BuiltImage {
        tag: req.tag.to_string(),
        index: index_desc,
        platforms,
        layout_dir: req.layout_dir.to_path_buf(),
        family,
        base_repository: req
            .base
            .name
            .as_deref()
            .and_then(|n| n.parse::<crate::registry::ImageRef>().ok())
            .map(|r| r.repository.to_string()),
        base_layers: req
            .base
            .platforms
            .values()
            .flat_map(|p| {
                p.layers
                    .iter()
                    .filter(|l| matches!(l.data, LayerData::Cached(_)))
            })
            .map(|l| l.descriptor.digest.clone())
            .collect(),
    })
}
