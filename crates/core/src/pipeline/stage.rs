//! The stage interface and its runner.
//!
//! A stage is a value holding its inputs (plain data, borrowed from the build plan and from
//! earlier stages' outputs) whose [`Stage::run`] returns its output and a one-line detail. The
//! [`Runner`] does what every stage needs, once: it tells the [`Reporter`] a stage started and
//! finished, times it, runs blocking stages inside `tokio::task::block_in_place`, drops an async
//! stage when SIGINT or SIGTERM arrives, and stops the run at the next stage boundary after a
//! signal ([`checkpoint`]). Cross-cutting behaviour lives here, not around each call site (ko's
//! `build.Limiter` / `build.Caching` idea).

use std::time::Instant;

use async_trait::async_trait;
use serde::Serialize;

use crate::pipeline::Error;

/// One finished stage, as shown on stderr and written by `--timings`.
#[derive(Debug, Clone, Serialize, serde::Deserialize)]
pub struct StageReport {
    /// Stage name: source, patches, test, build, image, describe, publish, record (owned only
    /// when read back from a stored report).
    pub stage: std::borrow::Cow<'static, str>,
    /// Wall time in seconds.
    pub seconds: f64,
    /// One line of what it did.
    pub detail: String,
}

/// Receives progress: stage starts and ends, and upload progress. Implementations draw it
/// (the binary: a line per stage on stderr, spinners and an upload bar when stderr is a TTY).
pub trait Reporter: Sync {
    /// A stage begins.
    fn started(&self, _stage: &'static str) {}
    /// A stage ended.
    fn finished(&self, _report: &StageReport) {}
    /// `bytes` more of the push's `total` bytes of blobs were handled (uploaded, mounted or found).
    fn uploaded(&self, _bytes: u64, _total: u64) {}
}

/// A [`Reporter`] that reports nothing.
pub struct Silent;

impl Reporter for Silent {}

/// A finished stage's output and the one-line detail of its stage line.
#[derive(Debug)]
pub struct Done<T> {
    /// The output handed to later stages.
    pub value: T,
    /// What the stage did, e.g. `4 applied, 0 already upstream (series 13e2cfb7c113)`.
    pub detail: String,
}

impl<T> Done<T> {
    /// `value` with `detail`.
    pub fn new(value: T, detail: impl Into<String>) -> Self {
        Done {
            value,
            detail: detail.into(),
        }
    }
}

/// What a running stage may use besides its own inputs.
pub struct StageContext<'a> {
    /// Progress sink (the publish stage reports uploaded bytes through it).
    pub reporter: &'a dyn Reporter,
}

/// One pipeline stage.
#[async_trait]
pub trait Stage: Send + Sized {
    /// What the stage hands to later stages.
    type Output: Send;

    /// The stage name on its stage line and in `--timings` (e.g. `source`).
    fn name(&self) -> &'static str;

    /// True (the default) when [`Stage::run`] blocks the thread (git, Go, compression, disk): the
    /// runner then runs it inside `block_in_place`. An async stage (network) returns false and is
    /// dropped as soon as a signal arrives.
    fn blocking(&self) -> bool {
        true
    }

    /// Runs the stage. Errors carry the stage in their [`Error`] variant.
    async fn run(self, cx: &StageContext<'_>) -> Result<Done<Self::Output>, Error>;
}

/// Runs stages one after another; see the module documentation.
pub struct Runner<'a> {
    reporter: &'a dyn Reporter,
    reports: Vec<StageReport>,
}

impl<'a> Runner<'a> {
    /// A runner reporting to `reporter`.
    pub fn new(reporter: &'a dyn Reporter) -> Self {
        Runner {
            reporter,
            reports: Vec::new(),
        }
    }

    /// Runs `stage`: reports its start, runs it, reports its end and timing, then fails with
    /// [`Error::Interrupted`] if a signal arrived meanwhile (or before: then the stage does not
    /// start). Must be called on a multi-threaded tokio runtime (blocking stages use
    /// `block_in_place`).
    pub async fn run<S: Stage>(&mut self, stage: S) -> Result<S::Output, Error> {
        checkpoint()?;
        let name = stage.name();
        self.reporter.started(name);
        let started = Instant::now();
        let cx = StageContext {
            reporter: self.reporter,
        };
        let done = if stage.blocking() {
            let handle = tokio::runtime::Handle::current();
            tokio::task::block_in_place(|| handle.block_on(stage.run(&cx)))
        } else {
            or_interrupted(stage.run(&cx)).await
        }?;
        self.record(name, started, done.detail);
        checkpoint()?;
        Ok(done.value)
    }

    /// Reports and records the end of the stage `name` started at `started`.
    fn record(&mut self, name: &'static str, started: Instant, detail: String) {
        let report = StageReport {
            stage: name.into(),
            seconds: started.elapsed().as_secs_f64(),
            detail,
        };
        self.reporter.finished(&report);
        self.reports.push(report);
    }

    /// Runs `work` as the stage `name`, for work that is not a [`Stage`] value and fails with
    /// its own error type `E` (acceptance's parts and scenarios): reports its start, awaits it,
    /// and reports and records its end when it succeeds. It does not look at signals: `work`
    /// checks them itself and blocks inside `tokio::task::block_in_place` where it blocks.
    pub async fn run_with<T, E>(
        &mut self,
        name: &'static str,
        work: impl std::future::Future<Output = Result<Done<T>, E>>,
    ) -> Result<T, E> {
        self.reporter.started(name);
        let started = Instant::now();
        let done = work.await?;
        self.record(name, started, done.detail);
        Ok(done.value)
    }

    /// Runs `first` and `second` as the stages named `names`, side by side on this task (for
    /// work that waits more than it computes, e.g. acceptance's ours and control on management
    /// clusters of their own): reports both starts, then each end as it comes, each timed from
    /// the common start; records them in the order they finished. Fails with the first error
    /// once both ended (the other's end is still reported and recorded when it succeeded), so
    /// neither is dropped half-way. Signals as in [`Runner::run_with`].
    pub async fn run_pair_with<A, B, E>(
        &mut self,
        names: (&'static str, &'static str),
        first: impl std::future::Future<Output = Result<Done<A>, E>>,
        second: impl std::future::Future<Output = Result<Done<B>, E>>,
    ) -> Result<(A, B), E> {
        use futures::future::{Either, select};
        self.reporter.started(names.0);
        self.reporter.started(names.1);
        let started = Instant::now();
        let (a, b) = match select(std::pin::pin!(first), std::pin::pin!(second)).await {
            Either::Left((a, rest)) => {
                self.record_ok(names.0, started, &a);
                let b = rest.await;
                self.record_ok(names.1, started, &b);
                (a, b)
            }
            Either::Right((b, rest)) => {
                self.record_ok(names.1, started, &b);
                let a = rest.await;
                self.record_ok(names.0, started, &a);
                (a, b)
            }
        };
        Ok((a?.value, b?.value))
    }

    /// [`Runner::record`] for a stage that succeeded; nothing for one that failed.
    fn record_ok<T, E>(&mut self, name: &'static str, started: Instant, done: &Result<Done<T>, E>) {
        if let Ok(d) = done {
            self.record(name, started, d.detail.clone());
        }
    }

    /// The stages finished so far, in order.
    pub fn reports(&self) -> &[StageReport] {
        &self.reports
    }

    /// The stage reports, consuming the runner.
    pub fn into_reports(self) -> Vec<StageReport> {
        self.reports
    }
}

/// Fails with [`Error::Interrupted`] once SIGINT or SIGTERM has arrived.
pub fn checkpoint() -> Result<(), Error> {
    match crate::base::interrupt::signal() {
        Some(sig) => Err(Error::Interrupted(sig)),
        None => Ok(()),
    }
}

/// `work` (async work outside a stage, e.g. the build's preflight registry checks), dropped as
/// soon as SIGINT or SIGTERM arrives: then [`Error::Interrupted`].
pub async fn or_interrupted<T>(
    work: impl std::future::Future<Output = Result<T, Error>>,
) -> Result<T, Error> {
    tokio::select! {
        done = work => done,
        _ = crate::base::interrupt::interrupted() => Err(Error::Interrupted(
            crate::base::interrupt::signal().unwrap_or(libc::SIGINT),
        )),
    }
}

/// `result`, unless SIGINT or SIGTERM arrived meanwhile: then [`Error::Interrupted`] (a part
/// stopped by the signal fails in its own words, which are not the cause).
pub fn unless_interrupted<T>(result: Result<T, Error>) -> Result<T, Error> {
    checkpoint().and(result)
}

#[cfg(test)]
mod tests {
    use std::sync::Mutex;

    use super::*;

    struct Echo(&'static str, Result<u32, &'static str>);

    #[async_trait]
    impl Stage for Echo {
        type Output = u32;
        fn name(&self) -> &'static str {
            self.0
        }
        async fn run(self, _: &StageContext<'_>) -> Result<Done<u32>, Error> {
            match self.1 {
                Ok(v) => Ok(Done::new(v, format!("value {v}"))),
                Err(e) => Err(Error::Io(e.into())),
            }
        }
    }

    #[derive(Default)]
    struct Recorder(Mutex<Vec<String>>);

    impl Reporter for Recorder {
        fn started(&self, stage: &'static str) {
            self.0.lock().unwrap().push(format!("start {stage}"));
        }
        fn finished(&self, r: &StageReport) {
            self.0
                .lock()
                .unwrap()
                .push(format!("end {} {}", r.stage, r.detail));
        }
    }

    #[tokio::test(flavor = "multi_thread")]
    async fn stages_are_reported_timed_and_stop_at_the_first_error() {
        let rec = Recorder::default();
        let mut runner = Runner::new(&rec);
        assert_eq!(runner.run(Echo("one", Ok(1))).await.unwrap(), 1);
        let e = runner.run(Echo("two", Err("boom"))).await.unwrap_err();
        assert_eq!(e.to_string(), "boom");
        assert_eq!(runner.reports().len(), 1);
        assert_eq!(
            *rec.0.lock().unwrap(),
            ["start one", "end one value 1", "start two"]
        );
    }

    #[tokio::test(flavor = "multi_thread")]
    async fn a_pair_runs_side_by_side_each_end_reported_as_it_comes_and_an_error_after_both() {
        use std::time::Duration;
        let after = |ms: u64, r: Result<&'static str, &'static str>| async move {
            tokio::time::sleep(Duration::from_millis(ms)).await;
            r.map(|v| Done::new(v, v))
        };
        let rec = Recorder::default();
        let mut runner = Runner::new(&rec);
        let t = Instant::now();
        let (a, b) = runner
            .run_pair_with(("slow", "fast"), after(400, Ok("a")), after(100, Ok("b")))
            .await
            .unwrap();
        assert_eq!((a, b), ("a", "b"));
        assert!(t.elapsed() < Duration::from_millis(700), "not side by side");
        let secs: Vec<_> = runner.reports().iter().map(|r| r.seconds).collect();
        assert!(secs[0] < 0.3 && secs[1] >= 0.4, "{secs:?}");
        // The fast one fails: the slow one still ends and is recorded, then the error.
        let e = runner
            .run_pair_with(("ok", "bad"), after(200, Ok("c")), after(50, Err("boom")))
            .await
            .unwrap_err();
        assert_eq!(e, "boom");
        assert_eq!(
            *rec.0.lock().unwrap(),
            [
                "start slow",
                "start fast",
                "end fast b",
                "end slow a",
                "start ok",
                "start bad",
                "end ok c"
            ]
        );
    }
}
