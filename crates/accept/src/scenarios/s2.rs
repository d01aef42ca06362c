//! S2: Criterion 2: with no compute endpoint in the catalog, OCCM exits non-zero within 60 s
//! with the patch's message.

use super::*;

/// S2 as data.
pub const SCENARIO: Scenario = Scenario(&Spec {
    name: "S2",
    title: "catalog without compute → OCCM exits non-zero within 60 s with the patch's message",
    pass_means: "OCCM exits non-zero with patch 0004's message when cloud-node cannot start, instead of running on without it",
    fix_shows: FIX_SHOWS,
    sides: BOTH,
    side_by_side: false,
    needs_cluster_api: false,
    control_expected_to_pass: false,
    stage_names: ["S2 ours", "S2 control"],
    compute_in_catalog: false,
    servers: no_servers,
    run: |c, reps| Box::pin(run(c, reps)),
});

/// S2 is conclusive on the bug when OCCM is still up this long after it logged that it skipped a
/// cloud-node controller: the patched binary exits at that very moment.
pub const S2_SILENCE: Duration = Duration::from_secs(5);

async fn run(c: &Ctx<'_>, reps: &mut Vec<Replica>) -> Result<RunResult, AcceptError> {
    reps.push(c.start("occm")?);
    let t0 = Instant::now();
    let mut skipped_at: Option<Instant> = None;
    loop {
        if let Some(status) = reps[0].proc.exited() {
            let secs = t0.elapsed().as_secs_f64();
            let log = reps[0].log();
            return Ok(match line_with(&log, PATCH_0004_MESSAGE) {
                Some(l) if !status.success() => RunResult::pass(
                    secs,
                    format!(
                        "exited with status {} after {secs:.1} s: `{}`",
                        status.code().map_or("signal".into(), |c| c.to_string()),
                        // The patch's message goes on to explain the likely cause.
                        shorten(l.split(", most likely").next().unwrap_or(l), 240)
                    ),
                ),
                _ => RunResult::fail(
                    secs,
                    format!(
                        "exited ({status}) without the patch's message: `{}`",
                        last_error(&log)
                    ),
                ),
            });
        }
        if skipped_at.is_none() && reps[0].log().contains(SKIPPING_LINE) {
            skipped_at = Some(Instant::now());
        }
        let silent = skipped_at.is_some_and(|t| t.elapsed() >= S2_SILENCE);
        if silent || t0.elapsed() >= DEADLINE {
            break;
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    let secs = t0.elapsed().as_secs_f64().min(DEADLINE.as_secs_f64());
    let healthz = healthz(reps[0].secure_port).await;
    let log = reps[0].log();
    let skipped: Vec<String> = log
        .lines()
        .filter(|l| l.contains(SKIPPING_LINE))
        .map(|l| format!("`{}`", klog_message(l)))
        .collect();
    let skipped = if skipped.is_empty() {
        String::new()
    } else {
        format!("; log: {}", skipped.join(", "))
    };
    Ok(RunResult::fail(
        secs,
        match skipped_at {
            Some(_) => format!(
                "still running {} s after it skipped the controller, /healthz: {healthz}{skipped}",
                S2_SILENCE.as_secs()
            ),
            None => format!(
                "still running after {} s, /healthz: {healthz}{skipped}",
                DEADLINE.as_secs()
            ),
        },
    ))
}
