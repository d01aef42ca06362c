//! Preflight: everything the requested stages will need, checked in seconds before the first
//! long stage, so that a missing prerequisite is said at once, all of them in one run, instead
//! of one per run after minutes of tests and builds. `build` runs [`checks`] after the inputs
//! stage (an up-to-date minor needs nothing); `occm-forge doctor` prints the same checks as a
//! table.
//!
//! What is checked, by what it is needed for ([`Need`]):
//! - build: a `go` on PATH that can fetch toolchains (Go 1.21 or later); the pinned toolchain is
//!   the local `go`, already in the module cache, or served by the module proxy (asked with `go
//!   list -m golang.org/toolchain@v0.0.1-go<version>.<os>-<arch>`: one small request, the
//!   toolchain's `.info`); the cache directory allows programs to run (Go runs test binaries and
//!   downloaded toolchains from it: `noexec` makes every test "fail", golang/go#52941); room in
//!   the cache and `--output` for a build of one minor ([`CACHE_COLD`], [`CACHE_WARM`],
//!   [`OUTPUT_ROOM`]).
//! - `--push`: the registry answers and the credentials may push into the repository
//!   ([`crate::registry::Registry::check_push`]).
//! - `--accept`: what the acceptance the command layer passed needs
//!   ([`crate::pipeline::acceptance::Acceptance::prerequisites`]).

use std::path::Path;
use std::process::Command;

use serde::Serialize;

use crate::base::disk;
use crate::pipeline::go::Toolchain;
use crate::registry::Registry;

/// Room a build takes in the cache when it lacks the minor's Go: the toolchain, upstream's
/// modules, the packages compiled by that Go for both platforms and the tests, the object store,
/// the work tree, and the link's scratch. Measured for v1.34.1 (linux/amd64 and linux/arm64,
/// go1.25.1) from an empty cache: 4.9 GiB at the peak, 3.4 GiB kept; v1.35.0 (go1.25.5) after
/// it, in the same cache: 4.5 GiB more at the peak. With a margin, 6 GiB.
pub const CACHE_COLD: u64 = 6 << 30;
/// Room a build takes in a cache that has the minor's Go and its compiled packages (a rebuild,
/// a changed patch): the recompiled packages and the link's scratch, measured 1.1 GiB at the
/// peak for v1.34.1; with a margin, 1.5 GiB.
pub const CACHE_WARM: u64 = 3 << 29;
/// Room a build takes in `--output`: one minor's layout (both binaries compressed, the base,
/// SBOMs, provenance): measured 36 MiB for v1.34.1 on the static base; with a margin, 256 MiB.
pub const OUTPUT_ROOM: u64 = 256 << 20;
/// Room below which no build gets anywhere: the toolchain unpacked (about 250 MiB for Go 1.25),
/// the work tree and the layout. Between this and [`CACHE_COLD`] or [`CACHE_WARM`] the build
/// goes on with a warning, since what a build takes is measured for upstream's module graph: a
/// small source (a fork trimmed down, the test suite's fixtures) needs far less.
pub const CACHE_FLOOR: u64 = 1 << 30;

/// What a check is needed for.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Need {
    /// Every build.
    Build,
    /// `--push`.
    Push,
    /// `--accept`.
    Accept,
    /// `--sign-key`.
    Sign,
}

impl std::fmt::Display for Need {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Need::Build => "build",
            Need::Push => "--push",
            Need::Accept => "--accept",
            Need::Sign => "--sign-key",
        })
    }
}

/// Why a check failed and what to do.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Problem {
    /// The cause, one sentence without a final period.
    pub cause: String,
    /// What to do, one sentence.
    pub fix: String,
    /// The exit status it gives (docs/exit-codes.md): 6 for Go and its toolchain, 8 for the
    /// registry, 16 for anything else missing from this machine.
    pub exit_code: u8,
}

/// One prerequisite, checked.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Check {
    /// What was checked (`go`, `Go toolchain go1.25.1`, `room in the cache`, `helm`).
    pub name: String,
    /// What needs it.
    pub need: Need,
    /// `Ok(what was found)` or the problem.
    #[serde(with = "status")]
    pub status: Result<String, Problem>,
    /// For a check that passed short of what upstream is measured to need (room below
    /// [`CACHE_COLD`] but above [`CACHE_FLOOR`]): what may go wrong, one sentence. The build
    /// goes on and logs it; `doctor` shows `low`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub warning: Option<String>,
}

impl Check {
    /// A check that passed, with what it found.
    pub fn ok(name: impl Into<String>, need: Need, found: impl Into<String>) -> Self {
        Check {
            name: name.into(),
            need,
            status: Ok(found.into()),
            warning: None,
        }
    }

    /// A check that passed with a warning (what may go wrong, one sentence).
    pub fn low(
        name: impl Into<String>,
        need: Need,
        found: impl Into<String>,
        warning: impl Into<String>,
    ) -> Self {
        Check {
            warning: Some(warning.into()),
            ..Check::ok(name, need, found)
        }
    }

    /// A check that failed.
    pub fn failed(
        name: impl Into<String>,
        need: Need,
        cause: impl Into<String>,
        fix: impl Into<String>,
        exit_code: u8,
    ) -> Self {
        Check {
            name: name.into(),
            need,
            status: Err(Problem {
                cause: cause.into(),
                fix: fix.into(),
                exit_code,
            }),
            warning: None,
        }
    }
}

/// `status` as `{"ok": "…"}` or `{"problem": {…}}` in `--json`.
mod status {
    use serde::Serializer;

    pub fn serialize<S: Serializer>(
        status: &Result<String, super::Problem>,
        s: S,
    ) -> Result<S::Ok, S::Error> {
        use serde::ser::SerializeMap;
        let mut m = s.serialize_map(Some(1))?;
        match status {
            Ok(found) => m.serialize_entry("ok", found)?,
            Err(p) => m.serialize_entry("problem", p)?,
        }
        m.end()
    }
}

/// Prerequisites that are missing: every failed check of one run, in one line.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PreflightError {
    /// The failed checks, in the order they were made.
    pub failed: Vec<Check>,
}

impl std::fmt::Display for PreflightError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let line = |c: &Check| match &c.status {
            Err(p) if p.fix.is_empty() => format!("{}: {}", c.name, p.cause),
            Err(p) => format!("{}: {}; {}", c.name, p.cause, p.fix),
            Ok(_) => c.name.clone(),
        };
        match self.failed.as_slice() {
            [one] => write!(f, "{}", line(one)),
            all => write!(
                f,
                "{} prerequisites are missing: {}",
                all.len(),
                all.iter()
                    .enumerate()
                    .map(|(i, c)| format!("({}) {}", i + 1, line(c)))
                    .collect::<Vec<_>>()
                    .join(" ")
            ),
        }
    }
}

impl std::error::Error for PreflightError {}

impl PreflightError {
    /// The exit status of the first failed check.
    pub fn exit_code(&self) -> u8 {
        self.failed
            .iter()
            .find_map(|c| c.status.as_ref().err().map(|p| p.exit_code))
            .unwrap_or(16)
    }

    /// The failed ones of `checks`, as an error when there is any.
    ///
    /// Errors: the failed checks.
    pub fn of(checks: Vec<Check>) -> Result<(), PreflightError> {
        let failed: Vec<Check> = checks.into_iter().filter(|c| c.status.is_err()).collect();
        if failed.is_empty() {
            Ok(())
        } else {
            Err(PreflightError { failed })
        }
    }
}

/// The checks every build needs (blocking; a second or so): the cache `cache_dir` (usable, and
/// room in it), Go and `toolchain` (asked only of a usable cache: Go keeps toolchains there),
/// room in `output` (`--output`).
pub fn build_checks(toolchain: &Toolchain, cache_dir: &Path, output: &Path) -> Vec<Check> {
    let mut checks = cache_checks(cache_dir, toolchain);
    let usable = checks.iter().all(|c| c.status.is_ok());
    checks.extend(go_checks(toolchain, usable));
    checks.push(room("room in --output", output, OUTPUT_ROOM, OUTPUT_ROOM));
    checks
}

/// `--push`: whether the credentials may push into `repo` ([`Registry::check_push`]).
pub async fn push_check(
    registry: &dyn Registry,
    repo: &crate::base::reference::RepositoryName,
) -> Check {
    let name = format!("push to {repo}");
    match registry.check_push(repo).await {
        Ok(()) => Check::ok(
            name,
            Need::Push,
            "the registry takes an upload from these credentials",
        ),
        Err(e) => {
            // The registry's error says what to do (credentials, the proxy, its storage).
            Check::failed(name, Need::Push, e.to_string(), "", 8)
        }
    }
}

/// `go` on PATH, recent enough to fetch toolchains, and the pinned toolchain obtainable — the
/// latter only asked when the cache is `usable` (the module cache holds toolchains).
pub fn go_checks(toolchain: &Toolchain, usable: bool) -> Vec<Check> {
    let local = match local_go() {
        Ok(v) => v,
        Err(cause) => {
            return vec![Check::failed(
                "go",
                Need::Build,
                cause,
                "install Go 1.21 or later (go.dev/dl) and put it on PATH: it fetches the toolchain images.toml pins",
                6,
            )];
        }
    };
    let mut checks = vec![Check::ok("go", Need::Build, format!("go{local} on PATH"))];
    let want = &toolchain.version;
    let name = format!("Go toolchain go{want}");
    if &local == want {
        checks.push(Check::ok(name, Need::Build, "the local go"));
        return checks;
    }
    use crate::base::go_release::GoRelease;
    let first_with_toolchains = GoRelease {
        major: 1,
        minor: 21,
        patch: 0,
    };
    if GoRelease::parse_lenient(&local).is_ok_and(|v| v < first_with_toolchains) {
        checks.push(Check::failed(
            name,
            Need::Build,
            format!("the local go is go{local}, which cannot fetch toolchains (Go 1.21 added GOTOOLCHAIN)"),
            "install Go 1.21 or later",
            6,
        ));
        return checks;
    }
    if !usable {
        return checks;
    }
    checks.push(match toolchain_obtainable(toolchain) {
        Ok(found) => Check::ok(name, Need::Build, found),
        Err(cause) => Check::failed(
            name,
            Need::Build,
            cause,
            "pin a Go release the module proxy serves (`occm-forge pin --k8s <minor> --go <version>`), or set GOPROXY to a proxy that serves it",
            6,
        ),
    });
    checks
}

/// The version of the `go` on PATH without `go` (`1.26.8`), run as itself (`GOTOOLCHAIN=local`).
fn local_go() -> Result<String, String> {
    let mut cmd = Command::new("go");
    for (name, value) in crate::pipeline::go::PINNED_ENV {
        cmd.env(name, value);
    }
    for name in crate::pipeline::go::CLEARED_ENV {
        cmd.env_remove(name);
    }
    let out = cmd
        .args(["env", "GOVERSION"])
        .env("GOTOOLCHAIN", "local")
        .output()
        .map_err(|e| format!("there is no go on PATH ({e})"))?;
    if !out.status.success() {
        return Err(format!(
            "`go env GOVERSION` failed: {}",
            String::from_utf8_lossy(&out.stderr).trim()
        ));
    }
    let v = String::from_utf8_lossy(&out.stdout).trim().to_string();
    Ok(v.trim_start_matches("go").to_string())
}

/// The module that holds the Go toolchain `version` for this machine
/// (`golang.org/toolchain@v0.0.1-go1.25.1.linux-amd64`: how `GOTOOLCHAIN` fetches it, Go's
/// `cmd/go/internal/toolchain`).
pub fn toolchain_module(version: &str) -> String {
    let host = crate::image::elf::host_platform()
        .map(|p| format!("{}-{}", p.os, p.arch))
        .unwrap_or_else(|_| "linux-amd64".into());
    format!("golang.org/toolchain@v0.0.1-go{version}.{host}")
}

/// How long the module proxy has to answer whether it serves a toolchain.
const PROXY_ANSWER: std::time::Duration = std::time::Duration::from_secs(30);

/// Whether `GOPROXY` (as the build inherits it; Go's default when unset) is `off`.
fn proxy_off() -> bool {
    std::env::var("GOPROXY").is_ok_and(|p| {
        !p.trim().is_empty()
            && p.split([',', '|'])
                .all(|e| e.trim() == "off" || e.trim().is_empty())
    })
}

/// Where the pinned toolchain comes from, or why it cannot be had: already in the module cache
/// (unpacked, or its zip downloaded); with `GOPROXY=off`, nowhere else; otherwise the module
/// proxy's answer to `go list -m -json <module>` within [`PROXY_ANSWER`] (GOPROXY and friends as
/// the build inherits them; a 403 names the module and the proxy's words). `go list -m` fetches
/// only the toolchain's `.info`; the build downloads the zip.
fn toolchain_obtainable(toolchain: &Toolchain) -> Result<String, String> {
    let module = toolchain_module(&toolchain.version);
    let (path, version) = module.split_once('@').expect("path@version");
    let cache = &toolchain.mod_cache;
    if cache.join(&module).join("bin/go").is_file()
        || cache
            .join("cache/download")
            .join(path)
            .join("@v")
            .join(format!("{version}.zip"))
            .is_file()
    {
        return Ok("in the module cache".into());
    }
    if proxy_off() {
        return Err(format!(
            "GOPROXY is off and the module cache ({}) does not hold {module}",
            cache.display()
        ));
    }
    let mut cmd = toolchain.command(Path::new("/"));
    cmd.args(["list", "-m", "-json", &module])
        .env("GOTOOLCHAIN", "local")
        .env("GOFLAGS", "-mod=mod")
        .env_remove("GOTMPDIR");
    let out = output_within(&mut cmd, PROXY_ANSWER).map_err(|e| match e {
        Wait::Start(e) => format!("cannot run go: {e}"),
        Wait::TimedOut => format!(
            "the module proxy did not say within {} s whether it serves {module} (GOPROXY={})",
            PROXY_ANSWER.as_secs(),
            std::env::var("GOPROXY").unwrap_or_else(|_| "Go's default".into())
        ),
    })?;
    if out.status.success() {
        return Ok(match std::env::var("GOPROXY") {
            Ok(proxy) if !proxy.is_empty() => {
                format!("served by the module proxy (GOPROXY={proxy})")
            }
            _ => "served by Go's default module proxy".into(),
        });
    }
    let text = String::from_utf8_lossy(&out.stderr);
    let mut lines = text.lines().map(str::trim).filter(|l| !l.is_empty());
    let first = lines
        .next()
        .unwrap_or("go list failed")
        .trim_start_matches("go: ");
    // Go names the module first; the line says it already.
    let first = first
        .strip_prefix(module.as_str())
        .map(|rest| rest.trim_start_matches(": "))
        .unwrap_or(first);
    let answer = lines
        .find_map(|l| l.strip_prefix("server response:"))
        .map(|r| format!(" ({})", r.trim().trim_end_matches('.')))
        .unwrap_or_default();
    Err(format!(
        "the module proxy does not give {module}: {first}{answer}"
    ))
}

/// Why [`output_within`] has no output.
enum Wait {
    /// The command could not start.
    Start(std::io::Error),
    /// It did not end in time (and was killed).
    TimedOut,
}

/// `cmd`'s output, killing it when it has not ended within `limit`.
fn output_within(
    cmd: &mut Command,
    limit: std::time::Duration,
) -> Result<std::process::Output, Wait> {
    use std::process::Stdio;
    let mut child = cmd
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .map_err(Wait::Start)?;
    let started = std::time::Instant::now();
    loop {
        match child.try_wait() {
            Ok(Some(_)) => return child.wait_with_output().map_err(Wait::Start),
            Ok(None) if started.elapsed() < limit => {
                std::thread::sleep(std::time::Duration::from_millis(50));
            }
            _ => {
                let _ = child.kill();
                let _ = child.wait();
                return Err(Wait::TimedOut);
            }
        }
    }
}

/// The cache directory: occm-forge must be able to write it and programs must run from it, and
/// it needs room for a build with `toolchain` ([`CACHE_COLD`] while it lacks that Go, else
/// [`CACHE_WARM`]).
pub fn cache_checks(cache_dir: &Path, toolchain: &Toolchain) -> Vec<Check> {
    let name = "cache directory";
    let fix = "point the cache (--cache-dir, OCCM_FORGE_CACHE) at a directory of yours on a file system that allows programs to run";
    let writable = std::fs::create_dir_all(cache_dir)
        .and_then(|()| tempfile::tempfile_in(cache_dir).map(drop));
    let usable = match (writable, disk::file_system(cache_dir)) {
        (Err(e), _) => Check::failed(
            name,
            Need::Build,
            format!("cannot write to {}: {e}", cache_dir.display()),
            fix,
            16,
        ),
        (Ok(()), Some(fs)) if fs.noexec => Check::failed(
            name,
            Need::Build,
            format!(
                "{} is on {}, mounted noexec: Go runs the test binaries and downloaded toolchains from there",
                cache_dir.display(),
                fs.mount_point.display()
            ),
            fix,
            16,
        ),
        (Ok(()), _) => Check::ok(name, Need::Build, cache_dir.display().to_string()),
    };
    let ok = usable.status.is_ok();
    let mut checks = vec![usable];
    if ok {
        checks.push(room(
            "room in the cache",
            cache_dir,
            CACHE_FLOOR,
            if has_go(toolchain) {
                CACHE_WARM
            } else {
                CACHE_COLD
            },
        ));
    }
    checks
}

/// Whether the caches hold `toolchain`'s Go and what it compiled: its toolchain module
/// unpacked in the module cache, or — for the `go` on PATH itself — a build cache that is not
/// empty.
fn has_go(toolchain: &Toolchain) -> bool {
    let module = toolchain_module(&toolchain.version);
    let fetched = toolchain.mod_cache.join(&module).join("bin/go").is_file();
    let local = local_go().is_ok_and(|v| v == toolchain.version)
        && std::fs::read_dir(&toolchain.build_cache).is_ok_and(|mut d| d.next().is_some());
    fetched || local
}

/// Whether `dir` (`--output`) can be written, without making it: a directory that exists must
/// take a new file; one that does not, its nearest existing parent. (`build` makes it, and
/// refuses a file there with exit 2.)
pub fn output_check(dir: &Path) -> Check {
    let name = "--output";
    if dir.exists() && !dir.is_dir() {
        return Check::failed(
            name,
            Need::Build,
            format!(
                "{} is not a directory (the OCI layout is a directory)",
                dir.display()
            ),
            "give a directory with --output",
            2,
        );
    }
    let absolute = std::path::absolute(dir).unwrap_or_else(|_| dir.to_path_buf());
    let existing = absolute
        .ancestors()
        .find(|a| a.is_dir())
        .unwrap_or(Path::new("/"));
    match tempfile::tempfile_in(existing) {
        Ok(_) => Check::ok(
            name,
            Need::Build,
            format!("{} can be written", dir.display()),
        ),
        Err(e) => Check::failed(
            name,
            Need::Build,
            format!("cannot write to {}: {e}", existing.display()),
            "give a directory of yours with --output",
            1,
        ),
    }
}

/// At least `floor` bytes free on the file system of `dir`, else a failed check; less than
/// `need`, a check that passed with a warning (`need` is measured for upstream: a smaller source
/// takes less).
fn room(name: &str, dir: &Path, floor: u64, need: u64) -> Check {
    match disk::file_system(dir) {
        Some(fs) if fs.free < floor.min(need) => Check::failed(
            name,
            Need::Build,
            format!(
                "{} is on {}, and a build needs about {} there{}",
                dir.display(),
                fs.describe(),
                disk::bytes(need),
                if floor < need {
                    format!(
                        " (no build gets anywhere with less than {})",
                        disk::bytes(floor)
                    )
                } else {
                    String::new()
                }
            ),
            "free some room there, or choose another directory",
            16,
        ),
        Some(fs) if fs.free < need => Check::low(
            name,
            Need::Build,
            format!("{} on {}", dir.display(), fs.describe()),
            format!(
                "{} is on {}, less than the about {} a build of upstream takes there; a smaller source may fit, and if the file system fills, the error names it",
                dir.display(),
                fs.describe(),
                disk::bytes(need)
            ),
        ),
        Some(fs) => Check::ok(
            name,
            Need::Build,
            format!("{} on {}", dir.display(), fs.describe()),
        ),
        None => Check::ok(
            name,
            Need::Build,
            format!("{}: free space unknown", dir.display()),
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn missing_prerequisites_are_said_in_one_line_with_the_first_ones_status() {
        let e = PreflightError {
            failed: vec![
                Check::failed("helm", Need::Accept, "no helm on PATH", "install helm", 16),
                Check::failed("push to r/a", Need::Push, "HTTP 401", "log in", 8),
            ],
        };
        assert_eq!(
            e.to_string(),
            "2 prerequisites are missing: (1) helm: no helm on PATH; install helm (2) push to r/a: HTTP 401; log in"
        );
        assert_eq!(e.exit_code(), 16);
        let one = PreflightError::of(vec![
            Check::ok("go", Need::Build, "go1.26.8 on PATH"),
            Check::failed(
                "Go toolchain go1.25.99",
                Need::Build,
                "refused",
                "pin another",
                6,
            ),
        ])
        .unwrap_err();
        assert_eq!(
            one.to_string(),
            "Go toolchain go1.25.99: refused; pin another"
        );
        assert_eq!(one.exit_code(), 6);
        assert!(PreflightError::of(vec![Check::ok("go", Need::Build, "")]).is_ok());
    }

    #[test]
    fn the_toolchain_module_names_this_machine() {
        let m = toolchain_module("1.25.1");
        assert!(
            m.starts_with("golang.org/toolchain@v0.0.1-go1.25.1.linux-"),
            "{m}"
        );
    }

    #[test]
    fn a_cache_on_a_full_disk_is_refused_naming_it() {
        let dir = tempfile::tempdir().unwrap();
        let c = room("room in the cache", dir.path(), u64::MAX, u64::MAX);
        let p = c.status.unwrap_err();
        assert!(
            p.cause.contains(" free of ") && p.cause.contains("a build needs about"),
            "{}",
            p.cause
        );
        assert_eq!(p.exit_code, 16);
        let roomy = room("room", dir.path(), 0, 0);
        assert!(roomy.status.is_ok() && roomy.warning.is_none(), "{roomy:?}");
    }

    #[test]
    fn a_cache_with_room_short_of_upstreams_need_but_above_the_floor_is_a_warning() {
        let dir = tempfile::tempdir().unwrap();
        let c = room("room in the cache", dir.path(), 0, u64::MAX);
        assert!(c.status.is_ok(), "{c:?}");
        let w = c.warning.unwrap();
        assert!(
            w.contains(" free of ") && w.contains("a build of upstream takes there"),
            "{w}"
        );
    }
}
