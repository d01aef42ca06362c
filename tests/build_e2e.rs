//! `occm-forge build` end to end: the real binary, a fixture upstream, the real Go toolchain and a
//! real docker-registry; skopeo and umoci check what was published.

use crate::common;

use std::os::unix::fs::PermissionsExt;
use std::process::Command;

use common::*;

const REPO_PATH: &str = "occm/openstack-cloud-controller-manager";

#[test]
fn build_push_and_check_with_skopeo_and_umoci() {
    let reg = TestRegistry::start();
    let f = fixture(&["linux/amd64", "linux/arm64"]);
    let repo = reg.repo(REPO_PATH);
    f.write_config(&repo, &["linux/amd64", "linux/arm64"], "static", &[]);
    let before = f.seed_lock();
    let out_dir = f.path().join("out1");
    let timings = f.path().join("timings.json");

    let o = occm_forge(f.path())
        .args([
            "build",
            "--k8s",
            "1.34",
            "--push",
            "--insecure-registry",
            &reg.addr,
            "--source",
        ])
        .arg(&f.upstream)
        .arg("--output")
        .arg(&out_dir)
        .arg("--timings")
        .arg(&timings)
        .output()
        .unwrap();
    assert!(o.status.success(), "build failed: {}", stderr(&o));

    // stdout is exactly the image reference; stage lines are on stderr.
    let lock = read_lock(&f.lock);
    let entry = &lock["images"]["1.34"];
    let tag = "v1.34.1-occmforge.1";
    let digest = entry["digest"].as_str().unwrap().to_string();
    assert_eq!(stdout(&o), format!("{repo}:{tag}@{digest}\n"));
    for stage in [
        "source", "patches", "test", "build", "image", "describe", "publish", "record",
    ] {
        assert!(
            stderr(&o).contains(&format!("occm-forge: {stage}")),
            "no {stage} line in {}",
            stderr(&o)
        );
    }
    // The test line says what "required" is: images.toml's required_tests, all passed.
    let test_line = stderr(&o)
        .lines()
        .find(|l| l.starts_with("occm-forge: test "))
        .unwrap_or_default()
        .to_string();
    assert!(
        test_line.ends_with("; the 1 required test (images.toml required_tests) passed")
            && test_line.contains(" 0 failed,"),
        "{test_line}"
    );
    let t: serde_json::Value = serde_json::from_slice(&std::fs::read(&timings).unwrap()).unwrap();
    assert_eq!(
        t.as_array().unwrap().len(),
        9,
        "inputs and the eight stages"
    );

    // The digest manifest: the new entry, and the other minor's entry byte-for-byte as before.
    assert_eq!(
        entry["image"].as_str().unwrap(),
        format!("{repo}:{tag}@{digest}")
    );
    assert_eq!(entry["upstream_commit"].as_str().unwrap(), f.commits.v1_34);
    assert_eq!(entry["published"].as_bool(), Some(true));
    let before: serde_norway::Value = serde_norway::from_slice(&before).unwrap();
    assert_eq!(
        lock["images"]["1.33"], before["images"]["1.33"],
        "the 1.33 entry changed"
    );

    // skopeo sees the same digest, the labels and the Cmd.
    let docker_ref = format!("docker://{repo}:{tag}");
    let raw = skopeo(&["inspect", "--tls-verify=false", "--raw", &docker_ref]);
    assert_eq!(format!("sha256:{}", sha256_hex(raw.as_bytes())), digest);
    let index: serde_json::Value = serde_json::from_str(&raw).unwrap();
    assert_eq!(
        index["mediaType"],
        "application/vnd.oci.image.index.v1+json"
    );
    let arches: Vec<&str> = index["manifests"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| m["platform"]["architecture"].as_str().unwrap())
        .collect();
    assert_eq!(arches, ["amd64", "arm64"]);
    let inspect: serde_json::Value =
        serde_json::from_str(&skopeo(&["inspect", "--tls-verify=false", &docker_ref])).unwrap();
    assert_eq!(inspect["Digest"].as_str().unwrap(), digest);
    let labels = &inspect["Labels"];
    assert_eq!(
        labels["org.opencontainers.image.source"],
        "https://github.com/kubernetes/cloud-provider-openstack"
    );
    assert_eq!(
        labels["org.opencontainers.image.revision"]
            .as_str()
            .unwrap(),
        f.commits.v1_34
    );
    assert_eq!(labels["org.opencontainers.image.version"], tag);
    // Upstream's Dockerfile labels, with our description.
    assert_eq!(labels["name"], "openstack-cloud-controller-manager");
    assert_eq!(labels["license"], "Apache Version 2.0");
    assert_eq!(labels["maintainers"], "Kubernetes Authors");
    assert_eq!(labels["distribution-scope"], "public");
    assert!(
        labels["description"]
            .as_str()
            .unwrap()
            .contains("patch series")
    );
    let config: serde_json::Value = serde_json::from_str(&skopeo(&[
        "inspect",
        "--tls-verify=false",
        "--config",
        &docker_ref,
    ]))
    .unwrap();
    assert_eq!(
        config["config"]["Cmd"],
        serde_json::json!(["/bin/openstack-cloud-controller-manager"])
    );
    assert_eq!(
        config["created"], "2025-10-15T14:43:36Z",
        "created must be the commit time, not the wall clock"
    );
    let arm: serde_json::Value = serde_json::from_str(&skopeo(&[
        "inspect",
        "--tls-verify=false",
        "--override-arch",
        "arm64",
        "--config",
        &docker_ref,
    ]))
    .unwrap();
    assert_eq!(
        (arm["architecture"].as_str(), arm["variant"].as_str()),
        (Some("arm64"), Some("v8"))
    );

    // umoci unpacks what skopeo pulled: the binary at the right path with the right mode, and it
    // runs, reporting the version from ldflags and the patched behaviour.
    let rootfs = pull_and_unpack(&repo, tag, f.path());
    let bin = rootfs.join("bin/openstack-cloud-controller-manager");
    let meta = std::fs::metadata(&bin).unwrap();
    assert_eq!(meta.permissions().mode() & 0o7777, 0o755);
    assert!(
        rootfs
            .join("etc/ssl/certs/ca-certificates.crt")
            .metadata()
            .unwrap()
            .len()
            > 100_000
    );
    assert_eq!(
        std::fs::metadata(rootfs.join("tmp"))
            .unwrap()
            .permissions()
            .mode()
            & 0o7777,
        0o1777
    );
    let version = run(Command::new(&bin).arg("--version"));
    assert_eq!(
        version, "openstack-cloud-controller-manager version v1.34.1+occmforge.1\n",
        "the binary reports the tag as semver build metadata"
    );
    let behaviour = run(&mut Command::new(&bin));
    assert!(
        behaviour.contains("instance-exists(gone-node): false <nil>"),
        "patch not in the binary: {behaviour}"
    );

    // SBOM per platform and provenance per build: files next to the layout, referrers in the
    // registry (artifact manifests whose subject is the image), listed under the tag-schema
    // fallback tag sha256-<hex> because docker-registry 2.8 has no referrers API.
    let attest = out_dir.join("attestations").join(tag);
    for (platform, m) in index["manifests"].as_array().unwrap().iter().map(|m| {
        (
            format!("linux/{}", m["platform"]["architecture"].as_str().unwrap()),
            m,
        )
    }) {
        let sbom_ref = entry["sbom"][platform.as_str()].as_str().unwrap();
        let referrer: serde_json::Value = serde_json::from_str(&skopeo(&[
            "inspect",
            "--tls-verify=false",
            "--raw",
            &format!("docker://{repo}@{sbom_ref}"),
        ]))
        .unwrap();
        assert_eq!(referrer["artifactType"], "application/spdx+json");
        assert_eq!(referrer["subject"]["digest"], m["digest"]);
        let fallback = format!(
            "docker://{repo}:{}",
            m["digest"].as_str().unwrap().replace(':', "-")
        );
        let listed = skopeo(&["inspect", "--tls-verify=false", "--raw", &fallback]);
        assert!(listed.contains(sbom_ref), "{listed}");
        let file = attest.join(format!("sbom.{}.spdx.json", platform.replace('/', "-")));
        let doc: serde_json::Value =
            serde_json::from_slice(&std::fs::read(&file).unwrap()).unwrap();
        assert_eq!(doc["spdxVersion"], "SPDX-2.3");
        assert_eq!(
            referrer["layers"][0]["digest"].as_str().unwrap(),
            format!("sha256:{}", sha256_hex(&std::fs::read(&file).unwrap()))
        );
        let names: Vec<&str> = doc["packages"]
            .as_array()
            .unwrap()
            .iter()
            .map(|p| p["name"].as_str().unwrap())
            .collect();
        assert!(
            names.contains(&"k8s.io/cloud-provider-openstack") && names.contains(&"stdlib"),
            "{names:?}"
        );
    }
    let provenance_ref = entry["provenance"].as_str().unwrap();
    let referrer: serde_json::Value = serde_json::from_str(&skopeo(&[
        "inspect",
        "--tls-verify=false",
        "--raw",
        &format!("docker://{repo}@{provenance_ref}"),
    ]))
    .unwrap();
    assert_eq!(referrer["artifactType"], "application/vnd.in-toto+json");
    assert_eq!(referrer["subject"]["digest"].as_str().unwrap(), digest);
    let statement: serde_json::Value =
        serde_json::from_slice(&std::fs::read(attest.join("provenance.intoto.json")).unwrap())
            .unwrap();
    assert_eq!(statement["predicateType"], "https://slsa.dev/provenance/v1");
    assert_eq!(
        statement["subject"][0]["digest"]["sha256"]
            .as_str()
            .unwrap(),
        digest.trim_start_matches("sha256:")
    );
    let deps = statement["predicate"]["buildDefinition"]["resolvedDependencies"]
        .as_array()
        .unwrap();
    assert_eq!(
        deps[0]["digest"]["gitCommit"].as_str().unwrap(),
        f.commits.v1_34
    );
    let fix = std::fs::read(f.patches.join(PATCH_FIX)).unwrap();
    assert!(
        deps.iter()
            .any(|d| d["name"] == PATCH_FIX && d["digest"]["sha256"] == sha256_hex(&fix))
    );

    // oci-image-tool validates the index, each manifest and each config against the image-spec schemas.
    let blob = |d: &str| {
        out_dir
            .join("blobs/sha256")
            .join(d.trim_start_matches("sha256:"))
    };
    let mut checks = vec![("imageIndex", blob(&digest))];
    for m in index["manifests"].as_array().unwrap() {
        let manifest_path = blob(m["digest"].as_str().unwrap());
        let manifest: serde_json::Value =
            serde_json::from_slice(&std::fs::read(&manifest_path).unwrap()).unwrap();
        checks.push((
            "config",
            blob(manifest["config"]["digest"].as_str().unwrap()),
        ));
        checks.push(("manifest", manifest_path));
    }
    for (kind, path) in checks {
        require_tool("oci-image-tool");
        run(Command::new("oci-image-tool")
            .args(["validate", "--type", kind])
            .arg(&path));
    }

    // skopeo copies every platform into an OCI layout, and GNU tar lists every entry of every
    // layer of what it copied: root-owned (but /home/nonroot), the epoch as mtime, the modes we set.
    let all = f.path().join("all");
    skopeo(&[
        "copy",
        "--quiet",
        "--all",
        "--src-tls-verify=false",
        &docker_ref,
        &format!("oci:{}:{tag}", all.display()),
    ]);
    let copied: serde_json::Value =
        serde_json::from_slice(&std::fs::read(all.join("index.json")).unwrap()).unwrap();
    assert_eq!(
        copied["manifests"][0]["digest"].as_str().unwrap(),
        digest,
        "skopeo copy --all changed the index"
    );
    let mut listing = String::new();
    for m in index["manifests"].as_array().unwrap() {
        let mblob = all
            .join("blobs/sha256")
            .join(m["digest"].as_str().unwrap().trim_start_matches("sha256:"));
        let manifest: serde_json::Value =
            serde_json::from_slice(&std::fs::read(mblob).unwrap()).unwrap();
        for l in manifest["layers"].as_array().unwrap() {
            let lblob = all
                .join("blobs/sha256")
                .join(l["digest"].as_str().unwrap().trim_start_matches("sha256:"));
            listing.push_str(&run(Command::new("tar")
                .args(["--numeric-owner", "--full-time", "-tvzf"])
                .arg(lblob)));
        }
    }
    let expected_static = [
        "drwxr-xr-x 0/0 bin/",
        "drwxr-xr-x 0/0 etc/",
        "-rw-r--r-- 0/0 etc/group",
        "-rw-r--r-- 0/0 etc/passwd",
        "drwxr-xr-x 0/0 etc/ssl/",
        "drwxr-xr-x 0/0 etc/ssl/certs/",
        "-rw-r--r-- 0/0 etc/ssl/certs/ca-certificates.crt",
        "drwxr-xr-x 0/0 home/",
        "drwx------ 65532/65532 home/nonroot/",
        "drwx------ 0/0 root/",
        "drwxrwxrwt 0/0 tmp/",
        "-rwxr-xr-x 0/0 bin/openstack-cloud-controller-manager",
    ];
    let mut expected = Vec::new();
    for _ in 0..2 {
        expected.extend(expected_static.iter().map(|l| l.to_string()));
    }
    let got: Vec<String> = listing
        .lines()
        .map(|l| {
            let f: Vec<&str> = l.split_whitespace().collect();
            assert_eq!(
                (f[3], f[4]),
                ("2025-10-15", "14:43:36"),
                "mtime is not the commit time: {l}"
            );
            format!("{} {} {}", f[0], f[1], f[5])
        })
        .collect();
    assert_eq!(got, expected);

    // The layout in --output opens in skopeo as oci:DIR and is the same image.
    let layout_raw = skopeo(&[
        "inspect",
        "--raw",
        &format!("oci:{}:{tag}", out_dir.display()),
    ]);
    assert_eq!(layout_raw, raw);

    // A second (forced) build of the same inputs into a clean output dir gives the same digest;
    // pushing again uploads nothing.
    let out2 = f.path().join("out2");
    let o2 = occm_forge(f.path())
        .args([
            "build",
            "--k8s",
            "1.34",
            "--force",
            "--push",
            "--json",
            "--insecure-registry",
            &reg.addr,
            "--source",
        ])
        .arg(&f.upstream)
        .arg("--output")
        .arg(&out2)
        .output()
        .unwrap();
    assert!(o2.status.success(), "second build failed: {}", stderr(&o2));
    let j: serde_json::Value = serde_json::from_str(&stdout(&o2)).unwrap();
    assert_eq!(j["digest"].as_str().unwrap(), digest);
    assert!(stderr(&o2).contains("0 blobs uploaded"), "{}", stderr(&o2));
}

#[test]
fn build_on_a_pulled_docker_base_keeps_its_entrypoint_and_media_types() {
    require_tool("umoci");
    let reg = TestRegistry::start();
    let f = fixture(&["linux/amd64"]);

    // A base image made by umoci (OCI), pushed as Docker schema 2 by skopeo.
    let layout = f.path().join("base-layout");
    let l = layout.display().to_string();
    run(Command::new("umoci").args(["init", "--layout", &l]));
    run(Command::new("umoci").args(["new", "--image", &format!("{l}:v1")]));
    let content = f.path().join("base-content");
    std::fs::create_dir_all(content.join("usr/local/bin")).unwrap();
    std::fs::write(content.join("usr/local/bin/go-runner"), "#!/bin/true\n").unwrap();
    run(Command::new("umoci")
        .args(["insert", "--image", &format!("{l}:v1")])
        .arg(&content)
        .arg("/"));
    run(Command::new("umoci").args([
        "config",
        "--image",
        &format!("{l}:v1"),
        "--config.entrypoint",
        "/go-runner",
        "--config.label",
        "base.label=kept",
    ]));
    let base_repo = reg.repo("base/go-runner");
    skopeo(&[
        "copy",
        "--quiet",
        "--format",
        "v2s2",
        "--dest-tls-verify=false",
        &format!("oci:{l}:v1"),
        &format!("docker://{base_repo}:v1"),
    ]);
    let base_raw = skopeo(&[
        "inspect",
        "--tls-verify=false",
        "--raw",
        &format!("docker://{base_repo}:v1"),
    ]);
    let base_digest = format!("sha256:{}", sha256_hex(base_raw.as_bytes()));
    let base_ref = format!("{base_repo}:v1@{base_digest}");

    let repo = reg.repo(REPO_PATH);
    f.write_config(&repo, &["linux/amd64"], &base_ref, &[]);
    let o = occm_forge(f.path())
        .args([
            "build",
            "--k8s",
            "1.34",
            "--push",
            "--insecure-registry",
            &reg.addr,
            "--source",
        ])
        .arg(&f.upstream)
        .output()
        .unwrap();
    assert!(o.status.success(), "build failed: {}", stderr(&o));
    // The base lives on the same registry: its layer is mounted, not uploaded again.
    let publish = stderr(&o)
        .lines()
        .find(|l| l.starts_with("occm-forge: publish"))
        .unwrap()
        .to_string();
    assert!(publish.contains(" 1 mounted"), "{publish}");
    let tag_ref = format!("docker://{repo}:v1.34.1-occmforge.1");
    let raw: serde_json::Value = serde_json::from_str(&skopeo(&[
        "inspect",
        "--tls-verify=false",
        "--raw",
        &tag_ref,
    ]))
    .unwrap();
    assert_eq!(
        raw["mediaType"],
        "application/vnd.docker.distribution.manifest.list.v2+json"
    );
    let config: serde_json::Value = serde_json::from_str(&skopeo(&[
        "inspect",
        "--tls-verify=false",
        "--config",
        &tag_ref,
    ]))
    .unwrap();
    assert_eq!(
        config["config"]["Entrypoint"],
        serde_json::json!(["/go-runner"])
    );
    assert_eq!(
        config["config"]["Cmd"],
        serde_json::json!(["/bin/openstack-cloud-controller-manager"])
    );
    let labels = &config["config"]["Labels"];
    assert_eq!(labels["base.label"], "kept");
    assert_eq!(
        labels["org.opencontainers.image.base.name"]
            .as_str()
            .unwrap(),
        format!("{base_repo}:v1")
    );
    assert_eq!(
        labels["org.opencontainers.image.base.digest"]
            .as_str()
            .unwrap(),
        base_digest
    );
    let inspect: serde_json::Value =
        serde_json::from_str(&skopeo(&["inspect", "--tls-verify=false", &tag_ref])).unwrap();
    let layers = inspect["Layers"].as_array().unwrap();
    let base_layers: serde_json::Value = serde_json::from_str(&base_raw).unwrap();
    assert_eq!(
        layers.len(),
        base_layers["layers"].as_array().unwrap().len() + 1
    );
    assert_eq!(layers[0], base_layers["layers"][0]["digest"]);
    let platform_digest = raw["manifests"][0]["digest"].as_str().unwrap();
    let manifest: serde_json::Value = serde_json::from_str(&skopeo(&[
        "inspect",
        "--tls-verify=false",
        "--raw",
        &format!("docker://{repo}@{platform_digest}"),
    ]))
    .unwrap();
    assert_eq!(
        manifest["mediaType"],
        "application/vnd.docker.distribution.manifest.v2+json"
    );
    assert_eq!(
        manifest["config"]["mediaType"],
        "application/vnd.docker.container.image.v1+json"
    );
    for l in manifest["layers"].as_array().unwrap() {
        assert_eq!(
            l["mediaType"],
            "application/vnd.docker.image.rootfs.diff.tar.gzip"
        );
    }
    let lock = read_lock(&f.lock);
    assert_eq!(
        lock["images"]["1.34"]["base_digest"].as_str().unwrap(),
        base_digest
    );
    assert_eq!(
        lock["images"]["1.34"]["base_image"].as_str().unwrap(),
        base_ref
    );
}

#[test]
fn rebuilds_are_bit_identical_across_caches_directories_home_and_umask() {
    let f = fixture(&["linux/amd64"]);
    let mut digests = Vec::new();
    for (i, umask) in ["022", "077"].iter().enumerate() {
        let run_dir = tempfile::tempdir().unwrap();
        let cwd = run_dir.path().join(format!("cwd-{i}/nested"));
        let home = run_dir.path().join("home");
        std::fs::create_dir_all(&cwd).unwrap();
        std::fs::create_dir_all(&home).unwrap();
        let script = format!("umask {umask} && exec \"$0\" \"$@\"");
        let o = Command::new("sh")
            .current_dir(&cwd)
            .args(["-c", &script, env!("CARGO_BIN_EXE_occm-forge")])
            .args(["build", "--k8s", "1.34", "--json", "--config"])
            .arg(&f.config)
            .arg("--source")
            .arg(&f.upstream)
            .arg("--output")
            .arg(run_dir.path().join("out"))
            .arg("--cache-dir")
            .arg(run_dir.path().join("cache"))
            .env("HOME", &home)
            .env("GOPROXY", "off")
            .env_remove("SOURCE_DATE_EPOCH")
            .env_remove("OCCM_FORGE_CACHE")
            .output()
            .unwrap();
        assert!(o.status.success(), "build {i} failed: {}", stderr(&o));
        let j: serde_json::Value = serde_json::from_str(&stdout(&o)).unwrap();
        digests.push(j["digest"].as_str().unwrap().to_string());
    }
    assert_eq!(digests[0], digests[1]);
}

#[test]
fn progress_is_drawn_on_a_terminal_only() {
    let f = fixture(&["linux/amd64"]);
    let cmd = |out: &str| {
        format!(
            "{} build --k8s 1.34 --source {} --output {}",
            env!("CARGO_BIN_EXE_occm-forge"),
            f.upstream.display(),
            f.path().join(out).display()
        )
    };
    // Not a terminal: plain stage lines, no escape sequences.
    let o = occm_forge(f.path())
        .args(["build", "--k8s", "1.34", "--source"])
        .arg(&f.upstream)
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", stderr(&o));
    assert!(
        !stderr(&o).contains('\u{1b}'),
        "escape sequences without a terminal: {:?}",
        stderr(&o)
    );
    // A terminal (script(1) gives the command a pty): spinners are drawn and cleared.
    require_tool("script");
    let o = Command::new("script")
        .current_dir(f.path())
        .args(["-qec", &cmd("out-tty"), "/dev/null"])
        .env("OCCM_FORGE_CACHE", shared_cache())
        .env("GOPROXY", "off")
        .env("GOFLAGS", "")
        .env("TERM", "xterm")
        .output()
        .unwrap();
    let text = stdout(&o);
    assert!(o.status.success(), "{text}");
    assert!(text.contains('\u{1b}'), "no terminal drawing: {text:?}");
    assert!(text.contains("occm-forge: record"), "{text}");
    // -q: errors only.
    let o = occm_forge(f.path())
        .args(["-q", "build", "--k8s", "1.34", "--source"])
        .arg(&f.upstream)
        .output()
        .unwrap();
    assert!(o.status.success());
    assert_eq!(stderr(&o), "");
}

#[test]
fn a_multi_platform_base_index_is_resolved_per_platform() {
    // A first image (an OCI index of amd64 and arm64) becomes the base of a second one.
    let reg = TestRegistry::start();
    let f = fixture(&["linux/amd64", "linux/arm64"]);
    let base_repo = reg.repo("base/occm");
    f.write_config(&base_repo, &["linux/amd64", "linux/arm64"], "static", &[]);
    let o = occm_forge(f.path())
        .args([
            "build",
            "--k8s",
            "1.33",
            "--push",
            "--insecure-registry",
            &reg.addr,
            "--source",
        ])
        .arg(&f.upstream)
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", stderr(&o));
    let base = stdout(&o).trim().to_string();
    let base_index: serde_json::Value = serde_json::from_str(&skopeo(&[
        "inspect",
        "--tls-verify=false",
        "--raw",
        // skopeo (containers/image) takes a tag or a digest, not both.
        &format!("docker://{base_repo}@{}", base.rsplit_once('@').unwrap().1),
    ]))
    .unwrap();

    let repo = reg.repo(REPO_PATH);
    f.write_config(&repo, &["linux/amd64", "linux/arm64"], &base, &[]);
    let o = occm_forge(f.path())
        .args([
            "build",
            "--k8s",
            "1.34",
            "--push",
            "--insecure-registry",
            &reg.addr,
            "--source",
        ])
        .arg(&f.upstream)
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", stderr(&o));
    for (i, arch) in ["amd64", "arm64"].iter().enumerate() {
        let config: serde_json::Value = serde_json::from_str(&skopeo(&[
            "inspect",
            "--tls-verify=false",
            "--override-arch",
            arch,
            "--config",
            &format!("docker://{repo}:v1.34.1-occmforge.1"),
        ]))
        .unwrap();
        assert_eq!(config["architecture"], *arch);
        // Each platform is based on the base's manifest for that platform.
        assert_eq!(
            config["config"]["Labels"]["org.opencontainers.image.base.digest"],
            base_index["manifests"][i]["digest"],
            "{arch}"
        );
        // The base's two layers (static base and its binary) come first, then ours.
        assert_eq!(
            config["rootfs"]["diff_ids"].as_array().unwrap().len(),
            3,
            "{arch}"
        );
    }
}

#[test]
fn the_layout_lists_its_referrers_and_keeps_only_what_it_reaches() {
    let f = fixture(&["linux/amd64", "linux/arm64"]);
    let build = |extra: &[&str]| {
        let o = occm_forge(f.path())
            .args(["build", "--k8s", "1.34", "--source"])
            .arg(&f.upstream)
            .args(extra)
            .output()
            .unwrap();
        assert!(o.status.success(), "{}", stderr(&o));
        o
    };
    build(&[]);
    let out = f.path().join("out");
    let lock = read_lock(&f.lock);
    let entry = &lock["images"]["1.34"];
    let index: serde_json::Value =
        serde_json::from_slice(&std::fs::read(out.join("index.json")).unwrap()).unwrap();
    let untagged: Vec<&serde_json::Value> = index["manifests"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|m| m["annotations"]["org.opencontainers.image.ref.name"].is_null())
        .collect();
    let mut listed: Vec<&str> = untagged
        .iter()
        .map(|m| m["digest"].as_str().unwrap())
        .collect();
    listed.sort();
    let mut recorded: Vec<&str> = entry["sbom"]
        .as_mapping()
        .unwrap()
        .values()
        .map(|v| v.as_str().unwrap())
        .chain([entry["provenance"].as_str().unwrap()])
        .collect();
    recorded.sort();
    assert_eq!(
        listed, recorded,
        "index.json lists the SBOM and provenance referrers"
    );
    assert!(untagged.iter().all(|m| m["artifactType"].is_string()));

    // A blob nothing reaches (left by an interrupted build) is collected by the next build.
    let junk = b"left by an interrupted build";
    let junk_path = out.join("blobs/sha256").join(sha256_hex(junk));
    std::fs::write(&junk_path, junk).unwrap();
    let o = build(&["--force"]);
    assert!(!junk_path.exists());
    assert!(
        stderr(&o).contains("1 unreferenced blob removed from out"),
        "{}",
        stderr(&o)
    );

    // The same image built for another repository: its SBOMs and provenance (which name the
    // repository) replace the earlier ones in index.json, and their blobs are collected.
    build(&["--repository", "registry.example.invalid/other/occm"]);
    let lock = read_lock(&f.lock);
    let entry = &lock["images"]["1.34"];
    let index: serde_json::Value =
        serde_json::from_slice(&std::fs::read(out.join("index.json")).unwrap()).unwrap();
    let mut listed: Vec<String> = index["manifests"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|m| m["annotations"]["org.opencontainers.image.ref.name"].is_null())
        .map(|m| m["digest"].as_str().unwrap().to_string())
        .collect();
    listed.sort();
    let mut now: Vec<String> = entry["sbom"]
        .as_mapping()
        .unwrap()
        .values()
        .map(|v| v.as_str().unwrap().to_string())
        .chain([entry["provenance"].as_str().unwrap().to_string()])
        .collect();
    now.sort();
    assert_eq!(listed, now, "one SBOM per platform and one provenance");
    for old in recorded.iter().filter(|d| !now.iter().any(|n| n == *d)) {
        assert!(
            !out.join("blobs/sha256").join(&old[7..]).exists(),
            "the replaced referrer {old} is still in the layout"
        );
    }
    assert!(recorded.iter().any(|d| !now.iter().any(|n| n == d)));
    let recorded = now;

    // umoci's own garbage collection walks index.json: the referrers survive it.
    require_tool("umoci");
    run(Command::new("umoci").args(["gc", "--layout"]).arg(&out));
    for d in &recorded {
        assert!(
            out.join("blobs/sha256").join(&d[7..]).exists(),
            "umoci gc removed the referrer {d}"
        );
    }
}
