//! Owner-reference garbage collection and namespace deletion.
//!
//! Background propagation, as a real cluster does it: when an owner is
//! deleted, every object whose ownerReferences name its uid loses that
//! reference, and an object left with no living owner is deleted (pods
//! gracefully, through `lifecycle`). A periodic sweep catches dependents
//! whose owner vanished while no watch was looking. A Terminating namespace
//! is emptied, then removed.

use super::lifecycle::{self, DeleteOptions};
use super::resources::{Resource, ALL};
use super::store::{Selectors, Store, StoreError};
use serde_json::Value;
use std::collections::HashSet;

fn owner_uids(o: &Value) -> Vec<&str> {
    o["metadata"]["ownerReferences"]
        .as_array()
        .map(|refs| refs.iter().filter_map(|r| r["uid"].as_str()).collect())
        .unwrap_or_default()
}

fn all_objects(store: &Store) -> Vec<(Resource, Value)> {
    let mut out = Vec::new();
    for info in ALL {
        for o in store.list(info.resource, None, &Selectors::default()).0 {
            out.push((info.resource, o));
        }
    }
    out
}

fn strip_refs(store: &Store, res: Resource, o: &Value, dead: &dyn Fn(&str) -> bool) {
    let ns = o["metadata"]["namespace"].as_str().unwrap_or("");
    let name = o["metadata"]["name"].as_str().unwrap_or("");
    let _ = store.modify(res, ns, name, &mut |obj: &mut Value| {
        if let Some(refs) = obj["metadata"]["ownerReferences"].as_array_mut() {
            refs.retain(|r| !r["uid"].as_str().is_some_and(dead));
            if refs.is_empty() {
                if let Some(m) = obj["metadata"].as_object_mut() {
                    m.remove("ownerReferences");
                }
            }
        }
        Ok(())
    });
}

fn delete_dependent(store: &Store, res: Resource, o: &Value) {
    let ns = o["metadata"]["namespace"].as_str().unwrap_or("");
    let name = o["metadata"]["name"].as_str().unwrap_or("");
    if !o["metadata"]["deletionTimestamp"].is_null() {
        return;
    }
    let opts = DeleteOptions {
        propagation: Some("Background".into()),
        ..Default::default()
    };
    match lifecycle::delete(store, res, ns, name, &opts) {
        Ok(_) | Err(StoreError::NotFound { .. }) => {}
        Err(e) => log::warn!("gc: deleting {res:?} {ns}/{name}: {e:?}"),
    }
}

/// Propagation `Orphan`: dependents of `uid` keep living, without the reference.
pub fn orphan_dependents(store: &Store, uid: &str) {
    for (res, o) in all_objects(store) {
        if owner_uids(&o).contains(&uid) {
            strip_refs(store, res, &o, &|u| u == uid);
        }
    }
}

/// The owner with this uid is gone: collect what depended on it.
pub fn collect_dependents(store: &Store, uid: &str) {
    let objects = all_objects(store);
    let live: HashSet<&str> = objects
        .iter()
        .filter_map(|(_, o)| o["metadata"]["uid"].as_str())
        .collect();
    for (res, o) in &objects {
        let owners = owner_uids(o);
        if !owners.contains(&uid) {
            continue;
        }
        if owners.iter().any(|u| *u != uid && live.contains(u)) {
            strip_refs(store, *res, o, &|u| u == uid);
        } else {
            delete_dependent(store, *res, o);
        }
    }
}

/// Deletes dependents whose every owner is gone; strips dead references
/// from objects that still have a living owner.
pub fn sweep(store: &Store) {
    let objects = all_objects(store);
    let live: HashSet<String> = objects
        .iter()
        .filter_map(|(_, o)| o["metadata"]["uid"].as_str().map(str::to_string))
        .collect();
    for (res, o) in &objects {
        let owners = owner_uids(o);
        if owners.is_empty() || owners.iter().all(|u| live.contains(*u)) {
            continue;
        }
        if owners.iter().any(|u| live.contains(*u)) {
            strip_refs(store, *res, o, &|u| !live.contains(u));
        } else {
            delete_dependent(store, *res, o);
        }
    }
}

/// Empties a Terminating namespace, then removes it.
pub fn reconcile_namespace(store: &Store, name: &str) -> Result<(), StoreError> {
    let ns = match store.get(Resource::Namespace, "", name) {
        Ok(ns) => ns,
        Err(StoreError::NotFound { .. }) => return Ok(()),
        Err(e) => return Err(e),
    };
    if ns["metadata"]["deletionTimestamp"].is_null() {
        return Ok(());
    }
    let mut remaining = 0;
    for info in ALL.iter().filter(|i| i.namespaced) {
        for o in store
            .list(info.resource, Some(name), &Selectors::default())
            .0
        {
            remaining += 1;
            delete_dependent(store, info.resource, &o);
        }
    }
    if remaining == 0 {
        match store.delete(Resource::Namespace, "", name, &Default::default()) {
            Ok(_) | Err(StoreError::NotFound { .. }) => {}
            Err(e) => return Err(e),
        }
    }
    Ok(())
}
