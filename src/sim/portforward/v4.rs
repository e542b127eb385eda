//! The kubelet's v4 WebSocket port-forward (docs/portforward-wire.md §7):
//! ports from `?ports=` (repeated or comma-separated), one pod connection
//! per port for the WebSocket's life; port i's data on channel 2i, its
//! error text on 2i+1; each channel's first message is the port as a
//! little-endian u16 (`[ch, lo, hi]`, a message of its own, as the Python
//! client requires). No per-channel close: a port whose pod connection
//! ended just goes quiet; the WebSocket closes (1000) once every port's
//! connection has ended, or when the pod is gone.
//!
//! Threads: the connection's thread queues the prefixes, then pumps the
//! socket; `sim-pf-v4` (1) dials the ports (a refused one's error text),
//! then writes the client's data to the pod sockets (blocking: a slow pod stops
//! it, then the pump stops reading the client) and watches the pod;
//! `sim-pf-v4-pod` (1 per port) reads a pod socket into the outbox
//! (waiting when it is full).

use super::pod::{self, Sockets};
use super::PodRef;
use crate::http::ws::{self, Outbox, WsConn, WsOptions};
use crate::http::{Reply, Request, Upgrade};
use base64::Engine;
use crossbeam_channel::{bounded, Receiver, RecvTimeoutError};
use std::io::{Read, Write};
use std::net::{Shutdown, TcpStream};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Instant;
use tungstenite::protocol::frame::coding::CloseCode;
use tungstenite::protocol::CloseFrame;
use tungstenite::Message;

/// Ports one v4 WebSocket may forward (2 channels each, a channel is a byte).
pub const MAX_PORTS: usize = 64;
/// Messages queued from the pod readers to the pump.
const QUEUE: usize = 64;
/// Messages queued from the pump to `sim-pf-v4`: with messages of at most
/// 2 MiB, a client can make the sim hold 16 MiB per WebSocket at most.
const INBOUND: usize = 8;
/// Bytes read from a pod per message.
const POD_READ: usize = 32 * 1024;

/// The ports asked for, as the kubelet reads them (`port` there, `ports`
/// at the API server; both accepted), or its error text.
pub fn ports(req: &Request) -> Result<Vec<u16>, String> {
    let values: Vec<&str> = req
        .query
        .iter()
        .filter(|(k, _)| k == "ports" || k == "port")
        .map(|(_, v)| v.as_str())
        .collect();
    if values.is_empty() {
        return Err("query parameter \"port\" is required".into());
    }
    let mut out = Vec::new();
    for v in values {
        for p in v.split(',') {
            let p = p.trim();
            if p.is_empty() {
                return Err("query parameter \"port\" cannot be empty".into());
            }
            let n: u16 = p
                .parse()
                .map_err(|e| format!("unable to parse {p:?} as a port: {e}"))?;
            if n == 0 {
                return Err(format!("port {p:?} must be > 0"));
            }
            out.push(n);
        }
    }
    if out.len() > MAX_PORTS {
        return Err(format!("at most {MAX_PORTS} ports per request"));
    }
    Ok(out)
}

/// The upgrade: `protocol` is the subprotocol chosen (none when the
/// client offered none).
pub fn serve(
    pod: PodRef,
    ports: Vec<u16>,
    base64: bool,
    protocol: Option<String>,
    max_message: usize,
) -> Reply {
    Reply::Upgrade(Upgrade {
        protocol,
        headers: Vec::new(),
        max_message_bytes: max_message,
        on_open: Box::new(move |conn: WsConn| {
            let Ok((out, out_rx)) = ws::try_outbox(QUEUE.max(2 * ports.len())) else {
                return;
            };
            // The prefixes first, before any pod byte can be queued (the
            // outbox has room for them: this never waits).
            for (i, port) in ports.iter().enumerate() {
                let ch = (2 * i) as u8;
                let _ = out.send(message(base64, ch, &port.to_le_bytes()));
                let _ = out.send(message(base64, ch + 1, &port.to_le_bytes()));
            }
            let (in_tx, in_rx) = bounded(INBOUND);
            let sockets = Sockets::default();
            // Dialling and error texts happen on `sim-pf-v4`, while the
            // pump already drains the outbox (a pod greeting first cannot
            // fill it with nobody draining).
            let thread = {
                let sockets = sockets.clone();
                std::thread::Builder::new()
                    .name("sim-pf-v4".into())
                    .spawn(move || {
                        let writers = open(&pod, &ports, base64, &out, &sockets);
                        inbound(&pod, writers, base64, &in_rx, &out, &sockets);
                    })
            };
            let Ok(thread) = thread else {
                return;
            };
            let _ = ws::run(conn, out_rx, in_tx, WsOptions::default());
            sockets.shut_all();
            let _ = thread.join();
        }),
    })
}

fn message(base64: bool, channel: u8, data: &[u8]) -> Message {
    if base64 {
        let mut t = String::with_capacity(1 + data.len() * 4 / 3 + 4);
        t.push(char::from(b'0' + channel));
        base64::engine::general_purpose::STANDARD.encode_string(data, &mut t);
        Message::Text(t.into())
    } else {
        let mut b = Vec::with_capacity(1 + data.len());
        b.push(channel);
        b.extend_from_slice(data);
        Message::Binary(b.into())
    }
}

fn close_normal() -> Message {
    Message::Close(Some(CloseFrame {
        code: CloseCode::Normal,
        reason: Default::default(),
    }))
}

/// Dials every port and starts its reader, or sends the error text;
/// returns the write halves by port index (`None`: that port failed).
fn open(
    pod: &PodRef,
    ports: &[u16],
    base64: bool,
    out: &Outbox,
    sockets: &Sockets,
) -> Vec<Option<TcpStream>> {
    let live = Arc::new(AtomicUsize::new(ports.len()));
    let mut writers = Vec::with_capacity(ports.len());
    for (i, &port) in ports.iter().enumerate() {
        let ch = (2 * i) as u8;
        let key = i.to_string();
        let reader = pod::dial(pod, port).and_then(|s| {
            let r = s
                .try_clone()
                .map_err(|e| pod::error_text(pod, port, &e.to_string()))?;
            Ok((s, r))
        });
        let spawned = reader.and_then(|(s, r)| {
            sockets.add(&key, &s);
            let out = out.clone();
            let live = live.clone();
            std::thread::Builder::new()
                .name("sim-pf-v4-pod".into())
                .spawn(move || {
                    read_pod(r, &out, base64, ch);
                    port_done(&live, &out);
                })
                .map(|_| s)
                .map_err(|e| pod::error_text(pod, port, &e.to_string()))
        });
        match spawned {
            Ok(s) => writers.push(Some(s)),
            Err(text) => {
                let _ = out.send(message(base64, ch + 1, text.as_bytes()));
                port_done(&live, out);
                writers.push(None);
            }
        }
    }
    writers
}

/// One port's forward ended; the last one closes the WebSocket.
fn port_done(live: &AtomicUsize, out: &Outbox) {
    if live.fetch_sub(1, Ordering::SeqCst) == 1 {
        let _ = out.send(close_normal());
    }
}

fn read_pod(mut sock: TcpStream, out: &Outbox, base64: bool, ch: u8) {
    let mut buf = vec![0u8; POD_READ];
    loop {
        match sock.read(&mut buf) {
            Ok(0) | Err(_) => break,
            Ok(n) => {
                if out.send(message(base64, ch, &buf[..n])).is_err() {
                    break;
                }
            }
        }
    }
    let _ = sock.shutdown(Shutdown::Both);
}

/// `sim-pf-v4`: the client's messages to the pod sockets.
fn inbound(
    pod: &PodRef,
    mut writers: Vec<Option<TcpStream>>,
    base64: bool,
    rx: &Receiver<Message>,
    out: &Outbox,
    sockets: &Sockets,
) {
    let mut next_check = Instant::now() + super::POD_CHECK;
    loop {
        let wait = next_check.saturating_duration_since(Instant::now());
        match rx.recv_timeout(wait) {
            Ok(m) => {
                out.wake();
                let payload: Vec<u8> = match m {
                    Message::Binary(b) if !base64 => b.to_vec(),
                    Message::Text(t) if base64 => match decode_base64(t.as_str()) {
                        Some(b) => b,
                        None => {
                            out.abort(CloseFrame {
                                code: CloseCode::Protocol,
                                reason: "bad base64 channel message".into(),
                            });
                            break;
                        }
                    },
                    Message::Close(_) => break,
                    // The other kind of message for this protocol: ignored,
                    // as the kubelet's reader ignores it.
                    _ => continue,
                };
                let Some((&ch, data)) = payload.split_first() else {
                    continue;
                };
                // Even channels carry data; odd (error) ones are write-only.
                let i = usize::from(ch / 2);
                if ch % 2 == 1 || data.is_empty() {
                    continue;
                }
                if let Some(Some(w)) = writers.get_mut(i) {
                    if w.write_all(data).is_err() {
                        sockets.shut(&i.to_string());
                    }
                }
            }
            Err(RecvTimeoutError::Timeout) => {}
            Err(RecvTimeoutError::Disconnected) => break,
        }
        let now = Instant::now();
        if now >= next_check {
            if pod.gone() {
                sockets.shut_all();
                let _ = out.send(close_normal());
                break;
            }
            next_check = now + super::POD_CHECK;
        }
    }
    sockets.shut_all();
}

/// `'0'+channel` then base64: the channel byte and the payload.
fn decode_base64(t: &str) -> Option<Vec<u8>> {
    let (first, rest) = t.as_bytes().split_first()?;
    let ch = first.checked_sub(b'0')?;
    let mut out = vec![ch];
    base64::engine::general_purpose::STANDARD
        .decode_vec(rest, &mut out)
        .ok()?;
    Some(out)
}
