//! A job of one of pipelines/*.yml run step by step as GitHub runs a `run:` step: bash
//! `-eo pipefail`, with `$RUNNER_TEMP`, `$GITHUB_OUTPUT` and `$GITHUB_STEP_SUMMARY` files, and
//! the step's own `env:` where it is plain text (expressions are set by the test instead).

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use serde_json::Value;

/// The steps of one job, a runner temp directory and the environment every step gets.
pub struct Job {
    name: String,
    steps: Vec<Value>,
    runner: tempfile::TempDir,
    env: Vec<(String, String)>,
}

impl Job {
    /// Job `job` of `pipelines/<workflow>`, its steps run in `workspace`'s checkout with `env`.
    pub fn new(workflow: &str, job: &str, env: &[(&str, String)]) -> Job {
        let path = Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("pipelines")
            .join(workflow);
        let yaml: serde_norway::Value =
            serde_norway::from_str(&std::fs::read_to_string(&path).unwrap()).unwrap();
        let steps: Value = serde_json::to_value(&yaml["jobs"][job]["steps"]).unwrap();
        let runner = tempfile::tempdir().unwrap();
        let r = runner.path();
        let mut all: Vec<(String, String)> = vec![
            ("PATH".into(), std::env::var("PATH").unwrap()),
            ("HOME".into(), std::env::var("HOME").unwrap()),
            ("RUNNER_TEMP".into(), r.display().to_string()),
            (
                "GITHUB_OUTPUT".into(),
                r.join("output").display().to_string(),
            ),
            (
                "GITHUB_STEP_SUMMARY".into(),
                r.join("summary").display().to_string(),
            ),
        ];
        all.extend(env.iter().map(|(k, v)| (k.to_string(), v.clone())));
        Job {
            name: format!("{workflow} {job}"),
            steps: steps.as_array().unwrap().clone(),
            runner,
            env: all,
        }
    }

    /// `$RUNNER_TEMP`.
    pub fn runner_temp(&self) -> &Path {
        self.runner.path()
    }

    /// Runs the step whose name starts with `name` in `workspace` with `env` on top; returns
    /// its output and what it wrote to `$GITHUB_OUTPUT`.
    pub fn run(
        &self,
        name: &str,
        workspace: &Path,
        env: &[(&str, &str)],
    ) -> (Output, BTreeMap<String, String>) {
        let step = self
            .steps
            .iter()
            .find(|s| s["name"].as_str().is_some_and(|n| n.starts_with(name)))
            .unwrap_or_else(|| panic!("{} has no step {name:?}", self.name));
        let output: PathBuf = self.runner.path().join("output");
        let _ = std::fs::remove_file(&output);
        let o = Command::new("bash")
            .args(["--noprofile", "--norc", "-eo", "pipefail", "-c"])
            .arg(step["run"].as_str().unwrap())
            .env_clear()
            .envs(self.env.iter().map(|(k, v)| (k.as_str(), v.as_str())))
            .envs(env.iter().copied())
            .current_dir(workspace)
            .output()
            .unwrap();
        let outputs = std::fs::read_to_string(&output)
            .unwrap_or_default()
            .lines()
            .filter_map(|l| l.split_once('='))
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        (o, outputs)
    }

    /// What the steps wrote to `$GITHUB_STEP_SUMMARY`.
    pub fn summary(&self) -> String {
        std::fs::read_to_string(self.runner.path().join("summary")).unwrap_or_default()
    }
}
