//! The reused work tree of a minor (`<cache>/trees/<minor>`): when it already holds the pinned
//! commit with the patch series applied, untouched since, the source and patches stages keep
//! it instead of checking out and applying again.
//!
//! After the patches stage, [`remember`] writes `.git/occm-forge-state.json` (the commit, the
//! series sha256, the patched HEAD and the patches' outcomes). [`prepared`] trusts a tree only
//! when that state matches, HEAD is the recorded commit, and every file is as the patches stage
//! left it: each tracked file has the size its index entry records and the content-derived time
//! `source::stamp_mtimes` gave it, and no other file exists (a file a test wrote, or an edit,
//! changes the time or adds a path). Otherwise the tree is checked out again.

use std::collections::HashSet;
use std::path::{Path, PathBuf};

use git2::Repository;
use serde::{Deserialize, Serialize};

use crate::pipeline::patches::AppliedPatch;
use crate::pipeline::source::{SourceTree, stamped_mtime};

const STATE: &str = "occm-forge-state.json";

/// What a prepared tree holds.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
struct State {
    commit: String,
    series_sha256: String,
    head: String,
    commit_time: i64,
    applied: Vec<AppliedPatch>,
}

/// A work tree that already holds the pinned commit and the series.
#[derive(Debug, Clone)]
pub struct Prepared {
    /// The tree, as the source stage would return it.
    pub tree: SourceTree,
    /// The patches, as the patches stage applied them.
    pub applied: Vec<AppliedPatch>,
}

/// Records what the tree at `tree.path` holds after the patches stage.
pub fn remember(tree: &SourceTree, series_sha256: &str, applied: &[AppliedPatch]) {
    let Ok(repo) = crate::base::git::open(&tree.path) else {
        return;
    };
    let Some(head) = repo.head().ok().and_then(|h| h.target()) else {
        return;
    };
    let state = State {
        commit: tree.commit.clone(),
        series_sha256: series_sha256.to_string(),
        head: head.to_string(),
        commit_time: tree.commit_time,
        applied: applied.to_vec(),
    };
    let json = serde_json::to_vec(&state).expect("state serialises");
    let _ = crate::base::util::write_file_atomically(&repo.path().join(STATE), &json);
}

/// The prepared tree at `dir` for `commit` and the series `series_sha256`, if it is untouched;
/// see the module documentation.
pub fn prepared(dir: &Path, commit: &str, series_sha256: &str) -> Option<Prepared> {
    let repo = crate::base::git::open(dir).ok()?;
    let state: State =
        serde_json::from_slice(&std::fs::read(repo.path().join(STATE)).ok()?).ok()?;
    if state.commit != commit || state.series_sha256 != series_sha256 {
        return None;
    }
    if repo.head().ok()?.target()?.to_string() != state.head
        || !untouched(&repo, dir, state.commit_time)
    {
        return None;
    }
    Some(Prepared {
        tree: SourceTree {
            path: dir.to_path_buf(),
            commit: state.commit,
            commit_time: state.commit_time,
        },
        applied: state.applied,
    })
}

/// Every tracked file has its index size and stamped time, and nothing else is in the tree.
fn untouched(repo: &Repository, dir: &Path, commit_time: i64) -> bool {
    let Ok(index) = repo.index() else {
        return false;
    };
    let mut tracked: HashSet<PathBuf> = HashSet::new();
    for e in index.iter() {
        let path = dir.join(String::from_utf8_lossy(&e.path).as_ref());
        if e.mode & 0o170000 == 0o100000 {
            let Ok(m) = std::fs::symlink_metadata(&path) else {
                return false;
            };
            let stamped = stamped_mtime(e.id, commit_time);
            if m.len() != u64::from(e.file_size) || m.modified().ok() != Some(stamped) {
                return false;
            }
        }
        tracked.insert(path);
    }
    only_tracked(dir, &dir.join(".git"), &tracked)
}

/// No file below `dir` (but `.git`) is missing from `tracked`.
fn only_tracked(dir: &Path, git: &Path, tracked: &HashSet<PathBuf>) -> bool {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return false;
    };
    for e in entries.flatten() {
        let path = e.path();
        if path == git {
            continue;
        }
        match e.file_type() {
            Ok(t) if t.is_dir() => {
                if !only_tracked(&path, git, tracked) {
                    return false;
                }
            }
            Ok(_) if tracked.contains(&path) => {}
            _ => return false,
        }
    }
    true
}
