//! The command-line reference, read from the real binary: docs/man/ and docs/reference/cli.md
//! are what `occm-forge generate-docs` makes of the clap definitions, byte for byte; the
//! reference's headings are unique (mdBook anchors) and name every command; every command's
//! `--help` ends with examples, and each example parses (`occm-forge __parse-check`).

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

const BIN: &str = env!("CARGO_BIN_EXE_occm-forge");
/// The one way to regenerate the committed files.
const REGENERATE: &str = "cargo run -- generate-docs --out-dir docs";

fn repo() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
}

/// Runs occm-forge with `args` in a directory of its own, without the caller's OCCM_FORGE_*
/// variables (a set one would change defaults and help).
fn occm_forge<S: AsRef<std::ffi::OsStr>>(args: &[S]) -> Output {
    let dir = tempfile::tempdir().expect("temporary directory");
    let mut cmd = Command::new(BIN);
    cmd.args(args).current_dir(dir.path());
    for (name, _) in std::env::vars_os() {
        if name.to_string_lossy().starts_with("OCCM_FORGE_") {
            cmd.env_remove(name);
        }
    }
    cmd.output().expect("run occm-forge")
}

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

/// `Err` naming the first line where `generated` and the committed file `committed` differ.
fn same_file(generated: &Path, committed: &Path) -> Result<(), String> {
    let shown = committed
        .strip_prefix(repo())
        .unwrap_or(committed)
        .display();
    let old = std::fs::read(committed).map_err(|e| format!("{shown}: cannot read it: {e}"))?;
    let new = std::fs::read(generated).expect("generated file");
    if old == new {
        return Ok(());
    }
    let (old, new) = (text(&old), text(&new));
    let (old_lines, new_lines): (Vec<&str>, Vec<&str>) =
        (old.split('\n').collect(), new.split('\n').collect());
    let at = (0..old_lines.len().max(new_lines.len()))
        .find(|&i| old_lines.get(i) != new_lines.get(i))
        .unwrap_or(0);
    Err(format!(
        "{shown}:{}: differs from what the clap definitions generate\n  committed: {:?}\n  generated: {:?}",
        at + 1,
        old_lines.get(at).copied().unwrap_or("<end of file>"),
        new_lines.get(at).copied().unwrap_or("<end of file>"),
    ))
}

fn file_names(dir: &Path) -> BTreeSet<String> {
    match std::fs::read_dir(dir) {
        Ok(entries) => entries
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect(),
        Err(_) => BTreeSet::new(),
    }
}

#[test]
fn committed_man_pages_and_reference_are_generated() {
    let out = tempfile::tempdir().unwrap();
    let run = occm_forge(&[
        "generate-docs".as_ref(),
        "--out-dir".as_ref(),
        out.path().as_os_str(),
    ]);
    assert!(
        run.status.success(),
        "generate-docs failed: {}",
        text(&run.stderr)
    );
    let mut pairs: Vec<(PathBuf, PathBuf)> = Vec::new();
    let (generated_man, committed_man) = (out.path().join("man"), repo().join("docs/man"));
    let generated = file_names(&generated_man);
    let committed = file_names(&committed_man);
    assert!(
        generated.contains("occm-forge.1") && generated.contains("occm-forge-build.1"),
        "generate-docs wrote no man pages: {generated:?}"
    );
    let mut problems = Vec::new();
    for missing in generated.difference(&committed) {
        problems.push(format!("docs/man/{missing} is not committed"));
    }
    for stale in committed.difference(&generated) {
        problems.push(format!(
            "docs/man/{stale} is committed but no command has that page"
        ));
    }
    for name in generated.intersection(&committed) {
        pairs.push((generated_man.join(name), committed_man.join(name)));
    }
    pairs.push((
        out.path().join("reference/cli.md"),
        repo().join("docs/reference/cli.md"),
    ));
    problems.extend(pairs.iter().filter_map(|(g, c)| same_file(g, c).err()));
    assert!(
        problems.is_empty(),
        "{}\n(the first of {} problem(s); regenerate with `{REGENERATE}` and commit docs/man/ and docs/reference/)",
        problems[0],
        problems.len()
    );
    // No date (or anything else of the moment) in the pages: `.TH name 1 "" source`.
    for name in &generated {
        let page = std::fs::read_to_string(generated_man.join(name)).unwrap();
        let title = page.lines().find(|l| l.starts_with(".TH ")).unwrap();
        assert!(
            title.contains(" 1  \"occm-forge "),
            "{name}: title line without an empty date: {title}"
        );
    }
}

/// mdBook's anchor of a heading: lower case, spaces to `-`, only alphanumerics, `-` and `_`.
fn mdbook_id(heading: &str) -> String {
    heading
        .trim()
        .chars()
        .filter_map(|c| match c {
            ' ' => Some('-'),
            c if c.is_alphanumeric() || c == '-' || c == '_' => Some(c.to_ascii_lowercase()),
            _ => None,
        })
        .collect()
}

/// The headings of a Markdown document (outside fenced code blocks), as (level, text).
fn headings(markdown: &str) -> Vec<(usize, String)> {
    let mut in_fence = false;
    let mut found = Vec::new();
    for line in markdown.lines() {
        if line.starts_with("```") {
            in_fence = !in_fence;
        } else if !in_fence && line.starts_with('#') {
            let level = line.chars().take_while(|&c| c == '#').count();
            found.push((level, line[level..].trim().to_string()));
        }
    }
    assert!(!in_fence, "a code block is not closed");
    found
}

#[test]
fn reference_says_how_it_is_made_and_its_headings_are_unique() {
    let reference = std::fs::read_to_string(repo().join("docs/reference/cli.md")).expect(
        "docs/reference/cli.md (regenerate it with `cargo run -- generate-docs --out-dir docs`)",
    );
    let first = reference.lines().next().unwrap_or("");
    assert!(
        first.starts_with("<!--") && first.contains(REGENERATE) && first.contains("do not edit"),
        "docs/reference/cli.md must start by saying how it is generated: {first}"
    );
    let headings = headings(&reference);
    assert_eq!(
        headings.iter().filter(|(level, _)| *level == 1).count(),
        1,
        "one title"
    );
    let mut ids = BTreeSet::new();
    for (_, heading) in &headings {
        assert!(
            ids.insert(mdbook_id(heading)),
            "heading {heading:?} repeats an anchor ({})",
            mdbook_id(heading)
        );
    }
}

/// A command's `--help` (the root's for an empty path).
fn help(path: &[String]) -> String {
    let mut args: Vec<&str> = path.iter().map(String::as_str).collect();
    args.push("--help");
    let out = occm_forge(&args);
    assert!(
        out.status.success(),
        "occm-forge {} failed: {}",
        args.join(" "),
        text(&out.stderr)
    );
    text(&out.stdout)
}

/// The command names under "Commands:" in a help text, without `help`.
fn listed_commands(help: &str) -> Vec<String> {
    help.lines()
        .skip_while(|l| l.trim_end() != "Commands:")
        .skip(1)
        .take_while(|l| !l.trim().is_empty())
        .filter_map(|l| l.split_whitespace().next())
        .filter(|name| *name != "help")
        .map(str::to_string)
        .collect()
}

/// Every command reachable from the root's help, with its help text, depth first.
fn every_command() -> Vec<(Vec<String>, String)> {
    fn walk(path: Vec<String>, found: &mut Vec<(Vec<String>, String)>) {
        let text = help(&path);
        let subs = listed_commands(&text);
        found.push((path.clone(), text));
        for sub in subs {
            let mut p = path.clone();
            p.push(sub);
            walk(p, found);
        }
    }
    let mut found = Vec::new();
    walk(Vec::new(), &mut found);
    found
}

/// The lines of a help text's "Examples:" block, trimmed, empty ones left out.
fn examples(help: &str) -> Vec<String> {
    help.lines()
        .skip_while(|l| l.trim_end() != "Examples:")
        .skip(1)
        .map(|l| l.trim().to_string())
        .filter(|l| !l.is_empty())
        .collect()
}

/// The arguments occm-forge gets from an example line: its words after `occm-forge`, up to a
/// shell operator (a redirection or a pipe).
fn example_args(line: &str) -> Vec<String> {
    line.split_whitespace()
        .skip(1)
        .take_while(|w| !w.starts_with('<') && !w.starts_with('>') && *w != "|")
        .map(str::to_string)
        .collect()
}

#[test]
fn every_command_has_examples_and_each_parses() {
    let commands = every_command();
    let names: Vec<String> = commands.iter().map(|(p, _)| p.join(" ")).collect();
    for expected in [
        "build",
        "accept",
        "clusters",
        "manifest merge",
        "completions",
    ] {
        assert!(
            names.iter().any(|n| n == expected),
            "`{expected}` not found through --help: {names:?}"
        );
    }
    let reference = std::fs::read_to_string(repo().join("docs/reference/cli.md")).unwrap();
    let reference_headings: Vec<String> =
        headings(&reference).into_iter().map(|(_, h)| h).collect();
    let mut checked = 0;
    for (path, help) in &commands {
        let name = format!("occm-forge {}", path.join(" "));
        let name = name.trim_end();
        assert!(
            reference_headings.iter().any(|h| h == name),
            "docs/reference/cli.md has no section `## {name}` (regenerate with `{REGENERATE}`)"
        );
        let lines = examples(help);
        let invocations: Vec<&String> = lines.iter().filter(|l| !l.starts_with('#')).collect();
        assert!(
            !invocations.is_empty(),
            "`{name} --help` ends with no Examples: block"
        );
        assert!(
            invocations.iter().any(|l| {
                let args = example_args(l);
                args.len() >= path.len() && args[..path.len()] == path[..]
            }),
            "no example of `{name}` itself in its --help: {invocations:?}"
        );
        for line in invocations {
            assert!(
                line.starts_with("occm-forge "),
                "`{name} --help`: example line is neither a `# comment` nor an occm-forge command: {line}"
            );
            let args = example_args(line);
            assert!(
                args.iter()
                    .all(|a| !a.contains(['"', '\'', '$', '`', '\\'])),
                "`{name} --help`: example {line:?} needs a shell to split it; keep examples to plain words"
            );
            let mut check = vec!["__parse-check".to_string(), "--".to_string()];
            check.extend(args);
            let out = occm_forge(&check);
            assert!(
                out.status.success(),
                "`{name} --help`: example does not parse: {line}\n{}",
                text(&out.stderr)
            );
            checked += 1;
        }
    }
    assert!(checked >= commands.len(), "only {checked} examples checked");
}

#[test]
fn parse_check_refuses_what_does_not_parse() {
    for bad in [
        &["build", "--k8s", "1.34", "--no-such-flag"][..],
        &["build"],
        &["render", "--k8s", "1.34", "--format", "no-such-format"],
        &["no-such-command"],
    ] {
        let mut args = vec!["__parse-check", "--"];
        args.extend_from_slice(bad);
        let out = occm_forge(&args);
        assert_eq!(
            out.status.code(),
            Some(2),
            "`occm-forge {}` parsed: {}",
            bad.join(" "),
            text(&out.stderr)
        );
        assert!(
            text(&out.stderr).contains("error:"),
            "no clap error for `{}`",
            bad.join(" ")
        );
    }
    let out = occm_forge(&["__parse-check", "--", "build", "--k8s", "1.34"]);
    assert!(out.status.success(), "{}", text(&out.stderr));
}
