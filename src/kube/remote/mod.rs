//! The exec and attach client: runs a command in a container (`exec`) or
//! joins a container's main process (`attach`) over the WebSocket channel
//! protocol (`v5.channel.k8s.io`, falling back to `v4.channel.k8s.io`;
//! docs/kubernetes.md#exec-and-attach-over-websocket), with no async runtime.
//!
//! It owns: the upgrade request (URL, flags, subprotocol offer in ONE
//! header, bearer token), the upgrade answer (a 101 checked per RFC 6455,
//! or an HTTP error decoded as a Kubernetes Status), and one running stream
//! per [`RemoteProcess`]: a bounded output channel, a stdin writer with
//! backpressure, resizes, and the exit status from channel 3.
//!
//! It never (exec and attach): speaks SPDY; frames channels itself (`kube::channel` does);
//! drives a socket outside `http::ws::run_stream` (the one poll(2) pump);
//! builds TLS settings of its own (`kube::tls_client`); follows proxies
//! (`HTTPS_PROXY` is ignored); retries (a caller decides whether a failed
//! upgrade is worth another try).
//!
//! Why this shape: a socket can be driven by one thread only (tungstenite
//! and rustls keep one state per connection), and every known client bug in
//! docs/kubernetes.md#known-traps-each-was-a-real-bug-in-a-mainstream-client is
//! avoided by construction: channel 3 is collected whole
//! and decoded once at the end, a stream that ends without a status is an
//! error (never exit 0), stdin EOF on v5 is the `[255, 0]` half-close (never
//! a socket close), and output is read until the server closes whatever
//! stdin does. Threads per stream: two (`kube-remote-io` owns the socket,
//! `kube-remote-out` demultiplexes into the output channel), plus none for
//! the caller's handles; see `process`.
//!
//! - `request`: server URL and request path (sans-IO);
//! - `handshake`: upgrade request bytes and answer parsing (sans-IO);
//! - `connect`: TCP, TLS and the upgrade under one deadline (blocking I/O);
//! - `demux`: messages to output chunks, and the end to an exit status (sans-IO);
//! - `process`: the threads and the handles;
//! - `portforward`: one TCP connection to a pod's port through
//!   `pods/portforward` (SPDY over a WebSocket; its own pump thread);
//! - `error`: [`RemoteError`].

pub(crate) mod connect;
mod demux;
mod error;
pub(crate) mod handshake;
pub mod portforward;
mod process;
pub(crate) mod request;

pub use crate::kube::channel::{Protocol, TermSize};
pub use connect::{dial_websocket, upgrade_on, SMALL_READ_BUFFER};
pub use demux::{ExitStatus, Output};
pub use error::RemoteError;
pub use process::{
    Controller, EndSink, OutputSink, RemoteProcess, SinkProcess, StdinWriter, MAX_STDIN_CHUNK,
};

use crate::kube::connection::Connection;
use process::StartOptions;
use request::{Kind, Streams};
use std::time::Duration;

/// What to stream, and the stream's limits.
#[derive(Debug, Clone)]
pub struct ExecOptions {
    /// Send stdin (channel 0); see [`RemoteProcess::stdin`].
    pub stdin: bool,
    /// Receive stdout (channel 1).
    pub stdout: bool,
    /// Receive stderr (channel 2). Ignored with `tty`: a terminal merges
    /// stderr into stdout, and the flag is not sent (as kubectl does).
    pub stderr: bool,
    /// Allocate a terminal (exec) or use the container's (attach).
    pub tty: bool,
    /// With `tty`: the terminal size sent right after the upgrade, before
    /// any stdin.
    pub initial_size: Option<TermSize>,
    /// Output chunks buffered between the stream and the consumer (each up
    /// to one server frame, 32 KiB upstream). When full, the socket is no
    /// longer read: the server slows down; nothing is dropped. Default 64.
    pub output_capacity: usize,
    /// Deliver stdout and stderr as whole frames ([`Output::Frame`]) instead
    /// of copied payloads: for relays whose own frames have the same
    /// `[channel][data]` layout (the daemon's exec gateway). Default false.
    pub raw_frames: bool,
    /// The WebSocket read buffer (tungstenite's default 128 KiB, allocated
    /// at the first read): smaller for long-lived, mostly idle streams such
    /// as attaches held by watch sessions. Default none (128 KiB).
    pub read_buffer_bytes: Option<usize>,
    /// Subprotocols offered, preferred first. Default v5 then v4. Offering
    /// only v4 exists for tests of the fallback.
    pub protocols: Vec<Protocol>,
    /// Deadline for connect + TLS + upgrade. Default 30 s.
    pub connect_timeout: Duration,
    /// A ping after this long without sending anything. Default 30 s (load
    /// balancers cut idle streams at 60 s).
    pub ping_interval: Option<Duration>,
    /// End the stream (`NoStatus`) after this long without any frame from
    /// the server, pongs included: a dead connection must not hang `wait`.
    /// Default 120 s (four missed pongs). NOTE: while the consumer is not
    /// reading output, the socket is not read either, so a consumer that
    /// pauses longer than this ends the stream; `None` disables it.
    pub idle_timeout: Option<Duration>,
}

impl Default for ExecOptions {
    fn default() -> Self {
        ExecOptions {
            stdin: false,
            stdout: true,
            stderr: true,
            tty: false,
            initial_size: None,
            output_capacity: 64,
            raw_frames: false,
            read_buffer_bytes: None,
            protocols: vec![Protocol::V5, Protocol::V4],
            connect_timeout: Duration::from_secs(30),
            ping_interval: Some(Duration::from_secs(30)),
            idle_timeout: Some(Duration::from_secs(120)),
        }
    }
}

/// Runs `command` in `container` (or the pod's only/default container) of
/// `namespace/pod`. Returns once the stream is open; errors before the
/// upgrade are [`RemoteError::Api`] (404 pod, 400 container not valid, …).
pub fn exec(
    conn: &Connection,
    namespace: &str,
    pod: &str,
    container: Option<&str>,
    command: &[String],
    opts: ExecOptions,
) -> Result<RemoteProcess, RemoteError> {
    if command.is_empty() {
        return Err(RemoteError::InvalidRequest("exec needs a command".into()));
    }
    let (opened, start) = connect(conn, Kind::Exec, namespace, pod, container, command, opts)?;
    process::start(opened, start)
}

/// Attaches to the main process of `container` in `namespace/pod`. stdin
/// reaches the process only when the container has `stdin: true`; `wait`
/// gives Success when the stream ends normally (the container's own exit
/// code is in the pod's status, not here).
pub fn attach(
    conn: &Connection,
    namespace: &str,
    pod: &str,
    container: Option<&str>,
    opts: ExecOptions,
) -> Result<RemoteProcess, RemoteError> {
    let (opened, start) = connect(conn, Kind::Attach, namespace, pod, container, &[], opts)?;
    process::start(opened, start)
}

/// [`attach`] with the output handed to `sink` on the stream's own thread
/// (see [`SinkProcess`]) and the verdict to `on_end` when the stream ends;
/// `output_capacity` is unused.
pub fn attach_into(
    conn: &Connection,
    namespace: &str,
    pod: &str,
    container: Option<&str>,
    opts: ExecOptions,
    sink: OutputSink,
    on_end: EndSink,
) -> Result<SinkProcess, RemoteError> {
    let (opened, start) = connect(conn, Kind::Attach, namespace, pod, container, &[], opts)?;
    process::start_sink(opened, start, sink, on_end)
}

/// Validates, connects and upgrades; the settings to start threads with.
fn connect(
    conn: &Connection,
    kind: Kind,
    namespace: &str,
    pod: &str,
    container: Option<&str>,
    command: &[String],
    opts: ExecOptions,
) -> Result<(connect::Opened, StartOptions), RemoteError> {
    let streams = Streams {
        stdin: opts.stdin,
        stdout: opts.stdout,
        stderr: opts.stderr,
        tty: opts.tty,
    };
    if !(streams.stdin || streams.stdout || (streams.stderr && !streams.tty)) {
        return Err(RemoteError::InvalidRequest(
            "at least one of stdin, stdout, stderr is required".into(),
        ));
    }
    if namespace.is_empty() || pod.is_empty() {
        return Err(RemoteError::InvalidRequest(
            "namespace and pod name are required".into(),
        ));
    }
    if opts.protocols.is_empty() {
        return Err(RemoteError::InvalidRequest(
            "no subprotocol to offer".into(),
        ));
    }
    let ep = crate::http::endpoint::parse_server(&conn.server)
        .map_err(|e| RemoteError::InvalidRequest(e.to_string()))?;
    let path = request::path_and_query(
        &ep.prefix, kind, namespace, pod, container, command, streams,
    );
    let opened = connect::open(
        conn,
        &ep,
        &path,
        &opts.protocols,
        opts.connect_timeout,
        opts.read_buffer_bytes,
    )?;
    Ok((
        opened,
        StartOptions {
            kind,
            streams,
            initial_size: opts.initial_size,
            output_capacity: opts.output_capacity,
            raw_frames: opts.raw_frames,
            ping_interval: opts.ping_interval,
            idle_timeout: opts.idle_timeout,
        },
    ))
}
