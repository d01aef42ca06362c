//! The rules of `clusters`, as a pure function of what was read ([`super::Observed`]) and the
//! digest manifest: one [`Row`] per Cluster, with what `--fix` would do.

use serde::Serialize;

use super::{Observed, OccmSet};
use crate::base::reference::{ImageRef, RepositoryName};
use crate::config::Minor;
use crate::consumers::render::{self, RenderOptions};
use crate::digest_manifest::{DigestManifest, Entry};

pub use crate::consumers::mcapi::objects::UPSTREAM_REPOSITORY;

/// What the OCCM image in a cluster's Secret is.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(tag = "kind", rename_all = "kebab-case")]
pub enum ImageKind {
    /// The image images.lock.yaml pins for the cluster's minor (at its repository or a mirror).
    Pinned,
    /// An image images.lock.yaml pins for another minor.
    Ours {
        /// That minor.
        minor: Minor,
    },
    /// Upstream's image (`registry.k8s.io/provider-os/openstack-cloud-controller-manager`).
    Upstream,
    /// Anything else.
    Other,
    /// The Secret holds no readable OCCM DaemonSet.
    Unreadable,
}

/// The strategy of the set that applies the Secret.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub enum Strategy {
    /// Applied again whenever the Secret changes (magnum-cluster-api 0.29.2 and later).
    Reconcile,
    /// Applied once (magnum-cluster-api before 0.29.2, or Cluster API's default): a change of the
    /// Secret never reaches the workload cluster.
    ApplyOnce,
}

/// What `--fix` does for a cluster.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(tag = "action", rename_all = "kebab-case")]
pub enum Action {
    /// Nothing: the pinned image runs (Secret pinned, applied by Cluster API).
    None,
    /// Nothing to write: the Secret is pinned, Cluster API has not applied it yet.
    WaitForApply,
    /// Rewrite the Secret to this image (the same one when only the RBAC needs repair).
    Rewrite {
        /// The image to write.
        image: String,
        /// Also give OCCM's ServiceAccount `delete` on nodes back in the chart's ClusterRole
        /// ([`crate::consumers::mcapi::rbac::set_node_delete`]).
        restore_node_delete: bool,
    },
    /// Not fixable by occm-forge; why, in one line.
    Refuse {
        /// The reason.
        reason: String,
    },
}

/// One cluster's state and what to do about it.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Row {
    /// `namespace/name`.
    pub cluster: String,
    /// The minor the cluster runs (the lower of desired and control plane).
    pub minor: Option<Minor>,
    /// The minor it is being upgraded to, when its control plane is not there yet.
    pub upgrading_to: Option<Minor>,
    /// The Secret (name) whose OCCM is judged; empty when no set applies one.
    pub secret: String,
    /// The OCCM image in the Secret (empty when unreadable).
    pub image: String,
    /// What that image is.
    pub image_kind: ImageKind,
    /// The minor whose build serves the cluster's minor: its own, or the newest one below it
    /// ([`render::skew::serving`]).
    pub serving: Option<Minor>,
    /// The image images.lock.yaml pins for the cluster's minor (the serving build's), when it
    /// pins one.
    pub pinned: Option<String>,
    /// The set's strategy; `None` when no set applies an OCCM Secret.
    pub strategy: Option<Strategy>,
    /// Whether Cluster API applied the Secret's current content (binding hash = Secret hash);
    /// `None` when the binding records nothing for it yet.
    pub applied: Option<bool>,
    /// The Secret's hash and the binding's.
    pub hash: String,
    /// The binding's hash for it, if any.
    pub binding_hash: Option<String>,
    /// OCCM's minor (from the image tag) when the version-skew policy forbids it on the
    /// cluster's minor: newer, or two or more minors older.
    pub skew: Option<Minor>,
    /// Whether OCCM's ServiceAccount may delete nodes under the Secret's ClusterRole; `None`
    /// when that cannot be read.
    pub node_delete: Option<bool>,
    /// Why the cluster has no OCCM Secret, or why its RBAC cannot be read.
    pub problem: Option<String>,
    /// Whether the cluster runs the pinned image of its minor with the RBAC it needs: pinned in
    /// the Secret, applied, and able to delete nodes.
    pub ok: bool,
    /// What `--fix` does.
    pub action: Action,
}

/// Options of [`assess`].
#[derive(Debug, Clone, Default)]
pub struct AssessOptions {
    /// Write the image at `<prefix>/openstack-cloud-controller-manager` (a recorded mirror)
    /// instead of the entry's repository (as `render --prefix`).
    pub prefix: Option<String>,
    /// Serve a cluster whose minor has no build within one minor below by an older build,
    /// which the version-skew policy forbids.
    pub allow_skew: bool,
}

/// The rows of `clusters` against `manifest`, in the order given.
pub fn assess(clusters: &[Observed], manifest: &DigestManifest, opts: &AssessOptions) -> Vec<Row> {
    clusters
        .iter()
        .map(|c| assess_one(c, manifest, opts))
        .collect()
}

/// The set judged for a cluster: the first `Reconcile` one, else the first.
fn judged(c: &Observed) -> Option<&OccmSet> {
    c.sets
        .iter()
        .find(|s| s.strategy == "Reconcile")
        .or(c.sets.first())
}

/// A row for a cluster no set applies an OCCM Secret to.
fn without_occm(c: &Observed) -> Row {
    let why = c
        .no_occm
        .clone()
        .unwrap_or_else(|| "no ClusterResourceSet applies an OCCM Secret to it".into());
    Row {
        cluster: c.id(),
        minor: c.running_minor(),
        upgrading_to: c.upgrading_to(),
        secret: String::new(),
        image: String::new(),
        image_kind: ImageKind::Unreadable,
        serving: None,
        pinned: None,
        strategy: None,
        applied: None,
        hash: String::new(),
        binding_hash: None,
        skew: None,
        node_delete: None,
        problem: Some(why.clone()),
        ok: false,
        action: Action::Refuse {
            reason: format!("no OCCM Secret to rewrite: {why}"),
        },
    }
}

fn assess_one(c: &Observed, manifest: &DigestManifest, opts: &AssessOptions) -> Row {
    let Some(set) = judged(c) else {
        return without_occm(c);
    };
    let minor = c.running_minor();
    let serving = minor.and_then(|m| render::skew::serving(manifest, m));
    let pinned = serving.and_then(|(m, e)| {
        render::pinned_image(
            m,
            e,
            &RenderOptions {
                prefix: opts.prefix.clone(),
                ..RenderOptions::default()
            },
        )
        .ok()
    });
    let image = set.image.clone().unwrap_or_default();
    let image_kind = match &set.image {
        Err(_) => ImageKind::Unreadable,
        Ok(i) => kind_of(i, serving.map(|s| s.0), manifest),
    };
    let strategy = if set.strategy == "Reconcile" {
        Strategy::Reconcile
    } else {
        Strategy::ApplyOnce
    };
    let applied = set.binding_hash.as_ref().map(|h| *h == set.hash);
    let skew = Minor::of_image(&image).filter(|occm| {
        minor.is_some_and(|cluster| !render::skew::Skew::of(cluster, *occm).allowed())
    });
    let node_delete = set.rbac.as_ref().ok().map(|r| r.node_delete);
    let ok = image_kind == ImageKind::Pinned && applied == Some(true) && node_delete == Some(true);
    let action = action(
        c,
        set,
        serving,
        &image_kind,
        applied,
        pinned.as_deref(),
        opts,
    );
    Row {
        cluster: c.id(),
        minor,
        upgrading_to: c.upgrading_to(),
        secret: set.secret.clone(),
        image,
        image_kind,
        serving: serving.map(|s| s.0),
        pinned,
        strategy: Some(strategy),
        applied,
        hash: set.hash.clone(),
        binding_hash: set.binding_hash.clone(),
        skew,
        node_delete,
        problem: set.rbac.as_ref().err().cloned(),
        ok,
        action,
    }
}

/// `--fix`'s decision; see [`Action`].
/// The minor the cluster runs, when it and its control plane's version can be read: an image
/// is only written against a version the control plane reports. Errors: the reason, one line.
fn known_minor(c: &Observed) -> Result<Minor, String> {
    let Some(minor) = c.running_minor() else {
        return Err(format!(
            "cannot tell the cluster's Kubernetes version (spec.topology.version and the control plane's version are unset{})",
            c.control_plane_error
                .as_deref()
                .map(|e| format!("; {e}"))
                .unwrap_or_default()
        ));
    };
    if let Some(e) = &c.control_plane_error {
        return Err(format!(
            "cannot read the control plane's version ({e}): the {minor} image could be newer than the control plane"
        ));
    }
    if c.control_plane_version.is_none() {
        return Err(format!(
            "the control plane reports no version yet: the {minor} image could be newer than it"
        ));
    }
    Ok(minor)
}

fn action(
    c: &Observed,
    set: &OccmSet,
    serving: Option<(Minor, &Entry)>,
    kind: &ImageKind,
    applied: Option<bool>,
    pinned: Option<&str>,
    opts: &AssessOptions,
) -> Action {
    let refuse = |reason: String| Action::Refuse { reason };
    let restore_node_delete = match &set.rbac {
        Ok(r) => !r.node_delete,
        Err(e) => {
            return refuse(format!(
                "Secret {}: its OCCM RBAC cannot be read ({e}); nothing is written",
                set.secret
            ));
        }
    };
    if *kind == ImageKind::Pinned && !restore_node_delete {
        return if applied == Some(true) {
            Action::None
        } else {
            Action::WaitForApply
        };
    }
    if set.strategy != "Reconcile" {
        return refuse(format!(
            "legacy ClusterResourceSet {} (strategy {}): Cluster API never applies a change of Secret {} to the workload cluster; `openstack coe cluster upgrade` it first (magnum-cluster-api 0.29.2 or later writes <stack_id>-cloud-provider under strategy Reconcile)",
            set.resource_set,
            if set.strategy.is_empty() {
                "ApplyOnce by default"
            } else {
                &set.strategy
            },
            set.secret
        ));
    }
    if let Err(e) = &set.image {
        return refuse(format!("Secret {}: {e}", set.secret));
    }
    if *kind == ImageKind::Pinned {
        // Only the RBAC to repair: the same image.
        return Action::Rewrite {
            image: set.image.clone().unwrap_or_default(),
            restore_node_delete,
        };
    }
    let minor = match known_minor(c) {
        Ok(minor) => minor,
        Err(reason) => return refuse(reason),
    };
    let Some((built, entry)) = serving else {
        return refuse(format!(
            "the digest manifest pins no image for {minor} or an older minor: build it (occm-forge build --k8s {minor})"
        ));
    };
    let policy = render::skew::Skew::of(minor, built);
    if !policy.allowed() && !opts.allow_skew {
        return refuse(format!(
            "the digest manifest pins no image for {minor}, and its newest older build would run {}; build {minor} (occm-forge build --k8s {minor}) or pass --allow-skew",
            policy.describe(minor, built)
        ));
    }
    match pinned {
        Some(image) if Minor::of_image(image).is_some_and(|m| m > minor) => refuse(format!(
            "the image pinned for {built} ({image}) is tagged as OCCM {}: newer than the cluster's {minor}, which the version-skew policy forbids; check the digest manifest's {built} entry",
            Minor::of_image(image).expect("checked")
        )),
        Some(image) => Action::Rewrite {
            image: image.to_string(),
            restore_node_delete,
        },
        None => refuse(
            render::pinned_image(
                built,
                entry,
                &RenderOptions {
                    prefix: opts.prefix.clone(),
                    ..RenderOptions::default()
                },
            )
            .err()
            .map(|e| e.message)
            .unwrap_or_default(),
        ),
    }
}

/// What `image` is against the manifest, for a cluster served by the build of `serving`.
pub fn kind_of(image: &str, serving: Option<Minor>, manifest: &DigestManifest) -> ImageKind {
    let Ok(r) = image.parse::<ImageRef>() else {
        return ImageKind::Other;
    };
    for (m, e) in &manifest.images {
        let at_recorded = render::recorded_as(e, &r.repository.to_string()).is_some();
        if at_recorded && r.digest.as_deref() == Some(e.digest.as_str()) {
            return if Some(*m) == serving {
                ImageKind::Pinned
            } else {
                ImageKind::Ours { minor: *m }
            };
        }
    }
    match UPSTREAM_REPOSITORY.parse::<RepositoryName>() {
        Ok(up) if up == r.repository => ImageKind::Upstream,
        _ => ImageKind::Other,
    }
}

impl Row {
    /// The image, short: `pinned v1.34.1-occmforge.1`, `pinned v1.36.0-occmforge.1 (1.36 serves
    /// 1.37)`, `ours for 1.33 …`, `upstream v1.35.0`, `other <ref>`, `none`.
    pub fn describe_image(&self) -> String {
        let tag = self
            .image
            .parse::<ImageRef>()
            .ok()
            .and_then(|r| r.tag)
            .unwrap_or_default();
        match &self.image_kind {
            ImageKind::Pinned => match (self.serving, self.minor) {
                (Some(s), Some(m)) if s != m => format!("pinned {tag} ({s} serves {m})"),
                _ => format!("pinned {tag}"),
            },
            ImageKind::Ours { minor } => format!("ours for {minor} {tag}"),
            ImageKind::Upstream => format!("upstream {tag}"),
            ImageKind::Other => format!("other {}", self.image),
            ImageKind::Unreadable if self.strategy.is_none() => "none".into(),
            ImageKind::Unreadable => "unreadable".into(),
        }
    }

    /// What is wrong, in one line (empty when nothing is).
    pub fn findings(&self) -> String {
        let mut f = Vec::new();
        if self.strategy.is_none() {
            f.push(format!(
                "no OCCM Secret: {}",
                self.problem.as_deref().unwrap_or("none applied")
            ));
            return f.join("; ");
        }
        if self.image_kind != ImageKind::Pinned {
            f.push(match self.minor {
                Some(m) => format!("not the pinned image of {m}"),
                None => "not pinned".to_string(),
            });
        }
        if let (Some(occm), Some(m)) = (self.skew, self.minor) {
            f.push(format!(
                "skew: {}",
                render::skew::Skew::of(m, occm).describe(m, occm)
            ));
        }
        match (self.node_delete, &self.problem) {
            (Some(false), _) => f.push(
                "RBAC: OCCM's ClusterRole cannot delete nodes, so Nodes of gone servers stay (DeletingNodeFailed)".into(),
            ),
            (None, Some(p)) => f.push(format!("RBAC cannot be read: {p}")),
            _ => {}
        }
        if self.strategy == Some(Strategy::ApplyOnce) {
            f.push("legacy ApplyOnce set: changes never reach the cluster".into());
        }
        match self.applied {
            Some(false) => f.push("the Secret's content is not applied yet".into()),
            None => f.push("no ClusterResourceSetBinding records the Secret".into()),
            Some(true) => {}
        }
        f.join("; ")
    }
}

/// The rows as a table for stdout: one line per cluster and a header.
pub fn table(rows: &[Row]) -> String {
    let mut lines = vec![[
        "CLUSTER".to_string(),
        "K8S".into(),
        "OCCM".into(),
        "STRATEGY".into(),
        "APPLIED".into(),
        "FINDINGS".into(),
        "FIX".into(),
    ]];
    for r in rows {
        let k8s = match (r.minor, r.upgrading_to) {
            (Some(m), Some(to)) => format!("{m}→{to}"),
            (Some(m), None) => m.to_string(),
            (None, _) => "?".into(),
        };
        let applied = match (r.strategy, r.applied) {
            (None, _) => "-",
            (_, Some(true)) => "yes",
            (_, Some(false)) => "no",
            (_, None) => "none",
        };
        let fix = match &r.action {
            Action::None => "-".to_string(),
            Action::WaitForApply => "wait for Cluster API".into(),
            Action::Rewrite {
                image,
                restore_node_delete,
            } => {
                let rbac = if *restore_node_delete {
                    " and restore delete on nodes"
                } else {
                    ""
                };
                if *image == r.image {
                    "restore delete on nodes (image kept)".to_string()
                } else {
                    format!("rewrite to {image}{rbac}")
                }
            }
            Action::Refuse { reason } => format!("refused: {reason}"),
        };
        let findings = r.findings();
        lines.push([
            r.cluster.clone(),
            k8s,
            r.describe_image(),
            r.strategy
                .map(|s| format!("{s:?}"))
                .unwrap_or_else(|| "-".into()),
            applied.into(),
            if findings.is_empty() {
                "-".into()
            } else {
                findings
            },
            fix,
        ]);
    }
    let widths: Vec<usize> = (0..6)
        .map(|i| {
            lines
                .iter()
                .map(|l| l[i].chars().count())
                .max()
                .unwrap_or(0)
        })
        .collect();
    lines
        .iter()
        .map(|l| {
            let mut s = String::new();
            for (i, cell) in l.iter().enumerate() {
                if i < 6 {
                    s.push_str(&format!("{cell:<w$}  ", w = widths[i]));
                } else {
                    s.push_str(cell);
                }
            }
            s.trim_end().to_string() + "\n"
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::consumers::clusters::{Observed, OccmSet};

    const OURS: &str = "r.example/occm/openstack-cloud-controller-manager";

    fn manifest() -> DigestManifest {
        let mut m = DigestManifest::default();
        for (minor, fill) in [("1.33", 'a'), ("1.34", 'b'), ("1.35", 'c')] {
            m.images.insert(
                minor.parse().unwrap(),
                crate::testing::entry(minor, OURS, fill),
            );
        }
        m
    }

    fn pinned(minor: &str) -> String {
        manifest().images[&minor.parse().unwrap()].image.clone()
    }

    fn upstream(tag: &str) -> String {
        format!("{UPSTREAM_REPOSITORY}:{tag}")
    }

    /// A cluster at `desired` / `control_plane`, its Reconcile Secret running `image`, applied
    /// when `applied`.
    fn cluster(desired: &str, control_plane: Option<&str>, image: &str, applied: bool) -> Observed {
        Observed {
            namespace: "magnum-system".into(),
            name: "kube-abc12".into(),
            desired_version: Some(desired.into()),
            control_plane_version: control_plane.map(str::to_string),
            control_plane_error: None,
            sets: vec![OccmSet {
                resource_set: "kube-abc12-cloud-provider".into(),
                strategy: "Reconcile".into(),
                secret: "kube-abc12-cloud-provider".into(),
                resource_version: "7".into(),
                image: Ok(image.into()),
                rbac: Ok(crate::consumers::mcapi::rbac::OccmRbac {
                    service_account: "kube-system/cloud-controller-manager".into(),
                    cluster_roles: vec![("system:cloud-controller-manager".into(), true)],
                    node_delete: true,
                }),
                hash: "sha256:new".into(),
                binding_hash: Some(if applied { "sha256:new" } else { "sha256:old" }.into()),
                object: serde_json::Value::Null,
            }],
            no_occm: None,
        }
    }

    fn one(c: Observed) -> Row {
        assess(&[c], &manifest(), &AssessOptions::default()).remove(0)
    }

    #[test]
    fn the_pinned_image_applied_is_ok_and_not_yet_applied_waits() {
        let r = one(cluster("v1.34.1", Some("v1.34.1"), &pinned("1.34"), true));
        assert!(r.ok, "{r:?}");
        assert_eq!(
            (r.image_kind.clone(), r.action.clone()),
            (ImageKind::Pinned, Action::None)
        );
        assert_eq!(r.findings(), "");
        let r = one(cluster("v1.34.1", Some("v1.34.1"), &pinned("1.34"), false));
        assert!(!r.ok);
        assert_eq!(r.action, Action::WaitForApply);
        assert_eq!(r.findings(), "the Secret's content is not applied yet");
    }

    #[test]
    fn upstream_and_other_minors_are_rewritten_to_the_pinned_image_of_the_running_minor() {
        let r = one(cluster(
            "v1.34.1",
            Some("v1.34.1"),
            &upstream("v1.34.1"),
            true,
        ));
        assert_eq!(r.image_kind, ImageKind::Upstream);
        assert_eq!(r.describe_image(), "upstream v1.34.1");
        assert_eq!(
            r.action,
            Action::Rewrite {
                image: pinned("1.34"),
                restore_node_delete: false,
            }
        );
        let r = one(cluster("v1.34.1", Some("v1.34.1"), &pinned("1.33"), true));
        assert_eq!(
            r.image_kind,
            ImageKind::Ours {
                minor: "1.33".parse().unwrap()
            }
        );
        assert_eq!(
            r.action,
            Action::Rewrite {
                image: pinned("1.34"),
                restore_node_delete: false,
            }
        );
        // A mirror recorded for the entry counts as pinned.
        let mut m = manifest();
        let e = m.images.get_mut(&"1.34".parse().unwrap()).unwrap();
        e.mirrors
            .push("cloud.example/magnum/openstack-cloud-controller-manager".into());
        let at_mirror = e
            .at_repository("cloud.example/magnum/openstack-cloud-controller-manager")
            .image;
        let rows = assess(
            &[
                cluster("v1.34.1", Some("v1.34.1"), &upstream("v1.34.1"), true),
                cluster("v1.34.1", Some("v1.34.1"), &at_mirror, true),
            ],
            &m,
            &AssessOptions {
                prefix: Some("cloud.example/magnum".into()),
                ..AssessOptions::default()
            },
        );
        assert_eq!(
            rows[0].action,
            Action::Rewrite {
                image: at_mirror.clone(),
                restore_node_delete: false,
            }
        );
        assert!(rows[1].ok);
    }

    #[test]
    fn during_an_upgrade_the_old_minor_is_pinned_and_the_new_upstream_image_is_skew() {
        // `coe cluster upgrade` to 1.35: the driver wrote upstream v1.35.0, the control plane
        // still runs 1.34.
        let r = one(cluster(
            "v1.35.0",
            Some("v1.34.1"),
            &upstream("v1.35.0"),
            true,
        ));
        assert_eq!(r.minor, Some("1.34".parse().unwrap()));
        assert_eq!(r.upgrading_to, Some("1.35".parse().unwrap()));
        assert_eq!(r.skew, Some("1.35".parse().unwrap()));
        assert!(
            r.findings()
                .contains("skew: OCCM 1.35 on a 1.34 cluster: one minor newer than kube-apiserver"),
            "{}",
            r.findings()
        );
        assert_eq!(
            r.action,
            Action::Rewrite {
                image: pinned("1.34"),
                restore_node_delete: false,
            }
        );
        // Once the whole control plane runs 1.35, the 1.35 image.
        let r = one(cluster("v1.35.0", Some("v1.35.0"), &pinned("1.34"), true));
        assert_eq!(
            (r.minor, r.upgrading_to, r.skew),
            (Some("1.35".parse().unwrap()), None, None)
        );
        assert_eq!(
            r.action,
            Action::Rewrite {
                image: pinned("1.35"),
                restore_node_delete: false,
            }
        );
    }

    #[test]
    fn what_cannot_be_fixed_is_refused_with_the_reason() {
        let refused = |r: Row| match r.action {
            Action::Refuse { reason } => reason,
            a => panic!("not refused: {a:?}"),
        };
        let mut legacy = cluster("v1.34.1", Some("v1.34.1"), &upstream("v1.34.1"), true);
        legacy.sets[0].strategy = String::new();
        let reason = refused(one(legacy.clone()));
        assert!(reason.starts_with("legacy ClusterResourceSet kube-abc12-cloud-provider (strategy ApplyOnce by default): Cluster API never applies"), "{reason}");
        assert!(one(legacy).findings().contains("legacy ApplyOnce set"));
        let reason = refused(one(cluster(
            "v1.37.0",
            Some("v1.37.0"),
            &upstream("v1.37.0"),
            true,
        )));
        assert!(
            reason.starts_with("the digest manifest pins no image for 1.37"),
            "{reason}"
        );
        let reason = refused(one(cluster("v1.34.1", None, &upstream("v1.34.1"), true)));
        assert!(
            reason.starts_with("the control plane reports no version yet"),
            "{reason}"
        );
        let mut unreadable = cluster("v1.34.1", Some("v1.34.1"), "", true);
        unreadable.sets[0].image = Err("no OCCM DaemonSet".into());
        assert_eq!(
            refused(one(unreadable)),
            "Secret kube-abc12-cloud-provider: no OCCM DaemonSet"
        );
        // With another digest manifest: the reason the usual upstream cluster is refused.
        let refused_with = |m: &DigestManifest| {
            let c = cluster("v1.34.1", Some("v1.34.1"), &upstream("v1.34.1"), true);
            refused(assess(&[c], m, &AssessOptions::default()).remove(0))
        };
        let mut misfiled = manifest();
        let e35 = misfiled.images[&"1.35".parse().unwrap()].clone();
        misfiled.images.insert("1.34".parse().unwrap(), e35);
        let reason = refused_with(&misfiled);
        assert!(
            reason.contains("is tagged as OCCM 1.35: newer than the cluster's 1.34"),
            "{reason}"
        );
        let mut unpublished = manifest();
        let e = unpublished
            .images
            .get_mut(&"1.34".parse().unwrap())
            .unwrap();
        e.published = false;
        let reason = refused_with(&unpublished);
        assert!(reason.contains("recorded without --push"), "{reason}");
    }

    #[test]
    fn the_table_has_one_line_per_cluster() {
        let rows = assess(
            &[
                cluster("v1.34.1", Some("v1.34.1"), &pinned("1.34"), true),
                cluster("v1.35.0", Some("v1.34.1"), &upstream("v1.35.0"), false),
            ],
            &manifest(),
            &AssessOptions::default(),
        );
        let t = table(&rows);
        let lines: Vec<&str> = t.lines().collect();
        assert_eq!(lines.len(), 3, "{t}");
        assert!(
            lines[0].starts_with("CLUSTER") && lines[0].ends_with("FIX"),
            "{t}"
        );
        assert!(
            lines[1].contains("1.34 ")
                && lines[1].contains("pinned v1.34.1-occmforge.1")
                && lines[1].trim_end().ends_with('-'),
            "{t}"
        );
        assert!(
            lines[2].contains("1.34→1.35")
                && lines[2].contains("upstream v1.35.0")
                && lines[2].contains(&format!("rewrite to {}", pinned("1.34"))),
            "{t}"
        );
    }

    #[test]
    fn a_minor_without_a_build_is_served_by_the_one_below_and_further_skew_is_refused() {
        // magnum-cluster-api 0.38 gives a 1.36 cluster upstream v1.35.0; 1.35 is built.
        let r = one(cluster(
            "v1.36.0",
            Some("v1.36.0"),
            &upstream("v1.35.0"),
            true,
        ));
        assert_eq!(r.serving, Some("1.35".parse().unwrap()));
        assert_eq!(r.skew, None, "one minor older is allowed");
        assert_eq!(
            r.action,
            Action::Rewrite {
                image: pinned("1.35"),
                restore_node_delete: false,
            }
        );
        let r = one(cluster("v1.36.0", Some("v1.36.0"), &pinned("1.35"), true));
        assert!(r.ok, "{r:?}");
        assert_eq!(
            r.describe_image(),
            "pinned v1.35.1-occmforge.1 (1.35 serves 1.36)"
        );
        // 1.37 runs upstream v1.35.0: two minors older, reported; the newest build is 1.35,
        // also two older: refused unless --allow-skew.
        let c = cluster("v1.37.0", Some("v1.37.0"), &upstream("v1.35.0"), true);
        let r = one(c.clone());
        assert_eq!(r.skew, Some("1.35".parse().unwrap()));
        assert!(
            r.findings().contains(
                "skew: OCCM 1.35 on a 1.37 cluster: two minors older (the version-skew policy allows one)"
            ),
            "{}",
            r.findings()
        );
        match &r.action {
            Action::Refuse { reason } => assert!(
                reason.starts_with("the digest manifest pins no image for 1.37, and its newest older build would run OCCM 1.35 on a 1.37 cluster: two minors older")
                    && reason.ends_with("or pass --allow-skew"),
                "{reason}"
            ),
            a => panic!("{a:?}"),
        }
        let r = assess(
            &[c],
            &manifest(),
            &AssessOptions {
                allow_skew: true,
                ..AssessOptions::default()
            },
        )
        .remove(0);
        assert_eq!(
            r.action,
            Action::Rewrite {
                image: pinned("1.35"),
                restore_node_delete: false,
            }
        );
    }

    #[test]
    fn a_cluster_role_without_delete_on_nodes_is_a_finding_fix_restores() {
        let mut c = cluster("v1.34.1", Some("v1.34.1"), &pinned("1.34"), true);
        if let Ok(r) = &mut c.sets[0].rbac {
            r.node_delete = false;
        }
        let r = one(c.clone());
        assert!(!r.ok);
        assert_eq!(r.node_delete, Some(false));
        assert_eq!(
            r.findings(),
            "RBAC: OCCM's ClusterRole cannot delete nodes, so Nodes of gone servers stay (DeletingNodeFailed)"
        );
        assert_eq!(
            r.action,
            Action::Rewrite {
                image: pinned("1.34"),
                restore_node_delete: true,
            }
        );
        assert!(table(&[r]).contains("restore delete on nodes (image kept)"));
        // Upstream's image and no delete: both in one rewrite.
        let mut up = cluster("v1.34.1", Some("v1.34.1"), &upstream("v1.34.1"), true);
        up.sets[0].rbac = c.sets[0].rbac.clone();
        assert_eq!(
            one(up).action,
            Action::Rewrite {
                image: pinned("1.34"),
                restore_node_delete: true,
            }
        );
        // A ClusterRole that cannot be parsed: nothing is written.
        c.sets[0].rbac = Err("ClusterRole x: `rules` is not a list of rules".into());
        let r = one(c);
        assert!(
            r.findings().contains("RBAC cannot be read: ClusterRole x"),
            "{}",
            r.findings()
        );
        assert!(
            matches!(r.action, Action::Refuse { ref reason } if reason.contains("nothing is written"))
        );
    }

    #[test]
    fn a_cluster_without_an_occm_secret_gets_a_row_naming_why() {
        let mut c = cluster("v1.34.1", Some("v1.34.1"), "", true);
        c.sets.clear();
        c.no_occm = Some(
            "ClusterResourceSet kube-abc12-cloud-provider names Secret kube-abc12-cloud-provider, which does not exist".into(),
        );
        let r = one(c);
        assert!(!r.ok);
        assert_eq!(r.describe_image(), "none");
        assert_eq!(
            r.findings(),
            "no OCCM Secret: ClusterResourceSet kube-abc12-cloud-provider names Secret kube-abc12-cloud-provider, which does not exist"
        );
        let t = table(&[r]);
        assert!(
            t.lines()
                .nth(1)
                .unwrap()
                .contains("refused: no OCCM Secret to rewrite"),
            "{t}"
        );
    }
}
