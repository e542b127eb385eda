//! Plain HTTP/1.1 requests and WebSocket clients to the daemon and the sim.
//! Answers are read with the crate's one response parser
//! (`kubegate::http::response`).

use crate::{SoakError, TICK};
use kubegate::http::client::close_request;
use kubegate::http::response::{parse_complete, Limits};
use serde_json::Value;
use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::time::{Duration, Instant};
use tungstenite::client::IntoClientRequest;
use tungstenite::protocol::frame::coding::CloseCode;
use tungstenite::{Message, WebSocket};

/// One HTTP/1.1 request with `Connection: close`: status and de-chunked body.
pub(crate) fn http(
    addr: &str,
    method: &str,
    path: &str,
    token: Option<&str>,
    body: Option<&[u8]>,
    timeout: Duration,
) -> Result<(u16, Vec<u8>), SoakError> {
    let sa: SocketAddr = addr
        .parse()
        .map_err(|e| SoakError::Io(format!("address {addr}: {e}")))?;
    let mut s = TcpStream::connect_timeout(&sa, timeout)
        .map_err(|e| SoakError::Io(format!("connect: {e}")))?;
    s.set_read_timeout(Some(timeout))
        .and_then(|()| s.set_write_timeout(Some(timeout)))
        .map_err(|e| SoakError::Io(format!("socket: {e}")))?;
    let bearer = token.map(|t| format!("Bearer {t}"));
    let headers: Vec<(&str, &str)> = bearer
        .iter()
        .map(|b| ("Authorization", b.as_str()))
        .collect();
    let raw = close_request(
        method,
        path,
        addr,
        &headers,
        body.map(|b| ("application/json", b)),
    );
    s.write_all(&raw)
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

pub(crate) fn ws_open(
    addr: &str,
    token: &str,
    path: &str,
    protocol: &str,
) -> Result<WebSocket<TcpStream>, SoakError> {
    let mut req = format!("ws://{addr}{path}")
        .into_client_request()
        .map_err(|e| SoakError::Answer(format!("request: {e}")))?;
    let h = req.headers_mut();
    h.insert(
        "Authorization",
        format!("Bearer {token}")
            .parse()
            .map_err(|_| SoakError::Answer("token is not a header value".into()))?,
    );
    h.insert(
        "Sec-WebSocket-Protocol",
        protocol
            .parse()
            .map_err(|_| SoakError::Answer("bad subprotocol".into()))?,
    );
    let sa: SocketAddr = addr
        .parse()
        .map_err(|e| SoakError::Io(format!("address {addr}: {e}")))?;
    let tcp = TcpStream::connect_timeout(&sa, Duration::from_secs(10))
        .map_err(|e| SoakError::Io(format!("connect: {e}")))?;
    tcp.set_read_timeout(Some(Duration::from_secs(30)))
        .and_then(|()| tcp.set_write_timeout(Some(Duration::from_secs(10))))
        .and_then(|()| tcp.set_nodelay(true))
        .map_err(|e| SoakError::Io(format!("socket: {e}")))?;
    match tungstenite::client::client(req, tcp) {
        Ok((ws, _)) => {
            ws.get_ref()
                .set_read_timeout(Some(TICK))
                .map_err(|e| SoakError::Io(format!("socket: {e}")))?;
            Ok(ws)
        }
        Err(tungstenite::HandshakeError::Failure(tungstenite::Error::Http(resp))) => {
            let status = resp.status().as_u16();
            let body = resp.into_body().unwrap_or_default();
            Err(SoakError::Answer(error_code(status, &body)))
        }
        Err(e) => Err(SoakError::Answer(format!("handshake: {e}"))),
    }
}

/// What one read of a client socket gave.
pub(crate) enum Got {
    Msg(Message),
    /// Nothing within the tick.
    Idle,
    /// The peer closed (code) or the connection broke.
    Closed(Option<u16>, String),
}

pub(crate) fn ws_read(ws: &mut WebSocket<TcpStream>) -> Got {
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
pub(crate) fn ws_close(mut ws: WebSocket<TcpStream>) {
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
