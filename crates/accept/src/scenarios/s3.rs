//! S3: Criterion 3: a new Node with the `uninitialized` taint and a matching server gets
//! provider ID `openstack:///<id>` and its InternalIP, and loses the taint, within 60 s.

use super::*;

/// S3 as data.
pub const SCENARIO: Scenario = Scenario(&Spec {
    name: "S3",
    title: "new tainted Node with a server → provider ID, InternalIP, taint removed within 60 s",
    pass_means: "OCCM's normal job still works: a new Node gets its provider ID and InternalIP and loses the uninitialized taint",
    fix_shows: FIX_SHOWS,
    sides: BOTH,
    side_by_side: false,
    needs_cluster_api: false,
    control_expected_to_pass: true,
    stage_names: ["S3 ours", "S3 control"],
    compute_in_catalog: true,
    servers: || vec![new_server(1)],
    run: |c, reps| Box::pin(run(c, reps)),
});

async fn run(c: &Ctx<'_>, reps: &mut Vec<Replica>) -> Result<RunResult, AcceptError> {
    let server = &c.servers[0];
    reps.push(c.start("occm")?);
    let t = Instant::now();
    if let Err(e) = wait_leader(reps, &[]).await {
        return Ok(RunResult::fail(0.0, e));
    }
    let leader_seconds = Some(t.elapsed().as_secs_f64());
    let mut r = match initialise(c, reps, &[], server).await? {
        Ok((secs, state)) => RunResult::pass(secs, format!("Node {}: {state}", server.name)),
        Err(e) => RunResult::fail(DEADLINE.as_secs_f64(), e),
    };
    r.leader_seconds = leader_seconds;
    Ok(r)
}
