//! The Kubernetes API as occm-forge uses it, for every command that talks to a cluster
//! (`accept`'s control planes, `clusters`): one client, [`Kube`], over kube-rs, speaking JSON to
//! resource paths (`/api/v1/namespaces/<ns>/secrets/<name>`, `/apis/<group>/<version>/…`) and
//! returning `serde_json::Value`s, so callers deal in the objects as the API server writes them.
//!
//! Credentials come from a kubeconfig (kube-rs reads it: certificate authority, client
//! certificates, bearer tokens and token files, exec plugins; [`Kube::from_kubeconfig`]), from the
//! Pod's ServiceAccount when run inside a cluster, or from a URL, CA and token
//! ([`Kube::with_token`], the accept control planes).
//!
//! Every failure is a [`KubeError`]: one line naming the API server, the request and the server's
//! own status and message.

use std::path::Path;
use std::time::{Duration, Instant};

use base64::Engine as _;
use futures::{Stream, StreamExt as _};
use http::{Method, Request};
use serde_json::Value;

/// A request the API server refused, or that could not be made. `Display` is one line.
#[derive(Debug, Clone, thiserror::Error)]
pub enum KubeError {
    /// The kubeconfig could not be read or names no usable cluster.
    #[error("kubeconfig {path}: {message}")]
    Config {
        /// The file (or `$KUBECONFIG`, `~/.kube/config`, in-cluster).
        path: String,
        /// Why.
        message: String,
    },
    /// The API server answered with an error status.
    #[error("{server}: {method} {path}: {code} {message}")]
    Status {
        /// `https://host:port` of the API server.
        server: String,
        /// The HTTP method.
        method: String,
        /// The request path, with its query.
        path: String,
        /// The HTTP status (403, 404, 409, 422 …).
        code: u16,
        /// The `message` of the server's Status object.
        message: String,
    },
    /// The request could not be made or its answer not read (connection refused, TLS, timeout,
    /// a body that is not JSON).
    #[error("{server}: {method} {path}: {message}")]
    Transport {
        /// `https://host:port` of the API server.
        server: String,
        /// The HTTP method.
        method: String,
        /// The request path.
        path: String,
        /// What failed.
        message: String,
    },
}

impl KubeError {
    /// The HTTP status the API server answered with, if it answered.
    pub fn code(&self) -> Option<u16> {
        match self {
            KubeError::Status { code, .. } => Some(*code),
            _ => None,
        }
    }
}

/// The content types of writes.
#[derive(Debug, Clone, Copy)]
enum Body {
    Json,
    MergePatch,
    ApplyPatch,
}

impl Body {
    fn content_type(self) -> &'static str {
        match self {
            Body::Json => "application/json",
            Body::MergePatch => "application/merge-patch+json",
            // JSON is YAML.
            Body::ApplyPatch => "application/apply-patch+yaml",
        }
    }
}

/// A watch event (`ADDED`, `MODIFIED`, `DELETED`; bookmarks are not asked for).
#[derive(Debug, Clone)]
pub struct WatchEvent {
    /// `ADDED`, `MODIFIED` or `DELETED`.
    pub kind: &'static str,
    /// The object.
    pub object: Value,
}

/// A client for one API server; cheap to clone.
#[derive(Clone)]
pub struct Kube {
    client: kube::Client,
    server: String,
}

/// How long one request may wait for an answer, unless a caller says otherwise.
pub const READ_TIMEOUT: Duration = Duration::from_secs(30);

impl Kube {
    /// A client from the kubeconfig at `path` (`None`: `$KUBECONFIG`, then `~/.kube/config`,
    /// then the Pod's ServiceAccount when run inside a cluster), using `context` or the file's
    /// current context. Requests time out after [`READ_TIMEOUT`] without an answer.
    ///
    /// Errors: [`KubeError::Config`] naming the file and why it cannot be used.
    pub async fn from_kubeconfig(
        path: Option<&Path>,
        context: Option<&str>,
    ) -> Result<Kube, KubeError> {
        let options = kube::config::KubeConfigOptions {
            context: context.map(str::to_string),
            ..Default::default()
        };
        let (name, config) = match path {
            Some(p) => {
                let bad = |m: String| KubeError::Config {
                    path: p.display().to_string(),
                    message: m,
                };
                let file = kube::config::Kubeconfig::read_from(p).map_err(|e| bad(one_line(&e)))?;
                let c = kube::Config::from_custom_kubeconfig(file, &options)
                    .await
                    .map_err(|e| bad(one_line(&e)))?;
                (p.display().to_string(), c)
            }
            None if context.is_some() => {
                let c = kube::Config::from_kubeconfig(&options).await.map_err(|e| {
                    KubeError::Config {
                        path: "$KUBECONFIG or ~/.kube/config".into(),
                        message: one_line(&e),
                    }
                })?;
                ("$KUBECONFIG or ~/.kube/config".into(), c)
            }
            None => {
                let c = kube::Config::infer().await.map_err(|e| KubeError::Config {
                    path: "$KUBECONFIG, ~/.kube/config or the in-cluster ServiceAccount".into(),
                    message: one_line(&e),
                })?;
                ("inferred".into(), c)
            }
        };
        Self::from_config(config, READ_TIMEOUT).map_err(|message| KubeError::Config {
            path: name,
            message,
        })
    }

    /// A client for `url` (`https://127.0.0.1:<port>`) trusting only the CA `ca_pem` and
    /// sending `token`; requests time out after `timeout` without an answer.
    ///
    /// Errors: [`KubeError::Config`] when the CA is not PEM or the URL does not parse.
    pub async fn with_token(
        url: &str,
        ca_pem: &str,
        token: &str,
        timeout: Duration,
    ) -> Result<Kube, KubeError> {
        Self::from_kubeconfig_text(&kubeconfig(url, ca_pem, token), timeout).await
    }

    /// A client from a kubeconfig's text (its current context).
    async fn from_kubeconfig_text(text: &str, timeout: Duration) -> Result<Kube, KubeError> {
        let bad = |message: String| KubeError::Config {
            path: "(built in memory)".into(),
            message,
        };
        let file = kube::config::Kubeconfig::from_yaml(text).map_err(|e| bad(one_line(&e)))?;
        let config = kube::Config::from_custom_kubeconfig(file, &Default::default())
            .await
            .map_err(|e| bad(one_line(&e)))?;
        Self::from_config(config, timeout).map_err(bad)
    }

    fn from_config(mut config: kube::Config, timeout: Duration) -> Result<Kube, String> {
        config.read_timeout = Some(timeout);
        config.connect_timeout = Some(timeout.min(Duration::from_secs(10)));
        let server = config
            .cluster_url
            .to_string()
            .trim_end_matches('/')
            .to_string();
        let client = kube::Client::try_from(config).map_err(|e| one_line(&e))?;
        Ok(Kube { client, server })
    }

    /// `https://host:port` of the API server.
    pub fn server(&self) -> &str {
        &self.server
    }

    /// One request; a `429 Too Many Requests` (the API server says so while a new CRD's storage
    /// is still initialising, or under its max-in-flight limit) is retried every 200 ms for up
    /// to 15 s, as client-go retries it.
    async fn call(
        &self,
        method: Method,
        path: &str,
        body: Option<(Body, &Value)>,
    ) -> Result<Value, KubeError> {
        let started = Instant::now();
        loop {
            let mut req = Request::builder()
                .method(method.clone())
                .uri(path)
                .header("Accept", "application/json");
            let bytes = match body {
                Some((kind, v)) => {
                    req = req.header("Content-Type", kind.content_type());
                    serde_json::to_vec(v).expect("JSON serialises")
                }
                None => Vec::new(),
            };
            let req = req
                .body(bytes)
                .map_err(|e| self.transport(&method, path, &e))?;
            match self.client.request_text(req).await {
                Ok(text) if text.trim().is_empty() => return Ok(Value::Null),
                Ok(text) => {
                    return serde_json::from_str(&text)
                        .map_err(|e| self.transport(&method, path, &e));
                }
                Err(kube::Error::Api(status))
                    if status.code == 429 && started.elapsed() < Duration::from_secs(15) =>
                {
                    tokio::time::sleep(Duration::from_millis(200)).await;
                }
                Err(kube::Error::Api(status)) => {
                    return Err(KubeError::Status {
                        server: self.server.clone(),
                        method: method.to_string(),
                        path: path.to_string(),
                        code: status.code,
                        message: status.message.clone(),
                    });
                }
                Err(e) => return Err(self.failed(&method, path, &e)),
            }
        }
    }

    fn transport(&self, method: &Method, path: &str, e: &dyn std::fmt::Display) -> KubeError {
        KubeError::Transport {
            server: self.server.clone(),
            method: method.to_string(),
            path: path.to_string(),
            message: one_line(e),
        }
    }

    /// A client error with its whole cause chain said plainly (`connection refused`, `TLS: …`,
    /// `cannot resolve the host name`), not kube-rs's outermost `ServiceError: client error
    /// (Connect)`.
    fn failed(&self, method: &Method, path: &str, e: &kube::Error) -> KubeError {
        let mut chain = vec![e.to_string()];
        let mut source = std::error::Error::source(e);
        while let Some(s) = source {
            chain.push(s.to_string());
            source = s.source();
        }
        chain.dedup();
        // Each layer repeats the one below it; keep each text once, outermost dropped when a
        // cause follows.
        let text = chain
            .iter()
            .skip(usize::from(chain.len() > 1))
            .map(|s| s.as_str())
            .collect::<Vec<_>>()
            .join(": ");
        self.transport(
            method,
            path,
            &crate::base::client_error::without_client_chain(&text),
        )
    }

    /// The body of `GET path` as text, for the endpoints that do not answer JSON (`/readyz`,
    /// `/healthz`).
    ///
    /// Errors: [`KubeError`] for an error status or no answer.
    pub async fn get_text(&self, path: &str) -> Result<String, KubeError> {
        let req = Request::builder()
            .method(Method::GET)
            .uri(path)
            .body(Vec::new())
            .map_err(|e| self.transport(&Method::GET, path, &e))?;
        self.client.request_text(req).await.map_err(|e| match e {
            kube::Error::Api(s) => KubeError::Status {
                server: self.server.clone(),
                method: "GET".into(),
                path: path.to_string(),
                code: s.code,
                message: s.message.clone(),
            },
            e => self.transport(&Method::GET, path, &e),
        })
    }

    /// The `gitVersion` the API server reports at `/version` (`v1.34.1`).
    ///
    /// Errors: [`KubeError`] when `/version` cannot be read.
    pub async fn version(&self) -> Result<String, KubeError> {
        let v = self.call(Method::GET, "/version", None).await?;
        Ok(v["gitVersion"].as_str().unwrap_or_default().to_string())
    }

    /// The object at `path`, or `None` when it does not exist (404).
    ///
    /// Errors: [`KubeError`] for any other failure.
    pub async fn get(&self, path: &str) -> Result<Option<Value>, KubeError> {
        match self.call(Method::GET, path, None).await {
            Ok(v) => Ok(Some(v)),
            Err(e) if e.code() == Some(404) => Ok(None),
            Err(e) => Err(e),
        }
    }

    /// The list at `path` (`…/secrets?fieldSelector=…`): its `items` and its
    /// `metadata.resourceVersion` (where a watch starts from).
    ///
    /// Errors: [`KubeError`] when the list cannot be read.
    pub async fn list_with_version(&self, path: &str) -> Result<(Vec<Value>, String), KubeError> {
        let v = self.call(Method::GET, path, None).await?;
        Ok((
            v["items"].as_array().cloned().unwrap_or_default(),
            v["metadata"]["resourceVersion"]
                .as_str()
                .unwrap_or_default()
                .to_string(),
        ))
    }

    /// The `items` of the list at `path` (empty when the list has none).
    ///
    /// Errors: [`KubeError`] when the list cannot be read.
    pub async fn list(&self, path: &str) -> Result<Vec<Value>, KubeError> {
        Ok(self.list_with_version(path).await?.0)
    }

    /// Creates `object` in the collection at `path` (`POST`); an object that exists already
    /// (409) is left as it is.
    ///
    /// Errors: [`KubeError`] with the API server's status and message.
    pub async fn create(&self, path: &str, object: Value) -> Result<(), KubeError> {
        match self
            .call(Method::POST, path, Some((Body::Json, &object)))
            .await
        {
            Err(e) if e.code() == Some(409) => Ok(()),
            r => r.map(drop),
        }
    }

    /// Replaces the object at `path` with `object` (`PUT`, what `kubectl replace -f` sends).
    /// With `metadata.resourceVersion` set, the API server refuses (409 Conflict) when the object
    /// changed since it was read; without, the update is unconditional. Returns the object as
    /// stored.
    ///
    /// Errors: [`KubeError`] with the API server's status and message.
    pub async fn replace(&self, path: &str, object: Value) -> Result<Value, KubeError> {
        self.call(Method::PUT, path, Some((Body::Json, &object)))
            .await
    }

    /// A JSON merge patch (RFC 7386) of the object at `path` (its `/status` for the status
    /// subresource). Returns whether the object existed: a missing one (404) is not an error.
    ///
    /// Errors: [`KubeError`] with the API server's status and message.
    pub async fn merge_patch(&self, path: &str, patch: Value) -> Result<bool, KubeError> {
        match self
            .call(Method::PATCH, path, Some((Body::MergePatch, &patch)))
            .await
        {
            Err(e) if e.code() == Some(404) => Ok(false),
            r => r.map(|_| true),
        }
    }

    /// Server-side apply of `object` at `path` (the object's own URL): `PATCH` with
    /// `application/apply-patch+yaml`, field manager `occm-forge`, conflicts forced. Returns the
    /// object as stored.
    ///
    /// Errors: [`KubeError`] with the API server's status and message.
    pub async fn apply(&self, path: &str, object: Value) -> Result<Value, KubeError> {
        self.call(
            Method::PATCH,
            &format!("{path}?fieldManager=occm-forge&force=true"),
            Some((Body::ApplyPatch, &object)),
        )
        .await
    }

    /// Deletes the object (or, for a collection, every object) at `path`; a missing one (404)
    /// is not an error.
    ///
    /// Errors: [`KubeError`] with the API server's status and message.
    pub async fn delete(&self, path: &str) -> Result<(), KubeError> {
        match self.call(Method::DELETE, path, None).await {
            Err(e) if e.code() == Some(404) => Ok(()),
            r => r.map(drop),
        }
    }

    /// Creates `object` (`POST`) and returns what the API server answered: for subresources
    /// such as a ServiceAccount's `token` (TokenRequest) or `selfsubjectaccessreviews`.
    ///
    /// Errors: [`KubeError`] with the API server's status and message (also 409).
    pub async fn post(&self, path: &str, object: Value) -> Result<Value, KubeError> {
        self.call(Method::POST, path, Some((Body::Json, &object)))
            .await
    }

    /// Applies each CustomResourceDefinition of `crds` server-side ([`Kube::apply`]) and waits
    /// until every one reports `Established=True`, at most `limit` in all. Returns the seconds it
    /// took.
    ///
    /// Errors: [`KubeError`] from the API server, or [`KubeError::Transport`] naming the CRD that
    /// was not established in time.
    pub async fn apply_crds(&self, crds: Vec<Value>, limit: Duration) -> Result<f64, KubeError> {
        let t = Instant::now();
        let path =
            |name: &str| format!("/apis/apiextensions.k8s.io/v1/customresourcedefinitions/{name}");
        let mut names = Vec::new();
        for crd in crds {
            let name = crd["metadata"]["name"]
                .as_str()
                .unwrap_or_default()
                .to_string();
            self.apply(&path(&name), crd).await?;
            names.push(name);
        }
        for name in &names {
            loop {
                let established = self.get(&path(name)).await?.is_some_and(|c| {
                    c["status"]["conditions"].as_array().is_some_and(|cs| {
                        cs.iter()
                            .any(|c| c["type"] == "Established" && c["status"] == "True")
                    })
                });
                if established {
                    break;
                }
                if t.elapsed() >= limit {
                    return Err(self.transport(
                        &Method::GET,
                        &path(name),
                        &format!("CRD {name} not Established after {} s", limit.as_secs()),
                    ));
                }
                tokio::time::sleep(Duration::from_millis(200)).await;
            }
        }
        Ok(t.elapsed().as_secs_f64())
    }

    /// Watches the collection at `path` (which may carry a `fieldSelector` or `labelSelector`)
    /// from `resource_version` (as [`Kube::list_with_version`] returned it) for at most
    /// `timeout` (the server ends the watch then; it must be shorter than the client's read
    /// timeout): the events as they come.
    ///
    /// Errors: [`KubeError`] when the watch cannot be started (a `410 Gone` resource version
    /// among them); an error event ends the stream with its [`KubeError::Status`].
    pub async fn watch(
        &self,
        path: &str,
        resource_version: &str,
        timeout: Duration,
    ) -> Result<impl Stream<Item = Result<WatchEvent, KubeError>> + use<>, KubeError> {
        let sep = if path.contains('?') { '&' } else { '?' };
        let path = format!(
            "{path}{sep}watch=true&resourceVersion={resource_version}&timeoutSeconds={}&allowWatchBookmarks=false",
            timeout.as_secs().max(1)
        );
        let req = Request::builder()
            .method(Method::GET)
            .uri(&path)
            .body(Vec::new())
            .map_err(|e| self.transport(&Method::GET, &path, &e))?;
        let events = self
            .client
            .request_events::<Value>(req)
            .await
            .map_err(|e| match e {
                kube::Error::Api(s) => KubeError::Status {
                    server: self.server.clone(),
                    method: "GET".into(),
                    path: path.clone(),
                    code: s.code,
                    message: s.message.clone(),
                },
                e => self.failed(&Method::GET, &path, &e),
            })?;
        let me = self.clone();
        Ok(events.map(move |e| {
            use kube::core::WatchEvent as E;
            match e {
                Ok(E::Added(o)) => Ok(WatchEvent {
                    kind: "ADDED",
                    object: o,
                }),
                Ok(E::Modified(o)) => Ok(WatchEvent {
                    kind: "MODIFIED",
                    object: o,
                }),
                Ok(E::Deleted(o)) => Ok(WatchEvent {
                    kind: "DELETED",
                    object: o,
                }),
                Ok(E::Bookmark(_)) => Ok(WatchEvent {
                    kind: "BOOKMARK",
                    object: Value::Null,
                }),
                Ok(E::Error(s)) => Err(KubeError::Status {
                    server: me.server.clone(),
                    method: "GET".into(),
                    path: path.clone(),
                    code: s.code,
                    message: s.message.clone(),
                }),
                Err(e) => Err(me.transport(&Method::GET, &path, &e)),
            }
        }))
    }
}

/// A kubeconfig for `url` with the CA `ca_pem` and the bearer `token` (what the accept control
/// planes write for their admin, and what the tests give a ServiceAccount's token).
pub fn kubeconfig(url: &str, ca_pem: &str, token: &str) -> String {
    let ca = base64::engine::general_purpose::STANDARD.encode(ca_pem.as_bytes());
    format!(
        "apiVersion: v1\nkind: Config\nclusters:\n- name: c\n  cluster:\n    server: {url}\n    certificate-authority-data: {ca}\nusers:\n- name: u\n  user:\n    token: {token}\ncontexts:\n- name: c\n  context:\n    cluster: c\n    user: u\ncurrent-context: c\n"
    )
}

/// `e` on one line.
fn one_line(e: &dyn std::fmt::Display) -> String {
    e.to_string()
        .split_whitespace()
        .collect::<Vec<_>>()
        .join(" ")
}

/// The path of a namespaced collection: `/api/v1/namespaces/<ns>/<resource>` for the core group
/// (`group` empty), else `/apis/<group>/<version>/namespaces/<ns>/<resource>`.
pub fn collection(group: &str, version: &str, namespace: &str, resource: &str) -> String {
    if group.is_empty() {
        format!("/api/{version}/namespaces/{namespace}/{resource}")
    } else {
        format!("/apis/{group}/{version}/namespaces/{namespace}/{resource}")
    }
}
