//! magnum-cluster-api's own renderer, run as it is installed: its compiled entry point
//! `magnum_cluster_api.magnum_cluster_api.Driver.get_cloud_provider_cluster_resource_secret_data`
//! (magnum-cluster-api `src/driver.rs`, `src/addons/cloud_controller_manager.rs`), which renders
//! the `<stack_id>-cloud-provider` ClusterResourceSet Secret's data from a cluster's labels by
//! running `helm template` on the OCCM chart compiled into it. `pip install --no-deps
//! magnum-cluster-api==<version>` is all it needs, besides `helm` on PATH; this module drives it
//! through a short Python program ([`SCRIPT`]), one process per batch of clusters (about 0.1 s a
//! cluster).

use std::collections::BTreeMap;
use std::io::Write as _;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use super::MagnumCluster;

/// The Python program that calls the compiled renderer (render.py beside it).
pub const SCRIPT: &str = include_str!("render.py");
/// The environment variable naming the Python interpreter that has magnum-cluster-api.
pub const PYTHON_ENV: &str = "OCCM_FORGE_MCAPI_PYTHON";
/// The environment variable naming the `helm` binary the renderer runs.
pub const HELM_ENV: &str = "OCCM_FORGE_HELM";
/// The label of the chart's documents that names the chart and its version
/// (`helm.sh/chart: openstack-cloud-controller-manager-2.35.0`).
const CHART_LABEL: &str = "helm.sh/chart: openstack-cloud-controller-manager-";

/// The renderer cannot be found or failed: one line saying what to install or what went wrong.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum RendererError {
    /// The interpreter cannot import magnum-cluster-api (or does not run at all).
    #[error(
        "magnum-cluster-api {want} is not installed for {python} ({why}): install it with `python3 -m venv mcapi && mcapi/bin/pip install --no-deps magnum-cluster-api=={want}` and pass --mcapi-python mcapi/bin/python (or set {PYTHON_ENV})"
    )]
    NotInstalled {
        /// The interpreter tried.
        python: String,
        /// The version wanted.
        want: String,
        /// What it said, one line.
        why: String,
    },
    /// Another version is installed.
    #[error(
        "{python} has magnum-cluster-api {found}, not {want} (images.toml [accept] magnum_cluster_api): install it with `{python} -m pip install --no-deps magnum-cluster-api=={want}`"
    )]
    WrongVersion {
        /// The interpreter.
        python: String,
        /// Installed.
        found: String,
        /// Wanted.
        want: String,
    },
    /// No `helm` to run.
    #[error(
        "helm is not installed ({why}): magnum-cluster-api's renderer runs `helm template`; install helm v3 (`go install helm.sh/helm/v3/cmd/helm@v3.21.4`) and put it on PATH, or pass --helm PATH (or set {HELM_ENV})"
    )]
    HelmMissing {
        /// Why (not on PATH, not executable).
        why: String,
    },
    /// The renderer ran and failed (for one cluster, or as a whole).
    #[error("magnum-cluster-api {version} renderer: {message}")]
    Render {
        /// The magnum-cluster-api version.
        version: String,
        /// What failed, one line.
        message: String,
    },
}

/// Where the interpreter and helm are: given, else [`PYTHON_ENV`] / [`HELM_ENV`], else `python3`
/// and `helm` on PATH.
#[derive(Debug, Clone, Default)]
pub struct Tools {
    /// A Python interpreter that can import `magnum_cluster_api`.
    pub python: Option<PathBuf>,
    /// The `helm` binary.
    pub helm: Option<PathBuf>,
}

/// The installed renderer of one magnum-cluster-api version.
#[derive(Debug, Clone)]
pub struct Renderer {
    python: PathBuf,
    helm: PathBuf,
    /// The magnum-cluster-api version (`0.38.2`).
    pub version: String,
}

/// `name` as found on PATH, if it is an executable file.
fn on_path(name: &str) -> Option<PathBuf> {
    let path = std::env::var_os("PATH")?;
    std::env::split_paths(&path)
        .map(|d| d.join(name))
        .find(|p| is_executable(p))
}

fn is_executable(p: &Path) -> bool {
    use std::os::unix::fs::PermissionsExt as _;
    std::fs::metadata(p).is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
}

/// The last non-empty line of `text`, or `fallback`.
fn last_line(text: &str, fallback: &str) -> String {
    text.lines()
        .rev()
        .map(str::trim)
        .find(|l| !l.is_empty())
        .unwrap_or(fallback)
        .to_string()
}

impl Renderer {
    /// Finds the renderer of magnum-cluster-api `want` (`0.38.2`): the interpreter must import it
    /// at exactly that version, and helm must be an executable file.
    ///
    /// Errors: [`RendererError::NotInstalled`], [`RendererError::WrongVersion`],
    /// [`RendererError::HelmMissing`], each saying what to install.
    pub fn find(tools: &Tools, want: &str) -> Result<Renderer, RendererError> {
        let helm = Self::helm(tools)?;
        let (python, version) = Self::python(tools, want)?;
        Ok(Renderer {
            python,
            helm,
            version,
        })
    }

    /// The `helm` the renderer would run: `tools.helm`, else [`HELM_ENV`], else `helm` on PATH.
    ///
    /// Errors: [`RendererError::HelmMissing`] saying what to install.
    pub fn helm(tools: &Tools) -> Result<PathBuf, RendererError> {
        match tools
            .helm
            .clone()
            .or_else(|| std::env::var_os(HELM_ENV).map(PathBuf::from))
        {
            Some(h) if is_executable(&h) => Ok(h),
            Some(h) => Err(RendererError::HelmMissing {
                why: format!("{} is not an executable file", h.display()),
            }),
            None => on_path("helm").ok_or_else(|| RendererError::HelmMissing {
                why: "no helm on PATH".into(),
            }),
        }
    }

    /// The interpreter that imports magnum-cluster-api at exactly `want`, and that version:
    /// `tools.python`, else [`PYTHON_ENV`], else `python3`.
    ///
    /// Errors: [`RendererError::NotInstalled`], [`RendererError::WrongVersion`], each saying
    /// what to install.
    pub fn python(tools: &Tools, want: &str) -> Result<(PathBuf, String), RendererError> {
        let python = tools
            .python
            .clone()
            .or_else(|| std::env::var_os(PYTHON_ENV).map(PathBuf::from))
            .unwrap_or_else(|| PathBuf::from("python3"));
        let shown = python.display().to_string();
        let not_installed = |why: String| RendererError::NotInstalled {
            python: shown.clone(),
            want: want.to_string(),
            why,
        };
        let out = Command::new(&python)
            .args(["-I", "-c", SCRIPT, "--version"])
            .output()
            .map_err(|e| not_installed(e.to_string()))?;
        if !out.status.success() {
            return Err(not_installed(last_line(
                &String::from_utf8_lossy(&out.stderr),
                "it failed",
            )));
        }
        let found = String::from_utf8_lossy(&out.stdout).trim().to_string();
        if found != want {
            return Err(RendererError::WrongVersion {
                python: shown,
                found,
                want: want.to_string(),
            });
        }
        Ok((python, found))
    }

    /// The Secret data (`{key: text}`; the compiled code gives `cloud-controller-manager.yaml`,
    /// Python adds `cloud-config-secret.yaml` and the CSI keys, which this does not run) that
    /// magnum-cluster-api writes for each of `clusters`, in order. One Python process; helm
    /// runs with a temporary HOME and TMPDIR, removed afterwards.
    ///
    /// Errors: [`RendererError::Render`] naming the cluster (its stack id) the renderer failed
    /// for, or the process's last error line.
    pub fn render(
        &self,
        clusters: &[MagnumCluster],
    ) -> Result<Vec<BTreeMap<String, String>>, RendererError> {
        let fail = |message: String| RendererError::Render {
            version: self.version.clone(),
            message,
        };
        let scratch = tempfile::tempdir().map_err(|e| fail(format!("temporary directory: {e}")))?;
        let path = match (self.helm.parent(), std::env::var_os("PATH")) {
            (Some(dir), Some(p)) => std::env::join_paths(
                std::iter::once(dir.to_path_buf()).chain(std::env::split_paths(&p)),
            )
            .map_err(|e| fail(e.to_string()))?,
            (Some(dir), None) => dir.as_os_str().to_os_string(),
            (None, p) => p.unwrap_or_default(),
        };
        let mut child = Command::new(&self.python)
            .args(["-I", "-c", SCRIPT])
            .env("PATH", path)
            .env("HOME", scratch.path())
            .env("TMPDIR", scratch.path())
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .map_err(|e| fail(format!("{}: {e}", self.python.display())))?;
        let request = serde_json::to_vec(clusters).expect("clusters serialise");
        let written = child
            .stdin
            .take()
            .expect("piped")
            .write_all(&request)
            .map_err(|e| e.to_string());
        let out = child
            .wait_with_output()
            .map_err(|e| fail(format!("{}: {e}", self.python.display())))?;
        if !out.status.success() || written.is_err() {
            return Err(fail(last_line(
                &String::from_utf8_lossy(&out.stderr),
                &written.err().unwrap_or_else(|| "it failed".into()),
            )));
        }
        #[derive(serde::Deserialize)]
        struct Answer {
            data: Option<BTreeMap<String, String>>,
            error: Option<String>,
        }
        let answers: Vec<Answer> = serde_json::from_slice(&out.stdout)
            .map_err(|e| fail(format!("unreadable answer: {e}")))?;
        if answers.len() != clusters.len() {
            return Err(fail(format!(
                "{} answers for {} clusters",
                answers.len(),
                clusters.len()
            )));
        }
        answers
            .into_iter()
            .zip(clusters)
            .map(|(a, c)| match (a.data, a.error) {
                (Some(d), None) => Ok(d),
                (_, e) => Err(fail(format!(
                    "cluster {}: {}",
                    c.stack_id,
                    e.unwrap_or_else(|| "no data".into())
                ))),
            })
            .collect()
    }

    /// `helm template --namespace kube-system openstack-ccm <chart>` with the chart's own values
    /// (a chart directory or archive other than the one magnum-cluster-api compiles in, e.g. a
    /// newer release of upstream's): its rendering.
    ///
    /// Errors: [`RendererError::Render`] with helm's last error line.
    pub fn template(&self, chart: &Path) -> Result<String, RendererError> {
        let fail = |message: String| RendererError::Render {
            version: self.version.clone(),
            message,
        };
        let scratch = tempfile::tempdir().map_err(|e| fail(format!("temporary directory: {e}")))?;
        let out = Command::new(&self.helm)
            .args(["template", "--namespace", "kube-system", "openstack-ccm"])
            .arg(chart)
            .env("HOME", scratch.path())
            .output()
            .map_err(|e| fail(format!("{}: {e}", self.helm.display())))?;
        if !out.status.success() {
            return Err(fail(format!(
                "helm template {}: {}",
                chart.display(),
                last_line(&String::from_utf8_lossy(&out.stderr), "it failed")
            )));
        }
        String::from_utf8(out.stdout).map_err(|_| fail("helm printed something not UTF-8".into()))
    }

    /// The version of the OCCM chart in a rendering (its `helm.sh/chart` label), e.g. `2.35.0`.
    pub fn chart_version(rendered: &str) -> Option<String> {
        rendered.lines().find_map(|l| {
            let v = l.trim().strip_prefix(CHART_LABEL)?;
            Some(v.trim_matches('"').to_string())
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_missing_interpreter_or_helm_says_what_to_install() {
        let helm = tempfile::NamedTempFile::new().unwrap();
        let e = Renderer::find(
            &Tools {
                python: Some("/nonexistent/python3".into()),
                helm: Some(helm.path().into()),
            },
            "0.38.2",
        )
        .unwrap_err()
        .to_string();
        assert!(e.contains("is not an executable file"), "{e}");
        let e = Renderer::find(
            &Tools {
                python: Some("/nonexistent/python3".into()),
                helm: Some("/bin/sh".into()),
            },
            "0.38.2",
        )
        .unwrap_err()
        .to_string();
        assert!(
            e.starts_with("magnum-cluster-api 0.38.2 is not installed for /nonexistent/python3")
                && e.contains("pip install --no-deps magnum-cluster-api==0.38.2"),
            "{e}"
        );
        assert!(!e.contains('\n'));
    }

    #[test]
    fn the_chart_version_is_read_from_its_label() {
        let text =
            "metadata:\n  labels:\n    helm.sh/chart: openstack-cloud-controller-manager-2.35.0\n";
        assert_eq!(Renderer::chart_version(text).as_deref(), Some("2.35.0"));
        assert_eq!(Renderer::chart_version("kind: X\n"), None);
    }
}
