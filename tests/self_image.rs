//! `occm-forge self-image`: occm-forge's own image for deploy/clusters/. A dynamically linked
//! binary is refused in one line; a statically linked one (a stdlib-only Go program here, built
//! offline, standing in for the static occm-forge the pipeline builds) is packaged on the static
//! base, pushed to a real docker-registry, and read back by skopeo and umoci: the entrypoint,
//! the user, the labels, and the binary runs from the unpacked root filesystem. Tags never move.

use crate::common;

use std::path::{Path, PathBuf};
use std::process::Command;

use common::*;

/// A statically linked stand-in that prints its arguments (CGO off: Go links statically).
fn static_binary(dir: &Path, greeting: &str) -> PathBuf {
    let src = dir.join(format!("src-{greeting}"));
    std::fs::create_dir_all(&src).unwrap();
    std::fs::write(
        src.join("go.mod"),
        "module example.invalid/standin\n\ngo 1.22\n",
    )
    .unwrap();
    std::fs::write(
        src.join("main.go"),
        format!(
            "package main\n\nimport (\n\t\"fmt\"\n\t\"os\"\n\t\"strings\"\n)\n\nfunc main() {{ fmt.Println(\"{greeting}\", strings.Join(os.Args[1:], \" \")) }}\n"
        ),
    )
    .unwrap();
    let out = dir.join(format!("occm-forge-{greeting}"));
    run(Command::new("go")
        .current_dir(&src)
        .args(["build", "-trimpath", "-o"])
        .arg(&out)
        .arg(".")
        .env("CGO_ENABLED", "0")
        .env("GOTOOLCHAIN", "local")
        .env("GOFLAGS", "-mod=mod")
        .env("GOPROXY", "off")
        .env("GOCACHE", dir.join("gocache")));
    out
}

/// `self-image --push` of `binary` as `0.1.0-0123456789ab` to `repo` on `reg`.
fn push(dir: &Path, binary: &Path, repo: &str, reg: &TestRegistry) -> std::process::Output {
    self_image(
        dir,
        &[
            "--binary",
            binary.to_str().unwrap(),
            "--tag",
            "0.1.0-0123456789ab",
            "--push",
            "--repository",
            repo,
            "--insecure-registry",
            &reg.addr,
        ],
    )
}

fn self_image(dir: &Path, args: &[&str]) -> std::process::Output {
    occm_forge(dir)
        .args([
            "self-image",
            "--source-url",
            "https://git.example/occm-forge",
        ])
        .args(["--revision", "0123456789abcdef0123456789abcdef01234567"])
        .args(args)
        .output()
        .unwrap()
}

#[test]
fn a_dynamically_linked_occm_forge_is_refused_in_one_line() {
    let dir = tempfile::tempdir().unwrap();
    // This test's occm-forge is linked as cargo links it here: dynamically.
    let o = self_image(dir.path(), &["--output", "out"]);
    assert_eq!(o.status.code(), Some(2), "{}", stderr(&o));
    let err = stderr(&o);
    let last = err.lines().last().unwrap();
    assert!(
        last.starts_with("occm-forge: error: self-image: ")
            && last.contains(": dynamically linked (it needs /")
            && last.contains("--features static"),
        "{err}"
    );
    assert!(!dir.path().join("out").exists(), "a layout was written");
}

#[test]
fn a_static_binary_is_packaged_pushed_and_runs_from_the_unpacked_image() {
    require_tool("skopeo");
    let dir = tempfile::tempdir().unwrap();
    let reg = TestRegistry::start();
    let binary = static_binary(dir.path(), "hello");
    let repo = reg.repo("occm/occm-forge");
    let o = push(dir.path(), &binary, &repo, &reg);
    assert!(o.status.success(), "{}", stderr(&o));
    let reference = stdout(&o).trim().to_string();
    let (tagged, digest) = reference.split_once('@').unwrap();
    assert_eq!(tagged, format!("{repo}:0.1.0-0123456789ab"));
    let raw = skopeo(&[
        "inspect",
        "--raw",
        "--tls-verify=false",
        &format!("docker://{repo}:0.1.0-0123456789ab"),
    ]);
    assert_eq!(format!("sha256:{}", sha256_hex(raw.as_bytes())), digest);
    let config: serde_json::Value = serde_json::from_str(&skopeo(&[
        "inspect",
        "--config",
        "--tls-verify=false",
        &format!("docker://{repo}:0.1.0-0123456789ab"),
    ]))
    .unwrap();
    let c = &config["config"];
    assert_eq!(
        c["Entrypoint"],
        serde_json::json!(["/usr/local/bin/occm-forge"])
    );
    assert!(c.get("Cmd").is_none_or(|v| v.is_null()), "{c}");
    assert_eq!(c["User"], "65532");
    assert_eq!(c["Labels"]["org.opencontainers.image.title"], "occm-forge");
    assert_eq!(
        c["Labels"]["org.opencontainers.image.revision"],
        "0123456789abcdef0123456789abcdef01234567"
    );
    assert_eq!(
        c["Labels"]["org.opencontainers.image.source"],
        "https://git.example/occm-forge"
    );
    let rootfs = pull_and_unpack(&repo, "0.1.0-0123456789ab", dir.path());
    let unpacked = rootfs.join("usr/local/bin/occm-forge");
    let mode = std::os::unix::fs::PermissionsExt::mode(
        &std::fs::metadata(&unpacked).unwrap().permissions(),
    );
    assert_eq!(mode & 0o777, 0o755);
    assert!(rootfs.join("etc/ssl/certs/ca-certificates.crt").is_file());
    let said = run(Command::new(&unpacked).args(["clusters", "--fix", "--watch"]));
    assert_eq!(said.trim(), "hello clusters --fix --watch");

    // The same bytes again: the tag already serves them, fine. Other bytes under the tag: no.
    let again = push(dir.path(), &binary, &repo, &reg);
    assert!(again.status.success(), "{}", stderr(&again));
    assert_eq!(
        stdout(&again).trim(),
        reference,
        "the same binary, the same digest"
    );
    let other = static_binary(dir.path(), "other");
    let o = push(dir.path(), &other, &repo, &reg);
    assert_eq!(o.status.code(), Some(8), "{}", stderr(&o));
    assert!(
        stderr(&o).contains(&format!("the tag already serves {digest}"))
            && stderr(&o).contains("tags never move"),
        "{}",
        stderr(&o)
    );
    let still = skopeo(&[
        "inspect",
        "--raw",
        "--tls-verify=false",
        &format!("docker://{repo}:0.1.0-0123456789ab"),
    ]);
    assert_eq!(still, raw, "the tag moved");
}
