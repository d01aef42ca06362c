//! One minor as the subject of acceptance ([`Subject`], from images.toml or a build plan): what a
//! run needs of it, taking ours out of the layout, the chart, the control, recording its row and
//! the matrix of several minors.

use crate::sim::control_plane;
use crate::*;

use std::path::{Path, PathBuf};

use occm_forge_core::config::{Config, Minor};
use occm_forge_core::pipeline::go::Toolchain;
use occm_forge_core::pipeline::stage::{Done, Reporter, Runner};

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
    pub(crate) fn versions(&self, go_mod: &[u8]) -> Result<control_plane::Versions, AcceptError> {
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
pub(crate) async fn accept_subject_inner(
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
pub(crate) async fn render_chart(
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
pub(crate) fn chart_yaml_version(dir: &Path) -> Option<String> {
    let text = std::fs::read_to_string(dir.join("Chart.yaml")).ok()?;
    let chart: serde_norway::Value = serde_norway::from_str(&text).ok()?;
    chart.get("version")?.as_str().map(str::to_string)
}

/// The `binaries` stage: empties `work_dir` (creating it) and takes ours for `platform` out of
/// the layout into `<work>/ours/openstack-cloud-controller-manager`.
///
/// Errors: [`AcceptError::Io`] naming the work directory; [`AcceptError::Input`] from
/// [`binary::extract_from_layout`].
pub(crate) async fn take_ours(
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
pub(crate) fn not_verified(
    blank: AcceptReport,
    reason: String,
    versions: control_plane::Versions,
) -> AcceptReport {
    let mut r = blank.not_verified(reason);
    r.versions = Some(versions);
    r
}

/// A layout without the image gets the command that builds it there.
pub(crate) fn with_build_hint(
    e: AcceptError,
    subject: &Subject,
    run: &RunOptions<'_>,
) -> AcceptError {
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
pub(crate) fn control(
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
