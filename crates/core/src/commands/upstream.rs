//! `occm-forge upstream check`: which upstream release tags are newer than the pins.
//!
//! From the upstream tag list (see `source::list_tags`; no GitHub API): per minor in images.toml,
//! the newest `vX.Y.Z` release tag of that minor and whether it is newer than the pinned tag; and
//! every minor above the newest tracked one that has a release; and every pinned tag that
//! upstream moved to another commit (an event of its own: `upstream check` exits 13). Pre-release
//! tags (`-rc.1`) and other tag families (`openstack-cinder-csi-…`) are ignored.

use serde::Serialize;

use crate::config::{Config, Minor};
use crate::pipeline::go::release::{GoCurrency, GoRelease};

/// One tracked minor.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct MinorStatus {
    /// The minor.
    pub minor: Minor,
    /// The tag images.toml pins.
    pub pinned: String,
    /// The commit images.toml pins for it (40 hex).
    pub commit: String,
    /// The newest release tag of that minor upstream (the pinned one when none is newer).
    pub latest: String,
    /// Whether `latest` is newer than `pinned`.
    pub newer: bool,
    /// The commit the pinned tag points at now, when upstream moved it away from the pin.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub moved_to: Option<String>,
    /// The minor's end of life from images.toml (`YYYY-MM-DD`), when it gives one.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub end_of_life: Option<String>,
    /// Whether that date lies before the day of the check (information: the minor still builds).
    pub past_end_of_life: bool,
    /// Where the minor's Go stands among the Go releases the module proxy serves; absent when
    /// the proxy's list could not be read or `go` is not a release.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub go: Option<GoCurrency>,
    /// What would be proposed for this minor's Go had images.toml not declined it
    /// (`go_policy = "upstream"`): `go.proposal` is then empty, and nothing is proposed.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub go_held: Option<GoRelease>,
    /// The Go releases this minor could move to, in the order they are worth trying (see
    /// [`go_proposals`]); empty when its Go is current, held, or could not be checked.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub go_proposals: Vec<GoProposal>,
}

/// Which step a [`GoProposal`] takes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum GoStep {
    /// The newest revision of the minor's own Go line (`pin --go patch`): security fixes only.
    Patch,
    /// The newest revision of the oldest supported Go line, from a line out of support
    /// (`pin --go current`): what Kubernetes does for its supported releases (KEP-3744, "Stay on
    /// supported Go versions"; the go.mod of upstream untouched, only the toolchain that builds
    /// the image).
    SupportedLine,
}

/// One Go release a minor could be built with instead of its pinned one.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct GoProposal {
    /// The release (the module proxy serves it).
    pub go: GoRelease,
    /// Which step it is.
    pub step: GoStep,
    /// Whether it counts as the minor being behind (`go_behind`, exit 11): false for the move to
    /// a supported line of a minor past its end of life, which is offered, not asked for.
    pub proposed: bool,
    /// When a build of this minor's pinned (or newer) tag with this Go was accepted, as the
    /// acceptance reports say (`recorded_at`, RFC 3339; see [`mark_accepted`]); `None`: not
    /// built and accepted yet.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub accepted: Option<String>,
}

/// A build `accept` accepted, as its report (docs/acceptance.json) records it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AcceptedBuild {
    /// The minor.
    pub minor: Minor,
    /// The upstream tag built.
    pub upstream_tag: String,
    /// The Go it was built with.
    pub go: GoRelease,
    /// When the report was recorded (RFC 3339).
    pub recorded_at: String,
}

/// The Go releases worth trying for a minor whose Go stands at `c`, best first: for a minor
/// still supported on a Go line out of support, the move to a supported line (KEP-3744) and then
/// the newest patch of its own line as the fallback; for a minor past its end of life, the newest
/// patch of its own line (proposed) and the move to a supported line (offered only); on a
/// supported line, the newest patch of it.
pub fn go_proposals(c: &GoCurrency, past_end_of_life: bool) -> Vec<GoProposal> {
    let patch = c.newer_patch.filter(|p| !c.refused.contains(p));
    let line = c.proposal.filter(|p| Some(*p) != patch && !c.supported);
    let mk = |go, step, proposed| GoProposal {
        go,
        step,
        proposed,
        accepted: None,
    };
    let mut out = Vec::new();
    if past_end_of_life {
        out.extend(patch.map(|p| mk(p, GoStep::Patch, true)));
        out.extend(line.map(|p| mk(p, GoStep::SupportedLine, false)));
    } else {
        out.extend(line.map(|p| mk(p, GoStep::SupportedLine, true)));
        out.extend(patch.map(|p| mk(p, GoStep::Patch, true)));
    }
    out
}

/// The accepted builds in an acceptance report file (`accept --output`'s `.json` beside the
/// document, docs/acceptance.json: an array of reports, each with `minor`, `upstream_tag`, `go`,
/// `verdict` and `recorded_at`); reports not accepted, or without `recorded_at`, are left out.
///
/// Errors: the text is not such an array (serde_json's message).
pub fn accepted_builds(json: &str) -> Result<Vec<AcceptedBuild>, serde_json::Error> {
    #[derive(serde::Deserialize)]
    struct Report {
        minor: Minor,
        upstream_tag: String,
        go: Option<String>,
        verdict: String,
        recorded_at: Option<String>,
    }
    let reports: Vec<Report> = serde_json::from_str(json)?;
    Ok(reports
        .into_iter()
        .filter(|r| r.verdict == "accepted")
        .filter_map(|r| {
            Some(AcceptedBuild {
                minor: r.minor,
                upstream_tag: r.upstream_tag,
                go: r.go?.parse().ok()?,
                recorded_at: r.recorded_at?,
            })
        })
        .collect())
}

/// Marks each Go proposal of `report` that `accepted` holds a build of (same minor and Go, and
/// the minor's pinned or newest tag) with the time it was accepted.
pub fn mark_accepted(report: &mut UpstreamReport, accepted: &[AcceptedBuild]) {
    for m in &mut report.minors {
        for p in &mut m.go_proposals {
            p.accepted = accepted
                .iter()
                .filter(|a| {
                    a.minor == m.minor
                        && a.go == p.go
                        && (a.upstream_tag == m.pinned || a.upstream_tag == m.latest)
                })
                .map(|a| a.recorded_at.clone())
                .max();
        }
    }
}

/// A minor upstream has released but images.toml does not track.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Untracked {
    /// The minor.
    pub minor: Minor,
    /// Its newest release tag.
    pub latest: String,
}

/// The result of a check.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct UpstreamReport {
    /// Whether anything is new (a newer patch tag or an untracked newer minor).
    pub new: bool,
    /// Whether a pinned tag points at another commit than its pin (see `MinorStatus::moved_to`).
    pub moved: bool,
    /// Whether a minor's Go has a newer revision of its line or is out of support (see
    /// `MinorStatus::go`; `pin --k8s <minor> --go current` moves it).
    pub go_behind: bool,
    /// Why the Go releases could not be checked (the proxy's list could not be read); absent
    /// when they were. `go_behind` is then `false` for want of knowing, not because nothing is
    /// new.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub go_unchecked: Option<String>,
    /// Per tracked minor.
    pub minors: Vec<MinorStatus>,
    /// Newer minors not in images.toml.
    pub untracked: Vec<Untracked>,
}

/// `v1.34.2` → (1, 34, 2); anything else (pre-releases, other tag families) → `None`.
pub fn release_version(tag: &str) -> Option<(u32, u32, u32)> {
    let mut parts = tag.strip_prefix('v')?.split('.');
    let v = (
        parts.next()?.parse().ok()?,
        parts.next()?.parse().ok()?,
        parts.next()?.parse().ok()?,
    );
    parts.next().is_none().then_some(v)
}

/// Compares the pins with the upstream tags (name, commit) on `today` (UTC; for the end of life),
/// and each minor's Go with `go`: the minor's Go → where it stands (`go::release`; `None` when the
/// proxy's releases could not be listed).
pub fn check(
    config: &Config,
    tags: &[(String, String)],
    go: Option<&dyn Fn(GoRelease) -> GoCurrency>,
    today: time::Date,
) -> UpstreamReport {
    let mut releases: Vec<((u32, u32, u32), &str)> = tags
        .iter()
        .filter_map(|(t, _)| release_version(t).map(|v| (v, t.as_str())))
        .collect();
    releases.sort();
    let newest_of = |minor: Minor| {
        releases
            .iter()
            .rev()
            .find(|((a, b, _), _)| *a == minor.major && *b == minor.minor)
            .map(|(v, t)| (*v, t.to_string()))
    };
    let mut minors = Vec::new();
    for (minor, m) in &config.minors {
        let pinned = release_version(&m.upstream_tag);
        let (latest, newer) = match newest_of(*minor) {
            Some((v, t)) if pinned.is_none_or(|p| v > p) => (t, true),
            _ => (m.upstream_tag.clone(), false),
        };
        let moved_to = tags
            .iter()
            .find(|(t, c)| *t == m.upstream_tag && *c != m.commit)
            .map(|(_, c)| c.clone());
        let mut currency = go.and_then(|judge| Some(judge(m.go.parse().ok()?)));
        let held = match &mut currency {
            Some(c) if m.go_policy == crate::config::GoPolicy::Upstream => c.proposal.take(),
            _ => None,
        };
        let go_proposals = match (&currency, held) {
            (Some(c), None) => go_proposals(c, m.past_end_of_life(today)),
            _ => Vec::new(),
        };
        minors.push(MinorStatus {
            minor: *minor,
            pinned: m.upstream_tag.clone(),
            commit: m.commit.clone(),
            latest,
            newer,
            moved_to,
            end_of_life: m.end_of_life.map(|d| d.to_string()),
            past_end_of_life: m.past_end_of_life(today),
            go: currency,
            go_held: held,
            go_proposals,
        });
    }
    let newest_tracked = config.minors.keys().max().copied();
    let mut untracked: Vec<Untracked> = Vec::new();
    for ((a, b, _), _) in &releases {
        let minor = Minor {
            major: *a,
            minor: *b,
        };
        if newest_tracked.is_some_and(|n| minor > n) && !untracked.iter().any(|u| u.minor == minor)
        {
            let (_, latest) = newest_of(minor).expect("a release of this minor exists");
            untracked.push(Untracked { minor, latest });
        }
    }
    let new = minors.iter().any(|m| m.newer) || !untracked.is_empty();
    UpstreamReport {
        new,
        moved: minors.iter().any(|m| m.moved_to.is_some()),
        go_behind: minors
            .iter()
            .any(|m| m.go_proposals.iter().any(|p| p.proposed)),
        go_unchecked: None,
        minors,
        untracked,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn two_minors() -> Config {
        crate::config::parse(
            std::path::Path::new("/x/images.toml"),
            r#"
repository = "r.example/o/occm"
[minors."1.34"]
upstream_tag = "v1.34.1"
commit = "63ec67a04b40fee4ff43fec11c3d31f2a90c9ad2"
go = "1.25.1"
end_of_life = 2026-10-27
base = "static"
platforms = ["linux/amd64"]
revision = 1
patches = []
test_packages = ["./pkg/openstack/"]
[minors."1.35"]
upstream_tag = "v1.35.0"
commit = "a031201ff26f3df433192b91df2be0e7d50acb70"
go = "1.25.5"
end_of_life = 2027-02-28
base = "static"
platforms = ["linux/amd64"]
revision = 1
patches = []
test_packages = ["./pkg/openstack/"]
"#,
        )
        .unwrap()
    }

    #[test]
    fn finds_newer_patch_tags_and_untracked_minors() {
        let cfg = two_minors();
        let tags = [
            "v1.34.0",
            "v1.34.1",
            "v1.34.10",
            "v1.34.2",
            "v1.35.0",
            "v1.36.0-rc.1",
            "v1.36.0",
            "v1.36.1",
            "openstack-cinder-csi-2.36.0",
            "1.12.0",
        ];
        let tags: Vec<(String, String)> = tags
            .iter()
            .map(|t| (t.to_string(), "0".repeat(40)))
            .collect();
        let today = time::macros::date!(2026 - 12 - 04);
        let r = check(&cfg, &tags, None, today);
        assert!(r.new);
        assert_eq!(
            r.minors[0].latest, "v1.34.10",
            "numeric, not lexical, order"
        );
        assert!(r.minors[0].newer);
        assert!(!r.minors[1].newer);
        // End of life is information: 1.34 is past it on 2026-12-04, 1.35 is not.
        assert!(r.minors[0].past_end_of_life && !r.minors[1].past_end_of_life);
        assert_eq!(r.minors[0].end_of_life.as_deref(), Some("2026-10-27"));
        assert!(
            crate::commands::report::upstream(&r).contains(
                "; past its end of life (2026-10-27): still built; retiring it is explicit (docs/release-flow.md, \"Retiring a minor\")\n1.35  v1.35.0  up to date; MOVED"
            ),
            "{}",
            crate::commands::report::upstream(&r)
        );
        assert!(
            !check(&cfg, &tags, None, time::macros::date!(2026 - 10 - 27)).minors[0]
                .past_end_of_life
        );
        assert_eq!(
            r.untracked,
            vec![Untracked {
                minor: "1.36".parse().unwrap(),
                latest: "v1.36.1".into()
            }]
        );
    }

    #[test]
    fn a_pinned_tag_upstream_moved_is_its_own_event() {
        let cfg = two_minors();
        let today = time::macros::date!(2026 - 12 - 04);
        let pinned = |t: &str, c: &str| (t.to_string(), c.to_string());
        let r = check(
            &cfg,
            &[
                pinned("v1.34.1", "63ec67a04b40fee4ff43fec11c3d31f2a90c9ad2"),
                pinned("v1.35.0", "a031201ff26f3df433192b91df2be0e7d50acb70"),
            ],
            None,
            today,
        );
        assert!(!r.new && !r.moved);
        assert_eq!(r.minors[0].moved_to, None);
        let r = check(
            &cfg,
            &[
                pinned("v1.34.1", &"1".repeat(40)),
                pinned("v1.35.0", "a031201ff26f3df433192b91df2be0e7d50acb70"),
            ],
            None,
            today,
        );
        assert_eq!(
            r.minors[0].moved_to.as_deref(),
            Some("1111111111111111111111111111111111111111")
        );
        assert!(r.moved && !r.new);
    }

    #[test]
    fn names_each_minor_whose_go_is_behind() {
        let cfg = crate::config::parse(
            std::path::Path::new("/x/images.toml"),
            r#"
repository = "r.example/o/occm"
[defaults]
base = "static"
platforms = ["linux/amd64"]
patches = []
test_packages = ["./pkg/openstack/"]
[minors."1.34"]
upstream_tag = "v1.34.1"
commit = "63ec67a04b40fee4ff43fec11c3d31f2a90c9ad2"
go = "1.25.1"
revision = 1
[minors."1.36"]
upstream_tag = "v1.36.0"
commit = "bae07f4939caf612e71c43a3a65eaa42cc2bfbae"
go = "1.26.2"
revision = 1
[minors."1.37"]
upstream_tag = "v1.37.0"
commit = "a031201ff26f3df433192b91df2be0e7d50acb70"
go = "1.27.4"
revision = 1
[minors."1.35"]
upstream_tag = "v1.35.0"
commit = "a031201ff26f3df433192b91df2be0e7d50acb70"
go = "1.25.5"
revision = 1
go_policy = "upstream"
"#,
        )
        .unwrap();
        let served: Vec<GoRelease> = [
            "1.25.0", "1.25.1", "1.25.14", "1.26.0", "1.26.2", "1.26.11", "1.27.0", "1.27.4",
        ]
        .iter()
        .map(|v| v.parse().unwrap())
        .collect();
        let today = time::macros::date!(2026 - 12 - 05);
        let judge = |go| crate::pipeline::go::release::currency(go, &served);
        let r = check(&cfg, &[], Some(&judge), today);
        assert!(r.go_behind && !r.new);
        let text = crate::commands::report::upstream(&r);
        assert!(
            text.contains("1.34  v1.34.1  up to date; Go 1.25.1 is out of support (Go supports 1.26, 1.27): 1.26.11 (a supported line; `occm-forge pin --k8s 1.34 --go current`; not built and accepted yet), or 1.25.14 (the newest 1.25; `occm-forge pin --k8s 1.34 --go patch`; not built and accepted yet)\n"),
            "{text}"
        );
        assert!(
            text.contains("1.36  v1.36.0  up to date; Go 1.26.2 is behind its line: 1.26.11 (the newest 1.26; `occm-forge pin --k8s 1.36 --go patch`; not built and accepted yet)\n"),
            "{text}"
        );
        assert!(text.contains("1.37  v1.37.0  up to date\n"), "{text}");
        assert!(
            text.contains("1.35  v1.35.0  up to date; Go 1.25.5 is out of support, held by go_policy = \"upstream\" (1.26.11 would be proposed)\n"),
            "{text}"
        );
        // A held minor alone is nothing new.
        let mut held = cfg.clone();
        held.minors.retain(|m, _| m.to_string() == "1.35");
        assert!(!check(&held, &[], Some(&judge), today).go_behind);
        // Without the proxy's list nothing is said of Go, and nothing is behind.
        let r = check(&cfg, &[], None, today);
        assert!(!r.go_behind);
        assert!(r.minors.iter().all(|m| m.go.is_none()));
    }

    /// A supported minor on a Go line out of support is offered the supported line first
    /// (KEP-3744) and its own line's patch as the fallback; a minor past its end of life is asked
    /// for its line's patch only, and once on it, is not behind; an accepted build marks its
    /// proposal.
    #[test]
    fn proposes_both_steps_marks_accepted_ones_and_asks_less_of_a_minor_past_end_of_life() {
        let served: Vec<GoRelease> = [
            "1.25.0", "1.25.1", "1.25.14", "1.26.0", "1.26.2", "1.26.11", "1.27.0", "1.27.4",
        ]
        .iter()
        .map(|v| v.parse().unwrap())
        .collect();
        let judge = |go| crate::pipeline::go::release::currency(go, &served);
        let cfg = two_minors();
        let today = time::macros::date!(2026 - 12 - 07);
        let mut r = check(&cfg, &[], Some(&judge), today);
        let steps = |m: &MinorStatus| -> Vec<(String, GoStep, bool)> {
            m.go_proposals
                .iter()
                .map(|p| (p.go.to_string(), p.step, p.proposed))
                .collect()
        };
        // 1.34 is past its end of life (2026-10-27), 1.35 is not.
        assert_eq!(
            steps(&r.minors[0]),
            [
                ("1.25.14".into(), GoStep::Patch, true),
                ("1.26.11".into(), GoStep::SupportedLine, false)
            ]
        );
        assert_eq!(
            steps(&r.minors[1]),
            [
                ("1.26.11".into(), GoStep::SupportedLine, true),
                ("1.25.14".into(), GoStep::Patch, true)
            ]
        );
        let json = r#"[
          {"minor": "1.35", "upstream_tag": "v1.35.0", "go": "1.26.11", "verdict": "accepted", "recorded_at": "2026-12-07T08:00:00Z"},
          {"minor": "1.35", "upstream_tag": "v1.35.0", "go": "1.25.14", "verdict": "refused", "recorded_at": "2026-12-07T08:10:00Z"},
          {"minor": "1.34", "upstream_tag": "v1.33.9", "go": "1.25.14", "verdict": "accepted", "recorded_at": "2026-12-07T08:20:00Z"}
        ]"#;
        mark_accepted(&mut r, &accepted_builds(json).unwrap());
        let accepted: Vec<Option<&str>> = r
            .minors
            .iter()
            .flat_map(|m| m.go_proposals.iter().map(|p| p.accepted.as_deref()))
            .collect();
        assert_eq!(
            accepted,
            [None, None, Some("2026-12-07T08:00:00Z"), None],
            "another tag's build and a refused one mark nothing"
        );
        let text = crate::commands::report::upstream(&r);
        assert!(
            text.contains("1.26.11 (a supported line; `occm-forge pin --k8s 1.35 --go current`; built and accepted 2026-12-07T08:00:00Z), or 1.25.14"),
            "{text}"
        );
        // On the newest patch of its line, a minor past its end of life is not behind; the
        // supported line is still offered.
        let mut eol = cfg.clone();
        eol.minors.retain(|m, _| m.to_string() == "1.34");
        eol.minors.values_mut().next().unwrap().go = "1.25.14".into();
        let r = check(&eol, &[], Some(&judge), today);
        assert!(!r.go_behind);
        let text = crate::commands::report::upstream(&r);
        assert!(
            text.contains("Go 1.25.14 is out of support (Go supports 1.26, 1.27), the newest of its line, enough past end of life: offered: 1.26.11 (a supported line;"),
            "{text}"
        );
        assert!(accepted_builds("{}").is_err());
    }
}
