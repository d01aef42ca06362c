//! The `patches` stage: the patch series applied and committed in the work tree.

use async_trait::async_trait;

use crate::pipeline::Error;
use crate::pipeline::patches::{self, AppliedPatch, PatchFile, PatchOutcome};
use crate::pipeline::source::SourceTree;
use crate::pipeline::stage::{Done, Stage, StageContext};

/// Applies `series` to `tree`; a patch already upstream is a warning and is skipped.
pub struct PatchStage<'a> {
    /// The checked-out tree.
    pub tree: &'a SourceTree,
    /// The series, in order.
    pub series: &'a [PatchFile],
    /// The upstream tag (for the "already upstream" warning).
    pub upstream_tag: &'a str,
    /// The outcomes recorded with a kept work tree (`worktree::prepared`): nothing is applied.
    pub prepared: Option<&'a [AppliedPatch]>,
}

#[async_trait]
impl Stage for PatchStage<'_> {
    type Output = Vec<AppliedPatch>;

    fn name(&self) -> &'static str {
        "patches"
    }

    async fn run(self, _: &StageContext<'_>) -> Result<Done<Vec<AppliedPatch>>, Error> {
        let kept = self.prepared.is_some();
        let applied = match self.prepared {
            Some(applied) => applied.to_vec(),
            None => {
                let applied =
                    patches::apply_series(&self.tree.path, self.series, self.tree.commit_time)?;
                crate::pipeline::source::stamp_mtimes(&self.tree.path, self.tree.commit_time);
                applied
            }
        };
        let upstreamed: Vec<&str> = applied
            .iter()
            .filter(|a| a.outcome == PatchOutcome::AlreadyUpstream)
            .map(|a| a.name.as_str())
            .collect();
        for name in &upstreamed {
            tracing::warn!(
                "patch {name}: already upstream in {} — drop it from the series",
                self.upstream_tag
            );
        }
        // A patch that applied only three-way is named, with what was merged per file.
        let three_way: Vec<String> = applied
            .iter()
            .filter_map(|a| match &a.outcome {
                PatchOutcome::AppliedThreeWay { files, .. } => Some(format!(
                    "{} applied three-way ({})",
                    a.name.split('-').next().unwrap_or(&a.name),
                    files.join("; ")
                )),
                _ => None,
            })
            .collect();
        let detail = format!(
            "{} applied, {} already upstream (series {}){}{}",
            applied.len() - upstreamed.len(),
            upstreamed.len(),
            &patches::series_sha256(self.series)[..12],
            if kept { "; in the kept work tree" } else { "" },
            three_way
                .iter()
                .map(|t| format!("; {t}"))
                .collect::<String>()
        );
        Ok(Done::new(applied, detail))
    }
}
