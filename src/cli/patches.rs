//! `occm-forge patches prove` and `patches matrix`: the red/green proof (`redgreen`).

use std::path::PathBuf;

use clap::{Args, Subcommand};
use occm_forge::config::Minor;
use occm_forge::progress::Terminal;
use occm_forge::redgreen::{self, ProofRequest};
use occm_forge::util::write_file_atomically;
use occm_forge::{Error, report};

use super::output::print_stdout;
use super::{Cli, Inputs};

#[derive(Subcommand)]
pub enum PatchesCommand {
    /// Red/green proof for one minor: guard tests fail without the fix patches and pass with them
    /// (`patches verify` is the earlier name).
    #[command(visible_alias = "verify")]
    Prove(VerifyArgs),
    /// `prove` for every minor (or those given), as a Markdown table.
    Matrix(MatrixArgs),
}

#[derive(Args)]
pub struct VerifyArgs {
    /// Kubernetes minor, e.g. 1.34.
    #[arg(long = "k8s", value_name = "MINOR")]
    k8s: Minor,
    #[command(flatten)]
    inputs: Inputs,
    /// Print the report as JSON.
    #[arg(long)]
    json: bool,
}

#[derive(Args)]
pub struct MatrixArgs {
    /// Minors to include (repeatable); all of images.toml by default.
    #[arg(long = "k8s", value_name = "MINOR")]
    k8s: Vec<Minor>,
    #[command(flatten)]
    inputs: Inputs,
    /// Also write the Markdown to this file (atomically), e.g. docs/patch-matrix.md.
    #[arg(long, value_name = "FILE")]
    output: Option<PathBuf>,
}

pub async fn run(cli: &Cli, cmd: &PatchesCommand) -> Result<u8, Error> {
    match cmd {
        PatchesCommand::Prove(args) => verify(cli, args).await,
        PatchesCommand::Matrix(args) => matrix(cli, args).await,
    }
}

async fn verify(cli: &Cli, args: &VerifyArgs) -> Result<u8, Error> {
    let config = args.inputs.load()?;
    let cache = cli.cache_dir();
    let req = ProofRequest {
        config: &config,
        minor: args.k8s,
        source: args.inputs.source.as_deref(),
        cache_dir: &cache,
    };
    let report = redgreen::prove(&req, &Terminal::new(cli.quiet, "")).await?;
    let text = if args.json {
        serde_json::to_string(&report).expect("report serialises")
    } else {
        redgreen::render_markdown(std::slice::from_ref(&report))
    };
    print_stdout(&text)?;
    if report.ok() {
        Ok(0)
    } else {
        Err(Error::Proof(format!(
            "{} is not proven: see the table",
            args.k8s
        )))
    }
}

async fn matrix(cli: &Cli, args: &MatrixArgs) -> Result<u8, Error> {
    let config = args.inputs.load()?;
    let cache = cli.cache_dir();
    let minors: Vec<Minor> = if args.k8s.is_empty() {
        config.minors.keys().copied().collect()
    } else {
        args.k8s.clone()
    };
    let reporter = Terminal::new(cli.quiet, "");
    let reports = redgreen::matrix(
        &config,
        &minors,
        args.inputs.source.as_deref(),
        &cache,
        &reporter,
    )
    .await?;
    if let Some(path) = &args.output {
        let now = time::OffsetDateTime::now_utc().unix_timestamp();
        write_file_atomically(path, redgreen::matrix_document(&reports, now).as_bytes())
            .map_err(|e| Error::Io(format!("{}: {e}", path.display())))?;
    }
    print_stdout(&redgreen::render_markdown(&reports))?;
    let bad: Vec<Minor> = reports
        .iter()
        .filter(|r| !r.ok())
        .map(|r| r.minor)
        .collect();
    if bad.is_empty() {
        Ok(0)
    } else {
        Err(Error::Proof(report::not_proven(&bad)))
    }
}
