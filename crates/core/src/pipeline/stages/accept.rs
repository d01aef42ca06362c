//! The accept stage of `build --accept`: the [`Acceptance`] the command layer passed in, run on
//! the image just written to the layout. A minor that is not accepted stops the build before
//! publish and record.

use async_trait::async_trait;

use crate::pipeline::Error;
use crate::pipeline::acceptance::{Acceptance, Accepted};
use crate::pipeline::plan::BuildPlan;
use crate::pipeline::stage::{Done, Stage, StageContext};

/// Accepts the image `plan` built into its layout (`plan.output`).
pub struct AcceptStage<'a> {
    /// The build plan.
    pub plan: &'a BuildPlan,
    /// What runs the acceptance.
    pub acceptance: &'a dyn Acceptance,
}

#[async_trait]
impl Stage for AcceptStage<'_> {
    type Output = Accepted;

    fn name(&self) -> &'static str {
        "accept"
    }

    /// Async: acceptance waits on processes and the simulated cloud; its children are stopped
    /// when it is dropped.
    fn blocking(&self) -> bool {
        false
    }

    async fn run(self, cx: &StageContext<'_>) -> Result<Done<Accepted>, Error> {
        let accepted = self.acceptance.accept(self.plan, cx.reporter).await?;
        let detail = accepted.summary.clone();
        Ok(Done::new(accepted, detail))
    }
}
