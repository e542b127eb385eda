//! The daemon's port proxy under attack (issue 13, item 4), through a real
//! `kubegate serve` on its embedded sim, over raw sockets (no client
//! normalises a path): dot-segments raw or percent-encoded, encoded
//! slashes, control characters and non-canonical ports are refused with
//! 400 `INVALID_PROXY_PATH` on the HTTP and the WebSocket route, and never
//! reach the cluster (the sim's request log shows every URL the daemon
//! sent it); canonical paths still work and reach the API server in
//! canonical form; headers the API server or the kubelet interpret never
//! leave the daemon (an app that reports what it received says so).

use crate::common::daemon::{raw_exchange, DaemonProc, SseClient};
use crate::common::wait_for;
use serde_json::{json, Value};
use std::path::PathBuf;
use std::time::Duration;

/// An app on `$POD_IP:8081` answering every request with what it
/// received: `{"path", "headers": [[name, value]…]}` as JSON; a WebSocket
/// upgrade is accepted and gets the same report as one text message, then
/// a Close.
const REPORT_PY: &str = r#"
import base64, hashlib, http.server, json, os, struct
ip = os.environ["POD_IP"]
def report(h):
    return json.dumps({"path": h.path, "headers": [[k.lower(), v] for k, v in h.headers.items()]}).encode()
class App(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    def answer(self):
        if self.headers.get("Upgrade", "").lower() == "websocket":
            key = self.headers["Sec-WebSocket-Key"]
            acc = base64.b64encode(hashlib.sha1((key + "258EAFA5-E914-47DA-95CA-C5AB0DC85B11").encode()).digest()).decode()
            self.send_response(101)
            self.send_header("Upgrade", "websocket")
            self.send_header("Connection", "Upgrade")
            self.send_header("Sec-WebSocket-Accept", acc)
            self.end_headers()
            data = report(self)
            n = len(data)
            head = bytes([0x81, n]) if n < 126 else bytes([0x81, 126]) + struct.pack(">H", n)
            self.wfile.write(head + data + bytes([0x88, 2, 3, 232]))
            self.wfile.flush()
            self.rfile.read(2)
            self.close_connection = True
            return
        n = int(self.headers.get("Content-Length") or 0)
        if n:
            self.rfile.read(n)
        body = report(self)
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)
    do_GET = do_POST = do_PUT = do_DELETE = answer
    def log_message(self, *a):
        pass
http.server.ThreadingHTTPServer((ip, 8081), App).serve_forever()
"#;

/// Headers a client must not get past the daemon: the API server's
/// impersonation and front-proxy headers, the agent's token header,
/// proxy credentials, forwarding claims; and one that must pass.
const HOSTILE_HEADERS: &[(&str, &str)] = &[
    ("Impersonate-User", "system:admin"),
    ("Impersonate-Group", "system:masters"),
    ("Impersonate-Uid", "0"),
    ("Impersonate-Extra-Scopes", "all"),
    ("X-Remote-User", "admin"),
    ("X-Remote-Group", "system:masters"),
    ("X-Remote-Extra-Scopes", "all"),
    ("X-Kubegate-Agent-Token", "stolen"),
    ("Proxy-Authorization", "Basic eDp5"),
    ("Proxy-Whatever", "x"),
    ("X-Forwarded-For", "10.9.9.9"),
    ("X-Forwarded-Host", "kubernetes.default"),
    ("Forwarded", "for=10.9.9.9"),
    ("X-Real-Ip", "10.9.9.9"),
    ("X-App-Header", "kept"),
];

/// Header names (lower case) and prefixes the app must never see.
const STRIPPED: &[&str] = &[
    "impersonate-",
    "x-remote-",
    "x-kubegate-agent-token",
    "proxy-",
    "x-forwarded-",
    "forwarded",
    "x-real-ip",
    "authorization",
];

struct Fixture {
    d: DaemonProc,
    id: String,
    pod: String,
    _sse: SseClient,
}

/// A daemon whose embedded sim writes its request log, with one session
/// running REPORT_PY on its declared port 8081, answering.
fn fixture(edit: impl FnOnce(String) -> String) -> Fixture {
    let d = DaemonProc::start_with(
        |c| {
            let with_log = c.replace(
                "[cluster.sim]\n",
                "[cluster.sim]\nrequest_log = \"sim-requests.jsonl\"\n",
            );
            assert_ne!(with_log, c, "the example's [cluster.sim] table moved");
            edit(with_log)
        },
        "info",
    );
    let body = json!({
        "apps": [{"name": "web", "entry": "app.py", "command": ["python3", "app.py"],
                  "ports": [{"port": 8081}], "runner": false}],
        "bundle": {"files": [{"path": "app.py", "content": REPORT_PY}]}
    });
    let (id, mut sse) = d.create_session(&body);
    let seen = sse.until(|e| {
        e.event == "status" && matches!(e.data["status"].as_str(), Some("running" | "failed"))
    });
    assert_eq!(
        seen.last().map(|e| e.data["status"].clone()),
        Some(json!("running")),
        "{seen:#?}"
    );
    // The reachability probe (its own `GET /` through the pod proxy) is
    // over once it saw the port reachable: the request log is ours after.
    let reachable = |e: &crate::common::daemon::SseEvent| {
        e.event == "reachability" && e.data["state"] == "reachable"
    };
    if !seen.iter().any(reachable) {
        sse.until(reachable);
    }
    wait_for(
        "the app to answer through the proxy",
        Duration::from_secs(30),
        || {
            let (st, _) = get(&d, &format!("/v1/sessions/{id}/ports/8081/ready"), &[]);
            (st == 200).then_some(())
        },
    );
    let pod = wait_for("the session pod", Duration::from_secs(10), || {
        d.session_pods(&id).into_iter().next()
    });
    Fixture {
        d,
        id,
        pod,
        _sse: sse,
    }
}

impl Fixture {
    fn request_log(&self) -> PathBuf {
        self.d.dir.join("sim-requests.jsonl")
    }

    /// The request-targets the sim received, in order.
    fn upstream_targets(&self) -> Vec<String> {
        std::fs::read_to_string(self.request_log())
            .unwrap_or_default()
            .lines()
            .filter_map(|l| serde_json::from_str::<Value>(l).ok())
            .map(|v| v["target"].as_str().unwrap_or("").to_string())
            .collect()
    }

    /// The request-targets through the pod proxy to the app's port.
    fn proxied(&self) -> Vec<String> {
        self.upstream_targets()
            .into_iter()
            .filter(|t| t.contains(":8081/proxy"))
            .collect()
    }

    fn base(&self) -> String {
        format!("/v1/sessions/{}/ports/8081", self.id)
    }
}

/// GET `target` as written, with the demo token and `extra` headers.
fn get(d: &DaemonProc, target: &str, extra: &[(&str, &str)]) -> (u16, Vec<u8>) {
    send(d, &format!("GET {target} HTTP/1.1"), extra)
}

fn send(d: &DaemonProc, request_line: &str, extra: &[(&str, &str)]) -> (u16, Vec<u8>) {
    let mut head = format!(
        "{request_line}\r\nHost: {}\r\nConnection: close\r\nAuthorization: Bearer {}\r\n",
        d.addr, d.token
    );
    for (k, v) in extra {
        head.push_str(&format!("{k}: {v}\r\n"));
    }
    head.push_str("\r\n");
    raw_exchange(&d.addr, head.as_bytes())
}

const WS_HEADERS: &[(&str, &str)] = &[
    ("Upgrade", "websocket"),
    ("Connection", "Upgrade"),
    ("Sec-WebSocket-Version", "13"),
    ("Sec-WebSocket-Key", "dGhlIHNhbXBsZSBub25jZQ=="),
];

fn error_code(body: &[u8]) -> String {
    serde_json::from_slice::<Value>(body)
        .ok()
        .and_then(|v| v["error"]["code"].as_str().map(str::to_string))
        .unwrap_or_else(|| format!("not an error body: {}", String::from_utf8_lossy(body)))
}

/// Tails after `…/ports/` refused with 400 `INVALID_PROXY_PATH`. Each
/// holds a marker (`atk`) that would show in the upstream URL if it
/// were forwarded.
const ATTACKS: &[&str] = &[
    "8081/atk1/../../../../version",
    "8081/atk2/%2e%2e/%2e%2e/%2e%2e/%2e%2e/version",
    "8081/atk3/%2E%2E/%2E%2E/%2E%2E/%2E%2E/version",
    "8081/atk4/.%2E/.%2e/x",
    "8081/atk5/%2e./x",
    "8081/atk6/./x",
    "8081/atk7/%2e/x",
    "8081/atk8/..",
    "8081/atk9/..%2F..%2F..%2F..%2Fversion",
    "8081/atk10/a%2fb",
    "8081/atk11%2F..%2F..",
    "8081/atk12%00",
    "8081/atk13%0D%0AX-Injected:%20yes",
    "8081/atk14%0a",
    "8081/atk15%7F",
    "8081/atk16%09",
    "8081/atk17%1b",
    "8081/atk18%5C..%5C..%5Cversion",
    "08081/atk19",
    "+8081/atk20",
    "%38081/atk21",
    "8081%20/atk22",
    "8081.0/atk23",
    "0/atk24",
    "65536/atk25",
    "-8081/atk26",
    "0x1F91/atk27",
    "8081 /atk28",
];

fn attacks_are_refused_before_anything_is_sent(f: &Fixture) {
    let before = f.proxied().len();
    for tail in ATTACKS {
        let target = format!("/v1/sessions/{}/ports/{tail}", f.id);
        if tail.contains(' ') {
            // A space ends the request-target: the HTTP parser refuses
            // the line itself.
            let (st, _) = get(&f.d, &target, &[]);
            assert_eq!(st, 400, "{target}");
            continue;
        }
        for ws in [false, true] {
            let extra = if ws { WS_HEADERS } else { &[] };
            let (st, body) = get(&f.d, &target, extra);
            assert_eq!(
                (st, error_code(&body)),
                (400, "INVALID_PROXY_PATH".to_string()),
                "{target} (websocket: {ws})"
            );
        }
    }
    // The session id spelled with an escape is not this route's spelling.
    let (first, rest) = f.id.split_at(1);
    let escaped = format!(
        "/v1/sessions/%{:02X}{rest}/ports/8081/atk29",
        first.as_bytes()[0]
    );
    let (st, body) = get(&f.d, &escaped, &[]);
    assert_eq!(
        (st, error_code(&body).as_str()),
        (400, "INVALID_PROXY_PATH")
    );
    // An absolute-form request-target gets the same checks.
    let (st, body) = send(
        &f.d,
        &format!(
            "GET http://{}{}/atk30/../../../../version HTTP/1.1",
            f.d.addr,
            f.base()
        ),
        &[],
    );
    assert_eq!(
        (st, error_code(&body).as_str()),
        (400, "INVALID_PROXY_PATH")
    );
    // Other methods too.
    let (st, body) = send(
        &f.d,
        &format!("DELETE {}/atk31/%2e%2e/x HTTP/1.1", f.base()),
        &[],
    );
    assert_eq!(
        (st, error_code(&body).as_str()),
        (400, "INVALID_PROXY_PATH")
    );
    // A canonical but undeclared port is still "no such port".
    let (st, body) = get(&f.d, &format!("/v1/sessions/{}/ports/9999/x", f.id), &[]);
    assert_eq!((st, error_code(&body).as_str()), (404, "NOT_FOUND"));

    let after = f.proxied();
    assert_eq!(
        after.len(),
        before,
        "sent upstream: {:#?}",
        &after[before..]
    );
    let leaked: Vec<String> = f
        .upstream_targets()
        .into_iter()
        .filter(|t| t.contains("atk") || t.to_ascii_lowercase().contains("%2e"))
        .collect();
    assert!(
        leaked.is_empty(),
        "attacks reached the cluster: {leaked:#?}"
    );
    // And the session still serves.
    let (st, _) = get(&f.d, &format!("{}/still-here", f.base()), &[]);
    assert_eq!(st, 200);
}

/// (tail after `…/ports/8081`, the tail of the URL the daemon sends after
/// `…/proxy`, the path the app gets through the sim's pod proxy).
const CANONICAL: &[(&str, &str, &str)] = &[
    (
        "/ok1/a/b?x=1&y=%20z",
        "/ok1/a/b?x=1&y=%20z",
        "/ok1/a/b?x=1&y=%20z",
    ),
    ("", "/", "/"),
    ("?ok2=1", "/?ok2=1", "/?ok2=1"),
    ("/ok3/", "/ok3/", "/ok3/"),
    // Unreserved characters decoded, escapes upper-cased, reserved ones
    // kept as they were written; the query's escapes pass as they are.
    (
        "/ok4/%7euser/a%2eb/sp%20ace/a%2bb+c/caf%c3%a9/q%3Fmark?k=%0d%0a&v=a+b",
        "/ok4/~user/a.b/sp%20ace/a%2Bb+c/caf%C3%A9/q%3Fmark?k=%0d%0a&v=a+b",
        "/ok4/~user/a.b/sp%20ace/a+b+c/caf%C3%A9/q%3Fmark?k=%0d%0a&v=a+b",
    ),
    // Dots inside a segment are no dot-segment.
    ("/ok5/...", "/ok5/...", "/ok5/..."),
    (
        "/ok6/.well-known/x..y",
        "/ok6/.well-known/x..y",
        "/ok6/.well-known/x..y",
    ),
];

fn canonical_paths_reach_the_app_in_canonical_form(f: &Fixture) {
    for (tail, upstream, app) in CANONICAL {
        let before = f.proxied().len();
        let (st, body) = get(&f.d, &format!("{}{tail}", f.base()), &[]);
        assert_eq!(st, 200, "{tail}: {}", String::from_utf8_lossy(&body));
        let report: Value = serde_json::from_slice(&body).expect("the app's report");
        assert_eq!(report["path"], *app, "{tail}");
        let sent = f.proxied();
        assert_eq!(
            sent[before..],
            [format!(
                "/api/v1/namespaces/default/pods/{}:8081/proxy{upstream}",
                f.pod
            )],
            "{tail}"
        );
    }
    // Absolute form reaches the same place.
    let (st, body) = send(
        &f.d,
        &format!("GET http://{}{}/ok7?a=b HTTP/1.1", f.d.addr, f.base()),
        &[],
    );
    assert_eq!(st, 200);
    let report: Value = serde_json::from_slice(&body).expect("the app's report");
    assert_eq!(report["path"], "/ok7?a=b");
}

fn assert_stripped(report: &Value, what: &str) {
    let headers = report["headers"].as_array().expect("headers");
    let names: Vec<&str> = headers.iter().filter_map(|h| h[0].as_str()).collect();
    for name in &names {
        assert!(
            !STRIPPED
                .iter()
                .any(|s| name == s || (s.ends_with('-') && name.starts_with(s))),
            "{what}: {name} reached the app: {names:?}"
        );
    }
    assert!(
        headers
            .iter()
            .any(|h| h[0] == "x-app-header" && h[1] == "kept"),
        "{what}: {names:?}"
    );
}

fn interpreted_headers_never_leave_the_daemon(f: &Fixture) {
    let (st, body) = get(&f.d, &format!("{}/hdr", f.base()), HOSTILE_HEADERS);
    assert_eq!(st, 200, "{}", String::from_utf8_lossy(&body));
    assert_stripped(&serde_json::from_slice(&body).expect("report"), "http");
    // The WebSocket route strips the same.
    use tungstenite::Message;
    let auth = format!("Bearer {}", f.d.token);
    let mut headers: Vec<(&str, &str)> = HOSTILE_HEADERS.to_vec();
    headers.push(("Authorization", &auth));
    let (mut ws, _) =
        f.d.ws(&format!("{}/hdr-ws", f.base()), &headers, &[])
            .unwrap_or_else(|(st, b)| panic!("{st} {}", String::from_utf8_lossy(&b)));
    ws.get_ref()
        .set_read_timeout(Some(Duration::from_secs(20)))
        .expect("read timeout");
    let text = loop {
        match ws.read().expect("the report") {
            Message::Text(t) => break t.to_string(),
            Message::Ping(_) | Message::Pong(_) => continue,
            other => panic!("{other:?}"),
        }
    };
    let report: Value = serde_json::from_str(&text).expect("report");
    assert_eq!(report["path"], "/hdr-ws");
    assert_stripped(&report, "websocket");
    let _ = ws.close(None);
}

#[test]
fn the_port_proxy_through_the_api_server_refuses_traversal_and_strips_headers() {
    let f = fixture(|c| c);
    attacks_are_refused_before_anything_is_sent(&f);
    canonical_paths_reach_the_app_in_canonical_form(&f);
    interpreted_headers_never_leave_the_daemon(&f);
}

#[test]
fn the_port_proxy_in_direct_mode_refuses_traversal_and_strips_headers() {
    let f = fixture(|c| c.replace("# pod_access = \"api-proxy\"", "pod_access = \"direct\""));
    for tail in [
        "8081/atk1/../../x",
        "8081/atk2/%2e%2e/x",
        "8081/atk3%0d%0aX:%20y",
    ] {
        let target = format!("/v1/sessions/{}/ports/{tail}", f.id);
        for extra in [&[][..], WS_HEADERS] {
            let (st, body) = get(&f.d, &target, extra);
            assert_eq!(
                (st, error_code(&body).as_str()),
                (400, "INVALID_PROXY_PATH"),
                "{target}"
            );
        }
    }
    // Direct: the daemon's request goes to the app itself.
    let (st, body) = get(&f.d, &format!("{}/d1/%7ex/a%2eb?q=%0d%0a", f.base()), &[]);
    assert_eq!(st, 200);
    let report: Value = serde_json::from_slice(&body).expect("report");
    assert_eq!(report["path"], "/d1/~x/a.b?q=%0d%0a");
    interpreted_headers_never_leave_the_daemon(&f);
}
