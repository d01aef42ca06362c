//! Image references: `registry/path[:tag][@sha256:<hex>]`, parsed the way docker parses them
//! (distribution/reference `normalize.go`: a first component with `.` or `:` or `localhost` is
//! the registry, otherwise `docker.io`, with `library/` for single names).

use std::fmt;
use std::str::FromStr;

use crate::base::util::{is_sha256_digest, is_valid_tag};

/// Whether `s` names its registry: its first component (before the first `/`) contains `.` or
/// `:` or is `localhost` (distribution/reference `normalize.go`). `occm/x` does not: Docker
/// tools read it as `docker.io/occm/x`.
pub fn names_registry(s: &str) -> bool {
    s.split_once('/')
        .is_some_and(|(first, _)| first.contains(['.', ':']) || first == "localhost")
}

/// `Ok` when `repository` (a push target) names its registry ([`names_registry`]); else the
/// message `` repository `occm/x` names no registry host; write it in full (docker.io/occm/x for
/// Docker Hub) ``. A push target is never guessed to be Docker Hub.
pub fn require_registry(repository: &str) -> Result<(), String> {
    if names_registry(repository) {
        return Ok(());
    }
    Err(format!(
        "repository `{repository}` names no registry host; write it in full (docker.io/{repository} for Docker Hub)"
    ))
}

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
                "`{s}`: a repository carries no tag; the tag comes from the tag scheme (images.toml `tag`)"
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
                if !is_sha256_digest(d) {
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
            && !is_valid_tag(t)
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
