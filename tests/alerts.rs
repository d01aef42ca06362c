//! The alerting rules in deploy/monitoring/occm-alerts.yaml: structure, runbook links into
//! docs/alerts.md, and `promtool check rules` + `promtool test rules` over the unit tests in
//! deploy/monitoring/tests/.
//!
//! The PrometheusRule is the only copy of the rules. promtool reads plain rule files, so this
//! test writes the PrometheusRule's `.spec` (its `groups:`) to a temporary rules file and
//! points the promtool test files at it.
//!
//! Self-contained on purpose (no tests/common): it only needs `promtool`, which Debian's
//! `prometheus` package provides.

use std::collections::{BTreeMap, BTreeSet};
use std::io::{Read, Seek, SeekFrom};
use std::path::{Path, PathBuf};
use std::process::Command;

use serde_norway::{Mapping, Value};

/// The name the promtool test files use in `rule_files`. This test replaces it with the path
/// of the rules file it extracts.
const RULES_PLACEHOLDER: &str = "occm-alerts.rules.yaml";

const PROMTOOL_MISSING: &str =
    "`promtool` is not installed: run scripts/test, which installs the test dependencies";

fn repo() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

fn read_yaml(path: &Path) -> Value {
    let text = std::fs::read_to_string(path)
        .unwrap_or_else(|e| panic!("cannot read {}: {e}", path.display()));
    serde_norway::from_str(&text)
        .unwrap_or_else(|e| panic!("{} is not valid YAML: {e}", path.display()))
}

fn prometheus_rule() -> Value {
    read_yaml(&repo().join("deploy/monitoring/occm-alerts.yaml"))
}

fn str_at<'a>(v: &'a Value, key: &str) -> Option<&'a str> {
    v.get(key).and_then(Value::as_str)
}

/// `.spec` of the PrometheusRule, i.e. a plain Prometheus rules file (`groups:`).
fn rules_file_content(rule: &Value) -> String {
    let groups = rule
        .get("spec")
        .and_then(|s| s.get("groups"))
        .unwrap_or_else(|| panic!("occm-alerts.yaml has no spec.groups"));
    let mut spec = Mapping::new();
    spec.insert(Value::from("groups"), groups.clone());
    serde_norway::to_string(&Value::Mapping(spec)).unwrap()
}

/// Every alerting rule of the PrometheusRule, by alert name.
fn alerts(rule: &Value) -> BTreeMap<String, Value> {
    let mut out = BTreeMap::new();
    let groups = rule["spec"]["groups"]
        .as_sequence()
        .expect("spec.groups is a list");
    for group in groups {
        let rules = group["rules"]
            .as_sequence()
            .unwrap_or_else(|| panic!("group {:?} has no rules list", group.get("name")));
        for r in rules {
            if let Some(name) = str_at(r, "alert") {
                assert!(
                    out.insert(name.to_string(), r.clone()).is_none(),
                    "alert {name} is defined twice"
                );
            }
        }
    }
    assert!(!out.is_empty(), "occm-alerts.yaml defines no alerts");
    out
}

/// The promtool unit test files, sorted by name.
fn promtool_test_files() -> Vec<PathBuf> {
    let dir = repo().join("deploy/monitoring/tests");
    let mut files: Vec<PathBuf> = std::fs::read_dir(&dir)
        .unwrap_or_else(|e| panic!("cannot list {}: {e}", dir.display()))
        .map(|e| e.unwrap().path())
        .filter(|p| p.to_string_lossy().ends_with(".test.yaml"))
        .collect();
    files.sort();
    assert!(!files.is_empty(), "no *.test.yaml in {}", dir.display());
    files
}

/// GitHub's anchor for a Markdown heading: lower case, spaces to `-`, punctuation dropped.
fn github_anchor(heading: &str) -> String {
    heading
        .trim()
        .to_lowercase()
        .chars()
        .filter_map(|c| match c {
            ' ' => Some('-'),
            c if c.is_alphanumeric() || c == '-' || c == '_' => Some(c),
            _ => None,
        })
        .collect()
}

#[test]
fn prometheus_rule_is_namespace_agnostic_and_every_alert_has_severity_summary_and_runbook() {
    let rule = prometheus_rule();
    assert_eq!(
        str_at(&rule, "apiVersion"),
        Some("monitoring.coreos.com/v1")
    );
    assert_eq!(str_at(&rule, "kind"), Some("PrometheusRule"));
    assert!(
        str_at(&rule["metadata"], "name").is_some(),
        "metadata.name is missing"
    );
    assert!(
        rule["metadata"].get("namespace").is_none(),
        "the PrometheusRule must not set metadata.namespace"
    );

    let docs_path = repo().join("docs/alerts.md");
    let docs = std::fs::read_to_string(&docs_path)
        .unwrap_or_else(|e| panic!("cannot read {}: {e}", docs_path.display()));
    let anchors: BTreeSet<String> = docs
        .lines()
        .filter_map(|l| l.strip_prefix("## "))
        .map(github_anchor)
        .collect();

    for (name, r) in alerts(&rule) {
        let severity = str_at(&r["labels"], "severity");
        assert!(
            matches!(severity, Some("warning" | "critical")),
            "{name}: labels.severity must be warning or critical, got {severity:?}"
        );
        for key in ["summary", "description", "runbook"] {
            assert!(
                str_at(&r["annotations"], key).is_some_and(|s| !s.trim().is_empty()),
                "{name}: annotations.{key} is missing"
            );
        }
        let anchor = name.to_lowercase();
        assert_eq!(
            str_at(&r["annotations"], "runbook"),
            Some(format!("docs/alerts.md#{anchor}").as_str()),
            "{name}: the runbook annotation must point at its section in docs/alerts.md"
        );
        assert!(
            anchors.contains(&anchor),
            "{name}: docs/alerts.md has no `## {name}` section (anchors: {anchors:?})"
        );
    }
}

#[test]
fn every_alert_has_a_firing_and_a_silent_promtool_case() {
    let names: BTreeSet<String> = alerts(&prometheus_rule()).into_keys().collect();
    let mut fires = BTreeSet::new();
    let mut silent = BTreeSet::new();
    for file in promtool_test_files() {
        let t = read_yaml(&file);
        let rule_files: Vec<&str> = t["rule_files"]
            .as_sequence()
            .map(|s| s.iter().filter_map(Value::as_str).collect())
            .unwrap_or_default();
        assert_eq!(
            rule_files,
            [RULES_PLACEHOLDER],
            "{}: rule_files must be exactly [{RULES_PLACEHOLDER}] (this test replaces it)",
            file.display()
        );
        for group in t["tests"].as_sequence().into_iter().flatten() {
            for case in group["alert_rule_test"].as_sequence().into_iter().flatten() {
                let name = str_at(case, "alertname").unwrap_or_else(|| {
                    panic!("{}: alert_rule_test without alertname", file.display())
                });
                assert!(
                    names.contains(name),
                    "{}: tests alert {name}, which occm-alerts.yaml does not define",
                    file.display()
                );
                let expected = case
                    .get("exp_alerts")
                    .and_then(Value::as_sequence)
                    .map_or(0, Vec::len);
                if expected == 0 {
                    &mut silent
                } else {
                    &mut fires
                }
                .insert(name.to_string());
            }
        }
    }
    let no_fire: Vec<_> = names.difference(&fires).collect();
    let no_silent: Vec<_> = names.difference(&silent).collect();
    assert!(
        no_fire.is_empty(),
        "alerts without a promtool case where they fire: {no_fire:?}"
    );
    assert!(
        no_silent.is_empty(),
        "alerts without a promtool case where they stay silent: {no_silent:?}"
    );
}

/// Runs promtool and returns its output (stdout and stderr in the order promtool wrote them);
/// panics with that output when it fails.
fn promtool(args: &[&str]) -> String {
    let mut log = tempfile::tempfile().unwrap();
    let status = match Command::new("promtool")
        .args(args)
        .stdout(log.try_clone().unwrap())
        .stderr(log.try_clone().unwrap())
        .status()
    {
        Ok(status) => status,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => panic!("{PROMTOOL_MISSING}"),
        Err(e) => panic!("cannot run promtool: {e}"),
    };
    let mut text = String::new();
    log.seek(SeekFrom::Start(0)).unwrap();
    log.read_to_string(&mut text).unwrap();
    assert!(
        status.success(),
        "`promtool {}` failed ({status}); the test files are copies of deploy/monitoring/tests/ \
         with rule_files pointing at the extracted rules:\n{text}",
        args.join(" ")
    );
    text
}

#[test]
fn promtool_checks_the_rules_and_passes_the_unit_tests() {
    let tmp = tempfile::tempdir().unwrap();
    let rules = tmp.path().join(RULES_PLACEHOLDER);
    std::fs::write(&rules, rules_file_content(&prometheus_rule())).unwrap();
    let rules = rules.to_str().expect("temporary path is UTF-8").to_string();

    let mut tests = Vec::new();
    for file in promtool_test_files() {
        let mut t = read_yaml(&file);
        let Some(map) = t.as_mapping_mut() else {
            panic!("{} is not a YAML mapping", file.display())
        };
        map.insert(
            Value::from("rule_files"),
            Value::Sequence(vec![Value::from(rules.clone())]),
        );
        let dest = tmp.path().join(file.file_name().unwrap());
        std::fs::write(&dest, serde_norway::to_string(&t).unwrap()).unwrap();
        tests.push(dest.to_str().unwrap().to_string());
    }

    let check = promtool(&["check", "rules", &rules]);
    let mut args = vec!["test", "rules"];
    args.extend(tests.iter().map(String::as_str));
    let test = promtool(&args);
    // Shown with `cargo test --test suite alerts:: -- --nocapture`.
    println!("{check}{test}");
}

/// A series kube-state-metrics makes from a CustomResourceState config: its labels, and for a
/// StateSet the label that carries the state and the states.
#[derive(Debug, Clone, PartialEq)]
struct KsmSeries {
    labels: BTreeSet<String>,
    state: Option<(String, BTreeSet<String>)>,
}

/// Every metric a `kind: CustomResourceStateMetrics` config makes (kube-state-metrics
/// `pkg/customresourcestate`: `<metricNamePrefix>_<name>`, the resource's `labelsFromPath`, the
/// metric's own `labelsFromPath` and a StateSet's `labelName`).
fn ksm_metrics(config: &Value) -> BTreeMap<String, KsmSeries> {
    let keys = |v: &Value| -> BTreeSet<String> {
        v.as_mapping()
            .into_iter()
            .flatten()
            .filter_map(|(k, _)| k.as_str().map(str::to_string))
            .collect()
    };
    let mut out = BTreeMap::new();
    for r in config["spec"]["resources"].as_sequence().unwrap() {
        let prefix = str_at(r, "metricNamePrefix").unwrap();
        for m in r["metrics"].as_sequence().unwrap() {
            let each = &m["each"];
            let ty = str_at(each, "type").unwrap();
            let body = &each[match ty {
                "StateSet" => "stateSet",
                "Gauge" => "gauge",
                "Info" => "info",
                t => panic!("metric type {t}"),
            }];
            let mut labels = keys(&r["labelsFromPath"]);
            labels.extend(keys(&body["labelsFromPath"]));
            let state = str_at(body, "labelName").map(|l| {
                labels.insert(l.to_string());
                let list = body["list"]
                    .as_sequence()
                    .unwrap()
                    .iter()
                    .map(|s| s.as_str().unwrap().to_string())
                    .collect();
                (l.to_string(), list)
            });
            out.insert(
                format!("{prefix}_{}", str_at(m, "name").unwrap()),
                KsmSeries { labels, state },
            );
        }
    }
    out
}

/// `name{a="b", c="d"}` → (name, labels).
fn parse_series(s: &str) -> (String, BTreeMap<String, String>) {
    let (name, rest) = s.split_once('{').unwrap_or((s, "}"));
    let mut labels = BTreeMap::new();
    for pair in rest.trim_end_matches('}').split("\", ") {
        let Some((k, v)) = pair.split_once('=') else {
            continue;
        };
        labels.insert(
            k.trim().to_string(),
            v.trim().trim_matches(['"', ','].as_ref()).to_string(),
        );
    }
    (name.trim().to_string(), labels)
}

fn ksm_config(version: &str) -> Value {
    read_yaml(&repo().join(format!(
        "deploy/monitoring/kube-state-metrics/capi-{version}.yaml"
    )))
}

/// The management alerts read only what the shipped kube-state-metrics configuration makes:
/// every `capi_*` metric of their expressions, and every `capi_*` series of the promtool tests
/// with its labels (less those Prometheus adds: `instance`, `job`, `cluster`) and its StateSet
/// value. Both configurations (Cluster API v1beta1 and v1beta2) make the same metrics with the
/// same labels (v1beta1 has no `Updating` phase).
#[test]
fn the_management_alerts_read_only_series_the_shipped_kube_state_metrics_config_makes() {
    let labels = |m: &BTreeMap<String, KsmSeries>| -> BTreeMap<String, BTreeSet<String>> {
        m.iter()
            .map(|(k, v)| (k.clone(), v.labels.clone()))
            .collect()
    };
    assert_eq!(
        labels(&ksm_metrics(&ksm_config("v1beta2"))),
        labels(&ksm_metrics(&ksm_config("v1beta1"))),
        "capi-v1beta1.yaml and capi-v1beta2.yaml make different series"
    );
    for version in ["v1beta1", "v1beta2"] {
        alerts_read_what(&ksm_metrics(&ksm_config(version)));
    }
}

fn alerts_read_what(metrics: &BTreeMap<String, KsmSeries>) {
    let names = regex_names(&prometheus_rule());
    assert!(!names.is_empty(), "no capi_* metric in the rules");
    for n in &names {
        assert!(
            metrics.contains_key(n),
            "the rules read {n}, which the kube-state-metrics config does not make"
        );
    }
    let mut checked = 0;
    for file in promtool_test_files() {
        let t = read_yaml(&file);
        for case in t["tests"].as_sequence().into_iter().flatten() {
            for s in case["input_series"].as_sequence().into_iter().flatten() {
                let (name, labels) = parse_series(str_at(s, "series").unwrap());
                if !name.starts_with("capi_") {
                    continue;
                }
                let Some(m) = metrics.get(&name) else {
                    panic!("{}: {name} is not made by the config", file.display());
                };
                for (k, v) in &labels {
                    if ["instance", "job", "cluster"].contains(&k.as_str()) {
                        continue;
                    }
                    assert!(
                        m.labels.contains(k),
                        "{}: {name} has no label {k} (it has {:?})",
                        file.display(),
                        m.labels
                    );
                    if let Some((state, list)) = &m.state
                        && state == k
                    {
                        assert!(
                            list.contains(v),
                            "{}: {name}{{{k}={v}}} is not a state",
                            file.display()
                        );
                    }
                }
                checked += 1;
            }
        }
    }
    assert!(checked > 10, "only {checked} capi_* series checked");
}

/// Every `capi_*` metric name in the PrometheusRule's expressions.
fn regex_names(rule: &Value) -> BTreeSet<String> {
    let mut out = BTreeSet::new();
    for (_, a) in alerts(rule) {
        let expr = str_at(&a, "expr").unwrap();
        let mut rest = expr;
        while let Some(i) = rest.find("capi_") {
            let tail = &rest[i..];
            let end = tail
                .find(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
                .unwrap_or(tail.len());
            out.insert(tail[..end].to_string());
            rest = &tail[end..];
        }
    }
    out
}

/// The Atmosphere values carry exactly the standalone configurations and the ClusterRole's rules.
#[test]
fn the_atmosphere_values_carry_the_standalone_kube_state_metrics_config_and_rbac() {
    let dir = repo().join("deploy/monitoring/kube-state-metrics");
    let role = read_yaml(&dir.join("clusterrole.yaml"));
    for version in ["v1beta1", "v1beta2"] {
        let values = read_yaml(&dir.join(format!("atmosphere-values-{version}.yaml")));
        let ksm = &values["kube_prometheus_stack_helm_values"]["kube-state-metrics"];
        assert_eq!(ksm["customResourceState"]["enabled"], Value::Bool(true));
        assert_eq!(
            ksm["customResourceState"]["config"],
            ksm_config(version),
            "atmosphere-values-{version}.yaml differs from capi-{version}.yaml"
        );
        assert_eq!(ksm["rbac"]["extraRules"], role["rules"], "{version}");
    }
}

/// The kube-state-metrics release the gated test builds: the newest the Go module proxy serves
/// with a checksum-database entry here (v2.17.0 is not served, v2.16.0 has no sum.golang.org
/// entry).
const KSM_VERSION: &str = "v2.15.0";

/// Builds kube-state-metrics `KSM_VERSION` through the Go module proxy into `cache` (once).
fn build_kube_state_metrics(cache: &Path) -> PathBuf {
    let dir = cache.join(format!("kube-state-metrics-{KSM_VERSION}"));
    let binary = dir.join("kube-state-metrics");
    if binary.is_file() {
        return binary;
    }
    let module = dir.join("module");
    std::fs::create_dir_all(&module).unwrap();
    std::fs::write(
        module.join("go.mod"),
        format!("module occm-forge.invalid/test/ksm\n\ngo 1.23.0\n\nrequire k8s.io/kube-state-metrics/v2 {KSM_VERSION}\n"),
    )
    .unwrap();
    let toolchain = occm_forge_core::pipeline::go::Toolchain::new("1.25.1", cache);
    let run = |mut c: Command| {
        let o = c.output().unwrap();
        assert!(
            o.status.success(),
            "{c:?}: {}",
            String::from_utf8_lossy(&o.stderr)
        );
    };
    let mut get = toolchain.helper_command(&module);
    get.args([
        "get",
        &format!("k8s.io/kube-state-metrics/v2@{KSM_VERSION}"),
    ]);
    run(get);
    let mut build = toolchain.command(&module);
    build
        .args(["build", "-trimpath", "-o"])
        .arg(&binary)
        .arg("k8s.io/kube-state-metrics/v2");
    run(build);
    binary
}

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// A real kube-state-metrics with capi-v1beta2.yaml against a real kube-apiserver serving
/// Cluster API v1.13.2's CRDs: a Machine in phase Provisioned whose MachineHealthCheck handed it
/// to remediation, and a MachineHealthCheck with 1 of 3 Machines healthy. Its /metrics carries
/// the series the alerts read, and the alerts fire on exactly those series (promtool, the
/// scraped series held for 40 minutes).
#[tokio::test(flavor = "multi_thread")]
#[ignore = "needs the Go module proxy to build kube-state-metrics, etcd, kube-apiserver v1.34.1 and Cluster API v1.13.2 (run with -- --ignored; OCCM_FORGE_GATED_CACHE reuses a cache)"]
async fn real_kube_state_metrics_with_the_shipped_config_makes_the_series_the_alerts_fire_on() {
    use occm_forge_accept::sim::{capi, control_plane};
    use serde_json::json;
    let tmp_cache = tempfile::tempdir().unwrap();
    let cache = std::env::var_os("OCCM_FORGE_GATED_CACHE")
        .filter(|c| !c.is_empty())
        .map(PathBuf::from)
        .unwrap_or_else(|| tmp_cache.path().to_path_buf());
    let (ksm, bins, manager) = tokio::task::block_in_place(|| {
        let toolchain = occm_forge_core::pipeline::go::Toolchain::new("1.25.1", &cache);
        (
            build_kube_state_metrics(&cache),
            control_plane::build(
                &control_plane::Versions {
                    kubernetes: "v1.34.1".into(),
                    etcd: "v3.6.5".into(),
                },
                &toolchain,
                &cache,
            )
            .unwrap(),
            capi::build(&occm_forge_core::config::ClusterApi::default(), &cache).unwrap(),
        )
    });
    let dir = tempfile::tempdir().unwrap();
    let cp = control_plane::ControlPlane::start(
        &bins,
        &dir.path().join("cp"),
        std::time::Duration::from_secs(60),
    )
    .await
    .unwrap();
    let kube = occm_forge_core::kubernetes::Kube::with_token(
        &cp.url,
        &cp.ca_pem,
        &cp.token,
        std::time::Duration::from_secs(10),
    )
    .await
    .unwrap();
    capi::install_crds(&kube, &manager.crds).await.unwrap();
    let ns = "magnum-system";
    kube.create(
        "/api/v1/namespaces",
        json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": ns}}),
    )
    .await
    .unwrap();
    let api = |kind: &str| format!("/apis/cluster.x-k8s.io/v1beta2/namespaces/{ns}/{kind}");
    let now = "2026-12-02T10:00:00Z";
    let machine = kube
        .post(&api("machines"), json!({"apiVersion": "cluster.x-k8s.io/v1beta2", "kind": "Machine",
            "metadata": {"name": "kube-abc12-default-worker-aaaaa", "namespace": ns},
            "spec": {"clusterName": "kube-abc12",
                     "bootstrap": {"dataSecretName": "kube-abc12-default-worker-aaaaa"},
                     "infrastructureRef": {"apiGroup": "infrastructure.cluster.x-k8s.io", "kind": "OpenStackMachine", "name": "kube-abc12-default-worker-aaaaa"}}}))
        .await
        .unwrap();
    kube.merge_patch(&format!("{}/kube-abc12-default-worker-aaaaa/status", api("machines")),
        json!({"status": {"phase": "Provisioned", "conditions": [
            {"type": "OwnerRemediated", "status": "False", "reason": "WaitingForRemediation", "message": "", "lastTransitionTime": now}]}}))
        .await
        .unwrap();
    kube.post(&api("machinehealthchecks"), json!({"apiVersion": "cluster.x-k8s.io/v1beta2", "kind": "MachineHealthCheck",
            "metadata": {"name": "kube-abc12-default-worker", "namespace": ns},
            "spec": {"clusterName": "kube-abc12", "selector": {"matchLabels": {"pool": "default-worker"}}}}))
        .await
        .unwrap();
    kube.merge_patch(
        &format!(
            "{}/kube-abc12-default-worker/status",
            api("machinehealthchecks")
        ),
        json!({"status": {"expectedMachines": 3, "currentHealthy": 1}}),
    )
    .await
    .unwrap();

    let (port, telemetry) = (free_port(), free_port());
    let log = std::fs::File::create(dir.path().join("ksm.log")).unwrap();
    let mut child = Command::new(&ksm)
        .arg(format!("--kubeconfig={}", cp.kubeconfig.display()))
        .arg("--custom-resource-state-only")
        .arg(format!(
            "--custom-resource-state-config-file={}",
            repo()
                .join("deploy/monitoring/kube-state-metrics/capi-v1beta2.yaml")
                .display()
        ))
        .args(["--host=127.0.0.1", "--telemetry-host=127.0.0.1"])
        .arg(format!("--port={port}"))
        .arg(format!("--telemetry-port={telemetry}"))
        .stdout(log.try_clone().unwrap())
        .stderr(log)
        .spawn()
        .unwrap();
    let wanted = [
        "capi_machine_status_phase{",
        "capi_machine_status_condition{",
        "capi_machinehealthcheck_status_expected_machines{",
        "capi_machinehealthcheck_status_current_healthy{",
    ];
    let client = reqwest::Client::new();
    let started = std::time::Instant::now();
    let metrics = loop {
        let text = match client
            .get(format!("http://127.0.0.1:{port}/metrics"))
            .send()
            .await
        {
            Ok(r) => r.text().await.unwrap_or_default(),
            Err(_) => String::new(),
        };
        if wanted
            .iter()
            .all(|w| text.lines().any(|l| l.starts_with(w)))
        {
            break text;
        }
        if started.elapsed() > std::time::Duration::from_secs(60) {
            let _ = child.kill();
            panic!(
                "kube-state-metrics did not serve {wanted:?} in 60 s: {text}\nlog: {}",
                std::fs::read_to_string(dir.path().join("ksm.log")).unwrap_or_default()
            );
        }
        tokio::time::sleep(std::time::Duration::from_millis(500)).await;
    };
    let _ = child.kill();
    let _ = child.wait();
    cp.stop().await;
    let uid = machine["metadata"]["uid"].as_str().unwrap();
    let series: Vec<&str> = metrics.lines().filter(|l| l.starts_with("capi_")).collect();
    eprintln!("{}", series.join("\n"));
    // (kube-state-metrics adds customresource_group, _kind and _version to every series.)
    let has = |name: &str, labels: &[(&str, &str)], value: &str| {
        series.iter().any(|line| {
            let Some((s, v)) = line.rsplit_once(' ') else {
                return false;
            };
            let (n, l) = parse_series(&s.replace("\",", "\", "));
            n == name
                && v == value
                && labels
                    .iter()
                    .all(|(k, want)| l.get(*k).map(String::as_str) == Some(*want))
        })
    };
    let machine_labels = [
        ("cluster_name", "kube-abc12"),
        ("name", "kube-abc12-default-worker-aaaaa"),
        ("namespace", ns),
        ("uid", uid),
    ];
    let with = |extra: &[(&'static str, &'static str)]| -> Vec<(&str, &str)> {
        machine_labels
            .iter()
            .copied()
            .chain(extra.iter().copied())
            .collect()
    };
    assert!(
        has(
            "capi_machine_status_phase",
            &with(&[("phase", "Provisioned")]),
            "1"
        ),
        "{series:?}"
    );
    assert!(
        has(
            "capi_machine_status_phase",
            &with(&[("phase", "Running")]),
            "0"
        ),
        "{series:?}"
    );
    assert!(
        has(
            "capi_machine_status_condition",
            &with(&[("type", "OwnerRemediated"), ("status", "False")]),
            "1"
        ),
        "{series:?}"
    );
    let mhc = [
        ("cluster_name", "kube-abc12"),
        ("name", "kube-abc12-default-worker"),
        ("namespace", ns),
    ];
    assert!(
        has(
            "capi_machinehealthcheck_status_expected_machines",
            &mhc,
            "3"
        ),
        "{series:?}"
    );
    assert!(
        has("capi_machinehealthcheck_status_current_healthy", &mhc, "1"),
        "{series:?}"
    );

    // The alerts on exactly these series, held for 40 minutes.
    let input: Vec<String> = series
        .iter()
        .filter_map(|l| l.rsplit_once(' '))
        .map(|(s, v)| format!("      - series: '{s}'\n        values: '{}x40'\n", v.trim()))
        .collect();
    let firing = |alert: &str, name: &str| {
        format!(
            "          - labels: 'ALERTS{{alertname=\"{alert}\", alertstate=\"firing\", severity=\"warning\", namespace=\"{ns}\", cluster_name=\"kube-abc12\", name=\"{name}\"}}'\n            value: 1\n"
        )
    };
    let test = format!(
        "rule_files:\n  - {RULES_PLACEHOLDER}\nevaluation_interval: 1m\ntests:\n  - interval: 1m\n    input_series:\n{}    promql_expr_test:\n      - expr: 'ALERTS{{alertstate=\"firing\", alertname=~\"CAPIMachineWithoutNode|CAPIMachineHealthCheckUnhealthy\"}}'\n        eval_time: 35m\n        exp_samples:\n{}{}",
        input.concat(),
        firing(
            "CAPIMachineHealthCheckUnhealthy",
            "kube-abc12-default-worker"
        ),
        firing("CAPIMachineWithoutNode", "kube-abc12-default-worker-aaaaa"),
    );
    let rules = dir.path().join(RULES_PLACEHOLDER);
    std::fs::write(&rules, rules_file_content(&prometheus_rule())).unwrap();
    let file = dir.path().join("scraped.test.yaml");
    let mut t: Value = serde_norway::from_str(&test).unwrap();
    t["rule_files"] = Value::Sequence(vec![Value::from(rules.to_str().unwrap())]);
    std::fs::write(&file, serde_norway::to_string(&t).unwrap()).unwrap();
    promtool(&["test", "rules", file.to_str().unwrap()]);
}
