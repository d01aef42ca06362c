//! `occm-forge render`.

use std::path::PathBuf;

use clap::Args;
use occm_forge::config::{self, Minor};
use occm_forge::{Error, digest_manifest, render};

use super::output::{print_stdout, warn};

#[derive(Args)]
#[command(group = clap::ArgGroup::new("which").required(true).args(["k8s", "all"]))]
pub struct RenderArgs {
    /// The minor to render.
    #[arg(long = "k8s", value_name = "MINOR")]
    k8s: Option<Minor>,
    /// Render every minor of the digest manifest.
    #[arg(long)]
    all: bool,
    /// magnum-label, magnum-prefix-tag, helm-values or atmosphere-vars.
    #[arg(long, value_name = "FORMAT")]
    format: render::Format,
    /// images.toml (for the digest manifest's path).
    #[arg(long, default_value = "images.toml", value_name = "FILE")]
    config: PathBuf,
    /// Render entries recorded without --push too.
    #[arg(long)]
    allow_unpublished: bool,
}

pub fn run(args: &RenderArgs) -> Result<u8, Error> {
    let config = config::load(&args.config)?;
    let manifest = digest_manifest::read(&config.digest_manifest)?;
    let entries = render::select(&manifest, &config.digest_manifest, args.k8s)?;
    let out = render::render(args.format, &entries, args.allow_unpublished)?;
    for w in &out.warnings {
        warn(w);
    }
    print_stdout(&out.text)?;
    Ok(0)
}
