//! The `sign` stage (with `--sign-key`): the image index signed by digest and the SBOMs and the
//! provenance attested, each a Sigstore bundle (v0.3, DSSE over an in-toto Statement) written
//! into the layout as a referrer of the index, the layout cosign v3 writes and verifies by
//! default (`cosign verify --key`, `cosign verify-attestation --type spdxjson|slsaprovenance1`).
//! Publish pushes them with the SBOM and provenance, before the tag.
//!
//! - the signature: predicate `https://sigstore.dev/cosign/sign/v1`, subject the index;
//! - the provenance: the describe stage's Statement signed byte for byte (its subjects are the
//!   index and every platform manifest);
//! - one SBOM attestation per platform: predicate the SPDX document, subjects the index and the
//!   platform manifest (so `verify-attestation` on the index, the reference users pin, finds it).

use std::collections::BTreeMap;

use async_trait::async_trait;

use crate::base::util::short;
use crate::digest_manifest::{Signature, Signer};
use crate::image::referrer::{self, Attachment};
use crate::image::{ImageError, layout};
use crate::pipeline::Error;
use crate::pipeline::plan::BuildPlan;
use crate::pipeline::stage::{Done, Stage, StageContext};
use crate::signing::{self, BUNDLE_MEDIA_TYPE, COSIGN_SIGN_PREDICATE, SPDX_PREDICATE, SigningKey};

type Result<T> = std::result::Result<T, Error>;

use super::describe::Described;
use super::image::Imaged;

/// Annotation cosign puts on a bundle's referrer manifest: what the bundle holds.
pub const BUNDLE_CONTENT: &str = "dev.sigstore.bundle.content";
/// Annotation cosign puts on a bundle's referrer manifest: the Statement's predicate type.
pub const BUNDLE_PREDICATE_TYPE: &str = "dev.sigstore.bundle.predicateType";

/// What the sign stage hands on.
#[derive(Debug, Clone)]
pub struct Signed {
    /// The bundles' referrers (signature, provenance, then one SBOM per platform), to be pushed.
    pub attachments: Vec<Attachment>,
    /// The signature as recorded, with the layout's referrer digests.
    pub signature: Signature,
}

/// Signs the image `imaged` described by `described` with `key`.
pub struct SignStage<'a> {
    /// The build plan (repository, output layout).
    pub plan: &'a BuildPlan,
    /// The key (read before any Go work, when the plan was resolved).
    pub key: &'a SigningKey,
    /// The image.
    pub imaged: &'a Imaged,
    /// Its SBOMs and provenance.
    pub described: &'a Described,
    /// Seconds since the epoch for the referrers' `created` annotation.
    pub epoch: i64,
}

#[async_trait]
impl Stage for SignStage<'_> {
    type Output = Signed;

    fn name(&self) -> &'static str {
        "sign"
    }

    async fn run(self, _: &StageContext<'_>) -> Result<Done<Signed>> {
        let out = &self.plan.output;
        let index = &self.imaged.image.index;
        let repo = self.plan.repository.as_str();
        let mut attachments = Vec::new();
        let mut attestations = BTreeMap::new();

        let signature = self.attach(signing::statement(
            &[(repo, &index.digest)],
            COSIGN_SIGN_PREDICATE,
            serde_json::json!({}),
        ))?;
        let signature_digest = signature.manifest.digest.clone();
        attachments.push(signature);

        let provenance = self.document(&self.described.provenance)?;
        let a = self.attach(Ok(provenance))?;
        attestations.insert("provenance".to_string(), a.manifest.digest.clone());
        attachments.push(a);

        for pi in &self.imaged.image.platforms {
            let platform = pi.platform.to_string();
            let Some(sbom) = self.described.sboms.get(&platform) else {
                continue;
            };
            let doc = self.document(sbom)?;
            let predicate: serde_json::Value = serde_json::from_slice(&doc)
                .map_err(|e| image_err(format!("SBOM {platform}: {e}")))?;
            let a = self.attach(signing::statement(
                &[(repo, &index.digest), (repo, &pi.manifest.digest)],
                SPDX_PREDICATE,
                predicate,
            ))?;
            attestations.insert(format!("sbom {platform}"), a.manifest.digest.clone());
            attachments.push(a);
        }

        let referrers: Vec<_> = attachments.iter().map(|a| a.manifest.clone()).collect();
        layout::add_referrers(out, &referrers)
            .and_then(|_| layout::gc(out))
            .map_err(|e| image_err(format!("{}: {e}", out.display())))?;
        let detail = format!(
            "index {} signed by key {}, {} {} attested",
            short(&index.digest),
            self.key.fingerprint(),
            attestations.len(),
            crate::base::util::plural(attestations.len(), "document", "s")
        );
        Ok(Done::new(
            Signed {
                attachments,
                signature: Signature {
                    digest: signature_digest,
                    attestations,
                    ..Signature::by(Signer::Key {
                        fingerprint: &self.key.fingerprint(),
                        public_key: &self.key.public_key_pem(),
                    })
                },
            },
            detail,
        ))
    }
}

impl SignStage<'_> {
    /// The document carried by the describe stage's referrer `manifest_digest`, from the layout.
    fn document(&self, manifest_digest: &str) -> Result<Vec<u8>> {
        let a = self
            .described
            .attachments
            .iter()
            .find(|a| a.manifest.digest == manifest_digest)
            .ok_or_else(|| image_err(format!("no referrer {}", short(manifest_digest))))?;
        layout::read_blob(&self.plan.output, &a.document.digest)
            .map_err(|e| image_err(crate::base::disk::write_failed(&self.plan.output, &e)))
    }

    /// Signs `statement` and writes its bundle into the layout as a referrer of the index.
    fn attach(&self, statement: std::result::Result<Vec<u8>, String>) -> Result<Attachment> {
        let statement = statement.map_err(image_err)?;
        let predicate_type = serde_json::from_slice::<serde_json::Value>(&statement)
            .ok()
            .and_then(|v| v["predicateType"].as_str().map(str::to_string))
            .unwrap_or_default();
        let bundle = self.key.sign_statement(&statement)?;
        let annotations = BTreeMap::from([
            (BUNDLE_CONTENT.to_string(), "dsse-envelope".to_string()),
            (BUNDLE_PREDICATE_TYPE.to_string(), predicate_type),
        ]);
        referrer::attach_annotated(
            &self.plan.output,
            &self.imaged.image.index,
            BUNDLE_MEDIA_TYPE,
            &bundle,
            self.epoch,
            annotations,
        )
        .map_err(|e| image_err(format!("{}: {e}", self.plan.output.display())))
    }
}

/// A layout failure of the sign stage, worded as the image stage's (`image: …`).
fn image_err(message: String) -> Error {
    Error::Image(ImageError::Io(message))
}
