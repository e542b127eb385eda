//! Raw upgrades: a request answered `101 Switching Protocols` after which
//! the socket carries some other protocol's bytes (not WebSocket), and the
//! pump that drives such a socket.
//!
//! The handler answers [`Reply::RawUpgrade`](super::Reply) with the 101's
//! headers (it names the protocol: `Connection`, `Upgrade` and its own;
//! `http` adds nothing but `Date`), and the server hands the socket to
//! `on_open` on the connection's thread as a [`RawConn`], with any bytes
//! the client sent after the head. As for a WebSocket, no body byte was
//! read before the handler admitted the head.
//!
//! [`run`] drives a [`RawConn`] as `ws::run_stream_into` drives a
//! WebSocket, with the same outbox and inbound types, so a caller can
//! serve both transports with one code path: what the peer sends goes to
//! the [`Inbound`] as `Message::Binary` chunks (as read, up to 64 KiB;
//! boundaries mean nothing), never blocking on it (a full inbound holds
//! the chunk and stops reading the socket: TCP backpressure); each
//! outbound `Binary` (or `Text`) message is written as bytes; an outbound
//! `Close`, or every [`Outbox`](super::ws::Outbox) dropped, flushes what
//! was queued before it, sends TLS close_notify and FIN, and ends;
//! `Outbox::abort` ends at once, dropping what is queued. The peer's EOF
//! ends the pump (no half-open connections: the protocols served this way
//! end with their transport). Ping and Pong messages are ignored.

use std::io::{self, Read, Write};
use std::net::{Shutdown, SocketAddr};
use std::os::fd::AsFd;
use std::time::{Duration, Instant};

use crossbeam_channel::TryRecvError;
use rustix::event::{PollFd, PollFlags};
use tungstenite::Message;

use super::stream::{poll, PollStream, Socket};
use super::ws::{Inbound, OutboxReceiver, Refused};

/// Bytes read per `read` call (and the largest inbound chunk).
const READ_CHUNK: usize = 64 * 1024;
/// Outbound messages written per turn before looking at the socket again.
const BATCH: usize = 64;
/// Retry period for a chunk held because the inbound was full.
const HELD_RETRY: Duration = Duration::from_millis(2);
/// A pump holding a chunk reads nothing, so it would never see the peer
/// go; it still polls the socket for a reset (POLLERR/POLLHUP: the
/// connection ends at once) and for the peer's FIN (POLLRDHUP: the
/// consumer gets this long to take what is held, then the connection
/// ends). A consumer stuck behind a far side that does not read would
/// otherwise keep the connection and its threads for ever. A FIN queued
/// behind bytes our full receive window refuses only arrives once the
/// peer's kernel gives up on the orphaned socket and resets it.
const PEER_GONE_DRAIN: Duration = Duration::from_secs(5);

/// What to do with an accepted raw upgrade: the server writes
/// `HTTP/1.1 101 Switching Protocols`, `Date` and `headers` (any with CR,
/// LF or NUL are left out), then calls `on_open` on the connection's
/// thread with the socket.
pub struct RawUpgrade {
    pub headers: Vec<(String, String)>,
    pub on_open: Box<dyn FnOnce(RawConn) + Send>,
}

/// An upgraded non-WebSocket connection on the server.
pub struct RawConn {
    pub(super) sock: Socket,
    /// Bytes the client sent after the request, already read.
    pub(super) early: Vec<u8>,
    pub(super) peer: SocketAddr,
    pub(super) client_cert_der: Option<Vec<u8>>,
}

impl RawConn {
    pub fn peer(&self) -> SocketAddr {
        self.peer
    }

    /// The TLS client's certificate (DER), if it presented one.
    pub fn client_cert_der(&self) -> Option<&[u8]> {
        self.client_cert_der.as_deref()
    }
}

impl std::fmt::Debug for RawConn {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "RawConn({})", self.peer)
    }
}

/// How a raw pump ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RawEnd {
    /// We closed: an outbound Close, every outbox dropped, or an abort.
    Closed,
    /// The peer closed its side (EOF).
    PeerClosed,
    /// Nothing came from the peer for `idle_timeout`.
    Idle,
    /// A transport error.
    Error(String),
}

/// Drives `conn` on the calling thread until it ends (see the module doc).
/// `idle_timeout`: end with [`RawEnd::Idle`] after that long without a
/// byte from the peer.
pub fn run<I: Inbound>(
    conn: RawConn,
    outbound: OutboxReceiver,
    inbound: I,
    idle_timeout: Option<Duration>,
) -> (RawEnd, I) {
    let RawConn {
        mut sock, early, ..
    } = conn;
    if let Err(e) = sock.set_nonblocking(true) {
        return (RawEnd::Error(format!("set_nonblocking: {e}")), inbound);
    }
    let mut pump = Pump {
        inbound,
        held: (!early.is_empty()).then(|| Message::Binary(early.into())),
        inbound_gone: false,
        pending: Vec::new(),
        off: 0,
        need_flush: false,
        write_blocked: false,
        closing: false,
        last_rx: Instant::now(),
        idle_timeout,
        peer_gone: None,
    };
    let end = pump.run(&mut sock, &outbound);
    if matches!(end, RawEnd::Closed | RawEnd::Idle) {
        if let Socket::Tls(t) = &mut sock {
            t.send_close_notify();
        }
        let _ = sock.flush();
    }
    let _ = sock.tcp().shutdown(Shutdown::Both);
    (end, pump.inbound)
}

struct Pump<I: Inbound> {
    inbound: I,
    held: Option<Message>,
    inbound_gone: bool,
    /// Bytes of the outbound message being written, from `off`.
    pending: Vec<u8>,
    off: usize,
    need_flush: bool,
    write_blocked: bool,
    /// A Close was taken from the outbox: finish `pending`, then end.
    closing: bool,
    last_rx: Instant,
    idle_timeout: Option<Duration>,
    /// When the peer's FIN was seen while a chunk was held.
    peer_gone: Option<Instant>,
}

impl<I: Inbound> Pump<I> {
    fn run(&mut self, sock: &mut Socket, out: &OutboxReceiver) -> RawEnd {
        let mut scratch = vec![0u8; READ_CHUNK];
        loop {
            if out.abort.lock().take().is_some() {
                return RawEnd::Closed;
            }
            if let Some(m) = self.held.take() {
                self.deliver(m);
            }
            let mut more_in = false;
            if self.held.is_none() {
                match self.read_batch(sock, &mut scratch) {
                    Ok(more) => more_in = more,
                    Err(end) => return end,
                }
            }
            let more_out = match self.write_out(sock, out) {
                Ok(more) => more,
                Err(e) => return RawEnd::Error(e.to_string()),
            };
            if self.closing && self.pending.is_empty() && !self.need_flush {
                return RawEnd::Closed;
            }
            let now = Instant::now();
            if self.idle_timeout.is_some_and(|t| now >= self.last_rx + t) {
                return RawEnd::Idle;
            }
            if self.peer_gone.is_some_and(|t| now >= t + PEER_GONE_DRAIN) {
                return RawEnd::PeerClosed;
            }
            let can_read = self.held.is_none();
            if (can_read && (more_in || sock.has_buffered_input()))
                || (more_out && !self.write_blocked)
            {
                continue;
            }
            if let Err(e) = self.wait(sock, out, now, can_read) {
                return RawEnd::Error(format!("poll: {e}"));
            }
        }
    }

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

    /// Reads until `WouldBlock`, a full inbound or a batch; `Ok(true)`
    /// when it stopped early with more to read.
    fn read_batch(&mut self, sock: &mut Socket, scratch: &mut [u8]) -> Result<bool, RawEnd> {
        for _ in 0..BATCH {
            match sock.read(scratch) {
                Ok(0) => return Err(RawEnd::PeerClosed),
                Ok(n) => {
                    self.last_rx = Instant::now();
                    self.deliver(Message::Binary(scratch[..n].to_vec().into()));
                    if self.held.is_some() {
                        return Ok(false);
                    }
                }
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => return Ok(false),
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) if e.kind() == io::ErrorKind::UnexpectedEof => {
                    return Err(RawEnd::PeerClosed)
                }
                Err(e) => return Err(RawEnd::Error(e.to_string())),
            }
        }
        Ok(true)
    }

    /// Writes pending bytes and takes more from the outbox; `Ok(true)`
    /// when the outbox may hold more (a batch ended early).
    fn write_out(&mut self, sock: &mut Socket, out: &OutboxReceiver) -> io::Result<bool> {
        self.write_blocked = false;
        for _ in 0..BATCH {
            while self.off < self.pending.len() {
                match sock.write(&self.pending[self.off..]) {
                    Ok(0) => return Err(io::ErrorKind::WriteZero.into()),
                    Ok(n) => {
                        self.off += n;
                        self.need_flush = true;
                    }
                    Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                        self.write_blocked = true;
                        return Ok(true);
                    }
                    Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                    Err(e) => return Err(e),
                }
            }
            self.pending.clear();
            self.off = 0;
            if self.closing {
                break;
            }
            match out.rx.try_recv() {
                Ok(Message::Binary(b)) => self.pending = b.into(),
                Ok(Message::Text(t)) => self.pending = t.as_bytes().to_vec(),
                Ok(Message::Close(_)) | Err(TryRecvError::Disconnected) => self.closing = true,
                Ok(_) => {}
                Err(TryRecvError::Empty) => break,
            }
        }
        if self.need_flush {
            match sock.flush() {
                Ok(()) => self.need_flush = false,
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                    self.write_blocked = true;
                    return Ok(true);
                }
                Err(e) => return Err(e),
            }
        }
        Ok(!self.pending.is_empty())
    }

    fn wait(
        &mut self,
        sock: &Socket,
        out: &OutboxReceiver,
        now: Instant,
        can_read: bool,
    ) -> io::Result<()> {
        let mut deadline: Option<Instant> = None;
        if self.held.is_some() {
            deadline = Some(now + HELD_RETRY);
        }
        if let Some(t) = self.idle_timeout {
            let at = self.last_rx + t;
            deadline = Some(deadline.map_or(at, |d| d.min(at)));
        }
        let mut events = PollFlags::empty();
        if can_read {
            events |= PollFlags::IN;
        } else if self.peer_gone.is_none() {
            // Held: not reading, but the peer's FIN is still seen.
            events |= PollFlags::RDHUP;
        }
        if self.write_blocked {
            events |= PollFlags::OUT;
        }
        let mut fds = Vec::with_capacity(2);
        if !events.is_empty() {
            fds.push(PollFd::from_borrowed_fd(sock.as_fd(), events));
        }
        let waker_at = fds.len();
        fds.push(PollFd::from_borrowed_fd(out.waker.fd(), PollFlags::IN));
        poll(&mut fds, deadline.map(|d| d.saturating_duration_since(now)))?;
        if !can_read && waker_at == 1 {
            let ev = fds[0].revents();
            if ev.intersects(PollFlags::HUP | PollFlags::ERR) {
                // Reset (or both ways shut): nothing held can go anywhere.
                self.peer_gone = Some(now - PEER_GONE_DRAIN);
            } else if ev.contains(PollFlags::RDHUP) {
                self.peer_gone.get_or_insert(now);
            }
        }
        if !fds[waker_at].revents().is_empty() {
            // Reset before the next drain: a send racing with it leaves the
            // eventfd readable (no lost wake-up).
            out.waker.reset();
        }
        Ok(())
    }
}
