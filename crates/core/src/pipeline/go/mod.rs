//! Go stages: the toolchain environment, `go test -json` and the cross builds.

pub mod build;
pub mod buildinfo;
pub mod directive;
pub mod overrides;
pub mod release;
pub mod test;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Command;

use crate::config::Platform;

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
    /// `GOTMPDIR`: where `go` writes its temporary files and from where `go test` runs the test
    /// binaries — a scratch directory of this toolchain's own under `<cache>/tmp`, made at the
    /// first `go` command and removed with the last clone of this value, so that `$TMPDIR`
    /// (`noexec` on hardened machines, golang/go#52941) never matters.
    tmp: std::sync::Arc<Tmp>,
}

/// [`Toolchain::tmp`]: the cache directory and, once made, the scratch directory in it.
#[derive(Debug)]
struct Tmp {
    cache_dir: PathBuf,
    made: std::sync::OnceLock<Option<crate::base::util::Scratch>>,
}

impl Toolchain {
    /// The toolchain for `version` with its caches under `<cache_dir>/go/{mod,build}`.
    pub fn new(version: &str, cache_dir: &Path) -> Self {
        Toolchain {
            version: version.to_string(),
            mod_cache: cache_dir.join("go").join("mod"),
            build_cache: cache_dir.join("go").join("build"),
            tmp: std::sync::Arc::new(Tmp {
                cache_dir: cache_dir.to_path_buf(),
                made: std::sync::OnceLock::new(),
            }),
        }
    }

    /// The `GOTMPDIR` of every `go` command of this toolchain ([`Toolchain::tmp`]): the scratch
    /// directory, or `<cache>/tmp` itself when it cannot be made (the command then fails
    /// naming it).
    pub fn tmp_dir(&self) -> PathBuf {
        let made = self
            .tmp
            .made
            .get_or_init(|| crate::base::util::scratch_dir(&self.tmp.cache_dir, "gotmp-").ok());
        match made {
            Some(s) => s.path().to_path_buf(),
            None => self.tmp.cache_dir.join("tmp"),
        }
    }

    /// A `go` command in `dir` with a controlled environment: `GOTOOLCHAIN=go<version>`, the
    /// caches (`GOMODCACHE`, `GOCACHE`), `GOTMPDIR` ([`Toolchain::tmp_dir`]), every variable of [`PINNED_ENV`] at its value and every
    /// variable of [`CLEARED_ENV`] removed, so that nothing in the caller's environment changes
    /// what is compiled, how, or how the tests behave. `GOPROXY`, `GONOSUMDB` and friends are
    /// inherited so that a proxy or `GOPROXY=off` set by the caller still applies (they choose
    /// where modules come from; go.sum, never rewritten under `-mod=readonly`, fixes what they
    /// are). A build for a platform adds [`platform_env`].
    pub fn command(&self, dir: &Path) -> Command {
        let mut cmd = Command::new("go");
        cmd.current_dir(dir)
            .env("GOTOOLCHAIN", format!("go{}", self.version))
            .env("GOMODCACHE", &self.mod_cache)
            .env("GOCACHE", &self.build_cache)
            .env("GOTMPDIR", self.tmp_dir());
        for (name, value) in PINNED_ENV {
            cmd.env(name, value);
        }
        for name in CLEARED_ENV {
            cmd.env_remove(name);
        }
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

/// Go environment variables every `go` command of occm-forge runs with, whatever the caller
/// sets: upstream's settings (its Makefile L74–79 sets `CGO_ENABLED=0`, `GOOS`, `GOARCH` and
/// nothing else, in the `golang` image, which sets none of these), with every default that a
/// variable could move written out, so that the environment cannot move it. From `go help
/// environment` of Go 1.26 and `internal/buildcfg` (`zbootstrap.go` holds the defaults):
///
/// - `CGO_ENABLED=0`: upstream's; a static binary, no C toolchain involved.
/// - `GOFLAGS=-mod=readonly`: upstream's default; go.mod and go.sum are never rewritten, so a
///   patch that needs a new requirement fails instead of being fixed up silently. Setting it
///   also drops any `-tags`, `-gcflags`, `-race`, `-buildmode`… a caller's `GOFLAGS` carries.
/// - `GOWORK=off`, `GOENV=off`: no `go.work` above the tree, no user `go env -w` settings (they
///   could set any variable below). `$GOROOT/go.env` of the pinned toolchain still applies.
/// - `GO111MODULE=on`: module mode, Go's default; `off` would build in GOPATH mode.
/// - `GOTELEMETRY=off`: no telemetry files from occm-forge's runs (no effect on the output).
/// - `GOFIPS140=off`: Go's default (Go 1.24+; older toolchains ignore it): the standard crypto
///   code, not a frozen FIPS 140 module.
/// - The microarchitecture levels, each at Go's default, which upstream's release builds use:
///   `GOAMD64=v1` (a `v3` binary does not start on x86-64-v1/v2 machines), `GOARM64=v8.0`,
///   `GOARM=7` (the cross-compiler default; `linux/arm/v6` builds with 6, see
///   [`platform_env`]), `GO386=sse2`, `GOPPC64=power8`, `GORISCV64=rva20u64`,
///   `GOMIPS=hardfloat`, `GOMIPS64=hardfloat`. Go reads only the one of the target `GOARCH`;
///   the others are set so that none can come from outside.
pub const PINNED_ENV: &[(&str, &str)] = &[
    ("CGO_ENABLED", "0"),
    ("GOFLAGS", "-mod=readonly"),
    ("GOWORK", "off"),
    ("GOENV", "off"),
    ("GO111MODULE", "on"),
    ("GOTELEMETRY", "off"),
    ("GOFIPS140", "off"),
    ("GOAMD64", "v1"),
    ("GOARM64", "v8.0"),
    ("GOARM", "7"),
    ("GO386", "sse2"),
    ("GOPPC64", "power8"),
    ("GORISCV64", "rva20u64"),
    ("GOMIPS", "hardfloat"),
    ("GOMIPS64", "hardfloat"),
];

/// Go environment variables removed from every `go` command's environment (unset is Go's
/// default for each):
///
/// - `GOEXPERIMENT`: toolchain experiments change the runtime and the compiler (and are
///   "unsupported beyond the development of Go itself"); unset, the toolchain's defaults.
/// - `GODEBUG`: changes the go command's behaviour and, inherited by test binaries, the runtime
///   behaviour the tests see; the binary's own defaults come from go.mod's `go` line and
///   `//go:debug` lines, as upstream's.
/// - `GOOS`, `GOARCH`: the test stage runs for the host; a build sets them per platform.
/// - `GOWASM`: no WebAssembly features (Go's default, empty).
/// - `GOROOT`: the `go` on PATH finds its own tree, and the pinned toolchain is selected by
///   `GOTOOLCHAIN`, not by a tree the caller points at. `GOROOT_FINAL` (Go 1.22 and older; no
///   effect under `-trimpath`) goes too.
/// - `GOCACHEPROG`: an external build cache would serve compiled packages from outside
///   occm-forge's `GOCACHE`.
/// - `GOCOMPILEDEBUG`, `GOSSAFUNC`, `GOSSADIR`, `GOCLOBBERDEADHASH`: the compiler's debugging
///   variables (`cmd/go/internal/work` hashes them as "magic"); `GOCOMPILEDEBUG` changes the code.
/// - `GO_EXTLINK_ENABLED`, `CC`, `CXX`, `FC`, `AR`, `PKG_CONFIG`, `GCCGO`, `CGO_CFLAGS`,
///   `CGO_CPPFLAGS`, `CGO_CXXFLAGS`, `CGO_FFLAGS`, `CGO_LDFLAGS`: the C toolchain and external
///   linker, unused with `CGO_ENABLED=0`; removed so that none can reach a build.
pub const CLEARED_ENV: &[&str] = &[
    "GOEXPERIMENT",
    "GODEBUG",
    "GOOS",
    "GOARCH",
    "GOWASM",
    "GOROOT",
    "GOROOT_FINAL",
    "GOCACHEPROG",
    "GOCOMPILEDEBUG",
    "GOSSAFUNC",
    "GOSSADIR",
    "GOCLOBBERDEADHASH",
    "GO_EXTLINK_ENABLED",
    "CC",
    "CXX",
    "FC",
    "AR",
    "PKG_CONFIG",
    "GCCGO",
    "CGO_CFLAGS",
    "CGO_CPPFLAGS",
    "CGO_CXXFLAGS",
    "CGO_FFLAGS",
    "CGO_LDFLAGS",
];

/// The variable that sets `arch`'s microarchitecture level (Go's `cfg.GetArchEnv`), if it has
/// one: `GOAMD64` for amd64, `GOARM64` for arm64, `GOARM` for arm, `GOPPC64` for ppc64le,
/// `GORISCV64` for riscv64; none for s390x.
fn level_variable(arch: &str) -> Option<&'static str> {
    match arch {
        "amd64" => Some("GOAMD64"),
        "arm64" => Some("GOARM64"),
        "arm" => Some("GOARM"),
        "386" => Some("GO386"),
        "ppc64" | "ppc64le" => Some("GOPPC64"),
        "riscv64" => Some("GORISCV64"),
        "mips" | "mipsle" => Some("GOMIPS"),
        "mips64" | "mips64le" => Some("GOMIPS64"),
        _ => None,
    }
}

/// The Go environment `platform`'s binary is built with, as a `go build` of it runs and as the
/// provenance (`internalParameters.env`) and the inputs fingerprint record it: `GOOS`, `GOARCH`,
/// the architecture's level variable ([`PINNED_ENV`]'s value; for arm the platform's variant,
/// `linux/arm/v6` → `GOARM=6`), `CGO_ENABLED`, `GOFIPS140`, `GOFLAGS` and `GOEXPERIMENT` (empty:
/// the toolchain's defaults). Variable name → value.
pub fn platform_env(platform: &Platform) -> BTreeMap<String, String> {
    let pinned = |name: &str| {
        PINNED_ENV
            .iter()
            .find(|(n, _)| *n == name)
            .map(|(_, v)| (*v).to_string())
            .expect("a pinned variable")
    };
    let mut env = BTreeMap::from([
        ("GOOS".to_string(), platform.os.clone()),
        ("GOARCH".to_string(), platform.arch.clone()),
        ("GOEXPERIMENT".to_string(), String::new()),
    ]);
    for name in ["CGO_ENABLED", "GOFIPS140", "GOFLAGS"] {
        env.insert(name.to_string(), pinned(name));
    }
    if let Some(level) = level_variable(&platform.arch) {
        let value = match platform.goarm() {
            Some(arm) => arm.to_string(),
            None => pinned(level),
        };
        env.insert(level.to_string(), value);
    }
    env
}

/// [`platform_env`] of each platform, by platform name (`linux/arm64`).
pub fn platforms_env(platforms: &[Platform]) -> BTreeMap<String, BTreeMap<String, String>> {
    platforms
        .iter()
        .map(|p| (p.to_string(), platform_env(p)))
        .collect()
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
pub fn module_graph_line(text: &str) -> Option<&str> {
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

/// One line from a `go` command's stderr ([`classify_stderr`] said as text): the toolchain that
/// cannot be had, or the go.mod/go.sum change a patch needs and does not carry, or the modules the
/// proxy would not serve (`module downloads failed: k8s.io/kubernetes@v1.31.11 (403 Forbidden), …`),
/// else the last `n` non-empty lines joined with ` | `.
pub(crate) fn summarize_stderr(text: &str, n: usize) -> String {
    summarize_stderr_of(text, n, ModuleOwner::Upstream)
}

/// [`summarize_stderr`] for a `go` command run in `owner`'s module: for a
/// [`ModuleOwner::Helper`] an incomplete go.mod/go.sum is reported as the line Go printed
/// (the caller names the helper module), never with the patch-series hint.
pub fn summarize_stderr_of(text: &str, n: usize, owner: ModuleOwner) -> String {
    classify_stderr(text, n, owner).to_string()
}

/// A module the Go module proxy would not serve, from a line such as
/// `main.go:30:2: k8s.io/x@v1.2.3: reading https://proxy.golang.org/…: 403 Forbidden`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RefusedModule {
    /// `path@version`.
    pub module: String,
    /// The proxy's answer, `403 Forbidden`, `404 Not Found`, `410 Gone`.
    pub status: String,
}

/// What a failed `go` command's stderr says, as data: callers decide on the kind (a refused
/// module is "not verified", not a compile error) without reading their own text back.
/// `Display` is the one line [`summarize_stderr_of`] gives.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum GoFailure {
    /// The toolchain of images.toml `go` cannot be downloaded: the line, with the fix.
    ToolchainUnavailable(String),
    /// go.mod/go.sum lack what the build needs: the cause (with the patch-series hint for
    /// upstream, Go's own line for a helper module).
    ModuleGraph(String),
    /// The module proxy refused these modules, in the order Go named them, each once.
    Refused(Vec<RefusedModule>),
    /// Anything else: the last lines of stderr joined with ` | `.
    Other(String),
}

impl std::fmt::Display for GoFailure {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            GoFailure::ToolchainUnavailable(s)
            | GoFailure::ModuleGraph(s)
            | GoFailure::Other(s) => f.write_str(s),
            GoFailure::Refused(modules) => {
                write!(f, "module downloads failed: {}", refused_list(modules))
            }
        }
    }
}

/// `k8s.io/a@v1 (403 Forbidden), k8s.io/b@v2 (410 Gone)`.
pub fn refused_list(modules: &[RefusedModule]) -> String {
    modules
        .iter()
        .map(|m| format!("{} ({})", m.module, m.status))
        .collect::<Vec<_>>()
        .join(", ")
}

/// Reads a failed `go` command's stderr into a [`GoFailure`]; `n` is how many last lines
/// [`GoFailure::Other`] keeps.
pub fn classify_stderr(text: &str, n: usize, owner: ModuleOwner) -> GoFailure {
    if toolchain_unavailable(text) {
        let line = text
            .lines()
            .find(|l| l.contains("toolchain not available") || l.contains("go: download"))
            .unwrap_or("toolchain not available")
            .trim();
        let proxy = std::env::var("GOPROXY").unwrap_or_else(|_| "the default".into());
        return GoFailure::ToolchainUnavailable(format!(
            "{line}: the Go toolchain of images.toml `go` cannot be downloaded; check that it is a released version and that GOPROXY ({proxy}) reaches a module proxy"
        ));
    }
    let graph = match owner {
        ModuleOwner::Upstream => module_graph_change(text),
        ModuleOwner::Helper => module_graph_line(text).map(str::to_string),
    };
    if let Some(cause) = graph {
        return GoFailure::ModuleGraph(cause);
    }
    let refused = refused_modules(text);
    if !refused.is_empty() {
        return GoFailure::Refused(refused);
    }
    let lines: Vec<&str> = text
        .lines()
        .map(str::trim)
        .filter(|l| !l.is_empty())
        .collect();
    GoFailure::Other(lines[lines.len().saturating_sub(n)..].join(" | "))
}

/// The modules a `go` command's output says the proxy refused (`<module>@<version>: reading
/// <url>: <status>`, also as `go mod download -json` puts it in its `Error`), each once.
pub fn refused_modules(text: &str) -> Vec<RefusedModule> {
    let mut failed: Vec<RefusedModule> = Vec::new();
    for line in text.lines() {
        let Some((before, after)) = line.split_once(": reading ") else {
            continue;
        };
        let module = before.rsplit(": ").next().unwrap_or(before).trim();
        let module = module.trim_start_matches('"');
        let status = after.rsplit(": ").next().unwrap_or("").trim();
        let status = status.trim_end_matches([',', '"']);
        let entry = RefusedModule {
            module: module.to_string(),
            status: status.to_string(),
        };
        if module.contains('@') && !failed.contains(&entry) {
            failed.push(entry);
        }
    }
    failed
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_go_command_pins_and_clears_the_go_environment() {
        let cmd = Toolchain::new("1.25.1", Path::new("/c")).command(Path::new("."));
        let envs: BTreeMap<String, Option<String>> = cmd
            .get_envs()
            .map(|(k, v)| {
                let v = v.map(|v| v.to_string_lossy().into_owned());
                (k.to_string_lossy().into_owned(), v)
            })
            .collect();
        for (name, value) in PINNED_ENV {
            assert_eq!(envs[*name].as_deref(), Some(*value), "{name}");
        }
        for name in CLEARED_ENV {
            assert_eq!(envs[*name], None, "{name} is removed");
        }
        assert_eq!(envs["GOTOOLCHAIN"].as_deref(), Some("go1.25.1"));
    }

    #[test]
    fn each_platform_records_its_level() {
        let env = |p: &str| platform_env(&p.parse().unwrap());
        let level = |p: &str, var: &str| env(p).get(var).cloned();
        assert_eq!(level("linux/amd64", "GOAMD64").as_deref(), Some("v1"));
        assert_eq!(level("linux/arm64", "GOARM64").as_deref(), Some("v8.0"));
        assert_eq!(level("linux/arm/v6", "GOARM").as_deref(), Some("6"));
        assert_eq!(level("linux/arm", "GOARM").as_deref(), Some("7"));
        assert_eq!(level("linux/ppc64le", "GOPPC64").as_deref(), Some("power8"));
        assert_eq!(
            level("linux/riscv64", "GORISCV64").as_deref(),
            Some("rva20u64")
        );
        assert_eq!(
            env("linux/s390x").keys().collect::<Vec<_>>(),
            [
                "CGO_ENABLED",
                "GOARCH",
                "GOEXPERIMENT",
                "GOFIPS140",
                "GOFLAGS",
                "GOOS"
            ]
        );
        assert!(!env("linux/amd64").contains_key("GOARM64"));
    }

    #[test]
    fn module_download_failures_are_named_once() {
        let stderr = "main.go:30:2: k8s.io/cloud-provider@v0.31.11: reading https://proxy.golang.org/k8s.io/cloud-provider/@v/v0.31.11.zip: 403 Forbidden\n\tserver response: This module version is not available.\nmain.go:31:2: k8s.io/cloud-provider@v0.31.11: reading https://proxy.golang.org/k8s.io/cloud-provider/@v/v0.31.11.zip: 403 Forbidden\nmain.go:37:2: k8s.io/kubernetes@v1.31.11: reading https://proxy.golang.org/k8s.io/kubernetes/@v/v1.31.11.zip: 403 Forbidden\n";
        assert_eq!(
            super::summarize_stderr(stderr, 6),
            "module downloads failed: k8s.io/cloud-provider@v0.31.11 (403 Forbidden), k8s.io/kubernetes@v1.31.11 (403 Forbidden)"
        );
        assert_eq!(super::summarize_stderr("a\n\n  b\nc\n", 2), "b | c");
    }

    #[test]
    fn refused_modules_are_data_not_text() {
        let stderr = "go: k8s.io/kubernetes@v1.31.11: reading https://proxy.golang.org/k8s.io/kubernetes/@v/v1.31.11.zip: 410 Gone\n";
        let failure = super::classify_stderr(stderr, 6, super::ModuleOwner::Helper);
        assert_eq!(
            failure,
            super::GoFailure::Refused(vec![super::RefusedModule {
                module: "k8s.io/kubernetes@v1.31.11".into(),
                status: "410 Gone".into(),
            }])
        );
        // As `go mod download -json` puts it in its `Error`.
        let json = "\t\"Error\": \"k8s.io/kubernetes@v1.31.11: reading https://proxy.golang.org/k8s.io/kubernetes/@v/v1.31.11.zip: 403 Forbidden\",\n";
        assert_eq!(
            super::refused_modules(json),
            vec![super::RefusedModule {
                module: "k8s.io/kubernetes@v1.31.11".into(),
                status: "403 Forbidden".into(),
            }]
        );
        assert!(matches!(
            super::classify_stderr("compile error\n", 6, super::ModuleOwner::Upstream),
            super::GoFailure::Other(_)
        ));
    }
}
