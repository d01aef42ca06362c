//! `clusters --fix`: the rewrites [`super::assess`] decided, written with the resourceVersion
//! that was read, and `--watch`: the same again whenever a resource-set Secret or a Cluster
//! changes (magnum-cluster-api's `coe cluster upgrade` writes both in one call).

use std::path::Path;
use std::time::{Duration, Instant};

use futures::StreamExt as _;
use serde::Serialize;

use super::read::{ADDONS_GROUP, CLUSTER_GROUP, Fleet, RESOURCE_SET_TYPE, binding_hash, observe};
use super::{Action, ClustersError, Observed, Row, assess};
use crate::consumers::render::crs_secret::{self, RewriteOptions};
use crate::digest_manifest::DigestManifest;
use crate::kubernetes::{Kube, KubeError, collection};

/// What became of one rewrite.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(tag = "outcome", rename_all = "kebab-case")]
pub enum Outcome {
    /// Written; not waited for.
    Written,
    /// Written, and Cluster API applied it (the binding records the new hash) after this many
    /// seconds.
    Applied {
        /// Seconds from the write.
        seconds: f64,
    },
    /// Written, but the binding did not record the new hash within the wait.
    NotApplied {
        /// The hash the binding records.
        binding_hash: Option<String>,
    },
    /// The Secret changed since it was read (409 Conflict): nothing written; the next pass reads
    /// it again.
    Conflict,
    /// Written, then replaced by a newer revision (the driver's `coe cluster upgrade` writing the
    /// Secret again) before Cluster API applied it: the wait ends at once, and a watch reads and
    /// pins the new revision without waiting for the next event.
    Superseded {
        /// The resourceVersion the Secret has now.
        resource_version: String,
        /// Seconds from the write.
        seconds: f64,
    },
    /// The rewrite or the write failed.
    Failed {
        /// Why, in one line.
        reason: String,
    },
}

/// One rewrite of a cluster's Secret.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Fixed {
    /// `namespace/name` of the Cluster.
    pub cluster: String,
    /// The Secret.
    pub secret: String,
    /// The image it ran.
    pub from: String,
    /// The image written.
    pub to: String,
    /// What changed in the chart's ClusterRole besides (`delete` on nodes restored), if anything.
    pub rbac: Option<String>,
    /// The hash Cluster API will record once it applied the new content.
    pub hash: String,
    /// What happened.
    pub outcome: Outcome,
}

impl Fixed {
    /// Whether it ended as intended (written, and applied when waited for).
    pub fn succeeded(&self) -> bool {
        matches!(self.outcome, Outcome::Written | Outcome::Applied { .. })
    }

    /// One line for the log or stdout.
    pub fn describe(&self) -> String {
        let what = format!(
            "{}: Secret {} {} → {}{}",
            self.cluster,
            self.secret,
            self.from,
            self.to,
            self.rbac
                .as_deref()
                .map(|c| format!(" ({c})"))
                .unwrap_or_default()
        );
        match &self.outcome {
            Outcome::Written => format!("{what}: written (binding hash to come: {})", self.hash),
            Outcome::Applied { seconds } => format!(
                "{what}: applied by Cluster API after {seconds:.1} s (binding hash {})",
                self.hash
            ),
            Outcome::NotApplied { binding_hash } => format!(
                "{what}: written, but the ClusterResourceSetBinding still records {} (expected {})",
                binding_hash.as_deref().unwrap_or("nothing"),
                self.hash
            ),
            Outcome::Conflict => {
                format!("{what}: the Secret changed since it was read (409 Conflict), not written")
            }
            Outcome::Superseded {
                resource_version,
                seconds,
            } => format!(
                "{what}: written, then replaced by a newer revision of the Secret (resourceVersion {resource_version}) after {seconds:.1} s, before Cluster API applied it; read again"
            ),
            Outcome::Failed { reason } => format!("{what}: failed: {reason}"),
        }
    }
}

/// Options of [`fix`].
#[derive(Debug, Clone, Default)]
pub struct FixOptions {
    /// Wait this long per cluster for the binding to record the new hash (all clusters at
    /// once: one that never applies delays no other).
    pub wait: Option<Duration>,
}

/// How many times one pass pins again a Secret that a newer revision replaced during the wait
/// (the driver's `coe cluster upgrade` writes it again); past that, the outcome stays
/// [`Outcome::Superseded`] and a watch reads everything again.
const REPINS: usize = 3;

/// Rewrites the Secret of every row whose action is [`Action::Rewrite`] (rows and `fleet`'s
/// clusters in the same order, as [`assess`] gives them): `render --format crs-secret`'s edit of
/// the Secret as read, a `PUT` with its resourceVersion, then with `opts.wait` polling the
/// Cluster's ClusterResourceSetBinding every 500 ms for the new hash. All rewrites run at once,
/// so a cluster whose binding never records the hash (Cluster API cannot reach its workload
/// cluster) delays no other. A Secret replaced by a newer revision during the wait is read
/// again and pinned again at once (up to [`REPINS`] times, within the same wait). Other rows
/// are left alone. A failure of one cluster is its [`Outcome`]; the others go on. `on_fixed`
/// hears of each rewrite as soon as it is done (a watch logs it at once, not at the end of the
/// pass); the result is in the rows' order, each cluster's rewrites in the order they happened.
pub async fn fix(
    kube: &Kube,
    fleet: &Fleet,
    rows: &[Row],
    opts: &FixOptions,
    on_fixed: &mut (dyn FnMut(&Fixed) + Send),
) -> Vec<Fixed> {
    let (tx, mut rx) = futures::channel::mpsc::unbounded::<(usize, Fixed)>();
    let mut tasks = futures::stream::FuturesUnordered::new();
    for (i, job) in jobs(fleet, rows).into_iter().enumerate() {
        let tx = tx.clone();
        tasks.push(settle(kube, job, opts.wait, move |f| {
            let _ = tx.unbounded_send((i, f));
        }));
    }
    drop(tx);
    let mut out: Vec<(usize, Fixed)> = Vec::new();
    let receive = async {
        while let Some((i, fixed)) = rx.next().await {
            on_fixed(&fixed);
            out.push((i, fixed));
        }
    };
    let drive = async { while tasks.next().await.is_some() {} };
    futures::join!(drive, receive);
    // Stable: each cluster's rewrites stay in the order they happened.
    out.sort_by_key(|(i, _)| *i);
    out.into_iter().map(|(_, f)| f).collect()
}

/// One cluster's rewrite, with everything it needs owned (a watch keeps it running across
/// passes).
struct Job {
    cluster: Observed,
    row: Row,
    set: super::OccmSet,
    image: String,
    restore_node_delete: bool,
    addons_version: String,
}

/// The rewrites `rows` ask for, in their order.
fn jobs(fleet: &Fleet, rows: &[Row]) -> Vec<Job> {
    fleet
        .clusters
        .iter()
        .zip(rows)
        .filter_map(|(c, row)| {
            let Action::Rewrite {
                image,
                restore_node_delete,
            } = &row.action
            else {
                return None;
            };
            let set = c
                .sets
                .iter()
                .find(|s| s.secret == row.secret)
                .expect("the row's Secret is one of the cluster's sets")
                .clone();
            Some(Job {
                cluster: c.clone(),
                row: row.clone(),
                set,
                image: image.clone(),
                restore_node_delete: *restore_node_delete,
                addons_version: fleet.addons_version.clone(),
            })
        })
        .collect()
}

/// Runs `job`: the rewrite, the wait (at most `wait` in all), and while the Secret is replaced
/// by a newer revision during the wait, the Secret read again and pinned again (up to
/// [`REPINS`] times). Each rewrite goes to `report` as it ends; returns whether the last one
/// was superseded still.
async fn settle(
    kube: &Kube,
    job: Job,
    wait: Option<Duration>,
    report: impl Fn(Fixed),
) -> (String, bool) {
    let started = Instant::now();
    let c = &job.cluster;
    let mut object = job.set.object.clone();
    let mut version = job.set.resource_version.clone();
    let mut from = job.row.image.clone();
    let path = format!(
        "{}/{}",
        collection("", "v1", &c.namespace, "secrets"),
        job.set.secret
    );
    for repin in 0..=REPINS {
        let target = Target {
            set: &job.set.resource_set,
            object: &object,
            resource_version: &version,
            from: &from,
            addons_version: &job.addons_version,
        };
        let left = wait.map(|w| w.saturating_sub(started.elapsed()));
        let fixed = rewrite(
            kube,
            c,
            &job.row,
            &target,
            (&job.image, job.restore_node_delete),
            left,
        )
        .await;
        let superseded = matches!(fixed.outcome, Outcome::Superseded { .. });
        report(fixed);
        if !superseded || repin == REPINS {
            return (c.id(), superseded);
        }
        // Read the newer revision and pin it now, whatever the other clusters do.
        match kube.get(&path).await {
            Ok(Some(now)) => {
                version = now["metadata"]["resourceVersion"]
                    .as_str()
                    .unwrap_or_default()
                    .to_string();
                from = crs_secret::occm_image(&now.to_string()).unwrap_or_else(|e| e.0);
                object = now;
            }
            Ok(None) => return (c.id(), false),
            Err(e) => {
                tracing::warn!("{}: {e}", c.id());
                return (c.id(), true);
            }
        }
    }
    unreachable!("the loop returns at its last round")
}

/// The Secret one rewrite starts from: its set, its content and resourceVersion as read, and
/// the image it runs.
struct Target<'a> {
    set: &'a str,
    object: &'a serde_json::Value,
    resource_version: &'a str,
    from: &'a str,
    /// The version of Cluster API's addons group the apiserver serves.
    addons_version: &'a str,
}

/// One rewrite of `target`: `image`, and `delete` on nodes restored when `restore_node_delete`;
/// then, with `wait`, the wait for Cluster API to apply it.
async fn rewrite(
    kube: &Kube,
    c: &Observed,
    row: &Row,
    target: &Target<'_>,
    (image, restore_node_delete): (&str, bool),
    wait: Option<Duration>,
) -> Fixed {
    let mut fixed = Fixed {
        cluster: row.cluster.clone(),
        secret: row.secret.clone(),
        from: target.from.to_string(),
        to: image.to_string(),
        rbac: None,
        hash: String::new(),
        outcome: Outcome::Written,
    };
    let written = crs_secret::rewrite_secret(
        &target.object.to_string(),
        &RewriteOptions {
            image: image.to_string(),
            // `assess` chose the image serving the minor the control plane runs.
            allow_skew: true,
            cluster_minor: row.minor,
            control_plane_read: true,
            node_delete: restore_node_delete.then_some(true),
            ..RewriteOptions::default()
        },
    );
    let out = match written {
        Ok(o) => o,
        Err(e) => {
            fixed.outcome = Outcome::Failed { reason: e.0 };
            return fixed;
        }
    };
    fixed.hash = out.hash.clone();
    fixed.rbac = out.rbac_change.clone();
    let mut object: serde_json::Value =
        serde_norway::from_str(&out.secret).expect("crs-secret writes YAML that parses");
    object["metadata"]["resourceVersion"] = target.resource_version.into();
    let path = format!(
        "{}/{}",
        collection("", "v1", &c.namespace, "secrets"),
        row.secret
    );
    let (written_version, stored) = match kube.replace(&path, object).await {
        Ok(o) => (
            o["metadata"]["resourceVersion"]
                .as_str()
                .unwrap_or_default()
                .to_string(),
            o["data"].clone(),
        ),
        Err(e) if e.code() == Some(409) => {
            fixed.outcome = Outcome::Conflict;
            return fixed;
        }
        Err(e) => {
            fixed.outcome = Outcome::Failed {
                reason: e.to_string(),
            };
            return fixed;
        }
    };
    if let Some(limit) = wait {
        let written = Written {
            set: target.set,
            path: &path,
            resource_version: &written_version,
            data: &stored,
        };
        fixed.outcome = wait_applied(kube, target.addons_version, c, &written, &fixed, limit).await;
    }
    fixed
}

/// A Secret as written: its set, its API path, the resourceVersion the write gave it and the
/// `data` the apiserver stored.
struct Written<'a> {
    set: &'a str,
    path: &'a str,
    resource_version: &'a str,
    data: &'a serde_json::Value,
}

/// Polls the Cluster's binding until it records `fixed.hash` for its Secret, at most `limit`;
/// ends early, [`Outcome::Superseded`], when a newer revision of the Secret holds other `data`
/// (a driver's write). A newer revision with the same `data` — metadata only, such as the owner
/// reference Cluster API's ClusterResourceSet controller adds to the Secrets it applies — is
/// waited on as the one written.
async fn wait_applied(
    kube: &Kube,
    addons_version: &str,
    c: &Observed,
    written: &Written<'_>,
    fixed: &Fixed,
    limit: Duration,
) -> Outcome {
    let set = written.set;
    let path = format!(
        "{}/{}",
        collection(
            ADDONS_GROUP,
            addons_version,
            &c.namespace,
            "clusterresourcesetbindings"
        ),
        c.name
    );
    let t = Instant::now();
    let mut last = None;
    let mut seen = written.resource_version.to_string();
    loop {
        // The Secret first: once a newer revision replaced it, a binding that records our
        // hash no longer says what the workload will run (Cluster API applies the newer one
        // next).
        match kube.get(written.path).await {
            Ok(Some(now)) => {
                let rv = now["metadata"]["resourceVersion"]
                    .as_str()
                    .unwrap_or_default();
                if !seen.is_empty() && rv != seen && now["data"] == *written.data {
                    seen = rv.to_string();
                } else if !seen.is_empty() && rv != seen {
                    return Outcome::Superseded {
                        resource_version: rv.to_string(),
                        seconds: t.elapsed().as_secs_f64(),
                    };
                }
            }
            Ok(None) => {}
            Err(e) => tracing::warn!("{}: {e}", c.id()),
        }
        match kube.get(&path).await {
            Ok(b) => last = b.and_then(|b| binding_hash(&b, set, &fixed.secret)),
            Err(e) => tracing::warn!("{}: {e}", c.id()),
        }
        if last.as_deref() == Some(fixed.hash.as_str()) {
            return Outcome::Applied {
                seconds: t.elapsed().as_secs_f64(),
            };
        }
        if t.elapsed() >= limit || crate::base::interrupt::signal().is_some() {
            return Outcome::NotApplied { binding_hash: last };
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
}

/// One pass: read, assess, and (with `fix_opts`) fix. Returns the fleet, its rows and the
/// rewrites.
///
/// Errors: [`ClustersError`] when the management cluster cannot be read, or the digest manifest.
pub async fn pass(
    kube: &Kube,
    namespace: &str,
    manifest: &DigestManifest,
    assess_opts: &super::assess::AssessOptions,
    fix_opts: Option<&FixOptions>,
    on_fixed: &mut (dyn FnMut(&Fixed) + Send),
) -> Result<(Fleet, Vec<Row>, Vec<Fixed>), ClustersError> {
    let fleet = observe(kube, namespace).await?;
    let rows = assess(&fleet.clusters, manifest, assess_opts);
    let fixed = match fix_opts {
        Some(o) => fix(kube, &fleet, &rows, o, on_fixed).await,
        None => Vec::new(),
    };
    Ok((fleet, rows, fixed))
}

/// What [`watch`] watches and how.
#[derive(Debug, Clone)]
pub struct WatchOptions {
    /// The namespace of the Cluster API objects.
    pub namespace: String,
    /// The digest manifest, read before every pass.
    pub manifest_path: std::path::PathBuf,
    /// How rows are assessed.
    pub assess: super::assess::AssessOptions,
    /// How rewrites are made; `None`: the watch only reads and reports (`--watch` without
    /// `--fix`).
    pub fix: Option<FixOptions>,
    /// Read everything again at least this often, events or not (a control plane's version
    /// changes on an object not watched).
    pub resync: Duration,
    /// After an event, wait this long for the rest of a burst (the driver writes several
    /// objects in one call) before the next pass.
    pub settle: Duration,
}

impl WatchOptions {
    /// `namespace` against `manifest_path`, assessed and fixed with the defaults, a resync every
    /// 60 s and a settle of 1 s.
    pub fn new(namespace: &str, manifest_path: &Path) -> WatchOptions {
        WatchOptions {
            namespace: namespace.to_string(),
            manifest_path: manifest_path.to_path_buf(),
            assess: Default::default(),
            fix: Some(Default::default()),
            resync: Duration::from_secs(60),
            settle: Duration::from_secs(1),
        }
    }
}

/// Runs [`pass`] with fixing, then again after every change of a resource-set Secret or a
/// Cluster of the namespace (watched from the resourceVersions the pass read) or after
/// `opts.resync`, until a signal stops it. The digest manifest is read again before every pass
/// (a ConfigMap update reaches the next pass). Each pass's rows go to `report`
/// before its rewrites, each rewrite to `on_fixed` as it is done.
/// Rewrites run on their own, across passes: a pass starts one for each cluster that needs it
/// and has none under way, and goes on watching while they wait for Cluster API, so a cluster
/// that never applies delays no other, and a Secret the driver replaces is read and pinned again
/// within seconds (by its own rewrite while that waits, else by the pass its change starts).
/// A pass that fails (the API unreachable, a missing digest manifest) is logged and retried
/// with back-off from 1 s to 60 s.
///
/// Errors: [`ClustersError`] when the API server refuses the credentials (401, 403): retrying
/// does not help.
pub async fn watch(
    kube: &Kube,
    opts: &WatchOptions,
    on_fixed: &mut (dyn FnMut(&Fixed) + Send),
    mut report: impl FnMut(&[Row]),
) -> Result<(), ClustersError> {
    let namespace = opts.namespace.as_str();
    let mut backoff = Duration::from_secs(1);
    let (tx, rx) = futures::channel::mpsc::unbounded::<Fixed>();
    let mut work = InFlight {
        tasks: futures::stream::FuturesUnordered::new(),
        busy: std::collections::BTreeSet::new(),
        rx,
    };
    while crate::base::interrupt::signal().is_none() {
        let manifest = match crate::digest_manifest::read_existing(&opts.manifest_path) {
            Ok(m) => m,
            Err(e) => {
                tracing::warn!("{e}; retrying in {} s", backoff.as_secs());
                work.drive_until(tokio::time::sleep(backoff), on_fixed)
                    .await;
                backoff = (backoff * 2).min(Duration::from_secs(60));
                continue;
            }
        };
        match observe(kube, namespace).await {
            Ok(fleet) => {
                backoff = Duration::from_secs(1);
                let rows = assess(&fleet.clusters, &manifest, &opts.assess);
                report(&rows);
                if let Some(f) = &opts.fix {
                    for job in jobs(&fleet, &rows) {
                        // A rewrite under way for this cluster pins a newer revision itself.
                        if !work.busy.insert(job.cluster.id()) {
                            continue;
                        }
                        let tx = tx.clone();
                        work.tasks
                            .push(Box::pin(settle(kube, job, f.wait, move |x| {
                                let _ = tx.unbounded_send(x);
                            })));
                    }
                }
                // A rewrite that ended superseded still: read everything now, not at the next
                // event (the replacing write is older than the watch would start).
                if !work
                    .drive_until(wait_for_change(kube, namespace, &fleet, opts), on_fixed)
                    .await
                {
                    continue;
                }
            }
            // Credentials that are refused stay refused: end the watch, so the Pod crash-loops
            // visibly instead of retrying in silence.
            Err(e) if matches!(e.code(), Some(401 | 403)) => return Err(e.into()),
            Err(e) => {
                tracing::warn!("{e}; retrying in {} s", backoff.as_secs());
                work.drive_until(tokio::time::sleep(backoff), on_fixed)
                    .await;
                backoff = (backoff * 2).min(Duration::from_secs(60));
            }
        }
    }
    while let Ok(f) = work.rx.try_recv() {
        on_fixed(&f);
    }
    Ok(())
}

/// The rewrites a watch has under way: their futures (each gives its cluster and whether its
/// last rewrite was superseded still), the clusters they serve, and their reports.
struct InFlight<'a> {
    tasks: futures::stream::FuturesUnordered<futures::future::BoxFuture<'a, (String, bool)>>,
    busy: std::collections::BTreeSet<String>,
    rx: futures::channel::mpsc::UnboundedReceiver<Fixed>,
}

impl InFlight<'_> {
    /// Drives the rewrites and hands each report to `on_fixed` until `until` resolves (`true`),
    /// or a rewrite ends superseded still (`false`: a new pass is due).
    async fn drive_until(
        &mut self,
        until: impl std::future::Future<Output = ()>,
        on_fixed: &mut (dyn FnMut(&Fixed) + Send),
    ) -> bool {
        let mut until = std::pin::pin!(until);
        loop {
            tokio::select! {
                _ = &mut until => return true,
                Some(f) = self.rx.next() => on_fixed(&f),
                Some((cluster, superseded)) = self.tasks.next(), if !self.tasks.is_empty() => {
                    self.busy.remove(&cluster);
                    if superseded {
                        while let Ok(f) = self.rx.try_recv() {
                            on_fixed(&f);
                        }
                        return false;
                    }
                }
            }
        }
    }
}

/// Waits until a resource-set Secret or a Cluster of `namespace` changes after what `fleet`
/// read (then `opts.settle` more), or `opts.resync` passed, or a watch ended or failed.
async fn wait_for_change(kube: &Kube, namespace: &str, fleet: &Fleet, opts: &WatchOptions) {
    let timeout = opts.resync;
    let secrets = format!(
        "{}?fieldSelector=type%3D{}",
        collection("", "v1", namespace, "secrets"),
        RESOURCE_SET_TYPE.replace('/', "%2F")
    );
    let clusters = collection(
        CLUSTER_GROUP,
        &fleet.cluster_api_version,
        namespace,
        "clusters",
    );
    // Resolves at the first real event; a watch that ends or fails never does (the resync
    // sleep then ends the wait), so a refused watch cannot turn into a busy loop.
    let first_event = |path: String, rv: String| async move {
        match kube.watch(&path, &rv, timeout).await {
            Ok(stream) => {
                let mut stream = std::pin::pin!(stream);
                while let Some(e) = stream.next().await {
                    match e {
                        Ok(e) if e.kind != "BOOKMARK" => {
                            tracing::debug!("{path}: {} {}", e.kind, e.object["metadata"]["name"]);
                            return;
                        }
                        Ok(_) => {}
                        Err(e) => {
                            log_watch_failure(&e);
                            break;
                        }
                    }
                }
            }
            Err(e) => log_watch_failure(&e),
        }
        std::future::pending::<()>().await
    };
    let changed = tokio::select! {
        _ = first_event(secrets, fleet.secrets_version.clone()) => true,
        _ = first_event(clusters, fleet.clusters_version.clone()) => true,
        _ = tokio::time::sleep(timeout) => false,
    };
    if changed {
        tokio::time::sleep(opts.settle).await;
    }
}

/// A 410 Gone (the resourceVersion is too old: the next pass lists again) is routine; anything
/// else is worth a warning.
fn log_watch_failure(e: &KubeError) {
    if e.code() == Some(410) {
        tracing::debug!("{e}");
    } else {
        tracing::warn!("watch: {e}");
    }
}
