//! The port proxy helper: one HTTP exchange with an app's port for the
//! daemon's `…/ports/{port}/{path}` route, headers filtered both ways.

use crate::http::hop::end_to_end_headers;
use crate::session::access::{AccessError, PodAccess, PodRequest, PodResponse, PodTarget};
use std::time::Duration;
use ureq::http::Method;

/// Bounds of one proxied exchange.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ProxyLimits {
    /// The whole exchange: 60 s (api-proxy: see `session::access`).
    pub timeout: Duration,
    /// The app's answer body: 16 MiB (the answer is read whole).
    pub max_response_bytes: usize,
}

impl Default for ProxyLimits {
    fn default() -> Self {
        ProxyLimits {
            timeout: Duration::from_secs(60),
            max_response_bytes: 16 << 20,
        }
    }
}

/// One HTTP exchange with `port` of the pod for the daemon's port proxy
/// route, within the default [`ProxyLimits`]. The client's hop-by-hop
/// headers, its `Authorization` (kubegate's credential, not the app's) and
/// the headers the API server or kubelet interpret
/// ([`forward_headers`](crate::session::proxy_path::forward_headers)) are
/// dropped; so are the answer's hop-by-hop and framing headers (the body
/// comes back whole; the route frames it anew). The app's status, errors
/// included, is the answer; `AccessError` is for no answer at all.
pub fn proxy_http(
    access: &dyn PodAccess,
    target: &PodTarget,
    port: u16,
    method: Method,
    path_and_query: &str,
    headers: &[(String, String)],
    body: Option<Vec<u8>>,
) -> Result<PodResponse, AccessError> {
    let limits = ProxyLimits::default();
    let req = PodRequest {
        method,
        path: path_and_query.to_string(),
        headers: crate::session::proxy_path::forward_headers(headers),
        body,
        timeout: limits.timeout,
        max_response_bytes: limits.max_response_bytes,
        idle: None,
    };
    let mut resp = access.request(target, port, &req)?;
    resp.headers = end_to_end_headers(&resp.headers, &[]);
    Ok(resp)
}
