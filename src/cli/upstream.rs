//! `occm-forge upstream check`.

use clap::{Args, Subcommand};
use occm_forge_core::commands::report;
use occm_forge_core::commands::upstream;
use occm_forge_core::pipeline::Error;
use occm_forge_core::pipeline::go;
use occm_forge_core::pipeline::source;

use super::output::{note, print_stdout, warn};
use super::{Cli, Inputs};

#[derive(Subcommand)]
pub enum UpstreamCommand {
    /// Newer patch tags per tracked minor, newer minors not tracked yet, and minors whose Go has a
    /// newer revision or is out of support (the Go module proxy's golang.org/toolchain). Exit
    /// status: 0 nothing new, 11 something new, 13 a pinned tag moved upstream (whatever else is
    /// new).
    Check(UpstreamArgs),
}

#[derive(Args)]
pub struct UpstreamArgs {
    #[command(flatten)]
    inputs: Inputs,
    /// Print the report as JSON.
    #[arg(long)]
    json: bool,
    /// The acceptance reports (`accept --output`'s JSON) whose accepted builds mark each Go
    /// proposal as built and accepted [default: docs/acceptance.json beside images.toml, when
    /// it exists].
    #[arg(long, value_name = "JSON")]
    acceptance: Option<std::path::PathBuf>,
}

/// Exit 0 when nothing is new, 11 when something is, 13 when a pinned tag points at another
/// commit than its pin (one warning line per moved tag on stderr, also with `--quiet`).
pub fn run(cli: &Cli, cmd: &UpstreamCommand) -> Result<u8, Error> {
    let UpstreamCommand::Check(args) = cmd;
    let config = args.inputs.load()?;
    let url = config.fetch_url(args.inputs.source.as_deref());
    let tags = tokio::task::block_in_place(|| source::list_tags(&url))?;
    let today = time::OffsetDateTime::now_utc().date();
    let cache = cli.cache_dir();
    let (go_served, go_unchecked) = match go::release::served(&cache) {
        Ok(served) => (Some(served), None),
        Err(e) => {
            warn(&format!(
                "Go releases not checked: {e} (GOPROXY names the proxy)"
            ));
            (None, Some(e.to_string()))
        }
    };
    // Each minor's proposal checked against what the proxy serves; a proxy that stops
    // answering part-way leaves the rest as listed, and says so.
    let judge = |g: go::release::GoRelease| {
        let served = go_served.as_deref().unwrap_or_default();
        go::release::served_proposal(&cache, g, served).unwrap_or_else(|e| {
            warn(&format!(
                "Go {g}: the proposal is as the proxy lists it, not checked as served: {e}"
            ));
            go::release::currency(g, served)
        })
    };
    let report = upstream::check(
        &config,
        &tags,
        go_served.is_some().then_some(&judge as &dyn Fn(_) -> _),
        today,
    );
    let mut report = upstream::UpstreamReport {
        go_unchecked,
        ..report
    };
    let acceptance = args.acceptance.clone().or_else(|| {
        let beside = config.path.parent()?.join("docs").join("acceptance.json");
        beside.exists().then_some(beside)
    });
    if let Some(path) = acceptance {
        let text = std::fs::read_to_string(&path)
            .map_err(|e| Error::Usage(format!("{}: {e}", path.display())))?;
        let accepted = upstream::accepted_builds(&text)
            .map_err(|e| Error::Usage(format!("{}: {e}", path.display())))?;
        upstream::mark_accepted(&mut report, &accepted);
    }
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
                &args.inputs.config.path.display().to_string(),
            ));
        }
    }
    if report.new {
        note(cli.quiet, "upstream has new releases");
    }
    if report.go_behind {
        note(
            cli.quiet,
            "Go has newer releases than some minors are built with",
        );
    }
    Ok(if report.moved {
        13
    } else if report.new || report.go_behind {
        11
    } else {
        0
    })
}
