//! The differential test (docs/sim.md#the-differential-test): one recorded
//! request sequence sent, raw, to a sim and to the run's real control plane
//! (docs/control-plane.md), each in a namespace of its own. For every step
//! it compares the status code and, for a Status answer, its `reason`,
//! `details` (kind, group, name) and `causes` (field and type): a
//! difference in any of them fails. Messages are compared with the
//! namespace, uids, resourceVersions, times and numbers masked; each step
//! whose message differs must be listed in docs/sim.md's table of message
//! differences with its reason — a new difference fails, and so does a
//! listed one that no longer differs (the table stays true).
//!
//! Without a real plane the test says so and passes, unless
//! `KUBEGATE_REAL_REQUIRED=1` (scripts/test.sh sets it where it started
//! one).

mod common;

use common::backend::{on_real, watchdog, Backend};
use serde_json::{json, Value};
use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::io::Read;

/// One request of the sequence. `{ns}` in the path or body is the
/// backend's namespace.
struct Step {
    name: &'static str,
    method: &'static str,
    path: &'static str,
    content_type: Option<&'static str>,
    body: Option<String>,
}

fn step(name: &'static str, method: &'static str, path: &'static str) -> Step {
    Step {
        name,
        method,
        path,
        content_type: None,
        body: None,
    }
}

impl Step {
    fn json(mut self, body: Value) -> Step {
        self.body = Some(body.to_string());
        self.content_type = Some("application/json");
        self
    }

    fn raw(mut self, content_type: &'static str, body: &str) -> Step {
        self.body = Some(body.to_string());
        self.content_type = Some(content_type);
        self
    }
}

const CMS: &str = "/api/v1/namespaces/{ns}/configmaps";
const CM_A: &str = "/api/v1/namespaces/{ns}/configmaps/a";

fn cm(name: &str) -> Value {
    json!({"apiVersion": "v1", "kind": "ConfigMap",
           "metadata": {"name": name, "labels": {"app": "x"}}, "data": {"k": "v"}})
}

fn pod(name: &str, account: Option<&str>) -> Value {
    let mut spec = json!({"containers": [{"name": "c", "image": "busybox",
                                          "command": ["sleep", "3600"]}]});
    if let Some(a) = account {
        spec["serviceAccountName"] = json!(a);
    }
    json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name}, "spec": spec})
}

/// The sequence. Order matters: later steps read what earlier ones made.
fn steps() -> Vec<Step> {
    [
        creates_reads_and_replaces(),
        patches(),
        applies(),
        kinds(),
        selectors_deletes_and_discovery(),
        workloads(),
    ]
    .into_iter()
    .flatten()
    .collect()
}

fn creates_reads_and_replaces() -> Vec<Step> {
    vec![
        // Creates, and what a create refuses.
        step("create", "POST", CMS).json(cm("a")),
        step("create-again", "POST", CMS).json(cm("a")),
        step("create-bad-name", "POST", CMS).json(cm("Bad_Name")),
        step("create-no-name", "POST", CMS)
            .json(json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {}})),
        step("create-generate-name", "POST", CMS).json(
            json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"generateName": "g-"}}),
        ),
        step("create-bad-data-key", "POST", CMS).json(json!({
            "apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": "badkey"}, "data": {"bad key!": "v"}})),
        step("create-wrong-kind", "POST", CMS).json(json!({
            "apiVersion": "v1", "kind": "Secret", "metadata": {"name": "wk"}})),
        step("create-not-json", "POST", CMS).raw("application/json", "{not json"),
        step("create-namespace-mismatch", "POST", CMS).json(json!({
            "apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": "nsm", "namespace": "elsewhere"}})),
        step("create-unsupported-media-type", "POST", CMS).raw("text/plain", "hello"),
        step(
            "create-in-missing-namespace",
            "POST",
            "/api/v1/namespaces/{ns}-missing/configmaps",
        )
        .json(cm("a")),
        step(
            "create-dry-run",
            "POST",
            "/api/v1/namespaces/{ns}/configmaps?dryRun=All",
        )
        .json(cm("dry")),
        step(
            "get-dry-run",
            "GET",
            "/api/v1/namespaces/{ns}/configmaps/dry",
        ),
        // Reads.
        step("get", "GET", CM_A),
        step(
            "get-missing",
            "GET",
            "/api/v1/namespaces/{ns}/configmaps/missing",
        ),
        step(
            "get-in-missing-namespace",
            "GET",
            "/api/v1/namespaces/{ns}-missing/configmaps/a",
        ),
        // Replaces.
        step("replace-name-mismatch", "PUT", CM_A).json(cm("b")),
        step("replace-stale", "PUT", CM_A).json(json!({
            "apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": "a", "resourceVersion": "1"}})),
        step("replace-unconditional", "PUT", CM_A).json(cm("a")),
        step(
            "replace-missing",
            "PUT",
            "/api/v1/namespaces/{ns}/configmaps/nope",
        )
        .json(json!({
            "apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": "nope", "resourceVersion": "5"}})),
    ]
}

fn patches() -> Vec<Step> {
    vec![
        step("patch-merge", "PATCH", CM_A)
            .raw("application/merge-patch+json", r#"{"data":{"m":"1"}}"#),
        step("patch-strategic", "PATCH", CM_A).raw(
            "application/strategic-merge-patch+json",
            r#"{"data":{"s":"1"}}"#,
        ),
        step("patch-json", "PATCH", CM_A).raw(
            "application/json-patch+json",
            r#"[{"op":"add","path":"/data/j","value":"1"}]"#,
        ),
        step("patch-json-bad-path", "PATCH", CM_A).raw(
            "application/json-patch+json",
            r#"[{"op":"replace","path":"/data/nope","value":"1"}]"#,
        ),
        step("patch-json-test-fails", "PATCH", CM_A).raw(
            "application/json-patch+json",
            r#"[{"op":"test","path":"/data/k","value":"other"}]"#,
        ),
        step("patch-json-not-a-list", "PATCH", CM_A)
            .raw("application/json-patch+json", r#"{"op":"add"}"#),
        step("patch-json-unknown-op", "PATCH", CM_A).raw(
            "application/json-patch+json",
            r#"[{"op":"frob","path":"/data/k"}]"#,
        ),
        step("patch-json-no-op", "PATCH", CM_A)
            .raw("application/json-patch+json", r#"[{"path":"/data/k"}]"#),
        step("patch-json-no-value", "PATCH", CM_A).raw(
            "application/json-patch+json",
            r#"[{"op":"add","path":"/data/nv"}]"#,
        ),
        step("patch-json-relative-path", "PATCH", CM_A).raw(
            "application/json-patch+json",
            r#"[{"op":"add","path":"data/rel","value":"1"}]"#,
        ),
        step("patch-json-null", "PATCH", CM_A).raw("application/json-patch+json", "null"),
        step("patch-json-remove-missing", "PATCH", CM_A).raw(
            "application/json-patch+json",
            r#"[{"op":"remove","path":"/data/nope2"}]"#,
        ),
        step("patch-merge-not-json", "PATCH", CM_A).raw("application/merge-patch+json", "{nope"),
        step("patch-merge-invalid", "PATCH", CM_A).raw(
            "application/merge-patch+json",
            r#"{"data":{"bad key!":"v"}}"#,
        ),
        step("patch-unsupported-media-type", "PATCH", CM_A).raw("text/plain", "x"),
        step(
            "patch-missing",
            "PATCH",
            "/api/v1/namespaces/{ns}/configmaps/nope",
        )
        .raw("application/merge-patch+json", r#"{"data":{"m":"1"}}"#),
    ]
}

const APPLY: &str = "application/apply-patch+yaml";
const SSA: &str = "/api/v1/namespaces/{ns}/configmaps/ssa";

fn ssa(a: &str) -> String {
    json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "ssa"},
           "data": {"a": a, "b": "2"}})
    .to_string()
}

/// Server-side apply: managers, conflicts, force, and what apply refuses.
fn applies() -> Vec<Step> {
    vec![
        step("apply-no-field-manager", "PATCH", SSA).raw(APPLY, &ssa("1")),
        step("apply-create", "PATCH", "/api/v1/namespaces/{ns}/configmaps/ssa?fieldManager=m1")
            .raw(APPLY, &ssa("1")),
        step("apply-again", "PATCH", "/api/v1/namespaces/{ns}/configmaps/ssa?fieldManager=m1")
            .raw(APPLY, &ssa("1")),
        step(
            "apply-shared-value",
            "PATCH",
            "/api/v1/namespaces/{ns}/configmaps/ssa?fieldManager=m2",
        )
        .raw(APPLY, &ssa("1")),
        step("apply-conflict", "PATCH", "/api/v1/namespaces/{ns}/configmaps/ssa?fieldManager=m3")
            .raw(APPLY, &ssa("9")),
        step(
            "apply-force",
            "PATCH",
            "/api/v1/namespaces/{ns}/configmaps/ssa?fieldManager=m3&force=true",
        )
        .raw(APPLY, &ssa("9")),
        step(
            "apply-conflict-with-update",
            "PATCH",
            "/api/v1/namespaces/{ns}/configmaps/a?fieldManager=m1",
        )
        .raw(APPLY, &json!({"apiVersion": "v1", "kind": "ConfigMap",
                            "metadata": {"name": "a"}, "data": {"k": "w"}}).to_string()),
        step("apply-no-kind", "PATCH", "/api/v1/namespaces/{ns}/configmaps/ssa?fieldManager=m1")
            .raw(APPLY, r#"{"metadata":{"name":"ssa"},"data":{}}"#),
        step(
            "apply-name-mismatch",
            "PATCH",
            "/api/v1/namespaces/{ns}/configmaps/ssa?fieldManager=m1",
        )
        .raw(
            APPLY,
            r#"{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"other"}}"#,
        ),
        step("patch-force-not-apply", "PATCH", "/api/v1/namespaces/{ns}/configmaps/ssa?force=true")
            .raw("application/merge-patch+json", r#"{"data":{"c":"3"}}"#),
        step(
            "patch-long-field-manager",
            "PATCH",
            "/api/v1/namespaces/{ns}/configmaps/ssa?fieldManager=mmmmmmmmmmmmmmmmmmmmmmmmmmmmmmmmmmmmmmmmmmmmmmmmmmmmmmmmmmmmmmmmmmmmmmmmmmmmmmmmmmmmmmmmmmmmmmmmmmmmmmmmmmmmmmmmmmmmmmmmmmmmmmmmm",
        )
        .raw("application/merge-patch+json", r#"{"data":{"c":"3"}}"#),
        step(
            "update-conflicts-with-apply",
            "PATCH",
            "/api/v1/namespaces/{ns}/configmaps/ssa?fieldManager=ed",
        )
        .raw("application/merge-patch+json", r#"{"data":{"b":"5"}}"#),
        step(
            "apply-after-update",
            "PATCH",
            "/api/v1/namespaces/{ns}/configmaps/ssa?fieldManager=m1",
        )
        .raw(APPLY, &ssa("9")),
    ]
}

const LEASES: &str = "/apis/coordination.k8s.io/v1/namespaces/{ns}/leases";
const PVCS: &str = "/api/v1/namespaces/{ns}/persistentvolumeclaims";

fn lease(extra: Value) -> Value {
    let mut l = json!({"apiVersion": "coordination.k8s.io/v1", "kind": "Lease",
        "metadata": {"name": "l"},
        "spec": {"holderIdentity": "h", "leaseDurationSeconds": 15,
                 "renewTime": "2026-12-04T10:00:00.123456Z"}});
    if let (Some(m), Some(e)) = (l.as_object_mut(), extra.as_object()) {
        for (k, v) in e {
            m.insert(k.clone(), v.clone());
        }
    }
    l
}

fn pvc(spec: Value) -> Value {
    json!({"apiVersion": "v1", "kind": "PersistentVolumeClaim",
           "metadata": {"name": "claim"}, "spec": spec})
}

/// Leases, Nodes, Events (both groups), PersistentVolumeClaims and the
/// access reviews.
fn kinds() -> Vec<Step> {
    vec![
        step("lease-create", "POST", LEASES).json(lease(json!({}))),
        step("lease-bad-duration", "POST", LEASES).json(json!({
            "apiVersion": "coordination.k8s.io/v1", "kind": "Lease",
            "metadata": {"name": "bad"}, "spec": {"leaseDurationSeconds": 0}})),
        step("lease-bad-time", "POST", LEASES).json(json!({
            "apiVersion": "coordination.k8s.io/v1", "kind": "Lease",
            "metadata": {"name": "badtime"}, "spec": {"renewTime": "yesterday"}})),
        step(
            "lease-get",
            "GET",
            "/apis/coordination.k8s.io/v1/namespaces/{ns}/leases/l",
        ),
        step(
            "lease-update-stale",
            "PUT",
            "/apis/coordination.k8s.io/v1/namespaces/{ns}/leases/l",
        )
        .json(lease(
            json!({"metadata": {"name": "l", "resourceVersion": "1"}}),
        )),
        step(
            "lease-update-no-rv",
            "PUT",
            "/apis/coordination.k8s.io/v1/namespaces/{ns}/leases/l",
        )
        .json(lease(json!({}))),
        step(
            "lease-put-creates",
            "PUT",
            "/apis/coordination.k8s.io/v1/namespaces/{ns}/leases/l2",
        )
        .json(lease(json!({"metadata": {"name": "l2"}}))),
        step("nodes-list", "GET", "/api/v1/nodes"),
        step("node-missing", "GET", "/api/v1/nodes/nope"),
        step("events-list", "GET", "/api/v1/namespaces/{ns}/events"),
        step("event-create", "POST", "/api/v1/namespaces/{ns}/events").json(json!({
            "apiVersion": "v1", "kind": "Event", "metadata": {"name": "e1"},
            "involvedObject": {"kind": "ConfigMap", "name": "a", "namespace": "{ns}"},
            "reason": "Tested", "message": "m", "type": "Normal",
            "source": {"component": "differential"}})),
        step(
            "event-no-object-namespace",
            "POST",
            "/api/v1/namespaces/{ns}/events",
        )
        .json(json!({
            "apiVersion": "v1", "kind": "Event", "metadata": {"name": "e2"},
            "involvedObject": {"kind": "ConfigMap", "name": "a", "namespace": "elsewhere"},
            "reason": "Tested", "type": "Normal"})),
        step("event-bad-type", "POST", "/api/v1/namespaces/{ns}/events").json(json!({
            "apiVersion": "v1", "kind": "Event", "metadata": {"name": "e3"},
            "involvedObject": {"kind": "ConfigMap", "name": "a", "namespace": "{ns}"},
            "reason": "Tested", "type": "Odd"})),
        step(
            "events-v1-list",
            "GET",
            "/apis/events.k8s.io/v1/namespaces/{ns}/events",
        ),
        step(
            "events-v1-get",
            "GET",
            "/apis/events.k8s.io/v1/namespaces/{ns}/events/e1",
        ),
        step(
            "events-v1-create-invalid",
            "POST",
            "/apis/events.k8s.io/v1/namespaces/{ns}/events",
        )
        .json(json!({"apiVersion": "events.k8s.io/v1", "kind": "Event",
                         "metadata": {"name": "e4"}, "reason": "Tested"})),
        step("pvc-create", "POST", PVCS).json(pvc(json!({
            "accessModes": ["ReadWriteOnce"], "resources": {"requests": {"storage": "1Gi"}}}))),
        step("pvc-no-access-modes", "POST", PVCS).json(json!({
            "apiVersion": "v1", "kind": "PersistentVolumeClaim", "metadata": {"name": "noam"},
            "spec": {"resources": {"requests": {"storage": "1Gi"}}}})),
        step("pvc-no-storage", "POST", PVCS).json(json!({
            "apiVersion": "v1", "kind": "PersistentVolumeClaim", "metadata": {"name": "nost"},
            "spec": {"accessModes": ["ReadWriteOnce"]}})),
        step(
            "pvc-spec-immutable",
            "PATCH",
            "/api/v1/namespaces/{ns}/persistentvolumeclaims/claim",
        )
        .raw(
            "application/merge-patch+json",
            r#"{"spec":{"accessModes":["ReadWriteMany"]}}"#,
        ),
        step(
            "access-review",
            "POST",
            "/apis/authorization.k8s.io/v1/selfsubjectaccessreviews",
        )
        .json(
            json!({"apiVersion": "authorization.k8s.io/v1", "kind": "SelfSubjectAccessReview",
                     "spec": {"resourceAttributes": {"verb": "create", "resource": "pods",
                                                     "namespace": "{ns}"}}}),
        ),
        step(
            "access-review-empty",
            "POST",
            "/apis/authorization.k8s.io/v1/selfsubjectaccessreviews",
        )
        .json(
            json!({"apiVersion": "authorization.k8s.io/v1", "kind": "SelfSubjectAccessReview",
                     "spec": {}}),
        ),
        step(
            "self-review",
            "POST",
            "/apis/authentication.k8s.io/v1/selfsubjectreviews",
        )
        .json(json!({"apiVersion": "authentication.k8s.io/v1", "kind": "SelfSubjectReview"})),
    ]
}

fn selectors_deletes_and_discovery() -> Vec<Step> {
    vec![
        step(
            "list-label-selector",
            "GET",
            "/api/v1/namespaces/{ns}/configmaps?labelSelector=app%3Dx",
        ),
        step(
            "list-label-selector-set",
            "GET",
            "/api/v1/namespaces/{ns}/configmaps?labelSelector=app%20in%20(x%2Cy)",
        ),
        step(
            "list-bad-label-selector",
            "GET",
            "/api/v1/namespaces/{ns}/configmaps?labelSelector=a%20b%20c",
        ),
        step(
            "list-field-selector",
            "GET",
            "/api/v1/namespaces/{ns}/configmaps?fieldSelector=metadata.name%3Da",
        ),
        step(
            "list-bad-field-selector-field",
            "GET",
            "/api/v1/namespaces/{ns}/configmaps?fieldSelector=spec.nope%3Dx",
        ),
        step(
            "list-bad-field-selector-syntax",
            "GET",
            "/api/v1/namespaces/{ns}/configmaps?fieldSelector=metadata.name",
        ),
        // Deletes.
        step("delete-uid-precondition", "DELETE", CM_A).json(json!({
            "kind": "DeleteOptions", "apiVersion": "v1",
            "preconditions": {"uid": "00000000-0000-0000-0000-000000000000"}})),
        step("delete-rv-precondition", "DELETE", CM_A).json(json!({
            "kind": "DeleteOptions", "apiVersion": "v1",
            "preconditions": {"resourceVersion": "1"}})),
        step("delete", "DELETE", CM_A),
        step("delete-missing", "DELETE", CM_A),
        // Unknown things.
        step("unknown-resource", "GET", "/api/v1/namespaces/{ns}/nopes"),
        step(
            "unknown-group-resource",
            "GET",
            "/apis/nope.example.com/v1/nopes",
        ),
        step("unknown-version", "GET", "/api/v9/namespaces"),
        // Discovery and /version.
        step("discovery-core", "GET", "/api/v1"),
        step("discovery-apps", "GET", "/apis/apps/v1"),
        step("discovery-present-group", "GET", "/apis/apps"),
        step("discovery-absent-group", "GET", "/apis/nope.example.com"),
        step("discovery-absent-version", "GET", "/apis/apps/v9"),
        // The Gateway API: served by the sim natively, by the real plane
        // from the v1.6.3 CRDs (docs/control-plane.md#the-gateway-api).
        step(
            "discovery-gateway-group",
            "GET",
            "/apis/gateway.networking.k8s.io",
        ),
        step(
            "discovery-gateway-v1",
            "GET",
            "/apis/gateway.networking.k8s.io/v1",
        ),
        step("httproute-create", "POST", ROUTES).json(route("r1", "a.dev.example.com")),
        step("httproute-bad-host", "POST", ROUTES).json(route("r2", "bad_host.example.com")),
        step("httproute-upper-host", "POST", ROUTES).json(route("r3", "A.dev.example.com")),
        step("httproute-long-host", "POST", ROUTES).json(route(
            "r4",
            &format!("{}.example.com", vec!["a".repeat(60); 4].join(".")),
        )),
        step("httproute-ip-host", "POST", ROUTES).json(route("r5", "10.0.0.1")),
        step("version", "GET", "/version"),
    ]
}

const ROUTES: &str = "/apis/gateway.networking.k8s.io/v1/namespaces/{ns}/httproutes";

/// An HTTPRoute with one host (its Gateway need not exist).
fn route(name: &str, host: &str) -> Value {
    json!({
        "apiVersion": "gateway.networking.k8s.io/v1", "kind": "HTTPRoute",
        "metadata": {"name": name},
        "spec": {
            "parentRefs": [{"name": "gw"}],
            "hostnames": [host],
            "rules": [{"backendRefs": [{"name": "svc", "port": 80}]}],
        },
    })
}

/// A Deployment's scale subresource, ServiceAccounts and pods.
fn workloads() -> Vec<Step> {
    vec![
        step(
            "deployment-create",
            "POST",
            "/apis/apps/v1/namespaces/{ns}/deployments",
        )
        .json(json!({
            "apiVersion": "apps/v1", "kind": "Deployment",
            "metadata": {"name": "web"},
            "spec": {"replicas": 1, "selector": {"matchLabels": {"app": "web"}},
                     "template": {"metadata": {"labels": {"app": "web"}},
                                  "spec": {"containers": [{"name": "c", "image": "busybox",
                                                           "command": ["sleep", "3600"]}]}}}})),
        step(
            "deployment-bad-selector",
            "POST",
            "/apis/apps/v1/namespaces/{ns}/deployments",
        )
        .json(json!({
            "apiVersion": "apps/v1", "kind": "Deployment",
            "metadata": {"name": "bad"},
            "spec": {"replicas": 1, "selector": {"matchLabels": {"app": "one"}},
                     "template": {"metadata": {"labels": {"app": "other"}},
                                  "spec": {"containers": [{"name": "c", "image": "busybox"}]}}}})),
        step(
            "scale-get",
            "GET",
            "/apis/apps/v1/namespaces/{ns}/deployments/web/scale",
        ),
        step(
            "scale-put",
            "PUT",
            "/apis/apps/v1/namespaces/{ns}/deployments/web/scale",
        )
        .json(json!({
            "apiVersion": "autoscaling/v1", "kind": "Scale",
            "metadata": {"name": "web", "namespace": "{ns}"}, "spec": {"replicas": 2}})),
        step(
            "scale-patch",
            "PATCH",
            "/apis/apps/v1/namespaces/{ns}/deployments/web/scale",
        )
        .raw("application/merge-patch+json", r#"{"spec":{"replicas":0}}"#),
        step(
            "scale-missing",
            "GET",
            "/apis/apps/v1/namespaces/{ns}/deployments/nope/scale",
        ),
        // ServiceAccounts and the pods that name them.
        step(
            "serviceaccount-default",
            "GET",
            "/api/v1/namespaces/{ns}/serviceaccounts/default",
        ),
        step(
            "pod-missing-serviceaccount",
            "POST",
            "/api/v1/namespaces/{ns}/pods",
        )
        .json(pod("nosa", Some("nope"))),
        step("pod-create", "POST", "/api/v1/namespaces/{ns}/pods").json(pod("p", None)),
        step("pod-no-containers", "POST", "/api/v1/namespaces/{ns}/pods").json(json!({
            "apiVersion": "v1", "kind": "Pod", "metadata": {"name": "empty"},
            "spec": {"containers": []}})),
        step(
            "pod-delete-graceful",
            "DELETE",
            "/api/v1/namespaces/{ns}/pods/p",
        )
        .json(json!({
            "kind": "DeleteOptions", "apiVersion": "v1", "gracePeriodSeconds": 30})),
    ]
}

/// What a backend answered to one step, in the terms compared.
#[derive(Debug)]
struct Outcome {
    code: u16,
    /// The answer's `kind` (a Status, or the object's kind).
    kind: String,
    reason: String,
    /// `details`: kind, group, name (masked).
    details: String,
    /// `causes`: (field, type) pairs, sorted.
    causes: Vec<(String, String)>,
    /// The Status message, masked.
    message: String,
}

fn send(b: &Backend, s: &Step) -> Outcome {
    let path = s.path.replace("{ns}", &b.ns);
    let url = format!("{}{}", b.client.server(), path);
    let agent = b
        .client
        .stream_agent(Some(std::time::Duration::from_secs(30)));
    let token = b
        .client
        .connection()
        .credentials
        .bearer()
        .expect("credentials");
    let method = ureq::http::Method::from_bytes(s.method.as_bytes()).expect("method");
    let mut req = ureq::http::Request::builder()
        .method(method)
        .uri(&url)
        .header("Accept", "application/json");
    if let Some(t) = token {
        req = req.header("Authorization", format!("Bearer {t}"));
    }
    if let Some(ct) = s.content_type {
        req = req.header("Content-Type", ct);
    }
    let body = s.body.as_deref().unwrap_or("").replace("{ns}", &b.ns);
    let resp = agent
        .run(req.body(body.into_bytes()).expect("request"))
        .unwrap_or_else(|e| panic!("{} on {:?}: {e}", s.name, b.kind));
    let code = resp.status().as_u16();
    let mut text = String::new();
    resp.into_body()
        .into_reader()
        .take(4 << 20)
        .read_to_string(&mut text)
        .expect("read the answer");
    let v: Value = serde_json::from_str(&text).unwrap_or(Value::Null);
    let mask = |s: &str| mask(s, &b.ns);
    let mut causes: Vec<(String, String)> = v["details"]["causes"]
        .as_array()
        .map(|cs| {
            cs.iter()
                .map(|c| {
                    (
                        mask(c["field"].as_str().unwrap_or("")),
                        c["reason"].as_str().unwrap_or("").to_string(),
                    )
                })
                .collect()
        })
        .unwrap_or_default();
    causes.sort();
    let is_status = v["kind"] == "Status";
    Outcome {
        code,
        kind: v["kind"].as_str().unwrap_or("(not JSON)").to_string(),
        reason: v["reason"].as_str().unwrap_or("").to_string(),
        details: if is_status {
            mask(&format!(
                "kind={} group={} name={}",
                v["details"]["kind"].as_str().unwrap_or(""),
                v["details"]["group"].as_str().unwrap_or(""),
                v["details"]["name"].as_str().unwrap_or("")
            ))
        } else {
            String::new()
        },
        causes,
        message: if is_status {
            mask(v["message"].as_str().unwrap_or(""))
        } else {
            String::new()
        },
    }
}

/// The namespace as `{ns}`, uuids as `{uid}`, then every run of digits as
/// `N` (resourceVersions, times, generated names' suffixes).
fn mask(s: &str, ns: &str) -> String {
    let s = s.replace(ns, "{ns}");
    let mut out = String::with_capacity(s.len());
    let b = s.as_bytes();
    let mut i = 0;
    while i < b.len() {
        if is_uuid(&b[i..]) {
            out.push_str("{uid}");
            i += 36;
        } else if b[i].is_ascii_digit() {
            while i < b.len() && b[i].is_ascii_digit() {
                i += 1;
            }
            out.push('N');
        } else {
            let ch = s[i..].chars().next().unwrap_or(' ');
            out.push(ch);
            i += ch.len_utf8();
        }
    }
    out
}

fn is_uuid(b: &[u8]) -> bool {
    b.len() >= 36
        && b[..36].iter().enumerate().all(|(i, c)| match i {
            8 | 13 | 18 | 23 => *c == b'-',
            _ => c.is_ascii_hexdigit(),
        })
}

/// docs/sim.md's table of steps whose messages differ on purpose: the
/// rows of the table after the `### Message differences` heading, each
/// `` | `step` | reason | ``.
fn listed_differences() -> BTreeMap<String, String> {
    let doc = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/docs/sim.md"))
        .expect("docs/sim.md");
    let Some(at) = doc.find("### Message differences") else {
        return BTreeMap::new();
    };
    doc[at..]
        .lines()
        .skip(1)
        .skip_while(|l| !l.starts_with('|'))
        .take_while(|l| l.starts_with('|'))
        .filter_map(|l| {
            let mut cells = l.split('|').map(str::trim).filter(|c| !c.is_empty());
            let step = cells.next()?.strip_prefix('`')?.strip_suffix('`')?;
            Some((step.to_string(), cells.next().unwrap_or("").to_string()))
        })
        .collect()
}

#[test]
fn the_sim_answers_as_the_real_api_server() {
    let _w = watchdog(300);
    on_real("differential", |real| {
        let sim = Backend::sim("differential");
        let listed = listed_differences();
        let mut failures = String::new();
        let mut report = String::new();
        let mut differing = Vec::new();
        for s in steps() {
            let r = send(real, &s);
            let m = send(&sim, &s);
            eprintln!(
                "step {}: real {} {}, sim {} {}",
                s.name, r.code, r.reason, m.code, m.reason
            );
            let same_shape = r.code == m.code
                && r.reason == m.reason
                && r.details == m.details
                && r.causes == m.causes
                && (r.kind == m.kind || r.code >= 300);
            if !same_shape {
                let _ = writeln!(failures, "{}:\n  real {r:?}\n  sim  {m:?}", s.name);
            }
            if r.message != m.message {
                differing.push(s.name);
                let _ = writeln!(
                    report,
                    "{}:\n  real: {}\n  sim:  {}",
                    s.name, r.message, m.message
                );
                if !listed.contains_key(s.name) {
                    let _ = writeln!(
                        failures,
                        "{}: the message differs and docs/sim.md does not list it:\n  real: {}\n  sim:  {}",
                        s.name, r.message, m.message
                    );
                }
            }
        }
        for name in listed.keys() {
            if !differing.iter().any(|d| d == name) {
                let _ = writeln!(
                    failures,
                    "{name}: listed in docs/sim.md as a message difference, but the messages agree (or there is no such step): drop the row"
                );
            }
        }
        eprintln!("message differences:\n{report}");
        assert!(failures.is_empty(), "{failures}");
    });
}
