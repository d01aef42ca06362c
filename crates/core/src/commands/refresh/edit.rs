//! `patches edit`: the series laid out as commits on the upstream tag, stopping at a conflict.

use std::path::{Path, PathBuf};

use git2::{Repository, Status, StatusOptions};

use super::{EditState, EditedPatch, RefreshError, Step, branch};
use crate::config::{Config, Minor};
use crate::pipeline::patches::{self, PatchError, PatchFile, PatchOutcome};
use crate::pipeline::source::{self, SourceRequest};

/// What [`edit`] needs.
#[derive(Debug, Clone)]
pub struct EditRequest<'a> {
    /// images.toml, loaded.
    pub config: &'a Config,
    /// The minor whose series is laid out.
    pub minor: Minor,
    /// `--source`: fetch upstream from here instead of images.toml `upstream`.
    pub source: Option<&'a str>,
    /// occm-forge cache directory (the object store the work tree borrows from).
    pub cache_dir: &'a Path,
    /// The work tree (created; an existing one is replaced only with `restart`).
    pub dir: &'a Path,
    /// `--continue`: commit the resolved conflict and go on.
    pub resume: bool,
    /// `--restart`: discard an edit under way in `dir` and lay the series out again.
    pub restart: bool,
}

/// Where an edit stands: written as the command's result (`--json` serialises it).
#[derive(Debug, Clone, serde::Serialize)]
pub struct EditReport {
    /// The work tree.
    pub dir: PathBuf,
    /// The branch, `occm-forge/<minor>`.
    pub branch: String,
    /// The edit's state (minor, tag, base, each patch's step).
    #[serde(flatten)]
    pub state: EditState,
    /// Why it stopped (the patch, file and hunk), when it did.
    pub stopped: Option<String>,
    /// The stopped patch's file, when it stopped.
    pub stopped_patch: Option<PathBuf>,
}

/// Lays the minor's series out in `req.dir` (or, with `resume`, goes on after a conflict).
///
/// Errors: [`RefreshError::InProgress`] for an edit under way without `restart` or `resume`;
/// [`RefreshError::Source`] when the tag cannot be fetched or moved; with `resume`,
/// [`RefreshError::NoEdit`], [`RefreshError::Unresolved`], [`RefreshError::Dirty`],
/// [`RefreshError::HandEdited`] and [`RefreshError::SeriesChanged`]. A conflict is not an error:
/// the report says where it stopped.
pub fn edit(req: &EditRequest<'_>) -> Result<EditReport, RefreshError> {
    if req.resume {
        return resume(req);
    }
    let under_way = EditState::read(req.dir);
    if let Some(state) = &under_way
        && !req.restart
    {
        return Err(RefreshError::InProgress {
            dir: req.dir.to_path_buf(),
            minor: state.minor,
            done: state.patches.iter().filter(|p| p.step.committed()).count(),
            total: state.patches.len(),
            stopped: state
                .stopped_at()
                .map(|i| format!("; stopped at {}", state.patches[i].name))
                .unwrap_or_default(),
        });
    }
    check_dir(req.dir, under_way.is_some())?;
    let m = req.config.minor(req.minor)?;
    let url = req.config.fetch_url(req.source);
    let config_name = req.config.path.display().to_string();
    let tree = source::checkout(&SourceRequest {
        url: &url,
        tag: &m.upstream_tag,
        pinned_commit: &m.commit,
        config: &config_name,
        cache_dir: req.cache_dir,
        tree_dir: req.dir,
    })?;
    let repo = crate::base::git::open(req.dir).map_err(RefreshError::git(req.dir))?;
    lay_out_branch(&repo, req.dir, req.minor, &m.upstream_tag, &tree.commit)?;
    let series = patches::load_series(&req.config.patches_dir, &m.patches)?;
    let mut state = EditState {
        minor: req.minor,
        config: std::fs::canonicalize(&req.config.path).unwrap_or_else(|_| req.config.path.clone()),
        upstream_tag: m.upstream_tag.clone(),
        base: tree.commit.clone(),
        base_time: tree.commit_time,
        patches: series
            .iter()
            .map(|p| EditedPatch {
                name: p.name.clone(),
                sha256: p.sha256(),
                step: Step::Pending,
                exported: None,
            })
            .collect(),
        stopped_head: None,
    };
    state.write(req.dir)?;
    apply_from(
        &repo,
        req.dir,
        &req.config.patches_dir,
        &mut state,
        &series,
        0,
    )
}

/// `dir` may be laid out: absent, an empty directory, or one holding an edit (`--restart`).
/// Anything else would have its files replaced by upstream's.
fn check_dir(dir: &Path, has_edit: bool) -> Result<(), RefreshError> {
    let in_use = |why: String| {
        Err(RefreshError::DirInUse {
            dir: dir.to_path_buf(),
            why,
        })
    };
    match std::fs::metadata(dir) {
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
        Err(e) => in_use(format!("cannot read it ({e})")),
        Ok(m) if !m.is_dir() => in_use("not a directory".into()),
        Ok(_) if has_edit => Ok(()),
        Ok(_) => match std::fs::read_dir(dir).map(|mut e| e.next().is_none()) {
            Ok(true) => Ok(()),
            Ok(false) => in_use(
                "a directory with files in it and no `occm-forge patches edit` under way (laying the series out there would replace them)"
                    .into(),
            ),
            Err(e) => in_use(format!("cannot read it ({e})")),
        },
    }
}

/// Refuses a work tree where git is in the middle of a rebase, merge, cherry-pick, revert or am.
pub(super) fn check_git_idle(repo: &Repository, dir: &Path) -> Result<(), RefreshError> {
    use git2::RepositoryState as S;
    let operation = match repo.state() {
        S::Merge => "merge",
        S::Revert | S::RevertSequence => "revert",
        S::CherryPick | S::CherryPickSequence => "cherry-pick",
        S::Rebase | S::RebaseInteractive | S::RebaseMerge => "rebase",
        S::ApplyMailbox | S::ApplyMailboxOrRebase => "am",
        S::Clean | S::Bisect => return Ok(()),
    };
    Err(RefreshError::GitBusy {
        dir: dir.to_path_buf(),
        operation,
    })
}

/// Refuses an edit whose base images.toml no longer pins (a new `pin` since the edit).
pub(super) fn check_pin(
    config: &Config,
    state: &EditState,
    dir: &Path,
) -> Result<(), RefreshError> {
    let minor = state.minor;
    let m = config.minor(minor)?;
    if m.commit == state.base {
        return Ok(());
    }
    Err(RefreshError::OtherBase {
        dir: dir.to_path_buf(),
        message: format!(
            "the edit is on {} ({}), but {} pins {minor} to {} ({}) now: lay it out on the new tag with `occm-forge patches edit --k8s {minor} --restart`",
            state.upstream_tag,
            &state.base[..12],
            config.path.display(),
            m.upstream_tag,
            &m.commit[..12.min(m.commit.len())]
        ),
    })
}

/// The base as branch `occm-forge/<minor>` (HEAD) and as tag `<upstream_tag>`, so that
/// `git log <tag>..` lists the series.
fn lay_out_branch(
    repo: &Repository,
    dir: &Path,
    minor: Minor,
    tag: &str,
    base: &str,
) -> Result<(), RefreshError> {
    let git = RefreshError::git(dir);
    let commit = git2::Oid::from_str(base)
        .and_then(|id| repo.find_commit(id))
        .map_err(&git)?;
    let name = branch(minor);
    repo.branch(&name, &commit, true).map_err(&git)?;
    repo.set_head(&format!("refs/heads/{name}")).map_err(&git)?;
    repo.reference(
        &format!("refs/tags/{tag}"),
        commit.id(),
        true,
        "occm-forge patches edit",
    )
    .map_err(&git)?;
    Ok(())
}

/// Applies `series[start..]`, recording each step; stops at the first patch that conflicts or
/// does not apply at all (the user resolves it, or applies it by hand, then `--continue`).
fn apply_from(
    repo: &Repository,
    dir: &Path,
    patches_dir: &Path,
    state: &mut EditState,
    series: &[PatchFile],
    start: usize,
) -> Result<EditReport, RefreshError> {
    let mut stopped = None;
    let mut stopped_patch = None;
    for (i, patch) in series.iter().enumerate().skip(start) {
        let step = match patches::apply_one(repo, patch, state.base_time, true) {
            Ok(applied) => match applied.outcome {
                PatchOutcome::Applied(_) => Step::Applied,
                PatchOutcome::AppliedThreeWay { files, .. } => Step::ThreeWay { files },
                PatchOutcome::AlreadyUpstream => Step::AlreadyUpstream,
            },
            Err(e @ (PatchError::Conflict { .. } | PatchError::DoesNotApply { .. })) => {
                let files = match &e {
                    PatchError::Conflict { files, .. } => files.clone(),
                    _ => Vec::new(),
                };
                state.stopped_head = Some(head(repo, dir)?);
                state.patches[i].step = Step::Conflict { files };
                stopped = Some(e.to_string());
                stopped_patch = Some(patches_dir.join(&patch.name));
                break;
            }
            Err(e) => return Err(e.into()),
        };
        state.patches[i].step = step;
    }
    if stopped.is_none() {
        state.stopped_head = None;
    }
    state.write(dir)?;
    Ok(EditReport {
        dir: dir.to_path_buf(),
        branch: branch(state.minor),
        state: state.clone(),
        stopped,
        stopped_patch,
    })
}

fn head(repo: &Repository, dir: &Path) -> Result<String, RefreshError> {
    let commit = repo
        .head()
        .and_then(|h| h.peel_to_commit())
        .map_err(RefreshError::git(dir))?;
    Ok(commit.id().to_string())
}

/// `--continue`: the stopped patch's resolution becomes its commit, then the rest is applied.
fn resume(req: &EditRequest<'_>) -> Result<EditReport, RefreshError> {
    let dir = req.dir;
    let no_edit = || RefreshError::NoEdit {
        dir: dir.to_path_buf(),
        minor: req.minor,
    };
    let mut state = EditState::read(dir)
        .filter(|s| s.minor == req.minor)
        .ok_or_else(no_edit)?;
    let Some(i) = state.stopped_at() else {
        return Err(RefreshError::NotStopped {
            dir: dir.to_path_buf(),
            minor: req.minor,
        });
    };
    check_pin(req.config, &state, dir)?;
    let series = current_series(req.config, &state)?;
    let repo = crate::base::git::open(dir).map_err(RefreshError::git(dir))?;
    check_git_idle(&repo, dir)?;
    check_resolved(&repo, dir, &state, i)?;
    let head_now = head(&repo, dir)?;
    let stopped = state.stopped_head.clone().unwrap_or_default();
    if head_now == stopped {
        if let Some((path, status)) = first_change(&repo, dir, Changes::Unstaged)? {
            return Err(RefreshError::Dirty {
                dir: dir.to_path_buf(),
                path,
                status,
            });
        }
        let index_tree = repo
            .index()
            .and_then(|mut i| i.write_tree())
            .map_err(RefreshError::git(dir))?;
        let head_tree = repo
            .head()
            .and_then(|h| h.peel_to_tree())
            .map_err(RefreshError::git(dir))?;
        if index_tree == head_tree.id() {
            return Err(RefreshError::Empty {
                dir: dir.to_path_buf(),
                patch: state.patches[i].name.clone(),
            });
        }
        patches::commit_index(&repo, &series[i], state.base_time)?;
    } else {
        let parent = repo
            .head()
            .and_then(|h| h.peel_to_commit())
            .map(|c| (c.parent_count(), c.parent_id(0).ok()))
            .map_err(RefreshError::git(dir))?;
        if parent.0 != 1 || parent.1.map(|p| p.to_string()) != Some(stopped.clone()) {
            return Err(RefreshError::OtherBase {
                dir: dir.to_path_buf(),
                message: format!(
                    "HEAD moved by more than the one commit of patch {} since the edit stopped at {}: reset to it (`git reset --soft {}`) and commit the resolution once",
                    state.patches[i].name,
                    &stopped[..12.min(stopped.len())],
                    &stopped[..12.min(stopped.len())]
                ),
            });
        }
        if let Some((path, status)) = first_change(&repo, dir, Changes::Any)? {
            return Err(RefreshError::Dirty {
                dir: dir.to_path_buf(),
                path,
                status,
            });
        }
    }
    state.patches[i].step = Step::Resolved;
    apply_from(
        &repo,
        dir,
        &req.config.patches_dir,
        &mut state,
        &series,
        i + 1,
    )
}

/// The series as images.toml and patches_dir have it now, checked to be the one the edit laid
/// out: the same names in the same order, and files with the bytes the edit recorded.
pub(super) fn current_series(
    config: &Config,
    state: &EditState,
) -> Result<Vec<PatchFile>, RefreshError> {
    let m = config.minor(state.minor)?;
    let same = m.patches.len() == state.patches.len()
        && m.patches
            .iter()
            .zip(&state.patches)
            .all(|(n, p)| p.named(n));
    if !same {
        return Err(RefreshError::SeriesChanged {
            config: config.path.clone(),
            minor: state.minor,
            detail: format!(
                "it lists {}, the edit has {}",
                m.patches.join(", "),
                state
                    .patches
                    .iter()
                    .map(|p| p.name.as_str())
                    .collect::<Vec<_>>()
                    .join(", ")
            ),
        });
    }
    let series = patches::load_series(&config.patches_dir, &m.patches)?;
    for (file, recorded) in series.iter().zip(&state.patches) {
        let now = file.sha256();
        if !recorded.is(&file.name, &now) {
            let was = match &recorded.exported {
                Some(e) if e.name == file.name => &e.sha256,
                _ => &recorded.sha256,
            };
            return Err(RefreshError::HandEdited {
                path: config.patches_dir.join(&file.name),
                minor: state.minor,
                was: was[..12].to_string(),
                now: now[..12].to_string(),
            });
        }
    }
    Ok(series)
}

/// No conflicted index entry and no conflict marker left in the files of patch `i`'s conflict.
fn check_resolved(
    repo: &Repository,
    dir: &Path,
    state: &EditState,
    i: usize,
) -> Result<(), RefreshError> {
    let unresolved = |path: String, at: String| RefreshError::Unresolved {
        dir: dir.to_path_buf(),
        minor: state.minor,
        patch: state.patches[i].name.clone(),
        path,
        at,
    };
    let index = repo.index().map_err(RefreshError::git(dir))?;
    if let Some(c) = index
        .conflicts()
        .map_err(RefreshError::git(dir))?
        .flatten()
        .next()
    {
        let entry = c.our.or(c.their).or(c.ancestor);
        let path = entry
            .map(|e| String::from_utf8_lossy(&e.path).into_owned())
            .unwrap_or_default();
        return Err(unresolved(path, String::new()));
    }
    if let Step::Conflict { files } = &state.patches[i].step {
        for f in files {
            let text = std::fs::read_to_string(dir.join(&f.path)).unwrap_or_default();
            if let Some(n) = text.lines().position(|l| {
                l.starts_with("<<<<<<< ") || l.starts_with(">>>>>>> ") || l == "======="
            }) {
                return Err(unresolved(
                    f.path.clone(),
                    format!(" (conflict markers at line {})", n + 1),
                ));
            }
        }
    }
    Ok(())
}

/// Which uncommitted changes [`first_change`] looks for.
#[derive(Clone, Copy, PartialEq, Eq)]
pub(super) enum Changes {
    /// Tracked files changed in the work tree and not staged (a resolution not `git add`ed),
    /// and untracked files (a file the resolution adds, or `git apply --reject`'s `.rej`).
    Unstaged,
    /// Anything `git status` shows: staged, unstaged, unmerged or untracked.
    Any,
}

/// The first path with uncommitted changes of the kind asked for (`git status` order), and what
/// changed. Ignored files never count.
pub(super) fn first_change(
    repo: &Repository,
    dir: &Path,
    what: Changes,
) -> Result<Option<(String, String)>, RefreshError> {
    let mut opts = StatusOptions::new();
    opts.include_untracked(true)
        .recurse_untracked_dirs(true)
        .include_ignored(false);
    let statuses = repo
        .statuses(Some(&mut opts))
        .map_err(RefreshError::git(dir))?;
    let unstaged =
        Status::WT_MODIFIED | Status::WT_DELETED | Status::WT_TYPECHANGE | Status::CONFLICTED;
    let describe = |s: Status| {
        if s.is_conflicted() {
            "unmerged"
        } else if s.is_wt_new() {
            "untracked"
        } else if s.intersects(unstaged) {
            "modified, not staged"
        } else {
            "staged, not committed"
        }
    };
    Ok(statuses.iter().find_map(|e| {
        let s = e.status();
        let counts = match what {
            Changes::Unstaged => s.intersects(unstaged | Status::WT_NEW),
            Changes::Any => !s.is_empty() && !s.is_ignored(),
        };
        counts.then(|| (e.path().unwrap_or_default().to_string(), describe(s).into()))
    }))
}
