//! Red/green proof (`patches verify` / `patches matrix`): each fix patch is guarded by its
//! regression tests on the real upstream tree. (The `verify` command, which checks the registry,
//! is the `audit` module.)
//!
//! For a minor, two work trees are tested: the series without its fix patches (every patch with
//! a `[patches."…"]` entry in images.toml), where each fix's guard tests must FAIL, and the whole
//! series, where they must PASS along with every other test. A fix whose change is already in the
//! tree (it applies in reverse) is reported as "already upstream — drop it from the series"; a
//! catalogued fix that a minor does not carry is reported when its guard tests pass there anyway
//! (the bug is absent in that minor).

use std::path::PathBuf;

use serde::Serialize;

use crate::Error;
use crate::config::{Config, Minor};
use crate::go::Toolchain;
use crate::go::test::{self, Outcome, TestSummary};
use crate::patches::{self, PatchOutcome};
use crate::pipeline::{PatchedTree, Reporter, StageReport, Stages, patched_tree, scratch_dir};

/// What to verify.
#[derive(Debug, Clone)]
pub struct VerifyRequest<'a> {
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
            stage: r.stage,
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

/// Runs the red and the green test run for `req.minor` and judges every patch.
///
/// Errors: images.toml, source and patch failures as in `build` (a patch that does not apply
/// ends the verification); Go failing to produce any test events.
pub fn verify(req: &VerifyRequest<'_>, reporter: &dyn Reporter) -> Result<MinorReport, Error> {
    let cfg = req.config;
    let m = cfg.minor(req.minor)?;
    let series = patches::load_series(&cfg.patches_dir, &m.patches)?;
    let url = req
        .source
        .map(str::to_string)
        .unwrap_or_else(|| cfg.upstream.clone());
    let toolchain = Toolchain::new(&m.go, req.cache_dir);
    let scratch = scratch_dir(req.cache_dir, &format!("verify-{}-", req.minor))?;

    let is_fix = |name: &str| cfg.patches.contains_key(name);
    let run = |label: &str,
               series: &[patches::PatchFile],
               dir: PathBuf|
     -> Result<(PatchedTree, TestSummary, Option<String>), Error> {
        let labelled = Labelled {
            label: format!("{} {label}", req.minor),
            inner: reporter,
        };
        let mut stages = Stages {
            reports: Vec::new(),
            reporter: &labelled,
        };
        let patched = patched_tree(&url, m, req.cache_dir, &dir, series, &mut stages)?;
        let t = stages.start("test");
        // A run that produced no test events (e.g. modules the proxy will not serve) is a
        // problem of this minor, not the end of a matrix: the rows still show what applied.
        let (summary, problem) = match tokio::task::block_in_place(|| {
            test::run_raw(&patched.tree.path, &toolchain, &m.test_packages)
        }) {
            Ok(s) => (s, None),
            Err(e) => (TestSummary::default(), Some(format!("{label}: {e}"))),
        };
        let (p, f, s) = summary.counts();
        let detail = match &problem {
            Some(_) => format!("go{}: the tests could not run (see the table)", m.go),
            None => format!("go{}: {p} passed, {f} failed, {s} skipped", m.go),
        };
        stages.done("test", t, detail)?;
        Ok((patched, summary, problem))
    };

    let without: Vec<patches::PatchFile> = series
        .iter()
        .filter(|p| !is_fix(&p.name))
        .cloned()
        .collect();
    let (_, red, red_problem) = run("without fixes", &without, scratch.path().join("red"))?;
    let (green_tree, green, green_problem) =
        run("whole series", &series, scratch.path().join("green"))?;
    let ran = red_problem.is_none() && green_problem.is_none();

    let mut rows = Vec::new();
    for applied in &green_tree.applied {
        let applies = match applied.outcome {
            PatchOutcome::Applied(_) => "applied",
            PatchOutcome::AlreadyUpstream => "already upstream",
        };
        let Some(info) = cfg.patches.get(&applied.name) else {
            rows.push(PatchRow {
                patch: applied.name.clone(),
                in_series: true,
                applies: applies.into(),
                guards: vec![],
                verdict: Verdict::Applies,
            });
            continue;
        };
        let guards = guard_results(&info.guarded_by, &red, Some(&green));
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
        rows.push(PatchRow {
            patch: applied.name.clone(),
            in_series: true,
            applies: applies.into(),
            guards,
            verdict,
        });
    }
    for (name, info) in &cfg.patches {
        if m.patches.contains(name) {
            continue;
        }
        // Not carried: the whole-series run is the run without this fix.
        let guards = guard_results(&info.guarded_by, &green, None);
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
        rows.push(PatchRow {
            patch: name.clone(),
            in_series: false,
            applies: "not in series".into(),
            guards,
            verdict,
        });
    }

    let required = cfg.required_tests(m);
    let totals = green.counts();
    let mut problems: Vec<String> = red_problem.into_iter().chain(green_problem).collect();
    if ran && let Err(e) = test::check(green, &required) {
        problems.push(e.to_string());
    }
    Ok(MinorReport {
        minor: req.minor,
        upstream_tag: m.upstream_tag.clone(),
        commit: green_tree.tree.commit.clone(),
        go: m.go.clone(),
        rows,
        totals,
        problems,
    })
}

/// [`verify`] for each of `minors`; a minor that cannot be verified at all (images.toml, source
/// or patch failure) becomes a report with that error as its problem, so the matrix still covers it.
pub fn matrix(
    config: &Config,
    minors: &[Minor],
    source: Option<&str>,
    cache_dir: &std::path::Path,
    reporter: &dyn Reporter,
) -> Result<Vec<MinorReport>, Error> {
    let mut reports = Vec::new();
    for &minor in minors {
        let req = VerifyRequest {
            config,
            minor,
            source,
            cache_dir,
        };
        match verify(&req, reporter) {
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
        crate::image::spec::rfc3339(generated_at),
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
