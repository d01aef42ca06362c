//! Shared test parts: a fixture upstream (a stdlib-only Go module laid out like
//! cloud-provider-openstack, in a real git repository with tags), fixture patches made with
//! `git format-patch`, a fixture images.toml, a real `docker-registry` on loopback, and helpers to
//! run the real `occm-forge` binary and the independent checkers (skopeo, umoci).
#![allow(dead_code)]

pub mod quirks;
pub mod sigstore;
pub mod workflow;

use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

/// Runs a command and panics with its output when it fails.
pub fn run(cmd: &mut Command) -> String {
    let out = cmd
        .output()
        .unwrap_or_else(|e| panic!("cannot run {cmd:?}: {e}"));
    assert!(
        out.status.success(),
        "{cmd:?} failed: {}\nstdout: {}\nstderr: {}",
        out.status,
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// Panics with an actionable message when a tool the tests need is missing.
pub fn require_tool(name: &str) {
    let found = std::env::var_os("PATH")
        .map(|p| std::env::split_paths(&p).any(|d| d.join(name).is_file()))
        .unwrap_or(false);
    assert!(
        found,
        "`{name}` is not installed: run scripts/test, which installs the test dependencies"
    );
}

/// `git` in `dir` with a fixed identity and time, so fixture commits are reproducible.
pub fn git(dir: &Path) -> Command {
    let mut c = Command::new("git");
    c.current_dir(dir)
        .env("GIT_AUTHOR_NAME", "Fixture Author")
        .env("GIT_AUTHOR_EMAIL", "fixture@example.org")
        .env("GIT_COMMITTER_NAME", "Fixture Author")
        .env("GIT_COMMITTER_EMAIL", "fixture@example.org")
        .env("GIT_AUTHOR_DATE", "2025-10-15T14:43:36Z")
        .env("GIT_COMMITTER_DATE", "2025-10-15T14:43:36Z")
        .env("GIT_CONFIG_GLOBAL", "/dev/null")
        .env("GIT_CONFIG_NOSYSTEM", "1");
    c
}

/// A git configuration that changes every byte git and libgit2 could change in a checkout, an
/// applied patch or a commit: CRLF line endings (`core.autocrlf`, `core.eol`, and an attributes
/// file marking everything as text with CRLF and `ident`), no symlinks, no file modes, and the
/// same again through `include.path`.
pub fn hostile_gitconfig(dir: &Path) -> String {
    let attributes = dir.join("hostile-attributes");
    std::fs::create_dir_all(dir).unwrap();
    std::fs::write(&attributes, "* text eol=crlf ident\n*.go filter=hostile\n").unwrap();
    let included = dir.join("hostile-included");
    std::fs::write(&included, "[core]\n\tautocrlf = true\n\teol = crlf\n").unwrap();
    format!(
        "[core]\n\tautocrlf = true\n\teol = crlf\n\tsafecrlf = false\n\tsymlinks = false\n\tfilemode = false\n\tattributesFile = {}\n\tignorecase = true\n[include]\n\tpath = {}\n[filter \"hostile\"]\n\tclean = sed s/package/pkg/\n\tsmudge = sed s/package/pkg/\n[init]\n\tdefaultBranch = hostile\n[diff]\n\tnoprefix = true\n\tmnemonicPrefix = true\n",
        attributes.display(),
        included.display()
    )
}

/// The local Go version without the `go` prefix, e.g. `1.26.8`.
pub fn local_go_version() -> String {
    let v = run(Command::new("go")
        .args(["env", "GOVERSION"])
        .env("GOTOOLCHAIN", "local"));
    v.trim().trim_start_matches("go").to_string()
}

/// The Go module every fixture tree starts from.
const GO_MOD: &str = "module k8s.io/cloud-provider-openstack\n\ngo 1.22\n";
const VERSION_GO: &str =
    "package version\n\n// Version is set with -ldflags -X.\nvar Version string\n";
/// Upstream's bug, in miniature: a missing server is reported as ErrNotFound, which
/// InstanceExists does not treat as "gone".
pub const INSTANCES_GO: &str = r#"package openstack

import "errors"

// ErrNotFound is what a lookup by name returns when nothing matches.
var ErrNotFound = errors.New("failed to find object")

// InstanceNotFound means the instance is gone.
var InstanceNotFound = errors.New("instance not found")

func lookup(servers []string, name string) error {
	for _, s := range servers {
		if s == name {
			return nil
		}
	}
	return ErrNotFound
}

// InstanceExists reports whether a server named name exists.
func InstanceExists(servers []string, name string) (bool, error) {
	err := lookup(servers, name)
	if err == InstanceNotFound {
		return false, nil
	}
	if err != nil {
		return false, err
	}
	return true, nil
}
"#;
const INSTANCES_TEST_GO: &str = r#"package openstack

import "testing"

func TestInstanceExistsFound(t *testing.T) {
	ok, err := InstanceExists([]string{"node-1"}, "node-1")
	if !ok || err != nil {
		t.Fatalf("got (%v, %v), want (true, nil)", ok, err)
	}
}

func TestNeedsCloud(t *testing.T) {
	t.Skip("No config found in environment")
}
"#;
const MAIN_GO: &str = r#"package main

import (
	"fmt"
	"os"

	"k8s.io/cloud-provider-openstack/pkg/openstack"
	"k8s.io/cloud-provider-openstack/pkg/version"
)

func main() {
	fmt.Printf("openstack-cloud-controller-manager version %s\n", version.Version)
	if len(os.Args) > 1 && os.Args[1] == "--version" {
		return
	}
	ok, err := openstack.InstanceExists(nil, "gone-node")
	fmt.Printf("instance-exists(gone-node): %v %v\n", ok, err)
}
"#;
/// The fix: a missing server is InstanceNotFound.
pub const FIXED_LOOKUP: (&str, &str) = ("\treturn ErrNotFound\n}", "\treturn InstanceNotFound\n}");
const REGRESSION_TEST_GO: &str = r#"package openstack

import "testing"

func TestInstanceExistsNoServer(t *testing.T) {
	ok, err := InstanceExists(nil, "gone-node")
	if ok || err != nil {
		t.Fatalf("got (%v, %v), want (false, nil)", ok, err)
	}
}
"#;

/// A fixture upstream repository, patches and images.toml in a temporary directory.
pub struct Fixture {
    /// Keeps the directory alive.
    pub dir: tempfile::TempDir,
    /// The upstream git repository (non-bare).
    pub upstream: PathBuf,
    /// images.toml.
    pub config: PathBuf,
    /// patches/.
    pub patches: PathBuf,
    /// images.lock.yaml (as configured in images.toml).
    pub lock: PathBuf,
    /// Commits: v1.33.1, v1.34.1, v1.35.0 (whose tree already has the fix).
    pub commits: Commits,
}

/// The fixture's tag commits.
pub struct Commits {
    /// v1.33.1.
    pub v1_33: String,
    /// v1.34.1.
    pub v1_34: String,
    /// v1.35.0: the fix is already upstream.
    pub v1_35: String,
}

fn write(path: &Path, text: &str) {
    std::fs::create_dir_all(path.parent().unwrap()).unwrap();
    std::fs::write(path, text).unwrap();
}

fn commit_all(repo: &Path, msg: &str) -> String {
    run(git(repo).args(["add", "-A"]));
    run(git(repo).args(["commit", "-q", "-m", msg]));
    run(git(repo).args(["rev-parse", "HEAD"]))
        .trim()
        .to_string()
}

/// Creates the fixture. `platforms` go into every minor; images.toml pins the real commits.
pub fn fixture(platforms: &[&str]) -> Fixture {
    let dir = tempfile::tempdir().unwrap();
    let up = dir.path().join("upstream");
    std::fs::create_dir_all(&up).unwrap();
    run(git(&up).args(["init", "-q", "-b", "master"]));
    write(&up.join("go.mod"), GO_MOD);
    write(&up.join("pkg/version/version.go"), VERSION_GO);
    write(&up.join("pkg/openstack/instances.go"), INSTANCES_GO);
    write(
        &up.join("pkg/openstack/instances_test.go"),
        INSTANCES_TEST_GO,
    );
    write(
        &up.join("cmd/openstack-cloud-controller-manager/main.go"),
        MAIN_GO,
    );
    let v1_33 = commit_all(&up, "fixture v1.33.1");
    run(git(&up).args(["tag", "v1.33.1"]));
    write(&up.join("README.md"), "fixture upstream\n");
    let v1_34 = commit_all(&up, "fixture v1.34.1");
    run(git(&up).args(["tag", "v1.34.1"]));

    // The patches, made the way maintainers make them: commits + git format-patch.
    let patches = dir.path().join("patches");
    run(git(&up).args(["checkout", "-q", "-b", "downstream"]));
    write(
        &up.join("pkg/openstack/instances_exists_test.go"),
        REGRESSION_TEST_GO,
    );
    commit_all(&up, "openstack: add InstanceExists regression test");
    let fixed = INSTANCES_GO.replace(FIXED_LOOKUP.0, FIXED_LOOKUP.1);
    write(&up.join("pkg/openstack/instances.go"), &fixed);
    commit_all(
        &up,
        "openstack: treat a missing server as InstanceNotFound\n\nFixes the fixture's #3114.",
    );
    run(git(&up)
        .args(["format-patch", "-q", "-2", "-o"])
        .arg(&patches));
    run(git(&up).args(["checkout", "-q", "master"]));
    run(git(&up).args(["branch", "-q", "-D", "downstream"]));

    // v1.35.0 already carries the fix upstream.
    write(&up.join("pkg/openstack/instances.go"), &fixed);
    let v1_35 = commit_all(&up, "fixture v1.35.0: upstream fixed it");
    run(git(&up).args(["tag", "v1.35.0"]));

    let lock = dir.path().join("images.lock.yaml");
    let config = dir.path().join("images.toml");
    let commits = Commits {
        v1_33,
        v1_34,
        v1_35,
    };
    let f = Fixture {
        dir,
        upstream: up,
        config,
        patches,
        lock,
        commits,
    };
    f.write_config(
        "127.0.0.1:1/occm/openstack-cloud-controller-manager",
        platforms,
        "static",
        &[],
    );
    f
}

/// The fixture's file the fix patch changes.
pub const INSTANCES: &str = "pkg/openstack/instances.go";

/// The two fixture patch file names, in series order.
pub const PATCH_TEST: &str = "0001-openstack-add-InstanceExists-regression-test.patch";
/// The fix patch.
pub const PATCH_FIX: &str = "0002-openstack-treat-a-missing-server-as-InstanceNotFound.patch";

impl Fixture {
    /// (Re)writes images.toml with the given repository, platforms, base and extra required tests.
    pub fn write_config(
        &self,
        repository: &str,
        platforms: &[&str],
        base: &str,
        required: &[&str],
    ) {
        let go = local_go_version();
        let plats = platforms
            .iter()
            .map(|p| format!("\"{p}\""))
            .collect::<Vec<_>>()
            .join(", ");
        let req = required
            .iter()
            .map(|p| format!("\"{p}\""))
            .collect::<Vec<_>>()
            .join(", ");
        let minor = |m: &str, tag: &str, commit: &str| {
            format!(
                r#"
[minors."{m}"]
upstream_tag = "{tag}"
commit = "{commit}"
go = "{go}"
base = "{base}"
platforms = [{plats}]
revision = 1
patches = ["{PATCH_TEST}", "{PATCH_FIX}"]
test_packages = ["./pkg/..."]
required_tests = [{req}]
"#
            )
        };
        let text = format!(
            r#"# Fixture images.toml
upstream = "https://github.com/kubernetes/cloud-provider-openstack"
repository = "{repository}"
tag = "{{upstream_tag}}-occmforge.{{revision}}"
digest_manifest = "images.lock.yaml"
patches_dir = "patches"

[patches."{PATCH_FIX}"]
fixes = "fixture #3114: a Node without a server is never deleted"
guarded_by = ["TestInstanceExistsNoServer"]
{}{}{}"#,
            minor("1.33", "v1.33.1", &self.commits.v1_33),
            minor("1.34", "v1.34.1", &self.commits.v1_34),
            minor("1.35", "v1.35.0", &self.commits.v1_35),
        );
        std::fs::write(&self.config, text).unwrap();
    }

    /// Writes a previous digest manifest (an entry for 1.33 from an earlier build) and returns its bytes.
    pub fn seed_lock(&self) -> Vec<u8> {
        let h = "0".repeat(64);
        let c = &self.commits.v1_33;
        let text = format!(
            r#"# Generated by occm-forge: one OCCM image per Kubernetes minor, pinned by digest.
schema_version: 1
images:
  '1.33':
    image: registry.example.internal/occm/openstack-cloud-controller-manager:v1.33.1-occmforge.1@sha256:{h}
    repository: registry.example.internal/occm/openstack-cloud-controller-manager
    tag: v1.33.1-occmforge.1
    digest: sha256:{h}
    published: true
    upstream_tag: v1.33.1
    upstream_commit: {c}
    patch_series_sha256: {h}
    patches: []
    platforms:
    - linux/amd64
    manifests:
      linux/amd64: sha256:{h}
    go_version: 1.24.3
    base_image: static
    source_date_epoch: 0
    built_at: '2026-01-01T00:00:00Z'
"#
        );
        std::fs::write(&self.lock, &text).unwrap();
        text.into_bytes()
    }

    /// Adds a patch file to patches/ and puts it at the end of `minor`'s series.
    pub fn add_patch(&self, minor: &str, name: &str, text: &str) {
        std::fs::write(self.patches.join(name), text).unwrap();
        let cfg = std::fs::read_to_string(&self.config).unwrap();
        let header = format!("[minors.\"{minor}\"]");
        let start = cfg.find(&header).unwrap();
        let series = format!("patches = [\"{PATCH_TEST}\", \"{PATCH_FIX}\"]");
        let at = start + cfg[start..].find(&series).unwrap();
        let new = format!("patches = [\"{PATCH_TEST}\", \"{PATCH_FIX}\", \"{name}\"]");
        let cfg = format!("{}{}{}", &cfg[..at], new, &cfg[at + series.len()..]);
        std::fs::write(&self.config, cfg).unwrap();
    }

    /// Releases a new upstream tag: a commit whose Dockerfile names Go `go` and base `runner`
    /// (upstream's `ARG GOLANG_IMAGE` / `ARG DISTROLESS_IMAGE`), tagged `tag`. Returns the commit.
    pub fn release(&self, tag: &str, go: &str, runner: &str) -> String {
        write(
            &self.upstream.join("Dockerfile"),
            &format!(
                "# fixture {tag}\nARG GOLANG_IMAGE=golang:{go}\nARG DISTROLESS_IMAGE={runner}\nFROM ${{DISTROLESS_IMAGE}}\n"
            ),
        );
        commit_all(&self.upstream, tag);
        run(git(&self.upstream).args(["tag", tag]));
        run(git(&self.upstream).args(["rev-parse", "HEAD"]))
            .trim()
            .to_string()
    }

    /// Re-pins 1.34 to a new upstream tag `v1.34.2`: v1.34.1 plus upstream's edit of
    /// [`INSTANCES`] (`from` replaced by `to`), on a release branch. Returns the commit.
    pub fn release_1_34_2(&self, from: &str, to: &str) -> String {
        let up = &self.upstream;
        run(git(up).args(["checkout", "-q", "-b", "release-1.34", "v1.34.1"]));
        let text = std::fs::read_to_string(up.join(INSTANCES)).unwrap();
        assert!(text.contains(from), "fixture: {from:?} not in instances.go");
        std::fs::write(up.join(INSTANCES), text.replace(from, to)).unwrap();
        run(git(up).args(["commit", "-q", "-am", "upstream edits instances.go"]));
        run(git(up).args(["tag", "v1.34.2"]));
        let commit = run(git(up).args(["rev-parse", "HEAD"])).trim().to_string();
        run(git(up).args(["checkout", "-q", "master"]));
        let cfg = std::fs::read_to_string(&self.config).unwrap();
        let pinned = format!(
            "upstream_tag = \"v1.34.1\"\ncommit = \"{}\"",
            self.commits.v1_34
        );
        assert!(cfg.contains(&pinned));
        let cfg = cfg.replace(
            &pinned,
            &format!("upstream_tag = \"v1.34.2\"\ncommit = \"{commit}\""),
        );
        std::fs::write(&self.config, cfg).unwrap();
        commit
    }

    /// The fixture's path as a string.
    pub fn path(&self) -> &Path {
        self.dir.path()
    }
}

/// A cache directory shared by every test of this run (Go build cache reuse), as users share one.
pub fn shared_cache() -> PathBuf {
    let p = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("occm-forge-cache");
    std::fs::create_dir_all(&p).unwrap();
    p
}

/// The cache of the gated tests (the full upstream runs): a new, empty directory shared by the
/// gated tests of this test process while any of them runs — what a new user and a new CI
/// runner start from — unless `OCCM_FORGE_GATED_CACHE` names one to reuse (told otherwise).
/// Removed when the last test holding it ends.
pub struct GatedCache {
    path: PathBuf,
    _dir: Option<std::sync::Arc<tempfile::TempDir>>,
}

impl GatedCache {
    /// The directory.
    pub fn path(&self) -> &Path {
        &self.path
    }
}

/// See [`GatedCache`].
pub fn gated_cache() -> GatedCache {
    if let Some(p) = std::env::var_os("OCCM_FORGE_GATED_CACHE").filter(|p| !p.is_empty()) {
        eprintln!(
            "gated cache: {} (OCCM_FORGE_GATED_CACHE)",
            Path::new(&p).display()
        );
        return GatedCache {
            path: PathBuf::from(p),
            _dir: None,
        };
    }
    static SHARED: std::sync::Mutex<std::sync::Weak<tempfile::TempDir>> =
        std::sync::Mutex::new(std::sync::Weak::new());
    let mut shared = SHARED.lock().unwrap_or_else(|e| e.into_inner());
    let dir = shared.upgrade().unwrap_or_else(|| {
        let d = std::sync::Arc::new(
            tempfile::Builder::new()
                .prefix("occm-forge-gated-cache-")
                .tempdir()
                .unwrap(),
        );
        eprintln!("gated cache: {} (new, empty)", d.path().display());
        *shared = std::sync::Arc::downgrade(&d);
        d
    });
    GatedCache {
        path: dir.path().to_path_buf(),
        _dir: Some(dir),
    }
}

/// The real occm-forge binary, offline (GOPROXY=off), with the shared cache and no
/// SOURCE_DATE_EPOCH from the caller's environment.
pub fn occm_forge(cwd: &Path) -> Command {
    let mut c = Command::new(env!("CARGO_BIN_EXE_occm-forge"));
    c.current_dir(cwd)
        .env("OCCM_FORGE_CACHE", shared_cache())
        .env("GOPROXY", "off")
        .env("GOFLAGS", "")
        .env_remove("SOURCE_DATE_EPOCH")
        .env_remove("OCCM_FORGE_LOG");
    c
}

/// Output helpers.
pub fn stdout(o: &Output) -> String {
    String::from_utf8_lossy(&o.stdout).into_owned()
}
/// Output helpers.
pub fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

/// A free TCP port on 127.0.0.1.
pub fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// TLS and auth for a test registry.
#[derive(Default)]
pub struct RegistryOptions {
    /// (certificate chain PEM, key PEM) for `http.tls`.
    pub tls: Option<(PathBuf, PathBuf)>,
    /// An htpasswd file (bcrypt) for `auth.htpasswd`.
    pub htpasswd: Option<PathBuf>,
    /// `http.relativeurls: true`: upload `Location`s are relative (`/v2/…`), as behind some
    /// load balancers.
    pub relative_urls: bool,
    /// The storage directory is a read-only mount (the registry runs in its own user and mount
    /// namespace, `unshare -rm`, where its root directory is bind-mounted read-only).
    pub read_only: bool,
    /// distribution's read-only maintenance mode (`storage.maintenance.readonly.enabled`), as
    /// Atmosphere runs its in-cloud registry: pulls work, every write answers 405.
    pub maintenance_read_only: bool,
    /// Another registry program taking the same configuration (distribution v3's `registry`,
    /// [`distribution_v3`]); Debian's `docker-registry` (distribution 2.8) when `None`.
    pub program: Option<PathBuf>,
}

/// distribution v3 (`github.com/distribution/distribution/v3` v3.1.2, `cmd/registry`, built
/// through the Go module proxy by scripts/test into `.tools/bin/registry-v3`).
pub fn distribution_v3() -> PathBuf {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join(".tools/bin/registry-v3");
    assert!(
        path.is_file(),
        "{} is missing: run scripts/test, which builds distribution v3 through the Go module proxy",
        path.display()
    );
    path
}

/// A CA and a leaf certificate for 127.0.0.1 made with openssl (rustls refuses a self-signed
/// certificate that is both CA and server). Returns (ca.pem, leaf.pem, leaf.key).
pub fn make_ca_and_leaf(dir: &Path) -> (PathBuf, PathBuf, PathBuf) {
    require_tool("openssl");
    let p = |n: &str| dir.join(n);
    let o = |args: &[&str]| run(Command::new("openssl").args(args).current_dir(dir));
    o(&[
        "req",
        "-x509",
        "-newkey",
        "rsa:2048",
        "-nodes",
        "-days",
        "2",
        "-subj",
        "/CN=occm-forge test CA",
        "-keyout",
        "ca.key",
        "-out",
        "ca.pem",
        "-addext",
        "basicConstraints=critical,CA:TRUE",
        "-addext",
        "keyUsage=critical,keyCertSign,cRLSign",
    ]);
    o(&[
        "req",
        "-newkey",
        "rsa:2048",
        "-nodes",
        "-subj",
        "/CN=127.0.0.1",
        "-keyout",
        "leaf.key",
        "-out",
        "leaf.csr",
    ]);
    std::fs::write(
        p("leaf.ext"),
        "basicConstraints=CA:FALSE\nkeyUsage=digitalSignature,keyEncipherment\nextendedKeyUsage=serverAuth\nsubjectAltName=IP:127.0.0.1\n",
    )
    .unwrap();
    o(&[
        "x509",
        "-req",
        "-in",
        "leaf.csr",
        "-CA",
        "ca.pem",
        "-CAkey",
        "ca.key",
        "-CAcreateserial",
        "-days",
        "2",
        "-extfile",
        "leaf.ext",
        "-out",
        "leaf.pem",
    ]);
    (p("ca.pem"), p("leaf.pem"), p("leaf.key"))
}

/// An htpasswd file with one bcrypt user.
pub fn make_htpasswd(dir: &Path, user: &str, password: &str) -> PathBuf {
    require_tool("htpasswd");
    let line = run(Command::new("htpasswd").args(["-Bbn", user, password]));
    let path = dir.join("htpasswd");
    std::fs::write(&path, line.trim_end()).unwrap();
    path
}

/// Every manifest media type, for an `Accept` header.
pub const MANIFEST_TYPES: &str = "application/vnd.oci.image.index.v1+json, application/vnd.oci.image.manifest.v1+json, application/vnd.docker.distribution.manifest.list.v2+json, application/vnd.docker.distribution.manifest.v2+json";

/// A real Debian `docker-registry` (distribution 2.8) on 127.0.0.1, with a temporary root,
/// stopped by PID on drop.
pub struct TestRegistry {
    child: Child,
    /// `127.0.0.1:<port>`.
    pub addr: String,
    cfg: PathBuf,
    plain: bool,
    _root: tempfile::TempDir,
    /// The registry program (`docker-registry`, or another given in [`RegistryOptions`]).
    program: PathBuf,
}

impl TestRegistry {
    /// Starts a plain-HTTP registry and waits until `GET /v2/` answers.
    pub fn start() -> TestRegistry {
        Self::start_with(&RegistryOptions::default())
    }

    /// Starts the registry with TLS and/or htpasswd auth (distribution 2.8 config keys
    /// `http.tls`, `auth.htpasswd`) and waits until its port accepts connections.
    pub fn start_with(opts: &RegistryOptions) -> TestRegistry {
        let program = opts
            .program
            .clone()
            .unwrap_or_else(|| PathBuf::from("docker-registry"));
        if opts.program.is_none() {
            require_tool("docker-registry");
        }
        let root = tempfile::tempdir().unwrap();
        let port = free_port();
        let addr = format!("127.0.0.1:{port}");
        let cfg = root.path().join("config.yml");
        let mut text = format!(
            "version: 0.1\nlog: {{level: warn}}\nstorage:\n  filesystem: {{rootdirectory: {}}}\n  delete: {{enabled: true}}\nhttp:\n  addr: {addr}\n  secret: test-only-secret\n",
            root.path().join("data").display()
        );
        if let Some((cert, key)) = &opts.tls {
            text.push_str(&format!(
                "  tls: {{certificate: {}, key: {}}}\n",
                cert.display(),
                key.display()
            ));
        }
        if opts.relative_urls {
            text.push_str("  relativeurls: true\n");
        }
        if opts.maintenance_read_only {
            text = text.replace(
                "  delete: {enabled: true}\n",
                "  delete: {enabled: true}\n  maintenance: {readonly: {enabled: true}}\n",
            );
        }
        if let Some(htpasswd) = &opts.htpasswd {
            text.push_str(&format!(
                "auth:\n  htpasswd: {{realm: occm-forge-test, path: {}}}\n",
                htpasswd.display()
            ));
        }
        std::fs::write(&cfg, text).unwrap();
        let log = std::fs::File::create(root.path().join("registry.log")).unwrap();
        let mut command = if opts.read_only {
            require_tool("unshare");
            let data = root.path().join("data");
            std::fs::create_dir_all(&data).unwrap();
            let mut c = Command::new("unshare");
            c.args(["-rm", "sh", "-c"])
                .arg("mount --bind \"$1\" \"$1\" && mount -o remount,ro,bind \"$1\" && exec docker-registry serve \"$2\"")
                .arg("sh")
                .arg(&data)
                .arg(&cfg);
            c
        } else {
            let mut c = Command::new(&program);
            c.arg("serve").arg(&cfg);
            c
        };
        let child = command
            .stdout(Stdio::null())
            .stderr(log)
            .spawn()
            .expect("start docker-registry");
        let reg = TestRegistry {
            program,
            child,
            addr,
            cfg,
            plain: opts.tls.is_none() && opts.htpasswd.is_none(),
            _root: root,
        };
        reg.wait_ready();
        reg
    }

    /// The registry's log (stderr).
    pub fn log(&self) -> String {
        std::fs::read_to_string(self._root.path().join("registry.log")).unwrap_or_default()
    }

    /// Starts the registry again on the same port and storage (after [`TestRegistry::kill`]).
    pub fn restart(&mut self) {
        let log = std::fs::OpenOptions::new()
            .append(true)
            .open(self._root.path().join("registry.log"))
            .unwrap();
        self.child = Command::new(&self.program)
            .arg("serve")
            .arg(&self.cfg)
            .stdout(Stdio::null())
            .stderr(log)
            .spawn()
            .expect("restart docker-registry");
        self.wait_ready();
    }

    fn wait_ready(&self) {
        let deadline = Instant::now() + Duration::from_secs(20);
        while Instant::now() < deadline {
            let ready = if self.plain {
                self.get_status("/v2/") == Some(200)
            } else {
                TcpStream::connect(&self.addr).is_ok()
            };
            if ready {
                return;
            }
            std::thread::sleep(Duration::from_millis(100));
        }
        panic!("docker-registry on {} did not become ready", self.addr);
    }

    /// The registry's PID (to kill it mid-push).
    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// Stops the registry now.
    pub fn kill(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }

    /// The body of a GET (plain HTTP), or None when the connection fails.
    pub fn get_body(&self, path: &str) -> Option<String> {
        let mut s = TcpStream::connect(&self.addr).ok()?;
        s.set_read_timeout(Some(Duration::from_secs(5))).ok()?;
        write!(s, "GET {path} HTTP/1.0\r\nHost: {}\r\n\r\n", self.addr).ok()?;
        let mut buf = String::new();
        s.read_to_string(&mut buf).ok()?;
        buf.split_once("\r\n\r\n").map(|(_, b)| b.to_string())
    }

    /// The body of a GET as bytes when the answer is 200, else None (every manifest media type
    /// accepted, as [`Self::get_status`]).
    pub fn get_bytes(&self, path: &str) -> Option<Vec<u8>> {
        let mut s = TcpStream::connect(&self.addr).ok()?;
        s.set_read_timeout(Some(Duration::from_secs(5))).ok()?;
        write!(
            s,
            "GET {path} HTTP/1.0\r\nHost: {}\r\nAccept: {MANIFEST_TYPES}\r\n\r\n",
            self.addr
        )
        .ok()?;
        let mut buf = Vec::new();
        s.read_to_end(&mut buf).ok()?;
        let split = buf.windows(4).position(|w| w == b"\r\n\r\n")? + 4;
        let head = String::from_utf8_lossy(&buf[..split]);
        (head.split_whitespace().nth(1)? == "200").then(|| buf[split..].to_vec())
    }

    /// HTTP status of a GET, or None when the connection fails. It accepts every manifest media
    /// type: without that, distribution 2.8 answers 404 for an OCI index or manifest that is
    /// there ("OCI index found, but accept header does not support OCI indexes").
    pub fn get_status(&self, path: &str) -> Option<u16> {
        let mut s = TcpStream::connect(&self.addr).ok()?;
        s.set_read_timeout(Some(Duration::from_secs(5))).ok()?;
        write!(
            s,
            "GET {path} HTTP/1.0\r\nHost: {}\r\nAccept: {MANIFEST_TYPES}\r\n\r\n",
            self.addr
        )
        .ok()?;
        let mut buf = String::new();
        s.read_to_string(&mut buf).ok()?;
        buf.split_whitespace().nth(1)?.parse().ok()
    }

    /// HTTP status of a DELETE (plain HTTP), or None when the connection fails.
    pub fn delete(&self, path: &str) -> Option<u16> {
        let mut s = TcpStream::connect(&self.addr).ok()?;
        s.set_read_timeout(Some(Duration::from_secs(5))).ok()?;
        write!(s, "DELETE {path} HTTP/1.0\r\nHost: {}\r\n\r\n", self.addr).ok()?;
        let mut buf = String::new();
        s.read_to_string(&mut buf).ok()?;
        buf.split_whitespace().nth(1)?.parse().ok()
    }

    /// One plain-HTTP request: (status, response head, body).
    fn request(
        &self,
        method: &str,
        path: &str,
        content_type: &str,
        body: &[u8],
    ) -> (u16, String, Vec<u8>) {
        let mut s = TcpStream::connect(&self.addr).unwrap();
        s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
        write!(
            s,
            "{method} {path} HTTP/1.0\r\nHost: {}\r\nContent-Type: {content_type}\r\nContent-Length: {}\r\n\r\n",
            self.addr,
            body.len()
        )
        .unwrap();
        s.write_all(body).unwrap();
        let mut buf = Vec::new();
        s.read_to_end(&mut buf).unwrap();
        let split = buf.windows(4).position(|w| w == b"\r\n\r\n").unwrap() + 4;
        let head = String::from_utf8_lossy(&buf[..split]).into_owned();
        let status = head.split_whitespace().nth(1).unwrap().parse().unwrap();
        (status, head, buf[split..].to_vec())
    }

    /// Uploads `data` as a blob of repository `name` (the path after the host), monolithically
    /// (distribution-spec POST then PUT); returns its digest.
    pub fn put_blob(&self, name: &str, data: &[u8]) -> String {
        let digest = format!("sha256:{}", sha256_hex(data));
        let (status, head, _) = self.request(
            "POST",
            &format!("/v2/{name}/blobs/uploads/"),
            "application/octet-stream",
            b"",
        );
        assert_eq!(status, 202, "{head}");
        let location = head
            .lines()
            .find_map(|l| {
                l.split_once(':')
                    .filter(|(name, _)| name.eq_ignore_ascii_case("location"))
                    .map(|(_, value)| value)
            })
            .unwrap()
            .trim()
            .to_string();
        let location = location
            .strip_prefix(&format!("http://{}", self.addr))
            .unwrap_or(&location);
        let sep = if location.contains('?') { '&' } else { '?' };
        let (status, head, _) = self.request(
            "PUT",
            &format!("{location}{sep}digest={digest}"),
            "application/octet-stream",
            data,
        );
        assert_eq!(status, 201, "{head}");
        digest
    }

    /// Puts manifest `bytes` of `media_type` under `reference` (tag or digest) of `name`;
    /// returns its digest.
    pub fn put_manifest(
        &self,
        name: &str,
        reference: &str,
        media_type: &str,
        bytes: &[u8],
    ) -> String {
        let (status, head, body) = self.request(
            "PUT",
            &format!("/v2/{name}/manifests/{reference}"),
            media_type,
            bytes,
        );
        assert_eq!(status, 201, "{head}{}", String::from_utf8_lossy(&body));
        format!("sha256:{}", sha256_hex(bytes))
    }

    /// `127.0.0.1:<port>/<path>`.
    pub fn repo(&self, path: &str) -> String {
        format!("{}/{path}", self.addr)
    }
}

impl Drop for TestRegistry {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// `skopeo` with TLS verification off (the test registry is plain HTTP on loopback).
pub fn skopeo(args: &[&str]) -> String {
    require_tool("skopeo");
    run(Command::new("skopeo").args(args))
}

/// sha256 hex of bytes.
pub fn sha256_hex(b: &[u8]) -> String {
    use sha2::Digest;
    hex::encode(sha2::Sha256::digest(b))
}

/// Reads the digest manifest as YAML.
pub fn read_lock(path: &Path) -> serde_norway::Value {
    serde_norway::from_str(&std::fs::read_to_string(path).unwrap()).unwrap()
}

/// Copies `repo:tag` from the loopback registry into an OCI layout with skopeo (host platform),
/// unpacks it with umoci into `<dir>/rootfs` and returns that path.
pub fn pull_and_unpack(repo: &str, tag: &str, dir: &Path) -> PathBuf {
    require_tool("umoci");
    let pulled = dir.join("pulled");
    skopeo(&[
        "copy",
        "--quiet",
        "--src-tls-verify=false",
        &format!("docker://{repo}:{tag}"),
        &format!("oci:{}:{tag}", pulled.display()),
    ]);
    let rootfs = dir.join("rootfs");
    run(Command::new("umoci")
        .args(["raw", "unpack", "--rootless", "--image"])
        .arg(format!("{}:{tag}", pulled.display()))
        .arg(&rootfs));
    rootfs
}

/// What a [`FaultProxy`] rule does to a matching request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Fault {
    /// Answer `500 Internal Server Error` without forwarding.
    Status500,
    /// Close the connection without an answer (a reset from the client's point of view).
    Reset,
    /// Forward the request, then kill the registry process (PID) before the answer is relayed.
    KillUpstream(u32),
    /// Hold the request this long before forwarding it.
    Delay(Duration),
    /// Answer `307 Temporary Redirect` to the same path and query on `http://localhost:<port>`
    /// (another host: another name and port).
    Redirect307(u16),
    /// Answer `404` with a `BLOB_UPLOAD_UNKNOWN` error, as a registry host that does not hold
    /// the upload session.
    UploadUnknown,
    /// Answer this status with this body (JSON when it starts with `{`) without forwarding.
    Answer(u16, &'static str),
    /// When the request body contains the first string, answer the status and body without
    /// forwarding (a registry that refuses such content); otherwise forward.
    AnswerIfBody(&'static str, u16, &'static str),
    /// Forward the request without its body (`Content-Length: 0`), as a registry that ignores
    /// a `PUT` body (pulp/pulp_container#1219).
    DropBody,
    /// Answer a referrers API request (`/referrers/` paths) from the registry's tag-schema
    /// index, as [`quirks::ReferrersApi`] says.
    Referrers(quirks::ReferrersApi),
    /// Answer `429 Too Many Requests` with `Retry-After: <value>` and Docker Hub's error
    /// (`TOOMANYREQUESTS`; no body to a `HEAD`), as Docker Hub and Quay answer past their rate
    /// limits (containers/image#618, google/go-containerregistry#1569, docker/buildx#3630).
    TooManyRequests(&'static str),
    /// A tag `PUT` of other bytes than the tag serves is refused, as ECR refuses it in a
    /// repository whose tag mutability is `IMMUTABLE` (AWS ECR user guide, "Image tag
    /// mutability"; the Docker client prints `tag invalid: The image tag '…' already exists in the
    /// '…' repository and cannot be overwritten because the repository is immutable.`): 400
    /// `TAG_INVALID`. The same bytes again, a new tag, and a `PUT` by digest are forwarded.
    ImmutableTags,
    /// Forward the request, and answer with the second status (its reason phrase, no body)
    /// where the registry answered the first, keeping every header: pulp_container 2.25 answers
    /// a chunk `PATCH` with `204 No Content` and distribution's `Location` and `Range`
    /// (pulp/pulp_container#2199) where the spec says `202 Accepted`.
    StatusAs(u16, u16),
    /// Forward the request with `/manifests/sha256-<hex>` read as `/manifests/sha256:<hex>`, as
    /// GitLab resolves a tag of that form to the manifest of that digest
    /// (oras-project/oras-go#1396).
    TagAsDigest,
}

/// A proxy rule: requests whose method and path match get `fault`, `times` times.
#[derive(Debug, Clone)]
pub struct FaultRule {
    /// `GET`, `HEAD`, `PUT`, `POST`, … or `*`.
    pub method: &'static str,
    /// A substring of the request path, e.g. `/blobs/uploads/`.
    pub path_contains: &'static str,
    /// What to do.
    pub fault: Fault,
    /// How many matching requests get it.
    pub times: usize,
    /// How many matching requests pass untouched first.
    pub after: usize,
}

/// Counters of what a [`FaultProxy`] did.
#[derive(Debug, Default)]
pub struct FaultCounts {
    /// Requests relayed to the registry.
    pub forwarded: std::sync::atomic::AtomicUsize,
    /// 500s injected.
    pub status_500: std::sync::atomic::AtomicUsize,
    /// Connections reset.
    pub resets: std::sync::atomic::AtomicUsize,
    /// Registry kills.
    pub kills: std::sync::atomic::AtomicUsize,
    /// Requests held back by a delay.
    pub delayed: std::sync::atomic::AtomicUsize,
    /// Requests redirected.
    pub redirects: std::sync::atomic::AtomicUsize,
    /// Requests answered `BLOB_UPLOAD_UNKNOWN`.
    pub upload_unknown: std::sync::atomic::AtomicUsize,
    /// Requests answered by [`Fault::Answer`] or [`Fault::AnswerIfBody`].
    pub answered: std::sync::atomic::AtomicUsize,
    /// Requests forwarded without their body ([`Fault::DropBody`]).
    pub dropped_bodies: std::sync::atomic::AtomicUsize,
    /// Every request as `METHOD path (N bytes)`, in arrival order.
    pub requests: std::sync::Mutex<Vec<String>>,
}

impl FaultCounts {
    /// The requests seen so far whose `METHOD path` line contains `needle`.
    pub fn seen(&self, needle: &str) -> Vec<String> {
        self.requests
            .lock()
            .unwrap()
            .iter()
            .filter(|r| r.contains(needle))
            .cloned()
            .collect()
    }
}

/// A small HTTP/1.1 fault-injecting proxy on 127.0.0.1 in front of a registry: it reads each
/// request (head and `Content-Length` body), applies the first matching [`FaultRule`] or relays
/// the request to the registry on a fresh connection with `Connection: close`, and relays the
/// answer back.
pub struct FaultProxy {
    /// `127.0.0.1:<port>`.
    pub addr: String,
    /// What it did.
    pub counts: std::sync::Arc<FaultCounts>,
    rules: std::sync::Arc<std::sync::Mutex<Vec<FaultRule>>>,
}

impl FaultProxy {
    /// Starts a proxy on 127.0.0.1 in front of `upstream` (`host:port`).
    pub fn start(upstream: &str, rules: Vec<FaultRule>) -> FaultProxy {
        Self::start_on("127.0.0.1", upstream, rules)
    }

    /// Starts a proxy on `ip` (a free port) in front of `upstream` (`host:port`).
    pub fn start_on(ip: &str, upstream: &str, rules: Vec<FaultRule>) -> FaultProxy {
        use std::sync::{Arc, Mutex};
        let listener = TcpListener::bind((ip, 0)).unwrap();
        let addr = listener.local_addr().unwrap().to_string();
        let counts = Arc::new(FaultCounts::default());
        let rules = Arc::new(Mutex::new(rules));
        let (c, r, up) = (counts.clone(), rules.clone(), upstream.to_string());
        std::thread::spawn(move || {
            for conn in listener.incoming().flatten() {
                let (c, r, up) = (c.clone(), r.clone(), up.clone());
                std::thread::spawn(move || proxy_connection(conn, &up, &r, &c));
            }
        });
        FaultProxy {
            addr,
            counts,
            rules,
        }
    }

    /// Replaces the rules.
    pub fn set_rules(&self, rules: Vec<FaultRule>) {
        *self.rules.lock().unwrap() = rules;
    }

    /// `addr/<path>`.
    pub fn repo(&self, path: &str) -> String {
        format!("{}/{path}", self.addr)
    }

    /// (500s, resets, kills) injected so far.
    pub fn injected(&self) -> (usize, usize, usize) {
        use std::sync::atomic::Ordering::SeqCst;
        (
            self.counts.status_500.load(SeqCst),
            self.counts.resets.load(SeqCst),
            self.counts.kills.load(SeqCst),
        )
    }
}

fn read_request(conn: &mut TcpStream) -> Option<(String, Vec<u8>)> {
    let mut head = Vec::new();
    let mut byte = [0u8; 1];
    while !head.ends_with(b"\r\n\r\n") {
        if conn.read(&mut byte).ok()? == 0 {
            return None;
        }
        head.push(byte[0]);
    }
    let head = String::from_utf8_lossy(&head).into_owned();
    let len: usize = head
        .lines()
        .find_map(|l| {
            l.split_once(':')
                .filter(|(k, _)| k.eq_ignore_ascii_case("content-length"))
                .map(|(_, v)| v.trim().parse().unwrap_or(0))
        })
        .unwrap_or(0);
    let mut body = vec![0u8; len];
    conn.read_exact(&mut body).ok()?;
    Some((head, body))
}

fn proxy_connection(
    mut conn: TcpStream,
    upstream: &str,
    rules: &std::sync::Mutex<Vec<FaultRule>>,
    counts: &FaultCounts,
) {
    use std::sync::atomic::Ordering::SeqCst;
    let _ = conn.set_read_timeout(Some(Duration::from_secs(30)));
    // One request per connection: every answer goes out with `Connection: close`.
    if let Some((head, body)) = read_request(&mut conn) {
        let mut parts = head.split_whitespace();
        let (method, path) = (
            parts.next().unwrap_or("").to_string(),
            parts.next().unwrap_or("").to_string(),
        );
        counts
            .requests
            .lock()
            .unwrap()
            .push(format!("{method} {path} ({} bytes)", body.len()));
        let fault = {
            let mut rules = rules.lock().unwrap();
            rules
                .iter_mut()
                .find(|r| {
                    r.times > 0
                        && (r.method == "*" || r.method == method)
                        && path.contains(r.path_contains)
                })
                .and_then(|r| {
                    if r.after > 0 {
                        r.after -= 1;
                        return None;
                    }
                    r.times -= 1;
                    Some(r.fault)
                })
        };
        match fault {
            Some(Fault::Status500) => {
                counts.status_500.fetch_add(1, SeqCst);
                let _ = conn.write_all(b"HTTP/1.1 500 Internal Server Error\r\nContent-Length: 0\r\nConnection: close\r\n\r\n");
                return;
            }
            Some(Fault::Reset) => {
                counts.resets.fetch_add(1, SeqCst);
                let _ = conn.shutdown(std::net::Shutdown::Both);
                return;
            }
            Some(Fault::Delay(d)) => {
                counts.delayed.fetch_add(1, SeqCst);
                std::thread::sleep(d);
            }
            Some(Fault::Redirect307(port)) => {
                counts.redirects.fetch_add(1, SeqCst);
                let _ = write!(
                    conn,
                    "HTTP/1.1 307 Temporary Redirect\r\nLocation: http://localhost:{port}{path}\r\nContent-Length: 0\r\nConnection: close\r\n\r\n"
                );
                return;
            }
            Some(Fault::UploadUnknown) => {
                counts.upload_unknown.fetch_add(1, SeqCst);
                let body = r#"{"errors":[{"code":"BLOB_UPLOAD_UNKNOWN","message":"blob upload unknown to registry","detail":"this host holds no such upload session"}]}"#;
                let _ = write!(
                    conn,
                    "HTTP/1.1 404 Not Found\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
                    body.len()
                );
                return;
            }
            Some(Fault::Answer(status, answer)) => {
                counts.answered.fetch_add(1, SeqCst);
                answer_with(&mut conn, status, answer);
                return;
            }
            Some(Fault::TooManyRequests(retry_after)) => {
                counts.answered.fetch_add(1, SeqCst);
                let body = if method == "HEAD" {
                    ""
                } else {
                    r#"{"errors":[{"code":"TOOMANYREQUESTS","message":"You have reached your pull rate limit. You may increase the limit by authenticating and upgrading: https://www.docker.com/increase-rate-limit"}]}"#
                };
                let _ = write!(
                    conn,
                    "HTTP/1.1 429 Too Many Requests\r\nRetry-After: {retry_after}\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
                    body.len()
                );
                return;
            }
            Some(Fault::Referrers(api)) => {
                counts.answered.fetch_add(1, SeqCst);
                quirks::serve_referrers(&mut conn, upstream, &path, api);
                return;
            }
            Some(Fault::ImmutableTags)
                if method == "PUT" && !path.contains("/manifests/sha256:") =>
            {
                let (repo, tag) = path
                    .trim_start_matches("/v2/")
                    .split_once("/manifests/")
                    .unwrap_or(("", ""));
                let there = quirks::get_manifest(upstream, &path);
                if there.is_some_and(|t| t != body) {
                    counts.answered.fetch_add(1, SeqCst);
                    let message = format!(
                        r#"{{"errors":[{{"code":"TAG_INVALID","message":"The image tag '{tag}' already exists in the '{repo}' repository and cannot be overwritten because the repository is immutable."}}]}}"#
                    );
                    let _ = write!(
                        conn,
                        "HTTP/1.1 400 Bad Request\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{message}",
                        message.len()
                    );
                    return;
                }
            }
            Some(Fault::AnswerIfBody(needle, status, answer))
                if String::from_utf8_lossy(&body).contains(needle) =>
            {
                counts.answered.fetch_add(1, SeqCst);
                answer_with(&mut conn, status, answer);
                return;
            }
            _ => {}
        }
        let Ok(mut up) = TcpStream::connect(upstream) else {
            return;
        };
        let drop_body = fault == Some(Fault::DropBody) && !body.is_empty();
        let body = if drop_body {
            counts.dropped_bodies.fetch_add(1, SeqCst);
            Vec::new()
        } else {
            body
        };
        // Only a tag that is `sha256-` and 64 hex digits, nothing after.
        let digest_tag = path
            .split_once("/manifests/sha256-")
            .is_some_and(|(_, t)| t.len() == 64 && t.bytes().all(|b| b.is_ascii_hexdigit()));
        let head = if fault == Some(Fault::TagAsDigest) && digest_tag {
            head.replacen("/manifests/sha256-", "/manifests/sha256:", 1)
        } else {
            head
        };
        let head: String = head
            .split("\r\n")
            .filter(|l| !l.to_ascii_lowercase().starts_with("connection:"))
            .map(|l| {
                if drop_body && l.to_ascii_lowercase().starts_with("content-length:") {
                    "Content-Length: 0"
                } else {
                    l
                }
            })
            .collect::<Vec<_>>()
            .join("\r\n");
        let head = head.trim_end_matches("\r\n").to_string() + "\r\nConnection: close\r\n\r\n";
        if up
            .write_all(head.as_bytes())
            .and_then(|_| up.write_all(&body))
            .is_err()
        {
            return;
        }
        counts.forwarded.fetch_add(1, SeqCst);
        let mut answer = Vec::new();
        let _ = up.read_to_end(&mut answer);
        if let Some(Fault::KillUpstream(pid)) = fault {
            counts.kills.fetch_add(1, SeqCst);
            let _ = Command::new("kill").args(["-9", &pid.to_string()]).status();
            return;
        }
        // The registry closes after answering; tell the client so too.
        let text = String::from_utf8_lossy(&answer);
        let split = text.find("\r\n\r\n").map_or(answer.len(), |i| i + 4);
        let (resp_head, mut resp_body) = answer.split_at(split);
        let mut resp_head = String::from_utf8_lossy(resp_head).into_owned();
        if let Some(Fault::StatusAs(from, to)) = fault
            && resp_head.starts_with(&format!("HTTP/1.1 {from} "))
        {
            counts.answered.fetch_add(1, SeqCst);
            let status_line = resp_head.split("\r\n").next().unwrap_or("").to_string();
            let reason = if to == 204 { "No Content" } else { "Rewritten" };
            resp_head = resp_head
                .replacen(&status_line, &format!("HTTP/1.1 {to} {reason}"), 1)
                .split("\r\n")
                .filter(|l| !l.to_ascii_lowercase().starts_with("content-length:"))
                .collect::<Vec<_>>()
                .join("\r\n");
            resp_body = &[];
        }
        let resp_head: String = resp_head
            .split("\r\n")
            .filter(|l| !l.to_ascii_lowercase().starts_with("connection:") && !l.is_empty())
            .collect::<Vec<_>>()
            .join("\r\n")
            + "\r\nConnection: close\r\n\r\n";
        let _ = conn
            .write_all(resp_head.as_bytes())
            .and_then(|_| conn.write_all(resp_body));
    }
}

/// Writes an answer with `status` and `body` (`application/json` when it starts with `{`).
fn answer_with(conn: &mut TcpStream, status: u16, body: &str) {
    let reason = match status {
        400 => "Bad Request",
        404 => "Not Found",
        413 => "Payload Too Large",
        416 => "Range Not Satisfiable",
        500 => "Internal Server Error",
        507 => "Insufficient Storage",
        _ => "Injected",
    };
    let content_type = if body.starts_with('{') {
        "Content-Type: application/json\r\n"
    } else {
        ""
    };
    let _ = write!(
        conn,
        "HTTP/1.1 {status} {reason}\r\n{content_type}Content-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    );
}

/// Pushes a tiny OCI base image (made with umoci) to `repo:tag` and returns its digest.
pub fn push_base(dir: &Path, repo: &str, tag: &str) -> String {
    require_tool("umoci");
    let layout = dir.join(format!("base-{tag}"));
    let l = layout.display().to_string();
    run(Command::new("umoci").args(["init", "--layout", &l]));
    run(Command::new("umoci").args(["new", "--image", &format!("{l}:{tag}")]));
    run(Command::new("umoci").args([
        "config",
        "--image",
        &format!("{l}:{tag}"),
        "--config.entrypoint",
        "/go-runner",
    ]));
    skopeo(&[
        "copy",
        "--quiet",
        "--dest-tls-verify=false",
        &format!("oci:{l}:{tag}"),
        &format!("docker://{repo}:{tag}"),
    ]);
    let raw = skopeo(&[
        "inspect",
        "--tls-verify=false",
        "--raw",
        &format!("docker://{repo}:{tag}"),
    ]);
    format!("sha256:{}", sha256_hex(raw.as_bytes()))
}

/// Runs `cmd`, killing it (by PID) when it has not ended within `limit`. Returns its output and
/// whether it ended by itself.
pub fn output_within(cmd: &mut Command, limit: Duration) -> (Output, bool) {
    let mut child = cmd
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap_or_else(|e| panic!("cannot run {cmd:?}: {e}"));
    let mut out = child.stdout.take().unwrap();
    let mut err = child.stderr.take().unwrap();
    let out_reader = std::thread::spawn(move || {
        let mut b = Vec::new();
        let _ = out.read_to_end(&mut b);
        b
    });
    let err_reader = std::thread::spawn(move || {
        let mut b = Vec::new();
        let _ = err.read_to_end(&mut b);
        b
    });
    let deadline = Instant::now() + limit;
    let mut ended = true;
    let status = loop {
        if let Some(status) = child.try_wait().unwrap() {
            break status;
        }
        if Instant::now() > deadline {
            ended = false;
            let _ = child.kill();
            break child.wait().unwrap();
        }
        std::thread::sleep(Duration::from_millis(100));
    };
    let output = Output {
        status,
        stdout: out_reader.join().unwrap(),
        stderr: err_reader.join().unwrap(),
    };
    (output, ended)
}

/// A listener on 127.0.0.1 that accepts connections and never reads or answers (a registry that
/// hangs). Returns its address and the time of the first connection.
pub fn silent_listener() -> (String, std::sync::Arc<std::sync::Mutex<Option<Instant>>>) {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap().to_string();
    let first = std::sync::Arc::new(std::sync::Mutex::new(None));
    let f = first.clone();
    std::thread::spawn(move || {
        let mut held = Vec::new();
        for conn in listener.incoming().flatten() {
            f.lock().unwrap().get_or_insert_with(Instant::now);
            held.push(conn);
        }
    });
    (addr, first)
}

/// A non-loopback IPv4 address of this machine (the source address of a route to TEST-NET-1;
/// no packet is sent). Go's proxy rules never proxy loopback, so a registry reached through
/// this address is what NO_PROXY must list.
pub fn non_loopback_ip() -> String {
    let s = std::net::UdpSocket::bind("0.0.0.0:0").unwrap();
    s.connect("192.0.2.1:9")
        .or_else(|_| s.connect("10.255.255.1:9"))
        .expect("this test needs a non-loopback IPv4 address (a network interface with a route)");
    let ip = s.local_addr().unwrap().ip();
    assert!(
        !ip.is_loopback() && !ip.is_unspecified(),
        "no non-loopback address: {ip}"
    );
    ip.to_string()
}

/// A digest-manifest entry of `repository:tag@digest`, as `render` reads it.
pub fn entry(repository: &str, tag: &str, digest: &str) -> occm_forge_core::digest_manifest::Entry {
    occm_forge_core::digest_manifest::Entry {
        image: format!("{repository}:{tag}@{digest}"),
        repository: repository.to_string(),
        tag: tag.to_string(),
        digest: digest.to_string(),
        published: true,
        mirrors: vec![],
        upstream_tag: String::new(),
        upstream_commit: String::new(),
        patch_series_sha256: String::new(),
        patches: vec![],
        already_upstream: vec![],
        applied_three_way: Default::default(),
        platforms: vec![],
        manifests: std::collections::BTreeMap::new(),
        sbom: std::collections::BTreeMap::new(),
        provenance: None,
        go_version: String::new(),
        base_image: String::new(),
        base_digest: None,
        source_date_epoch: 0,
        built_at: String::new(),
        inputs: None,
        accepted: false,
        accepted_scenarios: vec![],
        referrers: None,
        signature: None,
    }
}

/// The magnum-cluster-api version scripts/test installs (scripts/magnum-cluster-api.txt).
pub const MCAPI_VERSION: &str = "0.38.2";

/// The tools scripts/test installs for magnum-cluster-api's real renderer: the virtualenv
/// `.tools/mcapi` (the wheel, no dependencies) and `.tools/bin/helm`.
pub fn mcapi_tools() -> occm_forge_core::consumers::mcapi::Tools {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    occm_forge_core::consumers::mcapi::Tools {
        python: Some(root.join(".tools/mcapi/bin/python")),
        helm: Some(root.join(".tools/bin/helm")),
    }
}

/// magnum-cluster-api's real renderer, as scripts/test installs it.
pub fn mcapi() -> occm_forge_core::consumers::mcapi::Renderer {
    occm_forge_core::consumers::mcapi::Renderer::find(&mcapi_tools(), MCAPI_VERSION).unwrap_or_else(|e| {
        panic!("{e} (scripts/test installs magnum-cluster-api into .tools/mcapi and helm into .tools/bin)")
    })
}

/// The OCCM manifests (`cloud-controller-manager.yaml`) magnum-cluster-api's real code renders
/// for `cluster`.
pub fn mcapi_manifests(cluster: &occm_forge_core::consumers::mcapi::MagnumCluster) -> String {
    let mut data = mcapi().render(std::slice::from_ref(cluster)).unwrap();
    data.remove(0)
        .remove(occm_forge_core::consumers::render::crs_secret::SECRET_KEY)
        .expect("the renderer gives cloud-controller-manager.yaml")
}

/// Adds one version of `module` to the file-based Go module proxy `proxy` (the GOPROXY
/// protocol's layout: `<module>/@v/{list,<v>.info,<v>.mod,<v>.zip}`, the zip holding
/// `<module>@<v>/…`); `list` gains the version.
pub fn publish_module(proxy: &Path, module: &str, version: &str, files: &[(&str, &str)]) {
    let dir = proxy.join(module).join("@v");
    std::fs::create_dir_all(&dir).unwrap();
    let go_mod = files.iter().find(|(n, _)| *n == "go.mod").unwrap().1;
    let mut list = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(dir.join("list"))
        .unwrap();
    writeln!(list, "{version}").unwrap();
    std::fs::write(
        dir.join(format!("{version}.info")),
        format!("{{\"Version\":\"{version}\",\"Time\":\"2026-01-01T00:00:00Z\"}}"),
    )
    .unwrap();
    std::fs::write(dir.join(format!("{version}.mod")), go_mod).unwrap();
    let zip = std::fs::File::create(dir.join(format!("{version}.zip"))).unwrap();
    let mut w = zip::ZipWriter::new(zip);
    let opts =
        zip::write::SimpleFileOptions::default().compression_method(zip::CompressionMethod::Stored);
    for (name, text) in files {
        w.start_file(format!("{module}@{version}/{name}"), opts)
            .unwrap();
        w.write_all(text.as_bytes()).unwrap();
    }
    w.finish().unwrap();
}

/// A `go` command (or occm-forge) on the file proxy `proxy`: its go.mod files are not in the
/// checksum database, and the local toolchain builds.
pub fn file_proxy_env(cmd: &mut Command, proxy: &Path) {
    cmd.env("GOPROXY", format!("file://{}", proxy.display()))
        .env("GOSUMDB", "off")
        .env("GOFLAGS", "")
        .env("GOTOOLCHAIN", "local");
}
