//! What the machine says: a session's status and the stage of a start or
//! failure, and the events of its SSE stream (docs/api.md#sessions: `kind`
//! is the `event:` type, `data` the JSON).

use super::*;
use crate::session::gateway::RouteState;
use crate::session::spec::Io;

/// Where a start (or a later bring-up) stands or failed (docs/api.md#sessions).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Stage {
    Validate,
    Create,
    Schedule,
    Workspace,
    Seed,
    Publish,
    /// After the session was running (the pod died or vanished, or could not
    /// be brought back after a restart: docs/api.md#sessions).
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

impl OutStream {
    /// Where kubegate's own messages to an app go: its terminal, or its
    /// stderr when it has streams.
    pub fn of(io: Io) -> OutStream {
        match io {
            Io::Tty => OutStream::Tty,
            Io::Streams => OutStream::Stderr,
        }
    }
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

/// An event for the session's SSE stream (docs/api.md#sessions).
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
    /// A tcp port's routing state changed (gateway routing).
    Routing {
        app: String,
        port: u16,
        host: String,
        state: RouteState,
    },
}

/// How a run ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RunEnd {
    pub exit_code: Option<i32>,
    pub reason: String,
    /// The signal that ended it (`"SIGTERM"`), as the app runner reports
    /// it (part of the `run` event of docs/api.md#sessions), sent only when known.
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
            Event::Routing { .. } => "routing",
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
            Event::Routing {
                app,
                port,
                host,
                state,
            } => {
                let mut v = json!({"app": app, "port": port, "host": host});
                if let (Value::Object(m), Value::Object(s)) = (&mut v, json!(state)) {
                    m.extend(s);
                }
                v
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
