//! `occm-forge verify`: checks that what the registry serves is what the digest manifest records.
//!
//! Per entry: the tag still serves the recorded digest; the image index lists every recorded
//! platform with the recorded manifest digest; each platform's config carries the
//! `org.opencontainers.image.{source,revision,version}` labels of the entry; the SBOM and
//! provenance referrers exist, have the right artifact type and point at the recorded subject
//! (carry no `subject` when the entry records `referrers: tag-schema`), and are listed among the
//! subject's referrers ([`Registry::referrers`]: the referrers API, else the tag-schema fallback
//! `sha256-<hex>`); with `referrers: skipped` they are not looked for. A signed entry's
//! signature and attestations (`signature`) are bundle referrers of the index, present, listed,
//! and verify with the recorded signer ([`signing::verify_bundle`]: the recorded public key, whose
//! fingerprint is the recorded key, or a certificate naming the recorded identity and issuer); a
//! missing or foreign signature is a finding. Every mismatch is one [`Finding`].

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use serde::Serialize;
use serde_json::Value;

use crate::base::reference::RepositoryName;
use crate::base::util::{join, sha256_digest, short};
use crate::commands::signatures::Kinds;
use crate::config::{Config, Minor, Platform};
use crate::digest_manifest::{Entry, Signature, SignatureForm, Signer};
use crate::image::referrer::fallback_tag;
use crate::image::spec::{Index, Manifest, keys};
use crate::pipeline::describe::{IN_TOTO_MEDIA_TYPE, SPDX_MEDIA_TYPE};
use crate::pipeline::plan::{BuildPlan, Overrides};
use crate::pipeline::stage::Reporter;
use crate::registry::publish::ReferrersPushed;
use crate::registry::{ErrorKind, Registry, RegistryError, if_present};
use crate::signing::{self, BUNDLE_MEDIA_TYPE};

/// One mismatch between the registry and the digest manifest.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Finding {
    /// The minor whose entry does not match.
    pub minor: Minor,
    /// What was checked, e.g. `tag`, `platforms`, `label org.opencontainers.image.revision`, `sbom linux/amd64`.
    pub field: String,
    /// What is wrong, in one line.
    pub message: String,
}

impl std::fmt::Display for Finding {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}: {}: {}", self.minor, self.field, self.message)
    }
}

struct Checker<'a> {
    registry: &'a dyn Registry,
    repo: RepositoryName,
    minor: Minor,
    findings: Vec<Finding>,
    /// Subject digest → the digests of its referrers, asked once per subject; `None` where
    /// the registry can list none ([`crate::registry::referrers::Listing::unreadable`]: no
    /// referrers API, and its tag `sha256-<hex>` serves the subject itself).
    referrers: BTreeMap<String, Option<Vec<String>>>,
}

impl Checker<'_> {
    fn find(&mut self, field: impl Into<String>, message: impl Into<String>) {
        self.findings.push(Finding {
            minor: self.minor,
            field: field.into(),
            message: message.into(),
        });
    }

    /// Pulls a manifest by digest and checks its bytes; a missing one is a finding, not an error.
    async fn manifest(
        &mut self,
        field: &str,
        digest: &str,
    ) -> Result<Option<Vec<u8>>, RegistryError> {
        match self.registry.pull_manifest(&self.repo, digest).await {
            Ok(b) if sha256_digest(&b) == digest => Ok(Some(b.to_vec())),
            Ok(b) => {
                self.find(
                    field,
                    format!(
                        "{} serves content with digest {}",
                        short(digest),
                        sha256_digest(&b)
                    ),
                );
                Ok(None)
            }
            Err(e) if e.kind == ErrorKind::NotFound => {
                self.find(field, format!("{digest} is not in {}", self.repo));
                Ok(None)
            }
            Err(e) => Err(e),
        }
    }

    /// Checks a referrer manifest: present, of `artifact_type`, about `subject` (its `subject`
    /// field, or none when it went in by the tag schema alone, `with_subject` false), and listed
    /// in the subject's referrers index. Returns the manifest when it is there and one.
    async fn referrer(
        &mut self,
        field: &str,
        digest: &str,
        artifact_type: &str,
        subject: &str,
        with_subject: bool,
    ) -> Result<Option<Manifest>, RegistryError> {
        let Some(bytes) = self.manifest(field, digest).await? else {
            return Ok(None);
        };
        let Ok(m) = serde_json::from_slice::<Manifest>(&bytes) else {
            self.find(
                field,
                format!("{} is not an artifact manifest", short(digest)),
            );
            return Ok(None);
        };
        if m.artifact_type.as_deref() != Some(artifact_type) {
            self.find(
                field,
                format!(
                    "artifactType is {:?}, expected {artifact_type}",
                    m.artifact_type
                ),
            );
        }
        match m.subject.as_ref().map(|s| s.digest.as_str()) {
            Some(s) if s == subject => {}
            None if !with_subject => {}
            other => self.find(
                field,
                format!(
                    "subject is {}, expected {}",
                    other.unwrap_or("missing"),
                    if with_subject {
                        subject
                    } else {
                        "none (referrers: tag-schema)"
                    }
                ),
            ),
        }
        // The referrers API (or the tag schema where there is none); a referrer pushed without
        // `subject` is listed by the tag schema alone, even where there is an API. Where nothing
        // can be listed (GitLab), the referrer checked by digest above is all there is to check.
        if !self.referrers.contains_key(subject) {
            let listing =
                crate::registry::referrers::list(self.registry, &self.repo, subject).await?;
            let listed = (!listing.unreadable)
                .then(|| listing.manifests.into_iter().map(|d| d.digest).collect());
            // Said once a run: it holds for every subject in the repository.
            if listed.is_none() && !self.referrers.values().any(Option::is_none) {
                tracing::info!(
                    "verify {}: {} can list no referrers (no referrers API, and its tag {} serves the image itself, as GitLab does): the referrers the digest manifest records are checked by digest",
                    self.minor,
                    self.repo,
                    fallback_tag(subject)
                );
            }
            self.referrers.insert(subject.to_string(), listed);
        }
        let Some(referrers) = &self.referrers[subject] else {
            return Ok(Some(m));
        };
        let mut listed = referrers.iter().any(|d| d == digest);
        if !listed && !with_subject {
            let tag = fallback_tag(subject);
            listed = if_present(self.registry.pull_manifest(&self.repo, &tag).await)?
                .and_then(|b| serde_json::from_slice::<Index>(&b).ok())
                .is_some_and(|i| i.manifests.iter().any(|d| d.digest == digest));
        }
        if !listed {
            self.find(
                field,
                format!(
                    "{} is not listed among the referrers of {}",
                    short(digest),
                    short(subject)
                ),
            );
        }
        Ok(Some(m))
    }
}

/// What `occm-forge verify` checks.
#[derive(Debug, Clone)]
pub struct AuditRequest<'a> {
    /// The loaded images.toml (its digest manifest is read).
    pub config: &'a Config,
    /// Minors to check; every entry of the digest manifest when empty.
    pub minors: &'a [Minor],
    /// Also rebuild each published entry and compare digests.
    pub rebuild: bool,
    /// `--source` for rebuilds.
    pub source: Option<&'a str>,
    /// occm-forge's cache directory (rebuilds).
    pub cache_dir: &'a Path,
}

/// Checks every requested entry of the digest manifest against the registry (and rebuilds it
/// when asked). `note` hears one line per entry that matches; `rebuild_reporter` gives the
/// reporter of each minor's rebuild.
///
/// Returns every finding, in minor order. Errors: the digest manifest cannot be read; a minor
/// has no entry ([`crate::pipeline::Error::Usage`]); the registry cannot be asked; a rebuild fails.
pub async fn audit(
    req: &AuditRequest<'_>,
    registry: &dyn Registry,
    note: &(dyn Fn(String) + Sync),
    rebuild_reporter: &dyn Fn(Minor) -> Box<dyn Reporter>,
) -> Result<Vec<Finding>, crate::pipeline::Error> {
    let path = &req.config.digest_manifest;
    // A lost digest manifest is not a registry that matches it.
    let manifest = crate::digest_manifest::read_existing(path)?;
    if manifest.images.is_empty() {
        return Err(crate::pipeline::Error::Usage(format!(
            "{}: no entries to verify (a digest manifest is written by `occm-forge build`)",
            path.display()
        )));
    }
    let minors: Vec<Minor> = if req.minors.is_empty() {
        manifest.images.keys().copied().collect()
    } else {
        req.minors.to_vec()
    };
    let mut findings = Vec::new();
    for minor in minors {
        let Some(entry) = manifest.images.get(&minor) else {
            return Err(crate::pipeline::Error::Usage(format!(
                "{}: no entry for {minor}; it has {}",
                path.display(),
                join(manifest.images.keys())
            )));
        };
        let found = check(registry, req.config, minor, entry).await?;
        if found.is_empty() {
            note(format!(
                "verify {minor}: {} matches the digest manifest",
                entry.image
            ));
            for m in &entry.mirrors {
                note(format!("verify {minor}: mirror {m} matches too"));
            }
        }
        findings.extend(found);
        if req.rebuild && entry.published {
            let reporter = rebuild_reporter(minor);
            match rebuild(req, minor, entry, registry, reporter.as_ref()).await? {
                Some(f) => findings.push(f),
                None => note(format!(
                    "verify {minor}: the rebuild gives the same digest {}",
                    entry.digest
                )),
            }
        }
    }
    Ok(findings)
}

/// Rebuilds `entry` in a scratch directory; a finding when the digest differs.
async fn rebuild(
    req: &AuditRequest<'_>,
    minor: Minor,
    entry: &Entry,
    registry: &dyn Registry,
    reporter: &dyn Reporter,
) -> Result<Option<Finding>, crate::pipeline::Error> {
    let scratch = tempfile::tempdir().map_err(|e| crate::pipeline::Error::Io(e.to_string()))?;
    let plan = rebuild_plan(
        req.config,
        minor,
        entry,
        req.source.map(str::to_string),
        req.cache_dir.to_path_buf(),
        scratch.path(),
    )?;
    let rebuilt = crate::pipeline::build(&plan, registry, None, reporter).await?;
    Ok(rebuild_finding(
        minor,
        entry,
        &req.config.path,
        &rebuilt.entry.digest,
    ))
}

/// Checks an entry: one recorded without `--push` is a finding of its own (there is nothing in
/// the registry to compare); a published one goes through [`check_entry`], and so does each of
/// its `mirrors` (the entry with its repository replaced; findings' field starts `mirror <repo>: `).
pub async fn check(
    registry: &dyn Registry,
    config: &Config,
    minor: Minor,
    entry: &Entry,
) -> Result<Vec<Finding>, RegistryError> {
    if !entry.published {
        return Ok(vec![Finding {
            minor,
            field: "published".into(),
            message: "the entry was recorded without --push; nothing in the registry to check"
                .into(),
        }]);
    }
    let mut findings = check_entry(registry, config, minor, entry).await?;
    for mirror in &entry.mirrors {
        let at = entry.at_repository(mirror);
        for mut f in check_entry(registry, config, minor, &at).await? {
            f.field = format!("mirror {mirror}: {}", f.field);
            findings.push(f);
        }
    }
    Ok(findings)
}

/// The plan that rebuilds `entry` from images.toml the way it was built — on the base it records
/// (by digest) and its `SOURCE_DATE_EPOCH` — into `scratch`, pushing nothing and recording only
/// into a scratch digest manifest.
///
/// Errors: as [`BuildPlan::resolve`].
pub fn rebuild_plan(
    config: &Config,
    minor: Minor,
    entry: &Entry,
    source: Option<String>,
    cache_dir: PathBuf,
    scratch: &Path,
) -> Result<BuildPlan, crate::pipeline::Error> {
    let mut config = config.clone();
    config.digest_manifest = scratch.join("images.lock.yaml");
    let overrides = Overrides {
        source,
        repository: Some(entry.repository.clone()),
        base: Some(match &entry.base_digest {
            Some(d) if !entry.base_image.contains('@') => format!("{}@{d}", entry.base_image),
            _ => entry.base_image.clone(),
        }),
        allow_unpinned_base: false,
        push: false,
        output: scratch.join("out"),
        cache_dir,
        source_date_epoch: Some(entry.source_date_epoch),
        manifest_fragment: None,
        replace_tag: false,
        wait_for_lock: true,
        force: true,
        accept: false,
        accept_output: None,
        referrers: Default::default(),
        sign_key: None,
    };
    BuildPlan::resolve(&config, minor, &overrides)
}

/// The finding when a rebuild's index digest differs from the recorded one.
pub fn rebuild_finding(
    minor: Minor,
    entry: &Entry,
    config: &Path,
    rebuilt_digest: &str,
) -> Option<Finding> {
    (rebuilt_digest != entry.digest).then(|| Finding {
        minor,
        field: "rebuild".into(),
        message: format!(
            "rebuilding from {} gives {rebuilt_digest}, the digest manifest records {}",
            config.display(),
            entry.digest
        ),
    })
}

/// Checks one digest-manifest entry against the registry; see the module documentation.
///
/// Returns the findings (empty when everything matches). Errors only when the registry cannot be
/// asked (unreachable, unauthorised); absent content is a finding.
pub async fn check_entry(
    registry: &dyn Registry,
    config: &Config,
    minor: Minor,
    entry: &Entry,
) -> Result<Vec<Finding>, RegistryError> {
    let repo: RepositoryName = entry
        .repository
        .parse()
        .map_err(|e: String| RegistryError {
            registry: entry.repository.clone(),
            operation: "parse repository".into(),
            message: e,
            kind: ErrorKind::Other,
        })?;
    let mut c = Checker {
        registry,
        repo: repo.clone(),
        minor,
        findings: Vec::new(),
        referrers: BTreeMap::new(),
    };
    match registry.manifest_digest(&repo, &entry.tag).await? {
        None => c.find("tag", format!("{repo}:{} does not exist", entry.tag)),
        Some(d) if d != entry.digest => c.find(
            "tag",
            format!(
                "{repo}:{} serves {d}, the digest manifest records {}",
                entry.tag, entry.digest
            ),
        ),
        Some(_) => {}
    }
    if let Some(bytes) = c.manifest("digest", &entry.digest).await? {
        match serde_json::from_slice::<Index>(&bytes) {
            Ok(index) => c.index(config, entry, &index).await?,
            Err(e) => {
                c.find(
                    "digest",
                    format!("{} is not an image index: {e}", short(&entry.digest)),
                );
                return Ok(c.findings);
            }
        }
    }
    c.referrers(entry).await?;
    Ok(c.findings)
}

impl Checker<'_> {
    /// The index lists exactly the recorded platforms with the recorded manifests, and each
    /// platform's config carries the entry's labels.
    async fn index(
        &mut self,
        config: &Config,
        entry: &Entry,
        index: &Index,
    ) -> Result<(), RegistryError> {
        let listed: BTreeMap<String, String> = index
            .manifests
            .iter()
            .filter_map(|m| {
                m.platform.as_ref().map(|p| {
                    let name = Platform::name_of(&p.os, &p.architecture, p.variant.as_deref());
                    (name, m.digest.clone())
                })
            })
            .collect();
        for platform in &entry.platforms {
            match (listed.get(platform), entry.manifests.get(platform)) {
                (None, _) => {
                    self.find("platforms", format!("{platform} is missing from the index"))
                }
                (Some(got), Some(want)) if got != want => self.find(
                    format!("manifest {platform}"),
                    format!("index lists {got}, the digest manifest records {want}"),
                ),
                _ => {}
            }
        }
        for (platform, digest) in &listed {
            if !entry.platforms.contains(platform) {
                self.find(
                    "platforms",
                    format!("{platform} is in the index but not in the digest manifest"),
                );
            }
            self.labels(config, entry, platform, digest).await?;
        }
        Ok(())
    }

    /// The platform image's config carries the source, revision and version labels of the entry.
    async fn labels(
        &mut self,
        config: &Config,
        entry: &Entry,
        platform: &str,
        digest: &str,
    ) -> Result<(), RegistryError> {
        let Some(bytes) = self
            .manifest(&format!("manifest {platform}"), digest)
            .await?
        else {
            return Ok(());
        };
        let Ok(m) = serde_json::from_slice::<Manifest>(&bytes) else {
            self.find(format!("manifest {platform}"), "is not an image manifest");
            return Ok(());
        };
        let Some(config_bytes) =
            if_present(self.registry.pull_blob(&self.repo, &m.config.digest).await)?
        else {
            self.find(
                format!("config {platform}"),
                format!("{} is missing", m.config.digest),
            );
            return Ok(());
        };
        let cfg: Value = serde_json::from_slice(&config_bytes).unwrap_or(Value::Null);
        let labels = &cfg["config"]["Labels"];
        for (key, want) in [
            (keys::SOURCE, config.upstream.as_str()),
            (keys::REVISION, entry.upstream_commit.as_str()),
            (keys::VERSION, entry.tag.as_str()),
        ] {
            let got = labels[key].as_str().unwrap_or("");
            if got != want {
                self.find(
                    format!("label {key} ({platform})"),
                    format!("is {got:?}, expected {want:?}"),
                );
            }
        }
        Ok(())
    }

    /// The SBOM of every platform and the provenance are referrers of their subjects, in the form
    /// the entry records (`referrers`); none is looked for when they were not pushed.
    async fn referrers(&mut self, entry: &Entry) -> Result<(), RegistryError> {
        let with_subject = match entry.referrers {
            Some(ReferrersPushed::Skipped) => return Ok(()),
            Some(ReferrersPushed::TagSchema) => false,
            Some(ReferrersPushed::Subject) | None => true,
        };
        for platform in &entry.platforms {
            match (entry.sbom.get(platform), entry.manifests.get(platform)) {
                (Some(sbom), Some(subject)) => {
                    self.referrer(
                        &format!("sbom {platform}"),
                        sbom,
                        SPDX_MEDIA_TYPE,
                        subject,
                        with_subject,
                    )
                    .await?;
                }
                (None, _) => self.find(
                    format!("sbom {platform}"),
                    "the digest manifest records no SBOM",
                ),
                _ => {}
            }
        }
        match &entry.provenance {
            Some(p) => {
                self.referrer(
                    "provenance",
                    p,
                    IN_TOTO_MEDIA_TYPE,
                    &entry.digest,
                    with_subject,
                )
                .await?;
            }
            None => self.find("provenance", "the digest manifest records no provenance"),
        }
        if let Some(signature) = &entry.signature {
            self.signature(entry, signature, with_subject).await?;
        }
        Ok(())
    }

    /// The signature and every attestation: a bundle referrer of the index, signed by the
    /// recorded signer (the key whose fingerprint the entry records, or a certificate naming
    /// the recorded identity), about the index. A missing bundle or one that does not verify
    /// (another signer's, or changed) is a finding.
    async fn signature(
        &mut self,
        entry: &Entry,
        signature: &Signature,
        with_subject: bool,
    ) -> Result<(), RegistryError> {
        let signer = match signature.signer() {
            Ok(signer) => signer,
            Err(e) => {
                self.find("signature", e);
                return Ok(());
            }
        };
        if let Signer::Key {
            fingerprint,
            public_key,
        } = signer
        {
            match signing::public_key_fingerprint(public_key) {
                Ok(f) if f == fingerprint => {}
                Ok(f) => self.find(
                    "signature",
                    format!(
                        "the recorded public key is key {f}, not the recorded key {fingerprint}"
                    ),
                ),
                Err(e) => self.find("signature", format!("the recorded public key: {e}")),
            }
        }
        if signature.form == SignatureForm::CosignTags {
            return self.cosign_tags(entry, signature, signer).await;
        }
        let mut bundles = vec![("signature", "signature".to_string(), &signature.digest)];
        bundles.extend(
            signature
                .attestations
                .iter()
                .map(|(name, d)| (name.as_str(), format!("attestation {name}"), d)),
        );
        let repo = self.repo.clone();
        let registry = self.registry;
        let mut kinds = Kinds::new(registry, &repo, entry);
        for (kind, field, digest) in bundles {
            let before = self.findings.len();
            let manifest = self
                .referrer(
                    &field,
                    digest,
                    BUNDLE_MEDIA_TYPE,
                    &entry.digest,
                    with_subject,
                )
                .await?;
            if let Some(m) = manifest
                && self.findings.len() == before
            {
                let verified = self
                    .bundle(&field, digest, &m, signer, &entry.digest)
                    .await?;
                if let Some(v) = verified {
                    let is = kinds.kind(&v).await?;
                    if is.as_deref() != Some(kind) {
                        self.find(
                            field,
                            format!(
                                "{} is {}, not the {kind} the digest manifest names it",
                                short(digest),
                                is.map_or_else(
                                    || format!(
                                        "a {} bundle",
                                        signing::printable(v.predicate_type())
                                    ),
                                    |is| format!("the {is}")
                                )
                            ),
                        );
                    }
                }
            }
        }
        Ok(())
    }

    /// The signature and attestations in cosign's tags ([`signing::tags`]): each recorded
    /// manifest is what its tag (`sha256-<hex>.sig`, `.att`) serves, is there byte for byte, and
    /// holds a layer that verifies with the recorded signer about the index — a simple-signing
    /// payload naming the index for the signature, a Statement about the index of the recorded
    /// kind for each attestation.
    async fn cosign_tags(
        &mut self,
        entry: &Entry,
        signature: &Signature,
        signer: Signer<'_>,
    ) -> Result<(), RegistryError> {
        use signing::tags;
        let mut recorded = vec![("signature".to_string(), "sig", signature.digest.clone())];
        recorded.extend(
            signature
                .attestations
                .iter()
                .map(|(kind, d)| (kind.clone(), "att", d.clone())),
        );
        let repo = self.repo.clone();
        let registry = self.registry;
        let mut kinds = Kinds::new(registry, &repo, entry);
        for (kind, suffix, digest) in recorded {
            let field = if kind == "signature" {
                kind.clone()
            } else {
                format!("attestation {kind}")
            };
            let tag = tags::tag(&entry.digest, suffix);
            match self.registry.manifest_digest(&self.repo, &tag).await? {
                Some(d) if d == digest => {}
                Some(d) => {
                    self.find(
                        &field,
                        format!("{tag} serves {d}, the digest manifest records {digest}"),
                    );
                    continue;
                }
                None => {
                    self.find(&field, format!("{}:{tag} does not exist", self.repo));
                    continue;
                }
            }
            let Some(bytes) = self.manifest(&field, &digest).await? else {
                continue;
            };
            let Ok(m) = serde_json::from_slice::<Manifest>(&bytes) else {
                self.find(&field, format!("{tag} is not an image manifest"));
                continue;
            };
            let mut verified = false;
            for layer in &m.layers {
                let Some(blob) =
                    if_present(self.registry.pull_blob(&self.repo, &layer.digest).await)?
                else {
                    continue;
                };
                verified = match tags::verify_layer(
                    signer,
                    &layer.media_type,
                    &layer.annotations,
                    &blob,
                ) {
                    Ok(tags::Verified::Signs(d)) => suffix == "sig" && d == entry.digest,
                    Ok(tags::Verified::Attests(v))
                        if suffix == "att" && v.subject_digests().contains(&entry.digest) =>
                    {
                        kinds.kind(&v).await?.as_deref() == Some(kind.as_str())
                    }
                    _ => false,
                };
                if verified {
                    break;
                }
            }
            if !verified {
                self.find(
                    &field,
                    format!(
                        "{tag} ({}) holds no {} by {signer} about {}",
                        short(&digest),
                        if kind == "signature" {
                            "signature".to_string()
                        } else {
                            format!("{kind} attestation")
                        },
                        short(&entry.digest)
                    ),
                );
            }
        }
        Ok(())
    }

    /// The bundle in referrer manifest `manifest` (`digest`) verifies with the recorded signer
    /// ([`signing::verify_bundle`]), names no other key, and its Statement's subjects include
    /// `index`; returns it when it verifies and is about the index.
    async fn bundle(
        &mut self,
        field: &str,
        digest: &str,
        manifest: &Manifest,
        signer: Signer<'_>,
        index: &str,
    ) -> Result<Option<signing::VerifiedBundle>, RegistryError> {
        let Some(layer) = manifest.layers.first() else {
            self.find(field, format!("{} carries no bundle", short(digest)));
            return Ok(None);
        };
        let Some(bundle) = if_present(self.registry.pull_blob(&self.repo, &layer.digest).await)?
        else {
            self.find(field, format!("its bundle {} is missing", layer.digest));
            return Ok(None);
        };
        match signing::verify_bundle(signer, &bundle) {
            Err(e) => {
                self.find(field, format!("{}: {e} ({signer})", short(digest)));
                Ok(None)
            }
            Ok(v) => {
                if let (Some(hint), Signer::Key { fingerprint, .. }) = (v.hint.as_deref(), signer)
                    && hint != fingerprint
                {
                    self.find(
                        field,
                        format!("names key {hint}, the digest manifest records key {fingerprint}"),
                    );
                }
                if !v.subject_digests().iter().any(|d| d == index) {
                    self.find(
                        field,
                        format!(
                            "signs {}, not the index {}",
                            join(v.subject_digests()),
                            short(index)
                        ),
                    );
                    return Ok(None);
                }
                Ok(Some(v))
            }
        }
    }
}

/// `verify`: the registry does not match the digest manifest (the findings, one line).
#[derive(Debug, thiserror::Error)]
#[error("verify: {0}")]
pub struct Mismatch(pub String);

impl crate::pipeline::Failure for Mismatch {
    /// 10.
    fn exit_code(&self) -> u8 {
        10
    }
}

crate::command_failure!(Mismatch);

#[cfg(test)]
mod tests {
    use super::*;

    use crate::image::referrer;
    use crate::registry::publish;
    use crate::testing;

    use testing::{config, published};

    fn fields(findings: &[Finding]) -> Vec<String> {
        findings.iter().map(|f| f.field.clone()).collect()
    }

    #[tokio::test]
    async fn a_published_entry_matches() {
        let (f, reg) = published().await;
        let found = check(&reg, &config(), "1.34".parse().unwrap(), &f.entry)
            .await
            .unwrap();
        assert!(found.is_empty(), "{found:?}");
    }

    #[tokio::test]
    async fn a_retagged_image_a_lost_referrer_and_wrong_labels_are_findings() {
        let (f, reg) = published().await;
        let minor = "1.34".parse().unwrap();
        let other = testing::image("v9.9.9-other.1");
        other
            .publish_as(&reg, &f.repo, &[], publish::ReferrersMode::Fallback)
            .await
            .unwrap();
        reg.set_tag(
            &f.repo,
            "v1.34.1-occmforge.1",
            Some(&other.image.index.digest),
        );
        reg.delete_manifest(&f.repo, &f.entry.provenance.clone().unwrap());
        let found = check(&reg, &config(), minor, &f.entry).await.unwrap();
        assert_eq!(fields(&found), ["tag", "provenance"], "{found:?}");
        assert!(
            found[0]
                .message
                .contains(&format!("serves {}", other.image.index.digest))
        );

        // An entry whose recorded tag differs from the image's version label.
        let mut wrong = f.entry.clone();
        wrong.upstream_commit = "1".repeat(40);
        reg.set_tag(&f.repo, "v1.34.1-occmforge.1", Some(&f.entry.digest));
        let found = check(&reg, &config(), minor, &wrong).await.unwrap();
        assert_eq!(
            fields(&found),
            [
                "label org.opencontainers.image.revision (linux/amd64)",
                "label org.opencontainers.image.revision (linux/arm64)",
                "provenance"
            ]
        );
    }

    #[tokio::test]
    async fn referrers_are_checked_in_the_form_the_entry_records() {
        let f = testing::image("v1.34.1-occmforge.1");
        let reg = crate::registry::memory::MemoryRegistry::new();
        reg.fail_when(|op| op.carries_subject().then_some(ErrorKind::Refused));
        let p = f
            .publish_to(&reg, publish::ReferrersMode::Fallback)
            .await
            .unwrap();
        reg.heal();
        let minor = "1.34".parse().unwrap();
        let mut entry = f.entry.clone();
        entry.referrers = Some(ReferrersPushed::TagSchema);
        for (platform, a) in entry.platforms.clone().iter().zip(&p.attachments) {
            entry
                .sbom
                .insert(platform.clone(), a.manifest.digest.clone());
        }
        entry.provenance = Some(p.attachments[2].manifest.digest.clone());
        let found = check(&reg, &config(), minor, &entry).await.unwrap();
        assert!(found.is_empty(), "{found:?}");
        // The same referrers read as OCI 1.1 ones lack their subject.
        entry.referrers = Some(ReferrersPushed::Subject);
        let found = check(&reg, &config(), minor, &entry).await.unwrap();
        assert_eq!(fields(&found).len(), 3, "{found:?}");
        assert!(
            found[0].message.starts_with("subject is missing"),
            "{found:?}"
        );
        // Referrers that were not pushed are not looked for.
        entry.referrers = Some(ReferrersPushed::Skipped);
        entry.provenance = Some(format!("sha256:{}", "0".repeat(64)));
        assert!(
            check(&reg, &config(), minor, &entry)
                .await
                .unwrap()
                .is_empty()
        );
    }

    #[tokio::test]
    async fn an_unpublished_entry_and_an_unreachable_registry() {
        let (f, reg) = published().await;
        let minor = "1.34".parse().unwrap();
        let mut local = f.entry.clone();
        local.published = false;
        assert_eq!(
            fields(&check(&reg, &config(), minor, &local).await.unwrap()),
            ["published"]
        );
        reg.fail_when(|_| Some(ErrorKind::Transient));
        let e = check(&reg, &config(), minor, &f.entry).await.unwrap_err();
        assert_eq!(e.kind, ErrorKind::Transient);
    }

    /// Signs `subject` with a fresh key into `f`'s layout as a bundle referrer of the index;
    /// returns the attachment and the key's public PEM and fingerprint.
    fn signed(f: &testing::FixtureImage, subject: &str) -> (referrer::Attachment, String, String) {
        let dir = tempfile::tempdir().unwrap();
        let pair = sigstore::crypto::SigningScheme::ECDSA_P256_SHA256_ASN1
            .create_signer()
            .unwrap()
            .to_sigstore_keypair()
            .unwrap();
        let path = dir.path().join("key.pem");
        std::fs::write(&path, pair.private_key_to_pem().unwrap().as_bytes()).unwrap();
        let key = signing::SigningKey::load(&path, None).unwrap();
        let repo = f.repo.to_string();
        let statement = signing::statement(
            &[(repo.as_str(), subject)],
            signing::COSIGN_SIGN_PREDICATE,
            serde_json::json!({}),
        )
        .unwrap();
        let bundle = key.sign_statement(&statement).unwrap();
        let a = referrer::attach(
            &f.image.layout_dir,
            &f.image.index,
            BUNDLE_MEDIA_TYPE,
            &bundle,
            0,
        )
        .unwrap();
        (a, key.public_key_pem(), key.fingerprint())
    }

    #[tokio::test]
    async fn a_signature_by_the_recorded_key_matches_and_a_foreign_or_misdirected_one_is_a_finding()
    {
        let f = testing::image("v1.34.1-occmforge.1");
        let reg = crate::registry::memory::MemoryRegistry::new();
        let minor = "1.34".parse().unwrap();
        let (ours, public_key, key) = signed(&f, &f.image.index.digest);
        let (elsewhere, other_public, other_key) =
            signed(&f, &format!("sha256:{}", "e".repeat(64)));
        let mut attachments = f.attachments.clone();
        attachments.extend([ours.clone(), elsewhere.clone()]);
        f.publish_as(
            &reg,
            &f.repo,
            &attachments,
            publish::ReferrersMode::Fallback,
        )
        .await
        .unwrap();
        let mut entry = f.entry.clone();
        entry.signature = Some(Signature {
            digest: ours.manifest.digest.clone(),
            ..Signature::by(Signer::Key {
                fingerprint: &key,
                public_key: &public_key,
            })
        });
        let found = check(&reg, &config(), minor, &entry).await.unwrap();
        assert!(found.is_empty(), "{found:?}");

        // The digest manifest names another key than the one that signed.
        let mut foreign = entry.clone();
        let sig = foreign.signature.as_mut().unwrap();
        (sig.public_key, sig.key) = (Some(other_public.clone()), Some(other_key.clone()));
        let found = check(&reg, &config(), minor, &foreign).await.unwrap();
        assert_eq!(fields(&found), ["signature"], "{found:?}");
        assert!(
            found[0].message.ends_with(&format!(
                "no signature verifies with the recorded public key (key {other_key})"
            )),
            "{found:?}"
        );

        // A fingerprint that is not the recorded public key's.
        let mut mismatched = entry.clone();
        mismatched.signature.as_mut().unwrap().key = Some(other_key.clone());
        let found = check(&reg, &config(), minor, &mismatched).await.unwrap();
        assert!(
            found[0]
                .message
                .starts_with("the recorded public key is key "),
            "{found:?}"
        );

        // A bundle by the key, but about another digest.
        let mut misdirected = entry.clone();
        let sig = misdirected.signature.as_mut().unwrap();
        (sig.digest, sig.public_key, sig.key) = (
            elsewhere.manifest.digest.clone(),
            Some(other_public),
            Some(other_key),
        );
        let found = check(&reg, &config(), minor, &misdirected).await.unwrap();
        assert_eq!(fields(&found), ["signature"], "{found:?}");
        assert!(
            found[0].message.starts_with("signs sha256:eeee"),
            "{found:?}"
        );
    }
}
