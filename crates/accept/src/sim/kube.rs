//! The Kubernetes API calls the scenarios make beyond the shared client
//! ([`occm_forge_core::kubernetes::Kube`], re-exported here): Nodes as a kubelet registers and reports them,
//! and the leader-election Lease.

use std::time::Duration;

use serde_json::{Value, json};

pub use occm_forge_core::kubernetes::Kube;
use occm_forge_core::pipeline::acceptance::AcceptError;

/// The taint a kubelet started with `--cloud-provider=external` puts on its Node until the cloud
/// node controller has initialised it (k8s.io/cloud-provider/api `TaintExternalCloudProvider`).
pub const UNINITIALIZED_TAINT: &str = "node.cloudprovider.kubernetes.io/uninitialized";
/// The Lease OCCM's replicas elect their leader with (k8s.io/cloud-provider
/// options `--leader-elect-resource-name` default).
pub const LEASE: &str = "cloud-controller-manager";
/// The Lease's namespace (`--leader-elect-resource-namespace` default).
pub const LEASE_NAMESPACE: &str = "kube-system";
/// How long one request to an accept control plane may wait for an answer.
pub const TIMEOUT: Duration = Duration::from_secs(10);

/// A client for an accept control plane at `url` with its CA and admin token.
///
/// Errors: [`AcceptError::ControlPlane`] when the CA or URL cannot be used.
pub async fn client(url: &str, ca_pem: &str, token: &str) -> Result<Kube, AcceptError> {
    Ok(Kube::with_token(url, ca_pem, token, TIMEOUT).await?)
}

/// What the scenarios do to Nodes and the Lease, as a kubelet and the leader election would.
#[allow(async_fn_in_trait)]
pub trait Nodes {
    /// Creates a Node the way a kubelet registers one: no provider ID, and with
    /// `uninitialized` the cloud provider's `NoSchedule` taint.
    async fn create_node(&self, name: &str, uninitialized: bool) -> Result<(), AcceptError>;
    /// Creates a Node (no taint) whose `spec.providerID` is `provider_id`, e.g.
    /// `openstack:///<server id>`: a Node the cloud-node controller initialised long ago.
    async fn create_node_with_provider_id(
        &self,
        name: &str,
        provider_id: &str,
    ) -> Result<(), AcceptError>;
    /// Sets the Node's `Ready` condition (`False`: the kubelet stopped posting status).
    async fn set_ready(&self, name: &str, ready: bool) -> Result<(), AcceptError>;
    /// The Node, or `None` when it does not exist (404).
    async fn node(&self, name: &str) -> Result<Option<Value>, AcceptError>;
    /// Deletes every Node and the leader-election Lease (a clean cluster for the next run).
    async fn reset(&self) -> Result<(), AcceptError>;
    /// The Lease's `spec.holderIdentity`, if the Lease exists and is held.
    async fn lease_holder(&self) -> Result<Option<String>, AcceptError>;
}

/// The leader-election Lease's path.
const LEASE_PATH: &str =
    "/apis/coordination.k8s.io/v1/namespaces/kube-system/leases/cloud-controller-manager";

impl Nodes for Kube {
    async fn create_node(&self, name: &str, uninitialized: bool) -> Result<(), AcceptError> {
        let mut node = json!({
            "apiVersion": "v1",
            "kind": "Node",
            "metadata": {"name": name, "labels": {"kubernetes.io/hostname": name}},
            "spec": {}
        });
        if uninitialized {
            node["spec"]["taints"] =
                json!([{"key": UNINITIALIZED_TAINT, "value": "true", "effect": "NoSchedule"}]);
        }
        self.post("/api/v1/nodes", node).await?;
        Ok(())
    }

    async fn create_node_with_provider_id(
        &self,
        name: &str,
        provider_id: &str,
    ) -> Result<(), AcceptError> {
        let node = json!({
            "apiVersion": "v1",
            "kind": "Node",
            "metadata": {"name": name, "labels": {"kubernetes.io/hostname": name}},
            "spec": {"providerID": provider_id}
        });
        self.post("/api/v1/nodes", node).await?;
        Ok(())
    }

    async fn set_ready(&self, name: &str, ready: bool) -> Result<(), AcceptError> {
        let now =
            occm_forge_core::base::util::rfc3339(time::OffsetDateTime::now_utc().unix_timestamp());
        let (status, reason) = if ready {
            ("True", "KubeletReady")
        } else {
            ("False", "KubeletNotReady")
        };
        let patch = json!({"status": {"conditions": [{
            "type": "Ready", "status": status, "reason": reason,
            "message": "set by occm-forge accept",
            "lastHeartbeatTime": now, "lastTransitionTime": now
        }]}});
        let path = format!("/api/v1/nodes/{name}/status");
        if self.merge_patch(&path, patch).await? {
            Ok(())
        } else {
            Err(AcceptError::ControlPlane {
                part: "kube-apiserver".into(),
                message: format!("PATCH {path}: 404 Node {name} not found"),
            })
        }
    }

    async fn node(&self, name: &str) -> Result<Option<Value>, AcceptError> {
        Ok(self.get(&format!("/api/v1/nodes/{name}")).await?)
    }

    async fn reset(&self) -> Result<(), AcceptError> {
        self.delete("/api/v1/nodes").await?;
        Ok(self.delete(LEASE_PATH).await?)
    }

    async fn lease_holder(&self) -> Result<Option<String>, AcceptError> {
        Ok(self.get(LEASE_PATH).await?.and_then(|v| {
            v["spec"]["holderIdentity"]
                .as_str()
                .filter(|h| !h.is_empty())
                .map(str::to_string)
        }))
    }
}

/// What the cloud node controller has done to a Node so far.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct NodeInit {
    /// `spec.providerID`.
    pub provider_id: String,
    /// `status.addresses` of type `InternalIP`.
    pub internal_ips: Vec<String>,
    /// Whether the `uninitialized` taint is still there.
    pub tainted: bool,
}

impl NodeInit {
    /// Reads it from a Node object.
    pub fn of(node: &Value) -> NodeInit {
        NodeInit {
            provider_id: node["spec"]["providerID"]
                .as_str()
                .unwrap_or_default()
                .to_string(),
            internal_ips: node["status"]["addresses"]
                .as_array()
                .map(|a| {
                    a.iter()
                        .filter(|x| x["type"] == "InternalIP")
                        .filter_map(|x| x["address"].as_str().map(str::to_string))
                        .collect()
                })
                .unwrap_or_default(),
            tainted: node["spec"]["taints"]
                .as_array()
                .is_some_and(|t| t.iter().any(|t| t["key"] == UNINITIALIZED_TAINT)),
        }
    }

    /// Whether the Node is initialised for `server_id` with `ip`.
    pub fn done(&self, server_id: &str, ip: &str) -> bool {
        self.provider_id == format!("openstack:///{server_id}")
            && self.internal_ips.iter().any(|a| a == ip)
            && !self.tainted
    }

    /// One line: what is there and what is missing.
    pub fn describe(&self) -> String {
        format!(
            "providerID {}, InternalIP {}, taint {}",
            if self.provider_id.is_empty() {
                "empty"
            } else {
                &self.provider_id
            },
            if self.internal_ips.is_empty() {
                "none".to_string()
            } else {
                self.internal_ips.join(",")
            },
            if self.tainted {
                "still there"
            } else {
                "removed"
            }
        )
    }
}
