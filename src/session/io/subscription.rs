//! One subscriber's end of an [`AppIo`]: a [`Subscription`] (replay,
//! live frames, the close), the [`Canceller`] that ends it from another
//! thread, and the slow-subscriber hooks.

use super::ring::{AppIo, Item, SubShared};
use super::wire::{CLOSE_SLOW, SLOW_REASON};
use crossbeam_channel::{Receiver, RecvTimeoutError};
use std::collections::VecDeque;
use std::sync::{Arc, Weak};
use std::time::{Duration, Instant};
use tungstenite::protocol::frame::coding::CloseCode;
use tungstenite::protocol::CloseFrame;

/// One subscriber's view of an [`AppIo`]: replay, then live frames, then
/// (unless unsubscribed) one [`Item::Close`]. Dropping it unsubscribes.
pub struct Subscription {
    pub(super) io: Weak<AppIo>,
    pub(super) id: u64,
    pub(super) pending: VecDeque<Item>,
    pub(super) rx: Receiver<Item>,
    pub(super) shared: Arc<SubShared>,
    pub(super) done: bool,
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
pub(super) fn run_slow_hooks(slow: Vec<Arc<SubShared>>) {
    for s in slow {
        let hook = s.on_slow.lock().take();
        if let Some(h) = hook {
            h(close_frame(CLOSE_SLOW, SLOW_REASON));
        }
    }
}

pub(super) fn now_ns() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| u64::try_from(d.as_nanos()).unwrap_or(u64::MAX))
}

pub(super) fn close_frame(code: u16, reason: &str) -> CloseFrame {
    CloseFrame {
        code: CloseCode::from(code),
        reason: reason.to_string().into(),
    }
}
