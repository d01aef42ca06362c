//! The image: assemble the OCI image without a daemon and write it as an OCI image layout.
//!
//! Per platform: the base's layers, plus one layer holding `/bin/openstack-cloud-controller-manager`
//! (mode 0755, root), a config that keeps the base's `Entrypoint`, sets
//! `Cmd ["/bin/openstack-cloud-controller-manager"]` (the Helm chart's `args` begin with that path)
//! and carries the labels; one manifest. On top, always an image index (a Docker manifest list for
//! a Docker-family base), even for one platform, so the recorded digest has one meaning.
//! No wall-clock time enters any byte: every time is the given epoch.
//!
//! The work is split the way go-containerregistry's `mutate` splits it: [`layer`] makes the binary
//! layer, [`compose`] computes configs, manifests and the index as pure functions of plain data,
//! and [`layout`] writes the result in one step. Nothing here talks to a registry: a pulled base
//! arrives already resolved (`registry::pull`).

pub mod base;
pub mod compose;
pub mod elf;
pub mod layer;
pub mod layout;
pub mod referrer;
pub mod spec;

use std::path::{Path, PathBuf};

use crate::config::Platform;
use base::{LayerData, ResolvedBase};
use spec::{Descriptor, Family};

/// Where the binary sits in the image (upstream Dockerfile L72).
pub const BINARY_PATH: &str = "/bin/openstack-cloud-controller-manager";

/// The program an image runs: where its one binary goes and how the image names and starts it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Program {
    /// Absolute path of the binary in the image.
    pub path: &'static str,
    /// `org.opencontainers.image.title`, and the name in the layer's history entry.
    pub title: &'static str,
    /// Config labels a Dockerfile of the program sets, before ours.
    pub dockerfile_labels: &'static [(&'static str, &'static str)],
    /// How the image starts it: `Cmd [path]` (arguments replace the whole command, as the OCCM
    /// chart's `args` do) or `Entrypoint [path]` (arguments are the program's).
    pub start: Start,
}

/// How an image starts its program ([`Program::start`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Start {
    /// `Cmd [path]`, the base's `Entrypoint` kept.
    Cmd,
    /// `Entrypoint [path]`, no `Cmd`.
    Entrypoint,
}

/// OCCM, as upstream's Dockerfile builds it: `/bin/openstack-cloud-controller-manager` as `Cmd`
/// (the Helm chart's `args` begin with that path) and upstream's labels.
pub const OCCM: Program = Program {
    path: BINARY_PATH,
    title: "openstack-cloud-controller-manager",
    dockerfile_labels: compose::DOCKERFILE_LABELS,
    start: Start::Cmd,
};

/// occm-forge itself (its own image, `self-image`): `/usr/local/bin/occm-forge` as the
/// `Entrypoint`, so a Pod's `args` are its command line.
pub const OCCM_FORGE: Program = Program {
    path: "/usr/local/bin/occm-forge",
    title: "occm-forge",
    dockerfile_labels: &[],
    start: Start::Entrypoint,
};

/// Failures of assembling the image (the image stage, `pipeline::stages::image`).
#[derive(Debug, thiserror::Error)]
pub enum ImageError {
    /// The base could not be pulled or did not verify.
    #[error("{0}")]
    Base(String),
    /// Reading a binary or writing the layout failed.
    #[error("image layout: {0}")]
    Io(String),
    /// A manifest or the index is larger than registries accept ([`compose::MAX_MANIFEST_SIZE`]);
    /// found while composing, before anything is written or pushed.
    #[error(
        "the {what} is {:.1} MiB ({size} bytes), over the 4 MiB ({} bytes) registries accept (distribution's limit, distribution/distribution#4636): registries will refuse it, so nothing was written (fewer base layers or shorter labels make it smaller)",
        *size as f64 / (1024.0 * 1024.0),
        compose::MAX_MANIFEST_SIZE
    )]
    TooLarge {
        /// `linux/amd64 image manifest`, `image index`.
        what: String,
        /// Its size in bytes.
        size: usize,
    },
}

/// What to assemble.
#[derive(Debug, Clone)]
pub struct ImageRequest<'a> {
    /// The program the image runs ([`OCCM`] for the build).
    pub program: &'a Program,
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
    /// occm-forge's cache directory, for the compressed-layer cache ([`layer::build_cached`]);
    /// `None` compresses every time.
    pub layer_cache: Option<&'a Path>,
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

/// Assembles the image and writes it into the layout; see the module documentation.
///
/// Errors: [`ImageError::Io`] when a binary cannot be read or the layout cannot be written;
/// [`ImageError::Base`] when the base lacks a requested platform or mixes media-type families.
pub fn assemble(req: &ImageRequest<'_>) -> Result<BuiltImage, ImageError> {
    // Without a layer cache the layers go to a scratch directory, removed once they are in
    // the layout.
    let scratch = match req.layer_cache {
        Some(_) => None,
        None => Some(
            tempfile::Builder::new()
                .prefix("occm-forge-layers-")
                .tempdir()
                .map_err(|e| ImageError::Io(format!("scratch directory: {e}")))?,
        ),
    };
    let cache = req
        .layer_cache
        .or(scratch.as_ref().map(|d| d.path()))
        .expect("one of them");
    let layers = binary_layers(req.program, req.binaries, req.epoch, cache)?;
    let binaries: Vec<(Platform, layer::FileLayer)> = req
        .binaries
        .iter()
        .map(|(p, _)| p.clone())
        .zip(layers)
        .collect();
    let composed = compose::compose(&compose::Composition {
        program: req.program,
        base: req.base,
        binaries: &binaries,
        tag: req.tag,
        epoch: req.epoch,
        source: req.source,
        revision: req.revision,
    })?;
    layout::write_image(req.layout_dir, &composed, req.tag).map_err(ImageError::Io)?;
    Ok(BuiltImage {
        tag: req.tag.to_string(),
        index: composed.index,
        platforms: composed.platforms,
        layout_dir: req.layout_dir.to_path_buf(),
        family: composed.family,
        base_repository: req.base.repository.clone(),
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

/// The layer holding each binary at the program's path (mode 0755, root, mtime `epoch`), in the
/// order given, streamed through the compressed-layer cache ([`layer::build_cached`]; without
/// one, through a scratch directory that lives as long as `scratch`). Compressing is the
/// expensive part: one thread per binary; memory stays at a few buffers per binary.
fn binary_layers(
    program: &Program,
    binaries: &[(Platform, PathBuf)],
    epoch: i64,
    cache: &Path,
) -> Result<Vec<layer::FileLayer>, ImageError> {
    let io = |what: &Path, e: std::io::Error| ImageError::Io(format!("{}: {e}", what.display()));
    std::thread::scope(|s| {
        let handles: Vec<_> = binaries
            .iter()
            .map(|(_, binary)| {
                s.spawn(move || {
                    let entry = layer::Entry::from_file(
                        program.path.trim_start_matches('/'),
                        0o755,
                        binary,
                    );
                    // A full disk is the cache's (where the layer is written), anything else
                    // most likely the binary's.
                    layer::build_cached(&[entry], epoch, cache).map_err(|e| {
                        if crate::base::disk::is_full(&e) {
                            ImageError::Io(crate::base::disk::write_failed(cache, &e))
                        } else {
                            io(binary, e)
                        }
                    })
                })
            })
            .collect();
        handles
            .into_iter()
            .map(|h| h.join().expect("a layer thread panicked"))
            .collect()
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A base with so many layers that each platform manifest exceeds what registries accept:
    /// refused by the image stage before anything is written, naming the manifest and its size.
    #[test]
    fn a_manifest_over_4_mib_is_refused_before_the_layout_is_written() {
        let dir = tempfile::tempdir().unwrap();
        let platform: Platform = "linux/amd64".parse().unwrap();
        let mut base = base::static_base(std::slice::from_ref(&platform), 0).unwrap();
        let pb = base.platforms.get_mut(&platform).unwrap();
        let template = pb.layers[0].clone();
        pb.layers = (0..30_000u32)
            .map(|i| {
                let mut l = template.clone();
                l.descriptor.digest = format!("sha256:{:064x}", i);
                l.diff_id = format!("sha256:{:064x}", i);
                l.data = LayerData::Cached(PathBuf::from("/nonexistent"));
                l
            })
            .collect();
        let binary = dir.path().join("occm");
        std::fs::write(&binary, b"fake occm").unwrap();
        let layout = dir.path().join("out");
        let e = assemble(&ImageRequest {
            program: &OCCM,
            binaries: &[(platform, binary)],
            base: &base,
            tag: "v1.34.1-occmforge.1",
            epoch: 0,
            source: "https://github.com/kubernetes/cloud-provider-openstack",
            revision: "63ec67a04b40fee4ff43fec11c3d31f2a90c9ad2",
            layout_dir: &layout,
            layer_cache: None,
        })
        .unwrap_err();
        let text = e.to_string();
        assert!(
            text.starts_with("the linux/amd64 image manifest is ")
                && text.contains(" bytes), over the 4 MiB (4194304 bytes) registries accept")
                && text.contains("registries will refuse it"),
            "{text}"
        );
        assert!(!layout.exists(), "the layout was written");
    }
}
