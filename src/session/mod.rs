//! Watch sessions (docs/sessions.md), in two layers.
//!
//! **The sans-IO core** decides; nothing in it opens a socket, reads a
//! clock or a file, or starts a thread (inputs carry the time, outputs are
//! commands), so its tests run without a cluster:
//!
//! - [`spec`]: the start request and the app set: strict serde types for
//!   the shapes of docs/api.md#sessions, and validation into a `SessionSpec` (codes
//!   `INVALID_APP_NAME` … `INVALID_BUNDLE`, `BAD_REQUEST`).
//! - [`pod`]: pure builders of the session's Kubernetes objects (the pod,
//!   its token Secret, Service and Ingress), the endpoints list, the pod
//!   name and labels, and the readings of a pod the machine needs.
//! - [`gateway`]: the Gateway API layer: one HTTPRoute per published tcp
//!   port, and a route's status, bounded by its Gateway's, read as the
//!   endpoint's routing state.
//! - [`machine`]: the per-session state machine: inputs the engine
//!   observes, commands it must carry out, events for the SSE stream; and
//!   a session rebuilt from its record after a daemon restart.
//! - [`sse`]: the server-sent-events parser (the relay's and the CLI's).
//! - [`frame`]: the debug frame rule (the relay's, the runner's, the CLI's).
//! - [`recover`]: the container log lines written after the last output
//!   (a re-adoption's recovery of the downtime's output).
//! - [`reaper`]: which orphan watch pods to delete, and when.
//!
//! **The engine** carries the core's commands out on threads:
//!
//! - [`engine`]: the registry, one owner thread per session
//!   (`session-<id>`) with short-lived `session-work` threads, restore at
//!   start, checkpoint and record files, the event log, the orphan
//!   reaper's thread (`session-reaper`), the Gateway's reader
//!   (`session-gateway`);
//! - [`io`]: each app's output ring, attach streams (`kube-remote-io`),
//!   the io socket (`session-io-out`, `session-io-in`), the persisted
//!   rings; its [`io::wire`] is the socket's format the CLI shares;
//! - [`relay`]: the debug relays (two connector threads, one
//!   `session-relay-pump` epoll thread), the prober (`session-probe`) and
//!   the port proxy helper;
//! - [`pod_hub`]: the one watch of every session pod (`session-pods`);
//! - [`access`]: the pod-access seam (`api-proxy` or `direct`), every
//!   connection to a session pod's ports; no thread of its own;
//! - [`agent_client`]: the workspace agent's client over that seam;
//! - [`proxy_path`]: the port proxy's request-target checked and
//!   re-encoded, the one parser of a port from a path, the headers it
//!   forwards.
//!
//! Design and choices: docs/sessions.md.

pub mod access;
pub mod agent_client;
pub mod engine;
pub mod frame;
pub mod gateway;
pub mod io;
pub mod machine;
pub mod pod;
pub mod pod_hub;
pub mod proxy_path;
pub mod reaper;
pub mod recover;
pub mod relay;
pub mod spec;
pub mod sse;
#[cfg(test)]
mod test_http;

use rand::Rng;

/// Length of a session id.
pub const SESSION_ID_LEN: usize = 12;

/// A new session id: 12 characters of `[a-z0-9]`, starting with a letter
/// (it is part of DNS labels: `kubegate-run-<id>`, `<port>-<id>.<domain>`),
/// about 61 bits of randomness.
pub fn new_session_id(rng: &mut impl Rng) -> String {
    const LETTERS: &[u8] = b"abcdefghijklmnopqrstuvwxyz";
    const ALNUM: &[u8] = b"abcdefghijklmnopqrstuvwxyz0123456789";
    let mut id = String::with_capacity(SESSION_ID_LEN);
    id.push(LETTERS[rng.random_range(0..LETTERS.len())] as char);
    for _ in 1..SESSION_ID_LEN {
        id.push(ALNUM[rng.random_range(0..ALNUM.len())] as char);
    }
    id
}

/// Whether `s` has the shape [`new_session_id`] makes (route parameters are
/// checked with it before any lookup).
pub fn is_session_id(s: &str) -> bool {
    s.len() == SESSION_ID_LEN
        && s.as_bytes()[0].is_ascii_lowercase()
        && s.bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn session_ids() {
        let mut rng = rand::rng();
        for _ in 0..200 {
            let id = new_session_id(&mut rng);
            assert!(is_session_id(&id), "{id}");
            assert!(crate::kube::names::check_dns_label(&id).is_ok());
        }
        assert!(!is_session_id("0abcdefghijk"));
        assert!(!is_session_id("abc"));
        assert!(!is_session_id("abcdefghijkL"));
    }
}
