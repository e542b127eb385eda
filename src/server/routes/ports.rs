//! The port proxy (docs/api.md "Port proxy"): `…/v1/sessions/{id}/ports/
//! {port}/{path}` to a declared tcp port of the session's pod, through the
//! pod-access seam; HTTP answers of known small length whole, others
//! streamed; WebSocket upgrades bridged both ways.

use std::io::Read;
use std::time::Duration;

use super::FrontDoor;
use crate::api::{ApiError, Code};
use crate::http::hop::end_to_end_headers;
use crate::http::ws::{self, WsOptions};
use crate::http::{Body, ChunkSink, Reply, Request, Response, Upgrade};
use crate::session::access::{PodRequest, PodTarget};
use crate::session::engine::Handle;
use crate::session::proxy_path::{forward_headers, parse_target};

/// How long the port proxy waits for an app's answer to begin (for a
/// WebSocket: the connect and the handshake).
const PORT_PROXY_HEAD_TIMEOUT: Duration = Duration::from_secs(60);
/// Answers up to this long with a Content-Length keep it (read whole).
const PORT_PROXY_SIZED_MAX: u64 = 1 << 20;
/// How long a proxied answer may stay silent before it is ended.
const PORT_PROXY_IDLE: Duration = Duration::from_secs(300);

impl FrontDoor {
    /// A WebSocket through the port proxy: the app's side first, through
    /// the pod-access seam (offering what the client offered), then the
    /// client's, accepted with the subprotocol the app chose; messages
    /// bridged both ways.
    fn port_proxy_websocket(
        &self,
        target: &PodTarget,
        port: u16,
        path: String,
        req: &Request,
    ) -> Result<Reply, ApiError> {
        let mut preq = PodRequest::get(&path).timeout(PORT_PROXY_HEAD_TIMEOUT);
        preq.headers = forward_headers(&req.headers)
            .into_iter()
            .filter(|(k, _)| !ws::is_handshake_header(k))
            .collect();
        if let Some(offer) = req.header("sec-websocket-protocol") {
            preq = preq.header("Sec-WebSocket-Protocol", offer);
        }
        let app = self
            .engine
            .access()
            .websocket(target, port, &preq)
            .map_err(|e| ApiError::new(Code::PortUnreachable, format!("port {port}: {e}")))?;
        Ok(Reply::Upgrade(Upgrade {
            protocol: app.protocol,
            headers: Vec::new(),
            max_message_bytes: self.max_body.max(16 << 20),
            on_open: Box::new(move |conn| {
                if let Err(e) = ws::bridge(conn, app.ws, WsOptions::default()) {
                    log::warn!("port proxy websocket: {e}");
                }
            }),
        }))
    }

    /// `…/v1/sessions/{id}/ports/{port}/{path}`: HTTP to a declared tcp
    /// port of the session's pod, through the pod-access seam (docs/api.md
    /// "Port proxy"). The port, path and query come from the raw
    /// request-target, checked and re-encoded by `session::proxy_path`
    /// before anything else (400 `INVALID_PROXY_PATH`), for HTTP and
    /// WebSocket alike.
    pub(super) fn port_proxy(&self, h: &Handle, req: &Request) -> Result<Reply, ApiError> {
        let upstream = parse_target(&req.target, &h.id)
            .map_err(|e| ApiError::new(Code::InvalidProxyPath, e.to_string()))?;
        let declared = h.view()["apps"]
            .as_array()
            .map(|apps| {
                apps.iter()
                    .flat_map(|a| a["ports"].as_array().cloned().unwrap_or_default())
                    .filter(|p| p["protocol"] != "udp")
                    .filter_map(|p| p["port"].as_u64())
                    .collect::<Vec<u64>>()
            })
            .unwrap_or_default();
        let port = upstream.port;
        if !declared.contains(&u64::from(port)) {
            return Err(ApiError::new(
                Code::NotFound,
                "the session declares no such tcp port",
            ));
        }
        let (pod, ip) = h
            .pod()
            .ok_or_else(|| ApiError::new(Code::NotRunning, "the session has no pod now"))?;
        let path = upstream.path_and_query;
        let method = ureq::http::Method::from_bytes(req.method.as_bytes())
            .map_err(|_| ApiError::new(Code::BadRequest, "unsupported method"))?;
        let target = PodTarget {
            namespace: self.engine.namespace().to_string(),
            name: pod,
            ip,
        };
        if req.method == "GET" && ws::wants_websocket(&req.headers) {
            return self.port_proxy_websocket(&target, port, path, req);
        }
        let body = (!req.body.is_empty()).then(|| req.body.clone());
        let preq = PodRequest {
            method,
            path,
            headers: forward_headers(&req.headers),
            body,
            timeout: PORT_PROXY_HEAD_TIMEOUT,
            max_response_bytes: 0,
            idle: Some(PORT_PROXY_IDLE),
        };
        let mut resp = self
            .engine
            .access()
            .open(&target, port, &preq)
            .map_err(|e| ApiError::new(Code::PortUnreachable, format!("port {port}: {e}")))?;
        let headers = end_to_end_headers(&resp.headers, &[]);
        let status = resp.status;
        if req.method == "HEAD" || status == 204 || status == 304 || status < 200 {
            let mut r = Response::empty(status);
            for (k, v) in headers {
                r = r.with_header(&k, &v);
            }
            return Ok(r.into());
        }
        // A small answer of known length keeps its length (read whole);
        // others stream as the app produces them (server-sent events, long
        // downloads), re-framed as chunked; a client that goes away cuts
        // the app's stream.
        let length = resp
            .headers
            .iter()
            .find(|(k, _)| k.eq_ignore_ascii_case("content-length"))
            .and_then(|(_, v)| v.trim().parse::<u64>().ok())
            .filter(|n| *n <= PORT_PROXY_SIZED_MAX);
        if let Some(n) = length {
            let mut body = Vec::with_capacity(usize::try_from(n).unwrap_or(0));
            (&mut resp)
                .take(n)
                .read_to_end(&mut body)
                .map_err(|e| ApiError::new(Code::PortUnreachable, format!("port {port}: {e}")))?;
            let mut r = Response {
                status,
                headers: Vec::new(),
                body: Body::Bytes(body),
            };
            for (k, v) in headers {
                r = r.with_header(&k, &v);
            }
            return Ok(r.into());
        }
        let mut r = Response::stream(
            status,
            "application/octet-stream",
            Box::new(move |sink: &mut dyn ChunkSink| {
                let cancel = resp.canceller();
                let mut buf = vec![0u8; 16 * 1024];
                let out = loop {
                    let n = match resp.read(&mut buf) {
                        Ok(0) => break Ok(()),
                        Ok(n) => n,
                        Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
                        // The app's stream broke or went idle past the
                        // bound: end the chunked answer where it is.
                        Err(_) => break Ok(()),
                    };
                    if let Err(e) = sink.send(&buf[..n]) {
                        break Err(e);
                    }
                    if sink.peer_closed() {
                        break Ok(());
                    }
                };
                cancel.cancel();
                out
            }),
        );
        // Only the app's own content type, if it sent one.
        r.headers
            .retain(|(k, _)| !k.eq_ignore_ascii_case("content-type"));
        for (k, v) in headers {
            r = r.with_header(&k, &v);
        }
        Ok(r.into())
    }
}
