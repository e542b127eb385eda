//! The request/response types every [`Handler`] sees. Fixed early so the sim
//! and the daemon can be written against them while the server grows.

use std::any::Any;
use std::io;
use std::net::SocketAddr;
use std::sync::Arc;

/// One parsed HTTP/1.1 request with its whole body (bodies are capped by the
/// server's `max_body_bytes`; a larger one never reaches the handler).
#[derive(Debug, Clone)]
pub struct Request {
    pub method: String,
    /// The raw request-target, e.g. `/api/v1/pods?watch=true`.
    pub target: String,
    /// The path part of the target, percent-decoded.
    pub path: String,
    /// Query pairs in order, percent-decoded (`+` is a space).
    pub query: Vec<(String, String)>,
    /// Header names lower-cased, values as sent (trimmed).
    pub headers: Vec<(String, String)>,
    pub body: Vec<u8>,
    pub peer: SocketAddr,
    /// True when the connection is TLS.
    pub tls: bool,
    /// DER of the client's leaf certificate when it presented one that the
    /// server's client-certificate verifier accepted.
    pub client_cert_der: Option<Vec<u8>>,
    /// Tells a long-running handler that its client went away or the
    /// server is stopping (to abort work nobody waits for).
    pub probe: PeerProbe,
    /// What [`Handler::admit`] learned from the head (the caller's
    /// identity), handed back with the request.
    pub admitted: Context,
}

/// The opaque value a handler's admission attached to a request.
#[derive(Clone, Default)]
pub struct Context(pub Option<Arc<dyn Any + Send + Sync>>);

impl Context {
    /// The attached value, when there is one of type `T`.
    pub fn get<T: Any + Send + Sync>(&self) -> Option<Arc<T>> {
        self.0.clone().and_then(|a| a.downcast::<T>().ok())
    }
}

impl std::fmt::Debug for Context {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(if self.0.is_some() {
            "Context(Some)"
        } else {
            "Context(None)"
        })
    }
}

/// A body reservation: the server reports how far a request's body has
/// grown while it reads it (a Content-Length body is reported once, whole,
/// before any of it is read; a chunked one as it comes). `false` refuses
/// the rest: the server answers [`HttpError::Busy`] and closes.
pub trait BodyCharge: Send + Sync {
    fn grow(&self, total: usize) -> bool;
}

/// What [`Handler::admit`] decided from a request's head, before any body
/// byte is read or `100 Continue` sent.
pub enum Admission {
    /// Answer this instead (the body is never read; the connection closes
    /// when the request has one: what was sent is drained and discarded).
    Refuse(Response),
    Admit(Admit),
}

/// An admitted request: its body limit and what the handler wants back.
#[derive(Default)]
pub struct Admit {
    /// Body limit (`None`: the server's `max_body_bytes`; a larger value
    /// is lowered to it). Larger bodies get 413 without being read.
    pub max_body_bytes: Option<usize>,
    /// Handed back in [`Request::admitted`].
    pub context: Context,
    /// Told of the body's size as it is read (a budget).
    pub charge: Option<Arc<dyn BodyCharge>>,
    /// The caller is known (authenticated): the connection stops counting
    /// against its peer address's `max_connections_per_peer`.
    pub known: bool,
    /// Held by the connection while this request is served (its stream
    /// or WebSocket included), and with `keep_hold` also afterwards, until
    /// the next request's head is admitted or the connection closes (a
    /// per-caller slot for idle keep-alive connections).
    pub hold: Option<Box<dyn Any + Send>>,
    /// Keep `hold` while the connection waits for its next request.
    pub keep_hold: bool,
    /// Answer with `Connection: close` (e.g. no idle slot is left).
    pub close_after: bool,
}

impl Admit {
    pub fn with_limit(max_body_bytes: usize) -> Admit {
        Admit {
            max_body_bytes: Some(max_body_bytes),
            ..Admit::default()
        }
    }
}

/// A non-blocking "is anyone still waiting?" check for a handler that works
/// for long before answering (a one-shot exec). It holds duplicates of the
/// connection's socket and of the server's stop eventfd, so it stays valid
/// wherever the request goes.
#[derive(Clone, Default)]
pub struct PeerProbe {
    fds: Option<std::sync::Arc<(std::os::fd::OwnedFd, std::os::fd::OwnedFd)>>,
}

impl PeerProbe {
    pub(crate) fn new(
        sock: std::os::fd::BorrowedFd<'_>,
        stop: std::os::fd::BorrowedFd<'_>,
    ) -> PeerProbe {
        let fds = match (sock.try_clone_to_owned(), stop.try_clone_to_owned()) {
            (Ok(a), Ok(b)) => Some(std::sync::Arc::new((a, b))),
            _ => None,
        };
        PeerProbe { fds }
    }

    /// True once the client closed or reset the connection, or the server
    /// began shutting down. A probe not tied to a connection (tests,
    /// fuzzing) is never gone.
    pub fn gone(&self) -> bool {
        use std::os::fd::AsFd;
        let Some(fds) = &self.fds else {
            return false;
        };
        crate::http::stream::peer_gone(fds.0.as_fd())
            || crate::http::stream::readable_now(fds.1.as_fd())
    }
}

impl std::fmt::Debug for PeerProbe {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("PeerProbe")
    }
}

impl Request {
    /// A request as a unit test builds one: `target` split into path and
    /// query (no percent-decoding), the headers as given, from 127.0.0.1:1,
    /// no body, no TLS.
    #[cfg(test)]
    pub fn for_test(method: &str, target: &str, headers: &[(&str, &str)]) -> Request {
        let (path, q) = target.split_once('?').unwrap_or((target, ""));
        Request {
            method: method.into(),
            target: target.into(),
            path: path.into(),
            query: q
                .split('&')
                .filter(|s| !s.is_empty())
                .map(|kv| {
                    let (k, v) = kv.split_once('=').unwrap_or((kv, ""));
                    (k.to_string(), v.to_string())
                })
                .collect(),
            headers: headers
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect(),
            body: vec![],
            peer: SocketAddr::from(([127, 0, 0, 1], 1)),
            tls: false,
            client_cert_der: None,
            probe: PeerProbe::default(),
            admitted: Context::default(),
        }
    }

    /// The first header with this (case-insensitive) name.
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(k, _)| k.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
    }

    /// The first query value for `key`.
    pub fn query(&self, key: &str) -> Option<&str> {
        self.query
            .iter()
            .find(|(k, _)| k == key)
            .map(|(_, v)| v.as_str())
    }

    /// Every query value for `key`, in order (e.g. repeated `command=`).
    pub fn query_all(&self, key: &str) -> Vec<&str> {
        self.query
            .iter()
            .filter(|(k, _)| k == key)
            .map(|(_, v)| v.as_str())
            .collect()
    }

    /// A boolean query flag the way the Kubernetes API server reads it:
    /// false only when absent, empty-valued is true, `0`/`false` are false.
    pub fn query_flag(&self, key: &str) -> bool {
        match self.query(key) {
            None => false,
            Some(v) => !(v == "0" || v.eq_ignore_ascii_case("false")),
        }
    }

    /// True for a WebSocket upgrade request (GET, `Upgrade: websocket`,
    /// `Connection` containing `upgrade`, a `Sec-WebSocket-Key`).
    pub fn is_websocket_upgrade(&self) -> bool {
        self.method == "GET"
            && self
                .header("upgrade")
                .is_some_and(|v| v.eq_ignore_ascii_case("websocket"))
            && self.header("connection").is_some_and(|v| {
                v.split(',')
                    .any(|t| t.trim().eq_ignore_ascii_case("upgrade"))
            })
            && self.header("sec-websocket-key").is_some()
    }

    /// The subprotocols offered, across every `Sec-WebSocket-Protocol` header
    /// and comma-separated entry, in order.
    pub fn websocket_protocols(&self) -> Vec<String> {
        self.headers
            .iter()
            .filter(|(k, _)| k.eq_ignore_ascii_case("sec-websocket-protocol"))
            .flat_map(|(_, v)| v.split(','))
            .map(|s| s.trim().to_string())
            .filter(|s| !s.is_empty())
            .collect()
    }

    /// The bearer token from `Authorization: Bearer T`, if any.
    pub fn bearer_token(&self) -> Option<&str> {
        let v = self.header("authorization")?;
        let (scheme, rest) = v.split_once(' ')?;
        scheme
            .eq_ignore_ascii_case("bearer")
            .then(|| rest.trim())
            .filter(|t| !t.is_empty())
    }
}

/// Where a streaming response writes: each `send` becomes one HTTP chunk,
/// written and flushed at once.
pub trait ChunkSink {
    /// Writes one chunk (empty data is ignored: an empty chunk would end the
    /// stream). An error means the client is gone.
    fn send(&mut self, data: &[u8]) -> io::Result<()>;
    /// True once the peer has closed or reset the connection; a cheap,
    /// non-blocking check that idle streams (watches) make between events so
    /// a vanished client frees its thread.
    fn peer_closed(&self) -> bool;
}

/// A streaming body producer; it runs on the connection's own thread and
/// returns when the stream is complete (the server then writes the last chunk).
pub type StreamFn = Box<dyn FnOnce(&mut dyn ChunkSink) -> io::Result<()> + Send>;

pub enum Body {
    Empty,
    Bytes(Vec<u8>),
    /// `Transfer-Encoding: chunked`.
    Stream(StreamFn),
}

impl std::fmt::Debug for Body {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Body::Empty => f.write_str("Empty"),
            Body::Bytes(b) => write!(f, "Bytes({} bytes)", b.len()),
            Body::Stream(_) => f.write_str("Stream"),
        }
    }
}

#[derive(Debug)]
pub struct Response {
    pub status: u16,
    /// Extra headers; the server adds `Content-Length` or
    /// `Transfer-Encoding`, `Date` and `Connection` itself.
    pub headers: Vec<(String, String)>,
    pub body: Body,
}

impl Response {
    pub fn new(status: u16, content_type: &str, body: Vec<u8>) -> Response {
        Response {
            status,
            headers: vec![("Content-Type".into(), content_type.into())],
            body: Body::Bytes(body),
        }
    }

    pub fn json(status: u16, body: Vec<u8>) -> Response {
        Response::new(status, "application/json", body)
    }

    pub fn text(status: u16, body: &str) -> Response {
        Response::new(
            status,
            "text/plain; charset=utf-8",
            body.as_bytes().to_vec(),
        )
    }

    pub fn empty(status: u16) -> Response {
        Response {
            status,
            headers: Vec::new(),
            body: Body::Empty,
        }
    }

    pub fn stream(status: u16, content_type: &str, f: StreamFn) -> Response {
        Response {
            status,
            headers: vec![("Content-Type".into(), content_type.into())],
            body: Body::Stream(f),
        }
    }

    pub fn with_header(mut self, name: &str, value: &str) -> Response {
        self.headers.push((name.into(), value.into()));
        self
    }
}

/// What to do with an accepted WebSocket: the server writes the 101 (echoing
/// `protocol` when set), then calls `on_open` on the connection's thread with
/// the ready socket.
pub struct Upgrade {
    pub protocol: Option<String>,
    pub headers: Vec<(String, String)>,
    /// Largest message accepted from the peer (tungstenite's max_message_size).
    pub max_message_bytes: usize,
    pub on_open: Box<dyn FnOnce(crate::http::ws::WsConn) + Send>,
}

pub enum Reply {
    Response(Response),
    Upgrade(Upgrade),
    /// A `101 Switching Protocols` to something other than WebSocket
    /// (`http::raw`).
    RawUpgrade(crate::http::raw::RawUpgrade),
}

impl From<Response> for Reply {
    fn from(r: Response) -> Reply {
        Reply::Response(r)
    }
}

/// Errors the server answers itself, before or instead of the handler; the
/// handler chooses their body (a Kubernetes Status in the sim, the JSON error
/// shape in the daemon) through [`Handler::error_response`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum HttpError {
    /// 400: malformed request line, headers or chunked body.
    BadRequest(String),
    /// 431: the head exceeds `max_header_bytes`.
    HeadersTooLarge,
    /// 413: the body exceeds `max_body_bytes`.
    BodyTooLarge { limit: usize },
    /// 503: every connection slot is taken.
    Overloaded,
    /// 503: a body reservation was refused while the body was read.
    Busy,
    /// 429: this peer address has too many connections that have not
    /// authenticated (`max_connections_per_peer`).
    TooManyConnections,
    /// 500: the handler panicked.
    Internal,
}

impl HttpError {
    pub fn status(&self) -> u16 {
        match self {
            HttpError::BadRequest(_) => 400,
            HttpError::HeadersTooLarge => 431,
            HttpError::BodyTooLarge { .. } => 413,
            HttpError::Overloaded | HttpError::Busy => 503,
            HttpError::TooManyConnections => 429,
            HttpError::Internal => 500,
        }
    }
}

pub trait Handler: Send + Sync + 'static {
    fn handle(&self, req: Request) -> Reply;

    /// Decides from a request's head, before any body byte is read or
    /// `100 Continue` sent: refuse it with an answer, or admit it with a
    /// body limit and a context handed back in [`Request::admitted`].
    /// `head` is the request without its body (`body` is empty). Default:
    /// admit everything with the server's limit.
    fn admit(&self, _head: &Request) -> Admission {
        Admission::Admit(Admit::default())
    }

    /// The answer to a request read on the overflow path (every slot is
    /// taken, or its peer is over `max_connections_per_peer`) that no
    /// slot will serve: `None` answers `err`'s response. Health routes
    /// answer here so they stay reachable; this must not block.
    fn overflow(&self, _head: &Request, _err: &HttpError) -> Option<Response> {
        None
    }

    /// The body of an error the server answers itself.
    fn error_response(&self, err: &HttpError) -> Response {
        Response::text(err.status(), &format!("{err:?}"))
    }
}
