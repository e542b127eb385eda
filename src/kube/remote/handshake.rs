//! The HTTP/1.1 upgrade exchange that opens an exec/attach WebSocket, as
//! bytes: the GET request we write and an incremental reader for the
//! answer (a 101 we check per RFC 6455, or an error response whose whole
//! body we keep, because it is the Kubernetes `Status` the caller needs).
//!
//! Why not `tungstenite::client`: on a non-101 answer it keeps only the body
//! bytes that arrived with the head, so a Status split across TCP segments
//! would be lost; it also cannot connect to `[::1]` (crates.md) and gives no
//! deadline for a silent server. This module is sans-IO; `connect` drives
//! it over a socket with a deadline, then hands the leftover bytes to
//! `WebSocket::from_partially_read`.

use crate::kube::channel::{client_offer, Protocol};
use tungstenite::handshake::derive_accept_key;

/// Largest response head accepted.
pub const MAX_HEAD: usize = 64 * 1024;
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
}

/// The request bytes. The token is only ever written here, never logged.
pub fn encode_request(r: &UpgradeRequest<'_>) -> Vec<u8> {
    encode_upgrade(
        r.path_and_query,
        r.authority,
        r.key,
        &client_offer(r.offer),
        r.bearer,
    )
}

/// The upgrade request bytes for any subprotocol offer (`offer`: the
/// `Sec-WebSocket-Protocol` value, entries comma-separated). Shared with the
/// command-line client (`kubegate.exec.v1`).
pub fn encode_upgrade(
    path_and_query: &str,
    authority: &str,
    key: &str,
    offer: &str,
    bearer: Option<&str>,
) -> Vec<u8> {
    let mut s = format!(
        "GET {path_and_query} HTTP/1.1\r\nHost: {authority}\r\nUpgrade: websocket\r\nConnection: Upgrade\r\nSec-WebSocket-Key: {key}\r\nSec-WebSocket-Version: 13\r\nSec-WebSocket-Protocol: {offer}\r\nUser-Agent: kubegate/{}\r\n",
        env!("CARGO_PKG_VERSION"),
    );
    if let Some(t) = bearer {
        s.push_str("Authorization: Bearer ");
        s.push_str(t);
        s.push_str("\r\n");
    }
    s.push_str("\r\n");
    s.into_bytes()
}

/// A parsed response head.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Head {
    pub code: u16,
    pub headers: Vec<(String, String)>,
}

impl Head {
    /// The first value of a header (name case-insensitive).
    pub fn header<'a>(&'a self, name: &'a str) -> Option<&'a str> {
        self.values(name).next()
    }

    /// Every value of a header, in order.
    pub fn values<'a>(&'a self, name: &'a str) -> impl Iterator<Item = &'a str> + 'a {
        self.headers
            .iter()
            .filter(move |(k, _)| k.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
    }

    fn has_token(&self, name: &str, token: &str) -> bool {
        self.values(name)
            .flat_map(|v| v.split(','))
            .any(|t| t.trim().eq_ignore_ascii_case(token))
    }
}

/// Parses the head from the bytes read so far: `Ok(None)` means read more;
/// `Ok(Some((head, n)))` means the head took the first `n` bytes (the rest
/// belongs to the WebSocket or the body).
pub fn parse_head(buf: &[u8]) -> Result<Option<(Head, usize)>, String> {
    let mut headers = [httparse::EMPTY_HEADER; 64];
    let mut resp = httparse::Response::new(&mut headers);
    match resp.parse(buf) {
        Ok(httparse::Status::Complete(n)) => {
            let code = resp.code.ok_or("response without a status code")?;
            let headers = resp
                .headers
                .iter()
                .map(|h| {
                    (
                        h.name.to_string(),
                        String::from_utf8_lossy(h.value).trim().to_string(),
                    )
                })
                .collect();
            Ok(Some((Head { code, headers }, n)))
        }
        Ok(httparse::Status::Partial) if buf.len() >= MAX_HEAD => {
            Err(format!("response head larger than {MAX_HEAD} bytes"))
        }
        Ok(httparse::Status::Partial) => Ok(None),
        Err(e) => Err(format!("malformed HTTP response: {e}")),
    }
}

/// Checks a 101 answer (RFC 6455 §4.1) and returns the subprotocol the
/// server chose, which must be exactly one we offered.
pub fn check_switch(head: &Head, key: &str, offer: &[Protocol]) -> Result<Protocol, String> {
    check_accept(head, key)?;
    let chosen: Vec<&str> = head.values("sec-websocket-protocol").collect();
    match chosen.as_slice() {
        [] => Err(format!(
            "the server chose no subprotocol (offered {}); it does not speak the channel protocols",
            client_offer(offer)
        )),
        [one] => match Protocol::parse(one) {
            Some(p) if offer.contains(&p) => Ok(p),
            _ => Err(format!(
                "the server chose a subprotocol we did not offer: {one:?}"
            )),
        },
        _ => Err("the server sent several Sec-WebSocket-Protocol headers".into()),
    }
}

/// Checks the protocol-independent part of a 101 answer (RFC 6455 §4.1):
/// the status, `Upgrade`, `Connection` and `Sec-WebSocket-Accept`. The
/// caller checks the chosen subprotocol.
pub fn check_accept(head: &Head, key: &str) -> Result<(), String> {
    if head.code != 101 {
        return Err(format!(
            "expected 101 Switching Protocols, got {}",
            head.code
        ));
    }
    if !head.has_token("upgrade", "websocket") {
        return Err("101 without `Upgrade: websocket`".into());
    }
    if !head.has_token("connection", "upgrade") {
        return Err("101 without `Connection: Upgrade`".into());
    }
    let want = derive_accept_key(key.as_bytes());
    match head.header("sec-websocket-accept") {
        Some(a) if a == want => Ok(()),
        Some(a) => Err(format!("wrong Sec-WebSocket-Accept {a:?}")),
        None => Err("101 without Sec-WebSocket-Accept".into()),
    }
}

/// How an error response's body ends.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Framing {
    Length(usize),
    Chunked,
    UntilClose,
}

/// The body framing of a non-101 answer (RFC 9112 §6.3).
pub fn framing(head: &Head) -> Framing {
    if head.code == 204 || head.code == 304 || (100..200).contains(&head.code) {
        return Framing::Length(0);
    }
    if head.has_token("transfer-encoding", "chunked") {
        return Framing::Chunked;
    }
    match head
        .header("content-length")
        .and_then(|v| v.parse::<usize>().ok())
    {
        Some(n) => Framing::Length(n),
        None => Framing::UntilClose,
    }
}

/// Collects an error body as it arrives.
#[derive(Debug)]
pub struct BodyReader {
    framing: Framing,
    raw: Vec<u8>,
}

impl BodyReader {
    pub fn new(framing: Framing, already: &[u8]) -> BodyReader {
        let mut r = BodyReader {
            framing,
            raw: Vec::new(),
        };
        r.push(already);
        r
    }

    /// Appends raw bytes from the socket (beyond [`MAX_BODY`] plus framing
    /// slack they are ignored: the body is then cut).
    pub fn push(&mut self, bytes: &[u8]) {
        let room = (MAX_BODY + 4096).saturating_sub(self.raw.len());
        self.raw.extend_from_slice(&bytes[..bytes.len().min(room)]);
    }

    /// The body, once complete; at `eof` (or when the cap is hit) whatever
    /// arrived, so a cut body still yields what can be shown.
    pub fn body(&self, eof: bool) -> Option<Vec<u8>> {
        let full = self.raw.len() >= MAX_BODY;
        let mut body = match self.framing {
            Framing::Length(n) if self.raw.len() >= n => self.raw[..n].to_vec(),
            Framing::Length(_) | Framing::UntilClose if eof || full => self.raw.clone(),
            Framing::Length(_) | Framing::UntilClose => return None,
            Framing::Chunked => {
                let (body, done) = decode_chunked(&self.raw);
                if !(done || eof || full) {
                    return None;
                }
                body
            }
        };
        body.truncate(MAX_BODY);
        Some(body)
    }
}

/// Decodes a chunked body from its start: the data so far and whether the
/// last chunk was seen. Malformed framing ends the body where it broke.
pub fn decode_chunked(raw: &[u8]) -> (Vec<u8>, bool) {
    let mut out = Vec::new();
    let mut at = 0;
    loop {
        let Some(eol) = raw[at..].windows(2).position(|w| w == b"\r\n") else {
            return (out, false);
        };
        let line = String::from_utf8_lossy(&raw[at..at + eol]);
        let size_hex = line.split(';').next().unwrap_or("").trim();
        let Ok(size) = usize::from_str_radix(size_hex, 16) else {
            return (out, true);
        };
        at += eol + 2;
        if size == 0 {
            return (out, true);
        }
        let end = at.saturating_add(size);
        if raw.len() < end {
            out.extend_from_slice(&raw[at..]);
            return (out, false);
        }
        out.extend_from_slice(&raw[at..end]);
        at = end;
        match raw.get(at..at + 2) {
            Some(b"\r\n") => at += 2,
            Some(_) => return (out, true),
            None => return (out, false),
        }
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
        assert!(!s.contains("Authorization"));
    }

    fn switch(extra: &str) -> Vec<u8> {
        format!("HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\nSec-WebSocket-Accept: {ACCEPT}\r\n{extra}\r\n").into_bytes()
    }

    #[test]
    fn heads_arrive_in_any_pieces() {
        let mut bytes = switch("Sec-WebSocket-Protocol: v5.channel.k8s.io\r\n");
        let head_len = bytes.len();
        bytes.extend_from_slice(&[0x82, 0x01, 0x01]);
        for cut in 0..head_len {
            assert_eq!(parse_head(&bytes[..cut]), Ok(None), "cut {cut}");
        }
        let (head, n) = parse_head(&bytes).unwrap().unwrap();
        assert_eq!(n, head_len);
        assert_eq!(head.code, 101);
        assert_eq!(head.header("UPGRADE"), Some("websocket"));
        assert!(parse_head(b"garbage\r\n\r\n").is_err());
        assert!(parse_head(&vec![b'a'; MAX_HEAD]).is_err());
    }

    fn head(bytes: &[u8]) -> Head {
        parse_head(bytes).unwrap().unwrap().0
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
        assert!(ok("").unwrap_err().contains("chose no subprotocol"));
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

    #[test]
    fn error_bodies() {
        let status = br#"{"kind":"Status","apiVersion":"v1","metadata":{},"status":"Failure","message":"pods \"x\" not found","reason":"NotFound","code":404}"#;
        let mut resp = format!(
            "HTTP/1.1 404 Not Found\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\r\n",
            status.len()
        )
        .into_bytes();
        resp.extend_from_slice(status);
        // Every split between head+first bytes and the rest.
        let (h, n) = parse_head(&resp).unwrap().unwrap();
        assert_eq!(framing(&h), Framing::Length(status.len()));
        for cut in n..resp.len() {
            let mut r = BodyReader::new(framing(&h), &resp[n..cut]);
            assert_eq!(r.body(false), None, "cut {cut}");
            r.push(&resp[cut..]);
            assert_eq!(r.body(false).as_deref(), Some(&status[..]));
        }
        // Extra bytes after the body are not part of it.
        let mut r = BodyReader::new(Framing::Length(3), b"abcdef");
        assert_eq!(r.body(false).as_deref(), Some(&b"abc"[..]));
        // A cut body yields what came, at EOF.
        r = BodyReader::new(Framing::Length(10), b"abc");
        assert_eq!(r.body(false), None);
        assert_eq!(r.body(true).as_deref(), Some(&b"abc"[..]));
        // Until close.
        let r = BodyReader::new(Framing::UntilClose, b"text");
        assert_eq!(r.body(false), None);
        assert_eq!(r.body(true).as_deref(), Some(&b"text"[..]));
        // Framing rules.
        assert_eq!(
            framing(&head(
                b"HTTP/1.1 400 Bad\r\nTransfer-Encoding: chunked\r\nContent-Length: 5\r\n\r\n"
            )),
            Framing::Chunked
        );
        assert_eq!(
            framing(&head(b"HTTP/1.1 500 X\r\n\r\n")),
            Framing::UntilClose
        );
        assert_eq!(
            framing(&head(b"HTTP/1.1 204 X\r\n\r\n")),
            Framing::Length(0)
        );
        // Oversized bodies are cut, not grown without bound.
        let mut r = BodyReader::new(Framing::UntilClose, &[]);
        for _ in 0..40 {
            r.push(&[b'x'; 64 * 1024]);
        }
        assert_eq!(r.body(false).map(|b| b.len()), Some(MAX_BODY));
    }

    #[test]
    fn chunked_bodies() {
        let raw = b"5\r\nhello\r\n6;ext=1\r\n world\r\n0\r\nTrailer: x\r\n\r\n";
        assert_eq!(decode_chunked(raw), (b"hello world".to_vec(), true));
        for cut in 0..raw.len() {
            let (partial, done) = decode_chunked(&raw[..cut]);
            assert!(b"hello world".starts_with(&partial), "cut {cut}");
            // Done once the terminal "0\r\n" line is in.
            assert_eq!(done, cut >= 30, "cut {cut}");
            let mut r = BodyReader::new(Framing::Chunked, &raw[..cut]);
            assert_eq!(r.body(false).is_some(), done);
            r.push(&raw[cut..]);
            assert_eq!(r.body(false).as_deref(), Some(&b"hello world"[..]));
        }
        // Garbage sizes end the body.
        assert_eq!(decode_chunked(b"zz\r\nabc"), (Vec::new(), true));
        assert_eq!(decode_chunked(b"3\r\nabcXY"), (b"abc".to_vec(), true));
    }
}
