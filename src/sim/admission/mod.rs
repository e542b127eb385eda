//! Admission for the sim: per-kind defaulting and validation, plus the
//! Service ClusterIP / NodePort allocator.
//!
//! - here: the entry points ([`admit_create`], [`admit_update`]), the JSON
//!   helpers the kinds share, metadata (names, labels, annotations) and
//!   namespaces.
//! - `pods.rs`, `services.rs`, `workloads.rs` (Deployments, ReplicaSets,
//!   Ingresses), `config.rs` (ConfigMaps, Secrets), `gateway.rs` (the
//!   Gateway API kinds), `coordination.rs` (Leases), `nodes.rs` (Nodes),
//!   `storage.rs` (PersistentVolumeClaims): each kind's defaults and
//!   rules.
//! - [`allocator`]: ClusterIPs and NodePorts.
//! - the syntax rules on names, keys and ports are [`crate::sim::rules`]'s.
//!
//! The store calls these inside its write lock, so allocations are race-free
//! and a rejected write changes nothing. Defaults and messages follow upstream
//! (`pkg/apis/*/v1/defaults.go`, `pkg/apis/*/validation`): what kubectl shows
//! for a rejected object should read like a real cluster's answer. Only the
//! rules a client of this project can trip are modelled; anything else is
//! accepted as given.
//!
//! It never touches identity fields (uid, resourceVersion, timestamps: the
//! store owns them), never panics on malformed input (wrong JSON types are
//! treated as absent or rejected), and never allocates before the object is
//! known to be valid.

use crate::sim::resources::Resource;
use crate::sim::rules::{
    check_dns1035_label, check_dns1123_label, check_dns1123_subdomain, validate_label_key,
    validate_label_value, RuleError,
};
use crate::sim::store::error::quote;
use crate::sim::store::{meta_mut, meta_of, meta_str, CauseKind, FieldCause, Obj};
use serde_json::{json, Map, Value};
use std::collections::BTreeMap;

pub mod allocator;
mod config;
mod coordination;
mod gateway;
mod nodes;
mod pods;
mod rbac;
mod services;
mod storage;
mod workloads;

use config::{
    null_strings_are_empty, secret_defaults, validate_config_data, validate_immutable_data,
    validate_secret_type,
};
use coordination::{lease_defaults, validate_lease};
use gateway::{
    gateway_defaults, http_route_defaults, validate_gateway, validate_gateway_class,
    validate_http_route,
};
use nodes::{node_create_defaults, validate_node, validate_node_update};
pub(crate) use pods::pod_service_account;
use pods::{pod_defaults, qos_class, validate_pod_spec, validate_pod_update};
use services::{
    service_defaults, service_fill_from_old, validate_service, validate_service_update,
};
pub(crate) use storage::PVC_PROTECTION;
use storage::{pvc_defaults, validate_pvc, validate_pvc_update};
use workloads::{validate_ingress, validate_workload, workload_defaults};

/// Why admission refused a write.
#[derive(Debug, Clone, PartialEq)]
pub enum Rejection {
    /// 422 with field causes.
    Invalid(Vec<FieldCause>),
    /// 400 (the body could not be decoded as the kind).
    BadRequest(String),
}

type Causes = Vec<FieldCause>;

fn done(causes: Causes) -> Result<(), Rejection> {
    if causes.is_empty() {
        Ok(())
    } else {
        Err(Rejection::Invalid(causes))
    }
}

// ---------------------------------------------------------------- entry points

/// Defaults and validates an object about to be created. The store has set
/// `metadata.name` (from `generateName` if needed) and the namespace.
pub fn admit_create(res: Resource, obj: &mut Obj) -> Result<(), Rejection> {
    if matches!(res, Resource::Event | Resource::EventV1) {
        return crate::sim::events::admit(obj, None);
    }
    let mut causes = Causes::new();
    validate_meta(res, obj, &mut causes);
    match res {
        Resource::Namespace => {
            namespace_defaults(obj, None);
            set(obj, "status", json!({"phase": "Active"}));
        }
        Resource::Pod => {
            pod_defaults(obj);
            validate_pod_spec(obj.get("spec"), "spec", &mut causes);
            let qos = qos_class(obj.get("spec"));
            set(obj, "status", json!({"phase": "Pending", "qosClass": qos}));
        }
        Resource::Service => {
            service_defaults(obj);
            validate_service(obj, &mut causes);
            set(obj, "status", json!({"loadBalancer": {}}));
        }
        Resource::ConfigMap => {
            null_strings_are_empty(obj);
            validate_config_data(obj, false, &mut causes)?
        }
        // `ValidateServiceAccount`: the name (checked above) is all; the
        // sim keeps `secrets` and `imagePullSecrets` as given.
        Resource::ServiceAccount => {}
        Resource::Lease => {
            lease_defaults(obj, None);
            validate_lease(obj, &mut causes);
        }
        // A Node's status is the kubelet's to give on create.
        Resource::Node => {
            node_create_defaults(obj);
            validate_node(obj, &mut causes);
        }
        // Admitted by `sim::events` above.
        Resource::Event | Resource::EventV1 => {}
        Resource::PersistentVolumeClaim => {
            pvc_defaults(obj, true);
            validate_pvc(obj, &mut causes);
        }
        // Answered by the API layer (`sim::reviews`), never stored.
        Resource::SelfSubjectAccessReview | Resource::SelfSubjectReview => {}
        Resource::Role | Resource::ClusterRole => rbac::validate_role(res, obj, &mut causes),
        Resource::RoleBinding | Resource::ClusterRoleBinding => {
            rbac::validate_binding(res, obj, &mut causes)
        }
        Resource::Secret => {
            null_strings_are_empty(obj);
            secret_defaults(obj)?;
            validate_config_data(obj, true, &mut causes)?;
            validate_secret_type(obj, &mut causes);
        }
        Resource::Deployment | Resource::ReplicaSet => {
            workload_defaults(res, obj);
            validate_workload(res, obj, &mut causes);
            let status = if res == Resource::ReplicaSet {
                json!({"replicas": 0})
            } else {
                json!({})
            };
            set(obj, "status", status);
        }
        Resource::Ingress => {
            validate_ingress(obj, &mut causes);
            set(obj, "status", json!({"loadBalancer": {}}));
        }
        Resource::GatewayClass | Resource::Gateway | Resource::HttpRoute => {
            validate_gateway_kind(res, obj, &mut causes);
            // The controller's to write (sim::gateway).
            if let Some(m) = obj.as_object_mut() {
                m.remove("status");
            }
        }
    }
    done(causes)
}

/// Defaults and validates a replacement of `old` (status already carried
/// over by the store), including each kind's immutable fields.
pub fn admit_update(res: Resource, new: &mut Obj, old: &Obj) -> Result<(), Rejection> {
    if matches!(res, Resource::Event | Resource::EventV1) {
        return crate::sim::events::admit(new, Some(old));
    }
    let mut causes = Causes::new();
    validate_meta(res, new, &mut causes);
    match res {
        Resource::Namespace => namespace_defaults(new, Some(old)),
        Resource::Pod => {
            pod_defaults(new);
            validate_pod_spec(new.get("spec"), "spec", &mut causes);
            if causes.is_empty() {
                validate_pod_update(new, old, &mut causes);
            }
        }
        Resource::Service => {
            service_fill_from_old(new, old);
            service_defaults(new);
            validate_service(new, &mut causes);
            validate_service_update(new, old, &mut causes);
        }
        Resource::ConfigMap => {
            null_strings_are_empty(new);
            validate_config_data(new, false, &mut causes)?;
            validate_immutable_data(new, old, &mut causes);
        }
        Resource::Secret => {
            null_strings_are_empty(new);
            secret_defaults(new)?;
            validate_config_data(new, true, &mut causes)?;
            validate_secret_type(new, &mut causes);
            let (nt, ot) = (str_at(new, &["type"]), str_at(old, &["type"]));
            if nt != ot {
                causes.push(FieldCause::invalid("type", nt, "field is immutable"));
            }
            validate_immutable_data(new, old, &mut causes);
        }
        Resource::Deployment | Resource::ReplicaSet => {
            workload_defaults(res, new);
            validate_workload(res, new, &mut causes);
            if new.pointer("/spec/selector") != old.pointer("/spec/selector") {
                let sel = new
                    .pointer("/spec/selector")
                    .cloned()
                    .unwrap_or(Value::Null);
                causes.push(FieldCause::invalid_raw(
                    "spec.selector",
                    go_selector(&sel),
                    "field is immutable",
                ));
            }
        }
        Resource::Ingress => validate_ingress(new, &mut causes),
        Resource::ServiceAccount => {}
        Resource::Lease => {
            lease_defaults(new, Some(old));
            validate_lease(new, &mut causes);
        }
        Resource::Node => {
            validate_node(new, &mut causes);
            validate_node_update(new, old, &mut causes);
        }
        Resource::Event | Resource::EventV1 => {}
        Resource::PersistentVolumeClaim => {
            pvc_defaults(new, false);
            validate_pvc(new, &mut causes);
            validate_pvc_update(new, old, &mut causes);
        }
        Resource::SelfSubjectAccessReview | Resource::SelfSubjectReview => {}
        Resource::Role | Resource::ClusterRole => rbac::validate_role(res, new, &mut causes),
        Resource::RoleBinding | Resource::ClusterRoleBinding => {
            rbac::validate_binding(res, new, &mut causes);
            rbac::validate_binding_update(new, old, &mut causes);
        }
        Resource::GatewayClass | Resource::Gateway | Resource::HttpRoute => {
            validate_gateway_kind(res, new, &mut causes)
        }
    }
    done(causes)
}

/// The Gateway API kinds' defaults and rules (`gateway.rs`).
fn validate_gateway_kind(res: Resource, obj: &mut Obj, causes: &mut Causes) {
    match res {
        Resource::GatewayClass => validate_gateway_class(obj, causes),
        Resource::Gateway => {
            gateway_defaults(obj);
            validate_gateway(obj, causes);
        }
        _ => {
            http_route_defaults(obj);
            validate_http_route(obj, causes);
        }
    }
}

// ---------------------------------------------------------------- small helpers

fn set(obj: &mut Obj, field: &str, v: Value) {
    if let Some(m) = obj.as_object_mut() {
        m.insert(field.to_string(), v);
    }
}

/// The object at `obj[field]`, created (replacing a non-object) if needed.
fn obj_field<'a>(obj: &'a mut Map<String, Value>, field: &str) -> &'a mut Map<String, Value> {
    let v = obj
        .entry(field)
        .or_insert_with(|| Value::Object(Map::new()));
    if !v.is_object() {
        *v = Value::Object(Map::new());
    }
    match v {
        Value::Object(m) => m,
        _ => unreachable!("replaced by an object above"),
    }
}

fn default_field(m: &mut Map<String, Value>, field: &str, v: Value) {
    match m.get(field) {
        None | Some(Value::Null) => {
            m.insert(field.to_string(), v);
        }
        Some(Value::String(s)) if s.is_empty() => {
            m.insert(field.to_string(), v);
        }
        _ => {}
    }
}

fn str_at<'a>(v: &'a Value, path: &[&str]) -> &'a str {
    let mut cur = v;
    for p in path {
        match cur.get(p) {
            Some(n) => cur = n,
            None => return "",
        }
    }
    cur.as_str().unwrap_or("")
}

fn arr(v: Option<&Value>) -> &[Value] {
    v.and_then(Value::as_array).map_or(&[], Vec::as_slice)
}

/// A JSON value rendered the way Go's `%v` shows it in field errors: strings
/// quoted, everything else as JSON.
fn render(v: &Value) -> String {
    match v {
        Value::String(s) => quote(s),
        other => other.to_string(),
    }
}

/// `{"a":"b"}`: a label map as upstream's `field.Error` renders a map it
/// can marshal (`json.Marshal`: keys sorted, no spaces; `null` for none).
pub(super) fn json_map(m: Option<&Map<String, Value>>) -> String {
    match m {
        None => "null".into(),
        Some(m) => {
            let sorted: BTreeMap<&String, &Value> = m.iter().collect();
            serde_json::to_string(&sorted).unwrap_or_else(|_| "{}".into())
        }
    }
}

/// `map[string]string{"a":"b"}`: Go's `%#v` of a label map.
fn go_map(m: Option<&Map<String, Value>>) -> String {
    match m {
        None => "map[string]string(nil)".into(),
        Some(m) => {
            let sorted: BTreeMap<&String, &Value> = m.iter().collect();
            let parts: Vec<String> = sorted
                .iter()
                .map(|(k, v)| format!("{}:{}", quote(k), render(v)))
                .collect();
            format!("map[string]string{{{}}}", parts.join(", "))
        }
    }
}

fn go_selector(sel: &Value) -> String {
    let ml = go_map(sel.get("matchLabels").and_then(Value::as_object));
    let me = match sel.get("matchExpressions").and_then(Value::as_array) {
        Some(a) if !a.is_empty() => {
            format!("[]v1.LabelSelectorRequirement{}", Value::Array(a.clone()))
        }
        _ => "[]v1.LabelSelectorRequirement(nil)".into(),
    };
    format!("v1.LabelSelector{{MatchLabels:{ml}, MatchExpressions:{me}}}")
}

// ---------------------------------------------------------------- names

/// Name rules per kind, as upstream's `ValidateXName` functions choose them.
fn name_check(res: Resource) -> fn(&str) -> Result<(), RuleError> {
    match res {
        Resource::Namespace => check_dns1123_label,
        Resource::Service => check_dns1035_label,
        // `ValidateRBACName`: any path segment (`system:discovery`).
        Resource::Role
        | Resource::ClusterRole
        | Resource::RoleBinding
        | Resource::ClusterRoleBinding => rbac::check_path_segment_name,
        _ => check_dns1123_subdomain,
    }
}

fn validate_meta(res: Resource, obj: &Obj, causes: &mut Causes) {
    let name = meta_str(obj, "name");
    if name.is_empty() {
        causes.push(FieldCause::required(
            "metadata.name",
            "name or generateName is required",
        ));
    } else if let Err(e) = name_check(res)(name) {
        causes.push(FieldCause::invalid("metadata.name", name, e));
    }
    let Some(meta) = meta_of(obj) else { return };
    if let Some(labels) = meta.get("labels").and_then(Value::as_object) {
        for (k, v) in labels {
            if let Err(e) = validate_label_key(k) {
                causes.push(FieldCause::invalid("metadata.labels", k, e));
            }
            let v = v.as_str().unwrap_or("");
            if let Err(e) = validate_label_value(v) {
                causes.push(FieldCause::invalid("metadata.labels", v, e));
            }
        }
    }
    if let Some(ann) = meta.get("annotations").and_then(Value::as_object) {
        let mut total = 0;
        for (k, v) in ann {
            if let Err(e) = validate_label_key(&k.to_ascii_lowercase()) {
                causes.push(FieldCause::invalid("metadata.annotations", k, e));
            }
            total += k.len() + v.as_str().map_or(0, str::len);
        }
        if total > 256 * 1024 {
            causes.push(FieldCause::new(
                CauseKind::TooLong,
                "metadata.annotations",
                None,
                "must have at most 262144 bytes",
            ));
        }
    }
}

// ---------------------------------------------------------------- namespaces

fn namespace_defaults(obj: &mut Obj, old: Option<&Obj>) {
    let name = meta_str(obj, "name").to_string();
    let meta = meta_mut(obj);
    obj_field(meta, "labels").insert("kubernetes.io/metadata.name".into(), Value::String(name));
    let spec = match old {
        // Upstream keeps the finalizers on a plain update.
        Some(o) => o.get("spec").cloned().unwrap_or_else(|| json!({})),
        None => json!({"finalizers": ["kubernetes"]}),
    };
    set(obj, "spec", spec);
}

#[cfg(test)]
mod tests;
