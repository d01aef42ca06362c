//! The seam between a build and acceptance (the shape of ko's `publish.Interface` handed to its
//! builder): `build --accept` runs the [`Acceptance`] the command layer passes to
//! [`crate::build::pipeline::build`], and the core knows nothing else of it. The occm-forge binary
//! passes crates/accept's, which runs the image's binary and the unpatched control against a real
//! kube-apiserver (and Cluster API's manager) and a simulated OpenStack; a test may pass a
//! stand-in.

use async_trait::async_trait;

use crate::Error;
use crate::build::plan::BuildPlan;
use crate::build::stage::Reporter;

/// Acceptance failures. `Display` is one line naming the part.
#[derive(Debug, thiserror::Error)]
pub enum AcceptError {
    /// The minor cannot be tested here (e.g. the Go module proxy refuses a module): never a pass.
    #[error("NOT VERIFIED: {0}")]
    NotVerified(String),
    /// Bad input: the layout, the image, its binary, go.mod, the host.
    #[error("{part}: {message}")]
    Input {
        /// What is wrong (`layout out`, `image v1.34.1-occmforge.1`, `go.mod`, `control`).
        part: String,
        /// Why.
        message: String,
    },
    /// Building etcd, kube-apiserver or the control failed.
    #[error("building {part}: {message}")]
    Build {
        /// What was built.
        part: String,
        /// The tail of the compiler output.
        message: String,
    },
    /// etcd or kube-apiserver did not start, did not get ready, crashed, or refused a request.
    #[error("{part}: {message}")]
    ControlPlane {
        /// `etcd` or `kube-apiserver`.
        part: String,
        /// Why, with the last error line of its log.
        message: String,
    },
    /// An OCCM process could not be started.
    #[error("openstack-cloud-controller-manager {name}: {message}")]
    Occm {
        /// Which replica.
        name: String,
        /// Why.
        message: String,
    },
    /// Ours failed scenarios (the table says which and why).
    #[error("not accepted: {0}")]
    Failed(String),
    /// A local file-system failure.
    #[error("{0}")]
    Io(String),
    /// SIGINT or SIGTERM arrived.
    #[error("interrupted")]
    Interrupted,
}

impl From<crate::kubernetes::KubeError> for AcceptError {
    fn from(e: crate::kubernetes::KubeError) -> Self {
        AcceptError::ControlPlane {
            part: "kube-apiserver".into(),
            message: e.to_string(),
        }
    }
}

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

    /// Accepts the image `plan` built into its layout (`plan.output`), reporting its parts
    /// through `reporter`; with `plan.accept_output`, writes its report into that acceptance
    /// document first, accepted or not.
    ///
    /// Errors: [`Error::Accept`] when ours fails a scenario ([`AcceptError::Failed`]), the minor
    /// cannot be verified here ([`AcceptError::NotVerified`]) or a part fails;
    /// [`Error::Interrupted`] after SIGINT/SIGTERM.
    async fn accept(&self, plan: &BuildPlan, reporter: &dyn Reporter) -> Result<Accepted, Error>;
}
