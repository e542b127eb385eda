//! A session app's terminal-like IO (sessions.md "While running": Output,
//! Input; contract.md's `GET /v1/sessions/{id}/io` socket):
//!
//! ```text
//!  k8s attach ─ kube-remote-io (demux in place) ─────> push ──┐
//!  machine Command::Output ──────────────────────────> push ──┤
//!                                                             v
//!                     AppIo: replay ring (bytes-bounded) + subscribers
//!                                 │ try_send, never waits (queue: 256 frames;
//!                                 │ full = slow: closed with 4001)
//!                                 v
//!   per viewer (`serve`): session-io-out: Subscription -> Outbox -> door-conn (ws::run)
//!                         session-io-in:  client frames -> AppIo::stdin / resize
//!                                                   -> the current attach's StdinWriter / Controller
//! ```
//!
//! - [`AppIo`]: one per session app, for the session's whole life (it
//!   survives pod recreates, so seq numbers continue). Output frames get seq
//!   numbers from 1; the ring keeps the newest frames within `io_ring_bytes`
//!   (grown as frames come: an idle app holds no buffer). `push` fans a
//!   frame out to every subscriber WITHOUT waiting: a subscriber whose
//!   queue is full is closed with 4001 `slow_subscriber` (it reconnects with
//!   its last seq), so a slow viewer never slows the app or other viewers.
//!   `subscribe` replays what is buffered after a seq (with one gap notice
//!   for evicted frames) and registers the live queue under the same lock:
//!   no frame is lost or duplicated between replay and live.
//! - Input: the current attach's stdin writer and resize controller live in
//!   the `AppIo` ([`AppIo::set_input`]); viewers write through
//!   [`AppIo::stdin`] (blocking while the attach's queue is full:
//!   backpressure to that viewer's socket only) and [`AppIo::resize`]
//!   (tty apps only; the last size is kept for the next attach).
//! - [`attach`]: a Kubernetes attach into an `AppIo` on the stream's one
//!   thread (`kube-remote-io`, which demultiplexes and pushes in place:
//!   `kube::remote::attach_into`), reporting an end of its own through a
//!   callback.
//! - [`serve`]: one viewer's WebSocket (`kubegate.io.v1`), on the calling
//!   connection thread plus two.
//!
//! Design and choices: docs/sessions.md, "IO: rings, attach, the io socket".

use crate::http::ws::{self, Outbox, WsConn, WsOptions};
use crate::kube::connection::Connection;
use crate::kube::remote::{
    self, Controller, ExecOptions, Output, SinkProcess, StdinWriter, TermSize,
};
use crate::session::machine::OutStream;
use crossbeam_channel::{bounded, Receiver, RecvTimeoutError, Sender, TrySendError};
use parking_lot::Mutex;
use serde_json::Value;
use std::collections::VecDeque;
use std::sync::{Arc, Weak};
use std::time::{Duration, Instant};
use tungstenite::protocol::frame::coding::CloseCode;
use tungstenite::protocol::CloseFrame;
use tungstenite::{Bytes, Message};

/// The io socket's subprotocol.
pub const SUBPROTOCOL: &str = "kubegate.io.v1";
/// Close code for a subscriber that fell behind its queue.
pub const CLOSE_SLOW: u16 = 4001;
/// Close reason sent with [`CLOSE_SLOW`].
pub const SLOW_REASON: &str = "slow_subscriber";
/// Close code for an unknown session or app (the route's, see [`refuse`]).
pub const CLOSE_UNKNOWN: u16 = 4004;
/// Close code when the session ended.
pub const CLOSE_ENDED: u16 = 1000;
/// Close code when the daemon stops (WebSocket "going away"): the
/// session lives on; reconnect with the last seq once it is back.
pub const CLOSE_GOING_AWAY: u16 = 1001;
/// The stream byte of a gap notice in the ring ([`AppIo::push_gap`]):
/// a seq with no data, sent to viewers as `{"type":"gap"}`.
pub const GAP_STREAM: u8 = 0xFF;
/// Live frames queued per subscriber before it counts as slow.
pub const DEFAULT_QUEUE_FRAMES: usize = 256;
/// What a frame costs in the ring besides its payload: its bookkeeping
/// (seq, stream, the shared buffer's handle and allocation). Counting it
/// keeps a flood of one-byte frames (a tty echoing keystrokes) from holding
/// many times `io_ring_bytes` of memory.
pub const FRAME_COST: usize = 64;
/// Messages queued towards one viewer's socket (behind its subscription).
const OUTBOX_FRAMES: usize = 64;
/// Client messages between a viewer's pump and its input thread.
const INBOUND_CAPACITY: usize = 16;

/// The wire number of a stream: 0 tty, 1 stdout, 2 stderr.
pub fn stream_byte(s: OutStream) -> u8 {
    match s {
        OutStream::Tty => 0,
        OutStream::Stdout => 1,
        OutStream::Stderr => 2,
    }
}

/// A server binary frame: `[seq: u32 BE][stream: u8][payload]`.
pub fn encode_frame(seq: u32, stream: u8, payload: &[u8]) -> Vec<u8> {
    let mut b = Vec::with_capacity(5 + payload.len());
    b.extend_from_slice(&seq.to_be_bytes());
    b.push(stream);
    b.extend_from_slice(payload);
    b
}

/// The inverse of [`encode_frame`]: `(seq, stream, payload)`, or None for
/// fewer than 5 bytes.
pub fn decode_frame(b: &[u8]) -> Option<(u32, u8, &[u8])> {
    let seq = u32::from_be_bytes(b.get(..4)?.try_into().ok()?);
    let stream = *b.get(4)?;
    Some((seq, stream, &b[5..]))
}

/// The gap notice's text: `{"type":"gap","from":A,"to":B}`.
pub fn gap_text(from: u32, to: u32) -> String {
    serde_json::json!({"type": "gap", "from": from, "to": to}).to_string()
}

/// What a re-adoption recovered of the output an app wrote while the
/// daemon was down ([`AppIo::release`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Recovered {
    /// Every chunk written since the last output the ring holds.
    Complete(Vec<Bytes>),
    /// The oldest chunks only (the log was longer than the daemon reads):
    /// a gap notice follows them.
    Truncated(Vec<Bytes>),
    /// The log could not be read: a gap notice stands for it.
    Unavailable,
}

/// A message from a viewer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ClientMsg {
    /// Binary frame: bytes for the app's stdin.
    Stdin(Bytes),
    /// `{"type":"resize","cols":C,"rows":R}`, both 1..=65535.
    Resize { cols: u16, rows: u16 },
}

/// Reads a viewer's message. `Ok(None)` for messages that carry nothing
/// (pings, an empty binary frame); `Err` with a reason for a text frame
/// that is not a valid resize (the socket is then closed with 1008).
pub fn parse_client(m: &Message) -> Result<Option<ClientMsg>, String> {
    match m {
        Message::Binary(b) if b.is_empty() => Ok(None),
        Message::Binary(b) => Ok(Some(ClientMsg::Stdin(b.clone()))),
        Message::Text(t) => {
            let v: Value =
                serde_json::from_str(t.as_str()).map_err(|_| "a text frame must be JSON")?;
            match v.get("type").and_then(Value::as_str) {
                Some("resize") => {
                    let dim = |k: &str| {
                        v.get(k)
                            .and_then(Value::as_u64)
                            .and_then(|n| u16::try_from(n).ok())
                            .filter(|n| *n > 0)
                            .ok_or_else(|| {
                                "terminal dimensions must be integers between 1 and 65535"
                                    .to_string()
                            })
                    };
                    Ok(Some(ClientMsg::Resize {
                        cols: dim("cols")?,
                        rows: dim("rows")?,
                    }))
                }
                Some(other) => Err(format!("unknown frame type {other:?}")),
                None => Err("a text frame needs a string \"type\"".into()),
            }
        }
        _ => Ok(None),
    }
}

/// What a subscription yields, in order.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Item {
    Frame {
        seq: u32,
        stream: u8,
        data: Bytes,
    },
    /// Frames `from..=to` were asked for but are no longer buffered.
    Gap {
        from: u32,
        to: u32,
    },
    /// The last item: the socket closes with this code and reason.
    Close {
        code: u16,
        reason: String,
    },
}

/// The current attach's input side (see [`AppIo::set_input`]).
pub struct Input {
    pub stdin: StdinWriter,
    pub controller: Controller,
    /// Resizes reach only a tty app.
    pub tty: bool,
}

struct Stored {
    seq: u32,
    stream: u8,
    data: Bytes,
}

type SlowHook = Box<dyn FnOnce(CloseFrame) + Send>;

/// What a subscriber and the `AppIo` share.
#[derive(Default)]
struct SubShared {
    /// Set before the live sender is dropped: how the subscription ends.
    close: Mutex<Option<(u16, String)>>,
    /// Called (outside the AppIo's lock) when the subscriber is found slow.
    on_slow: Mutex<Option<SlowHook>>,
}

struct Sub {
    id: u64,
    tx: Sender<Item>,
    shared: Arc<SubShared>,
}

struct State {
    /// Seq of the next frame (from 1).
    next_seq: u32,
    ring: VecDeque<Stored>,
    /// Sum of payload + FRAME_COST over the ring.
    bytes: usize,
    subs: Vec<Sub>,
    next_sub: u64,
    ended: Option<(u16, String)>,
    /// When the newest output frame was pushed (ns since the Unix epoch;
    /// 0: never): where a re-adoption's log recovery starts.
    last_output_ns: u64,
    /// Output held back while a re-adoption recovers what the app wrote
    /// while the daemon was down ([`AppIo::hold`]). Boxed: an app that is
    /// not being re-adopted pays one pointer.
    held: Option<Box<Held>>,
}

/// Output that came while held: stream byte and data, oldest first,
/// bounded like the ring (`lost` once the oldest had to go).
#[derive(Default)]
struct Held {
    frames: VecDeque<(u8, Bytes)>,
    bytes: usize,
    lost: bool,
}

impl Held {
    /// The held bytes, every stream, in order.
    fn head(&self) -> Vec<u8> {
        self.frames
            .iter()
            .flat_map(|(_, d)| d.iter().copied())
            .collect()
    }
}

struct CurrentInput {
    id: u64,
    stdin: Arc<Mutex<StdinWriter>>,
    controller: Controller,
    tty: bool,
}

#[derive(Default)]
struct InputSlot {
    current: Option<CurrentInput>,
    next_id: u64,
    /// The last size a viewer asked for: the next tty attach starts with it.
    size: Option<TermSize>,
}

/// One session app's output ring, subscribers and input routing.
pub struct AppIo {
    ring_bytes: usize,
    queue_frames: usize,
    state: Mutex<State>,
    input: Mutex<InputSlot>,
}

impl AppIo {
    /// An app's IO keeping about `ring_bytes` of output (payload plus
    /// [`FRAME_COST`] per frame) for replay. Nothing is allocated until
    /// output comes.
    pub fn new(ring_bytes: usize) -> AppIo {
        AppIo {
            ring_bytes,
            queue_frames: DEFAULT_QUEUE_FRAMES,
            state: Mutex::new(State {
                next_seq: 1,
                ring: VecDeque::new(),
                bytes: 0,
                subs: Vec::new(),
                next_sub: 0,
                ended: None,
                last_output_ns: 0,
                held: None,
            }),
            input: Mutex::new(InputSlot::default()),
        }
    }

    /// Live frames a subscriber may have queued before it is slow
    /// (default [`DEFAULT_QUEUE_FRAMES`]).
    pub fn with_queue_frames(mut self, n: usize) -> AppIo {
        self.queue_frames = n.max(1);
        self
    }

    /// Appends a frame: gives it the next seq, evicts the oldest frames
    /// while the ring is over its bound, and hands it to every subscriber
    /// without waiting. Returns its seq; None for empty data, after
    /// [`AppIo::end`], while output is held ([`AppIo::hold`]: it gets its
    /// seq at the release), or once u32 seqs are exhausted (4 billion
    /// frames).
    pub fn push(&self, stream: OutStream, data: impl Into<Bytes>) -> Option<u32> {
        let data: Bytes = data.into();
        if data.is_empty() {
            return None;
        }
        let stream = stream_byte(stream);
        let mut slow: Vec<Arc<SubShared>> = Vec::new();
        let seq = {
            let mut st = self.state.lock();
            if st.ended.is_some() {
                return None;
            }
            if let Some(h) = st.held.as_mut() {
                h.bytes += data.len() + FRAME_COST;
                h.frames.push_back((stream, data));
                while h.bytes > self.ring_bytes {
                    match h.frames.pop_front() {
                        Some((_, d)) => {
                            h.bytes -= d.len() + FRAME_COST;
                            h.lost = true;
                        }
                        None => break,
                    }
                }
                return None;
            }
            self.append(&mut st, stream, data, &mut slow)
        };
        run_slow_hooks(slow);
        seq
    }

    /// Gives `data` the next seq in the ring and fans it out (under the
    /// state lock; slow subscribers are collected for their hooks). A
    /// [`GAP_STREAM`] frame is a gap notice: it holds a seq and no data,
    /// and subscribers see it as [`Item::Gap`].
    fn append(
        &self,
        st: &mut State,
        stream: u8,
        data: Bytes,
        slow: &mut Vec<Arc<SubShared>>,
    ) -> Option<u32> {
        if st.next_seq == u32::MAX {
            return None;
        }
        let seq = st.next_seq;
        st.next_seq += 1;
        if stream != GAP_STREAM {
            st.last_output_ns = now_ns();
        }
        st.bytes += data.len() + FRAME_COST;
        st.ring.push_back(Stored {
            seq,
            stream,
            data: data.clone(),
        });
        while st.bytes > self.ring_bytes {
            match st.ring.pop_front() {
                Some(f) => st.bytes -= f.data.len() + FRAME_COST,
                None => break,
            }
        }
        st.subs.retain(|s| {
            let item = if stream == GAP_STREAM {
                Item::Gap { from: seq, to: seq }
            } else {
                Item::Frame {
                    seq,
                    stream,
                    data: data.clone(),
                }
            };
            match s.tx.try_send(item) {
                Ok(()) => true,
                Err(TrySendError::Full(_)) => {
                    *s.shared.close.lock() = Some((CLOSE_SLOW, SLOW_REASON.into()));
                    slow.push(s.shared.clone());
                    false
                }
                // The subscription is gone without unsubscribing.
                Err(TrySendError::Disconnected(_)) => false,
            }
        });
        Some(seq)
    }

    /// Announces missing output: one seq that holds no data, which
    /// viewers get as a gap notice `{from: seq, to: seq}` (live, and in
    /// every replay that covers it). Used when output the app wrote while
    /// the daemon was down could not be recovered.
    pub fn push_gap(&self) -> Option<u32> {
        let mut slow = Vec::new();
        let seq = {
            let mut st = self.state.lock();
            if st.ended.is_some() {
                return None;
            }
            self.append(&mut st, GAP_STREAM, Bytes::new(), &mut slow)
        };
        run_slow_hooks(slow);
        seq
    }

    /// From now on, output is held back (bounded like the ring: the
    /// oldest held frames go first, and the release announces a gap for
    /// them) until [`AppIo::release`]. A re-adoption holds an app's output
    /// while it recovers, from the container log, what the app wrote while
    /// the daemon was down, so the recovered bytes get their seqs first.
    pub fn hold(&self) {
        let mut st = self.state.lock();
        if st.held.is_none() {
            st.held = Some(Box::default());
        }
    }

    /// Whether output is held ([`AppIo::hold`]).
    pub fn is_holding(&self) -> bool {
        self.state.lock().held.is_some()
    }

    /// Ends a hold: appends what was recovered of the downtime's output
    /// (tagged `stream`; without the trailing lines that the held output
    /// starts with: the attach was already streaming when the log was
    /// read, see [`held_overlap`]) or a gap notice where it could not be,
    /// then a gap notice if held frames had to be dropped, then the held
    /// frames. Atomic with `push`; nothing when output is not held.
    pub fn release(&self, recovered: Recovered, stream: OutStream) {
        let mut slow = Vec::new();
        {
            let mut st = self.state.lock();
            // Not holding (released already, e.g. by a stop): nothing to do.
            let Some(held) = st.held.take() else {
                return;
            };
            if st.ended.is_some() {
                return;
            }
            let s = stream_byte(stream);
            match recovered {
                Recovered::Complete(mut lines) => {
                    let dup = held_overlap(&lines, &held.head());
                    lines.truncate(lines.len() - dup);
                    for r in lines.into_iter().filter(|r| !r.is_empty()) {
                        self.append(&mut st, s, r, &mut slow);
                    }
                }
                Recovered::Truncated(lines) => {
                    for r in lines.into_iter().filter(|r| !r.is_empty()) {
                        self.append(&mut st, s, r, &mut slow);
                    }
                    self.append(&mut st, GAP_STREAM, Bytes::new(), &mut slow);
                }
                Recovered::Unavailable => {
                    self.append(&mut st, GAP_STREAM, Bytes::new(), &mut slow);
                }
            }
            if held.lost {
                self.append(&mut st, GAP_STREAM, Bytes::new(), &mut slow);
            }
            for (s, d) in held.frames {
                self.append(&mut st, s, d, &mut slow);
            }
        }
        run_slow_hooks(slow);
    }

    /// How many trailing `recovered` chunks the held output already starts
    /// with ([`held_overlap`]; 0 when not holding): a re-adoption waits
    /// (briefly) for the attach to deliver the lines the log stamped after
    /// the attach began, so they are not recovered twice.
    pub fn held_covers(&self, recovered: &[Bytes]) -> usize {
        let st = self.state.lock();
        st.held
            .as_ref()
            .map_or(0, |h| held_overlap(recovered, &h.head()))
    }

    /// When the newest output was pushed, in ns since the Unix epoch (0:
    /// never).
    pub fn last_output_ns(&self) -> u64 {
        self.state.lock().last_output_ns
    }

    /// An app's IO continuing a persisted ring ([`decode_ring`]): the same
    /// seqs, frames and time of the last output, so a viewer reconnecting
    /// with the `lastSeq` it saw before a daemon restart misses nothing.
    /// Frames that do not end contiguously at `next_seq - 1` (a damaged
    /// file) are dropped (a replay then announces them as a gap), and the
    /// ring's bound applies.
    pub fn restore(ring_bytes: usize, img: RingImage) -> AppIo {
        let io = AppIo::new(ring_bytes);
        {
            let mut st = io.state.lock();
            st.next_seq = img.next_seq.max(1);
            st.last_output_ns = img.last_output_ns;
            // The contiguous run that ends at next_seq - 1.
            let mut keep = 0;
            let mut want = st.next_seq;
            for f in img.frames.iter().rev() {
                if f.0 + 1 != want {
                    break;
                }
                want = f.0;
                keep += 1;
            }
            let skip = img.frames.len() - keep;
            for (seq, stream, data) in img.frames.into_iter().skip(skip) {
                st.bytes += data.len() + FRAME_COST;
                st.ring.push_back(Stored { seq, stream, data });
            }
            while st.bytes > ring_bytes {
                match st.ring.pop_front() {
                    Some(f) => st.bytes -= f.data.len() + FRAME_COST,
                    None => break,
                }
            }
        }
        io
    }

    /// Subscribes from `last_seq`: the frames still buffered with a greater
    /// seq, preceded by one [`Item::Gap`] when some of the asked-for frames
    /// were evicted, then live frames. Without `last_seq` (or with one
    /// ahead of the newest frame: the counter restarted with the daemon)
    /// it replays everything buffered, with a gap from 1 when older frames
    /// were evicted. After [`AppIo::end`]: the replay, then the close.
    pub fn subscribe(self: &Arc<Self>, last_seq: Option<u32>) -> Subscription {
        let (tx, rx) = bounded(self.queue_frames);
        let shared = Arc::new(SubShared::default());
        let mut st = self.state.lock();
        let newest = st.next_seq - 1;
        let after = match last_seq {
            Some(n) if n <= newest => n,
            _ => 0,
        };
        let first_buffered = st.ring.front().map_or(st.next_seq, |f| f.seq);
        let mut pending = VecDeque::new();
        if after + 1 < first_buffered {
            pending.push_back(Item::Gap {
                from: after + 1,
                to: first_buffered - 1,
            });
        }
        // Seqs in the ring are contiguous: skip by position. Gap notices
        // in the ring join an adjacent gap.
        let skip = (after + 1).saturating_sub(first_buffered) as usize;
        for f in st.ring.iter().skip(skip) {
            if f.stream != GAP_STREAM {
                pending.push_back(Item::Frame {
                    seq: f.seq,
                    stream: f.stream,
                    data: f.data.clone(),
                });
                continue;
            }
            match pending.back_mut() {
                Some(Item::Gap { to, .. }) if *to + 1 == f.seq => *to = f.seq,
                _ => pending.push_back(Item::Gap {
                    from: f.seq,
                    to: f.seq,
                }),
            }
        }
        let id = st.next_sub;
        st.next_sub += 1;
        match &st.ended {
            Some((code, reason)) => pending.push_back(Item::Close {
                code: *code,
                reason: reason.clone(),
            }),
            None => st.subs.push(Sub {
                id,
                tx,
                shared: shared.clone(),
            }),
        }
        drop(st);
        Subscription {
            io: Arc::downgrade(self),
            id,
            pending,
            rx,
            shared,
            done: false,
        }
    }

    /// Live subscribers.
    pub fn subscribers(&self) -> usize {
        self.state.lock().subs.len()
    }

    /// Seq of the newest frame (0 before any).
    pub fn last_seq(&self) -> u32 {
        self.state.lock().next_seq - 1
    }

    /// Frames and accounted bytes (payload + [`FRAME_COST`] each) in the
    /// ring, and the ring's allocated frame slots.
    pub fn ring_usage(&self) -> (usize, usize, usize) {
        let st = self.state.lock();
        (st.ring.len(), st.bytes, st.ring.capacity())
    }

    /// The seq the next frame gets, when the last output came, and every
    /// frame the ring holds (seq, stream byte, data; gap notices with
    /// [`GAP_STREAM`]), oldest first: what a daemon stop persists. Output
    /// still held ([`AppIo::hold`]) is not in it.
    pub fn ring_image(&self) -> RingImage {
        let st = self.state.lock();
        RingImage {
            next_seq: st.next_seq,
            last_output_ns: st.last_output_ns,
            frames: st
                .ring
                .iter()
                .map(|f| (f.seq, f.stream, f.data.clone()))
                .collect(),
        }
    }

    /// The session ended: every subscriber gets its queued frames, then a
    /// close with `code`/`reason` (1000 when the session ended); later
    /// pushes are ignored and later subscribers get the replay and the
    /// close.
    pub fn end(&self, code: u16, reason: &str) {
        let mut st = self.state.lock();
        if st.ended.is_some() {
            return;
        }
        st.ended = Some((code, reason.to_string()));
        for s in st.subs.drain(..) {
            *s.shared.close.lock() = Some((code, reason.to_string()));
        }
    }

    fn unsubscribe(&self, id: u64) {
        self.state.lock().subs.retain(|s| s.id != id);
    }

    /// Installs (or with None removes) the current attach's input. Returns
    /// an id [`AppIo::clear_input`] takes, so a late teardown of an old
    /// attach never removes its successor's input.
    pub fn set_input(&self, input: Option<Input>) -> u64 {
        let mut slot = self.input.lock();
        slot.next_id += 1;
        let id = slot.next_id;
        slot.current = input.map(|i| CurrentInput {
            id,
            stdin: Arc::new(Mutex::new(i.stdin)),
            controller: i.controller,
            tty: i.tty,
        });
        id
    }

    /// Removes the input installed with `id`, if it is still the current one.
    pub fn clear_input(&self, id: u64) {
        let mut slot = self.input.lock();
        if slot.current.as_ref().is_some_and(|c| c.id == id) {
            slot.current = None;
        }
    }

    /// Whether an attach's input is installed.
    pub fn has_input(&self) -> bool {
        self.input.lock().current.is_some()
    }

    /// Writes to the current attach's stdin, waiting while its queue is full
    /// (backpressure on the caller only: output and other viewers go on).
    /// False when there is no attach (the bytes are dropped) or it ended.
    pub fn stdin(&self, data: &[u8]) -> bool {
        if data.is_empty() {
            return true;
        }
        let writer = match &self.input.lock().current {
            Some(c) => c.stdin.clone(),
            None => return false,
        };
        // Outside the slot's lock: a write may wait, and must not hold up
        // set_input/clear_input or resizes.
        let ok = writer.lock().write(data).is_ok();
        ok
    }

    /// Resizes the app's terminal (tty apps only; ignored otherwise). The
    /// size is kept for the next attach. False when nothing was sent.
    pub fn resize(&self, cols: u16, rows: u16) -> bool {
        if cols == 0 || rows == 0 {
            return false;
        }
        let size = TermSize {
            width: cols,
            height: rows,
        };
        let controller = {
            let mut slot = self.input.lock();
            slot.size = Some(size);
            match &slot.current {
                Some(c) if c.tty => c.controller.clone(),
                _ => return false,
            }
        };
        controller.resize(size).is_ok()
    }

    /// The last size a viewer asked for.
    pub fn term_size(&self) -> Option<TermSize> {
        self.input.lock().size
    }
}

/// One subscriber's view of an [`AppIo`]: replay, then live frames, then
/// (unless unsubscribed) one [`Item::Close`]. Dropping it unsubscribes.
pub struct Subscription {
    io: Weak<AppIo>,
    id: u64,
    pending: VecDeque<Item>,
    rx: Receiver<Item>,
    shared: Arc<SubShared>,
    done: bool,
}

impl Subscription {
    /// The next item, waiting for it; None after the close (or once
    /// unsubscribed).
    pub fn recv(&mut self) -> Option<Item> {
        self.next(None).ok().flatten()
    }

    /// [`Subscription::recv`] waiting at most `timeout`: `Err(())` when
    /// nothing came in time.
    #[allow(clippy::result_unit_err)]
    pub fn recv_timeout(&mut self, timeout: Duration) -> Result<Option<Item>, ()> {
        self.next(Some(Instant::now() + timeout))
    }

    fn next(&mut self, deadline: Option<Instant>) -> Result<Option<Item>, ()> {
        if self.done {
            return Ok(None);
        }
        if let Some(i) = self.pending.pop_front() {
            if matches!(i, Item::Close { .. }) {
                self.done = true;
            }
            return Ok(Some(i));
        }
        let r = match deadline {
            None => self.rx.recv().map_err(|_| RecvTimeoutError::Disconnected),
            Some(d) => self.rx.recv_deadline(d),
        };
        match r {
            Ok(i) => Ok(Some(i)),
            Err(RecvTimeoutError::Timeout) => Err(()),
            Err(RecvTimeoutError::Disconnected) => {
                self.done = true;
                Ok(self
                    .shared
                    .close
                    .lock()
                    .clone()
                    .map(|(code, reason)| Item::Close { code, reason }))
            }
        }
    }

    /// Calls `f` (once, from the pushing thread, outside any lock) if this
    /// subscriber is closed for being slow; at once if it already was.
    pub fn on_slow(&self, f: impl FnOnce(CloseFrame) + Send + 'static) {
        let already = matches!(&*self.shared.close.lock(), Some((c, _)) if *c == CLOSE_SLOW);
        if already {
            f(close_frame(CLOSE_SLOW, SLOW_REASON));
            return;
        }
        *self.shared.on_slow.lock() = Some(Box::new(f));
        // It may have turned slow between the check and the store.
        let now = matches!(&*self.shared.close.lock(), Some((c, _)) if *c == CLOSE_SLOW);
        if now {
            if let Some(h) = self.shared.on_slow.lock().take() {
                h(close_frame(CLOSE_SLOW, SLOW_REASON));
            }
        }
    }

    /// A handle that ends this subscription from another thread: its
    /// `recv` then returns what it still holds and None.
    pub fn canceller(&self) -> Canceller {
        Canceller {
            io: self.io.clone(),
            id: self.id,
        }
    }
}

impl Drop for Subscription {
    fn drop(&mut self) {
        if let Some(io) = self.io.upgrade() {
            io.unsubscribe(self.id);
        }
    }
}

/// Unsubscribes a [`Subscription`] from another thread.
#[derive(Clone)]
pub struct Canceller {
    io: Weak<AppIo>,
    id: u64,
}

impl Canceller {
    pub fn cancel(&self) {
        if let Some(io) = self.io.upgrade() {
            io.unsubscribe(self.id);
        }
    }
}

/// The slow subscribers' hooks, outside the state lock (they may do
/// anything).
fn run_slow_hooks(slow: Vec<Arc<SubShared>>) {
    for s in slow {
        let hook = s.on_slow.lock().take();
        if let Some(h) = hook {
            h(close_frame(CLOSE_SLOW, SLOW_REASON));
        }
    }
}

fn now_ns() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| u64::try_from(d.as_nanos()).unwrap_or(u64::MAX))
}

/// How many trailing `recovered` chunks the `held` output starts with:
/// the container log was read after the new attach began streaming, so
/// its last lines may be the attach's first. The longest such run wins
/// (at most [`MAX_OVERLAP_LINES`] chunks are compared); 0 when none.
/// Repetitive output (the same line many times) cannot be told apart:
/// then the longest match is dropped.
pub fn held_overlap(recovered: &[Bytes], held: &[u8]) -> usize {
    let mut best = 0;
    let mut len = 0;
    let mut suffix: Vec<&[u8]> = Vec::new();
    for (k, r) in recovered.iter().rev().take(MAX_OVERLAP_LINES).enumerate() {
        len += r.len();
        if len > held.len() {
            break;
        }
        suffix.push(r);
        // The trailing k+1 chunks, in order, must be held's first `len` bytes.
        let mut at = 0;
        let matches = suffix.iter().rev().all(|c| {
            let ok = held.get(at..at + c.len()) == Some(*c);
            at += c.len();
            ok
        });
        if matches {
            best = k + 1;
        }
    }
    best
}

/// Recovered chunks compared with the held output's start (see
/// [`held_overlap`]): the overlap is a few lines written in the moments
/// between the attach's start and the log read.
const MAX_OVERLAP_LINES: usize = 256;

fn close_frame(code: u16, reason: &str) -> CloseFrame {
    CloseFrame {
        code: CloseCode::from(code),
        reason: reason.to_string().into(),
    }
}

// ------------------------------------------------------------------ attach

/// A running attach (see [`attach`]). Dropping it closes it.
pub struct AttachHandle {
    on_end: Arc<Mutex<Option<EndFn>>>,
    io: Arc<AppIo>,
    input_id: u64,
    process: Option<SinkProcess>,
}

type EndFn = Box<dyn FnOnce(Result<(), String>) + Send>;

impl AttachHandle {
    /// Ends the attach without waiting: the input is removed from the
    /// `AppIo` and the stream is closed (a Close 1000 queued without
    /// blocking). The `on_end` callback is not called after this (unless
    /// it was already running).
    pub fn close(mut self) {
        self.stop_now();
    }

    /// Whether the stream's thread is done (the stream ended or was closed).
    pub fn is_finished(&self) -> bool {
        self.process.as_ref().is_none_or(SinkProcess::is_finished)
    }

    fn stop_now(&mut self) {
        self.on_end.lock().take();
        self.io.clear_input(self.input_id);
        self.process.take();
    }
}

impl Drop for AttachHandle {
    fn drop(&mut self) {
        self.stop_now();
    }
}

/// Attaches to `container` of `namespace/pod` (stdin on, `tty` as
/// declared; without a tty stdout and stderr stay apart as streams 1 and
/// 2, with one everything is stream 0) and pushes its output into `io`
/// from the stream's own thread (`kube-remote-io`, one per attach: the
/// ring never blocks, so no output channel or relay thread is needed);
/// installs the attach's input into `io`. Blocks for the connect and
/// upgrade (up to 30 s): call it off the session's owner thread. With a tty
/// the stream starts at the last size a viewer asked for.
///
/// `on_end` is called once, from the stream's thread, when the stream ends
/// by itself: `Ok(())` for a normal end (the container's process exited or
/// closed its streams), `Err` with the reason otherwise. It is not called
/// after [`AttachHandle::close`].
pub fn attach(
    conn: &Connection,
    namespace: &str,
    pod: &str,
    container: &str,
    tty: bool,
    io: Arc<AppIo>,
    on_end: impl FnOnce(Result<(), String>) + Send + 'static,
) -> Result<AttachHandle, String> {
    let opts = ExecOptions {
        stdin: true,
        stdout: true,
        stderr: !tty,
        tty,
        initial_size: if tty { io.term_size() } else { None },
        // Held for the session's life, mostly idle: a small read buffer.
        read_buffer_bytes: Some(remote::SMALL_READ_BUFFER),
        ..ExecOptions::default()
    };
    let on_end: Arc<Mutex<Option<EndFn>>> = Arc::new(Mutex::new(Some(Box::new(on_end))));
    // The input id is known only once the stream is open; the end
    // callback (which may run at once) reads it from here.
    let input_slot: Arc<Mutex<Option<u64>>> = Arc::new(Mutex::new(None));
    let out_stream = if tty {
        OutStream::Tty
    } else {
        OutStream::Stdout
    };
    let sink = {
        let io = io.clone();
        Box::new(move |o: Output| match o {
            Output::Stdout(d) => {
                io.push(out_stream, d);
            }
            Output::Stderr(d) => {
                io.push(OutStream::Stderr, d);
            }
            // Not asked for (raw_frames is off); handled anyway:
            // `[channel][data]`, copied so the ring never pins a larger
            // read buffer.
            Output::Frame(f) => {
                let s = if f.first() == Some(&2) {
                    OutStream::Stderr
                } else {
                    out_stream
                };
                io.push(s, f.get(1..).unwrap_or_default().to_vec());
            }
        })
    };
    let end = {
        let io = io.clone();
        let on_end = on_end.clone();
        let input_slot = input_slot.clone();
        Box::new(move |r: Result<remote::ExitStatus, remote::RemoteError>| {
            if let Some(id) = *input_slot.lock() {
                io.clear_input(id);
            }
            let cb = on_end.lock().take();
            if let Some(cb) = cb {
                cb(r.map(|_| ()).map_err(|e| e.to_string()));
            }
        })
    };
    let process = remote::attach_into(conn, namespace, pod, Some(container), opts, sink, end)
        .map_err(|e| e.to_string())?;
    let input_id = {
        // Under the slot's lock: an end racing with this sees either no id
        // (and this installs an input the finished stream refuses: cleared
        // below) or the id.
        let mut slot = input_slot.lock();
        let id = io.set_input(Some(Input {
            stdin: process.stdin(),
            controller: process.controller(),
            tty,
        }));
        *slot = Some(id);
        id
    };
    if process.is_finished() {
        io.clear_input(input_id);
    }
    Ok(AttachHandle {
        on_end,
        io,
        input_id,
        process: Some(process),
    })
}

// ------------------------------------------------------------------- serve

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
                out.abort(close_frame(1008, &reason));
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

/// A ring's frames as persisted: seq, stream byte, data.
pub type RingFrames = Vec<(u32, u8, Bytes)>;

/// A ring as a daemon stop persists it and the next start restores it
/// ([`AppIo::ring_image`], [`AppIo::restore`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RingImage {
    /// The seq the next frame gets.
    pub next_seq: u32,
    /// When the newest output was pushed (ns since the Unix epoch; 0:
    /// never): the re-adoption asks the container log for what came after.
    pub last_output_ns: u64,
    pub frames: RingFrames,
}

/// First bytes of a persisted ring (version 2: with the last output's
/// time); version 1 (without it) is still read.
const RING_MAGIC: &[u8; 8] = b"KGRING2\n";
const RING_MAGIC_V1: &[u8; 8] = b"KGRING1\n";

/// A ring as a daemon stop writes it: the magic, the next seq (u32 BE),
/// the last output's time (u64 BE, ns), then per frame seq (u32 BE),
/// stream byte, length (u32 BE), data.
pub fn encode_ring(img: &RingImage) -> Vec<u8> {
    let size: usize = img.frames.iter().map(|f| 9 + f.2.len()).sum();
    let mut out = Vec::with_capacity(20 + size);
    out.extend_from_slice(RING_MAGIC);
    out.extend_from_slice(&img.next_seq.to_be_bytes());
    out.extend_from_slice(&img.last_output_ns.to_be_bytes());
    for (seq, stream, data) in &img.frames {
        out.extend_from_slice(&seq.to_be_bytes());
        out.push(*stream);
        out.extend_from_slice(&u32::try_from(data.len()).unwrap_or(u32::MAX).to_be_bytes());
        out.extend_from_slice(data);
    }
    out
}

/// Reads [`encode_ring`]'s bytes back; a clear error for anything else
/// (wrong magic, truncation, seqs out of order, a frame at or past the
/// next seq).
pub fn decode_ring(b: &[u8]) -> Result<RingImage, String> {
    let (rest, v2) = if let Some(r) = b.strip_prefix(RING_MAGIC.as_slice()) {
        (r, true)
    } else if let Some(r) = b.strip_prefix(RING_MAGIC_V1.as_slice()) {
        (r, false)
    } else {
        return Err("not a persisted ring (bad magic)".into());
    };
    let u32_at = |b: &[u8], at: usize| -> Result<u32, String> {
        b.get(at..at + 4)
            .and_then(|x| x.try_into().ok())
            .map(u32::from_be_bytes)
            .ok_or_else(|| "the ring is truncated".to_string())
    };
    let next_seq = u32_at(rest, 0)?;
    let mut at = 4;
    let mut last_output_ns = 0;
    if v2 {
        last_output_ns = rest
            .get(4..12)
            .and_then(|x| x.try_into().ok())
            .map(u64::from_be_bytes)
            .ok_or("the ring is truncated")?;
        at = 12;
    }
    let mut frames = Vec::new();
    let mut last = 0u32;
    while at < rest.len() {
        let seq = u32_at(rest, at)?;
        let stream = *rest.get(at + 4).ok_or("the ring is truncated")?;
        let len = u32_at(rest, at + 5)? as usize;
        let data = rest
            .get(at + 9..at + 9 + len)
            .ok_or("the ring is truncated")?;
        if seq <= last || seq >= next_seq {
            return Err(format!("frame seq {seq} out of order"));
        }
        last = seq;
        frames.push((seq, stream, Bytes::copy_from_slice(data)));
        at += 9 + len;
    }
    Ok(RingImage {
        next_seq,
        last_output_ns,
        frames,
    })
}

#[cfg(test)]
mod tests {

    #[test]
    fn persisted_rings_round_trip_and_bad_bytes_are_errors() {
        let io = AppIo::new(1 << 20);
        io.push(OutStream::Stdout, b"one".to_vec());
        io.push(OutStream::Stderr, b"".to_vec());
        io.push_gap();
        io.push(OutStream::Stderr, vec![0u8, 255]);
        let img = io.ring_image();
        assert_eq!(img.next_seq, 4);
        assert!(img.last_output_ns > 0);
        let bytes = encode_ring(&img);
        let back = decode_ring(&bytes).unwrap();
        assert_eq!(back, img);
        assert_eq!(back.frames[1], (2, GAP_STREAM, Bytes::new()));
        assert_eq!(back.frames[2].2.as_ref(), &[0u8, 255]);
        assert!(decode_ring(b"nope").is_err());
        assert!(decode_ring(&bytes[..bytes.len() - 1]).is_err());
        assert!(decode_ring(&bytes[..15]).is_err(), "a truncated header");
        let image = |next_seq, frames: &[(u32, u8, &'static [u8])]| RingImage {
            next_seq,
            last_output_ns: 7,
            frames: frames
                .iter()
                .map(|(q, s, d)| (*q, *s, Bytes::from_static(d)))
                .collect(),
        };
        let swapped = encode_ring(&image(3, &[(2, 1, b"a"), (1, 1, b"b")]));
        assert!(decode_ring(&swapped).is_err());
        let at_next = encode_ring(&image(2, &[(2, 1, b"a")]));
        assert!(decode_ring(&at_next).is_err(), "a frame at the next seq");
        assert_eq!(
            decode_ring(&encode_ring(&image(1, &[]))).unwrap(),
            image(1, &[])
        );
        // Version 1 (no time of the last output) is still read.
        let mut v1 = b"KGRING1\n".to_vec();
        v1.extend_from_slice(&2u32.to_be_bytes());
        v1.extend_from_slice(&1u32.to_be_bytes());
        v1.push(1);
        v1.extend_from_slice(&1u32.to_be_bytes());
        v1.push(b'x');
        let old = decode_ring(&v1).unwrap();
        assert_eq!(
            (old.next_seq, old.last_output_ns, old.frames.len()),
            (2, 0, 1)
        );
    }

    #[test]
    fn a_restored_ring_continues_its_seqs_and_replays_across_the_restart() {
        let before = Arc::new(AppIo::new(1 << 20));
        for i in 1..=5u8 {
            before.push(OutStream::Stdout, vec![b'0' + i]);
        }
        let img = before.ring_image();
        let io = Arc::new(AppIo::restore(1 << 20, img.clone()));
        assert_eq!(io.last_seq(), 5);
        assert_eq!(io.last_output_ns(), img.last_output_ns);
        assert_eq!(io.push(OutStream::Stdout, b"6".to_vec()), Some(6));
        // A viewer that saw seq 3 before the restart: 4, 5, then 6.
        let mut s = io.subscribe(Some(3));
        let seqs: Vec<u32> = (0..3).map(|_| frame(s.recv()).0).collect();
        assert_eq!(seqs, [4, 5, 6]);
        // A damaged image: only the run that ends at next_seq - 1 stays.
        let mut bad = img;
        bad.frames.remove(2); // seq 3
        let io = Arc::new(AppIo::restore(1 << 20, bad));
        let mut s = io.subscribe(Some(0));
        assert_eq!(s.recv(), Some(Item::Gap { from: 1, to: 3 }));
        assert_eq!(frame(s.recv()).0, 4);
        // The bound applies to what is restored.
        let small = AppIo::restore(2 * (1 + FRAME_COST), before.ring_image());
        assert_eq!(small.ring_usage().0, 2);
    }

    #[test]
    fn gap_notices_hold_a_seq_and_join_adjacent_gaps_in_replays() {
        let io = Arc::new(AppIo::new(3 * (1 + FRAME_COST)));
        let mut live = io.subscribe(None);
        io.push(OutStream::Stdout, b"a".to_vec());
        assert_eq!(io.push_gap(), Some(2));
        assert_eq!(io.push_gap(), Some(3));
        io.push(OutStream::Stdout, b"d".to_vec());
        assert_eq!(frame(live.recv()).0, 1);
        assert_eq!(live.recv(), Some(Item::Gap { from: 2, to: 2 }));
        assert_eq!(live.recv(), Some(Item::Gap { from: 3, to: 3 }));
        assert_eq!(frame(live.recv()).0, 4);
        // Seq 1 is evicted: its gap and the notices become one.
        let mut s = io.subscribe(None);
        assert_eq!(s.recv(), Some(Item::Gap { from: 1, to: 3 }));
        assert_eq!(frame(s.recv()).0, 4);
        // Gap notices are not output: the last output's time stays.
        let t = io.last_output_ns();
        io.push_gap();
        assert_eq!(io.last_output_ns(), t);
    }

    #[test]
    fn held_output_waits_for_the_recovered_output_without_the_overlap() {
        let io = Arc::new(AppIo::new(1 << 20));
        io.push(OutStream::Stdout, b"before\n".to_vec());
        let mut s = io.subscribe(Some(1));
        io.hold();
        assert!(io.is_holding());
        // The new attach streams while the log is read: held, no seq yet.
        assert_eq!(io.push(OutStream::Stdout, b"c\nd".to_vec()), None);
        assert_eq!(io.push(OutStream::Stderr, b"\ne\n".to_vec()), None);
        assert_eq!(io.last_seq(), 1);
        assert!(s.recv_timeout(Duration::ZERO).is_err());
        // The log holds a, b, and c and d again (written after the attach
        // began): they are dropped from the recovery.
        let lines = ["a\n", "b\n", "c\n", "d\n"].map(|l| Bytes::from_static(l.as_bytes()));
        assert_eq!(io.held_covers(&lines), 2);
        io.release(Recovered::Complete(lines.to_vec()), OutStream::Stdout);
        assert!(!io.is_holding());
        let got: Vec<(u32, u8, Vec<u8>)> = (0..4).map(|_| frame(s.recv())).collect();
        assert_eq!(
            got,
            [
                (2, 1, b"a\n".to_vec()),
                (3, 1, b"b\n".to_vec()),
                (4, 1, b"c\nd".to_vec()),
                (5, 2, b"\ne\n".to_vec())
            ]
        );
        assert_eq!(io.held_covers(&lines), 0, "not holding");
        // No log: a gap notice where the downtime's output would be.
        io.hold();
        io.push(OutStream::Stdout, b"f\n".to_vec());
        io.release(Recovered::Unavailable, OutStream::Stdout);
        assert_eq!(s.recv(), Some(Item::Gap { from: 6, to: 6 }));
        assert_eq!(frame(s.recv()), (7, 1, b"f\n".to_vec()));
        // Only the oldest part of a long log: it, then a gap notice.
        io.hold();
        io.release(
            Recovered::Truncated(vec![Bytes::from_static(b"g\n")]),
            OutStream::Stdout,
        );
        assert_eq!(frame(s.recv()), (8, 1, b"g\n".to_vec()));
        assert_eq!(s.recv(), Some(Item::Gap { from: 9, to: 9 }));
        // Held output over the bound: the oldest goes, and a gap says so.
        let io = Arc::new(AppIo::new(2 * (2 + FRAME_COST)));
        io.hold();
        for x in [b"1\n", b"2\n", b"3\n"] {
            io.push(OutStream::Stdout, x.to_vec());
        }
        io.release(
            Recovered::Complete(vec![Bytes::from_static(b"r\n")]),
            OutStream::Stdout,
        );
        let mut s = io.subscribe(Some(0));
        assert_eq!(s.recv(), Some(Item::Gap { from: 1, to: 2 }));
        assert_eq!(frame(s.recv()), (3, 1, b"2\n".to_vec()));
        assert_eq!(frame(s.recv()), (4, 1, b"3\n".to_vec()));
    }

    #[test]
    fn the_overlap_is_the_longest_run_of_trailing_lines_the_held_output_starts_with() {
        let b = |l: &[&'static str]| -> Vec<Bytes> {
            l.iter().map(|x| Bytes::from_static(x.as_bytes())).collect()
        };
        assert_eq!(held_overlap(&b(&["a\n", "b\n"]), b""), 0);
        assert_eq!(held_overlap(&b(&["a\n", "b\n"]), b"b\nc\n"), 1);
        assert_eq!(held_overlap(&b(&["a\n", "b\n"]), b"a\nb\nc"), 2);
        assert_eq!(held_overlap(&b(&["a\n", "b\n"]), b"c\n"), 0);
        // Not a prefix of the held output: not an overlap.
        assert_eq!(held_overlap(&b(&["a\n", "b\n"]), b"xb\n"), 0);
        // Repeated lines: the longest match.
        assert_eq!(held_overlap(&b(&["x\n", "x\n", "x\n"]), b"x\nx\n"), 2);
        assert_eq!(held_overlap(&[], b"x"), 0);
    }

    use super::*;

    fn frame(i: Option<Item>) -> (u32, u8, Vec<u8>) {
        match i {
            Some(Item::Frame { seq, stream, data }) => (seq, stream, data.to_vec()),
            other => panic!("expected a frame, got {other:?}"),
        }
    }

    #[test]
    fn wire_frames_round_trip() {
        let b = encode_frame(0x01020304, 2, b"hi");
        assert_eq!(b, [1, 2, 3, 4, 2, b'h', b'i']);
        assert_eq!(decode_frame(&b), Some((0x01020304, 2, &b"hi"[..])));
        assert_eq!(decode_frame(&b[..5]), Some((0x01020304, 2, &b""[..])));
        assert_eq!(decode_frame(&b[..4]), None);
        let g: Value = serde_json::from_str(&gap_text(3, 9)).unwrap();
        assert_eq!(g, serde_json::json!({"type": "gap", "from": 3, "to": 9}));
        assert_eq!(stream_byte(OutStream::Tty), 0);
        assert_eq!(stream_byte(OutStream::Stdout), 1);
        assert_eq!(stream_byte(OutStream::Stderr), 2);
    }

    #[test]
    fn client_messages() {
        let t = |s: &str| parse_client(&Message::Text(s.into()));
        assert_eq!(
            t(r#"{"type":"resize","cols":80,"rows":24}"#),
            Ok(Some(ClientMsg::Resize { cols: 80, rows: 24 }))
        );
        assert!(t(r#"{"type":"resize","cols":0,"rows":24}"#).is_err());
        assert!(t(r#"{"type":"resize","cols":70000,"rows":24}"#).is_err());
        assert!(t(r#"{"type":"resize","cols":1.5,"rows":24}"#).is_err());
        assert!(t(r#"{"type":"resize","cols":80}"#).is_err());
        assert!(t(r#"{"type":"bogus"}"#).is_err());
        assert!(t(r#"{"cols":1}"#).is_err());
        assert!(t("not json").is_err());
        assert_eq!(
            parse_client(&Message::Binary(Bytes::from_static(b"ls\n"))),
            Ok(Some(ClientMsg::Stdin(Bytes::from_static(b"ls\n"))))
        );
        assert_eq!(parse_client(&Message::Binary(Bytes::new())), Ok(None));
        assert_eq!(parse_client(&Message::Ping(Bytes::new())), Ok(None));
    }

    #[test]
    fn ring_evicts_by_bytes_and_seqs_continue() {
        let io = Arc::new(AppIo::new(3 * (10 + FRAME_COST)));
        assert_eq!(io.push(OutStream::Stdout, Vec::new()), None);
        for i in 1..=5u32 {
            assert_eq!(io.push(OutStream::Stdout, vec![b'a'; 10]), Some(i));
        }
        assert_eq!(io.ring_usage().0, 3);
        assert_eq!(io.ring_usage().1, 3 * (10 + FRAME_COST));
        assert_eq!(io.last_seq(), 5);
        // A big frame evicts several small ones.
        assert_eq!(
            io.push(OutStream::Stderr, vec![b'b'; 10 + FRAME_COST]),
            Some(6)
        );
        assert_eq!(io.ring_usage().0, 2);
        // Everything buffered, with the gap from 1.
        let mut s = io.subscribe(None);
        assert_eq!(s.recv(), Some(Item::Gap { from: 1, to: 4 }));
        assert_eq!(frame(s.recv()).0, 5);
        assert_eq!(frame(s.recv()), (6, 2, vec![b'b'; 10 + FRAME_COST]));
        // A frame bigger than the ring evicts everything, itself included;
        // seqs go on.
        assert_eq!(io.push(OutStream::Stdout, vec![0; 4 * FRAME_COST]), Some(7));
        assert_eq!(io.ring_usage().0, 0);
        assert_eq!(io.push(OutStream::Stdout, b"x".to_vec()), Some(8));
        assert_eq!(frame(s.recv()).0, 7);
        assert_eq!(frame(s.recv()).0, 8);
    }

    #[test]
    fn replay_after_last_seq_and_gaps() {
        let io = Arc::new(AppIo::new(4 * (1 + FRAME_COST)));
        for i in 1..=6u8 {
            io.push(OutStream::Tty, vec![i]);
        }
        // Buffered: 3..=6.
        let seqs = |s: &mut Subscription| {
            let mut v = Vec::new();
            while let Ok(Some(i)) = s.recv_timeout(Duration::ZERO) {
                v.push(match i {
                    Item::Frame { seq, .. } => format!("{seq}"),
                    Item::Gap { from, to } => format!("gap {from}-{to}"),
                    Item::Close { code, .. } => format!("close {code}"),
                });
            }
            v
        };
        assert_eq!(seqs(&mut io.subscribe(Some(4))), ["5", "6"]);
        assert_eq!(seqs(&mut io.subscribe(Some(2))), ["3", "4", "5", "6"]);
        assert_eq!(
            seqs(&mut io.subscribe(Some(1))),
            ["gap 2-2", "3", "4", "5", "6"]
        );
        assert_eq!(
            seqs(&mut io.subscribe(Some(0))),
            ["gap 1-2", "3", "4", "5", "6"]
        );
        assert_eq!(seqs(&mut io.subscribe(Some(6))), Vec::<String>::new());
        // Ahead of the newest frame (the daemon restarted): everything.
        assert_eq!(
            seqs(&mut io.subscribe(Some(99))),
            ["gap 1-2", "3", "4", "5", "6"]
        );
        // Live frames follow the replay; end closes after queued frames.
        let mut s = io.subscribe(Some(5));
        io.push(OutStream::Tty, b"7".to_vec());
        io.end(CLOSE_ENDED, "session ended");
        assert_eq!(io.push(OutStream::Tty, b"8".to_vec()), None);
        assert_eq!(seqs(&mut s), ["6", "7", "close 1000"]);
        assert_eq!(s.recv(), None);
        assert_eq!(io.subscribers(), 0);
        // After the end: the replay, then the close.
        assert_eq!(seqs(&mut io.subscribe(Some(5))), ["6", "7", "close 1000"]);
        // An empty AppIo replays nothing.
        let empty = Arc::new(AppIo::new(1 << 20));
        assert_eq!(seqs(&mut empty.subscribe(None)), Vec::<String>::new());
        assert_eq!(seqs(&mut empty.subscribe(Some(3))), Vec::<String>::new());
    }

    #[test]
    fn dropping_or_cancelling_unsubscribes() {
        let io = Arc::new(AppIo::new(1 << 20));
        let a = io.subscribe(None);
        let mut b = io.subscribe(None);
        assert_eq!(io.subscribers(), 2);
        drop(a);
        assert_eq!(io.subscribers(), 1);
        io.push(OutStream::Stdout, b"x".to_vec());
        b.canceller().cancel();
        assert_eq!(io.subscribers(), 0);
        // What it held, then the end without a close.
        assert_eq!(frame(b.recv()).0, 1);
        assert_eq!(b.recv(), None);
    }

    #[test]
    fn replay_and_live_are_atomic() {
        const N: u32 = 20_000;
        let io = Arc::new(AppIo::new(1 << 30).with_queue_frames(N as usize));
        let pusher = {
            let io = io.clone();
            std::thread::spawn(move || {
                for i in 0..N {
                    io.push(OutStream::Stdout, i.to_be_bytes().to_vec());
                }
            })
        };
        let mut readers = Vec::new();
        for k in 0..8u32 {
            // Subscribe at various moments of the push, from various seqs.
            while io.last_seq() < k * N / 10 {
                std::thread::yield_now();
            }
            let last = (k % 2 == 1).then(|| io.last_seq().saturating_sub(k * 7));
            let mut s = io.subscribe(last);
            readers.push(std::thread::spawn(move || {
                let mut expect = last.unwrap_or(0) + 1;
                while expect <= N {
                    let (seq, _, data) =
                        frame(s.recv_timeout(Duration::from_secs(30)).ok().flatten());
                    assert_eq!(seq, expect, "subscriber {k}");
                    assert_eq!(data, (seq - 1).to_be_bytes());
                    expect += 1;
                }
            }));
        }
        pusher.join().unwrap();
        for r in readers {
            r.join().unwrap();
        }
    }

    #[test]
    fn slow_subscriber_is_closed_while_a_fast_one_gets_everything() {
        let io = Arc::new(AppIo::new(1 << 20).with_queue_frames(8));
        let mut slow = io.subscribe(None);
        let (hook_tx, hook_rx) = bounded::<CloseFrame>(2);
        slow.on_slow(move |f| {
            let _ = hook_tx.try_send(f);
        });
        let mut fast = io.subscribe(None);
        let t = Instant::now();
        for i in 1..=2000u32 {
            // push never waits: the slow subscriber is cut instead.
            assert_eq!(
                io.push(OutStream::Stdout, i.to_be_bytes().to_vec()),
                Some(i)
            );
            let (seq, stream, data) = frame(fast.recv_timeout(Duration::ZERO).ok().flatten());
            assert_eq!((seq, stream, data), (i, 1, i.to_be_bytes().to_vec()));
        }
        assert!(t.elapsed() < Duration::from_secs(10));
        assert_eq!(io.subscribers(), 1);
        let f = hook_rx.try_recv().expect("the hook ran");
        assert_eq!(u16::from(f.code), CLOSE_SLOW);
        assert_eq!(f.reason.as_str(), SLOW_REASON);
        assert!(hook_rx.try_recv().is_err(), "hook called once");
        // The slow one gets what its queue held, then 4001.
        for want in 1..=8u32 {
            assert_eq!(frame(slow.recv()).0, want);
        }
        assert_eq!(
            slow.recv(),
            Some(Item::Close {
                code: CLOSE_SLOW,
                reason: SLOW_REASON.into()
            })
        );
        assert_eq!(slow.recv(), None);
        // A hook set after the fact fires at once.
        let (tx2, rx2) = bounded::<CloseFrame>(1);
        slow.on_slow(move |f| {
            let _ = tx2.try_send(f);
        });
        assert!(rx2.try_recv().is_ok());
        // It reconnects from its last seq and misses nothing.
        let mut again = io.subscribe(Some(8));
        assert_eq!(frame(again.recv()).0, 9);
        // The fast one ends with the session.
        io.end(CLOSE_ENDED, "session ended");
        assert_eq!(
            fast.recv(),
            Some(Item::Close {
                code: CLOSE_ENDED,
                reason: "session ended".into()
            })
        );
    }

    #[test]
    fn an_idle_app_holds_no_buffer() {
        let io = AppIo::new(1 << 20);
        assert_eq!(io.ring_usage(), (0, 0, 0));
        assert!(std::mem::size_of::<AppIo>() < 512);
        let io = Arc::new(io);
        io.push(OutStream::Stdout, b"hello".to_vec());
        let (n, bytes, cap) = io.ring_usage();
        assert_eq!((n, bytes), (1, 5 + FRAME_COST));
        assert!(cap < 64, "{cap}");
    }

    #[test]
    fn input_without_attach_is_dropped_and_sizes_are_kept() {
        let io = AppIo::new(1024);
        assert!(!io.has_input());
        assert!(!io.stdin(b"x"));
        assert!(!io.resize(100, 30));
        assert_eq!(
            io.term_size(),
            Some(TermSize {
                width: 100,
                height: 30
            })
        );
        assert!(!io.resize(0, 30));
        // Clearing someone else's input is a no-op.
        let id = io.set_input(None);
        io.clear_input(id + 1);
    }
}
