//! S5: Cluster API's remediation loop: with the first Keystone token lacking compute, a worker
//! Machine of a MachineSet under a MachineHealthCheck reaches Running with a nodeRef and
//! NodeHealthy before `nodeStartupTimeout`, with no remediation (see [`remediation`]).

use super::*;
use super::remediation::{self, Fault};

/// S5's fault: the first Keystone token has no compute endpoint (the report's transient fault),
/// one worker, the MachineHealthCheck remediating at 100 %. Settled once a Machine is healthy,
/// or the loop is shown ([`remediation::LOOP`] remediations without a nodeRef), or after
/// [`remediation::WINDOW`]; the verdict is [`remediation::verdict`]'s.
pub const FAULT: Fault = Fault {
    tokens_without_compute: 1,
    workers: 1,
    max_unhealthy: "100%",
    node_startup_timeout: remediation::NODE_STARTUP_TIMEOUT,
    restart_after_warm_up: false,
    settled: |o, _, watched| {
        o.healthy.is_some()
            || (!o.any_node_ref && o.remediations.len() >= remediation::LOOP)
            || watched >= remediation::WINDOW
    },
    verdict: |o| remediation::verdict(o, remediation::NODE_STARTUP_TIMEOUT, remediation::LOOP),
};

/// S5 as data.
pub const SCENARIO: Scenario = Scenario(&Spec {
    name: "S5",
    title: "Cluster API: first token without compute → worker Machine gets its nodeRef, no remediation",
    pass_means: "the bug report's symptom is gone: the worker Machine gets its nodeRef before nodeStartupTimeout, with no remediation",
    fix_shows: FIX_SHOWS,
    sides: BOTH,
    side_by_side: true,
    needs_cluster_api: true,
    control_expected_to_pass: false,
    stage_names: ["S5 ours", "S5 control"],
    compute_in_catalog: true,
    servers: no_servers,
    run: |c, reps| Box::pin(run(c, reps)),
});

async fn run(c: &Ctx<'_>, _: &mut Vec<Replica>) -> Result<RunResult, AcceptError> {
    remediation::run(c.capi()?, c.binary, c.dir, FAULT).await
}
