//! The exec gateway (exec.md): validated, capped, workspace-checked exec
//! into pods of labelled Deployments.
//!
//! - `frames`: the interactive wire format (sans-IO, shared with the CLI).

pub mod frames;

use serde::{Deserialize, Serialize};

/// The resolved target, returned with every result (exec.md step 7).
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
