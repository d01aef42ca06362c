//! `occm-forge accept --prepare` from an empty cache, offline: the Go module proxy is a
//! file-based `GOPROXY` holding tiny stand-ins of `k8s.io/kubernetes` (with a staging module
//! replaced `./staging/…`, as the real one is), `k8s.io/api` and etcd's server, so the real code
//! path runs: the tool reads the upstream go.mod, writes its helper module's go.mod, resolves its
//! go.sum itself and builds both commands under `-mod=readonly`, then builds the unpatched
//! control. Before the helper's go.sum was resolved by the tool, this failed with
//! `missing go.sum entry … the patch series needs go.mod/go.sum changes`.

use crate::common;

use std::path::{Path, PathBuf};
use std::process::Command;

use common::*;

const K8S: &str = "v1.99.0";
const STAGING: &str = "v0.99.0";
const ETCD: &str = "v3.9.9";
const CAPI: &str = "v1.99.0";

/// The stand-in proxy: kube-apiserver prints its name and the staging package it imports; etcd
/// prints its name.
fn file_proxy(root: &Path) -> PathBuf {
    let proxy = root.join("goproxy");
    publish_module(
        &proxy,
        "k8s.io/kubernetes",
        K8S,
        &[
            (
                "go.mod",
                "module k8s.io/kubernetes\n\ngo 1.22\n\nrequire k8s.io/api v0.0.0\n\nreplace k8s.io/api => ./staging/src/k8s.io/api\n",
            ),
            (
                "cmd/kube-apiserver/main.go",
                "package main\n\nimport (\n\t\"fmt\"\n\n\t\"k8s.io/api/core\"\n)\n\nfunc main() { fmt.Println(\"stand-in kube-apiserver\", core.Name) }\n",
            ),
        ],
    );
    publish_module(
        &proxy,
        "k8s.io/api",
        STAGING,
        &[
            ("go.mod", "module k8s.io/api\n\ngo 1.22\n"),
            (
                "core/core.go",
                "package core\n\n// Name says which release this is.\nconst Name = \"api v0.99.0\"\n",
            ),
        ],
    );
    publish_module(
        &proxy,
        "go.etcd.io/etcd/server/v3",
        ETCD,
        &[
            ("go.mod", "module go.etcd.io/etcd/server/v3\n\ngo 1.22\n"),
            (
                "main.go",
                "package main\n\nimport \"fmt\"\n\nfunc main() { fmt.Println(\"stand-in etcd\") }\n",
            ),
        ],
    );
    publish_module(
        &proxy,
        "go.etcd.io/etcd/client/v3",
        ETCD,
        &[("go.mod", "module go.etcd.io/etcd/client/v3\n\ngo 1.22\n")],
    );
    // Cluster API's core: a manager at the module root and CRDs in config/crd/bases, one of
    // them serving two versions through a conversion webhook, as v1.13's do.
    publish_module(
        &proxy,
        "sigs.k8s.io/cluster-api",
        CAPI,
        &[
            ("go.mod", "module sigs.k8s.io/cluster-api\n\ngo 1.22\n"),
            (
                "main.go",
                "package main\n\nimport \"fmt\"\n\nfunc main() { fmt.Println(\"stand-in cluster-api manager\") }\n",
            ),
            (
                "config/crd/bases/cluster.x-k8s.io_machines.yaml",
                "---\napiVersion: apiextensions.k8s.io/v1\nkind: CustomResourceDefinition\nmetadata:\n  name: machines.cluster.x-k8s.io\nspec:\n  group: cluster.x-k8s.io\n  conversion:\n    strategy: Webhook\n  versions:\n  - name: v1beta1\n    served: true\n    storage: false\n  - name: v1beta2\n    served: true\n    storage: true\n",
            ),
            ("config/crd/bases/kustomization.yaml.txt", "resources: []\n"),
        ],
    );
    proxy
}

/// Releases `v1.36.0` in the fixture upstream: its go.mod requires the stand-in Kubernetes and
/// etcd (with the go.sum lines Go computes for them), and images.toml pins it as minor 1.36.
fn release_with_kubernetes(f: &Fixture, proxy: &Path) -> String {
    let sums = tempfile::tempdir().unwrap();
    std::fs::write(sums.path().join("go.mod"), "module sums\n\ngo 1.22\n").unwrap();
    let mut go_sum = String::new();
    for m in [
        format!("k8s.io/kubernetes@{K8S}"),
        format!("go.etcd.io/etcd/client/v3@{ETCD}"),
    ] {
        let mut cmd = Command::new("go");
        cmd.current_dir(sums.path())
            .args(["mod", "download", "-json", &m])
            .env("GOMODCACHE", sums.path().join("mod"));
        file_proxy_env(&mut cmd, proxy);
        let info: serde_json::Value = serde_json::from_str(&run(&mut cmd)).unwrap();
        let (path, version) = m.split_once('@').unwrap();
        go_sum.push_str(&format!(
            "{path} {version} {}\n",
            info["Sum"].as_str().unwrap()
        ));
        go_sum.push_str(&format!(
            "{path} {version}/go.mod {}\n",
            info["GoModSum"].as_str().unwrap()
        ));
    }
    let _ = Command::new("chmod")
        .args(["-R", "u+w"])
        .arg(sums.path())
        .status();
    std::fs::write(
        f.upstream.join("go.mod"),
        format!(
            "module k8s.io/cloud-provider-openstack\n\ngo 1.22\n\nrequire (\n\tgo.etcd.io/etcd/client/v3 {ETCD}\n\tk8s.io/kubernetes {K8S}\n)\n"
        ),
    )
    .unwrap();
    std::fs::write(f.upstream.join("go.sum"), go_sum).unwrap();
    run(git(&f.upstream).args(["add", "-A"]));
    run(git(&f.upstream).args(["commit", "-q", "-m", "fixture v1.36.0"]));
    run(git(&f.upstream).args(["tag", "v1.36.0"]));
    let commit = run(git(&f.upstream).args(["rev-parse", "HEAD"]))
        .trim()
        .to_string();
    let mut cfg = std::fs::read_to_string(&f.config).unwrap();
    cfg.push_str(&format!(
        "\n[accept]\ncluster_api = \"{CAPI}\"\ncluster_api_go = \"{}\"\n",
        local_go_version()
    ));
    cfg.push_str(&format!(
        "\n[minors.\"1.36\"]\nupstream_tag = \"v1.36.0\"\ncommit = \"{commit}\"\ngo = \"{}\"\nbase = \"static\"\nplatforms = [\"linux/amd64\"]\nrevision = 1\npatches = [\"{PATCH_TEST}\", \"{PATCH_FIX}\"]\ntest_packages = [\"./pkg/...\"]\n",
        local_go_version()
    ));
    std::fs::write(&f.config, cfg).unwrap();
    commit
}

fn prepare(f: &Fixture, proxy: &Path, cache: &Path, extra: &[&str]) -> std::process::Output {
    let mut cmd = occm_forge(f.path());
    let minor: &[&str] = if extra.contains(&"--k8s") {
        &[]
    } else {
        &["--k8s", "1.36"]
    };
    cmd.args(["accept", "--prepare"])
        .args(minor)
        .arg("--source")
        .arg(&f.upstream)
        .arg("--config")
        .arg(&f.config)
        .arg("--cache-dir")
        .arg(cache)
        .args(extra);
    file_proxy_env(&mut cmd, proxy);
    cmd.output().unwrap()
}

#[test]
fn prepare_from_an_empty_cache_resolves_the_helper_module_and_builds_everything() {
    let f = fixture(&["linux/amd64"]);
    let proxy = file_proxy(f.path());
    release_with_kubernetes(&f, &proxy);
    let cache = f.path().join("empty-cache");

    let o = prepare(&f, &proxy, &cache, &[]);
    assert!(
        o.status.success(),
        "accept --prepare from an empty cache failed: {}",
        stderr(&o)
    );
    let err = stderr(&o);
    assert!(!err.contains("patch series"), "{err}");
    let line = stdout(&o);
    let accept = cache.join("accept");
    assert!(
        line.starts_with(&format!(
            "1.36: kube-apiserver {K8S}, etcd {ETCD}, Cluster API {CAPI}, control v1.36.0 go{} in {} (built); cache key accept-1.36-",
            local_go_version(),
            accept.display()
        )),
        "{line}"
    );
    // Both commands built from the helper module, with the staging module at its published
    // version; the helper's go.sum was written by the tool and covers it.
    let apiserver = run(&mut Command::new(accept.join(K8S).join("kube-apiserver")));
    assert_eq!(apiserver.trim(), "stand-in kube-apiserver api v0.99.0");
    let etcd = run(&mut Command::new(
        accept.join(K8S).join(format!("etcd-{ETCD}")),
    ));
    assert_eq!(etcd.trim(), "stand-in etcd");
    let go_sum = std::fs::read_to_string(accept.join(K8S).join("module/go.sum")).unwrap();
    assert!(
        go_sum.contains(&format!("k8s.io/api {STAGING} h1:")),
        "{go_sum}"
    );
    // Cluster API's manager from its own helper module, its CRDs serving the storage version
    // only (no conversion webhook runs here).
    let capi = accept.join(format!("cluster-api-{CAPI}"));
    let manager = run(&mut Command::new(capi.join("manager")));
    assert_eq!(manager.trim(), "stand-in cluster-api manager");
    let crd: serde_json::Value = serde_json::from_slice(
        &std::fs::read(capi.join("crds/machines.cluster.x-k8s.io.json")).unwrap(),
    )
    .unwrap();
    assert_eq!(
        crd["spec"]["versions"],
        serde_json::json!([{"name": "v1beta2", "served": true, "storage": true}])
    );
    assert!(crd["spec"].get("conversion").is_none(), "{crd}");
    // The control: upstream's tree of v1.36.0 (which has the fix, as the fixture's v1.35.0),
    // built with the upstream tag as its version.
    let controls: Vec<PathBuf> = std::fs::read_dir(accept.join("control"))
        .unwrap()
        .map(|e| e.unwrap().path().join("openstack-cloud-controller-manager"))
        .collect();
    assert_eq!(controls.len(), 1, "{controls:?}");
    let out = run(&mut Command::new(&controls[0]));
    assert!(
        out.starts_with("openstack-cloud-controller-manager version v1.36.0\n"),
        "the control is not upstream's v1.36.0: {out}"
    );
    // Nothing was run: no layout, no acceptance logs.
    assert!(!f.path().join("out").exists());

    // A second run finds everything in the cache and says so; the key is what --cache-key prints.
    let o = prepare(&f, &proxy, &cache, &[]);
    assert!(o.status.success(), "{}", stderr(&o));
    let again = stdout(&o);
    assert!(again.contains(" (cached); cache key "), "{again}");
    let key = stdout(&prepare(&f, &proxy, &cache, &["--cache-key"]));
    assert!(
        again.trim_end().ends_with(key.trim()) && key.trim().starts_with("accept-1.36-"),
        "{again} vs {key}"
    );
}

#[test]
fn the_cache_key_follows_what_prepare_builds_and_needs_no_network() {
    let f = fixture(&["linux/amd64"]);
    let proxy = f.path().join("no-proxy");
    let cache = f.path().join("cache");
    let key = |minor: &str| {
        let o = prepare(&f, &proxy, &cache, &["--cache-key", "--k8s", minor]);
        assert!(o.status.success(), "{}", stderr(&o));
        stdout(&o).trim().to_string()
    };
    let before = key("1.35");
    assert!(before.starts_with("accept-1.35-"), "{before}");
    let o = prepare(
        &f,
        &proxy,
        &cache,
        &["--cache-key", "--k8s", "1.35", "--json"],
    );
    let json: serde_json::Value = serde_json::from_str(&stdout(&o)).unwrap();
    assert_eq!(
        json,
        serde_json::json!({"minor": "1.35", "cache_key": before})
    );
    assert!(!cache.exists(), "--cache-key wrote to the cache");
    assert_ne!(
        key("1.34")["accept-1.34-".len()..],
        before["accept-1.35-".len()..]
    );
    // In the 1.35 section only: another revision does not change what --prepare builds…
    let edit = |from: &str, to: &str| {
        let cfg = std::fs::read_to_string(&f.config).unwrap();
        let at = cfg.find("[minors.\"1.35\"]").unwrap();
        let (head, tail) = cfg.split_at(at);
        assert!(tail.contains(from), "{tail}");
        std::fs::write(&f.config, format!("{head}{}", tail.replacen(from, to, 1))).unwrap();
    };
    edit("revision = 1", "revision = 2");
    assert_eq!(key("1.35"), before);
    // …another Cluster API release does.
    let cfg = std::fs::read_to_string(&f.config).unwrap();
    std::fs::write(
        &f.config,
        format!("{cfg}\n[accept]\ncluster_api = \"v1.13.6\"\n"),
    )
    .unwrap();
    let other_capi = key("1.35");
    assert_ne!(other_capi, before);
    std::fs::write(&f.config, cfg).unwrap();
    assert_eq!(key("1.35"), before);
    // …another Go version does.
    edit(
        &format!("go = \"{}\"", local_go_version()),
        "go = \"1.22.0\"",
    );
    assert_ne!(key("1.35"), before);
}
