//! One TCP connection carried over one WebSocket, `kubegate.tunnel.v1`
//! (docs/api.md#tunnels), both ends: the daemon splices a client's
//! WebSocket with a connection to a pod's port, the CLI's port-forward a
//! local connection with its WebSocket to the daemon. The wire:
//!
//! - a binary message is bytes of the stream, in order (at most
//!   [`MAX_MESSAGE`]; an empty one is allowed and means nothing);
//! - the text message [`EOF_TEXT`] (`{"type":"eof"}`) is a half-close: its
//!   sender sends no more bytes (TCP's FIN; the other direction goes on);
//!   any other text message, or bytes after it, break the protocol
//!   ([`CLOSE_PROTOCOL`]);
//! - the tunnel ends with a Close: 1000 once both directions have sent
//!   their eof, or the code of what ended it ([`CLOSE_FAR_ERROR`] when the
//!   far side's connection failed, 1008 an idle timeout or the maximum
//!   duration, 1001 a shutdown), its reason `CODE: message`.
//!
//! [`splice`] runs it: the WebSocket's pump on the calling thread (its
//! bounded outbox and inbound channel, [`super::ws`]), a `tunnel-read`
//! thread reading the far side into the outbox (a full outbox stops it
//! reading: backpressure to the far side) and a `tunnel-write` thread
//! writing the inbound channel to the far side (a full channel stops the
//! pump reading the WebSocket: backpressure to the peer). Nothing is held
//! beyond the two bounded queues. The write thread also keeps the clocks
//! (idle, maximum duration) and watches the stop channel.
//!
//! Knows no domain: the far side is any [`Duplex`]; codes are strings.

use std::io::{self, Read, Write};
use std::net::{Shutdown, TcpStream};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use crossbeam_channel::{bounded, select, Receiver};
use tungstenite::protocol::frame::coding::CloseCode;
use tungstenite::protocol::CloseFrame;
use tungstenite::{Message, WebSocket};

use super::stream::PollStream;
use super::ws::{self, Aborter, WsEnd, WsOptions};

/// The WebSocket subprotocol.
pub const SUBPROTOCOL: &str = "kubegate.tunnel.v1";
/// The half-close control message.
pub const EOF_TEXT: &str = r#"{"type":"eof"}"#;
/// Largest binary message either side sends or accepts: 64 KiB (a larger
/// one is closed with 1009).
pub const MAX_MESSAGE: usize = 64 * 1024;
/// Bytes read from the far side per message: up to [`MAX_MESSAGE`]. Half as
/// many messages as 32 KiB reads took one connection through the CLI and a
/// direct daemon from 586 to 879 MiB/s down and 552 to 996 up (bench_tunnels).
const CHUNK: usize = MAX_MESSAGE;
/// Messages queued per direction: 32 (at most 2 MiB in each).
const QUEUE: usize = 32;
/// How often the write thread looks at its clocks while nothing comes.
const TICK: Duration = Duration::from_millis(250);
/// After the WebSocket ended, how long what the peer sent before may
/// still take to reach a far side that reads slowly: 5 s.
const DRAIN: Duration = Duration::from_secs(5);

/// Close code: the peer broke the protocol (text other than the eof,
/// bytes after its eof).
pub const CLOSE_PROTOCOL: u16 = 4400;
/// Close code: the far side's connection failed (reset, refused a write).
pub const CLOSE_FAR_ERROR: u16 = 4502;
/// Close code of an idle timeout and of the maximum duration (as exec's).
pub const CLOSE_POLICY: u16 = 1008;
/// Close code of a shutdown.
pub const CLOSE_SHUTDOWN: u16 = 1001;

/// The write half of a far side: bytes, then an optional half-close. A
/// write or half-close that times out (`TimedOut`/`WouldBlock`) made no
/// progress and is tried again after the clocks are looked at: give the
/// writer a short timeout ([`Duplex::tcp`] takes 250 ms).
pub trait HalfClose: Write + Send {
    /// No more bytes will be written (TCP: `shutdown(Write)`).
    fn close_write(&mut self) -> io::Result<()>;
}

/// The far side of a tunnel: a reader, a writer with a half-close, and
/// what cuts both from another thread.
pub struct Duplex {
    pub reader: Box<dyn Read + Send>,
    pub writer: Box<dyn HalfClose>,
    pub abort: Box<dyn Fn() + Send + Sync>,
}

impl std::fmt::Debug for Duplex {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Duplex")
    }
}

struct TcpWriter(TcpStream);

impl Write for TcpWriter {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        self.0.write(buf)
    }
    fn flush(&mut self) -> io::Result<()> {
        self.0.flush()
    }
}

impl HalfClose for TcpWriter {
    fn close_write(&mut self) -> io::Result<()> {
        self.0.shutdown(Shutdown::Write)
    }
}

impl Duplex {
    /// A connected TCP socket as a far side.
    pub fn tcp(s: TcpStream) -> io::Result<Duplex> {
        let _ = s.set_nodelay(true);
        s.set_read_timeout(None)?;
        let writer = s.try_clone()?;
        writer.set_write_timeout(Some(TICK))?;
        let cut = s.try_clone()?;
        Ok(Duplex {
            reader: Box::new(s),
            writer: Box::new(TcpWriter(writer)),
            abort: Box::new(move || {
                let _ = cut.shutdown(Shutdown::Both);
            }),
        })
    }
}

/// How a [`splice`] behaves besides moving bytes.
#[derive(Debug, Clone, Default)]
pub struct SpliceOptions {
    /// End (1008 `idle timeout`) after this long without a byte either way.
    pub idle_timeout: Option<Duration>,
    /// End (1008 `maximum duration reached`) after this long.
    pub max_duration: Option<Duration>,
    /// The pump's pings and dead-peer limit ([`WsOptions`]).
    pub ws: WsOptions,
    /// Disconnected (every sender dropped): end with 1001.
    pub stop: Option<Receiver<()>>,
}

/// How a tunnel ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum End {
    /// Both directions sent their eof (we closed with 1000), or the peer
    /// closed with 1000.
    Done,
    /// The peer closed with another code (its code and reason).
    PeerClosed(u16, String),
    /// No byte either way for the idle timeout.
    Idle,
    /// The maximum duration passed.
    MaxDuration,
    /// The stop channel said so.
    Shutdown,
    /// The far side's connection failed.
    FarError(String),
    /// The peer broke the protocol.
    Protocol(String),
    /// The WebSocket failed (reset, dead peer).
    Socket(String),
}

impl End {
    /// A short word for logs, audit lines and metric labels.
    pub fn as_str(&self) -> &'static str {
        match self {
            End::Done => "closed",
            End::PeerClosed(..) => "peer_closed",
            End::Idle => "idle",
            End::MaxDuration => "max_duration",
            End::Shutdown => "shutdown",
            End::FarError(_) => "far_error",
            End::Protocol(_) => "protocol",
            End::Socket(_) => "socket",
        }
    }
}

/// What a tunnel moved and how it ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Totals {
    /// Bytes from the WebSocket's peer to the far side.
    pub up: u64,
    /// Bytes from the far side to the WebSocket's peer.
    pub down: u64,
    pub end: End,
}

/// A Close frame of `code` with `reason` cut to what a Close may carry
/// (123 bytes, on a character boundary).
pub fn close_frame(code: u16, reason: &str) -> CloseFrame {
    let mut cut = reason.len().min(123);
    while !reason.is_char_boundary(cut) {
        cut -= 1;
    }
    CloseFrame {
        code: CloseCode::from(code),
        reason: reason[..cut].to_string().into(),
    }
}

/// What the two threads tell each other and the caller.
struct Shared {
    up: AtomicU64,
    down: AtomicU64,
    /// Milliseconds since `start` of the last byte either way.
    last: AtomicU64,
    start: Instant,
    /// Set once by whoever ends the tunnel first with a reason.
    end: parking_lot::Mutex<Option<End>>,
    /// Once the WebSocket is over: until when the write thread may still
    /// deliver what came before its end ([`DRAIN`]).
    drain_until: parking_lot::Mutex<Option<Instant>>,
}

impl Shared {
    fn touch(&self) {
        let ms = u64::try_from(self.start.elapsed().as_millis()).unwrap_or(u64::MAX);
        self.last.store(ms, Ordering::Relaxed);
    }

    fn idle_for(&self) -> Duration {
        let last = Duration::from_millis(self.last.load(Ordering::Relaxed));
        self.start.elapsed().saturating_sub(last)
    }

    /// Records why the tunnel ends (the first reason wins) and closes the
    /// WebSocket with `frame`.
    fn finish(&self, end: End, aborter: &Aborter, frame: CloseFrame) {
        let mut e = self.end.lock();
        if e.is_none() {
            *e = Some(end);
            aborter.abort(frame);
        }
    }
}

/// Splices `ws` (its peer speaks `kubegate.tunnel.v1`) with `far` until
/// the tunnel ends; see the module documentation. Runs the pump on the
/// calling thread, two threads beside it; returns once all three are done.
pub fn splice<S: PollStream>(ws: WebSocket<S>, far: Duplex, opts: SpliceOptions) -> Totals {
    let Duplex {
        reader,
        writer,
        abort,
    } = far;
    let (outbox, out_rx) = match ws::try_outbox(QUEUE) {
        Ok(x) => x,
        Err(e) => {
            abort();
            return Totals {
                up: 0,
                down: 0,
                end: End::Socket(format!("creating the outbox: {e}")),
            };
        }
    };
    let (in_tx, in_rx) = bounded::<Message>(QUEUE);
    let shared = Arc::new(Shared {
        up: AtomicU64::new(0),
        down: AtomicU64::new(0),
        last: AtomicU64::new(0),
        start: Instant::now(),
        end: parking_lot::Mutex::new(None),
        drain_until: parking_lot::Mutex::new(None),
    });
    let aborter = outbox.aborter();
    let reading = {
        let (shared, outbox, aborter) = (shared.clone(), outbox.clone(), aborter.clone());
        std::thread::Builder::new()
            .name("tunnel-read".into())
            .spawn(move || read_far(reader, &outbox, &aborter, &shared))
    };
    let writing = {
        let (shared, opts) = (shared.clone(), opts.clone());
        std::thread::Builder::new()
            .name("tunnel-write".into())
            .spawn(move || write_far(writer, &in_rx, outbox, &aborter, &shared, &opts))
    };
    let (reading, writing) = match (reading, writing) {
        (Ok(r), Ok(w)) => (r, w),
        (r, w) => {
            // Out of threads: whatever started ends with the far side cut.
            abort();
            drop(in_tx);
            drop(out_rx);
            for t in [r.ok(), w.ok()].into_iter().flatten() {
                let _ = t.join();
            }
            return Totals {
                up: 0,
                down: 0,
                end: End::Socket("could not start the tunnel's threads".into()),
            };
        }
    };
    let (ws_end, in_tx) = ws::run_stream_into(ws, out_rx, in_tx, opts.ws);
    // What the peer sent before its Close still goes to the far side: the
    // write thread drains the channel (or stops at once when the tunnel
    // ended for a reason), then the far side is cut, which ends the read.
    drop(in_tx);
    *shared.drain_until.lock() = Some(Instant::now() + DRAIN);
    let _ = writing.join();
    abort();
    let _ = reading.join();
    let end = shared.end.lock().take().unwrap_or(match ws_end {
        WsEnd::Closed => End::Done,
        WsEnd::PeerClosed(Some(f)) if u16::from(f.code) != 1000 => {
            End::PeerClosed(f.code.into(), f.reason.to_string())
        }
        WsEnd::PeerClosed(_) => End::Done,
        WsEnd::Idle => End::Socket("the peer stopped answering pings".into()),
        WsEnd::Error(e) => End::Socket(e),
    });
    Totals {
        up: shared.up.load(Ordering::Relaxed),
        down: shared.down.load(Ordering::Relaxed),
        end,
    }
}

/// `tunnel-read`: the far side into the outbox, then the eof; a read
/// error ends the tunnel.
fn read_far(
    mut reader: Box<dyn Read + Send>,
    outbox: &ws::Outbox,
    aborter: &Aborter,
    shared: &Shared,
) {
    let mut buf = vec![0u8; CHUNK];
    loop {
        match reader.read(&mut buf) {
            Ok(0) => {
                let _ = outbox.send(Message::Text(EOF_TEXT.into()));
                return;
            }
            Ok(n) => {
                shared.touch();
                if outbox.send(Message::binary(buf[..n].to_vec())).is_err() {
                    return;
                }
                shared.down.fetch_add(n as u64, Ordering::Relaxed);
            }
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => {
                let m = format!("reading: {e}");
                let frame = close_frame(CLOSE_FAR_ERROR, &format!("PORT_UNREACHABLE: {m}"));
                shared.finish(End::FarError(m), aborter, frame);
                return;
            }
        }
    }
}

/// Why the write thread stopped taking messages.
enum Stop {
    /// The pump is gone (the channel disconnected) or the peer closed.
    Gone,
    /// Ended with this reason and Close.
    End(End, CloseFrame),
}

/// `tunnel-write`: the inbound channel to the far side; the clocks and the
/// stop channel. Holds one of the outbox's senders until the peer's eof
/// (the pump closes with 1000 when the last one goes).
fn write_far(
    mut writer: Box<dyn HalfClose>,
    in_rx: &Receiver<Message>,
    outbox: ws::Outbox,
    aborter: &Aborter,
    shared: &Shared,
    opts: &SpliceOptions,
) {
    let mut outbox = Some(outbox);
    if let Err(Stop::End(end, frame)) =
        write_loop(&mut *writer, in_rx, &mut outbox, aborter, shared, opts)
    {
        shared.finish(end, aborter, frame);
    }
}

fn write_loop(
    writer: &mut dyn HalfClose,
    in_rx: &Receiver<Message>,
    outbox: &mut Option<ws::Outbox>,
    aborter: &Aborter,
    shared: &Shared,
    opts: &SpliceOptions,
) -> Result<(), Stop> {
    let never = crossbeam_channel::never();
    let stop_rx = opts.stop.as_ref().unwrap_or(&never);
    let check = |shared: &Shared| -> Result<(), Stop> {
        if shared.end.lock().is_some()
            || shared
                .drain_until
                .lock()
                .is_some_and(|d| Instant::now() >= d)
        {
            return Err(Stop::Gone);
        }
        if let Some(max) = opts.max_duration {
            if shared.start.elapsed() >= max {
                let f = close_frame(CLOSE_POLICY, "maximum duration reached");
                return Err(Stop::End(End::MaxDuration, f));
            }
        }
        if let Some(idle) = opts.idle_timeout {
            if shared.idle_for() >= idle {
                return Err(Stop::End(
                    End::Idle,
                    close_frame(CLOSE_POLICY, "idle timeout"),
                ));
            }
        }
        if matches!(
            stop_rx.try_recv(),
            Err(crossbeam_channel::TryRecvError::Disconnected)
        ) {
            let f = close_frame(CLOSE_SHUTDOWN, "server shutting down");
            return Err(Stop::End(End::Shutdown, f));
        }
        Ok(())
    };
    let mut peer_eof = false;
    loop {
        let full = in_rx.len() >= QUEUE;
        let msg = select! {
            recv(in_rx) -> m => match m {
                Ok(m) => Some(m),
                Err(_) => return Err(Stop::Gone),
            },
            recv(stop_rx) -> _ => None,
            default(TICK) => None,
        };
        if full {
            // The pump may hold a message for lack of room: room now.
            aborter.wake();
        }
        check(shared)?;
        let Some(msg) = msg else { continue };
        match msg {
            Message::Binary(b) if peer_eof && !b.is_empty() => {
                let m = "bytes after the eof".to_string();
                let f = close_frame(CLOSE_PROTOCOL, &format!("BAD_REQUEST: {m}"));
                return Err(Stop::End(End::Protocol(m), f));
            }
            Message::Binary(b) => {
                write_all(writer, &b, shared, &check)?;
                shared.up.fetch_add(b.len() as u64, Ordering::Relaxed);
            }
            Message::Text(t) if !peer_eof && is_eof(&t) => {
                peer_eof = true;
                close_write(writer, shared, &check)?;
                // Our part of the normal end: the pump closes with 1000
                // once the read side has sent its eof too.
                drop(outbox.take());
            }
            Message::Text(t) => {
                let m = format!("unexpected text message {:?}", truncate(&t, 64));
                let f = close_frame(CLOSE_PROTOCOL, &format!("BAD_REQUEST: {m}"));
                return Err(Stop::End(End::Protocol(m), f));
            }
            Message::Close(_) => return Err(Stop::Gone),
            Message::Ping(_) | Message::Pong(_) | Message::Frame(_) => {}
        }
    }
}

/// Half-closes the far side, a timed-out attempt (no room yet) retried
/// after the clocks are looked at, as [`write_all`] does.
fn close_write(
    writer: &mut dyn HalfClose,
    shared: &Shared,
    check: &dyn Fn(&Shared) -> Result<(), Stop>,
) -> Result<(), Stop> {
    loop {
        match writer.close_write() {
            Ok(()) => return Ok(()),
            Err(e) if retryable(&e) => check(shared)?,
            Err(e) => {
                let m = format!("half-closing: {e}");
                let f = close_frame(CLOSE_FAR_ERROR, &format!("PORT_UNREACHABLE: {m}"));
                return Err(Stop::End(End::FarError(m), f));
            }
        }
    }
}

/// A write or half-close that made no progress yet and may be tried again.
fn retryable(e: &io::Error) -> bool {
    matches!(
        e.kind(),
        io::ErrorKind::TimedOut | io::ErrorKind::WouldBlock | io::ErrorKind::Interrupted
    )
}

/// Whether a text message is the eof control message.
fn is_eof(t: &str) -> bool {
    #[derive(serde::Deserialize)]
    #[serde(deny_unknown_fields)]
    struct Control {
        #[serde(rename = "type")]
        kind: String,
    }
    serde_json::from_str::<Control>(t).is_ok_and(|c| c.kind == "eof")
}

fn truncate(s: &str, n: usize) -> &str {
    let mut cut = s.len().min(n);
    while !s.is_char_boundary(cut) {
        cut -= 1;
    }
    &s[..cut]
}

/// Writes all of `b` to the far side, a timed-out write retried after the
/// clocks are looked at.
fn write_all(
    writer: &mut dyn HalfClose,
    mut b: &[u8],
    shared: &Shared,
    check: &dyn Fn(&Shared) -> Result<(), Stop>,
) -> Result<(), Stop> {
    while !b.is_empty() {
        match writer.write(b) {
            Ok(0) => {
                let m = "writing: the connection is closed".to_string();
                let f = close_frame(CLOSE_FAR_ERROR, &format!("PORT_UNREACHABLE: {m}"));
                return Err(Stop::End(End::FarError(m), f));
            }
            Ok(n) => {
                shared.touch();
                b = &b[n..];
            }
            Err(e) if retryable(&e) => check(shared)?,
            Err(e) => {
                let m = format!("writing: {e}");
                let f = close_frame(CLOSE_FAR_ERROR, &format!("PORT_UNREACHABLE: {m}"));
                return Err(Stop::End(End::FarError(m), f));
            }
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use rustix::event::{PollFd, PollFlags};
    use std::net::{TcpListener, TcpStream};
    use tungstenite::protocol::Role;

    /// Server and client WebSockets over loopback, and a TCP pair (the
    /// far side's socket, the far peer).
    fn sockets() -> (
        WebSocket<TcpStream>,
        WebSocket<TcpStream>,
        TcpStream,
        TcpStream,
    ) {
        let tcp_pair = || {
            let l = TcpListener::bind("127.0.0.1:0").unwrap();
            let c = TcpStream::connect(l.local_addr().unwrap()).unwrap();
            let (s, _) = l.accept().unwrap();
            (s, c)
        };
        let (s, c) = tcp_pair();
        let (far, peer) = tcp_pair();
        (
            WebSocket::from_raw_socket(s, Role::Server, None),
            WebSocket::from_raw_socket(c, Role::Client, None),
            far,
            peer,
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

    fn start(
        ws: WebSocket<TcpStream>,
        far: TcpStream,
        opts: SpliceOptions,
    ) -> std::thread::JoinHandle<Totals> {
        std::thread::spawn(move || splice(ws, Duplex::tcp(far).unwrap(), opts))
    }

    /// A far side reading from `far` whose half-close never finds room.
    fn stuck_far(far: TcpStream) -> Duplex {
        struct NoRoom;
        impl Write for NoRoom {
            fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
                Ok(buf.len())
            }
            fn flush(&mut self) -> io::Result<()> {
                Ok(())
            }
        }
        impl HalfClose for NoRoom {
            fn close_write(&mut self) -> io::Result<()> {
                std::thread::sleep(Duration::from_millis(20));
                Err(io::Error::new(io::ErrorKind::TimedOut, "no room yet"))
            }
        }
        let cut = far.try_clone().unwrap();
        Duplex {
            reader: Box::new(far),
            writer: Box::new(NoRoom),
            abort: Box::new(move || {
                let _ = cut.shutdown(Shutdown::Both);
            }),
        }
    }

    /// Reads the client until a Close: bytes, eof seen, the Close's code
    /// and reason.
    fn drain(c: &mut WebSocket<TcpStream>) -> (Vec<u8>, bool, u16, String) {
        let (mut bytes, mut eof) = (Vec::new(), false);
        loop {
            match c.read().unwrap() {
                Message::Binary(b) => bytes.extend_from_slice(&b),
                Message::Text(t) => {
                    assert!(is_eof(&t), "{t}");
                    eof = true;
                }
                Message::Close(f) => {
                    let _ = c.flush();
                    let (code, reason) = f.map_or((1005, String::new()), |f| {
                        (u16::from(f.code), f.reason.to_string())
                    });
                    return (bytes, eof, code, reason);
                }
                _ => {}
            }
        }
    }

    #[test]
    fn the_eof_is_only_its_control_message() {
        assert!(is_eof(EOF_TEXT));
        assert!(is_eof(r#"{ "type" : "eof" }"#));
        for t in [
            r#"{"type":"EOF"}"#,
            r#"{"type":"eof","x":1}"#,
            "eof",
            "",
            "{}",
        ] {
            assert!(!is_eof(t), "{t}");
        }
        let f = close_frame(4502, &"é".repeat(100));
        assert!(f.reason.len() <= 123 && f.reason.chars().all(|c| c == 'é'));
    }

    /// A peer that does not read stops the far side being read: what the
    /// far peer can push in is bounded (socket buffers and the 32-message
    /// outbox), not what it has to send; then every byte arrives, in
    /// order, the far peer's half-close as the eof, and both eofs make a
    /// 1000.
    #[test]
    fn a_slow_reader_holds_the_far_side_back_and_loses_nothing() {
        let _wd = watchdog(60);
        let (ws, mut client, far, peer) = sockets();
        let splice = start(ws, far, SpliceOptions::default());
        let pattern = |i: u64| (i.wrapping_mul(2_654_435_761) >> 7) as u8;
        peer.set_nonblocking(true).unwrap();
        let (mut written, target) = (0u64, 256u64 << 20);
        let mut chunk = vec![0u8; 64 * 1024];
        // Write until the far peer has had no room for a whole second.
        'fill: while written < target {
            for (k, b) in chunk.iter_mut().enumerate() {
                *b = pattern(written + k as u64);
            }
            let n = loop {
                match (&peer).write(&chunk) {
                    Ok(n) => break n,
                    Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                        let mut fds = [PollFd::new(&peer, PollFlags::OUT)];
                        let ready =
                            crate::http::stream::poll(&mut fds, Some(Duration::from_secs(1)))
                                .unwrap();
                        if ready == 0 {
                            break 'fill;
                        }
                    }
                    Err(e) => panic!("{e}"),
                }
            };
            written += n as u64;
        }
        eprintln!("the far peer was held back after {written} bytes");
        assert!(
            written < 64 << 20,
            "{written} bytes went in although nobody read: not held back"
        );
        peer.set_nonblocking(false).unwrap();
        peer.shutdown(std::net::Shutdown::Write).unwrap();
        // Now read it all, then our own eof.
        let mut got = 0u64;
        let mut eof = false;
        while !eof {
            match client.read().unwrap() {
                Message::Binary(b) => {
                    for (k, byte) in b.iter().enumerate() {
                        assert_eq!(*byte, pattern(got + k as u64), "byte {}", got + k as u64);
                    }
                    got += b.len() as u64;
                }
                Message::Text(t) => eof = is_eof(&t),
                m => panic!("{m:?}"),
            }
        }
        assert_eq!(got, written);
        client.send(Message::text(EOF_TEXT)).unwrap();
        let (rest, _, code, _) = drain(&mut client);
        assert!(rest.is_empty());
        assert_eq!(code, 1000);
        let t = splice.join().unwrap();
        assert_eq!((t.up, t.down, t.end), (0, written, End::Done));
    }

    #[test]
    fn the_clocks_and_the_stop_end_a_tunnel() {
        let _wd = watchdog(60);
        // The maximum duration, although bytes keep moving.
        let (ws, mut client, far, mut peer) = sockets();
        let opts = SpliceOptions {
            max_duration: Some(Duration::from_millis(300)),
            idle_timeout: Some(Duration::from_secs(30)),
            ..SpliceOptions::default()
        };
        let splice = start(ws, far, opts);
        peer.write_all(b"x").unwrap();
        let (bytes, _, code, reason) = drain(&mut client);
        assert_eq!(
            (bytes.as_slice(), code, reason.as_str()),
            (&b"x"[..], 1008, "maximum duration reached")
        );
        assert_eq!(splice.join().unwrap().end, End::MaxDuration);
        // Nothing either way: the idle timeout.
        let (ws, mut client, far, _peer) = sockets();
        let opts = SpliceOptions {
            idle_timeout: Some(Duration::from_millis(300)),
            ..SpliceOptions::default()
        };
        let splice = start(ws, far, opts);
        let (_, _, code, reason) = drain(&mut client);
        assert_eq!((code, reason.as_str()), (1008, "idle timeout"));
        assert_eq!(splice.join().unwrap().end, End::Idle);
        // The stop channel: 1001.
        let (ws, mut client, far, _peer) = sockets();
        let (stop_tx, stop_rx) = bounded::<()>(0);
        let opts = SpliceOptions {
            stop: Some(stop_rx),
            ..SpliceOptions::default()
        };
        let splice = start(ws, far, opts);
        drop(stop_tx);
        let (_, _, code, _) = drain(&mut client);
        assert_eq!(code, 1001);
        assert_eq!(splice.join().unwrap().end, End::Shutdown);
        // A far side whose half-close finds no room (an API server that
        // does not read): the clocks still end the tunnel.
        let (ws, mut client, far, _peer) = sockets();
        let opts = SpliceOptions {
            idle_timeout: Some(Duration::from_millis(300)),
            ..SpliceOptions::default()
        };
        let stuck = stuck_far(far);
        let spliced = std::thread::spawn(move || super::splice(ws, stuck, opts));
        client.send(Message::text(EOF_TEXT)).unwrap();
        let (_, _, code, reason) = drain(&mut client);
        assert_eq!((code, reason.as_str()), (1008, "idle timeout"));
        assert_eq!(spliced.join().unwrap().end, End::Idle);
        // The far side reset: 4502 with the API code.
        let (ws, mut client, far, peer) = sockets();
        let splice = start(ws, far, SpliceOptions::default());
        // Closed with unread bytes, the peer resets the connection.
        client.send(Message::binary(b"unread".to_vec())).unwrap();
        let mut one = [0u8; 1];
        assert_eq!(peer.peek(&mut one).unwrap(), 1);
        drop(peer);
        let (_, _, code, reason) = drain(&mut client);
        assert_eq!(code, CLOSE_FAR_ERROR);
        assert!(reason.starts_with("PORT_UNREACHABLE: "), "{reason}");
        assert!(matches!(splice.join().unwrap().end, End::FarError(_)));
    }
}
