//! Go releases: which toolchains the Go module proxy serves, and which Go a minor should be built
//! with to stay current.
//!
//! The go command takes a toolchain other than its own from the module proxy as the module
//! `golang.org/toolchain` at `v0.0.1-go<version>.<goos>-<goarch>` (Go 1.21+, "Go Toolchains",
//! go.dev/doc/toolchain), so the proxy's version list of that module is the list of Go releases
//! a build here can use. Go's release policy (go.dev/doc/devel/release): each major release
//! (1.26, 1.27, …) is supported until two newer major releases exist, and a minor revision of
//! the same line (1.26.8 → 1.26.11) carries the security fixes; Kubernetes rebuilds its supported
//! releases with them.

use std::path::Path;
use std::process::Command;

use serde::Serialize;

/// The module the go command takes toolchains from.
pub const TOOLCHAIN_MODULE: &str = "golang.org/toolchain";

pub use crate::base::go_release::GoRelease;

/// A Go release as one of [`TOOLCHAIN_MODULE`]'s versions: `v0.0.1-go1.26.8.linux-amd64` →
/// `1.26.8`; pre-releases and other version shapes → `None`.
pub fn from_toolchain_version(version: &str) -> Option<GoRelease> {
    let (go, _platform) = version.strip_prefix("v0.0.1-go")?.rsplit_once('.')?;
    GoRelease::parse_lenient(go).ok()
}

/// Where a minor's Go stands among the releases the proxy serves.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct GoCurrency {
    /// The Go images.toml builds the minor with.
    pub go: GoRelease,
    /// The newest minor revision of the same Go line the proxy serves, when newer than `go`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub newer_patch: Option<GoRelease>,
    /// Whether `go`'s line is one of the two newest Go lines (Go's release policy).
    pub supported: bool,
    /// The supported Go lines, oldest first (`["1.26", "1.27"]`).
    pub supported_lines: Vec<String>,
    /// What to build with instead, when anything: `newer_patch` on a supported line; on a line
    /// out of support, the newest revision of the oldest supported line (the smallest step that
    /// is supported; the build's tests decide whether upstream's code takes it).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub proposal: Option<GoRelease>,
    /// Newer releases the proxy lists but refuses to serve (skipped by [`served_proposal`]).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub refused: Vec<GoRelease>,
}

/// Where `go` stands among `served` (any order; duplicates allowed). With nothing served, `go`
/// is taken as current and supported (nothing to compare with).
pub fn currency(go: GoRelease, served: &[GoRelease]) -> GoCurrency {
    currency_excluding(go, served, &[])
}

/// [`currency`] that never proposes a release of `refused` (listed, but not served); they still
/// count for which lines exist and are supported.
fn currency_excluding(go: GoRelease, served: &[GoRelease], refused: &[GoRelease]) -> GoCurrency {
    // A line counts once its first release (`.0`) is out.
    let mut lines: Vec<(u32, u32)> = served
        .iter()
        .filter(|r| r.patch == 0)
        .map(|r| (r.major, r.minor))
        .collect();
    lines.sort();
    lines.dedup();
    let supported_lines: Vec<(u32, u32)> = lines.iter().rev().take(2).rev().copied().collect();
    let newest_of = |line: (u32, u32)| {
        served
            .iter()
            .filter(|r| (r.major, r.minor) == line && !refused.contains(r))
            .max()
            .copied()
    };
    let newer_patch = newest_of((go.major, go.minor)).filter(|n| *n > go);
    let supported = supported_lines.is_empty() || supported_lines.contains(&(go.major, go.minor));
    let proposal = if supported {
        newer_patch
    } else {
        supported_lines
            .iter()
            .copied()
            .filter(|l| *l > (go.major, go.minor))
            .find_map(newest_of)
    };
    GoCurrency {
        go,
        newer_patch,
        supported,
        supported_lines: supported_lines
            .iter()
            .map(|(a, b)| format!("{a}.{b}"))
            .collect(),
        proposal,
        refused: refused.to_vec(),
    }
}

/// [`currency`] whose proposal and newer patch the proxy serves: a release the proxy lists but refuses
/// ([`check_served`]) is skipped, recorded in `refused`, and the next one proposed, so neither
/// `upstream check` nor `pin --go current` proposes what no build can download.
///
/// Errors: [`ReleaseError::Proxy`] when the proxy cannot be asked at all.
pub fn served_proposal(
    cache_dir: &Path,
    go: GoRelease,
    served: &[GoRelease],
) -> Result<GoCurrency, ReleaseError> {
    let mut refused = Vec::new();
    let mut served_ok: Vec<GoRelease> = Vec::new();
    'again: loop {
        let c = currency_excluding(go, served, &refused);
        // Both steps are proposed (`upstream check`): the move to a supported line and the
        // newest patch of the minor's own line.
        for p in [c.proposal, c.newer_patch].into_iter().flatten() {
            if served_ok.contains(&p) {
                continue;
            }
            match check_served(cache_dir, p) {
                Ok(()) => served_ok.push(p),
                Err(ReleaseError::NotServed { .. }) => {
                    refused.push(p);
                    continue 'again;
                }
                Err(e) => return Err(e),
            }
        }
        return Ok(c);
    }
}

/// Why the proxy's Go releases could not be read or a release is not served.
#[derive(Debug, thiserror::Error)]
pub enum ReleaseError {
    /// The go command failed or the proxy refused; the go command's one line.
    #[error("the Go module proxy: {0}")]
    Proxy(String),
    /// The proxy does not serve this release (e.g. 403: refused for good).
    #[error(
        "the Go module proxy does not serve Go {release} ({TOOLCHAIN_MODULE}@{version}): {answer}"
    )]
    NotServed {
        /// The release asked for.
        release: GoRelease,
        /// The module version asked for.
        version: String,
        /// The proxy's answer, as the go command reports it.
        answer: String,
    },
}

/// A go command for the proxy, run outside any module in a fresh scratch directory under
/// `cache_dir/tmp` ([`crate::base::util::scratch_dir`]: locked, so another run's sweep of the
/// cache leaves it and its `go` alone) with a module cache of its own (removed with the returned
/// guard), so that every answer is the proxy's, never a `.info` or list an earlier run left in a
/// cache; the caller's proxy settings (`GOPROXY`, `GONOSUMDB`, `GOSUMDB`, …) are inherited.
fn go_list(cache_dir: &Path) -> Result<(Command, crate::base::util::Scratch), ReleaseError> {
    let dir =
        crate::base::util::scratch_dir(cache_dir, "go-releases-").map_err(ReleaseError::Proxy)?;
    let mut cmd = Command::new("go");
    cmd.current_dir(dir.path())
        .env("GOTOOLCHAIN", "local")
        .env("GOFLAGS", "-mod=mod -modcacherw")
        .env("GO111MODULE", "on")
        .env("GOMODCACHE", dir.path().join("mod"))
        .env("GOCACHE", cache_dir.join("go").join("build"))
        .args(["list", "-m"]);
    Ok((cmd, dir))
}

fn last_line(bytes: &[u8]) -> String {
    let text = String::from_utf8_lossy(bytes);
    text.lines()
        .map(str::trim)
        .filter(|l| !l.is_empty())
        .find(|l| l.starts_with("go: "))
        .or_else(|| text.lines().map(str::trim).rfind(|l| !l.is_empty()))
        .unwrap_or("no output")
        .to_string()
}

/// The Go releases the module proxy lists (`go list -m -versions golang.org/toolchain`: its
/// linux-amd64 toolchains, every release has one), newest last. Listing is not serving: a
/// proxy may list a version and refuse it (see [`check_served`]).
///
/// Errors: [`ReleaseError::Proxy`] with the go command's line (no proxy, `GOPROXY=off`, …).
pub fn served(cache_dir: &Path) -> Result<Vec<GoRelease>, ReleaseError> {
    let (mut cmd, _dir) = go_list(cache_dir)?;
    // -retracted: list every version without loading retractions from the newest one (a listed
    // version the proxy refuses would otherwise fail the whole list).
    let out = cmd
        .args(["-versions", "-retracted", TOOLCHAIN_MODULE])
        .output()
        .map_err(|e| ReleaseError::Proxy(format!("go: {e}")))?;
    if !out.status.success() {
        return Err(ReleaseError::Proxy(last_line(&out.stderr)));
    }
    let mut releases: Vec<GoRelease> = String::from_utf8_lossy(&out.stdout)
        .split_whitespace()
        .filter(|v| v.ends_with(".linux-amd64"))
        .filter_map(from_toolchain_version)
        .collect();
    releases.sort();
    releases.dedup();
    if releases.is_empty() {
        return Err(ReleaseError::Proxy(format!(
            "it lists no Go release of {TOOLCHAIN_MODULE}"
        )));
    }
    Ok(releases)
}

/// Checks that the proxy serves Go `release` for linux-amd64 (its `.info`, as the go command
/// asks before a download), before any Go work depends on it.
///
/// Errors: [`ReleaseError::NotServed`] with the proxy's answer (`403 Forbidden` is final).
pub fn check_served(cache_dir: &Path, release: GoRelease) -> Result<(), ReleaseError> {
    let version = format!("v0.0.1-go{release}.linux-amd64");
    let (mut cmd, _dir) = go_list(cache_dir)?;
    let out = cmd
        .arg(format!("{TOOLCHAIN_MODULE}@{version}"))
        .output()
        .map_err(|e| ReleaseError::Proxy(format!("go: {e}")))?;
    if out.status.success() {
        return Ok(());
    }
    let answer = last_line(&out.stderr);
    // The proxy answered that it has no such version (403 is final, 404/410, or a file proxy
    // without the file); anything else (no proxy, GOPROXY=off, a network error) is not an answer.
    let refused = [
        "403",
        "404",
        "410",
        "not found",
        "no such file",
        "unknown revision",
        "invalid version",
    ]
    .iter()
    .any(|m| answer.to_lowercase().contains(m));
    if refused {
        Err(ReleaseError::NotServed {
            release,
            version,
            answer,
        })
    } else {
        Err(ReleaseError::Proxy(format!(
            "cannot ask it about Go {release}: {answer}"
        )))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn another_runs_sweep_of_the_cache_leaves_a_proxy_query_alone() {
        // A build sweeping the same cache at start (`sweep_scratch`) took an unlocked directory
        // for a killed run's: it killed the `go list` in it, and `upstream check` fell back to
        // proposing a release the proxy refuses.
        let cache = tempfile::tempdir().unwrap();
        let (_cmd, dir) = go_list(cache.path()).unwrap();
        crate::base::util::sweep_scratch(cache.path());
        assert!(dir.path().is_dir(), "swept while in use");
        let path = dir.path().to_path_buf();
        drop(dir);
        assert!(!path.exists(), "removed once done");
    }

    fn r(s: &str) -> GoRelease {
        s.parse().unwrap()
    }

    #[test]
    fn releases_parse_and_order() {
        assert_eq!(r("1.26.8").to_string(), "1.26.8");
        assert_eq!(r("go1.26.11"), r("1.26.11"));
        assert_eq!(
            GoRelease::parse_lenient("1.20").unwrap().to_string(),
            "1.20.0"
        );
        assert!(r("1.26.11") > r("1.26.8"));
        assert!(r("1.27.0") > r("1.26.11"));
        for bad in [
            "1.27rc1", "1.26.x", "1", "", "1.26.8.1", "v1.26.8", "1.26", "1.27.04", "1.026.1",
        ] {
            assert!(bad.parse::<GoRelease>().is_err(), "{bad}");
        }
        assert_eq!(
            from_toolchain_version("v0.0.1-go1.26.11.linux-amd64"),
            Some(r("1.26.11"))
        );
        assert_eq!(
            from_toolchain_version("v0.0.1-go1.20.linux-amd64"),
            Some(r("1.20.0"))
        );
        assert_eq!(from_toolchain_version("v0.0.1-go1.26rc1.linux-amd64"), None);
        assert_eq!(
            from_toolchain_version("v0.0.1-go1.18beta1.linux-amd64"),
            None
        );
    }

    fn served_today() -> Vec<GoRelease> {
        // What proxy.golang.org listed on 2026-12-05 (a selection).
        [
            "1.22.2", "1.22.12", "1.25.0", "1.25.1", "1.25.5", "1.25.14", "1.26.0", "1.26.2",
            "1.26.8", "1.26.11", "1.27.0", "1.27.4",
        ]
        .iter()
        .map(|s| r(s))
        .collect()
    }

    #[test]
    fn a_supported_line_moves_to_its_newest_patch() {
        let c = currency(r("1.26.2"), &served_today());
        assert!(c.supported);
        assert_eq!(c.supported_lines, ["1.26", "1.27"]);
        assert_eq!(c.newer_patch, Some(r("1.26.11")));
        assert_eq!(c.proposal, Some(r("1.26.11")));
        let current = currency(r("1.26.11"), &served_today());
        assert_eq!((current.newer_patch, current.proposal), (None, None));
    }

    #[test]
    fn a_line_out_of_support_moves_to_the_oldest_supported_line() {
        let c = currency(r("1.25.5"), &served_today());
        assert!(!c.supported);
        assert_eq!(c.newer_patch, Some(r("1.25.14")));
        assert_eq!(c.proposal, Some(r("1.26.11")));
        let c = currency(r("1.22.2"), &served_today());
        assert_eq!(c.proposal, Some(r("1.26.11")));
        // A line whose .0 is not served does not count; one newer than every served line (a pin
        // ahead of the proxy) is left alone.
        let c = currency(r("1.26.2"), &[r("1.26.0"), r("1.26.2"), r("1.27.1")]);
        assert_eq!(c.supported_lines, ["1.26"]);
        let c = currency(r("1.28.0"), &served_today());
        assert!(!c.supported);
        assert_eq!(c.proposal, None);
        // A listed release the proxy refuses is never proposed, but its line still exists: with
        // 1.27.0 refused and 1.28 served, 1.26 is out of support.
        let served = [r("1.26.2"), r("1.27.0"), r("1.28.0"), r("1.28.1")];
        let c = currency_excluding(r("1.26.2"), &served, &[r("1.27.0")]);
        assert_eq!(c.supported_lines, ["1.27", "1.28"]);
        assert!(!c.supported);
        assert_eq!(c.proposal, Some(r("1.28.1")));
        assert_eq!(c.refused, [r("1.27.0")]);
        // Nothing served: nothing to say.
        let c = currency(r("1.25.1"), &[]);
        assert!(c.supported);
        assert_eq!(c.proposal, None);
    }
}
