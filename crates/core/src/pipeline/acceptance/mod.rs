//! The seam between a build and acceptance (the shape of ko's `publish.Interface` handed to its
//! builder): `build --accept` runs the [`Acceptance`] the command layer passes to
//! [`crate::pipeline::build`], and the core knows nothing else of it. The occm-forge binary
//! passes crates/accept's, which runs the image's binary and the unpatched control against a real
//! kube-apiserver (and Cluster API's manager) and a simulated OpenStack; a test may pass a
//! stand-in.

use async_trait::async_trait;

use crate::pipeline::Error;
use crate::pipeline::plan::BuildPlan;
use crate::pipeline::stage::Reporter;

pub mod error;

pub use error::AcceptError;

/// What an accepted image proved, as the build records it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Accepted {
    /// The scenarios ours passed, in order (`S1` … `S8`): the digest manifest entry's
    /// `accepted_scenarios`.
    pub scenarios: Vec<String>,
    /// The accept stage's line, e.g. `ours passes S1 … S8; the control fails S1 S2 S5 S7 S8`.
    pub summary: String,
}

/// Acceptance as a build sees it.
#[async_trait]
pub trait Acceptance: Send + Sync {
    /// The scenarios a run proves, by name, in order (`S1` … `S8`): what images.toml's
    /// `shown_by` may name, and what an entry recorded as accepted must list for `--accept` to
    /// find it up to date.
    fn scenarios(&self) -> Vec<String>;

    /// What accepting `plan`'s image will need from this machine (tools, binaries, the module
    /// proxy), checked in seconds by the build's preflight before any long stage, so that a
    /// missing one is said at once (all of them in one run) and not after the image is built.
    /// None by default.
    fn prerequisites(&self, _plan: &BuildPlan) -> Vec<crate::pipeline::preflight::Check> {
        Vec::new()
    }

    /// Accepts the image `plan` built into its layout (`plan.output`), reporting its parts
    /// through `reporter`; with `plan.accept_output`, writes its report into that acceptance
    /// document first, accepted or not.
    ///
    /// Errors: [`Error::Accept`] when ours fails a scenario ([`AcceptError::Failed`]), the minor
    /// cannot be verified here ([`AcceptError::NotVerified`]) or a part fails;
    /// [`Error::Interrupted`] after SIGINT/SIGTERM.
    async fn accept(&self, plan: &BuildPlan, reporter: &dyn Reporter) -> Result<Accepted, Error>;
}
