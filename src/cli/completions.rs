//! `occm-forge completions SHELL`: the shell's completion script on stdout (clap_complete).

use clap::{Args, Command};
use clap_complete::Shell;
use occm_forge_core::pipeline::Error;

use super::output::print_stdout;

/// `completions`: which shell.
#[derive(Args)]
pub struct CompletionsArgs {
    /// The shell to complete in.
    #[arg(value_name = "SHELL")]
    shell: Shell,
}

/// Prints the completion script of every visible command and option for `args.shell`.
pub fn run(args: &CompletionsArgs) -> Result<u8, Error> {
    let mut script = Vec::new();
    clap_complete::generate(args.shell, &mut visible(), "occm-forge", &mut script);
    let script = String::from_utf8(script)
        .map_err(|e| Error::Io(format!("{} completion script: {e}", args.shell)))?;
    print_stdout(&script)?;
    Ok(0)
}

/// The command line without the hidden commands (clap_complete would offer them).
fn visible() -> Command {
    let full = super::command();
    Command::new("occm-forge")
        // `version` of the derive: this package's.
        .version(env!("CARGO_PKG_VERSION"))
        .subcommand_required(full.is_subcommand_required_set())
        .args(full.get_arguments().cloned())
        .subcommands(full.get_subcommands().filter(|s| !s.is_hide_set()).cloned())
}
