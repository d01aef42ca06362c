//! `occm-forge clusters`: which magnum-cluster-api clusters run which OCCM, and `--fix`/`--watch`
//! (the `clusters` module).

use std::path::PathBuf;
use std::time::Duration;

use clap::Args;
use occm_forge_core::consumers::clusters::assess::{AssessOptions, table};
use occm_forge_core::consumers::clusters::fix::{self, FixOptions, Fixed, WatchOptions};
use occm_forge_core::consumers::clusters::{NAMESPACE, Row};
use occm_forge_core::digest_manifest;
use occm_forge_core::kubernetes::Kube;
use occm_forge_core::pipeline::Error;

use super::output::{note, print_stdout, warn as occm_forge_warn};

#[derive(Args)]
pub struct ClustersArgs {
    /// Kubeconfig of the management cluster [default: $KUBECONFIG, ~/.kube/config, or the Pod's
    /// ServiceAccount inside a cluster].
    #[arg(long, value_name = "FILE")]
    kubeconfig: Option<PathBuf>,
    /// Kubeconfig context to use [default: its current context].
    #[arg(long, value_name = "NAME")]
    context: Option<String>,
    /// Namespace of the Cluster API objects.
    #[arg(short, long, default_value = NAMESPACE, value_name = "NS",
          value_parser = clap::builder::NonEmptyStringValueParser::new())]
    namespace: String,
    #[command(flatten)]
    config: super::ConfigArg,
    /// Read this digest manifest (images.lock.yaml) instead of images.toml's.
    #[arg(long, value_name = "FILE", conflicts_with = "config")]
    manifest: Option<PathBuf>,
    /// Pin the image at <PREFIX>/openstack-cloud-controller-manager (a mirror recorded by `copy`).
    #[arg(long, value_name = "PREFIX")]
    prefix: Option<String>,
    /// Serve a cluster whose minor has no build, and none one minor below, by an older build
    /// (the version-skew policy allows cloud-controller-manager one minor older, no more).
    #[arg(long)]
    allow_skew: bool,
    /// Rewrite the Secrets of clusters that do not run the pinned image of their minor.
    #[arg(long)]
    fix: bool,
    /// With --fix: wait until Cluster API applied each rewrite (the binding records its hash).
    #[arg(long, requires = "fix")]
    wait: bool,
    /// How long --wait (and --fix --watch) waits per cluster for Cluster API to apply a rewrite.
    #[arg(long, default_value_t = 120, value_name = "SECONDS",
          value_parser = clap::value_parser!(u64).range(1..))]
    timeout: u64,
    /// Keep going: read again whenever a resource-set Secret or a Cluster changes, and every
    /// --resync seconds, printing what changed; with --fix, fix it too. Runs until SIGTERM.
    #[arg(long)]
    watch: bool,
    /// With --watch: read everything again at least this often (5 or more).
    #[arg(long, default_value_t = 60, value_name = "SECONDS", requires = "watch",
          value_parser = clap::value_parser!(u64).range(5..))]
    resync: u64,
    /// Print the rows (and rewrites) as JSON.
    #[arg(long)]
    json: bool,
}

impl ClustersArgs {
    fn manifest_path(&self) -> Result<PathBuf, Error> {
        match &self.manifest {
            Some(m) => Ok(m.clone()),
            None => Ok(self.config.load()?.digest_manifest),
        }
    }

    fn fix_options(&self) -> Option<FixOptions> {
        self.fix.then(|| FixOptions {
            wait: (self.wait || self.watch).then(|| Duration::from_secs(self.timeout)),
        })
    }
}

pub async fn run(args: &ClustersArgs, quiet: bool) -> Result<u8, Error> {
    let manifest_path = args.manifest_path()?;
    let manifest = digest_manifest::read_existing(&manifest_path)?;
    let kube = Kube::from_kubeconfig(args.kubeconfig.as_deref(), args.context.as_deref())
        .await
        .map_err(occm_forge_core::consumers::clusters::ClustersError::from)?;
    let assess_opts = AssessOptions {
        prefix: args.prefix.clone(),
        allow_skew: args.allow_skew,
    };
    if args.watch {
        return watch(args, &kube, &manifest_path, &assess_opts, quiet).await;
    }
    let (fleet, rows, fixed) = fix::pass(
        &kube,
        &args.namespace,
        &manifest,
        &assess_opts,
        args.fix_options().as_ref(),
        &mut |_| {},
    )
    .await?;
    if rows.is_empty() {
        occm_forge_warn(&format!(
            "no Cluster in namespace {} (magnum-cluster-api keeps its clusters in {NAMESPACE})",
            args.namespace
        ));
    }
    note(
        quiet,
        &format!(
            "{} in {} at {}{}",
            plural(rows.len(), "cluster"),
            args.namespace,
            kube.server(),
            if fleet.deleting.is_empty() {
                String::new()
            } else {
                format!("; being deleted: {}", fleet.deleting.join(", "))
            }
        ),
    );
    if args.json {
        let v = serde_json::json!({"clusters": rows, "fixed": fixed});
        print_stdout(&format!(
            "{}\n",
            serde_json::to_string_pretty(&v).expect("serialises")
        ))?;
    } else {
        print_stdout(&table(&rows))?;
        for f in &fixed {
            print_stdout(&format!("{}\n", f.describe()))?;
        }
    }
    let bad: Vec<&str> = rows
        .iter()
        .filter(|r| {
            !r.ok
                && !fixed
                    .iter()
                    .any(|f| f.cluster == r.cluster && f.succeeded())
        })
        .map(|r| r.cluster.as_str())
        .collect();
    if bad.is_empty() {
        return Ok(0);
    }
    Err(Error::command(
        occm_forge_core::consumers::clusters::NotPinned(format!(
            "{} of {} {} not run the pinned image of {} minor with the RBAC it needs: {} (see FINDINGS)",
            bad.len(),
            plural(rows.len(), "cluster"),
            if bad.len() == 1 { "does" } else { "do" },
            if bad.len() == 1 { "its" } else { "their" },
            bad.join(", ")
        )),
    ))
}

/// `--watch`: the table once, then a line per change of a row, and a line per rewrite as it is
/// done (JSON lines with `--json`).
async fn watch(
    args: &ClustersArgs,
    kube: &Kube,
    manifest_path: &std::path::Path,
    assess_opts: &AssessOptions,
    quiet: bool,
) -> Result<u8, Error> {
    note(
        quiet,
        &format!(
            "watching {} at {} (resync every {} s){}",
            args.namespace,
            kube.server(),
            args.resync,
            if args.fix {
                ", fixing"
            } else {
                ", reading only (--fix writes)"
            }
        ),
    );
    let json = args.json;
    let mut previous: Option<Vec<Row>> = None;
    let report = |rows: &[Row]| {
        let out = watch_report(previous.as_deref(), rows, json);
        if !out.is_empty() {
            let _ = print_stdout(&out);
        }
        previous = Some(rows.to_vec());
    };
    let mut on_fixed = |f: &Fixed| {
        let _ = print_stdout(&if json {
            format!(
                "{}\n",
                serde_json::to_string(&serde_json::json!({ "fixed": f })).expect("serialises")
            )
        } else {
            format!("{}\n", f.describe())
        });
    };
    let opts = WatchOptions {
        assess: assess_opts.clone(),
        fix: args.fix_options(),
        resync: Duration::from_secs(args.resync),
        ..WatchOptions::new(&args.namespace, manifest_path)
    };
    // SIGTERM (a Pod stopping) ends the watch cleanly: whatever a pass was doing is started
    // again by the next occm-forge (a rewrite carries the resourceVersion it read).
    let _handling = occm_forge_core::base::interrupt::handle_here();
    tokio::select! {
        r = fix::watch(kube, &opts, &mut on_fixed, report) => r?,
        _ = occm_forge_core::base::interrupt::interrupted() => {}
    }
    note(
        quiet,
        &format!(
            "stopped by signal {}",
            occm_forge_core::base::interrupt::signal().unwrap_or(0)
        ),
    );
    Ok(0)
}

/// What a watch pass prints: the table (or a JSON line) on the first pass, then one line per
/// row that changed since the pass before.
fn watch_report(previous: Option<&[Row]>, rows: &[Row], json: bool) -> String {
    let changed: Vec<&Row> = match previous {
        None => rows.iter().collect(),
        Some(prev) => rows
            .iter()
            .filter(|r| !prev.iter().any(|p| p == *r))
            .collect(),
    };
    if json {
        if changed.is_empty() {
            return String::new();
        }
        let v = serde_json::json!({ "clusters": changed });
        return format!("{}\n", serde_json::to_string(&v).expect("serialises"));
    }
    if previous.is_none() {
        return table(rows);
    }
    changed
        .iter()
        .map(|r| {
            let findings = r.findings();
            format!(
                "{}: {}{}\n",
                r.cluster,
                r.describe_image(),
                if findings.is_empty() {
                    String::new()
                } else {
                    format!(" ({findings})")
                }
            )
        })
        .collect()
}

/// `1 cluster`, `3 clusters`.
fn plural(n: usize, noun: &str) -> String {
    format!("{n} {noun}{}", if n == 1 { "" } else { "s" })
}
