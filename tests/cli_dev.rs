//! `kubegate dev` end to end (issue 6 step 4): the real binary on a pty
//! against a real `kubegate serve` and its embedded sim
//! (tests/common/daemon.rs), running `examples/hello-two-apps` (a copy):
//! both apps' output with their prefixes, a local edit synced and
//! restarting the apps (under the app runner, enabled in the test's
//! config), typed input reaching the stdin app, `kubegate port-forward`
//! reaching the HTTP server, Ctrl-C stopping the session with no pod left;
//! a second Ctrl-C suspending instead; bad input starting nothing. Waits
//! are conditions with deadlines; a watchdog aborts a hung test.

mod common;

use common::bench::watchdog;
use common::daemon::DaemonProc;
use common::pty::{plain, Pty};
use common::{run_with_timeout, temp_dir, terminate, unsafe_kill, wait_for, KUBEGATE};
use serde_json::Value;
use std::io::{Read, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

const T: Duration = Duration::from_secs(60);
const EXAMPLE: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/examples/hello-two-apps");

/// `kubegate ARGS` against `d` with its token.
fn kg(d: &DaemonProc, args: &[&str]) -> Command {
    let mut c = Command::new(KUBEGATE);
    c.args(args)
        .env("KUBEGATE_SERVER", &d.url)
        .env("KUBEGATE_TOKEN", &d.token)
        .env_remove("NO_COLOR")
        .env("TERM", "xterm");
    c
}

/// A copy of the example (the test edits its files).
fn copy_example() -> PathBuf {
    let dir = temp_dir("dev-example");
    for e in std::fs::read_dir(EXAMPLE).expect("the example folder") {
        let e = e.expect("entry");
        std::fs::copy(e.path(), dir.join(e.file_name())).expect("copy");
    }
    // The README invites a newcomer to edit the example's message.txt: the
    // test brings its own, so an edited example does not fail the suite.
    std::fs::write(dir.join("message.txt"), format!("{MESSAGE}\n")).expect("message.txt");
    dir
}

/// The first line of the copy's message.txt (the apps print it).
const MESSAGE: &str = "the test's own message";

/// `kubegate dev` on a pty; killed and reaped on drop.
struct Dev {
    child: Child,
    pty: Pty,
}

impl Dev {
    fn spawn(d: &DaemonProc, args: &[&str]) -> Dev {
        let pty = Pty::open(40, 160);
        let mut c = kg(d, &["dev"]);
        c.args(args)
            .stdin(pty.stdio())
            .stdout(pty.stdio())
            .stderr(pty.stdio());
        let child = c.spawn().expect("spawn kubegate dev");
        Dev { child, pty }
    }

    /// What the terminal shows, without colours and carriage returns.
    fn text(&self) -> String {
        plain(&self.pty.text())
    }

    /// Waits until the plain text after byte `from` holds `what`; the
    /// offset just past it.
    fn wait(&self, what: &str, from: usize) -> usize {
        wait_for(&format!("{what:?} on kubegate dev's terminal"), T, || {
            let t = self.text();
            t.get(from..)
                .and_then(|rest| rest.find(what))
                .map(|i| from + i + what.len())
        })
    }

    /// The session id from the first line.
    fn session_id(&self) -> String {
        let at = self.wait(" starting: ", 0);
        let t = self.text();
        let line = &t[..at];
        line.rsplit("session ")
            .next()
            .and_then(|s| s.split_whitespace().next())
            .expect("the session id")
            .to_string()
    }

    fn exit_code(&mut self) -> Option<i32> {
        wait_for("kubegate dev to exit", T, || {
            self.child.try_wait().ok().flatten().map(|s| s.code())
        })
    }
}

impl Drop for Dev {
    fn drop(&mut self) {
        if let Ok(None) = self.child.try_wait() {
            let _ = terminate(&mut self.child, Duration::from_secs(10));
        }
    }
}

/// One request over a fresh connection; status and body.
fn http_get(addr: &str, path: &str) -> (u16, String) {
    let mut s = std::net::TcpStream::connect(addr).expect("connect to the forwarder");
    s.set_read_timeout(Some(T)).expect("timeout");
    write!(s, "GET {path} HTTP/1.1\r\nHost: localhost\r\n\r\n").expect("write");
    let mut resp = Vec::new();
    let _ = s.read_to_end(&mut resp);
    let text = String::from_utf8_lossy(&resp).into_owned();
    let (head, body) = text.split_once("\r\n\r\n").unwrap_or((&text, ""));
    let status = head
        .split(' ')
        .nth(1)
        .and_then(|c| c.parse().ok())
        .unwrap_or(0);
    (status, body.to_string())
}

/// `kubegate port-forward ID :PORT`: the child and its local address.
fn port_forward(d: &DaemonProc, id: &str, port: &str) -> (Child, String) {
    let mut child = kg(d, &["port-forward", id, &format!(":{port}")])
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .expect("spawn port-forward");
    let line = common::first_line(&mut child, T).expect("the forwarding line");
    let port: u16 = line
        .strip_prefix("Forwarding from 127.0.0.1:")
        .and_then(|r| r.split_whitespace().next())
        .and_then(|p| p.parse().ok())
        .unwrap_or_else(|| panic!("unexpected line {line:?}"));
    (child, format!("127.0.0.1:{port}"))
}

fn session_status(d: &DaemonProc, id: &str) -> String {
    let (st, v) = d.json("GET", &format!("/v1/sessions/{id}"), None);
    assert_eq!(st, 200, "{v}");
    v["status"].as_str().unwrap_or("").to_string()
}

#[test]
fn dev_runs_the_example_syncs_edits_forwards_input_and_stops_on_ctrl_c() {
    let _wd = watchdog("cli_dev: the example", 300);
    // Restarts on edits need the runner: the example config keeps the
    // default (on).
    let d = DaemonProc::start_with(
        |c| {
            assert!(
                c.contains("# app_runner = true"),
                "the example config's app_runner line changed"
            );
            c
        },
        "info",
    );
    let dir = copy_example();
    let mut dev = Dev::spawn(&d, &[dir.to_str().expect("utf-8 path")]);
    let id = dev.session_id();

    // Both apps, prefixed and aligned; in colour on a terminal.
    let at = dev.wait(&format!("session {id} running"), 0);
    dev.wait(
        &format!("web: port 8080/tcp: kubegate port-forward {id} 8080"),
        0,
    );
    dev.wait("web    | serving on http://", at);
    dev.wait(&format!("worker | worker started (message: {MESSAGE}"), at);
    dev.wait(&format!("worker | tick 1: {MESSAGE}"), at);
    let raw = dev.pty.text();
    assert!(raw.contains("\x1b[36mweb    |\x1b[0m "), "{raw:?}");
    assert!(raw.contains("\x1b[33mworker |\x1b[0m "), "{raw:?}");
    assert_eq!(session_status(&d, &id), "running");

    // The HTTP server through port-forward.
    let (mut pf, addr) = port_forward(&d, &id, "8080");
    let (st, body) = wait_for("the web app through port-forward", T, || {
        let r = http_get(&addr, "/");
        (r.0 == 200).then_some(r)
    });
    assert_eq!(st, 200);
    assert!(
        body.starts_with(&format!("hello from web: {MESSAGE}")),
        "{body:?}"
    );

    // Typed lines reach the stdin app (the first tty app: worker).
    let at = dev.text().len();
    dev.pty.type_bytes(b"ping\r");
    dev.wait("worker | you typed: ping", at);

    // A local edit: synced, both apps restarted with the new text.
    let at = dev.text().len();
    std::fs::write(dir.join("message.txt"), "edited by the test\n").expect("edit");
    dev.wait("kubegate: synced message.txt", at);
    dev.wait("kubegate: web: run 2 started", at);
    dev.wait("web    | serving on http://", at);
    dev.wait("(message: edited by the test)", at);
    dev.wait("worker | worker started (message: edited by the test)", at);
    let (st, body) = wait_for("the edited answer", T, || {
        let r = http_get(&addr, "/");
        (r.0 == 200 && r.1.contains("edited")).then_some(r)
    });
    assert_eq!(
        (st, body.as_str()),
        (200, "hello from web: edited by the test\n")
    );
    let (st, v) = d.json(
        "GET",
        &format!("/v1/sessions/{id}/workspace/file?path=message.txt"),
        None,
    );
    assert_eq!(
        (st, v["content"].as_str()),
        (200, Some("edited by the test\n"))
    );

    // A new file, then its removal; an ignored file is not synced.
    let at = dev.text().len();
    std::fs::write(dir.join("debug.log"), "ignored").expect("write");
    std::fs::write(dir.join("extra.txt"), "x").expect("write");
    dev.wait("kubegate: synced extra.txt", at);
    std::fs::remove_file(dir.join("extra.txt")).expect("remove");
    dev.wait("kubegate: deleted extra.txt", at);
    let (_, v) = d.json("GET", &format!("/v1/sessions/{id}/workspace"), None);
    let files: Vec<&str> = v["files"]
        .as_array()
        .expect("files")
        .iter()
        .filter_map(|f| f["path"].as_str())
        .collect();
    assert!(
        !files.contains(&"extra.txt") && !files.contains(&"debug.log"),
        "{files:?}"
    );
    assert!(!dev.text().contains("debug.log"), "{}", dev.text());
    assert_eq!(terminate(&mut pf, Duration::from_secs(20)), Some(0));

    // Ctrl-C: stopped, exit 0, no pod left.
    let at = dev.text().len();
    unsafe_kill(dev.child.id(), 2);
    dev.wait("Ctrl-C again within 1 s suspends it instead", at);
    assert_eq!(dev.exit_code(), Some(0), "{}", dev.text());
    dev.wait(&format!("kubegate: session {id} stopped"), at);
    assert_eq!(session_status(&d, &id), "stopped");
    wait_for("the session pod to be gone", T, || {
        d.session_pods(&id).is_empty().then_some(())
    });
    let _ = std::fs::remove_dir_all(&dir);
}

/// Runs `kubegate dev ARGS` to its end over pipes: exit code and stderr.
fn dev_fails(d: &DaemonProc, args: &[&str]) -> (Option<i32>, String) {
    let mut c = kg(d, &["dev"]);
    c.args(args);
    let out = run_with_timeout(c, None, T);
    (out.code, out.stderr_str())
}

fn no_sessions(d: &DaemonProc) {
    let (st, v) = d.json("GET", "/v1/sessions", None);
    assert_eq!(st, 200, "{v}");
    assert_eq!(
        v["sessions"],
        Value::Array(vec![]),
        "a session was created: {v}"
    );
}

fn write_project(dir: &Path, manifest: &str, files: &[(&str, &str)]) {
    std::fs::write(dir.join("kubegate.toml"), manifest).expect("manifest");
    for (p, c) in files {
        std::fs::write(dir.join(p), c).expect("file");
    }
}

const ONE_APP: &str = "[[app]]\nname = \"app\"\nentry = \"app.sh\"\ncommand = [\"sh\", \"app.sh\"]\nio = \"streams\"\n";

#[test]
fn dev_bad_input_starts_nothing_and_a_second_ctrl_c_suspends() {
    let _wd = watchdog("cli_dev: bad input and suspend", 300);
    let d = DaemonProc::start();

    // A folder without a manifest.
    let empty = temp_dir("dev-empty");
    let (code, err) = dev_fails(&d, &[empty.to_str().expect("path")]);
    assert_eq!(code, Some(2), "{err}");
    assert!(err.starts_with("kubegate: MANIFEST: "), "{err}");
    assert!(err.contains("kubegate.toml: not found"), "{err}");

    // A malformed manifest; one that names no entry; an unknown key.
    for (manifest, needle) in [
        ("[[app]\nname = \"x\"\n", "TOML parse error"),
        ("[[app]]\nname = \"x\"\n", "missing field `entry`"),
        (
            "[[app]]\nname = \"x\"\nentry = \"a\"\nport = 80\n",
            "unknown field `port`",
        ),
        (
            "[[app]]\nname = \"Bad_Name\"\nentry = \"a\"\n",
            "INVALID_APP_NAME",
        ),
    ] {
        let dir = temp_dir("dev-malformed");
        write_project(&dir, manifest, &[("a", "x")]);
        let (code, err) = dev_fails(&d, &[dir.to_str().expect("path")]);
        assert_eq!(code, Some(2), "{manifest:?}: {err}");
        assert!(
            err.starts_with("kubegate: MANIFEST: "),
            "{manifest:?}: {err}"
        );
        assert!(err.contains(needle), "{manifest:?}: {err}");
    }

    // An entry that is not in the folder.
    let dir = temp_dir("dev-no-entry");
    write_project(&dir, ONE_APP, &[]);
    let (code, err) = dev_fails(&d, &[dir.to_str().expect("path")]);
    assert_eq!(code, Some(2), "{err}");
    assert!(err.contains("\"app.sh\" is not a file"), "{err}");

    // An unknown app for --stdin.
    let proj = temp_dir("dev-suspend");
    write_project(
        &proj,
        ONE_APP,
        &[("app.sh", "echo up; while read l; do echo \"got:$l\"; done")],
    );
    let (code, err) = dev_fails(&d, &["--stdin", "nope", proj.to_str().expect("path")]);
    assert_eq!(code, Some(2), "{err}");
    assert!(err.starts_with("kubegate: USAGE: "), "{err}");
    assert!(err.contains("no such app (its apps: app)"), "{err}");

    // A folder over the bundle limit (64 MiB): sparse files, judged by
    // their sizes before anything is read or sent.
    let big = temp_dir("dev-big");
    write_project(&big, ONE_APP, &[("app.sh", "echo")]);
    for i in 0..9 {
        let f = std::fs::File::create(big.join(format!("blob{i}.bin"))).expect("create");
        f.set_len(15 << 19).expect("sparse 7.5 MiB");
    }
    let (code, err) = dev_fails(&d, &[big.to_str().expect("path")]);
    assert_eq!(code, Some(1), "{err}");
    assert!(err.starts_with("kubegate: INVALID_BUNDLE: "), "{err}");
    assert!(err.contains("more than the 67108864"), "{err}");
    no_sessions(&d);

    // A running session; a change made just before Ctrl-C is kept; the
    // second Ctrl-C within the window suspends it.
    let mut dev = Dev::spawn(&d, &[proj.to_str().expect("path")]);
    let id = dev.session_id();
    dev.wait("app | up", 0);
    let at = dev.text().len();
    dev.pty.type_bytes(b"hello\r");
    dev.wait("app | got:hello", at);
    std::fs::write(proj.join("notes.txt"), "kept across the suspend").expect("write");
    dev.wait("kubegate: synced notes.txt", at);
    unsafe_kill(dev.child.id(), 2);
    dev.wait("Ctrl-C again within 1 s", at);
    unsafe_kill(dev.child.id(), 2);
    assert_eq!(dev.exit_code(), Some(0), "{}", dev.text());
    dev.wait(
        &format!("session {id} suspended; resume it with: kubegate sessions resume {id}"),
        at,
    );
    assert_eq!(session_status(&d, &id), "suspended");
    wait_for("the suspended session's pod to be gone", T, || {
        d.session_pods(&id).is_empty().then_some(())
    });

    // Resumed, with its files.
    let out = run_with_timeout(kg(&d, &["sessions", "resume", &id]), None, T);
    assert_eq!(out.code, Some(0), "{}", out.stderr_str());
    wait_for("the session to run again", T, || {
        (session_status(&d, &id) == "running").then_some(())
    });
    let (st, v) = d.json(
        "GET",
        &format!("/v1/sessions/{id}/workspace/file?path=notes.txt"),
        None,
    );
    assert_eq!(
        (st, v["content"].as_str()),
        (200, Some("kept across the suspend"))
    );
    for p in [empty, dir, proj, big] {
        let _ = std::fs::remove_dir_all(p);
    }
}
