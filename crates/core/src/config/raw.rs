//! The serde shapes of images.toml as written, and the merge of `[defaults]` into each minor.

use std::collections::{BTreeMap, BTreeSet};

use serde::Deserialize;

use super::{
    DEFAULT_DIGEST_MANIFEST, DEFAULT_TAG_SCHEME, DEFAULT_UPSTREAM, GoPolicy, MinorConfig,
    PatchInfo, Platform,
};

/// The whole file as written.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawConfig {
    #[serde(default = "default_upstream")]
    pub upstream: String,
    pub repository: String,
    #[serde(default = "default_tag_scheme")]
    pub tag: String,
    #[serde(default = "default_manifest")]
    pub digest_manifest: String,
    #[serde(default = "default_patches_dir")]
    pub patches_dir: String,
    #[serde(default)]
    pub registry: RawRegistry,
    #[serde(default)]
    pub accept: RawAccept,
    #[serde(default)]
    pub patches: BTreeMap<String, PatchInfo>,
    #[serde(default)]
    pub defaults: RawDefaults,
    pub minors: BTreeMap<String, RawMinor>,
}

/// `[registry]`.
#[derive(Deserialize, Default)]
#[serde(deny_unknown_fields)]
pub(super) struct RawRegistry {
    #[serde(default)]
    pub insecure: Vec<String>,
    #[serde(default)]
    pub ca_files: Vec<String>,
}

/// `[accept]`.
#[derive(Deserialize, Default)]
#[serde(deny_unknown_fields)]
pub(super) struct RawAccept {
    pub cluster_api: Option<String>,
    pub cluster_api_go: Option<String>,
    pub magnum_cluster_api: Option<String>,
}

/// `[defaults]`: the keys a minor may inherit. Per-minor facts (upstream tag, commit, Go,
/// revision) have no default.
#[derive(Deserialize, Default)]
#[serde(deny_unknown_fields)]
pub(super) struct RawDefaults {
    pub base: Option<String>,
    pub platforms: Option<Vec<Platform>>,
    pub patches: Option<Vec<String>>,
    pub test_packages: Option<Vec<String>>,
    pub required_tests: Option<Vec<String>>,
    pub go_overrides: Option<BTreeMap<String, String>>,
    pub go_policy: Option<GoPolicy>,
}

/// `[minors."1.NN"]` as written.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawMinor {
    pub upstream_tag: String,
    pub commit: String,
    pub go: String,
    pub base: Option<String>,
    pub platforms: Option<Vec<Platform>>,
    pub revision: u32,
    pub patches: Option<Vec<String>>,
    pub test_packages: Option<Vec<String>>,
    pub required_tests: Option<Vec<String>>,
    /// The minor's end of life, a TOML local date (`2026-10-27`), checked in `check`.
    pub end_of_life: Option<toml::value::Datetime>,
    pub go_overrides: Option<BTreeMap<String, String>>,
    pub go_policy: Option<GoPolicy>,
}

/// A minor with `[defaults]` applied, and which of its keys came from `[defaults]` (their
/// errors point at the `[defaults]` line).
pub(super) struct Merged {
    pub config: MinorConfig,
    pub inherited: BTreeSet<&'static str>,
    /// `end_of_life` as written, for `check` to turn into [`MinorConfig::end_of_life`].
    pub end_of_life: Option<toml::value::Datetime>,
}

impl RawMinor {
    /// Applies `defaults`: each key the minor lacks is taken from `[defaults]` whole. A key
    /// neither has is `Err(key)`, except `required_tests`, which defaults to none.
    pub fn merge(self, d: &RawDefaults) -> Result<Merged, &'static str> {
        let mut inherited = BTreeSet::new();
        let mut pick = |own: Option<Vec<String>>, def: &Option<Vec<String>>, key| match own {
            Some(v) => Ok(v),
            None => match def {
                Some(v) => {
                    inherited.insert(key);
                    Ok(v.clone())
                }
                None => Err(key),
            },
        };
        let patches = pick(self.patches, &d.patches, "patches")?;
        let test_packages = pick(self.test_packages, &d.test_packages, "test_packages")?;
        let required_tests =
            pick(self.required_tests, &d.required_tests, "required_tests").unwrap_or_default();
        let platforms = match (self.platforms, &d.platforms) {
            (Some(p), _) => p,
            (None, Some(p)) => {
                inherited.insert("platforms");
                p.clone()
            }
            (None, None) => return Err("platforms"),
        };
        let go_overrides = match (self.go_overrides, &d.go_overrides) {
            (Some(o), _) => o,
            (None, Some(o)) => {
                inherited.insert("go_overrides");
                o.clone()
            }
            (None, None) => BTreeMap::new(),
        };
        let go_policy = match (self.go_policy, d.go_policy) {
            (Some(p), _) => p,
            (None, Some(p)) => {
                inherited.insert("go_policy");
                p
            }
            (None, None) => GoPolicy::default(),
        };
        let base = match (self.base, &d.base) {
            (Some(b), _) => b,
            (None, Some(b)) => {
                inherited.insert("base");
                b.clone()
            }
            (None, None) => return Err("base"),
        };
        Ok(Merged {
            config: MinorConfig {
                upstream_tag: self.upstream_tag,
                commit: self.commit,
                go: self.go,
                base,
                platforms,
                revision: self.revision,
                patches,
                test_packages,
                required_tests,
                end_of_life: None,
                go_overrides,
                go_policy,
            },
            inherited,
            end_of_life: self.end_of_life,
        })
    }
}

fn default_upstream() -> String {
    DEFAULT_UPSTREAM.to_string()
}
fn default_tag_scheme() -> String {
    DEFAULT_TAG_SCHEME.to_string()
}
fn default_manifest() -> String {
    DEFAULT_DIGEST_MANIFEST.to_string()
}
fn default_patches_dir() -> String {
    "patches".to_string()
}
