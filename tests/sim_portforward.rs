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
/// EOF, then closes), a sink on 7002 (accepts, never reads) and an HTTP
/// server on 8080, on the pod's own IP.
const SERVER: &str = r#"
import os, socket, threading, http.server
ip = os.environ['POD_IP']
def listen(port):
    s = socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    s.bind((ip, port)); s.listen(128)
    return s
# Every port listens before the HTTP one (the tests' readiness check).
echo_sock, sink_sock = listen(7000), listen(7002)
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
    while True:
        c, _ = echo_sock.accept()
        threading.Thread(target=echo, args=(c,), daemon=True).start()
held = []
def serve_sink():
    while True:
        c, _ = sink_sock.accept()
        held.append(c)
class H(http.server.BaseHTTPRequestHandler):
    protocol_version = 'HTTP/1.1'
    def do_GET(self):
        body = ('hello from %s\n' % self.path).encode()
        self.send_response(200)
        self.send_header('Content-Length', str(len(body)))
        self.end_headers(); self.wfile.write(body)
    def log_message(self, *a): pass
threading.Thread(target=serve_echo, daemon=True).start()
threading.Thread(target=serve_sink, daemon=True).start()
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
    let log = common::temp_dir("pf-log").join("requests.jsonl");
    let sim = SimProc::start(&["--request-log", log.to_str().unwrap()]);
    workloads(&sim);
    scenario(&sim, true, true);
    let upgrades = |log: &str| -> Vec<(String, bool)> {
        log.lines()
            .filter_map(|l| serde_json::from_str::<Value>(l).ok())
            .filter(|v| {
                v["path"]
                    .as_str()
                    .is_some_and(|p| p.ends_with("/portforward"))
            })
            .map(|v| {
                assert_eq!(v["status"], 101, "{v}");
                (
                    v["method"].as_str().unwrap().to_string(),
                    v["upgrade"] == true,
                )
            })
            .collect()
    };
    let ws = upgrades(&std::fs::read_to_string(&log).unwrap());
    assert_eq!(ws.len(), 3, "{ws:?}");
    assert!(ws.iter().all(|(m, u)| m == "GET" && *u), "{ws:?}");
    scenario(&sim, false, true);
    // The fallback really was plain SPDY: POSTs, no WebSocket.
    let all = upgrades(&std::fs::read_to_string(&log).unwrap());
    assert_eq!(all.len(), 6, "{all:?}");
    assert!(all[3..].iter().all(|(m, u)| m == "POST" && !*u), "{all:?}");
}

/// A pod that never reads: the client's writes stop (the sim stops
/// reading kubectl, kubectl stops reading the client) instead of piling
/// up in the sim; its memory stays flat. Both transports.
#[test]
fn a_pod_that_does_not_read_stops_the_client_not_the_sims_memory() {
    let _w = watchdog("port-forward backpressure", 120);
    let sim = SimProc::start(&[]);
    sim.apply(&pod("echo"));
    wait_serving(&sim, "echo");
    let pid = sim.child.id();
    for websockets in [true, false] {
        let f = Forward::start(&sim, websockets, &["pod/echo", ":7002", ":7000"]);
        let rss_before = common::bench::status_field(pid, "VmRSS:");
        let mut c = connect(f.ports[0]);
        c.set_write_timeout(Some(Duration::from_millis(1500)))
            .unwrap();
        let chunk = vec![7u8; 64 * 1024];
        let mut written = 0usize;
        while written < 512 << 20 {
            match c.write(&chunk) {
                Ok(n) => written += n,
                Err(_) => break,
            }
        }
        let rss_after = common::bench::status_field(pid, "VmRSS:");
        eprintln!(
            "websockets={websockets}: {} MiB accepted before the writes stopped; sim RSS {} -> {} MiB",
            written >> 20,
            rss_before >> 10,
            rss_after >> 10
        );
        assert!(written < 96 << 20, "{} MiB went in", written >> 20);
        assert!(
            rss_after < rss_before + 48 * 1024,
            "sim RSS {rss_before} -> {rss_after} KiB"
        );
        drop(c);
        drop(f);
    }
}

/// The sim stops with forwards open (both transports): kubectl loses its
/// pod, the sim exits cleanly and in time.
#[test]
fn the_sim_stops_with_forwards_open() {
    let _w = watchdog("port-forward stop", 120);
    let mut sim = SimProc::start(&[]);
    sim.apply(&pod("echo"));
    wait_serving(&sim, "echo");
    let mut forwards = Vec::new();
    let mut open = Vec::new();
    for websockets in [true, false] {
        let f = Forward::start(&sim, websockets, &["pod/echo", ":7000"]);
        let mut c = connect(f.ports[0]);
        c.write_all(b"x").unwrap();
        let mut one = [0u8; 1];
        c.read_exact(&mut one).unwrap();
        open.push(c);
        forwards.push(f);
    }
    let t = Instant::now();
    assert_eq!(sim.stop(), Some(0));
    assert!(t.elapsed() < Duration::from_secs(10), "{:?}", t.elapsed());
    for f in &mut forwards {
        let (code, stderr) = f.wait_exit(Duration::from_secs(20));
        assert_eq!(code, Some(1), "{stderr}");
        assert!(stderr.contains("lost connection to pod"), "{stderr}");
    }
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

// ------------------------------------------------- raw SPDY and v4 clients

use kubegate::kube::spdy::{Decoder, Encoder, Frame, Headers, Limits};
use tungstenite::{Message, WebSocket};

fn addr(sim: &SimProc) -> String {
    sim.url.trim_start_matches("http://").to_string()
}

/// A WebSocket to the forward of `pod`, offering `offer`.
fn ws_open(sim: &SimProc, pod: &str, query: &str, offer: Option<&str>) -> WebSocket<TcpStream> {
    let s = TcpStream::connect(addr(sim)).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    let url = format!(
        "ws://{}/api/v1/namespaces/default/pods/{pod}/portforward{query}",
        addr(sim)
    );
    let (ws, chosen) =
        kubegate::http::ws::client_handshake(s, &url, &[], offer, 16 << 20).expect("upgrade");
    assert_eq!(chosen.as_deref(), offer);
    ws
}

/// One SPDY client connection, in a WebSocket or on a raw upgraded socket.
enum Link {
    Ws(Box<WebSocket<TcpStream>>),
    Raw(TcpStream),
}

struct Spdy {
    link: Link,
    enc: Encoder,
    dec: Decoder,
}

impl Spdy {
    fn tunnel(sim: &SimProc, pod: &str) -> Spdy {
        let ws = ws_open(sim, pod, "", Some("SPDY/3.1+portforward.k8s.io"));
        Spdy::over(Link::Ws(Box::new(ws)))
    }

    fn plain(sim: &SimProc, pod: &str) -> Spdy {
        let mut s = TcpStream::connect(addr(sim)).unwrap();
        s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
        write!(
            s,
            "POST /api/v1/namespaces/default/pods/{pod}/portforward HTTP/1.1\r\nHost: x\r\n\
             Connection: Upgrade\r\nUpgrade: SPDY/3.1\r\nX-Stream-Protocol-Version: portforward.k8s.io\r\n\
             Content-Length: 0\r\n\r\n"
        )
        .unwrap();
        // The 101's head, byte by byte (SPDY may follow it).
        let mut head = Vec::new();
        let mut b = [0u8; 1];
        while !head.ends_with(b"\r\n\r\n") {
            s.read_exact(&mut b).unwrap();
            head.push(b[0]);
        }
        let head = String::from_utf8(head).unwrap();
        assert!(head.starts_with("HTTP/1.1 101 "), "{head}");
        assert!(head.contains("Upgrade: SPDY/3.1\r\n"), "{head}");
        assert!(
            head.contains("X-Stream-Protocol-Version: portforward.k8s.io\r\n"),
            "{head}"
        );
        Spdy::over(Link::Raw(s))
    }

    fn over(link: Link) -> Spdy {
        Spdy {
            link,
            enc: Encoder::new(),
            dec: Decoder::new(Limits::DEFAULT),
        }
    }

    fn send_raw(&mut self, b: &[u8]) {
        match &mut self.link {
            Link::Ws(ws) => ws.send(Message::Binary(b.to_vec().into())).unwrap(),
            Link::Raw(s) => s.write_all(b).unwrap(),
        }
    }

    fn send(&mut self, f: &Frame) {
        let mut b = Vec::new();
        self.enc.encode(f, &mut b).unwrap();
        self.send_raw(&b);
    }

    /// The next frame, `None` once the server closed.
    fn next(&mut self) -> Option<Frame> {
        loop {
            match self.dec.next() {
                Ok(Some(f)) => return Some(f),
                Ok(None) => {}
                Err(e) => panic!("the sim sent a bad frame: {e}"),
            }
            match &mut self.link {
                Link::Ws(ws) => match ws.read() {
                    Ok(Message::Binary(b)) => self.dec.push(&b),
                    Ok(Message::Close(_)) | Err(_) => return None,
                    Ok(_) => {}
                },
                Link::Raw(s) => {
                    let mut buf = [0u8; 65536];
                    match s.read(&mut buf) {
                        Ok(0) | Err(_) => return None,
                        Ok(n) => self.dec.push(&buf[..n]),
                    }
                }
            }
        }
    }

    /// Frames until the server closes.
    fn until_closed(&mut self) -> Vec<Frame> {
        let mut v = Vec::new();
        while let Some(f) = self.next() {
            v.push(f);
        }
        v
    }

    fn syn(&mut self, id: u32, kind: &str, port: &str, request: &str) {
        self.send(&Frame::SynStream {
            stream_id: id,
            assoc_id: 0,
            priority: 0,
            fin: false,
            unidirectional: false,
            headers: Headers::from_pairs(&[
                ("streamType", kind),
                ("port", port),
                ("requestID", request),
            ]),
        });
    }

    fn data(&mut self, id: u32, data: &[u8], fin: bool) {
        self.send(&Frame::Data {
            stream_id: id,
            data: data.to_vec(),
            fin,
        });
    }
}

fn is_reply(f: &Option<Frame>, id: u32) -> bool {
    matches!(f, Some(Frame::SynReply { stream_id, headers, .. }) if *stream_id == id && headers.is_empty())
}

/// A client speaking SPDY as kubectl does, by hand: replies before data,
/// a half-close reaches the pod (the echo's last bytes come back), the
/// pod's end FINs data then error; PINGs are echoed.
fn spdy_exchange(mut c: Spdy) {
    c.syn(1, "error", "7000", "0");
    assert!(is_reply(&c.next(), 1));
    c.data(1, &[], true);
    c.syn(3, "data", "7000", "0");
    assert!(is_reply(&c.next(), 3));
    c.send(&Frame::Ping { id: 1 });
    assert_eq!(c.next(), Some(Frame::Ping { id: 1 }));
    c.data(3, b"hello ", false);
    c.data(3, b"world", true);
    let mut got = Vec::new();
    let mut fins = Vec::new();
    while fins.len() < 2 {
        match c.next() {
            Some(Frame::Data {
                stream_id,
                data,
                fin,
            }) => {
                if stream_id == 3 {
                    got.extend(data);
                } else {
                    assert!(
                        data.is_empty(),
                        "error text: {}",
                        String::from_utf8_lossy(&data)
                    );
                }
                if fin {
                    fins.push(stream_id);
                }
            }
            other => panic!("{other:?}"),
        }
    }
    assert_eq!(got, b"hello world");
    assert_eq!(fins, vec![3, 1]);
}

#[test]
fn raw_spdy_clients_tunnelled_and_plain() {
    let _w = watchdog("raw spdy", 60);
    let sim = SimProc::start(&[]);
    sim.apply(&pod("echo"));
    wait_serving(&sim, "echo");
    spdy_exchange(Spdy::tunnel(&sim, "echo"));
    spdy_exchange(Spdy::plain(&sim, "echo"));
}

/// Hostile SPDY ends its own connection (GOAWAY PROTOCOL_ERROR, then the
/// close), never the sim; a stream id going down is reset and the
/// connection goes on (spdystream's rule).
#[test]
fn hostile_spdy_ends_only_its_connection() {
    let _w = watchdog("hostile spdy", 60);
    let sim = SimProc::start(&[]);
    sim.apply(&pod("echo"));
    wait_serving(&sim, "echo");
    let goaway_then_close = |mut c: Spdy, bytes: &[u8], what: &str| {
        c.send_raw(bytes);
        let frames = c.until_closed();
        assert!(
            frames
                .iter()
                .any(|f| matches!(f, Frame::GoAway { status: 1, .. })),
            "{what}: {frames:?}"
        );
    };
    // A NOOP (type 5): unknown control types are fatal.
    let noop = [0x80, 3, 0, 5, 0, 0, 0, 0];
    goaway_then_close(Spdy::tunnel(&sim, "echo"), &noop, "noop in the tunnel");
    goaway_then_close(Spdy::plain(&sim, "echo"), &noop, "noop on plain spdy");
    // A control frame announcing 16 MiB.
    goaway_then_close(
        Spdy::tunnel(&sim, "echo"),
        &[0x80, 3, 0, 1, 0, 0xFF, 0xFF, 0xFF],
        "huge control frame",
    );
    // A PING of 8 bytes; a GOAWAY of 4.
    goaway_then_close(
        Spdy::plain(&sim, "echo"),
        &[0x80, 3, 0, 6, 0, 0, 0, 8, 0, 0, 0, 1, 0, 0, 0, 0],
        "long ping",
    );
    // A header block that inflates to 1 MiB (a zip bomb in 1 KiB).
    let mut bomb = Vec::new();
    bomb.extend_from_slice(&1u32.to_be_bytes());
    bomb.extend_from_slice(&[0; 6]);
    kubegate::kube::spdy::Deflater::new()
        .deflate(&vec![0u8; 1 << 20], &mut bomb)
        .unwrap();
    let mut frame = vec![0x80, 3, 0, 1];
    frame.extend_from_slice(&(bomb.len() as u32).to_be_bytes());
    frame.extend_from_slice(&bomb);
    goaway_then_close(Spdy::tunnel(&sim, "echo"), &frame, "header bomb");
    // Uppercase header names (written raw: our encoder lowercases).
    let mut c = Spdy::tunnel(&sim, "echo");
    let mut block = Vec::new();
    block.extend_from_slice(&1u32.to_be_bytes());
    for part in ["Port", "80"] {
        block.extend_from_slice(&(part.len() as u32).to_be_bytes());
        block.extend_from_slice(part.as_bytes());
    }
    let mut p = vec![0, 0, 0, 1, 0, 0, 0, 0, 0, 0];
    kubegate::kube::spdy::Deflater::new()
        .deflate(&block, &mut p)
        .unwrap();
    let mut frame = vec![0x80, 3, 0, 1];
    frame.extend_from_slice(&(p.len() as u32).to_be_bytes());
    frame.extend_from_slice(&p);
    c.send_raw(&frame);
    assert!(c
        .until_closed()
        .iter()
        .any(|f| matches!(f, Frame::GoAway { status: 1, .. })));
    // A text message in the tunnel: closed.
    let mut c = Spdy::tunnel(&sim, "echo");
    if let Link::Ws(ws) = &mut c.link {
        ws.send(Message::Text("hello".into())).unwrap();
    }
    assert!(c
        .until_closed()
        .iter()
        .any(|f| matches!(f, Frame::GoAway { .. })));
    // A stream id going down: reset, and the connection serves on.
    let mut c = Spdy::tunnel(&sim, "echo");
    c.syn(5, "error", "7000", "0");
    assert!(is_reply(&c.next(), 5));
    c.syn(3, "data", "7000", "0");
    assert!(matches!(
        c.next(),
        Some(Frame::RstStream {
            stream_id: 3,
            status: 1
        })
    ));
    // Bad headers: reset CANCEL.
    c.syn(7, "data", "0", "1");
    assert!(matches!(
        c.next(),
        Some(Frame::RstStream {
            stream_id: 7,
            status: 5
        })
    ));
    c.syn(9, "stdin", "7000", "1");
    assert!(matches!(
        c.next(),
        Some(Frame::RstStream {
            stream_id: 9,
            status: 5
        })
    ));
    c.send(&Frame::Ping { id: 3 });
    assert_eq!(c.next(), Some(Frame::Ping { id: 3 }));
    // The sim is still up and serving.
    spdy_exchange(Spdy::tunnel(&sim, "echo"));
    sim.kubectl_ok(&["get", "pods"]);
}

/// A stranger (no token) gets 401 on every form, before the pod is even
/// looked up (this one does not exist).
#[test]
fn a_stranger_is_refused_before_the_pod_is_looked_up() {
    let _w = watchdog("port-forward stranger", 60);
    let token_file = common::temp_dir("pf-token").join("token");
    std::fs::write(&token_file, "s3cret-token-for-the-sim").unwrap();
    let sim = SimProc::start(&["--token-file", token_file.to_str().unwrap()]);
    // The sim is TLS with a token; curl (-k: the sim's own CA) as the
    // stranger.
    let url = format!(
        "{}/api/v1/namespaces/default/pods/nope/portforward",
        sim.url
    );
    let ws = [
        "Upgrade: websocket",
        "Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==",
        "Sec-WebSocket-Version: 13",
    ];
    let forms: [(&str, String, Vec<&str>); 3] = [
        (
            "POST",
            url.clone(),
            vec![
                "Upgrade: SPDY/3.1",
                "X-Stream-Protocol-Version: portforward.k8s.io",
            ],
        ),
        (
            "GET",
            url.clone(),
            [
                &ws[..],
                &["Sec-WebSocket-Protocol: SPDY/3.1+portforward.k8s.io"],
            ]
            .concat(),
        ),
        (
            "GET",
            format!("{url}?ports=7000"),
            [&ws[..], &["Sec-WebSocket-Protocol: v4.channel.k8s.io"]].concat(),
        ),
    ];
    for (method, url, headers) in forms {
        let mut c = Command::new("curl");
        c.args([
            "-k",
            "-s",
            "-i",
            "--http1.1",
            "--max-time",
            "10",
            "-X",
            method,
            &url,
        ])
        .args(["-H", "Connection: Upgrade"]);
        for h in &headers {
            c.args(["-H", h]);
        }
        let out = common::run_with_timeout(c, None, Duration::from_secs(20));
        let text = out.stdout_str();
        assert!(
            text.starts_with("HTTP/1.1 401 "),
            "{method} {headers:?}: {text}"
        );
    }
}

/// Refusals at the upgrade, with upstream's statuses.
#[test]
fn port_forward_upgrades_are_refused_as_upstream_refuses_them() {
    let _w = watchdog("port-forward refusals", 60);
    let sim = SimProc::start(&[]);
    sim.apply(&pod("echo"));
    wait_serving(&sim, "echo");
    let path = "/api/v1/namespaces/default/pods/echo/portforward";
    let ask = |extra: &str, method: &str, p: &str| {
        let raw = format!(
            "{method} {p} HTTP/1.1\r\nHost: x\r\n{}Connection: close{extra}\r\nContent-Length: 0\r\n\r\n",
            sim.auth_line()
        );
        let mut s = TcpStream::connect(addr(&sim)).unwrap();
        s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
        s.write_all(raw.as_bytes()).unwrap();
        let mut out = String::new();
        let _ = s.read_to_string(&mut out);
        out
    };
    // SPDY without a protocol version: upstream's empty 200.
    let r = ask(", Upgrade\r\nUpgrade: SPDY/3.1", "POST", path);
    assert!(r.starts_with("HTTP/1.1 200 "), "{r}");
    // An unknown one: 403 naming ours.
    let r = ask(
        ", Upgrade\r\nUpgrade: SPDY/3.1\r\nX-Stream-Protocol-Version: other",
        "POST",
        path,
    );
    assert!(r.starts_with("HTTP/1.1 403 "), "{r}");
    assert!(
        r.contains("X-Accepted-Stream-Protocol-Versions: portforward.k8s.io"),
        "{r}"
    );
    // No upgrade at all.
    let r = ask("", "POST", path);
    assert!(
        r.starts_with("HTTP/1.1 400 ") && r.contains("missing upgrade headers"),
        "{r}"
    );
    // A pod that does not exist.
    let r = ask(
        "",
        "POST",
        "/api/v1/namespaces/default/pods/nope/portforward",
    );
    assert!(r.starts_with("HTTP/1.1 404 "), "{r}");
    // v4 without ports, with a bad one.
    for (q, want) in [
        ("", "query parameter \\\"port\\\" is required"),
        ("?ports=0", "must be > 0"),
        ("?ports=80,", "cannot be empty"),
        ("?ports=x", "unable to parse"),
    ] {
        let p = format!("{path}{q}");
        let r = ask(
            ", Upgrade\r\nUpgrade: websocket\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 13\r\nSec-WebSocket-Protocol: v4.channel.k8s.io",
            "GET",
            &p,
        );
        assert!(
            r.starts_with("HTTP/1.1 400 ") && r.contains(want),
            "{q}: {r}"
        );
    }
    // A tunnelling protocol that is not port-forward's.
    let r = ask(
        ", Upgrade\r\nUpgrade: websocket\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 13\r\nSec-WebSocket-Protocol: SPDY/3.1+exec.k8s.io",
        "GET",
        path,
    );
    assert!(r.starts_with("HTTP/1.1 403 "), "{r}");
}

/// Reads the next v4 message as (channel, payload).
fn v4_next(ws: &mut WebSocket<TcpStream>, base64: bool) -> Option<(u8, Vec<u8>)> {
    use base64::Engine;
    loop {
        match ws.read() {
            Ok(Message::Binary(b)) if !base64 => return Some((b[0], b[1..].to_vec())),
            Ok(Message::Text(t)) if base64 => {
                let b = t.as_bytes();
                let data = base64::engine::general_purpose::STANDARD
                    .decode(&b[1..])
                    .unwrap();
                return Some((b[0] - b'0', data));
            }
            Ok(Message::Close(_)) | Err(_) => return None,
            Ok(Message::Ping(_) | Message::Pong(_)) => {}
            Ok(other) => panic!("unexpected {other:?}"),
        }
    }
}

fn v4_send(ws: &mut WebSocket<TcpStream>, base64: bool, ch: u8, data: &[u8]) {
    use base64::Engine;
    let m = if base64 {
        let mut t = String::from(char::from(b'0' + ch));
        t.push_str(&base64::engine::general_purpose::STANDARD.encode(data));
        Message::Text(t.into())
    } else {
        let mut b = vec![ch];
        b.extend_from_slice(data);
        Message::Binary(b.into())
    };
    ws.send(m).unwrap();
}

/// The v4 protocol with a raw client: prefixes, two ports, data both
/// ways; base64; a refused port's error text; the close when every port
/// ended.
#[test]
fn v4_websocket_port_forward_with_a_raw_client() {
    let _w = watchdog("v4 port-forward", 60);
    let sim = SimProc::start(&[]);
    sim.apply(&pod("echo"));
    wait_serving(&sim, "echo");
    for (offer, base64) in [
        (Some("v4.channel.k8s.io"), false),
        (None, false),
        (Some("v4.base64.channel.k8s.io"), true),
    ] {
        let mut ws = ws_open(&sim, "echo", "?ports=7000&ports=8080", offer);
        let mut prefixes = Vec::new();
        for _ in 0..4 {
            prefixes.push(v4_next(&mut ws, base64).expect("a prefix"));
        }
        assert_eq!(
            prefixes,
            vec![
                (0, 7000u16.to_le_bytes().to_vec()),
                (1, 7000u16.to_le_bytes().to_vec()),
                (2, 8080u16.to_le_bytes().to_vec()),
                (3, 8080u16.to_le_bytes().to_vec()),
            ]
        );
        v4_send(&mut ws, base64, 0, b"echo me");
        v4_send(
            &mut ws,
            base64,
            1,
            b"ignored: error channels are the server's",
        );
        v4_send(
            &mut ws,
            base64,
            2,
            b"GET /v4 HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n",
        );
        let (mut echo, mut http) = (Vec::new(), Vec::new());
        while echo.len() < 7 || !String::from_utf8_lossy(&http).contains("hello from /v4") {
            let (ch, data) = v4_next(&mut ws, base64).expect("data");
            match ch {
                0 => echo.extend(data),
                2 => http.extend(data),
                other => panic!("channel {other}: {}", String::from_utf8_lossy(&data)),
            }
        }
        assert_eq!(echo, b"echo me");
        ws.close(None).unwrap();
        while v4_next(&mut ws, base64).is_some() {}
    }
    // Comma form, one port refused: its text on its error channel; the
    // WebSocket closes once the other port's connection ends too.
    let mut ws = ws_open(&sim, "echo", "?ports=7001,7000", Some("v4.channel.k8s.io"));
    let mut error_text = String::new();
    for _ in 0..5 {
        let (ch, data) = v4_next(&mut ws, false).expect("a message");
        if ch == 1 && data.len() > 2 {
            error_text = String::from_utf8(data).unwrap();
        }
    }
    assert!(
        error_text.starts_with("error forwarding port 7001 to pod ")
            && error_text.contains("connect: connection refused"),
        "{error_text}"
    );
    sim.kubectl_ok(&["delete", "pod", "echo", "--wait=false"]);
    let start = Instant::now();
    while v4_next(&mut ws, false).is_some() {}
    assert!(start.elapsed() < Duration::from_secs(5));
}

// ------------------------------------- the JavaScript and Python clients

/// Where scripts/peer-clients.sh installs the peer clients; `None` (with a
/// skip line) when they are missing outside CI; a failure in CI.
fn peer_clients(which: &str, marker: &str) -> Option<std::path::PathBuf> {
    let cache = std::env::var_os("XDG_CACHE_HOME")
        .map(std::path::PathBuf::from)
        .or_else(|| std::env::var_os("HOME").map(|h| std::path::Path::new(&h).join(".cache")))
        .expect("HOME or XDG_CACHE_HOME");
    let dir = cache.join("kubegate").join("peer-clients");
    if dir.join(marker).exists() {
        return Some(dir);
    }
    let msg = format!(
        "the {which} client is not installed under {} (run scripts/peer-clients.sh)",
        dir.display()
    );
    assert!(std::env::var_os("CI").is_none(), "{msg}");
    eprintln!("SKIPPED: {msg}");
    None
}

/// Runs a peer client script; its `ok …` line.
fn run_peer(sim: &SimProc, dir: &std::path::Path, cmd: &[&str], port: u16, bytes: usize) -> String {
    let mut c = Command::new(cmd[0]);
    c.args(&cmd[1..])
        .env("PEER_CLIENTS", dir)
        .env("KUBECONFIG", &sim.kubeconfig)
        .env("POD", "echo")
        .env("PORT", port.to_string())
        .env("BYTES", bytes.to_string());
    let out = common::run_with_timeout(c, None, Duration::from_secs(40));
    assert_eq!(
        out.code,
        Some(0),
        "{cmd:?} port {port}:\nstdout: {}\nstderr: {}",
        out.stdout_str(),
        out.stderr_str()
    );
    out.stdout_str()
}

fn peer_scenario(cmd: &[&str], which: &str, marker: &str) {
    let Some(dir) = peer_clients(which, marker) else {
        return;
    };
    for tls in [false, true] {
        let sim = SimProc::start(if tls { &["--tls"] } else { &[] });
        sim.apply(&pod("echo"));
        wait_serving(&sim, "echo");
        let ok = run_peer(&sim, &dir, cmd, 7000, 1 << 20);
        assert_eq!(ok.trim(), format!("ok {}", 1 << 20));
        let ok = run_peer(&sim, &dir, cmd, 7001, 0);
        assert!(
            ok.starts_with("ok error forwarding port 7001 to pod ")
                && ok.contains("connection refused"),
            "{ok}"
        );
    }
}

#[test]
fn the_javascript_clients_port_forward() {
    let _w = watchdog("javascript port-forward", 120);
    let script = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/peer/portforward.mjs");
    peer_scenario(
        &["node", script],
        "JavaScript",
        "node/node_modules/@kubernetes/client-node",
    );
}

#[test]
fn the_python_clients_port_forward() {
    let _w = watchdog("python port-forward", 120);
    let script = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/peer/portforward.py");
    peer_scenario(&["python3", script], "Python", "python/kubernetes");
}

/// Hostile v4 messages: empty ones, unknown channels and error channels
/// are ignored; an oversized message (over 2 MiB) or bad base64 ends that
/// WebSocket only.
#[test]
fn hostile_v4_messages_end_only_their_websocket() {
    let _w = watchdog("hostile v4", 60);
    let sim = SimProc::start(&[]);
    sim.apply(&pod("echo"));
    wait_serving(&sim, "echo");
    let prefixes = |ws: &mut WebSocket<TcpStream>, base64: bool| {
        for _ in 0..2 {
            assert!(v4_next(ws, base64).is_some());
        }
    };
    let mut ws = ws_open(&sim, "echo", "?ports=7000", Some("v4.channel.k8s.io"));
    prefixes(&mut ws, false);
    ws.send(Message::Binary(Vec::new().into())).unwrap();
    v4_send(&mut ws, false, 9, b"no such channel");
    v4_send(&mut ws, false, 1, b"error channels are write-only");
    v4_send(&mut ws, false, 0, b"still here");
    let (ch, data) = v4_next(&mut ws, false).unwrap();
    assert_eq!((ch, data.as_slice()), (0, &b"still here"[..]));
    let mut big = vec![0u8; (2 << 20) + 1];
    big[0] = 0;
    let _ = ws.send(Message::Binary(big.into()));
    let end = loop {
        match ws.read() {
            Ok(Message::Close(f)) => break f.map(|f| u16::from(f.code)),
            Ok(_) => {}
            Err(_) => break None,
        }
    };
    assert!(matches!(end, Some(1009) | None), "{end:?}");
    let mut ws = ws_open(
        &sim,
        "echo",
        "?ports=7000",
        Some("v4.base64.channel.k8s.io"),
    );
    prefixes(&mut ws, true);
    ws.send(Message::Text("0!!not base64!!".into())).unwrap();
    let end = loop {
        match ws.read() {
            Ok(Message::Close(f)) => break f.map(|f| u16::from(f.code)),
            Ok(_) => {}
            Err(_) => break None,
        }
    };
    assert_eq!(end, Some(1002));
    // The sim serves on.
    let mut ws = ws_open(&sim, "echo", "?ports=7000", None);
    prefixes(&mut ws, false);
    v4_send(&mut ws, false, 0, b"again");
    assert_eq!(v4_next(&mut ws, false).unwrap().1, b"again");
}
