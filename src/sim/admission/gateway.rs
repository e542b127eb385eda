//! The Gateway API kinds (docs/sim.md#gateway-api): GatewayClass, Gateway
//! and HTTPRoute, defaulted and validated as their CRDs' schemas do for
//! the fields a client of this project sets (upstream:
//! `sigs.k8s.io/gateway-api` `apis/v1`, the CRDs' defaults and CEL rules);
//! the rest is accepted as given. Status is the controller's
//! (`sim::gateway`): a create starts without one.

use super::{arr, obj_field, str_at, Causes};
use crate::sim::store::{CauseKind, FieldCause, Obj};
use serde_json::{json, Value};

/// `spec.controllerName` is required.
pub(super) fn validate_gateway_class(obj: &Obj, causes: &mut Causes) {
    if str_at(obj, &["spec", "controllerName"]).is_empty() {
        causes.push(FieldCause::required("spec.controllerName", ""));
    }
}

/// The CRD's default of each listener's `allowedRoutes`:
/// `{namespaces: {from: Same}}` (routes from the Gateway's own namespace).
pub(super) fn gateway_defaults(obj: &mut Obj) {
    let Some(Value::Array(listeners)) = obj.pointer_mut("/spec/listeners") else {
        return;
    };
    for l in listeners.iter_mut().filter_map(Value::as_object_mut) {
        let allowed = l.entry("allowedRoutes").or_insert_with(|| json!({}));
        if let Some(a) = allowed.as_object_mut() {
            let ns = a.entry("namespaces").or_insert_with(|| json!({}));
            if let Some(n) = ns.as_object_mut() {
                n.entry("from").or_insert(json!("Same"));
            }
        }
    }
}

/// `spec.gatewayClassName` and at least one listener with a name, a port,
/// a protocol and, when given, a known `allowedRoutes.namespaces.from`.
pub(super) fn validate_gateway(obj: &Obj, causes: &mut Causes) {
    if str_at(obj, &["spec", "gatewayClassName"]).is_empty() {
        causes.push(FieldCause::required("spec.gatewayClassName", ""));
    }
    let listeners = arr(obj.pointer("/spec/listeners"));
    if listeners.is_empty() {
        causes.push(FieldCause::required("spec.listeners", ""));
    }
    for (i, l) in listeners.iter().enumerate() {
        let lp = format!("spec.listeners[{i}]");
        for f in ["name", "protocol"] {
            if str_at(l, &[f]).is_empty() {
                causes.push(FieldCause::required(format!("{lp}.{f}"), ""));
            }
        }
        let from = l.pointer("/allowedRoutes/namespaces/from");
        if let Some(f) = from.filter(|f| !matches!(f.as_str(), Some("All" | "Selector" | "Same"))) {
            causes.push(FieldCause::not_supported(
                format!("{lp}.allowedRoutes.namespaces.from"),
                f.as_str().unwrap_or_default(),
                &["All", "Selector", "Same"],
            ));
        }
        match l.get("port").and_then(Value::as_i64) {
            Some(1..=65535) => {}
            Some(p) => causes.push(FieldCause::invalid_raw(
                format!("{lp}.port"),
                p.to_string(),
                "should be between 1 and 65535",
            )),
            None => causes.push(FieldCause::required(format!("{lp}.port"), "")),
        }
    }
}

/// The CRD's defaults: a parentRef's group and kind, a backendRef's group,
/// kind and weight, a rule without matches matching `PathPrefix /`.
pub(super) fn http_route_defaults(obj: &mut Obj) {
    let Some(m) = obj.as_object_mut() else {
        return;
    };
    let spec = obj_field(m, "spec");
    if let Some(Value::Array(refs)) = spec.get_mut("parentRefs") {
        for r in refs.iter_mut().filter_map(Value::as_object_mut) {
            r.entry("group")
                .or_insert(json!("gateway.networking.k8s.io"));
            r.entry("kind").or_insert(json!("Gateway"));
        }
    }
    let rules = spec
        .entry("rules")
        .or_insert_with(|| json!([{"matches": [{"path": {"type": "PathPrefix", "value": "/"}}]}]));
    for rule in rules
        .as_array_mut()
        .into_iter()
        .flatten()
        .filter_map(Value::as_object_mut)
    {
        rule.entry("matches")
            .or_insert_with(|| json!([{"path": {"type": "PathPrefix", "value": "/"}}]));
        if let Some(Value::Array(backends)) = rule.get_mut("backendRefs") {
            for b in backends.iter_mut().filter_map(Value::as_object_mut) {
                b.entry("group").or_insert(json!(""));
                b.entry("kind").or_insert(json!("Service"));
                b.entry("weight").or_insert(json!(1));
            }
        }
    }
}

/// The CRD's `Hostname` pattern (v1.6.3, standard channel).
const HOSTNAME_PATTERN: &str =
    r"^(\*\.)?[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$";

/// Whether `host` matches [`HOSTNAME_PATTERN`]: dot-separated labels of
/// `[a-z0-9-]` with alphanumeric ends (no length per label), after an
/// optional `*.`.
fn matches_hostname_pattern(host: &str) -> bool {
    let rest = host.strip_prefix("*.").unwrap_or(host);
    !rest.is_empty()
        && rest.split('.').all(|l| {
            let b = l.as_bytes();
            !b.is_empty()
                && b.iter()
                    .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || *c == b'-')
                && b[0] != b'-'
                && b[b.len() - 1] != b'-'
        })
}

/// Host names as the CRD's schema checks them (1 to 253 characters, the
/// `Hostname` pattern: an IP address passes, as it does there), each
/// parentRef's name, each backendRef's name and, for a Service, its port.
pub(super) fn validate_http_route(obj: &Obj, causes: &mut Causes) {
    let mut too_long = false;
    for (i, h) in arr(obj.pointer("/spec/hostnames")).iter().enumerate() {
        let f = format!("spec.hostnames[{i}]");
        let host = h.as_str().unwrap_or_default();
        if host.len() > 253 {
            too_long = true;
            causes.push(FieldCause::new(
                CauseKind::TooLong,
                f.clone(),
                None,
                "may not be more than 253 bytes",
            ));
        }
        if host.is_empty() {
            causes.push(FieldCause::invalid(
                f.clone(),
                host,
                format!("{f} in body should be at least 1 chars long"),
            ));
        } else if !matches_hostname_pattern(host) {
            causes.push(FieldCause::invalid(
                f.clone(),
                host,
                format!("{f} in body should match '{HOSTNAME_PATTERN}'"),
            ));
        }
    }
    // A value past a maxLength makes the API server skip the CRD's CEL
    // rules (their cost was estimated from the maxLength), and it says so
    // in a cause without a field, which it prints `<nil>`.
    if too_long {
        causes.push(FieldCause::invalid_raw(
            "<nil>",
            "null",
            "some validation rules were not checked because the object was invalid; correct the existing errors to complete validation",
        ));
    }
    for (i, r) in arr(obj.pointer("/spec/parentRefs")).iter().enumerate() {
        if str_at(r, &["name"]).is_empty() {
            causes.push(FieldCause::required(
                format!("spec.parentRefs[{i}].name"),
                "",
            ));
        }
    }
    for (i, rule) in arr(obj.pointer("/spec/rules")).iter().enumerate() {
        for (j, b) in arr(rule.get("backendRefs")).iter().enumerate() {
            let bp = format!("spec.rules[{i}].backendRefs[{j}]");
            if str_at(b, &["name"]).is_empty() {
                causes.push(FieldCause::required(format!("{bp}.name"), ""));
            }
            let service =
                matches!(str_at(b, &["kind"]), "" | "Service") && str_at(b, &["group"]).is_empty();
            if service && b.get("port").and_then(Value::as_i64).is_none() {
                causes.push(FieldCause::invalid_raw(
                    bp,
                    "object",
                    "Must have port for Service reference",
                ));
            }
        }
    }
}
