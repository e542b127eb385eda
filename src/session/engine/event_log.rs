//! A session's events as the SSE routes read them: a bounded history
//! with ids from 1 (the oldest dropped first, a reader that asks for them
//! told of the gap) and a condition variable readers wait on. The owner
//! pushes every `Emit`; a terminal status closes the log.

use parking_lot::{Condvar, Mutex};
use std::collections::VecDeque;
use std::time::Duration;

/// One SSE event as stored.
#[derive(Debug, Clone, PartialEq)]
pub struct Logged {
    pub id: u64,
    pub kind: &'static str,
    pub data: String,
}

/// A session's events: a bounded history with ids from 1, and a condition
/// variable SSE readers wait on.
pub struct EventLog {
    inner: Mutex<LogInner>,
    cv: Condvar,
}

struct LogInner {
    next: u64,
    events: VecDeque<Logged>,
    cap: usize,
    /// A terminal status was logged: readers end after it.
    closed: bool,
}

/// What a reader gets.
#[derive(Debug, Default)]
pub struct Since {
    /// Ids `from..=to` asked for but no longer held.
    pub gap: Option<(u64, u64)>,
    pub events: Vec<Logged>,
    pub closed: bool,
}

impl EventLog {
    pub fn new(cap: usize) -> EventLog {
        EventLog {
            inner: Mutex::new(LogInner {
                next: 1,
                events: VecDeque::new(),
                cap: cap.max(1),
                closed: false,
            }),
            cv: Condvar::new(),
        }
    }

    pub fn push(&self, kind: &'static str, data: String, terminal: bool) {
        let mut g = self.inner.lock();
        let id = g.next;
        g.next += 1;
        if g.events.len() >= g.cap {
            g.events.pop_front();
        }
        g.events.push_back(Logged { id, kind, data });
        g.closed |= terminal;
        drop(g);
        self.cv.notify_all();
    }

    /// Events after id `after`, waiting up to `wait` when there are none.
    pub fn since(&self, after: u64, wait: Duration) -> Since {
        let mut g = self.inner.lock();
        if g.next <= after + 1 && !g.closed {
            let _ = self.cv.wait_for(&mut g, wait);
        }
        let mut out = Since {
            closed: g.closed,
            ..Since::default()
        };
        let oldest = g.events.front().map_or(g.next, |e| e.id);
        if after + 1 < oldest {
            out.gap = Some((after + 1, oldest - 1));
        }
        out.events = g.events.iter().filter(|e| e.id > after).cloned().collect();
        out
    }

    /// The last id given out (0: none yet).
    pub fn last_id(&self) -> u64 {
        self.inner.lock().next - 1
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;

    #[test]
    fn event_log_ids_history_gap_and_close() {
        let log = EventLog::new(3);
        for i in 0..5 {
            log.push("progress", format!("{{\"n\":{i}}}"), false);
        }
        assert_eq!(log.last_id(), 5);
        let s = log.since(0, Duration::ZERO);
        assert_eq!(s.gap, Some((1, 2)));
        assert_eq!(
            s.events.iter().map(|e| e.id).collect::<Vec<_>>(),
            vec![3, 4, 5]
        );
        let s = log.since(4, Duration::ZERO);
        assert_eq!(s.gap, None);
        assert_eq!(s.events.len(), 1);
        assert!(!s.closed);
        // A waiting reader wakes on the next push.
        let log = Arc::new(log);
        let l2 = log.clone();
        let t = std::thread::spawn(move || l2.since(5, Duration::from_secs(30)));
        log.push("status", "{\"status\":\"stopped\"}".into(), true);
        let s = t.join().unwrap();
        assert_eq!(s.events[0].id, 6);
        assert!(s.closed);
    }
}
