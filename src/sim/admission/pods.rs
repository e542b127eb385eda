//! Pods: defaults (pull policy, restart policy, DNS policy, scheduler,
//! termination fields: what `kubectl get -o yaml` shows for a pod a real
//! cluster accepted), the QoS class, validation of the spec and its
//! containers, and the fields an update may change.

use super::{arr, default_field, obj_field, render, str_at, Causes};
use crate::sim::rules::{check_dns1123_label, check_port_name, check_port_number, RuleError};
use crate::sim::store::error::quote;
use crate::sim::store::{CauseKind, FieldCause, Obj};
use serde_json::{json, Map, Value};
use std::collections::HashSet;

/// Always for `:latest` or no tag (and no digest), else IfNotPresent.
pub(super) fn default_pull_policy(image: &str) -> &'static str {
    if image.contains('@') {
        return "IfNotPresent";
    }
    let last = image.rsplit('/').next().unwrap_or(image);
    match last.rsplit_once(':') {
        Some((_, tag)) if tag != "latest" => "IfNotPresent",
        _ => "Always",
    }
}

pub(super) fn container_defaults(c: &mut Value) {
    let Some(m) = c.as_object_mut() else { return };
    let image = m
        .get("image")
        .and_then(Value::as_str)
        .unwrap_or("")
        .to_string();
    default_field(m, "imagePullPolicy", json!(default_pull_policy(&image)));
    default_field(m, "terminationMessagePath", json!("/dev/termination-log"));
    default_field(m, "terminationMessagePolicy", json!("File"));
    default_field(m, "resources", json!({}));
    if let Some(ports) = m.get_mut("ports").and_then(Value::as_array_mut) {
        for p in ports.iter_mut().filter_map(Value::as_object_mut) {
            default_field(p, "protocol", json!("TCP"));
        }
    }
    if let Some(env) = m.get_mut("env").and_then(Value::as_array_mut) {
        for e in env.iter_mut() {
            if let Some(fr) = e
                .pointer_mut("/valueFrom/fieldRef")
                .and_then(Value::as_object_mut)
            {
                default_field(fr, "apiVersion", json!("v1"));
            }
        }
    }
}

/// Defaults shared by pods and pod templates (`SetDefaults_PodSpec` and the
/// container defaults).
pub(super) fn pod_spec_defaults(spec: &mut Map<String, Value>) {
    default_field(spec, "restartPolicy", json!("Always"));
    default_field(spec, "terminationGracePeriodSeconds", json!(30));
    default_field(spec, "dnsPolicy", json!("ClusterFirst"));
    default_field(spec, "schedulerName", json!("default-scheduler"));
    default_field(spec, "securityContext", json!({}));
    for list in ["containers", "initContainers"] {
        if let Some(cs) = spec.get_mut(list).and_then(Value::as_array_mut) {
            cs.iter_mut().for_each(container_defaults);
        }
    }
    if let Some(vols) = spec.get_mut("volumes").and_then(Value::as_array_mut) {
        for v in vols.iter_mut().filter_map(Value::as_object_mut) {
            for src in ["configMap", "secret"] {
                if let Some(s) = v.get_mut(src).and_then(Value::as_object_mut) {
                    default_field(s, "defaultMode", json!(420));
                }
            }
        }
    }
}

pub(super) fn pod_defaults(obj: &mut Obj) {
    let Some(m) = obj.as_object_mut() else { return };
    let spec = obj_field(m, "spec");
    pod_spec_defaults(spec);
    default_field(spec, "enableServiceLinks", json!(true));
    let sa = pod_service_account(spec).to_string();
    // The ServiceAccount admission plugin names `default` when none is
    // given; v1's `serviceAccount` is an alias that the conversion to v1
    // always writes back from `serviceAccountName`
    // (`Convert_core_PodSpec_To_v1_PodSpec`).
    spec.insert("serviceAccountName".into(), json!(sa));
    spec.insert("serviceAccount".into(), json!(sa));
    default_field(spec, "priority", json!(0));
    default_field(spec, "preemptionPolicy", json!("PreemptLowerPriority"));
}

/// The ServiceAccount a pod runs as: `serviceAccountName`, else the
/// deprecated alias `serviceAccount` (`Convert_v1_PodSpec_To_core_PodSpec`
/// takes it when the name is empty), else `default` (the admission plugin).
pub(crate) fn pod_service_account(spec: &Map<String, Value>) -> &str {
    ["serviceAccountName", "serviceAccount"]
        .iter()
        .find_map(|f| {
            spec.get(*f)
                .and_then(Value::as_str)
                .filter(|s| !s.is_empty())
        })
        .unwrap_or("default")
}

/// BestEffort with no requests/limits anywhere; Guaranteed when every
/// container has cpu and memory limits equal to its requests; else Burstable.
pub(super) fn qos_class(spec: Option<&Value>) -> &'static str {
    let cs = arr(spec.and_then(|s| s.get("containers")));
    let mut any = false;
    let mut guaranteed = !cs.is_empty();
    for c in cs {
        let limits = c.pointer("/resources/limits").and_then(Value::as_object);
        let requests = c.pointer("/resources/requests").and_then(Value::as_object);
        any |= limits.is_some_and(|l| !l.is_empty()) || requests.is_some_and(|r| !r.is_empty());
        for r in ["cpu", "memory"] {
            let l = limits.and_then(|l| l.get(r));
            let q = requests.and_then(|q| q.get(r)).or(l);
            if l.is_none() || q != l {
                guaranteed = false;
            }
        }
    }
    if !any {
        "BestEffort"
    } else if guaranteed {
        "Guaranteed"
    } else {
        "Burstable"
    }
}

pub(super) fn validate_pod_spec(spec: Option<&Value>, p: &str, causes: &mut Causes) {
    let Some(spec) = spec.filter(|s| s.is_object()) else {
        causes.push(FieldCause::required(format!("{p}.containers"), ""));
        return;
    };
    let mut volumes = HashSet::new();
    for (i, v) in arr(spec.get("volumes")).iter().enumerate() {
        let name = str_at(v, &["name"]);
        let f = format!("{p}.volumes[{i}].name");
        if name.is_empty() {
            causes.push(FieldCause::required(f, ""));
        } else if let Err(e) = check_dns1123_label(name) {
            causes.push(FieldCause::invalid(f, name, e));
        } else if !volumes.insert(name.to_string()) {
            causes.push(FieldCause::duplicate(f, name));
        }
    }
    let containers = arr(spec.get("containers"));
    if containers.is_empty() {
        causes.push(FieldCause::required(format!("{p}.containers"), ""));
    }
    let mut names = HashSet::new();
    for list in ["initContainers", "containers"] {
        for (i, c) in arr(spec.get(list)).iter().enumerate() {
            validate_container(c, &format!("{p}.{list}[{i}]"), &mut names, &volumes, causes);
        }
    }
    let rp = str_at(spec, &["restartPolicy"]);
    if !["Always", "OnFailure", "Never"].contains(&rp) {
        causes.push(FieldCause::not_supported(
            format!("{p}.restartPolicy"),
            rp,
            &["Always", "OnFailure", "Never"],
        ));
    }
    let dp = str_at(spec, &["dnsPolicy"]);
    let dns = ["ClusterFirstWithHostNet", "ClusterFirst", "Default", "None"];
    if !dns.contains(&dp) {
        causes.push(FieldCause::not_supported(
            format!("{p}.dnsPolicy"),
            dp,
            &dns,
        ));
    }
    if let Some(ads) = spec.get("activeDeadlineSeconds").filter(|v| !v.is_null()) {
        if !ads
            .as_i64()
            .is_some_and(|n| (1..=i64::from(i32::MAX)).contains(&n))
        {
            causes.push(FieldCause::invalid_raw(
                format!("{p}.activeDeadlineSeconds"),
                render(ads),
                "must be between 1 and 2147483647, inclusive",
            ));
        }
    }
    if let Some(t) = spec
        .get("terminationGracePeriodSeconds")
        .filter(|v| !v.is_null())
    {
        if t.as_i64().is_none() {
            causes.push(FieldCause::invalid_raw(
                format!("{p}.terminationGracePeriodSeconds"),
                render(t),
                "must be an integer",
            ));
        }
    }
}

pub(super) fn validate_container(
    c: &Value,
    p: &str,
    names: &mut HashSet<String>,
    volumes: &HashSet<String>,
    causes: &mut Causes,
) {
    let name = str_at(c, &["name"]);
    if name.is_empty() {
        causes.push(FieldCause::required(format!("{p}.name"), ""));
    } else if let Err(e) = check_dns1123_label(name) {
        causes.push(FieldCause::invalid(format!("{p}.name"), name, e));
    } else if !names.insert(name.to_string()) {
        causes.push(FieldCause::duplicate(format!("{p}.name"), name));
    }
    let image = str_at(c, &["image"]);
    if image.is_empty() {
        causes.push(FieldCause::required(format!("{p}.image"), ""));
    } else if image.trim() != image {
        causes.push(FieldCause::invalid(
            format!("{p}.image"),
            image,
            "must not have leading or trailing whitespace",
        ));
    }
    let pp = str_at(c, &["imagePullPolicy"]);
    if !["Always", "IfNotPresent", "Never"].contains(&pp) {
        causes.push(FieldCause::not_supported(
            format!("{p}.imagePullPolicy"),
            pp,
            &["Always", "IfNotPresent", "Never"],
        ));
    }
    let mut port_names = HashSet::new();
    for (j, port) in arr(c.get("ports")).iter().enumerate() {
        let f = format!("{p}.ports[{j}]");
        match port.get("containerPort") {
            None | Some(Value::Null) => {
                causes.push(FieldCause::required(format!("{f}.containerPort"), ""))
            }
            Some(v) => {
                if let Err(e) = v
                    .as_i64()
                    .ok_or(RuleError::from("must be an integer"))
                    .and_then(check_port_number)
                {
                    causes.push(FieldCause::invalid_raw(
                        format!("{f}.containerPort"),
                        render(v),
                        e,
                    ));
                }
            }
        }
        let pn = str_at(port, &["name"]);
        if !pn.is_empty() {
            if let Err(e) = check_port_name(pn) {
                causes.push(FieldCause::invalid(format!("{f}.name"), pn, e));
            } else if !port_names.insert(pn.to_string()) {
                causes.push(FieldCause::duplicate(format!("{f}.name"), pn));
            }
        }
        let proto = str_at(port, &["protocol"]);
        if !["TCP", "UDP", "SCTP"].contains(&proto) {
            causes.push(FieldCause::not_supported(
                format!("{f}.protocol"),
                proto,
                &["SCTP", "TCP", "UDP"],
            ));
        }
    }
    for (j, e) in arr(c.get("env")).iter().enumerate() {
        let n = str_at(e, &["name"]);
        if n.is_empty() {
            causes.push(FieldCause::required(format!("{p}.env[{j}].name"), ""));
        } else if n.contains('=') {
            causes.push(FieldCause::invalid(
                format!("{p}.env[{j}].name"),
                n,
                "a valid environment variable name must consist only of printable ASCII characters other than '='",
            ));
        }
    }
    for (j, m) in arr(c.get("volumeMounts")).iter().enumerate() {
        let n = str_at(m, &["name"]);
        if n.is_empty() {
            causes.push(FieldCause::required(
                format!("{p}.volumeMounts[{j}].name"),
                "",
            ));
        } else if !volumes.contains(n) {
            causes.push(FieldCause::new(
                CauseKind::NotFound,
                format!("{p}.volumeMounts[{j}].name"),
                Some(quote(n)),
                "",
            ));
        }
        if str_at(m, &["mountPath"]).is_empty() {
            causes.push(FieldCause::required(
                format!("{p}.volumeMounts[{j}].mountPath"),
                "",
            ));
        }
    }
}

pub(super) const POD_UPDATE_MSG: &str = "pod updates may not change fields other than `spec.containers[*].image`,`spec.initContainers[*].image`,`spec.activeDeadlineSeconds`,`spec.tolerations` (only additions to existing tolerations),`spec.terminationGracePeriodSeconds` (allow it to be set to 1 if it was previously negative)";

/// Upstream `ValidatePodUpdate`: the spec is immutable except container
/// images, activeDeadlineSeconds (set or lowered) and added tolerations.
pub(super) fn validate_pod_update(new: &Obj, old: &Obj, causes: &mut Causes) {
    let (Some(ns), Some(os)) = (new.get("spec"), old.get("spec")) else {
        return;
    };
    let mut munged = os.clone();
    for list in ["containers", "initContainers"] {
        let new_list = arr(ns.get(list));
        if let Some(ml) = munged.get_mut(list).and_then(Value::as_array_mut) {
            for (i, c) in ml.iter_mut().enumerate() {
                if let (Some(m), Some(img)) = (
                    c.as_object_mut(),
                    new_list.get(i).and_then(|n| n.get("image")),
                ) {
                    m.insert("image".into(), img.clone());
                }
            }
        }
    }
    let Some(mm) = munged.as_object_mut() else {
        return;
    };
    let ads_new = ns.get("activeDeadlineSeconds").and_then(Value::as_i64);
    let ads_old = os.get("activeDeadlineSeconds").and_then(Value::as_i64);
    match (ads_old, ads_new) {
        (Some(_), None) => causes.push(FieldCause::invalid_raw(
            "spec.activeDeadlineSeconds",
            "null",
            "must not update from a positive integer to nil value",
        )),
        (Some(o), Some(n)) if n > o => causes.push(FieldCause::invalid_raw(
            "spec.activeDeadlineSeconds",
            n.to_string(),
            "must be less than or equal to previous value",
        )),
        _ => {}
    }
    match ns.get("activeDeadlineSeconds") {
        Some(v) => mm.insert("activeDeadlineSeconds".into(), v.clone()),
        None => mm.remove("activeDeadlineSeconds"),
    };
    let old_tol = arr(os.get("tolerations"));
    let new_tol = arr(ns.get("tolerations"));
    let tolerations_ok = old_tol.iter().all(|t| new_tol.contains(t));
    match ns.get("tolerations") {
        Some(v) => mm.insert("tolerations".into(), v.clone()),
        None => mm.remove("tolerations"),
    };
    if munged != *ns || !tolerations_ok {
        causes.push(FieldCause::forbidden("spec", POD_UPDATE_MSG));
    }
}
