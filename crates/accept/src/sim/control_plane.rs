//! A real Kubernetes control plane on loopback: etcd and kube-apiserver built through the Go
//! module proxy at the versions the upstream tag's go.mod requires, cached per Kubernetes
//! version, started on free ports with generated certificates and a token file, stopped by
//! process group.
//!
//! Building: `k8s.io/kubernetes`'s go.mod resolves its staging modules (`k8s.io/api`, …) with
//! `replace … => ./staging/src/k8s.io/…`, which the module zip does not carry, so the commands
//! cannot be built from OCCM's tree. A helper module requires `k8s.io/kubernetes vX.Y.Z` and
//! `go.etcd.io/etcd/server/v3` and replaces every staging module named in that go.mod's
//! replace block with its published `v0.Y.Z` (see ../shared/notes/acceptance.md).

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use serde::Serialize;

use super::envtest;
use super::helper::{go_build, helper_failure, lock_entry, mod_download, run_go};
use super::process::{Process, free_port, last_error, wait_ready};
use occm_forge_core::kubernetes::Kube;
use occm_forge_core::pipeline::acceptance::AcceptError;
use occm_forge_core::pipeline::go::Toolchain;

/// How long the apiserver may take to answer `/readyz`.
pub const APISERVER_READY_TIMEOUT: Duration = Duration::from_secs(90);

/// The Kubernetes and etcd versions an upstream tag builds against.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, serde::Deserialize)]
pub struct Versions {
    /// `k8s.io/kubernetes` version, e.g. `v1.34.1`.
    pub kubernetes: String,
    /// `go.etcd.io/etcd/*/v3` version, e.g. `v3.6.5`.
    pub etcd: String,
}

/// Reads the required versions of `k8s.io/kubernetes` and of etcd (`go.etcd.io/etcd/server/v3`,
/// else `client/v3`, else `api/v3`) from a go.mod (single-line and block `require` directives).
///
/// Errors: [`AcceptError::Input`] naming go.mod and the missing module.
pub fn versions_from_go_mod(go_mod: &str) -> Result<Versions, AcceptError> {
    let mut requires: Vec<(String, String)> = Vec::new();
    let mut in_block = false;
    for raw in go_mod.lines() {
        let line = raw.split("//").next().unwrap_or("").trim();
        if line.is_empty() {
            continue;
        }
        let spec = if in_block {
            if line == ")" {
                in_block = false;
                continue;
            }
            line
        } else if line == "require (" || line == "require(" {
            in_block = true;
            continue;
        } else if let Some(rest) = line.strip_prefix("require ") {
            rest.trim()
        } else {
            continue;
        };
        let mut parts = spec.split_whitespace();
        if let (Some(path), Some(version)) = (parts.next(), parts.next()) {
            requires.push((path.to_string(), version.to_string()));
        }
    }
    let find = |p: &str| {
        requires
            .iter()
            .find(|(path, _)| path == p)
            .map(|(_, v)| v.clone())
    };
    let kubernetes = find("k8s.io/kubernetes").ok_or_else(|| AcceptError::Input {
        part: "go.mod".into(),
        message: "requires no k8s.io/kubernetes".into(),
    })?;
    let etcd = find("go.etcd.io/etcd/server/v3")
        .or_else(|| find("go.etcd.io/etcd/client/v3"))
        .or_else(|| find("go.etcd.io/etcd/api/v3"))
        .ok_or_else(|| AcceptError::Input {
            part: "go.mod".into(),
            message: "requires no go.etcd.io/etcd/{server,client,api}/v3".into(),
        })?;
    Ok(Versions { kubernetes, etcd })
}

/// The staging modules `k8s.io/kubernetes`'s go.mod replaces with `./staging/src/…` paths.
pub fn staging_modules(kubernetes_go_mod: &str) -> Vec<String> {
    let mut out = Vec::new();
    for raw in kubernetes_go_mod.lines() {
        let line = raw.split("//").next().unwrap_or("").trim();
        let line = line.strip_prefix("replace ").unwrap_or(line).trim();
        let Some((left, right)) = line.split_once("=>") else {
            continue;
        };
        if right.trim().starts_with("./staging/") {
            let module = left.split_whitespace().next().unwrap_or("").to_string();
            if !module.is_empty() && !out.contains(&module) {
                out.push(module);
            }
        }
    }
    out
}

/// The published version of a staging module for a Kubernetes version: `v1.34.1` → `v0.34.1`.
pub fn staging_version(kubernetes: &str) -> String {
    match kubernetes.strip_prefix("v1.") {
        Some(rest) => format!("v0.{rest}"),
        None => kubernetes.to_string(),
    }
}

/// Built control-plane binaries.
#[derive(Debug, Clone, Serialize)]
pub struct Binaries {
    /// `<cache>/accept/<kubernetes>/kube-apiserver`.
    pub kube_apiserver: PathBuf,
    /// `<cache>/accept/<kubernetes>/etcd-<etcd>`.
    pub etcd: PathBuf,
    /// Whether both came from the cache or envtest (nothing was built).
    pub cached: bool,
    /// Which came from envtest's binaries ([`envtest::find`]): `kube-apiserver`, `etcd`.
    pub envtest: Vec<&'static str>,
}

/// Builds (or finds in `<cache>/accept/<kubernetes>/`, or among envtest's binaries:
/// [`envtest::find`], each only when its own `--version` is the one `versions` asks for)
/// kube-apiserver and etcd for `versions` with `toolchain`. The binaries are written under temporary names and renamed, so a cache
/// entry is complete or absent; `<cache>/accept/<kubernetes>/.lock` (`flock`) keeps two runs
/// from building one entry at once.
///
/// The helper module (`<cache>/accept/<kubernetes>/module`) is occm-forge's own, not upstream's:
/// its go.mod is written here (requires `k8s.io/kubernetes` and `go.etcd.io/etcd/server/v3`,
/// replaces each staging module with its published version), its go.sum is resolved here with
/// `go get` under `-mod=mod` (Go checks every module against the checksum database as it adds
/// it), and the builds then run under upstream's `-mod=readonly`, which checks that the go.sum
/// covers every package compiled. See ../shared/notes/acceptance.md.
///
/// Errors: [`AcceptError::NotVerified`] naming the modules the Go module proxy refuses (e.g.
/// `k8s.io/kubernetes@v1.31.11 (403 Forbidden)`); [`AcceptError::Build`] for other failures,
/// naming the helper module when its go.mod/go.sum is at fault (never the patch series).
pub fn build(
    versions: &Versions,
    toolchain: &Toolchain,
    cache_dir: &Path,
) -> Result<Binaries, AcceptError> {
    let dir = cache_dir.join("accept").join(&versions.kubernetes);
    let found = envtest::find(
        envtest::Wanted {
            kubernetes: &versions.kubernetes,
            etcd: &versions.etcd,
        },
        &envtest::Sources::from_env(),
    );
    let apiserver = found
        .kube_apiserver
        .clone()
        .unwrap_or_else(|| dir.join("kube-apiserver"));
    let etcd = found
        .etcd
        .clone()
        .unwrap_or_else(|| dir.join(format!("etcd-{}", versions.etcd)));
    let mut from_envtest = Vec::new();
    if found.kube_apiserver.is_some() {
        from_envtest.push("kube-apiserver");
    }
    if found.etcd.is_some() {
        from_envtest.push("etcd");
    }
    let done = || apiserver.is_file() && etcd.is_file();
    if done() {
        return Ok(Binaries {
            kube_apiserver: apiserver,
            etcd,
            cached: true,
            envtest: from_envtest,
        });
    }
    let _lock = lock_entry(&dir)?;
    if done() {
        // Another run built them while this one waited.
        return Ok(Binaries {
            kube_apiserver: apiserver,
            etcd,
            cached: true,
            envtest: from_envtest,
        });
    }
    let module = dir.join("module");
    let k8s_go_mod = probe_kubernetes(versions, toolchain, &module)?;
    write_helper_go_mod(versions, toolchain, &module, &k8s_go_mod)?;
    resolve_helper(versions, toolchain, &module)?;

    let minor = versions
        .kubernetes
        .trim_start_matches('v')
        .split('.')
        .nth(1)
        .unwrap_or("0")
        .to_string();
    let ldflags = format!(
        "-s -w -X k8s.io/component-base/version.gitVersion={v} -X k8s.io/component-base/version.gitMajor=1 -X k8s.io/component-base/version.gitMinor={minor} -X k8s.io/component-base/version.gitTreeState=clean",
        v = versions.kubernetes
    );
    go_build(
        toolchain,
        &module,
        "kube-apiserver",
        KUBE_APISERVER,
        &ldflags,
        &apiserver,
    )?;
    go_build(toolchain, &module, "etcd", ETCD_SERVER, "-s -w", &etcd)?;
    Ok(Binaries {
        kube_apiserver: apiserver,
        etcd,
        cached: false,
        envtest: from_envtest,
    })
}

/// The kube-apiserver command's package.
const KUBE_APISERVER: &str = "k8s.io/kubernetes/cmd/kube-apiserver";
/// etcd's server command (the module root is `package main`).
const ETCD_SERVER: &str = "go.etcd.io/etcd/server/v3";

/// Writes the helper module's go.mod: `k8s.io/kubernetes` and etcd's server required at
/// `versions`, every staging module of `k8s_go_mod` replaced by its published version; removes
/// any go.sum (it is resolved next).
fn write_helper_go_mod(
    versions: &Versions,
    toolchain: &Toolchain,
    module: &Path,
    k8s_go_mod: &str,
) -> Result<(), AcceptError> {
    let k8s = format!("k8s.io/kubernetes@{}", versions.kubernetes);
    let staging = staging_modules(k8s_go_mod);
    if staging.is_empty() {
        return Err(AcceptError::Build {
            part: "kube-apiserver".into(),
            message: format!("the go.mod of {k8s} replaces no ./staging modules"),
        });
    }
    let v0 = staging_version(&versions.kubernetes);
    let mut text = helper_head(toolchain);
    text.push_str(&format!(
        "\nrequire (\n\tk8s.io/kubernetes {}\n\tgo.etcd.io/etcd/server/v3 {}\n)\n\nreplace (\n",
        versions.kubernetes, versions.etcd
    ));
    for m in &staging {
        text.push_str(&format!("\t{m} => {m} {v0}\n"));
    }
    text.push_str(")\n");
    let io = |e: std::io::Error| AcceptError::Io(format!("{}: {e}", module.display()));
    let _ = std::fs::remove_file(module.join("go.sum"));
    std::fs::write(module.join("go.mod"), text).map_err(io)
}

/// Resolves the helper module's go.sum for the two commands: `go get <package>@<version>` for
/// kube-apiserver and etcd under `-mod=mod` ([`Toolchain::helper_command`]), which adds the
/// go.sum entries those packages and their imports need.
///
/// Errors: as [`build`].
fn resolve_helper(
    versions: &Versions,
    toolchain: &Toolchain,
    module: &Path,
) -> Result<(), AcceptError> {
    let mut cmd = toolchain.helper_command(module);
    cmd.arg("get")
        .arg(format!("{KUBE_APISERVER}@{}", versions.kubernetes))
        .arg(format!("{ETCD_SERVER}@{}", versions.etcd));
    tracing::info!(
        "resolving the helper module {} (go get kube-apiserver {}, etcd {})",
        module.display(),
        versions.kubernetes,
        versions.etcd
    );
    let out = run_go(&mut cmd, "kube-apiserver")?;
    if !out.status.success() {
        return Err(helper_failure(
            "kube-apiserver",
            module,
            &String::from_utf8_lossy(&out.stderr),
        ));
    }
    Ok(())
}

fn helper_head(toolchain: &Toolchain) -> String {
    format!(
        "module occm-forge.invalid/accept/control-plane\n\ngo {}\n",
        toolchain.version
    )
}

/// Downloads `k8s.io/kubernetes` at `versions.kubernetes` through the Go module proxy (into the
/// module cache) and returns its go.mod. This is the first step of [`build`] and a quick probe of
/// whether the proxy serves that version at all.
///
/// Errors: [`AcceptError::NotVerified`] naming the module when the proxy refuses it;
/// [`AcceptError::Build`] otherwise.
pub fn kubernetes_go_mod(
    versions: &Versions,
    toolchain: &Toolchain,
    cache_dir: &Path,
) -> Result<String, AcceptError> {
    let dir = cache_dir.join("accept").join(&versions.kubernetes);
    let _lock = lock_entry(&dir)?;
    probe_kubernetes(versions, toolchain, &dir.join("module"))
}

/// [`kubernetes_go_mod`] in the helper module directory `module`, whose lock the caller holds.
fn probe_kubernetes(
    versions: &Versions,
    toolchain: &Toolchain,
    module: &Path,
) -> Result<String, AcceptError> {
    let io = |e: std::io::Error| AcceptError::Io(format!("{}: {e}", module.display()));
    std::fs::create_dir_all(module).map_err(io)?;
    std::fs::write(module.join("go.mod"), helper_head(toolchain)).map_err(io)?;
    let _ = std::fs::remove_file(module.join("go.sum"));
    let k8s = format!("k8s.io/kubernetes@{}", versions.kubernetes);
    let info = mod_download(toolchain, module, "kube-apiserver", &k8s)?;
    let gomod_path = info["GoMod"].as_str().unwrap_or_default();
    std::fs::read_to_string(gomod_path).map_err(|e| AcceptError::Build {
        part: "kube-apiserver".into(),
        message: format!("go.mod of {k8s} ({gomod_path}): {e}"),
    })
}

/// Generated credentials of one control plane.
struct Pki {
    ca_pem: String,
    cert: PathBuf,
    key: PathBuf,
    sa_key: PathBuf,
    sa_pub: PathBuf,
}

fn generate_pki(dir: &Path) -> Result<Pki, String> {
    use rcgen::{
        BasicConstraints, CertificateParams, DnType, ExtendedKeyUsagePurpose, IsCa, Issuer,
        KeyPair, KeyUsagePurpose,
    };
    let e = |e: rcgen::Error| e.to_string();
    let now = time::OffsetDateTime::now_utc();
    let mut ca = CertificateParams::new(Vec::<String>::new()).map_err(e)?;
    ca.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    ca.distinguished_name
        .push(DnType::CommonName, "occm-forge accept CA");
    ca.key_usages = vec![
        KeyUsagePurpose::KeyCertSign,
        KeyUsagePurpose::DigitalSignature,
    ];
    ca.not_before = now - time::Duration::hours(1);
    ca.not_after = now + time::Duration::days(2);
    let ca_key = KeyPair::generate().map_err(e)?;
    let ca_cert = ca.self_signed(&ca_key).map_err(e)?;
    let issuer = Issuer::new(ca, ca_key);

    let mut leaf = CertificateParams::new(vec![
        "127.0.0.1".to_string(),
        "localhost".to_string(),
        "kubernetes.default.svc".to_string(),
    ])
    .map_err(e)?;
    leaf.distinguished_name
        .push(DnType::CommonName, "kube-apiserver");
    leaf.extended_key_usages = vec![ExtendedKeyUsagePurpose::ServerAuth];
    leaf.key_usages = vec![KeyUsagePurpose::DigitalSignature];
    leaf.use_authority_key_identifier_extension = true;
    leaf.not_before = now - time::Duration::hours(1);
    leaf.not_after = now + time::Duration::days(2);
    let leaf_key = KeyPair::generate().map_err(e)?;
    let leaf_cert = leaf.signed_by(&leaf_key, &issuer).map_err(e)?;
    let sa = KeyPair::generate().map_err(e)?;

    let write = |name: &str, text: &str| -> Result<PathBuf, String> {
        let p = dir.join(name);
        std::fs::write(&p, text).map_err(|e| format!("{}: {e}", p.display()))?;
        Ok(p)
    };
    write("ca.crt", &ca_cert.pem())?;
    Ok(Pki {
        ca_pem: ca_cert.pem(),
        cert: write("apiserver.crt", &leaf_cert.pem())?,
        key: write("apiserver.key", &leaf_key.serialize_pem())?,
        sa_key: write("service-account.key", &sa.serialize_pem())?,
        sa_pub: write("service-account.pub", &sa.public_key_pem())?,
    })
}

/// How many times [`ControlPlane::start`] starts a control plane whose port another program took
/// in between.
pub const PORT_TRIES: usize = 3;

/// The loopback ports of one control plane.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Ports {
    /// etcd `--listen-client-urls`.
    pub etcd_client: u16,
    /// etcd `--listen-peer-urls`.
    pub etcd_peer: u16,
    /// kube-apiserver `--secure-port`.
    pub apiserver: u16,
}

impl Ports {
    /// Three free ports (bound and released; a port taken in between makes its server exit,
    /// which [`ControlPlane::start_on`] reports).
    pub fn free() -> std::io::Result<Ports> {
        Ok(Ports {
            etcd_client: free_port()?,
            etcd_peer: free_port()?,
            apiserver: free_port()?,
        })
    }
}

/// A running etcd + kube-apiserver.
pub struct ControlPlane {
    /// `https://127.0.0.1:<port>`.
    pub url: String,
    /// PEM of the CA that signed the apiserver's serving certificate.
    pub ca_pem: String,
    /// Bearer token of a `system:masters` user (the token file's only line).
    pub token: String,
    /// A kubeconfig for that user and this apiserver.
    pub kubeconfig: PathBuf,
    /// `gitVersion` the apiserver reports at `/version`.
    pub version: String,
    /// Seconds from starting etcd to the apiserver's `/readyz` answering `ok`.
    pub ready_seconds: f64,
    apiserver: Process,
    etcd: Process,
}

impl ControlPlane {
    /// Starts etcd and kube-apiserver in `dir` on free loopback ports (see
    /// [`ControlPlane::start_on`]). A free port is found by binding and releasing it, so another
    /// program may take it before etcd or kube-apiserver binds it (`bind: address already in
    /// use`); then the control plane is started again on new ports, in a clean `dir`, at most
    /// [`PORT_TRIES`] times in all.
    pub async fn start(
        binaries: &Binaries,
        dir: &Path,
        ready_timeout: Duration,
    ) -> Result<ControlPlane, AcceptError> {
        Self::start_with(binaries, dir, ready_timeout, &[]).await
    }

    /// [`ControlPlane::start`] with `apiserver_args` added to kube-apiserver's command line
    /// (e.g. `--audit-policy-file=…`, `--audit-log-path=…`).
    pub async fn start_with(
        binaries: &Binaries,
        dir: &Path,
        ready_timeout: Duration,
        apiserver_args: &[String],
    ) -> Result<ControlPlane, AcceptError> {
        let mut tries = 0;
        loop {
            tries += 1;
            let ports = Ports::free().map_err(|e| AcceptError::ControlPlane {
                part: "etcd".into(),
                message: format!("no free loopback port: {e}"),
            })?;
            match Self::start_on_with(binaries, dir, ready_timeout, ports, apiserver_args).await {
                Err(AcceptError::ControlPlane { part, message })
                    if tries < PORT_TRIES && message.contains("address already in use") =>
                {
                    tracing::warn!(
                        "{part}: a port was taken by another program before it bound it ({message}); starting the control plane again on new ports"
                    );
                    std::fs::remove_dir_all(dir)
                        .map_err(|e| AcceptError::Io(format!("{}: {e}", dir.display())))?;
                }
                other => return other,
            }
        }
    }

    /// Starts etcd and kube-apiserver in `dir` on `ports` (logs `etcd.log`,
    /// `kube-apiserver.log`, data, certificates and the kubeconfig there) and waits until
    /// `/readyz` answers, at most `ready_timeout` (etcd's `/health`: at most 30 s).
    ///
    /// Errors: [`AcceptError::ControlPlane`] naming etcd or kube-apiserver: it exited (the
    /// last error line of its log, e.g. `bind: address already in use`) or did not get ready
    /// in time. Both are stopped before the error returns.
    pub async fn start_on(
        binaries: &Binaries,
        dir: &Path,
        ready_timeout: Duration,
        ports: Ports,
    ) -> Result<ControlPlane, AcceptError> {
        Self::start_on_with(binaries, dir, ready_timeout, ports, &[]).await
    }

    async fn start_on_with(
        binaries: &Binaries,
        dir: &Path,
        ready_timeout: Duration,
        ports: Ports,
        apiserver_args: &[String],
    ) -> Result<ControlPlane, AcceptError> {
        let t0 = Instant::now();
        let io = |e: std::io::Error| AcceptError::Io(format!("{}: {e}", dir.display()));
        let pki_dir = dir.join("pki");
        std::fs::create_dir_all(&pki_dir).map_err(io)?;
        let pki = generate_pki(&pki_dir).map_err(|m| AcceptError::ControlPlane {
            part: "kube-apiserver".into(),
            message: format!("certificates: {m}"),
        })?;
        let token = new_token(dir);
        let tokens = dir.join("tokens.csv");
        std::fs::write(&tokens, format!("{token},admin,admin,system:masters\n")).map_err(io)?;
        let Ports {
            etcd_client: client_port,
            etcd_peer: peer_port,
            apiserver: api_port,
        } = ports;
        let etcd_url = format!("http://127.0.0.1:{client_port}");
        let mut etcd = start_etcd(binaries, dir, &etcd_url, peer_port, ready_timeout).await?;

        let url = format!("https://127.0.0.1:{api_port}");
        let mut apiserver =
            spawn_apiserver(binaries, dir, &pki, &etcd_url, api_port, apiserver_args)?;
        let kube = Kube::with_token(&url, &pki.ca_pem, &token, Duration::from_secs(5)).await?;
        let ready = wait_ready(&mut apiserver, ready_timeout, || async {
            kube.get_text("/readyz").await.is_ok()
        })
        .await;
        if let Err(e) = ready {
            let _ = apiserver.stop(Duration::from_secs(5)).await;
            let _ = etcd.stop(Duration::from_secs(5)).await;
            return Err(e);
        }
        let version = kube.version().await.unwrap_or_default();
        let kubeconfig = write_kubeconfig(dir, &url, &token)?;
        Ok(ControlPlane {
            url,
            ca_pem: pki.ca_pem,
            token,
            kubeconfig,
            version,
            ready_seconds: t0.elapsed().as_secs_f64(),
            apiserver,
            etcd,
        })
    }

    /// Stops kube-apiserver, then etcd (SIGTERM, SIGKILL after 10 s).
    pub async fn stop(mut self) {
        let _ = self.apiserver.stop(Duration::from_secs(10)).await;
        let _ = self.etcd.stop(Duration::from_secs(10)).await;
    }

    /// Whether either process has exited (and which, with its last error line).
    pub(crate) fn crashed(&mut self) -> Option<String> {
        for p in [&mut self.apiserver, &mut self.etcd] {
            if let Some(s) = p.exited() {
                return Some(format!(
                    "{} exited ({s}): {}",
                    p.name,
                    last_error(&p.log_text())
                ));
            }
        }
        None
    }
}

/// A bearer token for one control plane: the hex SHA-256 (64 characters) of the current
/// instant, this process's ID and `dir`.
fn new_token(dir: &Path) -> String {
    use sha2::Digest as _;
    let seed = format!(
        "{:?}{}{}",
        Instant::now(),
        std::process::id(),
        dir.display()
    );
    hex::encode(sha2::Sha256::digest(seed.as_bytes()))
}

/// Starts etcd in `dir` (data in `etcd-data`, log `etcd.log`) serving clients at `etcd_url`
/// (`http://127.0.0.1:<port>`) and peers on loopback `peer_port`, and waits until its
/// `/health` reports `true`, at most `ready_timeout` capped at 30 s.
///
/// Errors: [`AcceptError::ControlPlane`] naming etcd (it cannot be started, exited, or was not
/// healthy in time; stopped then), [`AcceptError::Io`] when the HTTP client cannot be built.
async fn start_etcd(
    binaries: &Binaries,
    dir: &Path,
    etcd_url: &str,
    peer_port: u16,
    ready_timeout: Duration,
) -> Result<Process, AcceptError> {
    let peer_url = format!("http://127.0.0.1:{peer_port}");
    let mut cmd = Command::new(&binaries.etcd);
    cmd.current_dir(dir)
        .arg("--name=accept")
        .arg(format!("--data-dir={}", dir.join("etcd-data").display()))
        .arg(format!("--listen-client-urls={etcd_url}"))
        .arg(format!("--advertise-client-urls={etcd_url}"))
        .arg(format!("--listen-peer-urls={peer_url}"))
        .arg(format!("--initial-advertise-peer-urls={peer_url}"))
        .arg(format!("--initial-cluster=accept={peer_url}"))
        .arg("--unsafe-no-fsync=true");
    let mut etcd = Process::spawn("etcd", cmd, &dir.join("etcd.log")).map_err(|e| {
        AcceptError::ControlPlane {
            part: "etcd".into(),
            message: format!("cannot start {}: {e}", binaries.etcd.display()),
        }
    })?;
    let plain = reqwest::Client::builder()
        .timeout(Duration::from_secs(5))
        .build()
        .map_err(|e| AcceptError::Io(format!("HTTP client: {e}")))?;
    let health = format!("{etcd_url}/health");
    wait_ready(
        &mut etcd,
        ready_timeout.min(Duration::from_secs(30)),
        || async {
            match plain.get(&health).send().await {
                Ok(r) if r.status().is_success() => {
                    r.text().await.map(|t| t.contains("true")).unwrap_or(false)
                }
                _ => false,
            }
        },
    )
    .await?;
    Ok(etcd)
}

/// Spawns kube-apiserver in `dir` (log `kube-apiserver.log`) on loopback `api_port` against
/// etcd at `etcd_url`, serving with `pki`'s certificate, authenticating the token file
/// `dir/tokens.csv`, authorising by RBAC, with `extra` arguments last. Does not wait for it to
/// get ready.
///
/// Errors: [`AcceptError::ControlPlane`] naming kube-apiserver when it cannot be started.
fn spawn_apiserver(
    binaries: &Binaries,
    dir: &Path,
    pki: &Pki,
    etcd_url: &str,
    api_port: u16,
    extra: &[String],
) -> Result<Process, AcceptError> {
    let mut cmd = Command::new(&binaries.kube_apiserver);
    cmd.current_dir(dir)
        .arg(format!("--etcd-servers={etcd_url}"))
        .arg("--bind-address=127.0.0.1")
        .arg("--advertise-address=127.0.0.1")
        .arg(format!("--secure-port={api_port}"))
        .arg(format!("--cert-dir={}", dir.join("pki").display()))
        .arg(format!("--tls-cert-file={}", pki.cert.display()))
        .arg(format!("--tls-private-key-file={}", pki.key.display()))
        .arg(format!(
            "--token-auth-file={}",
            dir.join("tokens.csv").display()
        ))
        .arg("--authorization-mode=RBAC")
        .arg("--service-account-issuer=https://kubernetes.default.svc")
        .arg(format!(
            "--service-account-key-file={}",
            pki.sa_pub.display()
        ))
        .arg(format!(
            "--service-account-signing-key-file={}",
            pki.sa_key.display()
        ))
        .arg("--service-cluster-ip-range=10.0.0.0/24")
        .args(extra);
    Process::spawn("kube-apiserver", cmd, &dir.join("kube-apiserver.log")).map_err(|e| {
        AcceptError::ControlPlane {
            part: "kube-apiserver".into(),
            message: format!("cannot start {}: {e}", binaries.kube_apiserver.display()),
        }
    })
}

/// Writes `dir/kubeconfig` (JSON): cluster `accept` at `url` trusting `dir/pki/ca.crt`, user
/// `admin` with the bearer `token`, current context `accept`. Returns its path.
///
/// Errors: [`AcceptError::Io`] naming `dir` when it cannot be written.
fn write_kubeconfig(dir: &Path, url: &str, token: &str) -> Result<PathBuf, AcceptError> {
    let kubeconfig = dir.join("kubeconfig");
    let kc = serde_json::json!({
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [{"name": "accept", "cluster": {
            "server": url,
            "certificate-authority": dir.join("pki").join("ca.crt"),
        }}],
        "users": [{"name": "admin", "user": {"token": token}}],
        "contexts": [{"name": "accept", "context": {"cluster": "accept", "user": "admin"}}],
        "current-context": "accept",
    });
    std::fs::write(
        &kubeconfig,
        serde_json::to_vec_pretty(&kc).expect("kubeconfig serialises"),
    )
    .map_err(|e| AcceptError::Io(format!("{}: {e}", dir.display())))?;
    Ok(kubeconfig)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn versions_come_from_require_blocks_and_lines() {
        let go_mod = "module k8s.io/cloud-provider-openstack\n\ngo 1.24.0\n\nrequire (\n\tgithub.com/gophercloud/gophercloud/v2 v2.7.0\n\tgo.etcd.io/etcd/client/v3 v3.6.5 // indirect\n\tk8s.io/kubernetes v1.34.1\n)\n";
        assert_eq!(
            versions_from_go_mod(go_mod).unwrap(),
            Versions {
                kubernetes: "v1.34.1".into(),
                etcd: "v3.6.5".into()
            }
        );
        let single = "module x\nrequire k8s.io/kubernetes v1.32.7\nrequire go.etcd.io/etcd/server/v3 v3.5.18\n";
        assert_eq!(versions_from_go_mod(single).unwrap().etcd, "v3.5.18");
        let e = versions_from_go_mod("module x\n").unwrap_err().to_string();
        assert!(
            e.contains("go.mod") && e.contains("k8s.io/kubernetes"),
            "{e}"
        );
    }

    #[test]
    fn staging_modules_are_read_from_the_replace_block() {
        let go_mod = "module k8s.io/kubernetes\n\nreplace (\n\tk8s.io/api => ./staging/src/k8s.io/api\n\tk8s.io/client-go => ./staging/src/k8s.io/client-go\n\tgithub.com/x/y => github.com/x/y v1.0.0\n)\nreplace k8s.io/kms => ./staging/src/k8s.io/kms\n";
        assert_eq!(
            staging_modules(go_mod),
            vec!["k8s.io/api", "k8s.io/client-go", "k8s.io/kms"]
        );
        assert_eq!(staging_version("v1.34.1"), "v0.34.1");
        assert_eq!(staging_version("v1.36.0-rc.1"), "v0.36.0-rc.1");
    }
}
