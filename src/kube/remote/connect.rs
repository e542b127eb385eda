//! Opening the socket to a cluster: the TLS settings a [`Connection`]
//! asks for (our rustls config, or native-tls under the `native-tls`
//! feature, including `tls-server-name` and an exec plugin's client
//! certificate) handed to `http`'s client half ([`crate::http::client`]:
//! TCP, TLS, the exchange, all under ONE deadline so a silent server cannot
//! hang the caller), the upgrade from `handshake`, and the retry of an
//! upgrade the server refused before anything ran. Blocking I/O on the
//! calling thread; the socket then goes to the pump thread and is never
//! touched here again.
//!
//! Timeouts are socket timeouts set per read/write from the time left, and
//! cleared once the 101 is in (docs/crates.md#tungstenite: a socket timeout must not outlive
//! the handshake).

use super::error::RemoteError;
use super::handshake::{self, UpgradeRequest};
use crate::http::client::{self as http_client, ClientTls, DialError, UpgradeError, WsOpenError};
use crate::http::endpoint::{parse_server, Endpoint};
use crate::http::response::{Head, Limits};
use crate::http::stream::ClientSocket;
use crate::kube::channel::Protocol;
use crate::kube::client::backoff::Backoff;
use crate::kube::connection::Connection;
use crate::kube::status::Status;
use crate::kube::tls_client::TlsError;
#[cfg(not(feature = "native-tls"))]
use crate::kube::tls_client::{cached_client_config, server_name};
#[cfg(feature = "native-tls")]
use crate::kube::tls_client::{native_connector, verify_name};
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};
use tungstenite::handshake::client::generate_key;
use tungstenite::protocol::WebSocketConfig;
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

fn transport(e: DialError) -> RemoteError {
    match e {
        DialError::TlsSetup(m) => RemoteError::Tls(TlsError(format!("TLS setup: {m}"))),
        DialError::Response(e) => RemoteError::Handshake(UpgradeError::Head(e)),
        other => RemoteError::Transport(other.to_string()),
    }
}

/// Upgrades repeated after an answer that says nothing ran: at most this
/// many, and all within the caller's connect deadline (the REST client's
/// policy, `kube::client::rest::RetryPolicy`).
const MAX_RETRIES: u32 = 5;
/// Largest `Retry-After` honoured; a server asking for more gets its error
/// passed on.
const MAX_RETRY_AFTER: Duration = Duration::from_secs(30);

/// Upgrades repeated by [`open`] in this process (the daemon's
/// `kubegate_api_retries_total` adds them to the REST client's).
static RETRIES: AtomicU64 = AtomicU64::new(0);

/// Upgrades [`open`] repeated so far in this process.
pub fn retries_total() -> u64 {
    RETRIES.load(Ordering::Relaxed)
}

/// Opens the stream at `path_and_query` on `ep`, offering `offer`.
///
/// An attempt the server cannot have acted on is repeated while the
/// deadline allows: a TCP connect that failed (nothing was sent; an API
/// server restarting refuses connections), and a 429 or 503 answer with a
/// `Retry-After` (the server asks for it; the API server's priority and
/// fairness filter answers 429 before any handler runs). Nothing else is:
/// once an upgrade was sent and not refused that way, the process may have
/// started.
pub fn open(
    conn: &Connection,
    ep: &Endpoint,
    path_and_query: &str,
    offer: &[Protocol],
    timeout: Duration,
    read_buffer: Option<usize>,
) -> Result<Opened, RemoteError> {
    let deadline = Instant::now() + timeout;
    let mut backoff = Backoff::new(
        Duration::from_millis(200),
        Duration::from_secs(5),
        1.0,
        Duration::from_secs(3600),
    );
    let mut retries = 0;
    loop {
        let (err, wait) = match open_once(conn, ep, path_and_query, offer, deadline, read_buffer) {
            Ok(o) => return Ok(o),
            Err(Attempt::Final(e)) => return Err(e),
            Err(Attempt::NotSent(e)) => {
                let w = backoff.next_delay();
                (e, Some(w))
            }
            Err(Attempt::Refused(e)) => {
                let w = match &e {
                    RemoteError::Api {
                        code: 429 | 503,
                        status,
                    } => status
                        .retry_after_seconds()
                        .map(|s| Duration::from_secs(u64::from(s)))
                        .filter(|w| *w <= MAX_RETRY_AFTER),
                    _ => None,
                };
                (e, w)
            }
        };
        match wait {
            Some(w) if retries < MAX_RETRIES && Instant::now() + w < deadline => {
                log::debug!("upgrade to {}: {err}; again in {w:?}", ep.authority);
                retries += 1;
                RETRIES.fetch_add(1, Ordering::Relaxed);
                std::thread::sleep(w);
            }
            _ => return Err(err),
        }
    }
}

/// How one upgrade attempt failed.
enum Attempt {
    /// The TCP connect failed: nothing reached the server.
    NotSent(RemoteError),
    /// The server answered with an HTTP error (nothing ran).
    Refused(RemoteError),
    /// Anything else.
    Final(RemoteError),
}

fn open_once(
    conn: &Connection,
    ep: &Endpoint,
    path_and_query: &str,
    offer: &[Protocol],
    deadline: Instant,
    read_buffer: Option<usize>,
) -> Result<Opened, Attempt> {
    let bearer = conn
        .credentials
        .bearer()
        .map_err(|e| Attempt::Final(e.into()))?;
    let tls = client_tls(conn, ep).map_err(Attempt::Final)?;
    let tcp = http_client::connect_tcp(ep, deadline).map_err(|e| Attempt::NotSent(transport(e)))?;
    let mut sock = http_client::secure(tcp, tls.as_ref(), ep, deadline)
        .map_err(|e| Attempt::Final(transport(e)))?;

    let key = generate_key();
    let extra = conn.impersonation_headers();
    let req = handshake::encode_request(&UpgradeRequest {
        path_and_query,
        authority: &ep.authority,
        key: &key,
        offer,
        bearer: bearer.as_deref(),
        extra: &extra,
    });
    http_client::write_all(&mut sock, &req, deadline).map_err(|source| {
        Attempt::Final(transport(DialError::Io {
            what: "sending the upgrade to",
            authority: ep.authority.clone(),
            source,
        }))
    })?;
    let (head, rest) = read_head(&mut sock, ep, deadline).map_err(Attempt::Final)?;

    if head.code == 101 {
        let protocol = handshake::check_switch(&head, &key, offer)
            .map_err(|e| Attempt::Final(RemoteError::Handshake(e)))?;
        let ws = into_websocket(sock, rest, ep, read_buffer).map_err(Attempt::Final)?;
        return Ok(Opened { ws, protocol });
    }

    let body = read_body(&mut sock, &head, &rest, deadline);
    if head.code == 401 {
        conn.credentials.invalidate();
    }
    let mut status =
        Status::from_response(head.code, head.header("content-type").unwrap_or(""), &body);
    if let Some(ra) = head.header("retry-after") {
        status.set_retry_after_header(ra);
    }
    sock.send_close_notify();
    Err(Attempt::Refused(RemoteError::Api {
        code: head.code,
        status: Box::new(status),
    }))
}

/// The TLS settings for `ep` from `conn`'s material (and the credentials'
/// client certificate, e.g. an exec plugin's); none for an http endpoint.
/// Also the command-line client's, built once for its daemon.
pub fn client_tls(conn: &Connection, ep: &Endpoint) -> Result<Option<ClientTls>, RemoteError> {
    if !ep.tls {
        return Ok(None);
    }
    let mut material = conn.tls.clone();
    if let Some(cc) = conn.credentials.client_cert()? {
        material.client_cert = Some(cc);
    }
    #[cfg(not(feature = "native-tls"))]
    let tls = ClientTls::Rustls {
        config: cached_client_config(&material)?,
        name: server_name(conn)?,
    };
    #[cfg(feature = "native-tls")]
    let tls = ClientTls::Native {
        connector: native_connector(&material)?,
        name: verify_name(conn)?,
    };
    Ok(Some(tls))
}

/// TCP (no Nagle: keystrokes and small frames must not wait) and, for an
/// https endpoint, TLS with `conn`'s material, before `deadline`. Shared
/// with the pod-access client (its raw sockets to the API server).
pub(crate) fn dial(
    conn: &Connection,
    ep: &Endpoint,
    deadline: Instant,
) -> Result<ClientSocket, RemoteError> {
    let tls = client_tls(conn, ep)?;
    http_client::dial(ep, tls.as_ref(), deadline).map_err(transport)
}

/// [`http_client::read_head`] with the default limits, its errors as
/// [`RemoteError`]s.
fn read_head(
    sock: &mut ClientSocket,
    ep: &Endpoint,
    deadline: Instant,
) -> Result<(Head, Vec<u8>), RemoteError> {
    http_client::read_head(sock, ep, &Limits::default(), deadline).map_err(transport)
}

/// The whole body of a non-101 answer, bounded by [`handshake::MAX_BODY`]
/// (see [`http_client::read_body`]).
fn read_body(sock: &mut ClientSocket, head: &Head, rest: &[u8], deadline: Instant) -> Vec<u8> {
    http_client::read_body(sock, head, rest, handshake::MAX_BODY, deadline)
}

/// The socket after a checked 101, as a client WebSocket with
/// [`ws_config`] (and `read_buffer` when given).
fn into_websocket(
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
    http_client::into_websocket(sock, rest, ep, config).map_err(transport)
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
    let ep = parse_server(&conn.server).map_err(|e| RemoteError::InvalidRequest(e.to_string()))?;
    let deadline = Instant::now() + timeout;
    let sock = dial(conn, &ep, deadline)?;
    let bearer = conn.credentials.bearer()?;
    let scheme = if ep.tls { "wss" } else { "ws" };
    let url = format!("{scheme}://{}{}{path_and_query}", ep.authority, ep.prefix);
    let left = deadline.saturating_duration_since(Instant::now());
    let mut headers = headers.to_vec();
    headers.extend(conn.impersonation_headers());
    upgrade_on(sock, &url, &headers, bearer.as_deref(), offer, left)
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
    let mut h = headers.to_vec();
    if let Some(b) = bearer {
        h.push(("Authorization".into(), format!("Bearer {b}")));
    }
    http_client::websocket_on(sock, url, &h, offer, MAX_MESSAGE, timeout).map_err(|e| match e {
        WsOpenError::Socket(e) => RemoteError::Transport(format!("configuring the socket: {e}")),
        WsOpenError::Upgrade(e) => RemoteError::Handshake(e),
    })
}
