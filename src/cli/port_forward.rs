//! `kubegate port-forward SESSION PORT [LOCAL]`: a local HTTP listener on
//! 127.0.0.1 whose requests go through the daemon's port proxy
//! (`…/v1/sessions/{id}/ports/{port}/{path}`, docs/api.md#sessions).
//!
//! The proxy is HTTP-level, not a TCP tunnel: each connection carries ONE
//! request (its head and body read whole, at most [`MAX_BODY`]), sent to
//! the daemon with the token and `Connection: close`; the answer's head is
//! passed on with `Connection: close` in place of its connection headers,
//! then its body is copied as it comes until the daemon closes.
//! WebSocket upgrades are bridged through the daemon's port proxy route;
//! other upgrades get 501.
//!
//! Threads: main (accept; at most [`MAX_CONNECTIONS`] connections at once,
//! more wait in the listen backlog), one `kubegate-pf-conn` per connection,
//! `kubegate-pf-signals` (SIGINT/SIGTERM/SIGHUP: stop accepting, give the
//! connections under way up to [`DRAIN`] to finish, exit 0).

use super::args::PortForwardArgs;
use super::net::Client;
use super::{local_io, CliError};
use crate::exit::codes;
use crate::http::hop::end_to_end_headers;
use crate::http::parse::{parse_head, BodyKind};
use crate::http::response::{reason, BodyDecoder, Framing};
use crate::http::HttpError;
use crossbeam_channel::{bounded, Receiver, Sender};
use std::io::{self, Read, Write};
use std::net::{TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// Connections served at once.
pub const MAX_CONNECTIONS: usize = 64;
/// Largest request body forwarded (the daemon has its own, smaller, limit).
pub const MAX_BODY: usize = 16 << 20;
/// Largest request head.
const MAX_HEAD: usize = 64 * 1024;
/// A client must send its request within this: 30 s.
const REQUEST_TIMEOUT: Duration = Duration::from_secs(30);
/// Connect + request + the answer's head from the daemon: 90 s (the daemon
/// answers once the pod has answered whole; its own limit is 60 s).
const ANSWER_TIMEOUT: Duration = Duration::from_secs(90);
/// A pause this long in the answer's body ends the copy: 60 s.
const BODY_IDLE: Duration = Duration::from_secs(60);
/// On a stop, how long connections under way may still run.
const DRAIN: Duration = Duration::from_secs(5);

pub fn run(a: &PortForwardArgs) -> Result<(), CliError> {
    let client = Arc::new(Client::new(&a.common)?);
    // The session must exist (and be ours) before we listen.
    let body = client.get(&format!("/v1/sessions/{}", a.session))?;
    let view: serde_json::Value = serde_json::from_slice(&body).map_err(|e| {
        CliError::new(
            codes::PROTOCOL,
            format!("the daemon's session does not decode: {e}"),
        )
    })?;
    let declared = view["apps"].as_array().is_some_and(|apps| {
        apps.iter().any(|app| {
            app["ports"].as_array().is_some_and(|ps| {
                ps.iter()
                    .any(|p| p["port"] == a.port && p["protocol"] != "udp")
            })
        })
    });
    if !declared {
        eprintln!(
            "kubegate: warning: session {} declares no tcp port {} now; requests get the daemon's NOT_FOUND until an app declares it",
            a.session, a.port
        );
    }

    let listener = TcpListener::bind(("127.0.0.1", a.local)).map_err(|e| {
        CliError::new(
            codes::LOCAL_IO,
            format!("listening on 127.0.0.1:{}: {e}", a.local),
        )
    })?;
    let local = listener
        .local_addr()
        .map_err(|e| local_io("the listening address", e))?;
    {
        let mut out = io::stdout().lock();
        writeln!(
            out,
            "Forwarding from 127.0.0.1:{} -> session {} port {}",
            local.port(),
            a.session,
            a.port
        )
        .and_then(|()| out.flush())
        .map_err(|e| local_io("writing stdout", e))?;
    }

    let stop = Arc::new(AtomicBool::new(false));
    let mut signals = signal_hook::iterator::Signals::new([
        signal_hook::consts::SIGINT,
        signal_hook::consts::SIGTERM,
        signal_hook::consts::SIGHUP,
    ])
    .map_err(|e| local_io("installing signal handlers", e))?;
    {
        let stop = stop.clone();
        std::thread::Builder::new()
            .name("kubegate-pf-signals".into())
            .spawn(move || {
                if signals.forever().next().is_some() {
                    stop.store(true, Ordering::SeqCst);
                    // Wake the accept.
                    let _ = TcpStream::connect_timeout(&local, Duration::from_secs(1));
                }
            })
            .map_err(|e| local_io("spawning the signal thread", e))?;
    }

    // Each connection thread says when it is done; `active` counts the
    // others. At the limit the accept loop waits for one to end.
    let (done_tx, done_rx): (Sender<()>, Receiver<()>) = bounded(MAX_CONNECTIONS);
    let mut active = 0usize;
    let prefix = client.path(&format!("/v1/sessions/{}/ports/{}", a.session, a.port));
    for conn in listener.incoming() {
        if stop.load(Ordering::SeqCst) {
            break;
        }
        let sock = match conn {
            Ok(s) => s,
            Err(e) => {
                eprintln!("kubegate: warning: accepting a connection: {e}");
                continue;
            }
        };
        while done_rx.try_recv().is_ok() {
            active -= 1;
        }
        while active >= MAX_CONNECTIONS && !stop.load(Ordering::SeqCst) {
            if done_rx.recv_timeout(Duration::from_millis(200)).is_ok() {
                active -= 1;
            }
        }
        if stop.load(Ordering::SeqCst) {
            break;
        }
        let (client, prefix, done) = (client.clone(), prefix.clone(), done_tx.clone());
        let spawned = std::thread::Builder::new()
            .name("kubegate-pf-conn".into())
            .spawn(move || {
                serve(&client, &prefix, sock);
                let _ = done.send(());
            });
        match spawned {
            Ok(_) => active += 1,
            Err(e) => eprintln!("kubegate: warning: spawning a connection thread: {e}"),
        }
    }
    // Stopping: connections under way get a moment to finish.
    let deadline = Instant::now() + DRAIN;
    while active > 0 && done_rx.recv_deadline(deadline).is_ok() {
        active -= 1;
    }
    Ok(())
}

/// A client's request, read whole.
struct Request {
    method: String,
    target: String,
    headers: Vec<(String, String)>,
    body: Vec<u8>,
}

/// Why a request cannot be forwarded: an answer for the client.
struct Refusal {
    status: u16,
    message: String,
}

fn refusal(status: u16, message: impl Into<String>) -> Refusal {
    Refusal {
        status,
        message: message.into(),
    }
}

/// One connection: one request, one answer, close.
fn serve(client: &Client, prefix: &str, mut sock: TcpStream) {
    let _ = sock.set_nodelay(true);
    let _ = sock.set_read_timeout(Some(REQUEST_TIMEOUT));
    let _ = sock.set_write_timeout(Some(BODY_IDLE));
    let req = match read_request(&mut sock) {
        Ok(Some(r)) => r,
        Ok(None) => return, // closed without a request (a probe, our own wake-up)
        Err(r) => return answer_refusal(&mut sock, &r),
    };
    if crate::http::ws::wants_websocket(&req.headers) {
        return forward_websocket(client, prefix, &req, sock);
    }
    if let Err(r) = forward(client, prefix, &req, &mut sock) {
        eprintln!(
            "kubegate: {} {}: {}",
            req.method,
            req.target,
            r.message.trim_end()
        );
        answer_refusal(&mut sock, &r);
    }
}

/// A WebSocket: the daemon's side first (its port proxy route bridges to
/// the app), offering the client's subprotocols; then the client's
/// handshake is answered with the subprotocol the app chose, and messages
/// are bridged both ways until either side ends.
fn forward_websocket(client: &Client, prefix: &str, req: &Request, mut sock: TcpStream) {
    let header = |name: &str| {
        req.headers
            .iter()
            .find(|(k, _)| k.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
    };
    let Some(key) = header("sec-websocket-key") else {
        return answer_refusal(
            &mut sock,
            &refusal(400, "a WebSocket upgrade without Sec-WebSocket-Key"),
        );
    };
    let headers: Vec<(String, String)> = end_to_end_headers(&req.headers, &["authorization"])
        .into_iter()
        .filter(|(k, _)| !crate::http::ws::is_handshake_header(k))
        .collect();
    let path = format!("{prefix}{}", req.target);
    let (upstream, chosen) =
        match client.open_ws_any(&path, &headers, header("sec-websocket-protocol")) {
            Ok(x) => x,
            Err(e) => {
                eprintln!("kubegate: GET {}: {e}", req.target);
                return answer_refusal(&mut sock, &refusal(502, e.to_string()));
            }
        };
    if crate::http::ws::write_accept(&mut sock, key, chosen.as_deref(), &[]).is_err() {
        return;
    }
    let _ = sock.set_read_timeout(None);
    let _ = sock.set_write_timeout(None);
    let local = tungstenite::WebSocket::from_raw_socket(
        sock,
        tungstenite::protocol::Role::Server,
        Some(crate::kube::remote::connect::ws_config()),
    );
    if let Err(e) =
        crate::http::ws::bridge_sockets(local, upstream, crate::http::ws::WsOptions::default())
    {
        eprintln!("kubegate: GET {}: {e}", req.target);
    }
}

fn answer_refusal(sock: &mut TcpStream, r: &Refusal) {
    let body = format!("kubegate: {}\n", r.message.trim_end());
    let head = format!(
        "HTTP/1.1 {} {}\r\nContent-Type: text/plain; charset=utf-8\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
        r.status,
        reason(r.status),
        body.len()
    );
    let _ = sock
        .write_all(head.as_bytes())
        .and_then(|()| sock.write_all(body.as_bytes()))
        .and_then(|()| sock.flush());
}

/// Reads the request head (the crate's request parser, lenient about
/// line ends as httparse is) and its whole body. `Ok(None)`: the client
/// closed before sending anything.
fn read_request(sock: &mut TcpStream) -> Result<Option<Request>, Refusal> {
    let mut buf = Vec::with_capacity(4096);
    let mut chunk = [0u8; 16 * 1024];
    let bad = |m: String| refusal(400, m);
    let head = loop {
        match parse_head(&buf, MAX_HEAD, false) {
            Ok(Some(head)) => break head,
            Ok(None) => {}
            Err(HttpError::HeadersTooLarge) => {
                return Err(refusal(431, "the request head is larger than 64 KiB"))
            }
            Err(HttpError::BadRequest(m)) => {
                return Err(bad(format!("the request does not parse: {m}")))
            }
            Err(e) => return Err(bad(format!("the request does not parse: {e:?}"))),
        }
        match sock.read(&mut chunk) {
            Ok(0) if buf.is_empty() => return Ok(None),
            Ok(0) => return Err(bad("the request ended inside its head".into())),
            Ok(n) => buf.extend_from_slice(&chunk[..n]),
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(_) if buf.is_empty() => return Ok(None),
            Err(e) => return Err(bad(format!("reading the request: {e}"))),
        }
    };
    let (method, target, headers) = (head.method, head.target, head.headers);
    let websocket = crate::http::ws::wants_websocket(&headers);
    if headers.iter().any(|(k, _)| k == "upgrade") && !(websocket && method == "GET") {
        return Err(refusal(501, "only WebSocket upgrades (GET) are forwarded"));
    }
    // Origin form (`/path?q`); an absolute form (a proxy-style request)
    // keeps its path.
    let target = if target.starts_with('/') {
        target
    } else if let Some(rest) = target.split_once("://").map(|(_, r)| r) {
        match rest.find('/') {
            Some(i) => rest[i..].to_string(),
            None => "/".to_string(),
        }
    } else {
        return Err(bad(format!("request target {target:?} is not a path")));
    };
    let mut rest = buf[head.len..].to_vec();
    let too_large = || refusal(413, "the request body is larger than 16 MiB");
    let body = match head.body {
        BodyKind::Chunked => {
            // De-framed as it arrives, each byte once (a 16 MiB body read
            // in 16 KiB pieces must not be decoded from its start every
            // time).
            let mut dec = BodyDecoder::new(Framing::Chunked);
            let mut body = Vec::new();
            loop {
                dec.feed(&rest, &mut body)
                    .map_err(|e| bad(format!("the request's chunked body: {e}")))?;
                if dec.is_done() {
                    break body;
                }
                if body.len() > MAX_BODY {
                    return Err(too_large());
                }
                rest.clear();
                read_more(sock, &mut rest, &mut chunk)?;
            }
        }
        BodyKind::None => Vec::new(),
        BodyKind::Length(n) => {
            let len = usize::try_from(n)
                .ok()
                .filter(|len| *len <= MAX_BODY)
                .ok_or_else(too_large)?;
            while rest.len() < len {
                read_more(sock, &mut rest, &mut chunk)?;
            }
            rest.truncate(len);
            rest
        }
    };
    Ok(Some(Request {
        method,
        target,
        headers,
        body,
    }))
}

fn read_more(sock: &mut TcpStream, into: &mut Vec<u8>, chunk: &mut [u8]) -> Result<(), Refusal> {
    loop {
        match sock.read(chunk) {
            Ok(0) => return Err(refusal(400, "the request ended inside its body")),
            Ok(n) => {
                into.extend_from_slice(&chunk[..n]);
                return Ok(());
            }
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(refusal(400, format!("reading the request body: {e}"))),
        }
    }
}

/// The request to the daemon: the client's end-to-end headers (not its
/// `Authorization`: the daemon's token takes that place, and the daemon
/// would not pass one on), `Connection: close`, the body with its length.
fn daemon_request(client: &Client, prefix: &str, req: &Request) -> Vec<u8> {
    let mut head = format!("{} {prefix}{} HTTP/1.1\r\n", req.method, req.target);
    head.push_str(&client.host_and_auth_headers());
    for (k, v) in end_to_end_headers(&req.headers, &["authorization"]) {
        head.push_str(&format!("{k}: {v}\r\n"));
    }
    if !req.body.is_empty() || !matches!(req.method.as_str(), "GET" | "HEAD" | "DELETE" | "OPTIONS")
    {
        head.push_str(&format!("Content-Length: {}\r\n", req.body.len()));
    }
    head.push_str("Connection: close\r\n\r\n");
    let mut bytes = head.into_bytes();
    bytes.extend_from_slice(&req.body);
    bytes
}

/// Sends the request to the daemon and copies the answer back.
fn forward(
    client: &Client,
    prefix: &str,
    req: &Request,
    out: &mut TcpStream,
) -> Result<(), Refusal> {
    let gateway = |e: CliError| refusal(502, e.to_string());
    let deadline = Instant::now() + ANSWER_TIMEOUT;
    let mut up = client.connect(deadline).map_err(gateway)?;
    client
        .write(&mut up, &daemon_request(client, prefix, req), deadline)
        .map_err(gateway)?;
    let (head, rest) = client.read_head(&mut up, deadline).map_err(gateway)?;
    // From here on the client gets the daemon's answer, whatever happens.
    let mut h = format!("HTTP/1.1 {} {}\r\n", head.code, reason(head.code));
    for (k, v) in &head.headers {
        let k_l = k.to_ascii_lowercase();
        if matches!(k_l.as_str(), "connection" | "keep-alive") {
            continue;
        }
        h.push_str(&format!("{k}: {v}\r\n"));
    }
    h.push_str("Connection: close\r\n\r\n");
    let mut copy = || -> io::Result<()> {
        out.write_all(h.as_bytes())?;
        out.write_all(&rest)?;
        if req.method != "HEAD" {
            up.set_read_timeout(Some(BODY_IDLE))?;
            let mut buf = vec![0u8; 32 * 1024];
            loop {
                match up.read(&mut buf) {
                    Ok(0) => break,
                    Ok(n) => out.write_all(&buf[..n])?,
                    Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                    Err(e) => return Err(e),
                }
            }
        }
        out.flush()
    };
    if let Err(e) = copy() {
        eprintln!(
            "kubegate: {} {}: copying the answer: {e}",
            req.method, req.target
        );
    }
    up.send_close_notify();
    let _ = out.shutdown(std::net::Shutdown::Write);
    Ok(())
}
