//! The text every command prints, in one place: results for stdout and the wording of the
//! messages that summarise them. Pure functions from plain data to strings.

use std::path::Path;

use crate::base::util::{join, plural};
use crate::commands::upstream::{MinorStatus, UpstreamReport};
use crate::commands::verify::Finding;
use crate::config::Minor;
use crate::digest_manifest::{Entry, Signature};
use crate::pipeline::go::release::GoCurrency;
use crate::pipeline::{BuildOutcome, MinorResult};

/// `build`'s stdout line: the JSON object with `json`, else the pushed reference, else
/// `oci:<layout>:<tag>` (the image exists only in the layout).
pub fn build_result(outcome: &BuildOutcome, json: bool) -> String {
    if json {
        serde_json::to_string(outcome).expect("outcome serialises")
    } else if outcome.pushed {
        outcome.entry.image.clone()
    } else {
        format!("oci:{}:{}", outcome.layout.display(), outcome.entry.tag)
    }
}

/// The summary of a run over several minors: one row per minor (result — built, up to date,
/// failed, interrupted —, digest or cause, seconds), for stderr.
pub fn summary(results: &[MinorResult]) -> String {
    let mut t = format!(
        "{:<6} {:<11} {:<71} {:>8}\n",
        "minor", "result", "digest", "seconds"
    );
    for r in results {
        let (result, digest) = match &r.result {
            Ok(o) if o.up_to_date => ("up to date", o.entry.digest.clone()),
            Ok(o) => ("built", o.entry.digest.clone()),
            Err(crate::pipeline::Error::Interrupted(sig)) => {
                ("interrupted", format!("signal {sig}; not recorded"))
            }
            Err(e) => (
                "failed",
                format!("exit {}: {}", e.exit_code(), first_words(&e.to_string())),
            ),
        };
        t.push_str(&format!(
            "{:<6} {result:<11} {digest:<71} {:>8.1}\n",
            r.minor.to_string(),
            r.seconds
        ));
    }
    let interrupted = results
        .iter()
        .filter(|r| interrupted_by(r).is_some())
        .count();
    let failed = results.iter().filter(|r| r.result.is_err()).count() - interrupted;
    t.push_str(&format!(
        "{} {}, {failed} failed{}\n",
        results.len(),
        plural(results.len(), "minor", "s"),
        if interrupted > 0 {
            format!(", {interrupted} interrupted")
        } else {
            String::new()
        }
    ));
    t
}

/// The signal that stopped this minor's build, if one did.
pub fn interrupted_by(r: &MinorResult) -> Option<i32> {
    match r.result {
        Err(crate::pipeline::Error::Interrupted(sig)) => Some(sig),
        _ => None,
    }
}

/// The last line of a run over several minors that a signal stopped (during `minor`): what is
/// recorded, and where; `recorded` are the minors built or up to date before it.
pub fn interrupted_run(sig: i32, minor: Minor, recorded: &[Minor], record_to: &Path) -> String {
    let what = if recorded.is_empty() {
        "nothing recorded".to_string()
    } else {
        format!(
            "recorded in {}: {}",
            crate::base::util::display_rel(record_to),
            join(recorded)
        )
    };
    format!(
        "interrupted by signal {sig} during {minor}: {minor} stopped, not recorded, its tag not moved; {what}"
    )
}

/// The first 60 characters of an error line.
fn first_words(s: &str) -> String {
    match s.char_indices().nth(60) {
        Some((i, _)) => format!("{}…", &s[..i]),
        None => s.to_string(),
    }
}

/// `verify`'s stdout: one line per finding.
pub fn findings(findings: &[Finding]) -> String {
    findings.iter().map(|f| format!("{f}\n")).collect()
}

/// `verify`'s error when something does not match.
pub fn mismatches(n: usize, digest_manifest: &Path) -> String {
    format!(
        "{n} {} between the registry and {}",
        plural(n, "mismatch", "es"),
        digest_manifest.display()
    )
}

/// `patches matrix`'s error naming the minors that do not verify.
pub fn not_proven(minors: &[Minor]) -> String {
    format!(
        "{} {} not verify; see the table",
        join(minors),
        if minors.len() == 1 { "does" } else { "do" }
    )
}

/// `upstream check`'s text: per tracked minor the pin and what is newer (or moved), then the
/// released minors not tracked yet with the `pin` command that adds them.
pub fn upstream(report: &UpstreamReport) -> String {
    let mut t = String::new();
    for m in &report.minors {
        let mut state = if m.newer {
            format!(
                "{} is newer: `occm-forge pin --k8s {} --tag {}`",
                m.latest, m.minor, m.latest
            )
        } else {
            "up to date".into()
        };
        if let Some(c) = &m.moved_to {
            state.push_str(&format!(
                "; MOVED: {} now points at {c}, not the pinned {}",
                m.pinned, m.commit
            ));
        }
        if let (Some(g), Some(would)) = (&m.go, m.go_held) {
            state.push_str(&format!(
                "; Go {}{}, held by go_policy = \"upstream\" ({would} would be proposed)",
                g.go,
                if g.supported {
                    ""
                } else {
                    " is out of support"
                },
            ));
        } else if let Some(g) = m.go.as_ref().filter(|_| !m.go_proposals.is_empty()) {
            state.push_str(&go_behind(m, g));
        }
        if let Some(g) = m.go.as_ref().filter(|g| !g.refused.is_empty()) {
            let refused: Vec<String> = g.refused.iter().map(ToString::to_string).collect();
            state.push_str(&format!(
                "; the proxy lists Go {} but does not serve it",
                refused.join(", ")
            ));
        }
        if let (true, Some(d)) = (m.past_end_of_life, &m.end_of_life) {
            state.push_str(&format!(
                "; past its end of life ({d}): still built; retiring it is explicit (docs/release-flow.md, \"Retiring a minor\")"
            ));
        }
        t.push_str(&format!("{}  {}  {state}\n", m.minor, m.pinned));
    }
    for u in &report.untracked {
        t.push_str(&format!(
            "{}  not tracked  {} released: `occm-forge pin --new-minor {} --tag {}`\n",
            u.minor, u.latest, u.minor, u.latest
        ));
    }
    if let Some(why) = &report.go_unchecked {
        t.push_str(&format!("Go releases not checked: {why}\n"));
    }
    t
}

/// `upstream check`'s words on a minor with Go proposals: where its Go stands, then each
/// proposal in the order worth trying, with the `pin` command that takes it and whether a build
/// with it was accepted (`upstream check --acceptance`).
fn go_behind(m: &MinorStatus, g: &GoCurrency) -> String {
    use crate::commands::upstream::GoStep;
    let minor = m.minor;
    let each: Vec<String> = m
        .go_proposals
        .iter()
        .map(|p| {
            let (what, word) = match p.step {
                GoStep::Patch => (format!("the newest {}", p.go.line()), "patch"),
                GoStep::SupportedLine => ("a supported line".to_string(), "current"),
            };
            let proof = match &p.accepted {
                Some(at) => format!("built and accepted {at}"),
                None => "not built and accepted yet".into(),
            };
            let offered = if p.proposed { "" } else { "offered: " };
            format!(
                "{offered}{} ({what}; `occm-forge pin --k8s {minor} --go {word}`; {proof})",
                p.go
            )
        })
        .collect();
    let stands = if g.supported {
        format!("Go {} is behind its line", g.go)
    } else if m.past_end_of_life && m.go_proposals.iter().all(|p| !p.proposed) {
        format!(
            "Go {} is out of support (Go supports {}), the newest of its line, enough past end of life",
            g.go,
            g.supported_lines.join(", ")
        )
    } else {
        format!(
            "Go {} is out of support (Go supports {})",
            g.go,
            g.supported_lines.join(", ")
        )
    };
    format!("; {stands}: {}", each.join(", or "))
}

/// The one line `build` says about a minor past its end of life on `today`, `None` otherwise:
/// the date, that it still builds, and that retiring it is an explicit act.
pub fn past_end_of_life(
    minor: crate::config::Minor,
    m: &crate::config::MinorConfig,
    today: time::Date,
) -> Option<String> {
    let d = m.end_of_life.filter(|_| m.past_end_of_life(today))?;
    Some(format!(
        "{minor} is past its end of life ({d}, the Kubernetes release calendar): it is still built as images.toml says; retiring it is explicit (docs/release-flow.md, \"Retiring a minor\")"
    ))
}

/// `upstream check`'s line for a pinned tag upstream moved (`moved_to` set), naming the tag, the
/// commit it points at now and the pinned one; `config` is the images.toml as given.
pub fn moved_tag(m: &MinorStatus, moved_to: &str, config: &str) -> String {
    format!(
        "upstream moved tag {} ({}): it points at {moved_to}, {config} pins {}; find out why before re-pinning it (`occm-forge pin --k8s {} --tag {}`)",
        m.pinned, m.minor, m.commit, m.minor, m.pinned
    )
}

/// `manifest merge`'s note.
pub fn merged(minors: &[Minor], into: &Path) -> String {
    format!("merged {} into {}", join(minors), into.display())
}

/// `manifest record-signatures`' line per minor on stdout: `<minor> <repository>@<index digest>
/// signature <repository>@<bundle referrer digest> by <signer>; attested: <names>`.
pub fn signature_recorded(minor: Minor, entry: &Entry, signature: &Signature) -> String {
    let signer = signature
        .signer()
        .map(|s| s.to_string())
        .unwrap_or_else(|e| e);
    let attested: Vec<&str> = signature.attestations.keys().map(String::as_str).collect();
    format!(
        "{minor} {repo}@{} signature {repo}@{} by {signer}; attested: {}",
        entry.digest,
        signature.digest,
        if attested.is_empty() {
            "nothing".to_string()
        } else {
            attested.join(", ")
        },
        repo = entry.repository,
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_interrupted_run_says_what_is_recorded() {
        let m = |s: &str| s.parse::<Minor>().unwrap();
        let p = Path::new("images.lock.yaml");
        assert_eq!(
            interrupted_run(15, m("1.33"), &[], p),
            "interrupted by signal 15 during 1.33: 1.33 stopped, not recorded, its tag not moved; nothing recorded"
        );
        assert_eq!(
            interrupted_run(2, m("1.35"), &[m("1.33"), m("1.34")], p),
            "interrupted by signal 2 during 1.35: 1.35 stopped, not recorded, its tag not moved; recorded in images.lock.yaml: 1.33, 1.34"
        );
    }

    #[test]
    fn wording() {
        let p = Path::new("images.lock.yaml");
        assert_eq!(
            mismatches(1, p),
            "1 mismatch between the registry and images.lock.yaml"
        );
        assert_eq!(
            mismatches(3, p),
            "3 mismatches between the registry and images.lock.yaml"
        );
        let m = |s: &str| s.parse::<Minor>().unwrap();
        assert_eq!(
            not_proven(&[m("1.31")]),
            "1.31 does not verify; see the table"
        );
        assert_eq!(
            not_proven(&[m("1.31"), m("1.32")]),
            "1.31, 1.32 do not verify; see the table"
        );
    }
}
