//! The pod-access seam (`session::access`) and the workspace agent's client
//! (`session::agent_client`) against a real `kubegate sim`, in BOTH access
//! modes: `api-proxy` (through the sim's pod proxy, which like the API
//! server drops `Authorization` and answers a refused port with a 503
//! Status) and `direct` (TCP to the pod's loopback IP).
//!
//! One pod per test, shaped like a session pod: a `workspace` container
//! running `kubegate workspace-agent` on `$(POD_IP):8099` over an emptyDir
//! at `/workspace`, plus two helpers in Python (present on these machines;
//! the sim runs commands on the host):
//! - `late`: serves HTTP on 18200 (18201) only once the file
//!   `listen-18200` (`listen-18201`) appears in the workspace (written
//!   through the agent), so a probe sees the port refuse, then accept;
//! - `events`: a server-sent-events stream on 18300 (`/events?second=F`)
//!   that sends its first event (split across chunks, CRLF line ends), then
//!   the second only once the file F appears, then stays silent: the stream
//!   must be read incrementally, and cancelled from another thread.
//!
//! The two modes run one after the other against one sim and pod, each
//! with its own late port and trigger file.
//!
//! Waiting is polling with deadlines (`common::wait_for`); the sim's guard
//! checks that no process it started is left.

mod common;

use base64::Engine as _;
use common::pod_fixture::{fixture, Fixture};
use common::wait_for;
use kubegate::agent::wire::AGENT_PROTOCOL;
use kubegate::agent::wire::{Encoding, WriteItem};
use kubegate::config::PodAccessMode as Mode;
use kubegate::session::access::{self, AccessError, PodAccess, PodRequest};
use kubegate::session::agent_client::{AgentClient, AgentError};
use kubegate::session::sse::{SseEvent, SseParser};
use serde_json::json;
use sha2::{Digest, Sha256};
use std::io::Read;
use std::os::unix::fs::MetadataExt;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

const TOKEN: &str = "session-access-test-token-42";
const POD: &str = "kubegate-watch-access";

const LATE: &str = r#"
import os, time, threading, http.server
class H(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        b = b'late\n'
        self.send_response(200)
        self.send_header('Content-Length', str(len(b)))
        self.end_headers()
        self.wfile.write(b)
    def log_message(self, *a):
        pass
def late(port):
    while not os.path.exists(os.path.join(os.environ['WS'], 'listen-%d' % port)):
        time.sleep(0.02)
    http.server.ThreadingHTTPServer((os.environ['POD_IP'], port), H).serve_forever()
for port in (18200, 18201):
    threading.Thread(target=late, args=(port,)).start()
"#;

const EVENTS: &str = r#"
import os, socket, threading, time
def chunk(b):
    return b'%x\r\n' % len(b) + b + b'\r\n'
def serve(c):
    try:
        data = b''
        while b'\r\n\r\n' not in data:
            d = c.recv(65536)
            if not d:
                return
            data += d
        path = data.split(b' ')[1].decode()
        if not path.startswith('/events?second='):
            c.sendall(b'HTTP/1.1 404 Not Found\r\nContent-Type: text/plain\r\nContent-Length: 7\r\nConnection: close\r\n\r\nno page')
            return
        c.sendall(b'HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\n\r\n')
        c.sendall(chunk(b': hello\r\n\r\nid: 1\r\nevent: tick\r\nda'))
        c.sendall(chunk(b'ta: one\r'))
        c.sendall(chunk(b'\n\r\n'))
        second = os.path.join(os.environ['WS'], path.split('=', 1)[1])
        while not os.path.exists(second):
            time.sleep(0.02)
        c.sendall(chunk(b'data: two\ndata: lines\n\n'))
        while c.recv(65536):
            pass
    except OSError:
        pass
    finally:
        c.close()
s = socket.socket()
s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
s.bind((os.environ['POD_IP'], 18300))
s.listen(16)
while True:
    c, _ = s.accept()
    threading.Thread(target=serve, args=(c,), daemon=True).start()
"#;

fn pod_json() -> serde_json::Value {
    let pod_ip =
        json!({"name": "POD_IP", "valueFrom": {"fieldRef": {"fieldPath": "status.podIP"}}});
    let mount = json!([{"name": "workspace", "mountPath": "/workspace"}]);
    json!({
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": POD, "namespace": "default"},
        "spec": {
            "restartPolicy": "Never",
            "volumes": [{"name": "workspace", "emptyDir": {}}],
            "containers": [
                {
                    "name": "workspace",
                    "image": "kubegate:test",
                    "command": ["kubegate", "workspace-agent", "--listen", "$(POD_IP):8099", "--root", "/workspace"],
                    "env": [pod_ip, {"name": "KUBEGATE_WORKSPACE_TOKEN", "value": TOKEN}],
                    "volumeMounts": mount,
                },
                {
                    "name": "late",
                    "image": "python:3",
                    "command": ["python3", "-c", LATE],
                    "env": [pod_ip, {"name": "WS", "value": "/workspace"}],
                    "volumeMounts": mount,
                },
                {
                    "name": "events",
                    "image": "python:3",
                    "command": ["python3", "-c", EVENTS],
                    "env": [pod_ip, {"name": "WS", "value": "/workspace"}],
                    "volumeMounts": mount,
                },
            ],
        },
    })
}

/// One access mode over the fixture, with the ports and trigger names
/// that are its own (the modes run one after the other on one pod).
struct Run<'a> {
    f: &'a Fixture,
    mode: Mode,
    access: Arc<dyn PodAccess>,
    /// Refuses until `listen-<late_port>` is written.
    late_port: u16,
}

impl Run<'_> {
    fn agent(&self, token: &str) -> AgentClient {
        AgentClient::new(self.access.clone(), self.f.target.clone(), token)
    }

    /// The host folder of the pod's workspace volume (the sim's layout).
    fn workspace_dir(&self) -> PathBuf {
        let pods = self.f.sim.state_dir.join("pods");
        let prefix = format!("default_{POD}_");
        let dir = std::fs::read_dir(&pods)
            .expect("pods dir")
            .flatten()
            .find(|e| e.file_name().to_string_lossy().starts_with(&prefix))
            .expect("the pod's folder")
            .path();
        let ws = dir.join("volumes").join("workspace");
        assert!(ws.is_dir(), "{}", ws.display());
        ws
    }
}

fn sha(b: &[u8]) -> String {
    Sha256::digest(b)
        .iter()
        .map(|x| format!("{x:02x}"))
        .collect()
}

/// Both access modes against one sim and one pod: sims hand out pod IPs
/// from the same start, so two sims running at once would give their pods
/// the same address and ports.
#[test]
fn both_access_modes_against_the_sim() {
    let f = fixture(pod_json(), Duration::from_secs(60));
    for (mode, late_port) in [(Mode::ApiProxy, 18200), (Mode::Direct, 18201)] {
        // Shown with a failure: which mode it was.
        eprintln!("--- pod access {mode:?}");
        let access = access::from_config(mode, &f.client);
        assert_eq!(access.mode(), mode);
        let r = Run {
            f: &f,
            mode,
            access,
            late_port,
        };
        agent_round_trip(&r);
        wrong_token(&r);
        probes(&r);
        streams(&r);
    }
    failed_stream_attempts_reuse_one_api_server_connection(&f);
}

/// Connections from this process to `port` on loopback, by TCP state
/// (`/proc/net/tcp`: "01" established, "06" time-wait, …).
fn loopback_connections_to(port: u16) -> Vec<String> {
    let want = format!(":{port:04X}");
    std::fs::read_to_string("/proc/net/tcp")
        .unwrap_or_default()
        .lines()
        .skip(1)
        .filter_map(|l| {
            let f: Vec<&str> = l.split_whitespace().collect();
            // local, remote, state
            (f.get(2)?.ends_with(&want)).then(|| f.get(3).map(|s| s.to_string()))?
        })
        .collect()
}

/// A debug relay retries every few seconds while an app serves no event
/// stream: in api-proxy mode each failed attempt must not cost a new
/// connection (and, on a real cluster, a TLS handshake) to the API server.
fn failed_stream_attempts_reuse_one_api_server_connection(f: &Fixture) {
    let a = access::from_config(Mode::ApiProxy, &f.client);
    let port: u16 = f
        .sim
        .url
        .rsplit(':')
        .next()
        .and_then(|p| p.trim_end_matches('/').parse().ok())
        .expect("the sim's port");
    let before = loopback_connections_to(port).len();
    for _ in 0..20 {
        match a.stream(
            &f.target,
            9,
            &PodRequest {
                timeout: Duration::from_secs(60),
                ..PodRequest::get("/events")
            },
        ) {
            Err(e) => assert!(e.is_not_reachable(), "{e}"),
            Ok(_) => panic!("nothing listens on port 9"),
        }
    }
    let after = loopback_connections_to(port);
    assert!(
        after.len() <= before + 1,
        "20 failed attempts opened {} connections to the API server ({after:?})",
        after.len() - before
    );
}

fn agent_round_trip(f: &Run) {
    let agent = f.agent(TOKEN);
    let v = agent
        .wait_ready(Instant::now() + Duration::from_secs(60))
        .expect("the agent answers");
    assert_eq!(v.protocol, AGENT_PROTOCOL);
    assert_eq!(v.version, env!("CARGO_PKG_VERSION"));
    assert_eq!(agent.version().expect("version"), v);

    // Start from an empty workspace (an earlier mode left files).
    let old: Vec<String> = agent
        .tree()
        .expect("tree")
        .files
        .into_iter()
        .map(|e| e.path)
        .collect();
    let r = agent.apply(vec![], old.clone()).expect("clear");
    assert_eq!(r.deleted as usize, old.len());
    assert!(agent.tree().expect("tree").files.is_empty());

    let text = "console.log('hi')\n";
    let binary: Vec<u8> = (0..=255u8).collect();
    let odd = "dir with space/ü&=?.txt";
    let r = agent
        .apply(
            vec![
                WriteItem::utf8("src/main.js", text),
                WriteItem::bytes("bin/data.bin", &binary),
                WriteItem::utf8(odd, "odd"),
            ],
            vec![],
        )
        .expect("apply");
    assert_eq!((r.written, r.deleted), (3, 0));

    let tree = agent.tree().expect("tree");
    let listed: Vec<(&str, &str)> = tree
        .files
        .iter()
        .map(|e| (e.path.as_str(), e.hash.as_str()))
        .collect();
    let (h_bin, h_js, h_odd) = (sha(&binary), sha(text.as_bytes()), sha(b"odd"));
    assert_eq!(
        listed,
        vec![
            ("bin/data.bin", h_bin.as_str()),
            (odd, h_odd.as_str()),
            ("src/main.js", h_js.as_str()),
        ]
    );

    let js = agent.file("src/main.js", Encoding::Utf8).expect("file");
    assert_eq!((js.content.as_str(), js.size), (text, text.len() as u64));
    assert_eq!(agent.file_bytes("bin/data.bin").expect("bytes"), binary);
    assert_eq!(agent.file(odd, Encoding::Utf8).expect("odd").content, "odd");

    let snap = agent.snapshot().expect("snapshot");
    assert_eq!(snap.files.len(), 3);
    for s in &snap.files {
        let content = base64::engine::general_purpose::STANDARD
            .decode(&s.content)
            .expect("base64");
        assert_eq!(sha(&content), s.hash, "{}", s.path);
        assert_eq!(s.encoding, Encoding::Base64);
    }
    assert_eq!(snap.files[0].path, "bin/data.bin");

    // touch rewrites the same bytes: a new file (rename), same content.
    let host = f.workspace_dir().join("src/main.js");
    let before = std::fs::metadata(&host).expect("stat").ino();
    let r = agent.touch("src/main.js").expect("touch");
    assert_eq!((r.written, r.deleted), (1, 0));
    let after = std::fs::metadata(&host).expect("stat").ino();
    assert_ne!(before, after, "touch replaced the file");
    assert_eq!(std::fs::read_to_string(&host).expect("read"), text);

    // Deleting a folder; the agent's own errors come back as such.
    let r = agent
        .apply(vec![], vec!["dir with space".into()])
        .expect("delete");
    assert_eq!((r.written, r.deleted), (0, 1));
    assert_eq!(agent.tree().expect("tree").files.len(), 2);
    match agent.file("missing.txt", Encoding::Utf8) {
        Err(AgentError::Agent {
            status: 404, code, ..
        }) => assert_eq!(code, "NOT_FOUND"),
        other => panic!("{other:?}"),
    }
    match agent.file("../outside", Encoding::Utf8) {
        Err(AgentError::Agent {
            status: 400,
            code,
            message,
        }) => {
            assert_eq!(code, "INVALID_PATH");
            assert!(message.contains("../outside"), "{message}");
        }
        other => panic!("{other:?}"),
    }
    match agent.touch("missing.txt") {
        Err(AgentError::Agent { status: 404, .. }) => {}
        other => panic!("{other:?}"),
    }
}

fn wrong_token(f: &Run) {
    let bad = f.agent("not-the-token");
    let e = bad.version().expect_err("refused");
    assert!(matches!(e, AgentError::Unauthorized { .. }), "{e:?}");
    let m = e.to_string();
    assert!(
        m.contains("refused the session token") && m.contains("401"),
        "{m}"
    );
    // A wrong token is final: wait_ready does not wait out its deadline.
    let t0 = Instant::now();
    let e = bad
        .wait_ready(t0 + Duration::from_secs(30))
        .expect_err("refused");
    assert!(matches!(e, AgentError::Unauthorized { .. }), "{e:?}");
    assert!(t0.elapsed() < Duration::from_secs(10));
    assert!(matches!(bad.tree(), Err(AgentError::Unauthorized { .. })));
}

fn probes(f: &Run) {
    let a = &f.access;
    let t = &f.f.target;
    let quick = Duration::from_secs(2);
    let port = f.late_port;
    // Nothing listens on the late port until its trigger exists, nor on 9.
    assert!(!a.probe_tcp(t, port, quick).expect("probe the late port"));
    assert!(!a.probe_tcp(t, 9, quick).expect("probe 9"));
    match a.request(t, 9, &PodRequest::get("/")) {
        Err(e @ AccessError::Refused { .. }) => assert!(e.is_not_reachable()),
        other => panic!("{other:?}"),
    }
    // The agent's port is reachable.
    assert!(a.probe_tcp(t, 8099, quick).expect("probe 8099"));

    f.agent(TOKEN)
        .apply(vec![WriteItem::utf8(&format!("listen-{port}"), "")], vec![])
        .expect("trigger");
    wait_for("the late port reachable", Duration::from_secs(30), || {
        a.probe_tcp(t, port, quick).expect("probe").then_some(())
    });
    let r = a
        .request(t, port, &PodRequest::get("/anything?x=1"))
        .expect("request");
    assert_eq!((r.status, r.body.as_slice()), (200, &b"late\n"[..]));
    // The same through `open` (the port proxy route's streaming call).
    let mut s = a
        .open(
            t,
            port,
            &PodRequest::get("/streamed").idle(Duration::from_secs(10)),
        )
        .expect("open");
    assert_eq!(s.status, 200);
    let mut body = Vec::new();
    s.read_to_end(&mut body).expect("the body");
    assert_eq!(body, b"late\n");
    // No answer at all is an error, not a status.
    assert!(a
        .open(t, 9, &PodRequest::get("/").idle(Duration::from_secs(10)))
        .is_err_and(|e| e.is_not_reachable()));
}

/// Reads from `s` into `p` until an event (or error) comes out.
fn next_event(s: &mut impl Read, p: &mut SseParser) -> SseEvent {
    let mut buf = [0u8; 64];
    loop {
        if let Some(ev) = p.next_event() {
            return ev.expect("event within bounds");
        }
        let n = s.read(&mut buf).expect("read the stream");
        assert!(n > 0, "the stream ended early");
        p.push(&buf[..n]);
    }
}

fn streams(f: &Run) {
    let a = &f.access;
    let t = &f.f.target;
    let idle = Duration::from_secs(30);

    let second = format!("send-second-{:?}", f.mode);
    match a.stream(
        t,
        18300,
        &PodRequest {
            timeout: idle,
            ..PodRequest::get("/missing")
        },
    ) {
        Err(AccessError::Status { status: 404, body }) => assert_eq!(body, "no page"),
        other => panic!("{other:?}"),
    }

    let mut s = a
        .stream(
            t,
            18300,
            &PodRequest {
                headers: vec![("Accept".into(), "text/event-stream".into())],
                timeout: idle,
                ..PodRequest::get(&format!("/events?second={second}"))
            },
        )
        .expect("stream");
    assert_eq!(s.status, 200);
    assert_eq!(s.header("content-type"), Some("text/event-stream"));
    let mut p = SseParser::default();
    let first = next_event(&mut s, &mut p);
    assert_eq!(
        first,
        SseEvent {
            id: Some("1".into()),
            event: Some("tick".into()),
            data: "one".into()
        }
    );
    // The second event is only produced once we ask for it: the first was
    // read while the response was still going on.
    f.agent(TOKEN)
        .apply(vec![WriteItem::utf8(&second, "")], vec![])
        .expect("trigger");
    let ev = next_event(&mut s, &mut p);
    assert_eq!(ev.data, "two\nlines");
    assert_eq!(ev.id.as_deref(), Some("1"), "the last id persists");
    assert_eq!(ev.event, None);

    // The server is now silent: a blocked reader ends when cancelled.
    let cancel = s.canceller();
    let (tx, rx) = std::sync::mpsc::channel();
    let reader = std::thread::spawn(move || {
        let mut buf = [0u8; 64];
        let _ = tx.send(s.read(&mut buf));
    });
    assert!(
        rx.recv_timeout(Duration::from_millis(200)).is_err(),
        "the reader is blocked on a silent stream"
    );
    let t0 = Instant::now();
    cancel.cancel();
    let ended = rx
        .recv_timeout(Duration::from_secs(5))
        .expect("the read returned after cancel");
    assert!(
        matches!(ended, Ok(0) | Err(_)),
        "no data after cancel: {ended:?}"
    );
    assert!(t0.elapsed() < Duration::from_secs(5));
    reader.join().expect("reader thread");
}
