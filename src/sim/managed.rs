//! Field management: `metadata.managedFields` and server-side apply
//! (docs/sim.md#server-side-apply), modelled on upstream's
//! structured-merge-diff as far as the sim's kinds need it.
//!
//! A field set is a set of paths; a path is a list of `fieldsV1` keys:
//! `f:<field>`, `k:<json of the key fields>` for an item of a list merged
//! by key (`containers` by `name`, as the strategic merge patch's table in
//! `sim::patch` says), `v:<json>` for an item of a set (`finalizers`).
//! Other lists are atomic: a leaf. Encoded as upstream encodes it: a tree
//! of those keys, `{}` for a leaf, `"."` for a node that is owned itself
//! and has owned children.
//!
//! Two kinds of writers own fields:
//! - **Update** (`POST`, `PUT`, the three patches, through the API): the
//!   manager (`fieldManager`, else the User-Agent's product, else
//!   `unknown`) takes every field the write added or changed, away from
//!   the others; a field the write removed is nobody's any more.
//! - **Apply** (`application/apply-patch+yaml`): the manager's set becomes
//!   exactly the leaves of what it sent. A field it sends that another
//!   manager owns with another value is a conflict (409, upstream's
//!   message and causes) unless `force=true`, which takes it over. What
//!   it applied before and sends no more is removed from the object when
//!   no other manager owns it.
//!
//! Writes the sim makes itself (its controllers and kubelet) carry the
//! stored entries over unchanged: the sim's own controllers are no
//! managers.

use super::patch::merge_key;
use super::resources::Resource;
use super::store::StoreError;
use crate::kube::time::now_rfc3339;
use serde_json::{json, Map, Value};
use std::cell::RefCell;
use std::collections::{BTreeMap, BTreeSet};

/// A path of `fieldsV1` keys.
pub type Path = Vec<String>;
/// A set of paths.
pub type FieldSet = BTreeSet<Path>;

/// Who is writing, for the writes the API makes on a client's behalf.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Writer {
    /// A client's create, update or patch, by this manager.
    Update(String),
    /// A server-side apply: the body's `managedFields` are already the
    /// answer ([`apply`]).
    Apply,
}

thread_local! {
    static WRITER: RefCell<Option<Writer>> = const { RefCell::new(None) };
}

/// Runs `f` with `w` as the writer of the store writes it makes on this
/// thread (the API's request thread), then forgets it.
pub fn with_writer<T>(w: Writer, f: impl FnOnce() -> T) -> T {
    struct Reset;
    impl Drop for Reset {
        fn drop(&mut self) {
            WRITER.with(|c| *c.borrow_mut() = None);
        }
    }
    WRITER.with(|c| *c.borrow_mut() = Some(w));
    let _reset = Reset;
    f()
}

fn current_writer() -> Option<Writer> {
    WRITER.with(|c| c.borrow().clone())
}

/// The manager of a non-apply write: `fieldManager`, else what the
/// User-Agent names before its first `/`, else `unknown` (upstream's
/// `prefixFromUserAgent`).
pub fn update_manager(field_manager: Option<&str>, user_agent: Option<&str>) -> String {
    if let Some(m) = field_manager.filter(|m| !m.is_empty()) {
        return m.to_string();
    }
    let ua = user_agent.unwrap_or("");
    let product = ua.split('/').next().unwrap_or("").trim();
    if product.is_empty() {
        "unknown".into()
    } else {
        product.chars().take(128).collect()
    }
}

/// `fieldManager` as upstream validates it: at most 128 characters, all
/// printable. `None` when fine, else the cause's reason and message.
pub fn check_field_manager(m: &str) -> Option<(&'static str, String)> {
    if m.chars().count() > 128 {
        return Some((
            "FieldValueTooLong",
            "Too long: may not be more than 128 bytes".into(),
        ));
    }
    if m.chars().any(char::is_control) {
        return Some((
            "FieldValueInvalid",
            format!(
                "Invalid value: {}: must only contain printable characters",
                super::store::error::quote(m)
            ),
        ));
    }
    None
}

// ------------------------------------------------------------ field sets

/// Top-level and metadata fields no manager owns.
fn skipped(path: &[String]) -> bool {
    match path {
        [f] => matches!(f.as_str(), "f:apiVersion" | "f:kind" | "f:status"),
        [m, f] if m == "f:metadata" => matches!(
            f.as_str(),
            "f:name"
                | "f:namespace"
                | "f:uid"
                | "f:resourceVersion"
                | "f:generation"
                | "f:creationTimestamp"
                | "f:deletionTimestamp"
                | "f:deletionGracePeriodSeconds"
                | "f:managedFields"
                | "f:selfLink"
        ),
        _ => false,
    }
}

fn field_key(name: &str) -> String {
    format!("f:{name}")
}

/// The `k:` key of an item of a list merged by `key`, or `None` when the
/// item lacks it (then the list is treated as atomic).
fn item_key(item: &Value, key: &str) -> Option<String> {
    let v = item.get(key)?;
    Some(format!("k:{}", json!({ key: v })))
}

/// How a list at field `name` is merged: by a key, as a set, or whole.
enum ListKind {
    Keyed(&'static str),
    Set,
    Atomic,
}

fn list_kind(name: &str, items: &[Value]) -> ListKind {
    if name == "finalizers" {
        return ListKind::Set;
    }
    match merge_key(name, items, items) {
        Some(k) if items.iter().all(|i| i.get(k).is_some()) => ListKind::Keyed(k),
        _ => ListKind::Atomic,
    }
}

/// The set an applier owns: every leaf of what it sent, each item of a
/// keyed or set list, and empty maps.
pub fn applied_set(obj: &Value) -> FieldSet {
    let mut out = FieldSet::new();
    walk(obj, &mut Vec::new(), &mut out, false);
    out
}

/// Every field of an object, maps and list items included: what an
/// update's writer may take.
pub fn full_set(obj: &Value) -> FieldSet {
    let mut out = FieldSet::new();
    walk(obj, &mut Vec::new(), &mut out, true);
    out
}

/// Fields whose value is a map (Go `map[string]…`) rather than a struct:
/// an update that creates one owns it itself (`"."`), as upstream records;
/// a struct (`metadata`, `spec`) is owned only through its fields.
fn is_map_field(path: &[String], m: &Map<String, Value>) -> bool {
    let Some(last) = path.last().and_then(|l| l.strip_prefix("f:")) else {
        // A list item: owned itself.
        return !path.is_empty();
    };
    match last {
        "data" | "binaryData" | "stringData" | "labels" | "annotations" | "nodeSelector"
        | "matchLabels" | "limits" | "requests" | "capacity" | "allocatable" => true,
        // A Service's selector is a map, a workload's a struct.
        "selector" => m.values().all(Value::is_string) && !m.contains_key("matchLabels"),
        _ => false,
    }
}

/// Structs upstream marks atomic (`+structType=atomic`): owned, merged and
/// replaced whole. A workload's `LabelSelector` is the one the sim's kinds
/// have.
fn is_atomic_struct(path: &[String], m: &Map<String, Value>) -> bool {
    path.last().is_some_and(|l| l == "f:selector")
        && (m.contains_key("matchLabels") || m.contains_key("matchExpressions"))
}

fn walk(v: &Value, path: &mut Path, out: &mut FieldSet, nodes: bool) {
    match v {
        Value::Object(m) if is_atomic_struct(path, m) => {
            out.insert(path.clone());
        }
        Value::Object(m) => {
            if (m.is_empty() || (nodes && is_map_field(path, m))) && !path.is_empty() {
                out.insert(path.clone());
            }
            for (k, child) in m {
                path.push(field_key(k));
                if !skipped(path) {
                    walk_field(k, child, path, out, nodes);
                }
                path.pop();
            }
        }
        _ => {
            if !path.is_empty() {
                out.insert(path.clone());
            }
        }
    }
}

fn walk_field(name: &str, v: &Value, path: &mut Path, out: &mut FieldSet, nodes: bool) {
    let Value::Array(items) = v else {
        walk(v, path, out, nodes);
        return;
    };
    match list_kind(name, items) {
        ListKind::Atomic => {
            out.insert(path.clone());
        }
        ListKind::Set => {
            if items.is_empty() {
                out.insert(path.clone());
            }
            for i in items {
                path.push(format!("v:{i}"));
                out.insert(path.clone());
                path.pop();
            }
        }
        ListKind::Keyed(k) => {
            if items.is_empty() {
                out.insert(path.clone());
            }
            for i in items {
                let Some(ik) = item_key(i, k) else { continue };
                path.push(ik);
                out.insert(path.clone());
                if let Value::Object(m) = i {
                    for (f, child) in m {
                        path.push(field_key(f));
                        walk_field(f, child, path, out, nodes);
                        path.pop();
                    }
                }
                path.pop();
            }
        }
    }
}

/// The value at `path`, if there is one.
pub fn get_at<'a>(v: &'a Value, path: &[String]) -> Option<&'a Value> {
    let mut cur = v;
    for p in path {
        cur = step(cur, p)?;
    }
    Some(cur)
}

fn step<'a>(cur: &'a Value, p: &str) -> Option<&'a Value> {
    if let Some(f) = p.strip_prefix("f:") {
        return cur.as_object()?.get(f);
    }
    let items = cur.as_array()?;
    if let Some(k) = p.strip_prefix("k:") {
        let want: Map<String, Value> = serde_json::from_str(k).ok()?;
        return items
            .iter()
            .find(|i| want.iter().all(|(kk, vv)| i.get(kk) == Some(vv)));
    }
    let want: Value = serde_json::from_str(p.strip_prefix("v:")?).ok()?;
    items.iter().find(|i| **i == want)
}

/// Removes what `path` names from `v` (a field, a keyed item, a set item).
fn remove_at(v: &mut Value, path: &[String]) {
    let Some((last, parent)) = path.split_last() else {
        return;
    };
    let mut cur = v;
    for p in parent {
        let next = if let Some(f) = p.strip_prefix("f:") {
            cur.as_object_mut().and_then(|m| m.get_mut(f))
        } else {
            let want = p.get(2..).unwrap_or("");
            cur.as_array_mut()
                .and_then(|items| items.iter_mut().find(|i| matches_item(i, p, want)))
        };
        match next {
            Some(n) => cur = n,
            None => return,
        }
    }
    if let Some(f) = last.strip_prefix("f:") {
        if let Some(m) = cur.as_object_mut() {
            m.remove(f);
        }
    } else if let Some(items) = cur.as_array_mut() {
        let want = last.get(2..).unwrap_or("");
        items.retain(|i| !matches_item(i, last, want));
    }
}

fn matches_item(i: &Value, p: &str, want: &str) -> bool {
    if p.starts_with("k:") {
        serde_json::from_str::<Map<String, Value>>(want)
            .is_ok_and(|w| w.iter().all(|(k, v)| i.get(k) == Some(v)))
    } else {
        serde_json::from_str::<Value>(want).is_ok_and(|w| *i == w)
    }
}

// --------------------------------------------------------- fieldsV1

/// Encodes a set as `fieldsV1`.
pub fn encode(set: &FieldSet) -> Value {
    #[derive(Default)]
    struct Node {
        owned: bool,
        children: BTreeMap<String, Node>,
    }
    fn render(n: &Node) -> Value {
        let mut m = Map::new();
        if n.owned && !n.children.is_empty() {
            m.insert(".".into(), json!({}));
        }
        for (k, c) in &n.children {
            m.insert(k.clone(), render(c));
        }
        Value::Object(m)
    }
    let mut root = Node::default();
    for path in set {
        let mut cur = &mut root;
        for p in path {
            cur = cur.children.entry(p.clone()).or_default();
        }
        cur.owned = true;
    }
    render(&root)
}

/// Decodes `fieldsV1`; what does not parse is left out.
pub fn decode(v: &Value) -> FieldSet {
    let mut out = FieldSet::new();
    decode_into(v, &mut Vec::new(), &mut out);
    out
}

fn decode_into(v: &Value, path: &mut Path, out: &mut FieldSet) {
    let Some(m) = v.as_object() else { return };
    if (m.is_empty() || m.contains_key(".")) && !path.is_empty() {
        out.insert(path.clone());
    }
    for (k, child) in m {
        if k == "." {
            continue;
        }
        path.push(k.clone());
        decode_into(child, path, out);
        path.pop();
    }
}

// --------------------------------------------------------- entries

/// One `managedFields` entry, decoded.
#[derive(Debug, Clone)]
struct Entry {
    manager: String,
    operation: String,
    api_version: String,
    time: String,
    subresource: Option<String>,
    set: FieldSet,
}

fn entries_of(obj: &Value) -> Vec<Entry> {
    obj.pointer("/metadata/managedFields")
        .and_then(Value::as_array)
        .map(|a| {
            a.iter()
                .map(|e| Entry {
                    manager: e["manager"].as_str().unwrap_or("").to_string(),
                    operation: e["operation"].as_str().unwrap_or("").to_string(),
                    api_version: e["apiVersion"].as_str().unwrap_or("").to_string(),
                    time: e["time"].as_str().unwrap_or("").to_string(),
                    subresource: e["subresource"].as_str().map(str::to_string),
                    set: decode(&e["fieldsV1"]),
                })
                .collect()
        })
        .unwrap_or_default()
}

fn set_entries(obj: &mut Value, entries: &[Entry]) {
    let list: Vec<Value> = entries
        .iter()
        .filter(|e| !e.set.is_empty())
        .map(|e| {
            let mut m = json!({
                "manager": e.manager,
                "operation": e.operation,
                "apiVersion": e.api_version,
                "time": e.time,
                "fieldsType": "FieldsV1",
                "fieldsV1": encode(&e.set),
            });
            if let Some(s) = &e.subresource {
                m["subresource"] = json!(s);
            }
            m
        })
        .collect();
    if let Some(meta) = obj.get_mut("metadata").and_then(Value::as_object_mut) {
        if list.is_empty() {
            meta.remove("managedFields");
        } else {
            meta.insert("managedFields".into(), Value::Array(list));
        }
    }
}

/// Sets `new`'s `managedFields` for a write through the store: kept from
/// `old` for the sim's own writes and for an apply (whose body already
/// holds them), computed for a client's update (see the module's doc).
pub fn on_write(res: Resource, old: Option<&Value>, new: &mut Value) {
    match current_writer() {
        Some(Writer::Apply) => {}
        Some(Writer::Update(manager)) => record_update(res, old, new, &manager),
        None => {
            let stored = old.and_then(|o| o.pointer("/metadata/managedFields").cloned());
            if let Some(meta) = new.get_mut("metadata").and_then(Value::as_object_mut) {
                match stored {
                    Some(mf) => meta.insert("managedFields".into(), mf),
                    None => meta.remove("managedFields"),
                };
            }
        }
    }
}

fn record_update(res: Resource, old: Option<&Value>, new: &mut Value, manager: &str) {
    let mut entries = old.map(entries_of).unwrap_or_default();
    let new_set = full_set(new);
    let old_set = old.map(full_set).unwrap_or_default();
    let changed: FieldSet = new_set
        .iter()
        .filter(|p| {
            !old_set.contains(*p)
                || (is_leafish(new, p) && old.and_then(|o| get_at(o, p)) != get_at(new, p))
        })
        .cloned()
        .collect();
    let gone: FieldSet = old_set.difference(&new_set).cloned().collect();
    for e in &mut entries {
        e.set.retain(|p| !changed.contains(p) && !gone.contains(p));
    }
    if !changed.is_empty() {
        let api_version = res.info().api_version();
        let at = entries.iter().position(|e| {
            e.manager == manager && e.operation == "Update" && e.subresource.is_none()
        });
        let now = now_rfc3339();
        match at {
            Some(i) => {
                entries[i].set.extend(changed);
                entries[i].time = now;
                entries[i].api_version = api_version;
            }
            None => entries.push(Entry {
                manager: manager.to_string(),
                operation: "Update".into(),
                api_version,
                time: now,
                subresource: None,
                set: changed,
            }),
        }
    }
    set_entries(new, &entries);
}

/// A path whose value is compared (not a map or a keyed item, whose
/// changes are their children's).
fn is_leafish(obj: &Value, p: &[String]) -> bool {
    !matches!(get_at(obj, p), Some(Value::Object(m)) if !m.is_empty())
}

// --------------------------------------------------------- apply

/// Server-side apply of `applied` by `manager` onto `live` (`None`: the
/// object does not exist yet). Returns the object to store, its
/// `managedFields` set; or the 409 of the conflicts.
pub fn apply(
    res: Resource,
    live: Option<&Value>,
    applied: &Value,
    manager: &str,
    force: bool,
) -> Result<Value, StoreError> {
    let api_version = res.info().api_version();
    let s = applied_set(applied);
    let mut entries = live.map(entries_of).unwrap_or_default();
    let mut merged = match live {
        Some(l) => {
            // Conflicts: a field this applier sends that another manager
            // owns, with another value.
            let mut conflicts: BTreeMap<Path, Vec<(String, bool)>> = BTreeMap::new();
            for e in &entries {
                let mine = e.manager == manager && e.operation == "Apply";
                if mine {
                    continue;
                }
                for p in s.intersection(&e.set) {
                    // Values are compared at leaves; a map or a list item
                    // differs only through them.
                    if is_leafish(applied, p) && get_at(l, p) != get_at(applied, p) {
                        conflicts
                            .entry(p.clone())
                            .or_default()
                            .push((e.manager.clone(), e.operation == "Update"));
                    }
                }
            }
            if !conflicts.is_empty() && !force {
                return Err(conflict_error(res, &conflicts, &api_version));
            }
            if force {
                for e in &mut entries {
                    if !(e.manager == manager && e.operation == "Apply") {
                        e.set.retain(|p| !conflicts.contains_key(p));
                    }
                }
            }
            let mut m = l.clone();
            merge_into(&mut m, applied);
            // What this applier owned before and sends no more goes, unless
            // another manager owns it too.
            let before: FieldSet = entries
                .iter()
                .filter(|e| e.manager == manager && e.operation == "Apply")
                .flat_map(|e| e.set.iter().cloned())
                .collect();
            let others: FieldSet = entries
                .iter()
                .filter(|e| !(e.manager == manager && e.operation == "Apply"))
                .flat_map(|e| e.set.iter().cloned())
                .collect();
            for p in before.difference(&s) {
                if !others.contains(p) {
                    remove_at(&mut m, p);
                }
            }
            m
        }
        None => applied.clone(),
    };
    entries.retain(|e| !(e.manager == manager && e.operation == "Apply"));
    entries.push(Entry {
        manager: manager.to_string(),
        operation: "Apply".into(),
        api_version,
        time: now_rfc3339(),
        subresource: None,
        set: s,
    });
    set_entries(&mut merged, &entries);
    Ok(merged)
}

/// Upstream's message: `Apply failed with 1 conflict: conflict with "m":
/// .data.a`, or for several, per manager in name order, `Apply failed with
/// 2 conflicts: conflicts with "m":\n- .data.a\nconflicts with "n":\n-
/// .data.a`; an Update manager is named `"m" using v1`.
fn conflict_error(
    res: Resource,
    conflicts: &BTreeMap<Path, Vec<(String, bool)>>,
    api_version: &str,
) -> StoreError {
    let version = api_version.rsplit('/').next().unwrap_or(api_version);
    let who = |m: &str, update: bool| {
        if update {
            format!("{m:?} using {version}")
        } else {
            format!("{m:?}")
        }
    };
    // By manager, in the order first met; each with its fields.
    let mut by: Vec<(String, Vec<String>)> = Vec::new();
    let mut causes = Vec::new();
    let mut n = 0;
    for (p, owners) in conflicts {
        let field = dotted(p);
        for (m, update) in owners {
            n += 1;
            let w = who(m, *update);
            causes.push(json!({
                "reason": "FieldManagerConflict",
                "message": format!("conflict with {w}"),
                "field": field,
            }));
            match by.iter_mut().find(|(x, _)| *x == w) {
                Some((_, fs)) => fs.push(field.clone()),
                None => by.push((w, vec![field.clone()])),
            }
        }
    }
    // Managers in name order, each with its fields in order.
    by.sort();
    let message = if n == 1 {
        let (w, fs) = &by[0];
        format!("Apply failed with 1 conflict: conflict with {w}: {}", fs[0])
    } else {
        let parts: Vec<String> = by
            .iter()
            .map(|(w, fs)| {
                let lines: Vec<String> = fs.iter().map(|f| format!("- {f}")).collect();
                format!("conflicts with {w}:\n{}", lines.join("\n"))
            })
            .collect();
        format!("Apply failed with {n} conflicts: {}", parts.join("\n"))
    };
    StoreError::ApplyConflict {
        resource: res,
        message,
        causes,
    }
}

/// `.data.a`, `.spec.containers[name="c"].image`: a path as upstream
/// prints it in a conflict.
fn dotted(p: &[String]) -> String {
    let mut s = String::new();
    for e in p {
        if let Some(f) = e.strip_prefix("f:") {
            s.push('.');
            s.push_str(f);
        } else if let Some(k) = e.strip_prefix("k:") {
            let m: Map<String, Value> = serde_json::from_str(k).unwrap_or_default();
            let kv: Vec<String> = m.iter().map(|(k, v)| format!("{k}={v}")).collect();
            s.push_str(&format!("[{}]", kv.join(",")));
        } else if let Some(v) = e.strip_prefix("v:") {
            s.push_str(&format!("[={v}]"));
        }
    }
    s
}

/// Merges what an applier sent into the live object: maps field by field,
/// keyed lists item by item, sets by union, everything else replaced.
fn merge_into(live: &mut Value, applied: &Value) {
    let (Value::Object(l), Value::Object(a)) = (&mut *live, applied) else {
        *live = applied.clone();
        return;
    };
    for (k, av) in a {
        let atomic = matches!(av, Value::Object(am)
            if is_atomic_struct(&[field_key(k)], am));
        match (l.get_mut(k), av) {
            (Some(lv @ Value::Object(_)), Value::Object(_)) if !atomic => merge_into(lv, av),
            (Some(Value::Array(li)), Value::Array(ai)) => merge_list(k, li, ai),
            _ => {
                l.insert(k.clone(), av.clone());
            }
        }
    }
}

fn merge_list(name: &str, live: &mut Vec<Value>, applied: &[Value]) {
    let mut all = live.clone();
    all.extend(applied.iter().cloned());
    match list_kind(name, &all) {
        ListKind::Atomic => *live = applied.to_vec(),
        ListKind::Set => {
            for a in applied {
                if !live.contains(a) {
                    live.push(a.clone());
                }
            }
        }
        ListKind::Keyed(k) => {
            for a in applied {
                match live.iter_mut().find(|l| l.get(k) == a.get(k)) {
                    Some(l) => merge_into(l, a),
                    None => live.push(a.clone()),
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cm(data: Value) -> Value {
        json!({"apiVersion": "v1", "kind": "ConfigMap",
               "metadata": {"name": "c", "namespace": "d"}, "data": data})
    }

    fn set_of(v: Value) -> FieldSet {
        decode(&v)
    }

    #[test]
    fn fields_v1_round_trips_with_self_markers() {
        let v = json!({"f:data": {".": {}, "f:k": {}},
                       "f:spec": {"f:containers": {"k:{\"name\":\"c\"}": {".": {}, "f:image": {}, "f:name": {}}}}});
        let s = decode(&v);
        assert!(s.contains(&vec!["f:data".to_string()]));
        assert!(s.contains(&vec!["f:data".to_string(), "f:k".to_string()]));
        assert_eq!(encode(&s), v);
    }

    #[test]
    fn applied_and_full_sets() {
        let pod = json!({"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": "p", "labels": {"a": "1"}, "finalizers": ["x"]},
            "spec": {"containers": [{"name": "c", "image": "i", "args": ["1", "2"]}]},
            "status": {"phase": "Running"}});
        assert_eq!(
            encode(&applied_set(&pod)),
            json!({"f:metadata": {"f:labels": {"f:a": {}}, "f:finalizers": {"v:\"x\"": {}}},
                   "f:spec": {"f:containers": {"k:{\"name\":\"c\"}": {
                       ".": {}, "f:args": {}, "f:image": {}, "f:name": {}}}}})
        );
        assert_eq!(
            encode(&full_set(&pod)),
            json!({"f:metadata": {"f:labels": {".": {}, "f:a": {}},
                                  "f:finalizers": {"v:\"x\"": {}}},
                   "f:spec": {"f:containers": {"k:{\"name\":\"c\"}": {
                       ".": {}, "f:args": {}, "f:image": {}, "f:name": {}}}}})
        );
    }

    #[test]
    fn apply_conflicts_force_and_removal_as_upstream() {
        let res = Resource::ConfigMap;
        let one = apply(res, None, &cm(json!({"a": "1", "b": "2"})), "m1", false).unwrap();
        assert_eq!(
            one["metadata"]["managedFields"][0]["fieldsV1"],
            json!({"f:data": {"f:a": {}, "f:b": {}}})
        );
        let e = apply(
            res,
            Some(&one),
            &cm(json!({"a": "9", "b": "8"})),
            "m2",
            false,
        )
        .unwrap_err();
        assert_eq!(
            e.message(),
            "Apply failed with 2 conflicts: conflicts with \"m1\":\n- .data.a\n- .data.b"
        );
        let e = apply(res, Some(&one), &cm(json!({"a": "9"})), "m2", false).unwrap_err();
        assert_eq!(
            e.message(),
            "Apply failed with 1 conflict: conflict with \"m1\": .data.a"
        );
        // The same value is shared, not a conflict.
        let two = apply(
            res,
            Some(&one),
            &cm(json!({"a": "1", "c": "3"})),
            "m2",
            false,
        )
        .unwrap();
        assert_eq!(two["data"], json!({"a": "1", "b": "2", "c": "3"}));
        // Force takes the field over.
        let three = apply(
            res,
            Some(&two),
            &cm(json!({"a": "7", "c": "3"})),
            "m2",
            true,
        )
        .unwrap();
        let sets: Vec<(String, Value)> = three["metadata"]["managedFields"]
            .as_array()
            .unwrap()
            .iter()
            .map(|e| {
                (
                    e["manager"].as_str().unwrap().to_string(),
                    e["fieldsV1"].clone(),
                )
            })
            .collect();
        assert_eq!(
            sets,
            [
                ("m1".to_string(), json!({"f:data": {"f:b": {}}})),
                ("m2".to_string(), json!({"f:data": {"f:a": {}, "f:c": {}}}))
            ]
        );
        // m1 sends no b: b goes (nobody else owns it); a stays (m2's).
        let four = apply(res, Some(&three), &cm(json!({})), "m1", false).unwrap();
        assert_eq!(four["data"], json!({"a": "7", "c": "3"}));
        assert_eq!(
            set_of(four["metadata"]["managedFields"][1]["fieldsV1"].clone()),
            set_of(json!({"f:data": {}}))
        );
    }

    #[test]
    fn updates_take_what_they_change_and_conflict_with_appliers() {
        let res = Resource::ConfigMap;
        let created = with_writer(Writer::Update("kubectl-create".into()), || {
            let mut o = cm(json!({"k": "v"}));
            on_write(res, None, &mut o);
            o
        });
        assert_eq!(
            created["metadata"]["managedFields"][0]["fieldsV1"],
            json!({"f:data": {".": {}, "f:k": {}}})
        );
        let e = apply(res, Some(&created), &cm(json!({"k": "w"})), "m", false).unwrap_err();
        assert_eq!(
            e.message(),
            "Apply failed with 1 conflict: conflict with \"kubectl-create\" using v1: .data.k"
        );
        // An update that changes k takes it from the applier.
        let applied = apply(res, Some(&created), &cm(json!({"k": "w"})), "m", true).unwrap();
        let mut patched = applied.clone();
        patched["data"]["k"] = json!("x");
        with_writer(Writer::Update("editor".into()), || {
            on_write(res, Some(&applied), &mut patched);
        });
        let mf = patched["metadata"]["managedFields"].as_array().unwrap();
        assert!(mf.iter().all(|e| e["manager"] != "m"), "{mf:?}");
        assert!(mf
            .iter()
            .any(|e| e["manager"] == "editor" && e["fieldsV1"] == json!({"f:data": {"f:k": {}}})));
        // The sim's own writes keep what is stored.
        let mut own = patched.clone();
        own["metadata"]
            .as_object_mut()
            .unwrap()
            .remove("managedFields");
        on_write(res, Some(&patched), &mut own);
        assert_eq!(
            own["metadata"]["managedFields"],
            patched["metadata"]["managedFields"]
        );
    }

    #[test]
    fn managers_from_user_agents() {
        assert_eq!(update_manager(Some("m"), Some("curl/8")), "m");
        assert_eq!(
            update_manager(None, Some("kubectl/v1.32 (linux)")),
            "kubectl"
        );
        assert_eq!(update_manager(None, None), "unknown");
        assert_eq!(update_manager(Some(""), Some("")), "unknown");
    }
}
