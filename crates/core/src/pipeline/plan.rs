//! Settings resolution: images.toml, the command line and the environment merge into one
//! [`BuildPlan`] (and one set of registry settings), in one place, before any work starts —
//! ripgrep's low-args/high-args split: [`Overrides`] holds only what the user typed, the plan is
//! what the program uses. References, the base and the platforms are parsed here once.
//!
//! Precedence, highest first (as uv's settings resolution):
//!
//! | setting | command line | environment | images.toml | default |
//! |---|---|---|---|---|
//! | cache directory | `--cache-dir` | `OCCM_FORGE_CACHE`, then `XDG_CACHE_HOME/occm-forge`, `HOME/.cache/occm-forge` | — | `$TMPDIR/occm-forge` |
//! | where upstream is fetched | `--source` | — | `upstream` | GitHub |
//! | target repository | `--repository` | — | `repository` | — |
//! | base image | `--base` | — | `minors."…".base`, `[defaults] base` | — |
//! | time inside the image | — | `SOURCE_DATE_EPOCH` | — | the upstream commit time |
//! | plain-HTTP registries, CAs | `--insecure-registry`, `--ca-file` (added) | — | `[registry]` | none |
//! | credentials | `--registry-config` (alone) | `REGISTRY_AUTH_FILE`, `DOCKER_CONFIG`, … | — | anonymous |
//! | registry timeouts | `--registry-timeout`, `--registry-operation-timeout` | `OCCM_FORGE_REGISTRY_TIMEOUT`, `OCCM_FORGE_REGISTRY_OPERATION_TIMEOUT` | — | 30 s, 120 s |
//! | proxies | — | `HTTPS_PROXY`, `HTTP_PROXY`, `NO_PROXY` (Go's rules) | — | none |

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use crate::base::reference::{ImageRef, RepositoryName};
use crate::config::{self, Config, Minor, Platform};
use crate::digest_manifest::inputs::{BuildInputs, IMAGE_FORMAT};
use crate::pipeline::Error;
use crate::pipeline::go::Toolchain;
use crate::pipeline::patches::{self, PatchFile};
use crate::registry::auth::{AuthFiles, Keychains};
use crate::registry::oci::{OciRegistry, OciRegistryConfig};
use crate::registry::proxy::ProxyEnv;
use crate::registry::publish::ReferrersMode;
use crate::registry::retry::{RetryPolicy, Retrying};

/// The environment variables occm-forge reads, captured once (tests construct their own).
#[derive(Debug, Clone, Default)]
pub struct Environment {
    /// `OCCM_FORGE_CACHE`.
    pub cache: Option<PathBuf>,
    /// `XDG_CACHE_HOME`.
    pub xdg_cache_home: Option<PathBuf>,
    /// `HOME`.
    pub home: Option<PathBuf>,
    /// `SOURCE_DATE_EPOCH`, unparsed.
    pub source_date_epoch: Option<String>,
}

impl Environment {
    /// The process environment (empty values count as unset).
    pub fn current() -> Self {
        let var = |k: &str| std::env::var_os(k).filter(|v| !v.is_empty());
        Environment {
            cache: var("OCCM_FORGE_CACHE").map(PathBuf::from),
            xdg_cache_home: var("XDG_CACHE_HOME").map(PathBuf::from),
            home: var("HOME").map(PathBuf::from),
            source_date_epoch: var("SOURCE_DATE_EPOCH").map(|v| v.to_string_lossy().into_owned()),
        }
    }

    /// The cache directory: `flag` (`--cache-dir`), else `OCCM_FORGE_CACHE`, else
    /// `XDG_CACHE_HOME/occm-forge`, `HOME/.cache/occm-forge`, `$TMPDIR/occm-forge`.
    pub fn cache_dir(&self, flag: Option<&Path>) -> PathBuf {
        flag.map(Path::to_path_buf)
            .or_else(|| self.cache.clone())
            .unwrap_or_else(|| {
                self.xdg_cache_home
                    .clone()
                    .or_else(|| self.home.as_ref().map(|h| h.join(".cache")))
                    .unwrap_or_else(std::env::temp_dir)
                    .join("occm-forge")
            })
    }

    /// `SOURCE_DATE_EPOCH` in seconds, if set.
    ///
    /// Errors: [`Error::Usage`] when it is not a number.
    pub fn source_date_epoch(&self) -> Result<Option<i64>, Error> {
        self.source_date_epoch
            .as_deref()
            .map(|v| {
                v.trim().parse().map_err(|_| {
                    Error::Usage(format!(
                        "SOURCE_DATE_EPOCH `{v}` is not a number of seconds"
                    ))
                })
            })
            .transpose()
    }
}

/// What the user set for one build outside images.toml: flags and environment, nothing derived.
#[derive(Debug, Clone, Default)]
pub struct Overrides {
    /// `--source`: fetch upstream from this URL or path instead of images.toml `upstream`.
    pub source: Option<String>,
    /// `--repository`.
    pub repository: Option<String>,
    /// `--base`: `static` or a reference.
    pub base: Option<String>,
    /// `--allow-unpinned-base`.
    pub allow_unpinned_base: bool,
    /// `--push`.
    pub push: bool,
    /// `--output` (the OCI layout directory).
    pub output: PathBuf,
    /// The resolved cache directory ([`Environment::cache_dir`]).
    pub cache_dir: PathBuf,
    /// `SOURCE_DATE_EPOCH` ([`Environment::source_date_epoch`]).
    pub source_date_epoch: Option<i64>,
    /// `--manifest-fragment`.
    pub manifest_fragment: Option<PathBuf>,
    /// `--replace-tag`.
    pub replace_tag: bool,
    /// Not `--no-wait`.
    pub wait_for_lock: bool,
    /// `--force`: build even when the recorded entry is up to date.
    pub force: bool,
    /// `--accept`: run the acceptance stage before publish.
    pub accept: bool,
    /// `--accept-output`: the acceptance document the stage writes its report into.
    pub accept_output: Option<PathBuf>,
    /// `--referrers`: how the SBOM and provenance referrers are pushed.
    pub referrers: ReferrersMode,
    /// `--sign-key`, read and opened (with `COSIGN_PASSWORD`) before anything else runs.
    pub sign_key: Option<std::sync::Arc<crate::signing::SigningKey>>,
}

/// The base an image is stacked on, parsed once.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum BaseSpec {
    /// The built-in static base.
    Static,
    /// A base pulled from a registry.
    Image(ImageRef),
}

/// Everything one build does, resolved; see the module documentation.
#[derive(Debug, Clone)]
pub struct BuildPlan {
    /// The Kubernetes minor.
    pub minor: Minor,
    /// The images.toml the plan comes from, as given (`--config`), for messages.
    pub config_name: String,
    /// The Cluster API release `--accept` runs S5 with (`[accept]`).
    pub cluster_api: crate::config::ClusterApi,
    /// The magnum-cluster-api release whose renderer `--accept` runs (`[accept]`).
    pub magnum_cluster_api: String,
    /// images.toml `upstream`: the `org.opencontainers.image.source` label and provenance URL.
    pub upstream: String,
    /// Where upstream is fetched from (`--source` or `upstream`).
    pub fetch_from: String,
    /// Upstream release tag.
    pub upstream_tag: String,
    /// The pinned commit (40 hex).
    pub commit: String,
    /// Go toolchain and occm-forge's Go caches.
    pub toolchain: Toolchain,
    /// The base as configured (`static` or a reference), recorded as `base_image`.
    pub base_text: String,
    /// The base, parsed.
    pub base: BaseSpec,
    /// Build from a base reference without a digest.
    pub allow_unpinned_base: bool,
    /// Target platforms.
    pub platforms: Vec<Platform>,
    /// The patch series, read.
    pub series: Vec<PatchFile>,
    /// Its sha256 (`patches::series_sha256`).
    pub series_sha256: String,
    /// Go packages to test.
    pub test_packages: Vec<String>,
    /// Tests that must run and pass (required tests plus fix guards).
    pub required_tests: Vec<String>,
    /// Module requirements set in go.mod after the series (images.toml `go_overrides`).
    pub go_overrides: BTreeMap<String, String>,
    /// The acceptance scenarios whose bug upstream has fixed in this minor: the `shown_by` of
    /// every catalogued fix patch the series does not carry (`S1`).
    pub upstream_fixed: Vec<String>,
    /// The image tag.
    pub tag: String,
    /// The target repository as configured.
    pub repository: String,
    /// The target repository, parsed.
    pub repository_name: RepositoryName,
    /// The OCI layout directory.
    pub output: PathBuf,
    /// occm-forge's cache directory.
    pub cache_dir: PathBuf,
    /// `SOURCE_DATE_EPOCH`; the upstream commit time when `None`.
    pub source_date_epoch: Option<i64>,
    /// Push and record as published.
    pub push: bool,
    /// Push even when the tag serves another digest.
    pub replace_tag: bool,
    /// Wait for another run's lock instead of refusing.
    pub wait_for_lock: bool,
    /// images.toml's digest manifest (the tag guard always reads it).
    pub digest_manifest: PathBuf,
    /// Where the entry is recorded: `--manifest-fragment` or the digest manifest.
    pub record_to: PathBuf,
    /// Whether `record_to` is a fragment.
    pub fragment: bool,
    /// Whether recording first empties the fragment (it then holds this run's entries alone;
    /// a run over several minors empties it once).
    pub fragment_reset: bool,
    /// Build even when the recorded entry is up to date.
    pub force: bool,
    /// Run the acceptance stage (`crate::pipeline::stages::AcceptStage`) after describe, before publish.
    pub accept: bool,
    /// The acceptance document the stage writes its report into (see [`crate::pipeline::acceptance::Acceptance::accept`]).
    pub accept_output: Option<PathBuf>,
    /// How the referrers are pushed; not an input of the image (its digest is the same).
    pub referrers: ReferrersMode,
    /// The key the sign stage signs the index and attests the SBOMs and provenance with
    /// (`--sign-key`); none: unsigned. Not an input of the image (its digest is the same).
    pub sign_key: Option<std::sync::Arc<crate::signing::SigningKey>>,
}

impl BuildPlan {
    /// Resolves the plan for `minor`; see the module documentation for precedence.
    ///
    /// Errors: an unknown minor ([`Error::Config`]); a patch file that cannot be read
    /// ([`Error::Patch`]); a repository or base that is not a reference, or a base without a
    /// digest unless `allow_unpinned_base` ([`Error::Usage`]).
    pub fn resolve(config: &Config, minor: Minor, o: &Overrides) -> Result<BuildPlan, Error> {
        let m = config.minor(minor)?;
        let series = patches::load_series(&config.patches_dir, &m.patches)?;
        let series_sha256 = patches::series_sha256(&series);
        let tag = config::render_tag(
            &config.tag_scheme,
            &config::TagInputs {
                upstream_tag: &m.upstream_tag,
                revision: m.revision,
                minor,
                series_sha256: &series_sha256,
            },
        );
        let repository = o
            .repository
            .clone()
            .unwrap_or_else(|| config.repository.clone());
        crate::base::reference::require_registry(&repository)
            .map_err(|m| Error::Usage(format!("--{m}")))?;
        let repository_name: RepositoryName = repository
            .parse()
            .map_err(|e| Error::Usage(format!("repository: {e}")))?;
        let base_text = o.base.clone().unwrap_or_else(|| m.base.clone());
        let base = parse_base(config, minor, &base_text, o)?;
        Ok(BuildPlan {
            minor,
            config_name: config.path.display().to_string(),
            cluster_api: config.cluster_api.clone(),
            magnum_cluster_api: config.magnum_cluster_api.clone(),
            upstream: config.upstream.clone(),
            fetch_from: config.fetch_url(o.source.as_deref()),
            upstream_tag: m.upstream_tag.clone(),
            commit: m.commit.clone(),
            toolchain: Toolchain::new(&m.go, &o.cache_dir),
            base_text,
            base,
            allow_unpinned_base: o.allow_unpinned_base,
            platforms: m.platforms.clone(),
            series,
            series_sha256,
            test_packages: m.test_packages.clone(),
            required_tests: config.required_tests(m),
            go_overrides: m.go_overrides.clone(),
            upstream_fixed: config
                .patches
                .iter()
                .filter(|(name, _)| {
                    !m.patches
                        .iter()
                        .any(|p| crate::pipeline::patches::catalogue_name(p) == name.as_str())
                })
                .flat_map(|(_, info)| info.shown_by.iter().cloned())
                .collect(),
            tag,
            repository,
            repository_name,
            output: o.output.clone(),
            cache_dir: o.cache_dir.clone(),
            source_date_epoch: o.source_date_epoch,
            push: o.push,
            replace_tag: o.replace_tag,
            wait_for_lock: o.wait_for_lock,
            digest_manifest: config.digest_manifest.clone(),
            record_to: o
                .manifest_fragment
                .clone()
                .unwrap_or_else(|| config.digest_manifest.clone()),
            fragment: o.manifest_fragment.is_some(),
            fragment_reset: o.manifest_fragment.is_some(),
            force: o.force,
            accept: o.accept,
            accept_output: o.accept_output.clone(),
            referrers: o.referrers,
            sign_key: o.sign_key.clone(),
        })
    }

    /// The version the binary reports (`--version`, `kubernetes_build_info`, the User-Agent):
    /// the tag with its downstream suffix as semver build metadata, `v1.34.1+occmforge.1` for
    /// the tag `v1.34.1-occmforge.1`. A pre-release suffix (`-occmforge.1`) would sort *below*
    /// v1.34.1 for version-comparing tools; build metadata keeps the upstream version's order.
    /// A tag scheme that does not start with the upstream tag is used as it is.
    pub fn binary_version(&self) -> String {
        match self.tag.strip_prefix(&self.upstream_tag) {
            Some(rest) if rest.starts_with('-') => {
                format!("{}+{}", self.upstream_tag, &rest[1..])
            }
            _ => self.tag.clone(),
        }
    }

    /// The patch names of the series, in order.
    pub fn patch_names(&self) -> Vec<String> {
        self.series.iter().map(|p| p.name.clone()).collect()
    }

    /// The platforms as recorded (`linux/arm64`).
    pub fn platform_names(&self) -> Vec<String> {
        self.platforms.iter().map(ToString::to_string).collect()
    }

    /// Everything that determines the image, fingerprinted; `None` when the base is a tag
    /// without a digest (its content, so the image, cannot be known beforehand).
    pub fn inputs(&self) -> Option<BuildInputs> {
        if let BaseSpec::Image(r) = &self.base
            && r.digest.is_none()
        {
            return None;
        }
        Some(self.build_inputs())
    }

    /// The inputs as configured, fingerprinted, also for a base without a digest (for the tag
    /// guard, which compares the inputs a tag is bound to: [`BuildInputs::tag_changes_since`]).
    pub fn build_inputs(&self) -> BuildInputs {
        BuildInputs {
            fingerprint: String::new(),
            image_format: IMAGE_FORMAT,
            upstream: self.upstream.clone(),
            upstream_commit: self.commit.clone(),
            patch_series_sha256: self.series_sha256.clone(),
            go_version: self.toolchain.version.clone(),
            go_env: crate::pipeline::go::platforms_env(&self.platforms),
            base: self.base_text.clone(),
            platforms: self.platform_names(),
            repository: self.repository.clone(),
            tag: self.tag.clone(),
            ldflags: crate::pipeline::go::build::ldflags(&self.binary_version()),
            source_date_epoch: self.source_date_epoch,
            test_packages: self.test_packages.clone(),
            required_tests: self.required_tests.clone(),
            go_overrides: self.go_overrides.clone(),
        }
        .sealed()
    }
}

/// Parses the base once; refuses one without a digest unless unpinned bases are allowed.
fn parse_base(config: &Config, minor: Minor, text: &str, o: &Overrides) -> Result<BaseSpec, Error> {
    if text == config::STATIC_BASE {
        return Ok(BaseSpec::Static);
    }
    let r: ImageRef = text
        .parse()
        .map_err(|e: String| Error::Usage(format!("minors.\"{minor}\".base: {e}")))?;
    if r.digest.is_none() && !o.allow_unpinned_base {
        let origin = match &o.base {
            Some(_) => "--base".to_string(),
            None => format!("{}: minors.\"{minor}\".base", config.path.display()),
        };
        return Err(Error::Usage(format!(
            "{origin} `{text}` has no @sha256 digest: run `occm-forge pin --k8s {minor}` where the registry is reachable, or build with --base static (offline) or --allow-unpinned-base"
        )));
    }
    Ok(BaseSpec::Image(r))
}

/// How registries are reached, as the user set it on the command line (added to images.toml's
/// `[registry]`).
#[derive(Debug, Clone, Default)]
pub struct RegistryOverrides {
    /// `--insecure-registry`: more `host[:port]` reached over plain HTTP.
    pub insecure: Vec<String>,
    /// `--ca-file`: more CA certificates (PEM).
    pub ca_files: Vec<PathBuf>,
    /// `--registry-config`: the only auth file to read.
    pub auth_file: Option<PathBuf>,
    /// `--retries`.
    pub retries: usize,
    /// `--registry-timeout` / `OCCM_FORGE_REGISTRY_TIMEOUT`: a request without progress for this
    /// long fails (and is retried).
    pub idle_timeout: std::time::Duration,
    /// `--registry-operation-timeout` / `OCCM_FORGE_REGISTRY_OPERATION_TIMEOUT`: no retry starts
    /// that would end later than this after the operation's first attempt.
    pub operation_timeout: std::time::Duration,
}

/// The registry client every command uses: the `oci-client` implementation with images.toml's
/// and the command line's TLS settings and credentials, wrapped in retries.
///
/// Errors: [`Error::Usage`] for an `--insecure-registry` that is a URL, or a CA file that cannot
/// be read or holds no PEM certificate.
pub fn registry(config: &Config, o: &RegistryOverrides) -> Result<Retrying<OciRegistry>, Error> {
    registry_with(&config.insecure_registries, &config.ca_files, o)
}

/// [`registry`] without images.toml: only `insecure` and `ca_files` (and the overrides) say
/// how registries are reached.
///
/// Errors: [`Error::Usage`] for an `--insecure-registry` that is not `host[:port]` or a CA file
/// that cannot be read.
pub fn registry_with(
    insecure_registries: &[String],
    ca_files: &[std::path::PathBuf],
    o: &RegistryOverrides,
) -> Result<Retrying<OciRegistry>, Error> {
    let mut insecure = insecure_registries.to_vec();
    for host in &o.insecure {
        if host.contains("://") || host.contains('/') || host.is_empty() {
            return Err(Error::Usage(format!(
                "--insecure-registry {host}: give host[:port], not a URL"
            )));
        }
        insecure.push(host.clone());
    }
    let mut ca_files = ca_files.to_vec();
    ca_files.extend(o.ca_files.iter().cloned());
    let client = OciRegistry::new(&OciRegistryConfig {
        insecure,
        ca_files,
        auth: Keychains::new(AuthFiles::discover(o.auth_file.as_deref())),
        idle_timeout: o.idle_timeout,
        proxy: ProxyEnv::from_env(),
        chunked: Default::default(),
    })
    .map_err(|e| Error::Usage(e.to_string()))?;
    Ok(Retrying::new(
        client,
        RetryPolicy {
            retries: o.retries,
            operation_timeout: o.operation_timeout,
            ..RetryPolicy::default()
        },
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cache_dir_precedence() {
        let env = Environment {
            cache: Some("/env-cache".into()),
            xdg_cache_home: Some("/xdg".into()),
            home: Some("/home/u".into()),
            source_date_epoch: Some(" 42 ".into()),
        };
        assert_eq!(env.cache_dir(Some(Path::new("/flag"))), Path::new("/flag"));
        assert_eq!(env.cache_dir(None), Path::new("/env-cache"));
        let env = Environment { cache: None, ..env };
        assert_eq!(env.cache_dir(None), Path::new("/xdg/occm-forge"));
        let env = Environment {
            xdg_cache_home: None,
            ..env
        };
        assert_eq!(env.cache_dir(None), Path::new("/home/u/.cache/occm-forge"));
        assert_eq!(env.source_date_epoch().unwrap(), Some(42));
        let bad = Environment {
            source_date_epoch: Some("yesterday".into()),
            ..Environment::default()
        };
        assert_eq!(
            bad.source_date_epoch().unwrap_err().to_string(),
            "SOURCE_DATE_EPOCH `yesterday` is not a number of seconds"
        );
    }
}
