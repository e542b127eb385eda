//! kubectl exec, attach, logs and the pod proxy against `kubegate sim`:
//! real processes, the WebSocket v5 channel protocol, exit codes, stdin EOF,
//! large transfers, ttys.

mod common;

use common::{run_with_timeout, wait_for, SimProc};
use std::time::Duration;

const LOOP: &str = "trap 'exit 0' TERM; while :; do sleep 1; done";

/// Starts a bare pod running `cmd` (sh -c) and waits until it runs.
fn run_pod(sim: &SimProc, name: &str, cmd: &str, extra: &[&str]) {
    let mut args = vec!["run", name, "--image=busybox", "--restart=Never"];
    args.extend_from_slice(extra);
    args.extend(["--", "sh", "-c", cmd]);
    sim.kubectl_ok(&args);
    wait_for(
        &format!("pod {name} running"),
        Duration::from_secs(30),
        || (sim.kubectl_json(&["get", "pod", name])["status"]["phase"] == "Running").then_some(()),
    );
}

fn t(secs: u64) -> Duration {
    Duration::from_secs(secs)
}

fn exec_streams_exit_codes_and_stdin(sim: &SimProc) {
    run_pod(sim, "box", LOOP, &[]);

    // stdout and stderr kept apart, exit code passed on.
    let out = sim.kubectl_run(
        &[
            "exec",
            "box",
            "--",
            "sh",
            "-c",
            "echo out; echo err >&2; exit 3",
        ],
        None,
        t(60),
    );
    assert_eq!(out.code, Some(3), "stderr: {}", out.stderr_str());
    assert_eq!(out.stdout_str(), "out\n");
    assert!(
        out.stderr_str().starts_with("err\n"),
        "{}",
        out.stderr_str()
    );
    assert!(out
        .stderr_str()
        .contains("command terminated with exit code 3"));

    // stdin reaches EOF, and output keeps flowing after it.
    let out = sim.kubectl_run(
        &[
            "exec",
            "-i",
            "box",
            "--",
            "sh",
            "-c",
            "wc -c; echo after-eof; sleep 0.2; echo later",
        ],
        Some(b"hello\n"),
        t(60),
    );
    assert_eq!(out.code, Some(0), "{}", out.stderr_str());
    assert_eq!(
        out.stdout_str().split_whitespace().collect::<Vec<_>>(),
        ["6", "after-eof", "later"]
    );

    // Large stdin: 8 MiB through, counted and checksummed on the far side.
    let big: Vec<u8> = (0..8 * 1024 * 1024u32).map(|i| (i % 251) as u8).collect();
    let out = sim.kubectl_run(
        &["exec", "-i", "box", "--", "sh", "-c", "cksum"],
        Some(&big),
        t(120),
    );
    assert_eq!(out.code, Some(0), "{}", out.stderr_str());
    let mut c = std::process::Command::new("cksum");
    c.stdin(std::process::Stdio::piped());
    let local = run_with_timeout(c, Some(&big), t(30));
    assert_eq!(
        out.stdout_str().trim(),
        local.stdout_str().trim().replace(" -", "").trim()
    );
}

fn exec_300k_lines_without_loss(sim: &SimProc) {
    run_pod(sim, "seq", LOOP, &[]);
    let out = sim.kubectl_run(&["exec", "seq", "--", "seq", "1", "300000"], None, t(120));
    assert_eq!(out.code, Some(0), "{}", out.stderr_str());
    let text = out.stdout_str();
    let lines: Vec<&str> = text.lines().collect();
    assert_eq!(lines.len(), 300_000);
    for (i, l) in lines.iter().enumerate() {
        assert_eq!(*l, (i + 1).to_string(), "line {i}");
    }
}

fn exec_with_a_tty_under_script(sim: &SimProc) {
    run_pod(sim, "tty", LOOP, &[]);
    // `script` gives kubectl a real terminal; the pod side must see one too.
    let kubectl = format!(
        "kubectl --kubeconfig {} --cache-dir {} exec -it tty -- sh -c 'tty >/dev/null && echo IS-A-TTY; stty size; exit 4'",
        sim.kubeconfig.display(),
        sim.cache_dir.display()
    );
    let mut c = std::process::Command::new("script");
    c.args(["-qefc", &kubectl, "/dev/null"]);
    let out = run_with_timeout(c, Some(b""), t(60));
    let s = out.stdout_str();
    assert!(s.contains("IS-A-TTY"), "{s:?} {}", out.stderr_str());
    assert_eq!(out.code, Some(4), "{s:?}");
}

fn attach_and_logs_follow(sim: &SimProc) {
    // A container with stdin: attach -i feeds it, its output comes back.
    run_pod(
        sim,
        "echoer",
        "while read l; do echo got:$l; done",
        &["--stdin", "--attach=false"],
    );
    let out = sim.kubectl_run(&["attach", "-i", "echoer"], Some(b"one\ntwo\n"), t(60));
    assert!(
        out.stdout_str().contains("got:one") && out.stdout_str().contains("got:two"),
        "{} {}",
        out.stdout_str(),
        out.stderr_str()
    );

    // logs -f follows new output until the container ends.
    run_pod(
        sim,
        "ticker",
        "for i in 1 2 3 4 5; do echo tick-$i; sleep 0.2; done",
        &[],
    );
    let out = sim.kubectl_run(&["logs", "-f", "ticker"], None, t(60));
    assert_eq!(out.code, Some(0), "{}", out.stderr_str());
    assert_eq!(
        out.stdout_str(),
        "tick-1\ntick-2\ntick-3\ntick-4\ntick-5\n",
        "{}",
        out.stderr_str()
    );
    // Plain logs after the end, and tailLines.
    let tail = sim.kubectl_ok(&["logs", "ticker", "--tail=2"]);
    assert_eq!(tail, "tick-4\ntick-5\n");
}

fn get_raw_through_the_pod_proxy(sim: &SimProc) {
    // A server in a pod, bound to its pod IP as on a real cluster.
    let cmd = "mkdir -p www && cd www && echo proxied-ok > index.html && exec python3 -m http.server 8080 --bind $(POD_IP)";
    let pod = serde_json::json!({
        "apiVersion": "v1", "kind": "Pod", "metadata": {"name": "web"},
        "spec": {"containers": [{"name": "web", "image": "python", "command": ["sh", "-c", cmd],
            "env": [{"name": "POD_IP", "valueFrom": {"fieldRef": {"fieldPath": "status.podIP"}}}]}]}
    });
    let out = sim.kubectl_run(
        &["apply", "-f", "-"],
        Some(pod.to_string().as_bytes()),
        t(30),
    );
    assert_eq!(out.code, Some(0), "{}", out.stderr_str());
    let body = wait_for(
        "the pod's server to answer through the proxy",
        t(30),
        || {
            let out = sim.kubectl_run(
                &[
                    "get",
                    "--raw",
                    "/api/v1/namespaces/default/pods/web:8080/proxy/index.html",
                ],
                None,
                t(30),
            );
            (out.code == Some(0)).then(|| out.stdout_str())
        },
    );
    assert_eq!(body.trim(), "proxied-ok");
    // A port nobody listens on: 503 naming the refused connection.
    let out = sim.kubectl_run(
        &[
            "get",
            "--raw",
            "/api/v1/namespaces/default/pods/web:9/proxy/",
        ],
        None,
        t(30),
    );
    assert_eq!(out.code, Some(1));
    assert!(
        out.stderr_str().contains("connection refused")
            || out.stderr_str().contains("ServiceUnavailable"),
        "{}",
        out.stderr_str()
    );
}

#[test]
fn no_process_outlives_a_killed_sim() {
    let mut sim = SimProc::start(&[]);
    run_pod(
        &sim,
        "forker",
        "sleep 300 & sleep 300 & setsid sleep 300 & wait",
        &[],
    );
    wait_for("the pod's processes", t(30), || {
        (sim.processes_in_state_dir().len() >= 3).then_some(())
    });
    common::unsafe_kill(sim.child.id(), 9);
    let _ = sim.child.wait();
    wait_for("every container process to die with the sim", t(20), || {
        sim.processes_in_state_dir().is_empty().then_some(())
    });
    let _ = sim.stop();
}

#[test]
fn sigterm_stops_the_sim_and_its_processes() {
    let mut sim = SimProc::start(&[]);
    run_pod(&sim, "a", LOOP, &[]);
    run_pod(&sim, "b", "trap '' TERM; while :; do sleep 1; done", &[]);
    assert!(!sim.processes_in_state_dir().is_empty());
    assert_eq!(sim.stop(), Some(0));
    assert!(
        sim.processes_in_state_dir().is_empty(),
        "{:?}",
        sim.processes_in_state_dir()
    );
}

/// Every scenario runs over plain HTTP and over TLS with a bearer token.
macro_rules! both_transports {
    ($($name:ident => $plain:ident, $tls:ident;)*) => {$(
        #[test]
        fn $plain() {
            $name(&SimProc::start(&[]));
        }

        #[test]
        fn $tls() {
            $name(&SimProc::start(&["--tls", "--token", "conformance-token"]));
        }
    )*};
}

both_transports! {
    exec_streams_exit_codes_and_stdin => exec_streams_exit_codes_and_stdin_plain, exec_streams_exit_codes_and_stdin_tls;
    exec_300k_lines_without_loss => exec_300k_lines_without_loss_plain, exec_300k_lines_without_loss_tls;
    exec_with_a_tty_under_script => exec_with_a_tty_under_script_plain, exec_with_a_tty_under_script_tls;
    attach_and_logs_follow => attach_and_logs_follow_plain, attach_and_logs_follow_tls;
    get_raw_through_the_pod_proxy => get_raw_through_the_pod_proxy_plain, get_raw_through_the_pod_proxy_tls;
}
