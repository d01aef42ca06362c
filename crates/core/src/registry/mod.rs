//! The registry side, behind a small trait (like ko's `publish.Interface`): the pipeline only
//! ever talks to [`Registry`], so a fault-injecting stand-in or another client can replace the
//! [`oci::OciRegistry`] implementation.
//!
//! Requests follow the OCI distribution-spec v1.1: blobs by digest
//! (`HEAD|GET /v2/<name>/blobs/<digest>`, `POST`+`PUT` uploads, or `POST`+`PATCH`…+`PUT` chunked
//! ones), manifests by tag or digest (`HEAD|GET|PUT /v2/<name>/manifests/<reference>`).

pub mod auth;
pub(crate) mod explain;
#[cfg(any(test, feature = "testing"))]
pub mod memory;
pub mod oci;
pub mod proxy;
pub mod publish;
pub mod pull;
pub mod referrers;
pub mod retry;
pub mod transfer;
mod upload;

pub use upload::ChunkedUploads;

use async_trait::async_trait;

use crate::base::reference::RepositoryName;
use bytes::Bytes;

impl ErrorKind {
    /// Whether trying again may succeed ([`ErrorKind::Transient`], [`ErrorKind::RateLimited`]).
    pub fn is_transient(self) -> bool {
        matches!(self, ErrorKind::Transient | ErrorKind::RateLimited(_))
    }
}

/// `r` with a 404 (`*_UNKNOWN`, [`ErrorKind::NotFound`]) as `None`: for what may not be there
/// (a referrers index, a deleted referrer).
///
/// # Errors
/// Any other failure, as it is.
pub fn if_present<T>(r: Result<T, RegistryError>) -> Result<Option<T>, RegistryError> {
    match r {
        Ok(t) => Ok(Some(t)),
        Err(e) if e.kind == ErrorKind::NotFound => Ok(None),
        Err(e) => Err(e),
    }
}

/// What kind of failure a registry call had; wrappers (retry) decide on it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ErrorKind {
    /// Connection refused/reset, timeout, 5xx (but 507), 408, 429: worth retrying.
    Transient,
    /// The registry's host name does not exist (DNS answered `EAI_NONAME`): asking again gets
    /// the same answer, so it is not retried (`unreachable: cannot resolve the host name`).
    HostUnknown,
    /// 429 Too Many Requests where its `Retry-After` was read (RFC 9110 §10.2.3: seconds or an
    /// HTTP date), as the wait it names (`None` when it named none or could not be read): worth
    /// retrying, not before then (Docker Hub, Quay; containers/image#618).
    RateLimited(Option<std::time::Duration>),
    /// 401/403: credentials are missing or wrong.
    Auth,
    /// 404 / *_UNKNOWN.
    NotFound,
    /// The registry answered and refused what was sent (a 4xx other than 401/403/404/408/429:
    /// `MANIFEST_INVALID`, `MANIFEST_BLOB_UNKNOWN`, `DIGEST_INVALID`, `BLOB_UPLOAD_INVALID`,
    /// `UNSUPPORTED`, 413, 415…): sending the same again fails the same way, sending it in
    /// another form may not (a manifest without `subject`, a chunked upload).
    Refused,
    /// Anything else (a storage failure, TLS failure, a local error…).
    Other,
}

/// A registry failure: one line naming the registry and the operation,
/// `registry <host>: <operation>: <message>`, the message without the HTTP client's nested error
/// chain (`crate::base::client_error::without_client_chain`). A credential lookup's message
/// ([`auth::AuthError`], `credentials for <host> from <file>: …`) names the registry itself and
/// is the whole line.
#[derive(Debug, Clone)]
pub struct RegistryError {
    /// `host[:port]`.
    pub registry: String,
    /// What was being done, e.g. `push blob sha256:ab12…`.
    pub operation: String,
    /// The cause.
    pub message: String,
    /// Classification.
    pub kind: ErrorKind,
}

impl std::fmt::Display for RegistryError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let message = crate::base::client_error::without_client_chain(&self.message);
        if self.operation == auth::LOOK_UP_CREDENTIALS {
            return write!(f, "{message}");
        }
        write!(
            f,
            "registry {}: {}: {message}",
            self.registry, self.operation
        )
    }
}

impl std::error::Error for RegistryError {}

/// The operations occm-forge needs from a registry. References are tags or `sha256:` digests.
#[async_trait]
pub trait Registry: Send + Sync {
    /// `HEAD /v2/<name>/blobs/<digest>`: whether the blob is present.
    async fn blob_exists(&self, repo: &RepositoryName, digest: &str)
    -> Result<bool, RegistryError>;
    /// Uploads a blob (`POST` then `PUT ?digest=`, or in chunks: `POST`, `PATCH`es, `PUT
    /// ?digest=`). The registry verifies the digest.
    async fn push_blob(
        &self,
        repo: &RepositoryName,
        digest: &str,
        data: Bytes,
    ) -> Result<(), RegistryError>;
    /// Whether these credentials may push into `repo`, asked before any work is done and
    /// without writing anything: an upload started and cancelled (go-containerregistry's
    /// `remote.CheckPushPermission`).
    ///
    /// # Errors
    /// The registry refuses (401/403: [`ErrorKind::Auth`]) or cannot be reached.
    async fn check_push(&self, repo: &RepositoryName) -> Result<(), RegistryError>;
    /// Cross-repository mount (`POST /v2/<name>/blobs/uploads/?mount=<digest>&from=<from>`) on the
    /// same registry: true when the registry mounted the blob. Best effort: any failure is `false`
    /// and the caller uploads normally (ggcr#219, jib#833).
    async fn mount_blob(
        &self,
        _repo: &RepositoryName,
        _from: &RepositoryName,
        _digest: &str,
    ) -> bool {
        false
    }
    /// Downloads a blob and verifies it against `digest`.
    async fn pull_blob(&self, repo: &RepositoryName, digest: &str) -> Result<Bytes, RegistryError>;
    /// `PUT /v2/<name>/manifests/<reference>` with `Content-Type: media_type` and exactly `body`.
    async fn push_manifest(
        &self,
        repo: &RepositoryName,
        reference: &str,
        media_type: &str,
        body: Bytes,
    ) -> Result<(), RegistryError>;
    /// `GET /v2/<name>/manifests/<reference>` accepting OCI and Docker manifests and indexes;
    /// returns the exact bytes. When `reference` is a digest the bytes are verified against it.
    async fn pull_manifest(
        &self,
        repo: &RepositoryName,
        reference: &str,
    ) -> Result<Bytes, RegistryError>;
    /// `HEAD /v2/<name>/manifests/<reference>`: the digest the registry serves, `None` if absent.
    async fn manifest_digest(
        &self,
        repo: &RepositoryName,
        reference: &str,
    ) -> Result<Option<String>, RegistryError>;
    /// One page of the referrers of `subject` (a `sha256:` digest) in `repo`, as the registry
    /// lists them: `GET /v2/<name>/referrers/<digest>` (distribution-spec v1.1, "Listing
    /// Referrers"), or `next` (a previous page's [`referrers::ReferrersPage::next`]); where the
    /// registry has no referrers API (a 404, as distribution 2.8), the index at the referrers tag
    /// schema's `sha256-<hex>` tag ([`referrers::read_tag_schema`]); empty when neither lists any.
    /// Read referrers through [`referrers::list`], which follows the pages and corrects the
    /// listing.
    ///
    /// The default reads the tag schema alone (through [`Registry::pull_manifest`]).
    ///
    /// # Errors
    /// The registry cannot be asked.
    async fn referrers_page(
        &self,
        repo: &RepositoryName,
        subject: &str,
        _next: Option<&str>,
    ) -> Result<referrers::ReferrersPage, RegistryError> {
        referrers::tag_schema_page(self, repo, subject).await
    }
}
