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
            .any(|m| m.go.as_ref().is_some_and(|g| g.proposal.is_some())),
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
                "; past its end of life (2026-10-27): still built; retiring it is explicit (README, \"Retiring a minor\")\n1.35  v1.35.0  up to date; MOVED"
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
            text.contains("1.34  v1.34.1  up to date; Go 1.25.1 is out of support (Go supports 1.26, 1.27; 1.25.14 is the newest 1.25): `occm-forge pin --k8s 1.34 --go current` moves it to 1.26.11\n"),
            "{text}"
        );
        assert!(
            text.contains("1.36  v1.36.0  up to date; Go 1.26.11 is out (pinned 1.26.2): `occm-forge pin --k8s 1.36 --go current`\n"),
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
}
