//! Services: defaults (ClusterIP policy fields, port protocols and target
//! ports), carrying allocated values over on update, validation and the
//! immutable fields. The addresses and node ports themselves come from
//! [`allocator`](super::allocator).

use super::{arr, default_field, obj_field, render, str_at, Causes};
use crate::sim::rules::{
    check_dns1123_label, check_dns1123_subdomain, check_port_name, check_port_number,
    validate_label_key, validate_label_value, RuleError,
};
use crate::sim::store::error::quote;
use crate::sim::store::{FieldCause, Obj};
use serde_json::{json, Value};
use std::collections::HashSet;
use std::net::Ipv4Addr;

pub(super) fn needs_cluster_ip(svc: &Obj) -> bool {
    str_at(svc, &["spec", "type"]) != "ExternalName"
}

pub(super) fn service_defaults(obj: &mut Obj) {
    let Some(m) = obj.as_object_mut() else { return };
    let spec = obj_field(m, "spec");
    default_field(spec, "type", json!("ClusterIP"));
    default_field(spec, "sessionAffinity", json!("None"));
    let ty = spec
        .get("type")
        .and_then(Value::as_str)
        .unwrap_or("")
        .to_string();
    if let Some(ports) = spec.get_mut("ports").and_then(Value::as_array_mut) {
        for p in ports.iter_mut().filter_map(Value::as_object_mut) {
            default_field(p, "protocol", json!("TCP"));
            let port = p.get("port").cloned().unwrap_or(Value::Null);
            match p.get("targetPort") {
                None | Some(Value::Null) => {
                    p.insert("targetPort".into(), port);
                }
                Some(Value::Number(n)) if n.as_i64() == Some(0) => {
                    p.insert("targetPort".into(), port);
                }
                Some(Value::String(s)) if s.is_empty() => {
                    p.insert("targetPort".into(), port);
                }
                _ => {}
            }
        }
    }
    if ty != "ExternalName" {
        default_field(spec, "ipFamilies", json!(["IPv4"]));
        default_field(spec, "ipFamilyPolicy", json!("SingleStack"));
        default_field(spec, "internalTrafficPolicy", json!("Cluster"));
    }
    if ty == "NodePort" || ty == "LoadBalancer" {
        default_field(spec, "externalTrafficPolicy", json!("Cluster"));
    }
    if ty == "LoadBalancer" {
        default_field(spec, "allocateLoadBalancerNodePorts", json!(true));
    }
    // clusterIPs mirrors a given clusterIP.
    let cip = spec
        .get("clusterIP")
        .and_then(Value::as_str)
        .unwrap_or("")
        .to_string();
    if !cip.is_empty() && arr(spec.get("clusterIPs")).is_empty() {
        spec.insert("clusterIPs".into(), json!([cip]));
    }
}

/// PUT semantics: values the server allocated and the client omitted
/// (clusterIP(s), nodePorts, IP families) are taken from the stored object.
pub(super) fn service_fill_from_old(new: &mut Obj, old: &Obj) {
    if !needs_cluster_ip(new) || !needs_cluster_ip(old) {
        return;
    }
    let Some(os) = old.get("spec").cloned() else {
        return;
    };
    let Some(m) = new.as_object_mut() else { return };
    let spec = obj_field(m, "spec");
    if spec
        .get("clusterIP")
        .and_then(Value::as_str)
        .unwrap_or("")
        .is_empty()
    {
        for f in ["clusterIP", "clusterIPs"] {
            if let Some(v) = os.get(f) {
                spec.insert(f.into(), v.clone());
            }
        }
    } else if arr(spec.get("clusterIPs")).is_empty() {
        if let Some(v) = os.get("clusterIPs") {
            spec.insert("clusterIPs".into(), v.clone());
        }
    }
    for f in ["ipFamilies", "ipFamilyPolicy"] {
        if let (None | Some(Value::Null), Some(v)) = (spec.get(f), os.get(f)) {
            spec.insert(f.into(), v.clone());
        }
    }
    let old_ports = arr(os.get("ports")).to_vec();
    if let Some(ports) = spec.get_mut("ports").and_then(Value::as_array_mut) {
        for p in ports.iter_mut().filter_map(Value::as_object_mut) {
            if p.get("nodePort").and_then(Value::as_i64).unwrap_or(0) != 0 {
                continue;
            }
            let port = p.get("port").cloned();
            let proto = p
                .get("protocol")
                .and_then(Value::as_str)
                .unwrap_or("TCP")
                .to_string();
            let same = old_ports.iter().find(|o| {
                o.get("port").cloned() == port
                    && o.get("protocol").and_then(Value::as_str).unwrap_or("TCP") == proto
            });
            if let Some(np) = same.and_then(|o| o.get("nodePort")) {
                p.insert("nodePort".into(), np.clone());
            }
        }
    }
}

pub(super) fn validate_service(obj: &Obj, causes: &mut Causes) {
    let Some(spec) = obj.get("spec") else { return };
    let ty = str_at(spec, &["type"]);
    let types = ["ClusterIP", "ExternalName", "LoadBalancer", "NodePort"];
    if !types.contains(&ty) {
        causes.push(FieldCause::not_supported("spec.type", ty, &types));
        return;
    }
    let cip = str_at(spec, &["clusterIP"]);
    if ty == "ExternalName" {
        let en = str_at(spec, &["externalName"]);
        if en.is_empty() {
            causes.push(FieldCause::required("spec.externalName", ""));
        } else if let Err(e) = check_dns1123_subdomain(en.trim_end_matches('.')) {
            causes.push(FieldCause::invalid("spec.externalName", en, e));
        }
        if !cip.is_empty() {
            causes.push(FieldCause::forbidden(
                "spec.clusterIP",
                "may not be set for ExternalName services",
            ));
        }
    } else if !cip.is_empty() && cip != "None" && cip.parse::<Ipv4Addr>().is_err() {
        causes.push(FieldCause::invalid(
            "spec.clusterIPs[0]",
            cip,
            "must be a valid IP address, (e.g. 10.9.8.7 or 2001:db8::ffff)",
        ));
    } else if let Some(first) = arr(spec.get("clusterIPs")).first().and_then(Value::as_str) {
        if !cip.is_empty() && first != cip {
            causes.push(FieldCause::invalid(
                "spec.clusterIPs",
                first,
                "element [0] must match clusterIP",
            ));
        }
    }
    let ports = arr(spec.get("ports"));
    if ports.is_empty() && ty != "ExternalName" && cip != "None" {
        causes.push(FieldCause::required("spec.ports", ""));
    }
    let mut names = HashSet::new();
    let mut seen = HashSet::new();
    for (i, p) in ports.iter().enumerate() {
        let f = format!("spec.ports[{i}]");
        let name = str_at(p, &["name"]);
        if name.is_empty() {
            if ports.len() > 1 {
                causes.push(FieldCause::required(format!("{f}.name"), ""));
            }
        } else if let Err(e) = check_dns1123_label(name) {
            causes.push(FieldCause::invalid(format!("{f}.name"), name, e));
        } else if !names.insert(name.to_string()) {
            causes.push(FieldCause::duplicate(format!("{f}.name"), name));
        }
        let port = p.get("port").cloned().unwrap_or(Value::Null);
        match port.as_i64() {
            Some(n) if check_port_number(n).is_ok() => {}
            _ => causes.push(FieldCause::invalid_raw(
                format!("{f}.port"),
                if port.is_null() {
                    "0".into()
                } else {
                    render(&port)
                },
                "must be between 1 and 65535, inclusive",
            )),
        }
        let proto = str_at(p, &["protocol"]);
        if !["TCP", "UDP", "SCTP"].contains(&proto) {
            causes.push(FieldCause::not_supported(
                format!("{f}.protocol"),
                proto,
                &["SCTP", "TCP", "UDP"],
            ));
        }
        if !seen.insert((port.as_i64(), proto.to_string())) {
            causes.push(FieldCause::duplicate(
                f.clone(),
                &format!("{}/{proto}", render(&port)),
            ));
        }
        match p.get("targetPort") {
            Some(Value::Number(n)) => {
                if let Err(e) = n
                    .as_i64()
                    .ok_or(RuleError::from("must be an integer"))
                    .and_then(check_port_number)
                {
                    causes.push(FieldCause::invalid_raw(
                        format!("{f}.targetPort"),
                        n.to_string(),
                        e,
                    ));
                }
            }
            Some(Value::String(s)) => {
                if let Err(e) = check_port_name(s) {
                    causes.push(FieldCause::invalid(format!("{f}.targetPort"), s, e));
                }
            }
            _ => {}
        }
        let np = p.get("nodePort").and_then(Value::as_i64).unwrap_or(0);
        if np != 0 && ty == "ClusterIP" {
            causes.push(FieldCause::forbidden(
                format!("{f}.nodePort"),
                "may not be used when `type` is 'ClusterIP'",
            ));
        }
    }
    if let Some(sel) = spec.get("selector").and_then(Value::as_object) {
        for (k, v) in sel {
            if let Err(e) = validate_label_key(k) {
                causes.push(FieldCause::invalid("spec.selector", k, e));
            }
            if let Err(e) = validate_label_value(v.as_str().unwrap_or("")) {
                causes.push(FieldCause::invalid(
                    "spec.selector",
                    v.as_str().unwrap_or(""),
                    e,
                ));
            }
        }
    }
}

pub(super) fn validate_service_update(new: &Obj, old: &Obj, causes: &mut Causes) {
    if !needs_cluster_ip(new) || !needs_cluster_ip(old) {
        return;
    }
    let (nc, oc) = (
        str_at(new, &["spec", "clusterIP"]),
        str_at(old, &["spec", "clusterIP"]),
    );
    if !oc.is_empty() && nc != oc {
        causes.push(FieldCause::invalid_raw(
            "spec.clusterIPs[0]",
            format!("[]string{{{}}}", quote(nc)),
            "may not change once set",
        ));
        causes.push(FieldCause::invalid(
            "spec.clusterIP",
            nc,
            "field is immutable",
        ));
    }
}
