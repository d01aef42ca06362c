//! `occm-forge doctor`: the preflight checks of `build` ([`crate::pipeline::preflight`]) for the
//! minors asked for, made at once and printed as a table — what is there, and for what is not,
//! the one-line fix — so that a new user learns in seconds what to install.

use crate::pipeline::acceptance::Acceptance;
use crate::pipeline::plan::{BaseSpec, BuildPlan};
use crate::pipeline::preflight::{self, Check, Need};

use crate::registry::Registry;

/// The checks `build` would make for each of `plans` (with their `--push` and `--accept`), the
/// base of each (the bases checked side by side, each once), and the signing key's (`sign_key`:
/// what loading it said). A check several minors share is one row (the cache's), and a row that
/// belongs to some minors names them (`Go toolchain go1.25.1 (1.33, 1.34)`); rows come in the
/// order build, `--push`, `--accept`, `--sign-key`.
pub async fn doctor(
    plans: &[BuildPlan],
    registry: &dyn Registry,
    acceptance: Option<&dyn Acceptance>,
    sign_key: Option<Result<String, String>>,
) -> Vec<Check> {
    // (check, the minors it was made for), one per name and need.
    let mut rows: Vec<(Check, Vec<String>)> = Vec::new();
    let mut add = |c: Check, minor: Option<String>| match rows
        .iter_mut()
        .find(|(a, _)| a.name == c.name && a.need == c.need)
    {
        Some((kept, minors)) => {
            // A minor that needs more (room for another Go) says so over one that does not.
            if kept.status.is_ok() && c.status.is_err() {
                *kept = c;
            }
            minors.extend(minor);
        }
        None => rows.push((c, minor.into_iter().collect())),
    };
    for plan in plans {
        for c in crate::pipeline::prerequisites(plan, registry, acceptance).await {
            add(c, Some(plan.minor.to_string()));
        }
        add(preflight::output_check(&plan.output), None);
    }
    for (mut c, minors) in bases(plans, registry).await {
        // Each base its own row, named by the minors it is the base of.
        c.name = format!("base ({})", minors.join(", "));
        add(c, None);
    }
    match sign_key {
        Some(Ok(found)) => add(Check::ok("signing key", Need::Sign, found), None),
        Some(Err(cause)) => add(
            Check::failed(
                "signing key",
                Need::Sign,
                cause,
                "give cosign's key file (`cosign generate-key-pair`) with its password in COSIGN_PASSWORD",
                2,
            ),
            None,
        ),
        None => {}
    }
    let mut all: Vec<Check> = rows
        .into_iter()
        .map(|(mut c, minors)| {
            let own = c.name.starts_with("Go toolchain");
            if own && !minors.is_empty() {
                c.name = format!("{} ({})", c.name, minors.join(", "));
            }
            c
        })
        .collect();
    in_order(&mut all);
    all
}

/// Sorts `checks` (stably) by what needs them (build, `--push`, `--accept`, `--sign-key`), and
/// the build's by what they are about: this machine (cache, room, go), then the Go toolchains
/// (in the order of the minors asked for), `--output`, the bases; so the rows of one kind stand
/// together whatever minor first made them.
fn in_order(checks: &mut [Check]) {
    checks.sort_by_key(|c| {
        let need = match c.need {
            Need::Build => 0,
            Need::Push => 1,
            Need::Accept => 2,
            Need::Sign => 3,
        };
        let kind = if c.name.starts_with("Go toolchain") {
            1
        } else if c.name.contains("--output") {
            2
        } else if c.name.starts_with("base") {
            3
        } else {
            0
        };
        (need, kind)
    });
}

/// Each pulled base of `plans` checked once, side by side ([`crate::registry::pull::check_base`]),
/// with the minors it is the base of.
async fn bases(plans: &[BuildPlan], registry: &dyn Registry) -> Vec<(Check, Vec<String>)> {
    let mut distinct: Vec<(&BuildPlan, Vec<String>)> = Vec::new();
    for plan in plans {
        if !matches!(plan.base, BaseSpec::Image(_)) {
            continue;
        }
        match distinct
            .iter_mut()
            .find(|(p, _)| p.base_text == plan.base_text && p.platforms == plan.platforms)
        {
            Some((_, minors)) => minors.push(plan.minor.to_string()),
            None => distinct.push((plan, vec![plan.minor.to_string()])),
        }
    }
    let checks = distinct.iter().map(|(plan, _)| base_check(plan, registry));
    futures::future::join_all(checks)
        .await
        .into_iter()
        .zip(distinct.iter().map(|(_, m)| m.clone()))
        .collect()
}

/// Whether `plan`'s base gives an image for each of its platforms
/// ([`crate::pipeline::base_resolves`], as the build's preflight asks), and if not, what to do by
/// the cause: the registry unreachable, credentials, or the base itself.
async fn base_check(plan: &BuildPlan, registry: &dyn Registry) -> Check {
    use crate::registry::ErrorKind;
    use crate::registry::pull::PullError;
    match crate::pipeline::base_resolves(plan, registry).await {
        Ok(()) => Check::ok(
            "base",
            Need::Build,
            format!(
                "{}: an image for {}",
                plan.base_text,
                plan.platform_names().join(", ")
            ),
        ),
        Err(e) => {
            let fix = match &e {
                PullError::Registry(r) if r.kind == ErrorKind::Auth => {
                    "log in to its registry (`docker login`, or --registry-config)"
                }
                PullError::Registry(_) => {
                    "check that its registry is reachable from here (HTTPS_PROXY, NO_PROXY), or pass --base static (to doctor and build) for the built-in base"
                }
                _ => {
                    "pin a base that has every platform (`occm-forge pin --k8s <minor>`), or pass --base static"
                }
            };
            Check::failed("base", Need::Build, e.to_string(), fix, 7)
        }
    }
}

/// The checks as a table: `CHECK`, `FOR`, `STATUS` (`ok`, `low` for one that passed with a
/// warning, or `MISSING`) and what was found or,
/// for a missing one, its cause and fix.
pub fn table(checks: &[Check]) -> String {
    let rows: Vec<[String; 4]> = checks
        .iter()
        .map(|c| {
            let (status, detail) = match &c.status {
                Ok(_) if c.warning.is_some() => ("low", c.warning.clone().unwrap_or_default()),
                Ok(found) => ("ok", found.clone()),
                Err(p) if p.fix.is_empty() => ("MISSING", p.cause.clone()),
                Err(p) => ("MISSING", format!("{}; {}", p.cause, p.fix)),
            };
            [
                c.name.clone(),
                c.need.to_string(),
                status.to_string(),
                detail,
            ]
        })
        .collect();
    let header = ["CHECK", "FOR", "STATUS", "DETAIL"].map(str::to_string);
    let width = |i: usize| {
        rows.iter()
            .chain(std::iter::once(&header))
            .map(|r| r[i].chars().count())
            .max()
            .unwrap_or(0)
    };
    let widths = [width(0), width(1), width(2)];
    std::iter::once(&header)
        .chain(&rows)
        .map(|r| {
            format!(
                "{:w0$}  {:w1$}  {:w2$}  {}\n",
                r[0],
                r[1],
                r[2],
                r[3],
                w0 = widths[0],
                w1 = widths[1],
                w2 = widths[2]
            )
        })
        .collect()
}

/// The exit status of a doctor run: 0 when every check passed, else the first failed one's
/// ([`preflight::PreflightError::exit_code`]).
pub fn exit_code(checks: &[Check]) -> u8 {
    match preflight::PreflightError::of(checks.to_vec()) {
        Ok(()) => 0,
        Err(e) => e.exit_code(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rows_of_one_kind_stand_together_whichever_minor_made_them_first() {
        let ok = |name: &str, need| Check::ok(name, need, "fine");
        let mut checks = vec![
            ok("cache directory", Need::Build),
            ok("go", Need::Build),
            ok("Go toolchain go1.22.12 (1.31)", Need::Build),
            ok("room in --output", Need::Build),
            ok("--output", Need::Build),
            ok("helm", Need::Accept),
            ok("Go toolchain go1.23.12 (1.32)", Need::Build),
            ok("push rights", Need::Push),
            ok("base (1.31, 1.32)", Need::Build),
        ];
        in_order(&mut checks);
        let names: Vec<&str> = checks.iter().map(|c| c.name.as_str()).collect();
        assert_eq!(
            names,
            [
                "cache directory",
                "go",
                "Go toolchain go1.22.12 (1.31)",
                "Go toolchain go1.23.12 (1.32)",
                "room in --output",
                "--output",
                "base (1.31, 1.32)",
                "push rights",
                "helm",
            ]
        );
    }

    #[test]
    fn the_table_lines_up_and_says_what_to_do() {
        let checks = vec![
            Check::ok("go", Need::Build, "go1.26.8 on PATH"),
            Check::failed(
                "helm",
                Need::Accept,
                "no helm on PATH",
                "install helm v3",
                16,
            ),
        ];
        assert_eq!(
            table(&checks),
            "CHECK  FOR       STATUS   DETAIL\n\
             go     build     ok       go1.26.8 on PATH\n\
             helm   --accept  MISSING  no helm on PATH; install helm v3\n"
        );
        assert_eq!(exit_code(&checks), 16);
        assert_eq!(exit_code(&checks[..1]), 0);
    }
}
