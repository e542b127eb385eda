//! The exec gateway (docs/exec.md): validated, capped, workspace-checked exec
//! into pods of labelled Deployments.
//!
//! - `frames`: the interactive wire format and the resolved [`frames::Target`]
//!   (sans-IO, shared with the CLI and the soak);
//! - `validate`: request rules and limits (sans-IO);
//! - `resolve`: Deployment -> ReplicaSet -> Pod (rules sans-IO, then the API calls);
//! - `gateway`: admission, the one-shot exec, the audit line and metrics;
//! - `interactive`: an admitted interactive exec's threads and limits;
//! - `tunnel`: a Deployment's TCP tunnel: its checks, target and audit line;
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
pub mod tunnel;
pub mod validate;
