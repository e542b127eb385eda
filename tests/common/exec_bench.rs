//! The exec gateway's two benchmark figures, shared by tests/bench_exec.rs
//! (the daemon's embedded sim) and tests/bench_real.rs (a real API server
//! and its sim node): exec stdout throughput and keystroke round trip, each
//! through the daemon's WebSocket, through `kube::remote` straight to the
//! cluster, and through `kubectl exec`, against one [`Target`].
#![allow(dead_code)]

use super::bench::{bar, median, percentile};
use super::daemon::DaemonProc;
use kubegate::exec::frames::{ClientFrame, ServerFrame, SUBPROTOCOL, TYPE_STDOUT};
use kubegate::kube::connection::Connection;
use kubegate::kube::remote::{self, ExecOptions, Output, TermSize};
use std::io::{Read, Write};
use std::net::TcpStream;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};
use tungstenite::Message;

pub const KEYSTROKES: usize = 2_000;
pub const WARMUP_KEYS: usize = 50;
/// The prompt the tty `cat` prints once the terminal is raw.
const READY: &[u8] = b"READY";
const TTY_CAT: &str = "stty raw -echo; echo READY; exec cat";

pub type Ws = tungstenite::WebSocket<TcpStream>;

/// `BENCH_RUNS`, default 3: the runs behind each median.
pub fn runs() -> usize {
    std::env::var("BENCH_RUNS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(3usize)
        .max(1)
}

/// Min and max.
pub fn spread(v: &[f64]) -> (f64, f64) {
    let lo = v.iter().copied().fold(f64::INFINITY, f64::min);
    let hi = v.iter().copied().fold(f64::NEG_INFINITY, f64::max);
    (lo, hi)
}

/// MB/s (10^6 B/s).
pub fn mbps(bytes: u64, secs: f64) -> f64 {
    bytes as f64 / 1e6 / secs
}

/// A workspace Deployment the daemon execs into, and the pod (its only
/// one) the direct paths exec into; container `main`, namespace = project.
pub struct Target {
    pub project: String,
    pub uid: String,
    pub deployment: String,
    pub pod: String,
}

impl Target {
    /// The daemon's demo workspace (`demo/demo-uid`, Deployment `hello`).
    pub fn demo(pod: &str) -> Target {
        Target {
            project: "demo".into(),
            uid: "demo-uid".into(),
            deployment: "hello".into(),
            pod: pod.into(),
        }
    }

    /// `kubectl exec [extra] -n NS POD -c main -- CMD` on `kubectl` (a
    /// command with its kubeconfig already given).
    fn kubectl_exec(&self, mut kubectl: Command, extra: &[&str], cmd: &[String]) -> Command {
        kubectl
            .arg("exec")
            .args(extra)
            .args(["-n", &self.project, &self.pod, "-c", "main", "--"])
            .args(cmd);
        kubectl
    }
}

// ------------------------------------------------------ daemon clients

fn interactive_path(t: &Target, cmd: &[&str], tty: bool, stdin: bool) -> String {
    let enc = kubegate::kube::client::api::encode_segment;
    let mut p = format!(
        "/v1/exec/interactive?project={}&uid={}&deployment={}",
        enc(&t.project),
        enc(&t.uid),
        enc(&t.deployment)
    );
    for c in cmd {
        p.push_str("&command=");
        p.push_str(&enc(c));
    }
    p.push_str(&format!("&tty={tty}&stdin={stdin}"));
    p
}

/// Opens an interactive exec through the daemon and reads its target frame.
pub fn open_ws(d: &DaemonProc, t: &Target, cmd: &[&str], tty: bool, stdin: bool) -> Ws {
    let auth = format!("Bearer {}", d.token);
    let (mut ws, _) = d
        .ws(
            &interactive_path(t, cmd, tty, stdin),
            &[("Authorization", &auth)],
            &[SUBPROTOCOL],
        )
        .unwrap_or_else(|(st, b)| panic!("upgrade refused: {st} {}", String::from_utf8_lossy(&b)));
    match ws.read() {
        Ok(m) => match ServerFrame::decode(&m) {
            Ok(Some(ServerFrame::Target(_))) => {}
            other => panic!("first frame {other:?}"),
        },
        Err(e) => panic!("no target frame: {e}"),
    }
    ws
}

/// The next stdout bytes from the daemon (stderr and text frames skipped;
/// an error frame or the end of the stream panics).
pub fn ws_stdout(ws: &mut Ws) -> Vec<u8> {
    loop {
        match ws.read() {
            Ok(Message::Binary(b)) if b.first() == Some(&TYPE_STDOUT) => return b[1..].to_vec(),
            Ok(m @ Message::Text(_)) => {
                if let Ok(Some(f @ (ServerFrame::Error(_) | ServerFrame::Exit(_)))) =
                    ServerFrame::decode(&m)
                {
                    panic!("stream ended while waiting for output: {f:?}");
                }
            }
            Ok(Message::Close(c)) => panic!("closed while waiting for output: {c:?}"),
            Ok(_) => {}
            Err(e) => panic!("websocket: {e}"),
        }
    }
}

/// Closes the session (`close` frame) and reads until the socket ends.
pub fn ws_finish(mut ws: Ws) {
    let _ = ws.send(ClientFrame::Close.encode());
    while ws.read().is_ok() {}
}

// ------------------------------------------------------ throughput

/// `head -c BYTES /dev/zero`.
pub fn head_cmd(bytes: u64) -> Vec<String> {
    ["head", "-c", &bytes.to_string(), "/dev/zero"]
        .iter()
        .map(|s| s.to_string())
        .collect()
}

/// Seconds for `bytes` through the daemon into a WebSocket client that
/// discards them (upgrade and target resolution included), and the number
/// of stdout frames they came in.
pub fn throughput_ws(d: &DaemonProc, t: &Target, bytes: u64) -> (f64, u64) {
    let cmd = head_cmd(bytes);
    let cmd: Vec<&str> = cmd.iter().map(String::as_str).collect();
    let t0 = Instant::now();
    let mut ws = open_ws(d, t, &cmd, false, false);
    let (mut n, mut frames, mut exit) = (0u64, 0u64, None);
    loop {
        match ws.read() {
            Ok(Message::Binary(b)) => {
                if b.first() == Some(&TYPE_STDOUT) {
                    n += b.len() as u64 - 1;
                    frames += 1;
                }
            }
            Ok(m @ Message::Text(_)) => match ServerFrame::decode(&m) {
                Ok(Some(ServerFrame::Exit(e))) => exit = Some(e.exit_code),
                Ok(Some(ServerFrame::Error(e))) => panic!("error frame: {e:?}"),
                _ => {}
            },
            Ok(_) => {}
            Err(_) => break,
        }
    }
    let secs = t0.elapsed().as_secs_f64();
    assert_eq!(exit, Some(0), "exit frame");
    assert_eq!(n, bytes, "stdout bytes through the daemon");
    (secs, frames)
}

/// The daemon's upstream leg alone: `bytes` through `kube::remote`
/// straight to the cluster, discarded; seconds and chunks.
pub fn throughput_direct(conn: &Connection, t: &Target, bytes: u64) -> (f64, u64) {
    let opts = ExecOptions {
        stderr: false,
        ..ExecOptions::default()
    };
    let t0 = Instant::now();
    let p = remote::exec(
        conn,
        &t.project,
        &t.pod,
        Some("main"),
        &head_cmd(bytes),
        opts,
    )
    .expect("exec");
    let (mut n, mut chunks) = (0u64, 0u64);
    for c in p.output().iter() {
        if let Output::Stdout(b) = c {
            n += b.len() as u64;
            chunks += 1;
        }
    }
    assert_eq!(p.wait().map(|s| s.code), Ok(0));
    let secs = t0.elapsed().as_secs_f64();
    assert_eq!(n, bytes, "stdout bytes straight from the cluster");
    (secs, chunks)
}

/// Seconds for `bytes` through `kubectl exec` (stdout to /dev/null);
/// `kubectl` carries its kubeconfig.
pub fn throughput_kubectl(kubectl: Command, t: &Target, bytes: u64) -> f64 {
    let mut c = t.kubectl_exec(kubectl, &[], &head_cmd(bytes));
    c.stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::inherit());
    let t0 = Instant::now();
    let st = c.status().expect("kubectl");
    let secs = t0.elapsed().as_secs_f64();
    assert!(st.success(), "kubectl exec: {st}");
    secs
}

// ------------------------------------------------------ keystrokes

/// The tty `cat` printed its whole prompt line (so no newline is left to
/// arrive after it and be taken for an echo).
fn ready(seen: &[u8]) -> bool {
    seen.windows(READY.len()).any(|w| w == READY) && seen.last() == Some(&b'\n')
}

fn key(i: usize) -> u8 {
    b'a' + (i % 26) as u8
}

fn cat_cmd(tty: bool) -> Vec<String> {
    if tty {
        vec!["sh".into(), "-c".into(), TTY_CAT.into()]
    } else {
        vec!["cat".into()]
    }
}

/// Times each keystroke's `round` (send it, return its echo), after
/// warm-up; microseconds.
fn time_keys(mut round: impl FnMut(u8) -> Vec<u8>) -> Vec<f64> {
    let mut lat = Vec::with_capacity(KEYSTROKES);
    for i in 0..WARMUP_KEYS + KEYSTROKES {
        let b = key(i);
        let t = Instant::now();
        let got = round(b);
        let us = t.elapsed().as_secs_f64() * 1e6;
        assert_eq!(got, [b], "echo of keystroke {i}");
        if i >= WARMUP_KEYS {
            lat.push(us);
        }
    }
    lat
}

/// Microseconds per keystroke (after warm-up) through the daemon.
pub fn keys_daemon(d: &DaemonProc, t: &Target, tty: bool) -> Vec<f64> {
    let cmd = cat_cmd(tty);
    let cmd: Vec<&str> = cmd.iter().map(String::as_str).collect();
    let mut ws = open_ws(d, t, &cmd, tty, true);
    if tty {
        let mut seen = Vec::new();
        while !ready(&seen) {
            seen.extend(ws_stdout(&mut ws));
        }
    }
    let lat = time_keys(|b| {
        let msg = ClientFrame::Stdin {
            data: vec![b],
            eof: false,
        }
        .encode();
        ws.send(msg).expect("send keystroke");
        ws_stdout(&mut ws)
    });
    ws_finish(ws);
    lat
}

/// The same through `kube::remote` straight to the cluster.
pub fn keys_direct(conn: &Connection, t: &Target, tty: bool) -> Vec<f64> {
    let opts = ExecOptions {
        stdin: true,
        stderr: !tty,
        tty,
        initial_size: tty.then_some(TermSize {
            width: 80,
            height: 24,
        }),
        ..ExecOptions::default()
    };
    let p =
        remote::exec(conn, &t.project, &t.pod, Some("main"), &cat_cmd(tty), opts).expect("exec");
    let out = p.output();
    let mut stdin = p.stdin();
    let next = || loop {
        match out.recv_timeout(Duration::from_secs(60)) {
            Ok(Output::Stdout(b)) if !b.is_empty() => return b,
            Ok(_) => {}
            Err(e) => panic!("direct exec output ended: {e}"),
        }
    };
    if tty {
        let mut seen = Vec::new();
        while !ready(&seen) {
            seen.extend(next());
        }
    }
    let lat = time_keys(|b| {
        stdin.write(&[b]).expect("stdin");
        next()
    });
    let _ = p.controller().cancel();
    drop(stdin);
    drop(out);
    let _ = p.wait();
    lat
}

/// The same through `kubectl exec -i` (no tty: kubectl refuses one on
/// pipes) driven over its stdin and stdout pipes; `kubectl` carries its
/// kubeconfig.
pub fn keys_kubectl(kubectl: Command, t: &Target) -> Vec<f64> {
    let mut c = t.kubectl_exec(kubectl, &["-i"], &cat_cmd(false));
    c.stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit());
    let mut child = c.spawn().expect("kubectl");
    let mut stdin = child.stdin.take().expect("stdin");
    let mut stdout = child.stdout.take().expect("stdout");
    let lat = time_keys(|b| {
        stdin.write_all(&[b]).expect("kubectl stdin");
        let mut echo = [0u8; 1];
        stdout.read_exact(&mut echo).expect("kubectl stdout");
        echo.to_vec()
    });
    drop(stdin);
    let mut rest = Vec::new();
    let _ = stdout.read_to_end(&mut rest);
    super::terminate(&mut child, Duration::from_secs(20));
    lat
}

/// Median over runs of each run's p50 and p99, in ms.
pub struct Pct {
    pub p50: Vec<f64>,
    pub p99: Vec<f64>,
}

impl Pct {
    pub fn new() -> Pct {
        Pct {
            p50: Vec::new(),
            p99: Vec::new(),
        }
    }
    pub fn push(&mut self, us: &[f64]) {
        self.p50.push(percentile(us, 50.0) / 1e3);
        self.p99.push(percentile(us, 99.0) / 1e3);
    }
    pub fn med(&self) -> (f64, f64) {
        (median(&self.p50), median(&self.p99))
    }
    /// What `self` adds over `base` (runs paired back to back): the median
    /// over runs of the p50 and of the p99 differences, in ms.
    pub fn added_over(&self, base: &Pct) -> (f64, f64) {
        let d50: Vec<f64> = self.p50.iter().zip(&base.p50).map(|(x, y)| x - y).collect();
        let d99: Vec<f64> = self.p99.iter().zip(&base.p99).map(|(x, y)| x - y).collect();
        (median(&d50), median(&d99))
    }
}

// ------------------------------------------------------ figure

/// Keystroke round trips (interactive `cat`, [`KEYSTROKES`] bytes each
/// timed to its echo), medians over [`runs`] of each run's p50 and p99:
/// through the daemon, through `kube::remote` and through `kubectl exec -i`
/// (`kubectl()`: a kubectl with its kubeconfig) straight to `upstream` (a
/// name for the table), tty off, and on for the first two; and what the
/// daemon adds over `kube::remote`, against the bar of <= 1 ms.
pub fn figure_keystrokes(
    d: &DaemonProc,
    conn: &Connection,
    t: &Target,
    kubectl: impl Fn() -> Command,
    upstream: &str,
) {
    let runs = runs();
    let (mut dn, mut cn, mut kn, mut dt, mut ct) =
        (Pct::new(), Pct::new(), Pct::new(), Pct::new(), Pct::new());
    for i in 0..runs {
        dn.push(&keys_daemon(d, t, false));
        cn.push(&keys_direct(conn, t, false));
        kn.push(&keys_kubectl(kubectl(), t));
        dt.push(&keys_daemon(d, t, true));
        ct.push(&keys_direct(conn, t, true));
        eprintln!(
            "keystroke run {}: p50 ms daemon {:.3} direct {:.3} kubectl {:.3}; tty daemon {:.3} direct {:.3}",
            i + 1,
            dn.p50[i],
            cn.p50[i],
            kn.p50[i],
            dt.p50[i],
            ct.p50[i]
        );
    }
    println!();
    println!(
        "### keystroke round trip: interactive cat, {KEYSTROKES} single bytes each timed to its echo (ms; median over {runs} runs of each run's p50/p99)"
    );
    println!();
    println!("| path | tty | p50 ms | p99 ms | bar (added by the daemon <= 1 ms each) |");
    println!("|---|---|---|---|---|");
    let row = |name: &str, tty: &str, p: &Pct| {
        let (a, b) = p.med();
        println!("| {name} | {tty} | {a:.3} | {b:.3} | |");
    };
    let added = |tty: &str, dp: &Pct, cp: &Pct| {
        // Per run, then the median: both sides ran back to back.
        let (a, b) = dp.added_over(cp);
        println!(
            "| **added by the daemon** (daemon - kube::remote) | {tty} | {a:.3} | {b:.3} | {} |",
            bar(a <= 1.0 && b <= 1.0)
        );
    };
    row("kubegate daemon, WebSocket client", "no", &dn);
    row(&format!("kube::remote straight to {upstream}"), "no", &cn);
    row(
        &format!("kubectl exec -i straight to {upstream} (pipes)"),
        "no",
        &kn,
    );
    added("no", &dn, &cn);
    row("kubegate daemon, WebSocket client", "yes (raw)", &dt);
    row(
        &format!("kube::remote straight to {upstream}"),
        "yes (raw)",
        &ct,
    );
    added("yes (raw)", &dt, &ct);
}
