//! The daemon's client of a session pod's workspace agent (docs/agent.md),
//! over the pod-access seam ([`super::access::PodAccess`]), so it works the
//! same through the API server's pod proxy and directly.
//!
//! - The token goes in `X-Kubegate-Agent-Token` on every call (never in
//!   `Authorization`: the API server takes that header as the daemon's own
//!   credential and drops it before proxying).
//! - Every answer must carry `X-Kubegate-Agent-Protocol` equal to
//!   [`AGENT_PROTOCOL`]; another number is [`AgentError::Protocol`], whose
//!   message says whether the pod's kubegate image is older or newer than
//!   the daemon.
//! - Answers are bounded from the agent's limits (a snapshot may be large).
//! - [`AgentClient::wait_ready`] is docs/sessions.md#start step 4: first try at
//!   once, then back off 10 ms doubling to 500 ms until the deadline.
//!
//! The JSON bodies are `agent::wire`'s, shared with the agent.

use super::access::{AccessError, PodAccess, PodRequest, PodResponse, PodTarget};
use crate::agent::wire::Limits;
use crate::agent::wire::{
    ApplyRequest, ApplyResult, Encoding, ErrorBody, FileContent, Snapshot, Tree, VersionInfo,
    WriteItem,
};
use crate::agent::wire::{AGENT_PROTOCOL, DEFAULT_PORT, PROTOCOL_HEADER, TOKEN_HEADER};
use crate::kube::client::KubeError;
use base64::Engine as _;
use crossbeam_channel::{Receiver, RecvTimeoutError};
use serde::de::DeserializeOwned;
use std::fmt;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// First pause of [`AgentClient::wait_ready`].
pub const READY_FIRST_PAUSE: Duration = Duration::from_millis(10);
/// Longest pause of [`AgentClient::wait_ready`].
pub const READY_MAX_PAUSE: Duration = Duration::from_millis(500);

/// Why an agent call failed.
#[derive(Debug)]
pub enum AgentError {
    /// The agent could not be reached or gave no usable HTTP answer.
    Access(AccessError),
    /// The agent refused the token (401): the pod's token and the
    /// daemon's differ.
    Unauthorized { message: String },
    /// The agent answered with an error (`{"error": {code, message}}`).
    Agent {
        status: u16,
        code: String,
        message: String,
    },
    /// The agent speaks another protocol (`agent: None`: the answer did
    /// not say, so it is not a kubegate workspace agent).
    Protocol { agent: Option<u32>, daemon: u32 },
    /// A 2xx answer the client cannot read.
    BadAnswer(String),
    /// [`AgentClient::wait_ready_or_stop`] was told to stop.
    Stopped,
}

impl AgentError {
    /// Worth another try while the pod starts: the agent is not answering
    /// yet (or the API server cannot reach it yet).
    pub fn is_transient(&self) -> bool {
        match self {
            AgentError::Access(AccessError::Kube(k)) => !matches!(
                k,
                KubeError::NotFound(_)
                    | KubeError::Unauthorized(_)
                    | KubeError::Forbidden(_)
                    | KubeError::Credentials(_)
                    | KubeError::Config(_)
            ),
            AgentError::Access(AccessError::Invalid(_)) => false,
            AgentError::Access(_) => true,
            AgentError::Agent { status, .. } => *status == 503,
            _ => false,
        }
    }
}

impl fmt::Display for AgentError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            AgentError::Access(e) => write!(f, "workspace agent: {e}"),
            AgentError::Unauthorized { message } => write!(
                f,
                "the workspace agent refused the session token (401 UNAUTHORIZED): {message}"
            ),
            AgentError::Agent {
                status,
                code,
                message,
            } => write!(f, "workspace agent: {status} {code}: {message}"),
            AgentError::Protocol {
                agent: None,
                daemon,
            } => write!(
                f,
                "the answer has no {PROTOCOL_HEADER} header: not a kubegate workspace agent \
                 (this daemon speaks agent protocol {daemon})"
            ),
            AgentError::Protocol {
                agent: Some(a),
                daemon,
            } => {
                let (which, fix) = if a < daemon {
                    (
                        "older",
                        "use the daemon's own release as cluster.workspace_image",
                    )
                } else {
                    ("newer", "upgrade the daemon, or pin cluster.workspace_image to the daemon's release")
                };
                write!(
                    f,
                    "the workspace agent speaks protocol {a}, this daemon protocol {daemon}: \
                     the kubegate image of the session pod is {which} than the daemon ({fix})"
                )
            }
            AgentError::BadAnswer(m) => write!(f, "workspace agent: unreadable answer: {m}"),
            AgentError::Stopped => f.write_str("stopped while waiting for the workspace agent"),
        }
    }
}

impl std::error::Error for AgentError {}

impl From<AccessError> for AgentError {
    fn from(e: AccessError) -> Self {
        AgentError::Access(e)
    }
}

/// The protocol header of an answer, checked against ours.
pub fn check_protocol(header: Option<&str>) -> Result<(), AgentError> {
    let agent = header.and_then(|v| v.trim().parse::<u32>().ok());
    match agent {
        Some(a) if a == AGENT_PROTOCOL => Ok(()),
        agent => Err(AgentError::Protocol {
            agent,
            daemon: AGENT_PROTOCOL,
        }),
    }
}

/// Percent-encodes a query value (RFC 3986 unreserved characters and `/`
/// stay as they are).
fn encode_query_value(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for b in s.bytes() {
        if b.is_ascii_alphanumeric() || b"-._~/".contains(&b) {
            out.push(b as char);
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}

/// One session pod's workspace agent.
#[derive(Clone)]
pub struct AgentClient {
    access: Arc<dyn PodAccess>,
    target: PodTarget,
    token: String,
    port: u16,
    limits: Limits,
    timeout: Duration,
    bulk_timeout: Duration,
}

impl fmt::Debug for AgentClient {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        // Never the token.
        f.debug_struct("AgentClient")
            .field("target", &self.target)
            .field("port", &self.port)
            .finish_non_exhaustive()
    }
}

impl AgentClient {
    /// The agent of `target` on its usual port, with the agent's default
    /// limits, 30 s for small calls and 120 s for applies and snapshots.
    pub fn new(access: Arc<dyn PodAccess>, target: PodTarget, token: &str) -> AgentClient {
        AgentClient {
            access,
            target,
            token: token.into(),
            port: DEFAULT_PORT,
            limits: Limits::default(),
            timeout: Duration::from_secs(30),
            bulk_timeout: Duration::from_secs(120),
        }
    }

    pub fn with_port(mut self, port: u16) -> AgentClient {
        self.port = port;
        self
    }

    /// The agent's limits (they bound the answers read).
    pub fn with_limits(mut self, limits: Limits) -> AgentClient {
        self.limits = limits;
        self
    }

    /// Timeouts of small calls and of applies and snapshots.
    pub fn with_timeouts(mut self, small: Duration, bulk: Duration) -> AgentClient {
        self.timeout = small;
        self.bulk_timeout = bulk;
        self
    }

    pub fn target(&self) -> &PodTarget {
        &self.target
    }

    fn small(&self, req: PodRequest) -> PodRequest {
        req.timeout(self.timeout).max_response_bytes(64 * 1024)
    }

    /// Sends `req` with the token; checks the protocol and the status.
    fn send(&self, req: PodRequest) -> Result<PodResponse, AgentError> {
        let req = req.header(TOKEN_HEADER, &self.token);
        let resp = self.access.request(&self.target, self.port, &req)?;
        check_protocol(resp.header(PROTOCOL_HEADER))?;
        if (200..300).contains(&resp.status) {
            return Ok(resp);
        }
        let (code, message) = match serde_json::from_slice::<ErrorBody>(&resp.body) {
            Ok(b) => (b.error.code, b.error.message),
            Err(_) => (
                String::new(),
                String::from_utf8_lossy(&resp.body)
                    .trim()
                    .chars()
                    .take(512)
                    .collect(),
            ),
        };
        Err(if resp.status == 401 {
            AgentError::Unauthorized { message }
        } else {
            AgentError::Agent {
                status: resp.status,
                code,
                message,
            }
        })
    }

    fn call<T: DeserializeOwned>(&self, req: PodRequest) -> Result<T, AgentError> {
        let resp = self.send(req)?;
        serde_json::from_slice(&resp.body).map_err(|e| AgentError::BadAnswer(e.to_string()))
    }

    /// `GET /version`: the agent's protocol (checked) and release.
    pub fn version(&self) -> Result<VersionInfo, AgentError> {
        let v: VersionInfo = self.call(self.small(PodRequest::get("/version")))?;
        if v.protocol != AGENT_PROTOCOL {
            return Err(AgentError::Protocol {
                agent: Some(v.protocol),
                daemon: AGENT_PROTOCOL,
            });
        }
        Ok(v)
    }

    /// `GET /workspace`: every listed file with its SHA-256.
    pub fn tree(&self) -> Result<Tree, AgentError> {
        let bound = self.limits.max_files.saturating_mul(4_300) + (1 << 20);
        self.call(
            PodRequest::get("/workspace")
                .timeout(self.bulk_timeout)
                .max_response_bytes(usize::try_from(bound).unwrap_or(usize::MAX)),
        )
    }

    /// `POST /workspace`: all or nothing.
    pub fn apply(
        &self,
        write: Vec<WriteItem>,
        delete: Vec<String>,
    ) -> Result<ApplyResult, AgentError> {
        let body = ApplyRequest {
            write: (!write.is_empty()).then_some(write),
            delete: (!delete.is_empty()).then_some(delete),
        };
        let body = serde_json::to_vec(&body).map_err(|e| AgentError::BadAnswer(e.to_string()))?;
        self.call(
            PodRequest::post("/workspace", body, "application/json")
                .timeout(self.bulk_timeout)
                .max_response_bytes(64 * 1024),
        )
    }

    /// `GET /workspace/file`: one file as text or base64.
    pub fn file(&self, path: &str, encoding: Encoding) -> Result<FileContent, AgentError> {
        // JSON may escape a control character as six bytes.
        let bound = self.limits.max_file_bytes.saturating_mul(6) + 64 * 1024;
        self.call(
            PodRequest::get(&format!(
                "/workspace/file?path={}&encoding={}",
                encode_query_value(path),
                encoding.as_str()
            ))
            .timeout(self.bulk_timeout)
            .max_response_bytes(usize::try_from(bound).unwrap_or(usize::MAX)),
        )
    }

    /// One file's bytes.
    pub fn file_bytes(&self, path: &str) -> Result<Vec<u8>, AgentError> {
        let f = self.file(path, Encoding::Base64)?;
        base64::engine::general_purpose::STANDARD
            .decode(f.content.as_bytes())
            .map_err(|e| AgentError::BadAnswer(format!("{path:?}: content is not base64: {e}")))
    }

    /// `GET /workspace/snapshot`: every listed file with its content.
    pub fn snapshot(&self) -> Result<Snapshot, AgentError> {
        let bound = (self.limits.body_cap() as u64)
            .saturating_add(self.limits.max_files.saturating_mul(4_300));
        self.call(
            PodRequest::get("/workspace/snapshot")
                .timeout(self.bulk_timeout)
                .max_response_bytes(usize::try_from(bound).unwrap_or(usize::MAX)),
        )
    }

    /// Rewrites a file with its own bytes (reload: the runtime notices a
    /// change). The file must exist.
    pub fn touch(&self, path: &str) -> Result<ApplyResult, AgentError> {
        let bytes = self.file_bytes(path)?;
        self.apply(vec![WriteItem::bytes(path, &bytes)], Vec::new())
    }

    /// Waits until the agent answers `GET /version` (docs/sessions.md#start
    /// step 4): the first try at once, then pauses of 10 ms doubling to 500 ms.
    /// A wrong token or another protocol is final at once; other errors are
    /// retried until `deadline`, and the last one is returned.
    pub fn wait_ready(&self, deadline: Instant) -> Result<VersionInfo, AgentError> {
        self.wait_ready_or_stop(deadline, &crossbeam_channel::never())
    }

    /// [`Self::wait_ready`], ended early (with [`AgentError::Stopped`]) when
    /// `stop` receives or is disconnected.
    pub fn wait_ready_or_stop(
        &self,
        deadline: Instant,
        stop: &Receiver<()>,
    ) -> Result<VersionInfo, AgentError> {
        let mut pause = READY_FIRST_PAUSE;
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            let attempt = self.clone().with_timeouts(
                left.min(self.timeout).max(Duration::from_millis(1)),
                self.bulk_timeout,
            );
            let err = match attempt.version() {
                Ok(v) => return Ok(v),
                Err(e) if e.is_transient() => e,
                Err(e) => return Err(e),
            };
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return Err(err);
            }
            log::debug!("workspace agent of {} not ready: {err}", self.target.name);
            match stop.recv_timeout(pause.min(left)) {
                Err(RecvTimeoutError::Timeout) => {}
                Ok(()) | Err(RecvTimeoutError::Disconnected) => return Err(AgentError::Stopped),
            }
            if Instant::now() >= deadline {
                return Err(err);
            }
            pause = (pause * 2).min(READY_MAX_PAUSE);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::session::access::direct::DirectAccess;

    #[test]
    fn protocol_mismatch_says_which_side_is_older() {
        assert!(check_protocol(Some(&AGENT_PROTOCOL.to_string())).is_ok());
        let older = check_protocol(Some("0")).unwrap_err().to_string();
        assert!(older.contains("is older than the daemon"), "{older}");
        let newer = check_protocol(Some(&(AGENT_PROTOCOL + 1).to_string()))
            .unwrap_err()
            .to_string();
        assert!(newer.contains("is newer than the daemon"), "{newer}");
        let none = check_protocol(None).unwrap_err().to_string();
        assert!(none.contains("not a kubegate workspace agent"), "{none}");
        assert!(matches!(
            check_protocol(Some("x")),
            Err(AgentError::Protocol { agent: None, .. })
        ));
    }

    #[test]
    fn query_values_are_encoded() {
        assert_eq!(
            encode_query_value("a/b c&d=e%é"),
            "a/b%20c%26d%3De%25%C3%A9"
        );
    }

    #[test]
    fn wait_ready_backs_off_until_the_deadline_and_returns_the_last_error() {
        // A port nothing listens on.
        let port = {
            let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
            l.local_addr().unwrap().port()
        };
        let c = AgentClient::new(
            Arc::new(DirectAccess::new()),
            PodTarget {
                namespace: "ns".into(),
                name: "p".into(),
                ip: "127.0.0.1".into(),
            },
            "t",
        )
        .with_port(port);
        let t0 = Instant::now();
        let e = c.wait_ready(t0 + Duration::from_millis(300)).unwrap_err();
        assert!(
            matches!(e, AgentError::Access(AccessError::Refused { .. })),
            "{e:?}"
        );
        let took = t0.elapsed();
        assert!(
            took >= Duration::from_millis(300) && took < Duration::from_secs(2),
            "{took:?}"
        );
        // A stop ends the wait at once.
        let (tx, rx) = crossbeam_channel::bounded(1);
        tx.send(()).unwrap();
        let t0 = Instant::now();
        let e = c
            .wait_ready_or_stop(t0 + Duration::from_secs(30), &rx)
            .unwrap_err();
        assert!(matches!(e, AgentError::Stopped), "{e:?}");
        assert!(t0.elapsed() < Duration::from_secs(2));
    }
}
