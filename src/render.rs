//! `occm-forge render`: what magnum-cluster-api, Helm and Atmosphere read, from digest-manifest
//! entries. Every output is held against what the consumer's code really does (shared notes,
//! consumers §1 and §6; file:line are magnum-cluster-api v0.36.6, the same in v0.38.1):
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
//!   image. Refused unless [`RenderOptions::patched_magnum_cluster_api`].
//! - `helm-values`: `image.repository` and `image.tag: "<tag>@sha256:<hex>"` for the OCCM chart,
//!   which has no digest field.
//! - `atmosphere-vars`: `atmosphere_image_overrides:` with one
//!   `openstack_cloud_controller_manager_<major>_<minor>: "{{ atmosphere_image_prefix }}<image>"`
//!   per minor. Atmosphere merges overrides only from that key (`roles/defaults/vars/main.yml:251`);
//!   no Atmosphere role reads an OCCM key, so the only effect is that Atmosphere mirrors the image.
//! - `crs-secret`: not rendered from entries alone; see [`crate::crs`].

use std::fmt;
use std::str::FromStr;

use crate::config::Minor;
use std::path::Path;

use crate::digest_manifest::{DigestManifest, Entry};
use crate::reference::RepositoryName;

/// The last path segment magnum-cluster-api gives the OCCM image under `container_infra_prefix`.
pub const MCAPI_IMAGE_NAME: &str = "openstack-cloud-controller-manager";

/// Everything `container_infra_prefix` moves besides OCCM, in magnum-cluster-api v0.36.6 to
/// v0.38.1: kubeadm's `imageRepository` (`resources.py:1214-1218`), the containerd sandbox
/// (pause) image (`utils.py:213-214`), Cilium's digest pinning (`src/addons/mod.rs:62`,
/// `use_digest: container_infra_prefix.is_none()`) and every add-on image through
/// `image_utils.get_image` (`image_utils.py:42-78`).
pub const PREFIX_MOVES: &str = "kubeadm's imageRepository (kube-apiserver, kube-controller-manager, kube-scheduler, kube-proxy, etcd, coredns), the pause image of containerd, every provider-os image (OCCM, Cinder and Manila CSI, ...), the CSI sidecars, Calico or Cilium images, and it turns Cilium's digest pinning off";

/// An output format.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Format {
    /// `cloud_provider_image=…` (only for a patched magnum-cluster-api).
    MagnumLabel,
    /// `cloud_provider_tag=…` alone, for a cluster whose prefix already holds the image.
    MagnumTag,
    /// `container_infra_prefix=…` + `cloud_provider_tag=…`.
    MagnumPrefixTag,
    /// Helm values YAML.
    HelmValues,
    /// Atmosphere vars YAML under `atmosphere_image_overrides:`.
    AtmosphereVars,
    /// The ClusterResourceSet Secret of a running cluster with OCCM's image replaced
    /// ([`crate::crs`]).
    CrsSecret,
}

const NAMES: &str =
    "magnum-tag, magnum-prefix-tag, magnum-label, helm-values, atmosphere-vars, crs-secret";

impl FromStr for Format {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s {
            "magnum-label" => Ok(Format::MagnumLabel),
            "magnum-tag" => Ok(Format::MagnumTag),
            "magnum-prefix-tag" => Ok(Format::MagnumPrefixTag),
            "helm-values" => Ok(Format::HelmValues),
            "atmosphere-vars" => Ok(Format::AtmosphereVars),
            "crs-secret" => Ok(Format::CrsSecret),
            _ => Err(format!("unknown format `{s}` ({NAMES})")),
        }
    }
}

impl fmt::Display for Format {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Format::MagnumLabel => "magnum-label",
            Format::MagnumTag => "magnum-tag",
            Format::MagnumPrefixTag => "magnum-prefix-tag",
            Format::HelmValues => "helm-values",
            Format::AtmosphereVars => "atmosphere-vars",
            Format::CrsSecret => "crs-secret",
        })
    }
}

/// A rendering failure (a usage error: exit status 2).
#[derive(Debug, thiserror::Error)]
#[error("render {minor}: {message}")]
pub struct RenderError {
    /// The minor.
    pub minor: Minor,
    /// Why.
    pub message: String,
}

/// Rendered text plus warnings for stderr.
#[derive(Debug, Clone, Default)]
pub struct Rendered {
    /// The output, ending in a newline.
    pub text: String,
    /// Things the user must know (e.g. that the prefix moves every image).
    pub warnings: Vec<String>,
}

/// The entries to render: `minor`'s, or every entry of the manifest when `None`.
///
/// Errors: [`crate::Error::Usage`] when the manifest has no entry for `minor`, or none at all.
pub fn select<'a>(
    manifest: &'a DigestManifest,
    path: &Path,
    minor: Option<Minor>,
) -> Result<Vec<(Minor, &'a Entry)>, crate::Error> {
    let entries: Vec<(Minor, &Entry)> = match minor {
        Some(minor) => {
            let e = manifest.images.get(&minor).ok_or_else(|| {
                crate::Error::Usage(format!("{}: no entry for {minor}", path.display()))
            })?;
            vec![(minor, e)]
        }
        None => manifest.images.iter().map(|(m, e)| (*m, e)).collect(),
    };
    if entries.is_empty() {
        return Err(crate::Error::Usage(format!(
            "{} has no entries",
            path.display()
        )));
    }
    Ok(entries)
}

/// Options of [`render_with`].
#[derive(Debug, Clone, Default)]
pub struct RenderOptions {
    /// Render entries recorded without `--push` too.
    pub allow_unpublished: bool,
    /// The cluster's `container_infra_prefix` (`registry/path`, a trailing `/` is ignored):
    /// required by `magnum-tag`, optional for `magnum-prefix-tag` (default: the entry's
    /// repository without its last segment). The image must be recorded at
    /// `<prefix>/openstack-cloud-controller-manager`.
    pub prefix: Option<String>,
    /// The operator runs a magnum-cluster-api patched to read `cloud_provider_image`; without it
    /// `magnum-label` is refused.
    pub patched_magnum_cluster_api: bool,
}

/// [`render_with`] with default options apart from `allow_unpublished`.
pub fn render(
    format: Format,
    entries: &[(Minor, &Entry)],
    allow_unpublished: bool,
) -> Result<Rendered, RenderError> {
    render_with(
        format,
        entries,
        &RenderOptions {
            allow_unpublished,
            ..RenderOptions::default()
        },
    )
}

/// The repository magnum-cluster-api renders for OCCM under `prefix`:
/// `<prefix without trailing '/'>/openstack-cloud-controller-manager`.
pub fn mcapi_repository(prefix: &str) -> String {
    format!("{}/{MCAPI_IMAGE_NAME}", prefix.trim_end_matches('/'))
}

/// Whether two repository names are the same repository (`docker.io` defaults applied).
fn same_repository(a: &str, b: &str) -> bool {
    match (a.parse::<RepositoryName>(), b.parse::<RepositoryName>()) {
        (Ok(a), Ok(b)) => a == b,
        _ => a == b,
    }
}

/// The recorded repository (the entry's own or a mirror) that `repository` names, if any.
pub fn recorded_as<'e>(entry: &'e Entry, repository: &str) -> Option<&'e str> {
    std::iter::once(&entry.repository)
        .chain(&entry.mirrors)
        .find(|r| same_repository(r, repository))
        .map(String::as_str)
}

/// The opening of `atmosphere-vars` output, before the one entry per minor.
const ATMOSPHERE_HEADER: &str = "# Atmosphere merges these into atmosphere_images (roles/defaults/vars/main.yml); it then\n# mirrors them. No Atmosphere role deploys OCCM from them.\natmosphere_image_overrides:\n";

/// Renders `entries` in `format`. With more than one entry, each block is introduced by a
/// `# <minor>` comment (and Helm values documents are separated by `---`); Atmosphere vars form
/// one YAML map. Unpublished entries are refused unless `allow_unpublished`; `magnum-label`
/// unless `patched_magnum_cluster_api`; `magnum-tag` without a prefix that holds the image.
pub fn render_with(
    format: Format,
    entries: &[(Minor, &Entry)],
    opts: &RenderOptions,
) -> Result<Rendered, RenderError> {
    let mut out = Rendered::default();
    let many = entries.len() > 1;
    if format == Format::AtmosphereVars {
        out.text.push_str(ATMOSPHERE_HEADER);
    }
    for (i, (minor, e)) in entries.iter().enumerate() {
        let block =
            render_entry(format, *minor, e, opts, &mut out.warnings).map_err(|message| {
                RenderError {
                    minor: *minor,
                    message,
                }
            })?;
        if many && format != Format::AtmosphereVars {
            if i > 0 && format == Format::HelmValues {
                out.text.push_str("---\n");
            }
            out.text.push_str(&format!("# {minor}\n"));
        }
        out.text.push_str(&block);
    }
    Ok(out)
}

/// One entry's block in `format`, adding a warning to `warnings` the first time a prefix or
/// registry needs one. Errors are one line, without the minor.
fn render_entry(
    format: Format,
    minor: Minor,
    e: &Entry,
    opts: &RenderOptions,
    warnings: &mut Vec<String>,
) -> Result<String, String> {
    refuse_unrenderable(format, e, opts)?;
    let pinned_tag = format!("{}@{}", e.tag, e.digest);
    Ok(match format {
        Format::MagnumLabel => format!("cloud_provider_image={}:{pinned_tag}\n", e.repository),
        Format::MagnumTag => {
            let Some(prefix) = opts.prefix.as_deref() else {
                return Err(
                    "magnum-tag needs --prefix: the cluster's container_infra_prefix".into(),
                );
            };
            held_at(e, minor, prefix)?;
            format!("cloud_provider_tag={pinned_tag}\n")
        }
        Format::MagnumPrefixTag => {
            let prefix = container_infra_prefix(minor, e, opts)?;
            if !warnings.iter().any(|w| w.contains(&prefix)) {
                warnings.push(format!(
                    "container_infra_prefix={prefix} moves every image of the cluster to {prefix}/<name>, not only OCCM: {PREFIX_MOVES}; mirror all of them there first, or keep the cluster's prefix and use --format magnum-tag"
                ));
            }
            format!("container_infra_prefix={prefix}\ncloud_provider_tag={pinned_tag}\n")
        }
        Format::HelmValues => format!(
            "image:\n  repository: {}\n  tag: \"{pinned_tag}\"\n",
            e.repository
        ),
        Format::AtmosphereVars => {
            let registry = e.repository.split('/').next().unwrap_or_default();
            if registry.contains(':') && !warnings.iter().any(|w| w.contains(registry)) {
                warnings.push(format!(
                    "registry {registry} has a port: Atmosphere's TestImageExist splits the reference at the first ':' (roles/defaults/vars_test.go:58) and its Renovate regex reads the name as [^:]+ (renovate.json:34), so both break; serve the image from a registry name without a port"
                ));
            }
            format!(
                "  openstack_cloud_controller_manager_{}_{}: \"{{{{ atmosphere_image_prefix }}}}{}\"\n",
                minor.major, minor.minor, e.image
            )
        }
        Format::CrsSecret => unreachable!("refused above"),
    })
}

/// Refuses what is never rendered from `e` in `format`: `crs-secret` at all, `magnum-label`
/// unless the operator patched magnum-cluster-api, an unpublished entry unless allowed.
fn refuse_unrenderable(format: Format, e: &Entry, opts: &RenderOptions) -> Result<(), String> {
    if format == Format::CrsSecret {
        return Err(
            "crs-secret rewrites a Secret read from stdin; it is not rendered from entries alone"
                .into(),
        );
    }
    if format == Format::MagnumLabel && !opts.patched_magnum_cluster_api {
        return Err(
            "no released magnum-cluster-api (up to v0.38.1) reads cloud_provider_image: it ignores unknown labels and the cluster would silently run the upstream image; use --format magnum-tag --prefix <container_infra_prefix>, or pass --patched-magnum-cluster-api if yours reads it".into(),
        );
    }
    if !e.published && !opts.allow_unpublished {
        return Err(format!(
            "{} was recorded without --push; publish it first (or pass --allow-unpublished)",
            e.image
        ));
    }
    Ok(())
}

/// The `container_infra_prefix` for `magnum-prefix-tag`: `opts.prefix` (without trailing `/`),
/// which must hold the image, or else the entry's repository without its last segment, which
/// must be [`MCAPI_IMAGE_NAME`].
fn container_infra_prefix(minor: Minor, e: &Entry, opts: &RenderOptions) -> Result<String, String> {
    match opts.prefix.as_deref() {
        Some(p) => {
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

/// The full image reference to run for `entry`: `<repository>:<tag>@<digest>` at the entry's
/// own repository, or, with `opts.prefix`, at `<prefix>/openstack-cloud-controller-manager`, which
/// must be recorded (its repository or a mirror). Unpublished entries are refused unless
/// `opts.allow_unpublished`. Used by `crs-secret`.
pub fn pinned_image(
    minor: Minor,
    entry: &Entry,
    opts: &RenderOptions,
) -> Result<String, RenderError> {
    let err = |message: String| RenderError { minor, message };
    if !entry.published && !opts.allow_unpublished {
        return Err(err(format!(
            "{} was recorded without --push; publish it first (or pass --allow-unpublished)",
            entry.image
        )));
    }
    match opts.prefix.as_deref() {
        None => Ok(entry.image.clone()),
        Some(p) => {
            held_at(entry, minor, p).map_err(err)?;
            let at = recorded_as(entry, &mcapi_repository(p)).expect("held_at checked it");
            Ok(entry.at_repository(at).image)
        }
    }
}

/// Fails (one line) unless `e` is recorded at `<prefix>/openstack-cloud-controller-manager`.
fn held_at(e: &Entry, minor: Minor, prefix: &str) -> Result<(), String> {
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

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::BTreeMap;

    fn entry() -> Entry {
        let d = format!("sha256:{}", "a".repeat(64));
        Entry {
            image: format!(
                "r.example/occm/openstack-cloud-controller-manager:v1.34.1-occmforge.1@{d}"
            ),
            repository: "r.example/occm/openstack-cloud-controller-manager".into(),
            tag: "v1.34.1-occmforge.1".into(),
            digest: d.clone(),
            published: true,
            mirrors: vec!["cloud.example/magnum/openstack-cloud-controller-manager".into()],
            upstream_tag: "v1.34.1".into(),
            upstream_commit: "c".repeat(40),
            patch_series_sha256: "d".repeat(64),
            patches: vec![],
            already_upstream: vec![],
            platforms: vec!["linux/amd64".into()],
            manifests: BTreeMap::new(),
            sbom: BTreeMap::new(),
            provenance: None,
            go_version: "1.25.1".into(),
            base_image: "static".into(),
            base_digest: None,
            source_date_epoch: 0,
            built_at: "2026-11-29T00:00:00Z".into(),
            inputs: None,
            accepted: false,
            accepted_scenarios: vec![],
            referrers: None,
        }
    }

    #[test]
    fn magnum_tag_needs_a_prefix_that_holds_the_image() {
        let e = entry();
        let m: Minor = "1.34".parse().unwrap();
        let with = |prefix: &str| RenderOptions {
            prefix: Some(prefix.into()),
            ..RenderOptions::default()
        };
        let out = render_with(
            Format::MagnumTag,
            &[(m, &e)],
            &with("cloud.example/magnum/"),
        )
        .unwrap();
        assert_eq!(
            out.text,
            format!("cloud_provider_tag=v1.34.1-occmforge.1@{}\n", e.digest)
        );
        let err = render_with(Format::MagnumTag, &[(m, &e)], &with("other.example/x"))
            .unwrap_err()
            .to_string();
        assert!(
            err.contains(
                "other.example/x/openstack-cloud-controller-manager does not hold the image"
            ),
            "{err}"
        );
        assert!(!err.contains('\n'));
        let err = render_with(Format::MagnumTag, &[(m, &e)], &RenderOptions::default())
            .unwrap_err()
            .to_string();
        assert!(err.contains("needs --prefix"), "{err}");
    }

    #[test]
    fn magnum_label_is_refused_unless_the_operator_patched_magnum_cluster_api() {
        let e = entry();
        let m: Minor = "1.34".parse().unwrap();
        let err = render(Format::MagnumLabel, &[(m, &e)], false)
            .unwrap_err()
            .to_string();
        assert!(err.contains("silently run the upstream image"), "{err}");
        let ok = render_with(
            Format::MagnumLabel,
            &[(m, &e)],
            &RenderOptions {
                patched_magnum_cluster_api: true,
                ..RenderOptions::default()
            },
        )
        .unwrap();
        assert_eq!(ok.text, format!("cloud_provider_image={}\n", e.image));
    }
}
