//! [`Error`]: every failure of occm-forge with its exit status — the build's own variants, and
//! the failures of the commands above it as [`Failure`]s, which those commands define; so the
//! error type sits in the build layer without naming anything above it.

/// Any failure of occm-forge, by stage. `Display` is one line; [`Error::exit_code`] maps the
/// stage to the process exit status documented in docs/exit-codes.md.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// Invalid command-line use or a value that does not fit.
    #[error("{0}")]
    Usage(String),
    /// images.toml is invalid or lacks the minor.
    #[error(transparent)]
    Config(#[from] crate::config::ConfigError),
    /// Fetching or checking out upstream failed, or the tag moved.
    #[error("source: {0}")]
    Source(#[from] crate::pipeline::source::SourceError),
    /// A patch does not apply.
    #[error("patches: {0}")]
    Patch(#[from] crate::pipeline::patches::PatchError),
    /// images.toml `go_overrides` cannot be applied (the message starts with `go_overrides:`
    /// and names the module and version).
    #[error("overrides: {0}")]
    Overrides(#[from] crate::pipeline::go::overrides::OverrideError),
    /// Go tests failed or required tests did not pass.
    #[error("test: {0}")]
    Test(#[from] crate::pipeline::go::test::TestError),
    /// Cross-compiling failed.
    #[error("build: {0}")]
    Build(#[from] crate::pipeline::go::build::BuildError),
    /// The layout could not be written, or the base does not fit (a missing platform, mixed
    /// media types).
    #[error("image: {0}")]
    Image(#[from] crate::image::ImageError),
    /// The base could not be pulled or did not verify against its digest.
    #[error("image: {0}")]
    Base(#[from] crate::registry::pull::PullError),
    /// The push failed, or (before the long stages) asking what the tag serves now did (the
    /// message names the registry and the operation).
    #[error("publish: {0}")]
    Publish(#[source] crate::registry::RegistryError),
    /// The inputs stage could not ask the registry whether the tag still serves the recorded
    /// digest (the no-op check with `--push`).
    #[error("inputs: {0}")]
    Inputs(#[source] crate::registry::RegistryError),
    /// The registry refused or could not be reached outside a push (the message names it).
    #[error(transparent)]
    Registry(#[from] crate::registry::RegistryError),
    /// The digest manifest could not be read or written, or a tag would be reused (its message
    /// starts with `digest manifest <path>` or names the fragments; it is not always the record
    /// stage: the tag guard and the run lock come first).
    #[error(transparent)]
    DigestManifest(#[from] crate::digest_manifest::DigestManifestError),
    /// SIGINT or SIGTERM stopped the run; nothing was recorded.
    #[error("interrupted by signal {0}: stopped, nothing recorded, no tag moved")]
    Interrupted(i32),
    /// Prerequisites the requested stages need are missing (Go or its toolchain, an
    /// executable cache, room on disk, the registry's push rights, acceptance's tools), all
    /// named in one line; the exit status of the first
    /// ([`crate::pipeline::preflight::PreflightError`]).
    #[error("preflight: {0}")]
    Preflight(#[from] crate::pipeline::preflight::PreflightError),
    /// A local file-system failure outside the stages.
    #[error("{0}")]
    Io(String),
    /// `accept`: a scenario failed on ours, the minor could not be verified, or the acceptance
    /// run itself failed (the message names the part).
    #[error("accept: {0}")]
    Accept(#[from] crate::pipeline::acceptance::error::AcceptError),
    /// `--sign-key` cannot be read or opened (wrong password, not a P-256 key), or signing
    /// failed; one line naming the key file, never the password.
    #[error(transparent)]
    Sign(#[from] crate::signing::SignError),
    /// A command's own failure above the build (render, copy, clusters, verify, prove,
    /// `patches edit`/`export`, self-image, record-signatures): one line, with its exit status
    /// ([`Failure`]).
    #[error("{}", command_line(.0.as_ref()))]
    Command(Box<dyn Failure>),
}

impl Error {
    /// Exit status: 2 usage/config, 3 source, 4 patches (also a series that needs go.mod/go.sum
    /// changes it does not carry), 5 tests, 6 build (and a Go toolchain that cannot be had),
    /// 7 image, 8 registry, 9 digest manifest, 10 registry does not match the digest manifest
    /// (`verify`; `manifest record-signatures` finds no signature by the signer), 11 copy found the target holding other bytes, 12 acceptance failed or not
    /// verified (`accept`, `build --accept`), 14 a cluster not running the pinned image of its
    /// minor (`clusters`), 15 the management cluster cannot be read (`clusters`), 16 a
    /// prerequisite missing from this machine (a tool `--accept` needs, a `noexec` or full cache,
    /// a full `--output`; `doctor`), 1 anything else.
    pub fn exit_code(&self) -> u8 {
        match self {
            Error::Usage(_) | Error::Config(_) | Error::Sign(_) => 2,
            Error::Source(_) => 3,
            Error::Patch(_) | Error::Overrides(_) => 4,
            Error::Test(crate::pipeline::go::test::TestError::Toolchain { .. }) => 6,
            Error::Test(crate::pipeline::go::test::TestError::ModuleGraph { .. }) => 4,
            Error::Test(crate::pipeline::go::test::TestError::CannotRun { .. }) => 16,
            Error::Test(_) => 5,
            Error::Build(e) if e.full => 16,
            Error::Build(_) => 6,
            Error::Image(_) | Error::Base(_) => 7,
            Error::Publish(_) | Error::Inputs(_) | Error::Registry(_) => 8,
            Error::DigestManifest(_) => 9,
            Error::Interrupted(sig) => (128 + sig).clamp(0, 255) as u8,
            Error::Io(_) => 1,
            Error::Preflight(e) => e.exit_code(),
            Error::Accept(_) => 12,
            Error::Command(f) => f.exit_code(),
        }
    }
}

/// A failure of a command above the build (its own error type, defined beside the command), as
/// [`Error::Command`] carries it.
pub trait Failure: std::error::Error + Send + Sync + 'static {
    /// Its process exit status (the table in docs/exit-codes.md).
    fn exit_code(&self) -> u8;

    /// What its one line starts with (`patches`), when its own `Display` does not say it.
    fn context(&self) -> Option<&'static str> {
        None
    }
}

/// `f`'s one line, after its [`Failure::context`].
fn command_line(f: &dyn Failure) -> String {
    match f.context() {
        Some(c) => format!("{c}: {f}"),
        None => f.to_string(),
    }
}

impl Error {
    /// `f` as an [`Error`].
    pub fn command(f: impl Failure) -> Self {
        Error::Command(Box::new(f))
    }

    /// The command failure of type `T` this error is, if it is one.
    pub fn failure<T: Failure>(&self) -> Option<&T> {
        match self {
            Error::Command(f) => (f.as_ref() as &dyn std::error::Error).downcast_ref::<T>(),
            _ => None,
        }
    }
}

/// `impl From<$t> for Error` through [`Error::command`], for each command failure type.
#[macro_export]
macro_rules! command_failure {
    ($($t:ty),* $(,)?) => {
        $(impl From<$t> for $crate::pipeline::Error {
            fn from(e: $t) -> Self {
                $crate::pipeline::Error::command(e)
            }
        })*
    };
}
