//! The YAML digest manifest (`images.lock.yaml`) that Magnum / Atmosphere templates consume.
//!
//! Keyed by the quoted Kubernetes minor (`"1.34"`; unquoted YAML would read `1.30` as the float
//! 1.3). Each entry gives the image as `<repository>:<tag>@sha256:<hex>` (always with a tag: the
//! OCCM chart renders `repository:tag`), the digest of the top-level image index (the digest
//! Atmosphere pins) and every input that produced it. The file is rewritten atomically
//! (temporary file + rename) and only one minor's entry changes per build.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use crate::base::util::short;
use crate::config::Minor;
use crate::pipeline::inputs::BuildInputs;
use crate::registry::publish::ReferrersPushed;

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

/// Held for a whole run: two runs on the same digest manifest never interleave. The lock is
/// `.<manifest file name>.lock` next to the manifest, locked with `flock(2)` (released by the
/// kernel even when the process dies) and holding the holder's PID for messages.
#[derive(Debug)]
pub struct RunLock {
    _file: std::fs::File,
}

/// [`lock_run`] as every command takes it: a wait is said once through the log (`occm-forge:
/// waiting for another occm-forge run on <path> (<holder>) to finish`, silenced by `--quiet`),
/// and on a multi-threaded Tokio runtime the wait blocks in place.
///
/// Errors: as [`lock_run`].
pub fn take_run_lock(path: &Path, wait: bool) -> Result<RunLock, DigestManifestError> {
    let take = || {
        lock_run(path, wait, &mut |holder| {
            tracing::info!(
                "waiting for another occm-forge run on {} ({holder}) to finish",
                path.display()
            )
        })
    };
    match tokio::runtime::Handle::try_current() {
        Ok(h) if h.runtime_flavor() == tokio::runtime::RuntimeFlavor::MultiThread => {
            tokio::task::block_in_place(take)
        }
        _ => take(),
    }
}

/// Takes the run lock of the digest manifest at `path`. When another run holds it, `on_wait` is
/// told who, and the call waits (`wait`) or fails with [`DigestManifestError::Busy`].
pub fn lock_run(
    path: &Path,
    wait: bool,
    on_wait: &mut dyn FnMut(String),
) -> Result<RunLock, DigestManifestError> {
    use std::io::{Read, Seek, Write};
    let name = path
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    let lock_path = path.with_file_name(format!(".{name}.lock"));
    let err = |e: std::io::Error| DigestManifestError::Write {
        path: lock_path.clone(),
        message: e.to_string(),
    };
    if let Some(dir) = lock_path.parent().filter(|d| !d.as_os_str().is_empty()) {
        std::fs::create_dir_all(dir).map_err(err)?;
    }
    let mut file = std::fs::OpenOptions::new()
        .create(true)
        .read(true)
        .write(true)
        .truncate(false)
        .open(&lock_path)
        .map_err(err)?;
    match file.try_lock() {
        Ok(()) => {}
        Err(std::fs::TryLockError::WouldBlock) => {
            let mut holder = String::new();
            let _ = file.read_to_string(&mut holder);
            let holder = match holder.trim() {
                "" => "another process".to_string(),
                pid => format!("pid {pid}"),
            };
            if !wait {
                return Err(DigestManifestError::Busy {
                    path: path.to_path_buf(),
                    holder,
                });
            }
            on_wait(holder);
            file.lock().map_err(err)?;
        }
        Err(std::fs::TryLockError::Error(e)) => return Err(err(e)),
    }
    // What a run killed while writing left next to the manifest: its temporary copies go at
    // once (every writer of the manifest holds this lock), other files' after a minute.
    if let Some(dir) = path.parent() {
        crate::base::util::remove_temp_files(
            if dir.as_os_str().is_empty() {
                Path::new(".")
            } else {
                dir
            },
            path,
        );
    }
    file.set_len(0)
        .and_then(|_| file.rewind())
        .and_then(|_| write!(file, "{}", std::process::id()))
        .map_err(err)?;
    Ok(RunLock { _file: file })
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

/// What the recorded entry `old` says about a tag now built from `new`: the changes of the
/// inputs the tag is bound to ([`BuildInputs::tag_changes_since`], in the inputs stage's words),
/// as `tag <tag> was recorded with other inputs: Go 1.25.1 → 1.25.5`; `None` when the tag may
/// serve both, or when `old` was edited by hand ([`Entry::edited`]: no record of inputs).
fn tag_bound(old: &Entry, tag: &str, new: &BuildInputs) -> Option<String> {
    if old.tag != tag || old.edited().is_some() {
        return None;
    }
    let changes = new.tag_changes_since(&old.recorded_inputs());
    (!changes.is_empty()).then(|| {
        format!(
            "tag {tag} was recorded with other inputs: {}",
            changes.join("; ")
        )
    })
}

/// Refuses to reuse `tag` for `minor` when the manifest already records that tag for other
/// inputs (commit, patch series, Go, base, platforms: [`BuildInputs::tag_changes_since`]): a
/// tag must change whenever its inputs do.
pub fn check_tag(
    path: &Path,
    config: &str,
    minor: Minor,
    tag: &str,
    inputs: &BuildInputs,
) -> Result<(), DigestManifestError> {
    let m = read(path)?;
    if let Some(what) = m.images.get(&minor).and_then(|e| tag_bound(e, tag, inputs)) {
        return Err(DigestManifestError::TagReuse {
            path: path.to_path_buf(),
            config: config.to_string(),
            minor,
            tag: tag.to_string(),
            what,
        });
    }
    Ok(())
}

/// Why `new` may not replace `old` (same minor), if it may not: the same tag for other inputs or
/// another digest, or an unpublished build over a published one.
pub fn replacement_conflict(old: &Entry, new: &Entry) -> Option<String> {
    if old.tag == new.tag {
        if let Some(what) = tag_bound(old, &new.tag, &new.recorded_inputs()) {
            return Some(what);
        }
        if old.digest != new.digest && old.published {
            return Some(format!(
                "tag {} was published as {}, this is {}",
                new.tag, old.digest, new.digest
            ));
        }
    }
    if old.published && !new.published {
        return Some(format!(
            "the recorded {} is published and this entry is not",
            old.image
        ));
    }
    None
}

/// What [`record`] did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Recorded {
    /// The entry was written. `stale_mirrors`: the mirrors (`copy`) the same image was recorded
    /// at, kept across the re-record, that lack the signature it now records (signed anew).
    Written {
        /// Mirror repositories without the new signature bundles; empty for most records.
        stale_mirrors: Vec<String>,
    },
    /// An unpublished build left the published entry of its minor alone.
    KeptPublished,
}

/// The warning for `mirrors` that lack `minor`'s newly recorded signature bundles (`build
/// --sign-key` signing anew, `manifest record-signatures`): they have them once copied again.
/// `None` without mirrors.
pub fn mirrors_lack_new_bundles(minor: Minor, mirrors: &[String]) -> Option<String> {
    (!mirrors.is_empty()).then(|| {
        format!(
            "{minor}: the mirrors {} do not have these bundles until they are copied again (`occm-forge copy --k8s {minor} --to <mirror>`); verify reports them until then",
            mirrors.join(", ")
        )
    })
}

/// Sets `minor`'s entry, leaving the others untouched, and rewrites the file atomically. An
/// unpublished entry never replaces a published one ([`Recorded::KeptPublished`]); a published
/// entry whose tag is recorded with other inputs or another digest is refused
/// ([`DigestManifestError::TagReuse`]).
pub fn record(
    path: &Path,
    config: &str,
    minor: Minor,
    mut entry: Entry,
) -> Result<Recorded, DigestManifestError> {
    let mut m = read(path)?;
    let mut stale_mirrors = Vec::new();
    if let Some(old) = m.images.get(&minor) {
        keep_mirrors_and_signature(old, &mut entry);
        if entry.signature != old.signature {
            stale_mirrors = entry.mirrors.clone();
        }
        if old.published && !entry.published {
            return Ok(Recorded::KeptPublished);
        }
        if let Some(what) = replacement_conflict(old, &entry) {
            return Err(DigestManifestError::TagReuse {
                path: path.to_path_buf(),
                config: config.to_string(),
                minor,
                tag: entry.tag.clone(),
                what,
            });
        }
    }
    m.images.insert(minor, entry);
    write(path, &m)?;
    Ok(Recorded::Written { stale_mirrors })
}

/// Folds fragments (digest manifests written by `build --manifest-fragment`, one per parallel
/// job) into the digest manifest at `path`, atomically; returns the minors merged. Two fragments
/// that carry different entries for one minor are refused and nothing is written; the same entry
/// twice is fine.
pub fn merge(path: &Path, fragments: &[PathBuf]) -> Result<Vec<Minor>, DigestManifestError> {
    let mut incoming: BTreeMap<Minor, (Entry, PathBuf)> = BTreeMap::new();
    for f in fragments {
        if !f.is_file() {
            return Err(DigestManifestError::Read {
                path: f.clone(),
                message: "no such fragment file".into(),
            });
        }
        let fragment = read(f)?;
        if fragment.images.is_empty() {
            return Err(DigestManifestError::Read {
                path: f.clone(),
                message: "no entries".into(),
            });
        }
        for (minor, entry) in fragment.images {
            match incoming.get(&minor) {
                Some((other, from)) if *other != entry => {
                    return Err(DigestManifestError::Conflict {
                        minor,
                        a: from.clone(),
                        b: f.clone(),
                    });
                }
                _ => {
                    incoming.insert(minor, (entry, f.clone()));
                }
            }
        }
    }
    let mut m = read(path)?;
    let minors: Vec<Minor> = incoming.keys().copied().collect();
    for (minor, (entry, from)) in incoming {
        if let Some(what) = m
            .images
            .get(&minor)
            .and_then(|old| replacement_conflict(old, &entry))
        {
            return Err(DigestManifestError::Replace {
                fragment: from,
                minor,
                what,
            });
        }
        let mut entry = entry;
        if let Some(old) = m.images.get(&minor) {
            keep_mirrors_and_signature(old, &mut entry);
        }
        m.images.insert(minor, entry);
    }
    write(path, &m)?;
    Ok(minors)
}

/// The same image (same digest) recorded again keeps the mirrors it was copied to, and its
/// signature when the new record has none (the registry still holds the bundles, which are
/// about the digest).
fn keep_mirrors_and_signature(old: &Entry, new: &mut Entry) {
    if old.digest == new.digest && new.mirrors.is_empty() {
        new.mirrors = old.mirrors.clone();
    }
    if old.digest == new.digest && new.signature.is_none() {
        new.signature = old.signature.clone();
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

/// Records that `minor`'s image (whose index digest must still be `digest`) was copied to
/// `mirror`, rewriting the digest manifest atomically; the caller holds the run lock. Returns
/// false when the mirror was already recorded (nothing written). Fails when the entry is gone or
/// now names another digest (it was rebuilt meanwhile).
pub fn record_mirror(
    path: &Path,
    minor: Minor,
    digest: &str,
    mirror: &str,
) -> Result<bool, DigestManifestError> {
    let mut m = read(path)?;
    let entry = entry_of(path, &mut m, minor, digest, "copied")?;
    if entry.is_at(mirror) {
        return Ok(false);
    }
    entry.mirrors.push(mirror.to_string());
    entry.mirrors.sort();
    write(path, &m)?;
    Ok(true)
}

/// Records `signature` as the signature of `minor`'s image (whose index digest must still be
/// `digest`), rewriting the digest manifest atomically; the caller holds the run lock. Returns
/// false when the entry records that signature already (nothing written). Fails when the entry
/// is gone or now names another digest (it was rebuilt meanwhile).
pub fn record_signature(
    path: &Path,
    minor: Minor,
    digest: &str,
    signature: Signature,
) -> Result<bool, DigestManifestError> {
    let mut m = read(path)?;
    let entry = entry_of(path, &mut m, minor, digest, "signed")?;
    if entry.signature.as_ref() == Some(&signature) {
        return Ok(false);
    }
    entry.signature = Some(signature);
    write(path, &m)?;
    Ok(true)
}

/// `minor`'s entry in `m`, read from `path`, when it still records index `digest` (the one
/// that was `what`: copied, signed).
fn entry_of<'a>(
    path: &Path,
    m: &'a mut DigestManifest,
    minor: Minor,
    digest: &str,
    what: &str,
) -> Result<&'a mut Entry, DigestManifestError> {
    let fail = |message: String| DigestManifestError::Read {
        path: path.to_path_buf(),
        message,
    };
    let entry = m
        .images
        .get_mut(&minor)
        .ok_or_else(|| fail(format!("no entry for {minor} any more; nothing recorded")))?;
    if entry.digest != digest {
        return Err(fail(format!(
            "{minor} now records {}, not the {what} {digest}; nothing recorded",
            entry.digest
        )));
    }
    Ok(entry)
}

fn write(path: &Path, m: &DigestManifest) -> Result<(), DigestManifestError> {
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

#[cfg(test)]
mod tests {
    use super::*;

    fn entry(tag: &str) -> Entry {
        Entry {
            image: format!("r.example/o/occm:{tag}@sha256:{}", "a".repeat(64)),
            repository: "r.example/o/occm".into(),
            tag: tag.into(),
            digest: format!("sha256:{}", "a".repeat(64)),
            published: true,
            upstream_tag: "v1.30.3".into(),
            upstream_commit: "c".repeat(40),
            patch_series_sha256: "d".repeat(64),
            patches: vec!["0001-x.patch".into()],
            already_upstream: vec![],
            applied_three_way: BTreeMap::new(),
            platforms: vec!["linux/amd64".into()],
            manifests: BTreeMap::from([(
                "linux/amd64".into(),
                format!("sha256:{}", "b".repeat(64)),
            )]),
            sbom: BTreeMap::new(),
            provenance: None,
            go_version: "1.22.2".into(),
            base_image: "static".into(),
            base_digest: None,
            source_date_epoch: 0,
            built_at: "2026-11-29T00:00:00Z".into(),
            inputs: None,
            accepted: false,
            accepted_scenarios: vec![],
            referrers: Some(ReferrersPushed::Subject),
            signature: None,
            mirrors: vec![],
        }
    }

    #[test]
    fn minors_are_quoted_and_other_entries_kept() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("images.lock.yaml");
        record(
            &p,
            "images.toml",
            "1.30".parse().unwrap(),
            entry("v1.30.3-occmforge.1"),
        )
        .unwrap();
        record(
            &p,
            "images.toml",
            "1.9".parse().unwrap(),
            entry("v1.9.0-occmforge.1"),
        )
        .unwrap();
        let text = std::fs::read_to_string(&p).unwrap();
        assert!(text.contains("\n  '1.30':\n"), "{text}");
        let i9 = text.find("'1.9'").unwrap();
        assert!(i9 < text.find("'1.30'").unwrap(), "numeric order: {text}");
        let m = read(&p).unwrap();
        assert_eq!(m.images.len(), 2);
        assert_eq!(
            m.images[&"1.30".parse().unwrap()],
            entry("v1.30.3-occmforge.1")
        );
    }

    /// A minor given twice (a hand edit that renamed '1.32' to a second '1.31') is refused,
    /// naming the file and the minor; the last one used to win silently (found by a break-it
    /// pass: `render --k8s 1.31` printed 1.32's image).
    #[test]
    fn a_minor_given_twice_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("images.lock.yaml");
        for (minor, tag) in [
            ("1.31", "v1.31.4-occmforge.1"),
            ("1.32", "v1.32.1-occmforge.1"),
        ] {
            record(&p, "images.toml", minor.parse().unwrap(), entry(tag)).unwrap();
        }
        let text = std::fs::read_to_string(&p).unwrap();
        std::fs::write(&p, text.replace("'1.32':", "'1.31':")).unwrap();
        let e = read(&p).unwrap_err().to_string();
        assert!(
            e.contains(&p.display().to_string()) && e.contains("images: 1.31 is given twice"),
            "{e}"
        );
    }

    #[test]
    fn mirrors_are_recorded_once_kept_across_a_re_record_and_absent_when_empty() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("l.yaml");
        let minor = "1.34".parse().unwrap();
        let e = entry("v1.34.1-occmforge.1");
        record(&p, "images.toml", minor, e.clone()).unwrap();
        let before = std::fs::read_to_string(&p).unwrap();
        assert!(!before.contains("mirrors"), "{before}");
        assert!(record_mirror(&p, minor, &e.digest, "m.example/x/occm").unwrap());
        assert!(!record_mirror(&p, minor, &e.digest, "m.example/x/occm").unwrap());
        assert!(!record_mirror(&p, minor, &e.digest, &e.repository).unwrap());
        let text = std::fs::read_to_string(&p).unwrap();
        assert!(
            text.contains("mirrors:\n    - m.example/x/occm\n"),
            "{text}"
        );
        // The same image recorded again keeps its mirror; another digest is refused.
        record(&p, "images.toml", minor, e.clone()).unwrap();
        assert_eq!(
            read(&p).unwrap().images[&minor].mirrors,
            ["m.example/x/occm"]
        );
        let other = format!("sha256:{}", "9".repeat(64));
        let err = record_mirror(&p, minor, &other, "n.example/occm").unwrap_err();
        assert!(err.to_string().contains("not the copied"), "{err}");
        let at = read(&p).unwrap().images[&minor].at_repository("m.example/x/occm");
        assert_eq!(
            at.image,
            format!("m.example/x/occm:v1.34.1-occmforge.1@{}", e.digest)
        );
        assert!(at.mirrors.is_empty());
    }

    #[test]
    fn a_keyless_signature_is_recorded_once_kept_across_a_re_record_and_a_half_signer_refused() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("l.yaml");
        let minor = "1.34".parse().unwrap();
        let e = entry("v1.34.1-occmforge.1");
        record(&p, "images.toml", minor, e.clone()).unwrap();
        let signature = Signature {
            digest: format!("sha256:{}", "5".repeat(64)),
            ..Signature::by(Signer::Certificate {
                identity: "https://github.com/o/r/.github/workflows/build.yml@refs/heads/main",
                issuer: "https://token.actions.githubusercontent.com",
            })
        };
        assert!(record_signature(&p, minor, &e.digest, signature.clone()).unwrap());
        assert!(!record_signature(&p, minor, &e.digest, signature.clone()).unwrap());
        let text = std::fs::read_to_string(&p).unwrap();
        assert!(
            text.contains("      certificate_identity: https://github.com/o/r/.github/workflows/build.yml@refs/heads/main\n      certificate_oidc_issuer: https://token.actions.githubusercontent.com\n"),
            "{text}"
        );
        assert!(!text.contains("public_key"), "{text}");
        // A build of the same digest that signs nothing keeps it; another digest is refused.
        record(&p, "images.toml", minor, e.clone()).unwrap();
        assert_eq!(read(&p).unwrap().images[&minor].signature, Some(signature));
        let other = format!("sha256:{}", "9".repeat(64));
        let err = record_signature(
            &p,
            minor,
            &other,
            Signature::by(Signer::Certificate {
                identity: "i",
                issuer: "o",
            }),
        )
        .unwrap_err();
        assert!(err.to_string().contains("not the signed"), "{err}");
        // An edited record naming half a signer does not load.
        std::fs::write(
            &p,
            text.replace(
                "      certificate_oidc_issuer: https://token.actions.githubusercontent.com\n",
                "",
            ),
        )
        .unwrap();
        let err = read(&p).unwrap_err().to_string();
        assert!(
            err.ends_with("1.34: signature records neither a key (key and public_key) nor a certificate identity (certificate_identity and certificate_oidc_issuer), or parts of both"),
            "{err}"
        );
        // A digest that is none: named before anyone asks a registry for it.
        std::fs::write(&p, text.replace("sha256:5555", "sha256:zz55")).unwrap();
        let err = read(&p).unwrap_err().to_string();
        assert!(
            err.ends_with(&format!(
                "1.34: signature \"sha256:zz{}\" is not a digest (sha256:<64 lower-case hex>)",
                "5".repeat(62)
            )),
            "{err}"
        );
    }

    /// An entry whose fields no longer hash to its fingerprint is edited, whichever field was
    /// edited (its own or one of `inputs:`); an edited entry binds no tag to its inputs.
    #[test]
    fn an_entry_whose_fields_do_not_hash_to_its_fingerprint_was_edited() {
        let mut e = entry("v1.30.3-occmforge.1");
        assert_eq!(e.edited(), None, "nothing to check without inputs");
        e.inputs = Some(e.recorded_inputs().sealed());
        assert_eq!(e.edited(), None);
        let fingerprint = e.inputs.as_ref().unwrap().fingerprint.clone();
        let mut own = e.clone();
        own.go_version = "1.99.0".into();
        let mut inner = e.clone();
        inner.inputs.as_mut().unwrap().required_tests = vec!["TestX".into()];
        for edited in [&own, &inner] {
            let why = edited.edited().expect("edited");
            assert!(
                why.starts_with("its fields hash to sha256:")
                    && why.ends_with(&format!(" not its inputs {}", short(&fingerprint))),
                "{why}"
            );
        }
        assert!(tag_bound(&own, &own.tag, &e.recorded_inputs()).is_none());
        assert!(tag_bound(&e, &e.tag, &own.recorded_inputs()).is_some());
    }

    #[test]
    fn a_tag_never_moves_to_other_inputs_or_content() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("l.yaml");
        let minor = "1.30".parse().unwrap();
        let published = entry("v1.30.3-occmforge.1");
        assert_eq!(
            record(&p, "images.toml", minor, published.clone()).unwrap(),
            Recorded::Written {
                stale_mirrors: vec![]
            }
        );
        let same = published.recorded_inputs();
        assert!(check_tag(&p, "images.toml", minor, "v1.30.3-occmforge.1", &same).is_ok());
        let other = BuildInputs {
            patch_series_sha256: "e".repeat(64),
            ..same.clone()
        };
        let e = check_tag(&p, "images.toml", minor, "v1.30.3-occmforge.1", &other)
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("bump `revision` for 1.30")
                && e.contains(
                    "was recorded with other inputs: patch series dddddddddddd → eeeeeeeeeeee;"
                ),
            "{e}"
        );
        let base = BuildInputs {
            base: "registry.k8s.io/build-image/go-runner:x@sha256:1".into(),
            ..same.clone()
        };
        assert!(
            check_tag(&p, "images.toml", minor, "v1.30.3-occmforge.1", &base)
                .unwrap_err()
                .to_string()
                .contains("base static → registry.k8s.io/build-image/go-runner:x@sha256:1")
        );
        assert!(check_tag(&p, "images.toml", minor, "v1.30.3-occmforge.2", &other).is_ok());

        // Another digest under the published tag is refused.
        let mut moved = published.clone();
        moved.digest = format!("sha256:{}", "f".repeat(64));
        assert!(record(&p, "images.toml", minor, moved).is_err());
        // An unpublished build leaves the published entry alone.
        let mut local = published.clone();
        local.published = false;
        local.built_at = "2027-01-01T00:00:00Z".into();
        assert_eq!(
            record(&p, "images.toml", minor, local).unwrap(),
            Recorded::KeptPublished
        );
        assert_eq!(read(&p).unwrap().images[&minor], published);
    }
}
