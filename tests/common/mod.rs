//! Test harness shared by the integration tests: starts `kubegate sim` as a
//! real process on loopback (with the random token it makes by default, read
//! back from the kubeconfig it wrote: `SimProc::token`, `connection()`,
//! `bearer()`, `auth_line()`), runs kubectl against it with its own cache dir,
//! and waits on conditions with deadlines (never bare sleeps). A watchdog
//! kills a hung child so a test fails instead of hanging CI.
#![allow(dead_code)]

pub mod backend;
pub mod bench;
pub mod daemon;
pub mod exec_bench;
pub mod issuer;
pub mod oidc_provider;
pub mod pod_fixture;
pub mod pty;
pub mod rbac_file;
pub mod real_daemon;

use std::io::{BufRead, BufReader, Read, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

pub const KUBEGATE: &str = env!("CARGO_BIN_EXE_kubegate");

/// A fresh, unique folder under the target dir (removed by `Drop` of the owner).
pub fn temp_dir(tag: &str) -> PathBuf {
    static N: AtomicU64 = AtomicU64::new(0);
    let base = test_base();
    let d = base.join(format!(
        "{tag}-{}-{}",
        std::process::id(),
        N.fetch_add(1, Ordering::Relaxed)
    ));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).expect("create temp dir");
    d
}

/// Where test folders go: the target dir, unless the sims the tests start
/// run pods as their own users (as root) and those users cannot reach it
/// (a clone under /root, 0700): then a folder of this test process under
/// the system's temporary folder, so pods' folders stay inside the test's
/// own folder and the "no process left under it" checks keep their bite.
fn test_base() -> PathBuf {
    static BASE: std::sync::OnceLock<PathBuf> = std::sync::OnceLock::new();
    BASE.get_or_init(|| {
        let target = PathBuf::from(env!("CARGO_TARGET_TMPDIR"));
        let out_of_reach = kubegate::sim::runtime::can_switch_users()
            && kubegate::sim::pod_users::unreachable_above(&target.join("x"))
                .ok()
                .flatten()
                .is_some();
        if !out_of_reach {
            return target;
        }
        use std::os::unix::fs::DirBuilderExt;
        let p = std::env::temp_dir().join(format!(
            "kubegate-tests-{}-{:08x}",
            std::process::id(),
            rand::random::<u32>()
        ));
        std::fs::DirBuilder::new()
            .mode(0o755)
            .create(&p)
            .expect("create the tests' folder");
        p
    })
    .clone()
}

/// The first line a child prints on its piped stdout (the rest is drained,
/// so the child never blocks on a full pipe). `None` after `within`, with
/// the child killed and reaped.
pub fn first_line(child: &mut Child, within: Duration) -> Option<String> {
    let stdout = child.stdout.take().expect("stdout is piped");
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let mut r = BufReader::new(stdout);
        let mut line = String::new();
        let _ = r.read_line(&mut line);
        let _ = tx.send(line);
        let mut sink = Vec::new();
        let _ = r.read_to_end(&mut sink);
    });
    match rx.recv_timeout(within) {
        Ok(l) => Some(l),
        Err(_) => {
            let _ = child.kill();
            let _ = child.wait();
            None
        }
    }
}

/// Polls `f` until it returns Some or the deadline passes.
pub fn wait_for<T>(what: &str, timeout: Duration, mut f: impl FnMut() -> Option<T>) -> T {
    let deadline = Instant::now() + timeout;
    let mut pause = Duration::from_millis(5);
    loop {
        if let Some(v) = f() {
            return v;
        }
        if Instant::now() >= deadline {
            panic!("timed out after {timeout:?} waiting for {what}");
        }
        std::thread::sleep(pause);
        pause = (pause * 2).min(Duration::from_millis(100));
    }
}

pub struct SimProc {
    pub child: Child,
    pub url: String,
    /// The bearer token in the kubeconfig the sim wrote (None with
    /// `--no-auth`, or a client certificate alone).
    pub token: Option<String>,
    pub dir: PathBuf,
    pub kubeconfig: PathBuf,
    pub state_dir: PathBuf,
    pub cache_dir: PathBuf,
}

impl SimProc {
    /// Starts `kubegate sim` with extra flags; waits for its listening line.
    ///
    /// Without a flag that chooses how clients authenticate (`--tls`,
    /// `--token-file`, `--token`, `--client-ca`, `--no-auth`) the sim is
    /// started with `--no-auth`, plain HTTP: these tests are about the API
    /// and speak raw HTTP/1.1 to it, and kubectl sends no token over plain
    /// HTTP. With `--tls` alone the sim makes its random token, and the
    /// helpers read it from the kubeconfig it wrote ([`SimProc::token`],
    /// [`SimProc::connection`]). [`SimProc::start_logged`] passes the flags
    /// as they are (the sim's own default: TLS and a random token).
    pub fn start(extra: &[&str]) -> SimProc {
        const AUTH: [&str; 5] = [
            "--tls",
            "--token-file",
            "--token",
            "--client-ca",
            "--no-auth",
        ];
        let chooses = extra.iter().any(|a| {
            AUTH.iter()
                .any(|f| a == f || a.starts_with(&format!("{f}=")))
        });
        let mut args: Vec<&str> = extra.to_vec();
        if !chooses {
            args.push("--no-auth");
        }
        SimProc::spawn(&args, false)
    }

    /// `kubegate sim` with exactly these flags, its stderr (its log,
    /// `RUST_LOG=info`) in `dir/sim.log` ([`SimProc::log_text`]).
    pub fn start_logged(extra: &[&str]) -> SimProc {
        SimProc::spawn(extra, true)
    }

    /// The sim's log so far (only with [`SimProc::start_logged`]).
    pub fn log_text(&self) -> String {
        std::fs::read_to_string(self.dir.join("sim.log")).unwrap_or_default()
    }

    fn spawn(extra: &[&str], logged: bool) -> SimProc {
        let dir = temp_dir("sim");
        let kubeconfig = dir.join("kubeconfig");
        let state_dir = dir.join("state");
        let cache_dir = dir.join("kube-cache");
        let mut cmd = Command::new(KUBEGATE);
        cmd.arg("sim")
            .arg("--kubeconfig-out")
            .arg(&kubeconfig)
            .arg("--state-dir")
            .arg(&state_dir)
            .args(extra)
            .env("RUST_LOG", if logged { "info" } else { "warn" })
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(if logged {
                Stdio::from(
                    std::fs::File::create(dir.join("sim.log")).expect("create the sim's log"),
                )
            } else {
                Stdio::inherit()
            });
        let mut child = cmd.spawn().expect("spawn kubegate sim");
        let Some(line) = first_line(&mut child, Duration::from_secs(30)) else {
            panic!("kubegate sim did not print its listening line within 30 s");
        };
        let url = line
            .trim()
            .strip_prefix("kubegate sim listening on ")
            .unwrap_or_else(|| panic!("unexpected first line {line:?}"))
            .to_string();
        let text = std::fs::read_to_string(&kubeconfig).expect("the sim's kubeconfig");
        let token = kubeconfig_token(&text);
        SimProc {
            child,
            url,
            token,
            dir,
            kubeconfig,
            state_dir,
            cache_dir,
        }
    }

    /// How kubegate's client reaches this sim: the kubeconfig it wrote
    /// (server, CA, token, client certificate).
    pub fn connection(&self) -> kubegate::kube::connection::Connection {
        let text = std::fs::read_to_string(&self.kubeconfig).expect("the sim's kubeconfig");
        kubegate::kube::config::from_kubeconfig_str(&text, &self.dir, None)
            .expect("the sim's kubeconfig loads")
    }

    /// `Bearer TOKEN` (an `Authorization` value); panics without a token.
    pub fn bearer(&self) -> String {
        format!(
            "Bearer {}",
            self.token.as_deref().expect("the sim has a token")
        )
    }

    /// `Authorization: Bearer TOKEN\r\n` for a raw request head (empty
    /// without a token).
    pub fn auth_line(&self) -> String {
        self.token
            .as_deref()
            .map(|t| format!("Authorization: Bearer {t}\r\n"))
            .unwrap_or_default()
    }

    /// kubectl with this sim's kubeconfig and its own cache dir.
    pub fn kubectl(&self) -> Command {
        let mut c = Command::new("kubectl");
        c.arg("--kubeconfig")
            .arg(&self.kubeconfig)
            .arg("--cache-dir")
            .arg(&self.cache_dir)
            .arg("--request-timeout=60s");
        c
    }

    /// Runs kubectl to completion (watchdog: `timeout`), returning output.
    pub fn kubectl_run(&self, args: &[&str], stdin: Option<&[u8]>, timeout: Duration) -> Output {
        let mut c = self.kubectl();
        c.args(args);
        run_with_timeout(c, stdin, timeout)
    }

    /// kubectl that must succeed; returns stdout.
    pub fn kubectl_ok(&self, args: &[&str]) -> String {
        let out = self.kubectl_run(args, None, Duration::from_secs(60));
        assert!(
            out.code == Some(0),
            "kubectl {args:?} failed ({:?}):\nstdout: {}\nstderr: {}",
            out.code,
            out.stdout_str(),
            out.stderr_str()
        );
        out.stdout_str()
    }

    /// `kubectl apply -f -` of one object, which must succeed.
    pub fn apply(&self, obj: &serde_json::Value) {
        let out = self.kubectl_run(
            &["apply", "-f", "-"],
            Some(obj.to_string().as_bytes()),
            Duration::from_secs(30),
        );
        assert_eq!(out.code, Some(0), "{}", out.stderr_str());
    }

    /// kubectl ... -o json, parsed.
    pub fn kubectl_json(&self, args: &[&str]) -> serde_json::Value {
        let mut a = args.to_vec();
        a.extend(["-o", "json"]);
        let s = self.kubectl_ok(&a);
        serde_json::from_str(&s).unwrap_or_else(|e| panic!("kubectl {args:?}: bad JSON {e}: {s}"))
    }

    /// Processes whose working directory lies inside this sim's state dir:
    /// every container and exec process the sim starts runs there.
    pub fn processes_in_state_dir(&self) -> Vec<u32> {
        processes_under(&self.state_dir)
    }

    /// SIGTERM, then wait (bounded) for a clean exit; returns the exit code.
    pub fn stop(&mut self) -> Option<i32> {
        terminate(&mut self.child, Duration::from_secs(20))
    }
}

impl Drop for SimProc {
    /// Stops the sim and checks the promise every test relies on: no
    /// process the sim started is left running.
    fn drop(&mut self) {
        if let Ok(None) = self.child.try_wait() {
            self.stop();
        }
        if std::thread::panicking() {
            return;
        }
        let deadline = Instant::now() + Duration::from_secs(10);
        while !self.processes_in_state_dir().is_empty() {
            if Instant::now() >= deadline {
                panic!(
                    "processes left running after the sim stopped: {:?}",
                    self.processes_in_state_dir()
                );
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}

/// The `token:` of the (one) user in a kubeconfig the sim wrote.
pub fn kubeconfig_token(text: &str) -> Option<String> {
    text.lines()
        .find_map(|l| l.trim().strip_prefix("token:"))
        .map(|t| t.trim().trim_matches('"').to_string())
}

/// SIGTERM to `child`, then a bounded wait for its exit (SIGKILL when the
/// bound passes); returns its exit code, None when it had to be killed.
pub fn terminate(child: &mut Child, within: Duration) -> Option<i32> {
    unsafe_kill(child.id(), 15);
    let deadline = Instant::now() + within;
    loop {
        if let Ok(Some(st)) = child.try_wait() {
            return st.code();
        }
        if Instant::now() >= deadline {
            let _ = child.kill();
            let _ = child.wait();
            return None;
        }
        std::thread::sleep(Duration::from_millis(10));
    }
}

/// Sends a signal with kill(1): tests keep `unsafe` out.
pub fn unsafe_kill(pid: u32, sig: i32) {
    let _ = Command::new("kill")
        .arg(format!("-{sig}"))
        .arg(pid.to_string())
        .status();
}

/// Every process whose cwd is `dir` or below it.
pub fn processes_under(dir: &Path) -> Vec<u32> {
    let Ok(dir) = dir.canonicalize() else {
        return Vec::new();
    };
    let mut out = Vec::new();
    if let Ok(rd) = std::fs::read_dir("/proc") {
        for e in rd.flatten() {
            let Ok(pid) = e.file_name().to_string_lossy().parse::<u32>() else {
                continue;
            };
            if let Ok(cwd) = std::fs::read_link(e.path().join("cwd")) {
                if cwd.starts_with(&dir) {
                    out.push(pid);
                }
            }
        }
    }
    out
}

pub struct Output {
    pub code: Option<i32>,
    pub stdout: Vec<u8>,
    pub stderr: Vec<u8>,
}

impl Output {
    pub fn stdout_str(&self) -> String {
        String::from_utf8_lossy(&self.stdout).into_owned()
    }
    pub fn stderr_str(&self) -> String {
        String::from_utf8_lossy(&self.stderr).into_owned()
    }
}

/// Runs a command with optional stdin; kills it when `timeout` passes
/// (and panics, so a hung client fails the test).
pub fn run_with_timeout(mut c: Command, stdin: Option<&[u8]>, timeout: Duration) -> Output {
    c.stdin(if stdin.is_some() {
        Stdio::piped()
    } else {
        Stdio::null()
    })
    .stdout(Stdio::piped())
    .stderr(Stdio::piped());
    let mut child = c.spawn().expect("spawn");
    let writer = stdin.map(|data| {
        let data = data.to_vec();
        let mut w = child.stdin.take().expect("stdin");
        std::thread::spawn(move || {
            let _ = w.write_all(&data);
        })
    });
    let mut so = child.stdout.take().expect("stdout");
    let mut se = child.stderr.take().expect("stderr");
    let ro = std::thread::spawn(move || {
        let mut b = Vec::new();
        let _ = so.read_to_end(&mut b);
        b
    });
    let re = std::thread::spawn(move || {
        let mut b = Vec::new();
        let _ = se.read_to_end(&mut b);
        b
    });
    let deadline = Instant::now() + timeout;
    let status = loop {
        if let Ok(Some(st)) = child.try_wait() {
            break st;
        }
        if Instant::now() >= deadline {
            let _ = child.kill();
            let _ = child.wait();
            let stderr = re.join().unwrap_or_default();
            panic!(
                "{c:?} timed out after {timeout:?}; stderr: {}",
                String::from_utf8_lossy(&stderr)
            );
        }
        std::thread::sleep(Duration::from_millis(5));
    };
    if let Some(w) = writer {
        let _ = w.join();
    }
    Output {
        code: status.code(),
        stdout: ro.join().unwrap_or_default(),
        stderr: re.join().unwrap_or_default(),
    }
}
