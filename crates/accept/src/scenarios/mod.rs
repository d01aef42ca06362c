//! The scenarios, each run on one binary (ours or the control) against the running control plane
//! and the simulated cloud, with a deadline. Each run starts from a clean cluster (no Nodes, no
//! leader Lease) and its own cloud state; its OCCM logs, cloud.conf and the simulated cloud's
//! request log go to its own directory.
//!
//! The acceptance criteria they check are the bug report's (vexxhost/atmosphere#4240,
//! kubernetes/cloud-provider-openstack#3114); the controller behaviour they rely on is
//! k8s.io/cloud-provider's: controllers/nodelifecycle/node_lifecycle_controller.go (every
//! `--node-monitor-period`, 5 s, a NotReady Node is deleted when `InstanceExists` answers
//! `(false, nil)`; an error is logged as `error checking if node %s exists: %v`),
//! controllers/node/node_controller.go (a Node with the `uninitialized` taint gets provider ID
//! and addresses from `InstanceMetadata`, then loses the taint) and app/controllermanager.go
//! (`Skipping %q` for a controller whose InitFunc did not start it; leader election on the Lease
//! `kube-system/cloud-controller-manager`, lease 15 s).

use std::path::{Path, PathBuf};
use std::process::Command;
use std::str::FromStr;
use std::time::{Duration, Instant};

use serde::Serialize;

pub mod remediation;
pub mod resource_set;

use super::AcceptError;
use super::sim::cloud::{CloudState, Server, SimulatedCloud};
use super::sim::kube::{Kube, NodeInit, Nodes as _};
use super::sim::process::{Process, free_port, klog_message, last_error, shorten};
use remediation::Fault;

/// How long a scenario's own check may take (S1 deletion, S2 exit, S3 initialisation, S4
/// failover), counted from its start.
pub const DEADLINE: Duration = Duration::from_secs(60);
/// How long an OCCM may take to become leader (counted apart from the scenario's own time).
pub const LEADER_DEADLINE: Duration = Duration::from_secs(60);
/// S1 is conclusive on the bug when the node lifecycle controller has logged this many times that
/// it cannot tell whether the Node exists (once per `--node-monitor-period`, 5 s): the error
/// repeats instead of resolving, and the Node is never deleted.
pub const S1_BUG_REPEATS: usize = 2;
/// S2 is conclusive on the bug when OCCM is still up this long after it logged that it skipped a
/// cloud-node controller: the patched binary exits at that very moment.
pub const S2_SILENCE: Duration = Duration::from_secs(5);
/// The line the node lifecycle controller logs when `InstanceExists` returns an error
/// (k8s.io/cloud-provider controllers/nodelifecycle: `error checking if node %s exists: %v`).
pub const CHECKING_LINE: &str = "error checking if node";
/// S4's leader-election timing (component-base's `--leader-elect-*` flags; the chart keeps their
/// defaults, 15 s / 10 s / 2 s): a killed leader's Lease expires after 4 s instead of 15 s, so the
/// failover is measured in seconds while still being client-go's real expiry and takeover
/// (LeaseDuration > RenewDeadline > 1.2 × RetryPeriod, tools/leaderelection/leaderelection.go).
pub const S4_LEASE_ARGS: [&str; 3] = [
    "--leader-elect-lease-duration=4s",
    "--leader-elect-renew-deadline=3s",
    "--leader-elect-retry-period=1s",
];
/// The line k8s.io/cloud-provider logs when it skips a controller that cannot start.
pub const SKIPPING_LINE: &str = "Skipping \"cloud-node";
/// The skip that leaves new Nodes without a provider ID (the bug report's): the evidence line
/// the Cluster API scenarios quote from the control (not the first cloud-node skip in its log,
/// which may be the lifecycle controller's).
pub const SKIPPED_CLOUD_NODE: &str = "Skipping \"cloud-node-controller\"";

/// What client-go's leader election logs when this process became leader, compared without
/// case: `successfully acquired lease kube-system/cloud-controller-manager` up to client-go
/// v0.34, `"Successfully acquired lease" lock="kube-system/cloud-controller-manager"` (structured)
/// from v0.35 (tools/leaderelection/leaderelection.go).
pub const LEADER_LINE: &str = "successfully acquired lease";

/// Whether `log` holds [`LEADER_LINE`].
fn became_leader(log: &str) -> bool {
    log.lines()
        .any(|l| l.to_ascii_lowercase().contains(LEADER_LINE))
}
/// The message of patch 0004 when cloud-node cannot start.
pub const PATCH_0004_MESSAGE: &str = "is enabled but did not start";
/// The node lifecycle controller's line before it deletes a Node.
pub const DELETING_LINE: &str = "deleting node since it is no longer present in cloud provider";

/// One acceptance scenario. Every variant is in the default set [`Scenario::ALL`] (derived from
/// the enum itself, so a new scenario cannot be left out of it by mistake).
#[derive(
    Debug,
    Clone,
    Copy,
    PartialEq,
    Eq,
    PartialOrd,
    Ord,
    Hash,
    Serialize,
    serde::Deserialize,
    strum::VariantArray,
)]
pub enum Scenario {
    /// Criterion 1: a NotReady Node with an empty provider ID and no Nova server is deleted
    /// within 60 s.
    S1,
    /// Criterion 2: with no compute endpoint in the catalog, OCCM exits non-zero within 60 s
    /// with the patch's message.
    S2,
    /// Criterion 3: a new Node with the `uninitialized` taint and a matching server gets
    /// provider ID `openstack:///<id>` and its InternalIP, and loses the taint, within 60 s.
    S3,
    /// Three replicas with leader election: the leader is killed, another takes the Lease and
    /// S3 works again, within 60 s.
    S4,
    /// Cluster API's remediation loop: with the first Keystone token lacking compute, a worker
    /// Machine of a MachineSet under a MachineHealthCheck reaches Running with a nodeRef and
    /// NodeHealthy before `nodeStartupTimeout`, with no remediation (see [`remediation`]).
    S5,
    /// The ClusterResourceSet path: `render --format crs-secret` output written back makes the
    /// workload OCCM DaemonSet ours through Cluster API within 30 s, `--image` reverts it, a
    /// driver upgrade puts upstream's image back, and a legacy ApplyOnce Secret is refused and
    /// never reaches the workload (see [`resource_set`]). Runs once: it is about the image
    /// reference, not a binary.
    S6,
    /// The permanent fault: no Keystone token ever has compute. Ours crash-loops visibly, each
    /// exit with patch 0004's message (the fix makes the failure loud, it cannot cure it); the
    /// control keeps running, silent (see [`remediation::crash_loop_verdict`]).
    S7,
    /// magnum-cluster-api's own MachineHealthCheck (remediation while at most 80 % are
    /// unhealthy) with two healthy workers: OCCM restarts, its first token without compute,
    /// and a third worker joins. Ours initialises it without remediation; the control never
    /// does and the new worker is remediated.
    S8,
}

impl Scenario {
    /// Every scenario, in order: every variant.
    pub const ALL: &'static [Scenario] = <Scenario as strum::VariantArray>::VARIANTS;

    /// One line for tables.
    pub fn title(self) -> &'static str {
        match self {
            Scenario::S1 => {
                "NotReady Nodes without a server (empty provider ID; a deleted server's provider ID) → both deleted within 60 s"
            }
            Scenario::S2 => {
                "catalog without compute → OCCM exits non-zero within 60 s with the patch's message"
            }
            Scenario::S3 => {
                "new tainted Node with a server → provider ID, InternalIP, taint removed within 60 s"
            }
            Scenario::S4 => {
                "3 replicas (4 s Lease), leader killed → another takes the Lease, S3 works again"
            }
            Scenario::S5 => {
                "Cluster API: first token without compute → worker Machine gets its nodeRef, no remediation"
            }
            Scenario::S6 => {
                "ClusterResourceSet: crs-secret → workload DaemonSet ours, revert and driver upgrade back, legacy ApplyOnce refused"
            }
            Scenario::S7 => {
                "Cluster API: no token ever has compute → OCCM crash-loops visibly with the patch's message"
            }
            Scenario::S8 => {
                "Cluster API, magnum-cluster-api's MachineHealthCheck (80 %), two healthy workers: OCCM restarts without compute, a third joins → initialised, no remediation"
            }
        }
    }

    /// The sides it runs on: ours then the control, or ours alone for S6 (which writes image
    /// references and runs no OCCM).
    pub fn sides(self) -> &'static [Side] {
        match self {
            Scenario::S6 => &[Side::Ours],
            _ => &[Side::Ours, Side::Control],
        }
    }

    /// Whether ours and the control run side by side: the scenarios on management clusters of
    /// their own (a control plane and Cluster API per side), which mostly wait on Cluster API's
    /// timeouts; the control's side gets a simulated OpenStack of its own. The others share the
    /// accept control plane and run one side after the other.
    pub fn side_by_side(self) -> bool {
        matches!(self, Scenario::S5 | Scenario::S7 | Scenario::S8)
    }

    /// Whether it needs Cluster API (built into the cache as well).
    pub fn needs_cluster_api(self) -> bool {
        matches!(
            self,
            Scenario::S5 | Scenario::S6 | Scenario::S7 | Scenario::S8
        )
    }

    /// What the unpatched upstream binary is expected to do: fail S1, S2, S5, S7 and S8 (the bugs),
    /// pass S3 and S4 (its normal job); S6 does not run it.
    pub fn control_expected_to_pass(self) -> bool {
        matches!(self, Scenario::S3 | Scenario::S4 | Scenario::S6)
    }
}

impl std::fmt::Display for Scenario {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{self:?}")
    }
}

impl FromStr for Scenario {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Scenario::ALL
            .iter()
            .find(|x| x.to_string().eq_ignore_ascii_case(s))
            .copied()
            .ok_or_else(|| {
                let known: Vec<String> = Scenario::ALL.iter().map(|x| x.to_string()).collect();
                format!("unknown scenario `{s}` (known: {})", known.join(", "))
            })
    }
}

/// Which binary a run uses.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Side {
    /// The binary from the built image.
    Ours,
    /// The unpatched upstream build of the same tag.
    Control,
}

impl std::fmt::Display for Side {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Side::Ours => "ours",
            Side::Control => "control",
        })
    }
}

/// The stage name a reporter sees for a run (`S1 ours`).
pub fn stage_name(s: Scenario, side: Side) -> &'static str {
    match (s, side) {
        (Scenario::S1, Side::Ours) => "S1 ours",
        (Scenario::S1, Side::Control) => "S1 control",
        (Scenario::S2, Side::Ours) => "S2 ours",
        (Scenario::S2, Side::Control) => "S2 control",
        (Scenario::S3, Side::Ours) => "S3 ours",
        (Scenario::S3, Side::Control) => "S3 control",
        (Scenario::S4, Side::Ours) => "S4 ours",
        (Scenario::S4, Side::Control) => "S4 control",
        (Scenario::S5, Side::Ours) => "S5 ours",
        (Scenario::S5, Side::Control) => "S5 control",
        (Scenario::S6, Side::Ours) => "S6 ours",
        (Scenario::S6, Side::Control) => "S6 control",
        (Scenario::S7, Side::Ours) => "S7 ours",
        (Scenario::S7, Side::Control) => "S7 control",
        (Scenario::S8, Side::Ours) => "S8 ours",
        (Scenario::S8, Side::Control) => "S8 control",
    }
}

/// The outcome of one scenario on one binary.
#[derive(Debug, Clone, PartialEq, Serialize, serde::Deserialize)]
pub struct RunResult {
    /// Whether the scenario's criterion held.
    pub passed: bool,
    /// Whether the run showed the bug the scenario is about (what the control must show for a
    /// scenario it is expected to fail): for S1, S2 a failed criterion; for S5 no nodeRef and a
    /// remediation loop, which a merely failed criterion is not.
    pub bug_shown: bool,
    /// Seconds the scenario's own check took (to the deletion, the exit, the initialisation,
    /// or from the kill to S3 done); the deadline when it did not happen.
    pub seconds: f64,
    /// Seconds until a replica became leader (not part of `seconds`); `None` when none did
    /// or the scenario does not wait for it.
    pub leader_seconds: Option<f64>,
    /// The evidence: the log line or API state that decided it.
    pub evidence: String,
    /// Requests the simulated cloud did not simulate (answered 404), `METHOD URI`.
    pub unknown_requests: Vec<String>,
    /// The apiserver's refusal that decided a failure, when the OCCM's RBAC (the chart's
    /// ClusterRole) did not allow what the scenario needs, e.g. S1's
    /// `unable to delete node "gone-1": nodes "gone-1" is forbidden: … cannot delete resource "nodes" …`
    /// (upstream issue #3225, event `DeletingNodeFailed`). `None` otherwise.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub denied: Option<String>,
}

impl RunResult {
    fn pass(seconds: f64, evidence: String) -> Self {
        RunResult {
            passed: true,
            bug_shown: false,
            seconds,
            leader_seconds: None,
            evidence,
            unknown_requests: Vec::new(),
            denied: None,
        }
    }
    fn fail(seconds: f64, evidence: String) -> Self {
        RunResult {
            passed: false,
            bug_shown: true,
            ..RunResult::pass(seconds, evidence)
        }
    }
}

/// The parts a run uses.
pub(crate) struct Bench<'a> {
    pub(crate) cloud: &'a SimulatedCloud,
    pub(crate) kube: &'a Kube,
    pub(crate) kubeconfig: &'a Path,
    /// What S5 needs (control planes of its own, Cluster API); `None` when no scenario of the
    /// run needs Cluster API.
    pub(crate) capi: Option<CapiBench<'a>>,
}

/// What the Cluster API scenarios need beyond the shared cloud: each runs on a management cluster
/// of its own ([`crate::sim::capi::Management`]).
pub(crate) struct CapiBench<'a> {
    /// etcd and kube-apiserver.
    pub(crate) binaries: &'a crate::sim::control_plane::Binaries,
    /// Cluster API's manager and CRDs.
    pub(crate) manager: &'a crate::sim::capi::Manager,
    /// The simulated OpenStack (its state is reset per side).
    pub(crate) cloud: &'a SimulatedCloud,
    /// The Kubernetes version (`v1.34.1`) of the workers' MachineSet.
    pub(crate) kubernetes: &'a str,
    /// The chart OCCM runs under on each management cluster.
    pub(crate) chart: &'a crate::sim::chart::Chart,
    /// The image references S6 writes.
    pub(crate) images: resource_set::Images,
}

/// Writes the simulated cloud's request log of a run to `path` when dropped.
struct RequestLog<'a> {
    cloud: &'a SimulatedCloud,
    path: std::path::PathBuf,
}

impl Drop for RequestLog<'_> {
    fn drop(&mut self) {
        let log: String = self
            .cloud
            .requests()
            .iter()
            .map(|r| format!("{r}\n"))
            .collect();
        let _ = std::fs::write(&self.path, log);
    }
}

/// One OCCM process.
pub(crate) struct Replica {
    proc: Process,
    secure_port: u16,
}

impl Replica {
    fn log(&self) -> String {
        self.proc.log_text()
    }
    fn name(&self) -> &str {
        &self.proc.name
    }
}

/// The arguments the Helm chart gives OCCM (charts/openstack-cloud-controller-manager
/// templates/daemonset.yaml and values.yaml: `--v=2`, `--cluster-name=kubernetes`, the default
/// `enabledControllers`), plus what running outside a Pod needs: `--kubeconfig` (in a Pod the
/// in-cluster config), `--leader-elect=true` (the default, explicit), a free `--secure-port`,
/// `--authentication-skip-lookup=true` (no kube-system/extension-apiserver-authentication
/// ConfigMap is published by this control plane's authenticators) and `--webhook-secure-port=0`:
/// k8s.io/cloud-provider v0.31 (OCCM 1.31) binds the webhook port 10260 on every address even
/// with no webhook enabled (options/webhook.go `ApplyTo`), so replicas on one host, as in S4,
/// would collide where a DaemonSet's are on different nodes; v0.32 and later bind nothing
/// without webhooks, so the flag changes nothing for them.
pub fn occm_args(cloud_conf: &Path, kubeconfig: &Path, secure_port: u16) -> Vec<String> {
    vec![
        "--v=2".into(),
        format!("--cloud-config={}", cloud_conf.display()),
        "--cluster-name=kubernetes".into(),
        "--cloud-provider=openstack".into(),
        "--use-service-account-credentials=false".into(),
        "--controllers=cloud-node,cloud-node-lifecycle,route,service".into(),
        "--bind-address=127.0.0.1".into(),
        format!("--secure-port={secure_port}"),
        format!("--kubeconfig={}", kubeconfig.display()),
        "--leader-elect=true".into(),
        "--authentication-skip-lookup=true".into(),
        "--webhook-secure-port=0".into(),
    ]
}

fn start_replica(
    binary: &Path,
    name: &str,
    dir: &Path,
    cloud_conf: &Path,
    kubeconfig: &Path,
    extra: &[&str],
) -> Result<Replica, AcceptError> {
    let log = dir.join(format!("{}.log", name.replace(' ', "-")));
    spawn_occm(binary, name, dir, cloud_conf, kubeconfig, &log, extra)
}

/// Starts one OCCM process `name` in `dir` with [`occm_args`] and then `extra` on a free secure
/// port and a clean environment, its output in `log`.
///
/// Errors: [`AcceptError::Occm`] naming `name` when no port is free or it cannot be started.
fn spawn_occm(
    binary: &Path,
    name: &str,
    dir: &Path,
    cloud_conf: &Path,
    kubeconfig: &Path,
    log: &Path,
    extra: &[&str],
) -> Result<Replica, AcceptError> {
    let part = |m: String| AcceptError::Occm {
        name: name.to_string(),
        message: m,
    };
    let port = free_port().map_err(|e| part(format!("no free port: {e}")))?;
    let mut cmd = Command::new(binary);
    // A clean environment: OCCM and gophercloud read OS_* variables.
    cmd.current_dir(dir)
        .env_clear()
        .env("PATH", "/usr/bin:/bin")
        .env("HOME", dir)
        .args(occm_args(cloud_conf, kubeconfig, port))
        .args(extra);
    let proc = Process::spawn(name, cmd, log)
        .map_err(|e| part(format!("cannot start {}: {e}", binary.display())))?;
    Ok(Replica {
        proc,
        secure_port: port,
    })
}

/// The first line of `text` containing `needle`, as a klog message.
fn line_with<'t>(text: &'t str, needle: &str) -> Option<&'t str> {
    text.lines().find(|l| l.contains(needle)).map(klog_message)
}

fn count(text: &str, needle: &str) -> usize {
    text.lines().filter(|l| l.contains(needle)).count()
}

/// The first replica (other than those in `except`) that has exited, as evidence.
fn crashed(reps: &mut [Replica], except: &[usize]) -> Option<String> {
    for (i, r) in reps.iter_mut().enumerate() {
        if except.contains(&i) {
            continue;
        }
        if let Some(status) = r.proc.exited() {
            return Some(format!(
                "{} exited ({status}) where it must keep running: `{}`",
                r.name(),
                last_error(&r.log())
            ));
        }
    }
    None
}

/// Waits until a replica not in `except` logs that it acquired the Lease; its index, or the
/// failure evidence.
async fn wait_leader(reps: &mut [Replica], except: &[usize]) -> Result<usize, String> {
    let start = Instant::now();
    loop {
        for (i, r) in reps.iter().enumerate() {
            if !except.contains(&i) && became_leader(&r.log()) {
                return Ok(i);
            }
        }
        if let Some(c) = crashed(reps, except) {
            return Err(format!("before any replica became leader: {c}"));
        }
        if start.elapsed() >= LEADER_DEADLINE {
            let last = reps
                .iter()
                .enumerate()
                .find(|(i, _)| !except.contains(i))
                .map(|(_, r)| last_error(&r.log()))
                .unwrap_or_default();
            return Err(format!(
                "no replica became leader within {} s: `{last}`",
                LEADER_DEADLINE.as_secs()
            ));
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

fn cloud_state(s: Scenario) -> (CloudState, Vec<Server>) {
    let new1 = Server::active("8e2d5d8c-0b3a-4f2e-9d41-1c0a5e7f0001", "new-1", "10.0.0.11");
    let new2 = Server::active("8e2d5d8c-0b3a-4f2e-9d41-1c0a5e7f0002", "new-2", "10.0.0.12");
    let servers = match s {
        Scenario::S1 | Scenario::S2 | Scenario::S5 | Scenario::S6 | Scenario::S7 | Scenario::S8 => {
            vec![]
        }
        Scenario::S3 => vec![new1],
        Scenario::S4 => vec![new1, new2],
    };
    (
        CloudState {
            compute_in_catalog: s != Scenario::S2,
            tokens_without_compute: 0,
            servers: servers.clone(),
        },
        servers,
    )
}

/// Runs `scenario` on `binary` in `dir`: resets the cluster and the cloud, starts the
/// replica(s), checks, and stops every replica it started.
///
/// A misbehaving OCCM (crash, missing log line, deadline) is a failed [`RunResult`]; only a
/// fault of the bench itself (the API refuses a request, a process cannot start) is an error.
pub(crate) async fn run(
    bench: &Bench<'_>,
    scenario: Scenario,
    binary: &Path,
    dir: &Path,
) -> Result<RunResult, AcceptError> {
    std::fs::create_dir_all(dir).map_err(|e| AcceptError::Io(format!("{}: {e}", dir.display())))?;
    // The shared control plane is the scenario's cluster only for S1-S4 (the others run on
    // management clusters of their own, possibly two at once).
    if !scenario.needs_cluster_api() {
        bench.kube.reset().await?;
    }
    let (state, servers) = cloud_state(scenario);
    bench.cloud.set_state(state);
    // Written when the run ends, however it ends (also when an interrupt drops it).
    let _request_log = RequestLog {
        cloud: bench.cloud,
        path: dir.join("openstack-requests.log"),
    };
    let cloud_conf = dir.join("cloud.conf");
    std::fs::write(&cloud_conf, bench.cloud.cloud_conf())
        .map_err(|e| AcceptError::Io(format!("{}: {e}", cloud_conf.display())))?;
    let mut reps: Vec<Replica> = Vec::new();
    let ctx = Ctx {
        bench,
        binary,
        dir,
        cloud_conf: &cloud_conf,
    };
    let result = match scenario {
        Scenario::S1 => s1(&ctx, &mut reps).await,
        Scenario::S2 => s2(&ctx, &mut reps).await,
        Scenario::S3 => s3(&ctx, &mut reps, &servers[0]).await,
        Scenario::S4 => s4(&ctx, &mut reps, &servers).await,
        // On control planes of its own; the servers come from its infrastructure provider.
        // On management clusters of their own; the servers come from the infrastructure
        // provider.
        Scenario::S5 => {
            remediation::run(capi(bench, scenario)?, binary, dir, Fault::FirstToken).await
        }
        Scenario::S6 => {
            let capi = capi(bench, scenario)?;
            resource_set::run(capi, &capi.images, dir).await
        }
        Scenario::S7 => {
            remediation::run(capi(bench, scenario)?, binary, dir, Fault::Permanent).await
        }
        Scenario::S8 => {
            remediation::run(
                capi(bench, scenario)?,
                binary,
                dir,
                Fault::MagnumHealthCheck,
            )
            .await
        }
    };
    for r in &mut reps {
        let _ = r.proc.stop(Duration::from_secs(5)).await;
    }
    let requests = bench.cloud.requests();
    let mut result = result?;
    result.unknown_requests = requests
        .iter()
        .filter(|r| r.unknown)
        .map(|r| format!("{} {}", r.method, r.uri))
        .fold(Vec::new(), |mut acc, r| {
            if !acc.contains(&r) {
                acc.push(r);
            }
            acc
        });
    Ok(result)
}

/// What the Cluster API scenarios need, or the error that it was not prepared.
fn capi<'b>(bench: &'b Bench<'_>, scenario: Scenario) -> Result<&'b CapiBench<'b>, AcceptError> {
    bench.capi.as_ref().ok_or_else(|| AcceptError::Input {
        part: scenario.to_string(),
        message: "Cluster API was not prepared for this run".into(),
    })
}

struct Ctx<'a> {
    bench: &'a Bench<'a>,
    binary: &'a Path,
    dir: &'a Path,
    cloud_conf: &'a PathBuf,
}

impl Ctx<'_> {
    fn start(&self, name: &str) -> Result<Replica, AcceptError> {
        self.start_with(name, &[])
    }
    fn start_with(&self, name: &str, extra: &[&str]) -> Result<Replica, AcceptError> {
        start_replica(
            self.binary,
            name,
            self.dir,
            self.cloud_conf,
            self.bench.kubeconfig,
            extra,
        )
    }
}

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
async fn s1(c: &Ctx<'_>, reps: &mut Vec<Replica>) -> Result<RunResult, AcceptError> {
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

async fn s2(c: &Ctx<'_>, reps: &mut Vec<Replica>) -> Result<RunResult, AcceptError> {
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

/// `GET https://127.0.0.1:<port>/healthz` on OCCM's secure port (a self-signed certificate of
/// its own): the body, or the failure.
async fn healthz(port: u16) -> String {
    let client = match reqwest::Client::builder()
        .tls_danger_accept_invalid_certs(true)
        .timeout(Duration::from_secs(5))
        .build()
    {
        Ok(c) => c,
        Err(e) => return format!("(no client: {e})"),
    };
    match client
        .get(format!("https://127.0.0.1:{port}/healthz"))
        .send()
        .await
    {
        Ok(r) => {
            let status = r.status().as_u16();
            let body = r.text().await.unwrap_or_default();
            if status == 200 {
                shorten(body.trim(), 40)
            } else {
                format!("{status} {}", shorten(body.trim(), 80))
            }
        }
        Err(e) => format!("unreachable ({e})"),
    }
}

/// Creates a tainted Node for `server` and waits until OCCM has initialised it; the seconds,
/// or the failure evidence.
async fn initialise(
    c: &Ctx<'_>,
    reps: &mut [Replica],
    except: &[usize],
    server: &Server,
) -> Result<Result<(f64, String), String>, AcceptError> {
    c.bench.kube.create_node(&server.name, true).await?;
    let t0 = Instant::now();
    let mut last = NodeInit::default();
    loop {
        if let Some(node) = c.bench.kube.node(&server.name).await? {
            last = NodeInit::of(&node);
            if last.done(&server.id, &server.fixed_ip) {
                return Ok(Ok((t0.elapsed().as_secs_f64(), last.describe())));
            }
        }
        if let Some(e) = crashed(reps, except) {
            return Ok(Err(e));
        }
        if t0.elapsed() >= DEADLINE {
            let log: String = reps
                .iter()
                .enumerate()
                .filter(|(i, _)| !except.contains(i))
                .map(|(_, r)| r.log())
                .collect();
            return Ok(Err(format!(
                "Node {} after {} s: {}; last error: `{}`",
                server.name,
                DEADLINE.as_secs(),
                last.describe(),
                last_error(&log)
            )));
        }
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
}

async fn s3(
    c: &Ctx<'_>,
    reps: &mut Vec<Replica>,
    server: &Server,
) -> Result<RunResult, AcceptError> {
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

async fn s4(
    c: &Ctx<'_>,
    reps: &mut Vec<Replica>,
    servers: &[Server],
) -> Result<RunResult, AcceptError> {
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

    #[test]
    fn scenarios_parse_and_name_their_stages() {
        assert_eq!("s2".parse::<Scenario>().unwrap(), Scenario::S2);
        assert_eq!("s5".parse::<Scenario>().unwrap(), Scenario::S5);
        assert!(
            "S9".parse::<Scenario>()
                .unwrap_err()
                .ends_with("(known: S1, S2, S3, S4, S5, S6, S7, S8)")
        );
        assert_eq!(Scenario::ALL.last(), Some(&Scenario::S8));
        assert_eq!(Scenario::S6.sides(), [Side::Ours]);
        assert_eq!(Scenario::S5.sides(), [Side::Ours, Side::Control]);
        assert!(Scenario::S6.needs_cluster_api());
        assert_eq!(stage_name(Scenario::S4, Side::Control), "S4 control");
        assert!(!Scenario::S1.control_expected_to_pass());
        assert!(Scenario::S3.control_expected_to_pass());
    }

    #[test]
    fn leadership_is_read_from_old_and_structured_klog_lines() {
        assert!(became_leader(
            "I1201 09:00:00.1 1 leaderelection.go:271] successfully acquired lease kube-system/cloud-controller-manager\n"
        ));
        assert!(became_leader(
            "I1201 11:23:06.649760 18971 leaderelection.go:272] \"Successfully acquired lease\" lock=\"kube-system/cloud-controller-manager\"\n"
        ));
        assert!(!became_leader(
            "I1201 11:23:06.642743 18971 leaderelection.go:258] \"Attempting to acquire leader lease...\" lock=\"kube-system/cloud-controller-manager\"\n"
        ));
    }

    #[test]
    fn the_chart_arguments_are_used() {
        let a = occm_args(Path::new("/c/cloud.conf"), Path::new("/k"), 4242);
        for want in [
            "--cloud-provider=openstack",
            "--cloud-config=/c/cloud.conf",
            "--kubeconfig=/k",
            "--leader-elect=true",
            "--use-service-account-credentials=false",
            "--secure-port=4242",
            "--bind-address=127.0.0.1",
            "--controllers=cloud-node,cloud-node-lifecycle,route,service",
            "--webhook-secure-port=0",
        ] {
            assert!(a.iter().any(|x| x == want), "{want} missing from {a:?}");
        }
    }
}
