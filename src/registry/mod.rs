//! The registry side, behind a small trait (like ko's `publish.Interface`): the pipeline only
//! ever talks to [`Registry`], so a fault-injecting stand-in or another client can replace the
//! [`oci::OciRegistry`] implementation.
//!
//! Requests follow the OCI distribution-spec v1.1: blobs by digest
//! (`HEAD|GET /v2/<name>/blobs/<digest>`, `POST`+`PUT` uploads), manifests by tag or digest
//! (`HEAD|GET|PUT /v2/<name>/manifests/<reference>`).

pub mod auth;
mod explain;
pub mod oci;
pub mod proxy;
pub mod publish;
pub mod retry;
mod upload;

use std::fmt;
use std::str::FromStr;

use async_trait::async_trait;
use bytes::Bytes;

/// A repository in a registry, e.g. `127.0.0.1:5000` + `occm/openstack-cloud-controller-manager`.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct RepositoryName {
    /// `host[:port]`; Docker Hub is `docker.io`.
    pub registry: String,
    /// Path inside the registry, e.g. `occm/openstack-cloud-controller-manager`.
    pub path: String,
}

impl FromStr for RepositoryName {
    type Err = String;

    /// Parses `registry/path` the way docker does: the first component is a registry when it has
    /// a `.` or `:` or is `localhost`; otherwise the registry is `docker.io` (with `library/` for
    /// single-component names).
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        if s.is_empty() || s.contains(['@', ' ']) {
            return Err(format!("`{s}` is not a repository name"));
        }
        if s.contains("://") {
            return Err(format!(
                "`{s}`: give registry/path without a scheme (http:// or https://)"
            ));
        }
        if s.rsplit('/').next().is_some_and(|last| last.contains(':')) && s.contains('/') {
            return Err(format!(
                "`{s}`: a repository carries no tag; the tag comes from images.toml `tag`"
            ));
        }
        let (registry, path) = match s.split_once('/') {
            Some((first, rest)) if first.contains(['.', ':']) || first == "localhost" => {
                (first.to_string(), rest.to_string())
            }
            Some(_) => ("docker.io".to_string(), s.to_string()),
            None => ("docker.io".to_string(), format!("library/{s}")),
        };
        let valid = path.split('/').all(|c| {
            !c.is_empty()
                && c.bytes().all(|b| {
                    b.is_ascii_lowercase() || b.is_ascii_digit() || matches!(b, b'.' | b'_' | b'-')
                })
        });
        if !valid {
            return Err(format!(
                "`{s}`: repository path `{path}` must be lowercase [a-z0-9._-] components"
            ));
        }
        Ok(RepositoryName { registry, path })
    }
}

impl fmt::Display for RepositoryName {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/{}", self.registry, self.path)
    }
}

/// An image reference `repository[:tag][@sha256:<hex>]`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ImageRef {
    /// The repository.
    pub repository: RepositoryName,
    /// The tag, if any.
    pub tag: Option<String>,
    /// The digest, if any.
    pub digest: Option<String>,
}

impl FromStr for ImageRef {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let (rest, digest) = match s.split_once('@') {
            Some((r, d)) => {
                if !crate::config::is_sha256_digest(d) {
                    return Err(format!("`{s}`: digest `{d}` is not sha256:<64 hex>"));
                }
                (r, Some(d.to_string()))
            }
            None => (s, None),
        };
        let last_slash = rest.rfind('/').map_or(0, |i| i + 1);
        let (name, tag) = match rest[last_slash..].rfind(':') {
            Some(i) => (
                &rest[..last_slash + i],
                Some(rest[last_slash + i + 1..].to_string()),
            ),
            None => (rest, None),
        };
        if let Some(t) = &tag
            && !crate::config::is_valid_tag(t)
        {
            return Err(format!("`{s}`: `{t}` is not a valid tag"));
        }
        Ok(ImageRef {
            repository: name.parse()?,
            tag,
            digest,
        })
    }
}

impl fmt::Display for ImageRef {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.repository)?;
        if let Some(t) = &self.tag {
            write!(f, ":{t}")?;
        }
        if let Some(d) = &self.digest {
            write!(f, "@{d}")?;
        }
        Ok(())
    }
}

/// What kind of failure a registry call had; wrappers (retry) decide on it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ErrorKind {
    /// Connection refused/reset, timeout, 5xx, 408, 429: worth retrying.
    Transient,
    /// 401/403: credentials are missing or wrong.
    Auth,
    /// 404 / *_UNKNOWN.
    NotFound,
    /// Anything else (invalid manifest, digest mismatch, TLS failure…).
    Other,
}

/// A registry failure: one line naming the registry and the operation.
#[derive(Debug, Clone, thiserror::Error)]
#[error("registry {registry}: {operation}: {message}")]
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

/// The operations occm-forge needs from a registry. References are tags or `sha256:` digests.
#[async_trait]
pub trait Registry: Send + Sync {
    /// `HEAD /v2/<name>/blobs/<digest>`: whether the blob is present.
    async fn blob_exists(&self, repo: &RepositoryName, digest: &str)
    -> Result<bool, RegistryError>;
    /// Uploads a blob (`POST` then `PUT ?digest=`). The registry verifies the digest.
    async fn push_blob(
        &self,
        repo: &RepositoryName,
        digest: &str,
        data: Bytes,
    ) -> Result<(), RegistryError>;
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
}

/// `sha256:<hex>` of `bytes`.
pub fn sha256_digest(bytes: &[u8]) -> String {
    use sha2::Digest as _;
    format!("sha256:{}", hex::encode(sha2::Sha256::digest(bytes)))
}

/// A short form of a digest for messages: `sha256:` plus 12 hex characters.
pub fn short(digest: &str) -> &str {
    if digest.starts_with("sha256:") {
        &digest[..digest.len().min(19)]
    } else {
        // A tag or other reference stays whole.
        digest
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_references() {
        let r: ImageRef = "127.0.0.1:5000/occm/occm:v1.34.1-occmforge.1"
            .parse()
            .unwrap();
        assert_eq!(r.repository.registry, "127.0.0.1:5000");
        assert_eq!(r.repository.path, "occm/occm");
        assert_eq!(r.tag.as_deref(), Some("v1.34.1-occmforge.1"));
        let d = format!("sha256:{}", "a".repeat(64));
        let r: ImageRef =
            format!("registry.k8s.io/build-image/go-runner:v2.4.0-go1.25.1-bookworm.0@{d}")
                .parse()
                .unwrap();
        assert_eq!(
            r.repository.to_string(),
            "registry.k8s.io/build-image/go-runner"
        );
        assert_eq!(r.digest.as_deref(), Some(d.as_str()));
        let r: ImageRef = "alpine".parse().unwrap();
        assert_eq!(r.repository.to_string(), "docker.io/library/alpine");
        assert!("Registry.example/UPPER".parse::<ImageRef>().is_err());
        assert!("x@sha256:12".parse::<ImageRef>().is_err());
    }
}
