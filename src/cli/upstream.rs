//! `occm-forge upstream check`.

use clap::{Args, Subcommand};
use occm_forge::{Error, report, source, upstream};

use super::output::{note, print_stdout, warn};
use super::{Cli, Inputs};

#[derive(Subcommand)]
pub enum UpstreamCommand {
    /// Newer patch tags per tracked minor, and newer minors not tracked yet. Exit status: 0 nothing
    /// new, 11 something new, 13 a pinned tag moved upstream (whatever else is new).
    Check(UpstreamArgs),
}

#[derive(Args)]
pub struct UpstreamArgs {
    #[command(flatten)]
    inputs: Inputs,
    /// Print the report as JSON.
    #[arg(long)]
    json: bool,
}

/// Exit 0 when nothing is new, 11 when something is, 13 when a pinned tag points at another
/// commit than its pin (one warning line per moved tag on stderr, also with `--quiet`).
pub fn run(cli: &Cli, cmd: &UpstreamCommand) -> Result<u8, Error> {
    let UpstreamCommand::Check(args) = cmd;
    let config = args.inputs.load()?;
    let url = config.fetch_url(args.inputs.source.as_deref());
    let tags = tokio::task::block_in_place(|| source::list_tags(&url))?;
    let today = time::OffsetDateTime::now_utc().date();
    let report = upstream::check(&config, &tags, today);
    let text = if args.json {
        serde_json::to_string(&report).expect("report serialises")
    } else {
        report::upstream(&report)
    };
    print_stdout(&text)?;
    for m in &report.minors {
        if let Some(to) = &m.moved_to {
            warn(&report::moved_tag(
                m,
                to,
                &args.inputs.config.display().to_string(),
            ));
        }
    }
    if report.new {
        note(cli.quiet, "upstream has new releases");
    }
    Ok(if report.moved {
        13
    } else if report.new {
        11
    } else {
        0
    })
}
