//! `occm-forge render`: what magnum-cluster-api, Helm and Atmosphere read, from digest-manifest
//! entries, and the rewrite of a running cluster's ClusterResourceSet Secret. Every output is
//! held against what the consumer's code really does (shared notes, consumers §1 and §6; file:line
//! are magnum-cluster-api v0.36.6, the same in v0.38.1). One file per format:
//!
//! - [`magnum`]: `magnum-tag`, `magnum-prefix-tag` and `magnum-label` (cluster labels);
//! - [`helm`]: `helm-values` (the OCCM chart's values);
//! - [`atmosphere`]: `atmosphere-vars` (`atmosphere_image_overrides:`);
//! - [`crs_secret`]: `crs-secret`, which rewrites a Secret read from stdin rather than rendering
//!   entries alone.
//!
//! The formats rendered from entries are the closed set [`EntryFormat`]; [`Format`] is what
//! `--format` names, the entry formats and `crs-secret`. Each name is written once, in
//! [`EntryFormat`]'s derive or [`CRS_SECRET`].

pub mod atmosphere;
pub mod crs_secret;
pub mod helm;
pub mod magnum;
pub mod skew;

use std::fmt;
use std::path::Path;
use std::str::FromStr;

use crate::base::reference::RepositoryName;
use crate::config::Minor;
use crate::digest_manifest::{DigestManifest, Entry};

pub use magnum::{MCAPI_IMAGE_NAME, PREFIX_MOVES, mcapi_repository};

/// A format rendered from digest-manifest entries. Names (`--format`) are the variants in
/// kebab-case.
#[derive(
    Debug,
    Clone,
    Copy,
    PartialEq,
    Eq,
    strum::EnumString,
    strum::Display,
    strum::IntoStaticStr,
    strum::VariantArray,
)]
#[strum(serialize_all = "kebab-case")]
pub enum EntryFormat {
    /// `cloud_provider_tag=…` alone, for a cluster whose prefix already holds the image.
    MagnumTag,
    /// `container_infra_prefix=…` + `cloud_provider_tag=…`.
    MagnumPrefixTag,
    /// `cloud_provider_image=…` (only for a patched magnum-cluster-api).
    MagnumLabel,
    /// Helm values YAML.
    HelmValues,
    /// Atmosphere vars YAML under `atmosphere_image_overrides:`.
    AtmosphereVars,
}

/// The name of the Secret rewrite ([`crs_secret`]).
pub const CRS_SECRET: &str = "crs-secret";

/// What `--format` names.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Format {
    /// Rendered from entries.
    Entries(EntryFormat),
    /// The ClusterResourceSet Secret of a running cluster with OCCM's image replaced.
    CrsSecret,
}

impl Format {
    /// Every name, in the order `--help` lists them.
    pub fn names() -> Vec<&'static str> {
        <EntryFormat as strum::VariantArray>::VARIANTS
            .iter()
            .map(|f| <&'static str>::from(*f))
            .chain(std::iter::once(CRS_SECRET))
            .collect()
    }
}

impl FromStr for Format {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        if s == CRS_SECRET {
            return Ok(Format::CrsSecret);
        }
        s.parse::<EntryFormat>()
            .map(Format::Entries)
            .map_err(|_| format!("unknown format `{s}` ({})", Format::names().join(", ")))
    }
}

impl fmt::Display for Format {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Format::Entries(e) => e.fmt(f),
            Format::CrsSecret => f.write_str(CRS_SECRET),
        }
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
/// Errors: [`crate::pipeline::Error::Usage`] when the manifest has no entry for `minor`, or none at all.
pub fn select<'a>(
    manifest: &'a DigestManifest,
    path: &Path,
    minor: Option<Minor>,
) -> Result<Vec<(Minor, &'a Entry)>, crate::pipeline::Error> {
    let entries: Vec<(Minor, &Entry)> = match minor {
        Some(minor) => {
            let e = manifest.images.get(&minor).ok_or_else(|| {
                crate::pipeline::Error::Usage(format!("{}: no entry for {minor}", path.display()))
            })?;
            vec![(minor, e)]
        }
        None => manifest.images.iter().map(|(m, e)| (*m, e)).collect(),
    };
    if entries.is_empty() {
        return Err(crate::pipeline::Error::Usage(format!(
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
    format: EntryFormat,
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

/// Renders `entries` in `format`. With more than one entry, each block is introduced by a
/// `# <minor>` comment (and Helm values documents are separated by `---`); Atmosphere vars form
/// one YAML map. Unpublished entries are refused unless `allow_unpublished`; `magnum-label`
/// unless `patched_magnum_cluster_api`; `magnum-tag` without a prefix that holds the image.
pub fn render_with(
    format: EntryFormat,
    entries: &[(Minor, &Entry)],
    opts: &RenderOptions,
) -> Result<Rendered, RenderError> {
    let mut out = Rendered::default();
    let many = entries.len() > 1;
    if format == EntryFormat::AtmosphereVars {
        out.text.push_str(atmosphere::HEADER);
    }
    for (i, (minor, e)) in entries.iter().enumerate() {
        let block =
            render_entry(format, *minor, e, opts, &mut out.warnings).map_err(|message| {
                RenderError {
                    minor: *minor,
                    message,
                }
            })?;
        if many && format != EntryFormat::AtmosphereVars {
            if i > 0 && format == EntryFormat::HelmValues {
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
    format: EntryFormat,
    minor: Minor,
    e: &Entry,
    opts: &RenderOptions,
    warnings: &mut Vec<String>,
) -> Result<String, String> {
    if format == EntryFormat::MagnumLabel && !opts.patched_magnum_cluster_api {
        return Err(magnum::LABEL_REFUSED.into());
    }
    refuse_unpublished(e, opts)?;
    match format {
        EntryFormat::MagnumLabel => Ok(magnum::label(e)),
        EntryFormat::MagnumTag => magnum::tag(minor, e, opts),
        EntryFormat::MagnumPrefixTag => magnum::prefix_tag(minor, e, opts, warnings),
        EntryFormat::HelmValues => Ok(helm::values(e)),
        EntryFormat::AtmosphereVars => Ok(atmosphere::vars(minor, e, warnings)),
    }
}

/// Refuses an entry recorded without `--push` unless `opts.allow_unpublished`.
fn refuse_unpublished(e: &Entry, opts: &RenderOptions) -> Result<(), String> {
    if !e.published && !opts.allow_unpublished {
        return Err(format!(
            "{} was recorded without --push; publish it first (or pass --allow-unpublished)",
            e.image
        ));
    }
    Ok(())
}

/// `<tag>@<digest>`: the tag as magnum-cluster-api and the chart pass it through, pinned.
fn pinned_tag(e: &Entry) -> String {
    format!("{}@{}", e.tag, e.digest)
}

/// The full image reference to run for `entry`: `<repository>:<tag>@<digest>` at the entry's
/// own repository, or, with `opts.prefix`, at `<prefix>/openstack-cloud-controller-manager`, which
/// must be recorded (its repository or a mirror). Unpublished entries are refused unless
/// `opts.allow_unpublished`. Used by `crs-secret` and `clusters`.
pub fn pinned_image(
    minor: Minor,
    entry: &Entry,
    opts: &RenderOptions,
) -> Result<String, RenderError> {
    let err = |message: String| RenderError { minor, message };
    refuse_unpublished(entry, opts).map_err(err)?;
    match opts.prefix.as_deref() {
        None => Ok(entry.image.clone()),
        Some(p) => {
            magnum::held_at(entry, minor, p).map_err(err)?;
            let at = recorded_as(entry, &mcapi_repository(p)).expect("held_at checked it");
            Ok(entry.at_repository(at).image)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    fn entry() -> Entry {
        let mut e = crate::testing::entry(
            "1.34",
            "r.example/occm/openstack-cloud-controller-manager",
            'a',
        );
        e.mirrors = vec!["cloud.example/magnum/openstack-cloud-controller-manager".into()];
        e
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
            EntryFormat::MagnumTag,
            &[(m, &e)],
            &with("cloud.example/magnum/"),
        )
        .unwrap();
        assert_eq!(
            out.text,
            format!("cloud_provider_tag=v1.34.1-occmforge.1@{}\n", e.digest)
        );
        let err = render_with(EntryFormat::MagnumTag, &[(m, &e)], &with("other.example/x"))
            .unwrap_err()
            .to_string();
        assert!(
            err.contains(
                "other.example/x/openstack-cloud-controller-manager does not hold the image"
            ),
            "{err}"
        );
        assert!(!err.contains('\n'));
        // crs-secret's image at a prefix: a scheme is refused as such, not as a missing copy.
        let err = pinned_image(m, &e, &with("https://cloud.example/magnum"))
            .unwrap_err()
            .to_string();
        assert!(
            err.contains("without a scheme") && !err.contains("copy it there"),
            "{err}"
        );
        let err = render_with(
            EntryFormat::MagnumTag,
            &[(m, &e)],
            &RenderOptions::default(),
        )
        .unwrap_err()
        .to_string();
        assert!(err.contains("needs --prefix"), "{err}");
    }

    #[test]
    fn magnum_label_is_refused_unless_the_operator_patched_magnum_cluster_api() {
        let e = entry();
        let m: Minor = "1.34".parse().unwrap();
        let err = render(EntryFormat::MagnumLabel, &[(m, &e)], false)
            .unwrap_err()
            .to_string();
        assert!(err.contains("silently run the upstream image"), "{err}");
        let ok = render_with(
            EntryFormat::MagnumLabel,
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

impl crate::pipeline::Failure for RenderError {
    /// 2: the entry cannot be rendered as asked.
    fn exit_code(&self) -> u8 {
        2
    }
}

crate::command_failure!(RenderError, crs_secret::CrsError);
