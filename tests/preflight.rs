//! Failures named by their cause, before the long stages: a Go toolchain the module proxy
//! refuses (exit 6, naming the module and the proxy's answer, before the source stage), what
//! `--accept` needs from this machine (exit 16, every missing tool in one line, before any Go
//! test or build), a full `--output` (named with its room, before the build, and when it fills
//! during the build the blob being written is named, not the cache file it came from), a base
//! whose platform entry is itself an image index (buildx with attestations), and `doctor`, the
//! same checks as a table.

use crate::common;

use std::io::{BufRead, BufReader, Write};
use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use common::*;

fn build(f: &Fixture, extra: &[&str]) -> Command {
    let mut c = occm_forge(f.path());
    c.args(["build", "--k8s", "1.34", "--source"])
        .arg(&f.upstream)
        .args(extra);
    c
}

/// The stage names on stderr (`occm-forge: source  0.1s …`).
fn stages(o: &Output) -> Vec<String> {
    stderr(o)
        .lines()
        .filter_map(|l| l.strip_prefix("occm-forge: "))
        .filter_map(|l| {
            let mut words = l.split_whitespace();
            let stage = words.next()?;
            words
                .next()
                .filter(|t| t.ends_with('s') && t[..t.len() - 1].parse::<f64>().is_ok())
                .map(|_| stage.to_string())
        })
        .collect()
}

fn last_line(o: &Output) -> String {
    stderr(o).lines().last().unwrap_or_default().to_string()
}

/// Sets the fixture's Go for 1.34 to `go`.
fn pin_go(f: &Fixture, go: &str) {
    let text = std::fs::read_to_string(&f.config).unwrap();
    let at = text.find("[minors.\"1.34\"]").unwrap();
    let local = local_go_version();
    let fixed = format!(
        "{}{}",
        &text[..at],
        text[at..].replacen(&format!("go = \"{local}\""), &format!("go = \"{go}\""), 1)
    );
    assert_ne!(fixed, text);
    std::fs::write(&f.config, fixed).unwrap();
}

/// A stand-in of the Go module proxy as this machine's proxy answers for a Go release it does not
/// serve (`https://proxy.golang.org/golang.org/toolchain/@v/v0.0.1-go1.25.99.linux-amd64.info`:
/// HTTP 403, `This module version is not available.`, seen on 2026-12-07): every request is
/// answered so. Returns its URL.
fn refusing_module_proxy() -> String {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    std::thread::spawn(move || {
        for conn in listener.incoming().flatten() {
            let mut reader = BufReader::new(conn.try_clone().unwrap());
            let mut line = String::new();
            while reader.read_line(&mut line).is_ok_and(|n| n > 2) {
                line.clear();
            }
            let body = "This module version is not available.\n";
            let mut conn = conn;
            let _ = write!(
                conn,
                "HTTP/1.1 403 Forbidden\r\nContent-Type: text/plain; charset=utf-8\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
                body.len()
            );
        }
    });
    url
}

#[test]
fn a_toolchain_the_module_proxy_refuses_is_exit_6_before_the_source_stage() {
    let f = fixture(&["linux/amd64"]);
    let before = f.seed_lock();
    pin_go(&f, "1.25.99");
    let proxy = refusing_module_proxy();
    let o = build(&f, &[])
        .env("GOPROXY", &proxy)
        .env("GOSUMDB", "off")
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(6), "{}", stderr(&o));
    let line = last_line(&o);
    let host = occm_forge_core::image::elf::host_platform().unwrap();
    let module = format!(
        "golang.org/toolchain@v0.0.1-go1.25.99.{}-{}",
        host.os, host.arch
    );
    assert!(
        line.starts_with(
            "occm-forge: error: preflight: Go toolchain go1.25.99: the module proxy does not give "
        ) && line.contains(&module)
            && line.contains("403 Forbidden (This module version is not available)")
            && line.contains("occm-forge pin --k8s <minor> --go"),
        "{line}"
    );
    assert_eq!(stages(&o), ["inputs"], "{}", stderr(&o));
    assert_eq!(std::fs::read(&f.lock).unwrap(), before);
}

/// A `go` in front of the real one on PATH that records every command line it is given.
fn recording_go(dir: &Path) -> (PathBuf, PathBuf) {
    let bin = dir.join("recording-bin");
    std::fs::create_dir_all(&bin).unwrap();
    let log = dir.join("go-calls.log");
    let real = run(Command::new("sh").args(["-c", "command -v go"]))
        .trim()
        .to_string();
    let go = bin.join("go");
    std::fs::write(
        &go,
        format!(
            "#!/bin/sh\necho \"$*\" >> '{}'\nexec '{real}' \"$@\"\n",
            log.display()
        ),
    )
    .unwrap();
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(&go, std::fs::Permissions::from_mode(0o755)).unwrap();
    (bin, log)
}

/// PATH with `first` before this PATH's directories, leaving out those that hold helm (scripts/test
/// puts none on PATH; a developer's machine may have one).
fn path_without_helm(first: &Path) -> std::ffi::OsString {
    let dirs = std::env::split_paths(&std::env::var_os("PATH").unwrap_or_default())
        .filter(|d| !d.join("helm").exists())
        .collect::<Vec<_>>();
    std::env::join_paths(std::iter::once(first.to_path_buf()).chain(dirs)).unwrap()
}

#[test]
fn build_accept_without_its_tools_names_every_missing_one_before_any_go_test_or_build() {
    let f = fixture(&["linux/amd64"]);
    let before = f.seed_lock();
    let (bin, log) = recording_go(f.path());
    let home = f.path().join("home");
    std::fs::create_dir_all(&home).unwrap();
    // This machine as a new user's: no helm, no magnum-cluster-api, no module proxy, no envtest.
    let bare = |mut c: Command| {
        c.env("PATH", path_without_helm(&bin))
            .env("HOME", &home)
            .env_remove("OCCM_FORGE_HELM")
            .env_remove("KUBEBUILDER_ASSETS")
            .env_remove("XDG_DATA_HOME")
            .env("OCCM_FORGE_MCAPI_PYTHON", f.path().join("no-such-python3"));
        c.output().unwrap()
    };
    let o = bare(build(&f, &["--accept"]));
    assert_eq!(o.status.code(), Some(16), "{}", stderr(&o));
    let line = last_line(&o);
    assert!(
        line.starts_with("occm-forge: error: preflight: 3 prerequisites are missing: (1) helm: no helm on PATH (magnum-cluster-api's renderer runs `helm template`); install helm v3 onto PATH")
            && line.contains("(2) magnum-cluster-api: ")
            && line.contains("cannot import magnum-cluster-api 0.38.2")
            && line.contains("pip install --no-deps magnum-cluster-api==0.38.2")
            && line.contains("(3) etcd, kube-apiserver, Cluster API: GOPROXY is off and ")
            && line.contains("OCCM_FORGE_HELM"),
        "{line}"
    );
    assert_eq!(stages(&o), ["inputs"], "{}", stderr(&o));
    let calls = std::fs::read_to_string(&log).unwrap_or_default();
    assert!(
        calls
            .lines()
            .all(|c| c.starts_with("env ") || c.starts_with("list -m")),
        "a Go test or build ran before the missing tools were named: {calls}"
    );
    assert_eq!(std::fs::read(&f.lock).unwrap(), before);

    // doctor says the same as a table, with what is there; without --accept nothing is missing.
    let doctor = |extra: &[&str]| {
        let mut c = occm_forge(f.path());
        c.args(["doctor", "--k8s", "1.34"]).args(extra);
        bare(c)
    };
    let o = doctor(&["--accept"]);
    assert_eq!(o.status.code(), Some(16), "{}", stderr(&o));
    let table = stdout(&o);
    let row = |name: &str| {
        table
            .lines()
            .find(|l| l.starts_with(name))
            .unwrap_or_else(|| panic!("no {name} row in\n{table}"))
            .to_string()
    };
    assert!(table.starts_with("CHECK "), "{table}");
    let go = local_go_version();
    assert!(
        row("go ").contains(&format!("ok       go{go} on PATH")),
        "{table}"
    );
    assert!(
        row(&format!("Go toolchain go{go}")).contains("the local go"),
        "{table}"
    );
    assert!(row("cache directory").contains(" ok "), "{table}");
    assert!(row("room in the cache").contains(" free of "), "{table}");
    for missing in [
        "helm",
        "magnum-cluster-api",
        "etcd, kube-apiserver, Cluster API",
    ] {
        assert!(row(missing).contains("--accept  MISSING  "), "{table}");
    }
    let o = doctor(&[]);
    assert_eq!(o.status.code(), Some(0), "{}", stdout(&o));
    assert!(!stdout(&o).contains("MISSING"), "{}", stdout(&o));
    assert!(!stdout(&o).contains("helm"), "{}", stdout(&o));
}

/// Runs `cmd` in a mount namespace of its own where `dir` is a tmpfs of `size`; `then` runs in it
/// first (a shell line, `$OUT` naming `dir`).
fn on_tmpfs(cmd: &Command, dir: &Path, size: &str, then: &str) -> Output {
    require_tool("unshare");
    std::fs::create_dir_all(dir).unwrap();
    let mut c = Command::new("unshare");
    c.args(["-rm", "sh", "-c"])
        .arg(format!(
            "set -e\nmount -t tmpfs -o size={size} tmpfs \"$OUT\"\n{then}\nexec \"$@\""
        ))
        .arg("sh")
        .arg(cmd.get_program())
        .args(cmd.get_args())
        .env("OUT", dir);
    for (k, v) in cmd.get_envs() {
        match v {
            Some(v) => c.env(k, v),
            None => c.env_remove(k),
        };
    }
    c.current_dir(cmd.get_current_dir().unwrap());
    c.output().unwrap()
}

#[test]
fn a_full_output_directory_is_named_with_its_room() {
    let f = fixture(&["linux/amd64"]);
    let before = f.seed_lock();
    let out = f.path().join("small-out");

    // Too small from the start: said before any stage runs.
    let o = on_tmpfs(
        &build(&f, &["--output", out.to_str().unwrap()]),
        &out,
        "1m",
        "",
    );
    assert_eq!(o.status.code(), Some(16), "{}", stderr(&o));
    let line = last_line(&o);
    assert_eq!(
        line,
        format!(
            "occm-forge: error: preflight: room in --output: {o} is on {o} (1.0 MiB free of 1.0 MiB), and a build needs about 256.0 MiB there; free some room there, or choose another directory",
            o = out.display()
        )
    );
    assert_eq!(stages(&o), ["inputs"], "{}", stderr(&o));

    // Room enough at first, filled while Go builds (a `go` that fills it before building): the
    // blob being written is named, with the room left where it goes.
    let (bin, _) = recording_go(f.path());
    let filler = bin.join("go");
    let real = std::fs::read_to_string(&filler).unwrap();
    std::fs::write(
        &filler,
        real.replace(
            "exec ",
            "if [ \"$1\" = build ]; then fallocate -l $(( $(df --output=avail -B1 \"$OUT\" | tail -n1) - 32768 )) \"$OUT/filler\"; fi\nexec ",
        ),
    )
    .unwrap();
    let mut cmd = build(&f, &["--output", out.to_str().unwrap()]);
    cmd.env("PATH", path_without_helm(&bin));
    let o = on_tmpfs(&cmd, &out, "300m", "");
    assert_eq!(o.status.code(), Some(7), "{}", stderr(&o));
    let line = last_line(&o);
    assert!(
        line.starts_with(&format!(
            "occm-forge: error: image: image layout: {}/blobs/sha256/",
            out.display()
        )) && line.contains("No space left on device")
            && line.ends_with(&format!(
                "; it is on {} (32.0 KiB free of 300.0 MiB)",
                out.display()
            )),
        "{line}"
    );
    assert_eq!(std::fs::read(&f.lock).unwrap(), before);
}

/// The fixture's image on a base whose index lists, per platform, an image index holding the
/// platform's image manifest and an attestation manifest (`unknown/unknown`), as buildx pushes
/// an image built with SBOM or provenance attestations (CodesWhat/drydock#814, #816): it builds,
/// on the platform's own image manifest; a nested index without the platform is refused before
/// any stage.
#[test]
fn a_base_whose_platform_entry_is_an_image_index_is_followed_to_its_manifest() {
    let f = fixture(&["linux/amd64"]);
    let reg = TestRegistry::start();
    let repo = reg.repo("base/nested");
    let flat = push_base(f.path(), &repo, "flat");
    let name = "base/nested";
    let manifest = skopeo(&[
        "inspect",
        "--tls-verify=false",
        "--raw",
        &format!("docker://{repo}@{flat}"),
    ]);
    let empty = reg.put_blob(name, b"{}");
    let statement = br#"{"_type":"https://in-toto.io/Statement/v0.1","predicateType":"https://spdx.dev/Document","subject":[]}"#;
    let layer = reg.put_blob(name, statement);
    let attestation = format!(
        r#"{{"schemaVersion":2,"mediaType":"application/vnd.oci.image.manifest.v1+json","config":{{"mediaType":"application/vnd.oci.empty.v1+json","digest":"{empty}","size":2}},"layers":[{{"mediaType":"application/vnd.in-toto+json","digest":"{layer}","size":{},"annotations":{{"in-toto.io/predicate-type":"https://spdx.dev/Document"}}}}]}}"#,
        statement.len()
    );
    let attestation_digest = reg.put_manifest(
        name,
        &format!("sha256:{}", sha256_hex(attestation.as_bytes())),
        "application/vnd.oci.image.manifest.v1+json",
        attestation.as_bytes(),
    );
    let inner = |platform: &str| {
        format!(
            r#"{{"schemaVersion":2,"mediaType":"application/vnd.oci.image.index.v1+json","manifests":[{{"mediaType":"application/vnd.oci.image.manifest.v1+json","digest":"{flat}","size":{},"platform":{{"architecture":"{platform}","os":"linux"}}}},{{"mediaType":"application/vnd.oci.image.manifest.v1+json","digest":"{attestation_digest}","size":{},"annotations":{{"vnd.docker.reference.digest":"{flat}","vnd.docker.reference.type":"attestation-manifest"}},"platform":{{"architecture":"unknown","os":"unknown"}}}}]}}"#,
            manifest.len(),
            attestation.len()
        )
    };
    let push_top = |tag: &str, inner_platform: &str| {
        let inner = inner(inner_platform);
        let inner_digest = reg.put_manifest(
            name,
            &format!("sha256:{}", sha256_hex(inner.as_bytes())),
            "application/vnd.oci.image.index.v1+json",
            inner.as_bytes(),
        );
        let top = format!(
            r#"{{"schemaVersion":2,"mediaType":"application/vnd.oci.image.index.v1+json","manifests":[{{"mediaType":"application/vnd.oci.image.index.v1+json","digest":"{inner_digest}","size":{},"platform":{{"architecture":"amd64","os":"linux"}}}}]}}"#,
            inner.len()
        );
        reg.put_manifest(
            name,
            tag,
            "application/vnd.oci.image.index.v1+json",
            top.as_bytes(),
        )
    };
    let nested = push_top("nested", "amd64");
    let o = build(
        &f,
        &[
            "--base",
            &format!("{repo}:nested@{nested}"),
            "--insecure-registry",
            &reg.addr,
        ],
    )
    .output()
    .unwrap();
    assert!(o.status.success(), "{}", stderr(&o));
    // Our linux/amd64 image stands on the base's own linux/amd64 image manifest.
    let layout = f.path().join("out");
    let ours = |layout: &Path| {
        let index: serde_json::Value =
            serde_json::from_slice(&std::fs::read(layout.join("index.json")).unwrap()).unwrap();
        let top = index["manifests"][0]["digest"]
            .as_str()
            .unwrap()
            .to_string();
        let blob = |d: &str| {
            std::fs::read(
                layout
                    .join("blobs/sha256")
                    .join(d.trim_start_matches("sha256:")),
            )
            .unwrap()
        };
        let top: serde_json::Value = serde_json::from_slice(&blob(&top)).unwrap();
        let m: serde_json::Value =
            serde_json::from_slice(&blob(top["manifests"][0]["digest"].as_str().unwrap())).unwrap();
        m["annotations"]["org.opencontainers.image.base.digest"]
            .as_str()
            .unwrap()
            .to_string()
    };
    assert_eq!(
        ours(&layout),
        flat,
        "our linux/amd64 image does not name the base's linux/amd64 image manifest as its base"
    );

    // A nested index without the platform: named before any stage.
    let wrong = push_top("wrong", "arm64");
    let before = f.seed_lock();
    let o = build(
        &f,
        &[
            "--base",
            &format!("{repo}:wrong@{wrong}"),
            "--insecure-registry",
            &reg.addr,
            "--force",
        ],
    )
    .output()
    .unwrap();
    assert_eq!(o.status.code(), Some(7), "{}", stderr(&o));
    let line = last_line(&o);
    assert!(
        line.starts_with(&format!(
            "occm-forge: error: image: base {repo}:wrong@{wrong}: has no linux/amd64 image in the nested index sha256:"
        )),
        "{line}"
    );
    assert_eq!(stages(&o), ["inputs"], "{}", stderr(&o));
    assert_eq!(std::fs::read(&f.lock).unwrap(), before);
}

/// A cache occm-forge cannot write (here a file where the directory should be) is named as such,
/// exit 16, not blamed on the Go toolchain (break-it pass: "cannot run go: Not a directory").
#[test]
fn a_cache_that_cannot_be_written_is_named_before_any_stage() {
    let f = fixture(&["linux/amd64"]);
    let before = f.seed_lock();
    let file = f.path().join("not-a-directory");
    std::fs::write(&file, "").unwrap();
    let o = build(&f, &[])
        .env("OCCM_FORGE_CACHE", &file)
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(16), "{}", stderr(&o));
    let line = last_line(&o);
    assert!(
        line.starts_with(&format!(
            "occm-forge: error: preflight: cache directory: cannot write to {}: ",
            file.display()
        )) && !line.contains("toolchain"),
        "{line}"
    );
    assert_eq!(stages(&o), ["inputs"], "{}", stderr(&o));
    assert_eq!(std::fs::read(&f.lock).unwrap(), before);
}

/// A base with one platform's image asked for two is refused before any stage, from its
/// config's `os`/`architecture` (break-it pass: found only at the image stage, after the Go
/// build).
#[test]
fn a_base_without_one_of_the_platforms_is_refused_before_any_stage() {
    let f = fixture(&["linux/amd64", "linux/arm64"]);
    let before = f.seed_lock();
    let reg = TestRegistry::start();
    let repo = reg.repo("base/single");
    let digest = push_base(f.path(), &repo, "amd64");
    let o = build(
        &f,
        &[
            "--base",
            &format!("{repo}:amd64@{digest}"),
            "--insecure-registry",
            &reg.addr,
        ],
    )
    .output()
    .unwrap();
    assert_eq!(o.status.code(), Some(7), "{}", stderr(&o));
    assert_eq!(
        last_line(&o),
        format!(
            "occm-forge: error: image: base {repo}:amd64@{digest}: the image chosen for linux/arm64 is linux/amd64"
        )
    );
    assert_eq!(stages(&o), ["inputs"], "{}", stderr(&o));
    assert_eq!(std::fs::read(&f.lock).unwrap(), before);
}
