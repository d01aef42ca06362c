//! `occm-forge copy`: the published image of one minor, copied to another repository with every
//! digest unchanged, checked there, and recorded as a mirror of the digest-manifest entry.
//!
//! Why: magnum-cluster-api takes the OCCM repository from the cluster's `container_infra_prefix`
//! (`<prefix>/openstack-cloud-controller-manager`), and Atmosphere deployments already point that
//! prefix at their in-cloud registry. Copying the image there lets such clusters use the pinned
//! image through `cloud_provider_tag` alone (`render --format magnum-tag`), without moving any
//! other image.
//!
//! What is copied, all through [`Registry`] (the credentials, TLS and retry rules of a push), all
//! byte for byte (the registry stores exactly the pulled manifest bytes, so digests cannot change):
//! every blob (config, layers, attachment documents; mounted instead of uploaded when source and
//! target share a registry, skipped when present), every platform manifest by digest, the image
//! index by digest, the referrers (SBOM and provenance artifact manifests, the signature and
//! attestation bundles, and any other referrer the source lists, cosign's included) by digest, the referrers tag-schema fallback index `sha256-<hex>` of each
//! subject, and last the tag. The tag is the last write, so it never points at a half-copied image;
//! a target tag that already serves another digest is refused (tags never move).

use std::collections::{BTreeMap, BTreeSet};

use bytes::Bytes;

use crate::base::reference::RepositoryName;
use crate::base::util::short;
use crate::commands::verify::{self, Finding};
use crate::config::{Config, Minor};
use crate::digest_manifest::{self, DigestManifestError, Entry};
use crate::image::spec::{self, Descriptor, Index, Manifest};
use crate::pipeline::record;
use crate::registry::publish::ReferrersPushed;
use crate::registry::transfer::{
    BlobSource, ManifestBytes, Planned, immutable_tag, push_manifests, read_tag_schemas, tag_last,
    transfer_blobs, write_referrers_index,
};
use crate::registry::{ErrorKind, Registry, RegistryError};

/// What [`copy_image`] did.
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Serialize)]
pub struct Copied {
    /// `<target>:<tag>@<digest>`.
    pub reference: String,
    /// Image manifests copied (the platform manifests; the index not counted).
    pub manifests: usize,
    /// Referrer (artifact) manifests copied.
    pub referrers: usize,
    /// Blobs pulled from the source and uploaded.
    pub uploaded: usize,
    /// Blobs the target already had.
    pub present: usize,
    /// Blobs mounted from the source repository (same registry).
    pub mounted: usize,
}

fn other(repo: &RepositoryName, operation: String, message: String) -> RegistryError {
    RegistryError {
        registry: repo.registry.clone(),
        operation,
        message,
        kind: ErrorKind::Other,
    }
}

fn parse<T: serde::de::DeserializeOwned>(
    repo: &RepositoryName,
    what: &str,
    digest: &str,
    bytes: &[u8],
) -> Result<T, RegistryError> {
    serde_json::from_slice(bytes).map_err(|e| {
        other(
            repo,
            format!("read {what} {}", short(digest)),
            e.to_string(),
        )
    })
}

/// Copies `entry`'s image from `entry.repository` to `to`; see the module documentation.
/// `on_bytes(n, total)` hears about every blob handled. Errors name the registry and operation.
pub async fn copy_image(
    registry: &dyn Registry,
    entry: &Entry,
    to: &RepositoryName,
    on_bytes: &(dyn Fn(u64, u64) + Sync),
) -> Result<Copied, RegistryError> {
    let from: RepositoryName = entry
        .repository
        .parse()
        .map_err(|e: String| other(to, "parse the source repository".into(), e))?;
    refuse_moved_tag(registry, to, entry).await?;

    // Read everything first: the index, its manifests, the referrers and their blobs.
    let image = read_image(registry, &from, &entry.digest).await?;
    let mut subjects: Vec<String> = vec![entry.digest.clone()];
    subjects.extend(image.manifests.iter().map(|m| m.digest.clone()));
    let referrers = read_referrers(registry, &from, &subjects, &recorded_referrers(entry)).await?;
    let tagged = read_cosign_tags(registry, &from, &entry.digest).await?;

    // Write: blobs, platform manifests, the index by digest, referrers, fallback indexes,
    // cosign's tags, tag. A tag that must change is first checked to be changeable.
    let blobs: Vec<Descriptor> = image
        .blobs
        .iter()
        .chain(&referrers.blobs)
        .chain(tagged.iter().flat_map(|t| &t.blobs))
        .cloned()
        .collect();
    let planned: Vec<Planned> = referrers
        .fallbacks
        .iter()
        .map(|f| Planned {
            subject: &f.subject,
            forms: vec![f.descriptors.clone()],
            preferred: f.listed.as_ref(),
        })
        .collect();
    let read = read_tag_schemas(registry, to, &planned).await?;
    let changed_tags = cosign_tags_to_change(registry, to, &tagged).await?;
    let moved = transfer_blobs(
        registry,
        to,
        &blobs,
        BlobSource::Repository(&from),
        on_bytes,
    )
    .await?;
    let mut copied = Copied {
        uploaded: moved.uploaded,
        present: moved.present,
        mounted: moved.mounted,
        ..Copied::default()
    };
    push_manifests(registry, to, &image.manifests).await?;
    push_manifests(registry, to, std::slice::from_ref(&image.index)).await?;
    push_manifests(registry, to, &referrers.manifests)
        .await
        .map_err(|e| explain_refused_subject(e, &referrers.manifests))?;
    let stranded = |e: RegistryError| stranded(e, &referrers.manifests);
    for fallback in &referrers.fallbacks {
        write_referrers_index(
            registry,
            to,
            &fallback.subject,
            &fallback.descriptors,
            fallback.listed.as_ref(),
            Some(&read),
        )
        .await
        .map_err(stranded)?;
    }
    for t in tagged.iter().filter(|t| changed_tags.contains(&t.tag)) {
        registry
            .push_manifest(to, &t.tag, &t.manifest.media_type, t.manifest.bytes.clone())
            .await
            .map_err(|e| immutable_tag(e, &t.tag, COSIGN_REASON))
            .map_err(stranded)?;
    }
    tag_last(registry, to, &entry.tag, &image.index, "copied").await?;
    copied.reference = format!("{to}:{}@{}", entry.tag, entry.digest);
    copied.manifests = image.manifests.len();
    copied.referrers = referrers.manifests.len();
    Ok(copied)
}

/// Why a cosign tag must change, for [`immutable_tag`].
const COSIGN_REASON: &str =
    "the image was signed again, so cosign's tag must serve the new signatures";

/// A manifest under one of cosign's tags of the index at the source ([`signing::tags`]).
struct CosignTag {
    /// `sha256-<hex>.sig`, `.att` or `.sbom`.
    tag: String,
    /// The manifest, byte for byte.
    manifest: ManifestBytes,
    /// Its config and layers.
    blobs: Vec<Descriptor>,
}

/// cosign's tags of `index` in `from` (`.sig`, `.att`, `.sbom`), those that exist.
async fn read_cosign_tags(
    registry: &dyn Registry,
    from: &RepositoryName,
    index: &str,
) -> Result<Vec<CosignTag>, RegistryError> {
    let mut out = Vec::new();
    for suffix in crate::signing::tags::SUFFIXES {
        let tag = crate::signing::tags::tag(index, suffix);
        let Some(bytes) = crate::registry::if_present(registry.pull_manifest(from, &tag).await)?
        else {
            continue;
        };
        let m: Manifest = parse(from, "cosign's manifest", &tag, &bytes)?;
        let mut blobs = vec![m.config.clone()];
        blobs.extend(m.layers.iter().cloned());
        out.push(CosignTag {
            manifest: ManifestBytes {
                digest: crate::base::util::sha256_digest(&bytes),
                media_type: if m.media_type.is_empty() {
                    spec::OCI_MANIFEST.to_string()
                } else {
                    m.media_type.clone()
                },
                bytes,
            },
            tag,
            blobs,
        });
    }
    Ok(out)
}

/// The cosign tags that must be written at `to` (absent there, or serving other bytes), each
/// that exists checked to be changeable before anything is pushed
/// ([`crate::registry::transfer::probe_rewrite`]).
///
/// Errors: an immutable tag that must change (the rule named); the registry cannot be asked.
async fn cosign_tags_to_change(
    registry: &dyn Registry,
    to: &RepositoryName,
    tagged: &[CosignTag],
) -> Result<Vec<String>, RegistryError> {
    let mut changed = Vec::new();
    for t in tagged {
        let there = crate::registry::if_present(registry.pull_manifest(to, &t.tag).await)?;
        match there {
            Some(b) if crate::base::util::sha256_digest(&b) == t.manifest.digest => {}
            Some(b) => {
                crate::registry::transfer::probe_rewrite(registry, to, &t.tag, &b, COSIGN_REASON)
                    .await?;
                changed.push(t.tag.clone());
            }
            None => changed.push(t.tag.clone()),
        }
    }
    Ok(changed)
}

/// A tag refused after referrers were pushed, with the referrer manifests of this copy that no
/// index may list now (an immutable tag the checks before the pushes did not catch).
fn stranded(e: RegistryError, pushed: &[ManifestBytes]) -> RegistryError {
    if pushed.is_empty() || e.kind != ErrorKind::Refused {
        return e;
    }
    let digests: Vec<&str> = pushed.iter().map(|m| m.digest.as_str()).collect();
    RegistryError {
        message: format!(
            "{}; pushed before the refusal, and listed by no index there if the refused tag was to list them: {} ({})",
            e.message,
            digests.join(", "),
            digests.len()
        ),
        ..e
    }
}

/// Fails when `to` already has `entry.tag` serving another digest: tags never move.
async fn refuse_moved_tag(
    registry: &dyn Registry,
    to: &RepositoryName,
    entry: &Entry,
) -> Result<(), RegistryError> {
    if let Some(d) = registry.manifest_digest(to, &entry.tag).await?
        && d != entry.digest
    {
        return Err(other(
            to,
            format!("check tag {}", entry.tag),
            format!(
                "{to}:{} already serves {d}, not {}; tags never move",
                entry.tag, entry.digest
            ),
        ));
    }
    Ok(())
}

/// The image index and its platform manifests as pulled from the source.
struct SourceImage {
    /// The index (media type [`spec::OCI_INDEX`] when it names none).
    index: ManifestBytes,
    /// The platform manifests, in index order.
    manifests: Vec<ManifestBytes>,
    /// Config and layers of every platform manifest.
    blobs: Vec<Descriptor>,
}

/// Pulls the image index `digest` from `from` and every platform manifest it lists.
async fn read_image(
    registry: &dyn Registry,
    from: &RepositoryName,
    digest: &str,
) -> Result<SourceImage, RegistryError> {
    let index_bytes = registry.pull_manifest(from, digest).await?;
    let index: Index = parse(from, "index", digest, &index_bytes)?;
    let index_media_type = if index.media_type.is_empty() {
        spec::OCI_INDEX.to_string()
    } else {
        index.media_type.clone()
    };
    let mut blobs: Vec<Descriptor> = Vec::new();
    let mut manifests = Vec::new();
    for d in &index.manifests {
        let bytes = registry.pull_manifest(from, &d.digest).await?;
        let m: Manifest = parse(from, "manifest", &d.digest, &bytes)?;
        blobs.push(m.config.clone());
        blobs.extend(m.layers.iter().cloned());
        manifests.push(ManifestBytes {
            digest: d.digest.clone(),
            media_type: d.media_type.clone(),
            bytes,
        });
    }
    Ok(SourceImage {
        index: ManifestBytes {
            digest: digest.to_string(),
            media_type: index_media_type,
            bytes: index_bytes,
        },
        manifests,
        blobs,
    })
}

/// The referrers the digest-manifest entry records, by subject digest: each platform's SBOM
/// under its platform manifest, the provenance, the signature and the attestations under the
/// index; none when they were not pushed (`referrers: skipped`).
fn recorded_referrers(entry: &Entry) -> BTreeMap<String, Vec<String>> {
    let mut recorded: BTreeMap<String, Vec<String>> = BTreeMap::new();
    if entry.referrers == Some(ReferrersPushed::Skipped) {
        return recorded;
    }
    for (platform, sbom) in &entry.sbom {
        if let Some(subject) = entry.manifests.get(platform) {
            recorded
                .entry(subject.clone())
                .or_default()
                .push(sbom.clone());
        }
    }
    let index = recorded.entry(entry.digest.clone()).or_default();
    index.extend(entry.provenance.iter().cloned());
    // Bundles are referrers; cosign's tags are copied as tags.
    if let Some(s) = entry
        .signature
        .as_ref()
        .filter(|s| s.form == crate::digest_manifest::SignatureForm::Bundles)
    {
        index.push(s.digest.clone());
        index.extend(s.attestations.values().cloned());
    }
    recorded.retain(|_, digests| !digests.is_empty());
    recorded
}

/// The referrers tag-schema fallback index of one subject, to write to the target.
struct Fallback {
    /// The subject's digest.
    subject: String,
    /// The source's index at that tag, byte for byte; `None` when the source has none.
    listed: Option<Bytes>,
    /// The referrers to list: the source's, then recorded ones it lacks.
    descriptors: Vec<Descriptor>,
}

/// The referrers of every subject as pulled from the source.
struct SourceReferrers {
    /// Each referrer manifest once.
    manifests: Vec<ManifestBytes>,
    /// One per subject that has referrers.
    fallbacks: Vec<Fallback>,
    /// Config and layers of every referrer manifest.
    blobs: Vec<Descriptor>,
}

/// Pulls, per subject, the source's fallback index and every referrer manifest it, the
/// referrers API or `recorded` lists.
async fn read_referrers(
    registry: &dyn Registry,
    from: &RepositoryName,
    subjects: &[String],
    recorded: &BTreeMap<String, Vec<String>>,
) -> Result<SourceReferrers, RegistryError> {
    let mut out = SourceReferrers {
        manifests: Vec::new(),
        fallbacks: Vec::new(),
        blobs: Vec::new(),
    };
    let mut seen = BTreeSet::new();
    for subject in subjects {
        use crate::registry::referrers::{Source, list, read_tag_schema};
        let listing = list(registry, from, subject).await?;
        let (listed, mut descriptors) = match listing.source {
            Source::TagSchema => (listing.tag_schema, listing.manifests),
            // Where there is an API, the tag schema too (referrers pushed without `subject`),
            // then what the API lists besides (cosign there writes no tag-schema index).
            Source::Api => {
                let (listed, mut descriptors) =
                    match read_tag_schema(registry, from, subject).await? {
                        Some((bytes, index)) => (Some(bytes), index.manifests),
                        None => (None, Vec::new()),
                    };
                for d in listing.manifests {
                    if !descriptors.iter().any(|l| l.digest == d.digest) {
                        descriptors.push(d);
                    }
                }
                (listed, descriptors)
            }
        };
        for digest in recorded.get(subject).into_iter().flatten() {
            if !descriptors.iter().any(|d| &d.digest == digest) {
                descriptors.push(unlisted(digest));
            }
        }
        for d in &mut descriptors {
            let bytes = registry.pull_manifest(from, &d.digest).await?;
            let m: Manifest = parse(from, "referrer", &d.digest, &bytes)?;
            if d.media_type.is_empty() {
                describe_from_manifest(d, &m, bytes.len());
            }
            out.blobs.push(m.config.clone());
            out.blobs.extend(m.layers.iter().cloned());
            if seen.insert(d.digest.clone()) {
                out.manifests.push(ManifestBytes {
                    digest: d.digest.clone(),
                    media_type: d.media_type.clone(),
                    bytes,
                });
            }
        }
        if !descriptors.is_empty() {
            out.fallbacks.push(Fallback {
                subject: subject.clone(),
                listed,
                descriptors,
            });
        }
    }
    Ok(out)
}

/// A descriptor of a recorded referrer the source does not list: only its digest, until
/// [`describe_from_manifest`] fills it in.
fn unlisted(digest: &str) -> Descriptor {
    Descriptor {
        media_type: String::new(),
        digest: digest.to_string(),
        size: 0,
        platform: None,
        artifact_type: None,
        annotations: BTreeMap::new(),
        urls: vec![],
    }
}

/// Describes an [`unlisted`] referrer from its manifest `m` of `len` bytes.
fn describe_from_manifest(d: &mut Descriptor, m: &Manifest, len: usize) {
    d.media_type = if m.media_type.is_empty() {
        spec::OCI_MANIFEST.to_string()
    } else {
        m.media_type.clone()
    };
    d.size = len as u64;
    d.artifact_type = m.artifact_type.clone();
    d.annotations = m.annotations.clone();
}

/// A target that refuses a referrer carrying `subject` (older Harbor, Quay, Docker Hub): said so,
/// since copy keeps every digest and cannot rewrite the referrer without it.
fn explain_refused_subject(e: RegistryError, referrers: &[ManifestBytes]) -> RegistryError {
    let carries_subject = referrers.iter().any(|m| {
        serde_json::from_slice::<serde_json::Value>(&m.bytes)
            .is_ok_and(|v| v.get("subject").is_some_and(|s| !s.is_null()))
    });
    if carries_subject && matches!(e.kind, ErrorKind::Refused | ErrorKind::NotFound) {
        return RegistryError {
            message: format!(
                "{}; the target seems to refuse manifests carrying `subject` (OCI 1.1 referrers), and copy keeps every digest, so it cannot push them without; nothing tagged",
                e.message
            ),
            ..e
        };
    }
    e
}

/// A `copy` request: plain data.
#[derive(Debug, Clone)]
pub struct CopyRequest<'a> {
    /// images.toml (the digest manifest's path, the upstream URL the labels must name).
    pub config: &'a Config,
    /// The minor whose published image is copied.
    pub minor: Minor,
    /// The target repository, `registry/path` without tag.
    pub to: String,
    /// Wait for another run holding the digest manifest instead of refusing.
    pub wait_for_lock: bool,
}

/// What [`copy`] did.
#[derive(Debug, Clone, serde::Serialize)]
pub struct CopyOutcome {
    /// The minor.
    pub minor: Minor,
    /// The copy.
    pub copied: Copied,
    /// Whether the mirror was newly recorded (false: it was recorded before).
    pub recorded: bool,
}

/// `copy` failures; [`CopyError::exit_code`] maps them to the exit codes of docs/exit-codes.md.
#[derive(Debug, thiserror::Error)]
pub enum CopyError {
    /// A bad request: no entry, an unpublished entry, a bad or identical target (exit 2).
    #[error("copy: {0}")]
    Usage(String),
    /// The source or target registry failed or refused (exit 8).
    #[error("copy: {0}")]
    Registry(#[from] RegistryError),
    /// The digest manifest could not be locked, read or written (exit 9).
    #[error("copy: {0}")]
    Record(#[from] DigestManifestError),
    /// The target does not serve what the entry records after the copy; nothing recorded (exit 10).
    #[error("copy: {mirror} does not match the digest manifest after the copy ({} mismatch{}); nothing recorded", findings.len(), if findings.len() == 1 { "" } else { "es" })]
    Check {
        /// The target.
        mirror: String,
        /// The mismatches, one line each.
        findings: Vec<Finding>,
    },
}

impl CopyError {
    /// 2 usage, 8 registry, 9 digest manifest, 10 the copy does not verify.
    pub fn exit_code(&self) -> u8 {
        match self {
            CopyError::Usage(_) => 2,
            CopyError::Registry(_) => 8,
            CopyError::Record(_) => 9,
            CopyError::Check { .. } => 10,
        }
    }
}

impl crate::pipeline::Failure for CopyError {
    fn exit_code(&self) -> u8 {
        CopyError::exit_code(self)
    }
}

crate::command_failure!(CopyError);

/// Copies the published image of `req.minor` to `req.to`, checks it there with
/// [`verify::check_entry`] (the entry with its repository replaced by the target), and records the
/// target in the entry's `mirrors`, all under the digest manifest's run lock; the digest manifest
/// is rewritten atomically and only after the check passed (the lock: [`record::take_run_lock`]).
pub async fn copy(
    req: &CopyRequest<'_>,
    registry: &dyn Registry,
    on_bytes: &(dyn Fn(u64, u64) + Sync),
) -> Result<CopyOutcome, CopyError> {
    let path = &req.config.digest_manifest;
    let _lock = record::take_run_lock(path, req.wait_for_lock)?;
    let manifest = digest_manifest::read(path)?;
    let entry = manifest.images.get(&req.minor).ok_or_else(|| {
        CopyError::Usage(format!("{}: no entry for {}", path.display(), req.minor))
    })?;
    if !entry.published {
        return Err(CopyError::Usage(format!(
            "{} {} was recorded without --push; there is nothing in a registry to copy (build it with --push first)",
            req.minor, entry.image
        )));
    }
    let to: RepositoryName = req
        .to
        .parse()
        .map_err(|e: String| CopyError::Usage(format!("target {e}")))?;
    let source: RepositoryName = entry
        .repository
        .parse()
        .map_err(|e: String| CopyError::Usage(format!("recorded repository {e}")))?;
    if to == source {
        return Err(CopyError::Usage(format!(
            "{} is the entry's own repository; give another target",
            req.to
        )));
    }
    let copied = copy_image(registry, entry, &to, on_bytes).await?;
    let target = to.to_string();
    let findings = verify::check_entry(
        registry,
        req.config,
        req.minor,
        &entry.at_repository(&target),
    )
    .await?;
    if !findings.is_empty() {
        return Err(CopyError::Check {
            mirror: target,
            findings,
        });
    }
    let recorded = record::record_mirror(path, req.minor, &entry.digest, &target)?;
    Ok(CopyOutcome {
        minor: req.minor,
        copied,
        recorded,
    })
}

#[cfg(test)]
mod tests {

    use super::*;

    use crate::registry::publish;
    use crate::testing;

    use testing::{config, published};

    fn repo(s: &str) -> RepositoryName {
        s.parse().unwrap()
    }

    #[tokio::test]
    async fn every_manifest_and_blob_is_copied_byte_for_byte_and_the_tag_is_the_last_write() {
        let (f, reg) = published().await;
        let to = repo("mirror.example/magnum/openstack-cloud-controller-manager");
        let copied = copy_image(&reg, &f.entry, &to, &|_, _| {}).await.unwrap();
        assert_eq!(
            copied.reference,
            format!("{to}:v1.34.1-occmforge.1@{}", f.entry.digest)
        );
        assert_eq!((copied.manifests, copied.referrers), (2, 3));
        assert_eq!(copied.mounted, 0);
        let (src, dst) = (reg.repository(&f.repo), reg.repository(&to));
        assert_eq!(dst.manifests, src.manifests);
        assert_eq!(dst.blobs, src.blobs);
        assert_eq!(dst.tags, src.tags, "the tag and every referrers index");
        let pushes: Vec<String> = reg
            .log()
            .into_iter()
            .filter(|op| op.kind == "push_manifest" && op.repo == to.to_string())
            .map(|op| op.reference)
            .collect();
        assert_eq!(
            pushes.last().map(String::as_str),
            Some("v1.34.1-occmforge.1")
        );
        let found = verify::check_entry(
            &reg,
            &config(),
            "1.34".parse().unwrap(),
            &f.entry.at_repository(&to.to_string()),
        )
        .await
        .unwrap();
        assert!(found.is_empty(), "{found:?}");

        // Again: everything is present, nothing is uploaded.
        let again = copy_image(&reg, &f.entry, &to, &|_, _| {}).await.unwrap();
        assert_eq!((again.uploaded, again.mounted), (0, 0));
        assert_eq!(again.present, copied.uploaded);
    }

    #[tokio::test]
    async fn copying_again_to_a_registry_with_immutable_tags_moves_no_tag() {
        let (f, reg) = published().await;
        let to = repo("mirror.example/magnum/openstack-cloud-controller-manager");
        copy_image(&reg, &f.entry, &to, &|_, _| {}).await.unwrap();
        // Every tag there immutable (Harbor, ECR): the image's and the sha256-<hex> ones.
        reg.set_immutable_tags(true);
        let tags = reg.repository(&to).tags;
        copy_image(&reg, &f.entry, &to, &|_, _| {}).await.unwrap();
        assert_eq!(reg.repository(&to).tags, tags);
    }

    #[tokio::test]
    async fn an_immutable_referrers_index_that_must_change_is_refused_before_any_push() {
        let (f, reg) = published().await;
        let to = repo("mirror.example/magnum/openstack-cloud-controller-manager");
        // The target already lists another referrer of the image under sha256-<hex>, and keeps
        // every tag immutable: the copy must rewrite that index.
        let other = testing::image("v9.9.9-other.1");
        other
            .publish_as(&reg, &to, &[], publish::ReferrersMode::Fallback)
            .await
            .unwrap();
        crate::registry::transfer::write_referrers_index(
            &reg,
            &to,
            &f.entry.digest,
            std::slice::from_ref(&other.image.index),
            None,
            None,
        )
        .await
        .unwrap();
        reg.set_immutable_tags(true);
        let before = reg.repository(&to);
        let e = copy_image(&reg, &f.entry, &to, &|_, _| {})
            .await
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("can be rewritten, before any push")
                && e.contains("exclude tags matching `sha256-*`"),
            "{e}"
        );
        let after = reg.repository(&to);
        assert_eq!(
            (after.blobs.len(), after.manifests.len()),
            (before.blobs.len(), before.manifests.len()),
            "something was pushed before the refusal"
        );
    }

    #[tokio::test]
    async fn on_the_same_registry_blobs_are_mounted() {
        let (f, reg) = published().await;
        let to = repo("registry.example/other/openstack-cloud-controller-manager");
        let copied = copy_image(&reg, &f.entry, &to, &|_, _| {}).await.unwrap();
        assert_eq!(copied.uploaded, 0);
        assert_eq!(copied.mounted, reg.repository(&f.repo).blobs.len());
    }

    #[tokio::test]
    async fn a_failed_copy_leaves_no_tag_and_a_taken_tag_is_refused() {
        let (f, reg) = published().await;
        let to = repo("mirror.example/magnum/openstack-cloud-controller-manager");
        reg.fail_when(|op| {
            (op.kind == "push_manifest" && op.reference.starts_with("sha256-"))
                .then_some(ErrorKind::Other)
        });
        assert!(copy_image(&reg, &f.entry, &to, &|_, _| {}).await.is_err());
        assert!(reg.repository(&to).tags.is_empty(), "no tag before the end");
        reg.heal();

        let other = testing::image("v9.9.9-other.1");
        let taken = repo("mirror.example/taken/openstack-cloud-controller-manager");
        other
            .publish_as(&reg, &taken, &[], publish::ReferrersMode::Fallback)
            .await
            .unwrap();
        reg.set_tag(
            &taken,
            "v1.34.1-occmforge.1",
            Some(&other.image.index.digest),
        );
        let e = copy_image(&reg, &f.entry, &taken, &|_, _| {})
            .await
            .unwrap_err();
        assert!(e.to_string().contains("tags never move"), "{e}");
        assert_eq!(
            reg.repository(&taken).tags["v1.34.1-occmforge.1"],
            other.image.index.digest
        );
    }

    #[tokio::test]
    async fn referrers_that_were_not_pushed_are_not_copied_and_a_target_refusing_subject_is_named()
    {
        let f = testing::image("v1.34.1-occmforge.1");
        let reg = crate::registry::memory::MemoryRegistry::new();
        f.publish_to(&reg, publish::ReferrersMode::Skip)
            .await
            .unwrap();
        let mut entry = f.entry.clone();
        entry.referrers = Some(ReferrersPushed::Skipped);
        let to = repo("mirror.example/magnum/openstack-cloud-controller-manager");
        let copied = copy_image(&reg, &entry, &to, &|_, _| {}).await.unwrap();
        assert_eq!(copied.referrers, 0);
        assert_eq!(
            reg.repository(&to).tags["v1.34.1-occmforge.1"],
            f.image.index.digest
        );

        // OCI 1.1 referrers to a target that refuses `subject`.
        let (f, reg) = published().await;
        let to = repo("old-harbor.example/magnum/openstack-cloud-controller-manager");
        let target = to.to_string();
        reg.fail_when(move |op| {
            (op.repo == target && op.carries_subject()).then_some(ErrorKind::Refused)
        });
        let e = copy_image(&reg, &f.entry, &to, &|_, _| {})
            .await
            .unwrap_err();
        assert!(
            e.message.contains("refuse manifests carrying `subject`"),
            "{e}"
        );
        assert!(reg.repository(&to).tags.is_empty(), "the tag was written");
    }
}
