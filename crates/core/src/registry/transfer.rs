//! The one blob-and-referrers transfer that publish (from the OCI layout), copy (from another
//! repository) and the signatures and attestations they carry all use:
//!
//! - [`transfer_blobs`]: each distinct blob once, [`CONCURRENCY`] at a time — skipped when the
//!   target has it, mounted when the source says it may be (distribution-spec "Mounting a blob
//!   from another repository"), else read and uploaded;
//! - [`push_manifests`]: manifests by digest, byte for byte, in the order given (the platform
//!   manifests before the index that names them, referrers after their subject);
//! - [`read_tag_schemas`]: before anything is pushed, the subjects' tag-schema indexes, and a
//!   check that a registry keeping tags immutable lets the ones that must change be rewritten;
//! - [`write_referrers_index`]: a subject's referrers tag-schema index `sha256-<hex>`
//!   (distribution-spec "Referrers Tag Schema", for registries without the referrers API such as
//!   distribution 2.8), merged with what is there and keeping other tools' referrers (cosign's);
//! - [`tag_last`]: the index under its tag, the last write, and a check that the tag serves it.

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;

use bytes::Bytes;

use super::{ErrorKind, Registry, RegistryError};
use crate::base::reference::RepositoryName;
use crate::base::util::short;
use crate::image::layout;
use crate::image::referrer::{fallback_tag, merge_referrers};
use crate::image::spec::{self, Descriptor, Index};

/// How many blobs move at once.
pub const CONCURRENCY: usize = 4;

/// Where the blobs come from.
#[derive(Debug, Clone, Copy)]
pub enum BlobSource<'a> {
    /// An OCI layout directory; the blobs listed in `mount` are mounted from `mount.0` (the base
    /// image's repository) when the target's registry lets them.
    Layout {
        /// The layout directory.
        dir: &'a Path,
        /// The base's repository and its layer digests.
        mount: Option<(&'a RepositoryName, &'a BTreeSet<String>)>,
    },
    /// Another repository, through the same [`Registry`]; mounted when it is on the target's
    /// registry, else pulled (verified against its digest by the client) and uploaded.
    Repository(&'a RepositoryName),
}

/// Blob counts of a transfer.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Transferred {
    /// Blobs uploaded.
    pub uploaded: usize,
    /// Blobs the target already had.
    pub present: usize,
    /// Blobs mounted from another repository on the same registry.
    pub mounted: usize,
}

impl std::ops::Add for Transferred {
    type Output = Transferred;
    fn add(self, o: Transferred) -> Transferred {
        Transferred {
            uploaded: self.uploaded + o.uploaded,
            present: self.present + o.present,
            mounted: self.mounted + o.mounted,
        }
    }
}

/// Transfers `blobs` (each distinct digest once) from `source` to `to`; `on_bytes(n, total)`
/// hears about each blob handled (sizes in bytes). The first failure is returned and the other
/// transfers are dropped. Errors name the registry and the operation; a layout blob that cannot
/// be read is [`ErrorKind::Other`] naming it.
pub async fn transfer_blobs(
    registry: &dyn Registry,
    to: &RepositoryName,
    blobs: &[Descriptor],
    source: BlobSource<'_>,
    on_bytes: &(dyn Fn(u64, u64) + Sync),
) -> Result<Transferred, RegistryError> {
    use futures::{StreamExt, TryStreamExt};
    // Owned descriptors: a stream of borrowed ones is not `Send` for every lifetime, which the
    // async stages need.
    let mut unique: Vec<Descriptor> = Vec::new();
    for b in blobs {
        if !unique.iter().any(|u| u.digest == b.digest) {
            unique.push(b.clone());
        }
    }
    let total: u64 = unique.iter().map(|b| b.size).sum();
    let counts: Vec<Transferred> = futures::stream::iter(unique)
        .map(|blob: Descriptor| async move {
            let c = transfer_one(registry, to, &blob, source).await?;
            on_bytes(blob.size, total);
            Ok::<_, RegistryError>(c)
        })
        .buffer_unordered(CONCURRENCY)
        .try_collect()
        .await?;
    Ok(counts
        .into_iter()
        .fold(Transferred::default(), |a, c| a + c))
}

/// One blob: present, mounted, or read and uploaded.
async fn transfer_one(
    registry: &dyn Registry,
    to: &RepositoryName,
    blob: &Descriptor,
    source: BlobSource<'_>,
) -> Result<Transferred, RegistryError> {
    // The existence check only saves an upload (distribution-spec "Checking if content exists
    // in the registry"): a registry that keeps failing it with server errors (distribution after
    // a crash mid-upload answers 500 for the blob it was writing) gets the blob uploaded, which
    // by digest is the same content; refusals and other errors still end the push.
    let exists = match registry.blob_exists(to, &blob.digest).await {
        Ok(exists) => exists,
        Err(e) if e.kind == crate::registry::ErrorKind::Transient => {
            tracing::warn!("{e}; uploading the blob instead");
            false
        }
        Err(e) => return Err(e),
    };
    if exists {
        return Ok(Transferred {
            present: 1,
            ..Transferred::default()
        });
    }
    let mount_from = match source {
        BlobSource::Layout {
            mount: Some((from, digests)),
            ..
        } if digests.contains(&blob.digest) => Some(from),
        BlobSource::Repository(from) if from.registry == to.registry => Some(from),
        _ => None,
    };
    if let Some(from) = mount_from
        && registry.mount_blob(to, from, &blob.digest).await
    {
        return Ok(Transferred {
            mounted: 1,
            ..Transferred::default()
        });
    }
    let data = match source {
        BlobSource::Layout { dir, .. } => Bytes::from(
            layout::read_blob(dir, &blob.digest).map_err(|e| RegistryError {
                registry: to.registry.clone(),
                operation: format!("read blob {} from the layout", short(&blob.digest)),
                message: e.to_string(),
                kind: ErrorKind::Other,
            })?,
        ),
        BlobSource::Repository(from) => registry.pull_blob(from, &blob.digest).await?,
    };
    registry.push_blob(to, &blob.digest, data).await?;
    Ok(Transferred {
        uploaded: 1,
        ..Transferred::default()
    })
}

/// A manifest to push by digest: its exact bytes and media type.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ManifestBytes {
    /// `sha256:<hex>` of `bytes`.
    pub digest: String,
    /// The `Content-Type` it is pushed with (its `mediaType`).
    pub media_type: String,
    /// The exact bytes: what the digest is of.
    pub bytes: Bytes,
}

/// Pushes each manifest to `to` by its digest, byte for byte, in order; the first failure is
/// returned.
pub async fn push_manifests(
    registry: &dyn Registry,
    to: &RepositoryName,
    manifests: &[ManifestBytes],
) -> Result<(), RegistryError> {
    for m in manifests {
        registry
            .push_manifest(to, &m.digest, &m.media_type, m.bytes.clone())
            .await?;
    }
    Ok(())
}

/// Pushes `index` under `tag` in `to` (the last write of a push or a copy, so that no tag points
/// at a half-written image) and asks the registry which digest the tag serves now. A tag that
/// already serves `index` is not pushed again (a registry keeping tags immutable refuses even
/// that).
///
/// # Errors
/// The push fails, or the tag serves another digest than `index.digest` (`serves <digest>
/// instead of the <done> <index digest>`, `done` being `pushed` or `copied`).
pub async fn tag_last(
    registry: &dyn Registry,
    to: &RepositoryName,
    tag: &str,
    index: &ManifestBytes,
    done: &str,
) -> Result<(), RegistryError> {
    if registry.manifest_digest(to, tag).await?.as_deref() != Some(index.digest.as_str()) {
        registry
            .push_manifest(to, tag, &index.media_type, index.bytes.clone())
            .await?;
    }
    let served = registry.manifest_digest(to, tag).await?;
    if served.as_deref() != Some(index.digest.as_str()) {
        return Err(RegistryError {
            registry: to.registry.clone(),
            operation: format!("verify tag {tag}"),
            message: format!(
                "serves {} instead of the {done} {}",
                served.as_deref().unwrap_or("nothing"),
                index.digest
            ),
            kind: ErrorKind::Other,
        });
    }
    Ok(())
}

/// Writes `subject`'s referrers tag-schema index `sha256-<hex>` on `repo` so that it lists
/// `referrers` (whose manifests must already be there):
///
/// - when the registry has the referrers API and it lists every one of `referrers` (they carry
///   `subject`), nothing: the tag schema is for registries without the API, and a registry with
///   it may keep tags immutable (Harbor's tag immutability, ECR's `IMMUTABLE`);
/// - when `repo` has none and `preferred` (another repository's index, byte for byte) lists
///   every one of `referrers`, `preferred` as it is (copy keeps every digest);
/// - when `repo` already has exactly `preferred`, nothing;
/// - else the index there (if any) merged with `referrers` ([`merge_referrers`]: replaced by
///   digest, others kept), less the entries whose manifest the registry no longer has (a
///   deleted referrer would make the registry refuse the index: `MANIFEST_BLOB_UNKNOWN`).
///
/// Bytes equal to what the tag serves are never sent again. `read` holds what
/// [`read_tag_schemas`] read before the pushes (used instead of asking again).
///
/// Errors: the registry cannot be asked, or refuses the index (an immutable tag gets the rule to
/// change named, [`immutable_tag`]).
pub async fn write_referrers_index(
    registry: &dyn Registry,
    repo: &RepositoryName,
    subject: &str,
    referrers: &[Descriptor],
    preferred: Option<&Bytes>,
    read: Option<&TagSchemas>,
) -> Result<(), RegistryError> {
    let tag = fallback_tag(subject);
    let existing = match read.and_then(|r| r.get(subject)) {
        Some(known) => known.clone(),
        None => match tag_schema_to_merge(registry, repo, subject, referrers).await? {
            Some(existing) => existing,
            None => return Ok(()),
        },
    };
    let parse = |bytes: &[u8]| {
        serde_json::from_slice::<Index>(bytes).map_err(|e| RegistryError {
            registry: repo.registry.clone(),
            operation: format!("read referrers index {tag}"),
            message: e.to_string(),
            kind: ErrorKind::Other,
        })
    };
    let (media_type, body) = match (preferred, &existing) {
        (Some(p), None) if lists_all(p, referrers) => (parse(p)?.media_type, p.clone()),
        (Some(p), Some(there)) if p == there => return Ok(()),
        _ => {
            let mut index = existing.as_deref().map(parse).transpose()?;
            if let Some(index) = index.as_mut() {
                let mut kept = Vec::new();
                for m in std::mem::take(&mut index.manifests) {
                    if referrers.iter().any(|r| r.digest == m.digest)
                        || registry.manifest_digest(repo, &m.digest).await?.is_some()
                    {
                        kept.push(m);
                    } else {
                        tracing::info!(
                            "{repo}: {tag} listed {}, which the registry no longer has; left out",
                            short(&m.digest)
                        );
                    }
                }
                index.manifests = kept;
            }
            let merged = merge_referrers(index, referrers);
            (
                merged.media_type.clone(),
                Bytes::from(spec::to_bytes(&merged)),
            )
        }
    };
    let media_type = if media_type.is_empty() {
        spec::OCI_INDEX.to_string()
    } else {
        media_type
    };
    if existing.as_ref() == Some(&body) {
        return Ok(());
    }
    registry
        .push_manifest(repo, &tag, &media_type, body)
        .await
        .map_err(|e| immutable_tag(e, &tag, SCHEMA_REASON))
}

/// Why a tag-schema index must be rewritten, for [`immutable_tag`].
const SCHEMA_REASON: &str =
    "it has no referrers API, so the referrers tag schema must be rewritten";

/// A subject whose referrers are about to be pushed, as [`read_tag_schemas`] checks it.
#[derive(Debug, Clone)]
pub struct Planned<'a> {
    /// The subject's digest.
    pub subject: &'a str,
    /// The referrers as they may be listed, each form complete (publish: with `subject`, or
    /// pushed without it); an index listing every descriptor of one form needs no rewrite.
    pub forms: Vec<Vec<Descriptor>>,
    /// Another repository's index that will be written as it is (copy), if any.
    pub preferred: Option<&'a Bytes>,
}

/// Per subject, the tag-schema index bytes [`read_tag_schemas`] read (`None`: no index yet),
/// for the subjects whose registry has no referrers API.
pub type TagSchemas = BTreeMap<String, Option<Bytes>>;

/// Before anything is pushed: reads each `planned` subject's referrers (one listing, as
/// [`write_referrers_index`] would), and where the registry has no referrers API and the
/// `sha256-<hex>` index there must change, finds out whether the registry lets that tag change
/// ([`probe_rewrite`]). A registry keeping tags immutable refuses it — Harbor any push to an
/// existing tag (its immutable middleware, `handlePush`), ECR's `IMMUTABLE` a push of other
/// bytes — so its refusal, and the rule to change, come before any blob or bundle is pushed
/// instead of after, when the bundles would be stranded.
///
/// Errors: the registry cannot be asked, or refuses the put as an immutable tag
/// ([`immutable_tag`]); any other refusal of the put is left to the write.
pub async fn read_tag_schemas(
    registry: &dyn Registry,
    repo: &RepositoryName,
    planned: &[Planned<'_>],
) -> Result<TagSchemas, RegistryError> {
    use super::referrers::{Source, pages};
    let mut read = TagSchemas::new();
    for p in planned {
        let listing = pages(registry, repo, p.subject).await?;
        if listing.source == Source::Api {
            continue;
        }
        if let Some(there) = &listing.tag_schema
            && p.preferred != Some(there)
            && !p.forms.iter().any(|f| lists_all(there, f))
        {
            probe_rewrite(
                registry,
                repo,
                &fallback_tag(p.subject),
                there,
                SCHEMA_REASON,
            )
            .await?;
        }
        read.insert(p.subject.to_string(), listing.tag_schema);
    }
    Ok(read)
}

/// The tag-schema index there is to merge `referrers` into (its bytes, or `Some(None)` when
/// there is none yet), read once with the listing; `None` when nothing is to be written: the
/// registry has the referrers API and it lists every one of `referrers`.
async fn tag_schema_to_merge(
    registry: &dyn Registry,
    repo: &RepositoryName,
    subject: &str,
    referrers: &[Descriptor],
) -> Result<Option<Option<Bytes>>, RegistryError> {
    use super::referrers::{Source, pages, read_tag_schema};
    let listing = pages(registry, repo, subject).await?;
    match listing.source {
        Source::TagSchema => Ok(Some(listing.tag_schema)),
        Source::Api
            if referrers
                .iter()
                .all(|r| listing.manifests.iter().any(|l| l.digest == r.digest)) =>
        {
            Ok(None)
        }
        // Referrers the API does not list (pushed without `subject`): the tag schema.
        Source::Api => Ok(Some(
            read_tag_schema(registry, repo, subject)
                .await?
                .map(|(bytes, _)| bytes),
        )),
    }
}

/// Finds out, without changing what it lists, whether the registry lets tag `tag` (which serves
/// the manifest or index `existing`) change: puts under it a copy of `existing` that differs in
/// one annotation, `dev.occm-forge.rewrite-check` (added, or removed where a previous check left
/// it): the same manifests, layers or referrers, other bytes. A registry that keeps the tag
/// immutable refuses that, as it would refuse the real write later; elsewhere the tag serves the
/// equivalent copy until the real write replaces it.
///
/// Errors: an immutable refusal, as [`immutable_tag`] with `why` (the tag must change because
/// …); the registry cannot be asked. Any other refusal of the copy is left to the real write.
pub async fn probe_rewrite(
    registry: &dyn Registry,
    repo: &RepositoryName,
    tag: &str,
    existing: &Bytes,
    why: &str,
) -> Result<(), RegistryError> {
    const KEY: &str = "dev.occm-forge.rewrite-check";
    let Ok(mut v) = serde_json::from_slice::<serde_json::Value>(existing) else {
        return Ok(());
    };
    let media_type = v["mediaType"]
        .as_str()
        .filter(|m| !m.is_empty())
        .unwrap_or(spec::OCI_INDEX)
        .to_string();
    let Some(object) = v.as_object_mut() else {
        return Ok(());
    };
    let annotations = object
        .entry("annotations")
        .or_insert_with(|| serde_json::json!({}));
    if let Some(a) = annotations.as_object_mut()
        && a.remove(KEY).is_none()
    {
        a.insert(KEY.into(), "a tag occm-forge must rewrite".into());
    }
    if annotations.as_object().is_some_and(|a| a.is_empty()) {
        object.remove("annotations");
    }
    let changed = Bytes::from(serde_json::to_vec(&v).expect("JSON serialises"));
    match registry
        .push_manifest(repo, tag, &media_type, changed)
        .await
    {
        Err(e) if is_immutable(&e) => Err(RegistryError {
            operation: format!("check that {tag} can be rewritten, before any push"),
            ..immutable_tag(e, tag, why)
        }),
        // Anything else (the index lists a referrer since deleted: 400 MANIFEST_BLOB_UNKNOWN)
        // is for the real write to mend or say.
        Err(e) => {
            tracing::debug!("{repo}: checking that {tag} can be rewritten: {e}");
            Ok(())
        }
        Ok(()) => Ok(()),
    }
}

/// A refused write of tag `tag`, said as a tag the registry keeps immutable when it reads as
/// one — a message naming immutability or the precondition (Harbor's 412 `PRECONDITION` …
/// `configured as immutable`), ECR's `TAG_INVALID` … `cannot be overwritten because the
/// repository is immutable` or `ImageTagAlreadyExistsException` — with why the tag must change
/// (`why`) and the rule to change.
pub fn immutable_tag(e: RegistryError, tag: &str, why: &str) -> RegistryError {
    if !is_immutable(&e) {
        return e;
    }
    RegistryError {
        message: format!(
            "{}; the registry keeps the tag {tag} immutable, and {why}: exclude tags matching `sha256-*` from the immutability rule (Harbor: the project's tag immutability rule; ECR: IMMUTABLE_WITH_EXCLUSION with the filter sha256-*)",
            e.message
        ),
        ..e
    }
}

/// Whether a refused push reads as a tag the registry keeps immutable (see [`immutable_tag`]).
fn is_immutable(e: &RegistryError) -> bool {
    let m = e.message.to_ascii_lowercase();
    // Not the bare status: a digest in the message may hold "412".
    e.kind == ErrorKind::Refused
        && ["immutable", "precondition", "alreadyexists"]
            .iter()
            .any(|w| m.contains(w))
}

/// Whether index bytes `index` list every one of `descriptors`.
fn lists_all(index: &[u8], descriptors: &[Descriptor]) -> bool {
    serde_json::from_slice::<Index>(index).is_ok_and(|i| {
        descriptors
            .iter()
            .all(|d| i.manifests.iter().any(|m| m.digest == d.digest))
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_an_immutability_refusal_is_said_as_one() {
        let refused = |message: &str| RegistryError {
            registry: "r.example".into(),
            operation: "push manifest".into(),
            message: message.into(),
            kind: ErrorKind::Refused,
        };
        let harbor = immutable_tag(
            refused("PRECONDITION: the image occm:sha256-ab configured as immutable"),
            "sha256-ab",
            SCHEMA_REASON,
        );
        assert!(harbor.message.contains("exclude tags matching `sha256-*`"));
        let other = refused("MANIFEST_INVALID: sha256:4120aa… is not allowed here");
        assert_eq!(
            immutable_tag(other.clone(), "sha256-ab", SCHEMA_REASON).message,
            other.message
        );
    }
    use crate::registry::memory::MemoryRegistry;

    fn repo() -> RepositoryName {
        "registry.example/occm".parse().unwrap()
    }

    async fn manifest(reg: &MemoryRegistry, n: u8) -> Descriptor {
        let body = format!(
            "{{\"schemaVersion\":2,\"mediaType\":\"{}\",\"n\":{n}}}",
            spec::OCI_MANIFEST
        );
        let d = Descriptor::of(spec::OCI_MANIFEST, body.as_bytes());
        reg.push_manifest(&repo(), &d.digest, spec::OCI_MANIFEST, Bytes::from(body))
            .await
            .unwrap();
        d
    }

    async fn listed(reg: &MemoryRegistry, subject: &str) -> Vec<String> {
        let bytes = reg
            .pull_manifest(&repo(), &fallback_tag(subject))
            .await
            .unwrap();
        let i: Index = serde_json::from_slice(&bytes).unwrap();
        i.manifests.into_iter().map(|m| m.digest).collect()
    }

    #[tokio::test]
    async fn a_referrers_index_keeps_others_and_drops_what_the_registry_no_longer_has() {
        let reg = MemoryRegistry::new();
        let subject = format!("sha256:{}", "a".repeat(64));
        let (cosign, deleted, ours) = (
            manifest(&reg, 1).await,
            manifest(&reg, 2).await,
            manifest(&reg, 3).await,
        );
        write_referrers_index(
            &reg,
            &repo(),
            &subject,
            &[cosign.clone(), deleted.clone()],
            None,
            None,
        )
        .await
        .unwrap();
        reg.delete_manifest(&repo(), &deleted.digest);
        write_referrers_index(
            &reg,
            &repo(),
            &subject,
            std::slice::from_ref(&ours),
            None,
            None,
        )
        .await
        .unwrap();
        let mut want = vec![cosign.digest, ours.digest];
        want.sort();
        assert_eq!(listed(&reg, &subject).await, want);
    }

    #[tokio::test]
    async fn another_repositorys_index_is_kept_byte_for_byte_when_it_lists_every_referrer() {
        let reg = MemoryRegistry::new();
        let subject = format!("sha256:{}", "b".repeat(64));
        let (a, b) = (manifest(&reg, 1).await, manifest(&reg, 2).await);
        let source = Bytes::from(spec::to_bytes(&merge_referrers(
            None,
            &[a.clone(), b.clone()],
        )));
        // Pretty-printed, so that byte equality is not an accident of our serialisation.
        let source = Bytes::from(
            serde_json::to_vec_pretty(
                &serde_json::from_slice::<serde_json::Value>(&source).unwrap(),
            )
            .unwrap(),
        );
        write_referrers_index(
            &reg,
            &repo(),
            &subject,
            &[a.clone(), b.clone()],
            Some(&source),
            None,
        )
        .await
        .unwrap();
        let there = reg
            .pull_manifest(&repo(), &fallback_tag(&subject))
            .await
            .unwrap();
        assert_eq!(there, source);
    }
}
