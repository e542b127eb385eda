//! `kubegate sessions`, `kubegate attach` and `kubegate port-forward` end to
//! end: the real binary against a real `kubegate serve` and its embedded
//! sim (tests/common/daemon.rs). Waits are conditions with deadlines; every
//! child is reaped; a watchdog ends the test binary if anything hangs.

mod common;

use common::daemon::{DaemonProc, SseClient};
use common::pty::Pty;
use common::{run_with_timeout, temp_dir, terminate, unsafe_kill, wait_for, Output, KUBEGATE};
use serde_json::{json, Value};
use std::io::{Read, Write};
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::Duration;

const T: Duration = Duration::from_secs(60);

/// `kubegate ARGS` against `d` with its token (env) and a private state
/// folder for attach.
fn kg(d: &DaemonProc, state: &Path, args: &[&str]) -> Command {
    let mut c = Command::new(KUBEGATE);
    c.args(args)
        .env("KUBEGATE_SERVER", &d.url)
        .env("KUBEGATE_TOKEN", &d.token)
        .env("XDG_STATE_HOME", state)
        .env_remove("KUBEGATE_WORKSPACE");
    c
}

fn run(c: Command) -> Output {
    run_with_timeout(c, None, T)
}

fn until_status(sse: &mut SseClient, want: &str) {
    let seen = sse.until(|e| {
        e.event == "status"
            && matches!(e.data["status"].as_str(), Some(s) if s == want || s == "failed")
    });
    assert_eq!(
        seen.last().map(|e| e.data["status"].clone()),
        Some(json!(want)),
        "{seen:#?}"
    );
}

/// A child whose stdout and stderr are collected as they come; killed and
/// reaped on drop.
struct Live {
    child: Child,
    out: Arc<Mutex<Vec<u8>>>,
    err: Arc<Mutex<Vec<u8>>>,
}

fn collect(mut r: impl Read + Send + 'static) -> Arc<Mutex<Vec<u8>>> {
    let buf = Arc::new(Mutex::new(Vec::new()));
    let b = buf.clone();
    std::thread::spawn(move || {
        let mut chunk = [0u8; 4096];
        while let Ok(n) = r.read(&mut chunk) {
            if n == 0 {
                break;
            }
            if let Ok(mut b) = b.lock() {
                b.extend_from_slice(&chunk[..n]);
            }
        }
    });
    buf
}

impl Live {
    fn spawn(mut c: Command) -> Live {
        let mut child = c
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("spawn kubegate");
        let out = collect(child.stdout.take().expect("stdout"));
        let err = collect(child.stderr.take().expect("stderr"));
        Live { child, out, err }
    }

    fn text(b: &Arc<Mutex<Vec<u8>>>) -> String {
        String::from_utf8_lossy(&b.lock().map(|b| b.clone()).unwrap_or_default()).into_owned()
    }

    fn stdout(&self) -> String {
        Live::text(&self.out)
    }

    fn stderr(&self) -> String {
        Live::text(&self.err)
    }

    fn wait_stdout(&self, what: &str) {
        wait_for(&format!("{what:?} on stdout"), T, || {
            self.stdout().contains(what).then_some(())
        });
    }

    fn write(&mut self, b: &[u8]) {
        let w = self.child.stdin.as_mut().expect("stdin");
        w.write_all(b).expect("write stdin");
        w.flush().expect("flush stdin");
    }

    /// SIGTERM and the exit code.
    fn stop(&mut self) -> Option<i32> {
        terminate(&mut self.child, Duration::from_secs(20))
    }
}

impl Drop for Live {
    fn drop(&mut self) {
        if let Ok(None) = self.child.try_wait() {
            let _ = terminate(&mut self.child, Duration::from_secs(5));
        }
    }
}

/// HTTP on `$POD_IP:8080`: GET says where it is, POST echoes the body.
const WEB_PY: &str = r#"
import http.server, os
class App(http.server.BaseHTTPRequestHandler):
    def reply(self, body):
        self.send_response(200)
        self.send_header("Content-Length", str(len(body)))
        self.send_header("X-App", "yes")
        self.end_headers()
        self.wfile.write(body)
    def do_GET(self):
        self.reply(("hello from %s" % self.path).encode())
    def do_POST(self):
        n = int(self.headers.get("Content-Length", "0"))
        self.reply(b"posted:" + self.rfile.read(n))
    def log_message(self, *a): pass
print("serving", flush=True)
http.server.ThreadingHTTPServer((os.environ["POD_IP"], 8080), App).serve_forever()
"#;

/// One request over a fresh connection to `addr`; status and body.
fn http(addr: &str, raw: &str) -> (u16, String, String) {
    let mut s = std::net::TcpStream::connect(addr).expect("connect to the forwarder");
    s.set_read_timeout(Some(T)).expect("timeout");
    s.write_all(raw.as_bytes()).expect("write");
    let mut resp = Vec::new();
    let _ = s.read_to_end(&mut resp);
    let text = String::from_utf8_lossy(&resp).into_owned();
    let (head, body) = text.split_once("\r\n\r\n").unwrap_or((&text, ""));
    let status = head
        .split(' ')
        .nth(1)
        .and_then(|c| c.parse().ok())
        .unwrap_or(0);
    (status, head.to_string(), body.to_string())
}

/// `kubegate port-forward` on a free local port (`:8080`): kubectl's
/// lines, requests through a tunnel to the session's app (any TCP: the
/// app's own answers, its own connection handling), then a clean stop; the
/// old `SESSION PORT LOCAL` form still works, with a deprecation line.
fn check_port_forward(d: &DaemonProc, state: &Path, id: &str) {
    let mut pf = Live::spawn(kg(d, state, &["port-forward", id, ":8080"]));
    wait_for("the forwarding line", T, || {
        pf.stdout().contains('\n').then_some(())
    });
    let line = pf.stdout().lines().next().unwrap_or("").to_string();
    let port: u16 = line
        .strip_prefix("Forwarding from 127.0.0.1:")
        .and_then(|r| r.strip_suffix(" -> 8080"))
        .and_then(|p| p.parse().ok())
        .unwrap_or_else(|| panic!("{line:?} {}", pf.stderr()));
    let addr = format!("127.0.0.1:{port}");
    // The app may still be starting its server: ask until it answers.
    let (st, head, b) = wait_for("the app to answer through the forwarder", T, || {
        let r = http(
            &addr,
            "GET /x?y=1 HTTP/1.1\r\nHost: localhost\r\nAuthorization: Bearer app-only\r\n\r\n",
        );
        (r.0 == 200).then_some(r)
    });
    assert_eq!((st, b.as_str()), (200, "hello from /x?y=1"), "{head}");
    assert!(head.to_ascii_lowercase().contains("x-app: yes"), "{head}");
    let (st, _, b) = http(
        &addr,
        "POST /echo HTTP/1.1\r\nHost: localhost\r\nContent-Length: 5\r\n\r\nabcde",
    );
    assert_eq!((st, b.as_str()), (200, "posted:abcde"));
    wait_for("kubectl's Handling line", T, || {
        pf.stdout()
            .contains(&format!("Handling connection for {port}\n"))
            .then_some(())
    });
    assert_eq!(pf.stop(), Some(0), "{}", pf.stderr());

    // The old form: LOCAL as a third argument, told to use kubectl's.
    let mut pf = Live::spawn(kg(d, state, &["port-forward", id, "8080", "0"]));
    wait_for("the forwarding line", T, || {
        pf.stdout().contains('\n').then_some(())
    });
    wait_for("the deprecation line", T, || {
        pf.stderr()
            .contains("deprecated; write `port-forward SESSION 0:8080`")
            .then_some(())
    });
    assert_eq!(pf.stop(), Some(0), "{}", pf.stderr());
}

#[test]
fn sessions_list_stop_resume_port_forward_and_bad_input() {
    let _wd = common::bench::watchdog("cli_sessions", 400);
    let d = DaemonProc::start();
    let state = temp_dir("cli-sessions-state");
    let body = json!({
        "apps": [{"name": "web", "entry": "web.py", "command": ["python3", "web.py"],
                  "io": "streams", "ports": [{"port": 8080}]}],
        "bundle": {"files": [{"path": "web.py", "content": WEB_PY}]}
    });
    let (id, mut sse) = d.create_session(&body);
    until_status(&mut sse, "running");

    // The table, then the JSON.
    let out = run(kg(&d, &state, &["sessions"]));
    assert_eq!(out.code, Some(0), "{}", out.stderr_str());
    let lines: Vec<String> = out.stdout_str().lines().map(str::to_string).collect();
    assert_eq!(
        lines[0].split_whitespace().collect::<Vec<_>>(),
        ["ID", "STATUS", "APPS", "CREATED", "ENDPOINTS"],
        "{lines:?}"
    );
    let row: Vec<&str> = lines
        .iter()
        .find(|l| l.starts_with(&id))
        .unwrap_or_else(|| panic!("no row for {id}: {lines:?}"))
        .split_whitespace()
        .collect();
    assert_eq!(&row[..3], [id.as_str(), "running", "web"], "{row:?}");
    let out = run(kg(&d, &state, &["sessions", "list", "-o", "json"]));
    assert_eq!(out.code, Some(0), "{}", out.stderr_str());
    let v: Value = serde_json::from_slice(&out.stdout).expect("JSON output");
    assert_eq!(v["sessions"][0]["sessionId"], id.as_str());
    assert_eq!(v["sessions"][0]["apps"][0]["name"], "web");

    // port-forward: a free local port, requests through the daemon.
    check_port_forward(&d, &state, &id);

    // Suspend through the API; `sessions resume` brings it back.
    let (st, v) = d.json(
        "POST",
        &format!("/v1/sessions/{id}/suspend"),
        Some(&json!({})),
    );
    assert_eq!(st, 202, "{v}");
    until_status(&mut sse, "suspended");
    let out = run(kg(&d, &state, &["sessions"]));
    assert!(
        out.stdout_str()
            .lines()
            .any(|l| l.starts_with(&id) && l.contains(" suspended ")),
        "{}",
        out.stdout_str()
    );
    let out = run(kg(&d, &state, &["sessions", "resume", &id]));
    assert_eq!(out.code, Some(0), "{}", out.stderr_str());
    assert!(out.stdout_str().contains(&id), "{}", out.stdout_str());
    until_status(&mut sse, "running");
    assert_eq!(d.session_pods(&id).len(), 1);
    // With its files.
    let (st, v) = d.json(
        "GET",
        &format!("/v1/sessions/{id}/workspace/file?path=web.py"),
        None,
    );
    assert_eq!((st, v["content"].as_str()), (200, Some(WEB_PY)), "{v}");
    // Resuming a running session: the daemon's code, exit 1.
    let out = run(kg(&d, &state, &["sessions", "resume", &id]));
    assert_eq!(out.code, Some(1));
    assert!(
        out.stderr_str().starts_with("kubegate: NOT_SUSPENDED: "),
        "{}",
        out.stderr_str()
    );

    // Stop: no pod left, and the session is listed as stopped or gone.
    let out = run(kg(&d, &state, &["sessions", "stop", &id]));
    assert_eq!(out.code, Some(0), "{}", out.stderr_str());
    until_status(&mut sse, "stopped");
    wait_for("the session pod to be gone", T, || {
        d.session_pods(&id).is_empty().then_some(())
    });

    // Bad input.
    for args in [
        &["sessions", "stop", "abcdefghijkl"][..],
        &["sessions", "resume", "abcdefghijkl"],
        &["port-forward", "abcdefghijkl", "8080"],
    ] {
        let out = run(kg(&d, &state, args));
        assert_eq!(out.code, Some(1), "{args:?}");
        assert!(
            out.stderr_str().starts_with("kubegate: NOT_FOUND: "),
            "{args:?}: {}",
            out.stderr_str()
        );
    }
    let out = run(kg(&d, &state, &["attach", "abcdefghijkl", "web"]));
    assert_eq!(out.code, Some(255));
    assert!(
        out.stderr_str().starts_with("kubegate: NOT_FOUND: "),
        "{}",
        out.stderr_str()
    );
    for (args, code) in [
        (&["sessions", "stop"][..], 2),
        (&["sessions", "frob"], 2),
        (&["port-forward", &id], 2),
        (&["port-forward", &id, "http"], 2),
        (&["port-forward", &id, "80:"], 2),
        (&["attach", &id], 255),
    ] {
        let out = run(kg(&d, &state, args));
        assert_eq!(out.code, Some(code), "{args:?}");
        assert!(
            out.stderr_str().starts_with("kubegate: USAGE: "),
            "{args:?}: {}",
            out.stderr_str()
        );
    }
    for cmd in ["sessions", "attach", "port-forward"] {
        let out = run(kg(&d, &state, &[cmd, "--help"]));
        assert_eq!(out.code, Some(0));
        assert!(out.stdout_str().starts_with("usage: kubegate "), "{cmd}");
    }
    let _ = std::fs::remove_dir_all(&state);
}

#[test]
fn attach_replays_what_was_missed_forwards_stdin_and_drives_a_terminal() {
    let _wd = common::bench::watchdog("cli_sessions", 400);
    let d = DaemonProc::start();
    let state = temp_dir("cli-attach-state");
    let body = json!({
        "apps": [
            {"name": "echo", "entry": "echo.sh", "command": ["sh", "echo.sh"], "io": "streams"},
            {"name": "term", "entry": "t.sh", "command": ["sh", "t.sh"], "io": "tty"}
        ],
        "bundle": {"files": [
            {"path": "echo.sh",
             "content": "echo ready; while read l; do echo \"out:$l\"; echo \"err:$l\" >&2; done"},
            {"path": "t.sh", "content": "while read l; do echo \"term:$l\"; stty size; done"}
        ]}
    });
    let (id, mut sse) = d.create_session(&body);
    until_status(&mut sse, "running");

    // Over pipes: everything buffered so far, then stdin reaches the app;
    // stderr frames go to our stderr. SIGTERM detaches: exit 0.
    let mut a1 = Live::spawn(kg(&d, &state, &["attach", &id, "echo"]));
    a1.wait_stdout("ready\n");
    a1.write(b"one\n");
    a1.wait_stdout("out:one\n");
    wait_for("err:one on stderr", T, || {
        a1.stderr().contains("err:one\n").then_some(())
    });
    assert_eq!(a1.stop(), Some(0), "{}", a1.stderr());
    assert!(a1.stderr().contains("detached"), "{}", a1.stderr());
    let state_file = state.join("kubegate").join("attach.json");
    {
        use std::os::unix::fs::PermissionsExt;
        let mode = std::fs::metadata(&state_file)
            .expect("the state file")
            .permissions()
            .mode();
        assert_eq!(mode & 0o777, 0o600);
    }

    // Output while nobody is attached (stdin through the socket directly).
    {
        use tungstenite::Message;
        let auth = format!("Bearer {}", d.token);
        let (mut ws, _) = d
            .ws(
                &format!("/v1/sessions/{id}/io?app=echo&lastSeq=1000000"),
                &[("Authorization", &auth)],
                &[kubegate::session::io::wire::SUBPROTOCOL],
            )
            .unwrap_or_else(|(st, b)| panic!("{st} {}", String::from_utf8_lossy(&b)));
        ws.send(Message::Binary(b"two\n".to_vec().into()))
            .expect("send");
        let _ = ws.close(None);
    }
    // A second attach shows only what came after the first one left.
    let mut a2 = Live::spawn(kg(&d, &state, &["attach", &id, "echo"]));
    a2.wait_stdout("out:two\n");
    a2.write(b"three\n");
    a2.wait_stdout("out:three\n");
    assert_eq!(a2.stop(), Some(0), "{}", a2.stderr());
    let shown = a2.stdout();
    assert!(
        !shown.contains("ready") && !shown.contains("out:one"),
        "the second attach replayed what the first showed: {shown:?}"
    );
    // --from-start: everything still buffered.
    let mut a3 = Live::spawn(kg(&d, &state, &["attach", "--from-start", &id, "echo"]));
    a3.wait_stdout("out:three\n");
    assert_eq!(a3.stop(), Some(0), "{}", a3.stderr());
    let all = a3.stdout();
    assert!(
        all.starts_with("ready\nout:one\n") && all.contains("out:two\n"),
        "{all:?}"
    );

    // A tty app through a pty: raw mode, the size follows SIGWINCH, Ctrl-]
    // detaches and restores the terminal.
    let pty = Pty::open(33, 101);
    let before = pty.settings();
    let mut child = kg(&d, &state, &["attach", &id, "term"]);
    child
        .stdin(pty.stdio())
        .stdout(pty.stdio())
        .stderr(pty.stdio());
    let child = child.spawn().expect("spawn attach on a pty");
    let mut child = Live {
        child,
        out: Arc::new(Mutex::new(Vec::new())),
        err: Arc::new(Mutex::new(Vec::new())),
    };
    let at = pty.wait_text("Ctrl-] detaches", 0);
    wait_for("raw mode", T, || (pty.settings() != before).then_some(()));
    // The first size is sent at connect and races the first read: type
    // lines until it shows.
    let mut at = at;
    wait_for("the size on the app's terminal", T, || {
        pty.type_bytes(b"x\r");
        at = pty.wait_text("term:x\r\n", at);
        let next = pty.wait_text("\r\n", at);
        let line = pty.text()[at..next].to_string();
        at = next;
        (line == "33 101\r\n").then_some(())
    });
    pty.resize(40, 120);
    unsafe_kill(child.child.id(), 28); // SIGWINCH
    wait_for("the new size on the app's terminal", T, || {
        pty.type_bytes(b"y\r");
        at = pty.wait_text("term:y\r\n", at);
        let next = pty.wait_text("\r\n", at);
        let line = pty.text()[at..next].to_string();
        at = next;
        (line == "40 120\r\n").then_some(())
    });
    pty.type_bytes(b"\x1d");
    let code = wait_for("attach to exit after Ctrl-]", T, || {
        child.child.try_wait().ok().flatten().map(|s| s.code())
    });
    assert_eq!(code, Some(0), "{}", pty.text());
    pty.wait_text("detached from session", at);
    assert_eq!(pty.settings(), before, "the terminal was not restored");

    // The session ends under an attach: its status is printed, exit 1.
    let mut a4 = Live::spawn(kg(&d, &state, &["attach", &id, "echo"]));
    wait_for("the attach to be connected", T, || {
        a4.write(b"four\n");
        a4.stdout().contains("out:four\n").then_some(())
    });
    let (st, _) = d.request(
        "DELETE",
        &format!("/v1/sessions/{id}"),
        Some(&d.token),
        None,
    );
    assert_eq!(st, 204);
    let code = wait_for("attach to exit when the session ends", T, || {
        a4.child.try_wait().ok().flatten().map(|s| s.code())
    });
    assert_eq!(code, Some(1), "{}", a4.stderr());
    assert!(
        a4.stderr()
            .contains(&format!("kubegate: session {id} ended: st")),
        "{}",
        a4.stderr()
    );
    let _ = std::fs::remove_dir_all(&state);
}
