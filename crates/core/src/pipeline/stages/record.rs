//! The `record` stage: the minor's entry written into the digest manifest (or a fragment),
//! atomically, after every other stage succeeded.

use async_trait::async_trait;

use crate::base::util::display_rel;
use crate::digest_manifest::Entry;
use crate::pipeline::Error;
use crate::pipeline::plan::BuildPlan;
use crate::pipeline::record;
use crate::pipeline::record::Recorded;
use crate::pipeline::stage::{Done, Stage, StageContext};

/// Records `entry` for `plan.minor` at `plan.record_to`.
pub struct RecordStage<'a> {
    /// The build plan (minor, where to record, fragment or not).
    pub plan: &'a BuildPlan,
    /// The entry.
    pub entry: Entry,
}

#[async_trait]
impl Stage for RecordStage<'_> {
    type Output = Recorded;

    fn name(&self) -> &'static str {
        "record"
    }

    async fn run(self, _: &StageContext<'_>) -> Result<Done<Recorded>, Error> {
        let plan = self.plan;
        if plan.fragment && plan.fragment_reset {
            // A fragment holds this run's entries alone.
            let _ = std::fs::remove_file(&plan.record_to);
        }
        let recorded = record::record(&plan.record_to, &plan.config_name, plan.minor, self.entry)?;
        let at = display_rel(&plan.record_to);
        let detail = match &recorded {
            Recorded::Written { stale_mirrors } => {
                if let Some(line) = record::mirrors_lack_new_bundles(plan.minor, stale_mirrors) {
                    tracing::warn!("{line}");
                }
                format!("{} in {at}", plan.minor)
            }
            Recorded::KeptPublished => format!(
                "{} in {at} kept: it is published and this build was not pushed",
                plan.minor
            ),
        };
        Ok(Done::new(recorded, detail))
    }
}
