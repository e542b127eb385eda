//! The tunnel routes under attack (docs/api.md#tunnels), over raw sockets
//! against a real `kubegate serve` on its embedded sim: another
//! principal's session and another principal's workspace are refused
//! before any cluster call (the sim's request log shows none: no pod
//! port-forward, no Deployment read), exactly as the other session routes
//! refuse them; no token, no upgrade, another subprotocol, another
//! method, a port not written canonically, kubegate's own ports; and,
//! once upgraded, a peer that breaks the protocol (a text message that is
//! not the eof, bytes after its eof, a message over 64 KiB) is closed with
//! its code while the pod side is cut. An honest tunnel still works after.

use crate::common::daemon::{raw_exchange, token_digest, DaemonProc, SseClient};
use crate::common::wait_for;
use serde_json::{json, Value};
use std::net::TcpStream;
use std::time::Duration;
use tungstenite::Message;

const PROTOCOL: &str = "kubegate.tunnel.v1";
const T: Duration = Duration::from_secs(60);

/// An echo on `$POD_IP:7000`: echoes what it reads, half-closes at eof.
const ECHO_PY: &str = r#"
import os, socket, threading
def echo(c):
    try:
        while True:
            d = c.recv(65536)
            if not d:
                break
            c.sendall(d)
        c.shutdown(socket.SHUT_WR)
    except OSError:
        pass
    finally:
        c.close()
s = socket.socket()
s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
s.bind((os.environ["POD_IP"], 7000))
s.listen(64)
while True:
    c, _ = s.accept()
    threading.Thread(target=echo, args=(c,), daemon=True).start()
"#;

struct Fixture {
    d: DaemonProc,
    id: String,
    _sse: SseClient,
}

/// A daemon (`edit` applied to its config) whose sim writes its request
/// log, a second principal `other` holding no workspace, and one session
/// of the demo principal running ECHO_PY.
fn fixture(edit: impl FnOnce(String) -> String) -> Fixture {
    let d = DaemonProc::start_with(
        |c| {
            let with_log = c.replace(
                "[cluster.sim]\n",
                "[cluster.sim]\nrequest_log = \"sim-requests.jsonl\"\n",
            );
            assert_ne!(with_log, c, "the example's [cluster.sim] table moved");
            format!(
                "{}\n[[principal]]\nname = \"other\"\ntoken_sha256 = \"{}\"\nworkspaces = []\nmay_start_sessions = true\n",
                edit(with_log),
                token_digest("other-token")
            )
        },
        "info",
    );
    let body = json!({
        "apps": [{"name": "echo", "entry": "echo.py", "command": ["python3", "echo.py"],
                  "runner": false}],
        "bundle": {"files": [{"path": "echo.py", "content": ECHO_PY}]}
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
    Fixture { d, id, _sse: sse }
}

impl Fixture {
    /// The request-targets the sim received, in order.
    fn upstream(&self) -> Vec<String> {
        std::fs::read_to_string(self.d.dir.join("sim-requests.jsonl"))
            .unwrap_or_default()
            .lines()
            .filter_map(|l| serde_json::from_str::<Value>(l).ok())
            .map(|v| v["target"].as_str().unwrap_or("").to_string())
            .collect()
    }

    /// What a tunnel would ask of the cluster: a pod's port-forward, a
    /// Deployment, its pods or ReplicaSets.
    fn tunnel_calls(&self) -> Vec<String> {
        self.upstream()
            .into_iter()
            .filter(|t| {
                t.contains("/portforward")
                    || t.contains("/deployments")
                    || t.contains("/replicasets")
                    || (t.contains("/namespaces/demo/pods"))
            })
            .collect()
    }
}

/// A raw upgrade request for `target` with `token` (if any) offering
/// `protocol` (if any); the status and the error code.
fn upgrade(
    d: &DaemonProc,
    method: &str,
    target: &str,
    token: Option<&str>,
    protocol: Option<&str>,
) -> (u16, String) {
    let mut head = format!(
        "{method} {target} HTTP/1.1\r\nHost: {}\r\nUpgrade: websocket\r\nConnection: Upgrade, close\r\n\
         Sec-WebSocket-Version: 13\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\n",
        d.addr
    );
    if let Some(t) = token {
        head.push_str(&format!("Authorization: Bearer {t}\r\n"));
    }
    if let Some(p) = protocol {
        head.push_str(&format!("Sec-WebSocket-Protocol: {p}\r\n"));
    }
    head.push_str("\r\n");
    let (st, body) = raw_exchange(&d.addr, head.as_bytes());
    let code = serde_json::from_slice::<Value>(&body)
        .ok()
        .and_then(|v| v["error"]["code"].as_str().map(str::to_string))
        .unwrap_or_default();
    (st, code)
}

#[test]
fn tunnel_requests_are_refused_from_the_head_and_before_any_cluster_call() {
    let _wd = crate::common::bench::watchdog("hostile tunnels: refusals", 200);
    // The default access mode (api-proxy): a tunnel would be a
    // port-forward through the API server, visible in the request log.
    let f = fixture(|c| c);
    let d = &f.d;
    let own = d.token.clone();
    let path = format!("/v1/sessions/{}/tunnels/7000", f.id);
    let before = f.tunnel_calls();

    // Another principal: the session is no one's it knows, as on every
    // session route; the demo workspace is not its.
    assert_eq!(
        upgrade(d, "GET", &path, Some("other-token"), Some(PROTOCOL)),
        (404, "NOT_FOUND".into())
    );
    let (st, _) = d.request(
        "GET",
        &format!("/v1/sessions/{}", f.id),
        Some("other-token"),
        None,
    );
    assert_eq!(st, 404, "the same answer as the session's own route");
    let exec = "/v1/exec/tunnel?project=demo&uid=demo-uid&deployment=hello&port=80";
    assert_eq!(
        upgrade(d, "GET", exec, Some("other-token"), Some(PROTOCOL)),
        (403, "EXEC_TARGET_FORBIDDEN".into())
    );
    // Strangers, wrong shapes.
    assert_eq!(
        upgrade(d, "GET", &path, None, Some(PROTOCOL)),
        (401, "UNAUTHORIZED".into())
    );
    assert_eq!(
        upgrade(d, "GET", &path, Some("nope"), Some(PROTOCOL)),
        (401, "UNAUTHORIZED".into())
    );
    assert_eq!(
        upgrade(d, "GET", exec, None, Some(PROTOCOL)),
        (401, "UNAUTHORIZED".into())
    );
    assert_eq!(
        upgrade(d, "GET", &path, Some(&own), None),
        (400, "BAD_REQUEST".into())
    );
    assert_eq!(
        upgrade(d, "GET", &path, Some(&own), Some("kubegate.exec.v1")),
        (400, "BAD_REQUEST".into())
    );
    assert_eq!(
        upgrade(d, "POST", &path, Some(&own), Some(PROTOCOL)),
        (405, "METHOD_NOT_ALLOWED".into())
    );
    let (st, _) = d.request("GET", &path, Some(&own), None);
    assert_eq!(st, 400, "no upgrade");
    for port in [
        "08080", "%37000", "+7000", "0", "65536", "7000.0", "-1", "0x1b58",
    ] {
        let t = format!("/v1/sessions/{}/tunnels/{port}", f.id);
        assert_eq!(
            upgrade(d, "GET", &t, Some(&own), Some(PROTOCOL)),
            (400, "BAD_REQUEST".into()),
            "{port}"
        );
    }
    let t = format!("/v1/sessions/{}/tunnels/7000/x", f.id);
    assert_eq!(upgrade(d, "GET", &t, Some(&own), Some(PROTOCOL)).0, 404);
    for port in ["8099", "9230"] {
        let t = format!("/v1/sessions/{}/tunnels/{port}", f.id);
        assert_eq!(
            upgrade(d, "GET", &t, Some(&own), Some(PROTOCOL)),
            (403, "PORT_RESERVED".into()),
            "{port}"
        );
    }
    for q in [
        "project=demo&uid=demo-uid&deployment=hello&port=08080",
        "project=demo&uid=demo-uid&deployment=hello",
        "project=demo&uid=demo-uid&deployment=../x&port=80",
        "project=Demo&uid=demo-uid&deployment=hello&port=80",
    ] {
        let t = format!("/v1/exec/tunnel?{q}");
        assert_eq!(
            upgrade(d, "GET", &t, Some(&own), Some(PROTOCOL)),
            (400, "EXEC_INVALID".into()),
            "{q}"
        );
    }
    // None of it reached the cluster.
    assert_eq!(
        f.tunnel_calls(),
        before,
        "a refused tunnel asked the cluster something"
    );
    // An honest tunnel does: one WebSocket GET of the pod's portforward,
    // with the daemon's User-Agent (what tests/rbac.rs maps to verbs).
    let mut ws = wait_for("the echo through the API server", T, || {
        let auth = format!("Bearer {own}");
        let (mut ws, _) = d.ws(&path, &[("Authorization", &auth)], &[PROTOCOL]).ok()?;
        ws.send(Message::binary(b"x".to_vec())).ok()?;
        match ws.read().ok()? {
            Message::Binary(b) if b[..] == b"x"[..] => Some(ws),
            _ => None,
        }
    });
    let _ = ws.close(None);
    let logged: Vec<Value> = std::fs::read_to_string(f.d.dir.join("sim-requests.jsonl"))
        .unwrap_or_default()
        .lines()
        .filter_map(|l| serde_json::from_str::<Value>(l).ok())
        .filter(|v| {
            v["target"]
                .as_str()
                .is_some_and(|t| t.ends_with("/portforward"))
        })
        .collect();
    assert!(!logged.is_empty(), "no port-forward in the request log");
    for v in &logged {
        assert_eq!(v["method"], "GET", "{v}");
        assert!(
            v["userAgent"]
                .as_str()
                .is_some_and(|a| a.starts_with("kubegate/")),
            "{v}"
        );
    }
}

type Ws = tungstenite::WebSocket<TcpStream>;

fn open(d: &DaemonProc, path: &str) -> Ws {
    let auth = format!("Bearer {}", d.token);
    let (ws, _) = d
        .ws(path, &[("Authorization", &auth)], &[PROTOCOL])
        .unwrap_or_else(|(st, b)| panic!("{st} {}", String::from_utf8_lossy(&b)));
    ws
}

/// Reads until the Close; its code and reason.
fn close_of(ws: &mut Ws) -> (u16, String) {
    loop {
        match ws.read() {
            Ok(Message::Close(f)) => {
                // Our reply to the Close goes out with the flush.
                let _ = ws.flush();
                return f.map_or((1005, String::new()), |f| {
                    (f.code.into(), f.reason.to_string())
                });
            }
            Ok(_) => {}
            Err(e) => panic!("no Close: {e}"),
        }
    }
}

#[test]
fn a_peer_that_breaks_the_tunnel_protocol_is_closed_with_its_code() {
    let _wd = crate::common::bench::watchdog("hostile tunnels: protocol", 200);
    let f = fixture(|c| c.replace("# pod_access = \"api-proxy\"", "pod_access = \"direct\""));
    let path = format!("/v1/sessions/{}/tunnels/7000", f.id);
    // Wait for the echo to listen.
    let mut ws = wait_for("the echo", T, || {
        let auth = format!("Bearer {}", f.d.token);
        f.d.ws(&path, &[("Authorization", &auth)], &[PROTOCOL])
            .ok()
            .map(|(ws, _)| ws)
    });
    ws.send(Message::text(r#"{"type":"exec"}"#)).expect("send");
    let (code, reason) = close_of(&mut ws);
    assert_eq!(code, 4400, "{reason}");
    assert!(reason.starts_with("BAD_REQUEST: "), "{reason}");

    let mut ws = open(&f.d, &path);
    ws.send(Message::text(r#"{"type":"eof"}"#)).expect("eof");
    ws.send(Message::binary(b"after".to_vec())).expect("bytes");
    let (code, reason) = close_of(&mut ws);
    assert_eq!(code, 4400, "{reason}");

    let mut ws = open(&f.d, &path);
    ws.send(Message::binary(vec![7u8; 64 * 1024 + 1]))
        .expect("a large message");
    let (code, _) = close_of(&mut ws);
    assert_eq!(code, 1009, "a message over 64 KiB");

    // Honest: still served.
    let mut ws = open(&f.d, &path);
    ws.send(Message::binary(b"hi".to_vec())).expect("send");
    ws.send(Message::text(r#"{"type":"eof"}"#)).expect("eof");
    let mut got = Vec::new();
    let code = loop {
        match ws.read().expect("read") {
            Message::Binary(b) => got.extend_from_slice(&b),
            Message::Close(f) => break f.map(|f| u16::from(f.code)),
            _ => {}
        }
    };
    let _ = ws.flush();
    assert_eq!((got.as_slice(), code), (&b"hi"[..], Some(1000)));
    wait_for("the protocol breaches counted", T, || {
        let (_, m) = f.d.request("GET", "/metrics", Some(&f.d.token), None);
        String::from_utf8_lossy(&m)
            .contains("kubegate_tunnels_total{kind=\"session\",end=\"protocol\"} 2")
            .then_some(())
    });
}
