//! The rules of docs/architecture.md, checked on the code: the core's layers (the table's order)
//! import only layers above them, no two of its files import each other round a circle, and the
//! core depends on no acceptance. Imports are read from the source text (`crate::…` paths and
//! `super::…` paths, resolved to files), outside `#[cfg(test)]` modules.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// The layer folders of docs/architecture.md's layer table, in order.
fn layers_of_the_document() -> Vec<String> {
    let doc = std::fs::read_to_string(root().join("docs/architecture.md")).unwrap();
    let mut rows = doc
        .lines()
        .skip_while(|l| !l.starts_with("| layer | folder |"))
        .skip(2);
    let mut out = Vec::new();
    for l in rows.by_ref() {
        let cells: Vec<&str> = l.split('|').map(str::trim).collect();
        if cells.len() < 3 || !l.starts_with('|') {
            break;
        }
        out.push(cells[2].trim_matches('`').to_string());
    }
    out
}

/// Every `.rs` file under `dir`.
fn rust_files(dir: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    for e in std::fs::read_dir(dir).unwrap() {
        let p = e.unwrap().path();
        if p.is_dir() {
            out.extend(rust_files(&p));
        } else if p.extension().is_some_and(|x| x == "rs") {
            out.push(p);
        }
    }
    out.sort();
    out
}

/// A file's module path: `pipeline/go/mod.rs` → `["pipeline", "go"]`, `pipeline/plan.rs` →
/// `["pipeline", "plan"]`, `lib.rs` → `[]`.
fn module_of(rel: &Path) -> Vec<String> {
    let mut parts: Vec<String> = rel
        .iter()
        .map(|p| p.to_string_lossy().into_owned())
        .collect();
    let last = parts.pop().unwrap();
    let stem = last.trim_end_matches(".rs");
    if stem != "mod" && stem != "lib" {
        parts.push(stem.to_string());
    }
    parts
}

/// The code of a file without its `#[cfg(test)]` modules and comments.
fn code(text: &str) -> String {
    let text = match text.find("#[cfg(test)]\nmod tests") {
        Some(i) => &text[..i],
        None => text,
    };
    text.lines()
        .filter(|l| !l.trim_start().starts_with("//"))
        .collect::<Vec<_>>()
        .join("\n")
}

/// The module paths a file's code names: `crate::a::b::C` → `[a, b, C]`, `super::x` resolved
/// against the file's module.
fn named_paths(module: &[String], is_mod_file: bool, code: &str) -> Vec<Vec<String>> {
    let re = regex::Regex::new(r"\b(crate|super)((?:::\w+)+)").unwrap();
    let mut out = Vec::new();
    for c in re.captures_iter(code) {
        let rest: Vec<String> = c[2]
            .split("::")
            .filter(|s| !s.is_empty())
            .map(str::to_string)
            .collect();
        let mut path: Vec<String> = if &c[1] == "crate" {
            Vec::new()
        } else {
            // `super` of a `mod.rs` file is its folder's parent; of `x.rs`, the folder.
            let mut m = module.to_vec();
            m.pop();
            if is_mod_file {
                m.pop();
            }
            m
        };
        let mut rest = rest.into_iter().peekable();
        while rest.peek().is_some_and(|s| s == "super") {
            rest.next();
            path.pop();
        }
        let rest: Vec<String> = rest.collect();
        // `super::X` in an inline module (`mod env_lines { use super::GoEnv; }`) is this file's
        // own `X`.
        if &c[1] == "super" && rest.first().is_some_and(|x| defines(code, x)) {
            continue;
        }
        path.extend(rest);
        out.push(path);
    }
    out
}

/// A name a module re-exports: (the module's path, the name).
type Reexport = (Vec<String>, String);

/// Whether `code` defines an item named `name`.
fn defines(code: &str, name: &str) -> bool {
    regex::Regex::new(&format!(
        r"\b(fn|struct|enum|type|const|static|trait|mod)\s+{}\b",
        regex::escape(name)
    ))
    .unwrap()
    .is_match(code)
}

/// The file a module path names: its longest prefix that is a module of `modules`, or, for a
/// name a module re-exports (`pub use error::{Error, Failure};`), the module it comes from.
fn file_of(
    path: &[String],
    modules: &BTreeMap<Vec<String>, String>,
    reexports: &BTreeMap<Reexport, Vec<String>>,
) -> Option<String> {
    for n in (1..=path.len()).rev() {
        let module = &path[..n];
        if !modules.contains_key(module) {
            continue;
        }
        if let Some(name) = path.get(n)
            && let Some(from) = reexports.get(&(module.to_vec(), name.clone()))
        {
            return file_of(from, modules, reexports);
        }
        return modules.get(module).cloned();
    }
    None
}

/// The names `code` (the file of `module`) re-exports from its own submodules, as
/// `(module, name) → module path`: `pub use error::{Error, Failure};` in `pipeline` gives
/// `(pipeline, Error) → pipeline::error`.
fn reexports_of(module: &[String], code: &str) -> Vec<(Reexport, Vec<String>)> {
    let re = regex::Regex::new(r"pub use ((?:\w+::)*\w+)::(?:\{([^}]*)\}|(\w+));").unwrap();
    let mut out = Vec::new();
    for c in re.captures_iter(code) {
        let mut from: Vec<String> = module.to_vec();
        from.extend(c[1].split("::").map(str::to_string));
        let names = c.get(2).or(c.get(3)).map_or("", |m| m.as_str());
        for name in names.split(',').map(str::trim).filter(|n| !n.is_empty()) {
            out.push(((module.to_vec(), name.to_string()), from.clone()));
        }
    }
    out
}

struct Core {
    /// Module path → file (relative to crates/core/src).
    modules: BTreeMap<Vec<String>, String>,
    /// File → the files its code imports.
    edges: BTreeMap<String, BTreeSet<String>>,
}

fn core() -> Core {
    let src = root().join("crates/core/src");
    let files = rust_files(&src);
    let mut modules = BTreeMap::new();
    let mut reexports = BTreeMap::new();
    for f in &files {
        let rel = f.strip_prefix(&src).unwrap();
        modules.insert(module_of(rel), rel.to_string_lossy().into_owned());
        let text = code(&std::fs::read_to_string(f).unwrap());
        reexports.extend(reexports_of(&module_of(rel), &text));
    }
    let mut edges = BTreeMap::new();
    for f in &files {
        let rel = f.strip_prefix(&src).unwrap();
        let name = rel.to_string_lossy().into_owned();
        let is_mod = rel.file_name().is_some_and(|n| n == "mod.rs");
        let text = code(&std::fs::read_to_string(f).unwrap());
        let mut to = BTreeSet::new();
        for p in named_paths(&module_of(rel), is_mod, &text) {
            // `crate::command_failure!`: the macro is pipeline/error.rs's (exported at the root).
            let p = match p.first().map(String::as_str) {
                Some("command_failure") => {
                    vec!["pipeline".to_string(), "error".to_string()]
                }
                _ => p,
            };
            if let Some(target) = file_of(&p, &modules, &reexports)
                && target != name
                && target != "lib.rs"
            {
                to.insert(target);
            }
        }
        edges.insert(name, to);
    }
    Core { modules, edges }
}

#[test]
fn the_document_lists_every_layer_folder_of_the_core_in_order() {
    let layers = layers_of_the_document();
    let src = root().join("crates/core/src");
    let mut folders: Vec<String> = std::fs::read_dir(&src)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.is_dir())
        .map(|p| p.file_name().unwrap().to_string_lossy().into_owned())
        .collect();
    folders.sort();
    let mut listed = layers.clone();
    listed.sort();
    assert_eq!(listed, folders, "docs/architecture.md's layer table");
    let loose: Vec<String> = std::fs::read_dir(&src)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|n| n.ends_with(".rs") && n != "lib.rs" && n != "testing.rs")
        .collect();
    assert!(loose.is_empty(), "files outside a layer folder: {loose:?}");
}

#[test]
fn each_layer_imports_only_the_layers_above_it() {
    let rank: BTreeMap<String, usize> = layers_of_the_document()
        .into_iter()
        .enumerate()
        .map(|(i, l)| (l, i))
        .collect();
    let layer = |file: &str| rank.get(file.split('/').next().unwrap()).copied();
    let c = core();
    let mut upward = Vec::new();
    for (from, to) in &c.edges {
        for t in to {
            if let (Some(a), Some(b)) = (layer(from), layer(t))
                && b > a
            {
                upward.push(format!("{from} → {t}"));
            }
        }
    }
    assert!(
        upward.is_empty(),
        "imports pointing down the table:\n{}",
        upward.join("\n")
    );
    assert!(c.modules.len() > 50, "{} modules read", c.modules.len());
}

/// The digest manifest's readers (everything under `consumers/`, and the commands that only read
/// or annotate it) import its format (`digest_manifest/`), never the build's record of it
/// (`pipeline/record.rs`), and the consumers nothing of the build but its error type: a change
/// to the build cannot reach them.
#[test]
fn the_digest_manifests_readers_import_its_format_not_the_build() {
    let c = core();
    let readers = |f: &str| {
        f.starts_with("consumers/")
            || [
                "commands/verify.rs",
                "commands/report.rs",
                "commands/signatures.rs",
            ]
            .contains(&f)
    };
    let mut into_build = Vec::new();
    let mut into_format = 0;
    for (from, to) in c.edges.iter().filter(|(f, _)| readers(f)) {
        for t in to {
            let consumer = from.starts_with("consumers/");
            if t == "pipeline/record.rs"
                || (consumer && t.starts_with("pipeline/") && t != "pipeline/error.rs")
            {
                into_build.push(format!("{from} → {t}"));
            }
            if t.starts_with("digest_manifest/") {
                into_format += 1;
            }
        }
    }
    assert!(
        into_build.is_empty(),
        "readers of the digest manifest importing the build:\n{}",
        into_build.join("\n")
    );
    assert!(into_format >= 8, "{into_format} imports of the format read");
}

#[test]
fn no_files_import_each_other_round_a_circle() {
    let c = core();
    // Tarjan's strongly connected components; any with two files or more is a circle.
    struct State<'a> {
        edges: &'a BTreeMap<String, BTreeSet<String>>,
        index: BTreeMap<&'a str, usize>,
        low: BTreeMap<&'a str, usize>,
        stack: Vec<&'a str>,
        on: BTreeSet<&'a str>,
        circles: Vec<Vec<&'a str>>,
    }
    fn visit<'a>(s: &mut State<'a>, v: &'a str) {
        let i = s.index.len();
        s.index.insert(v, i);
        s.low.insert(v, i);
        s.stack.push(v);
        s.on.insert(v);
        for w in s.edges.get(v).into_iter().flatten() {
            let w = w.as_str();
            if !s.index.contains_key(w) {
                visit(s, w);
                let l = s.low[w].min(s.low[v]);
                s.low.insert(v, l);
            } else if s.on.contains(w) {
                let l = s.index[w].min(s.low[v]);
                s.low.insert(v, l);
            }
        }
        if s.low[v] == s.index[v] {
            let mut comp = Vec::new();
            while let Some(w) = s.stack.pop() {
                s.on.remove(w);
                comp.push(w);
                if w == v {
                    break;
                }
            }
            if comp.len() > 1 {
                comp.sort();
                s.circles.push(comp);
            }
        }
    }
    let mut s = State {
        edges: &c.edges,
        index: BTreeMap::new(),
        low: BTreeMap::new(),
        stack: Vec::new(),
        on: BTreeSet::new(),
        circles: Vec::new(),
    };
    for v in c.edges.keys() {
        if !s.index.contains_key(v.as_str()) {
            visit(&mut s, v);
        }
    }
    assert!(s.circles.is_empty(), "circles: {:?}", s.circles);
}

#[test]
fn the_core_depends_on_no_acceptance() {
    let manifest = std::fs::read_to_string(root().join("crates/core/Cargo.toml")).unwrap();
    let doc: toml::Table = manifest.parse().unwrap();
    let deps = doc["dependencies"].as_table().unwrap();
    for banned in ["occm-forge-accept", "axum"] {
        assert!(
            !deps.contains_key(banned),
            "crates/core depends on {banned}"
        );
    }
    let src = root().join("crates/core/src");
    for f in rust_files(&src) {
        let text = std::fs::read_to_string(&f).unwrap();
        assert!(
            !text.contains("occm_forge_accept"),
            "{} names the acceptance crate",
            f.display()
        );
    }
}

/// The dependencies a manifest's `[dependencies]` (or, with `dev`, `[dev-dependencies]`) declares,
/// as Rust names (`serde_norway`, `k8s_openapi`), without those its
/// `[package.metadata.cargo-machete] ignored` lists (the convention cargo-machete reads).
fn declared(manifest: &Path, dev: bool) -> Vec<String> {
    let doc: toml::Table = toml::from_str(&std::fs::read_to_string(manifest).unwrap()).unwrap();
    let ignored: Vec<String> = doc
        .get("package")
        .and_then(|p| p.get("metadata"))
        .and_then(|m| m.get("cargo-machete"))
        .and_then(|m| m.get("ignored"))
        .and_then(|i| i.as_array())
        .map(|a| {
            a.iter()
                .filter_map(|v| v.as_str().map(String::from))
                .collect()
        })
        .unwrap_or_default();
    let table = if dev {
        "dev-dependencies"
    } else {
        "dependencies"
    };
    doc.get(table)
        .and_then(|d| d.as_table())
        .map(|d| {
            d.keys()
                .filter(|k| !ignored.contains(k))
                .map(|k| k.replace('-', "_"))
                .collect()
        })
        .unwrap_or_default()
}

/// Whether `name` is used in `text`: a path through it (`name::`), a `use name`, or a derive or
/// attribute macro it provides being named with it (`#[serde(...)]` counts only with `name::`).
fn uses(text: &str, name: &str) -> bool {
    let re = regex::Regex::new(&format!(r"(^|[^A-Za-z0-9_:]){name}(::|\s*;|\s+as\s)")).unwrap();
    re.is_match(text)
}

/// Every dependency a package declares is named in its code (a dependency nobody uses still
/// compiles, links and is audited for every build): `[dependencies]` in `src/` (and the build
/// script), `[dev-dependencies]` also in `tests/`.
#[test]
fn every_declared_dependency_is_used() {
    let packages = [
        (root(), vec![root().join("src")], vec![root().join("tests")]),
        (
            root().join("crates/core"),
            vec![root().join("crates/core/src")],
            vec![],
        ),
        (
            root().join("crates/accept"),
            vec![root().join("crates/accept/src")],
            vec![],
        ),
    ];
    let mut unused = Vec::new();
    for (dir, src, tests) in packages {
        let text_of = |dirs: &[PathBuf]| -> String {
            dirs.iter()
                .flat_map(|d| rust_files(d))
                .map(|f| std::fs::read_to_string(f).unwrap())
                .collect::<Vec<_>>()
                .join("\n")
        };
        let code = text_of(&src);
        let all = format!("{code}\n{}", text_of(&[src.clone(), tests].concat()));
        let manifest = dir.join("Cargo.toml");
        for (dev, text) in [(false, &code), (true, &all)] {
            for name in declared(&manifest, dev) {
                if !uses(text, &name) {
                    unused.push(format!(
                        "{} [{}] {name}",
                        manifest.strip_prefix(root()).unwrap().display(),
                        if dev {
                            "dev-dependencies"
                        } else {
                            "dependencies"
                        }
                    ));
                }
            }
        }
    }
    assert!(
        unused.is_empty(),
        "declared and never named in the code (remove them, or list one that is used only through a feature under [package.metadata.cargo-machete] ignored):\n{}",
        unused.join("\n")
    );
}

#[test]
fn a_dependency_named_only_in_a_comment_or_another_name_is_not_used() {
    assert!(uses("use serde_norway::Value;", "serde_norway"));
    assert!(uses("let v = hex::encode(x);", "hex"));
    assert!(uses("use tempfile;", "tempfile"));
    assert!(!uses("let hexadecimal = 1; // hex", "hex"));
    assert!(!uses("occm_forge_core::hex::encode", "hex"));
}
