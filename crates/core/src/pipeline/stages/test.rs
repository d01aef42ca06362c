//! The `test` stage: `go test -json` on the minor's packages, judged against the required tests.

use std::path::Path;

use async_trait::async_trait;

use crate::pipeline::Error;
use crate::pipeline::go::Toolchain;
use crate::pipeline::go::test::{self, TestSummary};
use crate::pipeline::stage::{Done, Stage, StageContext};

/// How a test run is judged.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Judge<'a> {
    /// Every test must pass and every required test must run and pass (`build`).
    Required(&'a [String]),
    /// Nothing is judged: failures are data (`patches prove`); a run that produced no test
    /// events is returned as its problem instead of an error.
    Record,
}

/// The outcome of a test stage: the folded events, and for [`Judge::Record`] why the tests
/// could not run at all.
#[derive(Debug, Clone, Default)]
pub struct Tested {
    /// The folded `go test -json` stream.
    pub summary: TestSummary,
    /// Set when Go produced no event stream (e.g. modules the proxy refused).
    pub problem: Option<String>,
}

/// Runs the tests of `packages` in `dir`.
pub struct TestStage<'a> {
    /// The patched work tree.
    pub dir: &'a Path,
    /// Toolchain and caches.
    pub toolchain: &'a Toolchain,
    /// Go packages, e.g. `./pkg/openstack/`.
    pub packages: &'a [String],
    /// How the run is judged.
    pub judge: Judge<'a>,
}

/// What the stage line says of images.toml's `required_tests` once the run passed (a required
/// test that did not run and pass fails the stage before): `the 7 required tests (images.toml
/// required_tests) passed`.
fn required_passed(n: usize) -> String {
    match n {
        0 => "no required tests (images.toml required_tests)".to_string(),
        1 => "the 1 required test (images.toml required_tests) passed".to_string(),
        n => format!("the {n} required tests (images.toml required_tests) passed"),
    }
}

#[async_trait]
impl Stage for TestStage<'_> {
    type Output = Tested;

    fn name(&self) -> &'static str {
        "test"
    }

    async fn run(self, _: &StageContext<'_>) -> Result<Done<Tested>, Error> {
        let go = &self.toolchain.version;
        match self.judge {
            Judge::Required(required) => {
                let summary = test::run(self.dir, self.toolchain, self.packages, required)?;
                let (p, f, s) = summary.counts();
                let detail = format!(
                    "go{go}: {p} passed, {f} failed, {s} skipped; {}",
                    required_passed(required.len())
                );
                Ok(Done::new(
                    Tested {
                        summary,
                        problem: None,
                    },
                    detail,
                ))
            }
            Judge::Record => match test::run_raw(self.dir, self.toolchain, self.packages) {
                Ok(summary) => {
                    let (p, f, s) = summary.counts();
                    let detail = format!("go{go}: {p} passed, {f} failed, {s} skipped");
                    Ok(Done::new(
                        Tested {
                            summary,
                            problem: None,
                        },
                        detail,
                    ))
                }
                Err(e) => {
                    // Stopped by a signal: not a run whose tests could not start.
                    crate::pipeline::stage::checkpoint()?;
                    Ok(Done::new(
                        Tested {
                            summary: TestSummary::default(),
                            problem: Some(e.to_string()),
                        },
                        format!("go{go}: the tests could not run (see the table)"),
                    ))
                }
            },
        }
    }
}
