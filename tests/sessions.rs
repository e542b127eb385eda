//! Watch sessions through a real `kubegate serve` on its embedded sim:
//! create, follow the event stream to `running`, list and get, another
//! principal's 404, delete leaving no pod; a failing start reports its
//! stage and leaves no pod; bad requests get their codes before anything
//! is created. Waits are conditions with deadlines.

mod common;

use common::daemon::{DaemonProc, SseClient, SseEvent};
use common::wait_for;
use serde_json::{json, Value};
use std::time::Duration;

/// A second principal, `other`, with token `other-token`.
fn with_other_principal(c: String) -> String {
    let hex = common::daemon::token_digest("other-token");
    format!(
        "{c}\n[[principal]]\nname = \"other\"\ntoken_sha256 = \"{hex}\"\nworkspaces = []\nmay_start_sessions = true\n"
    )
}

fn start_body(image: Option<&str>) -> Value {
    let mut b = json!({
        "apps": [{"name": "web", "entry": "main.sh", "command": ["sh", "main.sh"], "io": "streams"}],
        "bundle": {"files": [
            {"path": "main.sh", "content": "echo started; while :; do sleep 1; done"},
            {"path": "data/readme.txt", "content": "aGVsbG8=", "encoding": "base64"}
        ]}
    });
    if let Some(i) = image {
        b["image"] = json!(i);
    }
    b
}

/// Reads events until `running` (panics on `failed`); the events read.
fn until_running(sse: &mut SseClient) -> Vec<SseEvent> {
    let seen = sse.until(|e| matches!(status_of(e), Some("running" | "failed")));
    assert_eq!(
        seen.last().and_then(status_of),
        Some("running"),
        "{seen:#?}"
    );
    seen
}

fn status_of(e: &SseEvent) -> Option<&str> {
    (e.event == "status")
        .then(|| e.data["status"].as_str())
        .flatten()
}

#[test]
fn a_session_starts_runs_and_stops_leaving_no_pod() {
    let d = DaemonProc::start_with(with_other_principal, "info");
    let (st, v) = d.json("POST", "/v1/sessions", Some(&start_body(None)));
    assert_eq!(st, 201, "{v}");
    let id = v["sessionId"].as_str().expect("sessionId").to_string();
    assert_eq!(v["streamUrl"], format!("/v1/sessions/{id}/events"));
    assert_eq!(v["ioUrl"], format!("/v1/sessions/{id}/io"));
    assert!(v["createdAt"].as_str().unwrap().ends_with('Z'));

    let mut sse = SseClient::open(&d, &format!("/v1/sessions/{id}/events"), None);
    let seen = sse.until(|e| matches!(status_of(e), Some("running" | "failed")));
    let last = seen.last().expect("events");
    assert_eq!(status_of(last), Some("running"), "{seen:#?}");
    assert_eq!(status_of(&seen[0]), Some("starting"));
    assert!(seen.iter().any(|e| e.event == "progress"), "{seen:#?}");
    let ids: Vec<u64> = seen.iter().filter_map(|e| e.id).collect();
    assert!(ids.windows(2).all(|w| w[1] == w[0] + 1), "{ids:?}");

    // Get and list show it; another principal does not see it.
    let (st, g) = d.json("GET", &format!("/v1/sessions/{id}"), None);
    assert_eq!(st, 200);
    assert_eq!(g["status"], "running");
    assert_eq!(g["apps"][0]["name"], "web");
    let (_, l) = d.json("GET", "/v1/sessions", None);
    assert_eq!(l["sessions"][0]["sessionId"], id.as_str());
    let (st, _) = d.request(
        "GET",
        &format!("/v1/sessions/{id}"),
        Some("other-token"),
        None,
    );
    assert_eq!(st, 404);
    let (st, _) = d.request(
        "DELETE",
        &format!("/v1/sessions/{id}"),
        Some("other-token"),
        None,
    );
    assert_eq!(st, 404);
    let (_, l) = d.request("GET", "/v1/sessions", Some("other-token"), None);
    let l: Value = serde_json::from_slice(&l).unwrap();
    assert_eq!(l["sessions"], json!([]));
    assert_eq!(d.session_pods(&id).len(), 1);

    // Replay from Last-Event-ID: exactly what came after it.
    let mut again = SseClient::open(&d, &format!("/v1/sessions/{id}/events"), Some(ids[1]));
    let first = again.next().expect("an event");
    assert_eq!(first.id, Some(ids[1] + 1));

    // Stop: 204, then `stopped` ends the stream, and the pod is gone.
    let (st, _) = d.request(
        "DELETE",
        &format!("/v1/sessions/{id}"),
        Some(&d.token),
        None,
    );
    assert_eq!(st, 204);
    let rest = sse.until(|e| status_of(e) == Some("stopped"));
    assert_eq!(
        rest.last().and_then(status_of),
        Some("stopped"),
        "{rest:#?}"
    );
    assert!(
        sse.next().is_none(),
        "the stream ends after a terminal status"
    );
    wait_for(
        "the session pod to be gone",
        Duration::from_secs(30),
        || d.session_pods(&id).is_empty().then_some(()),
    );
    let (st, _) = d.request(
        "DELETE",
        &format!("/v1/sessions/{id}"),
        Some(&d.token),
        None,
    );
    assert_eq!(st, 204, "deleting a stopped session is still 204");
    let (st, _) = d.request("DELETE", "/v1/sessions/abcdefghijkl", Some(&d.token), None);
    assert_eq!(st, 404);
    // The record is on disk, private.
    let rec = d
        .dir
        .join("state")
        .join("sessions")
        .join(format!("{id}.json"));
    use std::os::unix::fs::PermissionsExt;
    assert_eq!(
        std::fs::metadata(&rec).unwrap().permissions().mode() & 0o777,
        0o600
    );
}

#[test]
fn a_failing_start_reports_its_stage_and_leaves_no_pod() {
    let d = DaemonProc::start_with(
        |c| {
            c.replace(
                "[cluster.sim]\n",
                "[cluster.sim]\nfail_images = [\"broken/*\"]\n",
            )
            .replace("[sessions]\n", "[sessions]\nstart_deadline_secs = 3\n")
        },
        "info",
    );
    let (st, v) = d.json(
        "POST",
        "/v1/sessions",
        Some(&start_body(Some("broken/app:1"))),
    );
    assert_eq!(st, 201, "{v}");
    let id = v["sessionId"].as_str().unwrap().to_string();
    let mut sse = SseClient::open(&d, &format!("/v1/sessions/{id}/events"), None);
    let seen = sse.until(|e| matches!(status_of(e), Some("running" | "failed" | "stopped")));
    assert!(
        seen.iter().any(|e| e.data["message"] == "Pulling image"),
        "the provisioning messages: {seen:#?}"
    );
    let last = seen.last().expect("events");
    assert_eq!(status_of(last), Some("failed"), "{seen:#?}");
    assert_eq!(last.data["error"]["stage"], "schedule", "{last:?}");
    assert!(
        !last.data["error"]["message"]
            .as_str()
            .unwrap_or("")
            .is_empty(),
        "{last:?}"
    );
    wait_for("no session pod", Duration::from_secs(30), || {
        d.session_pods(&id).is_empty().then_some(())
    });
    let (_, g) = d.json("GET", &format!("/v1/sessions/{id}"), None);
    assert_eq!(g["status"], "failed");
}

/// No session pod exists (nothing was created for a refused start).
fn assert_no_watch_pod(d: &DaemonProc) {
    let pods = d.kubectl_ok(
        &[
            "get",
            "pods",
            "-n",
            "default",
            "-l",
            "kubegate.dev/mode=watch",
            "-o",
            "name",
        ],
        None,
    );
    assert_eq!(pods.trim(), "", "a pod was created");
}

#[test]
fn bad_session_requests_get_their_codes_before_anything_is_created() {
    let d = DaemonProc::start();
    let app = |name: &str| json!({"name": name, "entry": "main.sh"});
    let bundle = json!({"files": [{"path": "main.sh", "content": "true"}]});
    let cases = vec![
        (
            json!({"apps": [app("Web")], "bundle": bundle}),
            "INVALID_APP_NAME",
        ),
        (
            json!({"apps": [app("web"), app("web")], "bundle": bundle}),
            "DUPLICATE_APP_NAME",
        ),
        (
            json!({"apps": [app("workspace")], "bundle": bundle}),
            "RESERVED_APP_NAME",
        ),
        (
            json!({"apps": [
                {"name": "a", "entry": "main.sh", "ports": [{"port": 8080}]},
                {"name": "b", "entry": "main.sh", "ports": [{"port": 8080}]}
            ], "bundle": bundle}),
            "PORT_CONFLICT",
        ),
        (
            json!({"apps": [app("web")], "bundle": {"files": [{"path": "../x", "content": ""}]}}),
            "INVALID_PATH",
        ),
        (
            json!({"apps": [app("web")], "bundle": {"files": [{"path": "/etc/x", "content": ""}]}}),
            "INVALID_PATH",
        ),
        (
            json!({"apps": [app("web")], "bundle": {"files": [{"path": "main.sh", "content": "%%", "encoding": "base64"}]}}),
            "INVALID_BUNDLE",
        ),
        (json!({"apps": "web", "bundle": bundle}), "BAD_REQUEST"),
    ];
    for (body, code) in cases {
        let (st, v) = d.json("POST", "/v1/sessions", Some(&body));
        assert_eq!(
            (st, v["error"]["code"].as_str()),
            (400, Some(code)),
            "{body} -> {v}"
        );
    }
    let (_, l) = d.json("GET", "/v1/sessions", None);
    assert_eq!(l["sessions"], json!([]));
    assert_no_watch_pod(&d);
}

#[test]
fn oversize_bundles_are_refused_before_a_pod_exists() {
    let d = DaemonProc::start_with(
        |c| {
            let limited = c
                .replace("# max_bundle_bytes = 67108864", "max_bundle_bytes = 4096")
                .replace("# max_file_bytes = 8388608", "max_file_bytes = 2048")
                .replace("# max_files = 10000", "max_files = 3");
            assert!(limited.contains("\nmax_bundle_bytes = 4096"));
            assert!(limited.contains("\nmax_file_bytes = 2048"));
            assert!(limited.contains("\nmax_files = 3"));
            limited
        },
        "info",
    );
    let file = |path: &str, n: usize| json!({"path": path, "content": "x".repeat(n)});
    let start = |files: Vec<Value>| json!({"apps": [{"name": "web", "entry": "f0"}], "bundle": {"files": files}});
    use base64::Engine as _;
    let b64 = base64::engine::general_purpose::STANDARD.encode(vec![b'y'; 2049]);
    let cases = vec![
        (
            "one file over max_file_bytes",
            start(vec![file("f0", 2049)]),
        ),
        (
            "a base64 file decoding to over max_file_bytes",
            start(vec![
                json!({"path": "f0", "content": b64, "encoding": "base64"}),
            ]),
        ),
        (
            "files over max_bundle_bytes together",
            start(vec![file("f0", 1500), file("f1", 1500), file("f2", 1500)]),
        ),
        (
            "more files than max_files",
            start(vec![
                file("f0", 1),
                file("f1", 1),
                file("f2", 1),
                file("f3", 1),
            ]),
        ),
    ];
    for (what, body) in &cases {
        let (st, v) = d.json("POST", "/v1/sessions", Some(body));
        assert_eq!(
            (st, v["error"]["code"].as_str()),
            (400, Some("INVALID_BUNDLE")),
            "{what}: {v}"
        );
        assert!(
            v["error"]["message"]
                .as_str()
                .is_some_and(|m| !m.is_empty()),
            "{what}: {v}"
        );
    }
    // A body far over what any bundle within the limits can take is
    // refused from its head, before it is read.
    let (st, v) = d.json(
        "POST",
        "/v1/sessions",
        Some(&start(vec![file("f0", 3 << 20)])),
    );
    assert_eq!(
        (st, v["error"]["code"].as_str()),
        (413, Some("BODY_TOO_LARGE")),
        "{v}"
    );
    let (_, l) = d.json("GET", "/v1/sessions", None);
    assert_eq!(l["sessions"], json!([]));
    assert_no_watch_pod(&d);
    // The limits are inclusive: exactly at every one of them is accepted.
    let at_limits = start(vec![file("f0", 2048), file("f1", 2048), file("f2", 0)]);
    let (st, v) = d.json("POST", "/v1/sessions", Some(&at_limits));
    assert_eq!(st, 201, "{v}");
    let id = v["sessionId"].as_str().expect("sessionId").to_string();
    let (st, _) = d.json("DELETE", &format!("/v1/sessions/{id}"), None);
    assert!(st == 202 || st == 200 || st == 204, "{st}");
}

/// An app serving HTTP on `$POD_IP:8080` and `:8081` and, on its inspect
/// address, a debug stream that declares port 8081 only.
const APP_PY: &str = r#"
import base64, hashlib, http.server, json, os, struct, threading, time
ip = os.environ["POD_IP"]
def ws_frame(op, data):
    n = len(data)
    head = bytes([0x80 | op, n]) if n < 126 else bytes([0x80 | op, 126]) + struct.pack(">H", n)
    return head + data
class App(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    def websocket(self):
        # A minimal WebSocket echo server: "echo:" + each text message.
        key = self.headers["Sec-WebSocket-Key"]
        acc = base64.b64encode(hashlib.sha1((key + "258EAFA5-E914-47DA-95CA-C5AB0DC85B11").encode()).digest()).decode()
        self.send_response(101)
        self.send_header("Upgrade", "websocket")
        self.send_header("Connection", "Upgrade")
        self.send_header("Sec-WebSocket-Accept", acc)
        offer = self.headers.get("Sec-WebSocket-Protocol")
        if offer:
            self.send_header("Sec-WebSocket-Protocol", offer.split(",")[-1].strip())
        self.end_headers()
        self.wfile.flush()
        while True:
            h = self.rfile.read(2)
            if len(h) < 2:
                return
            op, n = h[0] & 0x0F, h[1] & 0x7F
            if n == 126:
                n = struct.unpack(">H", self.rfile.read(2))[0]
            elif n == 127:
                n = struct.unpack(">Q", self.rfile.read(8))[0]
            mask = self.rfile.read(4) if h[1] & 0x80 else b"\0\0\0\0"
            data = bytes(b ^ mask[i % 4] for i, b in enumerate(self.rfile.read(n)))
            if op == 8:
                self.wfile.write(ws_frame(8, data[:2]))
                self.wfile.flush()
                return
            if op == 9:
                self.wfile.write(ws_frame(10, data))
            elif op == 1:
                self.wfile.write(ws_frame(1, b"echo:" + data + b" path=" + self.path.encode()))
            self.wfile.flush()
    def do_GET(self):
        if self.headers.get("Upgrade", "").lower() == "websocket":
            return self.websocket()
        if self.path == "/stream":
            # The first event at once, the rest much later: a proxy that
            # buffers answers shows nothing until then.
            self.send_response(200)
            self.send_header("Content-Type", "text/event-stream")
            self.send_header("Connection", "close")
            self.end_headers()
            self.wfile.write(b"data: first\n\n")
            self.wfile.flush()
            time.sleep(60)
            self.wfile.write(b"data: second\n\n")
            return
        body = ("hello from %d %s" % (self.server.server_port, self.path)).encode()
        self.send_response(200)
        self.send_header("Content-Length", str(len(body)))
        self.send_header("X-App", "yes")
        self.end_headers()
        self.wfile.write(body)
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

#[test]
fn ports_are_probed_proxied_and_re_routed_by_the_debug_stream() {
    let d = DaemonProc::start();
    let body = json!({
        // The app serves its own debug stream: no runner (which would own
        // KUBEGATE_INSPECT_ADDR).
        "apps": [{"name": "web", "entry": "app.py", "command": ["python3", "app.py"],
                  "io": "streams", "ports": [{"port": 8080}], "runner": false}],
        "bundle": {"files": [{"path": "app.py", "content": APP_PY}]}
    });
    let (id, mut sse) = d.create_session(&body);
    until_running(&mut sse);
    // The declared port: probed reachable, then re-routed by the app's own
    // debug stream to 8081 (8080 removed).
    let mut reachable = false;
    let mut rerouted = false;
    let more = sse.until(|e| {
        reachable |= e.event == "reachability" && e.data["state"] == "reachable";
        rerouted |= e.event == "endpoints"
            && e.data["added"][0]["port"] == 8081
            && e.data["removed"][0]["port"] == 8080;
        reachable && rerouted
    });
    assert!(reachable && rerouted, "{more:#?}");
    assert!(more
        .iter()
        .any(|e| e.event == "debug" && e.data["frame"]["event"] == "Kernel.PortsResolved"));
    // The port proxy reaches the app on its current port only.
    let (st, b) = d.request(
        "GET",
        &format!("/v1/sessions/{id}/ports/8081/x?y=1"),
        Some(&d.token),
        None,
    );
    assert_eq!(
        (st, String::from_utf8_lossy(&b).as_ref()),
        (200, "hello from 8081 /x?y=1")
    );
    let (st, _) = d.request(
        "GET",
        &format!("/v1/sessions/{id}/ports/8080/"),
        Some(&d.token),
        None,
    );
    assert_eq!(st, 404, "8080 is no longer declared");
    // WebSocket upgrades go through too (via the API server's pod proxy
    // here), with the subprotocol the app chose; answers stream.
    websocket_echoes_through_the_port_proxy(&d, &id);
    answers_stream_through_the_port_proxy(&d, &id);
    let (st, _) = d.request(
        "GET",
        &format!("/v1/sessions/{id}/ports/8081/"),
        Some("nope"),
        None,
    );
    assert_eq!(st, 401);
    let (st, _) = d.request(
        "DELETE",
        &format!("/v1/sessions/{id}"),
        Some(&d.token),
        None,
    );
    assert_eq!(st, 204);
    wait_for(
        "the session pod to be gone",
        Duration::from_secs(30),
        || d.session_pods(&id).is_empty().then_some(()),
    );
}

#[test]
fn app_output_reaches_the_io_socket_with_replay_and_stdin_reaches_the_app() {
    use kubegate::session::io::wire::{decode_frame, SUBPROTOCOL};
    use tungstenite::Message;
    let d = DaemonProc::start_with(with_other_principal, "info");
    let body = json!({
        // Directly, not under the app runner: this is about the io plumbing
        // (a runner restart while a line is in flight would lose it).
        "apps": [{"name": "echo", "entry": "echo.sh", "command": ["sh", "echo.sh"], "io": "streams",
                  "runner": false}],
        "bundle": {"files": [{"path": "echo.sh",
            "content": "echo ready; while read l; do echo \"out:$l\"; echo \"err:$l\" >&2; done"}]}
    });
    let (id, mut sse) = d.create_session(&body);
    until_running(&mut sse);

    let open = |q: &str, token: &str| {
        let a = format!("Bearer {token}");
        d.ws(
            &format!("/v1/sessions/{id}/io?{q}"),
            &[("Authorization", &a)],
            &[SUBPROTOCOL],
        )
        .map(|(ws, _)| ws)
        .unwrap_or_else(|(st, b)| panic!("{st} {}", String::from_utf8_lossy(&b)))
    };
    // (seq, stream, text) frames until `want` is seen on `stream`.
    let read_until =
        |ws: &mut tungstenite::WebSocket<std::net::TcpStream>, stream: u8, want: &str| {
            let mut got = Vec::new();
            let mut text = String::new();
            while !text.contains(want) {
                match ws.read().expect("read") {
                    Message::Binary(b) => {
                        let (seq, s, p) = decode_frame(&b).expect("frame");
                        if s == stream {
                            text.push_str(&String::from_utf8_lossy(p));
                        }
                        got.push((seq, s, String::from_utf8_lossy(p).into_owned()));
                    }
                    Message::Text(_) | Message::Ping(_) | Message::Pong(_) => {}
                    m => panic!("unexpected {m:?} after {got:?}"),
                }
            }
            got
        };
    let mut ws = open("app=echo", &d.token);
    let first = read_until(&mut ws, 1, "ready\n");
    assert_eq!(first[0].0, 1, "seq starts at 1: {first:?}");
    ws.send(Message::Binary(b"hi\n".to_vec().into())).unwrap();
    let out = read_until(&mut ws, 1, "out:hi\n");
    let err = read_until(&mut ws, 2, "err:hi\n");
    let last_seen = out.iter().chain(err.iter()).map(|f| f.0).max().unwrap();
    drop(ws);
    // More output while nobody watches, then a replay from lastSeq: exactly
    // what was missed.
    let mut ws2 = open(&format!("app=echo&lastSeq={last_seen}"), &d.token);
    ws2.send(Message::Binary(b"again\n".to_vec().into()))
        .unwrap();
    let more = read_until(&mut ws2, 1, "out:again\n");
    assert_eq!(more[0].0, last_seen + 1, "{more:?}");
    // Unknown app, unknown session, another principal's session: 4004.
    for (q, token, path_id) in [
        ("app=nope", d.token.as_str(), id.as_str()),
        ("app=echo", "other-token", id.as_str()),
        ("app=echo", d.token.as_str(), "abcdefghijkl"),
    ] {
        let a = format!("Bearer {token}");
        let (mut ws, _) = d
            .ws(
                &format!("/v1/sessions/{path_id}/io?{q}"),
                &[("Authorization", &a)],
                &[SUBPROTOCOL],
            )
            .unwrap_or_else(|(st, b)| panic!("{st} {}", String::from_utf8_lossy(&b)));
        let code = loop {
            match ws.read() {
                Ok(Message::Close(Some(f))) => break u16::from(f.code),
                Ok(_) => {}
                Err(e) => panic!("{q} {token}: no close frame: {e}"),
            }
        };
        assert_eq!(code, 4004, "{q} {token} {path_id}");
    }
    let (st, _) = d.request(
        "DELETE",
        &format!("/v1/sessions/{id}"),
        Some(&d.token),
        None,
    );
    assert_eq!(st, 204);
    // The session's end closes viewers with 1000.
    let code = loop {
        match ws2.read() {
            Ok(Message::Close(Some(f))) => break u16::from(f.code),
            Ok(_) => {}
            Err(e) => panic!("no close frame: {e}"),
        }
    };
    assert_eq!(code, 1000);
}

#[test]
fn workspace_edits_reload_set_apps_suspend_and_resume_keep_every_file() {
    let d = DaemonProc::start();
    let body = json!({
        "apps": [{"name": "web", "entry": "main.sh", "command": ["sh", "main.sh"], "io": "streams"}],
        "bundle": {"files": [
            {"path": "main.sh", "content": "cat lib/msg.txt; while :; do sleep 1; done"},
            {"path": "lib/msg.txt", "content": "v1\n"}
        ]}
    });
    let (st, v) = d.json("POST", "/v1/sessions", Some(&body));
    assert_eq!(st, 201, "{v}");
    let id = v["sessionId"].as_str().unwrap().to_string();
    let base = format!("/v1/sessions/{id}");
    let mut sse = SseClient::open(&d, &format!("{base}/events"), None);
    until_running(&mut sse);

    // Edits land atomically through the agent; paths are checked here too.
    let (st, v) = d.json(
        "POST",
        &format!("{base}/workspace"),
        Some(
            &json!({"write": [{"path": "lib/msg.txt", "content": "v2\n"},
                               {"path": "new/file.bin", "content": "AAEC", "encoding": "base64"}]}),
        ),
    );
    assert_eq!((st, v["written"].as_u64()), (200, Some(2)), "{v}");
    let (st, v) = d.json(
        "GET",
        &format!("{base}/workspace/file?path=lib/msg.txt"),
        None,
    );
    assert_eq!((st, v["content"].as_str()), (200, Some("v2\n")), "{v}");
    for bad in ["../escape", "/etc/passwd", "a/../../b"] {
        let (st, v) = d.json(
            "POST",
            &format!("{base}/workspace"),
            Some(&json!({"write": [{"path": bad, "content": "x"}]})),
        );
        assert_eq!(
            (st, v["error"]["code"].as_str()),
            (400, Some("INVALID_PATH")),
            "{bad}: {v}"
        );
    }
    let (st, v) = d.json("GET", &format!("{base}/workspace"), None);
    assert_eq!(st, 200);
    let paths: Vec<&str> = v["files"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|f| f["path"].as_str())
        .collect();
    assert_eq!(paths, vec!["lib/msg.txt", "main.sh", "new/file.bin"], "{v}");
    // Reload touches the entry; unknown apps are 404.
    let (st, _) = d.request(
        "POST",
        &format!("{base}/reload?app=web"),
        Some(&d.token),
        Some(b""),
    );
    assert_eq!(st, 202);
    let (st, _) = d.request(
        "POST",
        &format!("{base}/reload?app=nope"),
        Some(&d.token),
        Some(b""),
    );
    assert_eq!(st, 404);

    // setApps: a new pod with the new app set, every file kept.
    let apps = json!({"apps": [
        {"name": "web", "entry": "main.sh", "command": ["sh", "main.sh"], "io": "streams"},
        {"name": "second", "entry": "main.sh", "command": ["sh", "main.sh"], "io": "tty"}
    ]});
    let (st, v) = d.json("PUT", &format!("{base}/apps"), Some(&apps));
    assert_eq!(st, 202, "{v}");
    until_running(&mut sse);
    let (_, g) = d.json("GET", &base, None);
    assert_eq!(g["apps"].as_array().map(Vec::len), Some(2), "{g}");
    let (st, v) = d.json(
        "GET",
        &format!("{base}/workspace/file?path=new/file.bin&encoding=base64"),
        None,
    );
    assert_eq!((st, v["content"].as_str()), (200, Some("AAEC")), "{v}");

    // Suspend deletes the pod; resume restores the files.
    let (st, v) = d.json("POST", &format!("{base}/suspend"), Some(&json!({})));
    assert_eq!(st, 202, "{v}");
    let seen = sse.until(|e| status_of(e) == Some("suspended"));
    assert_eq!(seen.last().and_then(status_of), Some("suspended"));
    wait_for("no pod while suspended", Duration::from_secs(30), || {
        d.session_pods(&id).is_empty().then_some(())
    });
    let (st, v) = d.json("GET", &format!("{base}/workspace"), None);
    assert_eq!(
        (st, v["error"]["code"].as_str()),
        (409, Some("NOT_RUNNING")),
        "{v}"
    );
    let (st, v) = d.json("POST", &format!("{base}/suspend"), Some(&json!({})));
    assert_eq!(st, 409, "{v}");
    let (st, v) = d.json("POST", &format!("{base}/resume"), Some(&json!({})));
    assert_eq!(st, 202, "{v}");
    until_running(&mut sse);
    let (st, v) = d.json(
        "GET",
        &format!("{base}/workspace/file?path=lib/msg.txt"),
        None,
    );
    assert_eq!((st, v["content"].as_str()), (200, Some("v2\n")), "{v}");
    let (st, v) = d.json("POST", &format!("{base}/resume"), Some(&json!({})));
    assert_eq!(
        (st, v["error"]["code"].as_str()),
        (409, Some("NOT_SUSPENDED")),
        "{v}"
    );
    let (st, _) = d.request("DELETE", &base, Some(&d.token), None);
    assert_eq!(st, 204);
    wait_for(
        "the session pod to be gone",
        Duration::from_secs(30),
        || d.session_pods(&id).is_empty().then_some(()),
    );
}

#[test]
fn an_ended_app_is_reported_once_and_a_pod_deleted_behind_our_back_fails_the_session() {
    let d = DaemonProc::start();
    let body = json!({
        "apps": [
            {"name": "quick", "entry": "quick.sh", "command": ["sh", "quick.sh"], "io": "streams"},
            {"name": "stay", "entry": "stay.sh", "command": ["sh", "stay.sh"], "io": "streams"}
        ],
        "bundle": {"files": [
            {"path": "quick.sh", "content": "echo bye; exit 3"},
            {"path": "stay.sh", "content": "while :; do sleep 1; done"}
        ]}
    });
    let (id, mut sse) = d.create_session(&body);
    let seen =
        sse.until(|e| e.event == "run" && e.data["app"] == "quick" && e.data["phase"] == "ended");
    let ended = seen.last().expect("events");
    assert_eq!(ended.data["exitCode"], 3, "{ended:?}");
    assert!(
        seen.iter().any(|e| status_of(e) == Some("running")),
        "{seen:#?}"
    );
    // The session stays up; the end is not reported again.
    let (_, g) = d.json("GET", &format!("/v1/sessions/{id}"), None);
    assert_eq!(g["status"], "running");

    // Someone deletes the pod: the session fails with the pod's fate.
    let pods = d.session_pods(&id);
    assert_eq!(pods.len(), 1);
    d.kubectl_ok(
        &["delete", "pod", "-n", "default", &pods[0], "--wait=false"],
        None,
    );
    let rest = sse.until(|e| matches!(status_of(e), Some("failed" | "stopped")));
    let last = rest.last().expect("events");
    assert_eq!(status_of(last), Some("failed"), "{rest:#?}");
    assert!(
        !last.data["error"]["message"]
            .as_str()
            .unwrap_or("")
            .is_empty(),
        "{last:?}"
    );
    let again = rest
        .iter()
        .filter(|e| e.event == "run" && e.data["app"] == "quick" && e.data["phase"] == "ended")
        .count();
    assert_eq!(again, 0, "the ended app was reported twice: {rest:#?}");
}

/// Through the port proxy: a WebSocket to APP_PY's echo on 8081, offering
/// two subprotocols (the app picks the last).
fn websocket_echoes_through_the_port_proxy(d: &DaemonProc, id: &str) {
    use tungstenite::Message;
    let auth = format!("Bearer {}", d.token);
    let (mut ws, resp) = d
        .ws(
            &format!("/v1/sessions/{id}/ports/8081/ws?q=1"),
            &[("Authorization", &auth)],
            &["other.v0", "chat.v1"],
        )
        .unwrap_or_else(|(st, b)| panic!("{st} {}", String::from_utf8_lossy(&b)));
    assert_eq!(
        resp.headers()
            .get("sec-websocket-protocol")
            .and_then(|v| v.to_str().ok()),
        Some("chat.v1")
    );
    ws.get_ref()
        .set_read_timeout(Some(Duration::from_secs(20)))
        .expect("read timeout");
    for text in ["hi", "there"] {
        ws.send(Message::Text(text.into())).expect("send");
        let reply = loop {
            match ws.read().expect("the echo") {
                Message::Text(t) => break t.to_string(),
                Message::Ping(_) | Message::Pong(_) => continue,
                other => panic!("{other:?}"),
            }
        };
        assert_eq!(reply, format!("echo:{text} path=/ws?q=1"));
    }
    ws.close(None).expect("close");
    loop {
        match ws.read() {
            Ok(Message::Close(_)) | Err(_) => break,
            Ok(_) => continue,
        }
    }
}

/// Through the port proxy: APP_PY's `/stream` holds its second event for a
/// minute; the first must arrive long before that.
fn answers_stream_through_the_port_proxy(d: &DaemonProc, id: &str) {
    use std::io::{Read, Write};
    let mut c = std::net::TcpStream::connect(&d.addr).expect("connect");
    c.set_read_timeout(Some(Duration::from_secs(20)))
        .expect("read timeout");
    write!(
            c,
            "GET /v1/sessions/{id}/ports/8081/stream HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer {}\r\n\r\n",
            d.token
        )
        .expect("send");
    let mut got = Vec::new();
    let mut buf = [0u8; 4096];
    while !String::from_utf8_lossy(&got).contains("data: first") {
        let n = c
            .read(&mut buf)
            .expect("the first event before the app's answer ends");
        assert!(n > 0, "closed early: {}", String::from_utf8_lossy(&got));
        got.extend_from_slice(&buf[..n]);
    }
    let text = String::from_utf8_lossy(&got).to_lowercase();
    assert!(text.starts_with("http/1.1 200"), "{text}");
    assert!(text.contains("content-type: text/event-stream"), "{text}");
    assert!(!text.contains("second"));
}

#[test]
fn the_port_proxy_streams_and_upgrades_in_direct_access_mode_too() {
    let d = DaemonProc::start_with(
        |c| c.replace("# pod_access = \"api-proxy\"", "pod_access = \"direct\""),
        "info",
    );
    let body = json!({
        // APP_PY serves its own debug stream: not under the app runner.
        "apps": [{"name": "web", "entry": "app.py", "command": ["python3", "app.py"],
                  "ports": [{"port": 8081}], "runner": false}],
        "bundle": {"files": [{"path": "app.py", "content": APP_PY}]}
    });
    let (id, mut sse) = d.create_session(&body);
    until_running(&mut sse);
    sse.until(|e| e.event == "reachability" && e.data["state"] == "reachable");
    websocket_echoes_through_the_port_proxy(&d, &id);
    answers_stream_through_the_port_proxy(&d, &id);
    // `kubegate port-forward` carries WebSockets too (a tunnel carries any TCP).
    let mut pf = std::process::Command::new(common::KUBEGATE)
        .args(["port-forward", &id, ":8081", "--server"])
        .arg(format!("http://{}", d.addr))
        .env("KUBEGATE_TOKEN", &d.token)
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::inherit())
        .spawn()
        .expect("port-forward");
    let mut line = String::new();
    std::io::BufRead::read_line(
        &mut std::io::BufReader::new(pf.stdout.take().expect("stdout")),
        &mut line,
    )
    .expect("the forwarding line");
    let local = line
        .strip_prefix("Forwarding from ")
        .and_then(|r| r.split(' ').next())
        .unwrap_or_else(|| panic!("{line:?}"))
        .to_string();
    let (mut ws, resp) = tungstenite::client::client_with_config(
        format!("ws://{local}/ws?via=pf"),
        std::net::TcpStream::connect(&local).expect("connect to the forwarder"),
        None,
    )
    .unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(resp.status(), 101);
    ws.get_ref()
        .set_read_timeout(Some(Duration::from_secs(20)))
        .expect("read timeout");
    ws.send(tungstenite::Message::Text("pf".into()))
        .expect("send");
    let reply = loop {
        match ws.read().expect("the echo") {
            tungstenite::Message::Text(t) => break t.to_string(),
            _ => continue,
        }
    };
    assert_eq!(reply, "echo:pf path=/ws?via=pf");
    let _ = ws.close(None);
    assert_eq!(common::terminate(&mut pf, Duration::from_secs(10)), Some(0));
}

/// A debug stream on the inspect address that claims `PORTS` (JSON list).
const CLAIM_PY: &str = r#"
import http.server, json, os, time
ports = json.loads(os.environ.get("CLAIM", "[]"))
class Events(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        self.end_headers()
        ev = {"event": "Kernel.PortsResolved", "payload": {"ports": [{"port": p} for p in ports]}}
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

#[test]
fn direct_access_publishes_service_and_ingress_and_rejects_a_port_another_app_owns() {
    let d = DaemonProc::start_with(
        |c| {
            c.replace("# pod_access = \"api-proxy\"", "pod_access = \"direct\"")
                .replace(
                    "# ingress_base_domain = \"dev.example.com\"",
                    "ingress_base_domain = \"dev.example.com\"",
                )
        },
        "info",
    );
    let body = json!({
        "apps": [
            {"name": "a", "entry": "a.sh", "command": ["sh", "a.sh"], "io": "streams",
             "ports": [{"port": 8080}, {"port": 5353, "protocol": "udp"}]},
            {"name": "b", "entry": "claim.py", "command": ["python3", "claim.py"], "io": "streams",
             "runner": false}
        ],
        "env": {"CLAIM": "[8080, 9090]"},
        "bundle": {"files": [
            {"path": "a.sh", "content": "while :; do sleep 1; done"},
            {"path": "claim.py", "content": CLAIM_PY}
        ]}
    });
    let (id, mut sse) = d.create_session(&body);
    let seen = sse.until(|e| {
        e.event == "endpoints" && e.data["app"] == "b" && e.data.get("rejected").is_some()
    });
    let ev = seen.last().expect("events");
    assert!(
        seen.iter().any(|e| status_of(e) == Some("running")),
        "{seen:#?}"
    );
    assert_eq!(ev.data["rejected"][0]["port"], 8080, "{ev:?}");
    assert!(!ev.data["rejected"][0]["reason"]
        .as_str()
        .unwrap_or("")
        .is_empty());
    assert_eq!(ev.data["added"][0]["port"], 9090, "{ev:?}");
    assert_eq!(
        ev.data["added"][0]["host"],
        format!("9090-{id}.dev.example.com"),
        "{ev:?}"
    );
    // The Service and the Ingress, owned by the pod.
    let name = format!("kubegate-run-{id}");
    let pod = d.session_pods(&id).pop().expect("pod");
    let svc: Value = serde_json::from_str(&d.kubectl_ok(
        &["get", "service", "-n", "default", &name, "-o", "json"],
        None,
    ))
    .unwrap();
    let ports: Vec<(i64, String)> = svc["spec"]["ports"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| {
            (
                p["port"].as_i64().unwrap(),
                p["protocol"].as_str().unwrap_or("TCP").to_string(),
            )
        })
        .collect();
    assert!(ports.contains(&(8080, "TCP".into())), "{ports:?}");
    assert!(ports.contains(&(5353, "UDP".into())), "{ports:?}");
    assert!(ports.contains(&(9090, "TCP".into())), "{ports:?}");
    let owner = &svc["metadata"]["ownerReferences"][0];
    assert_eq!(
        (owner["kind"].as_str(), owner["name"].as_str()),
        (Some("Pod"), Some(pod.as_str()))
    );
    assert_eq!(owner["controller"], true);
    let ing: Value = serde_json::from_str(&d.kubectl_ok(
        &["get", "ingress", "-n", "default", &name, "-o", "json"],
        None,
    ))
    .unwrap();
    let hosts: Vec<&str> = ing["spec"]["rules"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|r| r["host"].as_str())
        .collect();
    assert!(
        hosts.contains(&format!("8080-{id}.dev.example.com").as_str()),
        "{hosts:?}"
    );
    assert!(
        hosts.contains(&format!("9090-{id}.dev.example.com").as_str()),
        "{hosts:?}"
    );
    assert_eq!(hosts.len(), 2, "udp ports get no rule: {hosts:?}");
    // Stop leaves no pod, Service or Ingress.
    let (st, _) = d.request(
        "DELETE",
        &format!("/v1/sessions/{id}"),
        Some(&d.token),
        None,
    );
    assert_eq!(st, 204);
    wait_for(
        "pod, Service and Ingress gone",
        Duration::from_secs(30),
        || {
            let left = d.kubectl_ok(
                &[
                    "get",
                    "pods,services,ingresses",
                    "-n",
                    "default",
                    "-l",
                    &format!("kubegate.dev/session-id={id}"),
                    "-o",
                    "name",
                ],
                None,
            );
            let named = d.kubectl_ok(
                &["get", "services,ingresses", "-n", "default", "-o", "name"],
                None,
            );
            (left.trim().is_empty() && !named.contains(&name)).then_some(())
        },
    );
}

#[test]
fn stdin_and_resize_reach_the_right_app_and_reloads_are_rate_limited() {
    use kubegate::session::io::wire::{decode_frame, SUBPROTOCOL};
    use tungstenite::Message;
    let d = DaemonProc::start_with(
        |c| c.replace("[sessions]\n", "[sessions]\nreloads_per_minute = 2\n"),
        "info",
    );
    let body = json!({
        "apps": [
            {"name": "term", "entry": "t.sh", "command": ["sh", "t.sh"], "io": "tty"},
            {"name": "pipe", "entry": "p.sh", "command": ["sh", "p.sh"], "io": "streams"}
        ],
        "bundle": {"files": [
            {"path": "t.sh", "content": "while read l; do echo \"term:$l\"; stty size; done"},
            {"path": "p.sh", "content": "while read l; do echo \"pipe:$l\"; done"}
        ]}
    });
    let (id, mut sse) = d.create_session(&body);
    until_running(&mut sse);
    let auth = format!("Bearer {}", d.token);
    let open = |app: &str| {
        d.ws(
            &format!("/v1/sessions/{id}/io?app={app}"),
            &[("Authorization", &auth)],
            &[SUBPROTOCOL],
        )
        .map(|(ws, _)| {
            // A read that never comes fails the test instead of hanging it.
            ws.get_ref()
                .set_read_timeout(Some(Duration::from_secs(30)))
                .expect("read timeout");
            ws
        })
        .unwrap_or_else(|(st, b)| panic!("{st} {}", String::from_utf8_lossy(&b)))
    };
    let mut term = open("term");
    let mut pipe = open("pipe");
    term.send(Message::Text(
        r#"{"type":"resize","cols":111,"rows":22}"#.into(),
    ))
    .unwrap();
    term.send(Message::Binary(b"one\r".to_vec().into()))
        .unwrap();
    pipe.send(Message::Binary(b"two\n".to_vec().into()))
        .unwrap();
    let read_text = |ws: &mut tungstenite::WebSocket<std::net::TcpStream>, want: &str| {
        let mut text = String::new();
        let mut streams = Vec::new();
        while !text.contains(want) {
            if let Message::Binary(b) = ws.read().expect("read") {
                let (_, s, p) = decode_frame(&b).expect("frame");
                streams.push(s);
                text.push_str(&String::from_utf8_lossy(p));
            }
        }
        (text, streams)
    };
    // The size is applied concurrently with the app's reads: type lines
    // until one shows it.
    let (mut t, mut s) = read_text(&mut term, "term:one");
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    while !t.contains("22 111") {
        assert!(
            std::time::Instant::now() < deadline,
            "the size never showed: {t:?}"
        );
        term.send(Message::Binary(b"again\r".to_vec().into()))
            .unwrap();
        let (more, st) = read_text(&mut term, "term:again");
        t.push_str(&more);
        s.extend(st);
    }
    assert!(
        !t.contains("two"),
        "the other app's stdin reached this one: {t:?}"
    );
    assert!(
        s.iter().all(|s| *s == 0),
        "a tty app's output is stream 0: {s:?}"
    );
    let (p, s) = read_text(&mut pipe, "pipe:two\n");
    assert!(!p.contains("one"), "{p:?}");
    assert!(s.iter().all(|s| *s == 1), "{s:?}");
    // Reloads: two per minute here, then 429.
    for want in [202, 202, 429] {
        let (st, b) = d.request(
            "POST",
            &format!("/v1/sessions/{id}/reload?app=pipe"),
            Some(&d.token),
            Some(b""),
        );
        assert_eq!(st, want, "{}", String::from_utf8_lossy(&b));
        if st == 429 {
            let v: Value = serde_json::from_slice(&b).unwrap();
            assert_eq!(v["error"]["code"], "RELOAD_RATE_LIMITED");
        }
    }
}

/// A daemon stop (SIGTERM) with a live session, against a separate sim
/// (kubeconfig mode, so the pod can outlive the daemon): exit 0, viewers
/// closed with 1001, each app's output ring persisted, the record written,
/// and the session pod still running for the next start to re-adopt.
#[test]
fn a_daemon_stop_persists_output_and_leaves_the_pod_running() {
    use kubegate::session::io::persist::decode_ring;
    use kubegate::session::io::wire::{decode_frame, SUBPROTOCOL};
    use tungstenite::Message;
    let sim = common::SimProc::start(&[]);
    let (token, digest) = common::daemon::random_token();
    let config = format!(
        r#"[server]
listen = "127.0.0.1:0"
state_dir = "./state"

[cluster]
mode = "kubeconfig"
kubeconfig = "{}"

[[principal]]
name = "demo"
token_sha256 = "{digest}"
workspaces = []
may_start_sessions = true
"#,
        sim.kubeconfig.display()
    );
    let mut d = DaemonProc::start_config(&config, sim.kubeconfig.clone(), &token, "info");
    let body = json!({
        "apps": [{"name": "talk", "entry": "t.sh", "command": ["sh", "t.sh"], "io": "streams"}],
        "bundle": {"files": [{"path": "t.sh",
            "content": "for i in 1 2 3; do echo \"line $i\"; done; while :; do sleep 3600; done"}]}
    });
    let (id, mut sse) = d.create_session(&body);
    until_running(&mut sse);
    let auth = format!("Bearer {}", d.token);
    let (mut ws, _) = d
        .ws(
            &format!("/v1/sessions/{id}/io?app=talk"),
            &[("Authorization", &auth)],
            &[SUBPROTOCOL],
        )
        .unwrap_or_else(|(st, b)| panic!("{st} {}", String::from_utf8_lossy(&b)));
    ws.get_ref()
        .set_read_timeout(Some(Duration::from_secs(30)))
        .expect("read timeout");
    let mut seen = String::new();
    let mut last_seq = 0;
    while !seen.contains("line 3") {
        if let Message::Binary(b) = ws.read().expect("output") {
            let (seq, _, p) = decode_frame(&b).expect("frame");
            last_seq = seq;
            seen.push_str(&String::from_utf8_lossy(p));
        }
    }
    let pod = d.session_pods(&id).pop().expect("the session pod");

    assert_eq!(d.stop(), Some(0), "daemon log:\n{}", d.log_text());
    let close = loop {
        match ws.read() {
            Ok(Message::Close(f)) => break f,
            Ok(_) => continue,
            Err(e) => panic!("no close frame: {e}"),
        }
    };
    let close = close.expect("a close frame with a code");
    assert_eq!(u16::from(close.code), 1001, "{close:?}");
    assert!(close.reason.contains("lastSeq"), "{close:?}");

    let state = d.dir.join("state").join("sessions");
    let ring = std::fs::read(state.join(format!("{id}.io")).join("talk.ring")).expect("the ring");
    let img = decode_ring(&ring).expect("a valid ring");
    assert_eq!(img.next_seq, last_seq + 1);
    assert!(
        img.last_output_ns > 0,
        "the time of the last output is kept"
    );
    let text: String = img
        .frames
        .iter()
        .map(|f| String::from_utf8_lossy(&f.2).into_owned())
        .collect();
    assert_eq!(text, "line 1\nline 2\nline 3\n");
    let record: Value = serde_json::from_slice(
        &std::fs::read(state.join(format!("{id}.json"))).expect("the record"),
    )
    .expect("record json");
    assert_eq!(record["status"]["status"], "running", "{record}");
    let p = sim.kubectl_json(&["-n", "default", "get", "pod", &pod]);
    assert_eq!(
        p["status"]["phase"], "Running",
        "the pod outlives the daemon"
    );
}
