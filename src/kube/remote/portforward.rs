//! One TCP connection to a pod's port through the API server's
//! `pods/{name}/portforward`, as kubectl 1.31+ opens it
//! (docs/portforward-wire.md §1-§2): a WebSocket with the subprotocol
//! `SPDY/3.1+portforward.k8s.io` carrying SPDY/3 bytes (`kube::spdy`), on
//! it one stream pair (error stream 1, data stream 3, `requestID` 0) for
//! the port. A FIN on the data stream is a half-close each way, so a
//! client's half-close reaches the pod.
//!
//! [`open`] dials, upgrades and sets the pair up on the caller's thread
//! (SYN_STREAM, wait for its SYN_REPLY, FIN the error stream, SYN_STREAM
//! the data stream, wait for its reply: kubectl's order), all under one
//! deadline; then the WebSocket goes to its pump on a `kube-pf-io` thread
//! and the caller gets a [`Duplex`]:
//!
//! - its reader takes the data stream's bytes from a bounded channel the
//!   pump's [`Inbound`] decodes into (a full channel makes the pump hold
//!   the next message and stop reading the socket: backpressure to the
//!   pod); what the pod side says on the error stream, a RST_STREAM, a
//!   GOAWAY or a broken frame end the reader with [`PortForwardError`]'s
//!   text as an `io::Error`;
//! - its writer sends DATA frames of at most 32 KiB through the bounded
//!   outbox (a full outbox makes a write time out after 250 ms without
//!   progress: the caller tries again, backpressure to the client); its
//!   half-close is the DATA FIN;
//! - its abort, and dropping the writer, close the WebSocket.
//!
//! A refused port shows only after the set-up: the kubelet replies to
//! both streams, then dials the pod, and on failure FINs the data stream
//! and writes its text on the error stream. So a data FIN before any byte
//! is held until the error stream FINs (then it is the pod's end of file)
//! or speaks (then it is the error).
//!
//! Server PINGs are echoed; SETTINGS and WINDOW_UPDATE are ignored (no
//! flow control, as spdystream).

use std::collections::VecDeque;
use std::fmt;
use std::io::{self, Read, Write};
use std::time::{Duration, Instant};

use crossbeam_channel::{bounded, Receiver, RecvError, SendTimeoutError, Sender, TrySendError};
use tungstenite::protocol::frame::coding::CloseCode;
use tungstenite::protocol::CloseFrame;
use tungstenite::{Message, WebSocket};

use super::connect::dial_websocket;
use super::RemoteError;
use crate::http::stream::ClientSocket;
use crate::http::tunnel::{Duplex, HalfClose};
use crate::http::ws::{self, Aborter, Inbound, Outbox, Refused, WsOptions};
use crate::kube::connection::Connection;
use crate::kube::spdy::{write_data, Decoder, Encoder, Frame, Headers, Limits, Role, SpdyError};

/// The WebSocket subprotocol of the SPDY tunnel.
pub const TUNNEL_PROTOCOL: &str = "SPDY/3.1+portforward.k8s.io";
/// The error stream's id and the data stream's (the first pair a client
/// opens).
const ERROR_STREAM: u32 = 1;
const DATA_STREAM: u32 = 3;
/// Bytes per DATA frame we send (kubectl's copy buffer).
const CHUNK: usize = 32 * 1024;
/// Messages queued each way.
const QUEUE: usize = 32;
/// How long a write waits for room before it reports no progress.
const WRITE_WAIT: Duration = Duration::from_millis(250);
/// The most of the error stream's text kept.
const MAX_ERROR_TEXT: usize = 4096;

/// Why a port-forward did not open, or ended.
#[derive(Debug)]
pub enum PortForwardError {
    /// The WebSocket could not be opened (dial, TLS, credentials, the API
    /// server's refusal: no such pod, forbidden).
    Open(RemoteError),
    /// The far end does not speak the tunnel (another subprotocol, a text
    /// message, a frame error).
    Protocol(String),
    /// The pod side refused the stream (RST_STREAM, its status).
    Reset(u32),
    /// What the kubelet (or the sim) wrote on the error stream: it could
    /// not forward (`error forwarding port 80 to pod …: connection refused`).
    Remote(String),
    /// The connection ended (GOAWAY: the pod went; a Close).
    Closed(String),
    /// The set-up did not finish within the deadline.
    Timeout,
}

impl PortForwardError {
    /// Nothing accepts connections on the port (the kubelet's text says
    /// so): worth telling from other failures.
    pub fn is_refused(&self) -> bool {
        matches!(self, PortForwardError::Remote(t) if t.contains("connection refused"))
    }
}

impl fmt::Display for PortForwardError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            PortForwardError::Open(e) => write!(f, "opening the port-forward: {e}"),
            PortForwardError::Protocol(m) => write!(f, "port-forward protocol: {m}"),
            PortForwardError::Reset(s) => write!(f, "the pod side reset the stream (status {s})"),
            PortForwardError::Remote(t) => f.write_str(t),
            PortForwardError::Closed(m) => write!(f, "the port-forward ended: {m}"),
            PortForwardError::Timeout => f.write_str("the port-forward was not set up in time"),
        }
    }
}

impl std::error::Error for PortForwardError {}

impl From<SpdyError> for PortForwardError {
    fn from(e: SpdyError) -> Self {
        PortForwardError::Protocol(e.to_string())
    }
}

/// What the pump hands the reader.
enum Chunk {
    Data(Vec<u8>),
    /// The pod side's half-close (FIN on the data stream).
    Fin,
    Error(String),
}

/// Opens a connection to `port` of `namespace/pod` through the API
/// server (see the module documentation); `timeout` bounds the dial, the
/// upgrade and the stream set-up.
pub fn open(
    conn: &Connection,
    namespace: &str,
    pod: &str,
    port: u16,
    timeout: Duration,
) -> Result<Duplex, PortForwardError> {
    let name_ok = |s: &str| {
        !s.is_empty()
            && s.bytes()
                .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-' || b == b'.')
    };
    if !name_ok(namespace) || !name_ok(pod) || port == 0 {
        return Err(PortForwardError::Open(RemoteError::InvalidRequest(
            format!("{namespace}/{pod}:{port} is not a pod port"),
        )));
    }
    let deadline = Instant::now() + timeout;
    let path = format!("/api/v1/namespaces/{namespace}/pods/{pod}/portforward");
    // Our User-Agent, as on every call (audit logs, tests/rbac.rs).
    let agent = [(
        "User-Agent".to_string(),
        crate::kube::client::rest::USER_AGENT.to_string(),
    )];
    let (mut ws, chosen) = dial_websocket(conn, &path, &agent, Some(TUNNEL_PROTOCOL), timeout)
        .map_err(PortForwardError::Open)?;
    if chosen.as_deref() != Some(TUNNEL_PROTOCOL) {
        return Err(PortForwardError::Protocol(format!(
            "the API server chose {chosen:?}, not {TUNNEL_PROTOCOL} (API servers before \
             Kubernetes 1.31, or with the PortForwardWebsockets feature gate off, do not \
             tunnel port-forward in a WebSocket)"
        )));
    }
    let mut decoder = Decoder::new(Limits::DEFAULT);
    let early = set_up(&mut ws, &mut decoder, port, deadline)?;
    let (outbox, out_rx) =
        ws::try_outbox(QUEUE).map_err(|e| PortForwardError::Closed(format!("an outbox: {e}")))?;
    let (data_tx, data_rx) = bounded::<Chunk>(QUEUE);
    let aborter = outbox.aborter();
    let inbound = SpdyInbound {
        decoder,
        data: data_tx,
        pending: early,
        pings: outbox.clone(),
        broken: false,
        data_done: false,
        error_said: false,
        data_seen: false,
        held_fin: false,
    };
    std::thread::Builder::new()
        .name("kube-pf-io".into())
        .spawn(move || {
            let opts = WsOptions {
                ping_interval: Some(Duration::from_secs(30)),
                idle_timeout: None,
                close_timeout: Duration::from_secs(5),
            };
            let (_, mut inbound) = ws::run_stream_into(ws, out_rx, inbound, opts);
            inbound.release_fin();
            inbound.flush();
        })
        .map_err(|e| PortForwardError::Closed(format!("starting its thread: {e}")))?;
    let cut = aborter.clone();
    Ok(Duplex {
        reader: Box::new(PfReader {
            rx: data_rx,
            cur: Vec::new(),
            at: 0,
            waker: aborter.clone(),
            done: false,
        }),
        writer: Box::new(PfWriter {
            outbox: Some(outbox),
            aborter,
        }),
        abort: Box::new(move || cut.abort(normal_close())),
    })
}

fn normal_close() -> CloseFrame {
    CloseFrame {
        code: CloseCode::Normal,
        reason: Default::default(),
    }
}

/// Writes `frame`'s bytes as one binary message (blocking set-up).
fn send_frame(
    ws: &mut WebSocket<ClientSocket>,
    enc: &mut Encoder,
    frame: &Frame,
) -> Result<(), PortForwardError> {
    let mut out = Vec::new();
    enc.encode(frame, &mut out)?;
    ws.send(Message::binary(out))
        .map_err(|e| PortForwardError::Closed(format!("sending: {e}")))
}

/// The pair's set-up on the blocking socket, kubectl's order; returns
/// what of the data stream already came (rarely anything).
fn set_up(
    ws: &mut WebSocket<ClientSocket>,
    decoder: &mut Decoder,
    port: u16,
    deadline: Instant,
) -> Result<VecDeque<Chunk>, PortForwardError> {
    let mut enc = Encoder::new();
    let port_s = port.to_string();
    let syn = |stream_id, kind| Frame::SynStream {
        stream_id,
        assoc_id: 0,
        priority: 0,
        fin: false,
        unidirectional: false,
        headers: Headers::from_pairs(&[
            ("streamtype", kind),
            ("port", port_s.as_str()),
            ("requestid", "0"),
        ]),
    };
    let mut early = VecDeque::new();
    send_frame(ws, &mut enc, &syn(ERROR_STREAM, "error"))?;
    wait_reply(ws, decoder, ERROR_STREAM, deadline, &mut early)?;
    let mut fin = Vec::new();
    write_data(&mut fin, ERROR_STREAM, &[], true)?;
    ws.send(Message::binary(fin))
        .map_err(|e| PortForwardError::Closed(format!("sending: {e}")))?;
    send_frame(ws, &mut enc, &syn(DATA_STREAM, "data"))?;
    wait_reply(ws, decoder, DATA_STREAM, deadline, &mut early)?;
    Ok(early)
}

/// Reads frames until the SYN_REPLY of `stream`, within the deadline.
fn wait_reply(
    ws: &mut WebSocket<ClientSocket>,
    decoder: &mut Decoder,
    stream: u32,
    deadline: Instant,
    early: &mut VecDeque<Chunk>,
) -> Result<(), PortForwardError> {
    loop {
        while let Some(frame) = decoder.next()? {
            match frame {
                Frame::SynReply { stream_id, .. } if stream_id == stream => return Ok(()),
                Frame::RstStream { status, .. } => return Err(PortForwardError::Reset(status)),
                Frame::Data {
                    stream_id: ERROR_STREAM,
                    data,
                    ..
                } if !data.is_empty() => {
                    return Err(PortForwardError::Remote(lossy(&data)));
                }
                Frame::Data {
                    stream_id: DATA_STREAM,
                    data,
                    fin,
                } => {
                    early.push_back(Chunk::Data(data));
                    if fin {
                        early.push_back(Chunk::Fin);
                    }
                }
                Frame::GoAway { .. } => {
                    return Err(PortForwardError::Closed(
                        "GOAWAY before the streams were set up".into(),
                    ))
                }
                Frame::Ping { id } if !Role::Client.owns_id(id) => {
                    send_frame(ws, &mut Encoder::new(), &Frame::Ping { id })?;
                }
                _ => {}
            }
        }
        let left = deadline.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return Err(PortForwardError::Timeout);
        }
        let _ = ws.get_ref().tcp().set_read_timeout(Some(left));
        match ws.read() {
            Ok(Message::Binary(b)) => decoder.push(&b),
            Ok(Message::Text(_)) => {
                return Err(PortForwardError::Protocol(
                    "a text message on the tunnel".into(),
                ))
            }
            Ok(Message::Close(f)) => {
                return Err(PortForwardError::Closed(format!(
                    "closed during the set-up{}",
                    f.map(|f| format!(" ({} {})", f.code, f.reason))
                        .unwrap_or_default()
                )))
            }
            Ok(_) => {}
            Err(tungstenite::Error::Io(e))
                if matches!(
                    e.kind(),
                    io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut
                ) =>
            {
                return Err(PortForwardError::Timeout)
            }
            Err(e) => return Err(PortForwardError::Closed(e.to_string())),
        }
    }
}

fn lossy(b: &[u8]) -> String {
    let mut s = String::from_utf8_lossy(&b[..b.len().min(MAX_ERROR_TEXT)]).into_owned();
    s.retain(|c| !c.is_control());
    s
}

/// The pump's side: decodes SPDY on the pump's thread, hands the data
/// stream's bytes to the reader without ever blocking.
struct SpdyInbound {
    decoder: Decoder,
    data: Sender<Chunk>,
    /// Decoded, not yet taken by the full channel (at most one message's
    /// worth: a message is not taken while this holds anything).
    pending: VecDeque<Chunk>,
    /// PING echoes (dropped when the outbox is full).
    pings: Outbox,
    /// A frame error or a text message: nothing more is decoded.
    broken: bool,
    data_done: bool,
    error_said: bool,
    /// A byte came on the data stream.
    data_seen: bool,
    /// The data stream's FIN came before any byte: held until the error
    /// stream says whether the dial failed (the kubelet FINs the data
    /// stream first, then writes its text) or FINs too.
    held_fin: bool,
}

impl SpdyInbound {
    /// Moves what is pending into the channel while it has room; false
    /// when something is left.
    fn flush(&mut self) -> bool {
        while let Some(c) = self.pending.pop_front() {
            match self.data.try_send(c) {
                Ok(()) => {}
                Err(TrySendError::Full(c)) => {
                    self.pending.push_front(c);
                    return false;
                }
                // The reader is gone: nothing is wanted.
                Err(TrySendError::Disconnected(_)) => {
                    self.pending.clear();
                    return true;
                }
            }
        }
        true
    }

    fn fail(&mut self, m: String) {
        if !self.error_said && (!self.data_done || self.held_fin) {
            self.held_fin = false;
            self.pending.push_back(Chunk::Error(m));
        }
        self.error_said = true;
        self.broken = true;
    }

    /// A held FIN goes to the reader after all.
    fn release_fin(&mut self) {
        if std::mem::take(&mut self.held_fin) {
            self.pending.push_back(Chunk::Fin);
        }
    }

    fn frame(&mut self, f: Frame) {
        match f {
            Frame::Data {
                stream_id: DATA_STREAM,
                data,
                fin,
            } => {
                if !data.is_empty() {
                    self.data_seen = true;
                    self.pending.push_back(Chunk::Data(data));
                }
                if fin && !self.data_done {
                    self.data_done = true;
                    if self.data_seen {
                        self.pending.push_back(Chunk::Fin);
                    } else {
                        self.held_fin = true;
                    }
                }
            }
            Frame::Data {
                stream_id: ERROR_STREAM,
                data,
                fin,
            } => {
                if !data.is_empty() {
                    let text = lossy(&data);
                    self.fail(PortForwardError::Remote(text).to_string());
                }
                if fin {
                    self.release_fin();
                }
            }
            Frame::RstStream {
                stream_id: DATA_STREAM,
                status,
            } => self.fail(PortForwardError::Reset(status).to_string()),
            Frame::GoAway { .. } => {
                self.fail(PortForwardError::Closed("GOAWAY (the pod is gone)".into()).to_string());
            }
            Frame::Ping { id } if !Role::Client.owns_id(id) => {
                let mut out = Vec::new();
                if Encoder::new().encode(&Frame::Ping { id }, &mut out).is_ok() {
                    let _ = self.pings.try_send(Message::binary(out));
                }
            }
            _ => {}
        }
    }
}

impl Inbound for SpdyInbound {
    fn offer(&mut self, m: Message) -> Result<(), Refused> {
        if !self.flush() {
            return Err(Refused::Full(m));
        }
        if self.broken {
            return Ok(());
        }
        match m {
            Message::Binary(b) => {
                self.decoder.push(&b);
                loop {
                    match self.decoder.next() {
                        Ok(Some(f)) => self.frame(f),
                        Ok(None) => break,
                        Err(e) => {
                            self.fail(PortForwardError::from(e).to_string());
                            break;
                        }
                    }
                }
            }
            Message::Text(_) => self.fail("port-forward protocol: a text message".into()),
            Message::Close(_) if !self.data_done => {
                self.fail(PortForwardError::Closed("the API server closed it".into()).to_string());
            }
            _ => {}
        }
        self.flush();
        Ok(())
    }
}

/// The data stream's bytes, as they come.
struct PfReader {
    rx: Receiver<Chunk>,
    cur: Vec<u8>,
    at: usize,
    /// Wakes the pump after taking from a full channel.
    waker: Aborter,
    done: bool,
}

impl Read for PfReader {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        loop {
            if self.at < self.cur.len() {
                let n = buf.len().min(self.cur.len() - self.at);
                buf[..n].copy_from_slice(&self.cur[self.at..self.at + n]);
                self.at += n;
                return Ok(n);
            }
            if self.done {
                return Ok(0);
            }
            let full = self.rx.len() >= QUEUE;
            let next = self.rx.recv();
            if full {
                self.waker.wake();
            }
            match next {
                Ok(Chunk::Data(d)) => {
                    self.cur = d;
                    self.at = 0;
                }
                Ok(Chunk::Fin) => {
                    self.done = true;
                    return Ok(0);
                }
                Ok(Chunk::Error(m)) => return Err(io::Error::other(m)),
                Err(RecvError) => {
                    return Err(io::Error::new(
                        io::ErrorKind::ConnectionAborted,
                        "the port-forward connection ended",
                    ))
                }
            }
        }
    }
}

/// DATA frames to the pod; dropping it closes the WebSocket.
struct PfWriter {
    outbox: Option<Outbox>,
    aborter: Aborter,
}

impl PfWriter {
    fn send(&self, frame: Vec<u8>, wait: Option<Duration>) -> io::Result<()> {
        let Some(o) = &self.outbox else {
            return Err(io::Error::new(io::ErrorKind::BrokenPipe, "half-closed"));
        };
        let m = Message::binary(frame);
        let r = match wait {
            Some(w) => o.send_timeout(m, w),
            None => o
                .send(m)
                .map_err(|_| SendTimeoutError::Disconnected(Message::binary(Vec::new()))),
        };
        match r {
            Ok(()) => Ok(()),
            Err(SendTimeoutError::Timeout(_)) => {
                Err(io::Error::new(io::ErrorKind::TimedOut, "no room yet"))
            }
            Err(SendTimeoutError::Disconnected(_)) => Err(io::Error::new(
                io::ErrorKind::BrokenPipe,
                "the port-forward connection ended",
            )),
        }
    }
}

impl Write for PfWriter {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        let n = buf.len().min(CHUNK);
        let mut frame = Vec::with_capacity(n + 8);
        write_data(&mut frame, DATA_STREAM, &buf[..n], false).map_err(io::Error::other)?;
        self.send(frame, Some(WRITE_WAIT))?;
        Ok(n)
    }

    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

impl HalfClose for PfWriter {
    fn close_write(&mut self) -> io::Result<()> {
        let mut frame = Vec::with_capacity(8);
        write_data(&mut frame, DATA_STREAM, &[], true).map_err(io::Error::other)?;
        // Bounded like a write: a full outbox (the API server not reading,
        // a pod that does not read) returns TimedOut so the caller looks
        // at its clocks and its stop before it tries again.
        self.send(frame, Some(WRITE_WAIT))?;
        self.outbox = None;
        Ok(())
    }
}

impl Drop for PfWriter {
    fn drop(&mut self) {
        self.aborter.abort(normal_close());
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn inbound(capacity: usize) -> (SpdyInbound, Receiver<Chunk>, ws::OutboxReceiver) {
        let (outbox, out_rx) = ws::outbox(4);
        let (tx, rx) = bounded(capacity);
        let i = SpdyInbound {
            decoder: Decoder::new(Limits::DEFAULT),
            data: tx,
            pending: VecDeque::new(),
            pings: outbox,
            broken: false,
            data_done: false,
            error_said: false,
            data_seen: false,
            held_fin: false,
        };
        (i, rx, out_rx)
    }

    #[test]
    fn a_full_outbox_times_the_half_close_out_instead_of_blocking() {
        let (outbox, out_rx) = ws::outbox(1);
        let aborter = outbox.aborter();
        let mut w = PfWriter {
            outbox: Some(outbox),
            aborter,
        };
        // One DATA frame fills the outbox; nobody drains it.
        assert_eq!(w.write(b"x").unwrap(), 1);
        let t0 = std::time::Instant::now();
        let e = w.close_write().unwrap_err();
        assert_eq!(e.kind(), io::ErrorKind::TimedOut);
        assert!(t0.elapsed() < Duration::from_secs(5), "{:?}", t0.elapsed());
        // Room again: the FIN goes, and the writer is half-closed.
        assert!(out_rx.try_recv().is_some());
        w.close_write().unwrap();
        assert_eq!(w.write(b"y").unwrap_err().kind(), io::ErrorKind::BrokenPipe);
    }

    fn data(stream: u32, bytes: &[u8], fin: bool) -> Message {
        let mut out = Vec::new();
        write_data(&mut out, stream, bytes, fin).unwrap();
        Message::binary(out)
    }

    fn control(f: &Frame) -> Message {
        let mut out = Vec::new();
        Encoder::new().encode(f, &mut out).unwrap();
        Message::binary(out)
    }

    /// What the reader would get, as text.
    fn taken(rx: &Receiver<Chunk>) -> Vec<String> {
        rx.try_iter()
            .map(|c| match c {
                Chunk::Data(d) => format!("data {}", String::from_utf8_lossy(&d)),
                Chunk::Fin => "fin".into(),
                Chunk::Error(e) => format!("error {e}"),
            })
            .collect()
    }

    fn offer(i: &mut SpdyInbound, m: Message) {
        assert!(i.offer(m).is_ok());
    }

    #[test]
    fn the_data_stream_and_its_fin_reach_the_reader() {
        let (mut i, rx, _o) = inbound(8);
        offer(&mut i, data(DATA_STREAM, b"hello", false));
        offer(&mut i, data(DATA_STREAM, b"", true));
        offer(&mut i, data(ERROR_STREAM, b"", true));
        assert_eq!(taken(&rx), ["data hello", "fin"]);
    }

    #[test]
    fn a_refused_dial_is_an_error_not_an_end_of_file() {
        // The kubelet's order: data FIN, then the text, then error FIN.
        let (mut i, rx, _o) = inbound(8);
        offer(&mut i, data(DATA_STREAM, b"", true));
        assert!(taken(&rx).is_empty(), "the FIN is held");
        offer(
            &mut i,
            data(ERROR_STREAM, b"error forwarding port 1: refused", false),
        );
        offer(&mut i, data(ERROR_STREAM, b"", true));
        assert_eq!(taken(&rx), ["error error forwarding port 1: refused"]);
        // A pod that closes without a byte: the error stream's FIN frees it.
        let (mut i, rx, _o) = inbound(8);
        offer(&mut i, data(DATA_STREAM, b"", true));
        offer(&mut i, data(ERROR_STREAM, b"", true));
        assert_eq!(taken(&rx), ["fin"]);
    }

    #[test]
    fn resets_goaways_and_broken_frames_end_the_reader() {
        let (mut i, rx, _o) = inbound(8);
        offer(
            &mut i,
            control(&Frame::RstStream {
                stream_id: DATA_STREAM,
                status: 5,
            }),
        );
        assert_eq!(
            taken(&rx),
            ["error the pod side reset the stream (status 5)"]
        );
        let (mut i, rx, _o) = inbound(8);
        offer(&mut i, data(DATA_STREAM, b"x", false));
        offer(
            &mut i,
            control(&Frame::GoAway {
                last_good_stream_id: 3,
                status: 0,
            }),
        );
        let got = taken(&rx);
        assert_eq!(got[0], "data x");
        assert!(
            got[1].starts_with("error the port-forward ended: GOAWAY"),
            "{got:?}"
        );
        let (mut i, rx, _o) = inbound(8);
        offer(
            &mut i,
            Message::binary(vec![0x80, 0x03, 0x00, 0x63, 0, 0, 0, 0]),
        );
        let got = taken(&rx);
        assert!(
            got[0].starts_with("error port-forward protocol: "),
            "{got:?}"
        );
        offer(&mut i, data(DATA_STREAM, b"after", false));
        assert!(taken(&rx).is_empty(), "nothing after a broken frame");
    }

    #[test]
    fn a_full_reader_channel_holds_the_next_message() {
        let (mut i, rx, _o) = inbound(1);
        offer(&mut i, data(DATA_STREAM, b"a", false));
        offer(&mut i, data(DATA_STREAM, b"b", false));
        // "b" is pending: the next message is given back, unread.
        let m = data(DATA_STREAM, b"c", false);
        assert!(matches!(i.offer(m), Err(Refused::Full(_))));
        assert_eq!(taken(&rx), ["data a"]);
        offer(&mut i, data(DATA_STREAM, b"c", false));
        assert_eq!(taken(&rx), ["data b"]);
        assert_eq!(i.pending.len(), 1);
    }

    #[test]
    fn server_pings_are_echoed_ours_are_not() {
        let (mut i, _rx, _o) = inbound(8);
        offer(&mut i, control(&Frame::Ping { id: 2 }));
        assert_eq!(i.pings.len(), 1, "the server's PING is echoed");
        offer(&mut i, control(&Frame::Ping { id: 1 }));
        assert_eq!(i.pings.len(), 1, "an echo of our own is not echoed back");
    }
}
