//! TCP tunnels through the daemon (docs/api.md#tunnels) and `kubegate
//! port-forward` carrying any TCP, end to end: a real `kubegate serve` on
//! its embedded sim, a session whose app speaks raw TCP (an echo server on
//! an undeclared port) and HTTP with keep-alive, reached through the raw
//! `kubegate.tunnel.v1` WebSocket and through the real binary's
//! port-forward: a client half-close (the client shuts its write side and
//! still reads the whole echo), several requests on one connection, 50
//! concurrent connections byte-exact, a suspend + resume reached again by
//! the same local port, a workspace Deployment's pod; the reserved ports,
//! the per-principal cap and the idle timeout. Hostile input is in
//! tests/hostile/tunnels.rs.
//!
//! Waits are conditions with deadlines; a watchdog ends a hung test.

mod common;

use common::daemon::{DaemonProc, SseClient};
use common::{terminate, wait_for, KUBEGATE};
use serde_json::{json, Value};
use std::io::{BufRead, BufReader, Read, Write};
use std::net::{Shutdown, TcpStream};
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tungstenite::protocol::frame::coding::CloseCode;
use tungstenite::Message;

const T: Duration = Duration::from_secs(60);
const PROTOCOL: &str = "kubegate.tunnel.v1";
const EOF: &str = r#"{"type":"eof"}"#;

/// A raw TCP echo on `$POD_IP:7000` (undeclared: any port may be
/// tunnelled): echoes as it reads, then half-closes at the client's eof.
/// And HTTP/1.1 with keep-alive on the declared 8080.
const APP_PY: &str = r#"
import http.server, os, socket, threading
ip = os.environ["POD_IP"]
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
def echo_server():
    s = socket.socket()
    s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    s.bind((ip, 7000))
    s.listen(256)
    while True:
        c, _ = s.accept()
        threading.Thread(target=echo, args=(c,), daemon=True).start()
threading.Thread(target=echo_server, daemon=True).start()
class App(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    def do_GET(self):
        body = ("hello %s from %s" % (self.path, os.environ.get("HOSTNAME", "?"))).encode()
        self.send_response(200)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)
    def log_message(self, *a):
        pass
http.server.ThreadingHTTPServer((ip, 8080), App).serve_forever()
"#;

fn session_body() -> Value {
    json!({
        "apps": [{"name": "web", "entry": "app.py", "command": ["python3", "app.py"],
                  "ports": [{"port": 8080}], "runner": false}],
        "bundle": {"files": [{"path": "app.py", "content": APP_PY}]}
    })
}

fn until_status(sse: &mut SseClient, want: &str) {
    let seen = sse.until(|e| {
        e.event == "status"
            && matches!(e.data["status"].as_str(), Some(s) if s == want || s == "failed")
    });
    assert_eq!(
        seen.last().map(|e| e.data["status"].clone()),
        Some(json!(want)),
        "{seen:#?}"
    );
}

/// A daemon in access mode `mode` with `server_keys` added, and a
/// running session of APP_PY answering on 8080.
fn start(mode: &str, server_keys: &str) -> (DaemonProc, String, SseClient) {
    let d = DaemonProc::start_with(
        |c| {
            let line = format!("pod_access = \"{mode}\"");
            let moded = c.replace("# pod_access = \"api-proxy\"", &line);
            assert_ne!(moded, c, "the example's pod_access line changed");
            moded.replace("[server]\n", &format!("[server]\n{server_keys}\n"))
        },
        "info",
    );
    let (id, mut sse) = d.create_session(&session_body());
    until_status(&mut sse, "running");
    wait_for("the app to answer through the proxy", T, || {
        let (st, _) = d.request(
            "GET",
            &format!("/v1/sessions/{id}/ports/8080/"),
            Some(&d.token),
            None,
        );
        (st == 200).then_some(())
    });
    (d, id, sse)
}

type Ws = tungstenite::WebSocket<TcpStream>;

fn tunnel(d: &DaemonProc, path: &str) -> Result<Ws, (u16, Vec<u8>)> {
    let auth = format!("Bearer {}", d.token);
    d.ws(path, &[("Authorization", &auth)], &[PROTOCOL])
        .map(|(ws, resp)| {
            let chosen = resp
                .headers()
                .get("sec-websocket-protocol")
                .and_then(|v| v.to_str().ok());
            assert_eq!(chosen, Some(PROTOCOL));
            ws
        })
}

/// Reads until the peer's Close: the bytes, whether its eof came, and the
/// Close frame's code.
fn read_to_close(ws: &mut Ws) -> (Vec<u8>, bool, Option<u16>) {
    let (mut bytes, mut eof) = (Vec::new(), false);
    loop {
        match ws.read() {
            Ok(Message::Binary(b)) => bytes.extend_from_slice(&b),
            Ok(Message::Text(t)) => {
                assert_eq!(t.as_str(), EOF, "the only text message is the eof");
                eof = true;
            }
            Ok(Message::Close(f)) => {
                let _ = ws.flush();
                return (bytes, eof, f.map(|f| u16::from(f.code)));
            }
            Ok(_) => {}
            Err(tungstenite::Error::ConnectionClosed) => return (bytes, eof, None),
            Err(e) => panic!("reading the tunnel: {e} (after {} bytes)", bytes.len()),
        }
    }
}

/// `n` bytes of a pattern that differs per `seed`.
fn pattern(seed: u32, n: usize) -> Vec<u8> {
    let mut x = seed.wrapping_mul(2_654_435_761).wrapping_add(1);
    (0..n)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 17;
            x ^= x << 5;
            x as u8
        })
        .collect()
}

/// `kubegate port-forward ARGS` against `d`: the child, its stdout lines
/// and stderr as they come.
struct Forward {
    child: Child,
    lines: Arc<Mutex<Vec<String>>>,
    err: Arc<Mutex<String>>,
}

impl Forward {
    fn spawn(d: &DaemonProc, args: &[&str]) -> Forward {
        let mut child = Command::new(KUBEGATE)
            .arg("port-forward")
            .args(args)
            .env("KUBEGATE_SERVER", &d.url)
            .env("KUBEGATE_TOKEN", &d.token)
            .env_remove("KUBEGATE_WORKSPACE")
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("spawn kubegate port-forward");
        let lines = Arc::new(Mutex::new(Vec::new()));
        let err = Arc::new(Mutex::new(String::new()));
        let (out, l) = (child.stdout.take().expect("stdout"), lines.clone());
        std::thread::spawn(move || {
            for line in BufReader::new(out).lines().map_while(Result::ok) {
                l.lock().expect("lines").push(line);
            }
        });
        let (mut e, eb) = (child.stderr.take().expect("stderr"), err.clone());
        std::thread::spawn(move || {
            let mut chunk = [0u8; 4096];
            while let Ok(n) = e.read(&mut chunk) {
                if n == 0 {
                    break;
                }
                eb.lock()
                    .expect("stderr")
                    .push_str(&String::from_utf8_lossy(&chunk[..n]));
            }
        });
        Forward { child, lines, err }
    }

    fn lines(&self) -> Vec<String> {
        self.lines.lock().expect("lines").clone()
    }

    fn stderr(&self) -> String {
        self.err.lock().expect("stderr").clone()
    }

    /// The local port of the `Forwarding from 127.0.0.1:L -> remote` line.
    fn local_port(&self, remote: u16) -> u16 {
        let tail = format!(" -> {remote}");
        wait_for("the forwarding line", T, || {
            self.lines().iter().find_map(|l| {
                l.strip_prefix("Forwarding from 127.0.0.1:")
                    .and_then(|r| r.strip_suffix(&tail))
                    .and_then(|p| p.parse().ok())
            })
        })
    }

    fn wait_stderr(&self, what: &str) {
        wait_for(what, T, || self.stderr().contains(what).then_some(()));
    }
}

impl Drop for Forward {
    fn drop(&mut self) {
        let _ = terminate(&mut self.child, Duration::from_secs(10));
    }
}

/// Sends `data` through the local port, shuts the write side, reads the
/// whole echo (what came, if the connection was closed on us: the
/// caller compares).
fn echo_through(port: u16, data: &[u8]) -> Vec<u8> {
    let mut s = TcpStream::connect(("127.0.0.1", port)).expect("connect to the forwarder");
    s.set_read_timeout(Some(T)).expect("timeout");
    let writer = {
        let mut w = s.try_clone().expect("clone");
        let data = data.to_vec();
        std::thread::spawn(move || {
            w.write_all(&data)
                .and_then(|()| w.shutdown(Shutdown::Write))
                .is_ok()
        })
    };
    let mut got = Vec::new();
    let read = s.read_to_end(&mut got);
    let wrote = writer.join().unwrap_or(false);
    if read.is_err() || !wrote {
        got.push(b'!');
    }
    got
}

/// Several HTTP/1.1 requests on one kept-alive connection.
fn keep_alive(port: u16, n: usize) -> Vec<String> {
    let s = TcpStream::connect(("127.0.0.1", port)).expect("connect");
    s.set_read_timeout(Some(T)).expect("timeout");
    let mut r = BufReader::new(s.try_clone().expect("clone"));
    let mut w = s;
    (0..n)
        .map(|i| {
            write!(w, "GET /r{i} HTTP/1.1\r\nHost: x\r\n\r\n").expect("write");
            let mut len = 0usize;
            let mut line = String::new();
            r.read_line(&mut line).expect("status");
            assert!(line.starts_with("HTTP/1.1 200"), "{line:?}");
            loop {
                line.clear();
                r.read_line(&mut line).expect("header");
                if line == "\r\n" {
                    break;
                }
                if let Some(v) = line.to_ascii_lowercase().strip_prefix("content-length:") {
                    len = v.trim().parse().expect("length");
                }
            }
            let mut body = vec![0u8; len];
            r.read_exact(&mut body).expect("body");
            String::from_utf8(body).expect("utf-8")
        })
        .collect()
}

#[test]
fn direct_tunnels_carry_tcp_half_close_keep_alive_fifty_connections_and_follow_the_session() {
    let _wd = common::bench::watchdog("tunnels: direct", 300);
    carry_tcp("direct");
}

/// Through the API server's `pods/portforward` (SPDY over WebSocket): the
/// half-close travels as a FIN on the data stream.
#[test]
fn api_proxy_tunnels_carry_tcp_half_close_keep_alive_fifty_connections_and_follow_the_session() {
    let _wd = common::bench::watchdog("tunnels: api-proxy", 300);
    carry_tcp("api-proxy");
}

/// Nothing listens on 7999: `direct` knows before the upgrade (502);
/// through the API server the kubelet dials after the streams are set up,
/// so the tunnel opens and ends with 4502 and the kubelet's text.
fn refused_port(d: &DaemonProc, id: &str, mode: &str) {
    match tunnel(d, &format!("/v1/sessions/{id}/tunnels/7999")) {
        Err((st, body)) => {
            assert_eq!(mode, "direct", "{st} {}", String::from_utf8_lossy(&body));
            let v: Value = serde_json::from_slice(&body).unwrap_or(Value::Null);
            assert_eq!(
                (st, v["error"]["code"].as_str()),
                (502, Some("PORT_UNREACHABLE"))
            );
        }
        Ok(mut ws) => {
            assert_eq!(mode, "api-proxy");
            let reason = loop {
                match ws.read() {
                    Ok(Message::Close(f)) => {
                        break f.map(|f| (u16::from(f.code), f.reason.to_string()))
                    }
                    Ok(_) => {}
                    Err(e) => panic!("{e}"),
                }
            };
            let (code, reason) = reason.expect("a Close with a code");
            assert_eq!(code, 4502, "{reason}");
            assert!(reason.starts_with("PORT_UNREACHABLE: "), "{reason}");
            assert!(reason.contains("error forwarding port 7999"), "{reason}");
        }
    }
}

/// The audit log and the metrics count the bytes of the first tunnel.
fn audited_and_counted(d: &DaemonProc, id: &str) {
    let audit =
        std::fs::read_to_string(d.dir.join("state").join("audit.jsonl")).unwrap_or_default();
    let line: Value = audit
        .lines()
        .filter_map(|l| serde_json::from_str::<Value>(l).ok())
        .find(|v| v["kind"] == "tunnel" && v["bytesIn"] == 200_000)
        .unwrap_or_else(|| panic!("no audit line of the first tunnel: {audit}"));
    assert_eq!(line["session"], id);
    assert_eq!(
        (line["port"].as_u64(), line["bytesOut"].as_u64()),
        (Some(7000), Some(200_000))
    );
    assert_eq!(line["end"], "closed");
    let (st, m) = d.request("GET", "/metrics", Some(&d.token), None);
    assert_eq!(st, 200);
    let m = String::from_utf8_lossy(&m);
    let bytes_in = m
        .lines()
        .find_map(|l| l.strip_prefix("kubegate_tunnel_bytes_total{direction=\"in\"} "))
        .and_then(|v| v.trim().parse::<u64>().ok())
        .unwrap_or(0);
    assert!(bytes_in >= 200_000 + (1 << 20), "{m}");
    assert!(
        m.contains("kubegate_tunnels_total{kind=\"session\",end=\"closed\"}"),
        "{m}"
    );
}

fn carry_tcp(mode: &str) {
    let (d, id, mut sse) = start(mode, "");

    refused_port(&d, &id, mode);

    // The raw route: bytes, the client's eof, the whole echo, the pod's
    // eof, then Close 1000.
    let mut ws = tunnel(&d, &format!("/v1/sessions/{id}/tunnels/7000")).expect("tunnel");
    let data = pattern(1, 200_000);
    for c in data.chunks(30_000) {
        ws.send(Message::binary(c.to_vec())).expect("send");
    }
    ws.send(Message::text(EOF)).expect("eof");
    let (got, eof, code) = read_to_close(&mut ws);
    assert_eq!(got.len(), data.len());
    assert!(got == data, "the echo is byte-exact");
    assert!(eof, "the pod's half-close came through");
    assert_eq!(code, Some(1000));

    // port-forward: kubectl's lines, a free local port on both loopbacks.
    let pf = Forward::spawn(&d, &[&id, ":7000", ":8080"]);
    let echo_port = pf.local_port(7000);
    let http_port = pf.local_port(8080);
    assert!(
        pf.lines()
            .iter()
            .any(|l| l == &format!("Forwarding from [::1]:{echo_port} -> 7000"))
            || pf.stderr().contains("::1"),
        "{:?} {}",
        pf.lines(),
        pf.stderr()
    );
    // A client half-close, the whole echo read after it.
    let data = pattern(2, 1 << 20);
    assert!(
        echo_through(echo_port, &data) == data,
        "1 MiB echoed byte-exact"
    );
    wait_for("the Handling line", T, || {
        pf.lines()
            .contains(&format!("Handling connection for {echo_port}"))
            .then_some(())
    });
    // HTTP with keep-alive: several requests on one connection.
    let answers = keep_alive(http_port, 5);
    for (i, a) in answers.iter().enumerate() {
        assert!(a.starts_with(&format!("hello /r{i} from ")), "{a}");
    }

    // A figure for the report (debug build, loopback, 2 cores): one small
    // echo per new connection, sequential, through the CLI and the daemon.
    let t0 = std::time::Instant::now();
    for i in 0..20u32 {
        let data = pattern(50 + i, 16);
        assert!(echo_through(echo_port, &data) == data);
    }
    eprintln!(
        "{mode}: a new connection's echo through port-forward: {:?} on average",
        t0.elapsed() / 20
    );

    // 50 concurrent connections, byte-exact.
    let t0 = std::time::Instant::now();
    let workers: Vec<_> = (0..50u32)
        .map(|i| {
            std::thread::spawn(move || {
                let data = pattern(100 + i, 64 * 1024 + i as usize);
                echo_through(echo_port, &data) == data
            })
        })
        .collect();
    let ok = workers
        .into_iter()
        .filter_map(|w| w.join().ok())
        .filter(|same| *same)
        .count();
    assert_eq!(
        ok,
        50,
        "every connection echoed byte-exact: {}",
        pf.stderr()
    );
    eprintln!(
        "{mode}: 50 concurrent connections of 64 KiB each way: {:?}",
        t0.elapsed()
    );

    // A tunnel open across the suspend ends with its pod.
    let mut open = tunnel(&d, &format!("/v1/sessions/{id}/tunnels/7000")).expect("tunnel");
    open.send(Message::binary(b"before".to_vec()))
        .expect("send");
    assert_eq!(
        open.read().expect("the echo").into_data().as_ref(),
        b"before"
    );

    // Suspend: the target is gone, said once, the listener stays.
    let old_pod = d.session_pods(&id);
    let (st, v) = d.json(
        "POST",
        &format!("/v1/sessions/{id}/suspend"),
        Some(&json!({})),
    );
    assert_eq!(st, 202, "{v}");
    until_status(&mut sse, "suspended");
    // (A connection in the moment the old pod is still going may reach
    // it: ask until one is refused.)
    wait_for("a connection refused for want of a pod", T, || {
        let s = TcpStream::connect(("127.0.0.1", echo_port)).expect("the listener stays");
        s.set_read_timeout(Some(T)).expect("timeout");
        let _ = s.shutdown(Shutdown::Write);
        let mut buf = Vec::new();
        let _ = (&s).read_to_end(&mut buf);
        assert!(buf.is_empty(), "nothing was sent, nothing comes back");
        pf.stderr().contains("is not reachable now").then_some(())
    });
    assert!(pf.stderr().contains("NOT_RUNNING"), "{}", pf.stderr());
    // The open tunnel ended with its pod: the pod's eof (ours answers it)
    // then 1000, or 4502 when its connection broke.
    let code = loop {
        match open.read() {
            Ok(Message::Text(_)) => {
                let _ = open.send(Message::text(EOF));
            }
            Ok(Message::Close(f)) => break f.map(|f| u16::from(f.code)),
            Ok(_) => {}
            Err(e) => panic!("the open tunnel: {e}"),
        }
    };
    assert!(matches!(code, Some(1000 | 4502)), "{code:?}");
    // Resume: a new pod, reached by the same local port.
    let (st, v) = d.json(
        "POST",
        &format!("/v1/sessions/{id}/resume"),
        Some(&json!({})),
    );
    assert_eq!(st, 202, "{v}");
    until_status(&mut sse, "running");
    let new_pod = d.session_pods(&id);
    assert_ne!(old_pod, new_pod, "resume makes a new pod");
    let data = pattern(3, 10_000);
    wait_for("the new pod through the same local port", T, || {
        (echo_through(echo_port, &data) == data).then_some(())
    });
    pf.wait_stderr("is reachable again");
    let answers = keep_alive(http_port, 2);
    let pod = new_pod.first().expect("the new pod");
    assert!(answers[0].ends_with(pod.as_str()), "{answers:?} {pod}");

    audited_and_counted(&d, &id);
}

#[test]
fn reserved_ports_the_cap_and_the_idle_timeout() {
    let _wd = common::bench::watchdog("tunnels: limits", 200);
    let (d, id, _sse) = start(
        "direct",
        "max_tunnels_per_principal = 2\ntunnel_idle_timeout_secs = 1",
    );
    // kubegate's own ports: the agent's, the app's inspect port.
    for port in [8099, 9230] {
        let (st, body) = tunnel(&d, &format!("/v1/sessions/{id}/tunnels/{port}"))
            .err()
            .unwrap_or_else(|| panic!("port {port} was tunnelled"));
        let v: Value = serde_json::from_slice(&body).unwrap_or(Value::Null);
        assert_eq!(
            (st, v["error"]["code"].as_str()),
            (403, Some("PORT_RESERVED")),
            "{v}"
        );
    }
    // A port nothing listens on: 502 before the upgrade.
    let (st, body) = tunnel(&d, &format!("/v1/sessions/{id}/tunnels/7999")).expect_err("refused");
    let v: Value = serde_json::from_slice(&body).unwrap_or(Value::Null);
    assert_eq!(
        (st, v["error"]["code"].as_str()),
        (502, Some("PORT_UNREACHABLE")),
        "{v}"
    );

    // The cap: two tunnels open, the third refused from the head.
    let mut a = tunnel(&d, &format!("/v1/sessions/{id}/tunnels/7000")).expect("first");
    let b = tunnel(&d, &format!("/v1/sessions/{id}/tunnels/7000")).expect("second");
    let (st, body) = tunnel(&d, &format!("/v1/sessions/{id}/tunnels/7000")).expect_err("third");
    let v: Value = serde_json::from_slice(&body).unwrap_or(Value::Null);
    assert_eq!(
        (st, v["error"]["code"].as_str()),
        (429, Some("TOO_MANY_CONNECTIONS")),
        "{v}"
    );

    // Idle: no byte either way for a second ends both with 1008.
    let started = std::time::Instant::now();
    let (_, _, code) = read_to_close(&mut a);
    assert_eq!(code, Some(u16::from(CloseCode::Policy)));
    assert!(started.elapsed() < Duration::from_secs(10));
    drop(b);
    // Their places are given back.
    let mut c = wait_for("a place under the cap again", T, || {
        tunnel(&d, &format!("/v1/sessions/{id}/tunnels/7000")).ok()
    });
    c.send(Message::binary(b"ping".to_vec())).expect("send");
    c.send(Message::text(EOF)).expect("eof");
    let (got, _, code) = read_to_close(&mut c);
    assert_eq!((got.as_slice(), code), (&b"ping"[..], Some(1000)));
    let (st, m) = d.request("GET", "/metrics", Some(&d.token), None);
    assert_eq!(st, 200);
    let m = String::from_utf8_lossy(&m);
    assert!(
        m.contains("kubegate_tunnels_total{kind=\"session\",end=\"idle\"}"),
        "{m}"
    );
    assert!(
        m.contains("kubegate_refusals_total{reason=\"tunnels\"} "),
        "{m}"
    );

    // A stopping daemon ends its tunnels with 1001.
    let mut e = tunnel(&d, &format!("/v1/sessions/{id}/tunnels/7000")).expect("a tunnel");
    let mut d = d;
    assert_eq!(d.stop(), Some(0));
    let (_, _, code) = read_to_close(&mut e);
    assert_eq!(code, Some(1001));
}

/// A Deployment of the demo workspace whose pod echoes on 7000.
fn echo_deployment() -> Value {
    json!({
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": "echo", "namespace": "demo", "labels": {
            "app.kubernetes.io/managed-by": "kubegate",
            "kubegate.dev/workspace-uid": "demo-uid"}},
        "spec": {
            "replicas": 1,
            "selector": {"matchLabels": {"app": "echo"}},
            "template": {
                "metadata": {"labels": {"app": "echo"}},
                "spec": {"containers": [{
                    "name": "main",
                    "image": "python",
                    "command": ["python3", "-c", APP_PY],
                    "env": [{"name": "POD_IP", "valueFrom": {"fieldRef": {"fieldPath": "status.podIP"}}}]
                }]}
            }
        }
    })
}

#[test]
fn a_workspace_deployment_is_tunnelled_behind_the_exec_checks() {
    let _wd = common::bench::watchdog("tunnels: deployment", 200);
    deployment_tunnels("direct");
}

#[test]
fn a_workspace_deployment_is_tunnelled_through_the_api_server() {
    let _wd = common::bench::watchdog("tunnels: deployment, api-proxy", 200);
    deployment_tunnels("api-proxy");
}

fn deployment_tunnels(mode: &str) {
    let line = format!("pod_access = \"{mode}\"");
    let d = DaemonProc::start_with(|c| c.replace("# pod_access = \"api-proxy\"", &line), "info");
    d.create(&echo_deployment());
    d.wait_deployment_ready("demo", "echo");
    let path = "/v1/exec/tunnel?project=demo&uid=demo-uid&deployment=echo&port=7000";
    // Until the pod's echo listens (through the API server a refused port
    // shows after the upgrade: 4502).
    wait_for("the deployment's echo", T, || {
        let mut ws = tunnel(&d, path).ok()?;
        ws.send(Message::binary(b"dep".to_vec())).ok()?;
        ws.send(Message::text(EOF)).ok()?;
        let (got, eof, code) = read_to_close(&mut ws);
        (got == b"dep" && eof && code == Some(1000)).then_some(())
    });

    // The CLI's form: --workspace P/U DEPLOYMENT [LOCAL:]REMOTE.
    let pf = Forward::spawn(&d, &["--workspace", "demo/demo-uid", "echo", ":7000"]);
    let port = pf.local_port(7000);
    let data = pattern(9, 100_000);
    assert!(echo_through(port, &data) == data);

    // The exec checks: an unknown Deployment, a bad port.
    for (q, st, code) in [
        (
            "project=demo&uid=demo-uid&deployment=nope&port=7000",
            404,
            "EXEC_TARGET_NOT_FOUND",
        ),
        (
            "project=demo&uid=demo-uid&deployment=echo&port=0",
            400,
            "EXEC_INVALID",
        ),
        (
            "project=demo&uid=demo-uid&deployment=echo&port=07000",
            400,
            "EXEC_INVALID",
        ),
        (
            "project=demo&uid=demo-uid&deployment=Echo&port=7000",
            400,
            "EXEC_INVALID",
        ),
    ] {
        let (got, body) = tunnel(&d, &format!("/v1/exec/tunnel?{q}")).expect_err("refused");
        let v: Value = serde_json::from_slice(&body).unwrap_or(Value::Null);
        assert_eq!(
            (got, v["error"]["code"].as_str()),
            (st, Some(code)),
            "{q}: {v}"
        );
    }
    // A Deployment of the namespace without the workspace's labels.
    let mut stranger = echo_deployment();
    stranger["metadata"]["name"] = json!("stranger");
    stranger["metadata"]["labels"] = json!({"app.kubernetes.io/managed-by": "someone-else"});
    d.create(&stranger);
    let q = "project=demo&uid=demo-uid&deployment=stranger&port=7000";
    let (got, body) = tunnel(&d, &format!("/v1/exec/tunnel?{q}")).expect_err("not ours");
    let v: Value = serde_json::from_slice(&body).unwrap_or(Value::Null);
    assert_eq!(
        (got, v["error"]["code"].as_str()),
        (403, Some("EXEC_TARGET_FORBIDDEN")),
        "{v}"
    );
    let audit =
        std::fs::read_to_string(d.dir.join("state").join("audit.jsonl")).unwrap_or_default();
    assert!(
        audit
            .lines()
            .filter_map(|l| serde_json::from_str::<Value>(l).ok())
            .any(|v| {
                v["kind"] == "tunnel"
                    && v["workspace"] == "demo/demo-uid"
                    && v["target"]["deployment"] == "echo"
            }),
        "{audit}"
    );
    // Refused after the checks, by what the cluster said: audited and
    // counted (a principal probing other Deployments leaves a trace); the
    // refusals before any cluster call are not audited.
    let refused: Vec<Value> = audit
        .lines()
        .filter_map(|l| serde_json::from_str::<Value>(l).ok())
        .filter(|v| {
            v["kind"] == "tunnel" && v["end"].as_str().is_some_and(|e| e.starts_with("EXEC_"))
        })
        .collect();
    let ends: Vec<&str> = refused.iter().filter_map(|v| v["end"].as_str()).collect();
    assert_eq!(
        ends,
        ["EXEC_TARGET_NOT_FOUND", "EXEC_TARGET_FORBIDDEN"],
        "{audit}"
    );
    assert!(refused.iter().all(|v| v["workspace"] == "demo/demo-uid"
        && v["port"] == 7000
        && v.get("pod").is_none()
        && v["bytesIn"] == 0));
    let (st, m) = d.request("GET", "/metrics", Some(&d.token), None);
    assert_eq!(st, 200);
    let m = String::from_utf8_lossy(&m);
    assert!(
        m.contains("kubegate_tunnels_total{kind=\"deployment\",end=\"EXEC_TARGET_FORBIDDEN\"} 1"),
        "{m}"
    );
}
