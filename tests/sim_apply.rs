//! Server-side apply (docs/sim.md#server-side-apply) through kubectl, on
//! two backends (tests/common/backend.rs): the sim and the real API
//! server must take the same applies, refuse the same conflicts in the same
//! words, and record the same `managedFields` for the managers kubectl
//! and the test name (the real plane's controllers add entries of their
//! own, which are left out).

mod common;

use common::backend::Backend;
use serde_json::{json, Value};
use std::io::Write;
use std::process::Stdio;

/// Runs kubectl with `args` in the backend's namespace, `stdin` as input;
/// (success, stdout, stderr).
fn kubectl(b: &Backend, args: &[&str], stdin: &str) -> (bool, String, String) {
    let mut c = b.kubectl();
    c.arg("-n")
        .arg(&b.ns)
        .args(args)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    let mut child = c.spawn().expect("kubectl");
    child
        .stdin
        .take()
        .expect("stdin")
        .write_all(stdin.as_bytes())
        .expect("write");
    let out = child.wait_with_output().expect("kubectl output");
    (
        out.status.success(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

fn apply(b: &Backend, manifest: &Value, extra: &[&str]) -> (bool, String) {
    let mut args = vec!["apply", "--server-side", "-f", "-"];
    args.extend_from_slice(extra);
    let (ok, out, err) = kubectl(b, &args, &manifest.to_string());
    (ok, if ok { out } else { err })
}

/// The `managedFields` of managers `kubectl…` and `other`, as
/// (manager, operation, fieldsV1).
fn managed(b: &Backend, kind: &str, name: &str) -> Vec<(String, String, Value)> {
    let (ok, out, err) = kubectl(
        b,
        &["get", kind, name, "-o", "json", "--show-managed-fields"],
        "",
    );
    assert!(ok, "{err}");
    let v: Value = serde_json::from_str(&out).expect("json");
    v["metadata"]["managedFields"]
        .as_array()
        .map(|a| {
            a.iter()
                .filter(|e| {
                    let m = e["manager"].as_str().unwrap_or("");
                    m.starts_with("kubectl") || m == "other"
                })
                .map(|e| {
                    (
                        e["manager"].as_str().unwrap_or("").to_string(),
                        e["operation"].as_str().unwrap_or("").to_string(),
                        e["fieldsV1"].clone(),
                    )
                })
                .collect()
        })
        .unwrap_or_default()
}

fn config_map(a: &str) -> Value {
    json!({"apiVersion": "v1", "kind": "ConfigMap",
           "metadata": {"name": "ssa", "labels": {"app": "x"}},
           "data": {"a": a, "b": "2"}})
}

two_backends!(conflicts_force_and_ownership, 180);
fn conflicts_force_and_ownership(b: &Backend) {
    let (ok, out) = apply(b, &config_map("1"), &[]);
    assert!(ok, "{out}");
    // Another manager sending another value for a field kubectl owns.
    let (ok, err) = apply(b, &config_map("9"), &["--field-manager", "other"]);
    assert!(!ok);
    assert!(
        err.contains(r#"Apply failed with 1 conflict: conflict with "kubectl": .data.a"#),
        "{err}"
    );
    let (ok, out) = apply(
        b,
        &config_map("9"),
        &["--field-manager", "other", "--force-conflicts"],
    );
    assert!(ok, "{out}");
    assert_eq!(
        managed(b, "configmap", "ssa"),
        [
            (
                "kubectl".to_string(),
                "Apply".to_string(),
                json!({"f:data": {"f:b": {}}, "f:metadata": {"f:labels": {"f:app": {}}}})
            ),
            (
                "other".to_string(),
                "Apply".to_string(),
                json!({"f:data": {"f:a": {}, "f:b": {}}, "f:metadata": {"f:labels": {"f:app": {}}}})
            )
        ]
    );
    // kubectl applies without b: b stays, `other` still owns it.
    let (ok, out) = apply(
        b,
        &json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "ssa"}}),
        &[],
    );
    assert!(ok, "{out}");
    let (ok, out, err) = kubectl(b, &["get", "configmap", "ssa", "-o", "json"], "");
    assert!(ok, "{err}");
    let v: Value = serde_json::from_str(&out).expect("json");
    assert_eq!(v["data"], json!({"a": "9", "b": "2"}));
    assert_eq!(v["metadata"]["labels"], json!({"app": "x"}));

    // An object kubectl created: its fields are kubectl-create's.
    let (ok, _, err) = kubectl(
        b,
        &["create", "configmap", "made", "--from-literal=k=v"],
        "",
    );
    assert!(ok, "{err}");
    assert_eq!(
        managed(b, "configmap", "made"),
        [(
            "kubectl-create".to_string(),
            "Update".to_string(),
            json!({"f:data": {".": {}, "f:k": {}}})
        )]
    );
    let (ok, err) = apply(
        b,
        &json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "made"},
                "data": {"k": "w"}}),
        &[],
    );
    assert!(!ok);
    assert!(
        err.contains(
            r#"Apply failed with 1 conflict: conflict with "kubectl-create" using v1: .data.k"#
        ),
        "{err}"
    );
}

fn deployment(image: &str) -> Value {
    json!({"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "ssad"},
           "spec": {"replicas": 1, "selector": {"matchLabels": {"app": "ssad"}},
                    "template": {"metadata": {"labels": {"app": "ssad"}},
                                 "spec": {"containers": [{"name": "c", "image": image,
                                                          "args": ["sleep", "3600"]}]}}}})
}

two_backends!(keyed_lists_and_atomic_selectors, 180);
fn keyed_lists_and_atomic_selectors(b: &Backend) {
    let (ok, out) = apply(b, &deployment("busybox"), &[]);
    assert!(ok, "{out}");
    assert_eq!(
        managed(b, "deployment", "ssad"),
        [(
            "kubectl".to_string(),
            "Apply".to_string(),
            json!({"f:spec": {"f:replicas": {}, "f:selector": {},
                   "f:template": {"f:metadata": {"f:labels": {"f:app": {}}},
                                  "f:spec": {"f:containers": {"k:{\"name\":\"c\"}": {
                                      ".": {}, "f:args": {}, "f:image": {}, "f:name": {}}}}}}})
        )]
    );
    let (ok, err) = apply(b, &deployment("alpine"), &["--field-manager", "other"]);
    assert!(!ok);
    assert!(
        err.contains(
            r#"Apply failed with 1 conflict: conflict with "kubectl": .spec.template.spec.containers[name="c"].image"#
        ),
        "{err}"
    );
    let (ok, out) = apply(
        b,
        &deployment("alpine"),
        &["--field-manager", "other", "--force-conflicts"],
    );
    assert!(ok, "{out}");
    let (ok, out, err) = kubectl(
        b,
        &[
            "get",
            "deployment",
            "ssad",
            "-o",
            "jsonpath={.spec.template.spec.containers[0].image}",
        ],
        "",
    );
    assert!(ok, "{err}");
    assert_eq!(out, "alpine");
}
