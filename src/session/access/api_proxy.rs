//! [`ApiProxyAccess`] (`api-proxy`): every call through the API server's
//! pod proxy; a kept `ureq` agent per read timeout, and raw sockets to
//! the API server for the polled debug streams.

use super::direct::{check_headers, check_path};
use super::http1::{http_error, raw_exchange, Nb, RawError, TimedClient};
use super::*;
use crate::http::response::{checked_framing, BodyReader, Framing};

/// A proxied answer as a stream, cut by cancelling its request.
fn stream_handle(resp: crate::kube::client::ProxyResponse) -> StreamHandle {
    let cancel = resp.canceller();
    StreamHandle {
        status: resp.status,
        headers: resp.headers.clone(),
        body: Box::new(resp),
        canceller: StreamCanceller(Arc::new(move || cancel.clone().cancel())),
    }
}

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
pub(super) type SpareAgent = (Option<Duration>, ureq::Agent);

/// Spare stream agents kept at most (each may hold one idle connection).
pub(super) const SPARE_AGENTS: usize = 4;

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
        for (k, v) in conn.impersonation_headers() {
            req.push_str(&format!("{k}: {v}\r\n"));
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
        if head.code == 401 {
            conn.credentials.invalidate();
        }
        let framing = checked_framing(&head, false).map_err(|e| http_error(&e))?;
        if !(200..300).contains(&head.code) {
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
            if reusable && body.is_done() {
                let mut spare = self.spare_sockets.lock();
                if spare.len() < SPARE_AGENTS {
                    spare.push(body.into_inner().sock);
                }
            }
            return Err(
                match crate::kube::client::proxy::server_status(head.code, &b) {
                    Some(e) => from_proxy(e),
                    None => AccessError::Status {
                        status: head.code,
                        body: excerpt(&b),
                    },
                },
            );
        }
        sock.set_read_timeout(None)
            .and_then(|()| sock.set_nonblocking(true))
            .map_err(|e| transport("configuring the socket to", &e))?;
        Ok(PolledStream {
            status: head.code,
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

    /// [`ApiProxyAccess::proxy_request`] for a whole [`PodRequest`], each
    /// read bounded by `per_read`.
    fn proxy_request_of(
        t: &PodTarget,
        port: u16,
        req: &PodRequest,
        per_read: Duration,
    ) -> Result<ProxyRequest, AccessError> {
        let (method, body) = (req.method.clone(), req.body.clone());
        Self::proxy_request(t, port, method, &req.path, &req.headers, body, per_read)
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
pub(super) fn status_error(status: u16, body: &mut impl Read) -> AccessError {
    let b =
        read_bounded(&mut body.take(MAX_STATUS_BODY as u64), usize::MAX, None).unwrap_or_default();
    AccessError::Status {
        status,
        body: excerpt(&b),
    }
}

/// A transport message that says a timer fired.
pub(super) fn is_timeout_message(m: &str) -> bool {
    let m = m.to_ascii_lowercase();
    m.contains("timeout") || m.contains("timed out")
}

pub(super) fn from_proxy(e: ProxyError) -> AccessError {
    match e {
        ProxyError::ConnectionRefused { message } => AccessError::Refused { message },
        ProxyError::Unreachable(s) => AccessError::Unreachable { message: s.message },
        ProxyError::Kube(KubeError::Transport(m)) if is_timeout_message(&m) => {
            AccessError::Timeout { message: m }
        }
        ProxyError::Kube(e) => AccessError::Kube(e),
    }
}

pub(super) fn from_read_error(e: io::Error, what: &str) -> AccessError {
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
pub(super) fn read_bounded(
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
pub(super) fn excerpt(body: &[u8]) -> String {
    let s = String::from_utf8_lossy(body);
    s.trim().chars().take(512).collect()
}

impl PodAccess for ApiProxyAccess {
    fn mode(&self) -> PodAccessMode {
        PodAccessMode::ApiProxy
    }

    fn request(&self, t: &PodTarget, port: u16, req: &PodRequest) -> Result<PodResponse> {
        let deadline = Instant::now() + req.timeout;
        let pr = Self::proxy_request_of(t, port, req, req.timeout)?;
        let mut resp = self.client.pod_proxy(&pr).map_err(from_proxy)?;
        let body = read_bounded(&mut resp, req.max_response_bytes, Some(deadline))?;
        Ok(PodResponse {
            status: resp.status,
            headers: resp.headers.clone(),
            body,
        })
    }

    fn stream(&self, t: &PodTarget, port: u16, req: &PodRequest) -> Result<StreamHandle> {
        let pr = Self::proxy_request_of(t, port, req, req.timeout)?;
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
        Ok(stream_handle(resp))
    }

    fn stream_polled(&self, t: &PodTarget, port: u16, req: &PodRequest) -> Result<PolledStream> {
        let pr = Self::proxy_request_of(t, port, req, req.timeout)?;
        self.open_polled(&pr, req.timeout)
    }

    fn open(&self, t: &PodTarget, port: u16, req: &PodRequest) -> Result<StreamHandle> {
        let idle = req.idle.unwrap_or(req.timeout);
        let pr = Self::proxy_request_of(t, port, req, idle)?;
        let resp = self.client.pod_proxy(&pr).map_err(from_proxy)?;
        Ok(stream_handle(resp))
    }

    /// The API server's pod proxy passes upgrades on: the handshake goes
    /// to the proxy path with the daemon's credentials.
    fn tunnel(&self, t: &PodTarget, port: u16, timeout: Duration) -> Result<Duplex> {
        use crate::kube::remote::portforward::{self, PortForwardError as E};
        let conn = self.client.connection();
        portforward::open(conn, &t.namespace, &t.name, port, timeout).map_err(|e| match e {
            E::Open(e) => from_remote(e),
            e if e.is_refused() => AccessError::Refused {
                message: e.to_string(),
            },
            E::Timeout => AccessError::Timeout {
                message: e.to_string(),
            },
            e => AccessError::Unreachable {
                message: e.to_string(),
            },
        })
    }

    fn with_client(&self, client: &Client) -> Arc<dyn PodAccess> {
        Arc::new(ApiProxyAccess::new(client.clone()))
    }

    fn websocket(&self, t: &PodTarget, port: u16, req: &PodRequest) -> Result<PodWebSocket> {
        let pr = Self::proxy_request_of(t, port, req, req.timeout)?;
        let (offer, headers) = websocket_headers(req);
        let conn = self.client.connection();
        let (ws, protocol) =
            crate::kube::remote::dial_websocket(conn, &pr.url_path(), &headers, offer, req.timeout)
                .map_err(from_remote)?;
        Ok(PodWebSocket { ws, protocol })
    }

    /// A GET of `/` through the proxy: any answer means the port accepted
    /// the connection. The API server tells a refused port (503 Status,
    /// "connection refused") and a failed dial ("dial tcp …") apart from
    /// failures after connecting (an app that closes without answering
    /// HTTP is listening). An app that accepts but stays silent past
    /// `timeout` counts as not reachable yet: through the proxy it cannot
    /// be told from a dial still in progress.
    fn probe_tcp(&self, t: &PodTarget, port: u16, timeout: Duration) -> Result<bool> {
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
