//! magnum-cluster-api's real `upgrade_cluster` against a management cluster's own kube-apiserver
//! (not tests/mcapi/upgrade.py's imitation of one): kube-apiserver v1.34.1 and etcd, Cluster API
//! v1.13.2's core, kubeadm control plane and kubeadm bootstrap managers, each serving the
//! conversion of its CRDs' `v1beta1` (what the driver writes) from their `v1beta2` storage through
//! its own webhook, `ClusterTopology` on (as magnum-cluster-api installs Cluster API), and the
//! OpenStack provider's CRDs ([`occm_forge_accept::sim::capi_installed`]).
//!
//! The driver creates the cluster first as its `create_cluster` does (the ClusterClass
//! `magnum-v0.38.2` and its four templates, the cloud-config Secret, the cloud-provider
//! ClusterResourceSet and Secret, the topology-managed Cluster), pinned with the labels `render
//! --format magnum-prefix-tag` prints for 1.34, then upgrades it to a 1.35 template. It runs as
//! a ServiceAccount bound to `cluster-admin` (Magnum's conductor holds an admin kubeconfig of the
//! management cluster); the apiserver's audit log lists its requests, printed by resource.
//! Then `occm-forge clusters` reads the cluster under deploy/clusters/rbac.yaml as shipped (its
//! `kubeadmcontrolplanes` rule on the real KubeadmControlPlane the topology controller made, no
//! stand-in Role).
//!
//! What still stands in, and why: OpenStack (no cloud here: the harness answers the Keystone,
//! Nova and Glance calls the driver makes), Magnum's database objects (plain objects), the
//! cluster CA Secrets (Magnum's certificate store is Barbican or its database), and the
//! OpenStack provider's manager (nothing reconciles OpenStack clusters or machines, so no
//! machine is made and the control plane never reaches an endpoint); the workload cluster the
//! driver cleans (`<stack_id>-kubeconfig`) is the same apiserver.
//!
//! Gated like tests/mcapi_upgrade.rs (`cargo test --test suite mcapi_apiserver:: -- --ignored`):
//! `OCCM_FORGE_MCAPI_FULL_PYTHON`, helm in `.tools/bin`, and the Go module proxy the first time
//! (it builds the kubeadm managers beside Cluster API's core manager; `OCCM_FORGE_GATED_CACHE`
//! names a cache to reuse).

use crate::common;
use crate::management;
use crate::mcapi_upgrade::{SECRET, STACK_ID, Upgraded, at, rendered_labels, row, upgrade_on};

use std::collections::BTreeMap;
use std::path::Path;
use std::time::{Duration, Instant};

use common::*;
use management::*;
use occm_forge_accept::sim::capi::Management;
use occm_forge_accept::sim::capi_installed;
use occm_forge_core::config::ClusterApi;
use occm_forge_core::kubernetes::Kube;
use serde_json::{Value, json};

/// The OpenStack provider whose CRDs the management cluster serves. magnum-cluster-api 0.38
/// installs v0.14.4, which the Go module proxy here refuses (403); v0.14.2 is the newest v0.14
/// patch it serves (the same `v1beta1` API).
const OPENSTACK: &str = "v0.14.2";

/// The driver's identity: a ServiceAccount bound to `cluster-admin`.
const DRIVER_SA: &str = "magnum-conductor";

/// The audit policy: the driver's requests only, Secrets with their request body (the upgrade's
/// write of the cloud-provider Secret), the rest at Metadata.
fn audit_policy() -> String {
    let user = format!("system:serviceaccount:{NS}:{DRIVER_SA}");
    format!(
        "apiVersion: audit.k8s.io/v1\nkind: Policy\nomitStages: [RequestReceived]\nrules:\n\
         - level: Request\n  users: [\"{user}\"]\n  resources: [{{group: \"\", resources: [secrets]}}]\n\
         - level: Metadata\n  users: [\"{user}\"]\n\
         - level: None\n"
    )
}

/// One request of the driver, as the audit log records it.
#[derive(Debug, Clone)]
struct Request {
    verb: String,
    /// `<group>/<version> <resource>` (`core/v1 secrets`).
    resource: String,
    name: String,
    code: u16,
    message: String,
    body: Value,
}

fn audited(log: &Path) -> Vec<Request> {
    std::fs::read_to_string(log)
        .unwrap_or_default()
        .lines()
        .filter_map(|l| serde_json::from_str::<Value>(l).ok())
        .filter(|e| e["stage"] == "ResponseComplete")
        .map(|e| {
            let o = &e["objectRef"];
            let group = o["apiGroup"].as_str().filter(|g| !g.is_empty());
            let mut resource = format!(
                "{}/{} {}",
                group.unwrap_or("core"),
                o["apiVersion"].as_str().unwrap_or("?"),
                o["resource"].as_str().unwrap_or("?")
            );
            if let Some(sub) = o["subresource"].as_str() {
                resource = format!("{resource}/{sub}");
            }
            Request {
                verb: e["verb"].as_str().unwrap_or_default().to_string(),
                resource,
                name: o["name"].as_str().unwrap_or_default().to_string(),
                code: e["responseStatus"]["code"].as_u64().unwrap_or(0) as u16,
                message: e["responseStatus"]["message"]
                    .as_str()
                    .unwrap_or_default()
                    .to_string(),
                body: e["requestObject"].clone(),
            }
        })
        .collect()
}

/// The driver's ServiceAccount, bound to `cluster-admin`, and a kubeconfig with its token.
async fn driver_identity(m: &Management, dir: &Path) -> (std::path::PathBuf, String) {
    let kube = &m.kube;
    create_namespace(kube).await;
    let manifests = format!(
        "apiVersion: v1\nkind: ServiceAccount\nmetadata:\n  name: {DRIVER_SA}\n  namespace: {NS}\n---\n\
         apiVersion: rbac.authorization.k8s.io/v1\nkind: ClusterRoleBinding\nmetadata:\n  name: {DRIVER_SA}\n\
         roleRef: {{apiGroup: rbac.authorization.k8s.io, kind: ClusterRole, name: cluster-admin}}\n\
         subjects:\n- {{kind: ServiceAccount, name: {DRIVER_SA}, namespace: {NS}}}\n"
    );
    create_manifests(kube, &manifests, false).await;
    service_account_kubeconfig(m, dir, DRIVER_SA).await
}

/// The driver's requests, counted by resource and verb (`core/v1 secrets: get 5, update 1`).
fn by_resource(requests: &[Request]) -> BTreeMap<String, BTreeMap<String, usize>> {
    let mut out: BTreeMap<String, BTreeMap<String, usize>> = BTreeMap::new();
    for r in requests {
        *out.entry(r.resource.clone())
            .or_default()
            .entry(r.verb.clone())
            .or_default() += 1;
    }
    out
}

/// Waits (at most `limit`) for the object at `path` to satisfy `ok`; the object.
async fn eventually(
    kube: &Kube,
    path: &str,
    limit: Duration,
    ok: impl Fn(&Value) -> bool,
) -> Value {
    let t = Instant::now();
    loop {
        if let Ok(Some(v)) = kube.get(path).await
            && ok(&v)
        {
            return v;
        }
        assert!(
            t.elapsed() < limit,
            "{path} not as expected in {limit:?}: {:?}",
            kube.get(path).await
        );
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
}

#[tokio::test(flavor = "multi_thread")]
#[ignore = "needs OCCM_FORGE_MCAPI_FULL_PYTHON (a python with magnum-cluster-api 0.38.2 and its dependencies installed from tests/mcapi/constraints.txt) and the Go module proxy"]
async fn the_real_upgrade_against_the_management_clusters_own_apiserver_keeps_our_1_34_image() {
    let t = Instant::now();
    let gated = gated_cache();
    let (bins, installed) = tokio::task::block_in_place(|| {
        let (bins, _) = real_parts(gated.path());
        let installed =
            capi_installed::build(&ClusterApi::default(), OPENSTACK, gated.path()).unwrap();
        (bins, installed)
    });
    eprintln!("parts: {:.1} s", t.elapsed().as_secs_f64());
    let dir = tempfile::tempdir().unwrap();
    let policy = dir.path().join("audit-policy.yaml");
    std::fs::write(&policy, audit_policy()).unwrap();
    let audit = dir.path().join("audit.log");
    let m = capi_installed::start(
        &bins,
        &installed,
        &dir.path().join("management"),
        &[
            format!("--audit-policy-file={}", policy.display()),
            format!("--audit-log-path={}", audit.display()),
        ],
    )
    .await
    .unwrap();
    let result = std::panic::AssertUnwindSafe(on_the_real_apiserver(&m, dir.path(), &audit));
    let outcome = futures::FutureExt::catch_unwind(result).await;
    m.stop().await;
    if outcome.is_err() {
        eprintln!(
            "kept for a look: {} (the managers' logs in management/*/, the audit log)",
            dir.keep().display()
        );
    }
    if let Err(p) = outcome {
        std::panic::resume_unwind(p);
    }
    eprintln!("test: {:.1} s", t.elapsed().as_secs_f64());
}

async fn on_the_real_apiserver(m: &Management, dir: &Path, audit: &Path) {
    let kube = &m.kube;
    let (kubeconfig, token) = driver_identity(m, dir).await;
    let cp = &m.control_plane;
    let ca_file = dir.join("apiserver-ca.crt");
    std::fs::write(&ca_file, &cp.ca_pem).unwrap();
    let apiserver = json!({
        "kubeconfig": kubeconfig,
        "url": cp.url,
        "token": token,
        "ca_file": ca_file,
    });
    let pin_134 = rendered_labels("1.34");
    let template = at("v1.35.0", &BTreeMap::new());
    let u: Upgraded = tokio::task::block_in_place(|| {
        upgrade_on(&at("v1.34.1", &pin_134), &template, Some(apiserver))
    });
    let requests = audited(audit);
    eprintln!(
        "the driver's requests (create and upgrade): {}",
        requests.len()
    );
    for (resource, verbs) in by_resource(&requests) {
        let verbs: Vec<String> = verbs.iter().map(|(v, n)| format!("{v} {n}")).collect();
        eprintln!("  {resource}: {}", verbs.join(", "));
    }
    // Every resource the driver names is served: no 404 for a kind the apiserver does not know
    // (its message then is the apiserver's "the server could not find the requested resource").
    let unknown: Vec<&Request> = requests
        .iter()
        .filter(|r| r.code == 404 && r.message.contains("could not find the requested resource"))
        .collect();
    assert!(unknown.is_empty(), "resources not served: {unknown:#?}");
    // Every write succeeded, but for what a real apiserver answers this way on a new cluster:
    // the CSI workloads the upgrade deletes are absent (404), a namespace exists already (409),
    // and an update that lost a race (409 Conflict: Cluster API's topology controller writes
    // the Cluster too) is sent again and succeeds.
    let retried = |i: usize, r: &Request| {
        r.verb == "update"
            && r.code == 409
            && requests[i + 1..].iter().any(|later| {
                later.verb == "update"
                    && later.resource == r.resource
                    && later.name == r.name
                    && later.code < 300
            })
    };
    let conflicts: Vec<&Request> = requests
        .iter()
        .enumerate()
        .filter(|&(i, r)| retried(i, r))
        .map(|(_, r)| r)
        .collect();
    let failed: Vec<&Request> = requests
        .iter()
        .enumerate()
        .filter(|(_, r)| r.code >= 400 && !matches!(r.verb.as_str(), "get" | "list"))
        .filter(|(_, r)| !(r.verb == "delete" && r.code == 404))
        .filter(|(_, r)| {
            !(r.verb == "create" && r.code == 409 && r.resource == "core/v1 namespaces")
        })
        .filter(|&(i, r)| !retried(i, r))
        .map(|(_, r)| r)
        .collect();
    assert!(failed.is_empty(), "writes that failed: {failed:#?}");
    eprintln!(
        "updates that lost a race and were sent again: {}",
        conflicts
            .iter()
            .map(|r| format!("{} {}", r.resource, r.name))
            .collect::<Vec<_>>()
            .join(", ")
    );

    // What the upgrade did to our pin: the cluster keeps our 1.34 image on 1.35.
    assert_eq!(u.image_before.as_deref(), Some(ours("1.34").as_str()));
    assert_eq!(u.labels_after, at("v1.35.0", &pin_134));
    assert_eq!(u.image_after.as_deref(), Some(ours("1.34").as_str()));
    assert_eq!(u.data_after, u.data_before);
    assert_eq!(u.topology_version.as_deref(), Some("v1.35.0"));
    let writes: Vec<&Request> = requests
        .iter()
        .filter(|r| r.resource == "core/v1 secrets" && r.name == SECRET && r.verb != "get")
        .collect();
    let last = writes
        .last()
        .expect("the driver wrote the cloud-provider Secret");
    assert_eq!(
        (last.verb.as_str(), last.code),
        ("update", 200),
        "a full PUT: {writes:#?}"
    );
    assert_eq!(last.body["type"], "addons.cluster.x-k8s.io/resource-set");

    // Stored at v1beta2, served to the driver at v1beta1 by Cluster API's conversion webhook:
    // the same Cluster read at v1beta2 has the upgrade's version and the class as a classRef.
    let cluster = kube
        .get(&format!(
            "/apis/cluster.x-k8s.io/v1beta2/namespaces/{NS}/clusters/{STACK_ID}"
        ))
        .await
        .unwrap()
        .unwrap();
    assert_eq!(cluster["spec"]["topology"]["version"], "v1.35.0");
    assert_eq!(
        cluster["spec"]["topology"]["classRef"]["name"],
        "magnum-v0.38.2"
    );
    // Cluster API's topology controller made the control plane from the ClusterClass's template:
    // a KubeadmControlPlane of the cluster, held at the version it was created with while it
    // provisions (no machine ever comes up here).
    let kcp_path =
        format!("/apis/controlplane.cluster.x-k8s.io/v1beta2/namespaces/{NS}/kubeadmcontrolplanes");
    let t = Instant::now();
    let kcp = loop {
        let items = kube.list(&kcp_path).await.unwrap();
        if let Some(k) = items
            .into_iter()
            .find(|k| k["metadata"]["labels"]["cluster.x-k8s.io/cluster-name"] == STACK_ID)
        {
            break k;
        }
        assert!(
            t.elapsed() < Duration::from_secs(90),
            "no KubeadmControlPlane for {STACK_ID} in 90 s; the Cluster: {}",
            kube.get(&format!(
                "/apis/cluster.x-k8s.io/v1beta2/namespaces/{NS}/clusters/{STACK_ID}"
            ))
            .await
            .unwrap()
            .unwrap_or_default()["status"]
        );
        tokio::time::sleep(Duration::from_millis(500)).await;
    };
    eprintln!(
        "KubeadmControlPlane {} (made by the topology controller after {:.1} s): spec.version {}",
        kcp["metadata"]["name"],
        t.elapsed().as_secs_f64(),
        kcp["spec"]["version"]
    );
    let cluster = eventually(
        kube,
        &format!("/apis/cluster.x-k8s.io/v1beta2/namespaces/{NS}/clusters/{STACK_ID}"),
        Duration::from_secs(30),
        |c| c["spec"]["controlPlaneRef"]["name"] == kcp["metadata"]["name"],
    )
    .await;
    eprintln!(
        "Cluster conditions: {}",
        cluster["status"]["conditions"]
            .as_array()
            .map(|cs| cs
                .iter()
                .map(|c| format!("{}={} ({})", c["type"], c["status"], c["reason"]))
                .collect::<Vec<_>>()
                .join(", "))
            .unwrap_or_default()
    );
    clusters_under_the_shipped_rbac(m, dir).await;
}

/// `occm-forge clusters` as deploy/clusters/rbac.yaml's ServiceAccount, no stand-in Role: it
/// reads the Cluster, the real KubeadmControlPlane and the Secret the driver wrote.
async fn clusters_under_the_shipped_rbac(m: &Management, dir: &Path) {
    let kube = &m.kube;
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let rbac = std::fs::read_to_string(root.join("deploy/clusters/rbac.yaml")).unwrap();
    create_manifests(kube, &rbac, false).await;
    let (kubeconfig, _) = service_account_kubeconfig(m, dir, "occm-forge").await;
    let lock = dir.join("images.lock.yaml");
    write_manifest(&lock);
    let (row, code) = row(forge(dir)
        .arg("clusters")
        .arg("--kubeconfig")
        .arg(&kubeconfig)
        .arg("--manifest")
        .arg(&lock));
    // The shipped RBAC reads the Cluster, the real KubeadmControlPlane and the Secret (a 403
    // would exit 15): the cluster asks for 1.35 and runs our 1.34 image, which `clusters` will
    // not rewrite to 1.35 while the control plane reports no version (it never provisions
    // here).
    assert_eq!(code, Some(14), "{row}");
    assert_eq!(
        (&row["minor"], &row["image_kind"], &row["image"]),
        (
            &json!("1.35"),
            &json!({"kind": "ours", "minor": "1.34"}),
            &json!(ours("1.34"))
        ),
        "{row}"
    );
    assert_eq!(row["action"]["action"], "refuse", "{row}");
    assert!(
        row["action"]["reason"]
            .as_str()
            .is_some_and(|r| r.contains("the control plane reports no version yet")),
        "{row}"
    );
}
