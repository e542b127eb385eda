//! `GET /healthz` (the process answers), `GET /readyz` (the cluster
//! answers `/version` and the state directory takes a write; on the
//! overflow path the last result while it is recent) and `GET /metrics`
//! (the Prometheus text of [`crate::metrics::Metrics`]).

use std::time::{Duration, Instant};

use serde_json::Value;

use super::FrontDoor;
use crate::api::{ApiError, Code};
use crate::http::Response;
use crate::kube::client::rest::Request as KubeRequest;
use crate::kube::client::{Client, KubeError};

/// How long a `/readyz` result answers for on the overflow path.
const READY_CACHE: Duration = Duration::from_secs(60);

/// `{"status":"ok"}`.
pub(super) fn healthz() -> Response {
    Response::json(200, br#"{"status":"ok"}"#.to_vec())
}

fn ready() -> Response {
    Response::json(200, br#"{"status":"ready"}"#.to_vec())
}

fn not_ready(why: &str) -> Response {
    ApiError::new(Code::NotReady, why).response()
}

/// The cluster's `gitVersion` from `/version` (start-up and `/readyz`).
pub(in crate::server) fn cluster_version(client: &Client) -> Result<String, KubeError> {
    let v: Value = client.send_json(&KubeRequest::get("/version"))?;
    Ok(v.get("gitVersion")
        .and_then(Value::as_str)
        .unwrap_or("unknown")
        .to_string())
}

/// Writes and removes an empty probe file in `dir`.
pub(in crate::server) fn check_writable(dir: &std::path::Path) -> std::io::Result<()> {
    let probe = dir.join(format!(".probe-{}", std::process::id()));
    std::fs::write(&probe, b"")?;
    std::fs::remove_file(&probe)
}

impl FrontDoor {
    /// `/readyz`: probes, and remembers the answer for the overflow path.
    pub(super) fn readiness(&self) -> Response {
        let r = self.readiness_probe();
        *self.ready_cache.lock() = Some((Instant::now(), r.status == 200));
        r
    }

    fn readiness_probe(&self) -> Response {
        if let Err(e) = cluster_version(&self.probe) {
            log::warn!("readyz: cluster: {e}");
            return not_ready("the cluster does not answer");
        }
        if let Err(e) = check_writable(&self.state_dir) {
            log::warn!("readyz: state directory: {e}");
            return not_ready("the state directory is not writable");
        }
        ready()
    }

    /// `/readyz` on the overflow path: the last probe's result while it is
    /// recent (the probe itself may take the probe client's deadline).
    pub(super) fn cached_readiness(&self) -> Response {
        match *self.ready_cache.lock() {
            Some((at, true)) if at.elapsed() < READY_CACHE => ready(),
            Some((at, false)) if at.elapsed() < READY_CACHE => {
                not_ready("the cluster does not answer")
            }
            _ => {
                not_ready("every connection slot is taken and no recent readiness result is known")
            }
        }
    }

    /// `GET /metrics`.
    pub(super) fn metrics_page(&self) -> Response {
        Response::new(
            200,
            "text/plain; version=0.0.4; charset=utf-8",
            self.metrics.render().into_bytes(),
        )
    }
}
