//! Registries as their users reported them, emulated by the [`super::FaultProxy`] in front of a
//! real docker-registry (distribution 2.8, which has no referrers API): a referrers API built
//! from the registry's own referrers tag-schema index, paged, and with Harbor's listing.

use std::io::{Read, Write};
use std::net::TcpStream;

/// How the emulated referrers API answers `GET /v2/<name>/referrers/<digest>`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ReferrersApi {
    /// Descriptors per page; more pages are linked with `Link: <…?page=N>; rel="next"`
    /// (google/go-containerregistry#2446, oras-project/oras-go#841). 0: one page.
    pub page_size: usize,
    /// As Harbor (goharbor/harbor#19867, #19690): every descriptor's `artifactType` is the
    /// config media type `application/vnd.oci.empty.v1+json`, served as `application/json`.
    pub harbor: bool,
}

/// Answers a referrers API request on `conn` from `upstream`'s tag-schema index of the subject.
pub fn serve_referrers(conn: &mut TcpStream, upstream: &str, path: &str, api: ReferrersApi) {
    let (route, query) = path.split_once('?').unwrap_or((path, ""));
    let Some((prefix, subject)) = route.split_once("/referrers/") else {
        return;
    };
    let page: usize = query
        .split('&')
        .find_map(|kv| kv.strip_prefix("page="))
        .and_then(|p| p.parse().ok())
        .unwrap_or(0);
    let tag = subject.replacen(':', "-", 1);
    let mut manifests = match get(upstream, &format!("{prefix}/manifests/{tag}")) {
        Some((200, body)) => {
            let index: serde_json::Value = serde_json::from_slice(&body).unwrap();
            index["manifests"].as_array().cloned().unwrap_or_default()
        }
        _ => Vec::new(),
    };
    if api.harbor {
        for m in &mut manifests {
            m["artifactType"] = "application/vnd.oci.empty.v1+json".into();
        }
    }
    let size = if api.page_size == 0 {
        manifests.len().max(1)
    } else {
        api.page_size
    };
    let total = manifests.len();
    let on_page: Vec<_> = manifests.into_iter().skip(page * size).take(size).collect();
    let link = if (page + 1) * size < total {
        format!("Link: <{route}?page={}>; rel=\"next\"\r\n", page + 1)
    } else {
        String::new()
    };
    let body = serde_json::json!({
        "schemaVersion": 2,
        "mediaType": "application/vnd.oci.image.index.v1+json",
        "manifests": on_page,
    })
    .to_string();
    let content_type = if api.harbor {
        "application/json"
    } else {
        "application/vnd.oci.image.index.v1+json"
    };
    let _ = write!(
        conn,
        "HTTP/1.1 200 OK\r\nContent-Type: {content_type}\r\n{link}Content-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    );
}

/// `GET path` on `upstream` accepting an OCI image index: the status and body.
fn get(upstream: &str, path: &str) -> Option<(u16, Vec<u8>)> {
    let mut up = TcpStream::connect(upstream).ok()?;
    write!(
        up,
        "GET {path} HTTP/1.1\r\nHost: {upstream}\r\nAccept: application/vnd.oci.image.index.v1+json\r\nConnection: close\r\n\r\n"
    )
    .ok()?;
    let mut answer = Vec::new();
    up.read_to_end(&mut answer).ok()?;
    let split = answer.windows(4).position(|w| w == b"\r\n\r\n")? + 4;
    let head = String::from_utf8_lossy(&answer[..split]);
    let status = head.split_whitespace().nth(1)?.parse().ok()?;
    Some((status, answer[split..].to_vec()))
}

/// `GET path` (a manifest's) on `upstream`, accepting every manifest media type: its bytes when
/// the registry has it.
pub fn get_manifest(upstream: &str, path: &str) -> Option<Vec<u8>> {
    let mut up = TcpStream::connect(upstream).ok()?;
    write!(
        up,
        "GET {path} HTTP/1.1\r\nHost: {upstream}\r\nAccept: {}\r\nConnection: close\r\n\r\n",
        super::MANIFEST_TYPES
    )
    .ok()?;
    let mut answer = Vec::new();
    up.read_to_end(&mut answer).ok()?;
    let text = String::from_utf8_lossy(&answer);
    let split = text.find("\r\n\r\n")? + 4;
    text.starts_with("HTTP/1.1 200")
        .then(|| answer[split..].to_vec())
}
