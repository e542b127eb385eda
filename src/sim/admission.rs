//! Admission for the sim: per-kind defaulting and validation, plus the
//! Service ClusterIP / NodePort allocator.
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
use crate::sim::selector::{validate_label_key, validate_label_value, LabelSelector};
use crate::sim::store::error::quote;
use crate::sim::store::{meta_mut, meta_of, meta_str, CauseKind, FieldCause, Obj};
use base64::Engine;
use serde_json::{json, Map, Value};
use std::collections::{BTreeMap, HashSet};
use std::net::Ipv4Addr;

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
        Resource::ConfigMap => validate_config_data(obj, false, &mut causes)?,
        Resource::Secret => {
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
    }
    done(causes)
}

/// Defaults and validates a replacement of `old` (status already carried
/// over by the store), including each kind's immutable fields.
pub fn admit_update(res: Resource, new: &mut Obj, old: &Obj) -> Result<(), Rejection> {
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
            validate_config_data(new, false, &mut causes)?;
            validate_immutable_data(new, old, &mut causes);
        }
        Resource::Secret => {
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
    }
    done(causes)
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

const DNS1123_SUBDOMAIN_MSG: &str = r"a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, '-' or '.', and must start and end with an alphanumeric character (e.g. 'example.com', regex used for validation is '[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*')";
const DNS1123_LABEL_MSG: &str = "a lowercase RFC 1123 label must consist of lower case alphanumeric characters or '-', and must start and end with an alphanumeric character (e.g. 'my-name',  or '123-abc', regex used for validation is '[a-z0-9]([-a-z0-9]*[a-z0-9])?')";
const DNS1035_LABEL_MSG: &str = "a DNS-1035 label must consist of lower case alphanumeric characters or '-', start with an alphabetic character, and end with an alphanumeric character (e.g. 'my-name',  or 'abc-123', regex used for validation is '[a-z]([-a-z0-9]*[a-z0-9])?')";

fn is_label_chars(s: &str) -> bool {
    let b = s.as_bytes();
    !b.is_empty()
        && b.iter()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || *c == b'-')
        && b[0] != b'-'
        && b[b.len() - 1] != b'-'
}

/// RFC 1123 label (`[a-z0-9]([-a-z0-9]*[a-z0-9])?`, at most 63).
pub fn check_dns1123_label(s: &str) -> Result<(), String> {
    if s.len() > 63 {
        return Err("must be no more than 63 characters".into());
    }
    if !is_label_chars(s) {
        return Err(DNS1123_LABEL_MSG.into());
    }
    Ok(())
}

/// RFC 1123 subdomain (dot-separated labels, at most 253).
pub fn check_dns1123_subdomain(s: &str) -> Result<(), String> {
    if s.len() > 253 {
        return Err("must be no more than 253 characters".into());
    }
    if s.is_empty() || !s.split('.').all(is_label_chars) {
        return Err(DNS1123_SUBDOMAIN_MSG.into());
    }
    Ok(())
}

/// RFC 1035 label: like 1123 but starting with a letter (Service names).
pub fn check_dns1035_label(s: &str) -> Result<(), String> {
    if s.len() > 63 {
        return Err("must be no more than 63 characters".into());
    }
    if !is_label_chars(s) || !s.as_bytes()[0].is_ascii_lowercase() {
        return Err(DNS1035_LABEL_MSG.into());
    }
    Ok(())
}

/// IANA service name (a named port): at most 15, lowercase alphanumerics
/// and '-', at least one letter, no leading/trailing or double '-'.
fn check_port_name(s: &str) -> Result<(), String> {
    if s.len() > 15 {
        return Err("must be no more than 15 characters".into());
    }
    let b = s.as_bytes();
    if b.is_empty()
        || !b
            .iter()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || *c == b'-')
    {
        return Err(
            "must contain only alpha-numeric characters (a-z, 0-9), and hyphens (-)".into(),
        );
    }
    if !b.iter().any(u8::is_ascii_lowercase) {
        return Err("must contain at least one letter (a-z)".into());
    }
    if s.contains("--") {
        return Err("must not contain consecutive hyphens".into());
    }
    if b[0] == b'-' || b[b.len() - 1] == b'-' {
        return Err("must not begin or end with a hyphen".into());
    }
    Ok(())
}

fn check_port_number(n: i64) -> Result<(), String> {
    if (1..=65535).contains(&n) {
        Ok(())
    } else {
        Err("must be between 1 and 65535, inclusive".into())
    }
}

/// Name rules per kind, as upstream's `ValidateXName` functions choose them.
fn name_check(res: Resource) -> fn(&str) -> Result<(), String> {
    match res {
        Resource::Namespace => check_dns1123_label,
        Resource::Service => check_dns1035_label,
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

// ---------------------------------------------------------------- pods

/// Always for `:latest` or no tag (and no digest), else IfNotPresent.
fn default_pull_policy(image: &str) -> &'static str {
    if image.contains('@') {
        return "IfNotPresent";
    }
    let last = image.rsplit('/').next().unwrap_or(image);
    match last.rsplit_once(':') {
        Some((_, tag)) if tag != "latest" => "IfNotPresent",
        _ => "Always",
    }
}

fn container_defaults(c: &mut Value) {
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
fn pod_spec_defaults(spec: &mut Map<String, Value>) {
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

fn pod_defaults(obj: &mut Obj) {
    let Some(m) = obj.as_object_mut() else { return };
    let spec = obj_field(m, "spec");
    pod_spec_defaults(spec);
    default_field(spec, "enableServiceLinks", json!(true));
    let sa = spec
        .get("serviceAccountName")
        .and_then(Value::as_str)
        .filter(|s| !s.is_empty())
        .unwrap_or("default")
        .to_string();
    default_field(spec, "serviceAccountName", json!(sa));
    default_field(spec, "serviceAccount", json!(sa));
    default_field(spec, "priority", json!(0));
    default_field(spec, "preemptionPolicy", json!("PreemptLowerPriority"));
}

/// BestEffort with no requests/limits anywhere; Guaranteed when every
/// container has cpu and memory limits equal to its requests; else Burstable.
fn qos_class(spec: Option<&Value>) -> &'static str {
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

fn validate_pod_spec(spec: Option<&Value>, p: &str, causes: &mut Causes) {
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

fn validate_container(
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
                    .ok_or_else(|| "must be an integer".to_string())
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

const POD_UPDATE_MSG: &str = "pod updates may not change fields other than `spec.containers[*].image`,`spec.initContainers[*].image`,`spec.activeDeadlineSeconds`,`spec.tolerations` (only additions to existing tolerations),`spec.terminationGracePeriodSeconds` (allow it to be set to 1 if it was previously negative)";

/// Upstream `ValidatePodUpdate`: the spec is immutable except container
/// images, activeDeadlineSeconds (set or lowered) and added tolerations.
fn validate_pod_update(new: &Obj, old: &Obj, causes: &mut Causes) {
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

// ---------------------------------------------------------------- services

fn needs_cluster_ip(svc: &Obj) -> bool {
    str_at(svc, &["spec", "type"]) != "ExternalName"
}

fn service_defaults(obj: &mut Obj) {
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
fn service_fill_from_old(new: &mut Obj, old: &Obj) {
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

fn validate_service(obj: &Obj, causes: &mut Causes) {
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
                    .ok_or_else(|| "must be an integer".to_string())
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

fn validate_service_update(new: &Obj, old: &Obj, causes: &mut Causes) {
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

// ---------------------------------------------------------------- the allocator

/// `10.96.0.0/12`, the default service CIDR.
const SVC_NET: u32 = (10 << 24) | (96 << 16);
const SVC_SIZE: u32 = 1 << 20;
const SVC_RANGE: &str = "10.96.0.0/12";
const NODE_PORTS: std::ops::RangeInclusive<u16> = 30000..=32767;

/// Service ClusterIPs and NodePorts in use. Sequential from a cursor (real
/// servers pick at random; sequential keeps tests readable), skipping used
/// values; the first ten addresses are left for well-known services that
/// name their IP (`kubernetes` is 10.96.0.1, DNS 10.96.0.10).
#[derive(Debug)]
pub struct Allocator {
    ips: HashSet<u32>,
    next_ip: u32,
    ports: HashSet<u16>,
    next_port: u16,
}

impl Default for Allocator {
    fn default() -> Self {
        Allocator {
            ips: HashSet::new(),
            next_ip: 11,
            ports: HashSet::new(),
            next_port: *NODE_PORTS.start(),
        }
    }
}

impl Allocator {
    fn take_ip(&mut self) -> Option<u32> {
        for _ in 0..SVC_SIZE {
            let off = self.next_ip;
            self.next_ip = if off + 1 >= SVC_SIZE - 1 { 1 } else { off + 1 };
            let ip = SVC_NET + off;
            if !self.ips.contains(&ip) {
                self.ips.insert(ip);
                return Some(ip);
            }
        }
        None
    }

    fn take_port(&mut self, exclude: &HashSet<u16>) -> Option<u16> {
        for _ in NODE_PORTS {
            let p = self.next_port;
            self.next_port = if p >= *NODE_PORTS.end() {
                *NODE_PORTS.start()
            } else {
                p + 1
            };
            if !self.ports.contains(&p) && !exclude.contains(&p) {
                self.ports.insert(p);
                return Some(p);
            }
        }
        None
    }

    /// Addresses in use (for tests and diagnostics).
    pub fn ips_in_use(&self) -> usize {
        self.ips.len()
    }
}

fn svc_ip(svc: &Obj) -> Option<u32> {
    if !needs_cluster_ip(svc) {
        return None;
    }
    str_at(svc, &["spec", "clusterIP"])
        .parse::<Ipv4Addr>()
        .ok()
        .map(u32::from)
}

fn svc_node_ports(svc: &Obj) -> Vec<u16> {
    let ty = str_at(svc, &["spec", "type"]);
    if ty != "NodePort" && ty != "LoadBalancer" {
        return vec![];
    }
    arr(svc.pointer("/spec/ports"))
        .iter()
        .filter_map(|p| p.get("nodePort").and_then(Value::as_u64))
        .filter_map(|n| u16::try_from(n).ok())
        .filter(|n| *n != 0)
        .collect()
}

/// Allocates what a valid Service needs (its ClusterIP and NodePorts), given
/// the stored version on update. Checks everything before taking anything,
/// so a rejection leaves the allocator as it was. Other kinds: no-op.
pub fn allocate(
    res: Resource,
    obj: &mut Obj,
    old: Option<&Obj>,
    alloc: &mut Allocator,
) -> Result<(), Rejection> {
    if res != Resource::Service {
        return Ok(());
    }
    let old_ip = old.and_then(svc_ip);
    let old_ports: HashSet<u16> = old
        .map(svc_node_ports)
        .unwrap_or_default()
        .into_iter()
        .collect();
    let cip = str_at(obj, &["spec", "clusterIP"]).to_string();
    let mut causes = Causes::new();
    let mut want_ip = None;
    if needs_cluster_ip(obj) && !cip.is_empty() && cip != "None" {
        if let Ok(addr) = cip.parse::<Ipv4Addr>() {
            let ip = u32::from(addr);
            if Some(ip) != old_ip {
                let shown = format!("[]string{{{}}}", quote(&cip));
                if !(SVC_NET..SVC_NET + SVC_SIZE).contains(&ip) {
                    causes.push(FieldCause::invalid_raw(
                        "spec.clusterIPs",
                        shown,
                        format!("failed to allocate IP {cip}: the provided IP ({cip}) is not in the valid range. The range of valid IPs is {SVC_RANGE}"),
                    ));
                } else if alloc.ips.contains(&ip) {
                    causes.push(FieldCause::invalid_raw(
                        "spec.clusterIPs",
                        shown,
                        format!("failed to allocate IP {cip}: provided IP is already allocated"),
                    ));
                } else {
                    want_ip = Some(ip);
                }
            }
        }
    }
    let mut want_ports = HashSet::new();
    for (i, np) in arr(obj.pointer("/spec/ports")).iter().enumerate() {
        let Some(n) = np
            .get("nodePort")
            .and_then(Value::as_i64)
            .filter(|n| *n != 0)
        else {
            continue;
        };
        let ok_range = u16::try_from(n).ok().filter(|p| NODE_PORTS.contains(p));
        match ok_range {
            None => causes.push(FieldCause::invalid_raw(
                format!("spec.ports[{i}].nodePort"),
                n.to_string(),
                "provided port is not in the valid range. The range of valid ports is 30000-32767",
            )),
            Some(p)
                if !old_ports.contains(&p)
                    && (alloc.ports.contains(&p) || !want_ports.insert(p)) =>
            {
                causes.push(FieldCause::invalid_raw(
                    format!("spec.ports[{i}].nodePort"),
                    n.to_string(),
                    "provided port is already allocated",
                ))
            }
            _ => {}
        }
    }
    if !causes.is_empty() {
        return Err(Rejection::Invalid(causes));
    }
    // Commit: requested values first, then fresh ones.
    if let Some(ip) = want_ip {
        alloc.ips.insert(ip);
    }
    for p in &want_ports {
        alloc.ports.insert(*p);
    }
    let ty = str_at(obj, &["spec", "type"]).to_string();
    let Some(spec) = obj.get_mut("spec").and_then(Value::as_object_mut) else {
        return Ok(());
    };
    if ty != "ExternalName" {
        if cip.is_empty() {
            let ip = alloc.take_ip().ok_or_else(|| {
                Rejection::Invalid(vec![FieldCause::invalid_raw(
                    "spec.clusterIPs",
                    "[]string{}",
                    "failed to allocate IP: range is full",
                )])
            })?;
            let s = Ipv4Addr::from(ip).to_string();
            spec.insert("clusterIP".into(), json!(s));
            spec.insert("clusterIPs".into(), json!([s]));
        } else if cip == "None" {
            spec.insert("clusterIPs".into(), json!(["None"]));
        }
    }
    if ty == "NodePort" || ty == "LoadBalancer" {
        let taken: HashSet<u16> = svc_node_ports_of_spec(spec);
        if let Some(ports) = spec.get_mut("ports").and_then(Value::as_array_mut) {
            for p in ports.iter_mut().filter_map(Value::as_object_mut) {
                if p.get("nodePort").and_then(Value::as_i64).unwrap_or(0) == 0 {
                    if let Some(n) = alloc.take_port(&taken) {
                        p.insert("nodePort".into(), json!(n));
                    }
                }
            }
        }
    }
    Ok(())
}

fn svc_node_ports_of_spec(spec: &Map<String, Value>) -> HashSet<u16> {
    arr(spec.get("ports"))
        .iter()
        .filter_map(|p| p.get("nodePort").and_then(Value::as_u64))
        .filter_map(|n| u16::try_from(n).ok())
        .collect()
}

/// Frees what `obj` held and `keep` (its replacement, if any) no longer holds.
pub fn release(res: Resource, obj: &Obj, keep: Option<&Obj>, alloc: &mut Allocator) {
    if res != Resource::Service {
        return;
    }
    let kept_ip = keep.and_then(svc_ip);
    if let Some(ip) = svc_ip(obj) {
        if Some(ip) != kept_ip {
            alloc.ips.remove(&ip);
        }
    }
    let kept: HashSet<u16> = keep
        .map(svc_node_ports)
        .unwrap_or_default()
        .into_iter()
        .collect();
    for p in svc_node_ports(obj) {
        if !kept.contains(&p) {
            alloc.ports.remove(&p);
        }
    }
}

// ---------------------------------------------------------------- workloads

fn workload_defaults(res: Resource, obj: &mut Obj) {
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

fn validate_int_or_percent(v: &Value, field: &str, causes: &mut Causes) -> Option<i64> {
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

fn validate_workload(res: Resource, obj: &Obj, causes: &mut Causes) {
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
                        go_map(template_labels),
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

fn validate_backend(b: &Value, p: &str, causes: &mut Causes) {
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
                        .ok_or_else(|| "must be an integer".to_string())
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

fn validate_ingress(obj: &Obj, causes: &mut Causes) {
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
}

// ---------------------------------------------------------------- configmaps and secrets

const CONFIG_KEY_MSG: &str = "a valid config key must consist of alphanumeric characters, '-', '_' or '.' (e.g. 'key.name',  or 'KEY_NAME',  or 'key-name', regex used for validation is '[-._a-zA-Z0-9]+')";

fn check_config_key(k: &str) -> Result<(), String> {
    if k.len() > 253 {
        return Err("must be no more than 253 characters".into());
    }
    if k.is_empty()
        || !k
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.'))
    {
        return Err(CONFIG_KEY_MSG.into());
    }
    if k == "." {
        return Err("must not be '.'".into());
    }
    if k == ".." {
        return Err("must not be '..'".into());
    }
    if k.starts_with("..") {
        return Err("must not start with '..'".into());
    }
    Ok(())
}

fn decode_error(res: &str, what: String) -> Rejection {
    Rejection::BadRequest(format!(
        "{res} in version \"v1\" cannot be handled as a {res}: {what}"
    ))
}

/// Key syntax of `data`/`binaryData`, values' JSON types, keys unique across
/// both maps; for secrets, `data` values must be base64.
fn validate_config_data(obj: &Obj, secret: bool, causes: &mut Causes) -> Result<(), Rejection> {
    let kind = if secret { "Secret" } else { "ConfigMap" };
    let maps: &[&str] = if secret {
        &["data"]
    } else {
        &["data", "binaryData"]
    };
    let mut keys = HashSet::new();
    for field in maps {
        let Some(v) = obj.get(*field).filter(|v| !v.is_null()) else {
            continue;
        };
        let Some(m) = v.as_object() else {
            return Err(decode_error(kind, format!("{field} must be a map")));
        };
        for (k, v) in m {
            let Some(s) = v.as_str() else {
                return Err(decode_error(kind, format!("{field}[{k}] must be a string")));
            };
            if (secret || *field == "binaryData")
                && base64::engine::general_purpose::STANDARD.decode(s).is_err()
            {
                return Err(decode_error(
                    kind,
                    format!("illegal base64 data in {field}[{k}]"),
                ));
            }
            if let Err(e) = check_config_key(k) {
                causes.push(FieldCause::invalid(format!("{field}[{k}]"), k, e));
            } else if !keys.insert(k.clone()) {
                causes.push(FieldCause::duplicate(format!("{field}[{k}]"), k));
            }
        }
    }
    Ok(())
}

/// `stringData` is write-only: merged into `data` as base64 (winning over
/// `data` on the same key), then dropped. `type` defaults to Opaque.
fn secret_defaults(obj: &mut Obj) -> Result<(), Rejection> {
    let Some(m) = obj.as_object_mut() else {
        return Ok(());
    };
    default_field(m, "type", json!("Opaque"));
    let Some(sd) = m.remove("stringData") else {
        return Ok(());
    };
    if sd.is_null() {
        return Ok(());
    }
    let Some(sd) = sd.as_object() else {
        return Err(decode_error("Secret", "stringData must be a map".into()));
    };
    let data = obj_field(m, "data");
    for (k, v) in sd {
        let Some(s) = v.as_str() else {
            return Err(decode_error(
                "Secret",
                format!("stringData[{k}] must be a string"),
            ));
        };
        data.insert(
            k.clone(),
            json!(base64::engine::general_purpose::STANDARD.encode(s)),
        );
    }
    Ok(())
}

fn validate_secret_type(obj: &Obj, causes: &mut Causes) {
    let data = obj.get("data").and_then(Value::as_object);
    let has = |k: &str| data.is_some_and(|d| d.contains_key(k));
    match str_at(obj, &["type"]) {
        "kubernetes.io/tls" => {
            for k in ["tls.crt", "tls.key"] {
                if !has(k) {
                    causes.push(FieldCause::required(format!("data[{k}]"), ""));
                }
            }
        }
        "kubernetes.io/dockerconfigjson" if !has(".dockerconfigjson") => {
            causes.push(FieldCause::required("data[.dockerconfigjson]", ""));
        }
        "kubernetes.io/basic-auth" if !has("username") && !has("password") => {
            causes.push(FieldCause::required("data[username]", ""));
        }
        _ => {}
    }
}

/// `immutable: true` freezes `data`/`binaryData` and itself.
fn validate_immutable_data(new: &Obj, old: &Obj, causes: &mut Causes) {
    if old.get("immutable").and_then(Value::as_bool) != Some(true) {
        return;
    }
    if new.get("immutable").and_then(Value::as_bool) != Some(true) {
        causes.push(FieldCause::forbidden(
            "immutable",
            "field is immutable when `immutable` is set",
        ));
    }
    for f in ["data", "binaryData"] {
        if new.get(f) != old.get(f) {
            causes.push(FieldCause::forbidden(
                f,
                "field is immutable when `immutable` is set",
            ));
        }
    }
}

#[cfg(test)]
#[path = "admission_tests.rs"]
mod tests;
