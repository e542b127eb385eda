//! The agent's JSON bodies (docs/agent.md, "Protocol"), shared by the
//! agent (`agent::Agent`) and its client in the daemon
//! (`session::agent_client`), so both ends read and write one definition.
//!
//! Requests are strict (unknown fields refused: a client of another
//! version must not have its fields silently ignored); answers are read
//! leniently by the client (an agent may add fields).

use serde::{Deserialize, Serialize};

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
