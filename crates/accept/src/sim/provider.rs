//! Stand-ins for what a real Cluster API cluster on OpenStack has besides Cluster API's core: an
//! infrastructure provider (in CAPO's place) and the kubelets of its machines.
//!
//! - The provider's CRDs ([`crds`]): `AcceptCluster` (InfraCluster), `AcceptMachineTemplate` and
//!   `AcceptMachine` (InfraMachine) in [`GROUP`], `AcceptControlPlane` in
//!   [`CONTROL_PLANE_GROUP`], each labelled with the contract version Cluster API reads
//!   (`cluster.x-k8s.io/v1beta2: v1alpha1`, internal/contract) and with a status subresource.
//! - For each new AcceptMachine it creates a Nova server of the same name in the simulated cloud,
//!   sets `spec.providerID: openstack:///<server id>` (what CAPO sets) and reports it provisioned
//!   (`status.initialization.provisioned`, v1beta2 contract; `status.ready`, v1beta1); a kubelet
//!   stand-in then registers the Node (named as the server, as kubelet names it after the
//!   hostname) with the `uninitialized` taint, no provider ID, and keeps its conditions (Ready and
//!   the three pressures NodeHealthy needs) and its Lease in `kube-node-lease` fresh.
//! - A deleted AcceptMachine deletes its server and leaves the Node as a vanished VM leaves it:
//!   nothing posts its status any more, and it is marked `Ready=Unknown` as kube-controller-
//!   manager's node lifecycle controller marks it (after its 40 s grace period; at once here, as
//!   no kube-controller-manager runs).
//!
//! What to do is decided by [`plan`] from plain data (tested offline); [`Provider::tick`] reads
//! the API, plans and does it.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use serde_json::{Value, json};

use super::cloud::{Server, SimulatedCloud};
use super::kube::{Kube, Nodes as _};
use occm_forge_core::pipeline::acceptance::AcceptError;

/// The stand-in infrastructure provider's API group.
pub const GROUP: &str = "infrastructure.accept.occm-forge.invalid";
/// The stand-in control plane provider's API group.
pub const CONTROL_PLANE_GROUP: &str = "controlplane.accept.occm-forge.invalid";
/// The stand-ins' API version (the value of their contract label).
pub const VERSION: &str = "v1alpha1";
/// How often a kubelet stand-in posts its Node's status and renews its Lease (kubelet's
/// `nodeStatusReportFrequency` when the status changes, and `nodeLeaseDurationSeconds` 40 / 4).
pub const HEARTBEAT: Duration = Duration::from_secs(10);

/// One CRD of the stand-ins: namespaced, one served and stored version, any fields
/// (`x-kubernetes-preserve-unknown-fields`), a status subresource.
fn crd(group: &str, kind: &str) -> Value {
    let plural = format!("{}s", kind.to_ascii_lowercase());
    json!({
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {
            "name": format!("{plural}.{group}"),
            "labels": {"cluster.x-k8s.io/v1beta2": VERSION}
        },
        "spec": {
            "group": group,
            "scope": "Namespaced",
            "names": {
                "kind": kind,
                "listKind": format!("{kind}List"),
                "plural": plural,
                "singular": kind.to_ascii_lowercase()
            },
            "versions": [{
                "name": VERSION,
                "served": true,
                "storage": true,
                "subresources": {"status": {}},
                "schema": {"openAPIV3Schema": {
                    "type": "object",
                    "x-kubernetes-preserve-unknown-fields": true
                }}
            }]
        }
    })
}

/// The objects of one Cluster of the stand-ins, in the order they are created, as (collection
/// path, object): the `<cluster>-kubeconfig` Secret (Cluster API's workload-cluster access,
/// pointing back at `apiserver`, `https://127.0.0.1:<port>`, with `kubeconfig`'s text), the
/// AcceptCluster, the AcceptControlPlane (Kubernetes `version`) and the Cluster labelled
/// `cluster.x-k8s.io/cluster-name: <cluster>`, each with the fields the webhooks that do not run
/// here would add. The namespace must exist.
pub fn cluster_objects(
    namespace: &str,
    cluster: &str,
    apiserver: &str,
    kubeconfig: &str,
    version: &str,
) -> Vec<(String, Value)> {
    let port: u16 = apiserver
        .rsplit(':')
        .next()
        .and_then(|p| p.parse().ok())
        .unwrap_or(443);
    let label = json!({"cluster.x-k8s.io/cluster-name": cluster});
    let endpoint = json!({"host": "127.0.0.1", "port": port});
    vec![
        (
            format!("/api/v1/namespaces/{namespace}/secrets"),
            json!({"apiVersion": "v1", "kind": "Secret",
                   "metadata": {"name": format!("{cluster}-kubeconfig"), "namespace": namespace,
                                "labels": label},
                   "type": "cluster.x-k8s.io/secret",
                   "stringData": {"value": kubeconfig}}),
        ),
        (
            collection(GROUP, "AcceptCluster", namespace),
            json!({"apiVersion": format!("{GROUP}/{VERSION}"), "kind": "AcceptCluster",
                   "metadata": {"name": cluster, "namespace": namespace, "labels": label},
                   "spec": {"controlPlaneEndpoint": endpoint}}),
        ),
        (
            collection(CONTROL_PLANE_GROUP, "AcceptControlPlane", namespace),
            json!({"apiVersion": format!("{CONTROL_PLANE_GROUP}/{VERSION}"),
                   "kind": "AcceptControlPlane",
                   "metadata": {"name": cluster, "namespace": namespace, "labels": label},
                   "spec": {"version": version}}),
        ),
        (
            format!("/apis/cluster.x-k8s.io/v1beta2/namespaces/{namespace}/clusters"),
            json!({"apiVersion": "cluster.x-k8s.io/v1beta2", "kind": "Cluster",
            "metadata": {"name": cluster, "namespace": namespace, "labels": label},
            "spec": {
                "controlPlaneEndpoint": endpoint,
                "infrastructureRef": {"apiGroup": GROUP, "kind": "AcceptCluster", "name": cluster},
                "controlPlaneRef": {"apiGroup": CONTROL_PLANE_GROUP, "kind": "AcceptControlPlane", "name": cluster}
            }}),
        ),
    ]
}

/// The stand-ins' four CRDs.
pub fn crds() -> Vec<Value> {
    vec![
        crd(GROUP, "AcceptCluster"),
        crd(GROUP, "AcceptMachineTemplate"),
        crd(GROUP, "AcceptMachine"),
        crd(CONTROL_PLANE_GROUP, "AcceptControlPlane"),
    ]
}

/// The collection path of a stand-in kind in `namespace`.
pub fn collection(group: &str, kind: &str, namespace: &str) -> String {
    format!(
        "/apis/{group}/{VERSION}/namespaces/{namespace}/{}s",
        kind.to_ascii_lowercase()
    )
}

/// An AcceptMachine as the planner sees it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct InfraMachine {
    /// `metadata.name`.
    pub name: String,
    /// `spec.providerID`, empty when unset.
    pub provider_id: String,
}

impl InfraMachine {
    /// Reads it from an AcceptMachine object.
    pub fn of(v: &Value) -> InfraMachine {
        InfraMachine {
            name: v["metadata"]["name"].as_str().unwrap_or_default().into(),
            provider_id: v["spec"]["providerID"].as_str().unwrap_or_default().into(),
        }
    }
}

/// A machine the provider created a server for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Provisioned {
    /// The Nova server's UUID.
    pub server_id: String,
    /// Its fixed IP.
    pub ip: String,
    /// Its Node's name (the server's name).
    pub node: String,
}

/// One thing the provider and kubelets do.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Action {
    /// Create the Nova server, set the machine's provider ID and provisioned status, register
    /// its Node.
    Provision {
        /// The AcceptMachine.
        machine: String,
        /// What it gets.
        provisioned: Provisioned,
    },
    /// The machine is gone: delete its server, stop its kubelet, mark its Node `Unknown`.
    Vanish {
        /// The AcceptMachine.
        machine: String,
        /// What it had.
        provisioned: Provisioned,
    },
}

/// What to do, given the AcceptMachines listed now and those provisioned before; `next` numbers
/// new servers (incremented per server). A machine listed with a provider ID the provider did
/// not set is left alone (not ours).
pub fn plan(
    listed: &[InfraMachine],
    known: &BTreeMap<String, Provisioned>,
    next: &mut u32,
) -> Vec<Action> {
    let mut out = Vec::new();
    for m in listed {
        if known.contains_key(&m.name) || !m.provider_id.is_empty() {
            continue;
        }
        *next += 1;
        out.push(Action::Provision {
            machine: m.name.clone(),
            provisioned: Provisioned {
                server_id: format!("5e5e0000-0000-4000-8000-{:012x}", *next),
                ip: format!("10.0.{}.{}", 1 + *next / 250, 1 + *next % 250),
                node: m.name.clone(),
            },
        });
    }
    for (name, p) in known {
        if !listed.iter().any(|m| &m.name == name) {
            out.push(Action::Vanish {
                machine: name.clone(),
                provisioned: p.clone(),
            });
        }
    }
    out
}

/// The Node conditions a healthy kubelet posts: `Ready=True` and the three pressures `False`
/// (Cluster API's NodeHealthy stays Unknown without them), heartbeat `now`, transitions at
/// `since` (RFC 3339).
pub fn healthy_conditions(now: &str, since: &str) -> Value {
    let c = |t: &str, status: &str, reason: &str| {
        json!({"type": t, "status": status, "reason": reason,
               "message": "posted by occm-forge's kubelet stand-in",
               "lastHeartbeatTime": now, "lastTransitionTime": since})
    };
    json!([
        c("MemoryPressure", "False", "KubeletHasSufficientMemory"),
        c("DiskPressure", "False", "KubeletHasNoDiskPressure"),
        c("PIDPressure", "False", "KubeletHasSufficientPID"),
        c("Ready", "True", "KubeletReady"),
    ])
}

/// The conditions kube-controller-manager leaves on a Node whose kubelet stopped posting:
/// every condition `Unknown`, reason `NodeStatusUnknown`.
pub fn vanished_conditions(now: &str) -> Value {
    let c = |t: &str| {
        json!({"type": t, "status": "Unknown", "reason": "NodeStatusUnknown",
               "message": "Kubelet stopped posting node status.",
               "lastHeartbeatTime": now, "lastTransitionTime": now})
    };
    json!([
        c("MemoryPressure"),
        c("DiskPressure"),
        c("PIDPressure"),
        c("Ready")
    ])
}

fn now_rfc3339() -> String {
    occm_forge_core::base::util::rfc3339(time::OffsetDateTime::now_utc().unix_timestamp())
}

/// A Lease's `renewTime` (`MicroTime`: RFC 3339 with microseconds).
fn micro_now() -> String {
    let t = time::OffsetDateTime::now_utc();
    format!(
        "{}.{:06}Z",
        now_rfc3339().trim_end_matches('Z'),
        t.microsecond()
    )
}

/// A kubelet stand-in's state for one Node.
#[derive(Debug)]
struct Kubelet {
    since: String,
    last: Instant,
}

/// The running stand-ins for one namespace of one cluster.
pub struct Provider {
    namespace: String,
    known: BTreeMap<String, Provisioned>,
    kubelets: BTreeMap<String, Kubelet>,
    next: u32,
    /// Every action taken, with seconds since [`Provider::new`], for the run's log.
    pub log: Vec<(f64, Action)>,
    started: Instant,
}

impl Provider {
    /// Stand-ins for the AcceptMachines in `namespace`.
    pub fn new(namespace: &str) -> Provider {
        Provider {
            namespace: namespace.to_string(),
            known: BTreeMap::new(),
            kubelets: BTreeMap::new(),
            next: 0,
            log: Vec::new(),
            started: Instant::now(),
        }
    }

    /// Reports the cluster's AcceptCluster `name` provisioned and its AcceptControlPlane `name`
    /// initialized (the traps of ../shared/notes/capi.md: without them the MachineHealthCheck
    /// never evaluates a target). Both must exist.
    ///
    /// Errors: [`AcceptError::ControlPlane`] when the apiserver refuses the status.
    pub async fn mark_cluster_ready(&self, kube: &Kube, name: &str) -> Result<(), AcceptError> {
        let ns = &self.namespace;
        kube.merge_patch(
            &format!("{}/{name}/status", collection(GROUP, "AcceptCluster", ns)),
            json!({"status": {"initialization": {"provisioned": true}, "ready": true}}),
        )
        .await?;
        kube.merge_patch(
            &format!(
                "{}/{name}/status",
                collection(CONTROL_PLANE_GROUP, "AcceptControlPlane", ns)
            ),
            json!({"status": {"initialization": {"controlPlaneInitialized": true},
                              "initialized": true, "ready": true}}),
        )
        .await?;
        Ok(())
    }

    /// One round: lists the AcceptMachines, does what [`plan`] says, and posts the status and
    /// Lease of every Node whose last heartbeat is [`HEARTBEAT`] old. Returns the actions taken.
    ///
    /// Errors: [`AcceptError::ControlPlane`] when the apiserver refuses a request.
    pub async fn tick(
        &mut self,
        kube: &Kube,
        cloud: &SimulatedCloud,
    ) -> Result<Vec<Action>, AcceptError> {
        let machines = collection(GROUP, "AcceptMachine", &self.namespace);
        let listed: Vec<InfraMachine> = kube
            .list(&machines)
            .await?
            .iter()
            .filter(|m| m["metadata"]["deletionTimestamp"].is_null())
            .map(InfraMachine::of)
            .collect();
        let actions = plan(&listed, &self.known, &mut self.next);
        for a in &actions {
            match a {
                Action::Provision {
                    machine,
                    provisioned: p,
                } => {
                    cloud.add_server(Server::active(&p.server_id, &p.node, &p.ip));
                    let path = format!("{machines}/{machine}");
                    kube.merge_patch(
                        &path,
                        json!({"spec": {"providerID": format!("openstack:///{}", p.server_id)}}),
                    )
                    .await?;
                    kube.merge_patch(
                        &format!("{path}/status"),
                        json!({"status": {
                            "initialization": {"provisioned": true},
                            "ready": true,
                            "addresses": [{"type": "InternalIP", "address": p.ip}]
                        }}),
                    )
                    .await?;
                    self.register(kube, &p.node).await?;
                    self.known.insert(machine.clone(), p.clone());
                }
                Action::Vanish {
                    machine,
                    provisioned: p,
                } => {
                    cloud.remove_server(&p.server_id);
                    self.kubelets.remove(&p.node);
                    kube.merge_patch(
                        &format!("/api/v1/nodes/{}/status", p.node),
                        json!({"status": {"conditions": vanished_conditions(&now_rfc3339())}}),
                    )
                    .await?;
                    self.known.remove(machine);
                }
            }
            self.log
                .push((self.started.elapsed().as_secs_f64(), a.clone()));
        }
        let due: Vec<String> = self
            .kubelets
            .iter()
            .filter(|(_, k)| k.last.elapsed() >= HEARTBEAT)
            .map(|(n, _)| n.clone())
            .collect();
        for node in due {
            self.heartbeat(kube, &node).await?;
        }
        Ok(actions)
    }

    /// Registers `node` as kubelet does with `--cloud-provider=external`: no provider ID, the
    /// `uninitialized` taint, then its status and Lease.
    async fn register(&mut self, kube: &Kube, node: &str) -> Result<(), AcceptError> {
        kube.create_node(node, true).await?;
        self.kubelets.insert(
            node.to_string(),
            Kubelet {
                since: now_rfc3339(),
                last: Instant::now(),
            },
        );
        kube.create(
            "/apis/coordination.k8s.io/v1/namespaces/kube-node-lease/leases",
            json!({
                "apiVersion": "coordination.k8s.io/v1",
                "kind": "Lease",
                "metadata": {"name": node},
                "spec": {"holderIdentity": node, "leaseDurationSeconds": 40, "renewTime": micro_now()}
            }),
        )
        .await?;
        self.heartbeat(kube, node).await
    }

    /// Posts `node`'s healthy conditions and renews its Lease.
    async fn heartbeat(&mut self, kube: &Kube, node: &str) -> Result<(), AcceptError> {
        let Some(k) = self.kubelets.get_mut(node) else {
            return Ok(());
        };
        k.last = Instant::now();
        let since = k.since.clone();
        kube.merge_patch(
            &format!("/api/v1/nodes/{node}/status"),
            json!({"status": {"conditions": healthy_conditions(&now_rfc3339(), &since)}}),
        )
        .await?;
        kube.merge_patch(
            &format!("/apis/coordination.k8s.io/v1/namespaces/kube-node-lease/leases/{node}"),
            json!({"spec": {"renewTime": micro_now()}}),
        )
        .await?;
        Ok(())
    }

    /// The servers this provider created and has not deleted, by machine.
    pub fn provisioned(&self) -> &BTreeMap<String, Provisioned> {
        &self.known
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn m(name: &str, provider_id: &str) -> InfraMachine {
        InfraMachine {
            name: name.into(),
            provider_id: provider_id.into(),
        }
    }

    #[test]
    fn a_new_machine_gets_a_server_of_its_name_and_a_deleted_one_loses_it() {
        let mut next = 0;
        let mut known = BTreeMap::new();
        let a = plan(&[m("workers-abc", "")], &known, &mut next);
        let [
            Action::Provision {
                machine,
                provisioned,
            },
        ] = a.as_slice()
        else {
            panic!("{a:?}")
        };
        assert_eq!(machine, "workers-abc");
        assert_eq!(provisioned.node, "workers-abc");
        assert_eq!(
            provisioned.server_id,
            "5e5e0000-0000-4000-8000-000000000001"
        );
        assert_eq!(provisioned.ip, "10.0.1.2");
        known.insert(machine.clone(), provisioned.clone());

        // Listed again (the provider ID now set): nothing to do.
        let listed = [m(
            "workers-abc",
            "openstack:///5e5e0000-0000-4000-8000-000000000001",
        )];
        assert!(plan(&listed, &known, &mut next).is_empty());

        // Remediated: its replacement is provisioned, it vanishes.
        let a = plan(&[m("workers-def", "")], &known, &mut next);
        assert_eq!(a.len(), 2, "{a:?}");
        assert!(
            matches!(&a[0], Action::Provision { machine, provisioned } if machine == "workers-def" && provisioned.server_id.ends_with("000000000002"))
        );
        assert!(
            matches!(&a[1], Action::Vanish { machine, provisioned } if machine == "workers-abc" && provisioned.server_id.ends_with("000000000001"))
        );
    }

    #[test]
    fn a_machine_with_a_provider_id_it_did_not_set_is_left_alone() {
        let mut next = 0;
        let a = plan(&[m("other", "openstack:///x")], &BTreeMap::new(), &mut next);
        assert!(a.is_empty());
        assert_eq!(next, 0);
    }

    #[test]
    fn the_kubelet_posts_what_node_healthy_needs_and_a_vanished_node_is_unknown() {
        let c = healthy_conditions("2026-12-02T00:00:10Z", "2026-12-02T00:00:00Z");
        let types: Vec<_> = c
            .as_array()
            .unwrap()
            .iter()
            .map(|c| {
                format!(
                    "{}={}",
                    c["type"].as_str().unwrap(),
                    c["status"].as_str().unwrap()
                )
            })
            .collect();
        assert_eq!(
            types,
            [
                "MemoryPressure=False",
                "DiskPressure=False",
                "PIDPressure=False",
                "Ready=True"
            ]
        );
        assert_eq!(c[3]["lastTransitionTime"], "2026-12-02T00:00:00Z");
        let v = vanished_conditions("2026-12-02T00:01:00Z");
        assert!(
            v.as_array()
                .unwrap()
                .iter()
                .all(|c| c["status"] == "Unknown" && c["reason"] == "NodeStatusUnknown")
        );
    }

    #[test]
    fn the_crds_carry_the_contract_label_and_a_status_subresource() {
        let crds = crds();
        let names: Vec<_> = crds
            .iter()
            .map(|c| c["metadata"]["name"].as_str().unwrap())
            .collect();
        assert_eq!(
            names,
            [
                "acceptclusters.infrastructure.accept.occm-forge.invalid",
                "acceptmachinetemplates.infrastructure.accept.occm-forge.invalid",
                "acceptmachines.infrastructure.accept.occm-forge.invalid",
                "acceptcontrolplanes.controlplane.accept.occm-forge.invalid",
            ]
        );
        for c in &crds {
            assert_eq!(c["metadata"]["labels"]["cluster.x-k8s.io/v1beta2"], VERSION);
            assert!(c["spec"]["versions"][0]["subresources"]["status"].is_object());
        }
        assert!(micro_now().ends_with('Z') && micro_now().contains('.'));
    }
}
