//! scripts/rbac.yaml grants exactly what the daemon uses (docs/deploy.md#rbac).
//!
//! The source of truth is the daemon itself: `kubegate serve` in
//! `mode = "kubeconfig"` against a separate `kubegate sim` started with
//! `--request-log` (docs/sim.md), driven through everything it does against
//! a cluster: `/readyz`, `GET /v1/workspaces`, a one-shot exec, and one
//! watch session's whole life (start with a published port and an Ingress,
//! each pod's token Secret, attach, the debug stream re-routing the port so the Service and Ingress
//! are replaced, the port proxy with every method it forwards, a TCP
//! tunnel to the app and one to the workspace's Deployment, workspace
//! reads and writes, reload, setApps, suspend, resume, stop), then a
//! restart with a live session (SIGTERM, start again: the pod re-adopted,
//! the output written meanwhile read from its log), then SIGTERM; then a
//! second daemon with gateway routing (`routing = "gateway"`: the Gateway
//! read at start and every 5 s, a session's HTTPRoutes created, read back,
//! replaced on a re-route and deleted for a port gone).
//! Every logged request whose User-Agent is the daemon's (`kubegate/…`;
//! kubectl's own set-up requests are not) is mapped to what the API
//! server's authorizer checks — (namespace, apiGroup, resource[/sub], verb)
//! — the way upstream's RequestInfo does: GET on a collection is `list`, or
//! `watch` with `watch=true`; GET on an object `get`; POST `create`; PUT
//! `update`; PATCH `patch`; DELETE `delete`; a WebSocket GET on
//! pods/exec, pods/attach or pods/portforward needs `get` AND `create`
//! (Kubernetes 1.35+, `AuthorizePodWebsocketUpgradeCreatePermission`).
//!
//! Then both directions: every used (namespace, group, resource, verb) is
//! granted in that namespace by the Roles/ClusterRoles bound there in
//! scripts/rbac.yaml, and every granted (group, resource, verb) was used
//! (or is in `ALLOWANCES`, with its reason). Non-resource URLs (`/version`)
//! are granted to every authenticated identity by Kubernetes' default
//! `system:public-info-viewer`, so the file must not grant them.

mod common;

use common::daemon::DaemonProc;
use common::daemon::{SseClient, SseEvent};
use common::rbac_file::{
    parse_rbac, Check, Triple, FILE_GATEWAY_NS, FILE_SESSION_NS, FILE_WORKSPACE_NS, RBAC,
};
use common::{temp_dir, wait_for, SimProc};
use serde_json::{json, Value};
use std::collections::BTreeSet;
use std::path::Path;
use std::time::Duration;

/// The namespaces rbac.yaml is written for: the sim runs the file as it
/// is.
const SESSION_NS: &str = FILE_SESSION_NS;
const WORKSPACE_NS: &str = FILE_WORKSPACE_NS;
const GATEWAY_NS: &str = FILE_GATEWAY_NS;

/// Granted but not seen in the run, each with its reason.
const ALLOWANCES: &[(&str, &str, &str, &str)] = &[];

/// A watchdog: the process exits (failing the test) if the test outlives
/// `secs`; dropping the sender disarms it.
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

// ------------------------------------------------------------ the mapping

/// What the API server's authorizer checks for one logged request: empty
/// for non-resource URLs (`/version`, discovery), which RBAC grants through
/// `nonResourceURLs` and Kubernetes' default bindings.
fn checks_of(line: &Value) -> Vec<Check> {
    let method = line["method"].as_str().unwrap_or("");
    let path = line["path"].as_str().unwrap_or("");
    let query = line["query"].as_str().unwrap_or("");
    let upgrade = line["upgrade"].as_bool().unwrap_or(false);
    let segs: Vec<&str> = path.trim_matches('/').split('/').collect();
    let (group, rest) = match segs.as_slice() {
        ["api", "v1", rest @ ..] => ("", rest),
        ["apis", g, _version, rest @ ..] => (*g, rest),
        _ => return Vec::new(),
    };
    if rest.is_empty() {
        return Vec::new(); // discovery of a group version
    }
    // [namespaces, ns, resource, name?, sub?, ...] or [resource, name?, sub?]
    let (ns, rest) = match rest {
        ["namespaces", ns, tail @ ..] if !tail.is_empty() => (*ns, tail),
        // The namespace object itself: cluster-scoped `namespaces`.
        ["namespaces", name] => ("", &["namespaces", *name][..]),
        other => ("", other),
    };
    let resource = rest[0];
    let name = rest.get(1).copied();
    let sub = rest.get(2).copied();
    let full = match sub {
        Some(s) => format!("{resource}/{s}"),
        None => resource.to_string(),
    };
    let watch = query
        .split('&')
        .any(|kv| kv == "watch=true" || kv == "watch=1");
    let verbs: Vec<&str> = match (method, name, sub) {
        ("GET", _, Some("exec" | "attach" | "portforward")) if upgrade => vec!["get", "create"],
        ("GET" | "HEAD", None, _) if watch => vec!["watch"],
        ("GET" | "HEAD", None, _) => vec!["list"],
        ("GET" | "HEAD", Some(_), _) => vec!["get"],
        ("POST", _, _) => vec!["create"],
        ("PUT", _, _) => vec!["update"],
        ("PATCH", _, _) => vec!["patch"],
        ("DELETE", None, _) => vec!["deletecollection"],
        ("DELETE", Some(_), _) => vec!["delete"],
        (m, _, _) => panic!("a method RBAC has no verb for: {m} {path}"),
    };
    verbs
        .into_iter()
        .map(|v| {
            (
                ns.to_string(),
                group.to_string(),
                full.clone(),
                v.to_string(),
            )
        })
        .collect()
}

#[test]
fn the_mapping_follows_the_api_servers_request_info() {
    let c = |m: &str, p: &str, q: &str, up: bool| {
        checks_of(&json!({"method": m, "path": p, "query": q, "upgrade": up}))
            .into_iter()
            .map(|(n, g, r, v)| format!("{n}|{g}|{r}|{v}"))
            .collect::<Vec<_>>()
    };
    assert_eq!(
        c("GET", "/api/v1/namespaces/d/pods", "labelSelector=a", false),
        ["d||pods|list"]
    );
    assert_eq!(
        c("GET", "/api/v1/namespaces/d/pods", "watch=true&x=1", false),
        ["d||pods|watch"]
    );
    assert_eq!(
        c("GET", "/api/v1/namespaces/d/pods/p", "", false),
        ["d||pods|get"]
    );
    assert_eq!(
        c("POST", "/api/v1/namespaces/d/pods", "", false),
        ["d||pods|create"]
    );
    assert_eq!(
        c("DELETE", "/api/v1/namespaces/d/pods/p", "", false),
        ["d||pods|delete"]
    );
    assert_eq!(
        c(
            "PUT",
            "/apis/networking.k8s.io/v1/namespaces/d/ingresses/i",
            "",
            false
        ),
        ["d|networking.k8s.io|ingresses|update"]
    );
    assert_eq!(
        c(
            "GET",
            "/api/v1/namespaces/d/pods/p/exec",
            "command=ls",
            true
        ),
        ["d||pods/exec|get", "d||pods/exec|create"]
    );
    assert_eq!(
        c("GET", "/api/v1/namespaces/d/pods/p/portforward", "", true),
        ["d||pods/portforward|get", "d||pods/portforward|create"]
    );
    assert_eq!(
        c(
            "GET",
            "/apis/gateway.networking.k8s.io/v1/namespaces/d/httproutes",
            "labelSelector=a%3Db",
            false
        ),
        ["d|gateway.networking.k8s.io|httproutes|list"]
    );
    assert_eq!(
        c(
            "POST",
            "/api/v1/namespaces/d/pods/p/exec",
            "command=ls",
            false
        ),
        ["d||pods/exec|create"]
    );
    assert_eq!(
        c(
            "PATCH",
            "/api/v1/namespaces/d/pods/p:8080/proxy/a/b",
            "",
            false
        ),
        ["d||pods/proxy|patch"]
    );
    assert_eq!(
        c("GET", "/api/v1/namespaces/d/pods/p:8080/proxy/", "", false),
        ["d||pods/proxy|get"]
    );
    assert_eq!(
        c("POST", "/api/v1/namespaces", "", false),
        ["||namespaces|create"]
    );
    assert_eq!(
        c("GET", "/api/v1/namespaces/d", "", false),
        ["||namespaces|get"]
    );
    assert!(c("GET", "/version", "", false).is_empty());
    assert!(c("GET", "/apis/apps/v1", "", false).is_empty());
}

#[test]
fn the_sims_request_log_has_one_line_per_request_and_no_secret() {
    let _dog = watchdog(120);
    let dir = temp_dir("request-log");
    let log = dir.join("requests.jsonl");
    let log_arg = log.display().to_string();
    let sim = SimProc::start(&["--request-log", &log_arg]);
    let addr = sim.url.trim_start_matches("http://").to_string();
    let get = |target: &str| {
        let raw = format!(
            "GET {target} HTTP/1.1\r\nHost: x\r\nUser-Agent: probe/1\r\nAuthorization: Bearer s3cret-token\r\nConnection: close\r\n\r\n"
        );
        common::daemon::raw_exchange(&addr, raw.as_bytes()).0
    };
    assert_eq!(get("/api/v1/namespaces/default/pods?limit=5"), 200);
    assert_eq!(get("/api/v1/namespaces/default/pods/nope"), 404);
    assert_eq!(get("/api/v1/namespaces/default/pods/a%20b"), 404);
    let text = std::fs::read_to_string(&log).expect("read the request log");
    assert!(!text.contains("s3cret"), "a token in the log: {text}");
    let lines: Vec<Value> = text
        .lines()
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("{e}: {l}")))
        .collect();
    assert_eq!(
        lines,
        vec![
            json!({"method": "GET", "path": "/api/v1/namespaces/default/pods", "query": "limit=5",
                   "target": "/api/v1/namespaces/default/pods?limit=5",
                   "status": 200, "upgrade": false, "userAgent": "probe/1"}),
            json!({"method": "GET", "path": "/api/v1/namespaces/default/pods/nope", "query": "",
                   "target": "/api/v1/namespaces/default/pods/nope",
                   "status": 404, "upgrade": false, "userAgent": "probe/1"}),
            json!({"method": "GET", "path": "/api/v1/namespaces/default/pods/a b", "query": "",
                   "target": "/api/v1/namespaces/default/pods/a%20b",
                   "status": 404, "upgrade": false, "userAgent": "probe/1"}),
        ]
    );
}

// ------------------------------------------------------------ rbac.yaml

#[test]
fn rbac_yaml_has_the_expected_shape() {
    let text = std::fs::read_to_string(RBAC).expect("read scripts/rbac.yaml");
    let (g, docs) = parse_rbac(&text);
    // No cluster-wide grant: ClusterRoles only through namespaced bindings.
    assert!(!g.by_ns.contains_key(""), "no ClusterRoleBinding");
    assert!(g.by_ns.contains_key(SESSION_NS) && g.by_ns.contains_key(WORKSPACE_NS));
    // The Gateway's namespace gets `get gateways` and nothing else.
    let gw: Vec<&Triple> = g.by_ns[GATEWAY_NS].iter().collect();
    assert_eq!(
        gw,
        [&(
            "gateway.networking.k8s.io".to_string(),
            "gateways".to_string(),
            "get".to_string()
        )]
    );
    for d in &docs {
        assert!(
            d["apiVersion"] == "v1" || d["apiVersion"] == "rbac.authorization.k8s.io/v1",
            "{d}"
        );
    }
}

// ------------------------------------------------------------ the run

/// An app serving HTTP (any method) on `$POD_IP:8080` and `:8081` and, on
/// its inspect address, a debug stream that declares port 8081 only, so
/// the session re-publishes its Service and Ingress (a replace).
const APP_PY: &str = r#"
import http.server, json, os, threading, time
ip = os.environ["POD_IP"]
class App(http.server.BaseHTTPRequestHandler):
    def answer(self):
        n = int(self.headers.get("Content-Length") or 0)
        if n:
            self.rfile.read(n)
        body = ("%s %s" % (self.command, self.path)).encode()
        self.send_response(200)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(body)
    do_GET = do_POST = do_PUT = do_PATCH = do_DELETE = do_HEAD = answer
    def log_message(self, *a): pass
class Events(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        self.end_headers()
        ev = {"event": "Kernel.PortsResolved", "payload": {"ports": [{"port": 8081}]}}
        self.wfile.write(("data: %s\n\n" % json.dumps(ev)).encode())
        self.wfile.flush()
        while True:
            time.sleep(1)
            self.wfile.write(b": hb\n\n")
            self.wfile.flush()
    def log_message(self, *a): pass
for port in (8080, 8081):
    s = http.server.ThreadingHTTPServer((ip, port), App)
    threading.Thread(target=s.serve_forever, daemon=True).start()
host, port = os.environ["KUBEGATE_INSPECT_ADDR"].rsplit(":", 1)
http.server.ThreadingHTTPServer((host, int(port)), Events).serve_forever()
"#;

fn status_of(e: &SseEvent) -> Option<&str> {
    (e.event == "status")
        .then(|| e.data["status"].as_str())
        .flatten()
}

fn until_status(sse: &mut SseClient, want: &str) -> Vec<SseEvent> {
    let seen = sse.until(|e| matches!(status_of(e), Some(s) if s == want || s == "failed"));
    assert_eq!(seen.last().and_then(status_of), Some(want), "{seen:#?}");
    seen
}

fn daemon_config(sim_kubeconfig: &Path, digest: &str, routing: &str) -> String {
    format!(
        r#"[server]
listen = "127.0.0.1:0"
state_dir = "./state"

[cluster]
mode = "kubeconfig"
kubeconfig = "{}"
session_namespace = "{SESSION_NS}"
{routing}

[[principal]]
name = "demo"
token_sha256 = "{digest}"
workspaces = ["{WORKSPACE_NS}/demo-uid"]
may_start_sessions = true
"#,
        sim_kubeconfig.display()
    )
}

/// Drives the daemon through everything it does against a cluster.
fn drive(sim: &SimProc, d: &DaemonProc) {
    let (st, _) = d.request("GET", "/readyz", None, None);
    assert_eq!(st, 200);

    // The exec gateway: the workspace listing and a one-shot exec.
    let (st, v) = d.json("GET", "/v1/workspaces", None);
    assert_eq!(st, 200, "{v}");
    assert_eq!(v["workspaces"][0]["deployments"][0]["name"], "hello", "{v}");
    let (st, v) = d.json(
        "POST",
        "/v1/exec",
        Some(
            &json!({"workspace": {"project": WORKSPACE_NS, "uid": "demo-uid"},
                     "deployment": "hello", "command": ["sh", "-c", "echo hi"]}),
        ),
    );
    assert_eq!(st, 200, "{v}");
    assert_eq!(v["exitCode"], 0, "{v}");

    // A watch session, start to stop.
    let body = json!({
        // The app serves its own debug stream: no runner.
        "apps": [{"name": "web", "entry": "app.py", "command": ["python3", "app.py"],
                  "io": "streams", "ports": [{"port": 8080}], "runner": false}],
        "bundle": {"files": [{"path": "app.py", "content": APP_PY}]}
    });
    let (st, v) = d.json("POST", "/v1/sessions", Some(&body));
    assert_eq!(st, 201, "{v}");
    let id = v["sessionId"].as_str().expect("sessionId").to_string();
    let base = format!("/v1/sessions/{id}");
    let mut sse = SseClient::open(d, &format!("{base}/events"), None);
    until_status(&mut sse, "running");
    // The debug stream re-routes 8080 -> 8081: Service and Ingress replaced.
    let more = sse.until(|e| e.event == "endpoints" && e.data["added"][0]["port"] == 8081);
    assert!(
        more.iter().any(|e| e.event == "endpoints"),
        "no re-route: {more:#?}"
    );
    let svc = format!("kubegate-run-{id}");
    wait_for(
        "the Service and Ingress to carry port 8081",
        Duration::from_secs(30),
        || {
            let s = sim.kubectl_json(&["-n", SESSION_NS, "get", "service", &svc]);
            let i = sim.kubectl_json(&["-n", SESSION_NS, "get", "ingress", &svc]);
            let port = &i["spec"]["rules"][0]["http"]["paths"][0]["backend"]["service"]["port"];
            (s["spec"]["ports"][0]["port"] == 8081 && port["number"] == 8081).then_some(())
        },
    );
    // The port proxy forwards the client's method.
    for m in ["GET", "HEAD", "POST", "PUT", "PATCH", "DELETE"] {
        let body = (m != "GET" && m != "HEAD" && m != "DELETE").then_some(&b"{}"[..]);
        let (st, b) = d.request(m, &format!("{base}/ports/8081/x"), Some(&d.token), body);
        assert_eq!(st, 200, "{m}: {}", String::from_utf8_lossy(&b));
    }
    // A TCP tunnel to the app (pods/portforward through the API server):
    // one HTTP request over it, the app's answer back.
    tunnel_http(d, &format!("{base}/tunnels/8081"));
    // The exec gateway's tunnel to the workspace's Deployment: its pod
    // listens on nothing, so the kubelet's refusal ends it with 4502 — the
    // port-forward request was made and authorized in the workspace's
    // namespace either way.
    let q = format!("project={WORKSPACE_NS}&uid=demo-uid&deployment=hello&port=7999");
    let mut ws = open_tunnel(d, &format!("/v1/exec/tunnel?{q}"));
    let (_, close) = read_tunnel(&mut ws);
    assert_eq!(close.as_ref().map(|c| c.0), Some(4502), "{close:?}");
    // The workspace agent, through the pod proxy.
    let (st, v) = d.json(
        "POST",
        &format!("{base}/workspace"),
        Some(&json!({"write": [{"path": "lib/msg.txt", "content": "v2\n"}]})),
    );
    assert_eq!(st, 200, "{v}");
    let (st, v) = d.json("GET", &format!("{base}/workspace"), None);
    assert_eq!(st, 200, "{v}");
    let (st, v) = d.json(
        "GET",
        &format!("{base}/workspace/file?path=lib/msg.txt"),
        None,
    );
    assert_eq!((st, v["content"].as_str()), (200, Some("v2\n")), "{v}");
    let (st, _) = d.request(
        "POST",
        &format!("{base}/reload?app=web"),
        Some(&d.token),
        Some(b""),
    );
    assert_eq!(st, 202);
    // setApps: a new pod, with a tty app and no port any more (so the
    // Service and Ingress are deleted).
    let apps = json!({"apps": [
        {"name": "web", "entry": "app.py", "command": ["sh", "-c", "while :; do sleep 1; done"],
         "io": "streams"},
        {"name": "term", "entry": "app.py", "command": ["sh", "-c", "while :; do sleep 1; done"],
         "io": "tty"}
    ]});
    let (st, v) = d.json("PUT", &format!("{base}/apps"), Some(&apps));
    assert_eq!(st, 202, "{v}");
    until_status(&mut sse, "running");
    // Suspend (checkpoint, delete the pod) and resume (a new pod).
    let (st, v) = d.json("POST", &format!("{base}/suspend"), Some(&json!({})));
    assert_eq!(st, 202, "{v}");
    until_status(&mut sse, "suspended");
    let (st, v) = d.json("POST", &format!("{base}/resume"), Some(&json!({})));
    assert_eq!(st, 202, "{v}");
    until_status(&mut sse, "running");
    let (st, v) = d.json(
        "GET",
        &format!("{base}/workspace/file?path=lib/msg.txt"),
        None,
    );
    assert_eq!((st, v["content"].as_str()), (200, Some("v2\n")), "{v}");
    // Stop.
    let (st, _) = d.request("DELETE", &base, Some(&d.token), None);
    assert_eq!(st, 204);
    until_status(&mut sse, "stopped");
    wait_for(
        "the session pod to be gone",
        Duration::from_secs(30),
        || {
            let pods = sim.kubectl_json(&[
                "-n",
                SESSION_NS,
                "get",
                "pods",
                "-l",
                &format!("kubegate.dev/session-id={id}"),
            ]);
            pods["items"]
                .as_array()
                .is_some_and(Vec::is_empty)
                .then_some(())
        },
    );
}

type Ws = tungstenite::WebSocket<std::net::TcpStream>;

/// A `kubegate.tunnel.v1` WebSocket (docs/api.md#tunnels), opened.
fn open_tunnel(d: &DaemonProc, path: &str) -> Ws {
    let auth = format!("Bearer {}", d.token);
    match d.ws(path, &[("Authorization", &auth)], &["kubegate.tunnel.v1"]) {
        Ok((ws, _)) => ws,
        Err((st, b)) => panic!("{path}: {st} {}", String::from_utf8_lossy(&b)),
    }
}

/// Reads a tunnel to its Close, answering the pod's eof with ours: the
/// bytes and the Close's code and reason.
fn read_tunnel(ws: &mut Ws) -> (Vec<u8>, Option<(u16, String)>) {
    let mut bytes = Vec::new();
    loop {
        match ws.read() {
            Ok(tungstenite::Message::Binary(b)) => bytes.extend_from_slice(&b),
            // The pod's half-close: ours answers it, so both eofs are sent.
            Ok(tungstenite::Message::Text(t)) => {
                assert_eq!(t.as_str(), r#"{"type":"eof"}"#);
                ws.send(tungstenite::Message::Text(t))
                    .expect("send our eof");
            }
            Ok(tungstenite::Message::Close(f)) => {
                let _ = ws.flush();
                return (bytes, f.map(|f| (u16::from(f.code), f.reason.to_string())));
            }
            Ok(_) => {}
            Err(tungstenite::Error::ConnectionClosed) => return (bytes, None),
            Err(e) => panic!("reading the tunnel: {e}"),
        }
    }
}

/// One `Connection: close` HTTP request through a session tunnel.
fn tunnel_http(d: &DaemonProc, path: &str) {
    let mut ws = open_tunnel(d, path);
    let req = "GET /tunnelled HTTP/1.1\r\nHost: app\r\nConnection: close\r\n\r\n";
    ws.send(tungstenite::Message::Binary(req.as_bytes().to_vec().into()))
        .expect("send the request");
    let (bytes, close) = read_tunnel(&mut ws);
    let text = String::from_utf8_lossy(&bytes);
    assert!(
        text.starts_with("HTTP/1.0 200") && text.ends_with("GET /tunnelled"),
        "{text:?} {close:?}"
    );
    assert_eq!(
        close.as_ref().map(|c| c.0),
        Some(1000),
        "{text:?} {close:?}"
    );
}

/// A session left running across a daemon restart: the next start lists
/// the session pods, re-adopts the pod and reads its log; then it stops.
fn restart_with_a_live_session(d: &mut DaemonProc) {
    let body = json!({
        "apps": [{"name": "tick", "entry": "t.sh", "command": ["sh", "t.sh"], "io": "streams"}],
        "bundle": {"files": [{"path": "t.sh", "content": "while :; do echo tick; sleep 1; done"}]}
    });
    let (id, mut sse) = d.create_session(&body);
    until_status(&mut sse, "running");
    assert_eq!(d.stop(), Some(0), "daemon log:\n{}", d.log_text());
    d.restart("info");
    let mut sse = SseClient::open(d, &format!("/v1/sessions/{id}/events"), None);
    until_status(&mut sse, "running");
    let (st, _) = d.request(
        "DELETE",
        &format!("/v1/sessions/{id}"),
        Some(&d.token),
        None,
    );
    assert_eq!(st, 204);
    until_status(&mut sse, "stopped");
}

/// An app whose debug stream declares 8080 and 8081 (8080's route
/// replaced, 8081's created), then, a second later, 8081 alone (8080's
/// route deleted).
const ROUTES_PY: &str = r#"
import http.server, json, os, time
class Events(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        self.end_headers()
        for ports in ([8080, 8081], [8081]):
            ev = {"event": "Kernel.PortsResolved", "payload": {"ports": [{"port": p} for p in ports]}}
            self.wfile.write(("data: %s\n\n" % json.dumps(ev)).encode())
            self.wfile.flush()
            time.sleep(1)
        while True:
            time.sleep(1)
            self.wfile.write(b": hb\n\n")
            self.wfile.flush()
    def log_message(self, *a): pass
host, port = os.environ["KUBEGATE_INSPECT_ADDR"].rsplit(":", 1)
http.server.ThreadingHTTPServer((host, int(port)), Events).serve_forever()
"#;

/// A daemon with gateway routing: the Gateway read (at start and every
/// 5 s), one session's routes created, read back, replaced, deleted; then
/// a stop. The Gateway admits the session namespace's routes (`from:
/// All`), as a shared Gateway must.
fn drive_gateway(sim: &SimProc, token: &str, digest: &str) {
    sim.apply(
        &json!({"apiVersion": "gateway.networking.k8s.io/v1", "kind": "GatewayClass",
        "metadata": {"name": "sim"}, "spec": {"controllerName": "kubegate.dev/sim-gateway-controller"}}),
    );
    sim.apply(
        &json!({"apiVersion": "gateway.networking.k8s.io/v1", "kind": "Gateway",
        "metadata": {"name": "public", "namespace": GATEWAY_NS},
        "spec": {"gatewayClassName": "sim",
                 "listeners": [{"name": "http", "port": 80, "protocol": "HTTP",
                                "allowedRoutes": {"namespaces": {"from": "All"}}}]}}),
    );
    let mut d = DaemonProc::start_config(
        &daemon_config(
            &sim.kubeconfig,
            digest,
            &format!(
                "routing = \"gateway\"\nbase_domain = \"dev.example.com\"\ngateway = \"{GATEWAY_NS}/public\""
            ),
        ),
        sim.kubeconfig.clone(),
        token,
        "info",
    );
    let body = json!({
        "apps": [{"name": "web", "entry": "app.py", "command": ["python3", "app.py"],
                  "io": "streams", "ports": [{"port": 8080}], "runner": false}],
        "bundle": {"files": [{"path": "app.py", "content": ROUTES_PY}]}
    });
    let (id, mut sse) = d.create_session(&body);
    let seen = sse.until(|e| {
        (e.event == "routing" && e.data["port"] == 8081 && e.data["state"] == "programmed")
            || status_of(e) == Some("failed")
    });
    assert_ne!(seen.last().and_then(status_of), Some("failed"), "{seen:#?}");
    wait_for("8080's route deleted", Duration::from_secs(30), || {
        let v = sim.kubectl_json(&[
            "-n",
            SESSION_NS,
            "get",
            "httproutes",
            "-l",
            &format!("kubegate.dev/session-id={id}"),
        ]);
        let names: Vec<&str> = v["items"]
            .as_array()?
            .iter()
            .filter_map(|r| r["metadata"]["name"].as_str())
            .collect();
        (names == [format!("kubegate-run-{id}-p8081")]).then_some(())
    });
    let (st, _) = d.request(
        "DELETE",
        &format!("/v1/sessions/{id}"),
        Some(&d.token),
        None,
    );
    assert_eq!(st, 204);
    until_status(&mut sse, "stopped");
    assert_eq!(d.stop(), Some(0), "daemon log:\n{}", d.log_text());
}

#[test]
fn rbac_yaml_grants_exactly_what_the_daemon_uses() {
    let _dog = watchdog(600);
    let dir = temp_dir("rbac");
    let log = dir.join("requests.jsonl");
    let log_arg = log.display().to_string();
    let sim = SimProc::start(&[
        "--request-log",
        &log_arg,
        "--namespace",
        WORKSPACE_NS,
        "--namespace",
        GATEWAY_NS,
    ]);
    sim.apply(&kubegate::server::demo::demo_deployment(
        "kubegate",
        "kubegate.dev/workspace-uid",
    ));
    wait_for(
        "deployment demo/hello ready",
        Duration::from_secs(60),
        || {
            let v = sim.kubectl_json(&["-n", WORKSPACE_NS, "get", "deployment", "hello"]);
            (v["status"]["readyReplicas"] == 1).then_some(())
        },
    );

    let (token, digest) = common::daemon::random_token();
    let mut d = DaemonProc::start_config(
        &daemon_config(
            &sim.kubeconfig,
            &digest,
            "ingress_base_domain = \"dev.example.com\"",
        ),
        sim.kubeconfig.clone(),
        &token,
        "info",
    );
    drive(&sim, &d);
    restart_with_a_live_session(&mut d);
    assert_eq!(d.stop(), Some(0), "daemon log:\n{}", d.log_text());
    drive_gateway(&sim, &token, &digest);

    let text = std::fs::read_to_string(&log).expect("read the request log");
    let mut used: BTreeSet<Check> = BTreeSet::new();
    let mut lines = 0;
    for l in text.lines() {
        let v: Value = serde_json::from_str(l).unwrap_or_else(|e| panic!("{e}: {l}"));
        if !v["userAgent"]
            .as_str()
            .unwrap_or("")
            .starts_with("kubegate/")
        {
            continue;
        }
        lines += 1;
        used.extend(checks_of(&v));
    }
    assert!(lines > 0, "no request from the daemon in the log");
    let rbac = std::fs::read_to_string(RBAC).expect("read scripts/rbac.yaml");
    let (grants, _) = parse_rbac(&rbac);

    let missing: Vec<&Check> = used.iter().filter(|c| !grants.grants(c)).collect();
    let used_triples: BTreeSet<Triple> = used
        .iter()
        .map(|(_, g, r, v)| (g.clone(), r.clone(), v.clone()))
        .collect();
    let allowed: BTreeSet<Triple> = ALLOWANCES
        .iter()
        .map(|(g, r, v, _)| (g.to_string(), r.to_string(), v.to_string()))
        .collect();
    let unused: Vec<&Triple> = grants
        .all
        .iter()
        .filter(|t| !used_triples.contains(*t) && !allowed.contains(*t))
        .collect();
    println!("the daemon's authorization checks ({lines} requests):");
    for c in &used {
        println!("  ns={:<8} group={:<18} {:<14} {}", c.0, c.1, c.2, c.3);
    }
    assert!(
        missing.is_empty(),
        "used but not granted in that namespace by scripts/rbac.yaml: {missing:#?}"
    );
    assert!(
        unused.is_empty(),
        "granted by scripts/rbac.yaml but never used (remove, or add to ALLOWANCES with a reason): {unused:#?}"
    );
}
