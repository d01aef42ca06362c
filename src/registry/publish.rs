//! Publish stage: push an image from the OCI layout in the order registries require
//! (distribution-spec: a manifest's blobs must exist before it, an index's manifests before it):
//! blobs first (skipping those present), then each platform manifest by digest, then the index
//! by tag. The tag is the last write, so it never points at a half-pushed image.

use bytes::Bytes;

use super::{ErrorKind, Registry, RegistryError, RepositoryName, short};
use std::collections::BTreeMap;

use crate::image::referrer::{self, Attachment};
use crate::image::spec::{self, Descriptor, Index};
use crate::image::{BuiltImage, layout};

/// The result of a push.
#[derive(Debug, Clone)]
pub struct Published {
    /// `repository:tag@sha256:<hex>`.
    pub reference: String,
    /// The digest the registry serves under the tag (sha256 of the exact index bytes pushed).
    pub digest: String,
    /// Blobs uploaded.
    pub uploaded: usize,
    /// Blobs skipped because the registry already had them.
    pub skipped: usize,
}

fn local_err(repo: &RepositoryName, operation: String, e: std::io::Error) -> RegistryError {
    RegistryError {
        registry: repo.registry.clone(),
        operation,
        message: e.to_string(),
        kind: ErrorKind::Other,
    }
}

/// Pushes `image` to `repo` under `image.tag`; see the module documentation.
///
/// After the tag is written the registry is asked which digest it serves under the tag; a
/// different answer is an error. Errors name the registry and the failed operation.
pub async fn publish(
    registry: &dyn Registry,
    repo: &RepositoryName,
    image: &BuiltImage,
) -> Result<Published, RegistryError> {
    let (mut uploaded, mut skipped) = (0, 0);
    for blob in image.blobs() {
        if registry.blob_exists(repo, &blob.digest).await? {
            skipped += 1;
            continue;
        }
        let data = layout::read_blob(&image.layout_dir, &blob.digest).map_err(|e| {
            local_err(
                repo,
                format!("read blob {} from the layout", short(&blob.digest)),
                e,
            )
        })?;
        registry
            .push_blob(repo, &blob.digest, Bytes::from(data))
            .await?;
        uploaded += 1;
    }
    for p in &image.platforms {
        let body = layout::read_blob(&image.layout_dir, &p.manifest.digest).map_err(|e| {
            local_err(
                repo,
                format!("read manifest {}", short(&p.manifest.digest)),
                e,
            )
        })?;
        registry
            .push_manifest(
                repo,
                &p.manifest.digest,
                &p.manifest.media_type,
                Bytes::from(body),
            )
            .await?;
    }
    let body = layout::read_blob(&image.layout_dir, &image.index.digest).map_err(|e| {
        local_err(
            repo,
            format!("read index {}", short(&image.index.digest)),
            e,
        )
    })?;
    registry
        .push_manifest(repo, &image.tag, &image.index.media_type, Bytes::from(body))
        .await?;
    let served = registry.manifest_digest(repo, &image.tag).await?;
    if served.as_deref() != Some(image.index.digest.as_str()) {
        return Err(RegistryError {
            registry: repo.registry.clone(),
            operation: format!("verify tag {}", image.tag),
            message: format!(
                "serves {} instead of the pushed {}",
                served.as_deref().unwrap_or("nothing"),
                image.index.digest
            ),
            kind: ErrorKind::Other,
        });
    }
    Ok(Published {
        reference: format!("{repo}:{}@{}", image.tag, image.index.digest),
        digest: image.index.digest.clone(),
        uploaded,
        skipped,
    })
}

/// Pushes attachments (SBOM, provenance) after their subjects: the empty config and the document
/// blobs (skipping those present), the referrer manifest by digest, then — for registries without
/// the referrers API, such as distribution 2.8 — the tag-schema fallback index `sha256-<hex>` of
/// each subject, read, merged (other referrers kept) and written back.
pub async fn publish_attachments(
    registry: &dyn Registry,
    repo: &RepositoryName,
    layout_dir: &std::path::Path,
    attachments: &[Attachment],
) -> Result<usize, RegistryError> {
    for a in attachments {
        for blob in [&a.config, &a.document] {
            if registry.blob_exists(repo, &blob.digest).await? {
                continue;
            }
            let data = layout::read_blob(layout_dir, &blob.digest)
                .map_err(|e| local_err(repo, format!("read blob {}", short(&blob.digest)), e))?;
            registry
                .push_blob(repo, &blob.digest, Bytes::from(data))
                .await?;
        }
        let body = layout::read_blob(layout_dir, &a.manifest.digest).map_err(|e| {
            local_err(
                repo,
                format!("read manifest {}", short(&a.manifest.digest)),
                e,
            )
        })?;
        registry
            .push_manifest(
                repo,
                &a.manifest.digest,
                &a.manifest.media_type,
                Bytes::from(body),
            )
            .await?;
    }
    let mut by_subject: BTreeMap<&str, Vec<Descriptor>> = BTreeMap::new();
    for a in attachments {
        by_subject
            .entry(&a.subject.digest)
            .or_default()
            .push(a.manifest.clone());
    }
    for (subject, referrers) in by_subject {
        let tag = referrer::fallback_tag(subject);
        let existing = match registry.pull_manifest(repo, &tag).await {
            Ok(bytes) => {
                Some(
                    serde_json::from_slice::<Index>(&bytes).map_err(|e| RegistryError {
                        registry: repo.registry.clone(),
                        operation: format!("read referrers index {tag}"),
                        message: e.to_string(),
                        kind: ErrorKind::Other,
                    })?,
                )
            }
            Err(e) if e.kind == ErrorKind::NotFound => None,
            Err(e) => return Err(e),
        };
        let index = referrer::merge_referrers(existing, &referrers);
        registry
            .push_manifest(
                repo,
                &tag,
                &index.media_type,
                Bytes::from(spec::to_bytes(&index)),
            )
            .await?;
    }
    Ok(attachments.len())
}
