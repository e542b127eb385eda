//! The product end to end on the real control plane's sim node
//! (docs/control-plane.md#the-product-on-the-sim-node): `kubegate serve`
//! as scripts/rbac.yaml's ServiceAccount with exactly its grants
//! (`common::real_daemon`, as tests/rbac_real.rs), `mode = "kubeconfig"`,
//! `pod_access = "direct"` (the API server refuses to proxy to the sim
//! node's loopback pod IPs: 400 `address not allowed`; api-proxy stays
//! proven on the sim), its session and workspace namespaces annotated so
//! every pod lands on the sim node (`kubegate sim node`), where it really
//! runs: attach, logs, exec and the kubelet's exit codes come from the
//! real API server and the sim node's kubelet API, not from kwok.
//!
//! One test, in phases (one daemon identity, one set of namespaces):
//!
//! 1. The exec gateway: `kubegate exec` one-shot with exact exit codes,
//!    stdin, and a terminal under a pty.
//! 2. A watch session with seeded files and four apps, Running on the sim
//!    node: the io socket replays what came before the attach, then live
//!    output, and stdin reaches the app; the debug stream is relayed and
//!    re-routes the app's port (Service and Ingress follow); a workspace
//!    edit restarts a runner app (live reload).
//! 3. A daemon restart re-adopts the running session: the output
//!    numbering continues and lines written while it was down are there.
//! 4. Tunnels: `kubegate port-forward SESSION` and `--workspace P/U
//!    DEPLOYMENT`, 4 MiB each way through an echo server.
//! 5. Suspend (the pod deleted) and resume (files kept, Running on the
//!    sim node again), stop (pod gone).
//!
//! No Kubernetes refusal in the daemon's logs. Without a plane or its sim
//! node the test says why on stderr and passes; under
//! `KUBEGATE_REAL_REQUIRED=1` it fails instead (as `on_sim_node`).

mod common;

use common::daemon::{DaemonProc, SseClient, SseEvent};
use common::pty::Pty;
use common::real_daemon::{
    apply_rbac, config_with, create_echo_deployment, no_refusal_logged,
    plane_with_sim_node_or_skip, running_pod, status_of, until_status, wait_published,
    write_kubeconfig, Namespaces, NsOptions, Plane, ECHO_PY, WAIT, WORKSPACE_UID,
};
use common::{run_with_timeout, temp_dir, terminate, wait_for, Output, KUBEGATE};
use kubegate::session::io::wire::{decode_frame, SUBPROTOCOL as IO_PROTOCOL};
use serde_json::{json, Value};
use std::collections::BTreeMap;
use std::io::{BufRead, BufReader, Read, Write};
use std::net::{Shutdown, TcpStream};
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use tungstenite::Message;

const TAG: &str = "product-real";

/// The session's `web` app: the TCP echo on 7000 (`ECHO_PY`), HTTP on
/// 8080 and 8081, and on its inspect address a debug stream that declares
/// the port written in the workspace's `port.txt` whenever it changes.
const WEB_PY: &str = r#"
import http.server, json, time
class App(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    def do_GET(self):
        body = ("hello from %d %s" % (self.server.server_port, self.path)).encode()
        self.send_response(200)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)
    def log_message(self, *a): pass
def declared():
    try:
        return int(open("port.txt").read().strip())
    except Exception:
        return None
class Events(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        self.end_headers()
        last = None
        while True:
            p = declared()
            if p is not None and p != last:
                ev = {"event": "Kernel.PortsResolved", "payload": {"ports": [{"port": p}]}}
                self.wfile.write(("data: %s\n\n" % json.dumps(ev)).encode())
                last = p
            else:
                self.wfile.write(b": hb\n\n")
            self.wfile.flush()
            time.sleep(0.3)
    def log_message(self, *a): pass
threading.Thread(target=echo_server, daemon=True).start()
ip = os.environ["POD_IP"]
for port in (8080, 8081):
    s = http.server.ThreadingHTTPServer((ip, port), App)
    threading.Thread(target=s.serve_forever, daemon=True).start()
print("web ready", flush=True)
host, port = os.environ["KUBEGATE_INSPECT_ADDR"].rsplit(":", 1)
http.server.ThreadingHTTPServer((host, int(port)), Events).serve_forever()
"#;

const ECHO_SH: &str = "echo ready; while read l; do echo \"out:$l\"; echo \"err:$l\" >&2; done";
const TICK_SH: &str = "i=0; while :; do i=$((i+1)); echo \"tick $i\"; sleep 0.3; done";
const LIVE_SH: &str =
    "echo \"live says $(cat msg.txt) in generation $KUBEGATE_GENERATION\"; while :; do sleep 1; done";

fn session_body() -> Value {
    let web = format!("{ECHO_PY}{WEB_PY}");
    json!({
        "apps": [
            // Its own debug stream: no runner (which would own
            // KUBEGATE_INSPECT_ADDR).
            {"name": "web", "entry": "app.py", "command": ["python3", "app.py"],
             "io": "streams", "ports": [{"port": 8080}], "runner": false},
            // Directly, not under the runner: a restart of the runner while
            // a line is in flight would lose it (tests/sessions.rs).
            {"name": "echo", "entry": "echo.sh", "command": ["sh", "echo.sh"],
             "io": "streams", "runner": false},
            {"name": "tick", "entry": "tick.sh", "command": ["sh", "tick.sh"],
             "io": "streams", "runner": false},
            // Under the app runner (the default): an edit restarts it.
            {"name": "live", "entry": "live.sh", "command": ["sh", "live.sh"], "io": "streams"}
        ],
        "bundle": {"files": [
            {"path": "app.py", "content": web},
            {"path": "echo.sh", "content": ECHO_SH},
            {"path": "tick.sh", "content": TICK_SH},
            {"path": "live.sh", "content": LIVE_SH},
            {"path": "msg.txt", "content": "v1"},
            {"path": "port.txt", "content": "8080\n"},
            {"path": "data/readme.txt", "content": "aGVsbG8=", "encoding": "base64"}
        ]}
    })
}

fn daemon_config(kubeconfig: &std::path::Path, ns: &Namespaces, digest: &str) -> String {
    let principal = format!(
        "name = \"{TAG}\"\ntoken_sha256 = \"{digest}\"\nworkspaces = [\"{}/{WORKSPACE_UID}\"]\n\
         may_start_sessions = true\n",
        ns.workspace
    );
    // Every session container requests (and is limited to) `max_cpu`,
    // by default 1: five containers would not fit the sim node, which
    // reports the machine's cores (2 in CI). A small node's setting.
    config_with(
        kubeconfig,
        ns,
        "direct",
        "max_cpu = \"200m\"\n",
        "",
        &principal,
    )
}

// ------------------------------------------------------------ the io socket

type Ws = tungstenite::WebSocket<TcpStream>;

/// Frames an io viewer received: seq -> (stream, bytes).
#[derive(Debug, Default)]
struct Seen {
    frames: BTreeMap<u32, (u8, Vec<u8>)>,
    gaps: Vec<Value>,
}

impl Seen {
    fn last_seq(&self) -> u32 {
        self.frames.keys().next_back().copied().unwrap_or(0)
    }

    fn text(&self, stream: u8) -> String {
        let bytes: Vec<u8> = self
            .frames
            .values()
            .filter(|(s, _)| *s == stream)
            .flat_map(|(_, b)| b.iter().copied())
            .collect();
        String::from_utf8_lossy(&bytes).into_owned()
    }

    fn ticks(&self) -> Vec<u64> {
        self.text(1)
            .lines()
            .filter_map(|l| l.strip_prefix("tick ").and_then(|n| n.parse().ok()))
            .collect()
    }
}

fn open_io(d: &DaemonProc, id: &str, app: &str, last_seq: Option<u32>) -> Ws {
    let auth = format!("Bearer {}", d.token);
    let q = last_seq.map_or(String::new(), |n| format!("&lastSeq={n}"));
    let (ws, _) = d
        .ws(
            &format!("/v1/sessions/{id}/io?app={app}{q}"),
            &[("Authorization", &auth)],
            &[IO_PROTOCOL],
        )
        .unwrap_or_else(|(st, b)| panic!("io {app}: {st} {}", String::from_utf8_lossy(&b)));
    ws.get_ref()
        .set_read_timeout(Some(Duration::from_millis(500)))
        .expect("read timeout");
    ws
}

/// Reads frames into `seen` until `done` holds (deadline: WAIT).
fn read_until(ws: &mut Ws, seen: &mut Seen, what: &str, done: impl Fn(&Seen) -> bool) {
    let deadline = Instant::now() + WAIT;
    while !done(seen) {
        assert!(
            Instant::now() < deadline,
            "timed out waiting for {what}: {seen:?}"
        );
        match ws.read() {
            Ok(Message::Binary(b)) => {
                let (seq, stream, p) = decode_frame(&b).expect("a frame");
                seen.frames.insert(seq, (stream, p.to_vec()));
            }
            Ok(Message::Text(t)) => {
                seen.gaps
                    .push(serde_json::from_str(t.as_str()).expect("JSON"));
            }
            Ok(Message::Close(f)) => panic!("io closed {f:?} waiting for {what}: {seen:?}"),
            Ok(_) => {}
            Err(tungstenite::Error::Io(e))
                if matches!(
                    e.kind(),
                    std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
                ) => {}
            Err(e) => panic!("io read waiting for {what}: {e}"),
        }
    }
}

fn shows(stream: u8, text: &str) -> impl Fn(&Seen) -> bool + '_ {
    move |s: &Seen| s.text(stream).contains(text)
}

fn close(mut ws: Ws) {
    let _ = ws.close(None);
    let _ = ws.flush();
}

// ------------------------------------------------------------ the CLI

fn kg(d: &DaemonProc, args: &[&str], state: &std::path::Path) -> Command {
    let mut c = Command::new(KUBEGATE);
    c.args(args)
        .env("KUBEGATE_SERVER", &d.url)
        .env("KUBEGATE_TOKEN", &d.token)
        .env_remove("KUBEGATE_WORKSPACE")
        .env("XDG_STATE_HOME", state);
    c
}

fn exec_args<'a>(ws: &'a str, flags: &[&'a str], cmd: &[&'a str]) -> Vec<&'a str> {
    let mut a = vec!["exec"];
    a.extend_from_slice(flags);
    a.extend(["--workspace", ws, "hello", "--"]);
    a.extend_from_slice(cmd);
    a
}

/// `kubegate port-forward ARGS`: the child and its stdout lines.
struct Forward {
    child: Child,
    lines: Arc<Mutex<Vec<String>>>,
}

impl Forward {
    fn spawn(mut c: Command) -> Forward {
        let mut child = c
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .expect("spawn kubegate port-forward");
        let lines = Arc::new(Mutex::new(Vec::new()));
        let (out, l) = (child.stdout.take().expect("stdout"), lines.clone());
        std::thread::spawn(move || {
            for line in BufReader::new(out).lines().map_while(Result::ok) {
                l.lock().expect("lines").push(line);
            }
        });
        Forward { child, lines }
    }

    /// The local port of the `Forwarding from 127.0.0.1:L -> remote` line.
    fn local_port(&self, remote: u16) -> u16 {
        let tail = format!(" -> {remote}");
        wait_for("the forwarding line", WAIT, || {
            self.lines.lock().expect("lines").iter().find_map(|l| {
                l.strip_prefix("Forwarding from 127.0.0.1:")
                    .and_then(|r| r.strip_suffix(&tail))
                    .and_then(|p| p.parse().ok())
            })
        })
    }
}

impl Drop for Forward {
    fn drop(&mut self) {
        let _ = terminate(&mut self.child, Duration::from_secs(10));
    }
}

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

/// Sends `data` through the local port while reading, shuts the write
/// side, and returns the whole echo.
fn echo_through(port: u16, data: &[u8]) -> Vec<u8> {
    let mut s = TcpStream::connect(("127.0.0.1", port)).expect("connect to the forwarder");
    s.set_read_timeout(Some(WAIT)).expect("timeout");
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
    assert!(writer.join().unwrap_or(false), "writing through {port}");
    read.expect("reading the echo");
    got
}

/// 4 MiB each way through `kubegate port-forward ARGS` to port 7000.
fn forward_echo(d: &DaemonProc, args: &[&str], seed: u32, state: &std::path::Path) -> Duration {
    let mut a = vec!["port-forward"];
    a.extend_from_slice(args);
    let pf = Forward::spawn(kg(d, &a, state));
    let port = pf.local_port(7000);
    let data = pattern(seed, 4 << 20);
    let t0 = Instant::now();
    let got = echo_through(port, &data);
    let took = t0.elapsed();
    assert!(
        got.len() == data.len() && got == data,
        "{args:?}: {} of {} bytes came back intact",
        got.len(),
        data.len()
    );
    took
}

// ------------------------------------------------------------ the plane

fn session_pods(plane: &Plane, ns: &str, id: &str) -> Vec<Value> {
    plane.list(ns, "pods", &format!("kubegate.dev/session-id={id}"))
}

fn run_event(e: &SseEvent, app: &str, phase: &str, generation: u64) -> bool {
    e.event == "run"
        && e.data["app"] == app
        && e.data["phase"] == phase
        && e.data["generation"] == generation
}

// ------------------------------------------------------------ the phases

/// Phase 1: `kubegate exec` on the workspace Deployment's pod, which the
/// sim node runs: the exit codes come from the kubelet protocol.
fn exec_gateway(d: &DaemonProc, ns: &Namespaces, state: &std::path::Path) {
    let ws = format!("{}/{WORKSPACE_UID}", ns.workspace);
    let run = |flags: &[&str], cmd: &[&str], stdin: Option<&[u8]>| -> Output {
        run_with_timeout(kg(d, &exec_args(&ws, flags, cmd), state), stdin, WAIT)
    };
    let out = run(&[], &["sh", "-c", "echo out; echo err >&2; exit 3"], None);
    assert_eq!(
        (
            out.code,
            out.stdout_str().as_str(),
            out.stderr_str().as_str()
        ),
        (Some(3), "out\n", "err\n")
    );
    let out = run(&[], &["true"], None);
    assert_eq!(out.code, Some(0), "{}", out.stderr_str());
    let out = run(&[], &["sh", "-c", "kill -TERM $$"], None);
    assert_eq!(out.code, Some(143), "{}", out.stderr_str());
    let out = run(&["-i"], &["cat"], Some(b"hi\n"));
    assert_eq!(
        (out.code, out.stdout_str().as_str()),
        (Some(0), "hi\n"),
        "{}",
        out.stderr_str()
    );
    // A terminal: the remote one echoes what is typed, knows its size, and
    // the exit code comes back.
    let pty = Pty::open(33, 101);
    let before = pty.settings();
    let script =
        r#"read l; stty size; while read l; do [ "$l" = end ] && exit 5; echo "got=$l"; done"#;
    let mut child = kg(
        d,
        &exec_args(&ws, &["-i", "-t"], &["sh", "-c", script]),
        state,
    )
    .stdin(pty.stdio())
    .stdout(pty.stdio())
    .stderr(pty.stdio())
    .spawn()
    .expect("spawn kubegate exec -it");
    pty.type_bytes(b"go\r");
    let at = pty.wait_text("go\r\n33 101\r\n", 0);
    pty.type_bytes(b"hello\r");
    pty.wait_text("hello\r\ngot=hello\r\n", at);
    pty.type_bytes(b"end\r");
    let code = wait_for("kubegate exec -t to exit", WAIT, || {
        child.try_wait().ok().flatten().map(|st| st.code())
    });
    assert_eq!(code, Some(5), "{}", pty.text());
    assert_eq!(pty.settings(), before, "the terminal was not restored");
}

/// Phase 2: a session Running on the sim node; the io socket, the debug
/// stream, port re-routing, live reload. Returns its id, stream, and the
/// name of its pod.
fn session(plane: &Plane, ns: &Namespaces, d: &DaemonProc, node: &str) -> (String, SseClient) {
    let (id, mut sse) = d.create_session(&session_body());
    until_status(&mut sse, "running");
    let pod = running_pod(plane, &ns.session, &id, node);
    let ip = pod["status"]["podIP"].as_str().expect("podIP");
    assert!(
        ip.starts_with(&common::backend::sim_node_ip_prefix()),
        "a sim node pod IP: {ip}"
    );
    let base = format!("/v1/sessions/{id}");
    // The seeded files, read back through the workspace agent.
    let (st, v) = d.json(
        "GET",
        &format!("{base}/workspace/file?path=data/readme.txt&encoding=base64"),
        None,
    );
    assert_eq!((st, v["content"].as_str()), (200, Some("aGVsbG8=")), "{v}");

    // The io socket: stdin reaches the app, its output comes back live
    // (stdout and stderr apart); a viewer joining later gets it replayed
    // from seq 1, then live output; one joining from lastSeq gets exactly
    // what follows.
    let mut ws = open_io(d, &id, "echo", None);
    let mut seen = Seen::default();
    ws.send(Message::Binary(b"hi\n".to_vec().into()))
        .expect("stdin");
    read_until(&mut ws, &mut seen, "out:hi and err:hi", |s| {
        s.text(1).contains("out:hi\n") && s.text(2).contains("err:hi\n")
    });
    close(ws);
    let mut ws = open_io(d, &id, "echo", None);
    let mut replayed = Seen::default();
    read_until(&mut ws, &mut replayed, "the replay", |s| {
        s.text(1).contains("out:hi\n") && s.text(2).contains("err:hi\n")
    });
    assert_eq!(replayed.frames.keys().next(), Some(&1), "{replayed:?}");
    ws.send(Message::Binary(b"live\n".to_vec().into()))
        .expect("stdin");
    read_until(&mut ws, &mut replayed, "out:live", shows(1, "out:live\n"));
    let last = replayed.last_seq();
    close(ws);
    let mut ws = open_io(d, &id, "echo", Some(last));
    ws.send(Message::Binary(b"again\n".to_vec().into()))
        .expect("stdin");
    let mut more = Seen::default();
    read_until(&mut ws, &mut more, "out:again", shows(1, "out:again\n"));
    assert_eq!(more.frames.keys().next(), Some(&(last + 1)), "{more:?}");
    assert!(more.gaps.is_empty(), "{more:?}");
    close(ws);
    // What the app printed as it started is in the container log (read
    // through the API server and the sim node's kubelet API), and on the
    // io socket first: the start's attach recovers what the app wrote
    // before it was delivering (docs/control-plane.md#the-product-on-the-sim-node,
    // "A new app's first output"; it was lost in 5 starts of 12 before).
    let log = plane.ok(
        &[
            "-n",
            &ns.session,
            "logs",
            pod["metadata"]["name"].as_str().expect("name"),
            "-c",
            "app-echo",
        ],
        None,
    );
    assert!(log.starts_with("ready\n"), "{log:?}");
    assert!(
        replayed.text(1).starts_with("ready\n"),
        "the echo app's first line: {:?}",
        replayed.text(1)
    );

    // The debug stream: relayed, and its port (8080) published.
    let (s1, i1) = wait_published(plane, &ns.session, &id, Some(8080));
    let (st, b) = d.request(
        "GET",
        &format!("{base}/ports/8080/x?y=1"),
        Some(&d.token),
        None,
    );
    assert_eq!(
        (st, String::from_utf8_lossy(&b).as_ref()),
        (200, "hello from 8080 /x?y=1")
    );

    // Live reload: an edit restarts the runner app with the new file.
    let mut live = open_io(d, &id, "live", None);
    let mut live_seen = Seen::default();
    let (st, v) = d.json(
        "POST",
        &format!("{base}/workspace"),
        Some(&json!({"write": [{"path": "msg.txt", "content": "v2"}]})),
    );
    assert_eq!((st, v["written"].as_u64()), (200, Some(1)), "{v}");
    read_until(
        &mut live,
        &mut live_seen,
        "live generation 2",
        shows(1, "live says v2 in generation 2\n"),
    );
    close(live);
    let seen = sse.until(|e| run_event(e, "live", "started", 2));
    assert!(
        seen.iter().any(|e| run_event(e, "live", "ended", 1)),
        "{seen:#?}"
    );

    // The app declares 8081 instead: the event relayed, the endpoints
    // re-routed, Service and Ingress replaced in place.
    let (st, v) = d.json(
        "POST",
        &format!("{base}/workspace"),
        Some(&json!({"write": [{"path": "port.txt", "content": "8081\n"}]})),
    );
    assert_eq!(st, 200, "{v}");
    let mut relayed = false;
    let mut rerouted = false;
    let seen = sse.until(|e| {
        relayed |= e.event == "debug"
            && e.data["frame"]["event"] == "Kernel.PortsResolved"
            && e.data["frame"]["payload"]["ports"][0]["port"] == 8081;
        rerouted |= e.event == "endpoints"
            && e.data["added"][0]["port"] == 8081
            && e.data["removed"][0]["port"] == 8080;
        relayed && rerouted
    });
    assert!(relayed && rerouted, "{seen:#?}");
    let (s2, i2) = wait_published(plane, &ns.session, &id, Some(8081));
    assert_eq!(s2["metadata"]["uid"], s1["metadata"]["uid"]);
    assert_eq!(i2["metadata"]["uid"], i1["metadata"]["uid"]);
    let (st, b) = d.request("GET", &format!("{base}/ports/8081/z"), Some(&d.token), None);
    assert_eq!(
        (st, String::from_utf8_lossy(&b).as_ref()),
        (200, "hello from 8081 /z")
    );
    let (st, _) = d.request("GET", &format!("{base}/ports/8080/"), Some(&d.token), None);
    assert_eq!(st, 404, "8080 is no longer declared");
    (id, sse)
}

/// Phase 3: a daemon restart re-adopts the session; the tick app's
/// numbering continues, and what it wrote while the daemon was down is
/// read back (the container log, through the API server and the sim
/// node's kubelet API).
fn restart(plane: &Plane, ns: &Namespaces, d: &mut DaemonProc, id: &str, node: &str) {
    let pod = running_pod(plane, &ns.session, id, node);
    let pod_name = pod["metadata"]["name"].as_str().expect("pod name");
    let mut ws = open_io(d, id, "tick", None);
    let mut before = Seen::default();
    read_until(&mut ws, &mut before, "tick 3", |s| s.ticks().contains(&3));
    let last_seq = before.last_seq();
    let last_tick = *before.ticks().last().expect("a tick");
    assert_eq!(d.stop(), Some(0), "daemon log:\n{}", d.log_text());
    drop(ws);
    // While it is down: five more ticks in the container's log.
    let down = last_tick + 5;
    wait_for("ticks while the daemon is down", WAIT, || {
        let log = plane.ok(
            &["-n", &ns.session, "logs", pod_name, "-c", "app-tick"],
            None,
        );
        log.contains(&format!("tick {down}\n")).then_some(())
    });
    d.restart("info");
    let mut sse = SseClient::open(d, &format!("/v1/sessions/{id}/events"), None);
    until_status(&mut sse, "running");
    let again = running_pod(plane, &ns.session, id, node);
    assert_eq!(
        again["metadata"]["uid"], pod["metadata"]["uid"],
        "the same pod, re-adopted"
    );
    let mut ws = open_io(d, id, "tick", Some(last_seq));
    let mut after = Seen::default();
    read_until(&mut ws, &mut after, "ticks after the restart", |s| {
        s.ticks().last().is_some_and(|t| *t >= down + 2)
    });
    close(ws);
    assert!(after.gaps.is_empty(), "no gap: {:?}", after.gaps);
    let seqs: Vec<u32> = after.frames.keys().copied().collect();
    let contiguous: Vec<u32> = (last_seq + 1..last_seq + 1 + seqs.len() as u32).collect();
    assert_eq!(seqs, contiguous, "frames numbered on from lastSeq");
    let ticks = after.ticks();
    assert_eq!(ticks.first(), Some(&(last_tick + 1)), "{ticks:?}");
    // A line both in the log and through the new attach may come twice
    // (docs/sessions.md, the recovery's overlap), never a hole.
    for w in ticks.windows(2) {
        assert!(
            w[1] == w[0] + 1 || w[1] == w[0],
            "tick {} then {}: {ticks:?}",
            w[0],
            w[1]
        );
    }
    for n in last_tick + 1..=down {
        assert!(
            ticks.contains(&n),
            "tick {n} (written while down): {ticks:?}"
        );
    }
}

/// Phase 5: suspend, resume (every file kept, on the sim node again),
/// stop (no pod left).
fn suspend_resume_stop(plane: &Plane, ns: &Namespaces, d: &DaemonProc, id: &str, node: &str) {
    let base = format!("/v1/sessions/{id}");
    let mut sse = SseClient::open(d, &format!("{base}/events"), None);
    let first = running_pod(plane, &ns.session, id, node);
    let (st, v) = d.json("POST", &format!("{base}/suspend"), Some(&json!({})));
    assert_eq!(st, 202, "{v}");
    let seen = sse.until(|e| status_of(e) == Some("suspended"));
    assert_eq!(seen.last().and_then(status_of), Some("suspended"));
    wait_for("no pod while suspended", WAIT, || {
        session_pods(plane, &ns.session, id)
            .is_empty()
            .then_some(())
    });
    let (st, v) = d.json("POST", &format!("{base}/resume"), Some(&json!({})));
    assert_eq!(st, 202, "{v}");
    until_status(&mut sse, "running");
    let second = running_pod(plane, &ns.session, id, node);
    assert_ne!(second["metadata"]["uid"], first["metadata"]["uid"]);
    for (path, q, want) in [
        ("msg.txt", "", "v2"),
        ("port.txt", "", "8081\n"),
        ("data/readme.txt", "&encoding=base64", "aGVsbG8="),
    ] {
        let (st, v) = d.json(
            "GET",
            &format!("{base}/workspace/file?path={path}{q}"),
            None,
        );
        assert_eq!(
            (st, v["content"].as_str()),
            (200, Some(want)),
            "{path}: {v}"
        );
    }
    let (st, _) = d.request("DELETE", &base, Some(&d.token), None);
    assert_eq!(st, 204);
    until_status(&mut sse, "stopped");
    wait_for("the session pod gone", WAIT, || {
        session_pods(plane, &ns.session, id)
            .is_empty()
            .then_some(())
    });
}

#[test]
fn the_product_runs_end_to_end_on_the_real_planes_sim_node() {
    let _dog = common::backend::watchdog(600);
    let Some(plane) = plane_with_sim_node_or_skip("product_real") else {
        return;
    };
    let node = plane.sim_node.clone().expect("the sim node");
    let t0 = Instant::now();
    let ns = Namespaces::create(&plane, TAG, NsOptions::on_sim_node());
    let sa_token = apply_rbac(&plane, &ns);
    let dir = temp_dir(TAG);
    let kubeconfig = write_kubeconfig(&plane, &sa_token, &dir);
    // The workspace Deployment: the demo's, plus an echo container for the
    // Deployment tunnel.
    create_echo_deployment(&plane, &ns.workspace, &node);
    let set_up = t0.elapsed();

    let (token, digest) = common::daemon::random_token();
    let mut d = DaemonProc::start_config(
        &daemon_config(&kubeconfig, &ns, &digest),
        kubeconfig.clone(),
        &token,
        "info",
    );
    let cli_state = temp_dir("product-real-cli");
    let t = Instant::now();
    exec_gateway(&d, &ns, &cli_state);
    let exec = t.elapsed();

    let t = Instant::now();
    let (id, _sse) = session(&plane, &ns, &d, &node);
    let sessions = t.elapsed();

    let t = Instant::now();
    restart(&plane, &ns, &mut d, &id, &node);
    let restarted = t.elapsed();

    let t = Instant::now();
    let session_tunnel = forward_echo(&d, &[&id, ":7000"], 1, &cli_state);
    let workspace = format!("{}/{WORKSPACE_UID}", ns.workspace);
    let dep_tunnel = forward_echo(
        &d,
        &["--workspace", &workspace, "hello", ":7000"],
        2,
        &cli_state,
    );
    let tunnels = t.elapsed();

    let t = Instant::now();
    suspend_resume_stop(&plane, &ns, &d, &id, &node);
    let suspend = t.elapsed();

    assert_eq!(d.stop(), Some(0), "daemon log:\n{}", d.log_text());
    no_refusal_logged(&d);
    eprintln!(
        "product_real: set-up {:.1} s, exec {:.1} s, session {:.1} s, restart {:.1} s, \
         tunnels {:.1} s (4 MiB each way: session {:.2} s, Deployment {:.2} s), \
         suspend/resume/stop {:.1} s, all {:.1} s",
        set_up.as_secs_f64(),
        exec.as_secs_f64(),
        sessions.as_secs_f64(),
        restarted.as_secs_f64(),
        tunnels.as_secs_f64(),
        session_tunnel.as_secs_f64(),
        dep_tunnel.as_secs_f64(),
        suspend.as_secs_f64(),
        t0.elapsed().as_secs_f64()
    );
}
