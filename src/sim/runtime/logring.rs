//! A container's log: a bounded ring of timestamped output plus the live
//! subscribers (attach, `logs -f`).
//!
//! The ring stores fragments cut at newlines (a line that arrives in pieces
//! is several fragments, like the CRI log's partial entries); queries merge
//! them back into lines, so `tailLines` counts lines and `sinceTime` and
//! `--timestamps` use the time the line's first byte was read. When the ring
//! passes [`LOG_RING_BYTES`], the oldest fragments go.
//!
//! It never blocks the writer (the container's reader thread): each
//! subscriber has a bounded queue plus a small overflow; one that falls
//! [`SUB_MAX_BEHIND`] behind or stays full for [`SUB_STALL`] is disconnected
//! (its receiver sees the channel end) instead of slowing the container.

use super::output::{OutputChunk, Stream};
use crossbeam_channel::{bounded, Receiver, SendTimeoutError, Sender, TrySendError};
use parking_lot::Mutex;
use std::collections::VecDeque;
use std::time::{Duration, Instant, SystemTime};

/// The ring's size: older output is evicted past it.
pub const LOG_RING_BYTES: usize = 8 << 20;
/// Chunks queued per subscriber before the overflow is used.
const SUB_QUEUE: usize = 64;
/// Bytes a subscriber may fall behind beyond its queue before it is cut.
const SUB_MAX_BEHIND: usize = 1 << 20;
/// How long a subscriber may stay full before it is cut.
const SUB_STALL: Duration = Duration::from_secs(2);
/// A fragment is not extended past this, so eviction stays fine-grained even
/// for output without newlines.
const MAX_FRAGMENT: usize = 64 * 1024;

/// One line of log (with its newline, except a last unfinished one).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LogLine {
    /// When its first byte was read.
    pub ts: SystemTime,
    pub stream: Stream,
    pub data: Vec<u8>,
}

/// Which lines a log request wants (the `log` subresource's parameters).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct LogQuery {
    /// Only lines whose time is at or after this (`sinceTime`/`sinceSeconds`).
    pub since: Option<SystemTime>,
    /// Only the last N lines (`tailLines`), applied after `since`.
    pub tail_lines: Option<usize>,
    /// At most this many bytes, from the start of the selection
    /// (`limitBytes`); the last line may be cut.
    pub limit_bytes: Option<usize>,
}

impl LogQuery {
    /// Just the last `n` lines.
    pub fn tail(n: usize) -> LogQuery {
        LogQuery {
            tail_lines: Some(n),
            ..LogQuery::default()
        }
    }
}

struct Fragment {
    ts: SystemTime,
    stream: Stream,
    data: Vec<u8>,
    /// Ends with a newline.
    complete: bool,
}

struct Subscriber {
    tx: Sender<OutputChunk>,
    overflow: VecDeque<OutputChunk>,
    overflow_bytes: usize,
    full_since: Option<Instant>,
}

impl Subscriber {
    /// Moves overflow into the channel. Returns false if the subscriber must
    /// go (receiver gone, too far behind, or stalled too long).
    fn flush(&mut self, now: Instant) -> bool {
        while let Some(chunk) = self.overflow.pop_front() {
            let len = chunk.data.len();
            match self.tx.try_send(chunk) {
                Ok(()) => self.overflow_bytes -= len,
                Err(TrySendError::Full(chunk)) => {
                    self.overflow.push_front(chunk);
                    let since = *self.full_since.get_or_insert(now);
                    return self.overflow_bytes <= SUB_MAX_BEHIND
                        && now.duration_since(since) < SUB_STALL;
                }
                Err(TrySendError::Disconnected(_)) => return false,
            }
        }
        self.full_since = None;
        true
    }
}

#[derive(Default)]
struct Inner {
    frags: VecDeque<Fragment>,
    bytes: usize,
    subs: Vec<Subscriber>,
    /// Output has ended: new subscribers get a closed channel.
    closed: bool,
}

pub(super) struct LogRing {
    inner: Mutex<Inner>,
    cap: usize,
}

impl LogRing {
    pub(super) fn new() -> LogRing {
        LogRing::with_capacity(LOG_RING_BYTES)
    }

    pub(super) fn with_capacity(cap: usize) -> LogRing {
        LogRing {
            inner: Mutex::new(Inner::default()),
            cap,
        }
    }

    /// Stores a chunk and hands it to every subscriber. Never blocks.
    pub(super) fn push(&self, chunk: OutputChunk) {
        let mut inner = self.inner.lock();
        let mut rest: &[u8] = &chunk.data;
        while !rest.is_empty() {
            let (piece, complete) = match rest.iter().position(|&b| b == b'\n') {
                Some(i) => (&rest[..=i], true),
                None => (rest, false),
            };
            rest = &rest[piece.len()..];
            inner.bytes += piece.len();
            match inner.frags.back_mut() {
                Some(last)
                    if !last.complete
                        && last.stream == chunk.stream
                        && last.data.len() + piece.len() <= MAX_FRAGMENT =>
                {
                    last.data.extend_from_slice(piece);
                    last.complete = complete;
                }
                _ => inner.frags.push_back(Fragment {
                    ts: chunk.ts,
                    stream: chunk.stream,
                    data: piece.to_vec(),
                    complete,
                }),
            }
        }
        while inner.bytes > self.cap && inner.frags.len() > 1 {
            if let Some(f) = inner.frags.pop_front() {
                inner.bytes -= f.data.len();
            }
        }
        let now = Instant::now();
        for sub in inner.subs.iter_mut() {
            sub.overflow_bytes += chunk.data.len();
            sub.overflow.push_back(chunk.clone());
        }
        inner.subs.retain_mut(|s| s.flush(now));
    }

    /// Retries the subscribers' overflow (the reader calls this while any is
    /// pending, so a quiet container still delivers its last output).
    pub(super) fn tick(&self) {
        let now = Instant::now();
        let mut inner = self.inner.lock();
        inner.subs.retain_mut(|s| s.flush(now));
    }

    pub(super) fn has_pending(&self) -> bool {
        self.inner
            .lock()
            .subs
            .iter()
            .any(|s| !s.overflow.is_empty())
    }

    /// Output has ended: give subscribers up to [`SUB_STALL`] to take what is
    /// queued for them, then close their channels.
    pub(super) fn finish(&self) {
        let subs = {
            let mut inner = self.inner.lock();
            inner.closed = true;
            std::mem::take(&mut inner.subs)
        };
        let deadline = Instant::now() + SUB_STALL;
        for mut sub in subs {
            while let Some(chunk) = sub.overflow.pop_front() {
                match sub.tx.send_deadline(chunk, deadline) {
                    Ok(()) => {}
                    Err(SendTimeoutError::Timeout(_) | SendTimeoutError::Disconnected(_)) => break,
                }
            }
        }
    }

    pub(super) fn snapshot(&self, q: &LogQuery) -> Vec<LogLine> {
        select(&self.inner.lock().frags, q)
    }

    pub(super) fn follow(&self, q: &LogQuery) -> (Vec<LogLine>, Receiver<OutputChunk>) {
        let (tx, rx) = bounded(SUB_QUEUE);
        let mut inner = self.inner.lock();
        let lines = select(&inner.frags, q);
        if !inner.closed {
            inner.subs.push(Subscriber {
                tx,
                overflow: VecDeque::new(),
                overflow_bytes: 0,
                full_since: None,
            });
        }
        (lines, rx)
    }
}

/// Merges fragments into lines and applies the query.
fn select(frags: &VecDeque<Fragment>, q: &LogQuery) -> Vec<LogLine> {
    let mut lines: Vec<LogLine> = Vec::new();
    let mut open = false;
    for f in frags {
        match lines.last_mut() {
            Some(last) if open && last.stream == f.stream => last.data.extend_from_slice(&f.data),
            _ => lines.push(LogLine {
                ts: f.ts,
                stream: f.stream,
                data: f.data.clone(),
            }),
        }
        open = !f.complete;
    }
    if let Some(since) = q.since {
        lines.retain(|l| l.ts >= since);
    }
    if let Some(n) = q.tail_lines {
        let skip = lines.len().saturating_sub(n);
        lines.drain(..skip);
    }
    if let Some(mut budget) = q.limit_bytes {
        let mut keep = 0;
        for l in lines.iter_mut() {
            if budget == 0 {
                break;
            }
            if l.data.len() > budget {
                l.data.truncate(budget);
            }
            budget -= l.data.len();
            keep += 1;
        }
        lines.truncate(keep);
    }
    lines
}

#[cfg(test)]
mod tests {
    use super::*;

    fn chunk(stream: Stream, s: &str, secs: u64) -> OutputChunk {
        OutputChunk {
            stream,
            data: s.as_bytes().to_vec(),
            ts: SystemTime::UNIX_EPOCH + Duration::from_secs(secs),
        }
    }

    fn texts(lines: &[LogLine]) -> Vec<String> {
        lines
            .iter()
            .map(|l| String::from_utf8_lossy(&l.data).into_owned())
            .collect()
    }

    #[test]
    fn lines_are_merged_and_tailed() {
        let r = LogRing::new();
        r.push(chunk(Stream::Stdout, "a\nb", 1));
        r.push(chunk(Stream::Stdout, "c\nd\n", 2));
        r.push(chunk(Stream::Stderr, "e", 3));
        let all = r.snapshot(&LogQuery::default());
        assert_eq!(texts(&all), ["a\n", "bc\n", "d\n", "e"]);
        assert_eq!(all[1].ts, SystemTime::UNIX_EPOCH + Duration::from_secs(1));
        assert_eq!(texts(&r.snapshot(&LogQuery::tail(2))), ["d\n", "e"]);
        let since = LogQuery {
            since: Some(SystemTime::UNIX_EPOCH + Duration::from_secs(2)),
            ..LogQuery::default()
        };
        assert_eq!(texts(&r.snapshot(&since)), ["d\n", "e"]);
        let limit = LogQuery {
            limit_bytes: Some(3),
            ..LogQuery::default()
        };
        assert_eq!(texts(&r.snapshot(&limit)), ["a\n", "b"]);
    }

    #[test]
    fn oldest_output_is_evicted() {
        let r = LogRing::with_capacity(10);
        for i in 0..10 {
            r.push(chunk(Stream::Stdout, &format!("{i}{i}{i}\n"), i));
        }
        assert_eq!(texts(&r.snapshot(&LogQuery::default())), ["888\n", "999\n"]);
    }

    #[test]
    fn slow_subscriber_is_cut_fast_one_keeps_everything() {
        let r = LogRing::new();
        let (_, slow) = r.follow(&LogQuery::tail(0));
        let (_, fast) = r.follow(&LogQuery::tail(0));
        let big = "x".repeat(60 * 1024);
        let mut got = 0;
        for _ in 0..(SUB_QUEUE + 40) {
            r.push(chunk(Stream::Stdout, &big, 1));
            while let Ok(c) = fast.try_recv() {
                got += c.data.len();
            }
        }
        assert_eq!(got, (SUB_QUEUE + 40) * big.len());
        // The slow one got its queue's worth, then was cut.
        let mut slow_got = 0;
        while let Ok(c) = slow.try_recv() {
            slow_got += c.data.len();
        }
        assert!(slow_got < got);
        assert!(slow.recv_timeout(Duration::from_millis(10)).is_err());
        assert_eq!(r.inner.lock().subs.len(), 1);
    }

    #[test]
    fn subscribers_after_finish_get_a_closed_channel() {
        let r = LogRing::new();
        r.push(chunk(Stream::Tty, "x", 1));
        r.finish();
        let (lines, rx) = r.follow(&LogQuery::default());
        assert_eq!(texts(&lines), ["x"]);
        assert!(rx.recv().is_err());
    }
}
