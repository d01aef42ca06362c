//! Blob uploads (distribution-spec v1.1 "Pushing blobs"), done here with reqwest instead of by
//! oci-client 0.18:
//!
//! - **Monolithic** ("POST then PUT"): `POST /v2/<name>/blobs/uploads/` answered `202` with a
//!   `Location`, then one `PUT <location>?digest=` with the blob, answered `201`.
//! - **Chunked** ("Pushing a blob in chunks"): the same `POST`, then `PATCH <location>` per chunk
//!   with `Content-Range: <start>-<end>` (inclusive) and `Content-Length`, each answered `202`
//!   with the `Location` for the next one; a `416` is resumed by reading the upload's status
//!   (`GET <location>`, `204` with `Range: 0-<end>` and `Location`) and continuing from the byte
//!   after `<end>`; then `PUT <location>?digest=` with an empty body, answered `201`. Used for
//!   blobs over [`ChunkedUploads::above`] and for every blob of a registry that refused a
//!   monolithic `PUT` (`DIGEST_INVALID`, `BLOB_UPLOAD_INVALID`, `SIZE_INVALID` or `413`: pulp
//!   ignores a `PUT` body, pulp/pulp_container#1219; a proxy may cap request bodies). That is
//!   the flow containers/image (skopeo, podman) always uses, with one `PATCH` for the whole blob.
//!   oci-client 0.18 has a chunked upload (`push_blob_stream_chunked`), but it does not resume
//!   after a `416`, does not fall back from a refused monolithic `PUT`, and resolves `Location`
//!   against the registry it was asked (below).
//!
//! Why not oci-client at all, also for the monolithic upload:
//!
//! - oci-client resolves a relative upload `Location` against the registry it was asked for
//!   (`Client::location_header_to_url`, private), not against the URL that answered. When the
//!   `POST` is redirected (`307`) to another host, RFC 7231 §7.1.2 resolves a relative `Location`
//!   against the effective request URI, i.e. the redirect target, as containerd does since
//!   containerd#11949; resolving it against the first host sends the `PUT` to a host that has no
//!   such upload session (`404 BLOB_UPLOAD_UNKNOWN`). Here it is resolved against the final URL of
//!   the `POST` (reqwest follows the redirect and reports that URL), and a `307`/`308` answer to
//!   a `PUT` or `PATCH` is followed the same way.
//! - reqwest's `read_timeout` bounds a request from its start until the answer's headers, which
//!   would cut a slow but healthy upload of a large layer. Here a request fails only when it
//!   makes no progress (no body bytes taken, no answer) for the idle timeout.
//!
//! Credentials go only to the registry they belong to (same scheme, host and port), never to a
//! host the registry redirects to (the distribution-spec: clients "MUST NOT forward Authorization
//! headers across host boundaries"; CVE-2020-15157), as oci-client does; reqwest also drops the
//! `Authorization` header when it follows a redirect to another host.

use std::collections::BTreeSet;
use std::future::Future;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use bytes::Bytes;
use oci_client::errors::{OciDistributionError, OciEnvelope, OciErrorCode};
use reqwest::header::{CONTENT_LENGTH, CONTENT_RANGE, CONTENT_TYPE, HeaderName, LOCATION, RANGE};
use reqwest::{Method, StatusCode, Url};
use tokio::time::Instant;

use super::proxy::ProxyEnv;

/// How many `307`/`308` answers to a `PUT` or `PATCH` are followed.
const MAX_REDIRECTS: usize = 5;
/// Size of the body pieces whose hand-over counts as progress.
const PIECE: usize = 64 * 1024;
/// How many `416` answers in a row (without a chunk accepted in between) are resumed.
const MAX_RESUMES: usize = 3;
/// The default [`ChunkedUploads::above`]: 64 MiB. An OCCM image's layers (the binary is about
/// 20 MiB compressed) stay below it and go up in one request each.
pub const CHUNKED_ABOVE: u64 = 64 << 20;
/// The default [`ChunkedUploads::chunk`]: 16 MiB, each chunk a request of its own (below the
/// 100 MB request-body caps common in front of registries) whose loss costs one chunk.
pub const CHUNK_SIZE: u64 = 16 << 20;

/// When blobs go up in chunks (`POST`, `PATCH` per chunk, empty `PUT`) instead of in one `PUT`.
/// Whatever the size, a registry that refuses a monolithic `PUT` gets chunks from then on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ChunkedUploads {
    /// Blobs larger than this many bytes go in chunks from the start.
    pub above: u64,
    /// Bytes per `PATCH` (at least the registry's `OCI-Chunk-Min-Length`); the last chunk may be
    /// shorter.
    pub chunk: u64,
}

impl Default for ChunkedUploads {
    /// Chunks for blobs over [`CHUNKED_ABOVE`], of [`CHUNK_SIZE`] each.
    fn default() -> Self {
        ChunkedUploads {
            above: CHUNKED_ABOVE,
            chunk: CHUNK_SIZE,
        }
    }
}

/// `application/octet-stream`, the content type of blob bytes.
const OCTET_STREAM: &str = "application/octet-stream";
/// The spec's header naming the smallest chunk a registry takes (in the `POST` answer).
const CHUNK_MIN_LENGTH: &str = "oci-chunk-min-length";

/// Credentials for the upload requests.
#[derive(Debug, Clone, Default)]
pub(crate) enum UploadAuth {
    /// No `Authorization` header.
    #[default]
    Anonymous,
    /// `Authorization: Bearer <token>`.
    Bearer(String),
    /// HTTP basic authentication.
    Basic(String, String),
}

/// Why an upload failed.
#[derive(Debug)]
pub(crate) enum UploadError {
    /// As oci-client would have reported it (transport error, status with or without an error
    /// envelope, missing or bad `Location`).
    Oci(OciDistributionError),
    /// No progress for the idle timeout; the text says in which step.
    Stalled(String),
    /// 429 Too Many Requests, with the wait its `Retry-After` names (`None` without one).
    Throttled {
        /// The wait the registry asked for.
        retry_after: Option<Duration>,
        /// The answer as oci-client would report it.
        error: OciDistributionError,
    },
}

impl From<OciDistributionError> for UploadError {
    fn from(e: OciDistributionError) -> Self {
        UploadError::Oci(e)
    }
}

impl From<reqwest::Error> for UploadError {
    fn from(e: reqwest::Error) -> Self {
        UploadError::Oci(OciDistributionError::RequestError(e))
    }
}

/// When the request last made progress.
#[derive(Clone)]
struct Progress(Arc<Mutex<Instant>>);

impl Progress {
    fn new() -> Self {
        Progress(Arc::new(Mutex::new(Instant::now())))
    }
    fn touch(&self) {
        *self.0.lock().expect("progress lock") = Instant::now();
    }
    fn last(&self) -> Instant {
        *self.0.lock().expect("progress lock")
    }
}

/// Runs `fut` until it ends or `progress` has not moved for `idle`.
async fn watch<F: Future>(
    fut: F,
    progress: &Progress,
    idle: Duration,
    step: &str,
) -> Result<F::Output, UploadError> {
    progress.touch();
    tokio::pin!(fut);
    loop {
        let deadline = progress.last() + idle;
        tokio::select! {
            out = &mut fut => return Ok(out),
            _ = tokio::time::sleep_until(deadline) => {
                if progress.last() + idle <= Instant::now() {
                    return Err(UploadError::Stalled(format!(
                        "no progress for {} while {step} (the connection is open but nothing moves)",
                        seconds(idle)
                    )));
                }
            }
        }
    }
}

/// `30 s`, `1.5 s`.
pub(crate) fn seconds(d: Duration) -> String {
    let s = d.as_secs_f64();
    if s.fract() == 0.0 {
        format!("{s:.0} s")
    } else {
        format!("{s:.1} s")
    }
}

/// The reqwest client for uploads and its settings.
pub(crate) struct Uploader {
    http: reqwest::Client,
    idle: Duration,
    chunked: ChunkedUploads,
    /// Registries (`host:port`) that refused a monolithic `PUT`: their blobs go in chunks.
    chunks_only: Mutex<BTreeSet<String>>,
}

/// One request to send: method, URL, extra headers and body.
struct Outgoing<'a> {
    method: Method,
    url: Url,
    headers: Vec<(HeaderName, String)>,
    body: Bytes,
    /// What the request does, for a stall message.
    step: &'a str,
}

/// Who the uploads go to and as whom.
struct Target<'a> {
    registry_url: &'a Url,
    auth: &'a UploadAuth,
}

impl Uploader {
    /// A client trusting the system roots plus `roots` (PEM), going through proxies as `proxy`
    /// decides, connecting within `idle`, chunking as `chunked` says.
    pub(crate) fn new(
        roots: &[Vec<u8>],
        proxy: &ProxyEnv,
        idle: Duration,
        user_agent: &str,
        chunked: ChunkedUploads,
    ) -> Result<Self, String> {
        let mut certs = Vec::new();
        for pem in roots {
            certs.push(reqwest::Certificate::from_pem(pem).map_err(|e| e.to_string())?);
        }
        let http = reqwest::Client::builder()
            .tls_certs_merge(certs)
            .proxy(proxy.reqwest_proxy())
            .connect_timeout(idle)
            .user_agent(user_agent)
            .build()
            .map_err(|e| e.to_string())?;
        Ok(Uploader {
            http,
            idle,
            chunked,
            chunks_only: Mutex::new(BTreeSet::new()),
        })
    }

    /// Uploads `data` as blob `digest` into `repository` of the registry at `registry_url`
    /// (`scheme://host[:port]/`): in one `PUT`, or in chunks when the blob is larger than
    /// [`ChunkedUploads::above`] or the registry refused a monolithic `PUT` (then, once told in
    /// a warning, every later blob to it goes in chunks).
    pub(crate) async fn push(
        &self,
        registry_url: &Url,
        repository: &str,
        digest: &str,
        data: Bytes,
        auth: &UploadAuth,
    ) -> Result<(), UploadError> {
        let target = Target { registry_url, auth };
        let host = format!(
            "{}:{}",
            registry_url.host_str().unwrap_or(""),
            registry_url.port_or_known_default().unwrap_or(0)
        );
        let chunks_only = self
            .chunks_only
            .lock()
            .expect("chunks lock")
            .contains(&host);
        if chunks_only || data.len() as u64 > self.chunked.above {
            return self.push_chunked(&target, repository, digest, data).await;
        }
        match self
            .push_monolithic(&target, repository, digest, data.clone())
            .await
        {
            Err(UploadError::Oci(e)) if refuses_monolithic(&e) => {
                if self.chunks_only.lock().expect("chunks lock").insert(host) {
                    let name = registry_url.host_str().unwrap_or("");
                    let name = match registry_url.port() {
                        Some(port) => format!("{name}:{port}"),
                        None => name.to_string(),
                    };
                    tracing::warn!(
                        "registry {name} refused a blob sent in one PUT ({}); sending its blobs in chunks (PATCH) instead",
                        refusal(&e)
                    );
                }
                self.push_chunked(&target, repository, digest, data).await
            }
            other => other,
        }
    }

    /// Whether `auth` may push into `repository`, found out without leaving anything behind:
    /// `POST /v2/<repository>/blobs/uploads/` (a push-scoped request: a token handshake alone
    /// does not tell on Docker Hub, docker/hub-feedback#1771), then a `DELETE` of the upload it
    /// started ("Canceling an upload" in distribution's API; a failure of it is ignored, the
    /// registry expires unfinished uploads), as go-containerregistry's
    /// `remote.CheckPushPermission` does.
    ///
    /// # Errors
    /// The `POST`'s refusal (401/403 as such) or no answer.
    pub(crate) async fn check_push(
        &self,
        registry_url: &Url,
        repository: &str,
        auth: &UploadAuth,
    ) -> Result<(), UploadError> {
        let target = Target { registry_url, auth };
        let progress = Progress::new();
        let (upload, _) = self.start(&target, repository, &progress).await?;
        let cancel = authorize(
            self.http.delete(upload.clone()),
            &upload,
            registry_url,
            auth,
        );
        if let Ok(Ok(res)) =
            watch(cancel.send(), &progress, self.idle, "cancelling the upload").await
            && !res.status().is_success()
        {
            tracing::debug!("cancelling the upload {upload}: HTTP {}", res.status());
        }
        Ok(())
    }

    /// `POST` then one `PUT ?digest=` with the blob.
    async fn push_monolithic(
        &self,
        target: &Target<'_>,
        repository: &str,
        digest: &str,
        data: Bytes,
    ) -> Result<(), UploadError> {
        let progress = Progress::new();
        let (put_url, _) = self.start(target, repository, &progress).await?;
        self.close(
            target,
            put_url,
            digest,
            (vec![(CONTENT_TYPE, OCTET_STREAM.to_string())], data),
            "sending the blob or waiting for the answer to its PUT",
            &progress,
        )
        .await
    }

    /// `POST`, a `PATCH` per chunk (resuming after a `416` from the upload's status), then an
    /// empty `PUT ?digest=`.
    async fn push_chunked(
        &self,
        target: &Target<'_>,
        repository: &str,
        digest: &str,
        data: Bytes,
    ) -> Result<(), UploadError> {
        let progress = Progress::new();
        let (mut url, min_chunk) = self.start(target, repository, &progress).await?;
        let chunk = self.chunked.chunk.max(min_chunk).max(1) as usize;
        let len = data.len();
        let mut offset = 0usize;
        let mut refused = 0usize;
        while offset < len {
            let end = len.min(offset.saturating_add(chunk));
            let res = self
                .send(
                    target,
                    Outgoing {
                        method: Method::PATCH,
                        url: url.clone(),
                        headers: vec![
                            (CONTENT_TYPE, OCTET_STREAM.to_string()),
                            (CONTENT_RANGE, format!("{offset}-{}", end - 1)),
                        ],
                        body: data.slice(offset..end),
                        step: "sending a chunk of the blob or waiting for the answer to its PATCH",
                    },
                    &progress,
                )
                .await?;
            match res.status() {
                StatusCode::ACCEPTED => {
                    url = location(&res).unwrap_or(url);
                    offset = end;
                    refused = 0;
                }
                // distribution-spec says 202; pulp_container 2.25 answers 204 with the same
                // headers (pulp/pulp_container#2199): a success when they say where to go on.
                StatusCode::NO_CONTENT
                    if res.headers().contains_key(RANGE)
                        && res.headers().contains_key(LOCATION) =>
                {
                    url = location(&res).unwrap_or(url);
                    offset = end;
                    refused = 0;
                }
                StatusCode::RANGE_NOT_SATISFIABLE => {
                    refused += 1;
                    if refused > MAX_RESUMES {
                        return Err(generic(format!(
                            "the registry answered 416 to the chunk at byte {offset} {MAX_RESUMES} times, resuming from its upload status each time"
                        )));
                    }
                    let (resumed, next) = self.upload_status(target, &url, &progress).await?;
                    if next > len as u64 {
                        return Err(generic(format!(
                            "the upload status says {next} bytes arrived, the blob has {len}"
                        )));
                    }
                    tracing::debug!("416 for the chunk at byte {offset}: resuming at byte {next}");
                    url = resumed;
                    offset = next as usize;
                }
                _ => return Err(self.failure(res, &progress).await),
            }
        }
        self.close(
            target,
            url,
            digest,
            (vec![], Bytes::new()),
            "waiting for the answer to the PUT closing the upload",
            &progress,
        )
        .await
    }

    /// The `PUT <upload URL>?digest=<digest>` that ends an upload (distribution-spec "Pushing a
    /// blob monolithically" and "Closing a chunked upload"), with `headers` and `body` (the whole
    /// blob, or nothing after the chunks); the registry answers 201.
    async fn close(
        &self,
        target: &Target<'_>,
        mut url: Url,
        digest: &str,
        (headers, body): (Vec<(HeaderName, String)>, Bytes),
        step: &str,
        progress: &Progress,
    ) -> Result<(), UploadError> {
        url.query_pairs_mut().append_pair("digest", digest);
        let res = self
            .send(
                target,
                Outgoing {
                    method: Method::PUT,
                    url,
                    headers,
                    body,
                    step,
                },
                progress,
            )
            .await?;
        match res.status() {
            StatusCode::CREATED => Ok(()),
            _ => Err(self.failure(res, progress).await),
        }
    }

    /// `POST /v2/<repository>/blobs/uploads/`: the upload's `Location` (resolved against the URL
    /// that answered) and the registry's `OCI-Chunk-Min-Length` (0 when it names none).
    async fn start(
        &self,
        target: &Target<'_>,
        repository: &str,
        progress: &Progress,
    ) -> Result<(Url, u64), UploadError> {
        let post_url = target
            .registry_url
            .join(&format!("/v2/{repository}/blobs/uploads/"))
            .map_err(|e| OciDistributionError::UrlParseError(e.to_string()))?;
        let res = self
            .send_without_body(
                target,
                self.http.post(post_url.clone()).header(CONTENT_LENGTH, 0),
                &post_url,
                progress,
                "waiting for the answer to the upload POST",
            )
            .await?;
        if res.status() != StatusCode::ACCEPTED {
            return Err(self.failure(res, progress).await);
        }
        let min_chunk = res
            .headers()
            .get(CHUNK_MIN_LENGTH)
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.trim().parse().ok())
            .unwrap_or(0);
        Ok((location(&res)?, min_chunk))
    }

    /// Sends `request` (no body) to `url` with the target's credentials, cut after the idle
    /// time without progress (`step` says what it waited for).
    async fn send_without_body(
        &self,
        target: &Target<'_>,
        request: reqwest::RequestBuilder,
        url: &Url,
        progress: &Progress,
        step: &'static str,
    ) -> Result<reqwest::Response, UploadError> {
        let request = authorize(request, url, target.registry_url, target.auth);
        Ok(watch(request.send(), progress, self.idle, step).await??)
    }

    /// `HEAD <url>` of a manifest on the registry at `registry_url` with `accept` and the
    /// credentials `auth`: the digest it names (`Docker-Content-Digest`), or, when it names none,
    /// the sha256 of what a `GET` gives; `None` for a 404. One request per call where the
    /// registry names the digest: a failed `HEAD` is not followed by a `GET` (a `GET` of a
    /// manifest counts against Docker Hub's pull limit, a `HEAD` does not: containers/image#618).
    ///
    /// # Errors
    /// No answer within the idle time, or any other status (429 as [`UploadError::Throttled`]).
    pub(crate) async fn manifest_digest(
        &self,
        registry_url: &Url,
        url: Url,
        accept: &str,
        auth: &UploadAuth,
    ) -> Result<Option<String>, UploadError> {
        let target = Target { registry_url, auth };
        let progress = Progress::new();
        let request = |method: Method| Outgoing {
            method,
            url: url.clone(),
            headers: vec![(reqwest::header::ACCEPT, accept.to_string())],
            body: Bytes::new(),
            step: "waiting for the answer about a manifest",
        };
        let res = self.send(&target, request(Method::HEAD), &progress).await?;
        if res.status() == StatusCode::NOT_FOUND {
            return Ok(None);
        }
        if !res.status().is_success() {
            return Err(self.failure(res, &progress).await);
        }
        if let Some(d) = res
            .headers()
            .get("docker-content-digest")
            .and_then(|v| v.to_str().ok())
        {
            return Ok(Some(d.trim().to_string()));
        }
        let res = self.send(&target, request(Method::GET), &progress).await?;
        if res.status() == StatusCode::NOT_FOUND {
            return Ok(None);
        }
        if !res.status().is_success() {
            return Err(self.failure(res, &progress).await);
        }
        let body = watch(res.bytes(), &progress, self.idle, "reading a manifest").await??;
        Ok(Some(crate::base::util::sha256_digest(&body)))
    }

    /// `GET <url>` on the registry at `registry_url` with `accept`, with the credentials `auth`
    /// (following `307`/`308`): the answer's `Link` header values and body, or `None` for a 404.
    /// Used for the referrers API, whose `Link` header oci-client does not give.
    ///
    /// # Errors
    /// No answer within the idle time, or any other non-success status (as oci-client reports
    /// it).
    pub(crate) async fn get(
        &self,
        registry_url: &Url,
        url: Url,
        accept: &str,
        auth: &UploadAuth,
    ) -> Result<Option<(Vec<String>, Bytes)>, UploadError> {
        let target = Target { registry_url, auth };
        let progress = Progress::new();
        let res = self
            .send(
                &target,
                Outgoing {
                    method: Method::GET,
                    url,
                    headers: vec![(reqwest::header::ACCEPT, accept.to_string())],
                    body: Bytes::new(),
                    step: "waiting for the referrers list",
                },
                &progress,
            )
            .await?;
        if res.status() == StatusCode::NOT_FOUND {
            return Ok(None);
        }
        if !res.status().is_success() {
            return Err(self.failure(res, &progress).await);
        }
        let links = res
            .headers()
            .get_all(reqwest::header::LINK)
            .iter()
            .filter_map(|v| v.to_str().ok().map(String::from))
            .collect();
        let body = watch(
            res.bytes(),
            &progress,
            self.idle,
            "reading the referrers list",
        )
        .await??;
        Ok(Some((links, body)))
    }

    /// `GET <url>` of an upload in progress: its `Location` (the old one when it names none) and
    /// the offset to continue at, from its `Range`.
    async fn upload_status(
        &self,
        target: &Target<'_>,
        url: &Url,
        progress: &Progress,
    ) -> Result<(Url, u64), UploadError> {
        let res = self
            .send_without_body(
                target,
                self.http.get(url.clone()),
                url,
                progress,
                "waiting for the upload status after a 416",
            )
            .await?;
        if !res.status().is_success() {
            return Err(self.failure(res, progress).await);
        }
        let next = res
            .headers()
            .get(RANGE)
            .and_then(|v| v.to_str().ok())
            .and_then(next_offset)
            .unwrap_or(0);
        Ok((location(&res).unwrap_or_else(|_| url.clone()), next))
    }

    /// Sends `req` with its body in pieces that count as progress, following `307`/`308`
    /// answers (the same request again at their `Location`); returns the first other answer.
    async fn send(
        &self,
        target: &Target<'_>,
        req: Outgoing<'_>,
        progress: &Progress,
    ) -> Result<reqwest::Response, UploadError> {
        let mut url = req.url;
        for _ in 0..=MAX_REDIRECTS {
            let mut request = self
                .http
                .request(req.method.clone(), url.clone())
                .header(CONTENT_LENGTH, req.body.len());
            for (name, value) in &req.headers {
                request = request.header(name, value);
            }
            if !req.body.is_empty() {
                let p = progress.clone();
                let body = req.body.clone();
                let pieces: Vec<Bytes> = (0..body.len())
                    .step_by(PIECE)
                    .map(|i| body.slice(i..body.len().min(i + PIECE)))
                    .collect();
                let stream = futures::stream::iter(pieces.into_iter().map(move |piece| {
                    p.touch();
                    Ok::<_, std::io::Error>(piece)
                }));
                request = request.body(reqwest::Body::wrap_stream(stream));
            }
            let request = authorize(request, &url, target.registry_url, target.auth);
            let res = watch(request.send(), progress, self.idle, req.step).await??;
            match res.status() {
                StatusCode::TEMPORARY_REDIRECT | StatusCode::PERMANENT_REDIRECT => {
                    url = location(&res)?;
                }
                _ => return Ok(res),
            }
        }
        Err(generic(format!(
            "more than {MAX_REDIRECTS} redirects for the upload {}",
            req.method
        )))
    }

    /// The error for an unexpected answer, as oci-client reports it (an error envelope for 4xx,
    /// the body otherwise).
    async fn failure(&self, res: reqwest::Response, progress: &Progress) -> UploadError {
        let status = res.status();
        if status == StatusCode::TOO_MANY_REQUESTS {
            let retry_after = retry_after(res.headers());
            return match self.answer_error(res, progress).await {
                UploadError::Oci(error) => UploadError::Throttled { retry_after, error },
                other => other,
            };
        }
        self.answer_error(res, progress).await
    }

    /// An unexpected answer as oci-client reports one.
    async fn answer_error(&self, res: reqwest::Response, progress: &Progress) -> UploadError {
        let status = res.status();
        let url = res.url().to_string();
        let body = match watch(res.bytes(), progress, self.idle, "reading an error answer").await {
            Ok(Ok(b)) => b,
            Ok(Err(e)) => return e.into(),
            Err(e) => return e,
        };
        if status == StatusCode::UNAUTHORIZED {
            return OciDistributionError::UnauthorizedError { url }.into();
        }
        if status.is_client_error()
            && let Ok(envelope) = serde_json::from_slice::<OciEnvelope>(&body)
        {
            return OciDistributionError::RegistryError { envelope, url }.into();
        }
        OciDistributionError::ServerError {
            code: status.as_u16(),
            url,
            message: String::from_utf8_lossy(&body).into_owned(),
        }
        .into()
    }
}

/// The wait a `Retry-After` header names (RFC 9110 §10.2.3): a number of seconds, or an HTTP date
/// (`Wed, 21 Oct 2026 07:28:00 GMT`) from now; `None` when there is none or it cannot be read.
pub(crate) fn retry_after(headers: &reqwest::header::HeaderMap) -> Option<Duration> {
    let value = headers
        .get(reqwest::header::RETRY_AFTER)?
        .to_str()
        .ok()?
        .trim();
    if let Ok(secs) = value.parse::<u64>() {
        return Some(Duration::from_secs(secs));
    }
    let date = time::OffsetDateTime::parse(
        &value.replace(" GMT", " +0000"),
        &time::format_description::well_known::Rfc2822,
    )
    .ok()?;
    let wait = date - time::OffsetDateTime::now_utc();
    Some(Duration::from_secs(wait.whole_seconds().max(0) as u64))
}

fn generic(message: String) -> UploadError {
    UploadError::Oci(OciDistributionError::GenericError(Some(message)))
}

/// Whether a failed monolithic `PUT` says the registry did not take the blob in one request
/// (so a chunked upload may work): `DIGEST_INVALID` / `BLOB_UPLOAD_INVALID` / `SIZE_INVALID`
/// (the body was ignored or cut), or `413 Payload Too Large`.
fn refuses_monolithic(e: &OciDistributionError) -> bool {
    const CODES: [&str; 3] = ["DIGEST_INVALID", "BLOB_UPLOAD_INVALID", "SIZE_INVALID"];
    match e {
        OciDistributionError::RegistryError { envelope, .. } => envelope.errors.iter().any(|e| {
            matches!(
                e.code,
                OciErrorCode::DigestInvalid
                    | OciErrorCode::BlobUploadInvalid
                    | OciErrorCode::SizeInvalid
            )
        }),
        OciDistributionError::ServerError { code: 413, .. } => true,
        OciDistributionError::ServerError {
            code: 400, message, ..
        } => CODES.iter().any(|c| message.contains(c)),
        _ => false,
    }
}

/// A short description of a refusal, for the warning.
fn refusal(e: &OciDistributionError) -> String {
    match e {
        OciDistributionError::RegistryError { envelope, .. } => envelope
            .errors
            .iter()
            .map(|e| {
                serde_json::to_value(&e.code)
                    .ok()
                    .and_then(|v| v.as_str().map(str::to_string))
                    .unwrap_or_else(|| format!("{:?}", e.code))
            })
            .collect::<Vec<_>>()
            .join(", "),
        OciDistributionError::ServerError { code, .. } => format!("HTTP {code}"),
        other => other.to_string(),
    }
}

/// The offset after the bytes a `Range: 0-<end>` header says arrived (`bytes=` tolerated).
/// distribution writes `0-0` both for an empty upload and for one of one byte (its
/// `blobUploadResponse` only decrements a non-zero size); it is read as empty, so at worst one
/// byte is offered again.
fn next_offset(range: &str) -> Option<u64> {
    let r = range.trim();
    let r = r.strip_prefix("bytes=").unwrap_or(r);
    let (start, end) = r.split_once('-')?;
    let (start, end): (u64, u64) = (start.trim().parse().ok()?, end.trim().parse().ok()?);
    if start != 0 {
        return None;
    }
    Some(if end == 0 { 0 } else { end + 1 })
}

/// The `Location` of `res`, resolved against the URL that answered (RFC 7231 §7.1.2; after a
/// followed redirect that is the redirect target, not the URL first asked).
fn location(res: &reqwest::Response) -> Result<Url, UploadError> {
    let value = res
        .headers()
        .get(LOCATION)
        .ok_or(OciDistributionError::RegistryNoLocationError)?
        .to_str()
        .map_err(|e| OciDistributionError::GenericError(Some(format!("Location: {e}"))))?;
    res.url()
        .join(value)
        .map_err(|e| OciDistributionError::UrlParseError(format!("Location {value}: {e}")).into())
}

/// Adds credentials when `target` is the registry they belong to.
fn authorize(
    request: reqwest::RequestBuilder,
    target: &Url,
    registry_url: &Url,
    auth: &UploadAuth,
) -> reqwest::RequestBuilder {
    let same = target.host_str() == registry_url.host_str()
        && target.port_or_known_default() == registry_url.port_or_known_default()
        && !(registry_url.scheme() == "https" && target.scheme() != "https");
    match auth {
        _ if !same => request,
        UploadAuth::Anonymous => request,
        UploadAuth::Bearer(token) => request.bearer_auth(token),
        UploadAuth::Basic(user, password) => request.basic_auth(user, Some(password)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn credentials_stay_with_their_registry() {
        let reg = Url::parse("https://r.example:5000/").unwrap();
        let c = reqwest::Client::new();
        let auth = UploadAuth::Bearer("t".into());
        let has = |url: &str| {
            let u = Url::parse(url).unwrap();
            authorize(c.put(u.clone()), &u, &reg, &auth)
                .build()
                .unwrap()
                .headers()
                .contains_key("authorization")
        };
        assert!(has("https://r.example:5000/v2/a/blobs/uploads/x"));
        assert!(!has("https://other.example:5000/v2/a/blobs/uploads/x"));
        assert!(!has("https://r.example:5001/v2/a/blobs/uploads/x"));
        assert!(!has("http://r.example:5000/v2/a/blobs/uploads/x"));
    }

    #[test]
    fn retry_after_is_read_as_seconds_or_a_date() {
        let headers = |v: &str| {
            let mut h = reqwest::header::HeaderMap::new();
            h.insert(reqwest::header::RETRY_AFTER, v.parse().unwrap());
            h
        };
        assert_eq!(retry_after(&headers("60")), Some(Duration::from_secs(60)));
        let later = time::OffsetDateTime::now_utc() + time::Duration::seconds(90);
        let date = later
            .format(&time::format_description::well_known::Rfc2822)
            .unwrap()
            .replace("+0000", "GMT");
        let wait = retry_after(&headers(&date)).unwrap().as_secs();
        assert!((85..=90).contains(&wait), "{date}: {wait}");
        assert_eq!(retry_after(&headers("soon")), None);
        assert_eq!(retry_after(&reqwest::header::HeaderMap::new()), None);
    }

    #[test]
    fn the_upload_status_range_gives_the_next_offset() {
        assert_eq!(next_offset("0-1048575"), Some(1_048_576));
        assert_eq!(next_offset("bytes=0-9"), Some(10));
        assert_eq!(next_offset("0-0"), Some(0));
        assert_eq!(next_offset("5-9"), None);
        assert_eq!(next_offset("garbage"), None);
    }

    #[test]
    fn durations_read_well() {
        assert_eq!(seconds(Duration::from_secs(30)), "30 s");
        assert_eq!(seconds(Duration::from_millis(1500)), "1.5 s");
    }
}
