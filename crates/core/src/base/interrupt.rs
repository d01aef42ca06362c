//! Interruption: SIGINT or SIGTERM sets a process-wide flag and stops every running child
//! process group (`go test`, `go build` and what they spawn). Stages check the flag at their
//! boundaries; what they hold (scratch directories, the run lock) is released as they return, and
//! nothing more is recorded (a run over several minors keeps, and says, what the minors before the
//! interrupted one recorded).

use std::collections::BTreeSet;
use std::io;
use std::os::unix::process::CommandExt;
use std::process::{Child, Command};
use std::sync::Mutex;
use std::sync::atomic::{AtomicI32, AtomicUsize, Ordering};

static SIGNAL: AtomicI32 = AtomicI32::new(0);
static HANDLERS: AtomicUsize = AtomicUsize::new(0);
static CHILDREN: Mutex<BTreeSet<u32>> = Mutex::new(BTreeSet::new());
static NOTIFY: tokio::sync::Notify = tokio::sync::Notify::const_new();

/// The signal that interrupted this process, if any (2 for SIGINT, 15 for SIGTERM).
pub fn signal() -> Option<i32> {
    match SIGNAL.load(Ordering::SeqCst) {
        0 => None,
        s => Some(s),
    }
}

/// Records `sig` and sends SIGTERM to every registered child process group.
pub fn interrupt(sig: i32) {
    SIGNAL.store(sig, Ordering::SeqCst);
    let children = CHILDREN.lock().expect("children lock").clone();
    for pid in children {
        // SAFETY: kill(2) with a negative pid signals that process group; no memory is touched.
        unsafe {
            libc::kill(-(pid as i32), libc::SIGTERM);
        }
    }
    NOTIFY.notify_waiters();
}

/// Resolves once the process has been interrupted.
pub async fn interrupted() {
    loop {
        let notified = NOTIFY.notified();
        if signal().is_some() {
            return;
        }
        notified.await;
    }
}

/// While a `Handling` lives, the code that made it stops at a signal by itself and reports what
/// it did before ([`unhandled`] does not resolve): `build` over several minors, whose stages stop
/// at the signal, prints what the minors before the interrupted one recorded. Dropping it lets
/// [`unhandled`] resolve.
#[must_use = "the signal is handled while it lives"]
pub struct Handling(());

/// Starts a [`Handling`] scope.
pub fn handle_here() -> Handling {
    HANDLERS.fetch_add(1, Ordering::SeqCst);
    Handling(())
}

impl Drop for Handling {
    fn drop(&mut self) {
        HANDLERS.fetch_sub(1, Ordering::SeqCst);
        NOTIFY.notify_waiters();
    }
}

/// Resolves once the process has been interrupted and no [`Handling`] lives: then nothing
/// reports the interruption but the caller (the binary's `main`, which stops the command).
pub async fn unhandled() {
    loop {
        let notified = NOTIFY.notified();
        if signal().is_some() && HANDLERS.load(Ordering::SeqCst) == 0 {
            return;
        }
        notified.await;
    }
}

/// The error a stage returns when it stops because of a signal.
pub fn error() -> io::Error {
    io::Error::new(io::ErrorKind::Interrupted, "interrupted")
}

/// A running child in its own process group, stopped on interruption and unregistered on drop.
pub struct Guard {
    pid: u32,
}

impl Drop for Guard {
    fn drop(&mut self) {
        CHILDREN.lock().expect("children lock").remove(&self.pid);
    }
}

/// Spawns `cmd` in a new process group and registers it, unless the process is interrupted.
pub fn spawn(cmd: &mut Command) -> io::Result<(Child, Guard)> {
    if signal().is_some() {
        return Err(error());
    }
    cmd.process_group(0);
    // SAFETY: prctl(2) in the child between fork and exec touches no memory of the parent.
    unsafe {
        cmd.pre_exec(|| {
            // The child dies with the thread that spawned it (which waits for it), so a `go`
            // never outlives an occm-forge killed with SIGKILL; what `go` itself started is
            // stopped by the next run's `util::sweep_scratch` and work-tree check.
            libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL);
            Ok(())
        });
    }
    let child = cmd.spawn()?;
    let pid = child.id();
    CHILDREN.lock().expect("children lock").insert(pid);
    let guard = Guard { pid };
    if signal().is_some() {
        // The signal came between the check and the registration.
        // SAFETY: as in `interrupt`.
        unsafe {
            libc::kill(-(pid as i32), libc::SIGTERM);
        }
    }
    Ok((child, guard))
}

/// `Command::output` for a command that must stop on interruption.
pub fn output(cmd: &mut Command) -> io::Result<std::process::Output> {
    cmd.stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped());
    let (child, _guard) = spawn(cmd)?;
    let out = child.wait_with_output()?;
    if signal().is_some() {
        return Err(error());
    }
    Ok(out)
}
