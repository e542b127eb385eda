//! The sim's Gateway API controller (docs/sim.md#gateway-api): one pass
//! ([`reconcile`]) over every GatewayClass, Gateway and HTTPRoute, run by
//! the controller manager (`sim::controllers`) whenever one of them, a
//! Service or a Namespace changes, and at every resync. It plays the one
//! implementation of the cluster, [`CONTROLLER_NAME`], with upstream's
//! rules (kubernetes-sigs/gateway-api `apis/v1`: `gatewayclass_types.go`,
//! `gateway_types.go`, `shared_types.go`, `httproute_types.go`):
//!
//! - a GatewayClass naming our `controllerName` is `Accepted`; another
//!   controller's class is left alone;
//! - a Gateway is `Accepted` when its class exists and is ours, else its
//!   status is the CRD's default, which no controller replaces:
//!   `Accepted` and `Programmed` `Unknown`, reason `Pending`, "Waiting
//!   for controller" (and its routes are not accepted); an accepted Gateway is `Programmed` with
//!   address 127.0.0.1, unless `spec.addresses` asks for another one
//!   (`Programmed=False`, reason `AddressNotUsable`, no address); its
//!   `status.listeners[]` carry the kinds they take (HTTPRoute on an HTTP
//!   or HTTPS listener whose `allowedRoutes.kinds` allows it) and their
//!   `attachedRoutes`;
//! - an HTTPRoute gets, per parentRef to a Gateway, a `RouteParentStatus`
//!   with [`CONTROLLER_NAME`] and the route's generation (`attach`):
//!   `Accepted` as upstream decides a route's attachment (a Gateway that
//!   is missing or not accepted, or a `sectionName`/`port` naming no
//!   listener: `NoMatchingParent`; no listener in scope taking HTTPRoutes
//!   from the route's namespace: `NotAllowedByListeners`; none of those
//!   whose hostname intersects the route's: `NoMatchingListenerHostname`)
//!   and `ResolvedRefs` from its backendRefs (not a core Service:
//!   `InvalidKind`; another namespace: `RefNotPermitted`, the sim serving
//!   no ReferenceGrant; a Service missing: `BackendNotFound`). Entries of
//!   other controllers are kept.
//!
//! Status is written only when it changed (a condition keeps its
//! `lastTransitionTime` while its status stays), so its own writes settle.

use super::controllers::{name_of, ns_of};
use super::resources::Resource;
use super::store::{Selectors, Store, StoreError};
use crate::kube::time::now_rfc3339;
use serde_json::{json, Map, Value};
use std::collections::{HashMap, HashSet};

/// The `controllerName` the sim implements and writes in route status.
pub const CONTROLLER_NAME: &str = "kubegate.dev/sim-gateway-controller";
const GROUP: &str = "gateway.networking.k8s.io";
/// The one address a sim Gateway has.
const ADDRESS: &str = "127.0.0.1";

/// What a route's attachment needs to know of a Gateway.
struct GatewayFacts {
    /// Why it is not accepted, if it is not.
    refused: Option<String>,
    /// `spec.listeners`.
    listeners: Vec<Value>,
}

/// What the cluster holds, read once per pass.
struct World {
    /// Live Gateways by (namespace, name); a Gateway being deleted is
    /// absent.
    gateways: HashMap<(String, String), GatewayFacts>,
    /// Namespaces' labels by name.
    namespaces: HashMap<String, Map<String, Value>>,
    services: HashSet<(String, String)>,
}

/// One pass over every Gateway API object.
pub fn reconcile(store: &Store) -> Result<(), StoreError> {
    let all = |res| store.list(res, None, &Selectors::default()).0;
    let live = |o: &Value| o["metadata"]["deletionTimestamp"].is_null();
    let mut classes: HashMap<String, String> = HashMap::new();
    for c in all(Resource::GatewayClass) {
        let controller = c["spec"]["controllerName"].as_str().unwrap_or_default();
        if live(&c) {
            classes.insert(name_of(&c), controller.to_string());
        }
        if controller == CONTROLLER_NAME {
            let conds = [cond(
                "Accepted",
                true,
                "Accepted",
                "Handled by the kubegate sim",
            )];
            let generation = generation_of(&c);
            write(store, Resource::GatewayClass, &c, &mut |o| {
                set_conditions(o, &conds, generation);
            })?;
        }
    }
    let gateway_list = all(Resource::Gateway);
    let routes = all(Resource::HttpRoute);
    if gateway_list.is_empty() && routes.is_empty() {
        // Most Service changes of a cluster without the Gateway API stop
        // here.
        return Ok(());
    }
    let world = World {
        gateways: gateway_list
            .iter()
            .filter(|g| live(g))
            .map(|g| {
                let facts = GatewayFacts {
                    refused: refusal(g, &classes),
                    listeners: g["spec"]["listeners"]
                        .as_array()
                        .cloned()
                        .unwrap_or_default(),
                };
                ((ns_of(g), name_of(g)), facts)
            })
            .collect(),
        namespaces: all(Resource::Namespace)
            .iter()
            .map(|n| {
                let labels = n["metadata"]["labels"].as_object().cloned();
                (name_of(n), labels.unwrap_or_default())
            })
            .collect(),
        services: all(Resource::Service)
            .iter()
            .map(|s| (ns_of(s), name_of(s)))
            .collect(),
    };
    // Accepted routes per (gateway namespace, gateway, listener).
    let mut attached: HashMap<(String, String, String), i64> = HashMap::new();
    for r in routes {
        let parents = attach::route_parents(&r, &world, &mut attached);
        write(store, Resource::HttpRoute, &r, &mut |o| {
            let old = o["status"]["parents"].clone();
            let mut list: Vec<Value> = old
                .as_array()
                .into_iter()
                .flatten()
                .filter(|p| p["controllerName"] != CONTROLLER_NAME)
                .cloned()
                .collect();
            for mut p in parents.clone() {
                let before = old.as_array().into_iter().flatten().find(|x| {
                    x["controllerName"] == CONTROLLER_NAME && x["parentRef"] == p["parentRef"]
                });
                keep_transition_times(&mut p["conditions"], before.map(|b| &b["conditions"]));
                list.push(p);
            }
            o["status"] = json!({"parents": list});
        })?;
    }
    for g in &gateway_list {
        gateway_status(store, g, &classes, &attached)?;
    }
    Ok(())
}

/// Why a Gateway is not accepted: its class is missing (or being
/// deleted), or another controller's.
fn refusal(g: &Value, classes: &HashMap<String, String>) -> Option<String> {
    let class = g["spec"]["gatewayClassName"].as_str().unwrap_or_default();
    match classes.get(class) {
        None => Some(format!("GatewayClass {class:?} does not exist")),
        Some(c) if c != CONTROLLER_NAME => Some(format!(
            "GatewayClass {class:?} is for controller {c:?}, not {CONTROLLER_NAME}"
        )),
        Some(_) => None,
    }
}

/// The first address of `spec.addresses` the sim cannot give (it has
/// 127.0.0.1 alone).
fn unusable_address(g: &Value) -> Option<String> {
    g["spec"]["addresses"]
        .as_array()
        .into_iter()
        .flatten()
        .find(|a| {
            a["type"].as_str().unwrap_or("IPAddress") != "IPAddress"
                || a["value"].as_str() != Some(ADDRESS)
        })
        .map(|a| {
            let ty = a["type"].as_str().unwrap_or("IPAddress");
            let value = a["value"].as_str().unwrap_or_default();
            format!(
                "{ty} {value:?} cannot be used: the kubegate sim's Gateways have {ADDRESS} alone"
            )
        })
}

/// A Gateway's conditions, address and listeners' status.
fn gateway_status(
    store: &Store,
    g: &Value,
    classes: &HashMap<String, String>,
    attached: &HashMap<(String, String, String), i64>,
) -> Result<(), StoreError> {
    let generation = generation_of(g);
    let (conds, programmed) = match (refusal(g, classes), unusable_address(g)) {
        // No controller of the cluster handles it: the status stays what
        // the CRD defaults a new Gateway's to (upstream has no "refused"
        // reason for a class nobody implements).
        (Some(why), _) => (
            [waiting("Accepted", &why), waiting("Programmed", &why)],
            false,
        ),
        (None, Some(why)) => (
            [
                cond("Accepted", true, "Accepted", "Accepted by the kubegate sim"),
                cond("Programmed", false, "AddressNotUsable", &why),
            ],
            false,
        ),
        (None, None) => (
            [
                cond("Accepted", true, "Accepted", "Accepted by the kubegate sim"),
                cond(
                    "Programmed",
                    true,
                    "Programmed",
                    "Programmed by the kubegate sim",
                ),
            ],
            true,
        ),
    };
    let accepted = conds[0]["status"] == "True";
    let (ns, name) = (ns_of(g), name_of(g));
    let listeners: Vec<Value> = g["spec"]["listeners"]
        .as_array()
        .into_iter()
        .flatten()
        .map(|l| {
            let lname = l["name"].as_str().unwrap_or_default().to_string();
            let kinds = if attach::takes_http_routes(l) {
                json!([{"group": GROUP, "kind": "HTTPRoute"}])
            } else {
                json!([])
            };
            let count = attached
                .get(&(ns.clone(), name.clone(), lname.clone()))
                .copied()
                .unwrap_or(0);
            let mut conds = json!([
                cond("Accepted", true, "Accepted", "Accepted by the kubegate sim"),
                cond(
                    "Programmed",
                    programmed,
                    if programmed { "Programmed" } else { "Pending" },
                    if programmed {
                        "Programmed by the kubegate sim"
                    } else {
                        "The Gateway is not programmed"
                    },
                ),
                cond(
                    "ResolvedRefs",
                    true,
                    "ResolvedRefs",
                    "All references are resolved"
                ),
            ]);
            for c in conds.as_array_mut().into_iter().flatten() {
                c["observedGeneration"] = json!(generation);
            }
            json!({"name": lname, "supportedKinds": kinds, "attachedRoutes": count,
                   "conditions": conds})
        })
        .collect();
    write(store, Resource::Gateway, g, &mut |o| {
        set_conditions(o, &conds, generation);
        let Some(status) = o["status"].as_object_mut() else {
            return;
        };
        if programmed {
            status.insert(
                "addresses".into(),
                json!([{"type": "IPAddress", "value": ADDRESS}]),
            );
        } else {
            status.remove("addresses");
        }
        if accepted {
            let old = status.get("listeners").cloned().unwrap_or(Value::Null);
            let mut new = listeners.clone();
            for l in &mut new {
                let before = old
                    .as_array()
                    .into_iter()
                    .flatten()
                    .find(|x| x["name"] == l["name"]);
                keep_transition_times(&mut l["conditions"], before.map(|b| &b["conditions"]));
            }
            status.insert("listeners".into(), json!(new));
        } else {
            status.remove("listeners");
        }
    })
}

/// A route's attachment to its parents and the resolution of its refs.
mod attach {
    use super::{cond, World, CONTROLLER_NAME, GROUP};
    use crate::sim::controllers::ns_of;
    use crate::sim::selector::LabelSelector;
    use serde_json::{json, Value};
    use std::collections::HashMap;

    /// The route's status entries for its parentRefs to Gateways; each
    /// listener it attached to counted in `attached`.
    pub(super) fn route_parents(
        r: &Value,
        world: &World,
        attached: &mut HashMap<(String, String, String), i64>,
    ) -> Vec<Value> {
        let ns = ns_of(r);
        let generation = super::generation_of(r);
        let resolved = resolved_refs(r, &ns, world);
        r["spec"]["parentRefs"]
            .as_array()
            .into_iter()
            .flatten()
            .filter(|p| {
                p["group"].as_str().unwrap_or(GROUP) == GROUP
                    && p["kind"].as_str().unwrap_or("Gateway") == "Gateway"
            })
            .map(|p| {
                let accepted = match accept(r, &ns, p, world) {
                    Ok((gw_ns, gw, listeners)) => {
                        for l in listeners {
                            *attached.entry((gw_ns.clone(), gw.clone(), l)).or_insert(0) += 1;
                        }
                        cond("Accepted", true, "Accepted", "Accepted by the kubegate sim")
                    }
                    Err((reason, message)) => cond("Accepted", false, reason, &message),
                };
                let mut conds = json!([accepted, resolved.clone()]);
                for c in conds.as_array_mut().into_iter().flatten() {
                    c["observedGeneration"] = json!(generation);
                }
                json!({"parentRef": p, "controllerName": CONTROLLER_NAME, "conditions": conds})
            })
            .collect()
    }

    /// The Gateway (namespace, name) and the listeners a parentRef
    /// attaches the route to, or the refusal's reason and message.
    fn accept(
        r: &Value,
        ns: &str,
        p: &Value,
        world: &World,
    ) -> Result<(String, String, Vec<String>), (&'static str, String)> {
        let gw_ns = p["namespace"].as_str().unwrap_or(ns).to_string();
        let gw = p["name"].as_str().unwrap_or_default().to_string();
        let at = format!("Gateway {gw_ns}/{gw}");
        let Some(facts) = world.gateways.get(&(gw_ns.clone(), gw.clone())) else {
            return Err(("NoMatchingParent", format!("{at} does not exist")));
        };
        if let Some(why) = &facts.refused {
            return Err(("NoMatchingParent", format!("{at} is not accepted: {why}")));
        }
        let section = p["sectionName"].as_str();
        let port = p["port"].as_i64();
        let in_scope: Vec<&Value> = facts
            .listeners
            .iter()
            .filter(|l| section.is_none_or(|s| l["name"].as_str() == Some(s)))
            .filter(|l| port.is_none_or(|n| l["port"].as_i64() == Some(n)))
            .collect();
        if in_scope.is_empty() {
            let wanted = match (section, port) {
                (Some(s), Some(n)) => format!("named {s:?} on port {n}"),
                (Some(s), None) => format!("named {s:?}"),
                (None, Some(n)) => format!("on port {n}"),
                (None, None) => "at all".to_string(),
            };
            return Err(("NoMatchingParent", format!("{at} has no listener {wanted}")));
        }
        let names = |ls: &[&Value]| {
            ls.iter()
                .map(|l| l["name"].as_str().unwrap_or_default())
                .collect::<Vec<_>>()
                .join(", ")
        };
        let admitting: Vec<&Value> = in_scope
            .iter()
            .copied()
            .filter(|l| takes_http_routes(l) && admits_namespace(l, &gw_ns, ns, world))
            .collect();
        if admitting.is_empty() {
            return Err((
                "NotAllowedByListeners",
                format!(
                    "no listener of {at} ({}) takes HTTPRoutes from namespace {ns:?} (allowedRoutes)",
                    names(&in_scope)
                ),
            ));
        }
        let hosts: Vec<&str> = r["spec"]["hostnames"]
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(Value::as_str)
            .collect();
        let matching: Vec<&Value> = admitting
            .iter()
            .copied()
            .filter(|l| match l["hostname"].as_str() {
                None | Some("") => true,
                Some(lh) => hosts.is_empty() || hosts.iter().any(|h| hosts_intersect(lh, h)),
            })
            .collect();
        if matching.is_empty() {
            let listed: Vec<String> = admitting
                .iter()
                .map(|l| {
                    format!(
                        "{}: {}",
                        l["name"].as_str().unwrap_or_default(),
                        l["hostname"].as_str().unwrap_or_default()
                    )
                })
                .collect();
            return Err((
                "NoMatchingListenerHostname",
                format!(
                    "no listener of {at} ({}) matches the route's hostnames ({})",
                    listed.join(", "),
                    hosts.join(", ")
                ),
            ));
        }
        let attached = matching
            .iter()
            .map(|l| l["name"].as_str().unwrap_or_default().to_string())
            .collect();
        Ok((gw_ns, gw, attached))
    }

    /// True when a listener takes HTTPRoutes: an HTTP or HTTPS listener
    /// whose `allowedRoutes.kinds`, when set, names HTTPRoute.
    pub(super) fn takes_http_routes(l: &Value) -> bool {
        let protocol = matches!(l["protocol"].as_str(), Some("HTTP" | "HTTPS"));
        let kinds = l["allowedRoutes"]["kinds"].as_array();
        protocol
            && kinds.is_none_or(|ks| {
                ks.is_empty()
                    || ks.iter().any(|k| {
                        k["group"].as_str().unwrap_or(GROUP) == GROUP && k["kind"] == "HTTPRoute"
                    })
            })
    }

    /// `allowedRoutes.namespaces`: `Same` (the default) admits the
    /// Gateway's namespace, `All` every one, `Selector` those whose labels
    /// its selector matches; anything else none.
    fn admits_namespace(l: &Value, gw_ns: &str, route_ns: &str, world: &World) -> bool {
        let from = &l["allowedRoutes"]["namespaces"];
        match from["from"].as_str().unwrap_or("Same") {
            "All" => true,
            "Same" => gw_ns == route_ns,
            "Selector" => LabelSelector::from_struct(&from["selector"])
                .is_ok_and(|s| s.matches_labels(world.namespaces.get(route_ns))),
            _ => false,
        }
    }

    /// Upstream's host-name intersection: equal names; a `*.` wildcard
    /// matches any name under its suffix (not the bare suffix); two
    /// wildcards intersect when one's suffix is under the other's.
    pub(super) fn hosts_intersect(a: &str, b: &str) -> bool {
        let under = |name: &str, suffix: &str| {
            name.len() > suffix.len()
                && name.ends_with(suffix)
                && name.as_bytes()[name.len() - suffix.len() - 1] == b'.'
        };
        match (a.strip_prefix("*."), b.strip_prefix("*.")) {
            (None, None) => a.eq_ignore_ascii_case(b),
            (Some(s), None) => under(b, s),
            (None, Some(s)) => under(a, s),
            (Some(x), Some(y)) => x == y || under(x, y) || under(y, x),
        }
    }

    /// `ResolvedRefs` for the route's backendRefs: the first failing
    /// reason of `InvalidKind` (not a core Service), `RefNotPermitted`
    /// (another namespace: the sim serves no ReferenceGrant),
    /// `BackendNotFound` (no such Service), each naming its refs.
    fn resolved_refs(r: &Value, ns: &str, world: &World) -> Value {
        let mut bad: [(&str, Vec<String>); 3] = [
            ("InvalidKind", Vec::new()),
            ("RefNotPermitted", Vec::new()),
            ("BackendNotFound", Vec::new()),
        ];
        let refs = r["spec"]["rules"]
            .as_array()
            .into_iter()
            .flatten()
            .flat_map(|rule| rule["backendRefs"].as_array().into_iter().flatten());
        for b in refs {
            let group = b["group"].as_str().unwrap_or_default();
            let kind = b["kind"].as_str().unwrap_or("Service");
            let name = b["name"].as_str().unwrap_or_default();
            let b_ns = b["namespace"].as_str().unwrap_or(ns);
            if !group.is_empty() || kind != "Service" {
                let gk = if group.is_empty() {
                    kind.to_string()
                } else {
                    format!("{kind}.{group}")
                };
                bad[0].1.push(format!("{gk} {name:?} is not a Service"));
            } else if b_ns != ns {
                bad[1].1.push(format!(
                    "Service {b_ns}/{name} is in another namespace and no ReferenceGrant permits it"
                ));
            } else if !world
                .services
                .contains(&(b_ns.to_string(), name.to_string()))
            {
                bad[2].1.push(format!("Service {b_ns}/{name} not found"));
            }
        }
        match bad.iter().find(|(_, v)| !v.is_empty()) {
            Some((reason, v)) => cond("ResolvedRefs", false, reason, &v.join("; ")),
            None => cond(
                "ResolvedRefs",
                true,
                "ResolvedRefs",
                "All references are resolved",
            ),
        }
    }
}

fn generation_of(o: &Value) -> i64 {
    o["metadata"]["generation"].as_i64().unwrap_or(1)
}

/// The CRD's default condition of a Gateway no controller has taken:
/// `Unknown`, reason `Pending`, "Waiting for controller" (with why).
fn waiting(ty: &str, why: &str) -> Value {
    json!({"type": ty, "status": "Unknown", "reason": "Pending",
           "message": format!("Waiting for controller: {why}"),
           "lastTransitionTime": now_rfc3339()})
}

fn cond(ty: &str, ok: bool, reason: &str, message: &str) -> Value {
    json!({"type": ty, "status": if ok { "True" } else { "False" }, "reason": reason,
           "message": message, "lastTransitionTime": now_rfc3339()})
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
fn set_conditions(obj: &mut Value, conds: &[Value], generation: i64) {
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
}

/// A read-modify-write of one object's status; one gone meanwhile is no
/// error.
fn write(
    store: &Store,
    res: Resource,
    o: &Value,
    f: &mut dyn FnMut(&mut Value),
) -> Result<(), StoreError> {
    match store.modify(res, &ns_of(o), &name_of(o), &mut |obj| {
        f(obj);
        Ok(())
    }) {
        Ok(_) | Err(StoreError::NotFound { .. }) => Ok(()),
        Err(e) => Err(e),
    }
}

#[cfg(test)]
mod tests {
    use super::attach::hosts_intersect;

    /// httproute_types.go's examples of `Hostnames`.
    #[test]
    fn host_names_intersect_as_upstream_says() {
        for (l, r) in [
            ("test.example.com", "test.example.com"),
            ("test.example.com", "*.example.com"),
            ("*.example.com", "*.example.com"),
            ("*.example.com", "test.example.com"),
            ("*.example.com", "foo.test.example.com"),
            ("*.example.com", "*.test.example.com"),
            ("*.test.example.com", "*.example.com"),
        ] {
            assert!(hosts_intersect(l, r), "{l} {r}");
        }
        for (l, r) in [
            ("test.example.com", "other.example.com"),
            ("*.example.com", "example.com"),
            ("*.example.com", "test.example.net"),
            ("*.example.com", "*.example.net"),
            ("*.example.com", "badexample.com"),
            ("test.example.com", "*.test.example.com"),
        ] {
            assert!(!hosts_intersect(l, r), "{l} {r}");
        }
    }
}
