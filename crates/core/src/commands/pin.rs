//! `occm-forge pin`: rewrites images.toml in place, keeping its comments, order and formatting
//! (toml_edit): a minor's upstream tag and commit (resolved from the source), its Go version and
//! go-runner base from that tag's Dockerfile, and base references resolved to digests when the
//! registry is reachable. `--new-minor` adds an entry modelled on the previous minor's.

use std::path::Path;

use toml_edit::{DocumentMut, Item, Table, Value};

use crate::base::reference::ImageRef;
use crate::base::util::write_file_atomically;
use crate::config::{self, Minor, STATIC_BASE};
use crate::pipeline::Error;
use crate::pipeline::go::release::{self as go_release, GoRelease};
use crate::pipeline::source;
use crate::registry::Registry;

/// What to pin.
#[derive(Debug, Clone)]
pub struct PinRequest<'a> {
    /// images.toml.
    pub config_path: &'a Path,
    /// The minor to pin (or to add with `new_minor`).
    pub minor: Minor,
    /// Add the minor, copying the closest lower minor's entry.
    pub new_minor: bool,
    /// Move to this upstream tag (required with `new_minor`).
    pub tag: Option<&'a str>,
    /// Where to read upstream from; images.toml `upstream` when `None`.
    pub source: Option<&'a str>,
    /// occm-forge's cache directory (the git object store).
    pub cache_dir: &'a Path,
    /// Allow moving to an older tag, or (with `go`) an older Go release, than the one pinned.
    pub allow_downgrade: bool,
    /// Set the minor's `end_of_life` (the Kubernetes release calendar's date); a new minor never
    /// inherits the date of the minor it is modelled on.
    pub end_of_life: Option<time::Date>,
    /// Build the minor with another Go than its upstream tag's (after any tag move): a release,
    /// or the newest one to stay current ([`GoChoice::Current`]). `None` keeps `go` as it is
    /// (upstream's Go for a tag just pinned).
    pub go: Option<GoChoice>,
}

/// Which Go `pin --go` sets.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum GoChoice {
    /// This release; the proxy must serve it.
    Release(GoRelease),
    /// What `upstream check` proposes ([`crate::pipeline::go::release::currency`]): the newest revision of
    /// the minor's Go line, or on a line out of support the newest revision of the oldest
    /// supported line (KEP-3744: a Kubernetes release still supported moves off a Go line out
    /// of support).
    Current,
    /// The newest revision of the minor's own Go line (security fixes only; the least a minor
    /// past its end of life gets).
    Patch,
}

impl std::str::FromStr for GoChoice {
    type Err = String;

    /// `current`, `patch` or a Go release (`1.26.11`).
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s {
            "current" => return Ok(GoChoice::Current),
            "patch" => return Ok(GoChoice::Patch),
            _ => {}
        }
        s.parse()
            .map(GoChoice::Release)
            .map_err(|e| format!("{e}, or `current`, or `patch`"))
    }
}

/// What `pin` changed, and what it could not do.
#[derive(Debug, Clone, Default)]
pub struct PinOutcome {
    /// One line per changed key: `minors."1.34".commit: a → b`.
    pub changes: Vec<String>,
    /// One line per thing left as it was (e.g. a base digest the registry could not give).
    pub warnings: Vec<String>,
}

/// The Go version and go-runner base an upstream Dockerfile builds OCCM with: `ARG
/// GOLANG_IMAGE=golang:<go>` and `ARG DISTROLESS_IMAGE=<ref>` (upstream `Dockerfile` L17, L25).
pub fn dockerfile_images(dockerfile: &str) -> (Option<String>, Option<String>) {
    let arg = |name: &str| {
        dockerfile.lines().find_map(|l| {
            l.trim()
                .strip_prefix("ARG ")
                .and_then(|rest| rest.trim().strip_prefix(name))
                .and_then(|rest| rest.strip_prefix('='))
                .map(|v| v.trim().to_string())
        })
    };
    let go = arg("GOLANG_IMAGE").and_then(|g| g.rsplit_once(':').map(|(_, v)| v.to_string()));
    (go, arg("DISTROLESS_IMAGE"))
}

/// Sets `key` to `value`, keeping the old value's comments and spacing; returns the old value.
fn set(table: &mut Table, key: &str, value: impl Into<Value>) -> Option<String> {
    let bare = |v: &Value| {
        let mut v = v.clone();
        v.decor_mut().clear();
        v.to_string()
    };
    let mut new: Value = value.into();
    let old = table.get(key).and_then(Item::as_value).cloned();
    if let Some(old) = &old {
        *new.decor_mut() = old.decor().clone();
        if bare(old) == bare(&new) {
            return None;
        }
    }
    let old_text = old.as_ref().map(bare).unwrap_or_else(|| "(none)".into());
    // Replace the value in place: inserting would also replace the key and its comments.
    match table.get_mut(key) {
        Some(item) => *item = Item::Value(new),
        None => {
            table.insert(key, Item::Value(new));
        }
    }
    Some(old_text)
}

fn max_position(table: &Table) -> isize {
    table
        .iter()
        .filter_map(|(_, i)| i.as_table())
        .map(|t| t.position().unwrap_or(0).max(max_position(t)))
        .max()
        .unwrap_or(0)
}

/// Keys a minor carries itself; every other key may come from `[defaults]`.
pub const PER_MINOR_KEYS: &[&str] = &["upstream_tag", "commit", "go", "base", "revision"];

/// Rewrites images.toml; see the module documentation.
///
/// Errors: invalid images.toml (before or after the change: nothing is written then); an unknown
/// minor, or an existing one with `new_minor`; the tag cannot be fetched. A base the registry
/// cannot resolve is a warning, and its reference is kept.
pub async fn pin(req: &PinRequest<'_>, registry: &dyn Registry) -> Result<PinOutcome, Error> {
    let path = req.config_path;
    let text =
        std::fs::read_to_string(path).map_err(|e| Error::Io(format!("{}: {e}", path.display())))?;
    let cfg = config::parse(path, &text)?;
    let mut doc: DocumentMut = text
        .parse()
        .map_err(|e: toml_edit::TomlError| Error::Usage(format!("{}: {e}", path.display())))?;
    if doc.get("minors").and_then(Item::as_table).is_none() {
        return Err(Error::Usage(format!(
            "{}: no [minors] table",
            path.display()
        )));
    }
    let mut out = PinOutcome::default();
    if req.new_minor {
        add_minor(&cfg, &mut doc, req, &mut out)?;
    } else {
        cfg.minor(req.minor)?;
    }
    if let Some(tag) = req.tag {
        check_tag_fits(&cfg, req, tag)?;
    }
    let key = req.minor.to_string();
    let table = doc["minors"][&key]
        .as_table_mut()
        .expect("the minor's entry is a table");
    if let Some(tag) = req.tag {
        move_to_tag(&cfg, table, &key, req, tag, &mut out)?;
    }
    if let Some(choice) = req.go {
        let held = cfg
            .minors
            .get(&req.minor)
            .is_some_and(|m| m.go_policy == config::GoPolicy::Upstream);
        if held && !matches!(choice, GoChoice::Release(_)) {
            out.warnings.push(format!(
                "{key}: go_policy = \"upstream\" declines a newer Go; `go` kept (remove go_policy, or name the release with --go)"
            ));
        } else {
            pin_go(table, &key, req, choice, &mut out)?;
        }
    }
    set_end_of_life(table, &key, req, &mut out);
    // `pin --k8s M --go …` changes the Go only; the base is resolved by `pin --k8s M` alone or
    // with a tag move.
    if req.go.is_none() || req.tag.is_some() {
        pin_base(table, &key, registry, &mut out).await?;
    }
    write_checked(path, &text, &doc)?;
    Ok(out)
}

/// Takes `minor`'s entry in the images.toml at `path` back as the images.toml `from` has it:
/// its whole `[minors."M"]` table (comments of the tables around it kept), or, where `from` has
/// no such minor, none. For a pin that cannot go ahead (its patch series does not apply on the
/// new tag) while the others do: `pin --k8s M --as-in <the main branch's images.toml>`. Needs
/// no network. Returns one line saying what changed, none when nothing did.
///
/// Errors: [`Error::Io`] for an unreadable file, [`Error::Usage`] for one that is not TOML or
/// whose result would not be a valid images.toml (nothing written), [`Error::Config`] for a
/// minor neither file has.
pub fn restore(path: &Path, minor: Minor, from: &Path) -> Result<Vec<String>, Error> {
    let read = |p: &Path| -> Result<(String, DocumentMut), Error> {
        let text =
            std::fs::read_to_string(p).map_err(|e| Error::Io(format!("{}: {e}", p.display())))?;
        let doc = text
            .parse()
            .map_err(|e: toml_edit::TomlError| Error::Usage(format!("{}: {e}", p.display())))?;
        Ok((text, doc))
    };
    let (text, mut doc) = read(path)?;
    let (_, other) = read(from)?;
    let key = minor.to_string();
    let theirs = other.get("minors").and_then(|m| m.get(&key)).cloned();
    let minors = doc
        .get_mut("minors")
        .and_then(Item::as_table_mut)
        .ok_or_else(|| Error::Usage(format!("{}: no [minors] table", path.display())))?;
    let change = match (minors.get(&key).is_some(), theirs) {
        (_, Some(entry)) => {
            minors.insert(&key, entry);
            format!("minors.\"{key}\": as {} has it", from.display())
        }
        (true, None) => {
            minors.remove(&key);
            format!("minors.\"{key}\": removed, as {} has none", from.display())
        }
        (false, None) => {
            return Err(config::parse(path, &text)?
                .minor(minor)
                .err()
                .map(Error::Config)
                .unwrap_or_else(|| Error::Usage(format!("no minor {key}"))));
        }
    };
    write_checked(path, &text, &doc)?;
    Ok(if doc.to_string() == text {
        Vec::new()
    } else {
        vec![change]
    })
}

/// Refuses, before any network, a release tag of another minor, and (unless
/// `allow_downgrade`) a release older than the one pinned.
fn check_tag_fits(cfg: &config::Config, req: &PinRequest<'_>, tag: &str) -> Result<(), Error> {
    let Some(new) = crate::commands::upstream::release_version(tag) else {
        return Ok(()); // not a release tag (e.g. a pre-release): the fetch decides
    };
    if (new.0, new.1) != (req.minor.major, req.minor.minor) {
        return Err(Error::Usage(format!(
            "--tag {tag} is a {}.{} release, not {}",
            new.0, new.1, req.minor
        )));
    }
    if let Some(old) = cfg.minors.get(&req.minor)
        && let Some(old_v) = crate::commands::upstream::release_version(&old.upstream_tag)
        && new < old_v
        && !req.allow_downgrade
    {
        return Err(Error::Usage(format!(
            "--tag {tag} is older than the pinned {}; pass --allow-downgrade to move back",
            old.upstream_tag
        )));
    }
    Ok(())
}

/// Adds `[minors."<new>"]` modelled on the closest lower minor (the lowest when none is lower):
/// its per-minor keys, plus any key `[defaults]` does not provide.
fn add_minor(
    cfg: &config::Config,
    doc: &mut DocumentMut,
    req: &PinRequest<'_>,
    out: &mut PinOutcome,
) -> Result<(), Error> {
    let path = req.config_path;
    if cfg.minors.contains_key(&req.minor) {
        return Err(Error::Usage(format!(
            "{}: minor {} exists already; pin it without --new-minor",
            path.display(),
            req.minor
        )));
    }
    if req.tag.is_none() {
        return Err(Error::Usage("--new-minor needs --tag".into()));
    }
    let template = cfg
        .minors
        .keys()
        .filter(|m| **m < req.minor)
        .max()
        .or_else(|| cfg.minors.keys().min())
        .copied()
        .expect("images.toml has at least one minor");
    let defaults: Vec<String> = doc
        .get("defaults")
        .and_then(Item::as_table)
        .map(|t| t.iter().map(|(k, _)| k.to_string()).collect())
        .unwrap_or_default();
    let mut table = doc["minors"][&template.to_string()]
        .as_table()
        .cloned()
        .expect("minor entries are tables");
    table.retain(|k, _| PER_MINOR_KEYS.contains(&k) || !defaults.iter().any(|d| d == k));
    // Another minor's end of life is not this one's.
    table.remove("end_of_life");
    table.set_position(Some(max_position(doc.as_table()) + 1));
    doc["minors"]
        .as_table_mut()
        .expect("checked by the caller")
        .insert(&req.minor.to_string(), Item::Table(table));
    out.changes.push(format!(
        "minors.\"{}\": added from minors.\"{template}\"",
        req.minor
    ));
    Ok(())
}

/// Writes `end_of_life` from the request; a new minor without one gets a warning naming where the
/// date comes from.
fn set_end_of_life(
    table: &mut toml_edit::Table,
    key: &str,
    req: &PinRequest<'_>,
    out: &mut PinOutcome,
) {
    let Some(d) = req.end_of_life else {
        if req.new_minor {
            out.warnings.push(format!(
                "minors.\"{key}\" has no end_of_life: add the date from the Kubernetes release calendar (kubernetes.io/releases) with `occm-forge pin --k8s {key} --end-of-life YYYY-MM-DD`"
            ));
        }
        return;
    };
    let date = toml_edit::Datetime {
        date: Some(toml_edit::Date {
            year: u16::try_from(d.year()).unwrap_or_default(),
            month: u8::from(d.month()),
            day: d.day(),
        }),
        time: None,
        offset: None,
    };
    let old = table
        .get("end_of_life")
        .and_then(|v| v.as_value())
        .map(|v| v.to_string().trim().to_string());
    if old.as_deref() == Some(&d.to_string()) {
        return;
    }
    table.insert("end_of_life", toml_edit::value(date));
    out.changes.push(format!(
        "minors.\"{key}\".end_of_life: {} → {d}",
        old.unwrap_or_else(|| "none".into())
    ));
}

/// Records `change` when `old` is `Some` (the key changed).
fn note(out: &mut PinOutcome, key: &str, field: &str, old: Option<String>, new: &str) {
    if let Some(old) = old {
        out.changes
            .push(format!("minors.\"{key}\".{field}: {old} → \"{new}\""));
    }
}

/// Pins the Go of `tag`'s Dockerfile (`go`: its `ARG GOLANG_IMAGE`'s version, `None` without
/// one) in the minor `key`'s `table`, unless the same tag is pinned again (a Go chosen downstream
/// with `pin --go` is kept); warns when it keeps the pinned Go, when upstream's is older than the
/// pinned one, and when the Dockerfile names none.
fn take_dockerfile_go(
    table: &mut Table,
    key: &str,
    tag: &str,
    go: Option<String>,
    same_tag: bool,
    req: &PinRequest<'_>,
    out: &mut PinOutcome,
) {
    let pinned_go = table.get("go").and_then(Item::as_str).map(str::to_string);
    match go {
        // Re-pinning the same tag keeps a Go chosen downstream (`pin --go`).
        Some(go) if same_tag && pinned_go.as_deref() != Some(go.as_str()) => {
            out.warnings.push(format!(
                "{key}: {tag}'s Dockerfile builds with Go {go}; the pinned Go {} is kept (`--go {go}{}` returns to upstream's)",
                pinned_go.clone().unwrap_or_default(),
                if pinned_go.as_deref().and_then(|p| p.parse::<GoRelease>().ok())
                    > go.parse::<GoRelease>().ok()
                {
                    " --allow-downgrade"
                } else {
                    ""
                }
            ));
        }
        Some(go) => {
            let older = |a: &str, b: &str| matches!((a.parse::<GoRelease>(), b.parse::<GoRelease>()), (Ok(a), Ok(b)) if a < b);
            if req.go.is_none()
                && let Some(p) = &pinned_go
                && older(&go, p)
            {
                out.warnings.push(format!(
                    "{key}: {tag} builds with upstream's Go {go}, older than the Go {p} pinned until now; `--go current` keeps the minor on a current Go (docs/building.md, \"Go versions\")"
                ));
            }
            note(out, key, "go", set(table, "go", go.as_str()), &go)
        }
        None => out.warnings.push(format!(
            "{tag}: the Dockerfile has no ARG GOLANG_IMAGE; `go` kept"
        )),
    }
}

/// Moves the minor to upstream tag `tag`: its commit, a fresh revision, and the Go version and
/// go-runner base of that tag's Dockerfile.
fn move_to_tag(
    cfg: &config::Config,
    table: &mut Table,
    key: &str,
    req: &PinRequest<'_>,
    tag: &str,
    out: &mut PinOutcome,
) -> Result<(), Error> {
    let url = cfg.fetch_url(req.source);
    let fetched = tokio::task::block_in_place(|| source::fetch_tag(&url, tag, req.cache_dir))?;
    let old_tag = table
        .get("upstream_tag")
        .and_then(Item::as_str)
        .map(str::to_string);
    note(
        out,
        key,
        "upstream_tag",
        set(table, "upstream_tag", tag),
        tag,
    );
    note(
        out,
        key,
        "commit",
        set(table, "commit", fetched.commit.as_str()),
        &fetched.commit,
    );
    let same_tag = !req.new_minor && old_tag.as_deref() == Some(tag);
    if !same_tag {
        // A new upstream tag starts the downstream revisions again.
        if let Some(old) = set(table, "revision", 1i64) {
            out.changes
                .push(format!("minors.\"{key}\".revision: {old} → 1"));
        }
    } else if out
        .changes
        .iter()
        .any(|c| c.starts_with(&format!("minors.\"{key}\".commit:")))
    {
        // The same tag at another commit (upstream moved it): other inputs, so a new tag.
        bump_revision(table, key, out);
    }
    let Some(bytes) = source::read_file(&fetched.store, &fetched.commit, "Dockerfile") else {
        out.warnings
            .push(format!("{tag}: no Dockerfile; `go` and `base` kept"));
        return Ok(());
    };
    let (go, runner) = dockerfile_images(&String::from_utf8_lossy(&bytes));
    take_dockerfile_go(table, key, tag, go, same_tag, req, out);
    let current = table.get("base").and_then(Item::as_str).map(str::to_string);
    if let Some(runner) = runner
        && current.as_deref() != Some(STATIC_BASE)
        // Keep the digest when the reference is unchanged; it is re-resolved afterwards.
        && current.as_deref().and_then(|c| c.split('@').next()) != Some(runner.as_str())
    {
        note(
            out,
            key,
            "base",
            set(table, "base", runner.as_str()),
            &runner,
        );
    }
    Ok(())
}

/// Sets the minor's `go` to `choice`, checked against the Go module proxy before anything is
/// written, and starts a new downstream revision unless the upstream tag moved in this run (a new
/// tag starts at 1): the tag of a build with another Go must not be one already recorded.
///
/// Errors: the minor's `go` is not a release; the proxy's list cannot be read (`current`); the
/// proxy does not serve the release (its answer, e.g. 403, in the line).
fn pin_go(
    table: &mut Table,
    key: &str,
    req: &PinRequest<'_>,
    choice: GoChoice,
    out: &mut PinOutcome,
) -> Result<(), Error> {
    let config = req.config_path.display();
    let go: GoRelease = table
        .get("go")
        .and_then(Item::as_str)
        .ok_or_else(|| Error::Usage(format!("{config}: minors.\"{key}\" has no go")))?
        .parse()
        .map_err(|e| Error::Usage(format!("{config}: minors.\"{key}\".go: {e}")))?;
    let proxy = |e: go_release::ReleaseError| Error::Usage(format!("pin --go: {e}"));
    let target = match choice {
        GoChoice::Release(r) => r,
        GoChoice::Patch => {
            let served = go_release::served(req.cache_dir).map_err(proxy)?;
            let c = go_release::served_proposal(req.cache_dir, go, &served).map_err(proxy)?;
            for r in &c.refused {
                out.warnings.push(format!(
                    "{key}: the Go module proxy lists Go {r} but does not serve it; skipped"
                ));
            }
            match c.newer_patch {
                Some(p) => p,
                None => return Ok(()),
            }
        }
        GoChoice::Current => {
            let served = go_release::served(req.cache_dir).map_err(proxy)?;
            let c = go_release::served_proposal(req.cache_dir, go, &served).map_err(proxy)?;
            for r in &c.refused {
                out.warnings.push(format!(
                    "{key}: the Go module proxy lists Go {r} but does not serve it; skipped"
                ));
            }
            match c.proposal {
                Some(p) => p,
                None => {
                    if !c.supported {
                        out.warnings.push(format!(
                            "{key}: Go {go} is out of support (supported: {}) and the proxy lists no newer supported line; `go` kept",
                            c.supported_lines.join(", ")
                        ));
                    }
                    return Ok(());
                }
            }
        }
    };
    if target == go {
        return Ok(());
    }
    if target < go && matches!(choice, GoChoice::Release(_)) && !req.allow_downgrade {
        return Err(Error::Usage(format!(
            "--go {target} is older than the pinned Go {go}; pass --allow-downgrade to move back"
        )));
    }
    go_release::check_served(req.cache_dir, target).map_err(proxy)?;
    // One line for `go`, also when a tag move in this run set it first.
    let prefix = format!("minors.\"{key}\".go: ");
    let earlier = out.changes.iter().position(|c| c.starts_with(&prefix));
    let old = set(table, "go", target.to_string());
    match (earlier, old) {
        (Some(i), Some(_)) => {
            let first = out.changes.remove(i);
            let from = first[prefix.len()..]
                .split(" → ")
                .next()
                .unwrap_or_default()
                .to_string();
            if from != format!("\"{target}\"") {
                out.changes
                    .insert(i, format!("{prefix}{from} → \"{target}\""));
            }
        }
        (None, old) => note(out, key, "go", old, &target.to_string()),
        (Some(_), None) => {}
    }
    let tag_moved = req.new_minor
        || out
            .changes
            .iter()
            .any(|c| c.starts_with(&format!("minors.\"{key}\".upstream_tag:")));
    let revision_bumped = out
        .changes
        .iter()
        .any(|c| c.starts_with(&format!("minors.\"{key}\".revision:")));
    if !tag_moved && !revision_bumped {
        bump_revision(table, key, out);
    }
    Ok(())
}

/// `revision` + 1, recorded as a change.
fn bump_revision(table: &mut Table, key: &str, out: &mut PinOutcome) {
    let revision = table
        .get("revision")
        .and_then(Item::as_integer)
        .unwrap_or(0);
    if let Some(old) = set(table, "revision", revision + 1) {
        out.changes.push(format!(
            "minors.\"{key}\".revision: {old} → {}",
            revision + 1
        ));
    }
}

/// Resolves the minor's own base reference to a digest through the registry; a failure is a
/// warning and the reference is kept.
async fn pin_base(
    table: &mut Table,
    key: &str,
    registry: &dyn Registry,
    out: &mut PinOutcome,
) -> Result<(), Error> {
    let Some(base) = table.get("base").and_then(Item::as_str).map(str::to_string) else {
        return Ok(());
    };
    if base == STATIC_BASE {
        return Ok(());
    }
    let r: ImageRef = base
        .parse()
        .map_err(|e: String| Error::Usage(format!("minors.\"{key}\".base: {e}")))?;
    let Some(t) = &r.tag else {
        out.warnings.push(format!(
            "minors.\"{key}\".base `{base}` has no tag to resolve; kept"
        ));
        return Ok(());
    };
    match registry.manifest_digest(&r.repository, t).await {
        Ok(Some(d)) => {
            let pinned = ImageRef {
                digest: Some(d),
                ..r.clone()
            }
            .to_string();
            note(
                out,
                key,
                "base",
                set(table, "base", pinned.as_str()),
                &pinned,
            );
        }
        Ok(None) => out.warnings.push(format!(
            "base {}:{t} does not exist; minors.\"{key}\".base kept",
            r.repository
        )),
        Err(e) => out.warnings.push(format!(
            "base digest not resolved ({e}); minors.\"{key}\".base keeps `{base}`"
        )),
    }
    Ok(())
}

/// Writes the document back when it changed and is still a valid images.toml.
fn write_checked(path: &Path, old: &str, doc: &DocumentMut) -> Result<(), Error> {
    let new_text = doc.to_string();
    config::parse(path, &new_text).map_err(|e| {
        Error::Usage(format!(
            "{}: not changed: the result would be invalid: {}",
            path.display(),
            e.message
        ))
    })?;
    if new_text != old {
        write_file_atomically(path, new_text.as_bytes())
            .map_err(|e| Error::Io(format!("{}: {e}", path.display())))?;
    }
    Ok(())
}

#[cfg(test)]
mod restore_tests {
    use super::*;

    const MAIN: &str = "# the project\nrepository = \"r.example/occm\"\n\n[defaults]\nplatforms = [\"linux/amd64\"]\npatches = []\ntest_packages = [\"./pkg/...\"]\n\n# 1.33, kept as it is\n[minors.\"1.33\"]\nupstream_tag = \"v1.33.1\"\ncommit = \"1111111111111111111111111111111111111111\"\ngo = \"1.24.3\"\nbase = \"static\"\nrevision = 1\n\n[minors.\"1.34\"]\nupstream_tag = \"v1.34.1\"\ncommit = \"2222222222222222222222222222222222222222\"\ngo = \"1.25.1\"\nbase = \"static\"\nrevision = 1\n";

    #[test]
    fn a_minor_is_taken_back_as_another_file_has_it_and_nothing_else_moves() {
        let dir = tempfile::tempdir().unwrap();
        let main = dir.path().join("main.toml");
        std::fs::write(&main, MAIN).unwrap();
        let pinned = MAIN
            .replace("v1.34.1", "v1.34.2")
            .replace(&"2".repeat(40), &"3".repeat(40))
            .replace("v1.33.1", "v1.33.2")
            + "\n[minors.\"1.35\"]\nupstream_tag = \"v1.35.0\"\ncommit = \"4444444444444444444444444444444444444444\"\ngo = \"1.25.5\"\nbase = \"static\"\nrevision = 1\n";
        let path = dir.path().join("images.toml");
        std::fs::write(&path, &pinned).unwrap();
        let m = |s: &str| s.parse::<Minor>().unwrap();
        let said = restore(&path, m("1.34"), &main).unwrap();
        assert_eq!(said.len(), 1, "{said:?}");
        let now = std::fs::read_to_string(&path).unwrap();
        assert!(
            now.contains("v1.34.1") && now.contains(&"2".repeat(40)),
            "{now}"
        );
        assert!(
            now.contains("v1.33.2") && now.contains("# 1.33, kept as it is"),
            "{now}"
        );
        // A minor the other file lacks (a new minor) goes; again is nothing.
        restore(&path, m("1.35"), &main).unwrap();
        assert!(!std::fs::read_to_string(&path).unwrap().contains("1.35"));
        assert!(restore(&path, m("1.34"), &main).unwrap().is_empty());
        assert!(restore(&path, m("1.36"), &main).is_err());
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::registry::memory::MemoryRegistry;
    use crate::registry::{ErrorKind, publish};

    const CONFIG: &str = r#"repository = "registry.example/occm/openstack-cloud-controller-manager"

[defaults]
platforms = ["linux/amd64"]
patches = []
test_packages = ["./pkg/..."]

[minors."1.34"]
upstream_tag = "v1.34.1"
commit = "63ec67a04b40fee4ff43fec11c3d31f2a90c9ad2"
go = "1.25.1"
# upstream's go-runner
base = "registry.example/build-image/go-runner:v2.4.0"  # pinned by `pin`
revision = 1
"#;

    async fn pin_base_with(reg: &MemoryRegistry) -> (PinOutcome, String) {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("images.toml");
        std::fs::write(&path, CONFIG).unwrap();
        let req = PinRequest {
            config_path: &path,
            minor: "1.34".parse().unwrap(),
            new_minor: false,
            tag: None,
            source: None,
            cache_dir: dir.path(),
            allow_downgrade: false,
            end_of_life: None,
            go: None,
        };
        let out = pin(&req, reg).await.unwrap();
        (out, std::fs::read_to_string(&path).unwrap())
    }

    #[tokio::test(flavor = "multi_thread")]
    async fn another_minors_tag_and_a_downgrade_are_refused_before_any_fetch() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("images.toml");
        std::fs::write(&path, CONFIG).unwrap();
        let reg = MemoryRegistry::new();
        let attempt = |tag: &'static str, allow_downgrade: bool| {
            let path = path.clone();
            let cache = dir.path().to_path_buf();
            let reg = &reg;
            async move {
                let req = PinRequest {
                    config_path: &path,
                    minor: "1.34".parse().unwrap(),
                    new_minor: false,
                    tag: Some(tag),
                    source: Some("/nonexistent/upstream"),
                    cache_dir: &cache,
                    allow_downgrade,
                    end_of_life: None,
                    go: None,
                };
                pin(&req, reg).await.unwrap_err().to_string()
            }
        };
        assert_eq!(
            attempt("v1.35.0", false).await,
            "--tag v1.35.0 is a 1.35 release, not 1.34"
        );
        assert_eq!(
            attempt("v1.34.0", false).await,
            "--tag v1.34.0 is older than the pinned v1.34.1; pass --allow-downgrade to move back"
        );
        // Allowed, it gets as far as the fetch (which fails here: no upstream).
        assert!(!attempt("v1.34.0", true).await.contains("--allow-downgrade"));
        assert_eq!(std::fs::read_to_string(&path).unwrap(), CONFIG);
    }

    #[tokio::test]
    async fn a_base_tag_is_pinned_to_the_digest_the_registry_serves() {
        let f = crate::testing::image("v2.4.0");
        let reg = MemoryRegistry::new();
        let base: crate::base::reference::RepositoryName =
            "registry.example/build-image/go-runner".parse().unwrap();
        publish::publish(
            &reg,
            &base,
            &f.image,
            &[],
            publish::ReferrersMode::Fallback,
            &|_, _| {},
        )
        .await
        .unwrap();
        let (out, text) = pin_base_with(&reg).await;
        let pinned = format!(
            "registry.example/build-image/go-runner:v2.4.0@{}",
            f.image.index.digest
        );
        assert_eq!(
            out.changes,
            [format!(
                "minors.\"1.34\".base: \"registry.example/build-image/go-runner:v2.4.0\" → \"{pinned}\""
            )]
        );
        assert!(
            text.contains(&format!(
                "# upstream's go-runner\nbase = \"{pinned}\"  # pinned by `pin`\n"
            )),
            "comments kept: {text}"
        );
    }

    #[tokio::test]
    async fn a_base_the_registry_cannot_resolve_is_kept_with_a_warning() {
        let reg = MemoryRegistry::new();
        let (out, text) = pin_base_with(&reg).await;
        assert!(out.changes.is_empty());
        assert_eq!(
            out.warnings,
            [
                "base registry.example/build-image/go-runner:v2.4.0 does not exist; minors.\"1.34\".base kept"
            ]
        );
        assert_eq!(text, CONFIG);
        reg.fail_when(|_| Some(ErrorKind::Transient));
        let (out, text) = pin_base_with(&reg).await;
        assert!(
            out.warnings[0].starts_with("base digest not resolved (registry registry.example:"),
            "{:?}",
            out.warnings
        );
        assert_eq!(text, CONFIG);
    }

    #[test]
    fn reads_go_and_go_runner_from_the_dockerfile() {
        let d = "ARG GOLANG_IMAGE=golang:1.25.1\n# x\nARG DISTROLESS_IMAGE=registry.k8s.io/build-image/go-runner:v2.4.0-go1.25.1-bookworm.0\n";
        assert_eq!(
            dockerfile_images(d),
            (
                Some("1.25.1".into()),
                Some("registry.k8s.io/build-image/go-runner:v2.4.0-go1.25.1-bookworm.0".into())
            )
        );
        assert_eq!(dockerfile_images("FROM x\n"), (None, None));
    }

    #[test]
    fn set_keeps_comments() {
        let mut doc: DocumentMut =
            "[t]\n# above\ngo = \"1.25.1\"  # upstream Dockerfile GOLANG_IMAGE\n"
                .parse()
                .unwrap();
        let t = doc["t"].as_table_mut().unwrap();
        assert_eq!(set(t, "go", "1.25.5").as_deref(), Some("\"1.25.1\""));
        assert_eq!(set(t, "go", "1.25.5"), None);
        assert_eq!(
            doc.to_string(),
            "[t]\n# above\ngo = \"1.25.5\"  # upstream Dockerfile GOLANG_IMAGE\n"
        );
    }
}
