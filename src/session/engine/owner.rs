//! A session's owner thread (`session-<id>`): the loop that feeds the
//! machine its inputs (inbox, parked pod updates, ticks, the subscriber
//! count) and carries out the commands it answers with, in order. Work
//! that may block (the cluster, the agent, attach streams) goes to a
//! short-lived `session-work` thread whose result comes back as an input;
//! see [`cluster`](super::cluster) and [`attach`](super::attach).

use super::agent_ops::AgentTarget;
use super::checkpoint::{checkpoint, entries_last, read_checkpoint, write_atomic};
use super::{now_ms, Engine, Handle, Msg};
use crate::session::access::PodTarget;
use crate::session::io::attach::AttachHandle;
use crate::session::io::persist::encode_ring;
use crate::session::io::ring::Recovered;
use crate::session::io::wire::{CLOSE_ENDED, CLOSE_GOING_AWAY};
use crate::session::machine::{Command, Event, Input, Millis, OutStream, SeedSource, Session};
use crate::session::pod_hub::PodUpdate;
use crate::session::relay::probe::{start_probe, ProbeHandle};
use crate::session::relay::{start_relay, RelayHandle};
use crate::session::spec::Bundle;
use crossbeam_channel::{Receiver, RecvTimeoutError, Sender};
use parking_lot::Mutex;
use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// The owner thread's I/O state (the `Session` itself is a local of `run`).
pub(super) struct Owner {
    pub(super) engine: Arc<Engine>,
    pub(super) handle: Arc<Handle>,
    pub(super) inbox_tx: Sender<Msg>,
    pub(super) bundle: Option<Bundle>,
    /// The body-budget reservation the bundle came with (dropped with it).
    pub(super) bundle_permit: Option<Box<dyn std::any::Any + Send>>,
    /// Pods whose updates the hub routes here (shared with the owner
    /// thread's panic handler, which drops the routes).
    pub(super) watches: Arc<Mutex<std::collections::HashSet<String>>>,
    /// Pod updates a full inbox refused, oldest first, one per pod (the
    /// latest state wins); drained by the owner at every turn.
    pub(super) overflow: Arc<Mutex<Vec<(String, Input)>>>,
    /// The digest of the workspace listing (paths and content hashes) the
    /// checkpoint file holds; a checkpoint of an unchanged workspace only
    /// lists it.
    pub(super) checkpointed: Arc<Mutex<Option<[u8; 32]>>>,
    /// Debug relays by pod.
    pub(super) relays: HashMap<String, Vec<RelayHandle>>,
    /// Reachability probes by pod, app and port.
    pub(super) probes: HashMap<(String, String, u16), ProbeHandle>,
    /// Attach streams by pod; workers add theirs, unless the pod's
    /// attaches were closed meanwhile (then they close it at once).
    pub(super) attaches: Arc<Mutex<Attaches>>,
    pub(super) subscribers: usize,
}

/// A session's attach streams (see [`Owner::attaches`]).
#[derive(Default)]
pub(super) struct Attaches {
    pub(super) open: HashMap<String, Vec<AttachHandle>>,
    pub(super) closed: std::collections::HashSet<String>,
}

impl Owner {
    pub(super) fn run(mut self, mut s: Session, first: Vec<Command>, inbox: Receiver<Msg>) {
        let mut done = self.execute(&s, first);
        let mut stopped: Option<Sender<()>> = None;
        // Ticks are due by the clock, not by a quiet inbox: a pod that
        // keeps changing (an image pull retried every few hundred ms) must
        // not hold off the start deadline.
        let mut next_tick = Instant::now() + Duration::from_millis(s.tick_interval_ms());
        while !done {
            let parked = std::mem::take(&mut *self.overflow.lock());
            for (_, i) in parked {
                let cmds = s.handle(i, now_ms());
                done = self.execute(&s, cmds);
                if done {
                    break;
                }
            }
            if done {
                break;
            }
            let now = Instant::now();
            if now >= next_tick {
                next_tick = now + Duration::from_millis(s.tick_interval_ms());
                // The subscriber count first: a viewer who just came must
                // keep the tick from suspending an idle session.
                done = self.idle_turn(&mut s);
                if done {
                    break;
                }
                let cmds = s.handle(Input::Tick, now_ms());
                // Most ticks of a settled session change nothing: no
                // commands, no new view to publish (building it every
                // second was most of an idle session's CPU).
                if !cmds.is_empty() {
                    done = self.execute(&s, cmds);
                }
                continue;
            }
            let cmds = match inbox.recv_timeout(next_tick - now) {
                Ok(Msg::Wake) => Vec::new(),
                #[cfg(debug_assertions)]
                Ok(Msg::Panic) => panic!("a panic injected by the test hook"),
                Ok(Msg::Shutdown(reply)) => {
                    self.persist(&s);
                    stopped = Some(reply);
                    break;
                }
                Ok(Msg::Input(i)) => s.handle(i, now_ms()),
                Ok(Msg::User(op, reply)) => match s.user(op, now_ms()) {
                    Ok(c) => {
                        let _ = reply.send(Ok(()));
                        c
                    }
                    Err(e) => {
                        let _ = reply.send(Err(e));
                        Vec::new()
                    }
                },
                Err(RecvTimeoutError::Timeout) => continue,
                Err(RecvTimeoutError::Disconnected) => break,
            };
            done = self.execute(&s, cmds);
            if !done {
                done = self.idle_turn(&mut s);
            }
            // A phase that needs finer ticks (a new pod's bring-up) gets
            // them from now on.
            next_tick = next_tick.min(Instant::now() + Duration::from_millis(s.tick_interval_ms()));
        }
        for name in self.watches.lock().drain() {
            self.engine.pods.unregister(&name);
        }
        for (_, r) in self.relays.drain() {
            r.iter().for_each(RelayHandle::stop);
        }
        for (_, p) in self.probes.drain() {
            p.stop();
        }
        let open: Vec<AttachHandle> = self
            .attaches
            .lock()
            .open
            .drain()
            .flat_map(|(_, v)| v)
            .collect();
        open.into_iter().for_each(AttachHandle::close);
        for io in self.handle.ios.lock().values() {
            io.end(CLOSE_ENDED, "session ended");
        }
        if let Some(reply) = stopped {
            let _ = reply.send(());
        }
    }

    /// The daemon stops (see [`Engine::shutdown`]).
    fn persist(&mut self, s: &Session) {
        let dir = self.engine.io_dir(s.id());
        for (app, io) in self.handle.ios.lock().iter() {
            if io.is_holding() {
                // A re-adoption still recovering: what it could not
                // recover is announced as a gap, and the held output kept.
                io.release_any(Recovered::Unavailable, OutStream::Stdout);
            }
            // Ended first: nothing gets a seq after the image is taken, so
            // every seq a viewer saw is in the file.
            io.end(
                CLOSE_GOING_AWAY,
                "kubegate is stopping; reconnect with lastSeq when it is back",
            );
            let img = io.ring_image();
            let path = dir.join(format!("{app}.ring"));
            if let Err(e) = write_atomic(&path, &encode_ring(&img)) {
                log::error!("session {}: persisting {app}'s output: {e}", s.id());
            }
        }
        if *s.status() == crate::session::machine::Status::Running {
            if let Some((pod, ip)) = self.handle.pod() {
                let t = self.target(s, &pod, ip);
                let path = self.engine.checkpoint_path(s.id());
                if let Err(e) = checkpoint(&*self.engine.agent, &t, &path, &self.checkpointed) {
                    log::warn!("session {}: last checkpoint: {e}", s.id());
                }
            }
        }
        let path = self.engine.record_path(s.id());
        if let Err(e) = write_atomic(&path, s.record().to_string().as_bytes()) {
            log::error!("session {}: writing its record: {e}", s.id());
        }
    }

    /// Subscribers come and go on other threads: the idle rule hears of
    /// changes here, after every turn. True once the session finished.
    fn idle_turn(&mut self, s: &mut Session) -> bool {
        let n = self.handle.subscribers();
        if n == self.subscribers {
            return false;
        }
        self.subscribers = n;
        let cmds = s.handle(Input::Subscribers { count: n }, now_ms());
        self.execute(s, cmds)
    }

    /// Carries out commands in order; true once the session finished.
    fn execute(&mut self, s: &Session, cmds: Vec<Command>) -> bool {
        // The machine is already in its new state: publish the view first,
        // so a client that reacts to an emitted event reads a view at least
        // that new.
        *self.handle.view.lock() = s.view();
        *self.handle.pod.lock() = s.pod().and_then(|p| Some((p.name.clone(), p.ip.clone()?)));
        let mut finished = false;
        for c in cmds {
            match c {
                Command::CreatePod { pod } => self.create_pod(*pod),
                Command::CreateSecret { pod, uid } => self.create_secret(s, pod, uid),
                Command::DeletePod { name } => self.delete_pod(name),
                Command::WatchPod { name } => self.watch_pod(name),
                Command::StopWatch { name } => {
                    if self.watches.lock().remove(&name) {
                        self.engine.pods.unregister(&name);
                    }
                }
                Command::ProbeAgent { pod, ip, deadline } => {
                    self.probe_agent(s, pod, ip, deadline);
                }
                Command::Seed { pod, ip, source } => self.seed(s, pod, ip, source),
                Command::DropBundle => {
                    self.bundle = None;
                    self.bundle_permit = None;
                }
                Command::Checkpoint { pod, ip } => self.checkpoint(s, pod, ip),
                Command::DeleteCheckpoint => {
                    self.checkpointed.lock().take();
                    let _ = std::fs::remove_file(self.engine.checkpoint_path(s.id()));
                }
                Command::Touch { pod, ip, path } => self.touch(s, pod, ip, path),
                Command::Publish {
                    id,
                    service,
                    ingress,
                    routes,
                } => self.publish(id, service, ingress, routes),
                Command::ReadRoutes => self.read_routes(),
                Command::Emit(ev) => self.emit(&ev),
                Command::WriteRecord => self.write_record(s),
                Command::Finished => {
                    *self.handle.finished.lock() = Some(Instant::now());
                    finished = true;
                }
                Command::StartRelay { pod, ip, app, port } => self.start_relay(pod, ip, app, port),
                Command::StopRelays { pod } => {
                    for r in self.relays.remove(&pod).unwrap_or_default() {
                        r.stop();
                    }
                }
                Command::StartProbe { pod, ip, app, port } => self.start_probe(pod, ip, app, port),
                Command::StopProbe { pod, app, port } => {
                    if let Some(h) = self.probes.remove(&(pod, app, port)) {
                        h.stop();
                    }
                }
                Command::StopProbes { pod } => self.stop_probes(&pod),
                Command::Attach {
                    pod,
                    app,
                    container,
                    tty,
                    recover,
                } => self.attach(pod, app, container, tty, recover),
                Command::CloseAttaches { pod } => self.close_attaches(pod),
                Command::Output { app, stream, text } => {
                    self.handle.io(&app).push_notice(stream, text.into_bytes());
                }
            }
        }
        finished
    }

    /// Waits for the pod's agent on a worker (`AgentReady` or `AgentFailed`).
    fn probe_agent(&self, s: &Session, pod: String, ip: String, deadline: Millis) {
        let t = self.target(s, &pod, ip);
        let left = Duration::from_millis(deadline.saturating_sub(now_ms()));
        let agent = self.engine.agent.clone();
        self.work(move || match agent.wait_ready(&t, Instant::now() + left) {
            Ok(()) => Input::AgentReady { pod },
            Err(e) => Input::AgentFailed {
                pod,
                message: e.to_string(),
            },
        });
    }

    /// Writes the workspace (the bundle, or the checkpoint) on a worker,
    /// the apps' entries last (`SeedDone` or `SeedFailed`).
    fn seed(&self, s: &Session, pod: String, ip: String, source: SeedSource) {
        let t = self.target(s, &pod, ip);
        let files = match source {
            SeedSource::Bundle => Ok(self
                .bundle
                .as_ref()
                .map(|b| {
                    b.files
                        .iter()
                        .map(|f| (f.path.clone(), f.data.clone()))
                        .collect()
                })
                .unwrap_or_default()),
            SeedSource::Checkpoint => read_checkpoint(&self.engine.checkpoint_path(s.id())),
        };
        let entries: Vec<String> = s.apps().iter().map(|a| a.spec.entry.clone()).collect();
        let files = files.map(|f| entries_last(f, &entries));
        let agent = self.engine.agent.clone();
        self.work(move || {
            let r = files
                .map_err(|e| e.to_string())
                .and_then(|f| agent.write_all(&t, f).map_err(|e| e.to_string()));
            match r {
                Ok(()) => Input::SeedDone { pod },
                Err(message) => Input::SeedFailed { pod, message },
            }
        });
    }

    /// Checkpoints the workspace on a worker (`CheckpointDone` or
    /// `CheckpointFailed`).
    fn checkpoint(&self, s: &Session, pod: String, ip: String) {
        let t = self.target(s, &pod, ip);
        let agent = self.engine.agent.clone();
        let path = self.engine.checkpoint_path(s.id());
        let last = self.checkpointed.clone();
        self.work(move || match checkpoint(&*agent, &t, &path, &last) {
            Ok(()) => Input::CheckpointDone { pod },
            Err(e) => Input::CheckpointFailed {
                pod,
                message: e.to_string(),
            },
        });
    }

    /// Rewrites an app's entry on a worker, so its runner restarts it
    /// (only a failure is an input: `ReloadFailed`).
    fn touch(&self, s: &Session, pod: String, ip: String, path: String) {
        let t = self.target(s, &pod, ip);
        let agent = self.engine.agent.clone();
        let app = s
            .apps()
            .iter()
            .find(|a| {
                crate::session::pod::entry_path(&a.spec.entry) == path || a.spec.entry == path
            })
            .map(|a| a.spec.name.clone())
            .unwrap_or_default();
        let rel = path
            .strip_prefix(crate::session::pod::WORKSPACE_ROOT)
            .map(|p| p.trim_start_matches('/').to_string())
            .unwrap_or(path);
        self.work_opt(move || match agent.touch(&t, &rel) {
            Ok(()) => None,
            Err(e) => Some(Input::ReloadFailed {
                pod,
                app,
                message: e.to_string(),
            }),
        });
    }

    /// Writes the session's record, atomically.
    fn write_record(&self, s: &Session) {
        let path = self.engine.record_path(s.id());
        let data = s.record().to_string();
        if let Err(e) = write_atomic(&path, data.as_bytes()) {
            log::error!("session {}: writing its record: {e}", s.id());
        }
    }

    /// Starts an app's debug relay (its frames come back as `Debug`).
    fn start_relay(&mut self, pod: String, ip: String, app: String, port: u16) {
        let tx = self.inbox_tx.clone();
        let p = pod.clone();
        let h = start_relay(
            self.engine.access.clone(),
            self.pod_target(&pod, ip),
            port,
            // Never blocks (one thread reads every relay): a full inbox
            // gives the frame back, kept and offered again; a closed one
            // means the session is over.
            move |frame| {
                let m = Msg::Input(Input::Debug {
                    pod: p.clone(),
                    app: app.clone(),
                    frame,
                });
                match tx.try_send(m) {
                    Err(crossbeam_channel::TrySendError::Full(Msg::Input(Input::Debug {
                        frame,
                        ..
                    }))) => Err(frame),
                    _ => Ok(()),
                }
            },
        );
        self.relays.entry(pod).or_default().push(h);
    }

    /// Starts a reachability probe of an app's port (its states come back
    /// as `Reachability`), replacing one of the same port.
    fn start_probe(&mut self, pod: String, ip: String, app: String, port: u16) {
        let tx = self.inbox_tx.clone();
        let (p, a) = (pod.clone(), app.clone());
        let h = start_probe(
            self.engine.access.clone(),
            self.pod_target(&pod, ip),
            port,
            move |state| {
                let _ = tx.send(Msg::Input(Input::Reachability {
                    pod: p.clone(),
                    app: a.clone(),
                    port,
                    state,
                }));
            },
        );
        if let Some(old) = self.probes.insert((pod, app, port), h) {
            old.stop();
        }
    }

    /// Stops every probe of a pod.
    fn stop_probes(&mut self, pod: &str) {
        let keys: Vec<_> = self.probes.keys().filter(|k| k.0 == pod).cloned().collect();
        for k in keys {
            if let Some(h) = self.probes.remove(&k) {
                h.stop();
            }
        }
    }

    /// Closes a pod's attach streams; one a worker is still opening is
    /// closed as it comes.
    fn close_attaches(&self, pod: String) {
        let handles = {
            let mut g = self.attaches.lock();
            g.closed.insert(pod.clone());
            g.open.remove(&pod).unwrap_or_default()
        };
        handles.into_iter().for_each(AttachHandle::close);
    }

    pub(super) fn pod_target(&self, pod: &str, ip: String) -> PodTarget {
        PodTarget {
            namespace: self.engine.settings.pod.namespace.clone(),
            name: pod.to_string(),
            ip,
        }
    }

    pub(super) fn target(&self, s: &Session, pod: &str, ip: String) -> AgentTarget {
        AgentTarget {
            namespace: self.engine.settings.pod.namespace.clone(),
            pod: pod.to_string(),
            ip,
            token: s.workspace_token().to_string(),
        }
    }

    /// Runs `f` on a worker thread; its Input goes back to the inbox.
    pub(super) fn work(&self, f: impl FnOnce() -> Input + Send + 'static) {
        self.work_opt(move || Some(f()));
    }

    /// [`Owner::work`] for work whose success needs no answer. False
    /// when the worker could not be started (logged).
    pub(super) fn work_opt(&self, f: impl FnOnce() -> Option<Input> + Send + 'static) -> bool {
        let tx = self.inbox_tx.clone();
        let spawned = std::thread::Builder::new()
            .name("session-work".into())
            .spawn(move || {
                if let Some(i) = f() {
                    let _ = tx.send(Msg::Input(i));
                }
            });
        if let Err(e) = spawned {
            log::error!("session {}: spawning a worker: {e}", self.handle.id);
            return false;
        }
        true
    }

    /// Routes the pod's updates from the engine's shared watch into the
    /// inbox (see [`deliver_into`]).
    fn watch_pod(&mut self, name: String) {
        self.watches.lock().insert(name.clone());
        self.engine.pods.register(
            &name,
            deliver_into(self.inbox_tx.clone(), self.overflow.clone()),
        );
    }

    fn emit(&self, ev: &Event) {
        let terminal = matches!(ev, Event::Status { status, .. } if status.is_terminal());
        self.handle
            .events
            .push(ev.kind(), ev.data().to_string(), terminal);
    }
}

/// A hub route into a session's inbox that never blocks the hub: what a
/// full inbox refuses is parked in `overflow` (one entry per pod, the
/// latest state wins) and a `Wake` is sent; while anything is parked,
/// later updates join it, so their order holds.
pub(super) fn deliver_into(
    tx: Sender<Msg>,
    overflow: Arc<Mutex<Vec<(String, Input)>>>,
) -> crate::session::pod_hub::Deliver {
    Box::new(move |u| {
        let (pod, input) = match u {
            PodUpdate::Observed(p) => {
                (p.metadata.name().to_string(), Input::PodObserved { pod: p })
            }
            PodUpdate::Gone(n) => (n.clone(), Input::PodGone { pod: n }),
        };
        let mut parked = overflow.lock();
        if parked.is_empty() {
            match tx.try_send(Msg::Input(input)) {
                Ok(()) => return,
                Err(crossbeam_channel::TrySendError::Full(Msg::Input(i))) => {
                    parked.push((pod, i));
                }
                // The session is over (or, not reachable, another message
                // came back).
                Err(_) => return,
            }
        } else if let Some(slot) = parked.iter_mut().find(|(p, _)| *p == pod) {
            slot.1 = input;
        } else {
            parked.push((pod, input));
        }
        drop(parked);
        let _ = tx.try_send(Msg::Wake);
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::kube::client::Pod;
    use crossbeam_channel::bounded;

    #[test]
    fn pod_updates_never_block_and_a_full_inbox_parks_the_latest_per_pod() {
        let pod = |name: &str, phase: &str| -> Box<Pod> {
            Box::new(
                serde_json::from_value(serde_json::json!({
                    "metadata": {"name": name}, "status": {"phase": phase}
                }))
                .unwrap(),
            )
        };
        let (tx, rx) = bounded(1);
        let overflow = Arc::new(Mutex::new(Vec::new()));
        let mut d = deliver_into(tx, overflow.clone());
        d(PodUpdate::Observed(pod("a", "Pending")));
        // The inbox is full from here: nothing blocks.
        d(PodUpdate::Observed(pod("a", "Running")));
        d(PodUpdate::Observed(pod("b", "Pending")));
        d(PodUpdate::Observed(pod("a", "Failed")));
        d(PodUpdate::Gone("b".into()));
        assert!(matches!(
            rx.try_recv(),
            Ok(Msg::Input(Input::PodObserved { pod })) if pod.metadata.name() == "a"
        ));
        let parked: Vec<String> = overflow
            .lock()
            .iter()
            .map(|(p, i)| match i {
                Input::PodObserved { pod } => format!(
                    "{p}:{}",
                    serde_json::to_value(pod).unwrap()["status"]["phase"]
                ),
                Input::PodGone { .. } => format!("{p}:gone"),
                _ => format!("{p}:?"),
            })
            .collect();
        assert_eq!(parked, vec!["a:\"Failed\"", "b:gone"]);
        // With room again, updates still queue behind what is parked.
        d(PodUpdate::Observed(pod("c", "Pending")));
        assert_eq!(overflow.lock().len(), 3);
        assert!(matches!(rx.try_recv(), Ok(Msg::Wake)));
    }
}
