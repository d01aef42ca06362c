//! S8: magnum-cluster-api's own MachineHealthCheck (remediation while at most 80 % are
//! unhealthy) with two healthy workers: OCCM restarts, its first token without compute, and a
//! third worker joins. Ours initialises it without remediation; the control never does and the
//! new worker is remediated.

use super::*;
use super::remediation::{self, Fault};

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
    remediation::run(c.capi()?, c.binary, c.dir, Fault::MagnumHealthCheck).await
}
