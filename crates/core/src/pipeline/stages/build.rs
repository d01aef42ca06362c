//! The `build` stage: OCCM cross-compiled for every platform with upstream's ldflags.

use std::path::Path;

use async_trait::async_trait;

use crate::config::Platform;
use crate::pipeline::Error;
use crate::pipeline::go::Toolchain;
use crate::pipeline::go::build::{self, Binary};
use crate::pipeline::stage::{Done, Stage, StageContext};

/// Builds `./cmd/openstack-cloud-controller-manager` of `dir` for `platforms` into `out_dir`.
pub struct BuildStage<'a> {
    /// The patched work tree.
    pub dir: &'a Path,
    /// Toolchain and caches.
    pub toolchain: &'a Toolchain,
    /// The version stamped into the binary (`BuildPlan::binary_version`).
    pub version: String,
    /// Target platforms.
    pub platforms: &'a [Platform],
    /// Where the binaries go.
    pub out_dir: &'a Path,
}

impl<'a> BuildStage<'a> {
    /// The build stage of `plan` on `tree`, writing into `out_dir`.
    pub fn of(
        plan: &'a crate::pipeline::plan::BuildPlan,
        tree: &'a crate::pipeline::source::SourceTree,
        out_dir: &'a Path,
    ) -> Self {
        BuildStage {
            dir: &tree.path,
            toolchain: &plan.toolchain,
            version: plan.binary_version(),
            platforms: &plan.platforms,
            out_dir,
        }
    }
}

#[async_trait]
impl Stage for BuildStage<'_> {
    type Output = Vec<Binary>;

    fn name(&self) -> &'static str {
        "build"
    }

    async fn run(self, _: &StageContext<'_>) -> Result<Done<Vec<Binary>>, Error> {
        let binaries = build::build(&build::BuildRequest {
            dir: self.dir,
            toolchain: self.toolchain,
            version: &self.version,
            platforms: self.platforms,
            out_dir: self.out_dir,
        })?;
        let detail = format!(
            "{} ({})",
            self.version,
            crate::base::util::join(self.platforms.iter())
        );
        Ok(Done::new(binaries, detail))
    }
}
