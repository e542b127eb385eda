//! SelfSubjectAccessReview and SelfSubjectReview over HTTP: create-only,
//! answered for the caller by `sim::reviews` (docs/sim.md#access-reviews).

use super::*;

impl ApiServer {
    /// A SelfSubjectAccessReview or SelfSubjectReview: created (POST)
    /// only, answered for the caller, never stored (`sim::reviews`).
    pub(super) fn review(&self, req: &Request, res: Resource) -> Response {
        if req.method != "POST" {
            return method_not_allowed();
        }
        let body = match body_object(req, res.info()) {
            Ok(o) => o,
            Err(r) => return r,
        };
        let body = match crate::sim::store::check_body(res, body) {
            Ok(b) => b,
            Err(e) => return store_error(e),
        };
        let (caller, authorizing) = self.review_subject(req);
        if res == Resource::SelfSubjectReview {
            return json_response(201, &crate::sim::reviews::self_subject_review(&caller));
        }
        let decide = |a: &crate::sim::rbac::Attributes| {
            if authorizing {
                crate::sim::rbac::authorize(&self.store, &caller, a)
            } else {
                crate::sim::rbac::Decision {
                    allowed: true,
                    reason: String::new(),
                }
            }
        };
        match crate::sim::reviews::self_subject_access_review(&body, decide) {
            Ok(answer) => json_response(201, &answer),
            Err(causes) => {
                // Upstream builds this Invalid with no kind and no name.
                use crate::kube::status::{StatusCause, StatusDetails, StatusReason};
                let messages: Vec<String> = causes.iter().map(|c| c.message()).collect();
                let joined = if messages.len() == 1 {
                    messages[0].clone()
                } else {
                    format!("[{}]", messages.join(", "))
                };
                let details = StatusDetails {
                    group: res.info().group.to_string(),
                    causes: causes
                        .iter()
                        .map(|c| StatusCause {
                            reason: c.kind.reason().to_string(),
                            message: c.body(),
                            field: c.field.clone(),
                        })
                        .collect(),
                    ..StatusDetails::default()
                };
                status_response(&Status {
                    kind: Some("Status".into()),
                    api_version: Some("v1".into()),
                    status: "Failure".into(),
                    message: format!(".{} \"\" is invalid: {joined}", res.info().group),
                    reason: Some(StatusReason::parse("Invalid")),
                    details: Some(details),
                    code: 422,
                    ..Status::default()
                })
            }
        }
    }
}
