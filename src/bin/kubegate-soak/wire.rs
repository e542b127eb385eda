//! Plain HTTP/1.1 requests and WebSocket clients to the daemon and the sim,
//! on the crate's one client path: sockets from `kubegate::http::client`
//! (its dial, its upgrade request and 101 checks), answers read with the
//! one response parser (`kubegate::http::response`).

use crate::{SoakError, TICK};
use kubegate::http::client::{self as http_client, check_accept, close_request, upgrade_request};
use kubegate::http::endpoint::{parse_server, Endpoint};
use kubegate::http::response::{parse_complete, Limits};
use kubegate::http::stream::ClientSocket;
use serde_json::Value;
use std::io::{Read, Write};
use std::time::{Duration, Instant};
use tungstenite::handshake::client::generate_key;
use tungstenite::protocol::frame::coding::CloseCode;
use tungstenite::protocol::WebSocketConfig;
use tungstenite::{Message, WebSocket};

/// Longest wait for a WebSocket's TCP connect and for writing its upgrade;
/// a socket's write timeout once it is open.
const WS_CONNECT: Duration = Duration::from_secs(10);
/// Longest wait for the answer to an upgrade.
const WS_ANSWER: Duration = Duration::from_secs(30);
/// Most bytes of a refused upgrade's body read (the daemon's JSON error).
const MAX_ERROR_BODY: usize = 64 * 1024;

/// A plain TCP connection (no Nagle) to `addr` (`IP:PORT`), connected
/// within `timeout`, through the crate's one client dial; the endpoint too
/// (its authority is the `Host`).
pub(crate) fn dial(addr: &str, timeout: Duration) -> Result<(Endpoint, ClientSocket), SoakError> {
    let ep = parse_server(&format!("http://{addr}"))
        .map_err(|e| SoakError::Io(format!("address {addr}: {e}")))?;
    let sock = http_client::dial(&ep, None, Instant::now() + timeout)
        .map_err(|e| SoakError::Io(format!("connect: {e}")))?;
    Ok((ep, sock))
}

/// One HTTP/1.1 request with `Connection: close`: status and de-chunked body.
/// `timeout` bounds the connect and each read and write.
pub(crate) fn http(
    addr: &str,
    method: &str,
    path: &str,
    token: Option<&str>,
    body: Option<&[u8]>,
    timeout: Duration,
) -> Result<(u16, Vec<u8>), SoakError> {
    let (ep, mut s) = dial(addr, timeout)?;
    s.tcp()
        .set_read_timeout(Some(timeout))
        .and_then(|()| s.tcp().set_write_timeout(Some(timeout)))
        .map_err(|e| SoakError::Io(format!("socket: {e}")))?;
    let bearer = token.map(|t| format!("Bearer {t}"));
    let headers: Vec<(&str, &str)> = bearer
        .iter()
        .map(|b| ("Authorization", b.as_str()))
        .collect();
    let raw = close_request(
        method,
        path,
        &ep.authority,
        &headers,
        body.map(|b| ("application/json", b)),
    );
    s.write_all(&raw)
        .and_then(|()| s.flush())
        .map_err(|e| SoakError::Io(format!("write: {e}")))?;
    let mut resp = Vec::new();
    s.read_to_end(&mut resp)
        .map_err(|e| SoakError::Io(format!("read: {e}")))?;
    parse_response(&resp)
}

/// Status and de-framed body of a whole `Connection: close` answer, read
/// with the crate's one response parser.
pub(crate) fn parse_response(resp: &[u8]) -> Result<(u16, Vec<u8>), SoakError> {
    let (head, body) =
        parse_complete(resp, &Limits::default()).map_err(|e| SoakError::Answer(e.to_string()))?;
    Ok((head.code, body))
}

pub(crate) fn json_of(b: &[u8]) -> Value {
    serde_json::from_slice(b)
        .unwrap_or_else(|_| Value::String(String::from_utf8_lossy(b).into_owned()))
}

/// `CODE: message` of a daemon error answer (`{"error": {"code", "message"}}`).
pub(crate) fn error_code(status: u16, body: &[u8]) -> String {
    let v = json_of(body);
    match v["error"]["code"].as_str() {
        Some(c) => format!("{c}: {}", v["error"]["message"].as_str().unwrap_or("")),
        None => format!("HTTP {status}"),
    }
}

// --------------------------------------------------------------- sockets

/// A WebSocket to the daemon's `path` offering `protocol` only, with the
/// token: connected and upgraded through `kubegate::http::client` (the
/// connect and the request within [`WS_CONNECT`], the answer within
/// [`WS_ANSWER`]); then reads time out every [`TICK`] and writes after
/// [`WS_CONNECT`]. A refusal is the daemon's `CODE: message`.
pub(crate) fn ws_open(
    addr: &str,
    token: &str,
    path: &str,
    protocol: &str,
) -> Result<WebSocket<ClientSocket>, SoakError> {
    let (ep, mut sock) = dial(addr, WS_CONNECT)?;
    let key = generate_key();
    let auth = format!("Bearer {token}");
    let req = upgrade_request(
        path,
        &ep.authority,
        &key,
        Some(protocol),
        &[("Authorization", &auth)],
    );
    http_client::write_all(&mut sock, &req, Instant::now() + WS_CONNECT)
        .map_err(|e| SoakError::Io(format!("write: {e}")))?;
    let deadline = Instant::now() + WS_ANSWER;
    let handshake = |e: &dyn std::fmt::Display| SoakError::Answer(format!("handshake: {e}"));
    let (head, rest) = http_client::read_head(&mut sock, &ep, &Limits::default(), deadline)
        .map_err(|e| handshake(&e))?;
    if head.code != 101 {
        let body = http_client::read_body(&mut sock, &head, &rest, MAX_ERROR_BODY, deadline);
        return Err(SoakError::Answer(error_code(head.code, &body)));
    }
    check_accept(&head, &key).map_err(|e| handshake(&e))?;
    let chosen: Vec<&str> = head.values("sec-websocket-protocol").collect();
    if chosen != [protocol] {
        return Err(handshake(&format_args!(
            "the daemon chose the subprotocols {chosen:?}, not {protocol}"
        )));
    }
    let ws = http_client::into_websocket(sock, rest, &ep, WebSocketConfig::default())
        .map_err(|e| handshake(&e))?;
    let tcp = ws.get_ref().tcp();
    tcp.set_read_timeout(Some(TICK))
        .and_then(|()| tcp.set_write_timeout(Some(WS_CONNECT)))
        .map_err(|e| SoakError::Io(format!("socket: {e}")))?;
    Ok(ws)
}

/// What one read of a client socket gave.
pub(crate) enum Got {
    Msg(Message),
    /// Nothing within the tick.
    Idle,
    /// The peer closed (code) or the connection broke.
    Closed(Option<u16>, String),
}

pub(crate) fn ws_read(ws: &mut WebSocket<ClientSocket>) -> Got {
    match ws.read() {
        Ok(Message::Close(f)) => Got::Closed(
            f.as_ref().map(|f| u16::from(f.code)),
            f.map(|f| f.reason.to_string()).unwrap_or_default(),
        ),
        Ok(m) => Got::Msg(m),
        Err(tungstenite::Error::Io(e))
            if matches!(
                e.kind(),
                std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
            ) =>
        {
            Got::Idle
        }
        Err(e) => Got::Closed(None, e.to_string()),
    }
}

/// Our side's close: a Close frame and a short wait for the answer.
pub(crate) fn ws_close(mut ws: WebSocket<ClientSocket>) {
    let _ = ws.close(Some(tungstenite::protocol::CloseFrame {
        code: CloseCode::Normal,
        reason: "".into(),
    }));
    let deadline = Instant::now() + Duration::from_secs(2);
    while Instant::now() < deadline {
        match ws_read(&mut ws) {
            Got::Closed(..) => break,
            Got::Idle | Got::Msg(_) => {}
        }
    }
}
