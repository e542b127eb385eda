//! What the workers share: the arguments, the phase flags, and the counts
//! each session, exec worker and fault injection adds to.

use crate::args::Args;
use parking_lot::Mutex;
use std::collections::BTreeMap;
use std::net::TcpStream;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

pub(crate) struct Shared {
    pub(crate) args: Args,
    pub(crate) t0: Mutex<Option<Instant>>,
    /// The soak is over: workers wind down.
    pub(crate) stop: AtomicBool,
    /// Sampling: every client stays connected (execs pause mid-stream).
    pub(crate) hold: AtomicBool,
    pub(crate) sessions: Mutex<Vec<Arc<Sess>>>,
    pub(crate) exec_steady: Vec<AtomicBool>,
    pub(crate) execs: Mutex<ExecTotals>,
    pub(crate) faults: Mutex<FaultLog>,
}

impl Shared {
    pub(crate) fn stopping(&self) -> bool {
        self.stop.load(Ordering::SeqCst)
    }
    pub(crate) fn holding(&self) -> bool {
        self.hold.load(Ordering::SeqCst)
    }
    pub(crate) fn elapsed(&self) -> f64 {
        self.t0.lock().map_or(0.0, |t| t.elapsed().as_secs_f64())
    }
}

#[derive(Default)]
pub(crate) struct SessState {
    /// The session's id, once started (for the driver's own log lines).
    pub(crate) id: String,
    /// The next line number expected.
    pub(crate) next: u64,
    pub(crate) lines: u64,
    pub(crate) bytes: u64,
    pub(crate) lost_lines: u64,
    pub(crate) lost_bytes: u64,
    pub(crate) dup_lines: u64,
    pub(crate) bad_lines: u64,
    /// Frames whose seq skipped ahead, and gap announcements.
    pub(crate) seq_skipped: u64,
    pub(crate) seq_repeated: u64,
    pub(crate) gap_frames: u64,
    pub(crate) reconnects: u64,
    pub(crate) io_errors: u64,
    pub(crate) last_seq: u32,
    pub(crate) partial: Vec<u8>,
    pub(crate) last_progress: Option<Instant>,
    /// Longest time without a new line while connected and not killed.
    pub(crate) longest_quiet: Duration,
    pub(crate) killed_at: Option<Instant>,
    /// `run` ended events: (exit code, reason).
    pub(crate) runs_ended: Vec<(Option<i64>, String)>,
    /// Statuses other than starting/running seen before our stop.
    pub(crate) bad_status: Vec<String>,
    pub(crate) last_status: String,
    pub(crate) sse_reconnects: u64,
    /// kubegate's own lines on the app's stderr channel.
    pub(crate) notices: Vec<String>,
    pub(crate) start_error: Option<String>,
}

pub(crate) struct Sess {
    pub(crate) idx: usize,
    pub(crate) id: Mutex<String>,
    pub(crate) pod: Mutex<String>,
    pub(crate) st: Mutex<SessState>,
    pub(crate) steady: AtomicBool,
    /// The event stream's socket, shut down to end its reader.
    pub(crate) sse_sock: Mutex<Option<TcpStream>>,
    pub(crate) sse_done: AtomicBool,
}

#[derive(Default)]
pub(crate) struct ExecTotals {
    pub(crate) started: u64,
    pub(crate) completed: u64,
    pub(crate) lines: u64,
    pub(crate) bytes: u64,
    pub(crate) lost_bytes: u64,
    pub(crate) exit_wrong: u64,
    pub(crate) exit_lost: u64,
    pub(crate) stalled: u64,
    /// `error` frames after the upgrade, by code.
    pub(crate) errors: BTreeMap<String, u64>,
    /// Refusals before the upgrade (HTTP error code or connect failure).
    pub(crate) refused: BTreeMap<String, u64>,
    /// Every error frame's text, counted.
    pub(crate) messages: BTreeMap<String, u64>,
    pub(crate) details: Vec<String>,
}

impl ExecTotals {
    pub(crate) fn detail(&mut self, d: String) {
        if self.details.len() < 20 {
            self.details.push(d);
        }
    }
}

#[derive(Default)]
pub(crate) struct FaultLog {
    pub(crate) counts: BTreeMap<&'static str, u64>,
    pub(crate) failed_posts: u64,
    pub(crate) skipped: BTreeMap<&'static str, u64>,
}
