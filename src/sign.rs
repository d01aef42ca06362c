//! Signing: a cosign-verifiable Sigstore bundle (v0.3, a DSSE envelope of an in-toto
//! Statement v1) for one subject digest, made with a key read from cosign's own key format or a
//! PKCS#8 PEM.
//!
//! The layout is what `cosign sign` / `cosign attest` v3 write by default and what `cosign
//! verify --key` / `cosign verify-attestation` read: the bundle JSON is the single layer of an
//! OCI 1.1 artifact manifest (`artifactType` [`BUNDLE_MEDIA_TYPE`], config
//! `application/vnd.oci.empty.v1+json`, `subject` the signed image index) pushed as a referrer of
//! the index (cosign `specs/BUNDLE_SPEC.md`; the DSSE pre-authentication encoding from
//! secure-systems-lab/dsse `protocol.md`). The cryptography is the `sigstore` crate's
//! (sigstore-rs); this module only assembles the envelope.
//!
//! Not wired into `build --push` yet (issue 21): this is the signing primitive the publish and
//! copy paths will call.

use std::path::{Path, PathBuf};

use base64::{Engine as _, engine::general_purpose::STANDARD as B64};
use sha2::{Digest as _, Sha256};
use sigstore::crypto::{SigStoreSigner, SigningScheme, signing_key::SigStoreKeyPair};

use crate::describe::IN_TOTO_MEDIA_TYPE;
use crate::util::is_sha256_digest;

/// Media type of a Sigstore bundle v0.3, the artifact type of the referrer manifest carrying it.
pub const BUNDLE_MEDIA_TYPE: &str = "application/vnd.dev.sigstore.bundle.v0.3+json";
/// The predicate type of a plain image signature (what `cosign sign` v3 signs).
pub const COSIGN_SIGN_PREDICATE: &str = "https://sigstore.dev/cosign/sign/v1";
/// The predicate type `cosign verify-attestation --type spdxjson` looks for.
pub const SPDX_PREDICATE: &str = "https://spdx.dev/Document";

/// A signing failure, one line naming the key file (never the password or key bytes).
#[derive(Debug, thiserror::Error)]
#[error("signing key {}: {message}", path.display())]
pub struct SignError {
    /// The key file.
    pub path: PathBuf,
    /// What went wrong.
    pub message: String,
}

impl SignError {
    fn new(path: &Path, message: impl Into<String>) -> Self {
        Self {
            path: path.to_path_buf(),
            message: message.into(),
        }
    }
}

/// A private key that signs as cosign does: ECDSA P-256 with SHA-256, ASN.1 DER signatures.
pub struct SigningKey {
    path: PathBuf,
    signer: SigStoreSigner,
    public_der: Vec<u8>,
}

impl std::fmt::Debug for SigningKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SigningKey")
            .field("path", &self.path)
            .field("fingerprint", &self.fingerprint())
            .finish_non_exhaustive()
    }
}

impl SigningKey {
    /// Reads `path`: cosign's `ENCRYPTED SIGSTORE PRIVATE KEY` (scrypt + secretbox, as `cosign
    /// generate-key-pair` writes it; needs `password`, which may be empty) or an unencrypted
    /// PKCS#8 PEM (`password` ignored).
    ///
    /// # Errors
    /// A [`SignError`] naming `path` when the file cannot be read, the password does not open it,
    /// or the key is not an ECDSA P-256 key.
    pub fn load(path: &Path, password: &[u8]) -> Result<Self, SignError> {
        let pem = std::fs::read(path)
            .map_err(|e| SignError::new(path, format!("cannot read it: {e}")))?;
        let encrypted = pem
            .windows(b"ENCRYPTED SIGSTORE PRIVATE KEY".len())
            .any(|w| w == b"ENCRYPTED SIGSTORE PRIVATE KEY");
        let pair = if encrypted {
            SigStoreKeyPair::from_encrypted_pem(&pem, password).map_err(|_| {
                SignError::new(
                    path,
                    "the password does not open this cosign key (COSIGN_PASSWORD)",
                )
            })?
        } else {
            SigStoreKeyPair::from_pem(&pem).map_err(|_| {
                SignError::new(
                    path,
                    "not a cosign key or a PKCS#8 PEM private key (`cosign generate-key-pair` makes one)",
                )
            })?
        };
        Self::from_pair(path, &pair)
    }

    fn from_pair(path: &Path, pair: &SigStoreKeyPair) -> Result<Self, SignError> {
        let signer = pair
            .to_sigstore_signer(&SigningScheme::ECDSA_P256_SHA256_ASN1)
            .map_err(|_| {
                SignError::new(path, "not an ECDSA P-256 key (cosign signs with P-256)")
            })?;
        let public_der = pair
            .public_key_to_der()
            .map_err(|e| SignError::new(path, format!("cannot encode its public key: {e}")))?;
        Ok(Self {
            path: path.to_path_buf(),
            signer,
            public_der,
        })
    }

    /// The key's identity as cosign names it in a bundle (`verificationMaterial.publicKey.hint`):
    /// base64 (standard, padded) of the SHA-256 of the DER SubjectPublicKeyInfo.
    pub fn fingerprint(&self) -> String {
        B64.encode(Sha256::digest(&self.public_der))
    }

    /// Signs `subject` (`sha256:<hex>` of the image index, named `name` = repository) with the
    /// predicate `predicate_type` / `predicate`, and returns the bundle JSON bytes: the layer of
    /// the referrer manifest.
    ///
    /// # Errors
    /// A [`SignError`] when `subject` is not a `sha256:` digest or the signer fails.
    pub fn bundle(
        &self,
        name: &str,
        subject: &str,
        predicate_type: &str,
        predicate: serde_json::Value,
    ) -> Result<Vec<u8>, SignError> {
        let fail = |message: String| SignError::new(&self.path, message);
        if !is_sha256_digest(subject) {
            return Err(fail(format!(
                "cannot sign {subject:?}: not a sha256 digest"
            )));
        }
        let hex = &subject["sha256:".len()..];
        let statement = serde_json::json!({
            "_type": "https://in-toto.io/Statement/v1",
            "subject": [{"name": name, "digest": {"sha256": hex}}],
            "predicateType": predicate_type,
            "predicate": predicate,
        });
        let payload = serde_json::to_vec(&statement).map_err(|e| fail(e.to_string()))?;
        let signature = self
            .signer
            .sign(&pae(IN_TOTO_MEDIA_TYPE, &payload))
            .map_err(|e| fail(format!("signing failed: {e}")))?;
        let bundle = serde_json::json!({
            "mediaType": BUNDLE_MEDIA_TYPE,
            "verificationMaterial": {"publicKey": {"hint": self.fingerprint()}},
            "dsseEnvelope": {
                "payload": B64.encode(&payload),
                "payloadType": IN_TOTO_MEDIA_TYPE,
                "signatures": [{"sig": B64.encode(&signature)}],
            },
        });
        serde_json::to_vec(&bundle).map_err(|e| fail(e.to_string()))
    }
}

/// DSSE's pre-authentication encoding: `DSSEv1 <len(type)> <type> <len(body)> <body>`, lengths
/// in ASCII decimal bytes (secure-systems-lab/dsse `protocol.md`). What the signature covers.
pub fn pae(payload_type: &str, payload: &[u8]) -> Vec<u8> {
    let mut out = format!(
        "DSSEv1 {} {} {} ",
        payload_type.len(),
        payload_type,
        payload.len()
    )
    .into_bytes();
    out.extend_from_slice(payload);
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use sigstore::crypto::Signature;

    fn new_pair() -> SigStoreKeyPair {
        SigningScheme::ECDSA_P256_SHA256_ASN1
            .create_signer()
            .unwrap()
            .to_sigstore_keypair()
            .unwrap()
    }

    fn key_file(dir: &Path, password: &[u8]) -> (PathBuf, SigStoreKeyPair) {
        let pair = new_pair();
        let path = dir.join("cosign.key");
        std::fs::write(
            &path,
            pair.private_key_to_encrypted_pem(password)
                .unwrap()
                .as_bytes(),
        )
        .unwrap();
        (path, pair)
    }

    fn envelope(bundle: &[u8]) -> (Vec<u8>, Vec<u8>, serde_json::Value) {
        let b: serde_json::Value = serde_json::from_slice(bundle).unwrap();
        let env = &b["dsseEnvelope"];
        let payload = B64.decode(env["payload"].as_str().unwrap()).unwrap();
        let sig = B64
            .decode(env["signatures"][0]["sig"].as_str().unwrap())
            .unwrap();
        (payload, sig, b)
    }

    #[test]
    fn a_cosign_key_signs_a_statement_its_public_key_verifies_and_a_flipped_byte_does_not() {
        let dir = tempfile::tempdir().unwrap();
        let (path, pair) = key_file(dir.path(), b"s3cret");
        let key = SigningKey::load(&path, b"s3cret").unwrap();
        let digest = format!("sha256:{}", "ab".repeat(32));
        let bundle = key
            .bundle(
                "registry.example/occm",
                &digest,
                COSIGN_SIGN_PREDICATE,
                serde_json::json!({}),
            )
            .unwrap();
        let (payload, sig, b) = envelope(&bundle);
        assert_eq!(b["mediaType"], BUNDLE_MEDIA_TYPE);
        assert_eq!(
            b["verificationMaterial"]["publicKey"]["hint"],
            key.fingerprint()
        );
        let statement: serde_json::Value = serde_json::from_slice(&payload).unwrap();
        assert_eq!(statement["subject"][0]["digest"]["sha256"], "ab".repeat(32));
        assert_eq!(statement["predicateType"], COSIGN_SIGN_PREDICATE);

        let verifier = pair
            .to_verification_key(&SigningScheme::ECDSA_P256_SHA256_ASN1)
            .unwrap();
        let signed = pae(IN_TOTO_MEDIA_TYPE, &payload);
        verifier
            .verify_signature(Signature::Raw(&sig), &signed)
            .unwrap();
        let mut tampered = payload.clone();
        tampered[10] ^= 1;
        assert!(
            verifier
                .verify_signature(Signature::Raw(&sig), &pae(IN_TOTO_MEDIA_TYPE, &tampered))
                .is_err()
        );
        let mut bad_sig = sig.clone();
        *bad_sig.last_mut().unwrap() ^= 1;
        assert!(
            verifier
                .verify_signature(Signature::Raw(&bad_sig), &signed)
                .is_err()
        );
    }

    #[test]
    fn a_wrong_password_is_one_line_naming_the_file_and_not_the_password() {
        let dir = tempfile::tempdir().unwrap();
        let (path, _) = key_file(dir.path(), b"s3cret");
        let err = SigningKey::load(&path, b"hunter2").unwrap_err().to_string();
        assert!(err.contains(&path.display().to_string()), "{err}");
        assert!(err.contains("password does not open"), "{err}");
        assert!(!err.contains("hunter2") && !err.contains("s3cret"), "{err}");
        assert_eq!(err.lines().count(), 1);
    }

    #[test]
    fn an_unreadable_or_foreign_key_file_is_refused_with_its_name() {
        let dir = tempfile::tempdir().unwrap();
        let missing = dir.path().join("absent.key");
        let err = SigningKey::load(&missing, b"").unwrap_err().to_string();
        assert!(
            err.starts_with(&format!(
                "signing key {}: cannot read it",
                missing.display()
            )),
            "{err}"
        );
        let junk = dir.path().join("junk.pem");
        std::fs::write(&junk, "not a key\n").unwrap();
        let err = SigningKey::load(&junk, b"").unwrap_err().to_string();
        assert!(err.contains("not a cosign key or a PKCS#8"), "{err}");
    }

    #[test]
    fn a_pkcs8_pem_key_signs_as_well_and_a_non_digest_subject_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        let pair = new_pair();
        let path = dir.path().join("key.pem");
        std::fs::write(&path, pair.private_key_to_pem().unwrap().as_bytes()).unwrap();
        let key = SigningKey::load(&path, b"ignored").unwrap();
        let ok = key.bundle(
            "r/o",
            &format!("sha256:{}", "0".repeat(64)),
            SPDX_PREDICATE,
            serde_json::json!({"spdxVersion": "SPDX-2.3"}),
        );
        assert!(ok.is_ok());
        let err = key
            .bundle(
                "r/o",
                "latest",
                COSIGN_SIGN_PREDICATE,
                serde_json::json!({}),
            )
            .unwrap_err()
            .to_string();
        assert!(err.contains("not a sha256 digest"), "{err}");
    }

    #[test]
    fn pae_is_dsse_v1() {
        assert_eq!(
            pae("application/x", b"hi"),
            b"DSSEv1 13 application/x 2 hi".to_vec()
        );
    }
}
