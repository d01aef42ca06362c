//! `occm-forge accept`: the image's binary and the unpatched control against a real
//! kube-apiserver and the simulated OpenStack (the `accept` module).

use std::path::PathBuf;

use clap::Args;
use occm_forge::Error;
use occm_forge::accept::{self, MinorRequest, RunOptions, Scenario};
use occm_forge::progress::Terminal;
use occm_forge::util::write_file_atomically;

use super::output::print_stdout;
use super::{Cli, Inputs, MinorSelection};

#[derive(Args)]
pub struct AcceptArgs {
    #[command(flatten)]
    which: MinorSelection,
    #[command(flatten)]
    inputs: Inputs,
    /// The OCI layout holding the images (`build --output`); logs go to <DIR>/accept/<minor>.
    #[arg(long, default_value = "out", value_name = "DIR")]
    layout: PathBuf,
    /// Run only these scenarios (repeatable): S1, S2, S3, S4.
    #[arg(long = "scenario", value_name = "S1..S4")]
    scenario: Vec<Scenario>,
    /// Keep <DIR>/accept/<minor> (OCCM, etcd and kube-apiserver logs, the simulated cloud's
    /// request log) even when the minor is accepted.
    #[arg(long)]
    keep_logs: bool,
    /// Print the report as JSON (an object for one minor, an array for several).
    #[arg(long)]
    json: bool,
    /// Also write the report as a document to this file (atomically), e.g. docs/acceptance.md.
    #[arg(long, value_name = "FILE")]
    output: Option<PathBuf>,
}

pub async fn run(cli: &Cli, args: &AcceptArgs) -> Result<u8, Error> {
    let config = args.inputs.load()?;
    let minors = args.which.minors(&config);
    let scenarios = if args.scenario.is_empty() {
        Scenario::ALL.to_vec()
    } else {
        args.scenario.clone()
    };
    let Some(&first) = minors.first() else {
        return Err(Error::Usage(format!(
            "{} tracks no minors",
            args.inputs.config.display()
        )));
    };
    let cache = cli.cache_dir();
    let quiet = cli.quiet;
    let req = MinorRequest {
        config: &config,
        minor: first,
        source: args.inputs.source.as_deref(),
        run: RunOptions {
            layout_dir: &args.layout,
            cache_dir: &cache,
            work_dir: None,
            scenarios: &scenarios,
            keep_logs: args.keep_logs,
        },
    };
    let reports = if minors.len() == 1 {
        vec![accept::accept_minor(&req, &Terminal::new(quiet, "")).await?]
    } else {
        accept::matrix(&req, &minors, &|m| {
            Box::new(Terminal::new(quiet, format!("{m} ")))
        })
        .await?
    };
    if let Some(path) = &args.output {
        let now = time::OffsetDateTime::now_utc().unix_timestamp();
        write_file_atomically(path, accept::document(&reports, now).as_bytes())
            .map_err(|e| Error::Io(format!("{}: {e}", path.display())))?;
    }
    let text = match (args.json, reports.as_slice()) {
        (true, [one]) => serde_json::to_string(one).expect("report serialises"),
        (true, all) => serde_json::to_string(all).expect("reports serialise"),
        (false, all) => accept::render_markdown(all),
    };
    print_stdout(&text)?;
    accept::require_accepted(&reports)?;
    Ok(0)
}
