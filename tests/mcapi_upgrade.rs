//! magnum-cluster-api's real `upgrade_cluster` (`openstack coe cluster upgrade`), run as
//! installed with all of its dependencies, and what `occm-forge clusters` makes of the Secret it
//! writes:
//!
//! - a cluster pinned with the labels `occm-forge render --format magnum-prefix-tag` prints for
//!   1.34 keeps our 1.34 image when it is upgraded to a 1.35 template, with or without the 1.35
//!   labels on that template: the driver copies only `kube_tag` and renders the whole
//!   `<stack_id>-cloud-provider` Secret again from the cluster's labels, so a 1.34 OCCM runs on
//!   a 1.35 cluster;
//! - a pin only on the new template is dropped: the Secret gets upstream's
//!   `openstack-cloud-controller-manager:v1.35.0`;
//! - the Secrets those upgrades wrote, put (a full PUT, as the driver writes) into the management
//!   cluster of tests/clusters.rs (a real kube-apiserver and Cluster API's ClusterResourceSet
//!   controller): `occm-forge clusters` reports the 1.34 image on the 1.35 cluster, `--fix`
//!   pins our 1.35 image, and `--fix --watch` pins it again after each upgrade's write.
//!
//! The harness, tests/mcapi/upgrade.py, runs `magnum_cluster_api.driver.UbuntuDriver()
//! .upgrade_cluster` here against an in-process imitation of the management cluster's
//! kube-apiserver (quick, and able to show each request's body), with OpenStack answered by a
//! stand-in and Magnum's database objects as plain objects (its header lists what is imitated);
//! tests/mcapi_apiserver.rs runs it against the real apiserver under Cluster API.
//!
//! Gated (`cargo test --test suite mcapi_upgrade:: -- --ignored`): needs `OCCM_FORGE_MCAPI_FULL_PYTHON`,
//! a Python interpreter with magnum-cluster-api 0.38.2 and its dependencies installed from
//! tests/mcapi/constraints.txt (`scripts/mcapi-full` makes `.tools/mcapi-full`; about 440 MB),
//! helm in `.tools/bin` (scripts/test installs it), and, for the management cluster, the Go
//! module proxy the first time (`OCCM_FORGE_GATED_CACHE` names a cache to reuse).

use crate::common;
use crate::management;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use common::*;
use management::*;
use occm_forge_accept::sim::capi::Management;
use occm_forge_accept::sim::provider;
use occm_forge_core::kubernetes::Kube;
use serde_json::{Value, json};

/// The environment variable naming the Python interpreter with the full install.
const FULL_PYTHON_ENV: &str = "OCCM_FORGE_MCAPI_FULL_PYTHON";
/// The Magnum cluster of every upgrade: its Heat stack id (the Cluster API Cluster) and UUID.
pub(crate) const STACK_ID: &str = "kube-up135";
pub(crate) const UUID: &str = "8b1d7c5e-7f0c-4a59-9a3e-3f1b8a7c2d10";
pub(crate) const SECRET: &str = "kube-up135-cloud-provider";

/// What tests/mcapi/upgrade.py reports about one `upgrade_cluster` call.
#[derive(Debug, serde::Deserialize)]
pub(crate) struct Upgraded {
    pub(crate) version: String,
    pub(crate) labels_after: BTreeMap<String, String>,
    pub(crate) image_before: Option<String>,
    pub(crate) image_after: Option<String>,
    pub(crate) data_before: BTreeMap<String, String>,
    pub(crate) data_after: BTreeMap<String, String>,
    pub(crate) keys_after: Vec<String>,
    /// The request that wrote the Secret: `{method, path, content_type, body}`.
    secret_write: Value,
    pub(crate) topology_version: Option<String>,
    requests: Vec<String>,
    seconds: f64,
}

fn full_python() -> PathBuf {
    std::env::var_os(FULL_PYTHON_ENV)
        .filter(|p| !p.is_empty())
        .map(PathBuf::from)
        .unwrap_or_else(|| {
            panic!(
                "set {FULL_PYTHON_ENV} to a Python with magnum-cluster-api {MCAPI_VERSION} and its dependencies (scripts/mcapi-full installs them into .tools/mcapi-full from tests/mcapi/constraints.txt)"
            )
        })
}

/// Runs the real `upgrade_cluster` on a cluster with `labels` (at `kube_tag` v1.34.1) to a
/// template with `template` (at v1.35.0), against the harness's imitation of the apiserver.
fn upgrade(labels: &BTreeMap<String, String>, template: &BTreeMap<String, String>) -> Upgraded {
    upgrade_on(labels, template, None)
}

/// [`upgrade`], against the real apiserver `apiserver` (`{kubeconfig, url, token, ca_file}`)
/// when it is given: the driver creates the cluster there first (tests/mcapi/upgrade.py).
pub(crate) fn upgrade_on(
    labels: &BTreeMap<String, String>,
    template: &BTreeMap<String, String>,
    apiserver: Option<Value>,
) -> Upgraded {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let helm = mcapi_tools().helm.unwrap();
    assert!(
        helm.is_file(),
        "{} is missing: scripts/test installs helm v3.21.4 there (the driver runs `helm template`)",
        helm.display()
    );
    let path = std::env::join_paths(
        std::iter::once(helm.parent().unwrap().to_path_buf())
            .chain(std::env::split_paths(&std::env::var_os("PATH").unwrap())),
    )
    .unwrap();
    let home = tempfile::tempdir().unwrap();
    let mut request = json!({"uuid": UUID, "stack_id": STACK_ID, "network_driver": "calico",
                             "labels": labels, "template_labels": template});
    if let Some(a) = apiserver {
        request["apiserver"] = a;
    }
    let t = Instant::now();
    let mut child = Command::new(full_python())
        .arg(root.join("tests/mcapi/upgrade.py"))
        .env("PATH", path)
        .env("HOME", home.path())
        .env_remove("KUBECONFIG")
        // requests prefers these to the CA a session (pykube's, from the kubeconfig) names:
        // a machine's bundle must not stand in for the management cluster's CA.
        .env_remove("REQUESTS_CA_BUNDLE")
        .env_remove("CURL_CA_BUNDLE")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap_or_else(|e| panic!("{FULL_PYTHON_ENV}: {e}"));
    std::io::Write::write_all(
        &mut child.stdin.take().unwrap(),
        request.to_string().as_bytes(),
    )
    .unwrap();
    let o = child.wait_with_output().unwrap();
    assert!(o.status.success(), "upgrade.py failed:\n{}", stderr(&o));
    let u: Upgraded = serde_json::from_slice(&o.stdout).unwrap();
    eprintln!(
        "upgrade_cluster: {:.1} s (the process {:.1} s), {} requests to the apiserver",
        u.seconds,
        t.elapsed().as_secs_f64(),
        u.requests.len()
    );
    assert_eq!(
        u.version, MCAPI_VERSION,
        "the full install's magnum-cluster-api"
    );
    u
}

/// The labels `occm-forge render --k8s <minor> --format magnum-prefix-tag` prints for the
/// digest manifest of tests/clusters.rs (ours at `r.example/occm`).
pub(crate) fn rendered_labels(minor: &str) -> BTreeMap<String, String> {
    let f = fixture(&["linux/amd64"]);
    write_manifest(&f.lock);
    let o = occm_forge(f.path())
        .args(["render", "--k8s", minor, "--format", "magnum-prefix-tag"])
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", stderr(&o));
    stdout(&o)
        .lines()
        .map(|l| {
            let (k, v) = l.split_once('=').unwrap();
            (k.to_string(), v.to_string())
        })
        .collect()
}

/// `labels` with `kube_tag`.
pub(crate) fn at(kube_tag: &str, labels: &BTreeMap<String, String>) -> BTreeMap<String, String> {
    let mut l = labels.clone();
    l.insert("kube_tag".into(), kube_tag.into());
    l
}

/// The Secret write of an upgrade: a full PUT of `<stack_id>-cloud-provider`.
fn assert_full_put(u: &Upgraded) {
    let w = &u.secret_write;
    assert_eq!(
        (&w["method"], &w["path"]),
        (
            &json!("PUT"),
            &json!(format!("/api/v1/namespaces/{NS}/secrets/{SECRET}"))
        ),
        "{:?}",
        u.requests
    );
    assert_eq!(w["body"]["type"], "addons.cluster.x-k8s.io/resource-set");
    let written: Vec<&String> = w["body"]["stringData"]
        .as_object()
        .unwrap()
        .keys()
        .collect();
    assert_eq!(written, u.keys_after.iter().collect::<Vec<_>>());
    assert_eq!(u.topology_version.as_deref(), Some("v1.35.0"));
}

#[test]
#[ignore = "needs OCCM_FORGE_MCAPI_FULL_PYTHON (a python with magnum-cluster-api 0.38.2 and its dependencies installed from tests/mcapi/constraints.txt) and the Go module proxy"]
fn a_cluster_pinned_to_our_1_34_image_keeps_it_through_the_real_upgrade_to_1_35() {
    let t = Instant::now();
    let pin_134 = rendered_labels("1.34");
    assert_eq!(
        pin_134,
        BTreeMap::from([
            (
                "container_infra_prefix".to_string(),
                "r.example/occm".to_string()
            ),
            (
                "cloud_provider_tag".to_string(),
                ours("1.34")
                    .strip_prefix(&format!("{OURS}:"))
                    .unwrap()
                    .to_string()
            ),
        ])
    );
    let pin_135 = rendered_labels("1.35");
    let labels = at("v1.34.1", &pin_134);
    // The new template without our labels, and with the ones render prints for 1.35.
    for template in [at("v1.35.0", &BTreeMap::new()), at("v1.35.0", &pin_135)] {
        let u = upgrade(&labels, &template);
        assert_eq!(u.image_before.as_deref(), Some(ours("1.34").as_str()));
        assert_eq!(
            u.labels_after,
            at("v1.35.0", &pin_134),
            "only kube_tag comes from the template"
        );
        assert_eq!(
            u.image_after.as_deref(),
            Some(ours("1.34").as_str()),
            "the Secret rendered again from the cluster's labels keeps our 1.34 image on 1.35"
        );
        assert_full_put(&u);
        assert_eq!(
            u.keys_after,
            ["cloud-config-secret.yaml", "cloud-controller-manager.yaml"]
        );
        assert_eq!(
            u.data_after, u.data_before,
            "the upgrade writes the Secret it wrote for 1.34 again, byte for byte"
        );
    }
    eprintln!("test (a): {:.1} s", t.elapsed().as_secs_f64());
}

#[test]
#[ignore = "needs OCCM_FORGE_MCAPI_FULL_PYTHON (a python with magnum-cluster-api 0.38.2 and its dependencies installed from tests/mcapi/constraints.txt) and the Go module proxy"]
fn a_pin_only_on_the_new_template_is_dropped_by_the_real_upgrade() {
    let t = Instant::now();
    let template = at("v1.35.0", &rendered_labels("1.35"));
    let u = upgrade(&at("v1.34.1", &BTreeMap::new()), &template);
    assert_eq!(
        u.image_before.as_deref(),
        Some(upstream("v1.34.1").as_str())
    );
    assert_eq!(
        u.labels_after,
        at("v1.35.0", &BTreeMap::new()),
        "the template's container_infra_prefix and cloud_provider_tag do not reach the cluster"
    );
    assert_eq!(u.image_after.as_deref(), Some(upstream("v1.35.0").as_str()));
    assert_full_put(&u);
    eprintln!("test (b): {:.1} s", t.elapsed().as_secs_f64());
}

/// Writes the Secret as the driver's upgrade wrote it: the body of its PUT (name, type and
/// `stringData`, nothing else), at the Secret's current resourceVersion (the driver reads the
/// Secret first and sends the version it read).
/// Returns the resourceVersion of what it wrote.
async fn replay(kube: &Kube, u: &Upgraded) -> Value {
    let path = u.secret_write["path"].as_str().unwrap();
    let mut body = u.secret_write["body"].clone();
    let current = kube.get(path).await.unwrap().unwrap();
    body["metadata"]["resourceVersion"] = current["metadata"]["resourceVersion"].clone();
    kube.replace(path, body).await.unwrap()["metadata"]["resourceVersion"].clone()
}

/// The control plane at `version`, asked for and reached (what the upgrade's Cluster topology
/// version leads to once Cluster API has rolled the control plane).
async fn control_plane_at(kube: &Kube, version: &str) {
    let path = format!(
        "{}/{STACK_ID}",
        provider::collection(provider::CONTROL_PLANE_GROUP, "AcceptControlPlane", NS)
    );
    assert!(
        kube.merge_patch(&path, json!({"spec": {"version": version}}))
            .await
            .unwrap()
    );
    set_control_plane_version(kube, STACK_ID, version).await;
}

/// The cluster of the upgrades, its Secret as the real driver wrote it when it was created
/// pinned to our 1.34 image (`pinned`'s state before its upgrade); the workload namespace is
/// `kube-system`, where the driver's manifests put OCCM.
fn magnum_cluster(pinned: &Upgraded) -> TestCluster {
    TestCluster {
        name: STACK_ID,
        workload_ns: "kube-system",
        versions: ("v1.34.1", "v1.34.1"),
        secret: SECRET,
        strategy: "Reconcile",
        image: pinned.image_before.clone().unwrap(),
        node_delete: true,
        keys: Some(pinned.data_before.clone()),
    }
}

#[tokio::test(flavor = "multi_thread")]
#[ignore = "needs OCCM_FORGE_MCAPI_FULL_PYTHON (a python with magnum-cluster-api 0.38.2 and its dependencies installed from tests/mcapi/constraints.txt) and the Go module proxy"]
async fn clusters_fix_and_watch_pin_the_secret_the_real_upgrade_wrote_through_cluster_api() {
    let t = Instant::now();
    let (pinned, dropped) = tokio::task::block_in_place(|| {
        let pin_134 = rendered_labels("1.34");
        let pin_135 = at("v1.35.0", &rendered_labels("1.35"));
        (
            upgrade(&at("v1.34.1", &pin_134), &pin_135),
            upgrade(&at("v1.34.1", &BTreeMap::new()), &pin_135),
        )
    });
    on_management(async |m: &Management, dir: &Path| {
        after_the_upgrades(m, dir, &pinned, &dropped).await;
    })
    .await;
    eprintln!("test (c): {:.1} s", t.elapsed().as_secs_f64());
}

/// One row of `clusters --json`, and its exit status.
pub(crate) fn row(clusters: &mut Command) -> (Value, Option<i32>) {
    let o = clusters.arg("--json").output().unwrap();
    let report: Value = serde_json::from_slice(&o.stdout)
        .unwrap_or_else(|e| panic!("{e}: {}{}", stdout(&o), stderr(&o)));
    let row = report["clusters"]
        .as_array()
        .unwrap()
        .iter()
        .find(|r| r["cluster"] == format!("{NS}/{STACK_ID}"))
        .unwrap_or_else(|| panic!("no row for {STACK_ID}: {report}"))
        .clone();
    (row, o.status.code())
}

async fn after_the_upgrades(m: &Management, dir: &Path, pinned: &Upgraded, dropped: &Upgraded) {
    let kube = &m.kube;
    let c = magnum_cluster(pinned);
    let Access {
        kubeconfig, lock, ..
    } = set_up(m, dir, &[&c]).await;
    let clusters = |extra: &[&str]| {
        let mut cmd = forge(dir);
        cmd.arg("clusters")
            .arg("--kubeconfig")
            .arg(&kubeconfig)
            .arg("--manifest")
            .arg(&lock)
            .args(extra);
        cmd
    };
    let (r, code) = row(&mut clusters(&[]));
    assert_eq!(
        (code, &r["image_kind"], &r["action"]),
        (
            Some(0),
            &json!({"kind": "pinned"}),
            &json!({"action": "none"})
        ),
        "before the upgrade the cluster runs our 1.34 image: {r}"
    );

    // The upgrade: the driver's PUT of the Secret (the same data: a new resourceVersion, the
    // same hash), then the control plane at 1.35. A 1.34 OCCM runs on the 1.35 cluster, which
    // `clusters` reports.
    replay(kube, pinned).await;
    control_plane_at(kube, "v1.35.0").await;
    let secret = kube
        .get(&format!("/api/v1/namespaces/{NS}/secrets/{SECRET}"))
        .await
        .unwrap()
        .unwrap();
    let hash =
        occm_forge_core::consumers::render::crs_secret::secret_hash(&secret.to_string()).unwrap();
    reached(
        kube,
        &c,
        &ours("1.34"),
        Some(&hash),
        Duration::from_secs(60),
    )
    .await;
    let (r, code) = row(&mut clusters(&[]));
    assert_eq!(
        (
            code,
            &r["minor"],
            &r["image_kind"],
            &r["image"],
            &r["action"]
        ),
        (
            Some(14),
            &json!("1.35"),
            &json!({"kind": "ours", "minor": "1.34"}),
            &json!(ours("1.34")),
            &json!({"action": "rewrite", "image": ours("1.35"), "restore_node_delete": false})
        ),
        "{r}"
    );

    // --fix --wait: our 1.35 image, applied by Cluster API.
    let o = clusters(&["--fix", "--wait"]).output().unwrap();
    eprintln!("{}{}", stdout(&o), stderr(&o));
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    assert!(
        stdout(&o).contains(&format!(
            "{NS}/{STACK_ID}: Secret {SECRET} {} → {}: applied by Cluster API",
            ours("1.34"),
            ours("1.35")
        )),
        "{}",
        stdout(&o)
    );
    reached(kube, &c, &ours("1.35"), None, Duration::from_secs(5)).await;

    watch_and_replay(
        m,
        dir,
        &c,
        clusters(&["--fix", "--watch"]),
        &[dropped, pinned],
    )
    .await;
}

/// Runs `watch` (`clusters --fix --watch`) and, once it is up, writes each upgrade's Secret
/// again, as the driver did: each time the watcher pins our 1.35 image again and Cluster API
/// applies that revision to the workload DaemonSet.
async fn watch_and_replay(
    m: &Management,
    dir: &Path,
    c: &TestCluster,
    mut watch: Command,
    writes: &[&Upgraded],
) {
    let kube = &m.kube;
    let log = dir.join("watch.log");
    let mut watcher = watch
        .stdout(Stdio::from(std::fs::File::create(&log).unwrap()))
        .stderr(Stdio::from(
            std::fs::File::create(dir.join("watch.err")).unwrap(),
        ))
        .spawn()
        .unwrap();
    tokio::time::sleep(Duration::from_secs(3)).await;
    let path = format!("/api/v1/namespaces/{NS}/secrets/{SECRET}");
    for u in writes {
        let written = Instant::now();
        let replayed = replay(kube, u).await;
        let secret = loop {
            let s = kube.get(&path).await.unwrap().unwrap();
            let image =
                occm_forge_core::consumers::render::crs_secret::occm_image(&s.to_string()).unwrap();
            if s["metadata"]["resourceVersion"] != replayed && image == ours("1.35") {
                break s;
            }
            assert!(
                written.elapsed() < Duration::from_secs(30),
                "the watcher did not pin the upgrade's Secret ({}) again in 30 s: {}",
                u.image_after.as_deref().unwrap_or_default(),
                std::fs::read_to_string(&log).unwrap_or_default()
            );
            tokio::time::sleep(Duration::from_millis(100)).await;
        };
        let hash = occm_forge_core::consumers::render::crs_secret::secret_hash(&secret.to_string())
            .unwrap();
        reached(kube, c, &ours("1.35"), Some(&hash), Duration::from_secs(30)).await;
        eprintln!(
            "upgrade's PUT ({}) → ours again on the workload DaemonSet: {:.1} s",
            u.image_after.as_deref().unwrap_or_default(),
            written.elapsed().as_secs_f64()
        );
        let line = format!(
            "{NS}/{STACK_ID}: Secret {SECRET} {} → {}: applied by Cluster API",
            u.image_after.as_deref().unwrap_or_default(),
            ours("1.35")
        );
        while !std::fs::read_to_string(&log)
            .unwrap_or_default()
            .contains(&line)
        {
            assert!(
                written.elapsed() < Duration::from_secs(60),
                "the watcher did not report `{line}`: {}",
                std::fs::read_to_string(&log).unwrap_or_default()
            );
            tokio::time::sleep(Duration::from_millis(250)).await;
        }
    }
    // SAFETY: kill(2) on the watcher's pid; no memory is touched.
    unsafe {
        libc::kill(watcher.id() as i32, libc::SIGTERM);
    }
    let status = watcher.wait().unwrap();
    eprintln!("watch stdout:\n{}", std::fs::read_to_string(&log).unwrap());
    assert_eq!(status.code(), Some(0), "SIGTERM ends the watch cleanly");
}
