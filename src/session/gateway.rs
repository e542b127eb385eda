//! Gateway API routing of a session's endpoints, sans-IO
//! (docs/sessions.md#routing-states): one `gateway.networking.k8s.io/v1`
//! HTTPRoute per published tcp port, and the reading of its status as the
//! endpoint's routing state.
//!
//! A route ([`build_http_routes`]) is named [`route_name`]
//! (`kubegate-run-<sessionId>-p<port>`), carries the Service's labels and
//! owner (the pod: it goes with it), one parentRef to the configured
//! Gateway (namespace, name, `sectionName` when set), the host
//! `<port>-<sessionId>.<domain>` (the Ingress's host rule) and one rule
//! (`PathPrefix /`) whose backendRef is the session Service at that port.
//!
//! The state ([`route_state`]) comes from the route's `status.parents[]`
//! entry for our parentRef (upstream's `RouteParentStatus`, conditions
//! `Accepted` and `ResolvedRefs`): no entry, a missing condition or one
//! observed for an older generation is `pending`; both True is
//! `programmed`; either False is `unprogrammed`, with that condition's
//! type, reason and message (Accepted first); `Unknown` (upstream's reason
//! `Pending`: not reconciled yet) is `pending`.
//!
//! A route is not the whole story: upstream's `RouteParentStatus` says a
//! route's availability is also subject to the Gateway's own status, and
//! controllers may leave a stale entry behind a deleted Gateway. So the
//! engine reads the Gateway too (one reader per daemon, every 5 s, into a
//! [`GatewayState`] through a [`GatewayWatch`]), and an endpoint's state
//! is [`endpoint_state`]: the route's own failure first, else the
//! Gateway's (missing, or `Programmed=False`: `unprogrammed`, condition
//! `Programmed`; `Programmed` neither True nor False: never `programmed`).

use super::pod::{endpoint_host, service_name, PodSettings, Published};
use super::spec::Protocol;
use crate::kube::client::{Gateway, HttpRoute};
use serde::{Deserialize, Serialize};
use serde_json::{json, Value};

/// The Gateway API group.
pub const GROUP: &str = "gateway.networking.k8s.io";

/// Which layer routes a session's endpoints (`[cluster] routing`,
/// resolved by the config).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub enum Routing {
    /// A Service only: endpoints have no host.
    #[default]
    None,
    /// One Ingress per session.
    Ingress,
    /// One HTTPRoute per tcp port, attached to this Gateway.
    Gateway(GatewayParent),
}

/// The Gateway (and listener) session routes attach to.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GatewayParent {
    pub namespace: String,
    pub name: String,
    /// The listener's name (`sectionName`), when one is configured.
    pub section: Option<String>,
}

impl GatewayParent {
    /// The parentRef every session route carries.
    pub fn parent_ref(&self) -> Value {
        let mut r = json!({
            "group": GROUP,
            "kind": "Gateway",
            "namespace": self.namespace,
            "name": self.name,
        });
        if let Some(s) = &self.section {
            r["sectionName"] = json!(s);
        }
        r
    }

    /// True when a status entry's `parentRef` is ours (group and kind
    /// default to the Gateway's, the namespace to the route's own).
    fn is(&self, r: &Value, route_ns: &str) -> bool {
        let s = |k: &str| r.get(k).and_then(Value::as_str);
        s("group").unwrap_or(GROUP) == GROUP
            && s("kind").unwrap_or("Gateway") == "Gateway"
            && s("namespace").unwrap_or(route_ns) == self.namespace
            && s("name") == Some(self.name.as_str())
            && s("sectionName") == self.section.as_deref()
    }
}

/// An endpoint's routing state (docs/sessions.md#routing-states).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "state", rename_all = "lowercase")]
pub enum RouteState {
    /// No status for our parent yet (or one for an older generation).
    Pending,
    /// `Accepted` and `ResolvedRefs` both True.
    Programmed,
    /// The first of `Accepted`, `ResolvedRefs` that is False.
    Unprogrammed {
        condition: String,
        reason: String,
        message: String,
    },
}

impl RouteState {
    pub fn as_str(&self) -> &'static str {
        match self {
            RouteState::Pending => "pending",
            RouteState::Programmed => "programmed",
            RouteState::Unprogrammed { .. } => "unprogrammed",
        }
    }
}

/// `kubegate-run-<sessionId>-p<port>`.
pub fn route_name(session_id: &str, port: u16) -> String {
    format!("{}-p{port}", service_name(session_id))
}

/// The port a route of this session is for, from its name.
pub fn route_port(session_id: &str, name: &str) -> Option<u16> {
    let prefix = format!("{}-p", service_name(session_id));
    name.strip_prefix(&prefix)?.parse().ok()
}

/// One HTTPRoute per tcp port (in order), owned by the pod; empty without
/// gateway routing or a base domain.
pub fn build_http_routes(settings: &PodSettings, p: &Published<'_>) -> Vec<HttpRoute> {
    let (Routing::Gateway(parent), Some(domain)) =
        (&settings.routing, settings.base_domain.as_deref())
    else {
        return Vec::new();
    };
    let svc = service_name(p.session_id);
    let mut seen = Vec::new();
    let mut out = Vec::new();
    for port in p.ports.iter().flat_map(|(_, ps)| ps.iter()) {
        if port.protocol != Protocol::Tcp || seen.contains(&port.port) {
            continue;
        }
        seen.push(port.port);
        let mut meta = super::pod::published_metadata(settings, p);
        meta["name"] = json!(route_name(p.session_id, port.port));
        let v = json!({
            "apiVersion": format!("{GROUP}/v1"),
            "kind": "HTTPRoute",
            "metadata": meta,
            "spec": {
                "parentRefs": [parent.parent_ref()],
                "hostnames": [endpoint_host(port.port, p.session_id, domain)],
                "rules": [{
                    "matches": [{"path": {"type": "PathPrefix", "value": "/"}}],
                    "backendRefs": [{
                        "group": "",
                        "kind": "Service",
                        "name": svc,
                        "port": port.port,
                    }],
                }],
            },
        });
        if let Ok(r) = serde_json::from_value(v) {
            out.push(r);
        }
    }
    out
}

/// The route's state for `parent` (see the module doc).
pub fn route_state(route: &HttpRoute, parent: &GatewayParent) -> RouteState {
    let ns = route.metadata.namespace.as_deref().unwrap_or("");
    let generation = route.metadata.generation;
    let Some(entry) = route
        .status
        .as_ref()
        .and_then(|s| s.get("parents"))
        .and_then(Value::as_array)
        .and_then(|ps| {
            ps.iter()
                .find(|p| p.get("parentRef").is_some_and(|r| parent.is(r, ns)))
        })
    else {
        return RouteState::Pending;
    };
    let conditions = entry
        .get("conditions")
        .and_then(Value::as_array)
        .map(Vec::as_slice)
        .unwrap_or_default();
    let mut not_true = None;
    let mut unknown = false;
    for ty in ["Accepted", "ResolvedRefs"] {
        let Some(c) = condition(conditions, ty) else {
            return RouteState::Pending;
        };
        if stale(c, generation) {
            return RouteState::Pending;
        }
        let status = c.get("status").and_then(Value::as_str);
        if status == Some("Unknown") {
            unknown = true;
        } else if not_true.is_none() && status != Some("True") {
            not_true = Some(RouteState::Unprogrammed {
                condition: ty.to_string(),
                reason: text(c, "reason"),
                message: text(c, "message"),
            });
        }
    }
    match not_true {
        Some(s) => s,
        None if unknown => RouteState::Pending,
        None => RouteState::Programmed,
    }
}

/// The condition of type `ty` in a status's `conditions`.
fn condition<'a>(conditions: &'a [Value], ty: &str) -> Option<&'a Value> {
    conditions
        .iter()
        .find(|c| c.get("type").and_then(Value::as_str) == Some(ty))
}

/// True when a condition was observed for an older generation than the
/// object's: it says nothing of the current spec.
fn stale(c: &Value, generation: Option<i64>) -> bool {
    let observed = c.get("observedGeneration").and_then(Value::as_i64);
    matches!((observed, generation), (Some(o), Some(g)) if o < g)
}

/// A condition's string field, empty when absent.
fn text(c: &Value, key: &str) -> String {
    c.get(key)
        .and_then(Value::as_str)
        .unwrap_or_default()
        .to_string()
}

/// What the daemon last read of the configured Gateway
/// (docs/sessions.md#routing-states).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub enum GatewayState {
    /// Not read yet, or every read so far failed: says nothing.
    #[default]
    Unknown,
    /// The read answered 404.
    Missing,
    /// `Programmed=True`, observed for the Gateway's generation.
    Programmed,
    /// `Programmed=False`, with its reason and message.
    NotProgrammed { reason: String, message: String },
    /// `Programmed` absent, `Unknown` (upstream's reason `Pending`: not
    /// reconciled yet) or observed for an older generation.
    Unsettled,
}

impl GatewayState {
    /// A read Gateway's state, from its `Programmed` condition.
    pub fn of(g: &Gateway) -> GatewayState {
        let generation = g.metadata.generation;
        let conditions = g
            .status
            .as_ref()
            .and_then(|s| s.get("conditions"))
            .and_then(Value::as_array)
            .map(Vec::as_slice)
            .unwrap_or_default();
        let Some(c) = condition(conditions, "Programmed") else {
            return GatewayState::Unsettled;
        };
        if stale(c, generation) {
            return GatewayState::Unsettled;
        }
        match c.get("status").and_then(Value::as_str) {
            Some("True") => GatewayState::Programmed,
            Some("False") => GatewayState::NotProgrammed {
                reason: text(c, "reason"),
                message: text(c, "message"),
            },
            _ => GatewayState::Unsettled,
        }
    }

    /// How a log line says it.
    fn describe(&self) -> String {
        match self {
            GatewayState::Unknown => "not read yet".into(),
            GatewayState::Missing => "not found".into(),
            GatewayState::Programmed => "programmed".into(),
            GatewayState::NotProgrammed { reason, message } => {
                format!("not programmed ({reason}: {message})")
            }
            GatewayState::Unsettled => {
                "not reconciled yet (its Programmed condition is neither True nor False)".into()
            }
        }
    }
}

/// An endpoint's state: its route's ([`route_state`]) as the Gateway's
/// own state allows. The route's failure comes first (it names this
/// endpoint's problem); else a Gateway that is missing or
/// `Programmed=False` makes it `unprogrammed` with condition `Programmed`
/// (reason `NotFound` when missing) and a message naming the Gateway,
/// whatever the route says; a Gateway not reconciled yet turns
/// `programmed` into `pending`; an unknown one (not read yet) changes
/// nothing.
pub fn endpoint_state(
    route: RouteState,
    gateway: &GatewayState,
    parent: &GatewayParent,
) -> RouteState {
    let at = format!("Gateway {}/{}", parent.namespace, parent.name);
    match (route, gateway) {
        (r @ RouteState::Unprogrammed { .. }, _) => r,
        (_, GatewayState::Missing) => RouteState::Unprogrammed {
            condition: "Programmed".into(),
            reason: "NotFound".into(),
            message: format!("{at} not found"),
        },
        (_, GatewayState::NotProgrammed { reason, message }) => RouteState::Unprogrammed {
            condition: "Programmed".into(),
            reason: reason.clone(),
            message: format!("{at}: {message}"),
        },
        (RouteState::Programmed, GatewayState::Unsettled) => RouteState::Pending,
        (r, _) => r,
    }
}

/// What a read of the Gateway found: its state (a 404 being `Missing`),
/// or why the read failed.
pub type GatewayReading = Result<GatewayState, String>;

/// The Gateway reader's memory (sans-IO: the engine's `session-gateway`
/// thread reads): the last state read, and whether reads are failing. A
/// failed read is not `Missing`: the last state stands.
#[derive(Debug, Clone, Default)]
pub struct GatewayWatch {
    state: GatewayState,
    failing: bool,
}

impl GatewayWatch {
    pub fn state(&self) -> &GatewayState {
        &self.state
    }

    /// Takes a read's outcome; answers the line to log, once per change
    /// (a new state, the first failure of a run, the first success after
    /// one), nothing while all stays as it was.
    pub fn read(
        &mut self,
        reading: GatewayReading,
        parent: &GatewayParent,
    ) -> Option<(log::Level, String)> {
        let at = format!(
            "routing: Gateway {}/{} (cluster.gateway)",
            parent.namespace, parent.name
        );
        let next = match reading {
            Err(_) if self.failing => return None,
            Err(e) => {
                self.failing = true;
                return Some((
                    log::Level::Warn,
                    format!(
                        "{at}: reading it failed: {e}; its last state stands ({})",
                        self.state.describe()
                    ),
                ));
            }
            Ok(next) => next,
        };
        let recovered = std::mem::replace(&mut self.failing, false);
        if next == self.state {
            return recovered.then(|| {
                (
                    log::Level::Info,
                    format!("{at}: read again ({})", next.describe()),
                )
            });
        }
        let (level, effect) = match next {
            GatewayState::Missing | GatewayState::NotProgrammed { .. } => {
                (log::Level::Warn, "; session endpoints show unprogrammed")
            }
            GatewayState::Unsettled => {
                (log::Level::Warn, "; session endpoints are at most pending")
            }
            GatewayState::Programmed | GatewayState::Unknown => (log::Level::Info, ""),
        };
        let line = format!("{at}: {}{effect}", next.describe());
        self.state = next;
        Some((level, line))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::session::spec::Port;

    fn parent(section: Option<&str>) -> GatewayParent {
        GatewayParent {
            namespace: "infra".into(),
            name: "public".into(),
            section: section.map(str::to_string),
        }
    }

    fn settings(section: Option<&str>) -> PodSettings {
        PodSettings {
            namespace: "dev".into(),
            base_domain: Some("d.example".into()),
            routing: Routing::Gateway(parent(section)),
            ..PodSettings::default()
        }
    }

    fn route_with(status: Value, generation: i64) -> HttpRoute {
        serde_json::from_value(json!({
            "metadata": {"name": "r", "namespace": "dev", "generation": generation},
            "spec": {},
            "status": status,
        }))
        .expect("route")
    }

    fn cond(ty: &str, status: &str, reason: &str, gen: i64) -> Value {
        json!({"type": ty, "status": status, "reason": reason, "message": format!("{ty} says {reason}"),
               "observedGeneration": gen})
    }

    #[test]
    fn one_route_per_tcp_port_with_parent_host_and_backend() {
        let ports = vec![
            (
                "web".to_string(),
                vec![
                    Port::tcp(8080),
                    Port {
                        port: 5353,
                        protocol: Protocol::Udp,
                    },
                ],
            ),
            ("api".to_string(), vec![Port::tcp(9000)]),
        ];
        let p = Published {
            session_id: "s1",
            principal: "alice",
            pod_name: "pod-a",
            pod_uid: "uid-a",
            ports: &ports,
        };
        let routes = build_http_routes(&settings(Some("https")), &p);
        assert_eq!(routes.len(), 2);
        let v = serde_json::to_value(&routes[1]).expect("json");
        assert_eq!(v["apiVersion"], "gateway.networking.k8s.io/v1");
        assert_eq!(v["kind"], "HTTPRoute");
        assert_eq!(v["metadata"]["name"], "kubegate-run-s1-p9000");
        assert_eq!(v["metadata"]["namespace"], "dev");
        assert_eq!(v["metadata"]["labels"]["kubegate.dev/session-id"], "s1");
        assert_eq!(v["metadata"]["ownerReferences"][0]["uid"], "uid-a");
        assert_eq!(
            v["spec"]["parentRefs"],
            json!([{"group": "gateway.networking.k8s.io", "kind": "Gateway",
                    "namespace": "infra", "name": "public", "sectionName": "https"}])
        );
        assert_eq!(v["spec"]["hostnames"], json!(["9000-s1.d.example"]));
        assert_eq!(
            v["spec"]["rules"][0]["backendRefs"],
            json!([{"group": "", "kind": "Service", "name": "kubegate-run-s1", "port": 9000}])
        );
        assert_eq!(route_port("s1", "kubegate-run-s1-p9000"), Some(9000));
        assert_eq!(route_port("s1", "kubegate-run-s2-p9000"), None);
        assert_eq!(route_port("s1", "kubegate-run-s1-px"), None);
        // No sectionName unless configured; nothing without gateway routing.
        let v = serde_json::to_value(&build_http_routes(&settings(None), &p)[0]).expect("json");
        assert!(v["spec"]["parentRefs"][0].get("sectionName").is_none());
        let ingress = PodSettings {
            routing: Routing::Ingress,
            ..settings(None)
        };
        assert!(build_http_routes(&ingress, &p).is_empty());
    }

    #[test]
    fn states_follow_our_parents_conditions() {
        let ours =
            json!({"group": GROUP, "kind": "Gateway", "namespace": "infra", "name": "public"});
        let entry = |conds: Vec<Value>| json!({"parents": [{"parentRef": ours, "controllerName": "x", "conditions": conds}]});
        let p = parent(None);
        // No status, or only another parent's: pending.
        assert_eq!(
            route_state(&route_with(json!(null), 1), &p),
            RouteState::Pending
        );
        let other = json!({"parents": [{"parentRef": {"name": "public", "namespace": "elsewhere"},
                           "conditions": [cond("Accepted", "True", "Accepted", 1)]}]});
        assert_eq!(route_state(&route_with(other, 1), &p), RouteState::Pending);
        // A section we did not name is another parent.
        let sectioned = json!({"parents": [{"parentRef": {"name": "public", "namespace": "infra", "sectionName": "https"},
                           "conditions": [cond("Accepted", "True", "Accepted", 1), cond("ResolvedRefs", "True", "ResolvedRefs", 1)]}]});
        assert_eq!(
            route_state(&route_with(sectioned.clone(), 1), &p),
            RouteState::Pending
        );
        assert_eq!(
            route_state(&route_with(sectioned, 1), &parent(Some("https"))),
            RouteState::Programmed
        );
        let both = vec![
            cond("Accepted", "True", "Accepted", 2),
            cond("ResolvedRefs", "True", "ResolvedRefs", 2),
        ];
        assert_eq!(
            route_state(&route_with(entry(both.clone()), 2), &p),
            RouteState::Programmed
        );
        // Observed for an older generation: pending again.
        assert_eq!(
            route_state(&route_with(entry(both), 3), &p),
            RouteState::Pending
        );
        // One condition only: pending.
        let one = vec![cond("Accepted", "True", "Accepted", 1)];
        assert_eq!(
            route_state(&route_with(entry(one), 1), &p),
            RouteState::Pending
        );
        // Not accepted: unprogrammed with Accepted's reason and message,
        // even when ResolvedRefs is False too.
        let refused = vec![
            cond("Accepted", "False", "NoMatchingParent", 1),
            cond("ResolvedRefs", "False", "BackendNotFound", 1),
        ];
        assert_eq!(
            route_state(&route_with(entry(refused), 1), &p),
            RouteState::Unprogrammed {
                condition: "Accepted".into(),
                reason: "NoMatchingParent".into(),
                message: "Accepted says NoMatchingParent".into(),
            }
        );
        let unresolved = vec![
            cond("Accepted", "True", "Accepted", 1),
            cond("ResolvedRefs", "False", "BackendNotFound", 1),
        ];
        let s = route_state(&route_with(entry(unresolved), 1), &p);
        assert_eq!(s.as_str(), "unprogrammed");
        assert_eq!(
            serde_json::to_value(&s).expect("json"),
            json!({"state": "unprogrammed", "condition": "ResolvedRefs", "reason": "BackendNotFound",
                   "message": "ResolvedRefs says BackendNotFound"})
        );
        // Unknown (upstream's reason Pending: not reconciled yet) is pending.
        let unknown = vec![
            cond("Accepted", "Unknown", "Pending", 1),
            cond("ResolvedRefs", "True", "ResolvedRefs", 1),
        ];
        assert_eq!(
            route_state(&route_with(entry(unknown), 1), &p),
            RouteState::Pending
        );
    }
    fn gateway_with(status: Value, generation: i64) -> Gateway {
        serde_json::from_value(json!({
            "metadata": {"name": "public", "namespace": "infra", "generation": generation},
            "spec": {},
            "status": status,
        }))
        .expect("gateway")
    }

    #[test]
    fn a_gateway_is_read_from_its_programmed_condition() {
        let programmed = |status: &str, gen: i64| {
            json!({"conditions": [cond("Accepted", "True", "Accepted", gen),
                                  cond("Programmed", status, "Why", gen)]})
        };
        assert_eq!(
            GatewayState::of(&gateway_with(programmed("True", 2), 2)),
            GatewayState::Programmed
        );
        assert_eq!(
            GatewayState::of(&gateway_with(programmed("False", 2), 2)),
            GatewayState::NotProgrammed {
                reason: "Why".into(),
                message: "Programmed says Why".into()
            }
        );
        // Unknown, observed for an older generation, absent, garbage:
        // not reconciled yet.
        for g in [
            gateway_with(programmed("Unknown", 1), 1),
            gateway_with(programmed("True", 1), 2),
            gateway_with(
                json!({"conditions": [cond("Accepted", "True", "Accepted", 1)]}),
                1,
            ),
            gateway_with(json!(null), 1),
            gateway_with(json!({"conditions": "x"}), 1),
            gateway_with(
                json!({"conditions": [{"type": "Programmed", "status": 1}]}),
                1,
            ),
        ] {
            assert_eq!(GatewayState::of(&g), GatewayState::Unsettled, "{g:?}");
        }
    }

    #[test]
    fn the_gateways_state_bounds_the_endpoints() {
        let p = parent(Some("http"));
        let unprogrammed = |reason: &str, message: &str| RouteState::Unprogrammed {
            condition: "Programmed".into(),
            reason: reason.into(),
            message: message.into(),
        };
        let refused = RouteState::Unprogrammed {
            condition: "Accepted".into(),
            reason: "NoMatchingParent".into(),
            message: "Gateway infra/public does not exist".into(),
        };
        let not_programmed = GatewayState::NotProgrammed {
            reason: "AddressNotUsable".into(),
            message: "no such address".into(),
        };
        // Whatever the route says, a missing or unprogrammed Gateway makes
        // the endpoint unprogrammed, naming the Gateway...
        for r in [RouteState::Programmed, RouteState::Pending] {
            assert_eq!(
                endpoint_state(r.clone(), &GatewayState::Missing, &p),
                unprogrammed("NotFound", "Gateway infra/public not found")
            );
            assert_eq!(
                endpoint_state(r, &not_programmed, &p),
                unprogrammed("AddressNotUsable", "Gateway infra/public: no such address")
            );
        }
        // ...but the route's own failure is said first.
        for g in [
            GatewayState::Missing,
            not_programmed.clone(),
            GatewayState::Programmed,
        ] {
            assert_eq!(endpoint_state(refused.clone(), &g, &p), refused);
        }
        // Not reconciled yet: never programmed; a Gateway not read yet,
        // or programmed, leaves the route's state.
        assert_eq!(
            endpoint_state(RouteState::Programmed, &GatewayState::Unsettled, &p),
            RouteState::Pending
        );
        for g in [GatewayState::Unknown, GatewayState::Programmed] {
            for r in [RouteState::Programmed, RouteState::Pending] {
                assert_eq!(endpoint_state(r.clone(), &g, &p), r);
            }
        }
    }

    #[test]
    fn the_watch_logs_once_per_change_and_a_failed_read_is_not_missing() {
        let p = parent(None);
        let mut w = GatewayWatch::default();
        assert_eq!(w.state(), &GatewayState::Unknown);
        let (level, line) = w
            .read(Ok(GatewayState::Programmed), &p)
            .expect("a first state");
        assert_eq!(level, log::Level::Info);
        assert!(
            line.contains("infra/public") && line.contains("programmed"),
            "{line}"
        );
        // The same again: nothing to say.
        assert_eq!(w.read(Ok(GatewayState::Programmed), &p), None);
        // Failures: logged once, the last state stands.
        let (level, line) = w
            .read(Err("connection refused".into()), &p)
            .expect("a failure");
        assert_eq!(level, log::Level::Warn);
        assert!(
            line.contains("connection refused") && line.contains("(programmed)"),
            "{line}"
        );
        assert_eq!(w.read(Err("connection refused".into()), &p), None);
        assert_eq!(w.read(Err("timed out".into()), &p), None);
        assert_eq!(w.state(), &GatewayState::Programmed);
        // Read again, unchanged: said once.
        let (_, line) = w.read(Ok(GatewayState::Programmed), &p).expect("recovered");
        assert!(line.contains("read again"), "{line}");
        assert_eq!(w.read(Ok(GatewayState::Programmed), &p), None);
        // Gone: a warning, once.
        let (level, line) = w.read(Ok(GatewayState::Missing), &p).expect("missing");
        assert_eq!(level, log::Level::Warn);
        assert!(
            line.contains("not found") && line.contains("unprogrammed"),
            "{line}"
        );
        assert_eq!(w.read(Ok(GatewayState::Missing), &p), None);
        assert_eq!(w.state(), &GatewayState::Missing);
        // A failure after the start keeps Unknown (nothing known).
        let mut w = GatewayWatch::default();
        assert!(w.read(Err("403 Forbidden".into()), &p).is_some());
        assert_eq!(w.state(), &GatewayState::Unknown);
    }
}
