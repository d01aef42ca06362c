//! [`Registry`] over the `oci-client` crate.
//!
//! Manifests are pushed with `push_manifest_raw`, so the registry stores exactly the bytes whose
//! sha256 occm-forge records. Blobs use a monolithic upload (`POST` then one `PUT`), which is
//! what a retry can restart from scratch.

use async_trait::async_trait;
use bytes::Bytes;
use oci_client::client::{ClientConfig, ClientProtocol};
use oci_client::errors::{OciDistributionError, OciErrorCode};
use oci_client::secrets::RegistryAuth;
use oci_client::{Client, Reference};

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::Mutex;

use oci_client::client::{Certificate, CertificateEncoding};

use super::auth::AuthFiles;
use super::{ErrorKind, Registry, RegistryError};
use crate::image::spec::MANIFEST_MEDIA_TYPES;
use crate::reference::RepositoryName;
use crate::util::short;

/// Connection settings.
#[derive(Debug, Clone, Default)]
pub struct OciRegistryConfig {
    /// Registries (`host[:port]`) reached over plain HTTP; every other one uses HTTPS.
    pub insecure: Vec<String>,
    /// Extra CA certificates (PEM files) to trust besides the system and Mozilla roots.
    pub ca_files: Vec<PathBuf>,
    /// Where credentials are looked up.
    pub auth: AuthFiles,
}

/// The `oci-client` implementation of [`Registry`], with credentials from [`AuthFiles`] resolved
/// once per registry.
pub struct OciRegistry {
    client: Client,
    auth_files: AuthFiles,
    auths: Mutex<HashMap<String, RegistryAuth>>,
}

/// A failure to set the client up (an unreadable CA file).
#[derive(Debug, thiserror::Error)]
#[error("CA file {path}: {message}")]
pub struct SetupError {
    /// The CA file.
    pub path: PathBuf,
    /// The cause.
    pub message: String,
}

impl OciRegistry {
    /// A client for every registry: HTTPS (system roots plus `ca_files`) except for the
    /// registries in `insecure`, which get plain HTTP.
    pub fn new(config: &OciRegistryConfig) -> Result<Self, SetupError> {
        let protocol = if config.insecure.is_empty() {
            ClientProtocol::Https
        } else {
            ClientProtocol::HttpsExcept(config.insecure.clone())
        };
        let mut extra_root_certificates = Vec::new();
        for path in &config.ca_files {
            let data = std::fs::read(path).map_err(|e| SetupError {
                path: path.clone(),
                message: e.to_string(),
            })?;
            if !String::from_utf8_lossy(&data).contains("-----BEGIN CERTIFICATE-----") {
                return Err(SetupError {
                    path: path.clone(),
                    message: "no PEM certificate in it".into(),
                });
            }
            extra_root_certificates.push(Certificate {
                encoding: CertificateEncoding::Pem,
                data,
            });
        }
        let client = Client::new(ClientConfig {
            protocol,
            extra_root_certificates,
            use_monolithic_push: true,
            connect_timeout: Some(std::time::Duration::from_secs(30)),
            read_timeout: Some(std::time::Duration::from_secs(300)),
            user_agent: concat!("occm-forge/", env!("CARGO_PKG_VERSION")),
            ..Default::default()
        });
        Ok(OciRegistry {
            client,
            auth_files: config.auth.clone(),
            auths: Mutex::new(HashMap::new()),
        })
    }

    /// The credential for a registry (looked up once) and the oci-client reference for `reference`.
    async fn reference(
        &self,
        repo: &RepositoryName,
        reference: &str,
    ) -> Result<(Reference, RegistryAuth), RegistryError> {
        let cached = self
            .auths
            .lock()
            .expect("auth cache lock")
            .get(&repo.registry)
            .cloned();
        let auth = match cached {
            Some(a) => a,
            None => {
                let (auth, _) =
                    self.auth_files
                        .credential(&repo.registry)
                        .map_err(|e| RegistryError {
                            registry: repo.registry.clone(),
                            operation: "look up credentials".into(),
                            message: e.to_string(),
                            kind: ErrorKind::Auth,
                        })?;
                self.auths
                    .lock()
                    .expect("auth cache lock")
                    .insert(repo.registry.clone(), auth.clone());
                auth
            }
        };
        self.client
            .store_auth_if_needed(&repo.registry, &auth)
            .await;
        let r = if reference.starts_with("sha256:") {
            Reference::with_digest(
                repo.registry.clone(),
                repo.path.clone(),
                reference.to_string(),
            )
        } else {
            Reference::with_tag(
                repo.registry.clone(),
                repo.path.clone(),
                reference.to_string(),
            )
        };
        Ok((r, auth))
    }
}

fn error(repo: &RepositoryName, operation: String, e: OciDistributionError) -> RegistryError {
    let kind = classify(&e);
    let mut message = match &e {
        OciDistributionError::RegistryError { envelope, .. } => envelope
            .errors
            .iter()
            .map(|e| {
                // The distribution-spec spelling, e.g. MANIFEST_BLOB_UNKNOWN.
                let code = serde_json::to_value(&e.code)
                    .ok()
                    .and_then(|v| v.as_str().map(str::to_string));
                format!(
                    "{}: {}",
                    code.unwrap_or_else(|| format!("{:?}", e.code)),
                    e.message
                )
            })
            .collect::<Vec<_>>()
            .join("; "),
        OciDistributionError::ServerError { code, message, .. } => {
            let m = message.trim();
            if m.is_empty() {
                format!("HTTP {code}")
            } else {
                format!("HTTP {code}: {}", m.lines().next().unwrap_or(m))
            }
        }
        OciDistributionError::UnauthorizedError { .. } => "HTTP 401 unauthorized".to_string(),
        _ => error_chain(&e),
    };
    if message.contains("UnknownIssuer")
        || message.contains("self-signed")
        || message.contains("CaUsedAsEndEntity")
    {
        message = format!("{message} (trust its CA with --ca-file or [registry] ca_files)");
        return RegistryError {
            registry: repo.registry.clone(),
            operation,
            message,
            kind: ErrorKind::Other,
        };
    }
    if message.contains("InvalidContentType") || message.contains("HTTP response to HTTPS") {
        message = format!(
            "{message} (it answers plain HTTP; list it in [registry] insecure or pass --insecure-registry {})",
            repo.registry
        );
        return RegistryError {
            registry: repo.registry.clone(),
            operation,
            message,
            kind: ErrorKind::Other,
        };
    }
    if kind == ErrorKind::Auth {
        message = format!(
            "{message} (check the credentials for {} in your docker/podman auth file or --registry-config)",
            repo.registry
        );
    }
    if kind == ErrorKind::Transient
        && matches!(e, OciDistributionError::RequestError(_))
        && message.contains("onnect")
    {
        message = format!("unreachable: {message}");
    }
    RegistryError {
        registry: repo.registry.clone(),
        operation,
        message,
        kind,
    }
}

/// `a: b: c` from an error and its sources, without repeated parts.
pub(crate) fn error_chain(e: &dyn std::error::Error) -> String {
    let mut parts: Vec<String> = vec![e.to_string()];
    let mut src = e.source();
    while let Some(s) = src {
        let t = s.to_string();
        if !parts.iter().any(|p| p.contains(&t)) {
            parts.push(t);
        }
        src = s.source();
    }
    parts.join(": ")
}

fn classify(e: &OciDistributionError) -> ErrorKind {
    let by_status = |code: u16| match code {
        401 | 403 => ErrorKind::Auth,
        404 => ErrorKind::NotFound,
        408 | 429 | 500..=599 => ErrorKind::Transient,
        _ => ErrorKind::Other,
    };
    match e {
        OciDistributionError::RequestError(r) => {
            if r.is_connect() || r.is_timeout() || r.is_request() && r.status().is_none() {
                ErrorKind::Transient
            } else {
                r.status()
                    .map_or(ErrorKind::Other, |s| by_status(s.as_u16()))
            }
        }
        OciDistributionError::ServerError { code, .. } => by_status(*code),
        OciDistributionError::UnauthorizedError { .. }
        | OciDistributionError::AuthenticationFailure(_) => ErrorKind::Auth,
        OciDistributionError::ImageManifestNotFoundError(_) => ErrorKind::NotFound,
        OciDistributionError::RegistryError { envelope, .. } => {
            let codes: Vec<&OciErrorCode> = envelope.errors.iter().map(|e| &e.code).collect();
            if codes
                .iter()
                .any(|c| matches!(c, OciErrorCode::Toomanyrequests))
            {
                ErrorKind::Transient
            } else if codes
                .iter()
                .any(|c| matches!(c, OciErrorCode::Unauthorized | OciErrorCode::Denied))
            {
                ErrorKind::Auth
            } else if codes.iter().all(|c| {
                matches!(
                    c,
                    OciErrorCode::BlobUnknown
                        | OciErrorCode::ManifestUnknown
                        | OciErrorCode::NameUnknown
                        | OciErrorCode::NotFound
                )
            }) && !codes.is_empty()
            {
                ErrorKind::NotFound
            } else {
                ErrorKind::Other
            }
        }
        OciDistributionError::IoError(_) => ErrorKind::Transient,
        _ => ErrorKind::Other,
    }
}

#[async_trait]
impl Registry for OciRegistry {
    async fn blob_exists(
        &self,
        repo: &RepositoryName,
        digest: &str,
    ) -> Result<bool, RegistryError> {
        let (r, _auth) = self.reference(repo, digest).await?;
        self.client
            .blob_exists(&r, digest)
            .await
            .map_err(|e| error(repo, format!("check blob {}", short(digest)), e))
    }

    async fn push_blob(
        &self,
        repo: &RepositoryName,
        digest: &str,
        data: Bytes,
    ) -> Result<(), RegistryError> {
        // Tokens: oci-client fetches one per repository and operation on first use and caches it.
        let (r, _auth) = self.reference(repo, digest).await?;
        self.client
            .push_blob(&r, data, digest)
            .await
            .map(|_| ())
            .map_err(|e| error(repo, format!("push blob {}", short(digest)), e))
    }

    async fn mount_blob(&self, repo: &RepositoryName, from: &RepositoryName, digest: &str) -> bool {
        if repo.registry != from.registry {
            return false;
        }
        let Ok((r, _)) = self.reference(repo, digest).await else {
            return false;
        };
        let Ok((source, _)) = self.reference(from, digest).await else {
            return false;
        };
        match self.client.mount_blob(&r, &source, digest).await {
            Ok(()) => true,
            Err(e) => {
                tracing::debug!(
                    "mount of {} from {from} failed, uploading instead: {e}",
                    short(digest)
                );
                false
            }
        }
    }

    async fn pull_blob(&self, repo: &RepositoryName, digest: &str) -> Result<Bytes, RegistryError> {
        let (r, _auth) = self.reference(repo, digest).await?;
        let mut out: Vec<u8> = Vec::new();
        self.client
            .pull_blob(&r, digest, &mut out)
            .await
            .map_err(|e| error(repo, format!("pull blob {}", short(digest)), e))?;
        Ok(Bytes::from(out))
    }

    async fn push_manifest(
        &self,
        repo: &RepositoryName,
        reference: &str,
        media_type: &str,
        body: Bytes,
    ) -> Result<(), RegistryError> {
        let (r, _) = self.reference(repo, reference).await?;
        let op = || format!("push manifest {}:{}", repo.path, short(reference));
        let content_type = media_type.parse().map_err(|_| RegistryError {
            registry: repo.registry.clone(),
            operation: op(),
            message: format!("invalid media type {media_type}"),
            kind: ErrorKind::Other,
        })?;
        self.client
            .push_manifest_raw(&r, body, content_type)
            .await
            .map(|_| ())
            .map_err(|e| error(repo, op(), e))
    }

    async fn pull_manifest(
        &self,
        repo: &RepositoryName,
        reference: &str,
    ) -> Result<Bytes, RegistryError> {
        let (r, auth) = self.reference(repo, reference).await?;
        self.client
            .pull_manifest_raw(&r, &auth, MANIFEST_MEDIA_TYPES)
            .await
            .map(|(b, _)| b)
            .map_err(|e| {
                error(
                    repo,
                    format!("pull manifest {}:{}", repo.path, short(reference)),
                    e,
                )
            })
    }

    async fn manifest_digest(
        &self,
        repo: &RepositoryName,
        reference: &str,
    ) -> Result<Option<String>, RegistryError> {
        let (r, auth) = self.reference(repo, reference).await?;
        match self.client.fetch_manifest_digest(&r, &auth).await {
            Ok(d) => Ok(Some(d)),
            Err(e) => {
                let e = error(
                    repo,
                    format!("check manifest {}:{}", repo.path, short(reference)),
                    e,
                );
                if e.kind == ErrorKind::NotFound {
                    Ok(None)
                } else {
                    Err(e)
                }
            }
        }
    }
}
