//! The front door's admission (docs/api.md "Admission"): everything a
//! request's head decides before any body byte or `100 Continue` — who is
//! asking, whether they may, whether the session is theirs, the body
//! limit, the body's place in the budget, and the connection's place among
//! the principal's long-lived ones. What it learned travels with the
//! request as [`Admitted`].

use std::sync::Arc;

use super::{session_segments, unauthorized, FrontDoor, Route};
use crate::api::{ApiError, Code, Identity};
use crate::http::{Admission, Admit, BodyCharge, Context, Request};
use crate::server::auth::request_token;
use crate::server::limits::{BudgetFull, Kind, Permit};

/// What the front door's admission learned from a request's head, handed
/// back with the request (`Request::admitted`).
pub(super) struct Admitted {
    pub who: Arc<Identity>,
    /// The body's reservation in the budget (requests with a body).
    pub permit: Option<Arc<Permit>>,
}

/// The body a head announces: its Content-Length, `None` for chunked, 0
/// for none.
fn announced_body(head: &Request) -> Option<u64> {
    if head.header("transfer-encoding").is_some() {
        return None;
    }
    Some(
        head.header("content-length")
            .and_then(|v| v.trim().parse().ok())
            .unwrap_or(0),
    )
}

impl FrontDoor {
    fn refuse(&self, reason: &str, e: &ApiError) -> Admission {
        self.metrics
            .inc("kubegate_refusals_total", format!("reason=\"{reason}\""));
        self.metrics
            .inc("kubegate_api_errors_total", format!("code=\"{}\"", e.code));
        let r = e.response();
        self.metrics.inc(
            "kubegate_http_requests_total",
            format!("status=\"{}\"", r.status),
        );
        Admission::Refuse(r)
    }

    fn too_many(&self, kind: Kind) -> Admission {
        let what = match kind {
            Kind::Io => "session io sockets",
            Kind::Events => "session event streams",
            Kind::Ports => "port-proxy requests in flight",
            Kind::Tunnels => "TCP tunnels",
            Kind::KeepAlive => "keep-alive connections",
        };
        let e = ApiError::new(
            Code::TooManyConnections,
            format!(
                "you hold {} {what}, the most allowed per principal; close one and retry",
                self.caps.limit(kind)
            ),
        );
        match self.refuse(kind.as_str(), &e) {
            Admission::Refuse(r) => Admission::Refuse(r.with_header("Retry-After", "1")),
            a => a,
        }
    }

    /// Everything the head decides (docs/api.md "Admission"): who is
    /// asking, whether they may, whether the session is theirs, the body
    /// limit, the body's place in the budget, and the connection's place
    /// among the principal's long-lived ones.
    pub(super) fn admission(&self, head: &Request) -> Admission {
        let path = head.path.as_str();
        if matches!(
            Route::of(&head.method, path),
            Route::Health | Route::Ready | Route::AuthConfig
        ) {
            return Admission::Admit(Admit::with_limit(0));
        }
        let principals = self.principals.read().clone();
        let who = match request_token(head).map(|t| principals.identify(&t)) {
            Some(Ok(who)) => who,
            None | Some(Err(None)) => return self.refuse("unauthenticated", &unauthorized()),
            Some(Err(Some(e))) => {
                let retry = e.code == Code::IssuerUnavailable;
                return match self.refuse("unauthenticated", &e) {
                    Admission::Refuse(r) if retry => {
                        Admission::Refuse(r.with_header("Retry-After", "1"))
                    }
                    a => a,
                };
            }
        };
        let mut limit = self.max_body;
        let mut kind = Kind::KeepAlive;
        if let Some(parts) = session_segments(path) {
            match parts.as_slice() {
                [] if head.method == "POST" => {
                    if !who.may_start_sessions {
                        return self.refuse(
                            "forbidden",
                            &ApiError::new(
                                Code::Forbidden,
                                "this token may not start sessions (may_start_sessions)",
                            ),
                        );
                    }
                    limit = self.start_body;
                }
                [] => {}
                [id, tail @ ..] => {
                    let mine = crate::session::is_session_id(id)
                        && self.engine.get(&who.name, id).is_some();
                    // An unknown io socket is told so once upgraded (its
                    // own close code): the handler answers it.
                    let io_upgrade = tail == ["io"] && head.is_websocket_upgrade();
                    if !mine && !io_upgrade {
                        return self.refuse(
                            "not_found",
                            &ApiError::new(Code::NotFound, "no such session"),
                        );
                    }
                    if mine {
                        kind = match tail {
                            ["io"] => Kind::Io,
                            ["events"] => Kind::Events,
                            ["ports", ..] => Kind::Ports,
                            ["tunnels", ..] => Kind::Tunnels,
                            _ => Kind::KeepAlive,
                        };
                    }
                }
            }
        }
        if path == "/v1/exec/tunnel" {
            kind = Kind::Tunnels;
        }
        let mut admit = Admit::with_limit(limit);
        admit.known = true;
        let hold = self.caps.acquire(&who.name, kind);
        // A keep-alive place is held while the connection waits for its
        // next request; a stream's place only while the stream lasts.
        admit.keep_hold = kind == Kind::KeepAlive;
        match hold {
            Some(g) => admit.hold = Some(Box::new(g) as Box<dyn std::any::Any + Send>),
            // No keep-alive slot left: served, then closed.
            None if kind == Kind::KeepAlive => {
                self.metrics
                    .inc("kubegate_refusals_total", "reason=\"keepalive\"");
                admit.close_after = true;
            }
            None => return self.too_many(kind),
        }
        let mut permit = None;
        match announced_body(head) {
            Some(0) => {}
            // The server answers 413 without reading it.
            Some(n) if n > limit as u64 => {}
            announced => {
                let n = announced.map_or(0, |n| usize::try_from(n).unwrap_or(usize::MAX));
                match self.budget.reserve(&who.name, n) {
                    Ok(p) => permit = Some(Arc::new(p)),
                    Err(full) => {
                        let (reason, msg) = match full {
                            BudgetFull::Share => (
                                "budget_share",
                                "your requests hold your share of the daemon's body budget \
                                 (server.body_budget_per_principal_bytes); retry when they are done",
                            ),
                            BudgetFull::Total => (
                                "budget",
                                "the daemon holds as many request bodies as it allows \
                                 (server.body_budget_bytes); retry later",
                            ),
                        };
                        return match self.refuse(reason, &ApiError::new(Code::Overloaded, msg)) {
                            Admission::Refuse(r) => {
                                Admission::Refuse(r.with_header("Retry-After", "1"))
                            }
                            a => a,
                        };
                    }
                }
            }
        }
        admit.charge = permit.clone().map(|p| p as Arc<dyn BodyCharge>);
        admit.context = Context(Some(Arc::new(Admitted { who, permit })));
        Admission::Admit(admit)
    }
}
