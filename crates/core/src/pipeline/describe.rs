//! Describe stage: an SPDX 2.3 SBOM per platform image and a SLSA provenance v1 statement per
//! build, as deterministic JSON bytes from plain data.
//!
//! - SBOM: SPDX 2.3 JSON (spdx.github.io/spdx-spec/v2.3), modelled on ko's `internal/sbom/spdx.go`:
//!   the image (`pkg:oci/…@sha256:…`), OCCM's main module, the Go standard library, every module
//!   linked in (`pkg:golang/<path>@<version>`, from `go version -m -json`) and the base image.
//!   `created` is the image's epoch, so the same image always gets the same SBOM bytes. Every
//!   package names a supplier ([`go_module_supplier`], [`repository_supplier`]), as the NTIA
//!   minimum elements require (ntia-conformance-checker counts `NOASSERTION` as missing). A module
//!   replaced by a directory of the main module's tree (`replace k8s.io/x => ./staging/src/k8s.io/x`)
//!   is listed under its module path at the main module's version, with the directory in its
//!   download location.
//! - Provenance: an in-toto Statement v1 (`https://in-toto.io/Statement/v1`) with predicate
//!   `https://slsa.dev/provenance/v1` naming the upstream commit, each patch with its sha256, the
//!   base digest, the Go version, the platforms and each platform's Go environment
//!   (`internalParameters.env`, e.g. `{"linux/amd64": {"GOAMD64": "v1", …}}`). It carries no wall-clock time (the digest
//!   manifest's `built_at` does), so the same build gives the same statement and the same
//!   referrer, and rebuilds do not pile up referrers.

use std::collections::BTreeMap;

use serde_json::{Value, json};

use crate::base::util::rfc3339;
use crate::pipeline::go::build::BuildInfo;

/// SPDX JSON media type (and referrer artifact type).
pub const SPDX_MEDIA_TYPE: &str = "application/spdx+json";
/// in-toto statement media type (and referrer artifact type); the signing layer's.
pub use crate::signing::IN_TOTO_MEDIA_TYPE;
/// The SLSA `buildType` of an occm-forge build.
pub const BUILD_TYPE: &str = "urn:occm-forge:build:v1";

/// What an image's SBOM is made from.
#[derive(Debug, Clone)]
pub struct SbomInput<'a> {
    /// Target repository (`registry/path`).
    pub repository: &'a str,
    /// Image tag.
    pub tag: &'a str,
    /// Platform, e.g. `linux/arm64`.
    pub platform: &'a str,
    /// GOARCH, for the purl `arch` qualifier.
    pub arch: &'a str,
    /// Digest of the platform image manifest this SBOM describes.
    pub manifest_digest: &'a str,
    /// The binary's embedded build information.
    pub build_info: &'a BuildInfo,
    /// Upstream tag and commit (the main module's version and source).
    pub upstream_tag: &'a str,
    /// Upstream commit.
    pub upstream_commit: &'a str,
    /// Upstream URL.
    pub upstream_url: &'a str,
    /// Pulled base: (name, platform manifest digest); `None` for the static base.
    pub base: Option<(&'a str, &'a str)>,
    /// Seconds since the epoch for `created`.
    pub epoch: i64,
}

fn spdx_id(kind: &str, name: &str, version: &str) -> String {
    let clean = |s: &str| {
        s.chars()
            .map(|c| {
                if c.is_ascii_alphanumeric() || c == '.' {
                    c
                } else {
                    '-'
                }
            })
            .collect::<String>()
    };
    format!("SPDXRef-{kind}-{}-{}", clean(name), clean(version))
}

fn oci_purl(repository: &str, digest: &str, arch: Option<&str>, tag: Option<&str>) -> String {
    let (repo_url, name) = match repository.rsplit_once('/') {
        Some((_, n)) => (repository, n),
        None => (repository, repository),
    };
    let mut q = Vec::new();
    if let Some(a) = arch {
        q.push(format!("arch={a}"));
    }
    q.push(format!("repository_url={repo_url}"));
    if let Some(t) = tag {
        q.push(format!("tag={t}"));
    }
    format!(
        "pkg:oci/{}@{}?{}",
        name.to_lowercase(),
        digest.replace(':', "%3A"),
        q.join("&")
    )
}

/// The SPDX `supplier` of a Go module: `Organization: <host>/<owner>` on hosts that serve many
/// owners (`github.com/gophercloud/gophercloud` → `Organization: github.com/gophercloud`,
/// `golang.org/x/net` → `Organization: golang.org/x`), `Organization: <host>` on a vanity domain
/// (`k8s.io/client-go` → `Organization: k8s.io`). The Go standard library is `golang.org`.
pub fn go_module_supplier(module_path: &str) -> String {
    /// Hosts whose first path element is an owner (code forges, golang.org/x, gopkg.in/<user>/…).
    const MULTI_OWNER_HOSTS: &[&str] = &[
        "github.com",
        "gitlab.com",
        "bitbucket.org",
        "codeberg.org",
        "gitee.com",
        "git.sr.ht",
        "golang.org",
    ];
    let mut parts = module_path.split('/');
    let host = parts.next().unwrap_or(module_path);
    let owner = parts.next();
    let more = parts.next().is_some();
    match owner {
        Some(o) if MULTI_OWNER_HOSTS.contains(&host) || (host == "gopkg.in" && more) => {
            format!("Organization: {host}/{o}")
        }
        _ => format!("Organization: {host}"),
    }
}

/// The SPDX `supplier` of an image: whoever owns its repository's namespace, i.e. the repository
/// without its last path element (`registry.example/occm/openstack-cloud-controller-manager` →
/// `Organization: registry.example/occm`; `registry.example/name` → `Organization:
/// registry.example`). A digest or tag on the reference is ignored.
pub fn repository_supplier(repository: &str) -> String {
    let repo = repository.split('@').next().unwrap_or(repository);
    // A tag is a `:` after the last `/` (a `:` before it is a registry port).
    let repo = match repo.rfind('/') {
        Some(slash) => match repo[slash..].rfind(':') {
            Some(colon) => &repo[..slash + colon],
            None => repo,
        },
        None => repo,
    };
    match repo.rsplit_once('/') {
        Some((namespace, _)) => format!("Organization: {namespace}"),
        None => format!("Organization: {repo}"),
    }
}

/// Whether a `replace` target is a directory (Go: a path starting with `./`, `../` or `/`).
fn is_directory_replacement(path: &str) -> bool {
    path.starts_with("./") || path.starts_with("../") || path.starts_with('/')
}

fn package(id: &str, name: &str, version: &str, purl: Option<String>, purpose: &str) -> Value {
    let mut p = json!({
        "SPDXID": id,
        "name": name,
        "versionInfo": version,
        "supplier": "NOASSERTION",
        "downloadLocation": "NOASSERTION",
        "filesAnalyzed": false,
        "primaryPackagePurpose": purpose,
    });
    if let Some(purl) = purl {
        p["externalRefs"] = json!([{
            "referenceCategory": "PACKAGE-MANAGER",
            "referenceType": "purl",
            "referenceLocator": purl,
        }]);
    }
    p
}

fn rel(a: &str, kind: &str, b: &str) -> Value {
    json!({"spdxElementId": a, "relationshipType": kind, "relatedSpdxElement": b})
}

/// The SPDX ID of the image package.
const IMAGE_ID: &str = "SPDXRef-Image";

/// One SPDX package: its `SPDXID` and its JSON object.
struct SpdxPackage {
    /// `SPDXRef-…`, for relationships.
    id: String,
    /// The package object of the document's `packages`.
    json: Value,
}

/// The SPDX 2.3 JSON SBOM of one platform image. Deterministic: same input, same bytes.
pub fn spdx_sbom(i: &SbomInput<'_>) -> Vec<u8> {
    let main = main_module_package(i);
    let stdlib = stdlib_package(i);
    let mut packages = vec![image_package(i), main.json, stdlib.json];
    let mut relationships = vec![
        rel("SPDXRef-DOCUMENT", "DESCRIBES", IMAGE_ID),
        rel(IMAGE_ID, "CONTAINS", &main.id),
        rel(&main.id, "DEPENDS_ON", &stdlib.id),
    ];
    for (id, p) in dependency_packages(i) {
        relationships.push(rel(&main.id, "DEPENDS_ON", &id));
        packages.push(p);
    }
    let (base, relationship) = base_package(i);
    packages.push(base.json);
    relationships.push(rel(IMAGE_ID, relationship, &base.id));
    let doc = json!({
        "spdxVersion": "SPDX-2.3",
        "dataLicense": "CC0-1.0",
        "SPDXID": "SPDXRef-DOCUMENT",
        "name": format!("{}:{} {}", i.repository, i.tag, i.platform),
        "documentNamespace": format!(
            "https://spdx.org/spdxdocs/occm-forge/{}",
            i.manifest_digest.trim_start_matches("sha256:")
        ),
        "creationInfo": {
            "created": rfc3339(i.epoch),
            "creators": [format!("Tool: occm-forge-{}", env!("CARGO_PKG_VERSION"))],
        },
        "packages": packages,
        "relationships": relationships,
    });
    serde_json::to_vec(&doc).expect("JSON values serialise")
}

/// The image itself ([`IMAGE_ID`]): its repository and tag, a `pkg:oci` purl and the platform
/// manifest's digest as checksum.
fn image_package(i: &SbomInput<'_>) -> Value {
    let hex = i.manifest_digest.trim_start_matches("sha256:");
    let mut image = package(
        IMAGE_ID,
        i.repository,
        i.tag,
        Some(oci_purl(
            i.repository,
            i.manifest_digest,
            Some(i.arch),
            Some(i.tag),
        )),
        "CONTAINER",
    );
    image["checksums"] = json!([{"algorithm": "SHA256", "checksumValue": hex}]);
    image["supplier"] = json!(repository_supplier(i.repository));
    image
}

/// OCCM's main module at the upstream tag, downloaded from the upstream commit.
fn main_module_package(i: &SbomInput<'_>) -> SpdxPackage {
    let main = &i.build_info.main;
    let id = spdx_id("Package", &main.path, i.upstream_tag);
    let mut p = package(
        &id,
        &main.path,
        i.upstream_tag,
        Some(format!("pkg:golang/{}@{}", main.path, i.upstream_tag)),
        "APPLICATION",
    );
    p["downloadLocation"] = json!(format!("git+{}@{}", i.upstream_url, i.upstream_commit));
    p["supplier"] = json!(go_module_supplier(&main.path));
    SpdxPackage { id, json: p }
}

/// The Go standard library of the toolchain that built the binary, written as syft writes it
/// (anchore/syft, `syft/pkg/cataloger/golang/stdlib_package.go`): versionInfo `go1.26.8`, the
/// purl `pkg:golang/stdlib@1.26.8` (no `go` prefix: Trivy takes the purl's version and its Go
/// comparer refuses `go1.26.8` as malformed, so it would find no stdlib vulnerability at all),
/// and the CPE `cpe:2.3:a:golang:go:1.26.8:-:*:*:*:*:*:*` that Grype matches the standard
/// library by.
fn stdlib_package(i: &SbomInput<'_>) -> SpdxPackage {
    let go = i.build_info.go_version.trim_start_matches("go");
    // `go1.26.8 X:nocoverageredesign` and the like: the version is the first word.
    let go = go.split([' ', '-']).next().unwrap_or(go);
    let id = spdx_id("Package", "stdlib", go);
    let mut p = package(
        &id,
        "stdlib",
        &format!("go{go}"),
        Some(format!("pkg:golang/stdlib@{go}")),
        "LIBRARY",
    );
    p["externalRefs"]
        .as_array_mut()
        .expect("the purl reference")
        .push(json!({
            "referenceCategory": "SECURITY",
            "referenceType": "cpe23Type",
            "referenceLocator": go_cpe(go),
        }));
    p["supplier"] = json!(go_module_supplier("golang.org"));
    SpdxPackage { id, json: p }
}

/// The CPE 2.3 name of a Go release, as syft derives it (`generateStdlibCpe`): `1.26.8` →
/// `cpe:2.3:a:golang:go:1.26.8:-:*:*:*:*:*:*`; a pre-release `1.27rc1` →
/// `cpe:2.3:a:golang:go:1.27:rc1:*:*:*:*:*:*`.
fn go_cpe(go: &str) -> String {
    let split = go
        .find(|c: char| c.is_ascii_alphabetic())
        .unwrap_or(go.len());
    let (version, candidate) = go.split_at(split);
    let candidate = if candidate.is_empty() { "-" } else { candidate };
    format!("cpe:2.3:a:golang:go:{version}:{candidate}:*:*:*:*:*:*")
}

/// Every module linked in, by SPDX ID (so in ID order, each once): the replacement where a
/// module is replaced, or, for a directory replacement, the module path at the main module's
/// version.
fn dependency_packages(i: &SbomInput<'_>) -> BTreeMap<String, Value> {
    let main = &i.build_info.main;
    let mut deps: BTreeMap<String, Value> = BTreeMap::new();
    for d in &i.build_info.deps {
        let m = d.replace.as_deref().unwrap_or(d);
        if is_directory_replacement(&m.path) {
            // Part of the main module's source tree: the module path at the main module's version.
            let id = spdx_id("Package", &d.path, i.upstream_tag);
            let mut p = package(
                &id,
                &d.path,
                i.upstream_tag,
                Some(format!("pkg:golang/{}@{}", d.path, i.upstream_tag)),
                "LIBRARY",
            );
            p["supplier"] = json!(go_module_supplier(&main.path));
            p["downloadLocation"] = json!(format!(
                "git+{}@{}#{}",
                i.upstream_url,
                i.upstream_commit,
                m.path.trim_start_matches("./")
            ));
            p["comment"] = json!(format!(
                "replaced by the directory {} of {}",
                m.path, main.path
            ));
            deps.insert(id, p);
            continue;
        }
        let id = spdx_id("Package", &m.path, &m.version);
        let mut p = package(
            &id,
            &m.path,
            &m.version,
            Some(format!("pkg:golang/{}@{}", m.path, m.version)),
            "LIBRARY",
        );
        p["supplier"] = json!(go_module_supplier(&m.path));
        if !m.sum.is_empty() {
            p["comment"] = json!(format!("go.sum {}", m.sum));
        }
        deps.insert(id, p);
    }
    deps
}

/// The base the image is built on and how the image relates to it: a pulled base image the
/// image is `DESCENDANT_OF`, or occm-forge's static base it `CONTAINS`.
fn base_package(i: &SbomInput<'_>) -> (SpdxPackage, &'static str) {
    match i.base {
        Some((name, digest)) => {
            let id = "SPDXRef-BaseImage";
            let mut p = package(
                id,
                name,
                digest,
                Some(oci_purl(name, digest, Some(i.arch), None)),
                "CONTAINER",
            );
            p["checksums"] = json!([{"algorithm": "SHA256", "checksumValue": digest.trim_start_matches("sha256:")}]);
            p["supplier"] = json!(repository_supplier(name));
            let base = SpdxPackage {
                id: id.to_string(),
                json: p,
            };
            (base, "DESCENDANT_OF")
        }
        None => {
            let id = "SPDXRef-StaticBase";
            let mut p = package(
                id,
                "occm-forge static base",
                env!("CARGO_PKG_VERSION"),
                None,
                "OPERATING-SYSTEM",
            );
            p["comment"] = json!(crate::image::base::STATIC_HISTORY);
            p["supplier"] = json!("Organization: occm-forge");
            let base = SpdxPackage {
                id: id.to_string(),
                json: p,
            };
            (base, "CONTAINS")
        }
    }
}

/// One patch of the series, for provenance.
#[derive(Debug, Clone)]
pub struct PatchRef<'a> {
    /// File name.
    pub name: &'a str,
    /// sha256 hex of the file.
    pub sha256: &'a str,
}

/// What a build's provenance is made from.
#[derive(Debug, Clone)]
pub struct ProvenanceInput<'a> {
    /// Target repository.
    pub repository: &'a str,
    /// Image tag.
    pub tag: &'a str,
    /// The image index digest (the subject).
    pub index_digest: &'a str,
    /// Kubernetes minor.
    pub minor: &'a str,
    /// Upstream URL (images.toml `upstream`).
    pub upstream_url: &'a str,
    /// Upstream tag.
    pub upstream_tag: &'a str,
    /// Upstream commit.
    pub upstream_commit: &'a str,
    /// The patch series in order.
    pub patches: &'a [PatchRef<'a>],
    /// sha256 of the series.
    pub series_sha256: &'a str,
    /// Platforms.
    pub platforms: &'a [String],
    /// Platform → image manifest digest.
    pub manifests: &'a BTreeMap<String, String>,
    /// Go version.
    pub go_version: &'a str,
    /// Platform → the Go environment its binary was built with (`go::platforms_env`: `GOOS`,
    /// `GOARCH`, the architecture level such as `GOAMD64=v1`, `CGO_ENABLED`, `GOEXPERIMENT`,
    /// `GOFIPS140`, `GOFLAGS`), recorded as `internalParameters.env`.
    pub go_env: &'a BTreeMap<String, BTreeMap<String, String>>,
    /// `-ldflags` used.
    pub ldflags: &'a str,
    /// images.toml `go_overrides` (module path → version), recorded as
    /// `externalParameters.goOverrides` when there are any.
    pub go_overrides: &'a BTreeMap<String, String>,
    /// Base reference as configured and its digest (`None` for static).
    pub base: (&'a str, Option<&'a str>),
    /// The epoch used inside the image.
    pub epoch: i64,
}

/// The SLSA provenance v1 in-toto statement of a build.
pub fn slsa_provenance(i: &ProvenanceInput<'_>) -> Vec<u8> {
    let mut deps = vec![json!({
        "uri": format!("git+{}@refs/tags/{}", i.upstream_url, i.upstream_tag),
        "digest": {"gitCommit": i.upstream_commit},
    })];
    for p in i.patches {
        deps.push(json!({"name": p.name, "uri": format!("patches/{}", p.name), "digest": {"sha256": p.sha256}}));
    }
    match i.base {
        (name, Some(digest)) => deps.push(json!({
            "name": "base image",
            "uri": format!("oci://{}", name.split('@').next().unwrap_or(name)),
            "digest": {"sha256": digest.trim_start_matches("sha256:")},
        })),
        (name, None) => {
            deps.push(json!({"name": "base image", "uri": format!("occm-forge:{name}")}))
        }
    }
    let subjects: Vec<Value> = std::iter::once(json!({
        "name": format!("{}:{}", i.repository, i.tag),
        "digest": {"sha256": i.index_digest.trim_start_matches("sha256:")},
    }))
    .chain(i.manifests.iter().map(|(p, d)| {
        json!({"name": format!("{}:{} {p}", i.repository, i.tag), "digest": {"sha256": d.trim_start_matches("sha256:")}})
    }))
    .collect();
    let mut external = json!({
        "minor": i.minor,
        "upstream": {"url": i.upstream_url, "tag": i.upstream_tag},
        "patches": i.patches.iter().map(|p| p.name).collect::<Vec<_>>(),
        "patchSeriesSha256": i.series_sha256,
        "platforms": i.platforms,
        "repository": i.repository,
        "tag": i.tag,
        "base": i.base.0,
    });
    if !i.go_overrides.is_empty() {
        external["goOverrides"] = json!(i.go_overrides);
    }
    let statement = json!({
        "_type": "https://in-toto.io/Statement/v1",
        "subject": subjects,
        "predicateType": crate::signing::SLSA_PROVENANCE_V1,
        "predicate": {
            "buildDefinition": {
                "buildType": BUILD_TYPE,
                "externalParameters": external,
                "internalParameters": {
                    "goVersion": i.go_version,
                    "env": i.go_env,
                    "buildFlags": ["-trimpath", "-buildvcs=false"],
                    "ldflags": i.ldflags,
                    "sourceDateEpoch": i.epoch,
                },
                "resolvedDependencies": deps,
            },
            "runDetails": {
                "builder": {"id": BUILD_TYPE.replace(":build:", ":builder:"), "version": {"occm-forge": env!("CARGO_PKG_VERSION")}},
            },
        },
    });
    serde_json::to_vec(&statement).expect("JSON values serialise")
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::pipeline::go::build::Module;

    fn info() -> BuildInfo {
        BuildInfo {
            go_version: "go1.25.1".into(),
            path: "k8s.io/cloud-provider-openstack/cmd/openstack-cloud-controller-manager".into(),
            main: Module {
                path: "k8s.io/cloud-provider-openstack".into(),
                version: "(devel)".into(),
                sum: String::new(),
                replace: None,
            },
            deps: vec![
                Module {
                    path: "k8s.io/client-go".into(),
                    version: "v0.34.1".into(),
                    sum: "h1:x=".into(),
                    replace: None,
                },
                Module {
                    path: "github.com/a/b".into(),
                    version: "v1.0.0".into(),
                    sum: String::new(),
                    replace: None,
                },
            ],
        }
    }

    #[test]
    fn go_releases_get_the_cpe_syft_writes() {
        assert_eq!(go_cpe("1.26.8"), "cpe:2.3:a:golang:go:1.26.8:-:*:*:*:*:*:*");
        assert_eq!(
            go_cpe("1.27rc1"),
            "cpe:2.3:a:golang:go:1.27:rc1:*:*:*:*:*:*"
        );
    }

    #[test]
    fn suppliers_name_the_owner() {
        for (module, supplier) in [
            (
                "github.com/gophercloud/gophercloud/v2",
                "Organization: github.com/gophercloud",
            ),
            ("golang.org/x/net", "Organization: golang.org/x"),
            ("k8s.io/client-go", "Organization: k8s.io"),
            ("sigs.k8s.io/yaml", "Organization: sigs.k8s.io"),
            ("gopkg.in/yaml.v3", "Organization: gopkg.in"),
            (
                "gopkg.in/natefinch/lumberjack.v2",
                "Organization: gopkg.in/natefinch",
            ),
            ("golang.org", "Organization: golang.org"),
        ] {
            assert_eq!(go_module_supplier(module), supplier, "{module}");
        }
        for (repo, supplier) in [
            (
                "127.0.0.1:5000/occm/openstack-cloud-controller-manager",
                "Organization: 127.0.0.1:5000/occm",
            ),
            ("registry.example/occm", "Organization: registry.example"),
            (
                "registry.k8s.io/build-image/go-runner:v2.4.0-go1.25.1-bookworm.0@sha256:00",
                "Organization: registry.k8s.io/build-image",
            ),
        ] {
            assert_eq!(repository_supplier(repo), supplier, "{repo}");
        }
    }

    /// `replace k8s.io/x => ./staging/src/k8s.io/x`: the module path at the main module's
    /// version, not the directory at `(devel)`.
    #[test]
    fn directory_replacements_keep_the_module_path() {
        let mut bi = info();
        bi.deps.push(Module {
            path: "k8s.io/x".into(),
            version: "v0.0.0".into(),
            sum: String::new(),
            replace: Some(Box::new(Module {
                path: "./staging/src/k8s.io/x".into(),
                version: "(devel)".into(),
                sum: String::new(),
                replace: None,
            })),
        });
        let d = format!("sha256:{}", "a".repeat(64));
        let input = SbomInput {
            repository: "r.example/occm/openstack-cloud-controller-manager",
            tag: "v1.34.1-occmforge.1",
            platform: "linux/amd64",
            arch: "amd64",
            manifest_digest: &d,
            build_info: &bi,
            upstream_tag: "v1.34.1",
            upstream_commit: "63ec67a04b40fee4ff43fec11c3d31f2a90c9ad2",
            upstream_url: "https://github.com/kubernetes/cloud-provider-openstack",
            base: None,
            epoch: 0,
        };
        let v: Value = serde_json::from_slice(&spdx_sbom(&input)).unwrap();
        let packages = v["packages"].as_array().unwrap();
        let x = packages
            .iter()
            .find(|p| p["name"] == "k8s.io/x")
            .unwrap_or_else(|| panic!("no k8s.io/x package in {packages:?}"));
        assert_eq!(x["versionInfo"], "v1.34.1");
        assert_eq!(
            x["externalRefs"][0]["referenceLocator"],
            "pkg:golang/k8s.io/x@v1.34.1"
        );
        assert_eq!(
            x["downloadLocation"],
            "git+https://github.com/kubernetes/cloud-provider-openstack@63ec67a04b40fee4ff43fec11c3d31f2a90c9ad2#staging/src/k8s.io/x"
        );
        assert!(
            packages
                .iter()
                .all(|p| p["name"] != "./staging/src/k8s.io/x")
        );
        for p in packages {
            let supplier = p["supplier"].as_str().unwrap_or_default();
            assert!(supplier.starts_with("Organization: "), "{p}");
        }
    }

    #[test]
    fn sbom_is_deterministic_and_lists_modules() {
        let bi = info();
        let d = format!("sha256:{}", "a".repeat(64));
        let input = SbomInput {
            repository: "r.example/occm/openstack-cloud-controller-manager",
            tag: "v1.34.1-occmforge.1",
            platform: "linux/arm64",
            arch: "arm64",
            manifest_digest: &d,
            build_info: &bi,
            upstream_tag: "v1.34.1",
            upstream_commit: "63ec67a04b40fee4ff43fec11c3d31f2a90c9ad2",
            upstream_url: "https://github.com/kubernetes/cloud-provider-openstack",
            base: None,
            epoch: 0,
        };
        let a = spdx_sbom(&input);
        assert_eq!(a, spdx_sbom(&input));
        let v: Value = serde_json::from_slice(&a).unwrap();
        assert_eq!(v["spdxVersion"], "SPDX-2.3");
        assert_eq!(v["creationInfo"]["created"], "1970-01-01T00:00:00Z");
        let purls: Vec<&str> = v["packages"]
            .as_array()
            .unwrap()
            .iter()
            .filter_map(|p| p["externalRefs"][0]["referenceLocator"].as_str())
            .collect();
        assert!(
            purls.contains(&"pkg:golang/k8s.io/client-go@v0.34.1"),
            "{purls:?}"
        );
        assert!(
            purls[0].starts_with("pkg:oci/openstack-cloud-controller-manager@sha256%3Aaaaa"),
            "{purls:?}"
        );
        assert!(purls[0].contains("arch=arm64"));
        // Every relationship points at a package that exists.
        let ids: Vec<&str> = v["packages"]
            .as_array()
            .unwrap()
            .iter()
            .map(|p| p["SPDXID"].as_str().unwrap())
            .collect();
        for r in v["relationships"].as_array().unwrap() {
            let b = r["relatedSpdxElement"].as_str().unwrap();
            assert!(ids.contains(&b), "dangling {b}");
        }
    }
}
