//! The kinds kubectl users reach for beyond workloads (issue 17, part 6):
//! ServiceAccounts, and each answer's shape as upstream gives it
//! (docs/kubernetes.md, docs/sim.md). Each test starts its own sim on a
//! free loopback port; HTTP calls have a 30 s timeout and kubectl runs under
//! the helpers' watchdog; waits poll a condition against a deadline.

mod common;

use common::{wait_for, SimProc};
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

    // kubectl's table: NAME, SECRETS, AGE (upstream's printer).
    let out = sim.kubectl_ok(&["get", "sa", "-n", "fresh"]);
    let mut lines = out.lines();
    let head: Vec<&str> = lines.next().unwrap_or("").split_whitespace().collect();
    assert_eq!(head, ["NAME", "SECRETS", "AGE"], "{out}");
    let row: Vec<&str> = lines.next().unwrap_or("").split_whitespace().collect();
    assert_eq!(&row[..2], ["default", "0"], "{out}");
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
