//! `patches export`: the edit's commits written back to `patches_dir` in `git format-patch` form.

use std::path::{Path, PathBuf};

use git2::{Oid, Repository};
use toml_edit::{Array, DocumentMut, Item, Value};

use super::edit::{Changes, check_git_idle, check_pin, current_series, first_change};
use super::{EditState, Exported, RefreshError, Step};
use crate::base::util::write_file_atomically;
use crate::config::{Config, Minor};
use crate::pipeline::patches::{self, PatchFile};

/// What [`export`] needs.
#[derive(Debug, Clone)]
pub struct ExportRequest<'a> {
    /// images.toml, loaded (its file is rewritten when a minor needs its own variant).
    pub config: &'a Config,
    /// The minor whose edit is exported.
    pub minor: Minor,
    /// The edit's work tree.
    pub dir: &'a Path,
}

/// What happened to one patch file.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Written {
    /// The file already gives the patch's commit: not a byte changed.
    Unchanged,
    /// The file was rewritten from the commit.
    Rewritten,
    /// Other minors share the file and keep it: the minor now has its own variant, and
    /// images.toml lists that for it.
    Variant,
    /// The minor's variant is byte-identical to the shared file again: images.toml lists the
    /// shared file for it (the variant file is left for you to delete).
    Shared,
    /// Already in upstream's tree (no commit): the file is left as it is; drop it from the
    /// minor's series.
    AlreadyUpstream,
}

/// One patch of an export.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct ExportedPatch {
    /// The series entry before the export.
    pub was: String,
    /// The series entry after it (a variant's name when one was written).
    pub name: String,
    /// What happened to the file.
    pub written: Written,
}

/// The result of [`export`].
#[derive(Debug, Clone, serde::Serialize)]
pub struct ExportReport {
    /// The minor.
    pub minor: Minor,
    /// The patches in series order.
    pub patches: Vec<ExportedPatch>,
    /// Whether images.toml was rewritten (a series entry changed).
    pub config_changed: bool,
}

impl ExportReport {
    /// Whether any patch file or series entry changed.
    pub fn changed(&self) -> bool {
        self.patches
            .iter()
            .any(|p| !matches!(p.written, Written::Unchanged | Written::AlreadyUpstream))
    }
}

/// Writes the edit in `req.dir` back: each commit of the branch, in order, becomes its patch's
/// file in `patches_dir`. A file that already gives the commit (it applies to the commit's
/// parent as it is and yields the commit's tree, with the same subject and message) keeps its
/// bytes; any other is written by `git format-patch` (`--no-signature`, `--abbrev=9`, the git
/// on PATH, without the user's or system's git configuration), with the `From:` and `Date:`
/// lines of the file it replaces. A file other minors' series share stays theirs: this minor
/// gets a variant `<stem>.k8s-<minor>.patch`, and images.toml lists it in the minor's own
/// `patches` (a minor whose patches are all the defaults' again loses its own list).
///
/// Refused (nothing written), each [`RefreshError`]: no edit in `dir`
/// ([`RefreshError::NoEdit`]); a conflict not resolved ([`RefreshError::Unresolved`]);
/// uncommitted changes ([`RefreshError::Dirty`]); a branch that is not the base plus one commit
/// per patch, or a base images.toml no longer pins ([`RefreshError::OtherBase`]); a series or
/// patch file changed since the edit ([`RefreshError::SeriesChanged`],
/// [`RefreshError::HandEdited`]); another run holding the digest manifest's run lock
/// ([`RefreshError::Busy`], held until the files are written).
pub fn export(req: &ExportRequest<'_>) -> Result<ExportReport, RefreshError> {
    let dir = req.dir;
    req.config.minor(req.minor)?;
    let mut state = EditState::read(dir)
        .filter(|s| s.minor == req.minor)
        .ok_or_else(|| RefreshError::NoEdit {
            dir: dir.to_path_buf(),
            minor: req.minor,
        })?;
    let repo = crate::base::git::open(dir).map_err(RefreshError::git(dir))?;
    check_finished(&repo, dir, &state)?;
    check_pin(req.config, &state, dir)?;
    let commits = branch_commits(&repo, dir, &state)?;
    let series = current_series(req.config, &state)?;
    check_commits(&repo, dir, &state, &series, &commits)?;
    let _lock = lock(req.config)?;
    let mut files: Vec<(PathBuf, Vec<u8>)> = Vec::new();
    let mut entries = Vec::new();
    let mut out = Vec::new();
    let mut commits = commits.into_iter();
    for (patch, edited) in series.iter().zip(&state.patches) {
        if !edited.step.committed() {
            entries.push(patch.name.clone());
            out.push(ExportedPatch {
                was: patch.name.clone(),
                name: patch.name.clone(),
                written: Written::AlreadyUpstream,
            });
            continue;
        }
        let commit = commits.next().expect("one commit per committed patch");
        let bytes = match shared_file(req.config, patch) {
            _ if reproduces(&repo, commit, patch).is_ok() => patch.bytes.clone(),
            Some(shared) if reproduces(&repo, commit, &shared).is_ok() => shared.bytes,
            _ => format_patch_checked(&repo, dir, commit, patch)?,
        };
        let (name, written) = target(req.config, req.minor, patch, &bytes);
        if matches!(written, Written::Rewritten | Written::Variant) {
            files.push((req.config.patches_dir.join(&name), bytes));
        }
        entries.push(name.clone());
        out.push(ExportedPatch {
            was: patch.name.clone(),
            name,
            written,
        });
    }
    let new_config = series_in_config(req.config, req.minor, &entries)?;
    for (path, bytes) in &files {
        write_file_atomically(path, bytes).map_err(|e| RefreshError::Io {
            path: path.clone(),
            message: e.to_string(),
        })?;
    }
    if let Some(text) = &new_config {
        write_file_atomically(&req.config.path, text.as_bytes()).map_err(|e| RefreshError::Io {
            path: req.config.path.clone(),
            message: e.to_string(),
        })?;
    }
    for (edited, name) in state.patches.iter_mut().zip(&entries) {
        let path = req.config.patches_dir.join(name);
        let bytes = std::fs::read(&path).map_err(|e| RefreshError::Io {
            path,
            message: e.to_string(),
        })?;
        edited.exported = Some(Exported {
            name: name.clone(),
            sha256: hex::encode(<sha2::Sha256 as sha2::Digest>::digest(&bytes)),
        });
    }
    state.write(dir)?;
    Ok(ExportReport {
        minor: req.minor,
        patches: out,
        config_changed: new_config.is_some(),
    })
}

/// Refuses an edit stopped at a conflict, a git operation under way, or uncommitted changes.
fn check_finished(repo: &Repository, dir: &Path, state: &EditState) -> Result<(), RefreshError> {
    check_git_idle(repo, dir)?;
    if let Some(i) = state.stopped_at() {
        let path = match &state.patches[i].step {
            Step::Conflict { files } if !files.is_empty() => files[0].path.clone(),
            _ => state.patches[i].name.clone(),
        };
        return Err(RefreshError::Unresolved {
            dir: dir.to_path_buf(),
            minor: state.minor,
            patch: state.patches[i].name.clone(),
            path,
            at: String::new(),
        });
    }
    if let Some((path, status)) = first_change(repo, dir, Changes::Any)? {
        return Err(RefreshError::Dirty {
            dir: dir.to_path_buf(),
            path,
            status,
        });
    }
    Ok(())
}

/// The branch's commits, oldest first: HEAD must be the edit's base plus exactly one commit per
/// committed patch, each with one parent.
fn branch_commits(
    repo: &Repository,
    dir: &Path,
    state: &EditState,
) -> Result<Vec<Oid>, RefreshError> {
    let other = |message: String| RefreshError::OtherBase {
        dir: dir.to_path_buf(),
        message,
    };
    let minor = state.minor;
    let restart =
        format!("lay it out again with `occm-forge patches edit --k8s {minor} --restart`");
    let want = state.patches.iter().filter(|p| p.step.committed()).count();
    let mut commit = repo
        .head()
        .and_then(|h| h.peel_to_commit())
        .map_err(RefreshError::git(dir))?;
    let mut commits = Vec::with_capacity(want);
    while commits.len() < want && commit.id().to_string() != state.base {
        if commit.parent_count() != 1 {
            return Err(other(format!(
                "commit {} on the branch is a merge: the series is one commit per patch on {}; {restart}",
                &commit.id().to_string()[..12],
                state.upstream_tag
            )));
        }
        commits.push(commit.id());
        commit = commit.parent(0).map_err(RefreshError::git(dir))?;
    }
    if commits.len() != want || commit.id().to_string() != state.base {
        return Err(other(format!(
            "HEAD is not {} plus one commit per patch ({want} expected): the branch moved to another base, or commits were added or squashed; {restart}",
            state.upstream_tag
        )));
    }
    commits.reverse();
    Ok(commits)
}

/// Each commit is its patch's: the commits' subjects are not the series' in another order (a
/// reworded subject is fine), and no commit is empty.
fn check_commits(
    repo: &Repository,
    dir: &Path,
    state: &EditState,
    series: &[PatchFile],
    commits: &[Oid],
) -> Result<(), RefreshError> {
    let git = RefreshError::git(dir);
    let committed: Vec<&PatchFile> = series
        .iter()
        .zip(&state.patches)
        .filter(|(_, e)| e.step.committed())
        .map(|(p, _)| p)
        .collect();
    let mut ours = Vec::new();
    let mut theirs = Vec::new();
    for (commit, patch) in commits.iter().zip(&committed) {
        let commit = repo.find_commit(*commit).map_err(&git)?;
        let tree = commit.tree_id();
        if commit.parent(0).map_err(&git)?.tree_id() == tree {
            return Err(RefreshError::EmptyCommit {
                dir: dir.to_path_buf(),
                patch: patch.name.clone(),
                commit: commit.id().to_string()[..12].to_string(),
            });
        }
        let message = commit.message().unwrap_or_default();
        ours.push(
            message
                .lines()
                .next()
                .unwrap_or_default()
                .trim()
                .to_string(),
        );
        theirs.push(patches::parse_mail(&patches::as_git_am_reads(&patch.bytes)).subject);
    }
    let (mut a, mut b) = (ours.clone(), theirs.clone());
    a.sort();
    b.sort();
    if ours != theirs && a == b {
        return Err(RefreshError::Reordered {
            dir: dir.to_path_buf(),
            branch: ours.join(" | "),
            series: theirs.join(" | "),
        });
    }
    Ok(())
}

/// Takes the digest manifest's run lock without waiting: a build reads patches_dir under it.
fn lock(config: &Config) -> Result<crate::pipeline::record::RunLock, RefreshError> {
    crate::pipeline::record::take_run_lock(&config.digest_manifest, false).map_err(|e| match e {
        crate::digest_manifest::DigestManifestError::Busy { path, holder } => {
            RefreshError::Busy { path, holder }
        }
        other => RefreshError::Io {
            path: config.digest_manifest.clone(),
            message: other.to_string(),
        },
    })
}

/// Whether `patch`, read as the build reads a patch and applied plainly to the commit's parent,
/// gives the commit's tree, subject and message; else what differs.
fn reproduces(repo: &Repository, commit: Oid, patch: &PatchFile) -> Result<(), String> {
    let commit = repo
        .find_commit(commit)
        .map_err(|e| e.message().to_string())?;
    let parent = commit
        .parent(0)
        .and_then(|p| p.tree())
        .map_err(|e| e.message().to_string())?;
    let bytes = patches::read_as_git_am(patch, &parent).map_err(|e| e.to_string())?;
    let mail = patches::parse_mail(&bytes);
    let message = commit.message().unwrap_or_default();
    let (subject, body) = message.split_once('\n').unwrap_or((message, ""));
    if subject.trim() != mail.subject {
        return Err(format!(
            "read back, its subject is {:?}, the commit's is {:?} (a subject must be one line)",
            mail.subject,
            subject.trim()
        ));
    }
    if body.trim() != mail.body {
        return Err(
            "read back, its message is not the commit's (a message line such as `---` or `diff --git` ends the message there)"
                .into(),
        );
    }
    let applied = (|| {
        let parent = commit.parent(0)?.tree()?;
        let diff = git2::Diff::from_buffer(&bytes)?;
        let mut index = repo.apply_to_tree(&parent, &diff, None)?;
        index.write_tree_to(repo)
    })();
    match applied {
        Ok(tree) if tree == commit.tree_id() => Ok(()),
        Ok(_) => Err("read back, its diff does not give the commit's tree".into()),
        Err(e) => Err(format!(
            "read back, its diff does not apply to the commit's parent ({})",
            e.message()
        )),
    }
}

/// [`format_patch`], refused unless the file gives the commit back.
fn format_patch_checked(
    repo: &Repository,
    dir: &Path,
    commit: Oid,
    was: &PatchFile,
) -> Result<Vec<u8>, RefreshError> {
    let bytes = format_patch(dir, commit, was)?;
    let written = PatchFile {
        name: was.name.clone(),
        bytes,
    };
    reproduces(repo, commit, &written).map_err(|why| RefreshError::NotReproducible {
        dir: dir.to_path_buf(),
        patch: was.name.clone(),
        commit: commit.to_string()[..12].to_string(),
        why,
    })?;
    Ok(written.bytes)
}

/// `git format-patch` of one commit, with the `From:` and `Date:` lines of `was` (the series
/// keeps fixed ones).
fn format_patch(dir: &Path, commit: Oid, was: &PatchFile) -> Result<Vec<u8>, RefreshError> {
    let output = crate::base::git::command(dir)
        .args([
            "format-patch",
            "-1",
            "--stdout",
            "--no-signature",
            "--abbrev=9",
        ])
        .arg(commit.to_string())
        .output()
        .map_err(|e| RefreshError::Git {
            dir: dir.to_path_buf(),
            message: format!(
                "git format-patch: cannot run git ({e}); patches export needs git on PATH"
            ),
        })?;
    if !output.status.success() {
        return Err(RefreshError::Git {
            dir: dir.to_path_buf(),
            message: format!(
                "git format-patch {}: {}",
                &commit.to_string()[..12],
                String::from_utf8_lossy(&output.stderr).trim()
            ),
        });
    }
    Ok(keep_header_lines(&output.stdout, &was.bytes))
}

/// `new` with its `From:` and `Date:` header lines replaced by those of `was`, where `was` has
/// them.
fn keep_header_lines(new: &[u8], was: &[u8]) -> Vec<u8> {
    let header_of = |bytes: &[u8], key: &str| -> Option<Vec<u8>> {
        bytes
            .split_inclusive(|b| *b == b'\n')
            .take_while(|l| *l != b"\n")
            .find(|l| l.starts_with(key.as_bytes()))
            .map(<[u8]>::to_vec)
    };
    let mut out = Vec::with_capacity(new.len());
    let mut in_header = true;
    for line in new.split_inclusive(|b| *b == b'\n') {
        if line == b"\n" {
            in_header = false;
        }
        let kept = ["From: ", "Date: "]
            .into_iter()
            .find(|k| in_header && line.starts_with(k.as_bytes()))
            .and_then(|k| header_of(was, k));
        out.extend_from_slice(kept.as_deref().unwrap_or(line));
    }
    out
}

/// The shared file a minor's variant varies, when `patch` is a variant and the file exists.
fn shared_file(config: &Config, patch: &PatchFile) -> Option<PatchFile> {
    let shared = patches::catalogue_name(&patch.name);
    if shared == patch.name.as_str() {
        return None;
    }
    let bytes = std::fs::read(config.patches_dir.join(shared.as_ref())).ok()?;
    Some(PatchFile {
        name: shared.into_owned(),
        bytes,
    })
}

/// Where the minor's patch goes: its own file, or a variant when other minors share the file,
/// or the shared file again when its variant has become byte-identical to it.
fn target(config: &Config, minor: Minor, patch: &PatchFile, bytes: &[u8]) -> (String, Written) {
    let shared = patches::catalogue_name(&patch.name).into_owned();
    if shared != patch.name
        && std::fs::read(config.patches_dir.join(&shared)).is_ok_and(|b| b == bytes)
    {
        return (shared, Written::Shared);
    }
    if bytes == patch.bytes {
        return (patch.name.clone(), Written::Unchanged);
    }
    let others = config
        .minors
        .iter()
        .any(|(m, c)| *m != minor && c.patches.contains(&patch.name));
    if others {
        (patches::variant_name(&shared, minor), Written::Variant)
    } else {
        (patch.name.clone(), Written::Rewritten)
    }
}

/// images.toml with the minor's series set to `entries`, checked; `None` when it already is.
/// A minor whose series equals `[defaults] patches` keeps (or gets back) no list of its own.
fn series_in_config(
    config: &Config,
    minor: Minor,
    entries: &[String],
) -> Result<Option<String>, RefreshError> {
    let m = config.minor(minor)?;
    if m.patches == entries {
        return Ok(None);
    }
    let io = |message: String| RefreshError::Io {
        path: config.path.clone(),
        message,
    };
    let text = std::fs::read_to_string(&config.path).map_err(|e| io(e.to_string()))?;
    let mut doc: DocumentMut = text
        .parse()
        .map_err(|e: toml_edit::TomlError| io(e.to_string()))?;
    let defaults: Option<Vec<String>> = doc
        .get("defaults")
        .and_then(|d| d.get("patches"))
        .and_then(Item::as_array)
        .map(|a| {
            a.iter()
                .filter_map(|v| v.as_str().map(String::from))
                .collect()
        });
    let table = doc["minors"][minor.to_string().as_str()]
        .as_table_like_mut()
        .ok_or_else(|| io(format!("no table minors.\"{minor}\"")))?;
    if defaults.as_deref() == Some(entries) {
        table.remove("patches");
    } else if let Some(array) = table.get_mut("patches").and_then(Item::as_array_mut) {
        set_in_place(array, entries);
    } else {
        let mut array: Array = entries.iter().map(String::as_str).collect();
        for v in array.iter_mut() {
            v.decor_mut().set_prefix("\n  ");
        }
        array.set_trailing("\n");
        array.set_trailing_comma(true);
        table.insert("patches", Item::Value(Value::Array(array)));
    }
    let new_text = doc.to_string();
    crate::config::parse(&config.path, &new_text).map_err(|e| {
        io(format!(
            "not changed: the result would be invalid: {}",
            e.message
        ))
    })?;
    Ok(Some(new_text))
}

/// `array` holding `entries`, each item changed in place so that the comments and layout around
/// it stay; an added item is laid out as the last one was.
fn set_in_place(array: &mut Array, entries: &[String]) {
    for (i, entry) in entries.iter().enumerate() {
        if i < array.len() {
            if array.get(i).and_then(Value::as_str) != Some(entry.as_str()) {
                array.replace(i, entry.as_str());
            }
        } else {
            let decor = array.iter().last().map(|v| v.decor().clone());
            let mut value = Value::from(entry.as_str());
            if let Some(decor) = decor {
                *value.decor_mut() = decor;
            }
            array.push_formatted(value);
        }
    }
    while array.len() > entries.len() {
        array.remove(array.len() - 1);
    }
}
