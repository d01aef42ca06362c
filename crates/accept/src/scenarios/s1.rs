//! S1: Criterion 1: a NotReady Node with an empty provider ID and no Nova server is deleted
//! within 60 s.

use super::*;

/// S1 as data.
pub const SCENARIO: Scenario = Scenario(&Spec {
    name: "S1",
    title: "NotReady Nodes without a server (empty provider ID; a deleted server's provider ID) → both deleted within 60 s",
    pass_means: "the node lifecycle controller deletes a NotReady Node with an empty provider ID and no Nova server (upstream #3114), and one whose server is gone, within 60 s",
    fix_shows: FIX_SHOWS,
    sides: BOTH,
    side_by_side: false,
    needs_cluster_api: false,
    control_expected_to_pass: false,
    stage_names: ["S1 ours", "S1 control"],
    compute_in_catalog: true,
    servers: no_servers,
    run: |c, reps| Box::pin(run(c, reps)),
});

/// S1 is conclusive on the bug when the node lifecycle controller has logged this many times that
/// it cannot tell whether the Node exists (once per `--node-monitor-period`, 5 s): the error
/// repeats instead of resolving, and the Node is never deleted.
pub const S1_BUG_REPEATS: usize = 2;

/// S1's Node with an empty provider ID and no server of its name (the bug of upstream #3114).
const S1_STALE: &str = "stale-1";
/// S1's Node whose provider ID names a server the cloud no longer has (Nova answers 404 by id):
/// upstream deletes it too, so under a ClusterRole without `delete` on nodes the control fails on
/// it exactly as ours does.
const S1_GONE: &str = "gone-1";
/// The provider ID of [`S1_GONE`]: no server of the simulated cloud has this id.
const S1_GONE_PROVIDER_ID: &str = "openstack:///0badc0de-0000-4000-8000-00000000dead";

/// What S1 saw of one Node.
#[derive(Debug, Clone, PartialEq)]
enum NodeFate {
    /// Deleted (404), with the deleting line when the log has one.
    Deleted(String),
    /// The apiserver refused the deletion (`… cannot delete resource "nodes" …`): the RBAC.
    Denied(String),
    /// The lifecycle controller cannot tell whether it exists (the bug), with the repeat count.
    Undecided(usize, String),
    /// Still there, nothing conclusive logged yet.
    Pending,
}

/// The line in `log` where deleting `node` was refused by the apiserver's authorizer (as klog
/// text or a structured `err="nodes \"x\" is forbidden: …"`), as a klog message.
pub(crate) fn denied_line<'t>(log: &'t str, node: &str) -> Option<&'t str> {
    log.lines()
        .find(|l| l.contains("cannot delete resource") && l.contains("nodes") && l.contains(node))
        .map(klog_message)
}

/// What `log` and the apiserver say of `node` now.
async fn node_fate(c: &Ctx<'_>, log: &str, node: &str) -> Result<NodeFate, AcceptError> {
    if c.bench.kube.node(node).await?.is_none() {
        let line = line_with(log, &format!("{DELETING_LINE}: {node}"))
            .map(|l| format!("`{l}`"))
            .unwrap_or_else(|| format!("Node {node} deleted (404)"));
        return Ok(NodeFate::Deleted(line));
    }
    if let Some(l) = denied_line(log, node) {
        return Ok(NodeFate::Denied(l.to_string()));
    }
    let needle = format!("{CHECKING_LINE} {node} exists");
    let repeats = count(log, &needle);
    Ok(match line_with(log, &needle) {
        Some(l) if repeats >= S1_BUG_REPEATS => NodeFate::Undecided(repeats, l.to_string()),
        _ => NodeFate::Pending,
    })
}

/// S1's verdict from the two Nodes' fates after `secs` seconds (`log` for the last error).
fn s1_result(stale: &NodeFate, gone: &NodeFate, secs: f64, log: &str) -> RunResult {
    if let (NodeFate::Deleted(line), NodeFate::Deleted(_)) = (stale, gone) {
        return RunResult::pass(
            secs,
            format!("{line}; {S1_GONE} (provider ID of a deleted server) deleted too"),
        );
    }
    let describe = |node: &str, fate: &NodeFate| match fate {
        NodeFate::Deleted(_) => format!("Node {node} deleted"),
        NodeFate::Denied(l) => format!("Node {node} not deleted, the apiserver refused: `{l}`"),
        NodeFate::Undecided(n, l) => {
            format!("Node {node} still there after {secs:.0} s; log ({n}×): `{l}`")
        }
        NodeFate::Pending => format!(
            "Node {node} still there after {} s; last error: `{}`",
            DEADLINE.as_secs(),
            last_error(log)
        ),
    };
    let mut r = RunResult::fail(
        secs.min(DEADLINE.as_secs_f64()),
        format!("{}; {}", describe(S1_STALE, stale), describe(S1_GONE, gone)),
    );
    r.bug_shown = matches!(stale, NodeFate::Undecided(..));
    r.denied = [stale, gone].into_iter().find_map(|f| match f {
        NodeFate::Denied(l) => Some(l.clone()),
        _ => None,
    });
    r
}

/// S1: two NotReady Nodes whose servers are gone, one without a provider ID (the bug) and one with
/// the provider ID of a deleted server; both must be deleted. Conclusive as soon as each Node is
/// deleted, refused by the RBAC, or undecided twice.
async fn run(c: &Ctx<'_>, reps: &mut Vec<Replica>) -> Result<RunResult, AcceptError> {
    reps.push(c.start("occm")?);
    let t = Instant::now();
    if let Err(e) = wait_leader(reps, &[]).await {
        return Ok(RunResult::fail(0.0, e));
    }
    let leader_seconds = Some(t.elapsed().as_secs_f64());
    c.bench.kube.create_node(S1_STALE, false).await?;
    c.bench
        .kube
        .create_node_with_provider_id(S1_GONE, S1_GONE_PROVIDER_ID)
        .await?;
    for node in [S1_STALE, S1_GONE] {
        c.bench.kube.set_ready(node, false).await?;
    }
    let t0 = Instant::now();
    let mut result = loop {
        if let Some(c) = crashed(reps, &[]) {
            break RunResult::fail(t0.elapsed().as_secs_f64(), c);
        }
        let log = reps[0].log();
        let stale = node_fate(c, &log, S1_STALE).await?;
        let gone = node_fate(c, &log, S1_GONE).await?;
        let secs = t0.elapsed().as_secs_f64();
        if (stale != NodeFate::Pending && gone != NodeFate::Pending) || t0.elapsed() >= DEADLINE {
            break s1_result(&stale, &gone, secs, &log);
        }
        tokio::time::sleep(Duration::from_millis(250)).await;
    };
    result.leader_seconds = leader_seconds;
    Ok(result)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The lines k8s.io/cloud-provider v0.36.0's node lifecycle controller logs (klog text, as
    /// OCCM runs it) when the ClusterRole lacks `delete` on nodes.
    const DENIED_LOG: &str = concat!(
        "I1205 08:01:02.000001       1 node_lifecycle_controller.go:163] deleting node since it is no longer present in cloud provider: gone-1\n",
        "E1205 08:01:02.000002       1 node_lifecycle_controller.go:177] unable to delete node \"gone-1\": nodes \"gone-1\" is forbidden: User \"system:serviceaccount:kube-system:openstack-cloud-controller-manager\" cannot delete resource \"nodes\" in API group \"\" at the cluster scope\n",
        "E1205 08:01:02.000003       1 node_lifecycle_controller.go:156] error checking if node stale-1 exists: failed to find object\n",
        "E1205 08:01:07.000003       1 node_lifecycle_controller.go:156] error checking if node stale-1 exists: failed to find object\n",
    );

    #[test]
    fn s1_names_an_rbac_refusal_per_node_in_text_and_structured_logs() {
        let line = denied_line(DENIED_LOG, "gone-1").unwrap();
        assert!(
            line.starts_with("unable to delete node \"gone-1\": nodes \"gone-1\" is forbidden"),
            "{line}"
        );
        assert_eq!(denied_line(DENIED_LOG, "stale-1"), None);
        let structured = r#"E1205 08:01:02.1 1 node_lifecycle_controller.go:177] "unable to delete node" node="gone-1" err="nodes \"gone-1\" is forbidden: User \"x\" cannot delete resource \"nodes\" in API group \"\" at the cluster scope""#;
        assert!(denied_line(structured, "gone-1").is_some());
    }

    #[test]
    fn s1_passes_only_when_both_nodes_are_deleted_and_names_a_refusal_as_denied() {
        let deleted = NodeFate::Deleted(
            "`deleting node since it is no longer present in cloud provider: stale-1`".into(),
        );
        let ok = s1_result(&deleted, &NodeFate::Deleted("x".into()), 5.0, "");
        assert!(ok.passed && ok.denied.is_none(), "{ok:?}");
        assert!(
            ok.evidence
                .ends_with("gone-1 (provider ID of a deleted server) deleted too")
        );
        // ours under chart 2.36.2's ClusterRole: both Nodes refused, no bug shown.
        let refused = NodeFate::Denied(denied_line(DENIED_LOG, "gone-1").unwrap().into());
        let ours = s1_result(&refused, &refused, 5.0, DENIED_LOG);
        assert!(!ours.passed && !ours.bug_shown, "{ours:?}");
        assert!(
            ours.denied
                .as_deref()
                .unwrap()
                .contains("cannot delete resource \"nodes\"")
        );
        // the control: the bug on stale-1, the same refusal on gone-1.
        let undecided = NodeFate::Undecided(
            2,
            "error checking if node stale-1 exists: failed to find object".into(),
        );
        let control = s1_result(&undecided, &refused, 10.0, DENIED_LOG);
        assert!(
            !control.passed && control.bug_shown && control.denied.is_some(),
            "{control:?}"
        );
        assert!(
            control
                .evidence
                .starts_with("Node stale-1 still there after 10 s; log (2×)"),
            "{}",
            control.evidence
        );
        assert!(
            control
                .evidence
                .contains("Node gone-1 not deleted, the apiserver refused"),
            "{}",
            control.evidence
        );
    }
}
