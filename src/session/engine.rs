//! The session engine: drives each session's sans-IO [`Session`] machine on
//! threads.
//!
//! ```text
//!  routes ──User(op, reply)──┐
//!  workers ──Input───────────┴─> inbox (bounded 256) ─> session-<id> (owner):
//!                                                        Session::handle / user
//!                                                        -> Commands, carried out:
//!   CreatePod/CreateSecret/DeletePod/Publish/ProbeAgent/Seed/Checkpoint/Touch: a short-lived
//!     `session-work` thread per command, its result back as an Input;
//!   WatchPod: a route in the engine's one `PodHub` (`session-pods` thread: one
//!     resuming Watcher of every session pod), delivered without blocking;
//!   Emit: the session's EventLog (bounded history, SSE readers wait on it);
//!   WriteRecord: the record file, atomically.
//! ```
//!
//! Only the owner thread touches its `Session`; a worker never blocks the
//! owner (results come back through the inbox, and a worker whose send
//! would block waits, which is backpressure on workers only). A view of
//! the session (what `GET` answers) is published after every step.

pub mod settings;

use super::access::{PodAccess, PodTarget};
use super::io::{AppIo, AttachHandle};
use super::machine::{
    Command, Event, Input, Millis, NewSession, OutStream, SeedSource, Session, UserOp,
};
use super::pod::PodSettings;
use super::pod_hub::{PodHub, PodUpdate};
use super::reaper::{PodFacts, Reaper};
use super::relay::{start_probe, start_relay, ProbeHandle, RelayHandle};
use super::spec::{Bundle, SessionSpec};
use crate::api::{ApiError, Code};
use crate::kube::client::{
    Api, Client, DeleteParams, Ingress, KubeError, ListParams, LogParams, Pod, Secret, Service,
};
use crate::kube::connection::Connection;
use crossbeam_channel::{bounded, Receiver, RecvTimeoutError, Sender};
use parking_lot::{Condvar, Mutex, RwLock};
use serde_json::Value;
use std::collections::{BTreeMap, HashMap, VecDeque};
use std::io::Write;
use std::path::PathBuf;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime};

/// Messages a session's owner thread handles.
pub enum Msg {
    Input(Input),
    User(UserOp, Sender<Result<(), ApiError>>),
    /// Look at the pod updates a full inbox refused (the owner's overflow).
    Wake,
    /// The daemon stops: persist, end viewers with 1001, leave the pod
    /// running (the next start re-adopts it), answer, end the owner.
    Shutdown(Sender<()>),
    /// The test hook (debug builds only, see [`Handle::inject_panic`]):
    /// the owner panics on it.
    #[cfg(debug_assertions)]
    Panic,
}

/// Files to write through the agent (path, bytes).
pub type Files = Vec<(String, Vec<u8>)>;

/// The workspace agent, as the engine uses it (the pod-access seam and the
/// agent client implement it; tests may give a fake).
pub trait AgentOps: Send + Sync {
    /// Waits until the agent answers (first try at once, then backing off),
    /// or the deadline passes: the last error.
    fn wait_ready(&self, pod: &AgentTarget, deadline: Instant) -> Result<(), String>;
    /// One apply writing every file.
    fn write_all(&self, pod: &AgentTarget, files: Files) -> Result<(), String>;
    /// Every file of the workspace.
    fn snapshot(&self, pod: &AgentTarget) -> Result<Files, String>;
    /// Every file's path and content hash (cheap next to a snapshot).
    fn tree(&self, pod: &AgentTarget) -> Result<Vec<(String, String)>, String>;
    /// Rewrites `path` with its own bytes.
    fn touch(&self, pod: &AgentTarget, path: &str) -> Result<(), String>;
}

/// Where a session's agent is.
#[derive(Debug, Clone)]
pub struct AgentTarget {
    pub namespace: String,
    pub pod: String,
    pub ip: String,
    pub token: String,
}

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

/// A session as the routes see it.
pub struct Handle {
    pub id: String,
    pub principal: String,
    /// The workspace agent's token for this session.
    token: String,
    inbox: Sender<Msg>,
    view: Mutex<Value>,
    /// The current pod's name and IP, when it has one.
    pod: Mutex<Option<(String, String)>>,
    /// Each app's output ring and input, kept across pod recreates.
    ios: Mutex<HashMap<String, Arc<AppIo>>>,
    /// Event-stream readers now attached (the idle rule counts them).
    pub sse_readers: AtomicUsize,
    ring_bytes: usize,
    pub events: Arc<EventLog>,
    /// Set once the machine reached a terminal status.
    finished: Mutex<Option<Instant>>,
}

impl Handle {
    /// What `GET /v1/sessions/{id}` answers.
    pub fn view(&self) -> Value {
        self.view.lock().clone()
    }

    /// An app's IO, created on first use.
    pub fn io(&self, app: &str) -> Arc<AppIo> {
        self.ios
            .lock()
            .entry(app.to_string())
            .or_insert_with(|| Arc::new(AppIo::new(self.ring_bytes)))
            .clone()
    }

    /// An app's IO if the session has that app.
    pub fn app_io(&self, app: &str) -> Option<Arc<AppIo>> {
        let known = self.view()["apps"]
            .as_array()
            .is_some_and(|a| a.iter().any(|x| x["name"] == app));
        known.then(|| self.io(app))
    }

    fn subscribers(&self) -> usize {
        let io: usize = self.ios.lock().values().map(|i| i.subscribers()).sum();
        io + self.sse_readers.load(Ordering::Relaxed)
    }

    /// The current pod (name, IP) once it has an address.
    pub fn pod(&self) -> Option<(String, String)> {
        self.pod.lock().clone()
    }

    pub fn is_finished(&self) -> bool {
        self.finished.lock().is_some()
    }

    /// Test hook, compiled into debug builds only (release builds have no
    /// such message): makes the session's owner thread panic, so a test
    /// can check that a panicking session fails alone and visibly. False
    /// when the owner is gone.
    #[cfg(debug_assertions)]
    pub fn inject_panic(&self) -> bool {
        self.inbox
            .send_timeout(Msg::Panic, Duration::from_secs(10))
            .is_ok()
    }

    /// Sends an operation to the owner and waits for its answer.
    pub fn user(&self, op: UserOp) -> Result<(), ApiError> {
        let (tx, rx) = bounded(1);
        if self
            .inbox
            .send_timeout(Msg::User(op, tx), Duration::from_secs(10))
            .is_err()
        {
            return Err(ApiError::new(Code::NotRunning, "the session has ended"));
        }
        match rx.recv_timeout(Duration::from_secs(30)) {
            Ok(r) => r,
            Err(_) => Err(ApiError::new(Code::NotRunning, "the session has ended")),
        }
    }
}

/// Settings of the engine.
#[derive(Debug, Clone)]
pub struct EngineSettings {
    pub pod: Arc<PodSettings>,
    pub timings: super::machine::Timings,
    pub state_dir: PathBuf,
    pub max_sessions: usize,
    pub max_sessions_per_principal: usize,
    pub sse_history: usize,
    /// Output replay ring per app.
    pub io_ring_bytes: usize,
    /// WebSocket ping period of io sockets.
    pub ping_interval: Duration,
    /// How long a finished session stays visible.
    pub keep_finished: Duration,
}

pub struct Engine {
    client: Client,
    /// For attach streams.
    conn: Connection,
    access: Arc<dyn PodAccess>,
    agent: Arc<dyn AgentOps>,
    settings: EngineSettings,
    sessions: RwLock<BTreeMap<String, Arc<Handle>>>,
    /// The one watch of every session pod.
    pods: Arc<PodHub>,
    /// The orphan reaper's stop (dropping the sender ends its thread).
    reaper: Mutex<Option<Sender<()>>>,
    /// Persisted rings loaded by [`Engine::restore`], removed once the
    /// daemon serves ([`Engine::forget_persisted_rings`]).
    loaded_rings: Mutex<Vec<PathBuf>>,
}

/// What [`Engine::restore`] found in the state directory.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct Restored {
    /// Running sessions whose pod is being re-adopted.
    pub adopting: usize,
    /// Sessions brought up again from their checkpoint (pod gone or
    /// terminating, or a start cut by the restart).
    pub recreating: usize,
    pub suspended: usize,
    /// Sessions that could not be brought back (failed, with the reason on
    /// their stream).
    pub failed: usize,
    /// Records of sessions that had ended, removed with their files.
    pub removed: usize,
    /// Record files that could not be read (left in place, logged).
    pub unreadable: usize,
}

/// The pod selector of every watch-session pod of this daemon.
fn watch_selector(managed_by: &str) -> String {
    format!(
        "{}={managed_by},{}={}",
        crate::kube::labels::MANAGED_BY_LABEL,
        super::pod::MODE_LABEL,
        super::pod::MODE_WATCH
    )
}

fn now_ns() -> u64 {
    SystemTime::now()
        .duration_since(SystemTime::UNIX_EPOCH)
        .map_or(0, |d| u64::try_from(d.as_nanos()).unwrap_or(u64::MAX))
}

fn now_ms() -> Millis {
    SystemTime::now()
        .duration_since(SystemTime::UNIX_EPOCH)
        .map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
}

impl Engine {
    pub fn new(
        client: Client,
        conn: Connection,
        access: Arc<dyn PodAccess>,
        settings: EngineSettings,
    ) -> Arc<Engine> {
        let selector = watch_selector(&settings.pod.managed_by);
        let pods = PodHub::start(client.clone(), &settings.pod.namespace, selector);
        Arc::new(Engine {
            client,
            conn,
            agent: super::agent_ops(access.clone()),
            access,
            settings,
            sessions: RwLock::new(BTreeMap::new()),
            pods,
            reaper: Mutex::new(None),
            loaded_rings: Mutex::new(Vec::new()),
        })
    }

    /// A principal's own session (others' sessions do not exist for it).
    pub fn get(&self, principal: &str, id: &str) -> Option<Arc<Handle>> {
        self.evict();
        let g = self.sessions.read();
        g.get(id).filter(|h| h.principal == principal).cloned()
    }

    /// A principal's sessions, oldest first.
    pub fn list(&self, principal: &str) -> Vec<Arc<Handle>> {
        self.evict();
        self.sessions
            .read()
            .values()
            .filter(|h| h.principal == principal)
            .cloned()
            .collect()
    }

    fn evict(&self) {
        let keep = self.settings.keep_finished;
        let stale: Vec<String> = self
            .sessions
            .read()
            .iter()
            .filter(|(_, h)| h.finished.lock().is_some_and(|t| t.elapsed() > keep))
            .map(|(k, _)| k.clone())
            .collect();
        if !stale.is_empty() {
            let mut g = self.sessions.write();
            for k in &stale {
                g.remove(k);
            }
            drop(g);
            // Gone for good: its record (and what is left beside it) too.
            for k in stale {
                self.remove_session_files(&k);
            }
        }
    }

    /// Starts a validated session; answers before the pod exists.
    /// `permit` (the front door's body-budget reservation) is held with
    /// the bundle and dropped with it: once the workspace is seeded, or
    /// when the session ends first.
    pub fn start(
        self: &Arc<Self>,
        principal: &str,
        spec: SessionSpec,
        bundle: Bundle,
        permit: Option<Box<dyn std::any::Any + Send>>,
    ) -> Result<Arc<Handle>, ApiError> {
        let mut sessions = self.sessions.write();
        let live = |h: &&Arc<Handle>| !h.is_finished();
        let total = sessions.values().filter(live).count();
        let mine = sessions
            .values()
            .filter(live)
            .filter(|h| h.principal == principal)
            .count();
        if total >= self.settings.max_sessions {
            return Err(ApiError::new(
                Code::TooManySessions,
                format!("{total} sessions are running, the most this daemon allows"),
            ));
        }
        if mine >= self.settings.max_sessions_per_principal {
            return Err(ApiError::new(
                Code::TooManySessions,
                format!("you have {mine} sessions, the most allowed per principal"),
            ));
        }
        let mut rng = rand::rng();
        let id = loop {
            let id = super::new_session_id(&mut rng);
            if !sessions.contains_key(&id) {
                break id;
            }
        };
        let token = random_token();
        let (session, first) = Session::start(
            NewSession {
                id: id.clone(),
                principal: principal.to_string(),
                spec,
                workspace_token: token.clone(),
                settings: self.settings.pod.clone(),
                timings: self.settings.timings,
            },
            now_ms(),
        );
        let handle = self.spawn_owner(session, first, Some((bundle, permit)), HashMap::new())?;
        sessions.insert(id, handle.clone());
        Ok(handle)
    }

    /// A session's handle and its owner thread (`session-<id>`), which
    /// carries out `first` and then runs the machine. A panic on the owner
    /// thread fails that session alone ([`Engine::owner_panicked`]).
    fn spawn_owner(
        self: &Arc<Self>,
        session: Session,
        first: Vec<Command>,
        bundle: Option<(Bundle, Option<Box<dyn std::any::Any + Send>>)>,
        ios: HashMap<String, Arc<AppIo>>,
    ) -> Result<Arc<Handle>, ApiError> {
        let (bundle, bundle_permit) = match bundle {
            Some((b, p)) => (Some(b), p),
            None => (None, None),
        };
        let id = session.id().to_string();
        let (tx, rx) = bounded(256);
        let handle = Arc::new(Handle {
            id: id.clone(),
            principal: session.principal().to_string(),
            token: session.workspace_token().to_string(),
            inbox: tx.clone(),
            view: Mutex::new(session.view()),
            pod: Mutex::new(None),
            ios: Mutex::new(ios),
            sse_readers: AtomicUsize::new(0),
            ring_bytes: self.settings.io_ring_bytes,
            events: Arc::new(EventLog::new(self.settings.sse_history)),
            finished: Mutex::new(None),
        });
        let watches = Arc::new(Mutex::new(std::collections::HashSet::new()));
        let owner = Owner {
            engine: self.clone(),
            handle: handle.clone(),
            inbox_tx: tx,
            bundle,
            bundle_permit,
            watches: watches.clone(),
            overflow: Arc::new(Mutex::new(Vec::new())),
            checkpointed: Arc::new(Mutex::new(None)),
            relays: HashMap::new(),
            probes: HashMap::new(),
            attaches: Arc::new(Mutex::new(Attaches::default())),
            subscribers: 0,
        };
        let (engine, h) = (self.clone(), handle.clone());
        std::thread::Builder::new()
            .name(format!("session-{id}"))
            .spawn(move || {
                let run = std::panic::AssertUnwindSafe(move || owner.run(session, first, rx));
                // The owner (its relays, probes and attach streams stop
                // as they drop) unwinds before this returns.
                if let Err(p) = std::panic::catch_unwind(run) {
                    engine.owner_panicked(&h, &watches, &panic_text(&*p));
                }
            })
            .map_err(|e| {
                ApiError::new(Code::Internal, format!("starting the session thread: {e}"))
            })?;
        Ok(handle)
    }

    /// A session's owner thread panicked (a bug): the session fails alone
    /// and visibly. Its view and event stream say `failed` (stage `run`,
    /// "internal error: …"), its viewers are closed with 1011, its record
    /// says failed, its pod routes are dropped, and its pods are deleted
    /// (a failed session leaves no pod, as sessions.md says of any
    /// failure). Nothing else is touched: other sessions, the hub and the
    /// daemon go on.
    fn owner_panicked(
        &self,
        h: &Arc<Handle>,
        watches: &Mutex<std::collections::HashSet<String>>,
        what: &str,
    ) {
        let message =
            format!("internal error: the session's thread panicked ({what}); its pod is deleted");
        log::error!("session {}: {message}", h.id);
        for name in watches.lock().drain() {
            self.pods.unregister(&name);
        }
        let status = super::machine::Status::Failed {
            stage: super::machine::Stage::Run,
            message: message.clone(),
        };
        // The record first: whoever hears of the failure finds it there.
        let path = self.record_path(&h.id);
        let record = std::fs::read(&path)
            .ok()
            .and_then(|b| serde_json::from_slice::<Value>(&b).ok());
        if let Some(mut r) = record {
            r["status"] = serde_json::to_value(&status).unwrap_or(Value::Null);
            if let Err(e) = write_atomic(&path, r.to_string().as_bytes()) {
                log::error!("session {}: writing its record: {e}", h.id);
            }
        }
        {
            let mut v = h.view.lock();
            v["status"] = Value::from(status.as_str());
            if let Some(e) = status.error() {
                v["error"] = e;
            }
        }
        *h.pod.lock() = None;
        *h.finished.lock() = Some(Instant::now());
        let ev = Event::Status {
            status: status.clone(),
            endpoints: None,
        };
        h.events.push(ev.kind(), ev.data().to_string(), true);
        for io in h.ios.lock().values() {
            io.end(1011, "the session failed: internal error");
        }
        let api = Api::<Pod>::namespaced(&self.client, &self.settings.pod.namespace);
        let selector = format!("{}={}", super::pod::SESSION_ID_LABEL, h.id);
        let id = h.id.clone();
        let spawned = std::thread::Builder::new()
            .name("session-work".into())
            .spawn(move || {
                let pods = match api.list(&ListParams::labels(&selector)) {
                    Ok(l) => l.items,
                    Err(e) => {
                        log::warn!("session {id}: listing its pods to delete them: {e}");
                        return;
                    }
                };
                let params = DeleteParams {
                    grace_period: Some(0),
                    ..DeleteParams::default()
                };
                for p in pods {
                    match api.delete(p.metadata.name(), &params) {
                        Ok(_) | Err(KubeError::NotFound(_)) => {}
                        Err(e) => {
                            log::warn!("session {id}: deleting pod {}: {e}", p.metadata.name())
                        }
                    }
                }
            });
        if let Err(e) = spawned {
            log::error!("session {}: spawning the pod cleanup: {e}", h.id);
        }
    }

    /// Stops every session's owner at daemon shutdown (pods are left
    /// running; the restart issue re-adopts them).
    /// Stops every session's owner at daemon shutdown, by `deadline`:
    /// each persists its IO rings (`<state>/sessions/<id>.io/<app>.ring`),
    /// takes a last checkpoint when running, writes its record, and ends
    /// its viewers with 1001 (going away; reconnect with the last seq).
    /// Pods are left running (re-adopted at the next start). Owners that
    /// do not answer in time are left behind with a warning.
    pub fn shutdown(&self, deadline: Instant) {
        let handles: Vec<Arc<Handle>> = self.sessions.read().values().cloned().collect();
        let (tx, rx) = bounded::<()>(handles.len().max(1));
        let mut asked = 0usize;
        for h in handles.iter().filter(|h| !h.is_finished()) {
            let left = deadline.saturating_duration_since(Instant::now());
            if h.inbox
                .send_timeout(Msg::Shutdown(tx.clone()), left)
                .is_ok()
            {
                asked += 1;
            }
        }
        drop(tx);
        let mut answered = 0usize;
        while answered < asked && rx.recv_deadline(deadline).is_ok() {
            answered += 1;
        }
        if answered < asked {
            log::warn!(
                "{} of {asked} sessions did not persist before the shutdown deadline",
                asked - answered
            );
        }
        self.sessions.write().clear();
        self.reaper.lock().take();
        self.pods.stop();
    }

    /// Daemon start: brings back every session recorded in the state
    /// directory (sessions.md "Operations"; the decisions are
    /// [`Session::restore`]'s): lists the session pods once, restores each
    /// app's output ring from `<id>.io/<app>.ring` (the seqs go on), and
    /// starts an owner per session, which re-adopts its pod (attach with
    /// log recovery, watch, Service and Ingress reconciled, relays and
    /// probes) or recreates it from its checkpoint. Records of ended
    /// sessions are removed with their files. Returns before the owners
    /// are done; an error (the pods cannot be listed) fails the start
    /// with nothing changed.
    pub fn restore(self: &Arc<Self>) -> Result<Restored, String> {
        let dir = self.settings.state_dir.join("sessions");
        let mut out = Restored::default();
        let entries = match std::fs::read_dir(&dir) {
            Ok(e) => e,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(out),
            Err(e) => return Err(format!("reading {}: {e}", dir.display())),
        };
        let mut records = Vec::new();
        for e in entries.flatten() {
            let name = e.file_name().to_string_lossy().into_owned();
            let Some(id) = name.strip_suffix(".json") else {
                continue;
            };
            // Checkpoints (`<id>.checkpoint.json`) and temporary files
            // are not records.
            if !super::is_session_id(id) {
                continue;
            }
            let rec = std::fs::read(e.path())
                .map_err(|e| e.to_string())
                .and_then(|b| super::machine::Record::parse(&b).map_err(|e| e.to_string()))
                .and_then(|r| {
                    if r.session_id == id {
                        Ok(r)
                    } else {
                        Err(format!("it is the record of {}", r.session_id))
                    }
                });
            match rec {
                Ok(r) if r.status.is_terminal() => {
                    self.remove_session_files(id);
                    out.removed += 1;
                }
                Ok(r) => records.push(r),
                Err(e) => {
                    log::error!("session record {}: {e}; left as it is", e_path(&dir, &name));
                    out.unreadable += 1;
                }
            }
        }
        if records.is_empty() {
            return Ok(out);
        }
        let api = Api::<Pod>::namespaced(&self.client, &self.settings.pod.namespace);
        let listed = api
            .list_all(&ListParams::labels(&watch_selector(
                &self.settings.pod.managed_by,
            )))
            .map_err(|e| format!("listing the session pods to re-adopt them: {e}"))?;
        let mut by_session: HashMap<String, Vec<Pod>> = HashMap::new();
        for p in listed.items {
            let id = p
                .metadata
                .labels
                .as_ref()
                .and_then(|l| l.get(super::pod::SESSION_ID_LABEL))
                .cloned();
            if let Some(id) = id {
                by_session.entry(id).or_default().push(p);
            }
        }
        records.sort_by_key(|r| r.created_at);
        let mut sessions = self.sessions.write();
        for rec in records {
            let id = rec.session_id.clone();
            let ios = self.load_rings(&id, &rec.apps);
            let pods = by_session.remove(&id).unwrap_or_default();
            let (session, first) = Session::restore(
                rec,
                self.settings.pod.clone(),
                self.settings.timings,
                pods,
                now_ms(),
            );
            match session.status() {
                super::machine::Status::Starting {
                    stage: super::machine::Stage::Run,
                } => out.adopting += 1,
                super::machine::Status::Starting { .. } => out.recreating += 1,
                super::machine::Status::Suspended => out.suspended += 1,
                _ => out.failed += 1,
            }
            match self.spawn_owner(session, first, None, ios) {
                Ok(h) => {
                    sessions.insert(id, h);
                }
                Err(e) => log::error!("session {id}: {}", e.message),
            }
        }
        Ok(out)
    }

    /// Each app's IO from its persisted ring; an app whose ring is missing
    /// starts afresh, with a gap notice when the daemon did not stop in
    /// order (no `.io` folder at all: the output before is lost).
    fn load_rings(&self, id: &str, apps: &[super::machine::App]) -> HashMap<String, Arc<AppIo>> {
        let dir = self.io_dir(id);
        let persisted = dir.is_dir();
        let mut ios = HashMap::new();
        for a in apps {
            let name = &a.spec.name;
            let path = dir.join(format!("{name}.ring"));
            let io = match std::fs::read(&path) {
                Ok(b) => match super::io::decode_ring(&b) {
                    Ok(img) => Some(AppIo::restore(self.settings.io_ring_bytes, img)),
                    Err(e) => {
                        log::error!("session {id}: {}: {e}", path.display());
                        None
                    }
                },
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => None,
                Err(e) => {
                    log::error!("session {id}: {}: {e}", path.display());
                    None
                }
            };
            let io = io.unwrap_or_else(|| {
                let io = AppIo::new(self.settings.io_ring_bytes);
                if !persisted {
                    io.push_gap();
                }
                io
            });
            ios.insert(name.clone(), Arc::new(io));
        }
        if persisted {
            self.loaded_rings.lock().push(dir);
        }
        ios
    }

    /// Removes the persisted rings [`Engine::restore`] loaded (their
    /// frames live in memory now, and the next stop writes them again): a
    /// later start that finds none knows the daemon did not stop in
    /// order. Called once the daemon serves, so a start that fails after
    /// the restore loses nothing.
    pub fn forget_persisted_rings(&self) {
        for dir in self.loaded_rings.lock().drain(..) {
            if let Err(e) = std::fs::remove_dir_all(&dir) {
                log::warn!("removing {}: {e}", dir.display());
            }
        }
    }

    /// A session's record, checkpoint and persisted rings.
    fn remove_session_files(&self, id: &str) {
        let _ = std::fs::remove_file(self.record_path(id));
        let _ = std::fs::remove_file(self.checkpoint_path(id));
        let _ = std::fs::remove_dir_all(self.io_dir(id));
    }

    /// Session ids the daemon knows: its sessions (finished ones stay for
    /// an hour) and every record in the state directory (one it could not
    /// read included: the reaper never takes the pod of a session that
    /// may still be someone's).
    pub fn known_session_ids(&self) -> std::collections::HashSet<String> {
        let mut ids: std::collections::HashSet<String> =
            self.sessions.read().keys().cloned().collect();
        let dir = self.settings.state_dir.join("sessions");
        for e in std::fs::read_dir(dir).into_iter().flatten().flatten() {
            let name = e.file_name().to_string_lossy().into_owned();
            if let Some(id) = name.strip_suffix(".json") {
                if super::is_session_id(id) {
                    ids.insert(id.to_string());
                }
            }
        }
        ids
    }

    /// Starts the `session-reaper` thread (one per daemon): every
    /// `grace / 2` (1 s to 30 s) it lists the session namespace's watch
    /// pods and deletes those [`Reaper`] finds orphaned for `grace`
    /// (sessions.md: managed-by AND mode `watch` AND a session id no
    /// record knows; Evicted pods and every other pod left alone). Ends
    /// with [`Engine::shutdown`].
    pub fn start_reaper(self: &Arc<Self>, grace: Duration) {
        let (stop_tx, stop_rx) = bounded::<()>(0);
        *self.reaper.lock() = Some(stop_tx);
        let engine = Arc::downgrade(self);
        let every = (grace / 2).clamp(Duration::from_secs(1), Duration::from_secs(30));
        let grace_ms = u64::try_from(grace.as_millis()).unwrap_or(u64::MAX);
        let spawned = std::thread::Builder::new()
            .name("session-reaper".into())
            .spawn(move || {
                let mut reaper = Reaper::new(grace_ms);
                loop {
                    match stop_rx.recv_timeout(every) {
                        Err(RecvTimeoutError::Timeout) => {}
                        _ => return,
                    }
                    let Some(engine) = engine.upgrade() else {
                        return;
                    };
                    engine.reap_once(&mut reaper);
                }
            });
        if let Err(e) = spawned {
            log::error!("spawning the orphan reaper: {e}");
        }
    }

    /// One round of the reaper: list, decide, delete.
    fn reap_once(&self, reaper: &mut Reaper) {
        let managed_by = &self.settings.pod.managed_by;
        let api = Api::<Pod>::namespaced(&self.client, &self.settings.pod.namespace);
        let pods = match api.list_all(&ListParams::labels(&watch_selector(managed_by))) {
            Ok(l) => l.items,
            Err(e) => {
                log::warn!("orphan reaper: listing the session pods: {e}");
                return;
            }
        };
        // Known ids after the list: a session started in between is known.
        let known = self.known_session_ids();
        let facts: Vec<PodFacts> = pods.iter().map(PodFacts::of).collect();
        for name in reaper.decide(&facts, &known, managed_by, now_ms()) {
            log::info!("orphan reaper: deleting pod {name}: its session is not known here");
            match api.delete(&name, &DeleteParams::default()) {
                Ok(_) | Err(KubeError::NotFound(_)) => {}
                Err(e) => log::warn!("orphan reaper: deleting pod {name}: {e}"),
            }
        }
    }

    /// The workspace agent of `h`'s current pod (the workspace routes).
    pub fn agent_of(&self, h: &Handle) -> Result<super::agent_client::AgentClient, ApiError> {
        let (pod, ip) = h
            .pod()
            .filter(|_| h.view()["status"] == "running")
            .ok_or_else(|| ApiError::new(Code::NotRunning, "the session is not running"))?;
        Ok(super::agent_client::AgentClient::new(
            self.access.clone(),
            PodTarget {
                namespace: self.settings.pod.namespace.clone(),
                name: pod,
                ip,
            },
            &h.token,
        ))
    }

    /// The cluster connection (the port proxy opens WebSockets with it).
    pub fn conn(&self) -> &Connection {
        &self.conn
    }

    /// The pod-access seam (the port proxy route uses it).
    pub fn access(&self) -> &Arc<dyn PodAccess> {
        &self.access
    }

    pub fn ping_interval(&self) -> Duration {
        self.settings.ping_interval
    }

    pub fn namespace(&self) -> &str {
        &self.settings.pod.namespace
    }

    fn record_path(&self, id: &str) -> PathBuf {
        self.settings
            .state_dir
            .join("sessions")
            .join(format!("{id}.json"))
    }

    /// Where a stop persists the session's IO rings.
    pub fn io_dir(&self, id: &str) -> PathBuf {
        self.settings
            .state_dir
            .join("sessions")
            .join(format!("{id}.io"))
    }

    fn checkpoint_path(&self, id: &str) -> PathBuf {
        self.settings
            .state_dir
            .join("sessions")
            .join(format!("{id}.checkpoint.json"))
    }
}

fn e_path(dir: &std::path::Path, name: &str) -> String {
    dir.join(name).display().to_string()
}

/// A panic's payload as text.
fn panic_text(p: &(dyn std::any::Any + Send)) -> String {
    p.downcast_ref::<&str>()
        .map(|s| s.to_string())
        .or_else(|| p.downcast_ref::<String>().cloned())
        .unwrap_or_else(|| "no message".into())
}

fn random_token() -> String {
    use rand::Rng;
    let b: [u8; 32] = rand::rng().random();
    b.iter().map(|x| format!("{x:02x}")).collect()
}

/// Writes `data` to `path` atomically (temporary file, then rename), mode
/// 0600; missing folders are made 0700 (whatever the umask).
pub fn write_atomic(path: &std::path::Path, data: &[u8]) -> std::io::Result<()> {
    use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt};
    let dir = path
        .parent()
        .ok_or_else(|| std::io::Error::other("no parent folder"))?;
    std::fs::DirBuilder::new()
        .recursive(true)
        .mode(0o700)
        .create(dir)?;
    let tmp = dir.join(format!(
        ".{}.tmp",
        path.file_name()
            .map_or_else(String::new, |n| n.to_string_lossy().into_owned())
    ));
    let mut f = std::fs::OpenOptions::new()
        .create(true)
        .write(true)
        .truncate(true)
        .mode(0o600)
        .open(&tmp)?;
    f.write_all(data)?;
    f.sync_data()?;
    drop(f);
    std::fs::rename(&tmp, path)
}

/// The owner thread's I/O state (the `Session` itself is a local of `run`).
struct Owner {
    engine: Arc<Engine>,
    handle: Arc<Handle>,
    inbox_tx: Sender<Msg>,
    bundle: Option<Bundle>,
    /// The body-budget reservation the bundle came with (dropped with it).
    bundle_permit: Option<Box<dyn std::any::Any + Send>>,
    /// Pods whose updates the hub routes here (shared with the owner
    /// thread's panic handler, which drops the routes).
    watches: Arc<Mutex<std::collections::HashSet<String>>>,
    /// Pod updates a full inbox refused, oldest first, one per pod (the
    /// latest state wins); drained by the owner at every turn.
    overflow: Arc<Mutex<Vec<(String, Input)>>>,
    /// The digest of the workspace listing (paths and content hashes) the
    /// checkpoint file holds; a checkpoint of an unchanged workspace only
    /// lists it.
    checkpointed: Arc<Mutex<Option<[u8; 32]>>>,
    /// Debug relays by pod.
    relays: HashMap<String, Vec<RelayHandle>>,
    /// Reachability probes by pod, app and port.
    probes: HashMap<(String, String, u16), ProbeHandle>,
    /// Attach streams by pod; workers add theirs, unless the pod's
    /// attaches were closed meanwhile (then they close it at once).
    attaches: Arc<Mutex<Attaches>>,
    subscribers: usize,
}

#[derive(Default)]
struct Attaches {
    open: HashMap<String, Vec<AttachHandle>>,
    closed: std::collections::HashSet<String>,
}

impl Owner {
    fn run(mut self, mut s: Session, first: Vec<Command>, inbox: Receiver<Msg>) {
        let mut done = self.execute(&s, first);
        let mut stopped: Option<Sender<()>> = None;
        // Ticks are due by the clock, not by a quiet inbox: a pod that
        // keeps changing (an image pull retried every few hundred ms) must
        // not hold off the start deadline.
        let mut next_tick = Instant::now() + Duration::from_millis(s.tick_interval_ms());
        while !done {
            let parked = std::mem::take(&mut *self.overflow.lock());
            for (_, i) in parked {
                let cmds = s.handle(i, now_ms());
                done = self.execute(&s, cmds);
                if done {
                    break;
                }
            }
            if done {
                break;
            }
            let now = Instant::now();
            if now >= next_tick {
                next_tick = now + Duration::from_millis(s.tick_interval_ms());
                // The subscriber count first: a viewer who just came must
                // keep the tick from suspending an idle session.
                done = self.idle_turn(&mut s);
                if done {
                    break;
                }
                let cmds = s.handle(Input::Tick, now_ms());
                // Most ticks of a settled session change nothing: no
                // commands, no new view to publish (building it every
                // second was most of an idle session's CPU).
                if !cmds.is_empty() {
                    done = self.execute(&s, cmds);
                }
                continue;
            }
            let cmds = match inbox.recv_timeout(next_tick - now) {
                Ok(Msg::Wake) => Vec::new(),
                #[cfg(debug_assertions)]
                Ok(Msg::Panic) => panic!("a panic injected by the test hook"),
                Ok(Msg::Shutdown(reply)) => {
                    self.persist(&s);
                    stopped = Some(reply);
                    break;
                }
                Ok(Msg::Input(i)) => s.handle(i, now_ms()),
                Ok(Msg::User(op, reply)) => match s.user(op, now_ms()) {
                    Ok(c) => {
                        let _ = reply.send(Ok(()));
                        c
                    }
                    Err(e) => {
                        let _ = reply.send(Err(e));
                        Vec::new()
                    }
                },
                Err(RecvTimeoutError::Timeout) => continue,
                Err(RecvTimeoutError::Disconnected) => break,
            };
            done = self.execute(&s, cmds);
            if !done {
                done = self.idle_turn(&mut s);
            }
            // A phase that needs finer ticks (a new pod's bring-up) gets
            // them from now on.
            next_tick = next_tick.min(Instant::now() + Duration::from_millis(s.tick_interval_ms()));
        }
        for name in self.watches.lock().drain() {
            self.engine.pods.unregister(&name);
        }
        for (_, r) in self.relays.drain() {
            r.iter().for_each(RelayHandle::stop);
        }
        for (_, p) in self.probes.drain() {
            p.stop();
        }
        let open: Vec<AttachHandle> = self
            .attaches
            .lock()
            .open
            .drain()
            .flat_map(|(_, v)| v)
            .collect();
        open.into_iter().for_each(AttachHandle::close);
        for io in self.handle.ios.lock().values() {
            io.end(super::io::CLOSE_ENDED, "session ended");
        }
        if let Some(reply) = stopped {
            let _ = reply.send(());
        }
    }

    /// The daemon stops (see [`Engine::shutdown`]).
    fn persist(&mut self, s: &Session) {
        let dir = self.engine.io_dir(s.id());
        for (app, io) in self.handle.ios.lock().iter() {
            if io.is_holding() {
                // A re-adoption still recovering: what it could not
                // recover is announced as a gap, and the held output kept.
                io.release(super::io::Recovered::Unavailable, OutStream::Stdout);
            }
            // Ended first: nothing gets a seq after the image is taken, so
            // every seq a viewer saw is in the file.
            io.end(
                super::io::CLOSE_GOING_AWAY,
                "kubegate is stopping; reconnect with lastSeq when it is back",
            );
            let img = io.ring_image();
            let path = dir.join(format!("{app}.ring"));
            if let Err(e) = write_atomic(&path, &super::io::encode_ring(&img)) {
                log::error!("session {}: persisting {app}'s output: {e}", s.id());
            }
        }
        if *s.status() == super::machine::Status::Running {
            if let Some((pod, ip)) = self.handle.pod() {
                let t = self.target(s, &pod, ip);
                let path = self.engine.checkpoint_path(s.id());
                if let Err(e) = checkpoint(&*self.engine.agent, &t, &path, &self.checkpointed) {
                    log::warn!("session {}: last checkpoint: {e}", s.id());
                }
            }
        }
        let path = self.engine.record_path(s.id());
        if let Err(e) = write_atomic(&path, s.record().to_string().as_bytes()) {
            log::error!("session {}: writing its record: {e}", s.id());
        }
    }

    /// Subscribers come and go on other threads: the idle rule hears of
    /// changes here, after every turn. True once the session finished.
    fn idle_turn(&mut self, s: &mut Session) -> bool {
        let n = self.handle.subscribers();
        if n == self.subscribers {
            return false;
        }
        self.subscribers = n;
        let cmds = s.handle(Input::Subscribers { count: n }, now_ms());
        self.execute(s, cmds)
    }

    /// Carries out commands in order; true once the session finished.
    fn execute(&mut self, s: &Session, cmds: Vec<Command>) -> bool {
        // The machine is already in its new state: publish the view first,
        // so a client that reacts to an emitted event reads a view at least
        // that new.
        *self.handle.view.lock() = s.view();
        *self.handle.pod.lock() = s.pod().and_then(|p| Some((p.name.clone(), p.ip.clone()?)));
        let mut finished = false;
        for c in cmds {
            match c {
                Command::CreatePod { pod } => self.create_pod(*pod),
                Command::CreateSecret { pod, uid } => self.create_secret(s, pod, uid),
                Command::DeletePod { name } => self.delete_pod(name),
                Command::WatchPod { name } => self.watch_pod(name),
                Command::StopWatch { name } => {
                    if self.watches.lock().remove(&name) {
                        self.engine.pods.unregister(&name);
                    }
                }
                Command::ProbeAgent { pod, ip, deadline } => {
                    let t = self.target(s, &pod, ip);
                    let left = Duration::from_millis(deadline.saturating_sub(now_ms()));
                    let agent = self.engine.agent.clone();
                    self.work(move || match agent.wait_ready(&t, Instant::now() + left) {
                        Ok(()) => Input::AgentReady { pod },
                        Err(message) => Input::AgentFailed { pod, message },
                    });
                }
                Command::Seed { pod, ip, source } => {
                    let t = self.target(s, &pod, ip);
                    let files = match source {
                        SeedSource::Bundle => Ok(self
                            .bundle
                            .as_ref()
                            .map(|b| {
                                b.files
                                    .iter()
                                    .map(|f| (f.path.clone(), f.data.clone()))
                                    .collect()
                            })
                            .unwrap_or_default()),
                        SeedSource::Checkpoint => {
                            read_checkpoint(&self.engine.checkpoint_path(s.id()))
                        }
                    };
                    let entries: Vec<String> =
                        s.apps().iter().map(|a| a.spec.entry.clone()).collect();
                    let files = files.map(|f| entries_last(f, &entries));
                    let agent = self.engine.agent.clone();
                    self.work(move || match files.and_then(|f| agent.write_all(&t, f)) {
                        Ok(()) => Input::SeedDone { pod },
                        Err(message) => Input::SeedFailed { pod, message },
                    });
                }
                Command::DropBundle => {
                    self.bundle = None;
                    self.bundle_permit = None;
                }
                Command::Checkpoint { pod, ip } => {
                    let t = self.target(s, &pod, ip);
                    let agent = self.engine.agent.clone();
                    let path = self.engine.checkpoint_path(s.id());
                    let last = self.checkpointed.clone();
                    self.work(move || {
                        let r = checkpoint(&*agent, &t, &path, &last);
                        match r {
                            Ok(()) => Input::CheckpointDone { pod },
                            Err(message) => Input::CheckpointFailed { pod, message },
                        }
                    });
                }
                Command::DeleteCheckpoint => {
                    self.checkpointed.lock().take();
                    let _ = std::fs::remove_file(self.engine.checkpoint_path(s.id()));
                }
                Command::Touch { pod, ip, path } => {
                    let t = self.target(s, &pod, ip);
                    let agent = self.engine.agent.clone();
                    let app = s
                        .apps()
                        .iter()
                        .find(|a| {
                            super::pod::entry_path(&a.spec.entry) == path || a.spec.entry == path
                        })
                        .map(|a| a.spec.name.clone())
                        .unwrap_or_default();
                    let rel = path
                        .strip_prefix(super::pod::WORKSPACE_ROOT)
                        .map(|p| p.trim_start_matches('/').to_string())
                        .unwrap_or(path);
                    self.work_opt(move || match agent.touch(&t, &rel) {
                        Ok(()) => None,
                        Err(message) => Some(Input::ReloadFailed { pod, app, message }),
                    });
                }
                Command::Publish {
                    id,
                    service,
                    ingress,
                } => self.publish(id, service, ingress),
                Command::Emit(ev) => self.emit(&ev),
                Command::WriteRecord => {
                    let path = self.engine.record_path(s.id());
                    let data = s.record().to_string();
                    if let Err(e) = write_atomic(&path, data.as_bytes()) {
                        log::error!("session {}: writing its record: {e}", s.id());
                    }
                }
                Command::Finished => {
                    *self.handle.finished.lock() = Some(Instant::now());
                    finished = true;
                }
                Command::StartRelay { pod, ip, app, port } => {
                    let tx = self.inbox_tx.clone();
                    let p = pod.clone();
                    let h = start_relay(
                        self.engine.access.clone(),
                        self.pod_target(&pod, ip),
                        port,
                        // Never blocks (one thread reads every relay): a
                        // full inbox gives the frame back, kept and offered
                        // again; a closed one means the session is over.
                        move |frame| {
                            let m = Msg::Input(Input::Debug {
                                pod: p.clone(),
                                app: app.clone(),
                                frame,
                            });
                            match tx.try_send(m) {
                                Err(crossbeam_channel::TrySendError::Full(Msg::Input(
                                    Input::Debug { frame, .. },
                                ))) => Err(frame),
                                _ => Ok(()),
                            }
                        },
                    );
                    self.relays.entry(pod).or_default().push(h);
                }
                Command::StopRelays { pod } => {
                    for r in self.relays.remove(&pod).unwrap_or_default() {
                        r.stop();
                    }
                }
                Command::StartProbe { pod, ip, app, port } => {
                    let tx = self.inbox_tx.clone();
                    let (p, a) = (pod.clone(), app.clone());
                    let h = start_probe(
                        self.engine.access.clone(),
                        self.pod_target(&pod, ip),
                        port,
                        move |state| {
                            let _ = tx.send(Msg::Input(Input::Reachability {
                                pod: p.clone(),
                                app: a.clone(),
                                port,
                                state,
                            }));
                        },
                    );
                    if let Some(old) = self.probes.insert((pod, app, port), h) {
                        old.stop();
                    }
                }
                Command::StopProbe { pod, app, port } => {
                    if let Some(h) = self.probes.remove(&(pod, app, port)) {
                        h.stop();
                    }
                }
                Command::StopProbes { pod } => {
                    let keys: Vec<_> = self.probes.keys().filter(|k| k.0 == pod).cloned().collect();
                    for k in keys {
                        if let Some(h) = self.probes.remove(&k) {
                            h.stop();
                        }
                    }
                }
                Command::Attach {
                    pod,
                    app,
                    container,
                    tty,
                    recover,
                } => self.attach(pod, app, container, tty, recover),
                Command::CloseAttaches { pod } => {
                    let handles = {
                        let mut g = self.attaches.lock();
                        g.closed.insert(pod.clone());
                        g.open.remove(&pod).unwrap_or_default()
                    };
                    handles.into_iter().for_each(AttachHandle::close);
                }
                Command::Output { app, stream, text } => {
                    self.handle.io(&app).push(stream, text.into_bytes());
                }
            }
        }
        finished
    }

    /// Attaches to an app container on a worker; the stream's end comes
    /// back as an input (a failure on the app's own channel). With
    /// `recover` (a re-adoption), the app's output is held from before
    /// the attach starts until what it wrote while the daemon was down is
    /// read from the container log ([`recover_output`]) and goes first.
    fn attach(&self, pod: String, app: String, container: String, tty: bool, recover: bool) {
        let io = self.handle.io(&app);
        let since = io.last_output_ns();
        if recover {
            io.hold();
        }
        let conn = self.engine.conn.clone();
        let client = self.engine.client.clone();
        let ns = self.engine.settings.pod.namespace.clone();
        let log_bytes = self.engine.settings.io_ring_bytes.saturating_add(64 << 10);
        let attaches = self.attaches.clone();
        let tx = self.inbox_tx.clone();
        let sid = self.handle.id.clone();
        let held = io.clone();
        let spawned = self.work_opt(move || {
            let (p, a) = (pod.clone(), app.clone());
            let on_end = move |r: Result<(), String>| {
                let input = match r {
                    Err(message) => Input::AttachFailed {
                        pod: p,
                        app: a,
                        message,
                    },
                    Ok(()) => Input::AttachEnded { pod: p, app: a },
                };
                let _ = tx.send(Msg::Input(input));
            };
            let r = super::io::attach(&conn, &ns, &pod, &container, tty, io.clone(), on_end);
            let attached_at = r.is_ok().then(now_ns);
            if recover {
                let what = RecoverTarget {
                    session: &sid,
                    namespace: &ns,
                    pod: &pod,
                    container: &container,
                };
                recover_output(&client, &what, &io, since, attached_at, tty, log_bytes);
            }
            match r {
                Ok(h) => {
                    let mut g = attaches.lock();
                    if g.closed.contains(&pod) {
                        drop(g);
                        h.close();
                        return None;
                    }
                    let open = g.open.entry(pod.clone()).or_default();
                    // Attaches that ended (a re-attach replaces one).
                    open.retain(|h| !h.is_finished());
                    open.push(h);
                    Some(Input::AttachOk { pod, app })
                }
                Err(message) => Some(Input::AttachFailed { pod, app, message }),
            }
        });
        if recover && !spawned {
            held.release(super::io::Recovered::Unavailable, main_stream(tty));
        }
    }

    fn pod_target(&self, pod: &str, ip: String) -> PodTarget {
        PodTarget {
            namespace: self.engine.settings.pod.namespace.clone(),
            name: pod.to_string(),
            ip,
        }
    }

    fn target(&self, s: &Session, pod: &str, ip: String) -> AgentTarget {
        AgentTarget {
            namespace: self.engine.settings.pod.namespace.clone(),
            pod: pod.to_string(),
            ip,
            token: s.workspace_token().to_string(),
        }
    }

    /// Runs `f` on a worker thread; its Input goes back to the inbox.
    fn work(&self, f: impl FnOnce() -> Input + Send + 'static) {
        self.work_opt(move || Some(f()));
    }

    /// [`Owner::work`] for work whose success needs no answer. False
    /// when the worker could not be started (logged).
    fn work_opt(&self, f: impl FnOnce() -> Option<Input> + Send + 'static) -> bool {
        let tx = self.inbox_tx.clone();
        let spawned = std::thread::Builder::new()
            .name("session-work".into())
            .spawn(move || {
                if let Some(i) = f() {
                    let _ = tx.send(Msg::Input(i));
                }
            });
        if let Err(e) = spawned {
            log::error!("session {}: spawning a worker: {e}", self.handle.id);
            return false;
        }
        true
    }

    fn create_pod(&self, pod: Pod) {
        let api = Api::<Pod>::namespaced(&self.engine.client, &self.engine.settings.pod.namespace);
        let name = pod.metadata.name().to_string();
        self.work(move || match api.create(&pod) {
            Ok(p) => Input::PodCreated {
                pod: name,
                uid: p.metadata.uid.unwrap_or_default(),
            },
            Err(e) => Input::PodCreateFailed {
                pod: name,
                message: e.to_string(),
            },
        });
    }

    /// The pod's token Secret (docs/sessions.md "The workspace token"):
    /// created, AlreadyExists being success (a re-adoption, or a retry
    /// after an answer that was lost); transient failures (transport,
    /// 429, 5xx) are tried again 3 times over about 2 s, then the
    /// machine hears [`Input::SecretFailed`]. Neither the Secret nor an
    /// error about it is logged with the token.
    fn create_secret(&self, s: &Session, pod: String, uid: String) {
        let settings = &self.engine.settings.pod;
        let Some(secret) = super::pod::build_token_secret(
            settings,
            &self.handle.id,
            &pod,
            &uid,
            s.workspace_token(),
        ) else {
            // Our own JSON: cannot happen (a unit test pins it).
            log::error!(
                "session {}: building the token Secret failed",
                self.handle.id
            );
            return;
        };
        let api = Api::<Secret>::namespaced(&self.engine.client, &settings.namespace);
        let id = self.handle.id.clone();
        self.work_opt(move || {
            let name = super::pod::token_secret_name(&pod);
            let mut delay = Duration::from_millis(250);
            let mut tries = 0;
            let message = loop {
                tries += 1;
                let e = match api.create(&secret) {
                    Ok(_) | Err(KubeError::AlreadyExists(_)) => return None,
                    Err(e) => e,
                };
                let transient = matches!(
                    e,
                    KubeError::Transport(_)
                        | KubeError::Throttled { .. }
                        | KubeError::Server { .. }
                );
                if !transient || tries > 3 {
                    break e.to_string();
                }
                log::warn!("session {id}: creating Secret {name}: {e} (trying again)");
                std::thread::sleep(delay);
                delay *= 2;
            };
            log::warn!("session {id}: creating Secret {name}: {message}");
            Some(Input::SecretFailed { pod, message })
        });
    }

    fn delete_pod(&self, name: String) {
        let api = Api::<Pod>::namespaced(&self.engine.client, &self.engine.settings.pod.namespace);
        let id = self.handle.id.clone();
        self.work_opt(move || {
            let params = DeleteParams {
                grace_period: Some(0),
                ..DeleteParams::default()
            };
            match api.delete(&name, &params) {
                Ok(_) | Err(KubeError::NotFound(_)) => {}
                Err(e) => log::warn!("session {id}: deleting pod {name}: {e}"),
            }
            None
        });
    }

    /// Routes the pod's updates from the engine's shared watch into the
    /// inbox (see [`deliver_into`]).
    fn watch_pod(&mut self, name: String) {
        self.watches.lock().insert(name.clone());
        self.engine.pods.register(
            &name,
            deliver_into(self.inbox_tx.clone(), self.overflow.clone()),
        );
    }

    fn publish(&self, id: u64, service: Option<Box<Service>>, ingress: Option<Box<Ingress>>) {
        let client = self.engine.client.clone();
        let ns = self.engine.settings.pod.namespace.clone();
        let sid = self.handle.id.clone();
        self.work(move || {
            let r = upsert_or_delete::<Service>(
                &client,
                &ns,
                &super::pod::service_name(&sid),
                service.map(|b| *b),
            )
            .and_then(|()| {
                upsert_or_delete::<Ingress>(
                    &client,
                    &ns,
                    &super::pod::service_name(&sid),
                    ingress.map(|b| *b),
                )
            });
            match r {
                Ok(()) => Input::PublishDone { id },
                Err(message) => Input::PublishFailed { id, message },
            }
        });
    }

    fn emit(&self, ev: &Event) {
        let terminal = matches!(ev, Event::Status { status, .. } if status.is_terminal());
        self.handle
            .events
            .push(ev.kind(), ev.data().to_string(), terminal);
    }
}

/// An app's main output stream: where recovered output and gap notices go
/// (a container log merges stdout and stderr).
fn main_stream(tty: bool) -> OutStream {
    if tty {
        OutStream::Tty
    } else {
        OutStream::Stdout
    }
}

/// Whose log [`recover_output`] reads.
struct RecoverTarget<'a> {
    session: &'a str,
    namespace: &'a str,
    pod: &'a str,
    container: &'a str,
}

/// How long a re-adoption waits for the new attach to deliver the lines
/// the log stamped after the attach began (so they are recovered once).
const ATTACH_CATCH_UP: Duration = Duration::from_secs(1);

/// Reads what the app wrote after `since_ns` (the last output the daemon
/// pushed before it stopped) from its container log (`timestamps=true`,
/// `sinceTime`; at most `max_bytes`) and releases `io`'s held output
/// behind it (see `session::recover`). Lines stamped at or after
/// `attached_at_ns` (the new attach was up) come through the attach too:
/// the release waits (at most [`ATTACH_CATCH_UP`]) until the held output
/// starts with them, so the overlap is dropped once, not delivered twice;
/// lines the attach never delivers stay in the recovery. A log that
/// cannot be read is a gap notice in the stream, and a warning.
fn recover_output(
    client: &Client,
    t: &RecoverTarget<'_>,
    io: &AppIo,
    since_ns: u64,
    attached_at_ns: Option<u64>,
    tty: bool,
    max_bytes: usize,
) {
    let params = LogParams {
        container: Some(t.container.to_string()),
        since_time: super::recover::since_time(since_ns),
        timestamps: true,
        tail_lines: None,
    };
    let api = Api::<Pod>::namespaced(client, t.namespace);
    let recovered = match api.logs(t.pod, &params, max_bytes) {
        Ok(log) => {
            let stamped = super::recover::lines_after(&log.body, since_ns);
            let late = attached_at_ns.map_or(0, |t| super::recover::stamped_from(&stamped, t));
            let lines: Vec<tungstenite::Bytes> = stamped.into_iter().map(|(_, l)| l).collect();
            if late > 0 && !log.truncated {
                // A bounded poll on this worker: the attach's pump pushes
                // into the held output on its own thread.
                let deadline = Instant::now() + ATTACH_CATCH_UP;
                while io.held_covers(&lines) < late && Instant::now() < deadline {
                    std::thread::sleep(Duration::from_millis(10));
                }
            }
            let n: usize = lines.iter().map(|l| l.len()).sum();
            log::info!(
                "session {}: {}: {n} bytes written since the last output read from the container log{}",
                t.session,
                t.container,
                if log.truncated { " (its start only: announcing a gap after it)" } else { "" }
            );
            if log.truncated {
                super::io::Recovered::Truncated(lines)
            } else {
                super::io::Recovered::Complete(lines)
            }
        }
        Err(e) => {
            log::warn!(
                "session {}: {}: the container log is not available ({e}): announcing a gap",
                t.session,
                t.container
            );
            super::io::Recovered::Unavailable
        }
    };
    io.release(recovered, main_stream(tty));
}

/// A hub route into a session's inbox that never blocks the hub: what a
/// full inbox refuses is parked in `overflow` (one entry per pod, the
/// latest state wins) and a `Wake` is sent; while anything is parked,
/// later updates join it, so their order holds.
/// The seed's files with the apps' entries last. An app container starts
/// once its entry exists (the wait in its command) and its runner then
/// watches the workspace: files renamed into place after the entry would
/// reach it as an edit and restart the app right after its start.
fn entries_last(mut files: Vec<(String, Vec<u8>)>, entries: &[String]) -> Vec<(String, Vec<u8>)> {
    let norm = |p: &str| crate::agent::wire::paths::normalize(p).unwrap_or_else(|_| p.to_string());
    let entries: Vec<String> = entries.iter().map(|e| norm(e)).collect();
    // Stable: the other files keep their order, so do the entries.
    files.sort_by_key(|(path, _)| entries.contains(&norm(path)));
    files
}

fn deliver_into(
    tx: Sender<Msg>,
    overflow: Arc<Mutex<Vec<(String, Input)>>>,
) -> super::pod_hub::Deliver {
    Box::new(move |u| {
        let (pod, input) = match u {
            PodUpdate::Observed(p) => {
                (p.metadata.name().to_string(), Input::PodObserved { pod: p })
            }
            PodUpdate::Gone(n) => (n.clone(), Input::PodGone { pod: n }),
        };
        let mut parked = overflow.lock();
        if parked.is_empty() {
            match tx.try_send(Msg::Input(input)) {
                Ok(()) => return,
                Err(crossbeam_channel::TrySendError::Full(Msg::Input(i))) => {
                    parked.push((pod, i));
                }
                // The session is over (or, not reachable, another message
                // came back).
                Err(_) => return,
            }
        } else if let Some(slot) = parked.iter_mut().find(|(p, _)| *p == pod) {
            slot.1 = input;
        } else {
            parked.push((pod, input));
        }
        drop(parked);
        let _ = tx.try_send(Msg::Wake);
    })
}

/// Create; on AlreadyExists read and replace carrying resourceVersion (and
/// a Service's clusterIP/clusterIPs); a Conflict on the replace retries
/// (bounded). `None`: delete, 404 tolerated.
fn upsert_or_delete<K>(client: &Client, ns: &str, name: &str, obj: Option<K>) -> Result<(), String>
where
    K: crate::kube::client::Resource + serde::Serialize + serde::de::DeserializeOwned + Clone,
{
    let api = Api::<K>::namespaced(client, ns);
    let Some(obj) = obj else {
        return match api.delete(name, &DeleteParams::default()) {
            Ok(_) | Err(KubeError::NotFound(_)) => Ok(()),
            Err(e) => Err(format!("deleting {} {name}: {e}", K::KIND)),
        };
    };
    match api.create(&obj) {
        Ok(_) => return Ok(()),
        Err(KubeError::AlreadyExists(_)) => {}
        Err(e) => return Err(format!("creating {} {name}: {e}", K::KIND)),
    }
    for _ in 0..5 {
        let current = api
            .get(name)
            .map_err(|e| format!("reading {} {name}: {e}", K::KIND))?;
        let mut next = serde_json::to_value(&obj).map_err(|e| e.to_string())?;
        let cur = serde_json::to_value(&current).map_err(|e| e.to_string())?;
        next["metadata"]["resourceVersion"] = cur["metadata"]["resourceVersion"].clone();
        if K::KIND == "Service" {
            for k in ["clusterIP", "clusterIPs"] {
                if let Some(v) = cur["spec"].get(k) {
                    next["spec"][k] = v.clone();
                }
            }
        }
        let next: K = serde_json::from_value(next).map_err(|e| e.to_string())?;
        match api.replace(name, &next) {
            Ok(_) => return Ok(()),
            Err(KubeError::Conflict(_)) => continue,
            Err(e) => return Err(format!("replacing {} {name}: {e}", K::KIND)),
        }
    }
    Err(format!(
        "replacing {} {name}: still conflicting after 5 tries",
        K::KIND
    ))
}

/// Checkpoints the workspace into `path`, unless its listing (every path
/// and content hash) is the one the file already holds: then the file is
/// kept as it is and only the listing was fetched (an idle session's
/// periodic checkpoint costs one small request, not a snapshot and a
/// synced write). The listing is taken before the snapshot, so a change
/// racing with it at worst costs one more snapshot next time.
fn checkpoint(
    agent: &dyn AgentOps,
    t: &AgentTarget,
    path: &std::path::Path,
    last: &Mutex<Option<[u8; 32]>>,
) -> Result<(), String> {
    use sha2::{Digest, Sha256};
    let mut listing = agent.tree(t)?;
    listing.sort();
    let mut h = Sha256::new();
    for (p, hash) in &listing {
        h.update(p.as_bytes());
        h.update([0]);
        h.update(hash.as_bytes());
        h.update([0]);
    }
    let digest: [u8; 32] = h.finalize().into();
    if *last.lock() == Some(digest) && path.exists() {
        return Ok(());
    }
    let files = agent.snapshot(t)?;
    write_checkpoint(path, &files).map_err(|e| format!("writing the checkpoint: {e}"))?;
    *last.lock() = Some(digest);
    Ok(())
}

fn write_checkpoint(path: &std::path::Path, files: &Files) -> std::io::Result<()> {
    use base64::Engine as _;
    let list: Vec<Value> = files
        .iter()
        .map(|(p, d)| {
            serde_json::json!({"path": p, "content": base64::engine::general_purpose::STANDARD.encode(d)})
        })
        .collect();
    write_atomic(
        path,
        serde_json::json!({"version": 1, "files": list})
            .to_string()
            .as_bytes(),
    )
}

fn read_checkpoint(path: &std::path::Path) -> Result<Files, String> {
    use base64::Engine as _;
    let text = std::fs::read(path).map_err(|e| format!("reading the checkpoint: {e}"))?;
    let v: Value = serde_json::from_slice(&text).map_err(|e| format!("the checkpoint: {e}"))?;
    let mut out = Vec::new();
    for f in v["files"].as_array().map(Vec::as_slice).unwrap_or_default() {
        let (Some(p), Some(c)) = (f["path"].as_str(), f["content"].as_str()) else {
            return Err("the checkpoint holds a malformed file entry".into());
        };
        let data = base64::engine::general_purpose::STANDARD
            .decode(c)
            .map_err(|e| format!("the checkpoint: {p}: {e}"))?;
        out.push((p.to_string(), data));
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_seed_writes_the_entries_last_and_keeps_the_rest_in_order() {
        let f = |p: &str| (p.to_string(), Vec::new());
        let files = vec![f("web/main.py"), f("a.txt"), f("./worker.sh"), f("b/c.txt")];
        let got: Vec<String> = entries_last(files, &["worker.sh".into(), "web//main.py".into()])
            .into_iter()
            .map(|(p, _)| p)
            .collect();
        assert_eq!(got, ["a.txt", "b/c.txt", "web/main.py", "./worker.sh"]);
    }

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

    #[test]
    fn pod_updates_never_block_and_a_full_inbox_parks_the_latest_per_pod() {
        let pod = |name: &str, phase: &str| -> Box<Pod> {
            Box::new(
                serde_json::from_value(serde_json::json!({
                    "metadata": {"name": name}, "status": {"phase": phase}
                }))
                .unwrap(),
            )
        };
        let (tx, rx) = bounded(1);
        let overflow = Arc::new(Mutex::new(Vec::new()));
        let mut d = deliver_into(tx, overflow.clone());
        d(PodUpdate::Observed(pod("a", "Pending")));
        // The inbox is full from here: nothing blocks.
        d(PodUpdate::Observed(pod("a", "Running")));
        d(PodUpdate::Observed(pod("b", "Pending")));
        d(PodUpdate::Observed(pod("a", "Failed")));
        d(PodUpdate::Gone("b".into()));
        assert!(matches!(
            rx.try_recv(),
            Ok(Msg::Input(Input::PodObserved { pod })) if pod.metadata.name() == "a"
        ));
        let parked: Vec<String> = overflow
            .lock()
            .iter()
            .map(|(p, i)| match i {
                Input::PodObserved { pod } => format!(
                    "{p}:{}",
                    serde_json::to_value(pod).unwrap()["status"]["phase"]
                ),
                Input::PodGone { .. } => format!("{p}:gone"),
                _ => format!("{p}:?"),
            })
            .collect();
        assert_eq!(parked, vec!["a:\"Failed\"", "b:gone"]);
        // With room again, updates still queue behind what is parked.
        d(PodUpdate::Observed(pod("c", "Pending")));
        assert_eq!(overflow.lock().len(), 3);
        assert!(matches!(rx.try_recv(), Ok(Msg::Wake)));
    }

    /// An agent over an in-memory workspace that counts snapshots.
    struct FakeAgent {
        files: Mutex<Files>,
        snapshots: AtomicUsize,
    }

    impl AgentOps for FakeAgent {
        fn wait_ready(&self, _: &AgentTarget, _: Instant) -> Result<(), String> {
            Ok(())
        }
        fn write_all(&self, _: &AgentTarget, files: Files) -> Result<(), String> {
            let mut cur = self.files.lock();
            for (p, d) in files {
                cur.retain(|(q, _)| *q != p);
                cur.push((p, d));
            }
            Ok(())
        }
        fn snapshot(&self, _: &AgentTarget) -> Result<Files, String> {
            self.snapshots.fetch_add(1, Ordering::SeqCst);
            Ok(self.files.lock().clone())
        }
        fn tree(&self, _: &AgentTarget) -> Result<Vec<(String, String)>, String> {
            use sha2::{Digest, Sha256};
            Ok(self
                .files
                .lock()
                .iter()
                .map(|(p, d)| {
                    let h: [u8; 32] = Sha256::digest(d).into();
                    (p.clone(), h.iter().map(|b| format!("{b:02x}")).collect())
                })
                .collect())
        }
        fn touch(&self, _: &AgentTarget, _: &str) -> Result<(), String> {
            Ok(())
        }
    }

    #[test]
    fn an_unchanged_workspace_is_not_snapshotted_again() {
        let dir = std::env::temp_dir().join(format!("kubegate-ckpt2-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        let path = dir.join("s.checkpoint.json");
        let agent = FakeAgent {
            files: Mutex::new(vec![("a.txt".into(), b"one".to_vec())]),
            snapshots: AtomicUsize::new(0),
        };
        let t = AgentTarget {
            namespace: "ns".into(),
            pod: "p".into(),
            ip: "127.0.0.1".into(),
            token: "t".into(),
        };
        let last = Mutex::new(None);
        let snaps = || agent.snapshots.load(Ordering::SeqCst);
        checkpoint(&agent, &t, &path, &last).unwrap();
        assert_eq!(snaps(), 1);
        checkpoint(&agent, &t, &path, &last).unwrap();
        assert_eq!(snaps(), 1, "unchanged: listed, not snapshotted");
        // A changed file, then a new one: each is snapshotted and lands.
        agent
            .write_all(&t, vec![("a.txt".into(), b"two".to_vec())])
            .unwrap();
        checkpoint(&agent, &t, &path, &last).unwrap();
        assert_eq!(snaps(), 2);
        assert_eq!(
            read_checkpoint(&path).unwrap(),
            vec![("a.txt".to_string(), b"two".to_vec())]
        );
        agent
            .write_all(&t, vec![("b.txt".into(), b"".to_vec())])
            .unwrap();
        checkpoint(&agent, &t, &path, &last).unwrap();
        assert_eq!(snaps(), 3);
        // The file gone from disk: written again even though unchanged.
        std::fs::remove_file(&path).unwrap();
        checkpoint(&agent, &t, &path, &last).unwrap();
        assert_eq!(snaps(), 4);
        assert_eq!(read_checkpoint(&path).unwrap().len(), 2);
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn checkpoints_round_trip_bytes() {
        let dir = std::env::temp_dir().join(format!("kubegate-ckpt-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        let path = dir.join("s.checkpoint.json");
        let files = vec![
            ("a.txt".to_string(), b"hi".to_vec()),
            ("b/c.bin".to_string(), vec![0, 255]),
        ];
        write_checkpoint(&path, &files).unwrap();
        assert_eq!(read_checkpoint(&path).unwrap(), files);
        use std::os::unix::fs::PermissionsExt;
        assert_eq!(
            std::fs::metadata(&path).unwrap().permissions().mode() & 0o777,
            0o600
        );
        std::fs::write(&path, b"{\"files\":[{\"path\":1}]}").unwrap();
        assert!(read_checkpoint(&path).is_err());
        let _ = std::fs::remove_dir_all(&dir);
    }
}
