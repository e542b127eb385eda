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
//!
//! One file per concern:
//!
//! - this file: the registry ([`Engine`]: start, look-up, eviction,
//!   shutdown), a session's [`Handle`] as the routes see it, the owner's
//!   [`Msg`]s, and the orphan reaper's thread;
//! - `gateway_reader`: the one reader of the configured Gateway
//!   (`session-gateway`), whose state every session's route reads take;
//! - `owner`: the owner loop (`session-<id>`) and the commands it
//!   carries out on the spot;
//! - `cluster`: the commands carried out against the cluster on workers
//!   (pod, Secret, Service and Ingress);
//! - `attach`: app attach streams and a re-adoption's output recovery;
//! - [`restore`]: re-adoption at start ([`Engine::restore`]);
//! - [`checkpoint`]: checkpoint files and the atomic write of every file
//!   the engine keeps;
//! - [`event_log`]: a session's SSE history;
//! - [`agent_ops`]: the workspace agent as the engine uses it.

pub mod agent_ops;
mod attach;
pub mod checkpoint;
mod cluster;
pub mod event_log;
mod gateway_reader;
mod owner;
pub mod restore;
pub mod settings;

use self::agent_ops::AgentOps;
use self::checkpoint::write_atomic;
use self::event_log::EventLog;
use self::gateway_reader::GatewayReader;
use self::owner::{Attaches, Owner};
use crate::api::{ApiError, Code};
use crate::kube::client::{Api, Client, DeleteParams, KubeError, ListParams, Pod};
use crate::kube::connection::Connection;
use crate::session::access::{PodAccess, PodTarget};
use crate::session::gateway::{GatewayState, Routing};
use crate::session::io::ring::AppIo;
use crate::session::machine::{Command, Event, Input, Millis, NewSession, Session, UserOp};
use crate::session::pod::PodSettings;
use crate::session::pod_hub::PodHub;
use crate::session::reaper::{PodFacts, Reaper};
use crate::session::spec::{Bundle, SessionSpec};
use crossbeam_channel::{bounded, RecvTimeoutError, Sender};
use parking_lot::{Mutex, RwLock};
use serde_json::Value;
use std::collections::{BTreeMap, HashMap};
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
    pub timings: crate::session::machine::Timings,
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
    /// The configured Gateway as last read (gateway routing only; else
    /// `Unknown` for good), and its reader.
    gateway: Arc<RwLock<GatewayState>>,
    gateway_reader: Mutex<Option<GatewayReader>>,
    /// Persisted rings loaded by [`Engine::restore`], removed once the
    /// daemon serves ([`Engine::forget_persisted_rings`]).
    loaded_rings: Mutex<Vec<PathBuf>>,
}

/// The pod selector of every watch-session pod of this daemon.
fn watch_selector(managed_by: &str) -> String {
    format!(
        "{}={managed_by},{}={}",
        crate::kube::labels::MANAGED_BY_LABEL,
        crate::session::pod::MODE_LABEL,
        crate::session::pod::MODE_WATCH
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
            agent: agent_ops::agent_ops(access.clone()),
            access,
            settings,
            sessions: RwLock::new(BTreeMap::new()),
            pods,
            reaper: Mutex::new(None),
            gateway: Arc::new(RwLock::new(GatewayState::Unknown)),
            gateway_reader: Mutex::new(None),
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
            let id = crate::session::new_session_id(&mut rng);
            if !sessions.contains_key(&id) {
                break id;
            }
        };
        let token = crate::token::random_hex();
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
    /// (a failed session leaves no pod, as docs/sessions.md#start says of any
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
        let status = crate::session::machine::Status::Failed {
            stage: crate::session::machine::Stage::Run,
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
        let selector = format!("{}={}", crate::session::pod::SESSION_ID_LABEL, h.id);
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
        if let Some(r) = self.gateway_reader.lock().take() {
            if !r.stop(deadline.max(Instant::now() + Duration::from_secs(1))) {
                log::warn!("the Gateway reader did not end before the shutdown deadline");
            }
        }
        self.pods.stop();
    }

    /// Starts the `session-gateway` thread (`gateway_reader`) with
    /// gateway routing; nothing otherwise. Ends with [`Engine::shutdown`].
    pub fn start_gateway_reader(&self) {
        let Routing::Gateway(parent) = &self.settings.pod.routing else {
            return;
        };
        let mut slot = self.gateway_reader.lock();
        if slot.is_none() {
            *slot = GatewayReader::start(self.client.clone(), parent.clone(), self.gateway.clone());
        }
    }

    /// The workspace agent of `h`'s current pod (the workspace routes).
    pub fn agent_of(
        &self,
        h: &Handle,
    ) -> Result<crate::session::agent_client::AgentClient, ApiError> {
        let (pod, ip) = h
            .pod()
            .filter(|_| h.view()["status"] == "running")
            .ok_or_else(|| ApiError::new(Code::NotRunning, "the session is not running"))?;
        Ok(crate::session::agent_client::AgentClient::new(
            self.access.clone(),
            PodTarget {
                namespace: self.settings.pod.namespace.clone(),
                name: pod,
                ip,
            },
            &h.token,
        ))
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

/// The orphan reaper's thread.
impl Engine {
    /// Starts the `session-reaper` thread (one per daemon): every
    /// `grace / 2` (1 s to 30 s) it lists the session namespace's watch
    /// pods and deletes those [`Reaper`] finds orphaned for `grace`
    /// (docs/sessions.md#operations: managed-by AND mode `watch` AND a session id no
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
}
