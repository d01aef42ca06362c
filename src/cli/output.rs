//! Printing: results to stdout, notes and errors to stderr.

use std::io::Write;

use occm_forge_core::pipeline::Error;
use occm_forge_core::pipeline::go::test::TestError;

/// Writes `text` to stdout, ending it with a newline if it has none.
pub fn print_stdout(text: &str) -> Result<(), Error> {
    let mut stdout = std::io::stdout().lock();
    write!(stdout, "{text}")
        .and_then(|_| {
            if text.ends_with('\n') {
                Ok(())
            } else {
                writeln!(stdout)
            }
        })
        .map_err(|e| Error::Io(format!("stdout: {e}")))
}

/// `occm-forge: <line>` on stderr unless `quiet`.
pub fn note(quiet: bool, line: &str) {
    if !quiet {
        eprintln!("occm-forge: {line}");
    }
}

/// `occm-forge: error: <line>` on stderr, for an error said in words of its own.
pub fn error_line(line: &str) {
    eprintln!("occm-forge: error: {line}");
}

/// `occm-forge: warning: <line>` on stderr.
pub fn warn(line: &str) {
    eprintln!("occm-forge: warning: {line}");
}

/// The error on stderr: failing tests' output (the last 40 lines of each) first, then
/// `occm-forge: error: <one line>`.
pub fn print_error(e: &Error) {
    print_error_of("", e);
}

/// [`print_error`] with `label` (e.g. `1.35: `) before the cause.
pub fn print_error_of(label: &str, e: &Error) {
    if let Error::Test(TestError::Failed { failures, .. }) = e {
        for f in failures {
            eprintln!("--- FAIL: {}", f.name);
            let lines: Vec<&str> = f.output.lines().collect();
            for line in &lines[lines.len().saturating_sub(40)..] {
                eprintln!("    {line}");
            }
        }
    }
    eprintln!("occm-forge: error: {label}{e}");
}

/// Log events in the tool's own line format: `occm-forge: <message>` (info),
/// `occm-forge: warning: …`, `occm-forge: error: …`, `occm-forge: debug: …` (and `trace:`), the
/// event's other fields after the message as `key=value`.
pub struct LogLines;

impl<S, N> tracing_subscriber::fmt::FormatEvent<S, N> for LogLines
where
    S: tracing::Subscriber + for<'a> tracing_subscriber::registry::LookupSpan<'a>,
    N: for<'a> tracing_subscriber::fmt::FormatFields<'a> + 'static,
{
    fn format_event(
        &self,
        ctx: &tracing_subscriber::fmt::FmtContext<'_, S, N>,
        mut writer: tracing_subscriber::fmt::format::Writer<'_>,
        event: &tracing::Event<'_>,
    ) -> std::fmt::Result {
        let prefix = match *event.metadata().level() {
            tracing::Level::ERROR => "occm-forge: error: ",
            tracing::Level::WARN => "occm-forge: warning: ",
            tracing::Level::INFO => "occm-forge: ",
            tracing::Level::DEBUG => "occm-forge: debug: ",
            tracing::Level::TRACE => "occm-forge: trace: ",
        };
        write!(writer, "{prefix}")?;
        ctx.field_format().format_fields(writer.by_ref(), event)?;
        writeln!(writer)
    }
}
