//! `occm-forge build`: one minor, several (`--k8s` repeated) or all of them (`--all`).

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use clap::Args;
use occm_forge_core::commands::report;
use occm_forge_core::pipeline::Error;
use occm_forge_core::pipeline::plan::{self, BuildPlan, Environment, Overrides};
use occm_forge_core::pipeline::progress::Terminal;
use occm_forge_core::pipeline::{self, BuildOutcome, MinorResult};
use occm_forge_core::registry::publish::ReferrersMode;

use super::output::{note, print_error_of, print_stdout};
use super::{Cli, Inputs, MinorSelection, PushArgs};

#[derive(Args)]
pub struct BuildArgs {
    #[command(flatten)]
    which: MinorSelection,
    #[command(flatten)]
    inputs: Inputs,
    #[command(flatten)]
    target: PushArgs,
    /// OCI image layout directory.
    #[arg(long, default_value = "out", value_name = "DIR")]
    output: PathBuf,
    /// Print the result as a JSON object (an array of them for several minors) instead of the
    /// image reference.
    #[arg(long)]
    json: bool,
    /// Write stage timings as JSON to this file after the build (a list of stages; with several
    /// minors an object keyed by the minors that did not fail). Not written when a single-minor
    /// build fails.
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
    /// Write the entries to FILE instead of the digest manifest (parallel CI jobs; fold the
    /// fragments in with `manifest merge`).
    #[arg(long, value_name = "FILE")]
    manifest_fragment: Option<PathBuf>,
    /// Push even when the tag already serves another image (tags are otherwise never moved).
    #[arg(long, requires = "push")]
    replace_tag: bool,
    /// Build even when the recorded entry is up to date (same inputs, result still there).
    #[arg(long)]
    force: bool,
    /// Before publishing, run the image's binary and the unpatched control against a real
    /// kube-apiserver and the simulated OpenStack (`occm-forge accept`); a minor that is not
    /// accepted stops before publish and record (exit 12). Not run for an up-to-date minor.
    #[arg(long)]
    accept: bool,
    /// With `--accept`: write each accepted (or refused) minor's report into this acceptance
    /// document as `accept --output` does (its reports kept beside it as .json; other minors'
    /// rows stay).
    #[arg(long, value_name = "FILE", requires = "accept")]
    accept_output: Option<PathBuf>,
    /// With several minors, stop at the first one that fails.
    #[arg(long)]
    fail_fast: bool,
    /// How the SBOM and provenance referrers are pushed: `fallback` (default) as OCI 1.1
    /// referrers, or without `subject` in the sha256-<hex> tag schema when the registry refuses
    /// `subject`; `require` fails then (before the tag moves); `skip` pushes none.
    #[arg(
        long,
        requires = "push",
        default_value = "fallback",
        value_name = "require|fallback|skip"
    )]
    referrers: ReferrersMode,
    /// Sign the image index by digest and attest its SBOMs and provenance with this key, as
    /// cosign does (Sigstore bundles as referrers of the index; `cosign verify --key`): cosign's
    /// own key file (`cosign generate-key-pair`; its password from COSIGN_PASSWORD) or a PKCS#8
    /// PEM ECDSA P-256 key. Read before anything is built.
    #[arg(long, value_name = "FILE", env = "OCCM_FORGE_SIGN_KEY")]
    sign_key: Option<PathBuf>,
}

impl BuildArgs {
    fn overrides(&self, cli: &Cli) -> Result<Overrides, Error> {
        Ok(Overrides {
            source: self.inputs.source.clone(),
            repository: self.target.repository.clone(),
            base: self.base.clone(),
            allow_unpinned_base: self.allow_unpinned_base,
            push: self.target.push,
            output: self.output.clone(),
            cache_dir: cli.cache_dir(),
            source_date_epoch: Environment::current().source_date_epoch()?,
            manifest_fragment: self.manifest_fragment.clone(),
            replace_tag: self.replace_tag,
            wait_for_lock: !self.no_wait,
            force: self.force,
            accept: self.accept,
            accept_output: self.accept_output.clone(),
            referrers: self.referrers,
            sign_key: self
                .sign_key
                .as_deref()
                .map(|path| {
                    let password = std::env::var_os("COSIGN_PASSWORD");
                    occm_forge_core::signing::SigningKey::load(
                        path,
                        password.as_ref().map(|p| p.as_encoded_bytes()),
                    )
                })
                .transpose()?
                .map(std::sync::Arc::new),
        })
    }
}

pub async fn run(cli: &Cli, args: &BuildArgs) -> Result<u8, Error> {
    let config = args.inputs.load()?;
    let registry = plan::registry(&config, &args.target.registry.overrides())?;
    let overrides = args.overrides(cli)?;
    let minors = args.which.minors(&config);
    let today = time::OffsetDateTime::now_utc().date();
    for m in &minors {
        // An unknown minor is refused later, with the known ones named.
        let Some(mc) = config.minors.get(m) else {
            continue;
        };
        if let Some(line) = report::past_end_of_life(*m, mc, today) {
            note(cli.quiet, &format!("warning: {line}"));
        }
    }
    if let Some(path) = &args.accept_output {
        for p in [path.clone(), path.with_extension("json")] {
            super::check_output_path(
                "--accept-output",
                &p,
                &config,
                overrides.manifest_fragment.as_deref(),
            )?;
        }
    }
    if let Some(path) = &args.timings {
        super::check_output_path(
            "--timings",
            path,
            &config,
            overrides.manifest_fragment.as_deref(),
        )?;
    }
    if let ([minor], false) = (minors.as_slice(), args.which.all) {
        let plan = BuildPlan::resolve(&config, *minor, &overrides)?;
        let outcome = pipeline::build(
            &plan,
            &registry,
            Some(&occm_forge_accept::simulation::Simulation),
            &Terminal::new(cli.quiet, ""),
        )
        .await?;
        write_timings(
            args,
            &serde_json::to_value(&outcome.timings).expect("timings"),
        )?;
        print_stdout(&report::build_result(&outcome, args.json))?;
        return Ok(0);
    }
    let plans = minors
        .iter()
        .map(|m| (*m, BuildPlan::resolve(&config, *m, &overrides)))
        .collect();
    let record_to = overrides
        .manifest_fragment
        .clone()
        .unwrap_or_else(|| config.digest_manifest.clone());
    let quiet = cli.quiet;
    // A signal stops the minor in progress; what the others did is still printed.
    let _handling = occm_forge_core::base::interrupt::handle_here();
    let results = pipeline::build_many(
        plans,
        &record_to,
        overrides.wait_for_lock,
        &registry,
        Some(&occm_forge_accept::simulation::Simulation),
        &|m| Box::new(Terminal::new(quiet, format!("{m} "))),
        args.fail_fast,
    )
    .await?;
    finish_many(cli, args, &results, &record_to)
}

/// Prints what several minors gave: each error as it is, one result per built minor on stdout
/// (or a JSON array), the summary table on stderr, and after a signal a last line saying what is
/// recorded in `record_to`. Exit status: 0 when every minor is built or up to date, 128 + the
/// signal after one, else the status of the first minor that failed.
fn finish_many(
    cli: &Cli,
    args: &BuildArgs,
    results: &[MinorResult],
    record_to: &Path,
) -> Result<u8, Error> {
    let outcomes: Vec<&BuildOutcome> = results
        .iter()
        .filter_map(|r| r.result.as_ref().ok())
        .collect();
    let timings: BTreeMap<String, _> = outcomes
        .iter()
        .map(|o| (o.minor.to_string(), &o.timings))
        .collect();
    write_timings(args, &serde_json::to_value(&timings).expect("timings"))?;
    let text = if args.json {
        serde_json::to_string(&outcomes).expect("outcomes serialise")
    } else {
        outcomes
            .iter()
            .map(|o| report::build_result(o, false) + "\n")
            .collect()
    };
    if !text.is_empty() {
        print_stdout(&text)?;
    }
    for r in results {
        if let (Err(e), None) = (&r.result, report::interrupted_by(r)) {
            print_error_of(&format!("{}: ", r.minor), e);
        }
    }
    for line in report::summary(results).lines() {
        note(cli.quiet, line);
    }
    if let Some((r, sig)) = results
        .iter()
        .find_map(|r| report::interrupted_by(r).map(|s| (r, s)))
    {
        let recorded: Vec<_> = outcomes.iter().map(|o| o.minor).collect();
        let e = Error::Interrupted(sig);
        super::output::error_line(&report::interrupted_run(sig, r.minor, &recorded, record_to));
        return Ok(e.exit_code());
    }
    Ok(results
        .iter()
        .find_map(|r| r.result.as_ref().err().map(Error::exit_code))
        .unwrap_or(0))
}

/// Writes the stage timings after the run (atomically); nothing is written when a single-minor
/// build fails.
fn write_timings(args: &BuildArgs, value: &serde_json::Value) -> Result<(), Error> {
    if let Some(path) = &args.timings {
        let json = serde_json::to_vec_pretty(value).expect("timings serialise");
        occm_forge_core::base::util::write_file_atomically(path, &json)
            .map_err(|e| Error::Io(format!("--timings {}: {e}", path.display())))?;
    }
    Ok(())
}
