//! Publish stage: push an image from the OCI layout in the order registries require
//! (distribution-spec: a manifest's blobs must exist before it, an index's manifests before it)
//! and with the tag as the last write:
//!
//! 1. the blobs of the image and of its referrers (skipping those present, mounting base layers),
//! 2. each platform manifest by digest,
//! 3. the image index by digest,
//! 4. the referrers (SBOM, provenance) by digest as [`ReferrersMode`] says, then for each subject
//!    the referrers tag-schema index `sha256-<hex>` (distribution-spec "Referrers Tag Schema",
//!    for registries without the referrers API such as distribution 2.8),
//! 5. the index under the tag, and a check that the tag serves it.
//!
//! Whatever fails before step 5 leaves the tag where it was: the registry serves what it served
//! before under the tag, or nothing, and never an image without its referrers.

use std::str::FromStr;

use bytes::Bytes;
use serde::{Deserialize, Serialize};

use super::transfer::{
    BlobSource, ManifestBytes, Planned, TagSchemas, push_manifests, read_tag_schemas, tag_last,
    transfer_blobs, write_referrers_index,
};
use super::{ErrorKind, Registry, RegistryError};
use crate::base::reference::RepositoryName;
use crate::base::util::short;
use std::collections::BTreeMap;

use crate::image::referrer::{self, Attachment};
use crate::image::spec::Descriptor;
use crate::image::{BuiltImage, layout};

/// How the SBOM and provenance referrers are pushed (`--referrers`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum ReferrersMode {
    /// OCI 1.1 referrers (artifact manifests with `subject` and `artifactType`); a registry that
    /// refuses `subject` fails the push before the tag moves.
    Require,
    /// OCI 1.1 referrers; when the registry refuses `subject`, the same manifests without it,
    /// listed in each subject's tag-schema index (the default).
    #[default]
    Fallback,
    /// No referrers pushed; the SBOM and provenance stay in the layout and beside it.
    Skip,
}

impl FromStr for ReferrersMode {
    type Err = String;
    /// `require`, `fallback` or `skip`.
    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "require" => Ok(ReferrersMode::Require),
            "fallback" => Ok(ReferrersMode::Fallback),
            "skip" => Ok(ReferrersMode::Skip),
            other => Err(format!(
                "`{other}` is not a referrers mode: require, fallback or skip"
            )),
        }
    }
}

/// How the referrers went in; recorded in the digest-manifest entry as `referrers`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum ReferrersPushed {
    /// OCI 1.1 referrers: artifact manifests with `subject` and `artifactType`, also listed in
    /// each subject's tag-schema index `sha256-<hex>`.
    Subject,
    /// The registry refused `subject`: the artifact manifests without it, listed in each
    /// subject's tag-schema index `sha256-<hex>` (their only link to it; cosign's fallback).
    TagSchema,
    /// None pushed (`--referrers=skip`).
    Skipped,
}

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
    /// How the referrers went in.
    pub referrers: ReferrersPushed,
    /// The referrers as the registry holds them, in the order given (their manifest digests are
    /// what it serves: without `subject` for [`ReferrersPushed::TagSchema`]); empty when skipped.
    pub attachments: Vec<Attachment>,
    /// For [`ReferrersPushed::TagSchema`]: the registry's refusal of `subject`, in one line.
    pub refused: Option<String>,
}

fn local_err(repo: &RepositoryName, operation: String, e: std::io::Error) -> RegistryError {
    RegistryError {
        registry: repo.registry.clone(),
        operation,
        message: e.to_string(),
        kind: ErrorKind::Other,
    }
}

/// Pushes `image` and its `attachments` to `repo` in the order of the module documentation, the
/// tag last; `on_bytes(n, total)` hears about each blob handled.
///
/// After the tag is written the registry is asked which digest it serves under the tag; a
/// different answer is an error. Errors name the registry and the failed operation; with
/// [`ReferrersMode::Require`], a registry that refuses `subject` is one of them.
pub async fn publish(
    registry: &dyn Registry,
    repo: &RepositoryName,
    image: &BuiltImage,
    attachments: &[Attachment],
    mode: ReferrersMode,
    on_bytes: &(dyn Fn(u64, u64) + Sync),
) -> Result<Published, RegistryError> {
    let attachments = if mode == ReferrersMode::Skip {
        &[][..]
    } else {
        attachments
    };
    let base = image
        .base_repository
        .as_deref()
        .and_then(|b| b.parse::<RepositoryName>().ok());
    let mount = base.as_ref().map(|b| (b, &image.base_layers));
    let mut blobs = image.blobs();
    blobs.extend(
        attachments
            .iter()
            .flat_map(|a| [a.config.clone(), a.document.clone()]),
    );
    let read = read_tag_schemas(
        registry,
        repo,
        &planned(repo, &image.layout_dir, attachments)?,
    )
    .await?;
    let counts = transfer_blobs(
        registry,
        repo,
        &blobs,
        BlobSource::Layout {
            dir: &image.layout_dir,
            mount,
        },
        on_bytes,
    )
    .await?;
    let mut manifests = Vec::new();
    for d in image.platforms.iter().map(|p| &p.manifest) {
        manifests.push(from_layout(repo, &image.layout_dir, d)?);
    }
    let index = from_layout(repo, &image.layout_dir, &image.index)?;
    manifests.push(index.clone());
    push_manifests(registry, repo, &manifests).await?;
    let referrers =
        push_referrers(registry, repo, &image.layout_dir, attachments, mode, &read).await?;
    tag_last(registry, repo, &image.tag, &index, "pushed").await?;
    Ok(Published {
        reference: format!("{repo}:{}@{}", image.tag, image.index.digest),
        digest: image.index.digest.clone(),
        uploaded: counts.uploaded,
        skipped: counts.present,
        mounted: counts.mounted,
        referrers: if mode == ReferrersMode::Skip {
            ReferrersPushed::Skipped
        } else {
            referrers.form
        },
        attachments: referrers.pushed,
        refused: referrers.refused,
    })
}

/// Each subject of `attachments` with its referrers in both forms they may be pushed in (with
/// `subject`, and without it), for [`read_tag_schemas`].
fn planned<'a>(
    repo: &RepositoryName,
    layout_dir: &std::path::Path,
    attachments: &'a [Attachment],
) -> Result<Vec<Planned<'a>>, RegistryError> {
    let mut by_subject: BTreeMap<&str, [Vec<Descriptor>; 2]> = BTreeMap::new();
    for a in attachments {
        let plain = without_subject(repo, layout_dir, a)?.0.manifest;
        let [with, without] = by_subject.entry(&a.subject.digest).or_default();
        with.push(a.manifest.clone());
        without.push(plain);
    }
    Ok(by_subject
        .into_iter()
        .map(|(subject, forms)| Planned {
            subject,
            forms: forms.into(),
            preferred: None,
        })
        .collect())
}

/// Manifest `d` from the layout, its exact bytes.
fn from_layout(
    repo: &RepositoryName,
    layout_dir: &std::path::Path,
    d: &Descriptor,
) -> Result<ManifestBytes, RegistryError> {
    layout::read_blob(layout_dir, &d.digest)
        .map(|b| ManifestBytes {
            digest: d.digest.clone(),
            media_type: d.media_type.clone(),
            bytes: Bytes::from(b),
        })
        .map_err(|e| local_err(repo, format!("read manifest {}", short(&d.digest)), e))
}

/// Pushes manifest `d` from the layout by its digest.
async fn push_from_layout(
    registry: &dyn Registry,
    repo: &RepositoryName,
    layout_dir: &std::path::Path,
    d: &Descriptor,
) -> Result<(), RegistryError> {
    let m = from_layout(repo, layout_dir, d)?;
    push_manifests(registry, repo, std::slice::from_ref(&m)).await
}

/// What [`push_referrers`] did.
struct PushedReferrers {
    form: ReferrersPushed,
    pushed: Vec<Attachment>,
    refused: Option<String>,
}

/// Whether a failed push of a manifest carrying `subject` reads as a registry that does not
/// take `subject`: it answered and refused the manifest (400 `MANIFEST_INVALID` from older
/// Harbor and Quay, `MANIFEST_BLOB_UNKNOWN` or 404 from Docker Hub before it supported OCI 1.1;
/// oras-project/oras#738, docker/hub-feedback#2307).
fn refuses_subject(e: &RegistryError) -> bool {
    matches!(e.kind, ErrorKind::Refused | ErrorKind::NotFound)
}

/// Pushes the referrer manifests by digest: with `subject`; when the registry refuses the first
/// one and `mode` allows it, every one without `subject` ([`referrer::without_subject`]). Then
/// each subject's tag-schema index `sha256-<hex>`, read, merged (other referrers kept) and
/// written back, listing what was pushed.
async fn push_referrers(
    registry: &dyn Registry,
    repo: &RepositoryName,
    layout_dir: &std::path::Path,
    attachments: &[Attachment],
    mode: ReferrersMode,
    read: &TagSchemas,
) -> Result<PushedReferrers, RegistryError> {
    let mut out = PushedReferrers {
        form: ReferrersPushed::Subject,
        pushed: Vec::new(),
        refused: None,
    };
    if mode == ReferrersMode::Skip {
        out.form = ReferrersPushed::Skipped;
        return Ok(out);
    }
    for a in attachments {
        if out.form == ReferrersPushed::Subject {
            match push_from_layout(registry, repo, layout_dir, &a.manifest).await {
                Ok(()) => {
                    out.pushed.push(a.clone());
                    continue;
                }
                Err(e) if out.pushed.is_empty() && refuses_subject(&e) => {
                    if mode == ReferrersMode::Require {
                        return Err(RegistryError {
                            message: format!(
                                "{}; the registry refused a manifest carrying `subject` (an OCI 1.1 referrer) and --referrers=require insists on them: --referrers=fallback pushes the SBOM and provenance without `subject`, listed under sha256-<hex> tags, --referrers=skip pushes none; the tag was not moved",
                                e.message
                            ),
                            ..e
                        });
                    }
                    let plain = match push_without_subject(registry, repo, layout_dir, a).await {
                        Ok(plain) => plain,
                        Err(again) => {
                            return Err(RegistryError {
                                message: format!(
                                    "{}; without `subject` too: {}",
                                    e.message, again.message
                                ),
                                ..e
                            });
                        }
                    };
                    tracing::info!(
                        "registry {} refused a referrer with `subject` ({}); pushing the referrers without it, listed in the referrers tag schema",
                        repo.registry,
                        e.message
                    );
                    out.form = ReferrersPushed::TagSchema;
                    out.refused = Some(e.message);
                    out.pushed.push(plain);
                    continue;
                }
                Err(e) => return Err(e),
            }
        }
        out.pushed
            .push(push_without_subject(registry, repo, layout_dir, a).await?);
    }
    write_tag_schema(registry, repo, &out.pushed, read).await?;
    Ok(out)
}

/// Pushes `a` by digest without its `subject` ([`without_subject`]); returns what was pushed.
async fn push_without_subject(
    registry: &dyn Registry,
    repo: &RepositoryName,
    layout_dir: &std::path::Path,
    a: &Attachment,
) -> Result<Attachment, RegistryError> {
    let (plain, body) = without_subject(repo, layout_dir, a)?;
    registry
        .push_manifest(
            repo,
            &plain.manifest.digest,
            &plain.manifest.media_type,
            body,
        )
        .await?;
    Ok(plain)
}

/// Writes each subject's referrers tag-schema index `sha256-<hex>` listing what was pushed
/// ([`write_referrers_index`]: merged, other referrers kept).
async fn write_tag_schema(
    registry: &dyn Registry,
    repo: &RepositoryName,
    pushed: &[Attachment],
    read: &TagSchemas,
) -> Result<(), RegistryError> {
    let mut by_subject: BTreeMap<&str, Vec<Descriptor>> = BTreeMap::new();
    for a in pushed {
        by_subject
            .entry(&a.subject.digest)
            .or_default()
            .push(a.manifest.clone());
    }
    for (subject, referrers) in by_subject {
        write_referrers_index(registry, repo, subject, &referrers, None, Some(read)).await?;
    }
    Ok(())
}

/// [`referrer::without_subject`], its error naming the registry and the manifest.
fn without_subject(
    repo: &RepositoryName,
    layout_dir: &std::path::Path,
    a: &Attachment,
) -> Result<(Attachment, Bytes), RegistryError> {
    referrer::without_subject(layout_dir, a)
        .map(|(plain, body)| (plain, Bytes::from(body)))
        .map_err(|e| {
            local_err(
                repo,
                format!("read referrer {}", short(&a.manifest.digest)),
                e,
            )
        })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::image::spec::Index;
    use crate::registry::memory::MemoryRegistry;
    use crate::testing;

    fn manifest_pushes(reg: &MemoryRegistry) -> Vec<String> {
        reg.log()
            .iter()
            .filter(|o| o.kind != "blob_exists")
            .map(|o| o.to_string())
            .collect()
    }

    #[tokio::test]
    async fn blobs_manifests_the_index_and_referrers_by_digest_then_the_tag_then_a_check() {
        let f = testing::image("v1.34.1-occmforge.1");
        let reg = MemoryRegistry::new();
        let published = f.publish_to(&reg, ReferrersMode::Fallback).await.unwrap();
        assert_eq!(published.digest, f.image.index.digest);
        assert_eq!(published.referrers, ReferrersPushed::Subject);
        let all = manifest_pushes(&reg);
        // First, before anything is pushed, each of the three subjects' referrers (the referrers
        // API asked: none, so the tag schema, read once; nothing there to rewrite).
        let mut subjects = Vec::new();
        for read in all[..6].chunks(2) {
            let hex = read[0]
                .strip_prefix("referrers sha256:")
                .expect("referrers asked");
            assert_eq!(read[1], format!("pull_manifest sha256-{hex}"), "{all:?}");
            subjects.push(hex.to_string());
        }
        let ops = &all[6..];
        // The image's blobs, and the referrers' (one empty config shared, three documents).
        let blobs = f.image.blobs().len() + 4;
        assert!(
            ops[..blobs].iter().all(|k| k.starts_with("push_blob ")),
            "{ops:?}"
        );
        let mut want: Vec<String> = f
            .image
            .platforms
            .iter()
            .map(|p| format!("push_manifest {}", p.manifest.digest))
            .collect();
        want.push(format!("push_manifest {}", f.image.index.digest));
        want.extend(
            f.attachments
                .iter()
                .map(|a| format!("push_manifest {}", a.manifest.digest)),
        );
        assert_eq!(ops[blobs..blobs + 6], want[..], "{ops:?}");
        // Then the three subjects' tag-schema indexes (from what was read first, not asked
        // again), the tag (not there yet), the check.
        let rest = &ops[blobs + 6..];
        let indexes: Vec<String> = subjects
            .iter()
            .map(|hex| format!("push_manifest sha256-{hex}"))
            .collect();
        assert_eq!(rest[..3], indexes[..], "{rest:?}");
        assert_eq!(
            rest[3..],
            [
                "manifest_digest v1.34.1-occmforge.1",
                "push_manifest v1.34.1-occmforge.1",
                "manifest_digest v1.34.1-occmforge.1"
            ],
            "{rest:?}"
        );

        // A second push finds every blob and uploads nothing.
        let again = f.publish_to(&reg, ReferrersMode::Fallback).await.unwrap();
        assert_eq!((again.uploaded, again.skipped), (0, blobs));
    }

    #[tokio::test]
    async fn a_registry_with_the_referrers_api_gets_no_tag_schema_and_nothing_is_sent_twice() {
        let f = testing::image("v1.34.1-occmforge.1");
        let reg = MemoryRegistry::new();
        reg.set_referrers_api(Some(crate::registry::memory::ReferrersApi::default()));
        reg.set_immutable_tags(true);
        let p = f.publish_to(&reg, ReferrersMode::Fallback).await.unwrap();
        assert_eq!(p.referrers, ReferrersPushed::Subject);
        let tags = reg.repository(&f.repo).tags;
        assert!(tags.keys().all(|t| !t.starts_with("sha256-")), "{tags:?}");

        // Without the API, publishing the same image again sends no tag again, neither the
        // tag-schema indexes nor the image's own: immutable tags stay as they are.
        let reg = MemoryRegistry::new();
        f.publish_to(&reg, ReferrersMode::Fallback).await.unwrap();
        reg.set_immutable_tags(true);
        let before = manifest_pushes(&reg).len();
        f.publish_to(&reg, ReferrersMode::Fallback).await.unwrap();
        let again: Vec<String> = manifest_pushes(&reg)[before..]
            .iter()
            .filter(|o| o.starts_with("push_manifest ") && !o.starts_with("push_manifest sha256:"))
            .cloned()
            .collect();
        assert!(again.is_empty(), "{again:?}");
    }

    #[tokio::test]
    async fn an_immutable_tag_schema_tag_names_the_rule_to_change() {
        let f = testing::image("v1.34.1-occmforge.1");
        let reg = MemoryRegistry::new();
        f.publish_to(&reg, ReferrersMode::Fallback).await.unwrap();
        reg.set_immutable_tags(true);
        // Another referrer of the index: its tag-schema index must change.
        let note = crate::image::referrer::attach(
            &f.image.layout_dir,
            &f.image.index,
            "application/vnd.example.note",
            b"note",
            0,
        )
        .unwrap();
        let e = f
            .publish_as(
                &reg,
                &f.repo,
                std::slice::from_ref(&note),
                ReferrersMode::Fallback,
            )
            .await
            .unwrap_err()
            .to_string();
        let tag = crate::image::referrer::fallback_tag(&f.image.index.digest);
        assert!(
            e.contains(&format!(
                "check that {tag} can be rewritten, before any push"
            )) && e.contains(&format!("the registry keeps the tag {tag} immutable"))
                && e.contains("exclude tags matching `sha256-*`"),
            "{e}"
        );
        // Said before the note was pushed: neither its document nor its manifest is there.
        let there = reg.repository(&f.repo);
        assert!(
            !there.manifests.contains_key(&note.manifest.digest)
                && !there.blobs.contains_key(&note.document.digest),
            "the note was pushed before the refusal"
        );
    }

    #[tokio::test]
    async fn no_tag_points_at_a_half_pushed_image() {
        let f = testing::image("v1.34.1-occmforge.1");
        let reg = MemoryRegistry::new();
        let second = f.image.platforms[1].manifest.digest.clone();
        reg.fail_when(move |op| {
            (op.kind == "push_manifest" && op.reference == second).then_some(ErrorKind::Other)
        });
        let push = || f.publish_to(&reg, ReferrersMode::Fallback);
        assert!(push().await.is_err());
        assert!(
            reg.repository(&f.repo).tags.is_empty(),
            "the tag was written"
        );
        reg.heal();
        push().await.unwrap();
        assert_eq!(
            reg.repository(&f.repo).tags["v1.34.1-occmforge.1"],
            f.image.index.digest
        );
    }

    /// The digests listed in `subject`'s tag-schema index.
    fn listed(reg: &MemoryRegistry, f: &testing::FixtureImage, subject: &str) -> Vec<String> {
        let repo = reg.repository(&f.repo);
        let digest = &repo.tags[&referrer::fallback_tag(subject)];
        let index: Index = serde_json::from_slice(&repo.manifests[digest].1).unwrap();
        index.manifests.into_iter().map(|m| m.digest).collect()
    }

    #[tokio::test]
    async fn referrers_fallback_index_keeps_other_referrers() {
        let f = testing::image("v1.34.1-occmforge.1");
        let reg = MemoryRegistry::new();
        // Someone else's referrer of the index (a signature) is there first.
        let signature = referrer::attach(
            &f.image.layout_dir,
            &f.image.index,
            "application/vnd.dev.cosign.artifact.sig.v1+json",
            b"signature",
            0,
        )
        .unwrap();
        f.publish_as(
            &reg,
            &f.repo,
            std::slice::from_ref(&signature),
            ReferrersMode::Fallback,
        )
        .await
        .unwrap();
        // Ours, pushed twice: listed once each, the signature kept.
        for _ in 0..2 {
            let p = f.publish_to(&reg, ReferrersMode::Fallback).await.unwrap();
            assert_eq!(p.attachments.len(), 3);
        }
        let provenance = &f.attachments[2].manifest.digest;
        let mut want = vec![signature.manifest.digest.clone(), provenance.clone()];
        want.sort();
        assert_eq!(listed(&reg, &f, &f.image.index.digest), want);
        for (p, sbom) in f.image.platforms.iter().zip(&f.attachments) {
            assert_eq!(
                listed(&reg, &f, &p.manifest.digest),
                std::slice::from_ref(&sbom.manifest.digest)
            );
        }
    }

    /// A registry that refuses manifests carrying `subject` (older Harbor and Quay answer 400
    /// `MANIFEST_INVALID`).
    fn refusing_subject() -> MemoryRegistry {
        let reg = MemoryRegistry::new();
        reg.fail_when(|op| op.carries_subject().then_some(ErrorKind::Refused));
        reg
    }

    #[tokio::test]
    async fn a_registry_refusing_subject_gets_the_referrers_in_the_tag_schema_without_it() {
        let f = testing::image("v1.34.1-occmforge.1");
        let reg = refusing_subject();
        let p = f.publish_to(&reg, ReferrersMode::Fallback).await.unwrap();
        assert_eq!(p.referrers, ReferrersPushed::TagSchema);
        assert!(p.refused.as_deref().unwrap().contains("injected fault"));
        let repo = reg.repository(&f.repo);
        assert_eq!(repo.tags["v1.34.1-occmforge.1"], f.image.index.digest);
        assert_eq!(p.attachments.len(), 3);
        for (pushed, ours) in p.attachments.iter().zip(&f.attachments) {
            assert_ne!(pushed.manifest.digest, ours.manifest.digest);
            assert_eq!(pushed.subject, ours.subject);
            assert_eq!(pushed.manifest.artifact_type, ours.manifest.artifact_type);
            let body: serde_json::Value =
                serde_json::from_slice(&repo.manifests[&pushed.manifest.digest].1).unwrap();
            assert!(body.get("subject").is_none(), "{body}");
            assert_eq!(body["layers"][0]["digest"], ours.document.digest.as_str());
            assert!(
                listed(&reg, &f, &pushed.subject.digest).contains(&pushed.manifest.digest),
                "not in the tag schema"
            );
        }
    }

    #[tokio::test]
    async fn require_fails_before_the_tag_and_skip_pushes_no_referrer() {
        let f = testing::image("v1.34.1-occmforge.1");
        let reg = refusing_subject();
        let e = f
            .publish_to(&reg, ReferrersMode::Require)
            .await
            .unwrap_err();
        assert!(
            e.to_string()
                .contains("refused a manifest carrying `subject`")
                && e.to_string().contains("--referrers=fallback"),
            "{e}"
        );
        assert!(reg.repository(&f.repo).tags.is_empty(), "the tag moved");

        let reg = refusing_subject();
        let p = f.publish_to(&reg, ReferrersMode::Skip).await.unwrap();
        assert_eq!(p.referrers, ReferrersPushed::Skipped);
        assert!(p.attachments.is_empty());
        let repo = reg.repository(&f.repo);
        assert_eq!(repo.tags.len(), 1, "{:?}", repo.tags);
        assert!(
            f.attachments
                .iter()
                .all(|a| !repo.manifests.contains_key(&a.manifest.digest)
                    && !repo.blobs.contains_key(&a.document.digest))
        );
    }
}
