//! The client's one error type, [`KubeError`]: a variant per thing a caller
//! can act on (retry, re-read and retry, relist, give up with a message).
//!
//! It owns the mapping from any non-2xx answer (decoded by
//! [`Status::from_response`], so plain-text 429s and proxies' HTML pages work
//! too) and from transport failures to a variant. It never does I/O, never
//! logs, and never holds a token: messages come from the server's Status or
//! from ureq/rustls errors, which do not carry request headers.

use crate::kube::status::{Status, StatusCause, StatusReason};
use std::fmt;
use std::time::Duration;

/// Everything a Kubernetes request can fail with. Variants that come from an
/// HTTP answer carry the server's [`Status`] (message, reason, details).
#[derive(Debug, Clone)]
pub enum KubeError {
    /// 404: the object (or its namespace) does not exist.
    NotFound(Box<Status>),
    /// 409 AlreadyExists: create of an existing name.
    AlreadyExists(Box<Status>),
    /// 409 Conflict: a stale resourceVersion (re-read, re-apply, retry).
    Conflict(Box<Status>),
    /// 422: the object failed validation; `causes` name the fields.
    Invalid {
        message: String,
        causes: Vec<StatusCause>,
        status: Box<Status>,
    },
    /// 400.
    BadRequest(Box<Status>),
    /// 401 (after the credentials were refreshed once).
    Unauthorized(Box<Status>),
    /// 403.
    Forbidden(Box<Status>),
    /// 429: the server asks to slow down (after the client's own retries).
    Throttled {
        retry_after: Option<Duration>,
        status: Box<Status>,
    },
    /// 410 Expired/Gone: a watch or list resourceVersion is too old; relist.
    Expired(Box<Status>),
    /// 5xx (after the client's own retries where they are safe).
    Server { code: u16, status: Box<Status> },
    /// Any other non-2xx answer (405, 406, 413, 415, …).
    Other { code: u16, status: Box<Status> },
    /// Connect, TLS, timeout or reset: no usable answer arrived.
    Transport(String),
    /// The server answered something this client cannot read (bad JSON, a
    /// body of the wrong kind).
    Protocol(String),
    /// The credentials could not be produced (token file, exec plugin).
    Credentials(String),
    /// The connection settings are unusable (bad URL, bad TLS material, a
    /// namespaced call on an all-namespaces `Api`).
    Config(String),
}

impl KubeError {
    /// Maps a non-2xx answer. `retry_after` is the `Retry-After` header, if
    /// any (it fills `details.retryAfterSeconds` when the body has none).
    pub fn from_response(
        code: u16,
        content_type: &str,
        body: &[u8],
        retry_after: Option<&str>,
    ) -> KubeError {
        let mut status = Status::from_response(code, content_type, body);
        if let Some(h) = retry_after {
            status.set_retry_after_header(h);
        }
        KubeError::from_status(code, status)
    }

    /// Maps a failure Status (from an HTTP answer or a watch ERROR event).
    /// The reason decides first; the HTTP code when the reason is unknown.
    pub fn from_status(code: u16, status: Status) -> KubeError {
        let code = if code == 0 || code == 200 {
            status.http_code()
        } else {
            code
        };
        let reason = status.reason();
        let status = Box::new(status);
        match (reason, code) {
            (StatusReason::NotFound, _) | (StatusReason::Unknown(_), 404) => {
                KubeError::NotFound(status)
            }
            (StatusReason::AlreadyExists, _) => KubeError::AlreadyExists(status),
            (StatusReason::Conflict, _) | (StatusReason::Unknown(_), 409) => {
                KubeError::Conflict(status)
            }
            (StatusReason::Invalid, _) | (StatusReason::Unknown(_), 422) => KubeError::Invalid {
                message: status.message.clone(),
                causes: status
                    .details
                    .as_ref()
                    .map(|d| d.causes.clone())
                    .unwrap_or_default(),
                status,
            },
            (StatusReason::BadRequest, _) | (StatusReason::Unknown(_), 400) => {
                KubeError::BadRequest(status)
            }
            (StatusReason::Unauthorized, _) | (_, 401) => KubeError::Unauthorized(status),
            (StatusReason::Forbidden, _) | (_, 403) => KubeError::Forbidden(status),
            (StatusReason::Expired | StatusReason::Gone, _) | (_, 410) => {
                KubeError::Expired(status)
            }
            (StatusReason::TooManyRequests, _) | (_, 429) => KubeError::Throttled {
                retry_after: status
                    .retry_after_seconds()
                    .map(|s| Duration::from_secs(u64::from(s))),
                status,
            },
            (_, 500..=599) => KubeError::Server { code, status },
            (
                StatusReason::InternalError
                | StatusReason::ServiceUnavailable
                | StatusReason::ServerTimeout
                | StatusReason::Timeout,
                _,
            ) => KubeError::Server { code, status },
            _ => KubeError::Other { code, status },
        }
    }

    /// True when the same request may succeed later unchanged: throttling,
    /// a 500/502/503/504, or a transport failure. (A Conflict needs a fresh
    /// read first, so it is not "retryable" here.)
    pub fn is_retryable(&self) -> bool {
        match self {
            KubeError::Throttled { .. } | KubeError::Transport(_) => true,
            KubeError::Server { code, .. } => matches!(code, 500 | 502 | 503 | 504),
            _ => false,
        }
    }

    /// The server's Status, when the error came from an answer.
    pub fn status(&self) -> Option<&Status> {
        match self {
            KubeError::NotFound(s)
            | KubeError::AlreadyExists(s)
            | KubeError::Conflict(s)
            | KubeError::BadRequest(s)
            | KubeError::Unauthorized(s)
            | KubeError::Forbidden(s)
            | KubeError::Expired(s) => Some(s),
            KubeError::Invalid { status, .. }
            | KubeError::Throttled { status, .. }
            | KubeError::Server { status, .. }
            | KubeError::Other { status, .. } => Some(status),
            KubeError::Transport(_)
            | KubeError::Protocol(_)
            | KubeError::Credentials(_)
            | KubeError::Config(_) => None,
        }
    }

    /// The HTTP code of the answer, if there was one.
    pub fn code(&self) -> Option<u16> {
        self.status().map(Status::http_code)
    }

    /// The server's `Retry-After` (header or `retryAfterSeconds`), if any.
    pub fn retry_after(&self) -> Option<Duration> {
        match self {
            KubeError::Throttled { retry_after, .. } => *retry_after,
            other => other
                .status()
                .and_then(Status::retry_after_seconds)
                .map(|s| Duration::from_secs(u64::from(s))),
        }
    }

    pub fn is_not_found(&self) -> bool {
        matches!(self, KubeError::NotFound(_))
    }

    pub fn is_conflict(&self) -> bool {
        matches!(self, KubeError::Conflict(_))
    }
}

impl fmt::Display for KubeError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            KubeError::Transport(m) => write!(f, "cannot reach the Kubernetes API: {m}"),
            KubeError::Protocol(m) => write!(f, "unreadable answer from the Kubernetes API: {m}"),
            KubeError::Credentials(m) => write!(f, "Kubernetes credentials: {m}"),
            KubeError::Config(m) => write!(f, "Kubernetes client configuration: {m}"),
            other => {
                // Every remaining variant carries a Status.
                match other.status() {
                    Some(s) => write!(f, "{s} ({})", s.http_code()),
                    None => f.write_str("Kubernetes API error"),
                }
            }
        }
    }
}

impl std::error::Error for KubeError {}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn maps_statuses() {
        let e = KubeError::from_status(404, Status::not_found("", "pods", "x"));
        assert!(e.is_not_found());
        assert_eq!(e.code(), Some(404));
        let e = KubeError::from_status(409, Status::already_exists("", "pods", "x"));
        assert!(matches!(e, KubeError::AlreadyExists(_)));
        let e = KubeError::from_status(409, Status::conflict_stale("", "pods", "x"));
        assert!(e.is_conflict());
        let e = KubeError::from_status(410, Status::expired("too old"));
        assert!(matches!(e, KubeError::Expired(_)));
        let e = KubeError::from_status(503, Status::service_unavailable("down"));
        assert!(matches!(e, KubeError::Server { code: 503, .. }));
        assert!(e.is_retryable());
        let e = KubeError::from_status(500, Status::internal_error("boom"));
        assert!(e.is_retryable());
        let e = KubeError::from_status(401, Status::unauthorized());
        assert!(matches!(e, KubeError::Unauthorized(_)));
        assert!(!e.is_retryable());
    }

    #[test]
    fn plain_text_429_keeps_retry_after() {
        let e = KubeError::from_response(
            429,
            "text/plain; charset=utf-8",
            crate::kube::status::TOO_MANY_REQUESTS_TEXT.as_bytes(),
            Some("3"),
        );
        match e {
            KubeError::Throttled { retry_after, .. } => {
                assert_eq!(retry_after, Some(Duration::from_secs(3)))
            }
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn invalid_carries_causes() {
        let s = Status::invalid(
            "",
            "Pod",
            "x",
            &[crate::kube::status::FieldError::required(
                "spec.containers",
                "",
            )],
        );
        match KubeError::from_status(422, s) {
            KubeError::Invalid {
                causes, message, ..
            } => {
                assert_eq!(causes.len(), 1);
                assert_eq!(causes[0].field, "spec.containers");
                assert!(message.contains("is invalid"), "{message}");
            }
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn html_from_a_proxy_is_a_server_error() {
        let e = KubeError::from_response(502, "text/html", b"<html>bad gateway</html>", None);
        assert!(matches!(e, KubeError::Server { code: 502, .. }));
    }
}
