//! kubectl conformance: the real kubectl (the yardstick no one here wrote)
//! against `kubegate sim`, over plain HTTP and over TLS with a token.
//! Each test starts its own sim on a free loopback port with its own
//! kubectl cache dir, so the tests run in parallel.

mod common;

use common::{wait_for, SimProc};
use serde_json::Value;
use std::time::Duration;

const LOOP: &str = "trap 'exit 0' TERM; while :; do sleep 1; done";

fn pods_of(sim: &SimProc, selector: &str) -> Vec<Value> {
    let v = sim.kubectl_json(&["get", "pods", "-l", selector]);
    v["items"].as_array().cloned().unwrap_or_default()
}

fn running(pods: &[Value]) -> usize {
    pods.iter()
        .filter(|p| {
            p["status"]["phase"] == "Running" && p["metadata"]["deletionTimestamp"].is_null()
        })
        .count()
}

/// The scenario both transports must pass.
fn crud_and_workloads(sim: &SimProc) {
    configmaps_and_services(sim);
    deployments(sim);
}

/// ConfigMaps (create, get, apply) and a Service's allocation and
/// conflicts.
fn configmaps_and_services(sim: &SimProc) {
    // ConfigMaps: create, get, AlreadyExists, NotFound.
    sim.kubectl_ok(&["create", "configmap", "cm1", "--from-literal=a=1"]);
    let cm = sim.kubectl_json(&["get", "configmap", "cm1"]);
    assert_eq!(cm["data"]["a"], "1");
    let again = sim.kubectl_run(
        &["create", "configmap", "cm1", "--from-literal=a=1"],
        None,
        Duration::from_secs(30),
    );
    assert_eq!(again.code, Some(1));
    assert!(
        again.stderr_str().contains("already exists"),
        "{}",
        again.stderr_str()
    );
    let missing = sim.kubectl_run(&["get", "configmap", "nope"], None, Duration::from_secs(30));
    assert_eq!(missing.code, Some(1));
    assert!(
        missing.stderr_str().contains("not found"),
        "{}",
        missing.stderr_str()
    );

    // apply twice: the second one updates.
    let manifest =
        r#"{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"applied"},"data":{"k":"v1"}}"#;
    let out = sim.kubectl_run(
        &["apply", "-f", "-"],
        Some(manifest.as_bytes()),
        Duration::from_secs(30),
    );
    assert_eq!(out.code, Some(0), "{}", out.stderr_str());
    assert!(out.stdout_str().contains("created"), "{}", out.stdout_str());
    let manifest2 = manifest.replace("v1\"}", "v2\"}");
    let out = sim.kubectl_run(
        &["apply", "-f", "-"],
        Some(manifest2.as_bytes()),
        Duration::from_secs(30),
    );
    assert_eq!(out.code, Some(0), "{}", out.stderr_str());
    assert!(
        out.stdout_str().contains("configured"),
        "{}",
        out.stdout_str()
    );
    assert_eq!(
        sim.kubectl_json(&["get", "configmap", "applied"])["data"]["k"],
        "v2"
    );

    // Service: clusterIP allocated; a stale replace is a Conflict.
    sim.kubectl_ok(&["create", "service", "clusterip", "svc1", "--tcp=80:8080"]);
    let svc = sim.kubectl_json(&["get", "service", "svc1"]);
    let ip = svc["spec"]["clusterIP"].as_str().unwrap_or("");
    assert!(ip.starts_with("10."), "clusterIP {ip:?}");
    let mut stale = svc.clone();
    sim.kubectl_ok(&["label", "service", "svc1", "touched=yes"]);
    stale["metadata"]["labels"]["other"] = Value::from("x");
    let out = sim.kubectl_run(
        &["replace", "-f", "-"],
        Some(stale.to_string().as_bytes()),
        Duration::from_secs(30),
    );
    assert_eq!(out.code, Some(1));
    assert!(
        out.stderr_str().contains("the object has been modified"),
        "{}",
        out.stderr_str()
    );
}

/// Deployments: pods, scaling, Tables, replacement, exec and logs, a
/// rollout.
fn deployments(sim: &SimProc) {
    // Deployments: Running pods with owner references and pod IPs.
    sim.kubectl_ok(&[
        "create",
        "deployment",
        "web",
        "--image=busybox",
        "--",
        "sh",
        "-c",
        LOOP,
    ]);
    let pods = wait_for("1 running web pod", Duration::from_secs(30), || {
        let p = pods_of(sim, "app=web");
        (running(&p) == 1).then_some(p)
    });
    let pod = &pods[0];
    assert!(pod["status"]["podIP"]
        .as_str()
        .is_some_and(|ip| ip.starts_with("127.")));
    let owner = &pod["metadata"]["ownerReferences"][0];
    assert_eq!(owner["kind"], "ReplicaSet");
    assert_eq!(owner["controller"], true);
    let rs = sim.kubectl_json(&["get", "replicaset", owner["name"].as_str().unwrap_or("")]);
    assert_eq!(rs["metadata"]["ownerReferences"][0]["kind"], "Deployment");

    // scale
    sim.kubectl_ok(&["scale", "deployment", "web", "--replicas=3"]);
    wait_for("3 running web pods", Duration::from_secs(30), || {
        (running(&pods_of(sim, "app=web")) == 3).then_some(())
    });

    // The default printer gets server-side Tables, as from a real cluster.
    let table = sim.kubectl_ok(&["get", "pods", "-l", "app=web"]);
    let header: Vec<&str> = table
        .lines()
        .next()
        .unwrap_or("")
        .split_whitespace()
        .collect();
    assert_eq!(
        header,
        ["NAME", "READY", "STATUS", "RESTARTS", "AGE"],
        "{table}"
    );
    assert_eq!(
        table
            .lines()
            .filter(|l| l.contains(" 1/1 ") && l.contains(" Running "))
            .count(),
        3,
        "{table}"
    );
    let deploy = sim.kubectl_ok(&["get", "deployment", "web"]);
    assert!(
        deploy
            .lines()
            .nth(1)
            .is_some_and(|l| l.split_whitespace().nth(1) == Some("3/3")),
        "{deploy}"
    );

    // delete pod: waits, then the ReplicaSet replaces it.
    let victim = pod["metadata"]["name"].as_str().unwrap_or("").to_string();
    sim.kubectl_ok(&["delete", "pod", &victim]);
    wait_for(
        "the deleted pod to be replaced",
        Duration::from_secs(30),
        || {
            let p = pods_of(sim, "app=web");
            (running(&p) == 3 && p.iter().all(|x| x["metadata"]["name"] != victim.as_str()))
                .then_some(())
        },
    );

    // exec and logs on this transport too.
    let target = "deployment/web".to_string();
    let out = sim.kubectl_run(
        &["exec", &target, "--", "sh", "-c", "echo via-exec; exit 3"],
        None,
        Duration::from_secs(60),
    );
    assert_eq!(out.code, Some(3), "{}", out.stderr_str());
    assert_eq!(out.stdout_str(), "via-exec\n");
    let out = sim.kubectl_run(
        &["exec", "-i", &target, "--", "cat"],
        Some(b"round trip\n"),
        Duration::from_secs(60),
    );
    assert_eq!(out.stdout_str(), "round trip\n", "{}", out.stderr_str());

    // A changed template rolls out a new ReplicaSet and retires the old one.
    sim.kubectl_ok(&["set", "image", "deployment/web", "busybox=busybox:2"]);
    wait_for("the rollout to finish", Duration::from_secs(60), || {
        let rs = sim.kubectl_json(&["get", "replicasets", "-l", "app=web"]);
        let items = rs["items"].as_array().cloned().unwrap_or_default();
        let new = items
            .iter()
            .find(|r| r["spec"]["template"]["spec"]["containers"][0]["image"] == "busybox:2")?;
        let old_empty = items
            .iter()
            .filter(|r| r != &new)
            .all(|r| r["spec"]["replicas"] == 0);
        (items.len() == 2 && new["status"]["readyReplicas"] == 3 && old_empty).then_some(())
    });
    wait_for(
        "3 running pods of the new template",
        Duration::from_secs(60),
        || {
            let p = pods_of(sim, "app=web");
            (running(&p) == 3
                && p.iter()
                    .all(|x| x["spec"]["containers"][0]["image"] == "busybox:2"))
            .then_some(())
        },
    );

    // delete deployment: its ReplicaSet and pods are collected.
    sim.kubectl_ok(&["delete", "deployment", "web"]);
    wait_for("web pods to be collected", Duration::from_secs(60), || {
        pods_of(sim, "app=web").is_empty().then_some(())
    });
    let rs = sim.kubectl_json(&["get", "replicasets"]);
    assert_eq!(rs["items"].as_array().map(Vec::len), Some(0));
}

#[test]
fn kubectl_over_plain_http() {
    let sim = SimProc::start(&[]);
    crud_and_workloads(&sim);
}

#[test]
fn kubectl_over_tls_with_token() {
    let sim = SimProc::start(&["--tls", "--token", "s3cret-token"]);
    assert!(sim.url.starts_with("https://"));
    crud_and_workloads(&sim);
    // With a wrong token: 401. (Without any credentials kubectl would
    // prompt for a user name instead.)
    let mut c = std::process::Command::new("kubectl");
    c.args([
        "--server",
        &sim.url,
        "--insecure-skip-tls-verify",
        "--token",
        "wrong",
        "--cache-dir",
    ])
    .arg(sim.dir.join("anon-cache"))
    .args(["get", "pods"]);
    let out = common::run_with_timeout(c, None, Duration::from_secs(30));
    assert_eq!(out.code, Some(1));
    assert!(
        out.stderr_str().to_lowercase().contains("unauthorized")
            || out.stderr_str().contains("must be logged in"),
        "{}",
        out.stderr_str()
    );
}

#[test]
fn kubectl_with_client_certificate() {
    let sim = SimProc::start(&["--tls", "--client-ca"]);
    let v = sim.kubectl_json(&["get", "namespaces"]);
    let names: Vec<&str> = v["items"]
        .as_array()
        .map(|a| {
            a.iter()
                .filter_map(|n| n["metadata"]["name"].as_str())
                .collect()
        })
        .unwrap_or_default();
    assert!(
        names.contains(&"default") && names.contains(&"kube-system"),
        "{names:?}"
    );
}

#[test]
fn kubectl_get_pods_watch_sees_added_modified_deleted() {
    get_pods_watch(&SimProc::start(&[]));
}

#[test]
fn kubectl_get_pods_watch_over_tls_with_token() {
    get_pods_watch(&SimProc::start(&["--tls", "--token", "watch-token"]));
}

fn get_pods_watch(sim: &SimProc) {
    let mut w = sim.kubectl();
    w.args(["get", "pods", "-w", "--output-watch-events", "-o", "json"])
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::null());
    let mut child = w.spawn().expect("kubectl -w");
    let stdout = child.stdout.take().expect("stdout");
    let (tx, rx) = std::sync::mpsc::channel::<String>();
    std::thread::spawn(move || {
        let mut de = serde_json::Deserializer::from_reader(stdout).into_iter::<Value>();
        while let Some(Ok(v)) = de.next() {
            let _ = tx.send(v["type"].as_str().unwrap_or("").to_string());
        }
    });
    sim.kubectl_ok(&[
        "run",
        "w1",
        "--image=busybox",
        "--restart=Never",
        "--",
        "sh",
        "-c",
        LOOP,
    ]);
    wait_for("w1 running", Duration::from_secs(30), || {
        (sim.kubectl_json(&["get", "pod", "w1"])["status"]["phase"] == "Running").then_some(())
    });
    sim.kubectl_ok(&["delete", "pod", "w1", "--grace-period=1"]);
    let mut seen = Vec::new();
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    while !seen.contains(&"DELETED".to_string()) {
        let left = deadline.saturating_duration_since(std::time::Instant::now());
        match rx.recv_timeout(left) {
            Ok(t) => seen.push(t),
            Err(_) => panic!("watch saw only {seen:?}"),
        }
    }
    let _ = child.kill();
    let _ = child.wait();
    assert_eq!(seen.first().map(String::as_str), Some("ADDED"), "{seen:?}");
    assert!(seen.iter().any(|t| t == "MODIFIED"), "{seen:?}");
}
