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

/// `log?timestamps=true&sinceTime=` as Kubernetes answers it (what a
/// daemon restart recovers output with): every line starts with the
/// kubelet's time in Go's RFC3339Nano (trailing zeros trimmed) and a space,
/// and `sinceTime` counts in whole seconds (the API server forwards it to
/// the kubelet formatted with RFC3339), so the answer starts at the
/// second's first line. Read through kubegate's own client.
#[test]
fn logs_since_time_and_timestamps_answer_as_kubernetes_does() {
    use kubegate::kube::client::{Api, Client, LogParams, Pod};
    use kubegate::kube::time::{parse_rfc3339, rfc3339, rfc3339_nano, whole_second};
    let sim = SimProc::start(&[]);
    run_pod(
        &sim,
        "stamped",
        "echo a; sleep 1.2; echo b; sleep 1.2; echo c; while :; do sleep 1; done",
        &[],
    );
    let client =
        Client::new(kubegate::kube::connection::Connection::plain(&sim.url)).expect("a client");
    let api = Api::<Pod>::namespaced(&client, "default");
    let logs = |since: Option<String>| {
        let p = LogParams {
            container: Some("stamped".into()),
            since_time: since,
            timestamps: true,
            tail_lines: None,
        };
        let log = api.logs("stamped", &p, 1 << 20).expect("the log");
        assert!(!log.truncated);
        String::from_utf8(log.body).expect("utf-8")
    };
    let all = wait_for("three lines", t(30), || {
        let l = logs(None);
        (l.lines().count() == 3).then_some(l)
    });
    let mut stamps = Vec::new();
    for line in all.lines() {
        let (ts, text) = line.split_once(' ').expect("a stamp and a space");
        let at = parse_rfc3339(ts).unwrap_or_else(|| panic!("not RFC 3339: {ts:?}"));
        assert_eq!(ts, rfc3339_nano(at), "Go's RFC3339Nano");
        stamps.push((at, text.to_string()));
    }
    let texts: Vec<&str> = stamps.iter().map(|(_, x)| x.as_str()).collect();
    assert_eq!(texts, ["a", "b", "c"]);
    let b = stamps[1].0;
    let text = |l: String| -> Vec<String> {
        l.lines()
            .map(|x| x.split_once(' ').map_or(x, |(_, t)| t).to_string())
            .collect()
    };
    // A nanosecond after b: b is still there (whole seconds).
    let after_b = rfc3339_nano(b + Duration::from_nanos(1));
    assert_eq!(text(logs(Some(after_b))), ["b", "c"]);
    // The next whole second: c only (b came 1.2 s before c).
    let next = rfc3339(whole_second(b) + Duration::from_secs(1));
    assert_eq!(text(logs(Some(next))), ["c"]);
    // A time that is not RFC 3339 is refused (400).
    let p = LogParams {
        since_time: Some("yesterday".into()),
        ..LogParams::default()
    };
    assert!(api.logs("stamped", &p, 1 << 20).is_err());
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
