//! magnum-cluster-api, the consumer occm-forge's outputs are for: a cluster as its driver sees it
//! ([`MagnumCluster`]), the rule by which its compiled code turns labels into the OCCM image
//! ([`occm_image`], held against the real code in tests/consumers.rs), and the real renderer
//! ([`renderer`]), which runs that compiled code.
//!
//! The rule (magnum-cluster-api v0.36.6 to v0.38.2, `src/magnum.rs` `get_cloud_provider_tag`,
//! `src/addons/cloud_controller_manager.rs:57-85`, the chart's `templates/daemonset.yaml:48`):
//! the repository is `<container_infra_prefix without trailing '/'>/openstack-cloud-controller-manager`
//! (upstream's `registry.k8s.io/provider-os/openstack-cloud-controller-manager` without a
//! prefix), the tag is `cloud_provider_tag` verbatim (else a tag per kube minor; an empty one
//! falls back to the chart's appVersion), and the chart writes `repository:tag`. Nothing checks
//! the result: a tag starting with `@` renders `repo:@sha256:…`, which no runtime pulls.

pub mod objects;
pub mod rbac;
pub mod renderer;

use std::collections::BTreeMap;

use serde::Serialize;

pub use renderer::{Renderer, RendererError, Tools};

/// The last path segment magnum-cluster-api gives the OCCM image under `container_infra_prefix`.
pub const IMAGE_NAME: &str = "openstack-cloud-controller-manager";
/// The label that moves every image of a cluster to `<prefix>/<name>`.
pub const PREFIX_LABEL: &str = "container_infra_prefix";
/// The label whose value is the OCCM image's tag, verbatim.
pub const TAG_LABEL: &str = "cloud_provider_tag";
/// The label carrying the cluster's Kubernetes version (`v1.34.1`); the only one
/// `upgrade_cluster` copies from the new template.
pub const KUBE_TAG_LABEL: &str = "kube_tag";

/// A Magnum cluster as magnum-cluster-api's compiled renderer reads it: the attributes of
/// `magnum.objects.Cluster` it uses and its labels (every value a string).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct MagnumCluster {
    /// The cluster's UUID (the chart's `cluster.name`).
    pub uuid: String,
    /// The Heat stack id, the Cluster API Cluster's name (`kube-abc12`); the Secret is
    /// `<stack_id>-cloud-provider`.
    pub stack_id: String,
    /// Magnum's status, e.g. `CREATE_COMPLETE`.
    pub status: String,
    /// The cluster template's `network_driver` (`calico`, `cilium`).
    pub network_driver: String,
    /// The labels; `kube_tag` must be there.
    pub labels: BTreeMap<String, String>,
}

impl MagnumCluster {
    /// A cluster `stack_id` at `kube_tag` (`v1.34.1`) with Calico and no other label.
    pub fn new(uuid: &str, stack_id: &str, kube_tag: &str) -> Self {
        MagnumCluster {
            uuid: uuid.to_string(),
            stack_id: stack_id.to_string(),
            status: "CREATE_COMPLETE".into(),
            network_driver: "calico".into(),
            labels: BTreeMap::from([(KUBE_TAG_LABEL.to_string(), kube_tag.to_string())]),
        }
    }

    /// With the labels of `text`, one `key=value` per line (what `render --format magnum-*`
    /// prints); lines without `=` are ignored.
    pub fn with_labels(mut self, text: &str) -> Self {
        for (k, v) in text.lines().filter_map(|l| l.split_once('=')) {
            self.labels
                .insert(k.trim().to_string(), v.trim().to_string());
        }
        self
    }
}

/// Byte ranges of the YAML documents of a stream as `helm template` prints it (separated by
/// lines that are exactly `---`).
pub fn documents(text: &str) -> Vec<(usize, usize)> {
    let mut docs = Vec::new();
    let mut start = 0;
    let mut pos = 0;
    for line in text.split_inclusive('\n') {
        if line.trim_end() == "---" {
            docs.push((start, pos));
            start = pos + line.len();
        }
        pos += line.len();
    }
    docs.push((start, text.len()));
    docs
}

/// The OCCM image magnum-cluster-api renders for a `container_infra_prefix` (`None`: upstream's
/// repository) and a non-empty `cloud_provider_tag`: `<prefix>/openstack-cloud-controller-manager:<tag>`.
pub fn occm_image(prefix: Option<&str>, tag: &str) -> String {
    let repository = match prefix {
        Some(p) => format!("{}/{IMAGE_NAME}", p.trim_end_matches('/')),
        None => format!("registry.k8s.io/provider-os/{IMAGE_NAME}"),
    };
    format!("{repository}:{tag}")
}

/// Checks that the labels `container_infra_prefix=<prefix>` and `cloud_provider_tag=<tag>` give a
/// valid image reference through [`occm_image`]; returns it.
///
/// Errors: one line naming the label, the value and what magnum-cluster-api would render from
/// it (it renders anything, and the kubelet then cannot pull: `InvalidImageName`).
pub fn check_labels(prefix: Option<&str>, tag: &str) -> Result<String, String> {
    let image = occm_image(prefix, tag);
    let not_a_reference = |label: &str, value: &str, why: &str| {
        format!(
            "{label}=`{value}` would make magnum-cluster-api render `{image}`, which is not an image reference ({why})"
        )
    };
    if tag.is_empty() || tag.starts_with('@') {
        return Err(not_a_reference(
            TAG_LABEL,
            tag,
            "the tag must come before the digest",
        ));
    }
    if let Some(p) = prefix {
        let named = image.split('@').next().unwrap_or_default();
        let repository = named.rsplit_once(':').map_or(named, |(r, _)| r);
        if let Err(why) = repository.parse::<crate::base::reference::RepositoryName>() {
            return Err(not_a_reference(
                PREFIX_LABEL,
                p,
                &format!("{why}; give registry[:port]/path in lowercase, without a scheme"),
            ));
        }
    }
    match image.parse::<crate::base::reference::ImageRef>() {
        Ok(r) if r.tag.is_some() => Ok(image),
        Ok(_) => Err(not_a_reference(TAG_LABEL, tag, "no tag")),
        Err(why) => Err(not_a_reference(TAG_LABEL, tag, &why)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn labels_that_render_an_invalid_reference_are_named() {
        let digest = format!("sha256:{}", "ab".repeat(32));
        let tag = format!("v1.34.1-occmforge.1@{digest}");
        assert_eq!(
            check_labels(Some("registry.example/occm/"), &tag).unwrap(),
            format!("registry.example/occm/openstack-cloud-controller-manager:{tag}")
        );
        assert_eq!(
            check_labels(None, &tag).unwrap(),
            format!("registry.k8s.io/provider-os/openstack-cloud-controller-manager:{tag}")
        );
        let e = check_labels(Some("r.example/x"), &format!("@{digest}")).unwrap_err();
        assert!(
            e.starts_with("cloud_provider_tag=`@sha256:")
                && e.contains("render `r.example/x/openstack-cloud-controller-manager:@sha256:"),
            "{e}"
        );
        for bad in [
            "https://r.example/x",
            "R.example/Occm",
            "r.example/x:5000/y",
        ] {
            let e = check_labels(Some(bad), &tag).unwrap_err();
            assert!(
                e.starts_with(&format!("container_infra_prefix=`{bad}`")) && !e.contains('\n'),
                "{e}"
            );
        }
        assert!(check_labels(Some("r.example/x"), "v1 .2").is_err());
    }

    #[test]
    fn a_cluster_takes_the_labels_render_prints() {
        let c = MagnumCluster::new("u", "kube-abc12", "v1.34.1")
            .with_labels("container_infra_prefix=r.example/x\ncloud_provider_tag=v1@sha256:00\n");
        assert_eq!(c.labels.len(), 3);
        assert_eq!(c.labels["cloud_provider_tag"], "v1@sha256:00");
    }
}
