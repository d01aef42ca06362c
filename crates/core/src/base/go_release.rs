//! A Go release (`1.26.8`) as a value: read, compared, written. What the proxy serves and which
//! release a minor should use is [`crate::pipeline::go::release`].

use std::fmt;
use std::str::FromStr;

use serde::{Serialize, Serializer};

/// A Go release `1.26.8`: the Go line (`1.26`) and its minor revision. Pre-releases (`1.27rc1`)
/// are not releases here.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct GoRelease {
    /// 1.
    pub major: u32,
    /// The Go line, 26 in `1.26.8`.
    pub minor: u32,
    /// The minor revision, 8 in `1.26.8`.
    pub patch: u32,
}

impl GoRelease {
    /// Whether `other` is a release of the same Go line (`1.26.x`).
    pub fn same_line(self, other: GoRelease) -> bool {
        (self.major, self.minor) == (other.major, other.minor)
    }

    /// The line, `1.26`.
    pub fn line(self) -> String {
        format!("{}.{}", self.major, self.minor)
    }
}

impl GoRelease {
    /// Reads `1.26.8`, or with `lenient` also `1.20` (a line's first release before Go 1.21,
    /// and a go.mod `go` line) as `1.20.0`; a `go` prefix is allowed. Pre-releases, leading zeros
    /// and anything else are refused.
    fn parse(s: &str, lenient: bool) -> Result<Self, String> {
        let bad = || format!("`{s}` is not a Go release such as 1.26.8");
        let v = s.strip_prefix("go").unwrap_or(s);
        let parts: Vec<&str> = v.split('.').collect();
        let ok = |p: &&str| {
            !p.is_empty()
                && p.bytes().all(|b| b.is_ascii_digit())
                && (*p == "0" || !p.starts_with('0'))
        };
        if !(parts.len() == 3 || lenient && parts.len() == 2) || !parts.iter().all(ok) {
            return Err(bad());
        }
        let num = |p: &str| p.parse::<u32>().map_err(|_| bad());
        Ok(GoRelease {
            major: num(parts[0])?,
            minor: num(parts[1])?,
            patch: parts.get(2).map_or(Ok(0), |p| num(p))?,
        })
    }

    /// A go.mod `go` line's version or a toolchain module's (`1.22` → 1.22.0).
    pub fn parse_lenient(s: &str) -> Result<Self, String> {
        Self::parse(s, true)
    }
}

impl FromStr for GoRelease {
    type Err = String;

    /// `1.26.8` or `go1.26.8`: a toolchain release, all three numbers (`1.26` names a language
    /// version, not a release); pre-releases and leading zeros are refused.
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Self::parse(s, false)
    }
}

impl fmt::Display for GoRelease {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}.{}.{}", self.major, self.minor, self.patch)
    }
}

impl Serialize for GoRelease {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_str(self)
    }
}
