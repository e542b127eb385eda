//! Gateway routing through the daemon (docs/sessions.md#routing-states),
//! on the embedded sim: a session with two ports gets two HTTPRoutes with
//! the configured parent, hostnames and backends, whose states come back
//! as `routing` events and in the view; a Gateway that is not programmed
//! (its address not usable) turns them `unprogrammed` with the Gateway's
//! condition although the routes are accepted, and back; deleting the
//! Gateway turns them `unprogrammed`; a port change (the app's debug
//! stream) re-routes; a stop leaves no route. And a configuration naming both layers refuses to
//! start, naming `routing`.

mod common;

use common::daemon::{random_token, DaemonProc, SseClient, SseEvent};
use common::{temp_dir, wait_for};
use serde_json::{json, Value};
use std::time::Duration;

const KUBEGATE: &str = env!("CARGO_BIN_EXE_kubegate");

/// Serves nothing on its ports (routes need only the Service); on its
/// inspect address a debug stream that, once the file `go` appears beside
/// it, declares ports 8081 and 9000 (a re-route: 8080 goes, 9000 comes).
const APP_PY: &str = r#"
import http.server, json, os, time
here = os.path.dirname(os.path.abspath(__file__))
class Events(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        self.end_headers()
        while not os.path.exists(os.path.join(here, "go")):
            self.wfile.write(b": wait\n\n")
            self.wfile.flush()
            time.sleep(0.2)
        ev = {"event": "Kernel.PortsResolved", "payload": {"ports": [{"port": 8081}, {"port": 9000}]}}
        self.wfile.write(("data: %s\n\n" % json.dumps(ev)).encode())
        self.wfile.flush()
        while True:
            time.sleep(1)
            self.wfile.write(b": hb\n\n")
            self.wfile.flush()
    def log_message(self, *a): pass
host, port = os.environ["KUBEGATE_INSPECT_ADDR"].rsplit(":", 1)
http.server.ThreadingHTTPServer((host, int(port)), Events).serve_forever()
"#;

fn config(digest: &str) -> String {
    format!(
        r#"[server]
listen = "127.0.0.1:0"
state_dir = "./state"

[cluster]
mode = "sim"
routing = "gateway"
base_domain = "dev.example.com"
gateway = "infra/public"
gateway_section = "http"

[cluster.sim]
namespaces = ["infra"]

[[principal]]
name = "demo"
token_sha256 = "{digest}"
workspaces = ["demo/demo-uid"]
may_start_sessions = true
"#
    )
}

/// A shared Gateway in `infra`: its listener admits the session
/// namespace's routes (`from: All`), as a real shared Gateway must.
fn gateway() -> Value {
    json!({"apiVersion": "gateway.networking.k8s.io/v1", "kind": "Gateway",
        "metadata": {"name": "public", "namespace": "infra"},
        "spec": {"gatewayClassName": "sim",
                 "listeners": [{"name": "http", "port": 80, "protocol": "HTTP",
                                "allowedRoutes": {"namespaces": {"from": "All"}}}]}})
}

fn routes_of(d: &DaemonProc, id: &str) -> Vec<Value> {
    let out = d.kubectl_ok(
        &[
            "get",
            "httproutes",
            "-n",
            "default",
            "-l",
            &format!("kubegate.dev/session-id={id}"),
            "-o",
            "json",
        ],
        None,
    );
    let v: Value = serde_json::from_str(&out).expect("kubectl json");
    let mut items = v["items"].as_array().cloned().unwrap_or_default();
    items.sort_by_key(|r| r["metadata"]["name"].as_str().unwrap_or("").to_string());
    items
}

fn is_routing(e: &SseEvent, port: u16, state: &str) -> bool {
    e.event == "routing" && e.data["port"] == port && e.data["state"] == state
}

/// Reads events until every port in `ports` reported `state`.
fn until_states(sse: &mut SseClient, ports: &[u16], state: &str) -> Vec<SseEvent> {
    let mut left: Vec<u16> = ports.to_vec();
    sse.until(|e| {
        left.retain(|&p| !is_routing(e, p, state));
        assert!(
            !(e.event == "status" && e.data["status"] == "failed"),
            "failed: {e:?}"
        );
        left.is_empty()
    })
}

fn view_states(d: &DaemonProc, id: &str) -> Vec<(u64, String)> {
    let (st, v) = d.json("GET", &format!("/v1/sessions/{id}"), None);
    assert_eq!(st, 200, "{v}");
    let mut out: Vec<(u64, String)> = v["endpoints"]
        .as_array()
        .into_iter()
        .flatten()
        .map(|e| {
            (
                e["port"].as_u64().unwrap_or(0),
                e["routing"]["state"].as_str().unwrap_or("").to_string(),
            )
        })
        .collect();
    out.sort();
    out
}

#[test]
fn sessions_get_http_routes_whose_states_follow_the_gateway() {
    let (token, digest) = random_token();
    let mut d = DaemonProc::start_config(&config(&digest), Default::default(), &token, "info");
    d.kubeconfig = d.dir.join("state").join("sim.kubeconfig");
    d.create(
        &json!({"apiVersion": "gateway.networking.k8s.io/v1", "kind": "GatewayClass",
        "metadata": {"name": "sim"}, "spec": {"controllerName": "kubegate.dev/sim-gateway-controller"}}),
    );
    d.create(&gateway());

    let body = json!({
        "apps": [{"name": "web", "entry": "app.py", "command": ["python3", "app.py"],
                  "io": "streams", "ports": [{"port": 8080}, {"port": 8081}], "runner": false}],
        "bundle": {"files": [{"path": "app.py", "content": APP_PY}]}
    });
    let (id, mut sse) = d.create_session(&body);
    until_states(&mut sse, &[8080, 8081], "programmed");

    // Two routes: the parent (with its listener), the hosts, the backends.
    let routes = routes_of(&d, &id);
    assert_eq!(routes.len(), 2, "{routes:#?}");
    for (r, port) in routes.iter().zip([8080, 8081]) {
        assert_eq!(
            r["metadata"]["name"],
            format!("kubegate-run-{id}-p{port}"),
            "{r}"
        );
        assert_eq!(
            r["spec"]["parentRefs"],
            json!([{"group": "gateway.networking.k8s.io", "kind": "Gateway",
                    "namespace": "infra", "name": "public", "sectionName": "http"}])
        );
        assert_eq!(
            r["spec"]["hostnames"],
            json!([format!("{port}-{id}.dev.example.com")])
        );
        let b = &r["spec"]["rules"][0]["backendRefs"][0];
        assert_eq!(
            (b["name"].as_str(), b["port"].as_u64()),
            (Some(format!("kubegate-run-{id}").as_str()), Some(port))
        );
        assert_eq!(r["metadata"]["ownerReferences"][0]["kind"], "Pod");
    }
    assert_eq!(
        view_states(&d, &id),
        [(8080, "programmed".into()), (8081, "programmed".into())]
    );
    // `kubegate sessions` shows them.
    let out = std::process::Command::new(KUBEGATE)
        .args(["sessions", "--server", &d.url])
        .env("KUBEGATE_TOKEN", &d.token)
        .output()
        .expect("kubegate sessions");
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        text.contains(&format!("https://8080-{id}.dev.example.com(programmed)")),
        "{text}{}",
        String::from_utf8_lossy(&out.stderr)
    );

    gateway_not_programmed(&d, &id, &mut sse);

    // The Gateway deleted: both unprogrammed, with the condition's words.
    d.kubectl_ok(&["delete", "gateway", "public", "-n", "infra"], None);
    let seen = until_states(&mut sse, &[8080, 8081], "unprogrammed");
    let e = seen
        .iter()
        .find(|e| is_routing(e, 8080, "unprogrammed"))
        .expect("8080 unprogrammed");
    assert_eq!(e.data["condition"], "Accepted", "{e:?}");
    assert_eq!(e.data["reason"], "NoMatchingParent", "{e:?}");
    assert!(
        e.data["message"]
            .as_str()
            .is_some_and(|m| m.contains("infra/public")),
        "{e:?}"
    );
    assert_eq!(e.data["host"], format!("8080-{id}.dev.example.com"));
    assert_eq!(
        view_states(&d, &id),
        [(8080, "unprogrammed".into()), (8081, "unprogrammed".into())]
    );

    // Back, then a port change: 8080's route goes, 9000's comes.
    d.create(&gateway());
    until_states(&mut sse, &[8080, 8081], "programmed");
    let (st, v) = d.json(
        "POST",
        &format!("/v1/sessions/{id}/workspace"),
        Some(&json!({"write": [{"path": "go", "content": ""}]})),
    );
    assert_eq!(st, 200, "{v}");
    until_states(&mut sse, &[9000], "programmed");
    let names: Vec<String> = routes_of(&d, &id)
        .iter()
        .map(|r| r["metadata"]["name"].as_str().unwrap_or("").to_string())
        .collect();
    assert_eq!(
        names,
        [
            format!("kubegate-run-{id}-p8081"),
            format!("kubegate-run-{id}-p9000")
        ]
    );
    assert_eq!(
        view_states(&d, &id),
        [(8081, "programmed".into()), (9000, "programmed".into())]
    );

    // Stop: no route is left.
    let (st, _) = d.request(
        "DELETE",
        &format!("/v1/sessions/{id}"),
        Some(&d.token),
        None,
    );
    assert_eq!(st, 204);
    wait_for("the session's routes gone", Duration::from_secs(30), || {
        routes_of(&d, &id).is_empty().then_some(())
    });
    assert_eq!(d.stop(), Some(0), "daemon log:\n{}", d.log_text());
    // The daemon's one Gateway reader logged each change once, not each
    // read: (not found: the daemon starts before the Gateway is created,)
    // programmed, not programmed, programmed, (not found, if a read fell
    // in that window,) programmed.
    let log = d.log_text();
    let lines: Vec<&str> = log
        .lines()
        .filter_map(|l| {
            l.split("routing: Gateway infra/public (cluster.gateway): ")
                .nth(1)
        })
        .collect();
    assert!(lines.windows(2).all(|w| w[0] != w[1]), "{lines:#?}");
    let unusable = lines
        .iter()
        .filter(|l| l.contains("AddressNotUsable"))
        .count();
    assert_eq!(unusable, 1, "{lines:#?}");
    assert_eq!(lines.last(), Some(&"programmed"), "{lines:#?}");
    assert!((4..=6).contains(&lines.len()), "{lines:#?}");
}

/// A merge patch of the Gateway `infra/public`.
fn patch_gateway(d: &DaemonProc, patch: &str) {
    d.kubectl_ok(
        &[
            "patch",
            "gateway",
            "public",
            "-n",
            "infra",
            "--type=merge",
            "-p",
            patch,
        ],
        None,
    );
}

/// The Gateway asks for an address the sim cannot use: the Gateway is
/// `Programmed=False` (`AddressNotUsable`) while its routes stay
/// accepted, so only the daemon's reading of the Gateway can tell; the
/// endpoints turn `unprogrammed` with the Gateway's condition, and back to
/// `programmed` once the address goes.
fn gateway_not_programmed(d: &DaemonProc, id: &str, sse: &mut SseClient) {
    patch_gateway(
        d,
        r#"{"spec":{"addresses":[{"type":"IPAddress","value":"127.9.9.9"}]}}"#,
    );
    let seen = until_states(sse, &[8080, 8081], "unprogrammed");
    let e = seen
        .iter()
        .find(|e| is_routing(e, 8081, "unprogrammed"))
        .expect("8081 unprogrammed");
    assert_eq!(e.data["condition"], "Programmed", "{e:?}");
    assert_eq!(e.data["reason"], "AddressNotUsable", "{e:?}");
    let m = e.data["message"].as_str().unwrap_or("");
    assert!(
        m.contains("infra/public") && m.contains("127.9.9.9"),
        "{e:?}"
    );
    // The routes themselves still say accepted: the Gateway's own status
    // is what the daemon reported.
    for r in routes_of(d, id) {
        let conds = &r["status"]["parents"][0]["conditions"];
        assert_eq!(conds[0]["type"], "Accepted", "{r}");
        assert_eq!(conds[0]["status"], "True", "{r}");
    }
    let (_, v) = d.json("GET", &format!("/v1/sessions/{id}"), None);
    let routing = &v["endpoints"][0]["routing"];
    assert_eq!(
        (routing["state"].as_str(), routing["reason"].as_str()),
        (Some("unprogrammed"), Some("AddressNotUsable")),
        "{v}"
    );
    patch_gateway(d, r#"{"spec":{"addresses":null}}"#);
    until_states(sse, &[8080, 8081], "programmed");
    assert_eq!(
        view_states(d, id),
        [(8080, "programmed".into()), (8081, "programmed".into())]
    );
}

#[test]
fn a_config_naming_both_layers_refuses_to_start_naming_routing() {
    let dir = temp_dir("routing-both");
    let (_, digest) = random_token();
    let text = config(&digest)
        .replace("routing = \"gateway\"\n", "")
        .replace(
            "base_domain = \"dev.example.com\"",
            "ingress_base_domain = \"dev.example.com\"",
        );
    let path = dir.join("kubegate.toml");
    std::fs::write(&path, text).expect("write the config");
    let out = std::process::Command::new(KUBEGATE)
        .args(["serve", "--config"])
        .arg(&path)
        .output()
        .expect("kubegate serve");
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert!(err.contains("cluster.routing"), "{err}");
    assert!(
        err.contains("cluster.gateway") && err.contains("cluster.ingress_base_domain"),
        "{err}"
    );
}

/// A cluster that answers `/version` and nothing else (404 Status): no
/// API group is served.
fn bare_cluster() -> (
    String,
    std::thread::JoinHandle<()>,
    std::sync::Arc<std::sync::atomic::AtomicBool>,
) {
    use std::io::{BufRead, BufReader, Write};
    use std::sync::atomic::{AtomicBool, Ordering};
    let l = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
    l.set_nonblocking(true).expect("nonblocking");
    let url = format!("http://{}", l.local_addr().expect("addr"));
    let stop = std::sync::Arc::new(AtomicBool::new(false));
    let stopped = stop.clone();
    let t = std::thread::spawn(move || {
        while !stopped.load(Ordering::Relaxed) {
            let Ok((s, _)) = l.accept() else {
                std::thread::sleep(Duration::from_millis(10));
                continue;
            };
            s.set_nonblocking(false).expect("blocking");
            s.set_read_timeout(Some(Duration::from_secs(5)))
                .expect("timeout");
            let mut r = BufReader::new(s);
            let mut line = String::new();
            if r.read_line(&mut line).is_err() {
                continue;
            }
            loop {
                let mut h = String::new();
                if r.read_line(&mut h).map_or(true, |n| n == 0) || h == "\r\n" {
                    break;
                }
            }
            let path = line.split_whitespace().nth(1).unwrap_or("").to_string();
            let (status, body) = if path == "/version" {
                (
                    "200 OK",
                    json!({"major": "1", "minor": "32", "gitVersion": "v1.32.0"}),
                )
            } else {
                (
                    "404 Not Found",
                    json!({"kind": "Status", "apiVersion": "v1", "status": "Failure",
                    "message": "the server could not find the requested resource",
                    "reason": "NotFound", "code": 404}),
                )
            };
            let body = body.to_string();
            let mut s = r.into_inner();
            let _ = write!(
                s,
                "HTTP/1.1 {status}\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
                body.len()
            );
        }
    });
    (url, t, stop)
}

#[test]
fn a_cluster_without_the_chosen_layers_api_refuses_to_start_naming_routing() {
    let (url, t, stop) = bare_cluster();
    let dir = temp_dir("routing-discovery");
    let kubeconfig = dir.join("kubeconfig");
    std::fs::write(
        &kubeconfig,
        format!(
            "apiVersion: v1\nkind: Config\nclusters:\n- name: c\n  cluster:\n    server: {url}\nusers:\n- name: u\n  user: {{}}\ncontexts:\n- name: x\n  context:\n    cluster: c\n    user: u\ncurrent-context: x\n"
        ),
    )
    .expect("write the kubeconfig");
    let (_, digest) = random_token();
    for (routing, missing) in [
        (
            "routing = \"gateway\"\nbase_domain = \"d.io\"\ngateway = \"infra/public\"",
            "gateway.networking.k8s.io/v1 HTTPRoute",
        ),
        ("base_domain = \"d.io\"", "networking.k8s.io/v1 Ingress"),
    ] {
        let text = format!(
            "[server]\nlisten = \"127.0.0.1:0\"\nstate_dir = \"./state\"\n[cluster]\nmode = \"kubeconfig\"\nkubeconfig = \"{}\"\n{routing}\n[[principal]]\nname = \"p\"\ntoken_sha256 = \"{digest}\"\n",
            kubeconfig.display()
        );
        let path = dir.join("kubegate.toml");
        std::fs::write(&path, text).expect("write the config");
        let out = std::process::Command::new(KUBEGATE)
            .args(["serve", "--config"])
            .arg(&path)
            .output()
            .expect("kubegate serve");
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{err}");
        assert!(err.contains("cluster.routing"), "{err}");
        assert!(err.contains(missing), "{missing}: {err}");
    }
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    let _ = t.join();
}
