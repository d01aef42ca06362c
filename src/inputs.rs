//! The inputs fingerprint: everything that determines an image, recorded with each
//! digest-manifest entry so that a build whose inputs are unchanged and whose result is still
//! there is skipped (as Bazel keys an action by its inputs, and melange skips a package whose
//! version is already in the repository).
//!
//! The fingerprint is `sha256:` over the canonical JSON (sorted keys, compact) of every field but
//! itself. [`IMAGE_FORMAT`] stands for occm-forge's own output: bump it whenever the same inputs
//! would give other image, SBOM or provenance bytes (`tests/golden.rs` pins those bytes).

use serde::{Deserialize, Serialize};

use crate::util::{sha256_digest, short};

/// The version of occm-forge's output format. Bump it whenever occm-forge writes other bytes for
/// the same inputs (image layers, configs, manifests, the index, SBOM, provenance).
///
/// - 1: the first recorded format.
/// - 2: upstream's Dockerfile labels on the config; the binary reports `v1.34.1+occmforge.1`;
///   Go runs with `-mod=readonly` (provenance); every SBOM package has a supplier.
pub const IMAGE_FORMAT: u32 = 2;

/// What determines an image, as recorded in the digest manifest (`inputs:` of an entry).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
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

    /// What changed from `old` to `self`, one phrase per input (`Go 1.25.1 → 1.25.5`); empty
    /// when the fingerprints match.
    pub fn changes_since(&self, old: &BuildInputs) -> Vec<String> {
        if self.fingerprint == old.fingerprint {
            return vec![];
        }
        let list = |v: &[String]| v.join(",");
        let epoch =
            |e: Option<i64>| e.map_or_else(|| "the commit time".to_string(), |e| e.to_string());
        let pairs = [
            (
                "image format",
                old.image_format.to_string(),
                self.image_format.to_string(),
            ),
            ("upstream", old.upstream.clone(), self.upstream.clone()),
            (
                "upstream commit",
                old.upstream_commit.clone(),
                self.upstream_commit.clone(),
            ),
            (
                "patch series",
                old.patch_series_sha256.clone(),
                self.patch_series_sha256.clone(),
            ),
            ("Go", old.go_version.clone(), self.go_version.clone()),
            ("base", old.base.clone(), self.base.clone()),
            ("platforms", list(&old.platforms), list(&self.platforms)),
            (
                "repository",
                old.repository.clone(),
                self.repository.clone(),
            ),
            ("tag", old.tag.clone(), self.tag.clone()),
            ("ldflags", old.ldflags.clone(), self.ldflags.clone()),
            (
                "SOURCE_DATE_EPOCH",
                epoch(old.source_date_epoch),
                epoch(self.source_date_epoch),
            ),
            (
                "test packages",
                list(&old.test_packages),
                list(&self.test_packages),
            ),
            (
                "required tests",
                list(&old.required_tests),
                list(&self.required_tests),
            ),
        ];
        let mut out: Vec<String> = pairs
            .into_iter()
            .filter(|(_, a, b)| a != b)
            .map(|(what, a, b)| {
                if what == "patch series" {
                    format!(
                        "{what} {} → {}",
                        &a[..12.min(a.len())],
                        &b[..12.min(b.len())]
                    )
                } else {
                    format!("{what} {a} → {b}")
                }
            })
            .collect();
        if out.is_empty() {
            // Same fields, another fingerprint: the record was edited by hand.
            out.push(format!(
                "fingerprint {} → {}",
                short(&old.fingerprint),
                short(&self.fingerprint)
            ));
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn inputs() -> BuildInputs {
        BuildInputs {
            fingerprint: String::new(),
            image_format: IMAGE_FORMAT,
            upstream: "https://github.com/kubernetes/cloud-provider-openstack".into(),
            upstream_commit: "63ec67a04b40fee4ff43fec11c3d31f2a90c9ad2".into(),
            patch_series_sha256: "1".repeat(64),
            go_version: "1.25.1".into(),
            base: "static".into(),
            platforms: vec!["linux/amd64".into(), "linux/arm64".into()],
            repository: "r.example/occm".into(),
            tag: "v1.34.1-occmforge.1".into(),
            ldflags: "-s -w".into(),
            source_date_epoch: None,
            test_packages: vec!["./pkg/...".into()],
            required_tests: vec!["TestB".into(), "TestA".into()],
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
        let changed: Vec<(BuildInputs, &str)> = vec![
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
                "image format 2 → 1",
            ),
        ];
        for (b, phrase) in changed {
            let b = b.sealed();
            assert_ne!(b.fingerprint, a.fingerprint, "{phrase}");
            assert_eq!(b.changes_since(&a), [phrase]);
        }
    }
}
