//! The environment variation matrix: the same inputs give the same image on any machine.
//!
//! Modelled on reproducible-builds.org's reprotest, whose variations are the usual list of what a
//! reproducible build must not depend on (environment, build_path, kernel, aslr, num_cpus, time,
//! user_group, fileordering, domain_host, home, locales, exec_path, timezone, umask), plus what
//! reaches a Go build (`GOFLAGS`, a user's `go env -w` file, `GOAMD64`, `CGO_ENABLED`,
//! `GOEXPERIMENT`, a read-only `GOPATH`), a user's git configuration (`core.autocrlf` and its
//! friends, in every file and variable git and libgit2 read it from) and a `TMPDIR` on a
//! `noexec` mount. The fixture is built once cleanly (the reference), then once under each
//! variation with `--force`; each gives the reference image index digest or is refused in one
//! line naming what was refused. The table is printed (`--nocapture`).

mod common;

use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::sync::Mutex;

use common::*;

/// Where one variation runs: its own layout and digest-manifest fragment, so that variations
/// run side by side without waiting for each other's run lock.
struct Run {
    out: PathBuf,
    fragment: PathBuf,
    /// A scratch directory of the variation's own.
    dir: PathBuf,
}

/// What a variation does to the `build` it runs.
struct Setup {
    /// Programs the build runs under, outermost first (`unshare`, `setarch`, `sh -c 'umask …'`).
    wrap: Vec<OsString>,
    /// Environment variables set (the ones the clean reference sets are replaced).
    env: Vec<(OsString, OsString)>,
    /// Variables removed.
    remove: Vec<&'static str>,
    /// The fixture's upstream to build from (a copy elsewhere for the build-path variation).
    source: Option<PathBuf>,
    /// The cache directory instead of the shared one.
    cache: Option<PathBuf>,
}

impl Setup {
    fn none() -> Self {
        Setup {
            wrap: vec![],
            env: vec![],
            remove: vec![],
            source: None,
            cache: None,
        }
    }

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
}

/// What a variation must give.
#[derive(Clone, Copy)]
enum Expect {
    /// The reference digest.
    Same,
    /// A refusal: this exit status, and the error line contains the text.
    Refused(i32, &'static str),
}

struct Variation {
    /// reprotest's name for it, or ours.
    name: &'static str,
    /// What is varied, for the table.
    what: &'static str,
    setup: Box<dyn Fn(&common::Fixture, &Run) -> Setup + Sync>,
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
    cmd.current_dir(f.path());
    for (k, v) in forge.get_envs() {
        match v {
            Some(v) => cmd.env(k, v),
            None => cmd.env_remove(k),
        };
    }
    let home = run.dir.join("clean-home");
    std::fs::create_dir_all(&home).unwrap();
    clean(&mut cmd, &home);
    let cache = setup.cache.clone().unwrap_or_else(|| own_cache(&run.dir));
    cmd.env("OCCM_FORGE_CACHE", cache);
    for (k, v) in &setup.env {
        cmd.env(k, v);
    }
    for k in &setup.remove {
        cmd.env_remove(k);
    }
    let source = setup.source.clone().unwrap_or_else(|| f.upstream.clone());
    cmd.args(["build", "--k8s", "1.34", "--force", "--json", "--source"])
        .arg(source)
        .arg("--output")
        .arg(&run.out)
        .arg("--manifest-fragment")
        .arg(&run.fragment);
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

/// A git configuration that changes every byte git and libgit2 could change in a checkout, an
/// applied patch or a commit: CRLF line endings (`core.autocrlf`, `core.eol`, and an attributes
/// file marking everything as text with CRLF and `ident`), no symlinks, no file modes, and the
/// same again through `include.path`.
fn hostile_gitconfig(dir: &Path) -> String {
    let attributes = dir.join("hostile-attributes");
    put(&attributes, "* text eol=crlf ident\n*.go filter=hostile\n");
    let included = dir.join("hostile-included");
    put(&included, "[core]\n\tautocrlf = true\n\teol = crlf\n");
    format!(
        "[core]\n\tautocrlf = true\n\teol = crlf\n\tsafecrlf = false\n\tsymlinks = false\n\tfilemode = false\n\tattributesFile = {}\n\tignorecase = true\n[include]\n\tpath = {}\n[filter \"hostile\"]\n\tclean = sed s/package/pkg/\n\tsmudge = sed s/package/pkg/\n[init]\n\tdefaultBranch = hostile\n[diff]\n\tnoprefix = true\n\tmnemonicPrefix = true\n",
        attributes.display(),
        included.display()
    )
}

fn variations() -> Vec<Variation> {
    vec![
        Variation {
            name: "git: ~/.gitconfig",
            what: "core.autocrlf=true, core.eol=crlf, an attributesFile with `* text eol=crlf ident` and a filter, symlinks/filemode off, include.path",
            setup: Box::new(|_, run| {
                let home = run.dir.join("home");
                put(&home.join(".gitconfig"), &hostile_gitconfig(&run.dir));
                Setup::none().env("HOME", home)
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
                Setup::none().env("XDG_CONFIG_HOME", xdg)
            }),
            expect: Expect::Same,
        },
        Variation {
            name: "git: GIT_* variables",
            what: "GIT_CONFIG_GLOBAL, GIT_CONFIG_SYSTEM, GIT_CONFIG_COUNT/KEY/VALUE (core.autocrlf), GIT_CONFIG_PARAMETERS, GIT_DIR, GIT_WORK_TREE, GIT_INDEX_FILE, GIT_OBJECT_DIRECTORY, GIT_ATTR_SOURCE",
            setup: Box::new(|_, run| {
                let global = run.dir.join("global-gitconfig");
                put(&global, &hostile_gitconfig(&run.dir));
                Setup::none()
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
            name: "umask",
            what: "umask 077 (files 0600, directories 0700)",
            setup: Box::new(|_, _| Setup::none().shell("umask 077")),
            expect: Expect::Same,
        },
    ]
}

#[test]
fn every_variation_gives_the_reference_digest_or_a_one_line_refusal() {
    let f = fixture(&["linux/amd64", "linux/arm64"]);
    let base = f.path().join("runs");
    let new_run = |name: &str| {
        let dir = base.join(name.replace([' ', ':', '/', '~', '*', '$'], "-"));
        std::fs::create_dir_all(&dir).unwrap();
        Run {
            out: dir.join("out"),
            fragment: dir.join("fragment.yaml"),
            dir,
        }
    };
    let reference_run = new_run("reference");
    let reference = build(&f, &reference_run, &Setup::none());
    assert!(reference.status.success(), "{}", stderr(&reference));
    let want = digest_of(&reference).expect("the reference build prints its digest");

    let variations = variations();
    let rows: Mutex<Vec<(usize, String, bool)>> = Mutex::new(vec![]);
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
                    let started = std::time::Instant::now();
                    let o = build(&f, &run, &setup);
                    let secs = started.elapsed().as_secs_f64();
                    let (result, ok) = match (v.expect, o.status.success(), digest_of(&o)) {
                        (Expect::Same, true, Some(d)) => (d.clone(), d == want),
                        (Expect::Refused(code, text), false, _) => {
                            let line = last_line(&o);
                            let ok = o.status.code() == Some(code)
                                && line.starts_with("occm-forge: error: ")
                                && line.contains(text);
                            (format!("exit {:?}: {line}", o.status.code()), ok)
                        }
                        _ => (
                            format!("exit {:?}: {}", o.status.code(), last_line(&o)),
                            false,
                        ),
                    };
                    rows.lock().unwrap().push((
                        i,
                        format!("| {} | {} | {} | {secs:.1} s |", v.name, v.what, result),
                        ok,
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
        eprintln!("{row}{}", if *ok { "" } else { " **FAILED**" });
    }
    let failed: Vec<&str> = rows
        .iter()
        .filter(|r| !r.2)
        .map(|r| variations[r.0].name)
        .collect();
    assert!(
        failed.is_empty(),
        "variations that changed the image or failed: {failed:?}"
    );
}
