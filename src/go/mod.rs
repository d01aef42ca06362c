//! Go stages: the toolchain environment, `go test -json` and the cross builds.

pub mod build;
pub mod buildinfo;
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
    /// `GOFLAGS=-mod=readonly` (upstream's default: go.mod and go.sum are never rewritten, so a
    /// patch that needs a new requirement fails instead of being fixed up silently), `GOWORK=off`, `GOENV=off` (no user go.env), `CGO_ENABLED=0` and
    /// `GOTELEMETRY=off`. `GOPROXY`, `GONOSUMDB` and friends are inherited so that a proxy or
    /// `GOPROXY=off` set by the caller still applies.
    pub fn command(&self, dir: &Path) -> Command {
        let mut cmd = Command::new("go");
        cmd.current_dir(dir)
            .env("GOTOOLCHAIN", format!("go{}", self.version))
            .env("GOMODCACHE", &self.mod_cache)
            .env("GOCACHE", &self.build_cache)
            .env("GOFLAGS", "-mod=readonly")
            .env("GOWORK", "off")
            .env("GOENV", "off")
            .env("GOTELEMETRY", "off")
            .env("CGO_ENABLED", "0")
            .env_remove("GOOS")
            .env_remove("GOARCH")
            .env_remove("GOARM");
        cmd
    }

    /// A `go` command in `dir` for one of occm-forge's own helper modules (the module that
    /// builds etcd and kube-apiserver for `accept`): [`Toolchain::command`]'s environment with
    /// `GOFLAGS=-mod=mod`, so that Go may write the helper's go.mod and go.sum. Use it only to
    /// resolve the helper (`go get`), then build it with [`Toolchain::command`]: the build then
    /// checks that the go.sum occm-forge resolved covers everything it compiles. Module hashes
    /// are checked as Go always checks them (the checksum database `GOSUMDB`, inherited).
    /// Never used for the upstream tree, whose go.mod and go.sum are upstream's.
    pub fn helper_command(&self, dir: &Path) -> Command {
        let mut cmd = self.command(dir);
        cmd.env("GOFLAGS", "-mod=mod");
        cmd
    }
}

/// Whose module a `go` command ran in, for what its errors blame.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ModuleOwner {
    /// The upstream tree (patched or not): its go.mod/go.sum are upstream's and the patch
    /// series', so an incomplete module graph is the patch series' to fix.
    Upstream,
    /// A helper module occm-forge writes and resolves itself: an incomplete module graph is
    /// occm-forge's fault, never the patch series'.
    Helper,
}

/// When Go's output says the code needs a go.mod or go.sum change (Go refuses it under
/// `-mod=readonly`), that line and what to do, in one line.
pub(crate) fn module_graph_change(text: &str) -> Option<String> {
    let line = module_graph_line(text)?;
    Some(format!(
        "{}: the patch series needs go.mod/go.sum changes it does not carry (occm-forge builds like upstream, with -mod=readonly); add them to the patch (`go mod tidy` in the patched tree)",
        line.trim()
    ))
}

/// The first line of Go's output saying the module graph needs a go.mod or go.sum change.
/// Trimmed, without the `:` Go ends `…; to add:` with (the command follows on the next line).
pub(crate) fn module_graph_line(text: &str) -> Option<&str> {
    text.lines()
        .find(|l| {
            l.contains("updates to go.mod needed")
                || l.contains("missing go.sum entry")
                || l.contains("no required module provides package")
                || l.contains("import lookup disabled by -mod=readonly")
        })
        .map(|l| l.trim().trim_end_matches(':'))
}

/// Whether a `go` command's stderr says the toolchain itself could not be had
/// (`go: download go1.99.0 for linux/amd64: toolchain not available`).
pub(crate) fn toolchain_unavailable(text: &str) -> bool {
    text.contains("toolchain not available")
}

/// One line from a `go` command's stderr: the toolchain that cannot be had, or the go.mod/go.sum
/// change a patch needs and does not carry, or the modules the proxy would not serve
/// (`module downloads failed: k8s.io/kubernetes@v1.31.11 (403 Forbidden), …`), else the last
/// `n` non-empty lines joined with ` | `.
pub(crate) fn summarize_stderr(text: &str, n: usize) -> String {
    summarize_stderr_of(text, n, ModuleOwner::Upstream)
}

/// [`summarize_stderr`] for a `go` command run in `owner`'s module: for a
/// [`ModuleOwner::Helper`] an incomplete go.mod/go.sum is reported as the line Go printed
/// (the caller names the helper module), never with the patch-series hint.
pub(crate) fn summarize_stderr_of(text: &str, n: usize, owner: ModuleOwner) -> String {
    if toolchain_unavailable(text) {
        let line = text
            .lines()
            .find(|l| l.contains("toolchain not available") || l.contains("go: download"))
            .unwrap_or("toolchain not available")
            .trim();
        let proxy = std::env::var("GOPROXY").unwrap_or_else(|_| "the default".into());
        return format!(
            "{line}: the Go toolchain of images.toml `go` cannot be downloaded; check that it is a released version and that GOPROXY ({proxy}) reaches a module proxy"
        );
    }
    match owner {
        ModuleOwner::Upstream => {
            if let Some(cause) = module_graph_change(text) {
                return cause;
            }
        }
        ModuleOwner::Helper => {
            if let Some(line) = module_graph_line(text) {
                return line.to_string();
            }
        }
    }
    let mut failed: Vec<String> = Vec::new();
    for line in text.lines() {
        // e.g. "main.go:30:2: k8s.io/x@v1.2.3: reading https://proxy.golang.org/…: 403 Forbidden"
        let Some((before, after)) = line.split_once(": reading ") else {
            continue;
        };
        let module = before.rsplit(": ").next().unwrap_or(before).trim();
        let status = after.rsplit(": ").next().unwrap_or("").trim();
        let entry = format!("{module} ({status})");
        if module.contains('@') && !failed.contains(&entry) {
            failed.push(entry);
        }
    }
    if !failed.is_empty() {
        return format!("module downloads failed: {}", failed.join(", "));
    }
    let lines: Vec<&str> = text
        .lines()
        .map(str::trim)
        .filter(|l| !l.is_empty())
        .collect();
    lines[lines.len().saturating_sub(n)..].join(" | ")
}

#[cfg(test)]
mod tests {
    #[test]
    fn module_download_failures_are_named_once() {
        let stderr = "main.go:30:2: k8s.io/cloud-provider@v0.31.11: reading https://proxy.golang.org/k8s.io/cloud-provider/@v/v0.31.11.zip: 403 Forbidden\n\tserver response: This module version is not available.\nmain.go:31:2: k8s.io/cloud-provider@v0.31.11: reading https://proxy.golang.org/k8s.io/cloud-provider/@v/v0.31.11.zip: 403 Forbidden\nmain.go:37:2: k8s.io/kubernetes@v1.31.11: reading https://proxy.golang.org/k8s.io/kubernetes/@v/v1.31.11.zip: 403 Forbidden\n";
        assert_eq!(
            super::summarize_stderr(stderr, 6),
            "module downloads failed: k8s.io/cloud-provider@v0.31.11 (403 Forbidden), k8s.io/kubernetes@v1.31.11 (403 Forbidden)"
        );
        assert_eq!(super::summarize_stderr("a\n\n  b\nc\n", 2), "b | c");
    }
}
