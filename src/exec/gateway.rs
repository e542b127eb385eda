//! The exec gateway's running parts: one-shot exec on the caller's thread,
//! and interactive exec on three threads per session.
//!
//! ```text
//!  client WS ── conn thread: http::ws::run (client pump) ──> inbound (bounded 16)
//!                 ^                                            │
//!                 │ Outbox (bounded: output_channel_frames)    v
//!  exec-out: k8s output -> stdout/stderr frames,        exec-in: client frames ->
//!            then audit, then exit|error, then Close            stdin / resize / close,
//!            (the ONLY writer of data and final frames)         idle + max-duration + shutdown
//!                 ^                                            │
//!                 └── RemoteProcess (kube-remote-io/-out) <────┘
//! ```
//!
//! Backpressure: exec-out blocks on the bounded Outbox when the client does
//! not read; the RemoteProcess's bounded output channel then fills, its pump
//! stops reading the Kubernetes socket, and TCP slows the container. No
//! frame is ever dropped; memory per session is bounded by the two queues.
//!
//! Ending: the process exits -> exec-out sends every output frame, writes
//! the audit line, sends `exit` (or `error`), then Close. The client sends
//! `close` or disconnects -> exec-in marks the session stopped, discards
//! what is queued (`Outbox::abort`), and cancels the Kubernetes stream (the
//! process ends); no error frame. Idle timeout, maximum duration and daemon
//! shutdown -> the same, with a close reason. A bad client frame -> exec-out
//! sends one `EXEC_INVALID` error frame after what it already sent, then
//! closes.

use super::audit::{Audit, Record};
use super::frames::{ClientFrame, Exit, ServerFrame, TYPE_STDERR};
use super::record::{self, Bounds, Recorder};
use super::resolve::{resolve, Ownership};
use super::slots::{Slot, Slots};
use super::validate::{invalid, output_cap, ExecSpec, Limits};
use super::Target;
use crate::api::Identity;
use crate::api::{ApiError, Code};
use crate::http::ws::{self, Outbox, WsConn, WsOptions};
use crate::http::PeerProbe;
use crate::kube::client::Client;
use crate::kube::connection::Connection;
use crate::kube::remote::{self, ExecOptions, Output, RemoteError, RemoteProcess, TermSize};
use crate::metrics::{label, Metrics};
use crossbeam_channel::{bounded, select, Receiver, Sender};
use parking_lot::Mutex;
use serde::{Deserialize, Serialize};
use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime};
use tungstenite::protocol::frame::coding::CloseCode;
use tungstenite::protocol::CloseFrame;
use tungstenite::Message;

/// How often a one-shot exec looks whether its caller is still there.
const ABORT_CHECK: Duration = Duration::from_millis(100);
/// How often exec-in checks the idle and duration limits.
const TICK: Duration = Duration::from_millis(500);
/// Client frames between the client pump and exec-in.
const INBOUND_CAPACITY: usize = 16;

/// The gateway's settings (from `[exec]` and `[cluster]`).
#[derive(Debug, Clone)]
pub struct Settings {
    pub limits: Limits,
    pub ownership: Ownership,
    pub idle_timeout: Duration,
    pub max_duration: Duration,
    pub ping_interval: Duration,
    pub max_sessions: usize,
    pub max_sessions_per_principal: usize,
    /// asciinema recordings of interactive execs go here.
    pub recording_dir: Option<std::path::PathBuf>,
    /// A recording's size cap and free-space floor.
    pub recording_bounds: Bounds,
}

/// `POST /v1/exec` body.
#[derive(Debug, Clone, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct OneShotRequest {
    pub workspace: WorkspaceRef,
    pub deployment: String,
    #[serde(default)]
    pub container: Option<String>,
    pub command: Vec<String>,
    #[serde(default)]
    pub stdout_cap_bytes: Option<i64>,
    #[serde(default)]
    pub stderr_cap_bytes: Option<i64>,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct WorkspaceRef {
    pub project: String,
    pub uid: String,
}

/// `POST /v1/exec` answer.
#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct OneShotResult {
    #[serde(flatten)]
    pub target: Target,
    #[serde(flatten)]
    pub exit: Exit,
    pub stdout: String,
    pub stderr: String,
}

/// `GET /v1/exec/interactive` parameters.
#[derive(Debug, Clone)]
pub struct InteractiveRequest {
    pub spec: ExecSpec,
    pub tty: bool,
    pub stdin: bool,
    /// With a tty: the terminal's size before the command starts.
    pub initial_size: Option<TermSize>,
}

pub struct Gateway {
    client: Client,
    conn: Connection,
    settings: Settings,
    slots: Arc<Slots>,
    audit: Option<Audit>,
    metrics: Arc<Metrics>,
    /// Dropped at shutdown: every session's exec-in sees the disconnect.
    stop_tx: Mutex<Option<Sender<()>>>,
    stop_rx: Receiver<()>,
    /// Outboxes of the live interactive sessions (queue-depth metric).
    queues: Arc<Mutex<HashMap<u64, Outbox>>>,
    next_id: AtomicU64,
}

impl Gateway {
    pub fn new(
        client: Client,
        conn: Connection,
        settings: Settings,
        audit: Option<Audit>,
        metrics: Arc<Metrics>,
    ) -> Arc<Gateway> {
        let (stop_tx, stop_rx) = bounded(0);
        let slots = Slots::new(settings.max_sessions, settings.max_sessions_per_principal);
        let queues: Arc<Mutex<HashMap<u64, Outbox>>> = Arc::new(Mutex::new(HashMap::new()));
        let q = queues.clone();
        metrics.probe("kubegate_exec_queue_frames", move || {
            q.lock().values().map(|o| o.len() as i64).sum()
        });
        if settings.recording_dir.is_some() {
            // Present from the start (0), so an alert can tell "none yet"
            // from "not exported".
            for reason in ["max_bytes", "free_space", "error"] {
                metrics.add(
                    "kubegate_exec_recordings_truncated_total",
                    format!("reason=\"{reason}\""),
                    0,
                );
            }
            for reason in ["free_space", "error"] {
                metrics.add(
                    "kubegate_exec_recordings_skipped_total",
                    format!("reason=\"{reason}\""),
                    0,
                );
            }
        }
        if let Some(a) = &audit {
            let (rotations, dropped) = (a.counters(), a.counters());
            metrics.probe("kubegate_audit_rotations_total", move || {
                i64::try_from(rotations.rotations()).unwrap_or(i64::MAX)
            });
            metrics.probe("kubegate_audit_lines_dropped_total", move || {
                i64::try_from(dropped.dropped()).unwrap_or(i64::MAX)
            });
        }
        Arc::new(Gateway {
            client,
            conn,
            settings,
            slots,
            audit,
            metrics,
            stop_tx: Mutex::new(Some(stop_tx)),
            stop_rx,
            queues,
            next_id: AtomicU64::new(1),
        })
    }

    pub fn settings(&self) -> &Settings {
        &self.settings
    }

    /// SIGHUP: the audit log is opened again at its path (after logrotate
    /// renamed it). `None` without an audit log; on an error the current
    /// file is kept.
    pub fn reopen_audit(&self) -> Option<(std::path::PathBuf, std::io::Result<()>)> {
        let a = self.audit.as_ref()?;
        Some((a.path().to_path_buf(), a.reopen()))
    }

    /// Ends every interactive session (close reason "server shutting down");
    /// one-shot execs see it through their `PeerProbe`.
    pub fn shutdown(&self) {
        self.stop_tx.lock().take();
    }

    /// Validation, the principal's workspace, a slot, then the target.
    /// `checked` turns true once the request passed validation, the
    /// workspace check and the concurrency limit: from there on, every
    /// outcome is audited (a Deployment of another workspace included).
    fn admit(
        &self,
        who: &Identity,
        spec: &ExecSpec,
        checked: &mut bool,
    ) -> Result<(Slot, Target), ApiError> {
        spec.validate(&self.settings.limits)?;
        if !who.holds(&spec.project, &spec.uid) {
            return Err(ApiError::new(
                Code::ExecTargetForbidden,
                format!(
                    "workspace {}/{} is not one this token may act on",
                    spec.project, spec.uid
                ),
            ));
        }
        let slot = self.slots.acquire(&who.name)?;
        *checked = true;
        let target = resolve(&self.client, &self.settings.ownership, spec)?;
        Ok((slot, target))
    }

    /// How long the stream to the API server may bring nothing, pongs
    /// included, before it counts as dead: the exec idle limit, but never
    /// less than four ping intervals. A shorter one raced the gateway's own
    /// idle limit on a quiet exec, which then ended with `EXEC_FAILED`
    /// ("nothing came from the server") instead of its 1008 "idle timeout"
    /// close (the exec_gateway test `concurrency_and_idle_limits` failed
    /// about one run in four).
    fn stream_idle_timeout(&self) -> Duration {
        self.settings
            .idle_timeout
            .max(self.settings.ping_interval * 4)
    }

    fn open(
        &self,
        target: &Target,
        spec: &ExecSpec,
        o: ExecOptions,
    ) -> Result<RemoteProcess, ApiError> {
        remote::exec(
            &self.conn,
            &target.namespace,
            &target.pod,
            Some(&target.container),
            &spec.command,
            o,
        )
        .map_err(|e| remote_error(&e))
    }

    fn finish(
        &self,
        kind: &'static str,
        result: &Result<i32, ApiError>,
        bytes_in: u64,
        bytes_out: u64,
    ) {
        let r = match result {
            Ok(_) => "exit".to_string(),
            Err(e) => e.code.as_str().to_string(),
        };
        self.metrics.inc(
            "kubegate_exec_total",
            format!("kind=\"{kind}\",result=\"{}\"", label(&r)),
        );
        self.metrics.add(
            "kubegate_exec_bytes_total",
            "direction=\"in\"",
            bytes_in as i64,
        );
        self.metrics.add(
            "kubegate_exec_bytes_total",
            "direction=\"out\"",
            bytes_out as i64,
        );
    }

    #[allow(clippy::too_many_arguments)]
    fn audit(
        &self,
        who: &Identity,
        kind: &'static str,
        spec: &ExecSpec,
        target: Option<&Target>,
        tty: bool,
        outcome: Result<i32, &str>,
        bytes: (u64, u64),
        started: Instant,
        recording: RecordingNote,
    ) {
        let what = match outcome {
            Ok(c) => format!("exit {c}"),
            Err(e) => e.to_string(),
        };
        log::info!(
            "exec {kind} by {} in {}/{} on {}: {what} ({} bytes in, {} out, {} ms)",
            who.name,
            spec.project,
            spec.uid,
            target.map_or("-", |t| t.pod.as_str()),
            bytes.0,
            bytes.1,
            started.elapsed().as_millis()
        );
        let Some(a) = &self.audit else { return };
        let rec = Record {
            time: crate::kube::time::rfc3339(SystemTime::now()),
            principal: &who.name,
            workspace: format!("{}/{}", spec.project, spec.uid),
            kind,
            target,
            argv: &spec.command,
            tty,
            exit_code: outcome.ok(),
            error: outcome.err(),
            bytes_in: bytes.0,
            bytes_out: bytes.1,
            duration_ms: u64::try_from(started.elapsed().as_millis()).unwrap_or(u64::MAX),
            recording: recording.file,
            recording_truncated: recording.truncated,
            recording_skipped: recording.skipped,
        };
        // A failure is logged (once) and counted by the audit log itself.
        let _ = a.record(&rec);
    }

    /// `POST /v1/exec`: runs to the end on the calling thread. `probe`
    /// tells when the caller went away (then `EXEC_ABORTED`).
    pub fn oneshot(
        &self,
        who: &Identity,
        req: OneShotRequest,
        probe: &PeerProbe,
    ) -> Result<OneShotResult, ApiError> {
        let started = Instant::now();
        let spec = ExecSpec {
            project: req.workspace.project,
            uid: req.workspace.uid,
            deployment: req.deployment,
            container: req.container,
            command: req.command,
        };
        let mut target = None;
        let mut checked = false;
        let mut out_bytes = 0u64;
        let result = (|| {
            let caps = (
                output_cap(req.stdout_cap_bytes, "stdout", &self.settings.limits)?,
                output_cap(req.stderr_cap_bytes, "stderr", &self.settings.limits)?,
            );
            let (_slot, t) = self.admit(who, &spec, &mut checked)?;
            target = Some(t.clone());
            self.metrics
                .add("kubegate_exec_active", "kind=\"oneshot\"", 1);
            let r = self.run_oneshot(&spec, t, caps, probe, &mut out_bytes);
            self.metrics
                .add("kubegate_exec_active", "kind=\"oneshot\"", -1);
            r
        })();
        let code = result
            .as_ref()
            .map(|r| r.exit.exit_code)
            .map_err(Clone::clone);
        self.finish("oneshot", &code, 0, out_bytes);
        // Refusals before any cluster call (validation, the principal's
        // workspace, the limits) are answered and counted, not audited.
        if checked {
            let outcome = match &result {
                Ok(r) => Ok(r.exit.exit_code),
                Err(e) => Err(e.code.as_str()),
            };
            self.audit(
                who,
                "oneshot",
                &spec,
                target.as_ref(),
                false,
                outcome,
                (0, out_bytes),
                started,
                RecordingNote::default(),
            );
        }
        result
    }

    fn run_oneshot(
        &self,
        spec: &ExecSpec,
        target: Target,
        caps: (usize, usize),
        probe: &PeerProbe,
        out_bytes: &mut u64,
    ) -> Result<OneShotResult, ApiError> {
        let opts = ExecOptions {
            stdin: false,
            stdout: true,
            stderr: true,
            tty: false,
            raw_frames: true,
            ping_interval: Some(self.settings.ping_interval),
            idle_timeout: Some(self.stream_idle_timeout()),
            ..ExecOptions::default()
        };
        let process = self.open(&target, spec, opts)?;
        let output = process.output();
        let (mut stdout, mut stderr) = (Vec::new(), Vec::new());
        loop {
            match output.recv_timeout(ABORT_CHECK) {
                Ok(chunk) => {
                    let (buf, cap, name, data): (_, _, _, &[u8]) = match &chunk {
                        Output::Stdout(d) => (&mut stdout, caps.0, "stdout", d),
                        Output::Stderr(d) => (&mut stderr, caps.1, "stderr", d),
                        Output::Frame(f) if f.first() == Some(&TYPE_STDERR) => {
                            (&mut stderr, caps.1, "stderr", &f[1..])
                        }
                        Output::Frame(f) => (&mut stdout, caps.0, "stdout", &f[1..]),
                    };
                    *out_bytes += data.len() as u64;
                    if buf.len() + data.len() > cap {
                        // Dropping the receiver and the process closes the
                        // stream: the server ends the process at once.
                        drop(output);
                        drop(process);
                        return Err(ApiError::new(
                            Code::ExecOutputLimit,
                            format!("{name} exceeded the {cap} byte output limit"),
                        )
                        .with_details(serde_json::json!({"stream": name, "limitBytes": cap})));
                    }
                    buf.extend_from_slice(data);
                }
                Err(crossbeam_channel::RecvTimeoutError::Timeout) => {
                    if probe.gone() {
                        drop(output);
                        drop(process);
                        return Err(ApiError::new(
                            Code::ExecAborted,
                            "the exec request was aborted",
                        ));
                    }
                }
                Err(crossbeam_channel::RecvTimeoutError::Disconnected) => break,
            }
        }
        drop(output);
        let status = process.wait().map_err(|e| remote_error(&e))?;
        Ok(OneShotResult {
            target,
            exit: Exit {
                exit_code: status.code,
                reason: None,
                message: None,
            },
            stdout: String::from_utf8_lossy(&stdout).into_owned(),
            stderr: String::from_utf8_lossy(&stderr).into_owned(),
        })
    }

    /// The part of `GET /v1/exec/interactive` before the upgrade: every
    /// check and the Kubernetes stream, so that failures are HTTP errors.
    pub fn open_interactive(
        self: &Arc<Self>,
        who: &Arc<Identity>,
        req: InteractiveRequest,
    ) -> Result<Interactive, ApiError> {
        let started = Instant::now();
        let mut checked = false;
        let mut resolved = None;
        let result = (|| {
            let (slot, target) = self.admit(who, &req.spec, &mut checked)?;
            resolved = Some(target.clone());
            let opts = ExecOptions {
                stdin: req.stdin,
                stdout: true,
                stderr: true,
                tty: req.tty,
                initial_size: req.initial_size,
                raw_frames: true,
                ping_interval: Some(self.settings.ping_interval),
                idle_timeout: Some(self.stream_idle_timeout()),
                ..ExecOptions::default()
            };
            let process = self.open(&target, &req.spec, opts)?;
            Ok::<_, ApiError>((slot, target, process))
        })();
        match result {
            Ok((slot, target, process)) => Ok(Interactive {
                gw: self.clone(),
                who: who.clone(),
                req,
                target,
                process,
                slot,
                started,
            }),
            Err(e) => {
                self.finish("interactive", &Err(e.clone()), 0, 0);
                if checked {
                    self.audit(
                        who,
                        "interactive",
                        &req.spec,
                        resolved.as_ref(),
                        req.tty,
                        Err(e.code.as_str()),
                        (0, 0),
                        started,
                        RecordingNote::default(),
                    );
                }
                Err(e)
            }
        }
    }
}

/// Kubernetes' own messages are passed on; credential and TLS details
/// (paths) only go to the log.
fn remote_error(e: &RemoteError) -> ApiError {
    match e {
        RemoteError::Api { code: 404, status } => {
            ApiError::new(Code::ExecTargetNotFound, status.message.clone())
        }
        RemoteError::Api { status, .. } => ApiError::new(Code::ExecFailed, status.message.clone()),
        RemoteError::Status(s) => ApiError::new(Code::ExecFailed, s.message.clone()),
        RemoteError::NoStatus { ended } => ApiError::new(
            Code::ExecFailed,
            format!("the exec stream ended without an exit status ({ended})"),
        ),
        RemoteError::Credentials(_) | RemoteError::Tls(_) => {
            log::error!("exec: {e}");
            ApiError::new(
                Code::ExecFailed,
                "the daemon's cluster credentials are unusable",
            )
        }
        other => ApiError::new(Code::ExecFailed, other.to_string()),
    }
}

/// An admitted interactive exec waiting for its WebSocket.
pub struct Interactive {
    gw: Arc<Gateway>,
    who: Arc<Identity>,
    req: InteractiveRequest,
    target: Target,
    process: RemoteProcess,
    slot: Slot,
    started: Instant,
}

/// State both session threads see.
struct Shared {
    /// The client closed, went away, or the session was aborted: no more
    /// frames to the client, no final frame.
    stopped: AtomicBool,
    /// Milliseconds since start of the last frame either way.
    active_ms: AtomicU64,
    bytes_in: AtomicU64,
    bytes_out: AtomicU64,
    started: Instant,
    recorder: Mutex<Option<Recorder>>,
    /// What the audit line says about the recording; `truncated` is set
    /// when a write failed.
    recording: Mutex<RecordingNote>,
}

/// The audit line's recording fields.
#[derive(Debug, Clone, Default)]
pub(crate) struct RecordingNote {
    /// The file name, when a recording was started.
    file: Option<String>,
    /// Why it stopped before the exec ended.
    truncated: Option<String>,
    /// Why none was started.
    skipped: Option<String>,
}

impl Shared {
    fn record(&self, f: impl FnOnce(&mut Recorder) -> std::io::Result<()>) {
        let mut g = self.recorder.lock();
        if let Some(r) = g.as_mut() {
            if let Err(e) = f(r) {
                log::error!("exec recording stopped: {e}");
                *g = None;
                self.recording.lock().truncated = Some(format!("recording stopped: {e}"));
            }
        }
    }

    /// Closes the recording; the audit line's fields.
    fn finish_recording(&self, metrics: &Metrics) -> RecordingNote {
        let mut note = self.recording.lock().clone();
        // A write error already stopped it (`record`).
        let mut cut = note.truncated.is_some().then_some("error");
        if let Some(r) = self.recorder.lock().take() {
            match r.finish() {
                Ok(None) => {}
                Ok(Some(why)) => {
                    log::warn!(
                        "exec recording {}: {why}",
                        note.file.as_deref().unwrap_or("-")
                    );
                    cut = Some(why.reason());
                    note.truncated = Some(why.to_string());
                }
                Err(e) => {
                    log::error!("exec recording: {e}");
                    cut = Some("error");
                    note.truncated = Some(format!("recording stopped: {e}"));
                }
            }
        }
        if let Some(reason) = cut {
            metrics.inc(
                "kubegate_exec_recordings_truncated_total",
                format!("reason=\"{reason}\""),
            );
        }
        note
    }
}

/// Starts the recording of an interactive exec, unless its folder's free
/// space is below the floor (the exec runs either way).
fn start_recording(
    gw: &Gateway,
    dir: &std::path::Path,
    name: String,
    req: &InteractiveRequest,
) -> (Option<Recorder>, RecordingNote) {
    let bounds = gw.settings.recording_bounds;
    let path = dir.join(&name);
    let skipped = |why: String, reason: &str| {
        gw.metrics.inc(
            "kubegate_exec_recordings_skipped_total",
            format!("reason=\"{reason}\""),
        );
        (
            None,
            RecordingNote {
                skipped: Some(why),
                ..RecordingNote::default()
            },
        )
    };
    if bounds.min_free_bytes > 0 {
        match record::free_space(dir) {
            Ok(free) if free < bounds.min_free_bytes => {
                let why = format!(
                    "free space {} below the floor {} (exec.recording_min_free_bytes)",
                    record::human_bytes(free),
                    record::human_bytes(bounds.min_free_bytes)
                );
                log::warn!("exec recording {} not started: {why}", path.display());
                return skipped(why, "free_space");
            }
            Ok(_) => {}
            // The creation below tells whether the folder is usable.
            Err(e) => log::warn!("free space of {}: {e}", dir.display()),
        }
    }
    let ts = SystemTime::now()
        .duration_since(SystemTime::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs());
    let size = req.initial_size.map_or((80, 24), |s| (s.width, s.height));
    match Recorder::create(&path, &req.spec.command, size, ts, bounds) {
        Ok(r) => (
            Some(r),
            RecordingNote {
                file: Some(name),
                ..RecordingNote::default()
            },
        ),
        Err(e) => {
            log::error!("exec recording {}: {e}", path.display());
            skipped(format!("creating the file failed: {e}"), "error")
        }
    }
}

/// `<unix seconds>-<principal>-<n>.cast`, the principal's name reduced to
/// characters safe in a file name.
fn recording_name(principal: &str, id: u64) -> String {
    let who: String = principal
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '-' || c == '_' {
                c
            } else {
                '_'
            }
        })
        .collect();
    let now = SystemTime::now()
        .duration_since(SystemTime::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs());
    format!("{now}-{who}-{id}.cast")
}

impl Shared {
    fn touch(&self) {
        let ms = u64::try_from(self.started.elapsed().as_millis()).unwrap_or(u64::MAX);
        self.active_ms.store(ms, Ordering::Relaxed);
    }
}

enum Ctrl {
    /// A client frame broke the protocol: one error frame, then close.
    Fail(ApiError),
}

impl Interactive {
    pub fn target(&self) -> &Target {
        &self.target
    }

    /// Runs the session on the calling (connection) thread until the
    /// client's WebSocket ends.
    pub fn run(self, conn: WsConn) {
        let Interactive {
            gw,
            who,
            req,
            target,
            process,
            slot,
            started,
        } = self;
        let capacity = gw.settings.limits.output_channel_frames;
        let (out, out_rx) = match ws::try_outbox(capacity) {
            Ok(x) => x,
            Err(e) => {
                log::error!("interactive exec: creating the outbox: {e}");
                return;
            }
        };
        let id = gw.next_id.fetch_add(1, Ordering::Relaxed);
        gw.queues.lock().insert(id, out.clone());
        gw.metrics
            .add("kubegate_exec_active", "kind=\"interactive\"", 1);
        let (recorder, recording) = match &gw.settings.recording_dir {
            Some(dir) => start_recording(&gw, dir, recording_name(&who.name, id), &req),
            None => (None, RecordingNote::default()),
        };
        let shared = Arc::new(Shared {
            stopped: AtomicBool::new(false),
            active_ms: AtomicU64::new(0),
            bytes_in: AtomicU64::new(0),
            bytes_out: AtomicU64::new(0),
            started,
            recorder: Mutex::new(recorder),
            recording: Mutex::new(recording),
        });
        let _ = out.send(ServerFrame::Target(target.clone()).encode());
        let (in_tx, in_rx) = bounded::<Message>(INBOUND_CAPACITY);
        let (ctrl_tx, ctrl_rx) = bounded::<Ctrl>(1);
        let (done_tx, done_rx) = bounded::<()>(0);
        let stdin = process.stdin();
        let controller = process.controller();

        let out_thread = {
            let gw = gw.clone();
            let out = out.clone();
            let shared = shared.clone();
            let who = who.clone();
            let req = req.clone();
            std::thread::Builder::new()
                .name("exec-out".into())
                .spawn(move || {
                    relay_output(&gw, &who, &req, &target, process, &out, &ctrl_rx, &shared);
                    drop(slot);
                    drop(done_tx);
                })
        };
        if let Err(e) = out_thread {
            log::error!("interactive exec: spawning the output thread: {e}");
            gw.queues.lock().remove(&id);
            gw.metrics
                .add("kubegate_exec_active", "kind=\"interactive\"", -1);
            return;
        }
        let in_thread = {
            let gw = gw.clone();
            let out = out.clone();
            let shared = shared.clone();
            std::thread::Builder::new()
                .name("exec-in".into())
                .spawn(move || {
                    supervise(
                        &gw, in_rx, stdin, controller, &out, ctrl_tx, done_rx, &shared, req.tty,
                    )
                })
        };
        if let Err(e) = in_thread {
            log::error!("interactive exec: spawning the input thread: {e}");
            shared.stopped.store(true, Ordering::Release);
            out.abort(close(CloseCode::Error, "internal error"));
        }
        drop(out);
        let ping = gw.settings.ping_interval;
        let opts = WsOptions {
            ping_interval: Some(ping),
            idle_timeout: Some(ping * 4),
            close_timeout: Duration::from_secs(5),
        };
        let end = ws::run(conn, out_rx, in_tx, opts);
        log::debug!("interactive exec {id} ended: {end:?}");
        gw.queues.lock().remove(&id);
        gw.metrics
            .add("kubegate_exec_active", "kind=\"interactive\"", -1);
    }
}

fn close(code: CloseCode, reason: &str) -> CloseFrame {
    CloseFrame {
        code,
        reason: reason.to_string().into(),
    }
}

/// exec-out: the only writer of data and final frames.
#[allow(clippy::too_many_arguments)]
fn relay_output(
    gw: &Gateway,
    who: &Identity,
    req: &InteractiveRequest,
    target: &Target,
    process: RemoteProcess,
    out: &Outbox,
    ctrl: &Receiver<Ctrl>,
    shared: &Shared,
) {
    let output = process.output();
    let mut failed: Option<ApiError> = None;
    loop {
        select! {
            recv(output) -> chunk => match chunk {
                Ok(c) => {
                    if shared.stopped.load(Ordering::Acquire) {
                        break;
                    }
                    // A Kubernetes stdout/stderr frame is `[1|2][data]`,
                    // byte for byte our own frame: it goes on as it came,
                    // neither copied nor re-encoded.
                    let msg = match c {
                        Output::Frame(f) => Message::Binary(f),
                        Output::Stdout(d) => ServerFrame::Stdout(d).encode(),
                        Output::Stderr(d) => ServerFrame::Stderr(d).encode(),
                    };
                    if let Message::Binary(b) = &msg {
                        let data = b.get(1..).unwrap_or_default();
                        shared.record(|r| r.output(data));
                        shared.bytes_out.fetch_add(data.len() as u64, Ordering::Relaxed);
                    }
                    shared.touch();
                    // Blocking: the backpressure.
                    if out.send(msg).is_err() {
                        shared.stopped.store(true, Ordering::Release);
                        break;
                    }
                }
                Err(_) => break,
            },
            recv(ctrl) -> c => {
                if let Ok(Ctrl::Fail(e)) = c {
                    failed = Some(e);
                    break;
                }
            }
        }
    }
    drop(output);
    let stopped = shared.stopped.load(Ordering::Acquire);
    let result: Result<i32, ApiError> = match failed {
        Some(e) => {
            // Stop the process; its status no longer matters.
            drop(process);
            Err(e)
        }
        None if stopped => {
            drop(process);
            Err(ApiError::new(
                Code::ExecAborted,
                "closed by the client or the daemon",
            ))
        }
        None => process.wait().map(|s| s.code).map_err(|e| remote_error(&e)),
    };
    let bytes = (
        shared.bytes_in.load(Ordering::Relaxed),
        shared.bytes_out.load(Ordering::Relaxed),
    );
    let outcome = match (&result, stopped) {
        (Ok(c), _) => Ok(*c),
        (Err(_), true) => Err("CLOSED"),
        (Err(e), false) => Err(e.code.as_str()),
    };
    let recording = shared.finish_recording(&gw.metrics);
    gw.audit(
        who,
        "interactive",
        &req.spec,
        Some(target),
        req.tty,
        outcome,
        bytes,
        shared.started,
        recording,
    );
    if stopped {
        gw.finish(
            "interactive",
            &Err(ApiError::new(Code::ExecAborted, "")),
            bytes.0,
            bytes.1,
        );
        return;
    }
    gw.finish("interactive", &result, bytes.0, bytes.1);
    let last = match result {
        Ok(code) => ServerFrame::Exit(Exit {
            exit_code: code,
            reason: None,
            message: None,
        }),
        Err(e) => {
            // Errors answered over HTTP are counted by the front door;
            // this one travels as a frame.
            gw.metrics
                .inc("kubegate_api_errors_total", format!("code=\"{}\"", e.code));
            ServerFrame::Error(e)
        }
    };
    let _ = out.send(last.encode());
    let _ = out.send(Message::Close(Some(close(CloseCode::Normal, ""))));
}

/// exec-in: client frames to the process, and the session's limits.
#[allow(clippy::too_many_arguments)]
fn supervise(
    gw: &Gateway,
    inbound: Receiver<Message>,
    mut stdin: remote::StdinWriter,
    controller: remote::Controller,
    out: &Outbox,
    ctrl: Sender<Ctrl>,
    done: Receiver<()>,
    shared: &Shared,
    tty: bool,
) {
    let limits = &gw.settings.limits;
    let stop_rx = gw.stop_rx.clone();
    let abort = |code: CloseCode, reason: &str| {
        shared.stopped.store(true, Ordering::Release);
        out.abort(close(code, reason));
        let _ = controller.cancel();
    };
    loop {
        select! {
            recv(inbound) -> m => match m {
                Ok(m) => {
                    // Room again in a full inbound channel: let the pump
                    // deliver what it holds at once.
                    out.wake();
                    shared.touch();
                    match ClientFrame::decode(&m, limits.max_stdin_frame_bytes) {
                        Ok(None) => {}
                        Ok(Some(ClientFrame::Stdin { data, eof })) => {
                            shared.bytes_in.fetch_add(data.len() as u64, Ordering::Relaxed);
                            let r = (|| {
                                if !data.is_empty() {
                                    stdin.write(&data)?;
                                }
                                if eof {
                                    stdin.close()?;
                                }
                                Ok::<(), RemoteError>(())
                            })();
                            match r {
                                Ok(()) => {}
                                Err(RemoteError::InvalidRequest(m)) => {
                                    let _ = ctrl.send(Ctrl::Fail(invalid(m)));
                                    break;
                                }
                                Err(RemoteError::HalfCloseUnsupported) => {
                                    let _ = ctrl.send(Ctrl::Fail(ApiError::new(
                                        Code::ExecFailed,
                                        "the cluster speaks v4.channel.k8s.io, which cannot close stdin alone",
                                    )));
                                    break;
                                }
                                // The stream is ending; exec-out reports how.
                                Err(_) => {}
                            }
                        }
                        Ok(Some(ClientFrame::Resize { cols, rows })) => {
                            if tty {
                                let _ = controller.resize(TermSize { width: cols, height: rows });
                            }
                            shared.record(|r| r.resize(cols, rows));
                        }
                        Ok(Some(ClientFrame::Close)) => {
                            abort(CloseCode::Normal, "");
                            break;
                        }
                        Err(e) => {
                            let _ = ctrl.send(Ctrl::Fail(invalid(e.0)));
                            break;
                        }
                    }
                }
                Err(_) => {
                    // The client's WebSocket ended (or it vanished).
                    abort(CloseCode::Away, "");
                    break;
                }
            },
            recv(done) -> _ => break,
            recv(stop_rx) -> _ => {
                abort(CloseCode::Away, "server shutting down");
                break;
            }
            default(TICK) => {}
        }
        let now_ms = u64::try_from(shared.started.elapsed().as_millis()).unwrap_or(u64::MAX);
        let idle_ms = now_ms.saturating_sub(shared.active_ms.load(Ordering::Relaxed));
        if Duration::from_millis(idle_ms) >= gw.settings.idle_timeout {
            abort(CloseCode::Policy, "idle timeout");
            break;
        }
        if shared.started.elapsed() >= gw.settings.max_duration {
            abort(CloseCode::Policy, "maximum duration reached");
            break;
        }
    }
    // Nothing more goes to the process's stdin; the stream itself ends with
    // the process (or was cancelled above).
    drop(stdin);
    // Keep draining client frames until the socket ends, so the pump never
    // holds one for lack of room (it would stop reading pongs and closes).
    for _ in inbound.iter() {
        out.wake();
    }
}
