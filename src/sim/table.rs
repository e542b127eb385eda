//! Server-side printing: the `meta.k8s.io/v1` Table that kubectl asks for
//! (`Accept: application/json;as=Table;…`) on `get`, so `kubectl get pods`
//! shows READY, STATUS, RESTARTS and AGE as against a real cluster, not
//! only NAME and AGE. Columns follow upstream's printers
//! (`pkg/printers/internalversion/printers.go`) for the kinds the sim
//! serves; `-o wide` columns have priority 1. Rows embed the object's
//! metadata as `PartialObjectMetadata` (upstream's default).

use super::resources::Resource;
use serde_json::{json, Value};
use std::time::{Duration, SystemTime};

/// True when the Accept header asks for a Table.
pub fn wants_table(accept: Option<&str>) -> bool {
    accept.is_some_and(|a| {
        a.split(',')
            .next()
            .is_some_and(|first| first.contains("as=Table") && first.contains("g=meta.k8s.io"))
    })
}

struct Col {
    name: &'static str,
    ty: &'static str,
    priority: u8,
}

const fn c(name: &'static str, ty: &'static str, priority: u8) -> Col {
    Col { name, ty, priority }
}

fn columns(res: Resource) -> Vec<Col> {
    match res {
        Resource::Pod => vec![
            c("Name", "string", 0),
            c("Ready", "string", 0),
            c("Status", "string", 0),
            c("Restarts", "string", 0),
            c("Age", "string", 0),
            c("IP", "string", 1),
            c("Node", "string", 1),
            c("Nominated Node", "string", 1),
            c("Readiness Gates", "string", 1),
        ],
        Resource::Deployment => vec![
            c("Name", "string", 0),
            c("Ready", "string", 0),
            c("Up-to-date", "string", 0),
            c("Available", "string", 0),
            c("Age", "string", 0),
            c("Containers", "string", 1),
            c("Images", "string", 1),
            c("Selector", "string", 1),
        ],
        Resource::ReplicaSet => vec![
            c("Name", "string", 0),
            c("Desired", "integer", 0),
            c("Current", "integer", 0),
            c("Ready", "integer", 0),
            c("Age", "string", 0),
            c("Containers", "string", 1),
            c("Images", "string", 1),
            c("Selector", "string", 1),
        ],
        Resource::Service => vec![
            c("Name", "string", 0),
            c("Type", "string", 0),
            c("Cluster-IP", "string", 0),
            c("External-IP", "string", 0),
            c("Port(s)", "string", 0),
            c("Age", "string", 0),
            c("Selector", "string", 1),
        ],
        Resource::Namespace => vec![
            c("Name", "string", 0),
            c("Status", "string", 0),
            c("Age", "string", 0),
        ],
        Resource::ConfigMap => vec![
            c("Name", "string", 0),
            c("Data", "integer", 0),
            c("Age", "string", 0),
        ],
        Resource::Secret => vec![
            c("Name", "string", 0),
            c("Type", "string", 0),
            c("Data", "integer", 0),
            c("Age", "string", 0),
        ],
        Resource::Ingress => vec![
            c("Name", "string", 0),
            c("Class", "string", 0),
            c("Hosts", "string", 0),
            c("Address", "string", 0),
            c("Ports", "string", 0),
            c("Age", "string", 0),
        ],
        // The Gateway API CRDs' additionalPrinterColumns.
        Resource::GatewayClass => vec![
            c("Name", "string", 0),
            c("Controller", "string", 0),
            c("Accepted", "string", 0),
            c("Age", "string", 0),
            c("Description", "string", 1),
        ],
        Resource::Gateway => vec![
            c("Name", "string", 0),
            c("Class", "string", 0),
            c("Address", "string", 0),
            c("Programmed", "string", 0),
            c("Age", "string", 0),
        ],
        // 1.36's `serviceAccountColumnDefinitions`: the SECRETS column is
        // gone since token Secrets are no longer made.
        Resource::ServiceAccount => vec![c("Name", "string", 0), c("Age", "string", 0)],
        Resource::HttpRoute => vec![
            c("Name", "string", 0),
            c("Hostnames", "string", 0),
            c("Age", "string", 0),
        ],
        Resource::Lease => vec![
            c("Name", "string", 0),
            c("Holder", "string", 0),
            c("Age", "string", 0),
        ],
        Resource::Node => vec![
            c("Name", "string", 0),
            c("Status", "string", 0),
            c("Roles", "string", 0),
            c("Age", "string", 0),
            c("Version", "string", 0),
            c("Internal-IP", "string", 1),
            c("External-IP", "string", 1),
            c("OS-Image", "string", 1),
            c("Kernel-Version", "string", 1),
            c("Container-Runtime", "string", 1),
        ],
        Resource::SelfSubjectAccessReview | Resource::SelfSubjectReview => {
            vec![c("Name", "string", 0), c("Age", "string", 0)]
        }
        // `printRole`/`printClusterRole`: the name and when it was made.
        Resource::Role | Resource::ClusterRole => {
            vec![c("Name", "string", 0), c("Created At", "date", 0)]
        }
        // `printRoleBinding`: the role as `Kind/name`; subjects when wide.
        Resource::RoleBinding | Resource::ClusterRoleBinding => vec![
            c("Name", "string", 0),
            c("Role", "string", 0),
            c("Age", "string", 0),
            c("Users", "string", 1),
            c("Groups", "string", 1),
            c("ServiceAccounts", "string", 1),
        ],
        Resource::PersistentVolumeClaim => vec![
            c("Name", "string", 0),
            c("Status", "string", 0),
            c("Volume", "string", 0),
            c("Capacity", "string", 0),
            c("Access Modes", "string", 0),
            c("StorageClass", "string", 0),
            c("VolumeAttributesClass", "string", 0),
            c("Age", "string", 0),
            c("VolumeMode", "string", 1),
        ],
        // One printer for both groups: upstream prints the stored object.
        Resource::Event | Resource::EventV1 => vec![
            c("Last Seen", "string", 0),
            c("Type", "string", 0),
            c("Reason", "string", 0),
            c("Object", "string", 0),
            c("Subobject", "string", 1),
            c("Source", "string", 1),
            c("Message", "string", 0),
            c("First Seen", "string", 1),
            c("Count", "string", 1),
            c("Name", "string", 1),
        ],
    }
}

/// kubectl's `duration.HumanDuration`.
pub fn human_duration(d: Duration) -> String {
    let s = d.as_secs();
    if s < 120 {
        return format!("{s}s");
    }
    let m = s / 60;
    if m < 10 {
        let rs = s % 60;
        return if rs == 0 {
            format!("{m}m")
        } else {
            format!("{m}m{rs}s")
        };
    }
    if m < 180 {
        return format!("{m}m");
    }
    let h = s / 3600;
    if h < 8 {
        let rm = m % 60;
        return if rm == 0 {
            format!("{h}h")
        } else {
            format!("{h}h{rm}m")
        };
    }
    if h < 48 {
        return format!("{h}h");
    }
    if h < 24 * 8 {
        let (d, rh) = (h / 24, h % 24);
        return if rh == 0 {
            format!("{d}d")
        } else {
            format!("{d}d{rh}h")
        };
    }
    if h < 24 * 365 * 2 {
        return format!("{}d", h / 24);
    }
    if h < 24 * 365 * 8 {
        let (y, dd) = (h / 24 / 365, (h / 24) % 365);
        return if dd == 0 {
            format!("{y}y")
        } else {
            format!("{y}y{dd}d")
        };
    }
    format!("{}y", h / 24 / 365)
}

fn age(o: &Value) -> String {
    let created = o["metadata"]["creationTimestamp"]
        .as_str()
        .and_then(crate::kube::time::parse_rfc3339);
    match created {
        Some(t) => human_duration(SystemTime::now().duration_since(t).unwrap_or_default()),
        None => "<unknown>".into(),
    }
}

fn s(v: &Value) -> String {
    match v {
        Value::String(s) => s.clone(),
        Value::Null => String::new(),
        other => other.to_string(),
    }
}

fn or_none(v: String) -> String {
    if v.is_empty() {
        "<none>".into()
    } else {
        v
    }
}

fn selector_string(sel: &Value) -> String {
    let mut parts: Vec<String> = sel
        .as_object()
        .map(|m| m.iter().map(|(k, v)| format!("{k}={}", s(v))).collect())
        .unwrap_or_default();
    parts.sort();
    or_none(parts.join(","))
}

fn containers_images(template_spec: &Value) -> (String, String) {
    let cs = template_spec["containers"]
        .as_array()
        .cloned()
        .unwrap_or_default();
    let names: Vec<String> = cs.iter().map(|c| s(&c["name"])).collect();
    let images: Vec<String> = cs.iter().map(|c| s(&c["image"])).collect();
    (names.join(","), images.join(","))
}

fn count(v: &Value) -> i64 {
    v.as_i64().unwrap_or(0)
}

/// The pod STATUS column, as kubectl computes it.
fn pod_status(p: &Value) -> String {
    let st = &p["status"];
    let mut reason = s(&st["reason"]);
    if reason.is_empty() {
        reason = s(&st["phase"]);
    }
    let inits = st["initContainerStatuses"]
        .as_array()
        .cloned()
        .unwrap_or_default();
    let total_init = p["spec"]["initContainers"]
        .as_array()
        .map(Vec::len)
        .unwrap_or(0);
    let mut initializing = false;
    for (i, c) in inits.iter().enumerate() {
        let t = &c["state"]["terminated"];
        if !t.is_null() && count(&t["exitCode"]) == 0 {
            continue;
        }
        initializing = true;
        reason = if !t.is_null() {
            let r = s(&t["reason"]);
            if r.is_empty() {
                format!("Init:ExitCode:{}", count(&t["exitCode"]))
            } else {
                format!("Init:{r}")
            }
        } else {
            let w = s(&c["state"]["waiting"]["reason"]);
            if !w.is_empty() && w != "PodInitializing" {
                format!("Init:{w}")
            } else {
                format!("Init:{i}/{total_init}")
            }
        };
        break;
    }
    if !initializing {
        let mut running = false;
        for c in st["containerStatuses"]
            .as_array()
            .into_iter()
            .flatten()
            .rev()
        {
            let w = s(&c["state"]["waiting"]["reason"]);
            let t = &c["state"]["terminated"];
            if !w.is_empty() {
                reason = w;
            } else if !t.is_null() {
                let r = s(&t["reason"]);
                reason = if !r.is_empty() {
                    r
                } else if !t["signal"].is_null() {
                    format!("Signal:{}", count(&t["signal"]))
                } else {
                    format!("ExitCode:{}", count(&t["exitCode"]))
                };
            } else if c["ready"] == true && !c["state"]["running"].is_null() {
                running = true;
            }
        }
        if reason == "Completed" && running {
            reason = "Running".into();
        }
    }
    if !p["metadata"]["deletionTimestamp"].is_null() {
        reason = "Terminating".into();
    }
    reason
}

fn row_cells(res: Resource, o: &Value) -> Vec<Value> {
    let name = json!(s(&o["metadata"]["name"]));
    match res {
        Resource::Pod => {
            let cs = o["status"]["containerStatuses"]
                .as_array()
                .cloned()
                .unwrap_or_default();
            let total = o["spec"]["containers"]
                .as_array()
                .map(Vec::len)
                .unwrap_or(0);
            let ready = cs.iter().filter(|c| c["ready"] == true).count();
            let restarts: i64 = cs.iter().map(|c| count(&c["restartCount"])).sum();
            vec![
                name,
                json!(format!("{ready}/{total}")),
                json!(pod_status(o)),
                json!(restarts.to_string()),
                json!(age(o)),
                json!(or_none(s(&o["status"]["podIP"]))),
                json!(or_none(s(&o["spec"]["nodeName"]))),
                json!("<none>"),
                json!("<none>"),
            ]
        }
        Resource::Deployment => {
            let (cn, im) = containers_images(&o["spec"]["template"]["spec"]);
            vec![
                name,
                json!(format!(
                    "{}/{}",
                    count(&o["status"]["readyReplicas"]),
                    count(&o["spec"]["replicas"])
                )),
                json!(count(&o["status"]["updatedReplicas"]).to_string()),
                json!(count(&o["status"]["availableReplicas"]).to_string()),
                json!(age(o)),
                json!(cn),
                json!(im),
                json!(selector_string(&o["spec"]["selector"]["matchLabels"])),
            ]
        }
        Resource::ReplicaSet => {
            let (cn, im) = containers_images(&o["spec"]["template"]["spec"]);
            vec![
                name,
                json!(count(&o["spec"]["replicas"])),
                json!(count(&o["status"]["replicas"])),
                json!(count(&o["status"]["readyReplicas"])),
                json!(age(o)),
                json!(cn),
                json!(im),
                json!(selector_string(&o["spec"]["selector"]["matchLabels"])),
            ]
        }
        Resource::Service => {
            let ports: Vec<String> = o["spec"]["ports"]
                .as_array()
                .into_iter()
                .flatten()
                .map(|p| {
                    let proto = p["protocol"].as_str().unwrap_or("TCP");
                    match p["nodePort"].as_i64() {
                        Some(np) => format!("{}:{np}/{proto}", count(&p["port"])),
                        None => format!("{}/{proto}", count(&p["port"])),
                    }
                })
                .collect();
            vec![
                name,
                json!(s(&o["spec"]["type"])),
                json!(or_none(s(&o["spec"]["clusterIP"]))),
                json!("<none>"),
                json!(or_none(ports.join(","))),
                json!(age(o)),
                json!(selector_string(&o["spec"]["selector"])),
            ]
        }
        Resource::Namespace => vec![name, json!(s(&o["status"]["phase"])), json!(age(o))],
        Resource::ConfigMap => {
            let n = o["data"].as_object().map(|m| m.len()).unwrap_or(0)
                + o["binaryData"].as_object().map(|m| m.len()).unwrap_or(0);
            vec![name, json!(n), json!(age(o))]
        }
        Resource::Secret => {
            let n = o["data"].as_object().map(|m| m.len()).unwrap_or(0);
            vec![name, json!(s(&o["type"])), json!(n), json!(age(o))]
        }
        Resource::Ingress => {
            let hosts: Vec<String> = o["spec"]["rules"]
                .as_array()
                .into_iter()
                .flatten()
                .filter_map(|r| r["host"].as_str().map(str::to_string))
                .collect();
            let ports = if o["spec"]["tls"].as_array().is_some_and(|t| !t.is_empty()) {
                "80, 443"
            } else {
                "80"
            };
            vec![
                name,
                json!(or_none(s(&o["spec"]["ingressClassName"]))),
                json!(if hosts.is_empty() {
                    "*".to_string()
                } else {
                    hosts.join(",")
                }),
                json!(""),
                json!(ports),
                json!(age(o)),
            ]
        }
        Resource::GatewayClass | Resource::Gateway | Resource::HttpRoute => {
            gateway_cells(res, o, name)
        }
        // `printServiceAccount`: the name and the age.
        Resource::ServiceAccount => vec![name, json!(age(o))],
        // `printLease`: the holder, "" when none.
        Resource::Lease => vec![name, json!(s(&o["spec"]["holderIdentity"])), json!(age(o))],
        Resource::Node => node_cells(o, name),
        Resource::Event | Resource::EventV1 => event_cells(o, name),
        Resource::PersistentVolumeClaim => pvc_cells(o, name),
        Resource::SelfSubjectAccessReview | Resource::SelfSubjectReview => {
            vec![name, json!(age(o))]
        }
        Resource::Role | Resource::ClusterRole => {
            vec![name, o["metadata"]["creationTimestamp"].clone()]
        }
        Resource::RoleBinding | Resource::ClusterRoleBinding => binding_cells(o, name),
    }
}

/// `printRoleBinding`: `Kind/name` of the role, then the subjects of each
/// kind joined with `, ` (service accounts as `namespace/name`).
fn binding_cells(o: &Value, name: Value) -> Vec<Value> {
    let rr = &o["roleRef"];
    let role = format!("{}/{}", s(&rr["kind"]), s(&rr["name"]));
    let of = |kind: &str| -> String {
        o["subjects"]
            .as_array()
            .map(|a| {
                a.iter()
                    .filter(|x| x["kind"] == kind)
                    .map(|x| {
                        if kind == "ServiceAccount" {
                            format!("{}/{}", s(&x["namespace"]), s(&x["name"]))
                        } else {
                            s(&x["name"]).to_string()
                        }
                    })
                    .collect::<Vec<_>>()
                    .join(", ")
            })
            .unwrap_or_default()
    };
    vec![
        name,
        json!(role),
        json!(age(o)),
        json!(of("User")),
        json!(of("Group")),
        json!(of("ServiceAccount")),
    ]
}

/// `printPersistentVolumeClaim`: capacity and access modes only once
/// bound; the class from `storageClassName` or the beta annotation.
fn pvc_cells(o: &Value, name: Value) -> Vec<Value> {
    let spec = &o["spec"];
    let phase = if o["metadata"]["deletionTimestamp"].is_null() {
        s(&o["status"]["phase"])
    } else {
        "Terminating".into()
    };
    let volume = s(&spec["volumeName"]);
    let (capacity, modes) = if volume.is_empty() {
        (String::new(), String::new())
    } else {
        let short = |m: &str| match m {
            "ReadWriteOnce" => "RWO",
            "ReadOnlyMany" => "ROX",
            "ReadWriteMany" => "RWX",
            "ReadWriteOncePod" => "RWOP",
            _ => "",
        };
        let modes: Vec<&str> = [
            "ReadWriteOnce",
            "ReadOnlyMany",
            "ReadWriteMany",
            "ReadWriteOncePod",
        ]
        .into_iter()
        .filter(|m| {
            o["status"]["accessModes"]
                .as_array()
                .is_some_and(|a| a.iter().any(|x| x == *m))
        })
        .map(short)
        .collect();
        (s(&o["status"]["capacity"]["storage"]), modes.join(","))
    };
    let class = match spec["storageClassName"].as_str() {
        Some(c) => c.to_string(),
        None => s(&o["metadata"]["annotations"]["volume.beta.kubernetes.io/storage-class"]),
    };
    let unset = |v: &Value| {
        v.as_str()
            .map_or_else(|| "<unset>".to_string(), str::to_string)
    };
    vec![
        name,
        json!(phase),
        json!(volume),
        json!(capacity),
        json!(modes),
        json!(class),
        json!(unset(&spec["volumeAttributesClassName"])),
        json!(age(o)),
        json!(unset(&spec["volumeMode"])),
    ]
}

/// The age of a time field, `<unknown>` when unset (upstream's
/// `translateTimestampSince` and its MicroTime twin).
fn since(v: &Value) -> Option<String> {
    let t = v.as_str().and_then(crate::kube::time::parse_rfc3339)?;
    Some(human_duration(
        SystemTime::now().duration_since(t).unwrap_or_default(),
    ))
}

/// `printEvent` (with `Wide`) over a core/v1 Event.
fn event_cells(o: &Value, name: Value) -> Vec<Value> {
    let first = since(&o["firstTimestamp"])
        .or_else(|| since(&o["eventTime"]))
        .unwrap_or_else(|| "<unknown>".into());
    let mut last = since(&o["lastTimestamp"]).unwrap_or_else(|| first.clone());
    let mut count = o["count"].as_i64().unwrap_or(0);
    if o["series"].is_object() {
        last = since(&o["series"]["lastObservedTime"]).unwrap_or_else(|| "<unknown>".into());
        count = o["series"]["count"].as_i64().unwrap_or(0);
    } else if count == 0 {
        count = 1;
    }
    let inv = &o["involvedObject"];
    let kind = s(&inv["kind"]).to_lowercase();
    let target = match s(&inv["name"]) {
        n if n.is_empty() => kind,
        n => format!("{kind}/{n}"),
    };
    let first_non_empty = |a: String, b: String| if a.is_empty() { b } else { a };
    let component = first_non_empty(s(&o["source"]["component"]), s(&o["reportingComponent"]));
    let instance = first_non_empty(s(&o["source"]["host"]), s(&o["reportingInstance"]));
    let source = if instance.is_empty() {
        component
    } else {
        format!("{component}, {instance}")
    };
    vec![
        json!(last),
        json!(s(&o["type"])),
        json!(s(&o["reason"])),
        json!(target),
        json!(s(&inv["fieldPath"])),
        json!(source),
        json!(s(&o["message"]).trim()),
        json!(first),
        json!(count),
        name,
    ]
}

/// `printNode` (with `Wide`, as the API server prints): Ready or NotReady
/// (Unknown without the condition), SchedulingDisabled when cordoned; the
/// roles of `node-role.kubernetes.io/ROLE` and `kubernetes.io/role` labels.
fn node_cells(o: &Value, name: Value) -> Vec<Value> {
    let mut status: Vec<String> = o["status"]["conditions"]
        .as_array()
        .into_iter()
        .flatten()
        .filter(|c| c["type"] == "Ready")
        .map(|c| {
            if c["status"] == "True" {
                "Ready".to_string()
            } else {
                "NotReady".to_string()
            }
        })
        .take(1)
        .collect();
    if status.is_empty() {
        status.push("Unknown".into());
    }
    if o["spec"]["unschedulable"] == true {
        status.push("SchedulingDisabled".into());
    }
    let mut roles: Vec<String> = o["metadata"]["labels"]
        .as_object()
        .into_iter()
        .flatten()
        .filter_map(|(k, v)| match k.strip_prefix("node-role.kubernetes.io/") {
            Some(role) if !role.is_empty() => Some(role.to_string()),
            _ if k == "kubernetes.io/role" => {
                v.as_str().filter(|r| !r.is_empty()).map(str::to_string)
            }
            _ => None,
        })
        .collect();
    roles.sort();
    roles.dedup();
    let address = |ty: &str| {
        o["status"]["addresses"]
            .as_array()
            .into_iter()
            .flatten()
            .find(|a| a["type"] == ty)
            .map(|a| s(&a["address"]))
            .unwrap_or_else(|| "<none>".into())
    };
    let info = &o["status"]["nodeInfo"];
    let unknown = |v: &Value| {
        let v = s(v);
        if v.is_empty() {
            "<unknown>".to_string()
        } else {
            v
        }
    };
    let mut kernel = unknown(&info["kernelVersion"]);
    let arch = s(&info["architecture"]);
    if !arch.is_empty() {
        kernel = format!("{kernel} ({arch})");
    }
    vec![
        name,
        json!(status.join(",")),
        json!(or_none(roles.join(","))),
        json!(age(o)),
        json!(s(&info["kubeletVersion"])),
        json!(address("InternalIP")),
        json!(address("ExternalIP")),
        json!(unknown(&info["osImage"])),
        json!(kernel),
        json!(unknown(&info["containerRuntimeVersion"])),
    ]
}

/// A condition's status (`.status.conditions[?(@.type=="T")].status`).
fn condition(o: &Value, ty: &str) -> String {
    o["status"]["conditions"]
        .as_array()
        .into_iter()
        .flatten()
        .find(|c| c["type"] == ty)
        .map(|c| s(&c["status"]))
        .unwrap_or_default()
}

/// A CRD column's list value, as the API server prints a JSONPath list:
/// JSON of the array, or "" when absent.
fn json_list(v: &Value) -> String {
    if v.as_array().is_some_and(|a| !a.is_empty()) {
        v.to_string()
    } else {
        String::new()
    }
}

/// The Gateway API kinds' cells (their CRDs' printer columns).
fn gateway_cells(res: Resource, o: &Value, name: Value) -> Vec<Value> {
    match res {
        Resource::GatewayClass => vec![
            name,
            json!(s(&o["spec"]["controllerName"])),
            json!(condition(o, "Accepted")),
            json!(age(o)),
            json!(s(&o["spec"]["description"])),
        ],
        Resource::Gateway => {
            let addrs: Vec<String> = o["status"]["addresses"]
                .as_array()
                .into_iter()
                .flatten()
                .map(|a| s(&a["value"]))
                .collect();
            vec![
                name,
                json!(s(&o["spec"]["gatewayClassName"])),
                json!(addrs.join(",")),
                json!(condition(o, "Programmed")),
                json!(age(o)),
            ]
        }
        _ => vec![
            name,
            json!(json_list(&o["spec"]["hostnames"])),
            json!(age(o)),
        ],
    }
}

fn row(res: Resource, o: &Value) -> Value {
    json!({
        "cells": row_cells(res, o),
        "object": {
            "kind": "PartialObjectMetadata",
            "apiVersion": "meta.k8s.io/v1",
            "metadata": o["metadata"],
        },
    })
}

/// A Table of `items`, with the list's resourceVersion.
pub fn table(res: Resource, items: &[Value], rv: u64) -> Value {
    let cols: Vec<Value> = columns(res)
        .iter()
        .map(|c| {
            let mut d = json!({"name": c.name, "type": c.ty, "format": "", "description": "", "priority": c.priority});
            if c.name == "Name" {
                d["format"] = json!("name");
            }
            d
        })
        .collect();
    json!({
        "kind": "Table",
        "apiVersion": "meta.k8s.io/v1",
        "metadata": {"resourceVersion": rv.to_string()},
        "columnDefinitions": cols,
        "rows": items.iter().map(|o| row(res, o)).collect::<Vec<_>>(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations_like_kubectl() {
        let d = Duration::from_secs;
        assert_eq!(human_duration(d(5)), "5s");
        assert_eq!(human_duration(d(119)), "119s");
        assert_eq!(human_duration(d(130)), "2m10s");
        assert_eq!(human_duration(d(600)), "10m");
        assert_eq!(human_duration(d(3 * 3600 + 600)), "3h10m");
        assert_eq!(human_duration(d(30 * 3600)), "30h");
        assert_eq!(human_duration(d(3 * 86400 + 3600)), "3d1h");
        assert_eq!(human_duration(d(100 * 86400)), "100d");
    }

    #[test]
    fn accept_detection() {
        assert!(wants_table(Some("application/json;as=Table;v=v1;g=meta.k8s.io,application/json;as=Table;v=v1beta1;g=meta.k8s.io,application/json")));
        assert!(!wants_table(Some("application/json")));
        assert!(!wants_table(None));
    }

    #[test]
    fn pod_rows() {
        let p = json!({"metadata": {"name": "p", "creationTimestamp": "2020-01-01T00:00:00Z"},
            "spec": {"containers": [{"name": "a"}, {"name": "b"}], "nodeName": "sim-node"},
            "status": {"phase": "Running", "podIP": "127.0.1.2", "containerStatuses": [
                {"name": "a", "ready": true, "restartCount": 2, "state": {"running": {}}},
                {"name": "b", "ready": false, "restartCount": 1, "state": {"waiting": {"reason": "CrashLoopBackOff"}}}]}});
        let t = table(Resource::Pod, &[p], 7);
        let cells = &t["rows"][0]["cells"];
        assert_eq!(cells[0], "p");
        assert_eq!(cells[1], "1/2");
        assert_eq!(cells[2], "CrashLoopBackOff");
        assert_eq!(cells[3], "3");
        assert_eq!(cells[5], "127.0.1.2");
        assert_eq!(t["metadata"]["resourceVersion"], "7");
        assert_eq!(t["columnDefinitions"][5]["priority"], 1);
    }
}
