//! Source stage: fetch the upstream tag into a shared object store, check the tag still points at
//! the pinned commit, and check out a work tree at that commit.
//!
//! One bare repository under `<cache>/git/objects.git` holds the objects of every minor and every
//! run; a work tree is a tiny repository whose `objects/info/alternates` points at that store, so
//! a checkout copies no objects. Fetched tags live under
//! `refs/occm-forge/<sha256(url)[..16]>/tags/<tag>` so that two sources never overwrite each
//! other's refs. Access to the store is serialised with a file lock. Remotes are reached through
//! the proxy the registry client would use (`registry::proxy::ProxyEnv`); local repositories are
//! read directly, and a partial clone without the tag's objects is named as such.

use std::fs::{self, File};
use std::path::{Path, PathBuf};

use git2::{FetchOptions, Oid, Repository};
use sha2::{Digest, Sha256};

use crate::base::git;
use crate::registry::proxy::{Proxy, ProxyEnv};

/// What the source stage needs.
#[derive(Debug, Clone)]
pub struct SourceRequest<'a> {
    /// Git URL (`https://…`, `file://…`) or a local path to a repository or bare mirror.
    pub url: &'a str,
    /// Upstream tag to fetch, e.g. `v1.34.1`.
    pub tag: &'a str,
    /// The 40-hex commit the tag must point at (from images.toml).
    pub pinned_commit: &'a str,
    /// The images.toml that pins it, for messages (as given with `--config`).
    pub config: &'a str,
    /// occm-forge cache directory; the object store lives in `<cache>/git`.
    pub cache_dir: &'a Path,
    /// Directory to create the work tree in; must not exist or be empty.
    pub tree_dir: &'a Path,
}

/// A pin that does not match the tag.
#[derive(Debug)]
pub struct PinMismatch {
    /// The images.toml that pins it (as given with `--config`).
    pub config: String,
    /// Upstream tag.
    pub tag: String,
    /// Source URL or path.
    pub url: String,
    /// What images.toml pins.
    pub pinned: String,
    /// The commit the tag points at.
    pub commit: String,
}

/// A checked-out upstream tree at the pinned commit.
#[derive(Debug, Clone)]
pub struct SourceTree {
    /// Work-tree root (also a git repository, for the patch commits).
    pub path: PathBuf,
    /// The commit checked out (40 hex), equal to the pin.
    pub commit: String,
    /// The commit's committer time, seconds since the Unix epoch (fallback for SOURCE_DATE_EPOCH).
    pub commit_time: i64,
}

/// Source-stage failures.
#[derive(Debug, thiserror::Error)]
pub enum SourceError {
    /// The tag could not be fetched from the source.
    #[error("cannot fetch tag {tag} from {url}: {message}")]
    Fetch {
        /// Upstream tag.
        tag: String,
        /// Source URL or path.
        url: String,
        /// libgit2's message.
        message: String,
    },
    /// The tags of the source could not be listed.
    #[error("cannot list the tags of {url}: {message}")]
    List {
        /// Source URL or path.
        url: String,
        /// The cause.
        message: String,
    },
    /// The tag points at another commit than the pin: upstream moved it, or the pin is wrong.
    #[error(
        "tag {} in {} points at {}, but {} pins {}; refusing to build a moved tag",
        .0.tag, .0.url, .0.commit, .0.config, .0.pinned
    )]
    TagMoved(Box<PinMismatch>),
    /// The pin is the id of the annotated tag object itself, not of the commit the tag points
    /// at (`git rev-parse v1.34.1` prints the tag object for an annotated tag;
    /// `git rev-parse v1.34.1^{commit}` prints the commit).
    #[error(
        "{} pins {} for {}, which is the annotated tag object in {}, not a commit; pin the commit it points at: {}",
        .0.config, .0.pinned, .0.tag, .0.url, .0.commit
    )]
    PinIsTagObject(Box<PinMismatch>),
    /// Local git or filesystem failure in the cache or the work tree.
    #[error("git cache {path}: {message}")]
    Cache {
        /// The path involved.
        path: PathBuf,
        /// What failed.
        message: String,
    },
}

fn cache_err(path: &Path) -> impl FnOnce(git2::Error) -> SourceError + '_ {
    move |e| SourceError::Cache {
        path: path.to_path_buf(),
        message: e.message().to_string(),
    }
}

fn io_err(path: &Path) -> impl FnOnce(std::io::Error) -> SourceError + '_ {
    move |e| SourceError::Cache {
        path: path.to_path_buf(),
        message: e.to_string(),
    }
}

fn mismatch(req: &SourceRequest<'_>, commit: String) -> PinMismatch {
    PinMismatch {
        config: req.config.to_string(),
        tag: req.tag.to_string(),
        url: req.url.to_string(),
        pinned: req.pinned_commit.to_string(),
        commit,
    }
}

/// Fetches `req.tag` into the shared store, checks it against the pin and checks out a work tree.
///
/// Errors: [`SourceError::Fetch`] when the source is unreachable or has no such tag,
/// [`SourceError::PinIsTagObject`] when the pin is the annotated tag object rather than its commit,
/// [`SourceError::TagMoved`] when the tag's commit differs from the pin (naming both), and
/// [`SourceError::Cache`] for local failures.
pub fn checkout(req: &SourceRequest<'_>) -> Result<SourceTree, SourceError> {
    let fetched = check_pin(req)?;
    let oid = Oid::from_str(&fetched.commit).map_err(cache_err(req.tree_dir))?;
    let tree = create_tree(&fetched.store, req.tree_dir, oid)?;
    Ok(SourceTree {
        path: tree,
        commit: fetched.commit,
        commit_time: fetched.commit_time,
    })
}

/// Fetches `req.tag` into the shared store and checks it against the pin, without checking
/// out (errors as [`checkout`]).
pub fn check_pin(req: &SourceRequest<'_>) -> Result<FetchedTag, SourceError> {
    let fetched = fetch_tag(req.url, req.tag, req.cache_dir)?;
    if fetched.commit != req.pinned_commit
        && fetched.tag_object.as_deref() == Some(req.pinned_commit)
    {
        return Err(SourceError::PinIsTagObject(Box::new(mismatch(
            req,
            fetched.commit,
        ))));
    }
    if fetched.commit != req.pinned_commit {
        return Err(SourceError::TagMoved(Box::new(mismatch(
            req,
            fetched.commit,
        ))));
    }
    Ok(fetched)
}

/// A tag fetched into the object store.
#[derive(Debug, Clone)]
pub struct FetchedTag {
    /// The commit the tag points at (40 hex).
    pub commit: String,
    /// Its committer time, seconds since the epoch.
    pub commit_time: i64,
    /// The annotated tag object's id (40 hex), `None` for a lightweight tag.
    pub tag_object: Option<String>,
    /// The object store holding it.
    pub store: PathBuf,
}

/// Fetches `tag` from `url` into the shared object store under `<cache_dir>/git` (serialised
/// with a file lock) and returns the commit it points at now.
pub fn fetch_tag(url: &str, tag: &str, cache_dir: &Path) -> Result<FetchedTag, SourceError> {
    let store_dir = cache_dir.join("git");
    fs::create_dir_all(&store_dir).map_err(io_err(&store_dir))?;
    let lock_path = store_dir.join("lock");
    let lock = File::create(&lock_path).map_err(io_err(&lock_path))?;
    lock.lock().map_err(io_err(&lock_path))?;

    let store_path = store_dir.join("objects.git");
    let store = match git::open_bare(&store_path) {
        Ok(r) => r,
        Err(_) => git::init_bare(&store_path).map_err(cache_err(&store_path))?,
    };

    let normalised = normalise_url(url);
    let key = hex::encode(Sha256::digest(normalised.as_bytes()));
    let local_ref = format!("refs/occm-forge/{}/tags/{}", &key[..16], tag);
    let fetch_err = |message: String| SourceError::Fetch {
        tag: tag.to_string(),
        url: url.to_string(),
        message,
    };
    if is_local_path(&normalised) && !Path::new(&normalised).exists() {
        return Err(fetch_err("no such directory".into()));
    }
    let mut tag_object = None;
    if let Some(advice) = unreadable_partial_clone(&normalised, tag) {
        return Err(fetch_err(advice));
    }
    match local_repository(&normalised).map_err(fetch_err)? {
        Some(src) => {
            tag_object = copy_tag(&src, &store, tag, &local_ref).map_err(|e| {
                fetch_err(
                    (e.code() == git2::ErrorCode::NotFound)
                        .then(|| src.config().ok())
                        .flatten()
                        .and_then(|c| partial_clone_advice(&c, local_path(&normalised), tag))
                        .unwrap_or_else(|| e.message().to_string()),
                )
            })?
        }
        None => {
            let refspec = format!("+refs/tags/{tag}:{local_ref}");
            let mut remote = store
                .remote_anonymous(&normalised)
                .map_err(|e| fetch_err(e.message().to_string()))?;
            let (proxy_opts, proxy) = git_proxy(&normalised);
            let mut opts = FetchOptions::new();
            opts.download_tags(git2::AutotagOption::None);
            opts.proxy_options(proxy_opts);
            remote
                .fetch(&[&refspec], Some(&mut opts), None)
                .map_err(|e| fetch_err(remote_message(&e, proxy.as_ref(), &normalised)))?;
        }
    }
    let reference = store
        .find_reference(&local_ref)
        .map_err(|_| fetch_err(format!("no tag {tag} there")))?;
    if tag_object.is_none() {
        tag_object = reference
            .target()
            .filter(|oid| store.find_tag(*oid).is_ok())
            .map(|oid| oid.to_string());
    }
    let commit = reference
        .peel_to_commit()
        .map_err(|e| fetch_err(format!("tag does not point at a commit: {}", e.message())))?;
    Ok(FetchedTag {
        commit: commit.id().to_string(),
        commit_time: commit.committer().when().seconds(),
        tag_object,
        store: store_path,
    })
}

/// Reads `path` in the tree of `commit` from the object store `store`; `None` when absent.
pub fn read_file(store: &Path, commit: &str, path: &str) -> Option<Vec<u8>> {
    let repo = git::open_bare(store).ok()?;
    let commit = repo.find_commit(Oid::from_str(commit).ok()?).ok()?;
    let entry = commit.tree().ok()?.get_path(Path::new(path)).ok()?;
    let blob = repo.find_blob(entry.id()).ok()?;
    Some(blob.content().to_vec())
}

/// Lists the tags of `url` with the commits they point at (annotated tags peeled), without
/// fetching objects: a local repository is read directly, a remote is asked with `ls-remote`.
/// Tags whose target cannot be read (partial mirrors) are left out.
pub fn list_tags(url: &str) -> Result<Vec<(String, String)>, SourceError> {
    let err = |message: String| SourceError::List {
        url: url.to_string(),
        message,
    };
    let normalised = normalise_url(url);
    if is_local_path(&normalised) && !Path::new(&normalised).exists() {
        return Err(err("no such directory".into()));
    }
    let mut tags = std::collections::BTreeMap::new();
    if let Some(repo) = local_repository(&normalised).map_err(err)? {
        let refs = repo
            .references_glob("refs/tags/*")
            .map_err(|e| err(e.message().to_string()))?;
        for r in refs.flatten() {
            if let (Ok(name), Ok(c)) = (r.shorthand(), r.peel_to_commit()) {
                tags.insert(name.to_string(), c.id().to_string());
            }
        }
    } else {
        let dir = tempfile::tempdir().map_err(|e| err(e.to_string()))?;
        let repo = git::init_bare(dir.path()).map_err(|e| err(e.message().to_string()))?;
        let mut remote = repo
            .remote_anonymous(&normalised)
            .map_err(|e| err(e.message().to_string()))?;
        let (proxy_opts, proxy) = git_proxy(&normalised);
        let connection = remote
            .connect_auth(git2::Direction::Fetch, None, Some(proxy_opts))
            .map_err(|e| err(remote_message(&e, proxy.as_ref(), &normalised)))?;
        let heads = connection
            .list()
            .map_err(|e| err(remote_message(&e, proxy.as_ref(), &normalised)))?;
        for head in heads {
            let Some(name) = head.name().strip_prefix("refs/tags/") else {
                continue;
            };
            match name.strip_suffix("^{}") {
                // The peeled commit of an annotated tag wins over the tag object.
                Some(tag) => {
                    tags.insert(tag.to_string(), head.oid().to_string());
                }
                None => {
                    tags.entry(name.to_string())
                        .or_insert_with(|| head.oid().to_string());
                }
            }
        }
    }
    Ok(tags.into_iter().collect())
}

/// The proxy the rule for registries (`registry::proxy::ProxyEnv`: `HTTPS_PROXY`/`HTTP_PROXY` by
/// scheme, Go's `NO_PROXY` with `host:port` entries, never loopback) gives a remote git URL, and
/// libgit2's options for it. libgit2 tunnels an `https://` remote through the proxy with
/// `CONNECT` and answers a 407 with the (percent-decoded) user and password of the proxy URL.
/// A plain `http://` remote it cannot proxy (it sends the absolute-form request to the server
/// itself: libgit2/libgit2#5650), so that one is reached directly and its errors say so (see
/// [`remote_message`]). Anything else (ssh, `git@…`) and a URL no proxy applies to are reached
/// directly; libgit2's own proxy detection is off.
fn git_proxy(url: &str) -> (git2::ProxyOptions<'static>, Option<Proxy>) {
    let mut opts = git2::ProxyOptions::new();
    let parsed = reqwest::Url::parse(url).ok();
    let proxy = parsed
        .as_ref()
        .and_then(|u| ProxyEnv::from_env().proxy_for(u).cloned());
    if let (Some(p), Some("https")) = (&proxy, parsed.as_ref().map(reqwest::Url::scheme)) {
        opts.url(&p.url);
    }
    (opts, proxy)
}

/// libgit2's message for a failed fetch or listing of `url`, naming the proxy when it went
/// through one: a 407 (libgit2: "proxy authentication required") says whether the proxy URL
/// had credentials; other failures add the proxy and that `NO_PROXY` does not list the host.
/// The proxy's password never appears.
fn remote_message(e: &git2::Error, proxy: Option<&Proxy>, url: &str) -> String {
    let Some(proxy) = proxy else {
        return e.message().to_string();
    };
    let message = proxy.redact(e.message());
    if e.code() == git2::ErrorCode::Auth && message.starts_with("proxy ") {
        let what = if proxy.has_credentials() {
            format!("it refused the user and password in {}", proxy.variable)
        } else {
            format!(
                "{} has no user and password (http://user:password@host:port, percent-encoded)",
                proxy.variable
            )
        };
        return format!("the {proxy} answered 407 Proxy Authentication Required: {what}");
    }
    let parsed = reqwest::Url::parse(url).ok();
    let host = parsed
        .as_ref()
        .and_then(|u| Some(format!("{}:{}", u.host_str()?, u.port_or_known_default()?)))
        .unwrap_or_else(|| url.to_string());
    if parsed.as_ref().map(reqwest::Url::scheme) == Some("http") {
        return format!(
            "{message} ({} names a proxy for {host}, but libgit2 cannot fetch plain http:// through a proxy (libgit2/libgit2#5650), so it went directly: use an https:// URL)",
            proxy.variable
        );
    }
    format!(
        "{message} (through the {proxy}; NO_PROXY does not list {host}; add it there if it is reachable directly)"
    )
}

/// Whether `url` names a path on this machine rather than a remote.
fn is_local_path(url: &str) -> bool {
    !url.contains("://") && !url.starts_with("git@")
}

/// The path of a local source (a path or a `file://` URL).
fn local_path(url: &str) -> &str {
    url.strip_prefix("file://").unwrap_or(url)
}

/// The source as a repository on this machine, if it is one (a path or a `file://` URL),
/// refused in one line when another user owns it and no `safe.directory` trusts it
/// ([`git::check_owner`]).
fn local_repository(url: &str) -> Result<Option<Repository>, String> {
    let path = local_path(url);
    if path.contains("://") || path.starts_with("git@") {
        return Ok(None);
    }
    git::open_users(Path::new(path))
}

/// When a local source is a partial clone that libgit2 cannot open at all (the older marker
/// `extensions.partialclone`, which libgit2 1.9 refuses as an unknown extension), what to do.
fn unreadable_partial_clone(url: &str, tag: &str) -> Option<String> {
    let path = Path::new(local_path(url));
    if url.contains("://") && !url.starts_with("file://")
        || !matches!(local_repository(url), Ok(None))
    {
        return None;
    }
    let config = [path.join("config"), path.join(".git/config")]
        .into_iter()
        .find(|c| c.is_file())?;
    let config = git::config_file(&config).ok()?;
    partial_clone_advice(&config, local_path(url), tag)
}

/// When `config` (of the repository at `path`) is a partial clone's — `remote.<name>.promisor`
/// true, or `extensions.partialclone = <name>` (git before 2.26) — the one-line explanation of
/// why objects of `tag` are missing and the command that fetches them (git's
/// partial-clone documentation: a promisor remote serves missing objects on demand, and
/// occm-forge, reading the repository with libgit2, does not ask it). `None` otherwise.
fn partial_clone_advice(config: &git2::Config, path: &str, tag: &str) -> Option<String> {
    let from_remote = config
        .entries(Some(r"remote\..*\.promisor"))
        .ok()
        .and_then(|entries| {
            let mut found = None;
            entries
                .for_each(|e| {
                    if found.is_none()
                        && git2::Config::parse_bool(e.value().unwrap_or("")).unwrap_or(false)
                        && let Ok(name) = e.name()
                    {
                        found = Some(name.to_string());
                    }
                })
                .ok()?;
            found
        });
    let (marker, remote) = match from_remote {
        Some(key) => {
            let remote = key["remote.".len()..key.len() - ".promisor".len()].to_string();
            (key, remote)
        }
        None => (
            "extensions.partialclone".to_string(),
            config.get_string("extensions.partialclone").ok()?,
        ),
    };
    let filter = config
        .get_string(&format!("remote.{remote}.partialclonefilter"))
        .map(|f| format!(", filter {f}"))
        .unwrap_or_default();
    let quoted = shell_quote(path);
    Some(format!(
        "it is a partial clone ({marker}{filter}) without the objects of {tag}, and occm-forge reads no promisor remote: fetch them with `git -C {quoted} -c remote.{remote}.partialclonefilter= fetch --refetch {remote} tag {tag}`, or clone without --filter (a shallow clone works)"
    ))
}

/// `s` as one shell word: as it is when it needs no quoting, otherwise in single quotes.
fn shell_quote(s: &str) -> String {
    if !s.is_empty()
        && s.bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"/._-+:@%=,".contains(&b))
    {
        s.to_string()
    } else {
        format!("'{}'", s.replace('\'', r"'\''"))
    }
}

/// Copies the history of `tag` from a local repository into the store and points `local_ref` at
/// its commit. The repository is read directly rather than through libgit2's local transport,
/// which peels every tag of the source and so fails on partial mirrors whose unrelated tags
/// point at absent objects. Commits the store already has are not copied again. Returns the
/// annotated tag object's id, `None` for a lightweight tag.
fn copy_tag(
    src: &Repository,
    store: &Repository,
    tag: &str,
    local_ref: &str,
) -> Result<Option<String>, git2::Error> {
    let reference = src
        .find_reference(&format!("refs/tags/{tag}"))
        .map_err(|_| git2::Error::from_str(&format!("no tag {tag} there")))?;
    let tag_object = reference
        .target()
        .filter(|oid| src.find_tag(*oid).is_ok())
        .map(|oid| oid.to_string());
    let target = reference.peel_to_commit()?.id();
    if store.find_commit(target).is_err() {
        let mut walk = src.revwalk()?;
        walk.push(target)?;
        for r in store.references()?.flatten() {
            if let Some(oid) = r.target()
                && src.find_commit(oid).is_ok()
            {
                walk.hide(oid)?;
            }
        }
        let mut pack = src.packbuilder()?;
        pack.set_threads(0);
        pack.insert_walk(&mut walk)?;
        let odb = store.odb()?;
        let mut writer = odb.packwriter()?;
        let mut io_error = None;
        pack.foreach(
            |chunk| match std::io::Write::write_all(&mut writer, chunk) {
                Ok(()) => true,
                Err(e) => {
                    io_error = Some(e);
                    false
                }
            },
        )?;
        if let Some(e) = io_error {
            return Err(git2::Error::from_str(&e.to_string()));
        }
        writer.commit()?;
    }
    store.reference(local_ref, target, true, "occm-forge: copy tag")?;
    Ok(tag_object)
}

/// A local path becomes an absolute path (so that relative paths keep working from any
/// directory); URLs are left as they are.
fn normalise_url(url: &str) -> String {
    if url.contains("://") || url.starts_with("git@") {
        return url.to_string();
    }
    fs::canonicalize(url)
        .map(|p| p.to_string_lossy().into_owned())
        .unwrap_or_else(|_| url.to_string())
}

fn create_tree(store_path: &Path, tree_dir: &Path, commit: Oid) -> Result<PathBuf, SourceError> {
    // A reused work tree starts empty: nothing of an earlier build survives.
    if tree_dir.exists() {
        fs::remove_dir_all(tree_dir).map_err(io_err(tree_dir))?;
    }
    fs::create_dir_all(tree_dir).map_err(io_err(tree_dir))?;
    let repo = git::init(tree_dir).map_err(cache_err(tree_dir))?;
    let alternates = repo.path().join("objects/info/alternates");
    fs::create_dir_all(alternates.parent().expect("alternates has a parent"))
        .map_err(io_err(&alternates))?;
    let objects = store_path.join("objects");
    fs::write(&alternates, format!("{}\n", objects.display())).map_err(io_err(&alternates))?;
    drop(repo);
    let repo = git::open(tree_dir).map_err(cache_err(tree_dir))?;
    repo.set_head_detached(commit)
        .map_err(cache_err(tree_dir))?;
    let mut co = git2::build::CheckoutBuilder::new();
    // The blobs' bytes, whatever an attribute says (also `git::init`'s `info/attributes`).
    co.force().disable_filters(true);
    repo.checkout_head(Some(&mut co))
        .map_err(cache_err(tree_dir))?;
    Ok(tree_dir.to_path_buf())
}

/// The work tree a build of `minor` reuses, `<cache>/trees/<minor>`, with a lock held while the
/// build uses it; `None` when another run holds it (the build then works in its scratch space).
///
/// Go keys compiled packages by their directory and test results by the files tests open: a
/// tree at the same path with the same file times lets `go test` reuse both, where a fresh
/// directory per build recompiles the tree's packages and reruns every test.
pub fn reusable_tree(cache_dir: &Path, minor: &str) -> Option<(PathBuf, File)> {
    let dir = cache_dir.join("trees");
    fs::create_dir_all(&dir).ok()?;
    let lock = File::create(dir.join(format!("{minor}.lock"))).ok()?;
    lock.try_lock().ok()?;
    let tree = dir.join(minor);
    // Anything still working in it belongs to a run that was killed.
    crate::base::util::kill_processes_in(&tree);
    Some((tree, lock))
}

/// Sets every tracked file's modification time from its content (the git blob id) so that the
/// same content always has the same time, older than the tree's commit: Go's test cache, which
/// compares the size and time of the files a test opened, then hits for unchanged files and
/// misses for changed ones. Errors are ignored: the times only make caching better.
pub fn stamp_mtimes(tree: &Path, commit_time: i64) {
    let Ok(repo) = git::open(tree) else {
        return;
    };
    let Ok(index) = repo.index() else {
        return;
    };
    for entry in index.iter() {
        if entry.mode & 0o170000 != 0o100000 {
            continue; // symlinks and submodules
        }
        let path = tree.join(String::from_utf8_lossy(&entry.path).as_ref());
        if let Ok(f) = File::open(&path) {
            let _ = f.set_modified(stamped_mtime(entry.id, commit_time));
        }
    }
}

/// The time [`stamp_mtimes`] gives a file with blob id `id`: up to about three years before
/// the commit time, derived from the id.
pub fn stamped_mtime(id: Oid, commit_time: i64) -> std::time::SystemTime {
    let id = id.as_bytes();
    let offset = u32::from_be_bytes([id[0], id[1], id[2], id[3]]) % 100_000_000;
    let secs = (commit_time - i64::from(offset)).max(1);
    std::time::UNIX_EPOCH + std::time::Duration::from_secs(secs as u64)
}
