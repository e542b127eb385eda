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
    // Uids this thread has put in the mirror, until the API server says
    // they are gone: one the mirror no longer holds was finished by the
    // kubelet (its graceful delete done, the final delete on its way), and
    // the API server's events for it until then must not bring it back (a
    // new pod thread would run its containers again).
    let mut known: HashSet<String> = HashSet::new();
    for ev in watcher {
        match ev {
            Ok(WatchEvent::Added(p)) | Ok(WatchEvent::Modified(p)) => {
                put(store, p, &mut known);
            }
            Ok(WatchEvent::Deleted(p)) => {
                if let Some(uid) = p["metadata"]["uid"].as_str() {
                    known.remove(uid);
                }
                remove(store, gone, &p);
            }
            Ok(WatchEvent::Resynced { items, .. }) => {
                let live: HashSet<String> = items
                    .iter()
                    .filter_map(|p| p["metadata"]["uid"].as_str().map(str::to_string))
                    .collect();
                known.retain(|uid| live.contains(uid));
                for p in items {
                    put(store, p, &mut known);
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

/// Mirrors one pod (its namespace first: the kubelet's Events need it),
/// unless the kubelet has finished it (see `known` in [`run`]).
fn put(store: &Store, pod: Value, known: &mut HashSet<String>) {
    let ns = pod["metadata"]["namespace"].as_str().unwrap_or("");
    let name = pod["metadata"]["name"].as_str().unwrap_or("");
    let uid = pod["metadata"]["uid"].as_str().unwrap_or("");
    if ns.is_empty() || uid.is_empty() {
        return;
    }
    if known.contains(uid) {
        let held = store
            .get(Resource::Pod, ns, name)
            .is_ok_and(|p| p["metadata"]["uid"] == uid);
        if !held {
            return;
        }
    }
    known.insert(uid.to_string());
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sim::store::StoreConfig;
    use serde_json::json;

    fn pod(uid: &str, rv: &str) -> Value {
        json!({"apiVersion": "v1", "kind": "Pod",
               "metadata": {"name": "p", "namespace": "ns", "uid": uid, "resourceVersion": rv},
               "spec": {"containers": [{"name": "c", "image": "i"}]},
               "status": {"phase": "Running"}})
    }

    /// A pod the kubelet finished (its graceful delete done, so it left
    /// the mirror) is not brought back by the API server's events that
    /// still come for it before its DELETED; a new pod of that name is
    /// mirrored. It used to come back, and a second pod thread ran its
    /// containers again and sent a Running status with its final delete.
    #[test]
    fn a_finished_pod_is_not_mirrored_again() {
        let store = Store::new(StoreConfig::default());
        let mut known = HashSet::new();
        put(&store, pod("u1", "1"), &mut known);
        assert!(store.get(Resource::Pod, "ns", "p").is_ok());
        // The kubelet finishes it.
        let pre = Preconditions {
            uid: Some("u1".into()),
            resource_version: None,
        };
        store
            .delete(Resource::Pod, "ns", "p", &pre)
            .expect("delete");
        put(&store, pod("u1", "2"), &mut known);
        assert!(store.get(Resource::Pod, "ns", "p").is_err(), "brought back");
        // A new pod of the same name.
        put(&store, pod("u2", "3"), &mut known);
        let got = store.get(Resource::Pod, "ns", "p").expect("the new pod");
        assert_eq!(got["metadata"]["uid"], "u2");
    }
}
