//! Proxies as Go programs (docker, skopeo) apply them: `NO_PROXY` entries with a port
//! (`host:port`) send that registry around the proxy; a registry not listed goes through the
//! proxy, and when the proxy is what cannot be reached the error names it.
//!
//! Go never proxies loopback addresses, so the registry is reached through a non-loopback address
//! of this machine (a fault proxy without faults listening there, in front of a real
//! docker-registry); `HTTP_PROXY` and `HTTPS_PROXY` name a port where nothing listens.

mod common;

use std::process::Output;

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
        last.starts_with(&format!(
            "occm-forge: error: publish: registry {}: ",
            front.addr
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
            "occm-forge: error: publish: registry {}: set up the client: ",
            front.addr
        )) && last.ends_with("(check HTTPS_PROXY, HTTP_PROXY and NO_PROXY)"),
        "{last}"
    );
}
