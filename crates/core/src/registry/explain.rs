//! One-line explanations of a registry's error answers, instead of its raw body, and of the HTTP
//! client's failures, instead of its nested error chain.
//!
//! The distribution-spec error envelope is `{"errors":[{"code","message","detail"}]}`
//! (distribution-spec v1.1 "Error Codes"). For a storage failure, distribution (`docker-registry`,
//! Harbor, GitLab) answers `500` with code `UNKNOWN` and a `detail` holding the storage driver's
//! error, e.g. `{"DriverName":"filesystem","Enclosed":{"Op":"mkdir","Path":"/var/lib/registry/docker","Err":30}}`
//! (distribution `registry/storage/driver/base`: `storagedriver.Error{DriverName, Enclosed}`,
//! with Go's `*fs.PathError` enclosed, whose `Err` is the errno: 30 is `EROFS`).

use serde_json::Value;

use super::ErrorKind;

/// Longest raw body text kept in a message when the body cannot be explained.
const MAX_RAW: usize = 160;

/// errno values (Linux) a storage driver reports, with what they mean for the registry's operator.
fn errno_meaning(errno: i64) -> Option<(&'static str, &'static str)> {
    Some(match errno {
        30 => (
            "read-only file system",
            "the registry's storage is mounted read-only",
        ),
        28 => ("no space left on device", "the registry's disk is full"),
        122 => (
            "disk quota exceeded",
            "the registry's storage quota is used up",
        ),
        13 => (
            "permission denied",
            "the registry may not write to its storage directory",
        ),
        1 => (
            "operation not permitted",
            "the registry may not write to its storage directory",
        ),
        5 => ("input/output error", "the registry's disk failed"),
        _ => return None,
    })
}

/// `{"Op":"mkdir","Path":"/x","Err":30}` → `mkdir /x: read-only file system` and the hint.
fn path_error(v: &Value) -> Option<(String, Option<&'static str>)> {
    let op = v.get("Op")?.as_str()?;
    let path = v.get("Path").and_then(Value::as_str).unwrap_or("");
    let err = v.get("Err")?;
    let (what, hint) = match err.as_i64().and_then(errno_meaning) {
        Some((what, hint)) => (what.to_string(), Some(hint)),
        None => (compact(err), None),
    };
    Some((format!("{op} {path}: {what}"), hint))
}

fn compact(v: &Value) -> String {
    match v {
        Value::String(s) => s.clone(),
        other => other.to_string(),
    }
}

fn truncate(s: &str, max: usize) -> String {
    let s = s.trim();
    match s.char_indices().nth(max) {
        Some((i, _)) => format!("{}…", &s[..i]),
        None => s.to_string(),
    }
}

/// One line for an error status `code` with `body`, and a classification when the body says more
/// than the status (a storage failure that retrying cannot cure is [`ErrorKind::Other`], although
/// it came as a 5xx).
pub(crate) fn status(code: u16, body: &str) -> (String, Option<ErrorKind>) {
    let body = body.trim();
    if code == 507 {
        return (storage_full(body), Some(ErrorKind::Other));
    }
    if code == 407 {
        // RFC 9110 §15.5.8: the proxy between us and the registry wants credentials.
        return (
            "the proxy answered 407 Proxy Authentication Required: give it a user and password in the proxy URL (percent-encoded)".to_string(),
            Some(ErrorKind::Other),
        );
    }
    if code == 405 {
        // Only writes reach a registry with methods it refuses: distribution in read-only
        // maintenance mode (`storage.maintenance.readonly.enabled`, as Atmosphere runs its
        // in-cloud registry) answers every PUT, POST, PATCH and DELETE so, with `Allow: GET,
        // HEAD` and the body `Method not allowed`; so do pull-through caches.
        let said = body
            .lines()
            .next()
            .map(|l| truncate(l, MAX_RAW))
            .unwrap_or_default();
        return (
            format!(
                "HTTP 405{}: the registry refuses writes here (a read-only registry, such as distribution in read-only maintenance mode, which Atmosphere's in-cloud registry runs, or a pull-through cache); push to a registry you can write to, retrying does not help",
                if said.is_empty() {
                    String::new()
                } else {
                    format!(" ({said})")
                }
            ),
            Some(ErrorKind::Other),
        );
    }
    if body.is_empty() {
        return (format!("HTTP {code}"), None);
    }
    let Ok(v) = serde_json::from_str::<Value>(body) else {
        let first = body.lines().next().unwrap_or(body);
        return (format!("HTTP {code}: {}", truncate(first, MAX_RAW)), None);
    };
    let Some(errors) = v.get("errors").and_then(Value::as_array) else {
        return (format!("HTTP {code}: {}", truncate(body, MAX_RAW)), None);
    };
    let mut kind = None;
    let parts: Vec<String> = errors
        .iter()
        .map(|e| {
            let c = e.get("code").and_then(Value::as_str).unwrap_or("UNKNOWN");
            let m = e.get("message").and_then(Value::as_str).unwrap_or("");
            let detail = e.get("detail");
            let driver = detail
                .and_then(|d| d.get("DriverName"))
                .and_then(Value::as_str);
            match (driver, detail.and_then(|d| d.get("Enclosed"))) {
                (Some(driver), Some(enclosed)) => match path_error(enclosed) {
                    Some((what, Some(hint))) => {
                        kind = Some(ErrorKind::Other);
                        format!(
                            "the registry cannot write to its storage ({driver} driver: {what}): {hint}; its operator must fix that, retrying does not help"
                        )
                    }
                    Some((what, None)) => {
                        format!("the registry's storage failed ({driver} driver: {what})")
                    }
                    None => format!(
                        "the registry's storage failed ({driver} driver: {})",
                        truncate(&compact(enclosed), MAX_RAW)
                    ),
                },
                _ => match detail.filter(|d| !d.is_null()) {
                    Some(d) if m.is_empty() => format!("{c}: {}", truncate(&compact(d), MAX_RAW)),
                    Some(d) => format!("{c}: {m} ({})", truncate(&compact(d), MAX_RAW)),
                    None => format!("{c}: {m}"),
                },
            }
        })
        .collect();
    (format!("HTTP {code}: {}", parts.join("; ")), kind)
}

/// HTTP 507 Insufficient Storage (RFC 4918 §11.5): the registry cannot store what it was sent.
/// Not transient: retrying sends the same bytes to the same full disk or quota. The body's own
/// words follow when it has any.
fn storage_full(body: &str) -> String {
    let said = serde_json::from_str::<Value>(body)
        .ok()
        .and_then(|v| {
            let e = v.get("errors")?.as_array()?.first()?.clone();
            let m = e.get("message").and_then(Value::as_str).unwrap_or("");
            let c = e.get("code").and_then(Value::as_str).unwrap_or("");
            Some(format!("{c}: {m}").trim_matches([':', ' ']).to_string())
        })
        .unwrap_or_else(|| truncate(body.lines().next().unwrap_or(""), MAX_RAW));
    let said = if said.is_empty() {
        String::new()
    } else {
        format!(" ({said})")
    };
    format!(
        "storage full (507){said}: the registry has no room for this push; its operator must free or add storage or raise the quota, retrying does not help"
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::base::client_error::without_client_chain;

    #[test]
    fn a_read_only_storage_is_said_in_one_line() {
        // docker-registry 2.8 with a read-only root directory, answering a blob upload POST.
        let body = r#"{"errors":[{"code":"UNKNOWN","message":"unknown error","detail":{"DriverName":"filesystem","Enclosed":{"Op":"mkdir","Path":"/var/lib/registry/docker/registry/v2/repositories/occm/openstack-cloud-controller-manager/_uploads/0b5d1f6e-2f2a-4a8e-9d61-6a9f5f0f5c1e","Err":30}}}]}"#;
        let (m, kind) = status(500, body);
        assert_eq!(
            m,
            "HTTP 500: the registry cannot write to its storage (filesystem driver: mkdir /var/lib/registry/docker/registry/v2/repositories/occm/openstack-cloud-controller-manager/_uploads/0b5d1f6e-2f2a-4a8e-9d61-6a9f5f0f5c1e: read-only file system): the registry's storage is mounted read-only; its operator must fix that, retrying does not help"
        );
        assert_eq!(kind, Some(ErrorKind::Other));
        assert!(!m.contains('{'));
    }

    #[test]
    fn a_read_only_registry_is_named_and_not_transient() {
        let (m, kind) = status(405, "Method not allowed\n");
        assert!(
            m.starts_with("HTTP 405 (Method not allowed): the registry refuses writes here (a read-only registry"),
            "{m}"
        );
        assert_eq!(kind, Some(ErrorKind::Other));
        assert!(
            status(405, "")
                .0
                .starts_with("HTTP 405: the registry refuses writes")
        );
    }

    #[test]
    fn storage_full_is_named_and_not_transient() {
        let (m, kind) = status(507, "");
        assert!(m.starts_with("storage full (507): "), "{m}");
        assert_eq!(kind, Some(ErrorKind::Other));
        let (m, _) = status(
            507,
            r#"{"errors":[{"code":"DENIED","message":"quota exceeded","detail":null}]}"#,
        );
        assert!(
            m.starts_with("storage full (507) (DENIED: quota exceeded): "),
            "{m}"
        );
    }

    #[test]
    fn other_bodies() {
        assert_eq!(status(502, ""), ("HTTP 502".to_string(), None));
        let (m, kind) = status(503, "<html>\n<body>Service Unavailable</body>");
        assert_eq!((m.as_str(), kind), ("HTTP 503: <html>", None));
        let (m, _) = status(500, &"x".repeat(400));
        assert!(m.chars().count() < 200, "{m}");
        let (m, kind) = status(
            500,
            r#"{"errors":[{"code":"UNKNOWN","message":"unknown error","detail":{"DriverName":"s3aws","Enclosed":"SlowDown: please reduce your request rate"}}]}"#,
        );
        assert_eq!(
            m,
            "HTTP 500: the registry's storage failed (s3aws driver: SlowDown: please reduce your request rate)"
        );
        assert_eq!(kind, None);
        let (m, _) = status(
            500,
            r#"{"errors":[{"code":"UNKNOWN","message":"unknown error","detail":null}]}"#,
        );
        assert_eq!(m, "HTTP 500: UNKNOWN: unknown error");
    }

    #[test]
    fn the_http_clients_chain_is_left_out() {
        assert_eq!(
            without_client_chain(
                "unreachable: error sending request for url (http://127.0.0.1:5000/v2/occm/manifests/v1): client error (Connect): tcp connect error: Connection refused (os error 111)"
            ),
            "unreachable: connection refused"
        );
        assert_eq!(
            without_client_chain(
                "error sending request for url (https://reg.example/v2/): client error (Connect): invalid peer certificate: UnknownIssuer (trust its CA with --ca-file or [registry] ca_files)"
            ),
            "TLS: invalid peer certificate: UnknownIssuer (trust its CA with --ca-file or [registry] ca_files)"
        );
        assert_eq!(
            without_client_chain(
                "unreachable: error sending request for url (https://nosuch.example/v2/): client error (Connect): dns error: failed to lookup address information: Name or service not known"
            ),
            "unreachable: cannot resolve the host name: Name or service not known"
        );
        assert_eq!(
            without_client_chain(
                "cannot reach the proxy http://127.0.0.1:9 (from HTTP_PROXY): error sending request for url (http://r:1/v2/): client error (Connect): tcp connect error: Connection refused (os error 111) (NO_PROXY does not list r:1)"
            ),
            "cannot reach the proxy http://127.0.0.1:9 (from HTTP_PROXY): connection refused (NO_PROXY does not list r:1)"
        );
        for plain in [
            "HTTP 401 unauthorized (check the credentials for r:1 in your docker/podman auth file or --registry-config)",
            "MANIFEST_INVALID: manifest invalid",
            "error sending request for url (http://r:1/v2/)",
        ] {
            assert_eq!(without_client_chain(plain), plain);
        }
    }
}
