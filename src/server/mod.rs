//! The daemon (`kubegate serve`): start-up in the order front-door.md sets
//! (config, state directory, cluster, listener, ready), the front door's
//! routes, and shutdown.
//!
//! `daemon.rs` owns start-up, the health routes and the stop path. Exec,
//! sessions and authentication arrive in later steps; until then every
//! route other than `/healthz` and `/readyz` is `NOT_FOUND`.

pub mod auth;
pub mod daemon;
pub mod limits;
pub mod memory;
pub mod state_dir;

pub use daemon::{serve_main, Daemon, StartError};
