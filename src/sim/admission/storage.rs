//! PersistentVolumeClaims: upstream's `persistentvolumeclaimStrategy`, the
//! v1 defaults, the StorageObjectInUseProtection admission plugin's
//! finalizer, and `ValidatePersistentVolumeClaim`/`…Update`
//! (`pkg/registry/core/persistentvolumeclaim`, `pkg/apis/core/validation`).
//! There is no binder: a claim stays `Pending` (docs/sim.md).

use super::{obj_field, Causes};
use crate::kube::quantity::Quantity;
use crate::sim::difflib::{go_indent_fields, unified};
use crate::sim::rules::check_dns1123_subdomain;
use crate::sim::store::{meta_mut, FieldCause, Obj};
use serde_json::{json, Value};

const ACCESS_MODES: &[&str] = &[
    "ReadOnlyMany",
    "ReadWriteMany",
    "ReadWriteOnce",
    "ReadWriteOncePod",
];
const VOLUME_MODES: &[&str] = &["Block", "Filesystem"];
/// The finalizer StorageObjectInUseProtection puts on every claim.
pub(crate) const PVC_PROTECTION: &str = "kubernetes.io/pvc-protection";

/// `volumeMode` defaults to `Filesystem`; a new claim's status is
/// `Pending` and it carries the pvc-protection finalizer.
pub(super) fn pvc_defaults(obj: &mut Obj, create: bool) {
    if let Some(m) = obj.as_object_mut() {
        let spec = obj_field(m, "spec");
        if spec.get("volumeMode").is_none_or(Value::is_null) {
            spec.insert("volumeMode".into(), json!("Filesystem"));
        }
        if create {
            m.insert("status".into(), json!({"phase": "Pending"}));
        }
    }
    if create {
        let meta = meta_mut(obj);
        let fin = meta.entry("finalizers").or_insert_with(|| json!([]));
        if !fin.is_array() {
            *fin = json!([]);
        }
        if let Some(list) = fin.as_array_mut() {
            if !list.iter().any(|f| f == PVC_PROTECTION) {
                list.push(json!(PVC_PROTECTION));
            }
        }
    }
}

/// `ValidatePersistentVolumeClaimSpec`.
pub(super) fn validate_pvc(obj: &Obj, causes: &mut Causes) {
    let spec = &obj["spec"];
    let modes: Vec<&str> = spec["accessModes"]
        .as_array()
        .into_iter()
        .flatten()
        .map(|m| m.as_str().unwrap_or(""))
        .collect();
    if modes.is_empty() {
        causes.push(FieldCause::required(
            "spec.accessModes",
            "at least 1 access mode is required",
        ));
    }
    let (mut once_pod, mut other) = (false, false);
    for m in &modes {
        if !ACCESS_MODES.contains(m) {
            causes.push(FieldCause::not_supported(
                "spec.accessModes",
                m,
                ACCESS_MODES,
            ));
        }
        if *m == "ReadWriteOncePod" {
            once_pod = true;
        } else if ACCESS_MODES.contains(m) {
            other = true;
        }
    }
    if once_pod && other {
        causes.push(FieldCause::forbidden(
            "spec.accessModes",
            "may not use ReadWriteOncePod with other access modes",
        ));
    }
    let at = "spec.resources[storage]";
    match &spec["resources"]["requests"]["storage"] {
        Value::Null => causes.push(FieldCause::required(at, "")),
        v => {
            let raw = v.as_str().map_or_else(|| v.to_string(), str::to_string);
            if let Ok(q) = Quantity::parse(&raw) {
                if q.nanos() <= 0 {
                    causes.push(FieldCause::invalid(at, &raw, "must be greater than zero"));
                }
            }
        }
    }
    if let Some(class) = spec["storageClassName"].as_str().filter(|c| !c.is_empty()) {
        if let Err(e) = check_dns1123_subdomain(class) {
            causes.push(FieldCause::invalid("spec.storageClassName", class, e));
        }
    }
    if let Some(mode) = spec["volumeMode"].as_str() {
        if !VOLUME_MODES.contains(&mode) {
            causes.push(FieldCause::not_supported(
                "spec.volumeMode",
                mode,
                VOLUME_MODES,
            ));
        }
    }
}

/// The internal `PersistentVolumeClaimSpec` as Go's JSON has it (Go field
/// names and order, no `omitempty`): what upstream's diff shows.
fn go_spec(spec: &Value) -> String {
    let or_null = |v: &Value| if v.is_null() { Value::Null } else { v.clone() };
    let reference = |r: &Value, ns: bool| {
        if r.is_null() {
            return Value::Null;
        }
        let mut m = serde_json::Map::new();
        m.insert("APIGroup".into(), or_null(&r["apiGroup"]));
        m.insert("Kind".into(), json!(r["kind"].as_str().unwrap_or("")));
        m.insert("Name".into(), json!(r["name"].as_str().unwrap_or("")));
        if ns {
            m.insert("Namespace".into(), or_null(&r["namespace"]));
        }
        Value::Object(m)
    };
    let resources = json!({
        "Limits": or_null(&spec["resources"]["limits"]),
        "Requests": or_null(&spec["resources"]["requests"]),
    });
    go_indent_fields(&[
        ("AccessModes", or_null(&spec["accessModes"])),
        ("Selector", or_null(&spec["selector"])),
        ("Resources", resources),
        (
            "VolumeName",
            json!(spec["volumeName"].as_str().unwrap_or("")),
        ),
        ("StorageClassName", or_null(&spec["storageClassName"])),
        ("VolumeMode", or_null(&spec["volumeMode"])),
        ("DataSource", reference(&spec["dataSource"], false)),
        ("DataSourceRef", reference(&spec["dataSourceRef"], true)),
        (
            "VolumeAttributesClassName",
            or_null(&spec["volumeAttributesClassName"]),
        ),
    ])
}

/// `ValidatePersistentVolumeClaimUpdate`'s rule for an unbound claim: the
/// spec may not change (but `volumeName` once, from empty), and the
/// message carries upstream's diff of it.
pub(super) fn validate_pvc_update(new: &Obj, old: &Obj, causes: &mut Causes) {
    let mut old_spec = old["spec"].clone();
    if old_spec["volumeName"].as_str().unwrap_or("").is_empty() {
        old_spec["volumeName"] = new["spec"]["volumeName"].clone();
        if old_spec["volumeName"].is_null() {
            if let Some(m) = old_spec.as_object_mut() {
                m.remove("volumeName");
            }
        }
    }
    // A class may be given to a claim that had none
    // (`validateStorageClassUpgradeFromNil`).
    let old_annotation = old
        .pointer("/metadata/annotations/volume.beta.kubernetes.io~1storage-class")
        .and_then(Value::as_str);
    let new_class = new["spec"]["storageClassName"].as_str();
    if old_spec["storageClassName"].is_null()
        && new_class.is_some_and(|c| old_annotation.is_none_or(|a| a == c))
    {
        old_spec["storageClassName"] = new["spec"]["storageClassName"].clone();
    }
    let (a, b) = (go_spec(&old_spec), go_spec(&new["spec"]));
    if a != b {
        causes.push(FieldCause::forbidden(
            "spec",
            format!(
                "spec is immutable after creation except resources.requests and volumeAttributesClassName for bound claims\n{}",
                unified(&a, &b)
            ),
        ));
    }
}
