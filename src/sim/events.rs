//! Events (docs/sim.md#events): one kind seen through two groups, as
//! upstream stores it. The store keeps core/v1 Events
//! ([`Resource::Event`]); `events.k8s.io/v1` ([`Resource::EventV1`]) is a
//! view the API layer converts to and from ([`to_core`],
//! [`to_events_v1`]: `Convert_v1_Event_To_core_Event` and back), so one
//! object is listed, watched and deleted through either.
//!
//! Also here: upstream's validation, which depends on the group a write
//! came through ([`validate_create`], [`validate_update`]:
//! `ValidateEventCreate`/`Update`); the [`Recorder`] the sim's kubelet and
//! controllers write with (client-go's: events named
//! `OBJECT.<hex nanoseconds>`, an identical event counted on its first
//! write, a token bucket per object against spam); and the bounds
//! ([`Reaper`]): each Event goes 1 h after its last write (the API
//! server's `--event-ttl`), and past [`CAP`] Events the oldest go first.

use super::admission::Rejection;
use super::apitime::Instant as ApiInstant;
use super::resources::Resource;
use super::rules::{check_dns1123_subdomain, qualified_name_errors};
use super::store::{
    meta_str, obj_rv, FieldCause, Obj, Preconditions, Selectors, Store, StoreError,
};
use crate::kube::time::now_rfc3339;
use parking_lot::Mutex;
use serde_json::{json, Map, Value};
use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// How long an Event lives after its last write (`--event-ttl`).
pub const TTL: Duration = Duration::from_secs(3600);
/// At most this many Events are kept; past it the oldest writes go first,
/// down to nine tenths of it.
pub const CAP: usize = 10_000;

/// The group a write came through: validation differs between them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Version {
    /// `v1` (and `events.k8s.io/v1beta1` upstream): the legacy rules.
    Core,
    /// `events.k8s.io/v1`: the legacy rules and the strict ones.
    EventsV1,
}

// ---------------------------------------------------------------- shapes

/// (events.k8s.io/v1 name, core/v1 name) of the fields that differ.
const RENAMES: &[(&str, &str)] = &[
    ("regarding", "involvedObject"),
    ("note", "message"),
    ("deprecatedSource", "source"),
    ("deprecatedFirstTimestamp", "firstTimestamp"),
    ("deprecatedLastTimestamp", "lastTimestamp"),
    ("deprecatedCount", "count"),
    ("reportingController", "reportingComponent"),
];

fn drop_empty(m: &mut Map<String, Value>, fields: &[&str]) {
    for f in fields {
        let empty = match m.get(*f) {
            Some(Value::String(s)) => s.is_empty(),
            Some(Value::Number(n)) => n.as_i64() == Some(0),
            Some(Value::Null) => true,
            _ => false,
        };
        if empty {
            m.remove(*f);
        }
    }
}

/// A core/v1 Event as the API server encodes it: `involvedObject` and
/// `source` always objects, the two Times and `eventTime` `null` when
/// unset, `reportingComponent` and `reportingInstance` always strings,
/// the `omitempty` fields left out when empty.
pub fn canonical_core(obj: &mut Obj) {
    let Some(m) = obj.as_object_mut() else { return };
    for f in ["involvedObject", "source"] {
        if !m.get(f).is_some_and(Value::is_object) {
            m.insert(f.into(), json!({}));
        }
    }
    for f in ["firstTimestamp", "lastTimestamp", "eventTime"] {
        m.entry(f).or_insert(Value::Null);
    }
    for f in ["reportingComponent", "reportingInstance"] {
        if !m.get(f).is_some_and(Value::is_string) {
            m.insert(f.into(), json!(""));
        }
    }
    drop_empty(m, &["reason", "message", "count", "type", "action"]);
}

/// An `events.k8s.io/v1` body as a core/v1 Event.
pub fn to_core(v: Obj) -> Obj {
    let Value::Object(mut m) = v else { return v };
    for (new, old) in RENAMES {
        m.remove(*old);
        if let Some(x) = m.remove(*new) {
            m.insert((*old).to_string(), x);
        }
    }
    m.insert("apiVersion".into(), json!("v1"));
    m.insert("kind".into(), json!("Event"));
    let mut v = Value::Object(m);
    canonical_core(&mut v);
    v
}

/// A stored core/v1 Event as `events.k8s.io/v1` shows it.
pub fn to_events_v1(core: &Obj) -> Obj {
    let Some(src) = core.as_object() else {
        return core.clone();
    };
    let mut m = src.clone();
    for (new, old) in RENAMES {
        m.remove(*new);
        if let Some(x) = m.remove(*old) {
            m.insert((*new).to_string(), x);
        }
    }
    if m.contains_key("apiVersion") {
        m.insert("apiVersion".into(), json!("events.k8s.io/v1"));
    }
    for f in ["regarding", "deprecatedSource"] {
        if !m.get(f).is_some_and(Value::is_object) {
            m.insert(f.into(), json!({}));
        }
    }
    for f in [
        "eventTime",
        "deprecatedFirstTimestamp",
        "deprecatedLastTimestamp",
    ] {
        m.entry(f).or_insert(Value::Null);
    }
    drop_empty(
        &mut m,
        &[
            "reportingController",
            "reportingInstance",
            "action",
            "reason",
            "note",
            "type",
            "deprecatedCount",
        ],
    );
    Value::Object(m)
}

// ---------------------------------------------------------------- validation

fn is_set(v: Option<&Value>) -> bool {
    !matches!(v, None | Some(Value::Null))
}

fn text<'a>(obj: &'a Obj, path: &str) -> &'a str {
    obj.pointer(path).and_then(Value::as_str).unwrap_or("")
}

/// `legacyValidateEvent`: the rules every Event passes, whichever group.
fn legacy(obj: &Obj, version: Version, causes: &mut Vec<FieldCause>) {
    let ns = meta_str(obj, "namespace");
    let involved_ns = text(obj, "/involvedObject/namespace");
    let rc_field = match version {
        Version::Core => "reportingComponent",
        Version::EventsV1 => "reportingController",
    };
    let mismatch = || {
        FieldCause::invalid(
            "involvedObject.namespace",
            involved_ns,
            "does not match event.namespace",
        )
    };
    if !is_set(obj.get("eventTime")) {
        let ok = if involved_ns.is_empty() {
            ns.is_empty() || ns == "default"
        } else {
            ns == involved_ns
        };
        if !ok {
            causes.push(mismatch());
        }
    } else {
        if involved_ns.is_empty() && ns != "default" && ns != "kube-system" {
            causes.push(mismatch());
        }
        let rc = text(obj, "/reportingComponent");
        if rc.is_empty() {
            causes.push(FieldCause::required(rc_field, ""));
        }
        for e in qualified_name_errors(rc) {
            causes.push(FieldCause::invalid(rc_field, rc, e));
        }
        let limited =
            |field: &str, path: &str, limit: usize, required: bool, c: &mut Vec<FieldCause>| {
                let v = text(obj, path);
                if required && v.is_empty() {
                    c.push(FieldCause::required(field, ""));
                }
                if v.len() > limit {
                    c.push(FieldCause::invalid(
                        field,
                        "",
                        format!("can have at most {limit} characters"),
                    ));
                }
            };
        limited("reportingInstance", "/reportingInstance", 128, true, causes);
        limited("action", "/action", 128, true, causes);
        limited("reason", "/reason", 128, true, causes);
        limited("message", "/message", 1024, false, causes);
    }
    if let Err(e) = check_dns1123_subdomain(ns) {
        causes.push(FieldCause::invalid("namespace", ns, e));
    }
}

/// `validateV1EventSeries`.
fn series(obj: &Obj, causes: &mut Vec<FieldCause>) {
    let Some(s) = obj.get("series").filter(|s| s.is_object()) else {
        return;
    };
    if s["count"].as_i64().unwrap_or(0) < 2 {
        causes.push(FieldCause::invalid(
            "series.count",
            "",
            "should be at least 2",
        ));
    }
    if !is_set(s.get("lastObservedTime")) {
        causes.push(FieldCause::required("series.lastObservedTime", ""));
    }
}

/// `ValidateEventCreate` for a core/v1 Event (a body of `events.k8s.io/v1`
/// converted with [`to_core`] first) in its namespace.
pub fn validate_create(obj: &Obj, version: Version, causes: &mut Vec<FieldCause>) {
    legacy(obj, version, causes);
    if version == Version::Core {
        return;
    }
    let name = meta_str(obj, "name");
    if !name.is_empty() {
        if let Err(e) = check_dns1123_subdomain(name) {
            causes.push(FieldCause::invalid("metadata.name", name, e));
        }
    } else if meta_str(obj, "generateName").is_empty() {
        causes.push(FieldCause::required(
            "metadata.name",
            "name or generateName is required",
        ));
    }
    series(obj, causes);
    if !is_set(obj.get("eventTime")) {
        causes.push(FieldCause::required("eventTime", ""));
    }
    let ty = text(obj, "/type");
    if ty != "Normal" && ty != "Warning" {
        causes.push(FieldCause::invalid(
            "type",
            "",
            format!("has invalid value: {ty}"),
        ));
    }
    for f in ["firstTimestamp", "lastTimestamp"] {
        if is_set(obj.get(f)) {
            causes.push(FieldCause::invalid(f, "", "needs to be unset"));
        }
    }
    if obj["count"].as_i64().unwrap_or(0) != 0 {
        causes.push(FieldCause::invalid("count", "", "needs to be unset"));
    }
    if !text(obj, "/source/component").is_empty() || !text(obj, "/source/host").is_empty() {
        causes.push(FieldCause::invalid("source", "", "needs to be unset"));
    }
}

/// A changed value as `ValidateImmutableField` shows it.
fn immutable(field: &str, v: &Value) -> FieldCause {
    let shown = match v {
        Value::String(s) => super::store::error::quote(s),
        Value::Null => "null".to_string(),
        other => other.to_string(),
    };
    FieldCause::invalid_raw(field, shown, "field is immutable")
}

/// `ValidateEventUpdate`: through `events.k8s.io/v1`, what the Event says
/// happened may not change (only its series and metadata).
pub fn validate_update(new: &Obj, old: &Obj, version: Version, causes: &mut Vec<FieldCause>) {
    legacy(new, version, causes);
    if version == Version::Core {
        return;
    }
    if new.get("series") != old.get("series") {
        series(new, causes);
    }
    let null = Value::Null;
    for (field, path) in [
        ("involvedObject", "/involvedObject"),
        ("reason", "/reason"),
        ("message", "/message"),
        ("source", "/source"),
        ("firstTimestamp", "/firstTimestamp"),
        ("lastTimestamp", "/lastTimestamp"),
        ("count", "/count"),
        ("reason", "/reason"),
        ("type", "/type"),
        ("eventTime", "/eventTime"),
        ("action", "/action"),
        ("related", "/related"),
        ("reportingController", "/reportingComponent"),
        ("reportingInstance", "/reportingInstance"),
    ] {
        let (a, b) = (new.pointer(path), old.pointer(path));
        let empty = |v: Option<&Value>| match v {
            None | Some(Value::Null) => true,
            Some(Value::String(s)) => s.is_empty(),
            Some(Value::Object(m)) => m.is_empty(),
            Some(Value::Number(n)) => n.as_i64() == Some(0),
            _ => false,
        };
        if a != b && !(empty(a) && empty(b)) {
            causes.push(immutable(field, a.unwrap_or(&null)));
        }
    }
}

/// The admission entry for core/v1 Events: upstream checks no name syntax,
/// labels or annotations here (`ValidateObjectMeta` only runs for
/// `events.k8s.io`), only that there is a name.
pub fn admit(obj: &mut Obj, old: Option<&Obj>) -> Result<(), Rejection> {
    canonical_core(obj);
    let mut causes = Vec::new();
    if meta_str(obj, "name").is_empty() {
        causes.push(FieldCause::required(
            "metadata.name",
            "name or generateName is required",
        ));
    }
    match old {
        None => validate_create(obj, Version::Core, &mut causes),
        Some(o) => validate_update(obj, o, Version::Core, &mut causes),
    }
    if causes.is_empty() {
        Ok(())
    } else {
        Err(Rejection::Invalid(causes))
    }
}

// ---------------------------------------------------------------- recording

/// The object an Event is about (`involvedObject`): a kind, its object and,
/// for a container, the field path (`spec.containers{NAME}`).
pub struct Regarding<'a> {
    pub kind: &'static str,
    pub api_version: &'static str,
    pub object: &'a Value,
    pub field_path: Option<String>,
}

impl<'a> Regarding<'a> {
    pub fn pod(pod: &'a Value) -> Regarding<'a> {
        Regarding {
            kind: "Pod",
            api_version: "v1",
            object: pod,
            field_path: None,
        }
    }

    /// A container of `pod` (`GenerateContainerRef`'s field path).
    pub fn container(pod: &'a Value, init: bool, name: &str) -> Regarding<'a> {
        let list = if init { "initContainers" } else { "containers" };
        Regarding {
            field_path: Some(format!("spec.{list}{{{name}}}")),
            ..Regarding::pod(pod)
        }
    }

    fn reference(&self) -> Value {
        let m = &self.object["metadata"];
        let mut r = json!({
            "kind": self.kind,
            "namespace": m["namespace"],
            "name": m["name"],
            "uid": m["uid"],
            "apiVersion": self.api_version,
            "resourceVersion": m["resourceVersion"],
        });
        if let Some(f) = &self.field_path {
            r["fieldPath"] = json!(f);
        }
        if let Some(o) = r.as_object_mut() {
            o.retain(|_, v| !v.is_null() && v != "");
        }
        r
    }
}

/// client-go's `EventSourceObjectSpamFilter`: 25 events at once per
/// object, source, type and reason, then one per 5 minutes.
const SPAM_BURST: f64 = 25.0;
const SPAM_REFILL: Duration = Duration::from_secs(300);
/// Keys remembered (client-go's correlator keeps an LRU of 4,096).
const REMEMBERED: usize = 4_096;

struct Bucket {
    tokens: f64,
    at: Instant,
}

#[derive(Default)]
struct RecorderState {
    /// Identical-event key -> (namespace, name) of the Event that counts it.
    seen: HashMap<String, (String, String)>,
    buckets: HashMap<String, Bucket>,
}

/// Writes core/v1 Events for one component, as client-go's recorder does
/// (`source.component`/`host`, and the same as `reportingComponent`/
/// `reportingInstance`). Failures are logged, never returned: an Event is
/// best effort.
pub struct Recorder {
    store: Arc<Store>,
    component: &'static str,
    host: &'static str,
    state: Mutex<RecorderState>,
}

/// `OBJECT.<UnixNano in hex>`, client-go's Event name.
fn event_name(object: &str) -> String {
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap_or_default()
        .as_nanos();
    format!("{object}.{nanos:x}")
}

impl Recorder {
    /// A recorder for `component` on `host` (`""` for controllers).
    pub fn new(store: Arc<Store>, component: &'static str, host: &'static str) -> Recorder {
        Recorder {
            store,
            component,
            host,
            state: Mutex::new(RecorderState::default()),
        }
    }

    pub fn normal(&self, about: &Regarding<'_>, reason: &str, message: &str) {
        self.event(about, "Normal", reason, message);
    }

    pub fn warning(&self, about: &Regarding<'_>, reason: &str, message: &str) {
        self.event(about, "Warning", reason, message);
    }

    /// Records one Event: a new one, or the count of an identical one
    /// raised; dropped when the object's bucket is empty.
    pub fn event(&self, about: &Regarding<'_>, ty: &str, reason: &str, message: &str) {
        let reference = about.reference();
        let ns = reference["namespace"].as_str().unwrap_or("").to_string();
        let object = reference["name"].as_str().unwrap_or("").to_string();
        let ident = |r: &Value| {
            ["kind", "namespace", "name", "uid", "apiVersion"]
                .iter()
                .map(|f| r[*f].as_str().unwrap_or(""))
                .collect::<Vec<_>>()
                .join("\u{0}")
        };
        let spam_key = format!(
            "{}\u{0}{}\u{0}{}\u{0}{ty}\u{0}{reason}",
            self.component,
            self.host,
            ident(&reference)
        );
        let same_key = format!(
            "{spam_key}\u{0}{}\u{0}{message}",
            reference["fieldPath"].as_str().unwrap_or("")
        );
        let existing = {
            let mut st = self.state.lock();
            if st.buckets.len() > REMEMBERED {
                st.buckets.clear();
            }
            let now = Instant::now();
            let b = st.buckets.entry(spam_key).or_insert(Bucket {
                tokens: SPAM_BURST,
                at: now,
            });
            let refill = now.duration_since(b.at).as_secs_f64() / SPAM_REFILL.as_secs_f64();
            b.tokens = (b.tokens + refill).min(SPAM_BURST);
            b.at = now;
            if b.tokens < 1.0 {
                return;
            }
            b.tokens -= 1.0;
            st.seen.get(&same_key).cloned()
        };
        let now = now_rfc3339();
        if let Some((ens, ename)) = existing {
            let r = self
                .store
                .modify(Resource::Event, &ens, &ename, &mut |o: &mut Value| {
                    let count = o["count"].as_i64().unwrap_or(1);
                    o["count"] = json!(count + 1);
                    o["lastTimestamp"] = json!(now);
                    Ok(())
                });
            match r {
                Ok(_) => return,
                Err(StoreError::NotFound { .. }) => {}
                Err(e) => {
                    log::debug!("event {ens}/{ename}: {e}");
                    return;
                }
            }
        }
        trim(&self.store, CAP);
        let name = event_name(&object);
        let event = json!({
            "apiVersion": "v1",
            "kind": "Event",
            "metadata": {"name": name, "namespace": ns},
            "involvedObject": reference,
            "reason": reason,
            "message": message,
            "source": if self.host.is_empty() {
                json!({"component": self.component})
            } else {
                json!({"component": self.component, "host": self.host})
            },
            "firstTimestamp": now,
            "lastTimestamp": now,
            "count": 1,
            "type": ty,
            "reportingComponent": self.component,
            "reportingInstance": self.host,
        });
        match self.store.create(Resource::Event, &ns, event) {
            Ok(_) => {
                let mut st = self.state.lock();
                if st.seen.len() > REMEMBERED {
                    st.seen.clear();
                }
                st.seen.insert(same_key, (ns, name));
            }
            // The namespace is going: its Events would go with it.
            Err(StoreError::Forbidden { .. }) | Err(StoreError::NotFound { .. }) => {}
            Err(e) => log::debug!("event for {ns}/{object}: {e}"),
        }
    }
}

/// The scheduler's `Scheduled` Event, written through the events.k8s.io
/// API as kube-scheduler writes it (`eventTime`, `action: Binding`, no
/// `source`), here by the kubelet that binds the pod.
pub fn scheduled(store: &Store, pod: &Value, node: &str) {
    let about = Regarding::pod(pod);
    let reference = about.reference();
    let ns = reference["namespace"].as_str().unwrap_or("").to_string();
    let name = reference["name"].as_str().unwrap_or("").to_string();
    trim(store, CAP);
    let event = json!({
        "apiVersion": "v1",
        "kind": "Event",
        "metadata": {"name": event_name(&name), "namespace": ns},
        "involvedObject": reference,
        "reason": "Scheduled",
        "message": format!("Successfully assigned {ns}/{name} to {node}"),
        "type": "Normal",
        "eventTime": ApiInstant::now().micro(),
        "action": "Binding",
        "reportingComponent": "default-scheduler",
        "reportingInstance": format!("default-scheduler-{node}"),
    });
    if let Err(e) = store.create(Resource::Event, &ns, event) {
        log::debug!("scheduled event for {ns}/{name}: {e}");
    }
}

// ---------------------------------------------------------------- bounds

/// Deletes the oldest writes (by resourceVersion) when there are `cap`
/// Events or more, down to nine tenths of `cap`, so a burst pays for one
/// listing per tenth of the cap.
pub fn trim(store: &Store, cap: usize) {
    if store.count(Resource::Event) < cap {
        return;
    }
    let (mut all, _) = store.list(Resource::Event, None, &Selectors::default());
    all.sort_by_key(obj_rv);
    let excess = all.len().saturating_sub(cap / 10 * 9);
    for e in all.iter().take(excess) {
        delete_exact(store, e);
    }
}

fn delete_exact(store: &Store, e: &Value) {
    let pre = Preconditions {
        uid: Some(meta_str(e, "uid").to_string()),
        resource_version: None,
    };
    let _ = store.delete(
        Resource::Event,
        meta_str(e, "namespace"),
        meta_str(e, "name"),
        &pre,
    );
}

/// The Event TTL: each Event goes [`TTL`] after the last write this
/// reaper saw (it notes each uid's resourceVersion at every pass, so a
/// write is noticed within a pass). Run by the controllers.
#[derive(Default)]
pub struct Reaper {
    seen: HashMap<String, (u64, Instant)>,
}

impl Reaper {
    /// One pass at `now`: deletes Events unwritten for `ttl`, then trims
    /// to `cap`.
    pub fn pass(&mut self, store: &Store, now: Instant, ttl: Duration) {
        let (all, _) = store.list(Resource::Event, None, &Selectors::default());
        let mut live = HashMap::with_capacity(all.len());
        for e in &all {
            let uid = meta_str(e, "uid").to_string();
            let rv = obj_rv(e);
            let since = match self.seen.get(&uid) {
                Some((seen_rv, at)) if *seen_rv == rv => *at,
                _ => now,
            };
            if now.saturating_duration_since(since) >= ttl {
                delete_exact(store, e);
            } else {
                live.insert(uid, (rv, since));
            }
        }
        self.seen = live;
        trim(store, CAP);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sim::store::StoreConfig;

    #[test]
    fn the_two_shapes_convert_as_upstream_encodes_them() {
        // Shapes read from kube-apiserver v1.36.3.
        let v1 = json!({"apiVersion": "events.k8s.io/v1", "kind": "Event",
            "metadata": {"name": "n1", "namespace": "lt"},
            "eventTime": "2026-01-01T00:00:00.000001Z", "reportingController": "kubegate.dev/sim",
            "reportingInstance": "sim-node", "action": "Start", "reason": "Started",
            "regarding": {"kind": "Pod", "namespace": "lt", "name": "p"}, "note": "hello",
            "type": "Normal"});
        let core = to_core(v1.clone());
        assert_eq!(
            core,
            json!({"apiVersion": "v1", "kind": "Event", "metadata": {"name": "n1", "namespace": "lt"},
                "involvedObject": {"kind": "Pod", "namespace": "lt", "name": "p"},
                "reason": "Started", "message": "hello", "source": {}, "firstTimestamp": null,
                "lastTimestamp": null, "type": "Normal", "eventTime": "2026-01-01T00:00:00.000001Z",
                "action": "Start", "reportingComponent": "kubegate.dev/sim",
                "reportingInstance": "sim-node"})
        );
        let mut back = v1;
        back["deprecatedSource"] = json!({});
        back["deprecatedFirstTimestamp"] = Value::Null;
        back["deprecatedLastTimestamp"] = Value::Null;
        assert_eq!(to_events_v1(&core), back);
    }

    #[test]
    fn validation_depends_on_the_group() {
        let core = json!({"metadata": {"name": "e2", "namespace": "lt"},
            "involvedObject": {"kind": "Pod", "name": "p", "namespace": "other"},
            "eventTime": "2026-01-01T00:00:00.000000Z"});
        let mut causes = Vec::new();
        validate_create(&core, Version::Core, &mut causes);
        let fields: Vec<&str> = causes.iter().map(|c| c.field.as_str()).collect();
        assert_eq!(
            fields,
            [
                "reportingComponent",
                "reportingComponent",
                "reportingComponent",
                "reportingInstance",
                "action",
                "reason"
            ]
        );
        let v1 = to_core(json!({"metadata": {"name": "x", "namespace": "lt"}}));
        let mut causes = Vec::new();
        validate_create(&v1, Version::EventsV1, &mut causes);
        let msgs: Vec<String> = causes.iter().map(FieldCause::message).collect();
        assert_eq!(
            msgs,
            [
                r#"involvedObject.namespace: Invalid value: "": does not match event.namespace"#,
                "eventTime: Required value",
                r#"type: Invalid value: "": has invalid value: "#
            ]
        );
    }

    #[test]
    fn the_reaper_keeps_an_hour_after_the_last_write() {
        let store = Store::new(StoreConfig::default());
        let ev = json!({"metadata": {"name": "p.1", "namespace": "default"},
            "involvedObject": {"kind": "Pod", "name": "p", "namespace": "default"},
            "reason": "R", "message": "m", "type": "Normal"});
        store.create(Resource::Event, "default", ev).unwrap();
        let mut r = Reaper::default();
        let t0 = Instant::now();
        r.pass(&store, t0, TTL);
        r.pass(&store, t0 + Duration::from_secs(1800), TTL);
        // A write half way renews it.
        store
            .modify(Resource::Event, "default", "p.1", &mut |o: &mut Value| {
                o["count"] = json!(2);
                Ok(())
            })
            .unwrap();
        r.pass(&store, t0 + Duration::from_secs(1900), TTL);
        r.pass(&store, t0 + Duration::from_secs(3700), TTL);
        assert_eq!(store.count(Resource::Event), 1);
        r.pass(&store, t0 + Duration::from_secs(1900 + 3600), TTL);
        assert_eq!(store.count(Resource::Event), 0);
    }

    #[test]
    fn identical_events_are_counted_and_spam_is_dropped() {
        let store = Store::new(StoreConfig::default());
        let pod = json!({"metadata": {"name": "p", "namespace": "default", "uid": "u1",
                                      "resourceVersion": "7"}});
        let rec = Recorder::new(store.clone(), "kubelet", "sim-node");
        let about = Regarding::container(&pod, false, "c");
        for _ in 0..3 {
            rec.warning(&about, "BackOff", "Back-off restarting failed container c");
        }
        let (items, _) = store.list(Resource::Event, None, &Selectors::default());
        assert_eq!(items.len(), 1);
        assert_eq!(items[0]["count"], 3);
        assert_eq!(
            items[0]["involvedObject"]["fieldPath"],
            "spec.containers{c}"
        );
        assert_eq!(
            items[0]["source"],
            json!({"component": "kubelet", "host": "sim-node"})
        );
        for i in 0..40 {
            rec.normal(&Regarding::pod(&pod), "Noisy", &format!("m{i}"));
        }
        let (items, _) = store.list(Resource::Event, None, &Selectors::default());
        assert_eq!(items.len(), 1 + 25, "the bucket holds 25");
    }
}
