//! The sim's Gateway API controller (docs/sim.md#gateway-api): one pass
//! ([`reconcile`]) over every GatewayClass, Gateway and HTTPRoute, run by
//! the controller manager (`sim::controllers`) whenever one of them or a
//! Service changes, and at every resync.
//!
//! - a GatewayClass is `Accepted` (the sim handles every class, whatever
//!   its `controllerName`);
//! - a Gateway whose class exists is `Accepted` and `Programmed` (address
//!   127.0.0.1); without its class both are `Unknown`, reason `Pending`;
//! - an HTTPRoute gets, per parentRef to a Gateway, a `RouteParentStatus`
//!   with [`CONTROLLER_NAME`] and the route's generation: `Accepted=True`
//!   (reason `Accepted`) when that Gateway exists, else `Accepted=False`
//!   reason `NoMatchingParent`; `ResolvedRefs=True` (reason
//!   `ResolvedRefs`) when every Service backendRef exists in the route's
//!   namespace, else `False`, reason `BackendNotFound`. Entries of other
//!   controllers are kept.
//!
//! Status is written only when it changed (a condition keeps its
//! `lastTransitionTime` while its status stays), so its own writes settle.

use super::controllers::{name_of, ns_of};
use super::resources::Resource;
use super::store::{Selectors, Store, StoreError};
use crate::kube::time::now_rfc3339;
use serde_json::{json, Value};
use std::collections::HashSet;

/// The `controllerName` the sim writes in route status.
pub const CONTROLLER_NAME: &str = "kubegate.dev/sim-gateway-controller";
const GROUP: &str = "gateway.networking.k8s.io";

/// One pass over every Gateway API object.
pub fn reconcile(store: &Store) -> Result<(), StoreError> {
    let all = |res| store.list(res, None, &Selectors::default()).0;
    let classes: HashSet<String> = all(Resource::GatewayClass)
        .iter()
        .filter(|c| c["metadata"]["deletionTimestamp"].is_null())
        .map(name_of)
        .collect();
    for c in all(Resource::GatewayClass) {
        let conds = [cond(
            "Accepted",
            true,
            "Accepted",
            "Handled by the kubegate sim",
        )];
        write_conditions(store, Resource::GatewayClass, &c, &conds)?;
    }
    let mut gateways = HashSet::new();
    for g in all(Resource::Gateway) {
        let live = g["metadata"]["deletionTimestamp"].is_null();
        if live {
            gateways.insert((ns_of(&g), name_of(&g)));
        }
        let class = g["spec"]["gatewayClassName"].as_str().unwrap_or_default();
        let conds = if classes.contains(class) {
            [
                cond("Accepted", true, "Accepted", "Accepted by the kubegate sim"),
                cond(
                    "Programmed",
                    true,
                    "Programmed",
                    "Programmed by the kubegate sim",
                ),
            ]
        } else {
            let m = format!("GatewayClass {class:?} does not exist");
            [
                unknown("Accepted", "Pending", &m),
                unknown("Programmed", "Pending", &m),
            ]
        };
        write_conditions(store, Resource::Gateway, &g, &conds)?;
        if classes.contains(class) {
            match store.modify(Resource::Gateway, &ns_of(&g), &name_of(&g), &mut |o| {
                o["status"]["addresses"] = json!([{"type": "IPAddress", "value": "127.0.0.1"}]);
                Ok(())
            }) {
                Ok(_) | Err(StoreError::NotFound { .. }) => {}
                Err(e) => return Err(e),
            }
        }
    }
    let routes = all(Resource::HttpRoute);
    if routes.is_empty() {
        // Most Service changes of a cluster without routes stop here.
        return Ok(());
    }
    let services: HashSet<(String, String)> = all(Resource::Service)
        .iter()
        .map(|s| (ns_of(s), name_of(s)))
        .collect();
    for r in routes {
        let parents = route_parents(&r, &gateways, &services);
        match store.modify(Resource::HttpRoute, &ns_of(&r), &name_of(&r), &mut |o| {
            let mut kept: Vec<Value> = o["status"]["parents"]
                .as_array()
                .into_iter()
                .flatten()
                .filter(|p| p["controllerName"] != CONTROLLER_NAME)
                .cloned()
                .collect();
            let old = o["status"]["parents"].clone();
            for mut p in parents.clone() {
                let before = old.as_array().into_iter().flatten().find(|x| {
                    x["controllerName"] == CONTROLLER_NAME && x["parentRef"] == p["parentRef"]
                });
                keep_transition_times(&mut p["conditions"], before.map(|b| &b["conditions"]));
                kept.push(p);
            }
            o["status"] = json!({"parents": kept});
            Ok(())
        }) {
            Ok(_) | Err(StoreError::NotFound { .. }) => {}
            Err(e) => return Err(e),
        }
    }
    Ok(())
}

/// The route's status entries for its parentRefs to Gateways.
fn route_parents(
    r: &Value,
    gateways: &HashSet<(String, String)>,
    services: &HashSet<(String, String)>,
) -> Vec<Value> {
    let ns = ns_of(r);
    let generation = r["metadata"]["generation"].as_i64().unwrap_or(1);
    let missing: Vec<String> = r["spec"]["rules"]
        .as_array()
        .into_iter()
        .flatten()
        .flat_map(|rule| rule["backendRefs"].as_array().into_iter().flatten())
        .filter(|b| {
            b["group"].as_str().unwrap_or_default().is_empty()
                && b["kind"].as_str().unwrap_or("Service") == "Service"
        })
        .filter_map(|b| b["name"].as_str())
        .filter(|n| !services.contains(&(ns.clone(), n.to_string())))
        .map(|n| format!("{ns}/{n}"))
        .collect();
    let resolved = if missing.is_empty() {
        cond(
            "ResolvedRefs",
            true,
            "ResolvedRefs",
            "All references are resolved",
        )
    } else {
        cond(
            "ResolvedRefs",
            false,
            "BackendNotFound",
            &format!("Service {} not found", missing.join(", ")),
        )
    };
    r["spec"]["parentRefs"]
        .as_array()
        .into_iter()
        .flatten()
        .filter(|p| {
            p["group"].as_str().unwrap_or(GROUP) == GROUP
                && p["kind"].as_str().unwrap_or("Gateway") == "Gateway"
        })
        .map(|p| {
            let gw_ns = p["namespace"].as_str().unwrap_or(&ns).to_string();
            let gw = p["name"].as_str().unwrap_or_default().to_string();
            let accepted = if gateways.contains(&(gw_ns.clone(), gw.clone())) {
                cond("Accepted", true, "Accepted", "Accepted by the kubegate sim")
            } else {
                cond(
                    "Accepted",
                    false,
                    "NoMatchingParent",
                    &format!("Gateway {gw_ns}/{gw} does not exist"),
                )
            };
            let mut conds = json!([accepted, resolved.clone()]);
            for c in conds.as_array_mut().into_iter().flatten() {
                c["observedGeneration"] = json!(generation);
            }
            json!({"parentRef": p, "controllerName": CONTROLLER_NAME, "conditions": conds})
        })
        .collect()
}

fn cond(ty: &str, ok: bool, reason: &str, message: &str) -> Value {
    json!({"type": ty, "status": if ok { "True" } else { "False" }, "reason": reason,
           "message": message, "lastTransitionTime": now_rfc3339()})
}

fn unknown(ty: &str, reason: &str, message: &str) -> Value {
    json!({"type": ty, "status": "Unknown", "reason": reason, "message": message,
           "lastTransitionTime": now_rfc3339()})
}

/// A condition whose status did not change keeps its transition time.
fn keep_transition_times(new: &mut Value, old: Option<&Value>) {
    for c in new.as_array_mut().into_iter().flatten() {
        let before = old
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
            .find(|o| o["type"] == c["type"] && o["status"] == c["status"]);
        if let Some(b) = before {
            c["lastTransitionTime"] = b["lastTransitionTime"].clone();
        }
    }
}

/// Sets `status.conditions` of a class or Gateway (with its generation),
/// other conditions kept.
fn write_conditions(
    store: &Store,
    res: Resource,
    o: &Value,
    conds: &[Value],
) -> Result<(), StoreError> {
    let generation = o["metadata"]["generation"].as_i64().unwrap_or(1);
    let r = store.modify(res, &ns_of(o), &name_of(o), &mut |obj| {
        let old = obj["status"]["conditions"].clone();
        let mut list: Vec<Value> = old
            .as_array()
            .into_iter()
            .flatten()
            .filter(|c| !conds.iter().any(|n| n["type"] == c["type"]))
            .cloned()
            .collect();
        let mut new = json!(conds);
        for c in new.as_array_mut().into_iter().flatten() {
            c["observedGeneration"] = json!(generation);
        }
        keep_transition_times(&mut new, Some(&old));
        list.extend(new.as_array().into_iter().flatten().cloned());
        if !obj["status"].is_object() {
            obj["status"] = json!({});
        }
        obj["status"]["conditions"] = json!(list);
        Ok(())
    });
    match r {
        Ok(_) | Err(StoreError::NotFound { .. }) => Ok(()),
        Err(e) => Err(e),
    }
}
