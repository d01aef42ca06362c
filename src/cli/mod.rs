//! The command line: argument types (what the user typed, nothing derived) and the dispatch to
//! one small file per command. Each command resolves its inputs through `occm_forge_core::pipeline::plan`,
//! calls one library entry, and prints through [`output`].

mod accept;
mod build;
mod clusters;
mod completions;
mod copy;
mod docs;
mod doctor;
mod examples;
mod manifest;
mod minors;
mod output;
mod patches;
mod pin;
mod render;
mod self_image;
mod upstream;
mod verify;

use std::path::PathBuf;

use clap::{Args, CommandFactory, FromArgMatches, Parser, Subcommand};
use occm_forge_core::config::{self, Config, Minor};
use occm_forge_core::pipeline::Error;
use occm_forge_core::pipeline::plan::{Environment, RegistryOverrides};

pub use output::{LogLines, print_error};

#[derive(Parser)]
#[command(
    name = "occm-forge",
    version,
    about = "Patched, tested, digest-pinned OCCM images, one per Kubernetes minor"
)]
pub struct Cli {
    /// Cache directory (git objects, Go module and build caches, base blobs) [env: OCCM_FORGE_CACHE].
    #[arg(long, global = true, value_name = "DIR")]
    cache_dir: Option<PathBuf>,
    /// More log output on stderr (-v debug, -vv trace).
    #[arg(short, long, global = true, action = clap::ArgAction::Count)]
    pub verbose: u8,
    /// Only errors on stderr.
    #[arg(short, long, global = true, conflicts_with = "verbose")]
    pub quiet: bool,
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Build one Kubernetes minor: source → patches → test → build → image → publish → record.
    Build(build::BuildArgs),
    /// Check in seconds what `build` needs on this machine (Go and the pinned toolchains, the
    /// cache, room on disk; with --push the registry's push rights, with --accept acceptance's
    /// tools) and print it as a table, each missing one with its fix. Exit status of the first
    /// missing one (16 for a missing tool), 0 when nothing is missing.
    Doctor(doctor::DoctorArgs),
    /// Check that the registry serves what the digest manifest records (and, with --rebuild, that
    /// the pins rebuild to the same digest).
    Verify(verify::AuditArgs),
    /// Rewrite images.toml keeping its comments: move a minor to an upstream tag (commit, Go
    /// version and go-runner base from that tag), add a minor, and pin base images by digest.
    Pin(pin::PinArgs),
    /// Upstream release tags against the pins.
    #[command(subcommand)]
    Upstream(upstream::UpstreamCommand),
    /// Render the digest manifest for Magnum, Helm or Atmosphere, or rewrite a running cluster's
    /// ClusterResourceSet Secret (crs-secret, stdin to stdout).
    Render(render::RenderArgs),
    /// Copy a minor's published image (index, manifests, blobs, SBOM and provenance referrers) to
    /// another repository with every digest unchanged, check it there and record it as a mirror.
    Copy(copy::CopyArgs),
    /// The Kubernetes minors images.toml tracks, as a JSON array (for CI matrices).
    Minors(minors::MinorsArgs),
    /// Digest-manifest maintenance.
    #[command(subcommand)]
    Manifest(manifest::ManifestCommand),
    /// Patch series checks on the real upstream tree.
    #[command(subcommand)]
    Patches(patches::PatchesCommand),
    /// Acceptance in a simulated cloud: the image's binary and the unpatched upstream build of
    /// the same tag against a real kube-apiserver and a simulated OpenStack. Exit status 12 when
    /// a minor is not accepted.
    Accept(accept::AcceptArgs),
    /// Which magnum-cluster-api clusters run which OCCM, read from the Cluster API management
    /// cluster; --fix rewrites the Secrets of those not running the pinned image of their minor,
    /// --watch keeps doing it. Exit status 14 when a cluster is not pinned.
    Clusters(clusters::ClustersArgs),
    /// Package this occm-forge (statically linked) as an OCI image for deploy/clusters/: an OCI
    /// layout, pushed with --push.
    SelfImage(self_image::SelfImageArgs),
    /// Print the shell completion script for bash, zsh, fish, elvish or powershell to stdout.
    Completions(completions::CompletionsArgs),
    /// Write the man pages (DIR/man) and the Markdown command-line reference
    /// (DIR/reference/cli.md) from these definitions.
    #[command(hide = true)]
    GenerateDocs(docs::GenerateDocsArgs),
    /// Only parse the command line after `--` (exit 0, or 2 with the parse error); run nothing.
    #[command(name = "__parse-check", hide = true)]
    ParseCheck(docs::ParseCheckArgs),
}

/// The whole command line: the derive definitions of [`Cli`] with each command's examples
/// ([`examples`]) as its after-help. What `--help`, completions and generated docs show.
pub fn command() -> clap::Command {
    examples::attach(Cli::command())
}

/// The process's arguments parsed by [`command`]; a usage error (or `--help`, `--version`)
/// is printed and the process exits as clap does.
pub fn parse() -> Cli {
    let mut cmd = command();
    let matches = cmd.get_matches_mut();
    Cli::from_arg_matches(&matches).unwrap_or_else(|e| e.format(&mut cmd).exit())
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
    /// A registry request that makes no progress for this many seconds fails and is retried
    /// (connecting, waiting for an answer, each piece of an upload or download).
    #[arg(long, env = "OCCM_FORGE_REGISTRY_TIMEOUT", default_value_t = 30, value_name = "SECONDS",
          value_parser = clap::value_parser!(u64).range(1..))]
    registry_timeout: u64,
    /// No retry of a registry operation starts when it would end after this many seconds from
    /// its first attempt.
    #[arg(long, env = "OCCM_FORGE_REGISTRY_OPERATION_TIMEOUT", default_value_t = 120,
          value_name = "SECONDS", value_parser = clap::value_parser!(u64).range(1..))]
    registry_operation_timeout: u64,
}

impl RegistryArgs {
    fn overrides(&self) -> RegistryOverrides {
        RegistryOverrides {
            insecure: self.insecure_registry.clone(),
            ca_files: self.ca_file.clone(),
            auth_file: self.registry_config.clone(),
            retries: self.retries,
            idle_timeout: std::time::Duration::from_secs(self.registry_timeout),
            operation_timeout: std::time::Duration::from_secs(self.registry_operation_timeout),
        }
    }
}

/// Where a build's image goes, for `build` and for `doctor`, which checks what `build` would
/// need: `--push`, `--repository` and how registries are reached.
#[derive(Args)]
struct PushArgs {
    /// Push to the registry and verify the tag (`doctor`: check that the registry answers and
    /// the credentials may push).
    #[arg(long)]
    push: bool,
    /// Target repository instead of images.toml `repository` (registry/path, no tag).
    #[arg(long, value_name = "REPO")]
    repository: Option<String>,
    #[command(flatten)]
    registry: RegistryArgs,
}

/// Which minors a command works on: `--k8s` (repeatable) or `--all`.
#[derive(Args)]
#[group(required = true, multiple = false)]
struct MinorSelection {
    /// Kubernetes minor, e.g. 1.34; repeat it for several in one run.
    #[arg(long = "k8s", value_name = "MINOR")]
    k8s: Vec<Minor>,
    /// Every minor of images.toml, one after another.
    #[arg(long)]
    all: bool,
}

impl MinorSelection {
    /// The minors asked for, each once, in the order given (`--all`: images.toml's order).
    fn minors(&self, config: &Config) -> Vec<Minor> {
        let asked: Vec<Minor> = if self.all {
            config.minors.keys().copied().collect()
        } else {
            self.k8s.clone()
        };
        let mut minors: Vec<Minor> = Vec::new();
        for m in asked {
            if !minors.contains(&m) {
                minors.push(m);
            }
        }
        minors
    }
}

/// `--config FILE`: the images.toml a command reads, declared once for every command.
#[derive(Args, Clone)]
struct ConfigArg {
    /// images.toml to read.
    #[arg(
        id = "config",
        long = "config",
        default_value = "images.toml",
        value_name = "FILE"
    )]
    path: PathBuf,
}

impl ConfigArg {
    /// images.toml, read as every command reads it ([`load_config`]).
    fn load(&self) -> Result<Config, Error> {
        load_config(&self.path)
    }
}

/// Where the inputs come from.
#[derive(Args)]
struct Inputs {
    #[command(flatten)]
    config: ConfigArg,
    /// Fetch upstream from this URL or local path/mirror instead of images.toml `upstream`.
    #[arg(long, value_name = "URL|PATH")]
    source: Option<String>,
}

impl Inputs {
    fn load(&self) -> Result<Config, Error> {
        self.config.load()
    }
}

/// An output file given by `flag` (written at the end, atomically) must not be one of the
/// project's own files, which it would replace: images.toml, the digest manifest, a manifest
/// fragment (`fragment`), a file in the patches directory. Its directory must exist. Both are
/// refused before anything runs (exit 2).
pub(crate) fn check_output_path(
    flag: &str,
    path: &std::path::Path,
    config: &Config,
    fragment: Option<&std::path::Path>,
) -> Result<(), Error> {
    let canonical = |p: &std::path::Path| std::fs::canonicalize(p).ok();
    let mut taken = vec![config.path.clone(), config.digest_manifest.clone()];
    taken.extend(fragment.map(std::path::Path::to_path_buf));
    let given = canonical(path);
    if let Some(t) = taken
        .iter()
        .find(|t| given.is_some() && canonical(t) == given)
    {
        return Err(Error::Usage(format!(
            "{flag} {}: that is {}; give another file",
            path.display(),
            t.display()
        )));
    }
    let dir = match path.parent() {
        Some(d) if !d.as_os_str().is_empty() => d,
        _ => std::path::Path::new("."),
    };
    if !dir.is_dir() {
        return Err(Error::Usage(format!(
            "{flag} {}: {} is not a directory",
            path.display(),
            dir.display()
        )));
    }
    if canonical(dir).is_some() && canonical(dir) == canonical(&config.patches_dir) {
        return Err(Error::Usage(format!(
            "{flag} {}: that is in the patches directory {}; give a file elsewhere",
            path.display(),
            config.patches_dir.display()
        )));
    }
    Ok(())
}

/// images.toml at `path`, checked ([`config::load`]) and its `shown_by` names held against the
/// scenarios the acceptance runs: how every command reads it.
pub(crate) fn load_config(path: &std::path::Path) -> Result<Config, Error> {
    use occm_forge_core::pipeline::acceptance::Acceptance as _;
    let config = config::load(path)?;
    config.check_shown_by(&occm_forge_accept::simulation::Simulation.scenarios())?;
    Ok(config)
}

impl Cli {
    /// The cache directory after the environment (`occm_forge_core::pipeline::plan::Environment::cache_dir`).
    fn cache_dir(&self) -> PathBuf {
        Environment::current().cache_dir(self.cache_dir.as_deref())
    }
}

/// Runs the command; the exit status on success (0, or 11/13 for `upstream check` with news or a
/// moved tag).
pub async fn run(cli: &Cli) -> Result<u8, Error> {
    match &cli.command {
        Command::Build(args) => build::run(cli, args).await,
        Command::Doctor(args) => doctor::run(cli, args).await,
        Command::Verify(args) => verify::run(cli, args).await,
        Command::Pin(args) => pin::run(cli, args).await,
        Command::Upstream(cmd) => upstream::run(cli, cmd),
        Command::Render(args) => render::run(args, cli.quiet),
        Command::Copy(args) => copy::run(cli, args).await,
        Command::Minors(args) => minors::run(args),
        Command::Manifest(cmd) => manifest::run(cli, cmd).await,
        Command::Patches(cmd) => patches::run(cli, cmd).await,
        Command::Accept(args) => accept::run(cli, args).await,
        Command::Clusters(args) => clusters::run(args, cli.quiet).await,
        Command::SelfImage(args) => self_image::run(args, cli.quiet).await,
        Command::Completions(args) => completions::run(args),
        Command::GenerateDocs(args) => docs::generate(args),
        Command::ParseCheck(args) => docs::parse_check(args),
    }
}
