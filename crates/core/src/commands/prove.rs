//! Red/green proof (`patches prove` / `patches matrix`): each fix patch is guarded by its
//! regression tests on the real upstream tree. In the code this is the *proof*; the `verify`
//! command, which checks the registry against the digest manifest, is `commands::verify`.
//!
//! For a minor, two work trees are tested: the series without its fix patches (every patch with
//! a `[patches."…"]` entry in images.toml), where each fix's guard tests must FAIL, and the whole
//! series, where they must PASS along with every other test. A fix whose change is already in the
//! tree (it applies in reverse) is reported as "already upstream — drop it from the series"; a
//! catalogued fix that a minor does not carry is reported when its guard tests pass there anyway
//! (the bug is absent in that minor).

use std::path::Path;

use serde::Serialize;

use crate::base::util::scratch_dir;
use crate::config::{Config, Minor};
use crate::pipeline::Error;
use crate::pipeline::go::test::{self, Outcome, TestSummary};
use crate::pipeline::patches::{AppliedPatch, PatchFile, PatchOutcome};
use crate::pipeline::plan::{BuildPlan, Overrides};
use crate::pipeline::stage::{Reporter, Runner, StageReport};
use crate::pipeline::stages::test::{Judge, Tested};
use crate::pipeline::stages::{PatchStage, SourceStage, TestStage};

/// What to prove.
#[derive(Debug, Clone)]
pub struct ProofRequest<'a> {
    /// The loaded images.toml.
    pub config: &'a Config,
    /// The minor.
    pub minor: Minor,
    /// Where to fetch upstream from; images.toml `upstream` when `None`.
    pub source: Option<&'a str>,
    /// occm-forge's cache directory.
    pub cache_dir: &'a std::path::Path,
}

/// The verdict for one patch in one minor.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Verdict {
    /// A support or test patch that applies.
    Applies,
    /// A fix whose guards fail without it and pass with it.
    RedGreen,
    /// A fix found already in the tree: drop it from the series.
    AlreadyUpstream,
    /// A catalogued fix this minor does not carry, whose guards pass anyway: the bug is absent.
    BugAbsent,
    /// A catalogued fix this minor does not carry and whose guards did not run.
    NotCarried,
    /// A guard passes without the fix: it does not guard anything.
    NotGuarding,
    /// A guard does not pass with the fix (or, for an uncarried fix, fails).
    Broken,
    /// The tests could not run (see the minor's problems).
    NotRun,
}

impl Verdict {
    /// Whether this verdict is acceptable.
    pub fn ok(self) -> bool {
        !matches!(
            self,
            Verdict::NotGuarding | Verdict::Broken | Verdict::NotRun
        )
    }

    /// Human wording for tables.
    pub fn text(self) -> &'static str {
        match self {
            Verdict::Applies => "applies",
            Verdict::RedGreen => "ok: red without the fix, green with it",
            Verdict::AlreadyUpstream => "already upstream — drop it from the series",
            Verdict::BugAbsent => {
                "not carried: the guard passes unpatched (bug absent in this release)"
            }
            Verdict::NotCarried => "not carried",
            Verdict::NotGuarding => "FAILED: the guard passes without the fix",
            Verdict::Broken => "FAILED: the guard does not pass with the fix",
            Verdict::NotRun => "NOT VERIFIED: the tests could not run",
        }
    }
}

/// One guard test's outcomes.
#[derive(Debug, Clone, Serialize)]
pub struct GuardResult {
    /// Test name.
    pub test: String,
    /// Outcome without the fix patches (`None`: did not run).
    pub without_fix: Option<String>,
    /// Outcome with the whole series.
    pub with_fix: Option<String>,
}

/// One row: a patch in one minor.
#[derive(Debug, Clone, Serialize)]
pub struct PatchRow {
    /// Patch file name.
    pub patch: String,
    /// Whether the minor's series carries it.
    pub in_series: bool,
    /// `applied`, `already upstream` or `not in series`.
    pub applies: String,
    /// Guard tests (fix patches only).
    pub guards: Vec<GuardResult>,
    /// The verdict.
    pub verdict: Verdict,
}

/// The result for one minor.
#[derive(Debug, Clone, Serialize)]
pub struct MinorReport {
    /// The minor.
    pub minor: Minor,
    /// Upstream tag.
    pub upstream_tag: String,
    /// Pinned commit.
    pub commit: String,
    /// Go version.
    pub go: String,
    /// Rows in series order, then uncarried catalogued fixes.
    pub rows: Vec<PatchRow>,
    /// (passed, failed, skipped) with the whole series.
    pub totals: (usize, usize, usize),
    /// Failures of the whole-series test run (tests or required tests), one line each.
    pub problems: Vec<String>,
}

impl MinorReport {
    /// Every row acceptable and the whole-series run clean.
    pub fn ok(&self) -> bool {
        self.problems.is_empty() && self.rows.iter().all(|r| r.verdict.ok())
    }
}

fn outcome_text(o: Option<Outcome>) -> Option<String> {
    o.map(|o| match o {
        Outcome::Pass => "PASS",
        Outcome::Fail => "FAIL",
        Outcome::Skip => "SKIP",
    })
    .map(str::to_string)
}

/// A reporter that puts "<minor> <run>: " before each stage's detail.
struct Labelled<'a> {
    label: String,
    inner: &'a dyn Reporter,
}

impl Reporter for Labelled<'_> {
    fn started(&self, stage: &'static str) {
        self.inner.started(stage);
    }
    fn finished(&self, r: &StageReport) {
        self.inner.finished(&StageReport {
            stage: r.stage.clone(),
            seconds: r.seconds,
            detail: format!("{}: {}", self.label, r.detail),
        });
    }
}

/// Each guard's outcome without the fix and, when the fix was applied, with it.
fn guard_results(
    tests: &[String],
    without: &TestSummary,
    with: Option<&TestSummary>,
) -> Vec<GuardResult> {
    tests
        .iter()
        .map(|t| GuardResult {
            test: t.clone(),
            without_fix: outcome_text(without.outcome_of(t)),
            with_fix: with.and_then(|w| outcome_text(w.outcome_of(t))),
        })
        .collect()
}

/// One tested tree: the patches as applied and the tests as run.
struct TestedTree {
    commit: String,
    applied: Vec<AppliedPatch>,
    tested: Tested,
}

/// The source, patches and test stages of `build`, run through the same [`Runner`] on `series`
/// in `dir`, with every stage line labelled `<minor> <label>: `. The tests are recorded, not
/// judged: failures are what the proof looks at.
async fn tested_tree(
    plan: &BuildPlan,
    label: &str,
    series: &[PatchFile],
    dir: &Path,
    reporter: &dyn Reporter,
) -> Result<TestedTree, Error> {
    let labelled = Labelled {
        label: format!("{} {label}", plan.minor),
        inner: reporter,
    };
    let mut run = Runner::new(&labelled);
    let tree = run.run(SourceStage::of(plan, dir)).await?;
    let applied = run
        .run(PatchStage {
            tree: &tree,
            series,
            upstream_tag: &plan.upstream_tag,
            prepared: None,
        })
        .await?;
    crate::pipeline::check_go_line(plan, &tree)?;
    // images.toml's go_overrides, as the build sets them, in the red tree and the green.
    crate::pipeline::overridden(plan, &mut run, &tree.path).await?;
    let mut tested = run
        .run(TestStage {
            dir: &tree.path,
            toolchain: &plan.toolchain,
            packages: &plan.test_packages,
            judge: Judge::Record,
        })
        .await?;
    // A run that produced no test events (e.g. modules the proxy will not serve) is a problem
    // of this minor, not the end of a matrix: the rows still show what applied.
    tested.problem = tested.problem.map(|p| format!("{label}: {p}"));
    Ok(TestedTree {
        commit: tree.commit,
        applied,
        tested,
    })
}

/// Runs the red and the green test run for `req.minor` and judges every patch.
///
/// Errors: images.toml, source and patch failures as in `build` (a patch that does not apply
/// ends the proof); Go failing to start.
pub async fn prove(req: &ProofRequest<'_>, reporter: &dyn Reporter) -> Result<MinorReport, Error> {
    let cfg = req.config;
    let overrides = Overrides {
        source: req.source.map(str::to_string),
        base: Some(crate::config::STATIC_BASE.to_string()),
        cache_dir: req.cache_dir.to_path_buf(),
        ..Overrides::default()
    };
    let plan = BuildPlan::resolve(cfg, req.minor, &overrides)?;
    crate::base::util::sweep_scratch(req.cache_dir);
    let scratch =
        scratch_dir(req.cache_dir, &format!("verify-{}-", req.minor)).map_err(Error::Io)?;
    let without: Vec<PatchFile> = plan
        .series
        .iter()
        .filter(|p| cfg.patch_info(&p.name).is_none())
        .cloned()
        .collect();
    let red = tested_tree(
        &plan,
        "without fixes",
        &without,
        &scratch.path().join("red"),
        reporter,
    )
    .await?;
    let green = tested_tree(
        &plan,
        "whole series",
        &plan.series,
        &scratch.path().join("green"),
        reporter,
    )
    .await?;
    let ran = red.tested.problem.is_none() && green.tested.problem.is_none();
    let mut rows = series_rows(
        cfg,
        &green.applied,
        &red.tested.summary,
        &green.tested.summary,
        ran,
    );
    rows.extend(uncarried_rows(cfg, req.minor, &green.tested.summary, ran)?);
    let mut problems: Vec<String> = red
        .tested
        .problem
        .into_iter()
        .chain(green.tested.problem)
        .collect();
    let totals = green.tested.summary.counts();
    if ran && let Err(e) = test::check(green.tested.summary, &plan.required_tests) {
        problems.push(e.to_string());
    }
    Ok(MinorReport {
        minor: req.minor,
        upstream_tag: plan.upstream_tag.clone(),
        commit: green.commit,
        go: plan.toolchain.version.clone(),
        rows,
        totals,
        problems,
    })
}

/// The rows of the patches in the series, in series order.
fn series_rows(
    cfg: &Config,
    applied: &[AppliedPatch],
    red: &TestSummary,
    green: &TestSummary,
    ran: bool,
) -> Vec<PatchRow> {
    applied
        .iter()
        .map(|applied| {
            let applies = match applied.outcome {
                PatchOutcome::Applied(_) => "applied",
                PatchOutcome::AppliedThreeWay { .. } => "applied three-way",
                PatchOutcome::AlreadyUpstream => "already upstream",
            };
            let Some(info) = cfg.patch_info(&applied.name) else {
                return PatchRow {
                    patch: applied.name.clone(),
                    in_series: true,
                    applies: applies.into(),
                    guards: vec![],
                    verdict: Verdict::Applies,
                };
            };
            let guards = guard_results(&info.guarded_by, red, Some(green));
            let all = |v: &dyn Fn(&GuardResult) -> bool| guards.iter().all(v);
            let verdict = if applied.outcome == PatchOutcome::AlreadyUpstream {
                Verdict::AlreadyUpstream
            } else if !ran {
                Verdict::NotRun
            } else if !all(&|g| g.with_fix.as_deref() == Some("PASS")) {
                Verdict::Broken
            } else if !all(&|g| g.without_fix.as_deref() == Some("FAIL")) {
                Verdict::NotGuarding
            } else {
                Verdict::RedGreen
            };
            PatchRow {
                patch: applied.name.clone(),
                in_series: true,
                applies: applies.into(),
                guards,
                verdict,
            }
        })
        .collect()
}

/// The rows of catalogued fixes the minor does not carry: the whole-series run is the run
/// without them.
fn uncarried_rows(
    cfg: &Config,
    minor: Minor,
    green: &TestSummary,
    ran: bool,
) -> Result<Vec<PatchRow>, Error> {
    let m = cfg.minor(minor)?;
    Ok(cfg
        .patches
        .iter()
        .filter(|(name, _)| !m.patches.contains(name))
        .map(|(name, info)| {
            let guards = guard_results(&info.guarded_by, green, None);
            let verdict = if !ran {
                Verdict::NotRun
            } else if guards
                .iter()
                .all(|g| g.without_fix.as_deref() == Some("PASS"))
            {
                Verdict::BugAbsent
            } else if guards.iter().all(|g| g.without_fix.is_none()) {
                Verdict::NotCarried
            } else {
                Verdict::Broken
            };
            PatchRow {
                patch: name.clone(),
                in_series: false,
                applies: "not in series".into(),
                guards,
                verdict,
            }
        })
        .collect())
}

/// [`prove`] for each of `minors`; a minor that cannot be proven at all (images.toml, source
/// or patch failure) becomes a report with that error as its problem, so the matrix still covers it.
pub async fn matrix(
    config: &Config,
    minors: &[Minor],
    source: Option<&str>,
    cache_dir: &std::path::Path,
    reporter: &dyn Reporter,
) -> Result<Vec<MinorReport>, Error> {
    let mut reports = Vec::new();
    for &minor in minors {
        let req = ProofRequest {
            config,
            minor,
            source,
            cache_dir,
        };
        match prove(&req, reporter).await {
            Ok(r) => reports.push(r),
            Err(e) => {
                let m = config.minor(minor)?;
                reports.push(MinorReport {
                    minor,
                    upstream_tag: m.upstream_tag.clone(),
                    commit: m.commit.clone(),
                    go: m.go.clone(),
                    rows: vec![],
                    totals: (0, 0, 0),
                    problems: vec![e.to_string()],
                });
            }
        }
    }
    Ok(reports)
}

/// The matrix as a document (docs/patch-matrix.md), stamped with when it was produced.
pub fn matrix_document(reports: &[MinorReport], generated_at: i64) -> String {
    format!(
        "# Patch matrix\n\nGenerated by `occm-forge patches matrix` on {} from images.toml and the patch series; do not edit by hand.\nEach fix patch's guard tests run on the upstream tree without the fix patches (\"without fix\") and with the whole series (\"with fix\").\n\n{}",
        crate::base::util::rfc3339(generated_at),
        render_markdown(reports)
    )
}

/// A Markdown table of reports: minor × patch × applies / without fix / with fix / verdict.
pub fn render_markdown(reports: &[MinorReport]) -> String {
    let mut out = String::from(
        "| minor | upstream | patch | applies | guard test | without fix | with fix | verdict |\n|---|---|---|---|---|---|---|---|\n",
    );
    let dash = |o: &Option<String>| o.clone().unwrap_or_else(|| "—".into());
    for r in reports {
        for row in &r.rows {
            let (tests, without, with) = if row.guards.is_empty() {
                ("—".to_string(), "—".to_string(), "—".to_string())
            } else {
                (
                    row.guards
                        .iter()
                        .map(|g| format!("`{}`", g.test))
                        .collect::<Vec<_>>()
                        .join("<br>"),
                    row.guards
                        .iter()
                        .map(|g| dash(&g.without_fix))
                        .collect::<Vec<_>>()
                        .join("<br>"),
                    row.guards
                        .iter()
                        .map(|g| dash(&g.with_fix))
                        .collect::<Vec<_>>()
                        .join("<br>"),
                )
            };
            out.push_str(&format!(
                "| {} | {} | `{}` | {} | {} | {} | {} | {} |\n",
                r.minor,
                r.upstream_tag,
                row.patch,
                row.applies,
                tests,
                without,
                with,
                row.verdict.text()
            ));
        }
    }
    out.push('\n');
    out.push_str("| minor | upstream | commit | go | whole series: passed / failed / skipped | result |\n|---|---|---|---|---|---|\n");
    for r in reports {
        let (p, f, s) = r.totals;
        let result = if r.ok() {
            "ok".to_string()
        } else if r.problems.is_empty() {
            "FAILED".into()
        } else {
            format!("FAILED: {}", r.problems.join("; "))
        };
        out.push_str(&format!(
            "| {} | {} | `{}` | {} | {p} / {f} / {s} | {result} |\n",
            r.minor,
            r.upstream_tag,
            &r.commit[..12],
            r.go
        ));
    }
    out
}
/// `patches prove`: a patch is not proven (red without it, green with it), one line.
#[derive(Debug, thiserror::Error)]
#[error("prove: {0}")]
pub struct NotProven(pub String);

impl crate::pipeline::Failure for NotProven {
    /// 5, as a failing test.
    fn exit_code(&self) -> u8 {
        5
    }
}

crate::command_failure!(NotProven);
