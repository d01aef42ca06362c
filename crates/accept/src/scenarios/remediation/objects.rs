//! The Cluster API objects a run creates, as magnum-cluster-api shapes them.

use super::*;

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
    let (replicas, trigger) = (fault.workers, fault.max_unhealthy);
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
                    "nodeStartupTimeoutSeconds": fault.node_startup_timeout.as_secs(),
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
