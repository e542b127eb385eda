//! The watch-session benchmark (docs/RELIABILITY.md#the-bars: "session start overhead" and
//! "idle footprint"; run by `scripts/bench.sh`, ignored by the test suite).
//! Nothing here asserts a timing: it prints tables saying which bars hold.
//!
//! Set-up: a separate `kubegate sim` (plain HTTP on loopback, `SimProc`) and
//! a `kubegate serve` in `[cluster] mode = "kubeconfig"` pointed at the sim's
//! kubeconfig, so every figure read from /proc about the DAEMON excludes the
//! sim, its API server threads and the session pods' processes (the agent,
//! the apps, the shims). Sessions reach their pods through the API server's
//! pod proxy (`pod_access = "api-proxy"`, the kubeconfig-mode default).
//!
//! 1. Session start overhead: `POST /v1/sessions` (one `streams` app) to the
//!    `running` status event read from the session's SSE stream, minus the
//!    sim's own work: pod creation to Running. The sim stamps pods in whole
//!    seconds only (`creationTimestamp`, `startedAt`, the Ready condition's
//!    `lastTransitionTime` all come from `kube::time::rfc3339`, which drops
//!    the fraction), which cannot resolve a 50 ms bar. So the bench watches
//!    the session pods on the sim itself (a `kube::client` Watcher) and
//!    takes the sim's work as (first event showing the pod Running with an
//!    IP) - (its ADDED event), both stamped on arrival with a monotonic
//!    clock; the whole-second timestamps are printed beside it. Bar: overhead
//!    p50 <= 50 ms.
//! 2. Idle footprint: daemon RSS and threads with 0, 100 and up to 1,000
//!    idle sessions of 3 `streams` apps each (no ports, no subscriber),
//!    started from 8 threads in parallel; RSS per session (delta / N) at 100
//!    and at the largest N, and whether they agree within 25% (linear). Bar:
//!    <= 300 KiB per idle session, linear. The ramp stops early, and says
//!    why, when the machine's task count (pid_max bounds threads too) or the
//!    sim's or daemon's open files near their limit, or its time runs out.
//! 3. Threads per idle session and the daemon's CPU % over 10 s with N idle
//!    sessions (bar: < 2%), with where RSS sits (thread stacks vs heap, from
//!    /proc/PID/smaps) and CPU by thread name.
//!
//! `BENCH_SESSION_STARTS` (default 30) sets the starts behind figure 1;
//! `BENCH_IDLE_MAX` (default 1000) the largest N of figure 2.
//! `cargo test --release --test bench_sessions -- --ignored --nocapture --test-threads 1`

mod common;

use common::bench::{bar, clock_ticks, cpu_ticks, env_usize, percentile, status_field};

use common::daemon::raw_exchange;
use common::{first_line, temp_dir, terminate, wait_for, SimProc, KUBEGATE};
use kubegate::kube::client::{Api, Client, Pod, WatchEvent, WatchParams, WatchStopper};
use serde_json::{json, Value};
use std::collections::{BTreeMap, HashMap};
use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// This run's bearer token: random (the daemon refuses the published demo
/// token outside sim mode).
fn token() -> &'static str {
    static T: std::sync::OnceLock<String> = std::sync::OnceLock::new();
    T.get_or_init(|| common::daemon::random_token().0)
}
const IDLE_WINDOW: Duration = Duration::from_secs(10);
const STARTERS: usize = 8;
/// How long the ramp to the largest N may take before it stops where it is.
const RAMP_BUDGET: Duration = Duration::from_secs(240);
/// Threads the machine must keep free for everything else (pid_max bounds
/// threads as well as processes).
const TASK_RESERVE: u64 = 4096;

// ---------------------------------------------------------------- /proc

fn open_fds(pid: u32) -> u64 {
    std::fs::read_dir(format!("/proc/{pid}/fd")).map_or(0, |d| d.count() as u64)
}

/// Soft open-file limit of `pid`.
fn fd_limit(pid: u32) -> u64 {
    std::fs::read_to_string(format!("/proc/{pid}/limits"))
        .unwrap_or_default()
        .lines()
        .find(|l| l.starts_with("Max open files"))
        .and_then(|l| l.split_whitespace().nth(3))
        .and_then(|n| n.parse().ok())
        .unwrap_or(1024)
}

/// Threads and processes on the whole machine (the 4th field of loadavg).
fn machine_tasks() -> u64 {
    std::fs::read_to_string("/proc/loadavg")
        .ok()
        .and_then(|s| {
            s.split_whitespace()
                .nth(3)
                .and_then(|f| f.split('/').nth(1))
                .and_then(|n| n.parse().ok())
        })
        .unwrap_or(0)
}

fn pid_max() -> u64 {
    std::fs::read_to_string("/proc/sys/kernel/pid_max")
        .ok()
        .and_then(|s| s.trim().parse().ok())
        .unwrap_or(32_768)
}

/// Per-thread (tid -> (name, CPU ns)) of a process. The time comes from
/// `/proc/PID/task/TID/schedstat` (nanoseconds on the CPU): the clock-tick
/// counts of `stat` truncate each thread's share to 10 ms, which with
/// hundreds of mostly idle threads hid where an idle daemon's CPU went.
fn task_cpu_ns(pid: u32) -> HashMap<u32, (String, u64)> {
    let mut out = HashMap::new();
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
        let ns = std::fs::read_to_string(e.path().join("schedstat"))
            .ok()
            .and_then(|t| t.split_whitespace().next()?.parse::<u64>().ok())
            .unwrap_or(0);
        out.insert(tid, (fold_name(&s[open + 1..close]), ns));
    }
    out
}

/// Thread names with the per-session part folded: `session-<id>` (the
/// owner thread, its name cut to 15 bytes by the kernel) becomes
/// `session-<id>`, digits become N.
fn fold_name(comm: &str) -> String {
    const KNOWN: &[&str] = &[
        "session-work",
        "session-watch",
        "session-attach",
        "session-io-out",
        "session-io-in",
        "session-relay",
        "session-relays",
        // "session-relay-pump", as the kernel keeps it (15 bytes).
        "session-relay-p",
        "session-pods",
        "session-probe",
    ];
    if let Some(rest) = comm.strip_prefix("session-") {
        if !KNOWN.contains(&comm) && rest.len() >= 6 {
            return "session-<id> (owner)".into();
        }
    }
    comm.chars()
        .map(|c| if c.is_ascii_digit() { 'N' } else { c })
        .collect()
}

/// RSS (KiB) of a process split by what holds it, from /proc/PID/smaps:
/// thread stacks (a read-write anonymous mapping right after a small
/// PROT_NONE guard, as glibc lays out pthread stacks), other anonymous
/// memory (the malloc heap and arenas), and file-backed pages.
#[derive(Default, Clone, Copy)]
struct RssSplit {
    stacks: u64,
    stack_count: u64,
    anon: u64,
    file: u64,
}

fn rss_split(pid: u32) -> RssSplit {
    let text = std::fs::read_to_string(format!("/proc/{pid}/smaps")).unwrap_or_default();
    let mut out = RssSplit::default();
    // (start, end, perms, path) of the previous mapping.
    let mut prev: Option<(u64, u64, String)> = None;
    let mut cur: Option<(u64, u64, String, String)> = None;
    let close = |m: &Option<(u64, u64, String, String)>,
                 rss: u64,
                 prev: &Option<(u64, u64, String)>,
                 out: &mut RssSplit| {
        let Some((start, _end, perms, path)) = m else {
            return;
        };
        let guard_before = prev.as_ref().is_some_and(|(ps, pe, pp)| {
            *pe == *start && pp.starts_with("---p") && pe - ps <= 64 * 1024
        });
        if !path.is_empty() && !path.starts_with('[') {
            out.file += rss;
        } else if perms.starts_with("rw-p") && path.is_empty() && guard_before {
            out.stacks += rss;
            out.stack_count += 1;
        } else {
            out.anon += rss;
        }
    };
    let mut rss = 0u64;
    for line in text.lines() {
        let first = line.split_whitespace().next().unwrap_or("");
        if first.contains('-') && first.chars().next().is_some_and(|c| c.is_ascii_hexdigit()) {
            let mut parts = line.split_whitespace();
            let range = parts.next().unwrap_or("");
            let perms = parts.next().unwrap_or("").to_string();
            let path = parts.nth(3).unwrap_or("").to_string();
            let (a, b) = range.split_once('-').unwrap_or(("0", "0"));
            let (a, b) = (
                u64::from_str_radix(a, 16).unwrap_or(0),
                u64::from_str_radix(b, 16).unwrap_or(0),
            );
            close(&cur, rss, &prev, &mut out);
            if let Some((s, e, p, _)) = cur.take() {
                prev = Some((s, e, p));
            }
            cur = Some((a, b, perms, path));
            rss = 0;
        } else if let Some(r) = line.strip_prefix("Rss:") {
            rss = r
                .split_whitespace()
                .next()
                .and_then(|n| n.parse().ok())
                .unwrap_or(0);
        }
    }
    close(&cur, rss, &prev, &mut out);
    out
}

// ------------------------------------------------------ the daemon

/// `kubegate serve` in kubeconfig mode against a separate sim.
struct Daemon {
    child: Child,
    addr: String,
    dir: PathBuf,
    log: PathBuf,
}

impl Daemon {
    fn start(sim: &SimProc, max_sessions: usize) -> Daemon {
        let dir = temp_dir("bench-sessions-daemon");
        let config = dir.join("kubegate.toml");
        let state = dir.join("state");
        let kubeconfig = sim.kubeconfig.display().to_string();
        let text = format!(
            r#"[server]
listen = "127.0.0.1:0"
state_dir = "{state}"
max_connections = 4096

[cluster]
mode = "kubeconfig"
kubeconfig = "{kubeconfig}"

[sessions]
max_sessions = {max_sessions}
max_sessions_per_principal = {max_sessions}
idle_secs = 86400
app_runner = {app_runner}

[[principal]]
name = "demo"
token_sha256 = "{digest}"
workspaces = []
may_start_sessions = true
"#,
            state = state.display(),
            // The default (on); BENCH_APP_RUNNER=0 measures apps run directly.
            app_runner = std::env::var("BENCH_APP_RUNNER").map_or(true, |v| v != "0"),
            digest = common::daemon::token_digest(token()),
        );
        std::fs::write(&config, text).expect("write config");
        let log = dir.join("daemon.log");
        let log_file = std::fs::File::create(&log).expect("create log");
        let mut child = Command::new(KUBEGATE)
            .arg("serve")
            .arg("--config")
            .arg(&config)
            .env("RUST_LOG", "info")
            .env_remove("NOTIFY_SOCKET")
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::from(log_file))
            .spawn()
            .expect("spawn kubegate serve");
        let Some(line) = first_line(&mut child, Duration::from_secs(60)) else {
            panic!(
                "kubegate serve printed no line; log:\n{}",
                std::fs::read_to_string(&log).unwrap_or_default()
            );
        };
        let Some(url) = line.trim().strip_prefix("kubegate listening on ") else {
            let _ = child.kill();
            let _ = child.wait();
            panic!(
                "unexpected first line {line:?}; log:\n{}",
                std::fs::read_to_string(&log).unwrap_or_default()
            );
        };
        let addr = url.trim_start_matches("http://").to_string();
        Daemon {
            child,
            addr,
            dir,
            log,
        }
    }

    fn pid(&self) -> u32 {
        self.child.id()
    }

    fn json(&self, method: &str, path: &str, body: Option<&Value>) -> (u16, Value) {
        let mut head = format!(
            "{method} {path} HTTP/1.1\r\nHost: {}\r\nConnection: close\r\nAuthorization: Bearer {}\r\n",
            self.addr,
            token()
        );
        let b = body.map(|v| v.to_string().into_bytes()).unwrap_or_default();
        if body.is_some() {
            head.push_str(&format!(
                "Content-Type: application/json\r\nContent-Length: {}\r\n",
                b.len()
            ));
        }
        head.push_str("\r\n");
        let mut raw = head.into_bytes();
        raw.extend_from_slice(&b);
        let (st, resp) = raw_exchange(&self.addr, &raw);
        let v = serde_json::from_slice(&resp)
            .unwrap_or_else(|_| Value::String(String::from_utf8_lossy(&resp).into_owned()));
        (st, v)
    }

    fn log_tail(&self) -> String {
        let t = std::fs::read_to_string(&self.log).unwrap_or_default();
        let lines: Vec<&str> = t.lines().collect();
        lines[lines.len().saturating_sub(20)..].join("\n")
    }
}

impl Drop for Daemon {
    fn drop(&mut self) {
        if let Ok(None) = self.child.try_wait() {
            terminate(&mut self.child, Duration::from_secs(20));
        }
        let _ = std::fs::remove_dir_all(self.dir.join("state").join("sessions"));
    }
}

/// A blocking reader of a session's event stream: `(arrival, event, data)`.
struct Sse {
    r: BufReader<TcpStream>,
    pending: String,
}

impl Sse {
    fn open(d: &Daemon, id: &str) -> Sse {
        let mut s = TcpStream::connect(&d.addr).expect("connect");
        s.set_read_timeout(Some(Duration::from_secs(60)))
            .expect("timeout");
        s.set_nodelay(true).expect("nodelay");
        write!(
            s,
            "GET /v1/sessions/{id}/events HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer {}\r\nAccept: text/event-stream\r\n\r\n",
            token()
        )
        .expect("write");
        let mut r = BufReader::new(s);
        let mut status = String::new();
        r.read_line(&mut status).expect("status line");
        assert!(status.contains(" 200 "), "event stream refused: {status}");
        loop {
            let mut l = String::new();
            r.read_line(&mut l).expect("header");
            if l == "\r\n" || l.is_empty() {
                break;
            }
        }
        Sse {
            r,
            pending: String::new(),
        }
    }

    fn next(&mut self) -> Option<(Instant, String, Value)> {
        loop {
            if let Some(end) = self.pending.find("\n\n") {
                let block: String = self.pending.drain(..end + 2).collect();
                let (mut event, mut data) = (String::new(), String::new());
                for line in block.lines() {
                    if let Some(v) = line.strip_prefix("event: ") {
                        event = v.to_string();
                    } else if let Some(v) = line.strip_prefix("data: ") {
                        data.push_str(v);
                    }
                }
                if event.is_empty() {
                    continue;
                }
                let data = serde_json::from_str(&data).unwrap_or(Value::Null);
                return Some((Instant::now(), event, data));
            }
            let mut size = String::new();
            if self.r.read_line(&mut size).ok()? == 0 {
                return None;
            }
            let n = usize::from_str_radix(size.trim(), 16).ok()?;
            if n == 0 {
                return None;
            }
            let mut buf = vec![0u8; n + 2];
            self.r.read_exact(&mut buf).ok()?;
            self.pending.push_str(&String::from_utf8_lossy(&buf[..n]));
        }
    }
}

// ------------------------------------------------------ the sim's clock

/// When the bench's own watch on the sim saw each session's pod ADDED and
/// first Running with an IP (keyed by the session-id label).
#[derive(Default, Clone, Copy, Debug)]
struct PodSeen {
    added: Option<Instant>,
    running: Option<Instant>,
}

struct PodClock {
    seen: Arc<Mutex<HashMap<String, PodSeen>>>,
    stopper: WatchStopper,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl PodClock {
    fn start(client: &Client) -> PodClock {
        let api = Api::<Pod>::namespaced(client, "default");
        let watcher = api.watch(WatchParams::labels("kubegate.dev/mode=watch"));
        let stopper = watcher.stopper();
        let seen: Arc<Mutex<HashMap<String, PodSeen>>> = Arc::default();
        let (ready_tx, ready_rx) = crossbeam_channel::bounded::<()>(1);
        let s2 = seen.clone();
        let thread = std::thread::spawn(move || {
            for ev in watcher {
                let now = Instant::now();
                let Ok(ev) = ev else { continue };
                let pods = match ev {
                    WatchEvent::Added(p) | WatchEvent::Modified(p) => vec![(p, false)],
                    WatchEvent::Resynced { items, .. } => {
                        let _ = ready_tx.try_send(());
                        items.into_iter().map(|p| (p, true)).collect()
                    }
                    WatchEvent::Deleted(_) => continue,
                };
                let mut m = s2.lock().unwrap();
                for (p, listed) in pods {
                    let Some(sid) = p
                        .metadata
                        .labels
                        .as_ref()
                        .and_then(|l| l.get("kubegate.dev/session-id"))
                    else {
                        continue;
                    };
                    let e = m.entry(sid.clone()).or_default();
                    if listed {
                        continue;
                    }
                    e.added.get_or_insert(now);
                    let st = p.status.as_ref();
                    let running = st.and_then(|s| s.phase.as_deref()) == Some("Running")
                        && st.and_then(|s| s.pod_ip.as_deref()).is_some();
                    if running {
                        e.running.get_or_insert(now);
                    }
                }
            }
        });
        ready_rx
            .recv_timeout(Duration::from_secs(30))
            .expect("the bench's pod watch lists");
        PodClock {
            seen,
            stopper,
            thread: Some(thread),
        }
    }

    fn get(&self, sid: &str) -> PodSeen {
        self.seen
            .lock()
            .unwrap()
            .get(sid)
            .copied()
            .unwrap_or_default()
    }
}

impl Drop for PodClock {
    fn drop(&mut self) {
        self.stopper.stop();
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

fn session_pods(client: &Client, label: &str) -> Vec<Value> {
    let api = Api::<Pod>::namespaced(client, "default");
    match api.list(&kubegate::kube::client::ListParams::labels(label)) {
        Ok(l) => l
            .items
            .iter()
            .map(|p| serde_json::to_value(p).unwrap_or(Value::Null))
            .collect(),
        Err(e) => panic!("listing session pods: {e}"),
    }
}

fn ts_secs(v: &Value) -> Option<i64> {
    let t = kubegate::kube::time::parse_rfc3339(v.as_str()?)?;
    Some(t.duration_since(std::time::UNIX_EPOCH).ok()?.as_secs() as i64)
}

// ------------------------------------------------------ figure 1

fn one_app_body() -> Value {
    json!({
        "apps": [{"name": "web", "entry": "main.sh", "command": ["sh", "main.sh"], "io": "streams"}],
        "bundle": {"files": [{"path": "main.sh", "content": "while :; do sleep 1; done"}]}
    })
}

struct Start {
    total_ms: f64,
    sim_ms: f64,
    reply_ms: f64,
    /// First arrival of each progress phase, ms after the POST.
    phases: BTreeMap<String, f64>,
    /// Running after created, by the sim's whole-second timestamps
    /// (containers' startedAt, the Ready condition).
    stamped_started_s: i64,
    stamped_ready_s: i64,
}

fn start_one(d: &Daemon, clock: &PodClock, client: &Client) -> Start {
    let t0 = Instant::now();
    let (st, v) = d.json("POST", "/v1/sessions", Some(&one_app_body()));
    let reply = Instant::now();
    assert_eq!(st, 201, "start: {v}");
    let id = v["sessionId"].as_str().expect("sessionId").to_string();
    let mut sse = Sse::open(d, &id);
    let mut phases = BTreeMap::new();
    let running = loop {
        let Some((at, event, data)) = sse.next() else {
            panic!("the event stream of {id} ended; log:\n{}", d.log_tail());
        };
        let ms = (at - t0).as_secs_f64() * 1e3;
        match (event.as_str(), data["status"].as_str()) {
            ("status", Some("running")) => break at,
            ("status", Some("failed" | "stopped")) => {
                panic!("session {id}: {data}; log:\n{}", d.log_tail())
            }
            ("progress", _) => {
                let p = data["phase"].as_str().unwrap_or("?").to_string();
                phases.entry(p).or_insert(ms);
            }
            _ => {}
        }
    };
    drop(sse);
    let seen = wait_for(
        "the bench's watch to see the pod",
        Duration::from_secs(30),
        || {
            let s = clock.get(&id);
            s.running.map(|r| (s.added.unwrap_or(r), r))
        },
    );
    let pods = session_pods(client, &format!("kubegate.dev/session-id={id}"));
    let pod = pods.first().cloned().unwrap_or(Value::Null);
    let created = ts_secs(&pod["metadata"]["creationTimestamp"]).unwrap_or(0);
    let started = pod["status"]["containerStatuses"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|c| ts_secs(&c["state"]["running"]["startedAt"]))
        .max()
        .unwrap_or(created);
    let ready = pod["status"]["conditions"]
        .as_array()
        .into_iter()
        .flatten()
        .find(|c| c["type"] == "Ready")
        .and_then(|c| ts_secs(&c["lastTransitionTime"]))
        .unwrap_or(created);
    let (st, _) = d.json("DELETE", &format!("/v1/sessions/{id}"), None);
    assert_eq!(st, 204);
    Start {
        total_ms: (running - t0).as_secs_f64() * 1e3,
        sim_ms: (seen.1 - seen.0).as_secs_f64() * 1e3,
        reply_ms: (reply - t0).as_secs_f64() * 1e3,
        phases,
        stamped_started_s: started - created,
        stamped_ready_s: ready - created,
    }
}

fn wait_no_pods(client: &Client, within: Duration) {
    wait_for("every session pod gone", within, || {
        session_pods(client, "kubegate.dev/mode=watch")
            .is_empty()
            .then_some(())
    });
}

fn figure_start(d: &Daemon, clock: &PodClock, client: &Client, n: usize) {
    // Two warm-up starts (first connections, page faults), not counted.
    for _ in 0..2 {
        start_one(d, clock, client);
    }
    let mut runs = Vec::new();
    for i in 0..n {
        let s = start_one(d, clock, client);
        eprintln!(
            "start {}: total {:.1} ms, sim {:.1} ms, overhead {:.1} ms",
            i + 1,
            s.total_ms,
            s.sim_ms,
            s.total_ms - s.sim_ms
        );
        runs.push(s);
    }
    wait_no_pods(client, Duration::from_secs(60));
    let total: Vec<f64> = runs.iter().map(|s| s.total_ms).collect();
    let sim: Vec<f64> = runs.iter().map(|s| s.sim_ms).collect();
    let over: Vec<f64> = runs.iter().map(|s| s.total_ms - s.sim_ms).collect();
    let reply: Vec<f64> = runs.iter().map(|s| s.reply_ms).collect();
    let o50 = percentile(&over, 50.0);
    println!();
    println!(
        "### session start overhead: POST /v1/sessions (one `streams` app) to the `running` event, {n} starts one after another (ms)"
    );
    println!();
    println!("| figure | p50 ms | p99 ms | min | max | bar (overhead p50 <= 50 ms) |");
    println!("|---|---|---|---|---|---|");
    let row = |name: &str, v: &[f64], verdict: &str| {
        let lo = v.iter().copied().fold(f64::INFINITY, f64::min);
        let hi = v.iter().copied().fold(f64::NEG_INFINITY, f64::max);
        println!(
            "| {name} | {:.1} | {:.1} | {lo:.1} | {hi:.1} | {verdict} |",
            percentile(v, 50.0),
            percentile(v, 99.0)
        );
    };
    row("total: POST to `running` read from SSE", &total, "-");
    row(
        "sim's own work: pod ADDED to Running+IP, as the bench's watch on the sim saw them",
        &sim,
        "-",
    );
    row(
        "**overhead** (total - sim's work, per start)",
        &over,
        bar(o50 <= 50.0),
    );
    row("breakdown: POST answered (201)", &reply, "-");
    let stamped: Vec<i64> = runs.iter().map(|s| s.stamped_started_s).collect();
    let ready: Vec<i64> = runs.iter().map(|s| s.stamped_ready_s).collect();
    let count = |v: &[i64], k: i64| v.iter().filter(|x| **x == k).count();
    println!(
        "| the sim's own timestamps (whole seconds): startedAt - creationTimestamp = 0 s in {} starts, 1 s in {}, more in {}; Ready lastTransitionTime - creationTimestamp = 0 s in {}, 1 s in {} | - | - | - | - | not used: 1 s granularity |",
        count(&stamped, 0),
        count(&stamped, 1),
        stamped.iter().filter(|x| **x > 1).count(),
        count(&ready, 0),
        count(&ready, 1),
    );
    println!();
    println!("### where a start's time goes: first arrival of each progress phase on the SSE stream (ms after the POST; the stream is opened after the 201, so earlier events arrive together then)");
    println!();
    println!("| progress phase | p50 ms | p99 ms |");
    println!("|---|---|---|");
    let mut names: Vec<String> = runs.iter().flat_map(|s| s.phases.keys().cloned()).collect();
    names.sort_by(|a, b| {
        let at = |p: &str| {
            percentile(
                &runs
                    .iter()
                    .filter_map(|s| s.phases.get(p).copied())
                    .collect::<Vec<_>>(),
                50.0,
            )
        };
        at(a).total_cmp(&at(b))
    });
    names.dedup();
    for p in names {
        let v: Vec<f64> = runs
            .iter()
            .filter_map(|s| s.phases.get(&p).copied())
            .collect();
        println!(
            "| {p} | {:.1} | {:.1} |",
            percentile(&v, 50.0),
            percentile(&v, 99.0)
        );
    }
    println!(
        "| `running` | {:.1} | {:.1} |",
        percentile(&total, 50.0),
        percentile(&total, 99.0)
    );
}

// ------------------------------------------------------ figure 2, 3

fn idle_body() -> Value {
    let app = |n: &str| json!({"name": n, "entry": "main.sh", "command": ["sh", "main.sh"], "io": "streams"});
    json!({
        "apps": [app("a"), app("b"), app("c")],
        // One long sleep per loop: the same processes as `sleep 1` without a
        // fork per app per second.
        "bundle": {"files": [{"path": "main.sh", "content": "while :; do sleep 3600; done"}]}
    })
}

/// Why the ramp must stop now, if it must.
struct Limits {
    sim_pid: u32,
    daemon_pid: u32,
    task_ceiling: u64,
    sim_fd_limit: u64,
    daemon_fd_limit: u64,
}

impl Limits {
    fn check(&self) -> Option<String> {
        let tasks = machine_tasks();
        if tasks >= self.task_ceiling {
            return Some(format!(
                "machine tasks {tasks} reached pid_max {} minus a reserve of {TASK_RESERVE} for the rest of the machine",
                pid_max()
            ));
        }
        let sfd = open_fds(self.sim_pid);
        if sfd * 100 >= self.sim_fd_limit * 95 {
            return Some(format!(
                "the sim's open files {sfd} reached 95% of its limit {}",
                self.sim_fd_limit
            ));
        }
        let dfd = open_fds(self.daemon_pid);
        if dfd * 100 >= self.daemon_fd_limit * 95 {
            return Some(format!(
                "the daemon's open files {dfd} reached 95% of its limit {}",
                self.daemon_fd_limit
            ));
        }
        None
    }
}

struct Ramp {
    ids: Vec<String>,
    failed: Vec<String>,
    secs: f64,
    stopped: Option<String>,
}

/// Starts sessions from STARTERS threads until `want` run (or a limit or
/// `budget` stops it); each thread POSTs one, polls GET until `running`.
fn ramp(d: &Daemon, want: usize, limits: &Limits, budget: Duration) -> Ramp {
    let t0 = Instant::now();
    let next = AtomicUsize::new(0);
    let ids = Mutex::new(Vec::new());
    let failed = Mutex::new(Vec::new());
    let stopped: Mutex<Option<String>> = Mutex::new(None);
    let checked = Mutex::new(Instant::now() - Duration::from_secs(1));
    let body = idle_body();
    std::thread::scope(|s| {
        for _ in 0..STARTERS {
            s.spawn(|| loop {
                if stopped.lock().unwrap().is_some() {
                    return;
                }
                {
                    let mut c = checked.lock().unwrap();
                    if c.elapsed() >= Duration::from_millis(500) {
                        *c = Instant::now();
                        let why = limits.check().or_else(|| {
                            (t0.elapsed() >= budget).then(|| {
                                format!("the ramp's time budget ({} s) ran out", budget.as_secs())
                            })
                        });
                        if let Some(w) = why {
                            stopped.lock().unwrap().get_or_insert(w);
                            return;
                        }
                    }
                }
                if next.fetch_add(1, Ordering::SeqCst) >= want {
                    return;
                }
                let (st, v) = d.json("POST", "/v1/sessions", Some(&body));
                if st != 201 {
                    let mut f = failed.lock().unwrap();
                    f.push(format!("POST {st}: {v}"));
                    if f.len() >= 5 {
                        stopped
                            .lock()
                            .unwrap()
                            .get_or_insert(format!("starts failing: {v}"));
                    }
                    continue;
                }
                let id = v["sessionId"].as_str().unwrap_or_default().to_string();
                let deadline = Instant::now() + Duration::from_secs(120);
                let mut pause = Duration::from_millis(20);
                let outcome = loop {
                    let (_, g) = d.json("GET", &format!("/v1/sessions/{id}"), None);
                    match g["status"].as_str() {
                        Some("running") => break Ok(()),
                        Some("failed" | "stopped" | "suspended") => break Err(g.to_string()),
                        _ => {}
                    }
                    if Instant::now() >= deadline {
                        break Err(format!("not running after 120 s: {g}"));
                    }
                    std::thread::sleep(pause);
                    pause = (pause * 2).min(Duration::from_millis(200));
                };
                match outcome {
                    Ok(()) => ids.lock().unwrap().push(id),
                    Err(e) => {
                        ids.lock().unwrap().push(id);
                        let mut f = failed.lock().unwrap();
                        f.push(e.clone());
                        if f.len() >= 5 {
                            stopped
                                .lock()
                                .unwrap()
                                .get_or_insert(format!("starts failing: {e}"));
                        }
                    }
                }
            });
        }
    });
    Ramp {
        ids: ids.into_inner().unwrap(),
        failed: failed.into_inner().unwrap(),
        secs: t0.elapsed().as_secs_f64(),
        stopped: stopped.into_inner().unwrap(),
    }
}

struct Footprint {
    n: usize,
    rss_kib: u64,
    threads: u64,
    fds: u64,
    cpu_pct: f64,
    split: RssSplit,
    /// CPU seconds over the window by thread name, largest first.
    cpu_by_name: Vec<(String, f64)>,
    /// Threads by name.
    names: BTreeMap<String, usize>,
    sim_rss_kib: u64,
    sim_threads: u64,
    sim_fds: u64,
    machine_tasks: u64,
}

/// The daemon over IDLE_WINDOW (a measurement window, not a wait).
fn footprint(d: &Daemon, sim: &SimProc, n: usize, tck: f64) -> Footprint {
    let pid = d.pid();
    let before = cpu_ticks(pid);
    let tasks0 = task_cpu_ns(pid);
    let t0 = Instant::now();
    std::thread::sleep(IDLE_WINDOW);
    let cpu = (cpu_ticks(pid) - before) as f64 / tck;
    let secs = t0.elapsed().as_secs_f64();
    let tasks1 = task_cpu_ns(pid);
    let mut by: BTreeMap<String, f64> = BTreeMap::new();
    let mut names: BTreeMap<String, usize> = BTreeMap::new();
    for (tid, (name, t)) in &tasks1 {
        let base = tasks0
            .get(tid)
            .filter(|(n0, t0)| n0 == name && t0 <= t)
            .map_or(0, |(_, t0)| *t0);
        *by.entry(name.clone()).or_default() += (t - base) as f64 / 1e9;
        *names.entry(name.clone()).or_default() += 1;
    }
    let mut cpu_by_name: Vec<(String, f64)> = by.into_iter().filter(|(_, s)| *s > 0.0).collect();
    cpu_by_name.sort_by(|a, b| b.1.total_cmp(&a.1));
    let sp = sim.child.id();
    Footprint {
        n,
        rss_kib: status_field(pid, "VmRSS:"),
        threads: status_field(pid, "Threads:"),
        fds: open_fds(pid),
        cpu_pct: cpu / secs * 100.0,
        split: rss_split(pid),
        cpu_by_name,
        names,
        sim_rss_kib: status_field(sp, "VmRSS:"),
        sim_threads: status_field(sp, "Threads:"),
        sim_fds: open_fds(sp),
        machine_tasks: machine_tasks(),
    }
}

fn running_count(d: &Daemon) -> usize {
    let (_, l) = d.json("GET", "/v1/sessions", None);
    l["sessions"]
        .as_array()
        .map_or(0, |a| a.iter().filter(|s| s["status"] == "running").count())
}

fn figure_idle(
    d: &Daemon,
    sim: &SimProc,
    client: &Client,
    want_max: usize,
    tck: f64,
) -> Vec<String> {
    let limits = Limits {
        sim_pid: sim.child.id(),
        daemon_pid: d.pid(),
        task_ceiling: pid_max().saturating_sub(TASK_RESERVE),
        sim_fd_limit: fd_limit(sim.child.id()),
        daemon_fd_limit: fd_limit(d.pid()),
    };
    let mut all_ids = Vec::new();
    let mut fps = Vec::new();
    let mut ramps: Vec<(usize, Ramp)> = Vec::new();
    fps.push(footprint(d, sim, 0, tck));
    eprintln!("idle: N=0 measured");
    let mut have = 0usize;
    for target in [100usize, want_max] {
        if target <= have {
            continue;
        }
        let budget = if target == 100 {
            Duration::from_secs(120)
        } else {
            RAMP_BUDGET
        };
        let r = ramp(d, target - have, &limits, budget);
        eprintln!(
            "idle: ramp to {target}: {} started in {:.1} s, {} failed, stopped: {:?}",
            r.ids.len(),
            r.secs,
            r.failed.len(),
            r.stopped
        );
        for f in r.failed.iter().take(3) {
            eprintln!("idle: failure: {f}");
        }
        all_ids.extend(r.ids.iter().cloned());
        let n = running_count(d);
        have = all_ids.len();
        let stop = r.stopped.is_some();
        ramps.push((target, r));
        if n == 0 {
            break;
        }
        fps.push(footprint(d, sim, n, tck));
        eprintln!("idle: N={n} measured");
        if stop {
            break;
        }
    }
    let base = &fps[0];
    println!();
    println!(
        "### idle footprint of the DAEMON alone (`kubegate serve` in kubeconfig mode; the sim, its API server and every session pod's processes run in a separate `kubegate sim` and are NOT counted); sessions of 3 `streams` apps, no ports, no subscriber; CPU over {} s",
        IDLE_WINDOW.as_secs()
    );
    println!();
    println!("| idle sessions N | daemon RSS MiB | RSS per session KiB ((RSS_N - RSS_0) / N) | threads | threads per session | open files | daemon CPU % | bar (<= 300 KiB per session; CPU < 2%) |");
    println!("|---|---|---|---|---|---|---|---|");
    for f in &fps {
        let (per, tper) = if f.n == 0 {
            (f64::NAN, f64::NAN)
        } else {
            (
                (f.rss_kib as f64 - base.rss_kib as f64) / f.n as f64,
                (f.threads as f64 - base.threads as f64) / f.n as f64,
            )
        };
        let verdict = if f.n == 0 {
            format!("CPU {}", bar(f.cpu_pct < 2.0))
        } else {
            format!("RSS {}; CPU {}", bar(per <= 300.0), bar(f.cpu_pct < 2.0))
        };
        println!(
            "| {} | {:.1} | {} | {} | {} | {} | {:.2} | {verdict} |",
            f.n,
            f.rss_kib as f64 / 1024.0,
            if per.is_nan() {
                "-".into()
            } else {
                format!("{per:.0}")
            },
            f.threads,
            if tper.is_nan() {
                "-".into()
            } else {
                format!("{tper:.2}")
            },
            f.fds,
            f.cpu_pct,
        );
    }
    if fps.len() >= 3 {
        let per = |f: &Footprint| (f.rss_kib as f64 - base.rss_kib as f64) / f.n as f64;
        let (a, b) = (per(&fps[1]), per(&fps[fps.len() - 1]));
        let ratio = b / a;
        println!(
            "| **linearity**: per-session RSS at N={} / at N={} | - | {ratio:.2} | - | - | - | - | {} (within 25%) |",
            fps[fps.len() - 1].n,
            fps[1].n,
            bar((0.75..=1.25).contains(&ratio))
        );
    } else {
        println!("| **linearity** | - | not measured: only one N above 0 fitted | - | - | - | - | FAILS (not shown) |");
    }
    println!();
    println!("### how far the ramp got, and what limited it");
    println!();
    println!("| ramp to | started | failed | s | starts/s | stopped because |");
    println!("|---|---|---|---|---|---|");
    for (t, r) in &ramps {
        println!(
            "| {t} | {} | {} | {:.1} | {:.1} | {} |",
            r.ids.len(),
            r.failed.len(),
            r.secs,
            r.ids.len() as f64 / r.secs.max(1e-9),
            r.stopped.as_deref().unwrap_or("reached the target")
        );
    }
    println!();
    println!("### the rest of the machine at each N (context: what the limits see)");
    println!();
    println!("| N | sim RSS MiB | sim threads | sim open files (limit {}) | machine tasks (pid_max {}) | tasks per session |", limits.sim_fd_limit, pid_max());
    println!("|---|---|---|---|---|---|");
    for f in &fps {
        println!(
            "| {} | {:.1} | {} | {} | {} | {} |",
            f.n,
            f.sim_rss_kib as f64 / 1024.0,
            f.sim_threads,
            f.sim_fds,
            f.machine_tasks,
            if f.n == 0 {
                "-".into()
            } else {
                format!(
                    "{:.1}",
                    (f.machine_tasks as f64 - base.machine_tasks as f64) / f.n as f64
                )
            }
        );
    }
    print_idle_breakdown(base, &fps[fps.len() - 1]);
    let _ = client;
    all_ids
}

/// The idle figure's breakdown of the daemon at the largest N against
/// N = 0: where its RSS sits, its threads by name, and the fixed
/// per-session allocations.
fn print_idle_breakdown(base: &Footprint, last: &Footprint) {
    println!();
    println!(
        "### where the daemon's RSS sits (from /proc/PID/smaps), N = 0 and N = {}",
        last.n
    );
    println!();
    println!("| N | thread stacks KiB (count) | heap and other anonymous KiB | file-backed KiB | per session: stacks / heap KiB |");
    println!("|---|---|---|---|---|");
    for f in [base, last] {
        let per = |x: u64, y: u64| {
            if f.n == 0 {
                "-".to_string()
            } else {
                format!("{:.0}", (x as f64 - y as f64) / f.n as f64)
            }
        };
        println!(
            "| {} | {} ({}) | {} | {} | {} / {} |",
            f.n,
            f.split.stacks,
            f.split.stack_count,
            f.split.anon,
            f.split.file,
            per(f.split.stacks, base.split.stacks),
            per(f.split.anon, base.split.anon)
        );
    }
    println!();
    println!("### daemon threads by name at N = {}", last.n);
    println!();
    println!("| thread name | at N=0 | at N | per session | CPU s over the window |");
    println!("|---|---|---|---|---|");
    let mut names: Vec<(&String, &usize)> = last.names.iter().collect();
    names.sort_by(|a, b| b.1.cmp(a.1));
    for (name, n) in names {
        let b = base.names.get(name).copied().unwrap_or(0);
        let cpu = last
            .cpu_by_name
            .iter()
            .find(|(x, _)| x == name)
            .map_or(0.0, |(_, s)| *s);
        println!(
            "| {name} | {b} | {n} | {} | {cpu:.2} |",
            if last.n == 0 {
                "-".into()
            } else {
                format!("{:.2}", (*n as f64 - b as f64) / last.n as f64)
            }
        );
    }
    let sampled: f64 = last.cpu_by_name.iter().map(|(_, s)| s).sum();
    let total = last.cpu_pct / 100.0 * IDLE_WINDOW.as_secs_f64();
    println!(
        "| (threads that started or ended within the window: per-command `session-work`, e.g. checkpoints) | - | - | - | {:.2} |",
        (total - sampled).max(0.0)
    );
    println!(
        "| **daemon process total** | - | {} | - | {total:.2} |",
        last.threads
    );
    println!();
    println!("### fixed per-session allocations (from the types, for the RSS breakdown)");
    println!();
    println!("| what | bytes |");
    println!("|---|---|");
    let msg = std::mem::size_of::<kubegate::session::engine::Msg>();
    println!("| session inbox: `bounded(256)` of `engine::Msg` ({msg} B each), slots written at creation | {} |", 256 * msg);
    let out = std::mem::size_of::<kubegate::kube::remote::Output>();
    println!("| per attach: output channel `bounded(64)` of `kube::remote::Output` ({out} B each) | {} |", 64 * out);
    println!("| per attach WebSocket: tungstenite 0.30 read buffer (`WebSocketConfig::default()`, zero-filled up to its capacity on the first read) | {} |", 128 * 1024);
    println!("| per kube HTTP connection in use (the session's pod watch): ureq 3 input + output buffers (128 KiB each, default) | {} |", 256 * 1024);
}

/// Deletes every session (from a few threads), then follows their pods
/// going away (without failing: a table says how far it got; the sim's
/// stop kills whatever is left).
fn teardown(d: &Daemon, client: &Client, ids: &[String]) {
    let next = AtomicUsize::new(0);
    let refused = AtomicUsize::new(0);
    let t0 = Instant::now();
    std::thread::scope(|s| {
        for _ in 0..STARTERS {
            s.spawn(|| loop {
                let i = next.fetch_add(1, Ordering::SeqCst);
                let Some(id) = ids.get(i) else { return };
                let (st, _) = d.json("DELETE", &format!("/v1/sessions/{id}"), None);
                if st != 204 {
                    refused.fetch_add(1, Ordering::Relaxed);
                }
            });
        }
    });
    let deletes = t0.elapsed().as_secs_f64();
    // (seconds after the first DELETE, pods left, of them terminating)
    let mut trail: Vec<(f64, usize, usize)> = Vec::new();
    let deadline = Instant::now() + Duration::from_secs(240);
    let mut last_row = Instant::now() - Duration::from_secs(60);
    let mut pause = Duration::from_millis(50);
    loop {
        let pods = session_pods(client, "kubegate.dev/mode=watch");
        let terminating = pods
            .iter()
            .filter(|p| !p["metadata"]["deletionTimestamp"].is_null())
            .count();
        let row = (t0.elapsed().as_secs_f64(), pods.len(), terminating);
        if pods.is_empty() || last_row.elapsed() >= Duration::from_secs(15) {
            eprintln!("teardown: {row:?}");
            trail.push(row);
            last_row = Instant::now();
        }
        if pods.is_empty() || Instant::now() >= deadline {
            if !pods.is_empty() {
                trail.push(row);
            }
            break;
        }
        std::thread::sleep(pause);
        pause = (pause * 2).min(Duration::from_secs(1));
    }
    println!();
    println!(
        "### teardown: DELETE of {} sessions from {STARTERS} threads took {deletes:.1} s ({} not 204); session pods left on the sim afterwards",
        ids.len(),
        refused.load(Ordering::Relaxed)
    );
    println!();
    println!(
        "| s after the first DELETE | pods left | of them terminating (deletionTimestamp set) |"
    );
    println!("|---|---|---|");
    for (t, n, term) in trail {
        println!("| {t:.1} | {n} | {term} |");
    }
}

fn processes_in(dir: &Path) -> Vec<u32> {
    common::processes_under(dir)
}

// ------------------------------------------------------ the run

#[test]
#[ignore]
fn bench_sessions() {
    let _w = common::bench::watchdog("bench_sessions", 600);
    let starts = env_usize("BENCH_SESSION_STARTS", 30).max(1);
    let want_max = env_usize("BENCH_IDLE_MAX", 1000).max(100);
    let tck = clock_ticks();
    let mut sim = SimProc::start(&[]);
    let yaml = std::fs::read_to_string(&sim.kubeconfig).expect("the sim's kubeconfig");
    let conn = kubegate::kube::config::from_kubeconfig_str(&yaml, &sim.dir, None)
        .expect("a connection from the sim's kubeconfig");
    let client = Client::new(conn).expect("client");
    let mut d = Daemon::start(&sim, want_max + 100);
    eprintln!(
        "bench_sessions: daemon {} (pid {}), sim {} (pid {})",
        d.addr,
        d.pid(),
        sim.url,
        sim.child.id()
    );
    let clock = PodClock::start(&client);
    figure_start(&d, &clock, &client, starts);
    drop(clock);
    let ids = figure_idle(&d, &sim, &client, want_max, tck);
    teardown(&d, &client, &ids);
    let code = terminate(&mut d.child, Duration::from_secs(30));
    eprintln!("daemon exited with {code:?}");
    sim.stop();
    wait_for(
        "no process left in the sim's state folder",
        Duration::from_secs(60),
        || processes_in(&sim.state_dir).is_empty().then_some(()),
    );
}
