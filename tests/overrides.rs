//! images.toml `go_overrides` on the fixture, offline: the Go module proxy is a file-based
//! `GOPROXY` serving a dependency at two versions. An override moves upstream's requirement
//! after the series; the tests and the build run under `-mod=readonly` on the go.mod and go.sum
//! the tool resolved; the SBOM, the provenance and the digest manifest name it. An override of a
//! module upstream does not require, or to a version the proxy does not serve, is one line
//! before any test runs, with the digest manifest unchanged.

use crate::common;

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use common::*;

const DEP: &str = "example.com/dep";

/// The proxy: `example.com/dep` v1.0.0 (upstream's) and v1.0.1 (the fix).
fn proxy(root: &Path) -> PathBuf {
    let proxy = root.join("goproxy");
    for v in ["v1.0.0", "v1.0.1"] {
        publish_module(
            &proxy,
            DEP,
            v,
            &[
                ("go.mod", "module example.com/dep\n\ngo 1.22\n"),
                (
                    "dep.go",
                    &format!(
                        "package dep\n\n// Version says which release this is.\nconst Version = \"{v}\"\n"
                    ),
                ),
            ],
        );
    }
    proxy
}

/// Releases `v1.36.0` in the fixture upstream: the command imports `example.com/dep` v1.0.0
/// (go.sum as Go computes it), and images.toml pins it as minor 1.36 with `overrides` (a TOML
/// inline table, or none).
fn release(f: &Fixture, proxy: &Path, overrides: &str) {
    let sums = tempfile::tempdir().unwrap();
    std::fs::write(sums.path().join("go.mod"), "module sums\n\ngo 1.22\n").unwrap();
    let mut cmd = Command::new("go");
    cmd.current_dir(sums.path())
        .args(["mod", "download", "-json", &format!("{DEP}@v1.0.0")])
        .env("GOMODCACHE", sums.path().join("mod"));
    file_proxy_env(&mut cmd, proxy);
    let info: serde_json::Value = serde_json::from_str(&run(&mut cmd)).unwrap();
    let _ = Command::new("chmod")
        .args(["-R", "u+w"])
        .arg(sums.path())
        .status();
    std::fs::write(
        f.upstream.join("go.sum"),
        format!(
            "{DEP} v1.0.0 {}\n{DEP} v1.0.0/go.mod {}\n",
            info["Sum"].as_str().unwrap(),
            info["GoModSum"].as_str().unwrap()
        ),
    )
    .unwrap();
    std::fs::write(
        f.upstream.join("go.mod"),
        format!("module k8s.io/cloud-provider-openstack\n\ngo 1.22\n\nrequire {DEP} v1.0.0\n"),
    )
    .unwrap();
    let main = f
        .upstream
        .join("cmd/openstack-cloud-controller-manager/main.go");
    let text = std::fs::read_to_string(&main).unwrap();
    let text = text
        .replacen("import (\n", "import (\n\t\"example.com/dep\"\n", 1)
        .replacen(
            "func main() {\n",
            "func main() {\n\tfmt.Printf(\"dep %s\\n\", dep.Version)\n",
            1,
        );
    std::fs::write(&main, text).unwrap();
    run(git(&f.upstream).args(["add", "-A"]));
    run(git(&f.upstream).args(["commit", "-q", "-m", "fixture v1.36.0"]));
    run(git(&f.upstream).args(["tag", "v1.36.0"]));
    let commit = run(git(&f.upstream).args(["rev-parse", "HEAD"]))
        .trim()
        .to_string();
    let mut cfg = std::fs::read_to_string(&f.config).unwrap();
    cfg.push_str(&format!(
        "\n[minors.\"1.36\"]\nupstream_tag = \"v1.36.0\"\ncommit = \"{commit}\"\ngo = \"{}\"\nbase = \"static\"\nplatforms = [\"linux/amd64\"]\nrevision = 1\npatches = [\"{PATCH_TEST}\", \"{PATCH_FIX}\"]\ntest_packages = [\"./pkg/...\"]\n{overrides}",
        local_go_version()
    ));
    std::fs::write(&f.config, cfg).unwrap();
}

fn build(f: &Fixture, proxy: &Path) -> Output {
    let mut cmd = occm_forge(f.path());
    cmd.args(["build", "--k8s", "1.36", "--source"])
        .arg(&f.upstream)
        .arg("--output")
        .arg(f.path().join("out"))
        .arg("--cache-dir")
        .arg(f.path().join("cache"));
    file_proxy_env(&mut cmd, proxy);
    cmd.output().unwrap()
}

#[test]
fn an_override_moves_the_requirement_and_every_record_names_it() {
    let f = fixture(&["linux/amd64"]);
    let proxy = proxy(f.path());
    release(
        &f,
        &proxy,
        &format!("go_overrides = {{ \"{DEP}\" = \"v1.0.1\" }}\n"),
    );
    let o = build(&f, &proxy);
    let err = stderr(&o);
    assert!(o.status.success(), "{err}");
    assert!(
        err.contains("occm-forge: overrides ") && err.contains(&format!("1 set ({DEP}@v1.0.1)")),
        "{err}"
    );
    let attest = f.path().join("out/attestations/v1.36.0-occmforge.1");
    let sbom: serde_json::Value =
        serde_json::from_slice(&std::fs::read(attest.join("sbom.linux-amd64.spdx.json")).unwrap())
            .unwrap();
    let dep = sbom["packages"]
        .as_array()
        .unwrap()
        .iter()
        .find(|p| p["name"] == DEP)
        .unwrap_or_else(|| panic!("no {DEP} in the SBOM: {sbom}"));
    assert_eq!(dep["versionInfo"], "v1.0.1", "{dep}");
    let provenance: serde_json::Value =
        serde_json::from_slice(&std::fs::read(attest.join("provenance.intoto.json")).unwrap())
            .unwrap();
    assert_eq!(
        provenance["predicate"]["buildDefinition"]["externalParameters"]["goOverrides"][DEP],
        "v1.0.1",
        "{provenance}"
    );
    let lock = read_lock(&f.lock);
    assert_eq!(
        lock["images"]["1.36"]["inputs"]["go_overrides"][DEP].as_str(),
        Some("v1.0.1"),
        "{lock:?}"
    );
    // Without the override the same tag would be another image: the tag guard names it.
    let cfg = std::fs::read_to_string(&f.config).unwrap();
    std::fs::write(
        &f.config,
        cfg.replace(
            &format!("go_overrides = {{ \"{DEP}\" = \"v1.0.1\" }}\n"),
            "",
        ),
    )
    .unwrap();
    let o = build(&f, &proxy);
    assert_eq!(o.status.code(), Some(9), "{}", stderr(&o));
    assert!(
        stderr(&o).contains(&format!("Go module overrides {DEP}@v1.0.1 → none")),
        "{}",
        stderr(&o)
    );
}

#[test]
fn an_override_upstream_does_not_require_or_the_proxy_does_not_serve_is_one_line() {
    for (overrides, expected) in [
        (
            "go_overrides = { \"example.com/other\" = \"v1.0.0\" }\n",
            "overrides: go_overrides: upstream's go.mod (v1.36.0) does not require `example.com/other`; an override only moves a module upstream requires or replaces".to_string(),
        ),
        (
            "go_overrides = { \"example.com/dep\" = \"v1.0.9\" }\n",
            format!("overrides: go_overrides: the Go module proxy does not serve {DEP}@v1.0.9: go: "),
        ),
    ] {
        let f = fixture(&["linux/amd64"]);
        let proxy = proxy(f.path());
        release(&f, &proxy, overrides);
        let before = std::fs::read(&f.lock).ok();
        let o = build(&f, &proxy);
        let err = stderr(&o);
        assert_eq!(o.status.code(), Some(4), "{err}");
        let last = err.lines().last().unwrap_or_default();
        assert!(
            last.starts_with(&format!("occm-forge: error: {expected}")),
            "{last}"
        );
        assert!(!err.contains(" test "), "tests ran: {err}");
        assert_eq!(std::fs::read(&f.lock).ok(), before, "the digest manifest changed");
        assert_eq!(stdout(&o), "");
    }
}
