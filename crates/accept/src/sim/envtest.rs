//! envtest's binaries: the kube-apiserver and etcd that controller-runtime's users keep per
//! Kubernetes version, used instead of building them when their versions are the ones a minor
//! asks for.
//!
//! Where they are looked for, in order (controller-runtime `pkg/envtest` and
//! `tools/setup-envtest`): the directory `$KUBEBUILDER_ASSETS` names (it holds `kube-apiserver`
//! and `etcd`), then setup-envtest's store, `$XDG_DATA_HOME/kubebuilder-envtest/k8s/` (else
//! `~/.local/share/kubebuilder-envtest/k8s/`), in its directory for the Kubernetes version and
//! this host (`1.34.1-linux-amd64`). A binary is used only when it runs and its own `--version`
//! says the version asked for (`Kubernetes v1.34.1`; `etcd Version: 3.6.5`): a path is never
//! trusted by its name.

use std::path::{Path, PathBuf};
use std::process::Command;

/// Where to look.
#[derive(Debug, Clone, Default)]
pub struct Sources {
    /// `$KUBEBUILDER_ASSETS`.
    pub assets: Option<PathBuf>,
    /// setup-envtest's store of Kubernetes versions (`…/kubebuilder-envtest/k8s`).
    pub store: Option<PathBuf>,
}

impl Sources {
    /// From the environment: `KUBEBUILDER_ASSETS`, `XDG_DATA_HOME`, `HOME`.
    pub fn from_env() -> Self {
        let data = std::env::var_os("XDG_DATA_HOME")
            .filter(|v| !v.is_empty())
            .map(PathBuf::from)
            .or_else(|| std::env::var_os("HOME").map(|h| Path::new(&h).join(".local/share")));
        Sources {
            assets: std::env::var_os("KUBEBUILDER_ASSETS")
                .filter(|v| !v.is_empty())
                .map(PathBuf::from),
            store: data.map(|d| d.join("kubebuilder-envtest").join("k8s")),
        }
    }

    /// The directories to look in for Kubernetes `kubernetes` (`v1.34.1`), in order.
    fn dirs(&self, kubernetes: &str) -> Vec<PathBuf> {
        let mut dirs: Vec<PathBuf> = self.assets.iter().cloned().collect();
        if let Some(store) = &self.store {
            let arch = match std::env::consts::ARCH {
                "x86_64" => "amd64",
                "aarch64" => "arm64",
                "powerpc64" => "ppc64le",
                other => other,
            };
            let v = kubernetes.trim_start_matches('v');
            dirs.push(store.join(format!("{v}-{}-{arch}", std::env::consts::OS)));
        }
        dirs
    }
}

/// The versions to find: Kubernetes (`v1.34.1`) and etcd (`v3.6.5`), as an upstream go.mod
/// requires them.
#[derive(Debug, Clone, Copy)]
pub struct Wanted<'a> {
    /// `k8s.io/kubernetes`'s version.
    pub kubernetes: &'a str,
    /// etcd's version.
    pub etcd: &'a str,
}

/// What [`find`] found: each binary whose version is the one asked for, else `None`.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Found {
    /// kube-apiserver at `versions.kubernetes`.
    pub kube_apiserver: Option<PathBuf>,
    /// etcd at `versions.etcd`.
    pub etcd: Option<PathBuf>,
}

/// Looks for kube-apiserver and etcd at `versions` in `sources` ([module docs](self)); a binary
/// that is missing, does not run or says another version is passed over, with a log line saying
/// which and why.
pub fn find(versions: Wanted<'_>, sources: &Sources) -> Found {
    let mut found = Found::default();
    for dir in sources.dirs(versions.kubernetes) {
        if found.kube_apiserver.is_none() {
            found.kube_apiserver = checked(
                &dir.join("kube-apiserver"),
                &format!("Kubernetes {}", versions.kubernetes),
            );
        }
        if found.etcd.is_none() {
            found.etcd = checked(
                &dir.join("etcd"),
                &format!("etcd Version: {}", versions.etcd.trim_start_matches('v')),
            );
        }
    }
    found
}

/// `path` when it runs and a line of its `--version` output is `want`.
fn checked(path: &Path, want: &str) -> Option<PathBuf> {
    if !path.is_file() {
        return None;
    }
    let said = match Command::new(path).arg("--version").output() {
        Ok(o) if o.status.success() => String::from_utf8_lossy(&o.stdout).into_owned(),
        Ok(o) => {
            tracing::info!(
                "envtest: {} --version failed ({}); not used",
                path.display(),
                o.status
            );
            return None;
        }
        Err(e) => {
            tracing::info!("envtest: {} does not run ({e}); not used", path.display());
            return None;
        }
    };
    if said.lines().any(|l| l.trim() == want) {
        tracing::info!("envtest: using {} ({want})", path.display());
        Some(path.to_path_buf())
    } else {
        let first = said.lines().next().unwrap_or("").trim();
        tracing::info!(
            "envtest: {} says `{first}`, not `{want}`; not used",
            path.display()
        );
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::PermissionsExt;

    /// A program at `path` that prints `said` for `--version`, as the real ones do.
    fn program(path: &Path, said: &str) {
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(path, format!("#!/bin/sh\nprintf '%s\\n' '{said}'\n")).unwrap();
        std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o755)).unwrap();
    }

    fn versions() -> Wanted<'static> {
        Wanted {
            kubernetes: "v1.34.1",
            etcd: "v3.6.5",
        }
    }

    #[test]
    fn binaries_are_used_by_the_version_they_say_never_by_their_path() {
        let d = tempfile::tempdir().unwrap();
        let assets = d.path().join("assets");
        let store = d.path().join("store");
        // KUBEBUILDER_ASSETS holds another Kubernetes and the right etcd; the store the right
        // Kubernetes under its version's directory.
        program(&assets.join("kube-apiserver"), "Kubernetes v1.33.4");
        program(
            &assets.join("etcd"),
            "etcd Version: 3.6.5\nGit SHA: Not provided (use ./build instead of go build)",
        );
        let host = format!(
            "1.34.1-{}-{}",
            std::env::consts::OS,
            match std::env::consts::ARCH {
                "x86_64" => "amd64",
                "aarch64" => "arm64",
                o => o,
            }
        );
        program(
            &store.join(&host).join("kube-apiserver"),
            "Kubernetes v1.34.1",
        );
        let sources = Sources {
            assets: Some(assets.clone()),
            store: Some(store.clone()),
        };
        let found = find(versions(), &sources);
        assert_eq!(
            found,
            Found {
                kube_apiserver: Some(store.join(&host).join("kube-apiserver")),
                etcd: Some(assets.join("etcd")),
            }
        );
        // A file that is not a program, or one that fails, is passed over.
        std::fs::write(
            store.join(&host).join("kube-apiserver"),
            "Kubernetes v1.34.1",
        )
        .unwrap();
        program(&assets.join("etcd"), "etcd Version: 3.6.4");
        assert_eq!(find(versions(), &sources), Found::default());
        assert_eq!(find(versions(), &Sources::default()), Found::default());
    }
}
