//! `manifest record-signatures`: finds the Sigstore bundles a signer made about a recorded
//! image (with `cosign sign` and `cosign attest`, keyless in CI or with a key, or by `build
//! --sign-key`) among the index's referrers, and records them in the entry's `signature`, so
//! that `verify` checks them and `copy` carries them.
//!
//! A bundle counts when it is a referrer of the index (the referrers API, or the tag schema
//! where the registry has none; artifact type [`BUNDLE_MEDIA_TYPE`]), verifies with the signer
//! ([`signing::verify_bundle`]: the key, or a certificate naming the identity and issuer) and its
//! in-toto Statement is about the index. By predicate type it is the signature
//! (`https://sigstore.dev/cosign/sign/v1`), the provenance (`https://slsa.dev/provenance/v1`) or
//! a platform's SBOM (`https://spdx.dev/Document`, whose predicate is that platform's recorded
//! SPDX document, or whose subjects name that platform's manifest). Of several of one kind, the
//! newest (by its manifest's `org.opencontainers.image.created`) is recorded.

use std::collections::BTreeMap;

use crate::base::reference::RepositoryName;
use crate::base::util::short;
use crate::digest_manifest::{Entry, Signature, SignatureForm, Signer};
use crate::image::spec::{Descriptor, Manifest, keys::CREATED};
use crate::registry::{Registry, RegistryError, if_present};
use crate::signing::{
    self, BUNDLE_MEDIA_TYPE, COSIGN_SIGN_PREDICATE, SLSA_PROVENANCE_V1, SPDX_PREDICATE,
};

/// What [`find`] found for one entry.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Found {
    /// The signature to record: its digest and the attestations found, by the signer.
    pub signature: Signature,
    /// Attestations the entry's documents call for that the signer made none of: `provenance`,
    /// `sbom <platform>`.
    pub missing: Vec<String>,
    /// Who signed the bundles of the index that are not the signer's (or do not verify), as
    /// each names its signer ([`signing::bundle_signer`]): each once, sorted.
    pub others: Vec<String>,
}

/// Why [`find`] found nothing to record.
#[derive(Debug, thiserror::Error)]
pub enum FindError {
    /// The entry cannot be looked for: not pushed, or its repository does not parse.
    #[error("{0}")]
    Usage(String),
    /// No signature of the index by the signer among its referrers.
    #[error("{0}")]
    NotSigned(String),
    /// The registry cannot be asked.
    #[error(transparent)]
    Registry(#[from] RegistryError),
}

/// `manifest record-signatures`: the registry holds no signature of the image by the signer.
#[derive(Debug, thiserror::Error)]
#[error("signatures: {0}")]
pub struct NotSigned(pub String);

impl crate::pipeline::Failure for NotSigned {
    /// 10: the registry does not hold what was asked for.
    fn exit_code(&self) -> u8 {
        10
    }
}

crate::command_failure!(NotSigned);

impl From<FindError> for crate::pipeline::Error {
    fn from(e: FindError) -> Self {
        match e {
            FindError::Usage(m) => crate::pipeline::Error::Usage(m),
            FindError::NotSigned(m) => NotSigned(m).into(),
            FindError::Registry(e) => crate::pipeline::Error::Registry(e),
        }
    }
}

/// The bundles by `signer` about `entry`'s index in its repository, for
/// [`crate::pipeline::record::record_signature`].
///
/// # Errors
/// [`FindError::Usage`] when the entry was not pushed; [`FindError::NotSigned`] when no
/// signature of the index verifies with `signer` (naming the signers that were found);
/// [`FindError::Registry`] when the registry cannot be asked.
pub async fn find(
    registry: &dyn Registry,
    entry: &Entry,
    signer: Signer<'_>,
) -> Result<Found, FindError> {
    if !entry.published {
        return Err(FindError::Usage(format!(
            "{} was recorded without --push: there is no signature in a registry to record",
            entry.image
        )));
    }
    let repo: RepositoryName = entry
        .repository
        .parse()
        .map_err(|e: String| FindError::Usage(format!("recorded repository {e}")))?;
    let listing = crate::registry::referrers::list(registry, &repo, &entry.digest).await?;
    let unreadable = listing.unreadable;
    let mut listed = listing.manifests;
    let count = listed.len();
    add_recorded_bundles(entry, &mut listed);
    let mut finder = Finder {
        registry,
        repo: &repo,
        entry,
        sboms: BTreeMap::new(),
    };
    let (newest, mut others) = finder.survey(&listed, signer).await?;
    let mut signature = Signature::by(signer);
    for (kind, (_, digest)) in newest {
        if kind == "signature" {
            signature.digest = digest;
        } else {
            signature.attestations.insert(kind, digest);
        }
    }
    // cosign's tag scheme (`sha256-<hex>.sig`, `.att`): what cosign 2 writes, and what a
    // registry without the referrers API keeps readable.
    if signature.digest.is_empty()
        && let Some(tagged) = finder.cosign_tags(signer, &mut others).await?
    {
        signature = tagged;
    }
    others.sort();
    if signature.digest.is_empty() {
        let by_others = if others.is_empty() {
            String::new()
        } else {
            format!("; signed by {} instead", others.join(", "))
        };
        let listed = if unreadable {
            format!(
                "{} lists no referrers (no referrers API, and its tag sha256-… serves the image itself), and cosign's tags hold none",
                repo.registry
            )
        } else {
            format!("among its {count} referrers or in cosign's tags")
        };
        return Err(FindError::NotSigned(format!(
            "{} has no signature by {signer}: {listed}{by_others}",
            entry.image
        )));
    }
    Ok(Found {
        missing: missing_attestations(entry, &signature),
        signature,
        others,
    })
}

/// The bundles `entry` records already (its signature in the bundle form), added to `listed`
/// by digest where missing: all there is to read where the registry can list no referrers
/// (GitLab), and checked again like the others elsewhere.
fn add_recorded_bundles(entry: &Entry, listed: &mut Vec<Descriptor>) {
    let Some(s) = entry
        .signature
        .as_ref()
        .filter(|s| s.form == SignatureForm::Bundles)
    else {
        return;
    };
    for digest in std::iter::once(&s.digest).chain(s.attestations.values()) {
        if !digest.is_empty() && !listed.iter().any(|d| &d.digest == digest) {
            listed.push(Descriptor {
                media_type: crate::image::spec::OCI_MANIFEST.to_string(),
                digest: digest.clone(),
                size: 0,
                platform: None,
                artifact_type: Some(BUNDLE_MEDIA_TYPE.to_string()),
                annotations: BTreeMap::new(),
                urls: Vec::new(),
            });
        }
    }
}

/// The attestations `entry` has (`provenance`, `sbom <platform>`) that `signature` lacks.
fn missing_attestations(entry: &Entry, signature: &Signature) -> Vec<String> {
    let mut missing: Vec<String> = Vec::new();
    if entry.provenance.is_some() && !signature.attestations.contains_key("provenance") {
        missing.push("provenance".into());
    }
    for platform in entry.sbom.keys() {
        let name = format!("sbom {platform}");
        if !signature.attestations.contains_key(&name) {
            missing.push(name);
        }
    }
    missing
}

/// Tells what each verified bundle about an entry's index is, as the digest manifest names it
/// (`signature`, `provenance`, `sbom <platform>`): `verify` checks that each recorded bundle is
/// what its name says.
pub struct Kinds<'a>(Finder<'a>);

impl<'a> Kinds<'a> {
    /// For `entry`'s bundles in `repo` (its repository or a mirror).
    pub fn new(registry: &'a dyn Registry, repo: &'a RepositoryName, entry: &'a Entry) -> Self {
        Kinds(Finder {
            registry,
            repo,
            entry,
            sboms: BTreeMap::new(),
        })
    }

    /// What `verified` is: `signature` (predicate `https://sigstore.dev/cosign/sign/v1`),
    /// `provenance` (SLSA provenance v1) or `sbom <platform>` (SPDX, the platform's manifest a
    /// subject or its recorded SPDX document the predicate); `None` for anything else.
    ///
    /// # Errors
    /// The registry cannot be asked for the entry's SBOM documents.
    pub async fn kind(
        &mut self,
        verified: &signing::VerifiedBundle,
    ) -> Result<Option<String>, RegistryError> {
        self.0.kind(verified).await
    }
}

/// Reads bundles and SBOM documents from the entry's repository.
struct Finder<'a> {
    registry: &'a dyn Registry,
    repo: &'a RepositoryName,
    entry: &'a Entry,
    /// Platform → its recorded SPDX document, read once.
    sboms: BTreeMap<String, Option<serde_json::Value>>,
}

impl Finder<'_> {
    /// The newest bundle of each kind by `signer` about the index among `listed` (kind:
    /// `signature`, `provenance`, `sbom <platform>`; → (creation time, referrer digest)), and
    /// who signed the bundles that are not the signer's, each once.
    async fn survey(
        &mut self,
        listed: &[Descriptor],
        signer: Signer<'_>,
    ) -> Result<(BTreeMap<String, (String, String)>, Vec<String>), RegistryError> {
        // Kind (`signature`, `provenance`, `sbom <platform>`) → (created, referrer digest).
        let mut newest: BTreeMap<String, (String, String)> = BTreeMap::new();
        let mut others = Vec::new();
        let bundles = listed
            .iter()
            .filter(|d| d.artifact_type.as_deref() == Some(BUNDLE_MEDIA_TYPE));
        for d in bundles {
            let Some((manifest, bundle)) = self.bundle(&d.digest).await? else {
                continue;
            };
            let verified = match signing::verify_bundle(signer, &bundle) {
                Ok(v) if v.subject_digests().contains(&self.entry.digest) => v,
                _ => {
                    let who = signing::bundle_signer(&bundle);
                    if !others.contains(&who) {
                        others.push(who);
                    }
                    continue;
                }
            };
            let Some(kind) = self.kind(&verified).await? else {
                continue;
            };
            // The newest of a kind by its manifest's creation time (cosign and occm-forge both
            // set it; RFC 3339 in UTC compares as text), then by digest: registries list
            // referrers in no particular order.
            let created = manifest
                .annotations
                .get(CREATED)
                .cloned()
                .unwrap_or_default();
            let candidate = (created, d.digest.clone());
            if newest.get(&kind).is_none_or(|n| *n < candidate) {
                newest.insert(kind, candidate);
            }
        }
        Ok((newest, others))
    }

    /// The signature by `signer` in cosign's tag `sha256-<hex>.sig` of the index, with the
    /// attestations by `signer` in `.att` ([`signing::tags`]), as a [`SignatureForm::CosignTags`]
    /// signature; `None` when no `.sig` layer verifies with `signer` for the index. Who signed
    /// the layers that do not verify goes into `others`.
    async fn cosign_tags(
        &mut self,
        signer: Signer<'_>,
        others: &mut Vec<String>,
    ) -> Result<Option<Signature>, RegistryError> {
        use signing::tags;
        let index = self.entry.digest.clone();
        let (registry, repo) = (self.registry, self.repo);
        let read = |suffix: &'static str| {
            let tag = tags::tag(&index, suffix);
            async move {
                let Some(bytes) = if_present(registry.pull_manifest(repo, &tag).await)? else {
                    return Ok::<_, RegistryError>(None);
                };
                let digest = crate::base::util::sha256_digest(&bytes);
                Ok(serde_json::from_slice::<Manifest>(&bytes)
                    .ok()
                    .map(|m| (digest, m)))
            }
        };
        let Some((sig_digest, sig)) = read("sig").await? else {
            return Ok(None);
        };
        let mut signed = false;
        for layer in &sig.layers {
            let Some(payload) =
                if_present(self.registry.pull_blob(self.repo, &layer.digest).await)?
            else {
                continue;
            };
            match tags::verify_layer(signer, &layer.media_type, &layer.annotations, &payload) {
                Ok(tags::Verified::Signs(d)) if d == index => signed = true,
                _ => {
                    let keyless = layer.annotations.contains_key(tags::CERTIFICATE_ANNOTATION);
                    let who = format!(
                        "a signature in {} by another {}",
                        tags::tag(&index, "sig"),
                        if keyless { "identity" } else { "key" }
                    );
                    if !others.contains(&who) {
                        others.push(who);
                    }
                }
            }
        }
        if !signed {
            return Ok(None);
        }
        let mut found = Signature {
            digest: sig_digest,
            form: SignatureForm::CosignTags,
            ..Signature::by(signer)
        };
        if let Some((att_digest, att)) = read("att").await? {
            for layer in &att.layers {
                let Some(envelope) =
                    if_present(self.registry.pull_blob(self.repo, &layer.digest).await)?
                else {
                    continue;
                };
                let Ok(tags::Verified::Attests(v)) =
                    tags::verify_layer(signer, &layer.media_type, &layer.annotations, &envelope)
                else {
                    continue;
                };
                if v.subject_digests().contains(&index)
                    && let Some(kind) = self.kind(&v).await?
                    && kind != "signature"
                {
                    found.attestations.insert(kind, att_digest.clone());
                }
            }
        }
        Ok(Some(found))
    }

    /// What a verified bundle about the index is, by its predicate type: `signature`,
    /// `provenance`, `sbom <platform>` ([`Finder::sbom_platform`]); `None` for anything else.
    async fn kind(
        &mut self,
        verified: &signing::VerifiedBundle,
    ) -> Result<Option<String>, RegistryError> {
        Ok(match verified.predicate_type() {
            COSIGN_SIGN_PREDICATE => Some("signature".to_string()),
            SLSA_PROVENANCE_V1 => Some("provenance".to_string()),
            SPDX_PREDICATE => self
                .sbom_platform(verified)
                .await?
                .map(|platform| format!("sbom {platform}")),
            _ => None,
        })
    }

    /// The referrer manifest `digest` and what it carries (its first layer: a bundle, an
    /// SBOM); `None` when the manifest or the layer is gone or is not one.
    async fn bundle(&self, digest: &str) -> Result<Option<(Manifest, Vec<u8>)>, RegistryError> {
        let Some(m) = if_present(self.registry.pull_manifest(self.repo, digest).await)?
            .and_then(|b| serde_json::from_slice::<Manifest>(&b).ok())
        else {
            return Ok(None);
        };
        let Some(layer) = m.layers.first() else {
            return Ok(None);
        };
        let blob = if_present(self.registry.pull_blob(self.repo, &layer.digest).await)?;
        Ok(blob.map(|b| (m, b.to_vec())))
    }

    /// The platform an SBOM attestation is about: the one whose manifest is a subject of the
    /// Statement (as `build --sign-key` attests), else the one whose recorded SPDX document is
    /// the predicate (as `cosign attest --type spdxjson --predicate <document>` does).
    async fn sbom_platform(
        &mut self,
        verified: &signing::VerifiedBundle,
    ) -> Result<Option<String>, RegistryError> {
        let subjects = verified.subject_digests();
        if let Some((platform, _)) = self
            .entry
            .manifests
            .iter()
            .find(|(_, digest)| subjects.contains(digest))
        {
            return Ok(Some(platform.clone()));
        }
        for (platform, referrer) in &self.entry.sbom {
            if !self.sboms.contains_key(platform) {
                let document = match self.bundle(referrer).await? {
                    Some((_, b)) => serde_json::from_slice(&b).ok(),
                    None => None,
                };
                self.sboms.insert(platform.clone(), document);
            }
            if self.sboms[platform].as_ref() == Some(&verified.statement["predicate"]) {
                return Ok(Some(platform.clone()));
            }
        }
        tracing::debug!(
            "an SPDX attestation matches none of {}'s SBOMs",
            short(&self.entry.digest)
        );
        Ok(None)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    use crate::image::referrer;
    use crate::registry::memory::MemoryRegistry;
    use crate::registry::publish::ReferrersMode;
    use crate::testing::{self, CertificateSigner};

    const ID: &str = "https://github.com/example/occm/.github/workflows/build.yml@refs/heads/main";
    const ISSUER: &str = "https://token.actions.githubusercontent.com";
    const FORK: &str = "https://github.com/fork/occm/.github/workflows/build.yml@refs/heads/main";

    /// A bundle referrer of `f`'s index: `signer` signs a Statement about `subjects`.
    fn bundle(
        f: &testing::FixtureImage,
        signer: &CertificateSigner,
        subjects: &[&str],
        predicate_type: &str,
        created: i64,
    ) -> referrer::Attachment {
        let repo = f.repo.to_string();
        let named: Vec<(&str, &str)> = subjects.iter().map(|s| (repo.as_str(), *s)).collect();
        let statement = signing::statement(
            &named,
            predicate_type,
            serde_json::json!({"n": subjects.len()}),
        )
        .unwrap();
        referrer::attach(
            &f.image.layout_dir,
            &f.image.index,
            BUNDLE_MEDIA_TYPE,
            &signer.sign(&statement),
            created,
        )
        .unwrap()
    }

    /// The fixture image published with bundles by [`ID`] (an older and a newer signature, the
    /// provenance, the arm64 SBOM) and a newer signature by [`FORK`].
    struct Signed {
        f: testing::FixtureImage,
        reg: MemoryRegistry,
        newer: referrer::Attachment,
        provenance: referrer::Attachment,
        sbom: referrer::Attachment,
    }

    const BY_ID: Signer<'static> = Signer::Certificate {
        identity: ID,
        issuer: ISSUER,
    };

    async fn signed() -> Signed {
        let f = testing::image("v1.34.1-occmforge.1");
        let index = f.image.index.digest.as_str();
        let arm64 = f.entry.manifests["linux/arm64"].as_str();
        let (ours, fork) = (
            CertificateSigner::new(ID, ISSUER),
            CertificateSigner::new(FORK, ISSUER),
        );
        let older = bundle(&f, &ours, &[index], COSIGN_SIGN_PREDICATE, 100);
        let foreign = bundle(&f, &fork, &[index], COSIGN_SIGN_PREDICATE, 300);
        let provenance = bundle(&f, &ours, &[index], SLSA_PROVENANCE_V1, 100);
        let sbom = bundle(&f, &ours, &[index, arm64], SPDX_PREDICATE, 100);
        let newer = bundle(&f, &ours, &[index, index], COSIGN_SIGN_PREDICATE, 200);
        let mut attachments = f.attachments.clone();
        attachments.extend([&older, &foreign, &provenance, &sbom, &newer].map(|a| a.clone()));
        let reg = MemoryRegistry::new();
        f.publish_as(&reg, &f.repo, &attachments, ReferrersMode::Fallback)
            .await
            .unwrap();
        Signed {
            f,
            reg,
            newer,
            provenance,
            sbom,
        }
    }

    #[tokio::test]
    async fn the_newest_bundles_by_the_identity_are_found_and_others_named() {
        let Signed {
            f,
            reg,
            newer,
            provenance,
            sbom,
        } = signed().await;
        let found = find(&reg, &f.entry, BY_ID).await.unwrap();
        assert_eq!(found.signature.digest, newer.manifest.digest);
        assert_eq!(found.signature.certificate_identity.as_deref(), Some(ID));
        assert_eq!(
            found.signature.attestations,
            BTreeMap::from([
                ("provenance".to_string(), provenance.manifest.digest.clone()),
                ("sbom linux/arm64".to_string(), sbom.manifest.digest.clone()),
            ])
        );
        assert_eq!(found.missing, ["sbom linux/amd64"]);
        assert_eq!(found.others, [format!("{FORK} (issuer {ISSUER})")]);

        // Nothing by this identity: said so, naming who did sign.
        let unsigned = find(
            &reg,
            &f.entry,
            Signer::Certificate {
                identity: "https://example.com/nobody",
                issuer: ISSUER,
            },
        )
        .await
        .unwrap_err()
        .to_string();
        assert_eq!(
            unsigned,
            format!(
                "{} has no signature by https://example.com/nobody (issuer {ISSUER}): among its 6 referrers or in cosign's tags; signed by {ID} (issuer {ISSUER}), {FORK} (issuer {ISSUER}) instead",
                f.entry.image
            )
        );
    }

    #[tokio::test]
    async fn verify_checks_the_recorded_identity_and_that_each_bundle_is_what_its_name_says() {
        let Signed {
            f,
            reg,
            newer,
            provenance,
            sbom,
        } = signed().await;
        let found = find(&reg, &f.entry, BY_ID).await.unwrap();
        let config = testing::config();
        let minor = "1.34".parse().unwrap();

        // Recorded, `verify` checks it; under another identity it is a finding.
        let mut entry = f.entry.clone();
        entry.signature = Some(found.signature.clone());
        let findings = crate::commands::verify::check(&reg, &config, minor, &entry)
            .await
            .unwrap();
        assert!(findings.is_empty(), "{findings:?}");
        entry.signature.as_mut().unwrap().certificate_identity = Some(FORK.into());
        let findings = crate::commands::verify::check(&reg, &config, minor, &entry)
            .await
            .unwrap();
        assert_eq!(findings.len(), 3, "{findings:?}");
        assert!(
            findings[0].message.contains(&format!(
                "its certificate names {ID} (issuer {ISSUER}), not {FORK} (issuer {ISSUER})"
            )),
            "{findings:?}"
        );

        // Swapped names are findings.
        let mut swapped = f.entry.clone();
        let mut signature = found.signature.clone();
        signature.attestations = BTreeMap::from([
            ("provenance".to_string(), sbom.manifest.digest.clone()),
            (
                "sbom linux/arm64".to_string(),
                newer.manifest.digest.clone(),
            ),
        ]);
        signature.digest = provenance.manifest.digest.clone();
        swapped.signature = Some(signature);
        let said: Vec<String> = crate::commands::verify::check(&reg, &config, minor, &swapped)
            .await
            .unwrap()
            .iter()
            .map(|f| format!("{}: {}", f.field, &f.message[20..]))
            .collect();
        assert_eq!(
            said,
            [
                "signature: is the provenance, not the signature the digest manifest names it",
                "attestation provenance: is the sbom linux/arm64, not the provenance the digest manifest names it",
                "attestation sbom linux/arm64: is the signature, not the sbom linux/arm64 the digest manifest names it",
            ]
        );
    }

    #[tokio::test]
    async fn an_image_that_was_not_pushed_or_has_no_referrers_has_no_signature() {
        let f = testing::image("v1.34.1-occmforge.1");
        let reg = MemoryRegistry::new();
        let signer = BY_ID;
        let mut local = f.entry.clone();
        local.published = false;
        let err = find(&reg, &local, signer).await.unwrap_err();
        assert!(matches!(err, FindError::Usage(_)), "{err}");
        f.publish_as(&reg, &f.repo, &[], ReferrersMode::Fallback)
            .await
            .unwrap();
        let err = find(&reg, &f.entry, signer).await.unwrap_err();
        assert_eq!(
            err.to_string(),
            format!(
                "{} has no signature by {ID} (issuer {ISSUER}): among its 0 referrers or in cosign's tags",
                f.entry.image
            )
        );
    }
}
