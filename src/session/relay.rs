//! The session's live links to its pod's ports (sessions.md "While
//! running"), all through the pod-access seam (`session::access`), so they
//! work in both `[cluster] pod_access` modes:
//!
//! - the debug relay ([`start_relay`]): per app, `GET /events` streamed
//!   from the app's debug port, parsing server-sent events
//!   (`session::sse`) and offering every valid JSON frame to a callback
//!   that never blocks; retries with backoff (0.5 s doubling to 5 s) until
//!   stopped, resuming with `Last-Event-ID`. No thread per relay: attempts
//!   run on two shared connector threads, the waits between them are jobs
//!   on the process-wide `crate::timer`, and every open stream is read by
//!   one `session-relay-pump` thread with epoll ([`pump`]);
//! - the reachability prober ([`start_probe`]): one thread per tcp port,
//!   `checking` at once, `reachable` on the first accepted connection,
//!   `unreachable` once after 30 s, then slower probes;
//! - the port proxy helper ([`proxy_http`]): one HTTP exchange for the
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

use crate::session::access::{AccessError, PodAccess, PodRequest, PodResponse, PodTarget};
use crate::session::access::{PollBody, StreamCanceller};
use crate::session::machine::Reach;
use crate::session::sse::SseParser;
use crossbeam_channel::{bounded, Receiver, RecvTimeoutError, Sender};
use serde_json::Value;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};
use ureq::http::Method;

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

/// The relay's timings (the defaults are the spec's).
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

/// Relays `GET /events` of `port`: every valid frame ([`parse_frame`]) goes
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
/// Attempts waiting for a connector; when full, an attempt gets a thread
/// of its own (as it does if the connectors could not be started).
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
    let mut headers = vec![
        ("Accept".to_string(), "text/event-stream".to_string()),
        ("Cache-Control".to_string(), "no-cache".to_string()),
    ];
    if let Some(id) = p.parser.last_event_id() {
        headers.push(("Last-Event-ID".to_string(), id.to_string()));
    }
    p.parser.reset();
    match relay.access.stream_polled(
        &relay.target,
        relay.port,
        EVENTS_PATH,
        &headers,
        relay.timings.idle,
    ) {
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

/// The one thread that reads every open debug stream of the process
/// (`session-relay-pump`): epoll on their sockets and an eventfd, so an
/// idle app's open stream costs its socket and a small entry, not a
/// thread and buffers of its own. Frames are offered to the relay's
/// `on_frame` without blocking; a refused one is kept (one per stream)
/// and that stream is not read until it is taken: its TCP window fills
/// and the app's writes wait, as they would with a reader thread blocked
/// on a full inbox. A stream ends at its end, on an error, after `idle`
/// without a byte, or when its relay stops; the relay's next attempt is
/// then scheduled as before.
mod pump {
    use super::{finish, lock, parse_frame, what, Relay};
    use crate::http::stream::Waker;
    use crate::session::access::PollBody;
    use crate::session::sse::SseError;
    use rustix::buffer::spare_capacity;
    use rustix::event::epoll;
    use serde_json::Value;
    use std::collections::HashMap;
    use std::io::ErrorKind;
    use std::os::fd::OwnedFd;
    use std::sync::{Arc, OnceLock};
    use std::time::{Duration, Instant};

    /// One read's size; the buffer is the thread's, not a stream's.
    const READ_BUF: usize = 16 * 1024;
    /// Reads of one stream per turn, so a busy stream cannot starve the
    /// others (poll reports it readable again at once).
    const READS_PER_TURN: usize = 16;
    /// How soon a refused frame is offered again.
    const RETRY_PENDING: Duration = Duration::from_millis(20);
    /// Stops and idle deadlines are looked at this often (and on a wake).
    const SWEEP: Duration = Duration::from_secs(1);
    /// The eventfd's key; streams get the keys after it.
    const WAKER: u64 = 0;

    struct Open {
        relay: Arc<Relay>,
        body: Box<dyn PollBody>,
        delivered: usize,
        last_data: Instant,
        pending: Option<Value>,
    }

    struct Pump {
        waker: Waker,
        incoming: parking_lot::Mutex<Vec<Open>>,
    }

    static PUMP: OnceLock<Option<Arc<Pump>>> = OnceLock::new();

    fn get() -> Option<&'static Arc<Pump>> {
        PUMP.get_or_init(|| {
            let waker = match Waker::new() {
                Ok(w) => w,
                Err(e) => {
                    log::error!("the debug relays' reader: eventfd: {e}");
                    return None;
                }
            };
            let p = Arc::new(Pump {
                waker,
                incoming: parking_lot::Mutex::new(Vec::new()),
            });
            let q = p.clone();
            match std::thread::Builder::new()
                .name("session-relay-pump".into())
                .spawn(move || run(&q))
            {
                Ok(_) => Some(p),
                Err(e) => {
                    log::error!("spawning the debug relays' reader thread: {e}");
                    None
                }
            }
        })
        .as_ref()
    }

    /// Wakes the reader: a relay stopped (its stream is dropped on the
    /// next turn).
    pub(super) fn wake() {
        if let Some(p) = get() {
            p.waker.wake();
        }
    }

    /// Hands an opened stream to the reader thread.
    pub(super) fn add(relay: Arc<Relay>, body: Box<dyn PollBody>) {
        let Some(p) = get() else {
            relay.stop.clear_current();
            let wait = relay.timings.max_retry;
            return finish(&relay, wait);
        };
        p.incoming.lock().push(Open {
            relay,
            body,
            delivered: 0,
            last_data: Instant::now(),
            pending: None,
        });
        p.waker.wake();
    }

    /// The reader's loop. epoll, one-shot per stream: a wake costs the
    /// streams that have something, not a pass over every open stream (a
    /// poll(2) over all of them cost 18% of a core at 1,400 idle streams,
    /// each runner's heartbeat waking the whole set). A stream is re-armed
    /// after its turn unless a frame of it waits for room (retried every
    /// 20 ms, unread meanwhile) or it has bytes buffered (another turn at
    /// once). Stops (the eventfd) and idle deadlines are checked in a sweep
    /// over every stream: on a wake, and once a second.
    fn run(p: &Pump) {
        let ep = match epoll::create(epoll::CreateFlags::CLOEXEC) {
            Ok(fd) => fd,
            Err(e) => return fail_all(p, &format!("epoll_create: {e}")),
        };
        if let Err(e) = epoll::add(
            &ep,
            p.waker.fd(),
            epoll::EventData::new_u64(WAKER),
            epoll::EventFlags::IN,
        ) {
            return fail_all(p, &format!("epoll_ctl: {e}"));
        }
        let mut open: HashMap<u64, Open> = HashMap::new();
        let mut next_key = WAKER + 1;
        let mut buf = vec![0u8; READ_BUF];
        let mut ready: Vec<u64> = Vec::new();
        let mut pending: Vec<u64> = Vec::new();
        let mut events: Vec<epoll::Event> = Vec::with_capacity(256);
        let mut next_sweep = Instant::now() + SWEEP;
        let mut next_retry = Instant::now();
        loop {
            let mut sweep = false;
            for o in p.incoming.lock().drain(..) {
                let key = next_key;
                next_key += 1;
                // Bytes may have come with the head: a turn at once.
                ready.push(key);
                open.insert(key, o);
            }
            let now = Instant::now();
            if !pending.is_empty() && now >= next_retry {
                ready.append(&mut pending);
                next_retry = now + RETRY_PENDING;
            }
            for key in std::mem::take(&mut ready) {
                let Some(o) = open.get_mut(&key) else {
                    continue;
                };
                if !turn(o, true, &mut buf) {
                    close(&ep, &mut open, key);
                } else if o.pending.is_some() {
                    pending.push(key);
                } else if o.body.has_buffered_input() {
                    ready.push(key);
                } else if !arm(&ep, o, key) {
                    close(&ep, &mut open, key);
                }
            }
            // Wait: for a stream with bytes, the eventfd, the sweep, or the
            // next offer of a kept frame.
            let now = Instant::now();
            let mut until = next_sweep;
            if !pending.is_empty() {
                until = until.min(next_retry);
            }
            let timeout = if ready.is_empty() {
                until.saturating_duration_since(now)
            } else {
                Duration::ZERO
            };
            let ts = rustix::event::Timespec::try_from(timeout).ok();
            events.clear();
            match epoll::wait(&ep, spare_capacity(&mut events), ts.as_ref()) {
                Ok(_) | Err(rustix::io::Errno::INTR) => {}
                Err(e) => {
                    log::error!("the debug relays' reader: epoll_wait: {e}");
                    std::thread::sleep(Duration::from_millis(100));
                }
            }
            for ev in &events {
                match ev.data.u64() {
                    WAKER => {
                        p.waker.reset();
                        sweep = true;
                    }
                    key => ready.push(key),
                }
            }
            let now = Instant::now();
            if sweep || now >= next_sweep {
                next_sweep = now + SWEEP;
                let over: Vec<u64> = open
                    .iter()
                    .filter(|(_, o)| {
                        o.relay.stop.is_stopped()
                            || (o.pending.is_none()
                                && now.duration_since(o.last_data) >= o.relay.timings.idle)
                    })
                    .map(|(k, _)| *k)
                    .collect();
                for key in over {
                    if let Some(o) = open.get(&key) {
                        if !o.relay.stop.is_stopped() {
                            log::debug!(
                                "{}: nothing for {:?}; reconnecting",
                                what(&o.relay),
                                o.relay.timings.idle
                            );
                        }
                    }
                    close(&ep, &mut open, key);
                    pending.retain(|k| *k != key);
                    ready.retain(|k| *k != key);
                }
            }
        }
    }

    /// Waits for the stream's next bytes (one event, then re-armed after
    /// its turn); false when the kernel refuses.
    fn arm(ep: &OwnedFd, o: &Open, key: u64) -> bool {
        let flags = epoll::EventFlags::IN | epoll::EventFlags::ONESHOT;
        let data = epoll::EventData::new_u64(key);
        match epoll::modify(ep, o.body.fd(), data, flags) {
            Ok(()) => true,
            Err(rustix::io::Errno::NOENT) => epoll::add(ep, o.body.fd(), data, flags).is_ok(),
            Err(e) => {
                log::debug!("{}: epoll_ctl: {e}", what(&o.relay));
                false
            }
        }
    }

    /// Ends a stream: out of the interest list, the next attempt scheduled.
    fn close(ep: &OwnedFd, open: &mut HashMap<u64, Open>, key: u64) {
        if let Some(o) = open.remove(&key) {
            let _ = epoll::delete(ep, o.body.fd());
            end(o);
        }
    }

    /// Without epoll, no stream can be read: each relay retries later.
    fn fail_all(p: &Pump, why: &str) {
        log::error!("the debug relays' reader: {why}");
        loop {
            for o in p.incoming.lock().drain(..) {
                end(o);
            }
            let _ =
                crate::http::stream::wait_readable(p.waker.fd(), &p.waker, Duration::from_secs(1));
            p.waker.reset();
        }
    }

    /// One turn of a stream: offer a kept frame, hand out the events the
    /// parser holds, read what the socket has. False when it is over.
    fn turn(o: &mut Open, readable: bool, buf: &mut [u8]) -> bool {
        if o.relay.stop.is_stopped() {
            return false;
        }
        let now = Instant::now();
        let may_read = readable || o.body.has_buffered_input();
        if o.pending.is_none() && !may_read {
            if now.duration_since(o.last_data) >= o.relay.timings.idle {
                log::debug!(
                    "{}: nothing for {:?}; reconnecting",
                    what(&o.relay),
                    o.relay.timings.idle
                );
                return false;
            }
            return true;
        }
        let relay = o.relay.clone();
        let mut guard = lock(&relay.progress);
        let p = &mut *guard;
        if let Some(f) = o.pending.take() {
            match (p.on_frame)(f) {
                Ok(()) => o.delivered += 1,
                Err(f) => {
                    o.pending = Some(f);
                    return true;
                }
            }
        }
        if !hand_out(o, p) {
            return true;
        }
        for _ in 0..READS_PER_TURN {
            match o.body.read(buf) {
                Ok(0) => {
                    log::debug!("{}: ended", what(&o.relay));
                    return false;
                }
                Ok(n) => {
                    o.last_data = now;
                    p.parser.push(&buf[..n]);
                    if !hand_out(o, p) {
                        return true;
                    }
                }
                Err(e) if e.kind() == ErrorKind::WouldBlock => return true,
                Err(e) if e.kind() == ErrorKind::Interrupted => {}
                Err(e) => {
                    if !o.relay.stop.is_stopped() {
                        log::debug!("{}: {e}", what(&o.relay));
                    }
                    return false;
                }
            }
        }
        true
    }

    /// Offers the parsed events' frames; false when one was refused (kept).
    fn hand_out(o: &mut Open, p: &mut super::Progress) -> bool {
        while let Some(ev) = p.parser.next_event() {
            match ev {
                Ok(ev) => {
                    let Some(frame) = parse_frame(&ev.data) else {
                        continue;
                    };
                    if o.relay.stop.is_stopped() {
                        return true;
                    }
                    match (p.on_frame)(frame) {
                        Ok(()) => o.delivered += 1,
                        Err(f) => {
                            o.pending = Some(f);
                            return false;
                        }
                    }
                }
                Err(e @ SseError::TooLarge { .. }) => log::warn!("{}: {e}", what(&o.relay)),
            }
        }
        true
    }

    /// The stream is over: the next attempt after the backoff.
    fn end(o: Open) {
        let Open {
            relay,
            body,
            delivered,
            ..
        } = o;
        drop(body);
        relay.stop.clear_current();
        let wait = lock(&relay.progress).backoff.after(delivered > 0);
        finish(&relay, wait);
    }
}

/// A debug frame from an event's data, or `None` (skipped): a JSON object
/// that is either an event (`kind` absent or `"event"`, `event` a string;
/// `timestamp`, `payload`, `metadata` optional and passed as they are) or a
/// log line (`kind: "log"`, `stream` and `line` strings). Nothing is added
/// or removed: subscribers get the app's object.
pub fn parse_frame(data: &str) -> Option<Value> {
    let v: Value = serde_json::from_str(data).ok()?;
    let obj = v.as_object()?;
    let is_str = |k: &str| obj.get(k).is_some_and(Value::is_string);
    let ok = match obj.get("kind") {
        None => is_str("event"),
        Some(Value::String(k)) if k == "event" => is_str("event"),
        Some(Value::String(k)) if k == "log" => is_str("stream") && is_str("line"),
        Some(_) => false,
    };
    ok.then_some(v)
}

// ---------------------------------------------------------------- probe

/// The prober's timings (the defaults are the spec's).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ProbeTimings {
    /// Between probe starts until `unreachable` is reported: 1 s.
    pub interval: Duration,
    /// One probe's timeout: 1 s.
    pub timeout: Duration,
    /// Without success for this long, `unreachable` (once): 30 s.
    pub unreachable_after: Duration,
    /// Between probe starts after that: 5 s.
    pub slow_interval: Duration,
}

impl Default for ProbeTimings {
    fn default() -> Self {
        ProbeTimings {
            interval: Duration::from_secs(1),
            timeout: Duration::from_secs(1),
            unreachable_after: Duration::from_secs(30),
            slow_interval: Duration::from_secs(5),
        }
    }
}

/// A running probe; stops when told, dropped, or after `reachable`.
pub struct ProbeHandle {
    worker: Worker,
}

impl ProbeHandle {
    /// Ends the probe (a probe in flight ends within its timeout; no state
    /// is reported after it). Returns at once.
    pub fn stop(&self) {
        self.worker.stop.stop();
    }

    /// [`ProbeHandle::stop`], then waits up to `timeout` for the thread to
    /// end; true when it did.
    pub fn stop_and_wait(mut self, timeout: Duration) -> bool {
        self.worker.stop_and_wait(timeout)
    }

    /// Whether the thread has ended (stopped, or `reachable` reported).
    pub fn is_finished(&self) -> bool {
        self.worker.is_finished()
    }
}

impl Drop for ProbeHandle {
    fn drop(&mut self) {
        self.worker.stop.stop();
    }
}

/// Probes `port` with the default timings.
pub fn start_probe(
    access: Arc<dyn PodAccess>,
    target: PodTarget,
    port: u16,
    on_state: impl Fn(Reach) + Send + 'static,
) -> ProbeHandle {
    start_probe_with(access, target, port, ProbeTimings::default(), on_state)
}

/// Probes `port` (`PodAccess::probe_tcp`): `Checking` at once, `Reachable`
/// on the first success (then the thread ends), `Unreachable` once after
/// `unreachable_after` without success, then slower probes that may still
/// report `Reachable`. A failure to ask (the pod not found, the API server
/// refusing) counts as not reachable; the engine stops the probe with the
/// pod.
pub fn start_probe_with(
    access: Arc<dyn PodAccess>,
    target: PodTarget,
    port: u16,
    timings: ProbeTimings,
    on_state: impl Fn(Reach) + Send + 'static,
) -> ProbeHandle {
    let worker = Worker::spawn("session-probe", move |stop, wake| {
        probe_loop(&*access, &target, port, timings, stop, wake, &on_state)
    });
    ProbeHandle { worker }
}

fn probe_loop(
    access: &dyn PodAccess,
    target: &PodTarget,
    port: u16,
    timings: ProbeTimings,
    stop: &Stop,
    wake: &Receiver<()>,
    on_state: &dyn Fn(Reach),
) {
    let tell = |r: Reach| {
        if !stop.is_stopped() {
            on_state(r);
        }
    };
    tell(Reach::Checking);
    let start = Instant::now();
    let mut told_unreachable = false;
    let mut last_error = String::new();
    loop {
        if stop.is_stopped() {
            return;
        }
        let t0 = Instant::now();
        let ok = match access.probe_tcp(target, port, timings.timeout) {
            Ok(ok) => ok,
            Err(e) => {
                let m = e.to_string();
                if m != last_error {
                    log::debug!("probing {}:{port}: {m}", target.name);
                    last_error = m;
                }
                false
            }
        };
        if ok {
            tell(Reach::Reachable);
            return;
        }
        if !told_unreachable && start.elapsed() >= timings.unreachable_after {
            told_unreachable = true;
            tell(Reach::Unreachable);
        }
        let every = if told_unreachable {
            timings.slow_interval
        } else {
            timings.interval
        };
        if !wait(
            wake,
            stop,
            (t0 + every).saturating_duration_since(Instant::now()),
        ) {
            return;
        }
    }
}

// ----------------------------------------------------------- port proxy

/// Bounds of one proxied exchange.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ProxyLimits {
    /// The whole exchange: 60 s (api-proxy: see `session::access`).
    pub timeout: Duration,
    /// The app's answer body: 16 MiB (the answer is read whole).
    pub max_response_bytes: usize,
}

impl Default for ProxyLimits {
    fn default() -> Self {
        ProxyLimits {
            timeout: Duration::from_secs(60),
            max_response_bytes: 16 << 20,
        }
    }
}

/// Hop-by-hop headers (RFC 9110 section 7.6.1, plus the old
/// `Proxy-Connection` and `Keep-Alive`), and the framing headers: the
/// exchange below re-frames both ways.
const HOP_BY_HOP: &[&str] = &[
    "connection",
    "proxy-connection",
    "keep-alive",
    "proxy-authenticate",
    "proxy-authorization",
    "te",
    "trailer",
    "transfer-encoding",
    "upgrade",
    "content-length",
    "host",
];

/// `headers` without hop-by-hop ones (those above and those the
/// `Connection` header names) and without `also`.
pub fn end_to_end_headers(headers: &[(String, String)], also: &[&str]) -> Vec<(String, String)> {
    let named: Vec<String> = headers
        .iter()
        .filter(|(k, _)| k.eq_ignore_ascii_case("connection"))
        .flat_map(|(_, v)| v.split(','))
        .map(|t| t.trim().to_ascii_lowercase())
        .filter(|t| !t.is_empty())
        .collect();
    headers
        .iter()
        .filter(|(k, _)| {
            let k = k.to_ascii_lowercase();
            !HOP_BY_HOP.contains(&k.as_str())
                && !also.iter().any(|a| a.eq_ignore_ascii_case(&k))
                && !named.contains(&k)
        })
        .cloned()
        .collect()
}

/// One HTTP exchange with `port` of the pod for the daemon's port proxy
/// route, with the default [`ProxyLimits`].
pub fn proxy_http(
    access: &dyn PodAccess,
    target: &PodTarget,
    port: u16,
    method: Method,
    path_and_query: &str,
    headers: &[(String, String)],
    body: Option<Vec<u8>>,
) -> Result<PodResponse, AccessError> {
    proxy_http_with(
        access,
        target,
        port,
        method,
        path_and_query,
        headers,
        body,
        ProxyLimits::default(),
    )
}

/// [`proxy_http`] with explicit bounds. The client's hop-by-hop headers,
/// its `Authorization` (kubegate's credential, not the app's) and the
/// headers the API server or kubelet interpret
/// (`session::proxy_path::forward_headers`) are dropped; so are the answer's hop-by-hop and framing headers (the body
/// comes back whole; the route frames it anew). The app's status, errors
/// included, is the answer; `AccessError` is for no answer at all.
#[allow(clippy::too_many_arguments)]
pub fn proxy_http_with(
    access: &dyn PodAccess,
    target: &PodTarget,
    port: u16,
    method: Method,
    path_and_query: &str,
    headers: &[(String, String)],
    body: Option<Vec<u8>>,
    limits: ProxyLimits,
) -> Result<PodResponse, AccessError> {
    let req = PodRequest {
        method,
        path: path_and_query.to_string(),
        headers: crate::session::proxy_path::forward_headers(headers),
        body,
        timeout: limits.timeout,
        max_response_bytes: limits.max_response_bytes,
    };
    let mut resp = access.request(target, port, &req)?;
    resp.headers = end_to_end_headers(&resp.headers, &[]);
    Ok(resp)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::session::access::DirectAccess;
    use crossbeam_channel::unbounded;
    use serde_json::json;
    use std::io::Read;
    use std::io::{BufRead, BufReader, Write};
    use std::net::{TcpListener, TcpStream};

    /// One connection as the server saw it: when it came, its request head
    /// (names lower-cased) and body.
    struct Conn {
        at: Instant,
        head: String,
        body: Vec<u8>,
    }

    /// A scripted HTTP server on 127.0.0.1: every connection's request is
    /// reported on `conns`, then `handler(index, socket)` answers.
    struct Script {
        port: u16,
        conns: Receiver<Conn>,
        stop: Arc<AtomicBool>,
    }

    impl Drop for Script {
        fn drop(&mut self) {
            self.stop.store(true, Ordering::SeqCst);
            // Wakes the accept.
            let _ = TcpStream::connect(("127.0.0.1", self.port));
        }
    }

    fn script(handler: impl Fn(usize, TcpStream) + Send + Sync + 'static) -> Script {
        let l = TcpListener::bind("127.0.0.1:0").expect("bind");
        let port = l.local_addr().expect("addr").port();
        let (tx, conns) = unbounded();
        let stop = Arc::new(AtomicBool::new(false));
        let st = stop.clone();
        let handler = Arc::new(handler);
        std::thread::spawn(move || {
            for (i, s) in l.incoming().enumerate() {
                if st.load(Ordering::SeqCst) {
                    return;
                }
                let Ok(s) = s else { continue };
                let (tx, handler) = (tx.clone(), handler.clone());
                std::thread::spawn(move || {
                    let at = Instant::now();
                    let Ok(r) = s.try_clone() else { return };
                    let mut r = BufReader::new(r);
                    let mut head = String::new();
                    let mut len = 0usize;
                    loop {
                        let mut line = String::new();
                        if r.read_line(&mut line).unwrap_or(0) == 0 {
                            break;
                        }
                        let line = line.to_ascii_lowercase();
                        if let Some(v) = line.strip_prefix("content-length:") {
                            len = v.trim().parse().unwrap_or(0);
                        }
                        head.push_str(&line);
                        if line == "\r\n" {
                            break;
                        }
                    }
                    let mut body = vec![0u8; len];
                    let _ = r.read_exact(&mut body);
                    let _ = tx.send(Conn { at, head, body });
                    handler(i, s);
                });
            }
        });
        Script { port, conns, stop }
    }

    const SSE_HEAD: &[u8] =
        b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nCache-Control: no-cache\r\n\r\n";

    /// Reads until the client closes; then says so on `closed`.
    fn hold(mut s: TcpStream, closed: &Sender<()>) {
        let mut buf = [0u8; 1024];
        while matches!(s.read(&mut buf), Ok(n) if n > 0) {}
        let _ = closed.send(());
    }

    fn target() -> PodTarget {
        PodTarget {
            namespace: "default".into(),
            name: "kubegate-watch-test".into(),
            ip: "127.0.0.1".into(),
        }
    }

    fn access() -> Arc<dyn PodAccess> {
        Arc::new(DirectAccess::new())
    }

    fn fast_relay() -> RelayTimings {
        RelayTimings {
            first_retry: Duration::from_millis(10),
            max_retry: Duration::from_millis(50),
            idle: Duration::from_secs(10),
        }
    }

    fn relay(port: u16, timings: RelayTimings) -> (RelayHandle, Receiver<Value>) {
        let (tx, rx) = unbounded();
        let h = start_relay_with(access(), target(), port, timings, move |f| {
            let _ = tx.send(f);
            Ok(())
        });
        (h, rx)
    }

    const WAIT: Duration = Duration::from_secs(10);

    fn next<T>(rx: &Receiver<T>, what: &str) -> T {
        rx.recv_timeout(WAIT)
            .unwrap_or_else(|e| panic!("{what}: {e}"))
    }

    /// Polls `f` until true or the deadline (never a bare sleep as a wait).
    fn until(what: &str, mut f: impl FnMut() -> bool) {
        let deadline = Instant::now() + WAIT;
        let (_tx, tick) = bounded::<()>(1);
        while !f() {
            assert!(Instant::now() < deadline, "timed out waiting for {what}");
            let _ = tick.recv_timeout(Duration::from_millis(5));
        }
    }

    #[test]
    fn frames_are_parsed_and_others_skipped() {
        let event =
            json!({"event": "Kernel.PortsResolved", "payload": {"ports": [{"port": 8080}]}});
        let typed = json!({"kind": "event", "timestamp": "2024-01-01T00:00:00Z", "event": "x", "metadata": {"a": 1}});
        let log = json!({"kind": "log", "timestamp": 1, "stream": "stdout", "line": "hi"});
        assert_eq!(parse_frame(&event.to_string()), Some(event.clone()));
        assert_eq!(parse_frame(&typed.to_string()), Some(typed));
        assert_eq!(parse_frame(&log.to_string()), Some(log));
        for bad in [
            "",
            "not json",
            "[1, 2]",
            "\"event\"",
            "{}",
            r#"{"event": 3}"#,
            r#"{"kind": "other", "event": "x"}"#,
            r#"{"kind": 1, "event": "x"}"#,
            r#"{"kind": "log", "stream": "stdout"}"#,
            r#"{"kind": "log", "stream": "stdout", "line": 3}"#,
            r#"{"kind": "event", "line": "x", "stream": "stdout"}"#,
        ] {
            assert_eq!(parse_frame(bad), None, "{bad}");
        }
    }

    #[test]
    fn backoff_doubles_to_the_cap_and_resets_after_delivery() {
        let ms = Duration::from_millis;
        let mut b = Backoff::new(ms(500), ms(5000));
        let waits: Vec<_> = (0..7).map(|_| b.after(false)).collect();
        assert_eq!(
            waits,
            [500, 1000, 2000, 4000, 5000, 5000, 5000].map(ms).to_vec()
        );
        assert_eq!(b.after(true), ms(500));
        assert_eq!(b.after(false), ms(1000));
        assert_eq!(b.after(true), ms(500));
    }

    /// Serves `n` numbered events at once, then holds the stream open.
    fn numbered(n: usize) -> Script {
        script(move |_, mut s| {
            let mut body = SSE_HEAD.to_vec();
            for i in 0..n {
                body.extend_from_slice(
                    format!("id: {i}\ndata: {{\"event\":\"n\",\"payload\":{i}}}\n\n").as_bytes(),
                );
            }
            if s.write_all(&body).is_ok() {
                let (tx, _rx) = unbounded();
                hold(s, &tx);
            }
        })
    }

    #[test]
    fn a_refused_frame_is_offered_again_and_nothing_is_dropped_or_reordered() {
        let srv = numbered(200);
        // Room for 4 frames; a slow consumer drains it. Refusals give the
        // frame back, which the relay must offer again, in order.
        let (tx, rx) = bounded::<Value>(4);
        let refused = Arc::new(std::sync::atomic::AtomicUsize::new(0));
        let r = refused.clone();
        let h = start_relay_with(access(), target(), srv.port, fast_relay(), move |f| {
            tx.try_send(f).map_err(|e| {
                r.fetch_add(1, Ordering::SeqCst);
                e.into_inner()
            })
        });
        for i in 0..200 {
            let f = next(&rx, "the next frame");
            assert_eq!(f["payload"], i, "frame {i}");
            if i % 25 == 0 {
                // Slow now and then: the channel fills.
                let (_t, tick) = bounded::<()>(1);
                let _ = tick.recv_timeout(Duration::from_millis(30));
            }
        }
        assert!(
            refused.load(Ordering::SeqCst) > 0,
            "the consumer was slow enough to refuse"
        );
        assert!(h.stop_and_wait(WAIT));
    }

    #[test]
    fn a_silent_stream_is_given_up_after_the_idle_time_and_reopened() {
        let srv = script(|_, mut s| {
            if s.write_all(SSE_HEAD).is_ok() {
                let (tx, _rx) = unbounded();
                hold(s, &tx);
            }
        });
        let timings = RelayTimings {
            idle: Duration::from_millis(300),
            ..fast_relay()
        };
        let (h, _frames) = relay(srv.port, timings);
        let first = next(&srv.conns, "the first request");
        let second = next(&srv.conns, "a new request after the silence");
        let gap = second.at - first.at;
        // The idle time, then the sweep's second at most, then the backoff.
        assert!(
            gap >= Duration::from_millis(300) && gap < Duration::from_secs(5),
            "{gap:?}"
        );
        assert!(h.stop_and_wait(WAIT));
    }

    #[test]
    fn a_relay_whose_consumer_is_full_does_not_hold_up_the_others() {
        let (stuck_srv, free_srv) = (numbered(10), numbered(10));
        // Never any room.
        let stuck = start_relay_with(access(), target(), stuck_srv.port, fast_relay(), Err);
        let (free, rx) = relay(free_srv.port, fast_relay());
        for i in 0..10 {
            assert_eq!(next(&rx, "a frame of the free relay")["payload"], i);
        }
        assert!(
            stuck.stop_and_wait(WAIT),
            "a stopped relay ends while refused"
        );
        assert!(free.stop_and_wait(WAIT));
    }

    #[test]
    fn relay_delivers_events_and_log_lines_skipping_the_rest() {
        let (closed_tx, closed) = unbounded();
        let srv = script(move |_, mut s| {
            let body: &[&[u8]] = &[
                SSE_HEAD,
                b": heartbeat\n\n",
                b"data: {\"event\":\"Kernel.PortsResolved\",\"payload\":{\"ports\":[{\"port\":8080}]}}\n\n",
                b"data: not json\n\n",
                b"event: odd\r\ndata: [1]\r\n\r\n",
                b"data: {\"kind\":\"log\",\"timestamp\":1,",
                b"\"stream\":\"stderr\",\"line\":\"boom\"}\n\n",
                b"data: {\"kind\":\"other\",\"event\":\"x\"}\n\n",
                b"data: {\"kind\":\"log\",\n",
                b"data: \"stream\":\"stdout\",\"line\":\"two data lines\"}\n\n",
                b": heartbeat\n\n",
            ];
            for part in body {
                if s.write_all(part).is_err() {
                    return;
                }
            }
            hold(s, &closed_tx);
        });
        let (h, frames) = relay(srv.port, fast_relay());
        let conn = next(&srv.conns, "the relay's request");
        assert!(
            conn.head.starts_with("get /events http/1.1\r\n"),
            "{}",
            conn.head
        );
        assert!(conn.head.contains("accept: text/event-stream\r\n"));
        assert!(!conn.head.contains("last-event-id"));
        assert_eq!(
            next(&frames, "the event"),
            json!({"event": "Kernel.PortsResolved", "payload": {"ports": [{"port": 8080}]}})
        );
        assert_eq!(
            next(&frames, "the log line"),
            json!({"kind": "log", "timestamp": 1, "stream": "stderr", "line": "boom"})
        );
        assert_eq!(
            next(&frames, "the split log line"),
            json!({"kind": "log", "stream": "stdout", "line": "two data lines"})
        );
        assert!(h.stop_and_wait(WAIT));
        next(&closed, "the server saw the relay close");
        assert!(frames.try_recv().is_err(), "nothing else was delivered");
    }

    #[test]
    fn relay_retries_with_growing_capped_waits() {
        // Every connection is closed before an answer: an error each time.
        let srv = script(|_, s| drop(s));
        let ms = Duration::from_millis;
        let timings = RelayTimings {
            first_retry: ms(25),
            max_retry: ms(200),
            idle: Duration::from_secs(10),
        };
        let (h, _frames) = relay(srv.port, timings);
        let at: Vec<Instant> = (0..7).map(|_| next(&srv.conns, "an attempt").at).collect();
        let gaps: Vec<Duration> = at.windows(2).map(|w| w[1] - w[0]).collect();
        let nominal = [25, 50, 100, 200, 200, 200].map(ms);
        for (g, n) in gaps.iter().zip(nominal) {
            // A wait is never shorter than asked (small slack for the
            // server thread's own clock reading).
            assert!(*g + ms(5) >= n, "gaps {gaps:?}");
        }
        // Uncapped, the last gap would be 800 ms.
        assert!(gaps[5] < ms(600), "capped: {gaps:?}");
        assert!(h.stop_and_wait(WAIT));
    }

    #[test]
    fn relay_resumes_with_last_event_id() {
        let (closed_tx, closed) = unbounded();
        let srv = script(move |i, mut s| {
            let _ = s.write_all(SSE_HEAD);
            if i == 0 {
                // Two events, the second without an id of its own; then the
                // stream ends.
                let _ =
                    s.write_all(b"id: 7\ndata: {\"event\":\"a\"}\n\ndata: {\"event\":\"b\"}\n\n");
            } else {
                let _ = s.write_all(b"data: {\"event\":\"c\"}\n\n");
                hold(s, &closed_tx);
            }
        });
        let (h, frames) = relay(srv.port, fast_relay());
        let names: Vec<Value> = (0..3)
            .map(|_| next(&frames, "a frame")["event"].clone())
            .collect();
        assert_eq!(names, vec![json!("a"), json!("b"), json!("c")]);
        let first = next(&srv.conns, "the first request");
        let second = next(&srv.conns, "the reconnect");
        assert!(!first.head.contains("last-event-id"), "{}", first.head);
        assert!(
            second.head.contains("last-event-id: 7\r\n"),
            "{}",
            second.head
        );
        // A stream that delivered is retried after the first wait.
        assert!(second.at - first.at < Duration::from_secs(5));
        drop(h);
        next(&closed, "dropping the handle stopped the relay");
    }

    #[test]
    fn relay_stops_promptly_while_blocked_in_a_read() {
        let (closed_tx, closed) = unbounded();
        let srv = script(move |_, mut s| {
            let _ = s.write_all(SSE_HEAD);
            let _ = s.write_all(b"data: {\"event\":\"only\"}\n\n");
            hold(s, &closed_tx);
        });
        let timings = RelayTimings {
            idle: Duration::from_secs(600),
            ..fast_relay()
        };
        let (h, frames) = relay(srv.port, timings);
        next(&frames, "the frame");
        // The relay now waits on a silent stream (idle time 10 minutes).
        assert!(!h.is_finished());
        let t0 = Instant::now();
        assert!(h.stop_and_wait(WAIT), "the relay ended");
        assert!(t0.elapsed() < Duration::from_secs(2), "{:?}", t0.elapsed());
        next(&closed, "the connection was closed");
        assert_eq!(srv.conns.len(), 1, "no reconnect after the stop");
    }

    #[test]
    fn relay_stops_promptly_in_a_backoff_wait() {
        let srv = script(|_, s| drop(s));
        let timings = RelayTimings {
            first_retry: Duration::from_secs(600),
            max_retry: Duration::from_secs(600),
            idle: Duration::from_secs(10),
        };
        let (h, _frames) = relay(srv.port, timings);
        next(&srv.conns, "the first attempt");
        let t0 = Instant::now();
        assert!(h.stop_and_wait(WAIT));
        assert!(t0.elapsed() < Duration::from_secs(2), "{:?}", t0.elapsed());
    }

    /// A port nothing listens on (bound, then released).
    fn free_port() -> u16 {
        let l = TcpListener::bind("127.0.0.1:0").expect("bind");
        l.local_addr().expect("addr").port()
    }

    fn probe(port: u16, timings: ProbeTimings) -> (ProbeHandle, Receiver<Reach>) {
        let (tx, rx) = unbounded();
        let h = start_probe_with(access(), target(), port, timings, move |r| {
            let _ = tx.send(r);
        });
        (h, rx)
    }

    /// Every state until the probe's thread ends (its callback, holding the
    /// sender, is dropped then).
    fn rest(rx: &Receiver<Reach>) -> Vec<Reach> {
        let mut out = Vec::new();
        loop {
            match rx.recv_timeout(WAIT) {
                Ok(r) => out.push(r),
                Err(RecvTimeoutError::Disconnected) => return out,
                Err(RecvTimeoutError::Timeout) => panic!("the probe did not end: {out:?}"),
            }
        }
    }

    #[test]
    fn probe_checking_then_reachable_when_a_listener_appears() {
        let port = free_port();
        let ms = Duration::from_millis;
        let timings = ProbeTimings {
            interval: ms(20),
            timeout: ms(500),
            unreachable_after: Duration::from_secs(600),
            slow_interval: ms(20),
        };
        let (h, states) = probe(port, timings);
        assert_eq!(next(&states, "checking"), Reach::Checking);
        assert!(!h.is_finished(), "still probing");
        let _l = TcpListener::bind(("127.0.0.1", port)).expect("listen on the probed port");
        assert_eq!(rest(&states), vec![Reach::Reachable]);
        until("the probe's thread ended", || h.is_finished());
    }

    #[test]
    fn probe_unreachable_once_after_the_deadline_then_reachable() {
        let port = free_port();
        let ms = Duration::from_millis;
        let timings = ProbeTimings {
            interval: ms(10),
            timeout: ms(500),
            unreachable_after: ms(150),
            slow_interval: ms(30),
        };
        let t0 = Instant::now();
        let (_h, states) = probe(port, timings);
        assert_eq!(next(&states, "checking"), Reach::Checking);
        assert_eq!(next(&states, "unreachable"), Reach::Unreachable);
        assert!(t0.elapsed() >= ms(150), "{:?}", t0.elapsed());
        let _l = TcpListener::bind(("127.0.0.1", port)).expect("listen on the probed port");
        assert_eq!(
            rest(&states),
            vec![Reach::Reachable],
            "unreachable only once"
        );
    }

    #[test]
    fn probe_stops_when_told() {
        let (h, states) = probe(free_port(), ProbeTimings::default());
        assert_eq!(next(&states, "checking"), Reach::Checking);
        assert!(h.stop_and_wait(WAIT));
        assert_eq!(rest(&states), vec![]);
    }

    #[test]
    fn proxy_drops_hop_by_hop_headers_and_authorization() {
        let srv = script(|_, mut s| {
            let _ = s.write_all(
                b"HTTP/1.1 404 Not Found\r\nContent-Length: 5\r\nConnection: close, X-Hop\r\n\
X-Hop: a\r\nKeep-Alive: timeout=5\r\nX-App: yes\r\n\r\nnope!",
            );
        });
        let h = |k: &str, v: &str| (k.to_string(), v.to_string());
        let headers = vec![
            h("Host", "kubegate.example"),
            h("Authorization", "Bearer kubegate-token"),
            h("Connection", "keep-alive, X-Secret"),
            h("X-Secret", "hop"),
            h("Keep-Alive", "timeout=5"),
            h("Upgrade", "websocket"),
            h("Proxy-Authorization", "Basic x"),
            h("TE", "trailers"),
            h("Content-Type", "text/plain"),
            h("X-Foo", "bar"),
        ];
        let r = proxy_http(
            &DirectAccess::new(),
            &target(),
            srv.port,
            Method::POST,
            "/api/items?x=1&y=%20",
            &headers,
            Some(b"hello".to_vec()),
        )
        .expect("an answer");
        assert_eq!((r.status, r.body.as_slice()), (404, &b"nope!"[..]));
        assert_eq!(r.header("x-app"), Some("yes"));
        for gone in ["connection", "keep-alive", "x-hop", "content-length"] {
            assert_eq!(r.header(gone), None, "{gone}");
        }
        let conn = next(&srv.conns, "the request");
        assert!(
            conn.head
                .starts_with("post /api/items?x=1&y=%20 http/1.1\r\n"),
            "{}",
            conn.head
        );
        assert!(conn.head.contains("x-foo: bar\r\n"));
        assert!(conn.head.contains("content-type: text/plain\r\n"));
        for gone in [
            "authorization",
            "x-secret",
            "keep-alive",
            "upgrade",
            "te:",
            "kubegate.example",
        ] {
            assert!(!conn.head.contains(gone), "{gone} in {}", conn.head);
        }
        assert_eq!(conn.body, b"hello");

        // No answer at all is an error, not a response.
        match proxy_http(
            &DirectAccess::new(),
            &target(),
            free_port(),
            Method::GET,
            "/",
            &[],
            None,
        ) {
            Err(AccessError::Refused { .. }) => {}
            other => panic!("{other:?}"),
        }
    }
}
