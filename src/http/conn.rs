//! One HTTP/1.1 connection, served on its own thread from the TLS handshake
//! to the close: read a request (with deadlines and limits), call the
//! handler, write its response (whole, chunked stream, or 101 upgrade), and
//! loop while keep-alive holds.
//!
//! Owns the socket and its read buffer for the connection's life; bytes read
//! past one request stay in the buffer for the next (pipelining) or go to
//! the WebSocket after an upgrade. Never routes, never interprets bodies,
//! never lets a handler panic escape: a panic becomes a 500 (or, once a
//! stream has started, a closed connection). Blocking I/O with timeouts is
//! enough here because a connection has exactly one thing to do at a time;
//! the only waits that must also notice shutdown (the idle gap between
//! requests) poll on the socket and the server's stop eventfd.

use std::fmt::Write as _;
use std::io::{self, Read, Write};
use std::net::SocketAddr;
use std::os::fd::AsFd;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use tungstenite::protocol::{Role, WebSocketConfig};
use tungstenite::WebSocket;

use super::parse::{parse_head, BodyKind, ChunkedDecoder, Head};
use super::server::ServerConfig;
use super::stream::{peer_gone, wait_readable, PollStream, Readiness, Socket, Waker};
use super::types::{
    Admission, Admit, Body, BodyCharge, ChunkSink, Context, Handler, HttpError, Reply, Request,
    Response, Upgrade,
};
use super::ws::WsConn;

/// How long an error answer waits for the client to stop sending before the
/// socket is closed (see [`Socket::linger_close`]).
const LINGER: Duration = Duration::from_millis(500);
/// Bytes read from the socket per `read` call.
const READ_CHUNK: usize = 16 * 1024;
/// A read buffer grown past this (by a big body) is shrunk between requests.
const KEEP_BUF: usize = 64 * 1024;
/// The largest frame accepted on an upgraded socket, whatever the message
/// limit (tungstenite's own default).
const MAX_WS_FRAME: usize = 16 << 20;

/// State shared by the listener and every connection thread.
pub(crate) struct Shared {
    pub cfg: ServerConfig,
    pub handler: Arc<dyn Handler>,
    /// Signalled once at shutdown and never reset: readable for everyone.
    pub stop: Waker,
    pub stopping: AtomicBool,
    pub active: AtomicUsize,
    /// Until when the server plays dead (`Server::refuse_for`): the port is
    /// closed, and open connections are dropped at their next request.
    pub outage_until: parking_lot::Mutex<Option<Instant>>,
    /// Wakes the listener to notice a new outage.
    pub poke: Waker,
    /// Connections per peer address that have not authenticated yet.
    pub peers: parking_lot::Mutex<std::collections::HashMap<std::net::IpAddr, usize>>,
    /// Body bytes read into memory by requests not yet answered.
    pub body_bytes: AtomicUsize,
    /// Requests refused at admission, from their head.
    pub refused: std::sync::atomic::AtomicU64,
}

impl Shared {
    pub fn is_stopping(&self) -> bool {
        self.stopping.load(Ordering::Acquire)
    }

    /// True while an outage is in force.
    pub fn in_outage(&self) -> bool {
        let mut o = self.outage_until.lock();
        match *o {
            Some(t) if Instant::now() < t => true,
            Some(_) => {
                *o = None;
                false
            }
            None => false,
        }
    }
}

/// Why reading stopped short.
enum ReadEnd {
    Eof,
    Timeout,
    Failed,
}

/// A request ready for the handler, with what its admission asked for.
struct Ready<'a> {
    req: Request,
    minor: u8,
    keep_alive: bool,
    /// The body's bytes, counted in [`Shared::body_bytes`] until dispatched.
    _gauge: BodyGauge<'a>,
    /// The admission's reservation, held until the handler returns.
    _charge: Option<Arc<dyn BodyCharge>>,
}

enum Next<'a> {
    Request(Box<Ready<'a>>),
    /// Answered at admission; the connection stays open.
    Answered,
    /// Answered at admission; drain what the client still sends (a body
    /// nobody reads), discarding it, then close.
    Linger,
    Error(HttpError, u8),
    Close,
}

/// Counts body bytes read into memory in [`Shared::body_bytes`] while a
/// request holds them.
/// What a request's body read needs from its head and its admission.
struct BodyPlan {
    kind: BodyKind,
    /// The admitted limit (the server's, or the handler's smaller one).
    max_body: usize,
    expect_continue: bool,
    /// The HTTP minor version, for an error answer.
    minor: u8,
    /// When the whole body must be in (`request_read_timeout` after the head).
    deadline: Instant,
}

pub(crate) struct BodyGauge<'a> {
    shared: &'a Shared,
    n: usize,
}

impl BodyGauge<'_> {
    fn set(&mut self, n: usize) {
        if n >= self.n {
            self.shared
                .body_bytes
                .fetch_add(n - self.n, Ordering::AcqRel);
        } else {
            self.shared
                .body_bytes
                .fetch_sub(self.n - n, Ordering::AcqRel);
        }
        self.n = n;
    }
}

impl Drop for BodyGauge<'_> {
    fn drop(&mut self) {
        self.shared.body_bytes.fetch_sub(self.n, Ordering::AcqRel);
    }
}

/// How long a head may take once its connection is accepted: `grace`, plus
/// one second per `min_rate` bytes received, never past `max` (a client
/// that keeps sending at the minimum rate gets the whole `max`; one that
/// drips a byte now and then is closed after `grace`).
pub(crate) fn head_deadline(started: Instant, received: usize, cfg: &ServerConfig) -> Instant {
    let rate = cfg.min_head_bytes_per_sec.max(1) as u64;
    let earned = Duration::from_millis((received as u64).saturating_mul(1000) / rate);
    started + (cfg.head_grace + earned).min(cfg.request_read_timeout)
}

/// Serves requests on a socket whose TLS handshake is done, starting with
/// the bytes already read into `buf`.
pub(crate) fn serve_socket(
    shared: &Shared,
    sock: Socket,
    peer: SocketAddr,
    buf: Vec<u8>,
    slot: Option<PeerSlot>,
    accepted: Instant,
    first_admit: Option<Admit>,
) {
    let _ = sock.set_write_timeout(Some(shared.cfg.write_timeout));
    let client_cert_der = peer_cert(&sock);
    let conn = Conn {
        shared,
        sock,
        buf,
        peer,
        client_cert_der,
        served: 0,
        peer_slot: slot,
        hold: None,
        keep_hold: false,
        accepted,
        first_admit,
    };
    conn.run();
}

/// One connection's place in its peer address's count (see
/// `ServerConfig::max_connections_per_peer`); dropped once the connection
/// authenticates or ends.
pub(crate) struct PeerSlot {
    pub shared: Arc<Shared>,
    pub ip: std::net::IpAddr,
}

impl Drop for PeerSlot {
    fn drop(&mut self) {
        let mut peers = self.shared.peers.lock();
        if let Some(n) = peers.get_mut(&self.ip) {
            *n = n.saturating_sub(1);
            if *n == 0 {
                peers.remove(&self.ip);
            }
        }
    }
}

struct Conn<'a> {
    shared: &'a Shared,
    sock: Socket,
    buf: Vec<u8>,
    peer: SocketAddr,
    client_cert_der: Option<Vec<u8>>,
    served: u64,
    peer_slot: Option<PeerSlot>,
    /// The last admission's `hold` (see `Admit::hold`).
    hold: Option<Box<dyn std::any::Any + Send>>,
    keep_hold: bool,
    /// When the connection was accepted: the first head's clock.
    accepted: Instant,
    /// The first request's admission, made by the listener (which read
    /// its head).
    first_admit: Option<Admit>,
}

impl<'a> Conn<'a> {
    fn run(mut self) {
        loop {
            match self.next_request() {
                Next::Close => return self.close(),
                Next::Answered => {}
                Next::Linger => {
                    drop(self.buf);
                    return self.sock.linger_close(LINGER);
                }
                Next::Error(err, minor) => return self.fail(err, minor),
                Next::Request(ready) => {
                    self.served += 1;
                    match self.dispatch(*ready) {
                        Some(conn) => {
                            self = conn;
                            if !self.keep_hold {
                                self.hold = None;
                            }
                        }
                        None => return,
                    }
                }
            }
        }
    }

    /// Reads more bytes into the buffer, giving up at `deadline`.
    fn fill(&mut self, deadline: Instant) -> Result<usize, ReadEnd> {
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return Err(ReadEnd::Timeout);
            }
            if self.sock.set_read_timeout(Some(left)).is_err() {
                return Err(ReadEnd::Failed);
            }
            let old = self.buf.len();
            self.buf.resize(old + READ_CHUNK, 0);
            let r = self.sock.read(&mut self.buf[old..]);
            let n = *r.as_ref().unwrap_or(&0);
            self.buf.truncate(old + n);
            return match r {
                Ok(0) => Err(ReadEnd::Eof),
                Ok(n) => Ok(n),
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                Err(e)
                    if matches!(
                        e.kind(),
                        io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut
                    ) =>
                {
                    Err(ReadEnd::Timeout)
                }
                Err(_) => Err(ReadEnd::Failed),
            };
        }
    }

    /// Waits for the next request's first byte (the first request's head
    /// deadline, or the keep-alive idle time) and reads its head at the
    /// minimum rate; `Err` is how the connection ends instead.
    fn read_head(&mut self) -> Result<Head, Next<'a>> {
        let shared = self.shared;
        let cfg = &shared.cfg;
        if self.buf.capacity() > KEEP_BUF {
            self.buf.shrink_to(KEEP_BUF);
        }
        let mut started = Instant::now();
        if self.buf.is_empty() && !self.sock.has_buffered_input() {
            let wait = if self.served == 0 {
                head_deadline(self.accepted, 0, cfg).saturating_duration_since(started)
            } else {
                cfg.keep_alive_idle
            };
            match wait_readable(self.sock.as_fd(), &shared.stop, wait) {
                Ok(Readiness::Readable) => {}
                _ => return Err(Next::Close),
            }
            if shared.in_outage() {
                return Err(Next::Close);
            }
            if self.served > 0 {
                started = Instant::now();
            }
        } else if shared.is_stopping() || shared.in_outage() {
            return Err(Next::Close);
        }
        if self.served == 0 {
            started = self.accepted;
        }
        let max_header = cfg.max_header_bytes;
        loop {
            match parse_head(&self.buf, max_header, cfg.strict_crlf) {
                Ok(Some(h)) => return Ok(h),
                Ok(None) => {}
                Err(e) => return Err(Next::Error(e, 1)),
            }
            // The head must keep coming at the minimum rate.
            if self
                .fill(head_deadline(started, self.buf.len(), cfg))
                .is_err()
            {
                // EOF between requests is the normal end; a timeout or EOF
                // mid-head has nobody left to answer.
                return Err(Next::Close);
            }
        }
    }

    fn next_request(&mut self) -> Next<'a> {
        let shared = self.shared;
        let cfg = &shared.cfg;
        let head = match self.read_head() {
            Ok(h) => h,
            Err(end) => return end,
        };
        let deadline = Instant::now() + cfg.request_read_timeout;
        self.buf.drain(..head.len);
        let (minor, body_kind, keep_alive, expect_continue) =
            (head.minor, head.body, head.keep_alive, head.expect_continue);
        let mut req = head_request(
            head,
            self.peer,
            self.sock.is_tls(),
            self.client_cert_der.clone(),
        );
        // The previous request's hold ends with it: the admission decides
        // anew whether this one gets one.
        self.hold = None;
        let handler = shared.handler.clone();
        let first = self.first_admit.take();
        let admission = match catch_unwind(AssertUnwindSafe(|| match first {
            Some(a) => Admission::Admit(a),
            None => handler.admit(&req),
        })) {
            Ok(a) => a,
            Err(_) => {
                log::error!("admission panicked serving {}", self.peer);
                return Next::Error(HttpError::Internal, minor);
            }
        };
        let admit = match admission {
            Admission::Admit(a) => a,
            Admission::Refuse(resp) => {
                shared.refused.fetch_add(1, Ordering::Relaxed);
                // A body nobody will read: close after the answer (the
                // linger drains what the client still sends, discarding
                // it). Without a body, keep-alive holds.
                let has_body = !matches!(body_kind, BodyKind::None);
                let keep = keep_alive && !has_body && !shared.is_stopping();
                let is_head = req.method == "HEAD";
                return match write_response(&mut self.sock, resp, minor, is_head, keep, shared) {
                    Ok(true) => Next::Answered,
                    Ok(false) if has_body => Next::Linger,
                    Ok(false) => Next::Close,
                    Err(_) => Next::Close,
                };
            }
        };
        if admit.known {
            self.peer_slot = None;
        }
        self.hold = admit.hold;
        self.keep_hold = admit.keep_hold;
        let keep_alive = keep_alive && !admit.close_after;
        req.admitted = admit.context;
        let charge = admit.charge;
        let max_body = admit
            .max_body_bytes
            .map_or(cfg.max_body_bytes, |m| m.min(cfg.max_body_bytes));
        let mut gauge = BodyGauge { shared, n: 0 };
        let plan = BodyPlan {
            kind: body_kind,
            max_body,
            expect_continue,
            minor,
            deadline,
        };
        let body = match self.read_body(plan, charge.as_ref(), &mut gauge) {
            Ok(b) => b,
            Err(end) => return end,
        };
        if self.buf.is_empty() {
            // Idle streams (watches) keep their thread for hours: do not
            // keep a read buffer for them too.
            self.buf = Vec::new();
        }
        req.body = body;
        req.probe = super::types::PeerProbe::new(self.sock.as_fd(), shared.stop.fd());
        Next::Request(Box::new(Ready {
            req,
            minor,
            keep_alive,
            _gauge: gauge,
            _charge: charge,
        }))
    }

    /// Reads the body `plan` announces (charged to `charge`, counted by
    /// `gauge`), answering `Expect: 100-continue` first; `Err` is how the
    /// connection ends instead.
    fn read_body(
        &mut self,
        plan: BodyPlan,
        charge: Option<&Arc<dyn BodyCharge>>,
        gauge: &mut BodyGauge<'a>,
    ) -> Result<Vec<u8>, Next<'a>> {
        let BodyPlan {
            kind,
            max_body,
            expect_continue,
            minor,
            deadline,
        } = plan;
        let max_header = self.shared.cfg.max_header_bytes;
        match kind {
            BodyKind::None => Ok(Vec::new()),
            BodyKind::Length(n) => {
                if n > max_body as u64 {
                    return Err(Next::Error(
                        HttpError::BodyTooLarge { limit: max_body },
                        minor,
                    ));
                }
                let n = n as usize;
                if charge.as_ref().is_some_and(|c| !c.grow(n)) {
                    return Err(Next::Error(HttpError::Busy, minor));
                }
                if expect_continue && self.buf.len() < n && !self.send_continue() {
                    return Err(Next::Close);
                }
                while self.buf.len() < n {
                    gauge.set(self.buf.len());
                    if self.fill(deadline).is_err() {
                        return Err(Next::Close);
                    }
                }
                let rest = self.buf.split_off(n);
                gauge.set(n);
                Ok(std::mem::replace(&mut self.buf, rest))
            }
            BodyKind::Chunked => {
                let mut dec = ChunkedDecoder::new(max_body, max_header);
                let mut body = Vec::new();
                if expect_continue && self.buf.is_empty() && !self.send_continue() {
                    return Err(Next::Close);
                }
                loop {
                    match dec.feed(&self.buf, &mut body) {
                        Ok(used) => {
                            self.buf.drain(..used);
                        }
                        Err(e) => return Err(Next::Error(e, minor)),
                    }
                    if charge.as_ref().is_some_and(|c| !c.grow(body.len())) {
                        return Err(Next::Error(HttpError::Busy, minor));
                    }
                    gauge.set(body.len());
                    if dec.is_done() {
                        break Ok(body);
                    }
                    if self.fill(deadline).is_err() {
                        return Err(Next::Close);
                    }
                }
            }
        }
    }

    fn send_continue(&mut self) -> bool {
        self.sock
            .write_all(b"HTTP/1.1 100 Continue\r\n\r\n")
            .and_then(|()| self.sock.flush())
            .is_ok()
    }

    /// Runs the handler; gives the connection back when it stays open.
    fn dispatch(mut self, ready: Ready<'a>) -> Option<Self> {
        let Ready {
            req,
            minor,
            keep_alive,
            _gauge: gauge,
            _charge: charge,
        } = ready;
        let is_head = req.method == "HEAD";
        let ws_key = if minor == 1 && req.is_websocket_upgrade() {
            req.header("sec-websocket-key").map(str::to_string)
        } else {
            None
        };
        let handler = self.shared.handler.clone();
        let reply = match catch_unwind(AssertUnwindSafe(move || handler.handle(req))) {
            Ok(r) => r,
            Err(_) => {
                log::error!("handler panicked serving {}", self.peer);
                self.fail(HttpError::Internal, minor);
                return None;
            }
        };
        // The handler is done with the body (it was moved into it): its
        // bytes and its reservation are given back before the answer goes
        // out (a handler that keeps the reservation holds its own clone).
        drop(gauge);
        drop(charge);
        match reply {
            Reply::Response(resp) => {
                let keep = keep_alive && !self.shared.is_stopping();
                match write_response(&mut self.sock, resp, minor, is_head, keep, self.shared) {
                    Ok(true) => Some(self),
                    Ok(false) | Err(_) => {
                        self.close();
                        None
                    }
                }
            }
            Reply::RawUpgrade(up) => {
                self.raw_upgrade(up);
                None
            }
            Reply::Upgrade(up) => {
                match ws_key {
                    Some(key) => self.upgrade(&key, up),
                    None => self.fail(
                        HttpError::BadRequest("websocket upgrade required".into()),
                        minor,
                    ),
                }
                None
            }
        }
    }

    /// Answers `err` through the handler's error body, then closes.
    fn fail(mut self, err: HttpError, minor: u8) {
        let handler = self.shared.handler.clone();
        let resp = catch_unwind(AssertUnwindSafe(|| handler.error_response(&err)))
            .unwrap_or_else(|_| Response::text(err.status(), "internal error"));
        let mut resp = resp;
        // The handler chose the body; the status is the server's.
        resp.status = err.status();
        with_retry_after(&mut resp, &err);
        if write_response(&mut self.sock, resp, minor, false, false, self.shared).is_ok() {
            self.sock.linger_close(LINGER);
        }
    }

    fn close(self) {
        // Dropping the TLS stream sends close_notify.
        drop(self.sock);
    }

    /// Writes the 101 of a raw upgrade and hands the socket over.
    fn raw_upgrade(self, up: super::raw::RawUpgrade) {
        let Conn {
            mut sock,
            buf,
            peer,
            client_cert_der,
            hold: _hold,
            ..
        } = self;
        let mut head = String::with_capacity(256);
        head.push_str("HTTP/1.1 101 Switching Protocols\r\n");
        let _ = write!(head, "Date: {}\r\n", http_date(SystemTime::now()));
        for (k, v) in &up.headers {
            if k.eq_ignore_ascii_case("date") || !header_ok(k, v) {
                continue;
            }
            let _ = write!(head, "{k}: {v}\r\n");
        }
        head.push_str("\r\n");
        if sock
            .write_all(head.as_bytes())
            .and_then(|()| sock.flush())
            .is_err()
        {
            return;
        }
        let _ = sock.set_read_timeout(None);
        let _ = sock.set_write_timeout(None);
        let conn = super::raw::RawConn {
            sock,
            early: buf,
            peer,
            client_cert_der,
        };
        let on_open = up.on_open;
        if catch_unwind(AssertUnwindSafe(move || on_open(conn))).is_err() {
            log::error!("raw upgrade handler panicked for {peer}");
        }
    }

    fn upgrade(self, key: &str, up: Upgrade) {
        let Conn {
            mut sock,
            buf,
            peer,
            client_cert_der,
            // Held while the socket is open (a per-caller slot).
            hold: _hold,
            ..
        } = self;
        if super::ws::write_accept(&mut sock, key, up.protocol.as_deref(), &up.headers).is_err() {
            return;
        }
        let _ = sock.set_read_timeout(None);
        let _ = sock.set_write_timeout(None);
        let config = WebSocketConfig::default()
            .read_buffer_size(64 * 1024)
            .write_buffer_size(64 * 1024)
            .max_message_size(Some(up.max_message_bytes))
            .max_frame_size(Some(up.max_message_bytes.min(MAX_WS_FRAME)));
        let ws = WebSocket::from_partially_read(sock, buf, Role::Server, Some(config));
        let conn = WsConn::new(ws, peer, up.protocol, client_cert_der);
        let on_open = up.on_open;
        if catch_unwind(AssertUnwindSafe(move || on_open(conn))).is_err() {
            log::error!("websocket handler panicked for {peer}");
        }
    }
}

/// A header the server may write: no CR/LF/NUL smuggled in by a handler.
pub(super) fn header_ok(name: &str, value: &str) -> bool {
    !name.is_empty()
        && name.bytes().all(|b| b.is_ascii_graphic() && b != b':')
        && !value.bytes().any(|b| b == b'\r' || b == b'\n' || b == 0)
}

/// Adds `Retry-After: 1` to a refusal that a retry may get past, unless the
/// handler said when.
pub(crate) fn with_retry_after(resp: &mut Response, err: &HttpError) {
    let busy = matches!(
        err,
        HttpError::Busy | HttpError::Overloaded | HttpError::TooManyConnections
    );
    if busy
        && !resp
            .headers
            .iter()
            .any(|(k, _)| k.eq_ignore_ascii_case("retry-after"))
    {
        resp.headers.push(("Retry-After".into(), "1".into()));
    }
}

/// The request a parsed head describes, without its body (what
/// [`Handler::admit`] sees).
/// `client_cert_der`: the TLS client's certificate ([`peer_cert`]).
pub(crate) fn head_request(
    head: Head,
    peer: SocketAddr,
    tls: bool,
    client_cert_der: Option<Vec<u8>>,
) -> Request {
    Request {
        method: head.method,
        target: head.target,
        path: head.path,
        query: head.query,
        headers: head.headers,
        body: Vec::new(),
        peer,
        tls,
        client_cert_der,
        probe: super::types::PeerProbe::default(),
        admitted: Context::default(),
    }
}

/// The certificate (DER) a TLS client presented; `None` on plain TCP.
pub(crate) fn peer_cert(sock: &Socket) -> Option<Vec<u8>> {
    match sock {
        Socket::Tls(t) => t.peer_leaf_cert(),
        Socket::Plain(_) => None,
    }
}

/// Writes `resp`; returns whether the connection may carry another request.
pub(crate) fn write_response(
    sock: &mut Socket,
    resp: Response,
    minor: u8,
    is_head: bool,
    keep_alive: bool,
    shared: &Shared,
) -> io::Result<bool> {
    let status = resp.status;
    let bodyless_status = status == 204 || status == 304 || (100..200).contains(&status);
    let mut keep_alive = keep_alive;
    let mut head = String::with_capacity(256);
    let _ = write!(head, "HTTP/1.1 {status} {}\r\n", reason(status));
    let _ = write!(head, "Date: {}\r\n", http_date(SystemTime::now()));
    for (k, v) in &resp.headers {
        let lower = k.to_ascii_lowercase();
        if matches!(
            lower.as_str(),
            "content-length" | "transfer-encoding" | "connection" | "date"
        ) {
            continue;
        }
        if !header_ok(k, v) {
            log::warn!("dropping invalid response header {k:?}");
            continue;
        }
        let _ = write!(head, "{k}: {v}\r\n");
    }
    let mut chunked = false;
    match &resp.body {
        Body::Empty if !bodyless_status => head.push_str("Content-Length: 0\r\n"),
        Body::Bytes(b) if !bodyless_status => {
            let _ = write!(head, "Content-Length: {}\r\n", b.len());
        }
        Body::Stream(_) if !bodyless_status && !is_head => {
            if minor == 1 {
                head.push_str("Transfer-Encoding: chunked\r\n");
                chunked = true;
            } else {
                // HTTP/1.0 has no chunking: the body ends with the connection.
                keep_alive = false;
            }
        }
        _ => {}
    }
    if !keep_alive {
        head.push_str("Connection: close\r\n");
    } else if minor == 0 {
        head.push_str("Connection: keep-alive\r\n");
    }
    head.push_str("\r\n");

    let send_body = !is_head && !bodyless_status;
    match resp.body {
        Body::Bytes(b) if send_body => {
            if b.len() <= 16 * 1024 {
                let mut all = head.into_bytes();
                all.extend_from_slice(&b);
                sock.write_all(&all)?;
            } else {
                sock.write_all(head.as_bytes())?;
                sock.write_all(&b)?;
            }
            sock.flush()?;
            Ok(keep_alive)
        }
        Body::Stream(f) if send_body => {
            sock.write_all(head.as_bytes())?;
            sock.flush()?;
            let mut sink = Sink {
                sock,
                chunked,
                scratch: Vec::new(),
                failed: false,
                shared,
            };
            let ok = match catch_unwind(AssertUnwindSafe(|| f(&mut sink))) {
                Ok(Ok(())) => !sink.failed,
                Ok(Err(_)) => false,
                Err(_) => {
                    log::error!("stream function panicked");
                    false
                }
            };
            if !ok {
                return Ok(false);
            }
            if chunked {
                sock.write_all(b"0\r\n\r\n")?;
                sock.flush()?;
            }
            Ok(keep_alive && chunked)
        }
        _ => {
            sock.write_all(head.as_bytes())?;
            sock.flush()?;
            Ok(keep_alive)
        }
    }
}

/// The [`ChunkSink`] of a streaming response.
struct Sink<'a> {
    sock: &'a mut Socket,
    chunked: bool,
    scratch: Vec<u8>,
    failed: bool,
    shared: &'a Shared,
}

impl ChunkSink for Sink<'_> {
    fn send(&mut self, data: &[u8]) -> io::Result<()> {
        if self.failed {
            return Err(io::ErrorKind::BrokenPipe.into());
        }
        if data.is_empty() {
            return Ok(());
        }
        let r = if self.chunked {
            // One write per chunk: size line, data and CRLF together.
            self.scratch.clear();
            let _ = write!(ByteWriter(&mut self.scratch), "{:x}\r\n", data.len());
            self.scratch.extend_from_slice(data);
            self.scratch.extend_from_slice(b"\r\n");
            let r = self.sock.write_all(&self.scratch);
            if self.scratch.capacity() > KEEP_BUF {
                self.scratch = Vec::new();
            }
            r
        } else {
            self.sock.write_all(data)
        }
        .and_then(|()| self.sock.flush());
        if r.is_err() {
            self.failed = true;
        }
        r
    }

    /// True once the client closed or reset the connection, or the server
    /// is shutting down (either way the stream should end).
    fn peer_closed(&self) -> bool {
        self.failed
            || self.shared.is_stopping()
            || self.shared.in_outage()
            || peer_gone(self.sock.as_fd())
    }
}

struct ByteWriter<'a>(&'a mut Vec<u8>);

impl std::fmt::Write for ByteWriter<'_> {
    fn write_str(&mut self, s: &str) -> std::fmt::Result {
        self.0.extend_from_slice(s.as_bytes());
        Ok(())
    }
}

/// The reason phrase of a status code.
pub(crate) fn reason(status: u16) -> &'static str {
    match status {
        100 => "Continue",
        101 => "Switching Protocols",
        200 => "OK",
        201 => "Created",
        202 => "Accepted",
        204 => "No Content",
        206 => "Partial Content",
        301 => "Moved Permanently",
        302 => "Found",
        303 => "See Other",
        304 => "Not Modified",
        307 => "Temporary Redirect",
        308 => "Permanent Redirect",
        400 => "Bad Request",
        401 => "Unauthorized",
        403 => "Forbidden",
        404 => "Not Found",
        405 => "Method Not Allowed",
        406 => "Not Acceptable",
        408 => "Request Timeout",
        409 => "Conflict",
        410 => "Gone",
        411 => "Length Required",
        412 => "Precondition Failed",
        413 => "Content Too Large",
        415 => "Unsupported Media Type",
        422 => "Unprocessable Content",
        426 => "Upgrade Required",
        428 => "Precondition Required",
        429 => "Too Many Requests",
        431 => "Request Header Fields Too Large",
        500 => "Internal Server Error",
        501 => "Not Implemented",
        502 => "Bad Gateway",
        503 => "Service Unavailable",
        504 => "Gateway Timeout",
        _ => match status / 100 {
            1 => "Informational",
            2 => "Success",
            3 => "Redirection",
            4 => "Client Error",
            _ => "Server Error",
        },
    }
}

/// An IMF-fixdate (`Sun, 06 Nov 1994 08:49:37 GMT`) for the `Date` header.
pub(crate) fn http_date(t: SystemTime) -> String {
    let secs = t
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0);
    let days = (secs / 86_400) as i64;
    let rem = secs % 86_400;
    let (h, m, s) = (rem / 3600, rem / 60 % 60, rem % 60);
    // 1970-01-01 was a Thursday.
    let weekday = ["Thu", "Fri", "Sat", "Sun", "Mon", "Tue", "Wed"][(days % 7) as usize];
    // Civil date from days since the epoch (H. Hinnant's algorithm).
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + i64::from(month <= 2);
    let mon = [
        "Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec",
    ][(month - 1) as usize];
    format!("{weekday}, {day:02} {mon} {year} {h:02}:{m:02}:{s:02} GMT")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn dates() {
        let t = UNIX_EPOCH + Duration::from_secs(784_111_777);
        assert_eq!(http_date(t), "Sun, 06 Nov 1994 08:49:37 GMT");
        assert_eq!(http_date(UNIX_EPOCH), "Thu, 01 Jan 1970 00:00:00 GMT");
        let t = UNIX_EPOCH + Duration::from_secs(951_782_400); // 2000-02-29
        assert_eq!(http_date(t), "Tue, 29 Feb 2000 00:00:00 GMT");
    }

    #[test]
    fn a_head_earns_time_at_the_minimum_rate_up_to_the_read_timeout() {
        let cfg = ServerConfig {
            head_grace: Duration::from_secs(5),
            min_head_bytes_per_sec: 1000,
            request_read_timeout: Duration::from_secs(30),
            ..ServerConfig::default()
        };
        let t = Instant::now();
        assert_eq!(head_deadline(t, 0, &cfg), t + Duration::from_secs(5));
        assert_eq!(head_deadline(t, 500, &cfg), t + Duration::from_millis(5500));
        assert_eq!(head_deadline(t, 10_000, &cfg), t + Duration::from_secs(15));
        // Never past the read timeout, however much came.
        assert_eq!(head_deadline(t, 1 << 30, &cfg), t + Duration::from_secs(30));
        // A zero rate is taken as 1 byte/s, not a division by zero.
        let slow = ServerConfig {
            min_head_bytes_per_sec: 0,
            ..cfg
        };
        assert_eq!(head_deadline(t, 2, &slow), t + Duration::from_secs(7));
    }

    #[test]
    fn header_validation() {
        assert!(header_ok("X-A", "b c"));
        assert!(!header_ok("X-A", "b\r\nEvil: 1"));
        assert!(!header_ok("X A", "b"));
        assert!(!header_ok("", "b"));
    }
}
