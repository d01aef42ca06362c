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

    /// helm and magnum-cluster-api's renderer (S6's Secret and the chart OCCM runs under), and
    /// where etcd, kube-apiserver, Cluster API's manager and the control come from: the Go
    /// module proxy, envtest's binaries, or what an earlier run (`accept --prepare`) built.
    fn prerequisites(
        &self,
        plan: &occm_forge_core::pipeline::plan::BuildPlan,
    ) -> Vec<occm_forge_core::pipeline::preflight::Check> {
        prerequisites(plan)
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

/// [`Simulation`]'s prerequisites of `plan` (see its `prerequisites`).
fn prerequisites(
    plan: &occm_forge_core::pipeline::plan::BuildPlan,
) -> Vec<occm_forge_core::pipeline::preflight::Check> {
    use occm_forge_core::consumers::mcapi::RendererError;
    use occm_forge_core::consumers::mcapi::{Renderer, Tools};
    use occm_forge_core::pipeline::preflight::{Check, Need};
    let tools = Tools::default();
    let mut checks = Vec::new();
    checks.push(match Renderer::helm(&tools) {
        Ok(helm) => Check::ok("helm", Need::Accept, helm.display().to_string()),
        Err(RendererError::HelmMissing { why }) => Check::failed(
            "helm",
            Need::Accept,
            format!("{why} (magnum-cluster-api's renderer runs `helm template`)"),
            "install helm v3 onto PATH (`go install helm.sh/helm/v3/cmd/helm@v3.21.4`), or set OCCM_FORGE_HELM to it",
            16,
        ),
        Err(e) => Check::failed("helm", Need::Accept, e.to_string(), "", 16),
    });
    let want = &plan.magnum_cluster_api;
    let venv = format!(
        "`python3 -m venv mcapi && mcapi/bin/pip install --no-deps magnum-cluster-api=={want}`, then set OCCM_FORGE_MCAPI_PYTHON=$PWD/mcapi/bin/python"
    );
    checks.push(match Renderer::python(&tools, want) {
        Ok((python, version)) => Check::ok(
            "magnum-cluster-api",
            Need::Accept,
            format!("{version} for {}", python.display()),
        ),
        Err(RendererError::NotInstalled { python, why, .. }) => Check::failed(
            "magnum-cluster-api",
            Need::Accept,
            format!("{python} cannot import magnum-cluster-api {want} ({why})"),
            venv,
            16,
        ),
        Err(e) => Check::failed("magnum-cluster-api", Need::Accept, e.to_string(), venv, 16),
    });
    checks.push(parts_source(plan));
    checks
}

/// Where acceptance's parts besides the image come from: the Go module proxy (unless `GOPROXY`
/// is `off`), or what is already built in `<cache>/accept` (Cluster API's manager, and
/// kube-apiserver there or envtest's).
fn parts_source(
    plan: &occm_forge_core::pipeline::plan::BuildPlan,
) -> occm_forge_core::pipeline::preflight::Check {
    use occm_forge_core::pipeline::preflight::{Check, Need};
    let name = "etcd, kube-apiserver, Cluster API";
    let proxy = std::env::var("GOPROXY")
        .ok()
        .filter(|v| !v.trim().is_empty())
        .unwrap_or_else(|| "https://proxy.golang.org,direct".into());
    let off = proxy
        .split([',', '|'])
        .all(|p| p.trim() == "off" || p.trim().is_empty());
    if !off {
        return Check::ok(
            name,
            Need::Accept,
            format!("built through the Go module proxy ({proxy}) when not cached"),
        );
    }
    let accept = plan.cache_dir.join("accept");
    let manager = accept
        .join(format!("cluster-api-{}", plan.cluster_api.version))
        .join("manager");
    let sources = crate::sim::envtest::Sources::from_env();
    let apiserver_built = std::fs::read_dir(&accept).is_ok_and(|d| {
        d.flatten()
            .any(|e| e.path().join("kube-apiserver").is_file())
    });
    let envtest = sources.assets.as_ref().is_some_and(|a| a.is_dir())
        || sources.store.as_ref().is_some_and(|s| s.is_dir());
    if manager.is_file() && (apiserver_built || envtest) {
        return Check::ok(
            name,
            Need::Accept,
            format!("built before, in {}", accept.display()),
        );
    }
    Check::failed(
        name,
        Need::Accept,
        format!(
            "GOPROXY is off and {} holds no Cluster API {} manager or kube-apiserver: accept builds them (and the unpatched control) through the Go module proxy the first time",
            accept.display(),
            plan.cluster_api.version
        ),
        "set GOPROXY to a module proxy, or run `occm-forge accept --prepare` where one is reachable and keep its cache (KUBEBUILDER_ASSETS may give kube-apiserver and etcd)",
        16,
    )
}
