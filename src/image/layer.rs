//! Deterministic layers: tar headers written by hand (ustar, uid/gid 0 unless set, empty user and
//! group names, one fixed mtime), entries in the order given, gzip with mtime 0 and a fixed level.
//! The same entries and mtime always give the same bytes, so the same `diff_id` (sha256 of the
//! tar, image-spec `config.md` `rootfs.diff_ids`) and the same layer digest (sha256 of the gzip).

use std::io::Write;

use flate2::{Compression, GzBuilder};
use tar::{EntryType, Header};

use crate::util::sha256_digest;

/// What a tar entry is.
#[derive(Debug, Clone)]
pub enum EntryKind {
    /// A directory.
    Dir,
    /// A regular file with these contents.
    File(Vec<u8>),
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

/// Writes `entries` as a tar with every mtime set to `mtime` (seconds since the epoch), then
/// gzips it. Errors only on I/O into memory, which cannot fail in practice.
pub fn build(entries: &[Entry], mtime: i64) -> std::io::Result<Layer> {
    let mut tar = tar::Builder::new(Vec::new());
    for e in entries {
        let mut h = Header::new_ustar();
        let (path, size, kind) = match &e.kind {
            EntryKind::Dir => (
                format!("{}/", e.path.trim_end_matches('/')),
                0,
                EntryType::Directory,
            ),
            EntryKind::File(d) => (e.path.clone(), d.len() as u64, EntryType::Regular),
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
        }
    }
    let raw = tar.into_inner()?;
    let diff_id = sha256_digest(&raw);
    let mut gz = GzBuilder::new()
        .mtime(0)
        .write(Vec::with_capacity(raw.len() / 2), Compression::new(6));
    gz.write_all(&raw)?;
    let blob = gz.finish()?;
    Ok(Layer {
        digest: sha256_digest(&blob),
        diff_id,
        blob,
    })
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
}
