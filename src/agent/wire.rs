//! The agent's protocol (docs/agent.md, "Protocol"): everything both ends
//! must agree on, and the only part of `agent` the daemon's session and
//! runner code (and the CLI) import. The in-pod server is the rest of
//! [`crate::agent`]; its client in the daemon is `session::agent_client`.
//!
//! - here: the protocol version and the headers that carry it and the
//!   token, the token's environment variable, the agent's port, the
//!   workspace [`Limits`] (and the request-body cap they imply), and the
//!   JSON bodies of every route.
//! - [`paths`]: the path rules, sans-IO (string -> normalised relative
//!   path; excluded and temporary names; the rules on one apply's plan).
//!
//! Requests are strict (unknown fields refused: a client of another
//! version must not have its fields silently ignored); answers are read
//! leniently by the client (an agent may add fields).
//!
//! Out of scope: I/O of any kind (the folder is `agent::fs`, the routes
//! `agent`'s server, the client `session::agent_client`).

pub mod paths;

use serde::{Deserialize, Serialize};

/// The agent's protocol version. The daemon refuses an agent that speaks
/// another (`GET /version`, and [`PROTOCOL_HEADER`] on every response).
pub const AGENT_PROTOCOL: u32 = 1;

/// Sent on every response, errors and `/healthz` included.
pub const PROTOCOL_HEADER: &str = "X-Kubegate-Agent-Protocol";

/// The request header that carries the token where `Authorization` cannot
/// (the API server's pod proxy drops it).
pub const TOKEN_HEADER: &str = "X-Kubegate-Agent-Token";

/// The environment variable that carries the bearer token.
pub const TOKEN_ENV: &str = "KUBEGATE_WORKSPACE_TOKEN";

/// The port the pod spec gives the agent.
pub const DEFAULT_PORT: u16 = 8099;

/// The workspace limits (the defaults of docs/config.md#sessions-watch-sessions).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limits {
    /// Largest single file written, read or snapshotted. Default 8 MiB.
    pub max_file_bytes: u64,
    /// Most files in the workspace (the tree's count). Default 10,000.
    pub max_files: u64,
    /// Largest sum of file sizes in the workspace. Default 64 MiB.
    pub max_total_bytes: u64,
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            max_file_bytes: 8 << 20,
            max_files: 10_000,
            max_total_bytes: 64 << 20,
        }
    }
}

impl Limits {
    /// The request-body cap of `POST /workspace`: the total limit as
    /// base64 (4/3), plus 512 bytes of JSON and path per file, plus 1 MiB.
    pub fn body_cap(&self) -> usize {
        let b = (self.max_total_bytes / 3 + 1)
            .saturating_mul(4)
            .saturating_add(self.max_files.saturating_mul(512))
            .saturating_add(1 << 20);
        usize::try_from(b).unwrap_or(usize::MAX)
    }
}

/// How file content travels in JSON.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Encoding {
    #[default]
    Utf8,
    Base64,
}

impl Encoding {
    pub fn parse(s: &str) -> Option<Encoding> {
        match s {
            "utf8" => Some(Encoding::Utf8),
            "base64" => Some(Encoding::Base64),
            _ => None,
        }
    }

    pub fn as_str(self) -> &'static str {
        match self {
            Encoding::Utf8 => "utf8",
            Encoding::Base64 => "base64",
        }
    }
}

/// `POST /workspace`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ApplyRequest {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub write: Option<Vec<WriteItem>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub delete: Option<Vec<String>>,
}

/// One file of an apply.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct WriteItem {
    pub path: String,
    pub content: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub encoding: Option<Encoding>,
}

impl WriteItem {
    /// A file given as text.
    pub fn utf8(path: &str, text: &str) -> WriteItem {
        WriteItem {
            path: path.into(),
            content: text.into(),
            encoding: Some(Encoding::Utf8),
        }
    }

    /// A file given as bytes (sent as base64).
    pub fn bytes(path: &str, content: &[u8]) -> WriteItem {
        use base64::Engine as _;
        WriteItem {
            path: path.into(),
            content: base64::engine::general_purpose::STANDARD.encode(content),
            encoding: Some(Encoding::Base64),
        }
    }
}

/// The answer to `POST /workspace`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct ApplyResult {
    pub written: u64,
    pub deleted: u64,
}

/// `GET /version`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct VersionInfo {
    pub protocol: u32,
    pub version: String,
}

/// One entry of `GET /workspace`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct TreeEntry {
    pub path: String,
    /// SHA-256 of the content, lowercase hex.
    pub hash: String,
}

/// `GET /workspace`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Tree {
    pub files: Vec<TreeEntry>,
}

/// `GET /workspace/file`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct FileContent {
    pub content: String,
    /// In bytes (of the file, not of `content`).
    pub size: u64,
}

/// One file of `GET /workspace/snapshot`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SnapshotFile {
    pub path: String,
    pub hash: String,
    pub content: String,
    /// Always base64 in what the agent writes.
    pub encoding: Encoding,
}

/// `GET /workspace/snapshot`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Snapshot {
    pub files: Vec<SnapshotFile>,
}

/// `{"error": {"code", "message"}}`, as the client reads it.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
pub struct ErrorBody {
    pub error: ErrorDetail,
}

#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
pub struct ErrorDetail {
    pub code: String,
    pub message: String,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn body_cap_covers_base64_of_the_total() {
        let l = Limits::default();
        assert!(l.body_cap() as u64 > l.max_total_bytes / 3 * 4 + l.max_files * 100);
        let tiny = Limits {
            max_file_bytes: 1,
            max_files: 1,
            max_total_bytes: 3,
        };
        assert_eq!(tiny.body_cap(), 8 + 512 + (1 << 20));
    }
}
