//! The client half of `http`: one way to open a connection to a server
//! and speak HTTP/1.1 on it under ONE deadline, so a silent server cannot
//! hang the caller. TCP connect with a timeout (no Nagle: keystrokes and
//! small frames must not wait), TLS (rustls with the caller's
//! `ClientConfig`, or native-tls under the `native-tls` feature), writing
//! a request, reading the answer's head and a bounded body with
//! [`super::response`], and the WebSocket upgrade (the request bytes, the
//! RFC 6455 checks of a 101, the socket handed to tungstenite).
//!
//! In scope: sockets, deadlines, bytes. Out of scope: what the caller's
//! server is (TLS roots, names, credentials, subprotocols and their
//! meaning come from the caller), retries, and request bodies beyond bytes.
//!
//! Timeouts are socket timeouts set per read/write from the time left, and
//! cleared once the exchange is over ([`into_websocket`]: a socket timeout
//! must not outlive the handshake). `WouldBlock` and `TimedOut` both mean
//! "timed out" here.

use super::endpoint::Endpoint;
use super::response::{self, BodyCollector, Head, Limits, ResponseError};
use super::stream::ClientSocket;
use super::{Socket, TlsStream};
use std::fmt;
use std::io::{self, Read, Write};
use std::net::{SocketAddr, TcpStream, ToSocketAddrs};
use std::sync::Arc;
use std::time::{Duration, Instant};
use tungstenite::handshake::derive_accept_key;
use tungstenite::protocol::{Role, WebSocketConfig};
use tungstenite::WebSocket;

/// How to secure a connection: the caller's TLS settings.
pub enum ClientTls {
    /// rustls with this configuration, verifying the server as `name`.
    Rustls {
        config: Arc<rustls::ClientConfig>,
        name: rustls::pki_types::ServerName<'static>,
    },
    /// native-tls (OpenSSL) with this connector; `name` is verified and
    /// sent as SNI.
    #[cfg(feature = "native-tls")]
    Native {
        connector: native_tls::TlsConnector,
        name: String,
    },
}

/// Why a connection or an exchange on it failed. Each names the server's
/// authority; none carries a header value (tokens stay out of errors).
#[derive(Debug)]
pub enum DialError {
    /// The host name did not resolve.
    Resolve {
        authority: String,
        source: io::Error,
    },
    /// No address accepted a TCP connection before the deadline: nothing
    /// was sent (a retry is safe). `source` is the last attempt's error.
    Connect {
        authority: String,
        source: Option<io::Error>,
    },
    /// The TLS session could not be set up from the settings given.
    TlsSetup(String),
    /// The TLS handshake failed or timed out.
    TlsHandshake {
        authority: String,
        source: io::Error,
    },
    /// A read or write on the connection failed or timed out; `what` says
    /// which step ("sending the upgrade to", "reading the answer from").
    Io {
        what: &'static str,
        authority: String,
        source: io::Error,
    },
    /// The server closed the connection before a response head.
    Closed { authority: String },
    /// The answer is not an HTTP/1.1 response head within the limits.
    Response(ResponseError),
}

impl fmt::Display for DialError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            DialError::Resolve { authority, source } => {
                write!(f, "resolving {authority}: {source}")
            }
            DialError::Connect {
                authority,
                source: Some(e),
            } => write!(f, "connecting to {authority}: {e}"),
            DialError::Connect {
                authority,
                source: None,
            } => write!(f, "connecting to {authority}: no address (or timed out)"),
            DialError::TlsSetup(m) => write!(f, "TLS setup: {m}"),
            DialError::TlsHandshake { authority, source } => {
                write!(f, "TLS handshake with {authority}: {source}")
            }
            DialError::Io {
                what,
                authority,
                source,
            } => write!(f, "{what} {authority}: {source}"),
            DialError::Closed { authority } => write!(
                f,
                "reading the answer from {authority}: connection closed before a response"
            ),
            DialError::Response(e) => write!(f, "{e}"),
        }
    }
}

impl std::error::Error for DialError {}

fn timed_out(e: &io::Error) -> bool {
    matches!(
        e.kind(),
        io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut
    )
}

/// TCP to `ep` (every address it resolves to, in order) before `deadline`.
pub fn connect_tcp(ep: &Endpoint, deadline: Instant) -> Result<TcpStream, DialError> {
    let addrs: Vec<SocketAddr> = (ep.host.as_str(), ep.port)
        .to_socket_addrs()
        .map_err(|source| DialError::Resolve {
            authority: ep.authority.clone(),
            source,
        })?
        .collect();
    let mut last: Option<io::Error> = None;
    for a in addrs {
        let left = deadline.saturating_duration_since(Instant::now());
        if left.is_zero() {
            break;
        }
        match TcpStream::connect_timeout(&a, left) {
            Ok(s) => return Ok(s),
            Err(e) => last = Some(e),
        }
    }
    Err(DialError::Connect {
        authority: ep.authority.clone(),
        source: last,
    })
}

/// No Nagle, then TLS with `tls` when given (the caller gives it for an
/// https endpoint), before `deadline`.
pub fn secure(
    tcp: TcpStream,
    tls: Option<&ClientTls>,
    ep: &Endpoint,
    deadline: Instant,
) -> Result<ClientSocket, DialError> {
    let _ = tcp.set_nodelay(true);
    let handshake = |source| DialError::TlsHandshake {
        authority: ep.authority.clone(),
        source,
    };
    match tls {
        None => Ok(ClientSocket::Socket(Socket::Plain(tcp))),
        Some(ClientTls::Rustls { config, name }) => {
            let cc = rustls::ClientConnection::new(config.clone(), name.clone())
                .map_err(|e| DialError::TlsSetup(e.to_string()))?;
            let mut tls = TlsStream::new(cc, tcp);
            tls.handshake(deadline).map_err(handshake)?;
            Ok(ClientSocket::Socket(Socket::Tls(Box::new(tls))))
        }
        #[cfg(feature = "native-tls")]
        Some(ClientTls::Native { connector, name }) => {
            let tls = super::stream::NativeTlsStream::connect(connector, name, tcp, deadline)
                .map_err(handshake)?;
            Ok(ClientSocket::NativeTls(Box::new(tls)))
        }
    }
}

/// [`connect_tcp`] then [`secure`].
pub fn dial(
    ep: &Endpoint,
    tls: Option<&ClientTls>,
    deadline: Instant,
) -> Result<ClientSocket, DialError> {
    let tcp = connect_tcp(ep, deadline)?;
    secure(tcp, tls, ep, deadline)
}

fn left(deadline: Instant) -> io::Result<Duration> {
    let l = deadline.saturating_duration_since(Instant::now());
    if l.is_zero() {
        Err(io::Error::new(io::ErrorKind::TimedOut, "timed out"))
    } else {
        Ok(l)
    }
}

/// Runs `op` with the socket's `set` timeout at the time left, again while
/// it times out or is interrupted, until `deadline`.
fn retrying<T>(
    sock: &mut ClientSocket,
    deadline: Instant,
    set: fn(&ClientSocket, Option<Duration>) -> io::Result<()>,
    mut op: impl FnMut(&mut ClientSocket) -> io::Result<T>,
) -> io::Result<T> {
    loop {
        set(sock, Some(left(deadline)?))?;
        match op(sock) {
            Err(e) if timed_out(&e) || e.kind() == io::ErrorKind::Interrupted => {}
            other => return other,
        }
    }
}

/// Writes and flushes everything before `deadline`.
pub fn write_all(sock: &mut ClientSocket, mut data: &[u8], deadline: Instant) -> io::Result<()> {
    while !data.is_empty() {
        match retrying(sock, deadline, ClientSocket::set_write_timeout, |s| {
            s.write(data)
        })? {
            0 => return Err(io::ErrorKind::WriteZero.into()),
            n => data = &data[n..],
        }
    }
    retrying(sock, deadline, ClientSocket::set_write_timeout, |s| {
        s.flush()
    })
}

/// Appends what one read gives (0 at EOF), waiting at most until `deadline`.
fn read_some(sock: &mut ClientSocket, buf: &mut Vec<u8>, deadline: Instant) -> io::Result<usize> {
    let mut tmp = [0u8; 16 * 1024];
    let n = retrying(sock, deadline, ClientSocket::set_read_timeout, |s| {
        s.read(&mut tmp)
    })?;
    buf.extend_from_slice(&tmp[..n]);
    Ok(n)
}

/// Reads the final response head (interim 1xx skipped) before `deadline`;
/// returns it and the bytes read past it (the protocol's after a 101, or
/// the start of a body).
pub fn read_head(
    sock: &mut ClientSocket,
    ep: &Endpoint,
    limits: &Limits,
    deadline: Instant,
) -> Result<(Head, Vec<u8>), DialError> {
    let mut buf = Vec::with_capacity(4096);
    let (head, n) = loop {
        if let Some(h) = response::parse_final_head(&buf, limits).map_err(DialError::Response)? {
            break h;
        }
        match read_some(sock, &mut buf, deadline) {
            Ok(0) => {
                return Err(DialError::Closed {
                    authority: ep.authority.clone(),
                })
            }
            Ok(_) => {}
            Err(source) => {
                return Err(DialError::Io {
                    what: "reading the answer from",
                    authority: ep.authority.clone(),
                    source,
                })
            }
        }
    };
    let rest = buf.split_off(n);
    Ok((head, rest))
}

/// Reads the body after `head` (at most `max` bytes kept, within the
/// deadline), leniently: a body cut short or badly framed still yields
/// what came, for answers shown to someone (errors).
pub fn read_body(
    sock: &mut ClientSocket,
    head: &Head,
    rest: &[u8],
    max: usize,
    deadline: Instant,
) -> Vec<u8> {
    let mut collector = BodyCollector::new(response::framing(head), rest, max);
    loop {
        if let Some(b) = collector.body(false) {
            return b;
        }
        let mut chunk = Vec::with_capacity(16 * 1024);
        match read_some(sock, &mut chunk, deadline) {
            Ok(0) | Err(_) => return collector.body(true).unwrap_or_default(),
            Ok(_) => collector.push(&chunk),
        }
    }
}

/// One `Connection: close` request: `method path` with `headers` in order
/// (the caller's `Authorization`, …; never logged here) and, when given,
/// the body with its `Content-Type` and `Content-Length`.
pub fn close_request(
    method: &str,
    path: &str,
    authority: &str,
    headers: &[(&str, &str)],
    body: Option<(&str, &[u8])>,
) -> Vec<u8> {
    let mut s = format!("{method} {path} HTTP/1.1\r\nHost: {authority}\r\nConnection: close\r\n");
    for (k, v) in headers {
        s.push_str(&format!("{k}: {v}\r\n"));
    }
    if let Some((content_type, b)) = body {
        s.push_str(&format!(
            "Content-Type: {content_type}\r\nContent-Length: {}\r\n",
            b.len()
        ));
    }
    s.push_str("\r\n");
    let mut raw = s.into_bytes();
    if let Some((_, b)) = body {
        raw.extend_from_slice(b);
    }
    raw
}

/// The WebSocket upgrade request: `GET path_and_query` with the RFC 6455
/// headers (`key`: base64 of 16 random bytes), the subprotocol `offer` in
/// ONE header when given, then `headers` in order (the caller's
/// `User-Agent`, `Authorization`, …; never logged here).
pub fn upgrade_request(
    path_and_query: &str,
    authority: &str,
    key: &str,
    offer: Option<&str>,
    headers: &[(&str, &str)],
) -> Vec<u8> {
    let mut s = format!(
        "GET {path_and_query} HTTP/1.1\r\nHost: {authority}\r\nUpgrade: websocket\r\nConnection: Upgrade\r\nSec-WebSocket-Key: {key}\r\nSec-WebSocket-Version: 13\r\n"
    );
    if let Some(o) = offer {
        s.push_str(&format!("Sec-WebSocket-Protocol: {o}\r\n"));
    }
    for (k, v) in headers {
        s.push_str(&format!("{k}: {v}\r\n"));
    }
    s.push_str("\r\n");
    s.into_bytes()
}

/// Why an upgrade answer is not a WebSocket the caller can use.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum UpgradeError {
    /// Not a 101.
    Status(u16),
    /// A 101 without `Upgrade: websocket`.
    NoUpgradeHeader,
    /// A 101 without `Connection: Upgrade`.
    NoConnectionHeader,
    /// A 101 without `Sec-WebSocket-Accept`.
    NoAccept,
    /// A `Sec-WebSocket-Accept` that does not answer our key.
    WrongAccept(String),
    /// The subprotocol chosen is not one the caller can speak (the
    /// caller's message).
    Subprotocol(String),
    /// The answer's head could not be read.
    Head(ResponseError),
    /// tungstenite's client handshake failed (its reason).
    WebSocket(String),
}

impl fmt::Display for UpgradeError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            UpgradeError::Status(code) => {
                write!(f, "expected 101 Switching Protocols, got {code}")
            }
            UpgradeError::NoUpgradeHeader => f.write_str("101 without `Upgrade: websocket`"),
            UpgradeError::NoConnectionHeader => f.write_str("101 without `Connection: Upgrade`"),
            UpgradeError::NoAccept => f.write_str("101 without Sec-WebSocket-Accept"),
            UpgradeError::WrongAccept(a) => write!(f, "wrong Sec-WebSocket-Accept {a:?}"),
            UpgradeError::Subprotocol(m) | UpgradeError::WebSocket(m) => f.write_str(m),
            UpgradeError::Head(e) => write!(f, "{e}"),
        }
    }
}

impl std::error::Error for UpgradeError {}

/// Checks the protocol-independent part of a 101 answer (RFC 6455 §4.1):
/// the status, `Upgrade`, `Connection` and `Sec-WebSocket-Accept`. The
/// caller checks the chosen subprotocol.
pub fn check_accept(head: &Head, key: &str) -> Result<(), UpgradeError> {
    if head.code != 101 {
        return Err(UpgradeError::Status(head.code));
    }
    if !head.has_token("upgrade", "websocket") {
        return Err(UpgradeError::NoUpgradeHeader);
    }
    if !head.has_token("connection", "upgrade") {
        return Err(UpgradeError::NoConnectionHeader);
    }
    let want = derive_accept_key(key.as_bytes());
    match head.header("sec-websocket-accept") {
        Some(a) if a == want => Ok(()),
        Some(a) => Err(UpgradeError::WrongAccept(a.to_string())),
        None => Err(UpgradeError::NoAccept),
    }
}

/// The socket after a checked 101, as a client WebSocket with `config`:
/// socket timeouts cleared (whoever pumps it takes over), the bytes read
/// past the head kept.
pub fn into_websocket(
    sock: ClientSocket,
    rest: Vec<u8>,
    ep: &Endpoint,
    config: WebSocketConfig,
) -> Result<WebSocket<ClientSocket>, DialError> {
    sock.set_read_timeout(None)
        .and_then(|()| sock.set_write_timeout(None))
        .map_err(|source| DialError::Io {
            what: "configuring the socket to",
            authority: ep.authority.clone(),
            source,
        })?;
    Ok(WebSocket::from_partially_read(
        sock,
        rest,
        Role::Client,
        Some(config),
    ))
}

/// Why [`websocket_on`] failed.
#[derive(Debug)]
pub enum WsOpenError {
    /// The socket's timeouts could not be set.
    Socket(io::Error),
    /// The handshake failed (tungstenite's client handshake).
    Upgrade(UpgradeError),
}

impl fmt::Display for WsOpenError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            WsOpenError::Socket(e) => write!(f, "configuring the socket: {e}"),
            WsOpenError::Upgrade(e) => write!(f, "websocket upgrade: {e}"),
        }
    }
}

impl std::error::Error for WsOpenError {}

/// The client handshake on a connected socket
/// ([`super::ws::client_handshake`]: `headers` as given, the subprotocol
/// `offer` as it is, messages up to `max_message` bytes), bounded by
/// `timeout` through socket timeouts that are cleared once the 101 is in
/// (whoever pumps the socket takes over). Returns the socket and the
/// subprotocol the far end chose.
pub fn websocket_on(
    sock: ClientSocket,
    url: &str,
    headers: &[(String, String)],
    offer: Option<&str>,
    max_message: usize,
    timeout: Duration,
) -> Result<(WebSocket<ClientSocket>, Option<String>), WsOpenError> {
    let t = Some(timeout.max(Duration::from_millis(1)));
    sock.tcp()
        .set_read_timeout(t)
        .and_then(|()| sock.tcp().set_write_timeout(t))
        .map_err(WsOpenError::Socket)?;
    let (ws, chosen) = super::ws::client_handshake(sock, url, headers, offer, max_message)
        .map_err(WsOpenError::Upgrade)?;
    ws.get_ref()
        .tcp()
        .set_read_timeout(None)
        .and_then(|()| ws.get_ref().tcp().set_write_timeout(None))
        .map_err(WsOpenError::Socket)?;
    Ok((ws, chosen))
}

#[cfg(test)]
mod tests {
    use super::*;

    const KEY: &str = "dGhlIHNhbXBsZSBub25jZQ==";
    const ACCEPT: &str = "s3pPLMBiTxaQ9kYGzzhZRbK+xOo=";

    fn head(bytes: &[u8]) -> Head {
        response::parse_head(bytes, &Limits::default())
            .unwrap()
            .unwrap()
            .0
    }

    #[test]
    fn upgrade_request_bytes() {
        let s = String::from_utf8(upgrade_request(
            "/p?q=1",
            "[::1]:6443",
            KEY,
            Some("a,b"),
            &[("User-Agent", "t/1"), ("Authorization", "Bearer tok")],
        ))
        .unwrap();
        assert_eq!(
            s,
            format!("GET /p?q=1 HTTP/1.1\r\nHost: [::1]:6443\r\nUpgrade: websocket\r\nConnection: Upgrade\r\nSec-WebSocket-Key: {KEY}\r\nSec-WebSocket-Version: 13\r\nSec-WebSocket-Protocol: a,b\r\nUser-Agent: t/1\r\nAuthorization: Bearer tok\r\n\r\n")
        );
        let s = String::from_utf8(upgrade_request("/", "h", KEY, None, &[])).unwrap();
        assert!(!s.contains("Sec-WebSocket-Protocol"));
    }

    #[test]
    fn close_request_bytes() {
        let raw = close_request(
            "POST",
            "/v1/exec",
            "127.0.0.1:7443",
            &[("Authorization", "Bearer tok")],
            Some(("application/json", b"{}")),
        );
        assert_eq!(
            String::from_utf8(raw).unwrap(),
            "POST /v1/exec HTTP/1.1\r\nHost: 127.0.0.1:7443\r\nConnection: close\r\nAuthorization: Bearer tok\r\nContent-Type: application/json\r\nContent-Length: 2\r\n\r\n{}"
        );
        let raw = close_request("GET", "/healthz", "h", &[], None);
        assert_eq!(
            raw,
            b"GET /healthz HTTP/1.1\r\nHost: h\r\nConnection: close\r\n\r\n"
        );
    }

    #[test]
    fn accept_checks() {
        let ok = head(format!("HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\nSec-WebSocket-Accept: {ACCEPT}\r\n\r\n").as_bytes());
        assert_eq!(check_accept(&ok, KEY), Ok(()));
        assert!(matches!(
            check_accept(&ok, "AAAAAAAAAAAAAAAAAAAAAA=="),
            Err(UpgradeError::WrongAccept(_))
        ));
        assert_eq!(
            check_accept(&head(b"HTTP/1.1 200 OK\r\n\r\n"), KEY),
            Err(UpgradeError::Status(200))
        );
        assert_eq!(
            UpgradeError::Status(200).to_string(),
            "expected 101 Switching Protocols, got 200"
        );
        let no_accept =
            head(b"HTTP/1.1 101 X\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n\r\n");
        assert_eq!(check_accept(&no_accept, KEY), Err(UpgradeError::NoAccept));
    }

    #[test]
    fn nothing_listening_is_a_connect_error() {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let port = l.local_addr().unwrap().port();
        drop(l);
        let ep = super::super::endpoint::parse_server(&format!("http://127.0.0.1:{port}")).unwrap();
        let deadline = Instant::now() + Duration::from_secs(5);
        let e = dial(&ep, None, deadline).map(|_| ()).unwrap_err();
        assert!(matches!(e, DialError::Connect { .. }), "{e}");
        assert!(e.to_string().starts_with("connecting to 127.0.0.1:"), "{e}");
    }
}
