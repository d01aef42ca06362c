//! What a person sees on stderr: one line per finished stage (`occm-forge: test  8.5s  …`) and,
//! when stderr is a terminal, a spinner for the running stage and a byte bar for the upload
//! (indicatif draws nothing when stderr is not a TTY, so logs and CI output stay clean). When
//! stderr is not a terminal, a stage still running says so once a minute
//! (`occm-forge: test     still running after 2m00s`), so a log or a CI job is never silent for
//! the ten minutes a cold Go test and build take.

use std::collections::BTreeMap;
use std::io::IsTerminal as _;
use std::sync::{Arc, Condvar, Mutex};
use std::time::{Duration, Instant};

use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};

use crate::pipeline::stage::{Reporter, StageReport};

/// How often a running stage says it is still running when stderr is not a terminal.
pub const HEARTBEAT: Duration = Duration::from_secs(60);

/// Where the stage lines go: stderr, or (tests) a collector.
type Sink = Arc<dyn Fn(&str) + Send + Sync>;

/// A running stage's heartbeat thread and the flag that stops it.
struct Heartbeat {
    stop: Arc<(Mutex<bool>, Condvar)>,
    thread: std::thread::JoinHandle<()>,
}

/// The stderr reporter of the command line.
pub struct Terminal {
    quiet: bool,
    prefix: String,
    spinner: Mutex<Option<ProgressBar>>,
    upload: Mutex<Option<ProgressBar>>,
    /// Every how long a running stage says so; `None` on a terminal (the spinner shows it).
    heartbeat: Option<Duration>,
    beating: Mutex<BTreeMap<&'static str, Heartbeat>>,
    sink: Sink,
}

impl Terminal {
    /// A reporter printing `occm-forge: <prefix><stage> …` lines; nothing at all when `quiet`.
    /// When stderr is not a terminal, a stage running longer than [`HEARTBEAT`] says so every
    /// [`HEARTBEAT`].
    pub fn new(quiet: bool, prefix: impl Into<String>) -> Self {
        let heartbeat = (!std::io::stderr().is_terminal()).then_some(HEARTBEAT);
        Self::with(
            quiet,
            prefix,
            heartbeat,
            Arc::new(|l: &str| eprintln!("{l}")),
        )
    }

    fn with(
        quiet: bool,
        prefix: impl Into<String>,
        heartbeat: Option<Duration>,
        sink: Sink,
    ) -> Self {
        Terminal {
            quiet,
            prefix: prefix.into(),
            spinner: Mutex::new(None),
            upload: Mutex::new(None),
            heartbeat,
            beating: Mutex::new(BTreeMap::new()),
            sink,
        }
    }

    /// Starts `stage`'s heartbeat: a line every `every` until [`Terminal::stop_beating`].
    fn beat(&self, stage: &'static str, every: Duration) {
        let stop = Arc::new((Mutex::new(false), Condvar::new()));
        let (flag, sink) = (stop.clone(), self.sink.clone());
        let name = format!("{}{stage:<8}", self.prefix);
        let thread = std::thread::spawn(move || {
            let t0 = Instant::now();
            let (lock, wake) = &*flag;
            let mut stopped = lock.lock().expect("heartbeat lock");
            loop {
                let (s, timeout) = wake
                    .wait_timeout_while(stopped, every, |s| !*s)
                    .expect("heartbeat lock");
                stopped = s;
                if !timeout.timed_out() {
                    return;
                }
                let t = t0.elapsed().as_secs();
                sink(&format!(
                    "occm-forge: {name} still running after {}m{:02}s",
                    t / 60,
                    t % 60
                ));
            }
        });
        if let Some(old) = self
            .beating
            .lock()
            .expect("heartbeat lock")
            .insert(stage, Heartbeat { stop, thread })
        {
            Self::stop(old);
        }
    }

    /// Stops `stage`'s heartbeat, if it has one, and waits for its thread.
    fn stop_beating(&self, stage: &str) {
        let beat = self.beating.lock().expect("heartbeat lock").remove(stage);
        if let Some(b) = beat {
            Self::stop(b);
        }
    }

    fn stop(b: Heartbeat) {
        let (lock, wake) = &*b.stop;
        *lock.lock().expect("heartbeat lock") = true;
        wake.notify_all();
        let _ = b.thread.join();
    }

    fn clear(&self) {
        for slot in [&self.spinner, &self.upload] {
            if let Some(pb) = slot.lock().expect("progress lock").take() {
                pb.finish_and_clear();
            }
        }
    }
}

impl Reporter for Terminal {
    fn started(&self, stage: &'static str) {
        if self.quiet {
            return;
        }
        self.clear();
        let pb = ProgressBar::with_draw_target(None, ProgressDrawTarget::stderr());
        if let Ok(style) = ProgressStyle::with_template("{spinner} {msg} {elapsed}") {
            pb.set_style(style);
        }
        pb.set_message(format!("{}{stage}", self.prefix));
        pb.enable_steady_tick(Duration::from_millis(120));
        *self.spinner.lock().expect("progress lock") = Some(pb);
        if let Some(every) = self.heartbeat {
            self.beat(stage, every);
        }
    }

    fn finished(&self, r: &StageReport) {
        self.stop_beating(&r.stage);
        self.clear();
        if !self.quiet {
            (self.sink)(&format!(
                "occm-forge: {}{:<8} {:>7.1}s  {}",
                self.prefix, r.stage, r.seconds, r.detail
            ));
        }
    }

    fn uploaded(&self, bytes: u64, total: u64) {
        if self.quiet {
            return;
        }
        let mut slot = self.upload.lock().expect("progress lock");
        let pb = slot.get_or_insert_with(|| {
            let pb = ProgressBar::with_draw_target(Some(total), ProgressDrawTarget::stderr());
            if let Ok(style) = ProgressStyle::with_template(
                "  upload {bar:30} {bytes}/{total_bytes} {bytes_per_sec}",
            ) {
                pb.set_style(style);
            }
            pb
        });
        pb.inc(bytes);
    }
}

impl Drop for Terminal {
    fn drop(&mut self) {
        let beating = std::mem::take(&mut *self.beating.lock().expect("heartbeat lock"));
        for b in beating.into_values() {
            Self::stop(b);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn collecting(heartbeat: Option<Duration>) -> (Terminal, Arc<Mutex<Vec<String>>>) {
        let lines = Arc::new(Mutex::new(Vec::new()));
        let sink = lines.clone();
        let t = Terminal::with(
            false,
            "1.34 ",
            heartbeat,
            Arc::new(move |l: &str| sink.lock().unwrap().push(l.to_string())),
        );
        (t, lines)
    }

    fn report(stage: &'static str) -> StageReport {
        StageReport {
            stage: stage.into(),
            seconds: 0.2,
            detail: "done".into(),
        }
    }

    #[test]
    fn a_running_stage_says_so_until_it_finishes_and_not_after() {
        let (t, lines) = collecting(Some(Duration::from_millis(20)));
        t.started("test");
        std::thread::sleep(Duration::from_millis(150));
        t.finished(&report("test"));
        let seen = lines.lock().unwrap().clone();
        let beats = seen.iter().filter(|l| l.contains("still running")).count();
        assert!(beats >= 2, "{seen:?}");
        assert_eq!(
            seen[0], "occm-forge: 1.34 test     still running after 0m00s",
            "{seen:?}"
        );
        assert!(seen.last().unwrap().starts_with("occm-forge: 1.34 test"));
        assert!(seen.last().unwrap().ends_with("0.2s  done"), "{seen:?}");
        std::thread::sleep(Duration::from_millis(100));
        assert_eq!(
            lines.lock().unwrap().len(),
            seen.len(),
            "silent once finished"
        );
    }

    #[test]
    fn two_stages_side_by_side_each_beat_and_a_terminal_or_quiet_run_has_none() {
        let (t, lines) = collecting(Some(Duration::from_millis(20)));
        t.started("test");
        t.started("build");
        std::thread::sleep(Duration::from_millis(100));
        t.finished(&report("build"));
        std::thread::sleep(Duration::from_millis(100));
        t.finished(&report("test"));
        let seen = lines.lock().unwrap().clone();
        let after_build = seen
            .iter()
            .position(|l| l.ends_with("done") && l.contains("build"))
            .unwrap();
        assert!(
            seen[after_build..]
                .iter()
                .any(|l| l.contains("test") && l.contains("still running")),
            "{seen:?}"
        );
        assert!(
            !seen[after_build + 1..]
                .iter()
                .any(|l| l.contains("build") && l.contains("still running")),
            "{seen:?}"
        );
        let (t, lines) = collecting(None);
        t.started("test");
        std::thread::sleep(Duration::from_millis(60));
        t.finished(&report("test"));
        assert_eq!(lines.lock().unwrap().len(), 1);
    }
}
