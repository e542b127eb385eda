//! Watch fan-out: the history ring that lets a client resume from a
//! resourceVersion, the per-kind registry of watchers, and the stream a
//! watcher reads.
//!
//! Shape and why:
//! - Every change becomes one `Change` holding one shared `Arc<Event>`; its
//!   JSON is produced at most once (`OnceLock`) however many watchers send it.
//! - The writer matches the change against each watcher of that kind (namespace
//!   compare, then selectors) and `try_send`s on the watcher's BOUNDED channel.
//!   It never blocks: a watcher whose queue is full is terminated (its sender
//!   dropped, so its reader drains what was queued and then sees
//!   `Disconnected`, exactly like a server closing a slow watch). The client
//!   re-watches from the last RV it saw; nothing grows without bound.
//! - Events reach the hub in RV order because the store takes the hub lock
//!   before releasing its own write lock (lock hand-over), so each watcher
//!   sees a gap-free, ordered sequence.
//! - Selected watches follow upstream's cacher: a MODIFIED that moves an
//!   object into the selection is sent as ADDED, out of it as DELETED (with
//!   the previous state at the new RV).
//!
//! This module never touches stored objects and never blocks on a reader.

use super::{Obj, StoreError};
use crate::kube::watch::EventType;
use crate::sim::resources::{Resource, COUNT};
use crate::sim::selector::Selectors;
use crossbeam_channel::{Receiver, Sender, TrySendError};
pub use crossbeam_channel::{RecvTimeoutError, TryRecvError};
use parking_lot::Mutex;
use std::collections::{HashMap, VecDeque};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, OnceLock, Weak};
use std::time::{Duration, Instant};

/// One watch event, shared by every watcher that receives it.
#[derive(Debug)]
pub struct Event {
    pub ty: EventType,
    /// The resourceVersion of the change (also in `object`).
    pub rv: u64,
    /// The full object, with `kind` and `apiVersion`.
    pub object: Obj,
    json: OnceLock<Vec<u8>>,
    line: OnceLock<Vec<u8>>,
}

impl Event {
    pub fn new(ty: EventType, rv: u64, object: Obj) -> Event {
        Event {
            ty,
            rv,
            object,
            json: OnceLock::new(),
            line: OnceLock::new(),
        }
    }

    /// The object serialized as JSON, computed once and shared.
    pub fn object_json(&self) -> &[u8] {
        self.json
            .get_or_init(|| serde_json::to_vec(&self.object).unwrap_or_default())
    }

    /// The whole watch line `{"type":"ADDED","object":{…}}\n`, computed once
    /// and shared: what a chunked watch response writes per event.
    pub fn line(&self) -> &[u8] {
        self.line.get_or_init(|| {
            let obj = self.object_json();
            let mut v = Vec::with_capacity(obj.len() + 32);
            v.extend_from_slice(b"{\"type\":\"");
            v.extend_from_slice(self.ty.as_str().as_bytes());
            v.extend_from_slice(b"\",\"object\":");
            v.extend_from_slice(obj);
            v.extend_from_slice(b"}\n");
            v
        })
    }
}

/// Where a watch starts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum WatchFrom {
    /// Only changes after the current RV.
    Now,
    /// Only changes after this RV (replayed from history; a future RV waits).
    Rv(u64),
    /// resourceVersion "0" or unset: a synthetic ADDED for every current
    /// matching object, then live changes.
    InitialAdded,
}

/// A change as recorded in the history ring.
#[derive(Debug)]
pub(crate) struct Change {
    pub res: Resource,
    /// "" for cluster-scoped kinds.
    pub ns: String,
    pub event: Arc<Event>,
    /// For MODIFIED: the object before the change.
    pub prev: Option<Obj>,
    as_added: OnceLock<Arc<Event>>,
    as_deleted: OnceLock<Arc<Event>>,
}

impl Change {
    pub fn new(res: Resource, ns: String, event: Event, prev: Option<Obj>) -> Change {
        Change {
            res,
            ns,
            event: Arc::new(event),
            prev,
            as_added: OnceLock::new(),
            as_deleted: OnceLock::new(),
        }
    }

    /// The event a watcher with these selectors should get, if any.
    fn view_for(&self, sel: &Selectors) -> Option<Arc<Event>> {
        if sel.is_everything() {
            return Some(self.event.clone());
        }
        let cur = sel.matches(&self.event.object);
        let prev = match (&self.prev, self.event.ty) {
            (Some(p), EventType::Modified) => sel.matches(p),
            _ => return cur.then(|| self.event.clone()),
        };
        match (cur, prev) {
            (true, true) => Some(self.event.clone()),
            (true, false) => Some(
                self.as_added
                    .get_or_init(|| {
                        Arc::new(Event::new(
                            EventType::Added,
                            self.event.rv,
                            self.event.object.clone(),
                        ))
                    })
                    .clone(),
            ),
            (false, true) => Some(
                self.as_deleted
                    .get_or_init(|| {
                        let mut old = self.prev.clone().unwrap_or_default();
                        super::set_rv(&mut old, self.event.rv);
                        Arc::new(Event::new(EventType::Deleted, self.event.rv, old))
                    })
                    .clone(),
            ),
            (false, false) => None,
        }
    }
}

struct Watcher {
    id: u64,
    ns: Option<String>,
    sel: Selectors,
    tx: Sender<Arc<Event>>,
}

impl Watcher {
    fn wants(&self, c: &Change) -> Option<Arc<Event>> {
        if let Some(ns) = &self.ns {
            if *ns != c.ns {
                return None;
            }
        }
        c.view_for(&self.sel)
    }
}

/// The watchers of one kind. Watches pinned to one name by a
/// `metadata.name=X` field selector (what `kubectl delete`/`wait` and
/// single-object clients open, often by the thousand) are indexed by that
/// name, so an event costs a hash lookup plus the unpinned watchers, not a
/// match per watcher. A name never changes, so the index is exact even for
/// selection transitions.
#[derive(Default)]
struct Registry {
    general: Vec<Watcher>,
    by_name: HashMap<String, Vec<Watcher>>,
}

impl Registry {
    fn len(&self) -> usize {
        self.general.len() + self.by_name.values().map(Vec::len).sum::<usize>()
    }
}

/// Delivers to each watcher of a list; returns how many overflowed. Dead
/// watchers (full or disconnected) are removed, which drops their sender.
fn fan_out(list: &mut Vec<Watcher>, c: &Change) -> u64 {
    let mut dead = false;
    let mut overflowed = 0;
    for w in list.iter_mut() {
        let Some(ev) = w.wants(c) else { continue };
        match w.tx.try_send(ev) {
            Ok(()) => {}
            Err(TrySendError::Full(_)) => {
                log::debug!("watch {} on {:?} terminated: queue full", w.id, c.res);
                overflowed += 1;
                w.id = 0;
                dead = true;
            }
            Err(TrySendError::Disconnected(_)) => {
                w.id = 0;
                dead = true;
            }
        }
    }
    if dead {
        list.retain(|w| w.id != 0);
    }
    overflowed
}

/// History ring plus watcher registry; guarded by one mutex in the store.
pub(crate) struct Hub {
    history: VecDeque<Arc<Change>>,
    cap: usize,
    /// RV of the newest change evicted from the ring (0: none yet). A resume
    /// from an RV below it may have missed events.
    evicted_rv: u64,
    watchers: [Registry; COUNT],
    next_id: u64,
    queue: usize,
    /// Watchers terminated because their queue was full (a metric).
    pub overflowed: u64,
}

impl Hub {
    pub fn new(cap: usize, queue: usize) -> Hub {
        Hub {
            history: VecDeque::with_capacity(cap.min(65_536)),
            cap: cap.max(1),
            evicted_rv: 0,
            watchers: Default::default(),
            next_id: 1,
            queue: queue.max(1),
            overflowed: 0,
        }
    }

    /// Records a change and delivers it to every interested watcher.
    pub fn publish(&mut self, c: Change) {
        let c = Arc::new(c);
        let reg = &mut self.watchers[c.res.index()];
        let mut overflowed = fan_out(&mut reg.general, &c);
        if !reg.by_name.is_empty() {
            let name = super::meta_str(&c.event.object, "name");
            if let Some(list) = reg.by_name.get_mut(name) {
                overflowed += fan_out(list, &c);
                if list.is_empty() {
                    reg.by_name.remove(name);
                }
            }
        }
        self.overflowed += overflowed;
        if self.history.len() == self.cap {
            if let Some(old) = self.history.pop_front() {
                self.evicted_rv = old.event.rv;
            }
        }
        self.history.push_back(c);
    }

    /// Registers a watcher; `replay_after` asks for the history after that RV
    /// (`Expired` when it is older than the window). Returns the stream's
    /// receiver, its id and the replayed backlog.
    #[allow(clippy::type_complexity)]
    pub fn register(
        &mut self,
        res: Resource,
        ns: Option<&str>,
        sel: Selectors,
        replay_after: Option<u64>,
    ) -> Result<(Receiver<Arc<Event>>, u64, VecDeque<Arc<Event>>), StoreError> {
        let mut backlog = VecDeque::new();
        if let Some(from) = replay_after {
            if from < self.evicted_rv {
                let oldest = self
                    .history
                    .front()
                    .map_or(self.evicted_rv + 1, |c| c.event.rv);
                return Err(StoreError::Expired(format!(
                    "too old resource version: {from} ({oldest})"
                )));
            }
            // The ring is in RV order: skip to the first change after `from`.
            let start = self.history.partition_point(|c| c.event.rv <= from);
            for c in self.history.range(start..) {
                if c.res != res || ns.is_some_and(|n| n != c.ns) {
                    continue;
                }
                if let Some(ev) = c.view_for(&sel) {
                    backlog.push_back(ev);
                }
            }
        }
        let (tx, rx) = crossbeam_channel::bounded(self.queue);
        let id = self.next_id;
        self.next_id += 1;
        let pinned = sel.field.exact_name().map(str::to_string);
        let w = Watcher {
            id,
            ns: ns.map(str::to_string),
            sel,
            tx,
        };
        let reg = &mut self.watchers[res.index()];
        match pinned {
            Some(name) => reg.by_name.entry(name).or_default().push(w),
            None => reg.general.push(w),
        }
        Ok((rx, id, backlog))
    }

    fn deregister(&mut self, res: Resource, id: u64, pinned: Option<&str>) {
        let reg = &mut self.watchers[res.index()];
        let list = match pinned {
            Some(name) => match reg.by_name.get_mut(name) {
                Some(l) => l,
                None => return,
            },
            None => &mut reg.general,
        };
        if let Some(i) = list.iter().position(|w| w.id == id) {
            list.swap_remove(i);
        }
        if let Some(name) = pinned {
            if reg.by_name.get(name).is_some_and(Vec::is_empty) {
                reg.by_name.remove(name);
            }
        }
    }

    /// Ends every watch of a kind (or of all kinds): readers drain their
    /// queues, then see `Disconnected`.
    pub fn terminate(&mut self, res: Option<Resource>) -> usize {
        let mut n = 0;
        for (i, reg) in self.watchers.iter_mut().enumerate() {
            if res.is_none_or(|r| r.index() == i) {
                n += reg.len();
                *reg = Registry::default();
            }
        }
        n
    }

    pub fn watcher_count(&self) -> usize {
        self.watchers.iter().map(Registry::len).sum()
    }
}

/// A live watch. Events arrive in RV order without gaps until the stream is
/// disconnected (queue overflow, `terminate_watches`, or store drop). Dropping
/// it deregisters the watcher.
pub struct WatchStream {
    rx: Receiver<Arc<Event>>,
    backlog: Mutex<VecDeque<Arc<Event>>>,
    /// Live events at or below this RV are skipped (a watch from a future RV).
    skip_through: u64,
    /// The RV the stream is known to be caught up to once its backlog is out.
    start_rv: u64,
    last_rv: AtomicU64,
    hub: Weak<Mutex<Hub>>,
    res: Resource,
    id: u64,
    /// The name this watch is indexed under in the registry, if pinned.
    pinned: Option<String>,
}

impl WatchStream {
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn new(
        rx: Receiver<Arc<Event>>,
        backlog: VecDeque<Arc<Event>>,
        skip_through: u64,
        start_rv: u64,
        before: u64,
        hub: Weak<Mutex<Hub>>,
        res: Resource,
        id: u64,
        pinned: Option<String>,
    ) -> WatchStream {
        // `before`: what `rv()` reports while a backlog is still queued.
        let last = if backlog.is_empty() {
            start_rv.max(skip_through)
        } else {
            before
        };
        WatchStream {
            rx,
            backlog: Mutex::new(backlog),
            skip_through,
            start_rv,
            last_rv: AtomicU64::new(last),
            hub,
            res,
            id,
            pinned,
        }
    }

    fn pop_backlog(&self) -> Option<Arc<Event>> {
        let mut b = self.backlog.lock();
        let ev = b.pop_front()?;
        let rv = if b.is_empty() {
            ev.rv.max(self.start_rv)
        } else {
            ev.rv
        };
        self.last_rv.fetch_max(rv, Ordering::Relaxed);
        Some(ev)
    }

    fn accept(&self, ev: Arc<Event>) -> Option<Arc<Event>> {
        if ev.rv <= self.skip_through {
            return None;
        }
        self.last_rv.fetch_max(ev.rv, Ordering::Relaxed);
        Some(ev)
    }

    /// Waits up to `d` for the next event.
    pub fn recv_timeout(&self, d: Duration) -> Result<Arc<Event>, RecvTimeoutError> {
        if let Some(ev) = self.pop_backlog() {
            return Ok(ev);
        }
        let deadline = Instant::now() + d;
        loop {
            let ev = self.rx.recv_deadline(deadline)?;
            if let Some(ev) = self.accept(ev) {
                return Ok(ev);
            }
        }
    }

    /// Takes the next event if one is ready.
    pub fn try_recv(&self) -> Result<Arc<Event>, TryRecvError> {
        if let Some(ev) = self.pop_backlog() {
            return Ok(ev);
        }
        loop {
            let ev = self.rx.try_recv()?;
            if let Some(ev) = self.accept(ev) {
                return Ok(ev);
            }
        }
    }

    /// The RV this stream has caught up to: a re-watch from here misses
    /// nothing this stream would have delivered. Suitable for BOOKMARKs.
    pub fn rv(&self) -> u64 {
        self.last_rv.load(Ordering::Relaxed)
    }

    /// The kind being watched.
    pub fn resource(&self) -> Resource {
        self.res
    }
}

impl Drop for WatchStream {
    fn drop(&mut self) {
        if let Some(hub) = self.hub.upgrade() {
            hub.lock()
                .deregister(self.res, self.id, self.pinned.as_deref());
        }
    }
}

impl std::fmt::Debug for WatchStream {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("WatchStream")
            .field("res", &self.res)
            .field("id", &self.id)
            .field("rv", &self.rv())
            .finish()
    }
}
