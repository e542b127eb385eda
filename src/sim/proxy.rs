//! `pods/{name}:{port}/proxy/{path}`: forwards one HTTP request to a port of
//! a pod (its loopback pod IP) and streams the answer back, chunk by chunk,
//! so long-lived responses (SSE, watches) flow as they are produced. Like
//! the real API server, a refused connection is a 503 Status naming the
//! address.
//!
//! The path sent to the pod is built as upstream builds it
//! ([`pod_target`]): the tail after `/proxy` percent-decoded, cleaned
//! (`path.Join` semantics: `.` and `..` resolved, never above `/`, repeated
//! slashes merged, a trailing slash kept: `JoinPreservingTrailingSlash`),
//! then percent-encoded again the way Go's `url.URL` escapes a path; the
//! query is passed on as it came. One difference: a control character in
//! the decoded path is refused with 400 (upstream escapes it again),
//! because nothing legitimate needs one and a decoded one must never
//! reach a request line.

use crate::http::hop::end_to_end_headers;
use crate::http::response::{
    checked_framing, parse_final_head, BodyReader, Framing, Limits, ResponseError,
};
use crate::http::{Body, ChunkSink, Reply, Request, Response, Upgrade};
use crate::kube::status::Status;
use std::io::{self, Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::time::Duration;

/// Request headers the proxy never passes on, beyond the hop-by-hop ones
/// ([`end_to_end_headers`]): the caller's credential is for the API
/// server, and the pod's answer is passed on as it is encoded.
const NOT_FORWARDED: &[&str] = &["authorization", "accept-encoding"];

fn unavailable(msg: &str) -> Response {
    let s = Status::service_unavailable(msg);
    Response::json(503, s.to_json())
}

/// A WebSocket upgrade through the proxy (the real API server passes
/// upgrades on too): the pod's side is opened first, with the client's
/// subprotocol offer, then the client's is accepted with the protocol the
/// pod chose, and messages are bridged both ways (`http::ws::bridge`).
pub fn forward_websocket(req: &Request, ip: &str, port: u16, target: &str) -> Reply {
    let addr: SocketAddr = match format!("{ip}:{port}").parse() {
        Ok(a) => a,
        Err(_) => return unavailable(&format!("invalid pod address {ip}:{port}")).into(),
    };
    // Plain TCP to the pod IP, not `http::client::connect_tcp`: see
    // `forward`.
    let stream = match TcpStream::connect_timeout(&addr, Duration::from_secs(5)) {
        Ok(s) => s,
        Err(e) => {
            return unavailable(&format!(
                "error trying to reach service: dial tcp {addr}: {e}"
            ))
            .into()
        }
    };
    let _ = stream.set_read_timeout(Some(Duration::from_secs(30)));
    let _ = stream.set_write_timeout(Some(Duration::from_secs(30)));
    let headers: Vec<(String, String)> = end_to_end_headers(&req.headers, NOT_FORWARDED)
        .into_iter()
        .filter(|(k, _)| !crate::http::ws::is_handshake_header(&k.to_ascii_lowercase()))
        .collect();
    let offer = req.header("sec-websocket-protocol");
    let (ws, chosen) = match crate::http::ws::client_handshake(
        stream,
        &format!("ws://{addr}{target}"),
        &headers,
        offer,
        64 << 20,
    ) {
        Ok(x) => x,
        Err(e) => {
            return unavailable(&format!("error trying to reach service: {e}")).into();
        }
    };
    let _ = ws.get_ref().set_read_timeout(None);
    let _ = ws.get_ref().set_write_timeout(None);
    Reply::Upgrade(Upgrade {
        protocol: chosen,
        headers: Vec::new(),
        max_message_bytes: 64 << 20,
        on_open: Box::new(move |conn| {
            if let Err(e) = crate::http::ws::bridge(conn, ws, crate::http::ws::WsOptions::default())
            {
                log::warn!("proxy websocket to {addr}: {e}");
            }
        }),
    })
}

/// Forwards `req` to `ip:port` with `target` (from [`pod_target`]).
pub fn forward(req: &Request, ip: &str, port: u16, target: &str) -> Response {
    let addr: SocketAddr = match format!("{ip}:{port}").parse() {
        Ok(a) => a,
        Err(_) => return unavailable(&format!("invalid pod address {ip}:{port}")),
    };
    // Its own dial, not `http::client::connect_tcp`: that one dials a
    // server URL's host (resolving it, trying each address) and folds the
    // failure into a `DialError` naming the authority, while this is plain
    // TCP to one literal pod IP whose failure must keep its io error kind
    // for the API server's own wording ("dial tcp {addr}: connect:
    // connection refused"), with the API server's 5 s dial bound.
    let mut stream = match TcpStream::connect_timeout(&addr, Duration::from_secs(5)) {
        Ok(s) => s,
        Err(e) => {
            let what = if e.kind() == std::io::ErrorKind::ConnectionRefused {
                "connect: connection refused".to_string()
            } else {
                e.to_string()
            };
            return unavailable(&format!(
                "error trying to reach service: dial tcp {addr}: {what}"
            ));
        }
    };
    let _ = stream.set_read_timeout(Some(Duration::from_secs(300)));
    let _ = stream.set_write_timeout(Some(Duration::from_secs(30)));
    let mut head = format!(
        "{} {} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n",
        req.method, target
    );
    for (k, v) in end_to_end_headers(&req.headers, NOT_FORWARDED) {
        head.push_str(&format!("{k}: {v}\r\n"));
    }
    head.push_str(&format!("Content-Length: {}\r\n\r\n", req.body.len()));
    if let Err(e) = stream
        .write_all(head.as_bytes())
        .and_then(|_| stream.write_all(&req.body))
    {
        return unavailable(&format!("error trying to reach service: {e}"));
    }
    let (head, rest) = match read_head(&mut stream) {
        Ok(h) => h,
        Err(e) => return unavailable(&format!("error trying to reach service: {e}")),
    };
    let Ok(framing) = checked_framing(&head, req.method.eq_ignore_ascii_case("HEAD")) else {
        return unavailable("error trying to reach service: malformed response");
    };
    let out_headers = end_to_end_headers(&head.headers, NOT_FORWARDED);
    let mut body = BodyReader::new(stream, rest, framing);
    // A sized answer stays sized, as the API server's proxy keeps the
    // pod's Content-Length (read whole when small; longer ones stream).
    if let Framing::Length(n) = framing {
        if n <= 1 << 20 {
            let mut data = Vec::new();
            if let Err(e) = copy_body(&mut body, &mut |b| {
                data.extend_from_slice(b);
                Ok(())
            }) {
                return unavailable(&format!("error reading from the pod: {e}"));
            }
            return Response {
                status: head.code,
                headers: out_headers,
                body: Body::Bytes(data),
            };
        }
    }
    let body = Body::Stream(Box::new(move |sink: &mut dyn ChunkSink| {
        copy_body(&mut body, &mut |b| sink.send(b))
    }));
    Response {
        status: head.code,
        headers: out_headers,
        body,
    }
}

/// Why no response head came from the pod; its `Display` is the 503's
/// message after "error trying to reach service: ".
#[derive(Debug)]
enum HeadError {
    /// Longer than [`crate::http::response::MAX_HEAD_BYTES`].
    TooLarge,
    /// Not an HTTP/1.1 response head.
    Malformed,
    /// The pod closed before a whole head.
    Eof,
    /// Reading from the pod failed (or timed out).
    Read(io::Error),
}

impl std::fmt::Display for HeadError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            HeadError::TooLarge => f.write_str("response head too large"),
            HeadError::Malformed => f.write_str("malformed response"),
            HeadError::Eof => f.write_str("EOF before a response"),
            HeadError::Read(e) => write!(f, "{e}"),
        }
    }
}

impl std::error::Error for HeadError {}

/// Reads the pod's final response head (interim 1xx skipped, at most
/// [`crate::http::response::MAX_HEAD_BYTES`]): it and the bytes read past
/// it.
fn read_head(stream: &mut TcpStream) -> Result<(crate::http::response::Head, Vec<u8>), HeadError> {
    let mut buf = Vec::new();
    let mut chunk = [0u8; 16 * 1024];
    loop {
        match parse_final_head(&buf, &Limits::default()) {
            Ok(Some((head, n))) => return Ok((head, buf.split_off(n))),
            Ok(None) => {}
            Err(ResponseError::HeadTooLarge { .. }) => return Err(HeadError::TooLarge),
            Err(_) => return Err(HeadError::Malformed),
        }
        match stream.read(&mut chunk) {
            Ok(0) => return Err(HeadError::Eof),
            Ok(n) => buf.extend_from_slice(&chunk[..n]),
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(HeadError::Read(e)),
        }
    }
}

/// Passes the de-framed body on to `send`, piece by piece. A pod closing
/// inside its body ends the body where it stopped (what the client gets
/// is what came, as before the shared reader).
fn copy_body(
    body: &mut BodyReader<TcpStream>,
    send: &mut dyn FnMut(&[u8]) -> io::Result<()>,
) -> io::Result<()> {
    let mut buf = vec![0u8; 32 * 1024];
    loop {
        match body.read(&mut buf) {
            Ok(0) => return Ok(()),
            Ok(n) => send(&buf[..n])?,
            Err(e) if e.kind() == io::ErrorKind::UnexpectedEof => return Ok(()),
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
}

/// Why a pod proxy request-target is refused (400, this text as the
/// Status message).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ProxyTargetError {
    /// Neither origin-form nor an absolute `http(s)://` URL.
    Target,
    /// Not `/api/v1/namespaces/{namespace}/pods/{name}/proxy…`.
    Path,
    /// A malformed `%`-escape in the tail.
    Escape,
    /// A control character in the decoded tail.
    ControlChar,
}

impl std::fmt::Display for ProxyTargetError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            ProxyTargetError::Target => "invalid pod proxy request-target",
            ProxyTargetError::Path => "invalid pod proxy path: expected /api/v1/namespaces/{namespace}/pods/{name}/proxy/{path}",
            ProxyTargetError::Escape => "invalid percent-encoding in the proxy path",
            ProxyTargetError::ControlChar => {
                "invalid proxy path: control characters are not allowed"
            }
        })
    }
}

impl std::error::Error for ProxyTargetError {}

/// The request-target to send the pod for a pod proxy request whose raw
/// request-target is `target` (`…/pods/{name}[:{port}]/proxy{tail}`, the
/// tail read from the raw target, never the decoded path): the tail
/// percent-decoded, refused when it holds a control character, cleaned as
/// upstream's `JoinPreservingTrailingSlash` cleans it, escaped as Go
/// escapes a URL path; then `?` and the query as it came, with anything a
/// query may not hold raw escaped. `Err`'s text is the 400's message.
pub fn pod_target(target: &str) -> Result<String, ProxyTargetError> {
    let origin = if target.starts_with('/') {
        target
    } else {
        let rest = target
            .strip_prefix("http://")
            .or_else(|| target.strip_prefix("https://"))
            .ok_or(ProxyTargetError::Target)?;
        rest.find('/').map_or("/", |i| &rest[i..])
    };
    let (raw_path, query) = match origin.split_once('?') {
        Some((p, q)) => (p, Some(q)),
        None => (origin, None),
    };
    // "", "api", "v1", "namespaces", ns, "pods", name, "proxy", tail.
    let parts: Vec<&str> = raw_path.splitn(9, '/').collect();
    if parts.get(7) != Some(&"proxy") {
        return Err(ProxyTargetError::Path);
    }
    let tail = match parts.get(8) {
        Some(t) => percent_decode(t).ok_or(ProxyTargetError::Escape)?,
        None => Vec::new(),
    };
    if tail.iter().any(|b| *b < 0x20 || *b == 0x7f) {
        return Err(ProxyTargetError::ControlChar);
    }
    let mut out = escape_path(&clean(&tail, parts.len() == 9));
    if let Some(q) = query {
        out.push('?');
        out.push_str(&escape_query(q));
    }
    Ok(out)
}

/// `path.Join("/", tail)` with the trailing slash kept
/// (`JoinPreservingTrailingSlash`): `.` dropped, `..` removes the segment
/// before it (never above the root), empty segments dropped. `slashed`:
/// the tail came after `/proxy/` (so `""` there is `/`).
fn clean(tail: &[u8], slashed: bool) -> Vec<u8> {
    let mut segs: Vec<&[u8]> = Vec::new();
    for s in tail.split(|b| *b == b'/') {
        match s {
            b"" | b"." => {}
            b".." => {
                segs.pop();
            }
            s => segs.push(s),
        }
    }
    let mut out = Vec::with_capacity(tail.len() + 1);
    for s in &segs {
        out.push(b'/');
        out.extend_from_slice(s);
    }
    if out.is_empty() || (slashed && tail.ends_with(b"/")) {
        out.push(b'/');
    }
    out
}

/// Go's `url.URL` path escaping (`shouldEscape` with `encodePath`):
/// letters, digits, `-_.~` and `$&+,/:;=@` stay, everything else is
/// `%XX` in upper case.
fn escape_path(p: &[u8]) -> String {
    let mut out = String::with_capacity(p.len());
    for &b in p {
        if b.is_ascii_alphanumeric() || b"-_.~$&+,/:;=@".contains(&b) {
            out.push(char::from(b));
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}

/// The raw query with its escapes as they came; a byte a query may not
/// hold raw (none gets past the HTTP parser, but the request line the pod
/// reads must not depend on that) escaped, a `%` that starts no escape
/// too.
fn escape_query(q: &str) -> String {
    let b = q.as_bytes();
    let mut out = String::with_capacity(q.len());
    for (i, &c) in b.iter().enumerate() {
        let escape_start = c == b'%'
            && b.get(i + 1).is_some_and(u8::is_ascii_hexdigit)
            && b.get(i + 2).is_some_and(u8::is_ascii_hexdigit);
        if escape_start || c.is_ascii_alphanumeric() || b"-._~!$&'()*+,;=:@/?".contains(&c) {
            out.push(char::from(c));
        } else {
            out.push_str(&format!("%{c:02X}"));
        }
    }
    out
}

fn percent_decode(s: &str) -> Option<Vec<u8>> {
    let b = s.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        if b[i] == b'%' {
            let hex = s.get(i + 1..i + 3)?;
            out.push(u8::from_str_radix(hex, 16).ok()?);
            i += 3;
        } else {
            out.push(b[i]);
            i += 1;
        }
    }
    Some(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    const P: &str = "/api/v1/namespaces/default/pods/web:8080/proxy";

    fn t(tail: &str) -> Result<String, ProxyTargetError> {
        pod_target(&format!("{P}{tail}"))
    }

    #[test]
    fn the_tail_is_cleaned_as_upstream_cleans_it() {
        for (tail, want) in [
            ("", "/"),
            ("/", "/"),
            ("/a", "/a"),
            ("/a/", "/a/"),
            ("/a//b", "/a/b"),
            ("/a/./b/", "/a/b/"),
            ("/a/b/../c", "/a/c"),
            ("/a/b/../../../../c", "/c"),
            ("/..", "/"),
            ("/../", "/"),
            ("/a/..", "/"),
            ("/a/../", "/"),
            ("/%2e%2e/%2E%2E/x", "/x"),
            ("/a%2F..%2F..%2Fz", "/z"),
            ("/a%2Fb", "/a/b"),
            ("/...", "/..."),
            ("/.well-known/x", "/.well-known/x"),
        ] {
            assert_eq!(t(tail).as_deref(), Ok(want), "{tail}");
        }
    }

    #[test]
    fn the_tail_is_escaped_as_go_escapes_a_path() {
        for (tail, want) in [
            ("/sp%20ace", "/sp%20ace"),
            ("/%7euser", "/~user"),
            ("/a%2bb+c", "/a+b+c"),
            ("/caf%c3%a9", "/caf%C3%A9"),
            ("/q%3Fm", "/q%3Fm"),
            ("/x%23y", "/x%23y"),
            ("/a'b(c)*!", "/a%27b%28c%29%2A%21"),
            ("/$&+,:;=@", "/$&+,:;=@"),
            ("/%25", "/%25"),
            ("/a\"b", "/a%22b"),
            ("/é", "/%C3%A9"),
        ] {
            assert_eq!(t(tail).as_deref(), Ok(want), "{tail}");
        }
    }

    #[test]
    fn control_characters_are_refused() {
        for tail in [
            "/x%0D%0AHost:%20evil",
            "/%0a",
            "/%0d",
            "/%00",
            "/%09",
            "/%1b",
            "/%7f",
            "/%7F",
        ] {
            assert!(t(tail).is_err(), "{tail}");
        }
        assert!(t("/%zz").is_err());
        assert!(t("/%4").is_err());
    }

    #[test]
    fn the_query_passes_as_it_came() {
        assert_eq!(t("/a?k=%0D%0A&v=a+b").as_deref(), Ok("/a?k=%0D%0A&v=a+b"));
        assert_eq!(t("?q=1").as_deref(), Ok("/?q=1"));
        assert_eq!(t("/?q=/../x").as_deref(), Ok("/?q=/../x"));
        assert_eq!(t("/a?x=a b\"%").as_deref(), Ok("/a?x=a%20b%22%25"));
        assert_eq!(t("/a?").as_deref(), Ok("/a?"));
    }

    #[test]
    fn the_tail_is_found_by_segment_not_by_text() {
        // A namespace or pod whose name holds "proxy" does not move it.
        assert_eq!(
            pod_target("/api/v1/namespaces/proxyns/pods/proxy:80/proxy/a/b").as_deref(),
            Ok("/a/b")
        );
        assert_eq!(
            pod_target("http://sim/api/v1/namespaces/d/pods/web/proxy/x?y").as_deref(),
            Ok("/x?y")
        );
        assert!(pod_target("/api/v1/namespaces/d/pods/web%2Fproxy/x").is_err());
    }
}
