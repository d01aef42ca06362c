//! OCI image layout on disk (image-spec `image-layout.md`): `oci-layout`, `index.json` and
//! `blobs/sha256/<hex>`. Blobs are content-addressed and written through a temporary file and a
//! rename, so a layout is never left with a torn blob; `index.json` is rewritten the same way,
//! its entries always in one order (tags, then referrers), whatever the history.

use std::path::{Path, PathBuf};

use super::compose::{BlobData, Composed};
use super::spec::{self, Descriptor, Index};
use crate::base::util::write_file_atomically;

/// `<layout>/blobs/sha256/<hex>` for `digest` (image-spec `image-layout.md`, "Blobs").
///
/// Errors: `InvalidInput` when `digest` is not `sha256:` and 64 lowercase hex digits (the only
/// algorithm occm-forge writes); a digest read from a layout is never joined onto a path
/// unchecked (`sha256:../../x` would name a file outside the layout).
pub fn blob_path(layout: &Path, digest: &str) -> std::io::Result<PathBuf> {
    if !crate::base::util::is_sha256_digest(digest) {
        return Err(std::io::Error::new(
            std::io::ErrorKind::InvalidInput,
            format!("`{digest}` is not a sha256 digest"),
        ));
    }
    let (alg, hex) = digest.split_once(':').unwrap_or(("sha256", digest));
    Ok(layout.join("blobs").join(alg).join(hex))
}

/// Stores a blob under its digest unless it is already there.
pub fn write_blob(layout: &Path, digest: &str, data: &[u8]) -> std::io::Result<()> {
    let path = blob_path(layout, digest)?;
    if path.exists() {
        return Ok(());
    }
    write_file_atomically(&path, data)
}

/// Stores the blob in file `from` under its digest unless it is already there, copying the file
/// (no read into memory) through a temporary file and a rename.
///
/// Errors: one line naming the side that failed — `from` when it cannot be read, the blob's
/// path in the layout when it cannot be written, with its file system's room when that is full
/// ([`crate::base::disk::write_failed`]).
pub fn copy_blob(layout: &Path, digest: &str, from: &Path) -> Result<(), String> {
    use crate::base::disk::write_failed;
    let path = blob_path(layout, digest).map_err(|e| e.to_string())?;
    if path.exists() {
        return Ok(());
    }
    let dir = path.parent().unwrap_or(Path::new("."));
    std::fs::create_dir_all(dir).map_err(|e| write_failed(dir, &e))?;
    let mut source = std::fs::File::open(from).map_err(|e| format!("{}: {e}", from.display()))?;
    let mut tmp = tempfile::NamedTempFile::new_in(dir).map_err(|e| write_failed(dir, &e))?;
    copy_to(&mut source, tmp.as_file_mut(), from, &path)?;
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        tmp.as_file()
            .set_permissions(std::fs::Permissions::from_mode(0o644))
            .map_err(|e| write_failed(&path, &e))?;
    }
    tmp.persist(&path)
        .map_err(|e| write_failed(&path, &e.error))?;
    Ok(())
}

/// Copies `source` (the file `from`) into `dest` (the blob at `to`), naming the side that failed.
fn copy_to(
    source: &mut std::fs::File,
    dest: &mut std::fs::File,
    from: &Path,
    to: &Path,
) -> Result<(), String> {
    use std::io::{Read, Write};
    let mut buf = vec![0u8; 1 << 16];
    loop {
        let n = source
            .read(&mut buf)
            .map_err(|e| format!("{}: {e}", from.display()))?;
        if n == 0 {
            return Ok(());
        }
        dest.write_all(&buf[..n])
            .map_err(|e| crate::base::disk::write_failed(to, &e))?;
    }
}

/// Reads a blob.
pub fn read_blob(layout: &Path, digest: &str) -> std::io::Result<Vec<u8>> {
    std::fs::read(blob_path(layout, digest)?)
}

/// Points the layout's `index.json` entry named `ref_name` at `top` (replacing an older entry of
/// that name, keeping the others) and writes `oci-layout`.
pub fn set_ref(layout: &Path, top: &Descriptor, ref_name: &str) -> std::io::Result<()> {
    std::fs::create_dir_all(layout)?;
    write_file_atomically(
        &layout.join("oci-layout"),
        br#"{"imageLayoutVersion":"1.0.0"}"#,
    )?;
    let mut index = read_index(layout)?;
    index.manifests.retain(|m| ref_of(m) != Some(ref_name));
    let mut entry = top.clone();
    entry
        .annotations
        .insert(spec::keys::REF_NAME.to_string(), ref_name.to_string());
    index.manifests.push(entry);
    write_index(layout, index)
}

/// The layout's `index.json` (empty when there is none).
fn read_index(layout: &Path) -> std::io::Result<Index> {
    let index_path = layout.join("index.json");
    match std::fs::read(&index_path) {
        Ok(b) => serde_json::from_slice::<Index>(&b)
            .map_err(|e| std::io::Error::other(format!("{}: {e}", index_path.display()))),
        Err(_) => Ok(Index {
            schema_version: 2,
            media_type: spec::OCI_INDEX.to_string(),
            artifact_type: None,
            manifests: Vec::new(),
            subject: None,
            annotations: Default::default(),
        }),
    }
}

/// Writes `index.json` with its entries in the canonical order of [`order_key`], so that
/// its bytes depend on what the layout holds, not on the order it was written in (a forced
/// rebuild, or minors built in another order, give the same bytes).
fn write_index(layout: &Path, mut index: Index) -> std::io::Result<()> {
    index
        .manifests
        .sort_by(|a, b| order_key(a).cmp(&order_key(b)));
    write_file_atomically(&layout.join("index.json"), &spec::to_bytes(&index))
}

/// The canonical order of `index.json` entries: tagged entries first, by tag
/// (`org.opencontainers.image.ref.name`), then the untagged ones (referrers); within each, by
/// artifact type, media type and digest.
fn order_key(d: &Descriptor) -> (bool, &str, &str, &str, &str) {
    (
        ref_of(d).is_none(),
        ref_of(d).unwrap_or_default(),
        d.artifact_type.as_deref().unwrap_or_default(),
        &d.media_type,
        &d.digest,
    )
}

/// The tag an `index.json` entry carries, if any.
fn ref_of(d: &Descriptor) -> Option<&str> {
    d.annotations.get(spec::keys::REF_NAME).map(String::as_str)
}

/// Lists referrer manifests (SBOM, provenance) in `index.json` as entries without a tag, as the
/// image-layout spec allows, so that tools walking `index.json` (`umoci gc`, cosign) find and
/// keep them. An entry already listed is not listed twice, and an earlier referrer of the same
/// kind (subject and artifactType) as a new one leaves the list (`gc` then removes its blobs).
pub fn add_referrers(layout: &Path, referrers: &[Descriptor]) -> std::io::Result<()> {
    let mut index = read_index(layout)?;
    // A rebuild's referrers replace the earlier ones of the same kind for the same subject (an
    // SBOM or provenance naming another repository or build), not other tools' referrers.
    let replaced: std::collections::BTreeSet<(String, String)> = referrers
        .iter()
        .filter_map(|r| kind(layout, &r.digest))
        .collect();
    index.manifests.retain(|m| {
        ref_of(m).is_some()
            || referrers.iter().any(|r| r.digest == m.digest)
            || kind(layout, &m.digest).is_none_or(|k| !replaced.contains(&k))
    });
    for r in referrers {
        if !index
            .manifests
            .iter()
            .any(|m| m.digest == r.digest && ref_of(m).is_none())
        {
            index.manifests.push(r.clone());
        }
    }
    write_index(layout, index)
}

/// A referrer manifest's (subject digest, artifactType), read from the layout.
fn kind(layout: &Path, digest: &str) -> Option<(String, String)> {
    let v: serde_json::Value = serde_json::from_slice(&read_blob(layout, digest).ok()?).ok()?;
    let artifact_type = v["artifactType"]
        .as_str()
        .or(v["config"]["mediaType"].as_str())?;
    Some((
        v["subject"]["digest"].as_str()?.to_string(),
        artifact_type.to_string(),
    ))
}

/// Takes the layout's lock (`<layout>/.occm-forge.lock`, `flock`): held from the image stage to
/// the garbage collection, so that one run never collects the fresh blobs of another.
pub fn lock(layout: &Path) -> std::io::Result<std::fs::File> {
    std::fs::create_dir_all(layout)?;
    let f = std::fs::File::create(layout.join(".occm-forge.lock"))?;
    f.lock()?;
    Ok(f)
}

/// Keeps what `index.json` reaches and removes the rest: untagged entries (referrers) whose
/// subject no tagged image reaches any more leave `index.json`, then every blob file nothing
/// reaches is deleted (what an interrupted build or an image replaced under its tag left).
/// Returns the number of blobs removed.
pub fn gc(layout: &Path) -> std::io::Result<usize> {
    let mut index = read_index(layout)?;
    let mut reached = std::collections::BTreeSet::new();
    for m in index.manifests.iter().filter(|m| ref_of(m).is_some()) {
        walk(layout, &m.digest, &mut reached);
    }
    // Referrers whose subject is reached are kept (and may have referrers of their own).
    let mut kept: Vec<Descriptor> = Vec::new();
    loop {
        let before = kept.len();
        for m in index.manifests.iter().filter(|m| ref_of(m).is_none()) {
            if kept.iter().any(|k| k.digest == m.digest) {
                continue;
            }
            let subject = read_blob(layout, &m.digest)
                .ok()
                .and_then(|b| serde_json::from_slice::<spec::Manifest>(&b).ok())
                .and_then(|r| r.subject.map(|s| s.digest));
            if subject.is_some_and(|s| reached.contains(&s)) {
                walk(layout, &m.digest, &mut reached);
                kept.push(m.clone());
            }
        }
        if kept.len() == before {
            break;
        }
    }
    index
        .manifests
        .retain(|m| ref_of(m).is_some() || kept.iter().any(|k| k.digest == m.digest));
    write_index(layout, index)?;
    let mut removed = 0;
    let dir = layout.join("blobs").join("sha256");
    for e in std::fs::read_dir(&dir).into_iter().flatten().flatten() {
        let name = e.file_name().to_string_lossy().into_owned();
        if name.len() == 64 && !reached.contains(&format!("sha256:{name}")) {
            std::fs::remove_file(e.path())?;
            removed += 1;
        }
    }
    Ok(removed)
}

/// Marks `digest` and everything its JSON names (index entries, config, layers) as reached.
/// Only manifests and indexes are read (their entries are followed); configs and layers are
/// marked without reading them.
fn walk(layout: &Path, digest: &str, reached: &mut std::collections::BTreeSet<String>) {
    if !reached.insert(digest.to_string()) {
        return;
    }
    let Ok(bytes) = read_blob(layout, digest) else {
        return;
    };
    let Ok(v) = serde_json::from_slice::<serde_json::Value>(&bytes) else {
        return;
    };
    let leaves = v["layers"]
        .as_array()
        .into_iter()
        .flatten()
        .chain(std::iter::once(&v["config"]));
    for d in leaves {
        if let Some(d) = d["digest"].as_str() {
            reached.insert(d.to_string());
        }
    }
    for d in v["manifests"].as_array().into_iter().flatten() {
        if let Some(d) = d["digest"].as_str() {
            walk(layout, d, reached);
        }
    }
}

/// Writes a composed image into the layout in one step: every blob (each once; cached base
/// layers are copied file to file), then `index.json` pointing `ref_name` at the index.
///
/// Errors: the I/O error, prefixed with the path involved (the layout, or the cached blob).
pub fn write_image(layout: &Path, image: &Composed, ref_name: &str) -> Result<(), String> {
    let at = |p: &Path| {
        let p = p.to_path_buf();
        move |e: std::io::Error| crate::base::disk::write_failed(&p, &e)
    };
    for blob in &image.blobs {
        match &blob.data {
            BlobData::Bytes(bytes) => write_blob(layout, &blob.digest, bytes).map_err(at(
                &blob_path(layout, &blob.digest).unwrap_or_else(|_| layout.to_path_buf()),
            ))?,
            BlobData::File(path) => copy_blob(layout, &blob.digest, path)?,
        }
    }
    set_ref(layout, &image.index, ref_name).map_err(at(&layout.join("index.json")))
}

/// Whether the layout still holds image `digest` under `ref_name`: `index.json` names it, and
/// the index, every manifest it lists, and their configs and layers are present with the sizes
/// their descriptors give (sizes, not hashes: a no-op build must stay fast).
///
/// Errors: what is missing or different, in a few words, for the "rebuilding because" line.
pub fn holds(layout: &Path, ref_name: &str, digest: &str) -> Result<(), String> {
    let index_json = std::fs::read(layout.join("index.json"))
        .map_err(|_| format!("{} has no index.json", layout.display()))?;
    let top: Index = serde_json::from_slice(&index_json).map_err(|e| format!("index.json: {e}"))?;
    let named = top
        .manifests
        .iter()
        .find(|m| m.annotations.get(spec::keys::REF_NAME).map(String::as_str) == Some(ref_name))
        .ok_or_else(|| format!("{} does not name {ref_name}", layout.display()))?;
    if named.digest != digest {
        return Err(format!(
            "{}:{ref_name} is {}, not the recorded {digest}",
            layout.display(),
            named.digest
        ));
    }
    let present = |d: &Descriptor| -> Result<(), String> {
        match blob_path(layout, &d.digest).and_then(std::fs::metadata) {
            Ok(m) if m.len() == d.size => Ok(()),
            _ => Err(format!("{} lacks blob {}", layout.display(), d.digest)),
        }
    };
    present(named)?;
    let index: Index =
        serde_json::from_slice(&read_blob(layout, digest).map_err(|e| e.to_string())?)
            .map_err(|e| format!("{digest}: {e}"))?;
    for m in &index.manifests {
        present(m)?;
        let manifest: spec::Manifest =
            serde_json::from_slice(&read_blob(layout, &m.digest).map_err(|e| e.to_string())?)
                .map_err(|e| format!("{}: {e}", m.digest))?;
        present(&manifest.config)?;
        manifest.layers.iter().try_for_each(present)?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::super::referrer;
    use super::*;
    use crate::pipeline::describe;

    /// Two images and their referrers written in either order, and a tag set again: the same
    /// `index.json` bytes.
    #[test]
    fn index_json_does_not_depend_on_the_order_of_writes() {
        let a = Descriptor::of(spec::OCI_INDEX, b"a");
        let b = Descriptor::of(spec::OCI_INDEX, b"b");
        let write = |dir: &Path, order: &[&str]| -> Vec<u8> {
            for step in order {
                let (image, tag, kind) = match *step {
                    "a" => (&a, "v1.33.1-occmforge.1", describe::SPDX_MEDIA_TYPE),
                    _ => (&b, "v1.34.1-occmforge.1", describe::IN_TOTO_MEDIA_TYPE),
                };
                set_ref(dir, image, tag).unwrap();
                let r = referrer::attach(dir, image, kind, step.as_bytes(), 0).unwrap();
                add_referrers(dir, &[r.manifest]).unwrap();
            }
            std::fs::read(dir.join("index.json")).unwrap()
        };
        let (x, y) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
        let first = write(x.path(), &["a", "b"]);
        assert_eq!(write(x.path(), &["a"]), first, "a rebuild of a");
        assert_eq!(write(y.path(), &["b", "a"]), first, "b before a");
    }
}
