//! Deployments and ReplicaSets (defaults, selector and template rules,
//! rolling-update percentages) and Ingresses (rules, paths, backends).

use super::pods::{pod_spec_defaults, validate_pod_spec};
use super::{arr, default_field, go_selector, json_map, obj_field, render, str_at, Causes};
use crate::sim::resources::Resource;
use crate::sim::rules::{
    check_dns1035_label, check_dns1123_subdomain, check_port_name, check_port_number,
    validate_label_key, validate_label_value, RuleError,
};
use crate::sim::selector::LabelSelector;
use crate::sim::store::{FieldCause, Obj};
use serde_json::{json, Value};

pub(super) fn workload_defaults(res: Resource, obj: &mut Obj) {
    let Some(m) = obj.as_object_mut() else { return };
    let spec = obj_field(m, "spec");
    default_field(spec, "replicas", json!(1));
    if res == Resource::Deployment {
        let strategy = obj_field(spec, "strategy");
        default_field(strategy, "type", json!("RollingUpdate"));
        if strategy.get("type").and_then(Value::as_str) == Some("RollingUpdate") {
            let ru = obj_field(strategy, "rollingUpdate");
            default_field(ru, "maxUnavailable", json!("25%"));
            default_field(ru, "maxSurge", json!("25%"));
        }
        default_field(spec, "revisionHistoryLimit", json!(10));
        default_field(spec, "progressDeadlineSeconds", json!(600));
    }
    let template = obj_field(spec, "template");
    pod_spec_defaults(obj_field(template, "spec"));
}

pub(super) fn validate_int_or_percent(v: &Value, field: &str, causes: &mut Causes) -> Option<i64> {
    match v {
        Value::Number(n) => match n.as_i64() {
            Some(i) if i >= 0 => Some(i),
            _ => {
                causes.push(FieldCause::invalid_raw(
                    field,
                    n.to_string(),
                    "must be greater than or equal to 0",
                ));
                None
            }
        },
        Value::String(s) => {
            let digits = s
                .strip_suffix('%')
                .filter(|d| !d.is_empty() && d.bytes().all(|b| b.is_ascii_digit()));
            match digits.and_then(|d| d.parse::<i64>().ok()) {
                Some(n) => Some(n),
                None => {
                    causes.push(FieldCause::invalid(
                        field,
                        s,
                        "a valid percent string must be a numeric string followed by an ending '%' (e.g. '1%',  or '93%', regex used for validation is '[0-9]+%')",
                    ));
                    None
                }
            }
        }
        _ => None,
    }
}

pub(super) fn validate_workload(res: Resource, obj: &Obj, causes: &mut Causes) {
    let Some(spec) = obj.get("spec") else { return };
    let kind = if res == Resource::Deployment {
        "deployment"
    } else {
        "replicaset"
    };
    match spec.get("replicas") {
        Some(r) if r.as_i64().is_none_or(|n| n < 0) => causes.push(FieldCause::invalid_raw(
            "spec.replicas",
            render(r),
            "must be greater than or equal to 0",
        )),
        _ => {}
    }
    let template_labels = spec
        .pointer("/template/metadata/labels")
        .and_then(Value::as_object);
    match spec.get("selector").filter(|s| !s.is_null()) {
        None => causes.push(FieldCause::required("spec.selector", "")),
        Some(sel) => match LabelSelector::from_struct(sel) {
            Err(e) => causes.push(FieldCause::invalid_raw(
                "spec.selector",
                go_selector(sel),
                e,
            )),
            Ok(s) if s.is_everything() => causes.push(FieldCause::invalid_raw(
                "spec.selector",
                go_selector(sel),
                format!("empty selector is invalid for {kind}"),
            )),
            Ok(s) => {
                if !s.matches_labels(template_labels) {
                    causes.push(FieldCause::invalid_raw(
                        "spec.template.metadata.labels",
                        json_map(template_labels),
                        "`selector` does not match template `labels`",
                    ));
                }
            }
        },
    }
    if let Some(tl) = template_labels {
        for (k, v) in tl {
            if let Err(e) = validate_label_key(k) {
                causes.push(FieldCause::invalid("spec.template.metadata.labels", k, e));
            }
            if let Err(e) = validate_label_value(v.as_str().unwrap_or("")) {
                causes.push(FieldCause::invalid(
                    "spec.template.metadata.labels",
                    v.as_str().unwrap_or(""),
                    e,
                ));
            }
        }
    }
    let tspec = spec.pointer("/template/spec");
    validate_pod_spec(tspec, "spec.template.spec", causes);
    let rp = tspec.map_or("", |s| str_at(s, &["restartPolicy"]));
    if !rp.is_empty() && rp != "Always" {
        causes.push(FieldCause::not_supported(
            "spec.template.spec.restartPolicy",
            rp,
            &["Always"],
        ));
    }
    if res != Resource::Deployment {
        return;
    }
    let ty = str_at(spec, &["strategy", "type"]);
    match ty {
        "RollingUpdate" => {
            let ru = spec.pointer("/strategy/rollingUpdate");
            let mu = ru.and_then(|r| r.get("maxUnavailable")).and_then(|v| {
                validate_int_or_percent(v, "spec.strategy.rollingUpdate.maxUnavailable", causes)
            });
            let ms = ru.and_then(|r| r.get("maxSurge")).and_then(|v| {
                validate_int_or_percent(v, "spec.strategy.rollingUpdate.maxSurge", causes)
            });
            if mu == Some(0) && ms == Some(0) {
                let v = ru
                    .and_then(|r| r.get("maxUnavailable"))
                    .map(render)
                    .unwrap_or_default();
                causes.push(FieldCause::invalid_raw(
                    "spec.strategy.rollingUpdate.maxUnavailable",
                    v,
                    "may not be 0 when `maxSurge` is 0",
                ));
            }
        }
        "Recreate" => {
            if spec
                .pointer("/strategy/rollingUpdate")
                .is_some_and(|v| !v.is_null())
            {
                causes.push(FieldCause::forbidden(
                    "spec.strategy.rollingUpdate",
                    "may not be specified when strategy `type` is 'Recreate'",
                ));
            }
        }
        other => causes.push(FieldCause::not_supported(
            "spec.strategy.type",
            other,
            &["Recreate", "RollingUpdate"],
        )),
    }
}

// ---------------------------------------------------------------- ingresses

pub(super) fn validate_backend(b: &Value, p: &str, causes: &mut Causes) {
    let svc = b.get("service").filter(|v| !v.is_null());
    let resource = b.get("resource").filter(|v| !v.is_null());
    match (svc, resource) {
        (Some(_), Some(_)) => causes.push(FieldCause::invalid_raw(
            p,
            "",
            "cannot set both `resource` and `service` backends",
        )),
        (None, None) => causes.push(FieldCause::invalid(
            p,
            "",
            "one backend (`service` or `resource`) must be specified",
        )),
        (None, Some(_)) => {}
        (Some(s), None) => {
            let name = str_at(s, &["name"]);
            if name.is_empty() {
                causes.push(FieldCause::required(format!("{p}.service.name"), ""));
            } else if let Err(e) = check_dns1035_label(name) {
                causes.push(FieldCause::invalid(format!("{p}.service.name"), name, e));
            }
            let port = s.get("port");
            let pname = port.map_or("", |p| str_at(p, &["name"]));
            let pnum = port.and_then(|p| p.get("number")).filter(|v| !v.is_null());
            match (pname.is_empty(), pnum) {
                (false, Some(_)) => causes.push(FieldCause::invalid_raw(
                    format!("{p}.service.port"),
                    "",
                    "cannot set both port name & port number",
                )),
                (true, None) => causes.push(FieldCause::required(
                    format!("{p}.service.port.name"),
                    "port name or number is required",
                )),
                (false, None) => {
                    if let Err(e) = check_port_name(pname) {
                        causes.push(FieldCause::invalid(
                            format!("{p}.service.port.name"),
                            pname,
                            e,
                        ));
                    }
                }
                (true, Some(n)) => {
                    if let Err(e) = n
                        .as_i64()
                        .ok_or(RuleError::from("must be an integer"))
                        .and_then(check_port_number)
                    {
                        causes.push(FieldCause::invalid_raw(
                            format!("{p}.service.port.number"),
                            render(n),
                            e,
                        ));
                    }
                }
            }
        }
    }
}

pub(super) fn validate_ingress(obj: &Obj, causes: &mut Causes) {
    let spec = obj.get("spec").cloned().unwrap_or_else(|| json!({}));
    let default_backend = spec.get("defaultBackend").filter(|v| !v.is_null());
    let rules = arr(spec.get("rules"));
    if default_backend.is_none() && rules.is_empty() {
        causes.push(FieldCause::invalid_raw(
            "spec",
            spec.to_string(),
            "either `defaultBackend` or `rules` must be specified",
        ));
    }
    if let Some(b) = default_backend {
        validate_backend(b, "spec.defaultBackend", causes);
    }
    for (i, r) in rules.iter().enumerate() {
        let rp = format!("spec.rules[{i}]");
        let host = str_at(r, &["host"]);
        if !host.is_empty() {
            if host.parse::<std::net::IpAddr>().is_ok() {
                causes.push(FieldCause::invalid(
                    format!("{rp}.host"),
                    host,
                    "must be a DNS name, not an IP address",
                ));
            } else if let Err(e) = check_dns1123_subdomain(host.strip_prefix("*.").unwrap_or(host))
            {
                causes.push(FieldCause::invalid(format!("{rp}.host"), host, e));
            }
        }
        let Some(http) = r.get("http").filter(|v| !v.is_null()) else {
            continue;
        };
        let paths = arr(http.get("paths"));
        if paths.is_empty() {
            causes.push(FieldCause::required(format!("{rp}.http.paths"), ""));
        }
        for (j, p) in paths.iter().enumerate() {
            let pp = format!("{rp}.http.paths[{j}]");
            let pt = str_at(p, &["pathType"]);
            let path = str_at(p, &["path"]);
            let types = ["Exact", "ImplementationSpecific", "Prefix"];
            if pt.is_empty() {
                causes.push(FieldCause::required(
                    format!("{pp}.pathType"),
                    "pathType must be specified",
                ));
            } else if !types.contains(&pt) {
                causes.push(FieldCause::not_supported(
                    format!("{pp}.pathType"),
                    pt,
                    &types,
                ));
            } else if pt != "ImplementationSpecific" && !path.starts_with('/') {
                causes.push(FieldCause::invalid(
                    format!("{pp}.path"),
                    path,
                    "must be an absolute path",
                ));
            }
            match p.get("backend").filter(|v| !v.is_null()) {
                Some(b) => validate_backend(b, &format!("{pp}.backend"), causes),
                None => causes.push(FieldCause::required(format!("{pp}.backend"), "")),
            }
        }
    }
    // The TLS entries' hosts, after the rules (upstream's
    // validateIngressTLS): a DNS subdomain, `*.` allowed; no IP check here.
    for (i, t) in arr(spec.get("tls")).iter().enumerate() {
        for (j, h) in arr(t.get("hosts")).iter().enumerate() {
            let host = h.as_str().unwrap_or_default();
            if let Err(e) = check_dns1123_subdomain(host.strip_prefix("*.").unwrap_or(host)) {
                causes.push(FieldCause::invalid(
                    format!("spec.tls[{i}].hosts[{j}]"),
                    host,
                    e,
                ));
            }
        }
    }
}
