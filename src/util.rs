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

/// Writes `data` to `path` through a temporary file in the same directory, `fsync` and a rename,
/// so readers see the old file or the new one, never a torn one. The file is mode 0644 (layouts
/// and manifests are meant to be read by others). Creates the parent directory.
pub fn write_file_atomically(path: &Path, data: &[u8]) -> std::io::Result<()> {
    let dir = path.parent().unwrap_or(Path::new("."));
    std::fs::create_dir_all(dir)?;
    let mut tmp = tempfile::NamedTempFile::new_in(dir)?;
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

/// A fresh scratch directory `<cache_dir>/tmp/<prefix>XXXXXX`, removed when dropped.
///
/// Errors: the directory cannot be created (the message names it).
pub fn scratch_dir(cache_dir: &Path, prefix: &str) -> Result<tempfile::TempDir, String> {
    let tmp_root = cache_dir.join("tmp");
    std::fs::create_dir_all(&tmp_root)
        .and_then(|_| {
            tempfile::Builder::new()
                .prefix(prefix)
                .tempdir_in(&tmp_root)
        })
        .map_err(|e| format!("{}: {e}", tmp_root.display()))
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
