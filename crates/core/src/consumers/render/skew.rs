//! The version-skew policy occm-forge applies, Kubernetes' own for cloud-controller-manager
//! (kubernetes.io/releases/version-skew-policy, "kube-controller-manager, kube-scheduler, and
//! cloud-controller-manager"): it must not be newer than the kube-apiserver it talks to and may
//! be at most one minor older. OCCM's minor is the minor of its tag (upstream releases one per
//! Kubernetes minor; our tags start with upstream's).
//!
//! A cluster whose minor has no build of its own is served by the newest built minor one below it
//! ([`serving`]): the day a Kubernetes minor is out and upstream's OCCM for it is not (1.37 in
//! 2026-12), its clusters run our 1.36 image, which the policy allows. Anything further is refused
//! unless the operator passes `--allow-skew`.

use crate::config::Minor;
use crate::digest_manifest::{DigestManifest, Entry};

/// How an OCCM minor stands to a cluster's minor under the policy.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Skew {
    /// The same minor.
    Same,
    /// One minor older: allowed.
    OneOlder,
    /// This many minors older (2 or more): forbidden.
    TooOld(u32),
    /// This many minors newer (1 or more): forbidden.
    Newer(u32),
}

impl Skew {
    /// The skew of OCCM `occm` on a cluster of `cluster` (majors other than the cluster's count
    /// as too old or newer by 100 minors).
    pub fn of(cluster: Minor, occm: Minor) -> Skew {
        if cluster.major != occm.major {
            return if occm > cluster {
                Skew::Newer(100)
            } else {
                Skew::TooOld(100)
            };
        }
        match cluster.minor as i64 - occm.minor as i64 {
            0 => Skew::Same,
            1 => Skew::OneOlder,
            d if d > 1 => Skew::TooOld(d as u32),
            d => Skew::Newer((-d) as u32),
        }
    }

    /// Whether the policy allows it.
    pub fn allowed(self) -> bool {
        matches!(self, Skew::Same | Skew::OneOlder)
    }

    /// `OCCM 1.35 on a 1.37 cluster: two minors older (the version-skew policy allows one)`,
    /// or for allowed ones `OCCM 1.36 on a 1.37 cluster: one minor older, which the
    /// version-skew policy allows`.
    pub fn describe(self, cluster: Minor, occm: Minor) -> String {
        let n = |k: u32| match k {
            1 => "one minor".to_string(),
            2 => "two minors".to_string(),
            k => format!("{k} minors"),
        };
        match self {
            Skew::Same => format!("OCCM {occm} on a {cluster} cluster"),
            Skew::OneOlder => format!(
                "OCCM {occm} on a {cluster} cluster: one minor older, which the version-skew policy allows"
            ),
            Skew::TooOld(k) => format!(
                "OCCM {occm} on a {cluster} cluster: {} older (the version-skew policy allows one)",
                n(k)
            ),
            Skew::Newer(k) => format!(
                "OCCM {occm} on a {cluster} cluster: {} newer than kube-apiserver (the version-skew policy forbids it)",
                n(k)
            ),
        }
    }
}

/// The entry that serves a cluster of `cluster`: its own minor's, else the newest entry of an
/// older minor of the same major (check its [`Skew`]: one older is allowed, more is not); `None`
/// when the manifest has neither.
pub fn serving(manifest: &DigestManifest, cluster: Minor) -> Option<(Minor, &Entry)> {
    if let Some(e) = manifest.images.get(&cluster) {
        return Some((cluster, e));
    }
    manifest
        .images
        .range(..cluster)
        .next_back()
        .filter(|(m, _)| m.major == cluster.major)
        .map(|(m, e)| (*m, e))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn m(s: &str) -> Minor {
        s.parse().unwrap()
    }

    #[test]
    fn one_minor_older_is_allowed_and_anything_further_is_not() {
        assert_eq!(Skew::of(m("1.37"), m("1.37")), Skew::Same);
        assert_eq!(Skew::of(m("1.37"), m("1.36")), Skew::OneOlder);
        assert_eq!(Skew::of(m("1.37"), m("1.35")), Skew::TooOld(2));
        assert_eq!(Skew::of(m("1.34"), m("1.35")), Skew::Newer(1));
        assert!(
            Skew::OneOlder.allowed() && !Skew::TooOld(2).allowed() && !Skew::Newer(1).allowed()
        );
        assert_eq!(
            Skew::TooOld(2).describe(m("1.37"), m("1.35")),
            "OCCM 1.35 on a 1.37 cluster: two minors older (the version-skew policy allows one)"
        );
    }

    #[test]
    fn a_minor_without_a_build_is_served_by_the_newest_older_one() {
        let mut manifest = DigestManifest::default();
        for minor in ["1.34", "1.36"] {
            manifest.images.insert(
                m(minor),
                crate::testing::entry(
                    minor,
                    "r.example/occm/openstack-cloud-controller-manager",
                    'a',
                ),
            );
        }
        assert_eq!(serving(&manifest, m("1.36")).map(|s| s.0), Some(m("1.36")));
        assert_eq!(serving(&manifest, m("1.37")).map(|s| s.0), Some(m("1.36")));
        assert_eq!(serving(&manifest, m("1.35")).map(|s| s.0), Some(m("1.34")));
        assert_eq!(serving(&manifest, m("1.33")).map(|s| s.0), None);
    }
}
