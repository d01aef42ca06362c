//! `occm-forge copy`: a minor's published image to another repository, recorded as a mirror.

use clap::Args;
use occm_forge_core::commands::copy::{self, CopyError, CopyRequest};
use occm_forge_core::commands::report;
use occm_forge_core::config::Minor;
use occm_forge_core::consumers::render;
use occm_forge_core::pipeline::Error;
use occm_forge_core::pipeline::plan;
use occm_forge_core::pipeline::progress::Terminal;
use occm_forge_core::pipeline::stage::{Reporter as _, StageReport};

use super::output::print_stdout;
use super::{Cli, RegistryArgs};

#[derive(Args)]
#[command(group = clap::ArgGroup::new("target").required(true).args(["to", "prefix"]))]
pub struct CopyArgs {
    /// The minor whose published image is copied.
    #[arg(long = "k8s", value_name = "MINOR")]
    k8s: Minor,
    /// Target repository, registry/path without tag.
    #[arg(long, value_name = "REPO")]
    to: Option<String>,
    /// Target as a cluster's container_infra_prefix: <PREFIX>/openstack-cloud-controller-manager.
    #[arg(long, value_name = "PREFIX")]
    prefix: Option<String>,
    #[command(flatten)]
    config: super::ConfigArg,
    #[command(flatten)]
    registry: RegistryArgs,
    /// Refuse at once when another run holds the digest manifest.
    #[arg(long)]
    no_wait: bool,
    /// Print the result as a JSON object instead of the mirror's image reference.
    #[arg(long)]
    json: bool,
}

pub async fn run(cli: &Cli, args: &CopyArgs) -> Result<u8, Error> {
    let config = args.config.load()?;
    let registry = plan::registry(&config, &args.registry.overrides())?;
    let to = match (&args.to, &args.prefix) {
        (Some(to), _) => to.clone(),
        (None, Some(p)) => render::mcapi_repository(p),
        (None, None) => unreachable!("clap requires --to or --prefix"),
    };
    let req = CopyRequest {
        config: &config,
        minor: args.k8s,
        to,
        wait_for_lock: !args.no_wait,
    };
    let reporter = Terminal::new(cli.quiet, "");
    let started = std::time::Instant::now();
    reporter.started("copy");
    let on_bytes = |bytes, total| reporter.uploaded(bytes, total);
    let outcome = match copy::copy(&req, &registry, &on_bytes).await {
        Err(CopyError::Check { mirror, findings }) => {
            print_stdout(&report::findings(&findings))?;
            return Err(CopyError::Check { mirror, findings }.into());
        }
        r => r?,
    };
    let c = &outcome.copied;
    reporter.finished(&StageReport {
        stage: "copy".into(),
        seconds: started.elapsed().as_secs_f64(),
        detail: format!(
            "{} ({} manifests, {} referrers; {} blobs uploaded, {} already present, {} mounted); {}",
            c.reference,
            c.manifests,
            c.referrers,
            c.uploaded,
            c.present,
            c.mounted,
            if outcome.recorded {
                "recorded as a mirror"
            } else {
                "already recorded as a mirror"
            }
        ),
    });
    print_stdout(&if args.json {
        serde_json::to_string(&outcome).expect("outcome serialises")
    } else {
        outcome.copied.reference.clone()
    })?;
    Ok(0)
}
