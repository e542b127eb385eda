//! The session's live links to its pod's ports (docs/sessions.md#while-running),
//! all through the pod-access seam (`session::access`), so they
//! work in both `[cluster] pod_access` modes:
//!
//! - the debug relay ([`start_relay`]): per app, `GET /events` streamed
//!   from the app's debug port, parsing server-sent events
//!   (`session::sse`) and offering every valid JSON frame to a callback
//!   that never blocks; retries with backoff (0.5 s doubling to 5 s) until
//!   stopped, resuming with `Last-Event-ID`. No thread per relay: attempts
//!   run on two shared connector threads, the waits between them are jobs
//!   on the process-wide `crate::timer`, and every open stream is read by
//!   one `session-relay-pump` thread with epoll (`pump`);
//! - the reachability prober ([`probe`], [`start_probe`](probe::start_probe)): one thread per tcp port,
//!   `checking` at once, `reachable` on the first accepted connection,
//!   `unreachable` once after 30 s, then slower probes;
//! - the port proxy helper ([`proxy`], [`proxy_http`](proxy::proxy_http)): one HTTP exchange for the
//!   daemon's `…/ports/{port}/{path}` route, without hop-by-hop headers,
//!   the client's `Authorization` nor the headers upstream interprets
//!   (`session::proxy_path`).
//!
//! Threads: a probe is a `session-probe` thread, told to stop through its
//! handle (`stop()`, or `Drop`): a flag and a disconnected channel that
//! ends any wait at once (waits are `recv_timeout` on it, never a bare
//! sleep). A relay's `stop()` sets its flag, cancels its next attempt and
//! wakes the reader thread, which drops the relay's stream on its next
//! turn. `stop()` never waits (the engine's owner thread calls it).
//! Callbacks are not called once the stop is seen; a frame being
//! delivered at the very moment of the stop may still arrive, which the
//! machine tolerates (every input names its pod, and a stopped probe's
//! port is no longer in its set). A thread blocked in a connect or a
//! probe ends when that call returns (bounded by its timeout).
//! `stop_and_wait` is there for tests and shutdown.
//!
//! This file holds the relay itself (its handle, connector threads and
//! retries) and the stop flag and worker thread the prober shares; the
//! frame rule is `session::frame`, the header rule `http::hop`.

pub mod probe;
pub mod proxy;
mod pump;
#[cfg(test)]
mod tests;

use crate::session::access::{PodAccess, PodRequest, PodTarget};
use crate::session::access::{PollBody, StreamCanceller};
use crate::session::sse::SseParser;
use crossbeam_channel::{bounded, Receiver, RecvTimeoutError, Sender};
use serde_json::Value;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

/// The path of an app's event stream on its debug port.
pub const EVENTS_PATH: &str = "/events";

// ------------------------------------------------------------- stopping

/// What a handle and its thread share to stop it.
struct Stop {
    stopped: AtomicBool,
    /// Dropped by `stop()`: the thread's waits end at once.
    wake: Mutex<Option<Sender<()>>>,
    /// The relay's current stream, cut by `stop()`.
    current: Mutex<Option<StreamCanceller>>,
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

impl Stop {
    /// The shared state and the thread's end of the wake channel.
    fn new() -> (Arc<Stop>, Receiver<()>) {
        let (tx, rx) = bounded(1);
        let s = Stop {
            stopped: AtomicBool::new(false),
            wake: Mutex::new(Some(tx)),
            current: Mutex::new(None),
        };
        (Arc::new(s), rx)
    }

    fn is_stopped(&self) -> bool {
        self.stopped.load(Ordering::SeqCst)
    }

    fn stop(&self) {
        // The flag and the canceller slot change under the slot's lock, so
        // a stream that opens while we stop is either cut here or never
        // registered (the thread then cuts it itself).
        let current = {
            let mut slot = lock(&self.current);
            self.stopped.store(true, Ordering::SeqCst);
            slot.take()
        };
        if let Some(c) = current {
            c.cancel();
        }
        lock(&self.wake).take();
    }

    /// Registers the stream being read; false (and the stream cut) when
    /// the stop came first.
    fn set_current(&self, c: StreamCanceller) -> bool {
        let mut slot = lock(&self.current);
        if self.is_stopped() {
            drop(slot);
            c.cancel();
            return false;
        }
        *slot = Some(c);
        true
    }

    fn clear_current(&self) {
        lock(&self.current).take();
    }
}

/// Waits `d` on the wake channel: true when the time passed, false when
/// the thread must stop.
fn wait(wake: &Receiver<()>, stop: &Stop, d: Duration) -> bool {
    if stop.is_stopped() {
        return false;
    }
    matches!(wake.recv_timeout(d), Err(RecvTimeoutError::Timeout)) && !stop.is_stopped()
}

/// The thread behind a handle.
struct Worker {
    stop: Arc<Stop>,
    /// Disconnected when the thread ends (its sender is dropped then).
    done: Receiver<()>,
    thread: Option<JoinHandle<()>>,
}

impl Worker {
    fn spawn(name: &str, f: impl FnOnce(&Stop, &Receiver<()>) + Send + 'static) -> Worker {
        let (stop, wake) = Stop::new();
        let (done_tx, done) = bounded::<()>(1);
        let s = stop.clone();
        let thread = std::thread::Builder::new()
            .name(name.into())
            .spawn(move || {
                let _done = done_tx;
                f(&s, &wake);
            });
        let thread = match thread {
            Ok(t) => Some(t),
            Err(e) => {
                log::error!("spawning a {name} thread: {e}");
                None
            }
        };
        Worker { stop, done, thread }
    }

    fn is_finished(&self) -> bool {
        self.thread.as_ref().is_none_or(|t| t.is_finished())
    }

    fn stop_and_wait(&mut self, timeout: Duration) -> bool {
        self.stop.stop();
        match self.done.recv_timeout(timeout) {
            Err(RecvTimeoutError::Timeout) => false,
            _ => {
                if let Some(t) = self.thread.take() {
                    let _ = t.join();
                }
                true
            }
        }
    }
}

// ---------------------------------------------------------------- relay

/// The relay's timings (the defaults are docs/sessions.md's, "Debug relay,
/// reachability, port proxy").
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RelayTimings {
    /// The wait after the first failure (and after any stream that
    /// delivered a frame): 0.5 s.
    pub first_retry: Duration,
    /// The longest wait between attempts: 5 s.
    pub max_retry: Duration,
    /// The stream is given up (and retried) when nothing, not even a
    /// heartbeat comment, arrives for this long: 60 s. Also bounds the wait
    /// for the answer's head.
    pub idle: Duration,
}

impl Default for RelayTimings {
    fn default() -> Self {
        RelayTimings {
            first_retry: Duration::from_millis(500),
            max_retry: Duration::from_secs(5),
            idle: Duration::from_secs(60),
        }
    }
}

/// The wait before the next attempt: `first`, doubling to `max` while
/// attempts keep failing, back to `first` after a stream that delivered.
#[derive(Debug, Clone)]
pub struct Backoff {
    first: Duration,
    max: Duration,
    next: Duration,
}

impl Backoff {
    pub fn new(first: Duration, max: Duration) -> Backoff {
        Backoff {
            first,
            max: max.max(first),
            next: first,
        }
    }

    /// The wait after an attempt (`delivered`: it gave at least a frame).
    pub fn after(&mut self, delivered: bool) -> Duration {
        if delivered {
            self.next = self.first;
        }
        let d = self.next;
        self.next = (self.next * 2).min(self.max);
        d
    }
}

/// A running relay; stops when told or dropped.
pub struct RelayHandle {
    relay: Arc<Relay>,
}

/// One relay: what its attempts share. No thread waits between attempts:
/// the next one is a job on the process-wide timer (`crate::timer`), which
/// holds only a `Weak` (a dropped handle ends the relay); the attempt's
/// connect runs on one of the process's relay connector threads, and an
/// opened stream is read by the process's one reader thread ([`pump`]).
struct Relay {
    access: Arc<dyn PodAccess>,
    target: PodTarget,
    port: u16,
    timings: RelayTimings,
    stop: Arc<Stop>,
    /// Taken by the one attempt running (attempts never overlap).
    progress: Mutex<Progress>,
    /// An attempt thread is running.
    in_flight: parking_lot::Mutex<bool>,
    idle: parking_lot::Condvar,
}

struct Progress {
    parser: SseParser,
    backoff: Backoff,
    last_error: String,
    on_frame: Box<dyn FnMut(Value) -> Result<(), Value> + Send>,
}

impl RelayHandle {
    /// Ends the relay: cuts the stream being read, cancels the next
    /// attempt. Returns at once (see the module documentation).
    pub fn stop(&self) {
        self.relay.stop.stop();
    }

    /// [`RelayHandle::stop`], then waits up to `timeout` for a running
    /// attempt to end; true when none runs any more.
    pub fn stop_and_wait(self, timeout: Duration) -> bool {
        self.relay.stop.stop();
        let mut busy = self.relay.in_flight.lock();
        let deadline = Instant::now() + timeout;
        while *busy {
            if self.relay.idle.wait_until(&mut busy, deadline).timed_out() {
                return !*busy;
            }
        }
        true
    }

    /// Whether the relay is over: stopped, and no attempt running.
    pub fn is_finished(&self) -> bool {
        self.relay.stop.is_stopped() && !*self.relay.in_flight.lock()
    }
}

impl Drop for RelayHandle {
    fn drop(&mut self) {
        self.relay.stop.stop();
    }
}

/// Relays `GET /events` of `port` with the default timings.
pub fn start_relay(
    access: Arc<dyn PodAccess>,
    target: PodTarget,
    port: u16,
    on_frame: impl FnMut(Value) -> Result<(), Value> + Send + 'static,
) -> RelayHandle {
    start_relay_with(access, target, port, RelayTimings::default(), on_frame)
}

/// Relays `GET /events` of `port`: every valid frame ([`parse_frame`](crate::session::frame::parse_frame)) goes
/// to `on_frame`, in order, one call at a time. `on_frame` must not block
/// (it runs on the process's one relay reader thread): it gives a frame
/// it has no room for back (`Err`), and the relay offers it again before
/// reading more of that stream (backpressure, no frame dropped; the other
/// streams go on). The first attempt starts at once.
pub fn start_relay_with(
    access: Arc<dyn PodAccess>,
    target: PodTarget,
    port: u16,
    timings: RelayTimings,
    on_frame: impl FnMut(Value) -> Result<(), Value> + Send + 'static,
) -> RelayHandle {
    let (stop, _wake) = Stop::new();
    let relay = Arc::new(Relay {
        access,
        target,
        port,
        timings,
        stop,
        progress: Mutex::new(Progress {
            parser: SseParser::default(),
            backoff: Backoff::new(timings.first_retry, timings.max_retry),
            last_error: String::new(),
            on_frame: Box::new(on_frame),
        }),
        in_flight: parking_lot::Mutex::new(false),
        idle: parking_lot::Condvar::new(),
    });
    launch(&relay);
    RelayHandle { relay }
}

/// Threads that make relay connection attempts for every relay of the
/// process. A failed attempt (the common case: an app without a debug
/// stream, retried every 5 s) then costs a request on a thread that
/// already exists; only an attempt that opens a stream gets a thread of
/// its own, which reads the stream to its end.
const CONNECTOR_THREADS: usize = 2;
/// Attempts waiting for a connector: 4,096; when full, an attempt gets a
/// thread of its own (as it does if the connectors could not be started).
const CONNECT_QUEUE: usize = 4096;

static CONNECTORS: std::sync::OnceLock<Option<Sender<Arc<Relay>>>> = std::sync::OnceLock::new();

fn connectors() -> Option<&'static Sender<Arc<Relay>>> {
    CONNECTORS
        .get_or_init(|| {
            let (tx, rx) = bounded::<Arc<Relay>>(CONNECT_QUEUE);
            let mut started = 0;
            for _ in 0..CONNECTOR_THREADS {
                let rx = rx.clone();
                match std::thread::Builder::new()
                    .name("session-relays".into())
                    .spawn(move || rx.iter().for_each(|r| connect_step(&r)))
                {
                    Ok(_) => started += 1,
                    Err(e) => log::error!("spawning a relay connector thread: {e}"),
                }
            }
            (started > 0).then_some(tx)
        })
        .as_ref()
}

/// Starts the relay's next attempt: on a connector thread, or on a thread
/// of its own when they are all behind.
fn launch(relay: &Arc<Relay>) {
    if relay.stop.is_stopped() {
        return;
    }
    *relay.in_flight.lock() = true;
    if let Some(tx) = connectors() {
        if tx.try_send(relay.clone()).is_ok() {
            return;
        }
    }
    let r = relay.clone();
    let spawned = std::thread::Builder::new()
        .name("session-relay".into())
        .spawn(move || connect_step(&r));
    if let Err(e) = spawned {
        log::error!("spawning a session-relay thread: {e}");
        finish(relay, relay.timings.max_retry);
    }
}

/// One connection attempt; an opened stream goes to the reader thread
/// ([`pump`]), so the caller (a connector) is free at once.
fn connect_step(relay: &Arc<Relay>) {
    match open_stream(relay) {
        Ok(body) => pump::add(relay.clone(), body),
        Err(wait) => finish(relay, wait),
    }
}

/// The attempt is over: wake `stop_and_wait`, schedule the next one.
fn finish(relay: &Arc<Relay>, wait: Duration) {
    {
        let mut busy = relay.in_flight.lock();
        *busy = false;
        relay.idle.notify_all();
    }
    if !relay.stop.is_stopped() {
        schedule(relay, wait);
    }
}

/// The next attempt after `wait`, unless the relay is gone by then.
fn schedule(relay: &Arc<Relay>, wait: Duration) {
    let weak = Arc::downgrade(relay);
    crate::timer::after(wait, move || {
        if let Some(r) = weak.upgrade() {
            launch(&r);
        }
    });
}

fn what(relay: &Relay) -> String {
    format!(
        "debug stream {}:{}{EVENTS_PATH}",
        relay.target.name, relay.port
    )
}

/// Opens the stream (registered with the stop, so `stop()` cuts it); on
/// failure or stop the wait before the next attempt.
fn open_stream(relay: &Relay) -> Result<Box<dyn PollBody>, Duration> {
    let mut guard = lock(&relay.progress);
    let p = &mut *guard;
    let mut req = PodRequest::get(EVENTS_PATH)
        .header("Accept", "text/event-stream")
        .header("Cache-Control", "no-cache")
        .timeout(relay.timings.idle);
    if let Some(id) = p.parser.last_event_id() {
        req = req.header("Last-Event-ID", id);
    }
    p.parser.reset();
    match relay.access.stream_polled(&relay.target, relay.port, &req) {
        Ok(s) => {
            // The reader thread sees the stop flag when woken.
            if !relay.stop.set_current(StreamCanceller::new(pump::wake)) {
                return Err(Duration::ZERO);
            }
            p.last_error.clear();
            log::debug!("{}: connected", what(relay));
            Ok(s.body)
        }
        Err(e) => {
            // Apps without an event stream are common: say it once.
            let m = e.to_string();
            if m != p.last_error {
                log::debug!("{}: {m}", what(relay));
                p.last_error = m;
            }
            Err(p.backoff.after(false))
        }
    }
}
