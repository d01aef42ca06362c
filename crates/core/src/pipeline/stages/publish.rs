//! The `publish` stage (`--push`): the image and its referrers, pushed in the order registries
//! require, the tag last (`registry::publish`).

use async_trait::async_trait;

use crate::base::reference::RepositoryName;
use crate::image::BuiltImage;
use crate::image::referrer::Attachment;
use crate::pipeline::Error;
use crate::pipeline::stage::{Done, Stage, StageContext};
use crate::registry::publish::{ReferrersMode, ReferrersPushed};
use crate::registry::{ErrorKind, Registry, RegistryError, publish};

/// Pushes `image` and `attachments` to `repo`.
pub struct PublishStage<'a> {
    /// The registry client.
    pub registry: &'a dyn Registry,
    /// The target repository.
    pub repo: &'a RepositoryName,
    /// The image (its blobs are in its layout).
    pub image: &'a BuiltImage,
    /// SBOM and provenance referrers in the same layout.
    pub attachments: &'a [Attachment],
    /// What the registry served under the tag before the build (preflight), if anything.
    pub served_before: Option<&'a str>,
    /// Push even when the tag serves another digest.
    pub replace_tag: bool,
    /// The minor (for the "bump revision" hint).
    pub minor: crate::config::Minor,
    /// How the referrers are pushed (`--referrers`).
    pub referrers: ReferrersMode,
}

#[async_trait]
impl Stage for PublishStage<'_> {
    type Output = publish::Published;

    fn name(&self) -> &'static str {
        "publish"
    }

    fn blocking(&self) -> bool {
        false
    }

    async fn run(self, cx: &StageContext<'_>) -> Result<Done<publish::Published>, Error> {
        let image = self.image;
        if let Some(d) = self.served_before
            && d != image.index.digest
            && !self.replace_tag
        {
            return Err(Error::Publish(RegistryError {
                registry: self.repo.registry.clone(),
                operation: format!("push {}:{}", self.repo.path, image.tag),
                message: format!(
                    "the tag already serves {d}, another image than this build's {}; tags never move: bump `revision` for {} (or pass --replace-tag)",
                    image.index.digest, self.minor
                ),
                kind: ErrorKind::Other,
            }));
        }
        let on_bytes = |bytes: u64, total: u64| cx.reporter.uploaded(bytes, total);
        let published = publish::publish(
            self.registry,
            self.repo,
            image,
            self.attachments,
            self.referrers,
            &on_bytes,
        )
        .await
        .map_err(Error::Publish)?;
        let n = published.attachments.len();
        let referrers = match (published.referrers, &published.refused) {
            (ReferrersPushed::Subject, _) => format!("{n} referrers (OCI 1.1, with subject)"),
            (ReferrersPushed::TagSchema, refused) => format!(
                "{n} referrers without subject, listed under sha256-<hex> tags: the registry refuses `subject` ({})",
                refused.as_deref().unwrap_or("")
            ),
            (ReferrersPushed::Skipped, _) => {
                "no referrers pushed (--referrers=skip; the SBOM and provenance are in the layout)"
                    .to_string()
            }
        };
        let detail = format!(
            "{} ({} blobs uploaded, {} already present, {} mounted; {referrers})",
            published.reference, published.uploaded, published.skipped, published.mounted
        );
        Ok(Done::new(published, detail))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::pipeline::stage::Silent;
    use crate::registry::memory::MemoryRegistry;
    use crate::testing;

    fn stage<'a>(
        reg: &'a MemoryRegistry,
        f: &'a testing::FixtureImage,
        served_before: Option<&'a str>,
        replace_tag: bool,
    ) -> PublishStage<'a> {
        PublishStage {
            registry: reg,
            repo: &f.repo,
            image: &f.image,
            attachments: &f.attachments,
            served_before,
            replace_tag,
            minor: "1.34".parse().unwrap(),
            referrers: ReferrersMode::Fallback,
        }
    }

    #[tokio::test]
    async fn a_tag_serving_another_image_is_never_moved_unless_asked() {
        let f = testing::image("v1.34.1-occmforge.1");
        let reg = MemoryRegistry::new();
        let cx = StageContext { reporter: &Silent };
        let other = format!("sha256:{}", "f".repeat(64));
        let e = stage(&reg, &f, Some(&other), false)
            .run(&cx)
            .await
            .unwrap_err();
        assert_eq!(e.exit_code(), 8);
        let text = e.to_string();
        assert!(
            text.starts_with("publish: registry registry.example: push occm/openstack-cloud-controller-manager:v1.34.1-occmforge.1: the tag already serves sha256:ffff"),
            "{text}"
        );
        assert!(text.contains("bump `revision` for 1.34"), "{text}");
        assert!(reg.log().is_empty(), "nothing was pushed");

        // The same digest is a rerun; --replace-tag moves it on purpose.
        let digest = f.image.index.digest.clone();
        let done = stage(&reg, &f, Some(&digest), false)
            .run(&cx)
            .await
            .unwrap();
        assert!(
            done.detail
                .ends_with("3 referrers (OCI 1.1, with subject))"),
            "{}",
            done.detail
        );
        stage(&reg, &f, Some(&other), true).run(&cx).await.unwrap();
    }

    #[tokio::test]
    async fn a_failed_referrer_leaves_the_tag_where_it_was() {
        let f = testing::image("v1.34.1-occmforge.1");
        let reg = MemoryRegistry::new();
        let cx = StageContext { reporter: &Silent };
        // The tag serves an older image; this build replaces it on purpose.
        let old = testing::image("v1.34.1-occmforge.0");
        old.publish_as(&reg, &f.repo, &old.attachments, ReferrersMode::Fallback)
            .await
            .unwrap();
        reg.set_tag(
            &f.repo,
            "v1.34.1-occmforge.1",
            Some(&old.image.index.digest),
        );
        let provenance = f.attachments[2].manifest.digest.clone();
        reg.fail_when(move |op| {
            (op.kind == "push_manifest" && op.reference == provenance)
                .then_some(ErrorKind::Transient)
        });
        let served = old.image.index.digest.clone();
        let e = stage(&reg, &f, Some(&served), true)
            .run(&cx)
            .await
            .unwrap_err();
        assert_eq!(e.exit_code(), 8);
        assert_eq!(
            reg.repository(&f.repo).tags["v1.34.1-occmforge.1"],
            old.image.index.digest,
            "the tag moved before the referrers were in"
        );
        // The new index is there by digest; the tag is the one write left.
        assert!(
            reg.repository(&f.repo)
                .manifests
                .contains_key(&f.image.index.digest)
        );
        reg.heal();
        stage(&reg, &f, Some(&served), true).run(&cx).await.unwrap();
        let pushes: Vec<String> = reg
            .log()
            .into_iter()
            .filter(|op| op.kind == "push_manifest")
            .map(|op| op.reference)
            .collect();
        assert_eq!(
            pushes.last().map(String::as_str),
            Some("v1.34.1-occmforge.1"),
            "{pushes:?}"
        );
        assert_eq!(
            reg.repository(&f.repo).tags["v1.34.1-occmforge.1"],
            f.image.index.digest
        );
    }
}
