//! Who a request is and whether it may (docs/sim.md#identity), in
//! upstream's filter order — authentication (401), impersonation (403, or
//! 400 for groups without a user), authorization (403) — and the audit
//! line of each request (`sim::audit`). Authentication also runs on the
//! head in `admit`, so a stranger's body is never read.

use super::*;
use crate::sim::audit::Entry;
use crate::sim::authn::{Authn, UserInfo};
use crate::sim::impersonate::Refusal;
use crate::sim::rbac::{self, Attributes, Decision};
use std::time::SystemTime;

/// What the gate learned about an admitted request (attached to it).
#[derive(Debug, Clone)]
pub(crate) struct Who {
    pub received: SystemTime,
    /// The authenticated user (`None`: authentication failed).
    pub user: Option<UserInfo>,
    /// The user impersonated, when the request asked for one.
    pub acting: Option<UserInfo>,
    pub attrs: Attributes,
    pub decision: Option<Decision>,
}

impl Who {
    /// The user the request acts as: the impersonated one, or the caller.
    pub fn effective(&self) -> UserInfo {
        self.acting
            .clone()
            .or_else(|| self.user.clone())
            .unwrap_or_else(UserInfo::anonymous)
    }
}

/// A refusal from the gate: the answer and what the audit line says.
pub(crate) struct Refused {
    pub response: Response,
    pub who: Who,
    pub failure: Option<Value>,
}

fn failure_of(s: &Status) -> Value {
    serde_json::from_slice(&s.to_json()).unwrap_or(Value::Null)
}

/// Pod subresources whose WebSocket upgrade (a GET) also needs `create`
/// from Kubernetes 1.35 on (`AuthorizePodWebsocketUpgradeCreatePermission`).
fn needs_create_too(req: &Request, a: &Attributes) -> bool {
    a.resource_request
        && a.verb == "get"
        && a.api_group.is_empty()
        && a.resource == "pods"
        && matches!(a.subresource.as_str(), "exec" | "attach" | "portforward")
        && req.is_websocket_upgrade()
}

impl ApiServer {
    /// Authentication, impersonation and authorization of `head`.
    pub(crate) fn gate(&self, head: &Request) -> Result<Who, Box<Refused>> {
        let mut who = Who {
            received: SystemTime::now(),
            user: None,
            acting: None,
            attrs: rbac::attributes(head),
            decision: None,
        };
        let user = match self.auth.authenticate(head) {
            Authn::User(u) => u,
            Authn::Refused => {
                let s = Status::unauthorized();
                return Err(Box::new(Refused {
                    response: status_response(&s),
                    failure: Some(failure_of(&s)),
                    who,
                }));
            }
        };
        who.user = Some(user.clone());
        // `--no-auth`: upstream's AlwaysAllow; every impersonation honoured.
        let authorizing = self.auth.required();
        let forbid = |who: Who, s: Status| {
            Err(Box::new(Refused {
                response: status_response(&s),
                failure: Some(failure_of(&s)),
                who,
            }))
        };
        let wanted = match crate::sim::impersonate::wanted(head) {
            Ok(w) => w,
            Err(s) => return forbid(who, *s),
        };
        let acting = match wanted {
            None => None,
            // `--no-auth`: the anonymous caller impersonates as an admin would.
            Some(w) if !authorizing => self
                .impersonator
                .impersonate(&self.store, &crate::sim::authn::admin(), &w, &who.attrs)
                .ok(),
            Some(w) => match self
                .impersonator
                .impersonate(&self.store, &user, &w, &who.attrs)
            {
                Ok(u) => Some(u),
                Err(Refusal::Forbidden(s) | Refusal::BadRequest(s)) => return forbid(who, *s),
            },
        };
        who.acting = acting;
        if !authorizing {
            who.decision = Some(Decision {
                allowed: true,
                reason: String::new(),
            });
            return Ok(who);
        }
        let eff = who.effective();
        let d = rbac::authorize(&self.store, &eff, &who.attrs);
        if !d.allowed {
            let s = rbac::forbidden(&eff.name, &who.attrs, &d.reason);
            who.decision = Some(d);
            return forbid(who, s);
        }
        if needs_create_too(head, &who.attrs) {
            let mut create = who.attrs.clone();
            create.verb = "create".into();
            let d2 = rbac::authorize(&self.store, &eff, &create);
            if !d2.allowed {
                // The pod registry's compound check answers with an empty
                // reason: `pods "x" is forbidden: ` (kube-apiserver 1.36).
                let s = Status::forbidden("", "pods", &create.name, "");
                who.decision = Some(d2);
                return forbid(who, s);
            }
        }
        who.decision = Some(d);
        Ok(who)
    }

    /// The audit line of a request answered with `reply`.
    pub(crate) fn audit(&self, req: &Request, who: &Who, reply: &Reply, failure: Option<Value>) {
        let Some(log) = &self.audit else { return };
        let code = match reply {
            Reply::Response(r) => r.status,
            Reply::Upgrade(_) | Reply::RawUpgrade(_) => 101,
        };
        let failure = failure.or_else(|| match reply {
            Reply::Response(r) if r.status >= 400 => match &r.body {
                crate::http::Body::Bytes(b) => serde_json::from_slice::<Value>(b)
                    .ok()
                    .filter(|v| v["kind"] == "Status"),
                _ => None,
            },
            _ => None,
        });
        let decision = who.decision.as_ref().map(|d| {
            (
                if d.allowed { "allow" } else { "forbid" },
                d.reason.as_str(),
            )
        });
        log.write(
            req,
            &Entry {
                received: who.received,
                user: who.user.as_ref(),
                impersonated: who.acting.as_ref(),
                attrs: &who.attrs,
                code,
                failure,
                decision,
            },
        );
    }

    /// The caller a review answers for (the impersonated user when
    /// impersonating, as `handle` attached it), and whether reviews are
    /// authorized at all.
    pub(crate) fn review_subject(&self, req: &Request) -> (UserInfo, bool) {
        let who = req
            .admitted
            .get::<Who>()
            .map(|w| (*w).clone())
            .or_else(|| self.gate(req).ok());
        let user = who.map_or_else(UserInfo::anonymous, |w| w.effective());
        (user, self.auth.required())
    }
}
