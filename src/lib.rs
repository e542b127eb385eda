//! kubegate: a synchronous, threaded gateway between developer tools and a
//! Kubernetes cluster, plus the simulated cluster it is tested against.
//!
//! Module map and the invariants between modules: docs/ARCHITECTURE.md.
//! Dependencies point one way: `http` knows no domain; `kube` knows nothing
//! above it; `sim` uses only `kube`'s wire formats and `http`.

pub mod agent;
pub mod api;
pub mod auth;
pub mod cli;
pub mod config;
pub mod exec;
pub mod exit;
pub mod files;
pub mod ha;
pub mod http;
pub mod kube;
pub mod metrics;
pub mod runner;
pub mod server;
pub mod session;
pub mod signals;
pub mod sim;
pub mod timer;
pub mod token;

#[doc(hidden)]
pub mod fuzzing;
