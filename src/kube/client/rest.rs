//! [`Client`]: one cluster's HTTP client. It owns the ureq agent (through
//! our TLS connector, `transport.rs`), the bearer token on every request,
//! the 401 refresh, the retry policy, and the mapping of every non-2xx answer
//! to a [`KubeError`].
//!
//! Retries are deliberately narrow: a request the server answered 429 or
//! 503 *with* a Retry-After is repeated for any verb (the server asked for
//! it and did not act on the request), honouring the delay up to a cap; GETs
//! are also repeated after transport errors and 500/502/503/504, with
//! exponential backoff and jitter; a write is repeated after a transport
//! error only when the connection was never made (nothing was sent), never
//! after a reset or a timeout, where the server may have acted on it.
//!
//! It never logs a token (only method, path and outcome), never follows
//! redirects (the bearer token must not travel elsewhere) and never uses
//! proxy environment variables. Long-lived streams (watch, pod proxy) get
//! their own agent from [`Client::stream_agent`], so that
//! `Agent::shutdown` can cancel them without touching REST calls.

use super::backoff::Backoff;
use super::error::KubeError;
use super::transport::{self, TlsParts};
use crate::kube::connection::{Connection, Credentials, Impersonation};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;
use ureq::http;

/// `User-Agent` of every request.
pub const USER_AGENT: &str = concat!("kubegate/", env!("CARGO_PKG_VERSION"));

/// Largest error body read to build a Status (a real one is a few hundred
/// bytes; this bounds a misbehaving proxy's page).
const MAX_ERROR_BODY: u64 = 1024 * 1024;

/// Retry knobs, with their reasons.
#[derive(Debug, Clone)]
pub struct RetryPolicy {
    /// Retries after the first attempt (client-go retries Retry-After
    /// answers up to 10 times; 5 keeps a stuck call under a minute).
    pub max_retries: u32,
    /// First backoff step for GET retries without a Retry-After.
    pub initial_backoff: Duration,
    /// Largest backoff step.
    pub max_backoff: Duration,
    /// Largest Retry-After honoured per retry: a server asking for more is
    /// answered with an error the caller can schedule itself.
    pub max_retry_after: Duration,
}

impl Default for RetryPolicy {
    fn default() -> Self {
        RetryPolicy {
            max_retries: 5,
            initial_backoff: Duration::from_millis(200),
            max_backoff: Duration::from_secs(5),
            max_retry_after: Duration::from_secs(30),
        }
    }
}

impl RetryPolicy {
    /// No retries at all (tests of error mapping, callers with their own loop).
    pub fn none() -> RetryPolicy {
        RetryPolicy {
            max_retries: 0,
            ..RetryPolicy::default()
        }
    }
}

/// Client settings; `Default` is right for REST against any cluster.
#[derive(Debug, Clone)]
pub struct ClientOptions {
    /// Whole-request deadline for REST calls (connect, send, receive body).
    pub timeout: Duration,
    /// TCP connect + TLS handshake deadline, for REST and streams.
    pub connect_timeout: Duration,
    pub retry: RetryPolicy,
}

impl Default for ClientOptions {
    fn default() -> Self {
        ClientOptions {
            timeout: Duration::from_secs(30),
            connect_timeout: Duration::from_secs(30),
            retry: RetryPolicy::default(),
        }
    }
}

/// One cluster's client. Cheap to clone (an `Arc`); share it across threads.
#[derive(Clone)]
pub struct Client {
    inner: Arc<Inner>,
}

struct Inner {
    /// What the client was made from (raw sockets, e.g. the debug relays'
    /// polled streams, dial with the same material and credentials).
    conn: Connection,
    server: String,
    namespace: String,
    credentials: Arc<dyn Credentials>,
    tls: Option<TlsParts>,
    agent: ureq::Agent,
    options: ClientOptions,
    retries: AtomicU64,
}

impl std::fmt::Debug for Client {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Client")
            .field("server", &self.inner.server)
            .field("namespace", &self.inner.namespace)
            .finish_non_exhaustive()
    }
}

/// How a request may be repeated.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Idempotency {
    /// GET/list: repeat after transport errors and 5xx.
    Safe,
    /// Writes: repeat only when the server said so (429/503 + Retry-After)
    /// or nothing was sent.
    Unsafe,
}

/// A request to the API server, relative to the server URL.
#[derive(Debug, Clone)]
pub struct Request {
    pub method: http::Method,
    /// Path and query, starting with `/` (`/api/v1/namespaces/x/pods?watch=true`).
    pub path: String,
    pub body: Option<Vec<u8>>,
    pub content_type: Option<&'static str>,
    pub accept: &'static str,
    pub idempotency: Idempotency,
    /// Extra headers (pod proxy). Never put credentials here.
    pub headers: Vec<(String, String)>,
}

impl Request {
    pub fn new(method: http::Method, path: impl Into<String>) -> Request {
        let idempotency = if method == http::Method::GET || method == http::Method::HEAD {
            Idempotency::Safe
        } else {
            Idempotency::Unsafe
        };
        Request {
            method,
            path: path.into(),
            body: None,
            content_type: None,
            accept: "application/json",
            idempotency,
            headers: Vec::new(),
        }
    }

    pub fn get(path: impl Into<String>) -> Request {
        Request::new(http::Method::GET, path)
    }

    /// A JSON body (`application/json`).
    pub fn json(mut self, body: Vec<u8>) -> Request {
        self.body = Some(body);
        self.content_type = Some("application/json");
        self
    }

    /// A body with an explicit content type.
    pub fn body(mut self, body: Vec<u8>, content_type: &'static str) -> Request {
        self.body = Some(body);
        self.content_type = Some(content_type);
        self
    }
}

/// Per-call transport settings.
#[derive(Debug, Clone, Copy)]
pub(crate) struct CallOptions {
    /// Return every answer that survived the 401 refresh (the pod proxy:
    /// an app's 404 is a normal response).
    pub any_status: bool,
    /// Apply the retry policy. Off for the proxy (an app's 503 is its own)
    /// and for watch opens (the watcher has its own reconnect backoff).
    pub retries: bool,
}

impl CallOptions {
    pub const REST: CallOptions = CallOptions {
        any_status: false,
        retries: true,
    };
    pub const STREAM: CallOptions = CallOptions {
        any_status: false,
        retries: false,
    };
    pub const PROXY: CallOptions = CallOptions {
        any_status: true,
        retries: false,
    };
}

pub type Response = http::Response<ureq::Body>;

impl Client {
    /// A client with default options.
    pub fn new(conn: Connection) -> Result<Client, KubeError> {
        Client::with_options(conn, ClientOptions::default())
    }

    pub fn with_options(conn: Connection, options: ClientOptions) -> Result<Client, KubeError> {
        let server = conn.server.trim_end_matches('/').to_string();
        let uri: http::Uri = server
            .parse()
            .map_err(|e| KubeError::Config(format!("server URL {server:?}: {e}")))?;
        let tls = match uri.scheme_str() {
            Some("https") => {
                let mut material = conn.tls.clone();
                if material.client_cert.is_none() {
                    material.client_cert = conn
                        .credentials
                        .client_cert()
                        .map_err(|e| KubeError::Credentials(e.to_string()))?;
                }
                // rustls, or native-tls under the `native-tls` feature.
                Some(
                    TlsParts::new(&material, &conn)
                        .map_err(|e| KubeError::Config(e.to_string()))?,
                )
            }
            Some("http") => None,
            _ => {
                return Err(KubeError::Config(format!(
                    "server URL {server:?} is neither http:// nor https://"
                )))
            }
        };
        let agent = build_agent(&tls, &options, Some(options.timeout), None);
        Ok(Client {
            inner: Arc::new(Inner {
                conn: conn.clone(),
                server,
                namespace: conn.namespace.clone(),
                credentials: conn.credentials.clone(),
                tls,
                agent,
                options,
                retries: AtomicU64::new(0),
            }),
        })
    }

    /// This client acting as `who` (docs/SECURITY.md#impersonation): the
    /// same agent, TLS and credentials; every request it sends, and every
    /// stream opened with its [`connection`](Client::connection), carries
    /// the impersonation headers.
    pub fn impersonating(&self, who: Impersonation) -> Client {
        let i = &self.inner;
        Client {
            inner: Arc::new(Inner {
                conn: i.conn.impersonating(who),
                server: i.server.clone(),
                namespace: i.namespace.clone(),
                credentials: i.credentials.clone(),
                tls: i.tls.clone(),
                agent: i.agent.clone(),
                options: i.options.clone(),
                retries: AtomicU64::new(0),
            }),
        }
    }

    /// The connection the client was made from.
    pub fn connection(&self) -> &Connection {
        &self.inner.conn
    }

    /// The server URL, without a trailing slash.
    pub fn server(&self) -> &str {
        &self.inner.server
    }

    /// The connection's default namespace.
    pub fn default_namespace(&self) -> &str {
        &self.inner.namespace
    }

    /// How many retries this client made so far (all calls), for metrics
    /// and tests.
    pub fn retries(&self) -> u64 {
        self.inner.retries.load(Ordering::Relaxed)
    }

    /// A fresh agent (own connection pool, same TLS) for one long-lived
    /// stream: no whole-request deadline, `per_read` as the only read
    /// deadline. `Agent::shutdown` on it cancels only that stream.
    pub fn stream_agent(&self, per_read: Option<Duration>) -> ureq::Agent {
        build_agent(&self.inner.tls, &self.inner.options, None, per_read)
    }

    /// The REST whole-request deadline (for lists made on a stream agent).
    pub fn rest_timeout(&self) -> Duration {
        self.inner.options.timeout
    }

    /// Sends a request on the REST agent; a 2xx answer or an error.
    pub fn send(&self, req: &Request) -> Result<Response, KubeError> {
        self.send_on(&self.inner.agent, req, CallOptions::REST, None)
    }

    /// Sends and decodes a JSON answer (any size: streamed from the socket).
    pub fn send_json<T: serde::de::DeserializeOwned>(&self, req: &Request) -> Result<T, KubeError> {
        let resp = self.send(req)?;
        read_json(resp)
    }

    /// The request loop: credentials, 401 refresh, retries, error mapping.
    /// `deadline` overrides the agent's whole-request timeout for this call.
    pub(crate) fn send_on(
        &self,
        agent: &ureq::Agent,
        req: &Request,
        call: CallOptions,
        deadline: Option<Duration>,
    ) -> Result<Response, KubeError> {
        let policy = &self.inner.options.retry;
        let mut backoff = Backoff::new(
            policy.initial_backoff,
            policy.max_backoff,
            1.0,
            Duration::from_secs(3600),
        );
        let mut retries = 0u32;
        let mut reauthenticated = false;
        loop {
            let token = self
                .inner
                .credentials
                .bearer()
                .map_err(|e| KubeError::Credentials(e.to_string()))?;
            let http_req = self.build(agent, req, token.as_deref(), deadline)?;
            let may_retry = call.retries && retries < policy.max_retries;
            match agent.run(http_req) {
                Err(e) => {
                    let never_sent = never_sent(&e);
                    let err = KubeError::Transport(describe(&e));
                    if may_retry && (req.idempotency == Idempotency::Safe || never_sent) {
                        log::debug!("{} {}: {err}; retrying", req.method, path_only(&req.path));
                        self.pause(backoff.next_delay(), &mut retries);
                        continue;
                    }
                    return Err(err);
                }
                Ok(resp) => {
                    let code = resp.status().as_u16();
                    if code == 401 && !reauthenticated {
                        // The token may have rotated: drop caches, try once more.
                        self.inner.credentials.invalidate();
                        reauthenticated = true;
                        drain(resp);
                        continue;
                    }
                    if (200..300).contains(&code) {
                        return Ok(resp);
                    }
                    let retry_after = resp
                        .headers()
                        .get(http::header::RETRY_AFTER)
                        .and_then(|v| v.to_str().ok())
                        .map(str::to_string);
                    if call.any_status {
                        return Ok(resp);
                    }
                    let content_type = header(&resp, http::header::CONTENT_TYPE);
                    let body = read_error_body(resp);
                    let err = KubeError::from_response(
                        code,
                        &content_type,
                        &body,
                        retry_after.as_deref(),
                    );
                    if may_retry {
                        if let Some(wait) = self.retry_wait(req, code, &err, &mut backoff) {
                            log::debug!(
                                "{} {}: {code}; retrying in {wait:?}",
                                req.method,
                                path_only(&req.path)
                            );
                            self.pause(wait, &mut retries);
                            continue;
                        }
                    }
                    return Err(err);
                }
            }
        }
    }

    /// When to retry an error answer, if at all.
    fn retry_wait(
        &self,
        req: &Request,
        code: u16,
        err: &KubeError,
        backoff: &mut Backoff,
    ) -> Option<Duration> {
        let policy = &self.inner.options.retry;
        if matches!(code, 429 | 503) {
            if let Some(ra) = err.retry_after() {
                if ra > policy.max_retry_after {
                    return None;
                }
                return Some(ra);
            }
        }
        if req.idempotency == Idempotency::Safe && matches!(code, 429 | 500 | 502 | 503 | 504) {
            return Some(backoff.next_delay());
        }
        None
    }

    fn pause(&self, wait: Duration, retries: &mut u32) {
        *retries += 1;
        self.inner.retries.fetch_add(1, Ordering::Relaxed);
        std::thread::sleep(wait);
    }

    fn build(
        &self,
        agent: &ureq::Agent,
        req: &Request,
        token: Option<&str>,
        deadline: Option<Duration>,
    ) -> Result<http::Request<Vec<u8>>, KubeError> {
        let url = format!("{}{}", self.inner.server, req.path);
        let mut b = http::Request::builder()
            .method(req.method.clone())
            .uri(&url)
            .header(http::header::ACCEPT, req.accept);
        if let Some(ct) = req.content_type {
            b = b.header(http::header::CONTENT_TYPE, ct);
        }
        for (k, v) in &req.headers {
            b = b.header(k.as_str(), v.as_str());
        }
        for (k, v) in self.inner.conn.impersonation_headers() {
            b = b.header(k.as_str(), v.as_str());
        }
        if let Some(t) = token {
            let mut v = http::HeaderValue::from_str(&format!("Bearer {t}"))
                .map_err(|_| KubeError::Credentials("the token is not a valid header".into()))?;
            v.set_sensitive(true);
            b = b.header(http::header::AUTHORIZATION, v);
        }
        let body = req.body.clone().unwrap_or_default();
        let r = b
            .body(body)
            .map_err(|e| KubeError::Config(format!("request {}: {e}", path_only(&req.path))))?;
        Ok(match deadline {
            Some(d) => agent.configure_request(r).timeout_global(Some(d)).build(),
            None => r,
        })
    }
}

fn build_agent(
    tls: &Option<TlsParts>,
    options: &ClientOptions,
    global: Option<Duration>,
    per_read: Option<Duration>,
) -> ureq::Agent {
    let config = ureq::Agent::config_builder()
        .http_status_as_error(false)
        .proxy(None)
        .max_redirects(0)
        .user_agent(USER_AGENT)
        .timeout_global(global)
        .timeout_connect(Some(options.connect_timeout))
        .timeout_per_read(per_read)
        // One client serves many threads (the daemon's exec gateway, the
        // sessions): with ureq's default of 3 idle connections per host,
        // concurrent callers tear connections down and redo TLS handshakes.
        .max_idle_connections(64)
        .max_idle_connections_per_host(32)
        // Each held connection (a session's pod watch, a pooled idle one)
        // keeps these: ureq's 128 KiB defaults cost ~256 KiB per watch.
        // Bodies stream through them; Kubernetes heads are a few KiB.
        .input_buffer_size(32 * 1024)
        .output_buffer_size(16 * 1024)
        .build();
    ureq::Agent::with_parts(
        config,
        transport::connector(tls.clone()),
        ureq::unversioned::resolver::DefaultResolver::default(),
    )
}

/// True when the error happened before any byte of the request could have
/// reached the server (so even a write may be repeated).
fn never_sent(e: &ureq::Error) -> bool {
    match e {
        ureq::Error::ConnectionFailed | ureq::Error::HostNotFound => true,
        ureq::Error::Io(io) => matches!(
            io.kind(),
            std::io::ErrorKind::ConnectionRefused | std::io::ErrorKind::AddrNotAvailable
        ),
        ureq::Error::Timeout(t) => matches!(t, ureq::Timeout::Resolve | ureq::Timeout::Connect),
        _ => false,
    }
}

/// A transport error's text (ureq and rustls messages carry no headers).
pub(crate) fn describe(e: &ureq::Error) -> String {
    match e {
        ureq::Error::Io(io) => format!("{} ({:?})", io, io.kind()),
        other => other.to_string(),
    }
}

/// The path without its query, for logs.
pub(crate) fn path_only(p: &str) -> &str {
    p.split('?').next().unwrap_or(p)
}

pub(crate) fn header(resp: &Response, name: http::header::HeaderName) -> String {
    resp.headers()
        .get(name)
        .and_then(|v| v.to_str().ok())
        .unwrap_or("")
        .to_string()
}

fn read_error_body(resp: Response) -> Vec<u8> {
    resp.into_body()
        .into_with_config()
        .limit(MAX_ERROR_BODY)
        .read_to_vec()
        .unwrap_or_default()
}

/// Reads and discards a small body so the connection can be reused.
fn drain(resp: Response) {
    let _ = read_error_body(resp);
}

/// Decodes a JSON body straight from the socket: no size cap (lists can
/// exceed ureq's 10 MB `read_json` limit), no intermediate buffer.
pub fn read_json<T: serde::de::DeserializeOwned>(resp: Response) -> Result<T, KubeError> {
    let reader = std::io::BufReader::new(resp.into_body().into_reader());
    serde_json::from_reader(reader).map_err(|e| {
        if e.is_io() {
            KubeError::Transport(format!("reading the answer: {e}"))
        } else {
            KubeError::Protocol(format!("decoding the answer: {e}"))
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn classifies_transport_errors() {
        assert!(never_sent(&ureq::Error::ConnectionFailed));
        assert!(never_sent(&ureq::Error::Io(std::io::Error::from(
            std::io::ErrorKind::ConnectionRefused
        ))));
        assert!(!never_sent(&ureq::Error::Io(std::io::Error::from(
            std::io::ErrorKind::ConnectionReset
        ))));
        assert!(!never_sent(&ureq::Error::Timeout(
            ureq::Timeout::RecvResponse
        )));
    }

    #[test]
    fn rejects_bad_urls() {
        let e = Client::new(Connection::plain("ftp://x")).map(|_| ());
        assert!(matches!(e, Err(KubeError::Config(_))));
        assert!(Client::new(Connection::plain("http://127.0.0.1:1/")).is_ok());
    }
}
