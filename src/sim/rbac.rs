//! Authorization (docs/sim.md#authorization): what a request asks, read
//! as upstream's `RequestInfoFactory` reads it ([`attributes`]), and
//! whether the caller may, as kube-apiserver's `system:masters` shortcut
//! and RBAC authorizer decide it ([`authorize`]) over the Roles,
//! ClusterRoles, RoleBindings and ClusterRoleBindings in the store. The
//! bootstrap policy the real server starts with is written into the store
//! at start ([`bootstrap`]). Refusals carry upstream's Forbidden text
//! ([`forbidden`]).

use super::authn::{UserInfo, MASTERS};
use super::resources::Resource;
use super::store::{Selectors, Store};
use crate::http::Request;
use crate::kube::status::{forbidden_message, go_quote, Status};
use serde_json::Value;

/// What a request asks (`authorizer.Attributes`).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Attributes {
    pub verb: String,
    pub resource_request: bool,
    /// The request path (non-resource requests).
    pub path: String,
    pub api_group: String,
    pub api_version: String,
    pub resource: String,
    pub subresource: String,
    pub namespace: String,
    pub name: String,
}

/// Upstream's `RequestInfoFactory.NewRequestInfo` over `/api` and `/apis`:
/// the verb from the method (`get` without a name is `list`, or `watch`
/// with `watch=true`; `delete` without a name is `deletecollection`), a
/// `/namespaces/{ns}/…` prefix, `resource/name/subresource`, and a
/// `metadata.name=` field selector as the name of a list. Anything else is
/// a non-resource request whose verb is the method in lower case.
pub fn attributes(req: &Request) -> Attributes {
    let method = req.method.as_str();
    let mut a = Attributes {
        path: req.path.clone(),
        verb: method.to_ascii_lowercase(),
        ..Attributes::default()
    };
    let parts: Vec<&str> = req
        .path
        .trim_matches('/')
        .split('/')
        .filter(|s| !s.is_empty())
        .collect();
    if parts.len() < 3 || !matches!(parts[0], "api" | "apis") {
        return a;
    }
    let mut cur = &parts[1..];
    if parts[0] == "apis" {
        if cur.len() < 3 {
            return a;
        }
        a.api_group = cur[0].to_string();
        cur = &cur[1..];
    }
    a.resource_request = true;
    a.api_version = cur[0].to_string();
    cur = &cur[1..];
    let mut by_method = false;
    if matches!(cur[0], "proxy" | "watch") {
        if cur.len() < 2 {
            return a;
        }
        a.verb = cur[0].to_string();
        cur = &cur[1..];
    } else {
        by_method = true;
        a.verb = match method {
            "POST" => "create",
            "GET" | "HEAD" => "get",
            "PUT" => "update",
            "PATCH" => "patch",
            "DELETE" => "delete",
            _ => "",
        }
        .to_string();
    }
    if cur[0] == "namespaces" && cur.len() > 1 {
        a.namespace = cur[1].to_string();
        if cur.len() > 2 && !matches!(cur[2], "status" | "finalize") {
            cur = &cur[2..];
        }
    }
    if cur.len() >= 3 && a.verb != "proxy" {
        a.subresource = cur[2].to_string();
    }
    if cur.len() >= 2 {
        a.name = cur[1].to_string();
    }
    if !cur.is_empty() {
        a.resource = cur[0].to_string();
    }
    if a.name.is_empty() && a.verb == "get" {
        a.verb = if req.query_flag("watch") {
            "watch"
        } else {
            "list"
        }
        .to_string();
        if let Some(fs) = req.query("fieldSelector") {
            for term in fs.split(',') {
                let v = term
                    .strip_prefix("metadata.name==")
                    .or_else(|| term.strip_prefix("metadata.name="));
                if let Some(v) =
                    v.filter(|v| !v.is_empty() && !v.contains('/') && *v != "." && *v != "..")
                {
                    a.name = v.to_string();
                }
            }
        }
    }
    if by_method && a.name.is_empty() && a.verb == "delete" {
        a.verb = "deletecollection".into();
    }
    a
}

/// An authorizer's answer (`authorizer.Decision` and its reason).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Decision {
    pub allowed: bool,
    /// Why: `RBAC: allowed by …` when allowed; the errors met on the way
    /// (a binding to a missing role) when not; "" for `system:masters`.
    pub reason: String,
}

fn strs(v: &Value) -> impl Iterator<Item = &str> {
    v.as_array().into_iter().flatten().filter_map(Value::as_str)
}

fn has(v: &Value, want: &str) -> bool {
    strs(v).any(|x| x == want)
}

/// `RuleAllows`: verbs, apiGroups, resources (`*`, `res/sub`, `*/sub`),
/// resourceNames; or verbs and nonResourceURLs (`*`, a trailing `*`).
pub fn rule_allows(a: &Attributes, rule: &Value) -> bool {
    let verb = has(&rule["verbs"], "*") || has(&rule["verbs"], &a.verb);
    if !verb {
        return false;
    }
    if !a.resource_request {
        return strs(&rule["nonResourceURLs"]).any(|u| {
            u == "*"
                || u == a.path
                || (u.ends_with('*') && a.path.starts_with(u.trim_end_matches('*')))
        });
    }
    let group = has(&rule["apiGroups"], "*") || has(&rule["apiGroups"], &a.api_group);
    let combined = if a.subresource.is_empty() {
        a.resource.clone()
    } else {
        format!("{}/{}", a.resource, a.subresource)
    };
    let resource = strs(&rule["resources"]).any(|r| {
        r == "*"
            || r == combined
            || (!a.subresource.is_empty()
                && r.len() == a.subresource.len() + 2
                && r.starts_with("*/")
                && r.ends_with(a.subresource.as_str()))
    });
    let names = rule["resourceNames"].as_array().map_or(0, Vec::len) == 0
        || has(&rule["resourceNames"], &a.name);
    group && resource && names
}

/// `appliesTo`: the first subject naming this user (index), if any.
fn subject_for<'a>(user: &UserInfo, subjects: &'a Value, ns: &str) -> Option<&'a Value> {
    subjects.as_array()?.iter().find(|s| {
        let name = s["name"].as_str().unwrap_or("");
        match s["kind"].as_str().unwrap_or("") {
            "User" => user.name == name,
            "Group" => user.in_group(name),
            "ServiceAccount" => {
                let sa_ns = s["namespace"]
                    .as_str()
                    .filter(|n| !n.is_empty())
                    .unwrap_or(ns);
                !sa_ns.is_empty() && user.name == format!("system:serviceaccount:{sa_ns}:{name}")
            }
            _ => false,
        }
    })
}

fn describe_subject(s: &Value, binding_ns: &str) -> String {
    let kind = s["kind"].as_str().unwrap_or("");
    let name = s["name"].as_str().unwrap_or("");
    if kind == "ServiceAccount" {
        let ns = s["namespace"]
            .as_str()
            .filter(|n| !n.is_empty())
            .unwrap_or(binding_ns);
        format!("{kind} {}", go_quote(&format!("{ns}/{name}")))
    } else {
        format!("{kind} {}", go_quote(name))
    }
}

/// The rules of a binding's `roleRef`, or upstream's not-found text.
fn role_rules(store: &Store, role_ref: &Value, ns: &str) -> Result<Vec<Value>, String> {
    let kind = role_ref["kind"].as_str().unwrap_or("");
    let name = role_ref["name"].as_str().unwrap_or("");
    let (res, in_ns, what) = match kind {
        "Role" => (Resource::Role, ns, "role"),
        "ClusterRole" => (Resource::ClusterRole, "", "clusterrole"),
        _ => {
            return Err(format!(
                "unsupported role reference kind: {}",
                go_quote(kind)
            ))
        }
    };
    match store.get(res, in_ns, name) {
        Ok(o) => Ok(o["rules"].as_array().cloned().unwrap_or_default()),
        Err(_) => Err(format!(
            "{what}.rbac.authorization.k8s.io {} not found",
            go_quote(name)
        )),
    }
}

/// kube-apiserver's authorizer chain as the sim has it: members of
/// `system:masters` are allowed everything; otherwise RBAC
/// (`VisitRulesFor`): every ClusterRoleBinding naming the user, then the
/// RoleBindings of the request's namespace, until a rule allows.
pub fn authorize(store: &Store, user: &UserInfo, a: &Attributes) -> Decision {
    if user.in_group(MASTERS) {
        return Decision {
            allowed: true,
            reason: String::new(),
        };
    }
    let mut errors: Vec<String> = Vec::new();
    let all = Selectors::default();
    let (crbs, _) = store.list(Resource::ClusterRoleBinding, None, &all);
    for b in &crbs {
        let Some(subject) = subject_for(user, &b["subjects"], "") else {
            continue;
        };
        match role_rules(store, &b["roleRef"], "") {
            Err(e) => errors.push(e),
            Ok(rules) => {
                if rules.iter().any(|r| rule_allows(a, r)) {
                    return Decision {
                        allowed: true,
                        reason: format!(
                            "RBAC: allowed by ClusterRoleBinding {} of ClusterRole {} to {}",
                            go_quote(b["metadata"]["name"].as_str().unwrap_or("")),
                            go_quote(b["roleRef"]["name"].as_str().unwrap_or("")),
                            describe_subject(subject, "")
                        ),
                    };
                }
            }
        }
    }
    if !a.namespace.is_empty() {
        let (rbs, _) = store.list(Resource::RoleBinding, Some(&a.namespace), &all);
        for b in &rbs {
            let Some(subject) = subject_for(user, &b["subjects"], &a.namespace) else {
                continue;
            };
            match role_rules(store, &b["roleRef"], &a.namespace) {
                Err(e) => errors.push(e),
                Ok(rules) => {
                    if rules.iter().any(|r| rule_allows(a, r)) {
                        let name = b["metadata"]["name"].as_str().unwrap_or("");
                        return Decision {
                            allowed: true,
                            reason: format!(
                                "RBAC: allowed by RoleBinding {} of {} {} to {}",
                                go_quote(&format!("{name}/{}", a.namespace)),
                                b["roleRef"]["kind"].as_str().unwrap_or(""),
                                go_quote(b["roleRef"]["name"].as_str().unwrap_or("")),
                                describe_subject(subject, &a.namespace)
                            ),
                        };
                    }
                }
            }
        }
    }
    let reason = match errors.len() {
        0 => String::new(),
        1 => format!("RBAC: {}", errors[0]),
        _ => format!("RBAC: [{}]", errors.join(", ")),
    };
    Decision {
        allowed: false,
        reason,
    }
}

/// `responsewriters.Forbidden`: 403 with `NewForbidden`'s message over
/// `forbiddenMessage` (`User "u" cannot get path "/x"` for a non-resource
/// request), the authorizer's reason appended after `: `.
pub fn forbidden(user: &str, a: &Attributes, reason: &str) -> Status {
    let why = if a.resource_request {
        let resource = if a.subresource.is_empty() {
            a.resource.clone()
        } else {
            format!("{}/{}", a.resource, a.subresource)
        };
        forbidden_message(user, &a.verb, &a.api_group, &resource, &a.namespace)
    } else {
        format!(
            "User {} cannot {} path {}",
            go_quote(user),
            a.verb,
            go_quote(&a.path)
        )
    };
    let why = if reason.is_empty() {
        why
    } else {
        format!("{why}: {reason}")
    };
    if a.resource_request {
        Status::forbidden(&a.api_group, &a.resource, &a.name, &why)
    } else {
        Status::forbidden("", "", "", &why)
    }
}

/// The bootstrap policy the sim serves from start, as kube-apiserver
/// v1.36.3 has it (read from a real server): `cluster-admin` (bound to
/// `system:masters`), `admin`, `edit`, `view` (their aggregated rules
/// written out; aggregation itself is not done), `system:discovery`,
/// `system:basic-user` and `system:public-info-viewer` with their
/// bindings. Objects already there (a `--state-dir` restart) are kept.
pub fn bootstrap(store: &Store) -> Result<(), String> {
    let objs: Vec<Value> = serde_json::from_str(include_str!("rbac_bootstrap.json"))
        .map_err(|e| format!("the bootstrap policy: {e}"))?;
    for o in objs {
        let res = match o["kind"].as_str() {
            Some("ClusterRole") => Resource::ClusterRole,
            Some("ClusterRoleBinding") => Resource::ClusterRoleBinding,
            other => return Err(format!("the bootstrap policy: unexpected kind {other:?}")),
        };
        match store.create(res, "", o) {
            Ok(_) | Err(super::store::StoreError::AlreadyExists { .. }) => {}
            Err(e) => return Err(format!("the bootstrap policy: {}", e.message())),
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn req(method: &str, target: &str) -> Request {
        Request::for_test(method, target, &[])
    }

    fn at(method: &str, target: &str) -> (String, String, String, String, String, String) {
        let a = attributes(&req(method, target));
        (
            a.verb,
            a.api_group,
            a.resource,
            a.subresource,
            a.namespace,
            a.name,
        )
    }

    #[test]
    fn reads_requests_as_request_info_does() {
        let s = |x: &str| x.to_string();
        assert_eq!(
            at("GET", "/api/v1/namespaces/ns/pods"),
            (s("list"), s(""), s("pods"), s(""), s("ns"), s(""))
        );
        assert_eq!(at("GET", "/api/v1/pods?watch=true").0, "watch");
        assert_eq!(
            at("POST", "/api/v1/namespaces/ns/pods/p/exec"),
            (s("create"), s(""), s("pods"), s("exec"), s("ns"), s("p"))
        );
        assert_eq!(
            at("DELETE", "/apis/apps/v1/namespaces/ns/deployments"),
            (
                s("deletecollection"),
                s("apps"),
                s("deployments"),
                s(""),
                s("ns"),
                s("")
            )
        );
        assert_eq!(
            at("GET", "/api/v1/namespaces/ns"),
            (s("get"), s(""), s("namespaces"), s(""), s("ns"), s("ns"))
        );
        assert_eq!(
            at("PUT", "/api/v1/namespaces/ns/status"),
            (
                s("update"),
                s(""),
                s("namespaces"),
                s("status"),
                s("ns"),
                s("ns")
            )
        );
        assert_eq!(
            at(
                "GET",
                "/api/v1/namespaces/ns/pods?fieldSelector=metadata.name%3Dx"
            )
            .5,
            ""
        );
        let mut r = req("GET", "/api/v1/namespaces/ns/pods");
        r.query
            .push(("fieldSelector".into(), "metadata.name=x".into()));
        assert_eq!(attributes(&r).name, "x");
        let a = attributes(&req("GET", "/version"));
        assert!(!a.resource_request);
        assert_eq!((a.verb.as_str(), a.path.as_str()), ("get", "/version"));
        assert!(!attributes(&req("GET", "/apis/apps")).resource_request);
    }

    #[test]
    fn rules_match_as_upstream() {
        let a = attributes(&req("POST", "/api/v1/namespaces/ns/pods/p/exec"));
        assert!(rule_allows(
            &a,
            &json!({"verbs": ["create"], "apiGroups": [""], "resources": ["pods/exec"]})
        ));
        assert!(rule_allows(
            &a,
            &json!({"verbs": ["*"], "apiGroups": ["*"], "resources": ["*/exec"]})
        ));
        assert!(!rule_allows(
            &a,
            &json!({"verbs": ["create"], "apiGroups": [""], "resources": ["pods"]})
        ));
        assert!(!rule_allows(
            &a,
            &json!({"verbs": ["create"], "apiGroups": [""], "resources": ["pods/exec"], "resourceNames": ["q"]})
        ));
        assert!(rule_allows(
            &a,
            &json!({"verbs": ["create"], "apiGroups": [""], "resources": ["pods/exec"], "resourceNames": ["p"]})
        ));
        let v = attributes(&req("GET", "/apis/apps/v1"));
        assert!(rule_allows(
            &v,
            &json!({"verbs": ["get"], "nonResourceURLs": ["/apis/*"]})
        ));
        assert!(!rule_allows(
            &v,
            &json!({"verbs": ["get"], "nonResourceURLs": ["/api/*"]})
        ));
    }

    #[test]
    fn bindings_grant_as_upstream() {
        use crate::sim::store::{Store, StoreConfig};
        let store = Store::new(StoreConfig::default());
        bootstrap(&store).unwrap();
        let ns = json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "ns"}});
        store.create(Resource::Namespace, "", ns).unwrap();
        let rb = |name: &str, kind: &str, role: &str, subject: Value| {
            json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "RoleBinding",
                   "metadata": {"name": name, "namespace": "ns"},
                   "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": kind, "name": role},
                   "subjects": [subject]})
        };
        // A RoleBinding to the bootstrap `view` ClusterRole, for a service
        // account named without a namespace (the binding's is meant).
        let sa = json!({"kind": "ServiceAccount", "name": "robot"});
        store
            .create(
                Resource::RoleBinding,
                "ns",
                rb("sa-view", "ClusterRole", "view", sa),
            )
            .unwrap();
        let robot = UserInfo::authenticated("system:serviceaccount:ns:robot", "", &[]);
        let list = |ns: &str, res: &str| Attributes {
            verb: "list".into(),
            resource_request: true,
            resource: res.into(),
            namespace: ns.into(),
            ..Attributes::default()
        };
        let d = authorize(&store, &robot, &list("ns", "pods"));
        assert!(d.allowed);
        assert_eq!(
            d.reason,
            "RBAC: allowed by RoleBinding \"sa-view/ns\" of ClusterRole \"view\" to ServiceAccount \"ns/robot\""
        );
        assert!(!authorize(&store, &robot, &list("ns", "secrets")).allowed);
        assert!(!authorize(&store, &robot, &list("other", "pods")).allowed);
        // A group's binding to a missing Role: denied, the error the reason.
        let g = json!({"apiGroup": "rbac.authorization.k8s.io", "kind": "Group", "name": "devs"});
        store
            .create(Resource::RoleBinding, "ns", rb("devs", "Role", "gone", g))
            .unwrap();
        let dev = UserInfo::authenticated("d", "", &["devs".to_string()]);
        let d = authorize(&store, &dev, &list("ns", "pods"));
        assert_eq!(
            d,
            Decision {
                allowed: false,
                reason: "RBAC: role.rbac.authorization.k8s.io \"gone\" not found".into()
            }
        );
        // system:masters needs no binding; the bootstrap ones serve the rest.
        let admin = crate::sim::authn::admin();
        assert_eq!(authorize(&store, &admin, &list("", "nodes")).reason, "");
        let version = Attributes {
            verb: "get".into(),
            path: "/version".into(),
            ..Attributes::default()
        };
        assert!(authorize(&store, &dev, &version).allowed);
        assert!(!authorize(&store, &UserInfo::anonymous(), &list("ns", "pods")).allowed);
        assert!(authorize(&store, &UserInfo::anonymous(), &version).allowed);
    }

    #[test]
    fn forbidden_texts() {
        let a = attributes(&req("GET", "/api/v1/namespaces/ns/pods/x"));
        let s = forbidden("u", &a, "");
        assert_eq!(
            s.message,
            "pods \"x\" is forbidden: User \"u\" cannot get resource \"pods\" in API group \"\" in the namespace \"ns\""
        );
        let a = attributes(&req("GET", "/apis/apps/v1/deployments"));
        assert_eq!(
            forbidden("u", &a, "").message,
            "deployments.apps is forbidden: User \"u\" cannot list resource \"deployments\" in API group \"apps\" at the cluster scope"
        );
        let a = attributes(&req("GET", "/metrics"));
        assert_eq!(
            forbidden("u", &a, "").message,
            "forbidden: User \"u\" cannot get path \"/metrics\""
        );
    }
}
