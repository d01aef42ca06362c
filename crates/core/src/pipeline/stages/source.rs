//! The `source` stage: the pinned upstream tag checked out into a scratch work tree.

use std::path::Path;

use async_trait::async_trait;

use crate::pipeline::Error;
use crate::pipeline::source::{self, SourceTree};
use crate::pipeline::stage::{Done, Stage, StageContext};

/// Fetches `tag` from `url` into the shared object store, refuses a moved tag, checks out.
pub struct SourceStage<'a> {
    /// Git URL or local path (`--source` or images.toml `upstream`).
    pub url: &'a str,
    /// Upstream tag.
    pub tag: &'a str,
    /// The commit images.toml pins.
    pub commit: &'a str,
    /// The images.toml that pins it (for messages).
    pub config: &'a str,
    /// occm-forge's cache directory (the object store lives in `<cache>/git`).
    pub cache_dir: &'a Path,
    /// Where the work tree goes.
    pub tree_dir: &'a Path,
    /// The work tree already there, holding the pinned commit with the series applied
    /// (`worktree::prepared`): kept once the pin is checked.
    pub prepared: Option<&'a SourceTree>,
}

impl<'a> SourceStage<'a> {
    /// The source stage of `plan`, checking out into `tree_dir`.
    pub fn of(plan: &'a crate::pipeline::plan::BuildPlan, tree_dir: &'a Path) -> Self {
        SourceStage {
            url: &plan.fetch_from,
            tag: &plan.upstream_tag,
            commit: &plan.commit,
            config: &plan.config_name,
            cache_dir: &plan.cache_dir,
            tree_dir,
            prepared: None,
        }
    }

    /// What the source module is asked: this stage's URL, tag, pin and directories.
    pub fn request(&self) -> source::SourceRequest<'a> {
        source::SourceRequest {
            url: self.url,
            tag: self.tag,
            pinned_commit: self.commit,
            config: self.config,
            cache_dir: self.cache_dir,
            tree_dir: self.tree_dir,
        }
    }
}

#[async_trait]
impl Stage for SourceStage<'_> {
    type Output = SourceTree;

    fn name(&self) -> &'static str {
        "source"
    }

    async fn run(self, _: &StageContext<'_>) -> Result<Done<SourceTree>, Error> {
        let req = self.request();
        if let Some(tree) = self.prepared {
            source::check_pin(&req)?;
            let detail = format!(
                "{} at {} (matches the pin; work tree kept: unchanged since it was patched)",
                self.tag,
                &tree.commit[..12]
            );
            return Ok(Done::new(tree.clone(), detail));
        }
        let tree = source::checkout(&req)?;
        let detail = format!("{} at {} (matches the pin)", self.tag, &tree.commit[..12]);
        Ok(Done::new(tree, detail))
    }
}
