//! The kinds kubectl users reach for beyond workloads (issue 17, part 6):
//! ServiceAccounts, Leases, and each answer's shape as upstream gives it
//! (docs/kubernetes.md, docs/sim.md). Each test starts its own sim on a
//! free loopback port; HTTP calls have a 30 s timeout and kubectl runs under
//! the helpers' watchdog; waits poll a condition against a deadline.
//!
//! The cases that need no container run on two backends (`two_backends!`,
//! tests/common/backend.rs): a sim of their own and, when the run has one,
//! the real control plane (docs/control-plane.md), each under a watchdog,
//! so every answer asserted here is upstream's too.

mod common;

use common::backend::Backend;
use common::{run_with_timeout, wait_for, SimProc};
use kubegate::kube::client::rest::Request;
use serde_json::{json, Value};
use std::time::Duration;

struct Api {
    url: String,
    agent: ureq::Agent,
}

impl Api {
    fn new(sim: &SimProc) -> Api {
        Api {
            url: sim.url.clone(),
            agent: ureq::Agent::config_builder()
                .http_status_as_error(false)
                .proxy(None)
                .timeout_global(Some(Duration::from_secs(30)))
                .build()
                .into(),
        }
    }

    fn send(&self, method: &str, path: &str, ct: &str, body: &[u8]) -> (u16, Value) {
        let req = ureq::http::Request::builder()
            .method(method)
            .uri(format!("{}{path}", self.url))
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

    fn put(&self, path: &str, body: &Value) -> (u16, Value) {
        self.send("PUT", path, "application/json", body.to_string().as_bytes())
    }

    fn delete(&self, path: &str) -> (u16, Value) {
        self.send("DELETE", path, "application/json", b"")
    }

    /// The first `n` events of a watch (`query` appended), read until they
    /// came or the 30 s timeout.
    fn watch(&self, path: &str, query: &str, n: usize) -> Vec<Value> {
        let url = format!("{}{path}?watch=true&timeoutSeconds=20&{query}", self.url);
        let mut resp = self.agent.get(&url).call().expect("watch");
        let mut reader = std::io::BufReader::new(resp.body_mut().as_reader());
        let mut out = Vec::new();
        let mut line = String::new();
        while out.len() < n {
            line.clear();
            use std::io::BufRead;
            if reader.read_line(&mut line).unwrap_or(0) == 0 {
                break;
            }
            if let Ok(v) = serde_json::from_str::<Value>(&line) {
                out.push(v);
            }
        }
        out
    }
}

fn pod(name: &str, spec_extra: Value) -> Value {
    let mut spec = json!({"containers": [{"name": "c", "image": "busybox:1.36",
        "command": ["sh", "-c", "trap 'exit 0' TERM; while :; do sleep 1; done"]}]});
    if let (Some(s), Some(e)) = (spec.as_object_mut(), spec_extra.as_object()) {
        for (k, v) in e {
            s.insert(k.clone(), v.clone());
        }
    }
    json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name}, "spec": spec})
}

// ------------------------------------------------------------ ServiceAccounts

#[test]
fn every_namespace_has_a_default_service_account_at_once_and_again_when_deleted() {
    let sim = SimProc::start(&[]);
    let api = Api::new(&sim);
    for ns in ["default", "kube-system"] {
        let (code, sa) = api.get(&format!("/api/v1/namespaces/{ns}/serviceaccounts/default"));
        assert_eq!(code, 200, "{sa}");
        assert_eq!(sa["kind"], "ServiceAccount");
        assert_eq!(sa["metadata"]["namespace"], ns);
    }
    // A namespace created now has `default` by the time its create
    // returns: a pod create straight after is admitted.
    let (code, _) = api.post(
        "/api/v1/namespaces",
        &json!({"metadata": {"name": "fresh"}}),
    );
    assert_eq!(code, 201);
    let (code, p) = api.post("/api/v1/namespaces/fresh/pods", &pod("p", json!({})));
    assert_eq!(code, 201, "{p}");
    assert_eq!(p["spec"]["serviceAccountName"], "default");
    assert_eq!(p["spec"]["serviceAccount"], "default");

    // Deleted, the controller makes it again (a new uid).
    let (_, before) = api.get("/api/v1/namespaces/fresh/serviceaccounts/default");
    let (code, body) = api.delete("/api/v1/namespaces/fresh/serviceaccounts/default");
    assert_eq!(code, 200, "{body}");
    // The deleted object, not a Status (`ReturnDeletedObject: true`).
    assert_eq!(body["kind"], "ServiceAccount", "{body}");
    assert_eq!(body["metadata"]["uid"], before["metadata"]["uid"]);
    wait_for(
        "the default ServiceAccount recreated",
        Duration::from_secs(15),
        || {
            let (code, sa) = api.get("/api/v1/namespaces/fresh/serviceaccounts/default");
            (code == 200 && sa["metadata"]["uid"] != before["metadata"]["uid"]).then_some(())
        },
    );

    // kubectl's table: NAME, AGE (1.36's printer; tests/kubectl_shapes.rs
    // holds it to the real server's).
    let out = sim.kubectl_ok(&["get", "sa", "-n", "fresh"]);
    let mut lines = out.lines();
    let head: Vec<&str> = lines.next().unwrap_or("").split_whitespace().collect();
    assert_eq!(head, ["NAME", "AGE"], "{out}");
    let row: Vec<&str> = lines.next().unwrap_or("").split_whitespace().collect();
    assert_eq!(row[0], "default", "{out}");
}

#[test]
fn pods_name_an_existing_service_account_or_are_forbidden() {
    let sim = SimProc::start(&[]);
    let api = Api::new(&sim);
    // The message is upstream's (plugin/pkg/admission/serviceaccount).
    let (code, st) = api.post(
        "/api/v1/namespaces/default/pods",
        &pod("p1", json!({"serviceAccountName": "robot"})),
    );
    assert_eq!(code, 403, "{st}");
    assert_eq!(st["kind"], "Status");
    assert_eq!(st["reason"], "Forbidden");
    assert_eq!(st["code"], 403);
    assert_eq!(
        st["message"],
        "pods \"p1\" is forbidden: error looking up service account default/robot: serviceaccount \"robot\" not found"
    );
    assert_eq!(st["details"], json!({"name": "p1", "kind": "pods"}));
    // generateName stands in for a name not yet generated.
    let mut gen = pod("", json!({"serviceAccount": "robot"}));
    gen["metadata"] = json!({"generateName": "web-"});
    let (code, st) = api.post("/api/v1/namespaces/default/pods", &gen);
    assert_eq!(code, 403, "{st}");
    assert!(
        st["message"].as_str().unwrap_or("").starts_with(
            "pods \"web-\" is forbidden: error looking up service account default/robot"
        ),
        "{st}"
    );

    // Once it exists, both spellings name it.
    let (code, sa) = api.post(
        "/api/v1/namespaces/default/serviceaccounts",
        &json!({"metadata": {"name": "robot"}}),
    );
    assert_eq!(code, 201, "{sa}");
    let (code, p) = api.post(
        "/api/v1/namespaces/default/pods",
        &pod("p2", json!({"serviceAccount": "robot"})),
    );
    assert_eq!(code, 201, "{p}");
    assert_eq!(p["spec"]["serviceAccountName"], "robot");
    assert_eq!(p["spec"]["serviceAccount"], "robot");
    let (code, p) = api.post(
        "/api/v1/namespaces/default/pods",
        &pod(
            "p3",
            json!({"serviceAccountName": "robot", "serviceAccount": "other"}),
        ),
    );
    assert_eq!(code, 201, "{p}");
    assert_eq!(
        p["spec"]["serviceAccount"], "robot",
        "the alias follows the name"
    );
}

#[test]
fn service_accounts_are_served_like_any_kind() {
    let sim = SimProc::start(&[]);
    let api = Api::new(&sim);
    let (_, list) = api.get("/api/v1/namespaces/default/serviceaccounts");
    let rv = list["metadata"]["resourceVersion"]
        .as_str()
        .unwrap()
        .to_string();
    assert_eq!(list["kind"], "ServiceAccountList");

    let (code, sa) = api.post(
        "/api/v1/namespaces/default/serviceaccounts",
        &json!({"apiVersion": "v1", "kind": "ServiceAccount",
                "metadata": {"name": "builder", "labels": {"team": "a"}},
                "imagePullSecrets": [{"name": "regcred"}]}),
    );
    assert_eq!(code, 201, "{sa}");
    let (code, st) = api.post(
        "/api/v1/namespaces/default/serviceaccounts",
        &json!({"metadata": {"name": "builder"}}),
    );
    assert_eq!(code, 409);
    assert_eq!(st["message"], "serviceaccounts \"builder\" already exists");
    let (code, st) = api.post(
        "/api/v1/namespaces/default/serviceaccounts",
        &json!({"metadata": {"name": "Bad_Name"}}),
    );
    assert_eq!(code, 422, "{st}");
    assert_eq!(st["details"]["kind"], "ServiceAccount");
    assert_eq!(st["details"]["causes"][0]["field"], "metadata.name");

    // Optimistic concurrency: a stale resourceVersion is a 409 Conflict.
    let mut stale = sa.clone();
    let mut fresh = sa.clone();
    fresh["automountServiceAccountToken"] = json!(false);
    let (code, updated) = api.put("/api/v1/namespaces/default/serviceaccounts/builder", &fresh);
    assert_eq!(code, 200, "{updated}");
    stale["secrets"] = json!([]);
    let (code, st) = api.put("/api/v1/namespaces/default/serviceaccounts/builder", &stale);
    assert_eq!(code, 409, "{st}");
    assert_eq!(st["reason"], "Conflict");

    // Watch from the list's RV: ADDED then MODIFIED, in order.
    let evs = api.watch(
        "/api/v1/namespaces/default/serviceaccounts",
        &format!("resourceVersion={rv}"),
        2,
    );
    let types: Vec<&str> = evs.iter().filter_map(|e| e["type"].as_str()).collect();
    assert_eq!(types, ["ADDED", "MODIFIED"], "{evs:?}");
    assert_eq!(evs[0]["object"]["metadata"]["name"], "builder");

    // Selectors, discovery and kubectl.
    let (_, l) = api.get("/api/v1/serviceaccounts?labelSelector=team%3Da");
    assert_eq!(l["items"].as_array().map(Vec::len), Some(1), "{l}");
    let (_, d) = api.get("/api/v1");
    let e = d["resources"]
        .as_array()
        .unwrap()
        .iter()
        .find(|r| r["name"] == "serviceaccounts")
        .cloned()
        .expect("serviceaccounts in discovery");
    assert_eq!(e["shortNames"], json!(["sa"]));
    assert_eq!(e["kind"], "ServiceAccount");
    let v = sim.kubectl_json(&["get", "serviceaccount", "builder"]);
    assert_eq!(v["imagePullSecrets"][0]["name"], "regcred");
    sim.kubectl_ok(&["delete", "sa", "builder"]);
    let (code, _) = api.get("/api/v1/namespaces/default/serviceaccounts/builder");
    assert_eq!(code, 404);
}

// ------------------------------------------------------------ two backends

/// One request through the backend's client (its TLS and token): the
/// status code and the JSON body, a Status on refusal.
fn call(b: &Backend, method: &str, path: &str, body: Option<&Value>) -> (u16, Value) {
    call_as(
        b,
        method,
        path,
        body,
        "application/json",
        "application/json",
    )
}

fn call_as(
    b: &Backend,
    method: &str,
    path: &str,
    body: Option<&Value>,
    content_type: &'static str,
    accept: &'static str,
) -> (u16, Value) {
    let m = ureq::http::Method::from_bytes(method.as_bytes()).expect("method");
    let mut req = Request::new(m, path);
    req.accept = accept;
    if let Some(v) = body {
        req = req.body(v.to_string().into_bytes(), content_type);
    }
    match b.client.send(&req) {
        Ok(mut resp) => {
            let code = resp.status().as_u16();
            let text = resp.body_mut().read_to_string().unwrap_or_default();
            (
                code,
                serde_json::from_str(&text).unwrap_or(Value::String(text)),
            )
        }
        Err(e) => {
            let code = e.code().unwrap_or_else(|| panic!("{method} {path}: {e}"));
            let st = e
                .status()
                .map(|s| serde_json::to_value(s).expect("status json"))
                .unwrap_or(Value::Null);
            (code, st)
        }
    }
}

const TABLE: &str = "application/json;as=Table;v=v1;g=meta.k8s.io,application/json";

/// The server-side Table of `path` (what `kubectl get` asks for): column
/// names, and each row's cells.
fn table(b: &Backend, path: &str) -> (Vec<String>, Vec<Vec<Value>>) {
    let (code, t) = call_as(b, "GET", path, None, "application/json", TABLE);
    assert_eq!(code, 200, "{t}");
    assert_eq!(t["kind"], "Table", "{t}");
    let cols = t["columnDefinitions"]
        .as_array()
        .expect("columns")
        .iter()
        .map(|c| c["name"].as_str().unwrap_or("").to_string())
        .collect();
    let rows = t["rows"]
        .as_array()
        .expect("rows")
        .iter()
        .map(|r| r["cells"].as_array().cloned().unwrap_or_default())
        .collect();
    (cols, rows)
}

/// `kubectl ARGS` for the backend, its stdout; fails the test on a
/// non-zero exit or after 60 s.
fn kubectl(b: &Backend, args: &[&str]) -> String {
    let mut c = b.kubectl();
    c.args(args);
    let out = run_with_timeout(c, None, Duration::from_secs(60));
    assert_eq!(
        out.code,
        Some(0),
        "kubectl {args:?}: {}{}",
        out.stdout_str(),
        out.stderr_str()
    );
    out.stdout_str()
}

/// The events of a watch from `rv` that ends after `secs` (read whole).
fn watch_from(b: &Backend, path: &str, rv: &str, secs: u32) -> Vec<Value> {
    let (code, body) = call(
        b,
        "GET",
        &format!("{path}?watch=true&resourceVersion={rv}&timeoutSeconds={secs}"),
        None,
    );
    assert_eq!(code, 200, "{body}");
    // One JSON object a line: a single event decodes whole, several are a
    // string of lines.
    match body {
        Value::String(s) => s
            .lines()
            .filter(|l| !l.trim().is_empty())
            .map(|l| serde_json::from_str(l).expect("event"))
            .collect(),
        Value::Null => vec![],
        one => vec![one],
    }
}

fn status_text(v: &Value) -> &str {
    v["message"].as_str().unwrap_or("")
}

// ------------------------------------------------------------ Leases

two_backends!(leases_round_trip_micro_times_and_refuse_bad_specs, 120);
fn leases_round_trip_micro_times_and_refuse_bad_specs(b: &Backend) {
    let base = format!("/apis/coordination.k8s.io/v1/namespaces/{}/leases", b.ns);

    // MicroTimes come back in UTC with their microseconds; strategy and
    // preferredHolder are dropped (CoordinatedLeaderElection is off).
    let (code, l) = call(
        b,
        "POST",
        &base,
        Some(
            &json!({"apiVersion": "coordination.k8s.io/v1", "kind": "Lease",
            "metadata": {"name": "lock"},
            "spec": {"holderIdentity": "a", "leaseDurationSeconds": 15,
                     "acquireTime": "2026-01-01T01:00:00.123456+01:00",
                     "renewTime": "2026-01-01T00:00:07,000042Z",
                     "leaseTransitions": 0,
                     "strategy": "OldestEmulationVersion", "preferredHolder": "b"}}),
        ),
    );
    assert_eq!(code, 201, "{l}");
    assert_eq!(
        l["spec"],
        json!({"holderIdentity": "a", "leaseDurationSeconds": 15,
               "acquireTime": "2026-01-01T00:00:00.123456Z",
               "renewTime": "2026-01-01T00:00:07.000042Z",
               "leaseTransitions": 0})
    );
    let (_, got) = call(b, "GET", &format!("{base}/lock"), None);
    assert_eq!(got["spec"], l["spec"]);

    // Bad input: Go's time parser's words in a 400, validation in a 422.
    let (code, st) = call(
        b,
        "POST",
        &base,
        Some(&json!({"metadata": {"name": "t"}, "spec": {"renewTime": "2026-01-01T00:00:00Z"}})),
    );
    assert_eq!(
        (code, st["reason"].as_str()),
        (400, Some("BadRequest")),
        "{st}"
    );
    assert_eq!(
        status_text(&st),
        r#"Lease in version "v1" cannot be handled as a Lease: parsing time "2026-01-01T00:00:00Z" as "2006-01-02T15:04:05.000000Z07:00": cannot parse "Z" as ".000000""#
    );
    let (code, st) = call(
        b,
        "POST",
        &base,
        Some(&json!({"metadata": {"name": "t"}, "spec": {"leaseDurationSeconds": "5"}})),
    );
    assert_eq!(code, 400, "{st}");
    assert_eq!(
        status_text(&st),
        r#"Lease in version "v1" cannot be handled as a Lease: json: cannot unmarshal string into Go struct field LeaseSpec.spec.leaseDurationSeconds of type int32"#
    );
    let (code, st) = call(
        b,
        "POST",
        &base,
        Some(&json!({"metadata": {"name": "t"},
                     "spec": {"leaseDurationSeconds": 0, "leaseTransitions": -1}})),
    );
    assert_eq!(code, 422, "{st}");
    assert_eq!(
        status_text(&st),
        r#"Lease.coordination.k8s.io "t" is invalid: [spec.leaseDurationSeconds: Invalid value: 0: must be greater than 0, spec.leaseTransitions: Invalid value: -1: must be greater than or equal to 0]"#
    );
    assert_eq!(st["details"]["kind"], "Lease");
    assert_eq!(
        st["details"]["causes"][0],
        json!({"reason": "FieldValueInvalid", "message": "Invalid value: 0: must be greater than 0",
               "field": "spec.leaseDurationSeconds"})
    );

    // Selectors: only the name and namespace, upstream's refusal otherwise.
    let (code, st) = call(
        b,
        "GET",
        &format!("{base}?fieldSelector=spec.holderIdentity%3Db"),
        None,
    );
    assert_eq!(code, 400, "{st}");
    assert_eq!(
        status_text(&st),
        r#""spec.holderIdentity" is not a known field selector: only "metadata.name", "metadata.namespace""#
    );
    let (_, one) = call(
        b,
        "GET",
        &format!("{base}?fieldSelector=metadata.name%3Dlock"),
        None,
    );
    assert_eq!(one["items"].as_array().map(Vec::len), Some(1), "{one}");

    // The table: NAME, HOLDER, AGE (printLease), as kubectl prints it.
    let (cols, rows) = table(b, &base);
    assert_eq!(cols, ["Name", "Holder", "Age"]);
    assert_eq!(rows.len(), 1);
    assert_eq!(rows[0][..2], [json!("lock"), json!("a")]);
    let out = kubectl(b, &["get", "leases", "-n", &b.ns]);
    let head: Vec<&str> = out
        .lines()
        .next()
        .unwrap_or("")
        .split_whitespace()
        .collect();
    assert_eq!(head, ["NAME", "HOLDER", "AGE"], "{out}");
}

two_backends!(leases_take_turns_by_resource_version, 120);
fn leases_take_turns_by_resource_version(b: &Backend) {
    let base = format!("/apis/coordination.k8s.io/v1/namespaces/{}/leases", b.ns);
    let (code, list) = call(b, "GET", &base, None);
    assert_eq!(code, 200, "{list}");
    assert_eq!(list["kind"], "LeaseList");
    let rv0 = list["metadata"]["resourceVersion"]
        .as_str()
        .expect("list rv")
        .to_string();
    let (code, l) = call(
        b,
        "POST",
        &base,
        Some(&json!({"metadata": {"name": "lock"},
            "spec": {"holderIdentity": "a", "leaseDurationSeconds": 15}})),
    );
    assert_eq!(code, 201, "{l}");

    // Optimistic concurrency: an update names the version it read; a
    // stale one is a 409, none at all a 422 (no unconditional update).
    let mut next = l.clone();
    next["spec"]["holderIdentity"] = json!("b");
    next["spec"]["leaseTransitions"] = json!(1);
    let (code, renewed) = call(b, "PUT", &format!("{base}/lock"), Some(&next));
    assert_eq!(code, 200, "{renewed}");
    assert_eq!(renewed["spec"]["holderIdentity"], "b");
    let mut stale = l.clone();
    stale["spec"]["holderIdentity"] = json!("c");
    let (code, st) = call(b, "PUT", &format!("{base}/lock"), Some(&stale));
    assert_eq!(code, 409, "{st}");
    assert_eq!(
        status_text(&st),
        r#"Operation cannot be fulfilled on leases.coordination.k8s.io "lock": the object has been modified; please apply your changes to the latest version and try again"#
    );
    assert_eq!(
        st["details"],
        json!({"name": "lock", "group": "coordination.k8s.io", "kind": "leases"})
    );
    let mut unversioned = renewed.clone();
    unversioned["metadata"]
        .as_object_mut()
        .expect("metadata")
        .remove("resourceVersion");
    let (code, st) = call(b, "PUT", &format!("{base}/lock"), Some(&unversioned));
    assert_eq!(code, 422, "{st}");
    assert_eq!(
        status_text(&st),
        r#"leases.coordination.k8s.io "lock" is invalid: metadata.resourceVersion: Invalid value: 0: must be specified for an update"#
    );
    assert_eq!(st["details"]["kind"], "leases");
    assert_eq!(
        st["details"]["causes"][0]["field"],
        "metadata.resourceVersion"
    );

    // A PUT to a name not there creates it (AllowCreateOnUpdate), whatever
    // resourceVersion it carries.
    let (code, made) = call(
        b,
        "PUT",
        &format!("{base}/other"),
        Some(
            &json!({"metadata": {"name": "other", "resourceVersion": "5"},
                     "spec": {"holderIdentity": "z"}}),
        ),
    );
    assert_eq!(code, 201, "{made}");
    // A patch does not create.
    let (code, st) = call_as(
        b,
        "PATCH",
        &format!("{base}/absent"),
        Some(&json!({"spec": {"holderIdentity": "x"}})),
        "application/merge-patch+json",
        "application/json",
    );
    assert_eq!(
        (code, st["reason"].as_str()),
        (404, Some("NotFound")),
        "{st}"
    );

    // The watch saw it all, in order.
    let evs = watch_from(b, &base, &rv0, 2);
    let seen: Vec<(String, String)> = evs
        .iter()
        .map(|e| {
            (
                e["type"].as_str().unwrap_or("").to_string(),
                e["object"]["metadata"]["name"]
                    .as_str()
                    .unwrap_or("")
                    .to_string(),
            )
        })
        .collect();
    let want: Vec<(String, String)> = [("ADDED", "lock"), ("MODIFIED", "lock"), ("ADDED", "other")]
        .iter()
        .map(|(t, n)| (t.to_string(), n.to_string()))
        .collect();
    assert_eq!(seen, want, "{evs:?}");
    assert_eq!(evs[1]["object"]["spec"]["holderIdentity"], "b");

    // DELETE answers a Status (leases do not return the deleted object).
    let (code, st) = call(b, "DELETE", &format!("{base}/other"), None);
    assert_eq!(code, 200, "{st}");
    assert_eq!(st["kind"], "Status");
    assert_eq!(st["status"], "Success");
    assert_eq!(st["details"]["kind"], "leases");
    assert_eq!(st["details"]["uid"], made["metadata"]["uid"]);
}

// ------------------------------------------------------------ Nodes

/// The backend's own Node as listed: the sim's `sim-node`, the real
/// plane's kwok node (`KUBEGATE_REAL_NODE`). Other tests may add Nodes of
/// their own meanwhile.
fn the_node(b: &Backend) -> Value {
    let name = match b.kind {
        common::backend::Kind::Sim => "sim-node".to_string(),
        common::backend::Kind::Real => {
            std::env::var("KUBEGATE_REAL_NODE").unwrap_or_else(|_| "kwok-node-0".into())
        }
    };
    let (code, list) = call(b, "GET", "/api/v1/nodes", None);
    assert_eq!(code, 200, "{list}");
    assert_eq!(list["kind"], "NodeList");
    list["items"]
        .as_array()
        .into_iter()
        .flatten()
        .find(|n| n["metadata"]["name"] == name.as_str())
        .cloned()
        .unwrap_or_else(|| panic!("node {name} in {list}"))
}

two_backends!(the_node_reads_as_a_kubelet_registered_it, 120);
fn the_node_reads_as_a_kubelet_registered_it(b: &Backend) {
    let node = the_node(b);
    let name = node["metadata"]["name"].as_str().expect("name").to_string();
    let st = &node["status"];
    for list in ["capacity", "allocatable"] {
        for r in ["cpu", "memory", "pods"] {
            assert!(st[list][r].is_string(), "{list}.{r}: {st}");
        }
    }
    // Conditions: Ready and the pressure ones, with the kubelet's words.
    let cond = |ty: &str| {
        st["conditions"]
            .as_array()
            .into_iter()
            .flatten()
            .find(|c| c["type"] == ty)
            .cloned()
            .unwrap_or_else(|| panic!("condition {ty}: {st}"))
    };
    let ready = cond("Ready");
    assert_eq!(
        (&ready["status"], &ready["reason"], &ready["message"]),
        (
            &json!("True"),
            &json!("KubeletReady"),
            &json!("kubelet is posting ready status")
        )
    );
    for (ty, reason) in [
        ("MemoryPressure", "KubeletHasSufficientMemory"),
        ("DiskPressure", "KubeletHasNoDiskPressure"),
        ("PIDPressure", "KubeletHasSufficientPID"),
    ] {
        let c = cond(ty);
        assert_eq!(
            (&c["status"], &c["reason"]),
            (&json!("False"), &json!(reason))
        );
        assert!(c["lastHeartbeatTime"].is_string(), "{c}");
    }
    let addresses = st["addresses"].as_array().cloned().unwrap_or_default();
    assert_eq!(
        addresses[0],
        json!({"type": "InternalIP", "address": "127.0.0.1"})
    );
    assert_eq!(addresses[1], json!({"type": "Hostname", "address": name}));
    assert!(
        st["daemonEndpoints"]["kubeletEndpoint"]["Port"]
            .as_u64()
            .is_some_and(|p| p > 0),
        "{st}"
    );
    for k in [
        "machineID",
        "systemUUID",
        "bootID",
        "kernelVersion",
        "osImage",
        "containerRuntimeVersion",
        "kubeletVersion",
        "kubeProxyVersion",
        "operatingSystem",
        "architecture",
    ] {
        assert!(st["nodeInfo"][k].is_string(), "nodeInfo.{k}: {st}");
    }
    assert_eq!(st["nodeInfo"]["operatingSystem"], "linux");
    assert!(node["spec"]["taints"].is_null(), "no taints: {node}");
    // Its heartbeat Lease, held by the kubelet.
    let (code, lease) = call(
        b,
        "GET",
        &format!("/apis/coordination.k8s.io/v1/namespaces/kube-node-lease/leases/{name}"),
        None,
    );
    assert_eq!(code, 200, "{lease}");
    assert_eq!(lease["spec"]["leaseDurationSeconds"], 40);
    assert_eq!(
        lease["metadata"]["ownerReferences"][0],
        json!({"apiVersion": "v1", "kind": "Node", "name": name,
               "uid": node["metadata"]["uid"]})
    );

    // Pods are bound to it.
    let (code, p) = call(
        b,
        "POST",
        &format!("/api/v1/namespaces/{}/pods", b.ns),
        Some(&json!({"metadata": {"name": "bound",
                     "annotations": {"sim.kubegate.dev/simulate": "true"}},
                     "spec": {"containers": [{"name": "c", "image": "busybox"}]}})),
    );
    assert_eq!(code, 201, "{p}");
    wait_for("the pod bound to the node", Duration::from_secs(60), || {
        let (_, p) = call(
            b,
            "GET",
            &format!("/api/v1/namespaces/{}/pods/bound", b.ns),
            None,
        );
        (p["spec"]["nodeName"] == name.as_str()).then_some(())
    });

    // The table and kubectl: printNode's columns.
    let (cols, rows) = table(b, &format!("/api/v1/nodes/{name}"));
    assert_eq!(
        cols,
        [
            "Name",
            "Status",
            "Roles",
            "Age",
            "Version",
            "Internal-IP",
            "External-IP",
            "OS-Image",
            "Kernel-Version",
            "Container-Runtime"
        ]
    );
    assert_eq!(rows[0][..3], [json!(name), json!("Ready"), json!("<none>")]);
    assert_eq!(rows[0][5..7], [json!("127.0.0.1"), json!("<none>")]);
    let out = kubectl(b, &["get", "nodes"]);
    let head: Vec<&str> = out
        .lines()
        .next()
        .unwrap_or("")
        .split_whitespace()
        .collect();
    assert_eq!(head, ["NAME", "STATUS", "ROLES", "AGE", "VERSION"], "{out}");
    let out = kubectl(b, &["describe", "node", &name]);
    for part in [
        "Conditions:",
        "KubeletReady",
        "InternalIP:  127.0.0.1",
        "Capacity:",
        "Allocatable:",
        "System Info:",
        "HolderIdentity:",
        "Non-terminated Pods:",
        "bound",
    ] {
        assert!(out.contains(part), "{part} missing: {out}");
    }
    assert!(!out.contains("Failed to get lease"), "{out}");
}

two_backends!(nodes_are_validated_and_tainted_as_upstream_does, 120);
fn nodes_are_validated_and_tainted_as_upstream_does(b: &Backend) {
    let name = format!("extra-{}", b.ns);
    let (code, st) = call(
        b,
        "POST",
        "/api/v1/nodes",
        Some(&json!({"metadata": {"name": name},
                     "spec": {"taints": [{"key": "a", "effect": "Bad"},
                                         {"key": "bad key!", "effect": ""},
                                         {"key": "a", "effect": "Bad"}]}})),
    );
    assert_eq!(code, 422, "{st}");
    assert_eq!(
        status_text(&st),
        format!(
            "Node {:?} is invalid: [metadata.taints[0].effect: Unsupported value: \"Bad\": supported values: \"NoSchedule\", \"PreferNoSchedule\", \"NoExecute\", metadata.taints[1].key: Invalid value: \"bad key!\": name part must consist of alphanumeric characters, '-', '_' or '.', and must start and end with an alphanumeric character (e.g. 'MyName',  or 'my.name',  or '123-abc', regex used for validation is '([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]'), metadata.taints[1].effect: Required value, metadata.taints[2].effect: Unsupported value: \"Bad\": supported values: \"NoSchedule\", \"PreferNoSchedule\", \"NoExecute\", metadata.taints[2]: Duplicate value: {{\"Key\":\"a\",\"Value\":\"\",\"Effect\":\"Bad\",\"TimeAdded\":null}}: taints must be unique by key and effect pair]",
            name
        )
    );
    let (code, st) = call(
        b,
        "POST",
        "/api/v1/nodes",
        Some(&json!({"metadata": {"name": name}, "status": {"capacity": {"pods": "abc"}}})),
    );
    assert_eq!(code, 400, "{st}");
    assert_eq!(
        status_text(&st),
        "Node in version \"v1\" cannot be handled as a Node: quantities must match the regular expression '^([+-]?[0-9.]+)([eEinumkKMGTP]*[-+]?[0-9]*)$'"
    );
    let (code, st) = call(
        b,
        "POST",
        "/api/v1/nodes",
        Some(&json!({"metadata": {"name": name}, "status": {"capacity": {"cpu": "-1"}}})),
    );
    assert_eq!(code, 422, "{st}");
    assert_eq!(
        st["details"]["causes"],
        json!([{"reason": "FieldValueInvalid", "message": "Invalid value: \"-1\": must be greater than or equal to 0", "field": "status.capacity.cpu"},
               {"reason": "FieldValueInvalid", "message": "Invalid value: \"-1\": must be greater than or equal to 0", "field": "status.allocatable.cpu"}])
    );

    // Created: its status kept, allocatable defaulted from capacity, and
    // TaintNodesByCondition's not-ready taint (nothing lifts it here).
    let (code, n) = call(
        b,
        "POST",
        "/api/v1/nodes",
        Some(
            &json!({"metadata": {"name": name}, "spec": {"unschedulable": true},
                     "status": {"capacity": {"pods": "10"}}}),
        ),
    );
    assert_eq!(code, 201, "{n}");
    assert_eq!(n["status"]["allocatable"], json!({"pods": "10"}));
    assert_eq!(
        n["spec"]["taints"],
        json!([{"key": "node.kubernetes.io/not-ready", "effect": "NoSchedule"}])
    );
    assert_eq!(n["status"]["daemonEndpoints"]["kubeletEndpoint"]["Port"], 0);
    let (_, cordoned) = call(
        b,
        "GET",
        "/api/v1/nodes?fieldSelector=spec.unschedulable%3Dtrue",
        None,
    );
    let names: Vec<&str> = cordoned["items"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|i| i["metadata"]["name"].as_str())
        .collect();
    assert_eq!(names, [name.as_str()]);
    let (code, st) = call(
        b,
        "GET",
        "/api/v1/nodes?fieldSelector=status.phase%3DRunning",
        None,
    );
    assert_eq!(code, 400, "{st}");
    assert_eq!(status_text(&st), "field label not supported: status.phase");
    let (_, rows) = table(b, &format!("/api/v1/nodes/{name}"));
    assert_eq!(rows[0][1], "Unknown,SchedulingDisabled");
    let (code, st) = call(b, "DELETE", &format!("/api/v1/nodes/{name}"), None);
    assert_eq!(code, 200, "{st}");
    assert_eq!(
        (&st["kind"], &st["status"]),
        (&json!("Status"), &json!("Success"))
    );
}

/// Sim only: the kubelet keeps its Node and Lease, as a kubelet renews its
/// Lease (and here also registers again a deleted Node: docs/sim.md#nodes).
#[test]
fn the_sim_kubelet_makes_its_node_and_lease_again() {
    let sim = SimProc::start(&[]);
    let api = Api::new(&sim);
    let lease = "/apis/coordination.k8s.io/v1/namespaces/kube-node-lease/leases/sim-node";
    let (code, before) = api.get(lease);
    assert_eq!(code, 200, "{before}");
    let (code, _) = api.delete(lease);
    assert_eq!(code, 200);
    let (code, node) = api.delete("/api/v1/nodes/sim-node");
    assert_eq!(code, 200, "{node}");
    wait_for(
        "the Node and its Lease again",
        Duration::from_secs(30),
        || {
            let (nc, n) = api.get("/api/v1/nodes/sim-node");
            let (lc, l) = api.get(lease);
            (nc == 200
                && lc == 200
                && l["metadata"]["ownerReferences"][0]["uid"] == n["metadata"]["uid"])
                .then_some(())
        },
    );
}

// ------------------------------------------------------------ Events

fn names_of(list: &Value) -> Vec<String> {
    list["items"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|i| i["metadata"]["name"].as_str().map(str::to_string))
        .collect()
}

/// Two Events in the backend's namespace, as a legacy client (`old.1`,
/// core group) and a new one (`new.1`, events.k8s.io) write them, each read
/// back through the other group; the two paths and the resourceVersion
/// before them.
fn two_events(b: &Backend) -> (String, String, String) {
    let core = format!("/api/v1/namespaces/{}/events", b.ns);
    let v1 = format!("/apis/events.k8s.io/v1/namespaces/{}/events", b.ns);
    let (_, list) = call(b, "GET", &v1, None);
    assert_eq!(
        (&list["kind"], &list["apiVersion"]),
        (&json!("EventList"), &json!("events.k8s.io/v1"))
    );
    let rv0 = list["metadata"]["resourceVersion"]
        .as_str()
        .expect("rv")
        .to_string();

    // A legacy Event written through v1 (no eventTime), read through both.
    let (code, e) = call(
        b,
        "POST",
        &core,
        Some(&json!({"metadata": {"name": "old.1"},
            "involvedObject": {"kind": "Pod", "name": "p", "namespace": b.ns},
            "reason": "Tested", "message": "from the core group", "type": "Normal",
            "firstTimestamp": "2026-01-01T00:00:00Z", "lastTimestamp": "2026-01-01T00:00:00Z",
            "count": 1, "source": {"component": "tester"}})),
    );
    assert_eq!(code, 201, "{e}");
    assert_eq!(e["eventTime"], Value::Null);
    assert_eq!(
        (&e["reportingComponent"], &e["reportingInstance"]),
        (&json!(""), &json!(""))
    );
    let (code, seen) = call(b, "GET", &format!("{v1}/old.1"), None);
    assert_eq!(code, 200, "{seen}");
    assert_eq!(seen["apiVersion"], "events.k8s.io/v1");
    assert_eq!(seen["note"], "from the core group");
    assert_eq!(
        seen["regarding"],
        json!({"kind": "Pod", "name": "p", "namespace": b.ns})
    );
    assert_eq!(seen["deprecatedSource"], json!({"component": "tester"}));
    assert_eq!(seen["deprecatedCount"], 1);
    assert_eq!(seen["deprecatedFirstTimestamp"], "2026-01-01T00:00:00Z");
    assert_eq!(seen["eventTime"], Value::Null);
    assert!(
        seen.get("message").is_none() && seen.get("involvedObject").is_none(),
        "{seen}"
    );

    // A new-style Event written through events.k8s.io, read through v1.
    let (code, n) = call(
        b,
        "POST",
        &v1,
        Some(&json!({"metadata": {"name": "new.1"},
            "regarding": {"kind": "Pod", "name": "p", "namespace": b.ns},
            "reason": "Started", "note": "hello", "type": "Normal",
            "eventTime": "2026-01-01T00:00:00.000001Z", "reportingController": "kubegate.dev/test",
            "reportingInstance": "i-1", "action": "Start"})),
    );
    assert_eq!(code, 201, "{n}");
    assert_eq!(n["deprecatedSource"], json!({}));
    assert_eq!(n["deprecatedFirstTimestamp"], Value::Null);
    let (_, c) = call(b, "GET", &format!("{core}/new.1"), None);
    assert_eq!(c["message"], "hello");
    assert_eq!(c["reportingComponent"], "kubegate.dev/test");
    assert_eq!(c["source"], json!({}));
    assert_eq!(c["eventTime"], "2026-01-01T00:00:00.000001Z");

    (core, v1, rv0)
}

two_backends!(events_are_one_kind_seen_through_two_groups, 120);
fn events_are_one_kind_seen_through_two_groups(b: &Backend) {
    let (core, v1, _) = two_events(b);
    // Validation depends on the group.
    let (code, st) = call(b, "POST", &v1, Some(&json!({"metadata": {"name": "x"}})));
    assert_eq!(code, 422, "{st}");
    assert_eq!(
        status_text(&st),
        r#"Event "x" is invalid: [involvedObject.namespace: Invalid value: "": does not match event.namespace, eventTime: Required value, type: Invalid value: "": has invalid value: ]"#
    );
    assert_eq!(
        st["details"],
        json!({"name": "x", "kind": "Event", "causes": st["details"]["causes"]})
    );
    let (code, st) = call(
        b,
        "POST",
        &core,
        Some(&json!({"metadata": {"name": "e2"},
            "involvedObject": {"kind": "Pod", "name": "p", "namespace": "elsewhere"},
            "eventTime": "2026-01-01T00:00:00.000000Z"})),
    );
    assert_eq!(code, 422, "{st}");
    let fields: Vec<&str> = st["details"]["causes"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|c| c["field"].as_str())
        .collect();
    assert_eq!(
        fields,
        [
            "reportingComponent",
            "reportingComponent",
            "reportingComponent",
            "reportingInstance",
            "action",
            "reason"
        ],
        "{st}"
    );
    // The core group checks no name syntax; events.k8s.io does.
    let legacy = json!({"metadata": {"name": "Odd_Name"},
        "involvedObject": {"kind": "Pod", "name": "p", "namespace": b.ns}, "reason": "R"});
    let (code, st) = call(b, "POST", &core, Some(&legacy));
    assert_eq!(code, 201, "{st}");
    let (code, st) = call(
        b,
        "POST",
        &v1,
        Some(&json!({"metadata": {"name": "Odd_Name"},
            "regarding": {"kind": "Pod", "name": "p", "namespace": b.ns},
            "reason": "Started", "type": "Normal", "eventTime": "2026-01-01T00:00:00.000001Z",
            "reportingController": "kubegate.dev/test", "reportingInstance": "i-1", "action": "Start"})),
    );
    assert_eq!(code, 422, "{st}");
    assert_eq!(st["details"]["causes"][0]["field"], "metadata.name", "{st}");
}

two_backends!(events_select_print_and_watch_through_either_group, 120);
fn events_select_print_and_watch_through_either_group(b: &Backend) {
    let (core, v1, rv0) = two_events(b);
    let legacy = json!({"metadata": {"name": "Odd_Name"},
        "involvedObject": {"kind": "Pod", "name": "p", "namespace": b.ns}, "reason": "R"});
    let (code, st) = call(b, "POST", &core, Some(&legacy));
    assert_eq!(code, 201, "{st}");
    // Field selectors, each group with its own names.
    let (_, l) = call(
        b,
        "GET",
        &format!("{v1}?fieldSelector=regarding.name%3Dp,reportingController%3Dkubegate.dev%2Ftest"),
        None,
    );
    assert_eq!(names_of(&l), ["new.1"]);
    let (_, l) = call(
        b,
        "GET",
        &format!("{core}?fieldSelector=source%3Dkubegate.dev%2Ftest"),
        None,
    );
    assert_eq!(
        names_of(&l),
        ["new.1"],
        "source falls back to reportingComponent"
    );
    let (_, l) = call(
        b,
        "GET",
        &format!("{core}?fieldSelector=involvedObject.name%3Dp,reason%3DTested"),
        None,
    );
    assert_eq!(names_of(&l), ["old.1"]);
    let (code, st) = call(
        b,
        "GET",
        &format!("{v1}?fieldSelector=involvedObject.name%3Dp"),
        None,
    );
    assert_eq!(code, 400);
    assert_eq!(
        status_text(&st),
        "field label not supported: involvedObject.name"
    );
    let (code, st) = call(
        b,
        "GET",
        &format!("{core}?fieldSelector=regarding.name%3Dp"),
        None,
    );
    assert_eq!(code, 400);
    assert_eq!(
        status_text(&st),
        "field label not supported: regarding.name"
    );

    // One printer for both: printEvent's columns.
    for path in [&core, &v1] {
        let (cols, rows) = table(b, &format!("{path}?fieldSelector=metadata.name%3Dold.1"));
        assert_eq!(
            cols,
            [
                "Last Seen",
                "Type",
                "Reason",
                "Object",
                "Subobject",
                "Source",
                "Message",
                "First Seen",
                "Count",
                "Name"
            ]
        );
        assert_eq!(
            rows[0][1..7],
            [
                json!("Normal"),
                json!("Tested"),
                json!("pod/p"),
                json!(""),
                json!("tester"),
                json!("from the core group")
            ]
        );
        assert_eq!(rows[0][8..], [json!(1), json!("old.1")]);
    }

    // A watch through events.k8s.io sees every write, converted; a delete
    // there answers its own group's Status.
    let (code, st) = call(b, "DELETE", &format!("{v1}/old.1"), None);
    assert_eq!(code, 200, "{st}");
    assert_eq!(st["details"]["group"], "events.k8s.io");
    assert_eq!(st["details"]["kind"], "events");
    let evs = watch_from(b, &v1, &rv0, 2);
    let seen: Vec<(String, String)> = evs
        .iter()
        .map(|e| {
            (
                e["type"].as_str().unwrap_or("").to_string(),
                e["object"]["metadata"]["name"]
                    .as_str()
                    .unwrap_or("")
                    .to_string(),
            )
        })
        .collect();
    let want: Vec<(String, String)> = [
        ("ADDED", "old.1"),
        ("ADDED", "new.1"),
        ("ADDED", "Odd_Name"),
        ("DELETED", "old.1"),
    ]
    .iter()
    .map(|(t, n)| (t.to_string(), n.to_string()))
    .collect();
    assert_eq!(seen, want);
    assert_eq!(evs[0]["object"]["apiVersion"], "events.k8s.io/v1");
    assert_eq!(evs[0]["object"]["note"], "from the core group");
    let (code, st) = call(b, "GET", &format!("{core}/old.1"), None);
    assert_eq!(
        (code, &st["message"]),
        (404, &json!("events \"old.1\" not found"))
    );
    let (code, st) = call(b, "GET", &format!("{v1}/old.1"), None);
    assert_eq!(
        (code, &st["message"]),
        (404, &json!("events.events.k8s.io \"old.1\" not found"))
    );
}

two_backends!(pods_and_deployments_leave_events_kubectl_shows, 180);
fn pods_and_deployments_leave_events_kubectl_shows(b: &Backend) {
    let node = the_node(b)["metadata"]["name"]
        .as_str()
        .expect("node")
        .to_string();
    let (code, p) = call(
        b,
        "POST",
        &format!("/api/v1/namespaces/{}/pods", b.ns),
        Some(&json!({"metadata": {"name": "told"},
            "spec": {"containers": [{"name": "c", "image": "busybox", "command": ["sleep", "3600"]}],
                     "terminationGracePeriodSeconds": 1}})),
    );
    assert_eq!(code, 201, "{p}");
    let uid = p["metadata"]["uid"].as_str().expect("uid").to_string();
    // The scheduler's Event, as kube-scheduler writes it.
    let sel = format!(
        "/api/v1/namespaces/{}/events?fieldSelector=involvedObject.uid%3D{uid},reason%3DScheduled",
        b.ns
    );
    let ev = wait_for("the Scheduled event", Duration::from_secs(60), || {
        let (_, l) = call(b, "GET", &sel, None);
        l["items"].as_array().and_then(|a| a.first()).cloned()
    });
    assert_eq!(
        ev["message"],
        format!("Successfully assigned {}/told to {node}", b.ns)
    );
    assert_eq!(ev["type"], "Normal");
    assert_eq!(ev["action"], "Binding");
    assert_eq!(ev["reportingComponent"], "default-scheduler");
    assert!(ev["reportingInstance"]
        .as_str()
        .is_some_and(|i| i.starts_with("default-scheduler-")));
    assert_eq!(ev["source"], json!({}));
    assert_eq!(
        (&ev["firstTimestamp"], &ev["lastTimestamp"]),
        (&Value::Null, &Value::Null)
    );
    assert!(
        ev["eventTime"]
            .as_str()
            .is_some_and(|t| t.len() == "2026-01-01T00:00:00.000000Z".len()),
        "{ev}"
    );
    assert_eq!(ev["involvedObject"]["kind"], "Pod");
    assert_eq!(ev["involvedObject"]["apiVersion"], "v1");
    let out = kubectl(b, &["describe", "pod", "told", "-n", &b.ns]);
    let events = out.split("Events:").nth(1).unwrap_or("");
    assert!(
        events.contains("Scheduled") && events.contains("default-scheduler"),
        "{out}"
    );
    let out = kubectl(b, &["get", "events", "-n", &b.ns]);
    let head: Vec<&str> = out
        .lines()
        .next()
        .unwrap_or("")
        .split_whitespace()
        .collect();
    assert_eq!(
        head,
        ["LAST", "SEEN", "TYPE", "REASON", "OBJECT", "MESSAGE"],
        "{out}"
    );
    assert!(out.contains("pod/told"), "{out}");

    // The controllers' Events for a Deployment, scaled up and down.
    let (code, d) = call(
        b,
        "POST",
        &format!("/apis/apps/v1/namespaces/{}/deployments", b.ns),
        Some(&json!({"metadata": {"name": "dep"},
            "spec": {"replicas": 1, "selector": {"matchLabels": {"app": "dep"}},
                     "template": {"metadata": {"labels": {"app": "dep"},
                                               "annotations": {"sim.kubegate.dev/simulate": "true"}},
                                  "spec": {"containers": [{"name": "c", "image": "busybox"}]}}}})),
    );
    assert_eq!(code, 201, "{d}");
    let messages = |kind: &str| {
        let (_, l) = call(
            b,
            "GET",
            &format!(
                "/api/v1/namespaces/{}/events?fieldSelector=involvedObject.kind%3D{kind}",
                b.ns
            ),
            None,
        );
        l["items"]
            .as_array()
            .into_iter()
            .flatten()
            .map(|e| {
                (
                    e["reason"].as_str().unwrap_or("").to_string(),
                    e["message"].as_str().unwrap_or("").to_string(),
                    e["source"]["component"].as_str().unwrap_or("").to_string(),
                )
            })
            .collect::<Vec<_>>()
    };
    let scaled_up = wait_for(
        "ScalingReplicaSet and SuccessfulCreate",
        Duration::from_secs(60),
        || {
            let d = messages("Deployment");
            let r = messages("ReplicaSet");
            (!d.is_empty() && !r.is_empty()).then_some((d, r))
        },
    );
    let (dep_events, rs_events) = scaled_up;
    let (reason, message, source) = &dep_events[0];
    assert_eq!(
        (reason.as_str(), source.as_str()),
        ("ScalingReplicaSet", "deployment-controller")
    );
    assert!(
        message.starts_with("Scaled up replica set dep-") && message.ends_with(" from 0 to 1"),
        "{message}"
    );
    let (reason, message, source) = &rs_events[0];
    assert_eq!(
        (reason.as_str(), source.as_str()),
        ("SuccessfulCreate", "replicaset-controller")
    );
    assert!(message.starts_with("Created pod: dep-"), "{message}");
}

/// Sim only: the kubelet's Events through a pod's life (kwok writes none):
/// pull, create, start, back-off, a missing volume, a failing image, the
/// kill of a delete; and kubectl shows them.
#[test]
fn the_sim_kubelet_tells_the_pod_lifecycle_in_events() {
    let _w = common::backend::watchdog(180);
    let sim = SimProc::start(&["--fail-image", "registry.invalid/*"]);
    let api = Api::new(&sim);
    for p in [
        pod(
            "runs",
            json!({"containers": [{"name": "c", "image": "busybox:1", "command": ["sleep", "3600"]}], "terminationGracePeriodSeconds": 2}),
        ),
        pod(
            "crashes",
            json!({"containers": [{"name": "c", "image": "busybox", "command": ["sh", "-c", "exit 3"]}]}),
        ),
        pod(
            "mounts",
            json!({"containers": [{"name": "c", "image": "busybox:1", "command": ["sleep", "3600"]}],
                             "volumes": [{"name": "cfg", "configMap": {"name": "missing"}}]}),
        ),
        pod(
            "pulls",
            json!({"containers": [{"name": "c", "image": "registry.invalid/app:1"}]}),
        ),
    ] {
        let (code, body) = api.post("/api/v1/namespaces/default/pods", &p);
        assert_eq!(code, 201, "{body}");
    }
    let story = |pod: &str| -> Vec<(String, String, String)> {
        let (_, l) = api.get(&format!(
            "/api/v1/namespaces/default/events?fieldSelector=involvedObject.name%3D{pod}"
        ));
        l["items"]
            .as_array()
            .into_iter()
            .flatten()
            .map(|e| {
                (
                    e["reason"].as_str().unwrap_or("").to_string(),
                    e["message"].as_str().unwrap_or("").to_string(),
                    e["involvedObject"]["fieldPath"]
                        .as_str()
                        .unwrap_or("")
                        .to_string(),
                )
            })
            .collect()
    };
    let has = |s: &[(String, String, String)], reason: &str, message: &str| {
        s.iter().any(|(r, m, _)| r == reason && m.contains(message))
    };
    wait_for("the lifecycle events", Duration::from_secs(60), || {
        let runs = story("runs");
        let crashes = story("crashes");
        let mounts = story("mounts");
        let pulls = story("pulls");
        (has(&runs, "Scheduled", "to sim-node")
            && has(
                &runs,
                "Pulled",
                "Container image \"busybox:1\" already present on machine",
            )
            && has(&runs, "Created", "Container created")
            && has(&runs, "Started", "Container started")
            && has(&crashes, "Pulling", "Pulling image \"busybox\"")
            && has(
                &crashes,
                "BackOff",
                "Back-off restarting failed container c in pod crashes_default(",
            )
            && has(
                &mounts,
                "FailedMount",
                "MountVolume.SetUp failed for volume \"cfg\" : configmap \"missing\" not found",
            )
            && has(
                &pulls,
                "Failed",
                "Failed to pull image \"registry.invalid/app:1\"",
            )
            && has(&pulls, "Failed", "Error: ErrImagePull"))
        .then_some(())
    });
    let runs = story("runs");
    assert!(
        runs.iter()
            .filter(|(r, _, _)| r != "Scheduled")
            .all(|(_, _, f)| f == "spec.containers{c}"),
        "{runs:?}"
    );
    // Restarts count on the first Event, not a new one each time.
    let (_, l) = api.get("/api/v1/namespaces/default/events?fieldSelector=involvedObject.name%3Dcrashes,reason%3DStarted");
    assert_eq!(l["items"].as_array().map(Vec::len), Some(1), "{l}");
    // A delete kills the container and says so.
    let (code, _) = api.delete("/api/v1/namespaces/default/pods/runs");
    assert_eq!(code, 200);
    wait_for("Killing", Duration::from_secs(30), || {
        has(&story("runs"), "Killing", "Stopping container c").then_some(())
    });
    let out = sim.kubectl_ok(&["describe", "pod", "crashes"]);
    let events = out.split("Events:").nth(1).unwrap_or("");
    for part in [
        "Scheduled",
        "default-scheduler",
        "Started",
        "kubelet",
        "BackOff",
    ] {
        assert!(events.contains(part), "{part}: {out}");
    }
    let out = sim.kubectl_ok(&[
        "get",
        "events",
        "--field-selector",
        "involvedObject.name=mounts",
    ]);
    assert!(out.contains("FailedMount"), "{out}");
}

// ------------------------------------------------------------ PersistentVolumeClaims

two_backends!(persistent_volume_claims_are_stored_and_stay_pending, 120);
fn persistent_volume_claims_are_stored_and_stay_pending(b: &Backend) {
    let base = format!("/api/v1/namespaces/{}/persistentvolumeclaims", b.ns);
    let (code, st) = call(
        b,
        "POST",
        &base,
        Some(&json!({"metadata": {"name": "c0"}, "spec": {}})),
    );
    assert_eq!(code, 422, "{st}");
    assert_eq!(
        status_text(&st),
        r#"PersistentVolumeClaim "c0" is invalid: [spec.accessModes: Required value: at least 1 access mode is required, spec.resources[storage]: Required value]"#
    );
    let (code, st) = call(
        b,
        "POST",
        &base,
        Some(&json!({"metadata": {"name": "c2"},
            "spec": {"accessModes": ["ReadWriteOncePod", "Bogus"], "volumeMode": "Odd",
                     "storageClassName": "Bad_Class", "resources": {"requests": {"storage": "0"}}}})),
    );
    assert_eq!(code, 422, "{st}");
    assert_eq!(
        status_text(&st),
        r#"PersistentVolumeClaim "c2" is invalid: [spec.accessModes: Unsupported value: "Bogus": supported values: "ReadOnlyMany", "ReadWriteMany", "ReadWriteOnce", "ReadWriteOncePod", spec.resources[storage]: Invalid value: "0": must be greater than zero, spec.storageClassName: Invalid value: "Bad_Class": a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, '-' or '.', and must start and end with an alphanumeric character (e.g. 'example.com', regex used for validation is '[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*'), spec.volumeMode: Unsupported value: "Odd": supported values: "Block", "Filesystem"]"#
    );

    // Stored as given, defaulted, protected, and Pending: nothing binds it.
    let (code, c) = call(
        b,
        "POST",
        &base,
        Some(&json!({"metadata": {"name": "data"},
            "spec": {"accessModes": ["ReadWriteOnce"], "resources": {"requests": {"storage": "1Gi"}}}})),
    );
    assert_eq!(code, 201, "{c}");
    assert_eq!(
        c["metadata"]["finalizers"],
        json!(["kubernetes.io/pvc-protection"])
    );
    assert_eq!(
        c["spec"],
        json!({"accessModes": ["ReadWriteOnce"], "resources": {"requests": {"storage": "1Gi"}},
               "volumeMode": "Filesystem"})
    );
    assert_eq!(c["status"], json!({"phase": "Pending"}));

    // Its spec may not change, with upstream's diff in the message.
    let (code, st) = call_as(
        b,
        "PATCH",
        &format!("{base}/data"),
        Some(&json!({"spec": {"accessModes": ["ReadWriteMany"]}})),
        "application/merge-patch+json",
        "application/json",
    );
    assert_eq!(code, 422, "{st}");
    assert_eq!(
        status_text(&st),
        "PersistentVolumeClaim \"data\" is invalid: spec: Forbidden: spec is immutable after creation except resources.requests and volumeAttributesClassName for bound claims\n@@ -1,6 +1,6 @@\n {\n  \"AccessModes\": [\n-  \"ReadWriteOnce\"\n+  \"ReadWriteMany\"\n  ],\n  \"Selector\": null,\n  \"Resources\": {\n"
    );
    let (code, st) = call_as(
        b,
        "PATCH",
        &format!("{base}/data"),
        Some(&json!({"spec": {"resources": {"requests": {"storage": "500Mi"}}}})),
        "application/merge-patch+json",
        "application/json",
    );
    assert_eq!(code, 422, "{st}");
    assert!(
        status_text(&st).ends_with("@@ -6,7 +6,7 @@\n  \"Resources\": {\n   \"Limits\": null,\n   \"Requests\": {\n-   \"storage\": \"1Gi\"\n+   \"storage\": \"500Mi\"\n   }\n  },\n  \"VolumeName\": \"\",\n"),
        "{st}"
    );
    // But a claim without a class may be given one.
    let (code, st) = call_as(
        b,
        "PATCH",
        &format!("{base}/data"),
        Some(&json!({"spec": {"storageClassName": "fast"}})),
        "application/merge-patch+json",
        "application/json",
    );
    assert_eq!(code, 200, "{st}");

    // Selectors, the table, kubectl.
    let (code, st) = call(
        b,
        "GET",
        &format!("{base}?fieldSelector=status.phase%3DPending"),
        None,
    );
    assert_eq!(code, 400);
    assert_eq!(
        status_text(&st),
        r#""status.phase" is not a known field selector: only "metadata.name", "metadata.namespace""#
    );
    let (cols, rows) = table(b, &base);
    assert_eq!(
        cols,
        [
            "Name",
            "Status",
            "Volume",
            "Capacity",
            "Access Modes",
            "StorageClass",
            "VolumeAttributesClass",
            "Age",
            "VolumeMode"
        ]
    );
    assert_eq!(
        rows[0][..7],
        [
            json!("data"),
            json!("Pending"),
            json!(""),
            json!(""),
            json!(""),
            json!("fast"),
            json!("<unset>")
        ]
    );
    assert_eq!(rows[0][8], "Filesystem");
    let out = kubectl(b, &["get", "pvc", "-n", &b.ns]);
    let head: Vec<&str> = out
        .lines()
        .next()
        .unwrap_or("")
        .split_whitespace()
        .collect();
    assert_eq!(head[..4], ["NAME", "STATUS", "VOLUME", "CAPACITY"], "{out}");

    // A delete answers the claim marked for deletion; unused, it goes.
    let (code, gone) = call(b, "DELETE", &format!("{base}/data"), None);
    assert_eq!(code, 200, "{gone}");
    assert_eq!(gone["kind"], "PersistentVolumeClaim");
    assert!(gone["metadata"]["deletionTimestamp"].is_string(), "{gone}");
    wait_for("the claim gone", Duration::from_secs(30), || {
        let (code, _) = call(b, "GET", &format!("{base}/data"), None);
        (code == 404).then_some(())
    });
}

// ------------------------------------------------------------ access reviews

two_backends!(access_reviews_answer_for_the_caller, 120);
fn access_reviews_answer_for_the_caller(b: &Backend) {
    // whoami: the admin credential of each backend is in system:masters.
    let (code, who) = call(
        b,
        "POST",
        "/apis/authentication.k8s.io/v1/selfsubjectreviews",
        Some(&json!({"apiVersion": "authentication.k8s.io/v1", "kind": "SelfSubjectReview"})),
    );
    assert_eq!(code, 201, "{who}");
    assert_eq!(
        (&who["kind"], &who["apiVersion"]),
        (
            &json!("SelfSubjectReview"),
            &json!("authentication.k8s.io/v1")
        )
    );
    let user = &who["status"]["userInfo"];
    let expected = match b.kind {
        common::backend::Kind::Sim => "kubegate-sim-admin",
        common::backend::Kind::Real => "kubegate-admin",
    };
    assert_eq!(user["username"], expected, "{who}");
    assert_eq!(
        user["groups"],
        json!(["system:masters", "system:authenticated"])
    );
    assert!(who["metadata"]["creationTimestamp"].is_string(), "{who}");

    // can-i: allowed, the spec echoed.
    let review = |spec: Value| {
        call(
            b,
            "POST",
            "/apis/authorization.k8s.io/v1/selfsubjectaccessreviews",
            Some(
                &json!({"apiVersion": "authorization.k8s.io/v1", "kind": "SelfSubjectAccessReview",
                         "spec": spec}),
            ),
        )
    };
    let attrs =
        json!({"resourceAttributes": {"namespace": b.ns, "verb": "create", "resource": "pods"}});
    let (code, r) = review(attrs.clone());
    assert_eq!(code, 201, "{r}");
    assert_eq!(r["spec"], attrs);
    assert_eq!(r["status"], json!({"allowed": true}));
    let (code, r) = review(json!({"nonResourceAttributes": {"path": "/healthz", "verb": "get"}}));
    assert_eq!((code, &r["status"]), (201, &json!({"allowed": true})));
    let (code, st) = review(json!({}));
    assert_eq!(code, 422, "{st}");
    assert_eq!(
        status_text(&st),
        r#".authorization.k8s.io "" is invalid: spec.resourceAttributes: Invalid value: null: exactly one of nonResourceAttributes or resourceAttributes must be specified"#
    );
    assert_eq!(st["details"]["group"], "authorization.k8s.io");
    assert!(st["details"].get("kind").is_none(), "{st}");
    let (code, st) = review(
        json!({"resourceAttributes": {"verb": "get", "resource": "pods"},
                                   "nonResourceAttributes": {"path": "/x", "verb": "get"}}),
    );
    assert_eq!(code, 422);
    assert_eq!(
        status_text(&st),
        r#".authorization.k8s.io "" is invalid: spec.nonResourceAttributes: Invalid value: {"Path":"/x","Verb":"get"}: cannot be specified in combination with resourceAttributes"#
    );
    // Created only: nothing to list.
    let (code, _) = call(
        b,
        "GET",
        "/apis/authorization.k8s.io/v1/selfsubjectaccessreviews",
        None,
    );
    assert_eq!(code, 405);

    // kubectl.
    let out = kubectl(b, &["auth", "can-i", "create", "pods", "-n", &b.ns]);
    assert_eq!(out.trim(), "yes");
    let out = kubectl(b, &["auth", "can-i", "delete", "nodes"]);
    assert_eq!(out.trim(), "yes");
    let out = kubectl(b, &["auth", "whoami"]);
    assert!(out.contains("Username") && out.contains(expected), "{out}");
    assert!(out.contains("system:masters"), "{out}");
}

/// Sim only: with `--no-auth` everyone is served, as upstream's anonymous
/// user, and may do everything.
#[test]
fn an_open_sim_answers_reviews_for_the_anonymous_user() {
    let sim = SimProc::start(&[]);
    let api = Api::new(&sim);
    let (code, who) = api.post(
        "/apis/authentication.k8s.io/v1/selfsubjectreviews",
        &json!({"apiVersion": "authentication.k8s.io/v1", "kind": "SelfSubjectReview"}),
    );
    assert_eq!(code, 201, "{who}");
    assert_eq!(
        who["status"]["userInfo"],
        json!({"username": "system:anonymous", "groups": ["system:unauthenticated"]})
    );
    let (code, r) = api.post(
        "/apis/authorization.k8s.io/v1/selfsubjectaccessreviews",
        &json!({"spec": {"resourceAttributes": {"verb": "delete", "resource": "namespaces"}}}),
    );
    assert_eq!((code, &r["status"]["allowed"]), (201, &json!(true)), "{r}");
    assert_eq!(
        sim.kubectl_ok(&["auth", "can-i", "create", "deployments"])
            .trim(),
        "yes"
    );
}
