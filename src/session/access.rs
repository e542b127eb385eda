//! The pod-access seam (sessions.md "Reaching the pod"): every connection
//! from the daemon to a session pod's ports — the workspace agent, the
//! debug streams, reachability, the port proxy — goes through a
//! [`PodAccess`], picked by `[cluster] pod_access`:
//!
//! - [`ApiProxyAccess`] (`api-proxy`): through the API server's pod proxy,
//!   `/api/v1/namespaces/{ns}/pods/{pod}:{port}/proxy/{path}`
//!   (`kube::client::Client::pod_proxy`). Works from outside the pod
//!   network. The API server authenticates the daemon and drops the
//!   `Authorization` header before proxying, so a credential for the pod
//!   must travel in another header (the agent's `X-Kubegate-Agent-Token`);
//!   an `Authorization` header given here is refused, never sent.
//! - [`DirectAccess`] (`direct`): TCP to `podIP:port` with a small blocking
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
//! Threads: none. Every call runs on its caller's thread; a stream is read
//! by one thread and can be cut from another with its [`StreamCanceller`].

use crate::config::PodAccess as PodAccessMode;
use crate::http::endpoint::parse_server;
use crate::http::parse::ChunkedDecoder;
use crate::http::stream::{ClientSocket, PollStream};
use crate::http::HttpError;
use crate::kube::client::{Client, KubeError, ProxyError, ProxyRequest};
use crate::kube::remote::connect as raw;
use parking_lot::Mutex;
use std::fmt;
use std::io::{self, Read, Write};
use std::net::{IpAddr, Shutdown, SocketAddr, TcpStream};
use std::os::fd::BorrowedFd;
use std::sync::Arc;
use std::time::{Duration, Instant};
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

/// A non-blocking socket under a [`BodyReader`]: reads pass through,
/// `WouldBlock` included.
struct Nb<S>(S);

impl<S: Read> Read for Nb<S> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        self.0.read(buf)
    }
}

impl<S: PollStream + 'static> PollBody for BodyReader<Nb<S>> {
    fn fd(&self) -> BorrowedFd<'_> {
        self.src.0.as_fd()
    }
    fn has_buffered_input(&self) -> bool {
        self.pos < self.leftover.len()
            || self.out_pos < self.out.len()
            || self.src.0.has_buffered_input()
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

/// The seam. Implementations are cheap to share across threads.
pub trait PodAccess: Send + Sync {
    /// Which implementation this is.
    fn mode(&self) -> PodAccessMode;

    /// One request; the app's answer with its whole body (bounded).
    fn request(
        &self,
        t: &PodTarget,
        port: u16,
        req: &PodRequest,
    ) -> Result<PodResponse, AccessError>;

    /// A GET whose 2xx body is read incrementally (server-sent events).
    /// The head must arrive within `idle`, then each read within `idle`
    /// (a read past it fails with `TimedOut`). A non-2xx answer is
    /// [`AccessError::Status`].
    fn stream(
        &self,
        t: &PodTarget,
        port: u16,
        path: &str,
        headers: &[(String, String)],
        idle: Duration,
    ) -> Result<StreamHandle, AccessError>;

    /// `req` (any method, with its body) with the answer's body as a
    /// stream, WHATEVER its status (the app's errors are its answer: the
    /// port proxy route passes them on); `AccessError` only when there is
    /// no answer from the app. `req.timeout` bounds the wait for the
    /// answer's head, `idle` each read of the body after it.
    fn open(
        &self,
        t: &PodTarget,
        port: u16,
        req: &PodRequest,
        idle: Duration,
    ) -> Result<StreamHandle, AccessError>;

    /// `GET path` like [`PodAccess::stream`], with the answer's body for a
    /// poll(2) loop instead of a blocking reader: the debug relays' one
    /// reader thread waits on every open stream at once. A non-2xx answer
    /// is an error. `timeout` bounds the connect and the answer's head.
    fn stream_polled(
        &self,
        t: &PodTarget,
        port: u16,
        path: &str,
        headers: &[(String, String)],
        timeout: Duration,
    ) -> Result<PolledStream, AccessError>;

    /// Whether the port accepts connections. `Ok(false)` when it refuses,
    /// cannot be reached, or gives no sign within `timeout`; errors are
    /// failures to ask (the pod does not exist, the API server refuses).
    fn probe_tcp(&self, t: &PodTarget, port: u16, timeout: Duration) -> Result<bool, AccessError>;
}

/// The implementation `[cluster] pod_access` names.
pub fn from_config(mode: PodAccessMode, client: &Client) -> Arc<dyn PodAccess> {
    match mode {
        PodAccessMode::ApiProxy => Arc::new(ApiProxyAccess::new(client.clone())),
        PodAccessMode::Direct => Arc::new(DirectAccess::new()),
    }
}

// ------------------------------------------------------------- api-proxy

/// Through the API server's pod proxy.
#[derive(Clone)]
pub struct ApiProxyAccess {
    client: Client,
    /// Agents of stream attempts that failed, kept (with their per-read
    /// timeout) for the next attempt: a debug relay retrying every 5 s
    /// then reuses its connection to the API server (and its TLS session)
    /// instead of opening one per attempt. An attempt that opens a stream
    /// takes its agent with it (cutting the stream shuts that agent down).
    spare: Arc<Mutex<Vec<SpareAgent>>>,
    /// Connections to the API server whose polled-stream attempt got a
    /// complete error answer (the app not listening yet): the next attempt
    /// sends its request on one instead of a new connection and TLS
    /// handshake. At most [`SPARE_AGENTS`].
    spare_sockets: Arc<Mutex<Vec<ClientSocket>>>,
}

/// A kept agent and the per-read timeout it was built with.
type SpareAgent = (Option<Duration>, ureq::Agent);

/// Spare stream agents kept at most (each may hold one idle connection).
const SPARE_AGENTS: usize = 4;

impl ApiProxyAccess {
    pub fn new(client: Client) -> ApiProxyAccess {
        ApiProxyAccess {
            client,
            spare: Arc::new(Mutex::new(Vec::new())),
            spare_sockets: Arc::new(Mutex::new(Vec::new())),
        }
    }

    /// [`PodAccess::stream_polled`]: the request written on a raw socket to
    /// the API server (a kept one first; a fresh one if that fails before
    /// any answer), the head read under the deadline, then the socket
    /// switched to non-blocking for the poll loop.
    fn open_polled(
        &self,
        pr: &ProxyRequest,
        timeout: Duration,
    ) -> Result<PolledStream, AccessError> {
        let conn = self.client.connection();
        let ep = parse_server(&conn.server)
            .map_err(|m| AccessError::Kube(KubeError::Config(m.into())))?;
        let deadline = Instant::now() + timeout.max(Duration::from_millis(1));
        let bearer = conn
            .credentials
            .bearer()
            .map_err(|e| AccessError::Kube(KubeError::Credentials(e.to_string())))?;
        let mut req = format!(
            "GET {}{} HTTP/1.1\r\nHost: {}\r\nUser-Agent: {}\r\n",
            ep.prefix,
            pr.url_path(),
            ep.authority,
            crate::kube::client::rest::USER_AGENT
        );
        if let Some(b) = bearer {
            req.push_str(&format!("Authorization: Bearer {b}\r\n"));
        }
        for (k, v) in &pr.headers {
            if !["host", "connection", "content-length", "transfer-encoding"]
                .iter()
                .any(|h| k.eq_ignore_ascii_case(h))
            {
                req.push_str(&format!("{k}: {v}\r\n"));
            }
        }
        req.push_str("\r\n");
        let transport = |what: &str, e: &dyn fmt::Display| {
            AccessError::Kube(KubeError::Transport(format!(
                "{what} {}: {e}",
                ep.authority
            )))
        };
        let kept = self.spare_sockets.lock().pop();
        let (sock, head, rest) = match kept.map(|s| raw_exchange(s, &req, deadline)) {
            Some(Ok(done)) => done,
            // A kept connection the server closed meanwhile: a new one.
            _ => {
                let sock =
                    raw::dial(conn, &ep, deadline).map_err(|e| transport("connecting to", &e))?;
                raw_exchange(sock, &req, deadline).map_err(|e| match e {
                    RawError::Io(e) => transport("asking", &e),
                    RawError::Access(e) => e,
                })?
            }
        };
        if head.status == 401 {
            conn.credentials.invalidate();
        }
        let framing = BodyReader::<Nb<ClientSocket>>::framing(&Method::GET, &head)?;
        if !(200..300).contains(&head.status) {
            let reusable = matches!(framing, Framing::Length(n) if n <= MAX_STATUS_BODY as u64)
                && !find_header(&head.headers, "connection")
                    .is_some_and(|v| v.eq_ignore_ascii_case("close"));
            let mut body = BodyReader::new(TimedClient { sock, deadline }, rest, framing);
            let b = read_bounded(
                &mut (&mut body).take(MAX_STATUS_BODY as u64),
                usize::MAX,
                None,
            )
            .unwrap_or_default();
            if reusable && matches!(body.framing, Framing::Done) {
                let mut spare = self.spare_sockets.lock();
                if spare.len() < SPARE_AGENTS {
                    spare.push(body.src.sock);
                }
            }
            return Err(
                match crate::kube::client::proxy::server_status(head.status, &b) {
                    Some(e) => from_proxy(e),
                    None => AccessError::Status {
                        status: head.status,
                        body: excerpt(&b),
                    },
                },
            );
        }
        sock.set_read_timeout(None)
            .and_then(|()| sock.set_nonblocking(true))
            .map_err(|e| transport("configuring the socket to", &e))?;
        Ok(PolledStream {
            status: head.status,
            headers: head.headers,
            body: Box::new(BodyReader::new(Nb(sock), rest, framing)),
        })
    }

    fn take_agent(&self, read_timeout: Option<Duration>) -> ureq::Agent {
        let mut spare = self.spare.lock();
        match spare.iter().position(|(t, _)| *t == read_timeout) {
            Some(i) => spare.swap_remove(i).1,
            None => {
                drop(spare);
                self.client.proxy_agent(read_timeout)
            }
        }
    }

    fn keep_agent(&self, read_timeout: Option<Duration>, agent: ureq::Agent) {
        let mut spare = self.spare.lock();
        if spare.len() < SPARE_AGENTS {
            spare.push((read_timeout, agent));
        }
    }

    fn proxy_request(
        t: &PodTarget,
        port: u16,
        method: Method,
        path: &str,
        headers: &[(String, String)],
        body: Option<Vec<u8>>,
        per_read: Duration,
    ) -> Result<ProxyRequest, AccessError> {
        check_path(path)?;
        if headers
            .iter()
            .any(|(k, _)| k.eq_ignore_ascii_case("authorization"))
        {
            return Err(AccessError::Invalid(
                "an Authorization header cannot go through the API server's pod proxy \
                 (the API server takes it as its own credential)"
                    .into(),
            ));
        }
        check_headers(headers)?;
        Ok(ProxyRequest {
            method,
            namespace: t.namespace.clone(),
            pod: t.name.clone(),
            port,
            path: path.into(),
            headers: headers.to_vec(),
            body,
            read_timeout: Some(per_read.max(Duration::from_millis(1))),
        })
    }
}

/// A non-2xx answer to a stream request as an error, with an excerpt of
/// its body (read up to [`MAX_STATUS_BODY`]).
fn status_error(status: u16, body: &mut impl Read) -> AccessError {
    let b =
        read_bounded(&mut body.take(MAX_STATUS_BODY as u64), usize::MAX, None).unwrap_or_default();
    AccessError::Status {
        status,
        body: excerpt(&b),
    }
}

/// A transport message that says a timer fired.
fn is_timeout_message(m: &str) -> bool {
    let m = m.to_ascii_lowercase();
    m.contains("timeout") || m.contains("timed out")
}

fn from_proxy(e: ProxyError) -> AccessError {
    match e {
        ProxyError::ConnectionRefused { message } => AccessError::Refused { message },
        ProxyError::Unreachable(s) => AccessError::Unreachable { message: s.message },
        ProxyError::Kube(KubeError::Transport(m)) if is_timeout_message(&m) => {
            AccessError::Timeout { message: m }
        }
        ProxyError::Kube(e) => AccessError::Kube(e),
    }
}

fn from_read_error(e: io::Error, what: &str) -> AccessError {
    match e.kind() {
        io::ErrorKind::TimedOut | io::ErrorKind::WouldBlock => AccessError::Timeout {
            message: format!("{what}: {e}"),
        },
        _ if is_timeout_message(&e.to_string()) => AccessError::Timeout {
            message: format!("{what}: {e}"),
        },
        _ => AccessError::Http {
            message: format!("{what}: {e}"),
        },
    }
}

/// Reads `r` to its end: at most `max` bytes, and (when given) not past
/// `deadline`, checked between reads.
fn read_bounded(
    r: &mut dyn Read,
    max: usize,
    deadline: Option<Instant>,
) -> Result<Vec<u8>, AccessError> {
    let mut out = Vec::new();
    let mut buf = vec![0u8; 16 * 1024];
    loop {
        if deadline.is_some_and(|d| Instant::now() >= d) {
            return Err(AccessError::Timeout {
                message: "reading the body".into(),
            });
        }
        let n = match r.read(&mut buf) {
            Ok(n) => n,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
            Err(e) => return Err(from_read_error(e, "reading the body")),
        };
        if n == 0 {
            return Ok(out);
        }
        if out.len() + n > max {
            return Err(AccessError::TooLarge { limit: max });
        }
        out.extend_from_slice(&buf[..n]);
    }
}

/// A short, printable excerpt of an error body.
fn excerpt(body: &[u8]) -> String {
    let s = String::from_utf8_lossy(body);
    s.trim().chars().take(512).collect()
}

impl PodAccess for ApiProxyAccess {
    fn mode(&self) -> PodAccessMode {
        PodAccessMode::ApiProxy
    }

    fn request(
        &self,
        t: &PodTarget,
        port: u16,
        req: &PodRequest,
    ) -> Result<PodResponse, AccessError> {
        let deadline = Instant::now() + req.timeout;
        let pr = Self::proxy_request(
            t,
            port,
            req.method.clone(),
            &req.path,
            &req.headers,
            req.body.clone(),
            req.timeout,
        )?;
        let mut resp = self.client.pod_proxy(&pr).map_err(from_proxy)?;
        let body = read_bounded(&mut resp, req.max_response_bytes, Some(deadline))?;
        Ok(PodResponse {
            status: resp.status,
            headers: resp.headers.clone(),
            body,
        })
    }

    fn stream(
        &self,
        t: &PodTarget,
        port: u16,
        path: &str,
        headers: &[(String, String)],
        idle: Duration,
    ) -> Result<StreamHandle, AccessError> {
        let pr = Self::proxy_request(t, port, Method::GET, path, headers, None, idle)?;
        let agent = self.take_agent(pr.read_timeout);
        let mut resp = match self.client.pod_proxy_on(agent, &pr) {
            Ok(r) => r,
            Err((e, agent)) => {
                self.keep_agent(pr.read_timeout, agent);
                return Err(from_proxy(e));
            }
        };
        if !(200..300).contains(&resp.status) {
            let err = status_error(resp.status, &mut resp);
            self.keep_agent(pr.read_timeout, resp.into_agent());
            return Err(err);
        }
        let cancel = resp.canceller();
        Ok(StreamHandle {
            status: resp.status,
            headers: resp.headers.clone(),
            body: Box::new(resp),
            canceller: StreamCanceller(Arc::new(move || cancel.clone().cancel())),
        })
    }

    fn stream_polled(
        &self,
        t: &PodTarget,
        port: u16,
        path: &str,
        headers: &[(String, String)],
        timeout: Duration,
    ) -> Result<PolledStream, AccessError> {
        let pr = Self::proxy_request(t, port, Method::GET, path, headers, None, timeout)?;
        self.open_polled(&pr, timeout)
    }

    fn open(
        &self,
        t: &PodTarget,
        port: u16,
        req: &PodRequest,
        idle: Duration,
    ) -> Result<StreamHandle, AccessError> {
        let pr = Self::proxy_request(
            t,
            port,
            req.method.clone(),
            &req.path,
            &req.headers,
            req.body.clone(),
            idle,
        )?;
        let resp = self.client.pod_proxy(&pr).map_err(from_proxy)?;
        let cancel = resp.canceller();
        Ok(StreamHandle {
            status: resp.status,
            headers: resp.headers.clone(),
            body: Box::new(resp),
            canceller: StreamCanceller(Arc::new(move || cancel.clone().cancel())),
        })
    }

    /// A GET of `/` through the proxy: any answer means the port accepted
    /// the connection. The API server tells a refused port (503 Status,
    /// "connection refused") and a failed dial ("dial tcp …") apart from
    /// failures after connecting (an app that closes without answering
    /// HTTP is listening). An app that accepts but stays silent past
    /// `timeout` counts as not reachable yet: through the proxy it cannot
    /// be told from a dial still in progress.
    fn probe_tcp(&self, t: &PodTarget, port: u16, timeout: Duration) -> Result<bool, AccessError> {
        let pr = Self::proxy_request(t, port, Method::GET, "/", &[], None, timeout)?;
        match self.client.pod_proxy(&pr).map_err(from_proxy) {
            Ok(resp) => {
                // Cut it at once: the body is not wanted.
                resp.canceller().cancel();
                Ok(true)
            }
            Err(AccessError::Refused { .. }) | Err(AccessError::Timeout { .. }) => Ok(false),
            Err(AccessError::Unreachable { message }) => Ok(!message.contains("dial tcp")),
            // The API server cannot proxy to the pod yet (no IP).
            Err(AccessError::Kube(KubeError::Server { code: 503, .. })) => Ok(false),
            Err(e) => Err(e),
        }
    }
}

// ---------------------------------------------------------------- direct

/// TCP to `podIP:port`.
#[derive(Debug, Clone, Default)]
pub struct DirectAccess {}

impl DirectAccess {
    pub fn new() -> DirectAccess {
        DirectAccess {}
    }
}

fn socket_addr(t: &PodTarget, port: u16) -> Result<SocketAddr, AccessError> {
    let ip: IpAddr =
        t.ip.parse()
            .map_err(|_| AccessError::Invalid(format!("pod {}: IP address {:?}", t.name, t.ip)))?;
    Ok(SocketAddr::new(ip, port))
}

fn check_path(path: &str) -> Result<(), AccessError> {
    if !path.starts_with('/') || path.bytes().any(|b| b <= b' ' || b == 0x7f) {
        return Err(AccessError::Invalid(format!(
            "path {path:?}: expected an absolute path without spaces or control characters"
        )));
    }
    Ok(())
}

fn check_headers(headers: &[(String, String)]) -> Result<(), AccessError> {
    for (k, v) in headers {
        let name_ok = !k.is_empty()
            && k.bytes()
                .all(|b| b.is_ascii_alphanumeric() || b"!#$%&'*+-.^_`|~".contains(&b));
        let value_ok = v.bytes().all(|b| b == b'\t' || (b >= b' ' && b != 0x7f));
        if !name_ok || !value_ok {
            return Err(AccessError::Invalid(format!(
                "header {k:?}: not a valid header"
            )));
        }
    }
    Ok(())
}

/// Connects within `timeout`.
fn connect(addr: SocketAddr, timeout: Duration) -> Result<TcpStream, AccessError> {
    let timeout = timeout.max(Duration::from_millis(1));
    match TcpStream::connect_timeout(&addr, timeout) {
        Ok(s) => {
            let _ = s.set_nodelay(true);
            Ok(s)
        }
        Err(e) => Err(match e.kind() {
            io::ErrorKind::ConnectionRefused => AccessError::Refused {
                message: format!("connect {addr}: connection refused"),
            },
            io::ErrorKind::TimedOut | io::ErrorKind::WouldBlock => AccessError::Timeout {
                message: format!("connect {addr}: no answer within {timeout:?}"),
            },
            _ => AccessError::Unreachable {
                message: format!("connect {addr}: {e}"),
            },
        }),
    }
}

/// A socket whose reads are bounded by a deadline (whole call) and/or an
/// idle time (each read); either may be absent.
struct TimedSocket {
    sock: TcpStream,
    deadline: Option<Instant>,
    idle: Option<Duration>,
}

impl Read for TimedSocket {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        let left = self
            .deadline
            .map(|d| d.saturating_duration_since(Instant::now()));
        if left == Some(Duration::ZERO) {
            return Err(io::Error::new(io::ErrorKind::TimedOut, "deadline passed"));
        }
        let wait = match (left, self.idle) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        };
        self.sock.set_read_timeout(wait)?;
        match self.sock.read(buf) {
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                Err(io::Error::new(io::ErrorKind::TimedOut, "no data in time"))
            }
            r => r,
        }
    }
}

/// A [`ClientSocket`] read with socket timeouts from a deadline (a
/// missed deadline is `TimedOut`).
struct TimedClient {
    sock: ClientSocket,
    deadline: Instant,
}

impl Read for TimedClient {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        let left = self.deadline.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return Err(io::Error::new(io::ErrorKind::TimedOut, "deadline passed"));
        }
        self.sock.set_read_timeout(Some(left))?;
        match self.sock.read(buf) {
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                Err(io::Error::new(io::ErrorKind::TimedOut, "no data in time"))
            }
            r => r,
        }
    }
}

enum RawError {
    /// Nothing came back: the request may not have reached the server.
    Io(io::Error),
    Access(AccessError),
}

/// Writes `req` on `sock` and reads the answer's head before `deadline`.
fn raw_exchange(
    mut sock: ClientSocket,
    req: &str,
    deadline: Instant,
) -> Result<(ClientSocket, Head, Vec<u8>), RawError> {
    raw::write_all(&mut sock, req.as_bytes(), deadline).map_err(RawError::Io)?;
    let mut timed = TimedClient { sock, deadline };
    let (head, rest) = read_head(&mut timed).map_err(RawError::Access)?;
    Ok((timed.sock, head, rest))
}

/// A parsed response head.
#[derive(Debug)]
struct Head {
    status: u16,
    headers: Vec<(String, String)>,
}

/// Reads a response head (skipping interim 1xx answers); returns it and
/// the bytes read past it.
fn read_head(r: &mut dyn Read) -> Result<(Head, Vec<u8>), AccessError> {
    let mut buf: Vec<u8> = Vec::new();
    let mut chunk = [0u8; 8 * 1024];
    loop {
        // Parse what there is before reading more (leftover after a 1xx).
        if !buf.is_empty() {
            let mut hs = [httparse::EMPTY_HEADER; 96];
            let mut resp = httparse::Response::new(&mut hs);
            match resp.parse(&buf) {
                Ok(httparse::Status::Complete(n)) => {
                    let status = resp.code.unwrap_or(0);
                    let headers = resp
                        .headers
                        .iter()
                        .map(|h| {
                            (
                                h.name.to_string(),
                                String::from_utf8_lossy(h.value).trim().to_string(),
                            )
                        })
                        .collect();
                    let rest = buf.split_off(n);
                    if (100..200).contains(&status) && status != 101 {
                        buf = rest;
                        continue;
                    }
                    return Ok((Head { status, headers }, rest));
                }
                Ok(httparse::Status::Partial) => {}
                Err(e) => {
                    return Err(AccessError::Http {
                        message: format!("malformed response head: {e}"),
                    })
                }
            }
        }
        if buf.len() > MAX_HEAD_BYTES {
            return Err(AccessError::Http {
                message: format!("response head larger than {MAX_HEAD_BYTES} bytes"),
            });
        }
        let n = match r.read(&mut chunk) {
            Ok(n) => n,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
            Err(e) => return Err(from_read_error(e, "waiting for the response head")),
        };
        if n == 0 {
            return Err(AccessError::Http {
                message: "the connection closed before a complete response head".into(),
            });
        }
        buf.extend_from_slice(&chunk[..n]);
    }
}

enum Framing {
    /// Bytes still to come.
    Length(u64),
    Chunked(Box<ChunkedDecoder>),
    /// Until the connection closes.
    Close,
    Done,
}

/// The body of a response, de-framed, as a `Read`.
struct BodyReader<R> {
    src: R,
    /// Bytes read with the head, consumed before `src`.
    leftover: Vec<u8>,
    pos: usize,
    framing: Framing,
    /// Decoded bytes not yet handed out (chunked).
    out: Vec<u8>,
    out_pos: usize,
}

impl<R: Read> BodyReader<R> {
    fn new(src: R, leftover: Vec<u8>, framing: Framing) -> BodyReader<R> {
        BodyReader {
            src,
            leftover,
            pos: 0,
            framing,
            out: Vec::new(),
            out_pos: 0,
        }
    }

    /// The framing a response head announces (RFC 9112 section 6.3).
    fn framing(method: &Method, head: &Head) -> Result<Framing, AccessError> {
        if *method == Method::HEAD || head.status == 204 || head.status == 304 {
            return Ok(Framing::Done);
        }
        if let Some(te) = find_header(&head.headers, "transfer-encoding") {
            let last = te.rsplit(',').next().unwrap_or("").trim();
            return Ok(if last.eq_ignore_ascii_case("chunked") {
                Framing::Chunked(Box::new(ChunkedDecoder::new(usize::MAX, 16 * 1024)))
            } else {
                Framing::Close
            });
        }
        let lengths: Vec<&str> = head
            .headers
            .iter()
            .filter(|(k, _)| k.eq_ignore_ascii_case("content-length"))
            .map(|(_, v)| v.as_str())
            .collect();
        match lengths.first() {
            None => Ok(Framing::Close),
            Some(first) => {
                let n: u64 = first
                    .parse()
                    .ok()
                    .filter(|_| lengths.iter().all(|l| l == first))
                    .ok_or_else(|| AccessError::Http {
                        message: format!("bad Content-Length {lengths:?}"),
                    })?;
                Ok(if n == 0 {
                    Framing::Done
                } else {
                    Framing::Length(n)
                })
            }
        }
    }

    /// Raw bytes: the leftover first, then the socket.
    fn fill(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        if self.pos < self.leftover.len() {
            let n = buf.len().min(self.leftover.len() - self.pos);
            buf[..n].copy_from_slice(&self.leftover[self.pos..self.pos + n]);
            self.pos += n;
            return Ok(n);
        }
        self.src.read(buf)
    }
}

fn cut_short() -> io::Error {
    io::Error::new(
        io::ErrorKind::UnexpectedEof,
        "the connection closed inside the body",
    )
}

impl<R: Read> Read for BodyReader<R> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        if buf.is_empty() {
            return Ok(0);
        }
        loop {
            if self.out_pos < self.out.len() {
                let n = buf.len().min(self.out.len() - self.out_pos);
                buf[..n].copy_from_slice(&self.out[self.out_pos..self.out_pos + n]);
                self.out_pos += n;
                return Ok(n);
            }
            match self.framing {
                Framing::Done => return Ok(0),
                Framing::Close => return self.fill(buf),
                Framing::Length(left) => {
                    let want = buf.len().min(usize::try_from(left).unwrap_or(usize::MAX));
                    let n = self.fill(&mut buf[..want])?;
                    if n == 0 {
                        return Err(cut_short());
                    }
                    let left = left - n as u64;
                    self.framing = if left == 0 {
                        Framing::Done
                    } else {
                        Framing::Length(left)
                    };
                    return Ok(n);
                }
                Framing::Chunked(_) => {
                    let mut raw = [0u8; 16 * 1024];
                    let n = self.fill(&mut raw)?;
                    if n == 0 {
                        return Err(cut_short());
                    }
                    self.out.clear();
                    self.out_pos = 0;
                    let Framing::Chunked(dec) = &mut self.framing else {
                        continue;
                    };
                    dec.feed(&raw[..n], &mut self.out).map_err(|e| {
                        let m = match e {
                            HttpError::BadRequest(m) => m,
                            other => format!("{other:?}"),
                        };
                        io::Error::new(io::ErrorKind::InvalidData, format!("chunked body: {m}"))
                    })?;
                    if dec.is_done() {
                        self.framing = Framing::Done;
                    }
                }
            }
        }
    }
}

impl DirectAccess {
    /// Connects, writes the request, reads the head. Returns the head,
    /// the body reader (deadline still armed) and a handle on the socket.
    fn exchange(
        &self,
        t: &PodTarget,
        port: u16,
        req: &PodRequest,
        deadline: Instant,
    ) -> Result<(Head, BodyReader<TimedSocket>, TcpStream), AccessError> {
        let (method, path, headers) = (&req.method, req.path.as_str(), &req.headers);
        check_path(path)?;
        check_headers(headers)?;
        let addr = socket_addr(t, port)?;
        let sock = connect(addr, deadline.saturating_duration_since(Instant::now()))?;
        let handle = sock.try_clone().map_err(|e| AccessError::Unreachable {
            message: format!("{addr}: {e}"),
        })?;
        let mut head = format!("{method} {path} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n");
        for (k, v) in headers {
            if k.eq_ignore_ascii_case("host")
                || k.eq_ignore_ascii_case("connection")
                || k.eq_ignore_ascii_case("content-length")
                || k.eq_ignore_ascii_case("transfer-encoding")
            {
                continue;
            }
            head.push_str(&format!("{k}: {v}\r\n"));
        }
        let body = req.body.as_deref().unwrap_or_default();
        if !body.is_empty() || *method == Method::POST || *method == Method::PUT {
            head.push_str(&format!("Content-Length: {}\r\n", body.len()));
        }
        head.push_str("\r\n");
        let left = deadline.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return Err(AccessError::Timeout {
                message: format!("{addr}: before the request was sent"),
            });
        }
        let _ = sock.set_write_timeout(Some(left));
        let mut w = &sock;
        if let Err(e) = w.write_all(head.as_bytes()).and_then(|_| w.write_all(body)) {
            return Err(match e.kind() {
                io::ErrorKind::TimedOut | io::ErrorKind::WouldBlock => AccessError::Timeout {
                    message: format!("{addr}: sending the request"),
                },
                _ => AccessError::Http {
                    message: format!("{addr}: sending the request: {e}"),
                },
            });
        }
        let mut timed = TimedSocket {
            sock,
            deadline: Some(deadline),
            idle: None,
        };
        let (head, rest) = read_head(&mut timed)?;
        let framing = BodyReader::<TimedSocket>::framing(method, &head)?;
        Ok((head, BodyReader::new(timed, rest, framing), handle))
    }
}

impl PodAccess for DirectAccess {
    fn mode(&self) -> PodAccessMode {
        PodAccessMode::Direct
    }

    fn request(
        &self,
        t: &PodTarget,
        port: u16,
        req: &PodRequest,
    ) -> Result<PodResponse, AccessError> {
        let deadline = Instant::now() + req.timeout;
        let (head, mut body, _sock) = self.exchange(t, port, req, deadline)?;
        let body = read_bounded(&mut body, req.max_response_bytes, None)?;
        Ok(PodResponse {
            status: head.status,
            headers: head.headers,
            body,
        })
    }

    fn stream(
        &self,
        t: &PodTarget,
        port: u16,
        path: &str,
        headers: &[(String, String)],
        idle: Duration,
    ) -> Result<StreamHandle, AccessError> {
        let req = PodRequest {
            headers: headers.to_vec(),
            timeout: idle,
            ..PodRequest::get(path)
        };
        let mut s = self.open(t, port, &req, idle)?;
        if !(200..300).contains(&s.status) {
            return Err(status_error(s.status, &mut s));
        }
        Ok(s)
    }

    fn stream_polled(
        &self,
        t: &PodTarget,
        port: u16,
        path: &str,
        headers: &[(String, String)],
        timeout: Duration,
    ) -> Result<PolledStream, AccessError> {
        let req = PodRequest {
            headers: headers.to_vec(),
            timeout,
            ..PodRequest::get(path)
        };
        let deadline = Instant::now() + timeout.max(Duration::from_millis(1));
        let (head, mut body, sock) = self.exchange(t, port, &req, deadline)?;
        if !(200..300).contains(&head.status) {
            return Err(status_error(head.status, &mut body));
        }
        sock.set_nonblocking(true)
            .map_err(|e| AccessError::Unreachable {
                message: format!("configuring the socket: {e}"),
            })?;
        // Nothing of the body was read yet: what came with the head, and
        // the framing, move to the non-blocking reader.
        let BodyReader {
            leftover,
            pos,
            framing,
            ..
        } = body;
        Ok(PolledStream {
            status: head.status,
            headers: head.headers,
            body: Box::new(BodyReader::new(Nb(sock), leftover[pos..].to_vec(), framing)),
        })
    }

    fn open(
        &self,
        t: &PodTarget,
        port: u16,
        req: &PodRequest,
        idle: Duration,
    ) -> Result<StreamHandle, AccessError> {
        let deadline = Instant::now() + req.timeout.max(Duration::from_millis(1));
        let (head, mut body, sock) = self.exchange(t, port, req, deadline)?;
        body.src.deadline = None;
        body.src.idle = Some(idle.max(Duration::from_millis(1)));
        Ok(StreamHandle {
            status: head.status,
            headers: head.headers,
            body: Box::new(body),
            canceller: StreamCanceller(Arc::new(move || {
                let _ = sock.shutdown(Shutdown::Both);
            })),
        })
    }

    fn probe_tcp(&self, t: &PodTarget, port: u16, timeout: Duration) -> Result<bool, AccessError> {
        let addr = socket_addr(t, port)?;
        match connect(addr, timeout) {
            Ok(s) => {
                let _ = s.shutdown(Shutdown::Both);
                Ok(true)
            }
            Err(AccessError::Refused { .. })
            | Err(AccessError::Timeout { .. })
            | Err(AccessError::Unreachable { .. }) => Ok(false),
            Err(e) => Err(e),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::{BufRead, BufReader};
    use std::net::TcpListener;
    use std::sync::mpsc;

    /// A one-connection server: reads the request head (and a body of
    /// `Content-Length`), hands it over, then writes `parts`, waiting for
    /// a go from `gates` before each part after the first.
    fn serve(parts: Vec<Vec<u8>>) -> (PodTarget, u16, mpsc::Receiver<String>, mpsc::Sender<()>) {
        let l = TcpListener::bind("127.0.0.1:0").unwrap();
        let port = l.local_addr().unwrap().port();
        let (req_tx, req_rx) = mpsc::channel();
        let (gate_tx, gate_rx) = mpsc::channel::<()>();
        std::thread::spawn(move || {
            let (s, _) = l.accept().unwrap();
            let mut r = BufReader::new(s.try_clone().unwrap());
            let mut head = String::new();
            let mut len = 0usize;
            loop {
                let mut line = String::new();
                if r.read_line(&mut line).unwrap_or(0) == 0 {
                    break;
                }
                if let Some(v) = line.to_ascii_lowercase().strip_prefix("content-length:") {
                    len = v.trim().parse().unwrap();
                }
                head.push_str(&line);
                if line == "\r\n" {
                    break;
                }
            }
            let mut body = vec![0u8; len];
            r.read_exact(&mut body).unwrap();
            head.push_str(&String::from_utf8_lossy(&body));
            let _ = req_tx.send(head);
            let mut w = &s;
            for (i, p) in parts.iter().enumerate() {
                if i > 0 && gate_rx.recv().is_err() {
                    return;
                }
                if w.write_all(p).is_err() {
                    return;
                }
            }
            // Hold the connection until the client is done.
            let _ = gate_rx.recv();
        });
        (target(), port, req_rx, gate_tx)
    }

    fn target() -> PodTarget {
        PodTarget {
            namespace: "ns".into(),
            name: "p".into(),
            ip: "127.0.0.1".into(),
        }
    }

    fn get(parts: &[&[u8]]) -> Result<PodResponse, AccessError> {
        let (t, p, _rx, _gate) = serve(parts.iter().map(|p| p.to_vec()).collect());
        DirectAccess::new().request(
            &t,
            p,
            &PodRequest::get("/x").timeout(Duration::from_secs(5)),
        )
    }

    #[test]
    fn direct_request_bodies() {
        let r = get(&[b"HTTP/1.1 200 OK\r\nContent-Length: 5\r\nX-A: b\r\n\r\nhello"]).unwrap();
        assert_eq!(
            (r.status, r.body.as_slice(), r.header("x-a")),
            (200, &b"hello"[..], Some("b"))
        );
        // Chunked, with an interim 100 and a trailer.
        let r = get(
            &[b"HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 404 Not Found\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nabc\r\n2;x=y\r\nde\r\n0\r\nT: 1\r\n\r\n"],
        )
        .unwrap();
        assert_eq!((r.status, r.body.as_slice()), (404, &b"abcde"[..]));
        // Until the connection closes.
        let (t, p, _rx, gate) = serve(vec![b"HTTP/1.0 200 OK\r\n\r\nall of it".to_vec()]);
        let h =
            std::thread::spawn(move || DirectAccess::new().request(&t, p, &PodRequest::get("/")));
        drop(gate); // the server closes after writing
        assert_eq!(h.join().unwrap().unwrap().body, b"all of it");
        // 204 has no body even with bytes after it.
        let r = get(&[b"HTTP/1.1 204 No Content\r\n\r\n"]).unwrap();
        assert!(r.body.is_empty());
    }

    #[test]
    fn direct_request_is_sent_as_given() {
        let (t, p, rx, _gate) = serve(vec![
            b"HTTP/1.1 201 Created\r\nContent-Length: 0\r\n\r\n".to_vec()
        ]);
        let r = DirectAccess::new()
            .request(
                &t,
                p,
                &PodRequest::post("/w?a=1", b"{}".to_vec(), "application/json")
                    .header("Authorization", "Bearer t"),
            )
            .unwrap();
        assert_eq!(r.status, 201);
        let req = rx.recv().unwrap();
        assert!(req.starts_with("POST /w?a=1 HTTP/1.1\r\n"), "{req}");
        for want in [
            "Content-Type: application/json\r\n",
            "Authorization: Bearer t\r\n",
            "Content-Length: 2\r\n",
            "Connection: close\r\n",
        ] {
            assert!(req.contains(want), "{want} in {req}");
        }
        assert!(req.ends_with("\r\n\r\n{}"), "{req}");
    }

    #[test]
    fn direct_request_failures() {
        let big = format!(
            "HTTP/1.1 200 OK\r\nContent-Length: 10\r\n\r\n{}",
            "x".repeat(10)
        );
        let (t, p, _rx, _gate) = serve(vec![big.into_bytes()]);
        let e = DirectAccess::new()
            .request(&t, p, &PodRequest::get("/").max_response_bytes(9))
            .unwrap_err();
        assert!(matches!(e, AccessError::TooLarge { limit: 9 }), "{e:?}");
        for bad in [
            &b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n"[..],
            b"NOT HTTP\r\n\r\n",
            b"HTTP/1.1 200 OK\r\nContent-Length: 1\r\nContent-Length: 2\r\n\r\nab",
        ] {
            let e = get(&[bad]).unwrap_err();
            assert!(matches!(e, AccessError::Http { .. }), "{bad:?}: {e:?}");
        }
        // Cut short inside a Content-Length body.
        let (t, p, _rx, gate) = serve(vec![
            b"HTTP/1.1 200 OK\r\nContent-Length: 10\r\n\r\nab".to_vec()
        ]);
        let h =
            std::thread::spawn(move || DirectAccess::new().request(&t, p, &PodRequest::get("/")));
        drop(gate);
        assert!(matches!(h.join().unwrap(), Err(AccessError::Http { .. })));
        // A head that never ends is bounded.
        let mut huge = b"HTTP/1.1 200 OK\r\n".to_vec();
        huge.extend(std::iter::repeat_n(b'a', MAX_HEAD_BYTES + 10));
        assert!(matches!(get(&[&huge]), Err(AccessError::Http { .. })));
        // A silent server: the whole call is bounded by the timeout.
        let (t, p, _rx, _gate) = serve(vec![
            b"HTTP/1.1 200 OK\r\nContent-Length: 10\r\n\r\nab".to_vec()
        ]);
        let t0 = Instant::now();
        let e = DirectAccess::new()
            .request(
                &t,
                p,
                &PodRequest::get("/").timeout(Duration::from_millis(300)),
            )
            .unwrap_err();
        assert!(matches!(e, AccessError::Timeout { .. }), "{e:?}");
        assert!(t0.elapsed() < Duration::from_secs(3));
        // Bad calls never reach the network.
        let d = DirectAccess::new();
        for req in [
            PodRequest::get("no-slash"),
            PodRequest::get("/a b"),
            PodRequest::get("/").header("X", "a\r\nInjected: 1"),
            PodRequest::get("/").header("Bad Name", "v"),
        ] {
            assert!(
                matches!(d.request(&target(), 1, &req), Err(AccessError::Invalid(_))),
                "{req:?}"
            );
        }
        let bad_ip = PodTarget {
            ip: "not-an-ip".into(),
            ..target()
        };
        assert!(matches!(
            d.probe_tcp(&bad_ip, 1, Duration::from_secs(1)),
            Err(AccessError::Invalid(_))
        ));
    }

    #[test]
    fn direct_refused_and_probe() {
        let l = TcpListener::bind("127.0.0.1:0").unwrap();
        let port = l.local_addr().unwrap().port();
        let d = DirectAccess::new();
        assert!(d
            .probe_tcp(&target(), port, Duration::from_secs(1))
            .unwrap());
        drop(l);
        assert!(!d
            .probe_tcp(&target(), port, Duration::from_secs(1))
            .unwrap());
        let e = d
            .request(&target(), port, &PodRequest::get("/"))
            .unwrap_err();
        assert!(
            matches!(e, AccessError::Refused { .. }) && e.is_not_reachable(),
            "{e:?}"
        );
    }

    #[test]
    fn direct_stream_reads_as_it_comes_and_cancels() {
        let (t, p, _rx, gate) = serve(vec![
            b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n6\r\nfirst\n\r\n".to_vec(),
            b"7\r\nsecond\n\r\n".to_vec(),
        ]);
        let mut s = DirectAccess::new()
            .stream(&t, p, "/events", &[], Duration::from_secs(10))
            .unwrap();
        assert_eq!(s.status, 200);
        let mut buf = [0u8; 64];
        let n = s.read(&mut buf).unwrap();
        assert_eq!(&buf[..n], b"first\n");
        gate.send(()).unwrap();
        let n = s.read(&mut buf).unwrap();
        assert_eq!(&buf[..n], b"second\n");
        // Blocked in a read; the canceller ends it from another thread.
        let c = s.canceller();
        let (tx, rx) = mpsc::channel();
        std::thread::spawn(move || {
            let _ = tx.send(s.read(&mut buf).map(|n| n == 0));
        });
        assert!(
            rx.recv_timeout(Duration::from_millis(100)).is_err(),
            "still blocked"
        );
        c.cancel();
        let r = rx
            .recv_timeout(Duration::from_secs(5))
            .expect("the read returned");
        assert!(r.is_err() || r.unwrap(), "ended");
        drop(gate);
    }

    #[test]
    fn direct_stream_error_status_and_idle() {
        let (t, p, _rx, _gate) = serve(vec![
            b"HTTP/1.1 404 Not Found\r\nContent-Length: 7\r\n\r\nno page".to_vec(),
        ]);
        match DirectAccess::new().stream(&t, p, "/events", &[], Duration::from_secs(5)) {
            Err(AccessError::Status { status: 404, body }) => assert_eq!(body, "no page"),
            other => panic!("{other:?}"),
        }
        let (t, p, _rx, _gate) = serve(vec![b"HTTP/1.1 200 OK\r\n\r\n".to_vec()]);
        let mut s = DirectAccess::new()
            .stream(&t, p, "/", &[], Duration::from_millis(200))
            .unwrap();
        let e = s.read(&mut [0u8; 8]).unwrap_err();
        assert_eq!(e.kind(), io::ErrorKind::TimedOut);
    }

    #[test]
    fn api_proxy_refuses_authorization_headers() {
        let client = Client::new(crate::kube::connection::Connection::plain(
            "http://127.0.0.1:9",
        ))
        .unwrap();
        let a = ApiProxyAccess::new(client);
        let req = PodRequest::get("/").header("authorization", "Bearer x");
        assert!(matches!(
            a.request(&target(), 80, &req),
            Err(AccessError::Invalid(_))
        ));
        assert_eq!(a.mode(), PodAccessMode::ApiProxy);
    }

    #[test]
    fn proxy_errors_map() {
        assert!(matches!(
            from_proxy(ProxyError::ConnectionRefused {
                message: "x".into()
            }),
            AccessError::Refused { .. }
        ));
        assert!(matches!(
            from_proxy(ProxyError::Kube(KubeError::Transport(
                "timeout: per read".into()
            ))),
            AccessError::Timeout { .. }
        ));
        assert!(matches!(
            from_proxy(ProxyError::Kube(KubeError::Transport("reset".into()))),
            AccessError::Kube(_)
        ));
    }
}
