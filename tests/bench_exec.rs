//! The exec gateway benchmark (issue step 6; run by `scripts/bench.sh`,
//! ignored by the test suite). One `kubegate serve` with its embedded sim,
//! and the SAME sim reached directly through its kubeconfig, measured back
//! to back in one run (docs/RELIABILITY.md#the-bars: ratios against a peer, medians, a table
//! saying which bars hold; nothing here asserts a timing).
//!
//! 1. Interactive exec relay throughput: `head -c 256MiB /dev/zero` through
//!    the daemon (a tungstenite client discarding frames; the `kubegate
//!    exec` CLI with stdout to /dev/null when the binary has it) against
//!    `kubectl exec` straight to the sim. Bar >= 1.0x (target 2x).
//! 2. Keystroke round trip: interactive `cat`, 2,000 single bytes each timed
//!    from send to its echo, through the daemon, through `kube::remote`
//!    straight to the sim, and through `kubectl exec -i` over pipes; tty off
//!    (all three) and on (`stty raw -echo; cat`, the first two). "Added by
//!    the daemon" = daemon minus direct client. Bar <= 1 ms at p50 and p99.
//! 3. Non-tty exec rate: `POST /v1/exec` of `true` from 8 keep-alive
//!    callers for ~5 s, against `kubectl exec -- true` (a process per call,
//!    8 in parallel) and, for the breakdown, `kube::remote` straight to the
//!    sim from 8 threads. Bar >= 200 execs/s.
//! 4. Idle footprint of the daemon (embedded sim included): RSS, threads
//!    and CPU over 10 s, right after start and after figures 1-3. Bar: CPU
//!    < 2%.
//!
//! Breakdown rows and tables (not bars) say where the time goes: the
//! daemon's upstream leg alone (`kube::remote` straight to the sim), the
//! daemon's CPU by thread name (sampled from /proc every 50 ms), the client
//! side's CPU, one caller against eight, and `exec::resolve` alone with one
//! shared `Client` (as the daemon) or one per caller.
//!
//! `BENCH_RUNS` (default 3) sets the runs behind each median in 1 and 2.
//! `cargo test --release --test bench_exec -- --ignored --nocapture --test-threads 1`

mod common;

use common::bench::{bar, clock_ticks, cpu_ticks, median, percentile, status_field};

use common::daemon::DaemonProc;
use common::{wait_for, KUBEGATE};
use kubegate::exec::frames::{ClientFrame, ServerFrame, SUBPROTOCOL, TYPE_STDOUT};
use kubegate::kube::connection::Connection;
use kubegate::kube::remote::{self, ExecOptions, Output, TermSize};
use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;
use std::time::{Duration, Instant};
use tungstenite::Message;

const BYTES: u64 = 268_435_456;
const KEYSTROKES: usize = 2_000;
const WARMUP_KEYS: usize = 50;
const RATE_CALLERS: usize = 8;
const RATE_WINDOW: Duration = Duration::from_secs(5);
const KUBECTL_RATE_WINDOW: Duration = Duration::from_secs(4);
const DIRECT_RATE_WINDOW: Duration = Duration::from_secs(3);
const SERIAL_WINDOW: Duration = Duration::from_secs(2);
const IDLE_WINDOW: Duration = Duration::from_secs(10);
/// The prompt the tty `cat` prints once the terminal is raw.
const READY: &[u8] = b"READY";
const TTY_CAT: &str = "stty raw -echo; echo READY; exec cat";

type Ws = tungstenite::WebSocket<TcpStream>;

fn runs() -> usize {
    std::env::var("BENCH_RUNS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(3usize)
        .max(1)
}

fn spread(v: &[f64]) -> (f64, f64) {
    let lo = v.iter().copied().fold(f64::INFINITY, f64::min);
    let hi = v.iter().copied().fold(f64::NEG_INFINITY, f64::max);
    (lo, hi)
}

// ---------------------------------------------------------------- /proc

/// This process's own CPU plus that of its waited-for children (kubectl,
/// the CLI), in clock ticks: the client side of a figure.
fn client_ticks() -> u64 {
    let s = std::fs::read_to_string("/proc/self/stat").unwrap_or_default();
    let rest = s.rsplit_once(')').map_or("", |(_, r)| r);
    let f: Vec<&str> = rest.split_whitespace().collect();
    let n = |i: usize| f.get(i).and_then(|x| x.parse::<u64>().ok()).unwrap_or(0);
    n(11) + n(12) + n(13) + n(14)
}

/// CPU seconds spent during a figure: by the daemon process (embedded sim
/// included) and by the client side (this process and its children).
#[derive(Clone, Copy, Default)]
struct Cpu {
    daemon: f64,
    client: f64,
}

fn with_cpu<T>(pid: u32, tck: f64, f: impl FnOnce() -> T) -> (T, Cpu) {
    let (d0, c0) = (cpu_ticks(pid), client_ticks());
    let r = f();
    let cpu = Cpu {
        daemon: (cpu_ticks(pid) - d0) as f64 / tck,
        client: (client_ticks() - c0) as f64 / tck,
    };
    (r, cpu)
}

/// Per-thread CPU of the daemon while it runs: a thread polls
/// /proc/<pid>/task every 50 ms. Threads that live less than a poll (one per
/// exec, say) are not seen; their CPU shows as the rest of the process's.
/// Thread ids are reused quickly here (pid_max 32,768 and thousands of
/// short threads and processes per second), so a tid whose name changes or
/// whose ticks go backwards starts a new record.
struct Sampler {
    stop: crossbeam_channel::Sender<()>,
    handle: std::thread::JoinHandle<Vec<ThreadRec>>,
    pid: u32,
    start_ticks: u64,
}

/// One thread seen by the sampler: its last name, ticks when first seen
/// (0 for threads born after the first scan), ticks when last seen.
struct ThreadRec {
    comm: String,
    base: u64,
    last: u64,
}

fn task_ticks(pid: u32) -> Vec<(u32, String, u64)> {
    let mut out = Vec::new();
    for e in std::fs::read_dir(format!("/proc/{pid}/task"))
        .into_iter()
        .flatten()
        .flatten()
    {
        let Ok(tid) = e.file_name().to_string_lossy().parse::<u32>() else {
            continue;
        };
        let Ok(s) = std::fs::read_to_string(e.path().join("stat")) else {
            continue;
        };
        let (Some(open), Some(close)) = (s.find('('), s.rfind(')')) else {
            continue;
        };
        let comm = s[open + 1..close].to_string();
        let f: Vec<&str> = s[close + 1..].split_whitespace().collect();
        let n = |i: usize| f.get(i).and_then(|x| x.parse::<u64>().ok()).unwrap_or(0);
        out.push((tid, comm, n(11) + n(12)));
    }
    out
}

fn sample(
    pid: u32,
    first: bool,
    recs: &mut Vec<ThreadRec>,
    by_tid: &mut std::collections::HashMap<u32, usize>,
) {
    for (tid, comm, t) in task_ticks(pid) {
        match by_tid.get(&tid).map(|&i| &mut recs[i]) {
            // A new name on a live thread is the thread naming itself
            // just after it started (it inherits its creator's name).
            Some(r) if t >= r.last && (r.comm == comm || r.base == 0) => {
                r.comm = comm;
                r.last = t;
            }
            _ => {
                by_tid.insert(tid, recs.len());
                recs.push(ThreadRec {
                    comm,
                    base: if first { t } else { 0 },
                    last: t,
                });
            }
        }
    }
}

impl Sampler {
    fn start(pid: u32) -> Sampler {
        let (stop, stopped) = crossbeam_channel::bounded::<()>(0);
        let start_ticks = cpu_ticks(pid);
        let handle = std::thread::spawn(move || {
            let mut recs = Vec::new();
            let mut by_tid = std::collections::HashMap::new();
            sample(pid, true, &mut recs, &mut by_tid);
            while let Err(crossbeam_channel::RecvTimeoutError::Timeout) =
                stopped.recv_timeout(Duration::from_millis(50))
            {
                sample(pid, false, &mut recs, &mut by_tid);
            }
            sample(pid, false, &mut recs, &mut by_tid);
            recs
        });
        Sampler {
            stop,
            handle,
            pid,
            start_ticks,
        }
    }

    /// CPU seconds by thread name (digits folded to N), largest first, and
    /// the process total.
    fn finish(self, tck: f64) -> (Vec<(String, f64, usize)>, f64) {
        let _ = self.stop.send(());
        let recs = self.handle.join().expect("sampler");
        let total = (cpu_ticks(self.pid) - self.start_ticks) as f64 / tck;
        let mut by: std::collections::BTreeMap<String, (u64, usize)> = Default::default();
        for r in recs {
            let name: String = r
                .comm
                .chars()
                .map(|c| if c.is_ascii_digit() { 'N' } else { c })
                .collect();
            let e = by.entry(name).or_default();
            e.0 += r.last.saturating_sub(r.base);
            e.1 += 1;
        }
        let mut v: Vec<(String, f64, usize)> = by
            .into_iter()
            .filter(|(_, (t, _))| *t > 0)
            .map(|(k, (t, n))| (k, t as f64 / tck, n))
            .collect();
        v.sort_by(|a, b| b.1.total_cmp(&a.1));
        (v, total)
    }
}

fn print_breakdown(title: &str, rows: &[(String, f64, usize)], total: f64) {
    println!();
    println!("### {title}");
    println!();
    println!("| daemon thread (name) | threads | CPU s | share |");
    println!("|---|---|---|---|");
    let mut sampled = 0.0;
    for (name, secs, n) in rows {
        sampled += secs;
        println!(
            "| {name} | {n} | {secs:.2} | {:.0}% |",
            secs / total.max(1e-9) * 100.0
        );
    }
    let rest = (total - sampled).max(0.0);
    println!(
        "| (threads shorter than a 50 ms poll) | - | {rest:.2} | {:.0}% |",
        rest / total.max(1e-9) * 100.0
    );
    println!("| **daemon process total** | - | {total:.2} | 100% |");
}

// ------------------------------------------------------ daemon clients

fn interactive_path(cmd: &[&str], tty: bool, stdin: bool) -> String {
    let mut p = "/v1/exec/interactive?project=demo&uid=demo-uid&deployment=hello".to_string();
    for c in cmd {
        p.push_str("&command=");
        p.push_str(&kubegate::kube::client::api::encode_segment(c));
    }
    p.push_str(&format!("&tty={tty}&stdin={stdin}"));
    p
}

/// Opens an interactive exec through the daemon and reads its target frame.
fn open_ws(d: &DaemonProc, cmd: &[&str], tty: bool, stdin: bool) -> Ws {
    let auth = format!("Bearer {}", d.token);
    let (mut ws, _) = d
        .ws(
            &interactive_path(cmd, tty, stdin),
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
fn ws_stdout(ws: &mut Ws) -> Vec<u8> {
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
fn ws_finish(mut ws: Ws) {
    let _ = ws.send(ClientFrame::Close.encode());
    while ws.read().is_ok() {}
}

/// A minimal keep-alive HTTP/1.1 client for `POST /v1/exec`.
/// Answers of the daemon that closed a keep-alive connection.
static HTTP_CLOSES: AtomicU64 = AtomicU64::new(0);

struct Http {
    addr: String,
    reader: BufReader<TcpStream>,
    writer: TcpStream,
}

impl Http {
    fn connect(addr: &str) -> Http {
        let s = TcpStream::connect(addr).expect("connect");
        s.set_nodelay(true).expect("nodelay");
        s.set_read_timeout(Some(Duration::from_secs(60)))
            .expect("timeout");
        Http {
            addr: addr.to_string(),
            reader: BufReader::new(s.try_clone().expect("clone")),
            writer: s,
        }
    }

    /// One request on the kept-alive connection; status and body. Reconnects
    /// after an answer that closes.
    fn exchange(&mut self, raw: &[u8]) -> (u16, Vec<u8>) {
        self.writer.write_all(raw).expect("write request");
        let mut line = String::new();
        self.reader.read_line(&mut line).expect("status line");
        let status: u16 = line
            .split(' ')
            .nth(1)
            .and_then(|c| c.parse().ok())
            .unwrap_or_else(|| panic!("bad status line {line:?}"));
        let (mut len, mut chunked, mut close) = (0usize, false, false);
        loop {
            line.clear();
            self.reader.read_line(&mut line).expect("header");
            let l = line.trim_end();
            if l.is_empty() {
                break;
            }
            let (k, v) = l.split_once(':').unwrap_or((l, ""));
            let (k, v) = (k.trim().to_ascii_lowercase(), v.trim().to_ascii_lowercase());
            match k.as_str() {
                "content-length" => len = v.parse().expect("content-length"),
                "transfer-encoding" => chunked = v.contains("chunked"),
                "connection" => close = v == "close",
                _ => {}
            }
        }
        let mut body = Vec::new();
        if chunked {
            loop {
                line.clear();
                self.reader.read_line(&mut line).expect("chunk size");
                let n = usize::from_str_radix(line.trim(), 16).expect("chunk size");
                let mut c = vec![0; n + 2];
                self.reader.read_exact(&mut c).expect("chunk");
                if n == 0 {
                    break;
                }
                body.extend_from_slice(&c[..n]);
            }
        } else {
            body.resize(len, 0);
            self.reader.read_exact(&mut body).expect("body");
        }
        if close {
            HTTP_CLOSES.fetch_add(1, Ordering::Relaxed);
            *self = Http::connect(&self.addr);
        }
        (status, body)
    }
}

// ------------------------------------------------------ figure 1

fn head_cmd() -> Vec<String> {
    ["head", "-c", &BYTES.to_string(), "/dev/zero"]
        .iter()
        .map(|s| s.to_string())
        .collect()
}

/// Seconds for 256 MiB through the daemon into a WebSocket client that
/// discards them (upgrade and target resolution included), and the number
/// of stdout frames they came in.
fn throughput_ws(d: &DaemonProc) -> (f64, u64) {
    let cmd = head_cmd();
    let cmd: Vec<&str> = cmd.iter().map(String::as_str).collect();
    let t0 = Instant::now();
    let mut ws = open_ws(d, &cmd, false, false);
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
    assert_eq!(n, BYTES, "stdout bytes through the daemon");
    (secs, frames)
}

/// The daemon's upstream leg alone: 256 MiB through `kube::remote`
/// straight to the sim, discarded; seconds and chunks.
fn throughput_direct(conn: &Connection, pod: &str) -> (f64, u64) {
    let opts = ExecOptions {
        stderr: false,
        ..ExecOptions::default()
    };
    let t0 = Instant::now();
    let p = remote::exec(conn, "demo", pod, Some("main"), &head_cmd(), opts).expect("exec");
    let (mut n, mut chunks) = (0u64, 0u64);
    for c in p.output().iter() {
        if let Output::Stdout(b) = c {
            n += b.len() as u64;
            chunks += 1;
        }
    }
    assert_eq!(p.wait().map(|s| s.code), Ok(0));
    let secs = t0.elapsed().as_secs_f64();
    assert_eq!(n, BYTES, "stdout bytes straight from the sim");
    (secs, chunks)
}

fn throughput_kubectl(d: &DaemonProc, pod: &str) -> f64 {
    let mut c = d.kubectl();
    c.args(["exec", "-n", "demo", pod, "-c", "main", "--"])
        .args(head_cmd())
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::inherit());
    let t0 = Instant::now();
    let st = c.status().expect("kubectl");
    let secs = t0.elapsed().as_secs_f64();
    assert!(st.success(), "kubectl exec: {st}");
    secs
}

fn cli_command(d: &DaemonProc) -> Command {
    let mut c = Command::new(KUBEGATE);
    c.args(["exec", "--server", &d.url, "--token", &d.token])
        .args(["--workspace", "demo/demo-uid", "hello", "--"]);
    c
}

/// Whether this kubegate binary has the `exec` CLI (built in parallel).
fn cli_available() -> bool {
    let out = Command::new(KUBEGATE)
        .args(["exec", "--help"])
        .stdin(Stdio::null())
        .output();
    match out {
        Ok(o) => {
            let text = format!(
                "{}{}",
                String::from_utf8_lossy(&o.stdout),
                String::from_utf8_lossy(&o.stderr)
            );
            !text.contains("unknown command") && text.contains("--workspace")
        }
        Err(_) => false,
    }
}

/// Seconds for 256 MiB through the daemon into `kubegate exec`, stdout to
/// /dev/null; Err with its stderr when the CLI fails.
fn throughput_cli(d: &DaemonProc) -> Result<f64, String> {
    let mut c = cli_command(d);
    c.args(head_cmd())
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped());
    let t0 = Instant::now();
    let out = c.output().map_err(|e| e.to_string())?;
    let secs = t0.elapsed().as_secs_f64();
    if out.status.success() {
        Ok(secs)
    } else {
        Err(format!(
            "{}: {}",
            out.status,
            String::from_utf8_lossy(&out.stderr).trim()
        ))
    }
}

fn mbps(secs: f64) -> f64 {
    BYTES as f64 / 1e6 / secs
}

fn figure_throughput(d: &DaemonProc, conn: &Connection, pod: &str, tck: f64) {
    let pid = d.child.id();
    let runs = runs();
    let cli = cli_available();
    let (mut k, mut w, mut c) = (Vec::new(), Vec::new(), Vec::new());
    let (mut kc, mut wc, mut cc) = (Vec::new(), Vec::new(), Vec::new());
    let (mut r, mut rc) = (Vec::new(), Vec::new());
    let mut cli_error = None;
    // Interleaved, so drift on a shared machine hits every path alike.
    for i in 0..runs {
        let (s, cpu) = with_cpu(pid, tck, || throughput_kubectl(d, pod));
        k.push(mbps(s));
        kc.push(cpu);
        let ((s, _), cpu) = with_cpu(pid, tck, || throughput_ws(d));
        w.push(mbps(s));
        wc.push(cpu);
        let ((s, _), cpu) = with_cpu(pid, tck, || throughput_direct(conn, pod));
        r.push(mbps(s));
        rc.push(cpu);
        if cli && cli_error.is_none() {
            match with_cpu(pid, tck, || throughput_cli(d)) {
                (Ok(s), cpu) => {
                    c.push(mbps(s));
                    cc.push(cpu);
                }
                (Err(e), _) => cli_error = Some(e),
            }
        }
        eprintln!(
            "throughput run {}: kubectl {:.0} MB/s, ws {:.0} MB/s, kube::remote {:.0} MB/s{}",
            i + 1,
            k[i],
            w[i],
            r[i],
            c.get(i)
                .map_or(String::new(), |v| format!(", cli {v:.0} MB/s"))
        );
    }
    let km = median(&k);
    println!();
    println!(
        "### exec relay throughput: {} MiB of /dev/zero, client discards (MB/s = 10^6 B/s; median of {runs}; daemon CPU includes its embedded sim)",
        BYTES >> 20
    );
    println!();
    println!("| path | MB/s | min-max | daemon CPU s/run | client CPU s/run | ratio vs kubectl | bar (>= 1.0x, target 2x) |");
    println!("|---|---|---|---|---|---|---|");
    let row = |name: &str, v: &[f64], cpu: &[Cpu], verdict: Option<&str>| {
        let m = median(v);
        let (lo, hi) = spread(v);
        let r = m / km;
        let verdict = match verdict {
            Some(v) => v,
            None if r >= 2.0 => "holds (target met)",
            None => bar(r >= 1.0),
        };
        let dc: Vec<f64> = cpu.iter().map(|c| c.daemon).collect();
        let cc: Vec<f64> = cpu.iter().map(|c| c.client).collect();
        println!(
            "| {name} | {m:.0} | {lo:.0}-{hi:.0} | {:.2} | {:.2} | {r:.2} | {verdict} |",
            median(&dc),
            median(&cc)
        );
    };
    row("kubectl exec straight to the sim", &k, &kc, Some("peer"));
    row(
        "kubegate daemon, WebSocket client (tungstenite)",
        &w,
        &wc,
        None,
    );
    if !cli {
        println!("| kubegate exec CLI | - | - | - | - | - | not measured: this binary has no `exec` command yet |");
    } else if let Some(e) = cli_error {
        println!("| kubegate exec CLI | - | - | - | - | - | not measured: the CLI failed ({e}) |");
    } else {
        row("kubegate exec CLI, stdout to /dev/null", &c, &cc, None);
    }
    row(
        "breakdown: kube::remote straight to the sim (the daemon's upstream leg alone)",
        &r,
        &rc,
        Some("-"),
    );
    // One more run through the daemon, sampled per thread (not in the medians).
    let sampler = Sampler::start(pid);
    let (secs, frames) = throughput_ws(d);
    let (rows, total) = sampler.finish(tck);
    print_breakdown(
        &format!(
            "breakdown: one more WebSocket relay run ({:.0} MB/s, {frames} stdout frames of {} bytes on average), daemon CPU by thread",
            mbps(secs),
            BYTES / frames.max(1)
        ),
        &rows,
        total,
    );
}

// ------------------------------------------------------ figure 2

/// The tty `cat` printed its whole prompt line (so no newline is left to
/// arrive after it and be taken for an echo).
fn ready(seen: &[u8]) -> bool {
    seen.windows(READY.len()).any(|w| w == READY) && seen.last() == Some(&b'\n')
}

fn key(i: usize) -> u8 {
    b'a' + (i % 26) as u8
}

/// Microseconds per keystroke (after warm-up) through the daemon.
fn keys_daemon(d: &DaemonProc, tty: bool) -> Vec<f64> {
    let cmd: &[&str] = if tty {
        &["sh", "-c", TTY_CAT]
    } else {
        &["cat"]
    };
    let mut ws = open_ws(d, cmd, tty, true);
    if tty {
        let mut seen = Vec::new();
        while !ready(&seen) {
            seen.extend(ws_stdout(&mut ws));
        }
    }
    let mut lat = Vec::with_capacity(KEYSTROKES);
    for i in 0..WARMUP_KEYS + KEYSTROKES {
        let b = key(i);
        let msg = ClientFrame::Stdin {
            data: vec![b],
            eof: false,
        }
        .encode();
        let t = Instant::now();
        ws.send(msg).expect("send keystroke");
        let echo = ws_stdout(&mut ws);
        let us = t.elapsed().as_secs_f64() * 1e6;
        assert_eq!(echo, [b], "echo of keystroke {i}");
        if i >= WARMUP_KEYS {
            lat.push(us);
        }
    }
    ws_finish(ws);
    lat
}

/// The same through `kube::remote` straight to the sim.
fn keys_direct(conn: &Connection, pod: &str, tty: bool) -> Vec<f64> {
    let cmd: Vec<String> = if tty {
        vec!["sh".into(), "-c".into(), TTY_CAT.into()]
    } else {
        vec!["cat".into()]
    };
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
    let p = remote::exec(conn, "demo", pod, Some("main"), &cmd, opts).expect("exec");
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
    let mut lat = Vec::with_capacity(KEYSTROKES);
    for i in 0..WARMUP_KEYS + KEYSTROKES {
        let b = key(i);
        let t = Instant::now();
        stdin.write(&[b]).expect("stdin");
        let echo = next();
        let us = t.elapsed().as_secs_f64() * 1e6;
        assert_eq!(echo, [b], "echo of keystroke {i}");
        if i >= WARMUP_KEYS {
            lat.push(us);
        }
    }
    let _ = p.controller().cancel();
    drop(stdin);
    drop(out);
    let _ = p.wait();
    lat
}

/// The same through `kubectl exec -i` (no tty: kubectl refuses one on
/// pipes) driven over its stdin and stdout pipes.
fn keys_kubectl(d: &DaemonProc, pod: &str) -> Vec<f64> {
    let mut c = d.kubectl();
    c.args(["exec", "-i", "-n", "demo", pod, "-c", "main", "--", "cat"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit());
    let mut child = c.spawn().expect("kubectl");
    let mut stdin = child.stdin.take().expect("stdin");
    let mut stdout = child.stdout.take().expect("stdout");
    let mut lat = Vec::with_capacity(KEYSTROKES);
    for i in 0..WARMUP_KEYS + KEYSTROKES {
        let b = key(i);
        let t = Instant::now();
        stdin.write_all(&[b]).expect("kubectl stdin");
        let mut echo = [0u8; 1];
        stdout.read_exact(&mut echo).expect("kubectl stdout");
        let us = t.elapsed().as_secs_f64() * 1e6;
        assert_eq!(echo, [b], "echo of keystroke {i}");
        if i >= WARMUP_KEYS {
            lat.push(us);
        }
    }
    drop(stdin);
    let mut rest = Vec::new();
    let _ = stdout.read_to_end(&mut rest);
    common::terminate(&mut child, Duration::from_secs(20));
    lat
}

/// Median over runs of each run's p50 and p99, in ms.
struct Pct {
    p50: Vec<f64>,
    p99: Vec<f64>,
}

impl Pct {
    fn new() -> Pct {
        Pct {
            p50: Vec::new(),
            p99: Vec::new(),
        }
    }
    fn push(&mut self, us: &[f64]) {
        self.p50.push(percentile(us, 50.0) / 1e3);
        self.p99.push(percentile(us, 99.0) / 1e3);
    }
    fn med(&self) -> (f64, f64) {
        (median(&self.p50), median(&self.p99))
    }
}

fn figure_keystrokes(d: &DaemonProc, conn: &Connection, pod: &str) {
    let runs = runs();
    let (mut dn, mut cn, mut kn, mut dt, mut ct) =
        (Pct::new(), Pct::new(), Pct::new(), Pct::new(), Pct::new());
    for i in 0..runs {
        dn.push(&keys_daemon(d, false));
        cn.push(&keys_direct(conn, pod, false));
        kn.push(&keys_kubectl(d, pod));
        dt.push(&keys_daemon(d, true));
        ct.push(&keys_direct(conn, pod, true));
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
        let a50: Vec<f64> = dp.p50.iter().zip(&cp.p50).map(|(x, y)| x - y).collect();
        let a99: Vec<f64> = dp.p99.iter().zip(&cp.p99).map(|(x, y)| x - y).collect();
        let (a, b) = (median(&a50), median(&a99));
        println!(
            "| **added by the daemon** (daemon - kube::remote) | {tty} | {a:.3} | {b:.3} | {} |",
            bar(a <= 1.0 && b <= 1.0)
        );
    };
    row("kubegate daemon, WebSocket client", "no", &dn);
    row("kube::remote straight to the sim", "no", &cn);
    row("kubectl exec -i straight to the sim (pipes)", "no", &kn);
    added("no", &dn, &cn);
    row("kubegate daemon, WebSocket client", "yes (raw)", &dt);
    row("kube::remote straight to the sim", "yes (raw)", &ct);
    added("yes (raw)", &dt, &ct);
}

// ------------------------------------------------------ figure 3

struct Rate {
    ok: u64,
    failed: u64,
    secs: f64,
    /// Per-call latencies, ms.
    lat: Vec<f64>,
    cpu: Cpu,
    first_error: Option<String>,
}

impl Rate {
    fn per_sec(&self) -> f64 {
        self.ok as f64 / self.secs
    }
}

/// Runs `call` from `callers` threads until `window` passes; each thread
/// first builds its own state with `setup`.
fn rate<S>(
    pid: u32,
    tck: f64,
    callers: usize,
    window: Duration,
    setup: impl Fn(usize) -> S + Sync,
    call: impl Fn(&mut S) -> Result<(), String> + Sync,
) -> Rate {
    let ok = AtomicU64::new(0);
    let failed = AtomicU64::new(0);
    let lat = Mutex::new(Vec::new());
    let first_error = Mutex::new(None);
    let (d0, c0) = (cpu_ticks(pid), client_ticks());
    let t0 = Instant::now();
    let deadline = t0 + window;
    std::thread::scope(|s| {
        for i in 0..callers {
            let (ok, failed, lat, first_error) = (&ok, &failed, &lat, &first_error);
            let (setup, call) = (&setup, &call);
            s.spawn(move || {
                let mut st = setup(i);
                let mut mine = Vec::new();
                while Instant::now() < deadline {
                    let t = Instant::now();
                    match call(&mut st) {
                        Ok(()) => {
                            mine.push(t.elapsed().as_secs_f64() * 1e3);
                            ok.fetch_add(1, Ordering::Relaxed);
                        }
                        Err(e) => {
                            failed.fetch_add(1, Ordering::Relaxed);
                            first_error.lock().unwrap().get_or_insert(e);
                        }
                    }
                }
                lat.lock().unwrap().extend(mine);
            });
        }
    });
    let secs = t0.elapsed().as_secs_f64();
    Rate {
        ok: ok.into_inner(),
        failed: failed.into_inner(),
        secs,
        lat: lat.into_inner().unwrap(),
        cpu: Cpu {
            daemon: (cpu_ticks(pid) - d0) as f64 / tck,
            client: (client_ticks() - c0) as f64 / tck,
        },
        first_error: first_error.into_inner().unwrap(),
    }
}

fn exec_request(d: &DaemonProc) -> Vec<u8> {
    let body = serde_json::json!({
        "workspace": {"project": "demo", "uid": "demo-uid"},
        "deployment": "hello",
        "command": ["true"],
    })
    .to_string();
    format!(
        "POST /v1/exec HTTP/1.1\r\nHost: {}\r\nAuthorization: Bearer {}\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\r\n{body}",
        d.addr,
        d.token,
        body.len()
    )
    .into_bytes()
}

fn rate_daemon(d: &DaemonProc, tck: f64, callers: usize, window: Duration) -> Rate {
    let raw = exec_request(d);
    rate(
        d.child.id(),
        tck,
        callers,
        window,
        |_| Http::connect(&d.addr),
        |h| {
            let (st, body) = h.exchange(&raw);
            let v: serde_json::Value = serde_json::from_slice(&body).unwrap_or_default();
            if st == 200 && v["exitCode"] == 0 {
                Ok(())
            } else {
                Err(format!("{st} {}", String::from_utf8_lossy(&body)))
            }
        },
    )
}

fn rate_kubectl(d: &DaemonProc, pod: &str, tck: f64) -> Rate {
    rate(
        d.child.id(),
        tck,
        RATE_CALLERS,
        KUBECTL_RATE_WINDOW,
        |i| -> PathBuf {
            // One cache folder per caller: kubectls must not share one.
            let c = d.dir.join(format!("kube-cache-rate-{i}"));
            std::fs::create_dir_all(&c).expect("cache dir");
            c
        },
        |cache| {
            let out = Command::new("kubectl")
                .arg("--kubeconfig")
                .arg(&d.kubeconfig)
                .arg("--cache-dir")
                .arg(&*cache)
                .args(["exec", "-n", "demo", pod, "-c", "main", "--", "true"])
                .stdin(Stdio::null())
                .output()
                .map_err(|e| e.to_string())?;
            if out.status.success() {
                Ok(())
            } else {
                Err(String::from_utf8_lossy(&out.stderr).into_owned())
            }
        },
    )
}

fn rate_direct(
    d: &DaemonProc,
    conn: &Connection,
    pod: &str,
    tck: f64,
    callers: usize,
    window: Duration,
) -> Rate {
    let cmd = vec!["true".to_string()];
    rate(
        d.child.id(),
        tck,
        callers,
        window,
        |_| conn.clone(),
        |conn| {
            let p = remote::exec(
                conn,
                "demo",
                pod,
                Some("main"),
                &cmd,
                ExecOptions::default(),
            )
            .map_err(|e| e.to_string())?;
            for _ in p.output().iter() {}
            match p.wait() {
                Ok(s) if s.code == 0 => Ok(()),
                other => Err(format!("{other:?}")),
            }
        },
    )
}

/// The daemon's first step of every exec, alone: `exec::resolve` (GET the
/// Deployment, LIST its pods) with the project's client straight to the
/// sim: one `Client` shared by every caller, as the daemon does, or one
/// per caller (its own connection pool).
fn rate_resolve(d: &DaemonProc, conn: &Connection, tck: f64, shared: bool) -> Rate {
    use kubegate::exec::resolve::{resolve, Ownership};
    use kubegate::exec::validate::ExecSpec;
    let own = Ownership {
        managed_by: "kubegate".into(),
        uid_label: "kubegate.dev/workspace-uid".into(),
    };
    let spec = ExecSpec {
        project: "demo".into(),
        uid: "demo-uid".into(),
        deployment: "hello".into(),
        container: None,
        command: vec!["true".into()],
    };
    let one = kubegate::kube::client::Client::new(conn.clone()).expect("client");
    rate(
        d.child.id(),
        tck,
        RATE_CALLERS,
        DIRECT_RATE_WINDOW,
        |_| {
            if shared {
                one.clone()
            } else {
                kubegate::kube::client::Client::new(conn.clone()).expect("client")
            }
        },
        |client| {
            resolve(client, &own, &spec)
                .map(|_| ())
                .map_err(|e| format!("{e:?}"))
        },
    )
}

fn figure_rate(d: &DaemonProc, conn: &Connection, pod: &str, tck: f64) {
    let dr = rate_daemon(d, tck, RATE_CALLERS, RATE_WINDOW);
    eprintln!(
        "rate: daemon {:.0}/s ({} answers closed their connection)",
        dr.per_sec(),
        HTTP_CLOSES.load(Ordering::Relaxed)
    );
    let kr = rate_kubectl(d, pod, tck);
    eprintln!("rate: kubectl {:.0}/s", kr.per_sec());
    let cr = rate_direct(d, conn, pod, tck, RATE_CALLERS, DIRECT_RATE_WINDOW);
    eprintln!("rate: kube::remote {:.0}/s", cr.per_sec());
    // One caller: the latency of one exec without contention.
    let d1 = rate_daemon(d, tck, 1, SERIAL_WINDOW);
    let c1 = rate_direct(d, conn, pod, tck, 1, SERIAL_WINDOW);
    eprintln!(
        "rate: one caller: daemon {:.0}/s, kube::remote {:.0}/s",
        d1.per_sec(),
        c1.per_sec()
    );
    let rr = rate_resolve(d, conn, tck, true);
    eprintln!("rate: resolve, shared client {:.0}/s", rr.per_sec());
    let rp = rate_resolve(d, conn, tck, false);
    eprintln!("rate: resolve, client per caller {:.0}/s", rp.per_sec());
    println!();
    println!(
        "### non-tty exec rate: `true`, {RATE_CALLERS} callers in parallel (CPU % of one core; daemon = kubegate serve with its embedded sim; client = the bench process and its children)"
    );
    println!();
    println!("| caller | ok | failed | s | per s | p50 ms | p99 ms | daemon CPU % | client CPU % | CPU ms per call (daemon + client) | bar (>= 200 execs/s) |");
    println!("|---|---|---|---|---|---|---|---|---|---|---|");
    let row = |name: &str, r: &Rate, verdict: &str| {
        let n = r.ok.max(1) as f64;
        println!(
            "| {name} | {} | {} | {:.1} | {:.0} | {:.1} | {:.1} | {:.0} | {:.0} | {:.2} + {:.2} | {verdict} |",
            r.ok,
            r.failed,
            r.secs,
            r.per_sec(),
            percentile(&r.lat, 50.0),
            percentile(&r.lat, 99.0),
            r.cpu.daemon / r.secs * 100.0,
            r.cpu.client / r.secs * 100.0,
            r.cpu.daemon * 1e3 / n,
            r.cpu.client * 1e3 / n,
        );
    };
    row(
        "kubegate POST /v1/exec, keep-alive HTTP/1.1",
        &dr,
        bar(dr.per_sec() >= 200.0 && dr.failed == 0),
    );
    row(
        "kubectl exec -- true straight to the sim (process per call)",
        &kr,
        "peer",
    );
    row("breakdown: kube::remote exec straight to the sim", &cr, "-");
    row("breakdown: kubegate POST /v1/exec, ONE caller", &d1, "-");
    row(
        "breakdown: kube::remote exec straight to the sim, ONE caller",
        &c1,
        "-",
    );
    row(
        "breakdown: exec::resolve alone (GET deployment + LIST pods), one Client shared (as the daemon)",
        &rr,
        "-",
    );
    row(
        "breakdown: exec::resolve alone, one Client per caller",
        &rp,
        "-",
    );
    for (name, r) in [
        ("daemon", &dr),
        ("kubectl", &kr),
        ("kube::remote", &cr),
        ("resolve", &rr),
        ("resolve per caller", &rp),
    ] {
        if let Some(e) = &r.first_error {
            eprintln!("rate: first {name} error: {e}");
        }
    }
    // One more short window through the daemon, sampled per thread.
    let sampler = Sampler::start(d.child.id());
    let sr = rate_daemon(d, tck, RATE_CALLERS, DIRECT_RATE_WINDOW);
    let (rows, total) = sampler.finish(tck);
    print_breakdown(
        &format!(
            "breakdown: {:.0} s more of POST /v1/exec ({:.0}/s), daemon CPU by thread",
            sr.secs,
            sr.per_sec()
        ),
        &rows,
        total,
    );
}

// ------------------------------------------------------ figure 4

struct Idle {
    rss_kib: u64,
    threads: u64,
    cpu_pct: f64,
}

fn active_execs(d: &DaemonProc) -> Option<i64> {
    let (st, body) = d.request("GET", "/metrics", Some(&d.token), None);
    if st != 200 {
        return None;
    }
    Some(
        String::from_utf8_lossy(&body)
            .lines()
            .filter(|l| l.starts_with("kubegate_exec_active"))
            .filter_map(|l| l.rsplit(' ').next()?.parse::<i64>().ok())
            .sum(),
    )
}

/// The idle daemon over IDLE_WINDOW (a measurement window, not a wait).
fn idle(d: &DaemonProc, tck: f64) -> Idle {
    wait_for("no exec session active", Duration::from_secs(30), || {
        (active_execs(d) == Some(0)).then_some(())
    });
    let pid = d.child.id();
    let before = cpu_ticks(pid);
    let t0 = Instant::now();
    std::thread::sleep(IDLE_WINDOW);
    let cpu = (cpu_ticks(pid) - before) as f64 / tck;
    Idle {
        rss_kib: status_field(pid, "VmRSS:"),
        threads: status_field(pid, "Threads:"),
        cpu_pct: cpu / t0.elapsed().as_secs_f64() * 100.0,
    }
}

fn figure_idle(fresh: &Idle, after: &Idle) {
    println!();
    println!(
        "### daemon idle footprint (embedded sim and its demo pod included; CPU over {} s)",
        IDLE_WINDOW.as_secs()
    );
    println!();
    println!("| when | RSS MiB | threads | CPU % | bar (CPU < 2%) |");
    println!("|---|---|---|---|---|");
    for (name, i) in [("fresh start", fresh), ("after figures 1-3", after)] {
        println!(
            "| {name} | {:.1} | {} | {:.2} | {} |",
            i.rss_kib as f64 / 1024.0,
            i.threads,
            i.cpu_pct,
            bar(i.cpu_pct < 2.0)
        );
    }
}

// ------------------------------------------------------ the run

#[test]
#[ignore]
fn bench_exec() {
    let _w = common::bench::watchdog("bench_exec", 290);
    // RUST_LOG=info, as the example runs: one log line per exec is part of the cost.
    let d = DaemonProc::start();
    let tck = clock_ticks();
    let yaml = std::fs::read_to_string(&d.kubeconfig).expect("the sim's kubeconfig");
    let conn = kubegate::kube::config::from_kubeconfig_str(&yaml, &d.dir.join("state"), None)
        .expect("a connection from the sim's kubeconfig");

    let fresh = idle(&d, tck);

    // Warm-up, and the pod both paths exec into.
    let (st, body) = d.request(
        "POST",
        "/v1/exec",
        Some(&d.token),
        Some(br#"{"workspace":{"project":"demo","uid":"demo-uid"},"deployment":"hello","command":["true"]}"#),
    );
    assert_eq!(st, 200, "{}", String::from_utf8_lossy(&body));
    let v: serde_json::Value = serde_json::from_slice(&body).expect("JSON");
    let pod = v["pod"].as_str().expect("pod").to_string();
    eprintln!("bench_exec: daemon {} pod demo/{pod}", d.url);

    figure_throughput(&d, &conn, &pod, tck);
    figure_keystrokes(&d, &conn, &pod);
    figure_rate(&d, &conn, &pod, tck);
    let after = idle(&d, tck);
    figure_idle(&fresh, &after);
}
