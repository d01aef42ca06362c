//! Dependency overrides: module requirements set in upstream's go.mod after the patch series
//! (images.toml `go_overrides`), for a dependency with a known fix or one the module proxy
//! refuses at upstream's version.
//!
//! A module upstream requires is moved with `go get module@version` (Go's minimal version
//! selection then raises what that version needs, and nothing else); a module upstream
//! replaces (`replace k8s.io/x => k8s.io/x v0.31.11`, as Kubernetes' staging modules are) has
//! its replacement's version edited (`go mod edit -replace`). The go.sum entries of everything the
//! tests and the build compile are then resolved by the go command (`-mod=mod`, checked against
//! the checksum database as Go always checks them), so that the tests and the build themselves run
//! under `-mod=readonly` as for any minor. ("Managing dependencies", go.dev/doc/modules/managing-dependencies;
//! `go help mod edit`.)

use std::collections::BTreeMap;
use std::path::Path;
use std::process::Command;

use serde::Deserialize;

use super::{Toolchain, build::MAIN_PACKAGE};

/// Why the overrides cannot be applied. Each names the module and the version.
#[derive(Debug, thiserror::Error)]
pub enum OverrideError {
    /// Upstream's go.mod neither requires nor replaces the module.
    #[error(
        "go_overrides: upstream's go.mod ({tag}) does not require `{module}`; an override only moves a module upstream requires or replaces"
    )]
    NotRequired {
        /// The module.
        module: String,
        /// The upstream tag.
        tag: String,
    },
    /// The module proxy does not serve the version.
    #[error("go_overrides: the Go module proxy does not serve {module}@{version}: {answer}")]
    NotServed {
        /// The module.
        module: String,
        /// The version asked for.
        version: String,
        /// The go command's line with the proxy's answer.
        answer: String,
    },
    /// Minimal version selection settled on another version than asked (something requires a
    /// newer one).
    #[error(
        "go_overrides: {module} is {got} after the overrides, not {version}: another requirement needs it; override it to {got} or higher"
    )]
    NotSelected {
        /// The module.
        module: String,
        /// The version asked for.
        version: String,
        /// The version go.mod holds after `go get`.
        got: String,
    },
    /// The go command failed.
    #[error("go_overrides: `{command}` failed: {line}")]
    Go {
        /// The command, e.g. `go get`.
        command: String,
        /// The go command's line.
        line: String,
    },
}

/// One requirement of go.mod that the overrides changed: `module old → new` (`old` empty when
/// the requirement is new), replacements marked.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct MovedRequirement {
    /// The module path.
    pub module: String,
    /// Its version before (empty when it was not required).
    pub from: String,
    /// Its version after.
    pub to: String,
    /// Whether this is a `replace` directive's version rather than a `require`.
    pub replaced: bool,
}

impl std::fmt::Display for MovedRequirement {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let from = if self.from.is_empty() {
            "(none)"
        } else {
            &self.from
        };
        let replaced = if self.replaced { " (replace)" } else { "" };
        write!(f, "{} {from} → {}{replaced}", self.module, self.to)
    }
}

/// go.mod as `go mod edit -json` prints it (the parts read here).
#[derive(Debug, Deserialize, Default)]
#[serde(rename_all = "PascalCase")]
struct GoMod {
    // `null` when go.mod has none.
    #[serde(default, deserialize_with = "null_is_empty")]
    require: Vec<Module>,
    #[serde(default, deserialize_with = "null_is_empty")]
    replace: Vec<Replace>,
}

fn null_is_empty<'de, D, T>(d: D) -> Result<Vec<T>, D::Error>
where
    D: serde::Deserializer<'de>,
    T: Deserialize<'de>,
{
    Ok(Option::<Vec<T>>::deserialize(d)?.unwrap_or_default())
}

#[derive(Debug, Deserialize, Clone)]
#[serde(rename_all = "PascalCase")]
struct Module {
    path: String,
    #[serde(default)]
    version: String,
}

#[derive(Debug, Deserialize, Clone)]
#[serde(rename_all = "PascalCase")]
struct Replace {
    old: Module,
    new: Module,
}

impl GoMod {
    /// Module → (version, whether it is a replacement's version), for comparison.
    fn versions(&self) -> BTreeMap<String, (String, bool)> {
        let mut v: BTreeMap<String, (String, bool)> = self
            .require
            .iter()
            .map(|m| (m.path.clone(), (m.version.clone(), false)))
            .collect();
        for r in &self.replace {
            if !r.new.version.is_empty() {
                v.insert(r.old.path.clone(), (r.new.version.clone(), true));
            }
        }
        v
    }

    fn replacement(&self, module: &str) -> Option<&Replace> {
        self.replace
            .iter()
            .find(|r| r.old.path == module && r.old.version.is_empty() && !r.new.version.is_empty())
    }
}

fn run(cmd: &mut Command, what: &str) -> Result<Vec<u8>, OverrideError> {
    let out = cmd.output().map_err(|e| OverrideError::Go {
        command: what.into(),
        line: e.to_string(),
    })?;
    if out.status.success() {
        return Ok(out.stdout);
    }
    Err(OverrideError::Go {
        command: what.into(),
        line: super::summarize_stderr_of(
            &String::from_utf8_lossy(&out.stderr),
            1,
            super::ModuleOwner::Helper,
        ),
    })
}

fn read_go_mod(toolchain: &Toolchain, dir: &Path) -> Result<GoMod, OverrideError> {
    let bytes = run(
        toolchain.command(dir).args(["mod", "edit", "-json"]),
        "go mod edit -json",
    )?;
    serde_json::from_slice(&bytes).map_err(|e| OverrideError::Go {
        command: "go mod edit -json".into(),
        line: e.to_string(),
    })
}

/// Checks `overrides` against upstream's go.mod in `dir` and the module proxy, before anything
/// changes: every module must be required or replaced by upstream, every version served.
///
/// Errors: [`OverrideError::NotRequired`], [`OverrideError::NotServed`] (the proxy's answer, e.g.
/// 403), [`OverrideError::Go`].
pub fn check(
    toolchain: &Toolchain,
    dir: &Path,
    tag: &str,
    overrides: &BTreeMap<String, String>,
) -> Result<(), OverrideError> {
    let go_mod = read_go_mod(toolchain, dir)?;
    let versions = go_mod.versions();
    for (module, version) in overrides {
        if !versions.contains_key(module) {
            return Err(OverrideError::NotRequired {
                module: module.clone(),
                tag: tag.into(),
            });
        }
        let out = toolchain
            .helper_command(dir)
            .args(["list", "-m", "-json", &format!("{module}@{version}")])
            .output()
            .map_err(|e| OverrideError::Go {
                command: "go list -m".into(),
                line: e.to_string(),
            })?;
        if !out.status.success() {
            let text = String::from_utf8_lossy(&out.stderr);
            let answer = text
                .lines()
                .map(str::trim)
                .find(|l| l.starts_with("go: "))
                .or_else(|| text.lines().map(str::trim).rfind(|l| !l.is_empty()))
                .unwrap_or("no answer")
                .to_string();
            return Err(OverrideError::NotServed {
                module: module.clone(),
                version: version.clone(),
                answer,
            });
        }
    }
    Ok(())
}

/// Applies `overrides` to upstream's module in `dir` (after [`check`]) and resolves go.sum for
/// `packages` (with their tests) and the OCCM command; returns every requirement that moved,
/// by module (the overrides and what minimal version selection raised with them).
///
/// Errors: [`OverrideError::NotSelected`] when go.mod does not end at the version asked,
/// [`OverrideError::Go`] for a go command that fails (its line).
pub fn apply(
    toolchain: &Toolchain,
    dir: &Path,
    overrides: &BTreeMap<String, String>,
    packages: &[String],
) -> Result<Vec<MovedRequirement>, OverrideError> {
    let before = read_go_mod(toolchain, dir)?;
    let mut get: Vec<String> = Vec::new();
    for (module, version) in overrides {
        match before.replacement(module) {
            Some(r) => {
                run(
                    toolchain.command(dir).args([
                        "mod",
                        "edit",
                        &format!("-replace={module}={}@{version}", r.new.path),
                    ]),
                    "go mod edit -replace",
                )?;
            }
            None => get.push(format!("{module}@{version}")),
        }
    }
    if !get.is_empty() {
        run(
            toolchain.helper_command(dir).arg("get").args(&get),
            "go get",
        )?;
    }
    // go.sum for everything the tests and the build compile.
    run(
        toolchain
            .helper_command(dir)
            .args(["list", "-deps", "-test"])
            .args(packages)
            .arg(MAIN_PACKAGE),
        "go list -deps -test",
    )?;
    let after = read_go_mod(toolchain, dir)?;
    let (old, new) = (before.versions(), after.versions());
    for (module, version) in overrides {
        let got = new.get(module).map(|(v, _)| v.clone()).unwrap_or_default();
        if &got != version {
            return Err(OverrideError::NotSelected {
                module: module.clone(),
                version: version.clone(),
                got,
            });
        }
    }
    Ok(new
        .iter()
        .filter(|(m, v)| old.get(*m) != Some(v))
        .map(|(m, (to, replaced))| MovedRequirement {
            module: m.clone(),
            from: old.get(m).map(|(v, _)| v.clone()).unwrap_or_default(),
            to: to.clone(),
            replaced: *replaced,
        })
        .collect())
}
