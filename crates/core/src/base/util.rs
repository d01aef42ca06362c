//! Small helpers every layer uses: digests, atomic writes, times, tags, scratch space and message
//! wording. Nothing here knows about stages, images or registries.

use std::io::Write;
use std::path::Path;

/// `sha256:<hex>` of `bytes` (OCI image-spec `descriptor.md`, "Digests").
pub fn sha256_digest(bytes: &[u8]) -> String {
    use sha2::Digest as _;
    format!("sha256:{}", hex::encode(sha2::Sha256::digest(bytes)))
}

/// A short form of a digest for messages: `sha256:` plus 12 hex characters. Anything that is not
/// a `sha256:` digest (a tag, another reference) is returned whole.
pub fn short(digest: &str) -> &str {
    if digest.starts_with("sha256:") {
        &digest[..digest.len().min(19)]
    } else {
        digest
    }
}

/// True for `sha256:` followed by 64 lowercase hex characters.
pub fn is_sha256_digest(d: &str) -> bool {
    d.strip_prefix("sha256:").is_some_and(|h| {
        h.len() == 64
            && h.bytes()
                .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b))
    })
}

/// `sha256:<hex>` of everything `reader` gives, read in buffers (a blob is never held whole).
///
/// Errors: those of reading.
pub fn sha256_of_reader(mut reader: impl std::io::Read) -> std::io::Result<String> {
    use sha2::Digest as _;
    let mut h = sha2::Sha256::new();
    let mut buf = vec![0u8; 1 << 16];
    loop {
        let n = reader.read(&mut buf)?;
        if n == 0 {
            break;
        }
        h.update(&buf[..n]);
    }
    Ok(format!("sha256:{}", hex::encode(h.finalize())))
}

/// True for a valid tag (distribution-spec "Pulling manifests": `[a-zA-Z0-9_][a-zA-Z0-9._-]{0,127}`).
pub fn is_valid_tag(tag: &str) -> bool {
    let mut chars = tag.chars();
    matches!(chars.next(), Some(c) if c.is_ascii_alphanumeric() || c == '_')
        && tag.len() <= 128
        && chars.all(|c| c.is_ascii_alphanumeric() || matches!(c, '_' | '.' | '-'))
}

/// The name prefix of occm-forge's temporary files: a file left by a killed run is recognised
/// and removed by [`remove_temp_files`].
pub const TEMP_PREFIX: &str = ".occm-forge-tmp-";

/// The name prefix of the temporary files [`write_file_atomically`] writes for `path`:
/// [`TEMP_PREFIX`], the file's name (its first 200 bytes) and a dot, e.g.
/// `.occm-forge-tmp-images.lock.yaml.` (six random characters follow).
pub fn temp_prefix_for(path: &Path) -> String {
    let name = path
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    let mut end = name.len().min(200);
    while !name.is_char_boundary(end) {
        end -= 1;
    }
    format!("{TEMP_PREFIX}{}.", &name[..end])
}

/// Removes temporary files a killed run left in `dir`: those of writes of `owned` (named
/// [`temp_prefix_for`] `owned`) whatever their age — the caller holds the lock every writer of
/// `owned` holds, so none is being written — and any other [`TEMP_PREFIX`] file older than a
/// minute (another file's write in progress takes milliseconds). Errors are ignored.
pub fn remove_temp_files(dir: &Path, owned: &Path) {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    let own = temp_prefix_for(owned);
    for e in entries.flatten() {
        let name = e.file_name().to_string_lossy().into_owned();
        let stale = name.starts_with(&own)
            || name.starts_with(TEMP_PREFIX) && older_than(&e, std::time::Duration::from_secs(60));
        if stale {
            let _ = std::fs::remove_file(e.path());
        }
    }
}

/// Whether the directory entry was last modified more than `age` ago.
fn older_than(e: &std::fs::DirEntry, age: std::time::Duration) -> bool {
    e.metadata()
        .and_then(|m| m.modified())
        .ok()
        .and_then(|t| t.elapsed().ok())
        .is_some_and(|a| a > age)
}

/// Writes `data` to `path` through a temporary file in the same directory, `fsync` and a rename,
/// so readers see the old file or the new one, never a torn one. A new file is mode 0644 (layouts
/// and manifests are meant to be read by others); a file that exists keeps its mode, and a
/// symlink is written through to its target. Creates the parent directory.
pub fn write_file_atomically(path: &Path, data: &[u8]) -> std::io::Result<()> {
    // A symlink is written through (its target is replaced, the link stays), and an existing
    // file keeps its permissions; a new file is 0644.
    let resolved = std::fs::canonicalize(path).ok();
    let path = resolved.as_deref().unwrap_or(path);
    let dir = path.parent().unwrap_or(Path::new("."));
    std::fs::create_dir_all(dir)?;
    let mut tmp = tempfile::Builder::new()
        .prefix(&temp_prefix_for(path))
        .tempfile_in(dir)?;
    tmp.write_all(data)?;
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        let mode = std::fs::metadata(path)
            .map(|m| m.permissions().mode() & 0o7777)
            .unwrap_or(0o644);
        tmp.as_file()
            .set_permissions(std::fs::Permissions::from_mode(mode))?;
    }
    tmp.as_file().sync_all()?;
    tmp.persist(path).map_err(|e| e.error)?;
    Ok(())
}

/// Seconds since the epoch → RFC 3339 UTC (`1970-01-01T00:00:00Z`); out-of-range values give the
/// epoch itself.
pub fn rfc3339(epoch: i64) -> String {
    time::OffsetDateTime::from_unix_timestamp(epoch)
        .unwrap_or(time::OffsetDateTime::UNIX_EPOCH)
        .format(&time::format_description::well_known::Rfc3339)
        .expect("RFC 3339 formatting of a valid time")
}

/// A scratch directory, removed when dropped. While it lives, the file `.lock` inside it is
/// locked, which tells [`sweep_scratch`] of another run that it is in use.
///
/// Its life, so that a run killed at any point leaves nothing a sweep cannot tell is dead: it is
/// made as `.new-<name>`, its `.lock` locked, and renamed to `<name>` (a `<name>` directory
/// always has a locked `.lock` while its run lives); it is removed by renaming it to
/// `.dead-<name>` and deleting that, the lock held until the end.
#[derive(Debug)]
pub struct Scratch {
    dir: std::path::PathBuf,
    _lock: std::fs::File,
}

impl Scratch {
    /// The directory.
    pub fn path(&self) -> &Path {
        &self.dir
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        bury(&self.dir);
    }
}

/// The name prefix of a scratch directory being made ([`scratch_dir`]).
const NEW_SCRATCH: &str = ".new-";
/// The name prefix of a scratch directory being removed.
const DEAD_SCRATCH: &str = ".dead-";

/// A fresh scratch directory `<cache_dir>/tmp/<prefix>XXXXXX`, removed when dropped.
///
/// Errors: the directory cannot be created (the message names it).
pub fn scratch_dir(cache_dir: &Path, prefix: &str) -> Result<Scratch, String> {
    let tmp_root = cache_dir.join("tmp");
    let err = |e: std::io::Error| format!("{}: {e}", tmp_root.display());
    std::fs::create_dir_all(&tmp_root).map_err(err)?;
    let new = tempfile::Builder::new()
        .prefix(&format!("{NEW_SCRATCH}{prefix}"))
        .tempdir_in(&tmp_root)
        .map_err(err)?;
    let lock = std::fs::File::create(new.path().join(".lock")).map_err(err)?;
    lock.lock().map_err(err)?;
    let name = new
        .path()
        .file_name()
        .expect("a temporary directory has a name");
    let dir = tmp_root.join(
        name.to_string_lossy()
            .strip_prefix(NEW_SCRATCH)
            .expect("made with the prefix"),
    );
    std::fs::rename(new.path(), &dir).map_err(err)?;
    // Renamed: it is no longer the TempDir's to remove.
    let _ = new.keep();
    Ok(Scratch { dir, _lock: lock })
}

/// Removes what runs killed with SIGKILL (or killed while removing scratch) left under
/// `<cache_dir>/tmp`, first stopping any process still working there (e.g. a `go` child that
/// outlived its parent): `.dead-*` directories, scratch directories whose `.lock` no process
/// holds or that have none, and `.new-*` directories so left for more than a minute (a scratch
/// directory is made in microseconds). Cheap when there is nothing to remove (one directory
/// read), so every build calls it, an up-to-date one too. Errors are ignored: this only tidies.
pub fn sweep_scratch(cache_dir: &Path) {
    let Ok(entries) = std::fs::read_dir(cache_dir.join("tmp")) else {
        return;
    };
    for e in entries.flatten() {
        let path = e.path();
        if !e.file_type().is_ok_and(|t| t.is_dir()) {
            continue;
        }
        let name = e.file_name().to_string_lossy().into_owned();
        if name.starts_with(DEAD_SCRATCH) {
            kill_processes_in(&path);
            let _ = std::fs::remove_dir_all(&path);
            continue;
        }
        // Held while the directory is buried, so that no other sweep takes it meanwhile.
        let lock = std::fs::File::open(path.join(".lock")).ok();
        let free = match &lock {
            Some(f) => f.try_lock().is_ok(),
            None => true,
        };
        let dead = free
            && (!name.starts_with(NEW_SCRATCH)
                || older_than(&e, std::time::Duration::from_secs(60)));
        if dead {
            kill_processes_in(&path);
            bury(&path);
        }
        drop(lock);
    }
}

/// Renames `dir` to `.dead-<name>` beside it (one atomic step: from then on any sweep removes
/// it) and deletes that; where the rename fails, deletes `dir` in place.
fn bury(dir: &Path) {
    let name = dir.file_name().unwrap_or_default().to_string_lossy();
    let dead = dir.with_file_name(format!("{DEAD_SCRATCH}{name}"));
    match std::fs::rename(dir, &dead) {
        Ok(()) => {
            let _ = std::fs::remove_dir_all(&dead);
        }
        Err(_) => {
            let _ = std::fs::remove_dir_all(dir);
        }
    }
}

/// Sends SIGKILL to every process (but this one) whose working directory is `dir` or below it:
/// the Go compilers and test binaries a killed run left behind work in its tree.
pub fn kill_processes_in(dir: &Path) {
    let Ok(procs) = std::fs::read_dir("/proc") else {
        return;
    };
    let me = std::process::id();
    for p in procs.flatten() {
        let Ok(pid) = p.file_name().to_string_lossy().parse::<u32>() else {
            continue;
        };
        if pid != me
            && std::fs::read_link(p.path().join("cwd")).is_ok_and(|cwd| cwd.starts_with(dir))
        {
            // SAFETY: kill(2) sends a signal; no memory is touched.
            unsafe {
                libc::kill(pid as i32, libc::SIGKILL);
            }
        }
    }
}

/// `p` relative to the current directory when it lies below it, else as given (for messages).
pub fn display_rel(p: &Path) -> String {
    std::env::current_dir()
        .ok()
        .and_then(|d| p.strip_prefix(d).ok().map(|r| r.display().to_string()))
        .unwrap_or_else(|| p.display().to_string())
}

/// `word` with `plural_suffix` when `n != 1`: `plural(2, "mismatch", "es")` → `mismatches`.
pub fn plural(n: usize, word: &str, plural_suffix: &str) -> String {
    if n == 1 {
        word.to_string()
    } else {
        format!("{word}{plural_suffix}")
    }
}

/// `items` joined with `, ` (for messages listing minors, tests, files).
pub fn join<T: std::fmt::Display>(items: impl IntoIterator<Item = T>) -> String {
    items
        .into_iter()
        .map(|i| i.to_string())
        .collect::<Vec<_>>()
        .join(", ")
}

#[cfg(test)]
mod tests {

    #[cfg(unix)]
    #[test]
    fn an_atomic_write_keeps_the_mode_and_writes_through_a_symlink() {
        use std::os::unix::fs::PermissionsExt;
        let dir = tempfile::tempdir().unwrap();
        let real = dir.path().join("real.toml");
        std::fs::write(&real, "old").unwrap();
        std::fs::set_permissions(&real, std::fs::Permissions::from_mode(0o600)).unwrap();
        let link = dir.path().join("images.toml");
        std::os::unix::fs::symlink(&real, &link).unwrap();
        write_file_atomically(&link, b"new").unwrap();
        assert!(
            std::fs::symlink_metadata(&link)
                .unwrap()
                .file_type()
                .is_symlink()
        );
        assert_eq!(std::fs::read_to_string(&real).unwrap(), "new");
        assert_eq!(
            std::fs::metadata(&real).unwrap().permissions().mode() & 0o777,
            0o600
        );
        let fresh = dir.path().join("fresh");
        write_file_atomically(&fresh, b"x").unwrap();
        assert_eq!(
            std::fs::metadata(&fresh).unwrap().permissions().mode() & 0o777,
            0o644
        );
    }

    use super::*;

    #[test]
    fn digests_tags_and_words() {
        assert_eq!(
            sha256_digest(b""),
            "sha256:e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"
        );
        assert_eq!(short(&sha256_digest(b"")), "sha256:e3b0c44298fc");
        assert_eq!(short("v1.34.1-occmforge.1"), "v1.34.1-occmforge.1");
        assert!(is_sha256_digest(&sha256_digest(b"x")));
        assert!(!is_sha256_digest("sha256:ABC"));
        assert!(is_valid_tag("v1.34.1-occmforge.1"));
        assert!(!is_valid_tag(".v1") && !is_valid_tag(&"a".repeat(129)));
        assert_eq!(rfc3339(0), "1970-01-01T00:00:00Z");
        assert_eq!(plural(1, "mismatch", "es"), "mismatch");
        assert_eq!(plural(2, "mismatch", "es"), "mismatches");
        assert_eq!(join(["1.33", "1.34"]), "1.33, 1.34");
    }

    fn names_in(dir: &Path) -> Vec<String> {
        let mut names: Vec<String> = std::fs::read_dir(dir)
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect();
        names.sort();
        names
    }

    fn backdate(path: &Path, secs: u64) {
        let t = std::time::SystemTime::now() - std::time::Duration::from_secs(secs);
        std::fs::File::open(path).unwrap().set_modified(t).unwrap();
    }

    #[test]
    fn scratch_is_made_and_removed_without_a_state_a_sweep_cannot_judge() {
        let cache = tempfile::tempdir().unwrap();
        let tmp = cache.path().join("tmp");
        let scratch = scratch_dir(cache.path(), "build-1.34-").unwrap();
        let name = scratch
            .path()
            .file_name()
            .unwrap()
            .to_string_lossy()
            .into_owned();
        assert!(name.starts_with("build-1.34-"), "{name}");
        assert_eq!(names_in(&tmp), [name]);
        assert_eq!(names_in(scratch.path()), [".lock"]);
        // Its lock is held: another sweep leaves it.
        sweep_scratch(cache.path());
        assert!(scratch.path().exists());
        std::fs::write(scratch.path().join("file"), "x").unwrap();
        drop(scratch);
        assert_eq!(names_in(&tmp), Vec::<String>::new());
    }

    #[test]
    fn a_sweep_removes_what_killed_runs_and_killed_sweeps_left_and_nothing_in_use() {
        let cache = tempfile::tempdir().unwrap();
        let tmp = cache.path().join("tmp");
        let dir = |name: &str, lock: bool| {
            let d = tmp.join(name);
            std::fs::create_dir_all(d.join("src")).unwrap();
            std::fs::write(d.join("src/main.go"), "package main").unwrap();
            if lock {
                std::fs::write(d.join(".lock"), "").unwrap();
            }
            d
        };
        let live = scratch_dir(cache.path(), "build-1.33-").unwrap();
        dir("build-1.34-killed", true); // its run was killed: the lock is free
        dir("build-1.35-halfgone", false); // a removal killed after `.lock` went
        dir(".dead-build-1.35-renamed", false); // a removal killed after the rename
        dir(".new-build-1.36-making", false); // being made by another run, just now
        let old_new = dir(".new-build-1.36-killed", true); // made by a run killed a while ago
        backdate(&old_new, 120);
        let held = dir("accept-control-held", true);
        let holder = std::fs::File::open(held.join(".lock")).unwrap();
        holder.lock().unwrap();
        std::fs::write(tmp.join("a-file"), "x").unwrap();
        sweep_scratch(cache.path());
        let live_name = live
            .path()
            .file_name()
            .unwrap()
            .to_string_lossy()
            .into_owned();
        let mut kept = vec![
            ".new-build-1.36-making".to_string(),
            "a-file".into(),
            "accept-control-held".into(),
            live_name,
        ];
        kept.sort();
        assert_eq!(names_in(&tmp), kept);
    }

    #[test]
    fn temporary_files_of_the_locked_file_go_at_once_others_after_a_minute() {
        let d = tempfile::tempdir().unwrap();
        let manifest = d.path().join("images.lock.yaml");
        write_file_atomically(&manifest, b"x").unwrap();
        assert_eq!(
            temp_prefix_for(&manifest),
            ".occm-forge-tmp-images.lock.yaml."
        );
        let file = |name: &str, age: u64| {
            let p = d.path().join(name);
            std::fs::write(&p, "partial").unwrap();
            backdate(&p, age);
        };
        file(".occm-forge-tmp-images.lock.yaml.AbCdEf", 1);
        file(".occm-forge-tmp-timings.json.AbCdEf", 1);
        file(".occm-forge-tmp-XyZ123", 120);
        file("images.toml", 120);
        remove_temp_files(d.path(), &manifest);
        assert_eq!(
            names_in(d.path()),
            [
                ".occm-forge-tmp-timings.json.AbCdEf",
                "images.lock.yaml",
                "images.toml"
            ]
        );
        let long = d.path().join("é".repeat(120)); // 240 bytes: a valid name
        write_file_atomically(&long, b"x").unwrap();
        assert!(temp_prefix_for(&long).len() <= TEMP_PREFIX.len() + 201);
    }
}
