//! Decoding a body as the API server's typed decoder would, for the fields
//! where a client can tell the difference: a value of the wrong JSON type
//! is refused with Go's `encoding/json` text (`json: cannot unmarshal
//! number into Go struct field LeaseSpec.spec.acquireTime of type
//! string`), a `metav1.Time` or `metav1.MicroTime` is parsed as Go parses
//! it and written back in its canonical form ([`super::apitime`]), and a
//! `null` is dropped as an omitted pointer would be. The store puts the
//! answer after `KIND in version "v1" cannot be handled as a KIND: ` in a
//! 400, as upstream does.
//!
//! Only the fields listed per kind are checked; the rest of a body is kept
//! as given (docs/sim.md says which kinds have tables here).

use super::apitime::{self, Layout};
use super::resources::Resource;
use serde_json::{Map, Value};

/// A field's Go type, as a decode error names it.
#[derive(Debug, Clone, Copy)]
pub enum Ty {
    Str,
    Int32,
    Int64,
    Bool,
    /// `metav1.Time`.
    Time,
    /// `metav1.MicroTime`.
    MicroTime,
    /// A struct (its Go type name, e.g. `v1.LeaseSpec`).
    Struct(&'static str),
    /// A slice (its Go type, e.g. `[]v1.NodeAddress`).
    Slice(&'static str),
    /// A `v1.ResourceList`: an object of `resource.Quantity` strings (or
    /// numbers), each parsed as one.
    Quantities,
}

impl Ty {
    fn go(self) -> &'static str {
        match self {
            Ty::Str | Ty::Time | Ty::MicroTime => "string",
            Ty::Int32 => "int32",
            Ty::Int64 => "int64",
            Ty::Bool => "bool",
            Ty::Struct(g) | Ty::Slice(g) => g,
            Ty::Quantities => "v1.ResourceList",
        }
    }
}

/// One checked field: its JSON path from the object's root, the Go struct
/// that holds it (the error's `Go struct field OWNER.path`), its type.
pub struct Field {
    pub path: &'static [&'static str],
    pub owner: &'static str,
    pub ty: Ty,
}

const fn f(path: &'static [&'static str], owner: &'static str, ty: Ty) -> Field {
    Field { path, owner, ty }
}

const LEASE: &[Field] = &[
    f(&["spec"], "Lease", Ty::Struct("v1.LeaseSpec")),
    f(&["spec", "holderIdentity"], "LeaseSpec", Ty::Str),
    f(&["spec", "leaseDurationSeconds"], "LeaseSpec", Ty::Int32),
    f(&["spec", "acquireTime"], "LeaseSpec", Ty::MicroTime),
    f(&["spec", "renewTime"], "LeaseSpec", Ty::MicroTime),
    f(&["spec", "leaseTransitions"], "LeaseSpec", Ty::Int32),
    f(&["spec", "strategy"], "LeaseSpec", Ty::Str),
    f(&["spec", "preferredHolder"], "LeaseSpec", Ty::Str),
];

const NODE: &[Field] = &[
    f(&["spec"], "Node", Ty::Struct("v1.NodeSpec")),
    f(&["spec", "podCIDR"], "NodeSpec", Ty::Str),
    f(&["spec", "podCIDRs"], "NodeSpec", Ty::Slice("[]string")),
    f(&["spec", "providerID"], "NodeSpec", Ty::Str),
    f(&["spec", "unschedulable"], "NodeSpec", Ty::Bool),
    f(&["spec", "taints"], "NodeSpec", Ty::Slice("[]v1.Taint")),
    f(&["status"], "Node", Ty::Struct("v1.NodeStatus")),
    f(&["status", "capacity"], "NodeStatus", Ty::Quantities),
    f(&["status", "allocatable"], "NodeStatus", Ty::Quantities),
    f(
        &["status", "conditions"],
        "NodeStatus",
        Ty::Slice("[]v1.NodeCondition"),
    ),
    f(
        &["status", "addresses"],
        "NodeStatus",
        Ty::Slice("[]v1.NodeAddress"),
    ),
];

const EVENT: &[Field] = &[
    f(
        &["involvedObject"],
        "Event",
        Ty::Struct("v1.ObjectReference"),
    ),
    f(&["reason"], "Event", Ty::Str),
    f(&["message"], "Event", Ty::Str),
    f(&["source"], "Event", Ty::Struct("v1.EventSource")),
    f(&["firstTimestamp"], "Event", Ty::Time),
    f(&["lastTimestamp"], "Event", Ty::Time),
    f(&["count"], "Event", Ty::Int32),
    f(&["type"], "Event", Ty::Str),
    f(&["eventTime"], "Event", Ty::MicroTime),
    f(&["series"], "Event", Ty::Struct("v1.EventSeries")),
    f(&["series", "count"], "EventSeries", Ty::Int32),
    f(
        &["series", "lastObservedTime"],
        "EventSeries",
        Ty::MicroTime,
    ),
    f(&["action"], "Event", Ty::Str),
    f(&["reportingComponent"], "Event", Ty::Str),
    f(&["reportingInstance"], "Event", Ty::Str),
];

const EVENT_V1: &[Field] = &[
    f(&["eventTime"], "Event", Ty::MicroTime),
    f(&["series"], "Event", Ty::Struct("v1.EventSeries")),
    f(&["series", "count"], "EventSeries", Ty::Int32),
    f(
        &["series", "lastObservedTime"],
        "EventSeries",
        Ty::MicroTime,
    ),
    f(&["reportingController"], "Event", Ty::Str),
    f(&["reportingInstance"], "Event", Ty::Str),
    f(&["action"], "Event", Ty::Str),
    f(&["reason"], "Event", Ty::Str),
    f(&["regarding"], "Event", Ty::Struct("v1.ObjectReference")),
    f(&["note"], "Event", Ty::Str),
    f(&["type"], "Event", Ty::Str),
    f(&["deprecatedSource"], "Event", Ty::Struct("v1.EventSource")),
    f(&["deprecatedFirstTimestamp"], "Event", Ty::Time),
    f(&["deprecatedLastTimestamp"], "Event", Ty::Time),
    f(&["deprecatedCount"], "Event", Ty::Int32),
];

const PVC: &[Field] = &[
    f(
        &["spec"],
        "PersistentVolumeClaim",
        Ty::Struct("v1.PersistentVolumeClaimSpec"),
    ),
    f(
        &["spec", "accessModes"],
        "PersistentVolumeClaimSpec",
        Ty::Slice("[]v1.PersistentVolumeAccessMode"),
    ),
    f(
        &["spec", "resources"],
        "PersistentVolumeClaimSpec",
        Ty::Struct("v1.VolumeResourceRequirements"),
    ),
    f(
        &["spec", "resources", "limits"],
        "VolumeResourceRequirements",
        Ty::Quantities,
    ),
    f(
        &["spec", "resources", "requests"],
        "VolumeResourceRequirements",
        Ty::Quantities,
    ),
    f(
        &["spec", "volumeName"],
        "PersistentVolumeClaimSpec",
        Ty::Str,
    ),
    f(
        &["spec", "storageClassName"],
        "PersistentVolumeClaimSpec",
        Ty::Str,
    ),
    f(
        &["spec", "volumeMode"],
        "PersistentVolumeClaimSpec",
        Ty::Str,
    ),
];

/// The fields checked for a kind, parents before children.
fn fields(res: Resource) -> &'static [Field] {
    match res {
        Resource::Lease => LEASE,
        Resource::Node => NODE,
        Resource::Event => EVENT,
        Resource::EventV1 => EVENT_V1,
        Resource::PersistentVolumeClaim => PVC,
        _ => &[],
    }
}

/// Go's name for a JSON value's kind in `cannot unmarshal X`.
fn json_kind(v: &Value) -> String {
    match v {
        Value::String(_) => "string".into(),
        Value::Number(_) => "number".into(),
        Value::Bool(_) => "bool".into(),
        Value::Array(_) => "array".into(),
        Value::Object(_) => "object".into(),
        Value::Null => "null".into(),
    }
}

fn type_error(field: &Field, value: String) -> String {
    format!(
        "json: cannot unmarshal {value} into Go struct field {}.{} of type {}",
        field.owner,
        field.path.join("."),
        field.ty.go()
    )
}

/// `resource.ParseQuantity`'s refusals, following its
/// `parseQuantityString`: `ErrFormatWrong` (the regular expression its
/// text names), `ErrSuffix` for a suffix it does not know, `ErrNumeric`
/// for a number with no digits.
/// The quantity's text as stored: trimmed, a number written as a string
/// (upstream goes further and writes its canonical form, `1000m` as `1`).
fn quantity(v: &Value) -> Result<Value, String> {
    let text = match v {
        Value::String(s) => s.trim().to_string(),
        Value::Number(n) => n.to_string(),
        _ => return Err(QUANTITY_FORMAT.into()),
    };
    go_parse_quantity(&text).map_err(str::to_string)?;
    Ok(Value::String(text))
}

fn go_parse_quantity(s: &str) -> Result<(), &'static str> {
    let b = s.as_bytes();
    if b.is_empty() {
        return Err(QUANTITY_FORMAT);
    }
    let digits = |mut i: usize| {
        while i < b.len() && b[i].is_ascii_digit() {
            i += 1;
        }
        i
    };
    let mut pos = usize::from(matches!(b[0], b'+' | b'-'));
    if b[pos..].iter().all(|c| *c == b'0') {
        return Ok(());
    }
    let num_start = pos;
    pos = digits(pos);
    let mut had_digits = pos > num_start;
    if pos < b.len() && b[pos] == b'.' {
        let d = pos + 1;
        pos = digits(d);
        had_digits |= pos > d;
    }
    let suffix_start = pos;
    while pos < b.len() && b"eEinumkKMGTP".contains(&b[pos]) {
        pos += 1;
    }
    if pos < b.len() && matches!(b[pos], b'+' | b'-') {
        pos += 1;
    }
    if digits(pos) != b.len() {
        return Err(QUANTITY_FORMAT);
    }
    let suffix = &s[suffix_start..];
    let known = matches!(
        suffix,
        "" | "Ki"
            | "Mi"
            | "Gi"
            | "Ti"
            | "Pi"
            | "Ei"
            | "n"
            | "u"
            | "m"
            | "k"
            | "M"
            | "G"
            | "T"
            | "P"
            | "E"
    ) || (suffix.len() > 1
        && matches!(suffix.as_bytes()[0], b'e' | b'E')
        && suffix[1..].parse::<i64>().is_ok());
    if !known {
        return Err("unable to parse quantity's suffix");
    }
    if !had_digits {
        return Err("unable to parse numeric part of quantity");
    }
    Ok(())
}

const QUANTITY_FORMAT: &str =
    "quantities must match the regular expression '^([+-]?[0-9.]+)([eEinumkKMGTP]*[-+]?[0-9]*)$'";

/// Checks (and canonicalises) one value; `Ok(None)`: keep it as is.
fn check(field: &Field, v: &Value) -> Result<Option<Value>, String> {
    let wrong = || Err(type_error(field, json_kind(v)));
    match (field.ty, v) {
        (Ty::Str, Value::String(_)) | (Ty::Bool, Value::Bool(_)) => Ok(None),
        (Ty::Struct(_), Value::Object(_)) | (Ty::Slice(_), Value::Array(_)) => Ok(None),
        (Ty::Int32 | Ty::Int64, Value::Number(n)) => {
            let fits = match field.ty {
                Ty::Int32 => n.as_i64().is_some_and(|i| i32::try_from(i).is_ok()),
                _ => n.as_i64().is_some(),
            };
            if fits {
                Ok(None)
            } else {
                Err(type_error(field, format!("number {n}")))
            }
        }
        (Ty::Quantities, Value::Object(m)) => {
            let mut out = Map::new();
            for (k, q) in m {
                out.insert(k.clone(), quantity(q)?);
            }
            Ok(Some(Value::Object(out)))
        }
        (Ty::Time, Value::String(s)) => {
            apitime::parse(s, Layout::Rfc3339).map(|t| Some(Value::String(t.seconds())))
        }
        (Ty::MicroTime, Value::String(s)) => {
            apitime::parse(s, Layout::Micro).map(|t| Some(Value::String(t.micro())))
        }
        _ => wrong(),
    }
}

/// The object at `parents` below `obj`, when every step is an object.
fn parent_mut<'a>(
    obj: &'a mut Map<String, Value>,
    parents: &[&str],
) -> Option<&'a mut Map<String, Value>> {
    let mut cur = obj;
    for p in parents {
        cur = cur.get_mut(*p)?.as_object_mut()?;
    }
    Some(cur)
}

/// Decodes `obj` (a body whose kind is `res`): the first refusal, in the
/// field table's order, or `Ok` with times canonical and nulls dropped.
pub fn decode(res: Resource, obj: &mut Map<String, Value>) -> Result<(), String> {
    for field in fields(res) {
        let Some((last, parents)) = field.path.split_last() else {
            continue;
        };
        let Some(cur) = parent_mut(obj, parents) else {
            continue;
        };
        match cur.get(*last) {
            None => {}
            Some(Value::Null) => {
                cur.remove(*last);
            }
            Some(v) => {
                if let Some(canon) = check(field, v)? {
                    cur.insert((*last).to_string(), canon);
                }
            }
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn run(res: Resource, v: Value) -> Result<Value, String> {
        let mut m = v.as_object().cloned().unwrap_or_default();
        decode(res, &mut m).map(|()| Value::Object(m))
    }

    #[test]
    fn lease_fields_as_the_api_server_decodes_them() {
        // Texts checked against kube-apiserver v1.36.3.
        assert_eq!(
            run(Resource::Lease, json!({"spec": {"acquireTime": 5}})).unwrap_err(),
            "json: cannot unmarshal number into Go struct field LeaseSpec.spec.acquireTime of type string"
        );
        assert_eq!(
            run(Resource::Lease, json!({"spec": {"leaseDurationSeconds": "5"}})).unwrap_err(),
            "json: cannot unmarshal string into Go struct field LeaseSpec.spec.leaseDurationSeconds of type int32"
        );
        assert_eq!(
            run(Resource::Lease, json!({"spec": "x"})).unwrap_err(),
            "json: cannot unmarshal string into Go struct field Lease.spec of type v1.LeaseSpec"
        );
        let ok = run(
            Resource::Lease,
            json!({"spec": {"renewTime": "2026-01-01T01:00:00.000001+01:00", "holderIdentity": null}}),
        )
        .unwrap();
        assert_eq!(
            ok,
            json!({"spec": {"renewTime": "2026-01-01T00:00:00.000001Z"}})
        );
    }
}
