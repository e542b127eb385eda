//! The workspace agent as the engine uses it: the [`AgentOps`] seam (the
//! five operations a session's owner needs: wait for the agent, seed,
//! snapshot, list, touch), its error [`AgentOpError`], and its one
//! implementation over the pod-access seam and the agent client, the one
//! place the engine's view of the workspace agent meets the wire. Tests
//! may implement [`AgentOps`] with a fake.

use crate::agent::wire::{Encoding, WriteItem};
use crate::session::access::{PodAccess, PodTarget};
use crate::session::agent_client::{AgentClient, AgentError};
use std::fmt;
use std::sync::Arc;
use std::time::Instant;

/// Files to write through the agent (path, bytes).
pub type Files = Vec<(String, Vec<u8>)>;

/// The workspace agent, as the engine uses it (the pod-access seam and the
/// agent client implement it; tests may give a fake).
pub trait AgentOps: Send + Sync {
    /// Waits until the agent answers (first try at once, then backing off),
    /// or the deadline passes: the last error.
    fn wait_ready(&self, pod: &AgentTarget, deadline: Instant) -> Result<(), AgentOpError>;
    /// One apply writing every file.
    fn write_all(&self, pod: &AgentTarget, files: Files) -> Result<(), AgentOpError>;
    /// Every file of the workspace.
    fn snapshot(&self, pod: &AgentTarget) -> Result<Files, AgentOpError>;
    /// Every file's path and content hash (cheap next to a snapshot).
    fn tree(&self, pod: &AgentTarget) -> Result<Vec<(String, String)>, AgentOpError>;
    /// Rewrites `path` with its own bytes.
    fn touch(&self, pod: &AgentTarget, path: &str) -> Result<(), AgentOpError>;
}

/// Where a session's agent is.
#[derive(Debug, Clone)]
pub struct AgentTarget {
    pub namespace: String,
    pub pod: String,
    pub ip: String,
    pub token: String,
}

/// Why one of the engine's agent operations failed. The owner hands the
/// text to the machine (`AgentFailed`, `SeedFailed`, `CheckpointFailed`,
/// `ReloadFailed`), which shows it on the session's stream.
#[derive(Debug)]
pub enum AgentOpError {
    /// The agent, or the way to it, failed ([`AgentError`] says how).
    Agent(AgentError),
    /// A snapshot named a file whose content is not base64.
    SnapshotFile {
        path: String,
        reason: base64::DecodeError,
    },
}

impl fmt::Display for AgentOpError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            AgentOpError::Agent(e) => e.fmt(f),
            AgentOpError::SnapshotFile { path, reason } => {
                write!(f, "snapshot file {path}: {reason}")
            }
        }
    }
}

impl std::error::Error for AgentOpError {}

impl From<AgentError> for AgentOpError {
    fn from(e: AgentError) -> Self {
        AgentOpError::Agent(e)
    }
}

/// [`AgentOps`] over the pod-access seam: one [`AgentClient`] per call.
struct Ops {
    access: Arc<dyn PodAccess>,
}

impl Ops {
    fn client(&self, t: &AgentTarget) -> AgentClient {
        AgentClient::new(
            self.access.clone(),
            PodTarget {
                namespace: t.namespace.clone(),
                name: t.pod.clone(),
                ip: t.ip.clone(),
            },
            &t.token,
        )
    }
}

fn b64(d: &[u8]) -> String {
    use base64::Engine as _;
    base64::engine::general_purpose::STANDARD.encode(d)
}

impl AgentOps for Ops {
    fn wait_ready(&self, t: &AgentTarget, deadline: Instant) -> Result<(), AgentOpError> {
        self.client(t).wait_ready(deadline)?;
        Ok(())
    }

    fn write_all(&self, t: &AgentTarget, files: Files) -> Result<(), AgentOpError> {
        if files.is_empty() {
            return Ok(());
        }
        let write = files
            .into_iter()
            .map(|(path, data)| WriteItem {
                path,
                content: b64(&data),
                encoding: Some(Encoding::Base64),
            })
            .collect();
        self.client(t).apply(write, Vec::new())?;
        Ok(())
    }

    fn snapshot(&self, t: &AgentTarget) -> Result<Files, AgentOpError> {
        use base64::Engine as _;
        let snap = self.client(t).snapshot()?;
        snap.files
            .into_iter()
            .map(|f| {
                base64::engine::general_purpose::STANDARD
                    .decode(&f.content)
                    .map(|d| (f.path.clone(), d))
                    .map_err(|reason| AgentOpError::SnapshotFile {
                        path: f.path.clone(),
                        reason,
                    })
            })
            .collect()
    }

    fn tree(&self, t: &AgentTarget) -> Result<Vec<(String, String)>, AgentOpError> {
        let tree = self.client(t).tree()?;
        Ok(tree.files.into_iter().map(|f| (f.path, f.hash)).collect())
    }

    fn touch(&self, t: &AgentTarget, path: &str) -> Result<(), AgentOpError> {
        self.client(t).touch(path)?;
        Ok(())
    }
}

/// The agent operations over `access`.
pub fn agent_ops(access: Arc<dyn PodAccess>) -> Arc<dyn AgentOps> {
    Arc::new(Ops { access })
}
