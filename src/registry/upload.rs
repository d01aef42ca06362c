//! Monolithic blob upload (distribution-spec v1.1 "Pushing a blob monolithically": `POST
//! /v2/<name>/blobs/uploads/` answered `202` with a `Location`, then one `PUT <location>?digest=`
//! answered `201`), done here with reqwest instead of by oci-client 0.18 for two reasons:
//!
//! - oci-client resolves a relative upload `Location` against the registry it was asked for
//!   (`Client::location_header_to_url`, private), not against the URL that answered. When the
//!   `POST` is redirected (`307`) to another host, RFC 7231 §7.1.2 resolves a relative `Location`
//!   against the effective request URI, i.e. the redirect target, as containerd does since
//!   containerd#11949; resolving it against the first host sends the `PUT` to a host that has no
//!   such upload session (`404 BLOB_UPLOAD_UNKNOWN`). Here it is resolved against the final URL of
//!   the `POST` (reqwest follows the redirect and reports that URL), and a `307`/`308` answer to
//!   the `PUT` is followed the same way.
//! - reqwest's `read_timeout` bounds a request from its start until the answer's headers, which
//!   would cut a slow but healthy upload of a large layer. Here a request fails only when it
//!   makes no progress (no body bytes taken, no answer) for the idle timeout.
//!
//! Credentials go only to the registry they belong to (same scheme, host and port), never to a
//! host the registry redirects to (the distribution-spec: clients "MUST NOT forward Authorization
//! headers across host boundaries"; CVE-2020-15157), as oci-client does; reqwest also drops the
//! `Authorization` header when it follows a redirect to another host.

use std::future::Future;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use bytes::Bytes;
use oci_client::errors::{OciDistributionError, OciEnvelope};
use reqwest::header::{CONTENT_LENGTH, CONTENT_TYPE, LOCATION};
use reqwest::{StatusCode, Url};
use tokio::time::Instant;

use super::proxy::ProxyEnv;

/// How many `307`/`308` answers to the `PUT` are followed.
const MAX_PUT_REDIRECTS: usize = 5;
/// Size of the body pieces whose hand-over counts as progress.
const PIECE: usize = 64 * 1024;

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
}

impl Uploader {
    /// A client trusting the system roots plus `roots` (PEM), going through proxies as `proxy`
    /// decides, connecting within `idle`.
    pub(crate) fn new(
        roots: &[Vec<u8>],
        proxy: &ProxyEnv,
        idle: Duration,
        user_agent: &str,
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
        Ok(Uploader { http, idle })
    }

    /// Uploads `data` as blob `digest` into `repository` of the registry at `registry_url`
    /// (`scheme://host[:port]/`).
    pub(crate) async fn push(
        &self,
        registry_url: &Url,
        repository: &str,
        digest: &str,
        data: Bytes,
        auth: &UploadAuth,
    ) -> Result<(), UploadError> {
        let progress = Progress::new();
        let post_url = registry_url
            .join(&format!("/v2/{repository}/blobs/uploads/"))
            .map_err(|e| OciDistributionError::UrlParseError(e.to_string()))?;
        let request = authorize(
            self.http.post(post_url.clone()).header(CONTENT_LENGTH, 0),
            &post_url,
            registry_url,
            auth,
        );
        let res = watch(
            request.send(),
            &progress,
            self.idle,
            "waiting for the answer to the upload POST",
        )
        .await??;
        if res.status() != StatusCode::ACCEPTED {
            return Err(self.failure(res, &progress).await);
        }
        let mut put_url = location(&res)?;
        put_url.query_pairs_mut().append_pair("digest", digest);
        for _ in 0..=MAX_PUT_REDIRECTS {
            let p = progress.clone();
            let pieces: Vec<Bytes> = (0..data.len())
                .step_by(PIECE)
                .map(|i| data.slice(i..data.len().min(i + PIECE)))
                .collect();
            let body = futures::stream::iter(pieces.into_iter().map(move |piece| {
                p.touch();
                Ok::<_, std::io::Error>(piece)
            }));
            let request = authorize(
                self.http
                    .put(put_url.clone())
                    .header(CONTENT_TYPE, "application/octet-stream")
                    .header(CONTENT_LENGTH, data.len())
                    .body(reqwest::Body::wrap_stream(body)),
                &put_url,
                registry_url,
                auth,
            );
            let res = watch(
                request.send(),
                &progress,
                self.idle,
                "sending the blob or waiting for the answer to its PUT",
            )
            .await??;
            match res.status() {
                StatusCode::CREATED => return Ok(()),
                StatusCode::TEMPORARY_REDIRECT | StatusCode::PERMANENT_REDIRECT => {
                    put_url = location(&res)?;
                }
                _ => return Err(self.failure(res, &progress).await),
            }
        }
        Err(UploadError::Oci(OciDistributionError::GenericError(Some(
            format!("more than {MAX_PUT_REDIRECTS} redirects for the upload PUT"),
        ))))
    }

    /// The error for an unexpected answer, as oci-client reports it (an error envelope for 4xx,
    /// the body otherwise).
    async fn failure(&self, res: reqwest::Response, progress: &Progress) -> UploadError {
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
    fn durations_read_well() {
        assert_eq!(seconds(Duration::from_secs(30)), "30 s");
        assert_eq!(seconds(Duration::from_millis(1500)), "1.5 s");
    }
}
