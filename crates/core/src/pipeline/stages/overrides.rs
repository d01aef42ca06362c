//! The `overrides` stage: images.toml `go_overrides` set in upstream's go.mod after the series
//! (`go::overrides`); it runs only for a minor that has overrides.

use std::collections::BTreeMap;
use std::path::Path;

use async_trait::async_trait;

use crate::pipeline::Error;
use crate::pipeline::go::Toolchain;
use crate::pipeline::go::overrides::{self, MovedRequirement};
use crate::pipeline::stage::{Done, Stage, StageContext};

/// Checks the overrides against upstream's go.mod and the module proxy, then applies them.
pub struct OverridesStage<'a> {
    /// The patched work tree.
    pub dir: &'a Path,
    /// The upstream tag (for messages).
    pub upstream_tag: &'a str,
    /// Toolchain and caches.
    pub toolchain: &'a Toolchain,
    /// Module path → version.
    pub overrides: &'a BTreeMap<String, String>,
    /// The test packages, whose go.sum entries are resolved with the build's.
    pub packages: &'a [String],
}

#[async_trait]
impl Stage for OverridesStage<'_> {
    type Output = Vec<MovedRequirement>;

    fn name(&self) -> &'static str {
        "overrides"
    }

    async fn run(self, _: &StageContext<'_>) -> Result<Done<Vec<MovedRequirement>>, Error> {
        let moved = tokio::task::block_in_place(|| {
            overrides::check(self.toolchain, self.dir, self.upstream_tag, self.overrides)?;
            overrides::apply(self.toolchain, self.dir, self.overrides, self.packages)
        })?;
        let raised = moved.len().saturating_sub(self.overrides.len());
        let detail = format!(
            "{} set ({}){}",
            self.overrides.len(),
            self.overrides
                .iter()
                .map(|(m, v)| format!("{m}@{v}"))
                .collect::<Vec<_>>()
                .join(", "),
            if raised > 0 {
                format!("; {raised} more raised with them by Go's version selection")
            } else {
                String::new()
            }
        );
        for m in &moved {
            tracing::info!("go.mod: {m}");
        }
        Ok(Done::new(moved, detail))
    }
}
