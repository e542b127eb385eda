//! `POST /v1/exec` (one-shot, JSON in and out) and `GET
//! /v1/exec/interactive` (a WebSocket: the query string read into an
//! [`InteractiveRequest`], then the gateway's session runs on the
//! upgraded connection). The rules and limits are the gateway's
//! ([`crate::exec`]).

use std::sync::Arc;

use super::{json_body, require_websocket, FrontDoor};
use crate::api::{ApiError, Code, Identity};
use crate::exec::frames::SUBPROTOCOL;
use crate::exec::gateway::{InteractiveRequest, OneShotRequest};
use crate::exec::validate::{invalid, ExecSpec};
use crate::http::{Reply, Request, Response, Upgrade};
use crate::kube::remote::TermSize;

/// A boolean query parameter (`true`/`1`, `false`/`0`), `default` when
/// absent.
fn flag(req: &Request, k: &str, default: bool) -> Result<bool, ApiError> {
    match req.query(k) {
        None => Ok(default),
        Some("true" | "1") => Ok(true),
        Some("false" | "0") => Ok(false),
        Some(v) => Err(invalid(format!("{k} must be true or false, not {v:?}"))),
    }
}

/// A terminal dimension (1 to 65535), `None` when absent.
fn dim(req: &Request, k: &str) -> Result<Option<u16>, ApiError> {
    match req.query(k) {
        None => Ok(None),
        Some(v) => v
            .parse::<u16>()
            .ok()
            .filter(|n| *n >= 1)
            .map(Some)
            .ok_or_else(|| invalid(format!("{k} must be an integer between 1 and 65535"))),
    }
}

/// The workspace, Deployment, container and command of a query string
/// (`/v1/exec/interactive`, `/v1/exec/tunnel`); `container=` empty is
/// "not given".
pub(super) fn query_spec(req: &Request) -> ExecSpec {
    let text = |k: &str| req.query(k).unwrap_or("").to_string();
    ExecSpec {
        project: text("project"),
        uid: text("uid"),
        deployment: text("deployment"),
        container: req
            .query("container")
            .filter(|c| !c.is_empty())
            .map(str::to_string),
        command: req
            .query_all("command")
            .into_iter()
            .map(str::to_string)
            .collect(),
    }
}

/// The interactive exec's parameters from the query string.
fn interactive_request(req: &Request) -> Result<InteractiveRequest, ApiError> {
    let spec = query_spec(req);
    let initial_size = match (dim(req, "cols")?, dim(req, "rows")?) {
        (Some(width), Some(height)) => Some(TermSize { width, height }),
        (None, None) => None,
        _ => return Err(invalid("cols and rows go together")),
    };
    Ok(InteractiveRequest {
        spec,
        tty: flag(req, "tty", true)?,
        stdin: flag(req, "stdin", true)?,
        initial_size,
    })
}

impl FrontDoor {
    /// `POST /v1/exec`.
    pub(super) fn exec_oneshot(&self, who: &Identity, req: &Request) -> Result<Reply, ApiError> {
        let body: OneShotRequest = json_body(req)?;
        let r = self.gateway.oneshot(who, body, &req.probe)?;
        let body = serde_json::to_vec(&r)
            .map_err(|e| ApiError::new(Code::Internal, format!("encoding the result: {e}")))?;
        Ok(Response::json(200, body).into())
    }

    /// `GET /v1/exec/interactive`.
    pub(super) fn exec_interactive(
        &self,
        who: &Arc<Identity>,
        req: &Request,
    ) -> Result<Reply, ApiError> {
        require_websocket(req, SUBPROTOCOL)?;
        let ir = interactive_request(req)?;
        let session = self.gateway.open_interactive(who, ir)?;
        let max_stdin = self.gateway.settings().limits.max_stdin_frame_bytes;
        Ok(Reply::Upgrade(Upgrade {
            protocol: Some(SUBPROTOCOL.to_string()),
            headers: Vec::new(),
            // A text stdin frame carries JSON-escaped data: room for it.
            max_message_bytes: max_stdin.saturating_mul(6).saturating_add(4096),
            on_open: Box::new(move |conn| session.run(conn)),
        }))
    }
}
