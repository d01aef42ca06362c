//! `occm-forge build`.

use std::path::PathBuf;

use clap::Args;
use occm_forge::config::Minor;
use occm_forge::plan::{self, BuildPlan, Environment, Overrides};
use occm_forge::progress::Terminal;
use occm_forge::{Error, pipeline, report};

use super::output::print_stdout;
use super::{Cli, Inputs, RegistryArgs};

#[derive(Args)]
pub struct BuildArgs {
    /// Kubernetes minor to build, e.g. 1.34.
    #[arg(long = "k8s", value_name = "MINOR")]
    k8s: Minor,
    #[command(flatten)]
    inputs: Inputs,
    /// Push to the registry and verify the tag.
    #[arg(long)]
    push: bool,
    /// Target repository instead of images.toml `repository` (registry/path, no tag).
    #[arg(long, value_name = "REPO")]
    repository: Option<String>,
    #[command(flatten)]
    registry: RegistryArgs,
    /// OCI image layout directory.
    #[arg(long, default_value = "out", value_name = "DIR")]
    output: PathBuf,
    /// Print the result as a JSON object instead of the image reference.
    #[arg(long)]
    json: bool,
    /// Write stage timings as JSON to this file.
    #[arg(long, value_name = "FILE")]
    timings: Option<PathBuf>,
    /// Allow a base image reference without @sha256 digest.
    #[arg(long)]
    allow_unpinned_base: bool,
    /// Base image instead of images.toml's: `static` (built in, offline) or a reference.
    #[arg(long, value_name = "static|REF")]
    base: Option<String>,
    /// Refuse at once when another run holds the digest manifest, instead of waiting.
    #[arg(long)]
    no_wait: bool,
    /// Write this minor's entry to FILE instead of the digest manifest (parallel CI jobs; fold the
    /// fragments in with `manifest merge`).
    #[arg(long, value_name = "FILE")]
    manifest_fragment: Option<PathBuf>,
    /// Push even when the tag already serves another image (tags are otherwise never moved).
    #[arg(long)]
    replace_tag: bool,
}

pub async fn run(cli: &Cli, args: &BuildArgs) -> Result<u8, Error> {
    let config = args.inputs.load()?;
    let registry = plan::registry(&config, &args.registry.overrides())?;
    let overrides = Overrides {
        source: args.inputs.source.clone(),
        repository: args.repository.clone(),
        base: args.base.clone(),
        allow_unpinned_base: args.allow_unpinned_base,
        push: args.push,
        output: args.output.clone(),
        cache_dir: cli.cache_dir(),
        source_date_epoch: Environment::current().source_date_epoch()?,
        manifest_fragment: args.manifest_fragment.clone(),
        replace_tag: args.replace_tag,
        wait_for_lock: !args.no_wait,
    };
    let plan = BuildPlan::resolve(&config, args.k8s, &overrides)?;
    if let Some(path) = &args.timings {
        // Fail now, not after the digest manifest was written.
        std::fs::write(path, b"[]")
            .map_err(|e| Error::Io(format!("--timings {}: {e}", path.display())))?;
    }
    let reporter = Terminal::new(cli.quiet, "");
    let outcome = pipeline::build(&plan, &registry, &reporter).await?;
    if let Some(path) = &args.timings {
        let json = serde_json::to_vec_pretty(&outcome.timings).expect("timings serialise");
        std::fs::write(path, json).map_err(|e| Error::Io(format!("{}: {e}", path.display())))?;
    }
    print_stdout(&report::build_result(&outcome, args.json))?;
    Ok(0)
}
