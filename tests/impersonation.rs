//! `[cluster] impersonate` on the sim (docs/SECURITY.md#impersonation):
//! a `kubegate sim` that knows its callers (`--token-auth-file`), runs
//! RBAC and writes an audit log; the daemon in kubeconfig mode as the
//! file's `kubegate-daemon` user, granted exactly
//! scripts/rbac-impersonation.yaml's impersonation (the file applied with
//! its namespaces moved) and nothing in the workspaces; an OIDC principal
//! (a token of the test issuer, tests/common/issuer.rs) whose rule maps it
//! to the group the file's example developer Role is bound to.
//!
//! The principal execs in its workspace as itself; in a second project
//! whose Role lets the developers look but not exec, the cluster refuses
//! it with its own message although kubegate's rule allows it; the sim's
//! audit log names the daemon as `user` and the principal as
//! `impersonatedUser`. A header the principal sends to impersonate someone
//! else never reaches the cluster. tests/rbac_real.rs (phase 4) does the
//! same on the real API server.

mod common;

use common::daemon::DaemonProc;
use common::issuer::{claims, oidc_toml, RsaKey, TestIssuer};
use common::rbac_file::{adapted, documents};
use common::{temp_dir, wait_for, SimProc};
use serde_json::{json, Value};
use std::time::Duration;

const RBAC_IMPERSONATION: &str = concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/scripts/rbac-impersonation.yaml"
);
const PROJECT: &str = "team-a";
const DENIED: &str = "team-b";
const UID: &str = "demo-uid";
const DEVELOPERS: &str = "kubegate:developers";
const WAIT: Duration = Duration::from_secs(60);

/// The OIDC rule: group `oidc:dev` -> both projects, impersonated in the
/// developers' group.
fn rules() -> String {
    format!(
        r#"
[[oidc.rule]]
group = "oidc:dev"
workspaces = ["{PROJECT}/{UID}", "{DENIED}/{UID}"]
kube_groups = ["{DEVELOPERS}"]
"#
    )
}

fn exec_body(project: &str) -> Value {
    json!({"workspace": {"project": project, "uid": UID}, "deployment": "hello",
           "command": ["sh", "-c", "echo hi"]})
}

fn post_exec(d: &DaemonProc, token: &str, body: &Value, extra: &[(&str, &str)]) -> (u16, Value) {
    let (st, b) = d.request_with_headers(
        "POST",
        "/v1/exec",
        Some(token),
        Some(body.to_string().as_bytes()),
        extra,
    );
    (st, serde_json::from_slice(&b).unwrap_or(Value::Null))
}

#[test]
fn the_daemon_acts_in_workspaces_as_the_oidc_principal() {
    let _dog = common::backend::watchdog(300);
    let dir = temp_dir("impersonation");
    let daemon_token = kubegate::token::random_hex();
    let csv = dir.join("tokens.csv");
    std::fs::write(
        &csv,
        format!("{daemon_token},kubegate-daemon,uid-daemon,\"kubegate:daemons\"\n"),
    )
    .expect("write the token file");
    let audit = dir.join("audit.log");
    let sim = SimProc::start(&[
        "--tls",
        "--token-auth-file",
        csv.to_str().expect("utf-8"),
        "--audit-log",
        audit.to_str().expect("utf-8"),
        "--namespace",
        PROJECT,
        "--namespace",
        DENIED,
    ]);

    // The impersonation file, its ServiceAccount subject replaced by the
    // token file's user (the sim has no TokenRequest for this), "demo"
    // moved to the project.
    let text = std::fs::read_to_string(RBAC_IMPERSONATION).expect("read the file");
    let mut docs = adapted(
        &documents(&text),
        &[("default", "default"), ("demo", PROJECT)],
    );
    for d in &mut docs {
        if d["kind"] == "ClusterRoleBinding" {
            d["subjects"] = json!([{"apiGroup": "rbac.authorization.k8s.io",
                                    "kind": "User", "name": "kubegate-daemon"}]);
        }
        sim.apply(d);
    }
    sim.apply(&json!({
        "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "Role",
        "metadata": {"name": "look-only", "namespace": DENIED},
        "rules": [{"apiGroups": ["apps"], "resources": ["deployments"], "verbs": ["get", "list"]},
                  {"apiGroups": ["apps"], "resources": ["replicasets"], "verbs": ["list"]},
                  {"apiGroups": [""], "resources": ["pods"], "verbs": ["list"]}]}));
    sim.apply(&json!({
        "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "RoleBinding",
        "metadata": {"name": "look-only", "namespace": DENIED},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": "look-only"},
        "subjects": [{"apiGroup": "rbac.authorization.k8s.io", "kind": "Group", "name": DEVELOPERS}]}));
    for ns in [PROJECT, DENIED] {
        let mut dep =
            kubegate::server::demo::demo_deployment("kubegate", "kubegate.dev/workspace-uid");
        dep["metadata"]["namespace"] = json!(ns);
        sim.apply(&dep);
        wait_for(&format!("deployment {ns}/hello ready"), WAIT, || {
            let v = sim.kubectl_json(&["-n", ns, "get", "deployment", "hello"]);
            (v["status"]["readyReplicas"] == 1).then_some(())
        });
    }

    // The daemon's kubeconfig: the sim's, with the daemon user's token.
    let admin = std::fs::read_to_string(&sim.kubeconfig).expect("the sim's kubeconfig");
    let admin_token = sim.token.clone().expect("the sim's admin token");
    assert!(admin.contains(&admin_token));
    let kubeconfig = dir.join("daemon.kubeconfig");
    std::fs::write(&kubeconfig, admin.replace(&admin_token, &daemon_token))
        .expect("write the daemon's kubeconfig");

    let keys = temp_dir("impersonation-keys");
    let key = RsaKey::generate(&keys, "k1");
    let issuer = TestIssuer::start(&[&key]);
    let (static_token, digest) = common::daemon::random_token();
    let config = format!(
        r#"[server]
listen = "127.0.0.1:0"
state_dir = "./state"

[cluster]
mode = "kubeconfig"
kubeconfig = "{}"
pod_access = "direct"
impersonate = true

[[principal]]
name = "robot"
token_sha256 = "{digest}"
workspaces = ["{PROJECT}/{UID}"]
{}"#,
        kubeconfig.display(),
        oidc_toml(&issuer.url, &rules())
    );
    let mut d = DaemonProc::start_config(&config, kubeconfig.clone(), &static_token, "info");
    let token = key.sign(&claims(&issuer.url, "ann"));
    let who = "oidc:ann@example.com";

    // Allowed by kubegate's rule and by the developers' Role: runs, as
    // the principal (the first request may wait for the issuer's keys).
    let (st, v) = wait_for("an exec as the principal", WAIT, || {
        let r = post_exec(&d, &token, &exec_body(PROJECT), &[]);
        (r.0 != 503).then_some(r)
    });
    assert_eq!(st, 200, "{v}");
    assert_eq!(
        (v["exitCode"].as_i64(), v["stdout"].as_str()),
        (Some(0), Some("hi\n")),
        "{v}"
    );

    // A principal's own Impersonate-* headers go nowhere: still itself.
    let (st, v) = post_exec(
        &d,
        &token,
        &exec_body(PROJECT),
        &[
            ("Impersonate-User", "kubegate-sim-admin"),
            ("Impersonate-Group", "system:masters"),
        ],
    );
    assert_eq!(st, 200, "{v}");

    // Allowed by kubegate, refused by the cluster: its message.
    let (st, v) = post_exec(&d, &token, &exec_body(DENIED), &[]);
    assert_eq!(st, 403, "{v}");
    assert_eq!(v["error"]["code"], "EXEC_TARGET_FORBIDDEN", "{v}");
    let message = v["error"]["message"].as_str().unwrap_or("");
    assert!(
        message.contains(&format!("User \"{who}\" cannot")) && message.contains(DENIED),
        "{message}"
    );

    // A static principal without kube_groups has no developer binding:
    // the cluster refuses its look-ups.
    let (st, v) = post_exec(&d, &static_token, &exec_body(PROJECT), &[]);
    assert_eq!(st, 403, "{v}");
    assert!(
        v["error"]["message"]
            .as_str()
            .unwrap_or("")
            .contains("User \"robot\" cannot"),
        "{v}"
    );
    assert_eq!(d.stop(), Some(0), "daemon log:\n{}", d.log_text());
    assert!(!d.log_text().contains(&token));

    check_audit(&audit, who);
}

/// The sim's audit log: every request of the daemon's user made for the
/// principal names it as impersonatedUser, in the developers' group; the
/// exec in the project allowed, the one in the other refused. None
/// impersonates the admin or system:masters.
fn check_audit(audit: &std::path::Path, who: &str) {
    let lines: Vec<Value> = std::fs::read_to_string(audit)
        .expect("the audit log")
        .lines()
        .filter_map(|l| serde_json::from_str(l).ok())
        .collect();
    let as_ann: Vec<&Value> = lines
        .iter()
        .filter(|e| e["impersonatedUser"]["username"] == who)
        .collect();
    assert!(!as_ann.is_empty(), "no request as {who}");
    for e in &as_ann {
        assert_eq!(e["user"]["username"], "kubegate-daemon", "{e}");
        let groups = e["impersonatedUser"]["groups"].to_string();
        assert!(groups.contains(DEVELOPERS), "{e}");
        assert!(!groups.contains("system:masters"), "{e}");
    }
    let exec_in = |ns: &str, code: u64| {
        as_ann.iter().any(|e| {
            e["objectRef"]["subresource"] == "exec"
                && e["objectRef"]["namespace"] == ns
                && e["responseStatus"]["code"] == code
        })
    };
    assert!(exec_in(PROJECT, 101), "{as_ann:#?}");
    assert!(exec_in(DENIED, 403), "{as_ann:#?}");
    assert!(
        !lines
            .iter()
            .any(|e| e["impersonatedUser"]["username"] == "kubegate-sim-admin"),
        "a client header reached the cluster"
    );
}
