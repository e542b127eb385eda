//! A session rebuilt from its record after a daemon restart
//! (docs/sessions.md#operations: re-adopted, or resumed from disk), sans-IO.
//!
//! The engine reads every record in the state directory, lists the
//! session pods once, and hands each session its record and the pods that
//! carry its session-id label. [`Session::restore`] decides, by the
//! recorded status (docs/sessions.md "Re-adoption" has the table):
//!
//! - `running`, its pod found Running with an IP: re-adopt it. The status
//!   shows `starting` (progress phase `adopt`) while every app is attached
//!   again, its output since the stop recovered from the container log,
//!   and the Service and Ingress reconciled (the same upsert as a start:
//!   create, or replace what exists); then `running`, with relays and
//!   probes. No seed: the workspace is the pod's. Run events are not
//!   repeated (the record keeps what was announced).
//! - `running`, its pod terminating: wait (at most
//!   [`DRAIN_DEADLINE_MS`]) for it to go, then recreate it from the
//!   checkpoint (a new pod, as a resume does).
//! - `running`, its pod gone (or not Running): recreate it from the
//!   checkpoint; without one the session fails (stage `run`).
//! - `running`, its pod Failed or Succeeded: what the watch would have
//!   said (failed "session pod reached …", or stopped at its maximum life).
//! - `starting`: the start's bundle was not kept, so a first start fails;
//!   a resume or apps change (a checkpoint exists) starts over from it.
//!   Its pods are deleted.
//! - `suspended`: stays suspended (TTL from when it was suspended); a
//!   leftover pod is deleted.
//!
//! Other pods with the session's label (an older pod a crash left) are
//! deleted. While re-adopting or waiting, the record keeps saying
//! `running`, so a second restart re-adopts again instead of treating the
//! session as a start.

use super::*;
use crate::session::pod::failure_detail;

/// How long a re-adoption waits for a terminating pod to go before it
/// recreates the session anyway (pod names are new at every recreate, so
/// the two never collide).
pub const DRAIN_DEADLINE_MS: Millis = 60_000;

/// A session record as [`Session::record`] writes it.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Record {
    pub version: u32,
    pub session_id: String,
    pub principal: String,
    pub status: Status,
    pub spec: SessionSpec,
    pub apps: Vec<App>,
    #[serde(default)]
    pub pod: Option<PodRef>,
    #[serde(default)]
    pub pod_seq: u64,
    #[serde(default)]
    pub has_checkpoint: bool,
    pub workspace_token: String,
    pub created_at: Millis,
    pub updated_at: Millis,
    #[serde(default)]
    pub suspended_at: Option<Millis>,
    #[serde(default)]
    pub life_used_ms: u64,
    /// When the current pod's share of the life began (absent in records
    /// written before re-adoption existed: `updatedAt` stands in).
    #[serde(default)]
    pub life_since: Option<Millis>,
    #[serde(default)]
    pub runs: BTreeMap<String, RunRecord>,
}

/// An app's run track (the machine's `RunTrack`) as recorded.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize)]
pub struct RunRecord {
    #[serde(default)]
    pub base: u64,
    #[serde(default)]
    pub reported: u64,
}

/// Why a record file cannot be read back ([`Record::parse`]); `Display`
/// says it for the log.
#[derive(Debug)]
pub enum RecordError {
    /// Not the JSON of a record.
    Json(serde_json::Error),
    /// A version this daemon does not know.
    Version(u32),
    /// A session id that [`crate::session::is_session_id`] refuses (the
    /// record names files by it).
    SessionId(String),
    /// No apps: nothing to bring up.
    NoApps,
}

impl std::fmt::Display for RecordError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            RecordError::Json(e) => write!(f, "{e}"),
            RecordError::Version(v) => write!(f, "unknown record version {v}"),
            RecordError::SessionId(id) => write!(f, "bad session id {id:?}"),
            RecordError::NoApps => f.write_str("a record without apps"),
        }
    }
}

impl std::error::Error for RecordError {}

impl Record {
    /// Reads a record file's bytes.
    pub fn parse(b: &[u8]) -> Result<Record, RecordError> {
        let r: Record = serde_json::from_slice(b).map_err(RecordError::Json)?;
        if r.version != 1 {
            return Err(RecordError::Version(r.version));
        }
        if !crate::session::is_session_id(&r.session_id) {
            return Err(RecordError::SessionId(r.session_id));
        }
        if r.apps.is_empty() {
            return Err(RecordError::NoApps);
        }
        Ok(r)
    }
}

/// Whether a pod is being deleted.
fn terminating(p: &Pod) -> bool {
    p.metadata.deletion_timestamp.is_some()
}

impl Session {
    /// Rebuilds a session from its record and `pods` (every pod carrying
    /// its session-id label), and the commands that re-adopt, recreate or
    /// settle it (see the module docs). The first command emits its
    /// current status (the event log is new).
    pub fn restore(
        rec: Record,
        settings: Arc<PodSettings>,
        timings: Timings,
        pods: Vec<Pod>,
        now: Millis,
    ) -> (Session, Vec<Command>) {
        let runs = rec
            .runs
            .iter()
            .map(|(app, r)| {
                (
                    app.clone(),
                    RunTrack {
                        base: r.base,
                        reported: r.reported,
                    },
                )
            })
            .collect();
        let mut s = Session::fresh(
            NewSession {
                id: rec.session_id.clone(),
                principal: rec.principal.clone(),
                spec: rec.spec.clone(),
                workspace_token: rec.workspace_token.clone(),
                settings,
                timings,
            },
            now,
        );
        s.apps.list = rec.apps.clone();
        s.apps.sync_spec();
        s.status = rec.status.clone();
        s.pod.seed = SeedSource::Checkpoint;
        s.pod.seq = rec.pod_seq;
        s.who.created_at = rec.created_at;
        s.updated_at = rec.updated_at;
        s.life.used_ms = rec.life_used_ms;
        s.life.suspended_at = rec.suspended_at;
        s.checkpoints.exists = rec.has_checkpoint;
        s.runs = runs;
        let mut out = Vec::new();
        let current = match (&rec.status, &rec.pod) {
            (Status::Running, Some(p)) => Some(p.name.as_str()),
            _ => None,
        };
        // Pods that are not the one to adopt go (unless already going).
        let mut mine = None;
        for p in pods {
            if Some(p.metadata.name()) == current {
                mine = Some(p);
            } else if !terminating(&p) {
                out.push(Command::DeletePod {
                    name: p.metadata.name().to_string(),
                });
            }
        }
        match rec.status {
            Status::Stopped | Status::Failed { .. } => {
                s.emit_status(&mut out);
                out.push(Command::Finished);
            }
            Status::Suspended => {
                s.emit_status(&mut out);
            }
            Status::Starting { .. } => {
                s.emit_status(&mut out);
                s.recreate(
                    now,
                    "kubegate restarted while the session was starting",
                    &mut out,
                );
            }
            Status::Running => {
                s.life.since = Some(rec.life_since.unwrap_or(rec.updated_at));
                match mine {
                    Some(p) if terminating(&p) && s.checkpoints.exists => {
                        s.drain(now, p.metadata.name().to_string(), &mut out)
                    }
                    Some(p) if p.phase() == "Failed" || p.phase() == "Succeeded" => {
                        // What the watch would have reported.
                        s.pod.current = rec.pod.clone();
                        s.pod.phase = Phase::Up;
                        s.emit_status(&mut out);
                        s.observe(p, now, &mut out);
                    }
                    Some(p) if p.phase() == "Running" && !terminating(&p) => {
                        match p.pod_ip().filter(|ip| !ip.is_empty()) {
                            Some(ip) => {
                                let ip = ip.to_string();
                                s.adopt(now, p, ip, &mut out);
                            }
                            None => {
                                out.push(Command::DeletePod {
                                    name: p.metadata.name().to_string(),
                                });
                                s.emit_status(&mut out);
                                s.recreate(now, "the session pod has no address", &mut out);
                            }
                        }
                    }
                    Some(p) => {
                        if !terminating(&p) {
                            out.push(Command::DeletePod {
                                name: p.metadata.name().to_string(),
                            });
                        }
                        s.emit_status(&mut out);
                        let why = format!(
                            "the session pod was {} when kubegate restarted",
                            if terminating(&p) {
                                "terminating".to_string()
                            } else {
                                format!("not running ({})", failure_detail(&p))
                            }
                        );
                        s.recreate(now, &why, &mut out);
                    }
                    None => {
                        s.emit_status(&mut out);
                        s.recreate(
                            now,
                            "the session pod was gone when kubegate restarted",
                            &mut out,
                        );
                    }
                }
            }
        }
        (s, out)
    }

    /// The status a record keeps: `running` while a running session is
    /// being re-adopted or waits for its old pod, so a restart meanwhile
    /// re-adopts again.
    pub(super) fn record_status(&self) -> Status {
        match self.pod.phase {
            Phase::Publishing { adopting: true, .. } | Phase::Draining { .. } => Status::Running,
            _ => self.status.clone(),
        }
    }

    /// Re-adopts the running pod `p` (see the module docs).
    fn adopt(&mut self, now: Millis, p: Pod, ip: String, out: &mut Vec<Command>) {
        let name = p.metadata.name().to_string();
        self.pod.current = Some(PodRef {
            name: name.clone(),
            uid: p.metadata.uid.clone(),
            ip: Some(ip),
        });
        self.status = Status::Starting { stage: Stage::Run };
        self.updated_at = now;
        self.emit_status(out);
        self.progress(
            out,
            "adopt",
            "Re-adopting the session pod after a kubegate restart",
        );
        // Every app's start was announced before the restart.
        for a in &self.apps.list {
            let t = self.runs.entry(a.spec.name.clone()).or_default();
            t.reported = t.reported.max(started_pos(a.generation));
        }
        // A pod that takes its token from its Secret gets it again (a crash
        // between the pod's create and the Secret's left it waiting);
        // a pod from before the Secret (a literal token) needs none.
        if let Some(uid) = p
            .metadata
            .uid
            .clone()
            .filter(|_| pod::uses_token_secret(&p))
        {
            out.push(Command::CreateSecret {
                pod: name.clone(),
                uid,
            });
        }
        out.push(Command::WatchPod { name: name.clone() });
        self.attach_and_publish(&name, true, out);
        out.push(Command::WriteRecord);
    }

    /// Waits for the terminating pod `old` to go.
    fn drain(&mut self, now: Millis, old: String, out: &mut Vec<Command>) {
        self.status = Status::Starting {
            stage: Stage::Create,
        };
        self.updated_at = now;
        self.emit_status(out);
        self.progress(
            out,
            "adopt",
            "Waiting for the old session pod to terminate before recreating it",
        );
        out.push(Command::WatchPod { name: old.clone() });
        self.pod.phase = Phase::Draining {
            old,
            deadline: now + DRAIN_DEADLINE_MS,
        };
    }

    /// The terminating pod went (or the wait timed out): recreate.
    pub(super) fn drained(&mut self, now: Millis, timed_out: bool, out: &mut Vec<Command>) {
        let Phase::Draining { old, .. } = std::mem::replace(&mut self.pod.phase, Phase::Down)
        else {
            return;
        };
        out.push(Command::StopWatch { name: old });
        let why = if timed_out {
            format!(
                "the old session pod was still terminating after {} s",
                DRAIN_DEADLINE_MS / 1000
            )
        } else {
            "the old session pod terminated".to_string()
        };
        self.recreate(now, &why, out);
    }

    /// A new pod from the checkpoint, or a failure without one.
    fn recreate(&mut self, now: Millis, why: &str, out: &mut Vec<Command>) {
        // The old pod's time counts up to now.
        self.life.used_ms = self.life_used(now);
        self.life.since = None;
        if !self.checkpoints.exists {
            self.fail(
                now,
                Stage::Run,
                format!("{why}, and there is no checkpoint to recreate it from"),
                out,
            );
            return;
        }
        self.set_status(
            now,
            Status::Starting {
                stage: Stage::Create,
            },
            out,
        );
        self.progress(
            out,
            "adopt",
            &format!("{why}: recreating it from the last checkpoint"),
        );
        self.bring_up(now, SeedSource::Checkpoint, out);
    }
}
