//! [`Simulation`]: acceptance as `build --accept` runs it, behind the core's
//! [`occm_forge_core::pipeline::acceptance::Acceptance`].

use crate::{RunOptions, Scenario, Subject, accept_subject, record_run, require_accepted};
use occm_forge_core::pipeline::stage::Reporter;

/// The acceptance the occm-forge binary hands `build --accept`
/// ([`occm_forge_core::pipeline::acceptance::Acceptance`]): every scenario against a real control plane and
/// the simulated OpenStack, magnum-cluster-api's renderer and helm from `OCCM_FORGE_MCAPI_PYTHON`
/// and `OCCM_FORGE_HELM` (else `python3` and `helm` on PATH), logs in `<output>/accept/<minor>`,
/// kept when it is not accepted.
#[derive(Debug, Clone, Copy, Default)]
pub struct Simulation;

#[async_trait::async_trait]
impl occm_forge_core::pipeline::acceptance::Acceptance for Simulation {
    fn scenarios(&self) -> Vec<String> {
        Scenario::ALL.iter().map(ToString::to_string).collect()
    }

    /// With `plan.accept_output`, the report goes into that acceptance document first,
    /// accepted or not (a run that ends in an error as a FAILED or NOT VERIFIED row, as
    /// `accept --all` records it).
    async fn accept(
        &self,
        plan: &occm_forge_core::pipeline::plan::BuildPlan,
        reporter: &dyn Reporter,
    ) -> Result<occm_forge_core::pipeline::acceptance::Accepted, occm_forge_core::pipeline::Error>
    {
        let subject = Subject::from_plan(plan);
        let run = RunOptions {
            layout_dir: &plan.output,
            cache_dir: &plan.cache_dir,
            work_dir: None,
            scenarios: Scenario::ALL,
            keep_logs: false,
            tools: &occm_forge_core::consumers::mcapi::Tools::default(),
            chart_dir: None,
        };
        let result = accept_subject(&subject, &run, reporter).await;
        if let Some(path) = &plan.accept_output {
            record_run(path, &subject, &result)?;
        }
        let report = result?;
        require_accepted(std::slice::from_ref(&report))?;
        Ok(occm_forge_core::pipeline::acceptance::Accepted {
            scenarios: self.scenarios(),
            summary: report.summary_line(),
        })
    }
}
