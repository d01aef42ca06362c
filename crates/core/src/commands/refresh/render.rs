//! The text `patches edit` and `patches export` print: where the edit stands, what changed, and
//! the exact commands to run next.

use std::fmt::Write;

use super::{EditReport, ExportReport, Step, Written};
use crate::config::Config;

/// The edit's state, one line per patch, and what to do next. `flags` is appended to every
/// occm-forge command shown (e.g. ` --config my/images.toml`).
pub fn render_edit(report: &EditReport, flags: &str) -> String {
    let s = &report.state;
    let minor = s.minor;
    let mut out = format!(
        "{minor}: {} ({}) in {}, branch {}\n",
        s.upstream_tag,
        &s.base[..12],
        report.dir.display(),
        report.branch
    );
    let width = s.patches.iter().map(|p| p.name.len()).max().unwrap_or(0);
    for p in &s.patches {
        let step = match &p.step {
            Step::Pending => "not applied yet".to_string(),
            Step::Applied => "applied".to_string(),
            Step::ThreeWay { files } => format!("applied three-way ({})", files.join("; ")),
            Step::AlreadyUpstream => format!(
                "already upstream in {}: no commit; drop it from the minor's series",
                s.upstream_tag
            ),
            Step::Conflict { files } if files.is_empty() => "STOPPED: does not apply".to_string(),
            Step::Conflict { files } => format!(
                "CONFLICT in {}",
                files
                    .iter()
                    .map(|f| format!("{} (markers at line {})", f.path, f.line))
                    .collect::<Vec<_>>()
                    .join(", ")
            ),
            Step::Resolved => "resolved and committed".to_string(),
        };
        let _ = writeln!(out, "  {:width$}  {step}", p.name);
    }
    let dir = report.dir.display();
    let export = format!("occm-forge patches export --k8s {minor}{flags}");
    let Some(i) = s.stopped_at() else {
        let _ = write!(
            out,
            "\nEvery patch is committed. Review or amend them, one commit per patch:\n  cd {dir}\n  git log -p {tag}..\n  git rebase -i {tag}    # edit, reword; keep one commit per patch\nthen write the series back:\n  {export}\n",
            tag = s.upstream_tag
        );
        return out;
    };
    let name = &s.patches[i].name;
    let _ = writeln!(out, "\n{}", report.stopped.as_deref().unwrap_or_default());
    let _ = writeln!(out, "\nNext:\n  cd {dir}");
    match &s.patches[i].step {
        Step::Conflict { files } if !files.is_empty() => {
            for f in files {
                let _ = writeln!(
                    out,
                    "  # resolve {}: HEAD is upstream plus the earlier patches, the part between ||||||| and ======= is what {name} was made against, the last part is the patch",
                    f.path
                );
            }
            let paths: Vec<&str> = files.iter().map(|f| f.path.as_str()).collect();
            let _ = writeln!(out, "  git add {}", paths.join(" "));
        }
        _ => {
            let path = report
                .stopped_patch
                .as_ref()
                .map(|p| p.display().to_string())
                .unwrap_or_else(|| name.clone());
            let _ = writeln!(
                out,
                "  # apply {name} by hand (e.g. git apply --reject {path}, then fix the .rej hunks and delete the .rej files)\n  git add <the files>"
            );
        }
    }
    let _ = write!(
        out,
        "  occm-forge patches edit --k8s {minor}{flags} --continue\nthe resolution is committed as {name} with the patch's author and message (or commit it yourself first: your commit's message then replaces the patch's); when every patch is committed:\n  {export}\n"
    );
    out
}

/// What `patches export` wrote, one line per patch, and what follows for the build.
pub fn render_export(report: &ExportReport, config: &Config) -> String {
    let minor = report.minor;
    let dir = config
        .patches_dir
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    let mut out = String::new();
    for p in &report.patches {
        let what = match p.written {
            Written::Unchanged => "unchanged".to_string(),
            Written::Rewritten => "rewritten".to_string(),
            Written::Variant => {
                let keep: Vec<String> = config
                    .minors
                    .iter()
                    .filter(|(m, c)| **m != minor && c.patches.contains(&p.was))
                    .map(|(m, _)| m.to_string())
                    .collect();
                format!(
                    "written: {minor}'s own variant ({} stays for {})",
                    p.was,
                    keep.join(", ")
                )
            }
            Written::Shared => format!(
                "{minor} shares it again ({} is no longer used by {minor}: delete it if no other minor lists it)",
                p.was
            ),
            Written::AlreadyUpstream => {
                "already upstream: left as it is; drop it from the series".to_string()
            }
        };
        let _ = writeln!(out, "{dir}/{}  {what}", p.name);
    }
    if report.config_changed {
        let _ = writeln!(
            out,
            "{}: minors.\"{minor}\".patches updated",
            config.path.display()
        );
    }
    if report.changed() {
        let _ = write!(
            out,
            "\nThe series of {minor} changed: prove and build it (occm-forge patches prove --k8s {minor}; occm-forge build --k8s {minor} --accept). A tag already recorded in the digest manifest is refused with another series: bump minors.\"{minor}\".revision then.\n"
        );
    } else {
        let _ = writeln!(out, "\nNo patch of {minor} changed.");
    }
    out
}
