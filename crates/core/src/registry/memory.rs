//! An in-process registry for tests (go-containerregistry's `pkg/registry` idea): blobs,
//! manifests and tags per repository in memory, with the rules of distribution 2.8 that
//! occm-forge relies on, a log of every operation, and fault hooks.
//!
//! Rules enforced (distribution-spec v1.1, "Push"): a blob's bytes must match its digest; a
//! manifest's `Content-Type` must equal its `mediaType`; an image manifest's config and layers
//! and an index's manifests must already be in the repository (`MANIFEST_BLOB_UNKNOWN`); a
//! manifest pushed by digest must hash to it. Pushing by tag points the tag at the manifest.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Mutex;

use async_trait::async_trait;
use bytes::Bytes;
use serde_json::Value;

use super::{ErrorKind, Registry, RegistryError};
use crate::base::reference::RepositoryName;
use crate::base::util::sha256_digest;

/// One repository's content.
#[derive(Debug, Default, Clone)]
pub struct Repository {
    /// digest → bytes.
    pub blobs: BTreeMap<String, Bytes>,
    /// digest → (media type, bytes).
    pub manifests: BTreeMap<String, (String, Bytes)>,
    /// tag → digest.
    pub tags: BTreeMap<String, String>,
}

/// A registry operation, as logged and as offered to the fault hook.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Op {
    /// `blob_exists`, `push_blob`, `mount_blob`, `pull_blob`, `push_manifest`, `pull_manifest`,
    /// `manifest_digest`.
    pub kind: &'static str,
    /// `registry/path`.
    pub repo: String,
    /// The digest or tag.
    pub reference: String,
    /// The body of a `push_manifest`; empty for the other operations.
    pub body: Bytes,
}

impl Op {
    /// Whether this pushes a manifest carrying `subject` (an OCI 1.1 referrer), the kind a
    /// registry without support for it refuses (oras-project/oras#738).
    pub fn carries_subject(&self) -> bool {
        self.kind == "push_manifest"
            && serde_json::from_slice::<Value>(&self.body)
                .is_ok_and(|v| v.get("subject").is_some_and(|s| !s.is_null()))
    }
}

impl std::fmt::Display for Op {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{} {}", self.kind, self.reference)
    }
}

type Hook = Box<dyn Fn(&Op) -> Option<ErrorKind> + Send + Sync>;

/// The in-process registry; see the module documentation.
#[derive(Default)]
pub struct MemoryRegistry {
    repos: Mutex<BTreeMap<String, Repository>>,
    log: Mutex<Vec<Op>>,
    hook: Mutex<Option<Hook>>,
    api: Mutex<Option<ReferrersApi>>,
    immutable_tags: std::sync::atomic::AtomicBool,
}

/// How the in-process registry answers the referrers API (distribution-spec v1.1 "Listing
/// Referrers": every manifest in the repository whose `subject` is the digest), with the quirks
/// registries have.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ReferrersApi {
    /// Descriptors per page (0: one page); a page links the next as `page=<n>`.
    pub page_size: usize,
    /// List the config's media type as every `artifactType`, as Harbor does
    /// (goharbor/harbor#19867).
    pub config_type_as_artifact_type: bool,
    /// Link every page to page 1 again (a registry paging in a loop).
    pub loop_pages: bool,
}

impl MemoryRegistry {
    /// An empty registry.
    pub fn new() -> Self {
        Self::default()
    }

    /// Fails every operation for which `hook` returns an error kind (checked before the
    /// operation runs; a failed operation changes nothing).
    pub fn fail_when(&self, hook: impl Fn(&Op) -> Option<ErrorKind> + Send + Sync + 'static) {
        *self.hook.lock().expect("hook lock") = Some(Box::new(hook));
    }

    /// Gives the registry the referrers API, answering as `api` says (`None`: it has none, and
    /// the tag schema is read instead, as from distribution 2.8).
    pub fn set_referrers_api(&self, api: Option<ReferrersApi>) {
        *self.api.lock().expect("api lock") = api;
    }

    /// Keeps every tag immutable once pushed, as a Harbor tag-immutability rule on `**` or ECR's
    /// `IMMUTABLE` does: a push to an existing tag is refused (412, Harbor's message), even of
    /// the same manifest.
    pub fn set_immutable_tags(&self, on: bool) {
        self.immutable_tags
            .store(on, std::sync::atomic::Ordering::SeqCst);
    }

    /// Removes the fault hook.
    pub fn heal(&self) {
        *self.hook.lock().expect("hook lock") = None;
    }

    /// Every operation so far, in order.
    pub fn log(&self) -> Vec<Op> {
        self.log.lock().expect("log lock").clone()
    }

    /// A copy of a repository's content.
    pub fn repository(&self, repo: &RepositoryName) -> Repository {
        self.repos
            .lock()
            .expect("repos lock")
            .get(&repo.to_string())
            .cloned()
            .unwrap_or_default()
    }

    /// Points `tag` at `digest` (or deletes it with `None`) behind the client's back, as someone
    /// retagging by hand would.
    pub fn set_tag(&self, repo: &RepositoryName, tag: &str, digest: Option<&str>) {
        let mut repos = self.repos.lock().expect("repos lock");
        let r = repos.entry(repo.to_string()).or_default();
        match digest {
            Some(d) => r.tags.insert(tag.to_string(), d.to_string()),
            None => r.tags.remove(tag),
        };
    }

    /// Deletes a manifest by digest (and every tag pointing at it).
    pub fn delete_manifest(&self, repo: &RepositoryName, digest: &str) {
        let mut repos = self.repos.lock().expect("repos lock");
        if let Some(r) = repos.get_mut(&repo.to_string()) {
            r.manifests.remove(digest);
            r.tags.retain(|_, d| d != digest);
        }
    }

    fn enter(
        &self,
        kind: &'static str,
        repo: &RepositoryName,
        reference: &str,
    ) -> Result<(), RegistryError> {
        self.enter_with(kind, repo, reference, Bytes::new())
    }

    fn enter_with(
        &self,
        kind: &'static str,
        repo: &RepositoryName,
        reference: &str,
        body: Bytes,
    ) -> Result<(), RegistryError> {
        let op = Op {
            kind,
            repo: repo.to_string(),
            reference: reference.to_string(),
            body,
        };
        self.log.lock().expect("log lock").push(op.clone());
        match self
            .hook
            .lock()
            .expect("hook lock")
            .as_ref()
            .and_then(|h| h(&op))
        {
            Some(kind) => Err(err(repo, &op.to_string(), "injected fault", kind)),
            None => Ok(()),
        }
    }
}

fn err(repo: &RepositoryName, operation: &str, message: &str, kind: ErrorKind) -> RegistryError {
    RegistryError {
        registry: repo.registry.clone(),
        operation: operation.to_string(),
        message: message.to_string(),
        kind,
    }
}

/// The digests a manifest body requires to be present: (blobs, manifests).
fn references(body: &[u8]) -> (Vec<String>, Vec<String>) {
    let v: Value = serde_json::from_slice(body).unwrap_or(Value::Null);
    let digests = |key: &str| -> Vec<String> {
        v[key]
            .as_array()
            .map(|a| {
                a.iter()
                    .filter_map(|d| d["digest"].as_str().map(str::to_string))
                    .collect()
            })
            .unwrap_or_default()
    };
    let mut blobs = digests("layers");
    blobs.extend(v["config"]["digest"].as_str().map(str::to_string));
    (blobs, digests("manifests"))
}

#[async_trait]
impl Registry for MemoryRegistry {
    async fn blob_exists(
        &self,
        repo: &RepositoryName,
        digest: &str,
    ) -> Result<bool, RegistryError> {
        self.enter("blob_exists", repo, digest)?;
        Ok(self.repository(repo).blobs.contains_key(digest))
    }

    async fn push_blob(
        &self,
        repo: &RepositoryName,
        digest: &str,
        data: Bytes,
    ) -> Result<(), RegistryError> {
        self.enter("push_blob", repo, digest)?;
        if sha256_digest(&data) != digest {
            return Err(err(repo, "push blob", "DIGEST_INVALID", ErrorKind::Other));
        }
        let mut repos = self.repos.lock().expect("repos lock");
        repos
            .entry(repo.to_string())
            .or_default()
            .blobs
            .insert(digest.to_string(), data);
        Ok(())
    }

    async fn check_push(&self, repo: &RepositoryName) -> Result<(), RegistryError> {
        self.enter("check_push", repo, "")
    }

    async fn mount_blob(&self, repo: &RepositoryName, from: &RepositoryName, digest: &str) -> bool {
        if self.enter("mount_blob", repo, digest).is_err() || repo.registry != from.registry {
            return false;
        }
        let Some(data) = self.repository(from).blobs.get(digest).cloned() else {
            return false;
        };
        let mut repos = self.repos.lock().expect("repos lock");
        repos
            .entry(repo.to_string())
            .or_default()
            .blobs
            .insert(digest.to_string(), data);
        true
    }

    async fn pull_blob(&self, repo: &RepositoryName, digest: &str) -> Result<Bytes, RegistryError> {
        self.enter("pull_blob", repo, digest)?;
        self.repository(repo)
            .blobs
            .get(digest)
            .cloned()
            .ok_or_else(|| err(repo, "pull blob", "BLOB_UNKNOWN", ErrorKind::NotFound))
    }

    async fn push_manifest(
        &self,
        repo: &RepositoryName,
        reference: &str,
        media_type: &str,
        body: Bytes,
    ) -> Result<(), RegistryError> {
        self.enter_with("push_manifest", repo, reference, body.clone())?;
        let declared: Value = serde_json::from_slice(&body).unwrap_or(Value::Null);
        if declared["mediaType"].as_str() != Some(media_type) {
            return Err(err(
                repo,
                "push manifest",
                "MANIFEST_INVALID: content type",
                ErrorKind::Other,
            ));
        }
        let digest = sha256_digest(&body);
        if reference.starts_with("sha256:") && reference != digest {
            return Err(err(
                repo,
                "push manifest",
                "DIGEST_INVALID",
                ErrorKind::Other,
            ));
        }
        let current = self.repository(repo);
        if !reference.starts_with("sha256:")
            && current.tags.contains_key(reference)
            && self
                .immutable_tags
                .load(std::sync::atomic::Ordering::SeqCst)
        {
            return Err(err(
                repo,
                "push manifest",
                &format!(
                    "412 Precondition Failed: The image {}:{reference} configured as immutable, cannot be updated",
                    repo.path
                ),
                ErrorKind::Refused,
            ));
        }
        let (blobs, manifests) = references(&body);
        let missing: BTreeSet<&String> = blobs
            .iter()
            .filter(|d| !current.blobs.contains_key(*d))
            .chain(
                manifests
                    .iter()
                    .filter(|d| !current.manifests.contains_key(*d)),
            )
            .collect();
        if !missing.is_empty() {
            return Err(err(
                repo,
                "push manifest",
                &format!(
                    "MANIFEST_BLOB_UNKNOWN: {}",
                    crate::base::util::join(missing)
                ),
                ErrorKind::Other,
            ));
        }
        let mut repos = self.repos.lock().expect("repos lock");
        let r = repos.entry(repo.to_string()).or_default();
        r.manifests
            .insert(digest.clone(), (media_type.to_string(), body));
        if !reference.starts_with("sha256:") {
            r.tags.insert(reference.to_string(), digest);
        }
        Ok(())
    }

    async fn pull_manifest(
        &self,
        repo: &RepositoryName,
        reference: &str,
    ) -> Result<Bytes, RegistryError> {
        self.enter("pull_manifest", repo, reference)?;
        let r = self.repository(repo);
        let digest = r
            .tags
            .get(reference)
            .cloned()
            .unwrap_or_else(|| reference.to_string());
        r.manifests
            .get(&digest)
            .map(|(_, b)| b.clone())
            .ok_or_else(|| {
                err(
                    repo,
                    "pull manifest",
                    "MANIFEST_UNKNOWN",
                    ErrorKind::NotFound,
                )
            })
    }

    async fn manifest_digest(
        &self,
        repo: &RepositoryName,
        reference: &str,
    ) -> Result<Option<String>, RegistryError> {
        self.enter("manifest_digest", repo, reference)?;
        let r = self.repository(repo);
        let digest = r
            .tags
            .get(reference)
            .cloned()
            .unwrap_or_else(|| reference.to_string());
        Ok(r.manifests.contains_key(&digest).then_some(digest))
    }

    async fn referrers_page(
        &self,
        repo: &RepositoryName,
        subject: &str,
        next: Option<&str>,
    ) -> Result<super::referrers::ReferrersPage, RegistryError> {
        use super::referrers::{ReferrersPage, Source, tag_schema_page};
        self.enter("referrers", repo, subject)?;
        let Some(api) = *self.api.lock().expect("api lock") else {
            return tag_schema_page(self, repo, subject).await;
        };
        let all: Vec<crate::image::spec::Descriptor> = self
            .repository(repo)
            .manifests
            .iter()
            .filter_map(|(digest, (media_type, body))| {
                let v: Value = serde_json::from_slice(body).ok()?;
                (v["subject"]["digest"].as_str() == Some(subject)).then(|| {
                    let declared = v["artifactType"]
                        .as_str()
                        .or_else(|| v["config"]["mediaType"].as_str());
                    let listed = if api.config_type_as_artifact_type {
                        v["config"]["mediaType"].as_str()
                    } else {
                        declared
                    };
                    crate::image::spec::Descriptor {
                        media_type: media_type.clone(),
                        digest: digest.clone(),
                        size: body.len() as u64,
                        platform: None,
                        artifact_type: listed.map(String::from),
                        annotations: serde_json::from_value(v["annotations"].clone())
                            .unwrap_or_default(),
                        urls: Vec::new(),
                    }
                })
            })
            .collect();
        let size = if api.page_size == 0 {
            all.len().max(1)
        } else {
            api.page_size
        };
        let page: usize = next
            .and_then(|n| n.strip_prefix("page="))
            .and_then(|n| n.parse().ok())
            .unwrap_or(0);
        let more = (page + 1) * size < all.len();
        Ok(ReferrersPage {
            manifests: all.into_iter().skip(page * size).take(size).collect(),
            next: match (more, api.loop_pages) {
                (_, true) => Some("page=1".into()),
                (true, false) => Some(format!("page={}", page + 1)),
                (false, false) => None,
            },
            source: Source::Api,
            unreadable: false,
            tag_schema: None,
        })
    }
}
