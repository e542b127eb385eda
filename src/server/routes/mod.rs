//! The front door's routes: the [`FrontDoor`] handler, its one routing
//! table ([`Route::of`]) and the dispatch from a route to the code of its
//! resource.
//!
//! - [`admission`]: what a request's head decides before any body byte
//!   (docs/api.md "Admission");
//! - [`health`]: `/healthz`, `/readyz` and `/metrics`;
//! - [`identity`]: `GET /v1/auth/config` (unauthenticated) and
//!   `GET /v1/auth/whoami`;
//! - [`exec`]: `POST /v1/exec` and `GET /v1/exec/interactive`;
//! - [`workspaces`]: `GET /v1/workspaces` and a session's workspace files;
//! - [`sessions`]: `/v1/sessions[/{id}]`, its operations and io socket;
//! - [`events`]: a session's event stream;
//! - [`ports`]: the port proxy to a session's apps;
//! - [`tunnels`]: TCP tunnels to a session's pod or a workspace
//!   Deployment's.
//!
//! Every error answer is an [`ApiError`], whose status comes from the one
//! table in [`crate::api::Code::status`]; the routes spell no status of
//! their own for an error. Routes behind authentication tell a stranger
//! nothing: the token is checked before the route is looked at.

mod admission;
mod events;
mod exec;
mod health;
mod identity;
mod ports;
mod sessions;
mod tunnels;
mod workspaces;

use std::path::PathBuf;
use std::sync::Arc;

use parking_lot::RwLock;

use crate::api::{ApiError, Code, Identity};
use crate::exec::gateway::Gateway;
use crate::http::{Admission, Handler, HttpError, Reply, Request, Response};
use crate::kube::client::Client;
use crate::metrics::Metrics;
use crate::server::auth::{request_token, Principals};
use crate::server::limits::{Budget, Caps};
use crate::session::engine::Engine;
use crate::session::spec::BundleLimits;

use admission::Admitted;
pub(in crate::server) use health::{check_writable, cluster_version};
pub(in crate::server) use tunnels::TunnelLimits;

/// The environment variable that turns the test hooks on (debug builds).
pub const TEST_HOOKS_ENV: &str = "KUBEGATE_TEST_HOOKS";

/// Whether the test hooks are on: a debug build (release builds compile
/// them out) started with `KUBEGATE_TEST_HOOKS=1`. Today one hook: `POST
/// /v1/sessions/{id}/debug/panic` makes that session's owner thread panic
/// (a panicking session must fail alone).
pub(in crate::server) fn test_hooks() -> bool {
    let on = cfg!(debug_assertions) && std::env::var(TEST_HOOKS_ENV).as_deref() == Ok("1");
    if on {
        log::warn!("{TEST_HOOKS_ENV}=1: the test hooks are on; never in production");
    }
    on
}

/// The front door's handler: admission, authentication, routing, and the
/// resources behind the routes (the exec gateway, which also lists the
/// workspaces, and the session engine).
pub(in crate::server) struct FrontDoor {
    /// Short-deadline, no-retry client for `/readyz`.
    pub probe: Client,
    pub state_dir: PathBuf,
    pub principals: Arc<RwLock<Arc<Principals>>>,
    pub gateway: Arc<Gateway>,
    pub metrics: Arc<Metrics>,
    pub engine: Arc<Engine>,
    pub bundle_limits: BundleLimits,
    /// Body limit of every route but `POST /v1/sessions` (whose bundle has
    /// its own limits; the server's own limit is raised to fit it).
    pub max_body: usize,
    /// Body limit of `POST /v1/sessions`.
    pub start_body: usize,
    /// Body bytes in flight and bundles not yet seeded.
    pub budget: Arc<Budget>,
    /// Per-principal counts of long-lived connections.
    pub caps: Arc<Caps>,
    /// Tunnels' clocks (`server.tunnel_*`).
    pub tunnel_limits: tunnels::TunnelLimits,
    /// The last `/readyz` answer and when (the overflow path answers it).
    pub ready_cache: parking_lot::Mutex<Option<(std::time::Instant, bool)>>,
    /// `POST /v1/sessions/{id}/debug/panic` exists ([`test_hooks`]).
    #[cfg_attr(not(debug_assertions), allow(dead_code))]
    pub test_hooks: bool,
}

/// Why a request names no route: no such path, or a path served with
/// other methods only (the methods it accepts, as the message says them).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(in crate::server) enum Miss {
    NotFound,
    Method(&'static str),
}

/// What a request under `/v1/sessions/{id}/` asks of that session.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(in crate::server) enum SessionRoute {
    /// `GET /v1/sessions/{id}`.
    View,
    /// `DELETE /v1/sessions/{id}`.
    Stop,
    /// `GET …/events`.
    Events,
    /// `GET …/io` (a WebSocket).
    Io,
    /// `…/ports/{port}/{path}`, any method.
    Ports,
    /// `GET …/tunnels/{port}` (a WebSocket).
    Tunnel,
    /// `GET …/workspace`.
    Tree,
    /// `POST …/workspace`.
    Apply,
    /// `GET …/workspace/file`.
    File,
    /// `POST …/reload`.
    Reload,
    /// `POST …/suspend`.
    Suspend,
    /// `POST …/resume`.
    Resume,
    /// `PUT …/apps`.
    SetApps,
    /// `POST …/debug/panic` (a test hook, [`test_hooks`]).
    DebugPanic,
}

/// Every route of the front door: the one table ([`Route::of`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(in crate::server) enum Route<'p> {
    /// `GET /healthz` (no authentication).
    Health,
    /// `GET /readyz` (no authentication).
    Ready,
    /// `GET /metrics`.
    Metrics,
    /// `GET /v1/auth/config` (no authentication: what `kubegate login`
    /// should use).
    AuthConfig,
    /// `GET /v1/auth/whoami`.
    Whoami,
    /// `POST /v1/exec`.
    ExecOneShot,
    /// `GET /v1/exec/interactive` (a WebSocket).
    ExecInteractive,
    /// `GET /v1/exec/tunnel` (a WebSocket).
    ExecTunnel,
    /// `GET /v1/workspaces`.
    Workspaces,
    /// `GET /v1/sessions`.
    ListSessions,
    /// `POST /v1/sessions`.
    StartSession,
    /// `/v1/sessions/{id}/…`: the session is looked up before the rest of
    /// the path is answered (an unknown session is `NOT_FOUND` whatever
    /// follows its id).
    Session(&'p str, Result<SessionRoute, Miss>),
    /// Not a route.
    Miss(Miss),
}

/// The path's segments below `/v1/sessions` (`None`: not a sessions path).
pub(in crate::server) fn session_segments(path: &str) -> Option<Vec<&str>> {
    let rest = path.strip_prefix("/v1/sessions")?;
    if !rest.is_empty() && !rest.starts_with('/') {
        return None;
    }
    Some(rest.split('/').filter(|p| !p.is_empty()).collect())
}

impl<'p> Route<'p> {
    /// The route of `method path`.
    pub fn of(method: &str, path: &'p str) -> Route<'p> {
        use Miss::{Method, NotFound};
        if let Some(parts) = session_segments(path) {
            return match (parts.as_slice(), method) {
                ([], "GET") => Route::ListSessions,
                ([], "POST") => Route::StartSession,
                ([], _) => Route::Miss(Method("GET, POST")),
                ([id, tail @ ..], _) => Route::Session(id, SessionRoute::of(tail, method)),
            };
        }
        match (path, method) {
            ("/healthz", "GET") => Route::Health,
            ("/readyz", "GET") => Route::Ready,
            ("/metrics", "GET") => Route::Metrics,
            ("/v1/auth/config", "GET") => Route::AuthConfig,
            ("/v1/auth/whoami", "GET") => Route::Whoami,
            ("/v1/exec", "POST") => Route::ExecOneShot,
            ("/v1/exec/interactive", "GET") => Route::ExecInteractive,
            ("/v1/exec/tunnel", "GET") => Route::ExecTunnel,
            ("/v1/workspaces", "GET") => Route::Workspaces,
            (
                "/metrics"
                | "/v1/exec/interactive"
                | "/v1/exec/tunnel"
                | "/v1/workspaces"
                | "/v1/auth/config"
                | "/v1/auth/whoami",
                _,
            ) => Route::Miss(Method("GET")),
            ("/v1/exec", _) => Route::Miss(Method("POST")),
            _ => Route::Miss(NotFound),
        }
    }
}

impl SessionRoute {
    /// The route of `method` on a session's `tail` (the segments after
    /// its id).
    fn of(tail: &[&str], method: &str) -> Result<SessionRoute, Miss> {
        use Miss::Method;
        use SessionRoute as S;
        match (tail, method) {
            ([], "GET") => Ok(S::View),
            ([], "DELETE") => Ok(S::Stop),
            ([], _) => Err(Method("GET, DELETE")),
            (["events"], "GET") => Ok(S::Events),
            (["events"], _) => Err(Method("GET")),
            (["ports", ..], _) => Ok(S::Ports),
            (["tunnels", _], "GET") => Ok(S::Tunnel),
            (["tunnels", _], _) => Err(Method("GET")),
            (["io"], "GET") => Ok(S::Io),
            (["io"], _) => Err(Method("GET")),
            (["workspace"], "GET") => Ok(S::Tree),
            (["workspace"], "POST") => Ok(S::Apply),
            (["workspace"], _) => Err(Method("GET, POST")),
            (["workspace", "file"], "GET") => Ok(S::File),
            (["workspace", "file"], _) => Err(Method("GET")),
            (["reload"], "POST") => Ok(S::Reload),
            (["suspend"], "POST") => Ok(S::Suspend),
            (["resume"], "POST") => Ok(S::Resume),
            (["reload" | "suspend" | "resume"], _) => Err(Method("POST")),
            (["apps"], "PUT") => Ok(S::SetApps),
            (["apps"], _) => Err(Method("PUT")),
            (["debug", "panic"], "POST") => Ok(S::DebugPanic),
            _ => Err(Miss::NotFound),
        }
    }
}

/// The error of a request that names no route.
fn miss(m: Miss, path: &str) -> ApiError {
    match m {
        Miss::NotFound => ApiError::new(Code::NotFound, format!("no route {path}")),
        Miss::Method(allowed) => ApiError::new(
            Code::MethodNotAllowed,
            format!("{path} accepts {allowed} only"),
        ),
    }
}

/// A route that needs a WebSocket upgrade offering `protocol`.
fn require_websocket(req: &Request, protocol: &str) -> Result<(), ApiError> {
    if !req.is_websocket_upgrade() {
        return Err(ApiError::new(
            Code::BadRequest,
            "this route needs a WebSocket upgrade (HTTP/1.1 GET with Upgrade: websocket)",
        ));
    }
    if !req.websocket_protocols().iter().any(|p| p == protocol) {
        return Err(ApiError::new(
            Code::BadRequest,
            format!("offer the WebSocket subprotocol {protocol}"),
        ));
    }
    Ok(())
}

/// A JSON request body, or `BAD_REQUEST` naming what is wrong with it.
fn json_body<T: serde::de::DeserializeOwned>(req: &Request) -> Result<T, ApiError> {
    serde_json::from_slice(&req.body)
        .map_err(|e| ApiError::new(Code::BadRequest, format!("request body: {e}")))
}

/// A JSON answer with `status`.
fn json_reply(status: u16, v: &serde_json::Value) -> Reply {
    Response::json(status, v.to_string().into_bytes()).into()
}

/// The error of a request without a valid token.
fn unauthorized() -> ApiError {
    ApiError::new(
        Code::Unauthorized,
        "a valid bearer token is required (Authorization: Bearer TOKEN)",
    )
}

impl FrontDoor {
    /// The caller: the admission's answer, else the token checked again.
    fn authenticate(&self, req: &Request) -> Result<Arc<Identity>, ApiError> {
        if let Some(a) = req.admitted.get::<Admitted>() {
            return Ok(a.who.clone());
        }
        let principals = self.principals.read().clone();
        let token = request_token(req).ok_or_else(unauthorized)?;
        principals
            .identify(&token)
            .map_err(|e| e.unwrap_or_else(unauthorized))
    }

    /// Every route behind authentication (all but health and readiness),
    /// from the one table.
    fn route(&self, req: Request) -> Result<Reply, ApiError> {
        // Authenticate first: unknown routes tell nothing to strangers.
        let who = self.authenticate(&req)?;
        match Route::of(&req.method, &req.path) {
            Route::Health => Ok(health::healthz().into()),
            Route::Ready => Ok(self.readiness().into()),
            Route::Metrics => Ok(self.metrics_page().into()),
            Route::AuthConfig => Ok(self.auth_config()),
            Route::Whoami => Ok(identity::whoami(&who)),
            Route::ExecOneShot => self.exec_oneshot(&who, &req),
            Route::ExecInteractive => self.exec_interactive(&who, &req),
            Route::ExecTunnel => self.exec_tunnel(&who, &req),
            Route::Workspaces => self.workspaces(&who),
            Route::ListSessions => Ok(self.list_sessions(&who)),
            Route::StartSession => self.session_start(&who, &req),
            Route::Session(id, route) => self.session(&who, id, route, &req),
            Route::Miss(m) => Err(miss(m, &req.path)),
        }
    }
}

impl Handler for FrontDoor {
    fn admit(&self, head: &Request) -> Admission {
        self.admission(head)
    }

    fn overflow(&self, head: &Request, _err: &HttpError) -> Option<Response> {
        match Route::of(&head.method, &head.path) {
            Route::Health => Some(health::healthz()),
            Route::Ready => Some(self.cached_readiness()),
            _ => None,
        }
    }

    fn handle(&self, req: Request) -> Reply {
        let reply = match Route::of(&req.method, &req.path) {
            Route::Health => health::healthz().into(),
            Route::Ready => self.readiness().into(),
            Route::AuthConfig => self.auth_config(),
            _ => match self.route(req) {
                Ok(r) => r,
                Err(e) => {
                    self.metrics
                        .inc("kubegate_api_errors_total", format!("code=\"{}\"", e.code));
                    e.response().into()
                }
            },
        };
        let status = match &reply {
            Reply::Response(r) => r.status,
            Reply::Upgrade(_) | Reply::RawUpgrade(_) => 101,
        };
        self.metrics.inc(
            "kubegate_http_requests_total",
            format!("status=\"{status}\""),
        );
        reply
    }

    fn error_response(&self, err: &HttpError) -> Response {
        let e = ApiError::from_http(err);
        self.metrics
            .inc("kubegate_api_errors_total", format!("code=\"{}\"", e.code));
        ApiError::http_response(err)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn error_shape() {
        let r = ApiError::new(Code::NotFound, "no such route").response();
        assert_eq!(r.status, 404);
        let crate::http::Body::Bytes(b) = r.body else {
            panic!("bytes")
        };
        let v: serde_json::Value = serde_json::from_slice(&b).unwrap();
        assert_eq!(
            v,
            serde_json::json!({"error": {"code": "NOT_FOUND", "message": "no such route"}})
        );
    }

    #[test]
    fn every_route_is_in_the_table() {
        use SessionRoute as S;
        let cases: &[(&str, &str, Route)] = &[
            ("GET", "/healthz", Route::Health),
            ("GET", "/readyz", Route::Ready),
            ("POST", "/healthz", Route::Miss(Miss::NotFound)),
            ("GET", "/metrics", Route::Metrics),
            ("GET", "/v1/auth/config", Route::AuthConfig),
            ("GET", "/v1/auth/whoami", Route::Whoami),
            ("POST", "/v1/auth/whoami", Route::Miss(Miss::Method("GET"))),
            ("POST", "/metrics", Route::Miss(Miss::Method("GET"))),
            ("POST", "/v1/exec", Route::ExecOneShot),
            ("GET", "/v1/exec", Route::Miss(Miss::Method("POST"))),
            ("GET", "/v1/exec/interactive", Route::ExecInteractive),
            ("GET", "/v1/workspaces", Route::Workspaces),
            ("GET", "/v1/sessions", Route::ListSessions),
            ("GET", "/v1/sessions/", Route::ListSessions),
            ("POST", "/v1/sessions", Route::StartSession),
            (
                "PUT",
                "/v1/sessions",
                Route::Miss(Miss::Method("GET, POST")),
            ),
            ("GET", "/v1/sessionsx", Route::Miss(Miss::NotFound)),
            ("GET", "/v1/sessions/s1", Route::Session("s1", Ok(S::View))),
            (
                "DELETE",
                "/v1/sessions/s1",
                Route::Session("s1", Ok(S::Stop)),
            ),
            (
                "GET",
                "/v1/sessions/s1/events",
                Route::Session("s1", Ok(S::Events)),
            ),
            ("GET", "/v1/sessions/s1/io", Route::Session("s1", Ok(S::Io))),
            (
                "PATCH",
                "/v1/sessions/s1/ports/80/x",
                Route::Session("s1", Ok(S::Ports)),
            ),
            (
                "GET",
                "/v1/sessions/s1/tunnels/5432",
                Route::Session("s1", Ok(S::Tunnel)),
            ),
            (
                "POST",
                "/v1/sessions/s1/tunnels/5432",
                Route::Session("s1", Err(Miss::Method("GET"))),
            ),
            (
                "GET",
                "/v1/sessions/s1/tunnels/5432/x",
                Route::Session("s1", Err(Miss::NotFound)),
            ),
            ("GET", "/v1/exec/tunnel", Route::ExecTunnel),
            ("POST", "/v1/exec/tunnel", Route::Miss(Miss::Method("GET"))),
            (
                "GET",
                "/v1/sessions/s1/workspace",
                Route::Session("s1", Ok(S::Tree)),
            ),
            (
                "POST",
                "/v1/sessions/s1/workspace",
                Route::Session("s1", Ok(S::Apply)),
            ),
            (
                "GET",
                "/v1/sessions/s1/workspace/file",
                Route::Session("s1", Ok(S::File)),
            ),
            (
                "POST",
                "/v1/sessions/s1/reload",
                Route::Session("s1", Ok(S::Reload)),
            ),
            (
                "POST",
                "/v1/sessions/s1/suspend",
                Route::Session("s1", Ok(S::Suspend)),
            ),
            (
                "POST",
                "/v1/sessions/s1/resume",
                Route::Session("s1", Ok(S::Resume)),
            ),
            (
                "PUT",
                "/v1/sessions/s1/apps",
                Route::Session("s1", Ok(S::SetApps)),
            ),
            (
                "POST",
                "/v1/sessions/s1/debug/panic",
                Route::Session("s1", Ok(S::DebugPanic)),
            ),
            (
                "GET",
                "/v1/sessions/s1/apps",
                Route::Session("s1", Err(Miss::Method("PUT"))),
            ),
            (
                "GET",
                "/v1/sessions/s1/nope",
                Route::Session("s1", Err(Miss::NotFound)),
            ),
            ("GET", "/nope", Route::Miss(Miss::NotFound)),
        ];
        for (method, path, want) in cases {
            assert_eq!(Route::of(method, path), *want, "{method} {path}");
        }
    }
}
