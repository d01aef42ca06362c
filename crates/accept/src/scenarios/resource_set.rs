//! S6, the way the fix reaches a running magnum-cluster-api cluster: its ClusterResourceSet
//! Secret, rewritten by `render --format crs-secret` and applied by Cluster API's own
//! ClusterResourceSet controller.
//!
//! One management cluster of its own ([`Management`]: a fresh control plane, Cluster API's
//! manager, the stand-in providers), the workload cluster being the same apiserver, in
//! magnum-cluster-api's namespace `magnum-system`, with two Clusters:
//!
//! 1. A legacy cluster (magnum-cluster-api before 0.29.2): a Secret named by the cluster UUID
//!    under a ClusterResourceSet of `strategy: ApplyOnce`. Cluster API applies it once (the
//!    workload DaemonSet gets upstream's image); `crs-secret` refuses to rewrite it; the same
//!    change made by hand and written back never reaches the workload cluster within
//!    [`REACH_BOUND`] and the binding's hash stays.
//! 2. A current cluster: the Secret `<stack_id>-cloud-provider` as the driver writes it, under a
//!    ClusterResourceSet of `strategy: Reconcile`. Each step writes the Secret back with a full
//!    `PUT` (what `kubectl replace -f` sends) and waits until the workload DaemonSet's image and
//!    the ClusterResourceSetBinding's hash are the expected ones: `crs-secret` to ours (the hash
//!    it prints), a driver-style upgrade (the Secret rendered again from the labels: upstream's
//!    image is back, the state the operator tooling must detect), `crs-secret` to ours again,
//!    and `crs-secret --image <previous>` (the revert it prints).
//!
//! Cluster API's behaviour relied on (v1.13): internal/controllers/clusterresourceset/
//! clusterresourceset_controller.go (Secrets of type `addons.cluster.x-k8s.io/resource-set` are
//! watched; `ApplyClusterResourceSet` applies a resource when its scope `needsApply`),
//! clusterresourceset_scope.go (`Reconcile`: applied again, by merge patch, when the hash
//! differs from the binding's; `ApplyOnce`: created once, never again) and
//! clusterresourceset_helpers.go (the hash, [`occm_forge_core::consumers::render::crs_secret::resource_set_hash`]).

use std::time::{Duration, Instant};

use serde_json::{Value, json};

use super::{CapiBench, RunResult};
use crate::sim::capi::Management;
use crate::sim::kube::Kube;
use crate::sim::provider::{self, Provider};
use occm_forge_core::consumers::mcapi::objects::{self as magnum, NAMESPACE};
use occm_forge_core::consumers::render::crs_secret as crs;
use occm_forge_core::pipeline::acceptance::AcceptError;

/// How long a change of the Secret may take to reach the workload DaemonSet (and the binding's
/// hash); also how long the legacy Secret's change is watched not to.
pub const REACH_BOUND: Duration = Duration::from_secs(30);
/// How long the first application of a set may take (Cluster API connects to the new workload
/// cluster first).
pub const FIRST_APPLY_BOUND: Duration = Duration::from_secs(90);
/// The current cluster (magnum-cluster-api names Cluster API's Cluster after the cluster's stack
/// id, and its Secret `<stack_id>-cloud-provider`).
const CLUSTER: &str = "kube-abc12";
/// The legacy cluster, and its Secret's name (the cluster UUID).
const LEGACY_CLUSTER: &str = "kube-old01";
const LEGACY_SECRET: &str = "3f5e6a7b-1c2d-4e5f-8a9b-0c1d2e3f4a5b";

/// The two images of the run and what the driver writes.
#[derive(Debug, Clone)]
pub struct Images {
    /// Ours, as `render` pins it: `<repository>:<tag>@sha256:<index digest>`.
    pub ours: String,
    /// The OCCM manifests magnum-cluster-api's real code renders for a cluster of the minor
    /// without our labels ([`occm_forge_core::consumers::mcapi::Renderer`]).
    pub driver: String,
    /// The image in them: its default for the minor
    /// (`registry.k8s.io/provider-os/openstack-cloud-controller-manager:v1.35.0` for 1.35 to 1.37
    /// with 0.38.2).
    pub upstream: String,
    /// The Kubernetes minor the management cluster's control plane runs (the accept minor's):
    /// crs-secret judges the skew against it, as `clusters` does with the version it reads,
    /// since the driver's Secret holds v1.35.0 for a 1.36 cluster.
    pub minor: occm_forge_core::config::Minor,
}

impl Images {
    /// The driver's Secret keys ([`magnum::driver_keys`] of [`Images::driver`]), with `image`
    /// in place of upstream's when given (a hand edit).
    fn keys(
        &self,
        image: Option<&str>,
        cloud_conf: &str,
    ) -> std::collections::BTreeMap<String, String> {
        let occm = match image {
            Some(i) => self.driver.replace(
                &format!("image: \"{}\"", self.upstream),
                &format!("image: \"{i}\""),
            ),
            None => self.driver.clone(),
        };
        magnum::driver_keys(&occm, cloud_conf)
    }
}

/// One write of the current cluster's Secret and what reached the workload cluster.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Step {
    /// What was written (`crs-secret → ours`).
    pub what: String,
    /// The image the workload DaemonSet must get.
    pub image: String,
    /// The hash the binding must record (the one `crs-secret` printed, or computed for the
    /// driver's Secret).
    pub hash: String,
    /// Seconds from the write until both held, `None` when they did not within the bound.
    pub reached: Option<f64>,
    /// The DaemonSet's image and the binding's hash last seen.
    pub seen: (String, String),
}

/// What the legacy cluster showed.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Legacy {
    /// Seconds until Cluster API applied the Secret the first time.
    pub first_apply: Option<f64>,
    /// `crs-secret`'s refusal, when it refused.
    pub refused: Option<String>,
    /// The binding's hash before the hand edit.
    pub hash: String,
    /// The DaemonSet's image and the binding's hash after [`REACH_BOUND`].
    pub after: (String, String),
}

/// What S6 showed, as plain data.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Observed {
    /// The legacy cluster.
    pub legacy: Legacy,
    /// The current cluster's first application, then each write, in order.
    pub steps: Vec<Step>,
    /// The images.
    pub upstream: String,
}

fn short(hash: &str) -> &str {
    hash.get(..19).unwrap_or(hash)
}

/// Passes when the legacy Secret was applied once, refused by `crs-secret` and its change never
/// reached the workload cluster, and every step of the current cluster reached it in time.
pub fn verdict(o: &Observed) -> RunResult {
    let l = &o.legacy;
    let legacy_ok = l.first_apply.is_some()
        && l.refused.is_some()
        && l.after.0 == o.upstream
        && l.after.1 == l.hash;
    let legacy = format!(
        "ApplyOnce Secret {LEGACY_SECRET}: {}; crs-secret {}; a hand edit to ours {}",
        match l.first_apply {
            Some(s) => format!("applied once in {s:.1} s"),
            None => "never applied".into(),
        },
        match &l.refused {
            Some(r) => format!("refused (`{}`)", r.split(':').next().unwrap_or(r)),
            None => "did NOT refuse it".into(),
        },
        if l.after.0 == o.upstream && l.after.1 == l.hash {
            format!(
                "did not reach the workload in {} s (image {}, hash unchanged)",
                REACH_BOUND.as_secs(),
                l.after.0
            )
        } else {
            format!(
                "CHANGED the workload (image {}, hash {})",
                l.after.0,
                short(&l.after.1)
            )
        }
    );
    let steps: Vec<String> = o
        .steps
        .iter()
        .map(|s| match s.reached {
            Some(t) => format!("{} in {t:.1} s (binding hash {})", s.what, short(&s.hash)),
            None => format!(
                "{} NOT reached (DaemonSet image {}, binding hash {}, expected {} / {})",
                s.what,
                if s.seen.0.is_empty() {
                    "none"
                } else {
                    &s.seen.0
                },
                if s.seen.1.is_empty() {
                    "none"
                } else {
                    short(&s.seen.1)
                },
                s.image,
                short(&s.hash)
            ),
        })
        .collect();
    let slowest = o
        .steps
        .iter()
        .skip(1)
        .filter_map(|s| s.reached)
        .fold(0.0, f64::max);
    let all = !o.steps.is_empty() && o.steps.iter().all(|s| s.reached.is_some());
    let evidence = format!("Reconcile: {}; {legacy}", steps.join("; "));
    if all && legacy_ok {
        RunResult {
            bug_shown: false,
            ..RunResult::pass(slowest, evidence)
        }
    } else {
        RunResult {
            bug_shown: false,
            ..RunResult::fail(REACH_BOUND.as_secs_f64(), evidence)
        }
    }
}

/// Runs S6 in `dir`; see the module documentation. A step that does not reach the workload is a
/// failed [`RunResult`]; a fault of the bench (a control plane or Cluster API that does not
/// start, a refused request) is an error. Every process it started is stopped.
pub(crate) async fn run(
    bench: &CapiBench<'_>,
    images: &Images,
    dir: &std::path::Path,
) -> Result<RunResult, AcceptError> {
    let mut m = Management::start(bench.binaries, bench.manager, dir).await?;
    let result = observe(bench, &m, images).await;
    let crashed = m.crashed();
    m.stop().await;
    match (result, crashed) {
        (_, Some(c)) => Err(AcceptError::ControlPlane {
            part: "cluster-api".into(),
            message: c,
        }),
        (r, None) => r.map(|o| verdict(&o)),
    }
}

async fn observe(
    bench: &CapiBench<'_>,
    m: &Management,
    images: &Images,
) -> Result<Observed, AcceptError> {
    let kube = &m.kube;
    let kubeconfig = std::fs::read_to_string(&m.control_plane.kubeconfig)
        .map_err(|e| AcceptError::Io(format!("{}: {e}", m.control_plane.kubeconfig.display())))?;
    kube.create(
        "/api/v1/namespaces",
        json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": NAMESPACE}}),
    )
    .await?;
    let provider = Provider::new(NAMESPACE);
    for cluster in [LEGACY_CLUSTER, CLUSTER] {
        let objects = provider::cluster_objects(
            NAMESPACE,
            cluster,
            &m.control_plane.url,
            &kubeconfig,
            bench.kubernetes,
        );
        for (path, object) in objects {
            kube.create(&path, object).await?;
        }
        provider.mark_cluster_ready(kube, cluster).await?;
    }
    let cloud_conf = bench.cloud.cloud_conf();
    let legacy = legacy(kube, images, &cloud_conf).await?;
    let steps = current(kube, images, &cloud_conf).await?;
    Ok(Observed {
        legacy,
        steps,
        upstream: images.upstream.clone(),
    })
}

fn secret_path(name: &str) -> String {
    format!("/api/v1/namespaces/{NAMESPACE}/secrets/{name}")
}

/// The workload DaemonSet's OCCM image and the hash the binding of `cluster` records for
/// `secret` of the set of the same name (empty when not there yet).
async fn seen(kube: &Kube, cluster: &str, secret: &str) -> Result<(String, String), AcceptError> {
    let (ns, name) = magnum::DAEMONSET;
    let ds = kube
        .get(&format!("/apis/apps/v1/namespaces/{ns}/daemonsets/{name}"))
        .await?;
    let binding = kube
        .get(&format!(
            "/apis/addons.cluster.x-k8s.io/v1beta2/namespaces/{NAMESPACE}/clusterresourcesetbindings/{cluster}"
        ))
        .await?;
    Ok((
        ds.as_ref().and_then(magnum::occm_image).unwrap_or_default(),
        binding
            .as_ref()
            .and_then(|b| {
                occm_forge_core::consumers::clusters::read::binding_hash(b, secret, secret)
            })
            .unwrap_or_default(),
    ))
}

/// Polls every 250 ms, for at most `bound`, until the DaemonSet has `image` and the binding
/// `hash`: the seconds it took (or `None`) and what was seen last.
async fn wait_for(
    kube: &Kube,
    cluster: &str,
    secret: &str,
    (image, hash): (&str, &str),
    bound: Duration,
) -> Result<(Option<f64>, (String, String)), AcceptError> {
    let t = Instant::now();
    loop {
        crate::sim::process::check_interrupt()?;
        let now = seen(kube, cluster, secret).await?;
        if now.0 == image && now.1 == hash {
            return Ok((Some(t.elapsed().as_secs_f64()), now));
        }
        if t.elapsed() >= bound {
            return Ok((None, now));
        }
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
}

/// The legacy cluster: its Secret and ApplyOnce set, the refusal, the hand edit.
async fn legacy(kube: &Kube, images: &Images, cloud_conf: &str) -> Result<Legacy, AcceptError> {
    let secrets = format!("/api/v1/namespaces/{NAMESPACE}/secrets");
    let keys = images.keys(None, cloud_conf);
    let hash = magnum::keys_hash(&keys);
    let driver = magnum::secret(LEGACY_SECRET, &keys);
    kube.create(&secrets, driver).await?;
    kube.create(
        &crs_path(),
        magnum::cluster_resource_set(LEGACY_SECRET, LEGACY_CLUSTER, LEGACY_SECRET, "ApplyOnce"),
    )
    .await?;
    let (first_apply, _) = wait_for(
        kube,
        LEGACY_CLUSTER,
        LEGACY_SECRET,
        (&images.upstream, &hash),
        FIRST_APPLY_BOUND,
    )
    .await?;
    let stored = fetch(kube, LEGACY_SECRET).await?;
    let refused = crs::rewrite_secret(&stored.to_string(), &rewrite_to(&images.ours, images.minor))
        .err()
        .map(|e| e.0);
    // The same change by hand: the driver's Secret with our image.
    let edited = magnum::secret(LEGACY_SECRET, &images.keys(Some(&images.ours), cloud_conf));
    kube.replace(&secret_path(LEGACY_SECRET), edited).await?;
    tokio::time::sleep(REACH_BOUND).await;
    let after = seen(kube, LEGACY_CLUSTER, LEGACY_SECRET).await?;
    Ok(Legacy {
        first_apply,
        refused,
        hash,
        after,
    })
}

fn crs_path() -> String {
    format!("/apis/addons.cluster.x-k8s.io/v1beta2/namespaces/{NAMESPACE}/clusterresourcesets")
}

fn bench_fault(message: String) -> AcceptError {
    AcceptError::ControlPlane {
        part: "S6".into(),
        message,
    }
}

fn rewrite_to(image: &str, minor: occm_forge_core::config::Minor) -> crs::RewriteOptions {
    crs::RewriteOptions {
        image: image.to_string(),
        cluster_minor: Some(minor),
        control_plane_read: true,
        ..Default::default()
    }
}

async fn fetch(kube: &Kube, name: &str) -> Result<Value, AcceptError> {
    kube.get(&secret_path(name))
        .await?
        .ok_or_else(|| bench_fault(format!("Secret {NAMESPACE}/{name} is gone")))
}

/// `crs-secret` on the stored Secret (`kubectl get -o json`), written back with a full PUT: the
/// hash it printed and the image it reverts to.
async fn crs_secret(
    kube: &Kube,
    name: &str,
    image: &str,
    minor: occm_forge_core::config::Minor,
) -> Result<(String, String), AcceptError> {
    let stored = fetch(kube, name).await?;
    let out = crs::rewrite_secret(&stored.to_string(), &rewrite_to(image, minor))
        .map_err(|e| bench_fault(e.0))?;
    let object: Value = serde_norway::from_str(&out.secret)
        .map_err(|e| bench_fault(format!("crs-secret output: {e}")))?;
    kube.replace(&secret_path(name), object).await?;
    Ok((out.hash, out.previous_image))
}

/// One write of the current cluster's Secret.
enum Write<'a> {
    /// `crs-secret` on the stored Secret with this image (`kubectl get | crs-secret | kubectl
    /// replace`); `None`: the image crs-secret said the DaemonSet ran before (the revert).
    CrsSecret(Option<&'a str>),
    /// The driver's Secret from the labels again (`coe cluster upgrade`).
    Driver,
}

/// The current cluster: the driver's Secret and Reconcile set, then each write, stopping at the
/// first that does not reach the workload.
async fn current(kube: &Kube, images: &Images, cloud_conf: &str) -> Result<Vec<Step>, AcceptError> {
    let secret = format!("{CLUSTER}-cloud-provider");
    let keys = images.keys(None, cloud_conf);
    let driver_hash = magnum::keys_hash(&keys);
    let driver = magnum::secret(&secret, &keys);
    kube.create(
        &format!("/api/v1/namespaces/{NAMESPACE}/secrets"),
        driver.clone(),
    )
    .await?;
    kube.create(
        &crs_path(),
        magnum::cluster_resource_set(&secret, CLUSTER, &secret, "Reconcile"),
    )
    .await?;
    let first = wait_step(
        kube,
        &secret,
        "applied",
        &images.upstream,
        driver_hash.clone(),
        FIRST_APPLY_BOUND,
    )
    .await?;
    let mut steps = vec![first];
    let writes = [
        ("crs-secret → ours", Write::CrsSecret(Some(&images.ours))),
        ("driver upgrade → upstream again", Write::Driver),
        (
            "crs-secret → ours again",
            Write::CrsSecret(Some(&images.ours)),
        ),
        (
            "crs-secret --image revert → upstream",
            Write::CrsSecret(None),
        ),
    ];
    // What the operator keeps to revert with: the image crs-secret says the DaemonSet ran.
    let mut revert_to: Option<String> = None;
    for (what, write) in writes {
        if steps.last().is_some_and(|s| s.reached.is_none()) {
            break;
        }
        let (image, hash) = match write {
            Write::Driver => {
                kube.replace(&secret_path(&secret), driver.clone()).await?;
                (images.upstream.clone(), driver_hash.clone())
            }
            Write::CrsSecret(image) => {
                let image = image
                    .map(str::to_string)
                    .or_else(|| revert_to.clone())
                    .unwrap_or_else(|| images.upstream.clone());
                let (hash, previous) = crs_secret(kube, &secret, &image, images.minor).await?;
                revert_to.get_or_insert(previous);
                (image, hash)
            }
        };
        steps.push(wait_step(kube, &secret, what, &image, hash, REACH_BOUND).await?);
    }
    Ok(steps)
}

/// Waits for a write of `secret` to reach the workload: `image` on the DaemonSet and `hash` in
/// the binding, within `bound`.
async fn wait_step(
    kube: &Kube,
    secret: &str,
    what: &str,
    image: &str,
    hash: String,
    bound: Duration,
) -> Result<Step, AcceptError> {
    let (reached, seen) = wait_for(kube, CLUSTER, secret, (image, &hash), bound).await?;
    Ok(Step {
        what: what.to_string(),
        image: image.to_string(),
        hash,
        reached,
        seen,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    const UP: &str = "registry.k8s.io/provider-os/openstack-cloud-controller-manager:v1.34.1";
    const OURS: &str = "r.example/occm:v1.34.1-occmforge.1@sha256:aa";

    fn step(what: &str, image: &str, reached: Option<f64>) -> Step {
        Step {
            what: what.into(),
            image: image.into(),
            hash: "sha256:0123456789abcdef0123".into(),
            reached,
            seen: (UP.into(), "sha256:ffff".into()),
        }
    }

    fn good() -> Observed {
        Observed {
            legacy: Legacy {
                first_apply: Some(3.0),
                refused: Some("Secret x is named by the cluster UUID: …".into()),
                hash: "sha256:1".into(),
                after: (UP.into(), "sha256:1".into()),
            },
            steps: vec![
                step("applied", UP, Some(4.0)),
                step("crs-secret → ours", OURS, Some(1.5)),
                step("driver upgrade → upstream again", UP, Some(1.2)),
                step("crs-secret → ours again", OURS, Some(1.1)),
                step("crs-secret --image revert → upstream", UP, Some(1.3)),
            ],
            upstream: UP.into(),
        }
    }

    #[test]
    fn every_step_in_time_and_the_legacy_secret_untouched_passes() {
        let r = verdict(&good());
        assert!(r.passed && !r.bug_shown, "{r:?}");
        assert_eq!(r.seconds, 1.5);
        assert!(
            r.evidence.starts_with("Reconcile: applied in 4.0 s (binding hash sha256:0123456789ab); crs-secret → ours in 1.5 s")
                && r.evidence.contains(&format!("ApplyOnce Secret {LEGACY_SECRET}: applied once in 3.0 s; crs-secret refused (`Secret x is named by the cluster UUID`)"))
                && r.evidence.ends_with("did not reach the workload in 30 s (image registry.k8s.io/provider-os/openstack-cloud-controller-manager:v1.34.1, hash unchanged)"),
            "{}",
            r.evidence
        );
    }

    #[test]
    fn a_step_not_reached_a_legacy_change_applied_or_not_refused_fails() {
        let mut late = good();
        late.steps.truncate(2);
        late.steps[1].reached = None;
        let r = verdict(&late);
        assert!(!r.passed && !r.bug_shown, "{r:?}");
        assert!(
            r.evidence.contains("crs-secret → ours NOT reached (DaemonSet image registry.k8s.io/provider-os/openstack-cloud-controller-manager:v1.34.1, binding hash sha256:ffff, expected r.example/occm:v1.34.1-occmforge.1@sha256:aa / sha256:0123456789ab)"),
            "{}",
            r.evidence
        );
        let mut applied = good();
        applied.legacy.after = (OURS.into(), "sha256:2".into());
        let r = verdict(&applied);
        assert!(
            !r.passed && r.evidence.contains("CHANGED the workload"),
            "{}",
            r.evidence
        );
        let mut not_refused = good();
        not_refused.legacy.refused = None;
        let r = verdict(&not_refused);
        assert!(
            !r.passed && r.evidence.contains("crs-secret did NOT refuse it"),
            "{}",
            r.evidence
        );
        assert!(!verdict(&Observed::default()).passed);
    }
}
