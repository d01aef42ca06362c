//! The acceptance report: scenario × (ours, control) × (pass/fail, seconds, evidence), as plain
//! data (serde, for `--json`) and as Markdown (the `accept` table and docs/acceptance.md).

use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use super::binary::Extracted;
use super::scenarios::{RunResult, Scenario, Side};
use super::sim::control_plane::Versions;
use occm_forge_core::config::Minor;
use occm_forge_core::pipeline::stage::StageReport;

/// The verdict for one minor.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Verdict {
    /// Ours passed every scenario run.
    Accepted,
    /// Ours failed a scenario, or the run itself failed (see `reason`).
    Failed,
    /// The minor could not be tested (see `reason`): never a pass.
    NotVerified,
}

impl Verdict {
    /// Wording for tables.
    pub fn text(self) -> &'static str {
        match self {
            Verdict::Accepted => "accepted",
            Verdict::Failed => "FAILED",
            Verdict::NotVerified => "NOT VERIFIED",
        }
    }
}

/// One scenario's results on both binaries.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct ScenarioRow {
    /// The scenario.
    pub scenario: Scenario,
    /// Its one-line description (read back from a stored report as the scenario's own title).
    #[serde(skip_deserializing)]
    pub title: &'static str,
    /// Ours (the image's binary).
    pub ours: Option<RunResult>,
    /// The control (unpatched upstream).
    pub control: Option<RunResult>,
}

impl ScenarioRow {
    /// What the row shows, comparing ours with the control.
    pub fn shows(&self) -> String {
        let expected = self.scenario.control_expected_to_pass();
        match (&self.ours, &self.control) {
            (Some(o), c) if !o.passed && o.denied.is_some() => {
                let what = o
                    .denied
                    .as_deref()
                    .map(missing_permission)
                    .unwrap_or_default();
                let same = c.as_ref().is_some_and(|c| c.denied.is_some());
                format!(
                    "FAILED: the OCCM's RBAC (the chart's ClusterRole) lacks {what}; not the patch's failure{}",
                    if same {
                        ": the control fails the same way"
                    } else {
                        ""
                    }
                )
            }
            (Some(o), _) if !o.passed => "FAILED: ours fails".into(),
            (Some(_), Some(c)) if !c.passed && !expected && c.bug_shown => {
                self.scenario.fix_shows().into()
            }
            (Some(_), Some(c)) if !c.passed && !expected => {
                "ours passes; upstream fails without showing the bug (inconclusive)".into()
            }
            (Some(_), Some(c)) if c.passed && !expected => {
                "ours passes; upstream passes too (the bug is absent in this release)".into()
            }
            (Some(_), Some(c)) if c.passed => "both pass".into(),
            (Some(_), Some(_)) => "ours passes; upstream FAILS (see its log)".into(),
            (Some(_), None) => "ours passes".into(),
            (None, _) => "not run".into(),
        }
    }
}

/// The permission an apiserver refusal names, e.g. `` `delete` on `nodes` `` from
/// `… cannot delete resource "nodes" in API group "" at the cluster scope` (the authorizer's
/// message, k8s.io/apiserver `forbidden.go`); the whole line when it does not parse.
pub fn missing_permission(denied: &str) -> String {
    let plain = denied.replace("\\\"", "\"");
    let parsed = plain.split_once("cannot ").and_then(|(_, rest)| {
        let (verb, rest) = rest.split_once(" resource \"")?;
        let (resource, _) = rest.split_once('"')?;
        Some(format!("`{verb}` on `{resource}`"))
    });
    parsed.unwrap_or_else(|| format!("a permission (`{denied}`)"))
}

/// The acceptance result for one minor.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct AcceptReport {
    /// The Kubernetes minor.
    pub minor: Minor,
    /// Upstream tag, e.g. `v1.34.1`.
    pub upstream_tag: String,
    /// Our image's tag (its `ref.name` in the layout).
    pub image_tag: String,
    /// The verdict.
    pub verdict: Verdict,
    /// Why it is not accepted (one line), when it is not.
    pub reason: Option<String>,
    /// Where ours came from (index, manifest and layer digests).
    pub ours: Option<Extracted>,
    /// The control binary.
    pub control: Option<PathBuf>,
    /// Kubernetes and etcd versions from the upstream go.mod.
    pub versions: Option<Versions>,
    /// What the running apiserver reported at `/version`.
    pub apiserver_version: Option<String>,
    /// The chart OCCM ran under (its RBAC); `None` in reports from before it did.
    #[serde(default)]
    pub chart: Option<super::sim::chart::Chart>,
    /// Go toolchain version.
    pub go: String,
    /// Scenario rows, in order.
    pub rows: Vec<ScenarioRow>,
    /// Requests the simulated cloud answered 404 because it does not simulate them, each
    /// `S1 ours: GET /…`; empty when the simulation covered everything OCCM asked.
    pub unsimulated_requests: Vec<String>,
    /// Stage timings (builds, start-up, each run).
    pub timings: Vec<StageReport>,
    /// The logs, kept when the verdict is not `accepted`.
    pub logs: Option<PathBuf>,
    /// When the report was written into an acceptance document (RFC 3339, UTC); `None` until
    /// then.
    #[serde(default)]
    pub recorded_at: Option<String>,
    /// Scenarios whose bug upstream has fixed in this release (a fix patch naming them in
    /// `shown_by` is not in the series): a control that passes them is expected, not a failure
    /// to show the fix.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub upstream_fixed: Vec<Scenario>,
}

impl AcceptReport {
    /// A report with no result yet.
    pub fn new(minor: Minor, upstream_tag: &str, image_tag: &str, go: &str) -> Self {
        AcceptReport {
            minor,
            upstream_tag: upstream_tag.to_string(),
            image_tag: image_tag.to_string(),
            verdict: Verdict::NotVerified,
            reason: None,
            ours: None,
            control: None,
            versions: None,
            apiserver_version: None,
            chart: None,
            go: go.to_string(),
            rows: Vec::new(),
            unsimulated_requests: Vec::new(),
            timings: Vec::new(),
            logs: None,
            recorded_at: None,
            upstream_fixed: Vec::new(),
        }
    }

    /// The report as a committed document holds it: the binaries' and logs' paths from their
    /// `accept/` directory on, under `<layout>` (ours, the logs) or `<cache>` (the control), not
    /// the paths of the machine that ran it.
    pub fn make_paths_portable(&mut self) {
        let portable = |p: &Path, root: &str| match p.to_string_lossy().find("/accept/") {
            Some(i) => PathBuf::from(format!("<{root}>{}", &p.to_string_lossy()[i..])),
            None => p.to_path_buf(),
        };
        if let Some(o) = &mut self.ours {
            o.path = portable(&o.path, "layout");
        }
        if let Some(c) = &mut self.control {
            *c = portable(c, "cache");
        }
        if let Some(l) = &mut self.logs {
            *l = portable(l, "layout");
        }
    }

    /// A report for a minor that could not be tested.
    pub fn not_verified(mut self, reason: impl Into<String>) -> Self {
        self.verdict = Verdict::NotVerified;
        self.reason = Some(reason.into());
        self
    }

    /// A report for a run that failed before a verdict.
    pub fn failed(mut self, reason: impl Into<String>) -> Self {
        self.verdict = Verdict::Failed;
        self.reason = Some(reason.into());
        self
    }

    /// Whether the minor is accepted.
    pub fn ok(&self) -> bool {
        self.verdict == Verdict::Accepted
    }

    /// The names of the scenarios whose row satisfies `pick`, in order (`S1`, …).
    fn scenarios_where(&self, pick: &dyn Fn(&ScenarioRow) -> bool) -> Vec<String> {
        self.rows
            .iter()
            .filter(|r| pick(r))
            .map(|r| r.scenario.to_string())
            .collect()
    }

    /// One line for a stage report, e.g. `ours passes S1 S2 S3 S4 S5; the control fails S1 S2 S5`.
    pub fn summary_line(&self) -> String {
        let names = |pick: &dyn Fn(&ScenarioRow) -> bool| {
            let v = self.scenarios_where(pick);
            if v.is_empty() {
                "none".to_string()
            } else {
                v.join(" ")
            }
        };
        format!(
            "ours passes {}; the control fails {}",
            names(&|r| r.ours.as_ref().is_some_and(|o| o.passed)),
            names(&|r| r.control.as_ref().is_some_and(|c| !c.passed)),
        )
    }

    /// Why ours failed `failed`: plainly, or, when every failure is an apiserver refusal of the
    /// OCCM's RBAC, the missing permission, that this is not the patch's failure (and whether the
    /// control was refused the same way) and how to restore the rule.
    fn ours_failed_reason(&self, failed: &[String]) -> String {
        let ours = |r: &ScenarioRow| r.ours.as_ref().filter(|o| !o.passed).cloned();
        let failing: Vec<RunResult> = self.rows.iter().filter_map(ours).collect();
        let denied: Vec<&str> = failing.iter().filter_map(|o| o.denied.as_deref()).collect();
        if denied.is_empty() || denied.len() < failing.len() {
            return format!("ours fails {}", failed.join(", "));
        }
        let control_too = self
            .rows
            .iter()
            .filter(|r| ours(r).is_some())
            .all(|r| r.control.as_ref().is_some_and(|c| c.denied.is_some()));
        format!(
            "ours fails {} because the OCCM's RBAC (the chart's ClusterRole) lacks {} (`{}`, event DeletingNodeFailed): not the patch's failure{}; restore the rule (`occm-forge clusters --fix`, or `occm-forge render --format crs-secret --node-delete restore`) or use a chart that has it",
            failed.join(", "),
            missing_permission(denied[0]),
            denied[0],
            if control_too {
                ", the control (unpatched upstream) is refused the same way"
            } else {
                ""
            }
        )
    }

    /// Decides the verdict from the rows: accepted when ours passed every scenario run and the
    /// control (unpatched upstream) showed the bug in every scenario that shows a fix (S1, S2,
    /// S5; [`RunResult::bug_shown`]) — a control that passes one, or fails it without showing
    /// the bug (S5: no remediation loop), means the run does not show the fix (a cached control that is not
    /// upstream's, or the bug fixed upstream: `patches prove` says which patch is then already
    /// upstream). A run of some scenarios only says so in its reason.
    pub fn decide(&mut self) {
        let ours_failed = self.scenarios_where(&|r| r.ours.as_ref().is_none_or(|o| !o.passed));
        let fixed = self.upstream_fixed.clone();
        let control_passed = self.scenarios_where(&|r| {
            let passing_is_expected = r.scenario.control_expected_to_pass()
                || fixed.contains(&r.scenario) && r.control.as_ref().is_some_and(|c| c.passed);
            !passing_is_expected && r.control.as_ref().is_some_and(|c| c.passed || !c.bug_shown)
        });
        let run = self.scenarios_where(&|_| true);
        if self.rows.is_empty() {
            self.verdict = Verdict::NotVerified;
            self.reason.get_or_insert_with(|| "no scenario ran".into());
        } else if !ours_failed.is_empty() {
            self.verdict = Verdict::Failed;
            self.reason = Some(self.ours_failed_reason(&ours_failed));
        } else if !control_passed.is_empty() {
            self.verdict = Verdict::Failed;
            self.reason = Some(format!(
                "the control (unpatched upstream) does not show the bug in {}, so this run does not show the fix; check the control binary ({}) and whether the bug is fixed upstream (`occm-forge patches prove`)",
                control_passed.join(", "),
                self.control
                    .as_ref()
                    .map(|p| p.display().to_string())
                    .unwrap_or_else(|| "none".into())
            ));
        } else {
            self.verdict = Verdict::Accepted;
            self.reason =
                (run.len() < Scenario::ALL.len()).then(|| format!("only {} ran", run.join(", ")));
        }
    }
}

/// `Ok` when every report is accepted, else [`occm_forge_core::pipeline::acceptance::AcceptError::Failed`] naming each minor
/// that is not, its verdict and reason, and where its logs are.
pub fn require_accepted(
    reports: &[AcceptReport],
) -> Result<(), occm_forge_core::pipeline::acceptance::AcceptError> {
    let bad: Vec<String> = reports
        .iter()
        .filter(|r| !r.ok())
        .map(|r| {
            let logs = r
                .logs
                .as_ref()
                .map(|l| format!(" (logs in {})", l.display()))
                .unwrap_or_default();
            format!(
                "{} {}: {}{logs}",
                r.minor,
                r.verdict.text(),
                r.reason.as_deref().unwrap_or("see the table")
            )
        })
        .collect();
    if bad.is_empty() {
        Ok(())
    } else {
        Err(occm_forge_core::pipeline::acceptance::AcceptError::Failed(
            bad.join("; "),
        ))
    }
}

fn cell(text: &str) -> String {
    text.replace('|', "\\|").replace('\n', " ")
}

fn run_cell(r: &Option<RunResult>) -> String {
    match r {
        None => "—".into(),
        Some(r) => format!(
            "{} {:.1} s: {}",
            if r.passed { "pass" } else { "FAIL" },
            r.seconds,
            cell(&r.evidence)
        ),
    }
}

/// The reports as Markdown: one row per minor and scenario (ours, control, what it shows), then
/// one row per minor (versions, ours' digest, verdict, requests not simulated).
pub fn render_markdown(reports: &[AcceptReport]) -> String {
    let mut out = String::from(
        "| minor | scenario | ours | control (upstream, unpatched) | shows |\n|---|---|---|---|---|\n",
    );
    for r in reports {
        if r.rows.is_empty() {
            out.push_str(&format!(
                "| {} | — | — | — | {}: {} |\n",
                r.minor,
                r.verdict.text(),
                cell(r.reason.as_deref().unwrap_or(""))
            ));
        }
        for row in &r.rows {
            out.push_str(&format!(
                "| {} | {} {} | {} | {} | {} |\n",
                r.minor,
                row.scenario,
                cell(row.scenario.title()),
                run_cell(&row.ours),
                match (&row.control, row.scenario.sides().contains(&Side::Control)) {
                    (None, false) => "— (no control: it runs no OCCM binary)".to_string(),
                    (control, _) => run_cell(control),
                },
                row.shows()
            ));
        }
    }
    out.push('\n');
    out.push_str(
        "| minor | upstream | ours (image, host platform) | Kubernetes / etcd | go | chart (OCCM's RBAC) | requests not simulated | verdict |\n|---|---|---|---|---|---|---|---|\n",
    );
    for r in reports {
        let ours = match &r.ours {
            Some(e) => format!(
                "`{}` index `{}`, layer `{}`",
                r.image_tag,
                occm_forge_core::base::util::short(&e.index_digest),
                occm_forge_core::base::util::short(&e.layer_digest)
            ),
            None => format!("`{}`", r.image_tag),
        };
        let versions = match (&r.versions, &r.apiserver_version) {
            (Some(v), Some(a)) if !a.is_empty() => {
                format!("{} (apiserver {a}) / {}", v.kubernetes, v.etcd)
            }
            (Some(v), _) => format!("{} / {}", v.kubernetes, v.etcd),
            (None, _) => "—".into(),
        };
        let gaps = if r.rows.is_empty() {
            "—".to_string()
        } else if r.unsimulated_requests.is_empty() {
            "none".to_string()
        } else {
            r.unsimulated_requests
                .iter()
                .map(|g| format!("`{}`", cell(g)))
                .collect::<Vec<_>>()
                .join("<br>")
        };
        let verdict = match &r.reason {
            Some(reason) => format!("{}: {}", r.verdict.text(), cell(reason)),
            None => r.verdict.text().to_string(),
        };
        let chart = match &r.chart {
            Some(c) => format!("{}: {}", cell(&c.source), cell(&c.rbac)),
            None => "—".into(),
        };
        out.push_str(&format!(
            "| {} | {} | {ours} | {versions} | {} | {chart} | {gaps} | {verdict} |\n",
            r.minor, r.upstream_tag, r.go
        ));
    }
    out
}

/// One line per scenario, from the scenario itself: what a pass of ours means.
fn pass_means() -> String {
    Scenario::ALL
        .iter()
        .map(|s| format!("- {s}: {}\n", s.pass_means()))
        .collect()
}

/// The reports as a document (docs/acceptance.md), stamped with when they were produced.
/// `reports_file` is the file name of the reports beside it ([`reports_path`]).
pub fn document(reports: &[AcceptReport], generated_at: i64, reports_file: &str) -> String {
    let timings: String = reports
        .iter()
        .filter(|r| !r.timings.is_empty() || r.recorded_at.is_some())
        .map(|r| {
            format!(
                "- {}{}: {}\n",
                r.minor,
                r.recorded_at
                    .as_deref()
                    .map(|at| format!(" (run recorded {at})"))
                    .unwrap_or_default(),
                r.timings
                    .iter()
                    .map(|t| format!("{} {:.1} s", t.stage, t.seconds))
                    .collect::<Vec<_>>()
                    .join(", ")
            )
        })
        .collect();
    format!(
        "# Acceptance in a simulated cloud\n\n\
Generated by `occm-forge accept --all --output docs/acceptance.md` (or `build --accept --accept-output docs/acceptance.md`), last on {}; do not edit by hand. \
The reports behind it are in {}: a run over some minors replaces their rows and keeps the others' as recorded, each with the date of its run (Timings).\n\n\
Each minor's image binary (\"ours\": `bin/openstack-cloud-controller-manager` from the host platform's layer of the built OCI layout) \
and the unpatched upstream build of the same tag (\"control\") run as the Helm chart runs them (its arguments, and a token of its ServiceAccount bound to its ClusterRole: the chart magnum-cluster-api compiles in, rendered by magnum-cluster-api's own code, or the chart `accept --chart` names; the chart column below) against a real etcd and kube-apiserver \
(built from the Kubernetes version the upstream go.mod requires) and the simulated OpenStack inside occm-forge. \
Seconds are the scenario's own time (S1: Nodes created → deleted; S2: start → exit; S3: Node created → initialised; \
S4: leader killed → the second Node initialised; S5: the worker Machine first seen → healthy, or the window watched; \
S6: the slowest write of the ClusterResourceSet Secret → the workload DaemonSet; S7: start → the third exit, or the window watched; S8: the new worker's Machine first seen → healthy, or the window watched), not counting leader election at start-up. \
A scenario ends as soon as its evidence is conclusive, either way: S1 when each of its two Nodes is deleted, refused deletion by the apiserver (`… cannot delete resource \"nodes\"`: the ClusterRole lacks the rule, event DeletingNodeFailed; not the patch's failure, and the control is refused the same on the Node whose provider ID names a deleted server), or when the node lifecycle controller has logged twice that it cannot tell whether the Node exists (`error checking if node … exists`, once per 5 s monitor period: the error repeats instead of resolving, and the Node stays); S2 when OCCM exits, or when it is still up 5 s after it logged `Skipping \"cloud-node…\"` (the patched binary exits at that moment); S5 at the nodeRef or the second remediation. The 60 s deadlines only bound the case where neither shows. \
S5 to S8 each run on a management cluster of their own (a fresh control plane under Cluster API's real manager, with stand-ins for the infrastructure provider and the kubelets; the workload cluster is the same apiserver) and are decided by what Cluster API reports; in S5, S7 and S8 ours and the control run side by side, each with its own management cluster and simulated OpenStack. \
The bug report's criteria: S1, S2, S5, S7 and S8 must pass on ours and show the bug on the control (S5: no nodeRef and the MachineHealthCheck remediating again and again; S7: OCCM up and silent; S8: no nodeRef and a remediation); S3 and S4 show the patched binary still does its normal job; S6 runs no binary and has no control.\n\n\
What each outcome proves, and what it does not:\n\n\
- S5 pass: with a transient fault (the first Keystone token has no compute endpoint) the patched OCCM exits with patch 0004's message, comes back when restarted and initialises the worker's Node before Cluster API's MachineHealthCheck gives up on it, while the unpatched OCCM stays up without its cloud-node controller and Cluster API replaces the worker again and again. \
It does not prove how long a real kubelet, CAPO and Nova take: the stand-ins answer at once, the startup timeout is 60 s instead of magnum-cluster-api's default 600 s, the restart back-off is kubelet's 10 s doubling.\n\
- S8 pass: the same with magnum-cluster-api's own MachineHealthCheck (remediation while at most 80 % are unhealthy) in a pool whose two older workers are healthy: after an OCCM restart into the fault, the new worker is initialised and nothing is remediated, while under the unpatched OCCM the new worker is remediated beside healthy ones. It does not prove magnum-cluster-api's timings: its MachineHealthCheck has no nodeStartupTimeout (Cluster API's 600 s applies), shortened here to 90 s.\n\
- S7 pass: a fault that lasts is not cured by the fix, only made loud: the patched OCCM exits at every start with patch 0004's message, so its Pod crash-loops where an operator and their alerts see it, while the unpatched OCCM runs on silently and the Machines are remediated without a word of why. It does not prove the cloud comes back.\n\
- S6 pass: `render --format crs-secret` output written back with a full PUT reaches the workload cluster's OCCM DaemonSet through Cluster API's own ClusterResourceSet controller (strategy Reconcile) within 30 s, with the ClusterResourceSetBinding hash crs-secret prints; `--image` reverts it the same way; a driver-style upgrade (the Secret rendered again from the labels) puts upstream's image back, the state an operator must detect and repair; a legacy Secret named by the cluster UUID under strategy ApplyOnce is refused by crs-secret, and a hand edit of it never reaches the workload. \
The Secret is the one magnum-cluster-api's own code renders for the cluster's labels (its driver upgrade is that rendering again). It does not prove the rollout of the DaemonSet's Pods (no kubelet or kube-controller-manager runs).\n\n\
What a pass of ours means, per scenario:\n\n{}\n\
{}\n## Timings\n\n{}",
        occm_forge_core::base::util::rfc3339(generated_at),
        reports_file,
        pass_means(),
        render_markdown(reports),
        if timings.is_empty() {
            "none\n".to_string()
        } else {
            timings
        }
    )
}

/// The file beside an acceptance document that holds the reports behind it: `acceptance.md` →
/// `acceptance.json`.
pub fn reports_path(document: &Path) -> PathBuf {
    document.with_extension("json")
}

/// The reports already recorded beside the acceptance document at `path` ([`reports_path`]);
/// none when that file does not exist. `accept --output` calls it before it runs anything, so a
/// document it could not update is refused before minutes of scenarios, not after.
///
/// Errors: [`occm_forge_core::pipeline::Error::Io`] naming the reports file that cannot be read or is not a JSON
/// array of reports (an empty file included), or a document path ending in `.json`.
pub fn recorded_reports(
    path: &Path,
) -> Result<Vec<AcceptReport>, occm_forge_core::pipeline::Error> {
    let io = |p: &Path, e: &dyn std::fmt::Display| {
        occm_forge_core::pipeline::Error::Io(format!("{}: {e}", p.display()))
    };
    let json = reports_path(path);
    if json == path {
        return Err(io(
            path,
            &"the acceptance document is Markdown; its reports go beside it as .json",
        ));
    }
    match std::fs::read(&json) {
        Ok(bytes) => serde_json::from_slice(&bytes).map_err(|e| {
            io(
                &json,
                &format_args!("not the reports of an acceptance document ({e})"),
            )
        }),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(Vec::new()),
        Err(e) => Err(io(&json, &e)),
    }
}

/// Writes the acceptance document at `path` (Markdown, [`document`]) and, beside it
/// ([`reports_path`]), the reports behind it as a JSON array. The reports of `fresh` are stamped
/// `now` (Unix seconds) and replace those of the same minors already recorded there; the other
/// minors' reports are kept as recorded, so runs over a few minors at a time build up one
/// document. Both files are written atomically, under a `flock(2)` lock next to the document,
/// so two runs never lose each other's rows. Returns every report now in the document, by minor.
///
/// Errors: [`occm_forge_core::pipeline::Error::Io`] naming the file that cannot be read, parsed or written, or a
/// document path ending in `.json` (it would be its own reports file).
pub fn write_document(
    path: &Path,
    fresh: &[AcceptReport],
    now: i64,
) -> Result<Vec<AcceptReport>, occm_forge_core::pipeline::Error> {
    let io = |p: &Path, e: &dyn std::fmt::Display| {
        occm_forge_core::pipeline::Error::Io(format!("{}: {e}", p.display()))
    };
    let json = reports_path(path);
    let _lock = occm_forge_core::pipeline::record::take_run_lock(path, true)
        .map_err(|e| occm_forge_core::pipeline::Error::Io(e.to_string()))?;
    let mut all = recorded_reports(path)?;
    for row in all.iter_mut().flat_map(|r| r.rows.iter_mut()) {
        row.title = row.scenario.title();
    }
    all.retain(|old| fresh.iter().all(|f| f.minor != old.minor));
    all.extend(fresh.iter().cloned().map(|mut r| {
        r.recorded_at = Some(occm_forge_core::base::util::rfc3339(now));
        r
    }));
    for r in &mut all {
        r.make_paths_portable();
    }
    all.sort_by_key(|r| r.minor);
    let text = serde_json::to_string_pretty(&all).expect("reports serialise") + "\n";
    occm_forge_core::base::util::write_file_atomically(&json, text.as_bytes())
        .map_err(|e| io(&json, &e))?;
    let reports_file = json.file_name().unwrap_or_default().to_string_lossy();
    occm_forge_core::base::util::write_file_atomically(
        path,
        document(&all, now, &reports_file).as_bytes(),
    )
    .map_err(|e| io(path, &e))?;
    Ok(all)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn run(passed: bool, seconds: f64, evidence: &str) -> Option<RunResult> {
        Some(RunResult {
            passed,
            bug_shown: !passed,
            seconds,
            leader_seconds: Some(0.4),
            evidence: evidence.into(),
            unknown_requests: vec![],
            denied: None,
        })
    }

    fn report() -> AcceptReport {
        let mut r = AcceptReport::new(
            "1.34".parse().unwrap(),
            "v1.34.1",
            "v1.34.1-occmforge.1",
            "1.25.1",
        );
        r.rows = vec![
            ScenarioRow {
                scenario: crate::scenarios::s1::SCENARIO,
                title: crate::scenarios::s1::SCENARIO.title(),
                ours: run(
                    true,
                    5.2,
                    "`deleting node since it is no longer present in cloud provider: stale-1`",
                ),
                control: run(
                    false,
                    60.0,
                    "Node stale-1 still there after 60 s; log (12×): `error checking if node stale-1 exists: failed to find object`",
                ),
            },
            ScenarioRow {
                scenario: crate::scenarios::s3::SCENARIO,
                title: crate::scenarios::s3::SCENARIO.title(),
                ours: run(
                    true,
                    1.5,
                    "Node new-1: providerID openstack:///x, InternalIP 10.0.0.11, taint removed",
                ),
                control: run(true, 1.4, "a|b"),
            },
        ];
        r
    }

    #[test]
    fn a_run_over_some_minors_keeps_the_other_minors_rows() {
        let dir = tempfile::tempdir().unwrap();
        let doc = dir.path().join("acceptance.md");
        let mut r34 = report();
        r34.decide();
        let mut r35 = report();
        r35.minor = "1.35".parse().unwrap();
        r35.upstream_tag = "v1.35.0".into();
        r35.control =
            Some("/cache/accept/control/v1.35.0-x/openstack-cloud-controller-manager".into());
        r35.decide();
        write_document(&doc, &[r35], 1_000).unwrap();
        write_document(&doc, std::slice::from_ref(&r34), 2_000).unwrap();
        // 1.34 again, now failing: its row is replaced, 1.35's kept with its own date.
        r34.rows[0].ours.as_mut().unwrap().passed = false;
        r34.decide();
        let all = write_document(&doc, &[r34], 3_000).unwrap();
        let minors: Vec<String> = all.iter().map(|r| r.minor.to_string()).collect();
        assert_eq!(minors, ["1.34", "1.35"]);
        let text = std::fs::read_to_string(&doc).unwrap();
        assert!(text.contains("| 1.34 | v1.34.1 |"), "{text}");
        assert!(text.contains("| 1.35 | v1.35.0 |"), "{text}");
        assert!(
            text.contains(&occm_forge_core::base::util::rfc3339(1_000)),
            "{text}"
        );
        assert!(
            text.contains("The reports behind it are in acceptance.json"),
            "{text}"
        );
        assert_eq!(all[0].verdict, Verdict::Failed);
        assert_eq!(all[1].verdict, Verdict::Accepted);
        assert_eq!(all[1].rows[0].title, crate::scenarios::s1::SCENARIO.title());
        // No path of the machine that ran it is recorded.
        let json = std::fs::read_to_string(reports_path(&doc)).unwrap();
        assert!(!json.contains("\"/cache/"), "{json}");
        assert!(
            json.contains(
                "\"<cache>/accept/control/v1.35.0-x/openstack-cloud-controller-manager\""
            ),
            "{json}"
        );
        // A reports file that does not parse is named, and nothing is overwritten.
        std::fs::write(reports_path(&doc), b"[{").unwrap();
        let err = write_document(&doc, &all[..1], 4_000)
            .unwrap_err()
            .to_string();
        assert!(err.contains("acceptance.json"), "{err}");
        assert_eq!(std::fs::read_to_string(&doc).unwrap(), text);
        let err = write_document(&dir.path().join("a.json"), &all[..1], 4_000)
            .unwrap_err()
            .to_string();
        assert!(
            err.contains("a.json: the acceptance document is Markdown"),
            "{err}"
        );
    }

    #[test]
    fn the_verdict_follows_ours() {
        let mut r = report();
        r.decide();
        assert_eq!(r.verdict, Verdict::Accepted);
        assert!(r.ok());
        assert_eq!(r.reason.as_deref(), Some("only S1, S3 ran"));
        // A control that passes S1 does not show the fix: not accepted.
        r.control = Some("/cache/control".into());
        r.rows[0].control.as_mut().unwrap().passed = true;
        r.decide();
        assert_eq!(r.verdict, Verdict::Failed);
        assert_eq!(
            r.reason.as_deref(),
            Some(
                "the control (unpatched upstream) does not show the bug in S1, so this run does not show the fix; check the control binary (/cache/control) and whether the bug is fixed upstream (`occm-forge patches prove`)"
            )
        );
        // Where upstream has the fix (the series does not carry it), a control that passes S1
        // is expected.
        r.upstream_fixed = vec![crate::scenarios::s1::SCENARIO];
        r.decide();
        assert_eq!(r.verdict, Verdict::Accepted, "{:?}", r.reason);
        assert_eq!(
            r.rows[0].shows(),
            "ours passes; upstream passes too (the bug is absent in this release)"
        );
        r.upstream_fixed.clear();
        r.decide();
        assert_eq!(r.verdict, Verdict::Failed);
        // A control that fails S5 without the remediation loop does not show it either.
        r.rows[0].control.as_mut().unwrap().passed = false;
        r.rows.push(ScenarioRow {
            scenario: crate::scenarios::s5::SCENARIO,
            title: crate::scenarios::s5::SCENARIO.title(),
            ours: run(true, 28.0, "Machine workers-a Running"),
            control: Some(RunResult {
                bug_shown: false,
                ..run(
                    false,
                    150.0,
                    "no Machine got a nodeRef in 150 s; 1 remediation",
                )
                .unwrap()
            }),
        });
        r.decide();
        assert_eq!(r.verdict, Verdict::Failed);
        assert!(
            r.reason
                .as_deref()
                .unwrap()
                .starts_with("the control (unpatched upstream) does not show the bug in S5,"),
            "{:?}",
            r.reason
        );
        assert_eq!(
            r.rows[2].shows(),
            "ours passes; upstream fails without showing the bug (inconclusive)"
        );
        r.rows[2].control.as_mut().unwrap().bug_shown = true;
        r.decide();
        assert_eq!(r.verdict, Verdict::Accepted);
        assert_eq!(r.rows[2].shows(), "the fix: upstream fails, ours passes");
        // S7's pass is a loud failure, not a cure, and its row says so.
        r.rows[2].scenario = crate::scenarios::s7::SCENARIO;
        assert_eq!(
            r.rows[2].shows(),
            "the fix makes the failure loud, not cured: upstream stays silent, ours crash-loops with its message"
        );
        r.rows.pop();
        r.rows[1].ours.as_mut().unwrap().passed = false;
        r.decide();
        assert_eq!(r.verdict, Verdict::Failed);
        assert_eq!(r.reason.as_deref(), Some("ours fails S3"));
        let mut empty = AcceptReport::new("1.31".parse().unwrap(), "v1.31.4", "t", "1.22.2");
        empty.decide();
        assert_eq!(empty.verdict, Verdict::NotVerified);
    }

    #[test]
    fn rows_show_the_fix_and_the_table_escapes_pipes() {
        let mut r = report();
        r.decide();
        assert_eq!(r.rows[0].shows(), "the fix: upstream fails, ours passes");
        assert_eq!(r.rows[1].shows(), "both pass");
        let md = render_markdown(&[r]);
        assert!(md.contains("| 1.34 | S1 NotReady Nodes without a server (empty provider ID; a deleted server's provider ID) → both deleted within 60 s | pass 5.2 s: `deleting node since it is no longer present in cloud provider: stale-1` | FAIL 60.0 s: Node stale-1 still there after 60 s; log (12×): `error checking if node stale-1 exists: failed to find object` | the fix: upstream fails, ours passes |"), "{md}");
        assert!(md.contains("pass 1.4 s: a\\|b"), "{md}");
        assert!(
            md.contains(
                "| 1.34 | v1.34.1 | `v1.34.1-occmforge.1` | — | 1.25.1 | — | none | accepted: only S1, S3 ran |"
            ),
            "{md}"
        );
    }

    #[test]
    fn a_scenario_without_a_control_says_why_its_control_cell_is_empty() {
        let mut r = report();
        r.rows.push(ScenarioRow {
            scenario: crate::scenarios::s6::SCENARIO,
            title: crate::scenarios::s6::SCENARIO.title(),
            ours: run(true, 1.0, "Reconcile: applied in 2.6 s"),
            control: None,
        });
        r.rows[0].control = None;
        let md = render_markdown(&[r]);
        let line = |s: &str| {
            md.lines()
                .find(|l| l.starts_with(&format!("| 1.34 | {s} ")))
                .unwrap()
                .to_string()
        };
        assert!(
            line("S6").contains("| pass 1.0 s: Reconcile: applied in 2.6 s | — (no control: it runs no OCCM binary) |"),
            "{md}"
        );
        // A control that should have run and did not is a bare dash, not excused.
        assert!(line("S1").contains(" | — | "), "{md}");
        assert!(!line("S1").contains("no control"), "{md}");
    }

    #[test]
    fn a_refusal_by_the_charts_rbac_is_named_and_not_blamed_on_the_patch() {
        let denied = "unable to delete node \"gone-1\": nodes \"gone-1\" is forbidden: User \"system:serviceaccount:kube-system:openstack-cloud-controller-manager\" cannot delete resource \"nodes\" in API group \"\" at the cluster scope";
        assert_eq!(missing_permission(denied), "`delete` on `nodes`");
        let mut r = report();
        r.rows.truncate(1);
        let row = &mut r.rows[0];
        for side in [row.ours.as_mut(), row.control.as_mut()] {
            let side = side.unwrap();
            side.passed = false;
            side.denied = Some(denied.into());
        }
        r.decide();
        assert_eq!(r.verdict, Verdict::Failed);
        assert_eq!(
            r.rows[0].shows(),
            "FAILED: the OCCM's RBAC (the chart's ClusterRole) lacks `delete` on `nodes`; not the patch's failure: the control fails the same way"
        );
        let reason = r.reason.clone().unwrap();
        assert!(reason.starts_with("ours fails S1 because the OCCM's RBAC (the chart's ClusterRole) lacks `delete` on `nodes`"), "{reason}");
        assert!(
            reason.contains("the control (unpatched upstream) is refused the same way"),
            "{reason}"
        );
        // a failure of ours that is not a refusal is the patch's failure, as before.
        r.rows[0].ours.as_mut().unwrap().denied = None;
        r.decide();
        assert_eq!(r.reason.as_deref(), Some("ours fails S1"));
        assert_eq!(r.rows[0].shows(), "FAILED: ours fails");
    }

    #[test]
    fn a_minor_that_was_not_verified_names_why() {
        let r = AcceptReport::new("1.31".parse().unwrap(), "v1.31.4", "v1.31.4-occmforge.1", "1.22.2")
            .not_verified("the Go module proxy refuses k8s.io/kubernetes@v1.31.11 (403 Forbidden), needed to build kube-apiserver");
        let md = render_markdown(std::slice::from_ref(&r));
        assert!(md.contains("| 1.31 | — | — | — | NOT VERIFIED: the Go module proxy refuses k8s.io/kubernetes@v1.31.11 (403 Forbidden), needed to build kube-apiserver |"), "{md}");
        let json = serde_json::to_value(&r).unwrap();
        assert_eq!(json["verdict"], "not-verified");
        assert!(!r.ok());
        assert_eq!(
            require_accepted(std::slice::from_ref(&r))
                .unwrap_err()
                .to_string(),
            "not accepted: 1.31 NOT VERIFIED: the Go module proxy refuses k8s.io/kubernetes@v1.31.11 (403 Forbidden), needed to build kube-apiserver"
        );
        let mut ok = report();
        ok.decide();
        assert!(require_accepted(&[ok]).is_ok());
    }
}
