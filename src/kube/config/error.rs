//! `KubeconfigError`: why no `Connection` could be built. Every message names
//! the file (or `<inline kubeconfig>`, or the service-account folder) and the
//! key at fault, and never quotes a secret: decoder errors are replaced by
//! our own wording rather than passed through, since base64, PEM, YAML and
//! JSON errors can echo the offending bytes.

use std::fmt;

/// Broad classes, for callers that react differently (e.g. `auto`, or a
/// daemon that exits 2 on configuration errors but retries I/O errors).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum KubeconfigErrorKind {
    /// Nothing to load: no kubeconfig file exists, no current-context.
    NoConfig,
    /// The configuration is malformed or inconsistent (bad YAML, unknown
    /// context, bad base64 or PEM, a key that does not match its
    /// certificate).
    Invalid,
    /// A valid setting kubegate deliberately does not support (proxy-url,
    /// basic auth, auth-provider, impersonation, interactive plugins).
    Unsupported,
    /// A referenced file could not be read.
    Io,
    /// Credentials could not be obtained (an exec plugin failed at load
    /// time, a token file is empty).
    Credentials,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct KubeconfigError {
    pub kind: KubeconfigErrorKind,
    /// The file the faulty setting came from (a path as given), or a label
    /// such as `<inline kubeconfig>`.
    pub origin: Option<String>,
    /// The key at fault, e.g. `users[dev].client-key-data`.
    pub key: Option<String>,
    pub message: String,
}

impl KubeconfigError {
    pub fn new(kind: KubeconfigErrorKind, message: impl Into<String>) -> KubeconfigError {
        KubeconfigError {
            kind,
            origin: None,
            key: None,
            message: message.into(),
        }
    }

    pub(crate) fn at(
        kind: KubeconfigErrorKind,
        origin: &str,
        key: impl Into<String>,
        message: impl Into<String>,
    ) -> KubeconfigError {
        let key = key.into();
        KubeconfigError {
            kind,
            origin: Some(origin.to_string()),
            key: (!key.is_empty()).then_some(key),
            message: message.into(),
        }
    }
}

impl fmt::Display for KubeconfigError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if let Some(o) = &self.origin {
            write!(f, "{o}: ")?;
        }
        if let Some(k) = &self.key {
            write!(f, "{k}: ")?;
        }
        f.write_str(&self.message)
    }
}

impl std::error::Error for KubeconfigError {}
