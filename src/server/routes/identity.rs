//! `GET /v1/auth/config` (unauthenticated: what `kubegate login` should
//! use, nothing secret) and `GET /v1/auth/whoami` (the caller as the
//! daemon sees it) (docs/api.md#authentication).

use std::time::{Duration, UNIX_EPOCH};

use serde_json::{json, Value};

use super::{json_reply, FrontDoor};
use crate::api::{Credential, Identity};
use crate::http::Reply;

impl FrontDoor {
    /// `{"oidc": null}` or `{"oidc": {"issuer", "client_id", "scopes"}}`.
    pub(super) fn auth_config(&self) -> Reply {
        let principals = self.principals.read().clone();
        let oidc = principals.oidc().and_then(|o| o.login()).map_or(
            Value::Null,
            |l| json!({"issuer": l.issuer, "client_id": l.client_id, "scopes": l.scopes}),
        );
        json_reply(200, &json!({ "oidc": oidc }))
    }
}

/// The caller: name, how it authenticated, groups, Kubernetes groups,
/// workspaces, whether it may start sessions, when its token expires.
pub(super) fn whoami(who: &Identity) -> Reply {
    let (credential, issuer, groups, expires_at) = match &who.credential {
        Credential::Static => ("static", Value::Null, Vec::new(), Value::Null),
        Credential::Oidc {
            issuer,
            groups,
            expires_unix,
        } => (
            "oidc",
            Value::from(issuer.clone()),
            groups.clone(),
            Value::from(crate::kube::time::rfc3339(
                UNIX_EPOCH + Duration::from_secs(*expires_unix),
            )),
        ),
    };
    let workspaces: Vec<String> = who.workspaces.iter().map(ToString::to_string).collect();
    json_reply(
        200,
        &json!({
            "principal": who.name,
            "credential": credential,
            "issuer": issuer,
            "groups": groups,
            "kube_groups": who.kube_groups,
            "workspaces": workspaces,
            "may_start_sessions": who.may_start_sessions,
            "expires_at": expires_at,
        }),
    )
}
