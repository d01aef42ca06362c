//! The release flow on the fixture: upstream gains a tag, `upstream check` reports it, `pin`
//! bumps images.toml, parallel builds write fragments, `manifest merge` folds them in, and every
//! `render` format parses back to the recorded image (Helm renders it through a chart whose
//! image line is the OCCM chart's).

use crate::common;

use std::process::{Command, Output};

use common::*;

fn forge(f: &Fixture, args: &[&str]) -> Output {
    occm_forge(f.path()).args(args).output().unwrap()
}

fn tag_upstream(f: &Fixture, tag: &str) -> String {
    f.release(
        tag,
        &local_go_version(),
        "registry.k8s.io/build-image/go-runner:v2.4.0-go1.25.3-bookworm.0",
    )
}

#[test]
fn upstream_check_then_pin_then_fragments_then_merge() {
    let reg = TestRegistry::start();
    let f = fixture(&["linux/amd64"]);
    let repo = reg.repo("occm/openstack-cloud-controller-manager");
    f.write_config(&repo, &["linux/amd64"], "static", &[]);
    let source = f.upstream.to_str().unwrap().to_string();

    // Nothing new yet.
    let o = forge(&f, &["upstream", "check", "--json", "--source", &source]);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    let j: serde_json::Value = serde_json::from_str(&stdout(&o)).unwrap();
    assert_eq!(j["new"], false);

    // Upstream releases v1.34.2 and a new minor, v1.36.0.
    let commit = tag_upstream(&f, "v1.34.2");
    tag_upstream(&f, "v1.36.0");
    let o = forge(&f, &["upstream", "check", "--json", "--source", &source]);
    assert_eq!(o.status.code(), Some(11), "{}", stderr(&o));
    let j: serde_json::Value = serde_json::from_str(&stdout(&o)).unwrap();
    assert_eq!(j["new"], true);
    let m34 = j["minors"]
        .as_array()
        .unwrap()
        .iter()
        .find(|m| m["minor"] == "1.34")
        .unwrap();
    assert_eq!(
        (
            m34["pinned"].as_str(),
            m34["latest"].as_str(),
            m34["newer"].as_bool()
        ),
        (Some("v1.34.1"), Some("v1.34.2"), Some(true))
    );
    assert_eq!(
        j["untracked"],
        serde_json::json!([{"minor": "1.36", "latest": "v1.36.0"}])
    );

    // pin bumps images.toml, keeping its comments.
    let before = std::fs::read_to_string(&f.config).unwrap();
    let o = forge(
        &f,
        &[
            "pin", "--k8s", "1.34", "--tag", "v1.34.2", "--source", &source,
        ],
    );
    assert!(o.status.success(), "{}", stderr(&o));
    let after = std::fs::read_to_string(&f.config).unwrap();
    let comments = |t: &str| {
        t.lines()
            .filter(|l| l.starts_with('#'))
            .map(str::to_string)
            .collect::<Vec<_>>()
    };
    assert_eq!(comments(&before), comments(&after));
    assert!(after.contains(&format!("commit = \"{commit}\"")));

    // Two parallel builds write fragments; merge folds them into the digest manifest.
    let seeded = f.seed_lock();
    let frag_dir = f.path().join("fragments");
    for minor in ["1.34", "1.35"] {
        let frag = frag_dir.join(format!("{minor}.yaml"));
        let o = occm_forge(f.path())
            .args([
                "build",
                "--k8s",
                minor,
                "--push",
                "--insecure-registry",
                &reg.addr,
                "--source",
                &source,
            ])
            .arg("--output")
            .arg(f.path().join(format!("out-{minor}")))
            .arg("--manifest-fragment")
            .arg(&frag)
            .output()
            .unwrap();
        assert!(o.status.success(), "build {minor}: {}", stderr(&o));
        let frag_yaml = read_lock(&frag);
        assert_eq!(
            frag_yaml["images"].as_mapping().unwrap().len(),
            1,
            "a fragment holds its own minor only"
        );
    }
    assert_eq!(
        std::fs::read(&f.lock).unwrap(),
        seeded,
        "builds with fragments must not touch the digest manifest"
    );
    let frags = [frag_dir.join("1.34.yaml"), frag_dir.join("1.35.yaml")];
    let o = occm_forge(f.path())
        .args(["manifest", "merge"])
        .args(&frags)
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", stderr(&o));
    let lock = read_lock(&f.lock);
    assert_eq!(lock["images"]["1.34"]["upstream_tag"], "v1.34.2");
    assert_eq!(
        lock["images"]["1.35"],
        read_lock(&frags[1])["images"]["1.35"]
    );
    let seeded: serde_norway::Value = serde_norway::from_slice(&seeded).unwrap();
    assert_eq!(
        lock["images"]["1.33"], seeded["images"]["1.33"],
        "the other minor changed"
    );

    // Two different entries for one minor are refused, and nothing is written.
    let mut other = std::fs::read_to_string(&frags[0]).unwrap();
    other = other.replace("published: true", "published: false");
    let conflicting = frag_dir.join("1.34-other.yaml");
    std::fs::write(&conflicting, other).unwrap();
    let before = std::fs::read(&f.lock).unwrap();
    let o = occm_forge(f.path())
        .args(["manifest", "merge"])
        .arg(&frags[0])
        .arg(&conflicting)
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(9), "{}", stderr(&o));
    assert!(
        stderr(&o).contains("carry different entries for 1.34; nothing merged"),
        "{}",
        stderr(&o)
    );
    assert_eq!(std::fs::read(&f.lock).unwrap(), before);
}

/// Renders `format` for `minor` and returns stdout, stderr.
fn render(f: &Fixture, format: &str, minor: Option<&str>) -> (String, String) {
    let mut args = vec!["render", "--format", format];
    if format == "magnum-label" {
        args.push("--patched-magnum-cluster-api");
    }
    match minor {
        Some(m) => args.extend(["--k8s", m]),
        None => args.push("--all"),
    }
    let o = forge(f, &args);
    assert!(o.status.success(), "render {format}: {}", stderr(&o));
    (stdout(&o), stderr(&o))
}

#[test]
fn every_render_format_parses_back_to_the_recorded_image() {
    let reg = TestRegistry::start();
    let f = fixture(&["linux/amd64"]);
    let repo = reg.repo("occm/openstack-cloud-controller-manager");
    f.write_config(&repo, &["linux/amd64"], "static", &[]);
    for minor in ["1.34", "1.35"] {
        let o = occm_forge(f.path())
            .args([
                "build",
                "--k8s",
                minor,
                "--push",
                "--insecure-registry",
                &reg.addr,
                "--source",
            ])
            .arg(&f.upstream)
            .output()
            .unwrap();
        assert!(o.status.success(), "{}", stderr(&o));
    }
    let lock = read_lock(&f.lock);
    let image = lock["images"]["1.34"]["image"]
        .as_str()
        .unwrap()
        .to_string();
    let (tag, digest) = (
        lock["images"]["1.34"]["tag"].as_str().unwrap(),
        lock["images"]["1.34"]["digest"].as_str().unwrap(),
    );

    // magnum-label (only for a magnum-cluster-api patched to read it): one label;
    // python-magnumclient splits on the first '='.
    let (out, _) = render(&f, "magnum-label", Some("1.34"));
    let (key, value) = out.trim_end().split_once('=').unwrap();
    assert_eq!((key, value), ("cloud_provider_image", image.as_str()));
    assert!(value.contains(&format!(":{tag}@{digest}")));

    // magnum-prefix-tag: what magnum-cluster-api builds from the two labels is the image.
    let (out, err) = render(&f, "magnum-prefix-tag", Some("1.34"));
    let labels: std::collections::BTreeMap<&str, &str> =
        out.lines().map(|l| l.split_once('=').unwrap()).collect();
    let mcapi_image = format!(
        "{}/openstack-cloud-controller-manager:{}",
        labels["container_infra_prefix"], labels["cloud_provider_tag"]
    );
    assert_eq!(mcapi_image, image);
    assert!(err.contains("moves every image of the cluster"), "{err}");

    // helm-values: YAML whose image line, as the chart template builds it, is the image.
    let (out, _) = render(&f, "helm-values", Some("1.34"));
    let values: serde_norway::Value = serde_norway::from_str(&out).unwrap();
    let chart_line = format!(
        "{}:{}",
        values["image"]["repository"].as_str().unwrap(),
        values["image"]["tag"].as_str().unwrap()
    );
    assert_eq!(chart_line, image);
    helm_renders(&f, &out, &image);

    // atmosphere-vars: Atmosphere image overrides whose values start with the Atmosphere prefix.
    let (out, _) = render(&f, "atmosphere-vars", None);
    let vars: serde_norway::Value = serde_norway::from_str(&out).unwrap();
    let vars = &vars["atmosphere_image_overrides"];
    for (minor, key) in [
        ("1.34", "openstack_cloud_controller_manager_1_34"),
        ("1.35", "openstack_cloud_controller_manager_1_35"),
    ] {
        let v = vars[key].as_str().unwrap();
        let stripped = v
            .strip_prefix("{{ atmosphere_image_prefix }}")
            .expect("TestImageHasPrefix");
        assert_eq!(stripped, lock["images"][minor]["image"].as_str().unwrap());
    }

    // --all for the line formats: one block per minor.
    let (out, _) = render(&f, "magnum-label", None);
    assert_eq!(
        out.lines()
            .filter(|l| l.starts_with("cloud_provider_image="))
            .count(),
        2
    );
    let (out, _) = render(&f, "helm-values", None);
    let docs: Vec<serde_norway::Value> = out
        .split("\n---\n")
        .map(|d| serde_norway::from_str(d).unwrap())
        .collect();
    assert_eq!(docs.len(), 2);

    // An entry recorded without --push is not rendered by default.
    let o = occm_forge(f.path())
        .args(["build", "--k8s", "1.33", "--source"])
        .arg(&f.upstream)
        .output()
        .unwrap();
    assert!(o.status.success());
    let o = forge(&f, &["render", "--format", "helm-values", "--k8s", "1.33"]);
    assert_eq!(o.status.code(), Some(2));
    assert!(
        stderr(&o).contains("was recorded without --push"),
        "{}",
        stderr(&o)
    );
}

/// `helm template` of a chart whose DaemonSet image line is the OCCM chart's
/// (`templates/daemonset.yaml` L48 upstream) renders exactly `image`.
fn helm_renders(f: &Fixture, values: &str, image: &str) {
    let helm = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join(".tools/bin/helm");
    assert!(
        helm.is_file(),
        "`helm` is not installed in .tools/bin: run scripts/test, which installs the test dependencies"
    );
    let chart = f.path().join("chart");
    std::fs::create_dir_all(chart.join("templates")).unwrap();
    std::fs::write(
        chart.join("Chart.yaml"),
        "apiVersion: v2\nname: occm\nversion: 2.34.0\nappVersion: v1.34.0\n",
    )
    .unwrap();
    std::fs::write(chart.join("values.yaml"), "image:\n  repository: registry.k8s.io/provider-os/openstack-cloud-controller-manager\n  tag: \"\"\n").unwrap();
    std::fs::write(
        chart.join("templates/daemonset.yaml"),
        "apiVersion: apps/v1\nkind: DaemonSet\nmetadata:\n  name: occm\nspec:\n  template:\n    spec:\n      containers:\n        - name: openstack-cloud-controller-manager\n          image: \"{{ .Values.image.repository }}:{{ default .Chart.AppVersion .Values.image.tag }}\"\n",
    )
    .unwrap();
    let values_file = f.path().join("values.yaml");
    std::fs::write(&values_file, values).unwrap();
    let out = run(Command::new(&helm)
        .args(["template", "occm"])
        .arg(&chart)
        .arg("--values")
        .arg(&values_file));
    let rendered: serde_norway::Value = serde_norway::from_str(&out).unwrap();
    assert_eq!(
        rendered["spec"]["template"]["spec"]["containers"][0]["image"].as_str(),
        Some(image),
        "{out}"
    );
}

/// Upstream moves a pinned tag (a re-release, or worse): `upstream check` reports it with its own
/// exit status, 13, and one line naming the tag, the pinned commit and the new one, also when
/// another minor has a newer release (which alone is 11).
#[test]
fn upstream_check_reports_a_moved_pinned_tag_with_its_own_exit_status() {
    let f = fixture(&["linux/amd64"]);
    let source = f.upstream.to_str().unwrap().to_string();
    run(git(&f.upstream).args(["tag", "-f", "v1.34.1", &f.commits.v1_35]));
    let o = forge(&f, &["upstream", "check", "--source", &source]);
    assert_eq!(o.status.code(), Some(13), "{}", stderr(&o));
    let (tag, pinned, now) = ("v1.34.1", &f.commits.v1_34, &f.commits.v1_35);
    let named =
        |l: &&str| l.contains(tag) && l.contains(pinned.as_str()) && l.contains(now.as_str());
    let line = stderr(&o)
        .lines()
        .filter(named)
        .map(str::to_string)
        .collect::<Vec<_>>();
    assert_eq!(
        line,
        [format!(
            "occm-forge: warning: upstream moved tag {tag} (1.34): it points at {now}, images.toml pins {pinned}; find out why before re-pinning it (`occm-forge pin --k8s 1.34 --tag {tag}`)"
        )],
        "{}",
        stderr(&o)
    );
    assert!(
        stdout(&o)
            .lines()
            .any(|l| l.starts_with("1.34  v1.34.1  ") && named(&l)),
        "{}",
        stdout(&o)
    );

    // With a newer release of another minor too, the moved tag still decides the status.
    tag_upstream(&f, "v1.33.2");
    let o = forge(&f, &["upstream", "check", "--json", "--source", &source]);
    assert_eq!(o.status.code(), Some(13), "{}", stderr(&o));
    let j: serde_json::Value = serde_json::from_str(&stdout(&o)).unwrap();
    assert_eq!(
        (&j["new"], &j["moved"]),
        (&serde_json::json!(true), &serde_json::json!(true))
    );
    let m34 = j["minors"]
        .as_array()
        .unwrap()
        .iter()
        .find(|m| m["minor"] == "1.34")
        .unwrap();
    assert_eq!(m34["commit"].as_str(), Some(pinned.as_str()));
    assert_eq!(m34["moved_to"].as_str(), Some(now.as_str()));
    assert_eq!(
        stderr(&o).lines().filter(named).count(),
        1,
        "{}",
        stderr(&o)
    );

    // Put back, nothing moved: 11 for the newer release alone.
    run(git(&f.upstream).args(["tag", "-f", "v1.34.1", pinned]));
    let o = forge(&f, &["upstream", "check", "--json", "--source", &source]);
    assert_eq!(o.status.code(), Some(11), "{}", stderr(&o));
}

/// The `run:` script of the step named `step` of `job` in pipelines/watch.yml (`None`: the job's
/// only step), and the job's `if:`.
fn watch_script(job: &str, step: Option<&str>) -> (String, String) {
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("pipelines/watch.yml");
    let wf: serde_norway::Value =
        serde_norway::from_str(&std::fs::read_to_string(path).unwrap()).unwrap();
    let job = &wf["jobs"][job];
    let steps = job["steps"].as_sequence().unwrap();
    let s = match step {
        Some(name) => steps
            .iter()
            .find(|s| s["name"].as_str() == Some(name))
            .unwrap(),
        None => &steps[0],
    };
    (
        s["run"].as_str().unwrap().to_string(),
        job["if"].as_str().unwrap_or_default().to_string(),
    )
}

/// Runs a workflow script as GitHub does (`bash --noprofile --norc -eo pipefail`), in `dir`, with
/// the real binary on PATH and the runner's files in `runner`.
fn run_step(
    script: &str,
    dir: &std::path::Path,
    runner: &std::path::Path,
    env: &[(&str, &str)],
) -> Output {
    let bin = std::path::Path::new(env!("CARGO_BIN_EXE_occm-forge"))
        .parent()
        .unwrap();
    let path = format!("{}:{}", bin.display(), std::env::var("PATH").unwrap());
    // The environment occm_forge() sets (offline, the shared cache).
    let forge = occm_forge(dir);
    let mut cmd = Command::new("bash");
    cmd.args(["--noprofile", "--norc", "-eo", "pipefail", "-c", script])
        .current_dir(dir)
        .envs(
            forge
                .get_envs()
                .filter_map(|(k, v)| Some((k.to_owned(), v?.to_owned()))),
        )
        .env("PATH", path)
        .env("RUNNER_TEMP", runner)
        .env("GITHUB_OUTPUT", runner.join("output"))
        .env("GITHUB_STEP_SUMMARY", runner.join("summary"))
        .envs(env.iter().copied());
    cmd.output().unwrap()
}

/// watch.yml on a moved tag: the check step records it (exit 13 is not a failed check), and the
/// moved-tag job fails the run with an error annotation naming the tag and both commits.
#[test]
fn the_watch_workflow_fails_the_run_naming_a_moved_tag() {
    let f = fixture(&["linux/amd64"]);
    let cfg = std::fs::read_to_string(&f.config).unwrap();
    let cfg = cfg.replace(
        "https://github.com/kubernetes/cloud-provider-openstack",
        f.upstream.to_str().unwrap(),
    );
    std::fs::write(&f.config, cfg).unwrap();
    let runner = f.path().join("runner");
    std::fs::create_dir_all(&runner).unwrap();
    let (check, _) = watch_script("check", Some("Upstream check"));
    let (report, condition) = watch_script("moved-tag", None);
    assert!(
        condition.contains("needs.check.outputs.moved"),
        "{condition}"
    );

    // Nothing moved: no `moved` output, so the job does not run.
    let o = run_step(&check, f.path(), &runner, &[]);
    assert!(o.status.success(), "{}", stderr(&o));
    let outputs = std::fs::read_to_string(runner.join("output")).unwrap();
    assert!(!outputs.contains("moved="), "{outputs}");

    run(git(&f.upstream).args(["tag", "-f", "v1.34.1", &f.commits.v1_35]));
    std::fs::remove_file(runner.join("output")).unwrap();
    let o = run_step(&check, f.path(), &runner, &[]);
    assert!(o.status.success(), "{}", stderr(&o));
    let outputs = std::fs::read_to_string(runner.join("output")).unwrap();
    assert!(outputs.contains("new=false\n"), "{outputs}");
    let moved = outputs
        .lines()
        .find_map(|l| l.strip_prefix("moved="))
        .expect("a moved output")
        .to_string();

    let o = run_step(&report, f.path(), &runner, &[("MOVED", &moved)]);
    assert_eq!(o.status.code(), Some(1), "{}", stderr(&o));
    let (pinned, now) = (&f.commits.v1_34, &f.commits.v1_35);
    assert_eq!(
        stdout(&o).trim_end(),
        format!(
            "::error title=upstream moved tag v1.34.1::1.34: upstream moved tag v1.34.1 to {now}; images.toml pins {pinned}. Find out why (a re-release, or a compromised tag) before re-pinning with occm-forge pin --k8s 1.34 --tag v1.34.1"
        )
    );
}
