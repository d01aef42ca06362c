//! `occm-forge verify`: the registry against the digest manifest (`commands::verify`).

use clap::Args;
use occm_forge_core::commands::report;
use occm_forge_core::commands::verify::{self, AuditRequest};
use occm_forge_core::config::Minor;
use occm_forge_core::pipeline::Error;
use occm_forge_core::pipeline::plan;
use occm_forge_core::pipeline::progress::Terminal;

use super::output::{note, print_stdout};
use super::{Cli, Inputs, RegistryArgs};

#[derive(Args)]
pub struct AuditArgs {
    /// Minors to check (repeatable); every entry of the digest manifest by default.
    #[arg(long = "k8s", value_name = "MINOR")]
    k8s: Vec<Minor>,
    #[command(flatten)]
    inputs: Inputs,
    #[command(flatten)]
    registry: RegistryArgs,
    /// Also rebuild each entry from images.toml (no push, nothing recorded) and compare digests.
    #[arg(long)]
    rebuild: bool,
}

pub async fn run(cli: &Cli, args: &AuditArgs) -> Result<u8, Error> {
    let config = args.inputs.load()?;
    let registry = plan::registry(&config, &args.registry.overrides())?;
    let cache_dir = cli.cache_dir();
    let req = AuditRequest {
        config: &config,
        minors: &args.k8s,
        rebuild: args.rebuild,
        source: args.inputs.source.as_deref(),
        cache_dir: &cache_dir,
    };
    let quiet = cli.quiet;
    let findings = verify::audit(&req, &registry, &|line| note(quiet, &line), &|minor| {
        Box::new(Terminal::new(quiet, format!("rebuild {minor}: ")))
    })
    .await?;
    if findings.is_empty() {
        return Ok(0);
    }
    print_stdout(&report::findings(&findings))?;
    Err(Error::command(occm_forge_core::commands::verify::Mismatch(
        report::mismatches(findings.len(), &config.digest_manifest),
    )))
}
