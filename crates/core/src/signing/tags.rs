//! cosign's tag scheme (sigstore/cosign `specs/SIGNATURE_SPEC.md`, `ATTESTATION_SPEC.md`): what
//! cosign 2 writes by default and cosign 3 with `--new-bundle-format=false`, and what GitLab and
//! GHCR users mostly have. The signatures of the image `sha256:<hex>` are the layers of the
//! manifest tagged `sha256-<hex>.sig`: each a simple-signing payload
//! (`application/vnd.dev.cosign.simplesigning.v1+json`, `{"critical": {"image":
//! {"docker-manifest-digest": …}, "type": "cosign container image signature", …}}`) whose
//! signature is the base64 annotation `dev.cosignproject.cosign/signature` (keyless: with the
//! signing certificate, PEM, in `dev.sigstore.cosign/certificate`). Its attestations are the
//! layers of `sha256-<hex>.att`: DSSE envelopes of in-toto Statements
//! (`application/vnd.dsse.envelope.v1+json`, annotation `predicateType`). `sha256-<hex>.sbom`
//! (`cosign attach sbom`) carries an SBOM and no signature. None of it needs a referrers API.

use base64::Engine as _;
use x509_cert::Certificate;
use x509_cert::der::DecodePem as _;

use super::{Signer, VerifiedBundle, verification_key, verify_dsse};

/// The media type of a `.sig` layer.
pub const SIMPLE_SIGNING_MEDIA_TYPE: &str = "application/vnd.dev.cosign.simplesigning.v1+json";
/// The media type of a `.att` layer.
pub const DSSE_MEDIA_TYPE: &str = "application/vnd.dsse.envelope.v1+json";
/// The annotation carrying a `.sig` layer's signature (base64).
pub const SIGNATURE_ANNOTATION: &str = "dev.cosignproject.cosign/signature";
/// The annotation carrying a keyless signature's certificate (PEM).
pub const CERTIFICATE_ANNOTATION: &str = "dev.sigstore.cosign/certificate";
/// The `critical.type` of a simple-signing payload cosign writes.
pub const SIMPLE_SIGNING_TYPE: &str = "cosign container image signature";

/// The suffixes of cosign's tags, in the order they are read: signatures, attestations, SBOMs.
pub const SUFFIXES: [&str; 3] = ["sig", "att", "sbom"];

/// The tag cosign writes `suffix` (`sig`, `att`, `sbom`) of `subject` (`sha256:<hex>`) under:
/// `sha256-<hex>.<suffix>`.
pub fn tag(subject: &str, suffix: &str) -> String {
    format!("{}.{suffix}", subject.replacen(':', "-", 1))
}

/// The certificate in a layer's `dev.sigstore.cosign/certificate` annotation, if it has one.
fn certificate(pem: Option<&str>) -> Option<Result<Certificate, String>> {
    pem.filter(|p| !p.trim().is_empty()).map(|p| {
        Certificate::from_pem(p.as_bytes())
            .map_err(|e| format!("its certificate is not an X.509 PEM: {e}"))
    })
}

/// Verifies one `.sig` layer with `signer`: the base64 `signature` over the exact `payload`
/// bytes, with the recorded key or (keyless) the key of `certificate_pem`, which must name the
/// recorded identity and issuer. Returns the digest the payload signs
/// (`critical.image.docker-manifest-digest`).
///
/// # Errors
/// One line: the signature is not base64, it does not verify, the payload is not cosign's.
pub fn verify_simple_signing(
    signer: Signer<'_>,
    payload: &[u8],
    signature: &str,
    certificate_pem: Option<&str>,
) -> Result<String, String> {
    use sigstore::crypto::Signature;
    let (key, whose) = verification_key(signer, certificate(certificate_pem))?;
    let sig = base64::engine::general_purpose::STANDARD
        .decode(signature.trim())
        .map_err(|e| format!("its signature is not base64: {e}"))?;
    key.verify_signature(Signature::Raw(&sig), payload)
        .map_err(|_| format!("the signature does not verify with {whose}"))?;
    let v: serde_json::Value =
        serde_json::from_slice(payload).map_err(|e| format!("the payload is not JSON: {e}"))?;
    if v["critical"]["type"].as_str() != Some(SIMPLE_SIGNING_TYPE) {
        return Err(format!(
            "the payload is not a cosign signature (critical.type {:?})",
            v["critical"]["type"]
        ));
    }
    v["critical"]["image"]["docker-manifest-digest"]
        .as_str()
        .map(str::to_string)
        .ok_or_else(|| "the payload names no docker-manifest-digest".into())
}

/// Verifies one `.att` layer, a DSSE envelope of an in-toto Statement, with `signer` (keyless:
/// the key of `certificate_pem`); returns the Statement as a [`VerifiedBundle`] (no hint).
///
/// # Errors
/// One line: not an envelope of a Statement, no signature verifies, the payload is not JSON.
pub fn verify_envelope(
    signer: Signer<'_>,
    envelope: &[u8],
    certificate_pem: Option<&str>,
) -> Result<VerifiedBundle, String> {
    let (key, whose) = verification_key(signer, certificate(certificate_pem))?;
    let env: serde_json::Value =
        serde_json::from_slice(envelope).map_err(|e| format!("not a DSSE envelope: {e}"))?;
    let payload = verify_dsse(&key, whose, &env)?;
    let statement =
        serde_json::from_slice(&payload).map_err(|e| format!("the payload is not JSON: {e}"))?;
    Ok(VerifiedBundle {
        hint: None,
        statement,
    })
}

/// What a layer of a cosign tag holds, once verified (see [`verify_layer`]).
#[derive(Debug)]
pub enum Verified {
    /// A `.sig` layer: the digest its simple-signing payload signs.
    Signs(String),
    /// An `.att` layer: the in-toto Statement of its envelope.
    Attests(VerifiedBundle),
}

/// Verifies one layer of a cosign tag with `signer`, told by its `media_type`: a simple-signing
/// payload ([`verify_simple_signing`], signature and certificate from `annotations`) or a DSSE
/// envelope ([`verify_envelope`]); `blob` is the layer's bytes.
///
/// # Errors
/// One line: a layer of another media type, or what [`verify_simple_signing`] or
/// [`verify_envelope`] says.
pub fn verify_layer(
    signer: Signer<'_>,
    media_type: &str,
    annotations: &std::collections::BTreeMap<String, String>,
    blob: &[u8],
) -> Result<Verified, String> {
    let cert = annotations.get(CERTIFICATE_ANNOTATION).map(String::as_str);
    match media_type {
        SIMPLE_SIGNING_MEDIA_TYPE => {
            let signature = annotations
                .get(SIGNATURE_ANNOTATION)
                .map(String::as_str)
                .unwrap_or_default();
            verify_simple_signing(signer, blob, signature, cert).map(Verified::Signs)
        }
        DSSE_MEDIA_TYPE => verify_envelope(signer, blob, cert).map(Verified::Attests),
        other => Err(format!(
            "a layer of media type {other} is no cosign signature"
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tags_are_cosigns() {
        assert_eq!(tag("sha256:ab12", "sig"), "sha256-ab12.sig");
        assert_eq!(tag("sha256:ab12", "att"), "sha256-ab12.att");
    }

    #[test]
    fn a_simple_signing_payload_verifies_with_its_key_and_no_other() {
        use sigstore::crypto::SigningScheme;
        let signer = SigningScheme::ECDSA_P256_SHA256_ASN1
            .create_signer()
            .unwrap();
        let pair = signer.to_sigstore_keypair().unwrap();
        let other = SigningScheme::ECDSA_P256_SHA256_ASN1
            .create_signer()
            .unwrap()
            .to_sigstore_keypair()
            .unwrap();
        let payload = br#"{"critical":{"identity":{"docker-reference":"r.example/occm"},"image":{"docker-manifest-digest":"sha256:ab12"},"type":"cosign container image signature"},"optional":null}"#;
        let signature =
            base64::engine::general_purpose::STANDARD.encode(signer.sign(payload).unwrap());
        let public = pair.public_key_to_pem().unwrap();
        let by = |public_key| Signer::Key {
            fingerprint: "",
            public_key,
        };
        assert_eq!(
            verify_simple_signing(by(&public), payload, &signature, None).unwrap(),
            "sha256:ab12"
        );
        let other_public = other.public_key_to_pem().unwrap();
        assert!(
            verify_simple_signing(by(&other_public), payload, &signature, None)
                .unwrap_err()
                .starts_with("the signature does not verify")
        );
        let mut changed = payload.to_vec();
        changed[60] ^= 1;
        assert!(verify_simple_signing(by(&public), &changed, &signature, None).is_err());
    }
}
