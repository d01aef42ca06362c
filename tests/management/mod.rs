//! The management cluster of the gated `clusters` tests (tests/clusters.rs,
//! tests/mcapi_upgrade.rs): etcd, kube-apiserver v1.34.1 and Cluster API v1.13.2's manager built
//! through the Go module proxy into the gated cache, the stand-in infrastructure and control
//! plane, Magnum-style clusters whose ClusterResourceSet applies their `<stack_id>-cloud-provider`
//! Secret to a workload cluster (the same apiserver, each cluster's objects in a namespace of its
//! own), and the ServiceAccount of deploy/clusters/rbac.yaml that `occm-forge clusters` runs as.
#![allow(dead_code)]

use std::collections::BTreeMap;
use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

use crate::common::*;
use occm_forge_accept::sim::capi::{self, Management};
use occm_forge_accept::sim::provider::{self, Provider};
use occm_forge_core::config::ClusterApi;
use occm_forge_core::consumers::mcapi::objects as magnum;
use occm_forge_core::digest_manifest::DigestManifest;
use occm_forge_core::kubernetes::Kube;
use serde_json::{Value, json};

pub const NS: &str = "magnum-system";
pub const UPSTREAM: &str = "registry.k8s.io/provider-os/openstack-cloud-controller-manager";
pub const OURS: &str = "r.example/occm/openstack-cloud-controller-manager";

pub fn ours(minor: &str) -> String {
    let fill = match minor {
        "1.34" => "b",
        "1.35" => "c",
        _ => "d",
    };
    format!("{OURS}:v{minor}.1-occmforge.1@sha256:{}", fill.repeat(64))
}

pub fn upstream(tag: &str) -> String {
    format!("{UPSTREAM}:{tag}")
}

/// The digest manifest: ours for 1.34, 1.35 and 1.36, published (no 1.37: upstream has none).
pub fn write_manifest(path: &Path) {
    let mut m = DigestManifest::default();
    for minor in ["1.34", "1.35", "1.36"] {
        let image = ours(minor);
        let (rest, digest) = image.split_once('@').unwrap();
        let tag = rest.rsplit_once(':').unwrap().1;
        m.images
            .insert(minor.parse().unwrap(), entry(OURS, tag, digest));
    }
    std::fs::write(path, serde_norway::to_string(&m).unwrap()).unwrap();
}

pub fn real_parts(
    cache: &Path,
) -> (
    occm_forge_accept::sim::control_plane::Binaries,
    capi::Manager,
) {
    use occm_forge_accept::sim::control_plane::{self, Versions};
    let toolchain = occm_forge_core::pipeline::go::Toolchain::new("1.25.1", cache);
    let bins = control_plane::build(
        &Versions {
            kubernetes: "v1.34.1".into(),
            etcd: "v3.6.5".into(),
        },
        &toolchain,
        cache,
    )
    .unwrap();
    let manager = capi::build(&ClusterApi::default(), cache).unwrap();
    (bins, manager)
}

/// One test cluster: its name, workload namespace, versions and Secret.
#[derive(Clone)]
pub struct TestCluster {
    pub name: &'static str,
    pub workload_ns: &'static str,
    /// The control plane's spec.version (what the Cluster asks for) and status.version.
    pub versions: (&'static str, &'static str),
    pub secret: &'static str,
    pub strategy: &'static str,
    pub image: String,
    /// Whether the chart's ClusterRole allows delete on nodes (chart 2.35.0) or not (2.36.2).
    pub node_delete: bool,
    /// The Secret's keys as a real driver wrote them (tests/mcapi_upgrade.rs); `None`: the
    /// simulation's rendering of `image` in `workload_ns` ([`keys_of`]).
    pub keys: Option<BTreeMap<String, String>>,
}

/// The Secret's keys for `c`: its own, else the chart 2.35.0 rendering, or 2.36.2's nodes rule
/// without delete.
pub fn keys_of(c: &TestCluster) -> BTreeMap<String, String> {
    if let Some(keys) = &c.keys {
        return keys.clone();
    }
    let mut keys = magnum::secret_keys_in(c.workload_ns, &c.image, "[Global]\n");
    if !c.node_delete {
        let occm = keys
            .get_mut(occm_forge_core::consumers::render::crs_secret::SECRET_KEY)
            .unwrap();
        *occm = occm.replace(NODES_2_35, NODES_2_36_2);
    }
    keys
}

/// Chart 2.35.0's nodes rule and chart 2.36.2's (kubernetes/cloud-provider-openstack PR #3165).
pub const NODES_2_35: &str = "  - nodes\n  verbs:\n  - '*'\n";
pub const NODES_2_36_2: &str =
    "  - nodes\n  verbs:\n  - get\n  - list\n  - watch\n  - patch\n  - update\n";

pub async fn create(kube: &Kube, m: &Management, c: &TestCluster) {
    create_at(kube, m, c, &m.control_plane.url).await;
}

/// [`create`] with the workload cluster's apiserver at `apiserver` (its kubeconfig Secret and
/// control plane endpoint): an address nothing answers makes a cluster Cluster API cannot reach.
pub async fn create_at(kube: &Kube, m: &Management, c: &TestCluster, apiserver: &str) {
    let kubeconfig = std::fs::read_to_string(&m.control_plane.kubeconfig)
        .unwrap()
        .replace(&m.control_plane.url, apiserver);
    kube.create(
        "/api/v1/namespaces",
        json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": c.workload_ns}}),
    )
    .await
    .unwrap();
    for (path, object) in
        provider::cluster_objects(NS, c.name, apiserver, &kubeconfig, c.versions.0)
    {
        kube.create(&path, object).await.unwrap();
    }
    Provider::new(NS)
        .mark_cluster_ready(kube, c.name)
        .await
        .unwrap();
    set_control_plane_version(kube, c.name, c.versions.1).await;
    let keys = keys_of(c);
    kube.create(
        &format!("/api/v1/namespaces/{NS}/secrets"),
        magnum::secret(c.secret, &keys),
    )
    .await
    .unwrap();
    kube.create(
        &format!("/apis/addons.cluster.x-k8s.io/v1beta2/namespaces/{NS}/clusterresourcesets"),
        magnum::cluster_resource_set(c.secret, c.name, c.secret, c.strategy),
    )
    .await
    .unwrap();
}

pub async fn set_control_plane_version(kube: &Kube, cluster: &str, version: &str) {
    let path = format!(
        "{}/{cluster}/status",
        provider::collection(provider::CONTROL_PLANE_GROUP, "AcceptControlPlane", NS)
    );
    assert!(
        kube.merge_patch(&path, json!({"status": {"version": version}}))
            .await
            .unwrap()
    );
}

/// The workload DaemonSet's OCCM image in `ns` and the binding hash of `cluster`'s Secret.
pub async fn seen(kube: &Kube, cluster: &str, secret: &str, ns: &str) -> (String, String) {
    let ds = kube
        .get(&format!(
            "/apis/apps/v1/namespaces/{ns}/daemonsets/openstack-cloud-controller-manager"
        ))
        .await
        .unwrap();
    let binding = kube
        .get(&format!(
            "/apis/addons.cluster.x-k8s.io/v1beta2/namespaces/{NS}/clusterresourcesetbindings/{cluster}"
        ))
        .await
        .unwrap();
    (
        ds.as_ref().and_then(magnum::occm_image).unwrap_or_default(),
        binding
            .as_ref()
            .and_then(|b| {
                occm_forge_core::consumers::clusters::read::binding_hash(b, secret, secret)
            })
            .unwrap_or_default(),
    )
}

/// Waits until `cluster`'s workload DaemonSet runs `image` (and, when given, the binding records
/// `hash`): the seconds it took.
pub async fn reached(
    kube: &Kube,
    c: &TestCluster,
    image: &str,
    hash: Option<&str>,
    bound: Duration,
) -> f64 {
    let t = Instant::now();
    loop {
        let (i, h) = seen(kube, c.name, c.secret, c.workload_ns).await;
        if i == image && hash.is_none_or(|x| x == h) {
            return t.elapsed().as_secs_f64();
        }
        assert!(
            t.elapsed() < bound,
            "{}: DaemonSet runs {i} (binding hash {h}), not {image} ({hash:?}) after {bound:?}",
            c.name
        );
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
}

/// Creates each object of the multi-document YAML `text` (ServiceAccount, Role, RoleBinding,
/// ClusterRole, ClusterRoleBinding, ConfigMap, Deployment), with `?dryRun=All` when `dry_run`.
pub async fn create_manifests(kube: &Kube, text: &str, dry_run: bool) -> Vec<Value> {
    let mut out = Vec::new();
    for doc in serde_norway::Deserializer::from_str(text) {
        let v: Value = serde::Deserialize::deserialize(doc).unwrap();
        if v.is_null() {
            continue;
        }
        let ns = v["metadata"]["namespace"].as_str().unwrap_or(NS);
        let path = match v["kind"].as_str().unwrap() {
            "ServiceAccount" => format!("/api/v1/namespaces/{ns}/serviceaccounts"),
            "ConfigMap" => format!("/api/v1/namespaces/{ns}/configmaps"),
            "Role" => format!("/apis/rbac.authorization.k8s.io/v1/namespaces/{ns}/roles"),
            "RoleBinding" => {
                format!("/apis/rbac.authorization.k8s.io/v1/namespaces/{ns}/rolebindings")
            }
            "Deployment" => format!("/apis/apps/v1/namespaces/{ns}/deployments"),
            "ClusterRole" => "/apis/rbac.authorization.k8s.io/v1/clusterroles".to_string(),
            "ClusterRoleBinding" => {
                "/apis/rbac.authorization.k8s.io/v1/clusterrolebindings".to_string()
            }
            k => panic!("a {k} in deploy/clusters"),
        };
        let path = if dry_run {
            format!("{path}?dryRun=All")
        } else {
            path
        };
        out.push(kube.post(&path, v).await.unwrap_or_else(|e| panic!("{e}")));
    }
    out
}

pub fn forge(dir: &Path) -> Command {
    let mut c = Command::new(env!("CARGO_BIN_EXE_occm-forge"));
    c.current_dir(dir);
    c
}

/// Starts a management cluster (real parts from the gated cache), runs `body` on it, and stops
/// it, with Cluster API's log tail when `body` panicked.
pub async fn on_management(body: impl AsyncFnOnce(&Management, &Path)) {
    let gated = gated_cache();
    let (bins, manager) = tokio::task::block_in_place(|| real_parts(gated.path()));
    let dir = tempfile::tempdir().unwrap();
    let m = Management::start(&bins, &manager, &dir.path().join("management"))
        .await
        .unwrap();
    let result = std::panic::AssertUnwindSafe(body(&m, dir.path()));
    let outcome = futures::FutureExt::catch_unwind(result).await;
    if outcome.is_err() {
        eprintln!(
            "cluster-api log tail: {}",
            m.manager
                .log()
                .lines()
                .rev()
                .take(30)
                .collect::<Vec<_>>()
                .join("\n")
        );
    }
    m.stop().await;
    if let Err(p) = outcome {
        std::panic::resume_unwind(p);
    }
}

/// What the command runs with: the ServiceAccount of deploy/clusters/rbac.yaml (plus read access
/// to the stand-in control plane kind, the test's KubeadmControlPlane), its token, a kubeconfig
/// with it, and the digest manifest.
pub struct Access {
    pub token: String,
    pub kubeconfig: std::path::PathBuf,
    pub lock: std::path::PathBuf,
}

/// Creates the namespace [`NS`].
pub async fn create_namespace(kube: &Kube) {
    kube.create(
        "/api/v1/namespaces",
        json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": NS}}),
    )
    .await
    .unwrap();
}

/// A token of the ServiceAccount `NS/name` (TokenRequest, an hour) and `<dir>/<name>.kubeconfig`
/// with it for the management cluster: (the kubeconfig, the token).
pub async fn service_account_kubeconfig(
    m: &Management,
    dir: &Path,
    name: &str,
) -> (std::path::PathBuf, String) {
    let token = m
        .kube
        .post(
            &format!("/api/v1/namespaces/{NS}/serviceaccounts/{name}/token"),
            json!({"apiVersion": "authentication.k8s.io/v1", "kind": "TokenRequest",
                   "spec": {"expirationSeconds": 3600}}),
        )
        .await
        .unwrap()["status"]["token"]
        .as_str()
        .unwrap()
        .to_string();
    let cp = &m.control_plane;
    let kubeconfig = dir.join(format!("{name}.kubeconfig"));
    std::fs::write(
        &kubeconfig,
        occm_forge_core::kubernetes::kubeconfig(&cp.url, &cp.ca_pem, &token),
    )
    .unwrap();
    (kubeconfig, token)
}

/// Creates `magnum-system`, `clusters` (waiting until Cluster API applied each Secret) and the
/// ServiceAccount; see [`Access`].
pub async fn set_up(m: &Management, dir: &Path, clusters: &[&TestCluster]) -> Access {
    let kube = &m.kube;
    create_namespace(kube).await;
    for c in clusters {
        create(kube, m, c).await;
    }
    for c in clusters {
        reached(kube, c, &c.image, None, Duration::from_secs(90)).await;
    }
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let rbac = std::fs::read_to_string(root.join("deploy/clusters/rbac.yaml")).unwrap();
    create_manifests(kube, &rbac, false).await;
    let stand_in = format!(
        "apiVersion: rbac.authorization.k8s.io/v1\nkind: Role\nmetadata:\n  name: stand-in-control-plane\n  namespace: {NS}\nrules:\n- apiGroups: [{}]\n  resources: [acceptcontrolplanes]\n  verbs: [get]\n---\napiVersion: rbac.authorization.k8s.io/v1\nkind: RoleBinding\nmetadata:\n  name: stand-in-control-plane\n  namespace: {NS}\nroleRef: {{apiGroup: rbac.authorization.k8s.io, kind: Role, name: stand-in-control-plane}}\nsubjects:\n- {{kind: ServiceAccount, name: occm-forge, namespace: {NS}}}\n",
        provider::CONTROL_PLANE_GROUP
    );
    create_manifests(kube, &stand_in, false).await;
    let (kubeconfig, token) = service_account_kubeconfig(m, dir, "occm-forge").await;
    let lock = dir.join("images.lock.yaml");
    write_manifest(&lock);
    Access {
        token,
        kubeconfig,
        lock,
    }
}
