//! `occm-forge manifest merge`.

use std::path::PathBuf;

use clap::{Args, Subcommand};
use occm_forge::{Error, config, digest_manifest, report};

use super::Cli;
use super::output::note;

#[derive(Subcommand)]
pub enum ManifestCommand {
    /// Fold fragments written by `build --manifest-fragment` into the digest manifest.
    Merge(MergeArgs),
}

#[derive(Args)]
pub struct MergeArgs {
    /// Fragment files.
    #[arg(required = true, value_name = "FRAGMENT")]
    fragments: Vec<PathBuf>,
    /// images.toml (for the digest manifest's path).
    #[arg(long, default_value = "images.toml", value_name = "FILE")]
    config: PathBuf,
    /// Refuse at once when another run holds the digest manifest.
    #[arg(long)]
    no_wait: bool,
}

pub fn run(cli: &Cli, cmd: &ManifestCommand) -> Result<u8, Error> {
    let ManifestCommand::Merge(args) = cmd;
    let config = config::load(&args.config)?;
    let path = &config.digest_manifest;
    let _lock = tokio::task::block_in_place(|| {
        digest_manifest::lock_run(path, !args.no_wait, &mut |holder| {
            eprintln!(
                "occm-forge: waiting for another occm-forge run on {} ({holder})",
                path.display()
            )
        })
    })?;
    let merged = digest_manifest::merge(path, &args.fragments)?;
    note(cli.quiet, &report::merged(&merged, path));
    Ok(0)
}
