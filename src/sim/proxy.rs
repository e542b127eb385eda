//! `pods/{name}:{port}/proxy/{path}`: forwards one HTTP request to a port of
//! a pod (its loopback pod IP) and streams the answer back, chunk by chunk,
//! so long-lived responses (SSE, watches) flow as they are produced. Like
//! the real API server, a refused connection is a 503 Status naming the
//! address.

use crate::http::{Body, ChunkSink, Reply, Request, Response, Upgrade};
use crate::kube::status::Status;
use std::io::{BufRead, BufReader, Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::time::Duration;

const HOP_BY_HOP: &[&str] = &[
    "connection",
    "keep-alive",
    "proxy-connection",
    "transfer-encoding",
    "upgrade",
    "te",
    "trailer",
    "host",
    "content-length",
    "authorization",
    "accept-encoding",
];

fn unavailable(msg: &str) -> Response {
    let s = Status::service_unavailable(msg);
    Response::json(503, s.to_json())
}

/// A WebSocket upgrade through the proxy (the real API server passes
/// upgrades on too): the pod's side is opened first, with the client's
/// subprotocol offer, then the client's is accepted with the protocol the
/// pod chose, and messages are bridged both ways (`http::ws::bridge`).
pub fn forward_websocket(req: &Request, ip: &str, port: u16, path: &str) -> Reply {
    let addr: SocketAddr = match format!("{ip}:{port}").parse() {
        Ok(a) => a,
        Err(_) => return unavailable(&format!("invalid pod address {ip}:{port}")).into(),
    };
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
    let mut target = if path.is_empty() {
        "/".to_string()
    } else {
        path.to_string()
    };
    if let Some(q) = req.target.split_once('?').map(|(_, q)| q) {
        target.push('?');
        target.push_str(q);
    }
    let headers: Vec<(String, String)> = req
        .headers
        .iter()
        .filter(|(k, _)| {
            let k = k.to_ascii_lowercase();
            !HOP_BY_HOP.contains(&k.as_str()) && !crate::http::ws::is_handshake_header(&k)
        })
        .cloned()
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

/// Forwards `req` to `ip:port` with `path` (already stripped of the proxy prefix).
pub fn forward(req: &Request, ip: &str, port: u16, path: &str) -> Response {
    let addr: SocketAddr = match format!("{ip}:{port}").parse() {
        Ok(a) => a,
        Err(_) => return unavailable(&format!("invalid pod address {ip}:{port}")),
    };
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
    let mut target = if path.is_empty() {
        "/".to_string()
    } else {
        path.to_string()
    };
    if let Some(q) = req.target.split_once('?').map(|(_, q)| q) {
        target.push('?');
        target.push_str(q);
    }
    let mut head = format!(
        "{} {} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n",
        req.method, target
    );
    for (k, v) in &req.headers {
        if !HOP_BY_HOP.contains(&k.as_str()) {
            head.push_str(&format!("{k}: {v}\r\n"));
        }
    }
    head.push_str(&format!("Content-Length: {}\r\n\r\n", req.body.len()));
    if let Err(e) = stream
        .write_all(head.as_bytes())
        .and_then(|_| stream.write_all(&req.body))
    {
        return unavailable(&format!("error trying to reach service: {e}"));
    }
    let mut reader = BufReader::new(stream);
    let mut raw = Vec::new();
    // Read the response head (bounded).
    loop {
        let mut line = Vec::new();
        match reader.by_ref().take(16 * 1024).read_until(b'\n', &mut line) {
            Ok(0) => return unavailable("error trying to reach service: EOF before a response"),
            Ok(_) => {}
            Err(e) => return unavailable(&format!("error trying to reach service: {e}")),
        }
        raw.extend_from_slice(&line);
        if line == b"\r\n" || line == b"\n" {
            break;
        }
        if raw.len() > 64 * 1024 {
            return unavailable("error trying to reach service: response head too large");
        }
    }
    let mut headers = [httparse::EMPTY_HEADER; 64];
    let mut resp = httparse::Response::new(&mut headers);
    let code = match resp.parse(&raw) {
        Ok(httparse::Status::Complete(_)) => resp.code.unwrap_or(502),
        _ => return unavailable("error trying to reach service: malformed response"),
    };
    let mut out_headers = Vec::new();
    let mut length: Option<u64> = None;
    let mut chunked = false;
    for h in resp.headers.iter() {
        let name = h.name.to_ascii_lowercase();
        let value = String::from_utf8_lossy(h.value).trim().to_string();
        if name == "content-length" {
            length = value.parse().ok();
        } else if name == "transfer-encoding" {
            chunked = value.to_ascii_lowercase().contains("chunked");
        }
        if !HOP_BY_HOP.contains(&name.as_str()) {
            out_headers.push((h.name.to_string(), value));
        }
    }
    // A sized answer stays sized, as the API server's proxy keeps the
    // pod's Content-Length (read whole when small; longer ones stream).
    if let (false, Some(n)) = (chunked, length.filter(|n| *n <= 1 << 20)) {
        let mut data = Vec::new();
        if let Err(e) = reader.by_ref().take(n).read_to_end(&mut data) {
            return unavailable(&format!("error reading from the pod: {e}"));
        }
        return Response {
            status: code,
            headers: out_headers,
            body: Body::Bytes(data),
        };
    }
    let body = Body::Stream(Box::new(move |sink: &mut dyn ChunkSink| {
        if chunked {
            copy_chunked(&mut reader, sink)
        } else {
            let mut r: Box<dyn Read> = match length {
                Some(n) => Box::new(reader.take(n)),
                None => Box::new(reader),
            };
            let mut buf = vec![0u8; 32 * 1024];
            loop {
                let n = r.read(&mut buf)?;
                if n == 0 {
                    return Ok(());
                }
                sink.send(&buf[..n])?;
            }
        }
    }));
    Response {
        status: code,
        headers: out_headers,
        body,
    }
}

/// De-chunks an upstream chunked body and re-sends each chunk.
fn copy_chunked<R: BufRead>(r: &mut R, sink: &mut dyn ChunkSink) -> std::io::Result<()> {
    loop {
        let mut line = String::new();
        if r.by_ref().take(1024).read_line(&mut line)? == 0 {
            return Ok(());
        }
        let size_str = line.trim().split(';').next().unwrap_or("");
        let size = u64::from_str_radix(size_str, 16)
            .map_err(|_| std::io::Error::new(std::io::ErrorKind::InvalidData, "bad chunk size"))?;
        if size == 0 {
            return Ok(());
        }
        let mut left = size;
        let mut buf = vec![0u8; 32 * 1024];
        while left > 0 {
            let want = (left as usize).min(buf.len());
            let n = r.read(&mut buf[..want])?;
            if n == 0 {
                return Ok(());
            }
            sink.send(&buf[..n])?;
            left -= n as u64;
        }
        let mut crlf = String::new();
        r.read_line(&mut crlf)?;
    }
}
