//! The kubelet's HTTPS API (docs/sim.md#the-kubelet-api): what a real
//! kube-apiserver calls at a Node's daemon endpoint for `kubectl exec`,
//! `attach`, `logs` and `port-forward` when the sim's [`Kubelet`] runs a
//! real cluster's pods (`kubegate sim node`).
//!
//! It owns the listener ([`KubeletApi`], an `http::Server` named
//! `sim-kapi` on TLS that REQUIRES a client certificate chaining to its own
//! client CA: no certificate, or one of another CA, fails the handshake),
//! the routes ([`routes`], sans-IO) and the SPDY remotecommand server
//! (`spdy_exec`, with its sans-IO stream set in [`streams`]). The rest
//! is reused: `sim::podio` checks and opens execs and attaches (and serves
//! their WebSocket form) and serves logs, `sim::portforward` serves
//! `portForward` (plain SPDY and the v4 WebSocket).
//!
//! Query names are the kubelet's: `input`, `output`, `error`, `tty` (true
//! only as `1`) and `command` for exec and attach, the container in the
//! path; `port` for the v4 port-forward.

pub mod routes;
pub(crate) mod spdy_exec;
pub mod streams;

#[cfg(test)]
mod tests;

use super::api::PodStreams;
use super::kubelet::Kubelet;
use super::podio::{ExitWording, Flags};
use super::resources::Resource;
use crate::http::{Handler, Reply, Request, Response, Server, ServerConfig};
use routes::Route;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

/// Connections served at once (one thread each); more get 503.
pub const MAX_CONNECTIONS: usize = 256;
/// Largest request body: the API server sends none.
const MAX_BODY: usize = 64 * 1024;

/// Where and how the kubelet API listens.
#[derive(Clone)]
pub struct KubeletApiConfig {
    /// The address to bind (port 0: any free port, see [`KubeletApi::port`]).
    pub listen: SocketAddr,
    /// The serving certificate chain (PEM, leaf first).
    pub cert_pem: Vec<u8>,
    /// Its private key (PEM).
    pub key_pem: Vec<u8>,
    /// The only CA whose client certificates are admitted (PEM). Not the
    /// API server's `--client-ca-file`: that would admit the node's own
    /// certificate or any user's.
    pub client_ca_pem: Vec<u8>,
}

impl std::fmt::Debug for KubeletApiConfig {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("KubeletApiConfig")
            .field("listen", &self.listen)
            .finish_non_exhaustive()
    }
}

/// A running kubelet API. Dropping it stops it.
pub struct KubeletApi {
    server: Server,
}

impl KubeletApi {
    /// Builds the TLS configuration (a bad PEM is `InvalidInput`), binds
    /// `cfg.listen` and starts serving `kubelet`'s pods.
    pub fn start(kubelet: Arc<Kubelet>, cfg: KubeletApiConfig) -> std::io::Result<KubeletApi> {
        let tls = crate::http::tls::server_config_requiring_client_cert(
            &cfg.cert_pem,
            &cfg.key_pem,
            &cfg.client_ca_pem,
        )
        .map_err(|e| std::io::Error::new(std::io::ErrorKind::InvalidInput, e.to_string()))?;
        let server_cfg = ServerConfig {
            max_connections: MAX_CONNECTIONS,
            // TLS handshakes and first heads in progress: its one caller
            // is the API server.
            max_pending_heads: MAX_CONNECTIONS,
            max_body_bytes: MAX_BODY,
            tls: Some(tls),
            name: "sim-kapi",
            // Go's server takes a bare LF as a line end.
            strict_crlf: false,
            // A log answer (followed or not) whose client stops reading is
            // cut after this; upgraded streams are bounded by their pumps.
            write_timeout: Duration::from_secs(60),
            ..ServerConfig::default()
        };
        let server = Server::bind(cfg.listen, server_cfg, Arc::new(Api { kubelet }))?;
        Ok(KubeletApi { server })
    }

    /// The port it listens on.
    pub fn port(&self) -> u16 {
        self.server.local_addr().port()
    }

    /// Stops accepting; streams in flight see their peer gone.
    pub fn shutdown(&self) {
        self.server.shutdown();
    }
}

struct Api {
    kubelet: Arc<Kubelet>,
}

fn text(status: u16, body: &str) -> Reply {
    Response::text(status, body).into()
}

impl Handler for Api {
    fn handle(&self, req: Request) -> Reply {
        let raw_path = req.target.split('?').next().unwrap_or("");
        match routes::route(&req.method, raw_path, &req.path) {
            Route::Healthz => text(200, "ok"),
            Route::NotFound => text(404, "404: Page Not Found"),
            Route::MethodNotAllowed => Response::text(405, "405: Method Not Allowed")
                .with_header("Allow", routes::allowed(&req.path))
                .into(),
            Route::Logs { ns, pod, container } => self.logs(&req, &ns, &pod, &container),
            Route::Exec { ns, pod, container } => self.exec(&req, &ns, &pod, &container),
            Route::Attach { ns, pod, container } => self.attach(&req, &ns, &pod, &container),
            Route::PortForward { ns, pod } => self.port_forward(&req, &ns, &pod),
        }
    }
}

/// A refusal of `podio`'s (a JSON Status, as the sim's API server
/// answers) as the kubelet writes one: its message as plain text, which
/// the API server then puts in its own Status (`kubectl logs` shows
/// `container "c" in pod "p" is terminated`, not a Status inside one).
fn plain_errors(reply: Reply) -> Reply {
    match reply {
        Reply::Response(r) if r.status >= 400 => {
            let message = match &r.body {
                crate::http::Body::Bytes(b) => serde_json::from_slice::<serde_json::Value>(b)
                    .ok()
                    .and_then(|v| v["message"].as_str().map(str::to_string)),
                _ => None,
            };
            match message {
                Some(m) => text(r.status, &m),
                None => Reply::Response(r),
            }
        }
        other => other,
    }
}

impl Api {
    /// `podio`'s log with the container from the path (`tail` is the
    /// kubelet's old name of `tailLines`; `tail=all` means no limit).
    fn logs(&self, req: &Request, ns: &str, pod: &str, container: &str) -> Reply {
        // The kubelet's own checks and texts (`getContainerLogs`) first.
        let Ok(obj) = self.kubelet.store.get(Resource::Pod, ns, pod) else {
            return text(404, &format!("pod {pod:?} does not exist"));
        };
        let known = ["containers", "initContainers", "ephemeralContainers"]
            .iter()
            .filter_map(|k| obj["spec"][*k].as_array())
            .flatten()
            .any(|c| c["name"].as_str() == Some(container));
        if !known {
            return text(
                404,
                &format!("container {container:?} not found in pod {pod:?}"),
            );
        }
        let mut r = req.clone();
        r.query.retain(|(k, _)| k != "container" && k != "tail");
        if let Some(tail) = req.query("tail").filter(|t| !t.is_empty()) {
            r.query.retain(|(k, _)| k != "tailLines");
            if tail != "all" {
                r.query.push(("tailLines".into(), tail.into()));
            }
        }
        r.query.push(("container".into(), container.into()));
        plain_errors(PodStreams::log(&*self.kubelet, &r, ns, pod))
    }

    /// The kubelet's checks before it asks the runtime (`getExec`,
    /// `getAttach`): the streams asked for, then the pod; its texts.
    fn precheck(&self, req: &Request, ns: &str, pod: &str) -> Option<Reply> {
        if let Err(msg) = Flags::from_kubelet(req).checked() {
            return Some(text(400, &msg));
        }
        if self.kubelet.store.get(Resource::Pod, ns, pod).is_err() {
            return Some(text(404, "pod does not exist"));
        }
        None
    }

    fn exec(&self, req: &Request, ns: &str, pod: &str, container: &str) -> Reply {
        if let Some(r) = self.precheck(req, ns, pod) {
            return r;
        }
        let command: Vec<String> = req
            .query_all("command")
            .iter()
            .map(|s| s.to_string())
            .collect();
        let prepared = self.kubelet.prepare_exec(
            Some(container),
            ns,
            pod,
            Flags::from_kubelet(req),
            command.clone(),
            ExitWording::Cri(command),
        );
        self.stream(req, prepared)
    }

    fn attach(&self, req: &Request, ns: &str, pod: &str, container: &str) -> Reply {
        if let Some(r) = self.precheck(req, ns, pod) {
            return r;
        }
        let prepared =
            self.kubelet
                .prepare_attach(Some(container), ns, pod, Flags::from_kubelet(req));
        self.stream(req, prepared)
    }

    /// The WebSocket form through `podio`, else the SPDY upgrade.
    fn stream(&self, req: &Request, prepared: Result<super::podio::Prepared, Reply>) -> Reply {
        let p = match prepared {
            Ok(p) => p,
            Err(r) => return r,
        };
        if req.is_websocket_upgrade() {
            return self.kubelet.stream_websocket(req, p);
        }
        let offered = req
            .headers
            .iter()
            .filter(|(k, _)| k.eq_ignore_ascii_case("x-stream-protocol-version"))
            .map(|(_, v)| v.as_str());
        let version = match streams::negotiate(offered) {
            Ok(v) => v,
            Err(refusal) => {
                let mut r = Response::text(refusal.status(), &refusal.body());
                if matches!(refusal, streams::Refusal::NoCommon(_)) {
                    for v in streams::SERVER_PROTOCOLS {
                        r = r.with_header("X-Accepted-Stream-Protocol-Versions", v.name());
                    }
                }
                return r.into();
            }
        };
        if !routes::is_spdy_upgrade(&req.headers) {
            return text(
                400,
                "unable to upgrade: missing upgrade headers in request\n",
            );
        }
        spdy_exec::upgrade(p, version)
    }

    /// `sim::portforward`: plain SPDY or the v4 WebSocket (ports in
    /// `?port=`); kubectl's SPDY-in-WebSocket tunnel is the API server's,
    /// not a kubelet's, and is refused as the kubelet's WebSocket
    /// handshake refuses an unknown subprotocol.
    fn port_forward(&self, req: &Request, ns: &str, pod: &str) -> Reply {
        if req.is_websocket_upgrade() {
            let offered = req.websocket_protocols();
            let known = offered.is_empty()
                || offered
                    .iter()
                    .any(|p| p == "v4.channel.k8s.io" || p == "v4.base64.channel.k8s.io");
            if !known {
                return text(
                    400,
                    &format!(
                        "unable to upgrade websocket connection: requested protocol(s) are not supported: {offered:?}; supported protocols: [\"\" \"v4.channel.k8s.io\" \"v4.base64.channel.k8s.io\"]\n"
                    ),
                );
            }
        }
        self.kubelet.serve_port_forward(req, ns, pod)
    }
}
