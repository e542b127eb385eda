//! Scale figures of the simulated API server (run by `scripts/bench.sh`,
//! ignored by the test suite): 5,000 pods and 2,000 open watches on this
//! machine, pod create rate, and watch event delivery latency (p50/p99).
//!
//! Pods carry the `sim.kubegate.dev/simulate` annotation, so no processes
//! start: this measures the API server, the store and the watch fan-out.
//! Each of the 2,000 watches follows one pod by `fieldSelector=metadata.name`
//! (the way the daemon watches its session pods); every pod records the
//! time its create was sent, and a watcher measures from there to the
//! arrival of its ADDED event.

mod common;

use common::SimProc;
use std::io::{BufRead, BufReader, Write};
use std::net::TcpStream;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

fn env_usize(name: &str, default: usize) -> usize {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

fn raise_nofile() {
    if let Ok(lim) = rustix::process::getrlimit(rustix::process::Resource::Nofile)
        .maximum
        .ok_or(())
    {
        let _ = rustix::process::setrlimit(
            rustix::process::Resource::Nofile,
            rustix::process::Rlimit {
                current: Some(lim),
                maximum: Some(lim),
            },
        );
    }
}

/// Reads one HTTP/1.1 chunked response body piece by piece.
struct Chunked<R: BufRead> {
    r: R,
}

impl<R: BufRead> Chunked<R> {
    fn next_chunk(&mut self) -> Option<Vec<u8>> {
        let mut line = String::new();
        if self.r.read_line(&mut line).ok()? == 0 {
            return None;
        }
        let size = usize::from_str_radix(line.trim(), 16).ok()?;
        if size == 0 {
            return None;
        }
        let mut buf = vec![0; size + 2];
        self.r.read_exact(&mut buf).ok()?;
        buf.truncate(size);
        Some(buf)
    }
}

fn percentile(sorted: &[f64], p: f64) -> f64 {
    if sorted.is_empty() {
        return f64::NAN;
    }
    let i = ((sorted.len() as f64 - 1.0) * p).round() as usize;
    sorted[i.min(sorted.len() - 1)]
}

fn rss_kib(pid: u32) -> u64 {
    std::fs::read_to_string(format!("/proc/{pid}/status"))
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("VmRSS:"))
                .and_then(|l| l.split_whitespace().nth(1))
                .and_then(|v| v.parse().ok())
        })
        .unwrap_or(0)
}

#[test]
#[ignore = "benchmark: run by scripts/bench.sh"]
fn sim_scale() {
    raise_nofile();
    let pods = env_usize("BENCH_PODS", 5_000);
    let watches = env_usize("BENCH_WATCHES", 2_000).min(pods);
    let writers = env_usize("BENCH_WRITERS", 8);
    let sim = SimProc::start(&["--namespace", "bench"]);
    let addr = sim.url.trim_start_matches("http://").to_string();
    let agent: ureq::Agent = ureq::Agent::config_builder()
        .http_status_as_error(false)
        .proxy(None)
        .build()
        .into();
    let list: serde_json::Value = agent
        .get(&format!("{}/api/v1/namespaces/bench/pods", sim.url))
        .call()
        .expect("list")
        .body_mut()
        .read_json()
        .expect("list json");
    let rv = list["metadata"]["resourceVersion"]
        .as_str()
        .unwrap_or("0")
        .to_string();

    // Open the watches, each on its own connection and thread.
    let latencies = Arc::new(Mutex::new(Vec::<f64>::with_capacity(watches)));
    let opened = Arc::new(AtomicUsize::new(0));
    let mut handles = Vec::new();
    let t_open = Instant::now();
    for i in 0..watches {
        let (addr, rv, lat, opened) = (addr.clone(), rv.clone(), latencies.clone(), opened.clone());
        handles.push(
            std::thread::Builder::new()
                .stack_size(64 * 1024)
                .spawn(move || {
                    let mut s = TcpStream::connect(&addr).expect("connect");
                    let req = format!(
                        "GET /api/v1/namespaces/bench/pods?watch=true&resourceVersion={rv}&timeoutSeconds=600&fieldSelector=metadata.name%3Dbench-{i} HTTP/1.1\r\nHost: {addr}\r\n\r\n"
                    );
                    s.write_all(req.as_bytes()).expect("write");
                    let mut r = BufReader::new(s);
                    let mut line = String::new();
                    loop {
                        line.clear();
                        if r.read_line(&mut line).unwrap_or(0) == 0 || line == "\r\n" {
                            break;
                        }
                    }
                    opened.fetch_add(1, Ordering::Relaxed);
                    let mut c = Chunked { r };
                    let mut dec = kubegate::kube::watch::WatchDecoder::new();
                    while let Some(chunk) = c.next_chunk() {
                        dec.push(&chunk);
                        while let Some(Ok(ev)) = dec.next_event() {
                            if ev.ty == kubegate::kube::watch::EventType::Added {
                                let sent: u128 = ev.object["metadata"]["annotations"]["bench/sent-ns"]
                                    .as_str()
                                    .and_then(|s| s.parse().ok())
                                    .unwrap_or(0);
                                let now = SystemTime::now().duration_since(UNIX_EPOCH).map(|d| d.as_nanos()).unwrap_or(0);
                                lat.lock().expect("lock").push((now.saturating_sub(sent)) as f64 / 1e6);
                                return;
                            }
                        }
                    }
                })
                .expect("spawn watcher"),
        );
    }
    common::wait_for("every watch to open", Duration::from_secs(120), || {
        (opened.load(Ordering::Relaxed) == watches).then_some(())
    });
    let open_secs = t_open.elapsed().as_secs_f64();

    // Create the pods from several writers on keep-alive connections.
    let t0 = Instant::now();
    let next = Arc::new(AtomicUsize::new(0));
    let mut ws = Vec::new();
    for _ in 0..writers {
        let (agent, url, next) = (agent.clone(), sim.url.clone(), next.clone());
        ws.push(std::thread::spawn(move || loop {
            let i = next.fetch_add(1, Ordering::Relaxed);
            if i >= pods {
                return;
            }
            let sent = SystemTime::now()
                .duration_since(UNIX_EPOCH)
                .map(|d| d.as_nanos())
                .unwrap_or(0);
            let pod = serde_json::json!({
                "apiVersion": "v1", "kind": "Pod",
                "metadata": {"name": format!("bench-{i}"), "annotations": {
                    "sim.kubegate.dev/simulate": "true", "bench/sent-ns": sent.to_string()}},
                "spec": {"containers": [{"name": "main", "image": "busybox"}]}
            });
            let r = agent
                .post(&format!("{url}/api/v1/namespaces/bench/pods"))
                .send_json(&pod)
                .expect("create");
            assert_eq!(r.status().as_u16(), 201);
        }));
    }
    for w in ws {
        w.join().expect("writer");
    }
    let create_secs = t0.elapsed().as_secs_f64();
    for h in handles {
        let _ = h.join();
    }
    let mut lat = latencies.lock().expect("lock").clone();
    lat.sort_by(|a, b| a.partial_cmp(b).unwrap_or(std::cmp::Ordering::Equal));
    let rss = rss_kib(sim.child.id());
    println!();
    println!("| figure | value |");
    println!("|---|---|");
    println!("| pods created | {pods} |");
    println!("| open watches (one pod each) | {watches} (opened in {open_secs:.2} s) |");
    println!(
        "| pod create rate ({writers} writers) | {:.0} pods/s |",
        pods as f64 / create_secs
    );
    println!(
        "| watch delivery latency p50 | {:.2} ms |",
        percentile(&lat, 0.50)
    );
    println!(
        "| watch delivery latency p99 | {:.2} ms |",
        percentile(&lat, 0.99)
    );
    println!("| events received | {} of {watches} |", lat.len());
    println!("| sim RSS | {} MiB |", rss / 1024);
    assert_eq!(lat.len(), watches, "every watcher must see its pod");
}
