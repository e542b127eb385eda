//! The sim's object store: every API object, the global resourceVersion
//! counter, and the watch fan-out, behind a sans-HTTP API that the REST layer,
//! the controllers and the kubelet call.
//!
//! What it owns: object identity and bookkeeping (uid, resourceVersion,
//! creationTimestamp, generation, generateName), optimistic concurrency and
//! preconditions, the create/update/status/patch/delete semantics of a real
//! API server (docs/kubernetes.md#rest-basics), and watch history/fan-out
//! (docs/kubernetes.md#watch).
//! Admission (defaults, validation, ClusterIP allocation) runs inside the
//! write lock so allocations cannot race.
//!
//! What it never does: HTTP, Status encoding, graceful deletion or garbage
//! collection (callers do those with `modify` and `delete`), and it never
//! blocks on a slow watcher.
//!
//! Why this shape: one `RwLock` over all objects keeps every write atomic and
//! gives one total order of RVs; the hub (history + watchers) has its own
//! mutex, taken before the store lock is released, so readers and the next
//! writer's validation run while the previous event is still being fanned out,
//! and yet every watcher sees events in RV order.

pub mod error;
mod watch;

#[cfg(test)]
mod tests;

pub use self::error::{CauseKind, FieldCause, StoreError};
pub use self::watch::{Event, RecvTimeoutError, TryRecvError, WatchFrom, WatchStream};
use crate::kube::watch::EventType;
pub use crate::sim::patch::PatchType;
pub use crate::sim::selector::Selectors;

use self::error::MODIFIED_MSG;
use self::watch::{Change, Hub};
use crate::kube::time::now_rfc3339;
use crate::sim::admission::allocator::{self, Allocator};
use crate::sim::admission::{self, Rejection};
use crate::sim::resources::{Resource, COUNT};
use crate::sim::serviceaccounts;
use parking_lot::{Mutex, RwLock, RwLockWriteGuard};
use rand::Rng;
use serde_json::{Map, Value};
use std::collections::BTreeMap;
use std::sync::Arc;

/// An API object, kept as JSON so every field round-trips.
pub type Obj = serde_json::Value;

/// Tunables, each with the reason for its default.
#[derive(Debug, Clone)]
pub struct StoreConfig {
    /// Changes kept for watch resumption. 5,000 covers a full relist of the
    /// 5,000-pod scale target; older RVs get 410 Expired.
    pub history_window: usize,
    /// Per-watcher queue. 1,000 events absorbs bursts (a 1,000-pod rollout)
    /// for a reader that is briefly slow; a reader further behind is cut off.
    pub watch_queue: usize,
    /// The ServiceAccount admission plugin and the `default` account made
    /// with each namespace (docs/sim.md#serviceaccounts). On in every sim;
    /// off only where a test studies resourceVersion arithmetic with no
    /// account objects in it, like an API server run with
    /// `--disable-admission-plugins=ServiceAccount` and no controllers.
    pub service_accounts: bool,
}

impl Default for StoreConfig {
    fn default() -> Self {
        StoreConfig {
            history_window: 5_000,
            watch_queue: 1_000,
            service_accounts: true,
        }
    }
}

/// Which part of an object a write targets.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Subresource {
    /// The object; `status` is kept from the stored object for kinds with a
    /// status subresource.
    Main,
    /// `/status`: only `status` is taken from the body.
    Status,
}

/// DeleteOptions preconditions.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Preconditions {
    pub uid: Option<String>,
    pub resource_version: Option<String>,
}

type Key = (String, String);

struct Inner {
    rv: u64,
    /// [`StoreConfig::service_accounts`].
    service_accounts: bool,
    objects: [BTreeMap<Key, Obj>; COUNT],
    alloc: Allocator,
}

/// The store. `Send + Sync`; share it as `Arc<Store>`.
pub struct Store {
    inner: RwLock<Inner>,
    hub: Arc<Mutex<Hub>>,
}

/// Namespaces that exist when the store is created.
const INITIAL_NAMESPACES: &[&str] = &["default", "kube-system"];

const GENERATE_ALPHABET: &[u8] = b"bcdfghjklmnpqrstvwxz2456789";

impl Store {
    /// A store holding the namespaces `default` and `kube-system` (Active).
    pub fn new(cfg: StoreConfig) -> Arc<Store> {
        let store = Store {
            inner: RwLock::new(Inner {
                rv: 0,
                service_accounts: cfg.service_accounts,
                objects: Default::default(),
                alloc: Allocator::default(),
            }),
            hub: Arc::new(Mutex::new(Hub::new(cfg.history_window, cfg.watch_queue))),
        };
        for ns in INITIAL_NAMESPACES {
            let obj = serde_json::json!({"metadata": {"name": ns}});
            if let Err(e) = store.create(Resource::Namespace, "", obj) {
                log::error!("creating namespace {ns}: {e}");
            }
        }
        Arc::new(store)
    }

    /// The newest resourceVersion handed out (sent as a string on the wire).
    pub fn current_rv(&self) -> u64 {
        self.inner.read().rv
    }

    /// Creates an object (POST to the collection).
    pub fn create(&self, res: Resource, ns: &str, obj: Obj) -> Result<Obj, StoreError> {
        let info = res.info();
        let ns = if info.namespaced { ns } else { "" };
        let mut obj = check_body(res, obj)?;
        {
            let meta = meta_mut(&mut obj);
            if info.namespaced {
                match meta.get("namespace").and_then(Value::as_str) {
                    Some(n) if !n.is_empty() && n != ns => return Err(namespace_mismatch()),
                    _ => {}
                }
                meta.insert("namespace".into(), Value::String(ns.to_string()));
            } else {
                meta.remove("namespace");
            }
            if meta
                .get("resourceVersion")
                .and_then(Value::as_str)
                .is_some_and(|s| !s.is_empty())
            {
                return Err(StoreError::BadRequest(
                    "resourceVersion should not be set on objects to be created".into(),
                ));
            }
            for k in [
                "deletionTimestamp",
                "deletionGracePeriodSeconds",
                "uid",
                "generation",
                "resourceVersion",
            ] {
                meta.remove(k);
            }
        }
        let mut g = self.inner.write();
        if info.namespaced {
            check_namespace_usable(&g, res, ns, name_of(&obj))?;
        }
        if res == Resource::Pod && g.service_accounts {
            check_pod_service_account(&g, ns, &obj)?;
        }
        if name_of(&obj).is_empty() {
            let base = meta_str(&obj, "generateName").to_string();
            if !base.is_empty() {
                let name =
                    generate_name(&base, |n| g.objects[res.index()].contains_key(&key(ns, n)));
                meta_mut(&mut obj).insert("name".into(), Value::String(name));
            }
        }
        let name = name_of(&obj).to_string();
        admission::admit_create(res, &mut obj).map_err(|r| reject(res, &name, r))?;
        crate::sim::managed::on_write(res, None, &mut obj);
        if g.objects[res.index()].contains_key(&key(ns, &name)) {
            return Err(StoreError::AlreadyExists {
                resource: res,
                name,
            });
        }
        let inner = &mut *g;
        allocator::allocate(res, &mut obj, None, &mut inner.alloc)
            .map_err(|r| reject(res, &name, r))?;
        g.rv += 1;
        let rv = g.rv;
        stamp_new(&mut obj, rv, info.has_generation);
        g.objects[res.index()].insert(key(ns, &name), obj.clone());
        let mut changes = vec![Change::new(
            res,
            ns.to_string(),
            Event::new(EventType::Added, rv, obj.clone()),
            None,
        )];
        if res == Resource::Namespace && g.service_accounts {
            // The serviceaccount controller's `default`, in the same write
            // as its namespace, so no pod create can find it missing
            // (docs/sim.md#serviceaccounts).
            let sa_ns = name.clone();
            let mut sa = serviceaccounts::default_account(&sa_ns);
            g.rv += 1;
            let sa_rv = g.rv;
            stamp_new(&mut sa, sa_rv, false);
            g.objects[Resource::ServiceAccount.index()]
                .insert(key(&sa_ns, serviceaccounts::DEFAULT), sa.clone());
            changes.push(Change::new(
                Resource::ServiceAccount,
                sa_ns,
                Event::new(EventType::Added, sa_rv, sa),
                None,
            ));
        }
        self.publish_all(g, changes);
        Ok(obj)
    }

    /// Reads one object.
    pub fn get(&self, res: Resource, ns: &str, name: &str) -> Result<Obj, StoreError> {
        let ns = scoped_ns(res, ns);
        self.inner.read().objects[res.index()]
            .get(&key(ns, name))
            .cloned()
            .ok_or_else(|| not_found(res, name))
    }

    /// Lists matching objects (one namespace or all), in namespace/name order,
    /// with the RV the list is consistent at.
    pub fn list(&self, res: Resource, ns: Option<&str>, sel: &Selectors) -> (Vec<Obj>, u64) {
        let ns = ns.filter(|_| res.info().namespaced);
        list_locked(&self.inner.read(), res, ns, sel)
    }

    /// How many objects of a kind there are (all namespaces), without
    /// copying any.
    pub fn count(&self, res: Resource) -> usize {
        self.inner.read().objects[res.index()].len()
    }

    /// Replaces an object (PUT), or its status (`Subresource::Status`).
    /// A write that changes nothing returns the stored object untouched.
    pub fn update(
        &self,
        res: Resource,
        ns: &str,
        name: &str,
        obj: Obj,
        sub: Subresource,
    ) -> Result<Obj, StoreError> {
        let ns = scoped_ns(res, ns);
        let g = self.inner.write();
        self.checked_update(g, res, ns, name, obj, sub)
    }

    /// A PUT: [`Store::update`] of the object, or, for a kind that allows
    /// it ([`Resource::allows_create_on_update`]), its creation when the
    /// name does not exist yet (the body's resourceVersion is then
    /// ignored, as upstream's registry ignores it). The flag says whether
    /// it was created (201).
    pub fn update_or_create(
        &self,
        res: Resource,
        ns: &str,
        name: &str,
        obj: Obj,
    ) -> Result<(Obj, bool), StoreError> {
        // Twice at most: a create that loses a race to another creator
        // becomes an update of what it made.
        for _ in 0..2 {
            match self.update(res, ns, name, obj.clone(), Subresource::Main) {
                Err(StoreError::NotFound { resource, .. })
                    if resource == res && res.allows_create_on_update() =>
                {
                    let mut body = check_body(res, obj.clone())?;
                    check_identity(res, scoped_ns(res, ns), name, &body)?;
                    meta_mut(&mut body).remove("resourceVersion");
                    match self.create(res, ns, body) {
                        Ok(o) => return Ok((o, true)),
                        Err(StoreError::AlreadyExists { .. }) => continue,
                        Err(e) => return Err(e),
                    }
                }
                r => return r.map(|o| (o, false)),
            }
        }
        self.update(res, ns, name, obj, Subresource::Main)
            .map(|o| (o, false))
    }

    /// Applies a patch to the stored object, then takes the update path
    /// (same validation; no RV check unless the patch sets one).
    pub fn patch(
        &self,
        res: Resource,
        ns: &str,
        name: &str,
        patch_type: PatchType,
        patch: &[u8],
        sub: Subresource,
    ) -> Result<Obj, StoreError> {
        let ns = scoped_ns(res, ns);
        let g = self.inner.write();
        let stored = stored_in(&g, res, ns, name)?;
        let patched = crate::sim::patch::apply(patch_type, stored, patch).map_err(|e| match e {
            crate::sim::patch::PatchError::BadRequest(m) => StoreError::BadRequest(m),
            crate::sim::patch::PatchError::Unprocessable(m) => StoreError::PatchNotApplicable(m),
        })?;
        self.checked_update(g, res, ns, name, patched, sub)
    }

    /// Server-side apply of `applied` by `manager` (`sim::managed`): the
    /// object merged, its `managedFields` set, or a 409 of the conflicts;
    /// an object that does not exist is created (`true` in the answer).
    pub fn apply(
        &self,
        res: Resource,
        ns: &str,
        name: &str,
        applied: Obj,
        manager: &str,
        force: bool,
    ) -> Result<(Obj, bool), StoreError> {
        use crate::sim::managed::{self, Writer};
        let ns = scoped_ns(res, ns);
        let applied = check_body(res, applied)?;
        check_identity(res, ns, name, &applied)?;
        // A create when absent; a create that lost a race to another
        // writer is applied again over what it made.
        for _ in 0..2 {
            let g = self.inner.write();
            match stored_in(&g, res, ns, name) {
                Ok(stored) => {
                    let merged = managed::apply(res, Some(stored), &applied, manager, force)?;
                    return managed::with_writer(Writer::Apply, || {
                        self.checked_update(g, res, ns, name, merged, Subresource::Main)
                    })
                    .map(|o| (o, false));
                }
                Err(StoreError::NotFound { .. }) => {
                    drop(g);
                    let obj = managed::apply(res, None, &applied, manager, force)?;
                    match managed::with_writer(Writer::Apply, || self.create(res, ns, obj)) {
                        Err(StoreError::AlreadyExists { .. }) => continue,
                        r => return r.map(|o| (o, true)),
                    }
                }
                Err(e) => return Err(e),
            }
        }
        Err(StoreError::Conflict {
            resource: res,
            name: name.to_string(),
            message: MODIFIED_MSG.into(),
        })
    }

    /// The end both a replace and a patch share: the body's kind and
    /// identity checked, then the update under the held write lock.
    fn checked_update(
        &self,
        mut g: RwLockWriteGuard<'_, Inner>,
        res: Resource,
        ns: &str,
        name: &str,
        body: Obj,
        sub: Subresource,
    ) -> Result<Obj, StoreError> {
        let obj = check_body(res, body)?;
        check_identity(res, ns, name, &obj)?;
        self.update_locked(&mut g, res, ns, name, obj, sub)
            .map(|outcome| self.finish_update(g, res, ns, outcome))
    }

    /// Atomic read-modify-write for controllers and the kubelet: `f` runs
    /// under the write lock on a copy of the stored object (keep it quick).
    /// Identity fields (name, namespace, uid, creationTimestamp, kind,
    /// apiVersion) are restored after `f`; no admission runs. Bumps the RV and
    /// emits MODIFIED only if something changed; `generation` follows `spec`.
    pub fn modify(
        &self,
        res: Resource,
        ns: &str,
        name: &str,
        f: &mut dyn FnMut(&mut Obj) -> Result<(), StoreError>,
    ) -> Result<Obj, StoreError> {
        let ns = scoped_ns(res, ns);
        let g = self.inner.write();
        let stored = stored_in(&g, res, ns, name)?;
        let mut obj = stored.clone();
        f(&mut obj)?;
        if !obj.is_object() {
            return Err(StoreError::BadRequest(
                "modify produced a non-object".into(),
            ));
        }
        restore_identity(&mut obj, stored);
        copy_meta(&mut obj, stored, "resourceVersion");
        copy_meta(&mut obj, stored, "generation");
        bump_generation(res, &mut obj, stored);
        let outcome = if obj == *stored {
            Outcome::Unchanged(stored.clone())
        } else {
            Outcome::Changed(obj, stored.clone())
        };
        Ok(self.finish_update(g, res, ns, outcome))
    }

    /// Removes an object now; watchers get DELETED with the final state at a
    /// new RV, which is also what is returned.
    pub fn delete(
        &self,
        res: Resource,
        ns: &str,
        name: &str,
        pre: &Preconditions,
    ) -> Result<Obj, StoreError> {
        let ns = scoped_ns(res, ns);
        let mut g = self.inner.write();
        let stored = stored_in(&g, res, ns, name)?;
        check_preconditions(res, name, stored, pre)?;
        let obj = g.objects[res.index()]
            .remove(&key(ns, name))
            .ok_or_else(|| not_found(res, name))?;
        Ok(self.remove_locked(g, res, ns, obj))
    }

    /// Puts `obj` as another API server holds it (node mode's mirror,
    /// `sim::nodemode::mirror`): its uid, name, namespace and timestamps
    /// kept, no admission, this store's own resourceVersion. With
    /// `keep_status`, a stored object of the same uid keeps its status (the
    /// kubelet's, written here first). An object of that name with another
    /// uid is replaced: DELETED for it, then ADDED. Unchanged: no event.
    pub fn put_mirrored(&self, res: Resource, mut obj: Obj, keep_status: bool) -> Obj {
        let ns = scoped_ns(res, meta_str(&obj, "namespace")).to_string();
        let name = name_of(&obj).to_string();
        let mut g = self.inner.write();
        let stored = g.objects[res.index()].get(&key(&ns, &name)).cloned();
        match stored {
            Some(stored) if meta_str(&stored, "uid") == meta_str(&obj, "uid") => {
                if keep_status {
                    set_status(&mut obj, stored.get("status").cloned());
                }
                copy_meta(&mut obj, &stored, "resourceVersion");
                let outcome = if obj == stored {
                    Outcome::Unchanged(stored)
                } else {
                    Outcome::Changed(obj, stored)
                };
                self.finish_update(g, res, &ns, outcome)
            }
            stored => {
                let mut changes = Vec::new();
                if let Some(mut old) = stored {
                    g.objects[res.index()].remove(&key(&ns, &name));
                    g.rv += 1;
                    set_rv(&mut old, g.rv);
                    changes.push(Change::new(
                        res,
                        ns.clone(),
                        Event::new(EventType::Deleted, g.rv, old),
                        None,
                    ));
                }
                g.rv += 1;
                let rv = g.rv;
                set_rv(&mut obj, rv);
                g.objects[res.index()].insert(key(&ns, &name), obj.clone());
                changes.push(Change::new(
                    res,
                    ns,
                    Event::new(EventType::Added, rv, obj.clone()),
                    None,
                ));
                self.publish_all(g, changes);
                obj
            }
        }
    }

    /// Deletes every matching object (deletecollection), one event each.
    pub fn delete_collection(&self, res: Resource, ns: Option<&str>, sel: &Selectors) -> Vec<Obj> {
        let (items, _) = self.list(res, ns, sel);
        let mut out = Vec::with_capacity(items.len());
        for o in items {
            let n = name_of(&o).to_string();
            let on = meta_str(&o, "namespace").to_string();
            // Objects replaced meanwhile are still deleted; vanished ones skipped.
            if let Ok(d) = self.delete(res, &on, &n, &Preconditions::default()) {
                out.push(d);
            }
        }
        out
    }

    /// Opens a watch on a kind (one namespace or all) with selectors.
    /// `WatchFrom::Rv` older than the history window is `Expired`.
    pub fn watch(
        &self,
        res: Resource,
        ns: Option<&str>,
        sel: Selectors,
        from: WatchFrom,
    ) -> Result<WatchStream, StoreError> {
        let ns = ns.filter(|_| res.info().namespaced);
        // Read lock first, then the hub: writers hand the hub over while
        // holding the write lock, so the snapshot and the registration are at
        // the same point in the RV sequence.
        let g = self.inner.read();
        let now = g.rv;
        let mut initial = std::collections::VecDeque::new();
        if from == WatchFrom::InitialAdded {
            let (items, _) = list_locked(&g, res, ns, &sel);
            for o in items {
                let rv = obj_rv(&o);
                initial.push_back(Arc::new(Event::new(EventType::Added, rv, o)));
            }
        }
        let mut hub = self.hub.lock();
        drop(g);
        let replay_after = match from {
            WatchFrom::Rv(rv) if rv < now => Some(rv),
            _ => None,
        };
        let pinned = sel.field.exact_name().map(str::to_string);
        let (rx, id, backlog) = hub.register(res, ns, sel, replay_after)?;
        drop(hub);
        let (backlog, skip, before) = match from {
            WatchFrom::InitialAdded => (initial, now, 0),
            WatchFrom::Now => (backlog, now, now),
            WatchFrom::Rv(rv) => (backlog, rv, rv.min(now)),
        };
        Ok(WatchStream::new(
            rx,
            backlog,
            skip,
            now,
            before,
            Arc::downgrade(&self.hub),
            res,
            id,
            pinned,
        ))
    }

    /// Ends every open watch of a kind, or of every kind (fault injection,
    /// shutdown). Returns how many were ended.
    pub fn terminate_watches(&self, res: Option<Resource>) -> usize {
        self.hub.lock().terminate(res)
    }

    /// Open watches, and watches ended because their queue was full.
    pub fn watch_stats(&self) -> (usize, u64) {
        let h = self.hub.lock();
        (h.watcher_count(), h.overflowed)
    }

    // ---- internals

    fn update_locked(
        &self,
        g: &mut Inner,
        res: Resource,
        ns: &str,
        name: &str,
        body: Obj,
        sub: Subresource,
    ) -> Result<Outcome, StoreError> {
        let stored = stored_in(g, res, ns, name)?;
        let body_rv = meta_str(&body, "resourceVersion");
        if body_rv.is_empty() && !res.allows_unconditional_update() {
            return Err(StoreError::ResourceVersionRequired {
                resource: res,
                name: name.to_string(),
            });
        }
        if !body_rv.is_empty() && body_rv != meta_str(stored, "resourceVersion") {
            return Err(StoreError::Conflict {
                resource: res,
                name: name.to_string(),
                message: MODIFIED_MSG.into(),
            });
        }
        let body_uid = meta_str(&body, "uid");
        let stored_uid = meta_str(stored, "uid");
        if !body_uid.is_empty() && body_uid != stored_uid {
            return Err(StoreError::Conflict {
                resource: res,
                name: name.to_string(),
                message: format!(
                    "Precondition failed: UID in precondition: {body_uid}, UID in object meta: {stored_uid}"
                ),
            });
        }
        let new = match sub {
            Subresource::Status => {
                if !res.has_status_subresource() {
                    return Err(StoreError::BadRequest(format!(
                        "{} do not have a status subresource",
                        res.info().plural
                    )));
                }
                let mut new = stored.clone();
                set_status(&mut new, body.get("status").cloned());
                new
            }
            Subresource::Main => {
                let mut new = body;
                restore_identity(&mut new, stored);
                copy_meta(&mut new, stored, "generation");
                if meta_of(stored).is_some_and(|m| m.contains_key("deletionTimestamp")) {
                    copy_meta(&mut new, stored, "deletionTimestamp");
                }
                if meta_of(stored).is_some_and(|m| m.contains_key("deletionGracePeriodSeconds")) {
                    copy_meta(&mut new, stored, "deletionGracePeriodSeconds");
                }
                if res.has_status_subresource() {
                    set_status(&mut new, stored.get("status").cloned());
                }
                admission::admit_update(res, &mut new, stored).map_err(|r| reject(res, name, r))?;
                bump_generation(res, &mut new, stored);
                crate::sim::managed::on_write(res, Some(stored), &mut new);
                new
            }
        };
        let mut new = new;
        copy_meta(&mut new, stored, "resourceVersion");
        if new == *stored {
            return Ok(Outcome::Unchanged(stored.clone()));
        }
        let stored = stored.clone();
        let inner = &mut *g;
        allocator::allocate(res, &mut new, Some(&stored), &mut inner.alloc)
            .map_err(|r| reject(res, name, r))?;
        allocator::release(res, &stored, Some(&new), &mut inner.alloc);
        Ok(Outcome::Changed(new, stored))
    }

    /// Commits an update outcome: bumps the RV, stores, publishes.
    fn finish_update(
        &self,
        mut g: RwLockWriteGuard<'_, Inner>,
        res: Resource,
        ns: &str,
        outcome: Outcome,
    ) -> Obj {
        match outcome {
            Outcome::Unchanged(o) => o,
            Outcome::Changed(mut new, prev) => {
                g.rv += 1;
                let rv = g.rv;
                set_rv(&mut new, rv);
                let name = name_of(&new).to_string();
                g.objects[res.index()].insert(key(ns, &name), new.clone());
                let ev = Event::new(EventType::Modified, rv, new.clone());
                self.publish(g, Change::new(res, ns.to_string(), ev, Some(prev)));
                new
            }
        }
    }

    fn remove_locked(
        &self,
        mut g: RwLockWriteGuard<'_, Inner>,
        res: Resource,
        ns: &str,
        mut obj: Obj,
    ) -> Obj {
        allocator::release(res, &obj, None, &mut g.alloc);
        g.rv += 1;
        let rv = g.rv;
        set_rv(&mut obj, rv);
        let ev = Event::new(EventType::Deleted, rv, obj.clone());
        self.publish(g, Change::new(res, ns.to_string(), ev, None));
        obj
    }

    /// Hands the change to the hub: takes the hub lock, then releases the
    /// store lock, so events are published in RV order while the next writer
    /// may already proceed with its own work.
    fn publish(&self, g: RwLockWriteGuard<'_, Inner>, c: Change) {
        let mut hub = self.hub.lock();
        drop(g);
        hub.publish(c);
    }

    /// [`Store::publish`] for one write that made several changes, in
    /// their RV order.
    fn publish_all(&self, g: RwLockWriteGuard<'_, Inner>, changes: Vec<Change>) {
        let mut hub = self.hub.lock();
        drop(g);
        for c in changes {
            hub.publish(c);
        }
    }
}

enum Outcome {
    Unchanged(Obj),
    /// (new, previous)
    Changed(Obj, Obj),
}

fn list_locked(g: &Inner, res: Resource, ns: Option<&str>, sel: &Selectors) -> (Vec<Obj>, u64) {
    let map = &g.objects[res.index()];
    let items = match ns {
        Some(ns) => map
            .range(key(ns, "")..)
            .take_while(|((n, _), _)| n == ns)
            .filter(|(_, o)| sel.matches(o))
            .map(|(_, o)| o.clone())
            .collect(),
        None => map.values().filter(|o| sel.matches(o)).cloned().collect(),
    };
    (items, g.rv)
}

fn key(ns: &str, name: &str) -> Key {
    (ns.to_string(), name.to_string())
}

fn scoped_ns(res: Resource, ns: &str) -> &str {
    if res.info().namespaced {
        ns
    } else {
        ""
    }
}

fn not_found(res: Resource, name: &str) -> StoreError {
    StoreError::NotFound {
        resource: res,
        name: name.to_string(),
    }
}

fn namespace_mismatch() -> StoreError {
    StoreError::BadRequest(
        "the namespace of the provided object does not match the namespace sent on the request"
            .into(),
    )
}

fn reject(res: Resource, name: &str, r: Rejection) -> StoreError {
    match r {
        Rejection::Invalid(causes) => StoreError::Invalid {
            resource: res,
            name: name.to_string(),
            causes,
        },
        Rejection::BadRequest(m) => StoreError::BadRequest(m),
    }
}

/// Identity of a new object: uid, resourceVersion, creationTimestamp and,
/// for kinds that keep one, generation 1.
fn stamp_new(obj: &mut Obj, rv: u64, has_generation: bool) {
    let meta = meta_mut(obj);
    meta.insert("uid".into(), Value::String(new_uid()));
    meta.insert("resourceVersion".into(), Value::String(rv.to_string()));
    meta.insert("creationTimestamp".into(), Value::String(now_rfc3339()));
    if has_generation {
        meta.insert("generation".into(), Value::from(1));
    }
}

/// The ServiceAccount admission plugin on a pod create: the account the
/// pod names (or `default`) must exist in its namespace. Mirror pods are
/// left alone, as upstream does. Runs before validation, as a mutating
/// admission plugin does upstream.
fn check_pod_service_account(g: &Inner, ns: &str, pod: &Obj) -> Result<(), StoreError> {
    let mirror = meta_of(pod)
        .and_then(|m| m.get("annotations"))
        .and_then(Value::as_object)
        .is_some_and(|a| a.contains_key("kubernetes.io/config.mirror"));
    if mirror {
        return Ok(());
    }
    let empty = Map::new();
    let spec = pod.get("spec").and_then(Value::as_object).unwrap_or(&empty);
    let account = admission::pod_service_account(spec);
    if g.objects[Resource::ServiceAccount.index()].contains_key(&key(ns, account)) {
        return Ok(());
    }
    let pod_name = match name_of(pod) {
        "" => meta_str(pod, "generateName"),
        n => n,
    };
    Err(serviceaccounts::missing_account(ns, account, pod_name))
}

/// The namespace must exist and not be terminating.
fn check_namespace_usable(
    g: &Inner,
    res: Resource,
    ns: &str,
    name: &str,
) -> Result<(), StoreError> {
    let Some(nso) = g.objects[Resource::Namespace.index()].get(&key("", ns)) else {
        return Err(not_found(Resource::Namespace, ns));
    };
    let terminating = nso.pointer("/status/phase").and_then(Value::as_str) == Some("Terminating")
        || meta_of(nso).is_some_and(|m| m.contains_key("deletionTimestamp"));
    if terminating {
        return Err(StoreError::Forbidden {
            resource: res,
            name: name.to_string(),
            message: format!(
                "unable to create new content in namespace {ns} because it is being terminated"
            ),
        });
    }
    Ok(())
}

/// The body must be an object whose `kind`/`apiVersion` (when present) are
/// the resource's; both are filled in when absent.
/// The stored object `ns/name` of `res`, or its NotFound.
fn stored_in<'g>(g: &'g Inner, res: Resource, ns: &str, name: &str) -> Result<&'g Obj, StoreError> {
    g.objects[res.index()]
        .get(&key(ns, name))
        .ok_or_else(|| not_found(res, name))
}

pub(crate) fn check_body(res: Resource, obj: Obj) -> Result<Obj, StoreError> {
    let info = res.info();
    let Value::Object(mut m) = obj else {
        return Err(StoreError::BadRequest(format!(
            "{} in version \"{}\" cannot be handled as a {}: the body must be a JSON object",
            info.kind, info.version, info.kind
        )));
    };
    let av = info.api_version();
    match m.get("apiVersion") {
        None | Some(Value::Null) => {}
        Some(Value::String(s)) if s.is_empty() || *s == av => {}
        Some(other) => {
            let got = other
                .as_str()
                .map_or_else(|| other.to_string(), str::to_string);
            return Err(StoreError::BadRequest(format!(
                "the API version in the data ({got}) does not match the expected API version ({av})"
            )));
        }
    }
    match m.get("kind") {
        None | Some(Value::Null) => {}
        Some(Value::String(s)) if s.is_empty() || s == info.kind => {}
        Some(other) => {
            let got = other
                .as_str()
                .map_or_else(|| other.to_string(), str::to_string);
            // Upstream decodes the body as the kind it names, then finds no
            // conversion to the kind of the URL (the codec's words).
            let internal = if info.group.is_empty() {
                "core"
            } else {
                info.group.split('.').next().unwrap_or(info.group)
            };
            return Err(StoreError::BadRequest(format!(
                "{got} in version {:?} cannot be handled as a {}: converting ({}.{got}) to ({internal}.{}): unknown conversion",
                info.version, info.kind, info.version, info.kind
            )));
        }
    }
    m.insert("apiVersion".into(), Value::String(av));
    m.insert("kind".into(), Value::String(info.kind.to_string()));
    let bad = |what: &str| {
        StoreError::BadRequest(format!(
            "{} in version \"{}\" cannot be handled as a {}: {what}",
            info.kind, info.version, info.kind
        ))
    };
    match m.get_mut("metadata") {
        None | Some(Value::Null) => {
            m.insert("metadata".into(), Value::Object(Map::new()));
        }
        Some(Value::Object(meta)) => {
            // Go decodes a null label or annotation value as "".
            for f in ["labels", "annotations"] {
                if let Some(Value::Object(lm)) = meta.get_mut(f) {
                    for v in lm.values_mut() {
                        if v.is_null() {
                            *v = Value::String(String::new());
                        }
                    }
                }
            }
            for f in [
                "name",
                "generateName",
                "namespace",
                "resourceVersion",
                "uid",
            ] {
                if meta.get(f).is_some_and(|v| !v.is_string() && !v.is_null()) {
                    return Err(bad(&format!("metadata.{f} must be a string")));
                }
            }
            for f in ["labels", "annotations"] {
                match meta.get(f) {
                    None | Some(Value::Null) => {}
                    Some(Value::Object(lm)) if lm.values().all(Value::is_string) => {}
                    Some(_) => return Err(bad(&format!("metadata.{f} must be a map of strings"))),
                }
            }
        }
        Some(_) => return Err(bad("metadata must be an object")),
    }
    crate::sim::decode::decode(res, &mut m).map_err(|e| bad(&e))?;
    Ok(Value::Object(m))
}

/// PUT/patch identity rules: the body's name must be the URL's, and a body
/// namespace must be the URL's.
fn check_identity(res: Resource, ns: &str, name: &str, obj: &Obj) -> Result<(), StoreError> {
    let body_name = name_of(obj);
    if body_name != name {
        return Err(StoreError::BadRequest(format!(
            "the name of the object ({body_name}) does not match the name on the URL ({name})"
        )));
    }
    if res.info().namespaced {
        let bns = meta_str(obj, "namespace");
        if !bns.is_empty() && bns != ns {
            return Err(namespace_mismatch());
        }
    }
    Ok(())
}

/// A DELETE's preconditions, checked as upstream's `rest.BeforeDelete`
/// checks them: a 409 that names the kind (`ConfigMap "a"`), not the
/// resource, in its message and `details.kind`.
pub(crate) fn check_preconditions(
    res: Resource,
    name: &str,
    stored: &Obj,
    pre: &Preconditions,
) -> Result<(), StoreError> {
    let fail = |message: String| StoreError::PreconditionFailed {
        resource: res,
        name: name.to_string(),
        message,
    };
    if let Some(uid) = &pre.uid {
        let have = meta_str(stored, "uid");
        if uid != have {
            return Err(fail(format!(
                "the UID in the precondition ({uid}) does not match the UID in record ({have}). The object might have been deleted and then recreated"
            )));
        }
    }
    if let Some(rv) = &pre.resource_version {
        let have = meta_str(stored, "resourceVersion");
        if rv != have {
            return Err(fail(format!(
                "the ResourceVersion in the precondition ({rv}) does not match the ResourceVersion in record ({have}). The object might have been modified"
            )));
        }
    }
    Ok(())
}

pub(crate) fn meta_of(obj: &Obj) -> Option<&Map<String, Value>> {
    obj.get("metadata")?.as_object()
}

/// `metadata`, created (replacing a non-object) if needed.
pub(crate) fn meta_mut(obj: &mut Obj) -> &mut Map<String, Value> {
    if !obj.is_object() {
        *obj = Value::Object(Map::new());
    }
    let m = obj.as_object_mut().expect("object ensured above");
    let meta = m
        .entry("metadata")
        .or_insert_with(|| Value::Object(Map::new()));
    if !meta.is_object() {
        *meta = Value::Object(Map::new());
    }
    meta.as_object_mut().expect("object ensured above")
}

pub(crate) fn meta_str<'a>(obj: &'a Obj, field: &str) -> &'a str {
    meta_of(obj)
        .and_then(|m| m.get(field))
        .and_then(Value::as_str)
        .unwrap_or("")
}

fn name_of(obj: &Obj) -> &str {
    meta_str(obj, "name")
}

/// The object's resourceVersion as a number (0 if absent or malformed).
pub fn obj_rv(obj: &Obj) -> u64 {
    meta_str(obj, "resourceVersion").parse().unwrap_or(0)
}

pub(crate) fn set_rv(obj: &mut Obj, rv: u64) {
    meta_mut(obj).insert("resourceVersion".into(), Value::String(rv.to_string()));
}

/// Copies one metadata field from `from` (removing it when `from` lacks it).
fn copy_meta(to: &mut Obj, from: &Obj, field: &str) {
    let v = meta_of(from).and_then(|m| m.get(field)).cloned();
    let m = meta_mut(to);
    match v {
        Some(v) => m.insert(field.to_string(), v),
        None => m.remove(field),
    };
}

/// Fields a client may not change: kept from the stored object.
fn restore_identity(obj: &mut Obj, stored: &Obj) {
    for f in ["name", "namespace", "uid", "creationTimestamp"] {
        copy_meta(obj, stored, f);
    }
    if let (Some(m), Some(s)) = (obj.as_object_mut(), stored.as_object()) {
        for f in ["kind", "apiVersion"] {
            if let Some(v) = s.get(f) {
                m.insert(f.to_string(), v.clone());
            }
        }
    }
}

fn set_status(obj: &mut Obj, status: Option<Value>) {
    if let Some(m) = obj.as_object_mut() {
        match status {
            Some(s) if !s.is_null() => m.insert("status".into(), s),
            _ => m.remove("status"),
        };
    }
}

/// `generation` goes up by one when `spec` changed (and, for Deployments,
/// annotations too, as upstream does), for kinds that keep a generation.
fn bump_generation(res: Resource, new: &mut Obj, old: &Obj) {
    if !res.info().has_generation {
        return;
    }
    let mut changed = new.get("spec") != old.get("spec");
    if res == Resource::Deployment {
        changed |= meta_of(new).and_then(|m| m.get("annotations"))
            != meta_of(old).and_then(|m| m.get("annotations"));
    }
    let old_gen = meta_of(old)
        .and_then(|m| m.get("generation"))
        .and_then(Value::as_i64)
        .unwrap_or(1);
    let gen = if changed { old_gen + 1 } else { old_gen };
    meta_mut(new).insert("generation".into(), Value::from(gen));
}

/// A random UUID v4 in its text form.
pub fn new_uid() -> String {
    let mut b: [u8; 16] = rand::rng().random();
    b[6] = (b[6] & 0x0f) | 0x40;
    b[8] = (b[8] & 0x3f) | 0x80;
    let h: String = b.iter().map(|x| format!("{x:02x}")).collect();
    format!(
        "{}-{}-{}-{}-{}",
        &h[0..8],
        &h[8..12],
        &h[12..16],
        &h[16..20],
        &h[20..32]
    )
}

/// `base` + 5 random characters, retried while `taken` says so. The base is
/// cut to 58 characters as upstream does, so the name fits 63.
fn generate_name(base: &str, taken: impl Fn(&str) -> bool) -> String {
    let base: String = base.chars().take(58).collect();
    let mut rng = rand::rng();
    let mut name = String::new();
    for _ in 0..16 {
        name = base.clone();
        for _ in 0..5 {
            let i = rng.random_range(0..GENERATE_ALPHABET.len());
            name.push(GENERATE_ALPHABET[i] as char);
        }
        if !taken(&name) {
            break;
        }
    }
    name
}
