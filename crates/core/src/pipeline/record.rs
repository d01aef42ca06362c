//! The build's record in the digest manifest ([`crate::digest_manifest`], the format): the run
//! lock two runs on one manifest take, the tag guard (a tag never moves to other inputs or
//! content), `record` of a build's entry, `merge` of fragments, and the mirrors and signatures
//! `copy` and `manifest record-signatures` add. Every write is atomic and the only entry it
//! changes is its minor's.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use crate::config::Minor;
use crate::digest_manifest::inputs::BuildInputs;
use crate::digest_manifest::{DigestManifest, DigestManifestError, Entry, Signature, read, write};

/// Held for a whole run: two runs on the same digest manifest never interleave. The lock is
/// `.<manifest file name>.lock` next to the manifest, locked with `flock(2)` (released by the
/// kernel even when the process dies) and holding the holder's PID for messages.
#[derive(Debug)]
pub struct RunLock {
    _file: std::fs::File,
}

/// [`lock_run`] as every command takes it: a wait is said once through the log (`occm-forge:
/// waiting for another occm-forge run on <path> (<holder>) to finish`, silenced by `--quiet`),
/// and on a multi-threaded Tokio runtime the wait blocks in place.
///
/// Errors: as [`lock_run`].
pub fn take_run_lock(path: &Path, wait: bool) -> Result<RunLock, DigestManifestError> {
    let take = || {
        lock_run(path, wait, &mut |holder| {
            tracing::info!(
                "waiting for another occm-forge run on {} ({holder}) to finish",
                path.display()
            )
        })
    };
    match tokio::runtime::Handle::try_current() {
        Ok(h) if h.runtime_flavor() == tokio::runtime::RuntimeFlavor::MultiThread => {
            tokio::task::block_in_place(take)
        }
        _ => take(),
    }
}

/// Takes the run lock of the digest manifest at `path`. When another run holds it, `on_wait` is
/// told who, and the call waits (`wait`) or fails with [`DigestManifestError::Busy`].
pub fn lock_run(
    path: &Path,
    wait: bool,
    on_wait: &mut dyn FnMut(String),
) -> Result<RunLock, DigestManifestError> {
    use std::io::{Read, Seek, Write};
    let name = path
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    let lock_path = path.with_file_name(format!(".{name}.lock"));
    let err = |e: std::io::Error| DigestManifestError::Write {
        path: lock_path.clone(),
        message: e.to_string(),
    };
    if let Some(dir) = lock_path.parent().filter(|d| !d.as_os_str().is_empty()) {
        std::fs::create_dir_all(dir).map_err(err)?;
    }
    let mut file = std::fs::OpenOptions::new()
        .create(true)
        .read(true)
        .write(true)
        .truncate(false)
        .open(&lock_path)
        .map_err(err)?;
    match file.try_lock() {
        Ok(()) => {}
        Err(std::fs::TryLockError::WouldBlock) => {
            let mut holder = String::new();
            let _ = file.read_to_string(&mut holder);
            let holder = match holder.trim() {
                "" => "another process".to_string(),
                pid => format!("pid {pid}"),
            };
            if !wait {
                return Err(DigestManifestError::Busy {
                    path: path.to_path_buf(),
                    holder,
                });
            }
            on_wait(holder);
            file.lock().map_err(err)?;
        }
        Err(std::fs::TryLockError::Error(e)) => return Err(err(e)),
    }
    // What a run killed while writing left next to the manifest: its temporary copies go at
    // once (every writer of the manifest holds this lock), other files' after a minute.
    if let Some(dir) = path.parent() {
        crate::base::util::remove_temp_files(
            if dir.as_os_str().is_empty() {
                Path::new(".")
            } else {
                dir
            },
            path,
        );
    }
    file.set_len(0)
        .and_then(|_| file.rewind())
        .and_then(|_| write!(file, "{}", std::process::id()))
        .map_err(err)?;
    Ok(RunLock { _file: file })
}

/// What the recorded entry `old` says about a tag now built from `new`: the changes of the
/// inputs the tag is bound to ([`BuildInputs::tag_changes_since`], in the inputs stage's words),
/// as `tag <tag> was recorded with other inputs: Go 1.25.1 → 1.25.5`; `None` when the tag may
/// serve both, or when `old` was edited by hand ([`Entry::edited`]: no record of inputs).
fn tag_bound(old: &Entry, tag: &str, new: &BuildInputs) -> Option<String> {
    if old.tag != tag || old.edited().is_some() {
        return None;
    }
    let changes = new.tag_changes_since(&old.recorded_inputs());
    (!changes.is_empty()).then(|| {
        format!(
            "tag {tag} was recorded with other inputs: {}",
            changes.join("; ")
        )
    })
}

/// Refuses to reuse `tag` for `minor` when the manifest already records that tag for other
/// inputs (commit, patch series, Go, base, platforms: [`BuildInputs::tag_changes_since`]): a
/// tag must change whenever its inputs do.
pub fn check_tag(
    path: &Path,
    config: &str,
    minor: Minor,
    tag: &str,
    inputs: &BuildInputs,
) -> Result<(), DigestManifestError> {
    let m = read(path)?;
    if let Some(what) = m.images.get(&minor).and_then(|e| tag_bound(e, tag, inputs)) {
        return Err(DigestManifestError::TagReuse {
            path: path.to_path_buf(),
            config: config.to_string(),
            minor,
            tag: tag.to_string(),
            what,
        });
    }
    Ok(())
}

/// Why `new` may not replace `old` (same minor), if it may not: the same tag for other inputs or
/// another digest, or an unpublished build over a published one.
pub fn replacement_conflict(old: &Entry, new: &Entry) -> Option<String> {
    if old.tag == new.tag {
        if let Some(what) = tag_bound(old, &new.tag, &new.recorded_inputs()) {
            return Some(what);
        }
        if old.digest != new.digest && old.published {
            return Some(format!(
                "tag {} was published as {}, this is {}",
                new.tag, old.digest, new.digest
            ));
        }
    }
    if old.published && !new.published {
        return Some(format!(
            "the recorded {} is published and this entry is not",
            old.image
        ));
    }
    None
}

/// What [`record`] did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Recorded {
    /// The entry was written. `stale_mirrors`: the mirrors (`copy`) the same image was recorded
    /// at, kept across the re-record, that lack the signature it now records (signed anew).
    Written {
        /// Mirror repositories without the new signature bundles; empty for most records.
        stale_mirrors: Vec<String>,
    },
    /// An unpublished build left the published entry of its minor alone.
    KeptPublished,
}

/// The warning for `mirrors` that lack `minor`'s newly recorded signature bundles (`build
/// --sign-key` signing anew, `manifest record-signatures`): they have them once copied again.
/// `None` without mirrors.
pub fn mirrors_lack_new_bundles(minor: Minor, mirrors: &[String]) -> Option<String> {
    (!mirrors.is_empty()).then(|| {
        format!(
            "{minor}: the mirrors {} do not have these bundles until they are copied again (`occm-forge copy --k8s {minor} --to <mirror>`); verify reports them until then",
            mirrors.join(", ")
        )
    })
}

/// Sets `minor`'s entry, leaving the others untouched, and rewrites the file atomically. An
/// unpublished entry never replaces a published one ([`Recorded::KeptPublished`]); a published
/// entry whose tag is recorded with other inputs or another digest is refused
/// ([`DigestManifestError::TagReuse`]).
pub fn record(
    path: &Path,
    config: &str,
    minor: Minor,
    mut entry: Entry,
) -> Result<Recorded, DigestManifestError> {
    let mut m = read(path)?;
    let mut stale_mirrors = Vec::new();
    if let Some(old) = m.images.get(&minor) {
        keep_mirrors_and_signature(old, &mut entry);
        if entry.signature != old.signature {
            stale_mirrors = entry.mirrors.clone();
        }
        if old.published && !entry.published {
            return Ok(Recorded::KeptPublished);
        }
        if let Some(what) = replacement_conflict(old, &entry) {
            return Err(DigestManifestError::TagReuse {
                path: path.to_path_buf(),
                config: config.to_string(),
                minor,
                tag: entry.tag.clone(),
                what,
            });
        }
    }
    m.images.insert(minor, entry);
    write(path, &m)?;
    Ok(Recorded::Written { stale_mirrors })
}

/// Folds fragments (digest manifests written by `build --manifest-fragment`, one per parallel
/// job) into the digest manifest at `path`, atomically; returns the minors merged. Two fragments
/// that carry different entries for one minor are refused and nothing is written; the same entry
/// twice is fine.
pub fn merge(path: &Path, fragments: &[PathBuf]) -> Result<Vec<Minor>, DigestManifestError> {
    let mut incoming: BTreeMap<Minor, (Entry, PathBuf)> = BTreeMap::new();
    for f in fragments {
        if !f.is_file() {
            return Err(DigestManifestError::Read {
                path: f.clone(),
                message: "no such fragment file".into(),
            });
        }
        let fragment = read(f)?;
        if fragment.images.is_empty() {
            return Err(DigestManifestError::Read {
                path: f.clone(),
                message: "no entries".into(),
            });
        }
        for (minor, entry) in fragment.images {
            match incoming.get(&minor) {
                Some((other, from)) if *other != entry => {
                    return Err(DigestManifestError::Conflict {
                        minor,
                        a: from.clone(),
                        b: f.clone(),
                    });
                }
                _ => {
                    incoming.insert(minor, (entry, f.clone()));
                }
            }
        }
    }
    let mut m = read(path)?;
    let minors: Vec<Minor> = incoming.keys().copied().collect();
    for (minor, (entry, from)) in incoming {
        if let Some(what) = m
            .images
            .get(&minor)
            .and_then(|old| replacement_conflict(old, &entry))
        {
            return Err(DigestManifestError::Replace {
                fragment: from,
                minor,
                what,
            });
        }
        let mut entry = entry;
        if let Some(old) = m.images.get(&minor) {
            keep_mirrors_and_signature(old, &mut entry);
        }
        m.images.insert(minor, entry);
    }
    write(path, &m)?;
    Ok(minors)
}

/// The same image (same digest) recorded again keeps the mirrors it was copied to, and its
/// signature when the new record has none (the registry still holds the bundles, which are
/// about the digest).
fn keep_mirrors_and_signature(old: &Entry, new: &mut Entry) {
    if old.digest == new.digest && new.mirrors.is_empty() {
        new.mirrors = old.mirrors.clone();
    }
    if old.digest == new.digest && new.signature.is_none() {
        new.signature = old.signature.clone();
    }
}

/// Records that `minor`'s image (whose index digest must still be `digest`) was copied to
/// `mirror`, rewriting the digest manifest atomically; the caller holds the run lock. Returns
/// false when the mirror was already recorded (nothing written). Fails when the entry is gone or
/// now names another digest (it was rebuilt meanwhile).
pub fn record_mirror(
    path: &Path,
    minor: Minor,
    digest: &str,
    mirror: &str,
) -> Result<bool, DigestManifestError> {
    let mut m = read(path)?;
    let entry = entry_of(path, &mut m, minor, digest, "copied")?;
    if entry.is_at(mirror) {
        return Ok(false);
    }
    entry.mirrors.push(mirror.to_string());
    entry.mirrors.sort();
    write(path, &m)?;
    Ok(true)
}

/// Records `signature` as the signature of `minor`'s image (whose index digest must still be
/// `digest`), rewriting the digest manifest atomically; the caller holds the run lock. Returns
/// false when the entry records that signature already (nothing written). Fails when the entry
/// is gone or now names another digest (it was rebuilt meanwhile).
pub fn record_signature(
    path: &Path,
    minor: Minor,
    digest: &str,
    signature: Signature,
) -> Result<bool, DigestManifestError> {
    let mut m = read(path)?;
    let entry = entry_of(path, &mut m, minor, digest, "signed")?;
    if entry.signature.as_ref() == Some(&signature) {
        return Ok(false);
    }
    entry.signature = Some(signature);
    write(path, &m)?;
    Ok(true)
}

/// `minor`'s entry in `m`, read from `path`, when it still records index `digest` (the one
/// that was `what`: copied, signed).
fn entry_of<'a>(
    path: &Path,
    m: &'a mut DigestManifest,
    minor: Minor,
    digest: &str,
    what: &str,
) -> Result<&'a mut Entry, DigestManifestError> {
    let fail = |message: String| DigestManifestError::Read {
        path: path.to_path_buf(),
        message,
    };
    let entry = m
        .images
        .get_mut(&minor)
        .ok_or_else(|| fail(format!("no entry for {minor} any more; nothing recorded")))?;
    if entry.digest != digest {
        return Err(fail(format!(
            "{minor} now records {}, not the {what} {digest}; nothing recorded",
            entry.digest
        )));
    }
    Ok(entry)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::base::util::short;
    use crate::digest_manifest::Signer;
    use crate::registry::publish::ReferrersPushed;

    fn entry(tag: &str) -> Entry {
        Entry {
            image: format!("r.example/o/occm:{tag}@sha256:{}", "a".repeat(64)),
            repository: "r.example/o/occm".into(),
            tag: tag.into(),
            digest: format!("sha256:{}", "a".repeat(64)),
            published: true,
            upstream_tag: "v1.30.3".into(),
            upstream_commit: "c".repeat(40),
            patch_series_sha256: "d".repeat(64),
            patches: vec!["0001-x.patch".into()],
            already_upstream: vec![],
            applied_three_way: BTreeMap::new(),
            platforms: vec!["linux/amd64".into()],
            manifests: BTreeMap::from([(
                "linux/amd64".into(),
                format!("sha256:{}", "b".repeat(64)),
            )]),
            sbom: BTreeMap::new(),
            provenance: None,
            go_version: "1.22.2".into(),
            base_image: "static".into(),
            base_digest: None,
            source_date_epoch: 0,
            built_at: "2026-11-29T00:00:00Z".into(),
            inputs: None,
            accepted: false,
            accepted_scenarios: vec![],
            referrers: Some(ReferrersPushed::Subject),
            signature: None,
            mirrors: vec![],
        }
    }

    #[test]
    fn minors_are_quoted_and_other_entries_kept() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("images.lock.yaml");
        record(
            &p,
            "images.toml",
            "1.30".parse().unwrap(),
            entry("v1.30.3-occmforge.1"),
        )
        .unwrap();
        record(
            &p,
            "images.toml",
            "1.9".parse().unwrap(),
            entry("v1.9.0-occmforge.1"),
        )
        .unwrap();
        let text = std::fs::read_to_string(&p).unwrap();
        assert!(text.contains("\n  '1.30':\n"), "{text}");
        let i9 = text.find("'1.9'").unwrap();
        assert!(i9 < text.find("'1.30'").unwrap(), "numeric order: {text}");
        let m = read(&p).unwrap();
        assert_eq!(m.images.len(), 2);
        assert_eq!(
            m.images[&"1.30".parse().unwrap()],
            entry("v1.30.3-occmforge.1")
        );
    }

    /// A minor given twice (a hand edit that renamed '1.32' to a second '1.31') is refused,
    /// naming the file and the minor; the last one used to win silently (found by a break-it
    /// pass: `render --k8s 1.31` printed 1.32's image).
    #[test]
    fn a_minor_given_twice_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("images.lock.yaml");
        for (minor, tag) in [
            ("1.31", "v1.31.4-occmforge.1"),
            ("1.32", "v1.32.1-occmforge.1"),
        ] {
            record(&p, "images.toml", minor.parse().unwrap(), entry(tag)).unwrap();
        }
        let text = std::fs::read_to_string(&p).unwrap();
        std::fs::write(&p, text.replace("'1.32':", "'1.31':")).unwrap();
        let e = read(&p).unwrap_err().to_string();
        assert!(
            e.contains(&p.display().to_string()) && e.contains("images: 1.31 is given twice"),
            "{e}"
        );
    }

    #[test]
    fn mirrors_are_recorded_once_kept_across_a_re_record_and_absent_when_empty() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("l.yaml");
        let minor = "1.34".parse().unwrap();
        let e = entry("v1.34.1-occmforge.1");
        record(&p, "images.toml", minor, e.clone()).unwrap();
        let before = std::fs::read_to_string(&p).unwrap();
        assert!(!before.contains("mirrors"), "{before}");
        assert!(record_mirror(&p, minor, &e.digest, "m.example/x/occm").unwrap());
        assert!(!record_mirror(&p, minor, &e.digest, "m.example/x/occm").unwrap());
        assert!(!record_mirror(&p, minor, &e.digest, &e.repository).unwrap());
        let text = std::fs::read_to_string(&p).unwrap();
        assert!(
            text.contains("mirrors:\n    - m.example/x/occm\n"),
            "{text}"
        );
        // The same image recorded again keeps its mirror; another digest is refused.
        record(&p, "images.toml", minor, e.clone()).unwrap();
        assert_eq!(
            read(&p).unwrap().images[&minor].mirrors,
            ["m.example/x/occm"]
        );
        let other = format!("sha256:{}", "9".repeat(64));
        let err = record_mirror(&p, minor, &other, "n.example/occm").unwrap_err();
        assert!(err.to_string().contains("not the copied"), "{err}");
        let at = read(&p).unwrap().images[&minor].at_repository("m.example/x/occm");
        assert_eq!(
            at.image,
            format!("m.example/x/occm:v1.34.1-occmforge.1@{}", e.digest)
        );
        assert!(at.mirrors.is_empty());
    }

    #[test]
    fn a_keyless_signature_is_recorded_once_kept_across_a_re_record_and_a_half_signer_refused() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("l.yaml");
        let minor = "1.34".parse().unwrap();
        let e = entry("v1.34.1-occmforge.1");
        record(&p, "images.toml", minor, e.clone()).unwrap();
        let signature = Signature {
            digest: format!("sha256:{}", "5".repeat(64)),
            ..Signature::by(Signer::Certificate {
                identity: "https://github.com/o/r/.github/workflows/build.yml@refs/heads/main",
                issuer: "https://token.actions.githubusercontent.com",
            })
        };
        assert!(record_signature(&p, minor, &e.digest, signature.clone()).unwrap());
        assert!(!record_signature(&p, minor, &e.digest, signature.clone()).unwrap());
        let text = std::fs::read_to_string(&p).unwrap();
        assert!(
            text.contains("      certificate_identity: https://github.com/o/r/.github/workflows/build.yml@refs/heads/main\n      certificate_oidc_issuer: https://token.actions.githubusercontent.com\n"),
            "{text}"
        );
        assert!(!text.contains("public_key"), "{text}");
        // A build of the same digest that signs nothing keeps it; another digest is refused.
        record(&p, "images.toml", minor, e.clone()).unwrap();
        assert_eq!(read(&p).unwrap().images[&minor].signature, Some(signature));
        let other = format!("sha256:{}", "9".repeat(64));
        let err = record_signature(
            &p,
            minor,
            &other,
            Signature::by(Signer::Certificate {
                identity: "i",
                issuer: "o",
            }),
        )
        .unwrap_err();
        assert!(err.to_string().contains("not the signed"), "{err}");
        // An edited record naming half a signer does not load.
        std::fs::write(
            &p,
            text.replace(
                "      certificate_oidc_issuer: https://token.actions.githubusercontent.com\n",
                "",
            ),
        )
        .unwrap();
        let err = read(&p).unwrap_err().to_string();
        assert!(
            err.ends_with("1.34: signature records neither a key (key and public_key) nor a certificate identity (certificate_identity and certificate_oidc_issuer), or parts of both"),
            "{err}"
        );
        // A digest that is none: named before anyone asks a registry for it.
        std::fs::write(&p, text.replace("sha256:5555", "sha256:zz55")).unwrap();
        let err = read(&p).unwrap_err().to_string();
        assert!(
            err.ends_with(&format!(
                "1.34: signature \"sha256:zz{}\" is not a digest (sha256:<64 lower-case hex>)",
                "5".repeat(62)
            )),
            "{err}"
        );
    }

    /// An entry whose fields no longer hash to its fingerprint is edited, whichever field was
    /// edited (its own or one of `inputs:`); an edited entry binds no tag to its inputs.
    #[test]
    fn an_entry_whose_fields_do_not_hash_to_its_fingerprint_was_edited() {
        let mut e = entry("v1.30.3-occmforge.1");
        assert_eq!(e.edited(), None, "nothing to check without inputs");
        e.inputs = Some(e.recorded_inputs().sealed());
        assert_eq!(e.edited(), None);
        let fingerprint = e.inputs.as_ref().unwrap().fingerprint.clone();
        let mut own = e.clone();
        own.go_version = "1.99.0".into();
        let mut inner = e.clone();
        inner.inputs.as_mut().unwrap().required_tests = vec!["TestX".into()];
        for edited in [&own, &inner] {
            let why = edited.edited().expect("edited");
            assert!(
                why.starts_with("its fields hash to sha256:")
                    && why.ends_with(&format!(" not its inputs {}", short(&fingerprint))),
                "{why}"
            );
        }
        assert!(tag_bound(&own, &own.tag, &e.recorded_inputs()).is_none());
        assert!(tag_bound(&e, &e.tag, &own.recorded_inputs()).is_some());
    }

    #[test]
    fn a_tag_never_moves_to_other_inputs_or_content() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("l.yaml");
        let minor = "1.30".parse().unwrap();
        let published = entry("v1.30.3-occmforge.1");
        assert_eq!(
            record(&p, "images.toml", minor, published.clone()).unwrap(),
            Recorded::Written {
                stale_mirrors: vec![]
            }
        );
        let same = published.recorded_inputs();
        assert!(check_tag(&p, "images.toml", minor, "v1.30.3-occmforge.1", &same).is_ok());
        let other = BuildInputs {
            patch_series_sha256: "e".repeat(64),
            ..same.clone()
        };
        let e = check_tag(&p, "images.toml", minor, "v1.30.3-occmforge.1", &other)
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("bump `revision` for 1.30")
                && e.contains(
                    "was recorded with other inputs: patch series dddddddddddd → eeeeeeeeeeee;"
                ),
            "{e}"
        );
        let base = BuildInputs {
            base: "registry.k8s.io/build-image/go-runner:x@sha256:1".into(),
            ..same.clone()
        };
        assert!(
            check_tag(&p, "images.toml", minor, "v1.30.3-occmforge.1", &base)
                .unwrap_err()
                .to_string()
                .contains("base static → registry.k8s.io/build-image/go-runner:x@sha256:1")
        );
        assert!(check_tag(&p, "images.toml", minor, "v1.30.3-occmforge.2", &other).is_ok());

        // Another digest under the published tag is refused.
        let mut moved = published.clone();
        moved.digest = format!("sha256:{}", "f".repeat(64));
        assert!(record(&p, "images.toml", minor, moved).is_err());
        // An unpublished build leaves the published entry alone.
        let mut local = published.clone();
        local.published = false;
        local.built_at = "2027-01-01T00:00:00Z".into();
        assert_eq!(
            record(&p, "images.toml", minor, local).unwrap(),
            Recorded::KeptPublished
        );
        assert_eq!(read(&p).unwrap().images[&minor], published);
    }
}
