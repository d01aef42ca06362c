//! S7: The permanent fault: no Keystone token ever has compute. Ours crash-loops visibly, each
//! exit with patch 0004's message (the fix makes the failure loud, it cannot cure it); the
//! control keeps running, silent (see [`remediation::crash_loop_verdict`]).

use super::*;
use super::remediation::{self, Fault};

/// S7's fault: no token ever has a compute endpoint. The fix cannot cure it, only make it loud:
/// settled once OCCM crash-loops ([`remediation::CRASH_LOOP`] exits) or after
/// [`remediation::PERMANENT_WINDOW`]; the verdict is [`remediation::crash_loop_verdict`]'s.
pub const FAULT: Fault = Fault {
    tokens_without_compute: u32::MAX,
    workers: 1,
    max_unhealthy: "100%",
    node_startup_timeout: remediation::NODE_STARTUP_TIMEOUT,
    restart_after_warm_up: false,
    settled: |_, exits, watched| {
        exits >= remediation::CRASH_LOOP || watched >= remediation::PERMANENT_WINDOW
    },
    verdict: remediation::crash_loop_verdict,
};

/// S7 as data.
pub const SCENARIO: Scenario = Scenario(&Spec {
    name: "S7",
    title: "Cluster API: no token ever has compute → OCCM crash-loops visibly with the patch's message",
    pass_means: "the failure is loud, not cured: with no token ever having compute, ours crash-loops with patch 0004's message where upstream runs on silently; the fault outlasts nodeStartupTimeout, so the Machine is remediated on both sides",
    fix_shows: "the fix makes the failure loud, not cured: upstream stays silent, ours crash-loops with its message",
    sides: BOTH,
    side_by_side: true,
    needs_cluster_api: true,
    control_expected_to_pass: false,
    stage_names: ["S7 ours", "S7 control"],
    compute_in_catalog: true,
    servers: no_servers,
    run: |c, reps| Box::pin(run(c, reps)),
});

async fn run(c: &Ctx<'_>, _: &mut Vec<Replica>) -> Result<RunResult, AcceptError> {
    remediation::run(c.capi()?, c.binary, c.dir, FAULT).await
}
