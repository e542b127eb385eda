//! One viewer's io socket: replay and live frames out, stdin and resize
//! in, on the connection's thread plus two; and the refusal of a socket
//! whose session or app is unknown.

use super::ring::{AppIo, Item};
use super::subscription::{close_frame, Subscription};
use super::wire::{encode_frame, gap_text, parse_client, ClientMsg, CLOSE_SLOW};
use crate::http::ws::{self, Outbox, WsConn, WsOptions};
use crossbeam_channel::{bounded, Receiver};
use std::sync::Arc;
use std::time::Duration;
use tungstenite::Message;

/// Messages queued towards one viewer's socket (behind its subscription).
const OUTBOX_FRAMES: usize = 64;
/// Client messages between a viewer's pump and its input thread: 16.
const INBOUND_CAPACITY: usize = 16;

/// Serves one viewer's io socket on the calling (connection) thread until
/// it ends: replay from `last_seq`, live frames, the close (4001 when it
/// falls behind, the `AppIo`'s end code when the session ends); its binary
/// frames go to the app's stdin, its resize frames to the terminal. A text
/// frame that is not a valid resize closes the socket with 1008 (Policy)
/// and the reason. The viewer going away unsubscribes it.
pub fn serve(io: Arc<AppIo>, last_seq: Option<u32>, conn: WsConn, ping_interval: Duration) {
    let (out, out_rx) = match ws::try_outbox(OUTBOX_FRAMES) {
        Ok(x) => x,
        Err(e) => {
            log::error!("io socket: creating the outbox: {e}");
            return;
        }
    };
    let mut sub = io.subscribe(last_seq);
    let cancel = sub.canceller();
    {
        let out = out.clone();
        sub.on_slow(move |frame| out.abort(frame));
    }
    let relay = {
        let out = out.clone();
        std::thread::Builder::new()
            .name("session-io-out".into())
            .spawn(move || relay(&mut sub, &out))
    };
    let relay = match relay {
        Ok(h) => h,
        Err(e) => {
            log::error!("io socket: spawning the output thread: {e}");
            cancel.cancel();
            return;
        }
    };
    let (in_tx, in_rx) = bounded::<Message>(INBOUND_CAPACITY);
    let input = {
        let io = io.clone();
        let out = out.clone();
        std::thread::Builder::new()
            .name("session-io-in".into())
            .spawn(move || viewer_input(&io, &in_rx, &out))
    };
    if let Err(e) = input {
        log::error!("io socket: spawning the input thread: {e}");
        out.abort(close_frame(1011, "internal error"));
    }
    drop(out);
    let opts = WsOptions {
        ping_interval: Some(ping_interval),
        idle_timeout: Some(ping_interval * 4),
        close_timeout: Duration::from_secs(5),
    };
    let end = ws::run(conn, out_rx, in_tx, opts);
    log::debug!("io socket ended: {end:?}");
    // The outbox's receiver is gone: the relay's sends fail and it ends.
    cancel.cancel();
    let _ = relay.join();
}

/// session-io-out: subscription items to the viewer's outbox (blocking:
/// the subscription's own queue absorbs the wait, and overflows into 4001).
fn relay(sub: &mut Subscription, out: &Outbox) {
    while let Some(item) = sub.recv() {
        let msg = match item {
            Item::Frame { seq, stream, data } => {
                Message::Binary(encode_frame(seq, stream, &data).into())
            }
            Item::Gap { from, to } => Message::Text(gap_text(from, to).into()),
            Item::Close { code, reason } => {
                if code != CLOSE_SLOW {
                    let _ = out.send(Message::Close(Some(close_frame(code, &reason))));
                }
                // Slow: the hook already aborted the socket with 4001.
                return;
            }
        };
        if out.send(msg).is_err() {
            return;
        }
    }
}

/// session-io-in: viewer frames to stdin and resizes.
fn viewer_input(io: &AppIo, inbound: &Receiver<Message>, out: &Outbox) {
    let mut failed = false;
    for m in inbound.iter() {
        // Room again in a full inbound channel: let the pump go on.
        out.wake();
        if failed {
            continue;
        }
        match parse_client(&m) {
            Ok(None) => {}
            Ok(Some(ClientMsg::Stdin(data))) => {
                io.stdin(&data);
            }
            Ok(Some(ClientMsg::Resize { cols, rows })) => {
                io.resize(cols, rows);
            }
            Err(reason) => {
                out.abort(close_frame(1008, &reason.to_string()));
                // Keep draining until the socket ends, so the pump never
                // holds a message for lack of room.
                failed = true;
            }
        }
    }
}

/// Upgraded, but refused: closes at once with `code` and `reason` (4004
/// for an unknown session or app), on the calling thread.
pub fn refuse(conn: WsConn, code: u16, reason: &str) {
    let (out, out_rx) = match ws::try_outbox(1) {
        Ok(x) => x,
        Err(e) => {
            log::error!("io socket: creating the outbox: {e}");
            return;
        }
    };
    let _ = out.try_send(Message::Close(Some(close_frame(code, reason))));
    let (in_tx, _in_rx) = bounded::<Message>(1);
    let opts = WsOptions {
        ping_interval: None,
        idle_timeout: None,
        close_timeout: Duration::from_secs(2),
    };
    let _ = ws::run(conn, out_rx, in_tx, opts);
    drop(out);
}

// ------------------------------------------------------------ persistence
