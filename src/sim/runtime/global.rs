//! Process-wide machinery shared by every `Runtime`: the pid registry, the
//! spawner thread (every fork), the reaper thread (every wait) and the timer
//! thread (SIGTERM -> SIGKILL escalation).
//!
//! One per OS process because the things they manage are process-wide: the
//! subreaper flag, `waitid(P_ALL)` (two reapers would steal each other's
//! children), and PDEATHSIG (tied to the forking thread, which must live as
//! long as the process).

use super::process::ProcShared;
use crossbeam_channel::{bounded, Receiver, RecvTimeoutError, Sender};
use parking_lot::Mutex;
use std::cmp::Reverse;
use std::collections::{BinaryHeap, HashMap};
use std::io;
use std::sync::{Arc, Weak};
use std::time::{Duration, Instant};

/// A job run on the spawner thread.
pub(super) type SpawnJob = Box<dyn FnOnce() + Send>;

/// What the timer does when a deadline passes (if the process still runs).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub(super) enum TimerAction {
    /// Ask the shim to SIGKILL every descendant and itself.
    KillNow,
    /// The shim did not manage: SIGKILL the process group directly.
    HardKill,
}

struct TimerEntry {
    at: Instant,
    seq: u64,
    proc: Weak<ProcShared>,
    action: TimerAction,
}

impl PartialEq for TimerEntry {
    fn eq(&self, other: &Self) -> bool {
        (self.at, self.seq) == (other.at, other.seq)
    }
}
impl Eq for TimerEntry {}
impl PartialOrd for TimerEntry {
    fn partial_cmp(&self, other: &Self) -> Option<std::cmp::Ordering> {
        Some(self.cmp(other))
    }
}
impl Ord for TimerEntry {
    fn cmp(&self, other: &Self) -> std::cmp::Ordering {
        (self.at, self.seq).cmp(&(other.at, other.seq))
    }
}

pub(super) struct Global {
    /// Live shims by pid. The spawner inserts under this lock in the same
    /// critical section as the fork, so the reaper never sees an unknown pid
    /// that is really ours.
    pub(super) procs: Mutex<HashMap<i32, Arc<ProcShared>>>,
    spawn_tx: Sender<SpawnJob>,
    timer_tx: Sender<(Instant, Weak<ProcShared>, TimerAction)>,
    reaper_kick: Sender<()>,
    /// Our own pid: the shims check their parent against it.
    pub(super) self_pid: i32,
}

static GLOBAL: Mutex<Option<Arc<Global>>> = Mutex::new(None);

/// After asking a shim to kill everything, how long until the group gets a
/// SIGKILL from us directly (the shim is our code: this is a safety net).
pub(super) const HARD_KILL_AFTER: Duration = Duration::from_secs(2);

/// Capacity of the spawn queue: callers wait when 64 forks are queued.
const SPAWN_QUEUE: usize = 64;
/// Capacity of the timer queue (entries are tiny; the heap itself is unbounded
/// but holds at most two entries per live process).
const TIMER_QUEUE: usize = 1024;

impl Global {
    /// The process's one instance, created (and its threads started) on first
    /// use.
    pub(super) fn get() -> io::Result<Arc<Global>> {
        let mut slot = GLOBAL.lock();
        if let Some(g) = slot.as_ref() {
            return Ok(g.clone());
        }
        let self_pid = rustix::process::getpid();
        rustix::process::set_child_subreaper(Some(self_pid))?;
        raise_nofile_limit();

        let (spawn_tx, spawn_rx) = bounded::<SpawnJob>(SPAWN_QUEUE);
        let (timer_tx, timer_rx) = bounded(TIMER_QUEUE);
        let (reaper_kick, kick_rx) = bounded(1);
        let g = Arc::new(Global {
            procs: Mutex::new(HashMap::new()),
            spawn_tx,
            timer_tx,
            reaper_kick,
            self_pid: self_pid.as_raw_nonzero().get(),
        });
        std::thread::Builder::new()
            .name("sim-spawner".into())
            .spawn(move || {
                // Never ends: PDEATHSIG of every shim is tied to this thread.
                for job in spawn_rx {
                    job();
                }
            })?;
        let weak = Arc::downgrade(&g);
        std::thread::Builder::new()
            .name("sim-reaper".into())
            .spawn(move || reaper_loop(weak, kick_rx))?;
        std::thread::Builder::new()
            .name("sim-timer".into())
            .spawn(move || timer_loop(timer_rx))?;
        *slot = Some(g.clone());
        Ok(g)
    }

    /// Runs `job` on the spawner thread (waiting if 64 jobs are queued).
    pub(super) fn on_spawner(&self, job: SpawnJob) -> io::Result<()> {
        self.spawn_tx
            .send(job)
            .map_err(|_| io::Error::other("the sim's spawner thread is gone"))
    }

    /// Tells the reaper that there are children to wait for.
    pub(super) fn kick_reaper(&self) {
        let _ = self.reaper_kick.try_send(());
    }

    pub(super) fn schedule(&self, at: Instant, proc: &Arc<ProcShared>, action: TimerAction) {
        // A full queue means the timer thread is stuck or gone: the send then
        // waits, which is the honest backpressure.
        let _ = self.timer_tx.send((at, Arc::downgrade(proc), action));
    }
}

fn raise_nofile_limit() {
    use rustix::process::{getrlimit, setrlimit, Resource};
    let mut lim = getrlimit(Resource::Nofile);
    if lim.current != lim.maximum {
        lim.current = lim.maximum;
        if let Err(e) = setrlimit(Resource::Nofile, lim) {
            log::warn!("sim runtime: cannot raise RLIMIT_NOFILE: {e}");
        }
    }
}

/// Waits for every child of the process and hands exit statuses to their
/// `ProcShared`. Two steps per child: `waitid(WNOWAIT)` learns the pid while
/// the child is still a zombie (its pid cannot be reused yet), then, holding
/// that process's state lock, the real wait. Signal senders take the same lock
/// and check "not reaped", so no signal ever goes to a recycled pid.
fn reaper_loop(global: Weak<Global>, kick: Receiver<()>) {
    loop {
        // SAFETY: siginfo_t is plain data; zeroed is a valid value.
        let mut info: libc::siginfo_t = unsafe { std::mem::zeroed() };
        // SAFETY: waitid with a valid siginfo_t pointer; P_ALL ignores the id.
        let r = unsafe { libc::waitid(libc::P_ALL, 0, &mut info, libc::WEXITED | libc::WNOWAIT) };
        if r == -1 {
            let err = io::Error::last_os_error();
            match err.raw_os_error() {
                Some(libc::EINTR) => continue,
                Some(libc::ECHILD) => {
                    // No children: sleep until a spawn says there are.
                    let _ = kick.recv_timeout(Duration::from_secs(1));
                    continue;
                }
                _ => {
                    log::error!("sim reaper: waitid: {err}");
                    let _ = kick.recv_timeout(Duration::from_millis(100));
                    continue;
                }
            }
        }
        // SAFETY: waitid succeeded with WEXITED, so si_pid is the child's pid.
        let pid = unsafe { info.si_pid() };
        if pid <= 0 {
            continue;
        }
        let proc = global
            .upgrade()
            .and_then(|g| g.procs.lock().get(&pid).cloned());
        match proc {
            Some(p) => {
                let killed = p.reap(pid);
                if let Some(g) = global.upgrade() {
                    g.procs.lock().remove(&pid);
                    if killed {
                        sweep_orphans(&g);
                    }
                }
            }
            None => {
                // An orphan reparented to us (already dead) or a stray: reap.
                // Its own children have just been reparented to us in turn
                // (a chain like shim -> sh -> setsid'd sleep): sweep again so
                // the whole chain goes, one generation per death.
                let _ = wait_pid(pid);
                if let Some(g) = global.upgrade() {
                    sweep_orphans(&g);
                }
            }
        }
    }
}

/// A shim that died by SIGKILL may have left descendants that were outside
/// its process group; they were reparented to us (we are a subreaper), to our
/// main thread. Any child of ours that is not a registered shim is such an
/// orphan: SIGKILL it (the loop above reaps it). Our children cannot be
/// reused pids: only this thread reaps them.
fn sweep_orphans(g: &Global) {
    let path = format!("/proc/self/task/{}/children", g.self_pid);
    let Ok(list) = std::fs::read_to_string(path) else {
        return;
    };
    let procs = g.procs.lock();
    for pid in list
        .split_whitespace()
        .filter_map(|s| s.parse::<i32>().ok())
    {
        if !procs.contains_key(&pid) {
            if let Some(pid) = rustix::process::Pid::from_raw(pid) {
                let _ = rustix::process::kill_process(pid, rustix::process::Signal::KILL);
            }
        }
    }
}

/// Blocking `waitpid(pid)`, retried on EINTR. Returns the raw status.
pub(super) fn wait_pid(pid: i32) -> io::Result<i32> {
    loop {
        let mut status = 0;
        // SAFETY: waitpid on a specific pid with a valid status pointer.
        let r = unsafe { libc::waitpid(pid, &mut status, 0) };
        if r == pid {
            return Ok(status);
        }
        let err = io::Error::last_os_error();
        if err.raw_os_error() != Some(libc::EINTR) {
            return Err(err);
        }
    }
}

fn timer_loop(rx: Receiver<(Instant, Weak<ProcShared>, TimerAction)>) {
    let mut heap: BinaryHeap<Reverse<TimerEntry>> = BinaryHeap::new();
    let mut seq = 0u64;
    loop {
        let now = Instant::now();
        while heap.peek().is_some_and(|Reverse(e)| e.at <= now) {
            let Some(Reverse(e)) = heap.pop() else { break };
            let Some(p) = e.proc.upgrade() else {
                continue;
            };
            match e.action {
                TimerAction::KillNow => {
                    // Scheduled here, not through the queue: the timer thread
                    // must never wait on its own queue.
                    if p.request_kill() {
                        seq += 1;
                        heap.push(Reverse(TimerEntry {
                            at: Instant::now() + HARD_KILL_AFTER,
                            seq,
                            proc: Arc::downgrade(&p),
                            action: TimerAction::HardKill,
                        }));
                    }
                }
                TimerAction::HardKill => p.hard_kill(),
            }
        }
        let got = match heap.peek() {
            Some(Reverse(e)) => rx.recv_timeout(e.at.saturating_duration_since(now)),
            None => rx.recv().map_err(|_| RecvTimeoutError::Disconnected),
        };
        match got {
            Ok((at, proc, action)) => {
                seq += 1;
                heap.push(Reverse(TimerEntry {
                    at,
                    seq,
                    proc,
                    action,
                }));
            }
            Err(RecvTimeoutError::Timeout) => {}
            Err(RecvTimeoutError::Disconnected) => return,
        }
    }
}
