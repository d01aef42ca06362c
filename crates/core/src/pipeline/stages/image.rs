//! The `image` stage: the base resolved (built in, or pulled by digest) and the OCI image
//! assembled into the layout.

use std::path::PathBuf;

use async_trait::async_trait;

use crate::config::Platform;
use crate::image::base::{self, ResolvedBase};
use crate::image::{self, BuiltImage};
use crate::pipeline::Error;
use crate::pipeline::go::build::Binary;
use crate::pipeline::plan::{BaseSpec, BuildPlan};
use crate::pipeline::stage::{Done, Stage, StageContext};
use crate::registry::{Registry, pull};

/// What the image stage hands on: the image and the base it was stacked on.
#[derive(Debug, Clone)]
pub struct Imaged {
    /// The assembled image, all of whose blobs are in the layout.
    pub image: BuiltImage,
    /// The base, resolved for every platform.
    pub base: ResolvedBase,
}

/// Assembles `plan`'s image from `binaries` into `plan.output`.
pub struct ImageStage<'a> {
    /// The build plan (base, platforms, tag, labels, layout).
    pub plan: &'a BuildPlan,
    /// Where a pulled base comes from.
    pub registry: &'a dyn Registry,
    /// One binary per platform.
    pub binaries: &'a [Binary],
    /// Seconds since the epoch for every time in the image.
    pub epoch: i64,
    /// The upstream commit (`org.opencontainers.image.revision`).
    pub revision: &'a str,
}

#[async_trait]
impl Stage for ImageStage<'_> {
    type Output = Imaged;

    fn name(&self) -> &'static str {
        "image"
    }

    async fn run(self, _: &StageContext<'_>) -> Result<Done<Imaged>, Error> {
        let plan = self.plan;
        let base = match &plan.base {
            BaseSpec::Static => base::static_base(&plan.platforms, self.epoch)?,
            BaseSpec::Image(r) => {
                pull::pull_base(
                    self.registry,
                    r,
                    &plan.base_text,
                    &plan.platforms,
                    &plan.cache_dir.join("blobs"),
                    plan.allow_unpinned_base,
                )
                .await?
            }
        };
        let binaries: Vec<(Platform, PathBuf)> = self
            .binaries
            .iter()
            .map(|b| (b.platform.clone(), b.path.clone()))
            .collect();
        let image = image::assemble(&image::ImageRequest {
            program: &crate::image::OCCM,
            binaries: &binaries,
            base: &base,
            tag: &plan.tag,
            epoch: self.epoch,
            source: &plan.upstream,
            revision: self.revision,
            layout_dir: &plan.output,
            layer_cache: Some(&plan.cache_dir),
        })?;
        let detail = format!("{} in {}", image.index.digest, plan.output.display());
        Ok(Done::new(Imaged { image, base }, detail))
    }
}
