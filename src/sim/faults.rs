//! Fault injection for reliability tests and soak runs (`/sim/faults`,
//! loopback only). Faults are requested as JSON, drawn from a seeded RNG so a
//! run can be repeated, and counted so a soak report can print them.
//!
//! `POST /sim/faults` takes any of these fields (each optional):
//!
//! ```json
//! {"seed": 42,
//!  "dropWatches": true,                 // end every open watch now
//!  "dropWatchesEverySecs": 5,           // ... and again every 5 s (0 stops)
//!  "failRequests": {"count": 10, "fraction": 0.5, "status": 503, "retryAfterSecs": 1},
//!  "latencyMs": 100,                    // added to every API response (0 clears)
//!  "cutStreams": true,                  // cut every open exec/attach stream now
//!                                       // ("exec" or "attach": only those)
//!  "killContainer": {"namespace": "default", "pod": "web-x", "container": "main"},
//!  "outageSecs": 10}                    // refuse connections for 10 s
//! ```
//!
//! `GET /sim/faults` returns the counters; `DELETE /sim/faults` clears every
//! pending fault. Failed requests answer a Status (500/503) or, for 429, the
//! plain-text body and `Retry-After` header of the real API server's
//! priority-and-fairness filter (docs/kubernetes.md#rest-basics).

use crate::http::{Request, Response};
use crate::kube::status::Status;
use parking_lot::Mutex;
use rand::{Rng, SeedableRng};
use serde_json::{json, Value};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

type KillFn = Box<dyn Fn(&str, &str, &str) -> Result<(), KillError> + Send + Sync>;

/// Why the kubelet could not kill a container for `killContainer`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum KillError {
    /// No such pod in the store.
    PodNotFound { namespace: String, pod: String },
    /// The pod has no owner thread (nothing running).
    NotRunning,
    /// The pod's owner thread has a full inbox.
    Busy,
    /// The kubelet has shut down.
    Stopped,
}

impl std::fmt::Display for KillError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            KillError::PodNotFound { namespace, pod } => {
                write!(f, "pod {namespace}/{pod} not found")
            }
            KillError::NotRunning => f.write_str("the pod has no containers running"),
            KillError::Busy => f.write_str("the pod is busy"),
            KillError::Stopped => f.write_str("the kubelet has stopped"),
        }
    }
}

impl std::error::Error for KillError {}

/// A fault request refused: answered 400, this text as the Status message.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FaultError(String);

impl From<&str> for FaultError {
    fn from(s: &str) -> Self {
        FaultError(s.to_string())
    }
}

impl From<String> for FaultError {
    fn from(s: String) -> Self {
        FaultError(s)
    }
}

impl From<KillError> for FaultError {
    fn from(e: KillError) -> Self {
        FaultError(e.to_string())
    }
}

impl std::fmt::Display for FaultError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for FaultError {}
type OutageFn = Box<dyn Fn(Duration) + Send + Sync>;

#[derive(Default)]
struct State {
    rng: Option<rand::rngs::StdRng>,
    fail_remaining: u64,
    fail_fraction: f64,
    fail_status: u16,
    retry_after: u64,
    latency: Duration,
    drop_every: Option<Duration>,
    next_drop: Option<Instant>,
}

#[derive(Default)]
pub struct Counters {
    pub failed_requests: AtomicU64,
    pub dropped_watch_rounds: AtomicU64,
    pub cut_stream_rounds: AtomicU64,
    pub killed_containers: AtomicU64,
    pub outages: AtomicU64,
}

#[derive(Default)]
pub struct Faults {
    state: Mutex<State>,
    watch_epoch: AtomicU64,
    exec_epoch: AtomicU64,
    attach_epoch: AtomicU64,
    pub counters: Counters,
    kill: Mutex<Option<KillFn>>,
    outage: Mutex<Option<OutageFn>>,
}

impl Faults {
    pub fn new() -> Arc<Faults> {
        Arc::new(Faults::default())
    }

    /// Installs the kubelet's container killer.
    pub fn set_killer(&self, f: KillFn) {
        *self.kill.lock() = Some(f);
    }

    /// Installs the server's "refuse connections for a while" switch.
    pub fn set_outage(&self, f: OutageFn) {
        *self.outage.lock() = Some(f);
    }

    /// Changes whenever open watches must end (a watch loop compares it).
    pub fn watch_epoch(&self) -> u64 {
        self.tick();
        self.watch_epoch.load(Ordering::Relaxed)
    }

    /// Changes whenever open exec (`attach` false) or attach streams must
    /// be cut.
    pub fn stream_epoch(&self, attach: bool) -> u64 {
        if attach {
            self.attach_epoch.load(Ordering::Relaxed)
        } else {
            self.exec_epoch.load(Ordering::Relaxed)
        }
    }

    /// A reader of [`Faults::stream_epoch`] that a stream's own thread can keep.
    pub fn clone_epoch_reader(self: &Arc<Self>, attach: bool) -> impl Fn() -> u64 + Send + 'static {
        let f = self.clone();
        move || f.stream_epoch(attach)
    }

    /// Advances the periodic watch drop, if one is scheduled.
    fn tick(&self) {
        let mut s = self.state.lock();
        if let (Some(every), Some(next)) = (s.drop_every, s.next_drop) {
            if Instant::now() >= next {
                s.next_drop = Some(Instant::now() + every);
                drop(s);
                self.drop_watches();
            }
        }
    }

    fn drop_watches(&self) {
        self.watch_epoch.fetch_add(1, Ordering::Relaxed);
        self.counters
            .dropped_watch_rounds
            .fetch_add(1, Ordering::Relaxed);
    }

    /// Called for every API request before routing: may delay it, or answer
    /// it with an injected failure.
    pub fn before_request(&self, req: &Request) -> Option<Response> {
        if req.path.starts_with("/sim/") {
            return None;
        }
        self.tick();
        let (latency, fail) = {
            let mut s = self.state.lock();
            let mut fail = None;
            if s.fail_remaining > 0 {
                let hit = if s.fail_fraction >= 1.0 {
                    true
                } else {
                    let f = s.fail_fraction;
                    s.rng
                        .get_or_insert_with(|| rand::rngs::StdRng::seed_from_u64(0))
                        .random_bool(f.clamp(0.0, 1.0))
                };
                if hit {
                    s.fail_remaining -= 1;
                    fail = Some((s.fail_status, s.retry_after));
                }
            }
            (s.latency, fail)
        };
        if !latency.is_zero() {
            std::thread::sleep(latency);
        }
        let (status, retry_after) = fail?;
        self.counters
            .failed_requests
            .fetch_add(1, Ordering::Relaxed);
        Some(match status {
            429 => Response::text(429, "Too many requests, please try again later.\n")
                .with_header("Retry-After", &retry_after.to_string()),
            503 => {
                let s = Status::service_unavailable(
                    "the server is currently unable to handle the request (injected fault)",
                );
                Response::json(503, s.to_json())
                    .with_header("Retry-After", &retry_after.to_string())
            }
            code => {
                let s = Status::internal_error("injected fault");
                let mut r = Response::json(500, s.to_json());
                r.status = code;
                r
            }
        })
    }

    /// The admin endpoint.
    pub fn handle(&self, req: &Request) -> Response {
        if !req.peer.ip().is_loopback() {
            return Response::json(
                403,
                Status::forbidden_message_only("the fault endpoint only answers loopback clients")
                    .to_json(),
            );
        }
        match req.method.as_str() {
            "GET" => Response::json(200, self.report().to_string().into_bytes()),
            "DELETE" => {
                *self.state.lock() = State::default();
                Response::json(200, self.report().to_string().into_bytes())
            }
            "POST" => match serde_json::from_slice::<Value>(&req.body) {
                Ok(v) if v.is_object() => match self.apply(&v) {
                    Ok(()) => Response::json(200, self.report().to_string().into_bytes()),
                    Err(m) => Response::json(400, Status::bad_request(&m.to_string()).to_json()),
                },
                Ok(_) => {
                    Response::json(400, Status::bad_request("expected a JSON object").to_json())
                }
                Err(e) => Response::json(
                    400,
                    Status::bad_request(&format!("invalid JSON: {e}")).to_json(),
                ),
            },
            _ => Response::json(
                405,
                Status::method_not_allowed("", "", "this method").to_json(),
            ),
        }
    }

    fn apply(&self, v: &Value) -> Result<(), FaultError> {
        let known = [
            "seed",
            "dropWatches",
            "dropWatchesEverySecs",
            "failRequests",
            "latencyMs",
            "cutStreams",
            "killContainer",
            "outageSecs",
        ];
        if let Some(obj) = v.as_object() {
            if let Some(k) = obj.keys().find(|k| !known.contains(&k.as_str())) {
                return Err(format!("unknown fault {k:?}; known: {}", known.join(", ")).into());
            }
        }
        // Which streams to cut: (exec, attach).
        let cut = match v.get("cutStreams") {
            None => None,
            Some(Value::Bool(b)) => Some((*b, *b)),
            Some(Value::String(k)) if k == "exec" => Some((true, false)),
            Some(Value::String(k)) if k == "attach" => Some((false, true)),
            Some(_) => return Err("cutStreams must be true, false, \"exec\" or \"attach\"".into()),
        };
        let mut s = self.state.lock();
        if let Some(seed) = v.get("seed") {
            let seed = seed.as_u64().ok_or("seed must be an unsigned integer")?;
            s.rng = Some(rand::rngs::StdRng::seed_from_u64(seed));
        }
        if let Some(f) = v.get("failRequests") {
            let count = f.get("count").and_then(Value::as_u64).unwrap_or(u64::MAX);
            let fraction = f.get("fraction").and_then(Value::as_f64).unwrap_or(1.0);
            let status = f.get("status").and_then(Value::as_u64).unwrap_or(503);
            if !matches!(status, 429 | 500 | 502 | 503 | 504) {
                return Err(format!(
                    "failRequests.status {status} is not one of 429, 500, 502, 503, 504"
                )
                .into());
            }
            if !(0.0..=1.0).contains(&fraction) {
                return Err("failRequests.fraction must be within 0..1".into());
            }
            if f.get("count").is_none() && f.get("fraction").is_none() {
                return Err("failRequests needs count or fraction".into());
            }
            s.fail_remaining = count;
            s.fail_fraction = fraction;
            s.fail_status = status as u16;
            s.retry_after = f.get("retryAfterSecs").and_then(Value::as_u64).unwrap_or(1);
        }
        if let Some(ms) = v.get("latencyMs") {
            s.latency =
                Duration::from_millis(ms.as_u64().ok_or("latencyMs must be an unsigned integer")?);
        }
        if let Some(secs) = v.get("dropWatchesEverySecs") {
            let secs = secs
                .as_u64()
                .ok_or("dropWatchesEverySecs must be an unsigned integer")?;
            if secs == 0 {
                s.drop_every = None;
                s.next_drop = None;
            } else {
                s.drop_every = Some(Duration::from_secs(secs));
                s.next_drop = Some(Instant::now() + Duration::from_secs(secs));
            }
        }
        drop(s);
        if v.get("dropWatches").and_then(Value::as_bool) == Some(true) {
            self.drop_watches();
        }
        if let Some(c) = cut {
            let (exec, attach) = c;
            if exec {
                self.exec_epoch.fetch_add(1, Ordering::Relaxed);
            }
            if attach {
                self.attach_epoch.fetch_add(1, Ordering::Relaxed);
            }
            if exec || attach {
                self.counters
                    .cut_stream_rounds
                    .fetch_add(1, Ordering::Relaxed);
            }
        }
        if let Some(k) = v.get("killContainer") {
            let get = |f: &str| k.get(f).and_then(Value::as_str).unwrap_or("");
            let (ns, pod, c) = (get("namespace"), get("pod"), get("container"));
            if pod.is_empty() {
                return Err("killContainer.pod is required".into());
            }
            let ns = if ns.is_empty() { "default" } else { ns };
            match &*self.kill.lock() {
                Some(kill) => kill(ns, pod, c)?,
                None => return Err("no kubelet is running".into()),
            }
            self.counters
                .killed_containers
                .fetch_add(1, Ordering::Relaxed);
        }
        if let Some(secs) = v.get("outageSecs") {
            let secs = secs
                .as_u64()
                .ok_or("outageSecs must be an unsigned integer")?;
            match &*self.outage.lock() {
                Some(f) => f(Duration::from_secs(secs)),
                None => return Err("outages are not supported by this server".into()),
            }
            self.counters.outages.fetch_add(1, Ordering::Relaxed);
        }
        Ok(())
    }

    pub fn report(&self) -> Value {
        let c = &self.counters;
        let s = self.state.lock();
        json!({
            "failedRequests": c.failed_requests.load(Ordering::Relaxed),
            "droppedWatchRounds": c.dropped_watch_rounds.load(Ordering::Relaxed),
            "cutStreamRounds": c.cut_stream_rounds.load(Ordering::Relaxed),
            "killedContainers": c.killed_containers.load(Ordering::Relaxed),
            "outages": c.outages.load(Ordering::Relaxed),
            "pendingFailures": if s.fail_remaining == u64::MAX { json!("unlimited") } else { json!(s.fail_remaining) },
            "latencyMs": s.latency.as_millis() as u64,
            "dropWatchesEverySecs": s.drop_every.map(|d| d.as_secs()),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cut_streams_scope() {
        let f = Faults::new();
        let (e0, a0) = (f.stream_epoch(false), f.stream_epoch(true));
        f.apply(&json!({"cutStreams": "exec"})).expect("exec");
        assert_eq!((f.stream_epoch(false), f.stream_epoch(true)), (e0 + 1, a0));
        f.apply(&json!({"cutStreams": "attach"})).expect("attach");
        assert_eq!(
            (f.stream_epoch(false), f.stream_epoch(true)),
            (e0 + 1, a0 + 1)
        );
        f.apply(&json!({"cutStreams": true})).expect("both");
        assert_eq!(
            (f.stream_epoch(false), f.stream_epoch(true)),
            (e0 + 2, a0 + 2)
        );
        f.apply(&json!({"cutStreams": false})).expect("none");
        assert_eq!(
            (f.stream_epoch(false), f.stream_epoch(true)),
            (e0 + 2, a0 + 2)
        );
        assert_eq!(f.counters.cut_stream_rounds.load(Ordering::Relaxed), 3);
        assert!(f.apply(&json!({"cutStreams": "pods"})).is_err());
        assert!(f.apply(&json!({"cutStreams": 1})).is_err());
    }
}
