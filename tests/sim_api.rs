//! The sim's API at the HTTP level: watch edge cases (resume, 410 ERROR
//! past the history window, bookmarks, timeouts) and bad input (each a
//! correct Status, with the store unchanged).

mod common;

use common::SimProc;
use serde_json::{json, Value};
use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::time::{Duration, Instant};

fn agent() -> ureq::Agent {
    ureq::Agent::config_builder()
        .http_status_as_error(false)
        .proxy(None)
        .timeout_global(Some(Duration::from_secs(30)))
        .build()
        .into()
}

struct Api {
    url: String,
    agent: ureq::Agent,
}

impl Api {
    fn new(sim: &SimProc) -> Api {
        Api {
            url: sim.url.clone(),
            agent: agent(),
        }
    }

    fn send(&self, method: &str, path: &str, ct: &str, body: &[u8]) -> (u16, Value) {
        let url = format!("{}{path}", self.url);
        let req = ureq::http::Request::builder()
            .method(method)
            .uri(&url)
            .header("Content-Type", ct)
            .body(body.to_vec())
            .expect("request");
        let mut resp = self.agent.run(req).expect("http");
        let code = resp.status().as_u16();
        let text = resp.body_mut().read_to_string().unwrap_or_default();
        (
            code,
            serde_json::from_str(&text).unwrap_or(Value::String(text)),
        )
    }

    fn get(&self, path: &str) -> (u16, Value) {
        self.send("GET", path, "application/json", b"")
    }

    fn post(&self, path: &str, body: &Value) -> (u16, Value) {
        self.send(
            "POST",
            path,
            "application/json",
            body.to_string().as_bytes(),
        )
    }
}

fn cm(name: &str) -> Value {
    json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": name}, "data": {"k": "v"}})
}

/// A raw watch: returns every event until the server ends the stream, and
/// whether it ended with the terminating chunk (a clean end).
fn watch_all(sim: &SimProc, query: &str, deadline: Duration) -> (Vec<Value>, bool) {
    let addr = sim.url.trim_start_matches("http://").to_string();
    let mut s = TcpStream::connect(&addr).expect("connect");
    s.set_read_timeout(Some(deadline)).expect("timeout");
    write!(
        s,
        "GET /api/v1/namespaces/default/configmaps?watch=true&{query} HTTP/1.1\r\nHost: {addr}\r\n\r\n"
    )
    .expect("write");
    let mut r = BufReader::new(s);
    let mut line = String::new();
    r.read_line(&mut line).expect("status line");
    assert!(line.starts_with("HTTP/1.1 200"), "{line}");
    loop {
        line.clear();
        r.read_line(&mut line).expect("header");
        if line == "\r\n" {
            break;
        }
    }
    let mut dec = kubegate::kube::watch::WatchDecoder::new();
    let mut events = Vec::new();
    let started = Instant::now();
    loop {
        assert!(
            started.elapsed() < deadline,
            "watch did not end in {deadline:?}"
        );
        line.clear();
        if r.read_line(&mut line).unwrap_or(0) == 0 {
            return (events, false);
        }
        let size = usize::from_str_radix(line.trim(), 16).expect("chunk size");
        if size == 0 {
            return (events, true);
        }
        let mut buf = vec![0; size + 2];
        r.read_exact(&mut buf).expect("chunk");
        dec.push(&buf[..size]);
        while let Some(ev) = dec.next_event() {
            let ev = ev.expect("event");
            events.push(json!({"type": ev.ty.as_str(), "object": ev.object}));
        }
    }
}

#[test]
fn watch_resumes_from_a_resource_version() {
    let sim = SimProc::start(&[]);
    let api = Api::new(&sim);
    let (code, a) = api.post("/api/v1/namespaces/default/configmaps", &cm("a"));
    assert_eq!(code, 201);
    let rv_a = a["metadata"]["resourceVersion"]
        .as_str()
        .expect("rv")
        .to_string();
    let (code, _) = api.post("/api/v1/namespaces/default/configmaps", &cm("b"));
    assert_eq!(code, 201);
    let (code, _) = api.send(
        "DELETE",
        "/api/v1/namespaces/default/configmaps/a",
        "application/json",
        b"",
    );
    assert_eq!(code, 200);
    // From a's RV: only what came after (b ADDED, a DELETED); timeoutSeconds ends it cleanly.
    let (events, clean) = watch_all(
        &sim,
        &format!("resourceVersion={rv_a}&timeoutSeconds=1"),
        Duration::from_secs(20),
    );
    assert!(clean, "the stream must end with the last chunk");
    let seen: Vec<(String, String)> = events
        .iter()
        .map(|e| {
            (
                e["type"].as_str().unwrap_or("").into(),
                e["object"]["metadata"]["name"]
                    .as_str()
                    .unwrap_or("")
                    .into(),
            )
        })
        .collect();
    assert_eq!(
        seen,
        vec![("ADDED".into(), "b".into()), ("DELETED".into(), "a".into())]
    );
    // Without a RV: the current state as synthetic ADDED events.
    let (events, _) = watch_all(&sim, "timeoutSeconds=1", Duration::from_secs(20));
    assert_eq!(events.len(), 1);
    assert_eq!(events[0]["object"]["metadata"]["name"], "b");
}

#[test]
fn watch_bookmarks_and_timeout() {
    let sim = SimProc::start(&[]);
    let api = Api::new(&sim);
    let (_, list) = api.get("/api/v1/namespaces/default/configmaps");
    let rv = list["metadata"]["resourceVersion"]
        .as_str()
        .expect("rv")
        .to_string();
    let t0 = Instant::now();
    let (events, clean) = watch_all(
        &sim,
        &format!("resourceVersion={rv}&allowWatchBookmarks=true&timeoutSeconds=2"),
        Duration::from_secs(20),
    );
    let took = t0.elapsed();
    assert!(clean);
    assert!(
        took >= Duration::from_millis(1900),
        "ended after {took:?}, before its timeout"
    );
    let bookmark = events
        .iter()
        .find(|e| e["type"] == "BOOKMARK")
        .expect("a bookmark");
    let brv: u64 = bookmark["object"]["metadata"]["resourceVersion"]
        .as_str()
        .and_then(|s| s.parse().ok())
        .expect("bookmark rv");
    assert!(brv >= rv.parse::<u64>().expect("rv"));
    assert_eq!(bookmark["object"]["kind"], "ConfigMap");
}

#[test]
fn watch_past_the_history_window_gets_410_expired() {
    let sim = SimProc::start(&[]);
    let api = Api::new(&sim);
    let (code, first) = api.post("/api/v1/namespaces/default/configmaps", &cm("churn"));
    assert_eq!(code, 201);
    let old_rv = first["metadata"]["resourceVersion"]
        .as_str()
        .expect("rv")
        .to_string();
    // More changes than the history window (5,000 events) holds.
    for i in 0..5_100 {
        let patch = json!({"data": {"k": i.to_string()}}).to_string();
        let (code, _) = api.send(
            "PATCH",
            "/api/v1/namespaces/default/configmaps/churn",
            "application/merge-patch+json",
            patch.as_bytes(),
        );
        assert_eq!(code, 200);
    }
    let (events, clean) = watch_all(
        &sim,
        &format!("resourceVersion={old_rv}"),
        Duration::from_secs(20),
    );
    assert!(clean);
    assert_eq!(events.len(), 1, "{events:?}");
    assert_eq!(events[0]["type"], "ERROR");
    assert_eq!(events[0]["object"]["code"], 410);
    assert_eq!(events[0]["object"]["reason"], "Expired");
}

#[test]
fn bad_input_gets_a_status_and_changes_nothing() {
    let sim = SimProc::start(&[]);
    let api = Api::new(&sim);
    let (code, _) = api.post("/api/v1/namespaces/default/configmaps", &cm("keep"));
    assert_eq!(code, 201);
    let (_, before) = api.get("/api/v1/namespaces/default/configmaps");
    let cms = "/api/v1/namespaces/default/configmaps";

    // (what, method, path, body, HTTP code, Status reason)
    type Case<'a> = (&'a str, &'a str, &'a str, Vec<u8>, u16, &'a str);
    let cases: Vec<Case> = vec![
        ("malformed JSON", "POST", cms, b"{\"kind\": ".to_vec(), 400, "BadRequest"),
        ("not an object", "POST", cms, b"[1,2]".to_vec(), 400, "BadRequest"),
        ("wrong kind", "POST", cms, json!({"apiVersion": "v1", "kind": "Service", "metadata": {"name": "x"}}).to_string().into_bytes(), 400, "BadRequest"),
        ("not a DNS name", "POST", cms, cm("Bad_Name").to_string().into_bytes(), 422, "Invalid"),
        ("unknown namespace", "POST", "/api/v1/namespaces/nope/configmaps", cm("x").to_string().into_bytes(), 404, "NotFound"),
        ("already exists", "POST", cms, cm("keep").to_string().into_bytes(), 409, "AlreadyExists"),
        ("name mismatch", "PUT", "/api/v1/namespaces/default/configmaps/keep", cm("other").to_string().into_bytes(), 400, "BadRequest"),
        ("stale resourceVersion", "PUT", "/api/v1/namespaces/default/configmaps/keep", json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "keep", "resourceVersion": "1"}}).to_string().into_bytes(), 409, "Conflict"),
        ("missing object", "GET", "/api/v1/namespaces/default/configmaps/ghost", vec![], 404, "NotFound"),
        ("malformed label selector", "GET", "/api/v1/namespaces/default/configmaps?labelSelector=a%20in%20(", vec![], 400, "BadRequest"),
        ("unknown field selector", "GET", "/api/v1/namespaces/default/configmaps?fieldSelector=spec.foo%3Dx", vec![], 400, "BadRequest"),
        ("malformed merge patch", "PATCH", "/api/v1/namespaces/default/configmaps/keep", b"{not json".to_vec(), 400, "BadRequest"),
    ];
    for (what, method, path, body, want_code, want_reason) in cases {
        let ct = if method == "PATCH" {
            "application/merge-patch+json"
        } else {
            "application/json"
        };
        let (code, status) = api.send(method, path, ct, &body);
        assert_eq!(code, want_code, "{what}: {status}");
        assert_eq!(status["kind"], "Status", "{what}: {status}");
        assert_eq!(status["code"], want_code, "{what}: {status}");
        assert_eq!(status["reason"], want_reason, "{what}: {status}");
    }
    // A JSON patch that fails its test: 422, nothing applied.
    let jp = json!([{"op": "test", "path": "/data/k", "value": "nope"}, {"op": "replace", "path": "/data/k", "value": "changed"}]);
    let (code, _) = api.send(
        "PATCH",
        "/api/v1/namespaces/default/configmaps/keep",
        "application/json-patch+json",
        jp.to_string().as_bytes(),
    );
    assert_eq!(code, 422);
    // A body over the limit (4 MiB announced): 413 before the body is read.
    let addr = sim.url.trim_start_matches("http://").to_string();
    let mut s = TcpStream::connect(&addr).expect("connect");
    s.set_read_timeout(Some(Duration::from_secs(20)))
        .expect("timeout");
    write!(s, "POST {cms} HTTP/1.1\r\nHost: {addr}\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\r\n{{\"kind\":", 4 << 20).expect("write");
    let mut head = String::new();
    BufReader::new(&mut s)
        .read_line(&mut head)
        .expect("status line");
    assert!(head.starts_with("HTTP/1.1 413"), "{head}");
    // Nothing changed.
    let (_, after) = api.get("/api/v1/namespaces/default/configmaps");
    assert_eq!(
        before["metadata"]["resourceVersion"],
        after["metadata"]["resourceVersion"]
    );
    assert_eq!(before["items"], after["items"]);
}

#[test]
fn services_allocate_and_keep_their_cluster_ip() {
    let sim = SimProc::start(&[]);
    let api = Api::new(&sim);
    let svc = json!({"apiVersion": "v1", "kind": "Service", "metadata": {"name": "s"},
        "spec": {"ports": [{"port": 80, "targetPort": 8080}], "selector": {"app": "s"}}});
    let (code, created) = api.post("/api/v1/namespaces/default/services", &svc);
    assert_eq!(code, 201, "{created}");
    let ip = created["spec"]["clusterIP"]
        .as_str()
        .expect("clusterIP")
        .to_string();
    // Replace without clusterIP: filled from the stored object.
    let mut replace = svc.clone();
    replace["metadata"]["resourceVersion"] = created["metadata"]["resourceVersion"].clone();
    let (code, replaced) = api.send(
        "PUT",
        "/api/v1/namespaces/default/services/s",
        "application/json",
        replace.to_string().as_bytes(),
    );
    assert_eq!(code, 200, "{replaced}");
    assert_eq!(replaced["spec"]["clusterIP"], ip.as_str());
    // Changing it: 422 Invalid.
    let mut change = replaced.clone();
    change["spec"]["clusterIP"] = json!("10.96.200.200");
    change["spec"]["clusterIPs"] = json!(["10.96.200.200"]);
    let (code, status) = api.send(
        "PUT",
        "/api/v1/namespaces/default/services/s",
        "application/json",
        change.to_string().as_bytes(),
    );
    assert_eq!(code, 422, "{status}");
    assert_eq!(status["reason"], "Invalid");
}

#[test]
fn faults_fail_requests_and_drop_watches() {
    let sim = SimProc::start(&[]);
    let api = Api::new(&sim);
    let (code, _) = api.post(
        "/sim/faults",
        &json!({"seed": 7, "failRequests": {"count": 2, "status": 429, "retryAfterSecs": 3}}),
    );
    assert_eq!(code, 200);
    let url = format!("{}/api/v1/namespaces/default/configmaps", sim.url);
    let mut r = api.agent.get(&url).call().expect("http");
    assert_eq!(r.status().as_u16(), 429);
    assert_eq!(
        r.headers().get("retry-after").and_then(|v| v.to_str().ok()),
        Some("3")
    );
    assert!(r
        .body_mut()
        .read_to_string()
        .unwrap_or_default()
        .contains("Too many requests"));
    let (code, _) = api.get("/api/v1/namespaces/default/configmaps");
    assert_eq!(code, 429);
    let (code, _) = api.get("/api/v1/namespaces/default/configmaps");
    assert_eq!(code, 200);
    // Drop every open watch: a long watch ends cleanly and early.
    let sim_url = sim.url.clone();
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let stop2 = stop.clone();
    let dropper = std::thread::spawn(move || {
        let a = agent();
        let deadline = Instant::now() + Duration::from_secs(20);
        // Keep asking until the watch below is open and has been dropped.
        while Instant::now() < deadline && !stop2.load(std::sync::atomic::Ordering::Relaxed) {
            let _ = a
                .post(&format!("{sim_url}/sim/faults"))
                .send_json(json!({"dropWatches": true}));
            std::thread::sleep(Duration::from_millis(200));
        }
    });
    let t0 = Instant::now();
    let (_, clean) = watch_all(
        &sim,
        "resourceVersion=1&timeoutSeconds=60",
        Duration::from_secs(30),
    );
    assert!(clean);
    assert!(t0.elapsed() < Duration::from_secs(10));
    let (code, report) = api.get("/sim/faults");
    assert_eq!(code, 200);
    assert!(report["droppedWatchRounds"].as_u64().unwrap_or(0) >= 1);
    assert_eq!(report["failedRequests"], 2);
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    let _ = dropper.join();
}

#[test]
fn outage_refuses_connections_then_recovers() {
    let sim = SimProc::start(&[]);
    let api = Api::new(&sim);
    let (code, _) = api.post("/sim/faults", &json!({"outageSecs": 2}));
    assert_eq!(code, 200);
    let addr = sim.url.trim_start_matches("http://").to_string();
    // Refused while it lasts...
    common::wait_for("connections to be refused", Duration::from_secs(5), || {
        TcpStream::connect(&addr).is_err().then_some(())
    });
    // ...and served again afterwards, on the same address.
    let t0 = Instant::now();
    let a = agent();
    let version = format!("{}/version", sim.url);
    common::wait_for("the API to come back", Duration::from_secs(20), || {
        a.get(&version)
            .call()
            .ok()
            .filter(|r| r.status().as_u16() == 200)
    });
    assert!(t0.elapsed() < Duration::from_secs(10));
    let (_, report) = Api::new(&sim).get("/sim/faults");
    assert_eq!(report["outages"], 1);
}
