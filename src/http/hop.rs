//! Hop-by-hop header rules (RFC 9110 section 7.6.1): which headers of a
//! message belong to one connection and are not forwarded by a proxy.
//! Every proxy of the crate filters through it: the daemon's port proxy
//! (both ways) and the sim's pod proxy.

/// Hop-by-hop headers (RFC 9110 section 7.6.1, plus the old
/// `Proxy-Connection` and `Keep-Alive`), and the framing headers: the
/// proxies that use [`end_to_end_headers`] re-frame the body both ways.
const HOP_BY_HOP: &[&str] = &[
    "connection",
    "proxy-connection",
    "keep-alive",
    "proxy-authenticate",
    "proxy-authorization",
    "te",
    "trailer",
    "transfer-encoding",
    "upgrade",
    "content-length",
    "host",
];

/// `headers` without hop-by-hop ones (those above and those the
/// `Connection` header names) and without `also`.
pub fn end_to_end_headers(headers: &[(String, String)], also: &[&str]) -> Vec<(String, String)> {
    let named: Vec<String> = headers
        .iter()
        .filter(|(k, _)| k.eq_ignore_ascii_case("connection"))
        .flat_map(|(_, v)| v.split(','))
        .map(|t| t.trim().to_ascii_lowercase())
        .filter(|t| !t.is_empty())
        .collect();
    headers
        .iter()
        .filter(|(k, _)| {
            let k = k.to_ascii_lowercase();
            !HOP_BY_HOP.contains(&k.as_str())
                && !also.iter().any(|a| a.eq_ignore_ascii_case(&k))
                && !named.contains(&k)
        })
        .cloned()
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hop_by_hop_named_and_asked_for_headers_are_dropped() {
        let h = |k: &str, v: &str| (k.to_string(), v.to_string());
        let headers = vec![
            h("Host", "kubegate.example"),
            h("Connection", "keep-alive, X-Secret"),
            h("X-Secret", "hop"),
            h("Keep-Alive", "timeout=5"),
            h("Transfer-Encoding", "chunked"),
            h("Content-Length", "5"),
            h("Upgrade", "websocket"),
            h("Proxy-Authorization", "Basic x"),
            h("TE", "trailers"),
            h("Authorization", "Bearer t"),
            h("Content-Type", "text/plain"),
            h("X-Foo", "bar"),
        ];
        assert_eq!(
            end_to_end_headers(&headers, &["authorization"]),
            vec![h("Content-Type", "text/plain"), h("X-Foo", "bar")]
        );
        assert_eq!(end_to_end_headers(&headers, &[]).len(), 3);
    }
}
