//! `occm-forge accept`: the image's binary and the unpatched control against a real
//! kube-apiserver and the simulated OpenStack (crates/accept).

use std::path::PathBuf;

use clap::Args;
use occm_forge_accept::{self as accept, MinorRequest, RunOptions, Scenario};
use occm_forge_core::pipeline::Error;
use occm_forge_core::pipeline::progress::Terminal;

use super::output::print_stdout;
use super::{Cli, Inputs, MinorSelection};

#[derive(Args)]
pub struct AcceptArgs {
    #[command(flatten)]
    which: MinorSelection,
    #[command(flatten)]
    inputs: Inputs,
    /// The OCI layout holding the images (`build --output`); logs go to <DIR>/accept/<minor>.
    #[arg(long, default_value = "out", value_name = "DIR")]
    layout: PathBuf,
    /// Run only these scenarios (repeatable): S1 … S8 (docs/accept.md).
    #[arg(long = "scenario", value_name = "S1..S8")]
    scenario: Vec<Scenario>,
    /// Keep <DIR>/accept/<minor> (OCCM, etcd and kube-apiserver logs, the simulated cloud's
    /// request log) even when the minor is accepted.
    #[arg(long)]
    keep_logs: bool,
    /// Print the report as JSON (an object for one minor, an array for several).
    #[arg(long)]
    json: bool,
    /// Also write the report as a document to this file (atomically), e.g. docs/acceptance.md.
    #[arg(long, value_name = "FILE", conflicts_with = "prepare")]
    output: Option<PathBuf>,
    /// Only build and cache what a run needs besides the image (etcd, kube-apiserver, Cluster
    /// API's manager, the unpatched control, in <cache>/accept) and run nothing: warms a CI cache in a job of its
    /// own. Prints one line per minor (`--json`: the report).
    #[arg(long, conflicts_with_all = ["scenario", "keep_logs"])]
    prepare: bool,
    /// With --prepare: print the cache key of what it would build, one per minor, and build
    /// nothing (no network: it reads images.toml only).
    #[arg(long, requires = "prepare")]
    cache_key: bool,
    /// A Python interpreter with magnum-cluster-api ([accept] magnum_cluster_api in images.toml)
    /// installed, whose renderer gives the chart OCCM runs under and S6's Secret [default:
    /// $OCCM_FORGE_MCAPI_PYTHON, else python3].
    #[arg(long, value_name = "PYTHON")]
    mcapi_python: Option<PathBuf>,
    /// The helm binary magnum-cluster-api's renderer runs [default: $OCCM_FORGE_HELM, else helm
    /// on PATH].
    #[arg(long, value_name = "FILE")]
    helm: Option<PathBuf>,
    /// Run OCCM under this chart's RBAC instead of the chart magnum-cluster-api compiles in: a
    /// chart directory or archive (e.g. a newer upstream release), rendered with `helm template`.
    #[arg(long, value_name = "DIR", conflicts_with = "prepare")]
    chart: Option<PathBuf>,
}

pub async fn run(cli: &Cli, args: &AcceptArgs) -> Result<u8, Error> {
    let config = args.inputs.load()?;
    let minors = args.which.minors(&config);
    let scenarios = if args.scenario.is_empty() {
        Scenario::ALL.to_vec()
    } else {
        args.scenario.clone()
    };
    let Some(&first) = minors.first() else {
        return Err(Error::Usage(format!(
            "{} tracks no minors",
            args.inputs.config.path.display()
        )));
    };
    let cache = cli.cache_dir();
    let quiet = cli.quiet;
    if args.prepare {
        return prepare(args, &config, &minors, &cache, quiet).await;
    }
    if let Some(path) = &args.output {
        for p in [path.clone(), path.with_extension("json")] {
            super::check_output_path("--output", &p, &config, None)?;
        }
        accept::report::recorded_reports(path)?;
    }
    let tools = occm_forge_core::consumers::mcapi::Tools {
        python: args.mcapi_python.clone(),
        helm: args.helm.clone(),
    };
    let req = MinorRequest {
        config: &config,
        minor: first,
        source: args.inputs.source.as_deref(),
        run: RunOptions {
            layout_dir: &args.layout,
            cache_dir: &cache,
            work_dir: None,
            scenarios: &scenarios,
            keep_logs: args.keep_logs,
            tools: &tools,
            chart_dir: args.chart.as_deref(),
        },
    };
    let reports = if minors.len() == 1 {
        let subject = accept::Subject::from_config(&config, first, req.source)?;
        let result = accept::accept_subject(&subject, &req.run, &Terminal::new(quiet, "")).await;
        if let (Err(_), Some(path)) = (&result, &args.output) {
            // A run that ended in an error is recorded too, as `accept --all` records it.
            accept::record_run(path, &subject, &result)?;
        }
        vec![result?]
    } else {
        accept::matrix(&req, &minors, &|m| {
            Box::new(Terminal::new(quiet, format!("{m} ")))
        })
        .await?
    };
    let text = match (args.json, reports.as_slice()) {
        (true, [one]) => serde_json::to_string(one).expect("report serialises"),
        (true, all) => serde_json::to_string(all).expect("reports serialise"),
        (false, all) => accept::render_markdown(all),
    };
    // The result goes to stdout first: a document that cannot be written loses no run.
    print_stdout(&text)?;
    if let Some(path) = &args.output {
        let now = time::OffsetDateTime::now_utc().unix_timestamp();
        accept::report::write_document(path, &reports, now)?;
    }
    accept::require_accepted(&reports)?;
    Ok(0)
}

/// `accept --prepare` (and `--cache-key`): each minor's parts built or found, one line each (or
/// the reports as JSON); exit 12 when a minor cannot be prepared here (NOT VERIFIED).
async fn prepare(
    args: &AcceptArgs,
    config: &occm_forge_core::config::Config,
    minors: &[occm_forge_core::config::Minor],
    cache: &std::path::Path,
    quiet: bool,
) -> Result<u8, Error> {
    let source = args.inputs.source.as_deref();
    let subjects = minors
        .iter()
        .map(|&m| accept::Subject::from_config(config, m, source))
        .collect::<Result<Vec<_>, _>>()?;
    if args.cache_key {
        let platform = accept::binary::host_platform()?;
        let keys: Vec<(String, String)> = subjects
            .iter()
            .map(|s| (s.minor.to_string(), accept::cache_key(s, &platform)))
            .collect();
        let text = if args.json {
            let objects: Vec<serde_json::Value> = keys
                .iter()
                .map(|(minor, key)| serde_json::json!({"minor": minor, "cache_key": key}))
                .collect();
            match objects.as_slice() {
                [one] => one.to_string(),
                all => serde_json::Value::from(all.to_vec()).to_string(),
            }
        } else {
            keys.into_iter()
                .map(|(_, k)| k)
                .collect::<Vec<_>>()
                .join("\n")
        };
        return print_stdout(&text).map(|()| 0);
    }
    let mut reports = Vec::new();
    for s in &subjects {
        let prefix = if subjects.len() > 1 {
            format!("{} ", s.minor)
        } else {
            String::new()
        };
        reports.push(accept::prepare_subject(s, cache, &Terminal::new(quiet, prefix)).await?);
    }
    let text = if args.json {
        match reports.as_slice() {
            [one] => serde_json::to_string(one).expect("report serialises"),
            all => serde_json::to_string(all).expect("reports serialise"),
        }
    } else {
        reports
            .iter()
            .map(accept::PrepareReport::line)
            .collect::<Vec<_>>()
            .join("\n")
    };
    print_stdout(&text)?;
    let refused: Vec<String> = reports
        .iter()
        .filter_map(|r| {
            r.not_verified
                .as_ref()
                .map(|why| format!("{}: {why}", r.minor))
        })
        .collect();
    if refused.is_empty() {
        Ok(0)
    } else {
        Err(accept::AcceptError::NotVerified(refused.join("; ")).into())
    }
}
