//! Three-way apply, as `git am -3` does it: when a patch's hunks do not apply to the tree as it
//! is, each file's blob named on the patch's `index` line (the file as the patch was made
//! against; upstream's object store has it) is patched, then merged with the file as it is now
//! (`git_merge_file`, the merge of `git merge-file`).

use std::path::Path;

use git2::{Blob, Diff, IndexEntry, IndexTime, Repository, TreeEntry};

/// A file that a three-way apply left conflicted in the work tree (`patches edit`): the merge
/// result with conflict markers (diff3 style: the patch's base between `|||||||` and `=======`)
/// is in the file, and the index holds its three stages, as `git am -3` leaves it.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct ConflictedFile {
    /// Path in the tree.
    pub path: String,
    /// 1-based line of the first `<<<<<<<` marker in the file.
    pub line: usize,
}

/// Why a three-way apply did not give a commit.
pub(super) enum ThreeWayError {
    /// Three-way is not possible (a base blob is missing, the patch adds, deletes or renames a
    /// file, …): the reason. Nothing was written.
    Unusable(String),
    /// The merge conflicts in these files. Written to the work tree and index only when asked
    /// to leave conflicts; otherwise nothing was written.
    Conflict(Vec<ConflictedFile>),
}

/// What to do with a conflicting merge.
pub(super) enum OnConflict<'a> {
    /// Write nothing (the build).
    Stop,
    /// Leave the markers and the index stages, the side of the patch labelled with this name
    /// (`patches edit`).
    LeaveMarkers(&'a str),
}

/// The files of a patch and the blob each was made against: `(old path, new path, old blob
/// id, new blob id)` as written (abbreviated; all zeros for an added or deleted file) from its
/// `diff --git` and `index` lines.
fn patch_bases(bytes: &[u8]) -> Vec<(String, String, String, String)> {
    let text = String::from_utf8_lossy(bytes);
    let mut out = Vec::new();
    let mut current: Option<(String, String)> = None;
    for line in text.lines() {
        if let Some(rest) = line.strip_prefix("diff --git a/") {
            current = rest
                .split_once(" b/")
                .map(|(a, b)| (a.to_string(), b.to_string()));
        } else if let Some(rest) = line.strip_prefix("index ")
            && let Some((old, new_path)) = current.take()
        {
            let ids = rest.split(' ').next().unwrap_or_default();
            let (old_id, new_id) = ids.split_once("..").unwrap_or((ids, ""));
            out.push((old, new_path, old_id.to_string(), new_id.to_string()));
        }
    }
    out
}

/// One file of the patch: its path and, for a file the patch changes, the blob the patch was
/// made against and the file in HEAD (`None`: a file the patch adds, absent from HEAD).
struct Side<'r> {
    path: String,
    changed: Option<(Blob<'r>, TreeEntry<'r>)>,
}

/// The patch's files with their base blobs, and the tree "HEAD with the base blobs, patched"
/// (the patch's side of the merge).
fn sides<'r>(
    repo: &'r Repository,
    bytes: &[u8],
    diff: &Diff<'_>,
) -> Result<(Vec<Side<'r>>, git2::Index), String> {
    let git = |e: git2::Error| e.message().to_string();
    let head = repo.head().and_then(|h| h.peel_to_tree()).map_err(git)?;
    let bases = patch_bases(bytes);
    if bases.is_empty() || bases.len() != diff.deltas().len() {
        return Err("the patch has no index lines for every file".into());
    }
    let mut update = git2::build::TreeUpdateBuilder::new();
    let mut files = Vec::new();
    let zeros = |id: &str| id.bytes().all(|b| b == b'0');
    for (old, new, id, new_id) in &bases {
        if old != new || zeros(new_id) {
            return Err(format!("{new}: deleted or renamed"));
        }
        if zeros(id) {
            if head.get_path(Path::new(new)).is_ok() {
                return Err(format!(
                    "{new}: added by the patch, and upstream has it too"
                ));
            }
            files.push(Side {
                path: new.clone(),
                changed: None,
            });
            continue;
        }
        let base = repo
            .revparse_single(id)
            .and_then(|o| o.peel_to_blob())
            .map_err(|_| {
                format!(
                    "{new}: the blob {id} the patch was made against is not in upstream's history"
                )
            })?;
        let ours = head
            .get_path(Path::new(new))
            .map_err(|_| format!("{new}: not in the tree"))?;
        update.upsert(new.as_str(), base.id(), git2::FileMode::Blob);
        files.push(Side {
            path: new.clone(),
            changed: Some((base, ours)),
        });
    }
    let base_tree_id = update.create_updated(repo, &head).map_err(git)?;
    let base_tree = repo.find_tree(base_tree_id).map_err(git)?;
    let theirs = repo.apply_to_tree(&base_tree, diff, None).map_err(|e| {
        format!(
            "the patch does not apply to the blobs it names: {}",
            e.message()
        )
    })?;
    Ok((files, theirs))
}

/// One merged file: its path, the merge result, and (when it conflicts) the blob ids of its
/// three stages and the marker line.
struct Merged {
    path: String,
    content: Vec<u8>,
    stages: Option<[git2::Oid; 3]>,
    mode: u32,
    line: usize,
}

/// Applies `diff` (the patch `bytes`) three-way and writes the merged files to the work tree
/// and the index, to be committed. Returns one note per file (`main.go: 1 hunk merged with
/// upstream's changes since blob 1a2b3c4`). A conflict is [`ThreeWayError::Conflict`], written
/// or not as `on_conflict` says; anything else that prevents the merge is
/// [`ThreeWayError::Unusable`] with nothing written.
pub(super) fn apply(
    repo: &Repository,
    bytes: &[u8],
    diff: &Diff<'_>,
    on_conflict: OnConflict<'_>,
) -> Result<Vec<String>, ThreeWayError> {
    let git = |e: git2::Error| ThreeWayError::Unusable(e.message().to_string());
    let (files, theirs) = sides(repo, bytes, diff).map_err(ThreeWayError::Unusable)?;
    let patch_label = match on_conflict {
        OnConflict::LeaveMarkers(name) => name,
        OnConflict::Stop => "patch",
    };
    let mut merged = Vec::new();
    let mut notes = Vec::new();
    for side in &files {
        let theirs_entry = theirs
            .get_path(Path::new(&side.path), 0)
            .ok_or_else(|| ThreeWayError::Unusable(format!("{}: not patched", side.path)))?;
        let theirs_blob = repo.find_blob(theirs_entry.id).map_err(git)?;
        let Some((base, ours)) = &side.changed else {
            // A file the patch adds and upstream does not have: the patch's, as it is.
            merged.push(Merged {
                path: side.path.clone(),
                content: theirs_blob.content().to_vec(),
                stages: None,
                mode: theirs_entry.mode,
                line: 0,
            });
            continue;
        };
        let (file, note) = merge_file(
            repo,
            diff,
            &side.path,
            (base, ours),
            &theirs_blob,
            patch_label,
        )?;
        notes.push(note);
        merged.push(file);
    }
    let conflicts: Vec<ConflictedFile> = merged
        .iter()
        .filter(|m| m.stages.is_some())
        .map(|m| ConflictedFile {
            path: m.path.clone(),
            line: m.line,
        })
        .collect();
    if !conflicts.is_empty() && matches!(on_conflict, OnConflict::Stop) {
        return Err(ThreeWayError::Conflict(conflicts));
    }
    write(repo, &merged).map_err(ThreeWayError::Unusable)?;
    if conflicts.is_empty() {
        Ok(notes)
    } else {
        Err(ThreeWayError::Conflict(conflicts))
    }
}

/// The three-way merge of one file the patch changes: upstream's (`ours`, a tree entry of HEAD)
/// and the patch's result (`theirs`) over the patch's base blob (`base`), in diff3 style with
/// the patch labelled `patch_label`; the merged file and its note (`main.go: 1 hunk merged with
/// upstream's changes since blob 1a2b3c4`, or how far the patch's context moved).
fn merge_file(
    repo: &Repository,
    diff: &Diff<'_>,
    path: &str,
    (base, ours): (&Blob<'_>, &TreeEntry<'_>),
    theirs: &Blob<'_>,
    patch_label: &str,
) -> Result<(Merged, String), ThreeWayError> {
    let git = |e: git2::Error| ThreeWayError::Unusable(e.message().to_string());
    let ours_blob = repo.find_blob(ours.id()).map_err(git)?;
    let short = &base.id().to_string()[..7];
    let mut opts = git2::MergeFileOptions::new();
    opts.ancestor_label(format!("the patch's base (blob {short})"))
        .our_label("HEAD")
        .their_label(patch_label)
        .style_diff3(true);
    let result = git2::merge_file(
        &input(path, base),
        &input(path, &ours_blob),
        &input(path, theirs),
        Some(&mut opts),
    )
    .map_err(git)?;
    let content = result.content().to_vec();
    let (stages, line) = if result.is_automergeable() {
        (None, 0)
    } else {
        let text = String::from_utf8_lossy(&content);
        let line = text
            .lines()
            .position(|l| l.starts_with("<<<<<<<"))
            .map_or(0, |n| n + 1);
        (Some([base.id(), ours_blob.id(), theirs.id()]), line)
    };
    let patch = diff
        .deltas()
        .position(|d| d.new_file().path() == Some(Path::new(path)))
        .and_then(|i| git2::Patch::from_diff(diff, i).ok().flatten());
    let hunks = patch.as_ref().map_or(0, |p| p.num_hunks());
    let moved = patch
        .as_ref()
        .and_then(|p| moved_by(&String::from_utf8_lossy(ours_blob.content()), p));
    let note = match moved {
        Some(moved) => format!("{path}: {moved}"),
        None => format!(
            "{path}: {hunks} hunk{} merged with upstream's changes since blob {short}",
            if hunks == 1 { "" } else { "s" }
        ),
    };
    let file = Merged {
        path: path.to_string(),
        content,
        stages,
        mode: ours.filemode() as u32,
        line,
    };
    Ok((file, note))
}

/// One side of a file merge.
fn input<'a>(path: &'a str, blob: &'a Blob<'_>) -> git2::MergeFileInput<'a> {
    let mut i = git2::MergeFileInput::new();
    i.content(blob.content()).path(path);
    i
}

/// Writes the merged files to the work tree; a clean one is staged, a conflicted one gets its
/// three index stages (ancestor, ours, theirs) in place of stage 0, as `git_index_conflict_add`
/// does, so `git status` shows it as "both modified".
fn write(repo: &Repository, merged: &[Merged]) -> Result<(), String> {
    let git = |e: git2::Error| e.message().to_string();
    let workdir = repo.workdir().ok_or("a bare repository")?.to_path_buf();
    let mut index = repo.index().map_err(git)?;
    for m in merged {
        let path = workdir.join(&m.path);
        if let Some(parent) = path.parent() {
            std::fs::create_dir_all(parent).map_err(|e| format!("{}: {e}", m.path))?;
        }
        std::fs::write(&path, &m.content).map_err(|e| format!("{}: {e}", m.path))?;
        match m.stages {
            None => index.add_path(Path::new(&m.path)).map_err(git)?,
            Some(ids) => {
                index.remove(Path::new(&m.path), 0).map_err(git)?;
                for (stage, id) in (1u16..).zip(ids) {
                    index
                        .add(&stage_entry(&m.path, m.mode, id, stage))
                        .map_err(git)?;
                }
            }
        }
    }
    index.write().map_err(git)
}

/// An index entry for `path` at conflict `stage` (1 ancestor, 2 ours, 3 theirs): the stage is
/// bits 12–13 of the flags, the path length (up to 0xfff) the low bits (git's index format,
/// Documentation/gitformat-index.txt).
fn stage_entry(path: &str, mode: u32, id: git2::Oid, stage: u16) -> IndexEntry {
    let zero = IndexTime::new(0, 0);
    IndexEntry {
        ctime: zero,
        mtime: zero,
        dev: 0,
        ino: 0,
        mode,
        uid: 0,
        gid: 0,
        file_size: 0,
        id,
        flags: (stage << 12) | path.len().min(0xfff) as u16,
        flags_extended: 0,
        path: path.as_bytes().to_vec(),
    }
}

/// Where every hunk of `patch` finds its preimage (context and removed lines) verbatim in
/// `ours`, only some at other lines than the patch says (what `git apply` takes as an offset and
/// libgit2, which applies a hunk only at its recorded line, does not): `context moved by N lines`
/// when every hunk moved, else `hunk 3 moved by N lines` naming the moved ones. `None` when a
/// hunk's lines changed (a real merge), or none moved.
fn moved_by(ours: &str, patch: &git2::Patch<'_>) -> Option<String> {
    let lines: Vec<&str> = ours.split_inclusive('\n').collect();
    let mut moved = Vec::new();
    for h in 0..patch.num_hunks() {
        let (hunk, count) = patch.hunk(h).ok()?;
        let mut preimage = Vec::new();
        for l in 0..count {
            let line = patch.line_in_hunk(h, l).ok()?;
            if matches!(line.origin(), ' ' | '-') {
                preimage.push(String::from_utf8_lossy(line.content()).into_owned());
            }
        }
        if preimage.is_empty() {
            return None;
        }
        let want = hunk.old_start().saturating_sub(1) as i64;
        let offset = lines
            .windows(preimage.len())
            .enumerate()
            .filter(|(_, w)| w.iter().zip(&preimage).all(|(a, b)| a == b))
            .map(|(at, _)| at as i64 - want)
            .min_by_key(|o| o.abs())?;
        if offset != 0 {
            moved.push((h + 1, offset.abs()));
        }
    }
    let lo = moved.iter().map(|m| m.1).min()?;
    let hi = moved.iter().map(|m| m.1).max()?;
    let by = match (lo, hi) {
        (1, 1) => "1 line".to_string(),
        (lo, hi) if lo == hi => format!("{hi} lines"),
        (lo, hi) => format!("{lo}–{hi} lines"),
    };
    if moved.len() == patch.num_hunks() {
        return Some(format!("context moved by {by}"));
    }
    let which: Vec<String> = moved.iter().map(|m| m.0.to_string()).collect();
    Some(format!(
        "hunk{} {} moved by {by}",
        if which.len() == 1 { "" } else { "s" },
        which.join(", ")
    ))
}
