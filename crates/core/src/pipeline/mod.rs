//! The build of one minor's image ([`build`] and [`build_many`] here): the stage trait and its
//! runner ([`stage`]), each stage's implementation — one public entry taking plain data —
//! ([`source`], [`patches`], [`go`] (overrides, test, build), [`describe`], [`record`]
//! (the record into [`crate::digest_manifest`]); the image is [`crate::image`], the push [`crate::registry::publish`]) beside the
//! stages that run them ([`stages`]), what determines an image ([`crate::digest_manifest::inputs`]), the settings resolved
//! once ([`plan`]), every failure ([`Error`]), the seam acceptance plugs into ([`acceptance`]),
//! and the stage lines on stderr ([`progress`]).
//!
//! The pipeline: inputs → (preflight) → source → patches → overrides → test → build → image →
//! describe → (sign) → (accept) → (publish) → record.
//!
//! [`build`] takes a resolved [`BuildPlan`] and lists the stages ([`stages`]); the
//! [`Runner`] times and reports them. Nothing is recorded unless every stage succeeded, and all
//! scratch space (work tree, binaries) lives in a temporary directory removed on return.

pub mod acceptance;
pub mod describe;
pub mod error;
pub mod go;
pub mod patches;
pub mod plan;
pub mod preflight;
pub mod progress;
pub mod record;
pub mod source;
pub mod stage;
pub mod stages;
pub mod worktree;

pub use error::{Error, Failure};

use std::path::{Path, PathBuf};

use serde::Serialize;

use crate::base::util::{rfc3339, scratch_dir, short};
use crate::config::Minor;
use crate::digest_manifest::Entry;
use crate::image::referrer::Attachment;
use crate::pipeline::acceptance::{Acceptance, Accepted};
use crate::pipeline::patches::{AppliedPatch, PatchOutcome};
use crate::pipeline::plan::{BaseSpec, BuildPlan};
use crate::pipeline::source::{SourceError, SourceTree};
use crate::pipeline::stage::{Reporter, Runner, StageReport};
use crate::pipeline::stages::test::Judge;
use crate::registry::Registry;
use crate::registry::publish::{Published, ReferrersPushed};
use crate::registry::pull::PullError;
use stages::{Described, Freshness, Signed, image::Imaged};

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
    /// Whether nothing was built: the recorded entry was up to date and still there.
    pub up_to_date: bool,
    /// Whether the image is in the registry (`--push`), i.e. the result is its reference rather
    /// than the layout.
    #[serde(skip)]
    pub pushed: bool,
}

impl BuildOutcome {
    /// The outcome of `plan` that recorded (or found up to date) `entry`, with `run`'s timings.
    fn of(plan: &BuildPlan, entry: Entry, run: Runner<'_>, up_to_date: bool) -> Self {
        BuildOutcome {
            minor: plan.minor,
            entry,
            layout: plan.output.clone(),
            digest_manifest: plan.record_to.clone(),
            timings: run.into_reports(),
            up_to_date,
            pushed: plan.push,
        }
    }
}

/// Runs the whole pipeline for one minor under the digest manifest's run lock. `registry`
/// serves base pulls and the push; `reporter` hears about every stage and the upload.
///
/// Errors carry the failing stage; on any error the digest manifest is untouched.
pub async fn build(
    plan: &BuildPlan,
    registry: &dyn Registry,
    acceptance: Option<&dyn Acceptance>,
    reporter: &dyn Reporter,
) -> Result<BuildOutcome, Error> {
    let path = &plan.record_to;
    let _lock = record::take_run_lock(path, plan.wait_for_lock)?;
    build_locked(plan, registry, acceptance, reporter).await
}

/// One minor's result in a run over several minors.
#[derive(Debug)]
pub struct MinorResult {
    /// The minor.
    pub minor: Minor,
    /// Its outcome or error.
    pub result: Result<BuildOutcome, Error>,
    /// Wall time in seconds.
    pub seconds: f64,
}

/// Builds several minors one after another under one run lock, sharing the object store and
/// the Go caches. A failure does not stop the others unless `fail_fast`; then the remaining
/// minors are not attempted (and not listed). SIGINT or SIGTERM stops the run the same way: the
/// interrupted minor's result is [`Error::Interrupted`], and the minors before it keep theirs
/// (they are recorded). `plans` may hold a minor's resolution error.
/// `reporter` gives each minor's reporter; `record_to` is the digest manifest (or fragment)
/// every plan records into.
pub async fn build_many(
    plans: Vec<(Minor, Result<BuildPlan, Error>)>,
    record_to: &Path,
    wait_for_lock: bool,
    registry: &dyn Registry,
    acceptance: Option<&dyn Acceptance>,
    reporter: &dyn Fn(Minor) -> Box<dyn Reporter>,
    fail_fast: bool,
) -> Result<Vec<MinorResult>, Error> {
    let _lock = record::take_run_lock(record_to, wait_for_lock)?;
    let mut results = Vec::new();
    let mut fragment_started = false;
    for (minor, plan) in plans {
        let started = std::time::Instant::now();
        let result = match plan {
            Ok(mut plan) => {
                plan.fragment_reset = plan.fragment && !fragment_started;
                let r = build_locked(&plan, registry, acceptance, reporter(minor).as_ref()).await;
                fragment_started |= r.is_ok() && plan.fragment;
                r
            }
            Err(e) => Err(e),
        };
        let failed = result.is_err();
        let interrupted = matches!(result, Err(Error::Interrupted(_)));
        results.push(MinorResult {
            minor,
            result,
            seconds: started.elapsed().as_secs_f64(),
        });
        if interrupted || failed && fail_fast {
            break;
        }
    }
    Ok(results)
}

/// [`build`] under a run lock the caller holds. Scratch left by runs that were killed is
/// removed first, also when the minor turns out to be up to date.
async fn build_locked(
    plan: &BuildPlan,
    registry: &dyn Registry,
    acceptance: Option<&dyn Acceptance>,
    reporter: &dyn Reporter,
) -> Result<BuildOutcome, Error> {
    crate::base::util::sweep_scratch(&plan.cache_dir);
    crate::pipeline::stage::unless_interrupted(steps(plan, registry, acceptance, reporter).await)
}

/// The stages, in order. `--accept` needs `acceptance`.
async fn steps(
    plan: &BuildPlan,
    registry: &dyn Registry,
    acceptance: Option<&dyn Acceptance>,
    reporter: &dyn Reporter,
) -> Result<BuildOutcome, Error> {
    let acceptance = acceptance_of(plan, acceptance)?;
    let scenarios = acceptance.map(|a| a.scenarios()).unwrap_or_default();
    let mut run = Runner::new(reporter);
    if let Freshness::UpToDate(entry) = run
        .run(stages::InputsStage {
            plan,
            registry,
            scenarios: &scenarios,
        })
        .await?
    {
        return up_to_date(plan, *entry, run).await;
    }
    let served_before =
        crate::pipeline::stage::or_interrupted(preflight(plan, registry, acceptance)).await?;
    let (scratch, tree_dir, tree_lock) = workspace(plan)?;
    let (tree, applied) = patched_tree(plan, &mut run, &tree_dir, tree_lock.is_some()).await?;
    let epoch = plan.source_date_epoch.unwrap_or(tree.commit_time);
    check_go_line(plan, &tree)?;
    overridden(plan, &mut run, &tree.path).await?;
    run.run(stages::TestStage {
        dir: &tree.path,
        toolchain: &plan.toolchain,
        packages: &plan.test_packages,
        judge: Judge::Required(&plan.required_tests),
    })
    .await?;
    let out_dir = scratch.path().join("bin");
    let binaries = run
        .run(stages::BuildStage::of(plan, &tree, &out_dir))
        .await?;
    let assembled = assemble(plan, registry, &mut run, &tree, &binaries, epoch).await?;
    let accepted = match acceptance {
        Some(acceptance) => Some(run.run(stages::AcceptStage { plan, acceptance }).await?),
        None => None,
    };
    let published = if plan.push {
        Some(
            run.run(stages::PublishStage {
                registry,
                repo: &plan.repository_name,
                image: &assembled.imaged.image,
                attachments: &assembled.attachments,
                served_before: served_before.as_deref(),
                replace_tag: plan.replace_tag,
                minor: plan.minor,
                referrers: plan.referrers,
            })
            .await?,
        )
    } else {
        None
    };
    let entry = entry(
        plan,
        &tree,
        &applied,
        &assembled,
        published.as_ref(),
        accepted.as_ref(),
        epoch,
    );
    run.run(stages::RecordStage {
        plan,
        entry: entry.clone(),
    })
    .await?;
    drop(scratch);
    tracing::debug!("image {} ({})", entry.image, short(&entry.digest));
    Ok(BuildOutcome::of(plan, entry, run, false))
}

/// What the layout stages made: the image, its SBOMs and provenance, its signature (with
/// `--sign-key`), and every referrer to push (SBOMs, provenance, then the bundles).
struct Assembled {
    imaged: Imaged,
    described: Described,
    signed: Option<Signed>,
    attachments: Vec<Attachment>,
}

/// The image, describe and (with `--sign-key`) sign stages, holding the layout's lock from the
/// image stage to the last garbage collection.
async fn assemble(
    plan: &BuildPlan,
    registry: &dyn Registry,
    run: &mut Runner<'_>,
    tree: &SourceTree,
    binaries: &[crate::pipeline::go::build::Binary],
    epoch: i64,
) -> Result<Assembled, Error> {
    let layout_lock = crate::image::layout::lock(&plan.output)
        .map_err(|e| Error::Io(format!("--output {}: {e}", plan.output.display())))?;
    let imaged = run
        .run(stages::ImageStage {
            plan,
            registry,
            binaries,
            epoch,
            revision: &tree.commit,
        })
        .await?;
    let described = run
        .run(stages::DescribeStage {
            plan,
            tree,
            binaries,
            imaged: &imaged,
            epoch,
        })
        .await?;
    let signed = match &plan.sign_key {
        Some(key) => Some(
            run.run(stages::SignStage {
                plan,
                key,
                imaged: &imaged,
                described: &described,
                epoch,
            })
            .await?,
        ),
        None => None,
    };
    drop(layout_lock);
    let attachments = described
        .attachments
        .iter()
        .chain(signed.iter().flat_map(|s| &s.attachments))
        .cloned()
        .collect();
    Ok(Assembled {
        imaged,
        described,
        signed,
        attachments,
    })
}

/// The source and patches stages. In the minor's own work tree (`reusable`), a tree that still
/// holds the pinned commit with the series applied is kept (`worktree::prepared`), and a new one
/// is remembered for the next build.
async fn patched_tree(
    plan: &BuildPlan,
    run: &mut Runner<'_>,
    tree_dir: &Path,
    reusable: bool,
) -> Result<(SourceTree, Vec<AppliedPatch>), Error> {
    let prepared = reusable
        .then(|| crate::pipeline::worktree::prepared(tree_dir, &plan.commit, &plan.series_sha256))
        .flatten();
    let tree = run
        .run(stages::SourceStage {
            prepared: prepared.as_ref().map(|p| &p.tree),
            ..stages::SourceStage::of(plan, tree_dir)
        })
        .await?;
    let applied = run
        .run(stages::PatchStage {
            tree: &tree,
            series: &plan.series,
            upstream_tag: &plan.upstream_tag,
            prepared: prepared.as_ref().map(|p| p.applied.as_slice()),
        })
        .await?;
    if reusable && prepared.is_none() {
        crate::pipeline::worktree::remember(&tree, &plan.series_sha256, &applied);
    }
    Ok((tree, applied))
}

/// The `go` line of upstream's go.mod and of the series against the pinned Go, before any Go
/// process ([`crate::pipeline::go::directive::check`]): exit 2 naming both.
pub(crate) fn check_go_line(
    plan: &BuildPlan,
    tree: &crate::pipeline::source::SourceTree,
) -> Result<(), Error> {
    crate::pipeline::go::directive::check(
        &tree.path,
        &tree.commit,
        &plan.upstream_tag,
        &plan.series,
        &plan.toolchain.version,
    )
    .map_err(|e| Error::Usage(format!("{}: {e}", plan.minor)))
}

/// The overrides stage, for a minor with `go_overrides` (none runs otherwise). The work tree
/// it changes is not reused by the next build (its go.mod no longer matches the kept state).
pub(crate) async fn overridden(
    plan: &BuildPlan,
    run: &mut Runner<'_>,
    dir: &Path,
) -> Result<Vec<crate::pipeline::go::overrides::MovedRequirement>, Error> {
    if plan.go_overrides.is_empty() {
        return Ok(Vec::new());
    }
    run.run(stages::OverridesStage {
        dir,
        upstream_tag: &plan.upstream_tag,
        toolchain: &plan.toolchain,
        overrides: &plan.go_overrides,
        packages: &plan.test_packages,
    })
    .await
}

/// Where a build works: its scratch directory (binaries; removed when dropped) and its work tree
/// — `<cache>/trees/<minor>`, reused across builds, with its lock — or `<scratch>/src` when
/// another run holds that.
fn workspace(
    plan: &BuildPlan,
) -> Result<(crate::base::util::Scratch, PathBuf, Option<std::fs::File>), Error> {
    let scratch =
        scratch_dir(&plan.cache_dir, &format!("build-{}-", plan.minor)).map_err(Error::Io)?;
    Ok(
        match crate::pipeline::source::reusable_tree(&plan.cache_dir, &plan.minor.to_string()) {
            Some((dir, lock)) => (scratch, dir, Some(lock)),
            None => {
                let dir = scratch.path().join("src");
                (scratch, dir, None)
            }
        },
    )
}

/// The no-op build: the recorded entry stands. Nothing is written, except a fragment when one
/// was asked for (it then holds the recorded entry).
async fn up_to_date(
    plan: &BuildPlan,
    entry: Entry,
    mut run: Runner<'_>,
) -> Result<BuildOutcome, Error> {
    if plan.fragment {
        run.run(stages::RecordStage {
            plan,
            entry: entry.clone(),
        })
        .await?;
    }
    Ok(BuildOutcome::of(plan, entry, run, true))
}

/// Checks that fail in seconds rather than after minutes of Go work: the tag guard of the digest
/// manifest, a writable `--output`, every prerequisite of the requested stages (Go and its
/// toolchain, the cache, room on disk, push rights, acceptance's tools: [`preflight::checks`],
/// all missing ones in one error), a base that exists and fits, and (with `--push`) what the
/// registry serves under the tag now, which the publish stage compares with the new digest (its
/// errors, credential lookups among them, are the publish stage's).
///
/// When the tag guard refuses, the pin is checked first (`source::check_pin`, as the source
/// stage would): a pin that is the annotated tag object or a tag that moved is the cause, and
/// "bump `revision`" would be the wrong advice.
async fn preflight(
    plan: &BuildPlan,
    registry: &dyn Registry,
    acceptance: Option<&dyn Acceptance>,
) -> Result<Option<String>, Error> {
    if let Err(guard) = record::check_tag(
        &plan.digest_manifest,
        &plan.config_name,
        plan.minor,
        &plan.tag,
        &plan.build_inputs(),
    ) {
        // check_pin fetches into the object store and checks out nothing.
        let req = stages::SourceStage::of(plan, Path::new("")).request();
        return Err(
            match tokio::task::block_in_place(|| crate::pipeline::source::check_pin(&req)) {
                Err(pin @ (SourceError::PinIsTagObject(_) | SourceError::TagMoved(_))) => {
                    pin.into()
                }
                _ => guard.into(),
            },
        );
    }
    preflight_output(&plan.output)?;
    base_resolves(plan, registry).await?;
    preflight::PreflightError::of(prerequisites(plan, registry, acceptance).await)?;
    if plan.push {
        registry
            .manifest_digest(&plan.repository_name, &plan.tag)
            .await
            .map_err(Error::Publish)
    } else {
        Ok(None)
    }
}

/// Whether `plan`'s base (when pulled) gives an image for each of its platforms
/// ([`crate::registry::pull::check_base`]), in seconds and before any build work; a base its
/// registry does not have is said so.
///
/// Errors: the base's [`PullError`].
pub async fn base_resolves(plan: &BuildPlan, registry: &dyn Registry) -> Result<(), PullError> {
    let BaseSpec::Image(r) = &plan.base else {
        return Ok(());
    };
    let found = crate::registry::pull::check_base(
        registry,
        r,
        &plan.base_text,
        &plan.platforms,
        plan.allow_unpinned_base,
    )
    .await;
    match found {
        Err(PullError::Registry(e)) if e.kind == crate::registry::ErrorKind::NotFound => {
            Err(PullError::Invalid {
                subject: plan.base_text.clone(),
                message: "not found in its registry".into(),
            })
        }
        other => other,
    }
}

/// The acceptance a build of `plan` runs: `acceptance` with `--accept`, none without.
///
/// Errors: [`Error::Usage`] for `--accept` when the command layer gave none.
fn acceptance_of<'a>(
    plan: &BuildPlan,
    acceptance: Option<&'a dyn Acceptance>,
) -> Result<Option<&'a dyn Acceptance>, Error> {
    match (plan.accept, acceptance) {
        (false, _) => Ok(None),
        (true, Some(a)) => Ok(Some(a)),
        (true, None) => Err(Error::Usage(
            "--accept: this build of occm-forge has no acceptance".into(),
        )),
    }
}

/// What the stages `plan` asks for need from this machine ([`preflight`]): Go and the pinned
/// toolchain, the cache, room in it and in `--output`; with `--push`, the registry's push rights;
/// with `--accept`, what `acceptance` needs. Each checked, none stopping the others.
pub async fn prerequisites(
    plan: &BuildPlan,
    registry: &dyn Registry,
    acceptance: Option<&dyn Acceptance>,
) -> Vec<preflight::Check> {
    let mut checks = tokio::task::block_in_place(|| {
        preflight::build_checks(&plan.toolchain, &plan.cache_dir, &plan.output)
    });
    if plan.push {
        checks.push(preflight::push_check(registry, &plan.repository_name).await);
    }
    if let Some(a) = acceptance.filter(|_| plan.accept) {
        checks.extend(tokio::task::block_in_place(|| a.prerequisites(plan)));
    }
    for w in checks.iter().filter_map(|c| c.warning.as_deref()) {
        tracing::warn!("{w}");
    }
    checks
}

/// Fails unless `dir` can be created and written (a read-only or mistyped `--output` is caught
/// before the long stages).
fn preflight_output(dir: &Path) -> Result<(), Error> {
    let err = |e: std::io::Error| Error::Io(format!("--output {}: {e}", dir.display()));
    if dir.exists() && !dir.is_dir() {
        return Err(Error::Usage(format!(
            "--output {}: not a directory (the OCI layout is a directory)",
            dir.display()
        )));
    }
    std::fs::create_dir_all(dir).map_err(err)?;
    tempfile::tempfile_in(dir).map(drop).map_err(err)
}

/// The digest-manifest entry of a finished build. The digests of the referrers (SBOM,
/// provenance, signature, attestations) are those of the referrer manifests the registry serves
/// when pushed (without `subject` where the registry refused it), else those in the layout;
/// `assembled.attachments` are the layout's, in the order publish pushed them.
fn entry(
    plan: &BuildPlan,
    tree: &SourceTree,
    applied: &[AppliedPatch],
    assembled: &Assembled,
    published: Option<&Published>,
    accepted: Option<&Accepted>,
    epoch: i64,
) -> Entry {
    let Assembled {
        imaged,
        described,
        signed,
        attachments,
    } = assembled;
    let image = &imaged.image;
    let digest_of = |layout: &str| match published {
        Some(p) if p.referrers == ReferrersPushed::TagSchema => p
            .attachments
            .iter()
            .zip(attachments)
            .find(|(_, ours)| ours.manifest.digest == layout)
            .map(|(pushed, _)| pushed.manifest.digest.clone())
            .unwrap_or_else(|| layout.to_string()),
        _ => layout.to_string(),
    };
    let sbom = described
        .sboms
        .iter()
        .map(|(platform, d)| (platform.clone(), digest_of(d)))
        .collect();
    let provenance = digest_of(&described.provenance);
    let signature = signed.as_ref().map(|s| {
        let mut signature = s.signature.clone();
        signature.digest = digest_of(&signature.digest);
        for d in signature.attestations.values_mut() {
            *d = digest_of(d);
        }
        signature
    });
    Entry {
        image: format!("{}:{}@{}", plan.repository, plan.tag, image.index.digest),
        repository: plan.repository.clone(),
        tag: plan.tag.clone(),
        digest: image.index.digest.clone(),
        published: plan.push,
        upstream_tag: plan.upstream_tag.clone(),
        upstream_commit: tree.commit.clone(),
        patch_series_sha256: plan.series_sha256.clone(),
        patches: plan.patch_names(),
        already_upstream: applied
            .iter()
            .filter(|a| a.outcome == PatchOutcome::AlreadyUpstream)
            .map(|a| a.name.clone())
            .collect(),
        applied_three_way: applied
            .iter()
            .filter_map(|a| match &a.outcome {
                PatchOutcome::AppliedThreeWay { files, .. } => {
                    Some((a.name.clone(), files.clone()))
                }
                _ => None,
            })
            .collect(),
        platforms: plan.platform_names(),
        manifests: image
            .platforms
            .iter()
            .map(|pi| (pi.platform.to_string(), pi.manifest.digest.clone()))
            .collect(),
        sbom,
        provenance: Some(provenance),
        go_version: plan.toolchain.version.clone(),
        base_image: plan.base_text.clone(),
        base_digest: imaged.base.digest.clone(),
        source_date_epoch: epoch,
        built_at: rfc3339(time::OffsetDateTime::now_utc().unix_timestamp()),
        mirrors: vec![],
        inputs: plan.inputs(),
        accepted: accepted.is_some(),
        accepted_scenarios: accepted.map(|a| a.scenarios.clone()).unwrap_or_default(),
        referrers: published.map(|p| p.referrers),
        signature,
    }
}
