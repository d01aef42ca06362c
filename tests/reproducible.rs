//! The same inputs give the same bytes, whatever the caller's environment and whatever the
//! layout's history: Go settings in the environment of occm-forge (GOAMD64, GOARM64,
//! GOEXPERIMENT, GODEBUG, …) never reach a build, and `out/index.json` does not depend on the
//! order in which images and referrers were written.

use crate::common;

use std::path::Path;
use std::process::{Command, Output};

use common::*;
use occm_forge_accept::binary::extract_from_layout;
use occm_forge_core::config::Platform;

fn forge(f: &Fixture, args: &[&str]) -> Command {
    let mut c = occm_forge(f.path());
    c.args(["build", "--source"]).arg(&f.upstream).args(args);
    c
}

fn ok(o: &Output) {
    assert!(
        o.status.success(),
        "exit {:?}\n{}",
        o.status.code(),
        stderr(o)
    );
}

/// The `build` settings of `go version -m` for `platform`'s binary in the layout `out`.
fn build_settings(f: &Fixture, out: &Path, platform: &str) -> Vec<String> {
    let p: Platform = platform.parse().unwrap();
    let dest = f
        .path()
        .join(format!("occm-{}", platform.replace('/', "-")));
    extract_from_layout(out, "v1.34.1-occmforge.1", &p, &dest).unwrap();
    let text = run(Command::new("go")
        .args(["version", "-m"])
        .arg(&dest)
        .env("GOTOOLCHAIN", "local"));
    text.lines()
        .filter_map(|l| l.trim().strip_prefix("build\t"))
        .map(str::to_string)
        .collect()
}

/// The digest the lock records for 1.34.
fn digest(f: &Fixture) -> String {
    read_lock(&f.lock)["images"]["1.34"]["digest"]
        .as_str()
        .unwrap()
        .to_string()
}

#[test]
fn go_settings_in_the_environment_do_not_reach_the_build() {
    let f = fixture(&["linux/amd64", "linux/arm64"]);
    let out = f.path().join("out");
    let plain = forge(&f, &["--k8s", "1.34"]).output().unwrap();
    ok(&plain);
    let plain_digest = digest(&f);
    let plain_amd64 = build_settings(&f, &out, "linux/amd64");
    let plain_arm64 = build_settings(&f, &out, "linux/arm64");
    for (settings, want) in [(&plain_amd64, "GOAMD64=v1"), (&plain_arm64, "GOARM64=v8.0")] {
        assert!(settings.iter().any(|s| s == want), "{settings:?}");
    }

    // Every Go setting that changes code generation or behaviour defaults, set by the caller.
    let leaky = forge(&f, &["--k8s", "1.34", "--force"])
        .env("GOAMD64", "v3")
        .env("GOARM64", "v9.0")
        .env("GOEXPERIMENT", "nogreenteagc")
        .env("GODEBUG", "panicnil=1")
        .env("GOFIPS140", "latest")
        .env("GO111MODULE", "off")
        .env("GOROOT_FINAL", "/elsewhere")
        .env("GOCOMPILEDEBUG", "loopvar=1")
        .output()
        .unwrap();
    ok(&leaky);
    assert_eq!(stdout(&leaky), stdout(&plain));
    assert_eq!(
        digest(&f),
        plain_digest,
        "the caller's Go environment changed the image"
    );
    assert_eq!(build_settings(&f, &out, "linux/amd64"), plain_amd64);
    assert_eq!(build_settings(&f, &out, "linux/arm64"), plain_arm64);

    // The provenance records the Go environment each platform was built with.
    let statement: serde_json::Value = serde_json::from_slice(
        &std::fs::read(out.join("attestations/v1.34.1-occmforge.1/provenance.intoto.json"))
            .unwrap(),
    )
    .unwrap();
    let env = &statement["predicate"]["buildDefinition"]["internalParameters"]["env"];
    for (platform, var, value) in [
        ("linux/amd64", "GOAMD64", "v1"),
        ("linux/amd64", "GOARCH", "amd64"),
        ("linux/arm64", "GOARM64", "v8.0"),
        ("linux/arm64", "CGO_ENABLED", "0"),
        ("linux/arm64", "GOEXPERIMENT", ""),
        ("linux/arm64", "GOFIPS140", "off"),
        ("linux/amd64", "GOFLAGS", "-mod=readonly"),
    ] {
        assert_eq!(env[platform][var], value, "{platform} {var}: {env}");
    }
    assert!(env["linux/amd64"].get("GOARM64").is_none(), "{env}");
}

/// The layout's index.json of `out`.
fn index_json(out: &Path) -> Vec<u8> {
    std::fs::read(out.join("index.json")).unwrap()
}

#[test]
fn the_layout_index_does_not_depend_on_history() {
    let f = fixture(&["linux/amd64"]);
    let out = f.path().join("out");
    ok(&forge(&f, &["--k8s", "1.34"]).output().unwrap());
    let first = index_json(&out);
    for round in ["first --force", "second --force"] {
        ok(&forge(&f, &["--k8s", "1.34", "--force"]).output().unwrap());
        assert_eq!(
            String::from_utf8_lossy(&index_json(&out)),
            String::from_utf8_lossy(&first),
            "{round}"
        );
    }

    // Two minors into fresh layouts, in both orders.
    let build_into = |out: &Path, minors: [&str; 2]| {
        for m in minors {
            let o = forge(&f, &["--k8s", m, "--force", "--output"])
                .arg(out)
                .output()
                .unwrap();
            ok(&o);
        }
        index_json(out)
    };
    let ab = build_into(&f.path().join("out-ab"), ["1.33", "1.34"]);
    let ba = build_into(&f.path().join("out-ba"), ["1.34", "1.33"]);
    assert_eq!(String::from_utf8_lossy(&ab), String::from_utf8_lossy(&ba));
}
