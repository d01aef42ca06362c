//! What magnum-cluster-api writes on the management cluster for a cluster's cloud provider, as
//! plain objects: the Secret `magnum-system/<stack_id>-cloud-provider` (type
//! `addons.cluster.x-k8s.io/resource-set`; magnum-cluster-api `src/addons/cloud_controller_manager.rs`
//! and `resources.py:210-262`) and the ClusterResourceSet that applies it (`src/magnum.rs:289-313`,
//! `strategy: Reconcile` since 0.29.2; before, a Secret named by the cluster UUID under
//! `strategy: ApplyOnce`).
//!
//! The Secret's keys are the ones magnum-cluster-api writes, each a multi-document YAML stream:
//! `cloud-controller-manager.yaml` (what its compiled code renders from the OCCM chart 2.35.0 it
//! carries: ServiceAccount, ClusterRole, ClusterRoleBinding and the DaemonSet; acceptance runs the
//! real renderer, [`crate::consumers::mcapi::Renderer`], and this copy serves tests and simulations that run
//! without Python, held against the real output in tests/consumers.rs), `cloud-config-secret.yaml`
//! (the `cloud-config` Secret OCCM mounts, which magnum-cluster-api's Python adds), and, with
//! Cinder, `cinder-csi.yaml` (the CSIDriver object) and `storageclass.yaml`.

use std::collections::BTreeMap;

use base64::Engine as _;
use serde_json::{Value, json};

/// The namespace magnum-cluster-api keeps its Cluster API objects in.
pub const NAMESPACE: &str = "magnum-system";

/// The repository magnum-cluster-api renders OCCM from when no `container_infra_prefix` is set
/// (the chart's `image.repository`).
pub const UPSTREAM_REPOSITORY: &str =
    "registry.k8s.io/provider-os/openstack-cloud-controller-manager";

/// The Secret type a ClusterResourceSet applies (Cluster API `ClusterResourceSetSecretType`).
pub const RESOURCE_SET_TYPE: &str = "addons.cluster.x-k8s.io/resource-set";

/// The Secret key magnum-cluster-api renders the OCCM chart into.
pub const SECRET_KEY: &str = "cloud-controller-manager.yaml";

/// The hash Cluster API records for a Secret of a ClusterResourceSet in the
/// ClusterResourceSetBinding (`spec.bindings[].resources[].hash`) once it applied it, and
/// compares to decide whether a `strategy: Reconcile` set must be applied again:
/// `sha256:<64 hex>` of the values of the Secret's `data`, base64-decoded (a value that does not
/// decode counts as empty), concatenated in the byte order of their keys
/// (internal/controllers/clusterresourceset/clusterresourceset_helpers.go `normalizeData` and
/// `computeHash`, Cluster API v1.13). `data` maps each key to its decoded bytes.
pub fn resource_set_hash(data: &std::collections::BTreeMap<String, Vec<u8>>) -> String {
    use sha2::Digest as _;
    let mut h = sha2::Sha256::new();
    for v in data.values() {
        h.update(v);
    }
    format!("sha256:{}", hex::encode(h.finalize()))
}

/// The OCCM DaemonSet the chart renders: `kube-system/openstack-cloud-controller-manager`.
pub const DAEMONSET: (&str, &str) = ("kube-system", "openstack-cloud-controller-manager");

/// The OCCM chart's rendering with `image`, as magnum-cluster-api 0.38.2 writes it (chart 2.35.0,
/// release `openstack-ccm` in `kube-system`: the ServiceAccount `cloud-controller-manager`, the
/// ClusterRole and ClusterRoleBinding `system:cloud-controller-manager` whose nodes rule is
/// `'*'`, the DaemonSet; its Helm labels kept). For tests and simulations that run without
/// Python; tests/consumers.rs holds it against the real renderer's output.
pub fn occm_manifests(image: &str) -> String {
    occm_manifests_in(DAEMONSET.0, image)
}

/// [`occm_manifests`] into namespace `ns` instead of `kube-system` (several workload clusters
/// sharing one apiserver keep their objects apart so; the ClusterRole and its binding are then
/// named `system:cloud-controller-manager-<ns>`).
pub fn occm_manifests_in(ns: &str, image: &str) -> String {
    let suffix = if ns == DAEMONSET.0 {
        String::new()
    } else {
        format!("-{ns}")
    };
    OCCM_RENDERING
        .replace("{ns}", ns)
        .replace("{suffix}", &suffix)
        .replace("{image}", image)
}

/// The ServiceAccount chart 2.35.0 runs OCCM as.
pub const SERVICE_ACCOUNT: &str = "cloud-controller-manager";

/// [`occm_manifests`] with `{ns}`, `{suffix}` and `{image}` to fill in.
const OCCM_RENDERING: &str = r#"---
# Source: openstack-cloud-controller-manager/templates/serviceaccount.yaml
apiVersion: v1
kind: ServiceAccount
metadata:
  name: cloud-controller-manager
  labels:
    app.kubernetes.io/name: openstack-cloud-controller-manager
    helm.sh/chart: openstack-cloud-controller-manager-2.35.0
    app.kubernetes.io/instance: openstack-ccm
    app.kubernetes.io/managed-by: Helm
    app.kubernetes.io/version: "v1.35.0"
  namespace: {ns}
  annotations:
---
# Source: openstack-cloud-controller-manager/templates/clusterrole.yaml
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRole
metadata:
  name: system:cloud-controller-manager{suffix}
  labels:
    app.kubernetes.io/name: openstack-cloud-controller-manager
    helm.sh/chart: openstack-cloud-controller-manager-2.35.0
    app.kubernetes.io/instance: openstack-ccm
    app.kubernetes.io/managed-by: Helm
    app.kubernetes.io/version: "v1.35.0"
  annotations:
rules:
- apiGroups:
  - coordination.k8s.io
  resources:
  - leases
  verbs:
  - get
  - create
  - update
- apiGroups:
  - ""
  resources:
  - events
  verbs:
  - create
  - patch
  - update
- apiGroups:
  - ""
  resources:
  - nodes
  verbs:
  - '*'
- apiGroups:
  - ""
  resources:
  - nodes/status
  verbs:
  - patch
- apiGroups:
  - ""
  resources:
  - services
  verbs:
  - list
  - patch
  - update
  - watch
- apiGroups:
  - ""
  resources:
  - services/status
  verbs:
  - patch
- apiGroups:
  - ""
  resources:
  - serviceaccounts/token
  verbs:
  - create
- apiGroups:
  - ""
  resources:
  - serviceaccounts
  verbs:
  - create
  - get
- apiGroups:
  - ""
  resources:
  - persistentvolumes
  verbs:
  - '*'
- apiGroups:
  - ""
  resources:
  - endpoints
  verbs:
  - create
  - get
  - list
  - watch
  - update
- apiGroups:
  - ""
  resources:
  - configmaps
  verbs:
  - get
  - list
  - watch
- apiGroups:
  - ""
  resources:
  - secrets
  verbs:
  - list
  - get
  - watch
---
# Source: openstack-cloud-controller-manager/templates/clusterrolebinding.yaml
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRoleBinding
metadata:
  name: system:cloud-controller-manager{suffix}
  labels:
    app.kubernetes.io/name: openstack-cloud-controller-manager
    helm.sh/chart: openstack-cloud-controller-manager-2.35.0
    app.kubernetes.io/instance: openstack-ccm
    app.kubernetes.io/managed-by: Helm
    app.kubernetes.io/version: "v1.35.0"
  annotations:
roleRef:
  apiGroup: rbac.authorization.k8s.io
  kind: ClusterRole
  name: system:cloud-controller-manager{suffix}
subjects:
- kind: ServiceAccount
  name: cloud-controller-manager
  namespace: "{ns}"
---
# Source: openstack-cloud-controller-manager/templates/daemonset.yaml
apiVersion: apps/v1
kind: DaemonSet
metadata:
  name: openstack-cloud-controller-manager
  labels:
    app.kubernetes.io/name: openstack-cloud-controller-manager
    helm.sh/chart: openstack-cloud-controller-manager-2.35.0
    app.kubernetes.io/instance: openstack-ccm
    app.kubernetes.io/managed-by: Helm
    app.kubernetes.io/version: "v1.35.0"
  namespace: {ns}
  annotations:
spec:
  selector:
    matchLabels:
      component: controllermanager
      app: openstack-cloud-controller-manager
      release: openstack-ccm
  updateStrategy:
    type: RollingUpdate
  template:
    metadata:
      annotations:
        checksum/config: b0b31d6311d187dd53758033396c83505652c1ec8a62bef0b9afe7f9572f8db4
      labels:
        component: controllermanager
        app: openstack-cloud-controller-manager
        release: openstack-ccm
        chart: openstack-cloud-controller-manager-2.35.0
        heritage: Helm
    spec:
      nodeSelector:
        node-role.kubernetes.io/control-plane: ""
      securityContext:
        runAsUser: 1001
      tolerations:
        - effect: NoSchedule
          key: node.cloudprovider.kubernetes.io/uninitialized
          value: "true"
        - effect: NoSchedule
          key: node-role.kubernetes.io/control-plane
      serviceAccountName: cloud-controller-manager
      containers:
        - name: openstack-cloud-controller-manager
          image: "{image}"
          args:
            - /bin/openstack-cloud-controller-manager
            - --v=2
            - --cloud-config=$(CLOUD_CONFIG)
            - --cluster-name=$(CLUSTER_NAME)
            - --cloud-provider=openstack
            - --use-service-account-credentials=false
            - --controllers=cloud-node,cloud-node-lifecycle,route,service
            - --bind-address=127.0.0.1
          volumeMounts:
            - mountPath: /etc/config
              name: cloud-config-volume
              readOnly: true
            - mountPath: /etc/kubernetes/pki
              name: k8s-certs
              readOnly: true
            - mountPath: /etc/ssl/certs
              name: ca-certs
              readOnly: true
          env:
            - name: CLOUD_CONFIG
              value: /etc/config/cloud.conf
            - name: CLUSTER_NAME
              value: 3f5e6a7b-1c2d-4e5f-8a9b-0c1d2e3f4a5b
      dnsPolicy: ClusterFirst
      hostNetwork: true
      volumes:
      - name: cloud-config-volume
        secret:
          secretName: cloud-config
      - hostPath:
          path: /etc/kubernetes/pki
          type: Directory
        name: k8s-certs
      - hostPath:
          path: /etc/ssl/certs
          type: DirectoryOrCreate
        name: ca-certs
"#;

/// The Secret's keys and their text for an OCCM `image`; `cloud_conf` is the cloud.conf OCCM
/// gets.
pub fn secret_keys(image: &str, cloud_conf: &str) -> BTreeMap<String, String> {
    secret_keys_in(DAEMONSET.0, image, cloud_conf)
}

/// The keys of the Secret the driver writes around OCCM manifests rendered by the real code
/// (`occm`): those and the `cloud-config` Secret in `kube-system` that magnum-cluster-api's
/// Python adds (`resources.py:236-255`; the part of the driver the compiled renderer does not
/// run), with `cloud_conf`.
pub fn driver_keys(occm: &str, cloud_conf: &str) -> BTreeMap<String, String> {
    BTreeMap::from([
        (SECRET_KEY.to_string(), occm.to_string()),
        (
            "cloud-config-secret.yaml".to_string(),
            cloud_config_secret(DAEMONSET.0, cloud_conf),
        ),
    ])
}

/// `cloud-config-secret.yaml`: the Secret `cloud-config` in `ns` holding `cloud.conf`.
fn cloud_config_secret(ns: &str, cloud_conf: &str) -> String {
    let b64 = base64::engine::general_purpose::STANDARD.encode(cloud_conf.as_bytes());
    format!(
        "---\napiVersion: v1\nkind: Secret\nmetadata:\n  name: cloud-config\n  namespace: {ns}\ntype: Opaque\ndata:\n  cloud.conf: {b64}\n"
    )
}

/// [`secret_keys`] with OCCM and its `cloud-config` in namespace `ns` instead of `kube-system`.
pub fn secret_keys_in(ns: &str, image: &str, cloud_conf: &str) -> BTreeMap<String, String> {
    BTreeMap::from([
        (
            SECRET_KEY.to_string(),
            occm_manifests_in(ns, image),
        ),
        (
            "cloud-config-secret.yaml".to_string(),
            cloud_config_secret(ns, cloud_conf),
        ),
        (
            "cinder-csi.yaml".to_string(),
            "---\napiVersion: storage.k8s.io/v1\nkind: CSIDriver\nmetadata:\n  name: cinder.csi.openstack.org\nspec:\n  attachRequired: true\n  podInfoOnMount: true\n  volumeLifecycleModes:\n  - Persistent\n".to_string(),
        ),
        (
            "storageclass.yaml".to_string(),
            "---\napiVersion: storage.k8s.io/v1\nkind: StorageClass\nmetadata:\n  name: block\n  annotations:\n    storageclass.kubernetes.io/is-default-class: \"true\"\nprovisioner: cinder.csi.openstack.org\nallowVolumeExpansion: true\nreclaimPolicy: Delete\n".to_string(),
        ),
    ])
}

/// The hash Cluster API records for a Secret holding `keys` ([`resource_set_hash`]).
pub fn keys_hash(keys: &BTreeMap<String, String>) -> String {
    resource_set_hash(
        &keys
            .iter()
            .map(|(k, v)| (k.clone(), v.as_bytes().to_vec()))
            .collect(),
    )
}

/// The Secret `name` in [`NAMESPACE`] holding `keys` (base64 in `data`, as the API server keeps
/// it), as the driver writes it: a full object from the cluster's labels, no server-set
/// metadata.
pub fn secret(name: &str, keys: &BTreeMap<String, String>) -> Value {
    let data: serde_json::Map<String, Value> = keys
        .iter()
        .map(|(k, v)| {
            (
                k.clone(),
                Value::String(base64::engine::general_purpose::STANDARD.encode(v.as_bytes())),
            )
        })
        .collect();
    json!({"apiVersion": "v1", "kind": "Secret",
           "metadata": {"name": name, "namespace": NAMESPACE},
           "type": RESOURCE_SET_TYPE,
           "data": data})
}

/// The ClusterResourceSet `name` in [`NAMESPACE`] applying the Secret `secret` to the Clusters
/// labelled `cluster.x-k8s.io/cluster-name: <cluster>`, with `strategy` (`Reconcile` or
/// `ApplyOnce`; written out, as no defaulting webhook runs).
pub fn cluster_resource_set(name: &str, cluster: &str, secret: &str, strategy: &str) -> Value {
    json!({"apiVersion": "addons.cluster.x-k8s.io/v1beta2", "kind": "ClusterResourceSet",
    "metadata": {"name": name, "namespace": NAMESPACE},
    "spec": {
        "clusterSelector": {"matchLabels": {"cluster.x-k8s.io/cluster-name": cluster}},
        "resources": [{"name": secret, "kind": "Secret"}],
        "strategy": strategy
    }})
}

/// The image of the OCCM container of a DaemonSet object, when it has one.
pub fn occm_image(daemonset: &Value) -> Option<String> {
    daemonset["spec"]["template"]["spec"]["containers"]
        .as_array()?
        .iter()
        .find(|c| c["name"] == DAEMONSET.1)?["image"]
        .as_str()
        .map(str::to_string)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn crs_secret_rewrites_the_driver_secret_and_its_hash_is_cluster_api_s() {
        let upstream = "registry.k8s.io/provider-os/openstack-cloud-controller-manager:v1.34.1";
        let keys = secret_keys(upstream, "[Global]\n");
        let s = secret("kube-abc12-cloud-provider", &keys);
        let ours = "registry.example.internal/occm:v1.34.1-occmforge.1@sha256:".to_string()
            + &"ab".repeat(32);
        let out = crate::consumers::render::crs_secret::rewrite_secret(
            &serde_json::to_string(&s).unwrap(),
            &crate::consumers::render::crs_secret::RewriteOptions {
                image: ours.clone(),
                ..Default::default()
            },
        )
        .unwrap();
        assert_eq!(out.previous_image, upstream);
        assert_eq!(
            out.daemonset,
            "kube-system/openstack-cloud-controller-manager"
        );
        let written: Value = serde_norway::from_str(&out.secret).unwrap();
        let data: BTreeMap<&str, Vec<u8>> = written["data"]
            .as_object()
            .unwrap()
            .iter()
            .map(|(k, v)| {
                let b = base64::engine::general_purpose::STANDARD.decode(v.as_str().unwrap());
                (k.as_str(), b.unwrap())
            })
            .collect();
        assert_eq!(
            String::from_utf8(data[crate::consumers::render::crs_secret::SECRET_KEY].clone())
                .unwrap(),
            occm_manifests(&ours)
        );
        // Cluster API's hash: sha256 over the decoded values in key order.
        use sha2::Digest as _;
        let mut h = sha2::Sha256::new();
        for k in [
            "cinder-csi.yaml",
            "cloud-config-secret.yaml",
            "cloud-controller-manager.yaml",
            "storageclass.yaml",
        ] {
            h.update(&data[k]);
        }
        assert_eq!(out.hash, format!("sha256:{}", hex::encode(h.finalize())));
        // The Secret as the driver wrote it hashes as its keys do.
        let before =
            crate::consumers::render::crs_secret::secret_hash(&serde_json::to_string(&s).unwrap())
                .unwrap();
        assert_eq!(before, keys_hash(&keys));
        assert_ne!(out.hash, before);
    }

    #[test]
    fn the_legacy_secret_named_by_the_cluster_uuid_is_refused() {
        let keys = secret_keys("registry.k8s.io/x:v1", "");
        let s = secret("3f5e6a7b-1c2d-4e5f-8a9b-0c1d2e3f4a5b", &keys);
        let e = crate::consumers::render::crs_secret::rewrite_secret(
            &serde_json::to_string(&s).unwrap(),
            &crate::consumers::render::crs_secret::RewriteOptions {
                image: "x:y".into(),
                ..Default::default()
            },
        )
        .unwrap_err();
        assert!(
            e.0.contains("named by the cluster UUID") && e.0.contains("ApplyOnce"),
            "{e}"
        );
        assert!(!crate::consumers::render::crs_secret::is_legacy_name(
            "kube-abc12-cloud-provider"
        ));
        assert!(!crate::consumers::render::crs_secret::is_legacy_name(
            "3f5e6a7b-1c2d-4e5f-8a9b-0c1d2e3f4a5"
        ));
    }

    #[test]
    fn images_and_binding_hashes_are_read() {
        let ds = json!({"spec": {"template": {"spec": {"containers": [
            {"name": "sidecar", "image": "a"},
            {"name": "openstack-cloud-controller-manager", "image": "b"}]}}}});
        assert_eq!(occm_image(&ds).as_deref(), Some("b"));
        let binding = json!({"spec": {"bindings": [
            {"clusterResourceSetName": "other", "resources": [{"name": "s", "kind": "Secret", "hash": "x"}]},
            {"clusterResourceSetName": "crs", "resources": [{"name": "s", "kind": "Secret", "hash": "sha256:1"}]}]}});
        assert_eq!(
            crate::consumers::clusters::read::binding_hash(&binding, "crs", "s").as_deref(),
            Some("sha256:1")
        );
        assert_eq!(
            crate::consumers::clusters::read::binding_hash(&binding, "crs", "t"),
            None
        );
    }
}
