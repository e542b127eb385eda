//! Opening the socket: TCP connect, TLS (our rustls config, or native-tls
//! under the `native-tls` feature, including
//! `tls-server-name` and an exec plugin's client certificate), and the
//! upgrade exchange from `handshake`, all under ONE deadline so a silent
//! server cannot hang the caller. Blocking I/O on the calling thread; the
//! socket then goes to the pump thread and is never touched here again.
//!
//! Timeouts are socket timeouts set per read/write from the time left, and
//! cleared once the 101 is in (crates.md: a socket timeout must not outlive
//! the handshake). `WouldBlock` and `TimedOut` both mean "timed out" here.

use super::error::RemoteError;
use super::handshake::{self, BodyReader, UpgradeRequest};
use super::request::Endpoint;
use crate::http::stream::ClientSocket;
#[cfg(not(feature = "native-tls"))]
use crate::http::{Socket, TlsStream};
use crate::kube::channel::Protocol;
use crate::kube::connection::Connection;
use crate::kube::status::Status;
#[cfg(not(feature = "native-tls"))]
use crate::kube::tls_client::{cached_client_config, server_name, TlsError};
#[cfg(feature = "native-tls")]
use crate::kube::tls_client::{native_connector, verify_name};
use std::io::{self, Read, Write};
use std::net::{SocketAddr, TcpStream, ToSocketAddrs};
use std::time::{Duration, Instant};
use tungstenite::handshake::client::generate_key;
use tungstenite::protocol::{Role, WebSocketConfig};
use tungstenite::WebSocket;

/// Largest message accepted from the server. Output frames are at most a
/// pipe read (32 KiB upstream); the status is small. 16 MiB leaves room for
/// any real server and bounds memory per stream.
const MAX_MESSAGE: usize = 16 << 20;

/// An upgraded socket and the subprotocol the server chose.
pub struct Opened {
    pub ws: WebSocket<ClientSocket>,
    pub protocol: Protocol,
}

/// The WebSocket settings of a client stream.
pub fn ws_config() -> WebSocketConfig {
    WebSocketConfig::default()
        .max_message_size(Some(MAX_MESSAGE))
        .max_frame_size(Some(MAX_MESSAGE))
}

/// Read buffer of long-lived, mostly idle streams (attach): tungstenite's
/// default 128 KiB is zero-filled at the first read, per stream. It is the
/// size of one socket read, not a frame limit (larger frames are assembled
/// across reads): 4 KiB holds an interactive app's output bursts in one
/// read and costs three of them 12 KiB per session instead of 384 KiB.
pub const SMALL_READ_BUFFER: usize = 4 * 1024;

fn transport(what: &str, ep: &Endpoint, e: impl std::fmt::Display) -> RemoteError {
    RemoteError::Transport(format!("{what} {}: {e}", ep.authority))
}

fn timed_out(e: &io::Error) -> bool {
    matches!(
        e.kind(),
        io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut
    )
}

/// Opens the stream at `path_and_query` on `ep`, offering `offer`.
pub fn open(
    conn: &Connection,
    ep: &Endpoint,
    path_and_query: &str,
    offer: &[Protocol],
    timeout: Duration,
    read_buffer: Option<usize>,
) -> Result<Opened, RemoteError> {
    let bearer = conn.credentials.bearer()?;
    let deadline = Instant::now() + timeout;
    let mut sock = dial(conn, ep, deadline)?;

    let key = generate_key();
    let req = handshake::encode_request(&UpgradeRequest {
        path_and_query,
        authority: &ep.authority,
        key: &key,
        offer,
        bearer: bearer.as_deref(),
    });
    write_all(&mut sock, &req, deadline).map_err(|e| transport("sending the upgrade to", ep, e))?;
    let (head, rest) = read_head(&mut sock, ep, deadline)?;

    if head.code == 101 {
        let protocol =
            handshake::check_switch(&head, &key, offer).map_err(RemoteError::Handshake)?;
        let ws = into_websocket(sock, rest, ep, read_buffer)?;
        return Ok(Opened { ws, protocol });
    }

    let body = read_body(&mut sock, &head, &rest, deadline);
    if head.code == 401 {
        conn.credentials.invalidate();
    }
    let status = Status::from_response(head.code, head.header("content-type").unwrap_or(""), &body);
    sock.send_close_notify();
    Err(RemoteError::Api {
        code: head.code,
        status: Box::new(status),
    })
}

/// TCP (no Nagle: keystrokes and small frames must not wait) and, for an
/// https endpoint, TLS with `conn`'s material, before `deadline`. Shared
/// with the command-line client, which talks to the daemon the same way.
pub(crate) fn dial(
    conn: &Connection,
    ep: &Endpoint,
    deadline: Instant,
) -> Result<ClientSocket, RemoteError> {
    let tcp = connect_tcp(ep, deadline)?;
    let _ = tcp.set_nodelay(true);
    if ep.tls {
        let mut material = conn.tls.clone();
        if let Some(cc) = conn.credentials.client_cert()? {
            material.client_cert = Some(cc);
        }
        tls_handshake(conn, &material, tcp, ep, deadline)
    } else {
        Ok(ClientSocket::Socket(crate::http::Socket::Plain(tcp)))
    }
}

/// Reads a response head before `deadline`; returns it and the bytes read
/// past it (WebSocket data after a 101, or the start of a body).
pub(crate) fn read_head(
    sock: &mut ClientSocket,
    ep: &Endpoint,
    deadline: Instant,
) -> Result<(handshake::Head, Vec<u8>), RemoteError> {
    let mut buf = Vec::with_capacity(4096);
    let (head, n) = loop {
        if let Some(h) = handshake::parse_head(&buf).map_err(RemoteError::Handshake)? {
            break h;
        }
        match read_some(sock, &mut buf, deadline) {
            Ok(0) => {
                return Err(transport(
                    "reading the answer from",
                    ep,
                    "connection closed before a response",
                ))
            }
            Ok(_) => {}
            Err(e) => return Err(transport("reading the answer from", ep, e)),
        }
    };
    let rest = buf.split_off(n);
    Ok((head, rest))
}

/// Reads the whole body of a non-101 answer (bounded by
/// [`handshake::MAX_BODY`], within the deadline); a body cut short still
/// yields what came.
pub(crate) fn read_body(
    sock: &mut ClientSocket,
    head: &handshake::Head,
    rest: &[u8],
    deadline: Instant,
) -> Vec<u8> {
    let mut reader = BodyReader::new(handshake::framing(head), rest);
    loop {
        if let Some(b) = reader.body(false) {
            return b;
        }
        let mut chunk = Vec::with_capacity(16 * 1024);
        match read_some(sock, &mut chunk, deadline) {
            Ok(0) | Err(_) => return reader.body(true).unwrap_or_default(),
            Ok(_) => reader.push(&chunk),
        }
    }
}

/// The socket after a checked 101, as a client WebSocket: socket timeouts
/// cleared (the pump takes over), the bytes read past the head kept.
pub(crate) fn into_websocket(
    sock: ClientSocket,
    rest: Vec<u8>,
    ep: &Endpoint,
    read_buffer: Option<usize>,
) -> Result<WebSocket<ClientSocket>, RemoteError> {
    let mut config = ws_config();
    if let Some(n) = read_buffer {
        // Taken at construction only (set_config does not resize it).
        config = config.read_buffer_size(n);
    }
    sock.set_read_timeout(None)
        .and_then(|()| sock.set_write_timeout(None))
        .map_err(|e| transport("configuring the socket to", ep, e))?;
    Ok(WebSocket::from_partially_read(
        sock,
        rest,
        Role::Client,
        Some(config),
    ))
}

/// TLS over `tcp` with rustls (our `ClientConfig`, our `TlsStream`).
#[cfg(not(feature = "native-tls"))]
fn tls_handshake(
    conn: &Connection,
    material: &crate::kube::connection::TlsMaterial,
    tcp: TcpStream,
    ep: &Endpoint,
    deadline: Instant,
) -> Result<ClientSocket, RemoteError> {
    let cfg = cached_client_config(material)?;
    let name = server_name(conn)?;
    let cc = rustls::ClientConnection::new(cfg, name)
        .map_err(|e| RemoteError::Tls(TlsError(format!("TLS setup: {e}"))))?;
    let mut tls = TlsStream::new(cc, tcp);
    tls.handshake(deadline)
        .map_err(|e| transport("TLS handshake with", ep, e))?;
    Ok(ClientSocket::Socket(Socket::Tls(Box::new(tls))))
}

/// TLS over `tcp` with native-tls (the `native-tls` feature).
#[cfg(feature = "native-tls")]
fn tls_handshake(
    conn: &Connection,
    material: &crate::kube::connection::TlsMaterial,
    tcp: TcpStream,
    ep: &Endpoint,
    deadline: Instant,
) -> Result<ClientSocket, RemoteError> {
    let connector = native_connector(material)?;
    let name = verify_name(conn)?;
    let tls = crate::http::stream::NativeTlsStream::connect(&connector, &name, tcp, deadline)
        .map_err(|e| transport("TLS handshake with", ep, e))?;
    Ok(ClientSocket::NativeTls(Box::new(tls)))
}

fn connect_tcp(ep: &Endpoint, deadline: Instant) -> Result<TcpStream, RemoteError> {
    let addrs: Vec<SocketAddr> = (ep.host.as_str(), ep.port)
        .to_socket_addrs()
        .map_err(|e| transport("resolving", ep, e))?
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
    Err(match last {
        Some(e) => transport("connecting to", ep, e),
        None => transport("connecting to", ep, "no address (or timed out)"),
    })
}

fn left(deadline: Instant) -> io::Result<Duration> {
    let l = deadline.saturating_duration_since(Instant::now());
    if l.is_zero() {
        Err(io::Error::new(io::ErrorKind::TimedOut, "timed out"))
    } else {
        Ok(l)
    }
}

/// Writes and flushes everything before `deadline`.
pub(crate) fn write_all(
    sock: &mut ClientSocket,
    mut data: &[u8],
    deadline: Instant,
) -> io::Result<()> {
    while !data.is_empty() {
        sock.set_write_timeout(Some(left(deadline)?))?;
        match sock.write(data) {
            Ok(0) => return Err(io::ErrorKind::WriteZero.into()),
            Ok(n) => data = &data[n..],
            Err(e) if timed_out(&e) || e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    loop {
        sock.set_write_timeout(Some(left(deadline)?))?;
        match sock.flush() {
            Ok(()) => return Ok(()),
            Err(e) if timed_out(&e) || e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
}

/// Appends what one read gives (0 at EOF), waiting at most until `deadline`.
fn read_some(sock: &mut ClientSocket, buf: &mut Vec<u8>, deadline: Instant) -> io::Result<usize> {
    let mut tmp = [0u8; 16 * 1024];
    loop {
        sock.set_read_timeout(Some(left(deadline)?))?;
        match sock.read(&mut tmp) {
            Ok(n) => {
                buf.extend_from_slice(&tmp[..n]);
                return Ok(n);
            }
            Err(e) if timed_out(&e) || e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
}

/// A WebSocket to any path of the API server, e.g. a pod proxy path (the
/// API server passes upgrades on to the pod): dialled with `conn`'s TLS
/// material and credentials, then the client handshake offering `offer`.
/// Returns the socket and the subprotocol the far end chose.
pub fn dial_websocket(
    conn: &Connection,
    path_and_query: &str,
    headers: &[(String, String)],
    offer: Option<&str>,
    timeout: Duration,
) -> Result<(WebSocket<ClientSocket>, Option<String>), RemoteError> {
    let ep = super::request::parse_server(&conn.server).map_err(RemoteError::InvalidRequest)?;
    let deadline = Instant::now() + timeout;
    let sock = dial(conn, &ep, deadline)?;
    let bearer = conn.credentials.bearer()?;
    let scheme = if ep.tls { "wss" } else { "ws" };
    let url = format!("{scheme}://{}{}{path_and_query}", ep.authority, ep.prefix);
    let left = deadline.saturating_duration_since(Instant::now());
    upgrade_on(sock, &url, headers, bearer.as_deref(), offer, left)
}

/// The client handshake on a connected socket (see
/// `http::ws::client_handshake`), bounded by `timeout`; `bearer` goes in
/// `Authorization` (never logged).
pub fn upgrade_on(
    sock: ClientSocket,
    url: &str,
    headers: &[(String, String)],
    bearer: Option<&str>,
    offer: Option<&str>,
    timeout: Duration,
) -> Result<(WebSocket<ClientSocket>, Option<String>), RemoteError> {
    let t = Some(timeout.max(Duration::from_millis(1)));
    sock.tcp()
        .set_read_timeout(t)
        .and_then(|()| sock.tcp().set_write_timeout(t))
        .map_err(|e| RemoteError::Transport(format!("configuring the socket: {e}")))?;
    let mut h = headers.to_vec();
    if let Some(b) = bearer {
        h.push(("Authorization".into(), format!("Bearer {b}")));
    }
    let (ws, chosen) = crate::http::ws::client_handshake(sock, url, &h, offer, MAX_MESSAGE)
        .map_err(RemoteError::Handshake)?;
    ws.get_ref()
        .tcp()
        .set_read_timeout(None)
        .and_then(|()| ws.get_ref().tcp().set_write_timeout(None))
        .map_err(|e| RemoteError::Transport(format!("configuring the socket: {e}")))?;
    Ok((ws, chosen))
}
