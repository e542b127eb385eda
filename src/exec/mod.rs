//! The exec gateway (docs/exec.md): validated, capped, workspace-checked exec
//! into pods of labelled Deployments.
//!
//! - `frames`: the interactive wire format (sans-IO, shared with the CLI);
//! - `validate`: request rules and limits (sans-IO);
//! - `resolve`: Deployment -> ReplicaSet -> Pod (rules sans-IO, then the API calls);
//! - `gateway`: admission, the one-shot exec, the audit line and metrics;
//! - `interactive`: an admitted interactive exec's threads and limits;
//! - `slots`: the concurrency limits; `audit`: the JSON-lines audit log;
//!   `record`: asciinema recordings.
//!
//! `exec` reads no configuration file types: the daemon builds its
//! [`gateway::Settings`] (`server::settings`).

pub mod audit;
pub mod frames;
pub mod gateway;
pub mod interactive;
pub mod record;
pub mod resolve;
pub mod slots;
pub mod validate;

use serde::{Deserialize, Serialize};

/// The resolved target, returned with every result (docs/exec.md#resolving-the-target).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Target {
    pub namespace: String,
    pub deployment: String,
    pub deployment_uid: String,
    pub pod: String,
    pub pod_uid: String,
    pub container: String,
}
