//! The magnum-cluster-api labels (`src/magnum.rs` `ClusterLabels`, v0.36.6 to v0.38.1):
//!
//! - `magnum-tag`: `cloud_provider_tag=<tag>@sha256:<hex>` alone, for a cluster whose
//!   `container_infra_prefix` (`--prefix`) already is where the image is recorded (its repository
//!   or a mirror made by `occm-forge copy`). magnum-cluster-api renders the OCCM repository as
//!   `<prefix without trailing '/'>/openstack-cloud-controller-manager`
//!   (`src/addons/cloud_controller_manager.rs:57-68`) and passes the tag label through verbatim
//!   (`src/magnum.rs:122-125`); the chart concatenates `repository:tag`
//!   (`templates/daemonset.yaml:48`). Refused unless the image is recorded at that repository.
//! - `magnum-prefix-tag`: `container_infra_prefix=<prefix>` and `cloud_provider_tag=…`. The prefix
//!   moves every image of the cluster ([`PREFIX_MOVES`]), so a warning names all of it.
//! - `magnum-label`: `cloud_provider_image=<repo>:<tag>@sha256:<hex>`. **No released
//!   magnum-cluster-api reads this label**: `ClusterLabels` (`#[pyo3(from_item_all)]`,
//!   `src/magnum.rs:26-111`) ignores unknown keys, so the cluster would silently run the upstream
//!   image. Refused unless [`super::RenderOptions::patched_magnum_cluster_api`].

use super::{RenderOptions, pinned_tag, recorded_as};
use crate::config::Minor;
use crate::digest_manifest::Entry;

pub use crate::consumers::mcapi::IMAGE_NAME as MCAPI_IMAGE_NAME;

/// Everything `container_infra_prefix` moves besides OCCM, in magnum-cluster-api v0.36.6 to
/// v0.38.1: kubeadm's `imageRepository` (`resources.py:1214-1218`), the containerd sandbox
/// (pause) image (`utils.py:213-214`), Cilium's digest pinning (`src/addons/mod.rs:62`,
/// `use_digest: container_infra_prefix.is_none()`) and every add-on image through
/// `image_utils.get_image` (`image_utils.py:42-78`).
pub const PREFIX_MOVES: &str = "kubeadm's imageRepository (kube-apiserver, kube-controller-manager, kube-scheduler, kube-proxy, etcd, coredns), the pause image of containerd, every provider-os image (OCCM, Cinder and Manila CSI, ...), the CSI sidecars, Calico or Cilium images, and it turns Cilium's digest pinning off";

/// Why `magnum-label` is refused without `--patched-magnum-cluster-api`.
pub const LABEL_REFUSED: &str = "no released magnum-cluster-api (up to v0.38.1) reads cloud_provider_image: it ignores unknown labels and the cluster would silently run the upstream image; use --format magnum-tag --prefix <container_infra_prefix>, or pass --patched-magnum-cluster-api if yours reads it";

/// The repository magnum-cluster-api renders for OCCM under `prefix`:
/// `<prefix without trailing '/'>/openstack-cloud-controller-manager`.
pub fn mcapi_repository(prefix: &str) -> String {
    format!("{}/{MCAPI_IMAGE_NAME}", prefix.trim_end_matches('/'))
}

/// `magnum-label`: `cloud_provider_image=<repository>:<tag>@<digest>`.
pub fn label(e: &Entry) -> String {
    format!("cloud_provider_image={}:{}\n", e.repository, pinned_tag(e))
}

/// `magnum-tag`: `cloud_provider_tag=<tag>@<digest>`; refused without a prefix that holds the
/// image, and when the labels would render an invalid reference ([`crate::consumers::mcapi::check_labels`]).
pub fn tag(minor: Minor, e: &Entry, opts: &RenderOptions) -> Result<String, String> {
    let Some(prefix) = opts.prefix.as_deref() else {
        return Err("magnum-tag needs --prefix: the cluster's container_infra_prefix".into());
    };
    crate::consumers::mcapi::check_labels(Some(prefix), &pinned_tag(e))?;
    held_at(e, minor, prefix)?;
    Ok(format!("cloud_provider_tag={}\n", pinned_tag(e)))
}

/// `magnum-prefix-tag`: both labels, and (once per prefix) the warning of what the prefix moves.
pub fn prefix_tag(
    minor: Minor,
    e: &Entry,
    opts: &RenderOptions,
    warnings: &mut Vec<String>,
) -> Result<String, String> {
    let prefix = container_infra_prefix(minor, e, opts)?;
    crate::consumers::mcapi::check_labels(Some(&prefix), &pinned_tag(e))?;
    if !warnings.iter().any(|w| w.contains(&prefix)) {
        warnings.push(format!(
            "container_infra_prefix={prefix} moves every image of the cluster to {prefix}/<name>, not only OCCM: {PREFIX_MOVES}; mirror all of them there first, or keep the cluster's prefix and use --format magnum-tag"
        ));
    }
    Ok(format!(
        "container_infra_prefix={prefix}\ncloud_provider_tag={}\n",
        pinned_tag(e)
    ))
}

/// The `container_infra_prefix` for `magnum-prefix-tag`: `opts.prefix` (without trailing `/`),
/// which must hold the image, or else the entry's repository without its last segment, which
/// must be [`MCAPI_IMAGE_NAME`].
fn container_infra_prefix(minor: Minor, e: &Entry, opts: &RenderOptions) -> Result<String, String> {
    match opts.prefix.as_deref() {
        Some(p) => {
            crate::consumers::mcapi::check_labels(Some(p), &pinned_tag(e))?;
            held_at(e, minor, p)?;
            Ok(p.trim_end_matches('/').to_string())
        }
        None => {
            let (prefix, name) = e
                .repository
                .rsplit_once('/')
                .ok_or_else(|| format!("repository {} has no prefix", e.repository))?;
            if name != MCAPI_IMAGE_NAME {
                return Err(format!(
                    "repository {} must end in /{MCAPI_IMAGE_NAME}: magnum-cluster-api renders <container_infra_prefix>/{MCAPI_IMAGE_NAME}",
                    e.repository
                ));
            }
            Ok(prefix.to_string())
        }
    }
}

/// Fails (one line) unless `e` is recorded at `<prefix>/openstack-cloud-controller-manager`.
pub(super) fn held_at(e: &Entry, minor: Minor, prefix: &str) -> Result<(), String> {
    crate::consumers::mcapi::check_labels(Some(prefix), &pinned_tag(e))?;
    let want = mcapi_repository(prefix);
    if recorded_as(e, &want).is_some() {
        return Ok(());
    }
    let mut recorded = vec![e.repository.as_str()];
    recorded.extend(e.mirrors.iter().map(String::as_str));
    Err(format!(
        "{want} does not hold the image (recorded at {}); copy it there first: occm-forge copy --k8s {minor} --prefix {}",
        recorded.join(", "),
        prefix.trim_end_matches('/')
    ))
}
