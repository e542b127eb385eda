//! `pods/portforward` on the sim against the real kubectl (SPDY tunnelled
//! in WebSocket, and plain SPDY with `KUBECTL_PORT_FORWARD_WEBSOCKETS=false`),
//! plain and TLS with a token; hostile raw SPDY clients; the v4 WebSocket
//! with a raw client (docs/sim.md#port-forward).

mod common;

use common::bench::watchdog;
use common::{wait_for, SimProc};
use serde_json::{json, Value};
use std::io::{BufRead, BufReader, Read, Write};
use std::net::{Shutdown, TcpStream};
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

/// A pod program: a TCP echo server on 7000 (echoes until the client's
/// EOF, then closes) and an HTTP server on 8080, on the pod's own IP.
const SERVER: &str = r#"
import os, socket, threading, http.server
ip = os.environ['POD_IP']
def echo(c):
    try:
        while True:
            b = c.recv(65536)
            if not b:
                break
            c.sendall(b)
    finally:
        c.close()
def serve_echo():
    s = socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    s.bind((ip, 7000)); s.listen(128)
    while True:
        c, _ = s.accept()
        threading.Thread(target=echo, args=(c,), daemon=True).start()
class H(http.server.BaseHTTPRequestHandler):
    protocol_version = 'HTTP/1.1'
    def do_GET(self):
        body = ('hello from %s\n' % self.path).encode()
        self.send_response(200)
        self.send_header('Content-Length', str(len(body)))
        self.end_headers(); self.wfile.write(body)
    def log_message(self, *a): pass
threading.Thread(target=serve_echo, daemon=True).start()
http.server.ThreadingHTTPServer((ip, 8080), H).serve_forever()
"#;

fn container() -> Value {
    json!({
        "name": "main",
        "image": "python",
        "command": ["python3", "-c", SERVER],
        "env": [{"name": "POD_IP", "valueFrom": {"fieldRef": {"fieldPath": "status.podIP"}}}],
        "ports": [
            {"name": "echo", "containerPort": 7000},
            {"name": "http", "containerPort": 8080},
            {"name": "dns", "containerPort": 5353, "protocol": "UDP"}
        ]
    })
}

fn pod(name: &str) -> Value {
    json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": name, "labels": {"app": name}},
        "spec": {"containers": [container()]}
    })
}

/// Waits until the pod is Running and its servers accept connections
/// (checked through the API server's pod proxy).
fn wait_serving(sim: &SimProc, name: &str) {
    wait_for("the pod to serve", Duration::from_secs(30), || {
        let out = sim.kubectl_run(
            &[
                "get",
                "--raw",
                &format!("/api/v1/namespaces/default/pods/{name}:8080/proxy/ready"),
            ],
            None,
            Duration::from_secs(10),
        );
        (out.code == Some(0)).then_some(())
    });
}

/// A running `kubectl port-forward`: its local ports in order, its stderr.
struct Forward {
    child: Child,
    ports: Vec<u16>,
    stderr: mpsc::Receiver<String>,
    stderr_text: String,
}

impl Forward {
    fn start(sim: &SimProc, websockets: bool, args: &[&str]) -> Forward {
        let mut c = sim.kubectl();
        c.arg("port-forward").args(args);
        if !websockets {
            c.env("KUBECTL_PORT_FORWARD_WEBSOCKETS", "false");
        }
        Forward::spawn(c, args.len() - 1)
    }

    fn spawn(mut c: Command, n: usize) -> Forward {
        c.stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        let mut child = c.spawn().expect("spawn kubectl port-forward");
        let (tx, rx) = mpsc::channel();
        let stdout = child.stdout.take().expect("stdout");
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines().map_while(Result::ok) {
                if tx.send(line).is_err() {
                    break;
                }
            }
        });
        let (etx, erx) = mpsc::channel();
        let stderr = child.stderr.take().expect("stderr");
        std::thread::spawn(move || {
            for line in BufReader::new(stderr).lines().map_while(Result::ok) {
                if etx.send(line).is_err() {
                    break;
                }
            }
        });
        let mut f = Forward {
            child,
            ports: Vec::new(),
            stderr: erx,
            stderr_text: String::new(),
        };
        let deadline = Instant::now() + Duration::from_secs(30);
        while f.ports.len() < n {
            let left = deadline.saturating_duration_since(Instant::now());
            match rx.recv_timeout(left) {
                Ok(line) => {
                    // `Forwarding from 127.0.0.1:PORT -> REMOTE`
                    if let Some(rest) = line.strip_prefix("Forwarding from 127.0.0.1:") {
                        let port = rest.split(' ').next().and_then(|p| p.parse().ok());
                        f.ports.push(port.expect("a local port"));
                    }
                }
                Err(_) => {
                    f.drain_stderr();
                    panic!("kubectl port-forward printed no ports: {}", f.stderr_text);
                }
            }
        }
        // Drain the rest of stdout (`Handling connection for …`).
        std::thread::spawn(move || while rx.recv().is_ok() {});
        f
    }

    fn drain_stderr(&mut self) {
        while let Ok(l) = self.stderr.try_recv() {
            self.stderr_text.push_str(&l);
            self.stderr_text.push('\n');
        }
    }

    /// Waits for kubectl to exit; its code and stderr.
    fn wait_exit(&mut self, within: Duration) -> (Option<i32>, String) {
        let code = wait_for("kubectl port-forward to exit", within, || {
            self.child.try_wait().ok().flatten()
        });
        std::thread::sleep(Duration::from_millis(50));
        self.drain_stderr();
        (code.code(), self.stderr_text.clone())
    }
}

impl Drop for Forward {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn connect(port: u16) -> TcpStream {
    let s = TcpStream::connect(("127.0.0.1", port)).expect("connect to the local port");
    s.set_read_timeout(Some(Duration::from_secs(30))).unwrap();
    s.set_write_timeout(Some(Duration::from_secs(30))).unwrap();
    s
}

/// Deterministic bytes for connection `seed`.
fn pattern(seed: u32, len: usize) -> Vec<u8> {
    let mut x = seed.wrapping_mul(2_654_435_761).wrapping_add(1);
    (0..len)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 17;
            x ^= x << 5;
            x as u8
        })
        .collect()
}

/// Sends `len` bytes through the echo server (writing on a thread while
/// reading here), half-closes, and checks every byte came back, then EOF.
fn echo_exact(port: u16, seed: u32, len: usize) {
    let mut s = connect(port);
    let data = pattern(seed, len);
    let mut w = s.try_clone().unwrap();
    let sent = data.clone();
    let writer = std::thread::spawn(move || {
        w.write_all(&sent).unwrap();
        w.shutdown(Shutdown::Write).unwrap();
    });
    let mut got = Vec::with_capacity(len);
    s.read_to_end(&mut got).expect("read the echo");
    writer.join().unwrap();
    assert_eq!(got.len(), len, "connection {seed}: length");
    assert!(got == data, "connection {seed}: bytes differ");
}

fn http_get(port: u16, path: &str) -> String {
    let mut s = connect(port);
    write!(
        s,
        "GET {path} HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n"
    )
    .unwrap();
    let mut out = String::new();
    s.read_to_string(&mut out).unwrap();
    out
}

/// A pod, a Deployment and a Service over it (a named targetPort, a
/// service port number that differs from the container's).
fn workloads(sim: &SimProc) {
    sim.apply(&pod("echo"));
    sim.apply(&json!({
        "apiVersion": "apps/v1", "kind": "Deployment",
        "metadata": {"name": "web"},
        "spec": {
            "replicas": 1,
            "selector": {"matchLabels": {"app": "web"}},
            "template": {"metadata": {"labels": {"app": "web"}}, "spec": {"containers": [container()]}}
        }
    }));
    sim.apply(&json!({
        "apiVersion": "v1", "kind": "Service",
        "metadata": {"name": "web"},
        "spec": {
            "selector": {"app": "web"},
            "ports": [
                {"name": "tcp-echo", "port": 70, "targetPort": "echo"},
                {"name": "web", "port": 80, "targetPort": 8080},
                {"name": "dns", "port": 53, "protocol": "UDP", "targetPort": 5353}
            ]
        }
    }));
    wait_serving(sim, "echo");
    let web = wait_for("the Deployment's pod", Duration::from_secs(30), || {
        let v = sim.kubectl_json(&["get", "pods", "-l", "app=web"]);
        v["items"]
            .as_array()
            .and_then(|a| a.first())
            .filter(|p| p["status"]["phase"] == "Running")
            .and_then(|p| p["metadata"]["name"].as_str().map(str::to_string))
    });
    wait_serving(sim, &web);
}

/// Everything kubectl must do through one transport.
fn scenario(sim: &SimProc, websockets: bool, big: bool) {
    // A pod, two ports: 20 concurrent connections of 1 MiB, HTTP.
    let f = Forward::start(sim, websockets, &["pod/echo", ":7000", ":8080"]);
    let echo = f.ports[0];
    let threads: Vec<_> = (0..20)
        .map(|i| std::thread::spawn(move || echo_exact(echo, i, 1 << 20)))
        .collect();
    for t in threads {
        t.join().expect("an echo connection");
    }
    assert!(http_get(f.ports[1], "/a").contains("hello from /a"));
    if big {
        let t = Instant::now();
        echo_exact(echo, 99, 50 << 20);
        eprintln!(
            "50 MiB each way (websockets={websockets}): {:?}",
            t.elapsed()
        );
    }
    drop(f);
    // A Deployment by named port, and a Service by its port name (targetPort
    // by name) and by number.
    let f = Forward::start(sim, websockets, &["deploy/web", ":echo"]);
    echo_exact(f.ports[0], 1, 1 << 20);
    drop(f);
    let f = Forward::start(sim, websockets, &["svc/web", ":tcp-echo", ":80"]);
    echo_exact(f.ports[0], 2, 1 << 20);
    assert!(http_get(f.ports[1], "/svc").contains("hello from /svc"));
    drop(f);
}

#[test]
fn kubectl_port_forward_over_websocket_and_spdy_plain() {
    let _w = watchdog("port-forward plain", 240);
    let sim = SimProc::start(&[]);
    workloads(&sim);
    scenario(&sim, true, true);
    scenario(&sim, false, true);
}

#[test]
fn kubectl_port_forward_over_tls_with_token() {
    let _w = watchdog("port-forward tls", 240);
    let sim = SimProc::start(&["--tls"]);
    workloads(&sim);
    scenario(&sim, true, false);
    scenario(&sim, false, false);
}

/// A pod deleted under a forward ends it the way kubectl reports a lost
/// pod: GOAWAY, then the transport closes; kubectl exits 1.
#[test]
fn a_deleted_pod_ends_the_forward_with_lost_connection() {
    let _w = watchdog("port-forward pod deletion", 120);
    let sim = SimProc::start(&[]);
    for (name, websockets) in [("gone-ws", true), ("gone-spdy", false)] {
        sim.apply(&pod(name));
        wait_serving(&sim, name);
        let mut f = Forward::start(&sim, websockets, &[&format!("pod/{name}"), ":7000"]);
        echo_exact(f.ports[0], 5, 1000);
        // A connection still open when the pod goes.
        let mut open = connect(f.ports[0]);
        open.write_all(b"ping").unwrap();
        let mut four = [0u8; 4];
        open.read_exact(&mut four).unwrap();
        sim.kubectl_ok(&["delete", "pod", name, "--wait=false"]);
        let (code, stderr) = f.wait_exit(Duration::from_secs(20));
        assert_eq!(code, Some(1), "websockets={websockets}: {stderr}");
        assert!(
            stderr.contains("error: lost connection to pod"),
            "websockets={websockets}: {stderr}"
        );
        let mut rest = Vec::new();
        let _ = open.read_to_end(&mut rest);
    }
}

/// kubectl refuses a port declared only as UDP (its own check, from the
/// pod's and the Service's ports as the sim serves them).
#[test]
fn udp_only_ports_are_refused_by_kubectl() {
    let _w = watchdog("port-forward udp", 120);
    let sim = SimProc::start(&[]);
    workloads(&sim);
    for (target, port) in [("pod/echo", "5353"), ("svc/web", "53"), ("svc/web", "dns")] {
        let out = sim.kubectl_run(
            &["port-forward", target, port],
            None,
            Duration::from_secs(30),
        );
        assert_eq!(out.code, Some(1), "{target} {port}: {}", out.stderr_str());
        assert!(
            out.stderr_str()
                .contains(&format!("UDP protocol is not supported for {port}")),
            "{target} {port}: {}",
            out.stderr_str()
        );
    }
}

/// Nothing listens on the pod's port: the kubelet's text on the error
/// stream, kubectl prints it, closes the local connection and (upstream
/// behaviour since 1.28) the whole session.
#[test]
fn a_refused_pod_port_is_reported_and_ends_the_session() {
    let _w = watchdog("port-forward refused", 120);
    let sim = SimProc::start(&[]);
    sim.apply(&pod("echo"));
    wait_serving(&sim, "echo");
    for websockets in [true, false] {
        let mut f = Forward::start(&sim, websockets, &["pod/echo", ":7001"]);
        let mut s = connect(f.ports[0]);
        let mut got = Vec::new();
        let _ = s.read_to_end(&mut got);
        assert!(got.is_empty());
        let (code, stderr) = f.wait_exit(Duration::from_secs(20));
        assert_eq!(code, Some(1), "{stderr}");
        assert!(
            stderr.contains("an error occurred forwarding")
                && stderr.contains("-> 7001: error forwarding port 7001 to pod ")
                && stderr.contains("connect: connection refused"),
            "websockets={websockets}: {stderr}"
        );
        assert!(stderr.contains("error: lost connection to pod"), "{stderr}");
    }
}
