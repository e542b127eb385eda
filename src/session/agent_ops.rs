//! The engine's [`AgentOps`] over the pod-access seam and the agent client:
//! the one place the engine's view of the workspace agent meets the wire.

use super::access::{self, PodAccess, PodTarget};
use super::agent_client::AgentClient;
use super::engine::{AgentOps, AgentTarget, Files};
use crate::agent::wire::{Encoding, WriteItem};
use crate::config::ClusterSection;
use crate::kube::client::Client;
use std::sync::Arc;
use std::time::Instant;

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
    fn wait_ready(&self, t: &AgentTarget, deadline: Instant) -> Result<(), String> {
        self.client(t)
            .wait_ready(deadline)
            .map(|_| ())
            .map_err(|e| e.to_string())
    }

    fn write_all(&self, t: &AgentTarget, files: Files) -> Result<(), String> {
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
        self.client(t)
            .apply(write, Vec::new())
            .map(|_| ())
            .map_err(|e| e.to_string())
    }

    fn snapshot(&self, t: &AgentTarget) -> Result<Files, String> {
        use base64::Engine as _;
        let snap = self.client(t).snapshot().map_err(|e| e.to_string())?;
        snap.files
            .into_iter()
            .map(|f| {
                base64::engine::general_purpose::STANDARD
                    .decode(&f.content)
                    .map(|d| (f.path.clone(), d))
                    .map_err(|e| format!("snapshot file {}: {e}", f.path))
            })
            .collect()
    }

    fn tree(&self, t: &AgentTarget) -> Result<Vec<(String, String)>, String> {
        let tree = self.client(t).tree().map_err(|e| e.to_string())?;
        Ok(tree.files.into_iter().map(|f| (f.path, f.hash)).collect())
    }

    fn touch(&self, t: &AgentTarget, path: &str) -> Result<(), String> {
        self.client(t)
            .touch(path)
            .map(|_| ())
            .map_err(|e| e.to_string())
    }
}

/// The pod-access seam for `[cluster] pod_access`.
pub fn pod_access(cluster: &ClusterSection, client: &Client) -> Arc<dyn PodAccess> {
    access::from_config(cluster.pod_access(), client)
}

/// The agent operations over `access`.
pub fn agent_ops(access: Arc<dyn PodAccess>) -> Arc<dyn AgentOps> {
    Arc::new(Ops { access })
}
