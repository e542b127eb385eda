//! The watch sessions: starting one (POST, its event stream, `running`),
//! checking every line of its app's output in order, and the io client
//! that disconnects and reconnects with `lastSeq`.

use crate::args::Args;
use crate::state::{Sess, SessState, Shared};
use crate::wire::{dial, http, json_of, ws_close, ws_open, ws_read, Got};
use crate::{SoakError, APP, APP_NAME, PAD};
use kubegate::http::client::{self as http_client, close_request};
use kubegate::http::response::{framing, BodyReader, Limits};
use kubegate::http::stream::ClientSocket;
use kubegate::kube::client::rest::Request as KubeRequest;
use kubegate::kube::client::Client;
use kubegate::session::io::wire::{decode_frame, SUBPROTOCOL as IO_PROTOCOL};
use rand::rngs::StdRng;
use rand::Rng;
use serde_json::{json, Value};
use std::io::Read;
use std::net::TcpStream;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Duration, Instant};
use tungstenite::Message;

pub(crate) fn session_body() -> Value {
    json!({
        "apps": [{"name": APP_NAME, "entry": "seq.sh", "command": ["bash", "seq.sh"],
                  "io": "streams", "runner": false}],
        "bundle": {"files": [{"path": "seq.sh", "content": APP}]}
    })
}

pub(crate) fn line_len(n: u64) -> u64 {
    n.to_string().len() as u64 + 1 + PAD as u64 + 1
}

impl SessState {
    pub(crate) fn take_stdout(&mut self, data: &[u8]) {
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
                let run = format!("lines {}..{} missing", self.next, n - 1);
                // Every run, with when it was seen, to match with the
                // daemon's log (the notices keep 10 a session).
                eprintln!(
                    "soak: {} session {}: {run}",
                    kubegate::kube::time::rfc3339(std::time::SystemTime::now()),
                    self.id
                );
                self.note(run);
            }
            self.next = n + 1;
            self.lines += 1;
            self.bytes += line.len() as u64;
        }
    }

    pub(crate) fn note(&mut self, n: String) {
        if self.notices.len() < 10 {
            self.notices.push(n);
        }
    }
}

/// Heartbeats come every 20 s: a longer silence is a dead connection.
const SSE_SILENCE: Duration = Duration::from_secs(45);

/// Opens the session's event stream (after `last_id`) through the crate's
/// one client path: the de-framed body as a reader and a handle to shut
/// its socket down.
pub(crate) fn sse_open(
    args: &Args,
    id: &str,
    last_id: Option<u64>,
) -> Result<(BodyReader<ClientSocket>, TcpStream), SoakError> {
    let (ep, mut s) = dial(&args.daemon, Duration::from_secs(10))?;
    let auth = format!("Bearer {}", args.token);
    let last = last_id.map(|l| l.to_string());
    let mut headers = vec![
        ("Authorization", auth.as_str()),
        ("Accept", "text/event-stream"),
    ];
    if let Some(l) = &last {
        headers.push(("Last-Event-ID", l));
    }
    let path = format!("/v1/sessions/{id}/events");
    let req = close_request("GET", &path, &ep.authority, &headers, None);
    let deadline = Instant::now() + SSE_SILENCE;
    http_client::write_all(&mut s, &req, deadline)
        .map_err(|e| SoakError::Io(format!("write: {e}")))?;
    let (head, rest) = http_client::read_head(&mut s, &ep, &Limits::default(), deadline)
        .map_err(|e| SoakError::Io(format!("head: {e}")))?;
    if head.code != 200 {
        return Err(SoakError::Answer(format!(
            "event stream refused: {} {}",
            head.code, head.reason
        )));
    }
    s.tcp()
        .set_read_timeout(Some(SSE_SILENCE))
        .map_err(|e| SoakError::Io(format!("socket: {e}")))?;
    let handle = s
        .tcp()
        .try_clone()
        .map_err(|e| SoakError::Io(format!("socket: {e}")))?;
    Ok((BodyReader::new(s, rest, framing(&head)), handle))
}

/// Reads one session's events until told to stop, reconnecting with
/// `Last-Event-ID`: statuses and run ends go into the session's state,
/// statuses also to `status_tx` (the start waits on it; bounded to 64).
pub(crate) fn sse_loop(sh: &Shared, s: &Sess, status_tx: crossbeam_channel::Sender<String>) {
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
        let mut pending: Vec<u8> = Vec::new();
        let mut buf = vec![0u8; 16 * 1024];
        loop {
            // The body ends (0), breaks or stays silent too long: reconnect.
            match r.read(&mut buf) {
                Ok(0) | Err(_) => break,
                Ok(n) => pending.extend_from_slice(&buf[..n]),
            }
            while let Some(end) = pending.windows(2).position(|w| w == b"\n\n") {
                let block: Vec<u8> = pending.drain(..end + 2).collect();
                take_event(
                    sh,
                    s,
                    &String::from_utf8_lossy(&block),
                    &mut last_id,
                    &status_tx,
                );
            }
        }
        s.sse_sock.lock().take();
    }
}

/// One event block of the stream: its id becomes `last_id`; statuses and
/// run ends go into the session's state, statuses also to `status_tx`.
fn take_event(
    sh: &Shared,
    s: &Sess,
    block: &str,
    last_id: &mut Option<u64>,
    status_tx: &crossbeam_channel::Sender<String>,
) {
    let (mut ev, mut data) = (String::new(), String::new());
    for line in block.lines() {
        if let Some(v) = line.strip_prefix("id: ") {
            *last_id = v.parse().ok().or(*last_id);
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

/// Waits `d` in small steps; false when `done` turned true meanwhile.
pub(crate) fn pause(d: Duration, done: impl Fn() -> bool) -> bool {
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
pub(crate) fn start_session(
    sh: &Arc<Shared>,
    s: &Arc<Sess>,
    sim: &Client,
) -> Result<std::thread::JoinHandle<()>, SoakError> {
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
        return Err(SoakError::Answer(format!(
            "POST /v1/sessions: {st} {}",
            json_of(&resp)
        )));
    }
    let id = json_of(&resp)["sessionId"]
        .as_str()
        .ok_or_else(|| SoakError::Answer("no sessionId in the answer".into()))?
        .to_string();
    *s.id.lock() = id.clone();
    s.st.lock().id = id.clone();
    let (tx, rx) = crossbeam_channel::bounded::<String>(64);
    let (sh2, s2) = (sh.clone(), s.clone());
    let sse = std::thread::Builder::new()
        .name(format!("sse-{}", s.idx))
        .spawn(move || sse_loop(&sh2, &s2, tx))
        .map_err(|e| SoakError::Answer(format!("spawning the event reader: {e}")))?;
    let deadline = Instant::now() + Duration::from_secs(240);
    loop {
        match rx.recv_timeout(deadline.saturating_duration_since(Instant::now())) {
            Ok(st) if st == "running" => break,
            Ok(st) if st == "failed" || st == "stopped" => {
                return Err(SoakError::Answer(format!(
                    "session {id} is {st}: {:?}",
                    s.st.lock().bad_status
                )))
            }
            Ok(_) => {}
            Err(_) => {
                return Err(SoakError::Answer(format!(
                    "session {id} not running within 240 s"
                )))
            }
        }
    }
    // Its pod, for the kill fault.
    let path = format!(
        "/api/v1/namespaces/{}/pods?labelSelector=kubegate.dev%2Fsession-id%3D{id}",
        a.session_namespace
    );
    let list: Value = sim
        .send_json(&KubeRequest::get(path))
        .map_err(|e| SoakError::Answer(format!("listing the pod of {id}: {e}")))?;
    let pod = list["items"][0]["metadata"]["name"]
        .as_str()
        .ok_or_else(|| SoakError::Answer(format!("no pod for session {id}")))?;
    *s.pod.lock() = pod.to_string();
    Ok(sse)
}

/// The io client: connected for a few seconds at a time, then away for a
/// moment, then back with `lastSeq`; held connected while sampling.
pub(crate) fn session_io(sh: &Shared, s: &Sess, mut rng: StdRng) {
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::PAD;

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
}
