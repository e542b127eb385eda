//! Object metadata: typed `ObjectMeta`, `OwnerReference`, `ListMeta` and
//! list envelopes, plus small helpers over untyped `serde_json::Value`
//! objects (the simulated store keeps objects as Values).
//!
//! It owns the metadata shape and the rule that unknown fields survive a
//! decode/encode round trip (every struct flattens the rest into `extra`), so
//! a read-modify-write never drops what this project does not model
//! (managedFields, selfLink, fields from newer servers). It never validates
//! objects, assigns names/uids/resourceVersions, or knows about particular
//! kinds: that belongs to the simulated server and the client above it.

use serde::{Deserialize, Deserializer, Serialize, Serializer};
use serde_json::{Map, Value};
use std::collections::BTreeMap;
use std::fmt;

/// `metadata` of every object. Absent fields stay absent on re-encode.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ObjectMeta {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub generate_name: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub namespace: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub uid: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub resource_version: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub generation: Option<i64>,
    /// Go writes a zero time as `null` (bookmarks, pod templates), so this
    /// is three-state: absent, `null` ([`Nullable::Null`]), or a timestamp.
    #[serde(default, skip_serializing_if = "Nullable::is_absent")]
    pub creation_timestamp: Nullable<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub deletion_timestamp: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub deletion_grace_period_seconds: Option<i64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub labels: Option<BTreeMap<String, String>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub annotations: Option<BTreeMap<String, String>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub owner_references: Option<Vec<OwnerReference>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub finalizers: Option<Vec<String>>,
    /// Everything else (managedFields, selfLink, …), kept verbatim.
    #[serde(flatten)]
    pub extra: Map<String, Value>,
}

impl ObjectMeta {
    /// The name, or "" when absent.
    pub fn name(&self) -> &str {
        self.name.as_deref().unwrap_or("")
    }

    /// The namespace, or "" when absent.
    pub fn namespace(&self) -> &str {
        self.namespace.as_deref().unwrap_or("")
    }

    /// The creation timestamp when set (neither absent nor null).
    pub fn creation_timestamp(&self) -> Option<&str> {
        self.creation_timestamp.as_option().map(String::as_str)
    }

    /// The owner reference with `controller: true`, if any.
    pub fn controller_ref(&self) -> Option<&OwnerReference> {
        self.owner_references
            .as_deref()?
            .iter()
            .find(|r| r.controller == Some(true))
    }

    /// A label value.
    pub fn label(&self, key: &str) -> Option<&str> {
        self.labels.as_ref()?.get(key).map(String::as_str)
    }

    /// An annotation value.
    pub fn annotation(&self, key: &str) -> Option<&str> {
        self.annotations.as_ref()?.get(key).map(String::as_str)
    }
}

/// A field that may be absent, JSON `null`, or a value. Used where Go
/// serialises a zero value as `null` and a round trip must keep it.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub enum Nullable<T> {
    #[default]
    Absent,
    Null,
    Value(T),
}

impl<T> Nullable<T> {
    pub fn is_absent(&self) -> bool {
        matches!(self, Nullable::Absent)
    }

    /// The value, treating absent and null alike.
    pub fn as_option(&self) -> Option<&T> {
        match self {
            Nullable::Value(v) => Some(v),
            _ => None,
        }
    }
}

impl<T> From<Option<T>> for Nullable<T> {
    fn from(o: Option<T>) -> Self {
        match o {
            Some(v) => Nullable::Value(v),
            None => Nullable::Absent,
        }
    }
}

impl<T: Serialize> Serialize for Nullable<T> {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        match self {
            Nullable::Value(v) => v.serialize(s),
            _ => s.serialize_none(),
        }
    }
}

impl<'de, T: Deserialize<'de>> Deserialize<'de> for Nullable<T> {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        // Reached only when the key is present; absence is `default`.
        Ok(match Option::<T>::deserialize(d)? {
            Some(v) => Nullable::Value(v),
            None => Nullable::Null,
        })
    }
}

/// `metadata.ownerReferences[]`. Compare owners by `uid`, never by name.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct OwnerReference {
    #[serde(default)]
    pub api_version: String,
    #[serde(default)]
    pub kind: String,
    #[serde(default)]
    pub name: String,
    #[serde(default)]
    pub uid: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub controller: Option<bool>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub block_owner_deletion: Option<bool>,
    #[serde(flatten)]
    pub extra: Map<String, Value>,
}

impl OwnerReference {
    /// A controller reference as controllers set it
    /// (`controller: true, blockOwnerDeletion: true`).
    pub fn controller(api_version: &str, kind: &str, name: &str, uid: &str) -> OwnerReference {
        OwnerReference {
            api_version: api_version.into(),
            kind: kind.into(),
            name: name.into(),
            uid: uid.into(),
            controller: Some(true),
            block_owner_deletion: Some(true),
            extra: Map::new(),
        }
    }

    pub fn is_controller(&self) -> bool {
        self.controller == Some(true)
    }
}

/// `metadata` of a list response.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ListMeta {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub resource_version: Option<String>,
    #[serde(rename = "continue", default, skip_serializing_if = "Option::is_none")]
    pub continue_token: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub remaining_item_count: Option<i64>,
    #[serde(flatten)]
    pub extra: Map<String, Value>,
}

/// A list response (`PodList`, …). Items carry no `kind`/`apiVersion` on the
/// wire; `T` should tolerate that (e.g. [`Object`] or `Value`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
#[serde(bound(deserialize = "T: Deserialize<'de>", serialize = "T: Serialize"))]
pub struct ObjectList<T> {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub kind: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub api_version: Option<String>,
    #[serde(default)]
    pub metadata: ListMeta,
    /// `null` decodes as empty.
    #[serde(default, deserialize_with = "null_as_empty")]
    pub items: Vec<T>,
    #[serde(flatten)]
    pub extra: Map<String, Value>,
}

fn null_as_empty<'de, D: Deserializer<'de>, T: Deserialize<'de>>(d: D) -> Result<Vec<T>, D::Error> {
    Ok(Option::<Vec<T>>::deserialize(d)?.unwrap_or_default())
}

/// Any object with typed metadata and everything else (spec, status, data…)
/// kept as raw JSON: enough for ownership walks and read-modify-write.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Object {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub api_version: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub kind: Option<String>,
    #[serde(default)]
    pub metadata: ObjectMeta,
    #[serde(flatten)]
    pub extra: Map<String, Value>,
}

/// Why [`set_path`] could not set a value.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SetPathError {
    /// The path up to and including the segment that is not an object.
    pub at: String,
}

impl fmt::Display for SetPathError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} is not an object", self.at)
    }
}

impl std::error::Error for SetPathError {}

/// The value at a path of object keys (`&["status", "phase"]`).
pub fn get_path<'a>(v: &'a Value, path: &[&str]) -> Option<&'a Value> {
    path.iter()
        .try_fold(v, |cur, key| cur.as_object()?.get(*key))
}

/// Mutable [`get_path`].
pub fn get_path_mut<'a>(v: &'a mut Value, path: &[&str]) -> Option<&'a mut Value> {
    path.iter()
        .try_fold(v, |cur, key| cur.as_object_mut()?.get_mut(*key))
}

/// The string at a path.
pub fn get_str<'a>(v: &'a Value, path: &[&str]) -> Option<&'a str> {
    get_path(v, path)?.as_str()
}

/// Sets the value at a path, creating missing (or `null`) intermediate
/// objects. Fails, changing nothing, when an intermediate value is something
/// else (a string, an array…), like Go's `unstructured.SetNestedField`. An
/// empty path replaces `v`.
pub fn set_path(v: &mut Value, path: &[&str], new: Value) -> Result<(), SetPathError> {
    // Check first so a failure leaves `v` untouched.
    let mut cur = &*v;
    for (i, key) in path.iter().enumerate() {
        match cur {
            Value::Object(m) => match m.get(*key) {
                Some(next) if i + 1 < path.len() => cur = next,
                _ => break,
            },
            Value::Null => break,
            _ => {
                return Err(SetPathError {
                    at: path[..i].join("."),
                })
            }
        }
    }
    let Some((last, parents)) = path.split_last() else {
        *v = new;
        return Ok(());
    };
    let mut cur = v;
    for key in parents {
        if cur.is_null() {
            *cur = Value::Object(Map::new());
        }
        let Value::Object(m) = cur else {
            return Err(SetPathError {
                at: key.to_string(),
            });
        };
        cur = m
            .entry(key.to_string())
            .or_insert_with(|| Value::Object(Map::new()));
    }
    if cur.is_null() {
        *cur = Value::Object(Map::new());
    }
    let Value::Object(m) = cur else {
        return Err(SetPathError {
            at: parents.join("."),
        });
    };
    m.insert(last.to_string(), new);
    Ok(())
}

/// Removes and returns the value at a path.
pub fn remove_path(v: &mut Value, path: &[&str]) -> Option<Value> {
    let (last, parents) = path.split_last()?;
    get_path_mut(v, parents)?.as_object_mut()?.remove(*last)
}

/// `metadata.<key>` as a string (`meta_str(&pod, "name")`).
pub fn meta_str<'a>(v: &'a Value, key: &str) -> Option<&'a str> {
    get_str(v, &["metadata", key])
}

fn string_map(v: Option<&Value>) -> BTreeMap<String, String> {
    v.and_then(Value::as_object)
        .map(|m| {
            m.iter()
                .filter_map(|(k, v)| Some((k.clone(), v.as_str()?.to_string())))
                .collect()
        })
        .unwrap_or_default()
}

/// `metadata.labels` (empty when absent; non-string values skipped).
pub fn labels(v: &Value) -> BTreeMap<String, String> {
    string_map(get_path(v, &["metadata", "labels"]))
}

/// `metadata.annotations` (empty when absent; non-string values skipped).
pub fn annotations(v: &Value) -> BTreeMap<String, String> {
    string_map(get_path(v, &["metadata", "annotations"]))
}

/// `metadata.ownerReferences` (malformed entries skipped).
pub fn owner_refs(v: &Value) -> Vec<OwnerReference> {
    get_path(v, &["metadata", "ownerReferences"])
        .and_then(Value::as_array)
        .map(|a| {
            a.iter()
                .filter_map(|r| serde_json::from_value(r.clone()).ok())
                .collect()
        })
        .unwrap_or_default()
}

/// The owner reference with `controller: true`, if any.
pub fn controller_ref(v: &Value) -> Option<OwnerReference> {
    owner_refs(v)
        .into_iter()
        .find(OwnerReference::is_controller)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn paths() {
        let mut v = json!({"metadata": {"name": "a"}, "status": null, "spec": "x"});
        assert_eq!(get_str(&v, &["metadata", "name"]), Some("a"));
        assert_eq!(meta_str(&v, "name"), Some("a"));
        assert_eq!(meta_str(&v, "uid"), None);
        assert_eq!(get_path(&v, &[]), Some(&v));
        set_path(&mut v, &["status", "phase"], json!("Running")).unwrap();
        assert_eq!(get_str(&v, &["status", "phase"]), Some("Running"));
        set_path(&mut v, &["a", "b", "c"], json!(1)).unwrap();
        assert_eq!(v["a"]["b"]["c"], 1);
        let before = v.clone();
        let e = set_path(&mut v, &["spec", "x"], json!(1)).unwrap_err();
        assert_eq!(e.at, "spec");
        let e = set_path(&mut v, &["metadata", "name", "x", "y"], json!(1)).unwrap_err();
        assert_eq!(e.at, "metadata.name");
        assert_eq!(v, before, "failed set changes nothing");
        let mut n = Value::Null;
        set_path(&mut n, &["k"], json!(true)).unwrap();
        assert_eq!(n, json!({"k": true}));
        set_path(&mut n, &[], json!(3)).unwrap();
        assert_eq!(n, json!(3));
        assert_eq!(remove_path(&mut v, &["a", "b"]), Some(json!({"c": 1})));
        assert_eq!(v["a"], json!({}));
        assert_eq!(remove_path(&mut v, &["zzz", "b"]), None);
        *get_path_mut(&mut v, &["metadata", "name"]).unwrap() = json!("b");
        assert_eq!(meta_str(&v, "name"), Some("b"));
    }

    #[test]
    fn labels_and_owners() {
        let v = json!({"metadata": {
            "labels": {"app": "x", "n": 1},
            "annotations": {"a": "b"},
            "ownerReferences": [
                {"apiVersion": "v1", "kind": "X", "name": "x", "uid": "1"},
                "garbage",
                {"apiVersion": "apps/v1", "kind": "ReplicaSet", "name": "rs", "uid": "2",
                 "controller": true, "blockOwnerDeletion": true, "future": 1}
            ]
        }});
        assert_eq!(
            labels(&v).into_iter().collect::<Vec<_>>(),
            [("app".into(), "x".into())]
        );
        assert_eq!(annotations(&v)["a"], "b");
        assert_eq!(owner_refs(&v).len(), 2);
        let c = controller_ref(&v).unwrap();
        assert_eq!((c.kind.as_str(), c.uid.as_str()), ("ReplicaSet", "2"));
        assert_eq!(c.extra["future"], 1);
        assert_eq!(controller_ref(&json!({})), None);
        assert!(labels(&json!({"metadata": {"labels": null}})).is_empty());
        let mut m = v["metadata"].clone();
        m["labels"] = json!({"app": "x"});
        m["ownerReferences"].as_array_mut().unwrap().remove(1);
        let typed: ObjectMeta = serde_json::from_value(m.clone()).unwrap();
        assert_eq!(typed.controller_ref().unwrap().name, "rs");
        assert_eq!(typed.label("app"), Some("x"));
        assert_eq!(typed.annotation("a"), Some("b"));
        assert_eq!(serde_json::to_value(&typed).unwrap(), m);
    }

    #[test]
    fn creation_timestamp_three_states() {
        for v in [
            json!({"name": "a"}),
            json!({"name": "a", "creationTimestamp": null}),
            json!({"name": "a", "creationTimestamp": "2024-01-01T00:00:00Z"}),
        ] {
            let m: ObjectMeta = serde_json::from_value(v.clone()).unwrap();
            assert_eq!(serde_json::to_value(&m).unwrap(), v);
        }
        let m: ObjectMeta =
            serde_json::from_value(json!({"creationTimestamp": "2024-01-01T00:00:00Z"})).unwrap();
        assert_eq!(m.creation_timestamp(), Some("2024-01-01T00:00:00Z"));
    }

    #[test]
    fn owner_controller_constructor() {
        let r = OwnerReference::controller("apps/v1", "ReplicaSet", "rs", "u");
        assert_eq!(
            serde_json::to_value(&r).unwrap(),
            json!({"apiVersion":"apps/v1","kind":"ReplicaSet","name":"rs","uid":"u","controller":true,"blockOwnerDeletion":true})
        );
    }

    #[test]
    fn list_round_trip_and_null_items() {
        let v = json!({"kind":"PodList","apiVersion":"v1","metadata":{"resourceVersion":"5","continue":"abc"},
                       "items":[{"metadata":{"name":"a"},"spec":{}}]});
        let l: ObjectList<Object> = serde_json::from_value(v.clone()).unwrap();
        assert_eq!(l.metadata.continue_token.as_deref(), Some("abc"));
        assert_eq!(l.items[0].metadata.name(), "a");
        assert_eq!(serde_json::to_value(&l).unwrap(), v);
        let l: ObjectList<Value> =
            serde_json::from_value(json!({"metadata":{},"items":null})).unwrap();
        assert!(l.items.is_empty());
    }
}
