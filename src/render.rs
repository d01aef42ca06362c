//! `occm-forge render`: what Magnum, Helm and Atmosphere need, from digest-manifest entries.
//!
//! - `magnum-label`: `cloud_provider_image=<repo>:<tag>@sha256:<hex>` — the full-image label a
//!   magnum-cluster-api change would read (shared notes, consumers §5.3/§5.4).
//! - `magnum-prefix-tag`: `container_infra_prefix=<prefix>` and `cloud_provider_tag=<tag>@sha256:<hex>`,
//!   which works with today's magnum-cluster-api: it renders `<prefix>/openstack-cloud-controller-manager`
//!   and passes the tag through verbatim. The prefix moves *every* cluster image (a warning says so).
//! - `helm-values`: `image.repository` and `image.tag: "<tag>@sha256:<hex>"` for the OCCM chart, whose
//!   DaemonSet renders `{{ .Values.image.repository }}:{{ default .Chart.AppVersion .Values.image.tag }}`
//!   (it has no digest field).
//! - `atmosphere-vars`: `openstack_cloud_controller_manager_<major>_<minor>: "{{ atmosphere_image_prefix }}<image>"`,
//!   the form of Atmosphere's `_atmosphere_images` (its TestImageHasPrefix requires the prefix).

use std::fmt;
use std::str::FromStr;

use crate::config::Minor;
use std::path::Path;

use crate::digest_manifest::{DigestManifest, Entry};

/// The last path segment magnum-cluster-api gives the OCCM image under `container_infra_prefix`.
pub const MCAPI_IMAGE_NAME: &str = "openstack-cloud-controller-manager";

/// An output format.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Format {
    /// `cloud_provider_image=…`.
    MagnumLabel,
    /// `container_infra_prefix=…` + `cloud_provider_tag=…`.
    MagnumPrefixTag,
    /// Helm values YAML.
    HelmValues,
    /// Atmosphere vars YAML.
    AtmosphereVars,
}

impl FromStr for Format {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s {
            "magnum-label" => Ok(Format::MagnumLabel),
            "magnum-prefix-tag" => Ok(Format::MagnumPrefixTag),
            "helm-values" => Ok(Format::HelmValues),
            "atmosphere-vars" => Ok(Format::AtmosphereVars),
            _ => Err(format!(
                "unknown format `{s}` (magnum-label, magnum-prefix-tag, helm-values, atmosphere-vars)"
            )),
        }
    }
}

impl fmt::Display for Format {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Format::MagnumLabel => "magnum-label",
            Format::MagnumPrefixTag => "magnum-prefix-tag",
            Format::HelmValues => "helm-values",
            Format::AtmosphereVars => "atmosphere-vars",
        })
    }
}

/// A rendering failure.
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

/// Renders `entries` in `format`. With more than one entry, each block is introduced by a
/// `# <minor>` comment (and YAML documents are separated by `---`); Atmosphere vars form one
/// YAML map. Unpublished entries are refused unless `allow_unpublished`.
pub fn render(
    format: Format,
    entries: &[(Minor, &Entry)],
    allow_unpublished: bool,
) -> Result<Rendered, RenderError> {
    let mut out = Rendered::default();
    let many = entries.len() > 1;
    for (i, (minor, e)) in entries.iter().enumerate() {
        let err = |message: String| RenderError {
            minor: *minor,
            message,
        };
        if !e.published && !allow_unpublished {
            return Err(err(format!(
                "{} was recorded without --push; publish it first (or pass --allow-unpublished)",
                e.image
            )));
        }
        let pinned_tag = format!("{}@{}", e.tag, e.digest);
        let block = match format {
            Format::MagnumLabel => format!("cloud_provider_image={}:{pinned_tag}\n", e.repository),
            Format::MagnumPrefixTag => {
                let (prefix, name) = e
                    .repository
                    .rsplit_once('/')
                    .ok_or_else(|| err(format!("repository {} has no prefix", e.repository)))?;
                if name != MCAPI_IMAGE_NAME {
                    return Err(err(format!(
                        "repository {} must end in /{MCAPI_IMAGE_NAME}: magnum-cluster-api renders <container_infra_prefix>/{MCAPI_IMAGE_NAME}",
                        e.repository
                    )));
                }
                if !out.warnings.iter().any(|w| w.contains(prefix)) {
                    out.warnings.push(format!(
                        "container_infra_prefix={prefix} moves every image of the cluster to {prefix}/<name>, not only OCCM; mirror the others there first"
                    ));
                }
                format!("container_infra_prefix={prefix}\ncloud_provider_tag={pinned_tag}\n")
            }
            Format::HelmValues => format!(
                "image:\n  repository: {}\n  tag: \"{pinned_tag}\"\n",
                e.repository
            ),
            Format::AtmosphereVars => format!(
                "openstack_cloud_controller_manager_{}_{}: \"{{{{ atmosphere_image_prefix }}}}{}\"\n",
                minor.major, minor.minor, e.image
            ),
        };
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
