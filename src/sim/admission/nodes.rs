//! Nodes: upstream's `nodeStrategy` and `ValidateNode`/`ValidateNodeUpdate`
//! (`pkg/registry/core/node`, `pkg/apis/core/validation`), the v1 defaults
//! of a Node's status, and the TaintNodesByCondition admission plugin
//! (`plugin/pkg/admission/nodetaint`). Field types and quantities are
//! decoded before this (`sim::decode`).

use super::{obj_field, str_at, Causes};
use crate::kube::quantity::Quantity;
use crate::sim::node::NOT_READY_TAINT;
use crate::sim::rules::{validate_label_key, validate_label_value};
use crate::sim::store::{FieldCause, Obj};
use serde_json::{json, Value};
use std::collections::HashSet;

const TAINT_EFFECTS: &[&str] = &["NoSchedule", "PreferNoSchedule", "NoExecute"];

/// What a create writes beyond the body: `spec` and `status` always there
/// (structs), `allocatable` defaulted from `capacity`
/// (`SetDefaults_NodeStatus`), the zero `daemonEndpoints` and `nodeInfo`
/// the API server's encoding shows, and TaintNodesByCondition's
/// `node.kubernetes.io/not-ready:NoSchedule` unless the Node has it.
pub(super) fn node_create_defaults(obj: &mut Obj) {
    let Some(m) = obj.as_object_mut() else { return };
    let spec = obj_field(m, "spec");
    spec.remove("configSource");
    let taints = spec.entry("taints").or_insert_with(|| json!([]));
    if !taints.is_array() {
        *taints = json!([]);
    }
    if let Some(list) = taints.as_array_mut() {
        let present = list
            .iter()
            .any(|t| t["key"] == NOT_READY_TAINT && t["effect"] == "NoSchedule");
        if !present {
            list.push(json!({"key": NOT_READY_TAINT, "effect": "NoSchedule"}));
        }
    }
    let status = obj_field(m, "status");
    status.remove("config");
    if !status.contains_key("allocatable") {
        if let Some(c) = status.get("capacity").cloned() {
            status.insert("allocatable".into(), c);
        }
    }
    status
        .entry("daemonEndpoints")
        .or_insert_with(|| json!({"kubeletEndpoint": {"Port": 0}}));
    status.entry("nodeInfo").or_insert_with(|| {
        json!({"machineID": "", "systemUUID": "", "bootID": "", "kernelVersion": "",
               "osImage": "", "containerRuntimeVersion": "", "kubeletVersion": "",
               "kubeProxyVersion": "", "operatingSystem": "", "architecture": ""})
    });
}

/// `Duplicate value` of a taint renders the Go struct as JSON.
fn go_taint(t: &Value) -> String {
    let text = |f: &str| Value::String(t[f].as_str().unwrap_or("").to_string()).to_string();
    let added = t.get("timeAdded").cloned().unwrap_or(Value::Null);
    format!(
        "{{\"Key\":{},\"Value\":{},\"Effect\":{},\"TimeAdded\":{added}}}",
        text("key"),
        text("value"),
        text("effect")
    )
}

/// `validateNodeTaints` (its paths say `metadata.taints`, as upstream's).
fn validate_taints(obj: &Obj, causes: &mut Causes) {
    let Some(taints) = obj.pointer("/spec/taints").and_then(Value::as_array) else {
        return;
    };
    let mut seen: HashSet<(String, String)> = HashSet::new();
    for (i, t) in taints.iter().enumerate() {
        let at = format!("metadata.taints[{i}]");
        let key = t["key"].as_str().unwrap_or("");
        if let Err(e) = validate_label_key(key) {
            causes.push(FieldCause::invalid(format!("{at}.key"), key, e));
        }
        let value = t["value"].as_str().unwrap_or("");
        if let Err(e) = validate_label_value(value) {
            causes.push(FieldCause::invalid(format!("{at}.value"), value, e));
        }
        let effect = t["effect"].as_str().unwrap_or("");
        if effect.is_empty() {
            causes.push(FieldCause::required(format!("{at}.effect"), ""));
        } else if !TAINT_EFFECTS.contains(&effect) {
            causes.push(FieldCause::not_supported(
                format!("{at}.effect"),
                effect,
                TAINT_EFFECTS,
            ));
        }
        if !seen.insert((effect.to_string(), key.to_string())) {
            causes.push(FieldCause::new(
                crate::sim::store::CauseKind::Duplicate,
                at,
                Some(go_taint(t)),
                "taints must be unique by key and effect pair",
            ));
        }
    }
}

/// `ValidateNodeResources`: quantities not negative, integer resources
/// whole.
fn validate_resources(obj: &Obj, causes: &mut Causes) {
    for list in ["capacity", "allocatable"] {
        let Some(m) = obj
            .pointer(&format!("/status/{list}"))
            .and_then(Value::as_object)
        else {
            continue;
        };
        let mut names: Vec<&String> = m.keys().collect();
        names.sort();
        for name in names {
            let raw = match &m[name] {
                Value::String(s) => s.clone(),
                other => other.to_string(),
            };
            let Ok(q) = Quantity::parse(&raw) else {
                continue;
            };
            let at = format!("status.{list}.{name}");
            if q.nanos() < 0 {
                causes.push(FieldCause::invalid(
                    at.clone(),
                    &raw,
                    "must be greater than or equal to 0",
                ));
            }
            if name == "pods" && q.nanos() % 1_000_000_000 != 0 {
                causes.push(FieldCause::invalid(at, &raw, "must be an integer"));
            }
        }
    }
}

/// `ValidateNode`.
pub(super) fn validate_node(obj: &Obj, causes: &mut Causes) {
    validate_taints(obj, causes);
    validate_resources(obj, causes);
}

/// `ValidateNodeUpdate`'s immutable fields: `podCIDRs` and `providerID`
/// once set.
pub(super) fn validate_node_update(new: &Obj, old: &Obj, causes: &mut Causes) {
    let old_cidrs = old.pointer("/spec/podCIDRs").and_then(Value::as_array);
    if old_cidrs.is_some_and(|c| !c.is_empty())
        && new.pointer("/spec/podCIDRs").and_then(Value::as_array) != old_cidrs
    {
        causes.push(FieldCause::forbidden(
            "spec.podCIDRs",
            "node updates may not change podCIDR except from \"\" to valid",
        ));
    }
    let old_id = str_at(old, &["spec", "providerID"]);
    if !old_id.is_empty() && str_at(new, &["spec", "providerID"]) != old_id {
        causes.push(FieldCause::forbidden(
            "spec.providerID",
            "node updates may not change providerID except from \"\" to valid",
        ));
    }
}
