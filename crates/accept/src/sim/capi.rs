//! Cluster API's core manager (`sigs.k8s.io/cluster-api`, the `main.go` at the module root) built
//! through the Go module proxy into the cache, its CustomResourceDefinitions taken from the same
//! module zip, and the manager started against the accept control plane without webhooks or
//! cert-manager (see ../shared/notes/capi.md).
//!
//! The release is images.toml's `[accept] cluster_api` ([`ClusterApi`]; by default the one
//! magnum-cluster-api 0.38.1 pins, v1.13.2, which supports management clusters v1.32–v1.36), so
//! one build serves every minor. Nothing defaults or validates without the webhooks: the objects the scenarios
//! write carry every field a webhook would add.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use serde::Serialize;
use serde_json::Value;

use super::control_plane::{Binaries, ControlPlane};
use super::helper::{go_build, helper_failure, lock_entry, mod_download, run_go};
use super::kube::Kube;
use super::process::{Process, free_port, last_error, wait_ready};
use occm_forge_core::config::ClusterApi;
use occm_forge_core::pipeline::acceptance::AcceptError;
use occm_forge_core::pipeline::go::Toolchain;

/// The module path of Cluster API's core.
pub const MODULE: &str = "sigs.k8s.io/cluster-api";

/// How long the manager may take to answer `/readyz`.
pub const READY_TIMEOUT: Duration = Duration::from_secs(60);
/// How long the CRDs may take to be `Established`.
pub const ESTABLISHED_TIMEOUT: Duration = Duration::from_secs(60);

/// The built manager and the CRDs to install before it starts.
#[derive(Debug, Clone, Serialize)]
pub struct Manager {
    /// The release.
    pub release: ClusterApi,
    /// `<cache>/accept/cluster-api-<version>/manager`.
    pub binary: PathBuf,
    /// `<cache>/accept/cluster-api-<version>/crds/<name>.json`, sorted: each CRD of the module's
    /// `config/crd/bases`, serving only its storage version (see [`storage_version_only`]).
    pub crds: Vec<PathBuf>,
    /// Whether it all came from the cache.
    pub cached: bool,
}

/// Builds (or finds in `<cache_dir>/accept/cluster-api-<version>/`) the manager of `release` and
/// its CRDs. The entry's helper module requires `sigs.k8s.io/cluster-api <version>`, is resolved
/// with `go get` under `-mod=mod` and built under `-mod=readonly` with `GOTOOLCHAIN=go<go>`, the
/// caches of `cache_dir`; the binary is written under a temporary name and renamed last, after
/// the CRDs, so an entry with a manager is complete. `<entry>/.lock` keeps two runs from building
/// one entry at once.
///
/// Errors: [`AcceptError::NotVerified`] when the Go module proxy refuses a module;
/// [`AcceptError::Build`] naming `cluster-api` (the helper module when its go.sum is at fault, a
/// CRD file that cannot be read or converted); [`AcceptError::Io`].
pub fn build(release: &ClusterApi, cache_dir: &Path) -> Result<Manager, AcceptError> {
    let dir = cache_dir
        .join("accept")
        .join(format!("cluster-api-{}", release.version));
    let binary = dir.join("manager");
    let crds_dir = dir.join("crds");
    let found = |cached| -> Result<Manager, AcceptError> {
        Ok(Manager {
            release: release.clone(),
            binary: binary.clone(),
            crds: list_crds(&crds_dir)?,
            cached,
        })
    };
    if binary.is_file() {
        return found(true);
    }
    let _lock = lock_entry(&dir)?;
    if binary.is_file() {
        return found(true);
    }
    let toolchain = Toolchain::new(&release.go, cache_dir);
    let module = dir.join("module");
    let io = |e: std::io::Error| AcceptError::Io(format!("{}: {e}", module.display()));
    std::fs::create_dir_all(&module).map_err(io)?;
    let _ = std::fs::remove_file(module.join("go.sum"));
    std::fs::write(
        module.join("go.mod"),
        format!(
            "module occm-forge.invalid/accept/cluster-api\n\ngo {}\n\nrequire {MODULE} {}\n",
            release.go, release.version
        ),
    )
    .map_err(io)?;
    let source = download(&toolchain, &module, release)?;
    write_crds(
        &source.join("config").join("crd").join("bases"),
        &crds_dir,
        storage_version_only,
    )?;

    go_get(
        &toolchain,
        &module,
        &[format!("{MODULE}@{}", release.version)],
    )?;
    go_build(
        &toolchain,
        &module,
        "cluster-api",
        MODULE,
        &ldflags(release),
        &binary,
    )?;
    found(false)
}

/// `go get <packages>` in the helper module `module` (under `-mod=mod`), which resolves them and
/// writes their go.sum lines.
///
/// Errors: [`helper_failure`]'s, naming `cluster-api`.
pub(crate) fn go_get(
    toolchain: &Toolchain,
    module: &Path,
    packages: &[String],
) -> Result<(), AcceptError> {
    let mut get = toolchain.helper_command(module);
    get.arg("get").args(packages);
    tracing::info!(
        "resolving the helper module {} (go get {})",
        module.display(),
        packages.join(" ")
    );
    let out = run_go(&mut get, "cluster-api")?;
    if !out.status.success() {
        return Err(helper_failure(
            "cluster-api",
            module,
            &String::from_utf8_lossy(&out.stderr),
        ));
    }
    Ok(())
}

/// The `-ldflags` of every manager of `release`: no symbol table or DWARF, and the version
/// stamped where the managers read it (they refuse an apiserver below v1.20.0 by comparing it).
pub(crate) fn ldflags(release: &ClusterApi) -> String {
    format!(
        "-s -w -X {MODULE}/version.gitVersion={v} -X {MODULE}/version.gitTreeState=clean",
        v = release.version
    )
}

/// `go mod download -json sigs.k8s.io/cluster-api@<version>` in `module`: the directory of the
/// extracted module in the module cache.
pub(crate) fn download(
    toolchain: &Toolchain,
    module: &Path,
    release: &ClusterApi,
) -> Result<PathBuf, AcceptError> {
    let m = format!("{MODULE}@{}", release.version);
    let info = mod_download(toolchain, module, "cluster-api", &m)?;
    match info["Dir"].as_str() {
        Some(d) => Ok(PathBuf::from(d)),
        None => Err(AcceptError::Build {
            part: "cluster-api".into(),
            message: format!("go mod download {m} named no directory"),
        }),
    }
}

/// The `*.json` files of `dir`, sorted.
pub(crate) fn list_crds(dir: &Path) -> Result<Vec<PathBuf>, AcceptError> {
    let io = |e: std::io::Error| AcceptError::Io(format!("{}: {e}", dir.display()));
    let mut out = Vec::new();
    for entry in std::fs::read_dir(dir).map_err(io)? {
        let p = entry.map_err(io)?.path();
        if p.extension().is_some_and(|e| e == "json") {
            out.push(p);
        }
    }
    out.sort();
    Ok(out)
}

/// Converts each CRD of `bases` (`*.yaml`, as in the module zip's `config/crd/bases`) with
/// `convert` ([`storage_version_only`], or [`released`]) into `<out>/<metadata.name>.json`,
/// replacing `out`.
///
/// Errors: [`AcceptError::Build`] naming the file that cannot be read or is not a CRD.
pub(crate) fn write_crds(
    bases: &Path,
    out: &Path,
    convert: fn(Value) -> Result<Value, String>,
) -> Result<(), AcceptError> {
    let bad = |p: &Path, m: String| AcceptError::Build {
        part: "cluster-api".into(),
        message: format!("{}: {m}", p.display()),
    };
    let io = |e: std::io::Error| AcceptError::Io(format!("{}: {e}", out.display()));
    let tmp = out.with_extension("tmp");
    let _ = std::fs::remove_dir_all(&tmp);
    std::fs::create_dir_all(&tmp).map_err(io)?;
    let mut files: Vec<PathBuf> = std::fs::read_dir(bases)
        .map_err(|e| bad(bases, e.to_string()))?
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.extension().is_some_and(|e| e == "yaml"))
        .collect();
    files.sort();
    if files.is_empty() {
        return Err(bad(bases, "no CRD files".into()));
    }
    for f in &files {
        let text = std::fs::read_to_string(f).map_err(|e| bad(f, e.to_string()))?;
        let crd: Value = serde_norway::from_str(&text).map_err(|e| bad(f, e.to_string()))?;
        let crd = convert(crd).map_err(|m| bad(f, m))?;
        let name = crd["metadata"]["name"].as_str().unwrap_or_default();
        std::fs::write(
            tmp.join(format!("{name}.json")),
            serde_json::to_vec(&crd).expect("JSON serialises"),
        )
        .map_err(io)?;
    }
    let _ = std::fs::remove_dir_all(out);
    std::fs::rename(&tmp, out).map_err(io)
}

/// `crd` as released, once checked to be a CRD with exactly one storage version.
///
/// Errors: as [`storage_version_only`]'s.
pub fn released(crd: Value) -> Result<Value, String> {
    storage_version_only(crd.clone())?;
    Ok(crd)
}

/// `crd` (a `apiextensions.k8s.io/v1` CustomResourceDefinition) serving only its storage version:
/// the other versions and `spec.conversion` removed, so the apiserver never calls the conversion
/// webhook no one runs. Cluster API v1.13 stores v1beta2 and serves v1beta1 through conversion.
///
/// Errors: a message when `crd` is not a CRD with exactly one storage version.
pub fn storage_version_only(mut crd: Value) -> Result<Value, String> {
    if crd["kind"] != "CustomResourceDefinition" {
        return Err(format!(
            "kind {} is not CustomResourceDefinition",
            crd["kind"]
        ));
    }
    if crd["metadata"]["name"].as_str().is_none_or(str::is_empty) {
        return Err("a CRD without metadata.name".into());
    }
    let spec = crd["spec"].as_object_mut().ok_or("a CRD without spec")?;
    spec.remove("conversion");
    let versions = spec
        .get_mut("versions")
        .and_then(Value::as_array_mut)
        .ok_or("a CRD without spec.versions")?;
    versions.retain(|v| v["storage"] == true);
    if versions.len() != 1 {
        return Err(format!("{} storage versions (expected 1)", versions.len()));
    }
    versions[0]["served"] = Value::Bool(true);
    Ok(crd)
}

/// Reads the CRD files `crds` (JSON) and installs them ([`Kube::apply_crds`]). Returns the
/// seconds it took.
///
/// Errors: [`AcceptError::Io`] for a file that cannot be read; those of [`Kube::apply_crds`].
pub async fn install_crds(kube: &Kube, crds: &[PathBuf]) -> Result<f64, AcceptError> {
    let mut objects = Vec::new();
    for f in crds {
        let text =
            std::fs::read(f).map_err(|e| AcceptError::Io(format!("{}: {e}", f.display())))?;
        objects.push(
            serde_json::from_slice(&text)
                .map_err(|e| AcceptError::Io(format!("{}: {e}", f.display())))?,
        );
    }
    Ok(kube.apply_crds(objects, ESTABLISHED_TIMEOUT).await?)
}

/// The webhook server of one manager: a free loopback port and a self-signed certificate for
/// `127.0.0.1` and `localhost` (`tls.crt`, `tls.key` in `cert_dir`), which is also the CA bundle
/// a CRD's conversion webhook or a webhook configuration names.
pub struct Webhook {
    /// The port of `--webhook-port`.
    pub port: u16,
    /// `<dir>/webhook-certs`, the `--webhook-cert-dir`.
    pub cert_dir: PathBuf,
    /// PEM of the self-signed certificate.
    pub ca_pem: String,
}

impl Webhook {
    /// A new port and certificate in `<dir>/webhook-certs`.
    ///
    /// Errors: [`AcceptError::Io`] for `dir`; [`AcceptError::ControlPlane`] naming `cluster-api`
    /// when no port is free or the certificate cannot be made.
    pub fn new(dir: &Path) -> Result<Webhook, AcceptError> {
        let io = |e: std::io::Error| AcceptError::Io(format!("{}: {e}", dir.display()));
        let failed = |message: String| AcceptError::ControlPlane {
            part: "cluster-api".into(),
            message,
        };
        let cert_dir = dir.join("webhook-certs");
        std::fs::create_dir_all(&cert_dir).map_err(io)?;
        let cert = rcgen::generate_simple_self_signed(vec![
            "127.0.0.1".to_string(),
            "localhost".to_string(),
        ])
        .map_err(|e| failed(format!("webhook certificate: {e}")))?;
        std::fs::write(cert_dir.join("tls.crt"), cert.cert.pem()).map_err(io)?;
        std::fs::write(cert_dir.join("tls.key"), cert.signing_key.serialize_pem()).map_err(io)?;
        let port = free_port().map_err(|e| failed(format!("no free loopback port: {e}")))?;
        Ok(Webhook {
            port,
            cert_dir,
            ca_pem: cert.cert.pem(),
        })
    }

    /// `https://127.0.0.1:<port>/convert`: controller-runtime's conversion webhook, which a
    /// manager serves for every convertible type it registers.
    pub fn conversion_url(&self) -> String {
        format!("https://127.0.0.1:{}/convert", self.port)
    }
}

/// A running Cluster API manager.
pub struct Running {
    /// `http://127.0.0.1:<port>` of its health probes (`/readyz`, `/healthz`).
    pub health_url: String,
    /// Seconds from start to `/readyz` answering 200.
    pub ready_seconds: f64,
    process: Process,
}

impl Running {
    /// Starts `manager` in `dir` (log `cluster-api.log`, the webhook server's self-signed
    /// certificate in `webhook-certs/`) against the apiserver of `kubeconfig` (a `system:masters`
    /// user), with the flags that need no webhook configuration and no cert-manager: leader
    /// election off, webhook, health and diagnostics servers on free loopback ports, feature
    /// gates at their defaults. Waits up to [`READY_TIMEOUT`] for `/readyz`. The CRDs must be
    /// installed first ([`install_crds`]).
    ///
    /// Errors: [`AcceptError::ControlPlane`] naming `cluster-api`: it cannot be started, exited
    /// (its last error line) or was not ready in time (then it is stopped).
    pub async fn start(
        manager: &Manager,
        kubeconfig: &Path,
        dir: &Path,
    ) -> Result<Running, AcceptError> {
        let webhook = Webhook::new(dir)?;
        Self::start_binary(
            "cluster-api",
            &manager.binary,
            kubeconfig,
            dir,
            &webhook,
            &[],
        )
        .await
    }

    /// Starts one of Cluster API's managers (`binary`: the core one or a provider's, which take
    /// the same flags) as `part` in `dir` (log `<part>.log`), its webhook server on `webhook`,
    /// with `extra` flags last (e.g. `--feature-gates=ClusterTopology=true`); otherwise as
    /// [`Running::start`].
    ///
    /// Errors: those of [`Running::start`], naming `part`.
    pub async fn start_binary(
        part: &str,
        binary: &Path,
        kubeconfig: &Path,
        dir: &Path,
        webhook: &Webhook,
        extra: &[String],
    ) -> Result<Running, AcceptError> {
        let t = Instant::now();
        let port = || {
            free_port().map_err(|e| AcceptError::ControlPlane {
                part: part.into(),
                message: format!("no free loopback port: {e}"),
            })
        };
        let (health, diagnostics) = (port()?, port()?);
        let mut cmd = Command::new(binary);
        cmd.current_dir(dir)
            .arg(format!("--kubeconfig={}", kubeconfig.display()))
            .arg("--leader-elect=false")
            .arg(format!("--webhook-port={}", webhook.port))
            .arg(format!("--webhook-cert-dir={}", webhook.cert_dir.display()))
            .arg(format!("--health-addr=127.0.0.1:{health}"))
            .arg(format!("--diagnostics-address=127.0.0.1:{diagnostics}"))
            .arg("--insecure-diagnostics")
            .args(extra);
        let mut process =
            Process::spawn(part, cmd, &dir.join(format!("{part}.log"))).map_err(|e| {
                AcceptError::ControlPlane {
                    part: part.into(),
                    message: format!("cannot start {}: {e}", binary.display()),
                }
            })?;
        let health_url = format!("http://127.0.0.1:{health}");
        let plain = reqwest::Client::builder()
            .timeout(Duration::from_secs(5))
            .build()
            .map_err(|e| AcceptError::Io(format!("HTTP client: {e}")))?;
        let readyz = format!("{health_url}/readyz");
        wait_ready(&mut process, READY_TIMEOUT, || async {
            matches!(plain.get(&readyz).send().await, Ok(r) if r.status().is_success())
        })
        .await?;
        Ok(Running {
            health_url,
            ready_seconds: t.elapsed().as_secs_f64(),
            process,
        })
    }

    /// The manager's log so far.
    pub fn log(&self) -> String {
        self.process.log_text()
    }

    /// Whether it has exited (with its last error line).
    pub fn crashed(&mut self) -> Option<String> {
        self.process.exited().map(|s| {
            format!(
                "{} exited ({s}): {}",
                self.process.name,
                last_error(&self.process.log_text())
            )
        })
    }

    /// Stops it (SIGTERM, SIGKILL after 10 s).
    pub async fn stop(mut self) {
        let _ = self.process.stop(Duration::from_secs(10)).await;
    }
}

/// A management cluster of its own: a fresh control plane (etcd and kube-apiserver in
/// `<dir>/control-plane`), Cluster API's CRDs and the stand-ins' ([`super::provider::crds`])
/// installed, and the manager running against it (in `<dir>/cluster-api`). The workload cluster
/// of each Cluster written to it is the same apiserver.
pub struct Management {
    /// etcd and kube-apiserver.
    pub control_plane: ControlPlane,
    /// A client for its apiserver.
    pub kube: Kube,
    /// The manager.
    pub manager: Running,
    /// Further managers beside it (Cluster API's kubeadm providers, see
    /// [`super::capi_installed`]); none here.
    pub providers: Vec<Running>,
}

impl Management {
    /// Starts it; see the type. Whatever was started is stopped again when a later step fails.
    ///
    /// Errors: those of [`ControlPlane::start`], [`install_crds`], [`Kube::apply_crds`] and
    /// [`Running::start`]; [`AcceptError::Io`] for `dir`.
    pub async fn start(
        binaries: &Binaries,
        manager: &Manager,
        dir: &Path,
    ) -> Result<Management, AcceptError> {
        let io = |e: std::io::Error| AcceptError::Io(format!("{}: {e}", dir.display()));
        std::fs::create_dir_all(dir.join("cluster-api")).map_err(io)?;
        let cp = ControlPlane::start(
            binaries,
            &dir.join("control-plane"),
            super::control_plane::APISERVER_READY_TIMEOUT,
        )
        .await?;
        let started = async {
            let kube = super::kube::client(&cp.url, &cp.ca_pem, &cp.token).await?;
            install_crds(&kube, &manager.crds).await?;
            kube.apply_crds(super::provider::crds(), ESTABLISHED_TIMEOUT)
                .await?;
            let running = Running::start(manager, &cp.kubeconfig, &dir.join("cluster-api")).await?;
            Ok::<_, AcceptError>((kube, running))
        }
        .await;
        match started {
            Ok((kube, manager)) => Ok(Management {
                control_plane: cp,
                kube,
                manager,
                providers: Vec::new(),
            }),
            Err(e) => {
                cp.stop().await;
                Err(e)
            }
        }
    }

    /// The manager's crash, or the control plane's, when either exited.
    pub fn crashed(&mut self) -> Option<String> {
        self.manager
            .crashed()
            .or_else(|| self.providers.iter_mut().find_map(Running::crashed))
            .or_else(|| self.control_plane.crashed())
    }

    /// Stops the managers, then the control plane.
    pub async fn stop(self) {
        for p in self.providers {
            p.stop().await;
        }
        self.manager.stop().await;
        self.control_plane.stop().await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn crd(versions: Value) -> Value {
        json!({
            "apiVersion": "apiextensions.k8s.io/v1",
            "kind": "CustomResourceDefinition",
            "metadata": {"name": "machines.cluster.x-k8s.io"},
            "spec": {
                "group": "cluster.x-k8s.io",
                "conversion": {"strategy": "Webhook", "webhook": {"clientConfig": {}}},
                "versions": versions
            }
        })
    }

    #[test]
    fn only_the_storage_version_is_served_and_no_conversion_webhook_is_named() {
        let c = storage_version_only(crd(json!([
            {"name": "v1beta1", "served": true, "storage": false},
            {"name": "v1beta2", "served": false, "storage": true}
        ])))
        .unwrap();
        assert_eq!(
            c["spec"]["versions"],
            json!([{"name": "v1beta2", "served": true, "storage": true}])
        );
        assert!(c["spec"].get("conversion").is_none());
    }

    #[test]
    fn a_file_that_is_not_a_crd_with_one_storage_version_is_refused() {
        let none = storage_version_only(crd(json!([{"name": "v1", "storage": false}])));
        assert_eq!(none.unwrap_err(), "0 storage versions (expected 1)");
        let e = storage_version_only(json!({"kind": "Namespace", "metadata": {"name": "x"}}));
        assert_eq!(
            e.unwrap_err(),
            "kind \"Namespace\" is not CustomResourceDefinition"
        );
    }

    #[test]
    fn the_crds_of_a_module_are_written_as_json_and_listed_sorted() {
        let d = tempfile::tempdir().unwrap();
        let bases = d.path().join("bases");
        std::fs::create_dir_all(&bases).unwrap();
        for (file, name) in [
            ("b.yaml", "machines.cluster.x-k8s.io"),
            ("a.yaml", "clusters.cluster.x-k8s.io"),
        ] {
            std::fs::write(
                bases.join(file),
                format!("---\napiVersion: apiextensions.k8s.io/v1\nkind: CustomResourceDefinition\nmetadata:\n  name: {name}\nspec:\n  versions:\n  - name: v1beta1\n    served: true\n    storage: false\n  - name: v1beta2\n    served: true\n    storage: true\n"),
            )
            .unwrap();
        }
        std::fs::write(bases.join("kustomization.yml"), "resources: []\n").unwrap();
        let out = d.path().join("crds");
        write_crds(&bases, &out, storage_version_only).unwrap();
        let listed = list_crds(&out).unwrap();
        let names: Vec<_> = listed
            .iter()
            .map(|p| p.file_name().unwrap().to_string_lossy().into_owned())
            .collect();
        assert_eq!(
            names,
            [
                "clusters.cluster.x-k8s.io.json",
                "machines.cluster.x-k8s.io.json"
            ]
        );
        let c: Value = serde_json::from_slice(&std::fs::read(&listed[1]).unwrap()).unwrap();
        assert_eq!(c["spec"]["versions"][0]["name"], "v1beta2");

        std::fs::write(
            bases.join("c.yaml"),
            "kind: ConfigMap\nmetadata: {name: x}\n",
        )
        .unwrap();
        let e = write_crds(&bases, &out, storage_version_only)
            .unwrap_err()
            .to_string();
        assert!(
            e.starts_with("building cluster-api: ") && e.contains("c.yaml: kind \"ConfigMap\""),
            "{e}"
        );
        assert_eq!(
            list_crds(&out).unwrap().len(),
            2,
            "a failed conversion keeps the old CRDs"
        );
    }
}
