//! The build pipeline: config → source → patches → test → build → image → publish → record.
//!
//! Each stage is a module with one entry taking plain data; this module only sequences them,
//! times them and decides what is recorded. Nothing is recorded unless every stage succeeded,
//! and all scratch space (work tree, binaries) lives in a temporary directory removed on return.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::Instant;

use serde::Serialize;

use crate::config::{self, Config, Minor, MinorConfig};
use crate::go::{self, Toolchain};
use crate::image::{self, base};
use crate::lockfile::{self, Entry};
use crate::patches::{self, PatchOutcome};
use crate::registry::{ImageRef, Registry, RepositoryName, publish, short};
use crate::{Error, describe, source};

/// Inputs of `occm-forge build`.
#[derive(Debug, Clone)]
pub struct BuildOptions {
    /// The loaded images.toml.
    pub config: Config,
    /// The Kubernetes minor to build.
    pub minor: Minor,
    /// Where to fetch upstream from (`--source`); defaults to images.toml `upstream`.
    pub source: Option<String>,
    /// Push to the registry (`--push`).
    pub push: bool,
    /// Target repository override (`--repository`).
    pub repository: Option<String>,
    /// OCI layout directory (`--output`).
    pub output: PathBuf,
    /// occm-forge's cache directory (git objects, Go caches, base blobs).
    pub cache_dir: PathBuf,
    /// Build from a base reference that has no digest.
    pub allow_unpinned_base: bool,
    /// Base image instead of the minor's `base` (`--base`): `static` or a reference.
    pub base: Option<String>,
    /// Wait for another run holding the digest manifest's run lock (else refuse at once).
    pub wait_for_lock: bool,
    /// Write this minor's entry to this fragment file instead of the digest manifest
    /// (`--manifest-fragment`; fold fragments in with `manifest merge`).
    pub manifest_fragment: Option<PathBuf>,
    /// Push even when the tag already serves another digest (`--replace-tag`).
    pub replace_tag: bool,
    /// `SOURCE_DATE_EPOCH`; the upstream commit time when `None`.
    pub source_date_epoch: Option<i64>,
}

/// One finished stage.
#[derive(Debug, Clone, Serialize)]
pub struct StageReport {
    /// Stage name: source, patches, test, build, image, describe, publish, record.
    pub stage: &'static str,
    /// Wall time in seconds.
    pub seconds: f64,
    /// One line of what it did.
    pub detail: String,
}

/// What a successful build produced.
#[derive(Debug, Clone, Serialize)]
pub struct BuildOutcome {
    /// The minor built.
    pub minor: Minor,
    /// The recorded entry.
    #[serde(flatten)]
    pub entry: Entry,
    /// The OCI layout written.
    pub layout: PathBuf,
    /// The digest manifest updated.
    pub digest_manifest: PathBuf,
    /// Stage timings.
    pub timings: Vec<StageReport>,
}

/// Receives progress: stage starts and ends, and upload progress. Implementations draw it
/// (the binary: a line per stage on stderr, spinners and an upload bar when stderr is a TTY).
pub trait Reporter: Sync {
    /// A stage begins.
    fn started(&self, _stage: &'static str) {}
    /// A stage ended.
    fn finished(&self, _report: &StageReport) {}
    /// `bytes` more of the push's `total` bytes of blobs were handled (uploaded, mounted or found).
    fn uploaded(&self, _bytes: u64, _total: u64) {}
}

/// A [`Reporter`] that reports nothing.
pub struct Silent;

impl Reporter for Silent {}

/// Stage bookkeeping: timings plus the reporter.
pub(crate) struct Stages<'a> {
    pub(crate) reports: Vec<StageReport>,
    pub(crate) reporter: &'a dyn Reporter,
}

impl Stages<'_> {
    /// Starts a stage: tells the reporter and returns the start time.
    pub(crate) fn start(&self, stage: &'static str) -> Instant {
        self.reporter.started(stage);
        Instant::now()
    }

    /// Reports a finished stage; fails with [`Error::Interrupted`] once a signal has arrived, so
    /// that no later stage starts.
    pub(crate) fn done(
        &mut self,
        stage: &'static str,
        started: Instant,
        detail: String,
    ) -> Result<(), Error> {
        let r = StageReport {
            stage,
            seconds: started.elapsed().as_secs_f64(),
            detail,
        };
        self.reporter.finished(&r);
        self.reports.push(r);
        checkpoint()
    }
}

/// Everything derived from images.toml before any work starts.
struct Plan {
    minor_cfg: MinorConfig,
    series: Vec<patches::PatchFile>,
    series_sha256: String,
    tag: String,
    repository: String,
    required_tests: Vec<String>,
}

fn plan(opts: &BuildOptions) -> Result<Plan, Error> {
    let cfg = &opts.config;
    let mut m = cfg.minor(opts.minor)?.clone();
    if let Some(base) = &opts.base {
        m.base = base.clone();
    }
    let series = patches::load_series(&cfg.patches_dir, &m.patches)?;
    let series_sha256 = patches::series_sha256(&series);
    let tag = config::render_tag(
        &cfg.tag_scheme,
        &config::TagInputs {
            upstream_tag: &m.upstream_tag,
            revision: m.revision,
            minor: opts.minor,
            series_sha256: &series_sha256,
        },
    );
    let repository = opts
        .repository
        .clone()
        .unwrap_or_else(|| cfg.repository.clone());
    repository
        .parse::<RepositoryName>()
        .map_err(|e| Error::Usage(format!("repository: {e}")))?;
    if !m.is_static_base() {
        let r: ImageRef = m
            .base
            .parse()
            .map_err(|e: String| Error::Usage(format!("minors.\"{}\".base: {e}", opts.minor)))?;
        if r.digest.is_none() && !opts.allow_unpinned_base {
            let origin = match &opts.base {
                Some(_) => "--base".to_string(),
                None => format!("{}: minors.\"{}\".base", cfg.path.display(), opts.minor),
            };
            return Err(Error::Usage(format!(
                "{origin} `{}` has no @sha256 digest: run `occm-forge pin --k8s {}` where the registry is reachable, or build with --base static (offline) or --allow-unpinned-base",
                m.base, opts.minor
            )));
        }
    }
    let required_tests = cfg.required_tests(&m);
    Ok(Plan {
        minor_cfg: m,
        series,
        series_sha256,
        tag,
        repository,
        required_tests,
    })
}

/// Runs the whole pipeline for one minor. `registry` serves base pulls and the push;
/// `reporter` hears about every stage and the upload.
///
/// Errors carry the failing stage; on any error the digest manifest is untouched.
pub async fn build(
    opts: &BuildOptions,
    registry: &dyn Registry,
    reporter: &dyn Reporter,
) -> Result<BuildOutcome, Error> {
    let path = opts
        .manifest_fragment
        .as_ref()
        .unwrap_or(&opts.config.digest_manifest);
    let _lock = tokio::task::block_in_place(|| {
        lockfile::lock_run(path, opts.wait_for_lock, &mut |holder| {
            tracing::info!(
                "waiting for another occm-forge run on {} ({holder}) to finish",
                path.display()
            )
        })
    })?;
    let result = run_stages(opts, registry, reporter).await;
    // A stage that failed because its child was stopped reports the interruption instead.
    match crate::interrupt::signal() {
        Some(sig) => Err(Error::Interrupted(sig)),
        None => result,
    }
}

/// Fails with [`Error::Interrupted`] once SIGINT or SIGTERM has arrived.
fn checkpoint() -> Result<(), Error> {
    match crate::interrupt::signal() {
        Some(sig) => Err(Error::Interrupted(sig)),
        None => Ok(()),
    }
}

async fn run_stages(
    opts: &BuildOptions,
    registry: &dyn Registry,
    reporter: &dyn Reporter,
) -> Result<BuildOutcome, Error> {
    let cfg = &opts.config;
    let p = plan(opts)?;
    let m = &p.minor_cfg;
    let platforms: Vec<String> = m.platforms.iter().map(ToString::to_string).collect();
    let inputs = lockfile::Inputs {
        upstream_commit: &m.commit,
        patch_series_sha256: &p.series_sha256,
        base_image: &m.base,
        go_version: &m.go,
        platforms: &platforms,
    };
    lockfile::check_tag(&cfg.digest_manifest, opts.minor, &p.tag, &inputs)?;
    let mut stages = Stages {
        reports: Vec::new(),
        reporter,
    };
    let repo: RepositoryName = p.repository.parse().map_err(Error::Usage)?;

    // Checks that fail in seconds rather than after minutes of Go work.
    preflight_output(&opts.output)?;
    if !m.is_static_base() {
        let r: ImageRef = m.base.parse().map_err(Error::Usage)?;
        let reference = r
            .digest
            .clone()
            .or(r.tag.clone())
            .unwrap_or_else(|| "latest".into());
        if registry
            .manifest_digest(&r.repository, &reference)
            .await?
            .is_none()
        {
            return Err(Error::Image(image::ImageError::Base(format!(
                "base {}: not found in its registry",
                m.base
            ))));
        }
    }
    let published_digest = if opts.push {
        registry.manifest_digest(&repo, &p.tag).await?
    } else {
        None
    };

    let scratch = scratch_dir(&opts.cache_dir, &format!("build-{}-", opts.minor))?;

    // 1. source, 2. patches
    let url = opts.source.clone().unwrap_or_else(|| cfg.upstream.clone());
    let PatchedTree { tree, applied } = patched_tree(
        &url,
        m,
        &opts.cache_dir,
        &scratch.path().join("src"),
        &p.series,
        &mut stages,
    )?;
    let epoch = opts.source_date_epoch.unwrap_or(tree.commit_time);
    let upstreamed: Vec<String> = applied
        .iter()
        .filter(|a| a.outcome == PatchOutcome::AlreadyUpstream)
        .map(|a| a.name.clone())
        .collect();

    // 3. test
    let t = stages.start("test");
    let toolchain = Toolchain::new(&m.go, &opts.cache_dir);
    let summary = tokio::task::block_in_place(|| {
        go::test::run(&tree.path, &toolchain, &m.test_packages, &p.required_tests)
    })?;
    let (passed, failed, skipped) = summary.counts();
    stages.done(
        "test",
        t,
        format!(
            "go{}: {passed} passed, {failed} failed, {skipped} skipped; required: {}",
            m.go,
            p.required_tests.len()
        ),
    )?;

    // 4. build
    let t = stages.start("build");
    let bin_dir = scratch.path().join("bin");
    let binaries = tokio::task::block_in_place(|| {
        go::build::build(&go::build::BuildRequest {
            dir: &tree.path,
            toolchain: &toolchain,
            version: &p.tag,
            platforms: &m.platforms,
            out_dir: &bin_dir,
        })
    })?;
    stages.done(
        "build",
        t,
        format!(
            "{} ({})",
            p.tag,
            m.platforms
                .iter()
                .map(ToString::to_string)
                .collect::<Vec<_>>()
                .join(", ")
        ),
    )?;

    // 5. image
    let t = stages.start("image");
    let resolved = if m.is_static_base() {
        base::static_base(&m.platforms, epoch)?
    } else {
        base::pull_base(
            registry,
            &m.base,
            &m.platforms,
            &opts.cache_dir.join("blobs"),
            opts.allow_unpinned_base,
        )
        .await?
    };
    let bins: Vec<(config::Platform, PathBuf)> =
        binaries.into_iter().map(|b| (b.platform, b.path)).collect();
    let built = tokio::task::block_in_place(|| {
        image::assemble(&image::ImageRequest {
            binaries: &bins,
            base: &resolved,
            tag: &p.tag,
            epoch,
            source: &cfg.upstream,
            revision: &tree.commit,
            layout_dir: &opts.output,
        })
    })?;
    stages.done(
        "image",
        t,
        format!("{} in {}", built.index.digest, opts.output.display()),
    )?;

    // 6. describe
    let t = stages.start("describe");
    let attest_dir = opts.output.join("attestations").join(&p.tag);
    let io = |e: std::io::Error| {
        Error::Image(image::ImageError::Io(format!(
            "{}: {e}",
            attest_dir.display()
        )))
    };
    let mut attachments = Vec::new();
    let mut sboms = BTreeMap::new();
    for (pi, (_, bin)) in built.platforms.iter().zip(&bins) {
        let info = tokio::task::block_in_place(|| {
            go::build::read_build_info(&toolchain, &tree.path, bin)
        })?;
        let base_manifest = resolved
            .platforms
            .get(&pi.platform)
            .and_then(|b| b.manifest_digest.as_deref());
        let platform = pi.platform.to_string();
        let doc = describe::spdx_sbom(&describe::SbomInput {
            repository: &p.repository,
            tag: &p.tag,
            platform: &platform,
            arch: &pi.platform.arch,
            manifest_digest: &pi.manifest.digest,
            build_info: &info,
            upstream_tag: &m.upstream_tag,
            upstream_commit: &tree.commit,
            upstream_url: &cfg.upstream,
            base: resolved.name.as_deref().zip(base_manifest),
            epoch,
        });
        let file = attest_dir.join(format!("sbom.{}.spdx.json", platform.replace('/', "-")));
        image::layout::write_file_atomically(&file, &doc).map_err(io)?;
        let a = image::referrer::attach(
            &opts.output,
            &pi.manifest,
            describe::SPDX_MEDIA_TYPE,
            &doc,
            epoch,
        )
        .map_err(io)?;
        sboms.insert(platform, a.manifest.digest.clone());
        attachments.push(a);
    }
    let manifests: BTreeMap<String, String> = built
        .platforms
        .iter()
        .map(|pi| (pi.platform.to_string(), pi.manifest.digest.clone()))
        .collect();
    let platforms: Vec<String> = m.platforms.iter().map(ToString::to_string).collect();
    let patch_refs: Vec<(String, String)> = p
        .series
        .iter()
        .map(|f| (f.name.clone(), f.sha256()))
        .collect();
    let patch_refs: Vec<describe::PatchRef<'_>> = patch_refs
        .iter()
        .map(|(n, h)| describe::PatchRef { name: n, sha256: h })
        .collect();
    let minor = opts.minor.to_string();
    let ldflags = go::build::ldflags(&p.tag);
    let provenance = describe::slsa_provenance(&describe::ProvenanceInput {
        repository: &p.repository,
        tag: &p.tag,
        index_digest: &built.index.digest,
        minor: &minor,
        upstream_url: &cfg.upstream,
        upstream_tag: &m.upstream_tag,
        upstream_commit: &tree.commit,
        patches: &patch_refs,
        series_sha256: &p.series_sha256,
        platforms: &platforms,
        manifests: &manifests,
        go_version: &m.go,
        ldflags: &ldflags,
        base: (&m.base, resolved.digest.as_deref()),
        epoch,
    });
    image::layout::write_file_atomically(&attest_dir.join("provenance.intoto.json"), &provenance)
        .map_err(io)?;
    let a = image::referrer::attach(
        &opts.output,
        &built.index,
        describe::IN_TOTO_MEDIA_TYPE,
        &provenance,
        epoch,
    )
    .map_err(io)?;
    let provenance_digest = a.manifest.digest.clone();
    attachments.push(a);
    stages.done(
        "describe",
        t,
        format!(
            "SPDX SBOM per platform, SLSA provenance {}",
            short(&provenance_digest)
        ),
    )?;

    // 7. publish
    if opts.push {
        if let Some(d) = &published_digest
            && *d != built.index.digest
            && !opts.replace_tag
        {
            return Err(Error::Registry(crate::registry::RegistryError {
                registry: repo.registry.clone(),
                operation: format!("push {}:{}", repo.path, p.tag),
                message: format!(
                    "the tag already serves {d}, another image than this build's {}; tags never move: bump `revision` for {} (or pass --replace-tag)",
                    built.index.digest, opts.minor
                ),
                kind: crate::registry::ErrorKind::Other,
            }));
        }
        let t = stages.start("publish");
        let on_bytes = |bytes, total| reporter.uploaded(bytes, total);
        let published = publish::publish(registry, &repo, &built, &on_bytes).await?;
        let attached =
            publish::publish_attachments(registry, &repo, &opts.output, &attachments).await?;
        stages.done(
            "publish",
            t,
            format!(
                "{} ({} blobs uploaded, {} already present, {} mounted; {attached} referrers)",
                published.reference, published.uploaded, published.skipped, published.mounted
            ),
        )?;
    }

    // 8. record
    let t = stages.start("record");
    let entry = Entry {
        image: format!("{}:{}@{}", p.repository, p.tag, built.index.digest),
        repository: p.repository.clone(),
        tag: p.tag.clone(),
        digest: built.index.digest.clone(),
        published: opts.push,
        upstream_tag: m.upstream_tag.clone(),
        upstream_commit: tree.commit.clone(),
        patch_series_sha256: p.series_sha256.clone(),
        patches: m.patches.clone(),
        already_upstream: upstreamed,
        platforms: platforms.clone(),
        manifests,
        sbom: sboms,
        provenance: Some(provenance_digest),
        go_version: m.go.clone(),
        base_image: m.base.clone(),
        base_digest: resolved.digest.clone(),
        source_date_epoch: epoch,
        built_at: image::spec::rfc3339(time::OffsetDateTime::now_utc().unix_timestamp()),
        mirrors: vec![],
    };
    let record_path = opts
        .manifest_fragment
        .as_ref()
        .unwrap_or(&cfg.digest_manifest);
    if opts.manifest_fragment.is_some() {
        // A fragment holds this build's entry alone.
        let _ = std::fs::remove_file(record_path);
    }
    let recorded = lockfile::record(record_path, opts.minor, entry.clone())?;
    stages.done(
        "record",
        t,
        match recorded {
            lockfile::Recorded::Written => {
                format!("{} in {}", opts.minor, display_rel(record_path))
            }
            lockfile::Recorded::KeptPublished => format!(
                "{} in {} kept: it is published and this build was not pushed",
                opts.minor,
                display_rel(record_path)
            ),
        },
    )?;
    drop(scratch);
    tracing::debug!("image {} ({})", entry.image, short(&entry.digest));
    Ok(BuildOutcome {
        minor: opts.minor,
        entry,
        layout: opts.output.clone(),
        digest_manifest: record_path.clone(),
        timings: stages.reports,
    })
}

/// Fails unless `dir` can be created and written (a read-only or mistyped `--output` is caught
/// before the long stages).
fn preflight_output(dir: &Path) -> Result<(), Error> {
    let err = |e: std::io::Error| Error::Io(format!("--output {}: {e}", dir.display()));
    std::fs::create_dir_all(dir).map_err(err)?;
    tempfile::tempfile_in(dir).map(drop).map_err(err)
}

/// A fresh scratch directory under `<cache>/tmp`, removed when dropped.
pub(crate) fn scratch_dir(cache_dir: &Path, prefix: &str) -> Result<tempfile::TempDir, Error> {
    let tmp_root = cache_dir.join("tmp");
    std::fs::create_dir_all(&tmp_root)
        .and_then(|_| {
            tempfile::Builder::new()
                .prefix(prefix)
                .tempdir_in(&tmp_root)
        })
        .map_err(|e| Error::Io(format!("{}: {e}", tmp_root.display())))
}

/// A work tree at the pinned commit with a patch series applied.
pub(crate) struct PatchedTree {
    pub(crate) tree: source::SourceTree,
    pub(crate) applied: Vec<patches::AppliedPatch>,
}

/// The source and patches stages: checks out `m`'s pinned tag from `url` into `tree_dir` and
/// applies `series`, reporting each stage through `stages`. Patches already upstream are logged
/// as a warning and skipped.
pub(crate) fn patched_tree(
    url: &str,
    m: &MinorConfig,
    cache_dir: &Path,
    tree_dir: &Path,
    series: &[patches::PatchFile],
    stages: &mut Stages<'_>,
) -> Result<PatchedTree, Error> {
    let t = stages.start("source");
    let tree = tokio::task::block_in_place(|| {
        source::checkout(&source::SourceRequest {
            url,
            tag: &m.upstream_tag,
            pinned_commit: &m.commit,
            cache_dir,
            tree_dir,
        })
    })?;
    stages.done(
        "source",
        t,
        format!(
            "{} at {} (matches the pin)",
            m.upstream_tag,
            &tree.commit[..12]
        ),
    )?;
    let t = stages.start("patches");
    let applied = tokio::task::block_in_place(|| {
        patches::apply_series(&tree.path, series, tree.commit_time)
    })?;
    let upstreamed: Vec<&str> = applied
        .iter()
        .filter(|a| a.outcome == PatchOutcome::AlreadyUpstream)
        .map(|a| a.name.as_str())
        .collect();
    for name in &upstreamed {
        tracing::warn!(
            "patch {name}: already upstream in {} — drop it from the series",
            m.upstream_tag
        );
    }
    stages.done(
        "patches",
        t,
        format!(
            "{} applied, {} already upstream (series {})",
            applied.len() - upstreamed.len(),
            upstreamed.len(),
            &patches::series_sha256(series)[..12]
        ),
    )?;
    Ok(PatchedTree { tree, applied })
}

fn display_rel(p: &Path) -> String {
    std::env::current_dir()
        .ok()
        .and_then(|d| p.strip_prefix(d).ok().map(|r| r.display().to_string()))
        .unwrap_or_else(|| p.display().to_string())
}
