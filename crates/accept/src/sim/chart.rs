//! OCCM's identity as the chart gives it: the RBAC objects of a chart rendering (the
//! ServiceAccount the DaemonSet runs as, the ClusterRoles and Roles and their bindings), created
//! in an accept control plane, and a kubeconfig with a token of that ServiceAccount (TokenRequest,
//! `POST …/serviceaccounts/<name>/token`), so that OCCM runs with exactly the permissions a
//! cluster's chart grants it, not as an administrator. A chart whose ClusterRole cannot delete
//! nodes (2.36.2) then fails S1 the way it fails in the field.

use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};
use serde_json::{Value, json};

use super::kube::Kube;
use occm_forge_core::consumers::mcapi::rbac::{OccmRbac, occm_rbac};
use occm_forge_core::pipeline::acceptance::AcceptError;

/// How long the ServiceAccount's token lasts: longer than any run.
const TOKEN_SECONDS: u64 = 24 * 3600;

/// A chart rendering OCCM runs under.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Chart {
    /// Where it came from: `chart 2.35.0 as magnum-cluster-api 0.38.2 renders it`, or `chart
    /// 2.36.2 at <dir>`.
    pub source: String,
    /// The ServiceAccount, the ClusterRoles bound to it and whether they allow delete on
    /// nodes, one line ([`OccmRbac::describe`]).
    pub rbac: String,
    /// Whether OCCM may delete nodes under it.
    pub node_delete: bool,
    /// The rendering (a multi-document YAML stream).
    #[serde(skip)]
    pub manifests: String,
    /// The ServiceAccount, `namespace/name`.
    #[serde(skip)]
    pub service_account: String,
}

impl Chart {
    /// The chart rendering `manifests` from `source`.
    ///
    /// Errors: [`AcceptError::Input`] naming the source when its RBAC cannot be read (no OCCM
    /// DaemonSet, a ClusterRole that does not parse).
    pub fn new(source: String, manifests: String) -> Result<Chart, AcceptError> {
        let rbac: OccmRbac = occm_rbac(&manifests).map_err(|e| AcceptError::Input {
            part: source.clone(),
            message: e.0,
        })?;
        Ok(Chart {
            source,
            rbac: rbac.describe(),
            node_delete: rbac.node_delete,
            service_account: rbac.service_account,
            manifests,
        })
    }
}

/// The collection path of an RBAC object of kind `kind` in `ns` (cluster-scoped kinds ignore
/// it); `None` for other kinds.
fn collection(kind: &str, ns: &str) -> Option<String> {
    let rbac = "/apis/rbac.authorization.k8s.io/v1";
    Some(match kind {
        "ServiceAccount" => format!("/api/v1/namespaces/{ns}/serviceaccounts"),
        "ClusterRole" => format!("{rbac}/clusterroles"),
        "ClusterRoleBinding" => format!("{rbac}/clusterrolebindings"),
        "Role" => format!("{rbac}/namespaces/{ns}/roles"),
        "RoleBinding" => format!("{rbac}/namespaces/{ns}/rolebindings"),
        _ => return None,
    })
}

/// Creates the chart's RBAC objects at `kube`'s apiserver (with their namespaces), requests a
/// token for its ServiceAccount and writes `dir/occm.kubeconfig` for `url` with it. Returns that
/// path.
///
/// Errors: [`AcceptError::ControlPlane`] when the apiserver refuses an object or the token;
/// [`AcceptError::Io`] when the kubeconfig cannot be written.
pub async fn install(
    kube: &Kube,
    chart: &Chart,
    (url, ca_pem): (&str, &str),
    dir: &Path,
) -> Result<PathBuf, AcceptError> {
    let docs = serde_norway::Deserializer::from_str(&chart.manifests)
        .map(Value::deserialize)
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| AcceptError::Input {
            part: chart.source.clone(),
            message: e.to_string(),
        })?;
    for v in docs {
        let ns = v["metadata"]["namespace"].as_str().unwrap_or("default");
        let Some(path) = v["kind"].as_str().and_then(|k| collection(k, ns)) else {
            continue;
        };
        if v["kind"] == "ServiceAccount" || v["kind"] == "Role" || v["kind"] == "RoleBinding" {
            kube.create(
                "/api/v1/namespaces",
                json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": ns}}),
            )
            .await?;
        }
        kube.create(&path, v).await?;
    }
    let (ns, name) = chart
        .service_account
        .split_once('/')
        .unwrap_or(("default", &chart.service_account));
    let answer = kube
        .post(
            &format!("/api/v1/namespaces/{ns}/serviceaccounts/{name}/token"),
            json!({"apiVersion": "authentication.k8s.io/v1", "kind": "TokenRequest",
                   "spec": {"expirationSeconds": TOKEN_SECONDS}}),
        )
        .await?;
    let token = answer["status"]["token"]
        .as_str()
        .ok_or_else(|| AcceptError::ControlPlane {
            part: "kube-apiserver".into(),
            message: format!("no token for ServiceAccount {ns}/{name}"),
        })?;
    let path = dir.join("occm.kubeconfig");
    std::fs::write(
        &path,
        occm_forge_core::kubernetes::kubeconfig(url, ca_pem, token),
    )
    .map_err(|e| AcceptError::Io(format!("{}: {e}", path.display())))?;
    Ok(path)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_chart_says_what_its_service_account_may_do() {
        let manifests =
            occm_forge_core::consumers::mcapi::objects::occm_manifests("r.example/x:v1");
        let c = Chart::new("chart 2.35.0".into(), manifests.clone()).unwrap();
        assert!(c.node_delete);
        assert_eq!(c.service_account, "kube-system/cloud-controller-manager");
        let no_delete = manifests.replace(
            "  - nodes\n  verbs:\n  - '*'\n",
            "  - nodes\n  verbs:\n  - get\n  - list\n  - watch\n  - patch\n  - update\n",
        );
        let c = Chart::new("chart 2.36.2".into(), no_delete).unwrap();
        assert!(!c.node_delete);
        assert!(c.rbac.ends_with("cannot delete nodes"), "{}", c.rbac);
        let e = Chart::new("chart x".into(), "kind: ConfigMap\n".into()).unwrap_err();
        assert!(e.to_string().starts_with("chart x: no DaemonSet"), "{e}");
        assert_eq!(collection("Deployment", "x"), None);
    }
}
