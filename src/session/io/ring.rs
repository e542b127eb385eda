//! An app's [`AppIo`]: the output ring (bytes-bounded, seqs from 1, gap
//! notices), its subscribers' fan-out that never waits, and the output
//! held while a re-adoption recovers what the app wrote during the
//! downtime. The input side is in [`input`](super::input), a subscriber's
//! end in [`subscription`](super::subscription).

use super::input::InputSlot;
use super::persist::RingImage;
use super::subscription::{now_ns, run_slow_hooks, Subscription};
use super::wire::{stream_byte, CLOSE_SLOW, GAP_STREAM, SLOW_REASON};
use crate::session::machine::OutStream;
use crossbeam_channel::{bounded, Sender, TrySendError};
use parking_lot::Mutex;
use std::collections::VecDeque;
use std::sync::Arc;
use tungstenite::protocol::CloseFrame;
use tungstenite::Bytes;

/// Live frames queued per subscriber before it counts as slow.
pub const DEFAULT_QUEUE_FRAMES: usize = 256;
/// What a frame costs in the ring besides its payload: its bookkeeping
/// (seq, stream, the shared buffer's handle and allocation). Counting it
/// keeps a flood of one-byte frames (a tty echoing keystrokes) from holding
/// many times `io_ring_bytes` of memory.
pub const FRAME_COST: usize = 64;

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

pub(super) struct Stored {
    pub(super) seq: u32,
    pub(super) stream: u8,
    pub(super) data: Bytes,
    /// kubegate's own text in the app's stream ([`AppIo::push_notice`]),
    /// not the app's output.
    pub(super) own: bool,
}

pub(super) type SlowHook = Box<dyn FnOnce(CloseFrame) + Send>;

/// What a subscriber and the `AppIo` share.
#[derive(Default)]
pub(super) struct SubShared {
    /// Set before the live sender is dropped: how the subscription ends.
    pub(super) close: Mutex<Option<(u16, String)>>,
    /// Called (outside the AppIo's lock) when the subscriber is found slow.
    pub(super) on_slow: Mutex<Option<SlowHook>>,
}

pub(super) struct Sub {
    pub(super) id: u64,
    pub(super) tx: Sender<Item>,
    pub(super) shared: Arc<SubShared>,
}

pub(super) struct State {
    /// Seq of the next frame (from 1).
    pub(super) next_seq: u32,
    pub(super) ring: VecDeque<Stored>,
    /// Sum of payload + FRAME_COST over the ring.
    pub(super) bytes: usize,
    pub(super) subs: Vec<Sub>,
    pub(super) next_sub: u64,
    pub(super) ended: Option<(u16, String)>,
    /// When the newest output frame was pushed (ns since the Unix epoch;
    /// 0: never): where a re-adoption's log recovery starts.
    pub(super) last_output_ns: u64,
    /// Output held back while a re-adoption recovers what the app wrote
    /// while the daemon was down ([`AppIo::hold`]). Boxed: an app that is
    /// not being re-adopted pays one pointer.
    pub(super) held: Option<Box<Held>>,
    /// The id the next [`AppIo::hold`] gets.
    pub(super) next_hold: u64,
}

/// One hold of an app's output ([`AppIo::hold`]): only the attach that made
/// it releases it, and only while no later hold has replaced it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Hold(u64);

/// Output that came while held: stream byte, data and whether it is
/// kubegate's own text ([`AppIo::push_notice`]), oldest first, bounded
/// like the ring (`lost` once the oldest had to go).
#[derive(Default)]
pub(super) struct Held {
    /// Which hold this is ([`Hold`]).
    pub(super) id: u64,
    pub(super) frames: VecDeque<(u8, Bytes, bool)>,
    pub(super) bytes: usize,
    pub(super) lost: bool,
}

impl Held {
    /// The app's held bytes, every stream, in order (kubegate's own text
    /// left out: no container log has it).
    fn head(&self) -> Vec<u8> {
        self.frames
            .iter()
            .filter(|(_, _, own)| !own)
            .flat_map(|(_, d, _)| d.iter().copied())
            .collect()
    }
}

/// One session app's output ring, subscribers and input routing.
pub struct AppIo {
    pub(super) ring_bytes: usize,
    pub(super) queue_frames: usize,
    pub(super) state: Mutex<State>,
    pub(super) input: Mutex<InputSlot>,
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
                next_hold: 0,
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
        self.push_frame(stream, data.into(), false)
    }

    /// Appends kubegate's own text to the app's stream (`[kubegate] attach
    /// lost…`), as [`AppIo::push`] does the app's output, but marked as not
    /// the app's: it is not the last output a log recovery starts from
    /// ([`AppIo::last_output_ns`]), nor part of what the recovery compares
    /// with the container log ([`AppIo::delivered_tail`]), which never has
    /// it. Viewers see it as any other frame.
    pub fn push_notice(&self, stream: OutStream, data: impl Into<Bytes>) -> Option<u32> {
        self.push_frame(stream, data.into(), true)
    }

    fn push_frame(&self, stream: OutStream, data: Bytes, own: bool) -> Option<u32> {
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
                h.frames.push_back((stream, data, own));
                while h.bytes > self.ring_bytes {
                    match h.frames.pop_front() {
                        Some((_, d, _)) => {
                            h.bytes -= d.len() + FRAME_COST;
                            h.lost = true;
                        }
                        None => break,
                    }
                }
                return None;
            }
            self.append(&mut st, stream, data, own, &mut slow)
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
        own: bool,
        slow: &mut Vec<Arc<SubShared>>,
    ) -> Option<u32> {
        if st.next_seq == u32::MAX {
            return None;
        }
        let seq = st.next_seq;
        st.next_seq += 1;
        if stream != GAP_STREAM && !own {
            st.last_output_ns = now_ns();
        }
        st.bytes += data.len() + FRAME_COST;
        st.ring.push_back(Stored {
            seq,
            stream,
            data: data.clone(),
            own,
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
            self.append(&mut st, GAP_STREAM, Bytes::new(), false, &mut slow)
        };
        run_slow_hooks(slow);
        seq
    }

    /// From now on, output is held back (bounded like the ring: the
    /// oldest held frames go first, and the release announces a gap for
    /// them) until [`AppIo::release`] with the returned [`Hold`]. An attach
    /// that recovers (a re-adoption, a re-attach after a cut) holds an
    /// app's output while it reads, from the container log, what the app
    /// wrote while nobody was attached, so the recovered bytes get their
    /// seqs first.
    ///
    /// A hold replaces one still in place, and drops what that one held:
    /// a newer attach is made only once the older one's stream is gone,
    /// nothing was released meanwhile (so the last output, where the newer
    /// recovery reads the log from, has not moved), and that log holds
    /// what the older stream delivered. The older attach's release is then
    /// nothing. Before holds had owners, a re-attach that failed while an
    /// earlier one was still recovering released that one's hold with
    /// nothing recovered: its held lines came out after a hole, and the
    /// earlier recovery found no hold to fill it (one second of output
    /// lost at a cut followed by an outage, `scripts/soak.sh --real`).
    pub fn hold(&self) -> Hold {
        let mut st = self.state.lock();
        let id = st.next_hold;
        st.next_hold += 1;
        st.held = Some(Box::new(Held {
            id,
            ..Held::default()
        }));
        Hold(id)
    }

    /// Whether `hold` is the hold in place.
    fn is_current(st: &State, hold: Hold) -> bool {
        st.held.as_ref().is_some_and(|h| h.id == hold.0)
    }

    /// Whether output is held ([`AppIo::hold`]).
    pub fn is_holding(&self) -> bool {
        self.state.lock().held.is_some()
    }

    /// Whether `hold` is still the hold in place (not released, not
    /// replaced by a newer attach's): its recovery still matters.
    pub fn holds(&self, hold: Hold) -> bool {
        Self::is_current(&self.state.lock(), hold)
    }

    /// The last `max` bytes of the app's output the ring holds (every
    /// stream, in seq order, gap notices and kubegate's own text left out):
    /// what viewers were given last, which a log recovery compares with the
    /// log's lines.
    pub fn delivered_tail(&self, max: usize) -> Vec<u8> {
        let st = self.state.lock();
        let mut parts: Vec<&Bytes> = Vec::new();
        let mut len = 0;
        for f in st.ring.iter().rev() {
            if f.stream == GAP_STREAM || f.own {
                continue;
            }
            if len >= max {
                break;
            }
            len += f.data.len();
            parts.push(&f.data);
        }
        let mut out = Vec::with_capacity(len);
        for p in parts.into_iter().rev() {
            out.extend_from_slice(p);
        }
        let cut = out.len().saturating_sub(max);
        out.split_off(cut)
    }

    /// Whether the app's output has arrived since `hold` began (its
    /// attach is delivering), or `hold` is over (nothing left to wait for).
    pub fn held_has_output(&self, hold: Hold) -> bool {
        let st = self.state.lock();
        match st.held.as_ref() {
            Some(h) if h.id == hold.0 => h.frames.iter().any(|(_, _, own)| !own),
            _ => true,
        }
    }

    /// Ends a hold: appends what was recovered of the downtime's output
    /// (tagged `stream`; without the trailing lines that the held output
    /// starts with: the attach was already streaming when the log was
    /// read, see [`held_overlap`]) or a gap notice where it could not be,
    /// then a gap notice if held frames had to be dropped, then the held
    /// frames. Atomic with `push`; nothing unless `hold` is the hold in
    /// place (released already, by a stop for one, or replaced by a newer
    /// attach's).
    pub fn release(&self, hold: Hold, recovered: Recovered, stream: OutStream) {
        self.release_held(Some(hold), recovered, stream);
    }

    /// Ends whichever hold is in place as [`AppIo::release`] does (the
    /// daemon stopping: what is still being recovered becomes a gap).
    pub fn release_any(&self, recovered: Recovered, stream: OutStream) {
        self.release_held(None, recovered, stream);
    }

    fn release_held(&self, hold: Option<Hold>, recovered: Recovered, stream: OutStream) {
        let mut slow = Vec::new();
        {
            let mut st = self.state.lock();
            if hold.is_some_and(|h| !Self::is_current(&st, h)) {
                return;
            }
            // Not holding (released already, e.g. by a stop): nothing to do.
            let Some(mut held) = st.held.take() else {
                return;
            };
            if st.ended.is_some() {
                return;
            }
            let s = stream_byte(stream);
            match recovered {
                Recovered::Complete(mut lines) => {
                    let head = held.head();
                    let dup = held_overlap(&lines, &head);
                    lines.truncate(lines.len() - dup);
                    if dup == 0 && held_within(&lines, &head) {
                        // The log was read after the attach's stream had
                        // ended (a cut, a retried read): it has all the
                        // attach delivered and more. The log's copy goes.
                        held.frames.retain(|(_, _, own)| *own);
                    }
                    for r in coalesce(lines) {
                        self.append(&mut st, s, r, false, &mut slow);
                    }
                }
                Recovered::Truncated(lines) => {
                    for r in coalesce(lines) {
                        self.append(&mut st, s, r, false, &mut slow);
                    }
                    self.append(&mut st, GAP_STREAM, Bytes::new(), false, &mut slow);
                }
                Recovered::Unavailable => {
                    self.append(&mut st, GAP_STREAM, Bytes::new(), false, &mut slow);
                }
            }
            if held.lost {
                self.append(&mut st, GAP_STREAM, Bytes::new(), false, &mut slow);
            }
            for (s, d, own) in held.frames {
                self.append(&mut st, s, d, own, &mut slow);
            }
        }
        run_slow_hooks(slow);
    }

    /// How many trailing `recovered` chunks the output held by `hold`
    /// already starts with ([`held_overlap`]); all of them once `hold` is
    /// over (nothing left to wait for). A recovery waits (briefly) for the
    /// attach to deliver the lines the log stamped after the attach began,
    /// so they are not recovered twice.
    pub fn held_covers(&self, hold: Hold, recovered: &[Bytes]) -> usize {
        let st = self.state.lock();
        match st.held.as_ref() {
            Some(h) if h.id == hold.0 => held_overlap(recovered, &h.head()),
            _ => recovered.len(),
        }
    }

    /// When the newest output was pushed, in ns since the Unix epoch (0:
    /// never).
    pub fn last_output_ns(&self) -> u64 {
        self.state.lock().last_output_ns
    }

    /// An app's IO continuing a persisted ring ([`decode_ring`](super::persist::decode_ring)): the same
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
                st.ring.push_back(Stored {
                    seq,
                    stream,
                    data,
                    own: false,
                });
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

    pub(super) fn unsubscribe(&self, id: u64) {
        self.state.lock().subs.retain(|s| s.id != id);
    }
}

/// Whether all of the `held` output (non-empty) is in the `recovered`
/// chunks, starting where a chunk starts: a log read after the attach's
/// stream had ended holds what the attach delivered, and what it wrote
/// after. Repetitive output cannot be told apart, as for
/// [`held_overlap`].
pub fn held_within(recovered: &[Bytes], held: &[u8]) -> bool {
    if held.is_empty() {
        return false;
    }
    let joined: Vec<u8> = recovered.iter().flat_map(|c| c.iter().copied()).collect();
    let mut at = 0;
    for c in recovered {
        if joined.get(at..at + held.len()) == Some(held) {
            return true;
        }
        at += c.len();
    }
    false
}

/// How many trailing `recovered` chunks the `held` output starts with:
/// the container log was read after the new attach began streaming, so
/// its last lines may be the attach's first. The longest such run wins
/// (at most `MAX_OVERLAP_LINES` chunks are compared); 0 when none.
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

/// The largest frame recovered lines are joined into.
const RECOVERED_FRAME_BYTES: usize = 16 << 10;

/// Recovered log lines joined into frames of at most
/// [`RECOVERED_FRAME_BYTES`] (a longer line stays whole): a minute of an
/// app's output recovered after an outage is a few frames, not one per
/// line, so it does not overflow a viewer's queue (which counts frames)
/// and cut the viewer it is meant for.
fn coalesce(lines: Vec<Bytes>) -> Vec<Bytes> {
    let mut out = Vec::new();
    let mut cur: Vec<u8> = Vec::new();
    for l in lines.into_iter().filter(|l| !l.is_empty()) {
        if !cur.is_empty() && cur.len() + l.len() > RECOVERED_FRAME_BYTES {
            out.push(Bytes::from(std::mem::take(&mut cur)));
        }
        cur.extend_from_slice(&l);
    }
    if !cur.is_empty() {
        out.push(Bytes::from(cur));
    }
    out
}

/// Recovered chunks compared with the held output's start (see
/// [`held_overlap`]): the overlap is a few lines written in the moments
/// between the attach's start and the log read.
const MAX_OVERLAP_LINES: usize = 256;
