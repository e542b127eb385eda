//! The session's live links to its pod's ports (sessions.md "While
//! running"), all through the pod-access seam (`session::access`), so they
//! work in both `[cluster] pod_access` modes:
//!
//! - the debug relay ([`start_relay`]): one thread per app streaming
//!   `GET /events` from the app's debug port, parsing server-sent events
//!   (`session::sse`) and handing every valid JSON frame to a callback;
//!   retries with backoff (0.5 s doubling to 5 s) until stopped, resuming
//!   with `Last-Event-ID`;
//! - the reachability prober ([`start_probe`]): one thread per tcp port,
//!   `checking` at once, `reachable` on the first accepted connection,
//!   `unreachable` once after 30 s, then slower probes;
//! - the port proxy helper ([`proxy_http`]): one HTTP exchange for the
//!   daemon's `…/ports/{port}/{path}` route, without hop-by-hop headers nor
//!   the client's `Authorization`.
//!
//! Threads: a relay is a `session-relay` thread, a probe a `session-probe`
//! thread; each is told to stop through its handle (`stop()`, or `Drop`):
//! a flag, a disconnected channel that ends any wait at once (waits are
//! `recv_timeout` on it, never a bare sleep), and for the relay the current
//! stream's canceller, which cuts a blocked read. `stop()` never waits for
//! the thread (the engine's owner thread calls it, and the callbacks may be
//! sending to that owner's bounded inbox: waiting could deadlock).
//! Callbacks are not called once the thread has seen the stop; a frame or
//! state being delivered at the very moment of the stop may still arrive,
//! which the machine tolerates (every input names its pod, and a stopped
//! probe's port is no longer in its set). A thread blocked in a connect or
//! a probe ends when that call returns (bounded by its timeout).
//! `stop_and_wait` is there for tests and shutdown.

use crate::session::access::{AccessError, PodAccess, PodRequest, PodResponse, PodTarget};
use crate::session::access::{StreamCanceller, StreamHandle};
use crate::session::machine::Reach;
use crate::session::sse::{SseError, SseParser};
use crossbeam_channel::{bounded, Receiver, RecvTimeoutError, Sender};
use serde_json::Value;
use std::io::{ErrorKind, Read};
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
    worker: Worker,
}

impl RelayHandle {
    /// Ends the relay: cuts the stream being read, ends a backoff wait.
    /// Returns at once (see the module documentation).
    pub fn stop(&self) {
        self.worker.stop.stop();
    }

    /// [`RelayHandle::stop`], then waits up to `timeout` for the thread to
    /// end; true when it did.
    pub fn stop_and_wait(mut self, timeout: Duration) -> bool {
        self.worker.stop_and_wait(timeout)
    }

    /// Whether the thread has ended.
    pub fn is_finished(&self) -> bool {
        self.worker.is_finished()
    }
}

impl Drop for RelayHandle {
    fn drop(&mut self) {
        self.worker.stop.stop();
    }
}

/// Relays `GET /events` of `port` with the default timings.
pub fn start_relay(
    access: Arc<dyn PodAccess>,
    target: PodTarget,
    port: u16,
    on_frame: impl Fn(Value) + Send + 'static,
) -> RelayHandle {
    start_relay_with(access, target, port, RelayTimings::default(), on_frame)
}

/// Relays `GET /events` of `port`: every valid frame ([`parse_frame`]) goes
/// to `on_frame`, in order, on the relay's thread.
pub fn start_relay_with(
    access: Arc<dyn PodAccess>,
    target: PodTarget,
    port: u16,
    timings: RelayTimings,
    on_frame: impl Fn(Value) + Send + 'static,
) -> RelayHandle {
    let worker = Worker::spawn("session-relay", move |stop, wake| {
        relay_loop(&*access, &target, port, timings, stop, wake, &on_frame)
    });
    RelayHandle { worker }
}

fn relay_loop(
    access: &dyn PodAccess,
    target: &PodTarget,
    port: u16,
    timings: RelayTimings,
    stop: &Stop,
    wake: &Receiver<()>,
    on_frame: &dyn Fn(Value),
) {
    let mut parser = SseParser::default();
    let mut backoff = Backoff::new(timings.first_retry, timings.max_retry);
    let what = format!("debug stream {}:{port}{EVENTS_PATH}", target.name);
    let mut last_error = String::new();
    loop {
        if stop.is_stopped() {
            return;
        }
        let mut headers = vec![
            ("Accept".to_string(), "text/event-stream".to_string()),
            ("Cache-Control".to_string(), "no-cache".to_string()),
        ];
        if let Some(id) = parser.last_event_id() {
            headers.push(("Last-Event-ID".to_string(), id.to_string()));
        }
        parser.reset();
        let delivered = match access.stream(target, port, EVENTS_PATH, &headers, timings.idle) {
            Ok(s) => {
                if !stop.set_current(s.canceller()) {
                    return;
                }
                last_error.clear();
                log::debug!("{what}: connected");
                let n = read_stream(s, &mut parser, stop, on_frame, &what);
                stop.clear_current();
                n
            }
            Err(e) => {
                // Apps without an event stream are common: say it once.
                let m = e.to_string();
                if m != last_error {
                    log::debug!("{what}: {m}");
                    last_error = m;
                }
                0
            }
        };
        if !wait(wake, stop, backoff.after(delivered > 0)) {
            return;
        }
    }
}

/// Reads one stream to its end (or error, or stop); the number of frames
/// delivered.
fn read_stream(
    mut s: StreamHandle,
    parser: &mut SseParser,
    stop: &Stop,
    on_frame: &dyn Fn(Value),
    what: &str,
) -> usize {
    let mut delivered = 0;
    let mut buf = vec![0u8; 16 * 1024];
    loop {
        let n = match s.read(&mut buf) {
            Ok(0) => {
                log::debug!("{what}: ended");
                return delivered;
            }
            Ok(n) => n,
            Err(e) if e.kind() == ErrorKind::Interrupted => continue,
            Err(e) => {
                if !stop.is_stopped() {
                    log::debug!("{what}: {e}");
                }
                return delivered;
            }
        };
        parser.push(&buf[..n]);
        while let Some(ev) = parser.next_event() {
            match ev {
                Ok(ev) => {
                    if let Some(frame) = parse_frame(&ev.data) {
                        if stop.is_stopped() {
                            return delivered;
                        }
                        on_frame(frame);
                        delivered += 1;
                    }
                }
                Err(e @ SseError::TooLarge { .. }) => log::warn!("{what}: {e}"),
            }
        }
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

/// [`proxy_http`] with explicit bounds. The client's hop-by-hop headers
/// and its `Authorization` (kubegate's credential, not the app's) are
/// dropped; so are the answer's hop-by-hop and framing headers (the body
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
        headers: end_to_end_headers(headers, &["authorization"]),
        body,
        timeout: limits.timeout,
        max_response_bytes: limits.max_response_bytes,
    };
    let mut resp = access.request(target, port, &req)?;
    resp.headers = end_to_end_headers(&resp.headers, &[]);
    Ok(resp)
}
