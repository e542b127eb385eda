//! `pods/NAME/portforward`, served the three ways clients ask for it
//! (docs/portforward-wire.md; the choices: docs/sim.md#port-forward):
//!
//! - kubectl 1.31+: a WebSocket GET offering `SPDY/3.1+portforward.k8s.io`,
//!   whose binary messages carry SPDY/3 bytes (`spdy`);
//! - kubectl's fallback (`KUBECTL_PORT_FORWARD_WEBSOCKETS=false`): POST
//!   with `Upgrade: SPDY/3.1`, a raw upgrade (`http::raw`) carrying the
//!   same SPDY (`spdy`);
//! - the kubelet's v4 WebSocket (`v4.channel.k8s.io`,
//!   `v4.base64.channel.k8s.io`, or no subprotocol), ports in `?ports=`,
//!   used by the JavaScript and Python clients (`v4`).
//!
//! Each forwarded connection dials the pod's IP (loopback, the pod runs as
//! local processes) on the port asked for, as `sim::proxy` does. The pod
//! must be bound and Running. A pod deleted (or replaced under the same
//! name) ends its forwards: checked every [`POD_CHECK`].

pub(crate) mod pod;
mod spdy;
mod v4;

use super::kubelet::Kubelet;
use super::resources::Resource;
use super::store::Store;
use crate::http::{Reply, Request, Response};
use crate::kube::status::Status;
use std::sync::Arc;
use std::time::Duration;

/// The SPDY subprotocol of port-forward (`X-Stream-Protocol-Version`).
pub const PORT_FORWARD_V1: &str = "portforward.k8s.io";
/// kubectl's WebSocket subprotocol: SPDY tunnelled in binary messages.
pub const TUNNEL_PROTOCOL: &str = "SPDY/3.1+portforward.k8s.io";
/// v4 binary channels.
pub const V4_BINARY: &str = "v4.channel.k8s.io";
/// v4 channels in text messages, base64.
pub const V4_BASE64: &str = "v4.base64.channel.k8s.io";

/// How often a forward checks that its pod still exists.
pub const POD_CHECK: Duration = Duration::from_millis(250);
/// Largest message accepted in kubectl's SPDY tunnel: its writes are at
/// most 32 KiB + a frame head.
const MAX_TUNNEL_MESSAGE: usize = 1 << 20;
/// Largest v4 message: the Python client sends what one `recv(1 MiB)`
/// gave, plus its channel byte.
const MAX_V4_MESSAGE: usize = 2 << 20;

fn status(s: Status) -> Reply {
    Response::json(s.http_code(), s.to_json()).into()
}

/// The pod a forward reaches.
#[derive(Clone)]
pub(crate) struct PodRef {
    store: Arc<Store>,
    pub ns: String,
    pub name: String,
    pub uid: String,
    pub ip: String,
}

impl PodRef {
    /// True once the pod is deleted, terminating, or replaced.
    pub fn gone(&self) -> bool {
        match self.store.get(Resource::Pod, &self.ns, &self.name) {
            Ok(p) => {
                p["metadata"]["uid"].as_str() != Some(self.uid.as_str())
                    || !p["metadata"]["deletionTimestamp"].is_null()
            }
            Err(_) => true,
        }
    }
}

/// Which form a request asks for.
enum Form {
    Tunnel,
    Spdy,
    V4 {
        base64: bool,
        protocol: Option<String>,
    },
}

/// The form, or the refusal upstream answers with.
fn form(req: &Request) -> Result<Form, Reply> {
    if req.is_websocket_upgrade() {
        let offered = req.websocket_protocols();
        // The API server's test (`IsWebSocketRequestWithTunnelingProtocol`).
        if offered
            .iter()
            .any(|p| p.starts_with("SPDY/3.1+") && p.ends_with(".k8s.io"))
        {
            return if offered.iter().any(|p| p == TUNNEL_PROTOCOL) {
                Ok(Form::Tunnel)
            } else {
                Err(no_common_protocol(&offered))
            };
        }
        if offered.is_empty() {
            return Ok(Form::V4 {
                base64: false,
                protocol: None,
            });
        }
        return match offered
            .iter()
            .find(|p| *p == V4_BINARY || *p == V4_BASE64)
        {
            Some(p) => Ok(Form::V4 {
                base64: p == V4_BASE64,
                protocol: Some(p.clone()),
            }),
            None => Err(status(Status::bad_request(&format!(
                "unable to upgrade: unable to negotiate protocol: client supports {offered:?}, server supports [\"{V4_BINARY}\" \"{V4_BASE64}\" \"\"]"
            )))),
        };
    }
    let has = |name: &str, token: &str| {
        req.headers.iter().any(|(k, v)| {
            k.eq_ignore_ascii_case(name)
                && v.split(',')
                    .any(|t| t.trim().to_ascii_lowercase().contains(token))
        })
    };
    if !(has("connection", "upgrade") && has("upgrade", "spdy/3.1")) {
        return Err(status(Status::bad_request(
            "unable to upgrade: missing upgrade headers in request",
        )));
    }
    let versions: Vec<String> = req
        .headers
        .iter()
        .filter(|(k, _)| k.eq_ignore_ascii_case("x-stream-protocol-version"))
        .flat_map(|(_, v)| v.split(','))
        .map(|s| s.trim().to_string())
        .filter(|s| !s.is_empty())
        .collect();
    if versions.is_empty() {
        // Upstream's handshake writes nothing here and Go's server sends
        // an empty 200; kubectl says `unable to upgrade connection: `.
        return Err(Response::empty(200).into());
    }
    if !versions.iter().any(|v| v == PORT_FORWARD_V1) {
        return Err(no_common_protocol(&versions));
    }
    Ok(Form::Spdy)
}

/// The kubelet's 403 when no SPDY subprotocol matches.
fn no_common_protocol(offered: &[String]) -> Reply {
    let s = Status::forbidden_message_only(&format!(
        "unable to upgrade: unable to negotiate protocol: client supports {offered:?}, server accepts [\"{PORT_FORWARD_V1}\"]"
    ));
    Response::json(403, s.to_json())
        .with_header("X-Accepted-Stream-Protocol-Versions", PORT_FORWARD_V1)
        .into()
}

impl Kubelet {
    /// `pods/portforward` (see the module doc).
    pub(crate) fn serve_port_forward(&self, req: &Request, ns: &str, name: &str) -> Reply {
        let pod = match self.store.get(Resource::Pod, ns, name) {
            Ok(p) => p,
            Err(_) => return status(Status::not_found("", "pods", name)),
        };
        if pod["spec"]["nodeName"].as_str().unwrap_or("").is_empty() {
            return status(Status::bad_request(&format!(
                "pod {name} does not have a host assigned"
            )));
        }
        let phase = pod["status"]["phase"].as_str().unwrap_or("Pending");
        let ip = pod["status"]["podIP"].as_str().unwrap_or("");
        if phase != "Running" || ip.is_empty() {
            return status(Status::bad_request(&format!(
                "unable to forward port because pod is not running. Current status={phase}"
            )));
        }
        let target = PodRef {
            store: self.store.clone(),
            ns: ns.to_string(),
            name: name.to_string(),
            uid: pod["metadata"]["uid"].as_str().unwrap_or("").to_string(),
            ip: ip.to_string(),
        };
        match form(req) {
            Err(r) => r,
            Ok(Form::Tunnel) => spdy::tunnel(target, MAX_TUNNEL_MESSAGE),
            Ok(Form::Spdy) => spdy::plain(target),
            Ok(Form::V4 { base64, protocol }) => match v4::ports(req) {
                Ok(ports) => v4::serve(target, ports, base64, protocol, MAX_V4_MESSAGE),
                Err(msg) => status(Status::bad_request(&msg)),
            },
        }
    }
}
