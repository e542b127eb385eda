//! The pod proxy: `GET|POST … /api/v1/namespaces/{ns}/pods/{name}:{port}/proxy/{path}`,
//! an HTTP request to a port of a pod, relayed by the API server.
//!
//! It owns telling the API server's own failures apart from the app's
//! answers: a 503 Status whose message says the pod's port refused the
//! connection is [`ProxyError::ConnectionRefused`] (nothing listens yet),
//! other API-server Statuses (pod not found, unreachable, 401/403) are
//! errors, and everything else — an app's 404 or 500 included — is a normal
//! [`ProxyResponse`] whose body streams from the socket as the app writes it.
//! Each call gets its own agent (no whole-request deadline, only a per-read
//! one), so a long stream can be cancelled with [`ProxyResponse::canceller`].
//! It never retries (an app's 503 is the app's) except the client's one
//! 401 refresh, and never buffers a body beyond a small error Status.

use super::api::encode_segment;
use super::error::KubeError;
use super::rest::{header, CallOptions, Client, Request};
use crate::kube::status::Status;
use std::fmt;
use std::io::{Cursor, Read};
use std::time::Duration;
use ureq::http::{self, Method};

/// Largest error body inspected for an API-server Status.
const MAX_PEEK: u64 = 64 * 1024;

/// One proxied request.
#[derive(Debug, Clone)]
pub struct ProxyRequest {
    pub method: Method,
    pub namespace: String,
    pub pod: String,
    pub port: u16,
    /// Path (and query) inside the pod, e.g. `/healthz?full=1`.
    pub path: String,
    /// Request headers for the app. Never put credentials here.
    pub headers: Vec<(String, String)>,
    pub body: Option<Vec<u8>>,
    /// Per-read deadline while waiting for the app; default 5 minutes
    /// (long enough for a quiet event stream, short enough to notice death).
    pub read_timeout: Option<Duration>,
}

impl ProxyRequest {
    pub fn get(namespace: &str, pod: &str, port: u16, path: &str) -> ProxyRequest {
        ProxyRequest {
            method: Method::GET,
            namespace: namespace.into(),
            pod: pod.into(),
            port,
            path: path.into(),
            headers: Vec::new(),
            body: None,
            read_timeout: None,
        }
    }

    pub fn post(namespace: &str, pod: &str, port: u16, path: &str, body: Vec<u8>) -> ProxyRequest {
        ProxyRequest {
            method: Method::POST,
            body: Some(body),
            ..ProxyRequest::get(namespace, pod, port, path)
        }
    }

    /// `/api/v1/namespaces/{ns}/pods/{pod}:{port}/proxy{path}`.
    pub fn url_path(&self) -> String {
        let path = if self.path.is_empty() || self.path.starts_with('/') {
            self.path.clone()
        } else {
            format!("/{}", self.path)
        };
        format!(
            "/api/v1/namespaces/{}/pods/{}:{}/proxy{}",
            encode_segment(&self.namespace),
            encode_segment(&self.pod),
            self.port,
            if path.is_empty() { "/" } else { &path }
        )
    }
}

/// Why a proxied request got no answer from the app.
#[derive(Debug, Clone)]
pub enum ProxyError {
    /// The pod exists but nothing accepts connections on the port (yet).
    ConnectionRefused { message: String },
    /// The API server could not reach the pod for another reason (no IP
    /// yet, timeout, reset), with its Status.
    Unreachable(Box<Status>),
    /// Any other failure: pod not found, 401/403, transport, …
    Kube(KubeError),
}

impl fmt::Display for ProxyError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ProxyError::ConnectionRefused { message } => {
                write!(f, "the pod refused the connection: {message}")
            }
            ProxyError::Unreachable(s) => write!(f, "the pod is unreachable: {s}"),
            ProxyError::Kube(e) => e.fmt(f),
        }
    }
}

impl std::error::Error for ProxyError {}

impl From<KubeError> for ProxyError {
    fn from(e: KubeError) -> Self {
        ProxyError::Kube(e)
    }
}

/// The app's answer. `Read` streams the body.
pub struct ProxyResponse {
    pub status: u16,
    pub headers: Vec<(String, String)>,
    body: Box<dyn Read + Send>,
    agent: ureq::Agent,
}

impl fmt::Debug for ProxyResponse {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ProxyResponse")
            .field("status", &self.status)
            .field("headers", &self.headers)
            .finish_non_exhaustive()
    }
}

impl ProxyResponse {
    /// A header value (case-insensitive name).
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(k, _)| k.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
    }

    /// A handle that cuts the body stream from another thread.
    pub fn canceller(&self) -> ProxyCanceller {
        ProxyCanceller(self.agent.clone())
    }

    /// The agent the answer came on, for another request (its connection
    /// goes back to the agent's pool when the body was read to its end).
    pub fn into_agent(self) -> ureq::Agent {
        drop(self.body);
        self.agent
    }

    /// Reads the whole body (a bounded one: use `Read` for streams).
    pub fn into_string(mut self) -> std::io::Result<String> {
        let mut s = String::new();
        self.read_to_string(&mut s)?;
        Ok(s)
    }
}

impl Read for ProxyResponse {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        self.body.read(buf)
    }
}

type ProxyParts = (u16, Vec<(String, String)>, Box<dyn Read + Send>);

/// Cuts a proxied stream (see [`ProxyResponse::canceller`]).
#[derive(Clone)]
pub struct ProxyCanceller(ureq::Agent);

impl ProxyCanceller {
    pub fn cancel(self) {
        self.0.shutdown();
    }
}

impl Client {
    /// Sends a request to a pod's port through the API server.
    pub fn pod_proxy(&self, pr: &ProxyRequest) -> Result<ProxyResponse, ProxyError> {
        self.pod_proxy_on(self.proxy_agent(pr.read_timeout), pr)
            .map_err(|(e, _)| e)
    }

    /// An agent of its own for one proxied request: [`ProxyCanceller`]
    /// shuts it down without touching other calls. `read_timeout` as in
    /// [`ProxyRequest`].
    pub fn proxy_agent(&self, read_timeout: Option<Duration>) -> ureq::Agent {
        self.stream_agent(Some(read_timeout.unwrap_or(Duration::from_secs(300))))
    }

    /// [`Client::pod_proxy`] on a given agent (from [`Client::proxy_agent`]
    /// with the same read timeout), which a failure gives back: a caller
    /// that retries (a debug relay) keeps its connection to the API server
    /// instead of a new connection, and TLS handshake, per attempt.
    pub fn pod_proxy_on(
        &self,
        agent: ureq::Agent,
        pr: &ProxyRequest,
    ) -> Result<ProxyResponse, (ProxyError, ureq::Agent)> {
        match self.pod_proxy_inner(&agent, pr) {
            Ok((status, headers, body)) => Ok(ProxyResponse {
                status,
                headers,
                body,
                agent,
            }),
            Err(e) => Err((e, agent)),
        }
    }

    fn pod_proxy_inner(
        &self,
        agent: &ureq::Agent,
        pr: &ProxyRequest,
    ) -> Result<ProxyParts, ProxyError> {
        let mut req = Request::new(pr.method.clone(), pr.url_path());
        req.accept = "*/*";
        req.headers = pr.headers.clone();
        req.body = pr.body.clone();
        let resp = self.send_on(agent, &req, CallOptions::PROXY, None)?;
        let status = resp.status().as_u16();
        let content_type = header(&resp, http::header::CONTENT_TYPE);
        let headers: Vec<(String, String)> = resp
            .headers()
            .iter()
            .map(|(k, v)| {
                (
                    k.as_str().to_string(),
                    String::from_utf8_lossy(v.as_bytes()).into_owned(),
                )
            })
            .collect();
        let length = resp
            .headers()
            .get(http::header::CONTENT_LENGTH)
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.parse::<u64>().ok());
        let mut body: Box<dyn Read + Send> = Box::new(resp.into_body().into_reader());
        let may_be_status = status >= 400
            && content_type.starts_with("application/json")
            && length.is_some_and(|n| n <= MAX_PEEK);
        if may_be_status {
            let mut peek = Vec::new();
            (&mut body)
                .take(MAX_PEEK)
                .read_to_end(&mut peek)
                .map_err(|e| KubeError::Transport(format!("reading the proxy answer: {e}")))?;
            if let Some(err) = server_status(status, &peek) {
                return Err(err);
            }
            body = Box::new(Cursor::new(peek).chain(body));
        }
        Ok((status, headers, body))
    }
}

/// The API server's own failure, when `body` is a Status it wrote.
pub(crate) fn server_status(code: u16, body: &[u8]) -> Option<ProxyError> {
    let v: serde_json::Value = serde_json::from_slice(body).ok()?;
    if v.get("kind").and_then(|k| k.as_str()) != Some("Status") {
        return None;
    }
    let status: Status = serde_json::from_value(v).ok()?;
    if !status.is_failure() {
        return None;
    }
    let refused = status.message.contains("connection refused");
    Some(match code {
        503 if refused => ProxyError::ConnectionRefused {
            message: status.message,
        },
        503 | 502 if status.message.contains("error trying to reach service") => {
            ProxyError::Unreachable(Box::new(status))
        }
        _ => ProxyError::Kube(KubeError::from_status(code, status)),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn paths() {
        let r = ProxyRequest::get("ns", "web-1", 8080, "/a/b?x=1");
        assert_eq!(
            r.url_path(),
            "/api/v1/namespaces/ns/pods/web-1:8080/proxy/a/b?x=1"
        );
        let r = ProxyRequest::get("ns", "p", 80, "");
        assert_eq!(r.url_path(), "/api/v1/namespaces/ns/pods/p:80/proxy/");
    }

    #[test]
    fn tells_server_statuses_from_app_answers() {
        let refused = Status::service_unavailable(
            "error trying to reach service: dial tcp 127.0.0.2:8080: connect: connection refused",
        );
        assert!(matches!(
            server_status(503, &refused.to_json()),
            Some(ProxyError::ConnectionRefused { .. })
        ));
        let nf = Status::not_found("", "pods", "x");
        assert!(matches!(
            server_status(404, &nf.to_json()),
            Some(ProxyError::Kube(KubeError::NotFound(_)))
        ));
        assert!(server_status(404, br#"{"error":"no such page"}"#).is_none());
        assert!(server_status(503, b"not json").is_none());
    }
}
