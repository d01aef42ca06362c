//! S4: Three replicas with leader election: the leader is killed, another takes the Lease and
//! S3 works again, within 60 s.

use super::*;

/// S4 as data.
pub const SCENARIO: Scenario = Scenario(&Spec {
    name: "S4",
    title: "3 replicas (4 s Lease), leader killed → another takes the Lease, S3 works again",
    pass_means: "leader election still works: after the leader is killed another replica takes the Lease and initialises Nodes",
    fix_shows: FIX_SHOWS,
    sides: BOTH,
    side_by_side: false,
    needs_cluster_api: false,
    control_expected_to_pass: true,
    stage_names: ["S4 ours", "S4 control"],
    compute_in_catalog: true,
    servers: || vec![new_server(1), new_server(2)],
    run: |c, reps| Box::pin(run(c, reps)),
});

/// S4's leader-election timing (component-base's `--leader-elect-*` flags; the chart keeps their
/// defaults, 15 s / 10 s / 2 s): a killed leader's Lease expires after 4 s instead of 15 s, so the
/// failover is measured in seconds while still being client-go's real expiry and takeover
/// (LeaseDuration > RenewDeadline > 1.2 × RetryPeriod, tools/leaderelection/leaderelection.go).
pub const S4_LEASE_ARGS: [&str; 3] = [
    "--leader-elect-lease-duration=4s",
    "--leader-elect-renew-deadline=3s",
    "--leader-elect-retry-period=1s",
];

async fn run(c: &Ctx<'_>, reps: &mut Vec<Replica>) -> Result<RunResult, AcceptError> {
    let servers = &c.servers[..];
    for i in 1..=3 {
        reps.push(c.start_with(&format!("replica-{i}"), &S4_LEASE_ARGS)?);
    }
    let t = Instant::now();
    let first = match wait_leader(reps, &[]).await {
        Ok(i) => i,
        Err(e) => return Ok(RunResult::fail(0.0, e)),
    };
    let leader_seconds = Some(t.elapsed().as_secs_f64());
    if let Err(e) = initialise(c, reps, &[], &servers[0]).await? {
        return Ok(RunResult::fail(
            DEADLINE.as_secs_f64(),
            format!("before the failover: {e}"),
        ));
    }
    let holder_before = c.bench.kube.lease_holder().await?;
    let killed = reps[first].name().to_string();
    let t_kill = Instant::now();
    reps[first].proc.kill().await;
    let next = match wait_leader(reps, &[first]).await {
        Ok(i) => i,
        Err(e) => {
            return Ok(RunResult::fail(
                t_kill.elapsed().as_secs_f64(),
                format!("after {killed} was killed: {e}"),
            ));
        }
    };
    let failover = t_kill.elapsed().as_secs_f64();
    let holder_after = c.bench.kube.lease_holder().await?;
    if holder_after.is_none() || holder_after == holder_before {
        return Ok(RunResult::fail(
            failover,
            format!(
                "{} logged `{LEADER_LINE}` but the Lease holder is {:?} (before: {:?})",
                reps[next].name(),
                holder_after,
                holder_before
            ),
        ));
    }
    let mut r = match initialise(c, reps, &[first], &servers[1]).await? {
        Ok((secs, state)) => RunResult::pass(
            t_kill.elapsed().as_secs_f64(),
            format!(
                "{killed} (leader) killed; {} took the Lease after {failover:.1} s; Node {} {secs:.1} s later: {state}",
                reps[next].name(),
                servers[1].name
            ),
        ),
        Err(e) => RunResult::fail(
            t_kill.elapsed().as_secs_f64(),
            format!(
                "{killed} (leader) killed; {} took the Lease after {failover:.1} s; then {e}",
                reps[next].name()
            ),
        ),
    };
    r.leader_seconds = leader_seconds;
    Ok(r)
}
