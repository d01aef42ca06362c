//! Validation of images.toml: one function per rule, each error located at `file:line:column`
//! (a second, span-keeping parse with `toml_edit` finds the key).

use std::collections::{BTreeMap, BTreeSet};
use std::ops::Range;
use std::path::{Path, PathBuf};

use super::raw::{Merged, RawConfig};
use super::{Config, ConfigError, Minor, MinorConfig, STATIC_BASE, TagInputs, render_tag};
use crate::base::util::{is_sha256_digest, is_valid_tag};

/// An error in `path` at byte `span` of `text` (or without a position).
fn error_at(path: &Path, text: &str, span: Option<Range<usize>>, message: String) -> ConfigError {
    ConfigError {
        file: path.to_path_buf(),
        location: span
            .map(|s| {
                let (l, c) = line_col(text, s.start);
                format!(":{l}:{c}")
            })
            .unwrap_or_default(),
        message,
    }
}

/// Whether `r` is `host` or `host:port` as a registry is named in a reference: a DNS name or
/// IPv4 address, or a bracketed IPv6 address, and a numeric port up to 65535.
fn is_host_port(r: &str) -> bool {
    let (host, port) = match r.rsplit_once(':') {
        Some((h, p)) if !h.ends_with(':') && (h.starts_with('[') || !h.contains(':')) => {
            (h, Some(p))
        }
        _ => (r, None),
    };
    let host_ok = if let Some(v6) = host.strip_prefix('[').and_then(|h| h.strip_suffix(']')) {
        v6.parse::<std::net::Ipv6Addr>().is_ok()
    } else {
        !host.is_empty()
            && host
                .split('.')
                .all(|l| !l.is_empty() && l.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-'))
    };
    host_ok && port.is_none_or(|p| p.parse::<u16>().is_ok_and(|n| n > 0))
}

/// The dotted key whose value (or line) is at byte `pos` of `text`, as TOML names it
/// (`minors."1.34".revision`, `defaults.platforms`, a table header's own name): the nearest
/// `key = …` line at or above `pos`, under the nearest `[table]` header above it. `None` before
/// any key.
fn key_at(text: &str, pos: usize) -> Option<String> {
    let pos = pos.min(text.len());
    let before = &text[..text[..pos].rfind('\n').map_or(0, |i| i + 1)];
    let line_end = text[pos..].find('\n').map_or(text.len(), |i| pos + i);
    let this_line = &text[before.len()..line_end];
    let lines = before.lines().rev();
    let mut key = None;
    for line in std::iter::once(this_line).chain(lines) {
        let t = line.trim();
        if t.starts_with('[') {
            let header = t
                .trim_start_matches('[')
                .split(']')
                .next()?
                .trim()
                .to_string();
            return Some(match key {
                Some(k) => format!("{header}.{k}"),
                None => header,
            });
        }
        if key.is_none()
            && !t.starts_with('#')
            && let Some((k, _)) = t.split_once('=')
        {
            key = Some(k.trim().to_string());
        }
    }
    key
}

/// `key: message` when the key at `span` is known and the message does not name it already
/// (`unknown field` does).
fn with_key(text: &str, span: Option<&Range<usize>>, message: String) -> String {
    if message.starts_with("unknown field") {
        return message;
    }
    match span.and_then(|s| key_at(text, s.start)) {
        Some(k) => format!("{k}: {message}"),
        None => message,
    }
}

/// Where keys are in the text, for messages.
struct Spans<'a> {
    path: &'a Path,
    text: &'a str,
    doc: toml_edit::Document<&'a str>,
}

impl Spans<'_> {
    /// An error at `span` (or without a position).
    fn err(&self, span: Option<Range<usize>>, message: String) -> ConfigError {
        error_at(self.path, self.text, span, message)
    }

    /// The span of the value (or table) at `keys`.
    fn of(&self, keys: &[&str]) -> Option<Range<usize>> {
        let mut item = self.doc.as_item();
        for k in keys {
            item = item.get(k)?;
        }
        item.span()
            .or_else(|| item.as_table().and_then(|t| t.span()))
    }

    /// The span of a key itself (for table keys like `[patches."…"]`).
    fn of_key(&self, table: &str, key: &str) -> Option<Range<usize>> {
        self.doc
            .get(table)
            .and_then(|t| t.as_table_like())
            .and_then(|t| t.get_key_value(key))
            .and_then(|(k, _)| k.span())
    }
}

/// One minor's key, for messages and spans: its own, or the `[defaults]` one it inherits.
struct Field<'a> {
    minor: &'a str,
    inherited: &'a BTreeSet<&'static str>,
}

impl Field<'_> {
    /// `minors."1.34".<field>` or `defaults.<field>`.
    fn name(&self, field: &str) -> String {
        if self.inherited.contains(field) {
            format!("defaults.{field}")
        } else {
            format!("minors.\"{}\".{field}", self.minor)
        }
    }

    /// Where `field` is written: in the minor, in `[defaults]`, or the minor's table.
    fn span(&self, s: &Spans<'_>, field: &str) -> Option<Range<usize>> {
        if self.inherited.contains(field) {
            s.of(&["defaults", field])
        } else {
            s.of(&["minors", self.minor, field])
                .or_else(|| s.of(&["minors", self.minor]))
        }
    }
}

/// Parses and validates; with `check_files`, every patch named in a series or in `[patches]` must
/// exist in `patches_dir` (a misspelt `[patches."…"]` key would otherwise silently un-guard a fix).
pub(super) fn parse_checked(
    path: &Path,
    text: &str,
    check_files: bool,
) -> Result<Config, ConfigError> {
    let mut raw: RawConfig = toml::from_str(text).map_err(|e| {
        let message = with_key(
            text,
            e.span().as_ref(),
            e.message().trim().replace('\n', " "),
        );
        error_at(path, text, e.span(), message)
    })?;
    let s = Spans {
        path,
        text,
        doc: toml_edit::Document::parse(text)
            .map_err(|e| error_at(path, text, e.span(), e.message().to_string()))?,
    };
    check_repository(&s, &raw.repository)?;
    validate_tag_scheme(&raw.tag).map_err(|m| s.err(s.of(&["tag"]), m))?;
    let base_dir = path.parent().map(Path::to_path_buf).unwrap_or_default();
    let resolve = |p: &str| -> PathBuf {
        let p = Path::new(p);
        if p.is_absolute() {
            p.to_path_buf()
        } else {
            base_dir.join(p)
        }
    };
    let patches_dir = resolve(&raw.patches_dir);
    let mut minors = BTreeMap::new();
    for (key, m) in raw.minors {
        let merged = m.merge(&raw.defaults).map_err(|field| {
            s.err(
                s.of(&["minors", &key]),
                format!(
                    "minors.\"{key}\": missing field `{field}` (set it there or in [defaults])"
                ),
            )
        })?;
        let (minor, m) = check_minor(&s, &key, merged, &raw.tag)?;
        if check_files {
            check_series_files(&s, &key, &m, &patches_dir)?;
        }
        minors.insert(minor, m);
    }
    if minors.is_empty() {
        return Err(s.err(None, "no [minors.\"1.NN\"] entries".to_string()));
    }
    check_patch_catalogue(
        &s,
        &mut raw.patches,
        check_files.then_some(patches_dir.as_path()),
    )?;
    for r in &raw.registry.insecure {
        if !is_host_port(r) {
            return Err(s.err(
                s.of(&["registry", "insecure"]),
                format!(
                    "registry.insecure entry `{r}` must be host[:port] (e.g. `127.0.0.1:5000`, no scheme or path)"
                ),
            ));
        }
    }
    let magnum_cluster_api = raw
        .accept
        .magnum_cluster_api
        .clone()
        .unwrap_or_else(|| super::DEFAULT_MAGNUM_CLUSTER_API.to_string());
    if !is_release(&magnum_cluster_api) {
        return Err(s.err(
            s.of(&["accept", "magnum_cluster_api"]),
            format!(
                "accept.magnum_cluster_api `{magnum_cluster_api}` must be a magnum-cluster-api release X.Y.Z (its PyPI version)"
            ),
        ));
    }
    let cluster_api = check_accept(&s, raw.accept)?;
    Ok(Config {
        path: path.to_path_buf(),
        upstream: raw.upstream,
        repository: raw.repository,
        tag_scheme: raw.tag,
        digest_manifest: resolve(&raw.digest_manifest),
        patches_dir,
        insecure_registries: raw.registry.insecure,
        ca_files: raw.registry.ca_files.iter().map(|p| resolve(p)).collect(),
        patches: raw.patches,
        cluster_api,
        magnum_cluster_api,
        minors,
    })
}

/// A TOML local date (no time, no offset) as a calendar date.
fn end_of_life_date(d: &toml::value::Datetime) -> Option<time::Date> {
    if d.time.is_some() || d.offset.is_some() {
        return None;
    }
    let day = d.date?;
    let month = time::Month::try_from(day.month).ok()?;
    time::Date::from_calendar_date(i32::from(day.year), month, day.day).ok()
}

/// `X.Y.Z`, each a number.
fn is_release(v: &str) -> bool {
    let parts: Vec<&str> = v.split('.').collect();
    parts.len() == 3
        && parts
            .iter()
            .all(|p| !p.is_empty() && p.bytes().all(|b| b.is_ascii_digit()))
}

/// `[accept]`: a Cluster API release `vX.Y.Z` and a Go version `X.Y.Z`, each defaulting to
/// [`super::DEFAULT_CLUSTER_API`].
fn check_accept(
    s: &Spans<'_>,
    raw: super::raw::RawAccept,
) -> Result<super::ClusterApi, ConfigError> {
    let d = super::ClusterApi::default();
    let version = raw.cluster_api.unwrap_or(d.version);
    let go = raw.cluster_api_go.unwrap_or(d.go);
    let numbers = is_release;
    if !version.strip_prefix('v').is_some_and(numbers) {
        return Err(s.err(
            s.of(&["accept", "cluster_api"]),
            format!("accept.cluster_api `{version}` must be a Cluster API release vX.Y.Z"),
        ));
    }
    if !numbers(&go) {
        return Err(s.err(
            s.of(&["accept", "cluster_api_go"]),
            format!("accept.cluster_api_go `{go}` must be a Go version X.Y.Z"),
        ));
    }
    Ok(super::ClusterApi { version, go })
}

/// `repository`: `registry/path`, no tag, no digest.
fn check_repository(s: &Spans<'_>, repository: &str) -> Result<(), ConfigError> {
    let at = || s.of(&["repository"]);
    if repository.trim().is_empty() || repository.contains(['@', ' ']) || repository.ends_with('/')
    {
        return Err(s.err(
            at(),
            format!("repository `{repository}` must be a registry/path without tag or digest"),
        ));
    }
    if repository
        .rsplit('/')
        .next()
        .unwrap_or_default()
        .contains(':')
    {
        return Err(s.err(
            at(),
            format!("repository `{repository}` must not carry a tag; the tag comes from `tag`"),
        ));
    }
    crate::base::reference::require_registry(repository).map_err(|m| s.err(at(), m))?;
    repository
        .parse::<crate::base::reference::RepositoryName>()
        .map(drop)
        .map_err(|e| s.err(at(), format!("repository {e}")))
}

/// One minor: its key, commit, upstream tag, Go version, base, platforms, test packages, patch
/// names and the tag it renders.
fn check_minor(
    s: &Spans<'_>,
    key: &str,
    merged: Merged,
    scheme: &str,
) -> Result<(Minor, MinorConfig), ConfigError> {
    let f = Field {
        minor: key,
        inherited: &merged.inherited,
    };
    let end_of_life = match &merged.end_of_life {
        None => None,
        Some(d) => Some(end_of_life_date(d).ok_or_else(|| {
            s.err(
                f.span(s, "end_of_life"),
                format!(
                    "{} `{d}` is not a date: give the day as YYYY-MM-DD (the Kubernetes release calendar's end of life), no time",
                    f.name("end_of_life")
                ),
            )
        })?),
    };
    let mut config = merged.config;
    config.end_of_life = end_of_life;
    let m = &config;
    let minor: Minor = key
        .parse()
        .map_err(|e: String| s.err(s.of(&["minors", key]), e))?;
    check_pins(s, &f, minor, m)?;
    check_base(s, &f, &m.base)?;
    check_lists(s, &f, m)?;
    check_go_overrides(s, &f, m)?;
    check_rendered_tag(s, &f, scheme, minor, m)?;
    Ok((minor, config))
}

/// A minor's pins: `commit` a 40-character lowercase hex id, `upstream_tag` a `v<minor>.N`
/// release tag, `go` a Go release (`1.25.1`, not `go1.25.1` or the language version `1.22`).
fn check_pins(
    s: &Spans<'_>,
    f: &Field<'_>,
    minor: Minor,
    m: &MinorConfig,
) -> Result<(), ConfigError> {
    let fail = |field: &str, message: String| Err(s.err(f.span(s, field), message));
    if m.commit.len() != 40
        || !m
            .commit
            .bytes()
            .all(|b| b.is_ascii_hexdigit() && !b.is_ascii_uppercase())
    {
        return fail(
            "commit",
            format!(
                "{} `{}` is not a 40-character lowercase hex commit id",
                f.name("commit"),
                m.commit
            ),
        );
    }
    let tag_minor = m
        .upstream_tag
        .strip_prefix('v')
        .and_then(|t| t.rsplit_once('.'))
        .and_then(|(mm, _)| mm.parse::<Minor>().ok());
    if tag_minor != Some(minor) {
        return fail(
            "upstream_tag",
            format!(
                "{} `{}` is not a v{minor}.N release tag",
                f.name("upstream_tag"),
                m.upstream_tag
            ),
        );
    }
    if m.go.starts_with("go")
        || m.go
            .parse::<crate::base::go_release::GoRelease>()
            .map_or(true, |r| r.major != 1)
    {
        return fail(
            "go",
            format!(
                "{} `{}` is not a Go release such as 1.25.1 (major.minor.patch: it is run as GOTOOLCHAIN=go<version>, and `go1.22` is a language version, not a toolchain)",
                f.name("go"),
                m.go
            ),
        );
    }
    Ok(())
}

/// The tag the scheme renders for a minor: a valid image tag, never the upstream tag itself.
fn check_rendered_tag(
    s: &Spans<'_>,
    f: &Field<'_>,
    scheme: &str,
    minor: Minor,
    m: &MinorConfig,
) -> Result<(), ConfigError> {
    let fail = |field: &str, message: String| Err(s.err(f.span(s, field), message));
    let rendered = render_tag(
        scheme,
        &TagInputs {
            upstream_tag: &m.upstream_tag,
            revision: m.revision,
            minor,
            series_sha256: &"0".repeat(64),
        },
    );
    if rendered == m.upstream_tag {
        return fail(
            "revision",
            format!("the tag scheme gives the upstream tag `{rendered}` itself"),
        );
    }
    if !is_valid_tag(&rendered) {
        return Err(s.err(
            s.of(&["tag"]),
            format!("the tag scheme gives `{rendered}`, not a valid image tag"),
        ));
    }
    Ok(())
}

/// `go_overrides`: module paths as the go command writes them (no spaces, no `@`, a dot in the
/// first element) and versions that are semantic versions with the `v` prefix (`v1.31.14`, a
/// pseudo-version, `+incompatible`).
fn check_go_overrides(s: &Spans<'_>, f: &Field<'_>, m: &MinorConfig) -> Result<(), ConfigError> {
    for (module, version) in &m.go_overrides {
        let elements: Vec<&str> = module.split('/').collect();
        let first = elements[0];
        if module.is_empty()
            || module.contains(|c: char| c.is_whitespace() || c == '@' || c == '\\')
            || !first.contains('.')
            || first.starts_with('.')
            || first.bytes().any(|b| b.is_ascii_uppercase())
            || elements
                .iter()
                .any(|e| e.is_empty() || *e == "." || *e == "..")
        {
            return Err(s.err(
                f.span(s, "go_overrides"),
                format!(
                    "{} `{module}` is not a Go module path such as k8s.io/kubernetes",
                    f.name("go_overrides")
                ),
            ));
        }
        let numeric = version
            .strip_prefix('v')
            .map(|v| v.split(['-', '+']).next().unwrap_or_default())
            .is_some_and(|core| {
                let parts: Vec<&str> = core.split('.').collect();
                parts.len() == 3
                    && parts
                        .iter()
                        .all(|p| !p.is_empty() && p.bytes().all(|b| b.is_ascii_digit()))
            });
        let core = version
            .strip_prefix('v')
            .and_then(|v| v.split(['-', '+']).next())
            .unwrap_or_default();
        let leading_zero = core.split('.').any(|p| p.len() > 1 && p.starts_with('0'));
        if !numeric || leading_zero || version.contains(char::is_whitespace) {
            return Err(s.err(
                f.span(s, "go_overrides"),
                format!(
                    "{} `{module}` = `{version}` is not a module version such as v1.31.14",
                    f.name("go_overrides")
                ),
            ));
        }
        // Semantic import versioning: `…/v2` takes v2.x.y; a path without a suffix takes v0 or
        // v1 (or a v2+ `+incompatible` release).
        let major: u64 = core
            .split('.')
            .next()
            .and_then(|m| m.parse().ok())
            .unwrap_or(0);
        let suffix = elements
            .last()
            .and_then(|e| e.strip_prefix('v'))
            .and_then(|n| n.parse::<u64>().ok())
            .filter(|n| *n >= 2 && elements.len() > 1);
        let fits = match suffix {
            Some(n) => major == n,
            None => major <= 1 || version.ends_with("+incompatible"),
        };
        if !fits {
            return Err(s.err(
                f.span(s, "go_overrides"),
                format!(
                    "{} `{module}` = `{version}`: a v{major} version needs the module path {} (Go's semantic import versioning)",
                    f.name("go_overrides"),
                    if major >= 2 { format!("ending in /v{major}") } else { "without a /vN suffix".into() }
                ),
            ));
        }
    }
    Ok(())
}

/// `base`: `static`, or a reference whose digest (if any) is `sha256:<64 hex>`.
fn check_base(s: &Spans<'_>, f: &Field<'_>, base: &str) -> Result<(), ConfigError> {
    if base != STATIC_BASE && (base.contains(char::is_whitespace) || base.is_empty()) {
        return Err(s.err(
            f.span(s, "base"),
            format!("{} `{base}` is not an image reference", f.name("base")),
        ));
    }
    if let Some((_, d)) = base.split_once('@')
        && !is_sha256_digest(d)
    {
        return Err(s.err(
            f.span(s, "base"),
            format!("{} digest `{d}` is not sha256:<64 hex>", f.name("base")),
        ));
    }
    Ok(())
}

/// `platforms` (non-empty, no repeats), `test_packages` (non-empty), `patches` (file names).
fn check_lists(s: &Spans<'_>, f: &Field<'_>, m: &MinorConfig) -> Result<(), ConfigError> {
    let fail = |field: &str, message: String| Err(s.err(f.span(s, field), message));
    if m.platforms.is_empty() {
        return fail("platforms", format!("{} is empty", f.name("platforms")));
    }
    let mut seen = BTreeSet::new();
    for p in &m.platforms {
        if !seen.insert(p) {
            return fail(
                "platforms",
                format!("{} lists {p} twice", f.name("platforms")),
            );
        }
    }
    if m.test_packages.is_empty() || m.test_packages.iter().any(|p| p.trim().is_empty()) {
        return fail(
            "test_packages",
            format!(
                "{} must list at least one Go package",
                f.name("test_packages")
            ),
        );
    }
    for p in &m.patches {
        if p.contains('/') || p.contains('\\') || !p.ends_with(".patch") {
            return fail(
                "patches",
                format!(
                    "{}: `{p}` must be a .patch file name inside patches_dir",
                    f.name("patches")
                ),
            );
        }
    }
    Ok(())
}

/// Every patch of a minor's series is a file in `patches_dir`.
fn check_series_files(
    s: &Spans<'_>,
    key: &str,
    m: &MinorConfig,
    patches_dir: &Path,
) -> Result<(), ConfigError> {
    for name in &m.patches {
        if !patches_dir.join(name).is_file() {
            let in_defaults = s.of(&["minors", key, "patches"]).is_none();
            let (span, field) = if in_defaults {
                (
                    s.of(&["defaults", "patches"]),
                    "defaults.patches".to_string(),
                )
            } else {
                (
                    s.of(&["minors", key, "patches"]),
                    format!("minors.\"{key}\".patches"),
                )
            };
            return Err(s.err(
                span,
                format!("{field}: {name}: no such file in {}", patches_dir.display()),
            ));
        }
    }
    Ok(())
}

/// `[patches."<file>"]`: every entry names at least one guard test and (with `patches_dir`) a
/// file that exists.
fn check_patch_catalogue(
    s: &Spans<'_>,
    patches: &mut BTreeMap<String, super::PatchInfo>,
    patches_dir: Option<&Path>,
) -> Result<(), ConfigError> {
    if let Some(dir) = patches_dir {
        for name in patches.keys() {
            if !dir.join(name).is_file() {
                return Err(s.err(
                    s.of_key("patches", name),
                    format!("patches.\"{name}\": no such file in {}", dir.display()),
                ));
            }
        }
    }
    for (name, info) in patches.iter_mut() {
        // Checked against the acceptance's scenarios by `Config::check_shown_by`.
        info.shown_by_at = (0..info.shown_by.len())
            .map(|i| {
                s.err(name_at(s, name, "shown_by", i), String::new())
                    .location
            })
            .collect();
        if info.guarded_by.is_empty() {
            return Err(s.err(
                s.of(&["patches", name]),
                format!("patches.\"{name}\".guarded_by must name at least one regression test"),
            ));
        }
        check_names(s, name, "guarded_by", &info.guarded_by)?;
        check_names(s, name, "shown_by", &info.shown_by)?;
    }
    Ok(())
}

/// Where the `i`th name of `patches."<patch>".<key>` is, else the patch's table.
fn name_at(s: &Spans<'_>, patch: &str, key: &str, i: usize) -> Option<Range<usize>> {
    s.doc
        .get("patches")
        .and_then(|t| t.get(patch))
        .and_then(|t| t.get(key))
        .and_then(|v| v.as_array())
        .and_then(|a| a.get(i))
        .and_then(|v| v.span())
        .or_else(|| s.of(&["patches", patch]))
}

/// A list of names in a patch's entry (`guarded_by`, `shown_by`) names each once, none empty.
fn check_names(s: &Spans<'_>, patch: &str, key: &str, names: &[String]) -> Result<(), ConfigError> {
    for (i, n) in names.iter().enumerate() {
        let problem = if n.trim().is_empty() {
            "an empty name".to_string()
        } else if names[..i].contains(n) {
            format!("`{n}` given twice")
        } else {
            continue;
        };
        return Err(s.err(
            name_at(s, patch, key, i),
            format!("patches.\"{patch}\".{key}: {problem}"),
        ));
    }
    Ok(())
}

/// The tag scheme uses only known placeholders and contains `{upstream_tag}` and `{revision}` or
/// `{series}`.
fn validate_tag_scheme(scheme: &str) -> Result<(), String> {
    let mut rest = scheme;
    while let Some(open) = rest.find('{') {
        let close = rest[open..]
            .find('}')
            .ok_or_else(|| format!("tag scheme `{scheme}` has an unclosed `{{`"))?;
        let name = &rest[open + 1..open + close];
        if !matches!(name, "upstream_tag" | "revision" | "minor" | "series") {
            return Err(format!(
                "tag scheme `{scheme}` uses unknown placeholder `{{{name}}}` (known: upstream_tag, revision, minor, series)"
            ));
        }
        rest = &rest[open + close + 1..];
    }
    if !scheme.contains("{upstream_tag}")
        || !(scheme.contains("{revision}") || scheme.contains("{series}"))
    {
        return Err(format!(
            "tag scheme `{scheme}` must contain {{upstream_tag}} and {{revision}} or {{series}}, so that a tag never equals the upstream tag and changes with the patch series"
        ));
    }
    Ok(())
}

/// 1-based line and column of byte `offset` in `text`.
fn line_col(text: &str, offset: usize) -> (usize, usize) {
    let before = &text[..offset.min(text.len())];
    let line = before.matches('\n').count() + 1;
    let col = before.rsplit('\n').next().map_or(0, |l| l.chars().count()) + 1;
    (line, col)
}
