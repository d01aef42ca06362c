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

/// True for a valid tag (distribution-spec "Pulling manifests": `[a-zA-Z0-9_][a-zA-Z0-9._-]{0,127}`).
pub fn is_valid_tag(tag: &str) -> bool {
    let mut chars = tag.chars();
    matches!(chars.next(), Some(c) if c.is_ascii_alphanumeric() || c == '_')
        && tag.len() <= 128
        && chars.all(|c| c.is_ascii_alphanumeric() || matches!(c, '_' | '.' | '-'))
}

/// The name prefix of occm-forge's temporary files: a file left by a killed run is recognised
/// and removed by [`remove_stale_temp_files`].
pub const TEMP_PREFIX: &str = ".occm-forge-tmp-";

/// Removes temporary files a killed run left in `dir` (named [`TEMP_PREFIX`]…, older than a
/// minute: a write in progress elsewhere takes milliseconds). Errors are ignored.
pub fn remove_stale_temp_files(dir: &Path) {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    for e in entries.flatten() {
        let stale = e.file_name().to_string_lossy().starts_with(TEMP_PREFIX)
            && e.metadata()
                .and_then(|m| m.modified())
                .ok()
                .and_then(|t| t.elapsed().ok())
                .is_some_and(|age| age > std::time::Duration::from_secs(60));
        if stale {
            let _ = std::fs::remove_file(e.path());
        }
    }
}

/// Writes `data` to `path` through a temporary file in the same directory, `fsync` and a rename,
/// so readers see the old file or the new one, never a torn one. The file is mode 0644 (layouts
/// and manifests are meant to be read by others). Creates the parent directory.
pub fn write_file_atomically(path: &Path, data: &[u8]) -> std::io::Result<()> {
    let dir = path.parent().unwrap_or(Path::new("."));
    std::fs::create_dir_all(dir)?;
    let mut tmp = tempfile::Builder::new()
        .prefix(TEMP_PREFIX)
        .tempfile_in(dir)?;
    tmp.write_all(data)?;
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        tmp.as_file()
            .set_permissions(std::fs::Permissions::from_mode(0o644))?;
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
#[derive(Debug)]
pub struct Scratch {
    _lock: std::fs::File,
    dir: tempfile::TempDir,
}

impl Scratch {
    /// The directory.
    pub fn path(&self) -> &Path {
        self.dir.path()
    }
}

/// A fresh scratch directory `<cache_dir>/tmp/<prefix>XXXXXX`, removed when dropped.
///
/// Errors: the directory cannot be created (the message names it).
pub fn scratch_dir(cache_dir: &Path, prefix: &str) -> Result<Scratch, String> {
    let tmp_root = cache_dir.join("tmp");
    let err = |e: std::io::Error| format!("{}: {e}", tmp_root.display());
    std::fs::create_dir_all(&tmp_root).map_err(err)?;
    let dir = tempfile::Builder::new()
        .prefix(prefix)
        .tempdir_in(&tmp_root)
        .map_err(err)?;
    let lock = std::fs::File::create(dir.path().join(".lock")).map_err(err)?;
    lock.lock().map_err(err)?;
    Ok(Scratch { _lock: lock, dir })
}

/// Removes what runs killed with SIGKILL left under `<cache_dir>/tmp`: scratch directories whose
/// `.lock` no process holds (first stopping any process still working in them, e.g. a `go`
/// child that outlived its parent), and directories without a lock older than a day. Errors are
/// ignored: this only tidies.
pub fn sweep_scratch(cache_dir: &Path) {
    let Ok(entries) = std::fs::read_dir(cache_dir.join("tmp")) else {
        return;
    };
    for e in entries.flatten() {
        let path = e.path();
        if !path.is_dir() {
            continue;
        }
        let stale = match std::fs::File::open(path.join(".lock")) {
            Ok(f) => f.try_lock().is_ok(),
            Err(_) => e
                .metadata()
                .and_then(|m| m.modified())
                .ok()
                .and_then(|t| t.elapsed().ok())
                .is_some_and(|age| age > std::time::Duration::from_secs(24 * 3600)),
        };
        if stale {
            kill_processes_in(&path);
            let _ = std::fs::remove_dir_all(&path);
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
}
