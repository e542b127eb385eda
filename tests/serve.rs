//! `kubegate check-config` and `kubegate serve` as real processes over real
//! sockets: config errors name the key; `serve` on the embedded sim prints
//! its listening line, answers the health routes, writes the sim's
//! kubeconfig (0600), creates the labelled demo Deployment that kubectl sees
//! become available, and on SIGTERM exits 0 leaving no process behind.
//!
//! Small helpers are copied here rather than shared through tests/common.
//! Conditions are waited on with deadlines and polling; a watchdog kills a
//! hung daemon.

mod common;

use common::{processes_under, temp_dir, wait_for};
use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

const KUBEGATE: &str = env!("CARGO_BIN_EXE_kubegate");
const EXAMPLE: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/config.example.toml");

struct Out {
    code: Option<i32>,
    stdout: String,
    stderr: String,
}

/// Runs a command to completion; kills it and panics after `timeout`.
fn run(mut c: Command, timeout: Duration) -> Out {
    c.stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    let mut child = c.spawn().expect("spawn");
    let mut so = child.stdout.take().unwrap();
    let mut se = child.stderr.take().unwrap();
    let ro = std::thread::spawn(move || {
        let mut s = String::new();
        let _ = so.read_to_string(&mut s);
        s
    });
    let re = std::thread::spawn(move || {
        let mut s = String::new();
        let _ = se.read_to_string(&mut s);
        s
    });
    let deadline = Instant::now() + timeout;
    let status = loop {
        if let Ok(Some(st)) = child.try_wait() {
            break st;
        }
        if Instant::now() >= deadline {
            let _ = child.kill();
            let _ = child.wait();
            panic!("{c:?} timed out after {timeout:?}");
        }
        std::thread::sleep(Duration::from_millis(5));
    };
    Out {
        code: status.code(),
        stdout: ro.join().unwrap(),
        stderr: re.join().unwrap(),
    }
}

fn check_config(path: &Path) -> Out {
    let mut c = Command::new(KUBEGATE);
    c.arg("check-config").arg("--config").arg(path);
    run(c, Duration::from_secs(30))
}

/// Writes `text` to a fresh config file and checks it must fail naming `key`.
fn assert_rejected(text: &str, key: &str) {
    let dir = temp_dir("bad");
    let path = dir.join("kubegate.toml");
    std::fs::write(&path, text).unwrap();
    let out = check_config(&path);
    assert_eq!(out.code, Some(2), "{text}\nstderr: {}", out.stderr);
    let want = format!("{}: {key}: ", path.display());
    assert!(
        out.stderr.starts_with(&want),
        "expected {want:?}..., got {:?}",
        out.stderr
    );
    assert!(out.stdout.is_empty(), "stdout: {:?}", out.stdout);
}

/// `example` with `from` replaced; `from` must be there.
fn edit(example: &str, from: &str, to: &str) -> String {
    assert!(example.contains(from), "{from:?} is not in the example");
    example.replace(from, to)
}

#[test]
fn check_config_accepts_the_example() {
    let out = check_config(Path::new(EXAMPLE));
    assert_eq!(out.code, Some(0), "stderr: {}", out.stderr);
    assert_eq!(out.stdout, "config ok\n");
}

#[test]
fn check_config_names_the_key_at_fault() {
    let example = std::fs::read_to_string(EXAMPLE).unwrap();
    // An unknown key.
    assert_rejected(
        &edit(
            &example,
            "\nmode = \"sim\"\n",
            "\nmode = \"sim\"\nmanaged = \"x\"\n",
        ),
        "cluster.managed",
    );
    // A listen address that is no IP:PORT.
    assert_rejected(
        &edit(
            &example,
            "listen = \"127.0.0.1:7443\"",
            "listen = \"localhost:7443\"",
        ),
        "server.listen",
    );
    // A workspace that is no "project/uid".
    assert_rejected(
        &edit(
            &example,
            "[\"demo/demo-uid\"]",
            "[\"demo/demo-uid\", \"Not A Project/uid\"]",
        ),
        "principal[0].workspaces[1]",
    );
    // A clear-text token instead of its digest; the token is not echoed.
    let clear = edit(
        &example,
        "token_sha256 = \"d53fa4ceb5e3b6f776103045182f6b4fbdfdea415d83039a16017381c567f997\"",
        "token = \"kubegate-demo-token\"",
    );
    assert_rejected(&clear, "principal[0].token");
    let dir = temp_dir("clear");
    std::fs::write(dir.join("k.toml"), &clear).unwrap();
    let out = check_config(&dir.join("k.toml"));
    assert!(
        !out.stderr.contains("kubegate-demo-token"),
        "{}",
        out.stderr
    );
}

#[test]
fn check_config_usage_errors_exit_2() {
    let mut c = Command::new(KUBEGATE);
    c.arg("check-config");
    let out = run(c, Duration::from_secs(30));
    assert_eq!(out.code, Some(2));
    assert!(out.stderr.contains("--config"), "{}", out.stderr);
    let out = check_config(Path::new("/nonexistent/kubegate.toml"));
    assert_eq!(out.code, Some(2));
    assert!(
        out.stderr.starts_with("/nonexistent/kubegate.toml: "),
        "{}",
        out.stderr
    );
}

/// One HTTP/1.1 request with `Connection: close`; returns status and body.
fn http_get(url: &str, path: &str) -> (u16, String) {
    let addr = url.strip_prefix("http://").expect("http URL");
    let mut s = TcpStream::connect(addr).expect("connect");
    s.set_read_timeout(Some(Duration::from_secs(30))).unwrap();
    write!(
        s,
        "GET {path} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n\r\n"
    )
    .unwrap();
    let mut resp = String::new();
    s.read_to_string(&mut resp).expect("read response");
    let (head, body) = resp.split_once("\r\n\r\n").expect("head and body");
    let status = head
        .split(' ')
        .nth(1)
        .and_then(|c| c.parse().ok())
        .expect("status code");
    (status, body.to_string())
}

/// A running `kubegate serve`; a watchdog SIGKILLs it if the test hangs,
/// and `Drop` kills it if a test fails early.
struct Daemon {
    child: Child,
    url: String,
    /// Everything the daemon printed to stdout after its first line.
    rest: std::sync::mpsc::Receiver<String>,
    /// Its stderr (the log), beside the config.
    log: PathBuf,
    _watchdog: crossbeam_channel::Sender<()>,
}

impl Daemon {
    fn start(config: &Path) -> Daemon {
        let log = config.with_file_name("daemon.log");
        let log_file = std::fs::File::create(&log).expect("create the log");
        let mut child = Command::new(KUBEGATE)
            .arg("serve")
            .arg("--config")
            .arg(config)
            .env("RUST_LOG", "warn")
            .env_remove("NOTIFY_SOCKET")
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::from(log_file))
            .spawn()
            .expect("spawn kubegate serve");
        let pid = child.id();
        let (cancel, cancelled) = crossbeam_channel::bounded::<()>(0);
        std::thread::spawn(move || {
            if let Err(crossbeam_channel::RecvTimeoutError::Timeout) =
                cancelled.recv_timeout(Duration::from_secs(240))
            {
                eprintln!("watchdog: killing kubegate serve {pid}");
                let _ = Command::new("kill").arg("-9").arg(pid.to_string()).status();
            }
        });
        let stdout = child.stdout.take().unwrap();
        let (first_tx, first_rx) = std::sync::mpsc::channel();
        let (rest_tx, rest) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            let mut r = BufReader::new(stdout);
            let mut first = String::new();
            let _ = r.read_line(&mut first);
            let _ = first_tx.send(first);
            let mut tail = String::new();
            let _ = r.read_to_string(&mut tail);
            let _ = rest_tx.send(tail);
        });
        let line = match first_rx.recv_timeout(Duration::from_secs(60)) {
            Ok(l) => l,
            Err(_) => {
                let _ = child.kill();
                panic!("kubegate serve printed no line within 60 s");
            }
        };
        let url = line
            .strip_suffix('\n')
            .and_then(|l| l.strip_prefix("kubegate listening on "))
            .unwrap_or_else(|| panic!("unexpected first line {line:?}"))
            .to_string();
        Daemon {
            child,
            url,
            rest,
            log,
            _watchdog: cancel,
        }
    }

    /// SIGTERM and a bounded wait; returns the exit code.
    fn stop(&mut self) -> Option<i32> {
        common::terminate(&mut self.child, Duration::from_secs(30))
    }
}

impl Drop for Daemon {
    fn drop(&mut self) {
        if let Ok(None) = self.child.try_wait() {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
    }
}

fn kubectl_json(kubeconfig: &Path, cache: &Path, args: &[&str]) -> Option<serde_json::Value> {
    let mut c = Command::new("kubectl");
    c.arg("--kubeconfig")
        .arg(kubeconfig)
        .arg("--cache-dir")
        .arg(cache)
        .arg("--request-timeout=30s")
        .args(args)
        .args(["-o", "json"]);
    let out = run(c, Duration::from_secs(60));
    if out.code != Some(0) {
        eprintln!("kubectl {args:?}: {}", out.stderr);
        return None;
    }
    serde_json::from_str(&out.stdout).ok()
}

#[test]
fn serve_runs_the_demo_on_the_embedded_sim() {
    let dir = temp_dir("demo");
    let state = dir.join("state");
    let example = std::fs::read_to_string(EXAMPLE).unwrap();
    let config = example.replace("listen = \"127.0.0.1:7443\"", "listen = \"127.0.0.1:0\"");
    assert_ne!(config, example, "the example's listen line changed");
    std::fs::write(dir.join("kubegate.toml"), config).unwrap();

    let mut d = Daemon::start(&dir.join("kubegate.toml"));
    assert!(d.url.starts_with("http://127.0.0.1:"), "{}", d.url);
    assert!(!d.url.ends_with(":0"), "{}", d.url);
    // The published demo token is accepted here (sim mode, alone, on
    // loopback), with a warning at start.
    let log = std::fs::read_to_string(&d.log).unwrap_or_default();
    assert!(
        log.lines().any(|l| l.contains(" WARN ")
            && l.contains("principal \"demo\" uses the published demo token")),
        "no warning about the demo token at start:\n{log}"
    );
    assert!(!log.contains("kubegate-demo-token"), "{log}");

    // Health routes and the JSON error shape.
    assert_eq!(http_get(&d.url, "/healthz").0, 200);
    let (st, body) = http_get(&d.url, "/readyz");
    assert_eq!(st, 200, "{body}");
    // Without a token every other route, known or not, is 401 (docs/api.md).
    let (st, body) = http_get(&d.url, "/no/such/route");
    assert_eq!(st, 401);
    let v: serde_json::Value = serde_json::from_str(&body).expect("JSON error body");
    assert_eq!(v["error"]["code"], "UNAUTHORIZED", "{body}");
    assert!(v["error"]["message"].is_string(), "{body}");

    // The sim's kubeconfig: relative state_dir resolved beside the config.
    let kubeconfig = state.join("sim.kubeconfig");
    let mode = std::fs::metadata(&kubeconfig)
        .expect("sim.kubeconfig exists")
        .permissions()
        .mode();
    assert_eq!(mode & 0o777, 0o600, "mode {mode:o}");

    // The demo Deployment: labelled, and it becomes available.
    let cache = dir.join("kube-cache");
    let dep = wait_for(
        "deployment hello available",
        Duration::from_secs(90),
        || {
            let v = kubectl_json(
                &kubeconfig,
                &cache,
                &["get", "deployment", "hello", "-n", "demo"],
            )?;
            (v["status"]["readyReplicas"] == 1).then_some(v)
        },
    );
    let labels = &dep["metadata"]["labels"];
    assert_eq!(
        labels["app.kubernetes.io/managed-by"], "kubegate",
        "{labels}"
    );
    assert_eq!(labels["kubegate.dev/workspace-uid"], "demo-uid", "{labels}");
    let c = &dep["spec"]["template"]["spec"]["containers"][0];
    assert_eq!(c["name"], "main");
    assert_eq!(dep["spec"]["replicas"], 1);
    // The pods' folders live beside the state directory (docs/sim.md, "Pod
    // users"): the state directory is the daemon's alone.
    let pods = dir.join("state-pods");
    assert!(
        !processes_under(&pods).is_empty(),
        "the demo pod runs in the pods' folder"
    );

    // SIGTERM: exit 0, nothing left running, nothing more on stdout.
    assert_eq!(d.stop(), Some(0));
    wait_for(
        "no process left in the pods' folder",
        Duration::from_secs(15),
        || processes_under(&pods).is_empty().then_some(()),
    );
    let rest = d
        .rest
        .recv_timeout(Duration::from_secs(10))
        .unwrap_or_default();
    assert_eq!(rest, "", "stdout after the listening line");
}

/// Sim mode whose pods cannot run as their own users (here: `uid_range =
/// "off"`, which stands for "cannot switch users" even as root) serves one
/// principal at most, on loopback: anything else is a start error, exit 2
/// like a configuration error, before anything is started.
#[test]
fn serve_refuses_an_unconfined_sim_for_many_principals_or_a_remote_door() {
    let dir = temp_dir("unconfined");
    let principal = |name: &str, token: &str| {
        let digest = common::daemon::token_digest(token);
        format!("[[principal]]\nname = \"{name}\"\ntoken_sha256 = \"{digest}\"\n")
    };
    let base = "[cluster]\nmode = \"sim\"\n[cluster.sim]\nuid_range = \"off\"\n";
    for (file, listen, principals, expect) in [
        (
            "two.toml",
            "127.0.0.1:0",
            principal("alice", "token-a-0123456789") + &principal("bob", "token-b-0123456789"),
            "2 principals are configured",
        ),
        (
            "remote.toml",
            "0.0.0.0:0",
            principal("alice", "token-a-0123456789"),
            "is not a loopback address",
        ),
    ] {
        let state = dir.join(format!("state-{file}"));
        let text = format!(
            "[server]\nlisten = \"{listen}\"\nstate_dir = \"{}\"\n{base}{principals}",
            state.display()
        );
        std::fs::write(dir.join(file), text).unwrap();
        let mut c = Command::new(KUBEGATE);
        c.arg("serve").arg("--config").arg(dir.join(file));
        let out = run(c, Duration::from_secs(30));
        assert_eq!(out.code, Some(2), "{file}: {}", out.stderr);
        assert!(out.stderr.contains("refusing sim mode"), "{}", out.stderr);
        assert!(out.stderr.contains(expect), "{}", out.stderr);
        assert!(out.stdout.is_empty());
        // Refused before the sim started: no kubeconfig, no pods' folder.
        assert!(!state.join("sim.kubeconfig").exists());
    }
}

#[test]
fn serve_config_errors_exit_2_and_start_errors_exit_1() {
    let dir = temp_dir("errs");
    std::fs::write(
        dir.join("bad.toml"),
        "[cluster]\nmode = \"sim\"\nextra = 1\n",
    )
    .unwrap();
    let mut c = Command::new(KUBEGATE);
    c.arg("serve").arg("--config").arg(dir.join("bad.toml"));
    let out = run(c, Duration::from_secs(30));
    assert_eq!(out.code, Some(2), "{}", out.stderr);
    assert!(out.stderr.contains("cluster.extra"), "{}", out.stderr);
    assert!(out.stdout.is_empty());

    // The published demo token against a real cluster: refused (exit 2)
    // before anything starts, naming the key.
    let example = std::fs::read_to_string(EXAMPLE).unwrap();
    let real = example.replace("mode = \"sim\"", "mode = \"kubeconfig\"");
    assert_ne!(real, example, "the example's mode line changed");
    std::fs::write(dir.join("real.toml"), real).unwrap();
    let mut c = Command::new(KUBEGATE);
    c.arg("serve").arg("--config").arg(dir.join("real.toml"));
    let out = run(c, Duration::from_secs(30));
    assert_eq!(out.code, Some(2), "{}", out.stderr);
    assert!(
        out.stderr.contains("principal[0].token_sha256") && out.stderr.contains("demo token"),
        "{}",
        out.stderr
    );
    assert!(out.stdout.is_empty());

    // The state dir cannot be created (a file is in the way): exit 1.
    std::fs::write(dir.join("blocker"), "").unwrap();
    std::fs::write(
        dir.join("k.toml"),
        "[server]\nlisten = \"127.0.0.1:0\"\nstate_dir = \"blocker/state\"\n[cluster]\nmode = \"sim\"\n",
    )
    .unwrap();
    let mut c = Command::new(KUBEGATE);
    c.arg("serve").arg("--config").arg(dir.join("k.toml"));
    let out = run(c, Duration::from_secs(30));
    assert_eq!(out.code, Some(1), "{}", out.stderr);
    assert!(out.stderr.contains("state directory"), "{}", out.stderr);
    assert!(out.stdout.is_empty());
}
