//! What a person sees on stderr: one line per finished stage (`occm-forge: test  8.5s  …`) and,
//! when stderr is a terminal, a spinner for the running stage and a byte bar for the upload
//! (indicatif draws nothing when stderr is not a TTY, so logs and CI output stay clean).

use std::sync::Mutex;
use std::time::Duration;

use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};

use crate::pipeline::stage::{Reporter, StageReport};

/// The stderr reporter of the command line.
pub struct Terminal {
    quiet: bool,
    prefix: String,
    spinner: Mutex<Option<ProgressBar>>,
    upload: Mutex<Option<ProgressBar>>,
}

impl Terminal {
    /// A reporter printing `occm-forge: <prefix><stage> …` lines; nothing at all when `quiet`.
    pub fn new(quiet: bool, prefix: impl Into<String>) -> Self {
        Terminal {
            quiet,
            prefix: prefix.into(),
            spinner: Mutex::new(None),
            upload: Mutex::new(None),
        }
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
    }

    fn finished(&self, r: &StageReport) {
        self.clear();
        if !self.quiet {
            eprintln!(
                "occm-forge: {}{:<8} {:>7.1}s  {}",
                self.prefix, r.stage, r.seconds, r.detail
            );
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
