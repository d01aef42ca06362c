//! `occm-forge doctor`: the preflight checks of `build` ([`crate::pipeline::preflight`]) for the
//! minors asked for, made at once and printed as a table — what is there, and for what is not,
//! the one-line fix — so that a new user learns in seconds what to install.

use crate::pipeline::acceptance::Acceptance;
use crate::pipeline::plan::{BaseSpec, BuildPlan};
use crate::pipeline::preflight::{self, Check, Need};
use crate::registry::Registry;

/// The checks `build` would make for each of `plans` (with their `--push` and `--accept`), the
/// base of each, and the signing key's (`sign_key`: what loading it said), each check once
/// (a check two minors share, such as the cache's, is listed for the first).
pub async fn doctor(
    plans: &[BuildPlan],
    registry: &dyn Registry,
    acceptance: Option<&dyn Acceptance>,
    sign_key: Option<Result<String, String>>,
) -> Vec<Check> {
    let mut all: Vec<Check> = Vec::new();
    // One row per check: a later minor's same check (the cache, Go itself) is not listed again.
    let add = |c: Check, all: &mut Vec<Check>| {
        if !all.iter().any(|a| a.name == c.name && a.need == c.need) {
            all.push(c);
        }
    };
    for plan in plans {
        for c in preflight::checks(plan, registry).await {
            add(c, &mut all);
        }
        if let BaseSpec::Image(r) = &plan.base {
            let name = format!("base {}", plan.base_text);
            let c = match crate::registry::pull::check_base(
                registry,
                r,
                &plan.base_text,
                &plan.platforms,
                plan.allow_unpinned_base,
            )
            .await
            {
                Ok(()) => Check::ok(
                    name,
                    Need::Build,
                    format!("an image manifest for {}", plan.platform_names().join(", ")),
                ),
                Err(e) => Check::failed(
                    name,
                    Need::Build,
                    e.to_string(),
                    "pin a base that has every platform (`occm-forge pin`), or build with --base static",
                    7,
                ),
            };
            add(c, &mut all);
        }
        if let Some(a) = acceptance.filter(|_| plan.accept) {
            for c in tokio::task::block_in_place(|| a.prerequisites(plan)) {
                add(c, &mut all);
            }
        }
    }
    match sign_key {
        Some(Ok(found)) => add(Check::ok("signing key", Need::Sign, found), &mut all),
        Some(Err(cause)) => add(
            Check::failed(
                "signing key",
                Need::Sign,
                cause,
                "give cosign's key file (`cosign generate-key-pair`) with its password in COSIGN_PASSWORD",
                2,
            ),
            &mut all,
        ),
        None => {}
    }
    all
}

/// The checks as a table: `CHECK`, `FOR`, `STATUS` (`ok` or `MISSING`) and what was found or,
/// for a missing one, its cause and fix.
pub fn table(checks: &[Check]) -> String {
    let rows: Vec<[String; 4]> = checks
        .iter()
        .map(|c| {
            let (status, detail) = match &c.status {
                Ok(found) => ("ok", found.clone()),
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
