//! Reading the management cluster into plain data ([`super::Observed`]): one list call per kind
//! (Clusters, ClusterResourceSets, their bindings, the resource-set Secrets), one read per
//! Cluster of its control plane, and discovery of the API versions served (Cluster API v1.10
//! serves `v1beta1` only, v1.11 and later `v1beta2` too).

use std::collections::{BTreeMap, HashMap};

use kube::core::{Selector, SelectorExt as _};
use serde_json::Value;

use super::{Observed, OccmSet};
use crate::consumers::render::crs_secret;
use crate::kubernetes::{Kube, KubeError, collection};

/// Cluster API's core group.
pub const CLUSTER_GROUP: &str = "cluster.x-k8s.io";
/// Cluster API's add-ons group (ClusterResourceSet, ClusterResourceSetBinding).
pub const ADDONS_GROUP: &str = "addons.cluster.x-k8s.io";
pub use crate::consumers::mcapi::objects::RESOURCE_SET_TYPE;

/// What one read of the management cluster gave.
#[derive(Debug, Clone, Default)]
pub struct Fleet {
    /// Every Cluster of the namespace not being deleted, by name; one without an OCCM set says
    /// why ([`Observed::no_occm`]).
    pub clusters: Vec<Observed>,
    /// Clusters being deleted (`metadata.deletionTimestamp` set): not assessed.
    pub deleting: Vec<String>,
    /// The resourceVersion of the Secrets list, where a watch of them starts.
    pub secrets_version: String,
    /// The resourceVersion of the Clusters list.
    pub clusters_version: String,
    /// The version of Cluster API's core group read (`v1beta2`, or `v1beta1` on Cluster API
    /// before v1.11).
    pub cluster_api_version: String,
    /// The version of the add-ons group read.
    pub addons_version: String,
}

/// Reads every Cluster of `namespace` and what applies OCCM to it; see the module documentation.
///
/// Errors: [`KubeError`] when a list cannot be read (a 403 names the resource the credentials
/// may not list). A control plane that cannot be read is recorded in its [`Observed`] instead.
pub async fn observe(kube: &Kube, namespace: &str) -> Result<Fleet, KubeError> {
    let core = served_version(kube, CLUSTER_GROUP).await?;
    let addons = served_version(kube, ADDONS_GROUP).await?;
    let (clusters, clusters_version) = kube
        .list_with_version(&collection(CLUSTER_GROUP, &core, namespace, "clusters"))
        .await?;
    let sets = kube
        .list(&collection(
            ADDONS_GROUP,
            &addons,
            namespace,
            "clusterresourcesets",
        ))
        .await?;
    let bindings = kube
        .list(&collection(
            ADDONS_GROUP,
            &addons,
            namespace,
            "clusterresourcesetbindings",
        ))
        .await?;
    let (secrets, secrets_version) = kube
        .list_with_version(&format!(
            "{}?fieldSelector=type%3D{}",
            collection("", "v1", namespace, "secrets"),
            RESOURCE_SET_TYPE.replace('/', "%2F")
        ))
        .await?;
    let secrets: HashMap<String, Value> = secrets
        .into_iter()
        .map(|s| (name_of(&s).to_string(), s))
        .collect();
    let bindings: HashMap<String, Value> = bindings
        .into_iter()
        .map(|b| (name_of(&b).to_string(), b))
        .collect();
    let mut fleet = Fleet {
        secrets_version,
        clusters_version,
        cluster_api_version: core,
        addons_version: addons,
        ..Fleet::default()
    };
    let mut discovery = Discovery::default();
    for cluster in &clusters {
        let name = name_of(cluster).to_string();
        if cluster["metadata"].get("deletionTimestamp").is_some() {
            fleet.deleting.push(name);
            continue;
        }
        let occm = occm_sets(cluster, &sets, &secrets, bindings.get(&name));
        let no_occm = if occm.is_empty() {
            Some(no_occm(kube, cluster, &sets, namespace).await?)
        } else {
            None
        };
        let (cp_desired, cp_version, cp_error) =
            match control_plane(kube, &mut discovery, cluster, namespace).await {
                Ok(Some(cp)) => (
                    str_at(&cp, &["spec", "version"]),
                    str_at(&cp, &["status", "version"]),
                    None,
                ),
                Ok(None) => (
                    None,
                    None,
                    Some("the Cluster has no controlPlaneRef".into()),
                ),
                Err(e) => (None, None, Some(e.to_string())),
            };
        fleet.clusters.push(Observed {
            namespace: namespace.to_string(),
            name,
            desired_version: str_at(cluster, &["spec", "topology", "version"]).or(cp_desired),
            control_plane_version: cp_version,
            control_plane_error: cp_error,
            sets: occm,
            no_occm,
        });
    }
    Ok(fleet)
}

fn name_of(v: &Value) -> &str {
    v["metadata"]["name"].as_str().unwrap_or_default()
}

fn str_at(v: &Value, path: &[&str]) -> Option<String> {
    let mut cur = v;
    for k in path {
        cur = cur.get(*k)?;
    }
    cur.as_str().filter(|s| !s.is_empty()).map(str::to_string)
}

/// The version of `group` to read: `v1beta2` when served, else the group's preferred version.
///
/// Errors: [`KubeError`]; a group that is not served at all is a 404 naming it (no Cluster API
/// installed).
async fn served_version(kube: &Kube, group: &str) -> Result<String, KubeError> {
    let path = format!("/apis/{group}");
    let Some(g) = kube.get(&path).await? else {
        return Err(KubeError::Status {
            server: kube.server().to_string(),
            method: "GET".into(),
            path,
            code: 404,
            message: format!("the API group {group} is not served: is Cluster API installed?"),
        });
    };
    let versions: Vec<&str> = g["versions"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|v| v["version"].as_str())
        .collect();
    Ok(if versions.contains(&"v1beta2") {
        "v1beta2".into()
    } else {
        g["preferredVersion"]["version"]
            .as_str()
            .unwrap_or("v1beta1")
            .to_string()
    })
}

/// The sets of `sets` whose selector matches `cluster`'s labels and whose resources include a
/// Secret of `secrets` holding OCCM's key, each with what the binding records.
fn occm_sets(
    cluster: &Value,
    sets: &[Value],
    secrets: &HashMap<String, Value>,
    binding: Option<&Value>,
) -> Vec<OccmSet> {
    let labels: BTreeMap<String, String> =
        serde_json::from_value(cluster["metadata"]["labels"].clone()).unwrap_or_default();
    let mut out = Vec::new();
    for set in sets {
        if !selects(&set["spec"]["clusterSelector"], &labels) {
            continue;
        }
        let resources = set["spec"]["resources"]
            .as_array()
            .cloned()
            .unwrap_or_default();
        for r in resources.iter().filter(|r| r["kind"] == "Secret") {
            let Some(listed) = r["name"].as_str().and_then(|n| secrets.get(n)) else {
                continue;
            };
            if !holds_occm(listed) {
                continue;
            }
            // A list's items carry no kind or apiVersion: the Secret as `kubectl get -o json`
            // prints it.
            let mut secret = listed.clone();
            secret["apiVersion"] = "v1".into();
            secret["kind"] = "Secret".into();
            let secret = &secret;
            let set_name = name_of(set).to_string();
            let secret_name = name_of(secret).to_string();
            let text = secret.to_string();
            out.push(OccmSet {
                strategy: set["spec"]["strategy"].as_str().unwrap_or_default().into(),
                image: crs_secret::occm_image(&text).map_err(|e| e.0),
                rbac: crs_secret::occm_rbac(&text).map_err(|e| e.0),
                hash: crs_secret::secret_hash(&text).unwrap_or_default(),
                binding_hash: binding.and_then(|b| binding_hash(b, &set_name, &secret_name)),
                resource_version: str_at(secret, &["metadata", "resourceVersion"])
                    .unwrap_or_default(),
                resource_set: set_name,
                secret: secret_name,
                object: secret.clone(),
            });
        }
    }
    out
}

/// Why a Cluster has no OCCM set, one line: the Secrets its ClusterResourceSets name that do not
/// exist or are not of [`RESOURCE_SET_TYPE`] (read one by one: the list read only that type), or
/// that none of them applies a Secret with OCCM's key.
///
/// Errors: [`KubeError`] when a named Secret cannot be read (other than a 404).
async fn no_occm(
    kube: &Kube,
    cluster: &Value,
    sets: &[Value],
    namespace: &str,
) -> Result<String, KubeError> {
    let labels: BTreeMap<String, String> =
        serde_json::from_value(cluster["metadata"]["labels"].clone()).unwrap_or_default();
    let mut causes = Vec::new();
    let mut selecting = 0;
    for set in sets
        .iter()
        .filter(|s| selects(&s["spec"]["clusterSelector"], &labels))
    {
        selecting += 1;
        for r in set["spec"]["resources"].as_array().into_iter().flatten() {
            let (Some("Secret"), Some(secret)) = (r["kind"].as_str(), r["name"].as_str()) else {
                continue;
            };
            let path = format!("{}/{secret}", collection("", "v1", namespace, "secrets"));
            match kube.get(&path).await? {
                None => causes.push(format!(
                    "ClusterResourceSet {} names Secret {secret}, which does not exist",
                    name_of(set)
                )),
                Some(s) if s["type"].as_str() != Some(RESOURCE_SET_TYPE) => causes.push(format!(
                    "ClusterResourceSet {} names Secret {secret} of type {}, which Cluster API does not apply (it applies type {RESOURCE_SET_TYPE})",
                    name_of(set),
                    s["type"].as_str().unwrap_or("Opaque")
                )),
                Some(_) => {}
            }
        }
    }
    Ok(if !causes.is_empty() {
        causes.join("; ")
    } else if selecting == 0 {
        "no ClusterResourceSet selects it".into()
    } else {
        format!(
            "none of the {selecting} ClusterResourceSet(s) selecting it applies a Secret with {}",
            crs_secret::SECRET_KEY
        )
    })
}

/// Whether a ClusterResourceSet's `clusterSelector` selects a Cluster with `labels`. An empty
/// selector selects nothing, as in Cluster API (`clusterresourceset_controller.go`
/// `getClustersByClusterResourceSetSelector`); one that does not parse selects nothing.
pub fn selects(selector: &Value, labels: &BTreeMap<String, String>) -> bool {
    let Ok(ls) = serde_json::from_value::<
        k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector,
    >(selector.clone()) else {
        return false;
    };
    match Selector::try_from(ls) {
        Ok(s) => !s.selects_all() && s.matches(labels),
        Err(_) => false,
    }
}

/// Whether the Secret holds OCCM's key (`cloud-controller-manager.yaml`) in `data` or
/// `stringData`.
fn holds_occm(secret: &Value) -> bool {
    ["data", "stringData"]
        .iter()
        .any(|f| secret[*f].get(crs_secret::SECRET_KEY).is_some())
}

/// The hash a ClusterResourceSetBinding records for the Secret `secret` of the set `set`.
pub fn binding_hash(binding: &Value, set: &str, secret: &str) -> Option<String> {
    binding["spec"]["bindings"]
        .as_array()?
        .iter()
        .find(|b| b["clusterResourceSetName"] == set)?["resources"]
        .as_array()?
        .iter()
        .find(|r| r["name"] == secret && r["kind"] == "Secret")?["hash"]
        .as_str()
        .map(str::to_string)
}

/// API discovery answers of one pass: a group's preferred version, a group version's kinds.
#[derive(Default)]
struct Discovery {
    preferred: HashMap<String, String>,
    plurals: HashMap<(String, String), String>,
}

impl Discovery {
    /// The resource (plural) of `kind` in `group/version`.
    async fn resource(
        &mut self,
        kube: &Kube,
        group: &str,
        version: &str,
        kind: &str,
    ) -> Result<Option<String>, KubeError> {
        let key = (format!("{group}/{version}"), kind.to_string());
        if let Some(p) = self.plurals.get(&key) {
            return Ok(Some(p.clone()));
        }
        let Some(list) = kube.get(&format!("/apis/{group}/{version}")).await? else {
            return Ok(None);
        };
        for r in list["resources"].as_array().into_iter().flatten() {
            let (Some(name), Some(k)) = (r["name"].as_str(), r["kind"].as_str()) else {
                continue;
            };
            if !name.contains('/') {
                self.plurals
                    .insert((key.0.clone(), k.to_string()), name.to_string());
            }
        }
        Ok(self.plurals.get(&key).cloned())
    }

    /// The preferred version of `group`.
    async fn preferred(&mut self, kube: &Kube, group: &str) -> Result<Option<String>, KubeError> {
        if let Some(v) = self.preferred.get(group) {
            return Ok(Some(v.clone()));
        }
        let v = kube.get(&format!("/apis/{group}")).await?.and_then(|g| {
            g["preferredVersion"]["version"]
                .as_str()
                .map(str::to_string)
        });
        if let Some(v) = &v {
            self.preferred.insert(group.to_string(), v.clone());
        }
        Ok(v)
    }
}

/// The object `cluster.spec.controlPlaneRef` names (v1beta2 `apiGroup`, v1beta1 `apiVersion`),
/// `None` when the Cluster has none.
///
/// Errors: [`KubeError`] when it cannot be read or its kind is not served.
async fn control_plane(
    kube: &Kube,
    discovery: &mut Discovery,
    cluster: &Value,
    namespace: &str,
) -> Result<Option<Value>, KubeError> {
    let r = &cluster["spec"]["controlPlaneRef"];
    let (Some(kind), Some(name)) = (r["kind"].as_str(), r["name"].as_str()) else {
        return Ok(None);
    };
    let (group, version) = match (r["apiGroup"].as_str(), r["apiVersion"].as_str()) {
        (_, Some(av)) if av.contains('/') => {
            let (g, v) = av.split_once('/').expect("checked");
            (g.to_string(), Some(v.to_string()))
        }
        (Some(g), _) => (g.to_string(), None),
        _ => return Ok(None),
    };
    let version = match version {
        Some(v) => v,
        None => match discovery.preferred(kube, &group).await? {
            Some(v) => v,
            None => return Err(not_served(kube, &group, kind)),
        },
    };
    let Some(resource) = discovery.resource(kube, &group, &version, kind).await? else {
        return Err(not_served(kube, &group, kind));
    };
    let path = format!(
        "{}/{name}",
        collection(&group, &version, namespace, &resource)
    );
    match kube.get(&path).await? {
        Some(v) => Ok(Some(v)),
        None => Err(KubeError::Status {
            server: kube.server().to_string(),
            method: "GET".into(),
            path,
            code: 404,
            message: format!("{kind} {name} not found"),
        }),
    }
}

fn not_served(kube: &Kube, group: &str, kind: &str) -> KubeError {
    KubeError::Status {
        server: kube.server().to_string(),
        method: "GET".into(),
        path: format!("/apis/{group}"),
        code: 404,
        message: format!("kind {kind} of {group} is not served"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn selectors_match_as_cluster_api_matches_them() {
        let labels: BTreeMap<String, String> = [
            (
                "cluster.x-k8s.io/cluster-name".to_string(),
                "kube-abc12".to_string(),
            ),
            ("env".to_string(), "prod".to_string()),
        ]
        .into();
        let by_name = json!({"matchLabels": {"cluster.x-k8s.io/cluster-name": "kube-abc12"}});
        assert!(selects(&by_name, &labels));
        let other = json!({"matchLabels": {"cluster.x-k8s.io/cluster-name": "kube-def34"}});
        assert!(!selects(&other, &labels));
        let expr = json!({"matchExpressions": [{"key": "env", "operator": "In", "values": ["prod", "stage"]}]});
        assert!(selects(&expr, &labels));
        let not =
            json!({"matchExpressions": [{"key": "env", "operator": "NotIn", "values": ["prod"]}]});
        assert!(!selects(&not, &labels));
        assert!(
            !selects(&json!({}), &labels),
            "an empty selector selects nothing"
        );
        assert!(!selects(&Value::Null, &labels));
    }

    #[test]
    fn the_sets_applying_an_occm_secret_are_found_with_their_binding_hash() {
        let keys = crate::consumers::mcapi::objects::secret_keys(
            "registry.k8s.io/provider-os/openstack-cloud-controller-manager:v1.34.1",
            "",
        );
        let mut secret =
            crate::consumers::mcapi::objects::secret("kube-abc12-cloud-provider", &keys);
        secret["metadata"]["resourceVersion"] = json!("42");
        // As a list gives its items: without kind and apiVersion.
        let secret = {
            let mut m = secret.as_object().unwrap().clone();
            m.remove("kind");
            m.remove("apiVersion");
            Value::Object(m)
        };
        let other = json!({"metadata": {"name": "kube-abc12-cni"}, "data": {"cni.yaml": ""}});
        let secrets: HashMap<String, Value> = [
            ("kube-abc12-cloud-provider".to_string(), secret.clone()),
            ("kube-abc12-cni".to_string(), other),
        ]
        .into();
        let sets = vec![
            crate::consumers::mcapi::objects::cluster_resource_set(
                "kube-abc12-cloud-provider",
                "kube-abc12",
                "kube-abc12-cloud-provider",
                "Reconcile",
            ),
            crate::consumers::mcapi::objects::cluster_resource_set(
                "kube-abc12-cni",
                "kube-abc12",
                "kube-abc12-cni",
                "Reconcile",
            ),
            crate::consumers::mcapi::objects::cluster_resource_set(
                "kube-def34-cloud-provider",
                "kube-def34",
                "kube-abc12-cloud-provider",
                "Reconcile",
            ),
        ];
        let cluster = json!({"metadata": {"name": "kube-abc12", "labels": {"cluster.x-k8s.io/cluster-name": "kube-abc12"}}});
        let binding = json!({"spec": {"bindings": [{"clusterResourceSetName": "kube-abc12-cloud-provider",
            "resources": [{"kind": "Secret", "name": "kube-abc12-cloud-provider", "hash": "sha256:1", "applied": true}]}]}});
        let found = occm_sets(&cluster, &sets, &secrets, Some(&binding));
        assert_eq!(found.len(), 1, "{found:?}");
        let s = &found[0];
        assert_eq!(
            (
                s.resource_set.as_str(),
                s.strategy.as_str(),
                s.secret.as_str(),
                s.resource_version.as_str()
            ),
            (
                "kube-abc12-cloud-provider",
                "Reconcile",
                "kube-abc12-cloud-provider",
                "42"
            )
        );
        assert_eq!(
            s.image.as_deref(),
            Ok("registry.k8s.io/provider-os/openstack-cloud-controller-manager:v1.34.1")
        );
        assert_eq!(s.hash, crate::consumers::mcapi::objects::keys_hash(&keys));
        assert_eq!(s.binding_hash.as_deref(), Some("sha256:1"));
        assert!(
            occm_sets(&cluster, &sets, &secrets, None)[0]
                .binding_hash
                .is_none()
        );
    }
}
