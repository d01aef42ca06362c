//! Test stage: `go test -trimpath -json` on the configured packages; the event stream
//! (`cmd/test2json` format: `Action`, `Package`, `Test`, `Output`, and since Go 1.24 the
//! `build-output`/`build-fail` events with `ImportPath`) is folded into a summary.
//!
//! `-trimpath` is the build stage's flag too: with the same flags and environment
//! ([`Toolchain::command`], `CGO_ENABLED=0`), every package the tests compile for the host is the
//! same compile action as the host platform's `go build`, so the build finds it in the Go build
//! cache instead of compiling the whole dependency graph a second time. What the tests test is
//! unchanged: only the file paths recorded in the compiled code are module-relative.

use std::collections::BTreeMap;
use std::io::{BufRead, BufReader, Read};
use std::path::Path;
use std::process::Stdio;

use serde::Deserialize;

use super::{Toolchain, summarize_stderr};

/// One test's end state.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Outcome {
    /// `pass`.
    Pass,
    /// `fail`.
    Fail,
    /// `skip`.
    Skip,
}

/// A test that failed, with its output.
#[derive(Debug, Clone)]
pub struct FailedTest {
    /// `package.TestName` (or the package alone for a package-level failure such as a build error).
    pub name: String,
    /// Everything it printed.
    pub output: String,
}

/// The folded `go test -json` stream.
#[derive(Debug, Clone, Default)]
pub struct TestSummary {
    /// (package import path, test name incl. `/subtest`) → outcome.
    pub results: BTreeMap<(String, String), Outcome>,
    /// Failed tests and failed packages, with output.
    pub failures: Vec<FailedTest>,
}

impl TestSummary {
    /// Count of `(passed, failed, skipped)` tests (subtests included).
    pub fn counts(&self) -> (usize, usize, usize) {
        let c = |o| self.results.values().filter(|v| **v == o).count();
        (c(Outcome::Pass), c(Outcome::Fail), c(Outcome::Skip))
    }

    /// The outcome of the test named `name` (`TestX` or `TestX/sub`) in any package: `Fail` if it
    /// failed anywhere, else `Pass` if it passed anywhere, else `Skip`; `None` if it never ran.
    pub fn outcome_of(&self, name: &str) -> Option<Outcome> {
        let all: Vec<Outcome> = self
            .results
            .iter()
            .filter(|((_, t), _)| t == name)
            .map(|(_, o)| *o)
            .collect();
        if all.is_empty() {
            None
        } else if all.contains(&Outcome::Fail) {
            Some(Outcome::Fail)
        } else if all.contains(&Outcome::Pass) {
            Some(Outcome::Pass)
        } else {
            Some(Outcome::Skip)
        }
    }
}

/// Test-stage failures. Each message is one line; outputs of failed tests are in `failures`.
#[derive(Debug, thiserror::Error)]
pub enum TestError {
    /// `go` could not be started or ended without a usable event stream.
    #[error("go test: {message}")]
    Go {
        /// What happened: the modules that could not be downloaded, or the tail of stderr.
        message: String,
    },
    /// The patched tree needs go.mod/go.sum changes the patch series does not carry.
    #[error("go test: {message}")]
    ModuleGraph {
        /// Go's line and what to do.
        message: String,
    },
    /// The Go toolchain of images.toml `go` cannot be downloaded.
    #[error("go test: {message}")]
    Toolchain {
        /// The cause and the hint.
        message: String,
    },
    /// The test binaries could not be started: `fork/exec <binary>: permission denied` because
    /// the directory Go wrote them to is on a `noexec` mount (golang/go#52941); or Go's writes
    /// filled a file system (`no space left on device`). Not a failing test: the machine cannot
    /// run tests there.
    #[error("go test: {message}")]
    CannotRun {
        /// The binary, its mount and what to do.
        message: String,
    },
    /// Tests or packages failed.
    #[error(
        "go test: {} failed ({}); {passed} passed, {skipped} skipped{}",
        failures.len(),
        names(failures),
        hint.as_deref().map(|h| format!("; {h}")).unwrap_or_default()
    )]
    Failed {
        /// The failures with their output.
        failures: Vec<FailedTest>,
        /// Passed count.
        passed: usize,
        /// Skipped count.
        skipped: usize,
        /// Why a failure may be occm-forge's `-trimpath` rather than the test ([`trimpath_hint`]).
        hint: Option<String>,
    },
    /// Required tests did not run, or were skipped.
    #[error("go test: required test(s) did not run and pass: {}", missing.join(", "))]
    RequiredMissing {
        /// `TestName (did not run)` / `TestName (skipped)`.
        missing: Vec<String>,
    },
}

fn names(f: &[FailedTest]) -> String {
    let mut v: Vec<&str> = f.iter().map(|f| f.name.as_str()).take(5).collect();
    if f.len() > 5 {
        v.push("…");
    }
    v.join(", ")
}

#[derive(Deserialize)]
#[serde(rename_all = "PascalCase")]
struct Event {
    action: String,
    #[serde(default)]
    package: String,
    #[serde(default)]
    test: String,
    #[serde(default)]
    output: String,
    #[serde(default)]
    import_path: String,
}

/// Folds a `go test -json` stream. Lines that are not JSON are kept as package-less output.
pub fn fold_events(stream: impl BufRead) -> TestSummary {
    let mut s = TestSummary::default();
    let mut output: BTreeMap<(String, String), String> = BTreeMap::new();
    let mut failed_pkgs: Vec<String> = Vec::new();
    for line in stream.lines().map_while(Result::ok) {
        let Ok(ev) = serde_json::from_str::<Event>(&line) else {
            output
                .entry((String::new(), String::new()))
                .or_default()
                .push_str(&format!("{line}\n"));
            continue;
        };
        match ev.action.as_str() {
            "output" => output
                .entry((ev.package, ev.test))
                .or_default()
                .push_str(&ev.output),
            "build-output" => output
                .entry((ev.import_path, String::new()))
                .or_default()
                .push_str(&ev.output),
            "build-fail" => failed_pkgs.push(ev.import_path),
            "pass" | "fail" | "skip" if !ev.test.is_empty() => {
                let o = match ev.action.as_str() {
                    "pass" => Outcome::Pass,
                    "fail" => Outcome::Fail,
                    _ => Outcome::Skip,
                };
                s.results.insert((ev.package, ev.test), o);
            }
            "fail" => failed_pkgs.push(ev.package),
            _ => {}
        }
    }
    for ((pkg, test), o) in &s.results {
        if *o == Outcome::Fail {
            // Report only the innermost failing tests: a parent fails because a subtest failed.
            let has_failed_child = s.results.iter().any(|((p, t), o)| {
                p == pkg && *o == Outcome::Fail && t.starts_with(&format!("{test}/"))
            });
            if !has_failed_child {
                s.failures.push(FailedTest {
                    name: format!("{pkg}.{test}"),
                    output: output
                        .get(&(pkg.clone(), test.clone()))
                        .cloned()
                        .unwrap_or_default(),
                });
            }
        }
    }
    for pkg in failed_pkgs {
        let any_test_failed = s
            .results
            .iter()
            .any(|((p, _), o)| *p == pkg && *o == Outcome::Fail);
        if !any_test_failed && !s.failures.iter().any(|f| f.name == pkg) {
            let out = output
                .get(&(pkg.clone(), String::new()))
                .cloned()
                .unwrap_or_default();
            s.failures.push(FailedTest {
                name: pkg,
                output: out,
            });
        }
    }
    s
}

/// Runs `go test -trimpath -json <packages>` in `dir` with `toolchain` and checks the result.
///
/// Fails on any failed test or package ([`TestError::Failed`]), and on any name in `required`
/// that did not run and pass ([`TestError::RequiredMissing`]). On success returns the summary.
pub fn run(
    dir: &Path,
    toolchain: &Toolchain,
    packages: &[String],
    required: &[String],
) -> Result<TestSummary, TestError> {
    let summary = run_raw(dir, toolchain, packages)?;
    check(summary, required).map_err(|e| match e {
        TestError::Failed {
            failures,
            passed,
            skipped,
            hint: None,
        } => TestError::Failed {
            hint: trimpath_hint(dir, &failures),
            failures,
            passed,
            skipped,
        },
        e => e,
    })
}

/// When a failed test's output names a module-relative path (`<module>/<dir>/<file>`, the form
/// `-trimpath` records for `runtime.Caller` and panics) of a file that exists in the work tree
/// `dir`: the hint that the tests run with `-trimpath`, so a test that finds its files through
/// `runtime.Caller` (gkampitakis/go-snaps#118) looks for them at the module path.
pub fn trimpath_hint(dir: &Path, failures: &[FailedTest]) -> Option<String> {
    let go_mod = std::fs::read_to_string(dir.join("go.mod")).ok()?;
    let module = go_mod
        .lines()
        .find_map(|l| l.trim().strip_prefix("module "))?
        .trim()
        .trim_matches('"')
        .to_string();
    let prefix = format!("{module}/");
    failures.iter().find_map(|f| {
        f.output
            .split(|c: char| c.is_whitespace() || matches!(c, '"' | '\'' | '`' | '(' | ')' | ','))
            .filter_map(|token| token.find(&prefix).map(|at| &token[at..]))
            .map(|path| path.trim_end_matches([':', '.']))
            .map(|path| path.split(':').next().unwrap_or(path))
            .find(|path| {
                let relative = &path[prefix.len()..];
                !relative.is_empty() && dir.join(relative).exists()
            })
            .map(|path| {
                format!(
                    "{}: its output names {path}, a module-relative path of {}: occm-forge runs the tests with -trimpath (as it builds), so a test that finds its files through runtime.Caller looks for them there",
                    f.name,
                    &path[prefix.len()..]
                )
            })
    })
}

/// Runs `go test -json` and folds the stream without judging it (used by `patches prove`, which
/// expects failures). Errors only when no event stream was produced.
pub fn run_raw(
    dir: &Path,
    toolchain: &Toolchain,
    packages: &[String],
) -> Result<TestSummary, TestError> {
    let go_err = |message: String| TestError::Go { message };
    let mut cmd = toolchain.command(dir);
    cmd.arg("test")
        .arg("-trimpath")
        .arg("-json")
        .args(packages)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    let (mut child, _guard) = crate::base::interrupt::spawn(&mut cmd).map_err(|e| {
        TestError::Toolchain {
            message: format!("cannot run go: {e}; install Go 1.21 or later (it fetches the pinned toolchain) and put it on PATH"),
        }
    })?;
    let mut stderr = child.stderr.take().expect("piped stderr");
    let err_thread = std::thread::spawn(move || {
        let mut s = String::new();
        let _ = stderr.read_to_string(&mut s);
        s
    });
    let summary = fold_events(BufReader::new(child.stdout.take().expect("piped stdout")));
    let status = child.wait().map_err(|e| go_err(e.to_string()))?;
    let err_text = err_thread.join().unwrap_or_default();
    if summary.results.is_empty() && summary.failures.is_empty() && !status.success() {
        if let Some(line) = crate::base::disk::full_in_output(&err_text) {
            return Err(TestError::CannotRun {
                message: format!("{line}; {}", super::build::FULL_FIX),
            });
        }
        if super::toolchain_unavailable(&err_text) {
            return Err(TestError::Toolchain {
                message: summarize_stderr(&err_text, 6),
            });
        }
        return Err(go_err(format!(
            "{status}: {}",
            summarize_stderr(&err_text, 6)
        )));
    }
    let mut summary = summary;
    if !status.success() && summary.failures.is_empty() {
        // Before Go 1.24, build errors go to stderr and only show as a failed exit status.
        summary.failures.push(FailedTest {
            name: "go test".into(),
            output: err_text,
        });
    }
    Ok(summary)
}

/// When `output` says a test binary could not be started (`fork/exec <path>: permission denied`),
/// the one line naming the binary and, when that is the cause, the `noexec` mount it is on.
fn cannot_run(output: &str) -> Option<String> {
    let line = output
        .lines()
        .find(|l| l.contains("fork/exec ") && l.contains("permission denied"))?;
    let path = line.split("fork/exec ").nth(1)?.split(": ").next()?.trim();
    let fs = crate::base::disk::file_system(Path::new(path));
    Some(match fs.filter(|fs| fs.noexec) {
        Some(fs) => format!(
            "the test binary {path} cannot be started: {} is mounted noexec, so no program may run from it; point occm-forge's cache (--cache-dir, OCCM_FORGE_CACHE), where Go writes test binaries, at a file system that allows it",
            fs.mount_point.display()
        ),
        None => format!(
            "the test binary {path} cannot be started ({}): not a failing test; check that programs may run from that directory",
            line.trim()
        ),
    })
}

/// Judges a summary: every test passed and every required test ran and passed.
pub fn check(summary: TestSummary, required: &[String]) -> Result<TestSummary, TestError> {
    let (passed, _, skipped) = summary.counts();
    if let Some(message) = summary
        .failures
        .iter()
        .find_map(|f| super::module_graph_change(&f.output))
    {
        return Err(TestError::ModuleGraph { message });
    }
    if let Some(message) = summary.failures.iter().find_map(|f| cannot_run(&f.output)) {
        return Err(TestError::CannotRun { message });
    }
    if let Some(line) = summary
        .failures
        .iter()
        .find_map(|f| crate::base::disk::full_in_output(&f.output))
    {
        return Err(TestError::CannotRun {
            message: format!("{line}; {}", super::build::FULL_FIX),
        });
    }
    if !summary.failures.is_empty() {
        return Err(TestError::Failed {
            failures: summary.failures,
            passed,
            skipped,
            hint: None,
        });
    }
    let missing: Vec<String> = required
        .iter()
        .filter_map(|r| match summary.outcome_of(r) {
            Some(Outcome::Pass) => None,
            Some(Outcome::Skip) => Some(format!("{r} (skipped)")),
            Some(Outcome::Fail) => Some(format!("{r} (failed)")),
            None => Some(format!("{r} (did not run)")),
        })
        .collect();
    if !missing.is_empty() {
        return Err(TestError::RequiredMissing { missing });
    }
    Ok(summary)
}

#[cfg(test)]
mod tests {
    use super::*;

    const STREAM: &str = r#"{"Action":"start","Package":"k/p"}
{"Action":"run","Package":"k/p","Test":"TestA"}
{"Action":"output","Package":"k/p","Test":"TestA","Output":"=== RUN   TestA\n"}
{"Action":"pass","Package":"k/p","Test":"TestA","Elapsed":0}
{"Action":"run","Package":"k/p","Test":"TestB"}
{"Action":"run","Package":"k/p","Test":"TestB/sub"}
{"Action":"output","Package":"k/p","Test":"TestB/sub","Output":"    b_test.go:9: boom\n"}
{"Action":"fail","Package":"k/p","Test":"TestB/sub","Elapsed":0}
{"Action":"fail","Package":"k/p","Test":"TestB","Elapsed":0}
{"Action":"skip","Package":"k/p","Test":"TestC","Elapsed":0}
{"Action":"fail","Package":"k/p","Elapsed":0.1}
{"ImportPath":"k/q","Action":"build-output","Output":"q.go:3:1: syntax error\n"}
{"ImportPath":"k/q","Action":"build-fail"}
{"Action":"fail","Package":"k/q","Elapsed":0,"FailedBuild":"k/q"}
"#;

    #[test]
    fn folds_results_subtests_and_build_failures() {
        let s = fold_events(STREAM.as_bytes());
        assert_eq!(s.counts(), (1, 2, 1));
        let names: Vec<&str> = s.failures.iter().map(|f| f.name.as_str()).collect();
        assert_eq!(names, ["k/p.TestB/sub", "k/q"]);
        assert!(s.failures[0].output.contains("boom"));
        assert!(s.failures[1].output.contains("syntax error"));
        assert_eq!(s.outcome_of("TestB"), Some(Outcome::Fail));
        assert_eq!(s.outcome_of("TestC"), Some(Outcome::Skip));
        assert_eq!(s.outcome_of("TestZ"), None);
    }

    /// `check`'s error for package `k/p` failed with `output`, which must be
    /// [`TestError::CannotRun`].
    fn cannot_run_error(output: String) -> TestError {
        let s = TestSummary {
            results: BTreeMap::new(),
            failures: vec![FailedTest {
                name: "k/p".into(),
                output,
            }],
        };
        let e = check(s, &[]).unwrap_err();
        assert!(matches!(e, TestError::CannotRun { .. }), "{e}");
        e
    }

    #[test]
    fn a_test_binary_that_cannot_start_is_not_a_failing_test() {
        let dir = tempfile::tempdir().unwrap();
        let binary = dir.path().join("b001/openstack.test");
        let output = format!(
            "fork/exec {}: permission denied\nFAIL\tk/p\t0.001s\n",
            binary.display()
        );
        let e = cannot_run_error(output);
        assert!(
            e.to_string().starts_with(&format!(
                "go test: the test binary {} cannot be started (fork/exec",
                binary.display()
            )),
            "{e}"
        );
    }

    #[test]
    fn a_package_that_fails_on_a_full_disk_is_not_a_failing_test() {
        let dir = tempfile::tempdir().unwrap();
        let output = format!(
            "# k/p\ncompile: writing output: write {}/b001/_pkg_.a: no space left on device\nFAIL\tk/p [build failed]\n",
            dir.path().display()
        );
        let e = cannot_run_error(output);
        let text = e.to_string();
        assert!(
            text.contains("no space left on device: ")
                && text.contains(", which is full; free some room there"),
            "{text}"
        );
    }

    #[test]
    fn required_tests_must_pass() {
        let s = fold_events(
            &STREAM.as_bytes()[..STREAM
                .find("{\"Action\":\"run\",\"Package\":\"k/p\",\"Test\":\"TestB\"}")
                .unwrap()],
        );
        assert!(check(s.clone(), &["TestA".into()]).is_ok());
        let e = check(s, &["TestA".into(), "TestGone".into()]).unwrap_err();
        assert_eq!(
            e.to_string(),
            "go test: required test(s) did not run and pass: TestGone (did not run)"
        );
    }
}
