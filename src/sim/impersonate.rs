//! `Impersonate-*` headers (docs/sim.md#impersonation), as upstream's
//! `WithImpersonation` filter reads them: `Impersonate-User` (a
//! `system:serviceaccount:NS:NAME` user is the ServiceAccount),
//! `Impersonate-Group` (repeated), `Impersonate-Extra-KEY` (repeated, the
//! key percent-decoded and lower-cased) and `Impersonate-Uid`. The caller
//! must be allowed `impersonate` on each (`users`, `groups`,
//! `serviceaccounts`, `userextras/KEY` and `uids`, the last two in
//! `authentication.k8s.io`), checked in that order; the first refusal is
//! upstream's 403. Groups, extras or a uid without a user are upstream's
//! plain-text 500.

use super::authn::{UserInfo, AUTHENTICATED, UNAUTHENTICATED};
use super::rbac::{self, Attributes};
use super::store::Store;
use crate::http::Request;
use crate::kube::status::Status;
use std::collections::BTreeMap;

/// Why an impersonation was refused.
#[derive(Debug)]
pub enum Refusal {
    /// 403 with upstream's Forbidden status (and the attributes checked,
    /// for the audit line).
    Forbidden(Box<Status>),
    /// Upstream's `InternalError`: 500, plain text.
    Internal(String),
}

#[derive(Debug)]
struct Ask {
    /// `User`, `ServiceAccount`, `Group`, `UserExtra`, `UID`.
    kind: &'static str,
    namespace: String,
    name: String,
    api_version: &'static str,
    field_path: String,
}

impl Ask {
    /// Go's `%v` of the `ObjectReference` upstream builds: its seven string
    /// fields, space-separated, in braces.
    fn go_value(&self) -> String {
        format!(
            "{{{} {} {}  {}  {}}}",
            self.kind, self.namespace, self.name, self.api_version, self.field_path
        )
    }
}

fn unescape_extra_key(k: &str) -> String {
    crate::http::parse::percent_decode(k, false).unwrap_or_else(|| k.to_string())
}

/// True when the request carries any `Impersonate-*` header.
pub fn asked(req: &Request) -> bool {
    req.headers
        .iter()
        .any(|(k, _)| k.to_ascii_lowercase().starts_with("impersonate-"))
}

fn build(req: &Request) -> Result<Vec<Ask>, String> {
    let mut asks = Vec::new();
    let user = req.header("impersonate-user").unwrap_or("");
    let has_user = !user.is_empty();
    if has_user {
        let sa = user
            .strip_prefix("system:serviceaccount:")
            .and_then(|r| r.split_once(':'))
            .filter(|(ns, n)| !ns.is_empty() && !n.is_empty() && !n.contains(':'));
        asks.push(match sa {
            Some((ns, n)) => Ask {
                kind: "ServiceAccount",
                namespace: ns.into(),
                name: n.into(),
                api_version: "",
                field_path: String::new(),
            },
            None => Ask {
                kind: "User",
                namespace: String::new(),
                name: user.into(),
                api_version: "",
                field_path: String::new(),
            },
        });
    }
    let mut others = false;
    for (k, v) in &req.headers {
        if k.eq_ignore_ascii_case("impersonate-group") {
            others = true;
            asks.push(Ask {
                kind: "Group",
                namespace: String::new(),
                name: v.clone(),
                api_version: "",
                field_path: String::new(),
            });
        }
    }
    for (k, v) in &req.headers {
        let lower = k.to_ascii_lowercase();
        if let Some(key) = lower.strip_prefix("impersonate-extra-") {
            others = true;
            asks.push(Ask {
                kind: "UserExtra",
                namespace: String::new(),
                name: v.clone(),
                api_version: "authentication.k8s.io/v1",
                field_path: unescape_extra_key(key),
            });
        }
    }
    let uid = req.header("impersonate-uid").unwrap_or("");
    if !uid.is_empty() {
        others = true;
        asks.push(Ask {
            kind: "UID",
            namespace: String::new(),
            name: uid.into(),
            api_version: "authentication.k8s.io/v1",
            field_path: String::new(),
        });
    }
    if others && !has_user {
        let list: Vec<String> = asks.iter().map(Ask::go_value).collect();
        return Err(format!(
            "requested [{}] without impersonating a user",
            list.join(" ")
        ));
    }
    Ok(asks)
}

/// The user `requestor` acts as, after checking each ask; `None` when the
/// request impersonates nobody.
pub fn impersonate(
    store: &Store,
    requestor: &UserInfo,
    req: &Request,
) -> Result<Option<UserInfo>, Refusal> {
    if !asked(req) {
        return Ok(None);
    }
    let asks = build(req).map_err(|e| {
        let text = format!(
            "Internal Server Error: {}: {e}",
            crate::kube::status::go_quote(&req.target)
        );
        Refusal::Internal(
            text.replace('&', "&amp;")
                .replace('<', "&lt;")
                .replace('>', "&gt;"),
        )
    })?;
    if asks.is_empty() {
        return Ok(None);
    }
    let groups_given = asks.iter().any(|a| a.kind == "Group");
    let mut user = UserInfo::default();
    let mut groups: Vec<String> = Vec::new();
    let mut extra: BTreeMap<String, Vec<String>> = BTreeMap::new();
    for ask in &asks {
        let (group, resource) = match ask.kind {
            "ServiceAccount" => ("", "serviceaccounts"),
            "User" => ("", "users"),
            "Group" => ("", "groups"),
            "UserExtra" => ("authentication.k8s.io", "userextras"),
            _ => ("authentication.k8s.io", "uids"),
        };
        let attrs = Attributes {
            verb: "impersonate".into(),
            resource_request: true,
            path: req.path.clone(),
            api_group: group.into(),
            api_version: if group.is_empty() { "" } else { "v1" }.into(),
            resource: resource.into(),
            subresource: if ask.kind == "UserExtra" {
                ask.field_path.clone()
            } else {
                String::new()
            },
            namespace: ask.namespace.clone(),
            name: ask.name.clone(),
        };
        match ask.kind {
            "ServiceAccount" => {
                user.name = format!("system:serviceaccount:{}:{}", ask.namespace, ask.name);
                if !groups_given {
                    groups = vec![
                        "system:serviceaccounts".into(),
                        format!("system:serviceaccounts:{}", ask.namespace),
                    ];
                }
            }
            "User" => user.name = ask.name.clone(),
            "Group" => groups.push(ask.name.clone()),
            "UserExtra" => extra
                .entry(ask.field_path.clone())
                .or_default()
                .push(ask.name.clone()),
            _ => user.uid = ask.name.clone(),
        }
        let d = rbac::authorize(store, requestor, &attrs);
        if !d.allowed {
            return Err(Refusal::Forbidden(Box::new(rbac::forbidden(
                &requestor.name,
                &attrs,
                &d.reason,
            ))));
        }
    }
    if user.name == "system:anonymous" {
        if !groups.iter().any(|g| g == UNAUTHENTICATED) {
            groups.push(UNAUTHENTICATED.into());
        }
    } else if !groups
        .iter()
        .any(|g| g == AUTHENTICATED || g == UNAUTHENTICATED)
    {
        groups.push(AUTHENTICATED.into());
    }
    user.groups = groups;
    user.extra = extra;
    Ok(Some(user))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn req(headers: &[(&str, &str)]) -> Request {
        Request {
            method: "GET".into(),
            target: "/api/v1/pods".into(),
            path: "/api/v1/pods".into(),
            query: vec![],
            headers: headers
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect(),
            body: vec![],
            peer: "127.0.0.1:1".parse().unwrap(),
            tls: false,
            client_cert_der: None,
            probe: Default::default(),
            admitted: Default::default(),
        }
    }

    #[test]
    fn groups_without_a_user_are_upstreams_internal_error() {
        let e = build(&req(&[("impersonate-group", "g")])).unwrap_err();
        assert_eq!(e, "requested [{Group  g    }] without impersonating a user");
        let e = build(&req(&[("impersonate-uid", "1")])).unwrap_err();
        assert_eq!(
            e,
            "requested [{UID  1  authentication.k8s.io/v1  }] without impersonating a user"
        );
        let a = build(&req(&[
            ("impersonate-user", "system:serviceaccount:ns:sa"),
            ("impersonate-extra-scopes%2Fx", "v"),
        ]))
        .unwrap();
        assert_eq!(a[0].kind, "ServiceAccount");
        assert_eq!(a[1].field_path, "scopes/x");
    }
}
