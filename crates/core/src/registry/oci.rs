//! [`Registry`] over the `oci-client` crate.
//!
//! Manifests are pushed with `push_manifest_raw`, so the registry stores exactly the bytes whose
//! sha256 occm-forge records. Blobs use a monolithic upload (`POST` then one `PUT`), or a chunked
//! one for large blobs and registries that refuse the monolithic `PUT` ([`ChunkedUploads`]); a
//! retry restarts either from its `POST`. Uploads are done by [`super::upload`] (a relative
//! upload `Location` after a redirected `POST`, progress-based timeout, resuming after `416`),
//! everything else by oci-client.
//!
//! Each registry gets its own oci-client client, so that its proxy is the one
//! [`ProxyEnv`] (Go's rules) decides for it. Every request must make progress within the idle
//! timeout ([`OciRegistryConfig::idle_timeout`]): oci-client requests must be answered within it
//! (reqwest `read_timeout`, also between two pieces of an answer's body), uploads fail after it
//! without progress.

use async_trait::async_trait;
use bytes::Bytes;
use oci_client::client::{ClientConfig, ClientProtocol};
use oci_client::errors::{OciDistributionError, OciErrorCode};
use oci_client::secrets::RegistryAuth;
use oci_client::{Client, Reference};

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use oci_client::RegistryOperation;

use oci_client::client::{Certificate, CertificateEncoding};

use super::auth::{Keychain, Keychains};
use super::proxy::ProxyEnv;
use super::referrers::{self, ReferrersPage, Source};
use super::upload::{ChunkedUploads, UploadAuth, UploadError, Uploader, seconds};
use super::{ErrorKind, Registry, RegistryError};
use crate::base::reference::RepositoryName;
use crate::base::util::short;
use crate::image::spec::{self, MANIFEST_MEDIA_TYPES};

/// How long a registry request may go without progress by default.
pub const DEFAULT_IDLE_TIMEOUT: Duration = Duration::from_secs(30);

/// Connection settings.
#[derive(Debug, Clone)]
pub struct OciRegistryConfig {
    /// Registries (`host[:port]`) reached over plain HTTP; every other one uses HTTPS.
    pub insecure: Vec<String>,
    /// Extra CA certificates (PEM files) to trust besides the system and Mozilla roots.
    pub ca_files: Vec<PathBuf>,
    /// Where credentials are looked up ([`Keychains`]: per host, else the default).
    pub auth: Keychains,
    /// A request that makes no progress for this long fails (transiently: it is retried): the
    /// connection, an answer, each piece of an answer's body, each piece of an upload.
    pub idle_timeout: Duration,
    /// Proxies (`HTTPS_PROXY`, `HTTP_PROXY`, `NO_PROXY`), applied as Go applies them.
    pub proxy: ProxyEnv,
    /// When blobs go up in chunks, and how large the chunks are.
    pub chunked: ChunkedUploads,
}

impl Default for OciRegistryConfig {
    /// No insecure registries or extra CAs, auth files discovered as usual,
    /// [`DEFAULT_IDLE_TIMEOUT`], proxies from the environment, the default [`ChunkedUploads`].
    fn default() -> Self {
        OciRegistryConfig {
            insecure: Vec::new(),
            ca_files: Vec::new(),
            auth: Keychains::default(),
            idle_timeout: DEFAULT_IDLE_TIMEOUT,
            proxy: ProxyEnv::from_env(),
            chunked: ChunkedUploads::default(),
        }
    }
}

/// The `oci-client` implementation of [`Registry`], with credentials from [`Keychains`] resolved
/// once per registry.
pub struct OciRegistry {
    clients: Mutex<HashMap<String, Arc<Client>>>,
    insecure: Vec<String>,
    certificates: Vec<Certificate>,
    idle: Duration,
    proxy: ProxyEnv,
    uploader: Uploader,
    upload_auths: tokio::sync::Mutex<HashMap<String, UploadAuth>>,
    keychain: Keychains,
    auths: Mutex<HashMap<String, RegistryAuth>>,
}

const USER_AGENT: &str = concat!("occm-forge/", env!("CARGO_PKG_VERSION"));

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
        let pems: Vec<Vec<u8>> = extra_root_certificates
            .iter()
            .map(|c: &Certificate| c.data.clone())
            .collect();
        let uploader = Uploader::new(
            &pems,
            &config.proxy,
            config.idle_timeout,
            USER_AGENT,
            config.chunked,
        )
        .map_err(|message| SetupError {
            path: config.ca_files.first().cloned().unwrap_or_default(),
            message,
        })?;
        Ok(OciRegistry {
            clients: Mutex::new(HashMap::new()),
            insecure: config.insecure.clone(),
            certificates: extra_root_certificates,
            idle: config.idle_timeout,
            proxy: config.proxy.clone(),
            uploader,
            upload_auths: tokio::sync::Mutex::new(HashMap::new()),
            keychain: config.auth.clone(),
            auths: Mutex::new(HashMap::new()),
        })
    }

    /// `http` for registries listed as insecure, `https` otherwise.
    fn scheme(&self, registry: &str) -> &'static str {
        if self.insecure.iter().any(|r| r == registry) {
            "http"
        } else {
            "https"
        }
    }

    /// The oci-client client for `registry` (made on first use), whose proxy settings are the
    /// ones [`ProxyEnv`] decides for that registry. Errors: a proxy URL reqwest cannot use
    /// (`Client::new` would fall back to a default client silently, so `try_from` is used).
    fn client(&self, registry: &str) -> Result<Arc<Client>, RegistryError> {
        let mut clients = self.clients.lock().expect("client cache lock");
        if let Some(c) = clients.get(registry) {
            return Ok(c.clone());
        }
        let (http_proxy, https_proxy, no_proxy) = self
            .proxy
            .oci_client_settings(self.scheme(registry), registry);
        let protocol = if self.insecure.is_empty() {
            ClientProtocol::Https
        } else {
            ClientProtocol::HttpsExcept(self.insecure.clone())
        };
        let client = Client::try_from(ClientConfig {
            protocol,
            extra_root_certificates: self.certificates.clone(),
            use_monolithic_push: true,
            connect_timeout: Some(self.idle),
            read_timeout: Some(self.idle),
            user_agent: USER_AGENT,
            http_proxy,
            https_proxy,
            no_proxy,
            ..Default::default()
        })
        .map_err(|e| RegistryError {
            registry: registry.to_string(),
            operation: "set up the client".into(),
            message: format!(
                "{} (check HTTPS_PROXY, HTTP_PROXY and NO_PROXY)",
                error_chain(&e)
            ),
            kind: ErrorKind::Other,
        })?;
        let client = Arc::new(client);
        clients.insert(registry.to_string(), client.clone());
        Ok(client)
    }

    /// [`error`] plus what only this client knows: the idle timeout behind a timeout, and the
    /// proxy when the registry is reached through one and the connection failed.
    fn error(
        &self,
        repo: &RepositoryName,
        operation: String,
        e: OciDistributionError,
    ) -> RegistryError {
        let (timed_out, connect, root) = match &e {
            OciDistributionError::RequestError(r) => {
                // The innermost cause, e.g. `Connection refused (os error 111)`.
                let mut root = r.to_string();
                let mut src = std::error::Error::source(r);
                while let Some(s) = src {
                    root = s.to_string();
                    src = s.source();
                }
                (r.is_timeout(), r.is_connect(), Some(root))
            }
            _ => (false, false, None),
        };
        let mut err = error(repo, operation, e);
        if timed_out {
            err.message = if connect {
                format!("cannot connect within {}", seconds(self.idle))
            } else {
                format!(
                    "no answer within {} (the connection was accepted, but nothing came back)",
                    seconds(self.idle)
                )
            };
        }
        let proxy = self
            .proxy
            .proxy_for_registry(self.scheme(&repo.registry), &repo.registry);
        if let (Some(proxy), true, Some(root)) = (proxy, connect && !timed_out, root) {
            err.message = format!(
                "cannot reach the {proxy}: {root} (NO_PROXY does not list {}; add it there if the registry is reachable directly)",
                repo.registry
            );
            return err;
        }
        self.name_proxy(repo, err, connect)
    }

    /// Names the proxy when `repo`'s registry is reached through one and the failure was the
    /// connection or the proxy's tunnel: then the proxy is what failed, or what failed to reach
    /// the registry.
    fn name_proxy(
        &self,
        repo: &RepositoryName,
        mut err: RegistryError,
        connect: bool,
    ) -> RegistryError {
        let tunnel = err.message.contains("tunnel") || err.message.contains("proxy");
        if let Some(proxy) = self
            .proxy
            .proxy_for_registry(self.scheme(&repo.registry), &repo.registry)
            && (connect || tunnel)
        {
            err.message = format!(
                "through the {proxy}: {} (NO_PROXY does not list {}; add it there if the registry is reachable directly)",
                err.message.trim_start_matches("unreachable: "),
                repo.registry
            );
        }
        err
    }

    /// The credentials for a request of our own into `r` (cached per repository and
    /// operation): a bearer token fetched through oci-client (`Client::auth`) for `operation`,
    /// or basic credentials when the registry asks for them.
    async fn upload_auth(
        &self,
        client: &Client,
        r: &Reference,
        auth: &RegistryAuth,
        operation: RegistryOperation,
        refresh: bool,
    ) -> Result<UploadAuth, OciDistributionError> {
        let key = format!("{}/{} {operation:?}", r.resolve_registry(), r.repository());
        let mut cache = self.upload_auths.lock().await;
        if !refresh && let Some(a) = cache.get(&key) {
            return Ok(a.clone());
        }
        let a = match client.auth(r, auth, operation).await? {
            Some(token) => UploadAuth::Bearer(token),
            None => match auth {
                RegistryAuth::Basic(user, password) => {
                    UploadAuth::Basic(user.clone(), password.clone())
                }
                _ => UploadAuth::Anonymous,
            },
        };
        cache.insert(key, a.clone());
        Ok(a)
    }

    /// One request of our own (the [`Uploader`]'s client, for what oci-client does not do: a
    /// resumable upload, a listing whose headers count) to `repo`'s registry: `send` gets the
    /// registry's base URL (`scheme://host/`) and the credentials for `operation` (a token
    /// through oci-client, cached); after a 401 with credentials it runs once more with a new
    /// token. Errors are said as oci-client's are, `op` naming what was done; a stall is
    /// transient and names the proxy where there is one.
    async fn own_request<T, F, Fut>(
        &self,
        repo: &RepositoryName,
        reference: &str,
        operation: RegistryOperation,
        op: &str,
        send: F,
    ) -> Result<T, RegistryError>
    where
        F: Fn(reqwest::Url, UploadAuth) -> Fut,
        Fut: std::future::Future<Output = Result<T, UploadError>>,
    {
        let (r, auth, client) = self.reference(repo, reference).await?;
        let registry_url = reqwest::Url::parse(&format!(
            "{}://{}/",
            self.scheme(&repo.registry),
            r.resolve_registry()
        ))
        .map_err(|e| RegistryError {
            registry: repo.registry.clone(),
            operation: op.to_string(),
            message: e.to_string(),
            kind: ErrorKind::Other,
        })?;
        let mut refresh = false;
        loop {
            let own_auth = self
                .upload_auth(&client, &r, &auth, operation, refresh)
                .await
                .map_err(|e| self.error(repo, op.to_string(), e))?;
            let anonymous = matches!(own_auth, UploadAuth::Anonymous);
            match send(registry_url.clone(), own_auth).await {
                Ok(t) => return Ok(t),
                Err(UploadError::Oci(OciDistributionError::UnauthorizedError { .. }))
                    if !refresh && !anonymous =>
                {
                    // An expired token: fetch a new one once.
                    refresh = true;
                }
                Err(UploadError::Oci(e)) => return Err(self.error(repo, op.to_string(), e)),
                Err(UploadError::Throttled { retry_after, error }) => {
                    let mut err = self.error(repo, op.to_string(), error);
                    err.kind = ErrorKind::RateLimited(retry_after);
                    err.message = match retry_after {
                        Some(wait) => {
                            format!("{} (Retry-After: {} s)", err.message, wait.as_secs())
                        }
                        None => err.message,
                    };
                    return Err(err);
                }
                Err(UploadError::Stalled(message)) => {
                    let err = RegistryError {
                        registry: repo.registry.clone(),
                        operation: op.to_string(),
                        message,
                        kind: ErrorKind::Transient,
                    };
                    return Err(self.name_proxy(repo, err, false));
                }
            }
        }
    }

    /// The credential for a registry (looked up once), the oci-client reference for `reference`
    /// and the registry's client.
    async fn reference(
        &self,
        repo: &RepositoryName,
        reference: &str,
    ) -> Result<(Reference, RegistryAuth, Arc<Client>), RegistryError> {
        let cached = self
            .auths
            .lock()
            .expect("auth cache lock")
            .get(&repo.registry)
            .cloned();
        let auth = match cached {
            Some(a) => a,
            None => {
                let auth = self
                    .keychain
                    .resolve(&repo.registry)
                    .map_err(|e| RegistryError {
                        registry: repo.registry.clone(),
                        operation: super::auth::LOOK_UP_CREDENTIALS.into(),
                        message: e.to_string(),
                        kind: ErrorKind::Auth,
                    })?
                    .map_or(RegistryAuth::Anonymous, |c| c.auth);
                self.auths
                    .lock()
                    .expect("auth cache lock")
                    .insert(repo.registry.clone(), auth.clone());
                auth
            }
        };
        let client = self.client(&repo.registry)?;
        client.store_auth_if_needed(&repo.registry, &auth).await;
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
        Ok((r, auth, client))
    }
}

fn error(repo: &RepositoryName, operation: String, e: OciDistributionError) -> RegistryError {
    let mut kind = classify(&e);
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
            let (m, k) = super::explain::status(*code, message);
            if let Some(k) = k {
                kind = k;
            }
            m
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
    if matches!(kind, ErrorKind::Transient | ErrorKind::HostUnknown)
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

/// Whether an error chain says the registry's host name does not exist: getaddrinfo's
/// `EAI_NONAME` (glibc: `Name or service not known`, `No address associated with hostname`;
/// BSD and macOS: `nodename nor servname provided, or not known`). A definite answer, as Go's
/// `net.DNSError.IsNotFound`, which go-containerregistry's retry does not retry; a resolver that
/// could not answer (`Temporary failure in name resolution`, `EAI_AGAIN`) stays transient.
pub(crate) fn host_name_unknown(e: &dyn std::error::Error) -> bool {
    let chain = error_chain(e);
    chain.contains("dns error")
        && [
            "Name or service not known",
            "No address associated with hostname",
            "nodename nor servname provided",
        ]
        .iter()
        .any(|m| chain.contains(m))
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
        408 | 429 => ErrorKind::Transient,
        // Insufficient Storage: the same bytes meet the same full disk on every retry.
        507 => ErrorKind::Other,
        500..=599 => ErrorKind::Transient,
        400..=499 => ErrorKind::Refused,
        _ => ErrorKind::Other,
    };
    match e {
        OciDistributionError::RequestError(r) => {
            if host_name_unknown(r) {
                ErrorKind::HostUnknown
            } else if r.is_connect() || r.is_timeout() || r.is_request() && r.status().is_none() {
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
                // An error envelope comes with a 4xx: the registry refused the request.
                ErrorKind::Refused
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
        let (r, _auth, client) = self.reference(repo, digest).await?;
        client
            .blob_exists(&r, digest)
            .await
            .map_err(|e| self.error(repo, format!("check blob {}", short(digest)), e))
    }

    async fn push_blob(
        &self,
        repo: &RepositoryName,
        digest: &str,
        data: Bytes,
    ) -> Result<(), RegistryError> {
        let op = format!("push blob {}", short(digest));
        let uploader = &self.uploader;
        self.own_request(repo, digest, RegistryOperation::Push, &op, |url, auth| {
            let data = data.clone();
            async move { uploader.push(&url, &repo.path, digest, data, &auth).await }
        })
        .await
    }

    async fn check_push(&self, repo: &RepositoryName) -> Result<(), RegistryError> {
        let uploader = &self.uploader;
        self.own_request(
            repo,
            "latest",
            RegistryOperation::Push,
            "check push permission (start and cancel an upload)",
            |url, auth| async move { uploader.check_push(&url, &repo.path, &auth).await },
        )
        .await
    }

    async fn mount_blob(&self, repo: &RepositoryName, from: &RepositoryName, digest: &str) -> bool {
        if repo.registry != from.registry {
            return false;
        }
        let Ok((r, _, client)) = self.reference(repo, digest).await else {
            return false;
        };
        let Ok((source, _, _)) = self.reference(from, digest).await else {
            return false;
        };
        match client.mount_blob(&r, &source, digest).await {
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
        let (r, _auth, client) = self.reference(repo, digest).await?;
        let mut out: Vec<u8> = Vec::new();
        client
            .pull_blob(&r, digest, &mut out)
            .await
            .map_err(|e| self.error(repo, format!("pull blob {}", short(digest)), e))?;
        Ok(Bytes::from(out))
    }

    async fn push_manifest(
        &self,
        repo: &RepositoryName,
        reference: &str,
        media_type: &str,
        body: Bytes,
    ) -> Result<(), RegistryError> {
        let (r, _, client) = self.reference(repo, reference).await?;
        let op = || format!("push manifest {}:{}", repo.path, short(reference));
        let content_type = media_type.parse().map_err(|_| RegistryError {
            registry: repo.registry.clone(),
            operation: op(),
            message: format!("invalid media type {media_type}"),
            kind: ErrorKind::Other,
        })?;
        client
            .push_manifest_raw(&r, body, content_type)
            .await
            .map(|_| ())
            .map_err(|e| self.error(repo, op(), e))
    }

    async fn pull_manifest(
        &self,
        repo: &RepositoryName,
        reference: &str,
    ) -> Result<Bytes, RegistryError> {
        let (r, auth, client) = self.reference(repo, reference).await?;
        client
            .pull_manifest_raw(&r, &auth, MANIFEST_MEDIA_TYPES)
            .await
            .map(|(b, _)| b)
            .map_err(|e| {
                self.error(
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
        // Our own HEAD: oci-client follows a HEAD without a digest header (a 429 among them)
        // with a GET, which counts against pull limits, and keeps no `Retry-After`.
        let op = format!("check manifest {}:{}", repo.path, short(reference));
        let uploader = &self.uploader;
        let found = self
            .own_request(
                repo,
                reference,
                RegistryOperation::Pull,
                &op,
                |url, auth| {
                    let manifest = url.join(&format!("/v2/{}/manifests/{reference}", repo.path));
                    async move {
                        let manifest = manifest.map_err(|e| {
                            UploadError::Oci(OciDistributionError::UrlParseError(e.to_string()))
                        })?;
                        uploader
                            .manifest_digest(
                                &url,
                                manifest,
                                &MANIFEST_MEDIA_TYPES.join(", "),
                                &auth,
                            )
                            .await
                    }
                },
            )
            .await?;
        match found {
            Some(d) if crate::base::util::is_sha256_digest(reference) && d != reference => {
                Err(RegistryError {
                    registry: repo.registry.clone(),
                    operation: op,
                    message: format!("the registry names {d} for the digest {reference}"),
                    kind: ErrorKind::Other,
                })
            }
            other => Ok(other),
        }
    }

    async fn referrers_page(
        &self,
        repo: &RepositoryName,
        subject: &str,
        next: Option<&str>,
    ) -> Result<ReferrersPage, RegistryError> {
        // Our own GET: oci-client's `pull_referrers` gives neither the `Link` header nor a
        // tolerance for Harbor's `Content-Type: application/json`.
        let op = format!("list the referrers of {}", short(subject));
        let other = |message: String| RegistryError {
            registry: repo.registry.clone(),
            operation: op.clone(),
            message,
            kind: ErrorKind::Other,
        };
        let first = format!("v2/{}/referrers/{subject}", repo.path);
        let uploader = &self.uploader;
        let (url, answer) = self
            .own_request(
                repo,
                subject,
                RegistryOperation::Pull,
                &op,
                |registry_url, auth| {
                    let url = match next {
                        Some(next) => reqwest::Url::parse(next),
                        None => registry_url.join(&first),
                    };
                    async move {
                        let url = url.map_err(|e| {
                            UploadError::Oci(OciDistributionError::GenericError(Some(
                                e.to_string(),
                            )))
                        })?;
                        let answer = uploader
                            .get(&registry_url, url.clone(), spec::OCI_INDEX, &auth)
                            .await?;
                        Ok((url, answer))
                    }
                },
            )
            .await?;
        let Some((links, body)) = answer else {
            // No referrers API (distribution 2.8): the tag schema.
            return referrers::tag_schema_page(self, repo, subject).await;
        };
        let index: spec::Index = serde_json::from_slice(&body).map_err(|e| {
            other(format!(
                "the referrers API answered what is not an image index: {e}"
            ))
        })?;
        let links: Vec<&str> = links.iter().map(String::as_str).collect();
        let next = referrers::next_link(&url, &links).map_err(|m| RegistryError {
            kind: ErrorKind::Refused,
            ..other(m)
        })?;
        Ok(ReferrersPage {
            manifests: index.manifests,
            next: next.map(String::from),
            source: Source::Api,
            unreadable: false,
            tag_schema: None,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn storage_full_is_not_transient_and_a_4xx_is_a_refusal() {
        let server = |code: u16, message: &str| OciDistributionError::ServerError {
            code,
            url: "http://r.example/v2/".into(),
            message: message.into(),
        };
        assert_eq!(classify(&server(507, "")), ErrorKind::Other);
        assert_eq!(classify(&server(503, "")), ErrorKind::Transient);
        let dns = |m: &str| {
            std::io::Error::other(format!(
                "dns error: failed to lookup address information: {m}"
            ))
        };
        assert!(super::host_name_unknown(&dns("Name or service not known")));
        assert!(super::host_name_unknown(&dns(
            "nodename nor servname provided, or not known"
        )));
        assert!(!super::host_name_unknown(&dns(
            "Temporary failure in name resolution"
        )));
        assert!(!super::host_name_unknown(&std::io::Error::other(
            "tcp connect error: Name or service not known"
        )));
        assert_eq!(classify(&server(400, "")), ErrorKind::Refused);
        assert_eq!(classify(&server(413, "")), ErrorKind::Refused);
        assert_eq!(classify(&server(404, "")), ErrorKind::NotFound);
        assert_eq!(classify(&server(429, "")), ErrorKind::Transient);
        let repo: RepositoryName = "r.example/a".parse().unwrap();
        let e = error(&repo, "push blob".into(), server(507, ""));
        assert_eq!(e.kind, ErrorKind::Other);
        assert!(
            e.to_string()
                .starts_with("registry r.example: push blob: storage full (507): "),
            "{e}"
        );
    }
}
