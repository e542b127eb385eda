//! The byte streams the server and the WebSocket pump drive: plain TCP or
//! TLS (rustls) over TCP, behind one [`PollStream`] trait, plus the poll(2)
//! and eventfd helpers everything here waits with.
//!
//! Owns: the TLS record layer glue (our own [`TlsStream`] instead of
//! `rustls::StreamOwned`, see below), close_notify on drop, and the
//! readiness checks (`wait_readable`, `peer_gone`). Never spawns threads,
//! never parses HTTP.
//!
//! Why not `rustls::StreamOwned`: on a non-blocking socket its `write` may
//! read from the socket and may return `Ok(0)` when rustls' send buffer is
//! full, which tungstenite takes for a reset connection. [`TlsStream`] never
//! reads while writing, and reports a full buffer as `WouldBlock`. Plaintext
//! rustls has already decrypted is not visible to poll(2):
//! [`PollStream::has_buffered_input`] says when to read before waiting.

use std::io::{self, Read, Write};
use std::net::{Shutdown, SocketAddr, TcpStream};
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::time::{Duration, Instant};

use rustix::event::{EventfdFlags, PollFd, PollFlags};

/// A socket one thread can drive with poll(2): readable/writable bytes plus
/// the fd to wait on.
pub trait PollStream: Read + Write + AsFd + Send {
    /// Switches the underlying TCP socket between blocking and non-blocking.
    fn set_nonblocking(&self, nonblocking: bool) -> io::Result<()>;
    /// True when bytes are readable without touching the socket (decrypted
    /// TLS plaintext): read before waiting in poll.
    fn has_buffered_input(&self) -> bool {
        false
    }
}

impl PollStream for TcpStream {
    fn set_nonblocking(&self, nonblocking: bool) -> io::Result<()> {
        TcpStream::set_nonblocking(self, nonblocking)
    }
}

/// A rustls connection (client or server side) over a TCP socket.
pub struct TlsStream {
    conn: rustls::Connection,
    sock: TcpStream,
    closed: bool,
}

impl TlsStream {
    /// Wraps a fresh connection; call [`TlsStream::handshake`] next (or let
    /// the first read/write drive it in blocking mode).
    pub fn new(conn: impl Into<rustls::Connection>, sock: TcpStream) -> TlsStream {
        TlsStream {
            conn: conn.into(),
            sock,
            closed: false,
        }
    }

    /// Runs the handshake to completion on a blocking socket, giving up at
    /// `deadline` (the socket's read timeout is changed, then cleared).
    pub fn handshake(&mut self, deadline: Instant) -> io::Result<()> {
        while self.conn.is_handshaking() {
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return Err(io::Error::new(
                    io::ErrorKind::TimedOut,
                    "TLS handshake timed out",
                ));
            }
            self.sock.set_read_timeout(Some(left))?;
            self.sock.set_write_timeout(Some(left))?;
            let (r, w) = self.conn.complete_io(&mut self.sock)?;
            if r == 0 && w == 0 && self.conn.is_handshaking() {
                return Err(io::Error::new(
                    io::ErrorKind::UnexpectedEof,
                    "peer closed during TLS handshake",
                ));
            }
        }
        // Flush what the handshake left (e.g. session tickets).
        while self.conn.wants_write() {
            self.conn.write_tls(&mut self.sock)?;
        }
        self.sock.set_read_timeout(None)?;
        self.sock.set_write_timeout(None)?;
        Ok(())
    }

    pub fn conn(&self) -> &rustls::Connection {
        &self.conn
    }

    pub fn tcp(&self) -> &TcpStream {
        &self.sock
    }

    /// The peer's leaf certificate (DER), if it presented one.
    pub fn peer_leaf_cert(&self) -> Option<Vec<u8>> {
        self.conn
            .peer_certificates()
            .and_then(|c| c.first())
            .map(|c| c.as_ref().to_vec())
    }

    /// Sends close_notify and pushes it out (best effort; never blocks
    /// longer than the socket's write timeout).
    pub fn send_close_notify(&mut self) {
        if self.closed {
            return;
        }
        self.closed = true;
        self.conn.send_close_notify();
        while self.conn.wants_write() {
            match self.conn.write_tls(&mut self.sock) {
                Ok(0) | Err(_) => break,
                Ok(_) => {}
            }
        }
    }

    /// Writes out pending TLS records; `WouldBlock` when the socket is full.
    fn push_tls(&mut self) -> io::Result<()> {
        while self.conn.wants_write() {
            if self.conn.write_tls(&mut self.sock)? == 0 {
                return Err(io::ErrorKind::WriteZero.into());
            }
        }
        Ok(())
    }
}

impl Read for TlsStream {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        loop {
            match self.conn.reader().read(buf) {
                Ok(n) => return Ok(n),
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => {}
                Err(e) => return Err(e),
            }
            // No plaintext: pull more records from the socket.
            self.conn.read_tls(&mut self.sock)?;
            let processed = self.conn.process_new_packets();
            // Alerts, key updates: best effort, a full socket retries later.
            let _ = self.push_tls();
            if let Err(e) = processed {
                return Err(io::Error::new(io::ErrorKind::InvalidData, e));
            }
        }
    }
}

impl Write for TlsStream {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        self.push_tls()?;
        let n = self.conn.writer().write(buf)?;
        match self.push_tls() {
            Ok(()) => {}
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => {}
            Err(e) => return Err(e),
        }
        if n == 0 && !buf.is_empty() {
            return Err(io::ErrorKind::WouldBlock.into());
        }
        Ok(n)
    }

    fn flush(&mut self) -> io::Result<()> {
        self.conn.writer().flush()?;
        self.push_tls()?;
        self.sock.flush()
    }
}

impl AsFd for TlsStream {
    fn as_fd(&self) -> BorrowedFd<'_> {
        self.sock.as_fd()
    }
}

impl PollStream for TlsStream {
    fn set_nonblocking(&self, nonblocking: bool) -> io::Result<()> {
        self.sock.set_nonblocking(nonblocking)
    }
    fn has_buffered_input(&self) -> bool {
        // `process_new_packets` reports buffered plaintext; a cheap proxy
        // without `&mut`: rustls wants no more bytes while plaintext waits.
        !self.conn.wants_read() && !self.conn.is_handshaking()
    }
}

impl Drop for TlsStream {
    fn drop(&mut self) {
        self.send_close_notify();
    }
}

/// A server-side connection: plain TCP or TLS.
pub enum Socket {
    Plain(TcpStream),
    Tls(Box<TlsStream>),
}

impl Socket {
    pub fn tcp(&self) -> &TcpStream {
        match self {
            Socket::Plain(s) => s,
            Socket::Tls(t) => t.tcp(),
        }
    }

    pub fn is_tls(&self) -> bool {
        matches!(self, Socket::Tls(_))
    }

    pub fn peer_addr(&self) -> io::Result<SocketAddr> {
        self.tcp().peer_addr()
    }

    pub fn set_read_timeout(&self, d: Option<Duration>) -> io::Result<()> {
        self.tcp()
            .set_read_timeout(d.map(|d| d.max(Duration::from_millis(1))))
    }

    pub fn set_write_timeout(&self, d: Option<Duration>) -> io::Result<()> {
        self.tcp()
            .set_write_timeout(d.map(|d| d.max(Duration::from_millis(1))))
    }

    /// Ends the connection politely after an error answer: close_notify,
    /// FIN, then discard what the client is still sending for a moment so
    /// the kernel does not answer it with a RST that would destroy our
    /// response in flight.
    pub fn linger_close(mut self, max: Duration) {
        if let Socket::Tls(t) = &mut self {
            t.send_close_notify();
        }
        let tcp = self.tcp();
        let _ = tcp.shutdown(Shutdown::Write);
        let deadline = Instant::now() + max;
        let mut scratch = [0u8; 4096];
        let mut budget: usize = 1 << 20;
        let mut raw = tcp;
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() || budget == 0 {
                break;
            }
            if tcp.set_read_timeout(Some(left)).is_err() {
                break;
            }
            match raw.read(&mut scratch) {
                Ok(0) | Err(_) => break,
                Ok(n) => budget = budget.saturating_sub(n),
            }
        }
    }
}

impl Read for Socket {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        match self {
            Socket::Plain(s) => s.read(buf),
            Socket::Tls(t) => t.read(buf),
        }
    }
}

impl Write for Socket {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        match self {
            Socket::Plain(s) => s.write(buf),
            Socket::Tls(t) => t.write(buf),
        }
    }
    fn flush(&mut self) -> io::Result<()> {
        match self {
            Socket::Plain(s) => s.flush(),
            Socket::Tls(t) => t.flush(),
        }
    }
}

impl AsFd for Socket {
    fn as_fd(&self) -> BorrowedFd<'_> {
        self.tcp().as_fd()
    }
}

impl PollStream for Socket {
    fn set_nonblocking(&self, nonblocking: bool) -> io::Result<()> {
        self.tcp().set_nonblocking(nonblocking)
    }
    fn has_buffered_input(&self) -> bool {
        match self {
            Socket::Plain(_) => false,
            Socket::Tls(t) => t.has_buffered_input(),
        }
    }
}

/// An eventfd used as a wake-up signal. `wake` makes it readable; `reset`
/// (by the one waiting thread) clears it. Never reset, it acts as a
/// broadcast flag for every thread polling it (used for shutdown).
#[derive(Debug)]
pub(crate) struct Waker {
    fd: OwnedFd,
}

impl Waker {
    pub fn new() -> io::Result<Waker> {
        let fd = rustix::event::eventfd(0, EventfdFlags::CLOEXEC | EventfdFlags::NONBLOCK)?;
        Ok(Waker { fd })
    }

    pub fn wake(&self) {
        // EAGAIN only when the counter is about to overflow: still readable.
        let _ = rustix::io::write(&self.fd, &1u64.to_ne_bytes());
    }

    pub fn reset(&self) {
        let mut b = [0u8; 8];
        let _ = rustix::io::read(&self.fd, &mut b);
    }

    pub fn fd(&self) -> BorrowedFd<'_> {
        self.fd.as_fd()
    }
}

/// poll(2) with a timeout (`None` = forever), retrying on EINTR.
pub(crate) fn poll(fds: &mut [PollFd<'_>], timeout: Option<Duration>) -> io::Result<usize> {
    let ts = timeout.map(|d| {
        rustix::event::Timespec::try_from(d).unwrap_or(rustix::event::Timespec {
            tv_sec: i64::MAX / 2,
            tv_nsec: 0,
        })
    });
    loop {
        for fd in fds.iter_mut() {
            fd.clear_revents();
        }
        match rustix::event::poll(fds, ts.as_ref()) {
            Ok(n) => return Ok(n),
            Err(rustix::io::Errno::INTR) => continue,
            Err(e) => return Err(e.into()),
        }
    }
}

/// What ended a wait for the next request.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Readiness {
    Readable,
    TimedOut,
    Shutdown,
}

/// Waits until `fd` is readable (or hung up), the `stop` waker fires, or
/// `timeout` passes.
pub(crate) fn wait_readable(
    fd: BorrowedFd<'_>,
    stop: &Waker,
    timeout: Duration,
) -> io::Result<Readiness> {
    let mut fds = [
        PollFd::from_borrowed_fd(fd, PollFlags::IN),
        PollFd::from_borrowed_fd(stop.fd(), PollFlags::IN),
    ];
    if poll(&mut fds, Some(timeout))? == 0 {
        return Ok(Readiness::TimedOut);
    }
    if !fds[1].revents().is_empty() {
        return Ok(Readiness::Shutdown);
    }
    Ok(Readiness::Readable)
}

/// Non-blocking check that the peer closed or reset the connection.
pub(crate) fn peer_gone(fd: BorrowedFd<'_>) -> bool {
    let mut fds = [PollFd::from_borrowed_fd(
        fd,
        PollFlags::IN | PollFlags::RDHUP,
    )];
    match poll(&mut fds, Some(Duration::ZERO)) {
        Ok(0) => false,
        Ok(_) => fds[0]
            .revents()
            .intersects(PollFlags::RDHUP | PollFlags::HUP | PollFlags::ERR | PollFlags::NVAL),
        Err(_) => true,
    }
}
