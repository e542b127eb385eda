//! `kubegate exec` and `kubegate workspaces` end to end, against a real
//! `kubegate serve` on the example config (tests/common/daemon.rs): output
//! and exit codes pass through, stdin bytes arrive exactly and EOF reaches
//! the command, a terminal under a pty goes raw and comes back exactly as
//! it was (normal exit and SIGTERM), and kubegate's own errors print
//! `kubegate: CODE: message` and exit 255 (exec) or 1/2 (workspaces).
//! Waits are on conditions with deadlines; every child is reaped.

mod common;

use common::daemon::DaemonProc;
use common::pty::Pty;
use common::{run_with_timeout, temp_dir, terminate, unsafe_kill, wait_for, Output, KUBEGATE};
use std::process::Command;
use std::time::Duration;

const T: Duration = Duration::from_secs(60);

/// `kubegate ARGS` with no KUBEGATE_* from the test's environment.
fn kg(args: &[&str]) -> Command {
    // An empty state folder: a command without a token would otherwise
    // find the user's own stored logins (`kubegate login`).
    static STATE: std::sync::OnceLock<std::path::PathBuf> = std::sync::OnceLock::new();
    let state = STATE.get_or_init(|| common::temp_dir("cli-state"));
    let mut c = Command::new(KUBEGATE);
    c.args(args)
        .env_remove("KUBEGATE_SERVER")
        .env_remove("KUBEGATE_TOKEN")
        .env_remove("KUBEGATE_WORKSPACE")
        .env("XDG_STATE_HOME", state);
    c
}

/// `kubegate exec` against `d` with the demo token (from the env) and
/// workspace (from the flag), then `args`.
fn exec_cmd(d: &DaemonProc, args: &[&str]) -> Command {
    let mut c = kg(&["exec", "--server", &d.url, "--workspace", "demo/demo-uid"]);
    c.args(args).env("KUBEGATE_TOKEN", &d.token);
    c
}

fn run(c: Command, stdin: Option<&[u8]>) -> Output {
    run_with_timeout(c, stdin, T)
}

#[test]
fn exec_passes_output_stdin_and_exit_codes() {
    let d = DaemonProc::start();

    let out = run(
        exec_cmd(
            &d,
            &["hello", "--", "sh", "-c", "echo out; echo err >&2; exit 7"],
        ),
        None,
    );
    assert_eq!(out.stdout_str(), "out\n", "stderr: {}", out.stderr_str());
    assert_eq!(out.stderr_str(), "err\n");
    assert_eq!(out.code, Some(7));

    // -c, and exit 0.
    let out = run(exec_cmd(&d, &["-c", "main", "hello", "--", "true"]), None);
    assert_eq!(out.code, Some(0), "stderr: {}", out.stderr_str());
    assert!(out.stdout.is_empty());

    // Without -i the command's stdin is closed at once (cat ends by itself
    // even though we have data on ours).
    let out = run(exec_cmd(&d, &["hello", "--", "cat"]), Some(b"ignored\n"));
    assert_eq!(out.code, Some(0), "stderr: {}", out.stderr_str());
    assert!(out.stdout.is_empty(), "{:?}", out.stdout_str());

    // -i: a few hundred KB of every byte value come back exactly.
    let data: Vec<u8> = (0..300_000u32)
        .map(|i| (i.wrapping_mul(7) ^ (i >> 8)) as u8)
        .collect();
    let out = run(exec_cmd(&d, &["-i", "hello", "--", "cat"]), Some(&data));
    assert_eq!(out.code, Some(0), "stderr: {}", out.stderr_str());
    assert_eq!(out.stdout.len(), data.len());
    assert!(out.stdout == data, "the bytes differ");

    // stdin EOF reaches the command, and output after it still arrives.
    let out = run(
        exec_cmd(
            &d,
            &[
                "-i",
                "hello",
                "--",
                "sh",
                "-c",
                "cat; echo after-eof; exit 4",
            ],
        ),
        Some(b"line one\nline two\n"),
    );
    assert_eq!(out.stdout_str(), "line one\nline two\nafter-eof\n");
    assert_eq!(out.code, Some(4), "stderr: {}", out.stderr_str());

    // -t without a terminal on stdin: one warning, then as without -t.
    let out = run(
        exec_cmd(&d, &["-i", "-t", "hello", "--", "sh", "-c", "cat; exit 5"]),
        Some(b"piped\n"),
    );
    assert_eq!(out.stdout_str(), "piped\n");
    assert_eq!(out.code, Some(5));
    assert_eq!(
        out.stderr_str(),
        "kubegate: warning: -t ignored: stdin is not a terminal\n"
    );
}

#[test]
fn kubegate_errors_workspaces_and_token_files() {
    let d = DaemonProc::start();

    let out = run(exec_cmd(&d, &["nope", "--", "true"]), None);
    assert_eq!(out.code, Some(255));
    let err = out.stderr_str();
    assert!(
        err.starts_with("kubegate: EXEC_TARGET_NOT_FOUND: ") && err.contains("nope"),
        "{err}"
    );
    assert!(out.stdout.is_empty());

    let mut c = kg(&[
        "exec",
        "--server",
        &d.url,
        "--token",
        "wrong-token",
        "-w",
        "demo/demo-uid",
        "hello",
        "--",
        "true",
    ]);
    c.env("KUBEGATE_TOKEN", &d.token); // the flag wins
    let out = run(c, None);
    assert_eq!(out.code, Some(255));
    assert!(
        out.stderr_str().starts_with("kubegate: UNAUTHORIZED: "),
        "{}",
        out.stderr_str()
    );
    assert!(
        !out.stderr_str().contains("wrong-token"),
        "the token leaked"
    );

    // A workspace the principal lacks.
    let out = run(
        {
            let mut c = kg(&["exec", "--server", &d.url, "hello", "--", "true"]);
            c.env("KUBEGATE_TOKEN", &d.token)
                .env("KUBEGATE_WORKSPACE", "other/other-uid");
            c
        },
        None,
    );
    assert_eq!(out.code, Some(255));
    assert!(
        out.stderr_str()
            .starts_with("kubegate: EXEC_TARGET_FORBIDDEN: "),
        "{}",
        out.stderr_str()
    );

    // --token-file: trimmed contents; env server and workspace.
    let dir = temp_dir("cli-token");
    let token_file = dir.join("token");
    std::fs::write(&token_file, format!("{}\n", d.token)).expect("write token file");
    let tf = token_file.to_string_lossy().to_string();
    let mut c = kg(&[
        "exec",
        "--token-file",
        &tf,
        "hello",
        "--",
        "echo",
        "via file",
    ]);
    c.env("KUBEGATE_SERVER", &d.url)
        .env("KUBEGATE_WORKSPACE", "demo/demo-uid");
    let out = run(c, None);
    assert_eq!(out.stdout_str(), "via file\n", "{}", out.stderr_str());
    assert_eq!(out.code, Some(0));

    // workspaces: the table, then JSON.
    let out = run(
        kg(&["workspaces", "--server", &d.url, "--token-file", &tf]),
        None,
    );
    assert_eq!(out.code, Some(0), "{}", out.stderr_str());
    let rows: Vec<Vec<String>> = out
        .stdout_str()
        .lines()
        .map(|l| l.split_whitespace().map(str::to_string).collect())
        .collect();
    assert_eq!(
        rows.first().map(|r| r.join(" ")),
        Some("WORKSPACE DEPLOYMENT CONTAINERS READY".into()),
        "{}",
        out.stdout_str()
    );
    assert!(
        rows.iter()
            .any(|r| r.join(" ") == "demo/demo-uid hello main 1/1"),
        "{}",
        out.stdout_str()
    );
    let mut c = kg(&["workspaces", "-o", "json", "--server", &d.url]);
    c.env("KUBEGATE_TOKEN", &d.token);
    let out = run(c, None);
    assert_eq!(out.code, Some(0), "{}", out.stderr_str());
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).expect("JSON output");
    assert_eq!(v["workspaces"][0]["project"], "demo");
    assert_eq!(v["workspaces"][0]["uid"], "demo-uid");
    assert_eq!(v["workspaces"][0]["deployments"][0]["name"], "hello");

    let out = run(
        kg(&["workspaces", "--server", &d.url, "--token", "wrong-token"]),
        None,
    );
    assert_eq!(out.code, Some(1));
    assert!(
        out.stderr_str().starts_with("kubegate: UNAUTHORIZED: "),
        "{}",
        out.stderr_str()
    );
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn errors_without_a_daemon() {
    // A port with nothing behind it.
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .expect("bind")
        .port();
    let server = format!("http://127.0.0.1:{port}");
    let out = run(
        kg(&[
            "exec", "--server", &server, "--token", "t", "-w", "p/u", "d", "--", "true",
        ]),
        None,
    );
    assert_eq!(out.code, Some(255));
    assert!(
        out.stderr_str().starts_with("kubegate: UNREACHABLE: "),
        "{}",
        out.stderr_str()
    );
    let out = run(
        kg(&["workspaces", "--server", &server, "--token", "t"]),
        None,
    );
    assert_eq!(out.code, Some(1));
    assert!(out.stderr_str().starts_with("kubegate: UNREACHABLE: "));

    // Usage errors: 255 for exec (as ssh), 2 for workspaces.
    for args in [
        &["exec", "--token", "t", "d", "--", "true"][..],
        &["exec", "--token", "t", "-w", "p/u", "--", "true"],
        &["exec", "--token", "t", "-w", "p/u", "d"],
        &[
            "exec", "--token", "t", "-w", "p/u", "--bogus", "d", "--", "true",
        ],
    ] {
        let out = run(kg(args), None);
        assert_eq!(out.code, Some(255), "{args:?}");
        assert!(
            out.stderr_str().starts_with("kubegate: USAGE: "),
            "{args:?}"
        );
    }
    let out = run(kg(&["exec", "-w", "p/u", "d", "--", "true"]), None);
    assert_eq!(out.code, Some(255));
    assert!(out.stderr_str().starts_with("kubegate: CONFIG: no token"));
    let out = run(kg(&["workspaces", "--bogus"]), None);
    assert_eq!(out.code, Some(2));
    let out = run(
        kg(&["workspaces", "--token-file", "/nonexistent/token"]),
        None,
    );
    assert_eq!(out.code, Some(2));
    assert!(out.stderr_str().starts_with("kubegate: CONFIG: token file"));

    for args in [&["exec", "--help"][..], &["workspaces", "--help"]] {
        let out = run(kg(args), None);
        assert_eq!(out.code, Some(0));
        assert!(out.stdout_str().starts_with("usage: kubegate "), "{args:?}");
    }
}

fn spawn_exec(pty: &Pty, d: &DaemonProc, script: &str) -> Reap {
    Reap(
        exec_cmd(d, &["-i", "-t", "hello", "--", "sh", "-c", script])
            .stdin(pty.stdio())
            .stdout(pty.stdio())
            .stderr(pty.stdio())
            .spawn()
            .expect("spawn kubegate exec -it"),
    )
}

/// A child killed and reaped on drop if still running (a failed test
/// leaves no process behind).
struct Reap(std::process::Child);

impl Drop for Reap {
    fn drop(&mut self) {
        if let Ok(None) = self.0.try_wait() {
            let _ = terminate(&mut self.0, Duration::from_secs(5));
        }
    }
}

fn wait_exit(child: &mut Reap) -> Option<i32> {
    wait_for("kubegate exec to exit", T, || {
        child.0.try_wait().ok().flatten().map(|st| st.code())
    })
}

#[test]
fn exec_tty_goes_raw_follows_the_size_and_restores_the_terminal() {
    let d = DaemonProc::start();
    let pty = Pty::open(33, 101);
    let before = pty.settings();

    // The size travels with the request and reaches the cluster as the
    // stream's first frame, before any stdin; the cluster applies it as
    // the command starts (concurrently, in real kubelets as in the sim),
    // so the remote reads a line first: by then the size is in.
    let script = r#"read l; stty size; while read l; do [ "$l" = end ] && exit 3; echo "got=$l"; stty size; done"#;
    let mut child = spawn_exec(&pty, &d, script);
    pty.type_bytes(b"go\r");
    let at = pty.wait_text("go\r\n33 101\r\n", 0);
    // Ours is raw meanwhile.
    assert_ne!(
        pty.settings(),
        before,
        "the local terminal is not in raw mode"
    );
    // Typed bytes reach the command; the REMOTE terminal echoes them.
    pty.type_bytes(b"hello\r");
    let at = pty.wait_text("hello\r\ngot=hello\r\n33 101\r\n", at);
    // A new size follows SIGWINCH (the child has no controlling terminal
    // here, so the signal is sent by hand). The resize and the next line
    // race; type until the new size shows.
    pty.resize(40, 120);
    unsafe_kill(child.0.id(), 28); // SIGWINCH
    let mut at = at;
    wait_for("the new size on the remote terminal", T, || {
        pty.type_bytes(b"x\r");
        at = pty.wait_text("got=x\r\n", at);
        let next = pty.wait_text("\r\n", at);
        let line = pty.text()[at..next].to_string();
        at = next;
        (line == "40 120\r\n").then_some(())
    });
    pty.type_bytes(b"end\r");
    assert_eq!(wait_exit(&mut child), Some(3), "{}", pty.text());
    assert_eq!(pty.settings(), before, "the terminal was not restored");

    // SIGTERM while raw: restored, then exit 128+15.
    let mut child = spawn_exec(&pty, &d, "read l; stty size; cat");
    let from = pty.text().len();
    pty.type_bytes(b"go\r");
    pty.wait_text("go\r\n40 120\r\n", from);
    assert_ne!(pty.settings(), before);
    unsafe_kill(child.0.id(), 15);
    assert_eq!(wait_exit(&mut child), Some(143));
    assert_eq!(pty.settings(), before, "SIGTERM left the terminal raw");

    // Ctrl-D goes through as a byte: the REMOTE terminal makes it cat's
    // EOF; exit 0, terminal restored.
    let mut child = spawn_exec(&pty, &d, "cat");
    let from = pty.text().len();
    pty.type_bytes(b"abc\r");
    pty.wait_text("abc\r\nabc\r\n", from);
    pty.type_bytes(b"\x04");
    assert_eq!(wait_exit(&mut child), Some(0));
    assert_eq!(pty.settings(), before);
}

/// What a scripted server saw of the upgrade request.
#[derive(Debug, Default, Clone)]
struct Seen {
    uri: String,
    authorization: Option<String>,
    protocols: Option<String>,
}

/// A one-connection WebSocket server in this process, for the endings a
/// real daemon does not produce on demand (an `error` frame mid-stream, a
/// cut connection, a non-kubegate answer). `script` drives the socket.
// tungstenite's handshake callback type returns its large error response.
#[allow(clippy::result_large_err)]
fn scripted_server(
    protocol: Option<&'static str>,
    script: impl FnOnce(&mut tungstenite::WebSocket<std::net::TcpStream>) + Send + 'static,
) -> (String, std::thread::JoinHandle<Seen>) {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
    let url = format!("http://{}", listener.local_addr().expect("addr"));
    let h = std::thread::spawn(move || {
        let (tcp, _) = listener.accept().expect("accept");
        tcp.set_read_timeout(Some(T)).expect("timeout");
        let mut seen = Seen::default();
        let cb = |req: &tungstenite::handshake::server::Request,
                  mut resp: tungstenite::handshake::server::Response| {
            seen.uri = req.uri().to_string();
            let h = |n: &str| {
                req.headers()
                    .get(n)
                    .and_then(|v| v.to_str().ok())
                    .map(str::to_string)
            };
            seen.authorization = h("authorization");
            seen.protocols = h("sec-websocket-protocol");
            if let Some(p) = protocol {
                resp.headers_mut()
                    .insert("Sec-WebSocket-Protocol", p.parse().expect("header"));
            }
            Ok(resp)
        };
        let mut ws = tungstenite::accept_hdr(tcp, cb).expect("upgrade");
        script(&mut ws);
        seen
    });
    (url, h)
}

fn text(s: &str) -> tungstenite::Message {
    tungstenite::Message::Text(s.into())
}

fn binary(t: u8, d: &[u8]) -> tungstenite::Message {
    let mut b = vec![t];
    b.extend_from_slice(d);
    tungstenite::Message::Binary(b.into())
}

const TARGET: &str = r#"{"type":"target","namespace":"demo","deployment":"hello","deploymentUid":"d","pod":"hello-1","podUid":"p","container":"main"}"#;

fn exec_at(url: &str, args: &[&str]) -> Command {
    let mut c = kg(&[
        "exec",
        "--server",
        url,
        "--token",
        "tok",
        "-w",
        "demo/demo-uid",
    ]);
    c.args(args);
    c
}

#[test]
fn exec_request_shape_and_stdin_frames() {
    let (url, server) = scripted_server(Some("kubegate.exec.v1"), |ws| {
        ws.send(text(TARGET)).expect("send");
        // Echo stdin frames as stdout until the EOF frame, then exit 9.
        let mut frames = 0;
        loop {
            match ws.read().expect("read") {
                tungstenite::Message::Binary(b) => {
                    assert_eq!(b[0], 0, "stdin frames start with 0");
                    assert!(b.len() - 1 <= 64 * 1024, "frame too big");
                    frames += 1;
                    ws.send(binary(1, &b[1..])).expect("send");
                }
                tungstenite::Message::Text(t) => {
                    let v: serde_json::Value = serde_json::from_str(t.as_str()).expect("JSON");
                    assert_eq!(v, serde_json::json!({"type": "stdin", "eof": true}));
                    break;
                }
                m => panic!("unexpected {m:?}"),
            }
        }
        assert!(frames >= 4, "100 KB in 32 KiB chunks: {frames} frames");
        ws.send(binary(2, b"bye\n")).expect("send");
        ws.send(text(r#"{"type":"exit","exitCode":9}"#))
            .expect("send");
        ws.close(None).expect("close");
        while ws.read().is_ok() {}
    });
    let data: Vec<u8> = (0..100_000u32).map(|i| (i % 251) as u8).collect();
    let out = run(
        exec_at(
            &url,
            &["-i", "-c", "main", "hello", "--", "sh", "-c", "a b&c"],
        ),
        Some(&data),
    );
    let seen = server.join().expect("server");
    assert_eq!(out.code, Some(9), "{}", out.stderr_str());
    assert!(out.stdout == data, "stdout differs");
    assert_eq!(out.stderr_str(), "bye\n");
    assert_eq!(
        seen.uri,
        "/v1/exec/interactive?project=demo&uid=demo-uid&deployment=hello&container=main&command=sh&command=-c&command=a%20b%26c&tty=false&stdin=true"
    );
    assert_eq!(seen.authorization.as_deref(), Some("Bearer tok"));
    assert_eq!(seen.protocols.as_deref(), Some("kubegate.exec.v1"));
}

#[test]
fn exec_endings_a_daemon_does_not_make_on_demand() {
    // An error frame after some output.
    let (url, server) = scripted_server(Some("kubegate.exec.v1"), |ws| {
        ws.send(text(TARGET)).expect("send");
        ws.send(binary(1, b"partial")).expect("send");
        ws.send(text(
            r#"{"type":"error","code":"EXEC_FAILED","message":"the pod went away"}"#,
        ))
        .expect("send");
        ws.close(None).expect("close");
        while ws.read().is_ok() {}
    });
    let out = run(exec_at(&url, &["hello", "--", "true"]), None);
    server.join().expect("server");
    assert_eq!(out.code, Some(255));
    assert_eq!(out.stdout_str(), "partial");
    assert_eq!(
        out.stderr_str(),
        "kubegate: EXEC_FAILED: the pod went away\n"
    );

    // The connection cut before any exit status: never exit 0.
    let (url, server) = scripted_server(Some("kubegate.exec.v1"), |ws| {
        ws.send(text(TARGET)).expect("send");
        ws.send(binary(1, b"out")).expect("send");
        ws.flush().expect("flush");
        let _ = ws.get_mut().shutdown(std::net::Shutdown::Both);
    });
    let out = run(exec_at(&url, &["hello", "--", "true"]), None);
    server.join().expect("server");
    assert_eq!(out.code, Some(255));
    assert_eq!(out.stdout_str(), "out");
    assert!(
        out.stderr_str().starts_with("kubegate: DISCONNECTED: "),
        "{}",
        out.stderr_str()
    );

    // A WebSocket server that is not a kubegate daemon.
    let (url, server) = scripted_server(None, |ws| {
        let _ = ws.read();
    });
    let out = run(exec_at(&url, &["hello", "--", "true"]), None);
    let _ = server.join();
    assert_eq!(out.code, Some(255));
    assert!(
        out.stderr_str().starts_with("kubegate: PROTOCOL: "),
        "{}",
        out.stderr_str()
    );
}

#[test]
fn exec_tty_frames_against_a_scripted_server() {
    let (url, server) = scripted_server(Some("kubegate.exec.v1"), |ws| {
        // The size is in the request (checked below), not a frame.
        ws.send(text(TARGET)).expect("send");
        ws.send(binary(1, b"ready\r\n")).expect("send");
        loop {
            match ws.read().expect("read") {
                tungstenite::Message::Binary(b) if b[1..].contains(&b'q') => break,
                tungstenite::Message::Binary(b) => ws.send(binary(1, &b[1..])).expect("send"),
                tungstenite::Message::Text(t) => {
                    let v: serde_json::Value = serde_json::from_str(t.as_str()).expect("JSON");
                    assert_eq!(v["type"], "resize", "{v}");
                    let line = format!("size={} {}\r\n", v["cols"], v["rows"]);
                    ws.send(binary(1, line.as_bytes())).expect("send");
                }
                m => panic!("unexpected {m:?}"),
            }
        }
        ws.send(text(r#"{"type":"exit","exitCode":2}"#))
            .expect("send");
        ws.close(None).expect("close");
        while ws.read().is_ok() {}
    });
    let pty = Pty::open(33, 101);
    let before = pty.settings();
    let mut child = Reap(
        exec_at(&url, &["-it", "hello", "--", "sh"])
            .stdin(pty.stdio())
            .stdout(pty.stdio())
            .stderr(pty.stdio())
            .spawn()
            .expect("spawn"),
    );
    let at = pty.wait_text("ready\r\n", 0);
    assert_ne!(pty.settings(), before, "not raw");
    // Raw: no local echo, bytes go as typed (Ctrl-C too, as a byte).
    pty.type_bytes(b"hi\x03");
    let at = pty.wait_text("hi\x03", at);
    pty.resize(40, 120);
    unsafe_kill(child.0.id(), 28); // SIGWINCH
    pty.wait_text("size=120 40\r\n", at);
    pty.type_bytes(b"q");
    assert_eq!(wait_exit(&mut child), Some(2));
    let seen = server.join().expect("server");
    assert!(
        seen.uri.ends_with("&tty=true&stdin=true&cols=101&rows=33"),
        "{}",
        seen.uri
    );
    assert_eq!(pty.settings(), before, "the terminal was not restored");
    assert!(!pty.text().contains("hi\x03hi"), "local echo in raw mode");
}

#[test]
fn https_daemon_with_a_private_ca() {
    let certs = kubegate::sim::tls::generate(&[], false).expect("certificates");
    let dir = temp_dir("cli-tls");
    let (ca, crt, key) = (
        dir.join("ca.pem"),
        dir.join("server.crt"),
        dir.join("server.key"),
    );
    std::fs::write(&ca, &certs.ca_pem).expect("write");
    std::fs::write(&crt, &certs.server_cert_pem).expect("write");
    std::fs::write(&key, &certs.server_key_pem).expect("write");
    let (crt_s, key_s) = (crt.display().to_string(), key.display().to_string());
    let d = DaemonProc::start_with(
        move |c| {
            let tls = c
                .replace(
                    "# tls_cert = \"tls/server.crt\"",
                    &format!("tls_cert = {crt_s:?}"),
                )
                .replace(
                    "# tls_key = \"tls/server.key\"",
                    &format!("tls_key = {key_s:?}"),
                );
            assert_ne!(tls, c, "the example's TLS lines changed");
            tls
        },
        "info",
    );
    assert!(d.url.starts_with("https://"), "{}", d.url);
    let ca_s = ca.display().to_string();

    let out = run(
        exec_cmd(&d, &["--ca-file", &ca_s, "hello", "--", "echo", "over tls"]),
        None,
    );
    assert_eq!(out.stdout_str(), "over tls\n", "{}", out.stderr_str());
    assert_eq!(out.code, Some(0));

    let mut c = kg(&["workspaces", "--server", &d.url, "--ca-file", &ca_s]);
    c.env("KUBEGATE_TOKEN", &d.token);
    let out = run(c, None);
    assert_eq!(out.code, Some(0), "{}", out.stderr_str());
    assert!(
        out.stdout_str().contains("demo/demo-uid"),
        "{}",
        out.stdout_str()
    );

    // Without the CA the certificate is not trusted: nothing is sent.
    let mut c = kg(&["workspaces", "--server", &d.url]);
    c.env("KUBEGATE_TOKEN", &d.token);
    let out = run(c, None);
    assert_eq!(out.code, Some(1));
    assert!(
        out.stderr_str().starts_with("kubegate: UNREACHABLE: "),
        "{}",
        out.stderr_str()
    );
    let _ = std::fs::remove_dir_all(&dir);
}

/// An argument that is not UTF-8 is a usage error (no command reads one),
/// told as the command it was given to tells its own: exec's `kubegate:
/// USAGE: …` with its synopsis and 255, workspaces' with its synopsis and
/// 2, the binary's usage and 2.
#[test]
fn an_argument_that_is_not_utf8_is_a_usage_error_not_a_panic() {
    use std::ffi::OsStr;
    use std::os::unix::ffi::OsStrExt;
    let bad = OsStr::from_bytes(b"x\xffy");
    let said = "\"x\\xFFy\" is not UTF-8 text";
    // The words before the bad one, the exit code, how stderr begins.
    let refused = |words: &[&str], code: i32, begins: String| {
        let mut c = kg(words);
        c.arg(bad);
        let out = run(c, None);
        assert_eq!(out.code, Some(code), "{}", out.stderr_str());
        assert!(
            out.stderr_str().starts_with(&begins),
            "{}",
            out.stderr_str()
        );
    };
    refused(
        &["exec", "--token", "t", "-w", "p/u", "d", "--"],
        255,
        format!("kubegate: USAGE: {said}\nusage: kubegate exec "),
    );
    refused(
        &["workspaces", "--output"],
        2,
        format!("kubegate: USAGE: {said}\nusage: kubegate workspaces"),
    );
    refused(&[], 2, format!("kubegate: {said}\n\nusage: kubegate "));
}
