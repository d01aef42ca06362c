//! One acceptance run given every part as plain data ([`AcceptRequest`]): the simulated cloud,
//! the control plane, the bench of each side, the scenarios on ours then on the control.

use crate::sim::process::check_interrupt;
use crate::sim::{cloud, control_plane, kube, process};
use crate::*;

use std::path::Path;

use occm_forge_core::config::Minor;
use occm_forge_core::pipeline::stage::{Done, Reporter, Runner};

/// Everything one acceptance run needs, as plain data: the parts already built or found
/// ([`prepare_parts`] for [`accept_subject`]) and ours already taken out of the layout.
#[derive(Debug, Clone)]
pub struct AcceptRequest<'a> {
    /// The Kubernetes minor (for the report).
    pub minor: Minor,
    /// Upstream tag, e.g. `v1.34.1` (for the report).
    pub upstream_tag: &'a str,
    /// Our image's tag in the layout (for the report).
    pub image_tag: &'a str,
    /// The repository our image is published to (images.toml `repository`; S6 writes
    /// `<repository>:<tag>@<index digest>`).
    pub repository: &'a str,
    /// The Go version ours and the control were built with (for the report).
    pub go: &'a str,
    /// The Kubernetes and etcd versions of the upstream go.mod.
    pub versions: &'a control_plane::Versions,
    /// Ours, taken out of the layout ([`binary::extract_from_layout`]).
    pub ours: &'a binary::Extracted,
    /// The control binary (unpatched upstream, host platform); see [`binary::build_control`].
    pub control_binary: &'a Path,
    /// etcd and kube-apiserver ([`control_plane::build`]).
    pub control_plane: &'a control_plane::Binaries,
    /// Cluster API's manager ([`sim::capi::build`]); needed when a scenario needs it.
    pub cluster_api: Option<&'a sim::capi::Manager>,
    /// Work and log directory (created; removed when accepted, kept otherwise).
    pub work_dir: &'a Path,
    /// Scenarios to run, in order.
    pub scenarios: &'a [Scenario],
    /// Keep the work directory (logs, request logs) even when accepted.
    pub keep_logs: bool,
    /// The chart OCCM runs under: its ServiceAccount, ClusterRoles and bindings are created in
    /// each control plane and OCCM gets that ServiceAccount's token ([`sim::chart`]).
    pub chart: &'a sim::chart::Chart,
    /// The OCCM manifests magnum-cluster-api renders for a cluster of the minor (S6's driver
    /// Secret).
    pub driver: &'a str,
    /// Scenarios whose bug upstream has fixed in this minor: the control is expected to pass them.
    pub upstream_fixed: &'a [Scenario],
}

/// Runs the acceptance scenarios on ours and on the control.
///
/// Builds (or reuses) etcd and kube-apiserver, takes ours out of the layout, starts the
/// simulated cloud and the control plane, runs each scenario on ours then on the control, and
/// stops everything. Returns the report, whose verdict is `not-verified` when the Go module
/// proxy refuses a Kubernetes module, `failed` when ours fails a scenario, `accepted`
/// otherwise. The work directory is removed when accepted and kept (named in the report)
/// otherwise.
///
/// Errors (every process stopped, the work directory kept): a layout without the image
/// ([`AcceptError::Layout`]: no such tag, a blob missing or not matching its digest), bad input
/// ([`AcceptError::Input`]: no host-platform manifest, a binary that is not an ELF for this
/// host), a control plane that does not start or get ready ([`AcceptError::ControlPlane`]),
/// an OCCM that cannot be started, build failures, interruption.
pub async fn accept(
    req: &AcceptRequest<'_>,
    reporter: &dyn Reporter,
) -> Result<AcceptReport, AcceptError> {
    accept_on(req, &mut Runner::new(reporter)).await
}

/// [`accept`] on `runner`, whose stages so far (the parts of [`accept_subject`]) are the
/// report's timings too.
pub(crate) async fn accept_on(
    req: &AcceptRequest<'_>,
    runner: &mut Runner<'_>,
) -> Result<AcceptReport, AcceptError> {
    let mut report = AcceptReport::new(req.minor, req.upstream_tag, req.image_tag, req.go);
    report.upstream_fixed = req.upstream_fixed.to_vec();
    let result = run(req, &mut report, runner).await;
    report.timings = runner.reports().to_vec();
    match result {
        Ok(()) => {
            report.decide();
            if report.ok() && !req.keep_logs {
                let _ = std::fs::remove_dir_all(req.work_dir);
                // `<layout>/accept` too, when no other minor's logs are in it.
                if let Some(parent) = req.work_dir.parent() {
                    let _ = std::fs::remove_dir(parent);
                }
            } else {
                report.logs = Some(req.work_dir.to_path_buf());
            }
            Ok(report)
        }
        Err(AcceptError::NotVerified(reason)) => {
            report.logs = None;
            Ok(report.not_verified(reason))
        }
        Err(e) => {
            tracing::info!("acceptance logs kept in {}", req.work_dir.display());
            Err(e)
        }
    }
}

/// The body of [`accept`]: checks the control, then runs the stages `start` and one per
/// scenario and side, filling `report`; stops the control plane (and drops the simulated
/// cloud) once the scenarios ran or stopped.
pub(crate) async fn run(
    req: &AcceptRequest<'_>,
    report: &mut AcceptReport,
    runner: &mut Runner<'_>,
) -> Result<(), AcceptError> {
    let platform = binary::host_platform()?;
    report.versions = Some(req.versions.clone());
    binary::check_binary(req.control_binary, &platform, "control")?;
    report.ours = Some(req.ours.clone());
    report.control = Some(req.control_binary.to_path_buf());
    let needs = req
        .scenarios
        .iter()
        .filter(|s| s.needs_cluster_api())
        .map(|s| s.to_string())
        .collect::<Vec<_>>();
    if req.cluster_api.is_none() && !needs.is_empty() {
        return Err(AcceptError::Input {
            part: needs.join(", "),
            message: "needs Cluster API, which was not prepared for this run".into(),
        });
    }
    std::fs::create_dir_all(req.work_dir)
        .map_err(|e| AcceptError::Io(format!("{}: {e}", req.work_dir.display())))?;
    check_interrupt()?;
    let (cloud, mut cp) = start_bench(req, req.control_plane, report, runner).await?;
    // The control's own simulated OpenStack for the scenarios whose sides run side by side
    // (each on a management cluster of its own; the cloud's state is per side).
    let control_cloud = if req.scenarios.iter().any(|s| s.side_by_side()) {
        Some(start_cloud().await?)
    } else {
        None
    };
    let kube = kube::client(&cp.url, &cp.ca_pem, &cp.token).await?;
    // OCCM runs as the chart's ServiceAccount, with what the chart grants it.
    let kubeconfig = sim::chart::install(
        &kube,
        req.chart,
        (&cp.url, &cp.ca_pem),
        &req.work_dir.join("control-plane"),
    )
    .await?;
    report.chart = Some(req.chart.clone());
    let minor = report.minor;
    let bench_on = |cloud| scenarios::Bench {
        cloud,
        kube: &kube,
        kubeconfig: &kubeconfig,
        capi: req.cluster_api.map(|manager| scenarios::CapiBench {
            binaries: req.control_plane,
            manager,
            cloud,
            kubernetes: &req.versions.kubernetes,
            chart: req.chart,
            images: scenarios::resource_set::Images {
                ours: format!(
                    "{}:{}@{}",
                    req.repository, req.image_tag, req.ours.index_digest
                ),
                driver: req.driver.to_string(),
                upstream: occm_forge_core::consumers::render::crs_secret::daemonset::occm_image(
                    req.driver,
                )
                .unwrap_or_default(),
                minor,
            },
        }),
    };
    let benches = Benches {
        ours: bench_on(&cloud),
        control: control_cloud.as_ref().map(bench_on),
    };
    let outcome = run_scenarios(req, &benches, &mut cp, &req.ours.path, report, runner).await;
    cp.stop().await;
    drop(cloud);
    outcome
}

/// The parts the scenarios run on: `ours` for every scenario run one side after the other,
/// and for ours' side of a scenario whose sides run side by side, whose control side runs on
/// `control` (the same control plane, a simulated OpenStack of its own).
pub(crate) struct Benches<'a> {
    ours: scenarios::Bench<'a>,
    control: Option<scenarios::Bench<'a>>,
}

/// Starts a simulated OpenStack on a free loopback port.
///
/// Errors: [`AcceptError::Io`] when it cannot listen.
pub(crate) async fn start_cloud() -> Result<cloud::SimulatedCloud, AcceptError> {
    cloud::SimulatedCloud::start()
        .await
        .map_err(|e| AcceptError::Io(format!("simulated OpenStack: {e}")))
}

/// The `start` stage: starts the simulated OpenStack, then etcd and kube-apiserver in
/// `<work>/control-plane` (waiting up to [`APISERVER_READY_TIMEOUT`] for `/readyz`). Records
/// the apiserver's version in `report`.
///
/// Errors: [`AcceptError::Io`] when the simulated OpenStack cannot start; those of
/// [`control_plane::ControlPlane::start`].
pub(crate) async fn start_bench(
    req: &AcceptRequest<'_>,
    bins: &control_plane::Binaries,
    report: &mut AcceptReport,
    runner: &mut Runner<'_>,
) -> Result<(cloud::SimulatedCloud, control_plane::ControlPlane), AcceptError> {
    let (cloud, cp) = runner
        .run_with("start", async {
            let cloud = start_cloud().await?;
            let cp = control_plane::ControlPlane::start(
                bins,
                &req.work_dir.join("control-plane"),
                APISERVER_READY_TIMEOUT,
            )
            .await?;
            let detail = format!(
                "kube-apiserver {} at {} ready in {:.1} s; simulated OpenStack at {}",
                cp.version,
                cp.url,
                cp.ready_seconds,
                cloud.base_url()
            );
            Ok::<_, AcceptError>(Done::new((cloud, cp), detail))
        })
        .await?;
    report.apiserver_version = Some(cp.version.clone());
    Ok((cloud, cp))
}

/// Runs each of `req.scenarios` on ours (the binary at `ours`) and on the control, one stage
/// per scenario and side, each in `<work>/<scenario>-<side>`: one side after the other, or side
/// by side for the scenarios on management clusters of their own ([`Scenario::side_by_side`]);
/// pushes one row per scenario and the requests the simulated OpenStack does not know into
/// `report`. Stops at the first error; the row of the scenario it happened in is left out.
///
/// Errors: [`AcceptError::Interrupted`] (checked before each side), those of
/// [`scenarios::run`], and [`AcceptError::ControlPlane`] when etcd or kube-apiserver exited
/// during a side.
pub(crate) async fn run_scenarios(
    req: &AcceptRequest<'_>,
    benches: &Benches<'_>,
    cp: &mut control_plane::ControlPlane,
    ours: &Path,
    report: &mut AcceptReport,
    runner: &mut Runner<'_>,
) -> Result<(), AcceptError> {
    let binary = |side| match side {
        Side::Ours => ours,
        Side::Control => req.control_binary,
    };
    for &s in req.scenarios {
        let mut row = ScenarioRow {
            scenario: s,
            title: s.title(),
            ours: None,
            control: None,
        };
        let mut results = Vec::new();
        match (s.side_by_side(), &benches.control) {
            (true, Some(control)) => {
                check_interrupt()?;
                let (o, c) = runner
                    .run_pair_with(
                        (
                            scenarios::stage_name(s, Side::Ours),
                            scenarios::stage_name(s, Side::Control),
                        ),
                        run_side(req, &benches.ours, s, Side::Ours, binary(Side::Ours)),
                        run_side(req, control, s, Side::Control, binary(Side::Control)),
                    )
                    .await?;
                check_control_plane(cp, s, "ours and control")?;
                results.push((Side::Ours, o));
                results.push((Side::Control, c));
            }
            _ => {
                for &side in s.sides() {
                    check_interrupt()?;
                    let r = runner
                        .run_with(
                            scenarios::stage_name(s, side),
                            run_side(req, &benches.ours, s, side, binary(side)),
                        )
                        .await?;
                    check_control_plane(cp, s, &side.to_string())?;
                    results.push((side, r));
                }
            }
        }
        for (side, r) in results {
            for u in &r.unknown_requests {
                report.unsimulated_requests.push(format!("{s} {side}: {u}"));
            }
            match side {
                Side::Ours => row.ours = Some(r),
                Side::Control => row.control = Some(r),
            }
        }
        report.rows.push(row);
    }
    Ok(())
}

/// One side of scenario `s` on `bench`: its result and stage detail.
pub(crate) async fn run_side(
    req: &AcceptRequest<'_>,
    bench: &scenarios::Bench<'_>,
    s: Scenario,
    side: Side,
    binary: &Path,
) -> Result<Done<scenarios::RunResult>, AcceptError> {
    let dir = req.work_dir.join(format!("{s}-{side}"));
    let r = scenarios::run(bench, s, binary, &dir).await?;
    let detail = format!(
        "{} {:.1} s: {}",
        if r.passed { "pass" } else { "FAIL" },
        r.seconds,
        process::shorten(&r.evidence, 160)
    );
    Ok(Done::new(r, detail))
}

/// [`AcceptError::ControlPlane`] when etcd or kube-apiserver exited during `s` (`sides`).
pub(crate) fn check_control_plane(
    cp: &mut control_plane::ControlPlane,
    s: Scenario,
    sides: &str,
) -> Result<(), AcceptError> {
    match cp.crashed() {
        Some(c) => Err(AcceptError::ControlPlane {
            part: "control plane".into(),
            message: format!("during {s} {sides}: {c}"),
        }),
        None => Ok(()),
    }
}
