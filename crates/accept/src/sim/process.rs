//! Child processes of an acceptance run (etcd, kube-apiserver, OCCM replicas): each in its own
//! process group, registered with [`occm_forge_core::base::interrupt`] (SIGINT/SIGTERM stop them), killed with
//! occm-forge (`PR_SET_PDEATHSIG`), stopped by process group when dropped, output in a log file.

use std::fs::File;
use std::io;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::mpsc;
use std::sync::{Mutex, OnceLock};
use std::time::{Duration, Instant};

use occm_forge_core::base::interrupt;
use occm_forge_core::pipeline::acceptance::AcceptError;

type SpawnReply = mpsc::Sender<io::Result<(Child, interrupt::Guard)>>;

/// `PR_SET_PDEATHSIG` fires when the *thread* that forked the child ends, not the process. Tokio
/// retires blocking-pool threads after 10 s idle, so children are forked from one thread that
/// lives as long as occm-forge.
fn spawner() -> &'static Mutex<mpsc::Sender<(Command, SpawnReply)>> {
    static SPAWNER: OnceLock<Mutex<mpsc::Sender<(Command, SpawnReply)>>> = OnceLock::new();
    SPAWNER.get_or_init(|| {
        let (tx, rx) = mpsc::channel::<(Command, SpawnReply)>();
        std::thread::Builder::new()
            .name("occm-forge-accept-spawner".into())
            .spawn(move || {
                for (mut cmd, reply) in rx {
                    let _ = reply.send(interrupt::spawn(&mut cmd));
                }
            })
            .expect("cannot start the spawner thread");
        Mutex::new(tx)
    })
}

/// A running child process and its log file.
pub(crate) struct Process {
    /// What it is, for messages: `etcd`, `kube-apiserver`, `ours replica 2`.
    pub(crate) name: String,
    /// Where its stdout and stderr go.
    pub(crate) log: PathBuf,
    child: Child,
    _guard: interrupt::Guard,
    status: Option<ExitStatus>,
}

impl Process {
    /// Starts `cmd` with stdout and stderr appended to `log`.
    pub(crate) fn spawn(name: &str, mut cmd: Command, log: &Path) -> io::Result<Process> {
        let out = File::options().create(true).append(true).open(log)?;
        let err = out.try_clone()?;
        cmd.stdin(Stdio::null()).stdout(out).stderr(err);
        // SAFETY: prctl(2) with PR_SET_PDEATHSIG only sets a flag of the calling (child)
        // process; it is async-signal-safe and touches no memory of the parent.
        unsafe {
            cmd.pre_exec(|| {
                if libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL) != 0 {
                    return Err(io::Error::last_os_error());
                }
                Ok(())
            });
        }
        let (tx, rx) = mpsc::channel();
        spawner()
            .lock()
            .expect("spawner lock")
            .send((cmd, tx))
            .map_err(|_| io::Error::other("the spawner thread is gone"))?;
        let (child, guard) = rx
            .recv()
            .map_err(|_| io::Error::other("the spawner thread is gone"))??;
        Ok(Process {
            name: name.to_string(),
            log: log.to_path_buf(),
            child,
            _guard: guard,
            status: None,
        })
    }

    /// The exit status once the process has ended.
    pub(crate) fn exited(&mut self) -> Option<ExitStatus> {
        if self.status.is_none() {
            self.status = self.child.try_wait().ok().flatten();
        }
        self.status
    }

    fn signal_group(&self, sig: i32) {
        // SAFETY: kill(2) on our own child's process group; no memory is touched.
        unsafe {
            libc::kill(-(self.child.id() as i32), sig);
        }
    }

    /// SIGKILL to the process group now (a crash, as seen by the others), and reap it.
    pub(crate) async fn kill(&mut self) -> Option<ExitStatus> {
        self.signal_group(libc::SIGKILL);
        self.wait_for(Duration::from_secs(10)).await
    }

    /// SIGTERM to the process group, SIGKILL after `grace`; returns the exit status.
    pub(crate) async fn stop(&mut self, grace: Duration) -> Option<ExitStatus> {
        if let Some(s) = self.exited() {
            return Some(s);
        }
        self.signal_group(libc::SIGTERM);
        if let Some(s) = self.wait_for(grace).await {
            return Some(s);
        }
        self.kill().await
    }

    async fn wait_for(&mut self, limit: Duration) -> Option<ExitStatus> {
        let start = Instant::now();
        loop {
            if let Some(s) = self.exited() {
                return Some(s);
            }
            if start.elapsed() >= limit {
                return None;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    /// The log's text (lossy UTF-8); empty when it cannot be read.
    pub(crate) fn log_text(&self) -> String {
        read_log(&self.log)
    }
}

impl Drop for Process {
    fn drop(&mut self) {
        if self.exited().is_none() {
            self.signal_group(libc::SIGKILL);
            let _ = self.child.wait();
        }
    }
}

/// A log file's text (lossy UTF-8); empty when it cannot be read.
pub(crate) fn read_log(path: &Path) -> String {
    std::fs::read(path)
        .map(|b| String::from_utf8_lossy(&b).into_owned())
        .unwrap_or_default()
}

/// The message of a klog line (`E1201 10:00:00.123456   4242 file.go:156] message` → `message`);
/// other lines trimmed as they are.
pub(crate) fn klog_message(line: &str) -> &str {
    let l = line.trim();
    let mut chars = l.chars();
    let klog = matches!(chars.next(), Some('I' | 'W' | 'E' | 'F'))
        && l.get(1..5)
            .is_some_and(|d| d.bytes().all(|b| b.is_ascii_digit()));
    match (klog, l.find("] ")) {
        (true, Some(i)) => l[i + 2..].trim(),
        _ => l,
    }
}

/// The last error-looking line of a log (klog `E`/`F` lines, or lines with `error`/`fatal`/
/// `panic`), else its last non-empty line; as a klog message, at most 300 characters.
pub(crate) fn last_error(text: &str) -> String {
    let lines: Vec<&str> = text.lines().filter(|l| !l.trim().is_empty()).collect();
    let pick = lines
        .iter()
        .rev()
        .find(|l| {
            let t = l.trim_start();
            t.starts_with('E')
                && t.get(1..5)
                    .is_some_and(|d| d.bytes().all(|b| b.is_ascii_digit()))
                || t.starts_with('F')
                    && t.get(1..5)
                        .is_some_and(|d| d.bytes().all(|b| b.is_ascii_digit()))
                || t.contains("\"level\":\"error\"")
                || t.contains("\"level\":\"fatal\"")
                || t.to_ascii_lowercase().contains("error:")
                || t.starts_with("panic:")
        })
        .or(lines.last())
        .copied()
        .unwrap_or("(empty log)");
    shorten(klog_message(pick), 300)
}

/// `s` cut to `max` characters with `…`.
pub(crate) fn shorten(s: &str, max: usize) -> String {
    if s.chars().count() <= max {
        s.to_string()
    } else {
        let mut out: String = s.chars().take(max).collect();
        out.push('…');
        out
    }
}

/// A free TCP port on 127.0.0.1 (bound and released; the caller starts its server on it).
pub(crate) fn free_port() -> io::Result<u16> {
    Ok(std::net::TcpListener::bind("127.0.0.1:0")?
        .local_addr()?
        .port())
}

/// Polls `probe` every 250 ms until it is true, the process exits, or `limit` passes.
///
/// Errors: [`AcceptError::ControlPlane`] naming the process: it exited before it was ready, or
/// was not ready in time (then it is stopped); with the last error line of its log.
pub(crate) async fn wait_ready<F, Fut>(
    p: &mut Process,
    limit: Duration,
    probe: F,
) -> Result<(), AcceptError>
where
    F: Fn() -> Fut,
    Fut: std::future::Future<Output = bool>,
{
    let start = Instant::now();
    loop {
        if let Some(status) = p.exited() {
            return Err(AcceptError::ControlPlane {
                part: p.name.clone(),
                message: format!(
                    "exited ({status}) before it was ready: {} (log {})",
                    last_error(&p.log_text()),
                    p.log.display()
                ),
            });
        }
        if probe().await {
            return Ok(());
        }
        if start.elapsed() >= limit {
            let message = format!(
                "not ready after {} s: {} (log {})",
                limit.as_secs(),
                last_error(&p.log_text()),
                p.log.display()
            );
            let _ = p.stop(Duration::from_secs(5)).await;
            return Err(AcceptError::ControlPlane {
                part: p.name.clone(),
                message,
            });
        }
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
}

/// Fails with [`AcceptError::Interrupted`] once SIGINT or SIGTERM has arrived.
pub(crate) fn check_interrupt() -> Result<(), AcceptError> {
    match occm_forge_core::base::interrupt::signal() {
        Some(_) => Err(AcceptError::Interrupted),
        None => Ok(()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn klog_messages_lose_their_header() {
        assert_eq!(
            klog_message(
                "E1201 10:00:00.123456   4242 node_lifecycle_controller.go:156] error checking if node stale-1 exists: failed to find object"
            ),
            "error checking if node stale-1 exists: failed to find object"
        );
        assert_eq!(klog_message("plain line"), "plain line");
        assert_eq!(
            last_error(
                "I1201 a.go:1] fine\nE1201 10:00:00.1 1 b.go:2] broken\nI1201 c.go:3] after\n"
            ),
            "broken"
        );
        assert_eq!(last_error("one\ntwo\n"), "two");
    }
}
