//! What of git's configuration reaches occm-forge: nothing, but for `safe.directory`.
//!
//! The repositories occm-forge owns — the object store `<cache>/git/objects.git`, each minor's
//! work tree, `patches edit`'s work tree — must hold exactly the bytes of the pinned commit and
//! the patch series on every machine. libgit2 reads the user's and the system's configuration
//! (`$HOME/.gitconfig`, `$XDG_CONFIG_HOME/git/config`, `/etc/gitconfig`, and through them
//! `core.attributesFile`, `$XDG_CONFIG_HOME/git/attributes`, `/etc/gitattributes`), where
//! `core.autocrlf = true` alone turns a checkout into CRLF on Linux
//! (Homebrew/legacy-homebrew#50514). [`isolate`] points libgit2's search paths for every level
//! outside a repository (system, XDG, global, programdata) at nothing, so only a repository's
//! own `.git/config` is read, and occm-forge writes those. libgit2 reads no `GIT_*` variable
//! when a repository is opened by path (only `git_repository_open_from_env` does), and
//! occm-forge opens every repository by path.
//!
//! Honoured on purpose:
//! - `safe.directory` for the one repository occm-forge does not own, the user's `--source`: a
//!   repository owned by another user is refused unless the user's or the system's
//!   configuration trusts it, as git does ([`check_owner`]).
//! - Proxies come from `HTTPS_PROXY`/`HTTP_PROXY`/`NO_PROXY` (the registry client's rule), never
//!   from git's `http.proxy`.
//!
//! The `git` program, which only `patches export` runs, gets the same treatment through
//! [`command`].

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::Once;

use git2::{ConfigLevel, Repository};

/// Keeps every configuration file outside a repository away from libgit2 (see the module
/// documentation) and turns libgit2's own ownership check off, since [`check_owner`] makes it
/// for the user's repository with the `safe.directory` libgit2 can no longer read. Idempotent;
/// every function here calls it first.
pub fn isolate() {
    static ONCE: Once = Once::new();
    ONCE.call_once(|| {
        for level in [
            ConfigLevel::System,
            ConfigLevel::XDG,
            ConfigLevel::Global,
            ConfigLevel::ProgramData,
        ] {
            // SAFETY: libgit2's global options are set once, before any repository or
            // configuration is opened through this module, and never changed afterwards.
            if let Err(e) = unsafe { git2::opts::set_search_path(level, "") } {
                tracing::warn!("cannot keep git's {level:?} configuration out: {e}");
            }
        }
        // SAFETY: as above.
        if let Err(e) = unsafe { git2::opts::set_verify_owner_validation(false) } {
            tracing::warn!("cannot turn libgit2's ownership check off: {e}");
        }
    });
}

/// Opens the repository occm-forge owns at `path` (a work tree or a bare repository), with no
/// configuration but its own.
///
/// Errors: libgit2's, when `path` is no repository.
pub fn open(path: &Path) -> Result<Repository, git2::Error> {
    isolate();
    Repository::open(path)
}

/// Opens the bare repository occm-forge owns at `path` ([`open`]).
///
/// Errors: libgit2's.
pub fn open_bare(path: &Path) -> Result<Repository, git2::Error> {
    isolate();
    Repository::open_bare(path)
}

/// Creates a repository with a work tree at `path`, with no configuration but its own (and no
/// template's); its
/// `info/attributes` turns every conversion off (`* -text -ident -filter
/// -working-tree-encoding`), so not even a `.gitattributes` in the checked-out tree changes
/// the bytes written or committed.
///
/// Errors: libgit2's, or the attributes file cannot be written.
pub fn init(path: &Path) -> Result<Repository, git2::Error> {
    isolate();
    let repo = Repository::init_opts(path, &no_template())?;
    let info = repo.path().join("info");
    std::fs::create_dir_all(&info)
        .and_then(|()| std::fs::write(info.join("attributes"), NO_CONVERSION))
        .map_err(|e| git2::Error::from_str(&format!("{}: {e}", info.display())))?;
    Ok(repo)
}

/// The attributes of every repository [`init`] makes: the bytes of a blob are the bytes of the
/// file (gitattributes(5): `-text` turns end-of-line conversion off whatever `eol` says, `-ident`
/// the `$Id$` expansion, `-filter` any clean/smudge driver, `-working-tree-encoding` re-encoding).
pub const NO_CONVERSION: &str = "* -text -ident -filter -working-tree-encoding\n";

/// Creates a bare repository at `path` ([`open`]).
///
/// Errors: libgit2's.
pub fn init_bare(path: &Path) -> Result<Repository, git2::Error> {
    isolate();
    Repository::init_opts(path, no_template().bare(true))
}

/// Options that make a repository from nothing else: no template directory (git2 copies the
/// system's, `/usr/share/git-core/templates`, whose `config` could set `core.worktree` or
/// `diff.noprefix`, by default).
fn no_template() -> git2::RepositoryInitOptions {
    let mut opts = git2::RepositoryInitOptions::new();
    opts.external_template(false);
    opts
}

/// Opens the configuration file at `path` alone (no other level).
///
/// Errors: libgit2's.
pub fn config_file(path: &Path) -> Result<git2::Config, git2::Error> {
    isolate();
    git2::Config::open(path)
}

/// Opens the user's repository at `path` (`--source`), refusing it when it is owned by another
/// user and no `safe.directory` trusts it ([`check_owner`]). `Ok(None)` when `path` is no
/// repository.
///
/// Errors: the one-line refusal of [`check_owner`].
pub fn open_users(path: &Path) -> Result<Option<Repository>, String> {
    isolate();
    let Ok(repo) = Repository::open(path) else {
        return Ok(None);
    };
    check_owner(&repo)?;
    Ok(Some(repo))
}

/// git's ownership rule for a repository occm-forge does not own (git-config(1),
/// `safe.directory`; libgit2's `validate_ownership`, which occm-forge turns off because it could
/// no longer read `safe.directory`): the work tree (for a bare repository, the git directory)
/// and the git directory must belong to the user occm-forge runs as — or, run by root through
/// sudo, to the user `SUDO_UID` names — unless `safe.directory` in the global or system
/// configuration lists it: `*` for any, the path itself, or a path ending in `/*` for
/// everything below it; an empty value clears what came before. The configuration is read from
/// where git reads it: `$GIT_CONFIG_GLOBAL`, else `$XDG_CONFIG_HOME/git/config` (or
/// `~/.config/git/config`) and `~/.gitconfig`; `$GIT_CONFIG_SYSTEM` or `/etc/gitconfig`
/// unless `$GIT_CONFIG_NOSYSTEM`.
///
/// Errors: one line naming the owner, the user and the command that trusts the repository.
pub fn check_owner(repo: &Repository) -> Result<(), String> {
    use std::os::unix::fs::MetadataExt;
    // SAFETY: geteuid has no preconditions and cannot fail.
    let me = unsafe { libc::geteuid() };
    let sudo = (me == 0)
        .then(|| std::env::var("SUDO_UID").ok()?.parse::<u32>().ok())
        .flatten();
    let key = repo.workdir().unwrap_or_else(|| repo.path()).to_path_buf();
    let key = strip_slash(&key);
    let mut foreign = None;
    for path in [key.clone(), strip_slash(repo.path())] {
        let Ok(owner) = std::fs::metadata(&path).map(|m| m.uid()) else {
            continue;
        };
        if owner != me && Some(owner) != sudo {
            foreign = Some(owner);
            break;
        }
    }
    let Some(owner) = foreign else {
        return Ok(());
    };
    if safe_directories().iter().any(|d| trusts(d, &key)) {
        return Ok(());
    }
    let shown = key.display().to_string();
    Err(format!(
        "it is owned by {}, not by {}, who runs occm-forge, and git refuses such repositories unless trusted (safe.directory): if you trust it, run `git config --global --add safe.directory {shown}`",
        user_name(owner),
        user_name(me)
    ))
}

/// `path` without a trailing `/` (libgit2 keeps one on a work tree's path).
fn strip_slash(path: &Path) -> PathBuf {
    let s = path.to_string_lossy();
    match s.strip_suffix('/') {
        Some(t) if !t.is_empty() => PathBuf::from(t),
        _ => path.to_path_buf(),
    }
}

/// Whether the `safe.directory` value `value` trusts the repository at `repo`: `*`, or an
/// absolute path (`~/` expanded to `$HOME/`, as git reads a path value), itself or with `/*`
/// for everything below it. A relative value trusts nothing (git ignores it).
fn trusts(value: &str, repo: &Path) -> bool {
    if value == "*" {
        return true;
    }
    let expanded = match value.strip_prefix("~/") {
        Some(rest) => match std::env::var_os("HOME") {
            Some(home) => Path::new(&home).join(rest),
            None => return false,
        },
        None => PathBuf::from(value),
    };
    if !expanded.is_absolute() {
        return false;
    }
    let canonical = |p: &Path| std::fs::canonicalize(p).unwrap_or_else(|_| p.to_path_buf());
    let repo = canonical(repo);
    let text = expanded.to_string_lossy();
    match text.strip_suffix("/*") {
        Some(prefix) => repo.starts_with(canonical(Path::new(prefix))),
        None => canonical(&strip_slash(&expanded)) == repo,
    }
}

/// The `safe.directory` values in effect, in git's order (system, global, then the command
/// line's `GIT_CONFIG_COUNT`/`GIT_CONFIG_KEY_<n>`/`GIT_CONFIG_VALUE_<n>`), an empty value
/// clearing those before it. `GIT_CONFIG_GLOBAL` set, even empty, replaces the global files (an
/// empty one names none); `GIT_CONFIG_NOSYSTEM` that is not false (git refuses a value it cannot
/// read) leaves the system file out.
fn safe_directories() -> Vec<String> {
    let var = |k: &str| {
        std::env::var_os(k)
            .filter(|v| !v.is_empty())
            .map(PathBuf::from)
    };
    let mut files = Vec::new();
    let no_system = std::env::var("GIT_CONFIG_NOSYSTEM")
        .ok()
        .is_some_and(|v| git2::Config::parse_bool(v).unwrap_or(true));
    if !no_system {
        files.push(var("GIT_CONFIG_SYSTEM").unwrap_or_else(|| PathBuf::from("/etc/gitconfig")));
    }
    match std::env::var_os("GIT_CONFIG_GLOBAL") {
        Some(global) if global.is_empty() => {}
        Some(global) => files.push(PathBuf::from(global)),
        None => {
            let home = var("HOME");
            if let Some(xdg) =
                var("XDG_CONFIG_HOME").or_else(|| home.as_ref().map(|h| h.join(".config")))
            {
                files.push(xdg.join("git/config"));
            }
            if let Some(home) = home {
                files.push(home.join(".gitconfig"));
            }
        }
    }
    let mut values: Vec<String> = Vec::new();
    for file in files.iter().filter(|f| f.is_file()) {
        let Ok(config) = config_file(file) else {
            continue;
        };
        let Ok(entries) = config.multivar("safe.directory", None) else {
            continue;
        };
        let _ = entries.for_each(|e| match e.value() {
            Ok("") | Err(_) => values.clear(),
            Ok(v) => values.push(v.to_string()),
        });
    }
    let count: usize = std::env::var("GIT_CONFIG_COUNT")
        .ok()
        .and_then(|n| n.trim().parse().ok())
        .unwrap_or(0);
    for i in 0..count {
        let key = std::env::var(format!("GIT_CONFIG_KEY_{i}")).unwrap_or_default();
        if key.eq_ignore_ascii_case("safe.directory") {
            match std::env::var(format!("GIT_CONFIG_VALUE_{i}")).unwrap_or_default() {
                v if v.is_empty() => values.clear(),
                v => values.push(v),
            }
        }
    }
    values
}

/// `uid`'s name from /etc/passwd, as `name (uid N)`, else `uid N`.
fn user_name(uid: u32) -> String {
    std::fs::read_to_string("/etc/passwd")
        .ok()
        .and_then(|t| {
            t.lines().find_map(|l| {
                let f: Vec<&str> = l.split(':').collect();
                (f.get(2) == Some(&uid.to_string().as_str())).then(|| f[0].to_string())
            })
        })
        .map_or(format!("uid {uid}"), |n| format!("{n} (uid {uid})"))
}

/// The `git` program in `dir` with none of the user's configuration: no `GIT_*` variable of the
/// caller (`GIT_DIR`, `GIT_CONFIG_PARAMETERS`, `GIT_CONFIG_COUNT`, …), no global or system file
/// (`GIT_CONFIG_GLOBAL=/dev/null`, `GIT_CONFIG_NOSYSTEM=1`), and no attributes file outside the
/// repository (`XDG_CONFIG_HOME` pointed at a directory that does not exist, `core.attributesFile`
/// set to `/dev/null`).
pub fn command(dir: &Path) -> Command {
    let mut cmd = Command::new("git");
    for (k, _) in std::env::vars_os() {
        if k.to_string_lossy().starts_with("GIT_") {
            cmd.env_remove(k);
        }
    }
    cmd.arg("-C")
        .arg(dir)
        .args(["-c", "core.attributesFile=/dev/null"])
        .env("GIT_CONFIG_NOSYSTEM", "1")
        .env("GIT_CONFIG_GLOBAL", "/dev/null")
        .env("XDG_CONFIG_HOME", "/nonexistent/occm-forge");
    cmd
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn safe_directory_values_trust_as_git_does() {
        let dir = tempfile::tempdir().unwrap();
        let repo = dir.path().join("mirror.git");
        std::fs::create_dir(&repo).unwrap();
        assert!(trusts("*", &repo));
        assert!(trusts(&repo.display().to_string(), &repo));
        assert!(trusts(&format!("{}/", repo.display()), &repo));
        assert!(trusts(&format!("{}/*", dir.path().display()), &repo));
        assert!(!trusts(&dir.path().display().to_string(), &repo));
        assert!(!trusts(&format!("{}/other/*", dir.path().display()), &repo));
        // Relative values trust nothing, wherever occm-forge runs.
        assert!(!trusts("mirror.git", &repo));
        assert!(!trusts("../*", &repo));
    }

    #[test]
    fn every_repository_made_here_converts_nothing() {
        let dir = tempfile::tempdir().unwrap();
        let repo = init(&dir.path().join("t")).unwrap();
        assert_eq!(
            std::fs::read_to_string(repo.path().join("info/attributes")).unwrap(),
            NO_CONVERSION
        );
    }
}
