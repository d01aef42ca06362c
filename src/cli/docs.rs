//! Hidden commands over the clap definitions themselves: `generate-docs` writes the man pages
//! (docs/man/) and the Markdown reference (docs/reference/cli.md) from them, `__parse-check`
//! only parses a command line (tests/cli_reference.rs checks each help example with it).

use std::ffi::OsString;
use std::fmt::Write as _;
use std::path::{Path, PathBuf};

use clap::{Arg, ArgAction, Args, Command, FromArgMatches};
use occm_forge_core::pipeline::Error;

use super::output::print_stdout;

/// How docs/reference/cli.md says where it comes from.
const GENERATED_BY: &str = "cargo run -- generate-docs --out-dir docs";

/// `generate-docs`: where the documents go.
#[derive(Args)]
pub struct GenerateDocsArgs {
    /// Write man pages to DIR/man (occm-forge.1, one page per command: occm-forge-build.1, …;
    /// other occm-forge*.1 there are removed) and the Markdown reference to DIR/reference/cli.md.
    #[arg(long, value_name = "DIR")]
    out_dir: PathBuf,
}

/// `__parse-check`: the command line to parse.
#[derive(Args)]
pub struct ParseCheckArgs {
    /// The command line after `occm-forge`, e.g. `-- build --k8s 1.34`.
    #[arg(
        trailing_var_arg = true,
        allow_hyphen_values = true,
        value_name = "ARGS"
    )]
    args: Vec<OsString>,
}

/// The root command as the documents show it: built (globals propagated, names set), no `help`
/// subcommand.
fn built() -> Command {
    let mut cmd = super::command().disable_help_subcommand(true);
    cmd.build();
    cmd
}

/// Writes the man pages and the reference under `args.out_dir`; prints the paths written.
pub fn generate(args: &GenerateDocsArgs) -> Result<u8, Error> {
    let io = |path: &Path, e: std::io::Error| Error::Io(format!("{}: {e}", path.display()));
    let root = built();
    let man_dir = args.out_dir.join("man");
    let reference_dir = args.out_dir.join("reference");
    for dir in [&man_dir, &reference_dir] {
        std::fs::create_dir_all(dir).map_err(|e| io(dir, e))?;
    }
    // Pages of commands that are gone.
    for entry in std::fs::read_dir(&man_dir).map_err(|e| io(&man_dir, e))? {
        let path = entry.map_err(|e| io(&man_dir, e))?.path();
        let name = path.file_name().and_then(|n| n.to_str()).unwrap_or("");
        if name.starts_with("occm-forge") && name.ends_with(".1") {
            std::fs::remove_file(&path).map_err(|e| io(&path, e))?;
        }
    }
    let mut written = Vec::new();
    for (name, page) in man_pages(&root).map_err(|e| io(&man_dir, e))? {
        let path = man_dir.join(name);
        std::fs::write(&path, page).map_err(|e| io(&path, e))?;
        written.push(path);
    }
    let path = reference_dir.join("cli.md");
    std::fs::write(&path, markdown(&root)).map_err(|e| io(&path, e))?;
    written.push(path);
    let list: Vec<String> = written.iter().map(|p| p.display().to_string()).collect();
    print_stdout(&list.join("\n"))?;
    Ok(0)
}

/// Parses `occm-forge ARGS…` as a run would and does nothing else: exit 0 when it parses, 2 with
/// clap's message on stderr when it does not.
pub fn parse_check(args: &ParseCheckArgs) -> Result<u8, Error> {
    let mut cmd = super::command();
    let argv = std::iter::once(OsString::from("occm-forge")).chain(args.args.iter().cloned());
    let parsed = cmd
        .try_get_matches_from_mut(argv)
        .and_then(|m| super::Cli::from_arg_matches(&m));
    match parsed {
        Ok(_) => Ok(0),
        Err(e)
            if matches!(
                e.kind(),
                clap::error::ErrorKind::DisplayHelp | clap::error::ErrorKind::DisplayVersion
            ) =>
        {
            Ok(0)
        }
        Err(e) => {
            eprint!("{}", e.format(&mut cmd).render());
            Ok(2)
        }
    }
}

/// The visible subcommands of `cmd`, in the help's order.
fn subcommands(cmd: &Command) -> impl Iterator<Item = &Command> {
    cmd.get_subcommands().filter(|s| !s.is_hide_set())
}

/// Every command's man page (file name, roff), the root's first. clap_mangen's sections, with
/// the examples in an EXAMPLES section of their own (lines kept, not filled) and no date, so
/// the pages only change when the definitions do.
fn man_pages(root: &Command) -> std::io::Result<Vec<(String, Vec<u8>)>> {
    fn walk(
        cmd: &Command,
        source: &str,
        pages: &mut Vec<(String, Vec<u8>)>,
    ) -> std::io::Result<()> {
        let man = clap_mangen::Man::new(cmd.clone()).source(source);
        let mut page = Vec::new();
        man.render_title(&mut page)?;
        man.render_name_section(&mut page)?;
        man.render_synopsis_section(&mut page)?;
        man.render_description_section(&mut page)?;
        if cmd.get_arguments().any(|a| !a.is_hide_set()) {
            man.render_options_section(&mut page)?;
        }
        if subcommands(cmd).next().is_some() {
            man.render_subcommands_section(&mut page)?;
        }
        if let Some(examples) = examples(cmd) {
            page.extend_from_slice(b".SH EXAMPLES\n.nf\n");
            for line in examples.lines() {
                page.extend_from_slice(roff_line(line).as_bytes());
                page.push(b'\n');
            }
            page.extend_from_slice(b".fi\n");
        }
        if cmd.get_version().is_some() {
            man.render_version_section(&mut page)?;
        }
        pages.push((man.get_filename(), page));
        for sub in subcommands(cmd) {
            walk(sub, source, pages)?;
        }
        Ok(())
    }
    // Every page's footer names the program and its version (only the root has a version).
    let source = format!("occm-forge {}", root.get_version().unwrap_or_default());
    let mut pages = Vec::new();
    walk(root, &source, &mut pages)?;
    Ok(pages)
}

/// `line` as literal roff text: backslashes escaped, a leading `.` or `'` kept from being a
/// request, `-` a hyphen-minus.
fn roff_line(line: &str) -> String {
    let escaped = line.replace('\\', "\\e").replace('-', "\\-");
    if escaped.starts_with('.') || escaped.starts_with('\'') {
        format!("\\&{escaped}")
    } else {
        escaped
    }
}

/// The example lines of `cmd` (its after-help without the `Examples:` heading, unindented).
fn examples(cmd: &Command) -> Option<String> {
    let text = cmd
        .get_after_long_help()
        .or(cmd.get_after_help())?
        .to_string();
    let body = text.strip_prefix("Examples:\n").unwrap_or(&text);
    let lines: Vec<&str> = body
        .lines()
        .map(|l| l.strip_prefix("  ").unwrap_or(l))
        .collect();
    Some(lines.join("\n"))
}

/// The mdBook anchor of a command's heading (its full name, e.g. `occm-forge-manifest-merge`).
fn anchor(cmd: &Command) -> String {
    full_name(cmd).to_lowercase().replace(' ', "-")
}

/// `occm-forge manifest merge`.
fn full_name(cmd: &Command) -> String {
    cmd.get_bin_name().unwrap_or(cmd.get_name()).to_string()
}

/// docs/reference/cli.md: one section per command, depth first in the help's order.
fn markdown(root: &Command) -> String {
    let mut out = String::new();
    let _ = writeln!(
        out,
        "<!-- Generated by `{GENERATED_BY}` (the hidden `occm-forge generate-docs`) from the clap \
         definitions in src/cli/, with the man pages in docs/man/; do not edit. \
         tests/cli_reference.rs fails when it is out of date. -->\n"
    );
    out.push_str("# Command-line reference\n\n");
    let _ = writeln!(
        out,
        "Every command and option of `occm-forge` {}, as its `--help` shows them. Every command \
         takes `-h` (summary) and `--help` (everything); `occm-forge --version` prints the \
         version. The global options of [occm-forge](#{}) apply to every command.\n",
        root.get_version().unwrap_or_default(),
        anchor(root)
    );
    fn walk(cmd: &Command, root: &Command, out: &mut String) {
        section(cmd, root, out);
        for sub in subcommands(cmd) {
            walk(sub, root, out);
        }
    }
    walk(root, root, &mut out);
    // One newline at the end, none doubled.
    let trimmed = out.trim_end().len();
    out.truncate(trimmed);
    out.push('\n');
    out
}

/// One command's section.
fn section(cmd: &Command, root: &Command, out: &mut String) {
    let is_root = std::ptr::eq(cmd, root);
    let _ = writeln!(out, "## {}\n", full_name(cmd));
    if let Some(about) = cmd.get_long_about().or(cmd.get_about()) {
        let _ = writeln!(out, "{}\n", paragraphs(&about.to_string(), ""));
    }
    let aliases: Vec<String> = cmd
        .get_visible_aliases()
        .map(|a| format!("`{a}`"))
        .collect();
    if !aliases.is_empty() {
        let _ = writeln!(out, "Also called: {}.\n", aliases.join(", "));
    }
    let usage = cmd.clone().render_usage().to_string();
    let usage = usage.strip_prefix("Usage: ").unwrap_or(&usage);
    let _ = writeln!(out, "**Usage:**\n\n```text\n{}\n```\n", usage.trim_end());
    if subcommands(cmd).next().is_some() {
        out.push_str("**Commands:**\n\n");
        for sub in subcommands(cmd) {
            let about = sub.get_about().map(|a| a.to_string()).unwrap_or_default();
            let _ = writeln!(
                out,
                "- [`{}`](#{}): {}",
                sub.get_name(),
                anchor(sub),
                paragraphs(&about, "  ")
            );
        }
        out.push('\n');
    }
    let shown = |a: &&Arg| {
        !a.is_hide_set()
            && !matches!(a.get_id().as_str(), "help" | "version")
            && (is_root || !a.is_global_set())
    };
    let positionals: Vec<&Arg> = cmd
        .get_positionals()
        .filter(|a| shown(a))
        .collect::<Vec<_>>();
    if !positionals.is_empty() {
        out.push_str("**Arguments:**\n\n");
        for a in &positionals {
            argument(a, out);
        }
        out.push('\n');
    }
    let options: Vec<&Arg> = cmd
        .get_arguments()
        .filter(|a| !a.is_positional())
        .filter(|a| shown(a))
        .collect();
    if !options.is_empty() {
        out.push_str(if is_root {
            "**Global options:**\n\n"
        } else {
            "**Options:**\n\n"
        });
        for a in &options {
            argument(a, out);
        }
        out.push('\n');
    }
    if let Some(examples) = examples(cmd) {
        let _ = writeln!(out, "**Examples:**\n\n```text\n{examples}\n```\n");
    }
}

/// One argument as a list item: its name and value, help, possible values, default, variable.
fn argument(a: &Arg, out: &mut String) {
    let takes_value = a.get_action().takes_values();
    let value = a
        .get_value_names()
        .map(|v| {
            v.iter()
                .map(|n| format!("<{n}>"))
                .collect::<Vec<_>>()
                .join(" ")
        })
        .unwrap_or_else(|| format!("<{}>", a.get_id().as_str().to_uppercase()));
    let repeatable = matches!(a.get_action(), ArgAction::Append | ArgAction::Count);
    let name = if a.is_positional() {
        format!("{value}{}", if repeatable { "..." } else { "" })
    } else {
        let mut names = Vec::new();
        if let Some(s) = a.get_short() {
            names.push(format!("-{s}"));
        }
        if let Some(l) = a.get_long() {
            names.push(format!("--{l}"));
        }
        let mut name = names.join(", ");
        if takes_value {
            name.push(' ');
            name.push_str(&value);
        }
        name
    };
    let mut marks = Vec::new();
    if a.is_required_set() {
        marks.push("required");
    }
    if repeatable {
        marks.push("repeatable");
    }
    let marks = if marks.is_empty() {
        String::new()
    } else {
        format!(" ({})", marks.join(", "))
    };
    let help = a
        .get_long_help()
        .or(a.get_help())
        .map(|h| h.to_string())
        .unwrap_or_default();
    let _ = writeln!(out, "- `{name}`{marks}: {}", paragraphs(&help, "  "));
    let mut facts = Vec::new();
    if takes_value && !a.is_hide_default_value_set() && !a.get_default_values().is_empty() {
        let defaults: Vec<String> = a
            .get_default_values()
            .iter()
            .map(|d| format!("`{}`", d.to_string_lossy()))
            .collect();
        facts.push(format!("Default: {}.", defaults.join(", ")));
    }
    if let Some(env) = a.get_env().filter(|_| !a.is_hide_env_set()) {
        facts.push(format!("Environment: `{}`.", env.to_string_lossy()));
    }
    let values: Vec<clap::builder::PossibleValue> =
        if takes_value && !a.is_hide_possible_values_set() {
            a.get_possible_values()
                .into_iter()
                .filter(|v| !v.is_hide_set())
                .collect()
        } else {
            Vec::new()
        };
    if !values.is_empty() && values.iter().all(|v| v.get_help().is_none()) {
        let names: Vec<String> = values
            .iter()
            .map(|v| format!("`{}`", v.get_name()))
            .collect();
        facts.push(format!("Possible values: {}.", names.join(", ")));
    }
    if !facts.is_empty() {
        let _ = writeln!(out, "\n  {}", facts.join(" "));
    }
    if !values.is_empty() && values.iter().any(|v| v.get_help().is_some()) {
        out.push_str("\n  Possible values:\n\n");
        for v in &values {
            let help = v.get_help().map(|h| h.to_string()).unwrap_or_default();
            let _ = writeln!(out, "  - `{}`: {}", v.get_name(), paragraphs(&help, "    "));
        }
    }
}

/// Help text as Markdown: escaped outside its code spans, paragraphs separated by a blank line,
/// every line after the first indented by `indent` (inside a list item).
fn paragraphs(text: &str, indent: &str) -> String {
    let mut out = String::new();
    for (i, line) in text.trim().lines().enumerate() {
        if i > 0 {
            out.push('\n');
            if !line.trim().is_empty() {
                out.push_str(indent);
            }
        }
        out.push_str(&escape(line.trim_end()));
    }
    out
}

/// `line` with Markdown's and HTML's special characters escaped, except inside `code spans`
/// (all of it when its backticks do not pair up).
fn escape(line: &str) -> String {
    let paired = line.matches('`').count().is_multiple_of(2);
    let mut out = String::new();
    let mut in_code = false;
    for c in line.chars() {
        if c == '`' && paired {
            in_code = !in_code;
            out.push(c);
        } else if !in_code && "\\`*_[]<>~|&#".contains(c) {
            out.push('\\');
            out.push(c);
        } else {
            out.push(c);
        }
    }
    out
}
