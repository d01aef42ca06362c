//! Refreshing the patch series across upstream releases (`patches edit` and `patches export`),
//! the workflow of Debian's `gbp pq import` / `export` for one Kubernetes minor.
//!
//! [`edit`] lays the minor's pinned upstream tag out as a branch `occm-forge/<minor>` in a work
//! tree the user can `cd` into (default `<cache>/edit/<minor>`), one commit per patch with the
//! author, date, subject and message of the patch, applied as the build applies them (plainly,
//! else three-way). It stops at the first patch that conflicts, with the conflict markers in
//! the files and the three stages in the index, as `git am -3` leaves them; after the user
//! resolves, [`edit`] with `resume` commits the resolution as that patch (or takes the user's
//! own commit) and goes on. The state lives in `.git/occm-forge-edit.json` of the work tree.
//!
//! [`export`] writes the commits back to `patches_dir` in `git format-patch` form and updates
//! images.toml where a minor needs its own variant of a patch shared with other minors.

mod edit;
mod export;
mod render;

use std::path::{Path, PathBuf};

use crate::config::Minor;
use crate::pipeline::patches::ConflictedFile;

pub use edit::{EditReport, EditRequest, edit};
pub use export::{ExportReport, ExportRequest, ExportedPatch, Written, export};
pub use render::{render_edit, render_export};

/// Where [`edit`] keeps its state, relative to the work tree's `.git`.
const STATE_FILE: &str = "occm-forge-edit.json";

/// The branch [`edit`] lays the series out on: `occm-forge/<minor>`.
pub fn branch(minor: Minor) -> String {
    format!("occm-forge/{minor}")
}

/// The default work tree of [`edit`]: `<cache>/edit/<minor>`.
pub fn default_dir(cache_dir: &Path, minor: Minor) -> PathBuf {
    cache_dir.join("edit").join(minor.to_string())
}

/// How far one patch of an edit has come.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "kebab-case", tag = "step")]
pub enum Step {
    /// Not applied yet (after a stop).
    Pending,
    /// Its hunks applied as they are.
    Applied,
    /// Applied three-way; one note per file.
    ThreeWay {
        /// What was merged, per file.
        files: Vec<String>,
    },
    /// Already in upstream's tree: no commit (drop it from the minor's series).
    AlreadyUpstream,
    /// Stopped here: the merge conflicts in these files.
    Conflict {
        /// The files left with conflict markers.
        files: Vec<ConflictedFile>,
    },
    /// Its conflict was resolved and committed by the user.
    Resolved,
}

impl Step {
    /// Whether the patch has a commit on the branch.
    pub fn committed(&self) -> bool {
        matches!(self, Step::Applied | Step::ThreeWay { .. } | Step::Resolved)
    }
}

/// One patch of an edit.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct EditedPatch {
    /// File name in `patches_dir` (the minor's series entry when [`edit`] read it).
    pub name: String,
    /// sha256 (hex) of the file when [`edit`] read it: a file whose bytes differ from this and
    /// from what [`export`] last wrote was edited by hand since.
    pub sha256: String,
    /// How far it has come.
    #[serde(flatten)]
    pub step: Step,
    /// What [`export`] last wrote for it: the series entry and the file's sha256. A series
    /// that has these (or the ones the edit read) is this edit's series.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub exported: Option<Exported>,
}

/// A patch file as [`export`] wrote it.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Exported {
    /// The series entry (a variant's name when one was written).
    pub name: String,
    /// sha256 (hex) of the file.
    pub sha256: String,
}

impl EditedPatch {
    /// Whether `name` with contents `sha256` is this patch as the edit read it or as
    /// [`export`] last wrote it.
    pub fn is(&self, name: &str, sha256: &str) -> bool {
        (self.name == name && self.sha256 == sha256)
            || self
                .exported
                .as_ref()
                .is_some_and(|e| e.name == name && e.sha256 == sha256)
    }

    /// Whether `name` is this patch's series entry (as read or as exported).
    pub fn named(&self, name: &str) -> bool {
        self.name == name || self.exported.as_ref().is_some_and(|e| e.name == name)
    }
}

/// The state of an edit, `.git/occm-forge-edit.json` in its work tree.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct EditState {
    /// The Kubernetes minor.
    pub minor: Minor,
    /// The images.toml the series comes from, absolute.
    pub config: PathBuf,
    /// Upstream tag, e.g. `v1.36.0`.
    pub upstream_tag: String,
    /// The commit the tag points at (40 hex): the branch's base.
    pub base: String,
    /// The base's committer time, seconds since the epoch (the time of a patch without `Date:`).
    pub base_time: i64,
    /// The series, in order.
    pub patches: Vec<EditedPatch>,
    /// The commit HEAD was at when the edit stopped at a conflict (40 hex).
    pub stopped_head: Option<String>,
}

impl EditState {
    fn path(dir: &Path) -> PathBuf {
        dir.join(".git").join(STATE_FILE)
    }

    /// Reads the state of the edit in `dir`; `None` when there is none.
    pub fn read(dir: &Path) -> Option<EditState> {
        let bytes = std::fs::read(Self::path(dir)).ok()?;
        serde_json::from_slice(&bytes).ok()
    }

    fn write(&self, dir: &Path) -> Result<(), RefreshError> {
        let path = Self::path(dir);
        let json = serde_json::to_vec_pretty(self).expect("the state serialises");
        crate::base::util::write_file_atomically(&path, &json).map_err(|e| RefreshError::Io {
            path,
            message: e.to_string(),
        })
    }

    /// The patch the edit stopped at, if it did.
    pub fn stopped_at(&self) -> Option<usize> {
        self.patches
            .iter()
            .position(|p| matches!(p.step, Step::Conflict { .. }))
    }
}

/// What `patches edit` and `patches export` refuse, and their failures. Every refusal is one
/// line naming the work tree, file or patch; nothing is written to `patches_dir` or images.toml.
#[derive(Debug, thiserror::Error)]
pub enum RefreshError {
    /// `edit` without `--continue` where an edit is under way.
    #[error(
        "{dir}: an edit of {minor} is under way ({done} of {total} patches committed{stopped}): go on with `occm-forge patches edit --k8s {minor} --continue`, write it back with `occm-forge patches export --k8s {minor}`, or start again with `--restart`"
    )]
    InProgress {
        /// The work tree.
        dir: PathBuf,
        /// The minor.
        minor: Minor,
        /// Patches with a commit.
        done: usize,
        /// Patches in the series.
        total: usize,
        /// `; stopped at <patch>` or empty.
        stopped: String,
    },
    /// `--continue` or `export` where there is no edit.
    #[error(
        "{dir}: no edit of {minor} here: start one with `occm-forge patches edit --k8s {minor}`"
    )]
    NoEdit {
        /// The work tree.
        dir: PathBuf,
        /// The minor.
        minor: Minor,
    },
    /// `edit` stopped at a patch that conflicts or does not apply: the reason (the patch, file
    /// and hunk). The work tree holds the markers; the report says what to do next.
    #[error("{0}")]
    Stopped(String),
    /// `--continue` where the edit is not stopped at a conflict.
    #[error(
        "{dir}: the edit of {minor} is not stopped at a conflict: write it back with `occm-forge patches export --k8s {minor}`"
    )]
    NotStopped {
        /// The work tree.
        dir: PathBuf,
        /// The minor.
        minor: Minor,
    },
    /// `--continue` where the resolution changes nothing.
    #[error(
        "{dir}: the resolution of patch {patch} changes nothing: if upstream has its change, drop it from the minor's series in images.toml and start again with `--restart`"
    )]
    Empty {
        /// The work tree.
        dir: PathBuf,
        /// The patch.
        patch: String,
    },
    /// A conflict is not resolved yet.
    #[error(
        "{dir}: {path}{at}: the conflict of patch {patch} is not resolved: edit the file, `git add {path}`, then `occm-forge patches edit --k8s {minor} --continue`"
    )]
    Unresolved {
        /// The work tree.
        dir: PathBuf,
        /// The minor.
        minor: Minor,
        /// The patch.
        patch: String,
        /// The file.
        path: String,
        /// ` (conflict markers at line N)` or empty.
        at: String,
    },
    /// Uncommitted changes in the work tree.
    #[error(
        "{dir}: {path} has changes that are not committed ({status}): {}",
        dirty_remedy(.status, .path)
    )]
    Dirty {
        /// The work tree.
        dir: PathBuf,
        /// The first changed path.
        path: String,
        /// What changed, as `git status` says it.
        status: String,
    },
    /// The branch is not the edit's base plus one commit per patch, or images.toml pins
    /// another commit now.
    #[error("{dir}: {message}")]
    OtherBase {
        /// The work tree.
        dir: PathBuf,
        /// What does not match.
        message: String,
    },
    /// A patch file changed since `edit` read it (or `export` wrote it).
    #[error(
        "{path}: edited by hand since `occm-forge patches edit` read it (sha256 {was}…, now {now}…): keep it with `occm-forge patches edit --k8s {minor} --restart`, or restore it (`git checkout -- {path}`) and export again"
    )]
    HandEdited {
        /// The patch file.
        path: PathBuf,
        /// The minor.
        minor: Minor,
        /// First 12 hex of the sha256 the edit recorded.
        was: String,
        /// First 12 hex of the file's sha256 now.
        now: String,
    },
    /// images.toml's series of the minor is not the one the edit laid out.
    #[error(
        "{config}: the series of {minor} changed since `occm-forge patches edit` laid it out ({detail}): start again with `occm-forge patches edit --k8s {minor} --restart`"
    )]
    SeriesChanged {
        /// images.toml.
        config: PathBuf,
        /// The minor.
        minor: Minor,
        /// What changed.
        detail: String,
    },
    /// Another run holds the digest manifest's run lock.
    #[error("{path}: another occm-forge run ({holder}) is using it; export when it has finished")]
    Busy {
        /// The digest manifest.
        path: PathBuf,
        /// Who holds the lock.
        holder: String,
    },
    /// `--dir` is not a directory, or is a directory that holds something other than an edit
    /// (laying the series out there would replace its files).
    #[error("{dir}: {why}: pass another --dir, or remove it")]
    DirInUse {
        /// The path given.
        dir: PathBuf,
        /// What is there.
        why: String,
    },
    /// A git operation (rebase, merge, cherry-pick, am) is under way in the work tree.
    #[error(
        "{dir}: a git {operation} is under way: finish it (`git {operation} --continue`) or abort it (`git {operation} --abort`) first"
    )]
    GitBusy {
        /// The work tree.
        dir: PathBuf,
        /// `rebase`, `merge`, `cherry-pick`, `revert` or `am`.
        operation: &'static str,
    },
    /// A commit of the branch changes nothing: it would be an empty patch.
    #[error(
        "{dir}: commit {commit} (patch {patch}) changes nothing: if upstream has its change, drop the patch from the minor's series in images.toml and start again with `--restart`; else amend the commit"
    )]
    EmptyCommit {
        /// The work tree.
        dir: PathBuf,
        /// The patch.
        patch: String,
        /// First 12 hex of the commit.
        commit: String,
    },
    /// The commits on the branch are not in the series' order.
    #[error(
        "{dir}: the commits are not in the series' order (branch: {branch}; series: {series}): put them back in order (`git rebase -i`), or change the order in images.toml and start again with `--restart`"
    )]
    Reordered {
        /// The work tree.
        dir: PathBuf,
        /// The patch subjects in branch order.
        branch: String,
        /// The patch subjects in series order.
        series: String,
    },
    /// `git format-patch` of a commit does not give the commit back when read as the build
    /// reads a patch (e.g. a message line that starts a diff, such as `---` or `diff --git`).
    #[error(
        "{dir}: commit {commit} (patch {patch}) cannot be written as a patch that gives it back: {why}; reword the commit (`git rebase -i`, reword) and export again"
    )]
    NotReproducible {
        /// The work tree.
        dir: PathBuf,
        /// The patch.
        patch: String,
        /// First 12 hex of the commit.
        commit: String,
        /// What differs.
        why: String,
    },
    /// images.toml does not have the minor, or cannot be used.
    #[error(transparent)]
    Config(#[from] crate::config::ConfigError),
    /// A patch does not apply at all (not even three-way with markers).
    #[error(transparent)]
    Patch(#[from] crate::pipeline::patches::PatchError),
    /// Fetching or checking out upstream failed.
    #[error(transparent)]
    Source(#[from] crate::pipeline::source::SourceError),
    /// A git operation in the work tree failed.
    #[error("{dir}: {message}")]
    Git {
        /// The work tree.
        dir: PathBuf,
        /// What failed.
        message: String,
    },
    /// A file could not be read or written.
    #[error("{path}: {message}")]
    Io {
        /// The file.
        path: PathBuf,
        /// The I/O error.
        message: String,
    },
}

/// What to do about an uncommitted change, by its `git status`.
fn dirty_remedy(status: &str, path: &str) -> String {
    match status {
        "untracked" => format!(
            "`git add {path}` if it belongs to the patch, else remove it (`rm {path}`, or `git clean -n` to list all such files)"
        ),
        "staged, not committed" => format!(
            "fold it into the patch's commit (`git commit --amend`) or unstage and discard it (`git restore --staged --worktree {path}`)"
        ),
        _ => format!(
            "commit it (`git add {path}; git commit --amend` folds it into the last patch) or discard it (`git checkout -- {path}`)"
        ),
    }
}

impl RefreshError {
    /// The exit status: 4 for a patch that does not apply (as `build`), 3 for the source, 1 for
    /// git and I/O failures, 2 for everything refused.
    pub fn exit_code(&self) -> u8 {
        match self {
            RefreshError::Patch(_) | RefreshError::Stopped(_) => 4,
            RefreshError::Source(_) => 3,
            RefreshError::Git { .. } | RefreshError::Io { .. } => 1,
            _ => 2,
        }
    }

    fn git(dir: &Path) -> impl Fn(git2::Error) -> RefreshError + '_ {
        move |e| RefreshError::Git {
            dir: dir.to_path_buf(),
            message: e.message().to_string(),
        }
    }
}

impl crate::pipeline::Failure for RefreshError {
    fn exit_code(&self) -> u8 {
        RefreshError::exit_code(self)
    }

    fn context(&self) -> Option<&'static str> {
        Some("patches")
    }
}

crate::command_failure!(RefreshError);
