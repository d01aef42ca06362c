//! S8: magnum-cluster-api's own MachineHealthCheck (remediation while at most 80 % are
//! unhealthy) with two healthy workers: OCCM restarts, its first token without compute, and a
//! third worker joins. Ours initialises it without remediation; the control never does and the
//! new worker is remediated.

use super::*;
use super::remediation::{self, Fault};

/// S8's `nodeStartupTimeoutSeconds`: longer than S5's, as the restarted OCCM first waits out
/// the stopped leader's Lease (15 s), twice.
pub const NODE_STARTUP_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(90);

/// S8's fault: magnum-cluster-api's own MachineHealthCheck (remediation while at most 80 % are
/// unhealthy); two workers become healthy first, then OCCM restarts, its first token without
/// compute, and the pool scales to three. Settled once the new Machine is healthy, or one is
/// remediated without a nodeRef, or after [`remediation::WINDOW`].
pub const FAULT: Fault = Fault {
    tokens_without_compute: 0,
    workers: 2,
    max_unhealthy: "80%",
    node_startup_timeout: NODE_STARTUP_TIMEOUT,
    restart_after_warm_up: true,
    settled: |o, _, watched| {
        o.healthy.is_some()
            || (!o.any_node_ref && !o.remediations.is_empty())
            || watched >= remediation::WINDOW
    },
    verdict: |o| remediation::verdict(o, NODE_STARTUP_TIMEOUT, 1),
};

/// S8 as data.
pub const SCENARIO: Scenario = Scenario(&Spec {
    name: "S8",
    title: "Cluster API, magnum-cluster-api's MachineHealthCheck (80 %), two healthy workers: OCCM restarts without compute, a third joins → initialised, no remediation",
    pass_means: "under magnum-cluster-api's own MachineHealthCheck a restarted OCCM without compute still initialises the joining worker, with no remediation",
    fix_shows: FIX_SHOWS,
    sides: BOTH,
    side_by_side: true,
    needs_cluster_api: true,
    control_expected_to_pass: false,
    stage_names: ["S8 ours", "S8 control"],
    compute_in_catalog: true,
    servers: no_servers,
    run: |c, reps| Box::pin(run(c, reps)),
});

async fn run(c: &Ctx<'_>, _: &mut Vec<Replica>) -> Result<RunResult, AcceptError> {
    remediation::run(c.capi()?, c.binary, c.dir, FAULT).await
}
