//! Go stages: the toolchain environment, `go test -json` and the cross builds.

pub mod build;
pub mod test;

use std::path::{Path, PathBuf};
use std::process::Command;

/// The Go toolchain and caches one minor is tested and built with.
#[derive(Debug, Clone)]
pub struct Toolchain {
    /// Go version without the `go` prefix, e.g. `1.25.1`; becomes `GOTOOLCHAIN=go1.25.1`, which
    /// the local `go` command downloads through the module proxy when it is not itself that version.
    pub version: String,
    /// `GOMODCACHE`, owned by occm-forge and reused across minors and runs.
    pub mod_cache: PathBuf,
    /// `GOCACHE`, owned by occm-forge and reused across minors and runs.
    pub build_cache: PathBuf,
}

impl Toolchain {
    /// The toolchain for `version` with its caches under `<cache_dir>/go/{mod,build}`.
    pub fn new(version: &str, cache_dir: &Path) -> Self {
        Toolchain {
            version: version.to_string(),
            mod_cache: cache_dir.join("go").join("mod"),
            build_cache: cache_dir.join("go").join("build"),
        }
    }

    /// A `go` command in `dir` with a controlled environment: `GOTOOLCHAIN`, the caches,
    /// `GOFLAGS=-mod=mod`, `GOWORK=off`, `GOENV=off` (no user go.env), `CGO_ENABLED=0` and
    /// `GOTELEMETRY=off`. `GOPROXY`, `GONOSUMDB` and friends are inherited so that a proxy or
    /// `GOPROXY=off` set by the caller still applies.
    pub fn command(&self, dir: &Path) -> Command {
        let mut cmd = Command::new("go");
        cmd.current_dir(dir)
            .env("GOTOOLCHAIN", format!("go{}", self.version))
            .env("GOMODCACHE", &self.mod_cache)
            .env("GOCACHE", &self.build_cache)
            .env("GOFLAGS", "-mod=mod")
            .env("GOWORK", "off")
            .env("GOENV", "off")
            .env("GOTELEMETRY", "off")
            .env("CGO_ENABLED", "0")
            .env_remove("GOOS")
            .env_remove("GOARCH")
            .env_remove("GOARM");
        cmd
    }
}

/// The last `n` lines of `text`, joined with ` | ` so an error stays on one line.
pub(crate) fn tail_lines(text: &str, n: usize) -> String {
    let lines: Vec<&str> = text.lines().filter(|l| !l.trim().is_empty()).collect();
    lines[lines.len().saturating_sub(n)..].join(" | ")
}
