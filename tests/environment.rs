//! The environment variation matrix: the same inputs give the same image on any machine.
//!
//! Modelled on reproducible-builds.org's reprotest, whose variations are the usual list of what a
//! reproducible build must not depend on (environment, build_path, kernel, aslr, num_cpus, time,
//! user_group, fileordering, domain_host, home, locales, exec_path, timezone, umask), plus what
//! reaches a Go build (`GOFLAGS`, a user's `go env -w` file, `GOAMD64`, `CGO_ENABLED`,
//! `GOEXPERIMENT`, a read-only `GOPATH`), a user's git configuration (`core.autocrlf` and its
//! friends, in every file and variable git and libgit2 read it from) and a `TMPDIR` on a
//! `noexec` mount. The fixture is built once cleanly (the reference), then once under each
//! variation with `--force`, each in a cache of its own (a new object store and work tree; the
//! Go caches shared); each gives the reference image index digest or is refused in one line
//! naming what was refused. A variation this machine cannot make (no root for a mount, no
//! `faketime`) is listed as not made, with why. The table is printed (`--nocapture`).

use crate::common;

use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::sync::Mutex;

use common::*;

/// Where one variation runs: its own layout, digest-manifest fragment and cache, so that
/// variations run side by side, each checking out and patching afresh.
struct Run {
    /// A directory of the variation's own.
    dir: PathBuf,
}

/// What a variation does to the `build` it runs.
#[derive(Default)]
struct Setup {
    /// Programs the build runs under, outermost first (`unshare`, `setarch`, `sh -c 'umask …'`).
    wrap: Vec<OsString>,
    /// Environment variables set (after the clean environment).
    env: Vec<(OsString, OsString)>,
    /// A copy of the fixture (upstream, patches, images.toml) to build from, as the working
    /// directory; the layout, fragment, HOME and cache then live in it too.
    root: Option<PathBuf>,
    /// The cache directory instead of the run's own.
    cache: Option<PathBuf>,
    /// Why this machine cannot make the variation.
    skip: Option<String>,
}

impl Setup {
    fn env(mut self, k: impl Into<OsString>, v: impl Into<OsString>) -> Self {
        self.env.push((k.into(), v.into()));
        self
    }

    fn wrap(mut self, args: &[&str]) -> Self {
        self.wrap.extend(args.iter().map(OsString::from));
        self
    }

    /// Runs the build through `sh -c '<script>; exec "$@"'`.
    fn shell(self, script: &str) -> Self {
        self.wrap(&["sh", "-c", &format!("{script}\nexec \"$@\""), "sh"])
    }

    /// Runs the build in a mount namespace of its own, after `script` (mounts) in it. Needs root
    /// (CI runs as root).
    fn mounts(self, script: &str) -> Self {
        if !is_root() {
            return self.skipped("making a mount needs root (CI runs as root)");
        }
        self.wrap(&["unshare", "-m"])
            .shell(&format!("set -e\n{script}"))
    }

    fn skipped(mut self, why: &str) -> Self {
        self.skip = Some(why.to_string());
        self
    }

    /// Unless `tool` is on PATH, the variation is not made.
    fn needs(self, tool: &str) -> Self {
        if on_path(tool) {
            self
        } else {
            self.skipped(&format!("`{tool}` is not installed (.ci/run installs it)"))
        }
    }
}

fn on_path(tool: &str) -> bool {
    std::env::var_os("PATH")
        .is_some_and(|p| std::env::split_paths(&p).any(|d| d.join(tool).is_file()))
}

fn is_root() -> bool {
    run(Command::new("id").arg("-u")).trim() == "0"
}

/// What a variation must give.
#[derive(Clone, Copy)]
enum Expect {
    /// The reference digest.
    Same,
    /// A refusal: this exit status, and the error line contains the text.
    Refused(i32, &'static str),
}

/// Makes a variation's [`Setup`] in its run directory.
type SetupFn = Box<dyn Fn(&common::Fixture, &Run) -> Setup + Sync>;

struct Variation {
    /// reprotest's name for it, or ours.
    name: &'static str,
    /// What is varied, for the table.
    what: &'static str,
    setup: SetupFn,
    expect: Expect,
}

/// The clean environment every run starts from: a HOME of its own with nothing in it, no git or
/// Go settings from this machine, UTC, the C locale.
fn clean(cmd: &mut Command, home: &Path) {
    for (k, _) in std::env::vars_os() {
        let k = k.to_string_lossy().into_owned();
        if k.starts_with("GIT_") || k.starts_with("LC_") || k == "LANG" || k == "LANGUAGE" {
            cmd.env_remove(k);
        }
    }
    cmd.env("HOME", home)
        .env_remove("XDG_CONFIG_HOME")
        .env_remove("XDG_CACHE_HOME")
        .env("TZ", "UTC")
        .env_remove("GOENV")
        .env_remove("GOPATH")
        .env_remove("TMPDIR");
}

fn build(f: &common::Fixture, run: &Run, setup: &Setup) -> Output {
    let forge = occm_forge(f.path());
    let mut cmd = match setup.wrap.split_first() {
        Some((program, args)) => {
            let mut c = Command::new(program);
            c.args(args).arg(forge.get_program());
            c
        }
        None => Command::new(forge.get_program()),
    };
    for (k, v) in forge.get_envs() {
        match v {
            Some(v) => cmd.env(k, v),
            None => cmd.env_remove(k),
        };
    }
    let place = setup.root.clone().unwrap_or_else(|| run.dir.clone());
    let home = place.join("clean-home");
    std::fs::create_dir_all(&home).unwrap();
    clean(&mut cmd, &home);
    let cache = setup.cache.clone().unwrap_or_else(|| own_cache(&place));
    cmd.env("OCCM_FORGE_CACHE", cache);
    for (k, v) in &setup.env {
        cmd.env(k, v);
    }
    let (cwd, source) = match &setup.root {
        Some(root) => (root.clone(), root.join("upstream")),
        None => (f.path().to_path_buf(), f.upstream.clone()),
    };
    cmd.current_dir(cwd)
        .args(["build", "--k8s", "1.34", "--force", "--json", "--source"])
        .arg(source)
        .arg("--output")
        .arg(place.join("out"))
        .arg("--manifest-fragment")
        .arg(place.join("fragment.yaml"));
    cmd.output().unwrap()
}

/// A cache of the run's own under `dir` — its object store, work tree and scratch space are
/// new, so every variation checks out and patches afresh — whose Go caches (`go/`) are the
/// shared ones, so that Go compiles nothing it compiled before: Go's caches are keyed by
/// content, and the work tree's path does not reach a `-trimpath` build.
fn own_cache(dir: &Path) -> PathBuf {
    let cache = dir.join("cache");
    if !cache.exists() {
        let go = shared_cache().join("go");
        std::fs::create_dir_all(&go).unwrap();
        std::fs::create_dir_all(&cache).unwrap();
        std::os::unix::fs::symlink(go, cache.join("go")).unwrap();
    }
    cache
}

/// A copy of the fixture's upstream, patches and images.toml in `dir` (made).
fn copy_fixture(f: &common::Fixture, dir: &Path) {
    std::fs::create_dir_all(dir).unwrap();
    run(Command::new("cp")
        .arg("-a")
        .arg(&f.upstream)
        .arg(&f.patches)
        .arg(&f.config)
        .arg(dir));
}

/// The image index digest a `--json` build printed.
fn digest_of(o: &Output) -> Option<String> {
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).ok()?;
    v["digest"].as_str().map(str::to_string)
}

fn last_line(o: &Output) -> String {
    stderr(o).lines().last().unwrap_or_default().to_string()
}

/// Writes `text` to `path`, creating its directory.
fn put(path: &Path, text: &str) {
    std::fs::create_dir_all(path.parent().unwrap()).unwrap();
    std::fs::write(path, text).unwrap();
}

/// A Go environment file (`go env -w` writes one) that sets everything that changes a build.
const HOSTILE_GO_ENV: &str = "GOFLAGS=-race -tags=hostile -ldflags=-s\nGOAMD64=v3\nGOARM64=v9.0\nCGO_ENABLED=1\nGOEXPERIMENT=nogreenteagc\nGOTOOLCHAIN=local\nGOPROXY=off\n";

fn variations() -> Vec<Variation> {
    vec![
        Variation {
            name: "git: ~/.gitconfig",
            what: "core.autocrlf=true, core.eol=crlf, an attributesFile with `* text eol=crlf ident` and a filter, symlinks and filemode off, include.path",
            setup: Box::new(|_, run| {
                let home = run.dir.join("home");
                put(&home.join(".gitconfig"), &hostile_gitconfig(&run.dir));
                Setup::default().env("HOME", home)
            }),
            expect: Expect::Same,
        },
        Variation {
            name: "git: XDG_CONFIG_HOME",
            what: "$XDG_CONFIG_HOME/git/config (the same settings) and $XDG_CONFIG_HOME/git/attributes",
            setup: Box::new(|_, run| {
                let xdg = run.dir.join("xdg");
                put(&xdg.join("git/config"), &hostile_gitconfig(&run.dir));
                put(&xdg.join("git/attributes"), "* text eol=crlf ident\n");
                Setup::default().env("XDG_CONFIG_HOME", xdg)
            }),
            expect: Expect::Same,
        },
        Variation {
            name: "git: GIT_* variables",
            what: "GIT_CONFIG_GLOBAL, GIT_CONFIG_SYSTEM, GIT_CONFIG_COUNT/KEY/VALUE (core.autocrlf), GIT_CONFIG_PARAMETERS, GIT_DIR, GIT_WORK_TREE, GIT_INDEX_FILE, GIT_OBJECT_DIRECTORY, GIT_ATTR_SOURCE",
            setup: Box::new(|_, run| {
                let global = run.dir.join("global-gitconfig");
                put(&global, &hostile_gitconfig(&run.dir));
                Setup::default()
                    .env("GIT_CONFIG_GLOBAL", &global)
                    .env("GIT_CONFIG_SYSTEM", &global)
                    .env("GIT_CONFIG_COUNT", "1")
                    .env("GIT_CONFIG_KEY_0", "core.autocrlf")
                    .env("GIT_CONFIG_VALUE_0", "true")
                    .env("GIT_CONFIG_PARAMETERS", "'core.autocrlf'='true'")
                    .env("GIT_DIR", run.dir.join("no-such-git-dir"))
                    .env("GIT_WORK_TREE", run.dir.join("no-such-work-tree"))
                    .env("GIT_INDEX_FILE", run.dir.join("no-such-index"))
                    .env("GIT_OBJECT_DIRECTORY", run.dir.join("no-such-objects"))
                    .env("GIT_ATTR_SOURCE", "HEAD")
            }),
            expect: Expect::Same,
        },
        Variation {
            name: "git: system templates",
            what: "a template directory whose config sets core.worktree elsewhere, diff.noprefix and core.autocrlf (bind-mounted over /usr/share/git-core/templates)",
            setup: Box::new(|_, run| {
                let templates = run.dir.join("templates");
                let elsewhere = run.dir.join("elsewhere");
                put(
                    &templates.join("config"),
                    &format!(
                        "[core]\n\tworktree = {}\n\tautocrlf = true\n[diff]\n\tnoprefix = true\n",
                        elsewhere.display()
                    ),
                );
                put(&templates.join("info/attributes"), "* text eol=crlf\n");
                let system = Path::new("/usr/share/git-core/templates");
                if !system.is_dir() {
                    return Setup::default().skipped("this machine has no git templates");
                }
                Setup::default().mounts(&format!(
                    "mount --bind '{}' '{}'",
                    templates.display(),
                    system.display()
                ))
            }),
            expect: Expect::Same,
        },
        Variation {
            name: "environment",
            what: "variables no build should read: TAR_OPTIONS, GZIP, CDPATH, BASH_ENV, ENV, LD_LIBRARY_PATH, MAKEFLAGS, GOMAXPROCS=1, GOGC=5, TERM=dumb, COLUMNS=20, NO_COLOR, CLICOLOR_FORCE, RUST_LOG=trace, RUST_BACKTRACE=full, CAPTURE_ENVIRONMENT",
            setup: Box::new(|_, run| {
                Setup::default()
                    .env("TAR_OPTIONS", "--owner=1234 --mtime=@0")
                    .env("GZIP", "-9")
                    .env("CDPATH", "/")
                    .env("BASH_ENV", run.dir.join("no-such-rc"))
                    .env("ENV", run.dir.join("no-such-rc"))
                    .env("LD_LIBRARY_PATH", run.dir.join("no-such-lib"))
                    .env("MAKEFLAGS", "-j64")
                    .env("GOMAXPROCS", "1")
                    .env("GOGC", "5")
                    .env("TERM", "dumb")
                    .env("COLUMNS", "20")
                    .env("NO_COLOR", "1")
                    .env("CLICOLOR_FORCE", "1")
                    .env("RUST_LOG", "trace")
                    .env("RUST_BACKTRACE", "full")
                    .env("CAPTURE_ENVIRONMENT", "i_capture_the_environment")
            }),
            expect: Expect::Same,
        },
        Variation {
            name: "build_path",
            what: "the fixture, the work tree, the layout and the cache under another path with spaces and non-ASCII letters",
            setup: Box::new(|f, run| {
                let root = run.dir.join("build path with spaces/ünïcödé dir");
                copy_fixture(f, &root);
                Setup {
                    root: Some(root),
                    ..Setup::default()
                }
            }),
            expect: Expect::Same,
        },
        Variation {
            name: "home: missing",
            what: "HOME names a directory that does not exist",
            setup: Box::new(|_, run| Setup::default().env("HOME", run.dir.join("no-such-home"))),
            expect: Expect::Same,
        },
        Variation {
            name: "locales",
            what: "LANG=fr_CH.UTF-8, LC_ALL=tr_TR.UTF-8, LANGUAGE=fr (reprotest's and the Turkish dotless i)",
            setup: Box::new(|_, _| {
                Setup::default()
                    .env("LANG", "fr_CH.UTF-8")
                    .env("LC_ALL", "tr_TR.UTF-8")
                    .env("LANGUAGE", "fr")
            }),
            expect: Expect::Same,
        },
        Variation {
            name: "timezone",
            what: "TZ=GMT-14 (reprotest's)",
            setup: Box::new(|_, _| Setup::default().env("TZ", "GMT-14")),
            expect: Expect::Same,
        },
        Variation {
            name: "umask: 077",
            what: "umask 077 (files 0600, directories 0700)",
            setup: Box::new(|_, _| Setup::default().shell("umask 077")),
            expect: Expect::Same,
        },
        Variation {
            name: "umask: 000",
            what: "umask 000 (files 0666, directories 0777)",
            setup: Box::new(|_, _| Setup::default().shell("umask 000")),
            expect: Expect::Same,
        },
        Variation {
            name: "user_group",
            what: "another user and group (nobody, 65534) owning the fixture copy, its cache and HOME",
            setup: Box::new(|f, r| {
                if !is_root() {
                    return Setup::default().skipped("changing user needs root (CI runs as root)");
                }
                // The other user must reach the run's directory through the fixture's.
                for d in [f.path(), r.dir.parent().unwrap()] {
                    run(Command::new("chmod").arg("755").arg(d));
                }
                let dir = r.dir.join("user");
                let root = dir.join("fixture");
                copy_fixture(f, &root);
                let cache = root.join("cache");
                std::fs::create_dir_all(&cache).unwrap();
                run(Command::new("cp")
                    .arg("-a")
                    .arg(shared_cache().join("go"))
                    .arg(cache.join("go")));
                run(Command::new("chown").args(["-R", "65534:65534"]).arg(&dir));
                run(Command::new("chmod").args(["755"]).arg(&dir));
                Setup {
                    root: Some(root.clone()),
                    cache: Some(cache),
                    ..Setup::default()
                }
                .wrap(&[
                    "setpriv",
                    "--reuid=65534",
                    "--regid=65534",
                    "--clear-groups",
                    "--",
                ])
                .env("HOME", root.join("clean-home"))
            }),
            expect: Expect::Same,
        },
        Variation {
            name: "num_cpus",
            what: "one CPU (taskset -c 0): Go's GOMAXPROCS and `-p` follow it",
            setup: Box::new(|_, _| {
                Setup::default()
                    .needs("taskset")
                    .wrap(&["taskset", "-c", "0"])
            }),
            expect: Expect::Same,
        },
        Variation {
            name: "kernel, aslr",
            what: "uname -r says 2.6 (setarch --uname-2.6), address space randomisation off (setarch -R)",
            setup: Box::new(|_, _| {
                let arch = run(Command::new("uname").arg("-m")).trim().to_string();
                Setup::default()
                    .needs("setarch")
                    .wrap(&["setarch", &arch, "--uname-2.6", "-R"])
            }),
            expect: Expect::Same,
        },
        Variation {
            name: "domain_host",
            what: "another host name (a UTS namespace)",
            setup: Box::new(|_, _| {
                if !is_root() {
                    return Setup::default()
                        .skipped("a UTS namespace needs root (CI runs as root)");
                }
                Setup::default()
                    .wrap(&["unshare", "-u"])
                    .shell("hostname occm-forge-variation.invalid")
            }),
            expect: Expect::Same,
        },
        Variation {
            name: "fileordering",
            what: "the fixture, the work tree and the cache on disorderfs, which shuffles every directory listing",
            setup: Box::new(|f, run| {
                let orig = run.dir.join("orig");
                copy_fixture(f, &orig);
                own_cache(&orig);
                std::fs::create_dir_all(orig.join("clean-home")).unwrap();
                let view = run.dir.join("view");
                std::fs::create_dir_all(&view).unwrap();
                // The working directory is entered again once the view is mounted over it.
                let script = format!(
                    "disorderfs --shuffle-dirents=yes --multi-user=yes -o nonempty '{o}' '{v}' >/dev/null\ncd '{v}'",
                    o = orig.display(),
                    v = view.display()
                );
                Setup {
                    root: Some(view),
                    ..Setup::default()
                }
                .needs("disorderfs")
                .mounts(&script)
            }),
            expect: Expect::Same,
        },
        Variation {
            name: "exec_path",
            what: "PATH starts with a directory whose git, tar, gzip, cc, gcc, ld, cosign and skopeo fail",
            setup: Box::new(|_, run| {
                let bin = run.dir.join("hostile-bin");
                std::fs::create_dir_all(&bin).unwrap();
                for tool in ["git", "tar", "gzip", "cc", "gcc", "ld", "cosign", "skopeo"] {
                    let p = bin.join(tool);
                    std::fs::write(&p, "#!/bin/sh\necho hostile \"$0\" >&2\nexit 1\n").unwrap();
                    use std::os::unix::fs::PermissionsExt;
                    std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o755)).unwrap();
                }
                let path = std::env::join_paths(std::iter::once(bin).chain(std::env::split_paths(
                    &std::env::var_os("PATH").unwrap_or_default(),
                )))
                .unwrap();
                Setup::default().env("PATH", path)
            }),
            expect: Expect::Same,
        },
        Variation {
            name: "time",
            what: "the clock 1000 days ahead (faketime) for occm-forge itself",
            setup: Box::new(|_, _| {
                Setup::default()
                    .needs("faketime")
                    .env("FAKETIME_DONT_FAKE_MONOTONIC", "1")
                    .wrap(&["faketime", "-f", "+1000d"])
            }),
            expect: Expect::Same,
        },
        Variation {
            name: "go: GOFLAGS",
            what: "GOFLAGS=-mod=vendor -race -tags=hostile -ldflags=-s -gcflags=all=-N",
            setup: Box::new(|_, _| {
                Setup::default().env(
                    "GOFLAGS",
                    "-mod=vendor -race -tags=hostile -ldflags=-s -gcflags=all=-N",
                )
            }),
            expect: Expect::Same,
        },
        Variation {
            name: "go: go env -w",
            what: "a GOENV file and ~/.config/go/env setting GOFLAGS, GOAMD64=v3, GOARM64=v9.0, CGO_ENABLED=1, GOEXPERIMENT, GOTOOLCHAIN=local",
            setup: Box::new(|_, run| {
                let home = run.dir.join("go-home");
                put(&home.join(".config/go/env"), HOSTILE_GO_ENV);
                let file = run.dir.join("hostile-go-env");
                put(&file, HOSTILE_GO_ENV);
                Setup::default().env("HOME", home).env("GOENV", file)
            }),
            expect: Expect::Same,
        },
        Variation {
            name: "go: variables",
            what: "GOAMD64=v3, GOARM64=v9.0, CGO_ENABLED=1, CC=false, GOEXPERIMENT, GODEBUG, GOOS=windows, GOARCH=386, GOROOT, GOCACHE, GOMODCACHE, GOTMPDIR, GOBIN elsewhere",
            setup: Box::new(|_, run| {
                Setup::default()
                    .env("GOAMD64", "v3")
                    .env("GOARM64", "v9.0")
                    .env("CGO_ENABLED", "1")
                    .env("CC", "false")
                    .env("GOEXPERIMENT", "nogreenteagc")
                    .env("GODEBUG", "panicnil=1")
                    .env("GOOS", "windows")
                    .env("GOARCH", "386")
                    .env("GOROOT", run.dir.join("no-such-goroot"))
                    .env("GOCACHE", run.dir.join("other-gocache"))
                    .env("GOMODCACHE", run.dir.join("other-gomodcache"))
                    .env("GOTMPDIR", run.dir.join("no-such-gotmpdir"))
                    .env("GOBIN", run.dir.join("no-such-gobin"))
            }),
            expect: Expect::Same,
        },
        Variation {
            name: "go: GOPATH read-only",
            what: "GOPATH on a read-only mount",
            setup: Box::new(|_, run| {
                let gopath = run.dir.join("gopath");
                std::fs::create_dir_all(&gopath).unwrap();
                let g = gopath.display();
                Setup::default().env("GOPATH", &gopath).mounts(&format!(
                    "mount --bind '{g}' '{g}'\nmount -o remount,bind,ro '{g}'"
                ))
            }),
            expect: Expect::Same,
        },
        Variation {
            name: "TMPDIR noexec",
            what: "TMPDIR on a tmpfs mounted noexec, as hardened CI runners have it (golang/go#52941), with an empty cache so that the tests run (the shared Go cache holds their results)",
            setup: Box::new(|_, run| {
                let tmp = run.dir.join("noexec-tmp");
                std::fs::create_dir_all(&tmp).unwrap();
                let cache = Some(run.dir.join("empty-cache"));
                Setup {
                    cache,
                    ..Setup::default()
                }
                .env("TMPDIR", &tmp)
                .mounts(&format!(
                    "mount -t tmpfs -o noexec,size=256m tmpfs '{}'",
                    tmp.display()
                ))
            }),
            expect: Expect::Same,
        },
        Variation {
            name: "cache noexec",
            what: "the cache itself on a noexec mount: Go could not run the tests from it",
            setup: Box::new(|_, run| {
                let cache = own_cache(&run.dir);
                let c = cache.display();
                Setup::default().mounts(&format!(
                    "mount --bind '{c}' '{c}'\nmount -o remount,bind,noexec '{c}'"
                ))
            }),
            expect: Expect::Refused(16, "preflight: cache directory: "),
        },
    ]
}

#[test]
fn every_variation_gives_the_reference_digest_or_a_one_line_refusal() {
    let f = fixture(&["linux/amd64", "linux/arm64"]);
    let base = f.path().join("runs");
    let new_run = |name: &str| {
        let dir = base.join(name.replace([' ', ':', '/', '~', '*', '$', ','], "-"));
        std::fs::create_dir_all(&dir).unwrap();
        Run { dir }
    };
    let reference = build(&f, &new_run("reference"), &Setup::default());
    assert!(reference.status.success(), "{}", stderr(&reference));
    let want = digest_of(&reference).expect("the reference build prints its digest");

    let variations = variations();
    let rows: Mutex<Vec<(usize, String, Option<bool>)>> = Mutex::new(vec![]);
    let next = Mutex::new(0usize);
    std::thread::scope(|s| {
        for _ in 0..2 {
            s.spawn(|| {
                loop {
                    let i = {
                        let mut n = next.lock().unwrap();
                        *n += 1;
                        *n - 1
                    };
                    let Some(v) = variations.get(i) else { break };
                    let run = new_run(v.name);
                    let setup = (v.setup)(&f, &run);
                    if let Some(why) = &setup.skip {
                        let row = format!("| {} | {} | not made here: {why} | |", v.name, v.what);
                        rows.lock().unwrap().push((i, row, None));
                        continue;
                    }
                    let started = std::time::Instant::now();
                    let o = build(&f, &run, &setup);
                    let secs = started.elapsed().as_secs_f64();
                    let (result, ok) = match (v.expect, o.status.success(), digest_of(&o)) {
                        (Expect::Same, true, Some(d)) => {
                            let ok = d == want;
                            (if ok { "the reference digest".into() } else { d }, ok)
                        }
                        (Expect::Refused(code, text), false, _) => {
                            let line = last_line(&o);
                            let ok = o.status.code() == Some(code)
                                && line.starts_with("occm-forge: error: ")
                                && line.contains(text);
                            (
                                format!("exit {}: `{line}`", o.status.code().unwrap_or(-1)),
                                ok,
                            )
                        }
                        _ => (
                            format!("exit {:?}: {}", o.status.code(), last_line(&o)),
                            false,
                        ),
                    };
                    rows.lock().unwrap().push((
                        i,
                        format!("| {} | {} | {} | {secs:.1} s |", v.name, v.what, result),
                        Some(ok),
                    ));
                }
            });
        }
    });
    let mut rows = rows.into_inner().unwrap();
    rows.sort_by_key(|r| r.0);
    eprintln!(
        "reference: {want}\n| variation | what | digest or refusal | time |\n|---|---|---|---|"
    );
    for (_, row, ok) in &rows {
        eprintln!(
            "{row}{}",
            if *ok == Some(false) {
                " **FAILED**"
            } else {
                ""
            }
        );
    }
    let failed: Vec<&str> = rows
        .iter()
        .filter(|r| r.2 == Some(false))
        .map(|r| variations[r.0].name)
        .collect();
    assert!(
        failed.is_empty(),
        "variations that changed the image or were not refused as they should be: {failed:?}"
    );
}
