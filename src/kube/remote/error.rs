//! The one error type of the exec/attach client. Each variant is something
//! a caller can act on: fix the request, re-authenticate, retry the
//! connection, show the server's Status, or report that the process's
//! outcome is unknown. Messages never contain a token.

use crate::http::client::UpgradeError;
use crate::kube::channel::ExecStatusError;
use crate::kube::connection::CredentialsError;
use crate::kube::status::Status;
use crate::kube::tls_client::TlsError;
use std::fmt;

#[derive(Debug, Clone, PartialEq)]
pub enum RemoteError {
    /// The request cannot be made as asked: no stream selected, an empty
    /// command, a server URL this client cannot use, stdin not requested.
    InvalidRequest(String),
    /// The credentials could not produce a token (exec plugin, token file).
    Credentials(CredentialsError),
    /// The TLS configuration could not be built from the TLS material.
    Tls(TlsError),
    /// Connecting, the TLS handshake or the upgrade exchange failed or timed
    /// out at the transport level. Nothing ran; retrying may help.
    Transport(String),
    /// The server answered the upgrade with something that is not a valid
    /// channel WebSocket (bad 101, no or unknown subprotocol). Nothing ran.
    Handshake(UpgradeError),
    /// The server refused the upgrade with an HTTP error carrying a
    /// Kubernetes Status: 404 pod not found, 400 container not valid, 400 no
    /// host assigned, 401/403, 5xx. Nothing ran.
    Api { code: u16, status: Box<Status> },
    /// Channel 3 carried a Failure that is not an exit code (e.g.
    /// InternalError "container main is not running"), or a status that
    /// could not be decoded.
    Status(ExecStatusError),
    /// The stream ended without any channel-3 status (cut, reset, idle,
    /// cancelled): the process's outcome is unknown. Never reported as exit
    /// code 0. `ended` says how the stream ended.
    NoStatus { ended: String },
    /// `v4.channel.k8s.io` was negotiated, which has no stdin half-close:
    /// the process cannot be sent EOF without closing the whole stream,
    /// which can truncate its output (see `StdinWriter::close`).
    HalfCloseUnsupported,
    /// The stream is over (or is closing): stdin and resizes can no longer
    /// be sent.
    Closed,
}

impl fmt::Display for RemoteError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            RemoteError::InvalidRequest(m) => write!(f, "invalid exec/attach request: {m}"),
            RemoteError::Credentials(e) => write!(f, "credentials: {e}"),
            RemoteError::Tls(e) => write!(f, "TLS: {e}"),
            RemoteError::Transport(m) => f.write_str(m),
            RemoteError::Handshake(m) => write!(f, "websocket upgrade: {m}"),
            RemoteError::Api { status, .. } => write!(f, "{status}"),
            RemoteError::Status(e) => write!(f, "{e}"),
            RemoteError::NoStatus { ended } => {
                write!(f, "exec stream ended without exit status: {ended}")
            }
            RemoteError::HalfCloseUnsupported => f.write_str(
                "v4.channel.k8s.io cannot close stdin alone (no half-close); closing the whole stream may truncate output",
            ),
            RemoteError::Closed => f.write_str("the exec/attach stream is closed"),
        }
    }
}

impl std::error::Error for RemoteError {}

impl From<CredentialsError> for RemoteError {
    fn from(e: CredentialsError) -> Self {
        RemoteError::Credentials(e)
    }
}

impl From<TlsError> for RemoteError {
    fn from(e: TlsError) -> Self {
        RemoteError::Tls(e)
    }
}
