//! The daemon's outside vocabulary, in ONE place
//! (docs/api.md#error-codes-and-statuses): every error code, the HTTP status it
//! maps to, and the JSON shape `{"error": {"code", "message", "details"?}}`; and who is asking
//! ([`identity`]: the principal and its workspaces). The front door, the
//! exec gateway and the command-line client all use these; nothing else
//! spells a code or picks an error status.

pub mod identity;

pub use identity::{Credential, Identity, Workspace};

use serde::{Deserialize, Serialize};
use serde_json::{json, Value};
use std::fmt;

/// Every error code the daemon answers with.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "SCREAMING_SNAKE_CASE")]
pub enum Code {
    Unauthorized,
    NotFound,
    MethodNotAllowed,
    BodyTooLarge,
    HeadersTooLarge,
    BadRequest,
    Overloaded,
    NotReady,
    Internal,
    ExecInvalid,
    ExecTargetForbidden,
    ExecTargetNotFound,
    ExecTargetNotReady,
    ExecOutputLimit,
    ExecAborted,
    ExecFailed,
    /// A per-principal or overall exec concurrency limit is reached.
    ExecTooMany,
    /// A session app name that is not a DNS label (or too long for
    /// `app-<name>`).
    InvalidAppName,
    /// Two apps of one session share a name.
    DuplicateAppName,
    /// An app named `workspace` (the workspace container's name).
    ReservedAppName,
    /// Two apps declare the same protocol/port, or a port kubegate uses.
    PortConflict,
    /// A bundle or entry path that is not relative, normalised, inside the
    /// workspace.
    InvalidPath,
    /// Bad base64, a size or count over the limits, an entry not in the bundle.
    InvalidBundle,
    /// `sessions.max_sessions` or `sessions.max_sessions_per_principal` reached.
    TooManySessions,
    /// The operation needs a running session.
    NotRunning,
    /// `resume` of a session that is not suspended.
    NotSuspended,
    /// More reloads than `sessions.reloads_per_minute`.
    ReloadRateLimited,
    /// A workspace write or snapshot over the file-size, file-count or
    /// total-size limit (docs/agent.md).
    WorkspaceLimit,
    /// The principal may not do this (start sessions without
    /// `may_start_sessions`).
    Forbidden,
    /// The session's app did not answer on that port (refused, unreachable
    /// or timed out) through the port proxy route.
    PortUnreachable,
    /// The session's workspace agent did not answer usably.
    WorkspaceUnavailable,
    /// A port proxy path with a dot-segment, an encoded slash, a backslash
    /// or a control character, or a port not written canonically
    /// (`session::proxy_path`).
    InvalidProxyPath,
    /// A per-principal connection limit (io sockets, event streams,
    /// port-proxy streams) or the per-peer limit on connections that have
    /// not authenticated is reached.
    TooManyConnections,
    /// A tunnel to a port kubegate itself uses in a session's pod (the
    /// workspace agent's, an app runner's inspect port).
    PortReserved,
    /// An OpenID Connect token past its `exp` (leeway included).
    TokenExpired,
    /// An OpenID Connect token before its `nbf` or `iat` (leeway included).
    TokenNotYetValid,
    /// A JWT that is malformed, lacks a required claim, lives longer than
    /// the issuer's cap, or whose signature no key of its issuer verifies.
    TokenInvalid,
    /// A JWT whose `aud` (or `azp`) names none of its issuer's audiences.
    TokenAudience,
    /// A JWT whose `iss` names no configured issuer.
    TokenIssuer,
    /// A JWT signed with `none`, an HMAC algorithm, or an algorithm its key
    /// (the issuer's JWK) does not have.
    TokenAlgorithm,
    /// A verified token whose claims fail the issuer's
    /// `claim_validation_rules`, whose mapped name or groups fail
    /// `user_validation_rules` (`system:`), whose email is not verified, or
    /// whose name is a static principal's.
    IdentityRefused,
    /// A verified identity that no `[[oidc.rule]]` matches.
    NoMatchingRule,
    /// No cached key verifies the token and its issuer cannot be reached.
    IssuerUnavailable,
}

impl Code {
    pub const ALL: [Code; 43] = [
        Code::Unauthorized,
        Code::NotFound,
        Code::MethodNotAllowed,
        Code::BodyTooLarge,
        Code::HeadersTooLarge,
        Code::BadRequest,
        Code::Overloaded,
        Code::NotReady,
        Code::Internal,
        Code::ExecInvalid,
        Code::ExecTargetForbidden,
        Code::ExecTargetNotFound,
        Code::ExecTargetNotReady,
        Code::ExecOutputLimit,
        Code::ExecAborted,
        Code::ExecFailed,
        Code::ExecTooMany,
        Code::InvalidAppName,
        Code::DuplicateAppName,
        Code::ReservedAppName,
        Code::PortConflict,
        Code::InvalidPath,
        Code::InvalidBundle,
        Code::TooManySessions,
        Code::NotRunning,
        Code::NotSuspended,
        Code::ReloadRateLimited,
        Code::WorkspaceLimit,
        Code::Forbidden,
        Code::PortUnreachable,
        Code::WorkspaceUnavailable,
        Code::InvalidProxyPath,
        Code::TooManyConnections,
        Code::PortReserved,
        Code::TokenExpired,
        Code::TokenNotYetValid,
        Code::TokenInvalid,
        Code::TokenAudience,
        Code::TokenIssuer,
        Code::TokenAlgorithm,
        Code::IdentityRefused,
        Code::NoMatchingRule,
        Code::IssuerUnavailable,
    ];

    /// The wire spelling (`EXEC_INVALID`).
    pub fn as_str(self) -> &'static str {
        match self {
            Code::Unauthorized => "UNAUTHORIZED",
            Code::NotFound => "NOT_FOUND",
            Code::MethodNotAllowed => "METHOD_NOT_ALLOWED",
            Code::BodyTooLarge => "BODY_TOO_LARGE",
            Code::HeadersTooLarge => "HEADERS_TOO_LARGE",
            Code::BadRequest => "BAD_REQUEST",
            Code::Overloaded => "OVERLOADED",
            Code::NotReady => "NOT_READY",
            Code::Internal => "INTERNAL",
            Code::ExecInvalid => "EXEC_INVALID",
            Code::ExecTargetForbidden => "EXEC_TARGET_FORBIDDEN",
            Code::ExecTargetNotFound => "EXEC_TARGET_NOT_FOUND",
            Code::ExecTargetNotReady => "EXEC_TARGET_NOT_READY",
            Code::ExecOutputLimit => "EXEC_OUTPUT_LIMIT",
            Code::ExecAborted => "EXEC_ABORTED",
            Code::ExecFailed => "EXEC_FAILED",
            Code::ExecTooMany => "EXEC_TOO_MANY",
            Code::InvalidAppName => "INVALID_APP_NAME",
            Code::DuplicateAppName => "DUPLICATE_APP_NAME",
            Code::ReservedAppName => "RESERVED_APP_NAME",
            Code::PortConflict => "PORT_CONFLICT",
            Code::InvalidPath => "INVALID_PATH",
            Code::InvalidBundle => "INVALID_BUNDLE",
            Code::TooManySessions => "TOO_MANY_SESSIONS",
            Code::NotRunning => "NOT_RUNNING",
            Code::NotSuspended => "NOT_SUSPENDED",
            Code::ReloadRateLimited => "RELOAD_RATE_LIMITED",
            Code::WorkspaceLimit => "WORKSPACE_LIMIT",
            Code::Forbidden => "FORBIDDEN",
            Code::PortUnreachable => "PORT_UNREACHABLE",
            Code::WorkspaceUnavailable => "WORKSPACE_UNAVAILABLE",
            Code::InvalidProxyPath => "INVALID_PROXY_PATH",
            Code::TooManyConnections => "TOO_MANY_CONNECTIONS",
            Code::PortReserved => "PORT_RESERVED",
            Code::TokenExpired => "TOKEN_EXPIRED",
            Code::TokenNotYetValid => "TOKEN_NOT_YET_VALID",
            Code::TokenInvalid => "TOKEN_INVALID",
            Code::TokenAudience => "TOKEN_AUDIENCE",
            Code::TokenIssuer => "TOKEN_ISSUER",
            Code::TokenAlgorithm => "TOKEN_ALGORITHM",
            Code::IdentityRefused => "IDENTITY_REFUSED",
            Code::NoMatchingRule => "NO_MATCHING_RULE",
            Code::IssuerUnavailable => "ISSUER_UNAVAILABLE",
        }
    }

    pub fn parse(s: &str) -> Option<Code> {
        Code::ALL.into_iter().find(|c| c.as_str() == s)
    }

    /// The HTTP status of this code (docs/api.md#error-codes-and-statuses).
    pub fn status(self) -> u16 {
        match self {
            Code::Unauthorized
            | Code::TokenExpired
            | Code::TokenNotYetValid
            | Code::TokenInvalid
            | Code::TokenAudience
            | Code::TokenIssuer
            | Code::TokenAlgorithm
            | Code::IdentityRefused => 401,
            Code::NotFound | Code::ExecTargetNotFound => 404,
            Code::MethodNotAllowed => 405,
            Code::BodyTooLarge | Code::WorkspaceLimit => 413,
            Code::HeadersTooLarge => 431,
            Code::BadRequest
            | Code::ExecInvalid
            | Code::InvalidAppName
            | Code::DuplicateAppName
            | Code::ReservedAppName
            | Code::PortConflict
            | Code::InvalidPath
            | Code::InvalidBundle
            | Code::InvalidProxyPath => 400,
            Code::ExecTargetForbidden
            | Code::Forbidden
            | Code::PortReserved
            | Code::NoMatchingRule => 403,
            Code::ExecTargetNotReady
            | Code::TooManySessions
            | Code::NotRunning
            | Code::NotSuspended => 409,
            Code::ExecOutputLimit => 422,
            Code::ExecTooMany | Code::ReloadRateLimited | Code::TooManyConnections => 429,
            Code::ExecAborted => 499,
            Code::ExecFailed | Code::PortUnreachable | Code::WorkspaceUnavailable => 502,
            Code::Overloaded | Code::NotReady | Code::IssuerUnavailable => 503,
            Code::Internal => 500,
        }
    }
}

impl fmt::Display for Code {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// One error as the daemon reports it.
#[derive(Debug, Clone, PartialEq)]
pub struct ApiError {
    pub code: Code,
    pub message: String,
    pub details: Option<Value>,
}

impl ApiError {
    pub fn new(code: Code, message: impl Into<String>) -> ApiError {
        ApiError {
            code,
            message: message.into(),
            details: None,
        }
    }

    pub fn with_details(mut self, details: Value) -> ApiError {
        self.details = Some(details);
        self
    }

    pub fn status(&self) -> u16 {
        self.code.status()
    }

    /// `{"error": {"code", "message", "details"?}}`.
    pub fn body(&self) -> Value {
        let mut e = json!({"code": self.code.as_str(), "message": self.message});
        if let Some(d) = &self.details {
            e["details"] = d.clone();
        }
        json!({ "error": e })
    }

    /// Reads the error shape back (the command-line client's side). Unknown
    /// codes keep their text in the message.
    pub fn from_body(status: u16, body: &[u8]) -> ApiError {
        #[derive(Deserialize)]
        struct Outer {
            error: Inner,
        }
        #[derive(Deserialize)]
        struct Inner {
            code: String,
            #[serde(default)]
            message: String,
            #[serde(default)]
            details: Option<Value>,
        }
        match serde_json::from_slice::<Outer>(body) {
            Ok(o) => match Code::parse(&o.error.code) {
                Some(code) => ApiError {
                    code,
                    message: o.error.message,
                    details: o.error.details,
                },
                None => ApiError::new(
                    Code::Internal,
                    format!("{}: {}", o.error.code, o.error.message),
                ),
            },
            Err(_) => ApiError::new(
                Code::Internal,
                format!(
                    "HTTP {status}: {}",
                    String::from_utf8_lossy(&body[..body.len().min(200)])
                ),
            ),
        }
    }
}

impl ApiError {
    /// An error the HTTP server answers itself, in our vocabulary.
    pub fn from_http(err: &crate::http::HttpError) -> ApiError {
        use crate::http::HttpError;
        match err {
            HttpError::BadRequest(m) => ApiError::new(Code::BadRequest, m.clone()),
            HttpError::HeadersTooLarge => {
                ApiError::new(Code::HeadersTooLarge, "request head too large")
            }
            HttpError::BodyTooLarge { limit } => ApiError::new(
                Code::BodyTooLarge,
                format!("request body larger than {limit} bytes"),
            ),
            HttpError::Overloaded => ApiError::new(Code::Overloaded, "too many connections"),
            HttpError::Busy => ApiError::new(
                Code::Overloaded,
                "the daemon holds as many request bodies as it allows; retry later",
            ),
            HttpError::TooManyConnections => ApiError::new(
                Code::TooManyConnections,
                "too many connections from this address have not authenticated",
            ),
            HttpError::Internal => ApiError::new(Code::Internal, "internal error"),
        }
    }

    /// The HTTP answer: the status of the code and the JSON shape.
    pub fn response(&self) -> crate::http::Response {
        crate::http::Response::json(self.status(), self.body().to_string().into_bytes())
    }

    /// The answer to an error the server found itself: our JSON body, the
    /// server's status (431 and 503 are HTTP's own).
    pub fn http_response(err: &crate::http::HttpError) -> crate::http::Response {
        let mut r = ApiError::from_http(err).response();
        r.status = err.status();
        r
    }
}

impl fmt::Display for ApiError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}", self.code, self.message)
    }
}

impl std::error::Error for ApiError {}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn contract_statuses() {
        let pinned = [
            ("UNAUTHORIZED", 401),
            ("NOT_FOUND", 404),
            ("BODY_TOO_LARGE", 413),
            ("BAD_REQUEST", 400),
            ("EXEC_INVALID", 400),
            ("EXEC_TARGET_FORBIDDEN", 403),
            ("EXEC_TARGET_NOT_FOUND", 404),
            ("EXEC_TARGET_NOT_READY", 409),
            ("EXEC_OUTPUT_LIMIT", 422),
            ("EXEC_ABORTED", 499),
            ("EXEC_FAILED", 502),
            ("INVALID_APP_NAME", 400),
            ("DUPLICATE_APP_NAME", 400),
            ("RESERVED_APP_NAME", 400),
            ("PORT_CONFLICT", 400),
            ("INVALID_PATH", 400),
            ("INVALID_BUNDLE", 400),
            ("TOO_MANY_SESSIONS", 409),
            ("NOT_RUNNING", 409),
            ("NOT_SUSPENDED", 409),
            ("RELOAD_RATE_LIMITED", 429),
        ];
        for (s, status) in pinned {
            let c = Code::parse(s).expect(s);
            assert_eq!(c.status(), status, "{s}");
            assert_eq!(c.as_str(), s);
        }
    }

    #[test]
    fn every_code_round_trips_through_its_spelling_and_serde() {
        for c in Code::ALL {
            assert_eq!(Code::parse(c.as_str()), Some(c));
            let v = serde_json::to_value(c).unwrap();
            assert_eq!(v, Value::String(c.as_str().into()));
        }
    }

    #[test]
    fn body_shape_and_back() {
        let e = ApiError::new(
            Code::ExecOutputLimit,
            "stdout exceeded the 10 byte output limit",
        )
        .with_details(json!({"stream": "stdout", "limitBytes": 10}));
        let b = e.body();
        assert_eq!(b["error"]["code"], "EXEC_OUTPUT_LIMIT");
        assert_eq!(b["error"]["details"]["limitBytes"], 10);
        let back = ApiError::from_body(422, b.to_string().as_bytes());
        assert_eq!(back, e);
        let plain = ApiError::new(Code::NotFound, "no such route").body();
        assert!(plain["error"].get("details").is_none());
        let garbage = ApiError::from_body(502, b"<html>bad gateway</html>");
        assert_eq!(garbage.code, Code::Internal);
        assert!(garbage.message.contains("HTTP 502"));
    }
}
