//! The three PATCH flavours, applied to a JSON object: RFC 7386 merge patch,
//! RFC 6902 JSON patch, and an approximation of Kubernetes' strategic merge
//! patch. Pure functions: the store runs them under its write lock and then
//! sends the result through its normal update path (validation, RV check).
//!
//! # The strategic merge patch approximation
//!
//! Upstream drives strategic merge from Go struct tags. Here it is a merge
//! patch (objects merge, `null` deletes, scalars replace) with these
//! exceptions, which are what `kubectl apply`, `edit`, `set image`, `label`,
//! `annotate` and `scale` rely on:
//! - lists whose field name has a known merge key are merged element by
//!   element on that key (`containers`/`initContainers`/
//!   `ephemeralContainers`/`volumes`/`env`/`imagePullSecrets` by `name`,
//!   container `ports` by `containerPort`, Service `ports` by `port`,
//!   `volumeMounts` by `mountPath`, `conditions` by `type`,
//!   `ownerReferences` by `uid`, `hostAliases`/`podIPs` by `ip`, …); an
//!   element not in the live list is appended;
//! - `finalizers` is merged as a set;
//! - every other list is replaced whole (as upstream's atomic lists are);
//! - directives: `$patch: replace` (on a map or as a list element) replaces,
//!   `$patch: delete` removes a map or a keyed list element, `$retainKeys`
//!   drops map keys not listed, `$deleteFromPrimitiveList/<field>` removes
//!   values, `$setElementOrder/<field>` reorders the merged list (elements it
//!   does not name keep their relative order after the named ones). Unknown
//!   `$` keys are dropped so they never reach the stored object.
//!
//! The merge key is chosen by field name alone, not by the object's schema;
//! a field sharing a name with a keyed list (say a CRD's `containers`) would be
//! merged by key here — harmless for the kinds the sim serves.

use serde_json::{Map, Value};

/// The Content-Type of a PATCH.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PatchType {
    /// `application/merge-patch+json`
    Merge,
    /// `application/json-patch+json`
    Json,
    /// `application/strategic-merge-patch+json`
    StrategicMerge,
}

impl PatchType {
    /// Maps a request Content-Type (parameters ignored) to a patch type.
    pub fn from_content_type(ct: &str) -> Option<PatchType> {
        match ct.split(';').next().unwrap_or("").trim() {
            "application/merge-patch+json" => Some(PatchType::Merge),
            "application/json-patch+json" => Some(PatchType::Json),
            "application/strategic-merge-patch+json" => Some(PatchType::StrategicMerge),
            _ => None,
        }
    }
}

/// Why a patch could not be applied.
#[derive(Debug, Clone, PartialEq)]
pub enum PatchError {
    /// 400: the patch itself is malformed.
    BadRequest(String),
    /// 422: a well-formed JSON patch that does not apply (failed `test`,
    /// missing path), as upstream answers.
    Unprocessable(String),
}

/// Applies a patch of the given type to `target`, returning the result.
pub fn apply(pt: PatchType, target: &Value, patch: &[u8]) -> Result<Value, PatchError> {
    let p: Value = serde_json::from_slice(patch)
        .map_err(|e| PatchError::BadRequest(format!("error decoding patch: {e}")))?;
    let mut out = target.clone();
    match pt {
        PatchType::Merge => {
            if !p.is_object() {
                return Err(PatchError::BadRequest(
                    "merge patch must be a JSON object".into(),
                ));
            }
            merge_patch(&mut out, &p);
        }
        PatchType::StrategicMerge => {
            let Some(pm) = p.as_object() else {
                return Err(PatchError::BadRequest(
                    "strategic merge patch must be a JSON object".into(),
                ));
            };
            if !out.is_object() {
                out = Value::Object(Map::new());
            }
            if let Some(m) = out.as_object_mut() {
                smp_map(m, pm);
            }
        }
        PatchType::Json => json_patch(&mut out, &p)?,
    }
    Ok(out)
}

// ---------------------------------------------------------------- RFC 7386

/// RFC 7386 JSON merge patch, in place.
pub fn merge_patch(target: &mut Value, patch: &Value) {
    let Some(pm) = patch.as_object() else {
        *target = patch.clone();
        return;
    };
    if !target.is_object() {
        *target = Value::Object(Map::new());
    }
    let Some(tm) = target.as_object_mut() else {
        return;
    };
    for (k, v) in pm {
        if v.is_null() {
            tm.remove(k);
        } else {
            merge_patch(tm.entry(k.clone()).or_insert(Value::Null), v);
        }
    }
}

// ---------------------------------------------------------------- RFC 6902

fn parse_pointer(p: &str) -> Result<Vec<String>, PatchError> {
    if p.is_empty() {
        return Ok(vec![]);
    }
    // Upstream's json-patch (v4) splits the path on `/` and skips the
    // first part, which it takes for the empty one before a leading `/`:
    // `data/x` is read as `/x`, and a path with no `/` names nothing.
    let segs: Vec<&str> = p.split('/').collect();
    if segs.len() < 2 {
        return Err(PatchError::Unprocessable(format!(
            "doc is missing path: {p:?}: missing value"
        )));
    }
    Ok(segs[1..]
        .iter()
        .map(|s| s.replace("~1", "/").replace("~0", "~"))
        .collect())
}

fn missing(op: &str, path: &str) -> PatchError {
    PatchError::Unprocessable(format!(
        "{op} operation does not apply: doc is missing path: {path:?}: missing value"
    ))
}

fn array_index(tok: &str, len: usize, allow_end: bool) -> Option<usize> {
    if tok == "-" {
        return allow_end.then_some(len);
    }
    if tok.is_empty()
        || (tok.len() > 1 && tok.starts_with('0'))
        || !tok.bytes().all(|b| b.is_ascii_digit())
    {
        return None;
    }
    let i: usize = tok.parse().ok()?;
    let max = if allow_end {
        len
    } else {
        len.saturating_sub(1)
    };
    (i <= max && (allow_end || len > 0)).then_some(i)
}

fn get_path<'a>(doc: &'a Value, toks: &[String]) -> Option<&'a Value> {
    let mut cur = doc;
    for t in toks {
        cur = match cur {
            Value::Object(m) => m.get(t)?,
            Value::Array(a) => a.get(array_index(t, a.len(), false)?)?,
            _ => return None,
        };
    }
    Some(cur)
}

fn parent_mut<'a>(doc: &'a mut Value, toks: &[String]) -> Option<&'a mut Value> {
    let mut cur = doc;
    for t in &toks[..toks.len().saturating_sub(1)] {
        cur = match cur {
            Value::Object(m) => m.get_mut(t)?,
            Value::Array(a) => {
                let i = array_index(t, a.len(), false)?;
                a.get_mut(i)?
            }
            _ => return None,
        };
    }
    Some(cur)
}

fn add(doc: &mut Value, path: &str, toks: &[String], v: Value) -> Result<(), PatchError> {
    let Some(last) = toks.last() else {
        *doc = v;
        return Ok(());
    };
    match parent_mut(doc, toks) {
        Some(Value::Object(m)) => {
            m.insert(last.clone(), v);
            Ok(())
        }
        Some(Value::Array(a)) => {
            let i = array_index(last, a.len(), true).ok_or_else(|| missing("add", path))?;
            a.insert(i, v);
            Ok(())
        }
        _ => Err(missing("add", path)),
    }
}

fn remove(doc: &mut Value, op: &str, path: &str, toks: &[String]) -> Result<Value, PatchError> {
    let Some(last) = toks.last() else {
        return Err(PatchError::Unprocessable(format!(
            "{op} operation does not apply: cannot remove the whole document"
        )));
    };
    match parent_mut(doc, toks) {
        Some(Value::Object(m)) => m.remove(last).ok_or_else(|| missing(op, path)),
        Some(Value::Array(a)) => {
            let i = array_index(last, a.len(), false).ok_or_else(|| missing(op, path))?;
            Ok(a.remove(i))
        }
        _ => Err(missing(op, path)),
    }
}

/// RFC 6902 JSON patch, in place. Malformed operations are `BadRequest`;
/// operations that do not apply are `Unprocessable` (upstream's 422).
/// All-or-nothing: on error `doc` is left as it was.
pub fn json_patch(doc: &mut Value, ops: &Value) -> Result<(), PatchError> {
    // Upstream decodes the operations into a Go slice: `null` is no
    // operation at all, anything else but an array its decoder's error.
    let ops = match ops {
        Value::Array(a) => a.as_slice(),
        Value::Null => &[],
        other => {
            let what = match other {
                Value::Object(_) => "object",
                Value::String(_) => "string",
                Value::Number(_) => "number",
                _ => "bool",
            };
            return Err(PatchError::BadRequest(format!(
                "error decoding patch: json: cannot unmarshal {what} into Go value of type []handlers.jsonPatchOp"
            )));
        }
    };
    let mut work = doc.clone();
    for op in ops {
        // Upstream applies what it decoded: an operation with no `op` is of
        // kind "unknown" (422 like any other that does not apply), one with
        // no `value` adds or replaces with null.
        let field = |f: &str| -> Result<&str, PatchError> {
            op.get(f).and_then(Value::as_str).ok_or_else(|| {
                PatchError::Unprocessable(format!("operation {op} is missing {f:?}"))
            })
        };
        let value =
            || -> Result<Value, PatchError> { Ok(op.get("value").cloned().unwrap_or(Value::Null)) };
        let kind = op.get("op").and_then(Value::as_str).unwrap_or("unknown");
        let path = field("path")?;
        let toks = parse_pointer(path)?;
        match kind {
            "add" => add(&mut work, path, &toks, value()?)?,
            "remove" => {
                remove(&mut work, "remove", path, &toks)?;
            }
            "replace" => {
                let v = value()?;
                let slot = if toks.is_empty() {
                    Some(&mut work)
                } else {
                    match parent_mut(&mut work, &toks) {
                        // Upstream's json-patch (v4) replaces a key an object
                        // lacks as if it were there: it sets it.
                        Some(Value::Object(m)) => toks
                            .last()
                            .map(|l| m.entry(l.clone()).or_insert(Value::Null)),
                        Some(Value::Array(a)) => {
                            let i = toks.last().and_then(|l| array_index(l, a.len(), false));
                            i.and_then(|i| a.get_mut(i))
                        }
                        _ => None,
                    }
                };
                match slot {
                    Some(s) => *s = v,
                    None => {
                        return Err(PatchError::Unprocessable(format!(
                            "replace operation does not apply: doc is missing key: {path}: missing value"
                        )))
                    }
                }
            }
            "move" | "copy" => {
                let from = field("from")?;
                let ftoks = parse_pointer(from)?;
                let v = if kind == "move" {
                    if toks.len() > ftoks.len() && toks[..ftoks.len()] == ftoks[..] {
                        return Err(PatchError::Unprocessable(format!(
                            "move operation does not apply: cannot move {from:?} into its own child {path:?}"
                        )));
                    }
                    remove(&mut work, kind, from, &ftoks)?
                } else {
                    get_path(&work, &ftoks)
                        .cloned()
                        .ok_or_else(|| missing(kind, from))?
                };
                add(&mut work, path, &toks, v)?;
            }
            "test" => {
                let v = value()?;
                if get_path(&work, &toks) != Some(&v) {
                    return Err(PatchError::Unprocessable(format!(
                        "testing value {path} failed: test failed"
                    )));
                }
            }
            other => {
                return Err(PatchError::Unprocessable(format!(
                    "Unexpected kind: {other}"
                )))
            }
        }
    }
    *doc = work;
    Ok(())
}

// ---------------------------------------------------------------- strategic merge

/// The merge key of a list field, by field name; `None`: replace the list.
pub(crate) fn merge_key(field: &str, live: &[Value], patch: &[Value]) -> Option<&'static str> {
    Some(match field {
        "containers"
        | "initContainers"
        | "ephemeralContainers"
        | "volumes"
        | "env"
        | "imagePullSecrets"
        | "resourceClaims"
        | "schedulingGates" => "name",
        "volumeMounts" => "mountPath",
        "volumeDevices" => "devicePath",
        "conditions" => "type",
        "ownerReferences" => "uid",
        "hostAliases" | "podIPs" => "ip",
        "readinessGates" => "conditionType",
        "topologySpreadConstraints" => "topologyKey",
        "ports" => {
            let has_cp = |l: &[Value]| l.iter().any(|e| e.get("containerPort").is_some());
            if has_cp(live) || has_cp(patch) {
                "containerPort"
            } else {
                "port"
            }
        }
        _ => return None,
    })
}

/// Primitive lists merged as sets.
fn is_set_list(field: &str) -> bool {
    field == "finalizers"
}

/// Removes `$…` directive keys recursively (from values being inserted).
fn strip_directives(v: &Value) -> Value {
    match v {
        Value::Object(m) => {
            if m.get("$patch").and_then(Value::as_str) == Some("delete") {
                return Value::Null;
            }
            Value::Object(
                m.iter()
                    .filter(|(k, _)| !k.starts_with('$'))
                    .map(|(k, v)| (k.clone(), strip_directives(v)))
                    .collect(),
            )
        }
        Value::Array(a) => Value::Array(
            a.iter()
                .filter(|e| !is_directive_element(e))
                .map(strip_directives)
                .collect(),
        ),
        other => other.clone(),
    }
}

fn is_directive_element(e: &Value) -> bool {
    e.as_object()
        .is_some_and(|m| m.contains_key("$patch") && m.len() == 1)
}

fn smp_map(target: &mut Map<String, Value>, patch: &Map<String, Value>) {
    if patch.get("$patch").and_then(Value::as_str) == Some("replace") {
        if let Value::Object(m) = strip_directives(&Value::Object(patch.clone())) {
            *target = m;
        }
        return;
    }
    let mut orders = Vec::new();
    for (k, v) in patch {
        if let Some(field) = k.strip_prefix("$setElementOrder/") {
            orders.push((field.to_string(), v));
            continue;
        }
        if let Some(field) = k.strip_prefix("$deleteFromPrimitiveList/") {
            if let (Some(Value::Array(live)), Some(del)) = (target.get_mut(field), v.as_array()) {
                live.retain(|x| !del.contains(x));
            }
            continue;
        }
        if k.starts_with('$') {
            continue;
        }
        match v {
            Value::Null => {
                target.remove(k);
            }
            Value::Object(pm) => {
                if pm.get("$patch").and_then(Value::as_str) == Some("delete") {
                    target.remove(k);
                    continue;
                }
                match target.get_mut(k) {
                    Some(Value::Object(tm)) => smp_map(tm, pm),
                    _ => {
                        let mut fresh = Map::new();
                        smp_map(&mut fresh, pm);
                        target.insert(k.clone(), Value::Object(fresh));
                    }
                }
            }
            Value::Array(pa) => {
                let live = match target.remove(k) {
                    Some(Value::Array(a)) => a,
                    _ => Vec::new(),
                };
                target.insert(k.clone(), Value::Array(smp_list(k, live, pa)));
            }
            other => {
                target.insert(k.clone(), other.clone());
            }
        }
    }
    for (field, order) in orders {
        if let (Some(Value::Array(list)), Some(order)) = (target.get_mut(&field), order.as_array())
        {
            reorder(&field, list, order);
        }
    }
    if let Some(retain) = patch.get("$retainKeys").and_then(Value::as_array) {
        let keep: Vec<&str> = retain.iter().filter_map(Value::as_str).collect();
        target.retain(|k, _| keep.contains(&k.as_str()));
    }
}

fn smp_list(field: &str, mut live: Vec<Value>, patch: &[Value]) -> Vec<Value> {
    if patch
        .iter()
        .any(|e| e.get("$patch").and_then(Value::as_str) == Some("replace"))
    {
        return patch
            .iter()
            .filter(|e| !is_directive_element(e))
            .map(strip_directives)
            .collect();
    }
    if is_set_list(field) {
        for v in patch {
            if !live.contains(v) {
                live.push(v.clone());
            }
        }
        return live;
    }
    let Some(key) = merge_key(field, &live, patch) else {
        return patch
            .iter()
            .filter(|e| !is_directive_element(e))
            .map(strip_directives)
            .collect();
    };
    for pe in patch {
        let Some(pm) = pe.as_object() else {
            live.push(pe.clone());
            continue;
        };
        let kv = pm.get(key);
        let pos = kv.and_then(|kv| live.iter().position(|l| l.get(key) == Some(kv)));
        if pm.get("$patch").and_then(Value::as_str) == Some("delete") {
            if let Some(kv) = kv {
                live.retain(|l| l.get(key) != Some(kv));
            }
            continue;
        }
        match pos.and_then(|i| live.get_mut(i)) {
            Some(Value::Object(lm)) => smp_map(lm, pm),
            _ => {
                let mut fresh = Map::new();
                smp_map(&mut fresh, pm);
                live.push(Value::Object(fresh));
            }
        }
    }
    live
}

/// `$setElementOrder`: elements named in `order` first, in that order, then
/// the rest in their current relative order.
fn reorder(field: &str, list: &mut Vec<Value>, order: &[Value]) {
    let key = merge_key(field, list, order);
    let ident = |v: &Value| -> Value {
        match key {
            Some(k) => v.get(k).cloned().unwrap_or(Value::Null),
            None => v.clone(),
        }
    };
    let wanted: Vec<Value> = order.iter().map(ident).collect();
    let mut items: Vec<(usize, usize, Value)> = std::mem::take(list)
        .into_iter()
        .enumerate()
        .map(|(i, v)| {
            let rank = wanted
                .iter()
                .position(|w| *w == ident(&v))
                .unwrap_or(usize::MAX);
            (rank, i, v)
        })
        .collect();
    items.sort_by_key(|(rank, i, _)| (*rank, *i));
    *list = items.into_iter().map(|(_, _, v)| v).collect();
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn ap(pt: PatchType, t: Value, p: Value) -> Result<Value, PatchError> {
        apply(pt, &t, p.to_string().as_bytes())
    }

    #[test]
    fn merge_patch_rfc7386_examples() {
        // The test cases of RFC 7386 appendix A.
        let cases = [
            (json!({"a":"b"}), json!({"a":"c"}), json!({"a":"c"})),
            (json!({"a":"b"}), json!({"b":"c"}), json!({"a":"b","b":"c"})),
            (json!({"a":"b"}), json!({"a":null}), json!({})),
            (
                json!({"a":"b","b":"c"}),
                json!({"a":null}),
                json!({"b":"c"}),
            ),
            (json!({"a":["b"]}), json!({"a":"c"}), json!({"a":"c"})),
            (json!({"a":"c"}), json!({"a":["b"]}), json!({"a":["b"]})),
            (
                json!({"a":{"b":"c"}}),
                json!({"a":{"b":"d","c":null}}),
                json!({"a":{"b":"d"}}),
            ),
            (json!({"a":[{"b":"c"}]}), json!({"a":[1]}), json!({"a":[1]})),
            (json!({"e":null}), json!({"a":1}), json!({"e":null,"a":1})),
            (
                json!({}),
                json!({"a":{"bb":{"ccc":null}}}),
                json!({"a":{"bb":{}}}),
            ),
        ];
        for (t, p, want) in cases {
            assert_eq!(ap(PatchType::Merge, t, p).unwrap(), want);
        }
        assert!(matches!(
            ap(PatchType::Merge, json!({}), json!([1])),
            Err(PatchError::BadRequest(_))
        ));
        assert!(matches!(
            apply(PatchType::Merge, &json!({}), b"{nope"),
            Err(PatchError::BadRequest(_))
        ));
    }

    #[test]
    fn json_patch_ops() {
        let doc = json!({"metadata": {"labels": {"a/b": "1", "c~d": "2"}}, "list": [1, 2, 3]});
        let r = ap(
            PatchType::Json,
            doc.clone(),
            json!([
                {"op": "add", "path": "/metadata/labels/new", "value": "x"},
                {"op": "remove", "path": "/metadata/labels/a~1b"},
                {"op": "replace", "path": "/metadata/labels/c~0d", "value": "3"},
                {"op": "add", "path": "/list/-", "value": 4},
                {"op": "add", "path": "/list/0", "value": 0},
                {"op": "move", "from": "/list/1", "path": "/moved"},
                {"op": "copy", "from": "/moved", "path": "/copied"},
                {"op": "test", "path": "/copied", "value": 1}
            ]),
        )
        .unwrap();
        assert_eq!(
            r,
            json!({"metadata": {"labels": {"new": "x", "c~d": "3"}}, "list": [0, 2, 3, 4], "moved": 1, "copied": 1})
        );
        let e = ap(
            PatchType::Json,
            doc.clone(),
            json!([{"op": "test", "path": "/list/0", "value": 9}]),
        )
        .unwrap_err();
        assert_eq!(
            e,
            PatchError::Unprocessable("testing value /list/0 failed: test failed".into())
        );
        for bad in [
            json!([{"op": "remove", "path": "/nope"}]),
            json!([{"op": "replace", "path": "/list/9", "value": 1}]),
            json!([{"op": "add", "path": "/a/b/c", "value": 1}]),
            json!([{"op": "add", "path": "/list/9", "value": 1}]),
            json!([{"op": "remove", "path": "/list/01"}]),
            json!([{"op": "move", "from": "/metadata", "path": "/metadata/x"}]),
        ] {
            assert!(
                matches!(
                    ap(PatchType::Json, doc.clone(), bad.clone()),
                    Err(PatchError::Unprocessable(_))
                ),
                "{bad}"
            );
        }
        // Only what does not decode is a 400 (upstream's words); what
        // decodes and does not apply is a 422.
        assert_eq!(
            ap(PatchType::Json, doc.clone(), json!({"op": "add"})),
            Err(PatchError::BadRequest(
                "error decoding patch: json: cannot unmarshal object into Go value of type []handlers.jsonPatchOp".into()
            ))
        );
        for bad in [
            json!([{"op": "frob", "path": "/a"}]),
            json!([{"path": "/a"}]),
            json!([{"op": "add", "path": "a", "value": 1}]),
        ] {
            assert!(
                matches!(
                    ap(PatchType::Json, doc.clone(), bad.clone()),
                    Err(PatchError::Unprocessable(_))
                ),
                "{bad}"
            );
        }
        // Upstream's json-patch v4 quirks: a missing value is null, a path
        // without a leading `/` loses its first part, a replaced key the
        // object lacks is set, and null is no patch at all.
        assert_eq!(
            ap(
                PatchType::Json,
                json!({"m": {}}),
                json!([{"op": "add", "path": "/m/v"}, {"op": "add", "path": "m/x", "value": 1},
                       {"op": "replace", "path": "/m/r", "value": 2}])
            ),
            Ok(json!({"m": {"v": null, "r": 2}, "x": 1}))
        );
        assert_eq!(
            ap(PatchType::Json, json!({"a": 1}), json!(null)),
            Ok(json!({"a": 1}))
        );
        // Whole-document replace and root test.
        assert_eq!(
            ap(
                PatchType::Json,
                json!({"a": 1}),
                json!([{"op": "replace", "path": "", "value": {"b": 2}}])
            )
            .unwrap(),
            json!({"b": 2})
        );
    }

    fn deploy() -> Value {
        json!({"spec": {"replicas": 1, "template": {"spec": {"containers": [
            {"name": "web", "image": "nginx:1", "ports": [{"containerPort": 80, "protocol": "TCP"}],
             "env": [{"name": "A", "value": "1"}, {"name": "B", "value": "2"}]},
            {"name": "side", "image": "busybox"}
        ]}}}})
    }

    /// A Deployment's `spec.template.spec.containers`.
    fn containers(d: &Value) -> &Vec<Value> {
        d.pointer("/spec/template/spec/containers")
            .unwrap()
            .as_array()
            .unwrap()
    }

    #[test]
    fn strategic_merges_containers_by_name() {
        // kubectl set image
        let r = ap(
            PatchType::StrategicMerge,
            deploy(),
            json!({"spec": {"template": {"spec": {"containers": [{"name": "web", "image": "nginx:2"}]}}}}),
        )
        .unwrap();
        let cs = containers(&r);
        assert_eq!(cs.len(), 2);
        assert_eq!(cs[0]["image"], "nginx:2");
        assert_eq!(cs[0]["env"].as_array().unwrap().len(), 2);
        assert_eq!(cs[1]["image"], "busybox");
        // env merged by name, ports by containerPort, delete directive.
        let r = ap(
            PatchType::StrategicMerge,
            deploy(),
            json!({"spec": {"template": {"spec": {"containers": [
                {"name": "web", "env": [{"name": "B", "value": "3"}, {"name": "C", "value": "4"}, {"name": "A", "$patch": "delete"}],
                 "ports": [{"containerPort": 8080}]},
                {"name": "side", "$patch": "delete"}
            ]}}}}),
        )
        .unwrap();
        let cs = containers(&r);
        assert_eq!(cs.len(), 1);
        assert_eq!(
            cs[0]["env"],
            json!([{"name": "B", "value": "3"}, {"name": "C", "value": "4"}])
        );
        assert_eq!(cs[0]["ports"].as_array().unwrap().len(), 2);
    }

    #[test]
    fn strategic_kubectl_apply_shape() {
        // What kubectl apply sends after the user swapped container order and
        // changed an image.
        let patch = json!({
            "metadata": {"annotations": {"kubectl.kubernetes.io/last-applied-configuration": "{\"x\":1}\n"}},
            "spec": {"replicas": 3, "template": {"spec": {
                "$setElementOrder/containers": [{"name": "side"}, {"name": "web"}],
                "containers": [{"image": "nginx:3", "name": "web"}]
            }}}
        });
        let r = ap(PatchType::StrategicMerge, deploy(), patch).unwrap();
        assert_eq!(r["spec"]["replicas"], 3);
        let cs = containers(&r);
        assert_eq!(cs[0]["name"], "side");
        assert_eq!(cs[1]["name"], "web");
        assert_eq!(cs[1]["image"], "nginx:3");
        assert!(r
            .pointer("/spec/template/spec/$setElementOrder~1containers")
            .is_none());
        assert!(
            r["metadata"]["annotations"]["kubectl.kubernetes.io/last-applied-configuration"]
                .is_string()
        );
        assert!(!r.to_string().contains('$'));
    }

    #[test]
    fn strategic_directives() {
        let t = json!({"spec": {"strategy": {"type": "RollingUpdate", "rollingUpdate": {"maxSurge": 1}},
                        "args": ["a", "b"], "finalizers": ["x"]},
                       "metadata": {"finalizers": ["a", "b"], "labels": {"k": "v"}}});
        let r = ap(
            PatchType::StrategicMerge,
            t.clone(),
            json!({"spec": {"strategy": {"$retainKeys": ["type"], "type": "Recreate"}, "args": ["c"]},
                   "metadata": {"finalizers": ["c"], "$deleteFromPrimitiveList/finalizers": ["a"], "labels": {"$patch": "replace", "n": "1"}}}),
        )
        .unwrap();
        assert_eq!(r["spec"]["strategy"], json!({"type": "Recreate"}));
        assert_eq!(r["spec"]["args"], json!(["c"]));
        assert_eq!(r["metadata"]["finalizers"], json!(["b", "c"]));
        assert_eq!(r["metadata"]["labels"], json!({"n": "1"}));
        let r = ap(
            PatchType::StrategicMerge,
            t.clone(),
            json!({"metadata": {"labels": {"$patch": "delete"}}, "spec": null}),
        )
        .unwrap();
        assert_eq!(r, json!({"metadata": {"finalizers": ["a", "b"]}}));
        // list-level replace
        let r = ap(
            PatchType::StrategicMerge,
            deploy(),
            json!({"spec": {"template": {"spec": {"containers": [{"$patch": "replace"}, {"name": "only", "image": "x"}]}}}}),
        )
        .unwrap();
        assert_eq!(
            r.pointer("/spec/template/spec/containers").unwrap(),
            &json!([{"name": "only", "image": "x"}])
        );
        // Service ports merge on `port`.
        let svc = json!({"spec": {"ports": [{"port": 80, "targetPort": 8080}, {"port": 443}]}});
        let r = ap(
            PatchType::StrategicMerge,
            svc,
            json!({"spec": {"ports": [{"port": 80, "targetPort": 9090}]}}),
        )
        .unwrap();
        assert_eq!(
            r["spec"]["ports"],
            json!([{"port": 80, "targetPort": 9090}, {"port": 443}])
        );
        assert!(matches!(
            ap(PatchType::StrategicMerge, json!({}), json!([])),
            Err(PatchError::BadRequest(_))
        ));
    }

    #[test]
    fn content_types() {
        assert_eq!(
            PatchType::from_content_type("application/merge-patch+json; charset=utf-8"),
            Some(PatchType::Merge)
        );
        assert_eq!(
            PatchType::from_content_type("application/json-patch+json"),
            Some(PatchType::Json)
        );
        assert_eq!(
            PatchType::from_content_type("application/strategic-merge-patch+json"),
            Some(PatchType::StrategicMerge)
        );
        assert_eq!(
            PatchType::from_content_type("application/apply-patch+yaml"),
            None
        );
    }
}
