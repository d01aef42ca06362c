//! `images.toml`: the build inputs people edit.
//!
//! The file names the upstream repository, the target image repository, the tag scheme, the
//! digest-manifest path, a catalogue of patches, optional `[defaults]` for the keys minors share
//! (platforms, test packages, required tests, the patch series, the base; a minor's own key
//! replaces the default outright, like ko's `defaultPlatforms`) and one table per Kubernetes
//! minor. Every key is checked: unknown or misspelt keys and invalid values are errors that name
//! the file, line and column. See docs/configuration.md ("images.toml reference") for the full
//! key list.
//!
//! [`raw`] holds the serde shapes and the merge of `[defaults]`; [`check`] the validation rules.

use std::collections::BTreeMap;
use std::fmt;
use std::path::{Path, PathBuf};
use std::str::FromStr;

use serde::Deserialize;

mod check;
mod raw;

/// The default upstream repository.
pub const DEFAULT_UPSTREAM: &str = "https://github.com/kubernetes/cloud-provider-openstack";
/// The default tag scheme: the upstream tag plus a downstream revision, e.g. `v1.34.1-occmforge.1`.
pub const DEFAULT_TAG_SCHEME: &str = "{upstream_tag}-occmforge.{revision}";
/// The default digest-manifest path, relative to `images.toml`.
pub const DEFAULT_DIGEST_MANIFEST: &str = "images.lock.yaml";
/// The base-image keyword for the built-in offline base (no base layers pulled).
pub const STATIC_BASE: &str = "static";

/// An error in `images.toml`: always one line, naming the file and, where known, line and column.
#[derive(Debug, thiserror::Error)]
#[error("{file}{location}: {message}")]
pub struct ConfigError {
    /// The file that holds the error.
    pub file: PathBuf,
    /// `:line:column` (1-based) or empty when the position is unknown.
    pub location: String,
    /// What is wrong, in one line.
    pub message: String,
}

/// A Kubernetes minor such as `1.34`, ordered numerically (`1.9 < 1.10`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Minor {
    /// Major version, always 1 today.
    pub major: u32,
    /// Minor version.
    pub minor: u32,
}

impl Minor {
    /// The minor an image reference's tag names ([`Minor::of_version`] of the tag:
    /// `…:v1.34.1-occmforge.1@sha256:…` gives 1.34); `None` without a tag or a version in it.
    pub fn of_image(image: &str) -> Option<Minor> {
        image
            .parse::<crate::base::reference::ImageRef>()
            .ok()?
            .tag
            .as_deref()
            .and_then(Minor::of_version)
    }

    /// The minor of a Kubernetes version or of an image tag that starts with one: `v1.34.1`,
    /// `1.34.1`, `v1.34.1-occmforge.1`, `v1.35.0-rc.1`, `v1.34` give 1.34. `None` for anything
    /// else (`latest`, `main`, `sha-abc`).
    pub fn of_version(version: &str) -> Option<Minor> {
        let v = version.strip_prefix('v').unwrap_or(version);
        let mut parts = v.splitn(3, '.');
        let major = parts.next()?;
        let minor: String = parts
            .next()?
            .chars()
            .take_while(char::is_ascii_digit)
            .collect();
        if major.is_empty() || !major.bytes().all(|b| b.is_ascii_digit()) || minor.is_empty() {
            return None;
        }
        Some(Minor {
            major: major.parse().ok()?,
            minor: minor.parse().ok()?,
        })
    }
}

impl FromStr for Minor {
    type Err = String;

    /// Parses `1.34` or `v1.34`; a patch level (`1.34.1`) is refused.
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let t = s.strip_prefix('v').unwrap_or(s);
        let bad = || format!("`{s}` is not a Kubernetes minor (expected the form 1.34)");
        let (a, b) = t.split_once('.').ok_or_else(bad)?;
        if let Some((minor, _)) = b.split_once('.')
            && !a.is_empty()
            && !minor.is_empty()
        {
            return Err(format!(
                "`{s}` names a patch release; give the Kubernetes minor ({a}.{minor})"
            ));
        }
        if a.is_empty() || b.is_empty() {
            return Err(bad());
        }
        Ok(Minor {
            major: a.parse().map_err(|_| bad())?,
            minor: b.parse().map_err(|_| bad())?,
        })
    }
}

impl fmt::Display for Minor {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}.{}", self.major, self.minor)
    }
}

impl serde::Serialize for Minor {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_str(self)
    }
}

impl<'de> Deserialize<'de> for Minor {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let s = String::deserialize(d)?;
        s.parse().map_err(serde::de::Error::custom)
    }
}

/// A target platform `os/arch[/variant]`, as in the OCI image index `platform` object
/// (OCI image-spec `image-index.md`).
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Platform {
    /// GOOS / OCI `os`, e.g. `linux`.
    pub os: String,
    /// GOARCH / OCI `architecture`, e.g. `amd64`.
    pub arch: String,
    /// OCI `variant`, e.g. `v7` for `arm`; `v8` is implied for `arm64` (see [`Platform::variant`]).
    pub variant: Option<String>,
}

impl Platform {
    /// The OCI `variant` to write into the index and the config: the explicit one, or `v8` for
    /// `arm64` so that index and config always agree (image-spec PR #650; containers/image#898).
    pub fn variant(&self) -> Option<&str> {
        match (&self.variant, self.arch.as_str()) {
            (Some(v), _) => Some(v),
            (None, "arm64") => Some("v8"),
            _ => None,
        }
    }

    /// Whether an OCI platform (an index entry's or a config's `os`, `architecture`, `variant`)
    /// is this platform. `arm64` with no variant and `arm64/v8` are the same platform.
    pub fn matches(&self, os: &str, arch: &str, variant: Option<&str>) -> bool {
        os == self.os
            && arch == self.arch
            && (variant == self.variant() || (self.variant.is_none() && variant.is_none()))
    }

    /// The `os/arch[/variant]` name occm-forge records for an OCI platform: an implied variant
    /// (`v8` of `arm64`) is left out, as in images.toml.
    pub fn name_of(os: &str, arch: &str, variant: Option<&str>) -> String {
        match variant.filter(|v| !(arch == "arm64" && *v == "v8")) {
            Some(v) => format!("{os}/{arch}/{v}"),
            None => format!("{os}/{arch}"),
        }
    }

    /// `GOARM` for `linux/arm/v6` and `linux/arm/v7`, else `None`.
    pub fn goarm(&self) -> Option<&str> {
        if self.arch == "arm" {
            self.variant.as_deref().map(|v| v.trim_start_matches('v'))
        } else {
            None
        }
    }
}

impl FromStr for Platform {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let parts: Vec<&str> = s.split('/').collect();
        const ARCHES: &[&str] = &["amd64", "arm64", "arm", "ppc64le", "s390x", "riscv64"];
        let (os, arch, variant) = match parts.as_slice() {
            [os, arch] => (*os, *arch, None),
            [os, arch, v] => (*os, *arch, Some((*v).to_string())),
            _ => {
                return Err(format!(
                    "platform `{s}` is not of the form os/arch[/variant]"
                ));
            }
        };
        if os != "linux" {
            return Err(format!("platform `{s}`: only linux is supported"));
        }
        if !ARCHES.contains(&arch) {
            return Err(format!(
                "platform `{s}`: unknown architecture `{arch}` (known: {})",
                ARCHES.join(", ")
            ));
        }
        match (arch, variant.as_deref()) {
            (_, None) | ("arm", Some("v6" | "v7")) | ("arm64", Some("v8")) => {}
            (_, Some(v)) => return Err(format!("platform `{s}`: unsupported variant `{v}`")),
        }
        Ok(Platform {
            os: os.to_string(),
            arch: arch.to_string(),
            variant,
        })
    }
}

impl fmt::Display for Platform {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/{}", self.os, self.arch)?;
        if let Some(v) = &self.variant {
            write!(f, "/{v}")?;
        }
        Ok(())
    }
}

impl<'de> Deserialize<'de> for Platform {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let s = String::deserialize(d)?;
        s.parse().map_err(serde::de::Error::custom)
    }
}

impl serde::Serialize for Platform {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_str(self)
    }
}

/// The whole `images.toml`, validated, with relative paths resolved against its directory.
#[derive(Debug, Clone)]
pub struct Config {
    /// Where `images.toml` was read from.
    pub path: PathBuf,
    /// Upstream git URL or path (`upstream`).
    pub upstream: String,
    /// Target image repository without tag, e.g. `registry.example.internal/occm/openstack-cloud-controller-manager`.
    pub repository: String,
    /// Tag scheme with `{upstream_tag}`, `{revision}`, `{minor}` and `{series}` placeholders.
    pub tag_scheme: String,
    /// The digest manifest (`digest_manifest`), absolute.
    pub digest_manifest: PathBuf,
    /// Directory holding the patch files (`patches_dir`), absolute.
    pub patches_dir: PathBuf,
    /// Registries (`host[:port]`) reached over plain HTTP (`[registry] insecure`).
    pub insecure_registries: Vec<String>,
    /// Extra CA certificates (PEM) for registry TLS (`[registry] ca_files`), absolute.
    pub ca_files: Vec<PathBuf>,
    /// Patch catalogue: file name → what it fixes and which tests guard it.
    pub patches: BTreeMap<String, PatchInfo>,
    /// What `accept` builds besides upstream (`[accept]`).
    pub cluster_api: ClusterApi,
    /// The magnum-cluster-api release whose renderer `accept` runs (`[accept]
    /// magnum_cluster_api`, default [`DEFAULT_MAGNUM_CLUSTER_API`]): the chart it compiles in
    /// gives OCCM its RBAC, and S6 writes the Secret it renders.
    pub magnum_cluster_api: String,
    /// One entry per Kubernetes minor.
    pub minors: BTreeMap<Minor, MinorConfig>,
}

/// The Cluster API release `accept` runs its remediation scenario with (`[accept] cluster_api`,
/// `cluster_api_go`): built through the Go module proxy into the cache, once for every minor.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct ClusterApi {
    /// Release of `sigs.k8s.io/cluster-api`, e.g. `v1.13.2`.
    pub version: String,
    /// Go version it is built with (`GOTOOLCHAIN=go<go>`), e.g. `1.25.0`: the `go` directive of
    /// its go.mod.
    pub go: String,
}

/// The Cluster API release magnum-cluster-api 0.38.1 pins (`hack/setup-capo.sh`,
/// `devstack/plugin.sh`; Atmosphere's main branch too) and the `go` directive of its go.mod.
pub const DEFAULT_CLUSTER_API: (&str, &str) = ("v1.13.2", "1.25.0");

/// The magnum-cluster-api release `accept` holds OCCM against by default: the newest on PyPI on
/// 2026-12-04, which compiles in chart 2.35.0 and gives 1.35 to 1.37 clusters upstream's v1.35.0.
pub const DEFAULT_MAGNUM_CLUSTER_API: &str = "0.38.2";

impl Default for ClusterApi {
    fn default() -> Self {
        ClusterApi {
            version: DEFAULT_CLUSTER_API.0.into(),
            go: DEFAULT_CLUSTER_API.1.into(),
        }
    }
}

/// `[patches."<file>"]`: what a fix patch fixes and which regression tests guard it.
#[derive(Debug, Clone, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct PatchInfo {
    /// One line: the bug this patch fixes (with the upstream issue).
    pub fixes: String,
    /// Go test names (`TestX` or `TestX/sub`) that fail without this patch and pass with it.
    pub guarded_by: Vec<String>,
    /// The acceptance scenarios (`S1`…`S8`) that show the bug this patch fixes. Where a
    /// minor's series does not carry the patch (upstream has the fix), `accept` expects the
    /// unpatched control to pass them too. Empty: none named.
    #[serde(default)]
    pub shown_by: Vec<String>,
    /// Where each `shown_by` name is in images.toml (`:line:column`, one per name, in order),
    /// for [`Config::check_shown_by`].
    #[serde(skip)]
    pub shown_by_at: Vec<String>,
}

/// `[minors."1.34"]` with `[defaults]` applied: everything needed to build one Kubernetes minor.
#[derive(Debug, Clone, PartialEq)]
pub struct MinorConfig {
    /// Upstream release tag, e.g. `v1.34.1`.
    pub upstream_tag: String,
    /// The 40-hex commit the tag must point at.
    pub commit: String,
    /// Go toolchain version (upstream Dockerfile `GOLANG_IMAGE`), e.g. `1.25.1`; run as `GOTOOLCHAIN=go<version>`.
    pub go: String,
    /// Base image: `static` (built in, offline) or a reference pinned by digest (`name:tag@sha256:<hex>`).
    pub base: String,
    /// Target platforms, e.g. `["linux/amd64", "linux/arm64"]`.
    pub platforms: Vec<Platform>,
    /// Downstream revision used by the tag scheme; bump it whenever the patch series changes.
    pub revision: u32,
    /// The patch series, applied in order; file names under `patches_dir`.
    pub patches: Vec<String>,
    /// Go packages to test, e.g. `./pkg/openstack/`.
    pub test_packages: Vec<String>,
    /// Tests that must run and pass (in addition to every fix patch's `guarded_by`).
    pub required_tests: Vec<String>,
    /// The minor's end of life (the Kubernetes release calendar, kubernetes.io/releases), as
    /// information only: a minor past it still builds, and `build` and `upstream check` say so
    /// once; `None` when images.toml gives none. Not a build input.
    pub end_of_life: Option<time::Date>,
    /// Go module requirements set in upstream's go.mod after the patch series: module path →
    /// version (`"k8s.io/kubernetes" = "v1.31.14"`), for a dependency with a known fix or one
    /// the module proxy refuses at upstream's version. A module upstream replaces gets its
    /// replacement's version. Empty: upstream's go.mod as it is. A build input (it binds the
    /// tag); docs/building.md, "Dependency overrides".
    pub go_overrides: BTreeMap<String, String>,
    /// Whether `upstream check` and the watch job propose newer Go releases for this minor
    /// ([`GoPolicy`]). Not a build input.
    pub go_policy: GoPolicy,
}

/// images.toml `go_policy`: what `upstream check` does about a minor whose Go has a newer
/// release or is out of support (docs/building.md, "Go versions").
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum GoPolicy {
    /// Propose it (exit 11; the watch job pins `--go current`). The default.
    #[default]
    Propose,
    /// Keep upstream's Go: a downstream bump declined for good; `upstream check` says so as
    /// information and proposes nothing.
    Upstream,
}

impl MinorConfig {
    /// Whether the minor's end of life lies before `today` (UTC); `false` without a date.
    pub fn past_end_of_life(&self, today: time::Date) -> bool {
        self.end_of_life.is_some_and(|d| d < today)
    }

    /// True when `base` is the built-in static base.
    pub fn is_static_base(&self) -> bool {
        self.base == STATIC_BASE
    }
}

/// The values a tag scheme is rendered from.
#[derive(Debug, Clone)]
pub struct TagInputs<'a> {
    /// Upstream tag, e.g. `v1.34.1`.
    pub upstream_tag: &'a str,
    /// Downstream revision.
    pub revision: u32,
    /// Kubernetes minor.
    pub minor: Minor,
    /// sha256 hex of the patch series (the first 12 characters are used for `{series}`).
    pub series_sha256: &'a str,
}

/// Renders a tag scheme. Unknown placeholders are rejected by [`load`], so this cannot fail.
pub fn render_tag(scheme: &str, inputs: &TagInputs<'_>) -> String {
    scheme
        .replace("{upstream_tag}", inputs.upstream_tag)
        .replace("{revision}", &inputs.revision.to_string())
        .replace("{minor}", &inputs.minor.to_string())
        .replace(
            "{series}",
            &inputs.series_sha256[..12.min(inputs.series_sha256.len())],
        )
}

/// Reads and validates `images.toml`.
///
/// Errors: unreadable file; TOML syntax; unknown or misspelt keys; a minor key that is not
/// `1.NN`; a commit that is not 40 hex characters; a Go version that is not `1.N[.N]`; a tag
/// scheme without `{upstream_tag}` and one of `{revision}`/`{series}`, or one that renders to an
/// invalid tag or to the upstream tag; an empty platform, patch or test-package list entry; a
/// base that is not a reference or whose digest is not `sha256:<64 hex>`; a patch named in a
/// series or in `[patches]` that is not a file in `patches_dir`. Every error names
/// `file:line:column`; an error in a value a minor inherits from `[defaults]` points at the
/// `[defaults]` line.
pub fn load(path: &Path) -> Result<Config, ConfigError> {
    let text = std::fs::read_to_string(path).map_err(|e| ConfigError {
        file: path.to_path_buf(),
        location: String::new(),
        message: format!("cannot read: {e}"),
    })?;
    check::parse_checked(path, &text, true)
}

/// Parses `images.toml` text; `path` is used for messages and to resolve relative paths. Patch
/// files are not looked for (see [`load`]).
pub fn parse(path: &Path, text: &str) -> Result<Config, ConfigError> {
    check::parse_checked(path, text, false)
}

impl Config {
    /// Fails unless every `[patches."<file>"].shown_by` names one of `scenarios` (the
    /// acceptance's, [`crate::pipeline::acceptance::Acceptance::scenarios`]; given by the command layer,
    /// which loads images.toml once for every command).
    ///
    /// Errors: `images.toml:line:column: patches."<file>".shown_by `S9` is not an acceptance
    /// scenario (S1 to S8)`.
    pub fn check_shown_by(&self, scenarios: &[String]) -> Result<(), ConfigError> {
        for (name, info) in &self.patches {
            if let Some((i, bad)) = info
                .shown_by
                .iter()
                .enumerate()
                .find(|(_, s)| !scenarios.contains(s))
            {
                let range = match (scenarios.first(), scenarios.last()) {
                    (Some(first), Some(last)) => format!(" ({first} to {last})"),
                    _ => String::new(),
                };
                return Err(ConfigError {
                    file: self.path.clone(),
                    location: info.shown_by_at.get(i).cloned().unwrap_or_default(),
                    message: format!(
                        "patches.\"{name}\".shown_by `{bad}` is not an acceptance scenario{range}"
                    ),
                });
            }
        }
        Ok(())
    }

    /// The tests that must run and pass for a minor: its `required_tests` plus the `guarded_by`
    /// tests of every fix patch in its series, each once, in that order.
    pub fn required_tests(&self, m: &MinorConfig) -> Vec<String> {
        let mut required = m.required_tests.clone();
        let guards = m
            .patches
            .iter()
            .filter_map(|p| self.patch_info(p))
            .flat_map(|i| &i.guarded_by);
        for t in guards {
            if !required.contains(t) {
                required.push(t.clone());
            }
        }
        required
    }

    /// The `[patches."<file>"]` entry of a series entry: its own, or for a minor's variant of a
    /// shared patch (`<stem>.k8s-<minor>.patch`) the shared patch's.
    pub fn patch_info(&self, name: &str) -> Option<&PatchInfo> {
        self.patches
            .get(name)
            .or_else(|| self.patches.get(catalogue_name(name).as_ref()))
    }

    /// Where upstream is fetched from: `source` (`--source`) when given, else `upstream`.
    pub fn fetch_url(&self, source: Option<&str>) -> String {
        source.map_or_else(|| self.upstream.clone(), str::to_string)
    }

    /// The entry for `minor`, or an error listing the minors that exist.
    pub fn minor(&self, minor: Minor) -> Result<&MinorConfig, ConfigError> {
        self.minors.get(&minor).ok_or_else(|| ConfigError {
            file: self.path.clone(),
            location: String::new(),
            message: format!(
                "unknown Kubernetes minor {minor}; {} has {}",
                self.path
                    .file_name()
                    .map(|n| n.to_string_lossy().into_owned())
                    .unwrap_or_default(),
                self.minors
                    .keys()
                    .map(ToString::to_string)
                    .collect::<Vec<_>>()
                    .join(", ")
            ),
        })
    }
}

/// The suffix of a minor's own variant of a shared patch: `<stem>.k8s-<minor>.patch`.
const VARIANT_MARK: &str = ".k8s-";

/// The name of `minor`'s own variant of the shared patch `shared`:
/// `0004-occm-fatal.patch` → `0004-occm-fatal.k8s-1.37.patch` (written by `patches export`
/// when other minors keep the shared file).
pub fn variant_name(shared: &str, minor: Minor) -> String {
    let stem = shared.strip_suffix(".patch").unwrap_or(shared);
    format!("{stem}{VARIANT_MARK}{minor}.patch")
}

/// The shared patch a file name stands for: the name itself, or for a minor's variant
/// ([`variant_name`]) the shared file's name. `[patches."<file>"]` entries are looked up by it,
/// so a variant is guarded and shown as the patch it varies.
pub fn catalogue_name(name: &str) -> std::borrow::Cow<'_, str> {
    let Some(stem) = name.strip_suffix(".patch") else {
        return std::borrow::Cow::Borrowed(name);
    };
    match stem.rsplit_once(VARIANT_MARK) {
        Some((shared, minor)) if minor.parse::<Minor>().is_ok() => {
            std::borrow::Cow::Owned(format!("{shared}.patch"))
        }
        _ => std::borrow::Cow::Borrowed(name),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn minors_are_read_off_versions_and_tags() {
        let m = |s: &str| Minor::of_version(s).map(|m| m.to_string());
        assert_eq!(m("v1.34.1").as_deref(), Some("1.34"));
        assert_eq!(m("1.35.0").as_deref(), Some("1.35"));
        assert_eq!(m("v1.34.1-occmforge.2").as_deref(), Some("1.34"));
        assert_eq!(m("v1.36.0-rc.1").as_deref(), Some("1.36"));
        assert_eq!(m("v1.9").as_deref(), Some("1.9"));
        for none in ["latest", "main", "v", "v1", "sha-1.2", "1.x.0", ".34.1"] {
            assert_eq!(m(none), None, "{none}");
        }
    }

    const GOOD: &str = r#"
repository = "registry.example.internal/occm/openstack-cloud-controller-manager"

[patches."0002-fix.patch"]
fixes = "bug"
guarded_by = ["TestFix"]

[minors."1.34"]
upstream_tag = "v1.34.1"
commit = "63ec67a04b40fee4ff43fec11c3d31f2a90c9ad2"
go = "1.25.1"
base = "static"
platforms = ["linux/amd64", "linux/arm64"]
revision = 1
patches = ["0001-test.patch", "0002-fix.patch"]
test_packages = ["./pkg/openstack/"]
"#;

    fn parse_str(s: &str) -> Result<Config, ConfigError> {
        parse(Path::new("/x/images.toml"), s)
    }

    #[test]
    fn end_of_life_is_a_date_and_only_information() {
        let with =
            |v: &str| GOOD.replace("revision = 1", &format!("revision = 1\nend_of_life = {v}"));
        let c = parse_str(&with("2026-10-27")).unwrap();
        let m = &c.minors[&"1.34".parse().unwrap()];
        assert_eq!(m.end_of_life, Some(time::macros::date!(2026 - 10 - 27)));
        assert!(m.past_end_of_life(time::macros::date!(2026 - 12 - 04)));
        assert!(!m.past_end_of_life(time::macros::date!(2026 - 10 - 27)));
        assert!(
            !parse_str(GOOD).unwrap().minors[&"1.34".parse().unwrap()]
                .past_end_of_life(time::macros::date!(2099 - 01 - 01))
        );
        let e = parse_str(&with("2026-10-27T00:00:00"))
            .unwrap_err()
            .to_string();
        assert_eq!(
            e,
            "/x/images.toml:15:15: minors.\"1.34\".end_of_life `2026-10-27T00:00:00` is not a date: give the day as YYYY-MM-DD (the Kubernetes release calendar's end of life), no time"
        );
        let e = parse_str(&with("\"2026-10-27\"")).unwrap_err().to_string();
        assert!(
            e.starts_with(
                "/x/images.toml:15:15: minors.\"1.34\".end_of_life: invalid type: string"
            ),
            "{e}"
        );
        let e = parse_str(&with("2026-02-30")).unwrap_err().to_string();
        assert!(e.starts_with("/x/images.toml:15:"), "{e}");
    }

    #[test]
    fn go_overrides_are_module_paths_and_versions_go_accepts() {
        let with = |v: &str| {
            GOOD.replace(
                "revision = 1",
                &format!("revision = 1\ngo_overrides = {{ {v} }}"),
            )
        };
        let c = parse_str(&with("\"k8s.io/kubernetes\" = \"v1.31.14\"")).unwrap();
        let m = &c.minors[&"1.34".parse().unwrap()];
        assert_eq!(m.go_overrides["k8s.io/kubernetes"], "v1.31.14");
        for ok in [
            "\"github.com/foo/bar/v2\" = \"v2.0.1\"",
            "\"github.com/Foo/bar\" = \"v1.0.0-20240101000000-abcdefabcdef\"",
            "\"github.com/foo/bar\" = \"v2.0.0+incompatible\"",
        ] {
            assert!(parse_str(&with(ok)).is_ok(), "{ok}");
        }
        for (bad, says) in [
            (
                "\"k8s.io/kubernetes\" = \"1.31.14\"",
                "is not a module version such as v1.31.14",
            ),
            (
                "\"k8s.io/kubernetes\" = \"v01.31.14\"",
                "is not a module version such as v1.31.14",
            ),
            (
                "\"K8S.io/kubernetes\" = \"v1.31.14\"",
                "is not a Go module path",
            ),
            (
                "\"k8s.io/../kubernetes\" = \"v1.31.14\"",
                "is not a Go module path",
            ),
            ("\"./local\" = \"v1.0.0\"", "is not a Go module path"),
            (
                "\"github.com/foo/bar/v2\" = \"v1.0.0\"",
                "a v1 version needs the module path without a /vN suffix",
            ),
            (
                "\"github.com/foo/bar\" = \"v2.0.0\"",
                "a v2 version needs the module path ending in /v2",
            ),
        ] {
            let e = parse_str(&with(bad)).unwrap_err().to_string();
            assert!(
                e.starts_with("/x/images.toml:15:") && e.contains(says),
                "{bad}: {e}"
            );
        }
    }

    #[test]
    fn shown_by_names_acceptance_scenarios() {
        let with = |v: &str| {
            GOOD.replace(
                "guarded_by = [\"TestFix\"]",
                &format!("guarded_by = [\"TestFix\"]\nshown_by = {v}"),
            )
        };
        let c = parse_str(&with("[\"S1\", \"S5\"]")).unwrap();
        assert_eq!(c.patches["0002-fix.patch"].shown_by, ["S1", "S5"]);
        let scenarios: Vec<String> = (1..=8).map(|n| format!("S{n}")).collect();
        c.check_shown_by(&scenarios).unwrap();
        let text = with("[\"S1\", \"S9\"]");
        let e = parse_str(&text)
            .unwrap()
            .check_shown_by(&scenarios)
            .unwrap_err()
            .to_string();
        // The position is the bad name's own, not its table's.
        let (line, column) = text
            .lines()
            .enumerate()
            .find_map(|(n, l)| l.find("\"S9\"").map(|c| (n + 1, c + 1)))
            .unwrap();
        assert_eq!(
            e,
            format!(
                "/x/images.toml:{line}:{column}: patches.\"0002-fix.patch\".shown_by `S9` is not an acceptance scenario (S1 to S8)"
            )
        );
    }

    /// A name given twice, or empty, in `guarded_by` or `shown_by` is refused at its own
    /// position (both were accepted; found by a break-it pass).
    #[test]
    fn guarded_by_and_shown_by_name_each_once_and_none_empty() {
        for (guarded_by, shown_by, says, bad) in [
            (
                "[\"TestFix\", \"TestFix\"]",
                "[]",
                "guarded_by: `TestFix` given twice",
                "\"TestFix\"]",
            ),
            (
                "[\"TestFix\", \"\"]",
                "[]",
                "guarded_by: an empty name",
                "\"\"]",
            ),
            (
                "[\"TestFix\"]",
                "[\"S1\", \"S1\"]",
                "shown_by: `S1` given twice",
                "\"S1\"]",
            ),
        ] {
            let text = GOOD.replace(
                "guarded_by = [\"TestFix\"]",
                &format!("guarded_by = {guarded_by}\nshown_by = {shown_by}"),
            );
            let e = parse_str(&text).unwrap_err().to_string();
            let (line, column) = text
                .lines()
                .enumerate()
                .find_map(|(n, l)| {
                    l.rfind(bad)
                        .filter(|_| l.contains(says.split(':').next().unwrap()))
                        .map(|c| (n + 1, c + 1))
                })
                .unwrap();
            assert_eq!(
                e,
                format!("/x/images.toml:{line}:{column}: patches.\"0002-fix.patch\".{says}"),
                "{guarded_by} {shown_by}"
            );
        }
    }

    #[test]
    fn type_and_duplicate_key_errors_name_the_key() {
        let e = parse_str(&GOOD.replace("revision = 1", "revision = \"1\"")).unwrap_err();
        assert_eq!(
            e.to_string(),
            "/x/images.toml:14:12: minors.\"1.34\".revision: invalid type: string \"1\", expected u32"
        );
        let e = parse_str(&GOOD.replace("revision = 1", "revision = 1\nrevision = 2")).unwrap_err();
        assert!(
            e.to_string()
                .starts_with("/x/images.toml:15:1: minors.\"1.34\".revision: duplicate key"),
            "{e}"
        );
        let e = parse_str(&GOOD.replace(
            "platforms = [\"linux/amd64\", \"linux/arm64\"]",
            "platforms = [\n  \"linux/amd64\",\n  3,\n]",
        ))
        .unwrap_err();
        assert!(
            e.to_string()
                .contains(": minors.\"1.34\".platforms: invalid type: integer `3`"),
            "{e}"
        );
    }

    #[test]
    fn insecure_registries_are_host_and_port() {
        for good in [
            "127.0.0.1:5000",
            "registry.example.internal",
            "reg-1:443",
            "[::1]:5000",
        ] {
            let c = parse_str(&format!("{GOOD}\n[registry]\ninsecure = [\"{good}\"]\n"));
            assert!(c.is_ok(), "{good}: {:?}", c.err());
        }
        for bad in [
            "http://127.0.0.1:5000",
            "not a host",
            "reg:port",
            "reg:0",
            "",
            "reg/x",
            "::1",
        ] {
            let e =
                parse_str(&format!("{GOOD}\n[registry]\ninsecure = [\"{bad}\"]\n")).unwrap_err();
            assert!(
                e.to_string().contains(&format!(
                    "registry.insecure entry `{bad}` must be host[:port]"
                )),
                "{bad}: {e}"
            );
        }
    }

    #[test]
    fn parses_and_resolves_paths() {
        let c = parse_str(GOOD).unwrap();
        assert_eq!(c.digest_manifest, Path::new("/x/images.lock.yaml"));
        assert_eq!(c.patches_dir, Path::new("/x/patches"));
        assert_eq!(c.upstream, DEFAULT_UPSTREAM);
        let m = c.minor("1.34".parse().unwrap()).unwrap();
        assert_eq!(m.platforms[1].variant(), Some("v8"));
    }

    #[test]
    fn misspelt_key_names_line_and_column() {
        let bad = GOOD.replace("platforms = [", "platfroms = [");
        let e = parse_str(&bad).unwrap_err().to_string();
        assert!(
            e.starts_with("/x/images.toml:13:1: unknown field `platfroms`"),
            "{e}"
        );
    }

    #[test]
    fn a_go_language_version_and_an_uppercase_repository_are_located() {
        let bad = GOOD.replace("go = \"1.25.1\"", "go = \"1.22\"");
        let e = parse_str(&bad).unwrap_err().to_string();
        assert!(
            e.starts_with(
                "/x/images.toml:11:6: minors.\"1.34\".go `1.22` is not a Go release such as 1.25.1"
            ),
            "{e}"
        );
        let bad = GOOD.replace("occm/openstack", "OCCM/openstack");
        let e = parse_str(&bad).unwrap_err().to_string();
        assert!(
            e.starts_with("/x/images.toml:2:14: repository `registry.example.internal/OCCM/"),
            "{e}"
        );
    }

    #[test]
    fn a_repository_without_a_registry_host_is_refused() {
        let bad = GOOD.replace("registry.example.internal/occm/", "occm/");
        let e = parse_str(&bad).unwrap_err().to_string();
        assert!(
            e.starts_with("/x/images.toml:2:14: repository `occm/openstack-cloud-controller-manager` names no registry host; write it in full (docker.io/occm/"),
            "{e}"
        );
        let ok = GOOD.replace("registry.example.internal/occm/", "localhost:5000/occm/");
        parse_str(&ok).unwrap();
    }

    #[test]
    fn the_cluster_api_release_defaults_to_magnum_cluster_api_s_and_is_checked() {
        assert_eq!(parse_str(GOOD).unwrap().cluster_api, ClusterApi::default());
        assert_eq!(ClusterApi::default().version, "v1.13.2");
        let own = format!("{GOOD}\n[accept]\ncluster_api = \"v1.13.6\"\n");
        let c = parse_str(&own).unwrap().cluster_api;
        assert_eq!((c.version.as_str(), c.go.as_str()), ("v1.13.6", "1.25.0"));
        let bad = format!("{GOOD}\n[accept]\ncluster_api = \"1.13\"\n");
        let e = parse_str(&bad).unwrap_err().to_string();
        assert!(
            e.contains("accept.cluster_api `1.13` must be a Cluster API release vX.Y.Z"),
            "{e}"
        );
        let bad = format!("{GOOD}\n[accept]\ncluster_api_go = \"go1.25\"\n");
        let e = parse_str(&bad).unwrap_err().to_string();
        assert!(
            e.contains("accept.cluster_api_go `go1.25` must be a Go version X.Y.Z"),
            "{e}"
        );
        let unknown = format!("{GOOD}\n[accept]\ncapi = \"v1.13.2\"\n");
        assert!(
            parse_str(&unknown)
                .unwrap_err()
                .to_string()
                .contains("unknown field `capi`")
        );
    }

    #[test]
    fn bad_commit_is_located() {
        let bad = GOOD.replace("63ec67a04b40fee4ff43fec11c3d31f2a90c9ad2", "63ec67a");
        let e = parse_str(&bad).unwrap_err().to_string();
        assert!(e.starts_with("/x/images.toml:10:10: "), "{e}");
        assert!(e.contains("not a 40-character"), "{e}");
    }

    #[test]
    fn tag_scheme_must_differ_from_upstream() {
        let bad = GOOD.replace("repository =", "tag = \"{upstream_tag}\"\nrepository =");
        let e = parse_str(&bad).unwrap_err().to_string();
        assert!(
            e.contains("must contain {upstream_tag} and {revision} or {series}"),
            "{e}"
        );
        let bad = GOOD.replace(
            "repository =",
            "tag = \"{upstream_tag}-{rev}\"\nrepository =",
        );
        assert!(
            parse_str(&bad)
                .unwrap_err()
                .to_string()
                .contains("unknown placeholder `{rev}`")
        );
    }

    #[test]
    fn minor_and_platform_parsing() {
        assert_eq!("v1.34".parse::<Minor>().unwrap().to_string(), "1.34");
        assert!("1.34.1".parse::<Minor>().is_err());
        assert!("1.9".parse::<Minor>().unwrap() < "1.10".parse::<Minor>().unwrap());
        assert!("linux/mips".parse::<Platform>().is_err());
        assert_eq!(
            "linux/arm/v7".parse::<Platform>().unwrap().goarm(),
            Some("7")
        );
        assert!("windows/amd64".parse::<Platform>().is_err());
    }

    #[test]
    fn unknown_minor_lists_known() {
        let c = parse_str(GOOD).unwrap();
        let e = c.minor("1.99".parse().unwrap()).unwrap_err().to_string();
        assert!(
            e.ends_with("unknown Kubernetes minor 1.99; images.toml has 1.34"),
            "{e}"
        );
    }

    #[test]
    fn render_tag_fills_placeholders() {
        let t = render_tag(
            "{upstream_tag}-occmforge.{revision}.{series}",
            &TagInputs {
                upstream_tag: "v1.34.1",
                revision: 2,
                minor: "1.34".parse().unwrap(),
                series_sha256: "abcdef0123456789",
            },
        );
        assert_eq!(t, "v1.34.1-occmforge.2.abcdef012345");
    }

    const WITH_DEFAULTS: &str = r#"
repository = "registry.example.internal/occm/openstack-cloud-controller-manager"

[defaults]
platforms = ["linux/amd64", "linux/arm64"]
patches = ["0001-test.patch", "0002-fix.patch"]
test_packages = ["./pkg/openstack/"]
required_tests = ["TestA"]

[minors."1.33"]
upstream_tag = "v1.33.1"
commit = "84f9746289f5ac160351c1e9ddd2ff522cfcd22e"
go = "1.24.3"
base = "static"
revision = 1
patches = ["0001-test.patch"]

[minors."1.34"]
upstream_tag = "v1.34.1"
commit = "63ec67a04b40fee4ff43fec11c3d31f2a90c9ad2"
go = "1.25.1"
base = "static"
revision = 1
"#;

    #[test]
    fn defaults_are_inherited_and_a_minors_own_key_replaces_them() {
        let c = parse_str(WITH_DEFAULTS).unwrap();
        let m33 = c.minor("1.33".parse().unwrap()).unwrap();
        let m34 = c.minor("1.34".parse().unwrap()).unwrap();
        assert_eq!(m33.patches, ["0001-test.patch"], "replaced, not merged");
        assert_eq!(m34.patches, ["0001-test.patch", "0002-fix.patch"]);
        assert_eq!(m34.platforms.len(), 2);
        assert_eq!(m33.test_packages, ["./pkg/openstack/"]);
        assert_eq!(m34.required_tests, ["TestA"]);
    }

    #[test]
    fn an_error_in_an_inherited_value_points_at_the_defaults_line() {
        let bad = WITH_DEFAULTS.replace(
            "platforms = [\"linux/amd64\", \"linux/arm64\"]",
            "platforms = [\"linux/amd64\", \"linux/amd64\"]",
        );
        let e = parse_str(&bad).unwrap_err().to_string();
        assert_eq!(
            e,
            "/x/images.toml:5:13: defaults.platforms lists linux/amd64 twice"
        );
        // The minor's own value is checked where it is written.
        let bad = WITH_DEFAULTS.replace(
            "patches = [\"0001-test.patch\"]",
            "patches = [\"0001-test.diff\"]",
        );
        let e = parse_str(&bad).unwrap_err().to_string();
        assert!(
            e.starts_with("/x/images.toml:16:11: minors.\"1.33\".patches: `0001-test.diff`"),
            "{e}"
        );
        // Unknown keys in [defaults] are errors too; per-minor facts have no default.
        let bad = WITH_DEFAULTS.replace("[defaults]\n", "[defaults]\ngo = \"1.25.1\"\n");
        let e = parse_str(&bad).unwrap_err().to_string();
        assert!(
            e.starts_with("/x/images.toml:5:1: unknown field `go`"),
            "{e}"
        );
    }

    #[test]
    fn a_key_neither_the_minor_nor_defaults_sets_is_named() {
        let bad = WITH_DEFAULTS.replace("test_packages = [\"./pkg/openstack/\"]\n", "");
        let e = parse_str(&bad).unwrap_err().to_string();
        assert!(
            e.ends_with(
                "minors.\"1.33\": missing field `test_packages` (set it there or in [defaults])"
            ),
            "{e}"
        );
    }
}
