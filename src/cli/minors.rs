//! `occm-forge minors`.

use clap::Args;
use occm_forge_core::pipeline::Error;

use super::output::print_stdout;

#[derive(Args)]
pub struct MinorsArgs {
    #[command(flatten)]
    config: super::ConfigArg,
    /// Only the minors not past their end of life (images.toml `end_of_life`; a minor without
    /// one counts as supported), for a CI matrix that builds only those.
    #[arg(long)]
    supported: bool,
}

pub fn run(args: &MinorsArgs) -> Result<u8, Error> {
    let config = args.config.load()?;
    let today = time::OffsetDateTime::now_utc().date();
    let list: Vec<String> = config
        .minors
        .iter()
        .filter(|(_, m)| !args.supported || !m.past_end_of_life(today))
        .map(|(minor, _)| minor.to_string())
        .collect();
    print_stdout(&serde_json::to_string(&list).expect("strings serialise"))?;
    Ok(0)
}
