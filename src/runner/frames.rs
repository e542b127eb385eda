//! The debug stream's wire format, sans-IO (docs/sessions.md#while-running,
//! docs/runner.md#the-debug-stream): one server-sent event per frame,
//! `data: <json>\n\n` with the JSON on one line, and `: heartbeat` comments.
//!
//! - events: `{"kind":"event","timestamp","event","payload"}` (and
//!   `"metadata":{"replayed":true}` on the replay a new subscriber gets
//!   first): `Runner.RunStarted {generation}`, `Runner.RunEnded
//!   {generation, exitCode, signal?, error?}`, `Kernel.PortsResolved
//!   {ports: [{port, protocol}]}`;
//! - log lines: `{"kind":"log","timestamp","stream":"stdout"|"stderr","line"}`,
//!   cut by [`LineSplitter`].
//!
//! Timestamps are RFC 3339 UTC with milliseconds.

use crate::session::spec::Port;
use serde_json::{json, Value};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

pub const RUN_STARTED: &str = "Runner.RunStarted";
pub const RUN_ENDED: &str = "Runner.RunEnded";
pub const PORTS_RESOLVED: &str = "Kernel.PortsResolved";

/// A comment line the SSE parser skips; keeps idle connections (and the
/// proxies between) alive.
pub const HEARTBEAT: &[u8] = b": heartbeat\n\n";

/// Longest log line in one frame, in bytes; longer lines are cut into
/// several frames.
pub const MAX_LINE_BYTES: usize = 16 * 1024;

/// `2024-05-01T12:00:00.123Z`.
pub fn timestamp(t: SystemTime) -> String {
    let d = t.duration_since(UNIX_EPOCH).unwrap_or(Duration::ZERO);
    let base = crate::kube::time::rfc3339(UNIX_EPOCH + Duration::from_secs(d.as_secs()));
    let stem = base.strip_suffix('Z').unwrap_or(&base);
    format!("{stem}.{:03}Z", d.subsec_millis())
}

/// An event frame.
pub fn event(ts: &str, name: &str, payload: Value) -> Value {
    json!({"kind": "event", "timestamp": ts, "event": name, "payload": payload})
}

/// A log-line frame.
pub fn log_line(ts: &str, stream: &str, line: &str) -> Value {
    json!({"kind": "log", "timestamp": ts, "stream": stream, "line": line})
}

pub fn run_started(ts: &str, generation: u64) -> Value {
    event(ts, RUN_STARTED, json!({ "generation": generation }))
}

/// How a run ended, for `Runner.RunEnded`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Ended {
    /// The exit code, or 128 + N when killed by signal N (the shell's and
    /// the runner's own convention).
    pub exit_code: i32,
    /// The signal that killed it.
    pub signal: Option<i32>,
    /// Why it could not start at all.
    pub error: Option<String>,
}

pub fn run_ended(ts: &str, generation: u64, how: &Ended) -> Value {
    let mut p = json!({"generation": generation, "exitCode": how.exit_code});
    if let Some(s) = how.signal {
        p["signal"] = json!(signal_name(s));
    }
    if let Some(e) = &how.error {
        p["error"] = json!(e);
    }
    event(ts, RUN_ENDED, p)
}

pub fn ports_resolved(ts: &str, ports: &[Port]) -> Value {
    let list: Vec<Value> = ports
        .iter()
        .map(|p| json!({"port": p.port, "protocol": p.protocol.as_str()}))
        .collect();
    event(ts, PORTS_RESOLVED, json!({ "ports": list }))
}

/// A copy of an event frame marked as replayed.
pub fn replayed(frame: &Value) -> Value {
    let mut f = frame.clone();
    f["metadata"] = json!({"replayed": true});
    f
}

/// One frame on the wire. `serde_json` escapes every control character,
/// so the JSON is one line and cannot end the event early.
pub fn encode(frame: &Value) -> Vec<u8> {
    let mut out = b"data: ".to_vec();
    // Serialising a Value cannot fail (its keys are strings).
    out.extend_from_slice(frame.to_string().as_bytes());
    out.extend_from_slice(b"\n\n");
    out
}

/// `SIGTERM` for 15; `SIG<N>` for one without a name.
pub fn signal_name(sig: i32) -> String {
    let name = match sig {
        libc::SIGHUP => "SIGHUP",
        libc::SIGINT => "SIGINT",
        libc::SIGQUIT => "SIGQUIT",
        libc::SIGILL => "SIGILL",
        libc::SIGTRAP => "SIGTRAP",
        libc::SIGABRT => "SIGABRT",
        libc::SIGBUS => "SIGBUS",
        libc::SIGFPE => "SIGFPE",
        libc::SIGKILL => "SIGKILL",
        libc::SIGUSR1 => "SIGUSR1",
        libc::SIGSEGV => "SIGSEGV",
        libc::SIGUSR2 => "SIGUSR2",
        libc::SIGPIPE => "SIGPIPE",
        libc::SIGALRM => "SIGALRM",
        libc::SIGTERM => "SIGTERM",
        libc::SIGCHLD => "SIGCHLD",
        libc::SIGCONT => "SIGCONT",
        libc::SIGSTOP => "SIGSTOP",
        libc::SIGTSTP => "SIGTSTP",
        libc::SIGTTIN => "SIGTTIN",
        libc::SIGTTOU => "SIGTTOU",
        libc::SIGURG => "SIGURG",
        libc::SIGXCPU => "SIGXCPU",
        libc::SIGXFSZ => "SIGXFSZ",
        libc::SIGVTALRM => "SIGVTALRM",
        libc::SIGPROF => "SIGPROF",
        libc::SIGWINCH => "SIGWINCH",
        libc::SIGIO => "SIGIO",
        libc::SIGPWR => "SIGPWR",
        libc::SIGSYS => "SIGSYS",
        _ => return format!("SIG{sig}"),
    };
    name.to_string()
}

/// Cuts a byte stream into log lines: at `\n` (a `\r` before it is
/// dropped), and a line longer than `max` bytes into pieces of at most
/// `max` (cut before a UTF-8 sequence when one starts in the last 3
/// bytes, so a character is not split). Bytes that are not UTF-8 become
/// U+FFFD. The bytes themselves reach the runner's own output untouched;
/// this is only the copy for the debug stream.
#[derive(Debug)]
pub struct LineSplitter {
    buf: Vec<u8>,
    max: usize,
}

impl LineSplitter {
    pub fn new(max: usize) -> LineSplitter {
        LineSplitter {
            buf: Vec::new(),
            max: max.max(4),
        }
    }

    /// The lines completed by `data`.
    pub fn push(&mut self, mut data: &[u8]) -> Vec<String> {
        let mut out = Vec::new();
        while !data.is_empty() {
            let room = self.max - self.buf.len();
            match data.iter().take(room + 1).position(|&b| b == b'\n') {
                Some(i) => {
                    self.buf.extend_from_slice(&data[..i]);
                    if self.buf.last() == Some(&b'\r') {
                        self.buf.pop();
                    }
                    out.push(String::from_utf8_lossy(&self.buf).into_owned());
                    self.buf.clear();
                    data = &data[i + 1..];
                }
                None => {
                    let take = room.min(data.len());
                    self.buf.extend_from_slice(&data[..take]);
                    data = &data[take..];
                    if self.buf.len() >= self.max && !data.is_empty() {
                        out.push(self.cut());
                    }
                }
            }
        }
        out
    }

    /// The unfinished last line, if any (the stream ended).
    pub fn finish(&mut self) -> Option<String> {
        if self.buf.is_empty() {
            return None;
        }
        let line = String::from_utf8_lossy(&self.buf).into_owned();
        self.buf.clear();
        Some(line)
    }

    /// Emits a full buffer, keeping a UTF-8 sequence that starts in its
    /// last 3 bytes for the next piece.
    fn cut(&mut self) -> String {
        let n = self.buf.len();
        let mut at = n;
        for back in 1..=3.min(n) {
            let b = self.buf[n - back];
            if b & 0xC0 == 0xC0 {
                // A lead byte: cut before it unless its sequence is whole.
                let len = if b >= 0xF0 {
                    4
                } else if b >= 0xE0 {
                    3
                } else {
                    2
                };
                if back < len {
                    at = n - back;
                }
                break;
            }
            if b & 0x80 == 0 {
                break;
            }
        }
        let rest = self.buf.split_off(at);
        let line = String::from_utf8_lossy(&self.buf).into_owned();
        self.buf = rest;
        line
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::session::frame::parse_frame;
    use crate::session::spec::Protocol;
    use crate::session::sse::SseParser;

    #[test]
    fn timestamps_have_milliseconds() {
        let t = UNIX_EPOCH + Duration::from_millis(1_714_564_800_123);
        assert_eq!(timestamp(t), "2024-05-01T12:00:00.123Z");
        assert_eq!(timestamp(UNIX_EPOCH), "1970-01-01T00:00:00.000Z");
    }

    #[test]
    fn frames_have_the_contract_shapes() {
        let ts = "2024-05-01T12:00:00.000Z";
        assert_eq!(
            run_started(ts, 3),
            json!({"kind": "event", "timestamp": ts, "event": "Runner.RunStarted", "payload": {"generation": 3}})
        );
        let killed = Ended {
            exit_code: 143,
            signal: Some(libc::SIGTERM),
            error: None,
        };
        assert_eq!(
            run_ended(ts, 3, &killed)["payload"],
            json!({"generation": 3, "exitCode": 143, "signal": "SIGTERM"})
        );
        let exited = Ended {
            exit_code: 2,
            signal: None,
            error: None,
        };
        assert_eq!(
            run_ended(ts, 4, &exited)["payload"],
            json!({"generation": 4, "exitCode": 2})
        );
        let ports = [
            Port::tcp(8080),
            Port {
                port: 53,
                protocol: Protocol::Udp,
            },
        ];
        assert_eq!(
            ports_resolved(ts, &ports)["payload"],
            json!({"ports": [{"port": 8080, "protocol": "tcp"}, {"port": 53, "protocol": "udp"}]})
        );
        assert_eq!(
            log_line(ts, "stderr", "boom"),
            json!({"kind": "log", "timestamp": ts, "stream": "stderr", "line": "boom"})
        );
        assert_eq!(
            replayed(&run_started(ts, 1))["metadata"],
            json!({"replayed": true})
        );
        assert_eq!(signal_name(libc::SIGKILL), "SIGKILL");
        assert_eq!(signal_name(40), "SIG40");
    }

    #[test]
    fn every_frame_passes_the_daemons_parser() {
        let ts = timestamp(SystemTime::now());
        let nasty = "line with \n newline, \r CR, \u{0} NUL, \u{2028}, \"quotes\" and data: inside";
        let frames = vec![
            run_started(&ts, 1),
            run_ended(
                &ts,
                1,
                &Ended {
                    exit_code: 127,
                    signal: None,
                    error: Some("no such file\n(really)".into()),
                },
            ),
            replayed(&ports_resolved(&ts, &[Port::tcp(1)])),
            log_line(&ts, "stdout", nasty),
            log_line(&ts, "stdout", ""),
            log_line(&ts, "stderr", &"é".repeat(MAX_LINE_BYTES / 2)),
        ];
        let mut wire = HEARTBEAT.to_vec();
        for f in &frames {
            wire.extend_from_slice(&encode(f));
            wire.extend_from_slice(HEARTBEAT);
        }
        // In any chunking.
        for step in [1, 7, 4096, wire.len()] {
            let mut p = SseParser::default();
            let mut got = Vec::new();
            for c in wire.chunks(step) {
                p.push(c);
                while let Some(ev) = p.next_event() {
                    let ev = ev.expect("within the parser's bound");
                    got.push(parse_frame(&ev.data).expect("a valid debug frame"));
                }
            }
            assert_eq!(got, frames, "chunks of {step}");
        }
    }

    #[test]
    fn lines_are_split_at_newlines_and_crlf() {
        let mut s = LineSplitter::new(64);
        assert_eq!(s.push(b"a\nb"), vec!["a"]);
        assert_eq!(s.push(b"c\r\n\n"), vec!["bc", ""]);
        assert_eq!(s.push(b"tail"), Vec::<String>::new());
        assert_eq!(s.finish(), Some("tail".into()));
        assert_eq!(s.finish(), None);
        // A lone CR stays (progress bars).
        assert_eq!(s.push(b"10%\r20%\n"), vec!["10%\r20%"]);
        // Invalid UTF-8 is replaced.
        assert_eq!(s.push(b"\xff\n"), vec!["\u{fffd}"]);
    }

    #[test]
    fn long_lines_are_cut_without_splitting_characters() {
        let mut s = LineSplitter::new(8);
        assert_eq!(
            s.push(b"0123456789abcdefXY\n"),
            vec!["01234567", "89abcdef", "XY"]
        );
        // Exactly the bound, then the newline: one line.
        assert_eq!(s.push(b"01234567\n"), vec!["01234567"]);
        // The same in one-byte pushes.
        let mut s = LineSplitter::new(8);
        let mut got = Vec::new();
        for b in b"0123456789abcdefXY\n" {
            got.extend(s.push(&[*b]));
        }
        assert_eq!(got, vec!["01234567", "89abcdef", "XY"]);
        // "é" is 2 bytes: 7 bytes of "aaaaaaa" + "é" would split it.
        let mut s = LineSplitter::new(8);
        let line = "aaaaaaaéb\n";
        assert_eq!(s.push(line.as_bytes()), vec!["aaaaaaa", "éb"]);
        // Every piece of a long multibyte line is whole characters and
        // the pieces join back into the line.
        let text = "€".repeat(100) + "x";
        for max in [4, 5, 6, 7, 64] {
            let mut s = LineSplitter::new(max);
            let mut pieces = s.push(text.as_bytes());
            pieces.extend(s.finish());
            assert!(pieces
                .iter()
                .all(|p| p.len() <= max && !p.contains('\u{fffd}')));
            assert_eq!(pieces.concat(), text, "max {max}");
        }
    }
}
