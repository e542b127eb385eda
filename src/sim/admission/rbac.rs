//! RBAC kinds (`rbac.authorization.k8s.io/v1`): the parts of upstream's
//! `ValidateRole`, `ValidateClusterRole`, `ValidateRoleBinding` and
//! `ValidateClusterRoleBinding` the authorizer depends on (`sim::rbac`
//! reads these objects on every request). Not done: the escalation check
//! (creating a role or binding grants nothing its writer lacks upstream
//! unless it holds `escalate`/`bind`; docs/sim.md#authorization).

use super::Causes;
use crate::sim::resources::Resource;
use crate::sim::store::{FieldCause, Obj};
use serde_json::Value;

const RBAC_GROUP: &str = "rbac.authorization.k8s.io";

/// `path.IsValidPathSegmentName`: the names RBAC objects may have.
pub(super) fn check_path_segment_name(s: &str) -> Result<(), crate::sim::rules::RuleError> {
    match s {
        "." => Err("may not be '.'".into()),
        ".." => Err("may not be '..'".into()),
        _ if s.contains('/') => Err("may not contain '/'".into()),
        _ if s.contains('%') => Err("may not contain '%'".into()),
        _ => Ok(()),
    }
}

fn strs(v: &Value) -> Vec<&str> {
    v.as_array()
        .map(|a| a.iter().filter_map(Value::as_str).collect())
        .unwrap_or_default()
}

/// `ValidatePolicyRule` for each of `rules`: verbs required; a resource
/// rule names API groups; a namespaced role has no non-resource URLs, a
/// rule has resources or non-resource URLs but not both.
pub(super) fn validate_role(res: Resource, obj: &Obj, causes: &mut Causes) {
    let Some(rules) = obj.get("rules").and_then(Value::as_array) else {
        return;
    };
    for (i, r) in rules.iter().enumerate() {
        let f = |x: &str| format!("rules[{i}].{x}");
        if strs(&r["verbs"]).is_empty() {
            causes.push(FieldCause::required(
                f("verbs"),
                "verbs must contain at least one value",
            ));
        }
        let urls = strs(&r["nonResourceURLs"]);
        let resources = strs(&r["resources"]);
        if !urls.is_empty() {
            if res == Resource::Role {
                causes.push(FieldCause::invalid_raw(
                    f("nonResourceURLs"),
                    format!("[]string{{{}}}", quoted_list(&urls)),
                    "namespaced rules cannot apply to non-resource URLs",
                ));
            }
            if !resources.is_empty() || !strs(&r["apiGroups"]).is_empty() {
                causes.push(FieldCause::invalid_raw(
                    f("nonResourceURLs"),
                    format!("[]string{{{}}}", quoted_list(&urls)),
                    "rules cannot apply to both regular resources and non-resource URLs",
                ));
            }
            continue;
        }
        if strs(&r["apiGroups"]).is_empty() {
            causes.push(FieldCause::required(
                f("apiGroups"),
                "resource rules must supply at least one api group",
            ));
        }
        if resources.is_empty() {
            causes.push(FieldCause::required(
                f("resources"),
                "resource rules must supply at least one resource",
            ));
        }
    }
}

fn quoted_list(v: &[&str]) -> String {
    v.iter()
        .map(|s| crate::kube::status::go_quote(s))
        .collect::<Vec<_>>()
        .join(", ")
}

/// `ValidateRoleBindingSubject` and the `roleRef` rules.
pub(super) fn validate_binding(res: Resource, obj: &Obj, causes: &mut Causes) {
    let rr = &obj["roleRef"];
    let group = rr["apiGroup"].as_str().unwrap_or("");
    if group != RBAC_GROUP {
        causes.push(FieldCause::not_supported(
            "roleRef.apiGroup",
            group,
            &[RBAC_GROUP],
        ));
    }
    let kind = rr["kind"].as_str().unwrap_or("");
    let kinds: &[&str] = if res == Resource::RoleBinding {
        &["Role", "ClusterRole"]
    } else {
        &["ClusterRole"]
    };
    if !kinds.contains(&kind) {
        causes.push(FieldCause::not_supported("roleRef.kind", kind, kinds));
    }
    if rr["name"].as_str().unwrap_or("").is_empty() {
        causes.push(FieldCause::required("roleRef.name", ""));
    }
    let Some(subjects) = obj.get("subjects").and_then(Value::as_array) else {
        return;
    };
    for (i, s) in subjects.iter().enumerate() {
        let f = |x: &str| format!("subjects[{i}].{x}");
        if s["name"].as_str().unwrap_or("").is_empty() {
            causes.push(FieldCause::required(f("name"), ""));
        }
        let kind = s["kind"].as_str().unwrap_or("");
        let api_group = s["apiGroup"].as_str().unwrap_or("");
        match kind {
            "ServiceAccount" => {
                if !api_group.is_empty() {
                    causes.push(FieldCause::not_supported(f("apiGroup"), api_group, &[""]));
                }
                if res == Resource::ClusterRoleBinding
                    && s["namespace"].as_str().unwrap_or("").is_empty()
                {
                    causes.push(FieldCause::required(f("namespace"), ""));
                }
            }
            "User" | "Group" => {
                if api_group != RBAC_GROUP {
                    causes.push(FieldCause::not_supported(
                        f("apiGroup"),
                        api_group,
                        &[RBAC_GROUP],
                    ));
                }
            }
            _ => causes.push(FieldCause::not_supported(
                f("kind"),
                kind,
                &["ServiceAccount", "User", "Group"],
            )),
        }
    }
}

/// A binding's `roleRef` cannot change (`ValidateRoleBindingUpdate`).
pub(super) fn validate_binding_update(new: &Obj, old: &Obj, causes: &mut Causes) {
    if new["roleRef"] != old["roleRef"] {
        causes.push(FieldCause::invalid_raw(
            "roleRef",
            new["roleRef"].to_string(),
            "cannot change roleRef",
        ));
    }
}
