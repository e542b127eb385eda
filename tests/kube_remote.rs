//! The exec/attach client (`kube::remote`) against `kubegate sim`: exit
//! codes (0, 1, 3, 137), stdout/stderr separation, stdin EOF with all the
//! output after it, the v4 fallback's missing half-close, tty resizes, a
//! cut stream (an error, never exit 0), attach, errors before the upgrade,
//! TLS with a token, backpressure with a slow consumer, and idle pings.
//! Every test has a watchdog; none sleeps to wait for a condition.

mod common;

use base64::Engine;
use common::{wait_for, SimProc};
use crossbeam_channel::Receiver;
use kubegate::kube::connection::{Connection, StaticToken};
use kubegate::kube::remote::{
    attach, exec, ExecOptions, ExitStatus, Output, Protocol, RemoteError, RemoteProcess, TermSize,
};
use kubegate::kube::status::StatusReason;
use serde_json::{json, Value};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

/// Aborts the test binary if the guard is not dropped within `secs`.
fn watchdog(secs: u64) -> crossbeam_channel::Sender<()> {
    let (tx, rx) = crossbeam_channel::bounded::<()>(0);
    std::thread::spawn(move || {
        if let Err(crossbeam_channel::RecvTimeoutError::Timeout) =
            rx.recv_timeout(Duration::from_secs(secs))
        {
            eprintln!("watchdog: kube_remote test hung for {secs} s");
            std::process::abort();
        }
    });
    tx
}

fn apply(sim: &SimProc, obj: &Value) {
    let out = sim.kubectl_run(
        &["apply", "-f", "-"],
        Some(obj.to_string().as_bytes()),
        Duration::from_secs(60),
    );
    assert_eq!(out.code, Some(0), "{}", out.stderr_str());
}

fn wait_running(sim: &SimProc, name: &str) {
    wait_for(&format!("{name} running"), Duration::from_secs(60), || {
        (sim.kubectl_json(&["get", "pod", name])["status"]["phase"] == "Running").then_some(())
    });
}

fn box_pod(sim: &SimProc) {
    apply(
        sim,
        &json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "box"},
        "spec": {"containers": [{"name": "main", "image": "busybox",
            "command": ["sh", "-c", "trap 'exit 0' TERM; while :; do sleep 1; done"]}]}}),
    );
    wait_running(sim, "box");
}

fn words(w: &[&str]) -> Vec<String> {
    w.iter().map(|s| s.to_string()).collect()
}

fn sh(script: &str) -> Vec<String> {
    words(&["sh", "-c", script])
}

/// Reads a process's output to the end on its own thread.
fn collect(p: &RemoteProcess) -> JoinHandle<(Vec<u8>, Vec<u8>)> {
    let rx = p.output();
    std::thread::spawn(move || {
        let (mut out, mut err) = (Vec::new(), Vec::new());
        for chunk in rx.iter() {
            match chunk {
                Output::Stdout(b) => out.extend_from_slice(&b),
                Output::Stderr(b) => err.extend_from_slice(&b),
                // Whole frames, when asked for: the channel byte says which.
                Output::Frame(f) if f[0] == 2 => err.extend_from_slice(&f[1..]),
                Output::Frame(f) => out.extend_from_slice(&f[1..]),
            }
        }
        (out, err)
    })
}

struct Ran {
    stdout: String,
    stderr: String,
    result: Result<ExitStatus, RemoteError>,
}

fn run(conn: &Connection, command: Vec<String>, opts: ExecOptions) -> Ran {
    let p = exec(conn, "default", "box", None, &command, opts).expect("exec");
    let reader = collect(&p);
    let result = p.wait();
    let (o, e) = reader.join().expect("reader");
    Ran {
        stdout: String::from_utf8_lossy(&o).into_owned(),
        stderr: String::from_utf8_lossy(&e).into_owned(),
        result,
    }
}

fn code(r: &Ran) -> i32 {
    match &r.result {
        Ok(s) => s.code,
        Err(e) => panic!("exec failed: {e} (stdout {:?})", r.stdout),
    }
}

/// Reads output chunks until the accumulated stdout contains `want`.
fn read_until(rx: &Receiver<Output>, acc: &mut String, want: &str) {
    let deadline = Instant::now() + Duration::from_secs(60);
    while !acc.contains(want) {
        let left = deadline.saturating_duration_since(Instant::now());
        match rx.recv_timeout(left) {
            Ok(Output::Stdout(b)) | Ok(Output::Stderr(b)) => {
                acc.push_str(&String::from_utf8_lossy(&b))
            }
            Ok(Output::Frame(f)) => acc.push_str(&String::from_utf8_lossy(&f[1..])),
            Err(e) => panic!("waiting for {want:?}: {e}; got {acc:?}"),
        }
    }
}

#[test]
fn exit_codes_streams_and_errors_before_the_upgrade() {
    let _w = watchdog(240);
    let sim = SimProc::start(&[]);
    box_pod(&sim);
    let conn = Connection::plain(&sim.url);

    // The killed process is the exec'd shell itself (its child kills its
    // parent). Not `kill -9 $$`: the sim wrongly applies the container
    // `$(VAR)`/`$$` expansion to exec commands, turning `$$` into `$`.
    let killed = r#"sh -c 'kill -9 $PPID'; echo not reached"#;
    for (script, want) in [("exit 0", 0), ("exit 1", 1), ("exit 3", 3), (killed, 137)] {
        let r = run(&conn, sh(script), ExecOptions::default());
        assert_eq!(code(&r), want, "{script}: {:?} {:?}", r.stdout, r.stderr);
    }

    // Raw frames: every output is a whole `[1|2][data]` frame, shared as
    // it came; the streams still apart, the exit code the same.
    let p = exec(
        &conn,
        "default",
        "box",
        None,
        &sh("echo raw-out; echo raw-err >&2; exit 4"),
        ExecOptions {
            raw_frames: true,
            ..ExecOptions::default()
        },
    )
    .expect("exec");
    let rx = p.output();
    let frames = std::thread::spawn(move || rx.iter().collect::<Vec<Output>>());
    assert_eq!(p.wait().map(|s| s.code).ok(), Some(4));
    let (mut out, mut err) = (Vec::new(), Vec::new());
    for f in frames.join().expect("reader") {
        match f {
            Output::Frame(b) if b[0] == 1 => out.extend_from_slice(&b[1..]),
            Output::Frame(b) if b[0] == 2 => err.extend_from_slice(&b[1..]),
            other => panic!("not a whole stdout/stderr frame: {other:?}"),
        }
    }
    assert_eq!(
        (out.as_slice(), err.as_slice()),
        (&b"raw-out\n"[..], &b"raw-err\n"[..])
    );

    // stdout and stderr stay apart without a tty.
    let r = run(
        &conn,
        sh("echo out1; echo err1 >&2; echo out2; echo err2 >&2; exit 2"),
        ExecOptions::default(),
    );
    assert_eq!(code(&r), 2);
    assert_eq!(r.stdout, "out1\nout2\n");
    assert_eq!(r.stderr, "err1\nerr2\n");

    // Arguments with spaces and shell metacharacters arrive intact.
    let r = run(
        &conn,
        words(&["printf", "%s|", "a b", "c&d=e", "+;é"]),
        ExecOptions::default(),
    );
    assert_eq!(code(&r), 0);
    assert_eq!(r.stdout, "a b|c&d=e|+;é|");

    // The preferred protocol is v5.
    let p = exec(
        &conn,
        "default",
        "box",
        None,
        &words(&["true"]),
        ExecOptions::default(),
    )
    .expect("exec");
    assert_eq!(p.protocol(), Protocol::V5);
    assert_eq!(p.wait().map(|s| s.code), Ok(0));

    // Errors before the upgrade are the server's Status.
    match exec(
        &conn,
        "default",
        "nope",
        None,
        &words(&["true"]),
        ExecOptions::default(),
    ) {
        Err(RemoteError::Api { code, status }) => {
            assert_eq!(code, 404);
            assert_eq!(status.reason(), StatusReason::NotFound);
            assert_eq!(status.message, "pods \"nope\" not found");
        }
        Err(e) => panic!("{e:?}"),
        Ok(_) => panic!("exec into a missing pod succeeded"),
    }
    match exec(
        &conn,
        "default",
        "box",
        Some("other"),
        &words(&["true"]),
        ExecOptions::default(),
    ) {
        Err(RemoteError::Api { code, status }) => {
            assert_eq!(code, 400);
            assert_eq!(status.message, "container other is not valid for pod box");
        }
        Err(e) => panic!("{e:?}"),
        Ok(_) => panic!("exec into a missing container succeeded"),
    }
    // Nothing goes to the network for requests that cannot work.
    assert!(matches!(
        exec(&conn, "default", "box", None, &[], ExecOptions::default()),
        Err(RemoteError::InvalidRequest(_))
    ));
    let none = ExecOptions {
        stdout: false,
        stderr: false,
        ..ExecOptions::default()
    };
    assert!(matches!(
        exec(&conn, "default", "box", None, &words(&["true"]), none),
        Err(RemoteError::InvalidRequest(_))
    ));
    // A refused connection is a transport error.
    let dead = Connection::plain("http://127.0.0.1:1");
    assert!(matches!(
        exec(
            &dead,
            "default",
            "box",
            None,
            &words(&["true"]),
            ExecOptions::default()
        ),
        Err(RemoteError::Transport(_))
    ));

    // A container that is not running: the socket opens, channel 3 carries
    // an InternalError.
    apply(
        &sim,
        &json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "done"},
        "spec": {"restartPolicy": "Never", "containers": [{"name": "main", "image": "busybox", "command": ["true"]}]}}),
    );
    wait_for("done to finish", Duration::from_secs(60), || {
        (sim.kubectl_json(&["get", "pod", "done"])["status"]["phase"] == "Succeeded").then_some(())
    });
    let p = exec(
        &conn,
        "default",
        "done",
        None,
        &words(&["true"]),
        ExecOptions::default(),
    )
    .expect("upgrade");
    match p.wait() {
        Err(RemoteError::Status(e)) => {
            assert_eq!(e.code, 500);
            assert_eq!(e.reason, Some(StatusReason::InternalError));
            assert!(e.message.contains("is not running"), "{}", e.message);
        }
        other => panic!("{other:?}"),
    }
}

#[test]
fn stdin_eof_then_every_output_line() {
    let _w = watchdog(300);
    let sim = SimProc::start(&[]);
    box_pod(&sim);
    let conn = Connection::plain(&sim.url);
    let opts = ExecOptions {
        stdin: true,
        ..ExecOptions::default()
    };
    // wc prints only once stdin reaches EOF; seq runs after that.
    let p = exec(
        &conn,
        "default",
        "box",
        None,
        &sh("wc -c; seq 2000000"),
        opts,
    )
    .expect("exec");
    assert_eq!(p.protocol(), Protocol::V5);
    let reader = collect(&p);
    let mut stdin = p.stdin();
    let data = vec![b'x'; 100_000];
    stdin.write(&data).expect("stdin");
    stdin.write(b"tail").expect("stdin");
    stdin.close().expect("close stdin");
    assert!(matches!(stdin.write(b"more"), Err(RemoteError::Closed)));
    assert_eq!(p.wait().map(|s| s.code), Ok(0));
    let (out, err) = reader.join().expect("reader");
    assert!(err.is_empty(), "{}", String::from_utf8_lossy(&err));
    let text = String::from_utf8(out).expect("utf8");
    let mut lines = text.lines();
    assert_eq!(lines.next().map(str::trim), Some("100004"));
    let mut n = 0u64;
    for l in lines {
        n += 1;
        assert_eq!(l, n.to_string(), "line {n}");
    }
    assert_eq!(n, 2_000_000);
}

#[test]
fn v4_fallback_has_no_half_close() {
    let _w = watchdog(180);
    let sim = SimProc::start(&[]);
    box_pod(&sim);
    let conn = Connection::plain(&sim.url);
    let opts = ExecOptions {
        stdin: true,
        protocols: vec![Protocol::V4],
        ..ExecOptions::default()
    };
    let p = exec(
        &conn,
        "default",
        "box",
        None,
        &sh("read l; echo got:$l; exit 6"),
        opts,
    )
    .expect("exec");
    assert_eq!(p.protocol(), Protocol::V4);
    let reader = collect(&p);
    let mut stdin = p.stdin();
    // No half-close on v4: refused, nothing sent, the stream goes on.
    assert_eq!(stdin.close(), Err(RemoteError::HalfCloseUnsupported));
    stdin.write(b"hi\n").expect("stdin still works");
    assert_eq!(p.wait().map(|s| s.code), Ok(6));
    let (out, _) = reader.join().expect("reader");
    assert_eq!(String::from_utf8_lossy(&out), "got:hi\n");
}

#[test]
fn tty_gets_initial_size_and_resizes() {
    let _w = watchdog(180);
    let sim = SimProc::start(&[]);
    box_pod(&sim);
    let conn = Connection::plain(&sim.url);
    let opts = ExecOptions {
        stdin: true,
        tty: true,
        initial_size: Some(TermSize {
            width: 100,
            height: 30,
        }),
        ..ExecOptions::default()
    };
    let p = exec(
        &conn,
        "default",
        "box",
        None,
        &sh("read x; stty size; read y; stty size; exit 4"),
        opts,
    )
    .expect("exec");
    let rx = p.output();
    let mut acc = String::new();
    // The process may start before the initial size lands (as with a real
    // kubelet); the size is queued before any stdin, so it is set by the
    // time the first line is read.
    p.stdin().write(b"\r").expect("enter");
    read_until(&rx, &mut acc, "30 100");
    p.resize(TermSize {
        width: 50,
        height: 20,
    })
    .expect("resize");
    // Resize and Enter travel in order on one socket: the size is set
    // before `read` returns.
    p.stdin().write(b"\r").expect("enter");
    read_until(&rx, &mut acc, "20 50");
    drop(rx);
    assert_eq!(p.wait().map(|s| s.code), Ok(4), "{acc:?}");
}

#[test]
fn a_cut_stream_is_an_error_not_exit_zero() {
    let _w = watchdog(180);
    let sim = SimProc::start(&[]);
    box_pod(&sim);
    let conn = Connection::plain(&sim.url);
    let p = exec(
        &conn,
        "default",
        "box",
        None,
        &sh("echo ready; exec sleep 30"),
        ExecOptions::default(),
    )
    .expect("exec");
    // Output flowing means the server side of the stream is running.
    let rx = p.output();
    read_until(&rx, &mut String::new(), "ready");
    let agent: ureq::Agent = ureq::Agent::config_builder()
        .http_status_as_error(false)
        .proxy(None)
        .build()
        .into();
    let r = agent
        .post(&format!("{}/sim/faults", sim.url))
        .send_json(json!({"cutStreams": true}))
        .expect("fault");
    assert_eq!(r.status().as_u16(), 200);
    drop(rx);
    let t0 = Instant::now();
    match p.wait() {
        Err(e @ RemoteError::NoStatus { .. }) => {
            assert!(e.to_string().contains("without exit status"), "{e}");
        }
        other => panic!("a cut stream gave {other:?}"),
    }
    assert!(t0.elapsed() < Duration::from_secs(25), "{:?}", t0.elapsed());
}

/// An upgrade answered 429 or 503 with a Retry-After (the server did not
/// act on it) is repeated after the wait; a 500 is passed on at once (the
/// soak test's 5xx and 429 bursts, docs/RELIABILITY.md).
#[test]
fn an_upgrade_refused_with_retry_after_is_repeated() {
    let _w = watchdog(180);
    let sim = SimProc::start(&[]);
    box_pod(&sim);
    let conn = Connection::plain(&sim.url);
    let agent: ureq::Agent = ureq::Agent::config_builder()
        .http_status_as_error(false)
        .proxy(None)
        .build()
        .into();
    let fail = |status: u16| {
        let r = agent
            .post(&format!("{}/sim/faults", sim.url))
            .send_json(json!({"failRequests": {"count": 1, "status": status, "retryAfterSecs": 1}}))
            .expect("fault");
        assert_eq!(r.status().as_u16(), 200);
    };
    for status in [429, 503] {
        fail(status);
        let t0 = Instant::now();
        let r = run(&conn, sh("echo again"), ExecOptions::default());
        assert_eq!(code(&r), 0, "after a {status}");
        assert_eq!(r.stdout, "again\n");
        assert!(
            t0.elapsed() >= Duration::from_secs(1),
            "waited the Retry-After"
        );
    }
    fail(500);
    match exec(
        &conn,
        "default",
        "box",
        None,
        &sh("true"),
        ExecOptions::default(),
    ) {
        Err(RemoteError::Api { code: 500, .. }) => {}
        Err(e) => panic!("a 500 gave {e}"),
        Ok(_) => panic!("a 500 was repeated"),
    }
}

#[test]
fn attach_to_a_running_container() {
    let _w = watchdog(180);
    let sim = SimProc::start(&[]);
    apply(
        &sim,
        &json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "talker"},
        "spec": {"restartPolicy": "Never", "containers": [{"name": "main", "image": "busybox",
            "stdin": true, "stdinOnce": true,
            "command": ["sh", "-c", "while read l; do echo got:$l; done; echo bye"]}]}}),
    );
    wait_running(&sim, "talker");
    let conn = Connection::plain(&sim.url);
    let opts = ExecOptions {
        stdin: true,
        ..ExecOptions::default()
    };
    let p = attach(&conn, "default", "talker", Some("main"), opts).expect("attach");
    let rx = p.output();
    let mut stdin = p.stdin();
    let mut acc = String::new();
    stdin.write(b"one\n").expect("stdin");
    read_until(&rx, &mut acc, "got:one\n");
    stdin.write(b"two\n").expect("stdin");
    read_until(&rx, &mut acc, "got:two\n");
    // stdinOnce: our EOF ends the container's loop; the attach ends
    // normally with Success.
    stdin.close().expect("close");
    read_until(&rx, &mut acc, "bye\n");
    drop(rx);
    assert_eq!(p.wait().map(|s| s.code), Ok(0));
}

/// The CA and the server URL from the sim's kubeconfig, read by hand (the
/// kubeconfig loader is built elsewhere).
fn tls_connection(sim: &SimProc, token: &str) -> Connection {
    let yaml = std::fs::read_to_string(&sim.kubeconfig).expect("kubeconfig");
    let field = |name: &str| -> String {
        yaml.lines()
            .find_map(|l| l.trim().strip_prefix(name))
            .unwrap_or_else(|| panic!("{name} in {yaml}"))
            .trim()
            .trim_matches('"')
            .to_string()
    };
    let ca_pem = base64::engine::general_purpose::STANDARD
        .decode(field("certificate-authority-data:"))
        .expect("base64");
    let mut conn = Connection::plain(&field("server:"));
    assert!(conn.is_tls(), "{}", conn.server);
    conn.tls.ca_certs = kubegate::http::tls::certs_from_pem(&ca_pem).expect("CA");
    conn.credentials = Arc::new(StaticToken(token.to_string()));
    conn
}

#[test]
fn over_tls_with_a_token() {
    let _w = watchdog(180);
    let sim = SimProc::start(&["--tls", "--token", "s3cret-token"]);
    box_pod(&sim);
    let conn = tls_connection(&sim, "s3cret-token");
    let r = run(
        &conn,
        sh("echo over-tls; echo e >&2; exit 5"),
        ExecOptions::default(),
    );
    assert_eq!(code(&r), 5);
    assert_eq!(r.stdout, "over-tls\n");
    assert_eq!(r.stderr, "e\n");

    // Large output through TLS (many records per read: buffered plaintext).
    let r = run(&conn, sh("seq 200000"), ExecOptions::default());
    assert_eq!(code(&r), 0);
    assert_eq!(r.stdout.lines().count(), 200_000);
    assert!(r.stdout.ends_with("199999\n200000\n"));

    let bad = tls_connection(&sim, "wrong");
    match exec(
        &bad,
        "default",
        "box",
        None,
        &words(&["true"]),
        ExecOptions::default(),
    ) {
        Err(RemoteError::Api { code, .. }) => assert_eq!(code, 401),
        Err(e) => panic!("{e:?}"),
        Ok(_) => panic!("a wrong token was accepted"),
    }
}

#[test]
fn a_slow_consumer_gets_every_byte_and_stdin_never_deadlocks() {
    let _w = watchdog(300);
    let sim = SimProc::start(&[]);
    box_pod(&sim);
    let conn = Connection::plain(&sim.url);

    // Output with a tiny buffer and a consumer that dawdles.
    let opts = ExecOptions {
        output_capacity: 2,
        ..ExecOptions::default()
    };
    let p = exec(&conn, "default", "box", None, &sh("seq 300000"), opts).expect("exec");
    let rx = p.output();
    let mut out = Vec::new();
    let mut saw_full = false;
    let mut chunks = 0;
    for chunk in rx.iter() {
        chunks += 1;
        if chunks <= 50 {
            // Deliberately slow: the producer must wait, not drop.
            std::thread::sleep(Duration::from_millis(5));
            saw_full |= rx.is_full();
        }
        match chunk {
            Output::Stdout(b) => out.extend_from_slice(&b),
            other => panic!("not stdout: {other:?}"),
        }
    }
    assert!(saw_full, "the output channel never filled up");
    assert_eq!(p.wait().map(|s| s.code), Ok(0));
    let text = String::from_utf8(out).expect("utf8");
    let mut n = 0u64;
    for l in text.lines() {
        n += 1;
        assert_eq!(l, n.to_string());
    }
    assert_eq!(n, 300_000);

    // `cat` echoes 8 MiB of stdin while the output side is slow: the
    // writer waits for room, the stream keeps moving both ways.
    let opts = ExecOptions {
        stdin: true,
        output_capacity: 2,
        ..ExecOptions::default()
    };
    let p = exec(&conn, "default", "box", None, &words(&["cat"]), opts).expect("exec");
    let mut stdin = p.stdin();
    let data: Vec<u8> = (0..8u32 << 20).map(|i| (i % 251) as u8).collect();
    let expect = data.clone();
    let writer = std::thread::spawn(move || {
        stdin.write(&data).expect("stdin");
        stdin.close().expect("close");
    });
    let rx = p.output();
    let mut got = Vec::with_capacity(expect.len());
    for (i, chunk) in rx.iter().enumerate() {
        if i % 16 == 0 {
            std::thread::sleep(Duration::from_millis(1));
        }
        if let Output::Stdout(b) = chunk {
            got.extend_from_slice(&b);
        }
    }
    writer.join().expect("writer");
    assert_eq!(p.wait().map(|s| s.code), Ok(0));
    assert!(got == expect, "cat output differs ({} bytes)", got.len());
}

#[test]
fn idle_streams_are_kept_alive_by_pings() {
    let _w = watchdog(120);
    let sim = SimProc::start(&[]);
    box_pod(&sim);
    let conn = Connection::plain(&sim.url);
    // Silent for 2 s with an idle limit of 1 s: only our pings' pongs keep
    // the stream alive.
    let opts = ExecOptions {
        ping_interval: Some(Duration::from_millis(100)),
        idle_timeout: Some(Duration::from_secs(1)),
        ..ExecOptions::default()
    };
    let r = run(&conn, sh("sleep 2; echo woke"), opts);
    assert_eq!(code(&r), 0);
    assert_eq!(r.stdout, "woke\n");

    // Without pings the same silence ends the stream: an error, not exit 0.
    let opts = ExecOptions {
        ping_interval: None,
        idle_timeout: Some(Duration::from_millis(500)),
        ..ExecOptions::default()
    };
    let r = run(&conn, sh("sleep 2; echo woke"), opts);
    match r.result {
        Err(RemoteError::NoStatus { .. }) => {}
        other => panic!("{other:?}"),
    }
}

/// Median MB/s over `runs` of `f` (which returns the bytes it moved).
fn median_mbps(runs: usize, mut f: impl FnMut() -> u64) -> f64 {
    let mut v: Vec<f64> = (0..runs)
        .map(|_| {
            let t = Instant::now();
            let bytes = f();
            bytes as f64 / 1e6 / t.elapsed().as_secs_f64()
        })
        .collect();
    v.sort_by(|a, b| a.total_cmp(b));
    eprintln!("runs (MB/s, sorted): {v:.0?}");
    v[v.len() / 2]
}

/// exec stdout throughput: this client alone vs `kubectl exec`, same sim,
/// same command, output discarded. Run in release:
/// `cargo test --release --test kube_remote bench_exec_throughput -- --ignored --nocapture`
#[test]
#[ignore]
fn bench_exec_throughput() {
    const BYTES: u64 = 268_435_456;
    let _w = watchdog(900);
    let sim = SimProc::start(&[]);
    box_pod(&sim);
    let conn = Connection::plain(&sim.url);
    let cmd = words(&["head", "-c", &BYTES.to_string(), "/dev/zero"]);
    let runs: usize = std::env::var("BENCH_RUNS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(3);
    let client = median_mbps(runs, || {
        let opts = ExecOptions {
            stderr: false,
            ..ExecOptions::default()
        };
        let p = exec(&conn, "default", "box", None, &cmd, opts).expect("exec");
        let mut n = 0u64;
        let mut chunks = 0u64;
        for chunk in p.output().iter() {
            if let Output::Stdout(b) = chunk {
                n += b.len() as u64;
                chunks += 1;
            }
        }
        assert_eq!(p.wait().map(|s| s.code), Ok(0));
        assert_eq!(n, BYTES);
        eprintln!(
            "client: {chunks} chunks, {} bytes each on average",
            n / chunks.max(1)
        );
        n
    });
    let kubectl = median_mbps(runs, || {
        let mut c = sim.kubectl();
        c.args(["exec", "box", "--"])
            .args(&cmd)
            .stdin(std::process::Stdio::null())
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::inherit());
        let st = c.status().expect("kubectl");
        assert!(st.success(), "kubectl exec: {st}");
        BYTES
    });
    println!();
    println!(
        "exec stdout throughput, {} MiB of /dev/zero, median of 3",
        BYTES >> 20
    );
    println!();
    println!("| client | MB/s |");
    println!("|---|---|");
    println!("| kube::remote | {client:.0} |");
    println!("| kubectl exec | {kubectl:.0} |");
    println!("| ratio (client / kubectl) | {:.2} |", client / kubectl);
}
