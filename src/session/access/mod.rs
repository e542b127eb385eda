//! The pod-access seam (docs/sessions.md#reaching-the-pod): every connection
//! from the daemon to a session pod's ports — the workspace agent, the
//! debug streams, reachability, the port proxy (HTTP and WebSocket), the
//! TCP tunnels (of a Deployment's pod too) — goes through a
//! [`PodAccess`], picked by `[cluster] pod_access`:
//!
//! - [`ApiProxyAccess`](api_proxy::ApiProxyAccess) (`api-proxy`): through the API server's pod proxy,
//!   `/api/v1/namespaces/{ns}/pods/{pod}:{port}/proxy/{path}`
//!   (`kube::client::Client::pod_proxy`). Works from outside the pod
//!   network. The API server authenticates the daemon and drops the
//!   `Authorization` header before proxying, so a credential for the pod
//!   must travel in another header (the agent's `X-Kubegate-Agent-Token`);
//!   an `Authorization` header given here is refused, never sent.
//! - [`DirectAccess`](direct::DirectAccess) (`direct`): TCP to `podIP:port` with a small blocking
//!   HTTP/1.1 client (one connection per call, `Connection: close`;
//!   `Content-Length`, chunked and close-delimited bodies).
//!
//! Both give the app's answer as it is, whatever its status (an app's 404
//! is an answer, not an error), with a body bounded by the caller; the
//! errors ([`AccessError`]) tell a refused port from an unreachable pod, a
//! timeout, an unreadable HTTP answer and the API server's own failures.
//!
//! Deadlines: `direct` bounds the whole call (connect, head, body) by the
//! request's timeout. `api-proxy` can bound only each read (the proxy has
//! no whole-call deadline), and checks the deadline between reads of the
//! body; a call may therefore overrun by at most one read timeout.
//!
//! Threads: none, but for a tunnel in `api-proxy` mode, whose
//! port-forward WebSocket is pumped by its own `kube-pf-io` thread
//! (`kube::remote::portforward`) until the tunnel ends. Every other call
//! runs on its caller's thread; a stream is read by one thread and can be
//! cut from another with its [`StreamCanceller`].
//!
//! Files: this one (the seam: [`PodAccess`], its requests, answers and
//! errors), [`api_proxy`], [`direct`], and `http1` (raw-socket glue over
//! `http::response`, the answer reading both use).

pub mod api_proxy;
pub mod direct;
mod http1;
#[cfg(test)]
mod tests;

use crate::config::PodAccessMode;
use crate::http::endpoint::parse_server;
use crate::http::stream::{ClientSocket, PollStream};
pub use crate::http::tunnel::Duplex;
use crate::kube::client::{Client, KubeError, ProxyError, ProxyRequest};
use crate::kube::remote::connect as raw;
use crate::kube::remote::RemoteError;
use parking_lot::Mutex;
use std::fmt;
use std::io::{self, Read, Write};
use std::net::{IpAddr, Shutdown, SocketAddr, TcpStream};
use std::os::fd::BorrowedFd;
use std::sync::Arc;
use std::time::{Duration, Instant};
use tungstenite::WebSocket;
use ureq::http::Method;

/// Largest response head (status line and headers) accepted.
const MAX_HEAD_BYTES: usize = 64 * 1024;
/// Largest error body kept when a stream is answered with a non-2xx status.
const MAX_STATUS_BODY: usize = 4 * 1024;
/// Default bound of a response body.
pub const DEFAULT_MAX_RESPONSE_BYTES: usize = 1 << 20;
/// Default timeout of a request.
pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(30);

/// Which pod: its namespace and name (api-proxy) and its IP (direct).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PodTarget {
    pub namespace: String,
    pub name: String,
    pub ip: String,
}

/// One request to a pod's port.
#[derive(Debug, Clone)]
pub struct PodRequest {
    pub method: Method,
    /// Path and query inside the pod, starting with `/`.
    pub path: String,
    pub headers: Vec<(String, String)>,
    pub body: Option<Vec<u8>>,
    /// The whole call (see the module documentation for api-proxy).
    pub timeout: Duration,
    /// A longer body is [`AccessError::TooLarge`].
    pub max_response_bytes: usize,
    /// For [`PodAccess::open`]: the bound on each read of the body after
    /// the head (`timeout` when unset).
    pub idle: Option<Duration>,
}

impl PodRequest {
    pub fn get(path: &str) -> PodRequest {
        PodRequest {
            method: Method::GET,
            path: path.into(),
            headers: Vec::new(),
            body: None,
            timeout: DEFAULT_TIMEOUT,
            max_response_bytes: DEFAULT_MAX_RESPONSE_BYTES,
            idle: None,
        }
    }

    /// A POST of `body` with its `Content-Type`.
    pub fn post(path: &str, body: Vec<u8>, content_type: &str) -> PodRequest {
        PodRequest {
            method: Method::POST,
            body: Some(body),
            ..PodRequest::get(path)
        }
        .header("Content-Type", content_type)
    }

    pub fn header(mut self, name: &str, value: &str) -> PodRequest {
        self.headers.push((name.into(), value.into()));
        self
    }

    pub fn timeout(mut self, d: Duration) -> PodRequest {
        self.timeout = d;
        self
    }

    pub fn idle(mut self, d: Duration) -> PodRequest {
        self.idle = Some(d);
        self
    }

    pub fn max_response_bytes(mut self, n: usize) -> PodRequest {
        self.max_response_bytes = n;
        self
    }
}

/// The app's whole answer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PodResponse {
    pub status: u16,
    pub headers: Vec<(String, String)>,
    pub body: Vec<u8>,
}

impl PodResponse {
    /// A header value (case-insensitive name).
    pub fn header(&self, name: &str) -> Option<&str> {
        find_header(&self.headers, name)
    }
}

fn find_header<'a>(headers: &'a [(String, String)], name: &str) -> Option<&'a str> {
    headers
        .iter()
        .find(|(k, _)| k.eq_ignore_ascii_case(name))
        .map(|(_, v)| v.as_str())
}

/// Cuts a stream from another thread: the reader's next (or current)
/// read ends. Cheap to clone; cancelling twice is harmless.
#[derive(Clone)]
pub struct StreamCanceller(Arc<dyn Fn() + Send + Sync>);

impl StreamCanceller {
    pub fn new(f: impl Fn() + Send + Sync + 'static) -> StreamCanceller {
        StreamCanceller(Arc::new(f))
    }

    pub fn cancel(&self) {
        (self.0)()
    }
}

impl fmt::Debug for StreamCanceller {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("StreamCanceller")
    }
}

/// A 2xx answer whose body is read as it arrives.
pub struct StreamHandle {
    pub status: u16,
    pub headers: Vec<(String, String)>,
    body: Box<dyn Read + Send>,
    canceller: StreamCanceller,
}

impl fmt::Debug for StreamHandle {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("StreamHandle")
            .field("status", &self.status)
            .field("headers", &self.headers)
            .finish_non_exhaustive()
    }
}

impl StreamHandle {
    pub fn header(&self, name: &str) -> Option<&str> {
        find_header(&self.headers, name)
    }

    pub fn canceller(&self) -> StreamCanceller {
        self.canceller.clone()
    }
}

impl Read for StreamHandle {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        self.body.read(buf)
    }
}

/// A response body a poll(2) loop reads: `read` never blocks (no data
/// yet is `WouldBlock`), `fd` is what to wait on.
pub trait PollBody: Read + Send {
    fn fd(&self) -> BorrowedFd<'_>;
    /// Bytes are readable without the socket becoming readable (decrypted
    /// TLS plaintext, bytes read with the head): read before waiting.
    fn has_buffered_input(&self) -> bool;
}

/// A 2xx answer whose body a poll loop reads ([`PodAccess::stream_polled`]).
pub struct PolledStream {
    pub status: u16,
    pub headers: Vec<(String, String)>,
    pub body: Box<dyn PollBody>,
}

impl fmt::Debug for PolledStream {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("PolledStream")
            .field("status", &self.status)
            .field("headers", &self.headers)
            .finish_non_exhaustive()
    }
}

/// A WebSocket opened to a pod's port ([`PodAccess::websocket`]).
pub struct PodWebSocket {
    pub ws: WebSocket<ClientSocket>,
    /// The subprotocol the app chose, if any.
    pub protocol: Option<String>,
}

impl fmt::Debug for PodWebSocket {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("PodWebSocket")
            .field("protocol", &self.protocol)
            .finish_non_exhaustive()
    }
}

/// Why a call to a pod's port got no usable answer.
#[derive(Debug)]
pub enum AccessError {
    /// Nothing accepts connections on the port (yet).
    Refused { message: String },
    /// The pod could not be reached for another reason (no route, no IP
    /// yet, the API server's dial failed).
    Unreachable { message: String },
    /// No answer (or not all of it) within the timeout.
    Timeout { message: String },
    /// The answer is not usable HTTP (malformed, cut short).
    Http { message: String },
    /// The body is longer than the caller's bound.
    TooLarge { limit: usize },
    /// A stream was answered with a non-2xx status (its body, bounded).
    Status { status: u16, body: String },
    /// The API server's own failure (pod not found, 401/403, transport).
    Kube(KubeError),
    /// The call itself is unusable (bad IP, header, path).
    Invalid(String),
}

impl AccessError {
    /// Nothing listens, or the pod cannot be reached: worth retrying while
    /// a pod starts.
    pub fn is_not_reachable(&self) -> bool {
        matches!(
            self,
            AccessError::Refused { .. } | AccessError::Unreachable { .. }
        )
    }
}

impl fmt::Display for AccessError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            AccessError::Refused { message } => {
                write!(f, "the pod refused the connection: {message}")
            }
            AccessError::Unreachable { message } => write!(f, "the pod is unreachable: {message}"),
            AccessError::Timeout { message } => write!(f, "timed out: {message}"),
            AccessError::Http { message } => write!(f, "bad HTTP answer from the pod: {message}"),
            AccessError::TooLarge { limit } => {
                write!(f, "the pod's answer is larger than {limit} bytes")
            }
            AccessError::Status { status, body } => {
                write!(f, "the pod answered {status}")?;
                if !body.is_empty() {
                    write!(f, ": {body}")?;
                }
                Ok(())
            }
            AccessError::Kube(e) => write!(f, "the API server: {e}"),
            AccessError::Invalid(m) => write!(f, "invalid pod request: {m}"),
        }
    }
}

impl std::error::Error for AccessError {}

/// A failed WebSocket open (`kube::remote`'s dial and handshake) as the
/// seam's error.
fn from_remote(e: RemoteError) -> AccessError {
    match e {
        RemoteError::InvalidRequest(m) => AccessError::Invalid(m),
        RemoteError::Credentials(e) => AccessError::Kube(KubeError::Credentials(e.to_string())),
        RemoteError::Tls(e) => AccessError::Kube(KubeError::Config(format!("TLS: {e}"))),
        RemoteError::Transport(message) if api_proxy::is_timeout_message(&message) => {
            AccessError::Timeout { message }
        }
        RemoteError::Transport(message) => AccessError::Unreachable { message },
        e => AccessError::Http {
            message: e.to_string(),
        },
    }
}

/// The WebSocket subprotocols `req` offers (its `Sec-WebSocket-Protocol`)
/// and its other headers, less the ones the handshake writes itself.
fn websocket_headers(req: &PodRequest) -> (Option<&str>, Vec<(String, String)>) {
    let offer = find_header(&req.headers, "sec-websocket-protocol");
    let headers = req
        .headers
        .iter()
        .filter(|(k, _)| !crate::http::ws::is_handshake_header(&k.to_ascii_lowercase()))
        .cloned()
        .collect();
    (offer, headers)
}

/// What the seam's calls return: an [`AccessError`] unless said otherwise.
pub type Result<T, E = AccessError> = std::result::Result<T, E>;

/// The seam. Implementations are cheap to share across threads.
pub trait PodAccess: Send + Sync {
    /// Which implementation this is.
    fn mode(&self) -> PodAccessMode;

    /// One request; the app's answer with its whole body (bounded).
    fn request(&self, t: &PodTarget, port: u16, req: &PodRequest) -> Result<PodResponse>;

    /// `req` (a GET of server-sent events, usually) with its 2xx body read
    /// incrementally. The head must arrive within `req.timeout`, then each
    /// read within it (a read past it fails with `TimedOut`). A non-2xx
    /// answer is [`AccessError::Status`].
    fn stream(&self, t: &PodTarget, port: u16, req: &PodRequest) -> Result<StreamHandle>;

    /// `req` (any method, with its body) with the answer's body as a
    /// stream, WHATEVER its status (the app's errors are its answer: the
    /// port proxy route passes them on); `AccessError` only when there is
    /// no answer from the app. `req.timeout` bounds the wait for the
    /// answer's head, `req.idle` each read of the body after it.
    fn open(&self, t: &PodTarget, port: u16, req: &PodRequest) -> Result<StreamHandle>;

    /// `req` (a GET) like [`PodAccess::stream`], with the answer's body
    /// for a poll(2) loop instead of a blocking reader: the debug relays'
    /// one reader thread waits on every open stream at once. A non-2xx
    /// answer is an error. `req.timeout` bounds the connect and the
    /// answer's head.
    fn stream_polled(&self, t: &PodTarget, port: u16, req: &PodRequest) -> Result<PolledStream>;

    /// A WebSocket to `req.path` (the client handshake, a GET): the
    /// subprotocols offered are `req`'s `Sec-WebSocket-Protocol` header,
    /// its other handshake headers are dropped (the handshake writes its
    /// own), the rest go as given. `req.timeout` bounds the connect and the
    /// handshake; the socket then has no timeouts (its pump takes over). An
    /// app that answers without upgrading is [`AccessError::Http`].
    fn websocket(&self, t: &PodTarget, port: u16, req: &PodRequest) -> Result<PodWebSocket>;

    /// A TCP connection to the pod's port, for a tunnel
    /// (docs/api.md#tunnels): `direct` connects to `podIP:port`,
    /// `api-proxy` opens the API server's `pods/portforward`. `timeout`
    /// bounds the connect (and the port-forward's set-up); the
    /// connection then has no deadline (the tunnel keeps its own clocks).
    fn tunnel(&self, t: &PodTarget, port: u16, timeout: Duration) -> Result<Duplex>;

    /// Whether the port accepts connections. `Ok(false)` when it refuses,
    /// cannot be reached, or gives no sign within `timeout`; errors are
    /// failures to ask (the pod does not exist, the API server refuses).
    fn probe_tcp(&self, t: &PodTarget, port: u16, timeout: Duration) -> Result<bool>;

    /// The same access, reaching pods through `client` where it goes
    /// through the API server at all (`api-proxy`); `direct` dials pod IPs
    /// and has no client to swap. For the principal's own calls under
    /// `[cluster] impersonate` (a Deployment tunnel).
    fn with_client(&self, client: &Client) -> Arc<dyn PodAccess>;
}

/// The implementation `[cluster] pod_access` names.
pub fn from_config(mode: PodAccessMode, client: &Client) -> Arc<dyn PodAccess> {
    match mode {
        PodAccessMode::ApiProxy => Arc::new(api_proxy::ApiProxyAccess::new(client.clone())),
        PodAccessMode::Direct => Arc::new(direct::DirectAccess::new()),
    }
}
