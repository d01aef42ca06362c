//! Reading the referrers of a subject as every reader needs them (`manifest record-signatures`,
//! `verify`, `copy`, publish's merge): [`list`] follows the referrers API's pages and corrects
//! what registries get wrong in the listing; [`read_tag_schema`] reads the tag-schema index
//! `sha256-<hex>` of registries without the API, refusing what is not one.
//!
//! Sources: distribution-spec v1.1 "Listing Referrers" (`GET /v2/<name>/referrers/<digest>`,
//! paged with `Link: <…>; rel="next"` as RFC 8288 writes it, each descriptor's `artifactType`
//! being the manifest's `artifactType`, else its config's `mediaType`) and "Referrers Tag Schema".
//! Registries' quirks handled here: Harbor lists the config media type
//! (`application/vnd.oci.empty.v1+json`) as every referrer's `artifactType` (goharbor/harbor#19867);
//! some registries page the listing (google/go-containerregistry#2446, oras-project/oras-go#841);
//! GitLab answers the tag `sha256-<hex>` with the subject itself (oras-project/oras-go#1396).

use std::collections::BTreeSet;

use bytes::Bytes;

use super::{ErrorKind, Registry, RegistryError, if_present};
use crate::base::reference::RepositoryName;
use crate::base::util::{sha256_digest, short};
use crate::image::referrer::{EMPTY_MEDIA_TYPE, fallback_tag};
use crate::image::spec::{self, Descriptor, Index};

/// The most pages [`list`] reads for one subject; a registry that pages further is refused.
pub const MAX_PAGES: usize = 64;

/// Where a page of referrers came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Source {
    /// The referrers API answered.
    Api,
    /// The registry has no referrers API (it answered 404); the tag schema's index, if any.
    TagSchema,
}

/// One page of a subject's referrers, as [`Registry::referrers_page`] returns it.
#[derive(Debug, Clone)]
pub struct ReferrersPage {
    /// The descriptors on this page, as the registry listed them.
    pub manifests: Vec<Descriptor>,
    /// The next page: the `rel="next"` target of the answer's `Link` header, resolved against
    /// the request's URL (absolute). `None` on the last page.
    pub next: Option<String>,
    /// API or tag schema.
    pub source: Source,
    /// The tag-schema index's exact bytes, on a [`Source::TagSchema`] page that has one (what a
    /// writer merges into and compares with).
    pub tag_schema: Option<Bytes>,
    /// A [`Source::TagSchema`] page of a registry whose tag `sha256-<hex>` serves the subject
    /// itself (GitLab, oras-project/oras-go#1396): it has no referrers API and its tag-schema
    /// index cannot be read back, so no referrer can be listed there at all.
    pub unreadable: bool,
}

/// Every page of a subject's referrers, as [`list`] returns them.
#[derive(Debug, Clone)]
pub struct Listing {
    /// The descriptors of every page, in order.
    pub manifests: Vec<Descriptor>,
    /// API or tag schema.
    pub source: Source,
    /// The tag-schema index's exact bytes, when the listing is the tag schema's.
    pub tag_schema: Option<Bytes>,
    /// No referrer can be listed on this registry ([`ReferrersPage::unreadable`]): an empty
    /// listing says nothing of what is there; readers check the referrers they know of by
    /// digest instead.
    pub unreadable: bool,
}

/// What a subject's referrers tag-schema tag `sha256-<hex>` serves.
#[derive(Debug, Clone)]
pub enum TagSchema {
    /// Nothing.
    Absent,
    /// A referrers index: its exact bytes, parsed.
    Index(Bytes, Box<Index>),
    /// The subject itself: the registry resolves the tag as the digest (GitLab).
    Subject,
    /// Something that is not an OCI image index.
    Other,
}

/// The page of a registry without the referrers API: its tag-schema index
/// ([`read_tag_schema`]), or nothing.
///
/// # Errors
/// The registry cannot be asked.
pub async fn tag_schema_page<R: Registry + ?Sized>(
    registry: &R,
    repo: &RepositoryName,
    subject: &str,
) -> Result<ReferrersPage, RegistryError> {
    let state = tag_schema(registry, repo, subject).await?;
    let unreadable = matches!(state, TagSchema::Subject);
    let (tag_schema, manifests) = match said(state, repo, subject) {
        Some((bytes, index)) => (Some(bytes), index.manifests),
        None => (None, Vec::new()),
    };
    Ok(ReferrersPage {
        manifests,
        next: None,
        source: Source::TagSchema,
        tag_schema,
        unreadable,
    })
}

/// Every referrer of `subject` (a `sha256:` digest) in `repo`: all pages of the referrers API
/// (at most [`MAX_PAGES`], a page never read twice), or the tag schema's index where the registry
/// has no API ([`pages`]). A descriptor without `artifactType`, or with the empty config's media
/// type as its `artifactType` (Harbor), gets the one its manifest declares (its `artifactType`,
/// else its config's `mediaType`; left as listed when the manifest is gone).
///
/// # Errors
/// As [`pages`].
pub async fn list(
    registry: &dyn Registry,
    repo: &RepositoryName,
    subject: &str,
) -> Result<Listing, RegistryError> {
    let mut listing = pages(registry, repo, subject).await?;
    for d in &mut listing.manifests {
        if d.artifact_type
            .as_deref()
            .is_none_or(|t| t == EMPTY_MEDIA_TYPE)
            && let Some(t) = declared_artifact_type(registry, repo, &d.digest).await?
        {
            d.artifact_type = Some(t);
        }
    }
    Ok(listing)
}

/// Every page of `subject`'s referrers as the registry lists them (no correction): the
/// referrers API's pages, or the tag schema's index where there is no API.
///
/// # Errors
/// The registry cannot be asked; a page repeats or the pages go on past [`MAX_PAGES`] (one line
/// naming the registry and the subject).
pub async fn pages(
    registry: &dyn Registry,
    repo: &RepositoryName,
    subject: &str,
) -> Result<Listing, RegistryError> {
    let refused = |message: String| RegistryError {
        registry: repo.registry.clone(),
        operation: format!("list the referrers of {}", short(subject)),
        message,
        kind: ErrorKind::Refused,
    };
    let mut page = registry.referrers_page(repo, subject, None).await?;
    let mut out = Listing {
        manifests: Vec::new(),
        source: page.source,
        tag_schema: page.tag_schema.take(),
        unreadable: page.unreadable,
    };
    let mut seen = BTreeSet::new();
    loop {
        out.manifests.append(&mut page.manifests);
        let Some(next) = page.next.take() else { break };
        if !seen.insert(next.clone()) {
            return Err(refused(format!(
                "the referrers API pages in a loop (page {next} again)"
            )));
        }
        if seen.len() >= MAX_PAGES {
            return Err(refused(format!(
                "the referrers API has more than {MAX_PAGES} pages for one subject"
            )));
        }
        page = registry.referrers_page(repo, subject, Some(&next)).await?;
    }
    Ok(out)
}

/// The artifact type manifest `digest` declares: its `artifactType`, else its config's
/// `mediaType` (image-spec `manifest.md`); `None` when the registry no longer has it.
async fn declared_artifact_type(
    registry: &dyn Registry,
    repo: &RepositoryName,
    digest: &str,
) -> Result<Option<String>, RegistryError> {
    let Some(bytes) = if_present(registry.pull_manifest(repo, digest).await)? else {
        return Ok(None);
    };
    let v: serde_json::Value = serde_json::from_slice(&bytes).unwrap_or_default();
    let declared = v["artifactType"]
        .as_str()
        .or_else(|| v["config"]["mediaType"].as_str());
    Ok(declared.map(String::from))
}

/// The referrers tag-schema index of `subject` in `repo` (`sha256-<hex>`), bytes and parsed;
/// `None` when there is none, and when what the tag serves is not a referrers index: the subject
/// itself (GitLab resolves `sha256-<hex>` to the digest `sha256:<hex>`), or not an image index.
/// Either is logged as a warning, once per call, and never merged into.
///
/// # Errors
/// The registry cannot be asked.
pub async fn read_tag_schema<R: Registry + ?Sized>(
    registry: &R,
    repo: &RepositoryName,
    subject: &str,
) -> Result<Option<(Bytes, Index)>, RegistryError> {
    Ok(said(
        tag_schema(registry, repo, subject).await?,
        repo,
        subject,
    ))
}

/// What `subject`'s tag-schema tag serves in `repo` ([`TagSchema`]).
///
/// # Errors
/// The registry cannot be asked.
pub async fn tag_schema<R: Registry + ?Sized>(
    registry: &R,
    repo: &RepositoryName,
    subject: &str,
) -> Result<TagSchema, RegistryError> {
    let tag = fallback_tag(subject);
    let Some(bytes) = if_present(registry.pull_manifest(repo, &tag).await)? else {
        return Ok(TagSchema::Absent);
    };
    if sha256_digest(&bytes) == subject {
        return Ok(TagSchema::Subject);
    }
    Ok(match serde_json::from_slice::<Index>(&bytes) {
        Ok(index) if index.media_type.is_empty() || index.media_type == spec::OCI_INDEX => {
            TagSchema::Index(bytes, Box::new(index))
        }
        _ => TagSchema::Other,
    })
}

/// The index of `state`, the warning said for what is not one.
fn said(state: TagSchema, repo: &RepositoryName, subject: &str) -> Option<(Bytes, Index)> {
    let tag = fallback_tag(subject);
    match state {
        TagSchema::Index(bytes, index) => Some((bytes, *index)),
        TagSchema::Absent => None,
        TagSchema::Subject => {
            // Said once a registry and process: it holds for every subject there.
            static SAID: std::sync::Mutex<BTreeSet<String>> =
                std::sync::Mutex::new(BTreeSet::new());
            let first = SAID
                .lock()
                .map(|mut s| s.insert(repo.registry.clone()))
                .unwrap_or(true);
            if !first {
                return None;
            }
            tracing::warn!(
                "registry {} resolves the tag {tag} to the subject {} itself (as GitLab does): tag-schema indexes cannot be read back there, so where it has no referrers API either no referrer can be listed there (readers check the ones the digest manifest records by digest), and an index is written with only this run's referrers",
                repo.registry,
                short(subject)
            );
            None
        }
        TagSchema::Other => {
            tracing::warn!(
                "{repo}:{tag} is not a referrers index (not an OCI image index); it is not read as one and is replaced when referrers are written"
            );
            None
        }
    }
}

/// The target of the `rel="next"` link among `Link` header values, resolved against `request`;
/// `None` when there is none. A target on another host or scheme is refused (a registry must
/// not send its client's credentials elsewhere).
///
/// # Errors
/// The link is not a URL, or points to another origin.
pub fn next_link(request: &reqwest::Url, links: &[&str]) -> Result<Option<reqwest::Url>, String> {
    for value in links {
        for link in value.split(',') {
            let link = link.trim();
            let Some((target, params)) = link.strip_prefix('<').and_then(|l| l.split_once('>'))
            else {
                continue;
            };
            let next = params.split(';').any(|p| {
                let p = p.trim();
                p.strip_prefix("rel=")
                    .map(|r| r.trim_matches('"'))
                    .is_some_and(|r| r.split_whitespace().any(|r| r == "next"))
            });
            if !next {
                continue;
            }
            let url = request
                .join(target)
                .map_err(|e| format!("Link {target:?} is not a URL: {e}"))?;
            if url.origin() != request.origin() {
                return Err(format!(
                    "Link rel=\"next\" points to another host ({}); not followed",
                    url.origin().ascii_serialization()
                ));
            }
            return Ok(Some(url));
        }
    }
    Ok(None)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::image::referrer;
    use crate::registry::memory::{MemoryRegistry, ReferrersApi};
    use crate::registry::publish::ReferrersMode;

    /// The fixture image published with four referrers of its index (the provenance and three
    /// notes).
    async fn four_referrers() -> (crate::testing::FixtureImage, MemoryRegistry) {
        let f = crate::testing::image("v1.34.1-occmforge.1");
        let mut attachments = f.attachments.clone();
        for i in 0..3 {
            let note = format!("note {i}");
            attachments.push(
                referrer::attach(
                    &f.image.layout_dir,
                    &f.image.index,
                    "application/vnd.example.note",
                    note.as_bytes(),
                    0,
                )
                .unwrap(),
            );
        }
        let reg = MemoryRegistry::new();
        f.publish_as(&reg, &f.repo, &attachments, ReferrersMode::Fallback)
            .await
            .unwrap();
        (f, reg)
    }

    fn by_digest(mut d: Vec<Descriptor>) -> Vec<(String, Option<String>)> {
        d.sort_by(|a, b| a.digest.cmp(&b.digest));
        d.into_iter().map(|d| (d.digest, d.artifact_type)).collect()
    }

    #[tokio::test]
    async fn every_page_is_read_and_each_artifact_type_is_the_manifests_own() {
        let (f, reg) = four_referrers().await;
        let subject = &f.image.index.digest;
        let tag_schema = by_digest(list(&reg, &f.repo, subject).await.unwrap().manifests);
        assert_eq!(tag_schema.len(), 4);
        assert!(
            tag_schema
                .iter()
                .all(|(_, t)| t.as_deref() != Some(EMPTY_MEDIA_TYPE))
        );
        // An API paging one at a time and listing the config's type, as Harbor does.
        reg.set_referrers_api(Some(ReferrersApi {
            page_size: 1,
            config_type_as_artifact_type: true,
            loop_pages: false,
        }));
        let pages_before = reg.log().iter().filter(|o| o.kind == "referrers").count();
        let api = by_digest(list(&reg, &f.repo, subject).await.unwrap().manifests);
        assert_eq!(api, tag_schema);
        let pages = reg.log().iter().filter(|o| o.kind == "referrers").count() - pages_before;
        assert_eq!(pages, 4);
    }

    #[tokio::test]
    async fn a_registry_paging_in_a_loop_is_refused_in_one_line() {
        let (f, reg) = four_referrers().await;
        reg.set_referrers_api(Some(ReferrersApi {
            page_size: 1,
            config_type_as_artifact_type: false,
            loop_pages: true,
        }));
        let e = list(&reg, &f.repo, &f.image.index.digest)
            .await
            .unwrap_err()
            .to_string();
        assert!(
            e.starts_with("registry registry.example: list the referrers of sha256:")
                && e.ends_with("the referrers API pages in a loop (page page=1 again)"),
            "{e}"
        );
    }

    #[tokio::test]
    async fn a_tag_that_serves_the_subject_is_no_referrers_index_and_is_not_merged_into() {
        // GitLab resolves the tag sha256-<hex> to the manifest sha256:<hex>.
        let (f, reg) = crate::testing::published().await;
        let platform = &f.image.platforms[0].manifest.digest;
        reg.set_tag(&f.repo, &fallback_tag(platform), Some(platform));
        assert!(
            read_tag_schema(&reg, &f.repo, platform)
                .await
                .unwrap()
                .is_none()
        );
        assert!(
            list(&reg, &f.repo, platform)
                .await
                .unwrap()
                .manifests
                .is_empty()
        );
        // Writing the referrers again replaces it with a referrers index of its own.
        let sbom = f.attachments[0].manifest.clone();
        crate::registry::transfer::write_referrers_index(
            &reg,
            &f.repo,
            platform,
            std::slice::from_ref(&sbom),
            None,
            None,
        )
        .await
        .unwrap();
        let listed = list(&reg, &f.repo, platform).await.unwrap().manifests;
        assert_eq!(listed.len(), 1);
        assert_eq!(listed[0].digest, sbom.digest);
    }

    fn url(s: &str) -> reqwest::Url {
        reqwest::Url::parse(s).unwrap()
    }

    #[test]
    fn next_link_is_resolved_against_the_request_and_stays_on_its_host() {
        let req = url("https://r.example/v2/occm/referrers/sha256:ab?n=2");
        let got = next_link(
            &req,
            &[r#"</v2/occm/referrers/sha256:ab?n=2&last=x>; rel="next""#],
        )
        .unwrap()
        .unwrap();
        assert_eq!(
            got.as_str(),
            "https://r.example/v2/occm/referrers/sha256:ab?n=2&last=x"
        );
        // Another relation, then next, in one header; unquoted rel.
        let got = next_link(
            &req,
            &[r#"<https://r.example/docs>; rel="help", <?last=y>; rel=next"#],
        )
        .unwrap()
        .unwrap();
        assert_eq!(got.query(), Some("last=y"));
        assert_eq!(next_link(&req, &[r#"</a>; rel="prev""#]).unwrap(), None);
        assert_eq!(next_link(&req, &[]).unwrap(), None);
        let err = next_link(&req, &[r#"<https://evil.example/v2/x>; rel="next""#]).unwrap_err();
        assert!(err.contains("another host (https://evil.example)"), "{err}");
        let err = next_link(&req, &[r#"<http://r.example/v2/x>; rel="next""#]).unwrap_err();
        assert!(err.contains("another host"), "{err}");
    }
}
