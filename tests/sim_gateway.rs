//! The sim's Gateway API (docs/sim.md#gateway-api): GatewayClass, Gateway
//! and HTTPRoute served as `gateway.networking.k8s.io/v1` (discovery, CRUD,
//! watch, the status subresource), the controller's route status
//! (`Accepted`, `ResolvedRefs`, `NoMatchingParent`, `BackendNotFound`,
//! a deleted Gateway), and kubectl's `get` tables.

mod common;

use common::{wait_for, SimProc};
use kubegate::kube::client::{
    Api, Client, Gateway, HttpRoute, KubeError, ListParams, Resource, WatchEvent, WatchParams,
};
use serde_json::json;
use std::sync::mpsc::channel;
use std::time::Duration;

fn watchdog(secs: u64) -> crossbeam_channel::Sender<()> {
    let (tx, rx) = crossbeam_channel::bounded::<()>(0);
    std::thread::spawn(move || {
        if let Err(crossbeam_channel::RecvTimeoutError::Timeout) =
            rx.recv_timeout(Duration::from_secs(secs))
        {
            eprintln!("watchdog: test still running after {secs} s");
            std::process::exit(101);
        }
    });
    tx
}

fn route(name: &str, parent: (&str, &str), backend: &str) -> HttpRoute {
    serde_json::from_value(json!({
        "apiVersion": "gateway.networking.k8s.io/v1",
        "kind": "HTTPRoute",
        "metadata": {"name": name, "labels": {"suite": "gw"}},
        "spec": {
            "parentRefs": [{"namespace": parent.0, "name": parent.1}],
            "hostnames": [format!("{name}.example.com")],
            "rules": [{"backendRefs": [{"name": backend, "port": 80}]}],
        },
    }))
    .expect("route")
}

/// Our controller's conditions of a route, by type: (status, reason).
fn conditions(r: &HttpRoute) -> Vec<(String, String, String)> {
    let v = serde_json::to_value(r).expect("json");
    v["status"]["parents"]
        .as_array()
        .into_iter()
        .flatten()
        .filter(|p| p["controllerName"] == "kubegate.dev/sim-gateway-controller")
        .flat_map(|p| p["conditions"].as_array().cloned().unwrap_or_default())
        .map(|c| {
            let s = |k: &str| c[k].as_str().unwrap_or_default().to_string();
            (s("type"), s("status"), s("reason"))
        })
        .collect()
}

fn wait_conditions(api: &Api<HttpRoute>, name: &str, want: &[(&str, &str, &str)]) -> HttpRoute {
    let want: Vec<(String, String, String)> = want
        .iter()
        .map(|(a, b, c)| (a.to_string(), b.to_string(), c.to_string()))
        .collect();
    wait_for(
        &format!("route {name} to have {want:?}"),
        Duration::from_secs(20),
        || {
            let r = api.get(name).ok()?;
            (conditions(&r) == want).then_some(r)
        },
    )
}

#[test]
fn gateway_api_kinds_are_served_and_routes_get_status() {
    let _dog = watchdog(120);
    let sim = SimProc::start(&["--namespace", "infra"]);
    let client = Client::new(sim.connection()).expect("client");
    let routes = Api::<HttpRoute>::namespaced(&client, "default");
    // Discovery lists the group and its kinds (kubectl resolves them).
    let kinds = sim.kubectl_ok(&["api-resources", "--api-group=gateway.networking.k8s.io"]);
    for k in ["gatewayclasses", "gateways", "httproutes"] {
        assert!(kinds.contains(k), "{k}: {kinds}");
    }

    // A watch from the start sees the route and its status arrive.
    let watcher = routes.watch(WatchParams::labels("suite=gw"));
    let stopper = watcher.stopper();
    let (tx, rx) = channel();
    let watching = std::thread::spawn(move || {
        for item in watcher {
            if tx.send(item).is_err() {
                break;
            }
        }
    });

    sim.kubectl_ok(&["create", "service", "clusterip", "web", "--tcp=80:80"]);
    let class = json!({"apiVersion": "gateway.networking.k8s.io/v1", "kind": "GatewayClass",
        "metadata": {"name": "sim"}, "spec": {"controllerName": "example.com/any"}});
    let gateway = json!({"apiVersion": "gateway.networking.k8s.io/v1", "kind": "Gateway",
        "metadata": {"name": "public", "namespace": "infra"},
        "spec": {"gatewayClassName": "sim",
                 "listeners": [{"name": "http", "port": 80, "protocol": "HTTP"}]}});
    sim.apply(&class);
    sim.apply(&gateway);
    routes
        .create(&route("ok", ("infra", "public"), "web"))
        .expect("create ok");
    routes
        .create(&route("orphan", ("infra", "missing"), "web"))
        .expect("create orphan");
    routes
        .create(&route("dangling", ("infra", "public"), "nope"))
        .expect("create dangling");

    let ok = wait_conditions(
        &routes,
        "ok",
        &[
            ("Accepted", "True", "Accepted"),
            ("ResolvedRefs", "True", "ResolvedRefs"),
        ],
    );
    let v = serde_json::to_value(&ok).expect("json");
    let parent = &v["status"]["parents"][0];
    assert_eq!(parent["parentRef"]["name"], "public");
    assert_eq!(parent["parentRef"]["kind"], "Gateway", "defaulted");
    assert_eq!(parent["conditions"][0]["observedGeneration"], 1);
    assert_eq!(v["spec"]["rules"][0]["backendRefs"][0]["kind"], "Service");
    wait_conditions(
        &routes,
        "orphan",
        &[
            ("Accepted", "False", "NoMatchingParent"),
            ("ResolvedRefs", "True", "ResolvedRefs"),
        ],
    );
    wait_conditions(
        &routes,
        "dangling",
        &[
            ("Accepted", "True", "Accepted"),
            ("ResolvedRefs", "False", "BackendNotFound"),
        ],
    );
    // The Gateway and its class got theirs.
    let gw = Api::<Gateway>::namespaced(&client, "infra");
    let g = wait_for("the Gateway programmed", Duration::from_secs(20), || {
        let g = serde_json::to_value(gw.get("public").ok()?).ok()?;
        let programmed = g["status"]["conditions"]
            .as_array()?
            .iter()
            .any(|c| c["type"] == "Programmed" && c["status"] == "True");
        programmed.then_some(g)
    });
    assert_eq!(g["status"]["addresses"][0]["value"], "127.0.0.1");

    // The watch saw the route added, then its status.
    let mut added = false;
    let seen = wait_for(
        "the watch to see ok's status",
        Duration::from_secs(20),
        || {
            let item = rx.recv_timeout(Duration::from_millis(200)).ok()?;
            match item.expect("watch item") {
                WatchEvent::Added(r) if r.name() == "ok" => {
                    added = true;
                    None
                }
                WatchEvent::Modified(r) if r.name() == "ok" && !conditions(&r).is_empty() => {
                    Some(r)
                }
                _ => None,
            }
        },
    );
    assert!(added, "ADDED before MODIFIED");
    assert_eq!(seen.metadata.generation, Some(1));

    status_subresource(&routes);
    kubectl_tables(&sim);
    // Deleting the Gateway turns its routes unaccepted.
    sim.kubectl_ok(&["delete", "gateway", "public", "-n", "infra"]);
    wait_conditions(
        &routes,
        "dangling",
        &[
            ("Accepted", "False", "NoMatchingParent"),
            ("ResolvedRefs", "False", "BackendNotFound"),
        ],
    );
    // Creating the missing Service resolves the refs.
    sim.kubectl_ok(&["create", "service", "clusterip", "nope", "--tcp=80:80"]);
    wait_conditions(
        &routes,
        "dangling",
        &[
            ("Accepted", "False", "NoMatchingParent"),
            ("ResolvedRefs", "True", "ResolvedRefs"),
        ],
    );
    // List and delete.
    let list = routes.list(&ListParams::labels("suite=gw")).expect("list");
    assert_eq!(list.items.len(), 3);
    sim.kubectl_ok(&["delete", "httproute", "orphan"]);
    assert!(matches!(routes.get("orphan"), Err(KubeError::NotFound(_))));
    stopper.stop();
    drop(rx);
    let _ = watching.join();
}

/// A main write keeps status (and a spec change bumps the generation, so
/// status is re-observed); a status write keeps the spec; another
/// controller's entry is kept beside ours.
fn status_subresource(routes: &Api<HttpRoute>) {
    let mut changed = routes.get("ok").expect("get");
    changed.spec.as_mut().expect("spec")["hostnames"] = json!(["other.example.com"]);
    changed.status = Some(json!({"parents": []}));
    let after = routes.replace("ok", &changed).expect("replace");
    assert_eq!(after.metadata.generation, Some(2));
    assert!(!conditions(&after).is_empty(), "a main write kept status");
    let r = wait_for("status re-observed", Duration::from_secs(20), || {
        let r = routes.get("ok").ok()?;
        let v = serde_json::to_value(&r).ok()?;
        (v["status"]["parents"][0]["conditions"][0]["observedGeneration"] == 2).then_some(r)
    });
    let mut st = r.clone();
    st.spec = Some(json!({"hostnames": ["ignored.example.com"]}));
    st.status = Some(
        json!({"parents": [{"parentRef": {"name": "x"}, "controllerName": "example.com/other",
        "conditions": []}]}),
    );
    let after = routes.replace_status("ok", &st).expect("replace_status");
    let v = serde_json::to_value(&after).expect("json");
    assert_eq!(v["spec"]["hostnames"], json!(["other.example.com"]));
    assert_eq!(
        v["status"]["parents"][0]["controllerName"],
        "example.com/other"
    );
    // Another controller's entry is kept beside ours.
    wait_for("both parents' entries", Duration::from_secs(20), || {
        let v = serde_json::to_value(routes.get("ok").ok()?).ok()?;
        (v["status"]["parents"].as_array()?.len() == 2).then_some(())
    });
}

/// kubectl's tables: the CRDs' printer columns.
fn kubectl_tables(sim: &SimProc) {
    let out = sim.kubectl_ok(&["get", "httproutes"]);
    let head: Vec<&str> = out
        .lines()
        .next()
        .unwrap_or("")
        .split_whitespace()
        .collect();
    assert_eq!(head, ["NAME", "HOSTNAMES", "AGE"], "{out}");
    assert!(out.contains("[\"dangling.example.com\"]"), "{out}");
    let out = sim.kubectl_ok(&["get", "gateways", "-n", "infra"]);
    assert!(out.starts_with("NAME"), "{out}");
    assert!(out.contains("CLASS") && out.contains("PROGRAMMED"), "{out}");
    let row = out.lines().nth(1).unwrap_or("");
    let cells: Vec<&str> = row.split_whitespace().collect();
    assert_eq!(&cells[..4], ["public", "sim", "127.0.0.1", "True"], "{out}");
    let out = sim.kubectl_ok(&["get", "gatewayclasses"]);
    assert!(
        out.contains("sim") && out.contains("example.com/any") && out.contains("True"),
        "{out}"
    );
}

#[test]
fn invalid_gateway_api_objects_are_refused() {
    let _dog = watchdog(60);
    let sim = SimProc::start(&[]);
    let client = Client::new(sim.connection()).expect("client");
    let routes = Api::<HttpRoute>::namespaced(&client, "default");
    let mut bad = route("bad", ("default", "gw"), "web");
    bad.spec.as_mut().expect("spec")["rules"][0]["backendRefs"][0]
        .as_object_mut()
        .expect("ref")
        .remove("port");
    let e = routes.create(&bad).expect_err("no port");
    assert!(matches!(e, KubeError::Invalid { .. }), "{e:?}");
    assert!(e.to_string().contains("Must have port"), "{e}");
    let mut bad = route("bad", ("default", "gw"), "web");
    bad.spec.as_mut().expect("spec")["hostnames"] = json!(["10.0.0.1"]);
    let e = routes.create(&bad).expect_err("ip host");
    assert!(e.to_string().contains("spec.hostnames[0]"), "{e}");
    let mut bad = route("bad", ("default", ""), "web");
    bad.spec.as_mut().expect("spec")["parentRefs"][0] = json!({});
    let e = routes.create(&bad).expect_err("no parent name");
    assert!(e.to_string().contains("spec.parentRefs[0].name"), "{e}");
    let gateways = Api::<Gateway>::namespaced(&client, "default");
    let g: Gateway =
        serde_json::from_value(json!({"metadata": {"name": "g"}, "spec": {}})).expect("gateway");
    let e = gateways.create(&g).expect_err("no class");
    assert!(e.to_string().contains("spec.gatewayClassName"), "{e}");
    // Nothing was stored.
    assert!(routes
        .list(&ListParams::default())
        .expect("list")
        .items
        .is_empty());
}
