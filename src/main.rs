//! `occm-forge`: parses the command line, sets up logging, the async runtime and signal
//! handling, runs the command and maps its error to its exit status (docs/exit-codes.md).

mod cli;

use std::io::IsTerminal;
use std::process::ExitCode;

use occm_forge_core::base::interrupt;
use occm_forge_core::pipeline::Error;

/// How long an interrupted command has to stop by itself (its stages stop at their boundaries,
/// child process groups get SIGTERM) before the process exits anyway.
const STOP_GRACE: std::time::Duration = std::time::Duration::from_secs(15);

/// Ends the process at once after an interruption the command did not finish handling (`why`),
/// with the signal's exit status (128 + signal). Nothing is recorded half-way: the digest manifest
/// is only ever replaced by a rename, the run lock is an `flock` the kernel releases.
fn exit_now(sig: i32, why: &str) -> ! {
    eprintln!(
        "occm-forge: error: interrupted, and {why}: stopping without waiting for the running operation"
    );
    std::process::exit(128 + sig)
}

fn main() -> ExitCode {
    let cli = cli::parse();
    let level = match (cli.quiet, cli.verbose) {
        (true, _) => "error",
        (false, 0) => "info",
        (false, 1) => "debug",
        _ => "trace",
    };
    let filter =
        tracing_subscriber::EnvFilter::try_from_env("OCCM_FORGE_LOG").unwrap_or_else(|_| {
            tracing_subscriber::EnvFilter::new(format!(
                // kube-rs logs every failed request itself; occm-forge says it once, with the cause.
                "warn,kube_client=off,occm_forge={level},occm_forge_core={level},occm_forge_accept={level}"
            ))
        });
    tracing_subscriber::fmt()
        .with_ansi(std::io::stderr().is_terminal() && std::env::var_os("NO_COLOR").is_none())
        .with_writer(std::io::stderr)
        .with_env_filter(filter)
        .event_format(cli::LogLines)
        .init();
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
    {
        Ok(r) => r,
        Err(e) => {
            eprintln!("occm-forge: error: cannot start the async runtime: {e}");
            return ExitCode::from(1);
        }
    };
    let result = runtime.block_on(async {
        // SIGINT/SIGTERM stop child processes; the command then unwinds (scratch space and the
        // run lock are released as it returns; nothing is recorded).
        tokio::spawn(async {
            use tokio::signal::unix::{SignalKind, signal};
            let (Ok(mut int), Ok(mut term)) = (
                signal(SignalKind::interrupt()),
                signal(SignalKind::terminate()),
            ) else {
                return;
            };
            let sig = tokio::select! {
                _ = int.recv() => libc::SIGINT,
                _ = term.recv() => libc::SIGTERM,
            };
            interrupt::interrupt(sig);
            // What cannot look at the flag (a git fetch from a server that never answers) must
            // not keep the process: a second signal, or the grace period, ends it.
            std::thread::spawn(move || {
                std::thread::sleep(STOP_GRACE);
                exit_now(
                    sig,
                    &format!("still running {} s after the signal", STOP_GRACE.as_secs()),
                );
            });
            let again = tokio::select! {
                _ = int.recv() => libc::SIGINT,
                _ = term.recv() => libc::SIGTERM,
            };
            exit_now(again, "a second signal");
        });
        tokio::select! {
            r = cli::run(&cli) => r,
            // Unless the command reports the interruption itself (`interrupt::Handling`).
            _ = interrupt::unhandled() => {
                Err(Error::Interrupted(interrupt::signal().unwrap_or(libc::SIGINT)))
            }
        }
    });
    match result {
        Ok(code) => ExitCode::from(code),
        Err(e) => {
            cli::print_error(&e);
            ExitCode::from(e.exit_code())
        }
    }
}
