//! The node's status manager, as a kubelet's: the latest status of every
//! pod the kubelet writes into the mirror (`super::mirror`), coalesced per
//! pod and sent to the API server by PATCH of the `status` subresource;
//! retried with back-off while the server fails, refuses or cannot be
//! reached, so what was written during an outage arrives after it (only the
//! newest state: a pod's intermediate states are not replayed). A pod the
//! kubelet removed from the mirror (a graceful delete finished) gets its
//! terminal status and then the final delete: `gracePeriodSeconds: 0` with
//! a UID precondition, so a pod of the same name made since is never hit.
//!
//! Threads: `node-status-watch` reads the mirror's pod watch (in memory,
//! never waits on the network) into the table; `node-status-send` (4) take
//! dirty pods from it, one pod at most on one thread, so a pod whose write
//! hangs holds one sender and no pod thread of the kubelet.
//!
//! What is sent (`upstream_status`): the kubelet's status without
//! `qosClass` (the API server sets it) and without the `PodScheduled`
//! condition (the scheduler's). A strategic-merge patch merges
//! `conditions` by type, so conditions others own (readiness gates,
//! `DisruptionTarget`) stay; `metadata.uid` in the body makes a patch of a
//! replaced pod a 409.

use crate::kube::client::rest::Request;
use crate::kube::client::{Client, KubeError};
use crate::sim::resources::Resource;
use crate::sim::store::{RecvTimeoutError, Selectors, Store, WatchFrom};
use parking_lot::{Condvar, Mutex};
use serde_json::{json, Value};
use std::collections::{HashMap, HashSet};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};
use ureq::http::Method;

use super::mirror::Gone;

/// Parallel senders: a hung write holds one of them.
const SENDERS: usize = 4;
/// Back-off of a pod whose write failed: from 200 ms, doubling to 5 s.
const RETRY_FIRST: Duration = Duration::from_millis(200);
const RETRY_MAX: Duration = Duration::from_secs(5);

struct Entry {
    ns: String,
    name: String,
    /// The kubelet's latest status.
    status: Value,
    /// What the API server last accepted from us.
    sent: Option<Value>,
    /// The kubelet removed the pod: send the final delete after the status.
    delete: bool,
    in_flight: bool,
    retry_at: Option<Instant>,
    backoff: Duration,
}

impl Entry {
    fn pending(&self) -> bool {
        self.delete || self.sent.as_ref() != Some(&self.status)
    }
}

#[derive(Default)]
struct Table {
    pods: HashMap<String, Entry>,
}

struct Shared {
    table: Mutex<Table>,
    cv: Condvar,
    stop: AtomicBool,
    client: Client,
    gone: Arc<Gone>,
    /// Status writes the API server accepted, and final deletes (tests).
    patches: AtomicU64,
    deletes: AtomicU64,
}

/// The status manager's threads.
pub struct StatusManager {
    shared: Arc<Shared>,
    threads: Vec<std::thread::JoinHandle<()>>,
}

impl StatusManager {
    pub fn start(client: Client, store: Arc<Store>, gone: Arc<Gone>) -> std::io::Result<Self> {
        let shared = Arc::new(Shared {
            table: Mutex::new(Table::default()),
            cv: Condvar::new(),
            stop: AtomicBool::new(false),
            client,
            gone,
            patches: AtomicU64::new(0),
            deletes: AtomicU64::new(0),
        });
        let mut threads = Vec::new();
        let s = shared.clone();
        threads.push(
            std::thread::Builder::new()
                .name("node-status-watch".into())
                .spawn(move || route(&s, &store))?,
        );
        for _ in 0..SENDERS {
            let s = shared.clone();
            threads.push(
                std::thread::Builder::new()
                    .name("node-status-send".into())
                    .spawn(move || send_loop(&s))?,
            );
        }
        Ok(StatusManager { shared, threads })
    }

    /// Pods whose latest status or final delete has not reached the API
    /// server yet.
    pub fn backlog(&self) -> usize {
        let t = self.shared.table.lock();
        t.pods.values().filter(|e| e.pending()).count()
    }

    /// Status writes and final deletes the API server took.
    pub fn counts(&self) -> (u64, u64) {
        (
            self.shared.patches.load(Ordering::Relaxed),
            self.shared.deletes.load(Ordering::Relaxed),
        )
    }

    pub fn stop(&mut self) {
        self.shared.stop.store(true, Ordering::SeqCst);
        self.shared.cv.notify_all();
        for t in self.threads.drain(..) {
            let _ = t.join();
        }
    }
}

/// Feeds the table from the mirror's pod watch.
fn route(s: &Shared, store: &Store) {
    while !s.stop.load(Ordering::SeqCst) {
        let stream = match store.watch(
            Resource::Pod,
            None,
            Selectors::default(),
            WatchFrom::InitialAdded,
        ) {
            Ok(w) => w,
            Err(e) => {
                log::warn!("node: status watch of the mirror: {e:?}");
                std::thread::sleep(Duration::from_millis(100));
                continue;
            }
        };
        // After a re-watch, pods the table holds that the mirror no longer
        // has were removed while this thread was cut off.
        let mut seen = HashSet::new();
        let mut initial = true;
        loop {
            if s.stop.load(Ordering::SeqCst) {
                return;
            }
            match stream.recv_timeout(Duration::from_millis(250)) {
                Ok(ev) => {
                    let deleted = matches!(ev.ty, crate::kube::watch::EventType::Deleted);
                    if initial {
                        if let Some(uid) = ev.object["metadata"]["uid"].as_str() {
                            seen.insert(uid.to_string());
                        }
                    }
                    note(s, &ev.object, deleted);
                }
                Err(RecvTimeoutError::Timeout) => {
                    if initial {
                        initial = false;
                        sweep(s, &seen);
                    }
                }
                Err(RecvTimeoutError::Disconnected) => break,
            }
        }
    }
}

/// Pods in the table that the mirror did not list: removed meanwhile.
fn sweep(s: &Shared, seen: &HashSet<String>) {
    let mut t = s.table.lock();
    let mut any = false;
    for (uid, e) in t.pods.iter_mut() {
        if !seen.contains(uid) && !e.delete {
            log::debug!(
                "node: pod {}/{} left the mirror unseen: final delete",
                e.ns,
                e.name
            );
            e.delete = true;
            any = true;
        }
    }
    drop(t);
    if any {
        s.cv.notify_all();
    }
}

fn note(s: &Shared, pod: &Value, deleted: bool) {
    let meta = &pod["metadata"];
    let Some(uid) = meta["uid"].as_str() else {
        return;
    };
    let mut t = s.table.lock();
    if deleted && s.gone.contains(uid) {
        // The API server deleted it: nothing to tell it.
        t.pods.remove(uid);
        return;
    }
    let status = upstream_status(&pod["status"]);
    if deleted {
        log::debug!(
            "node: pod {}/{} left the mirror (phase {})",
            meta["namespace"],
            meta["name"],
            status["phase"]
        );
    }
    let e = t.pods.entry(uid.to_string()).or_insert_with(|| Entry {
        ns: meta["namespace"].as_str().unwrap_or("").to_string(),
        name: meta["name"].as_str().unwrap_or("").to_string(),
        status: Value::Null,
        // What the API server holds when the mirror first sees the pod.
        sent: Some(upstream_status(&pod["status"])),
        delete: false,
        in_flight: false,
        retry_at: None,
        backoff: RETRY_FIRST,
    });
    e.status = status;
    e.delete |= deleted;
    let wake = e.pending();
    drop(t);
    if wake {
        s.cv.notify_one();
    }
}

/// What of the kubelet's status goes upstream.
pub fn upstream_status(status: &Value) -> Value {
    let mut st = status.clone();
    if let Some(m) = st.as_object_mut() {
        m.remove("qosClass");
        if let Some(conds) = m.get_mut("conditions").and_then(Value::as_array_mut) {
            conds.retain(|c| c["type"] != "PodScheduled");
        }
    }
    st
}

/// One sender: takes the next due pod, writes, repeats.
fn send_loop(s: &Shared) {
    loop {
        let job = {
            let mut t = s.table.lock();
            loop {
                if s.stop.load(Ordering::SeqCst) {
                    return;
                }
                let now = Instant::now();
                let mut next_due: Option<Instant> = None;
                let pick = t
                    .pods
                    .iter()
                    .filter(|(_, e)| !e.in_flight && e.pending())
                    .find_map(|(uid, e)| match e.retry_at {
                        Some(at) if at > now => {
                            next_due = Some(next_due.map_or(at, |n: Instant| n.min(at)));
                            None
                        }
                        _ => Some(uid.clone()),
                    });
                if let Some((uid, e)) = pick.and_then(|uid| {
                    let e = t.pods.get_mut(&uid)?;
                    Some((uid, e))
                }) {
                    e.in_flight = true;
                    break (
                        uid,
                        e.ns.clone(),
                        e.name.clone(),
                        e.status.clone(),
                        e.sent.clone(),
                        e.delete,
                    );
                }
                let wait = next_due.map_or(Duration::from_secs(1), |at| {
                    at.saturating_duration_since(now)
                        .max(Duration::from_millis(10))
                });
                s.cv.wait_for(&mut t, wait);
            }
        };
        let (uid, ns, name, status, sent, delete) = job;
        let outcome = write(s, &uid, &ns, &name, &status, sent.as_ref(), delete);
        let mut t = s.table.lock();
        match outcome {
            Outcome::Done { deleted } => {
                if deleted {
                    t.pods.remove(&uid);
                } else if let Some(e) = t.pods.get_mut(&uid) {
                    e.in_flight = false;
                    e.sent = Some(status);
                    e.retry_at = None;
                    e.backoff = RETRY_FIRST;
                }
            }
            Outcome::Forget => {
                t.pods.remove(&uid);
            }
            Outcome::Retry => {
                if let Some(e) = t.pods.get_mut(&uid) {
                    e.in_flight = false;
                    e.retry_at = Some(Instant::now() + e.backoff);
                    e.backoff = (e.backoff * 2).min(RETRY_MAX);
                }
            }
        }
        drop(t);
        s.cv.notify_one();
    }
}

enum Outcome {
    /// Written (and, for a final delete, deleted).
    Done {
        deleted: bool,
    },
    /// The pod is gone or was replaced: nothing more to tell about it.
    Forget,
    Retry,
}

fn write(
    s: &Shared,
    uid: &str,
    ns: &str,
    name: &str,
    status: &Value,
    sent: Option<&Value>,
    delete: bool,
) -> Outcome {
    let path = format!("/api/v1/namespaces/{ns}/pods/{name}");
    if sent != Some(status) && !status.is_null() {
        let body = json!({"metadata": {"uid": uid}, "status": status});
        let req = Request::new(Method::PATCH, format!("{path}/status")).body(
            body.to_string().into_bytes(),
            "application/strategic-merge-patch+json",
        );
        match s.client.send(&req) {
            Ok(_) => {
                s.patches.fetch_add(1, Ordering::Relaxed);
            }
            Err(e) => return failed(ns, name, "status", &e),
        }
    }
    if !delete {
        return Outcome::Done { deleted: false };
    }
    let body = json!({
        "apiVersion": "v1", "kind": "DeleteOptions",
        "gracePeriodSeconds": 0,
        "preconditions": {"uid": uid},
    });
    let req = Request::new(Method::DELETE, path).json(body.to_string().into_bytes());
    match s.client.send(&req) {
        Ok(_) => {
            s.deletes.fetch_add(1, Ordering::Relaxed);
            log::debug!(
                "node: pod {ns}/{name} deleted after its status (phase {})",
                status["phase"]
            );
            Outcome::Done { deleted: true }
        }
        Err(e) => failed(ns, name, "delete", &e),
    }
}

fn failed(ns: &str, name: &str, what: &str, e: &KubeError) -> Outcome {
    match e {
        // Gone, or replaced by a pod of the same name: not ours to write.
        KubeError::NotFound(_) | KubeError::Conflict(_) => Outcome::Forget,
        // A status the API server will never take: say so once, do not loop.
        KubeError::Invalid { .. } | KubeError::BadRequest(_) => {
            log::warn!("node: {what} of pod {ns}/{name} refused: {e}");
            Outcome::Forget
        }
        _ => {
            log::debug!("node: {what} of pod {ns}/{name}: {e} (retrying)");
            Outcome::Retry
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn what_goes_upstream_leaves_the_servers_and_schedulers_fields() {
        let st = json!({
            "phase": "Running", "qosClass": "BestEffort",
            "conditions": [{"type": "PodScheduled", "status": "True"}, {"type": "Ready", "status": "True"}],
            "podIP": "127.244.1.1",
        });
        let up = upstream_status(&st);
        assert!(up.get("qosClass").is_none());
        assert_eq!(
            up["conditions"],
            json!([{"type": "Ready", "status": "True"}])
        );
        assert_eq!(up["podIP"], "127.244.1.1");
    }
}
