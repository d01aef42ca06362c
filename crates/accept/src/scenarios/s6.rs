//! S6: The ClusterResourceSet path: `render --format crs-secret` output written back makes the
//! workload OCCM DaemonSet ours through Cluster API within 30 s, `--image` reverts it, a
//! driver upgrade puts upstream's image back, and a legacy ApplyOnce Secret is refused and
//! never reaches the workload (see [`resource_set`]). Runs once: it is about the image
//! reference, not a binary.

use super::*;
use super::resource_set;

/// S6 as data.
pub const SCENARIO: Scenario = Scenario(&Spec {
    name: "S6",
    title: "ClusterResourceSet: crs-secret → workload DaemonSet ours, revert and driver upgrade back, legacy ApplyOnce refused",
    pass_means: "the image reference reaches the workload cluster through the ClusterResourceSet, and a legacy ApplyOnce Secret is refused",
    fix_shows: FIX_SHOWS,
    sides: &[Side::Ours],
    side_by_side: false,
    needs_cluster_api: true,
    control_expected_to_pass: true,
    stage_names: ["S6 ours", "S6 control"],
    compute_in_catalog: true,
    servers: no_servers,
    run: |c, reps| Box::pin(run(c, reps)),
});

async fn run(c: &Ctx<'_>, _: &mut Vec<Replica>) -> Result<RunResult, AcceptError> {
    let capi = c.capi()?;
    resource_set::run(capi, &capi.images, c.dir).await
}
