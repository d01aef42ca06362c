//! `occm-forge pin` on the fixture: moving a minor to a new upstream tag, adding a minor, and
//! pinning go-runner-like bases by digest in a real registry, all while keeping images.toml's
//! comments.

use crate::common;

use std::process::Output;

use common::*;

fn pin(f: &Fixture, reg: &str, args: &[&str]) -> Output {
    occm_forge(f.path())
        .arg("pin")
        .args(args)
        .args(["--insecure-registry", reg, "--source"])
        .arg(&f.upstream)
        .output()
        .unwrap()
}

fn comments(text: &str) -> Vec<String> {
    text.lines()
        .filter(|l| l.trim_start().starts_with('#') || l.contains(" # "))
        .map(str::to_string)
        .collect()
}

#[test]
fn pin_moves_a_minor_to_a_new_tag_and_pins_its_base_keeping_comments() {
    let reg = TestRegistry::start();
    let f = fixture(&["linux/amd64"]);
    let runner = reg.repo("build-image/go-runner");
    let old_base = format!("{runner}:v2.4.0-go1.25.1-bookworm.0");
    f.write_config("127.0.0.1:1/occm/occm", &["linux/amd64"], &old_base, &[]);
    // A comment next to a value and one above a key, as people write them.
    let cfg = std::fs::read_to_string(&f.config).unwrap();
    let cfg = cfg.replacen(
        "revision = 1\n",
        "revision = 1  # bump when the series changes\n",
        2,
    );
    let cfg = cfg.replacen(
        "[minors.\"1.34\"]\n",
        "[minors.\"1.34\"]\n# v1.34.x: the current release line\n",
        1,
    );
    std::fs::write(&f.config, &cfg).unwrap();

    // An unpinned base is refused by build, naming the way out.
    let o = occm_forge(f.path())
        .args(["build", "--k8s", "1.34", "--source"])
        .arg(&f.upstream)
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(2), "{}", stderr(&o));
    assert!(
        stderr(&o).contains("has no @sha256 digest: run `occm-forge pin --k8s 1.34`"),
        "{}",
        stderr(&o)
    );

    let new_runner = format!("{runner}:v2.4.0-go1.25.3-bookworm.0");
    let digest = push_base(f.path(), &runner, "v2.4.0-go1.25.3-bookworm.0");
    let commit = f.release("v1.34.2", "1.25.3", &new_runner);

    let o = pin(&f, &reg.addr, &["--k8s", "1.34", "--tag", "v1.34.2"]);
    assert!(o.status.success(), "{}", stderr(&o));
    let after = std::fs::read_to_string(&f.config).unwrap();
    assert_eq!(
        comments(&cfg),
        comments(&after),
        "comments changed:\n{after}"
    );
    let toml: toml::Table = after.parse().unwrap();
    let m = &toml["minors"]["1.34"];
    assert_eq!(m["upstream_tag"].as_str(), Some("v1.34.2"));
    assert_eq!(m["commit"].as_str(), Some(commit.as_str()));
    assert_eq!(m["go"].as_str(), Some("1.25.3"));
    assert_eq!(
        m["base"].as_str().unwrap(),
        format!("{new_runner}@{digest}")
    );
    assert_eq!(m["revision"].as_integer(), Some(1));
    // Other minors untouched.
    let before: toml::Table = cfg.parse().unwrap();
    assert_eq!(toml["minors"]["1.33"], before["minors"]["1.33"]);
    let out = stdout(&o);
    assert!(
        out.contains("minors.\"1.34\".upstream_tag: \"v1.34.1\" → \"v1.34.2\"\n"),
        "{out}"
    );
    assert!(
        out.contains(&format!(
            "minors.\"1.34\".base: \"{new_runner}\" → \"{new_runner}@{digest}\"\n"
        )),
        "{out}"
    );

    // Pinning again changes nothing.
    let o = pin(&f, &reg.addr, &["--k8s", "1.34"]);
    assert!(o.status.success(), "{}", stderr(&o));
    assert_eq!(stdout(&o), "");
    assert_eq!(std::fs::read_to_string(&f.config).unwrap(), after);
}

#[test]
fn pin_adds_a_new_minor_from_the_previous_one() {
    let f = fixture(&["linux/amd64"]);
    let commit = f.release(
        "v1.36.0",
        "1.26.2",
        "registry.k8s.io/build-image/go-runner:v2.4.0-go1.26.2-bookworm.0",
    );
    let before = std::fs::read_to_string(&f.config).unwrap();
    let o = pin(
        &f,
        "127.0.0.1:1",
        &["--new-minor", "1.36", "--tag", "v1.36.0"],
    );
    assert!(o.status.success(), "{}", stderr(&o));
    let after = std::fs::read_to_string(&f.config).unwrap();
    assert!(after.starts_with(&before), "existing text changed");
    let toml: toml::Table = after.parse().unwrap();
    let m = &toml["minors"]["1.36"];
    assert_eq!(m["upstream_tag"].as_str(), Some("v1.36.0"));
    assert_eq!(m["commit"].as_str(), Some(commit.as_str()));
    assert_eq!(m["go"].as_str(), Some("1.26.2"));
    assert_eq!(
        m["base"].as_str(),
        Some("static"),
        "a static base stays static"
    );
    assert_eq!(m["patches"], toml["minors"]["1.35"]["patches"]);
    // A minor that exists cannot be added again.
    let o = pin(
        &f,
        "127.0.0.1:1",
        &["--new-minor", "1.36", "--tag", "v1.36.0"],
    );
    assert_eq!(o.status.code(), Some(2));
    assert!(
        stderr(&o).contains("minor 1.36 exists already"),
        "{}",
        stderr(&o)
    );
}

/// The fixture's images.toml with the keys its minors share moved into `[defaults]`.
fn use_defaults(f: &Fixture) {
    let text = std::fs::read_to_string(&f.config).unwrap();
    let shared = [
        "platforms = ",
        "patches = ",
        "test_packages = ",
        "required_tests = ",
    ];
    let mut defaults = String::from("[defaults]\n");
    for key in shared {
        let line = text.lines().find(|l| l.starts_with(key)).unwrap();
        defaults.push_str(line);
        defaults.push('\n');
    }
    let kept: Vec<&str> = text
        .lines()
        .filter(|l| !shared.iter().any(|k| l.starts_with(k)))
        .collect();
    let kept = kept.join("\n") + "\n";
    let at = kept.find("[minors.").unwrap();
    std::fs::write(
        &f.config,
        format!("{}{defaults}\n{}", &kept[..at], &kept[at..]),
    )
    .unwrap();
}

#[test]
fn pin_adds_a_new_minor_with_its_own_keys_only_when_defaults_exist() {
    let f = fixture(&["linux/amd64"]);
    use_defaults(&f);
    let o = occm_forge(f.path()).arg("minors").output().unwrap();
    assert_eq!(
        stdout(&o),
        "[\"1.33\",\"1.34\",\"1.35\"]\n",
        "{}",
        stderr(&o)
    );
    // The local toolchain, so that the new minor builds offline.
    let commit = f.release(
        "v1.36.0",
        &local_go_version(),
        "registry.k8s.io/build-image/go-runner:v2.4.0-go1.26.2-bookworm.0",
    );
    let o = pin(
        &f,
        "127.0.0.1:1",
        &["--new-minor", "1.36", "--tag", "v1.36.0"],
    );
    assert!(o.status.success(), "{}", stderr(&o));
    let toml: toml::Table = std::fs::read_to_string(&f.config).unwrap().parse().unwrap();
    let m = toml["minors"]["1.36"].as_table().unwrap();
    let keys: Vec<&str> = m.keys().map(String::as_str).collect();
    assert_eq!(
        keys,
        ["base", "commit", "go", "revision", "upstream_tag"],
        "{m:?}"
    );
    assert_eq!(m["commit"].as_str(), Some(commit.as_str()));
    // It builds from [defaults] like the others: the fixture's series and its tests.
    let o = occm_forge(f.path())
        .args(["-q", "build", "--k8s", "1.36", "--source"])
        .arg(&f.upstream)
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", stderr(&o));
    assert_eq!(stdout(&o), "oci:out:v1.36.0-occmforge.1\n");
}

#[test]
fn pin_keeps_the_reference_when_the_registry_is_unreachable() {
    let f = fixture(&["linux/amd64"]);
    let addr = format!("127.0.0.1:{}", free_port());
    let base = format!("{addr}/build-image/go-runner:v1");
    f.write_config("127.0.0.1:1/occm/occm", &["linux/amd64"], &base, &[]);
    let before = std::fs::read_to_string(&f.config).unwrap();
    let o = pin(&f, &addr, &["--k8s", "1.34"]);
    assert!(o.status.success(), "{}", stderr(&o));
    assert!(
        stderr(&o).contains(&format!("minors.\"1.34\".base keeps `{base}`")),
        "{}",
        stderr(&o)
    );
    assert_eq!(std::fs::read_to_string(&f.config).unwrap(), before);
}

/// `end_of_life` is information: `minors --supported` leaves a minor past it out, `build` still
/// builds it and says so once, `pin --new-minor` does not copy another minor's date, and
/// `pin --end-of-life` sets it (a date, or one line of refusal).
#[test]
fn end_of_life_is_information_that_pin_sets_and_minors_supported_reads() {
    let f = fixture(&["linux/amd64"]);
    let text = std::fs::read_to_string(&f.config).unwrap();
    let text = text
        .replacen(
            "[minors.\"1.33\"]\n",
            "[minors.\"1.33\"]\nend_of_life = 2020-01-01\n",
            1,
        )
        .replacen(
            "[minors.\"1.35\"]\n",
            "[minors.\"1.35\"]\nend_of_life = 2099-12-31\n",
            1,
        );
    std::fs::write(&f.config, text).unwrap();
    let minors = |extra: &[&str]| {
        let o = occm_forge(f.path())
            .arg("minors")
            .args(extra)
            .output()
            .unwrap();
        assert!(o.status.success(), "{}", stderr(&o));
        stdout(&o)
    };
    assert_eq!(minors(&[]), "[\"1.33\",\"1.34\",\"1.35\"]\n");
    assert_eq!(minors(&["--supported"]), "[\"1.34\",\"1.35\"]\n");

    f.release(
        "v1.36.0",
        "1.26.2",
        "registry.k8s.io/build-image/go-runner:v2.4.0-go1.26.2-bookworm.0",
    );
    let o = pin(
        &f,
        "127.0.0.1:1",
        &["--new-minor", "1.36", "--tag", "v1.36.0"],
    );
    assert!(o.status.success(), "{}", stderr(&o));
    assert!(
        stderr(&o).contains(
            "minors.\"1.36\" has no end_of_life: add the date from the Kubernetes release calendar"
        ),
        "{}",
        stderr(&o)
    );
    let toml: toml::Table = std::fs::read_to_string(&f.config).unwrap().parse().unwrap();
    assert!(
        toml["minors"]["1.36"].get("end_of_life").is_none(),
        "1.35's date was copied"
    );
    let o = pin(
        &f,
        "127.0.0.1:1",
        &["--k8s", "1.36", "--end-of-life", "2027-06-28"],
    );
    assert!(o.status.success(), "{}", stderr(&o));
    assert!(
        stdout(&o).contains("minors.\"1.36\".end_of_life: none → 2027-06-28"),
        "{}",
        stdout(&o)
    );
    let toml: toml::Table = std::fs::read_to_string(&f.config).unwrap().parse().unwrap();
    assert_eq!(
        toml["minors"]["1.36"]["end_of_life"]
            .as_datetime()
            .map(ToString::to_string)
            .as_deref(),
        Some("2027-06-28")
    );
    let before = std::fs::read_to_string(&f.config).unwrap();
    let o = pin(
        &f,
        "127.0.0.1:1",
        &["--k8s", "1.36", "--end-of-life", "2027-13-01"],
    );
    assert_eq!(o.status.code(), Some(2), "{}", stderr(&o));
    assert!(
        stderr(&o).contains("`2027-13-01` is not a date YYYY-MM-DD"),
        "{}",
        stderr(&o)
    );
    assert_eq!(std::fs::read_to_string(&f.config).unwrap(), before);

    // A minor past its end of life still builds, and the build says so once.
    let o = occm_forge(f.path())
        .args(["build", "--k8s", "1.33", "--source"])
        .arg(&f.upstream)
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", stderr(&o));
    assert_eq!(
        stderr(&o)
            .matches("1.33 is past its end of life (2020-01-01")
            .count(),
        1,
        "{}",
        stderr(&o)
    );
}

/// A file-based Go module proxy (`GOPROXY=file://…`) whose golang.org/toolchain lists
/// `listed` and serves (has the `.info` and `.mod` of) `served` only.
fn toolchain_proxy(f: &Fixture, listed: &[String], served: &[String]) -> String {
    let dir = f.path().join("goproxy/golang.org/toolchain/@v");
    std::fs::create_dir_all(&dir).unwrap();
    let version = |go: &str| format!("v0.0.1-go{go}.linux-amd64");
    let list: String = listed.iter().map(|g| version(g) + "\n").collect();
    std::fs::write(dir.join("list"), list).unwrap();
    for go in served {
        std::fs::write(
            dir.join(format!("{}.info", version(go))),
            format!(
                "{{\"Version\":\"{}\",\"Time\":\"2026-11-02T20:36:21Z\"}}\n",
                version(go)
            ),
        )
        .unwrap();
        std::fs::write(
            dir.join(format!("{}.mod", version(go))),
            "module golang.org/toolchain\n",
        )
        .unwrap();
    }
    format!("file://{}", f.path().join("goproxy").display())
}

/// `pin --go patch` moves a minor to the newest revision of its Go line that the proxy serves
/// (`current` then has nothing left to do on a supported line)
/// and starts a new revision; `--go` with a release the proxy lists but refuses is one line
/// naming it and the proxy's answer, before any Go work, with images.toml unchanged; `upstream
/// check` names the minor whose Go is behind (exit 11).
#[test]
fn pin_go_current_takes_the_newest_patch_the_proxy_serves() {
    let f = fixture(&["linux/amd64"]);
    let go = local_go_version();
    let (line, patch) = go.rsplit_once('.').unwrap();
    let patch: u32 = patch.parse().unwrap();
    let (major, minor) = line.split_once('.').unwrap();
    let next_line = format!("{major}.{}.0", minor.parse::<u32>().unwrap() + 1);
    let newer = format!("{line}.{}", patch + 3);
    let refused = format!("{line}.{}", patch + 4);
    let listed = [
        format!("{line}.0"),
        go.clone(),
        newer.clone(),
        refused.clone(),
        next_line,
    ];
    let served: Vec<String> = listed.iter().filter(|g| **g != refused).cloned().collect();
    let proxy = toolchain_proxy(&f, &listed, &served);
    let run = |args: &[&str]| {
        occm_forge(f.path())
            .args(args)
            .arg("--source")
            .arg(&f.upstream)
            .env("GOPROXY", &proxy)
            // The stand-in proxy's go.mod files are not in the checksum database.
            .env("GOSUMDB", "off")
            .output()
            .unwrap()
    };

    // 1.35 declines a newer Go for good.
    let cfg = std::fs::read_to_string(&f.config).unwrap();
    assert!(cfg.contains("[minors.\"1.35\"]\n"), "{cfg}");
    std::fs::write(
        &f.config,
        cfg.replace(
            "[minors.\"1.35\"]\n",
            "[minors.\"1.35\"]\ngo_policy = \"upstream\"\n",
        ),
    )
    .unwrap();
    let o = run(&["upstream", "check", "--json"]);
    assert_eq!(o.status.code(), Some(11), "{}", stderr(&o));
    let report: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(report["go_behind"], true, "{report}");
    let m134 = report["minors"]
        .as_array()
        .unwrap()
        .iter()
        .find(|m| m["minor"] == "1.34")
        .unwrap();
    // The newest listed release is refused: listing is not serving, so the proposal is the
    // newest one served, and the refused one is named.
    assert_eq!(m134["go"]["proposal"], newer.as_str(), "{m134}");
    assert_eq!(m134["go"]["refused"][0], refused.as_str(), "{m134}");
    // On a supported line the one step is its newest patch, not built and accepted yet.
    assert_eq!(
        m134["go_proposals"],
        serde_json::json!([{"go": newer, "step": "patch", "proposed": true}]),
        "{m134}"
    );
    let m135 = report["minors"]
        .as_array()
        .unwrap()
        .iter()
        .find(|m| m["minor"] == "1.35")
        .unwrap();
    assert_eq!(m135["go_held"], newer.as_str(), "{m135}");
    assert_eq!(m135["go"].get("proposal"), None, "{m135}");
    let held = std::fs::read(&f.config).unwrap();
    let o = run(&["pin", "--k8s", "1.35", "--go", "current"]);
    assert!(o.status.success(), "{}", stderr(&o));
    assert!(
        stderr(&o).contains("1.35: go_policy = \"upstream\" declines a newer Go; `go` kept"),
        "{}",
        stderr(&o)
    );
    assert_eq!(std::fs::read(&f.config).unwrap(), held);

    let before = std::fs::read(&f.config).unwrap();
    let o = run(&["pin", "--k8s", "1.34", "--go", &refused]);
    assert_eq!(o.status.code(), Some(2), "{}", stderr(&o));
    let err = stderr(&o);
    assert!(
        err.starts_with(&format!(
            "occm-forge: error: pin --go: the Go module proxy does not serve Go {refused} (golang.org/toolchain@v0.0.1-go{refused}.linux-amd64): go: golang.org/toolchain@v0.0.1-go{refused}.linux-amd64: reading file://"
        )),
        "{err}"
    );
    assert_eq!(err.lines().count(), 1, "{err}");
    assert_eq!(
        std::fs::read(&f.config).unwrap(),
        before,
        "images.toml changed"
    );

    let o = run(&["pin", "--k8s", "1.34", "--go", "patch"]);
    assert!(o.status.success(), "{}", stderr(&o));
    assert!(
        stderr(&o).contains(&format!(
            "the Go module proxy lists Go {refused} but does not serve it; skipped"
        )),
        "{}",
        stderr(&o)
    );
    assert_eq!(
        stdout(&o),
        format!("minors.\"1.34\".go: \"{go}\" → \"{newer}\"\nminors.\"1.34\".revision: 1 → 2\n")
    );
    let cfg = std::fs::read_to_string(&f.config).unwrap();
    assert!(cfg.contains(&format!("go = \"{newer}\"")), "{cfg}");
    // On a supported line `current` is the same step: nothing left to do.
    let o = run(&["pin", "--k8s", "1.34", "--go", "current"]);
    assert!(o.status.success(), "{}", stderr(&o));
    assert_eq!(stdout(&o), "", "{}", stderr(&o));
    assert_eq!(std::fs::read_to_string(&f.config).unwrap(), cfg);

    // Back to an older Go only on purpose.
    let o = run(&["pin", "--k8s", "1.34", "--go", &go]);
    assert_eq!(o.status.code(), Some(2), "{}", stderr(&o));
    assert!(
        stderr(&o).contains(&format!(
            "--go {go} is older than the pinned Go {newer}; pass --allow-downgrade to move back"
        )),
        "{}",
        stderr(&o)
    );
    // Re-pinning the same tag keeps the Go chosen downstream and the revision.
    let o = run(&["pin", "--k8s", "1.34", "--tag", "v1.34.1"]);
    assert!(o.status.success(), "{}", stderr(&o));
    let cfg = std::fs::read_to_string(&f.config).unwrap();
    assert!(cfg.contains(&format!("go = \"{newer}\"")), "{cfg}");
    assert!(!stdout(&o).contains("revision"), "{}", stdout(&o));
    // Upstream moved the tag: its new commit is another input, so a new revision.
    common::run(git(&f.upstream).args(["tag", "-f", "v1.34.1", &f.commits.v1_35]));
    let o = run(&["pin", "--k8s", "1.34", "--tag", "v1.34.1"]);
    assert!(o.status.success(), "{}", stderr(&o));
    assert!(
        stdout(&o).contains("minors.\"1.34\".revision: 2 → 3"),
        "{}",
        stdout(&o)
    );

    // A proxy that cannot be asked is not one that refuses, and no cached answer stands in.
    let off = |args: &[&str]| {
        occm_forge(f.path())
            .args(args)
            .arg("--source")
            .arg(&f.upstream)
            .env("GOPROXY", "off")
            .output()
            .unwrap()
    };
    let o = off(&["pin", "--k8s", "1.35", "--go", &newer]);
    assert_eq!(o.status.code(), Some(2), "{}", stderr(&o));
    assert!(
        stderr(&o).contains(&format!("cannot ask it about Go {newer}")),
        "{}",
        stderr(&o)
    );
    let o = off(&["upstream", "check", "--json"]);
    let report: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    assert!(
        report["go_unchecked"]
            .as_str()
            .is_some_and(|w| w.contains("GOPROXY=off")),
        "{report}"
    );
    assert_eq!(report["go_behind"], false, "{report}");
}
