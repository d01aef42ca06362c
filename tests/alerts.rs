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
    // Shown with `cargo test --test alerts -- --nocapture`.
    println!("{check}{test}");
}
