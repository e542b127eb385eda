//! The sim's kubelet: binds every pod to the one node `sim-node`, gives it a
//! loopback pod IP and a host folder, runs its containers as local processes
//! (through `runtime`), and keeps the pod's status true: phase, conditions,
//! container states, restart counts. It restarts containers by policy with
//! CrashLoopBackOff back-off, enforces activeDeadlineSeconds, and finishes
//! graceful deletes (SIGTERM, SIGKILL after the grace period, then removal).
//!
//! Threads: one watcher thread ("sim-kubelet") routes pod events by uid to
//! one owner thread per pod ("sim-pod-…"; its inbox holds 256 messages and
//! the watcher waits when it is full), which alone changes that pod's
//! processes and status; one small waiter thread per running process turns
//! its exit into a message for the owner. Pods annotated
//! `sim.kubegate.dev/simulate: "true"` run no processes at all (their
//! containers are reported running), so the API server can be measured with
//! thousands of pods.
//!
//! - here: the kubelet itself (start, shutdown, the watcher that routes pod
//!   events and keeps the Node (`sim::node`), simulated pods, pod IPs,
//!   `killContainer`), the handles
//!   exec/attach/logs read, and the ConfigMap/Secret lookup of env and
//!   volumes.
//! - `worker.rs`: the per-pod owner thread and its container states.

use super::faults::{Faults, KillError};
use super::resources::Resource;
use super::runtime::{Process, Runtime};
use super::store::{Selectors, Store, StoreError, WatchFrom};
use crate::kube::time::now_rfc3339;
use crossbeam_channel::{bounded, RecvTimeoutError, Sender};
use parking_lot::Mutex;
use serde_json::{json, Value};
use std::collections::{BTreeMap, HashMap};
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

mod worker;

use worker::PodWorker;

pub const NODE_NAME: &str = "sim-node";
pub const HOST_IP: &str = "127.0.0.1";
/// Annotation that makes a pod's containers simulated (no processes).
pub const SIMULATE_ANNOTATION: &str = "sim.kubegate.dev/simulate";
pub struct KubeletConfig {
    pub store: Arc<Store>,
    pub faults: Arc<Faults>,
    pub state_dir: PathBuf,
    pub fail_images: Vec<String>,
    /// Where pods' folders live, as configured: refused at start when pod
    /// users cannot reach it.
    pub pods_dir: Option<PathBuf>,
    /// Where they live when none is configured (`None`: `<state_dir>/pods`);
    /// when pod users cannot reach it, a fresh folder under the system's
    /// temporary folder for this run instead (`pod_users::temp_root`).
    pub default_pods_dir: Option<PathBuf>,
    /// Host ids for pods (docs/sim.md, "Pod users"); `None`: run every
    /// process as the sim's own user.
    pub uid_range: Option<(u32, u32)>,
    /// Which node this kubelet is, and what it may do there.
    pub role: NodeRole,
}

/// Which node a kubelet is and how it stands to its API server: the
/// embedded sim's `sim-node`, which is its own scheduler, or a node of a
/// real control plane (`sim::nodemode`), which never binds a pod and reads
/// ConfigMaps and Secrets over HTTP.
#[derive(Clone)]
pub struct NodeRole {
    /// The Node's name (`spec.nodeName`, the Events' `source.host`).
    pub name: &'static str,
    /// The second octet B of the pod block `127.B.0.0/16`; `None`: drawn
    /// at random from [`EMBEDDED_BLOCKS`].
    pub pod_block: Option<u8>,
    /// Binds pods itself (the embedded sim: no scheduler) and writes the
    /// scheduler's `Scheduled` Event.
    pub binds: bool,
    /// Where ConfigMaps and Secrets are read; `None`: the store.
    pub config: Option<Arc<dyn ConfigSource>>,
}

impl NodeRole {
    /// The embedded (and standalone) sim's node.
    pub fn embedded() -> NodeRole {
        NodeRole {
            name: NODE_NAME,
            pod_block: None,
            binds: true,
            config: None,
        }
    }
}

/// The second octets an embedded or standalone sim draws its pod block
/// from: 240-254 are left to nodes that join a real control plane (the
/// test harness's kwok at 127.243, `kubegate sim node` at 127.244 by
/// default), so a sim's pod never takes a node's pod's address.
pub const EMBEDDED_BLOCKS: std::ops::RangeInclusive<u8> = 1..=239;

/// Reads a ConfigMap's or Secret's data for env and volumes, decoded:
/// `None` while it cannot be read (missing, or refused for now: a node's
/// authorizer learns of a pod's Secrets a moment after the pod is bound),
/// and the pod worker tries again.
pub trait ConfigSource: Send + Sync {
    fn lookup(&self, ns: &str, kind: &str, name: &str) -> Option<BTreeMap<String, Vec<u8>>>;
}

/// A running container, as exec/attach/log see it.
#[derive(Clone)]
pub struct ContainerHandle {
    pub name: String,
    /// The container's latest process (it may have ended: check `exited`).
    pub process: Option<Arc<Process>>,
    /// The process before it, for `logs --previous`.
    pub previous: Option<Arc<Process>>,
    pub spec: Value,
    pub pod: Value,
    pub pod_dir: PathBuf,
    pub pod_ip: String,
    /// The pod's host id (`podspec::process_user`), when users are switched.
    pub pod_id: Option<u32>,
}

enum PodMsg {
    /// Look at [`PodShared::latest`] and [`PodShared::deleted`]: the
    /// watcher never waits on a pod thread, it leaves the pod's newest
    /// state there and wakes the thread (a full inbox already holds a wake).
    Wake,
    Exited {
        container: String,
        generation: u64,
    },
    Kill {
        container: String,
    },
}

struct PodEntry {
    tx: Sender<PodMsg>,
    shared: Arc<PodShared>,
}

/// What other threads may read about a pod's containers, and what the
/// watcher leaves for the pod's thread.
#[derive(Default)]
struct PodShared {
    containers: Mutex<BTreeMap<String, ContainerHandle>>,
    /// The pod's newest state from the watch, not yet taken by its thread.
    latest: Mutex<Option<Value>>,
    /// The pod is gone (deleted, or the kubelet stops).
    deleted: AtomicBool,
}

impl PodEntry {
    /// Leaves news for the pod's thread and wakes it; never waits.
    fn tell(&self, pod: Option<Value>) {
        match pod {
            Some(p) => *self.shared.latest.lock() = Some(p),
            None => self.shared.deleted.store(true, Ordering::SeqCst),
        }
        let _ = self.tx.try_send(PodMsg::Wake);
    }
}

pub struct Kubelet {
    pub(crate) store: Arc<Store>,
    pub(crate) runtime: Arc<Runtime>,
    pods_dir: PathBuf,
    /// The pods' folder made for this run (removed at shutdown).
    temp_pods_dir: Option<PathBuf>,
    fail_images: Vec<String>,
    pub(crate) self_exe: PathBuf,
    /// The host id pool when pods run as their own users.
    users: Option<Mutex<super::pod_users::IdPool>>,
    /// The sim's effective uid (what pods run as without `users`).
    pub(crate) sim_uid: u32,
    pods: Mutex<HashMap<String, PodEntry>>,
    /// Pod IPs of simulated pods (they have no thread to own them).
    simulated_ips: Mutex<HashMap<String, String>>,
    ips: Mutex<IpPool>,
    stop: AtomicBool,
    watcher: Mutex<Option<std::thread::JoinHandle<()>>>,
    pub(crate) faults: Arc<Faults>,
    /// The Node, once registered ([`Kubelet::register_node`]); its Lease
    /// and heartbeats are kept by the watcher thread.
    node: Mutex<Option<super::node::NodeAgent>>,
    /// The pod lifecycle's Events (docs/sim.md#events), as `kubelet` on
    /// this node.
    pub(crate) recorder: super::events::Recorder,
    pub(crate) role: NodeRole,
}

/// Loopback pod IPs 127.B.x.y (B drawn per sim, x >= 1), handed out round-robin so an
/// address is reused as late as possible.
struct IpPool {
    /// The second octet: each sim draws its own `127.B.0.0/16` block, and a
    /// random start in it, so concurrent sims (parallel tests, a daemon's
    /// embedded sim beside a standalone one) do not hand out the same pod
    /// addresses, where two pods' servers on one port would collide.
    block: u32,
    next: u32,
    used: std::collections::HashSet<u32>,
}

impl IpPool {
    const FIRST: u32 = 256; // 127.B.1.0
    const LAST: u32 = 65_534; // 127.B.255.254

    fn alloc(&mut self) -> Option<String> {
        for _ in 0..(Self::LAST - Self::FIRST) {
            let n = self.next;
            self.next = if n >= Self::LAST { Self::FIRST } else { n + 1 };
            let (x, y) = (n >> 8, n & 0xff);
            if y == 0 || y == 255 || self.used.contains(&n) {
                continue;
            }
            self.used.insert(n);
            return Some(format!("127.{}.{x}.{y}", self.block));
        }
        None
    }

    /// Takes `ip` if it is in this block and free (a pod that had it before
    /// the node restarted keeps it).
    fn claim(&mut self, ip: &str) -> bool {
        match self.index_of(ip) {
            Some(n) if (Self::FIRST..=Self::LAST).contains(&n) => self.used.insert(n),
            _ => false,
        }
    }

    fn index_of(&self, ip: &str) -> Option<u32> {
        let parts: Vec<u32> = ip.split('.').filter_map(|p| p.parse().ok()).collect();
        match parts.as_slice() {
            [127, b, x, y] if *b == self.block && *x <= 255 && *y <= 255 => Some((x << 8) | y),
            _ => None,
        }
    }

    fn free(&mut self, ip: &str) {
        let parts: Vec<u32> = ip.split('.').filter_map(|p| p.parse().ok()).collect();
        if let [127, b, x, y] = parts.as_slice() {
            if *b == self.block {
                self.used.remove(&((x << 8) | y));
            }
        }
    }
}

impl Kubelet {
    pub fn start(cfg: KubeletConfig) -> std::io::Result<Arc<Kubelet>> {
        let runtime = Runtime::new(cfg.state_dir.join("runtime"))?;
        let self_exe = std::env::current_exe()?;
        let mut pods_dir = cfg.pods_dir.clone().unwrap_or_else(|| {
            cfg.default_pods_dir
                .clone()
                .unwrap_or_else(|| cfg.state_dir.join("pods"))
        });
        let mut temp_pods_dir = None;
        let users = match cfg.uid_range {
            Some(range) => {
                let missing = super::runtime::missing_capabilities();
                if missing.is_empty() {
                    let unreachable = super::pod_users::unreachable_above(&pods_dir)?;
                    if let (None, Some((dir, mode))) = (&cfg.pods_dir, unreachable) {
                        let temp = super::pod_users::temp_root()?;
                        log::info!(
                            "sim: the default pods' folder {} is out of reach of pod users ({} is mode {mode:04o}): using {} for this run",
                            pods_dir.display(),
                            dir.display(),
                            temp.display()
                        );
                        pods_dir = temp.clone();
                        temp_pods_dir = Some(temp);
                    }
                    super::pod_users::prepare_root(&pods_dir)?;
                    log::info!(
                        "sim: pods run as their own host users (ids {}-{}), folders in {}",
                        range.0,
                        range.1,
                        pods_dir.display()
                    );
                    Some(Mutex::new(super::pod_users::IdPool::new(range)))
                } else {
                    log::warn!(
                        "sim: cannot switch users (missing {}): every pod runs as this process's user and can read, change and signal everything it can, other pods included (docs/sim.md, \"Pod users\")",
                        missing.join(", ")
                    );
                    None
                }
            }
            None => {
                log::warn!(
                    "sim: pod users are off: every pod runs as this process's user and can read, change and signal everything it can, other pods included (docs/sim.md, \"Pod users\")"
                );
                None
            }
        };
        // Pods that run as this process's user need no folder outside its
        // private state: unless one is configured, they stay in it, where
        // the shipped unit (no capabilities, ProtectSystem=strict: only its
        // StateDirectory is writable) lets them be made at all.
        if users.is_none() && cfg.pods_dir.is_none() {
            pods_dir = cfg.state_dir.join("pods");
        }
        let k = Arc::new(Kubelet {
            store: cfg.store.clone(),
            runtime,
            pods_dir,
            temp_pods_dir,
            fail_images: cfg.fail_images,
            self_exe,
            users,
            sim_uid: rustix::process::geteuid().as_raw(),
            pods: Mutex::new(HashMap::new()),
            simulated_ips: Mutex::new(HashMap::new()),
            ips: Mutex::new({
                use rand::Rng;
                let mut rng = rand::rng();
                IpPool {
                    block: cfg
                        .role
                        .pod_block
                        .unwrap_or_else(|| rng.random_range(EMBEDDED_BLOCKS))
                        .into(),
                    next: rng.random_range(IpPool::FIRST..=IpPool::LAST),
                    used: Default::default(),
                }
            }),
            stop: AtomicBool::new(false),
            watcher: Mutex::new(None),
            faults: cfg.faults,
            node: Mutex::new(None),
            recorder: super::events::Recorder::new(cfg.store.clone(), "kubelet", cfg.role.name),
            role: cfg.role,
        });
        let weak = Arc::downgrade(&k);
        k.faults.set_killer(Box::new(move |ns, pod, container| {
            let k = weak.upgrade().ok_or(KillError::Stopped)?;
            k.kill_container(ns, pod, container)
        }));
        let k2 = k.clone();
        let h = std::thread::Builder::new()
            .name("sim-kubelet".into())
            .spawn(move || k2.watch_loop())?;
        *k.watcher.lock() = Some(h);
        Ok(k)
    }

    /// Registers the Node `sim-node` (docs/sim.md#nodes), its kubelet
    /// endpoint being `port` (the API server's: the kubelet is in it);
    /// from then on the watcher thread renews its Lease and heartbeats.
    pub fn register_node(&self, port: u16) {
        let facts = super::node::HostFacts::read(&self.pods_dir);
        let node = super::node::node_object(NODE_NAME, &facts, port, &self.pod_cidr());
        let mut agent = super::node::NodeAgent::new(self.store.clone(), node);
        if let Err(e) = agent.register() {
            log::warn!("kubelet: registering node {NODE_NAME}: {e}");
        }
        *self.node.lock() = Some(agent);
    }

    /// The block pod IPs come from: `127.B.0.0/16` (the Node's podCIDR).
    pub(crate) fn pod_cidr(&self) -> String {
        format!("127.{}.0.0/16", self.ips.lock().block)
    }

    /// Kills every container process and stops every pod thread.
    pub fn shutdown(&self) {
        self.stop.store(true, Ordering::Relaxed);
        let pods: Vec<PodEntry> = self.pods.lock().drain().map(|(_, e)| e).collect();
        for p in &pods {
            p.tell(None);
        }
        self.runtime.kill_all(Duration::from_secs(5));
        if let Some(h) = self.watcher.lock().take() {
            let _ = h.join();
        }
        if let Some(d) = &self.temp_pods_dir {
            let _ = std::fs::remove_dir_all(d);
        }
    }

    /// Looks up a container of a pod for exec/attach/log.
    pub fn container(&self, pod_uid: &str, container: &str) -> Option<ContainerHandle> {
        let pods = self.pods.lock();
        let e = pods.get(pod_uid)?;
        let c = e.shared.containers.lock().get(container).cloned();
        c
    }

    fn kill_container(&self, ns: &str, pod: &str, container: &str) -> Result<(), KillError> {
        let obj = self
            .store
            .get(Resource::Pod, ns, pod)
            .map_err(|_| KillError::PodNotFound {
                namespace: ns.to_string(),
                pod: pod.to_string(),
            })?;
        let uid = obj["metadata"]["uid"].as_str().unwrap_or("").to_string();
        let container = if container.is_empty() {
            obj["spec"]["containers"][0]["name"]
                .as_str()
                .unwrap_or("")
                .to_string()
        } else {
            container.to_string()
        };
        let pods = self.pods.lock();
        let e = pods.get(&uid).ok_or(KillError::NotRunning)?;
        e.tx.try_send(PodMsg::Kill { container })
            .map_err(|_| KillError::Busy)
    }

    fn watch_loop(self: Arc<Self>) {
        while !self.stop.load(Ordering::Relaxed) {
            let stream = match self.store.watch(
                Resource::Pod,
                None,
                Selectors::default(),
                WatchFrom::InitialAdded,
            ) {
                Ok(s) => s,
                Err(e) => {
                    log::warn!("kubelet: watch failed: {e:?}");
                    std::thread::sleep(Duration::from_millis(100));
                    continue;
                }
            };
            loop {
                if self.stop.load(Ordering::Relaxed) {
                    return;
                }
                if let Some(agent) = self.node.lock().as_mut() {
                    agent.tick();
                }
                match stream.recv_timeout(Duration::from_millis(200)) {
                    Ok(ev) => {
                        let deleted = matches!(ev.ty, crate::kube::watch::EventType::Deleted);
                        self.route(ev.object.clone(), deleted);
                    }
                    Err(RecvTimeoutError::Timeout) => {}
                    Err(RecvTimeoutError::Disconnected) => break,
                }
            }
            // Re-armed with InitialAdded: every current pod is routed again;
            // pods that vanished meanwhile are noticed by their owner threads
            // on their next status write (NotFound) — and here:
            let live: std::collections::HashSet<String> = self
                .store
                .list(Resource::Pod, None, &Selectors::default())
                .0
                .iter()
                .filter_map(|p| p["metadata"]["uid"].as_str().map(str::to_string))
                .collect();
            let pods = self.pods.lock();
            for (uid, e) in pods.iter() {
                if !live.contains(uid) {
                    e.tell(None);
                }
            }
        }
    }

    fn route(self: &Arc<Self>, pod: Value, deleted: bool) {
        let Some(uid) = pod["metadata"]["uid"].as_str().map(str::to_string) else {
            return;
        };
        let mut pods = self.pods.lock();
        if let Some(e) = pods.get(&uid) {
            e.tell((!deleted).then_some(pod));
            return;
        }
        if deleted {
            drop(pods);
            if let Some(ip) = self.simulated_ips.lock().remove(&uid) {
                self.ips.lock().free(&ip);
            }
            return;
        }
        if pod["metadata"]["annotations"][SIMULATE_ANNOTATION].as_str() == Some("true") {
            drop(pods);
            self.simulated(pod, uid);
            return;
        }
        let (tx, rx) = bounded(256);
        let shared = Arc::new(PodShared::default());
        pods.insert(
            uid.clone(),
            PodEntry {
                tx: tx.clone(),
                shared: shared.clone(),
            },
        );
        drop(pods);
        let k = self.clone();
        let name = pod["metadata"]["name"].as_str().unwrap_or("").to_string();
        let spawned = std::thread::Builder::new()
            .name(format!("sim-pod-{}", truncate(&name, 20)))
            .stack_size(256 * 1024)
            .spawn(move || {
                let mut w = PodWorker::new(k.clone(), pod, tx, rx, shared);
                w.run();
                k.pods.lock().remove(&uid);
            });
        if let Err(e) = spawned {
            log::error!("kubelet: cannot start a thread for pod {name}: {e}");
        }
    }

    /// A pod whose containers are simulated: no thread, no process. It is
    /// bound and reported running at once, and a graceful delete finishes
    /// at once. This is what lets the sim hold thousands of pods.
    fn simulated(&self, pod: Value, uid: String) {
        let ns = pod["metadata"]["namespace"]
            .as_str()
            .unwrap_or("")
            .to_string();
        let name = pod["metadata"]["name"].as_str().unwrap_or("").to_string();
        if !pod["metadata"]["deletionTimestamp"].is_null() {
            let pre = super::store::Preconditions {
                uid: Some(uid),
                resource_version: None,
            };
            let _ = self.store.delete(Resource::Pod, &ns, &name, &pre);
            return;
        }
        if pod["status"]["phase"] == "Running" {
            return;
        }
        let ip = {
            let mut known = self.simulated_ips.lock();
            match known.get(&uid) {
                Some(ip) => ip.clone(),
                None => match self.ips.lock().alloc() {
                    Some(ip) => {
                        known.insert(uid.clone(), ip.clone());
                        ip
                    }
                    None => return,
                },
            }
        };
        let now = now_rfc3339();
        let statuses: Vec<Value> = pod["spec"]["containers"]
            .as_array()
            .into_iter()
            .flatten()
            .map(|c| {
                json!({"name": c["name"], "image": c["image"], "imageID": format!("sim://{}", c["image"].as_str().unwrap_or("")),
                       "ready": true, "started": true, "restartCount": 0,
                       "state": {"running": {"startedAt": now}}, "lastState": {}})
            })
            .collect();
        let cond = |ty: &str| json!({"type": ty, "status": "True", "lastProbeTime": null, "lastTransitionTime": now});
        let status = json!({
            "phase": "Running", "hostIP": HOST_IP, "hostIPs": [{"ip": HOST_IP}],
            "podIP": ip, "podIPs": [{"ip": ip}], "startTime": now, "qosClass": "BestEffort",
            "conditions": [cond("PodReadyToStartContainers"), cond("Initialized"), cond("Ready"), cond("ContainersReady"), cond("PodScheduled")],
            "containerStatuses": statuses,
        });
        let _ = self
            .store
            .modify(Resource::Pod, &ns, &name, &mut |o: &mut Value| {
                if o["metadata"]["uid"].as_str() != Some(uid.as_str()) {
                    return Err(StoreError::NotFound {
                        resource: Resource::Pod,
                        name: name.clone(),
                    });
                }
                o["spec"]["nodeName"] = json!(self.role.name);
                o["status"] = status.clone();
                Ok(())
            });
    }

    fn image_fails(&self, image: &str) -> bool {
        self.fail_images.iter().any(|g| glob_match(g, image))
    }
}

/// Reads `(kind, name)` -> that ConfigMap's or Secret's data, decoded.
pub(crate) type ConfigLookup = Box<dyn Fn(&str, &str) -> Option<BTreeMap<String, Vec<u8>>>>;

impl Kubelet {
    /// Reads a ConfigMap's or Secret's data (decoded) in `ns` for env and
    /// volumes: from the store, or the node's [`ConfigSource`].
    pub(crate) fn config_lookup(&self, ns: String) -> ConfigLookup {
        match &self.role.config {
            Some(src) => {
                let src = src.clone();
                Box::new(move |kind: &str, name: &str| src.lookup(&ns, kind, name))
            }
            None => config_lookup(self.store.clone(), ns),
        }
    }
}

/// A ConfigMap's or Secret's `data` and `binaryData`, decoded (a Secret's
/// `data` is base64). Undecodable values read as empty, as before.
pub(crate) fn decode_config_data(kind: &str, o: &Value) -> BTreeMap<String, Vec<u8>> {
    use base64::Engine;
    let b64 = base64::engine::general_purpose::STANDARD;
    let mut out = BTreeMap::new();
    if let Some(data) = o["data"].as_object() {
        for (k, v) in data {
            let v = v.as_str().unwrap_or("");
            let bytes = if kind == "Secret" {
                b64.decode(v).unwrap_or_default()
            } else {
                v.as_bytes().to_vec()
            };
            out.insert(k.clone(), bytes);
        }
    }
    if let Some(data) = o["binaryData"].as_object() {
        for (k, v) in data {
            out.insert(
                k.clone(),
                b64.decode(v.as_str().unwrap_or("")).unwrap_or_default(),
            );
        }
    }
    out
}

/// Reads a ConfigMap's or Secret's data (decoded) from the store.
fn config_lookup(store: Arc<Store>, ns: String) -> ConfigLookup {
    Box::new(move |kind: &str, name: &str| {
        let res = match kind {
            "ConfigMap" => Resource::ConfigMap,
            "Secret" => Resource::Secret,
            _ => return None,
        };
        let o = store.get(res, &ns, name).ok()?;
        Some(decode_config_data(kind, &o))
    })
}

/// The pull error of an image named by `--fail-image`.
fn pull_failure(image: &str) -> String {
    format!("failed to pull and unpack image {image:?}: simulated pull failure (--fail-image)")
}

/// The first `configMap` or `secret` volume of `pod` whose object is
/// missing (what a FailedMount Event names).
fn unmountable_volume(pod: &Value, lookup: super::podspec::Lookup<'_>) -> Option<String> {
    pod["spec"]["volumes"]
        .as_array()
        .into_iter()
        .flatten()
        .find(|v| {
            let (kind, src, name) = if let Some(cm) = v.get("configMap") {
                ("ConfigMap", cm, &cm["name"])
            } else if let Some(sec) = v.get("secret") {
                ("Secret", sec, &sec["secretName"])
            } else {
                return false;
            };
            src["optional"] != true && lookup(kind, name.as_str().unwrap_or("")).is_none()
        })
        .and_then(|v| v["name"].as_str())
        .map(str::to_string)
}

fn truncate(s: &str, n: usize) -> &str {
    match s.char_indices().nth(n) {
        Some((i, _)) => &s[..i],
        None => s,
    }
}

/// Shell-style glob: `*`, `?`, and `[...]` classes (with `!`/`^` negation).
pub fn glob_match(pattern: &str, text: &str) -> bool {
    fn go(p: &[char], t: &[char]) -> bool {
        match p.first() {
            None => t.is_empty(),
            Some('*') => (0..=t.len()).any(|i| go(&p[1..], &t[i..])),
            Some('?') => !t.is_empty() && go(&p[1..], &t[1..]),
            Some('[') => {
                let Some(end) = p.iter().skip(1).position(|&c| c == ']').map(|i| i + 1) else {
                    return t.first() == Some(&'[') && go(&p[1..], &t[1..]);
                };
                let Some(&c) = t.first() else { return false };
                let mut class = &p[1..end];
                let negate = matches!(class.first(), Some('!') | Some('^'));
                if negate {
                    class = &class[1..];
                }
                let mut hit = false;
                let mut i = 0;
                while i < class.len() {
                    if i + 2 < class.len() && class[i + 1] == '-' {
                        hit |= class[i] <= c && c <= class[i + 2];
                        i += 3;
                    } else {
                        hit |= class[i] == c;
                        i += 1;
                    }
                }
                hit != negate && go(&p[end + 1..], &t[1..])
            }
            Some(&c) => t.first() == Some(&c) && go(&p[1..], &t[1..]),
        }
    }
    let p: Vec<char> = pattern.chars().collect();
    let t: Vec<char> = text.chars().collect();
    go(&p, &t)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn globs() {
        assert!(glob_match("bad/*", "bad/image:1"));
        assert!(glob_match("*:broken", "x/y:broken"));
        assert!(glob_match("img?", "img1"));
        assert!(glob_match("img[0-3]", "img2"));
        assert!(!glob_match("img[!0-3]", "img2"));
        assert!(!glob_match("bad/*", "good/image"));
        assert!(glob_match("*", ""));
    }

    #[test]
    fn ip_pool_round_robin_and_free() {
        let mut p = IpPool {
            block: 0,
            next: IpPool::FIRST,
            used: Default::default(),
        };
        let a = p.alloc().expect("ip");
        let b = p.alloc().expect("ip");
        assert_eq!(a, "127.0.1.1");
        assert_eq!(b, "127.0.1.2");
        p.free(&a);
        assert_eq!(p.alloc().as_deref(), Some("127.0.1.3"));
    }
}
