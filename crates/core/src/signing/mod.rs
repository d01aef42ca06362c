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
//! `build --sign-key` signs through the sign stage (`pipeline::stages::sign`); `verify` checks with
//! [`verify_bundle`].

pub mod tags;

use std::path::{Path, PathBuf};

use base64::{Engine as _, engine::general_purpose::STANDARD as B64};
use sha2::{Digest as _, Sha256};
use sigstore::crypto::{SigStoreSigner, SigningScheme, signing_key::SigStoreKeyPair};

use x509_cert::Certificate;
use x509_cert::der::{Decode as _, oid::ObjectIdentifier};

use crate::base::util::is_sha256_digest;

/// Media type of an in-toto Statement (a DSSE payload type, and the provenance referrer's
/// artifact type).
pub const IN_TOTO_MEDIA_TYPE: &str = "application/vnd.in-toto+json";
/// Media type of a Sigstore bundle v0.3, the artifact type of the referrer manifest carrying it.
pub const BUNDLE_MEDIA_TYPE: &str = "application/vnd.dev.sigstore.bundle.v0.3+json";
/// The predicate type of a plain image signature (what `cosign sign` v3 signs).
pub const COSIGN_SIGN_PREDICATE: &str = "https://sigstore.dev/cosign/sign/v1";
/// The predicate type of the build's provenance, and what `cosign attest --type
/// slsaprovenance1` writes.
pub const SLSA_PROVENANCE_V1: &str = "https://slsa.dev/provenance/v1";
/// The predicate type `cosign verify-attestation --type spdxjson` looks for.
pub const SPDX_PREDICATE: &str = "https://spdx.dev/Document";

/// The most a key file may hold (bytes); a cosign or PKCS#8 P-256 key is well under 1 KiB.
pub const MAX_KEY_BYTES: u64 = 64 * 1024;

/// Why a key of another algorithm or curve is refused.
const NOT_P256: &str = "not an ECDSA P-256 key: occm-forge signs with ECDSA P-256, the key `cosign generate-key-pair` makes";

/// The label of the first PEM block in `pem` (`-----BEGIN <label>-----`), if any.
fn pem_label(pem: &[u8]) -> Option<String> {
    let text = String::from_utf8_lossy(pem);
    let start = text.find("-----BEGIN ")? + "-----BEGIN ".len();
    let len = text[start..].find("-----")?;
    Some(text[start..start + len].to_string())
}

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
    /// generate-key-pair` writes it; opened with `password`, COSIGN_PASSWORD's bytes, `None`
    /// when it is not set, which opens a key made with an empty password) or an unencrypted
    /// PKCS#8 PEM (`password` ignored). At most [`MAX_KEY_BYTES`] are read.
    ///
    /// # Errors
    /// A [`SignError`] naming `path` and saying what to do: not a regular file (a FIFO would
    /// block), the file cannot be read or is too large; a damaged cosign key (its PEM block does not decode); the password does not open it
    /// (saying whether COSIGN_PASSWORD was set); a public key, an encrypted PKCS#8 or a SEC1 key
    /// (each with the command that converts it); not a key; not an ECDSA P-256 key.
    pub fn load(path: &Path, password: Option<&[u8]>) -> Result<Self, SignError> {
        use std::io::Read as _;
        let fail = |message: String| SignError::new(path, message);
        // A FIFO or a device would block or never end: only a regular file is opened.
        match std::fs::metadata(path) {
            Ok(m) if !m.is_file() => {
                return Err(fail(if m.is_dir() {
                    "a directory, not a key file".into()
                } else {
                    "not a regular file (a FIFO or a device?): give the key file itself".into()
                }));
            }
            _ => {}
        }
        let mut pem = Vec::new();
        std::fs::File::open(path)
            .and_then(|f| f.take(MAX_KEY_BYTES + 1).read_to_end(&mut pem))
            .map_err(|e| fail(format!("cannot read it: {e}")))?;
        if pem.len() as u64 > MAX_KEY_BYTES {
            return Err(fail(format!(
                "larger than {} KiB: not a key file",
                MAX_KEY_BYTES / 1024
            )));
        }
        let pair = match pem_label(&pem).as_deref() {
            Some("ENCRYPTED SIGSTORE PRIVATE KEY") => {
                if pem::parse(&pem).is_err() {
                    return Err(fail(
                        "a damaged cosign key: its PEM block does not decode (cut short, or pasted with a literal \\n instead of line breaks?)".into(),
                    ));
                }
                SigStoreKeyPair::from_encrypted_pem(&pem, password.unwrap_or_default()).map_err(
                    |_| {
                        fail(match password {
                            None => "this cosign key needs its password, and COSIGN_PASSWORD is not set".into(),
                            Some(_) => "the password in COSIGN_PASSWORD does not open this cosign key".into(),
                        })
                    },
                )?
            }
            Some("PUBLIC KEY") => {
                return Err(fail(
                    "a public key (like cosign.pub): --sign-key takes the private key (cosign.key)".into(),
                ));
            }
            Some("ENCRYPTED PRIVATE KEY") => {
                return Err(fail(
                    "an encrypted PKCS#8 key: import it as a cosign key (`cosign import-key-pair --key FILE`) or decrypt it (`openssl pkcs8 -in FILE -out key.pem`)".into(),
                ));
            }
            Some("EC PRIVATE KEY") => {
                return Err(fail(
                    "a SEC1 EC key: convert it (`openssl pkcs8 -topk8 -nocrypt -in FILE -out key.pem`, or `cosign import-key-pair --key FILE`)".into(),
                ));
            }
            Some("RSA PRIVATE KEY") => return Err(fail(NOT_P256.into())),
            _ => SigStoreKeyPair::from_pem(&pem).map_err(|_| {
                fail(
                    "not a cosign key or a PKCS#8 PEM private key (`cosign generate-key-pair` makes one)".into(),
                )
            })?,
        };
        Self::from_pair(path, &pair)
    }

    fn from_pair(path: &Path, pair: &SigStoreKeyPair) -> Result<Self, SignError> {
        let signer = pair
            .to_sigstore_signer(&SigningScheme::ECDSA_P256_SHA256_ASN1)
            .map_err(|_| SignError::new(path, NOT_P256))?;
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

    /// The public key as a PEM `PUBLIC KEY` block (what `cosign generate-key-pair` writes to
    /// `cosign.pub`), recorded in images.lock.yaml so `verify` can check the signature.
    pub fn public_key_pem(&self) -> String {
        let b64 = B64.encode(&self.public_der);
        let mut pem = String::from("-----BEGIN PUBLIC KEY-----\n");
        for line in b64.as_bytes().chunks(64) {
            pem.push_str(std::str::from_utf8(line).expect("base64 is ASCII"));
            pem.push('\n');
        }
        pem.push_str("-----END PUBLIC KEY-----\n");
        pem
    }

    /// Signs `statement` (the exact bytes of an in-toto Statement, e.g. from [`statement`] or
    /// the build's provenance) and returns the bundle JSON bytes: a DSSE envelope with payload
    /// type `application/vnd.in-toto+json` and one ECDSA signature over its PAE, the key named
    /// by its [`fingerprint`](Self::fingerprint) hint. This is the layer of the referrer
    /// manifest.
    ///
    /// # Errors
    /// A [`SignError`] when the signer fails.
    pub fn sign_statement(&self, statement: &[u8]) -> Result<Vec<u8>, SignError> {
        let signature = self
            .signer
            .sign(&pae(IN_TOTO_MEDIA_TYPE, statement))
            .map_err(|e| SignError::new(&self.path, format!("signing failed: {e}")))?;
        let bundle = serde_json::json!({
            "mediaType": BUNDLE_MEDIA_TYPE,
            "verificationMaterial": {"publicKey": {"hint": self.fingerprint()}},
            "dsseEnvelope": {
                "payload": B64.encode(statement),
                "payloadType": IN_TOTO_MEDIA_TYPE,
                "signatures": [{"sig": B64.encode(&signature)}],
            },
        });
        Ok(serde_json::to_vec(&bundle).expect("a JSON value serialises"))
    }
}

/// An in-toto Statement v1 (`https://in-toto.io/Statement/v1`) about `subjects` (each
/// `(name, "sha256:<hex>")`, name = repository) with `predicate_type` / `predicate`, as bytes.
///
/// # Errors
/// The first subject digest that is not `sha256:<64 lower-case hex>`, in one line.
pub fn statement(
    subjects: &[(&str, &str)],
    predicate_type: &str,
    predicate: serde_json::Value,
) -> Result<Vec<u8>, String> {
    let mut listed = Vec::new();
    for (name, digest) in subjects {
        let Some(hex) = digest
            .strip_prefix("sha256:")
            .filter(|_| is_sha256_digest(digest))
        else {
            return Err(format!("cannot sign {digest:?}: not a sha256 digest"));
        };
        listed.push(serde_json::json!({"name": name, "digest": {"sha256": hex}}));
    }
    let statement = serde_json::json!({
        "_type": "https://in-toto.io/Statement/v1",
        "subject": listed,
        "predicateType": predicate_type,
        "predicate": predicate,
    });
    Ok(serde_json::to_vec(&statement).expect("a JSON value serialises"))
}

/// The fingerprint ([`SigningKey::fingerprint`]) of a PEM `PUBLIC KEY`: base64 of the SHA-256
/// of its DER body.
///
/// # Errors
/// One line when `public_key_pem` is not exactly one PEM `PUBLIC KEY` block, or not an ECDSA
/// P-256 key (what `cosign generate-key-pair` makes and occm-forge verifies).
pub fn public_key_fingerprint(public_key_pem: &str) -> Result<String, String> {
    use sigstore::crypto::CosignVerificationKey;
    let blocks = pem::parse_many(public_key_pem.as_bytes())
        .map_err(|_| "not a PEM PUBLIC KEY (a PEM block does not decode)".to_string())?;
    let [block] = blocks.as_slice() else {
        return Err(format!(
            "holds {} PEM blocks, not one PUBLIC KEY",
            blocks.len()
        ));
    };
    if block.tag() != "PUBLIC KEY" {
        return Err(format!("a PEM {}, not a PUBLIC KEY", block.tag()));
    }
    let not_p256 = || NOT_P256.replace("key: occm-forge signs", "public key: occm-forge verifies");
    match CosignVerificationKey::try_from_der(block.contents()) {
        Ok(CosignVerificationKey::ECDSA_P256_SHA256_ASN1(_)) => {}
        _ => return Err(not_p256()),
    }
    Ok(B64.encode(Sha256::digest(block.contents())))
}

/// What a bundle that verified says: its key hint and its Statement.
#[derive(Debug, Clone)]
pub struct VerifiedBundle {
    /// `verificationMaterial.publicKey.hint`, when the bundle names its key.
    pub hint: Option<String>,
    /// The signed in-toto Statement.
    pub statement: serde_json::Value,
}

impl VerifiedBundle {
    /// The `sha256:<hex>` digests of the Statement's subjects.
    pub fn subject_digests(&self) -> Vec<String> {
        self.statement["subject"]
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(|s| s["digest"]["sha256"].as_str())
            .map(|hex| format!("sha256:{hex}"))
            .collect()
    }

    /// The Statement's `predicateType`.
    pub fn predicate_type(&self) -> &str {
        self.statement["predicateType"].as_str().unwrap_or("")
    }
}

/// Fulcio's OIDC issuer extension, a DER UTF8String (Fulcio `docs/oid-info.md`).
const ISSUER_V2_OID: ObjectIdentifier = ObjectIdentifier::new_unwrap("1.3.6.1.4.1.57264.1.8");
/// Fulcio's deprecated OIDC issuer extension, the raw string.
const ISSUER_V1_OID: ObjectIdentifier = ObjectIdentifier::new_unwrap("1.3.6.1.4.1.57264.1.1");
/// X.509 subject alternative name (RFC 5280 4.2.1.6).
const SAN_OID: ObjectIdentifier = ObjectIdentifier::new_unwrap("2.5.29.17");

/// Who a keyless bundle's certificate names: its identity and its OIDC issuer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CertificateIdentity {
    /// The identity cosign compares `--certificate-identity` with: the first subject alternative
    /// name in Go's order, DNS names, then e-mail addresses, then URIs (sigstore's
    /// `cryptoutils.GetSubjectAlternateNames`, of which sigstore-go takes the first; Fulcio
    /// issues one).
    pub identity: Option<String>,
    /// Fulcio's issuer extension (1.3.6.1.4.1.57264.1.8, else .1.1), when present.
    pub issuer: Option<String>,
}

impl std::fmt::Display for CertificateIdentity {
    /// `<identity> (issuer <issuer>)`, control characters escaped (a certificate is anyone's
    /// text until it is checked; it must not add lines to a log).
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let shown = |s: &Option<String>, none: &str| match s {
            Some(s) => printable(s),
            None => none.to_string(),
        };
        write!(
            f,
            "{} (issuer {})",
            shown(&self.identity, "no identity"),
            shown(&self.issuer, "none")
        )
    }
}

/// `s` with control characters (newlines, escape sequences) escaped as `\u{…}`.
pub fn printable(s: &str) -> String {
    s.chars()
        .flat_map(|c| {
            let escaped: Vec<char> = if c.is_control() {
                c.escape_unicode().collect()
            } else {
                vec![c]
            };
            escaped
        })
        .collect()
}

/// The signing certificate of a bundle: `verificationMaterial.certificate` (bundle v0.3) or the
/// first of `verificationMaterial.x509CertificateChain` (v0.1, v0.2), DER in base64
/// (sigstore/protobuf-specs `sigstore_bundle.proto`); `None` for a keyed bundle.
fn bundle_certificate(b: &serde_json::Value) -> Option<Result<Certificate, String>> {
    let m = &b["verificationMaterial"];
    let raw = m["certificate"]["rawBytes"]
        .as_str()
        .or_else(|| m["x509CertificateChain"]["certificates"][0]["rawBytes"].as_str())?;
    Some(
        B64.decode(raw)
            .map_err(|e| format!("its certificate is not base64: {e}"))
            .and_then(|der| {
                Certificate::from_der(&der)
                    .map_err(|e| format!("its certificate is not X.509: {e}"))
            }),
    )
}

/// The identities and the OIDC issuer a Fulcio certificate names.
fn certificate_identity(cert: &Certificate) -> CertificateIdentity {
    use x509_cert::der::asn1::Utf8StringRef;
    use x509_cert::ext::pkix::{SubjectAltName, name::GeneralName};
    let extensions = cert.tbs_certificate().extensions().map(Vec::as_slice);
    let ext = |oid| {
        extensions
            .unwrap_or_default()
            .iter()
            .find(|e| e.extn_id == oid)
            .map(|e| e.extn_value.as_bytes())
    };
    // sigstore's order: DNS names, then e-mail addresses, then URIs; the first of the first kind.
    let identity = ext(SAN_OID)
        .and_then(|v| SubjectAltName::from_der(v).ok())
        .and_then(|san| {
            san.0
                .iter()
                .filter_map(|n| match n {
                    GeneralName::DnsName(s) => Some((0, s)),
                    GeneralName::Rfc822Name(s) => Some((1, s)),
                    GeneralName::UniformResourceIdentifier(s) => Some((2, s)),
                    _ => None,
                })
                .min_by_key(|(rank, _)| *rank)
                .map(|(_, s)| s.as_str().to_string())
        });
    let issuer = ext(ISSUER_V2_OID)
        .and_then(|v| {
            Utf8StringRef::from_der(v)
                .ok()
                .map(|s| s.as_str().to_string())
        })
        .or_else(|| ext(ISSUER_V1_OID).and_then(|v| String::from_utf8(v.to_vec()).ok()));
    CertificateIdentity { identity, issuer }
}

/// Who a bundle says signed it, unverified, for messages: `key <hint>`, the certificate's
/// [`CertificateIdentity`], `a key it does not name`, or what the bytes are instead (`not a
/// Sigstore bundle`); control characters escaped ([`printable`]).
pub fn bundle_signer(bundle: &[u8]) -> String {
    let Ok(b) = serde_json::from_slice::<serde_json::Value>(bundle) else {
        return "not a Sigstore bundle (not JSON)".into();
    };
    if !b["verificationMaterial"].is_object() {
        return "not a Sigstore bundle (no verificationMaterial)".into();
    }
    match bundle_certificate(&b) {
        Some(Ok(cert)) => certificate_identity(&cert).to_string(),
        Some(Err(e)) => e,
        None => match b["verificationMaterial"]["publicKey"]["hint"].as_str() {
            Some(hint) => format!("key {}", printable(hint)),
            None => "a key it does not name".into(),
        },
    }
}

/// Verifies a bundle made by [`SigningKey::sign_statement`], `cosign sign` or `cosign attest`
/// against `signer`: with a key, some signature of its DSSE envelope verifies over the PAE of
/// its payload (whose type is in-toto's) with the PEM `PUBLIC KEY` (ECDSA P-256); keyless, the
/// bundle's certificate names the identity (a URI or e-mail subject alternative name, exactly)
/// and the OIDC issuer, and the signature verifies with the certificate's key.
///
/// Keyless, this binds the bundle to the identity the digest manifest records; that the
/// certificate chains to Fulcio's root and that Rekor logged the signature is what `cosign
/// verify` checks with Sigstore's trusted root (docs/operators.md, section 13), not this.
///
/// # Errors
/// One line: the bundle is not a DSSE bundle, the key or certificate cannot be read, the
/// certificate names another identity or issuer, or no signature verifies.
pub fn verify_bundle(signer: Signer<'_>, bundle: &[u8]) -> Result<VerifiedBundle, String> {
    let b: serde_json::Value =
        serde_json::from_slice(bundle).map_err(|e| format!("not a Sigstore bundle: {e}"))?;
    let (key, whose) = verification_key(signer, bundle_certificate(&b))?;
    let payload = verify_dsse(&key, whose, &b["dsseEnvelope"])?;
    let statement =
        serde_json::from_slice(&payload).map_err(|e| format!("the payload is not JSON: {e}"))?;
    Ok(VerifiedBundle {
        hint: b["verificationMaterial"]["publicKey"]["hint"]
            .as_str()
            .map(str::to_string),
        statement,
    })
}

/// The key a signature by `signer` verifies with, and how to name it: the recorded public key
/// (refused when the signature comes with a `certificate`: keyless, not by a key), or the key of
/// the `certificate` that came with it, which must name the recorded identity and issuer.
///
/// # Errors
/// One line: the key or certificate cannot be read, there is the wrong kind of material, the
/// certificate names another identity or issuer.
pub(crate) fn verification_key(
    signer: Signer<'_>,
    certificate: Option<Result<Certificate, String>>,
) -> Result<(sigstore::crypto::CosignVerificationKey, &'static str), String> {
    use sigstore::crypto::CosignVerificationKey;
    match signer {
        Signer::Key { .. } if certificate.is_some() => {
            Err("signed with a certificate (keyless), not a key".into())
        }
        Signer::Key { public_key, .. } => Ok((
            CosignVerificationKey::from_pem(
                public_key.as_bytes(),
                &SigningScheme::ECDSA_P256_SHA256_ASN1,
            )
            .map_err(|e| format!("the recorded public key cannot be read: {e}"))?,
            "the recorded public key",
        )),
        Signer::Certificate { identity, issuer } => {
            let cert = certificate.ok_or("signed with a key, not a certificate")??;
            let named = certificate_identity(&cert);
            if named.identity.as_deref() != Some(identity)
                || named.issuer.as_deref() != Some(issuer)
            {
                return Err(format!(
                    "its certificate names {named}, not {}",
                    printable(&signer.to_string())
                ));
            }
            Ok((
                CosignVerificationKey::try_from(cert.tbs_certificate().subject_public_key_info())
                    .map_err(|e| format!("its certificate's key cannot be read: {e}"))?,
                "its certificate's key",
            ))
        }
    }
}

/// The payload of the DSSE envelope `env` (`payloadType`, base64 `payload`, `signatures`) of an
/// in-toto Statement, when some signature verifies over its PAE with `key` (named `whose`).
///
/// # Errors
/// One line: not an in-toto envelope, the payload is not base64, no signature verifies.
pub(crate) fn verify_dsse(
    key: &sigstore::crypto::CosignVerificationKey,
    whose: &str,
    env: &serde_json::Value,
) -> Result<Vec<u8>, String> {
    use sigstore::crypto::Signature;
    if env["payloadType"].as_str() != Some(IN_TOTO_MEDIA_TYPE) {
        return Err("not a DSSE bundle of an in-toto Statement".into());
    }
    let payload = env["payload"]
        .as_str()
        .and_then(|p| B64.decode(p).ok())
        .ok_or("the DSSE payload is not base64")?;
    let signed = pae(IN_TOTO_MEDIA_TYPE, &payload);
    let verified = env["signatures"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|s| s["sig"].as_str().and_then(|s| B64.decode(s).ok()))
        .any(|sig| key.verify_signature(Signature::Raw(&sig), &signed).is_ok());
    if !verified {
        return Err(format!("no signature verifies with {whose}"));
    }
    Ok(payload)
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

/// Who signed, as a digest manifest entry's `signature` records it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Signer<'a> {
    /// A key: its fingerprint and its PEM `PUBLIC KEY`.
    Key {
        /// `Signature::key`.
        fingerprint: &'a str,
        /// `Signature::public_key`.
        public_key: &'a str,
    },
    /// A Fulcio certificate naming this identity and OIDC issuer (keyless).
    Certificate {
        /// `Signature::certificate_identity`.
        identity: &'a str,
        /// `Signature::certificate_oidc_issuer`.
        issuer: &'a str,
    },
}

impl std::fmt::Display for Signer<'_> {
    /// `key <fingerprint>` or `<identity> (issuer <issuer>)`.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Signer::Key { fingerprint, .. } => write!(f, "key {fingerprint}"),
            Signer::Certificate { identity, issuer } => write!(f, "{identity} (issuer {issuer})"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use sigstore::crypto::Signature;

    fn by_key(public_key: &str) -> Signer<'_> {
        Signer::Key {
            fingerprint: "",
            public_key,
        }
    }

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
        let key = SigningKey::load(&path, Some(b"s3cret")).unwrap();
        let digest = format!("sha256:{}", "ab".repeat(32));
        let stmt = statement(
            &[("registry.example/occm", &digest)],
            COSIGN_SIGN_PREDICATE,
            serde_json::json!({}),
        )
        .unwrap();
        let bundle = key.sign_statement(&stmt).unwrap();
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
        let err = SigningKey::load(&path, Some(b"hunter2"))
            .unwrap_err()
            .to_string();
        assert!(err.contains(&path.display().to_string()), "{err}");
        assert!(
            err.contains("the password in COSIGN_PASSWORD does not open"),
            "{err}"
        );
        assert!(!err.contains("hunter2") && !err.contains("s3cret"), "{err}");
        assert_eq!(err.lines().count(), 1);
    }

    #[test]
    fn near_miss_key_files_say_what_they_are_and_what_to_do() {
        let dir = tempfile::tempdir().unwrap();
        let (path, pair) = key_file(dir.path(), b"s3cret");
        let load = |name: &str, bytes: &[u8], password: Option<&[u8]>| {
            let p = dir.path().join(name);
            std::fs::write(&p, bytes).unwrap();
            let err = SigningKey::load(&p, password).unwrap_err().to_string();
            assert_eq!(err.lines().count(), 1, "{err}");
            err
        };
        let unset = SigningKey::load(&path, None).unwrap_err().to_string();
        assert!(
            unset.ends_with("needs its password, and COSIGN_PASSWORD is not set"),
            "{unset}"
        );
        let key = std::fs::read_to_string(&path).unwrap();
        let cut = load("cut.key", &key.as_bytes()[..200], Some(b"s3cret"));
        assert!(cut.contains("a damaged cosign key"), "{cut}");
        let pasted = load(
            "pasted.key",
            key.replace('\n', "\\n").as_bytes(),
            Some(b"s3cret"),
        );
        assert!(pasted.contains("a damaged cosign key"), "{pasted}");
        let public = load(
            "cosign.pub",
            pair.public_key_to_pem().unwrap().as_bytes(),
            None,
        );
        assert!(
            public.contains("a public key (like cosign.pub)"),
            "{public}"
        );
        let sec1 = load(
            "sec1.pem",
            b"-----BEGIN EC PRIVATE KEY-----\nAAAA\n-----END EC PRIVATE KEY-----\n",
            None,
        );
        assert!(sec1.contains("openssl pkcs8 -topk8 -nocrypt"), "{sec1}");
        let big = load("big.pem", &vec![b'A'; MAX_KEY_BYTES as usize + 1], None);
        assert!(big.ends_with("larger than 64 KiB: not a key file"), "{big}");
    }

    #[test]
    fn an_unreadable_or_foreign_key_file_is_refused_with_its_name() {
        let dir = tempfile::tempdir().unwrap();
        let missing = dir.path().join("absent.key");
        let err = SigningKey::load(&missing, None).unwrap_err().to_string();
        assert!(
            err.starts_with(&format!(
                "signing key {}: cannot read it",
                missing.display()
            )),
            "{err}"
        );
        let fifo = dir.path().join("fifo.key");
        let c = std::ffi::CString::new(fifo.as_os_str().as_encoded_bytes()).unwrap();
        assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o600) }, 0);
        let err = SigningKey::load(&fifo, None).unwrap_err().to_string();
        assert!(
            err.ends_with("not a regular file (a FIFO or a device?): give the key file itself"),
            "{err}"
        );
        let err = SigningKey::load(dir.path(), None).unwrap_err().to_string();
        assert!(err.ends_with("a directory, not a key file"), "{err}");
        let junk = dir.path().join("junk.pem");
        std::fs::write(&junk, "not a key\n").unwrap();
        let err = SigningKey::load(&junk, None).unwrap_err().to_string();
        assert!(err.contains("not a cosign key or a PKCS#8"), "{err}");
    }

    #[test]
    fn a_pkcs8_pem_key_signs_as_well_and_a_non_digest_subject_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        let pair = new_pair();
        let path = dir.path().join("key.pem");
        std::fs::write(&path, pair.private_key_to_pem().unwrap().as_bytes()).unwrap();
        let key = SigningKey::load(&path, Some(b"ignored")).unwrap();
        let digest = format!("sha256:{}", "0".repeat(64));
        let stmt = statement(
            &[("r/o", &digest)],
            SPDX_PREDICATE,
            serde_json::json!({"spdxVersion": "SPDX-2.3"}),
        )
        .unwrap();
        let bundle = key.sign_statement(&stmt).unwrap();
        let public = pair.public_key_to_pem().unwrap();
        let verified = verify_bundle(by_key(&public), &bundle).unwrap();
        assert_eq!(verified.subject_digests(), [digest]);
        assert_eq!(verified.predicate_type(), SPDX_PREDICATE);
        for subject in ["latest", "sha256:ABCD"] {
            let err = statement(
                &[("r/o", subject)],
                COSIGN_SIGN_PREDICATE,
                serde_json::json!({}),
            )
            .unwrap_err();
            assert!(err.contains("not a sha256 digest"), "{err}");
        }
    }

    #[test]
    fn verify_bundle_accepts_the_signing_key_only_and_refuses_a_changed_payload_or_signature() {
        let dir = tempfile::tempdir().unwrap();
        let (path, pair) = key_file(dir.path(), b"");
        let key = SigningKey::load(&path, None).unwrap();
        // What cosign.pub holds (LF line ends; the sigstore crate writes CRLF).
        assert_eq!(
            key.public_key_pem(),
            pair.public_key_to_pem().unwrap().replace("\r\n", "\n")
        );
        let stmt = statement(
            &[("r/o", &format!("sha256:{}", "1".repeat(64)))],
            COSIGN_SIGN_PREDICATE,
            serde_json::json!({}),
        )
        .unwrap();
        let bundle = key.sign_statement(&stmt).unwrap();
        let verified = verify_bundle(by_key(&key.public_key_pem()), &bundle).unwrap();
        assert_eq!(verified.hint.as_deref(), Some(key.fingerprint().as_str()));
        assert_eq!(
            public_key_fingerprint(&key.public_key_pem()).unwrap(),
            key.fingerprint()
        );

        let other = new_pair().public_key_to_pem().unwrap();
        let err = verify_bundle(by_key(&other), &bundle).unwrap_err();
        assert!(err.contains("no signature verifies"), "{err}");

        let mut b: serde_json::Value = serde_json::from_slice(&bundle).unwrap();
        let mut forged = stmt.clone();
        forged[20] ^= 1;
        b["dsseEnvelope"]["payload"] = B64.encode(&forged).into();
        let err = verify_bundle(
            by_key(&key.public_key_pem()),
            &serde_json::to_vec(&b).unwrap(),
        )
        .unwrap_err();
        assert!(err.contains("no signature verifies"), "{err}");
    }

    #[test]
    fn a_keyless_bundle_verifies_only_for_the_identity_and_issuer_its_certificate_names() {
        use crate::testing::CertificateSigner;
        const ID: &str =
            "https://github.com/example/occm/.github/workflows/build.yml@refs/heads/main";
        const ISSUER: &str = "https://token.actions.githubusercontent.com";
        let ours = CertificateSigner::new(ID, ISSUER);
        let stmt = statement(
            &[("r/o", &format!("sha256:{}", "2".repeat(64)))],
            COSIGN_SIGN_PREDICATE,
            serde_json::json!({}),
        )
        .unwrap();
        let bundle = ours.sign(&stmt);
        let by = |identity, issuer| Signer::Certificate { identity, issuer };
        let verified = verify_bundle(by(ID, ISSUER), &bundle).unwrap();
        assert_eq!(verified.predicate_type(), COSIGN_SIGN_PREDICATE);
        assert_eq!(bundle_signer(&bundle), format!("{ID} (issuer {ISSUER})"));

        // Another workflow (a fork, a branch), another issuer.
        let other = "https://github.com/fork/occm/.github/workflows/build.yml@refs/heads/main";
        let err = verify_bundle(by(other, ISSUER), &bundle).unwrap_err();
        assert_eq!(
            err,
            format!("its certificate names {ID} (issuer {ISSUER}), not {other} (issuer {ISSUER})")
        );
        let err = verify_bundle(by(ID, "https://accounts.google.com"), &bundle).unwrap_err();
        assert!(err.starts_with("its certificate names"), "{err}");

        // A certificate naming the identity on someone else's signature: the signature must
        // verify with the certificate's key.
        let forger = CertificateSigner::new(ID, ISSUER);
        let forged: serde_json::Value = serde_json::from_slice(&forger.sign(&stmt)).unwrap();
        let mut mixed: serde_json::Value = serde_json::from_slice(&bundle).unwrap();
        mixed["dsseEnvelope"]["signatures"] = forged["dsseEnvelope"]["signatures"].clone();
        let err = verify_bundle(by(ID, ISSUER), &serde_json::to_vec(&mixed).unwrap()).unwrap_err();
        assert_eq!(err, "no signature verifies with its certificate's key");

        // A keyed bundle is no keyless signature.
        let dir = tempfile::tempdir().unwrap();
        let (path, _) = key_file(dir.path(), b"");
        let keyed = SigningKey::load(&path, None)
            .unwrap()
            .sign_statement(&stmt)
            .unwrap();
        let err = verify_bundle(by(ID, ISSUER), &keyed).unwrap_err();
        assert_eq!(err, "signed with a key, not a certificate");
        assert!(bundle_signer(&keyed).starts_with("key "));

        // The certificate's key is no key of a keyed signature (`cosign verify --key` refuses
        // it the same way).
        let err = verify_bundle(by_key(&ours.public_key_pem()), &bundle).unwrap_err();
        assert_eq!(err, "signed with a certificate (keyless), not a key");

        // Only the first subject alternative name is the identity, as cosign reads it.
        let two = CertificateSigner::with_uris(&[ID, "https://example.com/second"], ISSUER);
        let bundle = two.sign(&stmt);
        assert!(verify_bundle(by(ID, ISSUER), &bundle).is_ok());
        let err = verify_bundle(by("https://example.com/second", ISSUER), &bundle).unwrap_err();
        assert!(err.starts_with("its certificate names"), "{err}");

        // A certificate is anyone's text: it cannot add a line to a log.
        let evil = CertificateSigner::new(ID, "https://evil.example\n::add-mask::\u{1b}[31m");
        let named = bundle_signer(&evil.sign(&stmt));
        assert_eq!(
            named,
            format!("{ID} (issuer https://evil.example\\u{{a}}::add-mask::\\u{{1b}}[31m)")
        );
        let err = verify_bundle(by(ID, ISSUER), &evil.sign(&stmt)).unwrap_err();
        assert!(!err.contains('\n') && !err.contains('\u{1b}'), "{err}");
    }

    #[test]
    fn a_public_key_is_one_p256_pem_block() {
        let p256 = new_pair().public_key_to_pem().unwrap();
        assert!(public_key_fingerprint(&p256).is_ok());
        let two = public_key_fingerprint(&format!("{p256}{p256}")).unwrap_err();
        assert_eq!(two, "holds 2 PEM blocks, not one PUBLIC KEY");
        let p384 = rcgen::KeyPair::generate_for(&rcgen::PKCS_ECDSA_P384_SHA384)
            .unwrap()
            .public_key_pem();
        let err = public_key_fingerprint(&p384).unwrap_err();
        assert!(err.starts_with("not an ECDSA P-256 public key"), "{err}");
        let private = rcgen::KeyPair::generate_for(&rcgen::PKCS_ECDSA_P256_SHA256)
            .unwrap()
            .serialize_pem();
        let err = public_key_fingerprint(&private).unwrap_err();
        assert_eq!(err, "a PEM PRIVATE KEY, not a PUBLIC KEY");
    }

    #[test]
    fn pae_is_dsse_v1() {
        assert_eq!(
            pae("application/x", b"hi"),
            b"DSSEv1 13 application/x 2 hi".to_vec()
        );
    }
}
