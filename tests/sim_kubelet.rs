//! The sim's kubelet through the API: pod phases, restart policies and
//! back-off, init containers, activeDeadlineSeconds, image pull failures,
//! graceful deletion, volumes and the downward API.

mod common;

use common::{wait_for, SimProc};
use serde_json::{json, Value};
use std::time::Duration;

fn pod(name: &str, spec: Value) -> Value {
    json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name}, "spec": spec})
}

fn get(sim: &SimProc, name: &str) -> Value {
    sim.kubectl_json(&["get", "pod", name])
}

fn wait_pod(sim: &SimProc, name: &str, what: &str, f: impl Fn(&Value) -> bool) -> Value {
    wait_for(
        &format!("pod {name}: {what}"),
        Duration::from_secs(60),
        || {
            let p = get(sim, name);
            f(&p).then_some(p)
        },
    )
}

#[test]
fn restart_policy_never_ends_in_succeeded_or_failed() {
    let sim = SimProc::start(&[]);
    sim.apply(&pod(
            "ok",
            json!({"restartPolicy": "Never", "containers": [{"name": "c", "image": "busybox", "command": ["sh", "-c", "exit 0"]}]}),
        ),
    );
    sim.apply(&pod(
            "bad",
            json!({"restartPolicy": "Never", "containers": [{"name": "c", "image": "busybox", "command": ["sh", "-c", "exit 7"]}]}),
        ),
    );
    let ok = wait_pod(&sim, "ok", "Succeeded", |p| {
        p["status"]["phase"] == "Succeeded"
    });
    let t = &ok["status"]["containerStatuses"][0]["state"]["terminated"];
    assert_eq!(t["exitCode"], 0);
    assert_eq!(t["reason"], "Completed");
    let bad = wait_pod(&sim, "bad", "Failed", |p| p["status"]["phase"] == "Failed");
    let t = &bad["status"]["containerStatuses"][0]["state"]["terminated"];
    assert_eq!(t["exitCode"], 7);
    assert_eq!(t["reason"], "Error");
    assert_eq!(bad["spec"]["nodeName"], "sim-node");
}

#[test]
fn restart_policy_always_restarts_with_back_off() {
    let sim = SimProc::start(&[]);
    sim.apply(&pod(
            "crash",
            json!({"containers": [{"name": "c", "image": "busybox", "command": ["sh", "-c", "echo run; exit 1"]}]}),
        ),
    );
    let p = wait_pod(&sim, "crash", "CrashLoopBackOff after restarts", |p| {
        let cs = &p["status"]["containerStatuses"][0];
        cs["restartCount"].as_u64().unwrap_or(0) >= 1
            && cs["state"]["waiting"]["reason"] == "CrashLoopBackOff"
    });
    let cs = &p["status"]["containerStatuses"][0];
    assert_eq!(cs["lastState"]["terminated"]["exitCode"], 1);
    assert_eq!(p["status"]["phase"], "Running");
    // The previous run's logs stay readable.
    let logs = sim.kubectl_ok(&["logs", "crash", "--previous"]);
    assert_eq!(logs, "run\n");
}

#[test]
fn init_containers_run_first_and_share_volumes() {
    let sim = SimProc::start(&[]);
    sim.apply(&pod(
            "init",
            json!({
                "volumes": [{"name": "work", "emptyDir": {}}, {"name": "cfg", "configMap": {"name": "settings"}}],
                "initContainers": [{"name": "seed", "image": "busybox", "command": ["sh", "-c", "sleep 0.5; echo seeded > /work/seed.txt"],
                    "volumeMounts": [{"name": "work", "mountPath": "/work"}]}],
                "containers": [{"name": "app", "image": "busybox",
                    "command": ["sh", "-c", "cat /work/seed.txt /etc/cfg/greeting; echo ip=$POD_IP name=$POD_NAME; trap 'exit 0' TERM; while :; do sleep 1; done"],
                    "env": [
                        {"name": "POD_IP", "valueFrom": {"fieldRef": {"fieldPath": "status.podIP"}}},
                        {"name": "POD_NAME", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}}],
                    "volumeMounts": [{"name": "work", "mountPath": "/work"}, {"name": "cfg", "mountPath": "/etc/cfg"}]}]
            }),
        ),
    );
    let out = sim.kubectl_run(&["create", "-f", "-"], Some(json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "settings"}, "data": {"greeting": "hello\n"}}).to_string().as_bytes()), Duration::from_secs(30));
    assert_eq!(out.code, Some(0), "{}", out.stderr_str());
    // While the init container runs the pod is Pending, PodInitializing.
    let first = get(&sim, "init");
    if first["status"]["phase"] == "Pending" {
        let w = &first["status"]["containerStatuses"][0]["state"]["waiting"]["reason"];
        assert!(
            w == "PodInitializing" || w == "ContainerCreating" || w == "CreateContainerConfigError",
            "{first}"
        );
    }
    let p = wait_pod(&sim, "init", "Running", |p| {
        p["status"]["phase"] == "Running"
    });
    assert_eq!(
        p["status"]["initContainerStatuses"][0]["state"]["terminated"]["exitCode"],
        0
    );
    let ip = p["status"]["podIP"].as_str().expect("podIP").to_string();
    let logs = wait_for("app output", Duration::from_secs(20), || {
        let l = sim.kubectl_ok(&["logs", "init", "-c", "app"]);
        l.contains("ip=").then_some(l)
    });
    assert_eq!(logs, format!("seeded\nhello\nip={ip} name=init\n"));
}

#[test]
fn active_deadline_fails_the_pod() {
    let sim = SimProc::start(&[]);
    sim.apply(&pod(
            "deadline",
            json!({"activeDeadlineSeconds": 1, "containers": [{"name": "c", "image": "busybox", "command": ["sleep", "300"]}]}),
        ),
    );
    let p = wait_pod(&sim, "deadline", "Failed", |p| {
        p["status"]["phase"] == "Failed"
    });
    assert_eq!(p["status"]["reason"], "DeadlineExceeded");
}

#[test]
fn failing_images_stay_in_image_pull_back_off() {
    let sim = SimProc::start(&["--fail-image", "registry.invalid/*"]);
    sim.apply(&pod(
        "pull",
        json!({"containers": [{"name": "c", "image": "registry.invalid/app:1"}]}),
    ));
    let reasons = wait_for("both pull reasons", Duration::from_secs(30), || {
        let mut seen = std::collections::BTreeSet::new();
        let deadline = std::time::Instant::now() + Duration::from_secs(15);
        while std::time::Instant::now() < deadline {
            let p = get(&sim, "pull");
            assert_eq!(p["status"]["phase"], "Pending");
            if let Some(r) =
                p["status"]["containerStatuses"][0]["state"]["waiting"]["reason"].as_str()
            {
                seen.insert(r.to_string());
            }
            if seen.len() == 2 {
                return Some(seen);
            }
            std::thread::sleep(Duration::from_millis(250));
        }
        None
    });
    assert!(
        reasons.contains("ErrImagePull") && reasons.contains("ImagePullBackOff"),
        "{reasons:?}"
    );
}

#[test]
fn graceful_delete_sends_term_then_kill() {
    let sim = SimProc::start(&[]);
    // Ignores SIGTERM: only SIGKILL after the grace period ends it.
    sim.apply(&pod(
            "stubborn",
            json!({"terminationGracePeriodSeconds": 2, "containers": [{"name": "c", "image": "busybox", "command": ["sh", "-c", "trap '' TERM; while :; do sleep 0.1; done"]}]}),
        ),
    );
    wait_pod(&sim, "stubborn", "Running", |p| {
        p["status"]["phase"] == "Running"
    });
    let t0 = std::time::Instant::now();
    let out = sim.kubectl_run(
        &["delete", "pod", "stubborn"],
        None,
        Duration::from_secs(60),
    );
    assert_eq!(out.code, Some(0), "{}", out.stderr_str());
    let took = t0.elapsed();
    assert!(
        took >= Duration::from_millis(1500),
        "deleted after {took:?}, before the grace period"
    );
    assert!(sim.processes_in_state_dir().is_empty());
}

#[test]
fn simulated_pods_run_no_processes() {
    let sim = SimProc::start(&[]);
    let mut p = pod(
        "ghost",
        json!({"containers": [{"name": "c", "image": "busybox", "command": ["sleep", "300"]}]}),
    );
    p["metadata"]["annotations"] = json!({"sim.kubegate.dev/simulate": "true"});
    sim.apply(&p);
    let got = wait_pod(&sim, "ghost", "Running", |p| {
        p["status"]["phase"] == "Running"
    });
    // A loopback address in the sim's own block (docs/sim.md).
    assert!(got["status"]["podIP"]
        .as_str()
        .is_some_and(|ip| ip.starts_with("127.") && !ip.starts_with("127.0.0.")));
    assert_eq!(got["status"]["containerStatuses"][0]["ready"], true);
    assert!(sim.processes_in_state_dir().is_empty());
    sim.kubectl_ok(&["delete", "pod", "ghost"]);
    let out = sim.kubectl_run(&["get", "pod", "ghost"], None, Duration::from_secs(30));
    assert_eq!(out.code, Some(1));
}

#[test]
fn kubegate_resolves_to_the_running_binary_and_no_command_idles() {
    let sim = SimProc::start(&[]);
    sim.apply(&pod(
            "self",
            json!({"restartPolicy": "Never", "containers": [{"name": "c", "image": "kubegate:latest", "command": ["kubegate", "--version"]}]}),
        ),
    );
    wait_pod(&sim, "self", "Succeeded", |p| {
        p["status"]["phase"] == "Succeeded"
    });
    let logs = sim.kubectl_ok(&["logs", "self"]);
    assert!(logs.starts_with("kubegate "), "{logs:?}");

    // No command: the idle process, which ends promptly and cleanly on SIGTERM.
    sim.apply(&pod(
        "idle",
        json!({"containers": [{"name": "c", "image": "nginx"}]}),
    ));
    wait_pod(&sim, "idle", "Running", |p| {
        p["status"]["phase"] == "Running"
    });
    let t0 = std::time::Instant::now();
    sim.kubectl_ok(&["delete", "pod", "idle"]);
    assert!(
        t0.elapsed() < Duration::from_secs(10),
        "the idle process ignored SIGTERM"
    );
}

/// A container whose Secret does not exist yet waits in
/// CreateContainerConfigError with upstream's message, and starts once the
/// Secret appears (a kubelet retries on its sync loop); an optional
/// reference to a missing Secret is skipped. A Secret owned by the pod is
/// collected with it.
#[test]
fn a_late_secret_lets_the_waiting_container_start_and_goes_with_its_pod() {
    let sim = SimProc::start(&[]);
    sim.apply(&pod(
        "late",
        json!({"restartPolicy": "Never", "containers": [
            {"name": "side", "image": "busybox", "command": ["sh", "-c", "trap 'exit 0' TERM; while :; do sleep 1; done"]},
            {"name": "app", "image": "busybox",
             "command": ["sh", "-c", "echo \"token=$TOKEN opt=${OPT-unset}\"; trap 'exit 0' TERM; while :; do sleep 1; done"],
             "env": [
                {"name": "TOKEN", "valueFrom": {"secretKeyRef": {"name": "late-token", "key": "token"}}},
                {"name": "OPT", "valueFrom": {"secretKeyRef": {"name": "never", "key": "x", "optional": true}}}]}
        ]}),
    ));
    let waiting = wait_pod(&sim, "late", "app in CreateContainerConfigError", |p| {
        p["status"]["containerStatuses"][1]["state"]["waiting"]["reason"]
            == "CreateContainerConfigError"
    });
    assert_eq!(
        waiting["status"]["containerStatuses"][1]["state"]["waiting"]["message"],
        "secret \"late-token\" not found"
    );
    assert_eq!(waiting["status"]["phase"], "Pending", "{waiting}");
    let uid = waiting["metadata"]["uid"]
        .as_str()
        .expect("uid")
        .to_string();
    let secret = json!({"apiVersion": "v1", "kind": "Secret",
        "metadata": {"name": "late-token",
            "ownerReferences": [{"apiVersion": "v1", "kind": "Pod", "name": "late", "uid": uid}]},
        "stringData": {"token": "s3cr3t"}});
    let out = sim.kubectl_run(
        &["create", "-f", "-"],
        Some(secret.to_string().as_bytes()),
        Duration::from_secs(30),
    );
    assert_eq!(out.code, Some(0), "{}", out.stderr_str());
    let running = wait_pod(&sim, "late", "Running", |p| {
        p["status"]["phase"] == "Running"
    });
    assert!(
        running["status"]["containerStatuses"][1]["state"]["running"].is_object(),
        "{running}"
    );
    let logs = wait_for("the app's output", Duration::from_secs(20), || {
        let l = sim.kubectl_ok(&["logs", "late", "-c", "app"]);
        l.contains("token=").then_some(l)
    });
    assert_eq!(logs, "token=s3cr3t opt=unset\n");

    sim.kubectl_ok(&["delete", "pod", "late", "--grace-period=0", "--force"]);
    wait_for(
        "the owned Secret collected",
        Duration::from_secs(30),
        || {
            let out = sim.kubectl_run(
                &["get", "secret", "late-token"],
                None,
                Duration::from_secs(30),
            );
            (out.code == Some(1) && out.stderr_str().contains("NotFound")).then_some(())
        },
    );
}
