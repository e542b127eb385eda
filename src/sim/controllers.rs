//! The sim's controller manager: Deployment -> ReplicaSet -> Pods (with
//! their Events: `SuccessfulCreate`, `SuccessfulDelete`,
//! `ScalingReplicaSet`), the Event TTL (`sim::events::Reaper`, every
//! minute), the
//! garbage collector, the namespace controller, the serviceaccount
//! controller (`sim::serviceaccounts`) and the Gateway API controller (`sim::gateway`), on one reconcile thread.
//!
//! Level-triggered: watch forwarder threads (one per watched kind) turn store
//! events into "dirty" keys on one bounded channel (4,096 keys; a
//! forwarder waits when it is full); the reconcile thread
//! re-reads the object and its children from the store and converges them,
//! so a missed or duplicated event only costs a redundant pass. A periodic
//! full resync (every 5 s) is the safety net for anything missed
//! while a watch was being re-armed.
//!
//! Rollouts are simplified (documented in docs/sim.md): the new ReplicaSet
//! is scaled to the desired count at once and each old one is scaled to
//! `desired - new.availableReplicas`, so old pods go as new ones become
//! available; `Recreate` empties the old ones first.

use super::events::{self, Recorder, Regarding};
use super::gateway;
use super::gc;
use super::lifecycle::{self, DeleteOptions};
use super::resources::Resource;
use super::store::{Selectors, Store, StoreError, WatchFrom};
use crossbeam_channel::{bounded, Receiver, RecvTimeoutError, Sender};
use serde_json::{json, Map, Value};
use sha2::Digest;
use std::collections::{BTreeMap, HashSet};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

/// What a watch forwarder reports: an object of this kind changed.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub(crate) enum Dirty {
    Deployment(String, String),
    ReplicaSet(String, String),
    /// An object with this uid was deleted: its dependents must go.
    Deleted(String),
    Namespace(String),
    /// A namespace whose `default` ServiceAccount may be missing.
    DefaultServiceAccount(String),
    /// A Gateway API object, a Service or a Namespace changed: the
    /// Gateway API controller's pass (`sim::gateway`).
    GatewayApi,
    /// Re-examine everything.
    All,
}

pub struct Controllers {
    stop: Arc<AtomicBool>,
    threads: Vec<JoinHandle<()>>,
}

const WATCHED: &[Resource] = &[
    Resource::Deployment,
    Resource::ReplicaSet,
    Resource::Pod,
    Resource::Namespace,
    Resource::Service,
    Resource::ConfigMap,
    Resource::Secret,
    Resource::Ingress,
    Resource::GatewayClass,
    Resource::Gateway,
    Resource::HttpRoute,
    Resource::ServiceAccount,
];

impl Controllers {
    pub fn start(store: Arc<Store>) -> std::io::Result<Controllers> {
        let stop = Arc::new(AtomicBool::new(false));
        let (tx, rx) = bounded::<Dirty>(4096);
        let mut threads = Vec::new();
        for &res in WATCHED {
            let (store, tx, stop) = (store.clone(), tx.clone(), stop.clone());
            threads.push(
                std::thread::Builder::new()
                    .name(format!("sim-ctl-watch-{}", res.info().plural))
                    .stack_size(128 * 1024)
                    .spawn(move || forward(store, res, tx, stop))?,
            );
        }
        drop(tx);
        let (s2, stop2) = (store, stop.clone());
        threads.push(
            std::thread::Builder::new()
                .name("sim-controllers".into())
                .spawn(move || reconcile_loop(s2, rx, stop2))?,
        );
        Ok(Controllers { stop, threads })
    }

    pub fn stop(mut self) {
        self.stop.store(true, Ordering::Relaxed);
        for t in self.threads.drain(..) {
            let _ = t.join();
        }
    }
}

impl Drop for Controllers {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
    }
}

/// Re-arms the watch whenever it ends; maps each event to dirty keys.
fn forward(store: Arc<Store>, res: Resource, tx: Sender<Dirty>, stop: Arc<AtomicBool>) {
    while !stop.load(Ordering::Relaxed) {
        let stream = match store.watch(res, None, Selectors::default(), WatchFrom::Now) {
            Ok(s) => s,
            Err(_) => {
                std::thread::sleep(Duration::from_millis(100));
                continue;
            }
        };
        // A fresh watch may have missed events while it was re-armed.
        let _ = tx.send(Dirty::All);
        loop {
            if stop.load(Ordering::Relaxed) {
                return;
            }
            match stream.recv_timeout(Duration::from_millis(200)) {
                Ok(ev) => {
                    let o = &ev.object;
                    let ns = o["metadata"]["namespace"]
                        .as_str()
                        .unwrap_or("")
                        .to_string();
                    let name = o["metadata"]["name"].as_str().unwrap_or("").to_string();
                    let deleted = matches!(ev.ty, crate::kube::watch::EventType::Deleted);
                    if deleted {
                        if let Some(uid) = o["metadata"]["uid"].as_str() {
                            let _ = tx.send(Dirty::Deleted(uid.to_string()));
                        }
                    }
                    match res {
                        Resource::Deployment => {
                            let _ = tx.send(Dirty::Deployment(ns, name));
                        }
                        Resource::ReplicaSet => {
                            let _ = tx.send(Dirty::ReplicaSet(ns.clone(), name));
                            if let Some(owner) = controller_owner(o, "Deployment") {
                                let _ = tx.send(Dirty::Deployment(ns, owner));
                            }
                        }
                        Resource::Pod => {
                            if let Some(owner) = controller_owner(o, "ReplicaSet") {
                                let _ = tx.send(Dirty::ReplicaSet(ns.clone(), owner));
                            }
                            if !o["metadata"]["deletionTimestamp"].is_null() || deleted {
                                let _ = tx.send(Dirty::Namespace(ns));
                            }
                        }
                        Resource::Namespace => {
                            let _ = tx.send(Dirty::Namespace(name));
                            // Listeners select route namespaces by label.
                            let _ = tx.send(Dirty::GatewayApi);
                        }
                        Resource::GatewayClass
                        | Resource::Gateway
                        | Resource::HttpRoute
                        | Resource::Service => {
                            let _ = tx.send(Dirty::GatewayApi);
                            if deleted {
                                let _ = tx.send(Dirty::Namespace(ns));
                            }
                        }
                        // The serviceaccount controller recreates a
                        // deleted `default`.
                        Resource::ServiceAccount if deleted => {
                            if name == super::serviceaccounts::DEFAULT {
                                let _ = tx.send(Dirty::DefaultServiceAccount(ns.clone()));
                            }
                            let _ = tx.send(Dirty::Namespace(ns));
                        }
                        _ => {
                            if deleted {
                                let _ = tx.send(Dirty::Namespace(ns));
                            }
                        }
                    }
                }
                Err(RecvTimeoutError::Timeout) => {}
                Err(RecvTimeoutError::Disconnected) => break,
            }
        }
    }
}

fn controller_owner(o: &Value, kind: &str) -> Option<String> {
    o["metadata"]["ownerReferences"]
        .as_array()?
        .iter()
        .find(|r| r["controller"].as_bool() == Some(true) && r["kind"].as_str() == Some(kind))
        .and_then(|r| r["name"].as_str())
        .map(str::to_string)
}

fn controller_uid(o: &Value) -> Option<&str> {
    o["metadata"]["ownerReferences"]
        .as_array()?
        .iter()
        .find(|r| r["controller"].as_bool() == Some(true))
        .and_then(|r| r["uid"].as_str())
}

/// The controllers' Event recorders (docs/sim.md#events), named as
/// kube-controller-manager's are.
pub(crate) struct Recorders {
    replicaset: Recorder,
    deployment: Recorder,
}

impl Recorders {
    fn new(store: &Arc<Store>) -> Recorders {
        Recorders {
            replicaset: Recorder::new(store.clone(), "replicaset-controller", ""),
            deployment: Recorder::new(store.clone(), "deployment-controller", ""),
        }
    }
}

fn regarding<'a>(kind: &'static str, obj: &'a Value) -> Regarding<'a> {
    Regarding {
        kind,
        api_version: "apps/v1",
        object: obj,
        field_path: None,
    }
}

fn reconcile_loop(store: Arc<Store>, rx: Receiver<Dirty>, stop: Arc<AtomicBool>) {
    const RESYNC: Duration = Duration::from_secs(5);
    /// How often Events past their TTL are looked for.
    const REAP: Duration = Duration::from_secs(60);
    let mut next_resync = Instant::now() + RESYNC;
    let mut next_reap = Instant::now() + REAP;
    let mut reaper = events::Reaper::default();
    let rec = Recorders::new(&store);
    while !stop.load(Ordering::Relaxed) {
        if Instant::now() >= next_reap {
            next_reap = Instant::now() + REAP;
            reaper.pass(&store, Instant::now(), events::TTL);
        }
        let first = match rx.recv_timeout(Duration::from_millis(200)) {
            Ok(d) => Some(d),
            Err(RecvTimeoutError::Timeout) => None,
            Err(RecvTimeoutError::Disconnected) => return,
        };
        // Coalesce whatever else is queued: one pass per key.
        let mut batch: HashSet<Dirty> = first.into_iter().collect();
        while let Ok(d) = rx.try_recv() {
            batch.insert(d);
        }
        if Instant::now() >= next_resync {
            next_resync = Instant::now() + RESYNC;
            batch.insert(Dirty::All);
        }
        if batch.contains(&Dirty::All) {
            batch.clear();
            batch.insert(Dirty::GatewayApi);
            gc::sweep(&store);
            for d in store
                .list(Resource::Deployment, None, &Selectors::default())
                .0
            {
                batch.insert(Dirty::Deployment(ns_of(&d), name_of(&d)));
            }
            for r in store
                .list(Resource::ReplicaSet, None, &Selectors::default())
                .0
            {
                batch.insert(Dirty::ReplicaSet(ns_of(&r), name_of(&r)));
            }
            for n in store
                .list(Resource::Namespace, None, &Selectors::default())
                .0
            {
                if !n["metadata"]["deletionTimestamp"].is_null() {
                    batch.insert(Dirty::Namespace(name_of(&n)));
                } else {
                    batch.insert(Dirty::DefaultServiceAccount(name_of(&n)));
                }
            }
        }
        // Deletions first (dependents go), then ReplicaSets before
        // Deployments so a Deployment's status sees fresh ReplicaSet counts.
        let mut items: Vec<Dirty> = batch.into_iter().collect();
        items.sort_by_key(|d| match d {
            Dirty::Deleted(_) => 0,
            Dirty::ReplicaSet(..) => 1,
            Dirty::Deployment(..) => 2,
            Dirty::Namespace(_) | Dirty::DefaultServiceAccount(_) => 3,
            Dirty::GatewayApi => 4,
            Dirty::All => 5,
        });
        for d in items {
            let r = match &d {
                Dirty::Deleted(uid) => {
                    gc::collect_dependents(&store, uid);
                    Ok(())
                }
                Dirty::ReplicaSet(ns, name) => reconcile_replicaset(&store, &rec, ns, name),
                Dirty::Deployment(ns, name) => reconcile_deployment(&store, &rec, ns, name),
                Dirty::Namespace(name) => gc::reconcile_namespace(&store, name),
                Dirty::DefaultServiceAccount(ns) => {
                    super::serviceaccounts::ensure_default(&store, ns)
                }
                Dirty::GatewayApi => gateway::reconcile(&store),
                Dirty::All => Ok(()),
            };
            match r {
                Ok(()) | Err(StoreError::NotFound { .. }) | Err(StoreError::Conflict { .. }) => {}
                Err(e) => log::warn!("controller: {d:?}: {e:?}"),
            }
        }
    }
}

pub(crate) fn ns_of(o: &Value) -> String {
    o["metadata"]["namespace"]
        .as_str()
        .unwrap_or("")
        .to_string()
}

pub(crate) fn name_of(o: &Value) -> String {
    o["metadata"]["name"].as_str().unwrap_or("").to_string()
}

fn uid_of(o: &Value) -> &str {
    o["metadata"]["uid"].as_str().unwrap_or("")
}

fn match_labels(sel: &Value) -> BTreeMap<String, String> {
    sel["matchLabels"]
        .as_object()
        .map(|m| {
            m.iter()
                .map(|(k, v)| (k.clone(), v.as_str().unwrap_or("").to_string()))
                .collect()
        })
        .unwrap_or_default()
}

fn labels_match(obj: &Value, want: &BTreeMap<String, String>) -> bool {
    let labels = &obj["metadata"]["labels"];
    want.iter()
        .all(|(k, v)| labels[k.as_str()].as_str() == Some(v.as_str()))
}

fn is_ready(pod: &Value) -> bool {
    pod["status"]["conditions"].as_array().is_some_and(|cs| {
        cs.iter()
            .any(|c| c["type"] == "Ready" && c["status"] == "True")
    })
}

fn owner_ref(api_version: &str, kind: &str, owner: &Value) -> Value {
    json!({
        "apiVersion": api_version,
        "kind": kind,
        "name": owner["metadata"]["name"],
        "uid": owner["metadata"]["uid"],
        "controller": true,
        "blockOwnerDeletion": true,
    })
}

/// Keeps `spec.replicas` active pods for a ReplicaSet and its status current.
fn reconcile_replicaset(
    store: &Store,
    rec: &Recorders,
    ns: &str,
    name: &str,
) -> Result<(), StoreError> {
    let rs = store.get(Resource::ReplicaSet, ns, name)?;
    let uid = uid_of(&rs).to_string();
    let want = rs["spec"]["replicas"].as_i64().unwrap_or(1).max(0) as usize;
    let selector = match_labels(&rs["spec"]["selector"]);
    let pods: Vec<Value> = store
        .list(Resource::Pod, Some(ns), &Selectors::default())
        .0
        .into_iter()
        .filter(|p| controller_uid(p) == Some(uid.as_str()))
        .collect();
    let active: Vec<&Value> = pods
        .iter()
        .filter(|p| {
            p["metadata"]["deletionTimestamp"].is_null()
                && !matches!(p["status"]["phase"].as_str(), Some("Succeeded" | "Failed"))
        })
        .collect();
    let alive = rs["metadata"]["deletionTimestamp"].is_null();
    if alive {
        if active.len() < want {
            let template = &rs["spec"]["template"];
            for _ in active.len()..want {
                let mut meta = template["metadata"].clone();
                if !meta.is_object() {
                    meta = json!({});
                }
                meta["generateName"] = json!(format!("{name}-"));
                meta["ownerReferences"] = json!([owner_ref("apps/v1", "ReplicaSet", &rs)]);
                if let Some(m) = meta.as_object_mut() {
                    m.remove("name");
                }
                let pod = json!({
                    "apiVersion": "v1",
                    "kind": "Pod",
                    "metadata": meta,
                    "spec": template["spec"],
                });
                let made = store.create(Resource::Pod, ns, pod)?;
                rec.replicaset.normal(
                    &regarding("ReplicaSet", &rs),
                    "SuccessfulCreate",
                    &format!("Created pod: {}", name_of(&made)),
                );
            }
        } else if active.len() > want {
            // Scale down: not-yet-ready pods first, then the newest.
            let mut victims: Vec<&Value> = active.clone();
            victims.sort_by(|a, b| {
                is_ready(a).cmp(&is_ready(b)).then_with(|| {
                    b["metadata"]["creationTimestamp"]
                        .as_str()
                        .cmp(&a["metadata"]["creationTimestamp"].as_str())
                })
            });
            for p in victims.into_iter().take(active.len() - want) {
                match lifecycle::delete(
                    store,
                    Resource::Pod,
                    ns,
                    &name_of(p),
                    &DeleteOptions::default(),
                ) {
                    Ok(_) => rec.replicaset.normal(
                        &regarding("ReplicaSet", &rs),
                        "SuccessfulDelete",
                        &format!("Deleted pod: {}", name_of(p)),
                    ),
                    Err(StoreError::NotFound { .. }) => {}
                    Err(e) => return Err(e),
                }
            }
        }
    }
    // Status from the pods as they are now.
    let labeled = pods.iter().filter(|p| labels_match(p, &selector)).count();
    let ready = active.iter().filter(|p| is_ready(p)).count();
    let status = json!({
        "replicas": active.len(),
        "fullyLabeledReplicas": labeled.min(active.len()),
        "readyReplicas": ready,
        "availableReplicas": ready,
        "observedGeneration": rs["metadata"]["generation"].as_i64().unwrap_or(1),
    });
    set_status(store, Resource::ReplicaSet, ns, name, status)
}

/// Writes `status` (dropping zero counters, as the API server omits them)
/// only when it differs, so a quiet cluster causes no events.
fn set_status(
    store: &Store,
    res: Resource,
    ns: &str,
    name: &str,
    status: Value,
) -> Result<(), StoreError> {
    let mut status = status;
    if let Some(m) = status.as_object_mut() {
        m.retain(|k, v| {
            k == "replicas"
                || k == "observedGeneration"
                || k == "conditions"
                || v.as_i64() != Some(0)
        });
    }
    store
        .modify(res, ns, name, &mut |o: &mut Value| {
            let mut merged = o["status"].as_object().cloned().unwrap_or_default();
            for key in [
                "replicas",
                "fullyLabeledReplicas",
                "readyReplicas",
                "availableReplicas",
                "updatedReplicas",
                "unavailableReplicas",
            ] {
                merged.remove(key);
            }
            if let Some(m) = status.as_object() {
                for (k, v) in m {
                    merged.insert(k.clone(), v.clone());
                }
            }
            o["status"] = Value::Object(merged);
            Ok(())
        })
        .map(|_| ())
}

/// The pod-template-hash: a short, stable, DNS-safe digest of the template.
pub fn template_hash(template: &Value) -> String {
    const ALPHABET: &[u8] = b"bcdfghjklmnpqrstvwxz2456789";
    let bytes = serde_json::to_vec(template).unwrap_or_default();
    let digest = sha2::Sha256::digest(&bytes);
    let mut n = u64::from_be_bytes([
        digest[0], digest[1], digest[2], digest[3], digest[4], digest[5], digest[6], digest[7],
    ]);
    let mut out = String::new();
    for _ in 0..10 {
        out.push(ALPHABET[(n % ALPHABET.len() as u64) as usize] as char);
        n /= ALPHABET.len() as u64;
    }
    out
}

/// The ReplicaSet a Deployment `d` makes for its template (hash `hash`):
/// named `{deployment}-{hash}`, labelled and selected by the hash too,
/// owned by `d`, at `revision`, with `replicas` wanted now.
fn new_replica_set(d: &Value, hash: &str, desired: i64, revision: i64, replicas: i64) -> Value {
    let template = &d["spec"]["template"];
    let name = name_of(d);
    let ns = d["metadata"]["namespace"].as_str().unwrap_or("");
    let mut labels: Map<String, Value> = template["metadata"]["labels"]
        .as_object()
        .cloned()
        .unwrap_or_default();
    labels.insert("pod-template-hash".into(), json!(hash));
    let mut tmpl = template.clone();
    tmpl["metadata"]["labels"] = Value::Object(labels.clone());
    let mut selector = d["spec"]["selector"].clone();
    selector["matchLabels"]["pod-template-hash"] = json!(hash);
    json!({
        "apiVersion": "apps/v1",
        "kind": "ReplicaSet",
        "metadata": {
            "name": format!("{name}-{hash}"),
            "namespace": ns,
            "labels": labels,
            "annotations": {
                "deployment.kubernetes.io/desired-replicas": desired.to_string(),
                "deployment.kubernetes.io/max-replicas": desired.to_string(),
                "deployment.kubernetes.io/revision": revision.to_string(),
            },
            "ownerReferences": [owner_ref("apps/v1", "Deployment", d)],
        },
        "spec": {
            "replicas": replicas,
            "minReadySeconds": d["spec"]["minReadySeconds"].as_i64().unwrap_or(0),
            "selector": selector,
            "template": tmpl,
        },
    })
}

/// A Deployment's `Available` and `Progressing` conditions, as upstream's
/// controller words them; transition times kept from `d`'s current
/// conditions while a condition's status and reason stay the same.
fn deployment_conditions(d: &Value, available_ok: bool, all_updated: bool, new_rs: &str) -> Value {
    let now = crate::kube::time::now_rfc3339();
    let existing_conditions = &d["status"]["conditions"];
    let condition = |ty: &str, ok: bool, reason: &str, message: String| -> Value {
        // Keep transition times stable while the status stays the same.
        let prev = existing_conditions
            .as_array()
            .and_then(|cs| cs.iter().find(|c| c["type"] == ty))
            .cloned();
        let status = if ok { "True" } else { "False" };
        let (transition, update) = match &prev {
            Some(p) if p["status"] == status && p["reason"] == reason => {
                (p["lastTransitionTime"].clone(), p["lastUpdateTime"].clone())
            }
            _ => (json!(now), json!(now)),
        };
        json!({"type": ty, "status": status, "reason": reason, "message": message,
               "lastTransitionTime": transition, "lastUpdateTime": update})
    };
    let progressed = all_updated && available_ok;
    json!([
        condition(
            "Available",
            available_ok,
            if available_ok {
                "MinimumReplicasAvailable"
            } else {
                "MinimumReplicasUnavailable"
            },
            if available_ok {
                "Deployment has minimum availability.".into()
            } else {
                "Deployment does not have minimum availability.".into()
            }
        ),
        condition(
            "Progressing",
            true,
            if progressed {
                "NewReplicaSetAvailable"
            } else {
                "ReplicaSetUpdated"
            },
            format!(
                "ReplicaSet \"{new_rs}\" {}",
                if progressed {
                    "has successfully progressed."
                } else {
                    "is progressing."
                }
            )
        ),
    ])
}

/// `ScalingReplicaSet`, as the deployment controller words it.
fn scaled(rec: &Recorders, d: &Value, rs: &str, from: i64, to: i64) {
    if from == to {
        return;
    }
    let how = if to > from { "up" } else { "down" };
    rec.deployment.normal(
        &regarding("Deployment", d),
        "ScalingReplicaSet",
        &format!("Scaled {how} replica set {rs} from {from} to {to}"),
    );
}

fn reconcile_deployment(
    store: &Store,
    rec: &Recorders,
    ns: &str,
    name: &str,
) -> Result<(), StoreError> {
    let d = store.get(Resource::Deployment, ns, name)?;
    if !d["metadata"]["deletionTimestamp"].is_null() {
        return Ok(());
    }
    let uid = uid_of(&d).to_string();
    let desired = d["spec"]["replicas"].as_i64().unwrap_or(1).max(0);
    let template = d["spec"]["template"].clone();
    let hash = template_hash(&template);
    let owned: Vec<Value> = store
        .list(Resource::ReplicaSet, Some(ns), &Selectors::default())
        .0
        .into_iter()
        .filter(|r| controller_uid(r) == Some(uid.as_str()))
        .collect();
    let revision_of = |r: &Value| -> i64 {
        r["metadata"]["annotations"]["deployment.kubernetes.io/revision"]
            .as_str()
            .and_then(|s| s.parse().ok())
            .unwrap_or(0)
    };
    let max_revision = owned.iter().map(revision_of).max().unwrap_or(0);
    let new_rs = owned
        .iter()
        .find(|r| r["metadata"]["labels"]["pod-template-hash"].as_str() == Some(hash.as_str()))
        .cloned();
    let recreate = d["spec"]["strategy"]["type"].as_str() == Some("Recreate");
    let olds: Vec<&Value> = owned
        .iter()
        .filter(|r| r["metadata"]["labels"]["pod-template-hash"].as_str() != Some(hash.as_str()))
        .collect();
    let old_pods_left: i64 = olds
        .iter()
        .map(|r| {
            r["status"]["replicas"].as_i64().unwrap_or(0)
                + r["spec"]["replicas"].as_i64().unwrap_or(0)
        })
        .sum();

    let new_target = if recreate && old_pods_left > 0 {
        0
    } else {
        desired
    };
    let new_rs = match new_rs {
        Some(rs) => {
            if rs["spec"]["replicas"].as_i64() != Some(new_target) {
                let was = rs["spec"]["replicas"].as_i64().unwrap_or(0);
                let rs = store.modify(
                    Resource::ReplicaSet,
                    ns,
                    &name_of(&rs),
                    &mut |o: &mut Value| {
                        o["spec"]["replicas"] = json!(new_target);
                        Ok(())
                    },
                )?;
                scaled(rec, &d, &name_of(&rs), was, new_target);
                rs
            } else {
                rs
            }
        }
        None => {
            let rs = new_replica_set(&d, &hash, desired, max_revision + 1, new_target);
            match store.create(Resource::ReplicaSet, ns, rs) {
                Ok(rs) => {
                    scaled(rec, &d, &name_of(&rs), 0, new_target);
                    rs
                }
                Err(StoreError::AlreadyExists { .. }) => {
                    store.get(Resource::ReplicaSet, ns, &format!("{name}-{hash}"))?
                }
                Err(e) => return Err(e),
            }
        }
    };
    let new_available = new_rs["status"]["availableReplicas"].as_i64().unwrap_or(0);
    // Old ReplicaSets give way as the new one becomes available.
    let mut room = (desired - new_available).max(0);
    if recreate {
        room = 0;
    }
    for old in &olds {
        let cur = old["spec"]["replicas"].as_i64().unwrap_or(0);
        let target = cur.min(room);
        room -= target;
        if target != cur {
            store.modify(
                Resource::ReplicaSet,
                ns,
                &name_of(old),
                &mut |o: &mut Value| {
                    o["spec"]["replicas"] = json!(target);
                    Ok(())
                },
            )?;
            scaled(rec, &d, &name_of(old), cur, target);
        }
    }
    // Keep at most revisionHistoryLimit empty old ReplicaSets.
    let limit = d["spec"]["revisionHistoryLimit"]
        .as_i64()
        .unwrap_or(10)
        .max(0) as usize;
    let mut empty: Vec<&&Value> = olds
        .iter()
        .filter(|r| {
            r["spec"]["replicas"].as_i64() == Some(0)
                && r["status"]["replicas"].as_i64().unwrap_or(0) == 0
        })
        .collect();
    if empty.len() > limit {
        empty.sort_by_key(|r| revision_of(r));
        for r in empty.iter().take(empty.len() - limit) {
            let _ = store.delete(Resource::ReplicaSet, ns, &name_of(r), &Default::default());
        }
    }

    let sum = |key: &str| -> i64 {
        owned
            .iter()
            .filter(|r| {
                r["metadata"]["labels"]["pod-template-hash"].as_str() != Some(hash.as_str())
            })
            .map(|r| r["status"][key].as_i64().unwrap_or(0))
            .sum::<i64>()
            + new_rs["status"][key].as_i64().unwrap_or(0)
    };
    let replicas = sum("replicas");
    let available = sum("availableReplicas");
    let ready = sum("readyReplicas");
    let updated = new_rs["status"]["replicas"].as_i64().unwrap_or(0);
    let available_ok = available >= desired;
    let conditions = deployment_conditions(&d, available_ok, updated >= desired, &name_of(&new_rs));
    let status = json!({
        "observedGeneration": d["metadata"]["generation"].as_i64().unwrap_or(1),
        "replicas": replicas,
        "updatedReplicas": updated,
        "readyReplicas": ready,
        "availableReplicas": available,
        "unavailableReplicas": (replicas - available).max(0),
        "conditions": conditions,
    });
    // Revision annotation on the Deployment mirrors its current ReplicaSet.
    let rev = new_rs["metadata"]["annotations"]["deployment.kubernetes.io/revision"].clone();
    if !rev.is_null() && d["metadata"]["annotations"]["deployment.kubernetes.io/revision"] != rev {
        store.modify(Resource::Deployment, ns, name, &mut |o: &mut Value| {
            if !o["metadata"]["annotations"].is_object() {
                o["metadata"]["annotations"] = json!({});
            }
            o["metadata"]["annotations"]["deployment.kubernetes.io/revision"] = rev.clone();
            Ok(())
        })?;
    }
    set_status(store, Resource::Deployment, ns, name, status)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn template_hash_is_stable_and_dns_safe() {
        let a = json!({"metadata": {"labels": {"app": "web"}}, "spec": {"containers": [{"name": "c", "image": "x"}]}});
        let b = json!({"metadata": {"labels": {"app": "web"}}, "spec": {"containers": [{"name": "c", "image": "y"}]}});
        assert_eq!(template_hash(&a), template_hash(&a.clone()));
        assert_ne!(template_hash(&a), template_hash(&b));
        assert_eq!(template_hash(&a).len(), 10);
        assert!(template_hash(&a)
            .chars()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit()));
    }
}
