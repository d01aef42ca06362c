//! Publish stage: push an image from the OCI layout in the order registries require
//! (distribution-spec: a manifest's blobs must exist before it, an index's manifests before it):
//! blobs first (skipping those present), then each platform manifest by digest, then the index
//! by tag. The tag is the last write, so it never points at a half-pushed image.

use bytes::Bytes;

use super::{ErrorKind, Registry, RegistryError};
use crate::reference::RepositoryName;
use crate::util::short;
use std::collections::{BTreeMap, BTreeSet};

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
    /// Base layers mounted from the base's repository on the same registry.
    pub mounted: usize,
}

fn local_err(repo: &RepositoryName, operation: String, e: std::io::Error) -> RegistryError {
    RegistryError {
        registry: repo.registry.clone(),
        operation,
        message: e.to_string(),
        kind: ErrorKind::Other,
    }
}

/// How many blob uploads run at once.
pub const UPLOAD_CONCURRENCY: usize = 4;

/// Blob counts of a push.
#[derive(Debug, Clone, Copy, Default)]
struct Counts {
    uploaded: usize,
    skipped: usize,
    mounted: usize,
}

/// Pushes `blobs` (each once) from the layout, [`UPLOAD_CONCURRENCY`] at a time: skipped when
/// present, mounted from `mount.0` when listed in `mount.1` (base layers on the same registry),
/// uploaded otherwise. The first failure is returned; the other uploads are dropped.
async fn push_blobs(
    registry: &dyn Registry,
    repo: &RepositoryName,
    layout_dir: &std::path::Path,
    blobs: &[Descriptor],
    mount: Option<(&RepositoryName, &BTreeSet<String>)>,
    on_bytes: &(dyn Fn(u64, u64) + Sync),
) -> Result<Counts, RegistryError> {
    use futures::{StreamExt, TryStreamExt};
    let mut unique: Vec<Descriptor> = Vec::new();
    for b in blobs {
        if !unique.iter().any(|u| u.digest == b.digest) {
            unique.push(b.clone());
        }
    }
    let total: u64 = unique.iter().map(|b| b.size).sum();
    let results: Vec<Counts> = futures::stream::iter(unique)
        .map(|blob: Descriptor| async move {
            let counts = push_one(registry, repo, layout_dir, &blob, mount).await?;
            on_bytes(blob.size, total);
            Ok::<_, RegistryError>(counts)
        })
        .buffer_unordered(UPLOAD_CONCURRENCY)
        .try_collect()
        .await?;
    Ok(results.iter().fold(Counts::default(), |a, c| Counts {
        uploaded: a.uploaded + c.uploaded,
        skipped: a.skipped + c.skipped,
        mounted: a.mounted + c.mounted,
    }))
}

/// One blob: skip when present, mount when listed in `mount`, else upload.
async fn push_one(
    registry: &dyn Registry,
    repo: &RepositoryName,
    layout_dir: &std::path::Path,
    blob: &Descriptor,
    mount: Option<(&RepositoryName, &BTreeSet<String>)>,
) -> Result<Counts, RegistryError> {
    if registry.blob_exists(repo, &blob.digest).await? {
        return Ok(Counts {
            skipped: 1,
            ..Counts::default()
        });
    }
    if let Some((from, digests)) = mount
        && digests.contains(&blob.digest)
        && registry.mount_blob(repo, from, &blob.digest).await
    {
        return Ok(Counts {
            mounted: 1,
            ..Counts::default()
        });
    }
    let data = layout::read_blob(layout_dir, &blob.digest).map_err(|e| {
        local_err(
            repo,
            format!("read blob {} from the layout", short(&blob.digest)),
            e,
        )
    })?;
    registry
        .push_blob(repo, &blob.digest, Bytes::from(data))
        .await?;
    Ok(Counts {
        uploaded: 1,
        ..Counts::default()
    })
}

/// Pushes `image` to `repo` under `image.tag`; see the module documentation. `on_bytes(n, total)`
/// hears about each blob handled.
///
/// After the tag is written the registry is asked which digest it serves under the tag; a
/// different answer is an error. Errors name the registry and the failed operation.
pub async fn publish(
    registry: &dyn Registry,
    repo: &RepositoryName,
    image: &BuiltImage,
    on_bytes: &(dyn Fn(u64, u64) + Sync),
) -> Result<Published, RegistryError> {
    let base = image
        .base_repository
        .as_deref()
        .and_then(|b| b.parse::<RepositoryName>().ok());
    let mount = base.as_ref().map(|b| (b, &image.base_layers));
    let counts = push_blobs(
        registry,
        repo,
        &image.layout_dir,
        &image.blobs(),
        mount,
        on_bytes,
    )
    .await?;
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
        uploaded: counts.uploaded,
        skipped: counts.skipped,
        mounted: counts.mounted,
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
    let blobs: Vec<Descriptor> = attachments
        .iter()
        .flat_map(|a| [a.config.clone(), a.document.clone()])
        .collect();
    push_blobs(registry, repo, layout_dir, &blobs, None, &|_, _| {}).await?;
    for a in attachments {
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::registry::memory::MemoryRegistry;
    use crate::testing;

    #[tokio::test]
    async fn blobs_then_platform_manifests_then_the_index_by_tag_then_a_check() {
        let f = testing::image("v1.34.1-occmforge.1");
        let reg = MemoryRegistry::new();
        let published = publish(&reg, &f.repo, &f.image, &|_, _| {}).await.unwrap();
        assert_eq!(published.digest, f.image.index.digest);
        let kinds: Vec<String> = reg
            .log()
            .iter()
            .filter(|o| o.kind != "blob_exists")
            .map(|o| o.to_string())
            .collect();
        let blobs = f.image.blobs().len();
        assert!(
            kinds[..blobs].iter().all(|k| k.starts_with("push_blob ")),
            "{kinds:?}"
        );
        let manifests: Vec<String> = f
            .image
            .platforms
            .iter()
            .map(|p| format!("push_manifest {}", p.manifest.digest))
            .collect();
        assert_eq!(kinds[blobs..blobs + 2], manifests[..]);
        assert_eq!(kinds[blobs + 2], "push_manifest v1.34.1-occmforge.1");
        assert_eq!(kinds[blobs + 3], "manifest_digest v1.34.1-occmforge.1");
        assert_eq!(kinds.len(), blobs + 4);

        // A second push finds every blob and uploads nothing.
        let again = publish(&reg, &f.repo, &f.image, &|_, _| {}).await.unwrap();
        assert_eq!((again.uploaded, again.skipped), (0, blobs));
    }

    #[tokio::test]
    async fn no_tag_points_at_a_half_pushed_image() {
        let f = testing::image("v1.34.1-occmforge.1");
        let reg = MemoryRegistry::new();
        let second = f.image.platforms[1].manifest.digest.clone();
        reg.fail_when(move |op| {
            (op.kind == "push_manifest" && op.reference == second).then_some(ErrorKind::Other)
        });
        assert!(publish(&reg, &f.repo, &f.image, &|_, _| {}).await.is_err());
        assert!(
            reg.repository(&f.repo).tags.is_empty(),
            "the tag was written"
        );
        reg.heal();
        publish(&reg, &f.repo, &f.image, &|_, _| {}).await.unwrap();
        assert_eq!(
            reg.repository(&f.repo).tags["v1.34.1-occmforge.1"],
            f.image.index.digest
        );
    }

    #[tokio::test]
    async fn referrers_fallback_index_keeps_other_referrers() {
        let f = testing::image("v1.34.1-occmforge.1");
        let reg = MemoryRegistry::new();
        publish(&reg, &f.repo, &f.image, &|_, _| {}).await.unwrap();
        // Someone else's referrer of the index (a signature) is there first.
        let signature = referrer::attach(
            &f.image.layout_dir,
            &f.image.index,
            "application/vnd.dev.cosign.artifact.sig.v1+json",
            b"signature",
            0,
        )
        .unwrap();
        publish_attachments(
            &reg,
            &f.repo,
            &f.image.layout_dir,
            std::slice::from_ref(&signature),
        )
        .await
        .unwrap();
        // Ours, pushed twice: listed once each, the signature kept.
        for _ in 0..2 {
            let n = publish_attachments(&reg, &f.repo, &f.image.layout_dir, &f.attachments)
                .await
                .unwrap();
            assert_eq!(n, 3);
        }
        let read = |subject: &str| -> Vec<String> {
            let repo = reg.repository(&f.repo);
            let digest = &repo.tags[&referrer::fallback_tag(subject)];
            let index: Index = serde_json::from_slice(&repo.manifests[digest].1).unwrap();
            index.manifests.into_iter().map(|m| m.digest).collect()
        };
        let provenance = &f.attachments[2].manifest.digest;
        let mut want = vec![signature.manifest.digest.clone(), provenance.clone()];
        want.sort();
        assert_eq!(read(&f.image.index.digest), want);
        for (p, sbom) in f.image.platforms.iter().zip(&f.attachments) {
            assert_eq!(
                read(&p.manifest.digest),
                std::slice::from_ref(&sbom.manifest.digest)
            );
        }
    }
}
