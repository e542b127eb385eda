//! An interactive exec once admitted ([`Interactive`]): three threads per
//! session, the recording, the limits.
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

use super::frames::Target;
use super::frames::{ClientFrame, Exit, ServerFrame};
use super::record::{self, Recorder};
use super::slots::Slot;
use super::validate::invalid;
use crate::api::{ApiError, Code, Identity};
use crate::http::ws::{self, Outbox, WsConn, WsOptions};
use crate::kube::remote::{self, Output, RemoteError, RemoteProcess, TermSize};
use crate::metrics::Metrics;
use crossbeam_channel::{bounded, select, Receiver, Sender};
use parking_lot::Mutex;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime};
use tungstenite::protocol::frame::coding::CloseCode;
use tungstenite::protocol::CloseFrame;
use tungstenite::Message;

use super::gateway::{remote_error, Gateway, InteractiveRequest};

/// How often exec-in checks the idle and duration limits: 500 ms.
const TICK: Duration = Duration::from_millis(500);
/// Client frames between the client pump and exec-in.
const INBOUND_CAPACITY: usize = 16;

/// An admitted interactive exec waiting for its WebSocket.
pub struct Interactive {
    pub(super) gw: Arc<Gateway>,
    pub(super) who: Arc<Identity>,
    pub(super) req: InteractiveRequest,
    pub(super) target: Target,
    pub(super) process: RemoteProcess,
    pub(super) slot: Slot,
    pub(super) started: Instant,
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
    pub(super) file: Option<String>,
    /// Why it stopped before the exec ended.
    pub(super) truncated: Option<String>,
    /// Why none was started.
    pub(super) skipped: Option<String>,
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
