//! Hostile input against real servers over real sockets: the hardening
//! issue's test binary, one module per hole it closed (docs/SECURITY.md
//! lists every input with its answer). Each test sends what an attacker
//! would, asserts the answer and what the daemon's metrics say, and checks
//! that an honest client (another principal) is still served afterwards.
//!
//! `cargo test --test hostile`; `cargo test --test hostile port_proxy` for
//! one module.

#[path = "../common/mod.rs"]
mod common;

mod bare_lf;
mod front_door;
mod pod_users;
mod port_proxy;
mod recordings;
mod sim_auth;
mod sim_proxy;
mod state_dir;
mod token_secret;
mod tunnels;
