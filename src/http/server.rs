//! The listener: binds, accepts, and gives each connection its own named
//! thread, up to `max_connections`, and up to `max_connections_per_peer`
//! per peer address for connections that have not authenticated yet.
//!
//! Owns the listening socket, the stop eventfd, the connection count and
//! the per-peer counts. Never reads requests itself. It waits in poll(2) on
//! the listener and the stop eventfd, so `shutdown` wakes it at once and an
//! idle server burns no CPU. Connections over a limit go to a few overflow
//! threads (through a small bounded channel; when that is full they are
//! simply closed), which read one head with a short deadline: a health
//! route is answered there (`Handler::overflow`), a connection over its
//! peer's limit whose head authenticates (`Admit::known`) gets a
//! connection thread after all when a slot is free, anything else gets 503
//! (every slot taken) or 429 (the peer's limit), with `Connection: close`.
//! The number of threads stays bounded however hard the server is hit.

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
use super::types::{Admission, Handler, HttpError, Response};
use std::io::Read;

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
    /// Prefix of thread names (`{name}-listen`, `{name}-conn`, ...).
    pub name: &'static str,
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
            name: "http",
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
            .field("name", &self.name)
            .finish()
    }
}

/// Connections waiting for the overflow path (beyond this they are just
/// closed).
const OVERFLOW_QUEUE: usize = 256;
/// Threads reading heads on the overflow path.
const OVERFLOW_THREADS: usize = 4;
/// How long the overflow path spends on one connection (TLS handshake and
/// head included).
const OVERFLOW_BUDGET: Duration = Duration::from_secs(1);

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
        let listener = TcpListener::bind(addr)?;
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
        let (over_tx, over_rx) = crossbeam_channel::bounded::<Overflowed>(OVERFLOW_QUEUE);
        for _ in 0..OVERFLOW_THREADS {
            let s = shared.clone();
            let rx = over_rx.clone();
            std::thread::Builder::new()
                .name(format!("{name}-overflow"))
                .stack_size(s.cfg.thread_stack_bytes.max(128 * 1024))
                .spawn(move || {
                    for o in rx {
                        overflow(&s, o);
                    }
                })?;
        }
        let s = shared.clone();
        let handle = std::thread::Builder::new()
            .name(format!("{name}-listen"))
            .spawn(move || listen(&s, listener, addr, over_tx))?;
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

/// A connection on its way to the overflow path.
struct Overflowed {
    tcp: TcpStream,
    peer: SocketAddr,
    why: Over,
}

/// Gives back a connection slot when the connection thread ends (or when
/// it could not be spawned).
struct Slot(Arc<Shared>);

impl Drop for Slot {
    fn drop(&mut self) {
        self.0.active.fetch_sub(1, Ordering::AcqRel);
    }
}

fn listen(
    shared: &Arc<Shared>,
    listener: TcpListener,
    addr: SocketAddr,
    overflow: crossbeam_channel::Sender<Overflowed>,
) {
    let cfg = &shared.cfg;
    let mut listener = listener;
    loop {
        let mut fds = [
            PollFd::new(&listener, PollFlags::IN),
            PollFd::from_borrowed_fd(shared.stop.fd(), PollFlags::IN),
            PollFd::from_borrowed_fd(shared.poke.fd(), PollFlags::IN),
        ];
        if let Err(e) = poll(&mut fds, None) {
            log::error!("listener poll failed: {e}");
            return;
        }
        if shared.is_stopping() || !fds[1].revents().is_empty() {
            return;
        }
        if !fds[2].revents().is_empty() {
            shared.poke.reset();
            if shared.in_outage() {
                match play_dead(shared, listener, addr) {
                    Some(l) => listener = l,
                    None => return,
                }
                continue;
            }
        }
        loop {
            let (tcp, peer) = match listener.accept() {
                Ok(x) => x,
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => break,
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
                    break;
                }
            };
            if tcp.set_nonblocking(false).is_err() {
                continue;
            }
            let accepted = Instant::now();
            if shared.active.fetch_add(1, Ordering::AcqRel) >= cfg.max_connections {
                shared.active.fetch_sub(1, Ordering::AcqRel);
                let o = Overflowed {
                    tcp,
                    peer,
                    why: Over::Slots,
                };
                if overflow.try_send(o).is_err() {
                    log::warn!("overloaded: dropping connection from {peer}");
                }
                continue;
            }
            let slot = Slot(shared.clone());
            let peer_slot = if cfg.max_connections_per_peer == usize::MAX {
                None
            } else {
                let mut peers = shared.peers.lock();
                let n = peers.entry(peer.ip()).or_insert(0);
                if *n >= cfg.max_connections_per_peer {
                    drop(peers);
                    drop(slot);
                    let o = Overflowed {
                        tcp,
                        peer,
                        why: Over::Peer,
                    };
                    if overflow.try_send(o).is_err() {
                        log::warn!("too many connections: dropping connection from {peer}");
                    }
                    continue;
                }
                *n += 1;
                Some(conn::PeerSlot {
                    shared: shared.clone(),
                    ip: peer.ip(),
                })
            };
            let spawned = std::thread::Builder::new()
                .name(format!("{}-conn", cfg.name))
                .stack_size(cfg.thread_stack_bytes)
                .spawn(move || {
                    conn::serve(&slot.0, tcp, peer, peer_slot, accepted);
                    drop(slot);
                });
            if let Err(e) = spawned {
                log::warn!("cannot spawn a connection thread: {e}");
            }
        }
    }
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
        match TcpListener::bind(addr).and_then(|l| l.set_nonblocking(true).map(|_| l)) {
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

/// The overflow path: reads one head within [`OVERFLOW_BUDGET`]; serves
/// it on a connection thread when its peer was over its limit but the head
/// authenticates and a slot is free; otherwise answers it (a health route
/// through `Handler::overflow`, else 503/429) and closes.
fn overflow(shared: &Arc<Shared>, o: Overflowed) {
    let Overflowed { tcp, peer, why } = o;
    let start = Instant::now();
    let deadline = start + OVERFLOW_BUDGET;
    let _ = tcp.set_nodelay(true);
    let _ = tcp.set_write_timeout(Some(OVERFLOW_BUDGET));
    let mut sock = match &shared.cfg.tls {
        None => Socket::Plain(tcp),
        Some(cfg) => match conn::tls_accept(cfg, tcp, OVERFLOW_BUDGET) {
            Some(t) => Socket::Tls(Box::new(t)),
            None => return,
        },
    };
    let err = match why {
        Over::Slots => HttpError::Overloaded,
        Over::Peer => HttpError::TooManyConnections,
    };
    let mut buf = Vec::new();
    let head = loop {
        match parse_head(&buf, shared.cfg.max_header_bytes) {
            Ok(Some(h)) => break Some(h),
            Ok(None) => {}
            Err(_) => break None,
        }
        let left = deadline.saturating_duration_since(Instant::now());
        if left.is_zero() || buf.len() >= shared.cfg.max_header_bytes {
            break None;
        }
        if sock.set_read_timeout(Some(left)).is_err() {
            return;
        }
        let mut chunk = [0u8; 4096];
        match sock.read(&mut chunk) {
            Ok(0) => return,
            Ok(n) => buf.extend_from_slice(&chunk[..n]),
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(_) => break None,
        }
    };
    let handler = shared.handler.clone();
    let mut resp = None;
    let mut minor = 1;
    let mut is_head = false;
    if let Some(head) = head {
        minor = head.minor;
        let req = conn::head_request(head, peer, &sock);
        is_head = req.method == "HEAD";
        if let Ok(Some(r)) = catch_unwind(AssertUnwindSafe(|| handler.overflow(&req, &err))) {
            resp = Some(r);
        } else if why == Over::Peer && !shared.is_stopping() {
            let known = matches!(
                catch_unwind(AssertUnwindSafe(|| handler.admit(&req))),
                Ok(Admission::Admit(ref a)) if a.known
            );
            if known && shared.active.fetch_add(1, Ordering::AcqRel) < shared.cfg.max_connections {
                // Authenticated: it counts against its principal's limits
                // now, not its address's. The connection thread reads the
                // head again from `buf`.
                let slot = Slot(shared.clone());
                let spawned = std::thread::Builder::new()
                    .name(format!("{}-conn", shared.cfg.name))
                    .stack_size(shared.cfg.thread_stack_bytes)
                    .spawn(move || {
                        conn::serve_socket(&slot.0, sock, peer, buf, None, start);
                        drop(slot);
                    });
                if let Err(e) = spawned {
                    log::warn!("cannot spawn a connection thread: {e}");
                }
                return;
            } else if known {
                shared.active.fetch_sub(1, Ordering::AcqRel);
            }
        }
    }
    let mut resp = resp.unwrap_or_else(|| {
        let mut r = catch_unwind(AssertUnwindSafe(|| handler.error_response(&err)))
            .unwrap_or_else(|_| Response::text(err.status(), "too many connections"));
        r.status = err.status();
        conn::with_retry_after(&mut r, &err);
        r
    });
    if resp.status == 0 {
        resp.status = err.status();
    }
    if conn::write_response(&mut sock, resp, minor, is_head, false, shared).is_ok() {
        let left = OVERFLOW_BUDGET.saturating_sub(start.elapsed());
        sock.linger_close(left.min(Duration::from_millis(300)));
    }
}
