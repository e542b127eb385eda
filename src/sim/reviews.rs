//! SelfSubjectAccessReview (`kubectl auth can-i`) and SelfSubjectReview
//! (`kubectl auth whoami`): answered for the caller, never stored
//! (docs/sim.md#access-reviews).
//!
//! The sim authenticates one credential (its token, or the client
//! certificate it issued) and authorizes nothing further: whoever it
//! serves may do everything. So every access review is allowed, and the
//! caller is the one identity the credential stands for, the same for the
//! token and the certificate (`kubegate-sim-admin` in `system:masters`,
//! the certificate's own subject); with `--no-auth` it serves everyone, as
//! upstream's anonymous user (`system:anonymous`).

use super::store::FieldCause;
use crate::kube::time::now_rfc3339;
use serde_json::{json, Value};

/// The user the sim's token and client certificate authenticate: the
/// client certificate's CommonName and Organization (`sim::tls`).
pub const ADMIN_USER: &str = "kubegate-sim-admin";
pub const ADMIN_GROUP: &str = "system:masters";

/// Who a request is, as upstream's authenticators would say.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Caller {
    pub username: &'static str,
    pub groups: &'static [&'static str],
}

impl Caller {
    /// The holder of the sim's token or client certificate.
    pub const ADMIN: Caller = Caller {
        username: ADMIN_USER,
        groups: &[ADMIN_GROUP, "system:authenticated"],
    };
    /// Anyone, when the sim runs with `--no-auth`.
    pub const ANONYMOUS: Caller = Caller {
        username: "system:anonymous",
        groups: &["system:unauthenticated"],
    };
}

/// The answer to a SelfSubjectReview: the caller's user info.
pub fn self_subject_review(caller: &Caller) -> Value {
    json!({
        "kind": "SelfSubjectReview",
        "apiVersion": "authentication.k8s.io/v1",
        "metadata": {"creationTimestamp": now_rfc3339()},
        "status": {"userInfo": {"username": caller.username, "groups": caller.groups}},
    })
}

/// `ValidateSelfSubjectAccessReviewSpec`: exactly one of the two kinds of
/// attributes. The causes, or the review answered: its spec echoed, and
/// allowed (the sim authorizes every caller it authenticated to do
/// everything, as upstream's `system:masters` answer reads: no reason).
pub fn self_subject_access_review(body: &Value) -> Result<Value, Vec<FieldCause>> {
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
    Ok(json!({
        "kind": "SelfSubjectAccessReview",
        "apiVersion": "authorization.k8s.io/v1",
        "metadata": {},
        "spec": spec,
        "status": {"allowed": true},
    }))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reviews_answer_for_the_caller() {
        let r = self_subject_review(&Caller::ADMIN);
        assert_eq!(
            r["status"]["userInfo"],
            json!({"username": "kubegate-sim-admin", "groups": ["system:masters", "system:authenticated"]})
        );
        let ok = self_subject_access_review(
            &json!({"spec": {"resourceAttributes": {"verb": "create", "resource": "pods"}}}),
        )
        .unwrap();
        assert_eq!(ok["status"], json!({"allowed": true}));
        let e = self_subject_access_review(&json!({"spec": {}})).unwrap_err();
        assert_eq!(e[0].field, "spec.resourceAttributes");
    }
}
