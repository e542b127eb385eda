//! The exec gateway through a real `kubegate serve` on its embedded sim,
//! over real sockets: one-shot and interactive exec, every error code,
//! authentication, limits, the audit log, and bad input at the front door.
//! Conditions are waited on with deadlines; each daemon has a watchdog.

mod common;

use common::daemon::{raw_exchange, DaemonProc};
use common::wait_for;
use kubegate::exec::frames::{token_protocol, ClientFrame, ServerFrame, SUBPROTOCOL};
use serde_json::{json, Value};
use std::io::Write;
use std::net::TcpStream;
use std::time::{Duration, Instant};
use tungstenite::Message;

fn body(cmd: &[&str]) -> Value {
    json!({"workspace": {"project": "demo", "uid": "demo-uid"}, "deployment": "hello", "command": cmd})
}

fn audit_lines(d: &DaemonProc) -> Vec<Value> {
    std::fs::read_to_string(d.dir.join("state").join("audit.jsonl"))
        .unwrap_or_default()
        .lines()
        .map(|l| serde_json::from_str(l).expect("audit line is JSON"))
        .collect()
}

/// Pids whose command line contains `marker`.
fn procs_with(marker: &str) -> Vec<u32> {
    let mut out = Vec::new();
    for e in std::fs::read_dir("/proc").into_iter().flatten().flatten() {
        let Ok(pid) = e.file_name().to_string_lossy().parse::<u32>() else {
            continue;
        };
        if pid == std::process::id() {
            continue;
        }
        if let Ok(c) = std::fs::read(e.path().join("cmdline")) {
            if String::from_utf8_lossy(&c).contains(marker) {
                out.push(pid);
            }
        }
    }
    out
}

fn error_code(v: &Value) -> &str {
    v["error"]["code"].as_str().unwrap_or("")
}

fn interactive_path(cmd: &[&str], extra: &str) -> String {
    let mut p = "/v1/exec/interactive?project=demo&uid=demo-uid&deployment=hello".to_string();
    for c in cmd {
        p.push_str("&command=");
        p.push_str(&kubegate::kube::client::api::encode_segment(c));
    }
    p.push_str(extra);
    p
}

type Ws = tungstenite::WebSocket<TcpStream>;

fn open_ws(d: &DaemonProc, cmd: &[&str], extra: &str) -> Ws {
    let auth = format!("Bearer {}", d.token);
    let (mut ws, resp) = d
        .ws(
            &interactive_path(cmd, extra),
            &[("Authorization", &auth)],
            &[SUBPROTOCOL],
        )
        .unwrap_or_else(|(st, b)| panic!("upgrade refused: {st} {}", String::from_utf8_lossy(&b)));
    assert_eq!(
        resp.headers()
            .get("sec-websocket-protocol")
            .and_then(|v| v.to_str().ok()),
        Some(SUBPROTOCOL)
    );
    match next_frame(&mut ws) {
        Some(ServerFrame::Target(t)) => {
            assert_eq!(t.namespace, "demo");
            assert_eq!(t.deployment, "hello");
            assert_eq!(t.container, "main");
        }
        other => panic!("first frame {other:?}"),
    }
    ws
}

fn next_frame(ws: &mut Ws) -> Option<ServerFrame> {
    loop {
        match ws.read() {
            Ok(m @ (Message::Text(_) | Message::Binary(_))) => {
                return Some(
                    ServerFrame::decode(&m)
                        .expect("valid server frame")
                        .expect("a frame"),
                )
            }
            Ok(Message::Close(_)) | Err(_) => return None,
            Ok(_) => {}
        }
    }
}

#[derive(Debug, Default)]
struct Ended {
    stdout: Vec<u8>,
    stderr: Vec<u8>,
    exit: Option<i32>,
    error: Option<(String, String)>,
    /// Frames that came after the exit/error frame (must be none).
    after_last: usize,
    close: Option<(u16, String)>,
}

/// Reads to the end of the stream.
fn read_to_end(ws: &mut Ws) -> Ended {
    let mut e = Ended::default();
    loop {
        match ws.read() {
            Ok(m @ (Message::Text(_) | Message::Binary(_))) => {
                let f = ServerFrame::decode(&m)
                    .expect("valid frame")
                    .expect("frame");
                if e.exit.is_some() || e.error.is_some() {
                    e.after_last += 1;
                }
                match f {
                    ServerFrame::Stdout(d) => e.stdout.extend_from_slice(&d),
                    ServerFrame::Stderr(d) => e.stderr.extend_from_slice(&d),
                    ServerFrame::Exit(x) => e.exit = Some(x.exit_code),
                    ServerFrame::Error(x) => e.error = Some((x.code.to_string(), x.message)),
                    ServerFrame::Target(_) => panic!("a second target frame"),
                }
            }
            Ok(Message::Close(c)) => {
                e.close = c.map(|c| (u16::from(c.code), c.reason.to_string()));
                // Finish the close handshake.
                while ws.read().is_ok() {}
                return e;
            }
            Ok(_) => {}
            Err(_) => return e,
        }
    }
}

fn send(ws: &mut Ws, f: ClientFrame) {
    ws.send(f.encode()).expect("send frame");
}

// ------------------------------------------------------------ one-shot

#[test]
fn oneshot_returns_stdout_stderr_exit_code_and_audits() {
    let d = DaemonProc::start();
    let (st, v) = d.json(
        "POST",
        "/v1/exec",
        Some(&body(&["sh", "-c", "printf out; printf err >&2; exit 7"])),
    );
    assert_eq!(st, 200, "{v}");
    assert_eq!(v["stdout"], "out");
    assert_eq!(v["stderr"], "err");
    assert_eq!(v["exitCode"], 7);
    assert_eq!(v["namespace"], "demo");
    assert_eq!(v["deployment"], "hello");
    assert_eq!(v["container"], "main");
    assert!(v["pod"].as_str().unwrap().starts_with("hello-"), "{v}");
    assert!(!v["podUid"].as_str().unwrap().is_empty());
    assert!(!v["deploymentUid"].as_str().unwrap().is_empty());

    // Invalid UTF-8 is replaced, as a decoder would.
    let (st, v) = d.json(
        "POST",
        "/v1/exec",
        Some(&body(&["sh", "-c", "printf 'a\\377b'"])),
    );
    assert_eq!(st, 200, "{v}");
    assert_eq!(v["stdout"], "a\u{fffd}b");
    assert_eq!(v["exitCode"], 0);

    // The audit line was flushed before the answer.
    let lines = audit_lines(&d);
    assert_eq!(lines.len(), 2, "{lines:?}");
    let a = &lines[0];
    assert_eq!(a["principal"], "demo");
    assert_eq!(a["workspace"], "demo/demo-uid");
    assert_eq!(a["kind"], "oneshot");
    assert_eq!(a["exitCode"], 7);
    assert_eq!(a["argv"][2], "printf out; printf err >&2; exit 7");
    assert_eq!(a["bytesOut"], 6);
    assert_eq!(a["target"]["pod"], v["pod"]);
    assert!(a["time"].as_str().unwrap().ends_with('Z'));
}

#[test]
fn oneshot_validation_rules_are_exec_invalid() {
    let d = DaemonProc::start();
    let long = "x".repeat(8193);
    let many: Vec<&str> = vec!["a"; 65];
    let big: Vec<String> = vec!["y".repeat(8000); 5];
    let cases = vec![
        json!({"workspace": {"project": "Demo", "uid": "demo-uid"}, "deployment": "hello", "command": ["true"]}),
        json!({"workspace": {"project": "demo", "uid": " "}, "deployment": "hello", "command": ["true"]}),
        json!({"workspace": {"project": "demo", "uid": "u".repeat(257)}, "deployment": "hello", "command": ["true"]}),
        json!({"workspace": {"project": "demo", "uid": "demo-uid"}, "deployment": "Hello!", "command": ["true"]}),
        json!({"workspace": {"project": "demo", "uid": "demo-uid"}, "deployment": "hello", "container": "Main", "command": ["true"]}),
        json!({"workspace": {"project": "demo", "uid": "demo-uid"}, "deployment": "hello", "command": []}),
        json!({"workspace": {"project": "demo", "uid": "demo-uid"}, "deployment": "hello", "command": many}),
        json!({"workspace": {"project": "demo", "uid": "demo-uid"}, "deployment": "hello", "command": [long]}),
        json!({"workspace": {"project": "demo", "uid": "demo-uid"}, "deployment": "hello", "command": big}),
        json!({"workspace": {"project": "demo", "uid": "demo-uid"}, "deployment": "hello", "command": ["a\u{0}b"]}),
        json!({"workspace": {"project": "demo", "uid": "demo-uid"}, "deployment": "hello", "command": ["true"], "stdoutCapBytes": 0}),
        json!({"workspace": {"project": "demo", "uid": "demo-uid"}, "deployment": "hello", "command": ["true"], "stderrCapBytes": 2097152}),
    ];
    for c in &cases {
        let (st, v) = d.json("POST", "/v1/exec", Some(c));
        assert_eq!((st, error_code(&v)), (400, "EXEC_INVALID"), "{c} -> {v}");
        assert!(!v["error"]["message"].as_str().unwrap().is_empty());
    }
    // Wrong types and malformed JSON are BAD_REQUEST.
    for raw in [
        &b"{"[..],
        br#"{"workspace": {"project": "demo", "uid": "demo-uid"}, "deployment": "hello", "command": "ls"}"#,
        br#"{"workspace": {"project": "demo", "uid": "demo-uid"}, "deployment": "hello", "command": [1]}"#,
        br#"{"workspace": "demo/demo-uid", "deployment": "hello", "command": ["ls"]}"#,
        br#"{"workspace": {"project": "demo", "uid": "demo-uid"}, "deployment": "hello", "command": ["ls"], "surprise": 1}"#,
    ] {
        let (st, b) = d.request("POST", "/v1/exec", Some(&d.token), Some(raw));
        let v: Value = serde_json::from_slice(&b).unwrap();
        assert_eq!((st, error_code(&v)), (400, "BAD_REQUEST"), "{v}");
    }
    assert!(audit_lines(&d).is_empty(), "rejected requests did no work");
}

#[test]
fn a_workspace_the_principal_lacks_is_refused_before_any_cluster_call() {
    let d = DaemonProc::start();
    // Every API request to the sim would now fail: a cluster call would
    // turn into EXEC_FAILED and bump the sim's counter.
    d.kubectl_ok(
        &["create", "--raw", "/sim/faults", "-f", "-"],
        Some(br#"{"failRequests": {"count": 1000, "fraction": 1.0, "status": 500}}"#),
    );
    let before: Value =
        serde_json::from_str(&d.kubectl_ok(&["get", "--raw", "/sim/faults"], None)).unwrap();
    let mut b = body(&["true"]);
    b["workspace"]["uid"] = json!("someone-else");
    let (st, v) = d.json("POST", "/v1/exec", Some(&b));
    assert_eq!((st, error_code(&v)), (403, "EXEC_TARGET_FORBIDDEN"), "{v}");
    let after: Value =
        serde_json::from_str(&d.kubectl_ok(&["get", "--raw", "/sim/faults"], None)).unwrap();
    assert_eq!(before, after, "the sim saw a request");
    d.kubectl_ok(&["delete", "--raw", "/sim/faults"], None);
}

fn deployment(name: &str, labels: Value, replicas: i32) -> Value {
    json!({
        "apiVersion": "apps/v1", "kind": "Deployment",
        "metadata": {"name": name, "namespace": "demo", "labels": labels},
        "spec": {
            "replicas": replicas,
            "selector": {"matchLabels": {"app": name}},
            "template": {
                "metadata": {"labels": {"app": name}},
                "spec": {"containers": [{"name": "main", "image": "busybox",
                    "command": ["sh", "-c", "trap 'exit 0' TERM; while :; do sleep 1; done"]}]}
            }
        }
    })
}

#[test]
fn target_errors_have_their_codes() {
    let d = DaemonProc::start();
    let owned = json!({"app.kubernetes.io/managed-by": "kubegate", "kubegate.dev/workspace-uid": "demo-uid"});
    d.create(&deployment("plain", json!({}), 1));
    d.create(&deployment(
        "foreign",
        json!({"app.kubernetes.io/managed-by": "kubegate", "kubegate.dev/workspace-uid": "secret-uid"}),
        1,
    ));
    d.create(&deployment("scaled-down", owned.clone(), 0));

    let exec = |dep: &str, container: Option<&str>| {
        let mut b = body(&["true"]);
        b["deployment"] = json!(dep);
        if let Some(c) = container {
            b["container"] = json!(c);
        }
        d.json("POST", "/v1/exec", Some(&b))
    };
    let (st, v) = exec("nope", None);
    assert_eq!((st, error_code(&v)), (404, "EXEC_TARGET_NOT_FOUND"), "{v}");
    let (st, v) = exec("plain", None);
    assert_eq!((st, error_code(&v)), (403, "EXEC_TARGET_FORBIDDEN"), "{v}");
    let (st, v) = exec("foreign", None);
    assert_eq!((st, error_code(&v)), (403, "EXEC_TARGET_FORBIDDEN"), "{v}");
    assert!(
        !v.to_string().contains("secret-uid"),
        "another workspace's uid leaked: {v}"
    );
    let (st, v) = exec("scaled-down", None);
    assert_eq!((st, error_code(&v)), (409, "EXEC_TARGET_NOT_READY"), "{v}");
    let (st, v) = exec("hello", Some("sidecar"));
    assert_eq!((st, error_code(&v)), (404, "EXEC_TARGET_NOT_FOUND"), "{v}");
    assert!(v["error"]["message"].as_str().unwrap().contains("sidecar"));
    let (st, v) = exec("hello", Some("main"));
    assert_eq!(st, 200, "{v}");
    // Every attempt past the workspace check is audited, refused or not.
    let lines = audit_lines(&d);
    let got: Vec<(&str, bool)> = lines
        .iter()
        .map(|l| (l["error"].as_str().unwrap_or("exit"), l["target"].is_null()))
        .collect();
    assert_eq!(
        got,
        vec![
            ("EXEC_TARGET_NOT_FOUND", true),
            ("EXEC_TARGET_FORBIDDEN", true),
            ("EXEC_TARGET_FORBIDDEN", true),
            ("EXEC_TARGET_NOT_READY", true),
            ("EXEC_TARGET_NOT_FOUND", true),
            ("exit", false),
        ]
    );
}

#[test]
fn output_over_the_cap_stops_the_process() {
    let d = DaemonProc::start();
    for (stream, script) in [
        ("stdout", "exec yes kubegate-cap-marker-out"),
        ("stderr", "exec yes kubegate-cap-marker-err >&2"),
    ] {
        let mut b = body(&["sh", "-c", script]);
        b[format!("{stream}CapBytes")] = json!(4096);
        let (st, v) = d.json("POST", "/v1/exec", Some(&b));
        assert_eq!((st, error_code(&v)), (422, "EXEC_OUTPUT_LIMIT"), "{v}");
        assert_eq!(
            v["error"]["details"],
            json!({"stream": stream, "limitBytes": 4096})
        );
        assert!(v.get("stdout").is_none(), "no partial result");
        let marker = format!("kubegate-cap-marker-{}", &stream[3..]);
        wait_for(
            "the capped process to stop",
            Duration::from_secs(20),
            || procs_with(&marker).is_empty().then_some(()),
        );
    }
    let lines = audit_lines(&d);
    assert_eq!(lines.len(), 2);
    assert!(
        lines.iter().all(|l| l["error"] == "EXEC_OUTPUT_LIMIT"),
        "{lines:?}"
    );
}

#[test]
fn a_caller_that_goes_away_aborts_the_exec() {
    let d = DaemonProc::start();
    let marker = "kubegate-abort-marker";
    let payload = body(&[
        "sh",
        "-c",
        &format!("while :; do sleep 1; done; : {marker}"),
    ])
    .to_string();
    let mut s = TcpStream::connect(&d.addr).unwrap();
    write!(
        s,
        "POST /v1/exec HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer {}\r\nContent-Length: {}\r\n\r\n{payload}",
        d.token,
        payload.len()
    )
    .unwrap();
    wait_for("the exec'd process", Duration::from_secs(30), || {
        (!procs_with(marker).is_empty()).then_some(())
    });
    drop(s);
    wait_for("the process to stop", Duration::from_secs(30), || {
        procs_with(marker).is_empty().then_some(())
    });
    wait_for(
        "the abort in the audit log",
        Duration::from_secs(10),
        || {
            audit_lines(&d)
                .iter()
                .any(|l| l["error"] == "EXEC_ABORTED")
                .then_some(())
        },
    );
}

// ---------------------------------------------------------------- auth

#[test]
fn missing_or_wrong_tokens_get_401_and_do_no_work() {
    let d = DaemonProc::start();
    let b = body(&["sh", "-c", "echo should-not-run"]).to_string();
    for token in [None, Some("wrong-token"), Some("")] {
        let (st, resp) = d.request("POST", "/v1/exec", token, Some(b.as_bytes()));
        let v: Value = serde_json::from_slice(&resp).unwrap();
        assert_eq!(
            (st, error_code(&v)),
            (401, "UNAUTHORIZED"),
            "{token:?}: {v}"
        );
        for path in ["/v1/workspaces", "/metrics", "/no/such/route"] {
            let (st, _) = d.request("GET", path, token, None);
            assert_eq!(st, 401, "{path} with {token:?}");
        }
        let refused = d.ws(
            &interactive_path(&["true"], ""),
            &[("Authorization", &format!("Bearer {}", token.unwrap_or("")))],
            &[SUBPROTOCOL],
        );
        assert_eq!(refused.err().map(|(st, _)| st), Some(401));
    }
    assert!(audit_lines(&d).is_empty());
    let (_, m) = d.request("GET", "/metrics", Some(&d.token), None);
    let m = String::from_utf8(m).unwrap();
    assert!(!m.contains("kubegate_exec_total{"), "{m}");
    assert!(
        m.contains("kubegate_api_errors_total{code=\"UNAUTHORIZED\"}"),
        "{m}"
    );
    // With the token: unknown routes 404, wrong methods 405.
    let (st, _) = d.request("GET", "/no/such/route", Some(&d.token), None);
    assert_eq!(st, 404);
    let (st, resp) = d.request("GET", "/v1/exec", Some(&d.token), None);
    assert_eq!(st, 405, "{}", String::from_utf8_lossy(&resp));
}

#[test]
fn the_subprotocol_token_works_for_websockets_and_only_the_real_protocol_is_echoed() {
    let d = DaemonProc::start();
    let tp = token_protocol(&d.token);
    let (mut ws, resp) = d
        .ws(
            &interactive_path(&["echo", "via-subprotocol"], "&tty=false&stdin=false"),
            &[],
            &[SUBPROTOCOL, &tp],
        )
        .unwrap_or_else(|(st, b)| panic!("{st} {}", String::from_utf8_lossy(&b)));
    assert_eq!(
        resp.headers()
            .get("sec-websocket-protocol")
            .unwrap()
            .to_str()
            .unwrap(),
        SUBPROTOCOL
    );
    assert!(matches!(next_frame(&mut ws), Some(ServerFrame::Target(_))));
    let e = read_to_end(&mut ws);
    assert_eq!(e.stdout, b"via-subprotocol\n");
    assert_eq!(e.exit, Some(0));
    // A wrong token in the subprotocol: 401.
    let bad = token_protocol("nope");
    assert_eq!(
        d.ws(&interactive_path(&["true"], ""), &[], &[SUBPROTOCOL, &bad])
            .err()
            .map(|x| x.0),
        Some(401)
    );
    // No real subprotocol offered: 400.
    let (st, b) = d
        .ws(&interactive_path(&["true"], ""), &[], &[&tp])
        .err()
        .unwrap_or_else(|| panic!("not refused"));
    assert_eq!(st, 400, "{}", String::from_utf8_lossy(&b));
}

#[test]
fn tokens_never_reach_the_log() {
    let d = DaemonProc::start_with(|c| c, "trace");
    let (st, _) = d.json("POST", "/v1/exec", Some(&body(&["true"])));
    assert_eq!(st, 200);
    let tp = token_protocol(&d.token);
    let (mut ws, _) = d
        .ws(
            &interactive_path(&["true"], "&stdin=false"),
            &[],
            &[SUBPROTOCOL, &tp],
        )
        .expect("upgrade");
    assert!(matches!(next_frame(&mut ws), Some(ServerFrame::Target(_))));
    let e = read_to_end(&mut ws);
    assert_eq!(e.exit, Some(0));
    let _ = d.request("GET", "/v1/workspaces", Some("a-wrong-token-value"), None);
    let kubeconfig = std::fs::read_to_string(&d.kubeconfig).unwrap();
    let sim_token = kubeconfig
        .lines()
        .find_map(|l| l.trim().strip_prefix("token:"))
        .map(|t| t.trim().trim_matches('"').to_string())
        .expect("the sim's kubeconfig has a token");
    // The interactive exec's end is logged at debug after its last frame
    // went out, so wait for it: it shows trace logging is on and that the
    // whole exchange reached the log before the log is searched.
    let log = wait_for(
        "the debug line of the exec's end",
        Duration::from_secs(10),
        || {
            let log = d.log_text();
            log.lines()
                .any(|l| l.contains(" DEBUG ") && l.contains("interactive exec"))
                .then_some(log)
        },
    );
    assert!(log.contains("exec oneshot"), "{log}");
    for secret in [
        d.token.as_str(),
        &tp[tp.len() - 20..],
        "a-wrong-token-value",
        &sim_token,
    ] {
        assert!(!log.contains(secret), "{secret:?} is in the log");
    }
}

// --------------------------------------------------------- interactive

#[test]
fn interactive_cat_echoes_and_output_continues_after_stdin_eof() {
    let d = DaemonProc::start();
    let mut ws = open_ws(
        &d,
        &["sh", "-c", "cat; echo after-eof; exit 3"],
        "&tty=false",
    );
    let data: Vec<u8> = (0..200_000u32).map(|i| (i % 251) as u8).collect();
    for chunk in data.chunks(30_000) {
        send(
            &mut ws,
            ClientFrame::Stdin {
                data: chunk.to_vec(),
                eof: false,
            },
        );
    }
    send(
        &mut ws,
        ClientFrame::Stdin {
            data: vec![],
            eof: true,
        },
    );
    let e = read_to_end(&mut ws);
    let mut want = data.clone();
    want.extend_from_slice(b"after-eof\n");
    assert_eq!(e.stdout.len(), want.len());
    assert!(e.stdout == want, "echo differs");
    assert_eq!(e.exit, Some(3));
    assert_eq!(e.after_last, 0);
    assert_eq!(e.close.map(|c| c.0), Some(1000));
    let lines = audit_lines(&d);
    assert_eq!(lines.len(), 1);
    assert_eq!(lines[0]["kind"], "interactive");
    assert_eq!(lines[0]["bytesIn"], 200_000);
    assert_eq!(lines[0]["exitCode"], 3);
}

#[test]
fn interactive_tty_resize_and_stderr() {
    let d = DaemonProc::start();
    let mut ws = open_ws(&d, &["sh", "-c", "read x; stty size; exit 0"], "");
    send(
        &mut ws,
        ClientFrame::Resize {
            cols: 123,
            rows: 45,
        },
    );
    send(
        &mut ws,
        ClientFrame::Stdin {
            data: b"go\r".to_vec(),
            eof: false,
        },
    );
    let e = read_to_end(&mut ws);
    let out = String::from_utf8_lossy(&e.stdout);
    assert!(out.contains("45 123"), "{out:?}");
    assert_eq!(e.exit, Some(0));

    let mut ws = open_ws(
        &d,
        &["sh", "-c", "echo to-err >&2"],
        "&tty=false&stdin=false",
    );
    let e = read_to_end(&mut ws);
    assert_eq!(e.stderr, b"to-err\n");
    assert_eq!(e.exit, Some(0));
}

#[test]
fn the_exit_frame_comes_last_after_all_output() {
    let d = DaemonProc::start();
    let mut ws = open_ws(
        &d,
        &[
            "sh",
            "-c",
            "head -c 3000000 /dev/zero | tr '\\0' a; echo done >&2; exit 5",
        ],
        "&tty=false&stdin=false",
    );
    let e = read_to_end(&mut ws);
    assert_eq!(e.stdout.len(), 3_000_000);
    assert!(e.stdout.iter().all(|b| *b == b'a'));
    assert_eq!(e.stderr, b"done\n");
    assert_eq!(e.exit, Some(5));
    assert_eq!(e.after_last, 0);
}

fn rss_kib(pid: u32) -> u64 {
    let s = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
    s.lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|r| r.split_whitespace().next())
        .and_then(|n| n.parse().ok())
        .unwrap_or(0)
}

fn queue_frames(d: &DaemonProc) -> i64 {
    let (_, m) = d.request("GET", "/metrics", Some(&d.token), None);
    String::from_utf8_lossy(&m)
        .lines()
        .find_map(|l| l.strip_prefix("kubegate_exec_queue_frames "))
        .and_then(|v| v.parse().ok())
        .unwrap_or(-1)
}

#[test]
fn a_client_that_stops_reading_holds_memory_bounded_and_resumes_losslessly() {
    let d = DaemonProc::start();
    // ~69 MB of numbered lines: far more than every queue on the way.
    let n = 10_000_000u64;
    let mut ws = open_ws(&d, &["seq", "1", &n.to_string()], "&tty=false&stdin=false");
    let pid = d.child.id();
    let base = rss_kib(pid);
    // Not reading: the queue fills to its bound and stays there.
    let full = wait_for(
        "the outbound queue to fill",
        Duration::from_secs(30),
        || {
            let q = queue_frames(&d);
            (q >= 100).then_some(q)
        },
    );
    assert!(full <= 128, "queue beyond its bound: {full}");
    let mut peak = 0;
    for _ in 0..10 {
        peak = peak.max(rss_kib(pid));
        assert!(queue_frames(&d) <= 128);
        std::thread::sleep(Duration::from_millis(100));
    }
    assert!(
        peak < base + 64 * 1024,
        "daemon RSS grew from {base} KiB to {peak} KiB while the client paused"
    );
    // Reading again: every line, in order, none lost.
    let e = read_to_end(&mut ws);
    assert_eq!(e.exit, Some(0));
    let text = String::from_utf8(e.stdout).unwrap();
    let mut want = 1u64;
    for l in text.lines() {
        assert_eq!(l.parse::<u64>().ok(), Some(want), "line {want}");
        want += 1;
    }
    assert_eq!(want, n + 1);
}

#[test]
fn a_client_that_disconnects_ends_the_process() {
    let d = DaemonProc::start();
    let marker = "kubegate-disconnect-marker";
    let script = format!("while :; do sleep 1; done; : {marker}");
    let ws = open_ws(&d, &["sh", "-c", &script], "&tty=false");
    wait_for("the process", Duration::from_secs(30), || {
        (!procs_with(marker).is_empty()).then_some(())
    });
    drop(ws);
    wait_for("the process to stop", Duration::from_secs(30), || {
        procs_with(marker).is_empty().then_some(())
    });
    // A close frame does the same, and no error frame follows.
    let marker2 = "kubegate-close-marker";
    let script = format!("while :; do sleep 1; done; : {marker2}");
    let mut ws = open_ws(&d, &["sh", "-c", &script], "&tty=false");
    wait_for("the process", Duration::from_secs(30), || {
        (!procs_with(marker2).is_empty()).then_some(())
    });
    send(&mut ws, ClientFrame::Close);
    let e = read_to_end(&mut ws);
    assert_eq!(e.error, None);
    assert_eq!(e.exit, None);
    wait_for("the process to stop", Duration::from_secs(30), || {
        procs_with(marker2).is_empty().then_some(())
    });
}

#[test]
fn bad_frames_get_one_error_frame_then_close() {
    let d = DaemonProc::start();
    for bad in [
        Message::Binary(vec![7, 1, 2].into()),
        Message::Text("{not json".into()),
        Message::Text(r#"{"type":"resize","cols":0,"rows":10}"#.into()),
        Message::Binary(vec![0; 70_000].into()),
    ] {
        let mut ws = open_ws(&d, &["cat"], "&tty=false");
        ws.send(bad.clone()).unwrap();
        let e = read_to_end(&mut ws);
        let (code, msg) = e
            .error
            .clone()
            .unwrap_or_else(|| panic!("{bad:?}: no error frame: {e:?}"));
        assert_eq!(code, "EXEC_INVALID", "{msg}");
        assert_eq!(e.after_last, 0);
    }
    // The daemon still serves.
    let (st, v) = d.json("POST", "/v1/exec", Some(&body(&["echo", "still-here"])));
    assert_eq!((st, v["stdout"].as_str()), (200, Some("still-here\n")));
}

// ------------------------------------------------ limits and bad input

#[test]
fn concurrency_and_idle_limits() {
    let d = DaemonProc::start_with(
        |c| {
            c.replace(
                "[exec]\n",
                "[exec]\nmax_sessions_per_principal = 1\nidle_timeout_secs = 2\n",
            )
        },
        "info",
    );
    let started = Instant::now();
    let mut ws = open_ws(&d, &["cat"], "&tty=false");
    let (st, v) = d.json("POST", "/v1/exec", Some(&body(&["true"])));
    assert_eq!((st, error_code(&v)), (429, "EXEC_TOO_MANY"), "{v}");
    // Left idle, the session is ended with a reason.
    let e = read_to_end(&mut ws);
    assert_eq!(e.close, Some((1008, "idle timeout".to_string())), "{e:?}");
    assert!(started.elapsed() >= Duration::from_secs(2));
    // Its slot is free again.
    wait_for("the slot to be free", Duration::from_secs(10), || {
        let (st, _) = d.json("POST", "/v1/exec", Some(&body(&["true"])));
        (st == 200).then_some(())
    });
}

#[test]
fn bad_input_at_the_front_door_gets_clear_errors_and_the_daemon_goes_on() {
    let d = DaemonProc::start_with(
        |c| c.replace("[server]\n", "[server]\nmax_body_bytes = 4096\n"),
        "info",
    );
    let json_of = |b: &[u8]| -> Value { serde_json::from_slice(b).unwrap_or(Value::Null) };
    // Malformed HTTP.
    let (st, b) = raw_exchange(&d.addr, b"BLAH\r\n\r\n");
    assert_eq!((st, error_code(&json_of(&b))), (400, "BAD_REQUEST"));
    // Oversize head.
    let big = format!(
        "GET /healthz HTTP/1.1\r\nHost: x\r\nX-Big: {}\r\n\r\n",
        "a".repeat(70_000)
    );
    let (st, b) = raw_exchange(&d.addr, big.as_bytes());
    assert_eq!((st, error_code(&json_of(&b))), (431, "HEADERS_TOO_LARGE"));
    // Oversize body.
    let payload = vec![b'x'; 5000];
    let (st, b) = d.request("POST", "/v1/exec", Some(&d.token), Some(&payload));
    assert_eq!((st, error_code(&json_of(&b))), (413, "BODY_TOO_LARGE"));
    // A client that vanishes mid-request.
    {
        let mut s = TcpStream::connect(&d.addr).unwrap();
        s.write_all(b"POST /v1/exec HTTP/1.1\r\nHost: x\r\nContent-Length: 100\r\n\r\n{\"wor")
            .unwrap();
    }
    // Non-upgrade GET of the interactive route.
    let (st, b) = d.request(
        "GET",
        &interactive_path(&["true"], ""),
        Some(&d.token),
        None,
    );
    assert_eq!((st, error_code(&json_of(&b))), (400, "BAD_REQUEST"));
    // A bad flag on the interactive route, before the upgrade.
    let auth = format!("Bearer {}", d.token);
    let (st, b) = d
        .ws(
            &interactive_path(&["true"], "&tty=maybe"),
            &[("Authorization", &auth)],
            &[SUBPROTOCOL],
        )
        .err()
        .unwrap_or_else(|| panic!("not refused"));
    assert_eq!((st, error_code(&json_of(&b))), (400, "EXEC_INVALID"));
    // Still serving everyone.
    let (st, v) = d.json("POST", "/v1/exec", Some(&body(&["echo", "ok"])));
    assert_eq!((st, v["stdout"].as_str()), (200, Some("ok\n")));
    let (st, _) = d.request("GET", "/healthz", None, None);
    assert_eq!(st, 200);
}

#[test]
fn workspaces_lists_what_the_token_may_exec_into() {
    let d = DaemonProc::start();
    d.create(&deployment("plain", json!({}), 1));
    let (st, v) = d.json("GET", "/v1/workspaces", None);
    assert_eq!(st, 200, "{v}");
    assert_eq!(
        v,
        json!({"workspaces": [{"project": "demo", "uid": "demo-uid", "deployments": [
            {"name": "hello", "containers": ["main"], "replicas": 1, "readyReplicas": 1}
        ]}]})
    );
}

#[test]
fn shutdown_ends_interactive_sessions_with_a_reason_and_exits_0() {
    let mut d = DaemonProc::start();
    let mut ws = open_ws(&d, &["cat"], "&tty=false");
    let pid = d.child.id();
    let reader = std::thread::spawn(move || read_to_end(&mut ws));
    common::unsafe_kill(pid, 15);
    let e = reader.join().unwrap();
    assert_eq!(
        e.close,
        Some((1001, "server shutting down".to_string())),
        "{e:?}"
    );
    assert_eq!(d.stop(), Some(0));
}

#[test]
fn interactive_output_is_recorded_as_asciinema_v2() {
    let d = DaemonProc::start_with(
        |c| c.replace("[exec]\n", "[exec]\nrecording_dir = \"./state/rec\"\n"),
        "info",
    );
    let mut ws = open_ws(&d, &["sh", "-c", "read x; printf 'hello-cast'"], "");
    send(
        &mut ws,
        ClientFrame::Resize {
            cols: 100,
            rows: 30,
        },
    );
    send(
        &mut ws,
        ClientFrame::Stdin {
            data: b"secret-input\r".to_vec(),
            eof: false,
        },
    );
    let e = read_to_end(&mut ws);
    assert_eq!(e.exit, Some(0));
    let lines = audit_lines(&d);
    let name = lines[0]["recording"]
        .as_str()
        .expect("the audit names the recording");
    let text = std::fs::read_to_string(d.dir.join("state").join("rec").join(name)).unwrap();
    let events: Vec<Value> = text
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(events[0]["version"], 2);
    assert_eq!(events[0]["command"], "sh -c read x; printf 'hello-cast'");
    let output: String = events[1..]
        .iter()
        .filter(|e| e[1] == "o")
        .map(|e| e[2].as_str().unwrap().to_string())
        .collect();
    assert!(output.contains("hello-cast"), "{output:?}");
    assert!(
        events[1..].iter().any(|e| e[1] == "r" && e[2] == "100x30"),
        "{text}"
    );
    let times: Vec<f64> = events[1..].iter().map(|e| e[0].as_f64().unwrap()).collect();
    assert!(times.windows(2).all(|w| w[0] <= w[1]), "{times:?}");
    // The tty echoes what was typed; stdin itself is not recorded as input.
    assert!(!events[1..].iter().any(|e| e[1] == "i"));
}

#[test]
fn idle_interactive_streams_are_pinged() {
    let d = DaemonProc::start_with(
        |c| c.replace("[exec]\n", "[exec]\nping_interval_secs = 1\n"),
        "info",
    );
    let mut ws = open_ws(&d, &["cat"], "&tty=false");
    let started = Instant::now();
    match ws.read().expect("read") {
        Message::Ping(_) => {}
        m => panic!("unexpected {m:?}"),
    }
    assert!(started.elapsed() >= Duration::from_millis(500));
    // The session is alive after the ping: an echo still comes back.
    send(
        &mut ws,
        ClientFrame::Stdin {
            data: b"still\n".to_vec(),
            eof: true,
        },
    );
    let e = read_to_end(&mut ws);
    assert_eq!(e.stdout, b"still\n");
    assert_eq!(e.exit, Some(0));
}

#[test]
fn metrics_count_execs_bytes_and_errors() {
    let d = DaemonProc::start();
    let (st, _) = d.json("POST", "/v1/exec", Some(&body(&["printf", "12345"])));
    assert_eq!(st, 200);
    let mut capped = body(&["sh", "-c", "exec yes"]);
    capped["stdoutCapBytes"] = json!(10);
    let (st, _) = d.json("POST", "/v1/exec", Some(&capped));
    assert_eq!(st, 422);
    let mut ws = open_ws(&d, &["cat"], "&tty=false");
    send(
        &mut ws,
        ClientFrame::Stdin {
            data: b"abc".to_vec(),
            eof: true,
        },
    );
    assert_eq!(read_to_end(&mut ws).exit, Some(0));
    let mut ws = open_ws(&d, &["cat"], "&tty=false");
    ws.send(Message::Text("{}".into())).unwrap();
    assert!(read_to_end(&mut ws).error.is_some());

    let (st, m) = d.request("GET", "/metrics", Some(&d.token), None);
    assert_eq!(st, 200);
    let m = String::from_utf8(m).unwrap();
    let value = |series: &str| -> i64 {
        m.lines()
            .find_map(|l| l.strip_prefix(series).and_then(|r| r.strip_prefix(' ')))
            .and_then(|v| v.parse().ok())
            .unwrap_or_else(|| panic!("{series} missing in\n{m}"))
    };
    assert_eq!(
        value(r#"kubegate_exec_total{kind="oneshot",result="exit"}"#),
        1
    );
    assert_eq!(
        value(r#"kubegate_exec_total{kind="oneshot",result="EXEC_OUTPUT_LIMIT"}"#),
        1
    );
    assert_eq!(
        value(r#"kubegate_exec_total{kind="interactive",result="exit"}"#),
        1
    );
    assert_eq!(
        value(r#"kubegate_exec_total{kind="interactive",result="EXEC_INVALID"}"#),
        1
    );
    assert_eq!(
        value(r#"kubegate_api_errors_total{code="EXEC_OUTPUT_LIMIT"}"#),
        1
    );
    assert_eq!(
        value(r#"kubegate_api_errors_total{code="EXEC_INVALID"}"#),
        1
    );
    assert_eq!(value(r#"kubegate_exec_bytes_total{direction="in"}"#), 3);
    assert!(value(r#"kubegate_exec_bytes_total{direction="out"}"#) >= 5 + 3);
    assert_eq!(value(r#"kubegate_exec_active{kind="oneshot"}"#), 0);
    assert!(value("kubegate_threads") > 0);
    assert!(value("kubegate_resident_memory_bytes") > 0);
    assert!(m.contains("# TYPE kubegate_exec_total counter"));
}
