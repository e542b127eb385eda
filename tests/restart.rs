//! The daemon survives its own restart (issue 7; docs/sessions.md#operations,
//! docs/cli.md#kubegate-serve-and-kubegate-check-config): `kubegate serve` in kubeconfig mode
//! against a separate `kubegate sim`, 20 live watch sessions and 5
//! interactive execs; SIGTERM; the execs end with a clear close reason;
//! start again on the same state directory: every session is re-adopted
//! (same pod) and `running`, a viewer reconnecting with the lastSeq it had
//! misses no byte numbered before the restart, the output the apps wrote
//! while the daemon was down arrives (recovered from the container log),
//! an orphan watch pod is reaped after the grace period, and a pod that
//! carries the managed-by label but is no watch pod is not touched.
//!
//! Also here: a panic injected into one session's owner thread (the
//! debug-build test hook) fails that session, visibly, and nothing else.
//!
//! Every wait is a condition with a deadline; a watchdog ends a hung run.

mod common;

use common::bench::watchdog;
use common::daemon::{DaemonProc, SseClient, SseEvent};
use common::{wait_for, SimProc};
use kubegate::exec::frames::{ClientFrame, ServerFrame, SUBPROTOCOL as EXEC_PROTOCOL};
use kubegate::session::io::wire::{decode_frame, SUBPROTOCOL as IO_PROTOCOL};
use serde_json::{json, Value};
use std::collections::BTreeMap;
use std::net::TcpStream;
use std::time::{Duration, Instant};
use tungstenite::Message;

const SESSIONS: usize = 20;
const EXECS: usize = 5;

type Ws = tungstenite::WebSocket<TcpStream>;

fn t(secs: u64) -> Duration {
    Duration::from_secs(secs)
}

fn config(kubeconfig: &std::path::Path, digest: &str) -> String {
    format!(
        r#"[server]
listen = "127.0.0.1:0"
state_dir = "./state"

[cluster]
mode = "kubeconfig"
kubeconfig = "{}"

[sessions]
orphan_grace_secs = 2
max_sessions_per_principal = 32

[[principal]]
name = "demo"
token_sha256 = "{digest}"
workspaces = ["demo/demo-uid"]
may_start_sessions = true
"#,
        kubeconfig.display()
    )
}

/// An app that counts: `tick 1`, `tick 2`, … every 0.3 s.
fn ticker() -> Value {
    json!({
        "apps": [{"name": "tick", "entry": "t.sh", "command": ["sh", "t.sh"], "io": "streams"}],
        "bundle": {"files": [{"path": "t.sh",
            "content": "i=0; while :; do i=$((i+1)); echo \"tick $i\"; sleep 0.3; done"}]}
    })
}

fn statuses(d: &DaemonProc) -> BTreeMap<String, String> {
    let (st, v) = d.json("GET", "/v1/sessions", None);
    assert_eq!(st, 200, "{v}");
    v["sessions"]
        .as_array()
        .expect("sessions")
        .iter()
        .map(|s| {
            (
                s["sessionId"].as_str().unwrap_or("").to_string(),
                s["status"].as_str().unwrap_or("").to_string(),
            )
        })
        .collect()
}

fn all_running(d: &DaemonProc, ids: &[String], within: Duration) {
    wait_for("every session running", within, || {
        let s = statuses(d);
        let bad: Vec<_> = ids
            .iter()
            .filter(|id| s.get(*id).map(String::as_str) != Some("running"))
            .collect();
        assert!(
            !ids.iter()
                .any(|id| s.get(id).map(String::as_str) == Some("failed")),
            "a session failed: {s:?}\n{}",
            d.log_text()
        );
        bad.is_empty().then_some(())
    });
}

/// What an io viewer received.
#[derive(Debug, Default)]
struct Seen {
    frames: BTreeMap<u32, Vec<u8>>,
    gaps: Vec<(u32, u32)>,
    close: Option<(u16, String)>,
}

impl Seen {
    fn last_seq(&self) -> u32 {
        self.frames.keys().next_back().copied().unwrap_or(0)
    }

    /// The tick numbers in seq order.
    fn ticks(&self) -> Vec<u64> {
        let text: Vec<u8> = self.frames.values().flatten().copied().collect();
        String::from_utf8_lossy(&text)
            .lines()
            .filter_map(|l| l.strip_prefix("tick ").and_then(|n| n.parse().ok()))
            .collect()
    }
}

/// Reads one io message into `seen`; false once the socket closed.
fn read_io(ws: &mut Ws, seen: &mut Seen) -> bool {
    match ws.read() {
        Ok(Message::Binary(b)) => {
            let (seq, _, p) = decode_frame(&b).expect("a frame");
            seen.frames.insert(seq, p.to_vec());
            true
        }
        Ok(Message::Text(t)) => {
            let v: Value = serde_json::from_str(t.as_str()).expect("a JSON text frame");
            assert_eq!(v["type"], "gap", "{v}");
            let n = |k: &str| {
                v[k].as_u64()
                    .and_then(|x| u32::try_from(x).ok())
                    .expect("seq")
            };
            seen.gaps.push((n("from"), n("to")));
            true
        }
        Ok(Message::Close(c)) => {
            seen.close = c.map(|c| (u16::from(c.code), c.reason.to_string()));
            false
        }
        Ok(_) => true,
        Err(_) => false,
    }
}

fn open_io(d: &DaemonProc, id: &str, last_seq: Option<u32>) -> Ws {
    let auth = format!("Bearer {}", d.token);
    let q = last_seq.map_or(String::new(), |n| format!("&lastSeq={n}"));
    let (ws, _) = d
        .ws(
            &format!("/v1/sessions/{id}/io?app=tick{q}"),
            &[("Authorization", &auth)],
            &[IO_PROTOCOL],
        )
        .unwrap_or_else(|(st, b)| panic!("{st} {}", String::from_utf8_lossy(&b)));
    ws.get_ref()
        .set_read_timeout(Some(t(30)))
        .expect("read timeout");
    ws
}

/// An interactive `cat` through the exec gateway, proven live by an echo.
fn open_exec(d: &DaemonProc, n: usize) -> Ws {
    let auth = format!("Bearer {}", d.token);
    let (mut ws, _) = d
        .ws(
            "/v1/exec/interactive?project=demo&uid=demo-uid&deployment=hello&command=cat&tty=false",
            &[("Authorization", &auth)],
            &[EXEC_PROTOCOL],
        )
        .unwrap_or_else(|(st, b)| panic!("exec refused: {st} {}", String::from_utf8_lossy(&b)));
    ws.get_ref()
        .set_read_timeout(Some(t(30)))
        .expect("read timeout");
    let ping = format!("ping-{n}\n");
    ws.send(
        ClientFrame::Stdin {
            data: ping.clone().into_bytes(),
            eof: false,
        }
        .encode(),
    )
    .expect("send");
    let mut echoed = Vec::new();
    while !echoed.ends_with(ping.as_bytes()) {
        let m = ws.read().expect("exec output");
        if m.is_text() || m.is_binary() {
            if let Some(ServerFrame::Stdout(b)) = ServerFrame::decode(&m).expect("a frame") {
                echoed.extend_from_slice(&b);
            }
        }
    }
    ws
}

/// Reads an exec stream to its close: the close code and reason.
fn exec_close(mut ws: Ws) -> Option<(u16, String)> {
    loop {
        match ws.read() {
            Ok(Message::Close(c)) => {
                while ws.read().is_ok() {}
                return c.map(|c| (u16::from(c.code), c.reason.to_string()));
            }
            Ok(_) => {}
            Err(_) => return None,
        }
    }
}

/// The sim through kubegate's own client (quicker than a kubectl each).
struct Cluster(kubegate::kube::client::Client);

impl Cluster {
    fn of(sim: &SimProc) -> Cluster {
        let conn = kubegate::kube::connection::Connection::plain(&sim.url);
        Cluster(kubegate::kube::client::Client::new(conn).expect("a client"))
    }

    fn pods(&self, ns: &str) -> kubegate::kube::client::Api<kubegate::kube::client::Pod> {
        kubegate::kube::client::Api::namespaced(&self.0, ns)
    }

    /// The highest `tick N` in a session pod's container log.
    fn logged_ticks(&self, pod: &str) -> u64 {
        let p = kubegate::kube::client::LogParams {
            container: Some("app-tick".into()),
            ..Default::default()
        };
        let log = self
            .pods("default")
            .logs(pod, &p, 1 << 20)
            .expect("the log");
        String::from_utf8_lossy(&log.body)
            .lines()
            .filter_map(|l| l.strip_prefix("tick ").and_then(|n| n.parse().ok()))
            .max()
            .unwrap_or(0)
    }

    fn service(&self, name: &str) -> Option<kubegate::kube::client::Service> {
        kubegate::kube::client::Api::<kubegate::kube::client::Service>::namespaced(
            &self.0, "default",
        )
        .get_opt(name)
        .expect("a Service read")
    }

    fn uid(&self, ns: &str, name: &str) -> Option<String> {
        self.pods(ns)
            .get_opt(name)
            .expect("a pod read")
            .and_then(|p| p.metadata.uid)
    }

    /// A session's pods (by its label).
    fn session_pods(&self, id: &str) -> Vec<String> {
        let l =
            kubegate::kube::client::ListParams::labels(&format!("kubegate.dev/session-id={id}"));
        let mut names: Vec<String> = self
            .pods("default")
            .list(&l)
            .expect("a list")
            .items
            .iter()
            .map(|p| p.metadata.name().to_string())
            .collect();
        names.sort();
        names
    }
}

/// Reconnects each viewer with the seq it had read early on: every frame
/// numbered before the restart comes back as it was, then the ticks
/// written while the daemon was down, then new ones. Returns the ticks
/// recovered from the logs and those duplicated at the attach boundary.
fn check_reconnects(
    d: &DaemonProc,
    k: &Cluster,
    ids: &[String],
    pods: &[String],
    viewers: &[(Ws, Seen, u32)],
    down_ticks: &[u64],
) -> (u64, usize) {
    let mut recovered_ticks = 0;
    let mut duplicates = 0;
    for (i, (id, (_, before, first))) in ids.iter().zip(viewers).enumerate() {
        let want = k.logged_ticks(&pods[i]) + 1;
        let mut ws = open_io(d, id, Some(*first));
        let mut after = Seen::default();
        while after.ticks().last().copied().unwrap_or(0) < want {
            assert!(read_io(&mut ws, &mut after), "session {id}: {after:?}");
        }
        assert!(
            after.gaps.is_empty(),
            "session {id}: the sim's log is always there, so no gap: {:?}",
            after.gaps
        );
        let seqs: Vec<u32> = after.frames.keys().copied().collect();
        let contiguous: Vec<u32> = (first + 1..first + 1 + seqs.len() as u32).collect();
        assert_eq!(seqs, contiguous, "session {id}: frames from lastSeq on");
        for (seq, data) in before.frames.range(first + 1..) {
            assert_eq!(
                after.frames.get(seq),
                Some(data),
                "session {id}: seq {seq} (numbered before the restart)"
            );
        }
        // The ticks run on without a hole: the downtime's were recovered.
        let ticks = after.ticks();
        for w in ticks.windows(2) {
            assert!(
                w[1] == w[0] + 1 || w[1] == w[0],
                "session {id}: tick {} then {}: {ticks:?}",
                w[0],
                w[1]
            );
            duplicates += usize::from(w[1] == w[0]);
        }
        // Those written while the daemon was down are all there.
        let last_before = before.ticks().last().copied().unwrap_or(0);
        for n in last_before + 1..=down_ticks[i] {
            assert!(ticks.contains(&n), "session {id}: tick {n}: {ticks:?}");
            recovered_ticks += 1;
        }
    }
    (recovered_ticks, duplicates)
}

#[test]
fn a_restart_re_adopts_every_session_without_losing_output_and_reaps_only_orphans() {
    let _dog = watchdog("the restart test", 240);
    let began = Instant::now();
    let sim = SimProc::start(&["--namespace", "demo"]);
    sim.apply(&kubegate::server::demo::demo_deployment(
        "kubegate",
        "kubegate.dev/workspace-uid",
    ));
    // A pod that carries the managed-by label and a session id but is no
    // watch pod (an exec target's shape): never the reaper's.
    sim.apply(&json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": "exec-target", "namespace": "default", "labels": {
            "app.kubernetes.io/managed-by": "kubegate",
            "kubegate.dev/session-id": "zzzzzzzzzzzz"}},
        "spec": {"containers": [{"name": "main", "image": "busybox",
            "command": ["sh", "-c", "trap 'exit 0' TERM; while :; do sleep 1; done"]}]}
    }));
    wait_for("the exec targets running", t(60), || {
        let d = sim.kubectl_json(&["-n", "demo", "get", "deployment", "hello"]);
        let p = sim.kubectl_json(&["-n", "default", "get", "pod", "exec-target"]);
        (d["status"]["readyReplicas"] == 1 && p["status"]["phase"] == "Running").then_some(())
    });
    let k = Cluster::of(&sim);
    let target_uid = k.uid("default", "exec-target").expect("its uid");

    let (token, digest) = common::daemon::random_token();
    let mut d = DaemonProc::start_config(
        &config(&sim.kubeconfig, &digest),
        sim.kubeconfig.clone(),
        &token,
        "info",
    );
    let ids: Vec<String> = (0..SESSIONS)
        .map(|i| {
            // The first declares a port: it has a Service to reconcile.
            let mut body = ticker();
            if i == 0 {
                body["apps"][0]["ports"] = json!([{"port": 8080}]);
            }
            let (st, v) = d.json("POST", "/v1/sessions", Some(&body));
            assert_eq!(st, 201, "{v}");
            v["sessionId"].as_str().expect("sessionId").to_string()
        })
        .collect();
    all_running(&d, &ids, t(120));
    let pods: Vec<String> = ids
        .iter()
        .map(|id| k.session_pods(id).pop().expect("a pod"))
        .collect();
    let up = began.elapsed();
    let service = format!("kubegate-run-{}", ids[0]);
    let svc_before = k.service(&service).expect("the first session's Service");

    let execs: Vec<Ws> = (0..EXECS).map(|n| open_exec(&d, n)).collect();
    // Each viewer reads a few ticks; `first` is the seq it had then.
    let mut viewers: Vec<(Ws, Seen, u32)> = ids
        .iter()
        .map(|id| {
            let mut ws = open_io(&d, id, None);
            let mut seen = Seen::default();
            while seen.ticks().len() < 2 {
                assert!(read_io(&mut ws, &mut seen), "{seen:?}");
            }
            let first = seen.last_seq();
            (ws, seen, first)
        })
        .collect();

    // SIGTERM: execs and viewers are told why, the daemon exits 0.
    let readers: Vec<_> = execs
        .into_iter()
        .map(|ws| std::thread::spawn(move || exec_close(ws)))
        .collect();
    let stopping = Instant::now();
    assert_eq!(d.stop(), Some(0), "daemon log:\n{}", d.log_text());
    let stop_took = stopping.elapsed();
    for r in readers {
        let close = r.join().expect("an exec reader");
        assert_eq!(
            close,
            Some((1001, "server shutting down".to_string())),
            "an exec's close"
        );
    }
    for (ws, seen, _) in &mut viewers {
        while read_io(ws, seen) {}
        let (code, reason) = seen.close.clone().expect("a close frame");
        assert_eq!(code, 1001, "{reason}");
        assert!(reason.contains("lastSeq"), "{reason}");
    }

    // While the daemon is down: an orphan watch pod appears, and the apps
    // go on writing (two more ticks in the first one's log at least).
    sim.apply(&json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": "orphan", "namespace": "default", "labels": {
            "app.kubernetes.io/managed-by": "kubegate",
            "kubegate.dev/mode": "watch",
            "kubegate.dev/session-id": "orphan000000"}},
        "spec": {"containers": [{"name": "main", "image": "busybox",
            "command": ["sh", "-c", "trap 'exit 0' TERM; while :; do sleep 1; done"]}]}
    }));
    let ticks_at_stop = viewers[0].1.ticks().last().copied().unwrap_or(0);
    wait_for("output written while the daemon is down", t(30), || {
        (k.logged_ticks(&pods[0]) >= ticks_at_stop + 2).then_some(())
    });
    // Ticks each app had written by now: all of them are to come back.
    let down_ticks: Vec<u64> = pods.iter().map(|p| k.logged_ticks(p)).collect();

    let restarting = Instant::now();
    d.restart("info");
    all_running(&d, &ids, t(60));
    let readopt_took = restarting.elapsed();
    for (id, pod) in ids.iter().zip(&pods) {
        assert_eq!(
            k.session_pods(id),
            std::slice::from_ref(pod),
            "re-adopted, not recreated"
        );
    }
    // The Service was reconciled in place (same object, same port), not
    // deleted and made again.
    let svc_after = k.service(&service).expect("the Service after the restart");
    assert_eq!(svc_after.metadata.uid, svc_before.metadata.uid);
    let ports: Vec<i32> = svc_after
        .spec
        .iter()
        .flat_map(|s| s.ports.iter().flatten())
        .map(|p| p.port)
        .collect();
    assert_eq!(ports, [8080]);
    assert!(
        std::fs::read_dir(d.dir.join("state").join("sessions"))
            .expect("the sessions folder")
            .flatten()
            .all(|e| !e.file_name().to_string_lossy().ends_with(".io")),
        "the loaded rings are removed once the daemon serves"
    );

    // Reconnect with the seq each viewer had read early on: every frame
    // numbered before the restart comes back as it was, then the ticks
    // written while the daemon was down, then new ones.
    let (recovered_ticks, duplicates) =
        check_reconnects(&d, &k, &ids, &pods, &viewers, &down_ticks);
    assert!(
        recovered_ticks >= 2,
        "the downtime's output came back: {recovered_ticks} ticks"
    );

    // The orphan is reaped after its grace period; the exec targets stay.
    wait_for("the orphan watch pod to be reaped", t(30), || {
        k.uid("default", "orphan").is_none().then_some(())
    });
    assert_eq!(
        k.uid("default", "exec-target").as_deref(),
        Some(target_uid.as_str()),
        "the exec-target pod is untouched"
    );
    let hello = sim.kubectl_json(&["-n", "demo", "get", "pods", "-l", "app=hello"]);
    assert_eq!(hello["items"].as_array().map(Vec::len), Some(1), "{hello}");
    assert!(d.log_text().contains("orphan reaper: deleting pod orphan"));

    assert_eq!(d.stop(), Some(0), "daemon log:\n{}", d.log_text());
    println!(
        "{SESSIONS} sessions + {EXECS} execs: up in {:.1} s, stop {:.2} s, restart to all running {:.2} s, \
         {recovered_ticks} ticks recovered from logs, {duplicates} duplicated at the attach boundary, total {:.1} s",
        up.as_secs_f64(),
        stop_took.as_secs_f64(),
        readopt_took.as_secs_f64(),
        began.elapsed().as_secs_f64()
    );
}

fn status_of(e: &SseEvent) -> Option<&str> {
    (e.event == "status")
        .then(|| e.data["status"].as_str())
        .flatten()
}

/// The test hook (debug builds, `KUBEGATE_TEST_HOOKS=1`) makes one
/// session's owner thread panic: that session fails visibly (status,
/// event, record, viewers closed, pod deleted) while another session and
/// the daemon go on.
#[test]
fn a_panic_in_one_sessions_thread_fails_that_session_and_nothing_else() {
    let _dog = watchdog("the panic test", 180);
    let d = DaemonProc::start_with_env(|c| c, "info", &[("KUBEGATE_TEST_HOOKS", "1")]);
    let (victim, mut sse) = d.create_session(&ticker());
    let (other, mut other_sse) = d.create_session(&ticker());
    for s in [&mut sse, &mut other_sse] {
        let seen = s.until(|e| matches!(status_of(e), Some("running" | "failed")));
        assert_eq!(
            seen.last().and_then(status_of),
            Some("running"),
            "{seen:#?}"
        );
    }
    let mut ws = open_io(&d, &victim, None);
    let mut seen = Seen::default();
    while seen.frames.is_empty() {
        assert!(read_io(&mut ws, &mut seen));
    }

    let (st, _) = d.request(
        "POST",
        &format!("/v1/sessions/{victim}/debug/panic"),
        Some(&d.token),
        Some(b""),
    );
    assert_eq!(st, 202);

    let ev = sse.until(|e| status_of(e).is_some());
    let last = ev.last().expect("a status event");
    assert_eq!(status_of(last), Some("failed"), "{ev:#?}");
    assert_eq!(last.data["error"]["stage"], "run");
    let msg = last.data["error"]["message"].as_str().unwrap_or("");
    assert!(msg.contains("panicked"), "{msg}");
    assert!(
        sse.next().is_none(),
        "the stream ends after the terminal status"
    );
    let (st, v) = d.json("GET", &format!("/v1/sessions/{victim}"), None);
    assert_eq!((st, v["status"].as_str()), (200, Some("failed")), "{v}");
    while read_io(&mut ws, &mut seen) {}
    assert_eq!(seen.close.as_ref().map(|c| c.0), Some(1011), "{seen:?}");
    let record: Value = serde_json::from_slice(
        &std::fs::read(
            d.dir
                .join("state")
                .join("sessions")
                .join(format!("{victim}.json")),
        )
        .expect("the record"),
    )
    .expect("record JSON");
    assert_eq!(record["status"]["status"], "failed", "{record}");
    wait_for("the failed session's pod to be deleted", t(30), || {
        d.session_pods(&victim).is_empty().then_some(())
    });
    assert!(!d.session_pods(&other).is_empty());

    // The other session and the daemon go on.
    let (st, v) = d.json("GET", &format!("/v1/sessions/{other}"), None);
    assert_eq!((st, v["status"].as_str()), (200, Some("running")), "{v}");
    let mut ows = open_io(&d, &other, None);
    let mut oseen = Seen::default();
    while oseen.ticks().len() < 2 {
        assert!(read_io(&mut ows, &mut oseen), "{oseen:?}");
    }
    let (st, v) = d.json("POST", "/v1/sessions", Some(&ticker()));
    assert_eq!(st, 201, "a new session after the panic: {v}");
    let mut third = SseClient::open(
        &d,
        &format!(
            "/v1/sessions/{}/events",
            v["sessionId"].as_str().unwrap_or("")
        ),
        None,
    );
    let seen3 = third.until(|e| matches!(status_of(e), Some("running" | "failed")));
    assert_eq!(
        seen3.last().and_then(status_of),
        Some("running"),
        "{seen3:#?}"
    );
    // The hook is not there for a session that has ended.
    let (st, _) = d.request(
        "POST",
        &format!("/v1/sessions/{victim}/debug/panic"),
        Some(&d.token),
        Some(b""),
    );
    assert_ne!(st, 202);
}

/// Without `KUBEGATE_TEST_HOOKS=1` the hook's route does not exist.
#[test]
fn the_panic_hook_is_off_unless_asked_for() {
    let _dog = watchdog("the hook-off test", 120);
    let d = DaemonProc::start();
    let (id, mut sse) = d.create_session(&ticker());
    let seen = sse.until(|e| matches!(status_of(e), Some("running" | "failed")));
    assert_eq!(
        seen.last().and_then(status_of),
        Some("running"),
        "{seen:#?}"
    );
    let (st, _) = d.request(
        "POST",
        &format!("/v1/sessions/{id}/debug/panic"),
        Some(&d.token),
        Some(b""),
    );
    assert_eq!(st, 404);
    let (st, v) = d.json("GET", &format!("/v1/sessions/{id}"), None);
    assert_eq!((st, v["status"].as_str()), (200, Some("running")), "{v}");
}
