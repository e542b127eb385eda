//! `kubegate-soak`: the driver behind `scripts/soak.sh` (docs/RELIABILITY.md).
//!
//! The script starts a `kubegate sim` and a daemon (mode kubeconfig, pointed
//! at that sim) and hands both to this program, which:
//! - starts N watch sessions whose app prints numbered lines continuously
//!   (after a `go` on its stdin, so the first line is 0), and keeps one io
//!   client per session that disconnects and reconnects with `lastSeq`;
//! - runs M interactive exec streams in a loop, each echoing numbered lines
//!   back in lockstep and exiting 7 after the last;
//! - injects the sim's faults on a seeded schedule through `/sim/faults`;
//! - samples the daemon's RSS, threads and open fds after warm-up, in the
//!   middle and at the end (every client held connected meanwhile);
//! - stops every session, checks no session pod is left, prints the table
//!   and exits 1 when a bar fails (2 on a usage or set-up error).
//!
//! Every line and every echo is checked in order, so a lost, repeated or
//! reordered byte is seen; an exec's end must be its `exit` frame with code
//! 7, or (when a fault cut it) an `error` frame with a code: never a
//! made-up exit code.

use kubegate::exec::frames::{ClientFrame, ServerFrame, SUBPROTOCOL as EXEC_PROTOCOL};
use kubegate::kube::client::rest::Request as KubeRequest;
use kubegate::kube::client::Client;
use kubegate::kube::connection::Connection;
use kubegate::session::io::{decode_frame, SUBPROTOCOL as IO_PROTOCOL};
use parking_lot::Mutex;
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use serde_json::{json, Value};
use std::collections::BTreeMap;
use std::io::{BufRead, BufReader, Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::process::ExitCode;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};
use tungstenite::client::IntoClientRequest;
use tungstenite::protocol::frame::coding::CloseCode;
use tungstenite::{Message, WebSocket};

const USAGE: &str = "usage: kubegate-soak --daemon HOST:PORT [--token T (or KUBEGATE_SOAK_TOKEN)] --sim URL --daemon-pid PID \
--duration DUR [--sessions N] [--execs M] [--seed S] [--project P --uid U --deployment D]";

/// Padding after each line number, so rings and sockets carry real bytes.
const PAD: usize = 90;
/// The session app: waits for `go`, then prints `N xxx…` lines, five every
/// quarter second. `read -t` is bash's sleep without a fork; at EOF on
/// stdin it would return at once, so it falls back to `sleep`.
const APP: &str = r#"read -r go
pad=$(printf '%090d' 0)
i=0
while :; do
  for k in 1 2 3 4 5; do echo "$i $pad"; i=$((i+1)); done
  read -r -t 0.25 _; rc=$?
  if [ "$rc" -ne 0 ] && [ "$rc" -le 128 ]; then sleep 0.25; fi
done
"#;
const APP_NAME: &str = "seq";
/// The exec command: echoes `$1` lines back, then exits 7.
const EXEC_SCRIPT: &str =
    r#"i=0; while [ "$i" -lt "$1" ] && read -r l; do echo "$l"; i=$((i+1)); done; exit 7"#;
const EXEC_EXIT: i32 = 7;
/// Exit code of a killed container (SIGKILL).
const KILLED_EXIT: i64 = 137;
/// Longest wait for one awaited frame before a stream counts as stalled.
const STALL: Duration = Duration::from_secs(30);
/// A session whose output has not moved for this long at the end is down.
const QUIET_DOWN: Duration = Duration::from_secs(10);
/// Read timeout of client sockets: how often loops look at their flags.
const TICK: Duration = Duration::from_millis(200);
/// Drift bar, percent.
const DRIFT_BAR: f64 = 5.0;

// ------------------------------------------------------------------ args

struct Args {
    daemon: String,
    token: String,
    sim: String,
    daemon_pid: u32,
    duration: Duration,
    sessions: usize,
    execs: usize,
    seed: u64,
    project: String,
    uid: String,
    deployment: String,
}

/// `90s`, `30m`, `1h`, `45` (seconds).
fn parse_duration(s: &str) -> Result<Duration, String> {
    let (num, mult) = match s.as_bytes().last() {
        Some(b's') => (&s[..s.len() - 1], 1),
        Some(b'm') => (&s[..s.len() - 1], 60),
        Some(b'h') => (&s[..s.len() - 1], 3600),
        _ => (s, 1),
    };
    let n: u64 = num
        .parse()
        .map_err(|_| format!("duration {s:?}: expected e.g. 90s, 30m, 1h"))?;
    if n == 0 {
        return Err(format!("duration {s:?} must be positive"));
    }
    Ok(Duration::from_secs(n * mult))
}

fn parse_args(argv: &[String]) -> Result<Args, String> {
    let mut m: BTreeMap<&str, String> = BTreeMap::new();
    let mut it = argv.iter();
    while let Some(a) = it.next() {
        let key = a
            .strip_prefix("--")
            .ok_or_else(|| format!("unexpected argument {a:?}"))?;
        let known = [
            "daemon",
            "token",
            "sim",
            "daemon-pid",
            "duration",
            "sessions",
            "execs",
            "seed",
            "project",
            "uid",
            "deployment",
        ];
        let Some(k) = known.iter().find(|k| **k == key) else {
            return Err(format!("unknown flag --{key}"));
        };
        let v = it.next().ok_or_else(|| format!("--{key} needs a value"))?;
        m.insert(k, v.clone());
    }
    let need = |k: &str| {
        m.get(k)
            .cloned()
            .ok_or_else(|| format!("--{k} is required"))
    };
    let num = |k: &str, d: u64| -> Result<u64, String> {
        m.get(k).map_or(Ok(d), |v| {
            v.parse()
                .map_err(|_| format!("--{k} {v:?}: expected a number"))
        })
    };
    Ok(Args {
        daemon: need("daemon")?,
        token: match m.get("token") {
            Some(t) => t.clone(),
            None => std::env::var("KUBEGATE_SOAK_TOKEN")
                .map_err(|_| "--token or KUBEGATE_SOAK_TOKEN is required".to_string())?,
        },
        sim: need("sim")?.trim_end_matches('/').to_string(),
        daemon_pid: u32::try_from(num("daemon-pid", 0)?).map_err(|_| "--daemon-pid too large")?,
        duration: parse_duration(&need("duration")?)?,
        sessions: usize::try_from(num("sessions", 20)?).map_err(|_| "--sessions too large")?,
        execs: usize::try_from(num("execs", 10)?).map_err(|_| "--execs too large")?,
        seed: num("seed", 1)?,
        project: m.get("project").cloned().unwrap_or_else(|| "soak".into()),
        uid: m.get("uid").cloned().unwrap_or_else(|| "soak-uid".into()),
        deployment: m
            .get("deployment")
            .cloned()
            .unwrap_or_else(|| "soak-target".into()),
    })
}

// ------------------------------------------------------------ plain HTTP

/// One HTTP/1.1 request with `Connection: close`: status and de-chunked body.
fn http(
    addr: &str,
    method: &str,
    path: &str,
    token: Option<&str>,
    body: Option<&[u8]>,
    timeout: Duration,
) -> Result<(u16, Vec<u8>), String> {
    let sa: SocketAddr = addr.parse().map_err(|e| format!("address {addr}: {e}"))?;
    let mut s = TcpStream::connect_timeout(&sa, timeout).map_err(|e| format!("connect: {e}"))?;
    s.set_read_timeout(Some(timeout))
        .and_then(|()| s.set_write_timeout(Some(timeout)))
        .map_err(|e| format!("socket: {e}"))?;
    let mut head = format!("{method} {path} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n");
    if let Some(t) = token {
        head.push_str(&format!("Authorization: Bearer {t}\r\n"));
    }
    if let Some(b) = body {
        head.push_str(&format!(
            "Content-Type: application/json\r\nContent-Length: {}\r\n",
            b.len()
        ));
    }
    head.push_str("\r\n");
    let mut raw = head.into_bytes();
    raw.extend_from_slice(body.unwrap_or_default());
    s.write_all(&raw).map_err(|e| format!("write: {e}"))?;
    let mut resp = Vec::new();
    s.read_to_end(&mut resp).map_err(|e| format!("read: {e}"))?;
    parse_response(&resp)
}

fn parse_response(resp: &[u8]) -> Result<(u16, Vec<u8>), String> {
    let split = resp
        .windows(4)
        .position(|w| w == b"\r\n\r\n")
        .ok_or("no response head")?;
    let head = String::from_utf8_lossy(&resp[..split]).to_ascii_lowercase();
    let status = head
        .split(' ')
        .nth(1)
        .and_then(|c| c.parse().ok())
        .ok_or("no status")?;
    let body = &resp[split + 4..];
    if !head.contains("transfer-encoding: chunked") {
        return Ok((status, body.to_vec()));
    }
    let mut out = Vec::new();
    let mut rest = body;
    while let Some(p) = rest.windows(2).position(|w| w == b"\r\n") {
        let n = usize::from_str_radix(String::from_utf8_lossy(&rest[..p]).trim(), 16)
            .map_err(|_| "bad chunk size")?;
        if n == 0 {
            break;
        }
        let data = rest.get(p + 2..p + 2 + n).ok_or("short chunk")?;
        out.extend_from_slice(data);
        rest = rest.get(p + 2 + n + 2..).unwrap_or_default();
    }
    Ok((status, out))
}

fn json_of(b: &[u8]) -> Value {
    serde_json::from_slice(b)
        .unwrap_or_else(|_| Value::String(String::from_utf8_lossy(b).into_owned()))
}

/// `CODE: message` of a daemon error answer (`{"error": {"code", "message"}}`).
fn error_code(status: u16, body: &[u8]) -> String {
    let v = json_of(body);
    match v["error"]["code"].as_str() {
        Some(c) => format!("{c}: {}", v["error"]["message"].as_str().unwrap_or("")),
        None => format!("HTTP {status}"),
    }
}

// --------------------------------------------------------------- sockets

fn ws_open(
    addr: &str,
    token: &str,
    path: &str,
    protocol: &str,
) -> Result<WebSocket<TcpStream>, String> {
    let mut req = format!("ws://{addr}{path}")
        .into_client_request()
        .map_err(|e| format!("request: {e}"))?;
    let h = req.headers_mut();
    h.insert(
        "Authorization",
        format!("Bearer {token}")
            .parse()
            .map_err(|_| "token is not a header value")?,
    );
    h.insert(
        "Sec-WebSocket-Protocol",
        protocol.parse().map_err(|_| "bad subprotocol")?,
    );
    let sa: SocketAddr = addr.parse().map_err(|e| format!("address {addr}: {e}"))?;
    let tcp = TcpStream::connect_timeout(&sa, Duration::from_secs(10))
        .map_err(|e| format!("connect: {e}"))?;
    tcp.set_read_timeout(Some(Duration::from_secs(30)))
        .and_then(|()| tcp.set_write_timeout(Some(Duration::from_secs(10))))
        .and_then(|()| tcp.set_nodelay(true))
        .map_err(|e| format!("socket: {e}"))?;
    match tungstenite::client::client(req, tcp) {
        Ok((ws, _)) => {
            ws.get_ref()
                .set_read_timeout(Some(TICK))
                .map_err(|e| format!("socket: {e}"))?;
            Ok(ws)
        }
        Err(tungstenite::HandshakeError::Failure(tungstenite::Error::Http(resp))) => {
            let status = resp.status().as_u16();
            let body = resp.into_body().unwrap_or_default();
            Err(error_code(status, &body))
        }
        Err(e) => Err(format!("handshake: {e}")),
    }
}

/// What one read of a client socket gave.
enum Got {
    Msg(Message),
    /// Nothing within the tick.
    Idle,
    /// The peer closed (code) or the connection broke.
    Closed(Option<u16>, String),
}

fn ws_read(ws: &mut WebSocket<TcpStream>) -> Got {
    match ws.read() {
        Ok(Message::Close(f)) => Got::Closed(
            f.as_ref().map(|f| u16::from(f.code)),
            f.map(|f| f.reason.to_string()).unwrap_or_default(),
        ),
        Ok(m) => Got::Msg(m),
        Err(tungstenite::Error::Io(e))
            if matches!(
                e.kind(),
                std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
            ) =>
        {
            Got::Idle
        }
        Err(e) => Got::Closed(None, e.to_string()),
    }
}

/// Our side's close: a Close frame and a short wait for the answer.
fn ws_close(mut ws: WebSocket<TcpStream>) {
    let _ = ws.close(Some(tungstenite::protocol::CloseFrame {
        code: CloseCode::Normal,
        reason: "".into(),
    }));
    let deadline = Instant::now() + Duration::from_secs(2);
    while Instant::now() < deadline {
        match ws_read(&mut ws) {
            Got::Closed(..) => break,
            Got::Idle | Got::Msg(_) => {}
        }
    }
}

// ------------------------------------------------------------ shared state

struct Shared {
    args: Args,
    t0: Mutex<Option<Instant>>,
    /// The soak is over: workers wind down.
    stop: AtomicBool,
    /// Sampling: every client stays connected (execs pause mid-stream).
    hold: AtomicBool,
    sessions: Mutex<Vec<Arc<Sess>>>,
    exec_steady: Vec<AtomicBool>,
    execs: Mutex<ExecTotals>,
    faults: Mutex<FaultLog>,
}

impl Shared {
    fn stopping(&self) -> bool {
        self.stop.load(Ordering::SeqCst)
    }
    fn holding(&self) -> bool {
        self.hold.load(Ordering::SeqCst)
    }
    fn elapsed(&self) -> f64 {
        self.t0.lock().map_or(0.0, |t| t.elapsed().as_secs_f64())
    }
}

#[derive(Default)]
struct SessState {
    /// The next line number expected.
    next: u64,
    lines: u64,
    bytes: u64,
    lost_lines: u64,
    lost_bytes: u64,
    dup_lines: u64,
    bad_lines: u64,
    /// Frames whose seq skipped ahead, and gap announcements.
    seq_skipped: u64,
    seq_repeated: u64,
    gap_frames: u64,
    reconnects: u64,
    io_errors: u64,
    last_seq: u32,
    partial: Vec<u8>,
    last_progress: Option<Instant>,
    /// Longest time without a new line while connected and not killed.
    longest_quiet: Duration,
    killed_at: Option<Instant>,
    /// `run` ended events: (exit code, reason).
    runs_ended: Vec<(Option<i64>, String)>,
    /// Statuses other than starting/running seen before our stop.
    bad_status: Vec<String>,
    last_status: String,
    sse_reconnects: u64,
    /// kubegate's own lines on the app's stderr channel.
    notices: Vec<String>,
    start_error: Option<String>,
}

struct Sess {
    idx: usize,
    id: Mutex<String>,
    pod: Mutex<String>,
    st: Mutex<SessState>,
    steady: AtomicBool,
    /// The event stream's socket, shut down to end its reader.
    sse_sock: Mutex<Option<TcpStream>>,
    sse_done: AtomicBool,
}

#[derive(Default)]
struct ExecTotals {
    started: u64,
    completed: u64,
    lines: u64,
    bytes: u64,
    lost_bytes: u64,
    exit_wrong: u64,
    exit_lost: u64,
    stalled: u64,
    /// `error` frames after the upgrade, by code.
    errors: BTreeMap<String, u64>,
    /// Refusals before the upgrade (HTTP error code or connect failure).
    refused: BTreeMap<String, u64>,
    /// Every error frame's text, counted.
    messages: BTreeMap<String, u64>,
    details: Vec<String>,
}

impl ExecTotals {
    fn detail(&mut self, d: String) {
        if self.details.len() < 20 {
            self.details.push(d);
        }
    }
}

#[derive(Default)]
struct FaultLog {
    counts: BTreeMap<&'static str, u64>,
    failed_posts: u64,
    skipped: BTreeMap<&'static str, u64>,
}

// -------------------------------------------------------------- sessions

fn session_body() -> Value {
    json!({
        "apps": [{"name": APP_NAME, "entry": "seq.sh", "command": ["bash", "seq.sh"],
                  "io": "streams", "runner": false}],
        "bundle": {"files": [{"path": "seq.sh", "content": APP}]}
    })
}

fn line_len(n: u64) -> u64 {
    n.to_string().len() as u64 + 1 + PAD as u64 + 1
}

impl SessState {
    fn take_stdout(&mut self, data: &[u8]) {
        self.partial.extend_from_slice(data);
        while let Some(p) = self.partial.iter().position(|b| *b == b'\n') {
            let line: Vec<u8> = self.partial.drain(..=p).collect();
            let text = String::from_utf8_lossy(&line[..line.len() - 1]).into_owned();
            let num = text
                .split(' ')
                .next()
                .and_then(|n| n.parse::<u64>().ok())
                .filter(|_| text.len() == line.len() - 1 && text.ends_with(&"0".repeat(PAD)));
            let Some(n) = num else {
                self.bad_lines += 1;
                self.note(format!("unexpected line {text:?}"));
                continue;
            };
            let now = Instant::now();
            if let Some(prev) = self.last_progress {
                if self.killed_at.is_none() {
                    self.longest_quiet = self.longest_quiet.max(now - prev);
                }
            }
            self.last_progress = Some(now);
            if n < self.next {
                self.dup_lines += 1;
                continue;
            }
            if n > self.next {
                self.lost_lines += n - self.next;
                self.lost_bytes += (self.next..n).map(line_len).sum::<u64>();
                self.note(format!("lines {}..{} missing", self.next, n - 1));
            }
            self.next = n + 1;
            self.lines += 1;
            self.bytes += line.len() as u64;
        }
    }

    fn note(&mut self, n: String) {
        if self.notices.len() < 10 {
            self.notices.push(n);
        }
    }
}

/// Opens the session's event stream (after `last_id`); the reader and a
/// handle to shut its socket down.
fn sse_open(
    args: &Args,
    id: &str,
    last_id: Option<u64>,
) -> Result<(BufReader<TcpStream>, TcpStream), String> {
    let sa: SocketAddr = args.daemon.parse().map_err(|e| format!("address: {e}"))?;
    let mut s = TcpStream::connect_timeout(&sa, Duration::from_secs(10))
        .map_err(|e| format!("connect: {e}"))?;
    // Heartbeats come every 20 s: a longer silence is a dead connection.
    s.set_read_timeout(Some(Duration::from_secs(45)))
        .map_err(|e| format!("socket: {e}"))?;
    let mut head = format!(
        "GET /v1/sessions/{id}/events HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer {}\r\nAccept: text/event-stream\r\n",
        args.token
    );
    if let Some(l) = last_id {
        head.push_str(&format!("Last-Event-ID: {l}\r\n"));
    }
    head.push_str("\r\n");
    s.write_all(head.as_bytes())
        .map_err(|e| format!("write: {e}"))?;
    let handle = s.try_clone().map_err(|e| format!("socket: {e}"))?;
    let mut r = BufReader::new(s);
    let mut status = String::new();
    r.read_line(&mut status)
        .map_err(|e| format!("status line: {e}"))?;
    if !status.contains(" 200 ") {
        return Err(format!("event stream refused: {}", status.trim()));
    }
    loop {
        let mut l = String::new();
        if r.read_line(&mut l).map_err(|e| format!("header: {e}"))? == 0 {
            return Err("event stream ended in its head".into());
        }
        if l == "\r\n" {
            break;
        }
    }
    Ok((r, handle))
}

/// Reads one session's events until told to stop, reconnecting with
/// `Last-Event-ID`: statuses and run ends go into the session's state,
/// statuses also to `status_tx` (the start waits on it).
fn sse_loop(sh: &Shared, s: &Sess, status_tx: crossbeam_channel::Sender<String>) {
    let id = s.id.lock().clone();
    let mut last_id: Option<u64> = None;
    let mut first = true;
    while !s.sse_done.load(Ordering::SeqCst) {
        let (mut r, handle) = match sse_open(&sh.args, &id, last_id) {
            Ok(x) => x,
            Err(e) => {
                s.st.lock().note(format!("event stream: {e}"));
                if !pause(Duration::from_millis(500), || {
                    s.sse_done.load(Ordering::SeqCst)
                }) {
                    return;
                }
                continue;
            }
        };
        if !first {
            s.st.lock().sse_reconnects += 1;
        }
        first = false;
        *s.sse_sock.lock() = Some(handle);
        let mut pending = String::new();
        loop {
            let mut size = String::new();
            match r.read_line(&mut size) {
                Ok(0) | Err(_) => break,
                Ok(_) => {}
            }
            let Ok(n) = usize::from_str_radix(size.trim(), 16) else {
                break;
            };
            if n == 0 {
                break;
            }
            let mut buf = vec![0u8; n + 2];
            if r.read_exact(&mut buf).is_err() {
                break;
            }
            pending.push_str(&String::from_utf8_lossy(&buf[..n]));
            while let Some(end) = pending.find("\n\n") {
                let block: String = pending.drain(..end + 2).collect();
                let (mut ev, mut data) = (String::new(), String::new());
                for line in block.lines() {
                    if let Some(v) = line.strip_prefix("id: ") {
                        last_id = v.parse().ok().or(last_id);
                    } else if let Some(v) = line.strip_prefix("event: ") {
                        ev = v.to_string();
                    } else if let Some(v) = line.strip_prefix("data: ") {
                        data.push_str(v);
                    }
                }
                let data: Value = serde_json::from_str(&data).unwrap_or(Value::Null);
                let mut st = s.st.lock();
                match ev.as_str() {
                    "status" => {
                        let status = data["status"].as_str().unwrap_or("?").to_string();
                        if !matches!(status.as_str(), "starting" | "running") && !sh.stopping() {
                            let why = data["error"]["message"].as_str().unwrap_or("");
                            st.bad_status.push(format!("{status} {why}"));
                        }
                        st.last_status = status.clone();
                        let _ = status_tx.try_send(status);
                    }
                    "run" if data["phase"] == "ended" => {
                        let reason = data["reason"].as_str().unwrap_or("").to_string();
                        st.runs_ended.push((data["exitCode"].as_i64(), reason));
                    }
                    _ => {}
                }
            }
        }
        s.sse_sock.lock().take();
    }
}

/// Waits `d` in small steps; false when `done` turned true meanwhile.
fn pause(d: Duration, done: impl Fn() -> bool) -> bool {
    let deadline = Instant::now() + d;
    loop {
        if done() {
            return false;
        }
        let left = deadline.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return true;
        }
        std::thread::sleep(left.min(Duration::from_millis(50)));
    }
}

/// Creates the session and waits for `running`; its id.
fn start_session(
    sh: &Arc<Shared>,
    s: &Arc<Sess>,
    sim: &Client,
) -> Result<std::thread::JoinHandle<()>, String> {
    let a = &sh.args;
    let body = session_body().to_string();
    let (st, resp) = http(
        &a.daemon,
        "POST",
        "/v1/sessions",
        Some(&a.token),
        Some(body.as_bytes()),
        Duration::from_secs(60),
    )?;
    if st != 201 {
        return Err(format!("POST /v1/sessions: {st} {}", json_of(&resp)));
    }
    let id = json_of(&resp)["sessionId"]
        .as_str()
        .ok_or("no sessionId in the answer")?
        .to_string();
    *s.id.lock() = id.clone();
    let (tx, rx) = crossbeam_channel::bounded::<String>(64);
    let (sh2, s2) = (sh.clone(), s.clone());
    let sse = std::thread::Builder::new()
        .name(format!("sse-{}", s.idx))
        .spawn(move || sse_loop(&sh2, &s2, tx))
        .map_err(|e| format!("spawning the event reader: {e}"))?;
    let deadline = Instant::now() + Duration::from_secs(240);
    loop {
        match rx.recv_timeout(deadline.saturating_duration_since(Instant::now())) {
            Ok(st) if st == "running" => break,
            Ok(st) if st == "failed" || st == "stopped" => {
                return Err(format!(
                    "session {id} is {st}: {:?}",
                    s.st.lock().bad_status
                ))
            }
            Ok(_) => {}
            Err(_) => return Err(format!("session {id} not running within 240 s")),
        }
    }
    // Its pod, for the kill fault.
    let path =
        format!("/api/v1/namespaces/default/pods?labelSelector=kubegate.dev%2Fsession-id%3D{id}");
    let list: Value = sim
        .send_json(&KubeRequest::get(path))
        .map_err(|e| format!("listing the pod of {id}: {e}"))?;
    let pod = list["items"][0]["metadata"]["name"]
        .as_str()
        .ok_or_else(|| format!("no pod for session {id}"))?;
    *s.pod.lock() = pod.to_string();
    Ok(sse)
}

/// The io client: connected for a few seconds at a time, then away for a
/// moment, then back with `lastSeq`; held connected while sampling.
fn session_io(sh: &Shared, s: &Sess, mut rng: StdRng) {
    let a = &sh.args;
    let id = s.id.lock().clone();
    let mut go_at: Option<Instant> = None;
    let mut first = true;
    while !sh.stopping() {
        let last = s.st.lock().last_seq;
        let mut path = format!("/v1/sessions/{id}/io?app={APP_NAME}");
        if last > 0 {
            path.push_str(&format!("&lastSeq={last}"));
        }
        let mut ws = match ws_open(&a.daemon, &a.token, &path, IO_PROTOCOL) {
            Ok(ws) => ws,
            Err(e) => {
                let mut st = s.st.lock();
                st.io_errors += 1;
                st.note(format!("io connect: {e}"));
                drop(st);
                pause(Duration::from_millis(500), || sh.stopping());
                continue;
            }
        };
        if !first {
            s.st.lock().reconnects += 1;
        }
        first = false;
        let until = Instant::now() + Duration::from_millis(rng.random_range(3000..12000));
        let mut closed = false;
        loop {
            if sh.stopping() {
                break;
            }
            let holding = sh.holding();
            s.steady.store(holding, Ordering::SeqCst);
            if !holding && Instant::now() >= until {
                break;
            }
            // `go` starts the app; again if nothing came (stdin before the
            // attach was there).
            let started = s.st.lock().lines > 0;
            if !started && go_at.is_none_or(|t| t.elapsed() > Duration::from_secs(5)) {
                if ws.send(Message::Binary(b"go\n".to_vec().into())).is_err() {
                    break;
                }
                go_at = Some(Instant::now());
            }
            match ws_read(&mut ws) {
                Got::Idle => {}
                Got::Msg(Message::Binary(b)) => {
                    let Some((seq, stream, payload)) = decode_frame(&b) else {
                        s.st.lock().note("undecodable io frame".into());
                        continue;
                    };
                    let mut st = s.st.lock();
                    if st.last_seq > 0 && seq <= st.last_seq {
                        st.seq_repeated += 1;
                        continue;
                    }
                    if st.last_seq > 0 && seq > st.last_seq + 1 {
                        st.seq_skipped += u64::from(seq - st.last_seq - 1);
                    }
                    st.last_seq = seq;
                    match stream {
                        1 => st.take_stdout(payload),
                        _ => {
                            let t = String::from_utf8_lossy(payload).trim().to_string();
                            st.note(format!("stream {stream}: {t}"));
                        }
                    }
                }
                Got::Msg(Message::Text(t)) => {
                    let v: Value = serde_json::from_str(t.as_str()).unwrap_or(Value::Null);
                    let mut st = s.st.lock();
                    if v["type"] == "gap" {
                        let (f, to) = (v["from"].as_u64(), v["to"].as_u64());
                        st.gap_frames += to.unwrap_or(0).saturating_sub(f.unwrap_or(0)) + 1;
                    }
                    st.note(format!("text frame {t}"));
                }
                Got::Msg(_) => {}
                Got::Closed(code, reason) => {
                    let mut st = s.st.lock();
                    st.io_errors += 1;
                    st.note(format!("io closed by the daemon: {code:?} {reason}"));
                    closed = true;
                    break;
                }
            }
        }
        s.steady.store(false, Ordering::SeqCst);
        if !closed {
            if sh.stopping() || rng.random_bool(0.5) {
                ws_close(ws);
            } else {
                drop(ws); // abrupt: no Close frame
            }
        }
        if !sh.stopping() && !sh.holding() {
            let away = Duration::from_millis(rng.random_range(0..1500));
            pause(away, || sh.stopping() || sh.holding());
        }
    }
}

// ------------------------------------------------------------------ execs

enum ExecEnd {
    /// `exit` with the right code after every echo.
    Completed,
    /// An `error` frame with a code (a fault cut it, the target was not
    /// ready…): a clear error, not a fake exit code.
    Error(String),
    Refused(String),
    ExitWrong(String),
    ExitLost(String),
    Stalled(String),
}

fn exec_path(a: &Args, lines: u64) -> String {
    let enc = |s: &str| {
        s.bytes()
            .map(|b| match b {
                b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'_' | b'.' | b'~' => {
                    (b as char).to_string()
                }
                _ => format!("%{b:02X}"),
            })
            .collect::<String>()
    };
    let mut p = format!(
        "/v1/exec/interactive?project={}&uid={}&deployment={}&tty=false&stdin=true",
        enc(&a.project),
        enc(&a.uid),
        enc(&a.deployment)
    );
    for c in ["sh", "-c", EXEC_SCRIPT, "soak", &lines.to_string()] {
        p.push_str("&command=");
        p.push_str(&enc(c));
    }
    p
}

/// One exec: `lines` lines echoed in lockstep, then the exit.
fn exec_once(sh: &Shared, w: usize, iter: u64, lines: u64, rng: &mut StdRng) -> (ExecEnd, u64) {
    let a = &sh.args;
    let steady = &sh.exec_steady[w];
    let mut ws = match ws_open(&a.daemon, &a.token, &exec_path(a, lines), EXEC_PROTOCOL) {
        Ok(ws) => ws,
        Err(e) => return (ExecEnd::Refused(e), 0),
    };
    let mut echoed = 0u64;
    let mut out: Vec<u8> = Vec::new();
    let mut got_target = false;
    let mut deadline = Instant::now() + STALL;
    // Sends line `echoed` once the previous echo is in.
    let mut sent = 0u64;
    let end = loop {
        if got_target && sent == echoed && sent < lines {
            if sh.holding() {
                steady.store(true, Ordering::SeqCst);
                let mut ended = None;
                while sh.holding() && !sh.stopping() {
                    // Reading answers the daemon's pings while held.
                    match ws_read(&mut ws) {
                        Got::Idle => {}
                        Got::Closed(code, reason) => {
                            ended = Some(format!("closed ({code:?} {reason}) while held"));
                            break;
                        }
                        Got::Msg(m) => {
                            if !matches!(m, Message::Ping(_) | Message::Pong(_)) {
                                ended = Some(format!("unexpected {m:?} while held"));
                                break;
                            }
                        }
                    }
                }
                steady.store(false, Ordering::SeqCst);
                if let Some(e) = ended {
                    break ExecEnd::ExitLost(e);
                }
            }
            let line = format!("x{w}-{iter}-{sent}\n");
            let f = ClientFrame::Stdin {
                data: line.into_bytes(),
                eof: false,
            };
            if let Err(e) = ws.send(f.encode()) {
                break ExecEnd::ExitLost(format!("sending stdin: {e}"));
            }
            sent += 1;
            deadline = Instant::now() + STALL;
            // A little pacing, so streams live long enough to meet faults.
            std::thread::sleep(Duration::from_millis(rng.random_range(5..30)));
        }
        if Instant::now() >= deadline {
            break ExecEnd::Stalled(format!(
                "nothing for {} s after {echoed}/{lines} echoes",
                STALL.as_secs()
            ));
        }
        let m = match ws_read(&mut ws) {
            Got::Idle => continue,
            Got::Closed(code, reason) => {
                break ExecEnd::ExitLost(format!(
                    "closed ({code:?} {reason}) after {echoed}/{lines} echoes without exit or error"
                ))
            }
            Got::Msg(m) => m,
        };
        let frame = match ServerFrame::decode(&m) {
            Ok(Some(f)) => f,
            Ok(None) => continue,
            Err(e) => break ExecEnd::ExitLost(format!("bad frame: {}", e.0)),
        };
        match frame {
            ServerFrame::Target(_) => got_target = true,
            ServerFrame::Stdout(d) => {
                deadline = Instant::now() + STALL;
                out.extend_from_slice(&d);
                while let Some(p) = out.iter().position(|b| *b == b'\n') {
                    let l: Vec<u8> = out.drain(..=p).collect();
                    let want = format!("x{w}-{iter}-{echoed}\n");
                    if l != want.as_bytes() {
                        let mut t = sh.execs.lock();
                        t.lost_bytes += want.len() as u64;
                        t.detail(format!(
                            "exec {w}/{iter}: echo {:?} where {want:?} was due",
                            String::from_utf8_lossy(&l)
                        ));
                    }
                    echoed += 1;
                    let mut t = sh.execs.lock();
                    t.lines += 1;
                    t.bytes += l.len() as u64;
                }
            }
            ServerFrame::Stderr(d) => {
                sh.execs.lock().detail(format!(
                    "exec {w}/{iter}: stderr {:?}",
                    String::from_utf8_lossy(&d)
                ));
            }
            ServerFrame::Exit(e) => {
                break if echoed == lines && e.exit_code == EXEC_EXIT {
                    ExecEnd::Completed
                } else {
                    ExecEnd::ExitWrong(format!(
                        "exit {} ({:?} {:?}) after {echoed}/{lines} echoes",
                        e.exit_code, e.reason, e.message
                    ))
                };
            }
            ServerFrame::Error(e) => {
                break ExecEnd::Error(format!("{}: {}", e.code.as_str(), e.message));
            }
        }
    };
    steady.store(false, Ordering::SeqCst);
    ws_close(ws);
    (end, echoed)
}

fn exec_worker(sh: &Shared, w: usize, mut rng: StdRng) {
    let mut iter = 0u64;
    while !sh.stopping() {
        let lines = rng.random_range(40..120);
        sh.execs.lock().started += 1;
        let (end, _) = exec_once(sh, w, iter, lines, &mut rng);
        iter += 1;
        let mut t = sh.execs.lock();
        let code = |s: &str| s.split(':').next().unwrap_or(s).to_string();
        let retry = match end {
            ExecEnd::Completed => {
                t.completed += 1;
                false
            }
            ExecEnd::Error(e) => {
                *t.errors.entry(code(&e)).or_default() += 1;
                *t.messages.entry(e).or_default() += 1;
                true
            }
            ExecEnd::Refused(e) => {
                *t.refused.entry(code(&e)).or_default() += 1;
                *t.messages.entry(format!("refused: {e}")).or_default() += 1;
                true
            }
            ExecEnd::ExitWrong(d) => {
                t.exit_wrong += 1;
                t.detail(format!("exec {w}/{iter}: WRONG {d}"));
                false
            }
            ExecEnd::ExitLost(d) => {
                t.exit_lost += 1;
                t.detail(format!("exec {w}/{iter}: LOST {d}"));
                false
            }
            ExecEnd::Stalled(d) => {
                t.stalled += 1;
                t.detail(format!("exec {w}/{iter}: STALLED {d}"));
                false
            }
        };
        drop(t);
        if retry {
            pause(Duration::from_millis(300), || sh.stopping());
        }
    }
}

// ----------------------------------------------------------------- faults

#[derive(Debug, Clone)]
enum Fault {
    DropWatches,
    Fail { status: u16, count: u64 },
    CutExec,
    Kill,
    Outage(u64),
}

impl Fault {
    fn name(&self) -> &'static str {
        match self {
            Fault::DropWatches => "watch drops",
            Fault::Fail { status: 429, .. } => "429 bursts",
            Fault::Fail { .. } => "5xx bursts",
            Fault::CutExec => "exec stream cuts",
            Fault::Kill => "containers killed",
            Fault::Outage(_) => "API outages",
        }
    }
}

/// The soak's time line, seconds after t0.
struct Plan {
    warm: f64,
    mid: f64,
    end: f64,
    faults_until: f64,
    faults: Vec<(f64, Fault)>,
}

fn plan(d: Duration, seed: u64, sessions: usize) -> Plan {
    let d = d.as_secs_f64();
    let warm = (d / 6.0).clamp(20.0, 300.0).min(d / 3.0);
    let settle = (d / 6.0).clamp(15.0, 120.0).min(d / 4.0);
    let faults_until = d - settle;
    let mid = (warm + d) / 2.0;
    let mut rng = StdRng::seed_from_u64(seed ^ 0x5eed);
    let mut faults: Vec<(f64, Fault)> = Vec::new();
    // Every kind early once (before the first sample, so its paths are warm),
    // then at seeded intervals.
    let kinds: [(f64, f64, Fault); 6] = [
        (3.0, 12.0, Fault::DropWatches),
        (
            5.0,
            14.0,
            Fault::Fail {
                status: 503,
                count: 20,
            },
        ),
        (
            6.0,
            14.0,
            Fault::Fail {
                status: 500,
                count: 20,
            },
        ),
        (
            7.0,
            16.0,
            Fault::Fail {
                status: 429,
                count: 20,
            },
        ),
        (4.0, 10.0, Fault::CutExec),
        (9.0, 18.0, Fault::Kill),
    ];
    for (first, every, fault) in kinds {
        let mut t = first;
        while t < faults_until {
            faults.push((t, fault.clone()));
            t += every * rng.random_range(0.6..1.4);
        }
    }
    // A 10 s outage at 30% of the fault window, then one every 10 minutes.
    let mut t = warm + (faults_until - warm) * 0.3;
    while t + 10.0 < faults_until {
        faults.push((t, Fault::Outage(10)));
        t += 600.0;
    }
    let outages: Vec<f64> = faults
        .iter()
        .filter(|f| matches!(f.1, Fault::Outage(_)))
        .map(|f| f.0)
        .collect();
    let mut kills_left = (sessions / 4).max(usize::from(sessions > 1));
    faults.retain(|(t, f)| {
        // Quiet around the samples, and nothing else while the API is out
        // (the fault endpoint is out too).
        let near_sample = [warm, mid].iter().any(|s| *t > s - 6.0 && *t < s + 2.0);
        let in_outage = outages.iter().any(|o| *t > o - 1.0 && *t < o + 12.0);
        if near_sample || (in_outage && !matches!(f, Fault::Outage(_))) {
            return false;
        }
        if matches!(f, Fault::Kill) {
            if kills_left == 0 {
                return false;
            }
            kills_left -= 1;
        }
        true
    });
    faults.sort_by(|a, b| a.0.total_cmp(&b.0));
    Plan {
        warm,
        mid,
        end: d,
        faults_until,
        faults,
    }
}

fn sim_addr(sim: &str) -> String {
    sim.trim_start_matches("http://").to_string()
}

fn post_fault(sh: &Shared, body: &Value) -> Result<(), String> {
    let (st, resp) = http(
        &sim_addr(&sh.args.sim),
        "POST",
        "/sim/faults",
        None,
        Some(body.to_string().as_bytes()),
        Duration::from_secs(10),
    )?;
    if st != 200 {
        return Err(format!("{st} {}", String::from_utf8_lossy(&resp)));
    }
    Ok(())
}

fn inject(sh: &Shared, f: &Fault, rng: &mut StdRng) {
    let body = match f {
        Fault::DropWatches => json!({"dropWatches": true}),
        Fault::Fail { status, count } => {
            json!({"failRequests": {"count": count, "status": status, "retryAfterSecs": 1}})
        }
        Fault::CutExec => json!({"cutStreams": "exec"}),
        Fault::Outage(secs) => json!({"outageSecs": secs}),
        Fault::Kill => {
            let sessions = sh.sessions.lock().clone();
            let alive: Vec<&Arc<Sess>> = sessions
                .iter()
                .filter(|s| {
                    let st = s.st.lock();
                    st.killed_at.is_none() && st.start_error.is_none() && st.lines > 0
                })
                .collect();
            if alive.len() <= 1 {
                *sh.faults.lock().skipped.entry(f.name()).or_default() += 1;
                return;
            }
            let s = alive[rng.random_range(0..alive.len())];
            let pod = s.pod.lock().clone();
            s.st.lock().killed_at = Some(Instant::now());
            json!({"killContainer": {"namespace": "default", "pod": pod,
                                     "container": format!("app-{APP_NAME}")}})
        }
    };
    match post_fault(sh, &body) {
        Ok(()) => *sh.faults.lock().counts.entry(f.name()).or_default() += 1,
        Err(e) => {
            eprintln!("soak: fault {f:?} not injected: {e}");
            sh.faults.lock().failed_posts += 1;
        }
    }
}

// ---------------------------------------------------------------- samples

#[derive(Clone, Copy, Default)]
struct Sample {
    rss_kib: u64,
    threads: u64,
    fds: u64,
    steady: bool,
}

fn proc_figures(pid: u32) -> Option<(u64, u64, u64)> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    let field = |k: &str| -> Option<u64> {
        status
            .lines()
            .find_map(|l| l.strip_prefix(k))?
            .split_whitespace()
            .next()?
            .parse()
            .ok()
    };
    let fds = std::fs::read_dir(format!("/proc/{pid}/fd")).ok()?.count() as u64;
    Some((field("VmRSS:")?, field("Threads:")?, fds))
}

fn median(mut v: Vec<u64>) -> u64 {
    v.sort_unstable();
    v.get(v.len() / 2).copied().unwrap_or(0)
}

/// Holds every client connected, waits until they all are (20 s at most),
/// then takes the median of five readings 200 ms apart.
fn sample(sh: &Shared) -> Sample {
    sh.hold.store(true, Ordering::SeqCst);
    let deadline = Instant::now() + Duration::from_secs(20);
    let steady = loop {
        let sessions = sh.sessions.lock().clone();
        let all = sessions
            .iter()
            .filter(|s| s.st.lock().start_error.is_none())
            .all(|s| s.steady.load(Ordering::SeqCst))
            && sh.exec_steady.iter().all(|e| e.load(Ordering::SeqCst));
        if all {
            break true;
        }
        if Instant::now() >= deadline {
            break false;
        }
        std::thread::sleep(Duration::from_millis(50));
    };
    let (mut rss, mut thr, mut fds) = (Vec::new(), Vec::new(), Vec::new());
    for i in 0..5 {
        if i > 0 {
            std::thread::sleep(Duration::from_millis(200));
        }
        if let Some((r, t, f)) = proc_figures(sh.args.daemon_pid) {
            rss.push(r);
            thr.push(t);
            fds.push(f);
        }
    }
    sh.hold.store(false, Ordering::SeqCst);
    Sample {
        rss_kib: median(rss),
        threads: median(thr),
        fds: median(fds),
        steady,
    }
}

// ------------------------------------------------------------------ set-up

fn sim_client(a: &Args) -> Result<Client, String> {
    Client::new(Connection::plain(&a.sim)).map_err(|e| format!("sim client: {e}"))
}

/// The exec target: a Deployment of two idle pods labelled for the
/// workspace; waits until both are ready.
fn ensure_target(a: &Args, sim: &Client) -> Result<(), String> {
    let labels = json!({"app.kubernetes.io/managed-by": "kubegate",
                        "kubegate.dev/workspace-uid": a.uid, "app": a.deployment});
    let dep = json!({
        "apiVersion": "apps/v1", "kind": "Deployment",
        "metadata": {"name": a.deployment, "namespace": a.project, "labels": labels},
        "spec": {"replicas": 2, "selector": {"matchLabels": {"app": a.deployment}},
                 "template": {"metadata": {"labels": {"app": a.deployment}},
                              "spec": {"containers": [{"name": "main", "image": "busybox",
                                 "command": ["sh", "-c", "trap 'exit 0' TERM; while :; do sleep 1; done"]}]}}}
    });
    let path = format!("/apis/apps/v1/namespaces/{}/deployments", a.project);
    let req = KubeRequest::new(ureq::http::Method::POST, path).json(dep.to_string().into_bytes());
    match sim.send_json::<Value>(&req) {
        Ok(_) => {}
        Err(e) if e.to_string().contains("already exists") => {}
        Err(e) => return Err(format!("creating the exec target: {e}")),
    }
    let get = format!(
        "/apis/apps/v1/namespaces/{}/deployments/{}",
        a.project, a.deployment
    );
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let v: Value = sim
            .send_json(&KubeRequest::get(get.clone()))
            .map_err(|e| format!("reading the exec target: {e}"))?;
        if v["status"]["readyReplicas"].as_i64() == Some(2) {
            return Ok(());
        }
        if Instant::now() >= deadline {
            return Err(format!(
                "exec target not ready within 60 s: {}",
                v["status"]
            ));
        }
        std::thread::sleep(Duration::from_millis(100));
    }
}

fn watch_pods(sim: &Client) -> Result<Vec<String>, String> {
    let v: Value = sim
        .send_json(&KubeRequest::get(
            "/api/v1/namespaces/default/pods?labelSelector=kubegate.dev%2Fmode%3Dwatch",
        ))
        .map_err(|e| format!("listing session pods: {e}"))?;
    Ok(v["items"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|p| p["metadata"]["name"].as_str().map(str::to_string))
        .collect())
}

fn metric(text: &str, name: &str) -> Option<i64> {
    text.lines()
        .filter(|l| !l.starts_with('#'))
        .find_map(|l| l.strip_prefix(name)?.strip_prefix(' ')?.trim().parse().ok())
}

// ------------------------------------------------------------------- main

fn main() -> ExitCode {
    let argv: Vec<String> = std::env::args().skip(1).collect();
    let args = match parse_args(&argv) {
        Ok(a) => a,
        Err(e) => {
            eprintln!("kubegate-soak: {e}\n{USAGE}");
            return ExitCode::from(2);
        }
    };
    match run(args) {
        Ok(true) => ExitCode::SUCCESS,
        Ok(false) => ExitCode::from(1),
        Err(e) => {
            eprintln!("kubegate-soak: {e}");
            ExitCode::from(2)
        }
    }
}

fn run(args: Args) -> Result<bool, String> {
    let sim = sim_client(&args)?;
    ensure_target(&args, &sim)?;
    let plan = plan(args.duration, args.seed, args.sessions);
    eprintln!(
        "soak: {} sessions, {} execs, {} s (warm-up {:.0} s, faults until {:.0} s, {} faults), seed {}",
        args.sessions,
        args.execs,
        args.duration.as_secs(),
        plan.warm,
        plan.faults_until,
        plan.faults.len(),
        args.seed
    );
    post_fault_seed(&args)?;
    let sh = Arc::new(Shared {
        exec_steady: (0..args.execs).map(|_| AtomicBool::new(false)).collect(),
        args,
        t0: Mutex::new(None),
        stop: AtomicBool::new(false),
        hold: AtomicBool::new(false),
        sessions: Mutex::new(Vec::new()),
        execs: Mutex::new(ExecTotals::default()),
        faults: Mutex::new(FaultLog::default()),
    });
    let mut threads: Vec<std::thread::JoinHandle<()>> = Vec::new();
    let mut sse_threads: Vec<std::thread::JoinHandle<()>> = Vec::new();

    // Sessions: started 8 at a time; each worker then runs its io client.
    let started = Instant::now();
    let (permit_tx, permit_rx) = crossbeam_channel::bounded::<()>(8);
    let (ready_tx, ready_rx) = crossbeam_channel::bounded::<(
        usize,
        Result<std::thread::JoinHandle<()>, String>,
    )>(sh.args.sessions.max(1));
    for i in 0..sh.args.sessions {
        let s = Arc::new(Sess {
            idx: i,
            id: Mutex::new(String::new()),
            pod: Mutex::new(String::new()),
            st: Mutex::new(SessState::default()),
            steady: AtomicBool::new(false),
            sse_sock: Mutex::new(None),
            sse_done: AtomicBool::new(false),
        });
        sh.sessions.lock().push(s.clone());
        let (sh2, sim2, ptx, prx, rtx) = (
            sh.clone(),
            sim.clone(),
            permit_tx.clone(),
            permit_rx.clone(),
            ready_tx.clone(),
        );
        let rng = StdRng::seed_from_u64(sh.args.seed.wrapping_mul(1000).wrapping_add(i as u64));
        let h = std::thread::Builder::new()
            .name(format!("session-{i}"))
            .spawn(move || {
                let _ = ptx.send(());
                let r = start_session(&sh2, &s, &sim2);
                let _ = prx.recv();
                let ok = r.is_ok();
                if let Err(e) = &r {
                    s.st.lock().start_error = Some(e.clone());
                    s.sse_done.store(true, Ordering::SeqCst);
                }
                let _ = rtx.send((i, r));
                if ok {
                    session_io(&sh2, &s, rng);
                }
            })
            .map_err(|e| format!("spawning a session worker: {e}"))?;
        threads.push(h);
    }
    drop(ready_tx);
    let mut start_failures = 0;
    for _ in 0..sh.args.sessions {
        match ready_rx.recv_timeout(Duration::from_secs(600)) {
            Ok((_, Ok(h))) => sse_threads.push(h),
            Ok((i, Err(e))) => {
                start_failures += 1;
                eprintln!("soak: session {i} did not start: {e}");
            }
            Err(_) => return Err("sessions did not start within 600 s".into()),
        }
    }
    eprintln!(
        "soak: {} sessions running after {:.1} s",
        sh.args.sessions - start_failures,
        started.elapsed().as_secs_f64()
    );
    // The apps print once `go` arrived: wait until every one did.
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let sessions = sh.sessions.lock().clone();
        let waiting = sessions
            .iter()
            .filter(|s| {
                let st = s.st.lock();
                st.start_error.is_none() && st.lines == 0
            })
            .count();
        if waiting == 0 {
            break;
        }
        if Instant::now() >= deadline {
            eprintln!("soak: {waiting} session apps printed nothing within 60 s");
            break;
        }
        std::thread::sleep(Duration::from_millis(100));
    }

    for w in 0..sh.args.execs {
        let sh2 = sh.clone();
        let rng = StdRng::seed_from_u64(sh.args.seed.wrapping_mul(7919).wrapping_add(w as u64));
        threads.push(
            std::thread::Builder::new()
                .name(format!("exec-{w}"))
                .spawn(move || exec_worker(&sh2, w, rng))
                .map_err(|e| format!("spawning an exec worker: {e}"))?,
        );
    }

    let t0 = Instant::now();
    *sh.t0.lock() = Some(t0);
    let at = |secs: f64| t0 + Duration::from_secs_f64(secs);
    let mut frng = StdRng::seed_from_u64(sh.args.seed ^ 0xfa17);
    let mut samples: Vec<(&str, Sample)> = Vec::new();
    let mut points = vec![("start", plan.warm), ("middle", plan.mid)];
    let mut next_fault = 0;
    let mut cleared = false;
    let mut last_progress = Instant::now();
    loop {
        let now = Instant::now();
        if now >= at(plan.end) {
            break;
        }
        if let Some((name, t)) = points.first().copied() {
            if now >= at(t) {
                points.remove(0);
                let s = sample(&sh);
                eprintln!(
                    "soak: {:>6.1} s sample {name}: RSS {} KiB, {} threads, {} fds{}",
                    sh.elapsed(),
                    s.rss_kib,
                    s.threads,
                    s.fds,
                    if s.steady {
                        ""
                    } else {
                        " (not every client was connected)"
                    }
                );
                samples.push((name, s));
                continue;
            }
        }
        if let Some((t, f)) = plan.faults.get(next_fault) {
            if now >= at(*t) {
                inject(&sh, f, &mut frng);
                eprintln!("soak: {:>6.1} s fault {f:?}", sh.elapsed());
                next_fault += 1;
                continue;
            }
        }
        if !cleared && now >= at(plan.faults_until) {
            // Whatever is pending ends here: the settle window is clean.
            let _ = http(
                &sim_addr(&sh.args.sim),
                "DELETE",
                "/sim/faults",
                None,
                None,
                Duration::from_secs(10),
            );
            cleared = true;
            eprintln!("soak: {:>6.1} s faults over; settling", sh.elapsed());
        }
        if last_progress.elapsed() >= Duration::from_secs(10) {
            last_progress = Instant::now();
            let sessions = sh.sessions.lock().clone();
            let lines: u64 = sessions.iter().map(|s| s.st.lock().lines).sum();
            let t = sh.execs.lock();
            let (rss, threads, fds) = proc_figures(sh.args.daemon_pid).unwrap_or_default();
            eprintln!(
                "soak: {:>6.1} s: {lines} session lines, execs {} started / {} completed; daemon RSS {rss} KiB, {threads} threads, {fds} fds",
                sh.elapsed(),
                t.started,
                t.completed
            );
        }
        std::thread::sleep(Duration::from_millis(20));
    }

    // Sessions down: wrong status, or (apps not killed) output stopped.
    let sessions = sh.sessions.lock().clone();
    let mut down: Vec<String> = Vec::new();
    for s in &sessions {
        let id = s.id.lock().clone();
        let st = s.st.lock();
        if let Some(e) = &st.start_error {
            down.push(format!("session {}: start failed: {e}", s.idx));
            continue;
        }
        if !st.bad_status.is_empty() {
            down.push(format!("{id}: status {:?}", st.bad_status));
        }
        if st.killed_at.is_none() {
            let quiet = st.last_progress.map_or(Duration::MAX, |t| t.elapsed());
            if quiet > QUIET_DOWN {
                down.push(format!("{id}: no output for {:.0} s", quiet.as_secs_f64()));
            }
            if !st.runs_ended.is_empty() {
                down.push(format!("{id}: app ended unasked: {:?}", st.runs_ended));
            }
        }
    }
    for s in &sessions {
        let id = s.id.lock().clone();
        if id.is_empty() {
            continue;
        }
        match http(
            &sh.args.daemon,
            "GET",
            &format!("/v1/sessions/{id}"),
            Some(&sh.args.token),
            None,
            Duration::from_secs(30),
        ) {
            Ok((200, b)) if json_of(&b)["status"] == "running" => {}
            Ok((st, b)) => down.push(format!("{id}: GET {st} {}", json_of(&b)["status"])),
            Err(e) => down.push(format!("{id}: GET failed: {e}")),
        }
    }
    let end_sample = sample(&sh);
    eprintln!(
        "soak: {:>6.1} s sample end: RSS {} KiB, {} threads, {} fds",
        sh.elapsed(),
        end_sample.rss_kib,
        end_sample.threads,
        end_sample.fds
    );
    samples.push(("end", end_sample));

    // Wind down: execs finish their current stream, io clients close.
    sh.stop.store(true, Ordering::SeqCst);
    let (done_tx, done_rx) = crossbeam_channel::bounded::<()>(threads.len().max(1));
    let n_workers = threads.len();
    for h in threads {
        let tx = done_tx.clone();
        std::thread::spawn(move || {
            let _ = h.join();
            let _ = tx.send(());
        });
    }
    let deadline = Instant::now() + Duration::from_secs(60);
    let mut joined = 0;
    while joined < n_workers {
        match done_rx.recv_timeout(deadline.saturating_duration_since(Instant::now())) {
            Ok(()) => joined += 1,
            Err(_) => break,
        }
    }
    let hung_workers = n_workers - joined;

    // Killed apps: their run end must have come, with 137.
    let mut exit_lost_runs = Vec::new();
    let mut exit_wrong_runs = Vec::new();
    for s in &sessions {
        let killed = s.st.lock().killed_at;
        let Some(killed) = killed else { continue };
        let id = s.id.lock().clone();
        let deadline = killed + Duration::from_secs(30);
        loop {
            let runs = s.st.lock().runs_ended.clone();
            if let Some((code, reason)) = runs.first() {
                if *code != Some(KILLED_EXIT) {
                    exit_wrong_runs.push(format!("{id}: run ended {code:?} {reason}"));
                }
                break;
            }
            if Instant::now() >= deadline {
                exit_lost_runs.push(format!("{id}: no run end after the kill"));
                break;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    // Daemon and sim counters, then stop every session and look for pods.
    let metrics = http(
        &sh.args.daemon,
        "GET",
        "/metrics",
        Some(&sh.args.token),
        None,
        Duration::from_secs(30),
    )
    .map(|(_, b)| String::from_utf8_lossy(&b).into_owned())
    .unwrap_or_default();
    let sim_faults = http(
        &sim_addr(&sh.args.sim),
        "GET",
        "/sim/faults",
        None,
        None,
        Duration::from_secs(10),
    )
    .map(|(_, b)| json_of(&b))
    .unwrap_or(Value::Null);
    for s in &sessions {
        s.sse_done.store(true, Ordering::SeqCst);
        let id = s.id.lock().clone();
        if id.is_empty() {
            continue;
        }
        match http(
            &sh.args.daemon,
            "DELETE",
            &format!("/v1/sessions/{id}"),
            Some(&sh.args.token),
            None,
            Duration::from_secs(30),
        ) {
            Ok((204, _)) => {}
            Ok((st, b)) => eprintln!("soak: DELETE {id}: {st} {}", json_of(&b)),
            Err(e) => eprintln!("soak: DELETE {id}: {e}"),
        }
        if let Some(sock) = s.sse_sock.lock().take() {
            let _ = sock.shutdown(std::net::Shutdown::Both);
        }
    }
    for h in sse_threads {
        let _ = h.join();
    }
    let deadline = Instant::now() + Duration::from_secs(60);
    let leaked = loop {
        match watch_pods(&sim) {
            Ok(p) if p.is_empty() => break p,
            Ok(p) if Instant::now() >= deadline => break p,
            Err(e) if Instant::now() >= deadline => break vec![format!("(unknown: {e})")],
            _ => std::thread::sleep(Duration::from_millis(200)),
        }
    };

    Ok(report(
        &sh,
        &Report {
            samples,
            down,
            leaked,
            hung_workers,
            exit_lost_runs,
            exit_wrong_runs,
            metrics,
            sim_faults,
        },
    ))
}

fn post_fault_seed(a: &Args) -> Result<(), String> {
    let (st, b) = http(
        &sim_addr(&a.sim),
        "POST",
        "/sim/faults",
        None,
        Some(json!({"seed": a.seed}).to_string().as_bytes()),
        Duration::from_secs(10),
    )?;
    if st != 200 {
        return Err(format!(
            "the sim's fault endpoint: {st} {}",
            String::from_utf8_lossy(&b)
        ));
    }
    Ok(())
}

struct Report {
    samples: Vec<(&'static str, Sample)>,
    down: Vec<String>,
    leaked: Vec<String>,
    hung_workers: usize,
    exit_lost_runs: Vec<String>,
    exit_wrong_runs: Vec<String>,
    metrics: String,
    sim_faults: Value,
}

fn drift(a: u64, b: u64) -> f64 {
    if a == 0 {
        return 0.0;
    }
    (b as f64 - a as f64) * 100.0 / a as f64
}

/// Prints one row of the table: figure, value, bar, verdict (None: counted only).
type RowFn<'a> = dyn FnMut(&str, String, &str, Option<bool>) + 'a;

/// Prints the table; true when every bar holds.
fn report(sh: &Shared, r: &Report) -> bool {
    let sessions = sh.sessions.lock().clone();
    let (mut lines, mut bytes, mut lost_b, mut lost_l, mut dup, mut bad) = (0, 0, 0, 0, 0, 0);
    let (mut skipped, mut repeated, mut gaps, mut recon, mut io_err, mut sse_re) =
        (0, 0, 0, 0, 0, 0);
    let mut longest_quiet = Duration::ZERO;
    let mut notes = Vec::new();
    for s in &sessions {
        let st = s.st.lock();
        lines += st.lines;
        bytes += st.bytes;
        lost_b += st.lost_bytes;
        lost_l += st.lost_lines;
        dup += st.dup_lines;
        bad += st.bad_lines;
        skipped += st.seq_skipped;
        repeated += st.seq_repeated;
        gaps += st.gap_frames;
        recon += st.reconnects;
        io_err += st.io_errors;
        sse_re += st.sse_reconnects;
        longest_quiet = longest_quiet.max(st.longest_quiet);
        if st.lost_lines + st.dup_lines + st.bad_lines + st.seq_skipped + st.gap_frames > 0 {
            notes.push(format!(
                "{}: {:?}",
                s.id.lock(),
                st.notices.iter().take(5).collect::<Vec<_>>()
            ));
        }
    }
    let t = sh.execs.lock();
    let f = sh.faults.lock();
    let yes = |ok: bool| if ok { "holds" } else { "**FAILS**" };
    let mut all = true;
    let mut row = |name: &str, value: String, bar: &str, ok: Option<bool>| {
        if let Some(false) = ok {
            all = false;
        }
        println!("| {name} | {value} | {bar} | {} |", ok.map_or("-", yes));
    };
    println!();
    println!(
        "### soak: {} s, {} watch sessions, {} interactive exec streams, seed {}",
        sh.args.duration.as_secs(),
        sh.args.sessions,
        sh.args.execs,
        sh.args.seed
    );
    println!();
    println!("| figure | value | bar | verdict |");
    println!("|---|---|---|---|");
    let session_lost = lost_b + dup + bad + skipped + repeated + gaps;
    row(
        "session output bytes lost (after replay on reconnect)",
        format!(
            "{lost_b} ({lost_l} lines missing, {dup} repeated, {bad} garbled; frames: {skipped} seqs skipped, {repeated} repeated, {gaps} announced as gaps)"
        ),
        "0",
        Some(session_lost == 0),
    );
    row(
        "exec echo bytes lost",
        t.lost_bytes.to_string(),
        "0",
        Some(t.lost_bytes == 0),
    );
    let lost = t.exit_lost + r.exit_lost_runs.len() as u64;
    let wrong = t.exit_wrong + r.exit_wrong_runs.len() as u64;
    row(
        "exit codes lost (exec streams ended without exit or error; killed apps without a run end)",
        format!(
            "{lost} ({} exec, {} app)",
            t.exit_lost,
            r.exit_lost_runs.len()
        ),
        "0",
        Some(lost == 0),
    );
    row(
        "exit codes wrong (exec: an exit other than 7 after every echo; app: a run end other than 137)",
        format!("{wrong} ({} exec, {} app)", t.exit_wrong, r.exit_wrong_runs.len()),
        "0",
        Some(wrong == 0),
    );
    row(
        "sessions that should be running and are not",
        r.down.len().to_string(),
        "0",
        Some(r.down.is_empty()),
    );
    row(
        "pods leaked after stop",
        r.leaked.len().to_string(),
        "0",
        Some(r.leaked.is_empty()),
    );
    row(
        "streams stalled (an awaited frame not there within 30 s) / workers not ending within 60 s",
        format!("{} / {}", t.stalled, r.hung_workers),
        "0 / 0",
        Some(t.stalled == 0 && r.hung_workers == 0),
    );
    let get = |n: &str| r.samples.iter().find(|s| s.0 == n).map(|s| s.1);
    if let (Some(a), Some(m), Some(e)) = (get("start"), get("middle"), get("end")) {
        let steady = a.steady && m.steady && e.steady;
        let fig = |name: &str, x: fn(&Sample) -> u64, unit: &str, row: &mut RowFn<'_>| {
            let d = drift(x(&a), x(&e));
            row(
                name,
                format!(
                    "{} / {} / {} {unit} (end vs start {d:+.1}%, middle {:+.1}%)",
                    x(&a),
                    x(&m),
                    x(&e),
                    drift(x(&a), x(&m))
                ),
                "growth < 5%",
                Some(d < DRIFT_BAR),
            );
        };
        fig(
            "daemon RSS start / middle / end",
            |s| s.rss_kib,
            "KiB",
            &mut row,
        );
        fig(
            "daemon threads start / middle / end",
            |s| s.threads,
            "",
            &mut row,
        );
        fig(
            "daemon open fds start / middle / end",
            |s| s.fds,
            "",
            &mut row,
        );
        if !steady {
            row(
                "every client connected while sampling",
                "no".into(),
                "yes",
                Some(false),
            );
        }
    } else {
        row("samples", "missing".into(), "3", Some(false));
    }
    let counts: Vec<String> = f.counts.iter().map(|(k, v)| format!("{k} {v}")).collect();
    row(
        "faults injected (driver)",
        format!(
            "{}{}",
            counts.join(", "),
            if f.failed_posts > 0 {
                format!("; {} not injected", f.failed_posts)
            } else {
                String::new()
            }
        ),
        "-",
        None,
    );
    let sf = &r.sim_faults;
    row(
        "faults seen by the sim",
        format!(
            "{} requests failed, {} watch drop rounds, {} stream cut rounds, {} containers killed, {} outages",
            sf["failedRequests"], sf["droppedWatchRounds"], sf["cutStreamRounds"],
            sf["killedContainers"], sf["outages"]
        ),
        "-",
        None,
    );
    let m = |n: &str| metric(&r.metrics, n).map_or("?".into(), |v| v.to_string());
    row(
        "daemon watch restarts / API retries",
        format!(
            "{} / {}",
            m("kubegate_watch_restarts_total"),
            m("kubegate_api_retries_total")
        ),
        "counted",
        None,
    );
    let errs: Vec<String> = t.errors.iter().map(|(k, v)| format!("{k} {v}")).collect();
    let refused: Vec<String> = t.refused.iter().map(|(k, v)| format!("{k} {v}")).collect();
    row(
        "exec streams: started / completed with exit 7 / ended with an error frame / refused before the upgrade",
        format!(
            "{} / {} / {} ({}) / {} ({})",
            t.started,
            t.completed,
            t.errors.values().sum::<u64>(),
            errs.join(", "),
            t.refused.values().sum::<u64>(),
            refused.join(", ")
        ),
        "-",
        None,
    );
    row(
        "checked: session lines / bytes, exec echoes / bytes",
        format!("{lines} / {bytes}, {} / {}", t.lines, t.bytes),
        "-",
        None,
    );
    row(
        "io reconnects with lastSeq / io closes by the daemon or refused connects / event-stream reconnects",
        format!("{recon} / {io_err} / {sse_re}"),
        "-",
        None,
    );
    row(
        "longest pause in one session's output (apps not killed)",
        format!("{:.1} s", longest_quiet.as_secs_f64()),
        "-",
        None,
    );
    println!();
    let detail = |title: &str, v: &[String]| {
        if !v.is_empty() {
            println!("{title}:");
            for d in v.iter().take(20) {
                println!("- {d}");
            }
        }
    };
    detail("sessions down", &r.down);
    detail("pods leaked", &r.leaked);
    detail("app exit codes lost", &r.exit_lost_runs);
    detail("app exit codes wrong", &r.exit_wrong_runs);
    detail("sessions with lost or repeated output", &notes);
    detail("exec details", &t.details);
    let msgs: Vec<String> = t
        .messages
        .iter()
        .map(|(m, n)| format!("{n} x {m}"))
        .collect();
    detail("exec error frames", &msgs);
    println!(
        "result: {}",
        if all {
            "every bar holds"
        } else {
            "a bar FAILS"
        }
    );
    all
}

#[cfg(test)]
mod tests {
    use super::*;

    fn line(n: u64) -> Vec<u8> {
        format!("{n} {}\n", "0".repeat(PAD)).into_bytes()
    }

    #[test]
    fn lines_in_order_across_frame_boundaries_count_no_loss() {
        let mut st = SessState::default();
        let mut all = Vec::new();
        for n in 0..10 {
            all.extend(line(n));
        }
        // Frames cut anywhere, as the attach delivers them.
        for chunk in all.chunks(37) {
            st.take_stdout(chunk);
        }
        assert_eq!((st.lines, st.next), (10, 10));
        assert_eq!(st.lost_lines + st.dup_lines + st.bad_lines, 0);
        assert_eq!(st.bytes, all.len() as u64);
    }

    #[test]
    fn missing_repeated_and_garbled_lines_are_counted() {
        let mut st = SessState::default();
        st.take_stdout(&line(0));
        st.take_stdout(&line(3));
        assert_eq!(st.lost_lines, 2);
        assert_eq!(st.lost_bytes, line_len(1) + line_len(2));
        st.take_stdout(&line(2));
        assert_eq!(st.dup_lines, 1);
        st.take_stdout(b"4 truncated\n");
        assert_eq!(st.bad_lines, 1);
        assert_eq!(st.next, 4);
    }

    #[test]
    fn durations() {
        assert_eq!(parse_duration("90s"), Ok(Duration::from_secs(90)));
        assert_eq!(parse_duration("30m"), Ok(Duration::from_secs(1800)));
        assert_eq!(parse_duration("1h"), Ok(Duration::from_secs(3600)));
        assert_eq!(parse_duration("45"), Ok(Duration::from_secs(45)));
        assert!(parse_duration("0s").is_err());
        assert!(parse_duration("ten").is_err());
    }

    #[test]
    fn the_plan_is_seeded_and_keeps_the_samples_quiet() {
        let p = plan(Duration::from_secs(90), 1, 20);
        let q = plan(Duration::from_secs(90), 1, 20);
        let times = |p: &Plan| p.faults.iter().map(|f| f.0).collect::<Vec<_>>();
        assert_eq!(times(&p), times(&q));
        assert_ne!(times(&p), times(&plan(Duration::from_secs(90), 2, 20)));
        assert_eq!((p.warm, p.end), (20.0, 90.0));
        assert!(p.faults.iter().all(|f| f.0 < p.faults_until));
        for s in [p.warm, p.mid] {
            assert!(p.faults.iter().all(|f| f.0 <= s - 6.0 || f.0 >= s + 2.0));
        }
        let count = |p: &Plan, k: &str| p.faults.iter().filter(|f| f.1.name() == k).count();
        assert_eq!(count(&p, "API outages"), 1);
        assert!(count(&p, "containers killed") <= 5);
        for k in [
            "watch drops",
            "5xx bursts",
            "429 bursts",
            "exec stream cuts",
        ] {
            assert!(count(&p, k) >= 2, "{k}");
        }
        // Nothing else while the API is out.
        let out = p.faults.iter().find(|f| matches!(f.1, Fault::Outage(_)));
        let o = out.map_or(0.0, |f| f.0);
        assert!(p
            .faults
            .iter()
            .all(|f| matches!(f.1, Fault::Outage(_)) || f.0 <= o - 1.0 || f.0 >= o + 12.0));
    }
}
