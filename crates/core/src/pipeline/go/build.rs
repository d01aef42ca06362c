//! Build stage: `CGO_ENABLED=0 go build -trimpath` of OCCM per platform, in the Go environment
//! of [`super::platform_env`], with upstream's ldflags (upstream `Makefile` L39: `-w -s -X
//! k8s.io/component-base/version.gitVersion=$(VERSION) -X
//! k8s.io/cloud-provider-openstack/pkg/version.Version=$(VERSION)`).

use std::path::{Path, PathBuf};

use super::{Toolchain, summarize_stderr};
use crate::config::Platform;

/// The main package built into the image.
pub const MAIN_PACKAGE: &str = "./cmd/openstack-cloud-controller-manager";

/// What to build.
#[derive(Debug, Clone)]
pub struct BuildRequest<'a> {
    /// Work tree (module root).
    pub dir: &'a Path,
    /// Toolchain and caches.
    pub toolchain: &'a Toolchain,
    /// Version stamped into both ldflags variables (the image tag).
    pub version: &'a str,
    /// Target platforms.
    pub platforms: &'a [Platform],
    /// Directory for the binaries; each lands at `<out_dir>/<os>-<arch>[-<variant>]/openstack-cloud-controller-manager`.
    pub out_dir: &'a Path,
}

/// One built binary.
#[derive(Debug, Clone)]
pub struct Binary {
    /// Its platform.
    pub platform: Platform,
    /// Where it was written.
    pub path: PathBuf,
}

/// Build failures.
#[derive(Debug, thiserror::Error)]
#[error("go build for {platform}: {message}")]
pub struct BuildError {
    /// The platform that failed.
    pub platform: String,
    /// The tail of the compiler output, or the full file system it names.
    pub message: String,
    /// Whether the build failed because a file system filled ([`crate::base::disk::full_in_output`]):
    /// exit 16, not a compile error.
    pub full: bool,
    /// The modules the Go module proxy refused, when that is why the build failed (empty
    /// otherwise): a caller that proves something says "not verified", not "does not compile".
    pub refused: Vec<super::RefusedModule>,
}

/// What to do when Go's writes filled a file system.
pub(crate) const FULL_FIX: &str = "free some room there, or point occm-forge's cache (--cache-dir, OCCM_FORGE_CACHE), where Go keeps its modules, toolchains and compiled packages, at a file system with room (a build of upstream takes about 6 GiB from an empty cache)";

/// The `-ldflags` value for `version`.
pub fn ldflags(version: &str) -> String {
    format!(
        "-s -w -X k8s.io/component-base/version.gitVersion={version} -X k8s.io/cloud-provider-openstack/pkg/version.Version={version}"
    )
}

/// Cross-compiles OCCM for every platform, the platforms concurrently (Go's build cache is safe
/// for concurrent use and shares the platform-independent work). Binaries come back in platform
/// order; the first failing platform's error is returned.
pub fn build(req: &BuildRequest<'_>) -> Result<Vec<Binary>, BuildError> {
    std::thread::scope(|s| {
        let handles: Vec<_> = req
            .platforms
            .iter()
            .map(|p| s.spawn(move || build_one(req, p)))
            .collect();
        handles
            .into_iter()
            .map(|h| h.join().expect("a build thread panicked"))
            .collect()
    })
}

fn build_one(req: &BuildRequest<'_>, p: &Platform) -> Result<Binary, BuildError> {
    let dir = req.out_dir.join(p.to_string().replace('/', "-"));
    let err = |message: String| BuildError {
        platform: p.to_string(),
        message,
        full: false,
        refused: Vec::new(),
    };
    std::fs::create_dir_all(&dir).map_err(|e| err(format!("{}: {e}", dir.display())))?;
    let path = dir.join("openstack-cloud-controller-manager");
    let mut cmd = req.toolchain.command(req.dir);
    cmd.envs(super::platform_env(p));
    cmd.args([
        "build",
        "-trimpath",
        "-buildvcs=false",
        "-ldflags",
        &ldflags(req.version),
        "-o",
    ])
    .arg(&path)
    .arg(MAIN_PACKAGE);
    let output =
        crate::base::interrupt::output(&mut cmd).map_err(|e| err(format!("cannot run go: {e}")))?;
    if !output.status.success() {
        let stderr = String::from_utf8_lossy(&output.stderr);
        if let Some(line) = crate::base::disk::full_in_output(&stderr) {
            return Err(BuildError {
                full: true,
                ..err(format!("{line}; {FULL_FIX}"))
            });
        }
        let failure = super::classify_stderr(&stderr, 8, super::ModuleOwner::Upstream);
        let refused = match &failure {
            super::GoFailure::Refused(modules) => modules.clone(),
            _ => Vec::new(),
        };
        return Err(BuildError {
            refused,
            ..err(format!("{}: {failure}", output.status))
        });
    }
    Ok(Binary {
        platform: p.clone(),
        path,
    })
}

pub use super::buildinfo::{BuildInfo, Module, parse_version_m};

/// Reads a binary's embedded module list: from the binary itself ([`super::buildinfo::read_file`], no Go
/// process), else with `go version -m` of the minor's toolchain. The text form of `go version
/// -m` is read rather than `-json`, which Go toolchains before 1.24 do not have (1.31 to 1.33
/// build with Go 1.22 to 1.24).
pub fn read_build_info(
    toolchain: &Toolchain,
    dir: &Path,
    binary: &Path,
) -> Result<BuildInfo, BuildError> {
    let err = |message: String| BuildError {
        platform: binary.display().to_string(),
        message,
        full: false,
        refused: Vec::new(),
    };
    if let Ok(info) = super::buildinfo::read_file(binary) {
        return Ok(info);
    }
    let mut cmd = toolchain.command(dir);
    cmd.args(["version", "-m"]).arg(binary);
    let output = crate::base::interrupt::output(&mut cmd)
        .map_err(|e| err(format!("cannot run go version -m: {e}")))?;
    if !output.status.success() {
        return Err(err(summarize_stderr(
            &String::from_utf8_lossy(&output.stderr),
            4,
        )));
    }
    parse_version_m(&String::from_utf8_lossy(&output.stdout))
        .ok_or_else(|| err("go version -m printed no module information".into()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_the_text_form_of_go_version_m() {
        let text = "bin/occm: go1.23.6\n\tpath\tk8s.io/cloud-provider-openstack/cmd/openstack-cloud-controller-manager\n\tmod\tk8s.io/cloud-provider-openstack\t(devel)\t\n\tdep\tcel.dev/expr\tv0.24.0\th1:56Ov=\n\tdep\tk8s.io/api\tv0.0.0\n\t=>\t./staging/src/k8s.io/api\t(devel)\t\n\tbuild\t-buildmode=exe\n";
        let bi = parse_version_m(text).unwrap();
        assert_eq!(bi.go_version, "go1.23.6");
        assert_eq!(
            bi.path,
            "k8s.io/cloud-provider-openstack/cmd/openstack-cloud-controller-manager"
        );
        assert_eq!(bi.main.path, "k8s.io/cloud-provider-openstack");
        assert_eq!(bi.main.version, "(devel)");
        assert_eq!(bi.main.sum, "");
        assert_eq!(bi.deps.len(), 2);
        assert_eq!(
            (bi.deps[0].version.as_str(), bi.deps[0].sum.as_str()),
            ("v0.24.0", "h1:56Ov=")
        );
        let r = bi.deps[1].replace.as_ref().unwrap();
        assert_eq!(
            (r.path.as_str(), r.version.as_str()),
            ("./staging/src/k8s.io/api", "(devel)")
        );
        assert!(parse_version_m("x: go1.25.1\n").is_none());
    }
}
