//! The listener: binds, accepts, and gives each connection its own named
//! thread, up to `max_connections`.
//!
//! Owns the listening socket, the stop eventfd, and the connection count.
//! Never reads requests itself. It waits in poll(2) on the listener and the
//! stop eventfd, so `shutdown` wakes it at once and an idle server burns no
//! CPU. Connections over the limit go to ONE overflow thread (through a
//! small bounded channel; when that is full they are simply closed), which
//! answers 503 with `Connection: close`: the number of threads stays bounded
//! however hard the server is hit.

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
use super::stream::{poll, Socket, Waker};
use super::types::{Handler, HttpError, Response};

/// Server limits and settings. Every default is chosen for the simulated
/// cluster and the daemon's front door on a small machine.
#[derive(Clone)]
pub struct ServerConfig {
    /// Concurrent connections (each one thread); more get 503. Default 1024.
    pub max_connections: usize,
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
    /// Refuse (400) a request head with a line ended by a bare LF. Default
    /// true; the sim turns it off to accept what Go's server accepts
    /// (`parse::parse_head`).
    pub strict_crlf: bool,
}

impl Default for ServerConfig {
    fn default() -> Self {
        ServerConfig {
            max_connections: 1024,
            max_header_bytes: 64 * 1024,
            max_body_bytes: 8 << 20,
            keep_alive_idle: Duration::from_secs(90),
            request_read_timeout: Duration::from_secs(30),
            write_timeout: Duration::from_secs(60),
            tls: None,
            thread_stack_bytes: 256 * 1024,
            name: "http",
            strict_crlf: true,
        }
    }
}

impl std::fmt::Debug for ServerConfig {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ServerConfig")
            .field("max_connections", &self.max_connections)
            .field("max_header_bytes", &self.max_header_bytes)
            .field("max_body_bytes", &self.max_body_bytes)
            .field("keep_alive_idle", &self.keep_alive_idle)
            .field("request_read_timeout", &self.request_read_timeout)
            .field("write_timeout", &self.write_timeout)
            .field("tls", &self.tls.is_some())
            .field("thread_stack_bytes", &self.thread_stack_bytes)
            .field("name", &self.name)
            .field("strict_crlf", &self.strict_crlf)
            .finish()
    }
}

/// Connections waiting for their 503 (beyond this they are just closed).
const OVERFLOW_QUEUE: usize = 64;
/// How long the overflow thread spends on one rejected connection.
const OVERFLOW_BUDGET: Duration = Duration::from_secs(1);

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
        });
        let (over_tx, over_rx) = crossbeam_channel::bounded::<TcpStream>(OVERFLOW_QUEUE);
        let s = shared.clone();
        std::thread::Builder::new()
            .name(format!("{name}-overflow"))
            .stack_size(s.cfg.thread_stack_bytes.max(128 * 1024))
            .spawn(move || {
                for tcp in over_rx {
                    reject(&s, tcp);
                }
            })?;
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
    overflow: crossbeam_channel::Sender<TcpStream>,
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
            if shared.active.fetch_add(1, Ordering::AcqRel) >= cfg.max_connections {
                shared.active.fetch_sub(1, Ordering::AcqRel);
                if overflow.try_send(tcp).is_err() {
                    log::warn!("overloaded: dropping connection from {peer}");
                }
                continue;
            }
            let slot = Slot(shared.clone());
            let spawned = std::thread::Builder::new()
                .name(format!("{}-conn", cfg.name))
                .stack_size(cfg.thread_stack_bytes)
                .spawn(move || {
                    conn::serve(&slot.0, tcp, peer);
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

/// Answers 503 on an over-limit connection, then closes it.
fn reject(shared: &Shared, tcp: TcpStream) {
    let start = Instant::now();
    let _ = tcp.set_nodelay(true);
    let _ = tcp.set_write_timeout(Some(OVERFLOW_BUDGET));
    let mut sock = match &shared.cfg.tls {
        None => Socket::Plain(tcp),
        Some(cfg) => match conn::tls_accept(cfg, tcp, OVERFLOW_BUDGET) {
            Some(t) => Socket::Tls(Box::new(t)),
            None => return,
        },
    };
    let err = HttpError::Overloaded;
    let handler = shared.handler.clone();
    let mut resp = catch_unwind(AssertUnwindSafe(|| handler.error_response(&err)))
        .unwrap_or_else(|_| Response::text(503, "overloaded"));
    resp.status = err.status();
    let body = match resp.body {
        super::types::Body::Bytes(b) => b,
        _ => Vec::new(),
    };
    let mut head = format!(
        "HTTP/1.1 503 Service Unavailable\r\nDate: {}\r\nContent-Length: {}\r\nConnection: close\r\nRetry-After: 1\r\n",
        conn::http_date(std::time::SystemTime::now()),
        body.len()
    );
    for (k, v) in &resp.headers {
        if k.eq_ignore_ascii_case("content-type") && !v.bytes().any(|b| b == b'\r' || b == b'\n') {
            head.push_str(&format!("Content-Type: {v}\r\n"));
        }
    }
    head.push_str("\r\n");
    let mut all = head.into_bytes();
    all.extend_from_slice(&body);
    use std::io::Write;
    if sock.write_all(&all).and_then(|()| sock.flush()).is_ok() {
        let left = OVERFLOW_BUDGET.saturating_sub(start.elapsed());
        sock.linger_close(left.min(Duration::from_millis(300)));
    }
}
