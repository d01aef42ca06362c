//! The SBOM of a real fixture build is valid SPDX 2.3 (pyspdxtools) and meets the NTIA minimum
//! elements (ntia-checker: every package has a supplier); a module replaced by a directory of the
//! upstream tree is listed under its module path at the upstream tag; SBOM and provenance are
//! bit-identical across builds (they carry no wall-clock time).
//!
//! pyspdxtools (spdx-tools) and ntia-checker (ntia-conformance-checker) are the PyPI releases
//! pinned in scripts/spdx-tools.txt, which scripts/test installs into the virtualenv `.tools/spdx`.

use crate::common;

use std::path::{Path, PathBuf};
use std::process::Command;

use common::*;

fn spdx_tool(name: &str) -> PathBuf {
    let path = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join(".tools/spdx/bin")
        .join(name);
    assert!(
        path.is_file(),
        "`{name}` is not installed in .tools/spdx: run scripts/test, which installs the test dependencies"
    );
    path
}

/// A patch (made with `git format-patch`) that adds a staging module `k8s.io/x` under
/// `staging/src/k8s.io/x`, required by the command and replaced by that directory, as Kubernetes
/// does with its staging repositories.
fn staging_patch(f: &Fixture) -> (String, String) {
    let work = f.path().join("staging-work");
    run(git(f.path())
        .args(["clone", "-q"])
        .arg(&f.upstream)
        .arg(&work));
    run(git(&work).args(["checkout", "-q", "v1.34.1"]));
    let x = work.join("staging/src/k8s.io/x");
    std::fs::create_dir_all(&x).unwrap();
    std::fs::write(x.join("go.mod"), "module k8s.io/x\n\ngo 1.22\n").unwrap();
    std::fs::write(
        x.join("x.go"),
        "// Package x is a staging module.\npackage x\n\n// Name names it.\nvar Name = \"x\"\n",
    )
    .unwrap();
    let go_mod = std::fs::read_to_string(work.join("go.mod")).unwrap();
    std::fs::write(
        work.join("go.mod"),
        format!(
            "{go_mod}\nrequire k8s.io/x v0.0.0\n\nreplace k8s.io/x => ./staging/src/k8s.io/x\n"
        ),
    )
    .unwrap();
    std::fs::write(
        work.join("cmd/openstack-cloud-controller-manager/staging.go"),
        "package main\n\nimport \"k8s.io/x\"\n\nvar _ = x.Name\n",
    )
    .unwrap();
    run(git(&work).args(["add", "-A"]));
    run(git(&work).args(["commit", "-q", "-m", "add the staging module k8s.io/x"]));
    let name = "0003-add-the-staging-module-k8s.io-x.patch".to_string();
    let text = run(git(&work).args(["format-patch", "-1", "--stdout"]));
    (name, text)
}

fn build(f: &Fixture, out: &Path) {
    let o = occm_forge(f.path())
        .args(["build", "--k8s", "1.34", "--source"])
        .arg(&f.upstream)
        .arg("--output")
        .arg(out)
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", stderr(&o));
}

#[test]
fn sbom_is_valid_spdx_and_meets_the_ntia_minimum_elements() {
    let pyspdxtools = spdx_tool("pyspdxtools");
    let ntia_checker = spdx_tool("ntia-checker");
    let f = fixture(&["linux/amd64"]);
    let (name, text) = staging_patch(&f);
    f.add_patch("1.34", &name, &text);
    let out = f.path().join("out");
    build(&f, &out);
    let attest = out.join("attestations/v1.34.1-occmforge.1");
    let sbom = attest.join("sbom.linux-amd64.spdx.json");

    let o = Command::new(&pyspdxtools)
        .arg("-i")
        .arg(&sbom)
        .output()
        .unwrap();
    assert!(
        o.status.success(),
        "pyspdxtools: not valid SPDX:\n{}{}",
        stdout(&o),
        stderr(&o)
    );
    let o = Command::new(&ntia_checker)
        .args(["--comply", "ntia", "--output", "json"])
        .arg(&sbom)
        .output()
        .unwrap();
    assert!(
        o.status.success(),
        "ntia-checker: not NTIA-conformant:\n{}{}",
        stdout(&o),
        stderr(&o)
    );
    let report: serde_json::Value = serde_json::from_slice(&o.stdout)
        .unwrap_or_else(|e| panic!("ntia-checker's report is not JSON ({e}): {}", stdout(&o)));
    assert_eq!(report["isNtiaConformant"], true, "{report}");

    let doc: serde_json::Value = serde_json::from_slice(&std::fs::read(&sbom).unwrap()).unwrap();
    let packages = doc["packages"].as_array().unwrap();
    for p in packages {
        assert!(
            p["supplier"]
                .as_str()
                .is_some_and(|s| s.starts_with("Organization: ")),
            "package without a supplier: {p}"
        );
    }
    let x = packages
        .iter()
        .find(|p| p["name"] == "k8s.io/x")
        .unwrap_or_else(|| panic!("no package k8s.io/x: {packages:?}"));
    assert_eq!(x["versionInfo"], "v1.34.1", "{x}");
    assert_eq!(
        x["externalRefs"][0]["referenceLocator"], "pkg:golang/k8s.io/x@v1.34.1",
        "{x}"
    );
    assert!(
        packages
            .iter()
            .all(|p| !p["name"].as_str().unwrap().starts_with("./")),
        "a directory as a package name: {packages:?}"
    );

    // A second build: the same SBOM and provenance bytes (docs/building.md: no wall-clock time in
    // either).
    let out2 = f.path().join("out2");
    build(&f, &out2);
    let attest2 = out2.join("attestations/v1.34.1-occmforge.1");
    for file in ["sbom.linux-amd64.spdx.json", "provenance.intoto.json"] {
        assert_eq!(
            std::fs::read(attest.join(file)).unwrap(),
            std::fs::read(attest2.join(file)).unwrap(),
            "{file} differs between two builds"
        );
    }
}

/// `.tools/bin/sbom-scanners` (scripts/sbom-scanners, built by scripts/test): Trivy's and Grype's
/// own SBOM decoders and Go version comparers.
fn scanners() -> PathBuf {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join(".tools/bin/sbom-scanners");
    assert!(
        path.is_file(),
        "`sbom-scanners` is not installed in .tools/bin: run scripts/test, which builds it from scripts/sbom-scanners"
    );
    path
}

/// Each scanner's reading of `package` in `sbom` against the range `range`, by scanner name.
fn scan(sbom: &Path, package: &str, range: &str) -> Vec<serde_json::Value> {
    let o = Command::new(scanners())
        .arg(sbom)
        .args([package, range])
        .output()
        .unwrap();
    let lines: Vec<serde_json::Value> = stdout(&o)
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(lines.len(), 2, "{}{}", stdout(&o), stderr(&o));
    lines
}

/// Trivy and Grype, reading the SBOM of a real fixture build with their own code, find the Go
/// standard library at the Go that built the binary, inside a vulnerable range that ends at the
/// next patch release and outside one that ends at this one. Before the stdlib purl lost its `go`
/// prefix, Trivy refused `go1.26.8` as malformed and so reported no stdlib vulnerability at all.
#[test]
fn trivy_and_grype_read_the_standard_library_at_the_go_that_built_it() {
    let f = fixture(&["linux/amd64"]);
    let out = f.path().join("out");
    build(&f, &out);
    let sbom = out.join("attestations/v1.34.1-occmforge.1/sbom.linux-amd64.spdx.json");
    let go = local_go_version();
    let (minor, patch) = go.rsplit_once('.').unwrap();
    let next = format!("{minor}.{}", patch.parse::<u32>().unwrap() + 1);

    for r in scan(&sbom, "stdlib", &format!("< {next}")) {
        assert_eq!(r["error"], serde_json::Value::Null, "{r}");
        assert_eq!(r["in_range"], true, "go{go} is before {next}: {r}");
        let seen = r["version"].as_str().unwrap();
        assert_eq!(seen.trim_start_matches(['v', 'g', 'o']), go, "{r}");
    }
    for r in scan(&sbom, "stdlib", &format!("< {go}")) {
        assert_eq!(r["in_range"], false, "go{go} is not before itself: {r}");
    }
    // Grype matches the standard library by its CPE, too.
    let grype = &scan(&sbom, "stdlib", &format!("< {next}"))[1];
    assert_eq!(
        grype["cpes"][0],
        format!("cpe:2.3:a:golang:go:{go}:-:*:*:*:*:*:*"),
        "{grype}"
    );
}
