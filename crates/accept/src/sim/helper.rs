//! occm-forge's own Go helper modules: the small modules under `<cache>/accept/` that build the
//! parts of the simulated environment (etcd and kube-apiserver, Cluster API's manager) from the
//! Go module proxy. Their go.mod is written and their go.sum resolved by occm-forge under
//! `-mod=mod` ([`Toolchain::helper_command`]), never under upstream's `-mod=readonly` rule, and a
//! failure names the helper module, never the patch series.

use std::path::Path;
use std::process::Command;

use occm_forge_core::pipeline::acceptance::AcceptError;
use occm_forge_core::pipeline::go::Toolchain;

/// Takes `<dir>/.lock` (`flock`, released by the kernel when the process dies), creating `dir`.
pub(crate) fn lock_entry(dir: &Path) -> Result<std::fs::File, AcceptError> {
    let io = |e: std::io::Error| AcceptError::Io(format!("{}: {e}", dir.display()));
    std::fs::create_dir_all(dir).map_err(io)?;
    let f = std::fs::File::create(dir.join(".lock")).map_err(io)?;
    f.lock().map_err(io)?;
    Ok(f)
}

/// Runs a `go` command (stopped on SIGINT/SIGTERM), its failure to start named for `part`.
pub(crate) fn run_go(cmd: &mut Command, part: &str) -> Result<std::process::Output, AcceptError> {
    occm_forge_core::base::interrupt::output(cmd).map_err(|e| AcceptError::Build {
        part: part.into(),
        message: format!("cannot run go: {e}"),
    })
}

/// What a failed `go` command in the helper module `module` means: the modules the proxy
/// refuses ([`AcceptError::NotVerified`]), else [`AcceptError::Build`] with Go's cause; an
/// incomplete go.mod/go.sum names the helper module as occm-forge's own.
pub(crate) fn helper_failure(part: &str, module: &Path, stderr: &str) -> AcceptError {
    use occm_forge_core::pipeline::go::{self as go, GoFailure, ModuleOwner};
    let failure = go::classify_stderr(stderr, 6, ModuleOwner::Helper);
    // Also when Go names a module graph change first (`go mod download -json` puts the refusal
    // in its JSON `Error`).
    let refused = match &failure {
        GoFailure::Refused(modules) => modules.clone(),
        _ => go::refused_modules(stderr),
    };
    if !refused.is_empty() {
        return AcceptError::NotVerified(format!(
            "the Go module proxy refuses {}, needed to build {part}",
            go::refused_list(&refused)
        ));
    }
    let summary = failure.to_string();
    let message = if matches!(failure, GoFailure::ModuleGraph(_)) {
        // Go says the module graph is incomplete: the helper is ours to resolve, not upstream's.
        format!(
            "{summary}: the go.sum of occm-forge's helper module {} did not cover it after resolving (a bug in occm-forge; remove that directory to resolve it again)",
            module.display()
        )
    } else if summary.trim().is_empty() {
        format!(
            "go failed in occm-forge's helper module {} without a message on stderr",
            module.display()
        )
    } else {
        summary
    };
    AcceptError::Build {
        part: part.into(),
        message,
    }
}

/// `go build -trimpath -buildvcs=false -ldflags <ldflags> -o <dest> <package>` in the helper
/// module `module`, written under a temporary name and renamed, so `dest` is complete or absent;
/// nothing to do when `dest` exists.
///
/// Errors: [`helper_failure`]'s.
pub(crate) fn go_build(
    toolchain: &Toolchain,
    module: &Path,
    part: &str,
    package: &str,
    ldflags: &str,
    dest: &Path,
) -> Result<(), AcceptError> {
    if dest.is_file() {
        return Ok(());
    }
    let tmp = dest.with_extension(format!("tmp{}", std::process::id()));
    let mut cmd = toolchain.command(module);
    cmd.args([
        "build",
        "-trimpath",
        "-buildvcs=false",
        "-ldflags",
        ldflags,
        "-o",
    ])
    .arg(&tmp)
    .arg(package);
    tracing::info!("building {part} ({package}) with go{}", toolchain.version);
    let out = run_go(&mut cmd, part)?;
    if !out.status.success() {
        let _ = std::fs::remove_file(&tmp);
        return Err(helper_failure(
            part,
            module,
            &String::from_utf8_lossy(&out.stderr),
        ));
    }
    std::fs::rename(&tmp, dest).map_err(|e| AcceptError::Io(format!("{}: {e}", dest.display())))
}

/// `go mod download -json <module@version>` in the helper module `module` (`part` names it in
/// errors): the JSON Go printed for it (`Dir`, `GoMod`, …).
///
/// Errors: [`AcceptError::NotVerified`] or [`AcceptError::Build`] through [`helper_failure`]
/// when Go reports an error (in its JSON or its exit status).
pub(crate) fn mod_download(
    toolchain: &Toolchain,
    module: &Path,
    part: &str,
    module_at_version: &str,
) -> Result<serde_json::Value, AcceptError> {
    let mut cmd = toolchain.command(module);
    cmd.args(["mod", "download", "-json", module_at_version]);
    let out = run_go(&mut cmd, part)?;
    let info: serde_json::Value =
        serde_json::from_slice(&out.stdout).unwrap_or(serde_json::Value::Null);
    if let Some(e) = info["Error"].as_str() {
        return Err(helper_failure(part, module, e));
    }
    if !out.status.success() {
        return Err(helper_failure(
            part,
            module,
            &String::from_utf8_lossy(&out.stderr),
        ));
    }
    Ok(info)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_refused_module_is_not_verified() {
        let e = helper_failure(
            "kube-apiserver",
            Path::new("/cache/accept/v1.31.11/module"),
            "k8s.io/kubernetes@v1.31.11: reading https://proxy.golang.org/k8s.io/kubernetes/@v/v1.31.11.zip: 403 Forbidden",
        );
        assert_eq!(
            e.to_string(),
            "NOT VERIFIED: the Go module proxy refuses k8s.io/kubernetes@v1.31.11 (403 Forbidden), needed to build kube-apiserver"
        );
    }

    #[test]
    fn a_silent_go_failure_still_says_where() {
        let e = helper_failure(
            "cluster-api",
            Path::new("/cache/accept/cluster-api-v1.13.2/module"),
            "",
        );
        assert_eq!(
            e.to_string(),
            "building cluster-api: go failed in occm-forge's helper module /cache/accept/cluster-api-v1.13.2/module without a message on stderr"
        );
    }

    #[test]
    fn an_incomplete_helper_go_sum_names_the_helper_never_the_patch_series() {
        let e = helper_failure(
            "kube-apiserver",
            Path::new("/cache/accept/v1.34.1/module"),
            "go: k8s.io/kubernetes/cmd/kube-apiserver: missing go.sum entry for module providing package k8s.io/kubernetes/cmd/kube-apiserver; to add:\n\tgo mod download k8s.io/kubernetes\n",
        )
        .to_string();
        assert!(
            e.starts_with("building kube-apiserver: go: k8s.io/kubernetes/cmd/kube-apiserver: missing go.sum entry")
                && e.contains("occm-forge's helper module /cache/accept/v1.34.1/module")
                && !e.contains("patch series"),
            "{e}"
        );
    }
}
