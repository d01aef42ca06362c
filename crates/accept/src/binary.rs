//! The two OCCM binaries an acceptance run compares: ours, taken out of the built OCI layout
//! (the host platform's layer, as pushed), and the control, upstream's unpatched tree of the
//! same tag built with the same toolchain and flags (cached like any build).

use std::io::Read;
use std::path::{Path, PathBuf};

use serde::Serialize;

use occm_forge_core::config::Platform;
use occm_forge_core::image::elf::check_elf;
use occm_forge_core::image::layout;
use occm_forge_core::image::spec::{Descriptor, Index, Manifest, keys};
use occm_forge_core::pipeline::acceptance::AcceptError;
use occm_forge_core::pipeline::go::Toolchain;

/// The platform of this machine ([`occm_forge_core::image::elf::host_platform`]).
///
/// Errors: [`AcceptError::Input`] (part `host`) on an OS or architecture no OCCM image is built
/// for.
pub fn host_platform() -> Result<Platform, AcceptError> {
    occm_forge_core::image::elf::host_platform().map_err(|message| AcceptError::Input {
        part: "host".into(),
        message,
    })
}

/// Path of the binary inside the image's layer (upstream Dockerfile L72).
pub const LAYER_PATH: &str = "bin/openstack-cloud-controller-manager";

/// Where ours came from.
#[derive(Debug, Clone, Serialize, serde::Deserialize)]
pub struct Extracted {
    /// The binary written.
    pub path: PathBuf,
    /// Digest of the image index tagged with the tag in the layout.
    pub index_digest: String,
    /// Digest of the host platform's manifest.
    pub manifest_digest: String,
    /// Digest of the layer holding the binary.
    pub layer_digest: String,
}

fn input(part: impl Into<String>, message: impl Into<String>) -> AcceptError {
    AcceptError::Input {
        part: part.into(),
        message: message.into(),
    }
}

/// The layout at `layout_dir` does not hold what it must ([`AcceptError::Layout`]).
fn bad_layout(layout_dir: &Path, message: impl Into<String>) -> AcceptError {
    AcceptError::Layout {
        layout: layout_dir.to_path_buf(),
        message: message.into(),
    }
}

/// Reads a blob and checks it against its digest.
fn verified_blob(layout_dir: &Path, digest: &str) -> Result<Vec<u8>, AcceptError> {
    let bytes = layout::read_blob(layout_dir, digest)
        .map_err(|e| bad_layout(layout_dir, format!("blob {digest}: {e}")))?;
    if occm_forge_core::base::util::sha256_digest(&bytes) != digest {
        return Err(bad_layout(
            layout_dir,
            format!("blob {digest} does not match its digest"),
        ));
    }
    Ok(bytes)
}

/// Takes `bin/openstack-cloud-controller-manager` for `platform` out of the image tagged `tag`
/// in the OCI layout `layout_dir` (index.json → image index → the platform's manifest → the
/// last layer holding the file; every blob checked against its digest) and writes it to `dest`
/// (mode 0755), then checks that it is an ELF executable for `platform`.
///
/// Errors: [`AcceptError::Layout`] naming the layout: no `index.json`, no entry tagged `tag`
/// (listing the tags it has), a blob missing, unreadable or not matching its digest;
/// [`AcceptError::Input`] naming the image: no manifest for `platform` (listing those it has),
/// the binary in no layer or not an ELF executable for this host.
pub fn extract_from_layout(
    layout_dir: &Path,
    tag: &str,
    platform: &Platform,
    dest: &Path,
) -> Result<Extracted, AcceptError> {
    let entry = tagged_entry(layout_dir, tag)?;
    let index: Index = serde_json::from_slice(&verified_blob(layout_dir, &entry.digest)?)
        .map_err(|e| bad_layout(layout_dir, format!("image index {}: {e}", entry.digest)))?;
    let md = platform_entry(&index, tag, platform)?;
    let manifest: Manifest = serde_json::from_slice(&verified_blob(layout_dir, &md.digest)?)
        .map_err(|e| bad_layout(layout_dir, format!("manifest {}: {e}", md.digest)))?;
    for layer in manifest.layers.iter().rev() {
        if !binary_in_layer(layout_dir, layer, dest)? {
            continue;
        }
        elf_of(dest, platform).map_err(|e| {
            let _ = std::fs::remove_file(dest);
            match e {
                ElfCheck::Io(e) => AcceptError::Io(format!("{}: {e}", dest.display())),
                ElfCheck::Not(why) => input(
                    format!("image {tag}"),
                    format!("{LAYER_PATH} in layer {}: {why}", layer.digest),
                ),
            }
        })?;
        return Ok(Extracted {
            path: dest.to_path_buf(),
            index_digest: entry.digest.clone(),
            manifest_digest: md.digest.clone(),
            layer_digest: layer.digest.clone(),
        });
    }
    Err(input(
        format!("image {tag}"),
        format!(
            "no layer of its {platform} manifest {} holds {LAYER_PATH}",
            md.digest
        ),
    ))
}

/// The entry of the layout's `index.json` whose `org.opencontainers.image.ref.name` is `tag`.
///
/// Errors: [`AcceptError::Layout`]: `index.json` unreadable or not an image index, or no entry
/// tagged `tag` (listing the tags it has).
fn tagged_entry(layout_dir: &Path, tag: &str) -> Result<Descriptor, AcceptError> {
    let index_json = layout_dir.join("index.json");
    let bytes = match std::fs::read(&index_json) {
        Ok(b) => b,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            return Err(bad_layout(
                layout_dir,
                "no OCI layout there (no index.json)",
            ));
        }
        Err(e) => {
            return Err(bad_layout(
                layout_dir,
                format!("{}: {e}", index_json.display()),
            ));
        }
    };
    let top: Index = serde_json::from_slice(&bytes)
        .map_err(|e| bad_layout(layout_dir, format!("index.json: {e}")))?;
    let Some(entry) = top
        .manifests
        .iter()
        .find(|d| d.annotations.get(keys::REF_NAME).map(String::as_str) == Some(tag))
    else {
        let tags: Vec<&str> = top
            .manifests
            .iter()
            .filter_map(|d| d.annotations.get(keys::REF_NAME).map(String::as_str))
            .collect();
        return Err(bad_layout(
            layout_dir,
            format!(
                "no image tagged {tag} (it has: {})",
                if tags.is_empty() {
                    "none".to_string()
                } else {
                    tags.join(", ")
                },
            ),
        ));
    };
    Ok(entry.clone())
}

/// The entry of the image index `index` (tagged `tag`) for `platform` (OS and architecture).
///
/// Errors: [`AcceptError::Input`] naming the image: it has no manifest for `platform`
/// (listing the platforms it has).
fn platform_entry<'a>(
    index: &'a Index,
    tag: &str,
    platform: &Platform,
) -> Result<&'a Descriptor, AcceptError> {
    let wanted = |d: &&Descriptor| {
        d.platform
            .as_ref()
            .is_some_and(|p| p.os == platform.os && p.architecture == platform.arch)
    };
    let Some(md) = index.manifests.iter().find(wanted) else {
        let have: Vec<String> = index
            .manifests
            .iter()
            .filter_map(|d| d.platform.as_ref())
            .map(|p| format!("{}/{}", p.os, p.architecture))
            .collect();
        return Err(input(
            format!("image {tag}"),
            format!(
                "has no {platform} manifest, so no binary for this host (it has: {})",
                have.join(", ")
            ),
        ));
    };
    Ok(md)
}

/// Writes the first [`LAYER_PATH`] entry of `layer` (a tar, gzip-compressed when its media type
/// ends in `gzip`) to `dest` (mode 0755), streamed: the blob is checked against its digest as it
/// is read, then decompressed into the file, never held in memory whole. `false` when the layer
/// does not hold that file.
///
/// Errors: [`AcceptError::Layout`] naming the layer: the blob is missing or does not match its
/// digest, or the tar cannot be read; [`AcceptError::Io`] for `dest`.
fn binary_in_layer(
    layout_dir: &Path,
    layer: &Descriptor,
    dest: &Path,
) -> Result<bool, AcceptError> {
    let bad = |e: String| bad_layout(layout_dir, format!("layer {}: {e}", layer.digest));
    let path = layout::blob_path(layout_dir, &layer.digest).map_err(|e| bad(e.to_string()))?;
    let open = || {
        std::fs::File::open(&path)
            .map(std::io::BufReader::new)
            .map_err(|e| bad_layout(layout_dir, format!("blob {}: {e}", layer.digest)))
    };
    if occm_forge_core::base::util::sha256_of_reader(open()?).map_err(|e| bad(e.to_string()))?
        != layer.digest
    {
        return Err(bad_layout(
            layout_dir,
            format!("blob {} does not match its digest", layer.digest),
        ));
    }
    let reader: Box<dyn Read> = if layer.media_type.ends_with("gzip") {
        Box::new(flate2::read::GzDecoder::new(open()?))
    } else {
        Box::new(open()?)
    };
    let mut archive = tar::Archive::new(reader);
    let entries = archive.entries().map_err(|e| bad(e.to_string()))?;
    for e in entries {
        let mut e = e.map_err(|e| bad(e.to_string()))?;
        let name = e
            .path()
            .map(|p| {
                p.to_string_lossy()
                    .trim_start_matches("./")
                    .trim_start_matches('/')
                    .to_string()
            })
            .unwrap_or_default();
        if name != LAYER_PATH {
            continue;
        }
        write_executable(dest, &mut e)?;
        return Ok(true);
    }
    Ok(false)
}

/// Writes what `data` reads to `dest` (mode 0755), through a temporary file renamed last.
fn write_executable(dest: &Path, data: &mut dyn Read) -> Result<(), AcceptError> {
    use std::os::unix::fs::PermissionsExt;
    let io = |e: std::io::Error| AcceptError::Io(format!("{}: {e}", dest.display()));
    let dir = dest.parent().unwrap_or(Path::new("."));
    std::fs::create_dir_all(dir).map_err(io)?;
    let mut tmp = tempfile::NamedTempFile::new_in(dir).map_err(io)?;
    std::io::copy(data, &mut tmp).map_err(io)?;
    tmp.as_file()
        .set_permissions(std::fs::Permissions::from_mode(0o755))
        .map_err(io)?;
    tmp.persist(dest).map_err(|e| io(e.error))?;
    Ok(())
}

/// Checks the file at `path` with [`check_elf`]; `part` names it in the error.
pub fn check_binary(path: &Path, platform: &Platform, part: &str) -> Result<(), AcceptError> {
    elf_of(path, platform).map_err(|e| {
        let why = match e {
            ElfCheck::Io(e) => e.to_string(),
            ElfCheck::Not(why) => why,
        };
        input(part, format!("{}: {why}", path.display()))
    })
}

/// Why the file at a path is no executable for a platform.
enum ElfCheck {
    /// It cannot be read.
    Io(std::io::Error),
    /// [`check_elf`]'s reason.
    Not(String),
}

/// [`check_elf`] on the first bytes of the file at `path`.
fn elf_of(path: &Path, platform: &Platform) -> Result<(), ElfCheck> {
    let mut head = [0u8; 20];
    let n = std::fs::File::open(path)
        .and_then(|mut f| f.read(&mut head))
        .map_err(ElfCheck::Io)?;
    check_elf(&head[..n], platform).map_err(ElfCheck::Not)
}

/// What to build as the control.
#[derive(Debug, Clone)]
pub struct ControlRequest<'a> {
    /// Upstream git URL or local mirror.
    pub source: &'a str,
    /// Upstream tag, e.g. `v1.34.1`.
    pub upstream_tag: &'a str,
    /// The commit the tag must point at (images.toml).
    pub commit: &'a str,
    /// The images.toml that pins it, for messages.
    pub config: &'a str,
    /// Toolchain and Go caches (the minor's, as for ours).
    pub toolchain: &'a Toolchain,
    /// occm-forge's cache directory.
    pub cache_dir: &'a Path,
    /// The platform to build for (the host's).
    pub platform: &'a Platform,
    /// images.toml `go_overrides`, set in the control's go.mod as in ours.
    pub go_overrides: &'a std::collections::BTreeMap<String, String>,
}

/// The control binary and the upstream go.mod it was built from.
#[derive(Debug, Clone)]
pub struct Control {
    /// The unpatched upstream binary.
    pub binary: PathBuf,
    /// The upstream tree's go.mod (the Kubernetes and etcd versions come from it).
    pub go_mod: Vec<u8>,
    /// Whether it came from the cache.
    pub cached: bool,
}

/// The unpatched upstream OCCM of `req.upstream_tag`, built like ours (`go::build::build`:
/// `CGO_ENABLED=0 -trimpath -buildvcs=false`, upstream's ldflags with the upstream tag as
/// version) for the host platform, cached in
/// `<cache>/accept/control/<tag>-<commit 12>-go<version>-<os>-<arch>/` with the tree's go.mod.
///
/// Errors: source errors as in `build`; [`AcceptError::NotVerified`] when the Go module proxy
/// refuses a module; [`AcceptError::Build`] for other build failures.
pub fn build_control(
    req: &ControlRequest<'_>,
) -> Result<Control, occm_forge_core::pipeline::Error> {
    // Overrides make another control: their digest is part of the cache key.
    let overridden = if req.go_overrides.is_empty() {
        String::new()
    } else {
        let text = serde_json::to_vec(req.go_overrides).expect("overrides serialise");
        let digest = occm_forge_core::base::util::sha256_digest(&text);
        format!(
            "-overrides{}",
            &digest["sha256:".len().."sha256:".len() + 12]
        )
    };
    let dir = req.cache_dir.join("accept").join("control").join(format!(
        "{}-{}-go{}-{}-{}{overridden}",
        req.upstream_tag,
        &req.commit[..12.min(req.commit.len())],
        req.toolchain.version,
        req.platform.os,
        req.platform.arch
    ));
    let binary = dir.join("openstack-cloud-controller-manager");
    let go_mod_path = dir.join("go.mod");
    let io =
        |e: std::io::Error| occm_forge_core::pipeline::Error::Io(format!("{}: {e}", dir.display()));
    if binary.is_file()
        && let Ok(go_mod) = std::fs::read(&go_mod_path)
    {
        return Ok(Control {
            binary,
            go_mod,
            cached: true,
        });
    }
    let scratch = occm_forge_core::base::util::scratch_dir(req.cache_dir, "accept-control-")
        .map_err(occm_forge_core::pipeline::Error::Io)?;
    let tree = occm_forge_core::pipeline::source::checkout(
        &occm_forge_core::pipeline::source::SourceRequest {
            url: req.source,
            tag: req.upstream_tag,
            pinned_commit: req.commit,
            config: req.config,
            cache_dir: req.cache_dir,
            tree_dir: &scratch.path().join("src"),
        },
    )?;
    if !req.go_overrides.is_empty() {
        occm_forge_core::pipeline::go::overrides::check(
            req.toolchain,
            &tree.path,
            req.upstream_tag,
            req.go_overrides,
        )?;
        occm_forge_core::pipeline::go::overrides::apply(
            req.toolchain,
            &tree.path,
            req.go_overrides,
            &[],
        )?;
    }
    let go_mod = std::fs::read(tree.path.join("go.mod")).map_err(io)?;
    let built = occm_forge_core::pipeline::go::build::build(
        &occm_forge_core::pipeline::go::build::BuildRequest {
            dir: &tree.path,
            toolchain: req.toolchain,
            version: req.upstream_tag,
            platforms: std::slice::from_ref(req.platform),
            out_dir: &scratch.path().join("bin"),
        },
    )
    .map_err(|e| {
        if e.refused.is_empty() {
            occm_forge_core::pipeline::Error::Accept(AcceptError::Build {
                part: format!("control (upstream {})", req.upstream_tag),
                message: e.message,
            })
        } else {
            occm_forge_core::pipeline::Error::Accept(AcceptError::NotVerified(format!(
                "the Go module proxy refuses {}, needed to build the control",
                occm_forge_core::pipeline::go::refused_list(&e.refused)
            )))
        }
    })?;
    std::fs::create_dir_all(&dir).map_err(io)?;
    let tmp = dir.join(format!(".binary.tmp{}", std::process::id()));
    std::fs::copy(&built[0].path, &tmp).map_err(io)?;
    occm_forge_core::base::util::write_file_atomically(&go_mod_path, &go_mod).map_err(io)?;
    std::fs::rename(&tmp, &binary).map_err(io)?;
    Ok(Control {
        binary,
        go_mod,
        cached: false,
    })
}

/// Reads the upstream go.mod of `tag` straight from the shared object store, after checking the
/// tag still points at the pinned `commit` (no checkout, no build).
///
/// Errors: the source errors of [`occm_forge_core::pipeline::source::check_pin`]; a tree without go.mod.
pub fn upstream_go_mod(
    source: &str,
    tag: &str,
    commit: &str,
    config: &str,
    cache_dir: &Path,
) -> Result<Vec<u8>, occm_forge_core::pipeline::Error> {
    let fetched = occm_forge_core::pipeline::source::check_pin(
        &occm_forge_core::pipeline::source::SourceRequest {
            url: source,
            tag,
            pinned_commit: commit,
            config,
            cache_dir,
            tree_dir: Path::new(""),
        },
    )?;
    occm_forge_core::pipeline::source::read_file(&fetched.store, &fetched.commit, "go.mod")
        .ok_or_else(|| {
            occm_forge_core::pipeline::Error::Io(format!("{source} {tag}: no go.mod at {commit}"))
        })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn elf(machine: u16) -> Vec<u8> {
        let mut h = vec![0u8; 64];
        h[..4].copy_from_slice(b"\x7fELF");
        h[4] = 2;
        h[5] = 1;
        h[18..20].copy_from_slice(&machine.to_le_bytes());
        h
    }

    #[test]
    fn elf_headers_are_matched_to_the_platform() {
        let amd64: Platform = "linux/amd64".parse().unwrap();
        let arm64: Platform = "linux/arm64".parse().unwrap();
        assert!(check_elf(&elf(62), &amd64).is_ok());
        assert_eq!(
            check_elf(&elf(183), &amd64).unwrap_err(),
            "an ELF for AArch64 (arm64), not for linux/amd64"
        );
        assert!(check_elf(&elf(183), &arm64).is_ok());
        assert_eq!(
            check_elf(b"#!/bin/sh\n", &amd64).unwrap_err(),
            "not an ELF executable"
        );
    }
}
