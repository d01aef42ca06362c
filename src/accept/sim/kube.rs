//! The few Kubernetes API calls the scenarios make, over plain HTTPS with the control plane's
//! CA and bearer token (no kubectl): Nodes (create, status, read, delete) and the leader-election
//! Lease.

use std::time::Duration;

use serde_json::{Value, json};

use crate::accept::AcceptError;

/// The taint a kubelet started with `--cloud-provider=external` puts on its Node until the cloud
/// node controller has initialised it (k8s.io/cloud-provider/api `TaintExternalCloudProvider`).
pub const UNINITIALIZED_TAINT: &str = "node.cloudprovider.kubernetes.io/uninitialized";
/// The Lease OCCM's replicas elect their leader with (k8s.io/cloud-provider
/// options `--leader-elect-resource-name` default).
pub const LEASE: &str = "cloud-controller-manager";
/// The Lease's namespace (`--leader-elect-resource-namespace` default).
pub const LEASE_NAMESPACE: &str = "kube-system";

/// A Kubernetes API client for one control plane.
#[derive(Clone)]
pub struct Kube {
    base: String,
    token: String,
    http: reqwest::Client,
}

fn api(message: String) -> AcceptError {
    AcceptError::ControlPlane {
        part: "kube-apiserver".into(),
        message,
    }
}

impl Kube {
    /// A client for `base` (`https://127.0.0.1:<port>`) trusting only `ca_pem`.
    pub fn new(base: &str, ca_pem: &str, token: &str) -> Result<Kube, AcceptError> {
        let ca = reqwest::Certificate::from_pem(ca_pem.as_bytes())
            .map_err(|e| api(format!("CA certificate: {e}")))?;
        let http = reqwest::Client::builder()
            .tls_certs_only([ca])
            .timeout(Duration::from_secs(10))
            .build()
            .map_err(|e| api(format!("HTTP client: {e}")))?;
        Ok(Kube {
            base: base.to_string(),
            token: token.to_string(),
            http,
        })
    }

    /// One request; a `429 Too Many Requests` (the apiserver says so while a new CRD's
    /// storage is still initialising, or under its max-in-flight limit) is retried every 200 ms
    /// for up to 15 s, as client-go retries it.
    async fn call(
        &self,
        method: reqwest::Method,
        path: &str,
        body: Option<(&str, Value)>,
    ) -> Result<(u16, Value), AcceptError> {
        let started = std::time::Instant::now();
        loop {
            let mut req = self
                .http
                .request(method.clone(), format!("{}{path}", self.base))
                .bearer_auth(&self.token);
            if let Some((content_type, body)) = &body {
                req = req
                    .header("Content-Type", *content_type)
                    .body(serde_json::to_vec(body).expect("JSON serialises"));
            }
            let resp = req
                .send()
                .await
                .map_err(|e| api(format!("{method} {path}: {e}")))?;
            let status = resp.status().as_u16();
            let value = resp.json::<Value>().await.unwrap_or(Value::Null);
            if status == 429 && started.elapsed() < Duration::from_secs(15) {
                tokio::time::sleep(Duration::from_millis(200)).await;
                continue;
            }
            return Ok((status, value));
        }
    }

    async fn expect(
        &self,
        method: reqwest::Method,
        path: &str,
        body: Option<(&str, Value)>,
        ok: &[u16],
    ) -> Result<Value, AcceptError> {
        let (status, value) = self.call(method.clone(), path, body).await?;
        if ok.contains(&status) || (200..300).contains(&status) {
            Ok(value)
        } else {
            Err(api(format!(
                "{method} {path}: {status} {}",
                value["message"].as_str().unwrap_or("")
            )))
        }
    }

    /// Server-side apply of `object` at `path` (the object's own URL, e.g.
    /// `/apis/apiextensions.k8s.io/v1/customresourcedefinitions/<name>`): `PATCH` with
    /// `application/apply-patch+yaml` (JSON is YAML), field manager `occm-forge`, conflicts
    /// forced. Returns the object as stored.
    ///
    /// Errors: [`AcceptError::ControlPlane`] with the apiserver's status and message.
    pub async fn apply(&self, path: &str, object: Value) -> Result<Value, AcceptError> {
        self.expect(
            reqwest::Method::PATCH,
            &format!("{path}?fieldManager=occm-forge&force=true"),
            Some(("application/apply-patch+yaml", object)),
            &[],
        )
        .await
    }

    /// The object at `path`, or `None` when it does not exist (404).
    ///
    /// Errors: [`AcceptError::ControlPlane`] for any other status than 200.
    pub async fn get(&self, path: &str) -> Result<Option<Value>, AcceptError> {
        let (status, v) = self.call(reqwest::Method::GET, path, None).await?;
        match status {
            404 => Ok(None),
            200 => Ok(Some(v)),
            s => Err(api(format!(
                "GET {path}: {s} {}",
                v["message"].as_str().unwrap_or("")
            ))),
        }
    }

    /// Creates `object` in the collection at `path` (`POST`); an object that exists already
    /// (409) is left as it is.
    ///
    /// Errors: [`AcceptError::ControlPlane`] with the apiserver's status and message.
    pub async fn create(&self, path: &str, object: Value) -> Result<(), AcceptError> {
        self.expect(
            reqwest::Method::POST,
            path,
            Some(("application/json", object)),
            &[409],
        )
        .await
        .map(drop)
    }

    /// A JSON merge patch (RFC 7386) of the object at `path` (its `/status` for the status
    /// subresource); a missing object (404) is not an error.
    ///
    /// Errors: [`AcceptError::ControlPlane`] with the apiserver's status and message.
    pub async fn merge_patch(&self, path: &str, patch: Value) -> Result<(), AcceptError> {
        self.expect(
            reqwest::Method::PATCH,
            path,
            Some(("application/merge-patch+json", patch)),
            &[404],
        )
        .await
        .map(drop)
    }

    /// Replaces the object at `path` with `object` (`PUT`, what `kubectl replace -f` sends);
    /// without `metadata.resourceVersion` the update is unconditional.
    ///
    /// Errors: [`AcceptError::ControlPlane`] with the apiserver's status and message.
    pub async fn replace(&self, path: &str, object: Value) -> Result<(), AcceptError> {
        self.expect(
            reqwest::Method::PUT,
            path,
            Some(("application/json", object)),
            &[],
        )
        .await
        .map(drop)
    }

    /// The `items` of the list at `path` (empty when the list has none).
    ///
    /// Errors: [`AcceptError::ControlPlane`] when the list cannot be read.
    pub async fn list(&self, path: &str) -> Result<Vec<Value>, AcceptError> {
        let v = self.expect(reqwest::Method::GET, path, None, &[]).await?;
        Ok(v["items"].as_array().cloned().unwrap_or_default())
    }

    /// Deletes the object (or, for a collection, every object) at `path`; a missing one (404)
    /// is not an error.
    ///
    /// Errors: [`AcceptError::ControlPlane`] with the apiserver's status and message.
    pub async fn delete(&self, path: &str) -> Result<(), AcceptError> {
        self.expect(reqwest::Method::DELETE, path, None, &[404])
            .await
            .map(drop)
    }

    /// Applies each CustomResourceDefinition of `crds` server-side ([`Kube::apply`]) and waits
    /// until every one reports `Established=True`, at most `limit` in all. Returns the seconds it
    /// took.
    ///
    /// Errors: [`AcceptError::ControlPlane`] naming the CRD the apiserver refused or did not
    /// establish in time.
    pub async fn apply_crds(&self, crds: Vec<Value>, limit: Duration) -> Result<f64, AcceptError> {
        let t = std::time::Instant::now();
        let path =
            |name: &str| format!("/apis/apiextensions.k8s.io/v1/customresourcedefinitions/{name}");
        let mut names = Vec::new();
        for crd in crds {
            let name = crd["metadata"]["name"]
                .as_str()
                .unwrap_or_default()
                .to_string();
            self.apply(&path(&name), crd).await?;
            names.push(name);
        }
        for name in &names {
            loop {
                let established = self.get(&path(name)).await?.is_some_and(|c| {
                    c["status"]["conditions"].as_array().is_some_and(|cs| {
                        cs.iter()
                            .any(|c| c["type"] == "Established" && c["status"] == "True")
                    })
                });
                if established {
                    break;
                }
                if t.elapsed() >= limit {
                    return Err(api(format!(
                        "CRD {name} not Established after {} s",
                        limit.as_secs()
                    )));
                }
                tokio::time::sleep(Duration::from_millis(200)).await;
            }
        }
        Ok(t.elapsed().as_secs_f64())
    }

    /// Creates a Node the way a kubelet registers one: no provider ID, and with
    /// `uninitialized` the cloud provider's `NoSchedule` taint.
    pub async fn create_node(&self, name: &str, uninitialized: bool) -> Result<(), AcceptError> {
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
        self.expect(
            reqwest::Method::POST,
            "/api/v1/nodes",
            Some(("application/json", node)),
            &[],
        )
        .await
        .map(drop)
    }

    /// Sets the Node's `Ready` condition (`False`: the kubelet stopped posting status).
    pub async fn set_ready(&self, name: &str, ready: bool) -> Result<(), AcceptError> {
        let now = crate::util::rfc3339(time::OffsetDateTime::now_utc().unix_timestamp());
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
        self.expect(
            reqwest::Method::PATCH,
            &format!("/api/v1/nodes/{name}/status"),
            Some(("application/merge-patch+json", patch)),
            &[],
        )
        .await
        .map(drop)
    }

    /// The Node, or `None` when it does not exist (404).
    pub async fn node(&self, name: &str) -> Result<Option<Value>, AcceptError> {
        self.get(&format!("/api/v1/nodes/{name}")).await
    }

    /// Deletes every Node and the leader-election Lease (a clean cluster for the next run).
    pub async fn reset(&self) -> Result<(), AcceptError> {
        self.expect(reqwest::Method::DELETE, "/api/v1/nodes", None, &[])
            .await?;
        self.expect(
            reqwest::Method::DELETE,
            &format!("/apis/coordination.k8s.io/v1/namespaces/{LEASE_NAMESPACE}/leases/{LEASE}"),
            None,
            &[404],
        )
        .await
        .map(drop)
    }

    /// The Lease's `spec.holderIdentity`, if the Lease exists and is held.
    pub async fn lease_holder(&self) -> Result<Option<String>, AcceptError> {
        let (status, v) = self
            .call(
                reqwest::Method::GET,
                &format!(
                    "/apis/coordination.k8s.io/v1/namespaces/{LEASE_NAMESPACE}/leases/{LEASE}"
                ),
                None,
            )
            .await?;
        if status != 200 {
            return Ok(None);
        }
        Ok(v["spec"]["holderIdentity"]
            .as_str()
            .filter(|h| !h.is_empty())
            .map(str::to_string))
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
