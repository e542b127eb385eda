//! The daemon (`kubegate serve`), split by concern:
//!
//! - [`serve`]: the process: signals, config, process settings, the
//!   SIGHUP/SIGTERM loop;
//! - [`daemon`]: start-up in the order
//!   docs/cli.md#kubegate-serve-and-kubegate-check-config sets (config, state
//!   directory, cluster, sessions restored, listener, ready) and shutdown;
//! - [`systemd`]: the readiness line and `NOTIFY_SOCKET` messages;
//! - [`demo`]: sim mode: the embedded sim and the demo workspace;
//! - `routes`: the front door's handler, its one routing table and the
//!   routes by resource (health, metrics, exec, workspaces, sessions,
//!   events, ports), with the admission of request heads;
//! - [`auth`]: bearer tokens to principals; [`limits`]: the front door's
//!   caps and body budget; [`state_dir`]: the state directory's checks and
//!   modes; [`settings`]: the exec gateway's settings from the config;
//!   [`memory`]: the allocator's arenas.
//!
//! Every error status of the routes comes from [`crate::api::Code::status`].

pub mod auth;
pub mod daemon;
pub mod demo;
pub mod limits;
pub mod memory;
mod routes;
pub mod serve;
pub mod settings;
pub mod state_dir;
pub mod systemd;

pub use daemon::{Daemon, StartError};
pub use serve::serve_main;
