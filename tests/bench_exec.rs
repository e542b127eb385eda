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
use common::exec_bench::{
    head_cmd, mbps, runs, spread, throughput_direct, throughput_kubectl, throughput_ws, Target,
};
use common::{wait_for, KUBEGATE};
use kubegate::kube::connection::Connection;
use kubegate::kube::remote::{self, ExecOptions};
use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;
use std::time::{Duration, Instant};

const BYTES: u64 = 268_435_456;
const RATE_CALLERS: usize = 8;
const RATE_WINDOW: Duration = Duration::from_secs(5);
const KUBECTL_RATE_WINDOW: Duration = Duration::from_secs(4);
const DIRECT_RATE_WINDOW: Duration = Duration::from_secs(3);
const SERIAL_WINDOW: Duration = Duration::from_secs(2);
const IDLE_WINDOW: Duration = Duration::from_secs(10);
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
    c.args(head_cmd(BYTES))
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

fn figure_throughput(d: &DaemonProc, conn: &Connection, pod: &str, tck: f64) {
    let t = Target::demo(pod);
    let pid = d.child.id();
    let runs = runs();
    let cli = cli_available();
    let (mut k, mut w, mut c) = (Vec::new(), Vec::new(), Vec::new());
    let (mut kc, mut wc, mut cc) = (Vec::new(), Vec::new(), Vec::new());
    let (mut r, mut rc) = (Vec::new(), Vec::new());
    let mut cli_error = None;
    // Interleaved, so drift on a shared machine hits every path alike.
    for i in 0..runs {
        let (s, cpu) = with_cpu(pid, tck, || throughput_kubectl(d.kubectl(), &t, BYTES));
        k.push(mbps(BYTES, s));
        kc.push(cpu);
        let ((s, _), cpu) = with_cpu(pid, tck, || throughput_ws(d, &t, BYTES));
        w.push(mbps(BYTES, s));
        wc.push(cpu);
        let ((s, _), cpu) = with_cpu(pid, tck, || throughput_direct(conn, &t, BYTES));
        r.push(mbps(BYTES, s));
        rc.push(cpu);
        if cli && cli_error.is_none() {
            match with_cpu(pid, tck, || throughput_cli(d)) {
                (Ok(s), cpu) => {
                    c.push(mbps(BYTES, s));
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
    let (secs, frames) = throughput_ws(d, &t, BYTES);
    let (rows, total) = sampler.finish(tck);
    print_breakdown(
        &format!(
            "breakdown: one more WebSocket relay run ({:.0} MB/s, {frames} stdout frames of {} bytes on average), daemon CPU by thread",
            mbps(BYTES, secs),
            BYTES / frames.max(1)
        ),
        &rows,
        total,
    );
}

// ------------------------------------------------------ figure 2

fn figure_keystrokes(d: &DaemonProc, conn: &Connection, pod: &str) {
    common::exec_bench::figure_keystrokes(d, conn, &Target::demo(pod), || d.kubectl(), "the sim");
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
