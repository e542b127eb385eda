//! One session's state machine, sans-IO (sessions.md "Start", "While
//! running", "Operations"; docs/sessions.md has the diagrams and choices).
//!
//! The engine feeds it what it observes ([`Input`]) and the user's
//! operations ([`UserOp`]), with the current time; it answers with
//! [`Command`]s to carry out, in order. It never blocks, never does I/O and
//! never reads a clock: every deadline is a time stamp checked on
//! [`Input::Tick`].
//!
//! Every input about a pod names the pod; inputs about a pod that is no
//! longer the session's current pod are ignored (a late answer from a
//! torn-down pod cannot disturb its successor), except a late
//! [`Input::PodCreated`], whose pod is deleted at once (a stop raced its
//! create).

use super::pod::{
    self, all_endpoints, build_ingress, build_pod, build_service, deadline_exceeded, ended_apps,
    failure_detail, inspect_port, provision_message, Endpoint, PodInput, PodSettings, Requested,
};
use super::spec::{AppSpec, Io, Port, Protocol, SessionSpec, AGENT_PORT, INSPECT_BASE_PORT};
use crate::api::{ApiError, Code};
use crate::config::SessionsSection;
use crate::kube::client::{Ingress, Pod, Service};
use serde::{Deserialize, Serialize};
use serde_json::{json, Value};
use std::collections::{BTreeMap, BTreeSet, VecDeque};
use std::sync::Arc;
use std::time::{Duration, UNIX_EPOCH};

/// Wall-clock time in milliseconds since the Unix epoch (the engine passes
/// `SystemTime::now()`; tests pass numbers).
pub type Millis = u64;

/// Where a start (or a later bring-up) stands or failed (contract.md).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Stage {
    Validate,
    Create,
    Schedule,
    Workspace,
    Seed,
    Publish,
    /// After the session was running (the pod died or vanished). Not in
    /// contract.md's list: flagged for its owner (docs/sessions.md).
    Run,
}

impl Stage {
    pub fn as_str(self) -> &'static str {
        match self {
            Stage::Validate => "validate",
            Stage::Create => "create",
            Stage::Schedule => "schedule",
            Stage::Workspace => "workspace",
            Stage::Seed => "seed",
            Stage::Publish => "publish",
            Stage::Run => "run",
        }
    }
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "status", rename_all = "lowercase")]
pub enum Status {
    Starting { stage: Stage },
    Running,
    Suspended,
    Stopped,
    Failed { stage: Stage, message: String },
}

impl Status {
    pub fn as_str(&self) -> &'static str {
        match self {
            Status::Starting { .. } => "starting",
            Status::Running => "running",
            Status::Suspended => "suspended",
            Status::Stopped => "stopped",
            Status::Failed { .. } => "failed",
        }
    }

    pub fn is_terminal(&self) -> bool {
        matches!(self, Status::Stopped | Status::Failed { .. })
    }

    /// `{stage, message}` of a failed session.
    pub fn error(&self) -> Option<Value> {
        match self {
            Status::Failed { stage, message } => {
                Some(json!({"stage": stage.as_str(), "message": message}))
            }
            _ => None,
        }
    }
}

/// What a new pod is seeded from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum SeedSource {
    /// The start request's bundle (plus the engine's workspace marker).
    Bundle,
    /// The session's latest checkpoint in the state directory.
    Checkpoint,
}

/// How an app's output is tagged.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum OutStream {
    Tty,
    Stdout,
    Stderr,
}

/// Reachability of a tcp port.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Reach {
    Checking,
    Reachable,
    Unreachable,
}

/// A port refused by a re-route, and why.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Rejected {
    pub port: u16,
    pub reason: String,
}

/// An event for the session's SSE stream (contract.md shapes).
#[derive(Debug, Clone, PartialEq)]
pub enum Event {
    Status {
        status: Status,
        endpoints: Option<Vec<Endpoint>>,
    },
    Progress {
        phase: String,
        message: String,
        app: Option<String>,
    },
    Debug {
        app: String,
        frame: Value,
    },
    Endpoints {
        app: String,
        added: Vec<Endpoint>,
        removed: Vec<Endpoint>,
        rejected: Vec<Rejected>,
    },
    Reachability {
        app: String,
        port: u16,
        state: Reach,
    },
    Run {
        app: String,
        generation: u64,
        ended: Option<RunEnd>,
    },
}

/// A lost attach being made again (see [`Session::attach_lost`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Reattach {
    /// When the next attempt goes out; `None` while one is in flight.
    due: Option<Millis>,
    attempts: u32,
}

/// Attempts to attach again before an app's output is given up on.
const REATTACH_ATTEMPTS: u32 = 8;
/// The wait before the first attempt, doubling up to [`REATTACH_MAX_MS`].
const REATTACH_FIRST_MS: Millis = 500;
const REATTACH_MAX_MS: Millis = 10_000;

/// How a run ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RunEnd {
    pub exit_code: Option<i32>,
    pub reason: String,
    /// The signal that ended it (`"SIGTERM"`), as the app runner reports
    /// it; an addition to contract.md's shape, sent only when known.
    pub signal: Option<String>,
}

impl Event {
    /// The SSE `event:` type.
    pub fn kind(&self) -> &'static str {
        match self {
            Event::Status { .. } => "status",
            Event::Progress { .. } => "progress",
            Event::Debug { .. } => "debug",
            Event::Endpoints { .. } => "endpoints",
            Event::Reachability { .. } => "reachability",
            Event::Run { .. } => "run",
        }
    }

    /// The SSE `data:` JSON.
    pub fn data(&self) -> Value {
        match self {
            Event::Status { status, endpoints } => {
                let mut v = json!({"status": status.as_str()});
                if let Some(e) = status.error() {
                    v["error"] = e;
                }
                if let Some(eps) = endpoints {
                    v["endpoints"] = json!(eps);
                }
                v
            }
            Event::Progress {
                phase,
                message,
                app,
            } => {
                let mut v = json!({"phase": phase, "message": message});
                if let Some(a) = app {
                    v["app"] = json!(a);
                }
                v
            }
            Event::Debug { app, frame } => json!({"app": app, "frame": frame}),
            Event::Endpoints {
                app,
                added,
                removed,
                rejected,
            } => {
                let mut v = json!({"app": app});
                if !added.is_empty() {
                    v["added"] = json!(added);
                }
                if !removed.is_empty() {
                    v["removed"] = json!(removed);
                }
                if !rejected.is_empty() {
                    v["rejected"] = json!(rejected);
                }
                v
            }
            Event::Reachability { app, port, state } => {
                json!({"app": app, "port": port, "state": state})
            }
            Event::Run {
                app,
                generation,
                ended,
            } => match ended {
                None => json!({"app": app, "generation": generation, "phase": "started"}),
                Some(end) => {
                    let mut v = json!({"app": app, "generation": generation, "phase": "ended",
                                       "reason": end.reason});
                    if let Some(c) = end.exit_code {
                        v["exitCode"] = json!(c);
                    }
                    if let Some(sig) = &end.signal {
                        v["signal"] = json!(sig);
                    }
                    v
                }
            },
        }
    }
}

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
    /// Upsert the Service and Ingress; `None` means "must not exist"
    /// (delete, 404 tolerated).
    Publish {
        id: u64,
        service: Option<Box<Service>>,
        ingress: Option<Box<Ingress>>,
    },
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

/// The timings and limits the machine applies (from `[sessions]`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Timings {
    pub start_deadline_ms: u64,
    pub agent_deadline_ms: u64,
    pub idle_ms: u64,
    pub max_life_ms: u64,
    pub suspended_ttl_ms: u64,
    pub checkpoint_interval_ms: u64,
    pub reloads_per_minute: u64,
}

impl From<&SessionsSection> for Timings {
    fn from(s: &SessionsSection) -> Self {
        let ms = |secs: u64| secs.saturating_mul(1000);
        Timings {
            start_deadline_ms: ms(s.start_deadline_secs),
            agent_deadline_ms: ms(s.agent_deadline_secs),
            idle_ms: ms(s.idle_secs),
            max_life_ms: ms(s.max_life_secs),
            suspended_ttl_ms: ms(s.suspended_ttl_secs),
            checkpoint_interval_ms: ms(s.checkpoint_interval_secs),
            reloads_per_minute: s.reloads_per_minute,
        }
    }
}

/// Slack after the agent deadline before the machine gives up on its own
/// (the engine's probe normally reports first, with its last error).
const AGENT_DEADLINE_SLACK_MS: u64 = 5_000;

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

/// Where the current pod's bring-up stands.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Phase {
    /// No pod.
    Down,
    Creating,
    Scheduling {
        deadline: Millis,
        last_progress: Option<String>,
    },
    Agent {
        deadline: Millis,
    },
    Seeding,
    /// Publishing endpoints (`id`) and attaching every app (`attaching`:
    /// the apps whose attach has not answered yet); `running` once both
    /// are done (sessions.md "Start" 6-8), so a viewer that connects on
    /// `running` never types into an app that is not attached yet.
    Publishing {
        id: u64,
        published: bool,
        attaching: std::collections::BTreeSet<String>,
        /// Re-adopting a running pod after a daemon restart (no seed:
        /// attach with log recovery, publish, then `running` again).
        adopting: bool,
    },
    Up,
    /// After a daemon restart, the session's pod was found terminating:
    /// wait (until `deadline`) for it to go, then recreate it from the
    /// checkpoint.
    Draining {
        old: String,
        deadline: Millis,
    },
}

impl Phase {
    fn stage(&self) -> Stage {
        match self {
            Phase::Down | Phase::Creating => Stage::Create,
            Phase::Scheduling { .. } => Stage::Schedule,
            Phase::Agent { .. } => Stage::Workspace,
            Phase::Seeding => Stage::Seed,
            Phase::Publishing { adopting: true, .. } | Phase::Up => Stage::Run,
            Phase::Publishing { .. } => Stage::Publish,
            Phase::Draining { .. } => Stage::Create,
        }
    }
}

/// What waits for the checkpoint in flight.
#[derive(Debug, Clone, PartialEq, Eq)]
enum AfterCheckpoint {
    Suspend { why: String },
    SetApps(Vec<AppSpec>),
}

/// A port re-route waiting for its publish.
#[derive(Debug, Clone, PartialEq, Eq)]
struct PortChange {
    app: String,
    accepted: Vec<Port>,
    removed: Vec<Port>,
    rejected: Vec<Rejected>,
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

/// An app's `run` events and its runner's generations.
///
/// Run events are ordered per app: started(g) < ended(g) < started(g+1).
/// `reported` is the position of the last one emitted (`2g` for started,
/// `2g+1` for ended), so an event at or before it is a duplicate: a
/// replayed `Runner.RunStarted`/`RunEnded` after a relay reconnect, the
/// runner's first start (already announced when the session went
/// running), or a container end after the runner reported the run's end.
/// Session generations only grow, so this needs no reset across pods.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
struct RunTrack {
    /// The app's session generation before the current pod started it:
    /// the runner's generation `n` (from 1 in every container) is the
    /// session's `base + n`.
    base: u64,
    reported: u64,
}

fn started_pos(generation: u64) -> u64 {
    generation.saturating_mul(2)
}

fn ended_pos(generation: u64) -> u64 {
    generation.saturating_mul(2).saturating_add(1)
}

/// What an app runner's debug frame says about its runs (docs/runner.md
/// "The debug stream").
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RunnerEvent {
    /// `Runner.RunStarted {generation}`.
    Started { generation: u64 },
    /// `Runner.RunEnded {generation, exitCode, signal?, error?}`.
    Ended {
        generation: u64,
        exit_code: Option<i32>,
        signal: Option<String>,
        error: Option<String>,
    },
}

/// Reads `Runner.RunStarted`/`Runner.RunEnded` from a debug frame; `None`
/// for any other frame or one without a generation of at least 1.
pub fn runner_event_from(frame: &Value) -> Option<RunnerEvent> {
    let event = frame.get("event").and_then(Value::as_str)?;
    let payload = frame.get("payload")?;
    let generation = payload
        .get("generation")
        .and_then(Value::as_u64)
        .filter(|&g| g >= 1)?;
    let text = |k: &str| {
        payload
            .get(k)
            .and_then(Value::as_str)
            .filter(|v| !v.is_empty())
            .map(|v| v.chars().take(512).collect::<String>())
    };
    match event {
        "Runner.RunStarted" => Some(RunnerEvent::Started { generation }),
        "Runner.RunEnded" => Some(RunnerEvent::Ended {
            generation,
            exit_code: payload
                .get("exitCode")
                .and_then(Value::as_i64)
                .and_then(|c| i32::try_from(c).ok()),
            signal: text("signal"),
            error: text("error"),
        }),
        _ => None,
    }
}

/// The `reason` of a run the app runner reported ended.
fn runner_end_reason(exit_code: Option<i32>, signal: Option<&str>, error: Option<&str>) -> String {
    match (error, signal, exit_code) {
        (Some(e), _, _) => format!("program could not start: {e}"),
        (None, Some(s), Some(c)) => format!("program killed by {s} (exit code {c})"),
        (None, Some(s), None) => format!("program killed by {s}"),
        (None, None, Some(c)) => format!("program exited (code {c})"),
        (None, None, None) => "program ended".to_string(),
    }
}

/// Reads `Kernel.PortsResolved`: `payload.ports` as a list of `{port,
/// protocol?}` (udp only when said). `None` for any other frame or a
/// malformed list.
pub fn ports_resolved_from(frame: &Value) -> Option<Vec<Port>> {
    if frame.get("event").and_then(Value::as_str) != Some("Kernel.PortsResolved") {
        return None;
    }
    let list = frame.pointer("/payload/ports")?.as_array()?;
    let mut out = Vec::with_capacity(list.len());
    for p in list {
        let (num, proto) = match p {
            Value::Number(n) => (n.as_u64()?, None),
            Value::Object(o) => (o.get("port")?.as_u64()?, o.get("protocol")),
            _ => return None,
        };
        let port = u16::try_from(num).ok().filter(|&x| x > 0)?;
        let protocol = match proto.and_then(Value::as_str) {
            Some("udp") | Some("UDP") => Protocol::Udp,
            _ => Protocol::Tcp,
        };
        let p = Port { port, protocol };
        if !out.contains(&p) {
            out.push(p);
        }
    }
    Some(out)
}

impl Session {
    /// A session as it is before anything happened to it: starting (stage
    /// create), no pod, generation 0 for every app. `start` brings it up;
    /// `restore` (machine_adopt.rs) overwrites what the record knows.
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

    /// The current endpoints of every app.
    pub fn endpoints(&self) -> Vec<Endpoint> {
        all_endpoints(
            self.settings.ingress_base_domain.as_deref(),
            &self.who.id,
            &self.app_ports(),
        )
    }

    fn app_ports(&self) -> Vec<(String, Vec<Port>)> {
        self.apps.list
            .iter()
            .map(|a| (a.spec.name.clone(), a.spec.ports.clone()))
            .collect()
    }

    /// `GET /v1/sessions/{id}` (contract.md).
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
        match input {
            Input::PodCreated { pod, uid } => {
                if !self.is_current(&pod) {
                    // A stop (or a failure) raced the create: the pod exists
                    // now and nobody owns it.
                    out.push(Command::DeletePod { name: pod });
                } else if self.pod.phase == Phase::Creating {
                    // First: the workspace container waits for its token
                    // (CreateContainerConfigError) until the Secret exists.
                    out.push(Command::CreateSecret {
                        pod: pod.clone(),
                        uid: uid.clone(),
                    });
                    if let Some(p) = self.pod.current.as_mut() {
                        p.uid = Some(uid);
                    }
                    self.pod.phase = Phase::Scheduling {
                        deadline: now + self.timings.start_deadline_ms,
                        last_progress: None,
                    };
                    self.set_stage(Stage::Schedule);
                    out.push(Command::WatchPod { name: pod });
                    self.progress(&mut out, "schedule", "Scheduling");
                }
            }
            Input::PodCreateFailed { pod, message } => {
                if self.is_current(&pod) && self.pod.phase == Phase::Creating {
                    self.fail(
                        now,
                        Stage::Create,
                        format!("failed to create pod: {message}"),
                        &mut out,
                    );
                }
            }
            Input::SecretFailed { pod, message } => {
                // Until the agent answered, the pod cannot work without it;
                // afterwards (a re-adoption's, or a late answer) the Secret
                // was there when the agent started.
                let before_agent =
                    matches!(self.pod.phase, Phase::Scheduling { .. } | Phase::Agent { .. });
                if self.is_current(&pod) && before_agent && !self.pod.user_stopped {
                    self.fail(
                        now,
                        Stage::Create,
                        format!("failed to create the workspace token Secret: {message}"),
                        &mut out,
                    );
                }
            }
            Input::PodObserved { pod } => self.observe(*pod, now, &mut out),
            Input::PodGone { pod } => {
                if matches!(&self.pod.phase, Phase::Draining { old, .. } if *old == pod) {
                    self.drained(now, false, &mut out);
                } else if self.is_current(&pod) && !self.pod.user_stopped {
                    let stage = self.pod.phase.stage();
                    let message = match self.pod.phase {
                        Phase::Creating | Phase::Scheduling { .. } => {
                            "pod disappeared before reaching Running".to_string()
                        }
                        _ => "session pod was deleted".to_string(),
                    };
                    self.fail(now, stage, message, &mut out);
                }
            }
            Input::AgentReady { pod } => {
                if self.is_current(&pod) && matches!(self.pod.phase, Phase::Agent { .. }) {
                    self.pod.phase = Phase::Seeding;
                    self.set_stage(Stage::Seed);
                    self.progress(&mut out, "seed", "Seeding workspace");
                    let ip = self.pod_ip();
                    out.push(Command::Seed {
                        pod,
                        ip,
                        source: self.pod.seed,
                    });
                }
            }
            Input::AgentFailed { pod, message } => {
                if self.is_current(&pod) && matches!(self.pod.phase, Phase::Agent { .. }) {
                    self.fail(
                        now,
                        Stage::Workspace,
                        format!("workspace agent did not become ready: {message}"),
                        &mut out,
                    );
                }
            }
            Input::SeedDone { pod } => {
                if self.is_current(&pod) && self.pod.phase == Phase::Seeding {
                    if self.pod.seed == SeedSource::Bundle {
                        out.push(Command::DropBundle);
                    }
                    for a in &self.apps.list {
                        out.push(Command::Attach {
                            pod: pod.clone(),
                            app: a.spec.name.clone(),
                            container: a.spec.container(),
                            tty: a.spec.io == Io::Tty,
                            recover: false,
                        });
                    }
                    let id = self.publish(&mut out);
                    self.pod.phase = Phase::Publishing {
                        id,
                        published: false,
                        attaching: self.apps.list.iter().map(|a| a.spec.name.clone()).collect(),
                        adopting: false,
                    };
                    self.set_stage(Stage::Publish);
                    self.progress(&mut out, "publish", "Publishing endpoints");
                }
            }
            Input::SeedFailed { pod, message } => {
                if self.is_current(&pod) && self.pod.phase == Phase::Seeding {
                    self.fail(
                        now,
                        Stage::Seed,
                        format!("seeding the workspace failed: {message}"),
                        &mut out,
                    );
                }
            }
            Input::AttachOk { pod, app } => {
                if self.is_current(&pod) {
                    self.pod.reattach.remove(&app);
                    self.attach_answered(&app, now, &mut out);
                }
            }
            Input::AttachFailed { pod, app, message } if self.pod.phase == Phase::Up => {
                if self.is_current(&pod) {
                    self.attach_lost(&app, Some(message), now, &mut out);
                }
            }
            Input::AttachEnded { pod, app } => {
                if self.is_current(&pod) && self.pod.phase == Phase::Up {
                    self.attach_lost(&app, None, now, &mut out);
                }
            }
            Input::AttachFailed { pod, app, message } => {
                if self.is_current(&pod) {
                    self.attach_answered(&app, now, &mut out);
                    if let Some(a) = self.app(&app) {
                        let stream = match a.spec.io {
                            Io::Tty => OutStream::Tty,
                            Io::Streams => OutStream::Stderr,
                        };
                        out.push(Command::Output {
                            app,
                            stream,
                            text: format!("\r\n[kubegate] failed to attach: {message}\r\n"),
                        });
                    }
                }
            }
            Input::PublishDone { id } => {
                let bring_up = match &mut self.pod.phase {
                    Phase::Publishing {
                        id: current,
                        published,
                        attaching,
                        ..
                    } if *current == id => {
                        *published = true;
                        Some(attaching.is_empty())
                    }
                    _ => None,
                };
                if let Some(all_attached) = bring_up {
                    if all_attached {
                        self.go_running(now, &mut out);
                    }
                } else if let Some(c) = self.routes.changes.remove(&id) {
                    self.port_change_published(c, &mut out);
                    self.touch(now, &mut out);
                }
            }
            Input::PublishFailed { id, message } => {
                if matches!(self.pod.phase, Phase::Publishing { id: current, .. } if current == id) {
                    self.fail(
                        now,
                        Stage::Publish,
                        format!("publishing the session's endpoints failed: {message}"),
                        &mut out,
                    );
                } else if let Some(c) = self.routes.changes.remove(&id) {
                    self.port_change_failed(c, &message, &mut out);
                    self.touch(now, &mut out);
                }
            }
            Input::Debug { pod, app, frame } => {
                if self.is_current(&pod) && self.app(&app).is_some() {
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
                        self.ports_resolved(&app, ports, &mut out);
                    }
                    if let Some(run) = run {
                        self.runner_run(&app, run, now, &mut out);
                    }
                }
            }
            Input::Reachability {
                pod,
                app,
                port,
                state,
            } => {
                if self.is_current(&pod) && self.routes.probes.contains(&(app.clone(), port)) {
                    out.push(Command::Emit(Event::Reachability { app, port, state }));
                }
            }
            Input::CheckpointDone { pod } => {
                if self.is_current(&pod) && self.checkpoints.in_flight {
                    self.checkpoints.in_flight = false;
                    self.checkpoints.last_at = Some(now);
                    if !self.checkpoints.exists {
                        self.checkpoints.exists = true;
                        out.push(Command::WriteRecord);
                    }
                    match self.checkpoints.after.take() {
                        Some(AfterCheckpoint::Suspend { .. }) => self.suspend_now(now, &mut out),
                        Some(AfterCheckpoint::SetApps(apps)) => {
                            self.teardown(now, &mut out);
                            self.replace_apps(apps);
                            self.set_status(
                                now,
                                Status::Starting {
                                    stage: Stage::Create,
                                },
                                &mut out,
                            );
                            self.bring_up(now, SeedSource::Checkpoint, &mut out);
                        }
                        None => {}
                    }
                }
            }
            Input::CheckpointFailed { pod, message } => {
                if self.is_current(&pod) && self.checkpoints.in_flight {
                    self.checkpoints.in_flight = false;
                    // Try again after a full interval, not at every tick.
                    self.checkpoints.last_at = Some(now);
                    match self.checkpoints.after.take() {
                        Some(AfterCheckpoint::Suspend { .. }) => {
                            // Idle or asked: try again after another idle
                            // period (a subscriber may come back meanwhile).
                            self.viewers.idle_since = (self.viewers.count == 0).then_some(now);
                            self.progress(
                                &mut out,
                                "suspend",
                                &format!("suspend failed: the workspace could not be checkpointed: {message}"),
                            );
                        }
                        Some(AfterCheckpoint::SetApps(_)) => self.progress(
                            &mut out,
                            "apps",
                            &format!("changing the apps failed: the workspace could not be checkpointed: {message}"),
                        ),
                        None => {}
                    }
                }
            }
            Input::ReloadFailed { pod, app, message } => {
                if self.is_current(&pod) {
                    if let Some(a) = self.app(&app) {
                        let stream = match a.spec.io {
                            Io::Tty => OutStream::Tty,
                            Io::Streams => OutStream::Stderr,
                        };
                        out.push(Command::Output {
                            app,
                            stream,
                            text: format!("\r\n[kubegate] reload failed: {message}\r\n"),
                        });
                    }
                }
            }
            Input::Subscribers { count } => {
                if count == 0 {
                    if self.viewers.count > 0 || self.viewers.idle_since.is_none() {
                        self.viewers.idle_since = Some(now);
                    }
                } else {
                    self.viewers.idle_since = None;
                }
                self.viewers.count = count;
            }
            Input::Tick => self.tick(now, &mut out),
        }
        out
    }

    // -------------------------------------------------------- user ops

    /// Handles a user's operation: `Err` is the answer to give.
    pub fn user(&mut self, op: UserOp, now: Millis) -> Result<Vec<Command>, ApiError> {
        let mut out = Vec::new();
        match op {
            UserOp::Stop => {
                if self.status.is_terminal() {
                    return Ok(out);
                }
                self.pod.user_stopped = true;
                let was_suspended = self.status == Status::Suspended;
                self.teardown(now, &mut out);
                if was_suspended || self.checkpoints.exists {
                    out.push(Command::DeleteCheckpoint);
                    self.checkpoints.exists = false;
                }
                self.set_status(now, Status::Stopped, &mut out);
                out.push(Command::Finished);
            }
            UserOp::Suspend => {
                self.require_running()?;
                self.request_suspend("suspending".into(), &mut out);
            }
            UserOp::Resume => {
                if self.status != Status::Suspended {
                    return Err(ApiError::new(
                        Code::NotSuspended,
                        format!(
                            "session {} is {}, not suspended",
                            self.who.id,
                            self.status.as_str()
                        ),
                    ));
                }
                self.life.suspended_at = None;
                self.set_status(
                    now,
                    Status::Starting {
                        stage: Stage::Create,
                    },
                    &mut out,
                );
                self.bring_up(now, SeedSource::Checkpoint, &mut out);
            }
            UserOp::Reload { app } => {
                self.require_running()?;
                let entry = match self.app(&app) {
                    Some(a) => a.spec.entry.clone(),
                    None => {
                        return Err(ApiError::new(
                            Code::NotFound,
                            format!("session {} has no app {app:?}", self.who.id),
                        ))
                    }
                };
                while self
                    .reloads
                    .front()
                    .is_some_and(|&t| now.saturating_sub(t) >= 60_000)
                {
                    self.reloads.pop_front();
                }
                if self.reloads.len() as u64 >= self.timings.reloads_per_minute {
                    return Err(ApiError::new(
                        Code::ReloadRateLimited,
                        format!(
                            "more than {} reloads in a minute",
                            self.timings.reloads_per_minute
                        ),
                    ));
                }
                self.reloads.push_back(now);
                out.push(Command::Touch {
                    pod: self.pod_name(),
                    ip: self.pod_ip(),
                    path: entry,
                });
            }
            UserOp::SetApps { apps } => match self.status {
                Status::Suspended => {
                    // The next resume brings the new set up.
                    self.replace_apps(apps);
                    self.touch(now, &mut out);
                }
                _ => {
                    self.require_running()?;
                    self.checkpoints.after = Some(AfterCheckpoint::SetApps(apps));
                    self.progress(
                        &mut out,
                        "apps",
                        "Checkpointing the workspace to change the apps",
                    );
                    self.checkpoint(&mut out);
                }
            },
        }
        Ok(out)
    }

    fn require_running(&self) -> Result<(), ApiError> {
        if self.status != Status::Running || self.pod.phase != Phase::Up {
            return Err(ApiError::new(
                Code::NotRunning,
                format!(
                    "session {} is {}, not running",
                    self.who.id,
                    self.status.as_str()
                ),
            ));
        }
        if self.checkpoints.after.is_some() {
            return Err(ApiError::new(
                Code::NotRunning,
                format!("session {} is being suspended or changed", self.who.id),
            ));
        }
        Ok(())
    }

    // ---------------------------------------------------------- helpers

    fn is_current(&self, pod: &str) -> bool {
        self.pod.current.as_ref().is_some_and(|p| p.name == pod)
    }

    fn pod_name(&self) -> String {
        self.pod.current
            .as_ref()
            .map(|p| p.name.clone())
            .unwrap_or_default()
    }

    fn pod_ip(&self) -> String {
        self.pod.current
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
            let endpoints = (self.status == Status::Running).then(|| self.endpoints());
            out.push(Command::Emit(Event::Status {
                status: self.status.clone(),
                endpoints,
            }));
        }
        out.push(Command::WriteRecord);
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

    /// Builds and creates a new pod (new name, remaining life).
    fn bring_up(&mut self, now: Millis, seed: SeedSource, out: &mut Vec<Command>) {
        let lived = self.life_used(now);
        if lived >= self.timings.max_life_ms {
            self.end_of_life(now, out);
            return;
        }
        self.life.since = Some(now);
        let remaining_secs = (self.timings.max_life_ms - lived).div_ceil(1000);
        self.pod.seq += 1;
        let name = pod::pod_name(&self.who.id, now, self.pod.seq);
        let spec = SessionSpec {
            apps: self.apps.list.iter().map(|a| a.spec.clone()).collect(),
            ..self.apps.spec.clone()
        };
        let built = build_pod(
            &self.settings,
            &PodInput {
                session_id: &self.who.id,
                principal: &self.who.principal,
                spec: &spec,
                pod_name: &name,
                remaining_life_secs: remaining_secs,
                requested: &Requested::default(),
            },
        );
        self.pod.current = Some(PodRef {
            name,
            uid: None,
            ip: None,
        });
        self.pod.phase = Phase::Creating;
        self.pod.seed = seed;
        self.pod.ended.clear();
        self.pod.user_stopped = false;
        self.set_stage(Stage::Create);
        self.progress(out, "create", "Creating pod");
        out.push(Command::CreatePod {
            pod: Box::new(built),
        });
    }

    fn observe(&mut self, pod: Pod, now: Millis, out: &mut Vec<Command>) {
        let name = pod.metadata.name().to_string();
        if !self.is_current(&name) || self.pod.user_stopped {
            return;
        }
        // Containers that ended: once per app per pod. With restartPolicy
        // Never the pod stays Running when an app dies.
        for e in ended_apps(&pod) {
            if self.pod.phase == Phase::Creating || self.pod.ended.contains(&e.app) {
                continue;
            }
            let Some(generation) = self.app(&e.app).map(|a| a.generation) else {
                continue;
            };
            self.pod.ended.insert(e.app.clone());
            // The app runner may have reported this run's end already.
            let track = self.runs.entry(e.app.clone()).or_default();
            if track.reported >= ended_pos(generation) {
                continue;
            }
            track.reported = ended_pos(generation);
            out.push(Command::Emit(Event::Run {
                app: e.app,
                generation,
                ended: Some(RunEnd {
                    exit_code: Some(e.exit_code),
                    reason: e.message,
                    signal: None,
                }),
            }));
        }
        let phase = pod.phase();
        if phase == "Failed" || phase == "Succeeded" {
            if self.pod.phase.stage() == Stage::Run {
                if deadline_exceeded(&pod) {
                    self.end_of_life(now, out);
                } else {
                    let detail = failure_detail(&pod);
                    self.fail(
                        now,
                        Stage::Run,
                        format!("session pod reached {phase} ({detail})"),
                        out,
                    );
                }
            } else {
                let stage = self.pod.phase.stage();
                let detail = failure_detail(&pod);
                self.fail(
                    now,
                    stage,
                    format!("pod reached {phase} before serving ({detail})"),
                    out,
                );
            }
            return;
        }
        if let Phase::Scheduling { last_progress, .. } = &mut self.pod.phase {
            let ip = pod.pod_ip().filter(|ip| !ip.is_empty());
            if let (Some(ip), "Running") = (ip, phase) {
                if let Some(p) = self.pod.current.as_mut() {
                    p.ip = Some(ip.to_string());
                    if p.uid.is_none() {
                        p.uid = pod.metadata.uid.clone();
                    }
                }
                let deadline = now + self.timings.agent_deadline_ms;
                self.pod.phase = Phase::Agent { deadline };
                // The app containers have started (they wait for their entry).
                // An app runner there counts its runs from 1 again.
                for a in &mut self.apps.list {
                    self.runs.entry(a.spec.name.clone()).or_default().base = a.generation;
                    a.generation += 1;
                }
                self.set_stage(Stage::Workspace);
                self.progress(out, "workspace", "Starting workspace");
                out.push(Command::ProbeAgent {
                    pod: name,
                    ip: ip.to_string(),
                    deadline,
                });
            } else {
                let msg = provision_message(&pod);
                if last_progress.as_deref() != Some(msg.as_str()) {
                    *last_progress = Some(msg.clone());
                    out.push(Command::Emit(Event::Progress {
                        phase: "schedule".into(),
                        message: msg,
                        app: None,
                    }));
                }
            }
        }
    }

    /// An app's attach answered (either way) during the bring-up.
    /// An app's attach ended while running. Unless its container ended
    /// (the pod watch says so, or a re-attach finds it gone), it is made
    /// again with recovery (the container log since the app's last output,
    /// or a gap notice), after 0.5 s doubling to 10 s, 8 attempts at most.
    /// A clean end says nothing (a container exiting ends its attach too);
    /// a failure says once, on the app's channel, that it reattaches, and
    /// the last one that it gave up.
    fn attach_lost(
        &mut self,
        app: &str,
        message: Option<String>,
        now: Millis,
        out: &mut Vec<Command>,
    ) {
        let Some(a) = self.app(app) else { return };
        let stream = match a.spec.io {
            Io::Tty => OutStream::Tty,
            Io::Streams => OutStream::Stderr,
        };
        if self.pod.ended.contains(app) {
            self.pod.reattach.remove(app);
            return;
        }
        let r = self.pod.reattach.entry(app.to_string()).or_insert(Reattach {
            due: None,
            attempts: 0,
        });
        r.attempts += 1;
        let attempts = r.attempts;
        if attempts > REATTACH_ATTEMPTS {
            self.pod.reattach.remove(app);
            let why = message.unwrap_or_else(|| "the stream ended".into());
            out.push(Command::Output {
                app: app.to_string(),
                stream,
                text: format!(
                    "\r\n[kubegate] failed to attach again after {REATTACH_ATTEMPTS} attempts: {why}\r\n"
                ),
            });
            return;
        }
        let wait = REATTACH_FIRST_MS
            .saturating_mul(1 << (attempts - 1).min(8))
            .min(REATTACH_MAX_MS);
        r.due = Some(now + wait);
        if let (1, Some(m)) = (attempts, message) {
            out.push(Command::Output {
                app: app.to_string(),
                stream,
                text: format!("\r\n[kubegate] attach lost: {m}; attaching again\r\n"),
            });
        }
    }

    /// The re-attaches that are due (while running; dropped otherwise).
    fn reattach_due(&mut self, now: Millis, out: &mut Vec<Command>) {
        if self.pod.phase != Phase::Up {
            self.pod.reattach.clear();
            return;
        }
        let pod = self.pod_name();
        let ended = &self.pod.ended;
        self.pod.reattach.retain(|app, _| !ended.contains(app));
        for (name, r) in self.pod.reattach.iter_mut() {
            if r.due.is_some_and(|d| now >= d) {
                let Some(a) = self.apps.list.iter().find(|a| &a.spec.name == name) else {
                    continue;
                };
                r.due = None;
                out.push(Command::Attach {
                    pod: pod.clone(),
                    app: name.clone(),
                    container: a.spec.container(),
                    tty: a.spec.io == Io::Tty,
                    recover: true,
                });
            }
        }
    }

    fn attach_answered(&mut self, app: &str, now: Millis, out: &mut Vec<Command>) {
        if let Phase::Publishing {
            published,
            attaching,
            ..
        } = &mut self.pod.phase
        {
            attaching.remove(app);
            if *published && attaching.is_empty() {
                self.go_running(now, out);
            }
        }
    }

    fn go_running(&mut self, now: Millis, out: &mut Vec<Command>) {
        self.pod.phase = Phase::Up;
        self.pod.reattach.clear();
        self.checkpoints.last_at = Some(now);
        if self.viewers.count == 0 {
            self.viewers.idle_since = Some(now);
        }
        let (pod, ip) = (self.pod_name(), self.pod_ip());
        self.set_status(now, Status::Running, out);
        for (i, a) in self.apps.list.iter().enumerate() {
            out.push(Command::StartRelay {
                pod: pod.clone(),
                ip: ip.clone(),
                app: a.spec.name.clone(),
                port: inspect_port(i),
            });
        }
        let tcp: Vec<(String, u16)> = self
            .apps
            .list
            .iter()
            .flat_map(|a| {
                a.spec
                    .ports
                    .iter()
                    .filter(|p| p.protocol == Protocol::Tcp)
                    .map(|p| (a.spec.name.clone(), p.port))
            })
            .collect();
        for (app, port) in tcp {
            self.start_probe(&app, port, out);
        }
        for a in &self.apps.list {
            let track = self.runs.entry(a.spec.name.clone()).or_default();
            if track.reported >= started_pos(a.generation) {
                continue;
            }
            track.reported = started_pos(a.generation);
            out.push(Command::Emit(Event::Run {
                app: a.spec.name.clone(),
                generation: a.generation,
                ended: None,
            }));
        }
    }

    /// Whether the app's container runs it under `kubegate app-runner`
    /// (the pod builder's rule), so its runner events count.
    fn runs_under_runner(&self, app: &str) -> bool {
        self.settings.app_runner && self.app(app).is_some_and(|a| a.spec.runner)
    }

    /// A `Runner.RunStarted`/`RunEnded` of the current pod: the app's
    /// `run` event, once per generation and phase, and its generation.
    fn runner_run(&mut self, app: &str, run: RunnerEvent, now: Millis, out: &mut Vec<Command>) {
        let Some(idx) = self.apps.list.iter().position(|a| a.spec.name == app) else {
            return;
        };
        let track = self.runs.entry(app.to_string()).or_default();
        let (generation, pos, ended) = match run {
            RunnerEvent::Started { generation } => {
                let g = track.base.saturating_add(generation);
                (g, started_pos(g), None)
            }
            RunnerEvent::Ended {
                generation,
                exit_code,
                signal,
                error,
            } => {
                let g = track.base.saturating_add(generation);
                let reason = runner_end_reason(exit_code, signal.as_deref(), error.as_deref());
                let end = RunEnd {
                    exit_code,
                    reason,
                    signal,
                };
                (g, ended_pos(g), Some(end))
            }
        };
        if pos <= track.reported {
            return;
        }
        track.reported = pos;
        let a = &mut self.apps.list[idx];
        let new_generation = generation > a.generation;
        if new_generation {
            a.generation = generation;
        }
        out.push(Command::Emit(Event::Run {
            app: app.to_string(),
            generation,
            ended,
        }));
        if new_generation {
            // The view's generation changed: the record keeps it.
            self.touch(now, out);
        }
    }

    fn start_probe(&mut self, app: &str, port: u16, out: &mut Vec<Command>) {
        if self.routes.probes.insert((app.to_string(), port)) {
            out.push(Command::StartProbe {
                pod: self.pod_name(),
                ip: self.pod_ip(),
                app: app.to_string(),
                port,
            });
        }
    }

    /// Publishes the current port set; returns the publish id.
    fn publish(&mut self, out: &mut Vec<Command>) -> u64 {
        let id = self.routes.next_publish;
        self.routes.next_publish += 1;
        let ports = self.app_ports();
        let (pod, uid) = match &self.pod.current {
            Some(p) => (p.name.clone(), p.uid.clone().unwrap_or_default()),
            None => Default::default(),
        };
        let service = build_service(
            &self.settings,
            &self.who.id,
            &self.who.principal,
            &pod,
            &uid,
            &ports,
        );
        let ingress = build_ingress(
            &self.settings,
            &self.who.id,
            &self.who.principal,
            &pod,
            &uid,
            &ports,
        );
        out.push(Command::Publish {
            id,
            service: service.map(Box::new),
            ingress: ingress.map(Box::new),
        });
        id
    }

    /// `Kernel.PortsResolved` for `app`: diff, reject ports another app
    /// owns (or kubegate uses), replace the app's set, re-publish.
    fn ports_resolved(&mut self, app: &str, declared: Vec<Port>, out: &mut Vec<Command>) {
        let Some(idx) = self.apps.list.iter().position(|a| a.spec.name == app) else {
            return;
        };
        let before = self.apps.list[idx].spec.ports.clone();
        let added: Vec<Port> = declared
            .iter()
            .filter(|p| !before.contains(p))
            .copied()
            .collect();
        let removed: Vec<Port> = before
            .iter()
            .filter(|p| !declared.contains(p))
            .copied()
            .collect();
        if added.is_empty() && removed.is_empty() {
            return;
        }
        let napps = self.apps.list.len();
        let mut accepted = Vec::new();
        let mut rejected = Vec::new();
        for p in added {
            let owner = self
                .apps
                .list
                .iter()
                .find(|a| a.spec.name != app && a.spec.ports.contains(&p));
            let reason = if let Some(o) = owner {
                Some(format!(
                    "another app in this session ({}) already declares {} port {}",
                    o.spec.name,
                    p.protocol.as_str(),
                    p.port
                ))
            } else if p.protocol == Protocol::Tcp && p.port == AGENT_PORT {
                Some(format!("tcp port {AGENT_PORT} is the workspace agent's"))
            } else if p.protocol == Protocol::Tcp
                && (INSPECT_BASE_PORT..INSPECT_BASE_PORT.saturating_add(napps as u16))
                    .contains(&p.port)
            {
                Some(format!("tcp port {} carries an app's debug stream", p.port))
            } else {
                None
            };
            match reason {
                Some(reason) => rejected.push(Rejected {
                    port: p.port,
                    reason,
                }),
                None => accepted.push(p),
            }
        }
        let mut now_ports: Vec<Port> = before
            .iter()
            .filter(|p| declared.contains(p))
            .copied()
            .collect();
        now_ports.extend(accepted.iter().copied());
        self.apps.list[idx].spec.ports = now_ports;
        self.apps.sync_spec();
        for p in &removed {
            if p.protocol == Protocol::Tcp && self.routes.probes.remove(&(app.to_string(), p.port)) {
                out.push(Command::StopProbe {
                    pod: self.pod_name(),
                    app: app.to_string(),
                    port: p.port,
                });
            }
        }
        if accepted.is_empty() && removed.is_empty() {
            // Only rejections: nothing to publish.
            out.push(Command::Emit(Event::Endpoints {
                app: app.to_string(),
                added: vec![],
                removed: vec![],
                rejected,
            }));
            return;
        }
        let id = self.publish(out);
        self.routes.changes.insert(
            id,
            PortChange {
                app: app.to_string(),
                accepted,
                removed,
                rejected,
            },
        );
    }

    fn port_change_published(&mut self, c: PortChange, out: &mut Vec<Command>) {
        let domain = self.settings.ingress_base_domain.clone();
        out.push(Command::Emit(Event::Endpoints {
            app: c.app.clone(),
            added: pod::endpoints(domain.as_deref(), &self.who.id, &c.app, &c.accepted),
            removed: pod::endpoints(domain.as_deref(), &self.who.id, &c.app, &c.removed),
            rejected: c.rejected,
        }));
        if self.pod.phase == Phase::Up && self.app(&c.app).is_some() {
            for p in c.accepted.iter().filter(|p| p.protocol == Protocol::Tcp) {
                self.start_probe(&c.app, p.port, out);
            }
        }
    }

    fn port_change_failed(&mut self, c: PortChange, message: &str, out: &mut Vec<Command>) {
        // The added ports are not routed: they leave the app's set again
        // and are reported rejected with the error.
        if let Some(a) = self.apps.list.iter_mut().find(|a| a.spec.name == c.app) {
            a.spec.ports.retain(|p| !c.accepted.contains(p));
        }
        self.apps.sync_spec();
        let mut rejected = c.rejected;
        rejected.extend(c.accepted.iter().map(|p| Rejected {
            port: p.port,
            reason: message.to_string(),
        }));
        let domain = self.settings.ingress_base_domain.clone();
        out.push(Command::Emit(Event::Endpoints {
            app: c.app.clone(),
            added: vec![],
            removed: pod::endpoints(domain.as_deref(), &self.who.id, &c.app, &c.removed),
            rejected,
        }));
    }

    fn checkpoint(&mut self, out: &mut Vec<Command>) {
        if self.checkpoints.in_flight {
            // The one in flight serves (it started moments ago).
            return;
        }
        self.checkpoints.in_flight = true;
        out.push(Command::Checkpoint {
            pod: self.pod_name(),
            ip: self.pod_ip(),
        });
    }

    fn request_suspend(&mut self, why: String, out: &mut Vec<Command>) {
        self.progress(
            out,
            "suspend",
            &format!("{why}: checkpointing the workspace"),
        );
        self.checkpoints.after = Some(AfterCheckpoint::Suspend { why });
        self.checkpoint(out);
    }

    fn suspend_now(&mut self, now: Millis, out: &mut Vec<Command>) {
        self.teardown(now, out);
        self.life.suspended_at = Some(now);
        self.set_status(now, Status::Suspended, out);
    }

    /// Ends everything tied to the current pod: the watch first (so the
    /// delete is not reported as a failure), relays, probes, attach
    /// streams, then the pod itself.
    fn teardown(&mut self, now: Millis, out: &mut Vec<Command>) {
        self.life.used_ms = self.life_used(now);
        self.life.since = None;
        self.checkpoints.in_flight = false;
        self.checkpoints.after = None;
        self.routes.changes.clear();
        self.routes.probes.clear();
        self.pod.ended.clear();
        let phase = std::mem::replace(&mut self.pod.phase, Phase::Down);
        if let Phase::Draining { old, .. } = phase {
            out.push(Command::StopWatch { name: old });
            return;
        }
        let Some(p) = self.pod.current.take() else {
            return;
        };
        if phase != Phase::Creating {
            out.push(Command::StopWatch {
                name: p.name.clone(),
            });
        }
        if phase == Phase::Up || matches!(phase, Phase::Publishing { .. }) {
            out.push(Command::StopRelays {
                pod: p.name.clone(),
            });
            out.push(Command::StopProbes {
                pod: p.name.clone(),
            });
            out.push(Command::CloseAttaches {
                pod: p.name.clone(),
            });
        }
        out.push(Command::DeletePod { name: p.name });
    }

    fn fail(&mut self, now: Millis, stage: Stage, message: String, out: &mut Vec<Command>) {
        if self.status.is_terminal() {
            return;
        }
        self.teardown(now, out);
        self.set_status(now, Status::Failed { stage, message }, out);
        out.push(Command::Finished);
    }

    /// The session's maximum life is reached: it stops.
    fn end_of_life(&mut self, now: Millis, out: &mut Vec<Command>) {
        self.pod.user_stopped = true;
        self.teardown(now, out);
        self.progress(
            out,
            "stop",
            &format!(
                "the session reached its maximum life ({} s)",
                self.timings.max_life_ms / 1000
            ),
        );
        if self.checkpoints.exists {
            out.push(Command::DeleteCheckpoint);
            self.checkpoints.exists = false;
        }
        self.set_status(now, Status::Stopped, out);
        out.push(Command::Finished);
    }

    fn tick(&mut self, now: Millis, out: &mut Vec<Command>) {
        if self.status.is_terminal() {
            return;
        }
        if !self.pod.reattach.is_empty() {
            self.reattach_due(now, out);
        }
        if self.life.since.is_some() && self.life_used(now) >= self.timings.max_life_ms {
            self.end_of_life(now, out);
            return;
        }
        match &self.pod.phase {
            Phase::Scheduling {
                deadline,
                last_progress,
            } if now >= *deadline => {
                let last = last_progress.clone().unwrap_or_else(|| "Scheduling".into());
                let secs = self.timings.start_deadline_ms / 1000;
                self.fail(
                    now,
                    Stage::Schedule,
                    format!("pod did not reach Running within {secs} s (last: {last})"),
                    out,
                );
            }
            Phase::Agent { deadline } if now >= deadline + AGENT_DEADLINE_SLACK_MS => {
                let secs = self.timings.agent_deadline_ms / 1000;
                self.fail(
                    now,
                    Stage::Workspace,
                    format!("workspace agent did not answer within {secs} s"),
                    out,
                );
            }
            Phase::Up => {
                let idle = self.viewers.idle_since.is_some_and(|t| {
                    self.viewers.count == 0 && now.saturating_sub(t) >= self.timings.idle_ms
                });
                if idle && self.checkpoints.after.is_none() {
                    let secs = self.timings.idle_ms / 1000;
                    self.request_suspend(format!("no subscriber for {secs} s"), out);
                } else if self
                    .checkpoints
                    .last_at
                    .is_none_or(|t| now.saturating_sub(t) >= self.timings.checkpoint_interval_ms)
                {
                    self.checkpoint(out);
                }
            }
            Phase::Draining { deadline, .. } if now >= *deadline => {
                self.drained(now, true, out);
            }
            Phase::Down if self.status == Status::Suspended => {
                let since = self.life.suspended_at.unwrap_or(self.updated_at);
                if now.saturating_sub(since) >= self.timings.suspended_ttl_ms {
                    self.progress(out, "stop", "the suspended session expired");
                    out.push(Command::DeleteCheckpoint);
                    self.checkpoints.exists = false;
                    self.set_status(now, Status::Stopped, out);
                    out.push(Command::Finished);
                }
            }
            _ => {}
        }
    }
}

fn rfc3339(ms: Millis) -> String {
    crate::kube::time::rfc3339(UNIX_EPOCH + Duration::from_millis(ms))
}

mod adopt;
pub use adopt::{Record, RunRecord, DRAIN_DEADLINE_MS};

#[cfg(test)]
mod tests;

#[cfg(test)]
mod adopt_tests;
