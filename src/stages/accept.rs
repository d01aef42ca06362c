//! Stage 7 with `build --accept`, `accept`: the image's binary for the host platform, taken from
//! the layout just written, and the unpatched control run against a real kube-apiserver and the
//! simulated OpenStack (`crate::accept`). A minor that is not accepted stops the build before
//! publish and record. With `--accept-output` the report goes into that acceptance document first,
//! accepted or not (a run that ends in an error as a FAILED or NOT VERIFIED row, as `accept --all`
//! records it).

use async_trait::async_trait;

use crate::Error;
use crate::accept::{self, AcceptReport, RunOptions, Scenario, Subject};
use crate::plan::BuildPlan;
use crate::stage::{Done, Stage, StageContext};

/// Accepts the image `plan` built into its layout (`plan.output`); logs in
/// `<output>/accept/<minor>`, kept when it is not accepted.
pub struct AcceptStage<'a> {
    /// The build plan.
    pub plan: &'a BuildPlan,
}

#[async_trait]
impl Stage for AcceptStage<'_> {
    type Output = AcceptReport;

    fn name(&self) -> &'static str {
        "accept"
    }

    /// Async: it waits on processes and the simulated cloud; its own children are stopped when
    /// it is dropped.
    fn blocking(&self) -> bool {
        false
    }

    async fn run(self, cx: &StageContext<'_>) -> Result<Done<AcceptReport>, Error> {
        let subject = Subject::from_plan(self.plan);
        let run = RunOptions {
            layout_dir: &self.plan.output,
            cache_dir: &self.plan.cache_dir,
            work_dir: None,
            scenarios: Scenario::ALL,
            keep_logs: false,
            // magnum-cluster-api's renderer and helm from OCCM_FORGE_MCAPI_PYTHON and
            // OCCM_FORGE_HELM, else python3 and helm on PATH.
            tools: &crate::mcapi::Tools::default(),
            chart_dir: None,
        };
        let result = accept::accept_subject(&subject, &run, cx.reporter).await;
        if let Some(path) = &self.plan.accept_output {
            let recorded = match &result {
                Ok(report) => Some(report.clone()),
                Err(e) => subject.report_of_error(e),
            };
            if let Some(report) = recorded {
                let now = time::OffsetDateTime::now_utc().unix_timestamp();
                accept::write_document(path, &[report], now)?;
            }
        }
        let report = result?;
        accept::require_accepted(std::slice::from_ref(&report))?;
        let detail = report.summary_line();
        Ok(Done::new(report, detail))
    }
}
