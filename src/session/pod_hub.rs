//! One pod watch for every session (docs/sessions.md#while-running: the pod
//! watch), instead of one watch connection and one thread per session.
//!
//! ```text
//!  API server ── watch pods (labels: managed-by, mode=watch) ──> session-pods thread
//!                                                                  │ PodHub::apply
//!                                                                  v
//!              cache (name -> last Pod) + tombstones (name -> deleted at)
//!                                                                  │ under the lock
//!                                                                  v
//!              routes (pod name -> the session's deliver callback; never blocks)
//! ```
//!
//! A session registers its pod's name (`Command::WatchPod`) and gets the
//! pod's state at once when the hub already saw it (the watch may have
//! reported the pod before the session's create call returned), `Gone` when
//! the hub saw it deleted (a tombstone, kept for [`TOMBSTONE_TTL`]), and
//! every later change. Pod names are fresh at every (re)create, so a name
//! never means two pods. The hub's [`Watcher`](crate::kube::client::watch::Watcher) resumes from its last
//! resourceVersion and relists after 410 (a `Resynced` list: every cached
//! pod missing from it was deleted meanwhile); a watch that ends (a
//! non-retryable answer) is re-armed after [`REARM_AFTER`].
//!
//! Delivery runs under the hub's lock and must not block: the engine's
//! callback `try_send`s into the session's inbox and parks what a full
//! inbox refused in a per-session overflow the owner drains (latest state
//! per pod wins there, which is all a pod observation needs).

use crate::kube::client::{Api, Client, Pod, WatchEvent, WatchParams, WatchStopper};
use crossbeam_channel::{bounded, Receiver, Sender};
use parking_lot::Mutex;
use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// How long a deleted pod's name is remembered: 10 min (a session
/// registering after its pod vanished learns it at once).
pub const TOMBSTONE_TTL: Duration = Duration::from_secs(600);
/// Pause before a watch that ended is started again (docs/sessions.md#while-running: 2 s).
pub const REARM_AFTER: Duration = Duration::from_secs(2);

/// What a session hears about its pod.
#[derive(Debug, Clone)]
pub enum PodUpdate {
    Observed(Box<Pod>),
    Gone(String),
}

/// A session's way to receive its pod's updates. Called under the hub's
/// lock: must not block.
pub type Deliver = Box<dyn FnMut(PodUpdate) + Send>;

#[derive(Default)]
struct State {
    cache: HashMap<String, Pod>,
    gone: HashMap<String, Instant>,
    routes: HashMap<String, Deliver>,
}

/// The shared pod watch (see the module docs).
pub struct PodHub {
    state: Mutex<State>,
    stopped: AtomicBool,
    stopper: Mutex<Option<WatchStopper>>,
    stop_tx: Mutex<Option<Sender<()>>>,
}

impl PodHub {
    /// A hub fed by hand (tests, and the thread of [`PodHub::start`]).
    pub fn new() -> Arc<PodHub> {
        Arc::new(PodHub {
            state: Mutex::new(State::default()),
            stopped: AtomicBool::new(false),
            stopper: Mutex::new(None),
            stop_tx: Mutex::new(None),
        })
    }

    /// Starts the `session-pods` thread watching `namespace`'s pods that
    /// match `label_selector`.
    pub fn start(client: Client, namespace: &str, label_selector: String) -> Arc<PodHub> {
        let hub = PodHub::new();
        let (stop_tx, stop_rx) = bounded::<()>(0);
        *hub.stop_tx.lock() = Some(stop_tx);
        let api = Api::<Pod>::namespaced(&client, namespace);
        let h = hub.clone();
        let spawned = std::thread::Builder::new()
            .name("session-pods".into())
            .spawn(move || h.run(&api, label_selector, &stop_rx));
        if let Err(e) = spawned {
            // Sessions then never see their pods and fail at their start
            // deadline, saying so; the daemon itself keeps serving.
            log::error!("spawning the session pod watch: {e}");
        }
        hub
    }

    fn run(&self, api: &Api<Pod>, selector: String, stop_rx: &Receiver<()>) {
        while !self.stopped.load(Ordering::SeqCst) {
            let watcher = api.watch(WatchParams {
                label_selector: Some(selector.clone()),
                ..WatchParams::default()
            });
            *self.stopper.lock() = Some(watcher.stopper());
            // A stop between the check above and storing the stopper.
            if self.stopped.load(Ordering::SeqCst) {
                break;
            }
            for ev in watcher {
                match ev {
                    Ok(ev) => self.apply(ev),
                    // The watcher retries by itself and logs; a
                    // non-retryable answer ends it (re-armed below).
                    Err(e) => log::warn!("session pod watch: {e}"),
                }
            }
            if self.stopped.load(Ordering::SeqCst) {
                break;
            }
            log::warn!(
                "session pod watch ended; again in {} s",
                REARM_AFTER.as_secs()
            );
            let _ = stop_rx.recv_timeout(REARM_AFTER);
        }
    }

    /// Ends the watch thread (daemon shutdown).
    pub fn stop(&self) {
        self.stopped.store(true, Ordering::SeqCst);
        if let Some(s) = self.stopper.lock().take() {
            s.stop();
        }
        self.stop_tx.lock().take();
    }

    /// Routes `name`'s updates to `deliver` (replacing an earlier route),
    /// starting with what the hub already knows of it.
    pub fn register(&self, name: &str, mut deliver: Deliver) {
        let mut st = self.state.lock();
        prune(&mut st, Instant::now());
        if let Some(p) = st.cache.get(name) {
            deliver(PodUpdate::Observed(Box::new(p.clone())));
        } else if st.gone.contains_key(name) {
            deliver(PodUpdate::Gone(name.to_string()));
        }
        st.routes.insert(name.to_string(), deliver);
    }

    /// Stops routing `name`'s updates.
    pub fn unregister(&self, name: &str) {
        self.state.lock().routes.remove(name);
    }

    /// Pods currently cached and routes held (metrics, tests).
    pub fn sizes(&self) -> (usize, usize) {
        let st = self.state.lock();
        (st.cache.len(), st.routes.len())
    }

    /// Takes one watch event into the cache and hands it to its route.
    pub fn apply(&self, ev: WatchEvent<Pod>) {
        let mut st = self.state.lock();
        let now = Instant::now();
        match ev {
            WatchEvent::Added(p) | WatchEvent::Modified(p) => observed(&mut st, p),
            WatchEvent::Deleted(p) => {
                let name = p.metadata.name().to_string();
                deleted(&mut st, &name, now);
            }
            WatchEvent::Resynced { items, .. } => {
                let listed: std::collections::HashSet<String> = items
                    .iter()
                    .map(|p| p.metadata.name().to_string())
                    .collect();
                let vanished: Vec<String> = st
                    .cache
                    .keys()
                    .filter(|n| !listed.contains(*n))
                    .cloned()
                    .collect();
                for name in vanished {
                    deleted(&mut st, &name, now);
                }
                // A routed pod the hub never saw and the list does not
                // hold either: created and deleted while the watch was
                // down, or not created yet. Left to the session's start
                // deadline; the cache cannot tell the two apart.
                for p in items {
                    observed(&mut st, p);
                }
            }
        }
        prune(&mut st, now);
    }
}

fn observed(st: &mut State, mut p: Pod) {
    // The daemon never reads `managedFields`, and a pod's can outweigh the
    // rest of it: dropped before the pod is cached or handed on, as
    // client-go's informers' StripManagedFields transform does. (Nothing
    // the daemon writes back is built from these copies' metadata; an
    // update that omits `managedFields` keeps the server's anyway.)
    p.metadata.extra.remove("managedFields");
    let name = p.metadata.name().to_string();
    if let Some(deliver) = st.routes.get_mut(&name) {
        deliver(PodUpdate::Observed(Box::new(p.clone())));
    }
    st.gone.remove(&name);
    st.cache.insert(name, p);
}

fn deleted(st: &mut State, name: &str, now: Instant) {
    st.cache.remove(name);
    st.gone.insert(name.to_string(), now);
    if let Some(deliver) = st.routes.get_mut(name) {
        deliver(PodUpdate::Gone(name.to_string()));
    }
}

fn prune(st: &mut State, now: Instant) {
    st.gone
        .retain(|_, at| now.saturating_duration_since(*at) < TOMBSTONE_TTL);
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn pod(name: &str, phase: &str) -> Pod {
        serde_json::from_value(json!({
            "apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": name, "namespace": "default"},
            "status": {"phase": phase}
        }))
        .unwrap()
    }

    fn phase(u: &PodUpdate) -> String {
        match u {
            PodUpdate::Observed(p) => {
                let v = serde_json::to_value(&**p).unwrap();
                format!(
                    "{}:{}",
                    p.metadata.name(),
                    v["status"]["phase"].as_str().unwrap_or("?")
                )
            }
            PodUpdate::Gone(n) => format!("{n}:gone"),
        }
    }

    fn route(hub: &PodHub, name: &str) -> Arc<Mutex<Vec<String>>> {
        let seen = Arc::new(Mutex::new(Vec::new()));
        let s = seen.clone();
        hub.register(name, Box::new(move |u| s.lock().push(phase(&u))));
        seen
    }

    #[test]
    fn managed_fields_are_neither_cached_nor_handed_on() {
        let hub = PodHub::new();
        let got = Arc::new(Mutex::new(Vec::new()));
        let g = got.clone();
        hub.register(
            "a",
            Box::new(move |u| {
                if let PodUpdate::Observed(p) = u {
                    g.lock()
                        .push(p.metadata.extra.contains_key("managedFields"));
                }
            }),
        );
        let mut p = pod("a", "Running");
        p.metadata
            .extra
            .insert("managedFields".into(), json!([{"manager": "m"}]));
        p.metadata.extra.insert("selfLink".into(), json!("/x"));
        hub.apply(WatchEvent::Added(p));
        assert_eq!(*got.lock(), vec![false]);
        let cached = hub.state.lock().cache.get("a").cloned().unwrap();
        assert!(!cached.metadata.extra.contains_key("managedFields"));
        assert!(
            cached.metadata.extra.contains_key("selfLink"),
            "only managedFields goes"
        );
    }

    #[test]
    fn a_session_registering_late_gets_the_pod_it_missed() {
        let hub = PodHub::new();
        hub.apply(WatchEvent::Added(pod("a", "Pending")));
        hub.apply(WatchEvent::Modified(pod("a", "Running")));
        let seen = route(&hub, "a");
        assert_eq!(*seen.lock(), vec!["a:Running"]);
        hub.apply(WatchEvent::Modified(pod("a", "Failed")));
        assert_eq!(*seen.lock(), vec!["a:Running", "a:Failed"]);
    }

    #[test]
    fn updates_go_only_to_their_own_pod_route_until_unregistered() {
        let hub = PodHub::new();
        let a = route(&hub, "a");
        let b = route(&hub, "b");
        hub.apply(WatchEvent::Added(pod("a", "Pending")));
        hub.apply(WatchEvent::Added(pod("c", "Pending")));
        assert_eq!(*a.lock(), vec!["a:Pending"]);
        assert!(b.lock().is_empty());
        hub.unregister("a");
        hub.apply(WatchEvent::Modified(pod("a", "Running")));
        assert_eq!(a.lock().len(), 1);
        assert_eq!(hub.sizes(), (2, 1));
    }

    #[test]
    fn deletion_is_reported_and_remembered_for_late_registrations() {
        let hub = PodHub::new();
        let a = route(&hub, "a");
        hub.apply(WatchEvent::Added(pod("a", "Running")));
        hub.apply(WatchEvent::Deleted(pod("a", "Running")));
        assert_eq!(*a.lock(), vec!["a:Running", "a:gone"]);
        let late = route(&hub, "a");
        assert_eq!(*late.lock(), vec!["a:gone"]);
        assert_eq!(hub.sizes().0, 0);
    }

    #[test]
    fn a_relist_reports_pods_deleted_while_the_watch_was_down() {
        let hub = PodHub::new();
        let a = route(&hub, "a");
        let b = route(&hub, "b");
        hub.apply(WatchEvent::Added(pod("a", "Running")));
        hub.apply(WatchEvent::Added(pod("b", "Running")));
        hub.apply(WatchEvent::Resynced {
            items: vec![pod("b", "Succeeded")],
            resource_version: "9".into(),
        });
        assert_eq!(*a.lock(), vec!["a:Running", "a:gone"]);
        assert_eq!(*b.lock(), vec!["b:Running", "b:Succeeded"]);
    }
}
