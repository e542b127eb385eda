//! SelfSubjectAccessReview (`kubectl auth can-i`) and SelfSubjectReview
//! (`kubectl auth whoami`): answered for the caller, never stored
//! (docs/sim.md#access-reviews).
//!
//! The caller is who `sim::authn` authenticated (the impersonated user when
//! the request impersonates); an access review is decided by the same
//! authorizer as requests (`sim::rbac`): `system:masters` members are
//! allowed everything with no reason, others by RBAC, whose reason names
//! the binding that allowed. With `--no-auth` the sim serves everyone as
//! upstream's anonymous user (`system:anonymous`) and allows everything.

use super::authn::UserInfo;
use super::rbac::{Attributes, Decision};
use super::store::FieldCause;
use crate::kube::time::now_rfc3339;
use serde_json::{json, Value};

/// The user the sim's token and client certificate authenticate: the
/// client certificate's CommonName and Organization (`sim::tls`).
pub const ADMIN_USER: &str = "kubegate-sim-admin";
pub const ADMIN_GROUP: &str = "system:masters";

/// The answer to a SelfSubjectReview: the caller's user info.
pub fn self_subject_review(caller: &UserInfo) -> Value {
    json!({
        "kind": "SelfSubjectReview",
        "apiVersion": "authentication.k8s.io/v1",
        "metadata": {"creationTimestamp": now_rfc3339()},
        "status": {"userInfo": caller.to_json()},
    })
}

/// The attributes a review's spec asks about (`ResourceAttributesFrom`,
/// `NonResourceAttributesFrom`).
fn review_attributes(spec: &Value) -> Attributes {
    let s = |v: &Value| v.as_str().unwrap_or("").to_string();
    if let Some(r) = spec.get("resourceAttributes").filter(|v| v.is_object()) {
        Attributes {
            verb: s(&r["verb"]),
            resource_request: true,
            path: String::new(),
            api_group: s(&r["group"]),
            api_version: s(&r["version"]),
            resource: s(&r["resource"]),
            subresource: s(&r["subresource"]),
            namespace: s(&r["namespace"]),
            name: s(&r["name"]),
        }
    } else {
        let nr = &spec["nonResourceAttributes"];
        Attributes {
            verb: s(&nr["verb"]),
            path: s(&nr["path"]),
            ..Attributes::default()
        }
    }
}

/// `ValidateSelfSubjectAccessReviewSpec`: exactly one of the two kinds of
/// attributes. The causes, or the review answered by `decide`: its spec
/// echoed, `allowed`, and the reason when there is one.
pub fn self_subject_access_review(
    body: &Value,
    decide: impl FnOnce(&Attributes) -> Decision,
) -> Result<Value, Vec<FieldCause>> {
    let spec = &body["spec"];
    let resource = spec.get("resourceAttributes").filter(|v| v.is_object());
    let non_resource = spec.get("nonResourceAttributes").filter(|v| v.is_object());
    match (resource, non_resource) {
        (None, None) => {
            return Err(vec![FieldCause::invalid_raw(
                "spec.resourceAttributes",
                "null",
                "exactly one of nonResourceAttributes or resourceAttributes must be specified",
            )])
        }
        (Some(_), Some(nr)) => {
            let shown = format!(
                "{{\"Path\":{},\"Verb\":{}}}",
                json!(nr["path"].as_str().unwrap_or("")),
                json!(nr["verb"].as_str().unwrap_or(""))
            );
            return Err(vec![FieldCause::invalid_raw(
                "spec.nonResourceAttributes",
                shown,
                "cannot be specified in combination with resourceAttributes",
            )]);
        }
        _ => {}
    }
    let d = decide(&review_attributes(spec));
    let mut status = json!({"allowed": d.allowed});
    if !d.reason.is_empty() {
        status["reason"] = json!(d.reason);
    }
    Ok(json!({
        "kind": "SelfSubjectAccessReview",
        "apiVersion": "authorization.k8s.io/v1",
        "metadata": {},
        "spec": spec,
        "status": status,
    }))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reviews_answer_for_the_caller() {
        let r = self_subject_review(&crate::sim::authn::admin());
        assert_eq!(
            r["status"]["userInfo"],
            json!({"username": "kubegate-sim-admin", "groups": ["system:masters", "system:authenticated"]})
        );
        let yes = |_: &Attributes| Decision {
            allowed: true,
            reason: String::new(),
        };
        let ok = self_subject_access_review(
            &json!({"spec": {"resourceAttributes": {"verb": "create", "resource": "pods"}}}),
            yes,
        )
        .unwrap();
        assert_eq!(ok["status"], json!({"allowed": true}));
        let e = self_subject_access_review(&json!({"spec": {}}), yes).unwrap_err();
        assert_eq!(e[0].field, "spec.resourceAttributes");
    }
}
