//! An HTTP client's error chain said plainly: what the registry client and the Kubernetes client
//! both report.

/// A message built from an HTTP client error chain (`a: b: c`), with the client's own layers
/// left out and the cause said plainly: `unreachable: error sending request for url (http://…):
/// client error (Connect): tcp connect error: Connection refused (os error 111)` →
/// `unreachable: connection refused`; `dns error` → `cannot resolve the host name`; a rustls
/// `invalid peer certificate` → `TLS: invalid peer certificate`. The occm-forge parts (what was
/// done, hints in parentheses) stay; a message without such a chain is returned as it is.
pub fn without_client_chain(message: &str) -> String {
    let parts: Vec<&str> = message.split(": ").collect();
    let kept: Vec<String> = parts
        .iter()
        .enumerate()
        .filter(|(i, p)| !is_client_layer(p) || *i + 1 == parts.len())
        .map(|(_, p)| match *p {
            "dns error" => "cannot resolve the host name".to_string(),
            p if p.starts_with("invalid peer certificate") => format!("TLS: {p}"),
            p => os_error(p),
        })
        .collect();
    kept.join(": ")
}

/// Whether a part of an error chain is one of the HTTP client's (reqwest, hyper-util) layers,
/// which say how a request failed, not why: `error sending request for url (…)`,
/// `client error (Connect)`, `tcp connect error`, `error trying to connect`.
fn is_client_layer(part: &str) -> bool {
    part.starts_with("error sending request")
        || part.starts_with("client error (")
        || part == "tcp connect error"
        || part == "error trying to connect"
        || part == "failed to lookup address information"
}

/// `Connection refused (os error 111)` → `connection refused`; other text as it is.
fn os_error(part: &str) -> String {
    let Some(at) = part.find(" (os error ") else {
        return part.to_string();
    };
    let end = part[at..].find(')').map_or(part.len(), |e| at + e + 1);
    let text = format!("{}{}", &part[..at], &part[end..]);
    let mut chars = text.chars();
    match chars.next() {
        Some(c) => c.to_lowercase().chain(chars).collect(),
        None => text,
    }
}
