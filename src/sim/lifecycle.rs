//! Deletion with Kubernetes semantics, shared by the REST layer, the
//! controllers and the garbage collector so every path deletes the same way:
//! a pod bound to a node and still running is terminated gracefully
//! (deletionTimestamp set; the kubelet kills it and removes the object); a
//! namespace becomes Terminating (the namespace controller empties it); every
//! other object goes at once. Orphan propagation strips the owner references
//! of dependents first; background and foreground propagation are left to
//! the garbage collector, which reacts to the owner's DELETED event.

use super::resources::Resource;
use super::store::{Preconditions, Store, StoreError};
use crate::kube::time::{now_rfc3339, rfc3339};
use serde_json::{json, Value};
use std::time::{Duration, SystemTime};

/// What a DELETE asked for (body or query parameters).
#[derive(Debug, Default, Clone)]
pub struct DeleteOptions {
    pub grace: Option<i64>,
    pub propagation: Option<String>,
    pub pre: Preconditions,
}

/// Deletes one object; returns the object as the API answers it (for a
/// graceful pod delete, the pod carrying its deletionTimestamp).
pub fn delete(
    store: &Store,
    res: Resource,
    ns: &str,
    name: &str,
    opts: &DeleteOptions,
) -> Result<Value, StoreError> {
    let current = store.get(res, ns, name)?;
    super::store::check_preconditions(res, name, &current, &opts.pre)?;
    if opts.propagation.as_deref() == Some("Orphan") {
        if let Some(uid) = current["metadata"]["uid"].as_str() {
            super::gc::orphan_dependents(store, uid);
        }
    }
    match res {
        Resource::Pod => {
            let bound = current["spec"]["nodeName"]
                .as_str()
                .is_some_and(|n| !n.is_empty());
            let phase = current["status"]["phase"].as_str().unwrap_or("");
            let finished = phase == "Succeeded" || phase == "Failed";
            let spec_grace = current["spec"]["terminationGracePeriodSeconds"]
                .as_i64()
                .unwrap_or(30);
            let grace = opts.grace.unwrap_or(spec_grace).max(0);
            if !bound || finished || grace == 0 {
                return store.delete(res, ns, name, &opts.pre);
            }
            let deadline = SystemTime::now() + Duration::from_secs(grace as u64);
            store.modify(res, ns, name, &mut |o: &mut Value| {
                let meta = &mut o["metadata"];
                let existing = meta["deletionGracePeriodSeconds"].as_i64();
                if existing.is_none_or(|g| grace < g) {
                    meta["deletionTimestamp"] = json!(rfc3339(deadline));
                    meta["deletionGracePeriodSeconds"] = json!(grace);
                }
                Ok(())
            })
        }
        Resource::Namespace => {
            if name == "default" || name == "kube-system" {
                return Err(StoreError::Forbidden {
                    resource: res,
                    name: name.to_string(),
                    message: "this namespace may not be deleted".into(),
                });
            }
            store.modify(res, ns, name, &mut |o: &mut Value| {
                if o["metadata"]["deletionTimestamp"].is_null() {
                    o["metadata"]["deletionTimestamp"] = json!(now_rfc3339());
                }
                o["status"]["phase"] = json!("Terminating");
                Ok(())
            })
        }
        // The pvc-protection finalizer: upstream marks the claim deleted
        // and its controller lifts the finalizer once no pod uses it; the
        // sim answers the marked claim and lifts it at once (it does not
        // track which pods use a claim: docs/sim.md).
        Resource::PersistentVolumeClaim => {
            let protected = current["metadata"]["finalizers"]
                .as_array()
                .is_some_and(|f| f.iter().any(|x| x == super::admission::PVC_PROTECTION));
            if !protected || !current["metadata"]["deletionTimestamp"].is_null() {
                return store.delete(res, ns, name, &opts.pre);
            }
            let marked = store.modify(res, ns, name, &mut |o: &mut Value| {
                o["metadata"]["deletionTimestamp"] = json!(now_rfc3339());
                o["metadata"]["deletionGracePeriodSeconds"] = json!(0);
                Ok(())
            })?;
            let uid = marked["metadata"]["uid"].as_str().map(str::to_string);
            let pre = Preconditions {
                uid,
                resource_version: None,
            };
            match store.delete(res, ns, name, &pre) {
                Ok(_) | Err(StoreError::NotFound { .. }) => Ok(marked),
                Err(e) => Err(e),
            }
        }
        _ => store.delete(res, ns, name, &opts.pre),
    }
}
