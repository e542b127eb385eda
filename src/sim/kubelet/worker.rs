//! One pod's owner thread ("sim-pod-…"): binds the pod, sets up its
//! folder and volumes, starts its init containers in order and then its
//! containers, turns process exits into restarts (by policy, with
//! CrashLoopBackOff back-off) or a final phase, enforces
//! activeDeadlineSeconds, finishes graceful deletes, and publishes the
//! pod's status. It alone changes its pod's processes and status; other
//! threads read the containers through [`PodShared`].

use super::{
    pull_failure, truncate, ConfigLookup, ContainerHandle, Kubelet, PodMsg, PodShared, HOST_IP,
};
use crate::kube::time::{now_rfc3339, parse_rfc3339, rfc3339};
use crate::sim::events::{self, Regarding};
use crate::sim::podspec::{self, PlanContext};
use crate::sim::resources::Resource;
use crate::sim::runtime::Process;
use crate::sim::store::StoreError;
use crossbeam_channel::{Receiver, RecvTimeoutError, Sender};
use serde_json::{json, Value};
use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime};

/// How soon volumes that could not be set up (a missing ConfigMap or
/// Secret) are tried again. A kubelet waits its pod worker's back-off
/// (10 s, jittered); the sim is quicker (docs/sim.md).
const CONFIG_RETRY: Duration = Duration::from_millis(300);
/// A container whose env could not be resolved (a missing ConfigMap,
/// Secret or key) is tried again after 50 ms, doubling to 2 s: the sim
/// starts a container at once where a kubelet first makes the sandbox, so
/// an object created right after its pod (a session's token Secret) is
/// often a moment late here, and should cost little.
const ENV_RETRY_FIRST: Duration = Duration::from_millis(50);
const ENV_RETRY_MAX: Duration = Duration::from_secs(2);
/// How long an image named by `--fail-image` stays in ErrImagePull or
/// ImagePullBackOff before the other (docs/sim.md): a timer, not every pass
/// of the pod's loop, or the pod's own status write would wake it to write
/// again at once.
const IMAGE_RETRY: Duration = Duration::from_secs(5);

#[derive(Clone, Default)]
struct CState {
    name: String,
    image: String,
    /// running | waiting | terminated
    state: Value,
    last_state: Value,
    restart_count: u64,
    ready: bool,
    started: bool,
    /// Bumped at every start, so a stale exit message is recognised.
    generation: u64,
    process: Option<Arc<Process>>,
    /// The latest process, running or ended (what `logs` reads).
    last: Option<Arc<Process>>,
    /// The one before it (`logs --previous`).
    before_last: Option<Arc<Process>>,
    /// When the current back-off ends (CrashLoopBackOff, or a retry of a
    /// container whose env could not be resolved).
    restart_at: Option<Instant>,
    backoff: Duration,
    /// The last wait before retrying an unresolved env (zero: none yet).
    env_backoff: Duration,
    started_at: Option<Instant>,
    done: bool,
}

pub(super) struct PodWorker {
    k: Arc<Kubelet>,
    pod: Value,
    ns: String,
    name: String,
    uid: String,
    tx: Sender<PodMsg>,
    rx: Receiver<PodMsg>,
    shared: Arc<PodShared>,
    pod_ip: Option<String>,
    pod_dir: PathBuf,
    init: Vec<CState>,
    containers: Vec<CState>,
    /// Index of the init container now running, or init.len() when done.
    init_index: usize,
    start_time: Option<SystemTime>,
    started_instant: Option<Instant>,
    phase: String,
    reason: Option<String>,
    message: Option<String>,
    terminating_until: Option<Instant>,
    deleted: bool,
    image_error: bool,
    /// When the failing images' state next flips (ErrImagePull and
    /// ImagePullBackOff alternate).
    image_retry_at: Option<Instant>,
    /// Volumes could not be set up (a missing ConfigMap, say): retry then,
    /// as a kubelet does, so creating the ConfigMap later lets the pod start.
    volumes_retry_at: Option<Instant>,
    /// The pod's host id from the kubelet's pool (pod users on).
    pod_id: Option<u32>,
}

impl PodWorker {
    pub(super) fn new(
        k: Arc<Kubelet>,
        pod: Value,
        tx: Sender<PodMsg>,
        rx: Receiver<PodMsg>,
        shared: Arc<PodShared>,
    ) -> PodWorker {
        let meta = &pod["metadata"];
        let ns = meta["namespace"].as_str().unwrap_or("").to_string();
        let name = meta["name"].as_str().unwrap_or("").to_string();
        let uid = meta["uid"].as_str().unwrap_or("").to_string();
        let pod_dir = k
            .pods_dir
            .join(format!("{ns}_{name}_{}", truncate(&uid, 8)));
        let mk = |c: &Value| CState {
            name: c["name"].as_str().unwrap_or("").to_string(),
            image: c["image"].as_str().unwrap_or("").to_string(),
            state: json!({"waiting": {"reason": "ContainerCreating"}}),
            last_state: json!({}),
            backoff: Duration::from_secs(10),
            ..Default::default()
        };
        let init: Vec<CState> = pod["spec"]["initContainers"]
            .as_array()
            .map(|a| a.iter().map(mk).collect())
            .unwrap_or_default();
        let mut containers: Vec<CState> = pod["spec"]["containers"]
            .as_array()
            .map(|a| a.iter().map(mk).collect())
            .unwrap_or_default();
        if !init.is_empty() {
            for c in &mut containers {
                c.state = json!({"waiting": {"reason": "PodInitializing"}});
            }
        }
        PodWorker {
            k,
            pod,
            ns,
            name,
            uid,
            tx,
            rx,
            shared,
            pod_ip: None,
            pod_dir,
            init,
            containers,
            init_index: 0,
            start_time: None,
            started_instant: None,
            phase: "Pending".into(),
            reason: None,
            message: None,
            terminating_until: None,
            deleted: false,
            image_error: false,
            image_retry_at: None,
            volumes_retry_at: None,
            pod_id: None,
        }
    }

    /// A node that restarted finds its pods with the statuses it wrote
    /// before: their processes died with it. A container that had finished
    /// for good stays finished; one that was running (or waiting to
    /// restart) is terminated with exit code 137 and reason
    /// `ContainerStatusUnknown`, as a kubelet reports a container it can no
    /// longer find, and then restarts by the pod's policy (a `Never` pod's
    /// never does: the pod fails). True when nothing is left to run.
    fn recover_previous_run(&mut self) -> bool {
        let status = self.pod["status"].clone();
        let phase = status["phase"].as_str().unwrap_or("");
        let policy = self.restart_policy().to_string();
        let mut any = false;
        for (list, is_init) in [
            ("initContainerStatuses", true),
            ("containerStatuses", false),
        ] {
            for st in status[list].as_array().into_iter().flatten() {
                let Some(name) = st["name"].as_str() else {
                    continue;
                };
                let states = if is_init {
                    &mut self.init
                } else {
                    &mut self.containers
                };
                let Some(c) = states.iter_mut().find(|c| c.name == name) else {
                    continue;
                };
                let ran = st["state"].get("running").is_some()
                    || st["state"].get("terminated").is_some()
                    || st["lastState"].get("terminated").is_some();
                if !ran {
                    continue;
                }
                any = true;
                c.restart_count = st["restartCount"].as_u64().unwrap_or(0);
                c.last_state = st["lastState"].clone();
                if let Some(t) = st["state"].get("terminated") {
                    let code = t["exitCode"].as_i64().unwrap_or(-1);
                    let again = phase != "Succeeded"
                        && phase != "Failed"
                        && match policy.as_str() {
                            "Always" => !is_init || code != 0,
                            "OnFailure" => code != 0,
                            _ => false,
                        };
                    if !again {
                        c.state = st["state"].clone();
                        c.done = true;
                        continue;
                    }
                }
                let lost = json!({
                    "exitCode": 137,
                    "reason": "ContainerStatusUnknown",
                    "message": "The container could not be located when the pod was terminated",
                    "startedAt": st["state"]["running"]["startedAt"].clone(),
                    "finishedAt": now_rfc3339(),
                });
                let never = policy == "Never" || phase == "Succeeded" || phase == "Failed";
                if never {
                    c.state = json!({ "terminated": lost });
                    c.done = true;
                } else {
                    c.last_state = json!({ "terminated": lost });
                    c.restart_count += 1;
                }
            }
        }
        if !any {
            return false;
        }
        while self.init_index < self.init.len() && self.init[self.init_index].done {
            self.init_index += 1;
        }
        let init_failed = self.init.iter().any(|c| {
            c.done
                && c.state["terminated"]["exitCode"]
                    .as_i64()
                    .is_some_and(|x| x != 0)
        });
        if init_failed {
            self.phase = "Failed".into();
            for c in &mut self.containers {
                c.done = true;
            }
        }
        self.init_index >= self.init.len() && self.containers.iter().all(|c| c.done) || init_failed
    }

    fn restart_policy(&self) -> &str {
        self.pod["spec"]["restartPolicy"]
            .as_str()
            .unwrap_or("Always")
    }

    pub(super) fn run(&mut self) {
        if !self.bind() {
            return;
        }
        if self.recover_previous_run() {
            self.update_phase();
        } else {
            self.start_pod();
        }
        self.publish();
        loop {
            if self.deleted {
                break;
            }
            let timeout = self.next_timer();
            let msg = match self.rx.recv_timeout(timeout) {
                Ok(m) => Some(m),
                Err(RecvTimeoutError::Timeout) => None,
                Err(RecvTimeoutError::Disconnected) => break,
            };
            let mut changed = false;
            if self
                .shared
                .deleted
                .load(std::sync::atomic::Ordering::SeqCst)
            {
                self.deleted = true;
                self.kill_all(Duration::ZERO);
                break;
            }
            let latest = self.shared.latest.lock().take();
            if let Some(p) = latest {
                changed |= self.on_update(p);
            }
            match msg {
                Some(PodMsg::Wake) | None => {}
                Some(PodMsg::Exited {
                    container,
                    generation,
                }) => changed |= self.on_exit(&container, generation),
                Some(PodMsg::Kill { container }) => {
                    if let Some(c) = self.find(&container) {
                        if let Some(p) = &c.process {
                            let _ = p.signal_group(9);
                        }
                    }
                }
            }
            changed |= self.on_timers();
            if self.terminating_until.is_some() && self.all_stopped() {
                // Graceful delete finished. A node of a real control plane
                // first writes the terminal phase, as a kubelet does
                // (Succeeded when every container exited 0), then removes
                // the object (`sim::nodemode::status` sends both upstream).
                if !self.k.role.binds {
                    self.finish_phase();
                    self.publish();
                }
                let pre = crate::sim::store::Preconditions {
                    uid: Some(self.uid.clone()),
                    resource_version: None,
                };
                let _ = self
                    .k
                    .store
                    .delete(Resource::Pod, &self.ns, &self.name, &pre);
                self.deleted = true;
                break;
            }
            if changed {
                self.publish();
            }
        }
        self.kill_all(Duration::ZERO);
        self.cleanup();
    }

    /// Binds the pod to the node (the embedded sim is its own scheduler;
    /// a node of a real control plane finds it bound) and allocates its IP:
    /// the one it had, when the node restarted under it and it is free.
    fn bind(&mut self) -> bool {
        let had = self.pod["status"]["podIP"]
            .as_str()
            .unwrap_or("")
            .to_string();
        let ip = {
            let mut ips = self.k.ips.lock();
            if !had.is_empty() && ips.claim(&had) {
                Some(had)
            } else {
                ips.alloc()
            }
        };
        let Some(ip) = ip else {
            self.message = Some("no free pod IP".into());
            return false;
        };
        self.pod_ip = Some(ip);
        if let Some(pool) = &self.k.users {
            let mut pool = pool.lock();
            match pool.alloc() {
                Some(id) => self.pod_id = Some(id),
                None => {
                    let (a, b) = pool.range();
                    drop(pool);
                    self.message = Some(format!("no free pod uid in {a}-{b}"));
                    self.release_ip();
                    return false;
                }
            }
        }
        if !self.k.role.binds {
            self.start_time = Some(SystemTime::now());
            self.started_instant = Some(Instant::now());
            return true;
        }
        let node = self.k.role.name;
        let r = self
            .k
            .store
            .modify(Resource::Pod, &self.ns, &self.name, &mut |o: &mut Value| {
                if o["spec"]["nodeName"].as_str().unwrap_or("").is_empty() {
                    o["spec"]["nodeName"] = json!(node);
                }
                Ok(())
            });
        match r {
            Ok(p) => {
                // The sim's kubelet is also its scheduler.
                events::scheduled(&self.k.store, &p, node);
                self.pod = p;
                self.start_time = Some(SystemTime::now());
                self.started_instant = Some(Instant::now());
                true
            }
            Err(_) => {
                self.release_ip();
                false
            }
        }
    }

    fn release_ip(&mut self) {
        if let Some(ip) = self.pod_ip.take() {
            self.k.ips.lock().free(&ip);
        }
        if let (Some(id), Some(pool)) = (self.pod_id.take(), &self.k.users) {
            pool.lock().free(id);
        }
    }

    fn start_pod(&mut self) {
        // 0700: the sim's alone until its volumes are written and it is
        // given to the pod (setup_volumes).
        let made = {
            use std::os::unix::fs::DirBuilderExt;
            std::fs::DirBuilder::new()
                .recursive(true)
                .mode(0o700)
                .create(&self.pod_dir)
        };
        if let Err(e) = made {
            self.fail_all(&format!("creating the pod folder: {e}"));
            return;
        }
        if !self.setup_volumes() {
            return;
        }
        // Images that must fail never start anything.
        let failing: Vec<String> = self
            .init
            .iter()
            .chain(self.containers.iter())
            .filter(|c| self.k.image_fails(&c.image))
            .map(|c| c.name.clone())
            .collect();
        if !failing.is_empty() {
            self.image_error = true;
            self.image_retry_at = Some(Instant::now() + IMAGE_RETRY);
            let mut pulls = Vec::new();
            for (init, c) in self
                .init
                .iter_mut()
                .map(|c| (true, c))
                .chain(self.containers.iter_mut().map(|c| (false, c)))
            {
                if failing.contains(&c.name) {
                    c.state = json!({"waiting": {"reason": "ErrImagePull", "message": pull_failure(&c.image)}});
                    pulls.push((init, c.name.clone(), c.image.clone()));
                }
            }
            for (init, name, image) in pulls {
                self.pull_failed(init, &name, &image);
            }
            return;
        }
        self.advance();
    }

    /// Creates the pod's volume folders; on failure reports
    /// CreateContainerConfigError and schedules a retry. With pod users,
    /// the volumes and then the pod folder are given to the pod only once
    /// all are written: until then the folder is the sim's alone, so no
    /// process of that uid (another pod naming it) can plant a link where
    /// the sim is about to chown or chmod.
    fn setup_volumes(&mut self) -> bool {
        let lookup = self.lookup_fn();
        let owned = podspec::volumes::materialize_volumes(&self.pod, &self.pod_dir, &*lookup)
            .and_then(
                |()| match podspec::users::pod_owner(&self.pod, self.pod_id) {
                    Some(o) => crate::sim::pod_users::own_volumes(
                        &self.pod_dir,
                        self.pod["spec"]["volumes"]
                            .as_array()
                            .map_or(&[][..], |v| v),
                        &podspec::volume_dirs(&self.pod, &self.pod_dir),
                        &o,
                    )
                    .and_then(|()| crate::sim::pod_users::own_pod_dir(&self.pod_dir, &o))
                    .map_err(|e| podspec::PlanError::Io(e.to_string())),
                    None => Ok(()),
                },
            );
        match owned {
            Ok(()) => {
                self.volumes_retry_at = None;
                true
            }
            Err(e) => {
                for c in self.init.iter_mut().chain(self.containers.iter_mut()) {
                    c.state = json!({"waiting": {"reason": "CreateContainerConfigError", "message": e.to_string()}});
                }
                self.volumes_retry_at = Some(Instant::now() + CONFIG_RETRY);
                // What the kubelet's volume manager says of the volume.
                let message = match super::unmountable_volume(&self.pod, &*lookup) {
                    Some(v) => format!("MountVolume.SetUp failed for volume \"{v}\" : {e}"),
                    None => format!("Unable to attach or mount volumes: {e}"),
                };
                self.k
                    .recorder
                    .warning(&Regarding::pod(&self.pod), "FailedMount", &message);
                false
            }
        }
    }

    /// Starts what should run now: the next init container, or (init done)
    /// every app container not yet started.
    fn advance(&mut self) {
        while self.init_index < self.init.len() {
            let i = self.init_index;
            if self.init[i].done {
                self.init_index += 1;
                continue;
            }
            if self.init[i].process.is_none() && self.init[i].restart_at.is_none() {
                self.start_container(true, i);
            }
            return;
        }
        for i in 0..self.containers.len() {
            let c = &self.containers[i];
            if c.process.is_none() && !c.done && c.restart_at.is_none() {
                self.start_container(false, i);
            }
        }
        self.promote_to_running();
    }

    /// Pending becomes Running once every container has started (or
    /// ended): after the first start, and after a container that waited
    /// (a missing ConfigMap or Secret) started on a retry.
    fn promote_to_running(&mut self) {
        if self.phase == "Pending"
            && self.init_index >= self.init.len()
            && self.containers.iter().all(|c| c.started || c.done)
        {
            self.phase = "Running".into();
        }
    }

    fn lookup_fn(&self) -> ConfigLookup {
        self.k.config_lookup(self.ns.clone())
    }

    fn start_container(&mut self, init: bool, i: usize) {
        let spec_list = if init { "initContainers" } else { "containers" };
        let spec = self.pod["spec"][spec_list][i].clone();
        let lookup = self.lookup_fn();
        let ctx = PlanContext {
            pod_ip: self.pod_ip.clone().unwrap_or_default(),
            host_ip: HOST_IP.to_string(),
            node_name: self.k.role.name.to_string(),
            pod_dir: self.pod_dir.clone(),
            self_exe: self.k.self_exe.clone(),
            lookup: &*lookup,
            pod_id: self.pod_id,
            sim_uid: self.k.sim_uid,
        };
        let plan = podspec::plan_container(&self.pod, &spec, &ctx);
        let c = if init {
            &mut self.init[i]
        } else {
            &mut self.containers[i]
        };
        let plan = match plan {
            Ok(p) => p,
            Err(e) => {
                self.k.recorder.warning(
                    &Regarding::container(&self.pod, init, &c.name),
                    "Failed",
                    &format!("Error: {e}"),
                );
                c.state = json!({"waiting": {"reason": e.reason(), "message": e.to_string()}});
                // Retried like a kubelet does: the missing ConfigMap or
                // Secret may appear.
                c.env_backoff = if c.env_backoff.is_zero() {
                    ENV_RETRY_FIRST
                } else {
                    (c.env_backoff * 2).min(ENV_RETRY_MAX)
                };
                c.restart_at = Some(Instant::now() + c.env_backoff);
                return;
            }
        };
        let about = Regarding::container(&self.pod, init, &c.name);
        let rec = &self.k.recorder;
        // The image is "pulled" (none ever is) as the pull policy says.
        if spec["imagePullPolicy"] == "Always" {
            rec.normal(&about, "Pulling", &format!("Pulling image {:?}", c.image));
            rec.normal(
                &about,
                "Pulled",
                &format!(
                    "Successfully pulled image {:?} in 0s (0s including waiting). Image size: 0 bytes.",
                    c.image
                ),
            );
        } else {
            rec.normal(
                &about,
                "Pulled",
                &format!(
                    "Container image {:?} already present on machine and can be accessed by the pod",
                    c.image
                ),
            );
        }
        let started = self.k.runtime.start(plan);
        match &started {
            Ok(_) => {
                rec.normal(&about, "Created", "Container created");
                rec.normal(&about, "Started", "Container started");
            }
            Err(e) => rec.warning(&about, "Failed", &format!("Error: {e}")),
        }
        match started {
            Ok(p) => {
                c.env_backoff = Duration::ZERO;
                c.generation += 1;
                c.state = json!({"running": {"startedAt": now_rfc3339()}});
                c.started = true;
                c.ready = !init;
                c.started_at = Some(Instant::now());
                c.process = Some(p.clone());
                c.before_last = c.last.replace(p.clone());
                let (tx, name, generation) = (self.tx.clone(), c.name.clone(), c.generation);
                let waiter = std::thread::Builder::new()
                    .name("sim-wait".into())
                    .stack_size(64 * 1024)
                    .spawn(move || {
                        let _ = p.wait();
                        let _ = tx.send(PodMsg::Exited {
                            container: name,
                            generation,
                        });
                    });
                if let Err(e) = waiter {
                    log::error!("kubelet: cannot start a waiter thread: {e}");
                }
                self.share();
            }
            Err(e) => {
                c.state = json!({"waiting": {"reason": "CreateContainerError", "message": e.to_string()}});
            }
        }
    }

    /// Publishes the current processes for exec/attach/log.
    fn share(&self) {
        let mut map = self.shared.containers.lock();
        for (list, c) in self
            .init
            .iter()
            .map(|c| ("initContainers", c))
            .chain(self.containers.iter().map(|c| ("containers", c)))
        {
            let spec = self.pod["spec"][list]
                .as_array()
                .and_then(|a| a.iter().find(|s| s["name"] == c.name.as_str()))
                .cloned()
                .unwrap_or(Value::Null);
            map.insert(
                c.name.clone(),
                ContainerHandle {
                    name: c.name.clone(),
                    process: c.last.clone(),
                    previous: c.before_last.clone(),
                    spec,
                    pod: self.pod.clone(),
                    pod_dir: self.pod_dir.clone(),
                    pod_ip: self.pod_ip.clone().unwrap_or_default(),
                    pod_id: self.pod_id,
                },
            );
        }
    }

    /// A pull of an image named by `--fail-image`, as the kubelet tells
    /// it: Pulling, the failure, the container's error.
    fn pull_failed(&self, init: bool, name: &str, image: &str) {
        let about = Regarding::container(&self.pod, init, name);
        let rec = &self.k.recorder;
        rec.normal(&about, "Pulling", &format!("Pulling image {image:?}"));
        rec.warning(
            &about,
            "Failed",
            &format!("Failed to pull image {image:?}: {}", pull_failure(image)),
        );
        rec.warning(&about, "Failed", "Error: ErrImagePull");
    }

    fn find(&self, name: &str) -> Option<&CState> {
        self.containers
            .iter()
            .chain(self.init.iter())
            .find(|c| c.name == name)
    }

    fn on_update(&mut self, p: Value) -> bool {
        let was_terminating = self.terminating_until.is_some();
        self.pod = p;
        if let Some(ts) = self.pod["metadata"]["deletionTimestamp"].as_str() {
            let grace = self.pod["metadata"]["deletionGracePeriodSeconds"]
                .as_i64()
                .unwrap_or(30)
                .max(0) as u64;
            let until = Instant::now() + Duration::from_secs(grace);
            let _ = parse_rfc3339(ts);
            let sooner = self.terminating_until.is_none_or(|t| until < t);
            if sooner {
                let first = self.terminating_until.is_none();
                self.terminating_until = Some(until);
                for (init, c) in self
                    .containers
                    .iter_mut()
                    .map(|c| (false, c))
                    .chain(self.init.iter_mut().map(|c| (true, c)))
                {
                    c.restart_at = None;
                    if let Some(p) = &c.process {
                        p.terminate(Duration::from_secs(grace));
                        if first {
                            self.k.recorder.normal(
                                &Regarding::container(&self.pod, init, &c.name),
                                "Killing",
                                &format!("Stopping container {}", c.name),
                            );
                        }
                    }
                }
            }
            return !was_terminating;
        }
        false
    }

    fn on_exit(&mut self, name: &str, generation: u64) -> bool {
        let policy = self.restart_policy().to_string();
        let terminating = self.terminating_until.is_some();
        let is_init = self.init.iter().any(|c| c.name == name);
        let c = match self
            .containers
            .iter_mut()
            .chain(self.init.iter_mut())
            .find(|c| c.name == name)
        {
            Some(c) if c.generation == generation => c,
            _ => return false,
        };
        let Some(p) = c.process.take() else {
            return false;
        };
        let info = p.wait();
        let code = info.code;
        let started = c.state["running"]["startedAt"].clone();
        let mut term = json!({
            "exitCode": code,
            "reason": if code == 0 { "Completed" } else { "Error" },
            "startedAt": started,
            "finishedAt": rfc3339(info.finished_at),
            "containerID": format!("sim://{}", p.pid()),
        });
        if let Some(sig) = info.signal {
            term["signal"] = json!(sig);
        }
        c.ready = false;
        let ran_long = c
            .started_at
            .is_some_and(|t| t.elapsed() >= Duration::from_secs(600));
        if ran_long {
            c.backoff = Duration::from_secs(10);
        }
        let restart = !terminating
            && match policy.as_str() {
                "Always" => !is_init || code != 0,
                "OnFailure" => code != 0,
                _ => false,
            };
        if restart {
            c.last_state = json!({"terminated": term});
            c.restart_count += 1;
            if c.restart_count == 1 {
                // The first restart is immediate, as on a real kubelet.
                c.restart_at = Some(Instant::now());
                c.state = json!({"terminated": c.last_state["terminated"].clone()});
            } else {
                let wait = c.backoff;
                c.backoff = (c.backoff * 2).min(Duration::from_secs(300));
                c.restart_at = Some(Instant::now() + wait);
                self.k.recorder.warning(
                    &Regarding::container(&self.pod, is_init, &c.name),
                    "BackOff",
                    &format!(
                        "Back-off restarting failed container {} in pod {}_{}({})",
                        c.name, self.name, self.ns, self.uid
                    ),
                );
                c.state = json!({"waiting": {
                    "reason": "CrashLoopBackOff",
                    "message": format!("back-off {}s restarting failed container={} pod={}_{}({})",
                        wait.as_secs(), c.name, self.name, self.ns, self.uid),
                }});
            }
        } else {
            c.state = json!({"terminated": term});
            c.done = true;
        }
        if is_init && !restart {
            if code == 0 {
                self.advance();
            } else if policy == "Never" {
                self.phase = "Failed".into();
                for c in self.containers.iter_mut() {
                    c.done = true;
                }
            }
        }
        self.update_phase();
        self.share();
        true
    }

    fn update_phase(&mut self) {
        if self.phase == "Failed" && self.reason.is_some() {
            return;
        }
        if self.init_index < self.init.len() {
            return;
        }
        if !self.containers.is_empty() && self.containers.iter().all(|c| c.done) {
            let ok = self
                .containers
                .iter()
                .all(|c| c.state["terminated"]["exitCode"].as_i64() == Some(0));
            self.phase = if ok { "Succeeded" } else { "Failed" }.into();
        }
    }

    /// Time until the next timer: a restart back-off, the active deadline,
    /// or the grace period's end; capped so image-pull states alternate.
    fn next_timer(&self) -> Duration {
        let mut t = Duration::from_secs(5);
        let now = Instant::now();
        for c in self.containers.iter().chain(self.init.iter()) {
            if let Some(at) = c.restart_at {
                t = t.min(at.saturating_duration_since(now));
            }
        }
        if let Some(d) = self.active_deadline() {
            t = t.min(d.saturating_duration_since(now));
        }
        if let Some(at) = self.volumes_retry_at {
            t = t.min(at.saturating_duration_since(now));
        }
        if let Some(at) = self.image_retry_at {
            t = t.min(at.saturating_duration_since(now));
        }
        t.max(Duration::from_millis(1))
    }

    fn active_deadline(&self) -> Option<Instant> {
        let secs = self.pod["spec"]["activeDeadlineSeconds"].as_u64()?;
        Some(self.started_instant? + Duration::from_secs(secs))
    }

    fn on_timers(&mut self) -> bool {
        let now = Instant::now();
        let mut changed = false;
        if self.terminating_until.is_none() {
            if let Some(d) = self.active_deadline() {
                if now >= d && self.phase != "Failed" && self.phase != "Succeeded" {
                    self.k.recorder.normal(
                        &Regarding::pod(&self.pod),
                        "DeadlineExceeded",
                        "Pod was active on the node longer than the specified deadline",
                    );
                    self.phase = "Failed".into();
                    self.reason = Some("DeadlineExceeded".into());
                    self.message = Some(
                        "Pod was active on the node longer than the specified deadline".into(),
                    );
                    for c in self.containers.iter_mut().chain(self.init.iter_mut()) {
                        c.restart_at = None;
                        c.done = true;
                        if let Some(p) = &c.process {
                            p.terminate(Duration::from_secs(2));
                        }
                    }
                    changed = true;
                }
            }
        }
        if self.volumes_retry_at.is_some_and(|t| t <= now) && self.terminating_until.is_none() {
            if self.setup_volumes() {
                self.advance();
            }
            changed = true;
        }
        if self.image_error && self.image_retry_at.is_some_and(|t| t <= now) {
            self.image_retry_at = Some(now + IMAGE_RETRY);
            // ErrImagePull and ImagePullBackOff alternate, as on a real node.
            let mut told = Vec::new();
            for (init, c) in self
                .init
                .iter_mut()
                .map(|c| (true, c))
                .chain(self.containers.iter_mut().map(|c| (false, c)))
            {
                let reason = c.state["waiting"]["reason"].as_str().unwrap_or("");
                let next = match reason {
                    "ErrImagePull" => "ImagePullBackOff",
                    "ImagePullBackOff" => "ErrImagePull",
                    _ => continue,
                };
                let message = if next == "ImagePullBackOff" {
                    format!("Back-off pulling image \"{}\"", c.image)
                } else {
                    pull_failure(&c.image)
                };
                c.state = json!({"waiting": {"reason": next, "message": message}});
                told.push((init, c.name.clone(), c.image.clone(), next));
                changed = true;
            }
            for (init, name, image, next) in told {
                if next == "ErrImagePull" {
                    self.pull_failed(init, &name, &image);
                } else {
                    let about = Regarding::container(&self.pod, init, &name);
                    self.k.recorder.normal(
                        &about,
                        "BackOff",
                        &format!("Back-off pulling image {image:?}"),
                    );
                    self.k
                        .recorder
                        .warning(&about, "Failed", "Error: ImagePullBackOff");
                }
            }
        }
        let due: Vec<(bool, usize)> = self
            .init
            .iter()
            .enumerate()
            .map(|(i, c)| (true, i, c))
            .chain(
                self.containers
                    .iter()
                    .enumerate()
                    .map(|(i, c)| (false, i, c)),
            )
            .filter(|(_, _, c)| c.restart_at.is_some_and(|t| t <= now))
            .map(|(init, i, _)| (init, i))
            .collect();
        for (init, i) in due {
            if self.phase == "Failed" && self.reason.is_some() {
                break;
            }
            let c = if init {
                &mut self.init[i]
            } else {
                &mut self.containers[i]
            };
            c.restart_at = None;
            let before = c.state.clone();
            self.start_container(init, i);
            let c = if init {
                &self.init[i]
            } else {
                &self.containers[i]
            };
            // A retry that waits on as before is no news (no status write).
            changed |= c.state != before || c.process.is_some();
        }
        self.promote_to_running();
        changed
    }

    /// The phase of a pod whose containers have all stopped for good:
    /// Succeeded when every container exited 0, else Failed.
    fn finish_phase(&mut self) {
        if self.phase == "Succeeded" || self.phase == "Failed" {
            return;
        }
        let ok = !self.containers.is_empty()
            && self
                .containers
                .iter()
                .all(|c| c.state["terminated"]["exitCode"].as_i64() == Some(0));
        self.phase = if ok { "Succeeded" } else { "Failed" }.into();
        for c in self.containers.iter_mut().chain(self.init.iter_mut()) {
            c.ready = false;
            if c.state.get("terminated").is_none() {
                if let Some(t) = c.last_state.get("terminated").cloned() {
                    c.state = json!({ "terminated": t });
                }
            }
        }
    }

    fn all_stopped(&self) -> bool {
        self.containers
            .iter()
            .chain(self.init.iter())
            .all(|c| c.process.is_none())
    }

    fn kill_all(&mut self, grace: Duration) {
        for c in self.containers.iter_mut().chain(self.init.iter_mut()) {
            if let Some(p) = c.process.take() {
                p.terminate(grace);
            }
        }
    }

    fn fail_all(&mut self, message: &str) {
        self.phase = "Failed".into();
        self.message = Some(message.to_string());
    }

    fn cleanup(&mut self) {
        self.release_ip();
        self.shared.containers.lock().clear();
        let _ = std::fs::remove_dir_all(&self.pod_dir);
    }

    /// Writes the pod's status to the store.
    fn publish(&mut self) {
        let now = now_rfc3339();
        let statuses = |list: &[CState]| -> Vec<Value> {
            list.iter()
                .map(|c| {
                    let mut s = json!({
                        "name": c.name,
                        "image": c.image,
                        "imageID": format!("sim://{}", c.image),
                        "ready": c.ready,
                        "restartCount": c.restart_count,
                        "started": c.state.get("running").is_some(),
                        "state": c.state,
                        "lastState": c.last_state,
                    });
                    if let Some(p) = &c.process {
                        s["containerID"] = json!(format!("sim://{}", p.pid()));
                    }
                    s
                })
                .collect()
        };
        let init_done = self.init_index >= self.init.len();
        let ready = self.phase == "Running"
            && self.terminating_until.is_none()
            && self.containers.iter().all(|c| c.ready);
        let cond = |ty: &str, ok: bool| json!({"type": ty, "status": if ok {"True"} else {"False"}, "lastProbeTime": null, "lastTransitionTime": now});
        let mut status = json!({
            "phase": self.phase,
            "hostIP": HOST_IP,
            "hostIPs": [{"ip": HOST_IP}],
            "qosClass": "BestEffort",
            "conditions": [
                cond("PodReadyToStartContainers", true),
                cond("Initialized", init_done),
                cond("Ready", ready),
                cond("ContainersReady", ready),
                cond("PodScheduled", true),
            ],
            "containerStatuses": statuses(&self.containers),
        });
        if !self.init.is_empty() {
            status["initContainerStatuses"] = json!(statuses(&self.init));
        }
        if let Some(ip) = &self.pod_ip {
            if self.phase != "Pending" || init_done {
                status["podIP"] = json!(ip);
                status["podIPs"] = json!([{"ip": ip}]);
            }
        }
        if let Some(t) = self.start_time {
            status["startTime"] = json!(rfc3339(t));
        }
        if let Some(r) = &self.reason {
            status["reason"] = json!(r);
        }
        if let Some(m) = &self.message {
            status["message"] = json!(m);
        }
        let r = self
            .k
            .store
            .modify(Resource::Pod, &self.ns, &self.name, &mut |o: &mut Value| {
                if o["metadata"]["uid"].as_str() != Some(self.uid.as_str()) {
                    return Err(StoreError::NotFound {
                        resource: Resource::Pod,
                        name: self.name.clone(),
                    });
                }
                // Keep lastTransitionTime stable when a condition is unchanged.
                let mut st = status.clone();
                if let (Some(old), Some(new)) = (
                    o["status"]["conditions"].as_array(),
                    st["conditions"].as_array_mut(),
                ) {
                    for c in new.iter_mut() {
                        if let Some(prev) = old
                            .iter()
                            .find(|p| p["type"] == c["type"] && p["status"] == c["status"])
                        {
                            c["lastTransitionTime"] = prev["lastTransitionTime"].clone();
                        }
                    }
                }
                o["status"] = st;
                Ok(())
            });
        match r {
            Ok(p) => self.pod = p,
            Err(StoreError::NotFound { .. }) => self.deleted = true,
            Err(e) => log::warn!("kubelet: status of {}/{}: {e:?}", self.ns, self.name),
        }
    }
}
