//! The listener: binds, accepts, reads every connection's first head
//! itself, and gives a connection its own named thread only once that head
//! is admitted, up to `max_connections`.
//!
//! Owns the listening socket, the stop eventfd, the connection count, the
//! per-peer counts and the pending heads. It waits in epoll on the
//! listener, the stop eventfd and every pending head, so `shutdown` wakes
//! it at once and an idle server burns no CPU. A pending head holds an fd,
//! its TLS session (the handshake is driven here, non-blocking) and the
//! bytes read so far: no thread, no slot; it has a deadline (`head_grace`
//! plus what it earns at `min_head_bytes_per_sec`). A complete head is
//! admitted here (`Handler::admit`): refused, it is answered and drained
//! here; admitted, it gets a connection thread with its admission when a
//! slot is free. When none is, a health route is still answered
//! (`Handler::overflow`), anything else 503. Over `max_connections_per_peer`
//! (connections of one address that have not authenticated), only a head
//! the admission knows (`Admit::known`) is served; others get 429. The
//! number of threads stays bounded however hard the server is hit.

use std::io;
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use parking_lot::Mutex;
use rustix::event::{PollFd, PollFlags};

use super::conn::{self, Shared};
use super::parse::parse_head;
use super::stream::{poll, Socket, Waker};
use super::types::{Admission, Admit, Handler, HttpError, Response};
use std::io::Read;
use std::os::fd::AsFd;

/// Server limits and settings. Every default is chosen for the simulated
/// cluster and the daemon's front door on a small machine.
#[derive(Clone)]
pub struct ServerConfig {
    /// Concurrent connections (each one thread); more get 503. Default 1024.
    pub max_connections: usize,
    /// Connections from one peer address that have not yet made a request
    /// admitted as `known` (authenticated); more get 429. Default: no limit.
    pub max_connections_per_peer: usize,
    /// Time a new connection gets for its TLS handshake and the start of
    /// its first head, and the base of every head's deadline. Default 5 s.
    pub head_grace: Duration,
    /// A head must keep arriving at this rate past `head_grace` (each byte
    /// earns 1/rate s), up to `request_read_timeout`: the slowloris guard.
    /// Default 1024 bytes/s.
    pub min_head_bytes_per_sec: usize,
    /// Largest request head (request line + headers). Default 64 KiB.
    pub max_header_bytes: usize,
    /// Largest request body, either framing. Default 8 MiB.
    pub max_body_bytes: usize,
    /// How long a keep-alive connection may sit idle between requests.
    /// Default 90 s (longer than clients' own pools, shorter than forever).
    pub keep_alive_idle: Duration,
    /// Deadline for a whole request (head + body) once its first byte came,
    /// and for the first request and the TLS handshake of a new connection:
    /// the slowloris guard. Default 30 s.
    pub request_read_timeout: Duration,
    /// Per-write timeout on responses and streams, so a client that stops
    /// reading cannot pin a thread forever. Default 60 s.
    pub write_timeout: Duration,
    /// Serve TLS with this configuration (see `tls::server_config_from_pem`).
    pub tls: Option<Arc<rustls::ServerConfig>>,
    /// Stack of each connection thread. Default 256 KiB: the sim holds
    /// 2,000+ idle watch connections, one thread each.
    pub thread_stack_bytes: usize,
    /// Plain connections whose first head is still arriving (they hold
    /// an fd and a small buffer each, no thread); more are closed at once.
    /// Default 4096.
    pub max_pending_heads: usize,
    /// Prefix of thread names (`{name}-listen`, `{name}-conn`, ...).
    pub name: &'static str,
    /// Refuse (400) a request head with a line ended by a bare LF. Default
    /// true; the sim turns it off to accept what Go's server accepts
    /// (`parse::parse_head`).
    pub strict_crlf: bool,
}

impl Default for ServerConfig {
    fn default() -> Self {
        ServerConfig {
            max_connections: 1024,
            max_connections_per_peer: usize::MAX,
            head_grace: Duration::from_secs(5),
            min_head_bytes_per_sec: 1024,
            max_header_bytes: 64 * 1024,
            max_body_bytes: 8 << 20,
            keep_alive_idle: Duration::from_secs(90),
            request_read_timeout: Duration::from_secs(30),
            write_timeout: Duration::from_secs(60),
            tls: None,
            thread_stack_bytes: 256 * 1024,
            max_pending_heads: 4096,
            name: "http",
            strict_crlf: true,
        }
    }
}

impl std::fmt::Debug for ServerConfig {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ServerConfig")
            .field("max_connections", &self.max_connections)
            .field("max_connections_per_peer", &self.max_connections_per_peer)
            .field("head_grace", &self.head_grace)
            .field("min_head_bytes_per_sec", &self.min_head_bytes_per_sec)
            .field("max_header_bytes", &self.max_header_bytes)
            .field("max_body_bytes", &self.max_body_bytes)
            .field("keep_alive_idle", &self.keep_alive_idle)
            .field("request_read_timeout", &self.request_read_timeout)
            .field("write_timeout", &self.write_timeout)
            .field("tls", &self.tls.is_some())
            .field("thread_stack_bytes", &self.thread_stack_bytes)
            .field("max_pending_heads", &self.max_pending_heads)
            .field("name", &self.name)
            .field("strict_crlf", &self.strict_crlf)
            .finish()
    }
}

/// Why a connection is on the overflow path.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Over {
    /// Every connection slot is taken.
    Slots,
    /// Its peer address is over `max_connections_per_peer`.
    Peer,
}

/// A running HTTP server. Dropping it shuts it down.
pub struct Server {
    addr: SocketAddr,
    shared: Arc<Shared>,
    listener: Mutex<Option<JoinHandle<()>>>,
}

impl Server {
    /// Binds `addr` (port 0 picks a free port) and starts the listener thread.
    pub fn bind(
        addr: SocketAddr,
        cfg: ServerConfig,
        handler: Arc<dyn Handler>,
    ) -> io::Result<Server> {
        let listener = bind_listener(addr)?;
        listener.set_nonblocking(true)?;
        let addr = listener.local_addr()?;
        let name = cfg.name;
        let shared = Arc::new(Shared {
            cfg,
            handler,
            stop: Waker::new()?,
            stopping: AtomicBool::new(false),
            active: AtomicUsize::new(0),
            outage_until: parking_lot::Mutex::new(None),
            poke: Waker::new()?,
            peers: Mutex::new(std::collections::HashMap::new()),
            body_bytes: AtomicUsize::new(0),
            refused: std::sync::atomic::AtomicU64::new(0),
        });
        let s = shared.clone();
        let handle = std::thread::Builder::new()
            .name(format!("{name}-listen"))
            .spawn(move || listen(&s, listener, addr))?;
        Ok(Server {
            addr,
            shared,
            listener: Mutex::new(Some(handle)),
        })
    }

    pub fn local_addr(&self) -> SocketAddr {
        self.addr
    }

    /// Open connections (including upgraded WebSockets still on their
    /// connection thread).
    pub fn connections(&self) -> usize {
        self.shared.active.load(Ordering::Acquire)
    }

    /// Body bytes held in memory right now by requests being read or
    /// handled.
    pub fn body_bytes_buffered(&self) -> usize {
        self.shared.body_bytes.load(Ordering::Acquire)
    }

    /// Requests refused from their head by `Handler::admit` so far.
    pub fn refused_at_head(&self) -> u64 {
        self.shared.refused.load(Ordering::Relaxed)
    }

    /// The most not-yet-authenticated connections any one peer address
    /// holds right now.
    pub fn max_connections_of_a_peer(&self) -> usize {
        self.shared
            .peers
            .lock()
            .values()
            .copied()
            .max()
            .unwrap_or(0)
    }

    /// A handle reading these figures that outlives no server (for
    /// scrape-time metrics probes).
    pub fn stats(&self) -> Stats {
        Stats(Arc::downgrade(&self.shared))
    }

    /// Plays dead for `d` (fault injection): the listening port is closed,
    /// so new connections are refused; open connections are closed at
    /// their next request and streams see `peer_closed()`. Afterwards the
    /// same address is bound again.
    pub fn refuse_for(&self, d: Duration) {
        *self.shared.outage_until.lock() = Some(Instant::now() + d);
        self.shared.poke.wake();
    }

    /// Stops accepting (the port is closed when this returns), closes idle
    /// keep-alive connections, and makes streams' `peer_closed()` true.
    /// Requests in flight finish.
    pub fn shutdown(&self) {
        self.shared.stopping.store(true, Ordering::Release);
        self.shared.stop.wake();
        if let Some(h) = self.listener.lock().take() {
            if h.thread().id() != std::thread::current().id() {
                let _ = h.join();
            }
        }
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        self.shutdown();
    }
}

/// The server's figures, read at scrape time (zero once it is gone).
#[derive(Clone)]
pub struct Stats(std::sync::Weak<Shared>);

impl Stats {
    pub fn body_bytes_buffered(&self) -> usize {
        self.0
            .upgrade()
            .map_or(0, |s| s.body_bytes.load(Ordering::Acquire))
    }

    pub fn refused_at_head(&self) -> u64 {
        self.0
            .upgrade()
            .map_or(0, |s| s.refused.load(Ordering::Relaxed))
    }

    pub fn max_connections_of_a_peer(&self) -> usize {
        self.0
            .upgrade()
            .map_or(0, |s| s.peers.lock().values().copied().max().unwrap_or(0))
    }

    pub fn connections(&self) -> usize {
        self.0
            .upgrade()
            .map_or(0, |s| s.active.load(Ordering::Acquire))
    }
}

/// Gives back a connection slot when the connection thread ends (or when
/// it could not be spawned).
struct Slot(Arc<Shared>);

impl Drop for Slot {
    fn drop(&mut self) {
        self.0.active.fetch_sub(1, Ordering::AcqRel);
    }
}

/// epoll keys of the listener's own descriptors; pending heads use keys
/// from [`FIRST_HEAD_KEY`].
const KEY_LISTENER: u64 = 0;
const KEY_STOP: u64 = 1;
const KEY_POKE: u64 = 2;
const FIRST_HEAD_KEY: u64 = 16;
/// Bytes read from a pending head's socket per read.
const HEAD_READ: usize = 4096;
/// How long an answered connection is drained before it is closed, and
/// how much of what it still sends is read (and discarded) at most: 2 s,
/// 1 MiB.
const DRAIN: Duration = Duration::from_millis(2000);
const DRAIN_BYTES: usize = 1 << 20;
/// How long a drained connection is then held without reading before it
/// is closed: 5 s (an fd and what the kernel already queued; bounded by
/// `max_pending_heads` with the heads).
const QUIET: Duration = Duration::from_secs(5);

/// A plain-TCP connection whose first head is still arriving: it holds
/// an fd and the bytes read so far, no thread and no slot.
struct Pending {
    tcp: TcpStream,
    /// The TLS session, its handshake driven here without blocking.
    tls: Option<Box<rustls::ServerConnection>>,
    buf: Vec<u8>,
    peer: SocketAddr,
    accepted: Instant,
    /// Its place in the peer's count; `None` when over the peer's limit
    /// (or no limit is set: see `over_peer`).
    peer_slot: Option<conn::PeerSlot>,
    over_peer: bool,
    /// Answered and closing: what the client still sends is read and
    /// discarded until then (the linger, without a thread).
    drain_until: Option<Instant>,
    /// Bytes discarded while draining.
    drained: usize,
}

impl Pending {
    fn deadline(&self, cfg: &ServerConfig) -> Instant {
        self.drain_until
            .unwrap_or_else(|| conn::head_deadline(self.accepted, self.buf.len(), cfg))
    }
}

/// The listener's loop: accepts, reads first heads of plain connections
/// (epoll, each with its deadline and minimum rate), and gives a
/// connection thread only to a complete head; TLS connections get their
/// thread at once (the handshake runs there, within `head_grace`).
fn listen(shared: &Arc<Shared>, listener: TcpListener, addr: SocketAddr) {
    use rustix::buffer::spare_capacity;
    use rustix::event::epoll;
    let ep = match epoll::create(epoll::CreateFlags::CLOEXEC) {
        Ok(ep) => ep,
        Err(e) => {
            log::error!("listener: epoll_create: {e}");
            return;
        }
    };
    let add = |fd: std::os::fd::BorrowedFd<'_>, key: u64| {
        epoll::add(
            &ep,
            fd,
            epoll::EventData::new_u64(key),
            epoll::EventFlags::IN,
        )
    };
    let mut listener = listener;
    if add(listener.as_fd(), KEY_LISTENER)
        .and_then(|()| add(shared.stop.fd(), KEY_STOP))
        .and_then(|()| add(shared.poke.fd(), KEY_POKE))
        .is_err()
    {
        log::error!("listener: epoll_ctl failed");
        return;
    }
    let mut heads: std::collections::HashMap<u64, Pending> = std::collections::HashMap::new();
    let mut next_key = FIRST_HEAD_KEY;
    let mut events: Vec<epoll::Event> = Vec::with_capacity(256);
    loop {
        let now = Instant::now();
        let timeout = heads
            .values()
            .map(|p| p.deadline(&shared.cfg))
            .min()
            .map(|d| d.saturating_duration_since(now) + Duration::from_millis(1));
        let ts = timeout.and_then(|t| rustix::event::Timespec::try_from(t).ok());
        events.clear();
        match epoll::wait(&ep, spare_capacity(&mut events), ts.as_ref()) {
            Ok(_) | Err(rustix::io::Errno::INTR) => {}
            Err(e) => {
                log::error!("listener: epoll_wait: {e}");
                return;
            }
        }
        if shared.is_stopping() {
            return;
        }
        let mut readable = Vec::new();
        let mut accept = false;
        for ev in &events {
            match ev.data.u64() {
                KEY_LISTENER => accept = true,
                KEY_STOP => return,
                KEY_POKE => {
                    shared.poke.reset();
                    if shared.in_outage() {
                        let _ = epoll::delete(&ep, listener.as_fd());
                        // Pending heads are dropped with the port.
                        for (_, p) in heads.drain() {
                            let _ = epoll::delete(&ep, p.tcp.as_fd());
                        }
                        match play_dead(shared, listener, addr) {
                            Some(l) => listener = l,
                            None => return,
                        }
                        if add(listener.as_fd(), KEY_LISTENER).is_err() {
                            log::error!("listener: epoll_ctl failed");
                            return;
                        }
                    }
                }
                key => readable.push(key),
            }
        }
        if accept {
            let pending = heads.len();
            accept_all(
                shared,
                &listener,
                |p| {
                    let key = next_key;
                    next_key += 1;
                    if add(p.tcp.as_fd(), key).is_ok() {
                        heads.insert(key, p);
                    }
                },
                pending,
            );
        }
        for key in readable {
            let Some(p) = heads.get_mut(&key) else {
                continue;
            };
            match read_head(shared, p) {
                HeadState::More => {}
                HeadState::Quiet => {
                    let _ = epoll::delete(&ep, p.tcp.as_fd());
                    // A client blocked writing into a full window reads
                    // the answer once its own write gives up.
                    p.drain_until = Some(Instant::now() + QUIET);
                }
                HeadState::Gone => {
                    if let Some(p) = heads.remove(&key) {
                        let _ = epoll::delete(&ep, p.tcp.as_fd());
                    }
                }
                HeadState::Complete => {
                    if let Some(p) = heads.remove(&key) {
                        let _ = epoll::delete(&ep, p.tcp.as_fd());
                        if let Some(mut p) = head_ready(shared, p) {
                            // Answered: linger here, reading and
                            // discarding, until the client stops or the
                            // time is up.
                            p.drain_until = Some(Instant::now() + DRAIN);
                            p.buf = Vec::new();
                            if p.tcp.set_nonblocking(true).is_ok()
                                && add(p.tcp.as_fd(), key).is_ok()
                            {
                                heads.insert(key, p);
                            }
                        }
                    }
                }
            }
        }
        // Heads past their deadline (too slow, or never sent) are closed.
        let now = Instant::now();
        let late: Vec<u64> = heads
            .iter()
            .filter(|(_, p)| p.deadline(&shared.cfg) <= now)
            .map(|(k, _)| *k)
            .collect();
        for key in late {
            if let Some(p) = heads.remove(&key) {
                let _ = epoll::delete(&ep, p.tcp.as_fd());
            }
        }
    }
}

/// Accepts every waiting connection: plain ones become pending heads
/// (`pend`), TLS ones get a connection thread or the overflow path.
fn accept_all(
    shared: &Arc<Shared>,
    listener: &TcpListener,
    mut pend: impl FnMut(Pending),
    mut pending: usize,
) {
    let cfg = &shared.cfg;
    loop {
        let (tcp, peer) = match listener.accept() {
            Ok(x) => x,
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => return,
            Err(e)
                if matches!(
                    e.kind(),
                    io::ErrorKind::Interrupted | io::ErrorKind::ConnectionAborted
                ) =>
            {
                continue
            }
            Err(e) => {
                // Out of fds or memory: back off briefly instead of
                // spinning on a listener that stays readable.
                log::warn!("accept failed: {e}");
                let mut stop = [PollFd::from_borrowed_fd(shared.stop.fd(), PollFlags::IN)];
                let _ = poll(&mut stop, Some(Duration::from_millis(50)));
                return;
            }
        };
        let accepted = Instant::now();
        let peer_slot = if cfg.max_connections_per_peer == usize::MAX {
            None
        } else {
            let mut peers = shared.peers.lock();
            let n = peers.entry(peer.ip()).or_insert(0);
            if *n >= cfg.max_connections_per_peer {
                None
            } else {
                *n += 1;
                Some(conn::PeerSlot {
                    shared: shared.clone(),
                    ip: peer.ip(),
                })
            }
        };
        let over_peer = cfg.max_connections_per_peer != usize::MAX && peer_slot.is_none();
        if pending >= cfg.max_pending_heads {
            log::warn!("too many connections without a head: dropping {peer}");
            continue;
        }
        let tls = match &cfg.tls {
            None => None,
            Some(c) => match rustls::ServerConnection::new(c.clone()) {
                Ok(t) => Some(Box::new(t)),
                Err(e) => {
                    log::warn!("TLS setup failed: {e}");
                    continue;
                }
            },
        };
        if tcp.set_nonblocking(true).is_err() {
            continue;
        }
        pending += 1;
        pend(Pending {
            tcp,
            tls,
            buf: Vec::new(),
            peer,
            accepted,
            peer_slot,
            over_peer,
            drain_until: None,
            drained: 0,
        });
    }
}

/// Takes a connection slot if one is free.
fn take_slot(shared: &Shared) -> bool {
    if shared.active.fetch_add(1, Ordering::AcqRel) >= shared.cfg.max_connections {
        shared.active.fetch_sub(1, Ordering::AcqRel);
        return false;
    }
    true
}

/// A connection thread for a connection holding a slot (taken by the
/// caller); `handshake`: run the TLS handshake first.
fn spawn_conn(
    shared: &Arc<Shared>,
    sock: Socket,
    peer: SocketAddr,
    buf: Vec<u8>,
    peer_slot: Option<conn::PeerSlot>,
    accepted: Instant,
    first: Option<Admit>,
) {
    let slot = Slot(shared.clone());
    let spawned = std::thread::Builder::new()
        .name(format!("{}-conn", shared.cfg.name))
        .stack_size(shared.cfg.thread_stack_bytes)
        .spawn(move || {
            conn::serve_socket(&slot.0, sock, peer, buf, peer_slot, accepted, first);
            drop(slot);
        });
    if let Err(e) = spawned {
        log::warn!("cannot spawn a connection thread: {e}");
    }
}

enum HeadState {
    More,
    Complete,
    Gone,
    /// Drained as much as it may be: no more reads (the socket is taken
    /// off the epoll), closed at its deadline. Closing now, with bytes
    /// unread, would reset the connection and could destroy the answer
    /// before the client reads it.
    Quiet,
}

/// Reads what a pending head's socket has (non-blocking), stopping at the
/// end of the head (a body's bytes beyond this read stay in the socket).
/// A draining connection's bytes are discarded.
fn read_head(shared: &Shared, p: &mut Pending) -> HeadState {
    let max = shared.cfg.max_header_bytes;
    let mut chunk = [0u8; HEAD_READ];
    if p.drain_until.is_some() {
        loop {
            match (&p.tcp).read(&mut chunk) {
                Ok(0) => return HeadState::Gone,
                Ok(n) => {
                    // What is drained is counted, never kept: past the
                    // budget the connection is simply closed.
                    p.drained += n;
                    if p.drained > DRAIN_BYTES {
                        return HeadState::Quiet;
                    }
                }
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => return HeadState::More,
                Err(_) => return HeadState::Gone,
            }
        }
    }
    loop {
        let from = p.buf.len().saturating_sub(3);
        let got = match p.tls.as_deref_mut() {
            None => (&p.tcp).read(&mut chunk),
            Some(t) => tls_read(t, &p.tcp, &mut chunk),
        };
        match got {
            Ok(0) => return HeadState::Gone,
            Ok(n) => p.buf.extend_from_slice(&chunk[..n]),
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => break,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
            Err(_) => return HeadState::Gone,
        }
        let tail = &p.buf[from..];
        let ended =
            tail.windows(4).any(|w| w == b"\r\n\r\n") || tail.windows(2).any(|w| w == b"\n\n");
        if p.buf.len() > max || ended {
            break;
        }
    }
    match parse_head(&p.buf, max, shared.cfg.strict_crlf) {
        Ok(None) if p.buf.len() <= max => HeadState::More,
        // Complete, malformed or too large: the connection thread parses
        // it again and answers.
        _ => HeadState::Complete,
    }
}

/// One non-blocking step of a TLS connection: what the socket has goes to
/// rustls, what rustls has to say (handshake records) goes out, and the
/// plaintext it decrypted comes back (`WouldBlock`: none yet). Handshake
/// records are small and the socket fresh: a write that would block ends
/// the connection rather than wait.
fn tls_read(
    t: &mut rustls::ServerConnection,
    tcp: &TcpStream,
    out: &mut [u8],
) -> io::Result<usize> {
    loop {
        match t.reader().read(out) {
            Ok(n) => return Ok(n),
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => {}
            Err(e) => return Err(e),
        }
        let mut tcp_r = tcp;
        let n = t.read_tls(&mut tcp_r)?;
        let state = t.process_new_packets();
        while t.wants_write() {
            let mut tcp_w = tcp;
            if t.write_tls(&mut tcp_w)? == 0 {
                break;
            }
        }
        if let Err(e) = state {
            return Err(io::Error::new(io::ErrorKind::InvalidData, e));
        }
        if n == 0 {
            // The peer closed; plaintext already decrypted was read above.
            return Ok(0);
        }
    }
}

/// A complete first head, admitted here: a connection thread when the
/// handler admits it and a slot is free (a peer over its limit only when
/// the head authenticates); otherwise its refusal, a health answer or
/// 503/429, without a thread. `Some`: answered, the connection is to be
/// drained and closed.
fn head_ready(shared: &Arc<Shared>, p: Pending) -> Option<Pending> {
    let Pending {
        tcp,
        tls,
        buf,
        peer,
        accepted,
        peer_slot,
        over_peer,
        drain_until: _,
        drained: _,
    } = p;
    tcp.set_nonblocking(false).ok()?;
    let _ = tcp.set_nodelay(true);
    let sock = match tls {
        None => Socket::Plain(tcp),
        Some(t) => Socket::Tls(Box::new(super::stream::TlsStream::new(*t, tcp))),
    };
    let head = match parse_head(&buf, shared.cfg.max_header_bytes, shared.cfg.strict_crlf) {
        Ok(Some(h)) => h,
        // Malformed or too large: a connection thread answers it.
        _ => {
            if take_slot(shared) {
                spawn_conn(shared, sock, peer, buf, peer_slot, accepted, None);
            }
            return None;
        }
    };
    let minor = head.minor;
    let req = conn::head_request(head, peer, sock.is_tls(), conn::peer_cert(&sock));
    let is_head = req.method == "HEAD";
    let handler = shared.handler.clone();
    let admission = match catch_unwind(AssertUnwindSafe(|| handler.admit(&req))) {
        Ok(a) => a,
        Err(_) => {
            log::error!("admission panicked serving {peer}");
            Admission::Refuse(Response::text(500, "internal error"))
        }
    };
    let why = match admission {
        Admission::Refuse(resp) if !over_peer => {
            shared.refused.fetch_add(1, Ordering::Relaxed);
            return answer_now(shared, sock, resp, minor, is_head, peer_slot, accepted);
        }
        Admission::Admit(a) if (!over_peer || a.known) && !shared.is_stopping() => {
            if take_slot(shared) {
                // Authenticated from over its address's limit: it counts
                // against its principal's limits now.
                let peer_slot = if over_peer { None } else { peer_slot };
                spawn_conn(shared, sock, peer, buf, peer_slot, accepted, Some(a));
                return None;
            }
            Over::Slots
        }
        _ if over_peer => Over::Peer,
        _ => Over::Slots,
    };
    let err = match why {
        Over::Slots => HttpError::Overloaded,
        Over::Peer => HttpError::TooManyConnections,
    };
    let resp = match catch_unwind(AssertUnwindSafe(|| handler.overflow(&req, &err))) {
        Ok(Some(r)) => r,
        _ => {
            let mut r = catch_unwind(AssertUnwindSafe(|| handler.error_response(&err)))
                .unwrap_or_else(|_| Response::text(err.status(), "too many connections"));
            r.status = err.status();
            conn::with_retry_after(&mut r, &err);
            r
        }
    };
    answer_now(shared, sock, resp, minor, is_head, peer_slot, accepted)
}

/// Writes a small answer on a fresh socket (its send buffer is empty, so
/// this does not wait; a client that reads nothing is given up after
/// 20 ms) with `Connection: close`, and ends the write side;
/// the connection comes back to be drained.
fn answer_now(
    shared: &Shared,
    mut sock: Socket,
    resp: Response,
    minor: u8,
    is_head: bool,
    peer_slot: Option<conn::PeerSlot>,
    accepted: Instant,
) -> Option<Pending> {
    let _ = sock.set_write_timeout(Some(Duration::from_millis(20)));
    conn::write_response(&mut sock, resp, minor, is_head, false, shared).ok()?;
    let tcp = match sock {
        Socket::Plain(tcp) => tcp,
        Socket::Tls(mut t) => {
            // close_notify, then the socket is drained as a plain one.
            t.send_close_notify();
            let tcp = t.tcp().try_clone().ok()?;
            drop(t);
            tcp
        }
    };
    tcp.shutdown(std::net::Shutdown::Write).ok()?;
    let peer = tcp.peer_addr().ok()?;
    Some(Pending {
        tcp,
        tls: None,
        buf: Vec::new(),
        peer,
        accepted,
        peer_slot,
        over_peer: false,
        drain_until: None,
        drained: 0,
    })
}

/// Connections the kernel queues for `accept` (std's default is 128: a
/// burst of a thousand connections would overflow it, and a connection
/// whose handshake the kernel dropped sends its request into nothing).
const LISTEN_BACKLOG: i32 = 4096;

/// A listening socket like `TcpListener::bind` (SO_REUSEADDR), with a
/// deeper accept queue.
fn bind_listener(addr: SocketAddr) -> io::Result<TcpListener> {
    use rustix::net::{sockopt, AddressFamily, SocketFlags, SocketType};
    let family = if addr.is_ipv4() {
        AddressFamily::INET
    } else {
        AddressFamily::INET6
    };
    let fd = rustix::net::socket_with(family, SocketType::STREAM, SocketFlags::CLOEXEC, None)?;
    sockopt::set_socket_reuseaddr(&fd, true)?;
    rustix::net::bind(&fd, &addr)?;
    rustix::net::listen(&fd, LISTEN_BACKLOG)?;
    Ok(TcpListener::from(fd))
}

/// Closes the port until the outage ends, then binds the same address
/// again (retrying briefly if it is still in use). None: stop, or the
/// address could not be bound again.
fn play_dead(shared: &Shared, listener: TcpListener, addr: SocketAddr) -> Option<TcpListener> {
    drop(listener);
    log::warn!("refusing connections on {addr} (injected outage)");
    loop {
        let until = (*shared.outage_until.lock())?;
        let now = Instant::now();
        if now >= until {
            break;
        }
        let mut fds = [
            PollFd::from_borrowed_fd(shared.stop.fd(), PollFlags::IN),
            PollFd::from_borrowed_fd(shared.poke.fd(), PollFlags::IN),
        ];
        let _ = poll(&mut fds, Some(until - now));
        if shared.is_stopping() {
            return None;
        }
        shared.poke.reset();
    }
    *shared.outage_until.lock() = None;
    for _ in 0..50 {
        match bind_listener(addr).and_then(|l| l.set_nonblocking(true).map(|_| l)) {
            Ok(l) => {
                log::warn!("accepting connections on {addr} again");
                return Some(l);
            }
            Err(e) => {
                log::warn!("rebinding {addr} after the outage: {e}");
                let mut stop = [PollFd::from_borrowed_fd(shared.stop.fd(), PollFlags::IN)];
                let _ = poll(&mut stop, Some(Duration::from_millis(100)));
                if shared.is_stopping() {
                    return None;
                }
            }
        }
    }
    None
}
