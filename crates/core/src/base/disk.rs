//! The file system under a path, as the failures that depend on it name it: how much room it has
//! (`statvfs(3)`: `f_bavail × f_frsize`, what an unprivileged process may still write), whether
//! programs may run from it (`ST_NOEXEC`, a `noexec` mount), and which mount it is
//! (`/proc/self/mountinfo`, proc(5)).

use std::path::{Path, PathBuf};

/// The file system a path is on.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FileSystem {
    /// Its mount point (`/`, `/tmp`, …), or the path itself when `/proc/self/mountinfo` cannot
    /// be read.
    pub mount_point: PathBuf,
    /// Bytes an unprivileged process may still write.
    pub free: u64,
    /// Its size in bytes.
    pub size: u64,
    /// Mounted `noexec`: no program may be started from it.
    pub noexec: bool,
    /// Mounted read-only.
    pub read_only: bool,
}

impl FileSystem {
    /// `<mount point> (<free> free of <size>)`.
    pub fn describe(&self) -> String {
        format!(
            "{} ({} free of {})",
            self.mount_point.display(),
            bytes(self.free),
            bytes(self.size)
        )
    }
}

/// The file system of `path`, or of its nearest existing ancestor when it does not exist yet.
/// `None` when not even `/` can be examined.
pub fn file_system(path: &Path) -> Option<FileSystem> {
    let existing = existing_ancestor(path)?;
    let c = std::ffi::CString::new(existing.as_os_str().as_encoded_bytes()).ok()?;
    // SAFETY: `c` is a valid NUL-terminated path and `st` a writable statvfs.
    let mut st: libc::statvfs = unsafe { std::mem::zeroed() };
    if unsafe { libc::statvfs(c.as_ptr(), &mut st) } != 0 {
        return None;
    }
    let frsize = st.f_frsize as u64;
    Some(FileSystem {
        mount_point: mount_point(&existing).unwrap_or_else(|| existing.clone()),
        free: (st.f_bavail as u64).saturating_mul(frsize),
        size: (st.f_blocks as u64).saturating_mul(frsize),
        noexec: st.f_flag & libc::ST_NOEXEC != 0,
        read_only: st.f_flag & libc::ST_RDONLY != 0,
    })
}

/// `path` made absolute and resolved, or its nearest ancestor that exists.
fn existing_ancestor(path: &Path) -> Option<PathBuf> {
    let absolute = if path.is_absolute() {
        path.to_path_buf()
    } else {
        std::env::current_dir().ok()?.join(path)
    };
    absolute
        .ancestors()
        .find_map(|a| std::fs::canonicalize(a).ok())
}

/// The mount point of the existing, resolved path `path`: the longest mount point in
/// `/proc/self/mountinfo` (its fifth field, with `\040`-style escapes) that contains it.
fn mount_point(path: &Path) -> Option<PathBuf> {
    let text = std::fs::read_to_string("/proc/self/mountinfo").ok()?;
    text.lines()
        .filter_map(|l| l.split(' ').nth(4).map(unescape))
        .map(PathBuf::from)
        .filter(|m| path.starts_with(m))
        .max_by_key(|m| m.as_os_str().len())
}

/// mountinfo's octal escapes (`\040` for a space) undone.
fn unescape(field: &str) -> String {
    let mut out = Vec::new();
    let b = field.as_bytes();
    let mut i = 0;
    while i < b.len() {
        if b[i] == b'\\'
            && i + 3 < b.len()
            && let Ok(v) = u8::from_str_radix(&field[i + 1..i + 4], 8)
        {
            out.push(v);
            i += 4;
            continue;
        }
        out.push(b[i]);
        i += 1;
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// A byte count for people: `512 B`, `3.2 MiB`, `66.0 GiB`.
pub fn bytes(n: u64) -> String {
    const UNITS: [&str; 5] = ["B", "KiB", "MiB", "GiB", "TiB"];
    let mut value = n as f64;
    let mut unit = 0;
    while value >= 1024.0 && unit + 1 < UNITS.len() {
        value /= 1024.0;
        unit += 1;
    }
    if unit == 0 {
        format!("{n} B")
    } else {
        format!("{value:.1} {}", UNITS[unit])
    }
}

/// The one line for a failed write of `path`: the path written, the error, and — when the file
/// system is full (`ENOSPC`, or a quota's `EDQUOT`) — which file system and how much room it
/// has left (`/out/blobs/sha256/ab…: No space left on device (os error 28); /out is on /mnt/small
/// (0 B free of 1.0 MiB)`).
pub fn write_failed(path: &Path, e: &std::io::Error) -> String {
    // tempfile adds the temporary file's own path; the path written is named already.
    let text = e.to_string();
    let text = text.split(" at path \"").next().unwrap_or(&text);
    match file_system(path).filter(|_| is_full(e)) {
        Some(fs) => format!("{}: {text}; it is on {}", path.display(), fs.describe()),
        None => format!("{}: {text}", path.display()),
    }
}

/// Whether `e` says the file system is full (`ENOSPC`, or a quota's `EDQUOT`), also when a
/// wrapper (tempfile's) kept only its kind.
pub fn is_full(e: &std::io::Error) -> bool {
    matches!(e.raw_os_error(), Some(libc::ENOSPC) | Some(libc::EDQUOT))
        || matches!(
            e.kind(),
            std::io::ErrorKind::StorageFull | std::io::ErrorKind::QuotaExceeded
        )
}

/// When a program's output (Go's stderr, a test's output) says a write failed on a full file
/// system (`write /c/go-build/ab/cd-d: no space left on device`, or `disk quota exceeded`): the
/// one line naming the path, its file system and the room left there.
pub fn full_in_output(output: &str) -> Option<String> {
    let line = output.lines().find(|l| {
        let l = l.to_ascii_lowercase();
        l.contains("no space left on device") || l.contains("disk quota exceeded")
    })?;
    let path = line
        .split_whitespace()
        .map(|w| {
            w.trim_end_matches(':')
                .trim_matches(|c| c == '"' || c == '\'')
        })
        .find(|w| w.starts_with('/'));
    Some(
        match path.and_then(|p| file_system(Path::new(p)).map(|fs| (p, fs))) {
            Some((p, fs)) => format!(
                "{}: {p} is on {}, which is full",
                line.trim(),
                fs.describe()
            ),
            None => line.trim().to_string(),
        },
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_file_system_of_a_path_not_yet_made_is_its_ancestors() {
        let dir = tempfile::tempdir().unwrap();
        let fs = file_system(&dir.path().join("not/yet/made")).unwrap();
        let parent = file_system(dir.path()).unwrap();
        assert_eq!(
            (&fs.mount_point, fs.size),
            (&parent.mount_point, parent.size)
        );
        assert!(fs.size >= fs.free && fs.size > 0);
        assert!(dir.path().starts_with(&fs.mount_point));
    }

    #[test]
    fn a_full_file_system_in_gos_output_is_named_with_its_room() {
        let dir = tempfile::tempdir().unwrap();
        let out = format!(
            "# k8s.io/x\ngo: failed to trim cache: x\nwrite {}/go-build/ab/cd-d: no space left on device\nFAIL\tk8s.io/x [build failed]\n",
            dir.path().display()
        );
        let line = full_in_output(&out).unwrap();
        assert!(
            line.starts_with(&format!(
                "write {}/go-build/ab/cd-d: no space left on device: {}/go-build/ab/cd-d is on ",
                dir.path().display(),
                dir.path().display()
            )) && line.ends_with(", which is full")
                && line.contains(" free of "),
            "{line}"
        );
        assert_eq!(full_in_output("--- FAIL: TestX\nexpected 1, got 2\n"), None);
    }

    #[test]
    fn mountinfo_escapes_are_undone_and_sizes_read() {
        assert_eq!(unescape(r"/mnt/with\040space"), "/mnt/with space");
        assert_eq!(unescape(r"/plain"), "/plain");
        assert_eq!(bytes(512), "512 B");
        assert_eq!(bytes(3 * 1024 * 1024 + 200 * 1024), "3.2 MiB");
    }

    #[test]
    fn a_full_disk_is_named_with_its_room_and_other_failures_are_not() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("blob");
        let full = write_failed(&path, &std::io::Error::from_raw_os_error(libc::ENOSPC));
        assert!(
            full.starts_with(&format!("{}: No space left on device", path.display()))
                && full.contains("; it is on ")
                && full.contains(" free of "),
            "{full}"
        );
        let denied = write_failed(&path, &std::io::Error::from_raw_os_error(libc::EACCES));
        assert_eq!(
            denied,
            format!("{}: Permission denied (os error 13)", path.display())
        );
    }
}
