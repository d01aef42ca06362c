//! `occm-forge patches prove` and `patches matrix`: the red/green proof (`commands::prove`);
//! `patches edit` and `patches export`: refreshing the series on a new upstream tree
//! (`refresh`).

use std::path::{Path, PathBuf};

use clap::{Args, Subcommand};
use occm_forge_core::base::util::write_file_atomically;
use occm_forge_core::commands::prove::{self, ProofRequest};
use occm_forge_core::commands::refresh::{self, EditRequest, ExportRequest};
use occm_forge_core::commands::report;
use occm_forge_core::config::Minor;
use occm_forge_core::pipeline::Error;
use occm_forge_core::pipeline::progress::Terminal;

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
    /// Lay the minor's series out as commits on its upstream tag in a work tree (branch
    /// occm-forge/<minor>), stopping at the first patch that conflicts, markers in place.
    Edit(EditArgs),
    /// Write the edited commits back to patches/ (format-patch form; unchanged patches keep
    /// every byte) and images.toml (a minor's own variant of a shared patch).
    Export(ExportArgs),
}

#[derive(Args)]
pub struct EditArgs {
    /// Kubernetes minor, e.g. 1.36.
    #[arg(long = "k8s", value_name = "MINOR")]
    k8s: Minor,
    #[command(flatten)]
    inputs: Inputs,
    /// The work tree [default: <cache>/edit/<MINOR>].
    #[arg(long, value_name = "DIR")]
    dir: Option<PathBuf>,
    /// After resolving a conflict (and `git add`): commit the resolution as the stopped patch
    /// (or take your own commit of it) and apply the rest.
    #[arg(long = "continue", conflicts_with = "restart")]
    resume: bool,
    /// Discard an edit under way in the work tree and lay the series out again.
    #[arg(long)]
    restart: bool,
    /// Print the state as JSON.
    #[arg(long)]
    json: bool,
}

#[derive(Args)]
pub struct ExportArgs {
    /// Kubernetes minor, e.g. 1.36.
    #[arg(long = "k8s", value_name = "MINOR")]
    k8s: Minor,
    #[command(flatten)]
    config: super::ConfigArg,
    /// The edit's work tree [default: <cache>/edit/<MINOR>].
    #[arg(long, value_name = "DIR")]
    dir: Option<PathBuf>,
    /// Print the result as JSON.
    #[arg(long)]
    json: bool,
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
        PatchesCommand::Edit(args) => edit(cli, args),
        PatchesCommand::Export(args) => export(cli, args),
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
    let report = prove::prove(&req, &Terminal::new(cli.quiet, "")).await?;
    let text = if args.json {
        serde_json::to_string(&report).expect("report serialises")
    } else {
        prove::render_markdown(std::slice::from_ref(&report))
    };
    print_stdout(&text)?;
    if report.ok() {
        Ok(0)
    } else {
        Err(Error::command(occm_forge_core::commands::prove::NotProven(
            format!("{} is not proven: see the table", args.k8s),
        )))
    }
}

async fn matrix(cli: &Cli, args: &MatrixArgs) -> Result<u8, Error> {
    let config = args.inputs.load()?;
    if let Some(path) = &args.output {
        super::check_output_path("--output", path, &config, None)?;
    }
    let cache = cli.cache_dir();
    let minors: Vec<Minor> = if args.k8s.is_empty() {
        config.minors.keys().copied().collect()
    } else {
        args.k8s.clone()
    };
    let reporter = Terminal::new(cli.quiet, "");
    let reports = prove::matrix(
        &config,
        &minors,
        args.inputs.source.as_deref(),
        &cache,
        &reporter,
    )
    .await?;
    if let Some(path) = &args.output {
        let now = time::OffsetDateTime::now_utc().unix_timestamp();
        write_file_atomically(path, prove::matrix_document(&reports, now).as_bytes())
            .map_err(|e| Error::Io(format!("{}: {e}", path.display())))?;
    }
    print_stdout(&prove::render_markdown(&reports))?;
    let bad: Vec<Minor> = reports
        .iter()
        .filter(|r| !r.ok())
        .map(|r| r.minor)
        .collect();
    if bad.is_empty() {
        Ok(0)
    } else {
        Err(Error::command(occm_forge_core::commands::prove::NotProven(
            report::not_proven(&bad),
        )))
    }
}

fn edit(cli: &Cli, args: &EditArgs) -> Result<u8, Error> {
    let cache = cli.cache_dir();
    let dir = args
        .dir
        .clone()
        .unwrap_or_else(|| refresh::default_dir(&cache, args.k8s));
    let config = super::load_config(&config_for(&args.inputs.config.path, &dir))?;
    let report = refresh::edit(&EditRequest {
        config: &config,
        minor: args.k8s,
        source: args.inputs.source.as_deref(),
        cache_dir: &cache,
        dir: &dir,
        resume: args.resume,
        restart: args.restart,
    })?;
    let text = if args.json {
        serde_json::to_string(&report).expect("report serialises")
    } else {
        refresh::render_edit(
            &report,
            &flags(
                &args.inputs.config.path,
                args.dir.as_deref(),
                cli.cache_dir.as_deref(),
            ),
        )
    };
    print_stdout(&text)?;
    match &report.stopped {
        None => Ok(0),
        Some(why) => Err(refresh::RefreshError::Stopped(why.clone()).into()),
    }
}

fn export(cli: &Cli, args: &ExportArgs) -> Result<u8, Error> {
    let dir = args
        .dir
        .clone()
        .unwrap_or_else(|| refresh::default_dir(&cli.cache_dir(), args.k8s));
    let config = super::load_config(&config_for(&args.config.path, &dir))?;
    let report = refresh::export(&ExportRequest {
        config: &config,
        minor: args.k8s,
        dir: &dir,
    })?;
    let text = if args.json {
        serde_json::to_string(&report).expect("report serialises")
    } else {
        refresh::render_export(&report, &config)
    };
    print_stdout(&text)?;
    Ok(0)
}

/// images.toml for `patches edit`/`export`: `--config`; where that is the default and there is
/// no images.toml here (run from inside the work tree), the one the edit in `dir` came from.
fn config_for(given: &Path, dir: &Path) -> PathBuf {
    if given == Path::new("images.toml")
        && !given.exists()
        && let Some(state) = refresh::EditState::read(dir)
    {
        return state.config;
    }
    given.to_path_buf()
}

/// The `--config`, `--dir` and `--cache-dir` flags to repeat in the next steps printed, where
/// given.
fn flags(
    config: &std::path::Path,
    dir: Option<&std::path::Path>,
    cache_dir: Option<&std::path::Path>,
) -> String {
    let mut out = String::new();
    if let Some(cache) = cache_dir {
        out.push_str(&format!(" --cache-dir {}", cache.display()));
    }
    if config != std::path::Path::new("images.toml") {
        out.push_str(&format!(" --config {}", config.display()));
    }
    if let Some(dir) = dir {
        out.push_str(&format!(" --dir {}", dir.display()));
    }
    out
}
