//! A SPDY port-forward session, over a WebSocket (kubectl's tunnel) or a
//! raw upgraded socket (its fallback): the same code, since both
//! transports take `Message::Binary` chunks in and out
//! (`http::ws::run_stream_into`, `http::raw::run`).
//!
//! Threads (docs/ARCHITECTURE.md, threads of the sim):
//! - the connection's thread pumps the socket;
//! - `sim-pf-spdy` (1 per session) owns the SPDY state: decodes what the
//!   client sends, answers SYN_STREAMs (SYN_REPLY, or RST_STREAM), pairs
//!   streams by `requestID`, dials the pod, writes the client's DATA to
//!   the pod socket (blocking: a slow pod stops this thread, the bounded
//!   inbound channel (16 messages) fills, the pump stops reading the client: no
//!   unbounded buffer), echoes PINGs, watches the pod;
//! - `sim-pf-pod` (1 per open pod connection, at most [`MAX_PAIRS`] per
//!   session) reads the pod socket into DATA frames on the outbox
//!   (waiting when it is full: backpressure to the pod), then FINs the
//!   data and error streams.
//!
//! A client FIN on a data stream is passed to the pod as a real
//! `shutdown(SHUT_WR)` (containerd instead closes the pod connection at
//! most 1 s later); a RST_STREAM on it closes the pod connection. When the
//! pod is gone the session sends GOAWAY (last good stream id, status OK)
//! and closes the transport: kubectl says `lost connection to pod`.

use super::pod::{self, Sockets};
use super::PodRef;
use crate::http::raw::{self, RawConn, RawUpgrade};
use crate::http::ws::{self, Outbox, OutboxReceiver, WsConn, WsOptions};
use crate::http::{Reply, Upgrade};
use crate::kube::spdy::{
    write_data, Decoder, Encoder, Frame, Headers, Limits, Role, RST_CANCEL, RST_PROTOCOL_ERROR,
    RST_REFUSED_STREAM,
};
use crossbeam_channel::{bounded, select, Receiver, Sender};
use std::collections::HashMap;
use std::io::{Read, Write};
use std::net::{Shutdown, TcpStream};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};
use tungstenite::protocol::frame::coding::CloseCode;
use tungstenite::protocol::CloseFrame;
use tungstenite::Message;

/// Stream pairs (local connections) open at once per session, pending
/// ones included; a SYN_STREAM past this is refused (REFUSED_STREAM).
pub const MAX_PAIRS: usize = 128;
/// Messages queued from the session and the pod readers to the pump.
const QUEUE: usize = 64;
/// Messages queued from the pump to the session: with messages of at most
/// 1 MiB, a client can make the sim hold 16 MiB per session at most.
const INBOUND: usize = 16;
/// Bytes read from a pod per DATA frame (kubectl's own writes: 32 KiB).
const POD_READ: usize = 32 * 1024;
/// How long half a pair may wait for the other (the kubelet's
/// `DefaultStreamCreationTimeout`).
const PAIR_TIMEOUT: Duration = Duration::from_secs(30);
/// GOAWAY status: protocol error (sent after a frame error).
const GOAWAY_PROTOCOL_ERROR: u32 = 1;

/// The WebSocket tunnel (`SPDY/3.1+portforward.k8s.io`).
pub fn tunnel(pod: PodRef, max_message: usize) -> Reply {
    Reply::Upgrade(Upgrade {
        protocol: Some(super::TUNNEL_PROTOCOL.to_string()),
        headers: Vec::new(),
        max_message_bytes: max_message,
        on_open: Box::new(move |conn: WsConn| {
            let Some(s) = Started::new(pod) else {
                return;
            };
            // kubectl pings in SPDY; WebSocket pings are only a keepalive.
            let _ = ws::run(conn, s.out_rx, s.in_tx, WsOptions::default());
            s.sockets.shut_all();
            let _ = s.session.join();
        }),
    })
}

/// The plain SPDY upgrade (POST, `Upgrade: SPDY/3.1`).
pub fn plain(pod: PodRef) -> Reply {
    Reply::RawUpgrade(RawUpgrade {
        headers: vec![
            ("Connection".into(), "Upgrade".into()),
            ("Upgrade".into(), "SPDY/3.1".into()),
            (
                "X-Stream-Protocol-Version".into(),
                super::PORT_FORWARD_V1.into(),
            ),
        ],
        on_open: Box::new(move |conn: RawConn| {
            let Some(s) = Started::new(pod) else {
                return;
            };
            let _ = raw::run(conn, s.out_rx, s.in_tx, None);
            s.sockets.shut_all();
            let _ = s.session.join();
        }),
    })
}

/// A session's thread and what its transport's pump needs.
struct Started {
    out_rx: OutboxReceiver,
    in_tx: Sender<Message>,
    sockets: Sockets,
    session: std::thread::JoinHandle<()>,
}

impl Started {
    fn new(pod: PodRef) -> Option<Started> {
        let (out, out_rx) = ws::try_outbox(QUEUE).ok()?;
        let (in_tx, in_rx) = bounded(INBOUND);
        let sockets = Sockets::default();
        let session = start(pod, out, in_rx, sockets.clone())?;
        Some(Started {
            out_rx,
            in_tx,
            sockets,
            session,
        })
    }
}

fn start(
    pod: PodRef,
    out: Outbox,
    inbound: Receiver<Message>,
    sockets: Sockets,
) -> Option<std::thread::JoinHandle<()>> {
    let (done_tx, done_rx) = bounded(MAX_PAIRS);
    let mut s = Session {
        pod,
        out,
        enc: Encoder::new(),
        dec: Decoder::new(Limits::DEFAULT),
        last_id: 0,
        pending: HashMap::new(),
        conns: HashMap::new(),
        sockets,
        done_tx,
        closing: Arc::new(AtomicBool::new(false)),
    };
    std::thread::Builder::new()
        .name("sim-pf-spdy".into())
        .spawn(move || s.run(&inbound, &done_rx))
        .map_err(|e| log::warn!("port-forward: no session thread: {e}"))
        .ok()
}

/// Half or all of a stream pair waiting for the other half.
struct Pending {
    port: u16,
    error: Option<u32>,
    data: Option<u32>,
    since: Instant,
}

/// A pair whose pod connection is open.
struct Conn {
    data: u32,
    error: u32,
    /// The write half (the reader thread has its own clone).
    sock: TcpStream,
}

struct Session {
    pod: PodRef,
    out: Outbox,
    enc: Encoder,
    dec: Decoder,
    /// Highest client stream id accepted.
    last_id: u32,
    pending: HashMap<String, Pending>,
    conns: HashMap<String, Conn>,
    sockets: Sockets,
    done_tx: Sender<String>,
    /// Set when the session ends: readers send nothing more.
    closing: Arc<AtomicBool>,
}

/// Why a session ends.
enum End {
    /// The client went away (or sent GOAWAY): nothing to send.
    Client,
    /// The pod is gone: GOAWAY OK, then close.
    PodGone,
    /// A frame error: GOAWAY PROTOCOL_ERROR, then close.
    Protocol(String),
}

impl Session {
    fn run(&mut self, inbound: &Receiver<Message>, done: &Receiver<String>) {
        let end = self.serve(inbound, done);
        self.closing.store(true, Ordering::SeqCst);
        self.sockets.shut_all();
        let goaway = match &end {
            End::Client => None,
            End::PodGone => Some(crate::kube::spdy::GOAWAY_OK),
            End::Protocol(why) => {
                log::info!("port-forward to {}/{}: {why}", self.pod.ns, self.pod.name);
                Some(GOAWAY_PROTOCOL_ERROR)
            }
        };
        if let Some(status) = goaway {
            self.send(&Frame::GoAway {
                last_good_stream_id: self.last_id,
                status,
            });
            let _ = self.out.send(Message::Close(Some(CloseFrame {
                code: CloseCode::Normal,
                reason: Default::default(),
            })));
        }
    }

    fn serve(&mut self, inbound: &Receiver<Message>, done: &Receiver<String>) -> End {
        let mut next_check = Instant::now() + super::POD_CHECK;
        loop {
            let wait = next_check.saturating_duration_since(Instant::now());
            select! {
                recv(inbound) -> m => {
                    // Room again in a channel the pump may be holding for.
                    self.out.wake();
                    match m {
                        Ok(Message::Binary(b)) => {
                            self.dec.push(&b);
                            if let Some(end) = self.frames() {
                                return end;
                            }
                        }
                        Ok(Message::Text(_)) => {
                            return End::Protocol("a text message in the SPDY tunnel".into())
                        }
                        Ok(Message::Close(_)) | Err(_) => return End::Client,
                        Ok(_) => {}
                    }
                }
                recv(done) -> key => {
                    if let Ok(key) = key {
                        self.conns.remove(&key);
                        self.sockets.remove(&key);
                    }
                }
                default(wait) => {}
            }
            let now = Instant::now();
            if now >= next_check {
                if self.pod.gone() {
                    return End::PodGone;
                }
                self.expire_pairs(now);
                next_check = now + super::POD_CHECK;
            }
        }
    }

    /// Handles every frame decoded so far.
    fn frames(&mut self) -> Option<End> {
        loop {
            match self.dec.next() {
                Ok(Some(f)) => {
                    if let Some(end) = self.frame(f) {
                        return Some(end);
                    }
                }
                Ok(None) => return None,
                Err(e) => return Some(End::Protocol(e.to_string())),
            }
        }
    }

    fn frame(&mut self, f: Frame) -> Option<End> {
        match f {
            Frame::SynStream {
                stream_id, headers, ..
            } => self.syn_stream(stream_id, &headers),
            Frame::Data {
                stream_id,
                data,
                fin,
            } => self.data(stream_id, &data, fin),
            Frame::RstStream { stream_id, .. } => self.reset(stream_id),
            Frame::Ping { id } if !Role::Server.owns_id(id) => self.send(&Frame::Ping { id }),
            Frame::GoAway { .. } => return Some(End::Client),
            _ => {}
        }
        None
    }

    fn send(&mut self, f: &Frame) {
        let mut b = Vec::new();
        if self.enc.encode(f, &mut b).is_ok() {
            let _ = self.out.send(Message::Binary(b.into()));
        }
    }

    fn rst(&mut self, stream_id: u32, status: u32) {
        self.send(&Frame::RstStream { stream_id, status });
    }

    fn syn_stream(&mut self, id: u32, h: &Headers) {
        // spdystream's `validateStreamId`: ids of the client's parity, going up.
        if Role::Server.owns_id(id) || id <= self.last_id {
            self.rst(id, RST_PROTOCOL_ERROR);
            return;
        }
        self.last_id = id;
        let (port, is_error) = match stream_headers(h) {
            Ok(x) => x,
            Err(why) => {
                log::debug!("port-forward stream {id} refused: {why}");
                self.rst(id, RST_CANCEL);
                return;
            }
        };
        let key = match h.get("requestid") {
            Some(r) => r.to_string(),
            // The kubelet's fallback: the error stream's id pairs with
            // the data stream's id minus 2.
            None if is_error => id.to_string(),
            None => id.saturating_sub(2).to_string(),
        };
        let slot = self.pending.get(&key).map(|p| {
            if is_error {
                p.error.is_some()
            } else {
                p.data.is_some()
            }
        });
        if slot == Some(true) || self.conns.contains_key(&key) {
            self.rst(id, RST_CANCEL);
            return;
        }
        if slot.is_none() && self.pending.len() + self.conns.len() >= MAX_PAIRS {
            self.rst(id, RST_REFUSED_STREAM);
            return;
        }
        self.send(&Frame::SynReply {
            stream_id: id,
            fin: false,
            headers: Headers::new(),
        });
        let p = self.pending.entry(key.clone()).or_insert(Pending {
            port,
            error: None,
            data: None,
            since: Instant::now(),
        });
        if is_error {
            p.error = Some(id);
        } else {
            p.data = Some(id);
        }
        if let (Some(error), Some(data)) = (p.error, p.data) {
            let port = p.port;
            self.pending.remove(&key);
            self.open(key, port, error, data);
        }
    }

    /// Dials the pod for a complete pair and starts its reader.
    fn open(&mut self, key: String, port: u16, error: u32, data: u32) {
        let sock = match pod::dial(&self.pod, port) {
            Ok(s) => s,
            Err(text) => {
                // containerd's deferred close FINs the data stream first,
                // then the kubelet writes the text and FINs the error stream.
                self.fin(data);
                self.send(&Frame::Data {
                    stream_id: error,
                    data: text.into_bytes(),
                    fin: false,
                });
                self.fin(error);
                return;
            }
        };
        let Ok(read_half) = sock.try_clone() else {
            self.fin(data);
            self.fin(error);
            return;
        };
        self.sockets.add(&key, &sock);
        let out = self.out.clone();
        let closing = self.closing.clone();
        let done = self.done_tx.clone();
        let reader_key = key.clone();
        let spawned = std::thread::Builder::new()
            .name("sim-pf-pod".into())
            .spawn(move || {
                read_pod(read_half, &out, &closing, data, error);
                let _ = done.send(reader_key);
            });
        if spawned.is_err() {
            let _ = sock.shutdown(Shutdown::Both);
            self.sockets.remove(&key);
            self.fin(data);
            self.fin(error);
            return;
        }
        self.conns.insert(key, Conn { data, error, sock });
    }

    fn fin(&mut self, stream_id: u32) {
        self.send(&Frame::Data {
            stream_id,
            data: Vec::new(),
            fin: true,
        });
    }

    fn data(&mut self, stream_id: u32, data: &[u8], fin: bool) {
        let Some((key, conn)) = self.conns.iter_mut().find(|(_, c)| c.data == stream_id) else {
            // The error stream (kubectl only FINs it), or a stream we do
            // not know: dropped, as spdystream drops them.
            return;
        };
        if !data.is_empty() && conn.sock.write_all(data).is_err() {
            // The pod closed: its reader ends the pair.
            let key = key.clone();
            self.sockets.shut(&key);
            return;
        }
        if fin {
            let _ = conn.sock.shutdown(Shutdown::Write);
        }
    }

    fn reset(&mut self, stream_id: u32) {
        if let Some(key) = self
            .conns
            .iter()
            .find(|(_, c)| c.data == stream_id || c.error == stream_id)
            .map(|(k, _)| k.clone())
        {
            self.sockets.shut(&key);
            return;
        }
        self.pending
            .retain(|_, p| p.error != Some(stream_id) && p.data != Some(stream_id));
    }

    /// Pairs whose other half never came: the kubelet's message, then FIN.
    fn expire_pairs(&mut self, now: Instant) {
        let late: Vec<String> = self
            .pending
            .iter()
            .filter(|(_, p)| now.duration_since(p.since) >= PAIR_TIMEOUT)
            .map(|(k, _)| k.clone())
            .collect();
        for key in late {
            let Some(p) = self.pending.remove(&key) else {
                continue;
            };
            if let Some(e) = p.error {
                let text = format!("(conn=sim, request={key}) timed out waiting for streams");
                self.send(&Frame::Data {
                    stream_id: e,
                    data: text.into_bytes(),
                    fin: true,
                });
            }
            if let Some(d) = p.data {
                self.fin(d);
            }
        }
    }
}

/// The port and whether this is the error stream, or why the kubelet
/// would reset the stream.
fn stream_headers(h: &Headers) -> Result<(u16, bool), String> {
    let port = h.get("port").ok_or("\"port\" header is required")?;
    let n: u16 = port
        .parse()
        .map_err(|e| format!("unable to parse {port:?} as a port: {e}"))?;
    if n == 0 {
        return Err(format!("port {port:?} must be > 0"));
    }
    match h.get("streamtype") {
        Some("error") => Ok((n, true)),
        Some("data") => Ok((n, false)),
        other => Err(format!(
            "invalid stream type {:?}",
            other.unwrap_or_default()
        )),
    }
}

/// A `sim-pf-pod` thread: the pod's bytes as DATA frames, then FIN on the
/// data and error streams (unless the session is ending).
fn read_pod(mut sock: TcpStream, out: &Outbox, closing: &AtomicBool, data: u32, error: u32) {
    let mut buf = vec![0u8; POD_READ];
    loop {
        let n = match sock.read(&mut buf) {
            Ok(0) | Err(_) => break,
            Ok(n) => n,
        };
        if closing.load(Ordering::SeqCst) {
            return;
        }
        if out.send(data_frame(data, &buf[..n], false)).is_err() {
            return;
        }
    }
    let _ = sock.shutdown(Shutdown::Both);
    if !closing.load(Ordering::SeqCst) {
        let _ = out.send(data_frame(data, &[], true));
        let _ = out.send(data_frame(error, &[], true));
    }
}

/// A DATA frame's bytes (no header block: no encoder state needed).
fn data_frame(stream_id: u32, data: &[u8], fin: bool) -> Message {
    let mut b = Vec::new();
    // At most POD_READ bytes and a stream id the session accepted.
    let _ = write_data(&mut b, stream_id, data, fin);
    Message::Binary(b.into())
}
