//! The node's pods, mirrored: one watch of the API server's pods with
//! `spec.nodeName=NAME` (all the Node authorizer lets a node list) kept in
//! a private [`Store`], where the kubelet (`sim::kubelet`) finds them as
//! the embedded sim's kubelet finds its own. Metadata and spec come from
//! the API server; status is the kubelet's own once it has written one
//! (`Store::put_mirrored` keeps it), and goes back through
//! [`super::status`].
//!
//! A pod the API server no longer has (deleted, or gone while the watch
//! was cut: a relist's `Resynced` no longer names it) is removed here,
//! which kills its processes; its uid is remembered in [`Gone`] first, so
//! the status manager does not try to delete it upstream again.

use crate::kube::client::{Client, WatchEvent, WatchParams, WatchStopper, Watcher};
use crate::sim::resources::Resource;
use crate::sim::store::{Preconditions, Selectors, Store, StoreError};
use parking_lot::Mutex;
use serde_json::{json, Value};
use std::collections::HashSet;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// Uids of pods the API server deleted (most recent last), so the status
/// manager sends no final delete for them. Bounded: the oldest go first.
#[derive(Default)]
pub struct Gone {
    uids: Mutex<(HashSet<String>, std::collections::VecDeque<String>)>,
}

const GONE_REMEMBERED: usize = 10_000;

impl Gone {
    pub fn insert(&self, uid: &str) {
        let mut g = self.uids.lock();
        if g.0.insert(uid.to_string()) {
            g.1.push_back(uid.to_string());
            while g.1.len() > GONE_REMEMBERED {
                if let Some(old) = g.1.pop_front() {
                    g.0.remove(&old);
                }
            }
        }
    }

    pub fn contains(&self, uid: &str) -> bool {
        self.uids.lock().0.contains(uid)
    }
}

/// The pod watch's handle: [`Mirror::stop`] ends its thread.
pub struct Mirror {
    stopper: WatchStopper,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl Mirror {
    /// Starts mirroring the pods bound to `node` into `store`.
    pub fn start(
        client: &Client,
        node: &str,
        store: Arc<Store>,
        gone: Arc<Gone>,
    ) -> std::io::Result<Mirror> {
        let params = WatchParams {
            field_selector: Some(format!("spec.nodeName={node}")),
            // An outage of the API server should cost seconds, not client-go's 30.
            max_backoff: Duration::from_secs(4),
            ..WatchParams::default()
        };
        let watcher: Watcher<Value> = Watcher::new(client, "/api/v1/pods".into(), params);
        let stopper = watcher.stopper();
        let thread = std::thread::Builder::new()
            .name("node-pods".into())
            .spawn(move || run(watcher, &store, &gone))?;
        Ok(Mirror {
            stopper,
            thread: Some(thread),
        })
    }

    pub fn stop(&mut self) {
        self.stopper.stop();
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

fn run(watcher: Watcher<Value>, store: &Store, gone: &Gone) {
    let mut last_error_log: Option<Instant> = None;
    for ev in watcher {
        match ev {
            Ok(WatchEvent::Added(p)) | Ok(WatchEvent::Modified(p)) => put(store, p),
            Ok(WatchEvent::Deleted(p)) => remove(store, gone, &p),
            Ok(WatchEvent::Resynced { items, .. }) => {
                let live: HashSet<String> = items
                    .iter()
                    .filter_map(|p| p["metadata"]["uid"].as_str().map(str::to_string))
                    .collect();
                for p in items {
                    put(store, p);
                }
                let (mirrored, _) = store.list(Resource::Pod, None, &Selectors::default());
                for p in mirrored {
                    let uid = p["metadata"]["uid"].as_str().unwrap_or("");
                    if !live.contains(uid) {
                        remove(store, gone, &p);
                    }
                }
            }
            Err(e) => {
                // One line per 10 s at most: an outage is one story.
                if last_error_log.is_none_or(|t| t.elapsed() >= Duration::from_secs(10)) {
                    log::warn!("node: pod watch: {e}");
                    last_error_log = Some(Instant::now());
                }
            }
        }
    }
}

/// Mirrors one pod (its namespace first: the kubelet's Events need it).
fn put(store: &Store, pod: Value) {
    let ns = pod["metadata"]["namespace"].as_str().unwrap_or("");
    if ns.is_empty() || pod["metadata"]["uid"].as_str().unwrap_or("").is_empty() {
        return;
    }
    if store.get(Resource::Namespace, "", ns).is_err() {
        let obj = json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": ns}});
        match store.create(Resource::Namespace, "", obj) {
            Ok(_) | Err(StoreError::AlreadyExists { .. }) => {}
            Err(e) => log::warn!("node: mirroring namespace {ns}: {e}"),
        }
    }
    store.put_mirrored(Resource::Pod, pod, true);
}

fn remove(store: &Store, gone: &Gone, pod: &Value) {
    let meta = &pod["metadata"];
    let (ns, name, uid) = (
        meta["namespace"].as_str().unwrap_or(""),
        meta["name"].as_str().unwrap_or(""),
        meta["uid"].as_str().unwrap_or(""),
    );
    gone.insert(uid);
    let pre = Preconditions {
        uid: Some(uid.to_string()),
        resource_version: None,
    };
    match store.delete(Resource::Pod, ns, name, &pre) {
        Ok(_) | Err(StoreError::NotFound { .. }) | Err(StoreError::Conflict { .. }) => {}
        Err(e) => log::warn!("node: removing pod {ns}/{name}: {e}"),
    }
}
