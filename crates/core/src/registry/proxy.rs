//! Which HTTP proxy a registry request goes through, decided the way Go programs (docker, skopeo,
//! crane, helm) decide it with `golang.org/x/net/http/httpproxy`: `HTTPS_PROXY` for `https://`
//! URLs, `HTTP_PROXY` for `http://` URLs (upper case first, then lower case; empty means unset;
//! `ALL_PROXY` is not read); a proxy without a scheme is `http://`; no proxy for `localhost` or a
//! loopback IP; and none for a host `NO_PROXY` lists. `NO_PROXY` entries (comma-separated, case
//! and spaces ignored, matching by the `proxyvars` crate) are `*` (everything), an IP or CIDR
//! (`10.0.0.0/8`), a host (`example.com`: it and its subdomains), `.example.com` or
//! `*.example.com` (subdomains only), each optionally with `:port`, which then must match the
//! URL's port (80/443 when the URL has none): `127.0.0.1:5000` leaves other ports of 127.0.0.1
//! to the proxy.
//!
//! reqwest's own environment handling differs (it ignores `host:port` entries, so a registry
//! listed that way still went through the proxy), so occm-forge never lets reqwest read the
//! environment: [`ProxyEnv::reqwest_proxy`] decides per URL, and
//! [`ProxyEnv::oci_client_settings`] gives the per-registry settings for `oci-client`.

use reqwest::Url;

/// The proxy settings of the environment.
#[derive(Debug, Clone, Default)]
pub struct ProxyEnv {
    http: Option<Proxy>,
    https: Option<Proxy>,
    no_proxy: String,
}

/// A proxy and the variable it came from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Proxy {
    /// The proxy URL as configured, with `http://` added when it had no scheme.
    pub url: String,
    /// `HTTPS_PROXY`, `https_proxy`, `HTTP_PROXY` or `http_proxy`.
    pub variable: &'static str,
}

impl Proxy {
    /// Whether the proxy URL carries a user (and password) for `Proxy-Authorization: Basic`;
    /// reqwest and libgit2 both percent-decode them (`us%40r` is `us@r`).
    pub fn has_credentials(&self) -> bool {
        Url::parse(&self.url).is_ok_and(|u| !u.username().is_empty() || u.password().is_some())
    }

    /// `text` with the proxy URL as configured (credentials included) replaced by
    /// [`Proxy::display`], for messages of clients that may quote it.
    pub fn redact(&self, text: &str) -> String {
        let mut text = text.to_string();
        if let Ok(u) = Url::parse(&self.url) {
            text = text.replace(u.as_str().trim_end_matches('/'), &self.display());
        }
        text.replace(&self.url, &self.display())
    }

    /// The proxy URL without user and password, for messages.
    pub fn display(&self) -> String {
        match Url::parse(&self.url) {
            Ok(mut u) => {
                let _ = u.set_username("");
                let _ = u.set_password(None);
                u.as_str().trim_end_matches('/').to_string()
            }
            Err(_) => self.url.clone(),
        }
    }
}

impl std::fmt::Display for Proxy {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "proxy {} (from {})", self.display(), self.variable)
    }
}

/// What `oci-client`'s `ClientConfig` needs so that reqwest does what [`ProxyEnv`] decides for
/// one registry: `(http_proxy, https_proxy, no_proxy)`.
pub type OciClientProxy = (Option<String>, Option<String>, Option<String>);

/// reqwest's `NO_PROXY` syntax has no ports and no "subdomains only"; this list excludes every
/// host, IPv4 and IPv6 address from a proxy (reqwest's `*` alone does not cover IP addresses).
const EXCLUDE_EVERYTHING: &str = "*,0.0.0.0/0,::/0";

fn variable(get: &dyn Fn(&str) -> Option<String>, upper: &'static str) -> Option<Proxy> {
    let lower: &'static str = match upper {
        "HTTP_PROXY" => "http_proxy",
        "HTTPS_PROXY" => "https_proxy",
        _ => "no_proxy",
    };
    [upper, lower].into_iter().find_map(|name| {
        get(name).filter(|v| !v.trim().is_empty()).map(|v| {
            let v = v.trim();
            Proxy {
                url: if v.contains("://") {
                    v.to_string()
                } else {
                    format!("http://{v}")
                },
                variable: name,
            }
        })
    })
}

impl ProxyEnv {
    /// The settings of this process's environment.
    pub fn from_env() -> ProxyEnv {
        Self::from_lookup(&|name| std::env::var(name).ok())
    }

    /// The settings given by `get` (a variable name → its value), e.g. for tests.
    pub fn from_lookup(get: &dyn Fn(&str) -> Option<String>) -> ProxyEnv {
        ProxyEnv {
            http: variable(get, "HTTP_PROXY"),
            https: variable(get, "HTTPS_PROXY"),
            no_proxy: ["NO_PROXY", "no_proxy"]
                .into_iter()
                .find_map(|n| get(n).filter(|v| !v.trim().is_empty()))
                .unwrap_or_default()
                .to_ascii_lowercase(),
        }
    }

    /// The proxy for `url`, `None` for a direct connection.
    pub fn proxy_for(&self, url: &Url) -> Option<&Proxy> {
        let proxy = match url.scheme() {
            "https" => self.https.as_ref(),
            "http" => self.http.as_ref(),
            _ => None,
        }?;
        let host = url.host_str()?.to_ascii_lowercase();
        let bare = host.trim_start_matches('[').trim_end_matches(']');
        if bare == "localhost"
            || bare
                .parse::<std::net::IpAddr>()
                .is_ok_and(|ip| ip.is_loopback())
        {
            return None;
        }
        let port = url.port_or_known_default()?;
        let target = format!("{}://{host}:{port}", url.scheme());
        if proxyvars::NoProxy::from(self.no_proxy.as_str()).matches(&target) {
            return None;
        }
        Some(proxy)
    }

    /// The proxy for a registry (`host[:port]`) reached with `scheme`.
    pub fn proxy_for_registry(&self, scheme: &str, registry: &str) -> Option<&Proxy> {
        Url::parse(&format!("{scheme}://{registry}/"))
            .ok()
            .and_then(|u| self.proxy_for(&u))
    }

    /// A reqwest proxy that applies [`ProxyEnv::proxy_for`] to every request, redirects included.
    pub fn reqwest_proxy(&self) -> reqwest::Proxy {
        let env = self.clone();
        reqwest::Proxy::custom(move |url| env.proxy_for(url).map(|p| p.url.clone()))
    }

    /// Proxy settings for an `oci-client` client that talks to `registry` over `scheme`.
    ///
    /// oci-client builds its own reqwest client from strings and offers no way to keep reqwest
    /// from reading the environment other than configuring a proxy, so: when the registry is
    /// reached directly, its host is added to the exclusion list (and when no proxy is configured
    /// at all, a placeholder proxy excludes everything, so `ALL_PROXY` is not used either); when
    /// it goes through a proxy, hosts it redirects to (blob storage) are excluded by the
    /// `NO_PROXY` entries reqwest can express (those without a port) plus loopback.
    pub fn oci_client_settings(&self, scheme: &str, registry: &str) -> OciClientProxy {
        if self.http.is_none() && self.https.is_none() {
            let placeholder = Some("http://127.0.0.1:9".to_string());
            return (
                placeholder.clone(),
                placeholder,
                Some(EXCLUDE_EVERYTHING.into()),
            );
        }
        let mut exclude: Vec<String> = vec!["localhost".into(), "127.0.0.0/8".into(), "::1".into()];
        for entry in self.no_proxy.split(',').map(str::trim) {
            if entry == "*" {
                exclude.push(EXCLUDE_EVERYTHING.into());
            } else if entry.parse::<std::net::IpAddr>().is_ok() || entry.contains('/') {
                exclude.push(entry.to_string());
            } else if !entry.is_empty() && !entry.contains(':') && !entry.contains(']') {
                exclude.push(entry.trim_start_matches('*').to_string());
            }
        }
        if self.proxy_for_registry(scheme, registry).is_none() {
            let host = Url::parse(&format!("{scheme}://{registry}/"))
                .ok()
                .and_then(|u| u.host_str().map(str::to_string))
                .unwrap_or_else(|| registry.to_string());
            exclude.push(
                host.trim_start_matches('[')
                    .trim_end_matches(']')
                    .to_string(),
            );
        }
        (
            self.http.as_ref().map(|p| p.url.clone()),
            self.https.as_ref().map(|p| p.url.clone()),
            Some(exclude.join(",")),
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn env(vars: &[(&str, &str)]) -> ProxyEnv {
        let vars: Vec<(String, String)> = vars
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        ProxyEnv::from_lookup(&move |name| {
            vars.iter().find(|(k, _)| k == name).map(|(_, v)| v.clone())
        })
    }

    fn proxied(e: &ProxyEnv, url: &str) -> Option<String> {
        e.proxy_for(&Url::parse(url).unwrap())
            .map(|p| p.url.clone())
    }

    /// Cases from golang.org/x/net/http/httpproxy's proxy_test.go (`useProxy`).
    #[test]
    fn no_proxy_entries_follow_go() {
        let e = env(&[
            ("HTTPS_PROXY", "proxy.corp:3128"),
            ("HTTP_PROXY", "http://plain.corp:8080"),
            (
                "NO_PROXY",
                "foobar.com, .barbaz.net, *.qux.org, 10.0.0.0/8, 192.168.1.5:5000, registry.example:5000, [2001:db8::1]:443",
            ),
        ]);
        let p = Some("http://proxy.corp:3128".to_string());
        let h = Some("http://plain.corp:8080".to_string());
        // host: itself and its subdomains; not a longer name.
        assert_eq!(proxied(&e, "https://foobar.com/v2/"), None);
        assert_eq!(proxied(&e, "https://www.foobar.com/v2/"), None);
        assert_eq!(proxied(&e, "https://xfoobar.com/v2/"), p);
        // .domain and *.domain: subdomains only.
        assert_eq!(proxied(&e, "https://barbaz.net/v2/"), p);
        assert_eq!(proxied(&e, "https://www.barbaz.net/v2/"), None);
        assert_eq!(proxied(&e, "https://qux.org/v2/"), p);
        assert_eq!(proxied(&e, "https://a.qux.org/v2/"), None);
        // CIDR.
        assert_eq!(proxied(&e, "https://10.1.2.3:5000/v2/"), None);
        assert_eq!(proxied(&e, "https://11.1.2.3/v2/"), p);
        // host:port and ip:port: only that port (443/80 when the URL has none).
        assert_eq!(proxied(&e, "http://192.168.1.5:5000/v2/"), None);
        assert_eq!(proxied(&e, "http://192.168.1.5:5001/v2/"), h);
        assert_eq!(proxied(&e, "https://registry.example:5000/v2/"), None);
        assert_eq!(proxied(&e, "https://registry.example/v2/"), p);
        assert_eq!(proxied(&e, "https://[2001:db8::1]/v2/"), None);
        // The scheme picks the variable.
        assert_eq!(proxied(&e, "http://elsewhere.example/v2/"), h);
        // Loopback and localhost never use a proxy.
        assert_eq!(proxied(&e, "https://127.0.0.1:5000/v2/"), None);
        assert_eq!(proxied(&e, "https://[::1]:5000/v2/"), None);
        assert_eq!(proxied(&e, "https://localhost:5000/v2/"), None);
    }

    #[test]
    fn star_and_lower_case_and_unset() {
        let e = env(&[("https_proxy", "http://p:1"), ("no_proxy", "*")]);
        assert_eq!(proxied(&e, "https://registry.example/v2/"), None);
        let e = env(&[
            ("HTTPS_PROXY", "http://P:1"),
            ("NO_PROXY", "Registry.Example"),
        ]);
        assert_eq!(proxied(&e, "https://registry.example/v2/"), None);
        assert_eq!(
            e.proxy_for_registry("https", "other.example")
                .unwrap()
                .to_string(),
            "proxy http://p:1 (from HTTPS_PROXY)"
        );
        let e = env(&[("HTTP_PROXY", "http://p:1"), ("HTTPS_PROXY", "")]);
        assert_eq!(proxied(&e, "https://registry.example/v2/"), None);
        let e = env(&[("ALL_PROXY", "http://p:1")]);
        assert_eq!(proxied(&e, "https://registry.example/v2/"), None);
    }

    #[test]
    fn messages_hide_proxy_credentials() {
        let p = Proxy {
            url: "http://user:secret@proxy.corp:3128".into(),
            variable: "HTTPS_PROXY",
        };
        assert_eq!(
            p.to_string(),
            "proxy http://proxy.corp:3128 (from HTTPS_PROXY)"
        );
        assert!(p.has_credentials());
        let encoded = Proxy {
            url: "http://us%40r:p%3Ass@127.0.0.1:3128".into(),
            variable: "HTTP_PROXY",
        };
        assert_eq!(
            encoded.redact("invalid URL: 'http://us%40r:p%3Ass@127.0.0.1:3128'"),
            "invalid URL: 'http://127.0.0.1:3128'"
        );
        assert!(
            !Proxy {
                url: "http://127.0.0.1:3128".into(),
                variable: "HTTP_PROXY"
            }
            .has_credentials()
        );
    }

    #[test]
    fn oci_client_settings_exclude_a_direct_registry() {
        let e = env(&[
            ("HTTPS_PROXY", "http://p:1"),
            ("NO_PROXY", "registry.example:5000,.corp,*.lan,10.0.0.0/8"),
        ]);
        let (_, https, no) = e.oci_client_settings("https", "registry.example:5000");
        assert_eq!(https.as_deref(), Some("http://p:1"));
        let no = no.unwrap();
        assert!(no.ends_with(",registry.example"), "{no}");
        assert!(no.contains(",.corp,.lan,10.0.0.0/8"), "{no}");
        let (_, _, no) = e.oci_client_settings("https", "registry.example:6000");
        assert!(!no.unwrap().contains("registry.example"));
        let (h, s, no) = ProxyEnv::default().oci_client_settings("https", "r.example");
        assert!(h.is_some() && s.is_some());
        assert_eq!(no.as_deref(), Some(EXCLUDE_EVERYTHING));
    }
}
