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
//!
//! Each scenario is data ([`Spec`]) in a file of its own (`s1.rs` … `s8.rs`: its `SCENARIO` and
//! its run), listed once by [`register!`]: a new scenario is its file and one word there. The
//! Cluster API runs they share are [`remediation`] (S5, S7, S8) and [`resource_set`] (S6).

use std::path::{Path, PathBuf};
use std::process::Command;
use std::str::FromStr;
use std::time::{Duration, Instant};

use serde::Serialize;

pub mod remediation;
pub mod resource_set;

use super::sim::cloud::{CloudState, Server, SimulatedCloud};
use super::sim::kube::{Kube, NodeInit, Nodes as _};
use super::sim::process::{Process, free_port, klog_message, last_error, shorten};
use occm_forge_core::pipeline::acceptance::AcceptError;

/// How long a scenario's own check may take (S1 deletion, S2 exit, S3 initialisation, S4
/// failover), counted from its start.
pub const DEADLINE: Duration = Duration::from_secs(60);
/// How long an OCCM may take to become leader (counted apart from the scenario's own time).
pub const LEADER_DEADLINE: Duration = Duration::from_secs(60);
/// The line the node lifecycle controller logs when `InstanceExists` returns an error
/// (k8s.io/cloud-provider controllers/nodelifecycle: `error checking if node %s exists: %v`).
pub const CHECKING_LINE: &str = "error checking if node";
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

/// A scenario as data: everything the run, the report and the table ask of it. Each scenario is
/// a file of this module (`s1.rs` … `s8.rs`) holding its `SCENARIO` and its run; [`register!`]
/// lists them, once.
pub struct Spec {
    /// Its name, `S1` … (what images.toml's `shown_by` and the digest manifest's
    /// `accepted_scenarios` say).
    pub name: &'static str,
    /// One line for tables.
    pub title: &'static str,
    /// What a pass of ours means (the report states it per scenario).
    pub pass_means: &'static str,
    /// What its row shows when the control shows the bug and ours passes.
    pub fix_shows: &'static str,
    /// The sides it runs on: ours then the control, or ours alone.
    pub sides: &'static [Side],
    /// Whether ours and the control run side by side: on management clusters of their own (a
    /// control plane and Cluster API per side), which mostly wait on Cluster API's timeouts;
    /// the control's side gets a simulated OpenStack of its own. The others share the accept
    /// control plane and run one side after the other.
    pub side_by_side: bool,
    /// Whether it needs Cluster API (built into the cache as well).
    pub needs_cluster_api: bool,
    /// What the unpatched upstream binary is expected to do: pass (its normal job) or fail
    /// (the bug).
    pub control_expected_to_pass: bool,
    /// The stage names a reporter sees, ours and the control's (`S1 ours`, `S1 control`).
    pub stage_names: [&'static str; 2],
    /// Whether the simulated Keystone's catalog has compute.
    pub compute_in_catalog: bool,
    /// The Nova servers the simulated cloud starts with.
    pub(crate) servers: fn() -> Vec<Server>,
    /// The run on one binary, the replicas it starts pushed for [`run`] to stop.
    pub(crate) run: RunFn,
}

/// A scenario's run: the context and the replicas it starts.
pub(crate) type RunFn = for<'r, 'c> fn(
    &'r Ctx<'c>,
    &'r mut Vec<Replica>,
) -> std::pin::Pin<
    Box<dyn std::future::Future<Output = Result<RunResult, AcceptError>> + Send + 'r>,
>;

/// Both sides, ours first.
pub const BOTH: &[Side] = &[Side::Ours, Side::Control];
/// What most rows show when the fix works.
pub const FIX_SHOWS: &str = "the fix: upstream fails, ours passes";

/// No servers.
fn no_servers() -> Vec<Server> {
    Vec::new()
}

/// The active Nova server `new-<n>` (S3's, and S4's two), at `10.0.0.1<n>`.
fn new_server(n: u8) -> Server {
    Server::active(
        &format!("8e2d5d8c-0b3a-4f2e-9d41-1c0a5e7f000{n}"),
        &format!("new-{n}"),
        &format!("10.0.0.1{n}"),
    )
}

/// One acceptance scenario: a handle on its [`Spec`], compared, ordered and written by name
/// (`S1`), in the order [`Scenario::ALL`] lists them.
#[derive(Clone, Copy)]
pub struct Scenario(&'static Spec);

/// Each scenario's module, once: `pub mod sN;` and its `SCENARIO` in [`Scenario::ALL`], in order.
macro_rules! register {
    ($($m:ident),* $(,)?) => {
        $(pub mod $m;)*
        impl Scenario {
            /// Every scenario, in order.
            pub const ALL: &'static [Scenario] = &[$($m::SCENARIO),*];
        }
    };
}

register!(s1, s2, s3, s4, s5, s6, s7, s8);

impl Scenario {
    /// Its name, `S1` ….
    pub fn name(self) -> &'static str {
        self.0.name
    }

    /// One line for tables.
    pub fn title(self) -> &'static str {
        self.0.title
    }

    /// What a pass of ours means.
    pub fn pass_means(self) -> &'static str {
        self.0.pass_means
    }

    /// What its row shows when the control shows the bug and ours passes.
    pub fn fix_shows(self) -> &'static str {
        self.0.fix_shows
    }

    /// The sides it runs on.
    pub fn sides(self) -> &'static [Side] {
        self.0.sides
    }

    /// See [`Spec::side_by_side`].
    pub fn side_by_side(self) -> bool {
        self.0.side_by_side
    }

    /// Whether it needs Cluster API.
    pub fn needs_cluster_api(self) -> bool {
        self.0.needs_cluster_api
    }

    /// Whether the unpatched control is expected to pass it.
    pub fn control_expected_to_pass(self) -> bool {
        self.0.control_expected_to_pass
    }

    /// The stage name a reporter sees for a run on `side` (`S1 ours`).
    pub fn stage_name(self, side: Side) -> &'static str {
        match side {
            Side::Ours => self.0.stage_names[0],
            Side::Control => self.0.stage_names[1],
        }
    }

    /// Its place in [`Scenario::ALL`].
    fn position(self) -> usize {
        Scenario::ALL
            .iter()
            .position(|s| s.0.name == self.0.name)
            .unwrap_or(usize::MAX)
    }
}

impl PartialEq for Scenario {
    fn eq(&self, other: &Self) -> bool {
        self.0.name == other.0.name
    }
}

impl Eq for Scenario {}

impl PartialOrd for Scenario {
    fn partial_cmp(&self, other: &Self) -> Option<std::cmp::Ordering> {
        Some(self.cmp(other))
    }
}

impl Ord for Scenario {
    fn cmp(&self, other: &Self) -> std::cmp::Ordering {
        self.position().cmp(&other.position())
    }
}

impl std::hash::Hash for Scenario {
    fn hash<H: std::hash::Hasher>(&self, state: &mut H) {
        self.0.name.hash(state);
    }
}

impl std::fmt::Debug for Scenario {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.0.name)
    }
}

impl std::fmt::Display for Scenario {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.0.name)
    }
}

impl Serialize for Scenario {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(self.0.name)
    }
}

impl<'de> serde::Deserialize<'de> for Scenario {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let name = String::deserialize(d)?;
        name.parse().map_err(serde::de::Error::custom)
    }
}

impl FromStr for Scenario {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Scenario::ALL
            .iter()
            .find(|x| x.0.name.eq_ignore_ascii_case(s))
            .copied()
            .ok_or_else(|| {
                let known: Vec<&str> = Scenario::ALL.iter().map(|x| x.0.name).collect();
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
    s.stage_name(side)
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
    let servers = (scenario.0.servers)();
    bench.cloud.set_state(CloudState {
        compute_in_catalog: scenario.0.compute_in_catalog,
        tokens_without_compute: 0,
        servers: servers.clone(),
    });
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
        scenario,
        binary,
        dir,
        cloud_conf: &cloud_conf,
        servers,
    };
    let result = (scenario.0.run)(&ctx, &mut reps).await;
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

/// What a scenario's run is given.
pub(crate) struct Ctx<'a> {
    bench: &'a Bench<'a>,
    /// The scenario.
    scenario: Scenario,
    binary: &'a Path,
    dir: &'a Path,
    cloud_conf: &'a PathBuf,
    /// The Nova servers the simulated cloud started with ([`Spec::servers`]).
    servers: Vec<Server>,
}

impl Ctx<'_> {
    /// What the Cluster API scenarios need, or the error that it was not prepared.
    fn capi(&self) -> Result<&CapiBench<'_>, AcceptError> {
        capi(self.bench, self.scenario)
    }
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn scenarios_parse_and_name_their_stages() {
        assert_eq!("s2".parse::<Scenario>().unwrap(), s2::SCENARIO);
        assert_eq!("s5".parse::<Scenario>().unwrap(), s5::SCENARIO);
        assert!(
            "S9".parse::<Scenario>()
                .unwrap_err()
                .ends_with("(known: S1, S2, S3, S4, S5, S6, S7, S8)")
        );
        assert_eq!(Scenario::ALL.last(), Some(&s8::SCENARIO));
        assert_eq!(s6::SCENARIO.sides(), [Side::Ours]);
        assert_eq!(s5::SCENARIO.sides(), [Side::Ours, Side::Control]);
        assert!(s6::SCENARIO.needs_cluster_api());
        assert_eq!(stage_name(s4::SCENARIO, Side::Control), "S4 control");
        assert!(!s1::SCENARIO.control_expected_to_pass());
        assert!(s3::SCENARIO.control_expected_to_pass());
        // In order, each named as its file, its stages named after it, compared by name.
        for (i, s) in Scenario::ALL.iter().enumerate() {
            assert_eq!(s.name(), format!("S{}", i + 1));
            assert_eq!(s.stage_name(Side::Ours), format!("{s} ours"));
            assert_eq!(s.stage_name(Side::Control), format!("{s} control"));
            assert!(i == 0 || Scenario::ALL[i - 1] < *s);
            assert!(!s.title().is_empty() && !s.pass_means().is_empty());
        }
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
