//! The digest manifest's format: the YAML file (`images.lock.yaml`) that Magnum / Atmosphere
//! templates consume, read and written, below the build that records it (`pipeline::record`:
//! the run lock, the tag guard, record, merge) and the commands that read it (render,
//! clusters, copy, verify, signatures, export, accept's report).
//!
//! Keyed by the quoted Kubernetes minor (`"1.34"`; unquoted YAML would read `1.30` as the float
//! 1.3). Each entry gives the image as `<repository>:<tag>@sha256:<hex>` (always with a tag: the
//! OCCM chart renders `repository:tag`), the digest of the top-level image index (the digest
//! Atmosphere pins) and every input that produced it. The file is rewritten atomically
//! (temporary file + rename) and only one minor's entry changes per build.

pub mod inputs;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use crate::base::util::short;
use crate::config::Minor;
use crate::registry::publish::ReferrersPushed;
use inputs::BuildInputs;

/// Current `schema_version`.
pub const SCHEMA_VERSION: u32 = 1;

/// One minor's image and the inputs it was built from.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Entry {
    /// `<repository>:<tag>@sha256:<hex>`.
    pub image: String,
    /// Target repository, e.g. `registry.example.internal/occm/openstack-cloud-controller-manager`.
    pub repository: String,
    /// Image tag, e.g. `v1.34.1-occmforge.1`.
    pub tag: String,
    /// `sha256:<hex>` of the top-level image index.
    pub digest: String,
    /// Whether this build pushed the image to `repository` (false: only the OCI layout was written).
    pub published: bool,
    /// Other repositories (`registry/path`) the image was copied to by `occm-forge copy`, with
    /// every digest unchanged and checked there; `verify` checks each. Omitted when empty.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub mirrors: Vec<String>,
    /// Upstream tag built.
    pub upstream_tag: String,
    /// Upstream commit built (40 hex).
    pub upstream_commit: String,
    /// sha256 over the ordered patch series (see `patches::series_sha256`).
    pub patch_series_sha256: String,
    /// Patch file names in series order.
    pub patches: Vec<String>,
    /// Patches of the series found already upstream and skipped.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub already_upstream: Vec<String>,
    /// Patches of the series that applied only three-way (as `git am -3`), each with what was
    /// merged per file (`cmd/…/main.go: 1 hunk merged with upstream's changes since blob …`).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub applied_three_way: BTreeMap<String, Vec<String>>,
    /// Platforms, e.g. `linux/amd64`.
    pub platforms: Vec<String>,
    /// Platform → digest of that platform's image manifest.
    pub manifests: BTreeMap<String, String>,
    /// Platform → digest of the referrer manifest carrying that image's SPDX SBOM.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub sbom: BTreeMap<String, String>,
    /// Digest of the referrer manifest carrying the build's SLSA provenance (subject: the index).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub provenance: Option<String>,
    /// Go toolchain version used.
    pub go_version: String,
    /// Base image as configured (`static` or a reference).
    pub base_image: String,
    /// Digest the base was pulled by; absent for `static`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub base_digest: Option<String>,
    /// The epoch every time inside the image is set to (SOURCE_DATE_EPOCH or the commit time).
    pub source_date_epoch: i64,
    /// When this build finished (RFC 3339 UTC, wall clock; not part of the image).
    pub built_at: String,
    /// Everything that determined the image, with its fingerprint (`build` is a no-op when a
    /// new build's inputs have the same fingerprint and the result is still there). Absent in
    /// entries recorded before occm-forge recorded inputs.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub inputs: Option<BuildInputs>,
    /// Whether this image passed `build --accept` (ours passes every scenario, the control shows
    /// the bugs of S1, S2, S5, S7 and S8) before it was recorded; absent (false) otherwise. `build --accept` rebuilds an entry
    /// recorded without it.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub accepted: bool,
    /// The scenarios that acceptance ran (`[S1, …, S8]`), when `accepted`; an entry accepted on
    /// fewer scenarios than this occm-forge runs (or recorded before this field) is accepted again
    /// under `build --accept`.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub accepted_scenarios: Vec<String>,
    /// How the SBOM and provenance went to the registry (`--referrers`): `subject` (OCI 1.1
    /// referrers), `tag-schema` (the registry refused `subject`: the referrer manifests recorded
    /// in `sbom` and `provenance` carry none and are listed in their subject's `sha256-<hex>`
    /// index) or `skipped` (not pushed; `sbom` and `provenance` name the layout's). Absent for an
    /// unpublished entry, and in a published one recorded before occm-forge recorded it, which
    /// reads as `subject`. Not an input of the image: the image digest is the same either way.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub referrers: Option<ReferrersPushed>,
    /// The image's signature and attestations (`build --sign-key`); absent for an unsigned
    /// build. `verify` checks them with the recorded public key.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub signature: Option<Signature>,
}

/// How an image is signed: cosign's Sigstore bundles (v0.3, DSSE over an in-toto Statement),
/// each the layer of a referrer manifest of the index, in the form `referrers` records. Not an
/// input of the image: its digest is the same signed or not.
///
/// The signer is either a key (`key` and `public_key`, as `build --sign-key` records it) or a
/// certificate identity (`certificate_identity` and `certificate_oidc_issuer`, cosign's keyless
/// signing with a Fulcio certificate, as `manifest record-signatures` records it); see
/// [`Signature::signer`].
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Signature {
    /// `sha256:<hex>` of the referrer manifest carrying the signature of the index (predicate
    /// `https://sigstore.dev/cosign/sign/v1`, what `cosign verify` checks).
    pub digest: String,
    /// A key's identity: its fingerprint as cosign names it in a bundle
    /// (`verificationMaterial.publicKey.hint`, base64 of the SHA-256 of the DER public key).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub key: Option<String>,
    /// The public key (PEM `PUBLIC KEY`, as in `cosign.pub`) the signature verifies with.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub public_key: Option<String>,
    /// Keyless: the signer's identity, the certificate's subject alternative name (for a GitHub
    /// workflow `https://github.com/<owner>/<repo>/.github/workflows/<file>@<ref>`), as given
    /// to `cosign verify --certificate-identity`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub certificate_identity: Option<String>,
    /// Keyless: the OIDC issuer the certificate names (Fulcio's extension
    /// 1.3.6.1.4.1.57264.1.8, or .1.1), as given to `cosign verify --certificate-oidc-issuer`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub certificate_oidc_issuer: Option<String>,
    /// Attestation → `sha256:<hex>` of the referrer manifest carrying its bundle: `provenance`
    /// (SLSA provenance v1, `cosign verify-attestation --type slsaprovenance1`) and `sbom
    /// <platform>` (SPDX, `--type spdxjson`). In cosign's tag scheme, of the `.att` manifest.
    pub attestations: BTreeMap<String, String>,
    /// Where they are: Sigstore bundles as referrers of the index (the default, left out of the
    /// file), or cosign's tags (`cosign-tags`: `digest` is then the manifest tagged
    /// `sha256-<hex>.sig`, each attestation the one tagged `sha256-<hex>.att`;
    /// [`crate::signing::tags`]).
    #[serde(default, skip_serializing_if = "SignatureForm::is_bundles")]
    pub form: SignatureForm,
}

/// Where a signature and its attestations are stored.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum SignatureForm {
    /// Sigstore bundles as OCI 1.1 referrers of the index (cosign 3, `build --sign-key`).
    #[default]
    Bundles,
    /// cosign's tag scheme, `sha256-<hex>.sig` and `.att` (cosign 2, and cosign 3 with
    /// `--new-bundle-format=false`).
    CosignTags,
}

impl SignatureForm {
    /// Whether it is the default, [`SignatureForm::Bundles`].
    pub fn is_bundles(&self) -> bool {
        *self == SignatureForm::Bundles
    }
}

pub use crate::signing::Signer;

impl Signature {
    /// A signature by `signer` with no bundles found yet (`digest` empty).
    pub fn by(signer: Signer<'_>) -> Signature {
        let mut s = Signature {
            digest: String::new(),
            key: None,
            public_key: None,
            certificate_identity: None,
            certificate_oidc_issuer: None,
            attestations: BTreeMap::new(),
            form: SignatureForm::Bundles,
        };
        match signer {
            Signer::Key {
                fingerprint,
                public_key,
            } => {
                s.key = Some(fingerprint.to_string());
                s.public_key = Some(public_key.to_string());
            }
            Signer::Certificate { identity, issuer } => {
                s.certificate_identity = Some(identity.to_string());
                s.certificate_oidc_issuer = Some(issuer.to_string());
            }
        }
        s
    }

    /// The signer: `key` with `public_key`, or `certificate_identity` with
    /// `certificate_oidc_issuer`.
    ///
    /// # Errors
    /// One line when the record names neither signer, both, or half of one.
    pub fn signer(&self) -> Result<Signer<'_>, String> {
        match (
            &self.key,
            &self.public_key,
            &self.certificate_identity,
            &self.certificate_oidc_issuer,
        ) {
            (Some(fingerprint), Some(public_key), None, None) => Ok(Signer::Key {
                fingerprint,
                public_key,
            }),
            (None, None, Some(identity), Some(issuer)) => Ok(Signer::Certificate { identity, issuer }),
            _ => Err(
                "records neither a key (key and public_key) nor a certificate identity (certificate_identity and certificate_oidc_issuer), or parts of both".into(),
            ),
        }
    }
}

/// The whole file.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct DigestManifest {
    /// Format version, currently 1.
    pub schema_version: u32,
    /// Minor → entry, in numeric order. A minor given twice is an error, not the last one
    /// silently winning (YAML 1.2 requires mapping keys to be unique).
    #[serde(deserialize_with = "unique_minors")]
    pub images: BTreeMap<Minor, Entry>,
}

/// `images` as a map whose keys are each given once.
fn unique_minors<'de, D>(d: D) -> Result<BTreeMap<Minor, Entry>, D::Error>
where
    D: serde::Deserializer<'de>,
{
    struct Unique;
    impl<'de> serde::de::Visitor<'de> for Unique {
        type Value = BTreeMap<Minor, Entry>;
        fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
            f.write_str("a map of Kubernetes minors to entries")
        }
        fn visit_map<A: serde::de::MapAccess<'de>>(
            self,
            mut map: A,
        ) -> Result<Self::Value, A::Error> {
            let mut out = BTreeMap::new();
            while let Some((minor, entry)) = map.next_entry::<Minor, Entry>()? {
                if out.insert(minor, entry).is_some() {
                    return Err(serde::de::Error::custom(format!("{minor} is given twice")));
                }
            }
            Ok(out)
        }
    }
    d.deserialize_map(Unique)
}

impl Default for DigestManifest {
    fn default() -> Self {
        DigestManifest {
            schema_version: SCHEMA_VERSION,
            images: BTreeMap::new(),
        }
    }
}

/// Digest-manifest failures.
#[derive(Debug, thiserror::Error)]
pub enum DigestManifestError {
    /// The file exists but cannot be read or parsed; it is left untouched.
    #[error("digest manifest {path}: {message}")]
    Read {
        /// The file.
        path: PathBuf,
        /// The cause.
        message: String,
    },
    /// Writing failed; the old file is left untouched.
    #[error("digest manifest {path}: cannot write: {message}")]
    Write {
        /// The file.
        path: PathBuf,
        /// The cause.
        message: String,
    },
    /// Another run holds the digest manifest and `--no-wait` was given.
    #[error(
        "digest manifest {path} is in use by another occm-forge run ({holder}); retry later or drop --no-wait"
    )]
    Busy {
        /// The manifest.
        path: PathBuf,
        /// Who holds it.
        holder: String,
    },
    /// Two fragments carry different entries for one minor.
    #[error("fragments {a} and {b} carry different entries for {minor}; nothing merged")]
    Conflict {
        /// The minor.
        minor: Minor,
        /// One fragment.
        a: PathBuf,
        /// The other.
        b: PathBuf,
    },
    /// A fragment's entry may not replace the recorded one (a tag moved, or an unpublished entry
    /// over a published one).
    #[error("digest manifest {fragment}: {minor}: {what}; nothing merged")]
    Replace {
        /// The fragment.
        fragment: PathBuf,
        /// The minor.
        minor: Minor,
        /// Why not.
        what: String,
    },
    /// The tag would be reused for different inputs.
    #[error(
        "digest manifest {path}: {minor}: {what}; tags never move to other content: bump `revision` for {minor} in {config}"
    )]
    TagReuse {
        /// The file.
        path: PathBuf,
        /// The images.toml to bump it in (as given with `--config`).
        config: String,
        /// The minor.
        minor: Minor,
        /// The tag.
        tag: String,
        /// What differs.
        what: String,
    },
}

const HEADER: &str = "# Generated by occm-forge: one OCCM image per Kubernetes minor, pinned by digest.\n# Do not edit by hand; `occm-forge build --k8s <minor>` updates one entry.\n";

/// [`read`], but a missing file is an error (for commands that only read a digest manifest a
/// build wrote: an empty one would make every cluster look unpinned).
///
/// Errors: [`DigestManifestError::Read`] naming the file when it does not exist or does not
/// parse.
pub fn read_existing(path: &Path) -> Result<DigestManifest, DigestManifestError> {
    if !path.exists() {
        return Err(DigestManifestError::Read {
            path: path.to_path_buf(),
            message: "no such file (a digest manifest is written by `occm-forge build`)".into(),
        });
    }
    read(path)
}

/// Reads the digest manifest; a missing file is an empty manifest.
pub fn read(path: &Path) -> Result<DigestManifest, DigestManifestError> {
    let text = match std::fs::read_to_string(path) {
        Ok(t) => t,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(DigestManifest::default()),
        Err(e) => {
            return Err(DigestManifestError::Read {
                path: path.to_path_buf(),
                message: e.to_string(),
            });
        }
    };
    let m: DigestManifest =
        serde_norway::from_str(&text).map_err(|e| DigestManifestError::Read {
            path: path.to_path_buf(),
            message: e.to_string().replace('\n', " "),
        })?;
    if m.schema_version != SCHEMA_VERSION {
        return Err(DigestManifestError::Read {
            path: path.to_path_buf(),
            message: format!(
                "schema_version {} is not supported (expected {SCHEMA_VERSION})",
                m.schema_version
            ),
        });
    }
    for (minor, entry) in &m.images {
        let fail = |message: String| DigestManifestError::Read {
            path: path.to_path_buf(),
            message: format!("{minor}: {message}"),
        };
        if let Some(Err(e)) = entry.signature.as_ref().map(Signature::signer) {
            return Err(fail(format!("signature {e}")));
        }
        if let Some((field, digest)) = entry
            .digests()
            .into_iter()
            .find(|(_, d)| !crate::base::util::is_sha256_digest(d))
        {
            return Err(fail(format!(
                "{field} {digest:?} is not a digest (sha256:<64 lower-case hex>)"
            )));
        }
    }
    Ok(m)
}

impl Entry {
    /// Every digest the entry records, each with the field it is in (`digest`, `manifests
    /// linux/amd64`, `sbom linux/amd64`, `provenance`, `signature`, `attestation provenance`).
    pub fn digests(&self) -> Vec<(String, &str)> {
        let mut out = vec![("digest".to_string(), self.digest.as_str())];
        for (field, map) in [("manifests", &self.manifests), ("sbom", &self.sbom)] {
            out.extend(
                map.iter()
                    .map(|(p, d)| (format!("{field} {p}"), d.as_str())),
            );
        }
        if let Some(p) = &self.provenance {
            out.push(("provenance".to_string(), p));
        }
        if let Some(s) = &self.signature {
            out.push(("signature".to_string(), s.digest.as_str()));
            out.extend(
                s.attestations
                    .iter()
                    .map(|(name, d)| (format!("attestation {name}"), d.as_str())),
            );
        }
        out
    }

    /// The inputs this entry records: its `inputs:` with the entry's own copies of them over it
    /// (upstream commit, patch series, Go, base, platforms, repository, tag). An entry from
    /// before occm-forge recorded inputs (no `inputs:`) gives those fields alone, the others
    /// empty: enough for the tag guard, which compares only the inputs a tag is bound to.
    pub fn recorded_inputs(&self) -> BuildInputs {
        let base = self.inputs.clone().unwrap_or_default();
        BuildInputs {
            upstream_commit: self.upstream_commit.clone(),
            patch_series_sha256: self.patch_series_sha256.clone(),
            go_version: self.go_version.clone(),
            base: self.base_image.clone(),
            platforms: self.platforms.clone(),
            repository: self.repository.clone(),
            tag: self.tag.clone(),
            ..base
        }
    }

    /// Whether the entry was edited by hand: its fields ([`Entry::recorded_inputs`], and its
    /// `inputs:` alone) no longer hash to the fingerprint recorded in `inputs:`. Then it is no
    /// record of what built the image: the inputs stage rebuilds it and the tag guard does not
    /// hold a tag to its inputs (a published tag stays bound to its digest). The reason as
    /// `its fields hash to sha256:<12 hex> not its inputs sha256:<12 hex>`; `None` when
    /// consistent or when there is no `inputs:` to check against.
    pub fn edited(&self) -> Option<String> {
        let recorded = self.inputs.as_ref()?;
        [self.recorded_inputs().compute(), recorded.compute()]
            .into_iter()
            .find(|h| *h != recorded.fingerprint)
            .map(|h| {
                format!(
                    "its fields hash to {} not its inputs {}",
                    short(&h),
                    short(&recorded.fingerprint)
                )
            })
    }
}

impl Entry {
    /// This entry as it is served from `repository` (a mirror): the same tag and digests under
    /// another repository, for checking the copy with the same rules as the original.
    pub fn at_repository(&self, repository: &str) -> Entry {
        Entry {
            image: format!("{repository}:{}@{}", self.tag, self.digest),
            repository: repository.to_string(),
            mirrors: vec![],
            ..self.clone()
        }
    }

    /// Whether the image is recorded at `repository`: its own repository or one of its mirrors.
    pub fn is_at(&self, repository: &str) -> bool {
        self.repository == repository || self.mirrors.iter().any(|m| m == repository)
    }
}

/// Writes `m` to `path` atomically (a temporary file renamed over it), with the header that
/// says who wrote it.
///
/// Errors: [`DigestManifestError::Write`] naming the file; the old file is left untouched.
pub fn write(path: &Path, m: &DigestManifest) -> Result<(), DigestManifestError> {
    let yaml = serde_norway::to_string(m).map_err(|e| DigestManifestError::Write {
        path: path.to_path_buf(),
        message: e.to_string(),
    })?;
    crate::base::util::write_file_atomically(path, format!("{HEADER}{yaml}").as_bytes()).map_err(
        |e| DigestManifestError::Write {
            path: path.to_path_buf(),
            message: e.to_string(),
        },
    )
}
