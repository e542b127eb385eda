//! The workspace token lives in a Secret, not in the pod (issue 13 item 8;
//! docs/sessions.md "The workspace token"): `kubegate serve` in kubeconfig
//! mode against a separate `kubegate sim`. A session's pod JSON holds no
//! token, only a `secretKeyRef` to the pod's own Secret; the Secret is
//! Opaque, labelled, owned by the pod, and goes with it; the workspace
//! routes reach the agent (so the agent got its token from the Secret);
//! the daemon's log never shows the token. After a restart that finds the
//! pod gone, the pod recreated from the checkpoint gets a Secret of its
//! own. Waits are conditions with deadlines; a watchdog ends a hung run.

use crate::common::bench::watchdog;
use crate::common::daemon::{DaemonProc, SseClient, SseEvent};
use crate::common::{wait_for, SimProc};
use base64::Engine as _;
use serde_json::{json, Value};
use std::os::unix::fs::PermissionsExt;
use std::time::Duration;

const NS: &str = "default";

/// A random principal token and the config that admits it.
fn config(kubeconfig: &std::path::Path) -> (String, String) {
    let (token, digest) = crate::common::daemon::random_token();
    let text = format!(
        r#"[server]
listen = "127.0.0.1:0"
state_dir = "./state"

[cluster]
mode = "kubeconfig"
kubeconfig = "{}"
session_namespace = "{NS}"

[sessions]
checkpoint_interval_secs = 1

[[principal]]
name = "dev-one"
token_sha256 = "{digest}"
workspaces = []
may_start_sessions = true
"#,
        kubeconfig.display()
    );
    (token, text)
}

fn status_of(e: &SseEvent) -> Option<&str> {
    (e.event == "status")
        .then(|| e.data["status"].as_str())
        .flatten()
}

fn until_status(sse: &mut SseClient, want: &str) {
    let seen = sse.until(|e| matches!(status_of(e), Some(s) if s == want || s == "failed"));
    assert_eq!(seen.last().and_then(status_of), Some(want), "{seen:#?}");
}

fn body() -> Value {
    json!({
        "apps": [{"name": "web", "entry": "main.sh", "command": ["sh", "main.sh"], "io": "streams"}],
        "bundle": {"files": [
            {"path": "main.sh", "content": "echo started; while :; do sleep 1; done"},
            {"path": "notes.txt", "content": "from the bundle\n"}
        ]}
    })
}

fn record(d: &DaemonProc, id: &str) -> Value {
    let path = d.dir.join("state/sessions").join(format!("{id}.json"));
    let mode = std::fs::metadata(&path)
        .expect("the record")
        .permissions()
        .mode();
    assert_eq!(mode & 0o777, 0o600, "the record keeps the token: 0600");
    serde_json::from_slice(&std::fs::read(&path).expect("read the record")).expect("record json")
}

fn selector(id: &str) -> String {
    format!("kubegate.dev/session-id={id}")
}

fn items(sim: &SimProc, kind: &str, id: &str) -> Vec<Value> {
    let v = sim.kubectl_json(&["-n", NS, "get", kind, "-l", &selector(id)]);
    v["items"].as_array().cloned().unwrap_or_default()
}

/// The session's one pod, Running; its Secret checked against it and the
/// token. Returns (pod name, pod uid).
fn check_pod_and_secret(sim: &SimProc, id: &str, token: &str) -> (String, String) {
    let pods = items(sim, "pods", id);
    assert_eq!(pods.len(), 1, "{pods:#?}");
    let pod = &pods[0];
    let name = pod["metadata"]["name"].as_str().expect("name").to_string();
    let uid = pod["metadata"]["uid"].as_str().expect("uid").to_string();
    // Nothing a pod reader sees holds the token.
    let all = sim.kubectl_json(&["get", "pods", "-A", "-o", "json"]);
    assert!(!all.to_string().contains(token), "a token in the pod JSON");
    let ws = pod["spec"]["containers"]
        .as_array()
        .expect("containers")
        .iter()
        .find(|c| c["name"] == "workspace")
        .expect("the workspace container");
    let var = ws["env"]
        .as_array()
        .expect("env")
        .iter()
        .find(|e| e["name"] == "KUBEGATE_WORKSPACE_TOKEN")
        .expect("the token variable");
    let secret_name = format!("{name}-token");
    assert_eq!(
        var,
        &json!({"name": "KUBEGATE_WORKSPACE_TOKEN",
                "valueFrom": {"secretKeyRef": {"name": secret_name, "key": "token"}}})
    );
    let secrets = items(sim, "secrets", id);
    assert_eq!(secrets.len(), 1, "one Secret per pod: {secrets:#?}");
    let s = &secrets[0];
    assert_eq!(s["metadata"]["name"], secret_name.as_str());
    assert!(!secret_name.contains("dev-one"), "no principal in the name");
    assert_eq!(s["type"], "Opaque");
    assert_eq!(s["immutable"], true);
    assert_eq!(
        s["metadata"]["labels"]["app.kubernetes.io/managed-by"],
        "kubegate"
    );
    assert_eq!(
        s["metadata"]["ownerReferences"],
        json!([{"apiVersion": "v1", "kind": "Pod", "name": name, "uid": uid}])
    );
    let data = s["data"].as_object().expect("data");
    assert_eq!(data.keys().collect::<Vec<_>>(), ["token"]);
    let got = base64::engine::general_purpose::STANDARD
        .decode(data["token"].as_str().expect("a string"))
        .expect("base64");
    assert_eq!(got, token.as_bytes());
    (name, uid)
}

fn read_file(d: &DaemonProc, id: &str, path: &str) -> (u16, Value) {
    d.json(
        "GET",
        &format!("/v1/sessions/{id}/workspace/file?path={path}"),
        None,
    )
}

fn stop_session(sim: &SimProc, d: &DaemonProc, id: &str, sse: &mut SseClient) {
    let (st, _) = d.request(
        "DELETE",
        &format!("/v1/sessions/{id}"),
        Some(&d.token),
        None,
    );
    assert_eq!(st, 204);
    until_status(sse, "stopped");
    wait_for(
        "the session's pods and Secrets to be gone",
        Duration::from_secs(30),
        || {
            (items(sim, "pods", id).is_empty() && items(sim, "secrets", id).is_empty())
                .then_some(())
        },
    );
}

#[test]
fn the_workspace_token_is_in_a_secret_the_pod_owns_and_goes_with_it() {
    let _dog = watchdog("session_secret", 240);
    let sim = SimProc::start(&[]);
    let (token, text) = config(&sim.kubeconfig);
    let mut d = DaemonProc::start_config(&text, sim.kubeconfig.clone(), &token, "debug");
    let (id, mut sse) = d.create_session(&body());
    until_status(&mut sse, "running");
    let rec = record(&d, &id);
    let agent_token = rec["workspaceToken"]
        .as_str()
        .expect("the record keeps the token")
        .to_string();
    assert!(agent_token.len() >= 32, "{agent_token}");
    check_pod_and_secret(&sim, &id, &agent_token);

    // The workspace routes reach the agent: it took its token from the
    // Secret.
    let (st, v) = d.json(
        "POST",
        &format!("/v1/sessions/{id}/workspace"),
        Some(&json!({"write": [{"path": "lib/msg.txt", "content": "v2\n"}]})),
    );
    assert_eq!(st, 200, "{v}");
    let (st, v) = read_file(&d, &id, "lib/msg.txt");
    assert_eq!((st, v["content"].as_str()), (200, Some("v2\n")), "{v}");

    stop_session(&sim, &d, &id, &mut sse);
    assert_eq!(d.stop(), Some(0), "daemon log:\n{}", d.log_text());
    assert!(
        !d.log_text().contains(&agent_token),
        "the workspace token in the daemon's log"
    );
}

#[test]
fn a_pod_recreated_after_a_restart_gets_a_secret_of_its_own() {
    let _dog = watchdog("session_secret", 240);
    let sim = SimProc::start(&[]);
    let (token, text) = config(&sim.kubeconfig);
    let mut d = DaemonProc::start_config(&text, sim.kubeconfig.clone(), &token, "info");
    let (id, mut sse) = d.create_session(&body());
    until_status(&mut sse, "running");
    let agent_token = record(&d, &id)["workspaceToken"]
        .as_str()
        .expect("token")
        .to_string();
    let (old_pod, _) = check_pod_and_secret(&sim, &id, &agent_token);
    wait_for("a checkpoint", Duration::from_secs(30), || {
        (record(&d, &id)["hasCheckpoint"] == true).then_some(())
    });
    assert_eq!(d.stop(), Some(0), "daemon log:\n{}", d.log_text());

    // While the daemon is down the pod goes, and its Secret with it.
    sim.kubectl_ok(&[
        "-n",
        NS,
        "delete",
        "pod",
        &old_pod,
        "--grace-period=0",
        "--force",
    ]);
    wait_for(
        "the old pod's Secret to be collected",
        Duration::from_secs(30),
        || {
            (items(&sim, "pods", &id).is_empty() && items(&sim, "secrets", &id).is_empty())
                .then_some(())
        },
    );

    d.restart("info");
    d.token = token;
    let mut sse = SseClient::open(&d, &format!("/v1/sessions/{id}/events"), None);
    until_status(&mut sse, "running");
    let (new_pod, _) = check_pod_and_secret(&sim, &id, &agent_token);
    assert_ne!(new_pod, old_pod, "recreated, not re-adopted");
    // The recreated agent answers with the recorded token (from its new
    // Secret) and holds the checkpoint's files.
    let (st, v) = read_file(&d, &id, "notes.txt");
    assert_eq!(
        (st, v["content"].as_str()),
        (200, Some("from the bundle\n")),
        "{v}"
    );
    stop_session(&sim, &d, &id, &mut sse);
    assert_eq!(d.stop(), Some(0), "daemon log:\n{}", d.log_text());
}
