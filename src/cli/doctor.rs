//! `occm-forge doctor`: build's preflight checks as a table.

use std::path::PathBuf;

use clap::Args;
use occm_forge_core::commands::doctor;
use occm_forge_core::config::Minor;
use occm_forge_core::pipeline::Error;
use occm_forge_core::pipeline::plan::{self, BuildPlan, Overrides};
use occm_forge_core::pipeline::preflight::{Check, Need};

use super::output::print_stdout;
use super::{Cli, Inputs, PushArgs};

#[derive(Args)]
pub struct DoctorArgs {
    /// Kubernetes minor to check for (its Go toolchain, its base); repeatable; default: every
    /// minor of images.toml.
    #[arg(long = "k8s", value_name = "MINOR")]
    k8s: Vec<Minor>,
    #[command(flatten)]
    inputs: Inputs,
    #[command(flatten)]
    target: PushArgs,
    /// Also check what `build --accept` needs (helm, magnum-cluster-api, where etcd,
    /// kube-apiserver and Cluster API come from).
    #[arg(long)]
    accept: bool,
    /// Also check this signing key (as `build --sign-key` reads it; password from COSIGN_PASSWORD).
    #[arg(long, value_name = "FILE", env = "OCCM_FORGE_SIGN_KEY")]
    sign_key: Option<PathBuf>,
    /// The OCI layout directory `build` would write (for the room it needs).
    #[arg(long, default_value = "out", value_name = "DIR")]
    output: PathBuf,
    /// Base image instead of images.toml's: `static` (built in; the checks need no registry
    /// then) or a reference.
    #[arg(long, value_name = "static|REF")]
    base: Option<String>,
    /// Allow a base image reference without @sha256 digest (as `build --allow-unpinned-base`).
    #[arg(long)]
    allow_unpinned_base: bool,
    /// Print the checks as a JSON array instead of the table.
    #[arg(long)]
    json: bool,
}

pub async fn run(cli: &Cli, args: &DoctorArgs) -> Result<u8, Error> {
    let config = args.inputs.load()?;
    let registry = plan::registry(&config, &args.target.registry.overrides())?;
    let overrides = Overrides {
        source: args.inputs.source.clone(),
        repository: args.target.repository.clone(),
        base: args.base.clone(),
        allow_unpinned_base: args.allow_unpinned_base,
        push: args.target.push,
        accept: args.accept,
        output: args.output.clone(),
        cache_dir: cli.cache_dir(),
        wait_for_lock: true,
        ..Default::default()
    };
    let minors: Vec<Minor> = if args.k8s.is_empty() {
        config.minors.keys().copied().collect()
    } else {
        args.k8s.clone()
    };
    // A minor images.toml cannot build is a row of its own, not the end of the checks.
    let mut unresolved = Vec::new();
    let mut plans = Vec::new();
    for m in &minors {
        match BuildPlan::resolve(&config, *m, &overrides) {
            Ok(p) => plans.push(p),
            Err(e) => {
                // The error says what to do; the minor's other checks are still made, on the
                // base as it is.
                unresolved.push(Check::failed(
                    format!("images.toml {m}"),
                    Need::Build,
                    e.to_string(),
                    "",
                    e.exit_code(),
                ));
                let lenient = Overrides {
                    allow_unpinned_base: true,
                    ..overrides.clone()
                };
                if let Ok(p) = BuildPlan::resolve(&config, *m, &lenient) {
                    plans.push(p);
                }
            }
        }
    }
    let sign_key = args.sign_key.as_deref().map(|path| {
        let password = std::env::var_os("COSIGN_PASSWORD");
        occm_forge_core::signing::SigningKey::load(
            path,
            password.as_ref().map(|p| p.as_encoded_bytes()),
        )
        .map(|_| format!("{} opens", path.display()))
        .map_err(|e| e.to_string())
    });
    let mut checks = unresolved;
    checks.extend(
        doctor::doctor(
            &plans,
            &registry,
            Some(&occm_forge_accept::simulation::Simulation),
            sign_key,
        )
        .await,
    );
    if args.json {
        print_stdout(&serde_json::to_string_pretty(&checks).expect("checks serialise"))?;
    } else {
        print_stdout(&doctor::table(&checks))?;
    }
    Ok(doctor::exit_code(&checks))
}
