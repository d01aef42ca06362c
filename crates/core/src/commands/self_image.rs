//! `occm-forge self-image`: occm-forge's own image, for running `clusters --fix --watch` in the
//! management cluster (deploy/clusters/). The same assembly as OCCM's ([`crate::image`]) on the
//! built-in static base: one layer holding a statically linked occm-forge at
//! `/usr/local/bin/occm-forge` as the `Entrypoint`, user 65532, the CA bundle of the base, the
//! OCI labels (source, revision, version, created), written as an OCI layout; the command
//! pushes it like a build (`registry::publish`).
//!
//! The binary must be statically linked (the static base has no C library): build it with
//! `RUSTFLAGS="-C target-feature=+crt-static" cargo build --release --features static
//! --target <host triple>` (OpenSSL and zlib compiled in, glibc linked statically).

use std::path::{Path, PathBuf};

use crate::config::Platform;
use crate::image::{self, BuiltImage};

/// What to package.
#[derive(Debug, Clone)]
pub struct SelfImageRequest<'a> {
    /// The occm-forge binary (statically linked, for `platform`).
    pub binary: &'a Path,
    /// Its platform.
    pub platform: &'a Platform,
    /// The tag (and the layout's `ref.name`): occm-forge's version by default.
    pub tag: &'a str,
    /// `org.opencontainers.image.source`: where occm-forge's source lives.
    pub source: &'a str,
    /// `org.opencontainers.image.revision`: the commit it was built from.
    pub revision: &'a str,
    /// Seconds since the epoch for every time in the image.
    pub epoch: i64,
    /// The OCI layout to write into.
    pub layout_dir: &'a Path,
}

/// A binary that cannot go into the image.
#[derive(Debug, thiserror::Error)]
#[error("self-image: {path}: {message}")]
pub struct SelfImageError {
    /// The binary.
    pub path: PathBuf,
    /// Why, in one line.
    pub message: String,
}

impl crate::pipeline::Failure for SelfImageError {
    /// 2: the binary cannot be packaged.
    fn exit_code(&self) -> u8 {
        2
    }
}

crate::command_failure!(SelfImageError);

/// Packages the binary; see the module documentation.
///
/// Errors: [`crate::pipeline::Error::SelfImage`] when the binary cannot be read, is not an ELF executable
/// for the platform or is dynamically linked; [`crate::pipeline::Error::Image`] when the layout cannot be
/// written.
pub fn assemble(req: &SelfImageRequest<'_>) -> Result<BuiltImage, crate::pipeline::Error> {
    let bad = |message: String| SelfImageError {
        path: req.binary.to_path_buf(),
        message,
    };
    let data = std::fs::read(req.binary).map_err(|e| bad(e.to_string()))?;
    crate::image::elf::check_elf(&data, req.platform).map_err(bad)?;
    if let Some(interp) = interpreter(&data) {
        return Err(bad(format!(
            "dynamically linked (it needs {interp}), and the static base has no C library: build it with RUSTFLAGS=\"-C target-feature=+crt-static\" cargo build --release --features static --target <host triple>"
        ))
        .into());
    }
    drop(data);
    let base = image::base::static_base(std::slice::from_ref(req.platform), req.epoch)?;
    Ok(image::assemble(&image::ImageRequest {
        program: &image::OCCM_FORGE,
        binaries: &[(req.platform.clone(), req.binary.to_path_buf())],
        base: &base,
        tag: req.tag,
        epoch: req.epoch,
        source: req.source,
        revision: req.revision,
        layout_dir: req.layout_dir,
        layer_cache: None,
    })?)
}

/// The program interpreter (`PT_INTERP`, the dynamic loader) an ELF executable asks for, if any:
/// a statically linked executable has none.
pub fn interpreter(data: &[u8]) -> Option<String> {
    use object::read::elf::{FileHeader as _, ProgramHeader as _};
    let header = object::elf::FileHeader64::<object::Endianness>::parse(data).ok()?;
    let endian = header.endian().ok()?;
    header
        .program_headers(endian, data)
        .ok()?
        .iter()
        .find(|p| p.p_type(endian) == object::elf::PT_INTERP)
        .and_then(|p| p.data(endian, data).ok())
        .map(|d| {
            String::from_utf8_lossy(d)
                .trim_end_matches('\0')
                .to_string()
        })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_dynamically_linked_binary_names_its_loader_and_a_static_one_none() {
        // This test binary is linked the way cargo links tests here: dynamically.
        let me = std::fs::read(std::env::current_exe().unwrap()).unwrap();
        let interp = interpreter(&me).expect("a dynamically linked test binary");
        assert!(
            interp.starts_with('/') && interp.contains("ld-"),
            "{interp}"
        );
        assert_eq!(interpreter(b"not an ELF"), None);
    }
}
