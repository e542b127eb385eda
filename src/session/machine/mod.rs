//! One session's state machine, sans-IO (docs/sessions.md#start,
//! docs/sessions.md#while-running, docs/sessions.md#operations; docs/sessions.md has the
//! diagrams and choices).
//!
//! The engine feeds it what it observes ([`Input`]) and the user's
//! operations ([`UserOp`]), with the current time; it answers with
//! [`Command`]s to carry out, in order. It never blocks, never does I/O and
//! never reads a clock: every deadline is a time stamp checked on
//! [`Input::Tick`]. It takes its settings as the core's own structs
//! ([`Timings`], [`PodSettings`]); the engine builds them from the config.
//!
//! Every input about a pod names the pod; inputs about a pod that is no
//! longer the session's current pod are ignored (a late answer from a
//! torn-down pod cannot disturb its successor), except a late
//! [`Input::PodCreated`], whose pod is deleted at once (a stop raced its
//! create).
//!
//! This file holds the interface (inputs, user operations, commands), the
//! [`Session`] and its state grouped by concern, and the two entry points
//! that dispatch to the parts:
//! - `event`: statuses, stages and the SSE events the machine emits;
//! - `bringup`: a pod from its create to `running` (create, schedule,
//!   agent, seed, publish and attach) and the pod watch's readings;
//! - `attach`: attach streams lost while running, made again with backoff;
//! - `ports`: the Service, Ingress and HTTPRoute publishes, port re-routes
//!   (`Kernel.PortsResolved`) and reachability probes;
//! - `routing`: the HTTPRoutes read back as the endpoints' routing states;
//! - `runs`: the apps' `run` events and generations, from the app runner's
//!   frames and from container ends;
//! - `lifecycle`: checkpoints, suspend, resume, stop, reloads, the apps
//!   change, the maximum life, idle suspension and the suspended TTL;
//! - `adopt`: [`Record`] and [`Session::restore`], a session rebuilt from
//!   its record after a daemon restart.

mod adopt;
mod attach;
mod bringup;
mod event;
mod lifecycle;
mod ports;
mod routing;
mod runs;

#[cfg(test)]
mod adopt_tests;
#[cfg(test)]
mod routing_tests;
#[cfg(test)]
mod tests;

pub use adopt::{Record, RecordError, RunRecord, DRAIN_DEADLINE_MS};
use attach::{Reattach, REATTACH_FIRST_MS};
use bringup::{Phase, AGENT_DEADLINE_SLACK_MS};
pub use event::{Event, OutStream, Reach, Rejected, RunEnd, SeedSource, Stage, Status};
use lifecycle::AfterCheckpoint;
pub use ports::ports_resolved_from;
use ports::PortChange;
use routing::RouteReads;
pub use routing::{
    RoutesReading, ROUTE_POLL_FAST_FOR_MS, ROUTE_POLL_SETTLED_MS, ROUTE_POLL_UNSETTLED_MS,
};
pub use runs::{runner_event_from, RunnerEvent};
use runs::{started_pos, RunTrack};

use super::pod::{self, all_endpoints, Endpoint, PodSettings};
use super::spec::{AppSpec, Port, SessionSpec};
use crate::api::{ApiError, Code};
use crate::kube::client::{HttpRoute, Ingress, Pod, Service};
use serde::{Deserialize, Serialize};
use serde_json::{json, Value};
use std::collections::{BTreeMap, BTreeSet, VecDeque};
use std::sync::Arc;
use std::time::{Duration, UNIX_EPOCH};

/// Wall-clock time in milliseconds since the Unix epoch (the engine passes
/// `SystemTime::now()`; tests pass numbers).
pub type Millis = u64;

/// What the engine observed.
#[derive(Debug, Clone, PartialEq)]
pub enum Input {
    /// The create answered with the pod's uid.
    PodCreated {
        pod: String,
        uid: String,
    },
    PodCreateFailed {
        pod: String,
        message: String,
    },
    /// The pod's token Secret could not be created (after retries).
    SecretFailed {
        pod: String,
        message: String,
    },
    /// A watch event (ADDED/MODIFIED) or a read of the pod.
    PodObserved {
        pod: Box<Pod>,
    },
    /// The watch saw DELETED, or a read answered 404.
    PodGone {
        pod: String,
    },
    /// The workspace agent answered.
    AgentReady {
        pod: String,
    },
    /// The agent did not answer before the deadline given in
    /// [`Command::ProbeAgent`]; `message` is the last error.
    AgentFailed {
        pod: String,
        message: String,
    },
    SeedDone {
        pod: String,
    },
    SeedFailed {
        pod: String,
        message: String,
    },
    /// Attach results. A failure is reported on the app's output channel;
    /// it never fails the session.
    AttachOk {
        pod: String,
        app: String,
    },
    AttachFailed {
        pod: String,
        app: String,
        message: String,
    },
    /// An attach stream ended without an error (the container exited, or
    /// the API server closed the stream).
    AttachEnded {
        pod: String,
        app: String,
    },
    /// Results of a [`Command::Publish`], by its id.
    PublishDone {
        id: u64,
    },
    PublishFailed {
        id: u64,
        message: String,
    },
    /// A frame of an app's debug stream (relayed to subscribers;
    /// `Kernel.PortsResolved` re-routes the app's ports).
    Debug {
        pod: String,
        app: String,
        frame: Value,
    },
    Reachability {
        pod: String,
        app: String,
        port: u16,
        state: Reach,
    },
    CheckpointDone {
        pod: String,
    },
    CheckpointFailed {
        pod: String,
        message: String,
    },
    /// The touch of a reload failed.
    ReloadFailed {
        pod: String,
        app: String,
        message: String,
    },
    /// The answer to a [`Command::ReadRoutes`].
    RoutesRead {
        reading: RoutesReading,
    },
    /// The number of subscribers (SSE and IO) now attached.
    Subscribers {
        count: usize,
    },
    /// Time passed: deadlines, idle, checkpoints, TTL, maximum life.
    Tick,
}

/// An operation a user asked for (answered at once: `Err` is the HTTP
/// error; `Ok` commands are carried out and the request answered 202/204).
#[derive(Debug, Clone, PartialEq)]
pub enum UserOp {
    Stop,
    Suspend,
    Resume,
    Reload { app: String },
    SetApps { apps: Vec<AppSpec> },
}

/// What the engine must do, in order.
#[derive(Debug, Clone, PartialEq)]
pub enum Command {
    CreatePod {
        pod: Box<Pod>,
    },
    /// Create the pod's token Secret (`pod::build_token_secret`, owned by
    /// `uid`; the engine adds the token, so no command carries it);
    /// AlreadyExists is success; a failure is [`Input::SecretFailed`].
    CreateSecret {
        pod: String,
        uid: String,
    },
    /// Delete with grace 0; 404 is success.
    DeletePod {
        name: String,
    },
    /// Watch the pod by name (field selector), re-armed after 2 s when the
    /// stream ends, resuming from the last resourceVersion; events become
    /// [`Input::PodObserved`] / [`Input::PodGone`].
    WatchPod {
        name: String,
    },
    StopWatch {
        name: String,
    },
    /// Try the agent at once, then back off from 10 ms doubling to 500 ms,
    /// until `deadline`: [`Input::AgentReady`] or [`Input::AgentFailed`].
    ProbeAgent {
        pod: String,
        ip: String,
        deadline: Millis,
    },
    /// ONE apply of every file of `source`.
    Seed {
        pod: String,
        ip: String,
        source: SeedSource,
    },
    /// The bundle is no longer needed (the first seed is done).
    DropBundle,
    /// Attach to `container` (stdin on, `tty` as declared). With
    /// `recover` (a re-adoption after a daemon restart), the app's output
    /// is held while what it wrote during the downtime is read from the
    /// container log, which goes first (or a gap notice when the log
    /// cannot be read).
    Attach {
        pod: String,
        app: String,
        container: String,
        tty: bool,
        recover: bool,
    },
    /// Close every attach stream of the pod.
    CloseAttaches {
        pod: String,
    },
    /// Upsert the Service and, with ingress routing, the Ingress; `None`
    /// means "must not exist" (delete, 404 tolerated). With gateway
    /// routing, `routes` is the whole set of the session's HTTPRoutes:
    /// each upserted, any other of the session's deleted. Each layer is
    /// touched only when it is the configured one.
    Publish {
        id: u64,
        service: Option<Box<Service>>,
        ingress: Option<Box<Ingress>>,
        routes: Vec<HttpRoute>,
    },
    /// Read the session's HTTPRoutes (by its session-id label) into
    /// [`Input::RoutesRead`] (gateway routing only).
    ReadRoutes,
    /// Relay `http://<ip>:<port>/events` of the app (retry 0.5 s doubling to
    /// 5 s) into [`Input::Debug`].
    StartRelay {
        pod: String,
        ip: String,
        app: String,
        port: u16,
    },
    StopRelays {
        pod: String,
    },
    /// Reachability probe of a tcp port into [`Input::Reachability`].
    StartProbe {
        pod: String,
        ip: String,
        app: String,
        port: u16,
    },
    StopProbe {
        pod: String,
        app: String,
        port: u16,
    },
    StopProbes {
        pod: String,
    },
    /// Snapshot the workspace into the state directory (atomically
    /// replacing the previous checkpoint).
    Checkpoint {
        pod: String,
        ip: String,
    },
    DeleteCheckpoint,
    /// Rewrite `path` with its own bytes through the agent (a reload).
    Touch {
        pod: String,
        ip: String,
        path: String,
    },
    /// A message of kubegate's own on an app's output channel.
    Output {
        app: String,
        stream: OutStream,
        text: String,
    },
    Emit(Event),
    /// Write the session record ([`Session::record`]) atomically.
    WriteRecord,
    /// The session reached a terminal status: release its slot.
    Finished,
}

/// The timings and limits the machine applies (the engine builds them from
/// the config's `[sessions]`; the keys are named by each field).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Timings {
    /// Pod created -> Running with a pod IP (`start_deadline_secs`).
    pub start_deadline_ms: u64,
    /// Pod running -> the workspace agent answering (`agent_deadline_secs`).
    pub agent_deadline_ms: u64,
    /// No subscriber for this long: checkpoint and suspend (`idle_secs`).
    pub idle_ms: u64,
    /// A session's whole life, pod time only (`max_life_secs`).
    pub max_life_ms: u64,
    /// A suspended session is forgotten after this long
    /// (`suspended_ttl_secs`).
    pub suspended_ttl_ms: u64,
    /// Checkpoint period while running (`checkpoint_interval_secs`).
    pub checkpoint_interval_ms: u64,
    /// Reloads per session per minute (`reloads_per_minute`).
    pub reloads_per_minute: u64,
}

impl Default for Timings {
    /// The daemon's defaults (`[sessions]` in docs/config.md; a test in
    /// `session::engine::settings` keeps the two equal).
    fn default() -> Self {
        Timings {
            start_deadline_ms: 180_000,
            agent_deadline_ms: 120_000,
            idle_ms: 300_000,
            max_life_ms: 6 * 3_600_000,
            suspended_ttl_ms: 24 * 3_600_000,
            checkpoint_interval_ms: 30_000,
            reloads_per_minute: 30,
        }
    }
}

/// One app and the starts of its process.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct App {
    pub spec: AppSpec,
    /// Starts of the app's process in this session, from 1 (0: never ran).
    pub generation: u64,
}

/// The session's current pod.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct PodRef {
    pub name: String,
    pub uid: Option<String>,
    pub ip: Option<String>,
}

/// What a session is created from.
#[derive(Debug, Clone)]
pub struct NewSession {
    pub id: String,
    pub principal: String,
    pub spec: SessionSpec,
    pub workspace_token: String,
    pub settings: Arc<PodSettings>,
    pub timings: Timings,
}

/// One watch session: its state, grouped by concern. Every change goes
/// through [`Session::handle`], [`Session::user`] or [`Session::restore`];
/// nothing else writes it.
#[derive(Debug, Clone)]
pub struct Session {
    who: Identity,
    /// The pod builders' settings, shared by every session of the daemon.
    settings: Arc<PodSettings>,
    timings: Timings,
    apps: Apps,
    status: Status,
    /// When the status or the record last changed (the view's
    /// `updatedAt`; a suspended session without `suspended_at` expires
    /// from it).
    updated_at: Millis,
    pod: PodState,
    life: Life,
    checkpoints: Checkpoints,
    viewers: Viewers,
    /// When each reload of the last minute was asked (at most
    /// [`Timings::reloads_per_minute`] of them).
    reloads: VecDeque<Millis>,
    routes: Routes,
    /// The HTTPRoutes' states as last read (gateway routing).
    route_reads: RouteReads,
    /// Per app: what its `run` events have said so far and how the app
    /// runner's generations map onto the session's ([`RunTrack`]). Kept
    /// across pods and in the record.
    runs: BTreeMap<String, RunTrack>,
}

/// Who the session is: set at creation, never changed.
#[derive(Debug, Clone)]
struct Identity {
    id: String,
    principal: String,
    /// The workspace agent's bearer token (in the record, never in a
    /// command: the engine adds it where it is needed).
    workspace_token: String,
    created_at: Millis,
}

/// What the session runs. Rule: `spec.apps` is always the specs of
/// `list`, in order (every change of the set or of an app's ports goes
/// through [`Apps::sync_spec`]).
#[derive(Debug, Clone)]
struct Apps {
    spec: SessionSpec,
    list: Vec<App>,
}

impl Apps {
    /// `spec.apps` follows `list` again after a change.
    fn sync_spec(&mut self) {
        self.spec.apps = self.list.iter().map(|a| a.spec.clone()).collect();
    }

    fn names(&self) -> BTreeSet<String> {
        self.list.iter().map(|a| a.spec.name.clone()).collect()
    }
}

/// The current pod and where its bring-up stands. Rules: `current` is
/// `None` exactly in [`Phase::Down`] and [`Phase::Draining`] (whose old pod
/// is not the session's any more); `seq` only grows (pod names are new at
/// every bring-up); `ended` and `reattach` are about the current pod and
/// cleared with it.
#[derive(Debug, Clone)]
struct PodState {
    current: Option<PodRef>,
    phase: Phase,
    /// What the current pod is (or will be) seeded from.
    seed: SeedSource,
    /// Pods created so far (part of the pod name).
    seq: u64,
    /// A stop (the user's, or the end of life) is tearing the pod down: its
    /// end is not a failure.
    user_stopped: bool,
    /// Apps whose container end was reported for the current pod.
    ended: BTreeSet<String>,
    /// Apps whose attach was lost while running (the stream cut: an API
    /// server restart, a network blip), to attach again.
    reattach: BTreeMap<String, Reattach>,
}

/// The session's maximum life is pod time: suspended time does not count.
/// Rule: `since` is set while a pod holds the session's life (from its
/// bring-up to its teardown), and `used_ms` holds what earlier pods used.
#[derive(Debug, Clone)]
struct Life {
    /// Life used by earlier pods.
    used_ms: u64,
    /// When the current pod's share of the life began.
    since: Option<Millis>,
    /// When the session was suspended (its TTL counts from it).
    suspended_at: Option<Millis>,
}

/// The workspace's checkpoints. Rules: one in flight at most; `after` is
/// set only while one is in flight (what runs when it is done: a suspend or
/// an apps change), and user operations are refused meanwhile.
#[derive(Debug, Clone)]
struct Checkpoints {
    /// The last one done (or failed: a failure waits a full interval too).
    last_at: Option<Millis>,
    /// One exists in the state directory (a resume or recreate needs it).
    exists: bool,
    in_flight: bool,
    after: Option<AfterCheckpoint>,
}

/// Who watches. Rule: `idle_since` is set exactly while nobody does (the
/// idle suspension counts from it).
#[derive(Debug, Clone)]
struct Viewers {
    /// SSE and IO subscribers now attached.
    count: usize,
    idle_since: Option<Millis>,
}

/// The published ports: the Service and Ingress upserts in flight and the
/// probes running. Rules: publish ids only grow; a port change waits in
/// `changes` under its publish id until that publish answers; `probes` holds
/// the (app, tcp port) pairs probed on the current pod, cleared with it.
#[derive(Debug, Clone)]
struct Routes {
    next_publish: u64,
    changes: BTreeMap<u64, PortChange>,
    probes: BTreeSet<(String, u16)>,
}

impl Session {
    /// A session as it is before anything happened to it: starting (stage
    /// create), no pod, generation 0 for every app. `start` brings it up;
    /// `restore` (`adopt.rs`) overwrites what the record knows.
    pub(super) fn fresh(new: NewSession, now: Millis) -> Session {
        let list = new
            .spec
            .apps
            .iter()
            .map(|a| App {
                spec: a.clone(),
                generation: 0,
            })
            .collect();
        Session {
            who: Identity {
                id: new.id,
                principal: new.principal,
                workspace_token: new.workspace_token,
                created_at: now,
            },
            settings: new.settings,
            timings: new.timings,
            apps: Apps {
                spec: new.spec,
                list,
            },
            status: Status::Starting {
                stage: Stage::Create,
            },
            updated_at: now,
            pod: PodState {
                current: None,
                phase: Phase::Down,
                seed: SeedSource::Bundle,
                seq: 0,
                user_stopped: false,
                ended: BTreeSet::new(),
                reattach: BTreeMap::new(),
            },
            life: Life {
                used_ms: 0,
                since: None,
                suspended_at: None,
            },
            checkpoints: Checkpoints {
                last_at: None,
                exists: false,
                in_flight: false,
                after: None,
            },
            viewers: Viewers {
                count: 0,
                idle_since: Some(now),
            },
            reloads: VecDeque::new(),
            routes: Routes {
                next_publish: 1,
                changes: BTreeMap::new(),
                probes: BTreeSet::new(),
            },
            route_reads: RouteReads::default(),
            runs: BTreeMap::new(),
        }
    }

    /// A new session, already starting: the first commands create its pod.
    pub fn start(new: NewSession, now: Millis) -> (Session, Vec<Command>) {
        let mut s = Session::fresh(new, now);
        let mut out = vec![
            Command::Emit(Event::Status {
                status: s.status.clone(),
                endpoints: None,
            }),
            Command::WriteRecord,
        ];
        s.bring_up(now, SeedSource::Bundle, &mut out);
        (s, out)
    }

    pub fn id(&self) -> &str {
        &self.who.id
    }

    pub fn principal(&self) -> &str {
        &self.who.principal
    }

    pub fn status(&self) -> &Status {
        &self.status
    }

    /// How often [`Input::Tick`] matters: every second while a pod is
    /// being brought up (deadlines of seconds), every 5 s once the session
    /// is settled, running or suspended (its deadlines, checkpoints, idle
    /// suspension, max life and the suspended TTL, are minutes apart), so
    /// hundreds of idle sessions do not wake every second.
    pub fn tick_interval_ms(&self) -> Millis {
        match self.pod.phase {
            Phase::Up if !self.pod.reattach.is_empty() => REATTACH_FIRST_MS,
            Phase::Up if self.routes_unsettled() => ROUTE_POLL_UNSETTLED_MS,
            Phase::Up | Phase::Down => 5_000,
            _ => 1_000,
        }
    }

    pub fn apps(&self) -> &[App] {
        &self.apps.list
    }

    pub fn pod(&self) -> Option<&PodRef> {
        self.pod.current.as_ref()
    }

    pub fn workspace_token(&self) -> &str {
        &self.who.workspace_token
    }

    /// The current endpoints of every app (with gateway routing, each tcp
    /// port's routing state).
    pub fn endpoints(&self) -> Vec<Endpoint> {
        let mut eps = all_endpoints(
            self.settings.base_domain.as_deref(),
            &self.who.id,
            &self.app_ports(),
        );
        for e in &mut eps {
            e.routing = self.route_state_of(e.port, e.protocol);
        }
        eps
    }

    fn app_ports(&self) -> Vec<(String, Vec<Port>)> {
        self.apps
            .list
            .iter()
            .map(|a| (a.spec.name.clone(), a.spec.ports.clone()))
            .collect()
    }

    /// `GET /v1/sessions/{id}` (docs/api.md#sessions).
    pub fn view(&self) -> Value {
        let mut v = json!({
            "sessionId": self.who.id,
            "status": self.status.as_str(),
            "apps": self.apps.list.iter().map(|a| json!({
                "name": a.spec.name,
                "io": a.spec.io,
                "generation": a.generation,
                "ports": a.spec.ports.iter().map(|p| json!({"port": p.port, "protocol": p.protocol})).collect::<Vec<_>>(),
            })).collect::<Vec<_>>(),
            "endpoints": self.endpoints(),
            "createdAt": rfc3339(self.who.created_at),
            "updatedAt": rfc3339(self.updated_at),
        });
        if let Some(e) = self.status.error() {
            v["error"] = e;
        }
        v
    }

    /// What the session record file holds (re-adoption after a restart).
    pub fn record(&self) -> Value {
        json!({
            "version": 1,
            "sessionId": self.who.id,
            "principal": self.who.principal,
            "status": self.record_status(),
            "spec": self.apps.spec,
            "apps": self.apps.list,
            "pod": self.pod.current,
            "podSeq": self.pod.seq,
            "userStopped": self.pod.user_stopped,
            "hasCheckpoint": self.checkpoints.exists,
            "workspaceToken": self.who.workspace_token,
            "createdAt": self.who.created_at,
            "updatedAt": self.updated_at,
            "suspendedAt": self.life.suspended_at,
            "lifeUsedMs": self.life.used_ms,
            "lifeSince": self.life.since,
            "runs": self.runs.iter().map(|(app, t)| {
                (app.clone(), json!({"base": t.base, "reported": t.reported}))
            }).collect::<serde_json::Map<String, Value>>(),
        })
    }

    // ------------------------------------------------------------ inputs

    /// Handles one observation.
    pub fn handle(&mut self, input: Input, now: Millis) -> Vec<Command> {
        let mut out = Vec::new();
        let o = &mut out;
        match input {
            Input::PodCreated { pod, uid } => self.pod_created(pod, uid, now, o),
            Input::PodCreateFailed { pod, message } => {
                self.pod_create_failed(&pod, &message, now, o)
            }
            Input::SecretFailed { pod, message } => self.secret_failed(&pod, &message, now, o),
            Input::PodObserved { pod } => self.observe(*pod, now, o),
            Input::PodGone { pod } => self.pod_gone(&pod, now, o),
            Input::AgentReady { pod } => self.agent_ready(pod, o),
            Input::AgentFailed { pod, message } => self.agent_failed(&pod, &message, now, o),
            Input::SeedDone { pod } => self.seed_done(pod, o),
            Input::SeedFailed { pod, message } => self.seed_failed(&pod, &message, now, o),
            Input::AttachOk { pod, app } => self.attach_ok(&pod, &app, now, o),
            Input::AttachFailed { pod, app, message } => {
                self.attach_failed(&pod, &app, message, now, o)
            }
            Input::AttachEnded { pod, app } => self.attach_ended(&pod, &app, now, o),
            Input::PublishDone { id } => self.publish_done(id, now, o),
            Input::PublishFailed { id, message } => self.publish_failed(id, &message, now, o),
            Input::Debug { pod, app, frame } => self.debug_frame(&pod, app, frame, now, o),
            Input::Reachability {
                pod,
                app,
                port,
                state,
            } => self.reachability(&pod, app, port, state, o),
            Input::CheckpointDone { pod } => self.checkpoint_done(&pod, now, o),
            Input::CheckpointFailed { pod, message } => {
                self.checkpoint_failed(&pod, &message, now, o)
            }
            Input::ReloadFailed { pod, app, message } => {
                self.reload_failed(&pod, &app, &message, o)
            }
            Input::RoutesRead { reading } => self.routes_read(reading, o),
            Input::Subscribers { count } => self.subscribers(count, now),
            Input::Tick => self.tick(now, o),
        }
        out
    }

    /// [`Input::Debug`]: relayed as an event; a port re-route while
    /// running, a run's start or end under the app runner.
    fn debug_frame(
        &mut self,
        pod: &str,
        app: String,
        frame: Value,
        now: Millis,
        out: &mut Vec<Command>,
    ) {
        if !self.is_current(pod) || self.app(&app).is_none() {
            return;
        }
        let ports = ports_resolved_from(&frame);
        let run = self
            .runs_under_runner(&app)
            .then(|| runner_event_from(&frame))
            .flatten();
        out.push(Command::Emit(Event::Debug {
            app: app.clone(),
            frame,
        }));
        if let (Some(ports), Phase::Up) = (ports, &self.pod.phase) {
            self.ports_resolved(&app, ports, out);
        }
        if let Some(run) = run {
            self.runner_run(&app, run, now, out);
        }
    }

    // -------------------------------------------------------- user ops

    /// Handles a user's operation: `Err` is the answer to give.
    pub fn user(&mut self, op: UserOp, now: Millis) -> Result<Vec<Command>, ApiError> {
        let mut out = Vec::new();
        match op {
            UserOp::Stop => self.stop(now, &mut out),
            UserOp::Suspend => {
                self.require_running()?;
                self.request_suspend("suspending".into(), &mut out);
            }
            UserOp::Resume => self.resume(now, &mut out)?,
            UserOp::Reload { app } => self.reload(&app, now, &mut out)?,
            UserOp::SetApps { apps } => self.set_apps(apps, now, &mut out)?,
        }
        Ok(out)
    }

    // ---------------------------------------------------------- helpers

    fn is_current(&self, pod: &str) -> bool {
        self.pod.current.as_ref().is_some_and(|p| p.name == pod)
    }

    fn pod_name(&self) -> String {
        self.pod
            .current
            .as_ref()
            .map(|p| p.name.clone())
            .unwrap_or_default()
    }

    fn pod_ip(&self) -> String {
        self.pod
            .current
            .as_ref()
            .and_then(|p| p.ip.clone())
            .unwrap_or_default()
    }

    fn app(&self, name: &str) -> Option<&App> {
        self.apps.list.iter().find(|a| a.spec.name == name)
    }

    fn touch(&mut self, now: Millis, out: &mut Vec<Command>) {
        self.updated_at = now;
        out.push(Command::WriteRecord);
    }

    fn progress(&self, out: &mut Vec<Command>, phase: &str, message: &str) {
        out.push(Command::Emit(Event::Progress {
            phase: phase.into(),
            message: message.into(),
            app: None,
        }));
    }

    fn set_stage(&mut self, stage: Stage) {
        if let Status::Starting { .. } = self.status {
            self.status = Status::Starting { stage };
        }
    }

    /// A status change: event (with endpoints when running) and record.
    fn set_status(&mut self, now: Millis, status: Status, out: &mut Vec<Command>) {
        let changed = self.status.as_str() != status.as_str() || status.error().is_some();
        self.status = status;
        self.updated_at = now;
        if changed {
            self.emit_status(out);
        }
        out.push(Command::WriteRecord);
    }

    /// The current status as an event (with the endpoints when running).
    fn emit_status(&self, out: &mut Vec<Command>) {
        let endpoints = (self.status == Status::Running).then(|| self.endpoints());
        out.push(Command::Emit(Event::Status {
            status: self.status.clone(),
            endpoints,
        }));
    }

    /// A message of kubegate's own on `app`'s output channel ([`OutStream::of`]
    /// its io); `None` for an app the session does not have.
    fn app_output(&self, app: &str, text: String) -> Option<Command> {
        let a = self.app(app)?;
        Some(Command::Output {
            app: app.to_string(),
            stream: OutStream::of(a.spec.io),
            text,
        })
    }

    fn replace_apps(&mut self, apps: Vec<AppSpec>) {
        let old = std::mem::take(&mut self.apps.list);
        self.apps.list = apps
            .into_iter()
            .map(|spec| {
                let generation = old
                    .iter()
                    .find(|a| a.spec.name == spec.name)
                    .map_or(0, |a| a.generation);
                App { spec, generation }
            })
            .collect();
        self.apps.sync_spec();
    }

    /// The life used so far: every pod's time, not the suspended time.
    fn life_used(&self, now: Millis) -> u64 {
        self.life.used_ms + self.life.since.map_or(0, |t| now.saturating_sub(t))
    }
}

fn rfc3339(ms: Millis) -> String {
    crate::kube::time::rfc3339(UNIX_EPOCH + Duration::from_millis(ms))
}
