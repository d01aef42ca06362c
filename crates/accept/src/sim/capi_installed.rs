//! Cluster API as `clusterctl init --infrastructure openstack` leaves a management cluster, minus
//! cert-manager and the admission webhooks: the core manager and the kubeadm control plane and
//! bootstrap managers (one module, `sigs.k8s.io/cluster-api`, built through the Go module proxy
//! into the cache beside [`super::capi::build`]'s manager), their CRDs as released, every
//! version served, the old ones converted by each manager's own conversion webhook (the CRD's
//! `spec.conversion` names `https://127.0.0.1:<port>/convert` and the manager's self-signed
//! certificate), `ClusterTopology` on as magnum-cluster-api installs it (`CLUSTER_TOPOLOGY=true`),
//! and the OpenStack provider's CRDs from its released module, with no manager: nothing
//! reconciles OpenStack clusters or machines (there is no OpenStack).
//!
//! What a client of this management cluster meets is what it meets in a real one for the
//! resources it writes: `cluster.x-k8s.io/v1beta1` served from v1beta2 storage through Cluster
//! API's own conversion code, the topology controller acting on a Cluster's `spec.topology`.
//! Without admission webhooks nothing is defaulted or validated beyond the CRDs' schemas.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use base64::Engine as _;
use serde_json::{Value, json};

use super::capi::{self, Management, Manager, Running, Webhook};
use super::control_plane::{Binaries, ControlPlane};
use super::helper::{go_build, lock_entry, mod_download};
use occm_forge_core::config::ClusterApi;
use occm_forge_core::pipeline::acceptance::AcceptError;
use occm_forge_core::pipeline::go::Toolchain;

/// The module path of the OpenStack provider (CAPO).
pub const OPENSTACK_MODULE: &str = "sigs.k8s.io/cluster-api-provider-openstack";

/// The feature gate magnum-cluster-api's installation turns on (`CLUSTER_TOPOLOGY=true`) for the
/// core and the control plane managers.
pub const TOPOLOGY: &str = "--feature-gates=ClusterTopology=true";

/// One of Cluster API's managers in this installation: its name (the log's), its binary and the
/// CRDs whose conversion it serves (JSON, as released).
#[derive(Debug, Clone)]
pub struct Provider {
    /// `cluster-api`, `kubeadm-control-plane` or `kubeadm-bootstrap`.
    pub name: &'static str,
    /// The manager.
    pub binary: PathBuf,
    /// `<entry>/installed/crds/<name>/*.json`, sorted.
    pub crds: Vec<PathBuf>,
    /// Extra flags ([`TOPOLOGY`] for the core and the control plane managers).
    pub flags: Vec<String>,
    /// The labels its `config/crd/kustomization.yaml` puts on every CRD ([`kustomize_labels`]):
    /// the contract labels the topology controller reads (`cluster.x-k8s.io/v1beta1: v1beta1`).
    pub labels: BTreeMap<String, String>,
}

/// The built installation.
#[derive(Debug, Clone)]
pub struct Installed {
    /// The core manager first, then the kubeadm control plane and bootstrap managers.
    pub providers: Vec<Provider>,
    /// The OpenStack provider's CRDs (`<entry>/installed/openstack-<version>/*.json`, sorted), serving only their
    /// storage version (`v1beta1`, what magnum-cluster-api writes): no manager runs to convert.
    pub openstack_crds: Vec<PathBuf>,
    /// The labels of its `config/crd/kustomization.yaml`.
    pub openstack_labels: BTreeMap<String, String>,
}

/// The labels a kustomization (`labels: [{pairs: {…}}]`, or the older `commonLabels: {…}`) puts
/// on every object it builds; none when `kustomization` does not exist. Cluster API's providers
/// put their contract labels on their CRDs this way (`cluster.x-k8s.io/v1beta2: v1beta2`), which
/// the core's topology and ClusterClass controllers read
/// (<https://cluster-api.sigs.k8s.io/developer/providers/contracts/overview.html#api-version-labels>).
///
/// Errors: a message naming the file when it does not parse.
pub fn kustomize_labels(kustomization: &Path) -> Result<BTreeMap<String, String>, String> {
    let text = match std::fs::read_to_string(kustomization) {
        Ok(t) => t,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(BTreeMap::new()),
        Err(e) => return Err(format!("{}: {e}", kustomization.display())),
    };
    let doc: Value =
        serde_norway::from_str(&text).map_err(|e| format!("{}: {e}", kustomization.display()))?;
    let mut out = BTreeMap::new();
    let pairs = doc["labels"]
        .as_array()
        .into_iter()
        .flatten()
        .map(|l| &l["pairs"])
        .chain(std::iter::once(&doc["commonLabels"]));
    for map in pairs.filter_map(Value::as_object) {
        for (k, v) in map {
            out.insert(k.clone(), v.as_str().unwrap_or_default().to_string());
        }
    }
    Ok(out)
}

/// `crd` with `labels` added to its `metadata.labels`.
fn labelled(mut crd: Value, labels: &BTreeMap<String, String>) -> Value {
    for (k, v) in labels {
        crd["metadata"]["labels"][k] = Value::String(v.clone());
    }
    crd
}

/// Builds (or finds in `<cache_dir>/accept/cluster-api-<version>/installed/`) the installation of
/// `release` with the OpenStack provider's CRDs at `openstack` (a version of
/// [`OPENSTACK_MODULE`]). The core manager is [`capi::build`]'s; the kubeadm managers build in
/// its helper module (`go get` of their packages first, for their go.sum lines).
///
/// Errors: [`AcceptError::NotVerified`] when the proxy refuses a module; [`AcceptError::Build`]
/// naming the part; [`AcceptError::Io`].
pub fn build(
    release: &ClusterApi,
    openstack: &str,
    cache_dir: &Path,
) -> Result<Installed, AcceptError> {
    let core: Manager = capi::build(release, cache_dir)?;
    let entry = core.binary.parent().expect("the manager is in its entry");
    let dir = entry.join("installed");
    let _lock = lock_entry(&dir)?;
    let helper = Helper {
        toolchain: Toolchain::new(&release.go, cache_dir),
        module: entry.join("module"),
        release,
        dir,
    };
    let (openstack_crds, openstack_labels) = helper.openstack(openstack)?;
    Ok(Installed {
        providers: helper.providers(&core)?,
        openstack_crds,
        openstack_labels,
    })
}

/// Where [`build`] works: Cluster API's helper module, its toolchain, the release, and the
/// installation's directory.
struct Helper<'a> {
    toolchain: Toolchain,
    module: PathBuf,
    release: &'a ClusterApi,
    dir: PathBuf,
}

impl Helper<'_> {
    /// The three managers (the core's is `core`) and their released CRDs, the kubeadm managers
    /// built when missing.
    fn providers(&self, core: &Manager) -> Result<Vec<Provider>, AcceptError> {
        let source = capi::download(&self.toolchain, &self.module, self.release)?;
        // (name, package, config folder, whether ClusterTopology is its feature gate)
        let parts = [
            ("cluster-api", capi::MODULE.to_string(), "config", true),
            (
                "kubeadm-control-plane",
                format!("{}/controlplane/kubeadm", capi::MODULE),
                "controlplane/kubeadm/config",
                true,
            ),
            (
                "kubeadm-bootstrap",
                format!("{}/bootstrap/kubeadm", capi::MODULE),
                "bootstrap/kubeadm/config",
                false,
            ),
        ];
        let missing: Vec<String> = parts[1..]
            .iter()
            .filter(|(name, ..)| !self.dir.join(name).is_file())
            .map(|(_, package, ..)| format!("{package}@{}", self.release.version))
            .collect();
        if !missing.is_empty() {
            capi::go_get(&self.toolchain, &self.module, &missing)?;
        }
        let mut providers = Vec::new();
        for (name, package, config, topology) in parts {
            let config = source.join(config);
            let crds_dir = self.dir.join("crds").join(name);
            if !crds_dir.is_dir() {
                capi::write_crds(&config.join("crd/bases"), &crds_dir, capi::released)?;
            }
            let binary = if name == "cluster-api" {
                core.binary.clone()
            } else {
                let binary = self.dir.join(name);
                let ldflags = capi::ldflags(self.release);
                go_build(
                    &self.toolchain,
                    &self.module,
                    name,
                    &package,
                    &ldflags,
                    &binary,
                )?;
                binary
            };
            providers.push(Provider {
                name,
                binary,
                crds: capi::list_crds(&crds_dir)?,
                labels: labels_of(&config)?,
                flags: topology.then(|| TOPOLOGY.to_string()).into_iter().collect(),
            });
        }
        Ok(providers)
    }

    /// The OpenStack provider's CRDs at `version` (storage version only) and its labels.
    fn openstack(
        &self,
        version: &str,
    ) -> Result<(Vec<PathBuf>, BTreeMap<String, String>), AcceptError> {
        let crds_dir = self.dir.join(format!("openstack-{version}"));
        let m = format!("{OPENSTACK_MODULE}@{version}");
        let part = "cluster-api-provider-openstack";
        let info = mod_download(&self.toolchain, &self.module, part, &m)?;
        let Some(source) = info["Dir"].as_str().map(PathBuf::from) else {
            return Err(AcceptError::Build {
                part: part.into(),
                message: format!("go mod download {m} named no directory"),
            });
        };
        let config = source.join("config");
        if !crds_dir.is_dir() {
            capi::write_crds(
                &config.join("crd/bases"),
                &crds_dir,
                capi::storage_version_only,
            )?;
        }
        Ok((capi::list_crds(&crds_dir)?, labels_of(&config)?))
    }
}

/// The labels of `<config>/crd/kustomization.yaml` ([`kustomize_labels`]).
fn labels_of(config: &Path) -> Result<BTreeMap<String, String>, AcceptError> {
    kustomize_labels(&config.join("crd/kustomization.yaml")).map_err(|message| AcceptError::Build {
        part: "cluster-api".into(),
        message,
    })
}

/// `crd` with its conversion done by the webhook of `webhook` ([`Webhook::conversion_url`], its
/// certificate as the CA bundle), as the kustomize patches `webhook_in_*.yaml` and cert-manager's
/// CA injector leave it in a `clusterctl` installation (`apiextensions.k8s.io/v1`
/// `CustomResourceConversion`).
pub fn converted_by(mut crd: Value, webhook: &Webhook) -> Value {
    crd["spec"]["conversion"] = json!({
        "strategy": "Webhook",
        "webhook": {
            "conversionReviewVersions": ["v1", "v1beta1"],
            "clientConfig": {
                "url": webhook.conversion_url(),
                "caBundle": base64::engine::general_purpose::STANDARD.encode(&webhook.ca_pem),
            },
        },
    });
    crd
}

/// Starts the management cluster of `installed` in `dir`: a fresh control plane (with
/// `apiserver_args`), each provider's CRDs converted by its webhook, the OpenStack provider's
/// CRDs, each with its kustomization's labels, then the managers (core first), each ready. Whatever was started is stopped again when a
/// later step fails.
///
/// Errors: those of [`ControlPlane::start_with`], [`capi::install_crds`],
/// [`Running::start_binary`]; [`AcceptError::Io`] for `dir` or a CRD file.
pub async fn start(
    binaries: &Binaries,
    installed: &Installed,
    dir: &Path,
    apiserver_args: &[String],
) -> Result<Management, AcceptError> {
    let cp = ControlPlane::start_with(
        binaries,
        &dir.join("control-plane"),
        super::control_plane::APISERVER_READY_TIMEOUT,
        apiserver_args,
    )
    .await?;
    let mut running: Vec<Running> = Vec::new();
    let started = async {
        let kube = super::kube::client(&cp.url, &cp.ca_pem, &cp.token).await?;
        let mut webhooks = Vec::new();
        let mut crds = Vec::new();
        for p in &installed.providers {
            let pdir = dir.join(p.name);
            let webhook = Webhook::new(&pdir)?;
            for f in &p.crds {
                crds.push(labelled(converted_by(read_json(f)?, &webhook), &p.labels));
            }
            webhooks.push((pdir, webhook));
        }
        for f in &installed.openstack_crds {
            crds.push(labelled(read_json(f)?, &installed.openstack_labels));
        }
        kube.apply_crds(crds, capi::ESTABLISHED_TIMEOUT).await?;
        for (p, (pdir, webhook)) in installed.providers.iter().zip(&webhooks) {
            running.push(
                Running::start_binary(p.name, &p.binary, &cp.kubeconfig, pdir, webhook, &p.flags)
                    .await?,
            );
        }
        Ok::<_, AcceptError>(kube)
    }
    .await;
    match started {
        Ok(kube) => {
            let manager = running.remove(0);
            Ok(Management {
                control_plane: cp,
                kube,
                manager,
                providers: running,
            })
        }
        Err(e) => {
            for r in running {
                r.stop().await;
            }
            cp.stop().await;
            Err(e)
        }
    }
}

fn read_json(f: &Path) -> Result<Value, AcceptError> {
    let text = std::fs::read(f).map_err(|e| AcceptError::Io(format!("{}: {e}", f.display())))?;
    serde_json::from_slice(&text).map_err(|e| AcceptError::Io(format!("{}: {e}", f.display())))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_kustomizations_labels_and_common_labels_are_read_and_put_on_a_crd() {
        let dir = tempfile::tempdir().unwrap();
        let k = dir.path().join("kustomization.yaml");
        assert!(
            kustomize_labels(&k).unwrap().is_empty(),
            "no file, no labels"
        );
        std::fs::write(
            &k,
            "labels:\n- pairs:\n    # the contract\n    cluster.x-k8s.io/v1beta1: v1beta1\n    cluster.x-k8s.io/v1beta2: v1beta2\ncommonLabels:\n  app: capo\nresources:\n- bases/x.yaml\n",
        )
        .unwrap();
        let labels = kustomize_labels(&k).unwrap();
        assert_eq!(
            labels
                .iter()
                .map(|(k, v)| format!("{k}={v}"))
                .collect::<Vec<_>>(),
            [
                "app=capo",
                "cluster.x-k8s.io/v1beta1=v1beta1",
                "cluster.x-k8s.io/v1beta2=v1beta2"
            ]
        );
        let crd = labelled(
            json!({"metadata": {"name": "x", "labels": {"keep": "me"}}}),
            &labels,
        );
        assert_eq!(crd["metadata"]["labels"]["keep"], "me");
        assert_eq!(
            crd["metadata"]["labels"]["cluster.x-k8s.io/v1beta2"],
            "v1beta2"
        );
        std::fs::write(&k, "labels: [").unwrap();
        assert!(
            kustomize_labels(&k)
                .unwrap_err()
                .contains("kustomization.yaml")
        );
    }

    #[test]
    fn a_converted_crd_names_the_managers_convert_endpoint_and_trusts_its_certificate() {
        let dir = tempfile::tempdir().unwrap();
        let w = Webhook::new(dir.path()).unwrap();
        let crd = converted_by(
            json!({"kind": "CustomResourceDefinition", "spec": {"versions": []}}),
            &w,
        );
        let c = &crd["spec"]["conversion"];
        assert_eq!(c["strategy"], "Webhook");
        assert_eq!(
            c["webhook"]["clientConfig"]["url"],
            format!("https://127.0.0.1:{}/convert", w.port)
        );
        let ca = base64::engine::general_purpose::STANDARD
            .decode(c["webhook"]["clientConfig"]["caBundle"].as_str().unwrap())
            .unwrap();
        assert_eq!(String::from_utf8(ca).unwrap(), w.ca_pem);
        assert_eq!(
            std::fs::read_to_string(w.cert_dir.join("tls.crt")).unwrap(),
            w.ca_pem
        );
    }
}
