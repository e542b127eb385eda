//! The debug relay, the reachability prober and the port-proxy helper
//! (`session::relay`) against a real `kubegate sim`, in BOTH pod-access
//! modes (`api-proxy` through the sim's pod proxy, `direct` to the pod's
//! loopback IP).
//!
//! One pod, two Python helpers (python3 is present on these machines; the
//! sim runs commands on the host):
//! - `events`: an app's debug stream on `$(POD_IP):9230` (`GET /events`,
//!   chunked). Without `Last-Event-ID` it sends a heartbeat, a
//!   `Kernel.PortsResolved` event (id 1), a frame that is not JSON, a log
//!   line (id 2), and ENDS the stream; with `Last-Event-ID: X` it sends one
//!   `Test.Resumed` event carrying X and stays open. So the relay must
//!   deliver both frames, skip the garbage, reconnect after the end and
//!   resume where it was. Stateless, so both modes use it in turn. The
//!   same stream is served on 9231 (9232) only once `listen-9231`
//!   (`listen-9232`) appears: a relay started before its app listens
//!   keeps retrying through refusals, then delivers.
//! - `late`: HTTP on 18400 (18401) only once the file `listen-18400`
//!   (`listen-18401`) appears in the pod's `shared` emptyDir (written from
//!   the host, in the sim's layout); it echoes the request's path, its
//!   `X-Foo` and whether an `Authorization` header reached it.
//!
//! Waiting is on channels with deadlines or `common::wait_for`; the sim's
//! guard checks that no process it started is left.

mod common;

use common::pod_fixture::{fixture, Fixture};
use common::wait_for;
use crossbeam_channel::{unbounded, Receiver};
use kubegate::config::PodAccessMode as Mode;
use kubegate::session::access::{self, PodAccess};
use kubegate::session::machine::Reach;
use kubegate::session::relay::probe::{self, ProbeTimings};
use kubegate::session::relay::{self, proxy};
use serde_json::{json, Value};
use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};
use ureq::http::Method;

const POD: &str = "kubegate-watch-relay";
const WAIT: Duration = Duration::from_secs(30);

const EVENTS: &str = r#"
import json, os, socket, threading, time
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
        lines = data.split(b'\r\n\r\n')[0].decode('latin-1').split('\r\n')
        path = lines[0].split(' ')[1]
        last = None
        for h in lines[1:]:
            k, _, v = h.partition(':')
            if k.strip().lower() == 'last-event-id':
                last = v.strip()
        if path != '/events':
            c.sendall(b'HTTP/1.1 404 Not Found\r\nContent-Length: 0\r\nConnection: close\r\n\r\n')
            return
        c.sendall(b'HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\n\r\n')
        c.sendall(chunk(b': heartbeat\n\n'))
        if last is None:
            ev = {'event': 'Kernel.PortsResolved', 'payload': {'ports': [{'port': 8080}]}}
            c.sendall(chunk(b'id: 1\ndata: ' + json.dumps(ev).encode() + b'\n\n'))
            c.sendall(chunk(b'data: not json\n\n'))
            log = {'kind': 'log', 'timestamp': '2024-05-01T12:00:00Z', 'stream': 'stdout', 'line': 'listening on 8080'}
            c.sendall(chunk(b'id: 2\ndata: ' + json.dumps(log).encode() + b'\n\n'))
            c.sendall(b'0\r\n\r\n')
            return
        ev = {'event': 'Test.Resumed', 'payload': {'lastEventId': last}}
        c.sendall(chunk(b'data: ' + json.dumps(ev).encode() + b'\n\n'))
        while c.recv(65536):
            pass
    except OSError:
        pass
    finally:
        c.close()
def listen(port, late):
    while late and not os.path.exists(os.path.join(os.environ['SHARED'], 'listen-%d' % port)):
        time.sleep(0.02)
    s = socket.socket()
    s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    s.bind((os.environ['POD_IP'], port))
    s.listen(16)
    while True:
        c, _ = s.accept()
        threading.Thread(target=serve, args=(c,), daemon=True).start()
for port in (9231, 9232):
    threading.Thread(target=listen, args=(port, True)).start()
listen(9230, False)
"#;

const LATE: &str = r#"
import os, time, threading, http.server
class H(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        b = ('%s|foo=%s|auth=%s' % (self.path, self.headers.get('X-Foo'),
             'yes' if self.headers.get('Authorization') else 'no')).encode()
        self.send_response(200)
        self.send_header('Content-Length', str(len(b)))
        self.send_header('X-App', 'late')
        self.end_headers()
        self.wfile.write(b)
    def log_message(self, *a):
        pass
def late(port):
    while not os.path.exists(os.path.join(os.environ['SHARED'], 'listen-%d' % port)):
        time.sleep(0.02)
    http.server.ThreadingHTTPServer((os.environ['POD_IP'], port), H).serve_forever()
for port in (18400, 18401):
    threading.Thread(target=late, args=(port,)).start()
"#;

fn pod_json() -> Value {
    let pod_ip =
        json!({"name": "POD_IP", "valueFrom": {"fieldRef": {"fieldPath": "status.podIP"}}});
    let mount = json!([{"name": "shared", "mountPath": "/shared"}]);
    json!({
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": POD, "namespace": "default"},
        "spec": {
            "restartPolicy": "Never",
            "volumes": [{"name": "shared", "emptyDir": {}}],
            "containers": [
                {
                    "name": "app-events",
                    "image": "python:3",
                    "command": ["python3", "-c", EVENTS],
                    "env": [pod_ip, {"name": "SHARED", "value": "/shared"}],
                    "volumeMounts": mount,
                },
                {
                    "name": "app-late",
                    "image": "python:3",
                    "command": ["python3", "-c", LATE],
                    "env": [pod_ip, {"name": "SHARED", "value": "/shared"}],
                    "volumeMounts": mount,
                },
            ],
        },
    })
}

/// The host folder of the pod's `shared` volume (the sim's layout).
fn shared_dir(f: &Fixture) -> PathBuf {
    let pods = f.sim.state_dir.join("pods");
    let prefix = format!("default_{POD}_");
    let dir = std::fs::read_dir(&pods)
        .expect("pods dir")
        .flatten()
        .find(|e| e.file_name().to_string_lossy().starts_with(&prefix))
        .expect("the pod's folder")
        .path();
    let d = dir.join("volumes").join("shared");
    assert!(d.is_dir(), "{}", d.display());
    d
}

fn next<T>(rx: &Receiver<T>, what: &str) -> T {
    rx.recv_timeout(WAIT)
        .unwrap_or_else(|e| panic!("{what}: {e}"))
}

/// Both modes against one sim and one pod, one after the other.
#[test]
fn relay_probe_and_proxy_in_both_access_modes() {
    let f = fixture(pod_json(), WAIT);
    let modes = [(Mode::ApiProxy, 18400, 9231), (Mode::Direct, 18401, 9232)];
    for (mode, late_port, late_events) in modes {
        eprintln!("--- pod access {mode:?}");
        let access = access::from_config(mode, &f.client);
        assert_eq!(access.mode(), mode);
        debug_relay(&f, &access);
        relay_before_the_app_listens(&f, &access, late_events);
        probe_and_proxy(&f, &access, late_port);
    }
}

fn debug_relay(f: &Fixture, access: &Arc<dyn PodAccess>) {
    let (tx, frames) = unbounded();
    let h = relay::start_relay(access.clone(), f.target.clone(), 9230, move |v| {
        let _ = tx.send((Instant::now(), v));
        Ok(())
    });
    let (_, ports) = next(&frames, "the PortsResolved event");
    assert_eq!(
        ports,
        json!({"event": "Kernel.PortsResolved", "payload": {"ports": [{"port": 8080}]}})
    );
    let (ended_at, log) = next(&frames, "the log line");
    assert_eq!(
        log,
        json!({"kind": "log", "timestamp": "2024-05-01T12:00:00Z", "stream": "stdout",
               "line": "listening on 8080"})
    );
    // The stream ended; the relay came back with the last id it saw.
    let (resumed_at, resumed) = next(&frames, "the event after the reconnect");
    assert_eq!(
        resumed,
        json!({"event": "Test.Resumed", "payload": {"lastEventId": "2"}})
    );
    // After a stream that delivered, the first wait (0.5 s).
    let gap = resumed_at - ended_at;
    assert!(
        gap >= Duration::from_millis(450) && gap < Duration::from_secs(10),
        "{gap:?}"
    );
    assert!(!h.is_finished());
    let t0 = Instant::now();
    assert!(h.stop_and_wait(WAIT), "the relay ended");
    assert!(t0.elapsed() < Duration::from_secs(5), "{:?}", t0.elapsed());
    assert!(frames.try_recv().is_err(), "nothing after the stop");
}

/// A relay started while nothing listens: refusals are retried (0.5 s,
/// 1 s, 2 s …) until the stream appears, then frames flow.
fn relay_before_the_app_listens(f: &Fixture, access: &Arc<dyn PodAccess>, port: u16) {
    let (tx, frames) = unbounded();
    let h = relay::start_relay(access.clone(), f.target.clone(), port, move |v| {
        let _ = tx.send(v);
        Ok(())
    });
    // Refused at least once before the trigger (what the relay sees too).
    wait_for("the port refusing", WAIT, || {
        let r = access.probe_tcp(&f.target, port, Duration::from_secs(2));
        (!r.expect("probe")).then_some(())
    });
    assert!(frames.try_recv().is_err());
    std::fs::write(shared_dir(f).join(format!("listen-{port}")), b"").expect("trigger");
    let first = next(&frames, "the first frame once the app listens");
    assert_eq!(first["event"], "Kernel.PortsResolved");
    assert_eq!(next(&frames, "the log line")["kind"], "log");
    drop(h);
}

fn probe_and_proxy(f: &Fixture, access: &Arc<dyn PodAccess>, port: u16) {
    let (tx, states) = unbounded();
    let timings = ProbeTimings {
        interval: Duration::from_millis(200),
        ..ProbeTimings::default()
    };
    let h = probe::start_probe_with(access.clone(), f.target.clone(), port, timings, move |r| {
        let _ = tx.send((Instant::now(), r));
    });
    assert_eq!(next(&states, "checking").1, Reach::Checking);
    // Nothing listens yet.
    assert!(!access
        .probe_tcp(&f.target, port, Duration::from_secs(2))
        .expect("probe"));
    let trigger_at = Instant::now();
    std::fs::write(shared_dir(f).join(format!("listen-{port}")), b"").expect("trigger");
    let (at, state) = next(&states, "reachable");
    assert_eq!(state, Reach::Reachable);
    assert!(at >= trigger_at, "reachable only once listening");
    wait_for("the probe's thread ended", WAIT, || {
        h.is_finished().then_some(())
    });

    // The port proxy helper: the client's Authorization and hop-by-hop
    // headers stay behind (through the API server, an Authorization would
    // even be refused by the seam); the app's answer comes back.
    let headers = [
        (
            "Authorization".to_string(),
            "Bearer kubegate-token".to_string(),
        ),
        ("Connection".to_string(), "keep-alive".to_string()),
        ("X-Foo".to_string(), "bar".to_string()),
    ];
    let r = proxy::proxy_http(
        &**access,
        &f.target,
        port,
        Method::GET,
        "/some/page?q=1",
        &headers,
        None,
    )
    .expect("proxied");
    assert_eq!(r.status, 200);
    assert_eq!(
        String::from_utf8_lossy(&r.body),
        "/some/page?q=1|foo=bar|auth=no"
    );
    assert_eq!(r.header("x-app"), Some("late"));
    assert_eq!(r.header("content-length"), None);
}
