//! Gated: refreshing the real series on real upstream trees. A scratch clone of the mirror gets
//! one commit of "upstream's" on v1.36.0, tagged v1.36.1, and a copy of the project's
//! images.toml and patches pins 1.36 to it.
//!
//! - Moved context: upstream edits the line two above patch 0003's change in main.go. The build
//!   applies 0003 three-way and is accepted (S1–S8); `patches edit` + `export` write 1.36's own
//!   refreshed 0003, which then applies as it is.
//! - True conflict: upstream changes the line 0003 changes (the call of
//!   `NewCloudControllerManagerCommand`, split in two lines as a dependency bump does).
//!   `patches edit` stops there with markers; the resolution is committed with `--continue`;
//!   0004, whose last hunk the resolution moved down by one line, applies with that hunk moved;
//!   `export` rewrites 0003 with the resolution and 0004 with its hunk's new line (nothing else
//!   in it changes), and keeps 0001 and 0002; `build --accept` of the tree with the refreshed
//!   series applies all four as they are and passes S1–S8.

use crate::common;

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use common::*;

const MAIN_GO: &str = "cmd/openstack-cloud-controller-manager/main.go";
const PATCH_0003: &str =
    "0003-occm-route-controller-init-func-constructors-through-a-function.patch";
const PATCH_0004: &str =
    "0004-occm-make-a-configured-cloud-node-controller-that-fails-to-start-fatal.patch";
const CALL: &str = "\tcommand := app.NewCloudControllerManagerCommand(ccmOptions, cloudInitializer, app.DefaultInitFuncConstructors, names.CCMControllerAliases(), fss, wait.NeverStop)\n";

fn mirror() -> String {
    std::env::var("OCCM_FORGE_UPSTREAM_MIRROR")
        .expect("set OCCM_FORGE_UPSTREAM_MIRROR to a mirror of kubernetes/cloud-provider-openstack")
}

/// A scratch clone of the mirror with `v1.36.1`: v1.36.0 with `from` replaced by `to` in
/// main.go; images.toml and patches/ copied from the project with 1.36 pinned to it.
struct Scratch {
    dir: tempfile::TempDir,
    upstream: PathBuf,
    patches: PathBuf,
}

fn scratch(from: &str, to: &str) -> Scratch {
    let dir = tempfile::tempdir().unwrap();
    let upstream = dir.path().join("upstream");
    run(git(dir.path())
        .args(["clone", "-q", "--shared", "--no-checkout", &mirror()])
        .arg(&upstream));
    run(git(&upstream).args(["checkout", "-q", "-b", "scratch", "v1.36.0"]));
    let text = std::fs::read_to_string(upstream.join(MAIN_GO)).unwrap();
    assert!(text.contains(from), "v1.36.0 main.go has no {from:?}");
    std::fs::write(upstream.join(MAIN_GO), text.replacen(from, to, 1)).unwrap();
    run(git(&upstream).args(["commit", "-q", "-am", "scratch: upstream edits main.go"]));
    run(git(&upstream).args(["tag", "v1.36.1"]));
    let commit = run(git(&upstream).args(["rev-parse", "HEAD"]))
        .trim()
        .to_string();
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let patches = dir.path().join("patches");
    std::fs::create_dir_all(&patches).unwrap();
    for e in std::fs::read_dir(root.join("patches")).unwrap() {
        let p = e.unwrap().path();
        std::fs::copy(&p, patches.join(p.file_name().unwrap())).unwrap();
    }
    let text = std::fs::read_to_string(root.join("images.toml")).unwrap();
    let start = text.find("[minors.\"1.36\"]").unwrap();
    let (head, minor) = text.split_at(start);
    let old_commit = minor
        .lines()
        .find_map(|l| l.strip_prefix("commit = \""))
        .unwrap()
        .trim_end_matches('"')
        .to_string();
    let minor = minor
        .replacen(
            "upstream_tag = \"v1.36.0\"",
            "upstream_tag = \"v1.36.1\"",
            1,
        )
        .replacen(&old_commit, &commit, 1);
    let config = dir.path().join("images.toml");
    std::fs::write(&config, format!("{head}{minor}")).unwrap();
    Scratch {
        dir,
        upstream,
        patches,
    }
}

impl Scratch {
    fn forge(&self, cache: &Path, args: &[&str]) -> Output {
        let tools = mcapi_tools();
        let started = std::time::Instant::now();
        let o = Command::new(env!("CARGO_BIN_EXE_occm-forge"))
            .current_dir(self.dir.path())
            .env_remove("SOURCE_DATE_EPOCH")
            .env("OCCM_FORGE_MCAPI_PYTHON", tools.python.unwrap())
            .env("OCCM_FORGE_HELM", tools.helm.unwrap())
            .arg("--cache-dir")
            .arg(cache)
            .args(args)
            .args(["--k8s", "1.36"])
            .output()
            .unwrap();
        eprintln!(
            "occm-forge {}: exit {:?} in {:.0} s\n{}{}",
            args.join(" "),
            o.status.code(),
            started.elapsed().as_secs_f64(),
            stdout(&o),
            stderr(&o)
        );
        o
    }

    fn source(&self) -> &str {
        self.upstream.to_str().unwrap()
    }

    fn build_accept(&self, cache: &Path) -> Output {
        self.forge(
            cache,
            &[
                "build",
                "--base",
                "static",
                "--accept",
                "--output",
                "out",
                "--source",
                self.source(),
            ],
        )
    }

    fn edit(&self, cache: &Path, extra: &[&str]) -> Output {
        let dir = self.dir.path().join("edit");
        let mut args = vec!["patches", "edit", "--source", self.source(), "--dir"];
        args.push(dir.to_str().unwrap());
        args.extend_from_slice(extra);
        self.forge(cache, &args)
    }

    fn export(&self, cache: &Path) -> Output {
        let dir = self.dir.path().join("edit");
        self.forge(
            cache,
            &["patches", "export", "--dir", dir.to_str().unwrap()],
        )
    }

    fn variant(&self) -> PathBuf {
        self.patches
            .join(PATCH_0003.replace(".patch", ".k8s-1.36.patch"))
    }
}

/// What `patches edit` printed for patch `name` (its line, after the padded name).
fn step_of(out: &str, name: &str) -> String {
    out.lines()
        .find_map(|l| l.trim_start().strip_prefix(name))
        .map(|rest| rest.trim().to_string())
        .unwrap_or_default()
}

fn accepted(o: &Output) {
    assert!(o.status.success(), "build --accept failed: {}", stderr(o));
    assert!(
        stderr(o)
            .lines()
            .any(|l| l.starts_with("occm-forge: accept ")
                && l.ends_with(
                    "ours passes S1 S2 S3 S4 S5 S6 S7 S8; the control fails S1 S2 S5 S7 S8"
                )),
        "{}",
        stderr(o)
    );
}

/// The lines the refreshed patch has and the old one lacks, and the other way round (`diff`
/// of the two files, without the `From <sha>` and `index` lines, which name commits and blobs).
fn changed_lines(old: &Path, new: &Path) -> (Vec<String>, Vec<String>) {
    let read = |p: &Path| -> Vec<String> {
        std::fs::read_to_string(p)
            .unwrap()
            .lines()
            .filter(|l| !l.starts_with("From ") && !l.starts_with("index "))
            .map(String::from)
            .collect()
    };
    let (a, b) = (read(old), read(new));
    let only = |x: &[String], y: &[String]| x.iter().filter(|l| !y.contains(l)).cloned().collect();
    (only(&b, &a), only(&a, &b))
}

#[test]
#[ignore = "needs OCCM_FORGE_UPSTREAM_MIRROR (a mirror of kubernetes/cloud-provider-openstack) and the Go module proxy"]
fn real_v1_36_moved_context_applies_three_way_is_accepted_and_exports_a_refreshed_patch() {
    let cache = gated_cache();
    let s = scratch(
        "\topenstack.AddExtraFlags(fss.FlagSet(\"OpenStack Client\"))\n",
        "\topenstack.AddExtraFlags(fss.FlagSet(\"OpenStack client\"))\n",
    );
    let o = s.build_accept(cache.path());
    assert!(
        stderr(&o).contains(&format!(
            "0003 applied three-way ({MAIN_GO}: 2 hunks merged with upstream's changes since blob ddd30e7)"
        )),
        "{}",
        stderr(&o)
    );
    accepted(&o);

    let o = s.edit(cache.path(), &[]);
    assert!(o.status.success());
    assert!(
        step_of(&stdout(&o), PATCH_0003).starts_with("applied three-way ("),
        "{}",
        stdout(&o)
    );
    let o = s.export(cache.path());
    assert!(o.status.success());
    assert!(
        stdout(&o).contains("written: 1.36's own variant"),
        "{}",
        stdout(&o)
    );
    // The refreshed 0003 differs from the shared one only in the moved context line (and the
    // From and index lines).
    let (added, removed) = changed_lines(&s.patches.join(PATCH_0003), &s.variant());
    assert_eq!(
        added,
        [" \topenstack.AddExtraFlags(fss.FlagSet(\"OpenStack client\"))"]
    );
    assert_eq!(
        removed,
        [" \topenstack.AddExtraFlags(fss.FlagSet(\"OpenStack Client\"))"]
    );
    // Laid out again, the refreshed series applies as it is.
    let o = s.edit(cache.path(), &["--restart"]);
    assert!(o.status.success());
    assert!(!stdout(&o).contains("three-way"), "{}", stdout(&o));
}

#[test]
#[ignore = "needs OCCM_FORGE_UPSTREAM_MIRROR (a mirror of kubernetes/cloud-provider-openstack) and the Go module proxy"]
fn real_v1_36_true_conflict_stops_is_resolved_exported_and_accepted() {
    let cache = gated_cache();
    let split = "\taliases := names.CCMControllerAliases()\n\tcommand := app.NewCloudControllerManagerCommand(ccmOptions, cloudInitializer, app.DefaultInitFuncConstructors, aliases, fss, wait.NeverStop)\n";
    let s = scratch(CALL, split);
    let o = s.edit(cache.path(), &[]);
    assert_eq!(o.status.code(), Some(4));
    assert!(
        stderr(&o).contains(&format!(
            "patch {PATCH_0003} conflicts: {MAIN_GO}, hunk 1 (@@ -52,7 +52,7 @@"
        )),
        "{}",
        stderr(&o)
    );
    let file = s.dir.path().join("edit").join(MAIN_GO);
    let text = std::fs::read_to_string(&file).unwrap();
    let start = text.find("<<<<<<< HEAD\n").expect("markers");
    let end_marker = format!(">>>>>>> {PATCH_0003}\n");
    let end = text.find(&end_marker).unwrap() + end_marker.len();
    let resolved = format!(
        "{}\taliases := names.CCMControllerAliases()\n\tcommand := app.NewCloudControllerManagerCommand(ccmOptions, cloudInitializer, controllerInitFuncConstructors(app.DefaultInitFuncConstructors), aliases, fss, wait.NeverStop)\n{}",
        &text[..start],
        &text[end..]
    );
    std::fs::write(&file, resolved).unwrap();
    run(git(&s.dir.path().join("edit")).args(["add", MAIN_GO]));
    let o = s.edit(cache.path(), &["--continue"]);
    assert!(o.status.success());
    assert_eq!(
        step_of(&stdout(&o), PATCH_0004),
        format!("applied three-way ({MAIN_GO}: hunk 3 moved by 1 line)"),
        "{}",
        stdout(&o)
    );
    let o = s.export(cache.path());
    assert!(o.status.success());
    let out = stdout(&o);
    assert_eq!(out.matches("  unchanged").count(), 2, "{out}");
    assert_eq!(
        out.matches("written: 1.36's own variant").count(),
        2,
        "{out}"
    );
    let variant_0004 = s
        .patches
        .join(PATCH_0004.replace(".patch", ".k8s-1.36.patch"));
    assert_eq!(
        changed_lines(&s.patches.join(PATCH_0004), &variant_0004),
        (
            vec!["@@ -66,15 +69,43 @@ func main() {".to_string()],
            vec!["@@ -65,15 +68,43 @@ func main() {".to_string()]
        )
    );
    let (added, _) = changed_lines(&s.patches.join(PATCH_0003), &s.variant());
    assert!(
        added.contains(&"+\tcommand := app.NewCloudControllerManagerCommand(ccmOptions, cloudInitializer, controllerInitFuncConstructors(app.DefaultInitFuncConstructors), aliases, fss, wait.NeverStop)".to_string()),
        "{added:?}"
    );
    let o = s.build_accept(cache.path());
    assert!(
        stderr(&o).contains("4 applied, 0 already upstream"),
        "{}",
        stderr(&o)
    );
    assert!(!stderr(&o).contains("three-way"), "{}", stderr(&o));
    accepted(&o);
}
