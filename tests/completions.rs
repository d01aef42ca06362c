//! `occm-forge completions SHELL`, run as a user would: every shell's script on stdout, naming
//! the commands; bash's accepted by `bash -n`, zsh's and fish's by their shells when installed
//! (said on stderr when not).

use std::process::{Command, Output};

const BIN: &str = env!("CARGO_BIN_EXE_occm-forge");

fn completions(shell: &str) -> Output {
    Command::new(BIN)
        .args(["completions", shell])
        .output()
        .expect("run occm-forge")
}

/// The script for `shell`, checked to be there and to name the commands.
fn script(shell: &str) -> String {
    let out = completions(shell);
    assert!(
        out.status.success(),
        "completions {shell}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        out.stderr.is_empty(),
        "completions {shell} wrote to stderr: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let script = String::from_utf8(out.stdout).expect("UTF-8 script");
    for command in [
        "build",
        "accept",
        "clusters",
        "record-signatures",
        "self-image",
    ] {
        assert!(
            script
                .split(|c: char| !(c.is_alphanumeric() || c == '-'))
                .any(|word| word == command),
            "the {shell} script does not name `{command}`"
        );
    }
    script
}

/// `shell -n` on the script in a file: Some(result) when the shell is installed.
fn syntax_check(shell: &str, script: &str) -> Option<Result<(), String>> {
    let installed = Command::new(shell)
        .args(["-c", "exit 0"])
        .output()
        .is_ok_and(|o| o.status.success());
    if !installed {
        return None;
    }
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join(format!("occm-forge.{shell}"));
    std::fs::write(&file, script).unwrap();
    let out = Command::new(shell)
        .arg("-n")
        .arg(&file)
        .output()
        .expect("run the shell");
    Some(if out.status.success() {
        Ok(())
    } else {
        Err(String::from_utf8_lossy(&out.stderr).into_owned())
    })
}

#[test]
fn bash_script_parses_and_names_the_commands() {
    let script = script("bash");
    match syntax_check("bash", &script) {
        Some(Ok(())) => {}
        Some(Err(e)) => panic!("bash -n refuses the bash completion script: {e}"),
        None => panic!("bash is not installed; it is needed to check the bash script"),
    }
    assert!(
        script.contains("complete -F _occm-forge") || script.contains("complete -F _occm__forge"),
        "the bash script registers no completion function for occm-forge"
    );
    for hidden in ["generate-docs", "__parse-check"] {
        assert!(
            !script.contains(hidden),
            "the bash script offers the hidden command `{hidden}`"
        );
    }
}

#[test]
fn zsh_and_fish_scripts_parse_where_those_shells_are_installed() {
    for shell in ["zsh", "fish"] {
        let script = script(shell);
        match syntax_check(shell, &script) {
            Some(Ok(())) => {}
            Some(Err(e)) => panic!("{shell} -n refuses the {shell} completion script: {e}"),
            None => eprintln!(
                "skipped: {shell} is not installed, so its completion script's syntax is not checked \
                 (only that it is generated and names the commands)"
            ),
        }
    }
}

#[test]
fn elvish_and_powershell_scripts_name_the_commands() {
    for shell in ["elvish", "powershell"] {
        script(shell);
    }
}

#[test]
fn an_unknown_shell_is_a_usage_error() {
    let out = completions("tcsh");
    assert_eq!(out.status.code(), Some(2));
    assert!(out.stdout.is_empty());
    assert!(String::from_utf8_lossy(&out.stderr).contains("possible values"));
}
