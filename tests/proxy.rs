//! Proxies as Go programs (docker, skopeo) apply them: `NO_PROXY` entries with a port
//! (`host:port`) send that registry around the proxy; a registry not listed goes through the
//! proxy, and when the proxy is what cannot be reached the error names it.
//!
//! Go never proxies loopback addresses, so the registry is reached through a non-loopback address
//! of this machine (a fault proxy without faults listening there, in front of a real
//! docker-registry); `HTTP_PROXY` and `HTTPS_PROXY` name a port where nothing listens.
//!
//! The git source follows the same rule: a real `git http-backend` behind a TLS server of this
//! file on a non-loopback address, reached through a recording forward proxy (CONNECT, Basic
//! credentials, 407) on loopback.

use crate::common;

use std::process::{Command, Output, Stdio};

use common::*;

/// `build --push` to `front` (plain HTTP) with the proxy variables set.
fn push_with_proxy(f: &Fixture, front: &FaultProxy, dead_proxy: &str, no_proxy: &str) -> Output {
    occm_forge(f.path())
        .args(["build", "--k8s", "1.34", "--push", "--repository"])
        .arg(front.repo("occm/openstack-cloud-controller-manager"))
        .args([
            "--insecure-registry",
            &front.addr,
            "--retries",
            "1",
            "--source",
        ])
        .arg(&f.upstream)
        .arg("--output")
        .arg(f.path().join("out"))
        .env("HTTP_PROXY", dead_proxy)
        .env("HTTPS_PROXY", dead_proxy)
        .env_remove("http_proxy")
        .env_remove("https_proxy")
        .env("NO_PROXY", no_proxy)
        .env_remove("no_proxy")
        .output()
        .unwrap()
}

#[test]
fn no_proxy_host_port_entries_send_the_registry_around_the_proxy() {
    let reg = TestRegistry::start();
    let front = FaultProxy::start_on(&non_loopback_ip(), &reg.addr, vec![]);
    let f = fixture(&["linux/amd64"]);
    let dead = format!("http://127.0.0.1:{}", free_port());
    let o = push_with_proxy(&f, &front, &dead, &format!("example.com, {}", front.addr));
    assert!(o.status.success(), "{}", stderr(&o));
    assert!(
        stdout(&o).starts_with(&front.repo("occm/openstack-cloud-controller-manager")),
        "{}",
        stdout(&o)
    );
}

#[test]
fn an_unreachable_proxy_is_named_in_the_error() {
    let reg = TestRegistry::start();
    let front = FaultProxy::start_on(&non_loopback_ip(), &reg.addr, vec![]);
    let f = fixture(&["linux/amd64"]);
    let lock_before = f.seed_lock();
    let dead_port = free_port();
    let dead = format!("127.0.0.1:{dead_port}");
    // Another port of the same host is listed: this registry is not.
    let (ip, port) = front.addr.rsplit_once(':').unwrap();
    let other: u16 = port.parse::<u16>().unwrap().wrapping_add(1);
    let o = push_with_proxy(&f, &front, &dead, &format!("{ip}:{other}"));
    assert_eq!(o.status.code(), Some(8), "{}", stderr(&o));
    let last = stderr(&o).lines().last().unwrap_or_default().to_string();
    eprintln!("{last}");
    assert!(
        // Found by the preflight's push check, before any build work.
        last.starts_with(&format!(
            "occm-forge: error: preflight: push to {a}/occm/openstack-cloud-controller-manager: registry {a}: check push permission",
            a = front.addr
        )) && last.contains(&format!(
            "cannot reach the proxy http://127.0.0.1:{dead_port} (from HTTP_PROXY): "
        )) && last.contains(&format!("NO_PROXY does not list {}", front.addr)),
        "{last}"
    );
    assert_eq!(std::fs::read(&f.lock).unwrap(), lock_before);
}

/// A proxy variable that is not a URL is an error naming the variables, not a silent fallback.
#[test]
fn a_malformed_proxy_variable_is_an_error() {
    let reg = TestRegistry::start();
    let front = FaultProxy::start_on(&non_loopback_ip(), &reg.addr, vec![]);
    let f = fixture(&["linux/amd64"]);
    let o = push_with_proxy(&f, &front, "http://[proxy.corp", "");
    assert_eq!(o.status.code(), Some(8), "{}", stderr(&o));
    let last = stderr(&o).lines().last().unwrap_or_default().to_string();
    eprintln!("{last}");
    assert!(
        last.starts_with(&format!(
            "occm-forge: error: preflight: push to {a}/occm/openstack-cloud-controller-manager: registry {a}: set up the client: ",
            a = front.addr
        )) && last.ends_with("(check HTTPS_PROXY, HTTP_PROXY and NO_PROXY)"),
        "{last}"
    );
}

// ---- The git source through a proxy ----
//
// A smart-HTTP git server (`git http-backend` run as CGI by a tiny HTTP server in this file) on a
// non-loopback address serves a bare clone of the fixture upstream; a forward proxy on loopback
// (also in this file) records every request with its `Proxy-Authorization`, and can demand
// Basic credentials or answer every request with 407.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{TcpListener, TcpStream};
use std::sync::{Arc, Mutex};

/// The user and password of the proxy tests, percent-encoded in the proxy URL as
/// `us%40r:p%3Ass`.
const PROXY_USER: &str = "us@r";
const PROXY_PASSWORD: &str = "p:ss";
const PROXY_USERINFO: &str = "us%40r:p%3Ass";

/// One HTTP/1.1 request: the request line's method and target, headers (names lower-cased), and
/// the body (de-chunked).
struct Request {
    method: String,
    target: String,
    headers: Vec<(String, String)>,
    body: Vec<u8>,
}

impl Request {
    fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(k, _)| k == name)
            .map(|(_, v)| v.as_str())
    }
}

fn read_http_request<S: Read>(r: &mut BufReader<S>) -> Option<Request> {
    let mut line = String::new();
    r.read_line(&mut line).ok()?;
    let mut parts = line.split_whitespace();
    let (method, target) = (parts.next()?.to_string(), parts.next()?.to_string());
    let mut headers = Vec::new();
    loop {
        let mut h = String::new();
        r.read_line(&mut h).ok()?;
        let h = h.trim_end();
        if h.is_empty() {
            break;
        }
        let (k, v) = h.split_once(':')?;
        headers.push((k.trim().to_ascii_lowercase(), v.trim().to_string()));
    }
    let mut req = Request {
        method,
        target,
        headers,
        body: Vec::new(),
    };
    if req
        .header("transfer-encoding")
        .is_some_and(|t| t.eq_ignore_ascii_case("chunked"))
    {
        loop {
            let mut size = String::new();
            r.read_line(&mut size).ok()?;
            let size = usize::from_str_radix(size.trim().split(';').next()?, 16).ok()?;
            let mut chunk = vec![0; size + 2];
            r.read_exact(&mut chunk).ok()?;
            if size == 0 {
                break;
            }
            req.body.extend_from_slice(&chunk[..size]);
        }
    } else if let Some(len) = req.header("content-length") {
        let mut body = vec![0; len.parse().ok()?];
        r.read_exact(&mut body).ok()?;
        req.body = body;
    }
    Some(req)
}

/// A smart-HTTP git server over TLS: `git http-backend` over the bare repositories in `root`,
/// with a certificate for its IP address from a CA of its own.
struct GitHttpsServer {
    /// `<ip>:<port>`.
    addr: String,
}

impl GitHttpsServer {
    fn start(ip: &str, root: &std::path::Path) -> GitHttpsServer {
        use rcgen::{BasicConstraints, CertificateParams, IsCa, Issuer, KeyPair};
        let mut ca = CertificateParams::new(Vec::<String>::new()).unwrap();
        ca.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        ca.distinguished_name
            .push(rcgen::DnType::CommonName, "occm-forge test git CA");
        let ca_key = KeyPair::generate().unwrap();
        let ca_cert = ca.self_signed(&ca_key).unwrap();
        let issuer = Issuer::new(ca, ca_key);
        let leaf_key = KeyPair::generate().unwrap();
        let mut leaf = CertificateParams::new(vec![ip.to_string()]).unwrap();
        leaf.distinguished_name
            .push(rcgen::DnType::CommonName, "occm-forge test git server");
        let leaf = leaf.signed_by(&leaf_key, &issuer).unwrap();
        // For `SSL_CERT_FILE` (see forge_with_proxy).
        std::fs::write(root.join("ca.pem"), ca_cert.pem()).unwrap();
        let config = Arc::new(
            rustls::ServerConfig::builder()
                .with_no_client_auth()
                .with_single_cert(
                    vec![leaf.der().clone()],
                    rustls::pki_types::PrivateKeyDer::Pkcs8(leaf_key.serialize_der().into()),
                )
                .unwrap(),
        );
        let listener = TcpListener::bind((ip, 0)).unwrap();
        let addr = listener.local_addr().unwrap().to_string();
        let root = root.to_path_buf();
        std::thread::spawn(move || {
            for conn in listener.incoming().flatten() {
                let (root, config) = (root.clone(), config.clone());
                let _ = conn.set_read_timeout(Some(std::time::Duration::from_secs(60)));
                std::thread::spawn(move || {
                    let tls = rustls::ServerConnection::new(config).unwrap();
                    serve_git(rustls::StreamOwned::new(tls, conn), &root)
                });
            }
        });
        GitHttpsServer { addr }
    }
}

/// Answers each request on `conn` by running `git http-backend` as CGI (RFC 3875).
fn serve_git<S: Read + Write>(conn: S, root: &std::path::Path) {
    let mut reader = BufReader::new(conn);
    while let Some(req) = read_http_request(&mut reader) {
        let (path, query) = req.target.split_once('?').unwrap_or((&req.target, ""));
        let mut cgi = Command::new("git");
        cgi.arg("http-backend")
            .env_clear()
            .env("PATH", std::env::var("PATH").unwrap())
            .env("GIT_PROJECT_ROOT", root)
            .env("GIT_HTTP_EXPORT_ALL", "1")
            .env("GIT_CONFIG_NOSYSTEM", "1")
            .env("GIT_CONFIG_GLOBAL", "/dev/null")
            .env("REQUEST_METHOD", &req.method)
            .env("PATH_INFO", path)
            .env("QUERY_STRING", query)
            .env("REMOTE_ADDR", "127.0.0.1")
            .env("CONTENT_LENGTH", req.body.len().to_string())
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::null());
        if let Some(t) = req.header("content-type") {
            cgi.env("CONTENT_TYPE", t);
        }
        if let Some(p) = req.header("git-protocol") {
            cgi.env("GIT_PROTOCOL", p);
        }
        let mut child = cgi.spawn().unwrap();
        let mut stdin = child.stdin.take().unwrap();
        let body = req.body.clone();
        let writer = std::thread::spawn(move || {
            let _ = stdin.write_all(&body);
        });
        let out = child.wait_with_output().unwrap().stdout;
        let _ = writer.join();
        let split = out
            .windows(4)
            .position(|w| w == b"\r\n\r\n")
            .map(|i| (i, 4))
            .or_else(|| out.windows(2).position(|w| w == b"\n\n").map(|i| (i, 2)));
        let Some((at, sep)) = split else { return };
        let head = String::from_utf8_lossy(&out[..at]).into_owned();
        let body = &out[at + sep..];
        let mut status = "200 OK".to_string();
        let mut headers = String::new();
        for l in head.lines() {
            match l.split_once(':') {
                Some((k, v)) if k.eq_ignore_ascii_case("status") => status = v.trim().to_string(),
                _ => headers.push_str(&format!("{l}\r\n")),
            }
        }
        let answer = format!(
            "HTTP/1.1 {status}\r\n{headers}Content-Length: {}\r\n\r\n",
            body.len()
        );
        let conn = reader.get_mut();
        if conn
            .write_all(answer.as_bytes())
            .and_then(|_| conn.write_all(body))
            .and_then(|_| conn.flush())
            .is_err()
        {
            return;
        }
    }
}

/// What a [`RecordingProxy`] does with requests.
#[derive(Clone, Copy, PartialEq, Eq)]
enum ProxyMode {
    /// Forward everything.
    Open,
    /// 407 unless `Proxy-Authorization` is Basic with [`PROXY_USER`] and [`PROXY_PASSWORD`].
    Basic,
    /// 407 to every request.
    Refuse,
}

/// One request a [`RecordingProxy`] saw: method, target (absolute form, or `host:port` for
/// CONNECT) and its `Proxy-Authorization`.
#[derive(Debug, Clone)]
struct Seen {
    method: String,
    target: String,
    authorization: Option<String>,
}

/// A forward HTTP proxy on 127.0.0.1 (absolute-form requests and CONNECT tunnels) that records
/// what it saw.
struct RecordingProxy {
    addr: String,
    seen: Arc<Mutex<Vec<Seen>>>,
}

impl RecordingProxy {
    fn start(mode: ProxyMode) -> RecordingProxy {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = listener.local_addr().unwrap().to_string();
        let seen = Arc::new(Mutex::new(Vec::new()));
        let s = seen.clone();
        std::thread::spawn(move || {
            for conn in listener.incoming().flatten() {
                let s = s.clone();
                std::thread::spawn(move || forward(conn, mode, &s));
            }
        });
        RecordingProxy { addr, seen }
    }

    fn seen(&self) -> Vec<Seen> {
        self.seen.lock().unwrap().clone()
    }

    /// `http://us%40r:p%3Ass@127.0.0.1:<port>`.
    fn url_with_credentials(&self) -> String {
        format!("http://{PROXY_USERINFO}@{}", self.addr)
    }
}

fn expected_authorization() -> String {
    use base64::Engine;
    format!(
        "Basic {}",
        base64::engine::general_purpose::STANDARD.encode(format!("{PROXY_USER}:{PROXY_PASSWORD}"))
    )
}

fn forward(conn: TcpStream, mode: ProxyMode, seen: &Mutex<Vec<Seen>>) {
    let _ = conn.set_read_timeout(Some(std::time::Duration::from_secs(60)));
    let mut reader = BufReader::new(conn.try_clone().unwrap());
    let mut conn = conn;
    // One request per connection (answers go out with `Connection: close`), a tunnel for CONNECT.
    let Some(req) = read_http_request(&mut reader) else {
        return;
    };
    let authorization = req.header("proxy-authorization").map(str::to_string);
    seen.lock().unwrap().push(Seen {
        method: req.method.clone(),
        target: req.target.clone(),
        authorization: authorization.clone(),
    });
    let allowed = match mode {
        ProxyMode::Open => true,
        ProxyMode::Basic => authorization.as_deref() == Some(expected_authorization().as_str()),
        ProxyMode::Refuse => false,
    };
    if !allowed {
        let _ = conn.write_all(
            b"HTTP/1.1 407 Proxy Authentication Required\r\nProxy-Authenticate: Basic realm=\"test proxy\"\r\nContent-Length: 0\r\nConnection: close\r\n\r\n",
        );
        return;
    }
    if req.method == "CONNECT" {
        let Ok(up) = TcpStream::connect(&req.target) else {
            let _ = conn.write_all(b"HTTP/1.1 502 Bad Gateway\r\nContent-Length: 0\r\n\r\n");
            return;
        };
        let _ = conn.write_all(b"HTTP/1.1 200 Connection established\r\n\r\n");
        // Each direction ends the other when its side closes.
        let (mut a, mut b) = (up.try_clone().unwrap(), up);
        let mut c = conn.try_clone().unwrap();
        std::thread::spawn(move || {
            let _ = std::io::copy(&mut reader, &mut a);
            let _ = a.shutdown(std::net::Shutdown::Both);
        });
        let _ = std::io::copy(&mut b, &mut c);
        let _ = c.shutdown(std::net::Shutdown::Both);
        return;
    }
    let rest = req.target.strip_prefix("http://").unwrap_or(&req.target);
    let (host, path) = rest.split_at(rest.find('/').unwrap_or(rest.len()));
    let Ok(mut up) = TcpStream::connect(host) else {
        let _ = conn.write_all(b"HTTP/1.1 502 Bad Gateway\r\nContent-Length: 0\r\n\r\n");
        return;
    };
    let mut head = format!(
        "{} {} HTTP/1.1\r\n",
        req.method,
        if path.is_empty() { "/" } else { path }
    );
    for (k, v) in &req.headers {
        if !matches!(
            k.as_str(),
            "proxy-authorization"
                | "proxy-connection"
                | "connection"
                | "transfer-encoding"
                | "content-length"
        ) {
            head.push_str(&format!("{k}: {v}\r\n"));
        }
    }
    head.push_str(&format!(
        "Content-Length: {}\r\nConnection: close\r\n\r\n",
        req.body.len()
    ));
    if up
        .write_all(head.as_bytes())
        .and_then(|_| up.write_all(&req.body))
        .is_err()
    {
        return;
    }
    let mut answer = Vec::new();
    let _ = up.read_to_end(&mut answer);
    // Tell the client the connection ends with this answer.
    let split = answer
        .windows(4)
        .position(|w| w == b"\r\n\r\n")
        .map_or(answer.len(), |i| i + 4);
    let head: String = String::from_utf8_lossy(&answer[..split])
        .split("\r\n")
        .filter(|l| !l.is_empty() && !l.to_ascii_lowercase().starts_with("connection:"))
        .map(|l| format!("{l}\r\n"))
        .collect();
    let _ = conn
        .write_all(format!("{head}Connection: close\r\n\r\n").as_bytes())
        .and_then(|_| conn.write_all(&answer[split..]));
}

/// The fixture upstream as a bare repository `upstream.git` served over smart HTTP with TLS
/// from a non-loopback address (Go's rules, which occm-forge follows, never proxy loopback), and
/// its `https://` URL.
fn served_upstream(f: &Fixture) -> (GitHttpsServer, String) {
    let root = f.path().join("served");
    std::fs::create_dir_all(&root).unwrap();
    run(git(f.path())
        .args(["clone", "-q", "--bare"])
        .arg(&f.upstream)
        .arg(root.join("upstream.git")));
    let server = GitHttpsServer::start(&non_loopback_ip(), &root);
    let url = format!("https://{}/upstream.git", server.addr);
    (server, url)
}

/// occm-forge with only these proxy variables, and an object store of its own (so that a fetch
/// really fetches).
fn forge_with_proxy(f: &Fixture, http_proxy: &str, no_proxy: &str) -> Command {
    let mut c = occm_forge(f.path());
    c.env("OCCM_FORGE_CACHE", f.path().join("cache"))
        // libgit2 verifies the server with OpenSSL's default paths.
        .env("SSL_CERT_FILE", f.path().join("served/ca.pem"))
        .env("HTTP_PROXY", http_proxy)
        .env("HTTPS_PROXY", http_proxy)
        .env("NO_PROXY", no_proxy)
        .env_remove("http_proxy")
        .env_remove("https_proxy")
        .env_remove("no_proxy")
        .env_remove("ALL_PROXY")
        .env_remove("all_proxy");
    c
}

fn assert_no_password(o: &Output) {
    for text in [stdout(o), stderr(o)] {
        for secret in [PROXY_PASSWORD, "p%3Ass", PROXY_USERINFO] {
            assert!(
                !text.contains(secret),
                "the proxy password is printed: {text}"
            );
        }
    }
}

/// `pin --k8s 1.34 --tag v1.34.1` fetches the tag (the source stage's fetch) and
/// `upstream check` lists the tags (ls-remote), both from `url`.
fn pin_and_check(f: &Fixture, url: &str, http_proxy: &str, no_proxy: &str) -> (Output, Output) {
    let pin = forge_with_proxy(f, http_proxy, no_proxy)
        .args([
            "-v", "pin", "--k8s", "1.34", "--tag", "v1.34.1", "--source", url,
        ])
        .output()
        .unwrap();
    let check = forge_with_proxy(f, http_proxy, no_proxy)
        .args(["-v", "upstream", "check", "--source", url])
        .output()
        .unwrap();
    (pin, check)
}

/// The default upstream is `https://github.com/…`: libgit2 reaches an `https://` remote through
/// the proxy with CONNECT. (A plain `http://` remote it cannot proxy at all: libgit2/libgit2#5650.)
#[test]
fn the_git_source_goes_through_the_proxy_and_around_it_for_no_proxy() {
    let f = fixture(&["linux/amd64"]);
    let (server, url) = served_upstream(&f);
    let proxy = RecordingProxy::start(ProxyMode::Open);
    let via = format!("http://{}", proxy.addr);
    let tunnels = |seen: &[Seen]| {
        assert!(
            seen.iter()
                .all(|s| s.method == "CONNECT" && s.target == server.addr),
            "{seen:?}"
        );
        seen.len()
    };
    let pin = forge_with_proxy(&f, &via, "example.com")
        .args(["pin", "--k8s", "1.34", "--tag", "v1.34.1", "--source", &url])
        .output()
        .unwrap();
    assert!(pin.status.success(), "{}", stderr(&pin));
    let after_pin = tunnels(&proxy.seen());
    assert!(after_pin >= 1, "the fetch goes through the proxy");
    let check = forge_with_proxy(&f, &via, "example.com")
        .args(["upstream", "check", "--source", &url])
        .output()
        .unwrap();
    assert_eq!(check.status.code(), Some(0), "{}", stderr(&check));
    assert!(
        tunnels(&proxy.seen()) > after_pin,
        "the listing goes through the proxy"
    );

    // NO_PROXY listing the server by host:port: straight there.
    let proxy = RecordingProxy::start(ProxyMode::Open);
    let (pin, check) = pin_and_check(
        &f,
        &url,
        &format!("http://{}", proxy.addr),
        &format!("example.com,{}", server.addr),
    );
    assert!(pin.status.success(), "{}", stderr(&pin));
    assert_eq!(check.status.code(), Some(0), "{}", stderr(&check));
    assert!(proxy.seen().is_empty(), "{:?}", proxy.seen());
}

#[test]
fn proxy_credentials_in_the_url_reach_the_proxy_decoded_for_git() {
    let f = fixture(&["linux/amd64"]);
    let (_server, url) = served_upstream(&f);
    let proxy = RecordingProxy::start(ProxyMode::Basic);
    let (pin, check) = pin_and_check(&f, &url, &proxy.url_with_credentials(), "");
    assert!(pin.status.success(), "{}", stderr(&pin));
    assert_eq!(check.status.code(), Some(0), "{}", stderr(&check));
    assert_no_password(&pin);
    assert_no_password(&check);
    let seen = proxy.seen();
    assert!(
        seen.iter()
            .any(|s| s.authorization.as_deref() == Some(expected_authorization().as_str())),
        "{seen:?}"
    );
}

#[test]
fn a_proxy_answering_407_is_named_in_one_line_without_its_password() {
    let f = fixture(&["linux/amd64"]);
    let (_server, url) = served_upstream(&f);
    let proxy = RecordingProxy::start(ProxyMode::Refuse);
    for http_proxy in [
        format!("http://{}", proxy.addr),
        proxy.url_with_credentials(),
    ] {
        let (pin, check) = pin_and_check(&f, &url, &http_proxy, "");
        let with = if http_proxy.contains('@') {
            "it refused the user and password in HTTPS_PROXY"
        } else {
            "HTTPS_PROXY has no user and password (http://user:password@host:port, percent-encoded)"
        };
        for (o, line) in [
            (
                &pin,
                format!(
                    "occm-forge: error: source: cannot fetch tag v1.34.1 from {url}: the proxy http://{} (from HTTPS_PROXY) answered 407 Proxy Authentication Required: {with}",
                    proxy.addr
                ),
            ),
            (
                &check,
                format!(
                    "occm-forge: error: source: cannot list the tags of {url}: the proxy http://{} (from HTTPS_PROXY) answered 407 Proxy Authentication Required: {with}",
                    proxy.addr
                ),
            ),
        ] {
            assert_eq!(o.status.code(), Some(3), "{}", stderr(o));
            assert_eq!(stderr(o).lines().last().unwrap_or_default(), line);
            assert_no_password(o);
        }
    }
    assert!(!proxy.seen().is_empty());
}

/// The registry client reads the same proxy URL: its percent-encoded user and password reach
/// the proxy decoded (reqwest for uploads, oci-client for the rest), and a proxy that refuses
/// them does not get the password printed.
#[test]
fn proxy_credentials_in_the_url_reach_the_proxy_decoded_for_the_registry() {
    let reg = TestRegistry::start();
    let front = FaultProxy::start_on(&non_loopback_ip(), &reg.addr, vec![]);
    let f = fixture(&["linux/amd64"]);
    let proxy = RecordingProxy::start(ProxyMode::Basic);
    let o = push_with_proxy(&f, &front, &proxy.url_with_credentials(), "");
    assert!(o.status.success(), "{}", stderr(&o));
    assert_no_password(&o);
    let seen = proxy.seen();
    let through: Vec<&Seen> = seen
        .iter()
        .filter(|s| s.authorization.as_deref() == Some(expected_authorization().as_str()))
        .collect();
    for (method, path) in [
        ("GET", "/v2/"),
        ("POST", "/blobs/uploads/"),
        ("PUT", "/blobs/uploads/"),
        ("PUT", "/manifests/"),
    ] {
        assert!(
            through.iter().any(|s| s.method == method
                && s.target.starts_with(&format!("http://{}/", front.addr))
                && s.target.contains(path)),
            "no {method} …{path}… with the credentials: {seen:?}"
        );
    }

    let lock_before = f.seed_lock();
    let refusing = RecordingProxy::start(ProxyMode::Refuse);
    let o = push_with_proxy(&f, &front, &refusing.url_with_credentials(), "");
    assert_eq!(o.status.code(), Some(8), "{}", stderr(&o));
    assert_no_password(&o);
    // One line naming the registry and the proxy (without its password), and what it wants.
    let last = stderr(&o).lines().last().unwrap_or_default().to_string();
    assert!(
        last.starts_with("occm-forge: error: ")
            && last.contains(&format!("registry {}: ", front.addr))
            && last.contains(&format!("through the proxy http://{}", refusing.addr))
            && last.contains("407 Proxy Authentication Required"),
        "{last}"
    );
    assert_eq!(std::fs::read(&f.lock).unwrap(), lock_before);
}

/// libgit2 cannot send a plain `http://` remote through a proxy (libgit2/libgit2#5650: it
/// connects to the server itself), so such a remote is reached directly; when that fails, the
/// error says that a proxy was named and why it was not used.
#[test]
fn a_plain_http_git_remote_is_reached_directly_and_the_error_says_why() {
    let f = fixture(&["linux/amd64"]);
    let proxy = RecordingProxy::start(ProxyMode::Open);
    let nothing = format!("{}:{}", non_loopback_ip(), free_port());
    let url = format!("http://{nothing}/upstream.git");
    let o = forge_with_proxy(&f, &format!("http://{}", proxy.addr), "")
        .args(["upstream", "check", "--source", &url])
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(3), "{}", stderr(&o));
    let last = stderr(&o).lines().last().unwrap_or_default().to_string();
    assert!(
        last.starts_with(&format!(
            "occm-forge: error: source: cannot list the tags of {url}: "
        )) && last.ends_with(&format!(
            "(HTTP_PROXY names a proxy for {nothing}, but libgit2 cannot fetch plain http:// through a proxy (libgit2/libgit2#5650), so it went directly: use an https:// URL)"
        )),
        "{last}"
    );
    assert!(proxy.seen().is_empty(), "{:?}", proxy.seen());
}
