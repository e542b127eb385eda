//! One connection to a session app's io socket (`GET
//! /v1/sessions/{id}/io?app=NAME[&lastSeq=N]`, subprotocol
//! `kubegate.io.v1`, docs/api.md#sessions), shared by `kubegate attach`
//! and `kubegate dev`: the upgrade, the pump thread
//! (`http::ws::run_stream`, the only code that touches the socket), the
//! decoding of what arrives, and what a close means.
//!
//! ```text
//!  caller ──> outbox (bounded 16) ──> pump ──> inbound (bounded 16) ──> caller
//! ```
//!
//! Reconnecting is the caller's: after a 4001 it opens a new [`IoSocket`]
//! with the last seq it showed.

use super::net::Client;
use super::{local_io, CliError};
use crate::exit::codes;
use crate::http::endpoint::pct;
use crate::http::ws::{run_stream, try_outbox, Outbox, WsEnd, WsOptions};
use crate::session::io::wire::{decode_frame, CLOSE_ENDED, CLOSE_SLOW, CLOSE_UNKNOWN, SUBPROTOCOL};
use crossbeam_channel::{bounded, Receiver};
use serde_json::Value;
use std::time::Duration;
use tungstenite::Message;

/// Messages queued towards the daemon: 16.
const OUTBOX_CAPACITY: usize = 16;
/// Messages the pump may hold for the caller: 16.
pub const INBOUND_CAPACITY: usize = 16;
const PING_INTERVAL: Duration = Duration::from_secs(30);
const CLOSE_TIMEOUT: Duration = Duration::from_secs(5);
/// How long the pump gets to say how the socket ended.
const END_WAIT: Duration = Duration::from_secs(10);

/// An open io socket and its pump.
pub struct IoSocket {
    /// Stdin (binary) and resizes (text) for the app.
    pub outbox: Outbox,
    /// What the daemon sends; disconnected once the pump ended (then
    /// [`IoSocket::ended`] says why).
    pub inbound: Receiver<Message>,
    end: Receiver<WsEnd>,
}

/// What one message from the daemon is.
#[derive(Debug, PartialEq, Eq)]
pub enum Frame<'a> {
    /// Output: its seq, its stream (0 tty, 1 stdout, 2 stderr), its bytes.
    Output {
        seq: u32,
        stream: u8,
        payload: &'a [u8],
    },
    /// Frames `from..=to` were evicted from the daemon's ring before we
    /// asked: that output is lost.
    Gap { from: u32, to: u32 },
    /// Anything else (pings, unknown text): nothing to do.
    Other,
}

/// How a socket ended, when that is not an error.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Closed {
    /// 4001 `slow_subscriber`: reconnect with the last seq shown.
    Slow,
    /// 1000: the session ended.
    SessionEnded,
}

impl IoSocket {
    /// Opens the socket for `app` of `session`, replaying what came after
    /// `last_seq` (everything still buffered without it), and starts its
    /// pump on a thread named `thread`.
    pub fn open(
        client: &Client,
        session: &str,
        app: &str,
        last_seq: Option<u32>,
        thread: &str,
    ) -> Result<IoSocket, CliError> {
        let mut q = format!(
            "{}?app={}",
            client.path(&format!("/v1/sessions/{session}/io")),
            pct(app)
        );
        if let Some(n) = last_seq {
            q.push_str(&format!("&lastSeq={n}"));
        }
        let ws = client.open_ws(&q, SUBPROTOCOL)?;
        let (outbox, out_rx) =
            try_outbox(OUTBOX_CAPACITY).map_err(|e| local_io("creating the stream's waker", e))?;
        let (in_tx, inbound) = bounded::<Message>(INBOUND_CAPACITY);
        let (end_tx, end) = bounded::<WsEnd>(1);
        let opts = WsOptions {
            ping_interval: Some(PING_INTERVAL),
            idle_timeout: None,
            close_timeout: CLOSE_TIMEOUT,
        };
        std::thread::Builder::new()
            .name(thread.into())
            .spawn(move || {
                let end = run_stream(ws, out_rx, in_tx, opts);
                let _ = end_tx.send(end);
            })
            .map_err(|e| local_io("spawning the stream thread", e))?;
        Ok(IoSocket {
            outbox,
            inbound,
            end,
        })
    }

    /// Call after taking a message from `inbound`: when the queue was full,
    /// the pump stopped reading the socket and waits to be woken.
    pub fn took_one(&self) {
        if self.inbound.len() + 1 >= INBOUND_CAPACITY {
            self.outbox.wake();
        }
    }

    /// Sends a Close and waits (bounded) for the pump to end.
    pub fn close_and_wait(self) {
        let _ = self
            .outbox
            .send_timeout(Message::Close(None), Duration::from_secs(1));
        drop(self.outbox);
        let _ = self.end.recv_timeout(END_WAIT);
    }

    /// Why the socket ended, once `inbound` is disconnected: `Ok` for a
    /// close the caller acts on, else the error to report (4004 is the
    /// daemon's `NOT_FOUND` with its reason).
    pub fn ended(&self, client: &Client) -> Result<Closed, CliError> {
        let end = self.end.recv_timeout(END_WAIT).ok();
        let disconnected = |m: String| Err(CliError::new(codes::DISCONNECTED, m));
        match end {
            Some(WsEnd::PeerClosed(Some(f))) => match u16::from(f.code) {
                CLOSE_SLOW => Ok(Closed::Slow),
                CLOSE_ENDED => Ok(Closed::SessionEnded),
                CLOSE_UNKNOWN => Err(CliError::new("NOT_FOUND", f.reason.to_string())),
                code => disconnected(format!(
                    "the daemon at {} closed the stream with code {code}{}",
                    client.server(),
                    if f.reason.is_empty() {
                        String::new()
                    } else {
                        format!(": {}", f.reason)
                    }
                )),
            },
            Some(WsEnd::PeerClosed(None)) => disconnected(format!(
                "the daemon at {} closed the stream without a reason",
                client.server()
            )),
            Some(WsEnd::Error(e)) => {
                disconnected(format!("the connection to {} broke: {e}", client.server()))
            }
            Some(WsEnd::Closed) | Some(WsEnd::Idle) | None => {
                disconnected(format!("the stream from {} ended", client.server()))
            }
        }
    }
}

/// Decodes one message from the daemon.
pub fn frame(m: &Message) -> Result<Frame<'_>, CliError> {
    match m {
        Message::Binary(b) => match decode_frame(b) {
            Some((seq, stream, payload)) => Ok(Frame::Output {
                seq,
                stream,
                payload,
            }),
            None => Err(CliError::new(
                codes::PROTOCOL,
                "an io frame shorter than 5 bytes",
            )),
        },
        Message::Text(t) => Ok(match gap_of(t.as_str()) {
            Some((from, to)) => Frame::Gap { from, to },
            None => Frame::Other,
        }),
        _ => Ok(Frame::Other),
    }
}

/// A resize message for the app's terminal.
pub fn resize(cols: u16, rows: u16) -> Message {
    Message::Text(
        serde_json::json!({"type": "resize", "cols": cols, "rows": rows})
            .to_string()
            .into(),
    )
}

/// `{"type":"gap","from":A,"to":B}`.
fn gap_of(text: &str) -> Option<(u32, u32)> {
    let v: Value = serde_json::from_str(text).ok()?;
    if v["type"] != "gap" {
        return None;
    }
    let n = |k: &str| v[k].as_u64().and_then(|n| u32::try_from(n).ok());
    Some((n("from")?, n("to")?))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn frames_decode() {
        assert_eq!(gap_of(r#"{"type":"gap","from":3,"to":9}"#), Some((3, 9)));
        assert_eq!(gap_of(r#"{"type":"other"}"#), None);
        assert_eq!(gap_of("nope"), None);
        let m = Message::Text(r#"{"type":"gap","from":3,"to":9}"#.into());
        assert_eq!(frame(&m).unwrap(), Frame::Gap { from: 3, to: 9 });
        let m = Message::Binary(vec![0, 0, 0, 7, 1, b'h', b'i'].into());
        assert_eq!(
            frame(&m).unwrap(),
            Frame::Output {
                seq: 7,
                stream: 1,
                payload: b"hi"
            }
        );
        assert!(frame(&Message::Binary(vec![0, 1].into())).is_err());
        assert_eq!(frame(&Message::Ping(vec![].into())).unwrap(), Frame::Other);
    }
}
