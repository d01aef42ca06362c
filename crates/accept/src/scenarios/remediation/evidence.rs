//! What Cluster API reports of a run and what it means: the Machines, remediations and OCCM
//! exits observed, and the verdicts ([`verdict`] for S5 and S8, [`crash_loop_verdict`] for S7).

use super::*;

/// One worker Machine as Cluster API reports it.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct MachineView {
    /// `metadata.name`.
    pub name: String,
    /// `status.phase`.
    pub phase: String,
    /// `status.nodeRef.name`, empty when unset.
    pub node_ref: String,
    /// Status of the v1beta2 condition `NodeHealthy` (`True`, `False`, `Unknown`, empty).
    pub node_healthy: String,
    /// Reason of the condition `HealthCheckSucceeded` when it is `False` (e.g.
    /// `NodeStartupTimeout`): the MachineHealthCheck marked the Machine.
    pub unhealthy_reason: String,
    /// Whether `metadata.deletionTimestamp` is set.
    pub deleting: bool,
}

impl MachineView {
    /// Reads it from a `cluster.x-k8s.io/v1beta2` Machine.
    pub fn of(m: &Value) -> MachineView {
        let condition = |t: &str| {
            m["status"]["conditions"]
                .as_array()
                .and_then(|cs| cs.iter().find(|c| c["type"] == t))
                .cloned()
                .unwrap_or(Value::Null)
        };
        let hc = condition("HealthCheckSucceeded");
        MachineView {
            name: m["metadata"]["name"].as_str().unwrap_or_default().into(),
            phase: m["status"]["phase"].as_str().unwrap_or_default().into(),
            node_ref: m["status"]["nodeRef"]["name"]
                .as_str()
                .unwrap_or_default()
                .into(),
            node_healthy: condition("NodeHealthy")["status"]
                .as_str()
                .unwrap_or_default()
                .into(),
            unhealthy_reason: if hc["status"] == "False" {
                hc["reason"].as_str().unwrap_or("unknown").into()
            } else {
                String::new()
            },
            deleting: !m["metadata"]["deletionTimestamp"].is_null(),
        }
    }
}

/// A Machine the MachineHealthCheck had remediated: deleted by its MachineSet.
#[derive(Debug, Clone, PartialEq)]
pub struct Remediation {
    /// Seconds from the side's start.
    pub at: f64,
    /// The Machine.
    pub machine: String,
    /// The reason the MachineHealthCheck gave, when it was seen (`NodeStartupTimeout`).
    pub reason: String,
}

/// An OCCM exit the supervisor saw.
#[derive(Debug, Clone, PartialEq)]
pub struct Exit {
    /// Seconds from the side's start.
    pub at: f64,
    /// `exit status 255`, `signal`.
    pub status: String,
    /// The line that explains it: patch 0004's message when logged, else the last error.
    pub line: String,
}

/// What a side showed, as plain data.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Observed {
    /// The first Machine that was Running with a nodeRef, NodeHealthy=True and an initialised
    /// Node: its name, its Node's state and the seconds from when it was first seen.
    pub healthy: Option<(String, String, f64)>,
    /// Whether any Machine ever got a nodeRef.
    pub any_node_ref: bool,
    /// Remediations, in order.
    pub remediations: Vec<Remediation>,
    /// OCCM exits, in order.
    pub exits: Vec<Exit>,
    /// Seconds watched.
    pub watched: f64,
    /// The control's `Skipping "cloud-node-controller"` line, when logged.
    pub skipped: Option<String>,
    /// Cluster API's first `marking for remediation` line, when logged.
    pub capi_line: Option<String>,
    /// The workers that were healthy before the fault ([`Fault::restart_after_warm_up`]): not
    /// candidates for `healthy` or `any_node_ref`; a remediation of one is still counted.
    pub old: Vec<String>,
}

/// The verdict: `passed` when a Machine became healthy within `startup_timeout` of being seen
/// with no remediation; the bug is shown when no Machine got a nodeRef and at least [`LOOP`]
/// were remediated.
pub fn verdict(o: &Observed, startup_timeout: Duration, loop_len: usize) -> RunResult {
    let exits = if o.exits.is_empty() {
        "OCCM did not exit".to_string()
    } else {
        let first = &o.exits[0];
        format!(
            "OCCM exited {}× (first at {:.1} s, {}: `{}`)",
            o.exits.len(),
            first.at,
            first.status,
            shorten(
                first
                    .line
                    .split(", most likely")
                    .next()
                    .unwrap_or(&first.line),
                200
            )
        )
    };
    let remediations = match o.remediations.len() {
        0 => "no remediation".to_string(),
        n => format!(
            "{n} remediation{} ({})",
            if n == 1 { "" } else { "s" },
            o.remediations
                .iter()
                .map(|r| {
                    let why = if r.reason.is_empty() {
                        String::new()
                    } else {
                        format!(" {}", r.reason)
                    };
                    format!("{} at {:.1} s{why}", r.machine, r.at)
                })
                .collect::<Vec<_>>()
                .join(", ")
        ),
    };
    if let Some((machine, node, secs)) = &o.healthy
        && *secs <= startup_timeout.as_secs_f64()
        && o.remediations.is_empty()
    {
        return RunResult {
            bug_shown: false,
            ..RunResult::pass(
                *secs,
                format!(
                    "Machine {machine} Running, nodeRef {machine}, NodeHealthy True after {secs:.1} s (nodeStartupTimeout {} s), Node {node}; {exits}; {remediations}{}",
                    startup_timeout.as_secs(),
                    old_workers(o)
                ),
            )
        };
    }
    let bug = !o.any_node_ref && o.remediations.len() >= loop_len;
    let mut evidence = match &o.healthy {
        Some((machine, _, secs)) => format!(
            "Machine {machine} healthy only after {secs:.1} s (nodeStartupTimeout {} s)",
            startup_timeout.as_secs()
        ),
        None if o.any_node_ref => format!(
            "a Machine got a nodeRef but none was healthy in {:.0} s",
            o.watched
        ),
        None => format!("no Machine got a nodeRef in {:.0} s", o.watched),
    };
    evidence.push_str(&format!("; {remediations}"));
    if let Some(l) = &o.capi_line {
        evidence.push_str(&format!("; Cluster API: `{l}"));
    }
    if let Some(l) = &o.skipped {
        evidence.push_str(&format!("; OCCM: `{l}`"));
    }
    evidence.push_str(&format!("; {exits}{}", old_workers(o)));
    RunResult {
        bug_shown: bug,
        ..RunResult::fail(o.watched, evidence)
    }
}

/// The verdict under the permanent fault: `passed` when OCCM crash-loops visibly (at least
/// [`CRASH_LOOP`] exits, each with patch 0004's message: what kubelet shows as
/// `CrashLoopBackOff`); the bug is shown when OCCM stays up and silent (no exit, cloud-node
/// skipped) while no Machine gets a nodeRef.
pub fn crash_loop_verdict(o: &Observed) -> RunResult {
    let loud =
        o.exits.len() >= CRASH_LOOP && o.exits.iter().all(|e| e.line.contains(PATCH_0004_MESSAGE));
    let node_ref = if o.any_node_ref {
        "a Machine got a nodeRef"
    } else {
        "no Machine got a nodeRef"
    };
    let mut remediations = match o.remediations.len() {
        0 => "no remediation".to_string(),
        n => format!("{n} remediation{}", if n == 1 { "" } else { "s" }),
    };
    // The fault never ends: past the startup timeout the Machine is remediated on either side.
    let timeout = NODE_STARTUP_TIMEOUT;
    if o.watched >= timeout.as_secs_f64() {
        remediations.push_str(&format!(
            " (the fault outlasted nodeStartupTimeout, {} s: the failure is loud, not cured)",
            timeout.as_secs()
        ));
    }
    if loud {
        let last = o.exits.last().map(|e| e.at).unwrap_or_default();
        let line = shorten(
            o.exits[0].line.split(", most likely").next().unwrap_or(""),
            200,
        );
        return RunResult {
            bug_shown: false,
            ..RunResult::pass(
                last,
                format!(
                    "OCCM crash-looped: {} exits in {last:.1} s, each `{line}` (kubelet shows CrashLoopBackOff); {node_ref}; {remediations}",
                    o.exits.len()
                ),
            )
        };
    }
    let silent = o.exits.is_empty() && o.skipped.is_some() && !o.any_node_ref;
    let mut evidence = if o.exits.is_empty() {
        format!(
            "OCCM kept running {:.0} s without a word of the fault",
            o.watched
        )
    } else {
        format!(
            "OCCM exited only {}× in {:.0} s, not a visible crash loop",
            o.exits.len(),
            o.watched
        )
    };
    if let Some(l) = &o.skipped {
        evidence.push_str(&format!(" (log: `{l}`)"));
    }
    evidence.push_str(&format!("; {node_ref}; {remediations}"));
    RunResult {
        bug_shown: silent,
        ..RunResult::fail(o.watched, evidence)
    }
}

/// `; old workers a, b healthy before the fault` when there were any (and which were remediated).
pub(super) fn old_workers(o: &Observed) -> String {
    if o.old.is_empty() {
        return String::new();
    }
    let lost: Vec<&str> = o
        .old
        .iter()
        .filter(|w| o.remediations.iter().any(|r| &r.machine == *w))
        .map(String::as_str)
        .collect();
    format!(
        "; old workers {} healthy before the fault{}",
        o.old.join(", "),
        if lost.is_empty() {
            ", none remediated".to_string()
        } else {
            format!(", {} remediated", lost.join(", "))
        }
    )
}

/// The value of `key="…"` in a structured klog line (`Machine="default/workers-x"`).
pub(super) fn klog_value<'l>(line: &'l str, key: &str) -> Option<&'l str> {
    let needle = format!(" {key}=\"");
    let at = line.find(&needle)? + needle.len();
    line[at..].split('"').next()
}
