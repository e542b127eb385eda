//! TCP tunnels (docs/api.md#tunnels): `GET /v1/sessions/{id}/tunnels/{port}`
//! to any TCP port of the session's pod but kubegate's own, and `GET
//! /v1/exec/tunnel?project=P&uid=U&deployment=D&port=N` to a pod of a
//! workspace Deployment, behind the exec gateway's checks. Each is one
//! WebSocket (`kubegate.tunnel.v1`) per TCP connection.
//!
//! Order: the principal and, for a session, that the session is theirs,
//! come from the head (admission: another principal's session is 404
//! like an unknown one, before anything else); then the upgrade and the
//! port are checked, the pod is resolved now (a tunnel follows the
//! session, not a pod: every connection asks for the current one) and
//! connected through the pod-access seam, all before the upgrade, so
//! these failures are HTTP errors. Then `http::tunnel::splice` carries the
//! bytes; its end goes to the audit log and the metrics.

use std::time::{Duration, Instant, SystemTime};

use super::{require_websocket, FrontDoor};
use crate::api::{ApiError, Code, Identity};
use crate::exec::audit::TunnelRecord;
use crate::exec::frames::Target;
use crate::http::tunnel::{splice, Duplex, SpliceOptions, MAX_MESSAGE, SUBPROTOCOL};
use crate::http::ws::WsOptions;
use crate::http::{Reply, Request, Upgrade};
use crate::session::access::{AccessError, PodAccess, PodTarget};
use crate::session::engine::Handle;
use crate::session::proxy_path::parse_port;
use crate::session::spec::{AGENT_PORT, INSPECT_BASE_PORT};

/// How long the pod's port may take to accept the connection.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(10);

/// A tunnel's clocks (`server.tunnel_idle_timeout_secs`,
/// `server.tunnel_max_duration_secs`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(in crate::server) struct TunnelLimits {
    pub idle: Duration,
    pub max_duration: Duration,
}

/// What a tunnel's audit line and log line say about where it goes.
struct Opened {
    principal: String,
    /// `session` or `deployment` (the metrics' kind).
    kind: &'static str,
    session: Option<String>,
    workspace: Option<String>,
    target: Option<Target>,
    pod: String,
    port: u16,
}

/// The port of a tunnel's path, from the raw request-target (its last
/// segment, written canonically: the port proxy's one parser).
fn path_port(target: &str) -> Result<u16, ApiError> {
    let path = target.split(['?', '#']).next().unwrap_or("");
    let last = path.rsplit('/').next().unwrap_or("");
    parse_port(last).ok_or_else(|| {
        ApiError::new(
            Code::BadRequest,
            format!("tunnel port {last:?}: expected 1-65535 in decimal, no sign or leading zero"),
        )
    })
}

/// Whether `port` is one kubegate itself uses in a session pod of `napps`
/// apps: the workspace agent's, an app runner's inspect port.
fn reserved(port: u16, napps: usize) -> Option<String> {
    let inspect = INSPECT_BASE_PORT..INSPECT_BASE_PORT.saturating_add(napps as u16);
    if port == AGENT_PORT {
        Some(format!("tcp port {port} is the workspace agent's"))
    } else if inspect.contains(&port) {
        Some(format!(
            "tcp port {port} is app {}'s inspect port (its app runner's debug stream)",
            port - INSPECT_BASE_PORT
        ))
    } else {
        None
    }
}

/// A failed connection to the pod's port, before the upgrade.
fn access_error(port: u16, e: &AccessError) -> ApiError {
    ApiError::new(Code::PortUnreachable, format!("port {port}: {e}"))
}

fn millis(d: Duration) -> u64 {
    u64::try_from(d.as_millis()).unwrap_or(u64::MAX)
}

impl FrontDoor {
    /// `GET /v1/sessions/{id}/tunnels/{port}` (the session is the
    /// caller's: checked from the head, and again by the lookup).
    pub(super) fn session_tunnel(
        &self,
        who: &Identity,
        h: &Handle,
        req: &Request,
    ) -> Result<Reply, ApiError> {
        require_websocket(req, SUBPROTOCOL)?;
        let port = path_port(&req.target)?;
        let napps = h.view()["apps"].as_array().map_or(0, Vec::len);
        if let Some(why) = reserved(port, napps) {
            return Err(ApiError::new(
                Code::PortReserved,
                format!("{why}: kubegate's own ports cannot be tunnelled"),
            ));
        }
        let (pod, ip) = h
            .pod()
            .ok_or_else(|| ApiError::new(Code::NotRunning, "the session has no pod now"))?;
        let target = PodTarget {
            namespace: self.engine.namespace().to_string(),
            name: pod.clone(),
            ip,
        };
        let opened = Opened {
            principal: who.name.clone(),
            kind: "session",
            session: Some(h.id.clone()),
            workspace: None,
            target: None,
            pod,
            port,
        };
        self.open_tunnel(self.engine.access().as_ref(), &target, opened)
    }

    /// `GET /v1/exec/tunnel?project=P&uid=U&deployment=D[&container=C]&port=N`:
    /// the exec gateway's checks (validation, the principal's workspace:
    /// `EXEC_*` codes, before any cluster call), the Deployment's pod,
    /// then as a session's tunnel.
    pub(super) fn exec_tunnel(&self, who: &Identity, req: &Request) -> Result<Reply, ApiError> {
        require_websocket(req, SUBPROTOCOL)?;
        let port = parse_port(req.query("port").unwrap_or("")).ok_or_else(|| {
            ApiError::new(
                Code::ExecInvalid,
                "port must be 1-65535 in decimal, no sign or leading zero",
            )
        })?;
        // A tunnel runs no command: `command` is not looked at.
        let spec = super::exec::query_spec(req);
        self.gateway.check_tunnel(who, &spec)?;
        let mut opened = Opened {
            principal: who.name.clone(),
            kind: "deployment",
            session: None,
            workspace: Some(format!("{}/{}", spec.project, spec.uid)),
            pod: String::new(),
            target: None,
            port,
        };
        let started = Instant::now();
        let (target, ip) = match self.gateway.tunnel_target(who, &spec) {
            Ok(t) => t,
            Err(e) => {
                // Checked, then refused by the cluster's answer (another
                // workspace's Deployment, none, none ready): audited and
                // counted like an exec's.
                self.tunnel_ended(&opened, e.code.as_str(), (0, 0), started);
                return Err(e);
            }
        };
        let pod = PodTarget {
            namespace: target.namespace.clone(),
            name: target.pod.clone(),
            ip,
        };
        opened.pod.clone_from(&target.pod);
        opened.target = Some(target);
        // Into a workspace: as the principal under `[cluster] impersonate`
        // (a session's own tunnels stay the daemon's).
        let access = match self.gateway.as_principal(who) {
            Ok(acting) if acting.impersonating() => self
                .engine
                .access()
                .with_client(acting.client(&self.gateway)),
            Ok(_) => self.engine.access().clone(),
            Err(e) => {
                self.tunnel_ended(&opened, e.code.as_str(), (0, 0), started);
                return Err(e);
            }
        };
        self.open_tunnel(access.as_ref(), &pod, opened)
    }

    /// Connects to the pod's port, then answers the upgrade; the splice
    /// runs on the connection's thread once upgraded.
    fn open_tunnel(
        &self,
        access: &dyn PodAccess,
        pod: &PodTarget,
        o: Opened,
    ) -> Result<Reply, ApiError> {
        let started = Instant::now();
        let far = match access.tunnel(pod, o.port, CONNECT_TIMEOUT) {
            Ok(far) => far,
            Err(e) => {
                let e = access_error(o.port, &e);
                self.tunnel_ended(&o, e.code.as_str(), (0, 0), started);
                return Err(e);
            }
        };
        let ping = self.gateway.settings().ping_interval;
        let opts = SpliceOptions {
            idle_timeout: Some(self.tunnel_limits.idle),
            max_duration: Some(self.tunnel_limits.max_duration),
            ws: WsOptions {
                ping_interval: Some(ping),
                // A client that answers no ping for four intervals is gone.
                idle_timeout: Some(ping * 4),
                close_timeout: Duration::from_secs(5),
            },
            stop: Some(self.gateway.stop_signal()),
        };
        let door = TunnelEnv {
            metrics: self.metrics.clone(),
            gateway: self.gateway.clone(),
        };
        Ok(Reply::Upgrade(Upgrade {
            protocol: Some(SUBPROTOCOL.to_string()),
            headers: Vec::new(),
            max_message_bytes: MAX_MESSAGE,
            on_open: Box::new(move |conn| door.run(conn.into_websocket(), far, opts, &o)),
        }))
    }

    /// The metrics, log and audit line of a tunnel that never opened.
    fn tunnel_ended(&self, o: &Opened, end: &str, bytes: (u64, u64), started: Instant) {
        TunnelEnv {
            metrics: self.metrics.clone(),
            gateway: self.gateway.clone(),
        }
        .ended(o, end, bytes, started);
    }
}

/// What a tunnel needs of the front door once upgraded.
struct TunnelEnv {
    metrics: std::sync::Arc<crate::metrics::Metrics>,
    gateway: std::sync::Arc<crate::exec::gateway::Gateway>,
}

impl TunnelEnv {
    fn run(
        &self,
        ws: tungstenite::WebSocket<crate::http::Socket>,
        far: Duplex,
        opts: SpliceOptions,
        o: &Opened,
    ) {
        let started = Instant::now();
        let kind = format!("kind=\"{}\"", o.kind);
        self.metrics.add("kubegate_tunnels_active", kind.clone(), 1);
        let totals = splice(ws, far, opts);
        self.metrics.add("kubegate_tunnels_active", kind, -1);
        self.ended(o, totals.end.as_str(), (totals.up, totals.down), started);
    }

    fn ended(&self, o: &Opened, end: &str, (up, down): (u64, u64), started: Instant) {
        let m = &self.metrics;
        m.inc(
            "kubegate_tunnels_total",
            format!("kind=\"{}\",end=\"{}\"", o.kind, crate::metrics::label(end)),
        );
        m.add("kubegate_tunnel_bytes_total", "direction=\"in\"", up as i64);
        m.add(
            "kubegate_tunnel_bytes_total",
            "direction=\"out\"",
            down as i64,
        );
        let elapsed = started.elapsed();
        log::info!(
            "tunnel by {} to {}:{} ({}): {end} ({up} bytes in, {down} out, {} ms)",
            o.principal,
            o.pod,
            o.port,
            o.session
                .as_deref()
                .or(o.workspace.as_deref())
                .unwrap_or("-"),
            elapsed.as_millis()
        );
        self.gateway.audit_tunnel(&TunnelRecord {
            time: crate::kube::time::rfc3339(SystemTime::now()),
            principal: &o.principal,
            kind: "tunnel",
            session: o.session.as_deref(),
            workspace: o.workspace.clone(),
            target: o.target.as_ref(),
            pod: &o.pod,
            port: o.port,
            end,
            bytes_in: up,
            bytes_out: down,
            duration_ms: millis(elapsed),
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_port_is_the_last_segment_written_canonically() {
        assert_eq!(path_port("/v1/sessions/s/tunnels/5432").ok(), Some(5432));
        assert_eq!(path_port("/v1/sessions/s/tunnels/80?x=1").ok(), Some(80));
        for bad in ["08080", "%38080", "+80", "0", "65536", "", "80 ", "8o"] {
            let t = format!("/v1/sessions/s/tunnels/{bad}");
            let e = path_port(&t).expect_err(bad);
            assert_eq!(e.code, Code::BadRequest, "{bad}");
        }
    }

    #[test]
    fn kubegates_own_ports_are_reserved() {
        assert!(reserved(AGENT_PORT, 1).is_some());
        assert!(reserved(INSPECT_BASE_PORT, 1).is_some());
        assert!(reserved(INSPECT_BASE_PORT + 1, 2).is_some());
        assert!(reserved(INSPECT_BASE_PORT + 2, 2).is_none());
        assert!(reserved(5432, 3).is_none());
        assert!(reserved(8080, 0).is_none());
    }
}
