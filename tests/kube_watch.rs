//! The resuming watch (`kube::client::Watcher`) against the simulated cluster
//! and against a tiny scripted HTTP server: event order, resume after
//! dropped watches with no loss and no duplicates, 410 relists (as an ERROR
//! event inside a 200 and as an HTTP 410), bookmarks advancing the resume
//! point, single-object watches, a silently dead connection, and `stop()`.
//!
//! The cases that need no fault injection run on two backends
//! (`two_backends!`, tests/common/backend.rs): a sim of their own, and the
//! run's real control plane (docs/control-plane.md).
//!
//! Every watcher runs on its own thread and hands its items over a channel;
//! the test waits on the channel with deadlines (the watchdog), and stops the
//! watcher at the end, so nothing can hang the test binary.

mod common;

use common::backend::Backend;
use common::{wait_for, SimProc};
use kubegate::kube::client::{
    Api, Client, ConfigMap, KubeError, ListParams, Resource, WatchEvent, WatchParams, WatchStopper,
};
use kubegate::kube::connection::Connection;
use kubegate::kube::meta::ObjectMeta;
use parking_lot::Mutex;
use serde_json::{json, Value};
use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::{channel, Receiver, RecvTimeoutError, Sender};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

type Item = Result<WatchEvent<ConfigMap>, KubeError>;

// ------------------------------------------------------------ helpers

fn plain() -> (SimProc, Client) {
    let sim = SimProc::start(&[]);
    let client = Client::new(Connection::plain(&sim.url)).expect("client");
    (sim, client)
}

fn agent() -> ureq::Agent {
    ureq::Agent::config_builder()
        .proxy(None)
        .http_status_as_error(false)
        .build()
        .new_agent()
}

fn fault(sim: &SimProc, body: Value) {
    let resp = agent()
        .post(format!("{}/sim/faults", sim.url))
        .send_json(&body)
        .expect("faults");
    assert_eq!(resp.status().as_u16(), 200, "fault {body} refused");
}

fn cm(name: &str, data: &[(&str, &str)]) -> ConfigMap {
    ConfigMap {
        metadata: ObjectMeta {
            name: Some(name.into()),
            ..ObjectMeta::default()
        },
        data: Some(
            data.iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect(),
        ),
        ..ConfigMap::default()
    }
}

/// A watcher on its own thread, forwarding items; `gate` (when given) is
/// awaited after each forwarded item, so the test can pause consumption.
struct Running {
    rx: Receiver<Item>,
    stopper: WatchStopper,
    thread: Option<JoinHandle<()>>,
}

impl Running {
    fn start(w: kubegate::kube::client::Watcher<ConfigMap>, gate: Option<Receiver<()>>) -> Running {
        let stopper = w.stopper();
        let (tx, rx) = channel();
        let thread = std::thread::spawn(move || forward(w, tx, gate));
        Running {
            rx,
            stopper,
            thread: Some(thread),
        }
    }

    /// The next item, or a panic after `timeout` (the watchdog).
    fn next(&self, what: &str, timeout: Duration) -> Item {
        match self.rx.recv_timeout(timeout) {
            Ok(i) => i,
            Err(RecvTimeoutError::Timeout) => panic!("no watch item ({what}) within {timeout:?}"),
            Err(RecvTimeoutError::Disconnected) => panic!("the watch ended ({what})"),
        }
    }

    fn next_event(&self, what: &str, timeout: Duration) -> WatchEvent<ConfigMap> {
        match self.next(what, timeout) {
            Ok(e) => e,
            Err(e) => panic!("watch error ({what}): {e:?}"),
        }
    }

    /// Stops the watcher and checks the thread ends promptly.
    fn stop(mut self) {
        self.stopper.stop();
        let t = self.thread.take().expect("thread");
        let deadline = Instant::now() + Duration::from_secs(5);
        while !t.is_finished() {
            assert!(Instant::now() < deadline, "the watcher did not stop");
            std::thread::sleep(Duration::from_millis(5));
        }
        let _ = t.join();
    }
}

impl Drop for Running {
    fn drop(&mut self) {
        self.stopper.stop();
    }
}

fn forward(
    w: kubegate::kube::client::Watcher<ConfigMap>,
    tx: Sender<Item>,
    gate: Option<Receiver<()>>,
) {
    for item in w {
        if tx.send(item).is_err() {
            return;
        }
        if let Some(g) = &gate {
            if g.recv().is_err() {
                return;
            }
        }
    }
}

fn rv_of(cm: &ConfigMap) -> u64 {
    cm.resource_version()
        .and_then(|r| r.parse().ok())
        .expect("numeric resourceVersion")
}

fn describe(e: &WatchEvent<ConfigMap>) -> (String, String, u64) {
    match e {
        WatchEvent::Added(c) => ("ADDED".into(), c.metadata.name().into(), rv_of(c)),
        WatchEvent::Modified(c) => ("MODIFIED".into(), c.metadata.name().into(), rv_of(c)),
        WatchEvent::Deleted(c) => ("DELETED".into(), c.metadata.name().into(), rv_of(c)),
        WatchEvent::Resynced {
            resource_version, ..
        } => (
            "RESYNCED".into(),
            String::new(),
            resource_version.parse().unwrap_or(0),
        ),
    }
}

// ------------------------------------ on two backends (sim and real)

two_backends!(added_modified_deleted_in_order, 120);
fn added_modified_deleted_in_order(b: &Backend) {
    let cms = Api::<ConfigMap>::namespaced(&b.client, &b.ns);
    cms.create(&cm("before", &[])).expect("create");
    let w = Running::start(cms.watch(WatchParams::default()), None);

    // No starting RV: a list first, as a Resynced snapshot.
    match w.next_event("initial list", Duration::from_secs(10)) {
        WatchEvent::Resynced {
            items,
            resource_version,
        } => {
            // (The real plane's controller-manager puts kube-root-ca.crt
            // in every namespace.)
            let names: Vec<&str> = items
                .iter()
                .map(|c| c.metadata.name())
                .filter(|n| *n != "kube-root-ca.crt")
                .collect();
            assert_eq!(names, ["before"]);
            assert!(!resource_version.is_empty());
        }
        other => panic!("{other:?}"),
    }
    let created = cms.create(&cm("x", &[("a", "1")])).expect("create");
    let patched = cms
        .patch_merge("x", &json!({"data": {"a": "2"}}))
        .expect("patch");
    cms.delete("x", &Default::default()).expect("delete");
    let got: Vec<(String, String, u64)> = (0..3)
        .map(|_| describe(&w.next_event("x events", Duration::from_secs(10))))
        .collect();
    assert_eq!(got[0], ("ADDED".into(), "x".into(), rv_of(&created)));
    assert_eq!(got[1], ("MODIFIED".into(), "x".into(), rv_of(&patched)));
    assert_eq!(got[2].0, "DELETED");
    assert!(got[2].2 > got[1].2);
    w.stop();
}

#[test]
fn survives_dropped_watches_without_loss_or_duplicates() {
    let (sim, client) = plain();
    let cms = Api::<ConfigMap>::namespaced(&client, "default");
    let watcher = cms.watch(WatchParams::default());
    let stats = watcher.stats();
    let w = Running::start(watcher, None);
    assert!(matches!(
        w.next_event("initial list", Duration::from_secs(10)),
        WatchEvent::Resynced { .. }
    ));

    // Drop every watch each second, and a few more times by hand, while a
    // writer makes N changes, recording each change's resourceVersion.
    fault(&sim, json!({"dropWatchesEverySecs": 1}));
    const N: usize = 300;
    let mut written: Vec<u64> = Vec::with_capacity(N);
    for i in 0..N {
        let name = format!("c{}", i % 10);
        let obj = if i < 10 {
            cms.create(&cm(&name, &[("i", &i.to_string())]))
        } else if i % 7 == 0 && i >= 20 {
            // delete and re-create later
            cms.delete(&name, &Default::default())
                .map(|_| cms.create(&cm(&name, &[("i", &i.to_string())])))
                .and_then(|r| r)
        } else {
            cms.patch_merge(&name, &json!({"data": {"i": i.to_string()}}))
        }
        .expect("write");
        if i % 7 == 0 && i >= 20 {
            // The delete made a change too: its RV is just before the create's.
            written.push(rv_of(&obj) - 1);
        }
        written.push(rv_of(&obj));
        if i % 50 == 25 {
            fault(&sim, json!({"dropWatches": true}));
        }
        // Pace the writer so the drops land in the middle of the changes.
        std::thread::sleep(Duration::from_millis(10));
    }
    fault(&sim, json!({"dropWatchesEverySecs": 0}));

    let last = *written.last().expect("writes");
    let mut seen: Vec<u64> = Vec::new();
    let deadline = Instant::now() + Duration::from_secs(60);
    while seen.last().copied().unwrap_or(0) < last {
        let left = deadline.saturating_duration_since(Instant::now());
        let ev = w.next_event("the writer's changes", left);
        let (ty, _, rv) = describe(&ev);
        assert_ne!(ty, "RESYNCED", "no relist was needed");
        seen.push(rv);
    }
    assert_eq!(seen.len(), written.len(), "lost or duplicated events");
    assert_eq!(seen, written, "every change once, in resourceVersion order");
    // How many drops land while the watcher is connected (rather than in
    // its reconnect back-off) depends on timing; at least one must have.
    let opens = stats.opens.load(Ordering::Relaxed);
    assert!(opens >= 2, "the watch was never re-opened ({opens} opens)");
    assert_eq!(stats.relists.load(Ordering::Relaxed), 1);
    w.stop();
}

#[test]
fn relists_after_410_with_resynced_marker() {
    let (_sim, client) = plain();
    let cms = Api::<ConfigMap>::namespaced(&client, "default");
    // Big objects fill the socket buffers quickly, so a paused reader is
    // cut off by the server (its queue overflows) well inside the churn.
    let blob = "x".repeat(16 * 1024);
    const WRITERS: usize = 4;
    for i in 0..WRITERS {
        cms.create(&cm(&format!("w{i}"), &[("blob", &blob), ("n", "0")]))
            .expect("create");
    }
    let first_rv = cms
        .list(&ListParams::default())
        .expect("list")
        .resource_version()
        .to_string();

    let (gate_tx, gate_rx) = channel();
    let watcher = cms.watch(WatchParams::default());
    let stats = watcher.stats();
    let w = Running::start(watcher, Some(gate_rx));
    assert!(matches!(
        w.next_event("initial list", Duration::from_secs(10)),
        WatchEvent::Resynced { .. }
    ));
    gate_tx.send(()).expect("gate");
    cms.patch_merge("w0", &json!({"data": {"n": "start"}}))
        .expect("patch");
    assert!(matches!(
        w.next_event("first change", Duration::from_secs(10)),
        WatchEvent::Modified(_)
    ));
    // The watcher is now paused (gate closed) with its watch open.

    // Churn well past the 5,000-change history window.
    const PER_WRITER: usize = 1_900;
    let writers: Vec<_> = (0..WRITERS)
        .map(|i| {
            let cms = cms.clone();
            std::thread::spawn(move || {
                for n in 1..=PER_WRITER {
                    cms.patch_merge(&format!("w{i}"), &json!({"data": {"n": n.to_string()}}))
                        .expect("churn");
                }
            })
        })
        .collect();
    for t in writers {
        t.join().expect("writer");
    }

    // Resume: buffered events, then the cut-off stream, a 410 on
    // re-watching from a too-old RV, a relist, and the Resynced marker.
    let deadline = Instant::now() + Duration::from_secs(60);
    let resynced = loop {
        let _ = gate_tx.send(());
        let left = deadline.saturating_duration_since(Instant::now());
        match w.next_event("a Resynced after the 410", left) {
            WatchEvent::Resynced {
                items,
                resource_version,
            } => break (items, resource_version),
            WatchEvent::Modified(_) => {}
            other => panic!("{other:?}"),
        }
    };
    let (items, rv) = resynced;
    assert_eq!(items.len(), WRITERS);
    for c in &items {
        assert_eq!(
            c.data.as_ref().and_then(|d| d.get("n")).map(String::as_str),
            Some(PER_WRITER.to_string().as_str()),
            "the snapshot is the final state"
        );
    }
    assert!(rv.parse::<u64>().expect("rv") >= (WRITERS * PER_WRITER) as u64);
    assert_eq!(stats.relists.load(Ordering::Relaxed), 2);

    // And the watch goes on from the list's RV.
    let _ = gate_tx.send(());
    let after = cms
        .patch_merge("w1", &json!({"data": {"n": "after"}}))
        .expect("patch");
    loop {
        let _ = gate_tx.send(());
        match w.next_event("the change after the relist", Duration::from_secs(10)) {
            WatchEvent::Modified(c) if rv_of(&c) == rv_of(&after) => break,
            WatchEvent::Modified(c) => assert!(rv_of(&c) < rv_of(&after)),
            other => panic!("{other:?}"),
        }
    }
    drop(gate_tx);
    w.stop();

    // Starting from a resourceVersion that is long gone: 410 at once
    // (an ERROR event inside a 200), then the relist.
    let w = Running::start(
        cms.watch(WatchParams::default().from_version(&first_rv)),
        None,
    );
    match w.next_event("Resynced from an expired start", Duration::from_secs(10)) {
        WatchEvent::Resynced { items, .. } => assert_eq!(items.len(), WRITERS),
        other => panic!("{other:?}"),
    }
    w.stop();
}

two_backends!(single_object_watch_by_field_selector, 120);
fn single_object_watch_by_field_selector(b: &Backend) {
    let cms = Api::<ConfigMap>::namespaced(&b.client, &b.ns);
    cms.create(&cm("a", &[])).expect("a");
    cms.create(&cm("b", &[])).expect("b");
    let w = Running::start(cms.watch_object("a", WatchParams::default()), None);
    match w.next_event("list of a", Duration::from_secs(10)) {
        WatchEvent::Resynced { items, .. } => {
            let names: Vec<&str> = items.iter().map(|c| c.metadata.name()).collect();
            assert_eq!(names, ["a"]);
        }
        other => panic!("{other:?}"),
    }
    cms.patch_merge("b", &json!({"data": {"k": "1"}}))
        .expect("b");
    cms.patch_merge("a", &json!({"data": {"k": "1"}}))
        .expect("a");
    cms.patch_merge("b", &json!({"data": {"k": "2"}}))
        .expect("b");
    cms.delete("a", &Default::default()).expect("delete a");
    let e1 = describe(&w.next_event("a modified", Duration::from_secs(10)));
    let e2 = describe(&w.next_event("a deleted", Duration::from_secs(10)));
    assert_eq!((e1.0.as_str(), e1.1.as_str()), ("MODIFIED", "a"));
    assert_eq!((e2.0.as_str(), e2.1.as_str()), ("DELETED", "a"));
    // Nothing about b arrives.
    match w.rx.recv_timeout(Duration::from_millis(500)) {
        Err(RecvTimeoutError::Timeout) => {}
        other => panic!("unexpected {other:?}"),
    }
    w.stop();
}

two_backends!(stop_ends_a_blocked_watch_promptly, 120);
fn stop_ends_a_blocked_watch_promptly(b: &Backend) {
    let cms = Api::<ConfigMap>::namespaced(&b.client, &b.ns);
    let w = Running::start(cms.watch(WatchParams::default()), None);
    assert!(matches!(
        w.next_event("initial list", Duration::from_secs(10)),
        WatchEvent::Resynced { .. }
    ));
    // The watcher is now blocked reading a quiet watch (wait until the
    // watch request is open: one change goes through).
    cms.create(&cm("one", &[])).expect("create");
    w.next_event("one", Duration::from_secs(10));
    let t0 = Instant::now();
    w.stop();
    assert!(t0.elapsed() < Duration::from_secs(2), "{:?}", t0.elapsed());
}

two_backends!(bookmarks_before_the_timeout_carry_the_watch_on, 120);
/// The server ends a watch at its `timeoutSeconds`; with bookmarks
/// allowed it first sends a BOOKMARK at the resourceVersion it has reached
/// (upstream's watch cache: 2 s before the deadline, and only once the
/// resource's resourceVersion has moved past what the watcher saw; the sim:
/// at the deadline). The watcher resumes from it: no relist, and the next
/// change arrives once.
///
/// (A 410 is not provoked on the real plane: its watch cache serves a watch
/// from any resourceVersion while it has dropped no event since it started
/// — from `resourceVersion=1` too, as ADDED events for what exists — and
/// drops events only past its capacity and 75 s of age, so a quick 410
/// needs the sim's small history window:
/// `relists_after_410_with_resynced_marker`.)
fn bookmarks_before_the_timeout_carry_the_watch_on(b: &Backend) {
    let cms = Api::<ConfigMap>::namespaced(&b.client, &b.ns);
    let params = WatchParams {
        timeout: Duration::from_secs(6),
        ..WatchParams::default()
    };
    let watcher = cms.watch(params);
    let stats = watcher.stats();
    let w = Running::start(watcher, None);
    let list_rv = match w.next_event("initial list", Duration::from_secs(10)) {
        WatchEvent::Resynced {
            resource_version, ..
        } => resource_version
            .parse::<u64>()
            .expect("numeric resourceVersion"),
        other => panic!("{other:?}"),
    };
    // Move ConfigMaps' resourceVersion on without touching this namespace.
    let elsewhere = Api::<ConfigMap>::namespaced(&b.client, "default");
    let marker = format!("{}-elsewhere", b.ns);
    elsewhere
        .create(&cm(&marker, &[]))
        .expect("create elsewhere");
    wait_for(
        "a bookmark, then the watch re-opened after its timeout",
        Duration::from_secs(30),
        || {
            (stats.bookmarks.load(Ordering::Relaxed) >= 1
                && stats.opens.load(Ordering::Relaxed) >= 2)
                .then_some(())
        },
    );
    // Nothing was yielded for the bookmark or the re-open.
    assert!(matches!(
        w.rx.recv_timeout(Duration::from_millis(10)),
        Err(RecvTimeoutError::Timeout)
    ));
    let after = cms.create(&cm("after", &[])).expect("create");
    let (ty, name, rv) =
        describe(&w.next_event("the change after the re-open", Duration::from_secs(10)));
    assert_eq!((ty.as_str(), name.as_str()), ("ADDED", "after"));
    assert_eq!(rv, rv_of(&after));
    assert!(rv > list_rv);
    assert_eq!(
        stats.relists.load(Ordering::Relaxed),
        1,
        "resumed, not relisted"
    );
    w.stop();
    elsewhere
        .delete(&marker, &Default::default())
        .expect("delete elsewhere");
}

// -------------------------------------------- a scripted fake server

/// What the fake server does with one request.
enum Reply {
    /// Write these bytes, then close.
    Close(Vec<u8>),
    /// Write these bytes, then keep the connection open and silent.
    Hang(Vec<u8>),
}

struct FakeApi {
    url: String,
    requests: Arc<Mutex<Vec<(Instant, String)>>>,
    stop: Arc<AtomicBool>,
}

impl Drop for FakeApi {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::SeqCst);
    }
}

/// A tiny HTTP/1.1 server: `handler(n, request_target)` answers the n-th
/// request (0-based).
fn fake_api(handler: impl Fn(usize, &str) -> Reply + Send + Sync + 'static) -> FakeApi {
    let listener = TcpListener::bind("127.0.0.1:0").expect("bind");
    let url = format!("http://{}", listener.local_addr().expect("addr"));
    listener.set_nonblocking(true).expect("nonblocking");
    let requests: Arc<Mutex<Vec<(Instant, String)>>> = Arc::default();
    let stop = Arc::new(AtomicBool::new(false));
    let handler = Arc::new(handler);
    {
        let requests = requests.clone();
        let stop = stop.clone();
        std::thread::spawn(move || {
            let mut held: Vec<TcpStream> = Vec::new();
            while !stop.load(Ordering::SeqCst) {
                let mut s = match listener.accept() {
                    Ok((s, _)) => s,
                    Err(_) => {
                        std::thread::sleep(Duration::from_millis(5));
                        continue;
                    }
                };
                let _ = s.set_nonblocking(false);
                let _ = s.set_read_timeout(Some(Duration::from_secs(5)));
                let mut head = Vec::new();
                let mut b = [0u8; 1];
                while !head.ends_with(b"\r\n\r\n") {
                    match s.read(&mut b) {
                        Ok(1) => head.push(b[0]),
                        _ => break,
                    }
                }
                let line = String::from_utf8_lossy(&head)
                    .lines()
                    .next()
                    .unwrap_or("")
                    .to_string();
                let target = line.split(' ').nth(1).unwrap_or("").to_string();
                let n = {
                    let mut r = requests.lock();
                    r.push((Instant::now(), target.clone()));
                    r.len() - 1
                };
                match handler(n, &target) {
                    Reply::Close(bytes) => {
                        let _ = s.write_all(&bytes);
                    }
                    Reply::Hang(bytes) => {
                        let _ = s.write_all(&bytes);
                        held.push(s);
                    }
                }
            }
        });
    }
    FakeApi {
        url,
        requests,
        stop,
    }
}

fn chunk(data: &[u8]) -> Vec<u8> {
    let mut v = format!("{:x}\r\n", data.len()).into_bytes();
    v.extend_from_slice(data);
    v.extend_from_slice(b"\r\n");
    v
}

const WATCH_HEAD: &str =
    "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nTransfer-Encoding: chunked\r\n\r\n";

fn event(ty: &str, name: &str, rv: u64) -> String {
    format!(
        "{{\"type\":\"{ty}\",\"object\":{{\"kind\":\"ConfigMap\",\"apiVersion\":\"v1\",\"metadata\":{{\"name\":\"{name}\",\"namespace\":\"default\",\"resourceVersion\":\"{rv}\"}}}}}}\n"
    )
}

fn bookmark(rv: u64) -> String {
    format!(
        "{{\"type\":\"BOOKMARK\",\"object\":{{\"kind\":\"ConfigMap\",\"apiVersion\":\"v1\",\"metadata\":{{\"resourceVersion\":\"{rv}\",\"creationTimestamp\":null}}}}}}\n"
    )
}

fn json_response(code: u16, body: &str) -> Vec<u8> {
    format!(
        "HTTP/1.1 {code} X\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    )
    .into_bytes()
}

fn query_rv(target: &str) -> Option<String> {
    target
        .split(['?', '&'])
        .find_map(|kv| kv.strip_prefix("resourceVersion="))
        .map(str::to_string)
}

#[test]
fn bookmarks_advance_the_resume_point_and_are_not_yielded() {
    let api = fake_api(|n, _target| match n {
        0 => {
            // One event split across chunks, bookmarks around it, a clean end.
            let ev = event("ADDED", "x", 21);
            let (a, b) = ev.as_bytes().split_at(17);
            let mut out = WATCH_HEAD.as_bytes().to_vec();
            out.extend(chunk(bookmark(20).as_bytes()));
            out.extend(chunk(a));
            out.extend(chunk(b));
            out.extend(chunk(bookmark(30).as_bytes()));
            out.extend(b"0\r\n\r\n");
            Reply::Close(out)
        }
        _ => {
            let mut out = WATCH_HEAD.as_bytes().to_vec();
            out.extend(chunk(event("MODIFIED", "x", 31).as_bytes()));
            Reply::Hang(out)
        }
    });
    let client = Client::new(Connection::plain(&api.url)).expect("client");
    let cms = Api::<ConfigMap>::namespaced(&client, "default");
    let w = Running::start(cms.watch(WatchParams::default().from_version("10")), None);
    let e1 = describe(&w.next_event("x added", Duration::from_secs(10)));
    assert_eq!(e1, ("ADDED".into(), "x".into(), 21));
    let e2 = describe(&w.next_event("x modified", Duration::from_secs(10)));
    assert_eq!(e2, ("MODIFIED".into(), "x".into(), 31));
    let reqs = api.requests.lock().clone();
    assert_eq!(query_rv(&reqs[0].1).as_deref(), Some("10"));
    assert!(
        reqs[0].1.contains("allowWatchBookmarks=true"),
        "{}",
        reqs[0].1
    );
    assert!(reqs[0].1.contains("timeoutSeconds=290"), "{}", reqs[0].1);
    assert!(reqs[0].1.contains("watch=true"), "{}", reqs[0].1);
    assert_eq!(
        query_rv(&reqs[1].1).as_deref(),
        Some("30"),
        "resumed from the last bookmark"
    );
    w.stop();
}

#[test]
fn http_410_relists_then_watches_from_the_list() {
    let api = fake_api(|n, target| {
        let is_watch = target.contains("watch=true");
        match (n, is_watch) {
            (0, true) => Reply::Close(json_response(
                410,
                r#"{"kind":"Status","apiVersion":"v1","metadata":{},"status":"Failure","message":"too old resource version: 10 (40)","reason":"Expired","code":410}"#,
            )),
            (_, false) => Reply::Close(json_response(
                200,
                r#"{"kind":"ConfigMapList","apiVersion":"v1","metadata":{"resourceVersion":"50"},"items":[{"metadata":{"name":"a","resourceVersion":"45"}}]}"#,
            )),
            _ => {
                let mut out = WATCH_HEAD.as_bytes().to_vec();
                out.extend(chunk(event("ADDED", "b", 51).as_bytes()));
                Reply::Hang(out)
            }
        }
    });
    let client = Client::new(Connection::plain(&api.url)).expect("client");
    let cms = Api::<ConfigMap>::namespaced(&client, "default");
    let w = Running::start(cms.watch(WatchParams::default().from_version("10")), None);
    match w.next_event("Resynced", Duration::from_secs(10)) {
        WatchEvent::Resynced {
            items,
            resource_version,
        } => {
            assert_eq!(resource_version, "50");
            assert_eq!(items.len(), 1);
            assert_eq!(items[0].metadata.name(), "a");
        }
        other => panic!("{other:?}"),
    }
    let e = describe(&w.next_event("b", Duration::from_secs(10)));
    assert_eq!(e, ("ADDED".into(), "b".into(), 51));
    let reqs = api.requests.lock().clone();
    assert!(!reqs[1].1.contains("watch=true"), "a list: {}", reqs[1].1);
    assert_eq!(query_rv(&reqs[2].1).as_deref(), Some("50"));
    w.stop();
}

#[test]
fn a_silent_dead_connection_is_noticed_within_the_read_deadline() {
    // Answers the watch headers, then never sends another byte.
    let api = fake_api(|_, _| Reply::Hang(WATCH_HEAD.as_bytes().to_vec()));
    let client = Client::new(Connection::plain(&api.url)).expect("client");
    let cms = Api::<ConfigMap>::namespaced(&client, "default");
    let read_deadline = Duration::from_secs(1);
    let params = WatchParams {
        resource_version: Some("7".into()),
        timeout: Duration::from_secs(2),
        read_timeout: Some(read_deadline),
        ..WatchParams::default()
    };
    let w = Running::start(cms.watch(params), None);
    let reqs = wait_for("a re-watch", Duration::from_secs(10), || {
        let r = api.requests.lock().clone();
        (r.len() >= 2).then_some(r)
    });
    let gap = reqs[1].0 - reqs[0].0;
    // The read deadline, then the first backoff step (0.8 s + up to 100 %).
    assert!(gap >= read_deadline, "{gap:?}");
    assert!(
        gap <= read_deadline + Duration::from_millis(1600 + 1000),
        "{gap:?}"
    );
    assert_eq!(query_rv(&reqs[1].1).as_deref(), Some("7"));
    assert!(reqs[0].1.contains("timeoutSeconds=2"), "{}", reqs[0].1);
    // No item was made up meanwhile.
    assert!(matches!(
        w.rx.recv_timeout(Duration::from_millis(10)),
        Err(RecvTimeoutError::Timeout)
    ));
    w.stop();
}

#[test]
fn stop_interrupts_a_backoff_wait() {
    // Every request fails with a 500: the watcher backs off between tries.
    let api = fake_api(|_, _| {
        Reply::Close(json_response(
            500,
            r#"{"kind":"Status","apiVersion":"v1","metadata":{},"status":"Failure","message":"boom","reason":"InternalError","code":500}"#,
        ))
    });
    let client = Client::new(Connection::plain(&api.url)).expect("client");
    let cms = Api::<ConfigMap>::namespaced(&client, "default");
    let params = WatchParams {
        resource_version: Some("1".into()),
        max_backoff: Duration::from_secs(30),
        ..WatchParams::default()
    };
    let w = Running::start(cms.watch(params), None);
    wait_for("three tries", Duration::from_secs(20), || {
        (api.requests.lock().len() >= 3).then_some(())
    });
    let reqs = api.requests.lock().clone();
    // Backoff grows: the second gap is longer than the first's base step.
    let g1 = reqs[1].0 - reqs[0].0;
    let g2 = reqs[2].0 - reqs[1].0;
    assert!(g1 >= Duration::from_millis(800), "{g1:?}");
    assert!(g2 >= Duration::from_millis(1600), "{g2:?}");
    let t0 = Instant::now();
    w.stop();
    assert!(t0.elapsed() < Duration::from_secs(1), "{:?}", t0.elapsed());
}

#[test]
fn list_params_carry_over_to_the_relist() {
    // Selectors go on the list and on every watch request.
    let api = fake_api(|_, target| {
        if target.contains("watch=true") {
            Reply::Hang(WATCH_HEAD.as_bytes().to_vec())
        } else {
            Reply::Close(json_response(
                200,
                r#"{"kind":"ConfigMapList","apiVersion":"v1","metadata":{"resourceVersion":"5"},"items":[]}"#,
            ))
        }
    });
    let client = Client::new(Connection::plain(&api.url)).expect("client");
    let cms = Api::<ConfigMap>::namespaced(&client, "default");
    let params = WatchParams {
        label_selector: Some("app=web".into()),
        field_selector: Some("metadata.name=x".into()),
        ..WatchParams::default()
    };
    let w = Running::start(cms.watch(params), None);
    assert!(matches!(
        w.next_event("list", Duration::from_secs(10)),
        WatchEvent::Resynced { .. }
    ));
    let reqs = wait_for("the watch request", Duration::from_secs(10), || {
        let r = api.requests.lock().clone();
        (r.len() >= 2).then_some(r)
    });
    for (_, t) in &reqs[..2] {
        assert!(t.contains("labelSelector=app%3Dweb"), "{t}");
        assert!(t.contains("fieldSelector=metadata.name%3Dx"), "{t}");
    }
    assert_eq!(query_rv(&reqs[1].1).as_deref(), Some("5"));
    w.stop();
}

#[test]
fn a_forbidden_answer_is_yielded_once_and_ends_the_watch() {
    let api = fake_api(|_, _| {
        Reply::Close(json_response(
            403,
            r#"{"kind":"Status","apiVersion":"v1","metadata":{},"status":"Failure","message":"configmaps is forbidden: User \"x\" cannot watch resource \"configmaps\"","reason":"Forbidden","code":403}"#,
        ))
    });
    let client = Client::new(Connection::plain(&api.url)).expect("client");
    let cms = Api::<ConfigMap>::namespaced(&client, "default");
    let w = Running::start(cms.watch(WatchParams::default().from_version("3")), None);
    match w.next("the 403", Duration::from_secs(10)) {
        Err(KubeError::Forbidden(s)) => assert!(s.message.contains("forbidden"), "{s:?}"),
        other => panic!("{other:?}"),
    }
    // Then the iterator ends (the thread drops its sender).
    match w.rx.recv_timeout(Duration::from_secs(5)) {
        Err(RecvTimeoutError::Disconnected) => {}
        other => panic!("{other:?}"),
    }
    assert_eq!(api.requests.lock().len(), 1, "not retried");
}
