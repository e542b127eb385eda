//! The TCP tunnel benchmark (docs/RELIABILITY.md#the-bars: "tunnel
//! throughput" and "tunnel set-up"; run by `scripts/bench.sh`, ignored by
//! the test suite). Nothing here asserts a timing: it prints a table saying
//! whether the bar holds.
//!
//! Set-up: one separate `kubegate sim` (plain HTTP on loopback) and two
//! `kubegate serve` in `mode = "kubeconfig"` against it, one with
//! `pod_access = "direct"` and one with `"api-proxy"`, each with a running
//! session whose pod serves a small TCP protocol on port 7000 (below). Three
//! forwarders give three local ports:
//!
//! - `kubegate port-forward SESSION :7000` through the direct daemon (local
//!   TCP -> the CLI -> one `kubegate.tunnel.v1` WebSocket per connection ->
//!   the daemon -> TCP to the pod IP);
//! - the same through the api-proxy daemon (the daemon -> `pods/portforward`
//!   on the API server, SPDY over a WebSocket -> the pod);
//! - the peer: `kubectl port-forward pod/P :7000` straight to the sim, to
//!   the direct daemon's session pod (local TCP -> kubectl -> SPDY over a
//!   WebSocket -> the sim -> the pod).
//!
//! Figures, each the median of `BENCH_TUNNEL_ROUNDS` (default 3) rounds
//! taken in turn over the three paths:
//! 1. one connection downloading `BENCH_TUNNEL_MIB` MiB (default 256) from
//!    the pod, and one uploading as much (the pod answers `ok` once it has
//!    read it all), in MiB/s;
//! 2. 8 connections at once, each downloading 1/8 of that (aggregate MiB/s);
//! 3. per-connection set-up: 100 sequential connections, each from
//!    `connect()` to the pod's one-byte answer (p50, p99 in ms). Through
//!    kubegate this is a new WebSocket to the daemon and a new connection to
//!    the pod (or a new stream pair on the daemon's SPDY connection in
//!    api-proxy mode); through kubectl a new stream pair on its one
//!    connection.
//!
//! Bar: the direct daemon's throughput >= 1.0x kubectl's, both directions,
//! one connection (docs/RELIABILITY.md). api-proxy and the set-up times are
//! reported beside it.
//!
//! `cargo test --release --test bench_tunnels -- --ignored --nocapture --test-threads 1`

mod common;

use common::bench::{bar, env_usize, median, percentile, watchdog};
use common::daemon::{DaemonProc, SseClient};
use common::{terminate, wait_for, SimProc, KUBEGATE};
use serde_json::{json, Value};
use std::io::{BufRead, BufReader, Read, Write};
use std::net::{Shutdown, TcpStream};
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

const T: Duration = Duration::from_secs(120);
const PORT: u16 = 7000;
const CHUNK: usize = 1 << 20;
/// The byte the pod's downloads are made of.
const FILL: u8 = 0x5a;

/// The pod's side: a 9-byte request (`D`/`U`/`P` and a big-endian u64
/// length). `D n`: the pod sends n bytes; `U n`: the pod reads n bytes,
/// then answers `ok`; `P`: the pod answers one byte. Then it half-closes
/// and drains until the client's eof.
const SERVER_PY: &str = r#"
import os, socket, struct, threading
ip = os.environ["POD_IP"]
BLOCK = memoryview(b"\x5a" * (1 << 20))
def serve(c):
    try:
        c.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        head = b""
        while len(head) < 9:
            d = c.recv(9 - len(head))
            if not d:
                return
            head += d
        op, n = head[:1], struct.unpack(">Q", head[1:])[0]
        if op == b"D":
            while n > 0:
                k = min(n, len(BLOCK))
                c.sendall(BLOCK[:k])
                n -= k
        elif op == b"U":
            buf = bytearray(1 << 20)
            while n > 0:
                k = c.recv_into(buf, min(n, len(buf)))
                if k == 0:
                    return
                n -= k
            c.sendall(b"ok")
        elif op == b"P":
            c.sendall(b"p")
        c.shutdown(socket.SHUT_WR)
        while c.recv(65536):
            pass
    except OSError:
        pass
    finally:
        c.close()
s = socket.socket()
s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
s.bind((ip, 7000))
s.listen(512)
while True:
    c, _ = s.accept()
    threading.Thread(target=serve, args=(c,), daemon=True).start()
"#;

fn daemon_config(kubeconfig: &std::path::Path, digest: &str, access: &str) -> String {
    format!(
        r#"[server]
listen = "127.0.0.1:0"
state_dir = "./state"
max_tunnels_per_principal = 256

[cluster]
mode = "kubeconfig"
kubeconfig = "{}"
session_namespace = "default"
pod_access = "{access}"

[[principal]]
name = "bench"
token_sha256 = "{digest}"
may_start_sessions = true
"#,
        kubeconfig.display()
    )
}

/// A daemon in `access` mode against `sim`, with a running session of
/// SERVER_PY: the daemon, the session id and the session's pod name.
fn daemon(sim: &SimProc, access: &str) -> (DaemonProc, String, String) {
    let (token, digest) = common::daemon::random_token();
    let d = DaemonProc::start_config(
        &daemon_config(&sim.kubeconfig, &digest, access),
        sim.kubeconfig.clone(),
        &token,
        "warn",
    );
    let body = json!({
        "apps": [{"name": "srv", "entry": "srv.py", "command": ["python3", "srv.py"],
                  "io": "streams", "runner": false}],
        "bundle": {"files": [{"path": "srv.py", "content": SERVER_PY}]}
    });
    let (id, mut sse) = d.create_session(&body);
    until_running(&mut sse);
    let pods = d.session_pods(&id);
    let pod = pods.first().expect("the session's pod").clone();
    (d, id, pod)
}

fn until_running(sse: &mut SseClient) {
    let seen = sse.until(|e| {
        e.event == "status" && matches!(e.data["status"].as_str(), Some("running" | "failed"))
    });
    assert_eq!(
        seen.last().map(|e| e.data["status"].clone()),
        Some(Value::from("running")),
        "{seen:#?}"
    );
}

/// A forwarder process and the local port of its first `Forwarding from
/// 127.0.0.1:L -> 7000` line (kubectl's and kubegate's lines agree).
struct Forwarder {
    child: Child,
    port: u16,
}

impl Forwarder {
    fn spawn(mut c: Command, what: &str) -> Forwarder {
        c.stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit());
        let mut child = c.spawn().unwrap_or_else(|e| panic!("spawn {what}: {e}"));
        let out = child.stdout.take().expect("stdout");
        let (tx, rx) = mpsc::channel();
        std::thread::spawn(move || {
            for line in BufReader::new(out).lines().map_while(Result::ok) {
                let port = line
                    .strip_prefix("Forwarding from 127.0.0.1:")
                    .and_then(|r| r.strip_suffix(&format!(" -> {PORT}")))
                    .and_then(|p| p.parse::<u16>().ok());
                if let Some(p) = port {
                    let _ = tx.send(p);
                }
                // Keep reading: `Handling connection for …` lines follow.
            }
        });
        let port = rx
            .recv_timeout(T)
            .unwrap_or_else(|_| panic!("{what} printed no Forwarding line"));
        let f = Forwarder { child, port };
        // The forwarder listens; the pod may still be binding its port.
        wait_for(&format!("{what}: the pod to answer"), T, || {
            ping(f.port).ok()
        });
        f
    }
}

impl Drop for Forwarder {
    fn drop(&mut self) {
        let _ = terminate(&mut self.child, Duration::from_secs(10));
    }
}

fn request(s: &mut TcpStream, op: u8, n: u64) -> std::io::Result<()> {
    let mut head = [0u8; 9];
    head[0] = op;
    head[1..].copy_from_slice(&n.to_be_bytes());
    s.write_all(&head)
}

fn connect(port: u16) -> std::io::Result<TcpStream> {
    let s = TcpStream::connect(("127.0.0.1", port))?;
    s.set_read_timeout(Some(T))?;
    s.set_write_timeout(Some(T))?;
    s.set_nodelay(true)?;
    Ok(s)
}

/// One connection: `P`, the time from connect() to the pod's byte.
fn ping(port: u16) -> std::io::Result<Duration> {
    let t0 = Instant::now();
    let mut s = connect(port)?;
    request(&mut s, b'P', 0)?;
    let mut b = [0u8; 1];
    s.read_exact(&mut b)?;
    let took = t0.elapsed();
    s.shutdown(Shutdown::Write)?;
    let mut rest = Vec::new();
    s.read_to_end(&mut rest)?;
    if b[0] != b'p' || !rest.is_empty() {
        return Err(std::io::Error::other("a wrong answer"));
    }
    Ok(took)
}

/// Downloads `n` bytes; panics unless exactly `n` bytes of FILL came.
fn download(port: u16, n: u64) -> Duration {
    let t0 = Instant::now();
    let mut s = connect(port).expect("connect");
    request(&mut s, b'D', n).expect("request");
    let mut buf = vec![0u8; CHUNK];
    let mut got = 0u64;
    loop {
        let k = s.read(&mut buf).expect("read the download");
        if k == 0 {
            break;
        }
        assert!(buf[..k].iter().all(|&b| b == FILL), "a wrong byte");
        got += k as u64;
    }
    let took = t0.elapsed();
    assert_eq!(got, n, "the download's length");
    took
}

/// Uploads `n` bytes; panics unless the pod says it read them all.
fn upload(port: u16, n: u64) -> Duration {
    let t0 = Instant::now();
    let mut s = connect(port).expect("connect");
    request(&mut s, b'U', n).expect("request");
    let block = vec![0xa5u8; CHUNK];
    let mut left = n;
    while left > 0 {
        let k = left.min(CHUNK as u64) as usize;
        s.write_all(&block[..k]).expect("write the upload");
        left -= k as u64;
    }
    let mut ok = [0u8; 2];
    s.read_exact(&mut ok).expect("the pod's ok");
    let took = t0.elapsed();
    assert_eq!(&ok, b"ok");
    let _ = s.shutdown(Shutdown::Write);
    took
}

/// `conns` connections downloading `each` bytes at once: the wall time.
fn parallel_download(port: u16, conns: usize, each: u64) -> Duration {
    let t0 = Instant::now();
    let workers: Vec<_> = (0..conns)
        .map(|_| std::thread::spawn(move || download(port, each)))
        .collect();
    for w in workers {
        w.join().expect("a download thread");
    }
    t0.elapsed()
}

fn mib_per_s(bytes: u64, d: Duration) -> f64 {
    bytes as f64 / (1024.0 * 1024.0) / d.as_secs_f64()
}

#[derive(Default)]
struct Figures {
    down: Vec<f64>,
    up: Vec<f64>,
    parallel: Vec<f64>,
    setup_ms: Vec<f64>,
}

#[test]
#[ignore = "benchmark: scripts/bench.sh"]
fn bench_tunnel_throughput_and_setup() {
    let _wd = watchdog("bench_tunnels", 1800);
    let mib = env_usize("BENCH_TUNNEL_MIB", 256) as u64;
    let rounds = env_usize("BENCH_TUNNEL_ROUNDS", 3).max(1);
    let setups = env_usize("BENCH_TUNNEL_SETUPS", 100).max(1);
    let bytes = mib << 20;
    let conns = 8usize;

    let sim = SimProc::start(&[]);
    let (direct, direct_id, pod) = daemon(&sim, "direct");
    let (proxy, proxy_id, _) = daemon(&sim, "api-proxy");
    let kubegate = |d: &DaemonProc, id: &str| {
        let mut c = Command::new(KUBEGATE);
        c.args(["port-forward", id, &format!(":{PORT}")])
            .env("KUBEGATE_SERVER", &d.url)
            .env("KUBEGATE_TOKEN", &d.token)
            .env_remove("KUBEGATE_WORKSPACE");
        c
    };
    let mut kubectl = sim.kubectl();
    kubectl.args([
        "-n",
        "default",
        "port-forward",
        &format!("pod/{pod}"),
        &format!(":{PORT}"),
    ]);
    let paths = [
        (
            "kubegate port-forward, daemon direct",
            Forwarder::spawn(kubegate(&direct, &direct_id), "kubegate (direct)"),
        ),
        (
            "kubegate port-forward, daemon api-proxy",
            Forwarder::spawn(kubegate(&proxy, &proxy_id), "kubegate (api-proxy)"),
        ),
        (
            "kubectl port-forward straight to the sim",
            Forwarder::spawn(kubectl, "kubectl"),
        ),
    ];

    let mut figures: Vec<Figures> = paths.iter().map(|_| Figures::default()).collect();
    for round in 0..rounds {
        for (i, (name, f)) in paths.iter().enumerate() {
            let d = download(f.port, bytes);
            let u = upload(f.port, bytes);
            let p = parallel_download(f.port, conns, bytes / conns as u64);
            eprintln!(
                "round {}: {name}: down {:.0} MiB/s, up {:.0} MiB/s, {conns} at once {:.0} MiB/s",
                round + 1,
                mib_per_s(bytes, d),
                mib_per_s(bytes, u),
                mib_per_s(bytes, p)
            );
            let fig = &mut figures[i];
            fig.down.push(mib_per_s(bytes, d));
            fig.up.push(mib_per_s(bytes, u));
            fig.parallel.push(mib_per_s(bytes, p));
        }
    }
    for (i, (name, f)) in paths.iter().enumerate() {
        for _ in 0..setups {
            let took = ping(f.port).unwrap_or_else(|e| panic!("{name}: a set-up: {e}"));
            figures[i].setup_ms.push(took.as_secs_f64() * 1000.0);
        }
    }

    let peer = &figures[2];
    let (peer_down, peer_up) = (median(&peer.down), median(&peer.up));
    println!();
    println!(
        "### tunnel throughput: {mib} MiB per connection, median of {rounds} rounds; set-up over {setups} connections"
    );
    println!();
    println!("| path | down MiB/s | up MiB/s | {conns} at once, down MiB/s | set-up p50 ms | set-up p99 ms | ratio vs kubectl (down / up) | bar (direct >= 1.0x both ways) |");
    println!("|---|---|---|---|---|---|---|---|");
    for (i, (name, _)) in paths.iter().enumerate() {
        let fig = &figures[i];
        let (down, up) = (median(&fig.down), median(&fig.up));
        let ratio = format!("{:.2} / {:.2}", down / peer_down, up / peer_up);
        let verdict = match i {
            0 => bar(down / peer_down >= 1.0 && up / peer_up >= 1.0),
            1 => "reported",
            _ => "peer",
        };
        println!(
            "| {name} | {down:.0} | {up:.0} | {:.0} | {:.2} | {:.2} | {ratio} | {verdict} |",
            median(&fig.parallel),
            percentile(&fig.setup_ms, 50.0),
            percentile(&fig.setup_ms, 99.0),
        );
    }
    drop(paths);
    drop((direct, proxy));
}
