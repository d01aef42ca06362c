//! The Cluster API runs of S5, S7 and S8 (each its own [`Fault`]): the bug report's symptom where it lives, Cluster API's MachineHealthCheck replacing a worker
//! Machine again and again because its Node never gets a provider ID.
//!
//! Each side runs on a control plane of its own (a fresh etcd and kube-apiserver, Cluster API's
//! manager against it, the stand-in provider and kubelets of [`crate::sim::provider`]),
//! the workload cluster being the same apiserver (the `<cluster>-kubeconfig` Secret points back
//! at it). The objects are written as magnum-cluster-api's shape them, with every field the
//! webhooks that do not run here would add: a Cluster, a MachineSet of one worker, a
//! MachineHealthCheck (Ready `False`/`Unknown` for 300 s, as magnum-cluster-api's, and a short
//! `nodeStartupTimeoutSeconds`). OCCM runs as one replica with leader election, restarted when
//! it exits as kubelet restarts a container (back-off 10 s, doubling, at most 300 s); the first
//! Keystone token it gets has no compute endpoint (the transient fault of the report).
//!
//! The verdict is what Cluster API reports ([`verdict`]): a side passes when a worker Machine is
//! `Running` with a `nodeRef`, `NodeHealthy=True` and an initialised Node before
//! `nodeStartupTimeout`, with no remediation; it shows the bug when no Machine gets a `nodeRef`
//! and the MachineHealthCheck remediates again and again (≥ [`LOOP`] Machines deleted in
//! [`WINDOW`]). Cluster API's behaviour relied on: internal/controllers/machinehealthcheck/
//! machinehealthcheck_targets.go (a Machine without a Node is unhealthy `nodeStartupTimeout`
//! after the latest of its creation and its infrastructure's readiness; the reason
//! `NodeStartupTimeout`), machinehealthcheck_controller.go (`Machine has failed health check,
//! marking for remediation`), and the MachineSet controller deleting a Machine marked for
//! remediation and creating its replacement.

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use serde_json::{Value, json};

use super::{CapiBench, PATCH_0004_MESSAGE, RunResult, spawn_occm};
use crate::sim::capi::Management;
use crate::sim::cloud::CloudState;
use crate::sim::kube::{Kube, NodeInit, Nodes as _};
use crate::sim::process::{Process, klog_message, last_error, shorten};
use crate::sim::provider::{self, GROUP, Provider};
use occm_forge_core::pipeline::acceptance::AcceptError;

/// The MachineHealthCheck's `nodeStartupTimeoutSeconds` (the webhook's 30 s minimum does not
/// apply without the webhook; magnum-cluster-api sets none, so Cluster API's default 600 s
/// applies there: shortened to fit the run).
pub const NODE_STARTUP_TIMEOUT: Duration = Duration::from_secs(60);
/// [`Fault::MagnumHealthCheck`]'s `nodeStartupTimeoutSeconds`: longer, as the restarted OCCM
/// first waits out the stopped leader's Lease (15 s), twice.
pub const MAGNUM_NODE_STARTUP_TIMEOUT: Duration = Duration::from_secs(90);

impl Fault {
    /// The MachineHealthCheck's `nodeStartupTimeoutSeconds` for this case.
    pub fn node_startup_timeout(self) -> Duration {
        match self {
            Fault::MagnumHealthCheck => MAGNUM_NODE_STARTUP_TIMEOUT,
            _ => NODE_STARTUP_TIMEOUT,
        }
    }
}
/// How long a side is watched at most: two startup timeouts plus the MachineHealthCheck's
/// reconcile cadence (remediation came 1–11 s after the timeout).
pub const WINDOW: Duration = Duration::from_secs(150);
/// How long a side of the permanent fault is watched at most: one startup timeout, the
/// remediation after it, and slack.
pub const PERMANENT_WINDOW: Duration = Duration::from_secs(100);
/// Exits that make a crash loop (kubelet shows `CrashLoopBackOff` from the second restart).
pub const CRASH_LOOP: usize = 3;

/// The case a side runs: the missing-compute fault and the MachineHealthCheck it runs under.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Fault {
    /// The first Keystone token has no compute endpoint (the report's transient fault), one
    /// worker, the MachineHealthCheck remediating at 100 %: S5.
    FirstToken,
    /// No token ever has one: S7. The fix cannot cure it, only make it loud.
    Permanent,
    /// magnum-cluster-api's own MachineHealthCheck (remediation while at most 80 % are
    /// unhealthy): two workers become healthy first, then OCCM restarts, its first token without
    /// compute, and the pool scales to three: S8.
    MagnumHealthCheck,
}

/// How long the old workers of [`Fault::MagnumHealthCheck`] may take to become healthy.
pub const WARM_UP: Duration = Duration::from_secs(90);

/// Remediations that make a loop.
pub const LOOP: usize = 2;
/// What Cluster API's MachineHealthCheck controller logs when it marks a Machine
/// (machinehealthcheck_controller.go).
pub const MARKED_LINE: &str = "Machine has failed health check, marking for remediation";
/// The Cluster API objects' namespace.
const NAMESPACE: &str = "default";
/// The Cluster's name.
const CLUSTER: &str = "accept";
/// The worker pool's label value (`nodepool`).
const POOL: &str = "workers";
/// The restart back-off kubelet starts a crash-looping container with
/// (pkg/kubelet/kubelet.go `backOffPeriod`), doubled per restart up to [`MAX_BACKOFF`].
pub const INITIAL_BACKOFF: Duration = Duration::from_secs(10);
/// kubelet's `MaxContainerBackOff`.
pub const MAX_BACKOFF: Duration = Duration::from_secs(300);

/// One worker Machine as Cluster API reports it.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct MachineView {
    /// `metadata.name`.
    pub name: String,
    /// `status.phase`.
    pub phase: String,
    /// `status.nodeRef.name`, empty when unset.
    pub node_ref: String,
    /// Status of the v1beta2 condition `NodeHealthy` (`True`, `False`, `Unknown`, empty).
    pub node_healthy: String,
    /// Reason of the condition `HealthCheckSucceeded` when it is `False` (e.g.
    /// `NodeStartupTimeout`): the MachineHealthCheck marked the Machine.
    pub unhealthy_reason: String,
    /// Whether `metadata.deletionTimestamp` is set.
    pub deleting: bool,
}

impl MachineView {
    /// Reads it from a `cluster.x-k8s.io/v1beta2` Machine.
    pub fn of(m: &Value) -> MachineView {
        let condition = |t: &str| {
            m["status"]["conditions"]
                .as_array()
                .and_then(|cs| cs.iter().find(|c| c["type"] == t))
                .cloned()
                .unwrap_or(Value::Null)
        };
        let hc = condition("HealthCheckSucceeded");
        MachineView {
            name: m["metadata"]["name"].as_str().unwrap_or_default().into(),
            phase: m["status"]["phase"].as_str().unwrap_or_default().into(),
            node_ref: m["status"]["nodeRef"]["name"]
                .as_str()
                .unwrap_or_default()
                .into(),
            node_healthy: condition("NodeHealthy")["status"]
                .as_str()
                .unwrap_or_default()
                .into(),
            unhealthy_reason: if hc["status"] == "False" {
                hc["reason"].as_str().unwrap_or("unknown").into()
            } else {
                String::new()
            },
            deleting: !m["metadata"]["deletionTimestamp"].is_null(),
        }
    }
}

/// A Machine the MachineHealthCheck had remediated: deleted by its MachineSet.
#[derive(Debug, Clone, PartialEq)]
pub struct Remediation {
    /// Seconds from the side's start.
    pub at: f64,
    /// The Machine.
    pub machine: String,
    /// The reason the MachineHealthCheck gave, when it was seen (`NodeStartupTimeout`).
    pub reason: String,
}

/// An OCCM exit the supervisor saw.
#[derive(Debug, Clone, PartialEq)]
pub struct Exit {
    /// Seconds from the side's start.
    pub at: f64,
    /// `exit status 255`, `signal`.
    pub status: String,
    /// The line that explains it: patch 0004's message when logged, else the last error.
    pub line: String,
}

/// What a side showed, as plain data.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Observed {
    /// The first Machine that was Running with a nodeRef, NodeHealthy=True and an initialised
    /// Node: its name, its Node's state and the seconds from when it was first seen.
    pub healthy: Option<(String, String, f64)>,
    /// Whether any Machine ever got a nodeRef.
    pub any_node_ref: bool,
    /// Remediations, in order.
    pub remediations: Vec<Remediation>,
    /// OCCM exits, in order.
    pub exits: Vec<Exit>,
    /// Seconds watched.
    pub watched: f64,
    /// The control's `Skipping "cloud-node-controller"` line, when logged.
    pub skipped: Option<String>,
    /// Cluster API's first `marking for remediation` line, when logged.
    pub capi_line: Option<String>,
    /// The workers that were healthy before the fault ([`Fault::MagnumHealthCheck`]): not
    /// candidates for `healthy` or `any_node_ref`; a remediation of one is still counted.
    pub old: Vec<String>,
}

/// The verdict: `passed` when a Machine became healthy within `startup_timeout` of being seen
/// with no remediation; the bug is shown when no Machine got a nodeRef and at least [`LOOP`]
/// were remediated.
pub fn verdict(o: &Observed, startup_timeout: Duration, loop_len: usize) -> RunResult {
    let exits = if o.exits.is_empty() {
        "OCCM did not exit".to_string()
    } else {
        let first = &o.exits[0];
        format!(
            "OCCM exited {}× (first at {:.1} s, {}: `{}`)",
            o.exits.len(),
            first.at,
            first.status,
            shorten(
                first
                    .line
                    .split(", most likely")
                    .next()
                    .unwrap_or(&first.line),
                200
            )
        )
    };
    let remediations = match o.remediations.len() {
        0 => "no remediation".to_string(),
        n => format!(
            "{n} remediation{} ({})",
            if n == 1 { "" } else { "s" },
            o.remediations
                .iter()
                .map(|r| {
                    let why = if r.reason.is_empty() {
                        String::new()
                    } else {
                        format!(" {}", r.reason)
                    };
                    format!("{} at {:.1} s{why}", r.machine, r.at)
                })
                .collect::<Vec<_>>()
                .join(", ")
        ),
    };
    if let Some((machine, node, secs)) = &o.healthy
        && *secs <= startup_timeout.as_secs_f64()
        && o.remediations.is_empty()
    {
        return RunResult {
            bug_shown: false,
            ..RunResult::pass(
                *secs,
                format!(
                    "Machine {machine} Running, nodeRef {machine}, NodeHealthy True after {secs:.1} s (nodeStartupTimeout {} s), Node {node}; {exits}; {remediations}{}",
                    startup_timeout.as_secs(),
                    old_workers(o)
                ),
            )
        };
    }
    let bug = !o.any_node_ref && o.remediations.len() >= loop_len;
    let mut evidence = match &o.healthy {
        Some((machine, _, secs)) => format!(
            "Machine {machine} healthy only after {secs:.1} s (nodeStartupTimeout {} s)",
            startup_timeout.as_secs()
        ),
        None if o.any_node_ref => format!(
            "a Machine got a nodeRef but none was healthy in {:.0} s",
            o.watched
        ),
        None => format!("no Machine got a nodeRef in {:.0} s", o.watched),
    };
    evidence.push_str(&format!("; {remediations}"));
    if let Some(l) = &o.capi_line {
        evidence.push_str(&format!("; Cluster API: `{l}"));
    }
    if let Some(l) = &o.skipped {
        evidence.push_str(&format!("; OCCM: `{l}`"));
    }
    evidence.push_str(&format!("; {exits}{}", old_workers(o)));
    RunResult {
        bug_shown: bug,
        ..RunResult::fail(o.watched, evidence)
    }
}

/// The verdict under the permanent fault: `passed` when OCCM crash-loops visibly (at least
/// [`CRASH_LOOP`] exits, each with patch 0004's message: what kubelet shows as
/// `CrashLoopBackOff`); the bug is shown when OCCM stays up and silent (no exit, cloud-node
/// skipped) while no Machine gets a nodeRef.
pub fn crash_loop_verdict(o: &Observed) -> RunResult {
    let loud =
        o.exits.len() >= CRASH_LOOP && o.exits.iter().all(|e| e.line.contains(PATCH_0004_MESSAGE));
    let node_ref = if o.any_node_ref {
        "a Machine got a nodeRef"
    } else {
        "no Machine got a nodeRef"
    };
    let mut remediations = match o.remediations.len() {
        0 => "no remediation".to_string(),
        n => format!("{n} remediation{}", if n == 1 { "" } else { "s" }),
    };
    // The fault never ends: past the startup timeout the Machine is remediated on either side.
    let timeout = Fault::Permanent.node_startup_timeout();
    if o.watched >= timeout.as_secs_f64() {
        remediations.push_str(&format!(
            " (the fault outlasted nodeStartupTimeout, {} s: the failure is loud, not cured)",
            timeout.as_secs()
        ));
    }
    if loud {
        let last = o.exits.last().map(|e| e.at).unwrap_or_default();
        let line = shorten(
            o.exits[0].line.split(", most likely").next().unwrap_or(""),
            200,
        );
        return RunResult {
            bug_shown: false,
            ..RunResult::pass(
                last,
                format!(
                    "OCCM crash-looped: {} exits in {last:.1} s, each `{line}` (kubelet shows CrashLoopBackOff); {node_ref}; {remediations}",
                    o.exits.len()
                ),
            )
        };
    }
    let silent = o.exits.is_empty() && o.skipped.is_some() && !o.any_node_ref;
    let mut evidence = if o.exits.is_empty() {
        format!(
            "OCCM kept running {:.0} s without a word of the fault",
            o.watched
        )
    } else {
        format!(
            "OCCM exited only {}× in {:.0} s, not a visible crash loop",
            o.exits.len(),
            o.watched
        )
    };
    if let Some(l) = &o.skipped {
        evidence.push_str(&format!(" (log: `{l}`)"));
    }
    evidence.push_str(&format!("; {node_ref}; {remediations}"));
    RunResult {
        bug_shown: silent,
        ..RunResult::fail(o.watched, evidence)
    }
}

/// `; old workers a, b healthy before the fault` when there were any (and which were remediated).
fn old_workers(o: &Observed) -> String {
    if o.old.is_empty() {
        return String::new();
    }
    let lost: Vec<&str> = o
        .old
        .iter()
        .filter(|w| o.remediations.iter().any(|r| &r.machine == *w))
        .map(String::as_str)
        .collect();
    format!(
        "; old workers {} healthy before the fault{}",
        o.old.join(", "),
        if lost.is_empty() {
            ", none remediated".to_string()
        } else {
            format!(", {} remediated", lost.join(", "))
        }
    )
}

/// The value of `key="…"` in a structured klog line (`Machine="default/workers-x"`).
fn klog_value<'l>(line: &'l str, key: &str) -> Option<&'l str> {
    let needle = format!(" {key}=\"");
    let at = line.find(&needle)? + needle.len();
    line[at..].split('"').next()
}

/// The Cluster API objects of the run, in the order they are created: (collection path,
/// object): the cluster ([`provider::cluster_objects`]), then the workers' bootstrap Secret,
/// AcceptMachineTemplate, MachineSet and MachineHealthCheck. `apiserver` is
/// `https://127.0.0.1:<port>`, `kubeconfig` the text of a kubeconfig for it, `version` the
/// Kubernetes version (`v1.34.1`).
pub fn objects(
    apiserver: &str,
    kubeconfig: &str,
    version: &str,
    fault: Fault,
) -> Vec<(String, Value)> {
    let (replicas, trigger) = match fault {
        Fault::MagnumHealthCheck => (2, "80%"),
        _ => (1, "100%"),
    };
    let cluster_label = json!({"cluster.x-k8s.io/cluster-name": CLUSTER});
    let pool_labels = json!({"cluster.x-k8s.io/cluster-name": CLUSTER, "nodepool": POOL});
    let capi = |kind: &str| format!("/apis/cluster.x-k8s.io/v1beta2/namespaces/{NAMESPACE}/{kind}");
    let mut objects = provider::cluster_objects(NAMESPACE, CLUSTER, apiserver, kubeconfig, version);
    objects.extend([
        (
            format!("/api/v1/namespaces/{NAMESPACE}/secrets"),
            json!({"apiVersion": "v1", "kind": "Secret",
                   "metadata": {"name": format!("{POOL}-bootstrap"), "namespace": NAMESPACE,
                                "labels": cluster_label},
                   "type": "cluster.x-k8s.io/secret",
                   "stringData": {"value": "#cloud-config\n", "format": "cloud-config"}}),
        ),
        (
            provider::collection(GROUP, "AcceptMachineTemplate", NAMESPACE),
            json!({"apiVersion": format!("{GROUP}/{}", provider::VERSION),
                   "kind": "AcceptMachineTemplate",
                   "metadata": {"name": POOL, "namespace": NAMESPACE, "labels": cluster_label},
                   "spec": {"template": {"spec": {}}}}),
        ),
        (
            capi("machinesets"),
            json!({"apiVersion": "cluster.x-k8s.io/v1beta2", "kind": "MachineSet",
            "metadata": {"name": POOL, "namespace": NAMESPACE, "labels": cluster_label,
                         "annotations": {"machineset.cluster.x-k8s.io/skip-preflight-checks": "All"}},
            "spec": {
                "clusterName": CLUSTER,
                "replicas": replicas,
                "selector": {"matchLabels": pool_labels},
                "template": {
                    "metadata": {"labels": pool_labels},
                    "spec": {
                        "clusterName": CLUSTER,
                        "version": version,
                        "bootstrap": {"dataSecretName": format!("{POOL}-bootstrap")},
                        "infrastructureRef": {"apiGroup": GROUP, "kind": "AcceptMachineTemplate", "name": POOL}
                    }
                }
            }}),
        ),
        (
            capi("machinehealthchecks"),
            json!({"apiVersion": "cluster.x-k8s.io/v1beta2", "kind": "MachineHealthCheck",
            "metadata": {"name": POOL, "namespace": NAMESPACE, "labels": cluster_label},
            "spec": {
                "clusterName": CLUSTER,
                "selector": {"matchLabels": {"nodepool": POOL}},
                "checks": {
                    "nodeStartupTimeoutSeconds": fault.node_startup_timeout().as_secs(),
                    "unhealthyNodeConditions": [
                        {"type": "Ready", "status": "Unknown", "timeoutSeconds": 300},
                        {"type": "Ready", "status": "False", "timeoutSeconds": 300}
                    ]
                },
                "remediation": {"triggerIf": {"unhealthyLessThanOrEqualTo": trigger}}
            }}),
        ),
    ]);
    objects
}

/// OCCM run the way kubelet runs a container: restarted after it exits, with kubelet's back-off.
struct Supervised<'a> {
    binary: &'a Path,
    dir: &'a Path,
    cloud_conf: PathBuf,
    kubeconfig: PathBuf,
    proc: Option<Process>,
    starts: u32,
    restart_at: Option<Instant>,
    backoff: Duration,
    started: Instant,
    exits: Vec<Exit>,
}

impl<'a> Supervised<'a> {
    fn new(binary: &'a Path, dir: &'a Path, cloud_conf: PathBuf, kubeconfig: PathBuf) -> Self {
        Supervised {
            binary,
            dir,
            cloud_conf,
            kubeconfig,
            proc: None,
            starts: 0,
            restart_at: Some(Instant::now()),
            backoff: INITIAL_BACKOFF,
            started: Instant::now(),
            exits: Vec::new(),
        }
    }

    /// Starts OCCM when it is due, notes an exit and schedules the restart.
    fn tick(&mut self) -> Result<(), AcceptError> {
        if let Some(p) = &mut self.proc
            && let Some(status) = p.exited()
        {
            let log = p.log_text();
            let line = log
                .lines()
                .find(|l| l.contains(PATCH_0004_MESSAGE))
                .map(|l| klog_message(l).to_string())
                .unwrap_or_else(|| last_error(&log));
            self.exits.push(Exit {
                at: self.started.elapsed().as_secs_f64(),
                status: status.to_string(),
                line,
            });
            self.proc = None;
            self.restart_at = Some(Instant::now() + self.backoff);
            self.backoff = (self.backoff * 2).min(MAX_BACKOFF);
        }
        if self.proc.is_none() && self.restart_at.is_some_and(|t| Instant::now() >= t) {
            self.starts += 1;
            let name = format!("occm start {}", self.starts);
            let log = self.dir.join(format!("occm-{}.log", self.starts));
            self.proc = Some(
                spawn_occm(
                    self.binary,
                    &name,
                    self.dir,
                    &self.cloud_conf,
                    &self.kubeconfig,
                    &log,
                    &[],
                )?
                .proc,
            );
            self.restart_at = None;
        }
        Ok(())
    }

    /// Stops the running OCCM (a Pod deleted, a node drained) and starts it again at once; the
    /// stop is not an exit.
    async fn restart(&mut self) -> Result<(), AcceptError> {
        if let Some(p) = &mut self.proc {
            let _ = p.stop(Duration::from_secs(5)).await;
        }
        self.proc = None;
        self.restart_at = Some(Instant::now());
        self.tick()
    }

    /// Every start's log so far.
    fn logs(&self) -> String {
        (1..=self.starts)
            .map(|i| crate::sim::process::read_log(&self.dir.join(format!("occm-{i}.log"))))
            .collect()
    }

    async fn stop(&mut self) {
        if let Some(p) = &mut self.proc {
            let _ = p.stop(Duration::from_secs(5)).await;
        }
    }
}

/// Runs S5 on `binary` in `dir`; see the module documentation.
///
/// A misbehaving OCCM is a failed or bug-showing [`RunResult`]; only a fault of the bench (a
/// control plane or Cluster API that does not start, an apiserver refusing an object) is an
/// error. Every process it started is stopped before it returns.
pub(crate) async fn run(
    bench: &CapiBench<'_>,
    binary: &Path,
    dir: &Path,
    fault: Fault,
) -> Result<RunResult, AcceptError> {
    let mut m = Management::start(bench.binaries, bench.manager, dir).await?;
    let result = watch(bench, &mut m, binary, dir, fault).await;
    m.stop().await;
    result
}

async fn watch(
    bench: &CapiBench<'_>,
    m: &mut Management,
    binary: &Path,
    dir: &Path,
    fault: Fault,
) -> Result<RunResult, AcceptError> {
    let (cp, kube) = (&m.control_plane, &m.kube);
    let io = |e: std::io::Error| AcceptError::Io(format!("{}: {e}", dir.display()));
    bench.cloud.set_state(CloudState {
        tokens_without_compute: match fault {
            Fault::FirstToken => 1,
            Fault::Permanent => u32::MAX,
            Fault::MagnumHealthCheck => 0,
        },
        ..CloudState::default()
    });
    let kubeconfig_text = std::fs::read_to_string(&cp.kubeconfig).map_err(io)?;
    for (path, object) in objects(&cp.url, &kubeconfig_text, bench.kubernetes, fault) {
        kube.create(&path, object).await?;
    }
    let mut provider = Provider::new(NAMESPACE);
    provider.mark_cluster_ready(kube, CLUSTER).await?;
    let cloud_conf = dir.join("cloud.conf");
    std::fs::write(&cloud_conf, bench.cloud.cloud_conf()).map_err(io)?;
    // OCCM runs as the chart's ServiceAccount, with what the chart grants it.
    let occm_kubeconfig =
        crate::sim::chart::install(kube, bench.chart, (&cp.url, &cp.ca_pem), dir).await?;
    let mut occm = Supervised::new(binary, dir, cloud_conf, occm_kubeconfig);
    let outcome = async {
        let old = match fault {
            Fault::MagnumHealthCheck => match warm_up(bench, m, &mut provider, &mut occm).await? {
                Ok(old) => old,
                Err(evidence) => return Ok(Err(evidence)),
            },
            _ => Vec::new(),
        };
        if fault == Fault::MagnumHealthCheck {
            bench.cloud.fail_next_tokens(1);
            occm.restart().await?;
            m.kube
                .merge_patch(
                    &format!(
                        "/apis/cluster.x-k8s.io/v1beta2/namespaces/{NAMESPACE}/machinesets/{POOL}"
                    ),
                    json!({"spec": {"replicas": 3}}),
                )
                .await?;
        }
        observe(bench, m, &mut provider, &mut occm, fault, old)
            .await
            .map(Ok)
    }
    .await;
    occm.stop().await;
    let actions: String = provider
        .log
        .iter()
        .map(|(t, a)| format!("{t:7.1} s {a:?}\n"))
        .collect();
    let _ = std::fs::write(dir.join("provider.log"), actions);
    let mut o = match outcome? {
        Ok(o) => o,
        Err(evidence) => {
            return Ok(RunResult {
                bug_shown: false,
                ..RunResult::fail(WARM_UP.as_secs_f64(), evidence)
            });
        }
    };
    o.exits = occm.exits.clone();
    let logs = occm.logs();
    o.skipped = skipped_cloud_node(&logs);
    let capi_log = m.manager.log();
    let marked: Vec<&str> = capi_log
        .lines()
        .filter(|l| l.contains(MARKED_LINE))
        .collect();
    o.capi_line = marked.first().map(|l| {
        format!(
            "{MARKED_LINE}` ({}×; Machine {}, reason {})",
            marked.len(),
            klog_value(l, "Machine").unwrap_or("?"),
            klog_value(l, "reason").unwrap_or("?")
        )
    });
    Ok(match fault {
        Fault::FirstToken => verdict(&o, NODE_STARTUP_TIMEOUT, LOOP),
        Fault::MagnumHealthCheck => verdict(&o, MAGNUM_NODE_STARTUP_TIMEOUT, 1),
        Fault::Permanent => crash_loop_verdict(&o),
    })
}

/// The klog message of OCCM's `Skipping "cloud-node-controller"` line in `logs`, if any.
fn skipped_cloud_node(logs: &str) -> Option<String> {
    logs.lines()
        .find(|l| l.contains(super::SKIPPED_CLOUD_NODE))
        .map(|l| klog_message(l).to_string())
}

/// The description of `m`'s Node when the Machine is healthy: `Running` with a nodeRef,
/// `NodeHealthy=True`, and the Node initialised with its server's provider ID and address.
async fn healthy_node(
    kube: &Kube,
    provider: &Provider,
    m: &MachineView,
) -> Result<Option<String>, AcceptError> {
    if m.phase != "Running" || m.node_ref.is_empty() || m.node_healthy != "True" {
        return Ok(None);
    }
    let Some(node) = kube.node(&m.node_ref).await? else {
        return Ok(None);
    };
    let init = NodeInit::of(&node);
    Ok(provider
        .provisioned()
        .get(&m.name)
        .filter(|s| init.done(&s.server_id, &s.ip))
        .map(|_| init.describe()))
}

/// One round of a side: stops on a signal or a crashed manager or control plane, lets the
/// supervisor and the stand-ins act, and lists Cluster API's Machines.
async fn round(
    bench: &CapiBench<'_>,
    m: &mut Management,
    provider: &mut Provider,
    occm: &mut Supervised<'_>,
) -> Result<Vec<MachineView>, AcceptError> {
    crate::sim::process::check_interrupt()?;
    if let Some(c) = m.crashed() {
        return Err(AcceptError::ControlPlane {
            part: "cluster-api".into(),
            message: c,
        });
    }
    occm.tick()?;
    provider.tick(&m.kube, bench.cloud).await?;
    let machines = format!("/apis/cluster.x-k8s.io/v1beta2/namespaces/{NAMESPACE}/machines");
    Ok(m.kube
        .list(&machines)
        .await?
        .iter()
        .map(MachineView::of)
        .collect())
}

/// [`Fault::MagnumHealthCheck`]'s start: OCCM, the stand-ins and Cluster API act, with compute
/// in every token, until both workers are healthy: their names, or (`Err`) the evidence that
/// they were not within [`WARM_UP`].
async fn warm_up(
    bench: &CapiBench<'_>,
    m: &mut Management,
    provider: &mut Provider,
    occm: &mut Supervised<'_>,
) -> Result<Result<Vec<String>, String>, AcceptError> {
    let t0 = Instant::now();
    loop {
        let listed = round(bench, m, provider, occm).await?;
        let mut healthy = Vec::new();
        for machine in &listed {
            if healthy_node(&m.kube, provider, machine).await?.is_some() {
                healthy.push(machine.name.clone());
            }
        }
        if healthy.len() >= 2 {
            return Ok(Ok(healthy));
        }
        if t0.elapsed() >= WARM_UP {
            return Ok(Err(format!(
                "the two workers before the fault were not healthy within {} s (healthy: {}; OCCM: `{}`)",
                WARM_UP.as_secs(),
                if healthy.is_empty() {
                    "none".to_string()
                } else {
                    healthy.join(", ")
                },
                last_error(&occm.logs())
            )));
        }
        tokio::time::sleep(Duration::from_secs(1)).await;
    }
}

/// Polls every second for at most [`WINDOW`]: the stand-ins and the supervisor act, then
/// Cluster API's Machines are read. Stops early once a Machine is healthy, or once the loop
/// is shown.
async fn observe(
    bench: &CapiBench<'_>,
    m: &mut Management,
    provider: &mut Provider,
    occm: &mut Supervised<'_>,
    fault: Fault,
    old: Vec<String>,
) -> Result<Observed, AcceptError> {
    let t0 = Instant::now();
    let mut o = Observed {
        old: old.clone(),
        ..Observed::default()
    };
    let mut first_seen: std::collections::BTreeMap<String, Instant> = Default::default();
    let mut reasons: std::collections::BTreeMap<String, String> = Default::default();
    loop {
        let listed = round(bench, m, provider, occm).await?;
        let kube = &m.kube;
        for m in &listed {
            first_seen
                .entry(m.name.clone())
                .or_insert_with(Instant::now);
            if !m.unhealthy_reason.is_empty() {
                reasons.insert(m.name.clone(), m.unhealthy_reason.clone());
            }
            if old.contains(&m.name) {
                continue;
            }
            if !m.node_ref.is_empty() {
                o.any_node_ref = true;
            }
            if o.healthy.is_none()
                && let Some(node) = healthy_node(kube, provider, m).await?
            {
                let secs = first_seen[&m.name].elapsed().as_secs_f64();
                o.healthy = Some((m.name.clone(), node, secs));
            }
        }
        // A Machine seen before and now deleting or gone was remediated (nothing else deletes
        // workers of a MachineSet whose replicas do not change).
        for name in first_seen.keys() {
            let gone = listed.iter().all(|m| &m.name != name)
                || listed.iter().any(|m| &m.name == name && m.deleting);
            if gone && !o.remediations.iter().any(|r| &r.machine == name) {
                o.remediations.push(Remediation {
                    at: t0.elapsed().as_secs_f64(),
                    machine: name.clone(),
                    reason: reasons.get(name).cloned().unwrap_or_default(),
                });
            }
        }
        o.watched = t0.elapsed().as_secs_f64();
        let done = match fault {
            Fault::MagnumHealthCheck => {
                o.healthy.is_some()
                    || (!o.any_node_ref && !o.remediations.is_empty())
                    || t0.elapsed() >= WINDOW
            }
            Fault::FirstToken => {
                o.healthy.is_some()
                    || (!o.any_node_ref && o.remediations.len() >= LOOP)
                    || t0.elapsed() >= WINDOW
            }
            Fault::Permanent => occm.exits.len() >= CRASH_LOOP || t0.elapsed() >= PERMANENT_WINDOW,
        };
        if done {
            return Ok(o);
        }
        tokio::time::sleep(Duration::from_secs(1)).await;
    }
}

#[cfg(test)]
mod tests {
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
            Fault::MagnumHealthCheck,
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
        let objs = objects("https://127.0.0.1:6443", "{}", "v1.34.1", Fault::FirstToken);
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
}
