//! [`AcceptError`]: why acceptance failed, one line naming the part.

/// Acceptance failures. `Display` is one line naming the part.
#[derive(Debug, thiserror::Error)]
pub enum AcceptError {
    /// The minor cannot be tested here (e.g. the Go module proxy refuses a module): never a pass.
    #[error("NOT VERIFIED: {0}")]
    NotVerified(String),
    /// The OCI layout does not hold the image to accept (no `index.json`, no entry with the tag,
    /// a blob missing or not matching its digest): build it there first. Its own variant because
    /// callers act on it (the report says NOT VERIFIED, the error gives the build command).
    #[error("layout {}: {message}", layout.display())]
    Layout {
        /// The OCI layout directory.
        layout: std::path::PathBuf,
        /// Why.
        message: String,
    },
    /// Bad input: the image, its binary, go.mod, the host.
    #[error("{part}: {message}")]
    Input {
        /// What is wrong (`image v1.34.1-occmforge.1`, `go.mod`, `control`, `host`).
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
