//! The inputs fingerprint: everything that determines an image, recorded with each
//! digest-manifest entry so that a build whose inputs are unchanged and whose result is still
//! there is skipped (as Bazel keys an action by its inputs, and melange skips a package whose
//! version is already in the repository).
//!
//! The fingerprint is `sha256:` over the canonical JSON (sorted keys, compact) of every field but
//! itself. [`IMAGE_FORMAT`] stands for occm-forge's own output: bump it whenever the same inputs
//! would give other image, SBOM or provenance bytes (`tests/golden.rs` pins those bytes).

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use crate::base::util::{sha256_digest, short};

/// The version of occm-forge's output format. Bump it whenever occm-forge writes other bytes for
/// the same inputs (image layers, configs, manifests, the index, SBOM, provenance).
///
/// - 1: the first recorded format.
/// - 2: upstream's Dockerfile labels on the config; the binary reports `v1.34.1+occmforge.1`;
///   Go runs with `-mod=readonly` (provenance); every SBOM package has a supplier.
/// - 3: the provenance records each platform's pinned Go environment
///   (`internalParameters.env`); images themselves are unchanged.
/// - 4: the SBOM's standard library as syft writes it (purl `pkg:golang/stdlib@1.26.8` without
///   the `go` prefix Trivy refused, and the CPE Grype matches); images themselves are unchanged.
pub const IMAGE_FORMAT: u32 = 4;

/// Platform → Go environment variable → value (`go::platforms_env`).
pub type GoEnv = BTreeMap<String, BTreeMap<String, String>>;

/// [`GoEnv`] as platform → `["KEY=VALUE", …]` (sorted by key).
mod env_lines {
    use std::collections::BTreeMap;

    use serde::{Deserialize, Deserializer, Serialize, Serializer};

    use super::GoEnv;

    pub fn serialize<S: Serializer>(env: &GoEnv, s: S) -> Result<S::Ok, S::Error> {
        let lines: BTreeMap<&String, Vec<String>> = env
            .iter()
            .map(|(p, vars)| (p, vars.iter().map(|(k, v)| format!("{k}={v}")).collect()))
            .collect();
        lines.serialize(s)
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<GoEnv, D::Error> {
        let lines = BTreeMap::<String, Vec<String>>::deserialize(d)?;
        lines
            .into_iter()
            .map(|(p, vars)| {
                let vars = vars
                    .into_iter()
                    .map(|line| match line.split_once('=') {
                        Some((k, v)) => Ok((k.to_string(), v.to_string())),
                        None => Err(serde::de::Error::custom(format!(
                            "go_env of {p}: `{line}` is not KEY=VALUE"
                        ))),
                    })
                    .collect::<Result<BTreeMap<_, _>, _>>()?;
                Ok((p, vars))
            })
            .collect()
    }
}

/// What determines an image, as recorded in the digest manifest (`inputs:` of an entry).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct BuildInputs {
    /// `sha256:<hex>` over the canonical JSON of the other fields.
    pub fingerprint: String,
    /// [`IMAGE_FORMAT`] of the occm-forge that built it.
    pub image_format: u32,
    /// images.toml `upstream` (the source label).
    pub upstream: String,
    /// The pinned upstream commit.
    pub upstream_commit: String,
    /// sha256 of the patch series (`patches::series_sha256`).
    pub patch_series_sha256: String,
    /// Go toolchain version.
    pub go_version: String,
    /// Platform → the Go environment its binary is built with (`go::platforms_env`; constants
    /// of occm-forge, recorded so that a change of them is a change of inputs). Absent in
    /// entries of image format 2 and older.
    /// Recorded as `KEY=VALUE` lines (as `go version -m` prints build settings), so that no YAML
    /// reader takes a value such as `off` for a boolean.
    #[serde(
        default,
        skip_serializing_if = "BTreeMap::is_empty",
        with = "env_lines"
    )]
    pub go_env: GoEnv,
    /// The base as configured (`static`, or a reference pinned by digest).
    pub base: String,
    /// Platforms, in index order.
    pub platforms: Vec<String>,
    /// Target repository (named in the SBOM and provenance).
    pub repository: String,
    /// Image tag.
    pub tag: String,
    /// `-ldflags` of `go build`.
    pub ldflags: String,
    /// `SOURCE_DATE_EPOCH` when it was set; absent means the upstream commit time.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub source_date_epoch: Option<i64>,
    /// Go packages tested.
    pub test_packages: Vec<String>,
    /// Tests that had to run and pass, sorted.
    pub required_tests: Vec<String>,
    /// Module requirements set in upstream's go.mod after the series (images.toml
    /// `go_overrides`), module path → version; absent when there are none (so the fingerprints
    /// of entries without overrides are what they were).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub go_overrides: BTreeMap<String, String>,
}

/// One input of [`BuildInputs::named`].
struct Named {
    /// How every message names it (`Go`, `patch series`).
    what: &'static str,
    /// Its value as messages show it.
    value: String,
    /// Whether it determines the image's content, so that a tag recorded with one value never
    /// serves another (the digest manifest's tag guard). The others rebuild under the same tag.
    binds_tag: bool,
}

impl BuildInputs {
    /// Fills in [`BuildInputs::fingerprint`] from the other fields.
    pub fn sealed(mut self) -> Self {
        self.required_tests.sort();
        self.fingerprint = self.compute();
        self
    }

    /// The fingerprint the fields give now.
    pub fn compute(&self) -> String {
        let mut v = serde_json::to_value(self).expect("inputs serialise");
        v.as_object_mut()
            .expect("inputs are an object")
            .remove("fingerprint");
        sha256_digest(&serde_json::to_vec(&v).expect("JSON values serialise"))
    }

    /// The one list of what determines an image: every input, in message order, named as the
    /// inputs stage ("needs a build: …") and the tag guard ("tag … was recorded with other
    /// inputs: …") name it.
    fn named(&self) -> Vec<Named> {
        let list = |v: &[String]| v.join(",");
        let epoch = self
            .source_date_epoch
            .map_or_else(|| "the commit time".to_string(), |e| e.to_string());
        let go_env = self
            .go_env
            .iter()
            .map(|(platform, env)| {
                let vars: Vec<String> = env.iter().map(|(k, v)| format!("{k}={v}")).collect();
                format!("{platform}: {}", vars.join(" "))
            })
            .collect::<Vec<_>>()
            .join("; ");
        let named = |what, value: String, binds_tag| Named {
            what,
            value,
            binds_tag,
        };
        vec![
            named("image format", self.image_format.to_string(), false),
            named("upstream", self.upstream.clone(), false),
            named("upstream commit", self.upstream_commit.clone(), true),
            named("patch series", self.patch_series_sha256.clone(), true),
            named("Go", self.go_version.clone(), true),
            named("Go environment", go_env, false),
            named("base", self.base.clone(), true),
            named("platforms", list(&self.platforms), true),
            named("repository", self.repository.clone(), false),
            named("tag", self.tag.clone(), false),
            named("ldflags", self.ldflags.clone(), false),
            named("SOURCE_DATE_EPOCH", epoch, false),
            named("test packages", list(&self.test_packages), false),
            named("required tests", list(&self.required_tests), false),
            named(
                "Go module overrides",
                if self.go_overrides.is_empty() {
                    "none".to_string()
                } else {
                    self.go_overrides
                        .iter()
                        .map(|(m, v)| format!("{m}@{v}"))
                        .collect::<Vec<_>>()
                        .join(",")
                },
                true,
            ),
        ]
    }

    /// What changed from `old` to `self`, one phrase per input in the words of [`change`]
    /// (`Go 1.25.1 → 1.25.5`); empty when the fingerprints match.
    pub fn changes_since(&self, old: &BuildInputs) -> Vec<String> {
        if self.fingerprint == old.fingerprint {
            return vec![];
        }
        let mut out = differences(old, self, false);
        if out.is_empty() {
            // Same fields, another fingerprint: the record was edited by hand.
            out.push(change(
                "fingerprint",
                short(&old.fingerprint),
                short(&self.fingerprint),
            ));
        }
        out
    }

    /// What changed from `old` to `self` among the inputs a tag is bound to (upstream commit,
    /// patch series, Go, base, platforms), in the same words as [`BuildInputs::changes_since`];
    /// empty when the tag may serve both.
    pub fn tag_changes_since(&self, old: &BuildInputs) -> Vec<String> {
        differences(old, self, true)
    }
}

/// The phrases of the inputs that differ between `old` and `new` (only those that bind the tag
/// when `tag_only`), shortening what is long: a patch series by its first 12 hex, the Go
/// environment by the variables that differ.
fn differences(old: &BuildInputs, new: &BuildInputs, tag_only: bool) -> Vec<String> {
    old.named()
        .into_iter()
        .zip(new.named())
        .filter(|(a, b)| (a.binds_tag || !tag_only) && a.value != b.value)
        .filter_map(|(a, b)| match a.what {
            "patch series" => Some(change(
                a.what,
                &a.value[..12.min(a.value.len())],
                &b.value[..12.min(b.value.len())],
            )),
            "Go environment" => go_env_change(&old.go_env, &new.go_env),
            _ => Some(change(a.what, &a.value, &b.value)),
        })
        .collect()
}

/// `Go environment of linux/amd64: GOAMD64 v1 → v3` (each platform both record, each variable
/// that differs; a platform only one records is the platforms' change); `Go environment (not
/// recorded) → recorded` against an entry from before it was recorded (and the reverse).
fn go_env_change(old: &GoEnv, new: &GoEnv) -> Option<String> {
    match (old.is_empty(), new.is_empty()) {
        (true, _) => return Some(change("Go environment", "(not recorded)", "recorded")),
        (_, true) => return Some(change("Go environment", "recorded", "(not recorded)")),
        _ => {}
    }
    let mut parts = Vec::new();
    for (platform, new_env) in new {
        let Some(old_env) = old.get(platform) else {
            continue;
        };
        let names: std::collections::BTreeSet<&String> =
            old_env.keys().chain(new_env.keys()).collect();
        let value = |env: &BTreeMap<String, String>, name: &String| {
            env.get(name).map_or("(unset)".to_string(), |v| {
                if v.is_empty() {
                    "(empty)".to_string()
                } else {
                    v.clone()
                }
            })
        };
        let vars: Vec<String> = names
            .into_iter()
            .filter(|n| old_env.get(*n) != new_env.get(*n))
            .map(|n| format!("{n} {} → {}", value(old_env, n), value(new_env, n)))
            .collect();
        if !vars.is_empty() {
            parts.push(format!("Go environment of {platform}: {}", vars.join(", ")));
        }
    }
    (!parts.is_empty()).then(|| parts.join("; "))
}

/// How every message words one changed input: `<what> <old> → <new>` (`Go 1.25.1 → 1.25.5`).
pub fn change(what: &str, old: &str, new: &str) -> String {
    format!("{what} {old} → {new}")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_go_environment_is_recorded_as_key_value_lines_a_yaml_1_1_reader_keeps() {
        let i = inputs().sealed();
        let yaml = serde_norway::to_string(&i).unwrap();
        // `GOFIPS140: off` would be `false` to PyYAML (YAML 1.1), as Ansible reads it.
        assert!(yaml.contains("- GOFIPS140=off\n"), "{yaml}");
        assert!(!yaml.contains("GOFIPS140: "), "{yaml}");
        let back: BuildInputs = serde_norway::from_str(&yaml).unwrap();
        assert_eq!(back, i);
        assert_eq!(back.compute(), i.fingerprint);
        let bad = yaml.replace("- GOFIPS140=off", "- GOFIPS140");
        let e = serde_norway::from_str::<BuildInputs>(&bad)
            .unwrap_err()
            .to_string();
        assert!(e.contains("`GOFIPS140` is not KEY=VALUE"), "{e}");
    }

    #[test]
    fn go_overrides_bind_the_tag_and_leave_entries_without_them_alone() {
        let a = inputs();
        let yaml = serde_norway::to_string(&a).unwrap();
        assert!(!yaml.contains("go_overrides"), "{yaml}");
        let mut b = a.clone();
        b.go_overrides
            .insert("k8s.io/kubernetes".into(), "v1.31.14".into());
        let b = b.sealed();
        assert_ne!(a.fingerprint, b.fingerprint);
        assert_eq!(
            b.tag_changes_since(&a),
            ["Go module overrides none → k8s.io/kubernetes@v1.31.14"]
        );
        let back: BuildInputs =
            serde_norway::from_str(&serde_norway::to_string(&b).unwrap()).unwrap();
        assert_eq!(back.compute(), b.fingerprint);
    }

    fn inputs() -> BuildInputs {
        BuildInputs {
            fingerprint: String::new(),
            image_format: IMAGE_FORMAT,
            upstream: "https://github.com/kubernetes/cloud-provider-openstack".into(),
            upstream_commit: "63ec67a04b40fee4ff43fec11c3d31f2a90c9ad2".into(),
            patch_series_sha256: "1".repeat(64),
            go_version: "1.25.1".into(),
            go_env: crate::pipeline::go::platforms_env(&[
                "linux/amd64".parse().unwrap(),
                "linux/arm64".parse().unwrap(),
            ]),
            base: "static".into(),
            platforms: vec!["linux/amd64".into(), "linux/arm64".into()],
            repository: "r.example/occm".into(),
            tag: "v1.34.1-occmforge.1".into(),
            ldflags: "-s -w".into(),
            source_date_epoch: None,
            test_packages: vec!["./pkg/...".into()],
            required_tests: vec!["TestB".into(), "TestA".into()],
            go_overrides: BTreeMap::new(),
        }
        .sealed()
    }

    #[test]
    fn every_input_changes_the_fingerprint_and_is_named() {
        let a = inputs();
        assert_eq!(
            a.required_tests,
            ["TestA", "TestB"],
            "sorted before sealing"
        );
        assert_eq!(a.compute(), a.fingerprint);
        assert!(a.changes_since(&a).is_empty());
        // The one list names every recorded field but the fingerprint.
        let full = BuildInputs {
            source_date_epoch: Some(0),
            go_overrides: BTreeMap::from([("k8s.io/kubernetes".into(), "v1.31.14".into())]),
            ..a.clone()
        };
        let fields = serde_json::to_value(&full)
            .unwrap()
            .as_object()
            .unwrap()
            .len();
        assert_eq!(full.named().len(), fields - 1);
        for (b, phrase) in one_change_each(&a) {
            let b = b.sealed();
            assert_ne!(b.fingerprint, a.fingerprint, "{phrase}");
            assert_eq!(b.changes_since(&a), [phrase]);
        }
    }

    /// `a` with one input changed at a time, and how the inputs stage names that change.
    fn one_change_each(a: &BuildInputs) -> Vec<(BuildInputs, &'static str)> {
        vec![
            (
                BuildInputs {
                    go_version: "1.25.5".into(),
                    ..a.clone()
                },
                "Go 1.25.1 → 1.25.5",
            ),
            (
                BuildInputs {
                    patch_series_sha256: "2".repeat(64),
                    ..a.clone()
                },
                "patch series 111111111111 → 222222222222",
            ),
            (
                BuildInputs {
                    base: "r/b@sha256:x".into(),
                    ..a.clone()
                },
                "base static → r/b@sha256:x",
            ),
            (
                BuildInputs {
                    platforms: vec!["linux/amd64".into()],
                    ..a.clone()
                },
                "platforms linux/amd64,linux/arm64 → linux/amd64",
            ),
            (
                BuildInputs {
                    required_tests: vec!["TestA".into()],
                    ..a.clone()
                },
                "required tests TestA,TestB → TestA",
            ),
            (
                BuildInputs {
                    tag: "v1.34.1-occmforge.2".into(),
                    ..a.clone()
                },
                "tag v1.34.1-occmforge.1 → v1.34.1-occmforge.2",
            ),
            (
                BuildInputs {
                    source_date_epoch: Some(0),
                    ..a.clone()
                },
                "SOURCE_DATE_EPOCH the commit time → 0",
            ),
            (
                BuildInputs {
                    image_format: 1,
                    ..a.clone()
                },
                "image format 4 → 1",
            ),
            (
                BuildInputs {
                    go_env: {
                        let mut env = a.go_env.clone();
                        env.get_mut("linux/amd64")
                            .unwrap()
                            .insert("GOAMD64".into(), "v3".into());
                        env
                    },
                    ..a.clone()
                },
                "Go environment of linux/amd64: GOAMD64 v1 → v3",
            ),
            (
                BuildInputs {
                    go_env: GoEnv::new(),
                    ..a.clone()
                },
                "Go environment recorded → (not recorded)",
            ),
        ]
    }

    /// The tag guard names the inputs a tag is bound to in the words of the inputs stage, and
    /// only those.
    #[test]
    fn the_tag_is_bound_to_the_content_inputs_in_the_same_words() {
        let a = inputs();
        let b = BuildInputs {
            go_version: "1.25.5".into(),
            base: "r/b@sha256:x".into(),
            repository: "other.example/occm".into(),
            required_tests: vec!["TestA".into()],
            ..a.clone()
        }
        .sealed();
        assert_eq!(
            b.changes_since(&a),
            [
                "Go 1.25.1 → 1.25.5",
                "base static → r/b@sha256:x",
                "repository r.example/occm → other.example/occm",
                "required tests TestA,TestB → TestA",
            ]
        );
        assert_eq!(
            b.tag_changes_since(&a),
            ["Go 1.25.1 → 1.25.5", "base static → r/b@sha256:x"]
        );
        let c = BuildInputs {
            image_format: 2,
            go_env: GoEnv::new(),
            test_packages: vec![],
            ..a.clone()
        };
        assert!(c.tag_changes_since(&a).is_empty());
    }
}
