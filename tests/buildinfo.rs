//! Build information read from a Go binary by occm-forge itself equals what `go version -m`
//! prints for it: main module, every dependency with its version and sum, and replacements
//! (a directory replace too), on a binary the real Go toolchain built offline.

use crate::common;

use std::process::Command;

use common::*;
use occm_forge_core::pipeline::go::build::parse_version_m;
use occm_forge_core::pipeline::go::buildinfo;

#[test]
fn the_binary_itself_says_what_go_version_m_says() {
    let dir = tempfile::tempdir().unwrap();
    let m = dir.path();
    std::fs::create_dir_all(m.join("staging/lib")).unwrap();
    std::fs::write(
        m.join("go.mod"),
        "module k8s.io/cloud-provider-openstack\n\ngo 1.22\n\nrequire k8s.io/lib v0.0.0\n\nreplace k8s.io/lib => ./staging/lib\n",
    )
    .unwrap();
    std::fs::write(
        m.join("staging/lib/go.mod"),
        "module k8s.io/lib\n\ngo 1.22\n",
    )
    .unwrap();
    std::fs::write(m.join("staging/lib/lib.go"), "package lib\n\nvar X = 1\n").unwrap();
    std::fs::write(
        m.join("main.go"),
        "package main\n\nimport \"k8s.io/lib\"\n\nfunc main() { println(lib.X) }\n",
    )
    .unwrap();
    let go = |args: &[&str]| {
        let mut c = Command::new("go");
        c.current_dir(m)
            .env("GOTOOLCHAIN", "local")
            .env("GOPROXY", "off")
            .env("GOFLAGS", "-mod=mod")
            .env("GOWORK", "off")
            .env("CGO_ENABLED", "0")
            .args(args);
        c
    };
    run(&mut go(&["build", "-trimpath", "-o", "occm", "."]));
    let text = run(&mut go(&["version", "-m", "occm"]));
    let want = parse_version_m(&text).unwrap();
    let got = buildinfo::read_file(&m.join("occm")).unwrap();
    assert_eq!(got, want);
    assert_eq!(got.deps[0].replace.as_ref().unwrap().path, "./staging/lib");
}
