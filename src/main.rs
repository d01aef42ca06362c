//! `occm-forge` command line: parses arguments, wires the stages, maps errors to exit codes.
//! stdout carries results only; logs and progress go to stderr.

use std::io::Write;
use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::Context;
use clap::{Args, Parser, Subcommand};
use occm_forge::config::{self, Minor};
use occm_forge::interrupt;
use occm_forge::pipeline::{self, BuildOptions};
use occm_forge::progress::Terminal;
use occm_forge::redgreen;
use occm_forge::registry::auth::AuthFiles;
use occm_forge::registry::oci::{OciRegistry, OciRegistryConfig};
use occm_forge::registry::retry::{RetryPolicy, Retrying};

#[derive(Parser)]
#[command(
    name = "occm-forge",
    version,
    about = "Patched, tested, digest-pinned OCCM images, one per Kubernetes minor"
)]
struct Cli {
    /// Cache directory (git objects, Go module and build caches, base blobs).
    #[arg(long, global = true, env = "OCCM_FORGE_CACHE", value_name = "DIR")]
    cache_dir: Option<PathBuf>,
    /// More log output on stderr (-v debug, -vv trace).
    #[arg(short, long, global = true, action = clap::ArgAction::Count)]
    verbose: u8,
    /// Only errors on stderr.
    #[arg(short, long, global = true)]
    quiet: bool,
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Build one Kubernetes minor: source → patches → test → build → image → publish → record.
    Build(BuildArgs),
    /// Check that the registry serves what the digest manifest records (and, with --rebuild, that
    /// the pins rebuild to the same digest).
    Verify(AuditArgs),
    /// Rewrite images.toml keeping its comments: move a minor to an upstream tag (commit, Go
    /// version and go-runner base from that tag), add a minor, and pin base images by digest.
    Pin(PinArgs),
    /// Upstream release tags against the pins.
    #[command(subcommand)]
    Upstream(UpstreamCommand),
    /// Render the digest manifest for Magnum, Helm or Atmosphere.
    Render(RenderArgs),
    /// The Kubernetes minors images.toml tracks, as a JSON array (for CI matrices).
    Minors(MinorsArgs),
    /// Digest-manifest maintenance.
    #[command(subcommand)]
    Manifest(ManifestCommand),
    /// Patch series checks on the real upstream tree.
    #[command(subcommand)]
    Patches(PatchesCommand),
    /// Acceptance in a simulated cloud: the image's binary and the unpatched upstream build of
    /// the same tag against a real kube-apiserver and a simulated OpenStack. Exit status 12 when
    /// a minor is not accepted.
    Accept(AcceptArgs),
}

#[derive(Args)]
#[command(group = clap::ArgGroup::new("which").required(true).args(["k8s", "all"]))]
struct AcceptArgs {
    /// Kubernetes minor to accept (repeatable).
    #[arg(long = "k8s", value_name = "MINOR")]
    k8s: Vec<Minor>,
    /// Every minor of images.toml.
    #[arg(long)]
    all: bool,
    #[command(flatten)]
    inputs: Inputs,
    /// The OCI layout holding the images (`build --output`); logs go to <DIR>/accept/<minor>.
    #[arg(long, default_value = "out", value_name = "DIR")]
    layout: PathBuf,
    /// Run only these scenarios (repeatable): S1, S2, S3, S4.
    #[arg(long = "scenario", value_name = "S1..S4")]
    scenario: Vec<occm_forge::accept::Scenario>,
    /// Keep <DIR>/accept/<minor> (OCCM, etcd and kube-apiserver logs, the simulated cloud's
    /// request log) even when the minor is accepted.
    #[arg(long)]
    keep_logs: bool,
    /// Print the report as JSON (an object for one minor, an array for several).
    #[arg(long)]
    json: bool,
    /// Also write the report as a document to this file (atomically), e.g. docs/acceptance.md.
    #[arg(long, value_name = "FILE")]
    output: Option<PathBuf>,
}

#[derive(Subcommand)]
enum PatchesCommand {
    /// Red/green proof for one minor: guard tests fail without the fix patches and pass with them.
    Verify(VerifyArgs),
    /// `verify` for every minor (or those given), as a Markdown table.
    Matrix(MatrixArgs),
}

#[derive(Args)]
struct VerifyArgs {
    /// Kubernetes minor, e.g. 1.34.
    #[arg(long = "k8s", value_name = "MINOR")]
    k8s: Minor,
    #[command(flatten)]
    inputs: Inputs,
    /// Print the report as JSON.
    #[arg(long)]
    json: bool,
}

#[derive(Args)]
struct MatrixArgs {
    /// Minors to include (repeatable); all of images.toml by default.
    #[arg(long = "k8s", value_name = "MINOR")]
    k8s: Vec<Minor>,
    #[command(flatten)]
    inputs: Inputs,
    /// Also write the Markdown to this file (atomically), e.g. docs/patch-matrix.md.
    #[arg(long, value_name = "FILE")]
    output: Option<PathBuf>,
}

#[derive(Args)]
struct AuditArgs {
    /// Minors to check (repeatable); every entry of the digest manifest by default.
    #[arg(long = "k8s", value_name = "MINOR")]
    k8s: Vec<Minor>,
    #[command(flatten)]
    inputs: Inputs,
    #[command(flatten)]
    registry: RegistryArgs,
    /// Also rebuild each entry from images.toml (no push, nothing recorded) and compare digests.
    #[arg(long)]
    rebuild: bool,
}

#[derive(Args)]
#[command(group = clap::ArgGroup::new("which").required(true).args(["k8s", "new_minor"]))]
struct PinArgs {
    /// The minor to pin.
    #[arg(long = "k8s", value_name = "MINOR")]
    k8s: Option<Minor>,
    /// Add this minor, modelled on the closest lower one (needs --tag).
    #[arg(long, value_name = "MINOR")]
    new_minor: Option<Minor>,
    /// Move the minor to this upstream tag.
    #[arg(long, value_name = "TAG")]
    tag: Option<String>,
    #[command(flatten)]
    inputs: Inputs,
    #[command(flatten)]
    registry: RegistryArgs,
}

#[derive(Subcommand)]
enum UpstreamCommand {
    /// Newer patch tags per tracked minor, and newer minors not tracked yet. Exit status: 0 nothing
    /// new, 11 something new.
    Check(UpstreamArgs),
}

#[derive(Args)]
struct UpstreamArgs {
    #[command(flatten)]
    inputs: Inputs,
    /// Print the report as JSON.
    #[arg(long)]
    json: bool,
}

#[derive(Args)]
#[command(group = clap::ArgGroup::new("which").required(true).args(["k8s", "all"]))]
struct RenderArgs {
    /// The minor to render.
    #[arg(long = "k8s", value_name = "MINOR")]
    k8s: Option<Minor>,
    /// Render every minor of the digest manifest.
    #[arg(long)]
    all: bool,
    /// magnum-label, magnum-prefix-tag, helm-values or atmosphere-vars.
    #[arg(long, value_name = "FORMAT")]
    format: occm_forge::render::Format,
    /// images.toml (for the digest manifest's path).
    #[arg(long, default_value = "images.toml", value_name = "FILE")]
    config: PathBuf,
    /// Render entries recorded without --push too.
    #[arg(long)]
    allow_unpublished: bool,
}

#[derive(Args)]
struct MinorsArgs {
    /// images.toml to read.
    #[arg(long, default_value = "images.toml", value_name = "FILE")]
    config: PathBuf,
}

#[derive(Subcommand)]
enum ManifestCommand {
    /// Fold fragments written by `build --manifest-fragment` into the digest manifest.
    Merge(MergeArgs),
}

#[derive(Args)]
struct MergeArgs {
    /// Fragment files.
    #[arg(required = true, value_name = "FRAGMENT")]
    fragments: Vec<PathBuf>,
    /// images.toml (for the digest manifest's path).
    #[arg(long, default_value = "images.toml", value_name = "FILE")]
    config: PathBuf,
    /// Refuse at once when another run holds the digest manifest.
    #[arg(long)]
    no_wait: bool,
}

/// How registries are reached.
#[derive(Args)]
struct RegistryArgs {
    /// Reach this registry (host:port) over plain HTTP; repeatable; adds to images.toml [registry] insecure.
    #[arg(long = "insecure-registry", value_name = "HOST")]
    insecure_registry: Vec<String>,
    /// Trust this CA (PEM) for registry TLS; repeatable; adds to images.toml [registry] ca_files.
    #[arg(long = "ca-file", value_name = "PEM")]
    ca_file: Vec<PathBuf>,
    /// Read registry credentials from this docker/podman auth file only (default: $REGISTRY_AUTH_FILE,
    /// $DOCKER_CONFIG/config.json or ~/.docker/config.json, then podman's auth.json).
    #[arg(long = "registry-config", value_name = "FILE")]
    registry_config: Option<PathBuf>,
    /// Retries of a registry request that failed transiently (5xx, 408, 429, reset, timeout),
    /// with exponential backoff from 0.5 s to 10 s.
    #[arg(long, default_value_t = 5, value_name = "N")]
    retries: usize,
}

/// Where the inputs come from.
#[derive(Args)]
struct Inputs {
    /// images.toml to read.
    #[arg(long, default_value = "images.toml", value_name = "FILE")]
    config: PathBuf,
    /// Fetch upstream from this URL or local path/mirror instead of images.toml `upstream`.
    #[arg(long, value_name = "URL|PATH")]
    source: Option<String>,
}

#[derive(Args)]
struct BuildArgs {
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

fn default_cache_dir() -> PathBuf {
    std::env::var_os("XDG_CACHE_HOME")
        .map(PathBuf::from)
        .or_else(|| std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".cache")))
        .unwrap_or_else(std::env::temp_dir)
        .join("occm-forge")
}

fn source_date_epoch() -> anyhow::Result<Option<i64>> {
    match std::env::var("SOURCE_DATE_EPOCH") {
        Ok(v) if !v.is_empty() => {
            Ok(Some(v.trim().parse().with_context(|| {
                format!("SOURCE_DATE_EPOCH `{v}` is not a number of seconds")
            })?))
        }
        _ => Ok(None),
    }
}

async fn build(cli: &Cli, args: &BuildArgs) -> Result<(), occm_forge::Error> {
    let config = config::load(&args.inputs.config)?;
    let registry = registry_client(&config, &args.registry)?;
    let opts = BuildOptions {
        config,
        minor: args.k8s,
        source: args.inputs.source.clone(),
        push: args.push,
        repository: args.repository.clone(),
        output: args.output.clone(),
        cache_dir: cache_dir(cli),
        allow_unpinned_base: args.allow_unpinned_base,
        base: args.base.clone(),
        wait_for_lock: !args.no_wait,
        manifest_fragment: args.manifest_fragment.clone(),
        replace_tag: args.replace_tag,
        source_date_epoch: source_date_epoch()
            .map_err(|e| occm_forge::Error::Usage(e.to_string()))?,
    };
    if let Some(path) = &args.timings {
        // Fail now, not after the digest manifest was written.
        std::fs::write(path, b"[]")
            .map_err(|e| occm_forge::Error::Io(format!("--timings {}: {e}", path.display())))?;
    }
    let reporter = Terminal::new(cli.quiet, "");
    let outcome = pipeline::build(&opts, &registry, &reporter).await?;
    if let Some(path) = &args.timings {
        let json = serde_json::to_vec_pretty(&outcome.timings).expect("timings serialise");
        std::fs::write(path, json)
            .map_err(|e| occm_forge::Error::Io(format!("{}: {e}", path.display())))?;
    }
    let mut stdout = std::io::stdout().lock();
    let line = if args.json {
        serde_json::to_string(&outcome).expect("outcome serialises")
    } else if outcome.entry.published {
        outcome.entry.image.clone()
    } else {
        // Not pushed: the image exists only in the layout.
        format!("oci:{}:{}", outcome.layout.display(), outcome.entry.tag)
    };
    writeln!(stdout, "{line}").map_err(|e| occm_forge::Error::Io(format!("stdout: {e}")))?;
    Ok(())
}

fn registry_client(
    config: &config::Config,
    args: &RegistryArgs,
) -> Result<Retrying<OciRegistry>, occm_forge::Error> {
    let mut insecure = config.insecure_registries.clone();
    for host in &args.insecure_registry {
        if host.contains("://") || host.contains('/') || host.is_empty() {
            return Err(occm_forge::Error::Usage(format!(
                "--insecure-registry {host}: give host[:port], not a URL"
            )));
        }
        insecure.push(host.clone());
    }
    let mut ca_files = config.ca_files.clone();
    ca_files.extend(args.ca_file.iter().cloned());
    OciRegistry::new(&OciRegistryConfig {
        insecure,
        ca_files,
        auth: AuthFiles::discover(args.registry_config.as_deref()),
    })
    .map(|r| {
        let policy = RetryPolicy {
            retries: args.retries,
            ..RetryPolicy::default()
        };
        Retrying::new(r, policy)
    })
    .map_err(|e| occm_forge::Error::Usage(e.to_string()))
}

async fn verify_registry(cli: &Cli, args: &AuditArgs) -> Result<(), occm_forge::Error> {
    use occm_forge::audit;
    let config = config::load(&args.inputs.config)?;
    let manifest = occm_forge::lockfile::read(&config.digest_manifest)?;
    let registry = registry_client(&config, &args.registry)?;
    let minors: Vec<Minor> = if args.k8s.is_empty() {
        manifest.images.keys().copied().collect()
    } else {
        args.k8s.clone()
    };
    let mut findings = Vec::new();
    for minor in &minors {
        let Some(entry) = manifest.images.get(minor) else {
            return Err(occm_forge::Error::Usage(format!(
                "{}: no entry for {minor}; it has {}",
                config.digest_manifest.display(),
                manifest
                    .images
                    .keys()
                    .map(ToString::to_string)
                    .collect::<Vec<_>>()
                    .join(", ")
            )));
        };
        let found = audit::check(&registry, &config, *minor, entry).await?;
        if !cli.quiet && found.is_empty() {
            eprintln!(
                "occm-forge: verify {minor}: {} matches the digest manifest",
                entry.image
            );
        }
        findings.extend(found);
        if args.rebuild && entry.published {
            let scratch = tempfile::tempdir().map_err(|e| occm_forge::Error::Io(e.to_string()))?;
            let opts = audit::rebuild_options(
                &config,
                *minor,
                entry,
                args.inputs.source.clone(),
                cache_dir(cli),
                scratch.path(),
            );
            let reporter = Terminal::new(cli.quiet, format!("rebuild {minor}: "));
            let rebuilt = pipeline::build(&opts, &registry, &reporter).await?;
            match audit::rebuild_finding(*minor, entry, &rebuilt.entry.digest) {
                Some(f) => findings.push(f),
                None if !cli.quiet => {
                    eprintln!(
                        "occm-forge: verify {minor}: the rebuild gives the same digest {}",
                        entry.digest
                    )
                }
                None => {}
            }
        }
    }
    let text: String = findings.iter().map(|f| format!("{f}\n")).collect();
    if !text.is_empty() {
        print_stdout(&text)?;
    }
    if findings.is_empty() {
        Ok(())
    } else {
        Err(occm_forge::Error::Mismatch(format!(
            "{} mismatch{} between the registry and {}",
            findings.len(),
            if findings.len() == 1 { "" } else { "es" },
            config.digest_manifest.display()
        )))
    }
}

async fn pin(cli: &Cli, args: &PinArgs) -> Result<(), occm_forge::Error> {
    let config = config::load(&args.inputs.config)?;
    let registry = registry_client(&config, &args.registry)?;
    let cache = cache_dir(cli);
    let req = occm_forge::pin::PinRequest {
        config_path: &args.inputs.config,
        minor: args.new_minor.or(args.k8s).expect("clap requires one"),
        new_minor: args.new_minor.is_some(),
        tag: args.tag.as_deref(),
        source: args.inputs.source.as_deref(),
        cache_dir: &cache,
    };
    let outcome = occm_forge::pin::pin(&req, &registry).await?;
    for w in &outcome.warnings {
        eprintln!("occm-forge: warning: {w}");
    }
    if outcome.changes.is_empty() {
        if !cli.quiet {
            let state = if outcome.warnings.is_empty() {
                "up to date"
            } else {
                "unchanged"
            };
            eprintln!("occm-forge: {} is {state}", args.inputs.config.display());
        }
        return Ok(());
    }
    print_stdout(
        &outcome
            .changes
            .iter()
            .map(|c| format!("{c}\n"))
            .collect::<String>(),
    )
}

/// `upstream check`: exit 0 when nothing is new, 11 when something is.
fn upstream_check(cli: &Cli, args: &UpstreamArgs) -> Result<u8, occm_forge::Error> {
    let config = config::load(&args.inputs.config)?;
    let url = args
        .inputs
        .source
        .clone()
        .unwrap_or_else(|| config.upstream.clone());
    let tags = tokio::task::block_in_place(|| occm_forge::source::list_tags(&url))?;
    let report = occm_forge::upstream::check(&config, &tags);
    let text = if args.json {
        serde_json::to_string(&report).expect("report serialises")
    } else {
        let mut t = String::new();
        for m in &report.minors {
            let mut state = if m.newer {
                format!("{} is newer", m.latest)
            } else {
                "up to date".into()
            };
            if let Some(c) = &m.moved_to {
                state.push_str(&format!(
                    "; WARNING: {} now points at {c}, not the pinned commit",
                    m.pinned
                ));
            }
            t.push_str(&format!("{}  {}  {state}\n", m.minor, m.pinned));
        }
        for u in &report.untracked {
            t.push_str(&format!(
                "{}  not tracked  {} released: `occm-forge pin --new-minor {} --tag {}`\n",
                u.minor, u.latest, u.minor, u.latest
            ));
        }
        t
    };
    print_stdout(&text)?;
    if !cli.quiet && report.new {
        eprintln!("occm-forge: upstream has new releases");
    }
    Ok(if report.new { 11 } else { 0 })
}

fn render(args: &RenderArgs) -> Result<(), occm_forge::Error> {
    let config = config::load(&args.config)?;
    let manifest = occm_forge::lockfile::read(&config.digest_manifest)?;
    let entries: Vec<(Minor, &occm_forge::lockfile::Entry)> = match args.k8s {
        Some(minor) => {
            let e = manifest.images.get(&minor).ok_or_else(|| {
                occm_forge::Error::Usage(format!(
                    "{}: no entry for {minor}",
                    config.digest_manifest.display()
                ))
            })?;
            vec![(minor, e)]
        }
        None => manifest.images.iter().map(|(m, e)| (*m, e)).collect(),
    };
    if entries.is_empty() {
        return Err(occm_forge::Error::Usage(format!(
            "{} has no entries",
            config.digest_manifest.display()
        )));
    }
    let out = occm_forge::render::render(args.format, &entries, args.allow_unpublished)?;
    for w in &out.warnings {
        eprintln!("occm-forge: warning: {w}");
    }
    print_stdout(&out.text)
}

fn minors(args: &MinorsArgs) -> Result<(), occm_forge::Error> {
    let config = config::load(&args.config)?;
    let list: Vec<String> = config.minors.keys().map(ToString::to_string).collect();
    print_stdout(&serde_json::to_string(&list).expect("strings serialise"))
}

fn manifest_merge(cli: &Cli, args: &MergeArgs) -> Result<(), occm_forge::Error> {
    let config = config::load(&args.config)?;
    let path = &config.digest_manifest;
    let _lock = tokio::task::block_in_place(|| {
        occm_forge::lockfile::lock_run(path, !args.no_wait, &mut |holder| {
            eprintln!(
                "occm-forge: waiting for another occm-forge run on {} ({holder})",
                path.display()
            )
        })
    })?;
    let merged = occm_forge::lockfile::merge(path, &args.fragments)?;
    if !cli.quiet {
        eprintln!(
            "occm-forge: merged {} into {}",
            merged
                .iter()
                .map(ToString::to_string)
                .collect::<Vec<_>>()
                .join(", "),
            path.display()
        );
    }
    Ok(())
}

fn cache_dir(cli: &Cli) -> PathBuf {
    cli.cache_dir.clone().unwrap_or_else(default_cache_dir)
}

fn patches_verify(cli: &Cli, args: &VerifyArgs) -> Result<(), occm_forge::Error> {
    let config = config::load(&args.inputs.config)?;
    let cache = cache_dir(cli);
    let report = redgreen::verify(
        &redgreen::VerifyRequest {
            config: &config,
            minor: args.k8s,
            source: args.inputs.source.as_deref(),
            cache_dir: &cache,
        },
        &Terminal::new(cli.quiet, ""),
    )?;
    let text = if args.json {
        serde_json::to_string(&report).expect("report serialises")
    } else {
        redgreen::render_markdown(std::slice::from_ref(&report))
    };
    print_stdout(&text)?;
    if report.ok() {
        Ok(())
    } else {
        Err(occm_forge::Error::Verify(format!(
            "{} does not verify; see the table",
            args.k8s
        )))
    }
}

fn patches_matrix(cli: &Cli, args: &MatrixArgs) -> Result<(), occm_forge::Error> {
    let config = config::load(&args.inputs.config)?;
    let cache = cache_dir(cli);
    let minors: Vec<Minor> = if args.k8s.is_empty() {
        config.minors.keys().copied().collect()
    } else {
        args.k8s.clone()
    };
    let reporter = Terminal::new(cli.quiet, "");
    let reports = redgreen::matrix(
        &config,
        &minors,
        args.inputs.source.as_deref(),
        &cache,
        &reporter,
    )?;
    let table = redgreen::render_markdown(&reports);
    if let Some(path) = &args.output {
        let now = time::OffsetDateTime::now_utc().unix_timestamp();
        occm_forge::image::layout::write_file_atomically(
            path,
            redgreen::matrix_document(&reports, now).as_bytes(),
        )
        .map_err(|e| occm_forge::Error::Io(format!("{}: {e}", path.display())))?;
    }
    print_stdout(&table)?;
    let bad: Vec<String> = reports
        .iter()
        .filter(|r| !r.ok())
        .map(|r| r.minor.to_string())
        .collect();
    if bad.is_empty() {
        Ok(())
    } else {
        Err(occm_forge::Error::Verify(format!(
            "{} {} not verify; see the table",
            bad.join(", "),
            if bad.len() == 1 { "does" } else { "do" }
        )))
    }
}

async fn accept(cli: &Cli, args: &AcceptArgs) -> Result<(), occm_forge::Error> {
    use occm_forge::accept;
    let config = config::load(&args.inputs.config)?;
    let minors: Vec<Minor> = if args.all {
        config.minors.keys().copied().collect()
    } else {
        args.k8s.clone()
    };
    let scenarios = if args.scenario.is_empty() {
        accept::Scenario::ALL.to_vec()
    } else {
        args.scenario.clone()
    };
    let Some(&first) = minors.first() else {
        return Err(occm_forge::Error::Usage(format!(
            "{} tracks no minors",
            args.inputs.config.display()
        )));
    };
    let cache = cache_dir(cli);
    let reporter = Terminal::new(cli.quiet, "");
    let req = accept::MinorRequest {
        config: &config,
        minor: first,
        source: args.inputs.source.as_deref(),
        layout_dir: &args.layout,
        cache_dir: &cache,
        work_dir: None,
        scenarios: &scenarios,
        keep_logs: args.keep_logs,
    };
    let reports = if minors.len() == 1 {
        vec![accept::accept_minor(&req, &reporter).await?]
    } else {
        accept::matrix(&req, &minors, &reporter).await?
    };
    if let Some(path) = &args.output {
        let now = time::OffsetDateTime::now_utc().unix_timestamp();
        occm_forge::image::layout::write_file_atomically(
            path,
            accept::document(&reports, now).as_bytes(),
        )
        .map_err(|e| occm_forge::Error::Io(format!("{}: {e}", path.display())))?;
    }
    let text = match (args.json, reports.as_slice()) {
        (true, [one]) => serde_json::to_string(one).expect("report serialises"),
        (true, all) => serde_json::to_string(all).expect("reports serialise"),
        (false, all) => accept::render_markdown(all),
    };
    print_stdout(&text)?;
    accept::require_accepted(&reports).map_err(Into::into)
}

fn print_stdout(text: &str) -> Result<(), occm_forge::Error> {
    let mut stdout = std::io::stdout().lock();
    write!(stdout, "{text}")
        .and_then(|_| {
            if text.ends_with('\n') {
                Ok(())
            } else {
                writeln!(stdout)
            }
        })
        .map_err(|e| occm_forge::Error::Io(format!("stdout: {e}")))
}

fn print_error(e: &occm_forge::Error) {
    if let occm_forge::Error::Test(occm_forge::go::test::TestError::Failed { failures, .. }) = e {
        for f in failures {
            eprintln!("--- FAIL: {}", f.name);
            for line in f
                .output
                .lines()
                .rev()
                .take(40)
                .collect::<Vec<_>>()
                .into_iter()
                .rev()
            {
                eprintln!("    {line}");
            }
        }
    }
    eprintln!("occm-forge: error: {e}");
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let level = match (cli.quiet, cli.verbose) {
        (true, _) => "error",
        (false, 0) => "info",
        (false, 1) => "debug",
        _ => "trace",
    };
    let filter = tracing_subscriber::EnvFilter::try_from_env("OCCM_FORGE_LOG")
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new(format!("warn,occm_forge={level}")));
    use std::io::IsTerminal;
    tracing_subscriber::fmt()
        .with_ansi(std::io::stderr().is_terminal() && std::env::var_os("NO_COLOR").is_none())
        .with_writer(std::io::stderr)
        .with_env_filter(filter)
        .without_time()
        .with_target(false)
        .init();

    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
    {
        Ok(r) => r,
        Err(e) => {
            eprintln!("occm-forge: error: cannot start the async runtime: {e}");
            return ExitCode::from(1);
        }
    };
    let result = runtime.block_on(async {
        // SIGINT/SIGTERM: stop child processes, then let the command unwind (scratch space and
        // the run lock are released as it returns; nothing is recorded).
        tokio::spawn(async {
            use tokio::signal::unix::{SignalKind, signal};
            let (Ok(mut int), Ok(mut term)) = (signal(SignalKind::interrupt()), signal(SignalKind::terminate())) else {
                return;
            };
            let sig = tokio::select! {
                _ = int.recv() => libc::SIGINT,
                _ = term.recv() => libc::SIGTERM,
            };
            interrupt::interrupt(sig);
        });
        let command = async {
        match &cli.command {
            Command::Build(args) => build(&cli, args).await.map(|_| 0),
            Command::Verify(args) => verify_registry(&cli, args).await.map(|_| 0),
            Command::Pin(args) => pin(&cli, args).await.map(|_| 0),
            Command::Upstream(UpstreamCommand::Check(args)) => upstream_check(&cli, args),
            Command::Render(args) => render(args).map(|_| 0),
            Command::Minors(args) => minors(args).map(|_| 0),
            Command::Manifest(ManifestCommand::Merge(args)) => manifest_merge(&cli, args).map(|_| 0),
            Command::Patches(PatchesCommand::Verify(args)) => patches_verify(&cli, args).map(|_| 0),
            Command::Patches(PatchesCommand::Matrix(args)) => patches_matrix(&cli, args).map(|_| 0),
            Command::Accept(args) => accept(&cli, args).await.map(|_| 0),
        }
        };
        tokio::select! {
            r = command => r,
            _ = interrupt::interrupted() => Err(occm_forge::Error::Interrupted(interrupt::signal().unwrap_or(libc::SIGINT))),
        }
    });
    match result {
        Ok(code) => ExitCode::from(code),
        Err(e) => {
            print_error(&e);
            ExitCode::from(e.exit_code())
        }
    }
}
