//! `/v1/sessions` (list, start) and `/v1/sessions/{id}[/…]` (view, stop,
//! reload, suspend, resume, set apps, the io socket), plus the dispatch of
//! a session's other resources to their modules: events
//! ([`super::events`]), ports ([`super::ports`]), workspace files
//! ([`super::workspaces`]). A session is looked up before the rest of its
//! path is answered, so another principal's session is `NOT_FOUND` like
//! an unknown one.

use std::sync::Arc;

use serde_json::{json, Value};

use super::{json_body, json_reply, miss, require_websocket, FrontDoor, Miss, SessionRoute};
use crate::api::{ApiError, Code, Identity};
use crate::http::ws::WsConn;
use crate::http::{Reply, Request, Response, Upgrade};
use crate::session::engine::Handle;
use crate::session::io::serve::{refuse, serve as serve_io};
use crate::session::io::wire::{CLOSE_UNKNOWN, SUBPROTOCOL as IO_PROTOCOL};
use crate::session::machine::UserOp;
use crate::session::spec::{validate_apps, validate_start, SetAppsRequest, StartRequest};

/// The answer of an accepted operation.
fn accepted() -> Reply {
    Response::json(202, br#"{"accepted":true}"#.to_vec()).into()
}

/// The io socket of an unknown session: upgraded, then closed with the
/// socket's own "unknown session" code (docs/api.md#sessions).
fn unknown_io_socket() -> Reply {
    Reply::Upgrade(Upgrade {
        protocol: Some(IO_PROTOCOL.to_string()),
        headers: Vec::new(),
        max_message_bytes: 1024,
        on_open: Box::new(|conn| refuse(conn, CLOSE_UNKNOWN, "no such session")),
    })
}

impl FrontDoor {
    /// `GET /v1/sessions`: the caller's sessions.
    pub(super) fn list_sessions(&self, who: &Identity) -> Reply {
        let list: Vec<Value> = self
            .engine
            .list(&who.name)
            .iter()
            .map(|h| h.view())
            .collect();
        json_reply(200, &json!({ "sessions": list }))
    }

    /// `POST /v1/sessions`.
    pub(super) fn session_start(&self, who: &Identity, req: &Request) -> Result<Reply, ApiError> {
        if !who.may_start_sessions {
            return Err(ApiError::new(
                Code::Forbidden,
                "this token may not start sessions (may_start_sessions)",
            ));
        }
        let body: StartRequest = json_body(req)?;
        let (spec, bundle) = validate_start(body, self.bundle_limits)?;
        // The body's reservation stays with the decoded bundle until the
        // workspace is seeded (or the start fails).
        let permit = req
            .admitted
            .get::<super::Admitted>()
            .and_then(|a| a.permit.clone())
            .map(|p| Box::new(p) as Box<dyn std::any::Any + Send>);
        let h = self.engine.start(&who.name, spec, bundle, permit)?;
        let v = h.view();
        let id = h.id.clone();
        Ok(json_reply(
            201,
            &json!({
                "sessionId": id,
                "streamUrl": format!("/v1/sessions/{id}/events"),
                "ioUrl": format!("/v1/sessions/{id}/io"),
                "createdAt": v["createdAt"],
            }),
        ))
    }

    /// `/v1/sessions/{id}/…`: the session first, then its route.
    pub(super) fn session(
        &self,
        who: &Identity,
        id: &str,
        route: Result<SessionRoute, Miss>,
        req: &Request,
    ) -> Result<Reply, ApiError> {
        let h = crate::session::is_session_id(id)
            .then(|| self.engine.get(&who.name, id))
            .flatten();
        let Some(h) = h else {
            // The io socket says "unknown session" with its own close
            // code, once upgraded.
            if route == Ok(SessionRoute::Io) && req.is_websocket_upgrade() {
                return Ok(unknown_io_socket());
            }
            return Err(ApiError::new(Code::NotFound, "no such session"));
        };
        let route = route.map_err(|m| miss(m, &req.path))?;
        match route {
            SessionRoute::View => Ok(json_reply(200, &h.view())),
            SessionRoute::Stop => {
                if !h.is_finished() {
                    // Already stopping or stopped: still 204.
                    let _ = h.user(UserOp::Stop);
                }
                Ok(Response::empty(204).into())
            }
            SessionRoute::Events => Ok(super::events::sse_stream(&h, req).into()),
            SessionRoute::Io => self.session_io(&h, req),
            SessionRoute::Ports => self.port_proxy(&h, req),
            SessionRoute::Tunnel => self.session_tunnel(who, &h, req),
            SessionRoute::Tree => self.workspace_tree(&h),
            SessionRoute::Apply => self.workspace_apply(&h, req),
            SessionRoute::File => self.workspace_file(&h, req),
            SessionRoute::Reload => {
                let app = req.query("app").unwrap_or("").to_string();
                h.user(UserOp::Reload { app })?;
                Ok(accepted())
            }
            SessionRoute::Suspend => {
                h.user(UserOp::Suspend)?;
                Ok(accepted())
            }
            SessionRoute::Resume => {
                h.user(UserOp::Resume)?;
                Ok(accepted())
            }
            SessionRoute::SetApps => {
                let body: SetAppsRequest = json_body(req)?;
                let apps = validate_apps(body.apps)?;
                h.user(UserOp::SetApps { apps })?;
                Ok(accepted())
            }
            SessionRoute::DebugPanic => self.debug_panic(&h, req),
        }
    }

    /// The test hook: the session's owner thread panics (debug builds with
    /// the hooks on; otherwise no such route).
    #[cfg(debug_assertions)]
    fn debug_panic(&self, h: &Handle, req: &Request) -> Result<Reply, ApiError> {
        if !self.test_hooks {
            return Err(miss(Miss::NotFound, &req.path));
        }
        if h.inject_panic() {
            Ok(accepted())
        } else {
            Err(ApiError::new(Code::NotRunning, "the session has ended"))
        }
    }

    /// Release builds have no test hooks.
    #[cfg(not(debug_assertions))]
    fn debug_panic(&self, _h: &Handle, req: &Request) -> Result<Reply, ApiError> {
        Err(miss(Miss::NotFound, &req.path))
    }

    /// `GET /v1/sessions/{id}/io?app=NAME&lastSeq=N`: the app's output from
    /// its replay ring, then live; stdin and resizes back (docs/api.md#sessions).
    fn session_io(&self, h: &Arc<Handle>, req: &Request) -> Result<Reply, ApiError> {
        require_websocket(req, IO_PROTOCOL)?;
        let last_seq = match req.query("lastSeq") {
            None | Some("") => None,
            Some(v) => Some(v.parse::<u32>().map_err(|_| {
                ApiError::new(Code::BadRequest, "lastSeq must be a non-negative integer")
            })?),
        };
        let app = req.query("app").unwrap_or("").to_string();
        let ping = self.engine.ping_interval();
        let on_open: Box<dyn FnOnce(WsConn) + Send> = match h.app_io(&app) {
            Some(app_io) => Box::new(move |conn| serve_io(app_io, last_seq, conn, ping)),
            None => Box::new(move |conn| {
                refuse(
                    conn,
                    CLOSE_UNKNOWN,
                    &format!("the session has no app {app:?}"),
                )
            }),
        };
        Ok(Reply::Upgrade(Upgrade {
            protocol: Some(IO_PROTOCOL.to_string()),
            headers: Vec::new(),
            max_message_bytes: self.max_body.max(64 * 1024),
            on_open,
        }))
    }
}
