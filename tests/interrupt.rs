//! SIGINT and SIGTERM at several stages, and two runs on one digest manifest: no torn or changed
//! manifest, no tag on a partial image, no scratch directories and no Go processes left behind.

use crate::common;

use std::io::Read;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use common::*;

/// A Go test that, when OCCM_FORGE_TEST_PIDFILE is set, writes its PID and working directory there
/// and sleeps: the test stage is then reliably in progress.
const SLOW_TEST_PATCH: &str = r#"From: Someone <someone@example.org>
Subject: [PATCH] a test that can be slow

---
diff --git a/pkg/openstack/slow_test.go b/pkg/openstack/slow_test.go
new file mode 100644
--- /dev/null
+++ b/pkg/openstack/slow_test.go
@@ -0,0 +1,20 @@
+package openstack
+
+import (
+	"os"
+	"strconv"
+	"testing"
+	"time"
+)
+
+func TestSlowWhenAsked(t *testing.T) {
+	pidfile := os.Getenv("OCCM_FORGE_TEST_PIDFILE")
+	if pidfile == "" {
+		return
+	}
+	wd, _ := os.Getwd()
+	os.WriteFile(pidfile+".tmp", []byte(strconv.Itoa(os.Getpid())+"\n"+wd), 0o644)
+	os.Rename(pidfile+".tmp", pidfile)
+	time.Sleep(120 * time.Second)
+	t.Log("slept")
+}
"#;

fn slow_fixture() -> Fixture {
    let f = fixture(&["linux/amd64"]);
    f.add_patch(
        "1.34",
        "0003-a-test-that-can-be-slow.patch",
        SLOW_TEST_PATCH,
    );
    f
}

fn spawn_build(f: &Fixture, pidfile: Option<&Path>, extra: &[&str]) -> Child {
    spawn_build_with(f, pidfile, extra, None)
}

/// [`spawn_build`] with its own cache directory when `cache` is given.
fn spawn_build_with(
    f: &Fixture,
    pidfile: Option<&Path>,
    extra: &[&str],
    cache: Option<&Path>,
) -> Child {
    let mut c = occm_forge(f.path());
    if let Some(dir) = cache {
        c.env("OCCM_FORGE_CACHE", dir);
    }
    c.args(["build", "--k8s", "1.34", "--source"])
        .arg(&f.upstream)
        .args(extra)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    match pidfile {
        Some(p) => c.env("OCCM_FORGE_TEST_PIDFILE", p),
        None => c.env_remove("OCCM_FORGE_TEST_PIDFILE"),
    };
    c.spawn().unwrap()
}

/// Waits for the slow Go test to write (pid, working directory).
fn wait_for_slow_test(pidfile: &Path, child: &mut Child) -> (u32, PathBuf) {
    let deadline = Instant::now() + Duration::from_secs(240);
    while Instant::now() < deadline {
        if let Ok(text) = std::fs::read_to_string(pidfile) {
            let (pid, wd) = text.split_once('\n').unwrap();
            return (pid.parse().unwrap(), PathBuf::from(wd));
        }
        if let Ok(Some(status)) = child.try_wait() {
            let mut err = String::new();
            child
                .stderr
                .take()
                .unwrap()
                .read_to_string(&mut err)
                .unwrap();
            panic!("occm-forge ended ({status}) before the slow test ran: {err}");
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    panic!("the slow test never started");
}

fn signal(child: &Child, sig: &str) {
    run(Command::new("kill").args([&format!("-{sig}"), &child.id().to_string()]));
}

fn finish(child: Child) -> (Option<i32>, String) {
    let out = child.wait_with_output().unwrap();
    (
        out.status.code(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

fn alive(pid: u32) -> bool {
    Path::new(&format!("/proc/{pid}")).exists()
        && !std::fs::read_to_string(format!("/proc/{pid}/stat"))
            .unwrap_or_default()
            .contains(") Z ")
}

/// The scratch directories of runs in `cache`: `<cache>/tmp/build-…`.
fn scratch_dirs(cache: &Path) -> Vec<PathBuf> {
    std::fs::read_dir(cache.join("tmp"))
        .map(|d| {
            d.flatten()
                .map(|e| e.path())
                .filter(|p| {
                    p.file_name()
                        .unwrap()
                        .to_string_lossy()
                        .starts_with("build-")
                })
                .collect()
        })
        .unwrap_or_default()
}

#[test]
fn sigint_during_go_tests_stops_everything_and_records_nothing() {
    let f = slow_fixture();
    let lock = f.seed_lock();
    let pidfile = f.path().join("slow.pid");
    // A cache of its own, so that the scratch space seen is this run's.
    let cache = f.path().join("cache");
    let mut child = spawn_build_with(&f, Some(&pidfile), &[], Some(&cache));
    let (go_pid, wd) = wait_for_slow_test(&pidfile, &mut child);
    assert!(wd.starts_with(cache.join("trees/1.34")), "{}", wd.display());
    let scratch = scratch_dirs(&cache);
    assert_eq!(scratch.len(), 1, "{scratch:?}");
    signal(&child, "INT");
    let (code, err) = finish_within(child, Duration::from_secs(10));
    assert_eq!(code, Some(130), "{err}");
    assert!(
        err.trim_end().ends_with(
            "occm-forge: error: interrupted by signal 2: stopped, nothing recorded, no tag moved"
        ),
        "{err}"
    );
    assert_eq!(
        std::fs::read(&f.lock).unwrap(),
        lock,
        "the digest manifest changed"
    );
    assert_eq!(
        scratch_dirs(&cache),
        Vec::<PathBuf>::new(),
        "scratch left behind"
    );
    let deadline = Instant::now() + Duration::from_secs(10);
    while alive(go_pid) && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(100));
    }
    assert!(
        !alive(go_pid),
        "the Go test process {go_pid} outlived occm-forge"
    );
}

#[test]
fn sigterm_during_publish_moves_no_tag() {
    let reg = TestRegistry::start();
    let f = fixture(&["linux/amd64", "linux/arm64"]);
    let lock = f.seed_lock();
    // Hold the second platform manifest: blobs are in, the index and the tag are not.
    let proxy = FaultProxy::start(
        &reg.addr,
        vec![FaultRule {
            method: "PUT",
            path_contains: "/manifests/sha256:",
            fault: Fault::Delay(Duration::from_secs(20)),
            times: 1,
            after: 1,
        }],
    );
    let repo = proxy.repo("occm/openstack-cloud-controller-manager");
    let mut child = spawn_build(
        &f,
        None,
        &[
            "--push",
            "--repository",
            &repo,
            "--insecure-registry",
            &proxy.addr,
        ],
    );
    let deadline = Instant::now() + Duration::from_secs(240);
    while proxy
        .counts
        .delayed
        .load(std::sync::atomic::Ordering::SeqCst)
        == 0
    {
        assert!(
            Instant::now() < deadline,
            "the push never reached the delayed manifest"
        );
        if let Ok(Some(s)) = child.try_wait() {
            panic!("occm-forge ended early: {s}");
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    signal(&child, "TERM");
    let (code, err) = finish_within(child, Duration::from_secs(90));
    assert_eq!(code, Some(143), "{err}");
    assert!(err.contains("interrupted by signal 15"), "{err}");
    assert_eq!(
        std::fs::read(&f.lock).unwrap(),
        lock,
        "the digest manifest changed"
    );
    assert_eq!(
        reg.get_status("/v2/occm/openstack-cloud-controller-manager/manifests/v1.34.1-occmforge.1"),
        Some(404),
        "the tag was written"
    );
}

#[test]
fn a_second_run_on_the_same_manifest_waits_or_refuses() {
    let f = slow_fixture();
    let pidfile = f.path().join("slow.pid");
    let mut first = spawn_build(&f, Some(&pidfile), &[]);
    wait_for_slow_test(&pidfile, &mut first);

    let o = occm_forge(f.path())
        .args(["build", "--k8s", "1.34", "--no-wait", "--source"])
        .arg(&f.upstream)
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(9), "{}", stderr(&o));
    let name = f.lock.file_name().unwrap().to_string_lossy().to_string();
    let last = stderr(&o).lines().last().unwrap().to_string();
    assert!(
        last.contains(&format!(
            "{name} is in use by another occm-forge run (pid {})",
            first.id()
        )),
        "{last}"
    );

    // Without --no-wait the second run waits, says so, and goes on once the first has stopped.
    let second = spawn_build(&f, None, &["--output", "out2"]);
    std::thread::sleep(Duration::from_secs(2));
    signal(&first, "INT");
    let (code, _) = finish(first);
    assert_eq!(code, Some(130));
    let (code, err) = finish(second);
    assert_eq!(code, Some(0), "{err}");
    assert!(err.contains("waiting for another occm-forge run"), "{err}");
    assert!(read_lock(&f.lock)["images"]["1.34"]["digest"].is_string());
}

#[test]
fn after_sigkill_the_next_run_stops_leftover_go_processes_and_removes_scratch_and_temp_files() {
    let f = slow_fixture();
    let lock = f.seed_lock();
    let cache = f.path().join("cache");
    let pidfile = f.path().join("slow.pid");
    let mut child = spawn_build_with(&f, Some(&pidfile), &[], Some(&cache));
    let (test_pid, _) = wait_for_slow_test(&pidfile, &mut child);
    let scratch = scratch_dirs(&cache);
    assert_eq!(scratch.len(), 1);
    signal(&child, "KILL");
    let _ = finish(child);
    assert_eq!(std::fs::read(&f.lock).unwrap(), lock);
    // What a killed write of the digest manifest leaves: a complete temporary copy.
    let stray = f.path().join(".occm-forge-tmp-AbCdEf");
    std::fs::write(&stray, &lock).unwrap();
    let old = std::time::SystemTime::now() - Duration::from_secs(600);
    std::fs::File::options()
        .write(true)
        .open(&stray)
        .unwrap()
        .set_modified(old)
        .unwrap();
    assert!(alive(test_pid), "the orphaned test binary is still running");

    // The next run on the same cache and manifest cleans up before it builds.
    let next = spawn_build_with(&f, None, &[], Some(&cache));
    let (code, err) = finish(next);
    assert_eq!(code, Some(0), "{err}");
    let deadline = Instant::now() + Duration::from_secs(10);
    while alive(test_pid) && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(100));
    }
    assert!(
        !alive(test_pid),
        "the killed run's Go test {test_pid} is still running"
    );
    assert!(
        !scratch[0].exists(),
        "the killed run's scratch is still there"
    );
    assert!(!stray.exists(), "the stray temporary file is still there");
}

/// `build --all` interrupted in its third minor: the two minors built before are recorded and
/// their results printed (stdout), the summary table marks the third interrupted, and the last
/// line names what is recorded where; exit 130 as for any SIGINT.
#[test]
fn sigint_in_the_third_minor_of_all_prints_and_names_the_two_recorded() {
    let f = fixture(&["linux/amd64"]);
    f.add_patch(
        "1.35",
        "0003-a-test-that-can-be-slow.patch",
        SLOW_TEST_PATCH,
    );
    let pidfile = f.path().join("slow.pid");
    let mut child = occm_forge(f.path())
        .args(["build", "--all", "--source"])
        .arg(&f.upstream)
        .env("OCCM_FORGE_TEST_PIDFILE", &pidfile)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    wait_for_slow_test(&pidfile, &mut child);
    signal(&child, "INT");
    let out = child.wait_with_output().unwrap();
    let (out_text, err) = (stdout(&out), stderr(&out));
    assert_eq!(out.status.code(), Some(130), "{err}");
    assert_eq!(
        out_text, "oci:out:v1.33.1-occmforge.1\noci:out:v1.34.1-occmforge.1\n",
        "{err}"
    );
    let summary: Vec<&str> = err
        .lines()
        .skip_while(|l| !l.starts_with("occm-forge: minor "))
        .collect();
    assert!(summary.len() >= 5, "no summary table: {err}");
    assert!(
        summary[1].starts_with("occm-forge: 1.33   built       sha256:"),
        "{summary:?}"
    );
    assert!(
        summary[2].starts_with("occm-forge: 1.34   built       sha256:"),
        "{summary:?}"
    );
    assert!(
        summary[3].starts_with("occm-forge: 1.35   interrupted signal 2"),
        "{summary:?}"
    );
    assert_eq!(summary[4], "occm-forge: 3 minors, 0 failed, 1 interrupted");
    assert_eq!(
        err.lines().last().unwrap(),
        "occm-forge: error: interrupted by signal 2 during 1.35: 1.35 stopped, not recorded, its tag not moved; recorded in images.lock.yaml: 1.33, 1.34",
        "{err}"
    );
    let lock = read_lock(&f.lock);
    let minors: Vec<&str> = lock["images"]
        .as_mapping()
        .unwrap()
        .keys()
        .map(|k| k.as_str().unwrap())
        .collect();
    assert_eq!(minors, ["1.33", "1.34"]);
}

/// Sets `path`'s modification time `secs` seconds back.
fn age(path: &Path, secs: u64) {
    let t = std::time::SystemTime::now() - Duration::from_secs(secs);
    std::fs::File::open(path).unwrap().set_modified(t).unwrap();
}

/// Leftovers of killed runs go at the next run, a no-op one included: a scratch directory whose
/// sweep was killed after its `.lock` was deleted, one whose sweep was killed after it was
/// renamed away, and a temporary copy of the digest manifest a killed write left a second ago.
/// What another run may still be using stays: a scratch directory whose lock is held, and a
/// temporary file of another file's write.
#[test]
fn leftovers_of_killed_runs_go_at_the_next_run_even_a_no_op() {
    let f = fixture(&["linux/amd64"]);
    let cache = f.path().join("cache");
    let build = |extra: &[&str]| {
        let o = occm_forge(f.path())
            .env("OCCM_FORGE_CACHE", &cache)
            .args(["build", "--k8s", "1.34", "--source"])
            .arg(&f.upstream)
            .args(extra)
            .output()
            .unwrap();
        assert!(o.status.success(), "{}", stderr(&o));
        o
    };
    build(&[]);
    let tmp = cache.join("tmp");
    // A sweep killed midway through removing a scratch directory: `.lock` gone, the rest there.
    let half_swept = |name: &str| {
        let dir = tmp.join(name);
        std::fs::create_dir_all(dir.join("bin")).unwrap();
        std::fs::write(dir.join("bin/openstack-cloud-controller-manager"), "x").unwrap();
        dir
    };
    let without_lock = half_swept("build-1.34-KiLLed");
    let renamed = half_swept(".dead-build-1.34-KiLLed");
    // A scratch directory in use: its lock is held (here by the test).
    let live = tmp.join("build-1.34-LiVe00");
    std::fs::create_dir_all(&live).unwrap();
    let held = std::fs::File::create(live.join(".lock")).unwrap();
    held.lock().unwrap();
    // A killed write of the digest manifest, and another file's write that may be in progress.
    let stray = f.path().join(".occm-forge-tmp-images.lock.yaml.AbCdEf");
    std::fs::write(&stray, "partial").unwrap();
    age(&stray, 1);
    let other = f.path().join(".occm-forge-tmp-timings.json.AbCdEf");
    std::fs::write(&other, "partial").unwrap();
    age(&other, 1);

    let o = build(&[]);
    assert!(
        stderr(&o).contains("1.34 is up to date"),
        "not a no-op: {}",
        stderr(&o)
    );
    assert!(
        !without_lock.exists(),
        "a scratch dir without .lock is left"
    );
    assert!(!renamed.exists(), "a renamed dead scratch dir is left");
    assert!(!stray.exists(), "the manifest's temporary file is left");
    assert!(live.exists(), "a scratch dir in use was removed");
    assert!(other.exists(), "another file's temporary file was removed");

    // A building run sweeps too (before: only what was older than a day without .lock).
    let without_lock = half_swept("build-1.34-KiLLd2");
    build(&["--force"]);
    assert!(
        !without_lock.exists(),
        "a scratch dir without .lock is left"
    );
    assert!(live.exists(), "a scratch dir in use was removed");
    drop(held);
}

/// The same while the third minor waits for the registry (an async step, which the signal
/// drops at once): the two minors pushed before are printed and named as recorded, exit 143.
#[test]
fn sigterm_while_the_third_minor_waits_for_the_registry_prints_the_two_pushed() {
    let reg = TestRegistry::start();
    let f = fixture(&["linux/amd64"]);
    // The check of what 1.35's tag serves now, before its long stages, hangs.
    let proxy = FaultProxy::start(
        &reg.addr,
        vec![FaultRule {
            method: "HEAD",
            path_contains: "/manifests/v1.35.0-occmforge.1",
            fault: Fault::Delay(Duration::from_secs(60)),
            times: 1,
            after: 0,
        }],
    );
    let repo = proxy.repo("occm/openstack-cloud-controller-manager");
    let mut child = occm_forge(f.path())
        .args(["build", "--all", "--push", "--repository", &repo])
        .args(["--insecure-registry", &proxy.addr, "--source"])
        .arg(&f.upstream)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let deadline = Instant::now() + Duration::from_secs(240);
    while proxy
        .counts
        .delayed
        .load(std::sync::atomic::Ordering::SeqCst)
        == 0
    {
        assert!(Instant::now() < deadline, "1.35 never asked the registry");
        if let Ok(Some(s)) = child.try_wait() {
            panic!("occm-forge ended early: {s}");
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    let signalled = Instant::now();
    signal(&child, "TERM");
    let out = child.wait_with_output().unwrap();
    assert!(
        signalled.elapsed() < Duration::from_secs(20),
        "took {:?} to stop",
        signalled.elapsed()
    );
    let (out_text, err) = (stdout(&out), stderr(&out));
    assert_eq!(out.status.code(), Some(143), "{err}");
    let lines: Vec<&str> = out_text.lines().collect();
    assert_eq!(lines.len(), 2, "{out_text}\n{err}");
    assert!(
        lines[0].starts_with(&format!("{repo}:v1.33.1-occmforge.1@sha256:"))
            && lines[1].starts_with(&format!("{repo}:v1.34.1-occmforge.1@sha256:")),
        "{out_text}"
    );
    assert!(
        err.contains("occm-forge: 1.35   interrupted signal 15; not recorded"),
        "{err}"
    );
    assert_eq!(
        err.lines().last().unwrap(),
        "occm-forge: error: interrupted by signal 15 during 1.35: 1.35 stopped, not recorded, its tag not moved; recorded in images.lock.yaml: 1.33, 1.34",
        "{err}"
    );
    let lock = read_lock(&f.lock);
    assert!(lock["images"]["1.34"]["published"].as_bool().unwrap());
    assert!(lock["images"]["1.35"].is_null(), "1.35 recorded");
    assert_eq!(
        reg.get_status("/v2/occm/openstack-cloud-controller-manager/manifests/v1.35.0-occmforge.1"),
        Some(404)
    );
}

/// A git server that accepts connections and never answers: a fetch from it blocks in libgit2,
/// where no stage boundary looks at the signal. Returns its URL and a receiver that gets one
/// message per connection.
fn silent_git_server() -> (String, std::sync::mpsc::Receiver<()>) {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let url = format!("http://{}/x.git", listener.local_addr().unwrap());
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let mut held = Vec::new();
        for conn in listener.incoming().flatten() {
            held.push(conn);
            let _ = tx.send(());
        }
    });
    (url, rx)
}

/// [`finish`], killing the child (SIGKILL: exit status `None`) if it has not ended in `limit`,
/// so that a process that ignores signals fails the test instead of hanging it.
fn finish_within(child: Child, limit: Duration) -> (Option<i32>, String) {
    let pid = child.id().to_string();
    let (done, wait) = std::sync::mpsc::channel::<()>();
    std::thread::spawn(move || {
        if wait.recv_timeout(limit) == Err(std::sync::mpsc::RecvTimeoutError::Timeout) {
            let _ = Command::new("kill").args(["-KILL", &pid]).status();
        }
    });
    let result = finish(child);
    drop(done);
    result
}

#[test]
fn a_signal_stops_a_fetch_that_never_returns_and_a_second_one_at_once() {
    let f = fixture(&["linux/amd64"]);
    let (url, connected) = silent_git_server();
    let spawn = || {
        occm_forge(f.path())
            .args(["build", "--k8s", "1.34", "--source", &url])
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap()
    };
    // One SIGTERM: the fetch cannot see it, so the process ends after its grace period.
    let child = spawn();
    connected.recv_timeout(Duration::from_secs(60)).unwrap();
    signal(&child, "TERM");
    let (code, err) = finish_within(child, Duration::from_secs(90));
    assert_eq!(code, Some(143), "{err}");
    assert!(
        err.contains("occm-forge: error: interrupted, and still running 15 s after the signal"),
        "{err}"
    );
    assert!(!f.lock.exists(), "a digest manifest was written");
    // Two SIGINTs: the second ends it without waiting.
    let child = spawn();
    connected.recv_timeout(Duration::from_secs(60)).unwrap();
    signal(&child, "INT");
    std::thread::sleep(Duration::from_millis(300));
    signal(&child, "INT");
    let (code, err) = finish_within(child, Duration::from_secs(10));
    assert_eq!(code, Some(130), "{err}");
    assert!(
        err.contains("occm-forge: error: interrupted, and a second signal"),
        "{err}"
    );
}
