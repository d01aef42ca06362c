//! `render --format crs-secret`: change the OCCM image of a running magnum-cluster-api cluster
//! through the source its ClusterResourceSet reconciles.
//!
//! magnum-cluster-api keeps the OCCM manifests in the Secret `magnum-system/<stack_id>-cloud-provider`
//! (type `addons.cluster.x-k8s.io/resource-set`), key `cloud-controller-manager.yaml`: the output of
//! `helm template` of the OCCM chart as release `openstack-ccm` in `kube-system`
//! (`src/addons/cloud_controller_manager.rs:167-183`, v0.36.6 and v0.38.1); Python adds
//! `cloud-config-secret.yaml` and, with Cinder, the CSI manifests to the same Secret
//! (`resources.py:210-262`). Its ClusterResourceSet has `strategy: Reconcile` (`src/magnum.rs:309`),
//! so Cluster API applies the Secret again to the workload cluster when its content changes. The
//! Secret is rendered from the cluster's labels only at create and upgrade (`driver.py:114, 414`),
//! so an upgrade overwrites what this module writes.
//!
//! [`rewrite_secret`] reads the Secret as `kubectl get secret -o yaml` prints it, replaces the
//! image of the one OCCM DaemonSet inside that key by editing that one line of text (the embedded
//! YAML is never re-serialised, so every other byte of every document stays), and returns a
//! Secret for `kubectl replace -f -`: server-set metadata dropped, every other key's value verbatim.
//! On request it also makes the rollout observable ([`RewriteOptions::observable`]) and
//! operator-driven ([`RewriteOptions::on_delete`]). It refuses a Secret named by the cluster UUID
//! (a legacy `ApplyOnce` set that never applies a change) and an image of a newer Kubernetes
//! minor than the Secret runs ([`skew`]) unless told, and gives the hash Cluster API will record
//! for the written Secret ([`resource_set_hash`]).

use base64::Engine as _;
use serde_norway::{Mapping, Value};

pub mod daemonset;

pub use daemonset::{Edited, set_occm_image};

use crate::config::Minor;
use crate::consumers::mcapi::objects::{RESOURCE_SET_TYPE, UPSTREAM_REPOSITORY};
pub use crate::consumers::mcapi::objects::{SECRET_KEY, resource_set_hash};

/// The OCCM container's name in the chart's DaemonSet (`templates/daemonset.yaml:47`).
pub const CONTAINER_NAME: &str = "openstack-cloud-controller-manager";
/// OCCM's default secure (HTTPS) port, which serves `/healthz` (k8s.io/cloud-provider
/// `CloudControllerManagerPort`).
pub const DEFAULT_SECURE_PORT: u16 = 10258;
/// `minReadySeconds` set by [`RewriteOptions::observable`]: a new pod counts as available only
/// after it stayed ready this long, so a replica that crashes soon after start stalls the rollout.
pub const MIN_READY_SECONDS: u32 = 60;

/// Metadata fields the API server sets and a write must not carry (`managedFields` would be
/// fought over). `resourceVersion` is kept unless [`RewriteOptions::unconditional`]: it makes
/// `kubectl replace` refuse (409 Conflict) a Secret that changed since it was read, e.g. by a
/// `coe cluster upgrade` in between.
const SERVER_SET_METADATA: &[&str] = &[
    "uid",
    "managedFields",
    "creationTimestamp",
    "generation",
    "selfLink",
    "deletionTimestamp",
    "deletionGracePeriodSeconds",
];
const LAST_APPLIED: &str = "kubectl.kubernetes.io/last-applied-configuration";

/// What to write.
#[derive(Debug, Clone, Default)]
pub struct RewriteOptions {
    /// The new image reference (`repository:tag@sha256:<hex>`, or any earlier reference to revert).
    pub image: String,
    /// Also set `minReadySeconds` ([`MIN_READY_SECONDS`]) on the DaemonSet and, where the OCCM
    /// container has none, readiness and liveness probes on `https://127.0.0.1:<secure port>/healthz`
    /// (the pod uses the host network and OCCM binds 127.0.0.1 unless told otherwise).
    pub observable: bool,
    /// Also set the DaemonSet's `updateStrategy` to `OnDelete`: nothing rolls until the operator
    /// deletes pods, so the leader can be replaced last.
    pub on_delete: bool,
    /// Write an image of a newer Kubernetes minor than the one the Secret runs now (see
    /// [`skew`]); refused without it.
    pub allow_skew: bool,
    /// Drop the Secret's `resourceVersion` too, so that the write replaces whatever the Secret
    /// holds by then (restoring a saved copy); by default it stays and a changed Secret is a
    /// conflict.
    pub unconditional: bool,
    /// The cluster's Kubernetes minor when the caller knows it (`clusters` reads it; `render
    /// --k8s` names it when that minor has no build of its own): the image's skew is judged
    /// against it instead of against the minor of the image the Secret runs now.
    pub cluster_minor: Option<Minor>,
    /// Whether `cluster_minor` was read from the cluster's control plane (`clusters`) rather
    /// than declared (`render --k8s`): a declared minor is also held against the Secret's OCCM,
    /// which may not jump two or more minors ahead of it without `allow_skew` (a mistyped
    /// `--k8s` would otherwise put an OCCM newer than kube-apiserver on the cluster).
    pub control_plane_read: bool,
    /// Give the OCCM ServiceAccount `delete` on nodes (`Some(true)`) or take the verb away again
    /// (`Some(false)`) in the chart's ClusterRole ([`crate::consumers::mcapi::rbac::set_node_delete`]);
    /// `None` leaves the RBAC as it is (and warns when it cannot delete nodes).
    pub node_delete: Option<bool>,
}

/// The rewritten Secret and what changed.
#[derive(Debug, Clone)]
pub struct Rewritten {
    /// The Secret as JSON (which YAML readers read too, with none of YAML 1.1's `yes`/`no`
    /// surprises in kubectl) for `kubectl replace -f -` (a full PUT; `kubectl apply` would copy
    /// the whole Secret, credentials included, into its last-applied annotation).
    pub secret: String,
    /// `namespace/name` of the OCCM DaemonSet.
    pub daemonset: String,
    /// The image the DaemonSet ran before (what `--image` reverts to).
    pub previous_image: String,
    /// Whether the key's content changed at all.
    pub changed: bool,
    /// Things the user must know (an image without digest, a probe kept as it was).
    pub warnings: Vec<String>,
    /// The hash Cluster API will record for the written Secret in the cluster's
    /// ClusterResourceSetBinding once it applied it ([`resource_set_hash`]).
    pub hash: String,
    /// What [`RewriteOptions::node_delete`] changed in the ClusterRole, if anything.
    pub rbac_change: Option<String>,
}

/// The [`resource_set_hash`] of the Secret `input` (YAML or JSON, as `kubectl get -o yaml|json`
/// prints it, or as written for `kubectl replace`) once the API server stored it.
///
/// Errors: input that is not one Secret.
pub fn secret_hash(input: &str) -> Result<String, CrsError> {
    Ok(resource_set_hash(&stored_data(&parse_secret(input)?)))
}

/// What the API server stores as the Secret's `data` once it is written: `data` decoded, with
/// `stringData` merged over it (core/v1 `Secret.stringData`).
fn stored_data(secret: &Mapping) -> std::collections::BTreeMap<String, Vec<u8>> {
    let mut out = std::collections::BTreeMap::new();
    let entries = |field: &str| {
        secret
            .get(field)
            .and_then(Value::as_mapping)
            .into_iter()
            .flatten()
            .filter_map(|(k, v)| Some((k.as_str()?.to_string(), v.as_str()?.to_string())))
            .collect::<Vec<_>>()
    };
    for (k, v) in entries("data") {
        let bytes = base64::engine::general_purpose::STANDARD
            .decode(v.trim())
            .unwrap_or_default();
        out.insert(k, bytes);
    }
    for (k, v) in entries("stringData") {
        out.insert(k, v.into_bytes());
    }
    out
}

/// Whether `name` is a UUID (8-4-4-4-12 hex digits): the name magnum-cluster-api before 0.29.2
/// gave the Secret of a cluster, applied by a ClusterResourceSet of `strategy: ApplyOnce`.
pub fn is_legacy_name(name: &str) -> bool {
    let parts: Vec<&str> = name.split('-').collect();
    parts.len() == 5
        && parts
            .iter()
            .zip([8, 4, 4, 4, 12])
            .all(|(p, n)| p.len() == n && p.bytes().all(|b| b.is_ascii_hexdigit()))
}

/// A Secret that cannot be rewritten: one line, naming the key or DaemonSet. Exit status 2.
#[derive(Debug, thiserror::Error)]
#[error("crs-secret: {0}")]
pub struct CrsError(pub String);

impl crate::pipeline::Failure for CrsError {
    /// 2: the Secret cannot be rewritten as asked.
    fn exit_code(&self) -> u8 {
        2
    }
}

fn fail<T>(message: impl Into<String>) -> Result<T, CrsError> {
    Err(CrsError(message.into()))
}

/// Rewrites the Secret `input` (YAML or JSON as `kubectl get secret … -o yaml|json` prints it);
/// see the module documentation. The key may be in `data` (base64, as the API server returns it)
/// or in `stringData`.
pub fn rewrite_secret(input: &str, opts: &RewriteOptions) -> Result<Rewritten, CrsError> {
    let secret = parse_secret(input)?;
    let name = secret_name(&secret);
    if is_legacy_name(name) {
        return fail(format!(
            "Secret {name} is named by the cluster UUID: magnum-cluster-api before 0.29.2 applies it with a ClusterResourceSet of strategy ApplyOnce, so Cluster API never applies a change of it to the workload cluster; `openstack coe cluster upgrade` the cluster first (magnum-cluster-api 0.29.2 or later writes <stack_id>-cloud-provider under strategy Reconcile), then rewrite that Secret"
        ));
    }
    let key = read_key(&secret, name)?;
    let edited = set_occm_image(&key.text, opts)
        .map_err(|e| CrsError(format!("Secret {name}, key {SECRET_KEY}: {}", e.0)))?;
    let mut warnings = edited.warnings;
    let kind = secret.get("type").and_then(Value::as_str).unwrap_or("");
    if kind != RESOURCE_SET_TYPE {
        warnings.push(format!(
            "Secret {name} is of type {}: a ClusterResourceSet applies only Secrets of type {RESOURCE_SET_TYPE}, so this one never reaches a cluster",
            if kind.is_empty() { "Opaque (none given)" } else { kind }
        ));
    }
    warnings.extend(minor_warnings(name, &edited.previous_image, &opts.image));
    check_skew(name, &edited.previous_image, opts, &mut warnings)?;
    let (text, rbac_change) = match opts.node_delete {
        Some(allow) => {
            let e = crate::consumers::mcapi::rbac::set_node_delete(&edited.text, allow)
                .map_err(|e| CrsError(format!("Secret {name}, key {SECRET_KEY}: {e}")))?;
            (e.text, e.change)
        }
        None => {
            match crate::consumers::mcapi::rbac::occm_rbac(&edited.text) {
                Ok(r) if !r.node_delete => warnings.push(format!(
                    "Secret {name}: {}: the node lifecycle controller cannot delete the Node of a gone server (DeletingNodeFailed); pass --node-delete restore",
                    r.describe()
                )),
                Ok(_) => {}
                Err(e) => warnings.push(format!("Secret {name}: the OCCM RBAC cannot be read: {e}")),
            }
            (edited.text, None)
        }
    };
    let written = write_secret(&secret, key.field, &text, opts.unconditional)?;
    let hash = secret_hash(&written)?;
    Ok(Rewritten {
        secret: written,
        hash,
        daemonset: edited.daemonset,
        previous_image: edited.previous_image,
        changed: text != key.text,
        warnings,
        rbac_change,
    })
}

/// Refuses an image the version-skew policy forbids ([`crate::consumers::render::skew::Skew`]) against the
/// cluster's minor ([`RewriteOptions::cluster_minor`], else the minor of the image the Secret runs
/// now), unless [`RewriteOptions::allow_skew`]; warns when a minor cannot be read.
fn check_skew(
    name: &str,
    previous: &str,
    opts: &RewriteOptions,
    warnings: &mut Vec<String>,
) -> Result<(), CrsError> {
    use crate::consumers::render::skew::Skew as Policy;
    if let Some(cluster) = opts.cluster_minor {
        let Some(occm) = Minor::of_image(&opts.image) else {
            warnings.push(format!(
                "cannot tell the Kubernetes minor of {}: check that OCCM is not newer than the cluster's kube-apiserver",
                opts.image
            ));
            return Ok(());
        };
        let policy = Policy::of(cluster, occm);
        if !policy.allowed() && !opts.allow_skew {
            return fail(format!(
                "{}: {} for the Secret {name}; write an image the policy allows, or pass --allow-skew",
                opts.image,
                policy.describe(cluster, occm)
            ));
        }
        if let (false, Skew::Newer { from, to }) =
            (opts.control_plane_read, skew(previous, &opts.image))
            && to.minor > from.minor + 1
            && !opts.allow_skew
        {
            return fail(format!(
                "Secret {name} runs OCCM {from} ({previous}) and {} is OCCM {to}, two or more minors ahead of it: crs-secret cannot see the control plane (`occm-forge clusters` reads it); if it runs {cluster}, pass --allow-skew",
                opts.image
            ));
        }
        return Ok(());
    }
    match skew(previous, &opts.image) {
        Skew::Newer { from, to } if !opts.allow_skew => fail(format!(
            "Secret {name} runs OCCM {from} ({previous}) and {} is OCCM {to}: crs-secret takes the Secret's OCCM for the cluster's minor (it cannot see the control plane; `occm-forge clusters` reads it), and a cloud-controller-manager newer than kube-apiserver breaks the version-skew policy; write the {from} image, or pass --allow-skew once the control plane runs {to} (magnum-cluster-api 0.38 gives 1.36 and 1.37 clusters OCCM v1.35.0)",
            opts.image
        )),
        Skew::Older { from, to } if to.minor + 1 < from.minor && !opts.allow_skew => fail(format!(
            "Secret {name} runs OCCM {from} ({previous}) and {} is OCCM {to}: {} older than the cluster's kube-apiserver, and the version-skew policy allows cloud-controller-manager one; write a {from} or {} image, or pass --allow-skew",
            opts.image,
            if from.minor - to.minor == 2 {
                "two minors".to_string()
            } else {
                format!("{} minors", from.minor - to.minor)
            },
            Minor {
                major: from.major,
                minor: from.minor - 1
            }
        )),
        Skew::Unknown(which) => {
            warnings.push(format!(
                "cannot tell the Kubernetes minor of {which} from its tag: check that OCCM is not newer than the cluster's kube-apiserver"
            ));
            Ok(())
        }
        _ => Ok(()),
    }
}

/// How the Kubernetes minor of a new OCCM image compares with the one it replaces, read from
/// their tags ([`Minor::of_version`]: `v1.34.1`, `v1.34.1-occmforge.1`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Skew {
    /// The same minor.
    Same,
    /// An older minor (a revert, or matching an older control plane): one older is allowed,
    /// more is refused.
    Older {
        /// The minor the Secret runs now.
        from: Minor,
        /// The new image's minor.
        to: Minor,
    },
    /// The new image is of a newer minor.
    Newer {
        /// The minor the Secret runs now.
        from: Minor,
        /// The new image's minor.
        to: Minor,
    },
    /// One of the tags names no version (`latest`, a digest only): this image reference.
    Unknown(String),
}

/// The [`Skew`] between the image the Secret runs (`previous`) and `image`. OCCM's minor is the
/// cluster's Kubernetes minor (upstream releases one per minor); Kubernetes' version-skew policy
/// lets cloud-controller-manager be up to one minor older than kube-apiserver, never newer.
pub fn skew(previous: &str, image: &str) -> Skew {
    match (Minor::of_image(previous), Minor::of_image(image)) {
        (Some(from), Some(to)) if to > from => Skew::Newer { from, to },
        (Some(from), Some(to)) if to < from => Skew::Older { from, to },
        (Some(_), Some(_)) => Skew::Same,
        (None, _) => Skew::Unknown(previous.to_string()),
        (_, None) => Skew::Unknown(image.to_string()),
    }
}

/// What to say about the minors of the two images beyond [`skew`]'s refusals: writing over
/// upstream's image of the same or an older minor (after `coe cluster upgrade` the Secret runs
/// the new minor's upstream image while the control plane may still run the old one).
fn minor_warnings(name: &str, previous: &str, image: &str) -> Vec<String> {
    let mut out = Vec::new();
    let (Some(from), Some(to)) = (Minor::of_image(previous), Minor::of_image(image)) else {
        return out;
    };
    let upstream = previous
        .parse::<crate::base::reference::ImageRef>()
        .ok()
        .zip(UPSTREAM_REPOSITORY.parse().ok())
        .is_some_and(|(p, u): (_, crate::base::reference::RepositoryName)| p.repository == u);
    if upstream && to >= from {
        out.push(format!(
            "Secret {name} runs upstream's {from} image: if `coe cluster upgrade` just wrote it, the control plane may still run an older minor, and OCCM must not be newer than kube-apiserver; `occm-forge clusters` shows the minor the control plane runs"
        ));
    }
    out
}

/// The image of the OCCM container in the Secret `input` (what [`rewrite_secret`] would
/// replace), without changing anything.
///
/// Errors: those of [`rewrite_secret`] for a Secret without exactly one OCCM DaemonSet.
pub fn occm_image(input: &str) -> Result<String, CrsError> {
    let secret = parse_secret(input)?;
    let name = secret_name(&secret);
    let key = read_key(&secret, name)?;
    daemonset::occm_image(&key.text)
        .map_err(|e| CrsError(format!("Secret {name}, key {SECRET_KEY}: {}", e.0)))
}

/// The RBAC of the OCCM DaemonSet in the Secret `input` ([`crate::consumers::mcapi::rbac::occm_rbac`] of its
/// key), without changing anything.
///
/// Errors: a Secret without the key; a key whose RBAC cannot be read (a ClusterRole that does not
/// parse), naming the Secret.
pub fn occm_rbac(input: &str) -> Result<crate::consumers::mcapi::rbac::OccmRbac, CrsError> {
    let secret = parse_secret(input)?;
    let name = secret_name(&secret);
    let key = read_key(&secret, name)?;
    crate::consumers::mcapi::rbac::occm_rbac(&key.text)
        .map_err(|e| CrsError(format!("Secret {name}, key {SECRET_KEY}: {e}")))
}

/// The Secret's `metadata.name` (`<unnamed>` when it has none).
fn secret_name(secret: &Mapping) -> &str {
    secret
        .get("metadata")
        .and_then(|m| m.get("name"))
        .and_then(Value::as_str)
        .unwrap_or("<unnamed>")
}

/// Reads stdin as one Kubernetes object of kind `Secret`; its top-level mapping (a YAML tag on
/// it is dropped).
fn parse_secret(input: &str) -> Result<Mapping, CrsError> {
    if input.trim().is_empty() {
        return fail(
            "stdin is empty: pipe in `kubectl get secret -n magnum-system <stack_id>-cloud-provider -o yaml`",
        );
    }
    let secret: Value = serde_norway::from_str(input).map_err(|e| {
        CrsError(format!(
            "stdin is not one YAML document: {}",
            one_line(&e.to_string())
        ))
    })?;
    let Some(map) = secret.as_mapping() else {
        return fail("stdin is not a Kubernetes object");
    };
    let kind = map.get("kind").and_then(Value::as_str).unwrap_or("");
    if kind != "Secret" {
        return fail(format!(
            "stdin is a {}, not a Secret",
            if kind.is_empty() {
                "document without kind"
            } else {
                kind
            }
        ));
    }
    Ok(map.clone())
}

/// The text of [`SECRET_KEY`] in a Secret and the field that holds it.
struct KeyText {
    /// The key's content: the OCCM chart's multi-document YAML stream.
    text: String,
    /// `data` (stored base64-encoded) or `stringData` (stored as is).
    field: &'static str,
}

/// Finds [`SECRET_KEY`] in exactly one of `data` (decoding base64 to UTF-8) and `stringData` of
/// the Secret `name`.
fn read_key(secret: &Mapping, name: &str) -> Result<KeyText, CrsError> {
    let in_field = |field: &str| secret.get(field).and_then(|f| f.get(SECRET_KEY));
    match (in_field("data"), in_field("stringData")) {
        (Some(_), Some(_)) => fail(format!(
            "Secret {name} has {SECRET_KEY} in both data and stringData"
        )),
        (Some(v), None) => {
            let b64 = v.as_str().ok_or_else(|| {
                CrsError(format!("Secret {name}: data.{SECRET_KEY} is not a string"))
            })?;
            let bytes = base64::engine::general_purpose::STANDARD
                .decode(b64.trim())
                .map_err(|e| {
                    CrsError(format!(
                        "Secret {name}: data.{SECRET_KEY} is not base64: {e}"
                    ))
                })?;
            let text = String::from_utf8(bytes).map_err(|_| {
                CrsError(format!(
                    "Secret {name}: data.{SECRET_KEY} is not UTF-8 text"
                ))
            })?;
            Ok(KeyText {
                text,
                field: "data",
            })
        }
        (None, Some(v)) => Ok(KeyText {
            text: v
                .as_str()
                .ok_or_else(|| {
                    CrsError(format!(
                        "Secret {name}: stringData.{SECRET_KEY} is not a string"
                    ))
                })?
                .to_string(),
            field: "stringData",
        }),
        (None, None) => fail(format!(
            "Secret {name} has no key {SECRET_KEY}: is it magnum-cluster-api's <stack_id>-cloud-provider Secret?"
        )),
    }
}

/// The Secret as JSON for `kubectl replace -f -`: server-set metadata dropped (with
/// `unconditional` the resourceVersion too), [`SECRET_KEY`] in `field` replaced by `text`
/// (base64-encoded in `data`), every other key as it was.
fn write_secret(
    secret: &Mapping,
    field: &str,
    text: &str,
    unconditional: bool,
) -> Result<String, CrsError> {
    let mut out = Mapping::new();
    for (k, v) in secret {
        let mut v = v.clone();
        match k.as_str() {
            Some("metadata") => clean_metadata(&mut v, unconditional),
            Some(f) if f == field => {
                let new = if field == "data" {
                    base64::engine::general_purpose::STANDARD.encode(text.as_bytes())
                } else {
                    text.to_string()
                };
                v.as_mapping_mut()
                    .expect("read_key found the key in it")
                    .insert(SECRET_KEY.into(), Value::String(new));
            }
            _ => {}
        }
        out.insert(k.clone(), v);
    }
    let json = serde_json::to_value(Value::Mapping(out))
        .map_err(|e| CrsError(format!("cannot write the Secret: {e}")))?;
    Ok(serde_json::to_string_pretty(&json).expect("JSON values serialise") + "\n")
}

fn one_line(s: &str) -> String {
    s.split_whitespace().collect::<Vec<_>>().join(" ")
}

fn clean_metadata(metadata: &mut Value, unconditional: bool) {
    let Some(m) = metadata.as_mapping_mut() else {
        return;
    };
    for f in SERVER_SET_METADATA {
        m.remove(*f);
    }
    if unconditional {
        m.remove("resourceVersion");
    }
    let mut empty = false;
    if let Some(a) = m.get_mut("annotations").and_then(Value::as_mapping_mut) {
        a.remove(LAST_APPLIED);
        empty = a.is_empty();
    }
    if empty {
        m.remove("annotations");
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const UP: &str = "registry.k8s.io/provider-os/openstack-cloud-controller-manager:v1.34.1";

    #[test]
    fn skew_is_read_from_the_tags() {
        let ours = |t: &str| {
            format!(
                "r.example/occm/openstack-cloud-controller-manager:{t}@sha256:{}",
                "a".repeat(64)
            )
        };
        assert_eq!(skew(UP, &ours("v1.34.1-occmforge.1")), Skew::Same);
        assert_eq!(
            skew(UP, &ours("v1.33.5-occmforge.2")),
            Skew::Older {
                from: "1.34".parse().unwrap(),
                to: "1.33".parse().unwrap()
            }
        );
        assert_eq!(
            skew(UP, &ours("v1.35.0-occmforge.1")),
            Skew::Newer {
                from: "1.34".parse().unwrap(),
                to: "1.35".parse().unwrap()
            }
        );
        let untagged = format!("r.example/occm@sha256:{}", "b".repeat(64));
        assert_eq!(skew(UP, &untagged), Skew::Unknown(untagged.clone()));
        assert_eq!(
            skew("r.example/occm:latest", &ours("v1.34.1-occmforge.1")),
            Skew::Unknown("r.example/occm:latest".into())
        );
    }

    fn secret(image: &str) -> String {
        let keys = crate::consumers::mcapi::objects::secret_keys(image, "[Global]\n");
        crate::consumers::mcapi::objects::secret("kube-abc12-cloud-provider", &keys).to_string()
    }

    #[test]
    fn a_newer_minor_is_refused_unless_allowed_and_an_unknown_one_warned() {
        let newer = format!(
            "r.example/occm/openstack-cloud-controller-manager:v1.35.0-occmforge.1@sha256:{}",
            "a".repeat(64)
        );
        let mut opts = RewriteOptions {
            image: newer.clone(),
            ..RewriteOptions::default()
        };
        let e = rewrite_secret(&secret(UP), &opts).unwrap_err().0;
        assert!(
            e.starts_with("Secret kube-abc12-cloud-provider runs OCCM 1.34 (registry.k8s.io/provider-os/openstack-cloud-controller-manager:v1.34.1) and ")
                && e.contains("is OCCM 1.35") && e.contains("--allow-skew"),
            "{e}"
        );
        opts.allow_skew = true;
        let out = rewrite_secret(&secret(UP), &opts).unwrap();
        assert_eq!(occm_image(&out.secret).unwrap(), newer);
        opts.image = format!("r.example/occm@sha256:{}", "c".repeat(64));
        opts.allow_skew = false;
        let out = rewrite_secret(&secret(UP), &opts).unwrap();
        assert!(
            out.warnings.iter().any(
                |w| w.starts_with("cannot tell the Kubernetes minor of r.example/occm@sha256:")
            ),
            "{:?}",
            out.warnings
        );
    }

    #[test]
    fn the_output_keeps_the_resource_version_unless_unconditional_and_is_json() {
        let mut v: serde_json::Value = serde_json::from_str(&secret(UP)).unwrap();
        v["metadata"]["resourceVersion"] = "8812345".into();
        v["metadata"]["uid"] = "0b6f2a90".into();
        // Strings YAML 1.1 (kubectl's reader) takes for booleans.
        v["metadata"]["annotations"] =
            serde_json::json!({"example.com/enabled": "yes", "example.com/off": "off"});
        let ours = format!(
            "r.example/occm/openstack-cloud-controller-manager:v1.34.1-occmforge.1@sha256:{}",
            "a".repeat(64)
        );
        let mut opts = RewriteOptions {
            image: ours,
            ..RewriteOptions::default()
        };
        let out = rewrite_secret(&v.to_string(), &opts).unwrap();
        let written: serde_json::Value = serde_json::from_str(&out.secret).expect("JSON");
        assert_eq!(written["metadata"]["resourceVersion"], "8812345");
        assert!(written["metadata"].get("uid").is_none());
        assert_eq!(
            written["metadata"]["annotations"]["example.com/enabled"],
            "yes"
        );
        assert!(
            out.secret.contains("\"example.com/off\": \"off\""),
            "{}",
            out.secret
        );
        opts.unconditional = true;
        let out = rewrite_secret(&v.to_string(), &opts).unwrap();
        let written: serde_json::Value = serde_json::from_str(&out.secret).unwrap();
        assert!(written["metadata"].get("resourceVersion").is_none());
    }

    #[test]
    fn an_opaque_secret_and_upstream_images_are_warned_about_and_an_old_minor_refused() {
        let mut v: serde_json::Value = serde_json::from_str(&secret(UP)).unwrap();
        v["type"] = "Opaque".into();
        let old = format!(
            "r.example/occm/openstack-cloud-controller-manager:v1.31.4-occmforge.1@sha256:{}",
            "a".repeat(64)
        );
        let mut opts = RewriteOptions {
            image: old.clone(),
            ..RewriteOptions::default()
        };
        let e = rewrite_secret(&v.to_string(), &opts).unwrap_err().0;
        assert!(
            e.starts_with(&format!(
                "Secret kube-abc12-cloud-provider runs OCCM 1.34 ({UP}) and {old} is OCCM 1.31: 3 minors older than the cluster's kube-apiserver, and the version-skew policy allows cloud-controller-manager one; write a 1.34 or 1.33 image, or pass --allow-skew"
            )),
            "{e}"
        );
        opts.allow_skew = true;
        let out = rewrite_secret(&v.to_string(), &opts).unwrap();
        let w = out.warnings.join("\n");
        assert!(w.contains("Secret kube-abc12-cloud-provider is of type Opaque: a ClusterResourceSet applies only Secrets of type addons.cluster.x-k8s.io/resource-set"), "{w}");
        assert!(
            !w.contains("runs upstream's"),
            "an older image after upstream's is no upgrade hazard: {w}"
        );
        let same = old.replace("v1.31.4", "v1.34.1");
        let out = rewrite_secret(
            &secret(UP),
            &RewriteOptions {
                image: same,
                ..RewriteOptions::default()
            },
        )
        .unwrap();
        assert_eq!(out.warnings.len(), 1, "{:?}", out.warnings);
        assert!(
            out.warnings[0]
                .contains("runs upstream's 1.34 image: if `coe cluster upgrade` just wrote it"),
            "{:?}",
            out.warnings
        );
    }

    #[test]
    fn against_the_cluster_s_minor_one_older_is_allowed_and_two_are_refused() {
        // A 1.37 cluster runs magnum-cluster-api's default for it, upstream v1.35.0.
        let up35 = "registry.k8s.io/provider-os/openstack-cloud-controller-manager:v1.35.0";
        let ours36 = format!(
            "r.example/occm/openstack-cloud-controller-manager:v1.36.0-occmforge.1@sha256:{}",
            "a".repeat(64)
        );
        let mut opts = RewriteOptions {
            image: ours36.clone(),
            cluster_minor: Some("1.37".parse().unwrap()),
            ..RewriteOptions::default()
        };
        let out = rewrite_secret(&secret(up35), &opts).unwrap();
        assert_eq!(occm_image(&out.secret).unwrap(), ours36);
        // A declared 1.37 over a Secret that runs OCCM 1.34 is a jump of two minors: a mistyped
        // --k8s, unless the control plane was read (clusters) or --allow-skew says so.
        let ours34 = "r.example/occm/openstack-cloud-controller-manager:v1.34.1-occmforge.1";
        let e = rewrite_secret(&secret(ours34), &opts).unwrap_err().0;
        assert!(
            e.contains("runs OCCM 1.34")
                && e.contains("two or more minors ahead of it")
                && e.ends_with("if it runs 1.37, pass --allow-skew"),
            "{e}"
        );
        opts.control_plane_read = true;
        assert!(rewrite_secret(&secret(ours34), &opts).is_ok());
        opts.control_plane_read = false;
        // Without the cluster's minor, 1.36 after 1.35 reads as newer than the cluster.
        opts.cluster_minor = None;
        assert!(rewrite_secret(&secret(up35), &opts).is_err());
        opts.cluster_minor = Some("1.38".parse().unwrap());
        let e = rewrite_secret(&secret(up35), &opts).unwrap_err().0;
        assert!(
            e.contains(
                "OCCM 1.36 on a 1.38 cluster: two minors older (the version-skew policy allows one)"
            ) && e.ends_with("or pass --allow-skew"),
            "{e}"
        );
        opts.allow_skew = true;
        assert!(rewrite_secret(&secret(up35), &opts).is_ok());
    }

    #[test]
    fn node_delete_is_restored_on_request_warned_about_otherwise_and_reverted() {
        let no_delete = secret(UP).replace(
            &base64::engine::general_purpose::STANDARD
                .encode(crate::consumers::mcapi::objects::occm_manifests(UP)),
            &base64::engine::general_purpose::STANDARD.encode(
                crate::consumers::mcapi::objects::occm_manifests(UP).replace(
                    "  - nodes\n  verbs:\n  - '*'\n",
                    "  - nodes\n  verbs:\n  - get\n  - list\n  - watch\n  - patch\n  - update\n",
                ),
            ),
        );
        assert_ne!(no_delete, secret(UP));
        let ours = format!(
            "r.example/occm/openstack-cloud-controller-manager:v1.34.1-occmforge.1@sha256:{}",
            "a".repeat(64)
        );
        let mut opts = RewriteOptions {
            image: ours,
            ..RewriteOptions::default()
        };
        let out = rewrite_secret(&no_delete, &opts).unwrap();
        assert!(
            out.warnings.iter().any(|w| w
                .contains("ClusterRole system:cloud-controller-manager cannot delete nodes")
                && w.contains("--node-delete restore")),
            "{:?}",
            out.warnings
        );
        assert_eq!(out.rbac_change, None);
        opts.node_delete = Some(true);
        let restored = rewrite_secret(&no_delete, &opts).unwrap();
        assert_eq!(
            restored.rbac_change.as_deref(),
            Some("ClusterRole system:cloud-controller-manager: delete added to the nodes rule")
        );
        let key = |s: &str| {
            let v: serde_json::Value = serde_json::from_str(s).unwrap();
            String::from_utf8(
                base64::engine::general_purpose::STANDARD
                    .decode(v["data"][SECRET_KEY].as_str().unwrap())
                    .unwrap(),
            )
            .unwrap()
        };
        assert!(
            crate::consumers::mcapi::rbac::occm_rbac(&key(&restored.secret))
                .unwrap()
                .node_delete
        );
        assert_ne!(restored.hash, out.hash);
        // The revert: the image back and the verb out again give the bytes before.
        let back = rewrite_secret(
            &restored.secret,
            &RewriteOptions {
                image: UP.into(),
                node_delete: Some(false),
                ..RewriteOptions::default()
            },
        )
        .unwrap();
        assert_eq!(key(&back.secret), key(&no_delete));
    }
}
