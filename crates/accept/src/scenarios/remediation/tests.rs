use super::*;

fn exit() -> Exit {
    Exit {
        at: 3.2,
        status: "exit status: 255".into(),
        line: "the cloud-node controller is enabled but did not start, most likely because …"
            .into(),
    }
}

fn remediation(machine: &str, at: f64) -> Remediation {
    Remediation {
        at,
        machine: machine.into(),
        reason: "NodeStartupTimeout".into(),
    }
}

#[test]
fn ours_passes_when_a_machine_is_healthy_in_time_with_no_remediation() {
    let o = Observed {
        healthy: Some(("workers-a".into(), "providerID openstack:///x".into(), 28.4)),
        any_node_ref: true,
        exits: vec![exit()],
        watched: 28.4,
        ..Observed::default()
    };
    let r = verdict(&o, NODE_STARTUP_TIMEOUT, LOOP);
    assert!(r.passed && !r.bug_shown, "{r:?}");
    assert!(
        r.evidence.starts_with("Machine workers-a Running, nodeRef workers-a, NodeHealthy True after 28.4 s (nodeStartupTimeout 60 s)")
            && r.evidence.contains("OCCM exited 1× (first at 3.2 s, exit status: 255: `the cloud-node controller is enabled but did not start`)")
            && r.evidence.ends_with("; no remediation"),
        "{}",
        r.evidence
    );
}

#[test]
fn healthy_too_late_or_after_a_remediation_fails() {
    let late = Observed {
        healthy: Some(("workers-a".into(), String::new(), 61.0)),
        any_node_ref: true,
        watched: 61.0,
        ..Observed::default()
    };
    let r = verdict(&late, NODE_STARTUP_TIMEOUT, LOOP);
    assert!(!r.passed && !r.bug_shown, "{r:?}");
    let after = Observed {
        healthy: Some(("workers-b".into(), String::new(), 20.0)),
        any_node_ref: true,
        remediations: vec![remediation("workers-a", 66.0)],
        watched: 90.0,
        ..Observed::default()
    };
    let r = verdict(&after, NODE_STARTUP_TIMEOUT, LOOP);
    assert!(!r.passed && !r.bug_shown, "{r:?}");
    assert!(
        r.evidence
            .contains("1 remediation (workers-a at 66.0 s NodeStartupTimeout)"),
        "{}",
        r.evidence
    );
}

#[test]
fn the_control_shows_the_bug_only_with_no_node_ref_and_a_loop() {
    let looped = Observed {
        remediations: vec![remediation("workers-a", 65.5), remediation("workers-b", 130.5)],
        watched: 130.5,
        skipped: Some("Skipping \"cloud-node-controller\"".into()),
        capi_line: Some("Machine has failed health check, marking for remediation` (2×; Machine default/workers-a, reason NodeStartupTimeout)".into()),
        ..Observed::default()
    };
    let r = verdict(&looped, NODE_STARTUP_TIMEOUT, LOOP);
    assert!(!r.passed && r.bug_shown, "{r:?}");
    assert!(
        r.evidence.starts_with("no Machine got a nodeRef in 130 s; 2 remediations (workers-a at 65.5 s NodeStartupTimeout, workers-b at 130.5 s NodeStartupTimeout); Cluster API: `Machine has failed health check, marking for remediation` (2×; Machine default/workers-a, reason NodeStartupTimeout)")
            && r.evidence.contains("OCCM: `Skipping \"cloud-node-controller\"`")
            && r.evidence.ends_with("OCCM did not exit"),
        "{}",
        r.evidence
    );
    // One remediation in the window is no loop: the bug is not shown.
    let once = Observed {
        remediations: vec![remediation("workers-a", 65.5)],
        watched: 150.0,
        ..Observed::default()
    };
    assert!(!verdict(&once, NODE_STARTUP_TIMEOUT, LOOP).bug_shown);
    // A nodeRef, even late, is not the bug.
    let node_ref = Observed {
        any_node_ref: true,
        remediations: vec![
            remediation("workers-a", 65.5),
            remediation("workers-b", 130.5),
        ],
        watched: 150.0,
        ..Observed::default()
    };
    assert!(!verdict(&node_ref, NODE_STARTUP_TIMEOUT, LOOP).bug_shown);
}

#[test]
fn a_permanent_fault_passes_when_ours_crash_loops_and_shows_the_bug_when_silent() {
    let loop3 = Observed {
        exits: vec![
            exit(),
            Exit { at: 14.1, ..exit() },
            Exit { at: 35.0, ..exit() },
        ],
        watched: 35.0,
        ..Observed::default()
    };
    let r = crash_loop_verdict(&loop3);
    assert!(r.passed && !r.bug_shown, "{r:?}");
    assert_eq!(
        r.evidence,
        "OCCM crash-looped: 3 exits in 35.0 s, each `the cloud-node controller is enabled but did not start` (kubelet shows CrashLoopBackOff); no Machine got a nodeRef; no remediation"
    );
    // Exits for another reason are not the patch's loud failure.
    let mut other = loop3.clone();
    other.exits[2].line = "panic: nil map".into();
    assert!(!crash_loop_verdict(&other).passed);
    let silent = Observed {
        remediations: vec![remediation("workers-a", 66.0)],
        skipped: Some("Skipping \"cloud-node-controller\"".into()),
        watched: 80.0,
        ..Observed::default()
    };
    let r = crash_loop_verdict(&silent);
    assert!(!r.passed && r.bug_shown, "{r:?}");
    assert_eq!(
        r.evidence,
        "OCCM kept running 80 s without a word of the fault (log: `Skipping \"cloud-node-controller\"`); no Machine got a nodeRef; 1 remediation (the fault outlasted nodeStartupTimeout, 60 s: the failure is loud, not cured)"
    );
    // Ours past the startup timeout: passing, and saying the Machine was remediated anyway.
    let late = Observed {
        exits: vec![
            exit(),
            Exit { at: 30.0, ..exit() },
            Exit { at: 66.6, ..exit() },
        ],
        remediations: vec![remediation("workers-a", 61.0)],
        watched: 66.6,
        ..Observed::default()
    };
    let r = crash_loop_verdict(&late);
    assert!(r.passed, "{r:?}");
    assert!(
        r.evidence.ends_with(
            "1 remediation (the fault outlasted nodeStartupTimeout, 60 s: the failure is loud, not cured)"
        ),
        "{}",
        r.evidence
    );
    // Two exits are no loop, and not silence either.
    let two = Observed {
        exits: vec![exit(), exit()],
        watched: 80.0,
        ..Observed::default()
    };
    let r = crash_loop_verdict(&two);
    assert!(!r.passed && !r.bug_shown, "{r:?}");
}

#[test]
fn with_magnum_s_health_check_one_remediation_of_a_new_worker_shows_the_bug() {
    let old = vec!["workers-a".to_string(), "workers-b".to_string()];
    let ours = Observed {
        healthy: Some(("workers-c".into(), "providerID openstack:///x".into(), 25.0)),
        any_node_ref: true,
        exits: vec![exit()],
        watched: 25.0,
        old: old.clone(),
        ..Observed::default()
    };
    let r = verdict(&ours, NODE_STARTUP_TIMEOUT, 1);
    assert!(r.passed, "{r:?}");
    assert!(
        r.evidence
            .ends_with("; no remediation; old workers workers-a, workers-b healthy before the fault, none remediated"),
        "{}",
        r.evidence
    );
    let control = Observed {
        remediations: vec![remediation("workers-c", 76.5)],
        watched: 76.5,
        old: old.clone(),
        ..Observed::default()
    };
    let r = verdict(&control, NODE_STARTUP_TIMEOUT, 1);
    assert!(!r.passed && r.bug_shown, "{r:?}");
    // The same under S5's rule is no loop.
    assert!(!verdict(&control, NODE_STARTUP_TIMEOUT, LOOP).bug_shown);
    // An old worker remediated is named.
    let lost = Observed {
        remediations: vec![remediation("workers-a", 70.0)],
        ..control
    };
    assert!(verdict(&lost, NODE_STARTUP_TIMEOUT, 1).evidence.ends_with(
        "old workers workers-a, workers-b healthy before the fault, workers-a remediated"
    ),);
    let objs = objects(
        "https://127.0.0.1:6443",
        "{}",
        "v1.34.1",
        crate::scenarios::s8::FAULT,
    );
    assert_eq!(objs[6].1["spec"]["replicas"], 2);
    assert_eq!(objs[7].1["spec"]["checks"]["nodeStartupTimeoutSeconds"], 90);
    assert_eq!(
        objs[7].1["spec"]["remediation"]["triggerIf"]["unhealthyLessThanOrEqualTo"],
        "80%"
    );
}

#[test]
fn structured_klog_values_are_read() {
    let l = "I1202 02:21:20.000774   12336 machinehealthcheck_controller.go:539] \"Machine has failed health check, marking for remediation\" controller=\"machinehealthcheck\" Machine=\"default/workers-d84x8\" Node=\"\" reason=\"NodeStartupTimeout\" message=<";
    assert_eq!(klog_value(l, "Machine"), Some("default/workers-d84x8"));
    assert_eq!(klog_value(l, "reason"), Some("NodeStartupTimeout"));
    assert_eq!(klog_value(l, "Node"), Some(""));
    assert_eq!(klog_value(l, "Cluster"), None);
}

#[test]
fn the_control_is_quoted_skipping_the_cloud_node_controller_not_the_first_skip() {
    let logs = "W1202 10:00:01.000000       1 controllermanager.go:355] Skipping \"cloud-node-lifecycle-controller\"\n\
W1202 10:00:01.100000       1 controllermanager.go:355] Skipping \"cloud-node-controller\"\n";
    assert_eq!(
        skipped_cloud_node(logs).as_deref(),
        Some("Skipping \"cloud-node-controller\"")
    );
    assert_eq!(
        skipped_cloud_node(logs.lines().next().unwrap()),
        None,
        "the lifecycle controller's skip alone is not the bug report's"
    );
}

#[test]
fn machines_are_read_from_v1beta2_status() {
    let m = json!({
        "metadata": {"name": "workers-x", "deletionTimestamp": "2026-12-02T00:00:00Z"},
        "status": {"phase": "Provisioned", "conditions": [
            {"type": "NodeHealthy", "status": "Unknown", "reason": "NodeDoesNotExist"},
            {"type": "HealthCheckSucceeded", "status": "False", "reason": "NodeStartupTimeout"}
        ]}
    });
    let v = MachineView::of(&m);
    assert_eq!(
        v,
        MachineView {
            name: "workers-x".into(),
            phase: "Provisioned".into(),
            node_ref: String::new(),
            node_healthy: "Unknown".into(),
            unhealthy_reason: "NodeStartupTimeout".into(),
            deleting: true,
        }
    );
}

#[test]
fn the_objects_carry_what_the_webhooks_would_add() {
    let objs = objects(
        "https://127.0.0.1:6443",
        "{}",
        "v1.34.1",
        crate::scenarios::s5::FAULT,
    );
    let kinds: Vec<_> = objs
        .iter()
        .map(|(_, o)| o["kind"].as_str().unwrap())
        .collect();
    assert_eq!(
        kinds,
        [
            "Secret",
            "AcceptCluster",
            "AcceptControlPlane",
            "Cluster",
            "Secret",
            "AcceptMachineTemplate",
            "MachineSet",
            "MachineHealthCheck"
        ]
    );
    let ms = &objs[6].1;
    assert_eq!(
        ms["metadata"]["labels"]["cluster.x-k8s.io/cluster-name"],
        CLUSTER
    );
    assert_eq!(
        ms["spec"]["selector"]["matchLabels"],
        ms["spec"]["template"]["metadata"]["labels"]
    );
    assert_eq!(
        ms["metadata"]["annotations"]["machineset.cluster.x-k8s.io/skip-preflight-checks"],
        "All"
    );
    let mhc = &objs[7].1;
    assert_eq!(
        mhc["metadata"]["labels"]["cluster.x-k8s.io/cluster-name"],
        CLUSTER
    );
    assert_eq!(mhc["spec"]["checks"]["nodeStartupTimeoutSeconds"], 60);
    assert_eq!(objs[3].1["spec"]["controlPlaneEndpoint"]["port"], 6443);
    assert_eq!(objs[0].1["metadata"]["name"], "accept-kubeconfig");
}
