//! The sim as a node of the real control plane (`kubegate sim node`,
//! docs/sim.md#the-sim-as-a-node): pods the real scheduler binds to it run
//! as local processes, and everything a user does to them goes through the
//! real kube-apiserver: exec with exact exit codes and stdin, logs,
//! attach, port-forward (the API server translating WebSockets into SPDY
//! towards the node's kubelet API), status and Events as a kubelet writes
//! them, kubelet-style deletion, status through an outage of the API
//! server (injected by the harness's TCP proxy), and a node restart.
//!
//! Runs only on the real plane (`scripts/control-plane.sh` starts the
//! shared node `KUBEGATE_REAL_SIM_NODE`); each test's namespace is
//! annotated so its pods are placed on that node
//! (`Backend::real_on_sim_node`). Without a plane every test says why it
//! was skipped, and fails instead under `KUBEGATE_REAL_REQUIRED=1`.

mod common;

use common::backend::{on_sim_node, sim_node_ip_prefix, watchdog, Backend};
use common::{run_with_timeout, wait_for, Output};
use serde_json::{json, Value};
use std::io::{BufRead, BufReader, Read, Write};
use std::net::{Shutdown, TcpStream};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

const KUBECTL_TIMEOUT: Duration = Duration::from_secs(90);

fn kubectl(b: &Backend, args: &[&str], stdin: Option<&[u8]>) -> Output {
    let mut c = b.kubectl();
    c.arg("-n").arg(&b.ns).args(args);
    run_with_timeout(c, stdin, KUBECTL_TIMEOUT)
}

fn kubectl_ok(b: &Backend, args: &[&str]) -> String {
    let out = kubectl(b, args, None);
    assert_eq!(
        out.code,
        Some(0),
        "kubectl {args:?}: {}{}",
        out.stdout_str(),
        out.stderr_str()
    );
    out.stdout_str()
}

fn apply(b: &Backend, obj: &Value) {
    let out = kubectl(b, &["apply", "-f", "-"], Some(obj.to_string().as_bytes()));
    assert_eq!(out.code, Some(0), "apply: {}", out.stderr_str());
}

fn pod_json(b: &Backend, name: &str) -> Value {
    serde_json::from_str(&kubectl_ok(b, &["get", "pod", name, "-o", "json"])).expect("pod json")
}

/// A pod of one container named `main` running `command`.
fn pod(name: &str, policy: &str, command: &[&str]) -> Value {
    json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": name},
        "spec": {
            "restartPolicy": policy,
            "terminationGracePeriodSeconds": 5,
            "containers": [{
                "name": "main", "image": "busybox", "command": command,
                "env": [{"name": "POD_IP", "valueFrom": {"fieldRef": {"fieldPath": "status.podIP"}}}],
            }],
        },
    })
}

fn wait_running(b: &Backend, name: &str) -> Value {
    wait_for(
        &format!("pod {name} Running"),
        Duration::from_secs(60),
        || {
            let p = pod_json(b, name);
            (p["status"]["phase"] == "Running").then_some(p)
        },
    )
}

/// The node the plane's pods run on: every test checks its pod is there.
fn sim_node() -> String {
    std::env::var("KUBEGATE_REAL_SIM_NODE").unwrap_or_default()
}

/// The outage test cuts the shared node off the API server: the node's
/// Events meanwhile are dropped (best effort, as a kubelet's) and its
/// writes wait, which other tests' expectations must not meet. It runs
/// alone (a write lock); the others share (read locks).
static NODE_OUTAGE: std::sync::RwLock<()> = std::sync::RwLock::new(());

macro_rules! node_test {
    ($name:ident, $secs:expr) => {
        #[test]
        fn $name() {
            let _w = watchdog($secs);
            let _shared = NODE_OUTAGE.read().unwrap_or_else(|e| e.into_inner());
            on_sim_node(stringify!($name), super::$name);
        }
    };
    ($name:ident, $secs:expr, alone) => {
        #[test]
        fn $name() {
            let _w = watchdog($secs);
            let _alone = NODE_OUTAGE.write().unwrap_or_else(|e| e.into_inner());
            on_sim_node(stringify!($name), super::$name);
        }
    };
}

mod real {
    use super::*;
    node_test!(exec_exit_codes_and_stdin, 240);
    node_test!(logs_and_attach, 240);
    node_test!(port_forward_moves_five_mib_each_way, 240);
    node_test!(the_kubelet_port_admits_only_the_api_server, 120);
    node_test!(status_and_events_as_a_kubelet_writes_them, 300);
    node_test!(deletion_writes_the_terminal_phase_then_deletes, 180);
    node_test!(status_written_during_an_outage_arrives_after_it, 300, alone);
    node_test!(a_restarted_node_reports_its_lost_containers, 300);
}

fn exec_exit_codes_and_stdin(b: &Backend) {
    apply(b, &pod("shell", "Always", &["sleep", "3600"]));
    let p = wait_running(b, "shell");
    assert_eq!(p["spec"]["nodeName"], sim_node().as_str());
    let out = kubectl(
        b,
        &[
            "exec",
            "shell",
            "--",
            "sh",
            "-c",
            "echo out; echo err >&2; exit 3",
        ],
        None,
    );
    assert_eq!(out.code, Some(3), "stderr: {}", out.stderr_str());
    assert_eq!(out.stdout_str(), "out\n");
    assert!(out.stderr_str().contains("err"), "{}", out.stderr_str());
    let out = kubectl(b, &["exec", "-i", "shell", "--", "cat"], Some(b"hi\n"));
    assert_eq!(out.code, Some(0), "stderr: {}", out.stderr_str());
    assert_eq!(out.stdout_str(), "hi\n");
    // A larger stdin, counted on the far side: nothing lost, EOF delivered.
    let data = vec![b'x'; 3 << 20];
    let out = kubectl(b, &["exec", "-i", "shell", "--", "wc", "-c"], Some(&data));
    assert_eq!(out.code, Some(0), "stderr: {}", out.stderr_str());
    assert_eq!(out.stdout_str().trim(), (3 << 20).to_string());
    // A terminal: its size reaches the process, and the exit code comes back.
    let pty = common::pty::Pty::open(33, 101);
    let mut c = b.kubectl();
    c.arg("-n")
        .arg(&b.ns)
        .args([
            "exec",
            "-it",
            "shell",
            "--",
            "sh",
            "-c",
            "stty size; read x; echo got $x; exit 5",
        ])
        .stdin(pty.stdio())
        .stdout(pty.stdio())
        .stderr(pty.stdio());
    let mut child = c.spawn().expect("kubectl exec -it");
    let at = pty.wait_text("33 101", 0);
    pty.type_bytes(b"typed\r");
    pty.wait_text("got typed", at);
    let code = wait_for("kubectl exec -it to end", Duration::from_secs(60), || {
        child.try_wait().ok().flatten()
    });
    assert_eq!(code.code(), Some(5), "{}", pty.text());
}

/// Reads lines of a child's stdout until `f` has what it wants.
fn read_lines_until(
    child: &mut Child,
    within: Duration,
    mut f: impl FnMut(&[String]) -> bool,
) -> Vec<String> {
    let out = child.stdout.take().expect("stdout");
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        for l in BufReader::new(out).lines() {
            let Ok(l) = l else { break };
            if tx.send(l).is_err() {
                break;
            }
        }
    });
    let deadline = Instant::now() + within;
    let mut lines = Vec::new();
    while !f(&lines) {
        let left = deadline.saturating_duration_since(Instant::now());
        match rx.recv_timeout(left) {
            Ok(l) => lines.push(l),
            Err(_) => break,
        }
    }
    let _ = child.kill();
    let _ = child.wait();
    lines
}

fn spawn_kubectl(b: &Backend, args: &[&str]) -> Child {
    let mut c = b.kubectl();
    c.arg("-n").arg(&b.ns).args(args);
    c.stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .expect("spawn kubectl")
}

fn logs_and_attach(b: &Backend) {
    apply(
        b,
        &pod(
            "ticker",
            "Always",
            &[
                "sh",
                "-c",
                "i=0; while true; do i=$((i+1)); echo line $i; sleep 0.1; done",
            ],
        ),
    );
    wait_running(b, "ticker");
    // Followed: new lines keep coming.
    let mut child = spawn_kubectl(b, &["logs", "-f", "--tail=1", "ticker"]);
    let lines = read_lines_until(&mut child, Duration::from_secs(30), |l| l.len() >= 5);
    assert!(lines.len() >= 5, "followed logs: {lines:?}");
    let nums: Vec<u64> = lines
        .iter()
        .filter_map(|l| l.strip_prefix("line ")?.parse().ok())
        .collect();
    assert_eq!(nums.len(), lines.len(), "{lines:?}");
    assert!(
        nums.windows(2).all(|w| w[1] == w[0] + 1),
        "in order, none lost: {nums:?}"
    );
    // Timestamps, tail and a byte limit.
    let out = kubectl_ok(b, &["logs", "--timestamps", "--tail=2", "ticker"]);
    let ts: Vec<&str> = out.lines().collect();
    assert_eq!(ts.len(), 2, "{out}");
    for l in ts {
        let (stamp, rest) = l.split_once(' ').expect("a timestamp");
        assert!(stamp.ends_with('Z') && stamp.contains('T'), "{l}");
        assert!(rest.starts_with("line "), "{l}");
    }
    assert_eq!(
        kubectl_ok(b, &["logs", "--limit-bytes=5", "ticker"]),
        "line "
    );
    // Attach: the container's own output, live.
    let mut child = spawn_kubectl(b, &["attach", "ticker"]);
    let lines = read_lines_until(&mut child, Duration::from_secs(30), |l| {
        l.iter().filter(|x| x.starts_with("line ")).count() >= 3
    });
    assert!(
        lines.iter().filter(|x| x.starts_with("line ")).count() >= 3,
        "attach: {lines:?}"
    );
    // Attach with stdin to a container that reads it once.
    let mut cat = pod("cat", "Never", &["cat"]);
    cat["spec"]["containers"][0]["stdin"] = json!(true);
    cat["spec"]["containers"][0]["stdinOnce"] = json!(true);
    apply(b, &cat);
    wait_running(b, "cat");
    let out = kubectl(b, &["attach", "-i", "cat"], Some(b"hi\n"));
    assert!(
        out.stdout_str().contains("hi"),
        "attach -i: {}{}",
        out.stdout_str(),
        out.stderr_str()
    );
    // The previous container's log.
    apply(
        b,
        &pod(
            "crasher",
            "OnFailure",
            &["sh", "-c", "echo run $PPID; exit 1"],
        ),
    );
    wait_for("crasher restarted", Duration::from_secs(60), || {
        let p = pod_json(b, "crasher");
        (p["status"]["containerStatuses"][0]["restartCount"].as_u64() >= Some(1)).then_some(())
    });
    let prev = kubectl_ok(b, &["logs", "--previous", "crasher"]);
    assert!(
        prev.strip_prefix("run ")
            .is_some_and(|p| p.trim().parse::<u32>().is_ok()),
        "{prev}"
    );
}

/// A TCP echo server on 7000 of the pod's own address.
const ECHO: &str = r#"
import os, socket, threading
s = socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
s.bind((os.environ['POD_IP'], 7000)); s.listen(16)
def echo(c):
    while True:
        b = c.recv(65536)
        if not b:
            break
        c.sendall(b)
    c.close()
while True:
    c, _ = s.accept()
    threading.Thread(target=echo, args=(c,), daemon=True).start()
"#;

fn port_forward_moves_five_mib_each_way(b: &Backend) {
    apply(b, &pod("echo", "Always", &["python3", "-c", ECHO]));
    wait_running(b, "echo");
    let mut child = b.kubectl();
    child
        .arg("-n")
        .arg(&b.ns)
        .args(["port-forward", "pod/echo", ":7000"])
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    let mut child = child.spawn().expect("port-forward");
    let mut out = BufReader::new(child.stdout.take().expect("stdout"));
    let mut line = String::new();
    out.read_line(&mut line).expect("Forwarding from …");
    let port: u16 = line
        .split("127.0.0.1:")
        .nth(1)
        .and_then(|r| r.split(' ').next())
        .and_then(|p| p.parse().ok())
        .unwrap_or_else(|| panic!("no port in {line:?}"));
    std::thread::spawn(move || {
        let mut sink = String::new();
        while out.read_line(&mut sink).unwrap_or(0) > 0 {}
    });
    // The server may take a moment to listen: retry the first exchange.
    let len = 5 << 20;
    let data: Vec<u8> = (0..len).map(|i| (i * 7 % 251) as u8).collect();
    let echoed = wait_for(
        "an echo through port-forward",
        Duration::from_secs(60),
        || {
            let mut s = TcpStream::connect(("127.0.0.1", port)).ok()?;
            s.set_read_timeout(Some(Duration::from_secs(30))).ok()?;
            let mut w = s.try_clone().ok()?;
            let send = data.clone();
            let writer = std::thread::spawn(move || {
                let ok = w.write_all(&send).is_ok();
                let _ = w.shutdown(Shutdown::Write);
                ok
            });
            let mut got = Vec::with_capacity(len);
            let _ = s.read_to_end(&mut got);
            let sent = writer.join().unwrap_or(false);
            (sent && got.len() == len).then_some(got)
        },
    );
    assert!(echoed == data, "5 MiB came back changed");
    let _ = child.kill();
    let _ = child.wait();
}

fn curl_kubelet(path: &str, cert: Option<(&str, &str)>) -> Output {
    let port = std::env::var("KUBEGATE_REAL_SIM_NODE_PORT").expect("KUBEGATE_REAL_SIM_NODE_PORT");
    let ca = std::env::var("KUBEGATE_REAL_CA").expect("KUBEGATE_REAL_CA");
    let mut c = Command::new("curl");
    c.args(["-sS", "--max-time", "10", "--cacert", &ca]);
    if let Some((crt, key)) = cert {
        c.args(["--cert", crt, "--key", key]);
    }
    c.arg(format!("https://127.0.0.1:{port}{path}"));
    run_with_timeout(c, None, Duration::from_secs(30))
}

fn the_kubelet_port_admits_only_the_api_server(_b: &Backend) {
    let pki = std::env::var("KUBEGATE_REAL_PKI").expect("KUBEGATE_REAL_PKI");
    let f = |n: &str| format!("{pki}/{n}");
    // The API server's kubelet client certificate: served.
    let (crt, key) = (
        f("apiserver-kubelet-client.crt"),
        f("apiserver-kubelet-client.key"),
    );
    let ok = curl_kubelet("/healthz", Some((&crt, &key)));
    assert_eq!(ok.code, Some(0), "{}", ok.stderr_str());
    assert_eq!(ok.stdout_str(), "ok");
    // No certificate, or one the API server itself accepts from users
    // (the cluster CA's admin): nothing.
    let none = curl_kubelet("/healthz", None);
    assert_ne!(
        none.code,
        Some(0),
        "served without a certificate: {}",
        none.stdout_str()
    );
    let (acrt, akey) = (f("admin-cert.crt"), f("admin-cert.key"));
    let admin = curl_kubelet("/healthz", Some((&acrt, &akey)));
    assert_ne!(
        admin.code,
        Some(0),
        "served a user's certificate: {}",
        admin.stdout_str()
    );
    let node = curl_kubelet("/containerLogs/kube-system/x/y", Some((&acrt, &akey)));
    assert!(node.stdout.is_empty());
}

fn events_of(b: &Backend, pod: &str) -> Vec<String> {
    let list: Value = serde_json::from_str(&kubectl_ok(
        b,
        &[
            "get",
            "events",
            "--field-selector",
            &format!("involvedObject.name={pod}"),
            "-o",
            "json",
        ],
    ))
    .expect("events json");
    list["items"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|e| e["reason"].as_str().map(str::to_string))
        .collect()
}

fn status_and_events_as_a_kubelet_writes_them(b: &Backend) {
    kubectl_ok(
        b,
        &[
            "create",
            "secret",
            "generic",
            "s",
            "--from-literal=k=from-a-secret",
        ],
    );
    kubectl_ok(
        b,
        &[
            "create",
            "configmap",
            "c",
            "--from-literal=f=from-a-configmap",
        ],
    );
    let mut p = pod(
        "done",
        "Never",
        &[
            "sh",
            "-c",
            "echo $S; cat /etc/c/f; [ \"$S\" = from-a-secret ] || exit 9; exit 3",
        ],
    );
    p["spec"]["initContainers"] =
        json!([{"name": "init", "image": "busybox", "command": ["true"]}]);
    p["spec"]["containers"][0]["env"] = json!([
        {"name": "S", "valueFrom": {"secretKeyRef": {"name": "s", "key": "k"}}}
    ]);
    p["spec"]["containers"][0]["volumeMounts"] = json!([{"name": "c", "mountPath": "/etc/c"}]);
    p["spec"]["volumes"] = json!([{"name": "c", "configMap": {"name": "c"}}]);
    apply(b, &p);
    let st = wait_for("pod done Failed", Duration::from_secs(60), || {
        let p = pod_json(b, "done");
        (p["status"]["phase"] == "Failed").then_some(p["status"].clone())
    });
    let c = &st["containerStatuses"][0];
    assert_eq!(c["state"]["terminated"]["exitCode"], 3, "{st}");
    assert_eq!(c["state"]["terminated"]["reason"], "Error");
    assert_eq!(
        st["initContainerStatuses"][0]["state"]["terminated"]["exitCode"],
        0
    );
    // The server's and the scheduler's fields are theirs.
    assert_eq!(st["qosClass"], "BestEffort");
    let scheduled = st["conditions"]
        .as_array()
        .into_iter()
        .flatten()
        .any(|c| c["type"] == "PodScheduled" && c["status"] == "True");
    assert!(scheduled, "{st}");
    assert!(
        st["podIP"]
            .as_str()
            .is_some_and(|ip| ip.starts_with(&sim_node_ip_prefix())),
        "{st}"
    );
    assert_eq!(
        kubectl_ok(b, &["logs", "done"]),
        "from-a-secret\nfrom-a-configmap"
    );
    let reasons = wait_for("the kubelet's Events", Duration::from_secs(30), || {
        let r = events_of(b, "done");
        ["Scheduled", "Pulled", "Created", "Started"]
            .iter()
            .all(|x| r.iter().any(|y| y == x))
            .then_some(r)
    });
    assert!(reasons.iter().any(|r| r == "Scheduled"));
    // Restarts with back-off, and the BackOff Event.
    apply(b, &pod("crash", "OnFailure", &["sh", "-c", "exit 1"]));
    wait_for("crash in back-off", Duration::from_secs(90), || {
        let p = pod_json(b, "crash");
        let c = &p["status"]["containerStatuses"][0];
        (c["restartCount"].as_u64() >= Some(2)
            && events_of(b, "crash").iter().any(|r| r == "BackOff"))
        .then_some(())
    });
    // A missing Secret: FailedMount, then it starts once the Secret exists.
    let mut m = pod("mount", "Always", &["sleep", "3600"]);
    m["spec"]["volumes"] = json!([{"name": "s", "secret": {"secretName": "later"}}]);
    m["spec"]["containers"][0]["volumeMounts"] = json!([{"name": "s", "mountPath": "/s"}]);
    apply(b, &m);
    wait_for("FailedMount", Duration::from_secs(60), || {
        events_of(b, "mount")
            .iter()
            .any(|r| r == "FailedMount")
            .then_some(())
    });
    kubectl_ok(
        b,
        &["create", "secret", "generic", "later", "--from-literal=x=y"],
    );
    wait_running(b, "mount");
    // activeDeadlineSeconds.
    let mut d = pod("deadline", "Always", &["sleep", "3600"]);
    d["spec"]["activeDeadlineSeconds"] = json!(2);
    apply(b, &d);
    wait_for("DeadlineExceeded", Duration::from_secs(60), || {
        let p = pod_json(b, "deadline");
        (p["status"]["phase"] == "Failed" && p["status"]["reason"] == "DeadlineExceeded")
            .then_some(())
    });
}

/// The phases a pod showed on a watch until it was deleted.
fn watch_until_deleted(b: &Backend, name: &str, act: impl FnOnce()) -> Vec<(String, String)> {
    let mut child = b.kubectl();
    child
        .arg("-n")
        .arg(&b.ns)
        .args([
            "get",
            "pod",
            name,
            "-w",
            "-o",
            "json",
            "--output-watch-events",
        ])
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::null());
    let mut child = child.spawn().expect("kubectl get -w");
    let mut out = child.stdout.take().expect("stdout");
    let (tx, rx) = std::sync::mpsc::channel::<Vec<u8>>();
    std::thread::spawn(move || {
        let mut chunk = [0u8; 16384];
        while let Ok(n) = out.read(&mut chunk) {
            if n == 0 || tx.send(chunk[..n].to_vec()).is_err() {
                break;
            }
        }
    });
    // The watch's first event (the pod as it is) before acting, then every
    // event until its DELETED, each wait with a deadline.
    let mut buf = Vec::new();
    let first = rx
        .recv_timeout(Duration::from_secs(30))
        .expect("kubectl's watch printed the pod within 30 s");
    buf.extend_from_slice(&first);
    act();
    let deadline = Instant::now() + Duration::from_secs(60);
    let deleted = |buf: &[u8]| {
        serde_json::Deserializer::from_slice(buf)
            .into_iter::<Value>()
            .filter_map(Result::ok)
            .any(|ev| ev["type"] == "DELETED")
    };
    while !deleted(&buf) {
        let left = deadline.saturating_duration_since(Instant::now());
        match rx.recv_timeout(left) {
            Ok(more) => buf.extend_from_slice(&more),
            Err(_) => break,
        }
    }
    let _ = child.kill();
    let _ = child.wait();
    let mut seen = Vec::new();
    let mut de = serde_json::Deserializer::from_slice(&buf).into_iter::<Value>();
    while let Some(Ok(ev)) = de.next() {
        seen.push((
            ev["type"].as_str().unwrap_or("").to_string(),
            ev["object"]["status"]["phase"]
                .as_str()
                .unwrap_or("")
                .to_string(),
        ));
    }
    seen
}

fn deletion_writes_the_terminal_phase_then_deletes(b: &Backend) {
    apply(
        b,
        &pod(
            "polite",
            "Always",
            &[
                "sh",
                "-c",
                "trap 'exit 0' TERM; while true; do sleep 0.1; done",
            ],
        ),
    );
    wait_running(b, "polite");
    let seen = watch_until_deleted(b, "polite", || {
        kubectl_ok(b, &["delete", "pod", "polite", "--wait=false"]);
    });
    let deleted = seen
        .iter()
        .position(|(t, _)| t == "DELETED")
        .expect("DELETED seen");
    let terminal = seen
        .iter()
        .position(|(t, ph)| t == "MODIFIED" && ph == "Succeeded")
        .unwrap_or_else(|| panic!("no Succeeded before DELETED: {seen:?}"));
    assert!(terminal < deleted, "{seen:?}");
    // One that ignores SIGTERM: killed after its grace period, Failed.
    let mut stubborn = pod(
        "stubborn",
        "Always",
        &["sh", "-c", "trap '' TERM; while true; do sleep 0.1; done"],
    );
    stubborn["spec"]["terminationGracePeriodSeconds"] = json!(2);
    apply(b, &stubborn);
    wait_running(b, "stubborn");
    let t0 = Instant::now();
    let seen = watch_until_deleted(b, "stubborn", || {
        kubectl_ok(b, &["delete", "pod", "stubborn", "--wait=false"]);
    });
    assert!(
        t0.elapsed() >= Duration::from_secs(2),
        "killed before its grace period"
    );
    assert!(
        seen.iter().any(|(t, ph)| t == "MODIFIED" && ph == "Failed"),
        "{seen:?}"
    );
}

/// The harness's TCP proxy in front of the API server (the node's only
/// way to it): `down` cuts every connection and refuses new ones.
fn proxy(action: &str) {
    let url =
        std::env::var("KUBEGATE_REAL_APISERVER_PROXY").expect("KUBEGATE_REAL_APISERVER_PROXY");
    let out = run_with_timeout(
        {
            let mut c = Command::new("curl");
            c.args([
                "-sS",
                "-X",
                "POST",
                "--max-time",
                "10",
                &format!("{url}/{action}"),
            ]);
            c
        },
        None,
        Duration::from_secs(30),
    );
    assert_eq!(out.code, Some(0), "proxy {action}: {}", out.stderr_str());
}

/// Brings the proxy back up however the test ends.
struct Up;
impl Drop for Up {
    fn drop(&mut self) {
        proxy("up");
    }
}

fn status_written_during_an_outage_arrives_after_it(b: &Backend) {
    apply(
        b,
        &pod(
            "waiter",
            "Never",
            &["sh", "-c", "while [ ! -e go ]; do sleep 0.1; done; exit 7"],
        ),
    );
    wait_running(b, "waiter");
    let _up = Up;
    proxy("down");
    // The exec reaches the node directly from the API server: only the
    // node's own calls go through the proxy.
    kubectl_ok(b, &["exec", "waiter", "--", "touch", "go"]);
    std::thread::sleep(Duration::from_secs(3));
    let p = pod_json(b, "waiter");
    assert_eq!(
        p["status"]["phase"], "Running",
        "written through a cut proxy?"
    );
    proxy("up");
    wait_for("the exit after the outage", Duration::from_secs(60), || {
        let p = pod_json(b, "waiter");
        (p["status"]["phase"] == "Failed"
            && p["status"]["containerStatuses"][0]["state"]["terminated"]["exitCode"] == 7)
            .then_some(())
    });
}

/// A node of this test's own, so its restart troubles no other test: a
/// client certificate for `system:node:NAME` signed by the plane's CA, and
/// the plane's kubelet serving certificate and client CA.
struct PrivateNode {
    dir: std::path::PathBuf,
    name: String,
    child: Option<Child>,
}

impl PrivateNode {
    fn new(name: &str) -> PrivateNode {
        let dir = common::temp_dir("private-node");
        let pki = std::env::var("KUBEGATE_REAL_PKI").expect("KUBEGATE_REAL_PKI");
        let sh = format!(
            r#"set -e; cd "{dir}"
openssl ecparam -name prime256v1 -genkey -noout -out node.key 2>/dev/null
openssl req -new -key node.key -subj "/CN=system:node:{name}/O=system:nodes" -out node.csr 2>/dev/null
printf 'basicConstraints=CA:FALSE\nkeyUsage=critical,digitalSignature\nextendedKeyUsage=clientAuth\n' > node.ext
openssl x509 -req -in node.csr -CA "{pki}/ca.crt" -CAkey "{pki}/ca.key" -CAcreateserial -CAserial serial -days 1 -extfile node.ext -out node.crt 2>/dev/null
chmod 600 node.key"#,
            dir = dir.display()
        );
        let out = run_with_timeout(
            {
                let mut c = Command::new("sh");
                c.args(["-c", &sh]);
                c
            },
            None,
            Duration::from_secs(30),
        );
        assert_eq!(out.code, Some(0), "{}", out.stderr_str());
        let b64 = |p: &str| {
            use base64::Engine;
            base64::engine::general_purpose::STANDARD.encode(std::fs::read(p).expect("read pem"))
        };
        let kc = format!(
            "apiVersion: v1\nkind: Config\nclusters:\n- name: c\n  cluster:\n    server: {}\n    certificate-authority-data: {}\nusers:\n- name: n\n  user:\n    client-certificate-data: {}\n    client-key-data: {}\ncontexts:\n- name: n\n  context: {{cluster: c, user: n}}\ncurrent-context: n\n",
            std::env::var("KUBEGATE_REAL_SERVER").expect("server"),
            b64(&format!("{pki}/ca.crt")),
            b64(&format!("{}/node.crt", dir.display())),
            b64(&format!("{}/node.key", dir.display())),
        );
        std::fs::write(dir.join("kubeconfig"), kc).expect("kubeconfig");
        PrivateNode {
            dir,
            name: name.to_string(),
            child: None,
        }
    }

    fn start(&mut self) {
        let pki = std::env::var("KUBEGATE_REAL_PKI").expect("KUBEGATE_REAL_PKI");
        let child = Command::new(common::KUBEGATE)
            .args([
                "sim",
                "node",
                "--name",
                &self.name,
                "--pod-cidr",
                "127.246.0.0/16",
            ])
            .args(["--listen", "127.0.0.1:0", "--uid-range", "370000-379999"])
            .arg("--kubeconfig")
            .arg(self.dir.join("kubeconfig"))
            .arg("--state-dir")
            .arg(self.dir.join("state"))
            .args(["--tls-cert-file", &format!("{pki}/sim-node-serving.crt")])
            .args([
                "--tls-private-key-file",
                &format!("{pki}/sim-node-serving.key"),
            ])
            .args(["--client-ca-file", &format!("{pki}/kubelet-client-ca.crt")])
            .args([
                "--register-with-taints",
                &format!("kubegate.test/node={}:NoSchedule", self.name),
            ])
            .env("RUST_LOG", "info")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(self.dir.join("node.log")).expect("log"))
            .spawn()
            .expect("kubegate sim node");
        self.child = Some(child);
    }

    fn kill(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

impl Drop for PrivateNode {
    fn drop(&mut self) {
        self.kill();
    }
}

fn a_restarted_node_reports_its_lost_containers(b: &Backend) {
    let name = format!("t-node-{}", std::process::id());
    let mut node = PrivateNode::new(&name);
    node.start();
    wait_for("the private Node", Duration::from_secs(60), || {
        (kubectl(b, &["get", "node", &name], None).code == Some(0)).then_some(())
    });
    for (pod_name, policy) in [("lost-always", "Always"), ("lost-never", "Never")] {
        let mut p = pod(pod_name, policy, &["sleep", "3600"]);
        p["spec"]["nodeName"] = json!(name);
        apply(b, &p);
        wait_running(b, pod_name);
    }
    node.kill();
    node.start();
    wait_for(
        "lost-never Failed with ContainerStatusUnknown",
        Duration::from_secs(60),
        || {
            let p = pod_json(b, "lost-never");
            let t = &p["status"]["containerStatuses"][0]["state"]["terminated"];
            (p["status"]["phase"] == "Failed"
                && t["exitCode"] == 137
                && t["reason"] == "ContainerStatusUnknown")
                .then_some(())
        },
    );
    // Its log went with the node's processes: said as a kubelet says it.
    let out = kubectl(b, &["logs", "lost-never"], None);
    assert_ne!(out.code, Some(0));
    assert!(
        out.stderr_str()
            .contains("container \"main\" in pod \"lost-never\" is terminated"),
        "{}",
        out.stderr_str()
    );
    wait_for("lost-always restarted", Duration::from_secs(60), || {
        let p = pod_json(b, "lost-always");
        let c = &p["status"]["containerStatuses"][0];
        (p["status"]["phase"] == "Running"
            && c["restartCount"] == 1
            && c["lastState"]["terminated"]["reason"] == "ContainerStatusUnknown"
            && c["state"].get("running").is_some())
        .then_some(())
    });
    // The pods' folders of the first run are gone: only the live pods' are there.
    let pods_dir = node.dir.join("state/pods");
    let n = std::fs::read_dir(&pods_dir).map(|d| d.count()).unwrap_or(0);
    assert!(n <= 2, "{n} pod folders under {}", pods_dir.display());
    kubectl(
        b,
        &["delete", "pod", "lost-always", "lost-never", "--wait=false"],
        None,
    );
    node.kill();
    kubectl(b, &["delete", "node", &name, "--wait=false"], None);
    let _ = node.name.len();
}
