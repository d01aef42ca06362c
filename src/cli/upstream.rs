//! `occm-forge upstream check`.

use clap::{Args, Subcommand};
use occm_forge::{Error, report, source, upstream};

use super::output::{note, print_stdout};
use super::{Cli, Inputs};

#[derive(Subcommand)]
pub enum UpstreamCommand {
    /// Newer patch tags per tracked minor, and newer minors not tracked yet. Exit status: 0 nothing
    /// new, 11 something new.
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

/// Exit 0 when nothing is new, 11 when something is.
pub fn run(cli: &Cli, cmd: &UpstreamCommand) -> Result<u8, Error> {
    let UpstreamCommand::Check(args) = cmd;
    let config = args.inputs.load()?;
    let url = config.fetch_url(args.inputs.source.as_deref());
    let tags = tokio::task::block_in_place(|| source::list_tags(&url))?;
    let report = upstream::check(&config, &tags);
    let text = if args.json {
        serde_json::to_string(&report).expect("report serialises")
    } else {
        report::upstream(&report)
    };
    print_stdout(&text)?;
    if report.new {
        note(cli.quiet, "upstream has new releases");
    }
    Ok(if report.new { 11 } else { 0 })
}
