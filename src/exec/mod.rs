//! The exec gateway (exec.md): validated, capped, workspace-checked exec
//! into pods of labelled Deployments.
//!
//! - `frames`: the interactive wire format (sans-IO, shared with the CLI);
//! - `validate`: request rules and limits (sans-IO);
//! - `resolve`: Deployment -> ReplicaSet -> Pod (rules sans-IO, then the API calls).

pub mod audit;
pub mod frames;
pub mod gateway;
pub mod record;
pub mod resolve;
pub mod slots;
pub mod validate;

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
