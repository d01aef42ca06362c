//! occm-forge's core: turns an upstream release of kubernetes/cloud-provider-openstack into a
//! patched, tested, published and digest-pinned openstack-cloud-controller-manager (OCCM) image,
//! one per Kubernetes minor. A folder per layer, each importing only the ones before it (the
//! rules are docs/architecture.md's, checked by tests/architecture.rs):
//!
//! - [`base`]: digests, atomic writes, times, image references, signals, progress output.
//! - [`config`]: images.toml, validated with file:line:column.
//! - [`image`]: OCI types, deterministic layers, pure image composition, the OCI layout.
//! - [`kubernetes`]: the Kubernetes API for every command that talks to a cluster.
//! - [`registry`]: the `Registry` trait, its `oci-client` implementation, retries, credentials,
//!   referrers, base pulls and the push.
//! - [`signing`]: signing keys, statements and bundles; the signatures an image carries.
//! - [`build`]: the build — its stages' implementations ([`build::source`], [`build::patches`],
//!   [`build::go`], [`build::describe`], [`build::digest_manifest`]) beside the stage trait
//!   ([`build::stage`]), the stages ([`build::stages`]), the plan and the pipeline, and the seam
//!   acceptance plugs into ([`build::acceptance`]).
//! - [`consumers`]: what consumes the digest manifest — magnum-cluster-api's vocabulary
//!   ([`consumers::mcapi`]), under [`consumers::render`] and [`consumers::clusters`].
//! - [`commands`]: the commands built on them — [`commands::verify`], [`commands::prove`]
//!   (`patches prove`), [`commands::pin`], [`commands::upstream`], [`commands::copy`],
//!   [`commands::refresh`] (`patches edit`/`export`), [`commands::self_image`], and
//!   [`commands::report`] (the text every command prints); [`Error`], every failure with its
//!   exit code.
//!
//! The binary only parses arguments, calls one of these, and prints.

#![warn(missing_docs)]

pub mod base;
pub mod build;
pub mod commands;
pub mod config;
pub mod consumers;
pub mod image;
pub mod kubernetes;
pub mod registry;
pub mod signing;

#[cfg(test)]
mod testing;

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
    Source(#[from] build::source::SourceError),
    /// A patch does not apply.
    #[error("patches: {0}")]
    Patch(#[from] build::patches::PatchError),
    /// images.toml `go_overrides` cannot be applied (the message starts with `go_overrides:`
    /// and names the module and version).
    #[error("overrides: {0}")]
    Overrides(#[from] build::go::overrides::OverrideError),
    /// Go tests failed or required tests did not pass.
    #[error("test: {0}")]
    Test(#[from] build::go::test::TestError),
    /// Cross-compiling failed.
    #[error("build: {0}")]
    Build(#[from] build::go::build::BuildError),
    /// The layout could not be written, or the base does not fit (a missing platform, mixed
    /// media types).
    #[error("image: {0}")]
    Image(#[from] image::ImageError),
    /// The base could not be pulled or did not verify against its digest.
    #[error("image: {0}")]
    Base(#[from] registry::pull::PullError),
    /// The push failed, or (before the long stages) asking what the tag serves now did (the
    /// message names the registry and the operation).
    #[error("publish: {0}")]
    Publish(#[source] registry::RegistryError),
    /// The inputs stage could not ask the registry whether the tag still serves the recorded
    /// digest (the no-op check with `--push`).
    #[error("inputs: {0}")]
    Inputs(#[source] registry::RegistryError),
    /// The registry refused or could not be reached outside a push (the message names it).
    #[error(transparent)]
    Registry(#[from] registry::RegistryError),
    /// The digest manifest could not be read or written, or a tag would be reused (its message
    /// starts with `digest manifest <path>` or names the fragments; it is not always the record
    /// stage: the tag guard and the run lock come first).
    #[error(transparent)]
    DigestManifest(#[from] build::digest_manifest::DigestManifestError),
    /// `patches prove`: a fix patch is not guarded, or a guard fails with the fix.
    #[error("prove: {0}")]
    Proof(String),
    /// `verify`: the registry does not serve what the digest manifest records.
    #[error("verify: {0}")]
    Mismatch(String),
    /// SIGINT or SIGTERM stopped the run; nothing was recorded.
    #[error("interrupted by signal {0}: stopped, nothing recorded, no tag moved")]
    Interrupted(i32),
    /// `render` cannot render an entry.
    #[error(transparent)]
    Render(#[from] consumers::render::RenderError),
    /// `copy` failed: bad request, registry, digest manifest, or the copy does not verify.
    #[error(transparent)]
    Copy(#[from] commands::copy::CopyError),
    /// `render --format crs-secret` cannot rewrite the Secret.
    #[error(transparent)]
    Crs(#[from] consumers::render::crs_secret::CrsError),
    /// A local file-system failure outside the stages.
    #[error("{0}")]
    Io(String),
    /// `self-image`: the binary cannot be packaged (not a static ELF executable for the platform).
    #[error(transparent)]
    SelfImage(#[from] commands::self_image::SelfImageError),
    /// `clusters`: the management cluster could not be read or written.
    #[error(transparent)]
    Clusters(#[from] consumers::clusters::ClustersError),
    /// `clusters`: a cluster does not run the pinned image of its minor (the table on stdout says
    /// which and why), or `--fix` could not fix one.
    #[error("clusters: {0}")]
    NotPinned(String),
    /// `accept`: a scenario failed on ours, the minor could not be verified, or the acceptance
    /// run itself failed (the message names the part).
    #[error("accept: {0}")]
    Accept(#[from] build::acceptance::AcceptError),
    /// `--sign-key` cannot be read or opened (wrong password, not a P-256 key), or signing
    /// failed; one line naming the key file, never the password.
    #[error(transparent)]
    Sign(#[from] signing::SignError),
    /// `patches edit` / `patches export` refused or failed (one line naming the work tree, file
    /// or patch).
    #[error("patches: {0}")]
    Refresh(#[from] commands::refresh::RefreshError),
    /// `manifest record-signatures`: the registry holds no signature of the image by the signer.
    #[error("signatures: {0}")]
    NotSigned(String),
}

impl From<signing::signatures::FindError> for Error {
    fn from(e: signing::signatures::FindError) -> Self {
        match e {
            signing::signatures::FindError::Usage(m) => Error::Usage(m),
            signing::signatures::FindError::NotSigned(m) => Error::NotSigned(m),
            signing::signatures::FindError::Registry(e) => Error::Registry(e),
        }
    }
}

impl Error {
    /// Exit status: 2 usage/config, 3 source, 4 patches (also a series that needs go.mod/go.sum
    /// changes it does not carry), 5 tests, 6 build (and a Go toolchain that cannot be had),
    /// 7 image, 8 registry, 9 digest manifest, 10 registry does not match the digest manifest
    /// (`verify`; `manifest record-signatures` finds no signature by the signer), 11 copy found the target holding other bytes, 12 acceptance failed or not
    /// verified (`accept`, `build --accept`), 14 a cluster not running the pinned image of its
    /// minor (`clusters`), 15 the management cluster cannot be read (`clusters`), 1 anything
    /// else.
    pub fn exit_code(&self) -> u8 {
        match self {
            Error::Usage(_)
            | Error::Config(_)
            | Error::Render(_)
            | Error::Crs(_)
            | Error::SelfImage(_)
            | Error::Sign(_) => 2,
            Error::Copy(e) => e.exit_code(),
            Error::Source(_) => 3,
            Error::Patch(_) | Error::Overrides(_) => 4,
            Error::Test(build::go::test::TestError::Toolchain { .. }) => 6,
            Error::Test(build::go::test::TestError::ModuleGraph { .. }) => 4,
            Error::Test(_) | Error::Proof(_) => 5,
            Error::Build(_) => 6,
            Error::Image(_) | Error::Base(_) => 7,
            Error::Publish(_) | Error::Inputs(_) | Error::Registry(_) => 8,
            Error::DigestManifest(_) => 9,
            Error::Mismatch(_) | Error::NotSigned(_) => 10,
            Error::Interrupted(sig) => (128 + sig).clamp(0, 255) as u8,
            Error::Io(_) => 1,
            Error::Accept(_) => 12,
            Error::NotPinned(_) => 14,
            Error::Clusters(_) => 15,
            Error::Refresh(e) => e.exit_code(),
        }
    }
}
