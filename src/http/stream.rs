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
//!
//! Client side the socket is a [`ClientSocket`]: a [`Socket`],
//! or with the `native-tls` cargo feature a `NativeTlsStream` (OpenSSL).
//! A separate enum rather than a `Socket` variant, because the server
//! matches `Socket` exhaustively and never sees native-tls.

use std::io::{self, Read, Write};
use std::net::{Shutdown, SocketAddr, TcpStream};
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::time::{Duration, Instant};

use rustix::event::{EventfdFlags, PollFd, PollFlags};

/// A socket one thread can drive with poll(2): readable/writable bytes plus
/// the fd to wait on.
pub trait PollStream: Read + Write + AsFd + Send {
    /// Switches the underlying socket between blocking and non-blocking
    /// (`FIONBIO` on the fd, what `TcpStream::set_nonblocking` does).
    fn set_nonblocking(&self, nonblocking: bool) -> io::Result<()> {
        Ok(rustix::io::ioctl_fionbio(self.as_fd(), nonblocking)?)
    }
    /// True when bytes are readable without touching the socket (decrypted
    /// TLS plaintext): read before waiting in poll.
    fn has_buffered_input(&self) -> bool {
        false
    }
}

/// For a stream that knows its TCP socket (`tcp()`): `AsFd` (poll(2)
/// waits on the socket's fd whatever is layered over it) and, with `timeouts`,
/// the socket's read and write timeouts, a zero one raised to 1 ms (zero
/// means "none" to the OS).
macro_rules! fd_of_tcp {
    ($t:ty) => {
        impl AsFd for $t {
            fn as_fd(&self) -> BorrowedFd<'_> {
                self.tcp().as_fd()
            }
        }
    };
    ($t:ty, timeouts) => {
        fd_of_tcp!($t);

        impl $t {
            pub fn set_read_timeout(&self, d: Option<Duration>) -> io::Result<()> {
                self.tcp()
                    .set_read_timeout(d.map(|d| d.max(Duration::from_millis(1))))
            }

            pub fn set_write_timeout(&self, d: Option<Duration>) -> io::Result<()> {
                self.tcp()
                    .set_write_timeout(d.map(|d| d.max(Duration::from_millis(1))))
            }
        }
    };
}

impl PollStream for TcpStream {}

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

fd_of_tcp!(Socket, timeouts);

impl PollStream for Socket {
    fn has_buffered_input(&self) -> bool {
        match self {
            Socket::Plain(_) => false,
            Socket::Tls(t) => t.has_buffered_input(),
        }
    }
}

/// A client-side native-tls (OpenSSL) connection over TCP, driven by the
/// exec/attach pump like [`TlsStream`]. OpenSSL in non-blocking mode
/// reports `WANT_READ`/`WANT_WRITE` as `WouldBlock` and never writes a
/// partial record twice (the `openssl` crate sets
/// `ACCEPT_MOVING_WRITE_BUFFER | ENABLE_PARTIAL_WRITE`, and tungstenite
/// retries with its buffer's same leading bytes). Decrypted bytes OpenSSL
/// holds (`SSL_pending`, what native-tls exposes as `buffered_read_size`)
/// are reported by [`PollStream::has_buffered_input`].
#[cfg(feature = "native-tls")]
pub struct NativeTlsStream {
    inner: native_tls::TlsStream<TcpStream>,
    closed: bool,
}

#[cfg(feature = "native-tls")]
impl NativeTlsStream {
    /// Runs the handshake on the blocking `sock` (SNI and verification
    /// against `domain`), giving up at `deadline`. Socket timeouts bound
    /// each step and are cleared afterwards; a timed-out step resumes the
    /// mid-handshake stream instead of failing (or panicking).
    pub fn connect(
        connector: &native_tls::TlsConnector,
        domain: &str,
        sock: TcpStream,
        deadline: Instant,
    ) -> io::Result<NativeTlsStream> {
        fn set_left(s: &TcpStream, deadline: Instant) -> io::Result<()> {
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return Err(io::Error::new(
                    io::ErrorKind::TimedOut,
                    "TLS handshake timed out",
                ));
            }
            s.set_read_timeout(Some(left))?;
            s.set_write_timeout(Some(left))
        }
        set_left(&sock, deadline)?;
        let mut attempt = connector.connect(domain, sock);
        let inner = loop {
            match attempt {
                Ok(s) => break s,
                Err(native_tls::HandshakeError::Failure(e)) => {
                    return Err(io::Error::new(io::ErrorKind::InvalidData, e))
                }
                Err(native_tls::HandshakeError::WouldBlock(mid)) => {
                    set_left(mid.get_ref(), deadline)?;
                    attempt = mid.handshake();
                }
            }
        };
        inner.get_ref().set_read_timeout(None)?;
        inner.get_ref().set_write_timeout(None)?;
        Ok(NativeTlsStream {
            inner,
            closed: false,
        })
    }

    pub fn tcp(&self) -> &TcpStream {
        self.inner.get_ref()
    }

    /// Sends close_notify (best effort; never waits for the peer's).
    pub fn send_close_notify(&mut self) {
        if !self.closed {
            self.closed = true;
            let _ = self.inner.shutdown();
        }
    }
}

#[cfg(feature = "native-tls")]
impl Read for NativeTlsStream {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        self.inner.read(buf)
    }
}

#[cfg(feature = "native-tls")]
impl Write for NativeTlsStream {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        self.inner.write(buf)
    }
    fn flush(&mut self) -> io::Result<()> {
        self.inner.flush()
    }
}

#[cfg(feature = "native-tls")]
fd_of_tcp!(NativeTlsStream);

#[cfg(feature = "native-tls")]
impl PollStream for NativeTlsStream {
    fn has_buffered_input(&self) -> bool {
        // SSL_pending: plaintext of an already-decrypted record that a
        // short read left behind; poll(2) cannot see it.
        self.inner.buffered_read_size().is_ok_and(|n| n > 0)
    }
}

#[cfg(feature = "native-tls")]
impl Drop for NativeTlsStream {
    fn drop(&mut self) {
        self.send_close_notify();
    }
}

/// A client-side connection: plain TCP or rustls through
/// [`Socket`], or native-tls under the `native-tls` feature.
pub enum ClientSocket {
    Socket(Socket),
    #[cfg(feature = "native-tls")]
    NativeTls(Box<NativeTlsStream>),
}

impl ClientSocket {
    pub fn tcp(&self) -> &TcpStream {
        match self {
            ClientSocket::Socket(s) => s.tcp(),
            #[cfg(feature = "native-tls")]
            ClientSocket::NativeTls(t) => t.tcp(),
        }
    }

    /// Sends a TLS close_notify, if the connection is TLS.
    pub fn send_close_notify(&mut self) {
        match self {
            ClientSocket::Socket(Socket::Tls(t)) => t.send_close_notify(),
            ClientSocket::Socket(Socket::Plain(_)) => {}
            #[cfg(feature = "native-tls")]
            ClientSocket::NativeTls(t) => t.send_close_notify(),
        }
    }
}

impl Read for ClientSocket {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        match self {
            ClientSocket::Socket(s) => s.read(buf),
            #[cfg(feature = "native-tls")]
            ClientSocket::NativeTls(t) => t.read(buf),
        }
    }
}

impl Write for ClientSocket {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        match self {
            ClientSocket::Socket(s) => s.write(buf),
            #[cfg(feature = "native-tls")]
            ClientSocket::NativeTls(t) => t.write(buf),
        }
    }
    fn flush(&mut self) -> io::Result<()> {
        match self {
            ClientSocket::Socket(s) => s.flush(),
            #[cfg(feature = "native-tls")]
            ClientSocket::NativeTls(t) => t.flush(),
        }
    }
}

fd_of_tcp!(ClientSocket, timeouts);

impl PollStream for ClientSocket {
    fn has_buffered_input(&self) -> bool {
        match self {
            ClientSocket::Socket(s) => s.has_buffered_input(),
            #[cfg(feature = "native-tls")]
            ClientSocket::NativeTls(t) => t.has_buffered_input(),
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

/// Non-blocking check that `fd` is readable (an eventfd signalled).
pub(crate) fn readable_now(fd: BorrowedFd<'_>) -> bool {
    let mut fds = [PollFd::from_borrowed_fd(fd, PollFlags::IN)];
    matches!(poll(&mut fds, Some(Duration::ZERO)), Ok(n) if n > 0)
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

#[cfg(all(test, feature = "native-tls"))]
mod native_tests {
    use super::*;
    use std::net::TcpListener;
    use std::sync::Arc;

    /// A short read leaves decrypted bytes inside OpenSSL, which poll(2)
    /// cannot see: `has_buffered_input` must say so until they are read.
    #[test]
    fn reports_plaintext_openssl_holds() {
        let cert = rcgen::generate_simple_self_signed(vec!["localhost".to_string()]).expect("cert");
        let key = rustls_pki_types::PrivateKeyDer::Pkcs8(cert.signing_key.serialize_der().into());
        let server_cfg = rustls::ServerConfig::builder_with_provider(Arc::new(
            rustls::crypto::ring::default_provider(),
        ))
        .with_safe_default_protocol_versions()
        .expect("versions")
        .with_no_client_auth()
        .with_single_cert(vec![cert.cert.der().clone()], key)
        .expect("server config");
        let listener = TcpListener::bind("127.0.0.1:0").expect("bind");
        let addr = listener.local_addr().expect("addr");
        let server = std::thread::spawn(move || {
            let (tcp, _) = listener.accept().expect("accept");
            let conn = rustls::ServerConnection::new(Arc::new(server_cfg)).expect("conn");
            let mut s = TlsStream::new(conn, tcp);
            s.handshake(Instant::now() + Duration::from_secs(10))
                .expect("server handshake");
            // One record of 10000 bytes.
            s.write_all(&[7u8; 10_000]).expect("write");
            s.flush().expect("flush");
            let mut b = [0u8; 1];
            let _ = s.read(&mut b); // until the client closes
        });
        let connector = native_tls::TlsConnector::builder()
            .disable_built_in_roots(true)
            .add_root_certificate(native_tls::Certificate::from_der(cert.cert.der()).expect("ca"))
            .build()
            .expect("connector");
        let tcp = TcpStream::connect(addr).expect("connect");
        let mut c = NativeTlsStream::connect(
            &connector,
            "localhost",
            tcp,
            Instant::now() + Duration::from_secs(10),
        )
        .expect("client handshake");
        assert!(!c.has_buffered_input());
        let mut got = vec![0u8; 100];
        c.read_exact(&mut got).expect("read");
        assert!(c.has_buffered_input(), "9900 bytes wait inside OpenSSL");
        let mut rest = vec![0u8; 9_900];
        c.read_exact(&mut rest).expect("read rest");
        assert!(!c.has_buffered_input());
        assert!(rest.iter().all(|&b| b == 7));
        // Non-blocking with nothing to read: WouldBlock, not an error.
        c.set_nonblocking(true).expect("nonblocking");
        let e = c.read(&mut got).expect_err("nothing to read");
        assert_eq!(e.kind(), io::ErrorKind::WouldBlock);
        c.set_nonblocking(false).expect("blocking");
        drop(c);
        server.join().expect("server");
    }
}
