//! occm-forge: turns an upstream release of kubernetes/cloud-provider-openstack into a patched,
//! tested, published and digest-pinned openstack-cloud-controller-manager (OCCM) image, one per
//! Kubernetes minor.
//!
//! Stages, one module each, data flowing one way: [`config`] → [`source`] → [`patches`] →
//! [`go`] (test, build) → [`image`] → [`registry`] (publish) → [`lockfile`]. [`pipeline`]
//! sequences them; the binary only parses arguments and wires. [`accept`] runs a built image's
//! binary against a real kube-apiserver and a simulated OpenStack.

#![warn(missing_docs)]

pub mod accept;
pub mod audit;
pub mod config;
pub mod describe;
pub mod go;
pub mod image;
pub mod interrupt;
pub mod lockfile;
pub mod patches;
pub mod pin;
pub mod pipeline;
pub mod progress;
pub mod redgreen;
pub mod registry;
pub mod render;
pub mod source;
pub mod upstream;

/// Any failure of occm-forge, by stage. `Display` is one line; [`Error::exit_code`] maps the
/// stage to the process exit status documented in README.md.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// Invalid command-line use or a value that does not fit.
    #[error("{0}")]
    Usage(String),
    /// images.toml is invalid or lacks the minor.
    #[error(transparent)]
    Config(#[from] config::ConfigError),
    /// Fetching or checking out upstream failed, or the tag moved.
    #[error("source: {0}")]
    Source(#[from] source::SourceError),
    /// A patch does not apply.
    #[error("patches: {0}")]
    Patch(#[from] patches::PatchError),
    /// Go tests failed or required tests did not pass.
    #[error("test: {0}")]
    Test(#[from] go::test::TestError),
    /// Cross-compiling failed.
    #[error("build: {0}")]
    Build(#[from] go::build::BuildError),
    /// The base image or the layout failed.
    #[error("image: {0}")]
    Image(#[from] image::ImageError),
    /// The registry refused or could not be reached (the message names the registry).
    #[error(transparent)]
    Registry(#[from] registry::RegistryError),
    /// The digest manifest could not be read or written, or a tag would be reused.
    #[error("record: {0}")]
    Lock(#[from] lockfile::LockError),
    /// `patches verify`: a fix patch is not guarded, or a guard fails with the fix.
    #[error("verify: {0}")]
    Verify(String),
    /// `verify`: the registry does not serve what the digest manifest records.
    #[error("verify: {0}")]
    Mismatch(String),
    /// SIGINT or SIGTERM stopped the run; nothing was recorded.
    #[error("interrupted by signal {0}: stopped, nothing recorded, no tag moved")]
    Interrupted(i32),
    /// `render` cannot render an entry.
    #[error(transparent)]
    Render(#[from] render::RenderError),
    /// A local file-system failure outside the stages.
    #[error("{0}")]
    Io(String),
    /// `accept`: a scenario failed on ours, the minor could not be verified, or the acceptance
    /// run itself failed (the message names the part).
    #[error("accept: {0}")]
    Accept(#[from] accept::AcceptError),
}

impl Error {
    /// Exit status: 2 usage/config, 3 source, 4 patches, 5 tests, 6 build, 7 image, 8 registry,
    /// 9 digest manifest, 10 registry does not match the digest manifest (`verify`), 12 acceptance
    /// failed or not verified (`accept`), 1 anything else.
    pub fn exit_code(&self) -> u8 {
        match self {
            Error::Usage(_) | Error::Config(_) | Error::Render(_) => 2,
            Error::Source(_) => 3,
            Error::Patch(_) => 4,
            Error::Test(_) | Error::Verify(_) => 5,
            Error::Build(_) => 6,
            Error::Image(_) => 7,
            Error::Registry(_) => 8,
            Error::Lock(_) => 9,
            Error::Mismatch(_) => 10,
            Error::Interrupted(sig) => (128 + sig).clamp(0, 255) as u8,
            Error::Io(_) => 1,
            Error::Accept(_) => 12,
        }
    }
}
