//! The parts of a run besides the image (etcd, kube-apiserver, Cluster API, the control), found
//! in the cache or built, keyed by [`cache_key`]; `accept --prepare`.

use crate::sim::control_plane;
use crate::*;

use std::path::{Path, PathBuf};

use serde::Serialize;

use occm_forge_core::config::Minor;
use occm_forge_core::pipeline::go::Toolchain;
use occm_forge_core::pipeline::stage::{Done, Reporter, Runner};

/// What [`prepare_parts`] built or found.
pub(crate) struct Parts {
    pub(crate) versions: control_plane::Versions,
    pub(crate) apiserver: Option<control_plane::Binaries>,
    pub(crate) cluster_api: Option<sim::capi::Manager>,
    pub(crate) outcome: PartsOutcome,
}

pub(crate) enum PartsOutcome {
    Ready(binary::Control),
    /// The Go module proxy refuses a module one of them needs.
    NotVerified(String),
}

/// The upstream go.mod of the subject's pinned tag (the pin checked).
pub(crate) fn upstream_go_mod(
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
pub(crate) async fn prepare_parts(
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
