//! Patch stage: apply a patch series (files in `git format-patch` form) to a work tree with
//! libgit2, and commit each patch with its own author and subject at a fixed time.
//!
//! Every patch is first checked (dry run), then applied to index and work tree, then committed.
//! A patch that does not apply forward but applies in reverse is reported as already upstream and
//! skipped; any other failure names the patch, the file and the hunk, and stops the series.

use std::borrow::Cow;
use std::cell::RefCell;
use std::path::{Path, PathBuf};

use git2::{ApplyLocation, ApplyOptions, Diff, Repository, Signature, Time};

mod forms;
mod three_way;

use sha2::{Digest, Sha256};
pub use three_way::ConflictedFile;
use three_way::{OnConflict, ThreeWayError};

/// One patch file of a series.
#[derive(Debug, Clone)]
pub struct PatchFile {
    /// File name, e.g. `0002-openstack-treat-a-missing-server-by-name-as-InstanceNotFound.patch`.
    pub name: String,
    /// The exact bytes of the file.
    pub bytes: Vec<u8>,
}

impl PatchFile {
    /// sha256 (hex) of the file's bytes.
    pub fn sha256(&self) -> String {
        hex::encode(Sha256::digest(&self.bytes))
    }
}

/// The mail headers of a `git format-patch` file.
#[derive(Debug, Clone, PartialEq)]
pub struct MailHeader {
    /// `From:` display name.
    pub author_name: String,
    /// `From:` address.
    pub author_email: String,
    /// `Date:` as (seconds since the epoch, offset in minutes), if present and parseable.
    pub date: Option<(i64, i32)>,
    /// `Subject:` without the `[PATCH n/m]` prefix, continuation lines joined.
    pub subject: String,
    /// The commit message body (between the headers and the `---` line), trimmed.
    pub body: String,
}

/// How one patch of the series ended.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub enum PatchOutcome {
    /// Applied and committed; the commit id (40 hex).
    Applied(String),
    /// Its hunks did not apply to the tree as they are, but a three-way merge from the blobs its
    /// `index` lines name (as `git am -3` does) did, without conflict; committed. The commit id
    /// and, per file, what was merged (`cmd/…/main.go: 1 hunk merged with upstream's changes
    /// since blob 1a2b3c4`).
    AppliedThreeWay {
        /// The commit id (40 hex).
        commit: String,
        /// One note per file merged three-way.
        files: Vec<String>,
    },
    /// Its change is already in the tree (it applies in reverse): skipped.
    AlreadyUpstream,
}

/// The result for one patch.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct AppliedPatch {
    /// Patch file name.
    pub name: String,
    /// sha256 hex of the patch file.
    pub sha256: String,
    /// Subject line.
    pub subject: String,
    /// Applied or already upstream.
    pub outcome: PatchOutcome,
}

/// Patch-stage failures.
#[derive(Debug, thiserror::Error)]
pub enum PatchError {
    /// A series entry has no file.
    #[error("patch {name}: cannot read {path}: {message}")]
    Read {
        /// Patch name.
        name: String,
        /// Where it was looked for.
        path: PathBuf,
        /// The I/O error.
        message: String,
    },
    /// The patch holds what cannot be applied as `git am` applies it (a copy, a binary change
    /// without its data): what it holds and how to make one that applies.
    #[error("patch {name}: {message}")]
    Unsupported {
        /// Patch name.
        name: String,
        /// What it holds and what to do.
        message: String,
    },
    /// The file is not a patch libgit2 can parse.
    #[error("patch {name}: not a valid patch: {message}")]
    Parse {
        /// Patch name.
        name: String,
        /// libgit2's message.
        message: String,
    },
    /// The patch does not apply (and does not apply in reverse either).
    #[error("patch {name} does not apply: {file}, hunk {hunk} ({header}): {message}")]
    DoesNotApply {
        /// Patch name.
        name: String,
        /// The file whose hunk failed (new path).
        file: String,
        /// 1-based hunk number within that file.
        hunk: usize,
        /// The hunk header, e.g. `@@ -208,7 +208,7 @@`.
        header: String,
        /// libgit2's message.
        message: String,
    },
    /// `patches edit`: the patch conflicts three-way; the merge with conflict markers is in the
    /// work tree and its stages in the index, nothing committed.
    #[error(
        "patch {name} conflicts: {file}, hunk {hunk} ({header}) does not apply, and the three-way merge conflicts in {}",
        files.iter().map(|f| format!("{} (markers at line {})", f.path, f.line)).collect::<Vec<_>>().join(", ")
    )]
    Conflict {
        /// Patch name.
        name: String,
        /// The file whose hunk did not apply plainly (new path).
        file: String,
        /// 1-based hunk number within that file.
        hunk: usize,
        /// The hunk header.
        header: String,
        /// The files left with conflict markers.
        files: Vec<ConflictedFile>,
    },
    /// Committing the applied patch failed.
    #[error("patch {name}: cannot commit in {tree}: {message}")]
    Commit {
        /// Patch name.
        name: String,
        /// Work tree.
        tree: PathBuf,
        /// libgit2's message.
        message: String,
    },
}

pub use crate::config::{catalogue_name, variant_name};

/// Reads the series' files from `dir` in order.
pub fn load_series(dir: &Path, names: &[String]) -> Result<Vec<PatchFile>, PatchError> {
    names
        .iter()
        .map(|name| {
            let path = dir.join(name);
            std::fs::read(&path)
                .map(|bytes| PatchFile {
                    name: name.clone(),
                    bytes,
                })
                .map_err(|e| PatchError::Read {
                    name: name.clone(),
                    path,
                    message: e.to_string(),
                })
        })
        .collect()
}

/// The patch-series sha256 (hex): sha256 over `"<name>\0<sha256 hex of file>\n"` for each patch in
/// order. It changes when a patch is added, removed, reordered, renamed or edited.
pub fn series_sha256(series: &[PatchFile]) -> String {
    let mut h = Sha256::new();
    for p in series {
        h.update(p.name.as_bytes());
        h.update([0u8]);
        h.update(p.sha256().as_bytes());
        h.update(b"\n");
    }
    hex::encode(h.finalize())
}

/// Parses the mail headers of a `git format-patch` file. Missing headers give empty strings.
pub fn parse_mail(bytes: &[u8]) -> MailHeader {
    let text = String::from_utf8_lossy(bytes);
    let mut lines = text.lines().peekable();
    let mut headers: Vec<(String, String)> = Vec::new();
    // Skip the mbox "From <sha> <date>" separator.
    if lines.peek().is_some_and(|l| l.starts_with("From ")) {
        lines.next();
    }
    for line in lines.by_ref() {
        if line.is_empty() {
            break;
        }
        if line.starts_with([' ', '\t']) {
            if let Some(last) = headers.last_mut() {
                last.1.push(' ');
                last.1.push_str(line.trim());
            }
            continue;
        }
        if let Some((k, v)) = line.split_once(':') {
            headers.push((k.trim().to_ascii_lowercase(), v.trim().to_string()));
        }
    }
    let mut body = String::new();
    for line in lines {
        if line == "---" || line.starts_with("diff --git ") {
            break;
        }
        body.push_str(line);
        body.push('\n');
    }
    let get = |k: &str| {
        headers
            .iter()
            .find(|(h, _)| h == k)
            .map(|(_, v)| v.clone())
            .unwrap_or_default()
    };
    let from = get("from");
    let (author_name, author_email) = match (from.find('<'), from.rfind('>')) {
        (Some(a), Some(b)) if a < b => (
            from[..a].trim().trim_matches('"').to_string(),
            from[a + 1..b].to_string(),
        ),
        _ => (from.clone(), String::new()),
    };
    let mut subject = get("subject");
    if subject.starts_with('[')
        && let Some(end) = subject.find(']')
    {
        subject = subject[end + 1..].trim().to_string();
    }
    let date =
        time::OffsetDateTime::parse(&get("date"), &time::format_description::well_known::Rfc2822)
            .ok()
            .map(|d| (d.unix_timestamp(), d.offset().whole_minutes() as i32));
    MailHeader {
        author_name,
        author_email,
        date,
        subject,
        body: body.trim().to_string(),
    }
}

/// A patch file as `git am` reads it. When the patch's own lines end in CRLF (its `diff --git`
/// lines do: `git format-patch` never writes that, a Windows `core.autocrlf` checkout of patches/
/// does), the CR of every line ending in CRLF is removed, as `git mailsplit` does by default
/// (git-mailsplit(1) `--keep-cr`, git-am(1) `am.keepcr`). Any other file is returned unchanged,
/// so a patch that changes CRLF lines of a CRLF file keeps them. Only the applied text changes:
/// [`PatchFile::sha256`] and [`series_sha256`] stay over the file's bytes as they are.
pub fn as_git_am_reads(bytes: &[u8]) -> Cow<'_, [u8]> {
    let crlf_headers = bytes
        .split_inclusive(|b| *b == b'\n')
        .find(|l| l.starts_with(b"diff --git "))
        .is_some_and(|l| l.ends_with(b"\r\n"));
    if !crlf_headers {
        return Cow::Borrowed(bytes);
    }
    let mut out = Vec::with_capacity(bytes.len());
    for line in bytes.split_inclusive(|b| *b == b'\n') {
        match line.strip_suffix(b"\r\n") {
            Some(l) => {
                out.extend_from_slice(l);
                out.push(b'\n');
            }
            None => out.extend_from_slice(line),
        }
    }
    Cow::Owned(out)
}

/// A patch file as `git am` reads it, ready for libgit2 to apply to `tree` (the tree it applies
/// to): its line endings as [`as_git_am_reads`] reads them, every file section without `a/`/`b/`
/// prefixes given them (a patch made with `diff.noprefix`; where the names are the same on both
/// sides, `tree` tells whether they carry equal prefixes instead: see `forms`), so that it
/// applies at the paths its author meant and not, as `git am -p1` would put it, one directory
/// off (said once in a warning); names with spaces quoted, which libgit2 needs.
///
/// Errors: [`PatchError::Unsupported`] for a copy (libgit2 would apply it as a rename), a binary
/// change without its data, or names `tree` cannot tell the prefixes of.
pub fn read_as_git_am<'a>(
    patch: &'a PatchFile,
    tree: &git2::Tree<'_>,
) -> Result<Cow<'a, [u8]>, PatchError> {
    use std::os::unix::ffi::OsStrExt;
    let unsupported = |r: forms::Refusal| PatchError::Unsupported {
        name: patch.name.clone(),
        message: r.0,
    };
    let has = |p: &[u8]| {
        tree.get_path(Path::new(std::ffi::OsStr::from_bytes(p)))
            .is_ok()
    };
    match as_git_am_reads(&patch.bytes) {
        Cow::Borrowed(b) => {
            let (out, bare) = forms::normalise(b, &has).map_err(unsupported)?;
            warn_bare(patch, bare);
            Ok(out)
        }
        Cow::Owned(b) => {
            let (out, bare) = forms::normalise(&b, &has).map_err(unsupported)?;
            warn_bare(patch, bare);
            Ok(Cow::Owned(out.into_owned()))
        }
    }
}

/// The warning for a patch whose paths had no prefixes.
fn warn_bare(patch: &PatchFile, bare: bool) {
    if bare {
        tracing::warn!(
            "patch {}: its paths have no a/ and b/ prefixes (made with diff.noprefix or --no-prefix); applied at the paths its diff --git lines name, where `git am` would strip their first directory: write it again with `git format-patch` (without --no-prefix), or with `occm-forge patches edit` and `patches export`",
            patch.name
        );
    }
}

/// How many lines of `bytes` end in CRLF.
fn crlf_lines(bytes: &[u8]) -> usize {
    bytes.windows(2).filter(|w| *w == b"\r\n").count()
}

/// Where a dry run stopped: the last delta and hunk libgit2 offered before failing.
#[derive(Default)]
struct Progress {
    file: String,
    hunk: usize,
    header: String,
}

fn check(repo: &Repository, diff: &Diff<'_>) -> Result<(), (Progress, String)> {
    let progress = RefCell::new(Progress::default());
    let result = {
        let mut opts = ApplyOptions::new();
        opts.check(true);
        opts.delta_callback(|d| {
            let mut p = progress.borrow_mut();
            p.file = d
                .and_then(|d| {
                    d.new_file()
                        .path()
                        .or(d.old_file().path())
                        .map(|p| p.display().to_string())
                })
                .unwrap_or_default();
            p.hunk = 0;
            p.header.clear();
            true
        });
        opts.hunk_callback(|h| {
            let mut p = progress.borrow_mut();
            p.hunk += 1;
            p.header = h
                .map(|h| String::from_utf8_lossy(h.header()).trim().to_string())
                .unwrap_or_default();
            true
        });
        repo.apply(diff, ApplyLocation::Both, Some(&mut opts))
    };
    result.map_err(|e| (progress.into_inner(), e.message().to_string()))
}

/// Applies `series` in order to the repository at `tree` and commits each patch
/// ([`apply_one`] each, stopping at the first failure).
///
/// Errors: as [`apply_one`]; a conflict is [`PatchError::DoesNotApply`] with nothing written.
pub fn apply_series(
    tree: &Path,
    series: &[PatchFile],
    fallback_time: i64,
) -> Result<Vec<AppliedPatch>, PatchError> {
    let repo = open(tree)?;
    series
        .iter()
        .map(|patch| apply_one(&repo, patch, fallback_time, false))
        .collect()
}

/// Opens the work tree at `tree` (errors as [`PatchError::Commit`]).
pub fn open(tree: &Path) -> Result<Repository, PatchError> {
    crate::base::git::open(tree).map_err(|e| PatchError::Commit {
        name: String::new(),
        tree: tree.to_path_buf(),
        message: e.message().to_string(),
    })
}

/// Applies one patch to the work tree of `repo` and commits it on HEAD.
///
/// Authors come from the patch's `From:`; author and committer time is the patch's `Date:`, or
/// `fallback_time` (seconds since the epoch) when it has none, so the resulting commit is
/// reproducible. The committer is `occm-forge <occm-forge@localhost>`. Line endings are read as
/// `git am` reads them, and paths without prefixes where their author meant them
/// ([`read_as_git_am`]). A patch whose hunks do not apply but whose reverse
/// does is [`PatchOutcome::AlreadyUpstream`] (nothing committed); one whose hunks do not apply
/// but that merges three-way from the blobs its `index` lines name is
/// [`PatchOutcome::AppliedThreeWay`].
///
/// Errors: [`PatchError::Unsupported`] for a copy or a binary change without its data
/// ([`read_as_git_am`]); [`PatchError::Parse`] for a file libgit2 cannot read as a diff;
/// [`PatchError::DoesNotApply`] naming the file and hunk (nothing of that patch is applied);
/// with `leave_conflicts`, a three-way merge that conflicts is [`PatchError::Conflict`] instead,
/// with the merge written to the work tree (conflict markers) and the index (three stages),
/// nothing committed; [`PatchError::Commit`] for git failures.
pub fn apply_one(
    repo: &Repository,
    patch: &PatchFile,
    fallback_time: i64,
    leave_conflicts: bool,
) -> Result<AppliedPatch, PatchError> {
    let head = repo
        .head()
        .and_then(|h| h.peel_to_tree())
        .map_err(|e| PatchError::Commit {
            name: patch.name.clone(),
            tree: repo.workdir().unwrap_or(repo.path()).to_path_buf(),
            message: e.message().to_string(),
        })?;
    let bytes = read_as_git_am(patch, &head)?;
    let mail = parse_mail(&bytes);
    let diff = Diff::from_buffer(&bytes).map_err(|e| PatchError::Parse {
        name: patch.name.clone(),
        message: e.message().to_string(),
    })?;
    if diff.deltas().len() == 0 {
        return Err(PatchError::Parse {
            name: patch.name.clone(),
            message: "it contains no diff".into(),
        });
    }
    let outcome = match check(repo, &diff) {
        Ok(()) => {
            repo.apply(&diff, ApplyLocation::Both, None)
                .map_err(|e| PatchError::DoesNotApply {
                    name: patch.name.clone(),
                    file: String::new(),
                    hunk: 0,
                    header: String::new(),
                    message: e.message().to_string(),
                })?;
            PatchOutcome::Applied(commit(repo, patch, &mail, fallback_time)?)
        }
        Err((progress, message)) => {
            let reverse = reverse_patch(&bytes).and_then(|r| Diff::from_buffer(&r).ok());
            if reverse.is_some_and(|rev| check(repo, &rev).is_ok()) {
                PatchOutcome::AlreadyUpstream
            } else {
                let on_conflict = if leave_conflicts {
                    OnConflict::LeaveMarkers(&patch.name)
                } else {
                    OnConflict::Stop
                };
                match three_way::apply(repo, &bytes, &diff, on_conflict) {
                    Ok(files) => PatchOutcome::AppliedThreeWay {
                        commit: commit(repo, patch, &mail, fallback_time)?,
                        files,
                    },
                    Err(e) => {
                        return Err(not_applied(patch, progress, message, e, leave_conflicts));
                    }
                }
            }
        }
    };
    Ok(AppliedPatch {
        name: patch.name.clone(),
        sha256: patch.sha256(),
        subject: mail.subject,
        outcome,
    })
}

/// The error for a patch that applies neither plainly nor three-way: where the plain apply
/// stopped, and why three-way did not help.
fn not_applied(
    patch: &PatchFile,
    progress: Progress,
    message: String,
    three_way: ThreeWayError,
    left_conflicts: bool,
) -> PatchError {
    let why = match three_way {
        ThreeWayError::Conflict(files) if left_conflicts => {
            return PatchError::Conflict {
                name: patch.name.clone(),
                file: progress.file,
                hunk: progress.hunk,
                header: progress.header,
                files,
            };
        }
        ThreeWayError::Conflict(files) => files
            .iter()
            .map(|f| format!("{}: conflicts three-way at line {}", f.path, f.line))
            .collect::<Vec<_>>()
            .join("; "),
        ThreeWayError::Unusable(why) => why,
    };
    // The file as it is on disk: a CRLF checkout is worth naming even when reading it as
    // `git am` does removed the CRs.
    let crlf = crlf_lines(&patch.bytes);
    let message = if crlf > 0 {
        format!(
            "{message} ({crlf} of its lines end in CRLF; if the file was checked out with Windows line endings, restore LF, e.g. `git config core.autocrlf false` and check patches/ out again)"
        )
    } else {
        format!("{message}; three-way: {why}")
    };
    PatchError::DoesNotApply {
        name: patch.name.clone(),
        file: progress.file,
        hunk: progress.hunk,
        header: progress.header,
        message,
    }
}

/// Commits the index on HEAD as `patch` (its author, date, subject and message, the committer
/// and times as [`apply_one`] sets them): `patches edit --continue` after a resolved conflict.
/// Returns the commit id (40 hex).
pub fn commit_index(
    repo: &Repository,
    patch: &PatchFile,
    fallback_time: i64,
) -> Result<String, PatchError> {
    // Only the mail headers are read: the diff is applied already.
    let bytes = as_git_am_reads(&patch.bytes);
    commit(repo, patch, &parse_mail(&bytes), fallback_time)
}

fn commit(
    repo: &Repository,
    patch: &PatchFile,
    mail: &MailHeader,
    fallback_time: i64,
) -> Result<String, PatchError> {
    let err = |e: git2::Error| PatchError::Commit {
        name: patch.name.clone(),
        tree: repo.workdir().unwrap_or(repo.path()).to_path_buf(),
        message: e.message().to_string(),
    };
    let (secs, offset) = mail.date.unwrap_or((fallback_time, 0));
    let when = Time::new(secs, offset);
    let name = if mail.author_name.is_empty() {
        "unknown"
    } else {
        &mail.author_name
    };
    let email = if mail.author_email.is_empty() {
        "unknown@invalid"
    } else {
        &mail.author_email
    };
    let author = Signature::new(name, email, &when).map_err(err)?;
    let committer = Signature::new("occm-forge", "occm-forge@localhost", &when).map_err(err)?;
    let mut index = repo.index().map_err(err)?;
    let tree_id = index.write_tree().map_err(err)?;
    let tree = repo.find_tree(tree_id).map_err(err)?;
    let parent = repo.head().and_then(|h| h.peel_to_commit()).map_err(err)?;
    let subject = if mail.subject.is_empty() {
        patch.name.as_str()
    } else {
        &mail.subject
    };
    let message = if mail.body.is_empty() {
        format!("{subject}\n")
    } else {
        format!("{subject}\n\n{}\n", mail.body)
    };
    let id = repo
        .commit(
            Some("HEAD"),
            &author,
            &committer,
            &message,
            &tree,
            &[&parent],
        )
        .map_err(err)?;
    Ok(id.to_string())
}

/// Builds the reverse of a unified diff (what `git apply -R` would apply): old and new sides of
/// every header, hunk range and line are swapped. Mail headers and the signature are dropped.
/// Returns `None` if the text is not a diff this function understands.
pub fn reverse_patch(bytes: &[u8]) -> Option<Vec<u8>> {
    let text = std::str::from_utf8(bytes).ok()?;
    let mut out = String::new();
    let mut lines = text.split_inclusive('\n').peekable();
    // Skip everything before the first file header.
    while lines.peek().is_some_and(|l| !l.starts_with("diff --git ")) {
        lines.next();
    }
    lines.peek()?;
    let swap_prefix = |l: &str, from: &str, to: &str| format!("{to}{}", &l[from.len()..]);
    while let Some(line) = lines.next() {
        if let Some(rest) = line.strip_prefix("diff --git ") {
            let rest = rest.trim_end_matches('\n');
            let (a, b) = rest.split_once(" b/")?;
            out.push_str(&format!("diff --git a/{} b/{}\n", b, a.strip_prefix("a/")?));
        } else if let Some(old) = line.strip_prefix("--- ") {
            let new = lines.next()?.strip_prefix("+++ ")?;
            let new_as_old = new
                .strip_prefix("b/")
                .map(|p| format!("a/{p}"))
                .unwrap_or_else(|| new.to_string());
            let old_as_new = old
                .strip_prefix("a/")
                .map(|p| format!("b/{p}"))
                .unwrap_or_else(|| old.to_string());
            out.push_str(&format!("--- {new_as_old}+++ {old_as_new}"));
        } else if line.starts_with("@@ ") {
            let (header, old_count, new_count) = reverse_hunk_header(line)?;
            out.push_str(&header);
            // Copy exactly the hunk's lines, swapping + and -.
            let (mut old_left, mut new_left) = (new_count, old_count);
            while old_left > 0 || new_left > 0 {
                let l = lines.next()?;
                match l.as_bytes().first() {
                    Some(b' ') | Some(b'\n') => {
                        old_left = old_left.checked_sub(1)?;
                        new_left = new_left.checked_sub(1)?;
                        out.push_str(l);
                    }
                    Some(b'+') => {
                        old_left = old_left.checked_sub(1)?;
                        out.push_str(&swap_prefix(l, "+", "-"));
                    }
                    Some(b'-') => {
                        new_left = new_left.checked_sub(1)?;
                        out.push_str(&swap_prefix(l, "-", "+"));
                    }
                    Some(b'\\') => out.push_str(l),
                    _ => return None,
                }
            }
            while lines.peek().is_some_and(|l| l.starts_with('\\')) {
                out.push_str(lines.next()?);
            }
        } else if let Some(m) = line.strip_prefix("new file mode ") {
            out.push_str(&format!("deleted file mode {m}"));
        } else if let Some(m) = line.strip_prefix("deleted file mode ") {
            out.push_str(&format!("new file mode {m}"));
        } else if let Some(ids) = line.strip_prefix("index ") {
            let (range, mode) = ids
                .split_once(' ')
                .map(|(r, m)| (r, format!(" {m}")))
                .unwrap_or((ids.trim_end(), "\n".to_string()));
            let (a, b) = range.split_once("..")?;
            out.push_str(&format!("index {}..{}{}", b.trim_end(), a, mode));
        } else if let Some(m) = line.strip_prefix("old mode ") {
            out.push_str(&format!("new mode {m}"));
        } else if let Some(m) = line.strip_prefix("new mode ") {
            out.push_str(&format!("old mode {m}"));
        } else if let Some(p) = line.strip_prefix("rename from ") {
            out.push_str(&format!("rename to {p}"));
        } else if let Some(p) = line.strip_prefix("rename to ") {
            out.push_str(&format!("rename from {p}"));
        } else if line.starts_with("-- ") || line == "--\n" {
            break; // format-patch signature
        } else {
            out.push_str(line);
        }
    }
    Some(out.into_bytes())
}

/// `@@ -a,b +c,d @@ ctx` → (`@@ -c,d +a,b @@ ctx`, b, d).
fn reverse_hunk_header(line: &str) -> Option<(String, usize, usize)> {
    let rest = line.strip_prefix("@@ -")?;
    let (ranges, tail) = rest.split_once(" @@")?;
    let (old, new) = ranges.split_once(" +")?;
    let count =
        |r: &str| -> Option<usize> { r.split_once(',').map_or(Some(1), |(_, n)| n.parse().ok()) };
    Some((
        format!("@@ -{new} +{old} @@{tail}"),
        count(old)?,
        count(new)?,
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    const MAIL: &str = r#"From 1234567890abcdef1234567890abcdef12345678 Mon Sep 17 00:00:00 2001
From: Jane Doe <jane@example.org>
Date: Sun, 29 Nov 2026 10:00:00 +0100
Subject: [PATCH 2/4] openstack: treat a missing server
 by name as InstanceNotFound

Why it matters.

Fixes: #3114
---
 a.go | 2 +-

diff --git a/a.go b/a.go
index 1111111..2222222 100644
--- a/a.go
+++ b/a.go
@@ -1,3 +1,3 @@
 package a
-var X = 1
+var X = 2
 // end
-- 
2.39.5
"#;

    #[test]
    fn parses_format_patch_headers() {
        let m = parse_mail(MAIL.as_bytes());
        assert_eq!(m.author_name, "Jane Doe");
        assert_eq!(m.author_email, "jane@example.org");
        assert_eq!(
            m.subject,
            "openstack: treat a missing server by name as InstanceNotFound"
        );
        assert_eq!(m.date, Some((1_795_942_800, 60)));
        assert_eq!(m.body, "Why it matters.\n\nFixes: #3114");
    }

    #[test]
    fn reverses_a_patch() {
        let r = String::from_utf8(reverse_patch(MAIL.as_bytes()).unwrap()).unwrap();
        assert_eq!(
            r,
            "diff --git a/a.go b/a.go\nindex 2222222..1111111 100644\n--- a/a.go\n+++ b/a.go\n@@ -1,3 +1,3 @@\n package a\n+var X = 1\n-var X = 2\n // end\n"
        );
    }

    #[test]
    fn reverses_a_new_file() {
        let p = "diff --git a/n.go b/n.go\nnew file mode 100644\nindex 0000000..3333333\n--- /dev/null\n+++ b/n.go\n@@ -0,0 +1,2 @@\n+package n\n+-- not a signature\n";
        let r = String::from_utf8(reverse_patch(p.as_bytes()).unwrap()).unwrap();
        assert_eq!(
            r,
            "diff --git a/n.go b/n.go\ndeleted file mode 100644\nindex 3333333..0000000\n--- a/n.go\n+++ /dev/null\n@@ -1,2 +0,0 @@\n-package n\n--- not a signature\n"
        );
    }

    #[test]
    fn crlf_patches_are_read_as_git_am_reads_them() {
        let crlf = MAIL.replace('\n', "\r\n");
        assert_eq!(as_git_am_reads(crlf.as_bytes()), MAIL.as_bytes());
        // An LF patch whose content lines carry CRs (a change to a CRLF file) is left alone.
        let content = MAIL.replace("-var X = 1\n", "-var X = 1\r\n");
        assert!(matches!(
            as_git_am_reads(content.as_bytes()),
            Cow::Borrowed(b) if b == content.as_bytes()
        ));
    }

    #[test]
    fn series_hash_changes_with_order_and_content() {
        let a = PatchFile {
            name: "a.patch".into(),
            bytes: b"1".to_vec(),
        };
        let b = PatchFile {
            name: "b.patch".into(),
            bytes: b"2".to_vec(),
        };
        let ab = series_sha256(&[a.clone(), b.clone()]);
        assert_ne!(ab, series_sha256(&[b.clone(), a.clone()]));
        let b2 = PatchFile {
            name: "b.patch".into(),
            bytes: b"3".to_vec(),
        };
        assert_ne!(ab, series_sha256(&[a, b2]));
    }
}
