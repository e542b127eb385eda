//! The session routes the daemon builds, checked by a real API server
//! (docs/control-plane.md#the-gateway-api): the HTTPRoutes of gateway
//! routing (against the Gateway API v1.6.3 standard CRDs the plane
//! installs) and the Ingress of ingress routing (against Kubernetes' own
//! `networking.k8s.io/v1` validation). The objects are the crate's own:
//! a config parsed as the daemon parses it, [`PodSettings::from`] it, and
//! `build_http_routes` / `build_ingress` for a session's ports. They are
//! created for real (not a dry run) in the test's namespace, beside a
//! GatewayClass and Gateway for their parentRef and the Pod that owns them.
//!
//! Then hostile inputs the real schema must refuse (a host with `_`, an
//! upper-case one, a host past 253 characters, a name past 253): each is
//! built by the same builders from settings the config would never give,
//! refused by the server with a 422 naming the field, and refused by the
//! daemon before anything is sent (the config's `cluster.base_domain`
//! check, `is_session_id`).
//!
//! Each body runs on the sim and on the real plane (`NAME::sim`,
//! `NAME::real`); one more compares what the two stored.

mod common;

use common::backend::{on_real, Backend, Kind};
use kubegate::config::Config;
use kubegate::kube::client::rest::Request;
use kubegate::kube::client::KubeError;
use kubegate::session::gateway::build_http_routes;
use kubegate::session::pod::{build_ingress, PodSettings, Published};
use kubegate::session::spec::{Port, Protocol};
use kubegate::session::{is_session_id, new_session_id};
use serde_json::{json, Value};
use std::path::Path;

/// The Gateway the routes attach to (in the test's namespace) and its
/// listener.
const GATEWAY: &str = "public";
const SECTION: &str = "http";

/// The daemon's settings from a `[cluster]` section, through the config's
/// own parsing and validation: `Err` is the key and message it refuses.
fn settings(cluster: &str) -> Result<PodSettings, String> {
    let text = format!("[cluster]\nmode = \"in-cluster\"\n{cluster}");
    Config::parse(&text, Path::new("/etc/kubegate"))
        .map(|c| PodSettings::from(&c))
        .map_err(|e| format!("{}: {}", e.key, e.message))
}

fn gateway_settings(ns: &str, domain: &str) -> Result<PodSettings, String> {
    settings(&format!(
        "session_namespace = \"{ns}\"\nbase_domain = \"{domain}\"\nrouting = \"gateway\"\n\
         gateway = \"{ns}/{GATEWAY}\"\ngateway_section = \"{SECTION}\"\n"
    ))
}

fn ingress_settings(ns: &str, domain: &str) -> Result<PodSettings, String> {
    settings(&format!(
        "session_namespace = \"{ns}\"\nbase_domain = \"{domain}\"\nrouting = \"ingress\"\n\
         ingress_class = \"kubegate-test\"\ningress_tls_secret = \"wildcard-tls\"\n"
    ))
}

/// Settings the config refuses, for the hostile cases: the good ones with
/// this base domain put in after validation.
fn with_domain(mut s: PodSettings, domain: &str) -> PodSettings {
    s.base_domain = Some(domain.to_string());
    s
}

/// A session's apps and ports: two tcp ports on one app (two routes, two
/// Ingress rules), a udp one (no route: HTTP only) and the highest port.
fn app_ports() -> Vec<(String, Vec<Port>)> {
    vec![
        (
            "web".into(),
            vec![
                Port::tcp(8080),
                Port {
                    port: 5353,
                    protocol: Protocol::Udp,
                },
            ],
        ),
        ("api".into(), vec![Port::tcp(3000), Port::tcp(65535)]),
    ]
}

fn post(b: &Backend, path: &str, body: &Value) -> Result<Value, KubeError> {
    let req = Request::new(http_post(), path).json(serde_json::to_vec(body).expect("json"));
    b.client.send_json::<Value>(&req)
}

fn http_post() -> ureq::http::Method {
    ureq::http::Method::POST
}

fn routes_path(ns: &str) -> String {
    format!("/apis/gateway.networking.k8s.io/v1/namespaces/{ns}/httproutes")
}

fn ingresses_path(ns: &str) -> String {
    format!("/apis/networking.k8s.io/v1/namespaces/{ns}/ingresses")
}

/// The Pod that owns a session's routes (the builders name it in
/// `ownerReferences`; a dependent of a missing owner would be collected):
/// its name and uid.
fn owner_pod(b: &Backend, name: &str) -> (String, String) {
    let pod = post(
        b,
        &format!("/api/v1/namespaces/{}/pods", b.ns),
        &json!({
            "apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": name},
            "spec": {"containers": [{"name": "c", "image": "busybox:1.37", "command": ["sleep", "3600"]}]},
        }),
    )
    .expect("create the owner pod");
    let uid = pod["metadata"]["uid"].as_str().expect("uid").to_string();
    (name.to_string(), uid)
}

/// A GatewayClass (cluster-scoped: named after the namespace) and the
/// Gateway the routes' parentRef names, with the listener `SECTION`
/// taking this namespace's routes for `*.<domain>`.
fn parent_gateway(b: &Backend, domain: &str) -> String {
    let class = format!("{}-class", b.ns);
    post(
        b,
        "/apis/gateway.networking.k8s.io/v1/gatewayclasses",
        &json!({
            "apiVersion": "gateway.networking.k8s.io/v1", "kind": "GatewayClass",
            "metadata": {"name": class},
            "spec": {"controllerName": "kubegate.dev/routes-real-test"},
        }),
    )
    .expect("create the GatewayClass");
    post(
        b,
        &format!("/apis/gateway.networking.k8s.io/v1/namespaces/{}/gateways", b.ns),
        &json!({
            "apiVersion": "gateway.networking.k8s.io/v1", "kind": "Gateway",
            "metadata": {"name": GATEWAY},
            "spec": {
                "gatewayClassName": class,
                "listeners": [{"name": SECTION, "protocol": "HTTP", "port": 80, "hostname": format!("*.{domain}")}],
            },
        }),
    )
    .expect("create the Gateway");
    class
}

fn delete_class(b: &Backend, class: &str) {
    let req = Request::new(
        ureq::http::Method::DELETE,
        format!("/apis/gateway.networking.k8s.io/v1/gatewayclasses/{class}"),
    );
    let _ = b.client.send(&req);
}

/// The daemon's routes and Ingress for one session: created, and stored
/// with the spec the daemon sent (plus the schema's defaults).
/// Returns the stored specs (routes in port order, then the Ingress).
fn create_session_routes(b: &Backend, id: &str) -> Vec<Value> {
    assert!(is_session_id(id));
    let domain = "dev.example.com";
    let ports = app_ports();
    let (pod_name, pod_uid) = owner_pod(b, &format!("kubegate-watch-{id}-x"));
    let published = Published {
        session_id: id,
        principal: "alice@example.com",
        pod_name: &pod_name,
        pod_uid: &pod_uid,
        ports: &ports,
    };
    let class = parent_gateway(b, domain);
    let mut stored = Vec::new();

    let gw = gateway_settings(&b.ns, domain).expect("the gateway config is valid");
    let routes = build_http_routes(&gw, &published);
    assert_eq!(routes.len(), 3, "one route per tcp port: {routes:?}");
    for route in &routes {
        let sent = serde_json::to_value(route).expect("route json");
        let got = post(b, &routes_path(&b.ns), &sent)
            .unwrap_or_else(|e| panic!("{:?} refused the daemon's route {sent}: {e}", b.kind));
        assert_eq!(got["metadata"]["name"], sent["metadata"]["name"]);
        assert_eq!(
            got["metadata"]["ownerReferences"],
            sent["metadata"]["ownerReferences"]
        );
        assert_eq!(got["metadata"]["labels"], sent["metadata"]["labels"]);
        assert_eq!(got["spec"]["hostnames"], sent["spec"]["hostnames"]);
        assert_eq!(got["spec"]["parentRefs"], sent["spec"]["parentRefs"]);
        let backend = &got["spec"]["rules"][0]["backendRefs"][0];
        let want = &sent["spec"]["rules"][0]["backendRefs"][0];
        for k in ["group", "kind", "name", "port"] {
            assert_eq!(backend[k], want[k], "backendRef {k}");
        }
        stored.push(got["spec"].clone());
    }

    let ing = ingress_settings(&b.ns, domain).expect("the ingress config is valid");
    let ingress = build_ingress(&ing, &published).expect("an Ingress");
    let sent = serde_json::to_value(&ingress).expect("ingress json");
    let got = post(b, &ingresses_path(&b.ns), &sent)
        .unwrap_or_else(|e| panic!("{:?} refused the daemon's Ingress {sent}: {e}", b.kind));
    assert_eq!(got["spec"]["rules"], sent["spec"]["rules"]);
    assert_eq!(got["spec"]["tls"], sent["spec"]["tls"]);
    assert_eq!(got["spec"]["ingressClassName"], "kubegate-test");
    assert_eq!(
        got["metadata"]["ownerReferences"],
        sent["metadata"]["ownerReferences"]
    );
    stored.push(got["spec"].clone());

    delete_class(b, &class);
    stored
}

fn the_daemons_routes_and_ingress_are_accepted(b: &Backend) {
    create_session_routes(b, &new_session_id(&mut rand::rng()));
}
two_backends!(the_daemons_routes_and_ingress_are_accepted, 120);

/// The 422's causes, as `field` strings.
fn refused_fields(r: Result<Value, KubeError>, what: &str) -> Vec<String> {
    refused(r, what).into_iter().map(|(f, _)| f).collect()
}

/// The 422's causes, as `(field, reason)`.
fn refused(r: Result<Value, KubeError>, what: &str) -> Vec<(String, String)> {
    match r {
        Err(KubeError::Invalid { causes, .. }) => {
            eprintln!("{what}: refused: {causes:?}");
            causes.into_iter().map(|c| (c.field, c.reason)).collect()
        }
        other => panic!("{what}: want 422 Invalid, got {other:?}"),
    }
}

/// A hostile base domain: the config refuses it (naming the key), and
/// the route and Ingress the builders would make from it are refused by
/// the server, naming the host field.
fn hostile_domain(b: &Backend, domain: &str, config_says: &str) {
    let too_long = domain.len() > 189;
    let id = new_session_id(&mut rand::rng());
    let ports = app_ports();
    let (pod_name, pod_uid) = owner_pod(b, &format!("kubegate-watch-{id}-y"));
    let published = Published {
        session_id: &id,
        principal: "alice@example.com",
        pod_name: &pod_name,
        pod_uid: &pod_uid,
        ports: &ports,
    };
    // The daemon never gets this far: its config refuses the domain.
    let err = gateway_settings(&b.ns, domain).expect_err("the config must refuse it");
    assert!(
        err.starts_with("cluster.base_domain: ") && err.contains(config_says),
        "{domain:?}: {err}"
    );
    let err = ingress_settings(&b.ns, domain).expect_err("the config must refuse it");
    assert!(
        err.starts_with("cluster.base_domain: "),
        "{domain:?}: {err}"
    );

    let good = gateway_settings(&b.ns, "dev.example.com").expect("valid");
    let routes = build_http_routes(&with_domain(good, domain), &published);
    let route = serde_json::to_value(&routes[0]).expect("json");
    let causes = refused(post(b, &routes_path(&b.ns), &route), domain);
    let want: Vec<(&str, &str)> = if too_long {
        // The CRD's maxLength, and the API server's note that the CRD's
        // CEL rules (x-kubernetes-validations) were not run because of it:
        // a cause with no field, which Go prints `<nil>` (the sim says the
        // same: docs/sim.md#gateway-api).
        vec![
            ("spec.hostnames[0]", "FieldValueTooLong"),
            ("<nil>", "FieldValueInvalid"),
        ]
    } else {
        vec![("spec.hostnames[0]", "FieldValueInvalid")]
    };
    let got: Vec<(&str, &str)> = causes
        .iter()
        .map(|(f, r)| (f.as_str(), r.as_str()))
        .collect();
    assert_eq!(got, want, "{:?}, {domain:?}", b.kind);

    let good = ingress_settings(&b.ns, "dev.example.com").expect("valid");
    let ingress = build_ingress(&with_domain(good, domain), &published).expect("ingress");
    let ingress = serde_json::to_value(&ingress).expect("json");
    let fields = refused_fields(post(b, &ingresses_path(&b.ns), &ingress), domain);
    // Every host of every rule, and of the TLS entry.
    assert!(
        fields.contains(&"spec.rules[0].host".to_string())
            && fields.contains(&"spec.rules[2].host".to_string())
            && fields.contains(&"spec.tls[0].hosts[0]".to_string()),
        "{:?}, {domain:?}: {fields:?}",
        b.kind
    );
}

fn bad_hosts_are_refused_by_the_server_and_by_the_daemon_first(b: &Backend) {
    hostile_domain(b, "bad_host.example.com", "DNS label");
    hostile_domain(b, "Dev.Example.com", "DNS label");
    // A host past 253 characters: four labels of 60 (244 characters)
    // under `<port>-<sessionId>.`.
    let long = vec!["a".repeat(60); 4].join(".");
    hostile_domain(b, &long, "longer than 189 characters");

    // The longest base domain the config takes (189 characters), with the
    // longest port: accepted.
    let longest = format!("{}.{}.{}", "b".repeat(63), "c".repeat(63), "d".repeat(61));
    assert_eq!(longest.len(), 189);
    let s = gateway_settings(&b.ns, &longest).expect("189 characters are allowed");
    let id = new_session_id(&mut rand::rng());
    let ports = vec![("web".to_string(), vec![Port::tcp(65535)])];
    let (pod_name, pod_uid) = owner_pod(b, &format!("kubegate-watch-{id}-z"));
    let published = Published {
        session_id: &id,
        principal: "alice@example.com",
        pod_name: &pod_name,
        pod_uid: &pod_uid,
        ports: &ports,
    };
    let route = serde_json::to_value(&build_http_routes(&s, &published)[0]).expect("json");
    post(b, &routes_path(&b.ns), &route).expect("the longest host the config allows");
    let s = ingress_settings(&b.ns, &longest).expect("valid");
    let ingress = serde_json::to_value(build_ingress(&s, &published).expect("ingress")).unwrap();
    post(b, &ingresses_path(&b.ns), &ingress).expect("the longest host the config allows");

    // An object name past 253 characters: a session id the daemon never
    // makes (it checks ids with is_session_id before any lookup).
    let bad_id = format!("a{}", "b".repeat(250));
    assert!(!is_session_id(&bad_id));
    let bad = Published {
        session_id: &bad_id,
        ..published
    };
    let s = gateway_settings(&b.ns, "dev.example.com").expect("valid");
    let route = serde_json::to_value(&build_http_routes(&s, &bad)[0]).expect("json");
    let fields = refused_fields(post(b, &routes_path(&b.ns), &route), "long name");
    assert!(fields.contains(&"metadata.name".to_string()), "{fields:?}");
    let s = ingress_settings(&b.ns, "dev.example.com").expect("valid");
    let ingress = serde_json::to_value(build_ingress(&s, &bad).expect("ingress")).unwrap();
    let fields = refused_fields(post(b, &ingresses_path(&b.ns), &ingress), "long name");
    assert!(fields.contains(&"metadata.name".to_string()), "{fields:?}");

    // An IP address as a route's host: Gateway API's documentation says
    // IPs are not allowed, but the v1.6.3 CRD's schema (a pattern and a
    // length) lets one through, and the sim does as the CRD does
    // (docs/sim.md#gateway-api). The daemon never sends one: its hosts are
    // `<port>-<sessionId>.<domain>`, and an Ingress host refuses an IP.
    let s = gateway_settings(&b.ns, "dev.example.com").expect("valid");
    let mut route = serde_json::to_value(&build_http_routes(&s, &published)[0]).expect("json");
    route["metadata"]["name"] = json!("ip-host");
    route["spec"]["hostnames"] = json!(["10.0.0.1"]);
    post(b, &routes_path(&b.ns), &route).expect("the CRD takes an IP host");
}
two_backends!(
    bad_hosts_are_refused_by_the_server_and_by_the_daemon_first,
    120
);

/// The stored specs of the same session's routes and Ingress agree between
/// the sim and the real plane: the sim applies the CRD's defaults as the
/// schema does (backendRef weight, …). The namespaces differ, so they are
/// masked.
#[test]
fn the_sim_stores_the_daemons_routes_as_the_real_plane_does() {
    let _w = common::backend::watchdog(180);
    on_real("routes-stored", |real| {
        let sim = Backend::sim("routes-stored");
        // The same session id on both; the namespaces differ.
        let id = new_session_id(&mut rand::rng());
        let mask = |specs: Vec<Value>, ns: &str| {
            serde_json::to_string_pretty(&specs)
                .expect("json")
                .replace(ns, "{ns}")
        };
        let r = mask(create_session_routes(real, &id), &real.ns);
        let s = mask(create_session_routes(&sim, &id), &sim.ns);
        assert_eq!(
            s, r,
            "the sim stored (left) what the real plane stored (right)"
        );
    });
}

/// Discovery of the kinds the daemon uses: the same entries from the
/// sim's native kinds and the real plane's CRDs, but for what only a CRD
/// has (`storageVersionHash`), and the verbs compared as a set (a CRD
/// lists them in its own order). The real group also serves `v1beta1`
/// and seven other kinds the sim does not (docs/sim.md#gateway-api).
#[test]
fn the_gateway_groups_discovery_agrees_for_the_daemons_kinds() {
    let _w = common::backend::watchdog(120);
    on_real("routes-discovery", |real| {
        let sim = Backend::sim("routes-discovery");
        let entries = |b: &Backend| -> Vec<Value> {
            let req = Request::get("/apis/gateway.networking.k8s.io/v1");
            let list: Value = b.client.send_json(&req).expect("discovery");
            let mut out: Vec<Value> = list["resources"]
                .as_array()
                .expect("resources")
                .iter()
                .filter(|r| {
                    let name = r["name"].as_str().unwrap_or("");
                    let base = name.split('/').next().unwrap_or("");
                    ["gatewayclasses", "gateways", "httproutes"].contains(&base)
                })
                .cloned()
                .map(|mut r| {
                    let m = r.as_object_mut().expect("an entry");
                    if b.kind == Kind::Real {
                        assert!(
                            m.remove("storageVersionHash").is_some()
                                || m["name"].as_str().unwrap_or("").contains('/'),
                            "a CRD's kind has a storageVersionHash: {m:?}"
                        );
                    }
                    let mut verbs: Vec<String> =
                        serde_json::from_value(m["verbs"].clone()).expect("verbs");
                    verbs.sort();
                    m.insert("verbs".into(), json!(verbs));
                    r
                })
                .collect();
            out.sort_by_key(|r| r["name"].as_str().unwrap_or("").to_string());
            out
        };
        let r = entries(real);
        let s = entries(&sim);
        assert_eq!(r.len(), 6, "three kinds and their status: {r:?}");
        assert_eq!(s, r, "sim (left), real (right)");
        let group = |b: &Backend| -> Value {
            b.client
                .send_json(&Request::get("/apis/gateway.networking.k8s.io"))
                .expect("the group")
        };
        let (rg, sg) = (group(real), group(&sim));
        assert_eq!(rg["preferredVersion"], sg["preferredVersion"]);
        let versions = |g: &Value| -> Vec<String> {
            g["versions"]
                .as_array()
                .expect("versions")
                .iter()
                .map(|v| v["version"].as_str().unwrap_or("").to_string())
                .collect()
        };
        assert_eq!(versions(&rg), ["v1", "v1beta1"]);
        assert_eq!(versions(&sg), ["v1"]);
    });
}
