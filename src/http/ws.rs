//! WebSocket connections after the upgrade, and the pump that drives any
//! WebSocket (server side here, client side for the Kubernetes client).
//!
//! Owns: the upgraded socket ([`WsConn`]) and the one thread that reads and
//! writes it ([`run`] / [`run_stream`]). A socket cannot be read and written
//! from two threads (tungstenite and rustls keep one state per connection),
//! and a read timeout used as a poll would add its whole length to every
//! keystroke. So the pump waits in poll(2) on the socket AND on an eventfd
//! that every [`Outbox::send`] signals; it reads until `WouldBlock` (after
//! draining TLS plaintext poll cannot see), forwards messages to a bounded
//! inbound channel, drains the bounded outbound channel, flushes, and waits
//! again. It never blocks on the inbound channel: when that is full it holds
//! the one message, stops reading the socket (TCP backpressure reaches the
//! peer) and keeps serving outbound, so a consumer that is itself waiting
//! for outbound to drain can never deadlock it. Nothing is dropped.
//!
//! Never interprets payloads (channel framing is the caller's).
//!
//! Latency: an echo (peer -> pump -> inbound channel -> echo thread ->
//! Outbox -> pump -> peer) against a blocking single-thread tungstenite echo,
//! on loopback, 2,000 round trips of 1 byte, release build, this 2-core
//! machine (`cargo test --release --test http_server -- --ignored
//! ws_echo_latency --nocapture`): pump echo p50 28 µs / p99 48 µs against
//! 16 µs / 23 µs blocking; the pump adds 11-18 µs at the median and under
//! 55 µs at p99 over four runs: two thread wake-ups (eventfd, channel),
//! never a poll timeout.

use super::client::UpgradeError;
use std::io;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};

use crossbeam_channel::{Receiver, SendTimeoutError, Sender, TryRecvError, TrySendError};
use rustix::event::{PollFd, PollFlags};
use tungstenite::error::{CapacityError, ProtocolError};
use tungstenite::protocol::frame::coding::CloseCode;
use tungstenite::protocol::CloseFrame;
use tungstenite::{Error as WsError, Message, WebSocket};

use super::stream::{poll, PollStream, Socket, Waker};

/// An upgraded WebSocket connection on the server, ready to be driven (by
/// [`run`], or directly through [`WsConn::websocket_mut`] in blocking mode).
pub struct WsConn {
    ws: WebSocket<Socket>,
    peer: SocketAddr,
    protocol: Option<String>,
    client_cert_der: Option<Vec<u8>>,
}

impl WsConn {
    pub(crate) fn new(
        ws: WebSocket<Socket>,
        peer: SocketAddr,
        protocol: Option<String>,
        client_cert_der: Option<Vec<u8>>,
    ) -> WsConn {
        WsConn {
            ws,
            peer,
            protocol,
            client_cert_der,
        }
    }

    pub fn peer(&self) -> SocketAddr {
        self.peer
    }

    /// The subprotocol echoed in the 101, if any.
    pub fn protocol(&self) -> Option<&str> {
        self.protocol.as_deref()
    }

    /// The client's leaf certificate (DER) when it presented one over TLS.
    pub fn client_cert_der(&self) -> Option<&[u8]> {
        self.client_cert_der.as_deref()
    }

    pub fn websocket_mut(&mut self) -> &mut WebSocket<Socket> {
        &mut self.ws
    }

    pub fn into_websocket(self) -> WebSocket<Socket> {
        self.ws
    }
}

impl std::fmt::Debug for WsConn {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("WsConn")
            .field("peer", &self.peer)
            .field("protocol", &self.protocol)
            .finish()
    }
}

/// The pump is gone (it ended, or every receiver was dropped).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Closed;

impl std::fmt::Display for Closed {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("websocket closed")
    }
}

impl std::error::Error for Closed {}

/// The sending side of a pump's outbound queue. Cloneable; when every clone
/// is dropped without sending a Close, the pump closes with 1000.
pub struct Outbox {
    /// Always `Some` until `drop`, which must drop the sender BEFORE waking
    /// the pump (or the pump could wake, still see a live sender, and sleep).
    tx: Option<Sender<Message>>,
    waker: Arc<Waker>,
    abort: Arc<parking_lot::Mutex<Option<CloseFrame>>>,
}

/// The pump's side of the outbound queue (give it to [`run`]).
pub struct OutboxReceiver {
    pub(super) rx: Receiver<Message>,
    pub(super) waker: Arc<Waker>,
    pub(super) abort: Arc<parking_lot::Mutex<Option<CloseFrame>>>,
}

#[cfg(test)]
impl OutboxReceiver {
    /// What the pump would send next, if anything is queued (unit tests
    /// standing in for the pump).
    pub(crate) fn try_recv(&self) -> Option<Message> {
        self.rx.try_recv().ok()
    }
}

/// A bounded outbound queue of `capacity` messages and its waker.
///
/// # Panics
/// If the eventfd cannot be created (out of file descriptors at start-up of
/// a connection); use [`try_outbox`] to handle that.
pub fn outbox(capacity: usize) -> (Outbox, OutboxReceiver) {
    match try_outbox(capacity) {
        Ok(x) => x,
        Err(e) => panic!("cannot create an eventfd for a websocket outbox: {e}"),
    }
}

/// [`outbox`], reporting a failure to create the eventfd.
pub fn try_outbox(capacity: usize) -> io::Result<(Outbox, OutboxReceiver)> {
    let (tx, rx) = crossbeam_channel::bounded(capacity.max(1));
    let waker = Arc::new(Waker::new()?);
    let abort = Arc::new(parking_lot::Mutex::new(None));
    Ok((
        Outbox {
            tx: Some(tx),
            waker: waker.clone(),
            abort: abort.clone(),
        },
        OutboxReceiver { rx, waker, abort },
    ))
}

impl Outbox {
    /// Queues a message, waiting while the queue is full (that wait is the
    /// backpressure), then wakes the pump.
    pub fn send(&self, m: Message) -> Result<(), Closed> {
        self.tx().ok_or(Closed)?.send(m).map_err(|_| Closed)?;
        self.waker.wake();
        Ok(())
    }

    /// Queues a message if there is room now.
    pub fn try_send(&self, m: Message) -> Result<(), TrySendError<Message>> {
        match self.tx() {
            Some(tx) => tx.try_send(m)?,
            None => return Err(TrySendError::Disconnected(m)),
        }
        self.waker.wake();
        Ok(())
    }

    /// Queues a message, waiting at most `timeout` for room.
    pub fn send_timeout(
        &self,
        m: Message,
        timeout: Duration,
    ) -> Result<(), SendTimeoutError<Message>> {
        match self.tx() {
            Some(tx) => tx.send_timeout(m, timeout)?,
            None => return Err(SendTimeoutError::Disconnected(m)),
        }
        self.waker.wake();
        Ok(())
    }

    /// Wakes the pump without sending anything. A consumer of the pump's
    /// inbound channel calls it after taking a message from a full channel:
    /// the pump, holding a message for lack of room, delivers it at once.
    pub fn wake(&self) {
        self.waker.wake();
    }

    /// Ends the stream now: the pump drops every queued message unsent and
    /// sends this Close (then waits `close_timeout` for the reply, as for
    /// any Close). For a client that said `close`, an idle timeout or a
    /// shutdown, where queued output is no longer wanted.
    pub fn abort(&self, frame: CloseFrame) {
        *self.abort.lock() = Some(frame);
        self.waker.wake();
    }

    /// A handle that can [`Outbox::abort`] and [`Outbox::wake`] the pump
    /// without holding a sender: the pump still closes normally when the
    /// last [`Outbox`] is dropped, whoever holds an [`Aborter`].
    pub fn aborter(&self) -> Aborter {
        Aborter {
            waker: self.waker.clone(),
            abort: self.abort.clone(),
        }
    }

    /// Messages waiting for the pump.
    pub fn len(&self) -> usize {
        self.tx().map_or(0, Sender::len)
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    fn tx(&self) -> Option<&Sender<Message>> {
        self.tx.as_ref()
    }
}

/// Aborts or wakes a pump without being one of its senders
/// ([`Outbox::aborter`]).
#[derive(Clone)]
pub struct Aborter {
    waker: Arc<Waker>,
    abort: Arc<parking_lot::Mutex<Option<CloseFrame>>>,
}

impl Aborter {
    /// [`Outbox::abort`]: queued messages are dropped, this Close is sent.
    pub fn abort(&self, frame: CloseFrame) {
        *self.abort.lock() = Some(frame);
        self.waker.wake();
    }

    /// [`Outbox::wake`].
    pub fn wake(&self) {
        self.waker.wake();
    }
}

impl Clone for Outbox {
    fn clone(&self) -> Outbox {
        Outbox {
            tx: self.tx.clone(),
            waker: self.waker.clone(),
            abort: self.abort.clone(),
        }
    }
}

impl Drop for Outbox {
    fn drop(&mut self) {
        // The last sender gone is news for the pump (it closes the socket):
        // drop ours first, then wake, so the pump sees the disconnection.
        drop(self.tx.take());
        self.waker.wake();
    }
}

/// How a pump behaves besides moving messages.
#[derive(Debug, Clone, Copy)]
pub struct WsOptions {
    /// Send a ping after this long without sending anything. Default 30 s:
    /// under the 60 s after which load balancers cut idle streams.
    pub ping_interval: Option<Duration>,
    /// End with [`WsEnd::Idle`] after this long without any frame from the
    /// peer (pongs count). Default none.
    pub idle_timeout: Option<Duration>,
    /// After sending a Close, how long to wait for the peer's. Default 5 s.
    pub close_timeout: Duration,
}

impl Default for WsOptions {
    fn default() -> Self {
        WsOptions {
            ping_interval: Some(Duration::from_secs(30)),
            idle_timeout: None,
            close_timeout: Duration::from_secs(5),
        }
    }
}

/// How a pump ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum WsEnd {
    /// We sent a Close (an outbound `Message::Close`, or all outboxes
    /// dropped) and got the peer's reply, or `close_timeout` passed.
    Closed,
    /// The peer sent a Close (we replied), or closed the TCP connection
    /// after a close handshake.
    PeerClosed(Option<CloseFrame>),
    /// Nothing came from the peer for `idle_timeout`.
    Idle,
    /// A transport or protocol error (including a connection dropped
    /// without a close handshake).
    Error(String),
}

/// Drives an upgraded server connection; see [`run_stream`].
pub fn run(
    conn: WsConn,
    outbound: OutboxReceiver,
    inbound: Sender<Message>,
    opts: WsOptions,
) -> WsEnd {
    run_stream(conn.ws, outbound, inbound, opts)
}

/// Messages queued per direction of a [`bridge`]: 64. A full queue is not
/// read into: backpressure across the bridge.
const BRIDGE_QUEUE: usize = 64;

/// Hands each message to another pump's outbox: a full outbox gives the
/// message back (the pump holds it and stops reading: backpressure across
/// the bridge), a closed one says no one wants it.
struct Forward(Outbox);

impl Inbound for Forward {
    fn offer(&mut self, m: Message) -> Result<(), Refused> {
        self.0.try_send(m).map_err(|e| match e {
            TrySendError::Full(m) => Refused::Full(m),
            TrySendError::Disconnected(_) => Refused::Gone,
        })
    }
}

/// Relays messages between an accepted WebSocket (`conn`, pumped on the
/// calling thread) and one this side opened (`upstream`, pumped on a
/// `ws-bridge` thread) until either ends: text and binary messages and
/// Close frames pass through, pings are answered on each side. Two pumps
/// and two bounded outboxes, nothing else: a slow side slows the other
/// down, nothing is dropped. When one side ends, the other's outbox loses
/// its last sender and that side is closed too.
pub fn bridge<B: PollStream + 'static>(
    conn: WsConn,
    upstream: WebSocket<B>,
    opts: WsOptions,
) -> io::Result<()> {
    bridge_sockets(conn.ws, upstream, opts)
}

/// [`bridge`] for any two sockets: `a` pumped on the calling thread, `b`
/// on a `ws-bridge` thread.
pub fn bridge_sockets<A: PollStream, B: PollStream + 'static>(
    a: WebSocket<A>,
    upstream: WebSocket<B>,
    opts: WsOptions,
) -> io::Result<()> {
    let (to_conn, conn_rx) = try_outbox(BRIDGE_QUEUE)?;
    let (to_up, up_rx) = try_outbox(BRIDGE_QUEUE)?;
    let up_opts = opts;
    let up = std::thread::Builder::new()
        .name("ws-bridge".into())
        .spawn(move || {
            let _ = run_stream_into(upstream, up_rx, Forward(to_conn), up_opts);
        })?;
    let _ = run_stream_into(a, conn_rx, Forward(to_up), opts);
    let _ = up.join();
    Ok(())
}

/// The client side of a WebSocket handshake on an already connected
/// `stream` (plain or TLS): `url` (`ws://` or `wss://`, for the request
/// line and `Host`), `headers` added to the request, `offer` the
/// `Sec-WebSocket-Protocol` value if any. Returns the socket and the
/// subprotocol the server chose. The caller bounds the handshake with the
/// stream's own timeouts.
pub fn client_handshake<S: std::io::Read + std::io::Write>(
    stream: S,
    url: &str,
    headers: &[(String, String)],
    offer: Option<&str>,
    max_message_bytes: usize,
) -> Result<(WebSocket<S>, Option<String>), UpgradeError> {
    use tungstenite::client::IntoClientRequest;
    let fail = UpgradeError::WebSocket;
    let mut req = url
        .into_client_request()
        .map_err(|e| fail(format!("the upgrade request: {e}")))?;
    for (k, v) in headers {
        let name = tungstenite::http::HeaderName::from_bytes(k.as_bytes())
            .map_err(|e| fail(format!("header {k}: {e}")))?;
        let value = tungstenite::http::HeaderValue::from_str(v)
            .map_err(|e| fail(format!("header {k}: {e}")))?;
        req.headers_mut().append(name, value);
    }
    if let Some(o) = offer {
        let value = tungstenite::http::HeaderValue::from_str(o)
            .map_err(|e| fail(format!("Sec-WebSocket-Protocol: {e}")))?;
        req.headers_mut().insert("Sec-WebSocket-Protocol", value);
    }
    let config = tungstenite::protocol::WebSocketConfig::default()
        .max_message_size(Some(max_message_bytes))
        .max_frame_size(Some(max_message_bytes));
    let (ws, resp) = tungstenite::client::client_with_config(req, stream, Some(config)).map_err(
        |e| match e {
            tungstenite::handshake::HandshakeError::Failure(e) => fail(e.to_string()),
            tungstenite::handshake::HandshakeError::Interrupted(_) => {
                fail("the handshake timed out".to_string())
            }
        },
    )?;
    let chosen = resp
        .headers()
        .get("sec-websocket-protocol")
        .and_then(|v| v.to_str().ok())
        .map(str::to_string);
    Ok((ws, chosen))
}

/// Headers a WebSocket handshake writes itself (lower case): a proxy that
/// opens its own upgrade to the far side must not copy the client's.
pub const HANDSHAKE_HEADERS: &[&str] = &[
    "sec-websocket-key",
    "sec-websocket-version",
    "sec-websocket-protocol",
    "sec-websocket-extensions",
    "sec-websocket-accept",
];

/// Writes the server's answer to a WebSocket handshake whose
/// `Sec-WebSocket-Key` is `key`: `101 Switching Protocols` with the accept
/// key, the chosen subprotocol and `headers` (those the handshake owns, and
/// any with CR, LF or NUL, are left out), then flushes (the server's
/// upgrade, `conn`).
pub fn write_accept<S: io::Write>(
    sock: &mut S,
    key: &str,
    protocol: Option<&str>,
    headers: &[(String, String)],
) -> io::Result<()> {
    use super::conn::header_ok;
    use std::fmt::Write as _;
    let accept = tungstenite::handshake::derive_accept_key(key.as_bytes());
    let mut head = format!(
        "HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\nSec-WebSocket-Accept: {accept}\r\n"
    );
    if let Some(p) = protocol.filter(|p| header_ok("sec-websocket-protocol", p)) {
        let _ = write!(head, "Sec-WebSocket-Protocol: {p}\r\n");
    }
    for (k, v) in headers {
        let lower = k.to_ascii_lowercase();
        if matches!(
            lower.as_str(),
            "upgrade" | "connection" | "sec-websocket-accept" | "sec-websocket-protocol"
        ) || !header_ok(k, v)
        {
            continue;
        }
        let _ = write!(head, "{k}: {v}\r\n");
    }
    head.push_str("\r\n");
    sock.write_all(head.as_bytes())?;
    sock.flush()
}

/// Whether `name` is one of [`HANDSHAKE_HEADERS`] (any case).
pub fn is_handshake_header(name: &str) -> bool {
    HANDSHAKE_HEADERS
        .iter()
        .any(|h| h.eq_ignore_ascii_case(name))
}

/// Whether `headers` ask for a WebSocket upgrade.
pub fn wants_websocket(headers: &[(String, String)]) -> bool {
    let has = |name: &str, token: &str| {
        headers.iter().any(|(k, v)| {
            k.eq_ignore_ascii_case(name)
                && v.split(',').any(|t| t.trim().eq_ignore_ascii_case(token))
        })
    };
    has("upgrade", "websocket") && has("connection", "upgrade")
}

/// Messages handled per direction before looking at the other one.
const BATCH: usize = 64;
/// Retry period for a message held because the inbound channel was full.
const HELD_RETRY: Duration = Duration::from_millis(2);

/// Drives `ws` on the calling thread until it closes: text and binary
/// messages from the peer go to `inbound` (never blocking on it), messages
/// from `outbound` go to the peer. Pings are answered by tungstenite and
/// flushed at once; pings/pongs are not forwarded. The socket is switched to
/// non-blocking for the pump's life.
pub fn run_stream<S: PollStream>(
    ws: WebSocket<S>,
    outbound: OutboxReceiver,
    inbound: Sender<Message>,
    opts: WsOptions,
) -> WsEnd {
    run_stream_into(ws, outbound, inbound, opts).0
}

/// Where a pump hands the peer's messages: without ever blocking, taking
/// the message or giving it back ([`Refused::Full`]; the pump holds it and
/// stops reading the socket until it is taken: backpressure) or saying no
/// one wants messages any more ([`Refused::Gone`]; the pump drops them and
/// keeps the socket going for its close).
pub trait Inbound {
    fn offer(&mut self, m: Message) -> Result<(), Refused>;
}

/// Why an [`Inbound`] did not take a message.
pub enum Refused {
    Full(Message),
    Gone,
}

impl Inbound for Sender<Message> {
    fn offer(&mut self, m: Message) -> Result<(), Refused> {
        self.try_send(m).map_err(|e| match e {
            TrySendError::Full(m) => Refused::Full(m),
            TrySendError::Disconnected(_) => Refused::Gone,
        })
    }
}

/// [`run_stream`] into any [`Inbound`] (e.g. a consumer that handles each
/// message on the pump's own thread instead of a channel and a thread of
/// its own), which it gives back at the end.
pub fn run_stream_into<S: PollStream, I: Inbound>(
    ws: WebSocket<S>,
    outbound: OutboxReceiver,
    inbound: I,
    opts: WsOptions,
) -> (WsEnd, I) {
    if let Err(e) = ws.get_ref().set_nonblocking(true) {
        return (WsEnd::Error(format!("set_nonblocking: {e}")), inbound);
    }
    let now = Instant::now();
    let mut pump = Pump {
        ws,
        out: outbound,
        inbound,
        opts,
        held: None,
        inbound_gone: false,
        write_blocked: false,
        need_flush: true,
        more_in: false,
        more_out: false,
        closing: None,
        last_rx: now,
        last_tx: now,
    };
    let end = pump.run();
    let _ = pump.ws.get_ref().set_nonblocking(false);
    (end, pump.inbound)
}

struct Pump<S: PollStream, I: Inbound> {
    ws: WebSocket<S>,
    out: OutboxReceiver,
    inbound: I,
    opts: WsOptions,
    /// A message the full inbound channel did not take yet.
    held: Option<Message>,
    inbound_gone: bool,
    /// The socket refused bytes: wait for POLLOUT, stop taking outbound.
    write_blocked: bool,
    need_flush: bool,
    /// A read/outbound batch stopped early: loop again without waiting.
    more_in: bool,
    more_out: bool,
    /// We sent a Close; wait for the reply until this instant.
    closing: Option<Instant>,
    last_rx: Instant,
    last_tx: Instant,
}

fn would_block(e: &WsError) -> bool {
    matches!(e, WsError::Io(io) if io.kind() == io::ErrorKind::WouldBlock)
}

impl<S: PollStream, I: Inbound> Pump<S, I> {
    fn run(&mut self) -> WsEnd {
        loop {
            if self.closing.is_none() {
                let abort = self.out.abort.lock().take();
                if let Some(frame) = abort {
                    while self.out.rx.try_recv().is_ok() {}
                    self.closing = Some(Instant::now() + self.opts.close_timeout);
                    match self.ws.write(Message::Close(Some(frame))) {
                        Ok(()) => self.need_flush = true,
                        Err(e) if would_block(&e) => self.write_blocked = true,
                        Err(e) => return self.error_end(e),
                    }
                }
            }
            if let Some(m) = self.held.take() {
                self.deliver(m);
            }
            if self.held.is_none() {
                if let Some(end) = self.read_batch() {
                    return end;
                }
            }
            if !self.write_blocked && self.closing.is_none() {
                if let Some(end) = self.drain_outbound() {
                    return end;
                }
            }
            let now = Instant::now();
            if let Some(iv) = self.opts.ping_interval {
                if self.closing.is_none() && !self.write_blocked && now >= self.last_tx + iv {
                    match self.ws.write(Message::Ping(Default::default())) {
                        Ok(()) => self.need_flush = true,
                        Err(e) if would_block(&e) => self.write_blocked = true,
                        Err(e) => return self.error_end(e),
                    }
                }
            }
            if self.need_flush || self.write_blocked {
                match self.ws.flush() {
                    Ok(()) => {
                        self.need_flush = false;
                        self.write_blocked = false;
                        self.last_tx = now;
                    }
                    Err(e) if would_block(&e) => self.write_blocked = true,
                    Err(e) => return self.error_end(e),
                }
            }
            if self.closing.is_some_and(|d| now >= d) {
                return WsEnd::Closed;
            }
            if self
                .opts
                .idle_timeout
                .is_some_and(|t| now >= self.last_rx + t)
            {
                return WsEnd::Idle;
            }
            let can_read = self.held.is_none();
            let can_write = !self.write_blocked && self.closing.is_none();
            if (can_read && (self.more_in || self.ws.get_ref().has_buffered_input()))
                || (can_write && self.more_out)
            {
                continue;
            }
            if let Err(e) = self.wait(now, can_read, can_write) {
                return WsEnd::Error(format!("poll: {e}"));
            }
        }
    }

    fn wait(&mut self, now: Instant, can_read: bool, can_write: bool) -> io::Result<()> {
        let mut deadline: Option<Instant> = None;
        let mut at = |t: Instant| deadline = Some(deadline.map_or(t, |d| d.min(t)));
        if self.held.is_some() {
            at(now + HELD_RETRY);
        }
        if let Some(iv) = self.opts.ping_interval {
            if can_write {
                at(self.last_tx + iv);
            }
        }
        if let Some(t) = self.opts.idle_timeout {
            at(self.last_rx + t);
        }
        if let Some(d) = self.closing {
            at(d);
        }
        let timeout = deadline.map(|d| d.saturating_duration_since(now));
        let mut sock_events = PollFlags::empty();
        if can_read {
            sock_events |= PollFlags::IN;
        }
        if self.write_blocked {
            sock_events |= PollFlags::OUT;
        }
        let sock_fd = self.ws.get_ref().as_fd();
        let mut fds = Vec::with_capacity(2);
        if !sock_events.is_empty() {
            fds.push(PollFd::from_borrowed_fd(sock_fd, sock_events));
        }
        let waker_at = fds.len();
        // The waker also says "room again" (`Outbox::wake` from the inbound
        // consumer), so a pump holding a message resumes at once instead of
        // after HELD_RETRY, and "abort" (`Outbox::abort`), which must be
        // seen even while writes are blocked. A wake-up taken while writes
        // are blocked is remembered in `more_out`, so the queue is drained
        // as soon as the socket takes bytes again instead of waiting for a
        // wake-up that was already consumed (that lost wake-up was once a
        // rare stall in the backpressure test).
        let use_waker = self.closing.is_none();
        if use_waker {
            fds.push(PollFd::from_borrowed_fd(self.out.waker.fd(), PollFlags::IN));
        }
        poll(&mut fds, timeout)?;
        let woken = use_waker && !fds[waker_at].revents().is_empty();
        drop(fds);
        if woken {
            // Reset BEFORE draining the channel, so a send racing with the
            // drain leaves the eventfd readable: no lost wake-up.
            self.out.waker.reset();
            self.more_out = true;
        }
        Ok(())
    }

    /// Hands a message to the inbound channel without blocking.
    fn deliver(&mut self, m: Message) {
        if self.inbound_gone {
            return;
        }
        match self.inbound.offer(m) {
            Ok(()) => {}
            Err(Refused::Full(m)) => self.held = Some(m),
            Err(Refused::Gone) => self.inbound_gone = true,
        }
    }

    fn read_batch(&mut self) -> Option<WsEnd> {
        self.more_in = false;
        for _ in 0..BATCH {
            match self.ws.read() {
                Ok(msg) => {
                    self.last_rx = Instant::now();
                    match msg {
                        Message::Text(_) | Message::Binary(_) => {
                            self.deliver(msg);
                            if self.held.is_some() {
                                return None;
                            }
                        }
                        Message::Ping(_) | Message::Pong(_) | Message::Frame(_) => {
                            // A pong may be queued: flush it promptly.
                            self.need_flush = true;
                        }
                        Message::Close(frame) => return Some(self.peer_close(frame)),
                    }
                }
                Err(e) if would_block(&e) => return None,
                Err(WsError::Io(e)) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(WsError::ConnectionClosed | WsError::AlreadyClosed) => {
                    return Some(if self.closing.is_some() {
                        WsEnd::Closed
                    } else {
                        WsEnd::PeerClosed(None)
                    });
                }
                Err(e) => return Some(self.error_end(e)),
            }
        }
        self.more_in = true;
        None
    }

    /// The peer sent Close: pass it on, push tungstenite's reply out.
    fn peer_close(&mut self, frame: Option<CloseFrame>) -> WsEnd {
        if !self.inbound_gone {
            let _ = self.inbound.offer(Message::Close(frame.clone()));
        }
        let deadline = Instant::now() + self.opts.close_timeout;
        self.flush_until(deadline);
        if self.closing.is_some() {
            WsEnd::Closed
        } else {
            WsEnd::PeerClosed(frame)
        }
    }

    /// Flushes, waiting for POLLOUT as needed, until done or `deadline`.
    fn flush_until(&mut self, deadline: Instant) {
        loop {
            match self.ws.flush() {
                Err(e) if would_block(&e) => {}
                _ => return,
            }
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return;
            }
            let mut fds = [PollFd::from_borrowed_fd(
                self.ws.get_ref().as_fd(),
                PollFlags::OUT,
            )];
            if poll(&mut fds, Some(left)).is_err() {
                return;
            }
        }
    }

    fn drain_outbound(&mut self) -> Option<WsEnd> {
        self.more_out = false;
        for _ in 0..BATCH {
            let msg = match self.out.rx.try_recv() {
                Ok(m) => m,
                Err(TryRecvError::Empty) => return None,
                Err(TryRecvError::Disconnected) => Message::Close(Some(CloseFrame {
                    code: CloseCode::Normal,
                    reason: Default::default(),
                })),
            };
            let is_close = matches!(msg, Message::Close(_));
            if is_close {
                self.closing = Some(Instant::now() + self.opts.close_timeout);
            }
            match self.ws.write(msg) {
                Ok(()) => self.need_flush = true,
                Err(e) if would_block(&e) => {
                    // The message is buffered; more may wait in the channel
                    // with the waker already reset: look again once the
                    // socket drains, without waiting for a wake-up.
                    self.need_flush = true;
                    self.write_blocked = true;
                    self.more_out = true;
                    return None;
                }
                Err(e) => return Some(self.error_end(e)),
            }
            if is_close {
                return None;
            }
        }
        self.more_out = true;
        None
    }

    /// Maps a tungstenite error to the end of the pump, telling the peer
    /// why with a Close frame where the protocol has a code for it.
    fn error_end(&mut self, e: WsError) -> WsEnd {
        let code = match &e {
            WsError::ConnectionClosed | WsError::AlreadyClosed => {
                return if self.closing.is_some() {
                    WsEnd::Closed
                } else {
                    WsEnd::PeerClosed(None)
                };
            }
            WsError::Capacity(CapacityError::MessageTooLong { .. }) => Some(CloseCode::Size),
            WsError::Utf8(_) => Some(CloseCode::Invalid),
            WsError::Protocol(ProtocolError::ResetWithoutClosingHandshake) => None,
            WsError::Protocol(_) => Some(CloseCode::Protocol),
            _ => None,
        };
        if let Some(code) = code {
            if self.ws.can_write() {
                let _ = self.ws.close(Some(CloseFrame {
                    code,
                    reason: Default::default(),
                }));
                self.flush_until(Instant::now() + Duration::from_millis(100));
            }
        }
        WsEnd::Error(e.to_string())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::net::{TcpListener, TcpStream};
    use tungstenite::protocol::Role;

    /// A connected pair of raw WebSockets over loopback (server, client).
    fn pair() -> (WebSocket<TcpStream>, WebSocket<TcpStream>) {
        let l = TcpListener::bind("127.0.0.1:0").unwrap();
        let c = TcpStream::connect(l.local_addr().unwrap()).unwrap();
        let (s, _) = l.accept().unwrap();
        c.set_nodelay(true).unwrap();
        s.set_nodelay(true).unwrap();
        (
            WebSocket::from_raw_socket(s, Role::Server, None),
            WebSocket::from_raw_socket(c, Role::Client, None),
        )
    }

    fn watchdog(secs: u64) -> crossbeam_channel::Sender<()> {
        let (tx, rx) = crossbeam_channel::bounded::<()>(0);
        std::thread::spawn(move || {
            if let Err(crossbeam_channel::RecvTimeoutError::Timeout) =
                rx.recv_timeout(Duration::from_secs(secs))
            {
                eprintln!("watchdog: test hung");
                std::process::abort();
            }
        });
        tx
    }

    #[test]
    fn outbox_drop_closes_normally() {
        let _w = watchdog(20);
        let (server, mut client) = pair();
        let (tx, rx) = outbox(4);
        let (in_tx, in_rx) = crossbeam_channel::bounded(4);
        let h = std::thread::spawn(move || run_stream(server, rx, in_tx, WsOptions::default()));
        tx.send(Message::text("hi")).unwrap();
        drop(tx);
        assert_eq!(client.read().unwrap(), Message::text("hi"));
        match client.read().unwrap() {
            Message::Close(Some(f)) => assert_eq!(f.code, CloseCode::Normal),
            other => panic!("{other:?}"),
        }
        // Reply, then the server ends with Closed.
        let _ = client.flush();
        assert_eq!(h.join().unwrap(), WsEnd::Closed);
        drop(in_rx);
    }

    #[test]
    fn idle_timeout_ends_pump() {
        let _w = watchdog(20);
        let (server, _client) = pair();
        let (_tx, rx) = outbox(4);
        let (in_tx, _in_rx) = crossbeam_channel::bounded(4);
        let opts = WsOptions {
            ping_interval: None,
            idle_timeout: Some(Duration::from_millis(100)),
            close_timeout: Duration::from_secs(1),
        };
        let t = Instant::now();
        assert_eq!(run_stream(server, rx, in_tx, opts), WsEnd::Idle);
        assert!(t.elapsed() >= Duration::from_millis(100));
    }

    #[test]
    fn pings_when_outbound_idle() {
        let _w = watchdog(20);
        let (server, mut client) = pair();
        let (tx, rx) = outbox(4);
        let (in_tx, _in_rx) = crossbeam_channel::bounded(4);
        let opts = WsOptions {
            ping_interval: Some(Duration::from_millis(50)),
            idle_timeout: None,
            close_timeout: Duration::from_secs(1),
        };
        let h = std::thread::spawn(move || run_stream(server, rx, in_tx, opts));
        match client.read().unwrap() {
            Message::Ping(_) => {}
            other => panic!("{other:?}"),
        }
        drop(tx);
        loop {
            match client.read() {
                Ok(Message::Close(_)) => {
                    let _ = client.flush();
                    break;
                }
                Ok(_) => {}
                Err(e) => panic!("{e}"),
            }
        }
        assert_eq!(h.join().unwrap(), WsEnd::Closed);
    }

    #[test]
    fn peer_reset_is_an_error_and_inbound_gone_is_tolerated() {
        let _w = watchdog(20);
        let (server, mut client) = pair();
        let (_tx, rx) = outbox(4);
        let (in_tx, in_rx) = crossbeam_channel::bounded(1);
        drop(in_rx);
        let h = std::thread::spawn(move || run_stream(server, rx, in_tx, WsOptions::default()));
        for _ in 0..10 {
            client.send(Message::binary(vec![1u8; 100])).unwrap();
        }
        drop(client);
        match h.join().unwrap() {
            WsEnd::Error(_) => {}
            other => panic!("{other:?}"),
        }
    }
}
