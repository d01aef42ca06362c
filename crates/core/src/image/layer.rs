//! Deterministic layers: tar headers written by hand (ustar, uid/gid 0 unless set, empty user and
//! group names, one fixed mtime), entries in the order given, gzip with mtime 0 and a fixed level.
//! The same entries and mtime always give the same bytes, so the same `diff_id` (sha256 of the
//! tar, image-spec `config.md` `rootfs.diff_ids`) and the same layer digest (sha256 of the gzip).
//!
//! Small layers (the static base) are built in memory ([`build`]); a layer holding a binary is
//! streamed ([`build_cached`]): the file is read as the tar is written, the tar is hashed and
//! gzipped as it goes, and the gzip is hashed on its way to a file, so no binary, tar or blob is
//! ever held in memory whole.

use std::io::Write;
use std::path::{Path, PathBuf};

use sha2::Digest as _;

use flate2::{Compression, GzBuilder};
use tar::{EntryType, Header};

use crate::base::util::sha256_digest;

/// What a tar entry is.
#[derive(Debug, Clone)]
pub enum EntryKind {
    /// A directory.
    Dir,
    /// A regular file with these contents.
    File(Vec<u8>),
    /// A regular file with the contents of this file on disk, read as the tar is written.
    Path(PathBuf),
}

/// One tar entry.
#[derive(Debug, Clone)]
pub struct Entry {
    /// Path inside the image without a leading `/`, e.g. `bin/openstack-cloud-controller-manager`.
    pub path: String,
    /// Directory or file.
    pub kind: EntryKind,
    /// Permission bits, e.g. `0o755`, `0o1777` for `/tmp`.
    pub mode: u32,
    /// Owner uid and gid.
    pub owner: (u64, u64),
}

impl Entry {
    /// A root-owned directory.
    pub fn dir(path: &str, mode: u32) -> Self {
        Entry {
            path: path.to_string(),
            kind: EntryKind::Dir,
            mode,
            owner: (0, 0),
        }
    }
    /// A root-owned file.
    pub fn file(path: &str, mode: u32, data: Vec<u8>) -> Self {
        Entry {
            path: path.to_string(),
            kind: EntryKind::File(data),
            mode,
            owner: (0, 0),
        }
    }
    /// A root-owned file with the contents of `source`, streamed.
    pub fn from_file(path: &str, mode: u32, source: &Path) -> Self {
        Entry {
            path: path.to_string(),
            kind: EntryKind::Path(source.to_path_buf()),
            mode,
            owner: (0, 0),
        }
    }
}

/// A finished layer blob in a file (the compressed-layer cache, or a scratch directory).
#[derive(Debug, Clone)]
pub struct FileLayer {
    /// The gzip-compressed tar.
    pub path: PathBuf,
    /// Its size in bytes.
    pub size: u64,
    /// `sha256:` of the blob.
    pub digest: String,
    /// `sha256:` of the uncompressed tar.
    pub diff_id: String,
}

/// A finished layer blob.
#[derive(Debug, Clone)]
pub struct Layer {
    /// The gzip-compressed tar (the blob).
    pub blob: Vec<u8>,
    /// `sha256:` of the blob.
    pub digest: String,
    /// `sha256:` of the uncompressed tar.
    pub diff_id: String,
}

/// The compression settings every layer uses: gzip, level 6, header mtime 0. Part of the
/// compressed-layer cache key (change it and the cache directory name changes with it).
pub const COMPRESSION: &str = "gzip-6";

/// Writes `entries` as a tar with every mtime set to `mtime` (seconds since the epoch), then
/// gzips it. Errors only on I/O into memory, which cannot fail in practice.
pub fn build(entries: &[Entry], mtime: i64) -> std::io::Result<Layer> {
    let raw = tar(entries, mtime)?;
    let diff_id = sha256_digest(&raw);
    let blob = compress(&raw)?;
    Ok(Layer {
        digest: sha256_digest(&blob),
        diff_id,
        blob,
    })
}

/// The layer of `entries`, streamed through the compressed-layer cache under `cache_dir`: the
/// gzip of a tar whose sha256 (the diff_id) was compressed before is used again instead of
/// compressed again, so an unchanged binary is never gzipped twice. The blob lives at
/// `<cache_dir>/layers/gzip-6/<diff_id hex>/<digest hex>` and is used only when its bytes still
/// hash to its name; otherwise it is made and stored again. The bytes are those of [`build`]
/// either way. Files of [`EntryKind::Path`] are read twice (once to hash the tar, once to
/// compress it), never held in memory.
pub fn build_cached(entries: &[Entry], mtime: i64, cache_dir: &Path) -> std::io::Result<FileLayer> {
    let hashed = write_tar(entries, mtime, Hashing::new(std::io::sink()))?;
    let diff_id = hashed.digest();
    let dir = cache_dir
        .join("layers")
        .join(COMPRESSION)
        .join(diff_id.trim_start_matches("sha256:"));
    if let Some(layer) = cached(&dir, &diff_id) {
        return Ok(layer);
    }
    std::fs::create_dir_all(&dir)?;
    let tmp = tempfile::NamedTempFile::new_in(&dir)?;
    let out = Hashing::new(std::io::BufWriter::new(tmp.as_file().try_clone()?));
    let gz = GzBuilder::new().mtime(0).write(out, Compression::new(6));
    let mut out = write_tar(entries, mtime, gz)?.finish()?;
    out.flush()?;
    let (digest, size) = (out.digest(), out.written);
    drop(out);
    let path = dir.join(digest.trim_start_matches("sha256:"));
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        tmp.as_file()
            .set_permissions(std::fs::Permissions::from_mode(0o644))?;
    }
    tmp.persist(&path).map_err(|e| e.error)?;
    Ok(FileLayer {
        path,
        size,
        digest,
        diff_id,
    })
}

/// A verified compressed blob in `dir`, if there is one (hashed as it is read).
fn cached(dir: &Path, diff_id: &str) -> Option<FileLayer> {
    for entry in std::fs::read_dir(dir).ok()?.flatten() {
        let name = entry.file_name().to_string_lossy().into_owned();
        if name.len() != 64 {
            continue; // a temporary file of a write in progress
        }
        let mut hashing = Hashing::new(std::io::sink());
        let mut file = std::fs::File::open(entry.path()).ok()?;
        std::io::copy(&mut file, &mut hashing).ok()?;
        let digest = hashing.digest();
        if digest.trim_start_matches("sha256:") == name {
            return Some(FileLayer {
                path: entry.path(),
                size: hashing.written,
                digest,
                diff_id: diff_id.to_string(),
            });
        }
    }
    None
}

/// A writer that hashes (sha256) and counts what passes through it to `inner`.
struct Hashing<W> {
    inner: W,
    hasher: sha2::Sha256,
    written: u64,
}

impl<W: Write> Hashing<W> {
    fn new(inner: W) -> Self {
        Hashing {
            inner,
            hasher: sha2::Sha256::new(),
            written: 0,
        }
    }

    /// `sha256:<hex>` of everything written so far.
    fn digest(&self) -> String {
        format!("sha256:{}", hex::encode(self.hasher.clone().finalize()))
    }
}

impl<W: Write> Write for Hashing<W> {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        let n = self.inner.write(buf)?;
        self.hasher.update(&buf[..n]);
        self.written += n as u64;
        Ok(n)
    }
    fn flush(&mut self) -> std::io::Result<()> {
        self.inner.flush()
    }
}

/// The tar of `entries`: hand-set ustar headers, every mtime `mtime`.
fn tar(entries: &[Entry], mtime: i64) -> std::io::Result<Vec<u8>> {
    write_tar(entries, mtime, Vec::new())
}

/// Writes the tar of `entries` to `out` (a file's contents streamed from disk) and returns `out`.
fn write_tar<W: Write>(entries: &[Entry], mtime: i64, out: W) -> std::io::Result<W> {
    let mut tar = tar::Builder::new(out);
    for e in entries {
        let mut h = Header::new_ustar();
        let (path, size, kind) = match &e.kind {
            EntryKind::Dir => (
                format!("{}/", e.path.trim_end_matches('/')),
                0,
                EntryType::Directory,
            ),
            EntryKind::File(d) => (e.path.clone(), d.len() as u64, EntryType::Regular),
            EntryKind::Path(p) => (
                e.path.clone(),
                std::fs::metadata(p)?.len(),
                EntryType::Regular,
            ),
        };
        h.set_path(&path)?;
        h.set_entry_type(kind);
        h.set_size(size);
        h.set_mode(e.mode);
        h.set_uid(e.owner.0);
        h.set_gid(e.owner.1);
        h.set_mtime(mtime.max(0) as u64);
        h.set_username("")?;
        h.set_groupname("")?;
        h.set_cksum();
        match &e.kind {
            EntryKind::Dir => tar.append(&h, std::io::empty())?,
            EntryKind::File(d) => tar.append(&h, d.as_slice())?,
            EntryKind::Path(p) => {
                let file = std::fs::File::open(p)?;
                // The size in the header is the one read first: a file that changes under us
                // makes a wrong tar, so refuse it.
                if file.metadata()?.len() != size {
                    return Err(std::io::Error::other(format!(
                        "{} changed while it was packed",
                        p.display()
                    )));
                }
                tar.append(&h, std::io::BufReader::new(file))?
            }
        }
    }
    tar.into_inner()
}

/// gzip, level 6, header mtime 0 ([`COMPRESSION`]).
fn compress(raw: &[u8]) -> std::io::Result<Vec<u8>> {
    let mut gz = GzBuilder::new()
        .mtime(0)
        .write(Vec::with_capacity(raw.len() / 2), Compression::new(6));
    gz.write_all(raw)?;
    gz.finish()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn same_input_same_bytes_and_mtime_is_used() {
        let entries = vec![
            Entry::dir("bin", 0o755),
            Entry::file("bin/x", 0o755, b"hello".to_vec()),
        ];
        let a = build(&entries, 1_700_000_000).unwrap();
        let b = build(&entries, 1_700_000_000).unwrap();
        assert_eq!(a.blob, b.blob);
        let c = build(&entries, 1_700_000_001).unwrap();
        assert_ne!(a.diff_id, c.diff_id);

        let mut ar = tar::Archive::new(flate2::read::GzDecoder::new(a.blob.as_slice()));
        let got: Vec<(String, u32, u64, u64)> = ar
            .entries()
            .unwrap()
            .map(|e| {
                let e = e.unwrap();
                let h = e.header();
                (
                    e.path().unwrap().display().to_string(),
                    h.mode().unwrap(),
                    h.mtime().unwrap(),
                    h.uid().unwrap(),
                )
            })
            .collect();
        assert_eq!(
            got,
            [
                ("bin/".into(), 0o755, 1_700_000_000, 0),
                ("bin/x".into(), 0o755, 1_700_000_000, 0)
            ]
        );
    }

    #[test]
    fn the_cache_gives_the_same_bytes_without_compressing_again() {
        let cache = tempfile::tempdir().unwrap();
        let source = cache.path().join("x");
        // Not one repeated byte: a stream that compresses like a binary, over several buffers.
        let data: Vec<u8> = (0..300_000u32)
            .map(|i| (i.wrapping_mul(2_654_435_761) >> 11) as u8)
            .collect();
        std::fs::write(&source, &data).unwrap();
        let entries = vec![Entry::from_file("bin/x", 0o755, &source)];
        let direct = build(&[Entry::file("bin/x", 0o755, data.clone())], 5).unwrap();
        let first = build_cached(&entries, 5, cache.path()).unwrap();
        let dir = cache
            .path()
            .join("layers/gzip-6")
            .join(direct.diff_id.trim_start_matches("sha256:"));
        let file = dir.join(direct.digest.trim_start_matches("sha256:"));
        assert!(file.is_file());
        assert_eq!(first.path, file);
        assert_eq!(
            std::fs::read(&first.path).unwrap(),
            direct.blob,
            "streamed = in memory"
        );
        assert_eq!(
            (first.digest.clone(), first.diff_id.clone()),
            (direct.digest.clone(), direct.diff_id.clone())
        );
        assert_eq!(first.size, direct.blob.len() as u64);
        // The cache is read, not recompressed: a blob stored under the same diff_id (here a
        // level-1 gzip, named by its own digest) is what the next build returns.
        let mut gz = GzBuilder::new()
            .mtime(0)
            .write(Vec::new(), Compression::new(1));
        gz.write_all(&tar(&entries, 5).unwrap()).unwrap();
        let other = gz.finish().unwrap();
        assert_ne!(other, direct.blob);
        std::fs::remove_file(&file).unwrap();
        let other_digest = sha256_digest(&other);
        std::fs::write(dir.join(other_digest.trim_start_matches("sha256:")), &other).unwrap();
        let second = build_cached(&entries, 5, cache.path()).unwrap();
        assert_eq!(
            (std::fs::read(&second.path).unwrap(), second.digest),
            (other, other_digest.clone())
        );
        std::fs::remove_file(dir.join(other_digest.trim_start_matches("sha256:"))).unwrap();
        build_cached(&entries, 5, cache.path()).unwrap();
        // A corrupt cache entry is ignored and replaced.
        std::fs::write(&file, b"corrupt").unwrap();
        let third = build_cached(&entries, 5, cache.path()).unwrap();
        assert_eq!(std::fs::read(&third.path).unwrap(), direct.blob);
        assert_eq!(std::fs::read(&file).unwrap(), direct.blob);
    }
}
