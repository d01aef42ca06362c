//! `occm-forge minors`.

use std::path::PathBuf;

use clap::Args;
use occm_forge::{Error, config};

use super::output::print_stdout;

#[derive(Args)]
pub struct MinorsArgs {
    /// images.toml to read.
    #[arg(long, default_value = "images.toml", value_name = "FILE")]
    config: PathBuf,
}

pub fn run(args: &MinorsArgs) -> Result<u8, Error> {
    let config = config::load(&args.config)?;
    let list: Vec<String> = config.minors.keys().map(ToString::to_string).collect();
    print_stdout(&serde_json::to_string(&list).expect("strings serialise"))?;
    Ok(0)
}
