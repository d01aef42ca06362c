//! `occm-forge pin`.

use clap::Args;
use occm_forge_core::commands::pin::{self, PinRequest};
use occm_forge_core::config::Minor;
use occm_forge_core::pipeline::Error;
use occm_forge_core::pipeline::plan;

use super::output::{note, print_stdout, warn};
use super::{Cli, Inputs, RegistryArgs};

#[derive(Args)]
#[command(group = clap::ArgGroup::new("which").required(true).args(["k8s", "new_minor"]))]
pub struct PinArgs {
    /// The minor to pin.
    #[arg(long = "k8s", value_name = "MINOR")]
    k8s: Option<Minor>,
    /// Add this minor, modelled on the closest lower one (needs --tag).
    #[arg(long, value_name = "MINOR")]
    new_minor: Option<Minor>,
    /// Move the minor to this upstream tag.
    #[arg(long, value_name = "TAG")]
    tag: Option<String>,
    /// Take the minor's entry back as this images.toml has it (the whole `[minors."M"]` table;
    /// removed where it has none), e.g. the main branch's for a pin whose series does not apply;
    /// no network.
    #[arg(long, value_name = "FILE", requires = "k8s", conflicts_with_all = ["tag", "go", "end_of_life", "new_minor"])]
    as_in: Option<std::path::PathBuf>,
    /// Allow --tag (or --go RELEASE) to be older than the pinned tag (or Go).
    #[arg(long)]
    allow_downgrade: bool,
    /// The minor's end of life, YYYY-MM-DD (the Kubernetes release calendar, kubernetes.io/releases):
    /// information for `minors --supported`, `upstream check` and `build`, never a reason to stop.
    #[arg(long, value_name = "DATE", value_parser = parse_date)]
    end_of_life: Option<time::Date>,
    /// Build the minor with this Go instead of its upstream tag's: a release the Go module proxy
    /// serves (`1.26.11`); `patch`: the newest revision of its own Go line (security fixes only);
    /// or `current`: the same, but on a line out of support the newest revision of the oldest
    /// supported line (KEP-3744; `upstream check` proposes both). Starts a new revision. Asks the
    /// proxy GOPROXY names (a fresh module cache: never a cached answer). docs/building.md, "Go versions".
    #[arg(long, value_name = "VERSION|patch|current")]
    go: Option<pin::GoChoice>,
    #[command(flatten)]
    inputs: Inputs,
    #[command(flatten)]
    registry: RegistryArgs,
}

/// `YYYY-MM-DD` as a date.
pub(super) fn parse_date(s: &str) -> Result<time::Date, String> {
    time::Date::parse(s, time::macros::format_description!("[year]-[month]-[day]"))
        .map_err(|e| format!("`{s}` is not a date YYYY-MM-DD ({e})"))
}

pub async fn run(cli: &Cli, args: &PinArgs) -> Result<u8, Error> {
    if let (Some(from), Some(minor)) = (&args.as_in, args.k8s) {
        let changes = pin::restore(&args.inputs.config.path, minor, from)?;
        if changes.is_empty() {
            note(
                cli.quiet,
                &format!("{} is unchanged", args.inputs.config.path.display()),
            );
        } else {
            print_stdout(&changes.join("\n"))?;
        }
        return Ok(0);
    }
    let config = args.inputs.load()?;
    let registry = plan::registry(&config, &args.registry.overrides())?;
    let cache = cli.cache_dir();
    let req = PinRequest {
        config_path: &args.inputs.config.path,
        minor: args.new_minor.or(args.k8s).expect("clap requires one"),
        new_minor: args.new_minor.is_some(),
        tag: args.tag.as_deref(),
        source: args.inputs.source.as_deref(),
        cache_dir: &cache,
        allow_downgrade: args.allow_downgrade,
        end_of_life: args.end_of_life,
        go: args.go,
    };
    let outcome = pin::pin(&req, &registry).await?;
    for w in &outcome.warnings {
        warn(w);
    }
    if outcome.changes.is_empty() {
        let state = if outcome.warnings.is_empty() {
            "up to date"
        } else {
            "unchanged"
        };
        note(
            cli.quiet,
            &format!("{} is {state}", args.inputs.config.path.display()),
        );
        return Ok(0);
    }
    let text: String = outcome.changes.iter().map(|c| format!("{c}\n")).collect();
    print_stdout(&text)?;
    Ok(0)
}
