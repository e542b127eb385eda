//! Gateway routing in the machine: the routes published per tcp port, read
//! back after each publish and on ticks, their states as `routing` events
//! and in the view, and a port re-route's routes.

use super::tests::{app, attach_all, created, created_pod, events, has, publish_id, running, T0};
use super::*;
use crate::session::gateway::{GatewayParent, RouteState, Routing};
use crate::session::spec::{Io, Port, Protocol, SessionSpec};

fn gateway_settings() -> Arc<PodSettings> {
    Arc::new(PodSettings {
        base_domain: Some("d.io".into()),
        routing: Routing::Gateway(GatewayParent {
            namespace: "infra".into(),
            name: "public".into(),
            section: None,
        }),
        app_runner: true,
        run_as: None,
        ..PodSettings::default()
    })
}

/// A running session (web: tcp 8080; worker: tcp 3000, udp 5353) and the
/// commands of its last step (the bring-up's PublishDone at `T0 + 5_000`).
fn up_with(settings: Arc<PodSettings>) -> (Session, String, Vec<Command>, Vec<Command>) {
    let mut worker = app("worker", vec![Port::tcp(3000)]);
    worker.ports.push(Port {
        port: 5353,
        protocol: Protocol::Udp,
    });
    worker.io = Io::Streams;
    let (mut s, c) = Session::start(
        NewSession {
            id: "sid000000001".into(),
            principal: "demo".into(),
            spec: SessionSpec {
                apps: vec![app("web", vec![Port::tcp(8080)]), worker],
                env: vec![],
                image: None,
                pull_policy: None,
            },
            workspace_token: "tok".into(),
            settings,
            timings: super::tests::timings(),
        },
        T0,
    );
    let name = created_pod(&c).metadata.name().to_string();
    created(&mut s, &name, "u-1", T0 + 100);
    s.handle(running(&name), T0 + 2_000);
    s.handle(Input::AgentReady { pod: name.clone() }, T0 + 3_000);
    let seeded = s.handle(Input::SeedDone { pod: name.clone() }, T0 + 4_000);
    let id = publish_id(&seeded);
    attach_all(&mut s, &name, T0 + 4_500);
    let c = s.handle(Input::PublishDone { id }, T0 + 5_000);
    assert_eq!(s.status(), &Status::Running);
    (s, name, seeded, c)
}

fn published_routes(c: &[Command]) -> Vec<Value> {
    c.iter()
        .find_map(|x| match x {
            Command::Publish { routes, .. } => Some(
                routes
                    .iter()
                    .map(|r| serde_json::to_value(r).expect("json"))
                    .collect(),
            ),
            _ => None,
        })
        .expect("a Publish")
}

fn reads(c: &[Command]) -> usize {
    c.iter()
        .filter(|x| matches!(x, Command::ReadRoutes))
        .count()
}

fn read(s: &mut Session, found: Vec<(u16, RouteState)>, at: Millis) -> Vec<Command> {
    s.handle(Input::RoutesRead { reading: Ok(found) }, at)
}

fn refused(reason: &str) -> RouteState {
    RouteState::Unprogrammed {
        condition: "Accepted".into(),
        reason: reason.into(),
        message: format!("Gateway infra/public: {reason}"),
    }
}

fn view_routing(s: &Session, port: u16) -> Value {
    s.view()["endpoints"]
        .as_array()
        .expect("endpoints")
        .iter()
        .find(|e| e["port"] == port && e["protocol"] == "tcp")
        .map(|e| e["routing"].clone())
        .unwrap_or(Value::Null)
}

#[test]
fn routes_are_published_per_tcp_port_and_read_back_as_states() {
    let (mut s, _, seeded, c) = up_with(gateway_settings());
    let routes = published_routes(&seeded);
    let names: Vec<&str> = routes
        .iter()
        .map(|r| r["metadata"]["name"].as_str().unwrap_or(""))
        .collect();
    assert_eq!(
        names,
        [
            "kubegate-run-sid000000001-p8080",
            "kubegate-run-sid000000001-p3000"
        ],
        "tcp ports only"
    );
    assert_eq!(routes[0]["spec"]["hostnames"][0], "8080-sid000000001.d.io");
    assert!(has(&seeded, |x| matches!(
        x,
        Command::Publish { ingress: None, .. }
    )));
    // The publish answered: read at once; pending until read.
    assert_eq!(reads(&c), 1);
    assert_eq!(view_routing(&s, 8080), json!({"state": "pending"}));
    let udp = s.view()["endpoints"]
        .as_array()
        .expect("endpoints")
        .iter()
        .find(|e| e["protocol"] == "udp")
        .cloned()
        .expect("udp endpoint");
    assert!(udp.get("routing").is_none(), "{udp}");
    assert_eq!(s.tick_interval_ms(), ROUTE_POLL_UNSETTLED_MS);

    // 8080 programmed: one event; 3000 still pending (no event).
    let c = read(&mut s, vec![(8080, RouteState::Programmed)], T0 + 5_100);
    assert_eq!(
        events(&c),
        [(
            "routing",
            json!({"app": "web", "port": 8080, "host": "8080-sid000000001.d.io", "state": "programmed"})
        )]
    );
    assert_eq!(view_routing(&s, 8080), json!({"state": "programmed"}));
    // Unsettled: polled every second.
    assert_eq!(reads(&s.handle(Input::Tick, T0 + 5_500)), 0);
    assert_eq!(reads(&s.handle(Input::Tick, T0 + 6_000)), 1);
    // One read in flight at most.
    assert_eq!(reads(&s.handle(Input::Tick, T0 + 7_100)), 0);
    let c = read(
        &mut s,
        vec![
            (8080, RouteState::Programmed),
            (3000, RouteState::Programmed),
        ],
        T0 + 7_200,
    );
    assert_eq!(events(&c).len(), 1);
    assert_eq!(events(&c)[0].1["app"], "worker");
    // Settled: polled every 5 s.
    assert_eq!(s.tick_interval_ms(), ROUTE_POLL_SETTLED_MS);
    assert_eq!(reads(&s.handle(Input::Tick, T0 + 8_000)), 0);
    assert_eq!(reads(&s.handle(Input::Tick, T0 + 12_000)), 1);
    // The Gateway went away: unprogrammed, with the condition's words.
    let c = read(
        &mut s,
        vec![
            (8080, refused("NoMatchingParent")),
            (3000, RouteState::Programmed),
        ],
        T0 + 12_100,
    );
    assert_eq!(
        events(&c),
        [(
            "routing",
            json!({"app": "web", "port": 8080, "host": "8080-sid000000001.d.io",
                   "state": "unprogrammed", "condition": "Accepted", "reason": "NoMatchingParent",
                   "message": "Gateway infra/public: NoMatchingParent"})
        )]
    );
    assert_eq!(view_routing(&s, 8080)["state"], "unprogrammed");
    // A known failure is polled at the settled rate.
    assert_eq!(s.tick_interval_ms(), ROUTE_POLL_SETTLED_MS);
    // A failed read changes nothing; a route gone is pending again.
    let c = s.handle(
        Input::RoutesRead {
            reading: Err("connection refused".into()),
        },
        T0 + 13_000,
    );
    assert!(events(&c).is_empty());
    assert_eq!(view_routing(&s, 8080)["state"], "unprogrammed");
    let c = read(&mut s, vec![(3000, RouteState::Programmed)], T0 + 14_000);
    assert_eq!(events(&c)[0].1["state"], "pending");
}

#[test]
fn a_port_re_route_re_routes_and_reads_again() {
    let (mut s, name, _, _) = up_with(gateway_settings());
    read(
        &mut s,
        vec![
            (8080, RouteState::Programmed),
            (3000, RouteState::Programmed),
        ],
        T0 + 5_100,
    );
    let frame = json!({"kind": "event", "timestamp": "t", "event": "Kernel.PortsResolved",
                       "payload": {"ports": [{"port": 9000}]}});
    let c = s.handle(
        Input::Debug {
            pod: name,
            app: "web".into(),
            frame,
        },
        T0 + 6_000,
    );
    let names: Vec<String> = published_routes(&c)
        .iter()
        .map(|r| r["metadata"]["name"].as_str().unwrap_or("").to_string())
        .collect();
    assert_eq!(
        names,
        [
            "kubegate-run-sid000000001-p9000",
            "kubegate-run-sid000000001-p3000"
        ],
        "8080's route is no longer in the set (the engine deletes it)"
    );
    let id = publish_id(&c);
    let c = s.handle(Input::PublishDone { id }, T0 + 6_100);
    assert_eq!(reads(&c), 1);
    assert_eq!(events(&c)[0].0, "endpoints");
    assert_eq!(view_routing(&s, 9000)["state"], "pending");
    let c = read(
        &mut s,
        vec![
            (9000, RouteState::Programmed),
            (3000, RouteState::Programmed),
        ],
        T0 + 6_200,
    );
    assert_eq!(events(&c).len(), 1);
    assert_eq!(events(&c)[0].1["port"], 9000);
}

#[test]
fn ingress_routing_keeps_todays_shape() {
    let (mut s, _, seeded, c) = up_with(super::tests::settings(Some("d.io")));
    assert!(published_routes(&seeded).is_empty());
    assert!(has(&seeded, |x| matches!(
        x,
        Command::Publish {
            ingress: Some(_),
            ..
        }
    )));
    assert_eq!(reads(&c), 0);
    assert_eq!(view_routing(&s, 8080), Value::Null);
    assert_eq!(reads(&s.handle(Input::Tick, T0 + 60_000)), 0);
    assert_eq!(s.tick_interval_ms(), 5_000);
}

#[test]
fn a_route_pending_for_long_is_polled_at_the_settled_rate() {
    // A cluster whose Gateway has no controller: routes stay pending.
    let (mut s, _, _, _) = up_with(gateway_settings());
    read(&mut s, vec![], T0 + 5_100);
    assert_eq!(s.tick_interval_ms(), ROUTE_POLL_UNSETTLED_MS);
    let mut at = T0 + 6_000;
    let mut fast = 0;
    while at < T0 + 5_000 + ROUTE_POLL_FAST_FOR_MS {
        if reads(&s.handle(Input::Tick, at)) == 1 {
            fast += 1;
            read(&mut s, vec![], at + 10);
        }
        at += 1_000;
    }
    assert!(fast >= 25, "{fast} fast reads in the first 30 s");
    // Past the window: every 5 s.
    s.handle(Input::Tick, at);
    assert_eq!(s.tick_interval_ms(), ROUTE_POLL_SETTLED_MS);
    let c = s.handle(Input::Tick, at + 1_000);
    assert_eq!(reads(&c), 0);
    assert_eq!(view_routing(&s, 8080), json!({"state": "pending"}));
}

#[test]
fn garbage_in_a_route_status_is_pending_not_a_panic() {
    use crate::kube::client::HttpRoute;
    use crate::session::gateway::route_state;
    let parent = GatewayParent {
        namespace: "infra".into(),
        name: "public".into(),
        section: None,
    };
    let ours = json!({"namespace": "infra", "name": "public"});
    for status in [
        json!("a string"),
        json!({"parents": "not a list"}),
        json!({"parents": [1, null, {"parentRef": 7}]}),
        json!({"parents": [{"parentRef": ours, "conditions": {"type": "Accepted"}}]}),
        json!({"parents": [{"parentRef": ours, "conditions": [7, {"type": 1}, {"type": "Accepted", "status": 3}]}]}),
        json!({"parents": [{"parentRef": {"name": ["public"], "namespace": "infra"}}]}),
    ] {
        let r: HttpRoute = serde_json::from_value(json!({
            "metadata": {"name": "r", "namespace": "dev"}, "status": status}))
        .expect("route");
        let st = route_state(&r, &parent);
        assert_eq!(st, RouteState::Pending, "{status}");
    }
    // A non-string status is not True: unprogrammed, with empty words.
    let r: HttpRoute = serde_json::from_value(json!({
        "metadata": {"name": "r", "namespace": "dev"},
        "status": {"parents": [{"parentRef": ours, "conditions": [
            {"type": "Accepted", "status": 3}, {"type": "ResolvedRefs", "status": "True"}]}]}}))
    .expect("route");
    assert_eq!(
        route_state(&r, &parent),
        RouteState::Unprogrammed {
            condition: "Accepted".into(),
            reason: String::new(),
            message: String::new(),
        }
    );
}

#[test]
fn states_are_pending_while_the_pod_is_not_up_and_read_afresh_after() {
    let (mut s, name, _, _) = up_with(gateway_settings());
    read(
        &mut s,
        vec![
            (8080, RouteState::Programmed),
            (3000, RouteState::Programmed),
        ],
        T0 + 5_100,
    );
    s.user(UserOp::Suspend, T0 + 6_000).expect("suspend");
    s.handle(Input::CheckpointDone { pod: name }, T0 + 7_000);
    assert_eq!(s.status(), &Status::Suspended);
    assert_eq!(view_routing(&s, 8080), json!({"state": "pending"}));
    // No polling while suspended.
    assert_eq!(reads(&s.handle(Input::Tick, T0 + 60_000)), 0);
    // Resumed: the new pod's routes are published and read; programmed
    // again is an event (the view said pending meanwhile).
    let later = T0 + 100_000;
    let c = s.user(UserOp::Resume, later).expect("resume");
    let name2 = created_pod(&c).metadata.name().to_string();
    let c = super::tests::recreated(&mut s, &name2, later);
    let id = publish_id(&c);
    attach_all(&mut s, &name2, later + 5);
    let c = s.handle(Input::PublishDone { id }, later + 6);
    assert_eq!(s.status(), &Status::Running);
    assert_eq!(reads(&c), 1);
    assert_eq!(view_routing(&s, 8080), json!({"state": "pending"}));
    let c = read(
        &mut s,
        vec![
            (8080, RouteState::Programmed),
            (3000, RouteState::Programmed),
        ],
        later + 7,
    );
    assert_eq!(events(&c).len(), 2, "{c:?}");
    assert_eq!(view_routing(&s, 8080), json!({"state": "programmed"}));
}
