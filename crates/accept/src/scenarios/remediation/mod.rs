//! The machinery the Cluster API scenarios share (S5, S7 and S8, each with its [`Fault`] and
//! evidence rule in its own file: s5.rs, s7.rs, s8.rs): the bug report's symptom where it
//! lives, Cluster API's MachineHealthCheck replacing a worker Machine again and again because
//! its Node never gets a provider ID.
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
/// How long a side is watched at most: two startup timeouts plus the MachineHealthCheck's
/// reconcile cadence (remediation came 1–11 s after the timeout).
pub const WINDOW: Duration = Duration::from_secs(150);
/// How long a side of the permanent fault is watched at most: one startup timeout, the
/// remediation after it, and slack.
pub const PERMANENT_WINDOW: Duration = Duration::from_secs(100);
/// Exits that make a crash loop (kubelet shows `CrashLoopBackOff` from the second restart).
pub const CRASH_LOOP: usize = 3;

/// What one Cluster API scenario brings to the shared run: its fault, the MachineHealthCheck it
/// runs under, when a side is settled and its verdict. Each scenario defines its own in its file
/// (`s5::FAULT`, `s7::FAULT`, `s8::FAULT`); a new one is a new file and a `Fault`.
#[derive(Debug, Clone, Copy)]
pub struct Fault {
    /// Keystone tokens without a compute endpoint from the start (`u32::MAX`: every one).
    pub tokens_without_compute: u32,
    /// The worker MachineSet's replicas at the start.
    pub workers: u32,
    /// The MachineHealthCheck's `unhealthyLessThanOrEqualTo` (`100%`, or magnum-cluster-api's
    /// `80%`).
    pub max_unhealthy: &'static str,
    /// The MachineHealthCheck's `nodeStartupTimeoutSeconds`.
    pub node_startup_timeout: Duration,
    /// Whether the workers become healthy first ([`WARM_UP`]), then OCCM restarts with its
    /// next token without compute and the pool scales to three.
    pub restart_after_warm_up: bool,
    /// Whether what was observed settles the side (asked every second): `observed`, OCCM's
    /// exits so far, the time watched.
    pub settled: fn(observed: &Observed, exits: usize, watched: Duration) -> bool,
    /// The side's verdict.
    pub verdict: fn(&Observed) -> RunResult,
}

/// How long the old workers of a [`Fault::restart_after_warm_up`] run may take to become
/// healthy.
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
        tokens_without_compute: fault.tokens_without_compute,
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
        let mut old = Vec::new();
        if fault.restart_after_warm_up {
            old = match warm_up(bench, m, &mut provider, &mut occm).await? {
                Ok(old) => old,
                Err(evidence) => return Ok(Err(evidence)),
            };
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
    Ok((fault.verdict)(&o))
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

/// The start of a [`Fault::restart_after_warm_up`] run: OCCM, the stand-ins and Cluster API act, with compute
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
        if (fault.settled)(&o, occm.exits.len(), t0.elapsed()) {
            return Ok(o);
        }
        tokio::time::sleep(Duration::from_secs(1)).await;
    }
}

mod evidence;
mod objects;
#[cfg(test)]
mod tests;

use evidence::klog_value;
pub use evidence::*;
pub use objects::objects;
