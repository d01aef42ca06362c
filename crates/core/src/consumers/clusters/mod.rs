//! `occm-forge clusters`: which magnum-cluster-api clusters run which OCCM, read from the Cluster
//! API management cluster, and the repair of those that do not run the image images.lock.yaml
//! pins for their Kubernetes minor.
//!
//! What a workload cluster runs comes from its ClusterResourceSet Secret: magnum-cluster-api
//! writes `magnum-system/<stack_id>-cloud-provider` (the OCCM chart rendered into the key
//! `cloud-controller-manager.yaml`) at create and at every `coe cluster upgrade`, with upstream's
//! image; Cluster API's ClusterResourceSet controller applies it to the workload cluster and
//! records the hash of what it applied in the ClusterResourceSetBinding named after the Cluster
//! (internal/controllers/clusterresourceset, v1.10–v1.13). So, per Cluster (one [`Observed`]):
//!
//! 1. [`read::observe`] reads the Clusters, their control planes' versions, the
//!    ClusterResourceSets whose selector matches each (`spec.clusterSelector`, an empty one matches
//!    nothing, as in Cluster API) and whose Secret holds the OCCM key, the Secrets and the
//!    bindings: plain data, one list call per kind.
//! 2. [`assess::assess`] decides, from that data and the digest manifest alone: the cluster's
//!    running minor (the lower of `spec.topology.version` and the control plane's
//!    `status.version`, so a cluster in the middle of an upgrade counts as its old minor until the
//!    whole control plane runs the new one), what the OCCM image is (the pinned image of that
//!    minor, ours of another minor, upstream's, or other), the set's strategy (a legacy
//!    `ApplyOnce` set never applies a change), whether Cluster API applied the Secret's current
//!    content (binding hash = [`crate::consumers::render::crs_secret::resource_set_hash`] of the Secret), the
//!    skew (OCCM newer than the cluster), and what `--fix` would do ([`Action`]).
//! 3. [`fix::fix`] carries out the rewrites: the same edit as `render --format crs-secret`, written
//!    with a full `PUT` carrying the resourceVersion it read (a Secret changed in between is a
//!    409 Conflict, never overwritten), then optionally waits for the binding's hash;
//!    [`fix::watch`] does it again whenever a resource-set Secret or a Cluster changes.

pub mod assess;
pub mod fix;
pub mod read;

use serde::Serialize;

use crate::config::Minor;

pub use assess::{Action, ImageKind, Row, Strategy, assess};

pub use crate::consumers::mcapi::objects::NAMESPACE;

/// One ClusterResourceSet that applies an OCCM Secret to a Cluster, as read.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct OccmSet {
    /// The ClusterResourceSet's name.
    pub resource_set: String,
    /// Its `spec.strategy` as written (`Reconcile`, `ApplyOnce`, or empty: Cluster API's
    /// default, `ApplyOnce`).
    pub strategy: String,
    /// The Secret's name.
    pub secret: String,
    /// The Secret's `metadata.resourceVersion` when read (the precondition of a rewrite).
    pub resource_version: String,
    /// The OCCM image in the Secret, or why it cannot be read (no OCCM DaemonSet …).
    pub image: Result<String, String>,
    /// The RBAC the OCCM DaemonSet runs with, as the Secret's chart rendering gives it, or why it
    /// cannot be read (a ClusterRole that does not parse …).
    #[serde(serialize_with = "rbac_json")]
    pub rbac: Result<crate::consumers::mcapi::rbac::OccmRbac, String>,
    /// [`crate::consumers::render::crs_secret::resource_set_hash`] of the Secret's data.
    pub hash: String,
    /// The hash the Cluster's ClusterResourceSetBinding records for this set and Secret, if any.
    pub binding_hash: Option<String>,
    /// The Secret as read (JSON), for the rewrite.
    #[serde(skip)]
    pub object: serde_json::Value,
}

/// One Cluster as read from the management cluster.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Observed {
    /// `metadata.namespace`.
    pub namespace: String,
    /// `metadata.name` (magnum-cluster-api: the cluster's stack id).
    pub name: String,
    /// The version the Cluster asks for: `spec.topology.version`, else the control plane's
    /// `spec.version`.
    pub desired_version: Option<String>,
    /// What the control plane reports it runs (`status.version`, the lowest of its machines).
    pub control_plane_version: Option<String>,
    /// Why the control plane could not be read, when it could not.
    pub control_plane_error: Option<String>,
    /// The sets applying an OCCM Secret to it (usually one; a legacy set may remain beside a
    /// current one); empty when none does, and then [`Observed::no_occm`] says why.
    pub sets: Vec<OccmSet>,
    /// Why no set applies an OCCM Secret to it (a named Secret missing or of another type), when
    /// none does.
    pub no_occm: Option<String>,
}

/// [`OccmSet::rbac`] as JSON: the description, or the error.
fn rbac_json<S: serde::Serializer>(
    rbac: &Result<crate::consumers::mcapi::rbac::OccmRbac, String>,
    s: S,
) -> Result<S::Ok, S::Error> {
    match rbac {
        Ok(r) => s.serialize_str(&r.describe()),
        Err(e) => s.serialize_str(e),
    }
}

impl Observed {
    /// `namespace/name`.
    pub fn id(&self) -> String {
        format!("{}/{}", self.namespace, self.name)
    }

    /// The minor the cluster runs: the lower of the desired version's and the control plane's.
    pub fn running_minor(&self) -> Option<Minor> {
        let desired = self.desired_version.as_deref().and_then(Minor::of_version);
        let current = self
            .control_plane_version
            .as_deref()
            .and_then(Minor::of_version);
        match (desired, current) {
            (Some(d), Some(c)) => Some(d.min(c)),
            (d, c) => d.or(c),
        }
    }

    /// The desired minor when it is ahead of the running one (an upgrade in progress).
    pub fn upgrading_to(&self) -> Option<Minor> {
        let desired = self
            .desired_version
            .as_deref()
            .and_then(Minor::of_version)?;
        (Some(desired) > self.running_minor()).then_some(desired)
    }
}

/// A failure of `clusters` (one line). Exit status 15.
#[derive(Debug, thiserror::Error)]
pub enum ClustersError {
    /// The management cluster refused a request or could not be reached.
    #[error("management cluster {0}")]
    Kube(#[from] crate::kubernetes::KubeError),
}

impl crate::pipeline::Failure for ClustersError {
    /// 15: the management cluster cannot be read or written.
    fn exit_code(&self) -> u8 {
        15
    }
}

/// `clusters`: a cluster does not run the pinned image of its minor (the table on stdout says
/// which and why), or `--fix` could not fix one.
#[derive(Debug, thiserror::Error)]
#[error("clusters: {0}")]
pub struct NotPinned(pub String);

impl crate::pipeline::Failure for NotPinned {
    /// 14.
    fn exit_code(&self) -> u8 {
        14
    }
}

crate::command_failure!(ClustersError, NotPinned);
