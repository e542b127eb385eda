//! The exec gateway: admission (validation, the workspace check, the
//! concurrency slots, the target resolved), the Kubernetes exec stream
//! opened, the audit line and the metrics of every exec; the one-shot exec
//! runs here on the caller's thread, an interactive one is handed to
//! [`super::interactive`] once admitted. Its settings ([`Settings`]) are
//! built by the daemon from its configuration.

use super::audit::{Audit, Record};
use super::frames::Target;
use super::frames::{Exit, TYPE_STDERR};
use super::interactive::{Interactive, RecordingNote};
use super::record::Bounds;
use super::resolve::{resolve, Ownership};
use super::slots::{Slot, Slots};
use super::validate::{output_cap, ExecSpec, Limits};
use crate::api::{ApiError, Code, Identity};
use crate::http::ws::Outbox;
use crate::http::PeerProbe;
use crate::kube::client::Client;
use crate::kube::connection::{Connection, Impersonation};
use crate::kube::remote::{self, ExecOptions, Output, RemoteError, RemoteProcess, TermSize};
use crate::metrics::{label, Metrics};
use crossbeam_channel::{bounded, Receiver, Sender};
use parking_lot::Mutex;
use serde::{Deserialize, Serialize};
use std::collections::HashMap;
use std::sync::atomic::AtomicU64;
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime};

/// How often a one-shot exec looks whether its caller is still there:
/// 100 ms.
const ABORT_CHECK: Duration = Duration::from_millis(100);

/// The gateway's settings; the daemon builds them from `[exec]` and
/// `[cluster]` (`server::settings::exec_settings`).
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
    /// Act in the cluster as the principal (`[cluster] impersonate`).
    pub impersonate: bool,
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

/// Who the gateway's cluster calls act as for one principal
/// ([`Gateway::as_principal`]): the daemon itself, or the principal
/// impersonated.
pub struct Acting(Option<(Client, Connection)>);

impl Acting {
    /// Whether the calls carry impersonation headers.
    pub fn impersonating(&self) -> bool {
        self.0.is_some()
    }

    /// The REST client to use.
    pub fn client<'a>(&'a self, gw: &'a Gateway) -> &'a Client {
        self.0.as_ref().map_or(&gw.client, |(c, _)| c)
    }

    /// The connection streams are opened with.
    pub fn connection<'a>(&'a self, gw: &'a Gateway) -> &'a Connection {
        self.0.as_ref().map_or(&gw.conn, |(_, c)| c)
    }
}

pub struct Gateway {
    pub(super) client: Client,
    pub(super) conn: Connection,
    pub(super) settings: Settings,
    pub(super) slots: Arc<Slots>,
    pub(super) audit: Option<Audit>,
    pub(super) metrics: Arc<Metrics>,
    /// Dropped at shutdown: every session's exec-in sees the disconnect.
    pub(super) stop_tx: Mutex<Option<Sender<()>>>,
    pub(super) stop_rx: Receiver<()>,
    /// Outboxes of the live interactive sessions (queue-depth metric).
    pub(super) queues: Arc<Mutex<HashMap<u64, Outbox>>>,
    pub(super) next_id: AtomicU64,
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
        check_workspace(who, spec)?;
        let slot = self.slots.acquire(&who.name)?;
        *checked = true;
        let acting = self.as_principal(who)?;
        let target = resolve(acting.client(self), &self.settings.ownership, spec)?;
        Ok((slot, target))
    }

    /// The client and connection that reach into a workspace for `who`:
    /// the daemon's own, or with `[cluster] impersonate` the same acting as
    /// the principal (`Impersonate-User` = its name, `Impersonate-Group` =
    /// its Kubernetes groups; docs/SECURITY.md#impersonation). A name that
    /// cannot travel in a header unchanged is refused, never sent altered.
    pub fn as_principal(&self, who: &Identity) -> Result<Acting, ApiError> {
        if !self.settings.impersonate {
            // Nothing cloned: the daemon's own client and connection.
            return Ok(Acting(None));
        }
        let imp = Impersonation::new(&who.name, &who.kube_groups).map_err(|e| {
            ApiError::new(
                Code::ExecTargetForbidden,
                format!("the daemon cannot act in the cluster as this principal: {e}"),
            )
        })?;
        Ok(Acting(Some((
            self.client.impersonating(imp.clone()),
            self.conn.impersonating(imp),
        ))))
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
        who: &Identity,
        target: &Target,
        spec: &ExecSpec,
        o: ExecOptions,
    ) -> Result<RemoteProcess, ApiError> {
        let acting = self.as_principal(who)?;
        remote::exec(
            acting.connection(self),
            &target.namespace,
            &target.pod,
            Some(&target.container),
            &spec.command,
            o,
        )
        .map_err(|e| remote_error(&e))
    }

    pub(super) fn finish(
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
    pub(super) fn audit(
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
            let r = self.run_oneshot(who, &spec, t, caps, probe, &mut out_bytes);
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
        who: &Identity,
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
        let process = self.open(who, &target, spec, opts)?;
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
            let process = self.open(who, &target, &req.spec, opts)?;
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

/// The principal holds the spec's workspace (`EXEC_TARGET_FORBIDDEN`
/// otherwise), checked before any cluster call.
pub(super) fn check_workspace(who: &Identity, spec: &ExecSpec) -> Result<(), ApiError> {
    if !who.holds(&spec.project, &spec.uid) {
        return Err(ApiError::new(
            Code::ExecTargetForbidden,
            format!(
                "workspace {}/{} is not one this token may act on",
                spec.project, spec.uid
            ),
        ));
    }
    Ok(())
}

/// Kubernetes' own messages are passed on; credential and TLS details
/// (paths) only go to the log.
pub(super) fn remote_error(e: &RemoteError) -> ApiError {
    match e {
        RemoteError::Api { code: 404, status } => {
            ApiError::new(Code::ExecTargetNotFound, status.message.clone())
        }
        // The cluster's RBAC said no (with impersonation: to the
        // principal): its message, which names who and what.
        RemoteError::Api { code: 403, status } => {
            ApiError::new(Code::ExecTargetForbidden, status.message.clone())
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
