//! The exec/attach side of the upgrade exchange, as bytes: the GET
//! request we write (our `User-Agent`, the bearer token, the channel
//! subprotocols in ONE header) and the check of the subprotocol a 101
//! chose. The head itself is read by [`crate::http::response`], its
//! RFC 6455 part checked by [`crate::http::client::check_accept`], and an
//! error answer's whole body is kept (it is the Kubernetes `Status` the
//! caller needs) by [`crate::http::client::read_body`].
//!
//! Why not `tungstenite::client`: on a non-101 answer it keeps only the body
//! bytes that arrived with the head, so a Status split across TCP segments
//! would be lost; it also cannot connect to `[::1]` (docs/crates.md#tungstenite) and gives no
//! deadline for a silent server. This module is sans-IO; `connect` drives
//! it over a socket with a deadline, then hands the leftover bytes to
//! `WebSocket::from_partially_read`.

use crate::http::client::{check_accept, upgrade_request, UpgradeError};
use crate::http::response::Head;
use crate::kube::channel::{client_offer, Protocol};

/// Largest error body kept (a Status is a few hundred bytes; a proxy's HTML
/// page is cut here).
pub const MAX_BODY: usize = 1024 * 1024;

/// What goes into the upgrade request.
#[derive(Debug, Clone)]
pub struct UpgradeRequest<'a> {
    pub path_and_query: &'a str,
    /// `Host` header value.
    pub authority: &'a str,
    /// `Sec-WebSocket-Key` (base64 of 16 random bytes).
    pub key: &'a str,
    /// Offered subprotocols, preferred first, sent in ONE header.
    pub offer: &'a [Protocol],
    pub bearer: Option<&'a str>,
    /// Further headers (the connection's impersonation).
    pub extra: &'a [(String, String)],
}

/// The request bytes. The token is only ever written here, never logged.
pub fn encode_request(r: &UpgradeRequest<'_>) -> Vec<u8> {
    encode_upgrade(
        r.path_and_query,
        r.authority,
        r.key,
        &client_offer(r.offer),
        r.bearer,
        r.extra,
    )
}

/// The upgrade request bytes for any subprotocol offer (`offer`: the
/// `Sec-WebSocket-Protocol` value, entries comma-separated).
fn encode_upgrade(
    path_and_query: &str,
    authority: &str,
    key: &str,
    offer: &str,
    bearer: Option<&str>,
    extra: &[(String, String)],
) -> Vec<u8> {
    let agent = concat!("kubegate/", env!("CARGO_PKG_VERSION"));
    let auth = bearer.map(|t| format!("Bearer {t}"));
    let mut headers = vec![("User-Agent", agent)];
    if let Some(a) = &auth {
        headers.push(("Authorization", a.as_str()));
    }
    headers.extend(extra.iter().map(|(k, v)| (k.as_str(), v.as_str())));
    upgrade_request(path_and_query, authority, key, Some(offer), &headers)
}

/// Checks a 101 answer (RFC 6455 §4.1) and returns the subprotocol the
/// server chose, which must be exactly one we offered.
pub fn check_switch(head: &Head, key: &str, offer: &[Protocol]) -> Result<Protocol, UpgradeError> {
    check_accept(head, key)?;
    let chosen: Vec<&str> = head.values("sec-websocket-protocol").collect();
    let refuse = |m: String| Err(UpgradeError::Subprotocol(m));
    match chosen.as_slice() {
        [] => refuse(format!(
            "the server chose no subprotocol (offered {}); it does not speak the channel protocols",
            client_offer(offer)
        )),
        [one] => match Protocol::parse(one) {
            Some(p) if offer.contains(&p) => Ok(p),
            _ => refuse(format!(
                "the server chose a subprotocol we did not offer: {one:?}"
            )),
        },
        _ => refuse("the server sent several Sec-WebSocket-Protocol headers".into()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const KEY: &str = "dGhlIHNhbXBsZSBub25jZQ==";
    const ACCEPT: &str = "s3pPLMBiTxaQ9kYGzzhZRbK+xOo=";

    #[test]
    fn request_bytes() {
        let r = UpgradeRequest {
            path_and_query: "/api/v1/namespaces/d/pods/p/exec?command=ls&stdout=true",
            authority: "[::1]:6443",
            key: KEY,
            offer: &[Protocol::V5, Protocol::V4],
            bearer: Some("tok"),
            extra: &[],
        };
        let s = String::from_utf8(encode_request(&r)).unwrap();
        assert!(s.starts_with(
            "GET /api/v1/namespaces/d/pods/p/exec?command=ls&stdout=true HTTP/1.1\r\nHost: [::1]:6443\r\n"
        ));
        assert!(s.contains("\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"));
        assert!(s.contains(&format!("\r\nSec-WebSocket-Key: {KEY}\r\n")));
        assert!(s.contains("\r\nSec-WebSocket-Version: 13\r\n"));
        // ONE header, both offers.
        assert_eq!(s.matches("Sec-WebSocket-Protocol").count(), 1);
        assert!(s.contains("\r\nSec-WebSocket-Protocol: v5.channel.k8s.io,v4.channel.k8s.io\r\n"));
        assert!(s.contains("\r\nAuthorization: Bearer tok\r\n"));
        assert!(s.ends_with("\r\n\r\n"));
        let s = String::from_utf8(encode_request(&UpgradeRequest { bearer: None, ..r })).unwrap();
        let imp = [
            ("Impersonate-User".to_string(), "oidc:ann".to_string()),
            ("Impersonate-Group".to_string(), "dev".to_string()),
        ];
        let with = String::from_utf8(encode_request(&UpgradeRequest { extra: &imp, ..r })).unwrap();
        assert!(with.contains("\r\nImpersonate-User: oidc:ann\r\nImpersonate-Group: dev\r\n"));
        assert!(!s.contains("Authorization"));
    }

    fn switch(extra: &str) -> Vec<u8> {
        format!("HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\nSec-WebSocket-Accept: {ACCEPT}\r\n{extra}\r\n").into_bytes()
    }

    fn head(bytes: &[u8]) -> Head {
        crate::http::response::parse_head(bytes, &Default::default())
            .unwrap()
            .unwrap()
            .0
    }

    #[test]
    fn switch_checks() {
        let both = [Protocol::V5, Protocol::V4];
        let ok = |p: &str| check_switch(&head(&switch(p)), KEY, &both);
        assert_eq!(
            ok("Sec-WebSocket-Protocol: v5.channel.k8s.io\r\n"),
            Ok(Protocol::V5)
        );
        assert_eq!(
            ok("sec-websocket-protocol:  v4.channel.k8s.io \r\n"),
            Ok(Protocol::V4)
        );
        assert!(ok("")
            .unwrap_err()
            .to_string()
            .contains("chose no subprotocol"));
        assert!(ok("Sec-WebSocket-Protocol: v3.channel.k8s.io\r\n").is_err());
        assert!(ok("Sec-WebSocket-Protocol: v5.channel.k8s.io\r\nSec-WebSocket-Protocol: v4.channel.k8s.io\r\n").is_err());
        // v4 chosen though we offered only v5.
        assert!(check_switch(
            &head(&switch("Sec-WebSocket-Protocol: v4.channel.k8s.io\r\n")),
            KEY,
            &[Protocol::V5]
        )
        .is_err());
        // Wrong accept key, missing upgrade headers, not a 101.
        let h = head(&switch("Sec-WebSocket-Protocol: v5.channel.k8s.io\r\n"));
        assert!(check_switch(&h, "AAAAAAAAAAAAAAAAAAAAAA==", &both).is_err());
        let no_upgrade = head(format!("HTTP/1.1 101 OK\r\nConnection: Upgrade\r\nSec-WebSocket-Accept: {ACCEPT}\r\nSec-WebSocket-Protocol: v5.channel.k8s.io\r\n\r\n").as_bytes());
        assert!(check_switch(&no_upgrade, KEY, &both).is_err());
        let keepalive = head(format!("HTTP/1.1 101 OK\r\nUpgrade: websocket\r\nConnection: keep-alive\r\nSec-WebSocket-Accept: {ACCEPT}\r\nSec-WebSocket-Protocol: v5.channel.k8s.io\r\n\r\n").as_bytes());
        assert!(check_switch(&keepalive, KEY, &both).is_err());
        assert!(check_switch(&head(b"HTTP/1.1 200 OK\r\n\r\n"), KEY, &both).is_err());
    }
}
