//! Attachments: documents (SBOM, provenance) stored as OCI 1.1 referrers of an image — an artifact
//! manifest with `artifactType`, the empty config (`application/vnd.oci.empty.v1+json`, `{}`) and
//! the document as its one layer, whose `subject` is the image (image-spec `manifest.md`
//! "Guidelines for Artifact Usage"; distribution-spec "Listing Referrers").

use std::collections::BTreeMap;
use std::path::Path;

use super::layout;
use super::spec::{self, Descriptor, Index, Manifest, keys};

/// The empty JSON config blob.
pub const EMPTY_CONFIG: &[u8] = b"{}";
/// Its media type.
pub const EMPTY_MEDIA_TYPE: &str = "application/vnd.oci.empty.v1+json";

/// A document attached to a subject, all of whose blobs are in the layout.
#[derive(Debug, Clone)]
pub struct Attachment {
    /// The image manifest or index it describes.
    pub subject: Descriptor,
    /// The referrer (artifact) manifest, with `artifactType` and annotations set as they appear in a
    /// referrers index.
    pub manifest: Descriptor,
    /// The empty config descriptor.
    pub config: Descriptor,
    /// The document blob.
    pub document: Descriptor,
}

/// The tag of the referrers tag-schema fallback index for `subject_digest`: `sha256-<hex>`
/// (distribution-spec "Referrers Tag Schema").
pub fn fallback_tag(subject_digest: &str) -> String {
    subject_digest.replacen(':', "-", 1)
}

/// Writes `document` (of `artifact_type`) as a referrer of `subject` into the layout.
pub fn attach(
    layout_dir: &Path,
    subject: &Descriptor,
    artifact_type: &str,
    document: &[u8],
    epoch: i64,
) -> std::io::Result<Attachment> {
    attach_annotated(
        layout_dir,
        subject,
        artifact_type,
        document,
        epoch,
        BTreeMap::new(),
    )
}

/// [`attach`] with `annotations` on the referrer manifest besides
/// `org.opencontainers.image.created` (cosign's `dev.sigstore.bundle.*` on a signature).
pub fn attach_annotated(
    layout_dir: &Path,
    subject: &Descriptor,
    artifact_type: &str,
    document: &[u8],
    epoch: i64,
    mut annotations: BTreeMap<String, String>,
) -> std::io::Result<Attachment> {
    let config = Descriptor::of(EMPTY_MEDIA_TYPE, EMPTY_CONFIG);
    layout::write_blob(layout_dir, &config.digest, EMPTY_CONFIG)?;
    let doc = Descriptor::of(artifact_type, document);
    layout::write_blob(layout_dir, &doc.digest, document)?;
    let subject = Descriptor {
        media_type: subject.media_type.clone(),
        digest: subject.digest.clone(),
        size: subject.size,
        platform: None,
        artifact_type: None,
        annotations: BTreeMap::new(),
        urls: vec![],
    };
    annotations.insert(keys::CREATED.to_string(), crate::base::util::rfc3339(epoch));
    let manifest = Manifest {
        schema_version: 2,
        media_type: spec::OCI_MANIFEST.to_string(),
        artifact_type: Some(artifact_type.to_string()),
        config: config.clone(),
        layers: vec![doc.clone()],
        subject: Some(subject.clone()),
        annotations: annotations.clone(),
    };
    let bytes = spec::to_bytes(&manifest);
    let mut desc = Descriptor::of(spec::OCI_MANIFEST, &bytes);
    layout::write_blob(layout_dir, &desc.digest, &bytes)?;
    desc.artifact_type = Some(artifact_type.to_string());
    desc.annotations = annotations;
    Ok(Attachment {
        subject,
        manifest: desc,
        config,
        document: doc,
    })
}

/// `a` for a registry that refuses manifests carrying `subject` (Docker Hub and older
/// Harbor/Quay, oras-project/oras#738): the same artifact manifest without `subject`, its bytes,
/// and the attachment describing it (the same subject, config and document; the manifest
/// descriptor with `artifactType` and annotations as a referrers index lists it). Its only link
/// to the subject is then the subject's referrers tag-schema index (`sha256-<hex>`), which is
/// also how cosign attaches signatures to such registries. Errors: the manifest cannot be read
/// from the layout or is not an image manifest.
pub fn without_subject(
    layout_dir: &Path,
    a: &Attachment,
) -> std::io::Result<(Attachment, Vec<u8>)> {
    let bytes = layout::read_blob(layout_dir, &a.manifest.digest)?;
    let mut manifest: Manifest = serde_json::from_slice(&bytes)
        .map_err(|e| std::io::Error::new(std::io::ErrorKind::InvalidData, e))?;
    manifest.subject = None;
    let bytes = spec::to_bytes(&manifest);
    let mut desc = Descriptor::of(spec::OCI_MANIFEST, &bytes);
    desc.artifact_type = manifest.artifact_type.clone();
    desc.annotations = manifest.annotations.clone();
    Ok((
        Attachment {
            manifest: desc,
            ..a.clone()
        },
        bytes,
    ))
}

/// Adds `referrers` to a referrers index (the tag-schema fallback), replacing entries with the
/// same digest and keeping all others, in a stable order (by digest).
pub fn merge_referrers(existing: Option<Index>, referrers: &[Descriptor]) -> Index {
    let mut index = existing.unwrap_or(Index {
        schema_version: 2,
        media_type: spec::OCI_INDEX.to_string(),
        artifact_type: None,
        manifests: vec![],
        subject: None,
        annotations: BTreeMap::new(),
    });
    index
        .manifests
        .retain(|m| !referrers.iter().any(|r| r.digest == m.digest));
    index.manifests.extend(referrers.iter().cloned());
    index.manifests.sort_by(|a, b| a.digest.cmp(&b.digest));
    index
}
