//! Acceptance in a simulated cloud (`occm-forge accept`): the image's own OCCM binary, and as
//! the control the unpatched upstream build of the same tag, run the way the Helm chart runs
//! them against a real etcd + kube-apiserver and a simulated OpenStack, through the bug report's
//! scenarios (see [`scenarios::Scenario`]).
//!
//! Parts: [`binary`] (ours out of the OCI layout; the control build), [`sim`] (the simulated
//! environment: [`sim::control_plane`] etcd and kube-apiserver built through the Go module proxy
//! or envtest's, cached per Kubernetes version, started on loopback; [`sim::cloud`] the simulated
//! Keystone, Nova and Neutron; [`sim::kube`] the API calls the scenarios make; Cluster API and its
//! stand-ins), [`scenarios`] and [`report`]. [`accept`] is the entry given everything as plain
//! data; [`accept_subject`] and [`prepare_subject`] derive it for one minor (building what is
//! needed) ([`Subject::from_config`] from images.toml), [`matrix`] for several minors,
//! [`record_run`] a run's row in the acceptance document;
//! [`simulation::Simulation`] is what `build --accept` runs, behind the core's `Acceptance`.

pub mod binary;
pub mod report;
pub mod scenarios;
pub mod sim;
pub mod simulation;

use sim::{cloud, control_plane, kube, process};

use std::path::{Path, PathBuf};

use serde::Serialize;

pub use report::{
    AcceptReport, ScenarioRow, Verdict, document, render_markdown, require_accepted, write_document,
};
pub use scenarios::{Scenario, Side};

use occm_forge_core::config::{Config, Minor};
use occm_forge_core::pipeline::go::Toolchain;
use occm_forge_core::pipeline::stage::{Done, Reporter, Runner};

pub use sim::control_plane::APISERVER_READY_TIMEOUT;

pub use occm_forge_core::pipeline::acceptance::AcceptError;

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

use sim::process::check_interrupt;

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
async fn accept_on(
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
async fn run(
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
struct Benches<'a> {
    ours: scenarios::Bench<'a>,
    control: Option<scenarios::Bench<'a>>,
}

/// Starts a simulated OpenStack on a free loopback port.
///
/// Errors: [`AcceptError::Io`] when it cannot listen.
async fn start_cloud() -> Result<cloud::SimulatedCloud, AcceptError> {
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
async fn start_bench(
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
async fn run_scenarios(
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
async fn run_side(
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
fn check_control_plane(
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

/// How an acceptance run works: where our image is, where it may work, what it runs.
#[derive(Debug, Clone)]
pub struct RunOptions<'a> {
    /// The OCI layout holding our image (built by `occm-forge build --output`).
    pub layout_dir: &'a Path,
    /// occm-forge's cache directory.
    pub cache_dir: &'a Path,
    /// Work and log directory; `<layout>/accept/<minor>` when `None`.
    pub work_dir: Option<&'a Path>,
    /// Scenarios to run.
    pub scenarios: &'a [Scenario],
    /// Keep the work directory even when accepted.
    pub keep_logs: bool,
    /// Where magnum-cluster-api's renderer and helm are.
    pub tools: &'a occm_forge_core::consumers::mcapi::Tools,
    /// Run OCCM under this chart's RBAC (a chart directory, rendered with `helm template`)
    /// instead of the one magnum-cluster-api compiles in.
    pub chart_dir: Option<&'a Path>,
}

/// One minor's acceptance, from images.toml.
#[derive(Debug, Clone)]
pub struct MinorRequest<'a> {
    /// The loaded images.toml.
    pub config: &'a Config,
    /// The minor.
    pub minor: Minor,
    /// Upstream URL or mirror for the control; images.toml `upstream` when `None`.
    pub source: Option<&'a str>,
    /// How to run.
    pub run: RunOptions<'a>,
}

/// The pins of one minor that acceptance needs, from images.toml ([`Subject::from_config`]) or
/// a resolved build plan ([`Subject::from_plan`], for `build --accept`).
#[derive(Debug, Clone)]
pub struct Subject {
    /// The minor.
    pub minor: Minor,
    /// Upstream tag, e.g. `v1.34.1`.
    pub upstream_tag: String,
    /// The 40-hex commit the tag must point at.
    pub commit: String,
    /// Go version, e.g. `1.25.1`.
    pub go: String,
    /// Our image's tag in the layout.
    pub tag: String,
    /// Upstream URL or mirror the control is built from.
    pub fetch_from: String,
    /// The images.toml that pins it, for messages.
    pub config_name: String,
    /// The Cluster API release of S5 and S6 (`[accept] cluster_api`).
    pub cluster_api: occm_forge_core::config::ClusterApi,
    /// images.toml `repository`.
    pub repository: String,
    /// The magnum-cluster-api release whose renderer gives the chart (`[accept]`).
    pub magnum_cluster_api: String,
    /// images.toml `go_overrides`: set in the control's go.mod too (it differs from ours by the
    /// patch series only), and they give the Kubernetes and etcd versions of the control plane.
    pub go_overrides: std::collections::BTreeMap<String, String>,
    /// Scenarios whose bug upstream has fixed in this minor ([`occm_forge_core::pipeline::plan::BuildPlan::upstream_fixed`]).
    pub upstream_fixed: Vec<Scenario>,
}

impl Subject {
    /// `minor` as images.toml pins it, resolved as `build` resolves it
    /// ([`occm_forge_core::pipeline::plan::BuildPlan::resolve`]; the base is not needed, so an unpinned one is
    /// allowed); `source` overrides images.toml `upstream`.
    ///
    /// Errors: as [`occm_forge_core::pipeline::plan::BuildPlan::resolve`] (an unknown minor, an unreadable patch).
    pub fn from_config(
        config: &Config,
        minor: Minor,
        source: Option<&str>,
    ) -> Result<Self, occm_forge_core::pipeline::Error> {
        let overrides = occm_forge_core::pipeline::plan::Overrides {
            source: source.map(str::to_string),
            allow_unpinned_base: true,
            ..Default::default()
        };
        let plan = occm_forge_core::pipeline::plan::BuildPlan::resolve(config, minor, &overrides)?;
        Ok(Self::from_plan(&plan))
    }

    /// The minor a build plan builds.
    pub fn from_plan(plan: &occm_forge_core::pipeline::plan::BuildPlan) -> Self {
        Subject {
            minor: plan.minor,
            upstream_tag: plan.upstream_tag.clone(),
            commit: plan.commit.clone(),
            go: plan.toolchain.version.clone(),
            tag: plan.tag.clone(),
            fetch_from: plan.fetch_from.clone(),
            config_name: plan.config_name.clone(),
            cluster_api: plan.cluster_api.clone(),
            repository: plan.repository.clone(),
            magnum_cluster_api: plan.magnum_cluster_api.clone(),
            go_overrides: plan.go_overrides.clone(),
            upstream_fixed: Scenario::ALL
                .iter()
                .copied()
                .filter(|s| plan.upstream_fixed.contains(&s.to_string()))
                .collect(),
        }
    }

    /// The Kubernetes and etcd versions of the control plane: upstream's go.mod `go_mod`, with
    /// `go_overrides` of those modules applied.
    fn versions(&self, go_mod: &[u8]) -> Result<control_plane::Versions, AcceptError> {
        let mut v = control_plane::versions_from_go_mod(&String::from_utf8_lossy(go_mod))?;
        if let Some(k) = self.go_overrides.get("k8s.io/kubernetes") {
            v.kubernetes = k.clone();
        }
        for etcd in [
            "go.etcd.io/etcd/server/v3",
            "go.etcd.io/etcd/client/v3",
            "go.etcd.io/etcd/api/v3",
        ] {
            if let Some(e) = self.go_overrides.get(etcd) {
                v.etcd = e.clone();
                break;
            }
        }
        Ok(v)
    }

    fn blank(&self) -> AcceptReport {
        AcceptReport::new(self.minor, &self.upstream_tag, &self.tag, &self.go)
    }

    /// The report of a run of this minor that ended in `e` before a verdict: NOT VERIFIED when
    /// ours is not in the layout, FAILED naming `e` otherwise; `None` for an interrupt (no
    /// report: the run did not end).
    pub fn report_of_error(&self, e: &occm_forge_core::pipeline::Error) -> Option<AcceptReport> {
        match e {
            occm_forge_core::pipeline::Error::Interrupted(_) => None,
            occm_forge_core::pipeline::Error::Accept(AcceptError::Layout { .. }) => {
                Some(self.blank().not_verified(e.to_string()))
            }
            _ => Some(self.blank().failed(e.to_string())),
        }
    }
}

/// Writes the acceptance document at `path` with this run's row: its report, or for a run that
/// ended in an error the report of it ([`Subject::report_of_error`]: FAILED or NOT VERIFIED);
/// nothing for an interrupt. How `build --accept-output` and `accept --output` record a run
/// whatever its end (`accept --all` records errors through [`matrix`]).
///
/// Errors: the document cannot be read or written ([`write_document`]).
pub fn record_run(
    path: &Path,
    subject: &Subject,
    result: &Result<AcceptReport, occm_forge_core::pipeline::Error>,
) -> Result<(), occm_forge_core::pipeline::Error> {
    let recorded = match result {
        Ok(report) => Some(report.clone()),
        Err(e) => subject.report_of_error(e),
    };
    if let Some(report) = recorded {
        let now = time::OffsetDateTime::now_utc().unix_timestamp();
        write_document(path, &[report], now)?;
    }
    Ok(())
}

/// [`accept`] for one minor: our image's binary from the layout, the upstream go.mod and the
/// control (built unless cached) from the pinned tag, the minor's toolchain. A Kubernetes module
/// or an OCCM dependency the Go module proxy refuses makes the report `not-verified`, naming it.
///
/// Errors: source errors; [`AcceptError`]s as in [`accept`] (as [`occm_forge_core::pipeline::Error::Accept`]);
/// any outcome after SIGINT/SIGTERM is [`occm_forge_core::pipeline::Error::Interrupted`].
pub async fn accept_subject(
    subject: &Subject,
    run: &RunOptions<'_>,
    reporter: &dyn Reporter,
) -> Result<AcceptReport, occm_forge_core::pipeline::Error> {
    occm_forge_core::pipeline::stage::unless_interrupted(
        accept_subject_inner(subject, run, reporter).await,
    )
}

/// [`accept_subject`] without the mapping of errors after a signal: the `binaries` stage (ours
/// taken out of the layout into the work directory, first, so that bad input fails in seconds),
/// then [`prepare_parts`] (each part built or found once, under one stage name), then
/// [`accept`].
async fn accept_subject_inner(
    subject: &Subject,
    run: &RunOptions<'_>,
    reporter: &dyn Reporter,
) -> Result<AcceptReport, occm_forge_core::pipeline::Error> {
    let toolchain = Toolchain::new(&subject.go, run.cache_dir);
    let platform = binary::host_platform()?;
    let default_work: PathBuf = run
        .layout_dir
        .join("accept")
        .join(subject.minor.to_string());
    // Absolute: etcd, kube-apiserver and OCCM get paths under it and run in other directories.
    let work_dir = std::path::absolute(run.work_dir.unwrap_or(&default_work)).map_err(|e| {
        occm_forge_core::pipeline::Error::Io(format!("{}: {e}", default_work.display()))
    })?;
    let work_dir = work_dir.as_path();
    let mut runner = Runner::new(reporter);
    let layout_existed = run.layout_dir.exists();
    let ours = match take_ours(subject, run, work_dir, &platform, &mut runner).await {
        Ok(o) => o,
        Err(e) => {
            let _ = std::fs::remove_dir_all(work_dir);
            if let Some(parent) = work_dir.parent() {
                let _ = std::fs::remove_dir(parent);
            }
            if !layout_existed {
                // A wrong --layout path is not left behind as an empty directory.
                let _ = std::fs::remove_dir(run.layout_dir);
            }
            // A minor whose Kubernetes version the proxy refuses cannot have an image either;
            // say that rather than "no image". A layout that is not there at all is a wrong
            // path: said at once, without fetching upstream or asking the proxy.
            if run.layout_dir.join("index.json").is_file()
                && let Ok(go_mod) =
                    tokio::task::block_in_place(|| upstream_go_mod(subject, run.cache_dir))
                && let Ok(versions) = subject.versions(&go_mod)
                && let Err(AcceptError::NotVerified(reason)) = tokio::task::block_in_place(|| {
                    control_plane::kubernetes_go_mod(&versions, &toolchain, run.cache_dir)
                })
            {
                return Ok(not_verified(subject.blank(), reason, versions));
            }
            return Err(with_build_hint(e, subject, run).into());
        }
    };
    let (chart, driver) = match render_chart(subject, run, &mut runner).await {
        Ok(c) => c,
        Err(e) => {
            let _ = std::fs::remove_dir_all(work_dir);
            return Err(e.into());
        }
    };
    let with_cluster_api = run.scenarios.iter().any(|s| s.needs_cluster_api());
    let parts = prepare_parts(
        subject,
        run.cache_dir,
        &toolchain,
        &platform,
        with_cluster_api,
        &mut runner,
    )
    .await?;
    let control = match parts.outcome {
        PartsOutcome::Ready(control) => control,
        PartsOutcome::NotVerified(reason) => {
            let _ = std::fs::remove_dir_all(work_dir);
            return Ok(not_verified(subject.blank(), reason, parts.versions));
        }
    };
    let control_plane = parts
        .apiserver
        .as_ref()
        .expect("prepare_parts builds the control plane before the control");
    accept_on(
        &AcceptRequest {
            minor: subject.minor,
            upstream_tag: &subject.upstream_tag,
            image_tag: &subject.tag,
            repository: &subject.repository,
            go: &subject.go,
            versions: &parts.versions,
            ours: &ours,
            control_binary: &control.binary,
            control_plane,
            cluster_api: parts.cluster_api.as_ref(),
            work_dir,
            scenarios: run.scenarios,
            keep_logs: run.keep_logs,
            chart: &chart,
            driver: &driver,
            upstream_fixed: &subject.upstream_fixed,
        },
        &mut runner,
    )
    .await
    .map_err(Into::into)
}

/// The `chart` stage: magnum-cluster-api's renderer at the subject's release (one line saying
/// what to install when it is missing), the OCCM manifests it renders for a cluster of the minor
/// (the driver's, for S6), and the chart OCCM runs under: that rendering, or with
/// `run.chart_dir` that chart's own (`helm template`). Runs before anything is built, so that a
/// missing wheel or helm fails in a second.
///
/// Errors: [`AcceptError::Input`] (part `chart`) naming what is missing or what failed.
async fn render_chart(
    subject: &Subject,
    run: &RunOptions<'_>,
    runner: &mut Runner<'_>,
) -> Result<(sim::chart::Chart, String), AcceptError> {
    let input = |e: occm_forge_core::consumers::mcapi::RendererError| AcceptError::Input {
        part: "chart".into(),
        message: e.to_string(),
    };
    runner
        .run_with("chart", async {
            let renderer = tokio::task::block_in_place(|| {
                occm_forge_core::consumers::mcapi::Renderer::find(
                    run.tools,
                    &subject.magnum_cluster_api,
                )
            })
            .map_err(input)?;
            let cluster = occm_forge_core::consumers::mcapi::MagnumCluster::new(
                "3f5e6a7b-1c2d-4e5f-8a9b-0c1d2e3f4a5b",
                "kube-abc12",
                &format!("v{}.0", subject.minor),
            );
            let mut rendered =
                tokio::task::block_in_place(|| renderer.render(std::slice::from_ref(&cluster)))
                    .map_err(input)?;
            let driver = rendered
                .remove(0)
                .remove(occm_forge_core::consumers::render::crs_secret::SECRET_KEY)
                .ok_or_else(|| AcceptError::Input {
                    part: "chart".into(),
                    message: format!(
                        "magnum-cluster-api {} rendered no {}",
                        renderer.version,
                        occm_forge_core::consumers::render::crs_secret::SECRET_KEY
                    ),
                })?;
            let version = |text: &str| {
                occm_forge_core::consumers::mcapi::Renderer::chart_version(text)
                    .unwrap_or_else(|| "?".into())
            };
            let chart = match run.chart_dir {
                None => sim::chart::Chart::new(
                    format!(
                        "chart {} as magnum-cluster-api {} renders it",
                        version(&driver),
                        renderer.version
                    ),
                    driver.clone(),
                )?,
                Some(dir) => {
                    let text =
                        tokio::task::block_in_place(|| renderer.template(dir)).map_err(input)?;
                    let version = chart_yaml_version(dir).unwrap_or_else(|| version(&text));
                    sim::chart::Chart::new(format!("chart {version} at {}", dir.display()), text)?
                }
            };
            let detail = format!("{}: {}", chart.source, chart.rbac);
            Ok(Done::new((chart, driver), detail))
        })
        .await
}

/// The `version` of the chart directory `dir` (its Chart.yaml); `None` for an archive or a
/// Chart.yaml without one.
fn chart_yaml_version(dir: &Path) -> Option<String> {
    let text = std::fs::read_to_string(dir.join("Chart.yaml")).ok()?;
    let chart: serde_norway::Value = serde_norway::from_str(&text).ok()?;
    chart.get("version")?.as_str().map(str::to_string)
}

/// The `binaries` stage: empties `work_dir` (creating it) and takes ours for `platform` out of
/// the layout into `<work>/ours/openstack-cloud-controller-manager`.
///
/// Errors: [`AcceptError::Io`] naming the work directory; [`AcceptError::Input`] from
/// [`binary::extract_from_layout`].
async fn take_ours(
    subject: &Subject,
    run: &RunOptions<'_>,
    work_dir: &Path,
    platform: &occm_forge_core::config::Platform,
    runner: &mut Runner<'_>,
) -> Result<binary::Extracted, AcceptError> {
    let io = |e: std::io::Error| AcceptError::Io(format!("{}: {e}", work_dir.display()));
    runner
        .run_with("binaries", async {
            if work_dir.exists() {
                std::fs::remove_dir_all(work_dir).map_err(io)?;
            }
            std::fs::create_dir_all(work_dir).map_err(io)?;
            let ours = tokio::task::block_in_place(|| {
                binary::extract_from_layout(
                    run.layout_dir,
                    &subject.tag,
                    platform,
                    &work_dir
                        .join("ours")
                        .join("openstack-cloud-controller-manager"),
                )
            })?;
            let detail = format!(
                "ours from {} layer {}",
                occm_forge_core::base::util::short(&ours.manifest_digest),
                occm_forge_core::base::util::short(&ours.layer_digest),
            );
            Ok(Done::new(ours, detail))
        })
        .await
}

/// A report saying the minor cannot be verified here, with the versions it needed.
fn not_verified(
    blank: AcceptReport,
    reason: String,
    versions: control_plane::Versions,
) -> AcceptReport {
    let mut r = blank.not_verified(reason);
    r.versions = Some(versions);
    r
}

/// What [`prepare_parts`] built or found.
struct Parts {
    versions: control_plane::Versions,
    apiserver: Option<control_plane::Binaries>,
    cluster_api: Option<sim::capi::Manager>,
    outcome: PartsOutcome,
}

enum PartsOutcome {
    Ready(binary::Control),
    /// The Go module proxy refuses a module one of them needs.
    NotVerified(String),
}

/// The upstream go.mod of the subject's pinned tag (the pin checked).
fn upstream_go_mod(
    subject: &Subject,
    cache_dir: &Path,
) -> Result<Vec<u8>, occm_forge_core::pipeline::Error> {
    binary::upstream_go_mod(
        &subject.fetch_from,
        &subject.upstream_tag,
        &subject.commit,
        &subject.config_name,
        cache_dir,
    )
}

/// The parts a run needs besides ours, built or taken from `<cache>/accept/`: the upstream
/// go.mod (the pin checked), etcd and kube-apiserver at its versions (stage `apiserver`), and
/// the unpatched control (stage `control`). The control plane comes before the control, so a
/// refused Kubernetes module names k8s.io/kubernetes.
async fn prepare_parts(
    subject: &Subject,
    cache_dir: &Path,
    toolchain: &Toolchain,
    platform: &occm_forge_core::config::Platform,
    with_cluster_api: bool,
    runner: &mut Runner<'_>,
) -> Result<Parts, occm_forge_core::pipeline::Error> {
    let go_mod = tokio::task::block_in_place(|| upstream_go_mod(subject, cache_dir))?;
    let versions = subject.versions(&go_mod)?;
    let not_verified = |apiserver, cluster_api, reason| Parts {
        versions: versions.clone(),
        apiserver,
        cluster_api,
        outcome: PartsOutcome::NotVerified(reason),
    };
    let cached = |c: bool| if c { " (cached)" } else { "" };
    let built = runner
        .run_with("apiserver", async {
            let b = tokio::task::block_in_place(|| {
                control_plane::build(&versions, toolchain, cache_dir)
            })?;
            let from = if b.envtest.is_empty() {
                cached(b.cached).to_string()
            } else {
                format!(
                    " ({} from envtest, version checked)",
                    b.envtest.join(" and ")
                )
            };
            let detail = format!(
                "kube-apiserver {}, etcd {}{from}",
                versions.kubernetes, versions.etcd
            );
            Ok::<_, AcceptError>(Done::new(b, detail))
        })
        .await;
    let apiserver = match built {
        Ok(b) => b,
        Err(AcceptError::NotVerified(reason)) => return Ok(not_verified(None, None, reason)),
        Err(e) => return Err(e.into()),
    };
    let cluster_api = if with_cluster_api {
        let release = &subject.cluster_api;
        let built = runner
            .run_with("cluster-api", async {
                let m = tokio::task::block_in_place(|| sim::capi::build(release, cache_dir))?;
                let detail = format!(
                    "Cluster API {} manager, {} CRDs{}",
                    release.version,
                    m.crds.len(),
                    cached(m.cached)
                );
                Ok::<_, AcceptError>(Done::new(m, detail))
            })
            .await;
        match built {
            Ok(m) => Some(m),
            Err(AcceptError::NotVerified(reason)) => {
                return Ok(not_verified(Some(apiserver), None, reason));
            }
            Err(e) => return Err(e.into()),
        }
    } else {
        None
    };
    let built = runner
        .run_with("control", async {
            let c =
                tokio::task::block_in_place(|| control(subject, cache_dir, toolchain, platform))?;
            let detail = format!(
                "upstream {} unpatched, go{}{}",
                subject.upstream_tag,
                subject.go,
                cached(c.cached)
            );
            Ok::<_, occm_forge_core::pipeline::Error>(Done::new(c, detail))
        })
        .await;
    let control = match built {
        Ok(c) => c,
        Err(occm_forge_core::pipeline::Error::Accept(AcceptError::NotVerified(reason))) => {
            return Ok(not_verified(Some(apiserver), cluster_api, reason));
        }
        Err(e) => return Err(e),
    };
    Ok(Parts {
        versions,
        apiserver: Some(apiserver),
        cluster_api,
        outcome: PartsOutcome::Ready(control),
    })
}

/// Version of how `<cache>/accept/` entries are built (the helper module, ldflags, the control's
/// build): part of [`cache_key`]; bump it when that changes.
pub const PREPARED_FORMAT: u32 = 2;

/// What `accept --prepare` built or found for one minor.
#[derive(Debug, Clone, Serialize)]
pub struct PrepareReport {
    /// The minor.
    pub minor: Minor,
    /// Upstream tag, e.g. `v1.34.1`.
    pub upstream_tag: String,
    /// Go version, e.g. `1.25.1`.
    pub go: String,
    /// The cache key of what was prepared ([`cache_key`]).
    pub cache_key: String,
    /// The Kubernetes and etcd versions of the upstream go.mod.
    pub versions: control_plane::Versions,
    /// `<cache>/accept/<kubernetes>/kube-apiserver`, when built or cached.
    pub kube_apiserver: Option<PathBuf>,
    /// `<cache>/accept/<kubernetes>/etcd-<etcd>`, when built or cached.
    pub etcd: Option<PathBuf>,
    /// The Cluster API release, e.g. `v1.13.2`.
    pub cluster_api_version: String,
    /// `<cache>/accept/cluster-api-<version>/manager`, when built or cached.
    pub cluster_api: Option<PathBuf>,
    /// The unpatched control, when built or cached.
    pub control: Option<PathBuf>,
    /// Whether everything came from the cache.
    pub cached: bool,
    /// Why the minor cannot be prepared here (the Go module proxy refuses a module): then it
    /// cannot be accepted here either.
    pub not_verified: Option<String>,
}

impl PrepareReport {
    /// One line: `1.34: kube-apiserver v1.34.1, etcd v3.6.5, control v1.34.1 go1.25.1 in
    /// <cache>/accept (built|cached); cache key accept-1.34-…`, or `1.31: NOT VERIFIED: …`.
    pub fn line(&self) -> String {
        if let Some(why) = &self.not_verified {
            return format!("{}: NOT VERIFIED: {why}", self.minor);
        }
        let dir = self
            .kube_apiserver
            .as_deref()
            .and_then(Path::parent)
            .and_then(Path::parent)
            .map(|d| d.display().to_string())
            .unwrap_or_default();
        format!(
            "{}: kube-apiserver {}, etcd {}, Cluster API {}, control {} go{} in {dir} ({}); cache key {}",
            self.minor,
            self.versions.kubernetes,
            self.versions.etcd,
            self.cluster_api_version,
            self.upstream_tag,
            self.go,
            if self.cached { "cached" } else { "built" },
            self.cache_key
        )
    }
}

/// The key of what [`prepare_subject`] builds for `subject` on `platform`: `accept-<minor>-`
/// and 16 hex digits of the sha256 of [`PREPARED_FORMAT`], the upstream tag and commit (which
/// fix the go.mod, so the Kubernetes and etcd versions), the Go version, the platform and the
/// Cluster API release (`[accept] cluster_api`) with its Go version. Equal
/// keys mean equal `<cache>/accept/` entries; it needs no network and no build, so CI can look
/// a cache up by it before preparing.
pub fn cache_key(subject: &Subject, platform: &occm_forge_core::config::Platform) -> String {
    let capi = &subject.cluster_api;
    let mut text = format!(
        "prepared-format {PREPARED_FORMAT}\nupstream {} {}\ngo {}\nplatform {platform}\ncluster-api {} go{}\n",
        subject.upstream_tag, subject.commit, subject.go, capi.version, capi.go
    );
    // Overrides change the control and may change the control plane's versions; without any,
    // the key is what it was.
    for (module, version) in &subject.go_overrides {
        text.push_str(&format!("override {module} {version}\n"));
    }
    let digest = occm_forge_core::base::util::sha256_digest(text.as_bytes());
    let hex = digest.trim_start_matches("sha256:");
    format!("accept-{}-{}", subject.minor, &hex[..16])
}

/// Builds (or finds in `<cache_dir>/accept/`) everything an acceptance run of `subject` needs
/// besides our image, and runs nothing: the upstream go.mod (the pin checked), etcd and
/// kube-apiserver at its versions, the unpatched control for the host platform. For CI to warm
/// its cache in a job of its own (`occm-forge accept --prepare`).
///
/// Errors: source errors; [`AcceptError`]s of the builds; a refused module is not an error but
/// a report with `not_verified` set; any outcome after SIGINT/SIGTERM is
/// [`occm_forge_core::pipeline::Error::Interrupted`].
pub async fn prepare_subject(
    subject: &Subject,
    cache_dir: &Path,
    reporter: &dyn Reporter,
) -> Result<PrepareReport, occm_forge_core::pipeline::Error> {
    let inner = async {
        let toolchain = Toolchain::new(&subject.go, cache_dir);
        let platform = binary::host_platform()?;
        let parts = prepare_parts(
            subject,
            cache_dir,
            &toolchain,
            &platform,
            true,
            &mut Runner::new(reporter),
        )
        .await?;
        let (control, not_verified, control_cached) = match parts.outcome {
            PartsOutcome::Ready(c) => (Some(c.binary), None, c.cached),
            PartsOutcome::NotVerified(r) => (None, Some(r), false),
        };
        Ok(PrepareReport {
            minor: subject.minor,
            upstream_tag: subject.upstream_tag.clone(),
            go: subject.go.clone(),
            cache_key: cache_key(subject, &platform),
            versions: parts.versions,
            cached: control_cached
                && parts.apiserver.as_ref().is_some_and(|b| b.cached)
                && parts.cluster_api.as_ref().is_some_and(|m| m.cached),
            cluster_api_version: subject.cluster_api.version.clone(),
            cluster_api: parts.cluster_api.as_ref().map(|m| m.binary.clone()),
            kube_apiserver: parts.apiserver.as_ref().map(|b| b.kube_apiserver.clone()),
            etcd: parts.apiserver.map(|b| b.etcd),
            control,
            not_verified,
        })
    };
    occm_forge_core::pipeline::stage::unless_interrupted(inner.await)
}

/// A layout without the image gets the command that builds it there.
fn with_build_hint(e: AcceptError, subject: &Subject, run: &RunOptions<'_>) -> AcceptError {
    match e {
        AcceptError::Layout { layout, message } => {
            let config = if subject.config_name == "images.toml" {
                String::new()
            } else {
                format!(" --config {}", subject.config_name)
            };
            AcceptError::Layout {
                layout,
                message: format!(
                    "{message}; build it with `occm-forge build --k8s {}{config} --output {}`",
                    subject.minor,
                    run.layout_dir.display()
                ),
            }
        }
        e => e,
    }
}

/// The unpatched upstream build of the subject's tag, for the host platform.
fn control(
    subject: &Subject,
    cache_dir: &Path,
    toolchain: &Toolchain,
    platform: &occm_forge_core::config::Platform,
) -> Result<binary::Control, occm_forge_core::pipeline::Error> {
    binary::build_control(&binary::ControlRequest {
        source: &subject.fetch_from,
        upstream_tag: &subject.upstream_tag,
        commit: &subject.commit,
        config: &subject.config_name,
        toolchain,
        cache_dir,
        platform,
        go_overrides: &subject.go_overrides,
    })
}

/// [`accept_subject`] for each of `minors` of images.toml, with everything else taken from `req` (its `minor`
/// and `work_dir` are ignored: each minor works in `<layout>/accept/<minor>`). A minor whose run
/// fails before a verdict becomes a report saying why (`not-verified` for an image missing from
/// the layout, `failed` for other faults), so that the matrix still covers it; images.toml
/// errors end the matrix. `reporter` gives each minor's reporter.
pub async fn matrix(
    req: &MinorRequest<'_>,
    minors: &[Minor],
    reporter: &dyn Fn(Minor) -> Box<dyn Reporter>,
) -> Result<Vec<AcceptReport>, occm_forge_core::pipeline::Error> {
    let run = RunOptions {
        work_dir: None,
        ..req.run.clone()
    };
    let mut out = Vec::new();
    for &minor in minors {
        let subject = Subject::from_config(req.config, minor, req.source)?;
        match accept_subject(&subject, &run, reporter(minor).as_ref()).await {
            Ok(r) => out.push(r),
            Err(e) => out.push(subject.report_of_error(&e).ok_or(e)?),
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use report::Verdict;

    fn subject() -> Subject {
        Subject {
            minor: "1.34".parse().unwrap(),
            upstream_tag: "v1.34.1".into(),
            commit: "0".repeat(40),
            go: "1.25.1".into(),
            tag: "v1.34.1-occmforge.1".into(),
            fetch_from: String::new(),
            config_name: "images.toml".into(),
            cluster_api: occm_forge_core::config::ClusterApi {
                version: "v1.13.2".into(),
                go: "1.25.0".into(),
            },
            repository: "registry.example/occm".into(),
            magnum_cluster_api: "0.38.2".into(),
            go_overrides: Default::default(),
            upstream_fixed: Vec::new(),
        }
    }

    /// A run that ended before a verdict: a layout without the image could not be tested
    /// (NOT VERIFIED), a bad image failed (FAILED), an interrupt has no report. Told by the
    /// error's variant, not by its text.
    #[test]
    fn a_layout_without_the_image_is_not_verified_and_a_bad_binary_failed() {
        let dir = tempfile::tempdir().unwrap();
        let platform = binary::host_platform().unwrap();
        let no_layout = binary::extract_from_layout(
            dir.path(),
            "v1.34.1-occmforge.1",
            &platform,
            &dir.path().join("occm"),
        )
        .unwrap_err();
        let no_layout = occm_forge_core::pipeline::Error::Accept(no_layout);
        let report = subject().report_of_error(&no_layout).unwrap();
        assert_eq!(report.verdict, Verdict::NotVerified);
        assert_eq!(report.reason.as_deref(), Some(&*no_layout.to_string()));
        assert!(
            no_layout
                .to_string()
                .contains("no OCI layout there (no index.json)"),
            "{no_layout}"
        );

        let script = dir.path().join("occm-script");
        std::fs::write(&script, "#!/bin/sh\n").unwrap();
        let not_elf =
            binary::check_binary(&script, &platform, "image v1.34.1-occmforge.1").unwrap_err();
        let not_elf = occm_forge_core::pipeline::Error::Accept(not_elf);
        let report = subject().report_of_error(&not_elf).unwrap();
        assert_eq!(report.verdict, Verdict::Failed, "{not_elf}");

        let interrupted = occm_forge_core::pipeline::Error::Interrupted(2);
        assert!(subject().report_of_error(&interrupted).is_none());
    }
}
