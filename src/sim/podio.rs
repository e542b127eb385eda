//! The streaming pod subresources the kubelet serves: `exec` and `attach`
//! over the WebSocket channel protocol (v5 and v4,
//! docs/kubernetes.md#exec-and-attach-over-websocket), `log`
//! (plain and followed), and `proxy`.
//!
//! Each exec/attach socket is driven by `http::ws::run` on its connection
//! thread; one "out" thread moves process output into the socket's bounded
//! outbox (waiting when it is full: backpressure reaches the process through
//! its pipe, nothing is dropped) and one "in" thread moves stdin, resize and
//! close frames to the process. The exit status goes on channel 3 only after
//! every output byte, then a normal close (1000): kubectl waits for it.

use super::api::PodStreams;
use super::faults::Faults;
use super::kubelet::{ContainerHandle, Kubelet};
use super::podspec::{self, PlanContext};
use super::resources::Resource;
use super::runtime::{LogQuery, Process, ProcessSpec, Stream};
use crate::http::ws::{self, Outbox, WsConn, WsOptions};
use crate::http::{ChunkSink, Reply, Request, Response, Upgrade};
use crate::kube::channel::{self, Frame, Protocol, ResizeDecoder};
use crate::kube::status::Status;
use crate::kube::time::{parse_rfc3339, rfc3339_nano, whole_second};
use crossbeam_channel::{bounded, Receiver, RecvTimeoutError};
use serde_json::Value;
use std::sync::Arc;
use std::time::{Duration, SystemTime};
use tungstenite::protocol::frame::coding::CloseCode;
use tungstenite::protocol::CloseFrame;
use tungstenite::Message;

/// Largest message accepted from an exec/attach client: kubectl sends stdin
/// in frames of at most 32 KiB + 1.
const MAX_MESSAGE: usize = 1 << 20;
/// Messages queued each way of an exec/attach socket (its outbox, and the
/// inbound channel to the "in" thread): 64.
const OUTBOX: usize = 64;

fn status(s: Status) -> Reply {
    Response::json(s.http_code(), s.to_json()).into()
}

fn bad_request(msg: &str) -> Reply {
    status(Status::bad_request(msg))
}

/// Which container of `pod` a request names, with upstream's messages.
fn pick_container(pod: &Value, asked: Option<&str>) -> Result<String, Reply> {
    let name = pod["metadata"]["name"].as_str().unwrap_or("");
    let names: Vec<&str> = pod["spec"]["containers"]
        .as_array()
        .into_iter()
        .flatten()
        .chain(
            pod["spec"]["initContainers"]
                .as_array()
                .into_iter()
                .flatten(),
        )
        .filter_map(|c| c["name"].as_str())
        .collect();
    match asked.filter(|c| !c.is_empty()) {
        Some(c) if names.contains(&c) => Ok(c.to_string()),
        Some(c) => Err(bad_request(&format!(
            "container {c} is not valid for pod {name}"
        ))),
        None => {
            let main: Vec<&str> = pod["spec"]["containers"]
                .as_array()
                .into_iter()
                .flatten()
                .filter_map(|c| c["name"].as_str())
                .collect();
            match main.as_slice() {
                [only] => Ok(only.to_string()),
                _ => Err(bad_request(&format!(
                    "a container name must be specified for pod {name}, choose one of: [{}]",
                    main.join(" ")
                ))),
            }
        }
    }
}

struct Target {
    pod: Value,
    container: String,
    handle: Option<ContainerHandle>,
}

impl Target {
    /// The container's process, when it has one that has not exited.
    fn running_process(&self) -> Option<Arc<Process>> {
        self.handle
            .as_ref()
            .and_then(|h| h.process.clone())
            .filter(|p| p.exited().is_none())
    }
}

impl Kubelet {
    /// The pod and container an exec or attach names: as
    /// [`Self::target_for_log`], and a pod not yet bound to the node is
    /// refused.
    fn target(&self, container: Option<&str>, ns: &str, pod_name: &str) -> Result<Target, Reply> {
        let t = self.target_for_log(container, ns, pod_name)?;
        if t.pod["spec"]["nodeName"].as_str().unwrap_or("").is_empty() {
            return Err(bad_request(&format!(
                "pod {pod_name} does not have a host assigned"
            )));
        }
        Ok(t)
    }

    fn upgrade_checks(req: &Request) -> Result<Protocol, Reply> {
        if !req.is_websocket_upgrade() {
            return Err(bad_request("Upgrade request required"));
        }
        channel::server_negotiate(&req.websocket_protocols()).ok_or_else(|| {
            bad_request(&format!(
                "requested protocol(s) are not supported: {:?}; supported protocols: [\"v5.channel.k8s.io\" \"v4.channel.k8s.io\"]",
                req.websocket_protocols()
            ))
        })
    }

    /// The process an exec runs: the container's environment, working
    /// directory and mount mapping, with the requested command.
    fn exec_plan(
        &self,
        t: &Target,
        command: &[String],
        tty: bool,
        stdin: bool,
    ) -> Result<ProcessSpec, ExecRefusal> {
        let h = t.handle.as_ref().ok_or(ExecRefusal::NotFound)?;
        let mut spec = h.spec.clone();
        // An exec's command is not subject to `$(VAR)` expansion (only a
        // container's is): escape `$` so it survives the plan unchanged,
        // while mount paths in it are still mapped.
        let escaped: Vec<String> = command.iter().map(|a| a.replace('$', "$$")).collect();
        spec["command"] = Value::from(escaped);
        if let Some(m) = spec.as_object_mut() {
            m.remove("args");
        }
        let ns = t.pod["metadata"]["namespace"]
            .as_str()
            .unwrap_or("")
            .to_string();
        let lookup = self.config_lookup(ns);
        let ctx = PlanContext {
            pod_ip: h.pod_ip.clone(),
            host_ip: super::kubelet::HOST_IP.to_string(),
            node_name: self.role.name.to_string(),
            pod_dir: h.pod_dir.clone(),
            self_exe: self.self_exe.clone(),
            lookup: &*lookup,
            pod_id: h.pod_id,
            sim_uid: self.sim_uid,
        };
        let mut plan = podspec::plan_container(&h.pod, &spec, &ctx).map_err(ExecRefusal::Plan)?;
        plan.tty = tty;
        plan.stdin = stdin;
        plan.log = false;
        Ok(plan)
    }
}

/// Sends a message, reporting whether the socket is still there.
fn send(out: &Outbox, m: Message) -> bool {
    out.send(m).is_ok()
}

fn close_normal() -> Message {
    Message::Close(Some(CloseFrame {
        code: CloseCode::Normal,
        reason: "".into(),
    }))
}

/// A cut stream (fault injection): no status, an abnormal close reason.
fn close_cut() -> Message {
    Message::Close(Some(CloseFrame {
        code: CloseCode::Error,
        reason: "stream cut (injected fault)".into(),
    }))
}

/// Why an exec's process cannot start: told to the client on the socket's
/// error channel (the text is what kubectl prints).
#[derive(Debug)]
pub(crate) enum ExecRefusal {
    /// The pod has no such container.
    NotFound,
    /// The container has no running process.
    NotRunning(String),
    /// The container's spec could not be planned (a missing ConfigMap,
    /// say).
    Plan(podspec::PlanError),
}

impl std::fmt::Display for ExecRefusal {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            ExecRefusal::NotFound => f.write_str("container not found"),
            ExecRefusal::NotRunning(c) => write!(f, "container {c} is not running"),
            ExecRefusal::Plan(e) => e.fmt(f),
        }
    }
}

/// Why an exec or attach has no process to stream: told to the client on
/// the socket's error channel ([`fail_socket`]).
#[derive(Debug)]
pub(crate) enum OpenError {
    /// The exec cannot run, or the attach's container has no process.
    Refused(ExecRefusal),
    /// The runtime could not start the command.
    Start(std::io::Error),
    /// The process started without its output (taken already).
    NoOutput,
}

impl std::fmt::Display for OpenError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            OpenError::Refused(e) => e.fmt(f),
            OpenError::Start(e) => write!(f, "failed to start the command: {e}"),
            OpenError::NoOutput => f.write_str("exec output unavailable"),
        }
    }
}

impl std::error::Error for OpenError {}

/// Channel-3 status then close, for a request that cannot run.
fn fail_socket(conn: WsConn, first: u8, msg: String) {
    let Ok((out, rx)) = ws::try_outbox(4) else {
        return;
    };
    let (in_tx, _in_rx) = bounded(4);
    let _ = out.send(Message::Binary(vec![first].into()));
    let _ = out.send(Message::Binary(
        channel::encode_frame(channel::ERROR, &channel::internal_error_status_json(&msg)).into(),
    ));
    let _ = out.send(close_normal());
    drop(out);
    ws::run(conn, rx, in_tx, WsOptions::default());
}

/// Moves client frames to a process: stdin data, v5 stdin close, resizes.
/// `room` wakes the socket's pump whenever a message is taken from a full
/// inbound channel, so a pump holding a message resumes at once.
fn pump_input(
    proto: Protocol,
    rx: Receiver<Message>,
    room: Outbox,
    p: Arc<Process>,
    stdin: bool,
    close_stdin_on_eof: bool,
) {
    let mut resize = ResizeDecoder::new();
    for m in rx.iter() {
        if rx.len() + 1 >= OUTBOX {
            room.wake();
        }
        let data: &[u8] = match &m {
            Message::Binary(b) => b,
            Message::Text(t) => t.as_bytes(),
            Message::Close(_) => break,
            _ => continue,
        };
        match Frame::parse(proto, data) {
            Frame::Empty => {}
            Frame::Data {
                channel: channel::STDIN,
                payload,
            } => {
                if stdin && p.write_stdin(payload).is_err() {
                    // The process closed its stdin; keep reading frames so
                    // the socket stays serviced.
                }
            }
            Frame::Data {
                channel: channel::RESIZE,
                payload,
            } => {
                resize.push(payload);
                while let Some(r) = resize.next_size() {
                    match r {
                        Ok(sz) => {
                            let _ = p.resize(sz.width, sz.height);
                        }
                        Err(e) => {
                            log::debug!("exec: {e}");
                            if matches!(e, channel::ResizeError::Framing(_)) {
                                resize = ResizeDecoder::new();
                            }
                        }
                    }
                }
            }
            Frame::Data { .. } => {}
            Frame::Close {
                channel: channel::STDIN,
            } => {
                if close_stdin_on_eof {
                    p.close_stdin();
                }
            }
            Frame::Close { .. } => {}
            Frame::BadClose => break,
        }
    }
    if close_stdin_on_eof {
        p.close_stdin();
    }
}

fn out_channel(s: Stream, stdout: bool, stderr: bool) -> Option<u8> {
    match s {
        Stream::Tty | Stream::Stdout if stdout => Some(channel::STDOUT),
        Stream::Stderr if stderr => Some(channel::STDERR),
        _ => None,
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Mode {
    /// A process started for this stream: its exit code ends the stream,
    /// and it dies with the stream.
    Exec,
    /// A container's process: the stream ends with Success when it exits
    /// (or when the client leaves); the container lives on.
    Attach,
}

/// One exec or attach WebSocket, after its process is known.
struct StreamSession {
    proto: Protocol,
    first: u8,
    flags: Flags,
    mode: Mode,
    close_stdin_on_eof: bool,
    wording: ExitWording,
}

impl StreamSession {
    /// A stream with `flags`; its first frame names the first channel they
    /// ask for (where an error is told).
    fn new(
        proto: Protocol,
        flags: Flags,
        mode: Mode,
        close_stdin_on_eof: bool,
        wording: ExitWording,
    ) -> Self {
        StreamSession {
            proto,
            first: first_channel(&flags),
            flags,
            mode,
            close_stdin_on_eof,
            wording,
        }
    }

    /// Drives the socket on this (the connection's) thread until it
    /// closes, with one thread relaying output into the socket's bounded
    /// outbox (backpressure: it waits when the outbox is full) and one
    /// moving client frames to the process.
    fn run(
        self,
        conn: WsConn,
        process: Arc<Process>,
        output: Receiver<super::runtime::OutputChunk>,
        faults: &Arc<Faults>,
    ) {
        let Ok((out, out_rx)) = ws::try_outbox(OUTBOX) else {
            if matches!(self.mode, Mode::Exec) {
                process.kill();
            }
            return;
        };
        let (in_tx, in_rx) = bounded::<Message>(OUTBOX);
        let _ = out.send(Message::Binary(vec![self.first].into()));
        let room = out.clone();
        let (f, mode, wording) = (self.flags, self.mode, self.wording);
        let attach = matches!(self.mode, Mode::Attach);
        let epoch = faults.stream_epoch(attach);
        let cut = faults.clone_epoch_reader(attach);
        let p_out = process.clone();
        let out_thread = std::thread::Builder::new()
            .name(
                match mode {
                    Mode::Exec => "sim-exec-out",
                    Mode::Attach => "sim-attach-out",
                }
                .into(),
            )
            .spawn(move || {
                loop {
                    match output.recv_timeout(Duration::from_millis(250)) {
                        Ok(chunk) => {
                            if let Some(ch) = out_channel(chunk.stream, f.stdout, f.stderr) {
                                let frame = channel::encode_frame(ch, &chunk.data);
                                if !send(&out, Message::Binary(frame.into())) {
                                    if matches!(mode, Mode::Exec) {
                                        p_out.kill();
                                    }
                                    return;
                                }
                            }
                        }
                        Err(RecvTimeoutError::Timeout) => {
                            if matches!(mode, Mode::Attach)
                                && p_out.exited().is_some()
                                && output.is_empty()
                            {
                                break;
                            }
                        }
                        Err(RecvTimeoutError::Disconnected) => break,
                    }
                    if cut() != epoch {
                        if matches!(mode, Mode::Exec) {
                            p_out.kill();
                        }
                        let _ = out.send(close_cut());
                        return;
                    }
                }
                let st = match mode {
                    Mode::Exec => wording.status_json(p_out.wait().code),
                    // Attach reports Success whatever the container did.
                    Mode::Attach => channel::success_status_json(),
                };
                let _ = out.send(Message::Binary(
                    channel::encode_frame(channel::ERROR, &st).into(),
                ));
                let _ = out.send(close_normal());
            });
        let p_in = process.clone();
        let (proto, stdin, close_on_eof) = (self.proto, f.stdin, self.close_stdin_on_eof);
        let in_thread = std::thread::Builder::new()
            .name(
                match mode {
                    Mode::Exec => "sim-exec-in",
                    Mode::Attach => "sim-attach-in",
                }
                .into(),
            )
            .spawn(move || pump_input(proto, in_rx, room, p_in, stdin, close_on_eof));
        ws::run(conn, out_rx, in_tx, WsOptions::default());
        // The client is gone or the stream is over: an exec's process may
        // not outlive it.
        if matches!(mode, Mode::Exec) && process.exited().is_none() {
            process.kill();
        }
        if let Ok(h) = out_thread {
            let _ = h.join();
        }
        if let Ok(h) = in_thread {
            let _ = h.join();
        }
    }
}

/// Which streams an exec or attach asks for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Flags {
    pub(crate) stdin: bool,
    pub(crate) stdout: bool,
    pub(crate) stderr: bool,
    pub(crate) tty: bool,
}

impl Flags {
    /// The API server's query names (`stdin`, `stdout`, `stderr`, `tty`;
    /// any value but `0` or `false` is true).
    fn from_api(req: &Request) -> Flags {
        Flags {
            stdin: req.query_flag("stdin"),
            stdout: req.query_flag("stdout"),
            stderr: req.query_flag("stderr"),
            tty: req.query_flag("tty"),
        }
    }

    /// The kubelet's query names, as the API server sends them
    /// (`input`, `output`, `error`, `tty`), true only when exactly `1`
    /// (the kubelet's remotecommand `NewOptions`).
    pub(crate) fn from_kubelet(req: &Request) -> Flags {
        let one = |k: &str| req.query(k) == Some("1");
        Flags {
            stdin: one("input"),
            stdout: one("output"),
            stderr: one("error"),
            tty: one("tty"),
        }
    }

    /// Upstream's checks: at least one stream; with a tty, stderr is
    /// merged into stdout.
    pub(crate) fn checked(self) -> Result<Flags, String> {
        if !self.stdin && !self.stdout && !self.stderr {
            return Err("you must specify at least 1 of stdin, stdout, stderr".into());
        }
        Ok(Flags {
            stderr: self.stderr && !self.tty,
            ..self
        })
    }
}

/// What an exec or attach streams once its socket is open: the process
/// and its output, or why not (told on the stream's error channel).
pub(crate) type Opened = Result<(Arc<Process>, Receiver<super::runtime::OutputChunk>), OpenError>;

/// The WebSocket upgrade of an exec or attach: once the socket is open,
/// `open` gives the process to stream (or the message the socket fails
/// with), and `stream` drives it on the connection's thread.
fn stream_upgrade(
    stream: StreamSession,
    faults: Arc<Faults>,
    open: Box<dyn FnOnce() -> Opened + Send>,
) -> Reply {
    Reply::Upgrade(Upgrade {
        protocol: Some(stream.proto.name().to_string()),
        headers: Vec::new(),
        max_message_bytes: MAX_MESSAGE,
        on_open: Box::new(move |conn: WsConn| match open() {
            Ok((process, output)) => stream.run(conn, process, output, &faults),
            Err(e) => fail_socket(conn, stream.first, e.to_string()),
        }),
    })
}

fn first_channel(f: &Flags) -> u8 {
    if f.stdout {
        channel::STDOUT
    } else if f.stderr {
        channel::STDERR
    } else {
        channel::ERROR
    }
}

/// An exec or attach checked and ready to stream over any transport: which
/// streams, how it ends, and (once the transport is open) its process.
pub(crate) struct Prepared {
    pub(crate) flags: Flags,
    pub(crate) mode: Mode,
    /// The client's stdin EOF closes the process's stdin (an exec; an
    /// attach to a `stdinOnce` container).
    pub(crate) close_stdin_on_eof: bool,
    /// Starts (exec) or finds (attach) the process; the error is told on
    /// the stream's error channel.
    pub(crate) open: Box<dyn FnOnce() -> Opened + Send>,
    pub(crate) wording: ExitWording,
}

/// Whose words an exec's non-zero exit status carries.
#[derive(Clone, Debug)]
pub(crate) enum ExitWording {
    /// The API server's stream translator (`pods/exec`).
    Translator,
    /// The container runtime's, as the kubelet passes it on, naming the
    /// command (the kubelet API).
    Cri(Vec<String>),
}

impl ExitWording {
    /// The v4/v5 error-channel Status for `code` (Success for 0).
    pub(crate) fn status_json(&self, code: i32) -> Vec<u8> {
        match self {
            ExitWording::Translator => channel::exit_status_json(code),
            ExitWording::Cri(cmd) => channel::exit_status_json_cri(code, cmd),
        }
    }
}

impl Kubelet {
    /// Checks an exec as the kubelet does (pod, container, command, flags)
    /// and plans its process; `container` is the one asked for (`None`:
    /// the pod's only one).
    pub(crate) fn prepare_exec(
        &self,
        container: Option<&str>,
        ns: &str,
        pod: &str,
        flags: Flags,
        command: Vec<String>,
        wording: ExitWording,
    ) -> Result<Prepared, Reply> {
        let t = self.target(container, ns, pod)?;
        if command.is_empty() {
            return Err(bad_request(
                "you must specify at least one command for the container",
            ));
        }
        let f = flags.checked().map_err(|m| bad_request(&m))?;
        let plan = match t.running_process() {
            Some(_) => self.exec_plan(&t, &command, f.tty, f.stdin),
            None => Err(ExecRefusal::NotRunning(t.container.clone())),
        };
        let runtime = self.runtime.clone();
        Ok(Prepared {
            flags: f,
            mode: Mode::Exec,
            close_stdin_on_eof: true,
            wording,
            open: Box::new(move || {
                let process = runtime
                    .start(plan.map_err(OpenError::Refused)?)
                    .map_err(OpenError::Start)?;
                let Some(output) = process.take_output() else {
                    process.kill();
                    return Err(OpenError::NoOutput);
                };
                Ok((process, output))
            }),
        })
    }

    /// Checks an attach as the kubelet does and finds its container's
    /// process (stdin only when the container has `stdin: true`).
    pub(crate) fn prepare_attach(
        &self,
        container: Option<&str>,
        ns: &str,
        pod: &str,
        flags: Flags,
    ) -> Result<Prepared, Reply> {
        let t = self.target(container, ns, pod)?;
        let f = flags.checked().map_err(|m| bad_request(&m))?;
        let spec = t
            .handle
            .as_ref()
            .map(|h| h.spec.clone())
            .unwrap_or(Value::Null);
        let stdin_enabled = spec["stdin"].as_bool() == Some(true);
        let stdin_once = spec["stdinOnce"].as_bool() == Some(true);
        let running = t.running_process();
        let container = t.container.clone();
        Ok(Prepared {
            flags: Flags {
                stdin: f.stdin && stdin_enabled,
                ..f
            },
            mode: Mode::Attach,
            close_stdin_on_eof: stdin_once,
            wording: ExitWording::Translator,
            open: Box::new(move || {
                let process =
                    running.ok_or(OpenError::Refused(ExecRefusal::NotRunning(container)))?;
                let sub = process.subscribe();
                Ok((process, sub))
            }),
        })
    }

    /// A prepared exec or attach over the WebSocket channel protocol (v5,
    /// v4), or upstream's refusal of the upgrade.
    pub(crate) fn stream_websocket(&self, req: &Request, p: Prepared) -> Reply {
        let proto = match Self::upgrade_checks(req) {
            Ok(proto) => proto,
            Err(r) => return r,
        };
        let stream = StreamSession::new(proto, p.flags, p.mode, p.close_stdin_on_eof, p.wording);
        stream_upgrade(stream, self.faults.clone(), p.open)
    }
}

impl PodStreams for Kubelet {
    fn exec(&self, req: &Request, ns: &str, pod: &str) -> Reply {
        let command: Vec<String> = req
            .query_all("command")
            .iter()
            .map(|s| s.to_string())
            .collect();
        match self.prepare_exec(
            req.query("container"),
            ns,
            pod,
            Flags::from_api(req),
            command,
            ExitWording::Translator,
        ) {
            Ok(p) => self.stream_websocket(req, p),
            Err(r) => r,
        }
    }

    fn attach(&self, req: &Request, ns: &str, pod: &str) -> Reply {
        match self.prepare_attach(req.query("container"), ns, pod, Flags::from_api(req)) {
            Ok(p) => self.stream_websocket(req, p),
            Err(r) => r,
        }
    }

    fn log(&self, req: &Request, ns: &str, pod: &str) -> Reply {
        let t = match self.target_for_log(req.query("container"), ns, pod) {
            Ok(t) => t,
            Err(r) => return r,
        };
        let previous = req.query_flag("previous");
        let h = t.handle.as_ref();
        let process = if previous {
            h.and_then(|h| h.previous.clone())
        } else {
            h.and_then(|h| h.process.clone())
        };
        let pod_name = pod.to_string();
        let Some(process) = process else {
            let msg = if previous {
                format!(
                    "previous terminated container \"{}\" in pod \"{pod_name}\" not found",
                    t.container
                )
            } else {
                // As the kubelet's validateContainerLogStatus words it from
                // the container's state: a container with no process left
                // (a node restarted under it) is terminated; one not started
                // yet names why it waits.
                let st = container_status(&t.pod, &t.container);
                if st["state"].get("terminated").is_some() {
                    format!(
                        "container \"{}\" in pod \"{pod_name}\" is terminated",
                        t.container
                    )
                } else {
                    let reason = st["state"]["waiting"]["reason"]
                        .as_str()
                        .unwrap_or("ContainerCreating");
                    format!(
                        "container \"{}\" in pod \"{pod_name}\" is waiting to start: {reason}",
                        t.container
                    )
                }
            };
            return bad_request(&msg);
        };
        let mut q = LogQuery::default();
        if let Some(n) = req.query("tailLines") {
            match n.parse::<i64>() {
                Ok(n) if n >= 0 => q.tail_lines = Some(n as usize),
                _ => return bad_request(&format!("invalid tailLines {n:?}")),
            }
        }
        if let Some(n) = req.query("limitBytes") {
            match n.parse::<usize>() {
                Ok(n) if n > 0 => q.limit_bytes = Some(n),
                _ => return bad_request(&format!("invalid limitBytes {n:?}")),
            }
        }
        if let Some(s) = req.query("sinceSeconds") {
            match s.parse::<u64>() {
                Ok(s) if s > 0 => q.since = SystemTime::now().checked_sub(Duration::from_secs(s)),
                _ => return bad_request(&format!("invalid sinceSeconds {s:?}")),
            }
        }
        if let Some(s) = req.query("sinceTime") {
            // The API server forwards sinceTime to the kubelet formatted
            // with time.RFC3339 (whole seconds): a fraction is cut off, so
            // the answer may start up to a second before the time asked.
            match parse_rfc3339(s) {
                Some(t) => q.since = Some(whole_second(t)),
                None => return bad_request(&format!("invalid sinceTime {s:?}")),
            }
        }
        let timestamps = req.query_flag("timestamps");
        let follow = req.query_flag("follow") && !previous;
        if !follow {
            let mut body = Vec::new();
            for line in process.log_snapshot(&q) {
                if timestamps {
                    body.extend_from_slice(rfc3339_nano(line.ts).as_bytes());
                    body.push(b' ');
                }
                body.extend_from_slice(&line.data);
            }
            return Response::new(200, "text/plain", body).into();
        }
        let (lines, rx) = process.log_follow(&q);
        Response::stream(
            200,
            "text/plain",
            Box::new(move |sink: &mut dyn ChunkSink| {
                let mut at_start = true;
                for line in lines {
                    let mut b = Vec::new();
                    if timestamps {
                        b.extend_from_slice(rfc3339_nano(line.ts).as_bytes());
                        b.push(b' ');
                    }
                    b.extend_from_slice(&line.data);
                    at_start = line.data.ends_with(b"\n");
                    sink.send(&b)?;
                }
                loop {
                    match rx.recv_timeout(Duration::from_millis(500)) {
                        Ok(chunk) => {
                            let data = if timestamps {
                                stamp(&chunk.data, chunk.ts, &mut at_start)
                            } else {
                                chunk.data
                            };
                            sink.send(&data)?;
                        }
                        Err(RecvTimeoutError::Timeout) => {
                            if sink.peer_closed() {
                                return Ok(());
                            }
                            if process.exited().is_some() && rx.is_empty() {
                                return Ok(());
                            }
                        }
                        Err(RecvTimeoutError::Disconnected) => return Ok(()),
                    }
                }
            }),
        )
        .into()
    }

    fn port_forward(&self, req: &Request, ns: &str, pod: &str) -> Reply {
        self.serve_port_forward(req, ns, pod)
    }

    fn proxy(&self, req: &Request, ns: &str, pod: &str, port: u16, target: &str) -> Reply {
        let obj = match self.store.get(Resource::Pod, ns, pod) {
            Ok(o) => o,
            Err(_) => return status(Status::not_found("", "pods", pod)),
        };
        let Some(ip) = obj["status"]["podIP"].as_str().filter(|s| !s.is_empty()) else {
            return status(Status::service_unavailable(&format!(
                "pod {pod} has no IP address yet"
            )));
        };
        if ws::wants_websocket(&req.headers) {
            return super::proxy::forward_websocket(req, ip, port, target);
        }
        super::proxy::forward(req, ip, port, target).into()
    }
}

impl Kubelet {
    /// The pod and container a request names (`?container=`, or the only
    /// one). Unlike [`Self::target`], an unbound pod is no error here: its
    /// logs are a plain "waiting" error, told by the caller.
    fn target_for_log(
        &self,
        container: Option<&str>,
        ns: &str,
        pod_name: &str,
    ) -> Result<Target, Reply> {
        let pod = self
            .store
            .get(Resource::Pod, ns, pod_name)
            .map_err(|_| status(Status::not_found("", "pods", pod_name)))?;
        let container = pick_container(&pod, container)?;
        let uid = pod["metadata"]["uid"].as_str().unwrap_or("");
        let handle = self.container(uid, &container);
        Ok(Target {
            pod,
            container,
            handle,
        })
    }
}

/// The status of `container` in `pod` (init or app), or null.
fn container_status<'a>(pod: &'a Value, container: &str) -> &'a Value {
    static NULL: Value = Value::Null;
    ["containerStatuses", "initContainerStatuses"]
        .iter()
        .filter_map(|l| pod["status"][*l].as_array())
        .flatten()
        .find(|c| c["name"] == container)
        .unwrap_or(&NULL)
}

/// Prefixes each line start in `data` with a timestamp.
fn stamp(data: &[u8], ts: SystemTime, at_start: &mut bool) -> Vec<u8> {
    let t = rfc3339_nano(ts);
    let mut out = Vec::with_capacity(data.len() + 40);
    for &b in data {
        if *at_start {
            out.extend_from_slice(t.as_bytes());
            out.push(b' ');
            *at_start = false;
        }
        out.push(b);
        if b == b'\n' {
            *at_start = true;
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stamps_line_starts_across_chunks() {
        let ts = SystemTime::UNIX_EPOCH;
        let mut at = true;
        let a = stamp(b"ab\ncd", ts, &mut at);
        let b = stamp(b"e\n", ts, &mut at);
        let t = rfc3339_nano(ts);
        assert_eq!(String::from_utf8_lossy(&a), format!("{t} ab\n{t} cd"));
        assert_eq!(String::from_utf8_lossy(&b), "e\n");
        assert!(at);
    }
}
