//! Bounds on what the exec gateway writes to disk, through a real `kubegate
//! serve` on its embedded sim over real sockets (docs/api.md "Recordings",
//! "Audit log"): a recording capped by `exec.recording_max_bytes` ends with
//! a marker while the exec's output still reaches the client; a free-space
//! floor skips the recording and the audit line says why; SIGHUP reopens the
//! audit log (logrotate's `create` and `copytruncate`); the audit log's own
//! size cap rotates it to `FILE.1`. Conditions are waited on with deadlines;
//! each daemon has a watchdog.

use crate::common::daemon::DaemonProc;
use crate::common::wait_for;
use kubegate::exec::frames::{ServerFrame, SUBPROTOCOL};
use serde_json::{json, Value};
use std::net::TcpStream;
use std::path::Path;
use std::time::Duration;
use tungstenite::Message;

type Ws = tungstenite::WebSocket<TcpStream>;

fn lines_of(path: &Path) -> Vec<Value> {
    std::fs::read_to_string(path)
        .unwrap_or_default()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("{l:?} is not JSON: {e}")))
        .collect()
}

fn audit_path(d: &DaemonProc) -> std::path::PathBuf {
    d.dir.join("state").join("audit.jsonl")
}

fn oneshot(d: &DaemonProc, cmd: &[&str]) -> Value {
    let body = json!({"workspace": {"project": "demo", "uid": "demo-uid"}, "deployment": "hello", "command": cmd});
    let (st, v) = d.json("POST", "/v1/exec", Some(&body));
    assert_eq!(st, 200, "{v}");
    v
}

fn open_ws(d: &DaemonProc, cmd: &[&str]) -> Ws {
    let mut p =
        "/v1/exec/interactive?project=demo&uid=demo-uid&deployment=hello&tty=false&stdin=false"
            .to_string();
    for c in cmd {
        p.push_str("&command=");
        p.push_str(&kubegate::kube::client::api::encode_segment(c));
    }
    let auth = format!("Bearer {}", d.token);
    let (ws, _) = d
        .ws(&p, &[("Authorization", &auth)], &[SUBPROTOCOL])
        .unwrap_or_else(|(st, b)| panic!("upgrade refused: {st} {}", String::from_utf8_lossy(&b)));
    ws
}

#[derive(Debug, Default)]
struct Ended {
    stdout: Vec<u8>,
    exit: Option<i32>,
    error: Option<String>,
}

fn read_to_end(ws: &mut Ws) -> Ended {
    let mut e = Ended::default();
    loop {
        match ws.read() {
            Ok(m @ (Message::Text(_) | Message::Binary(_))) => {
                match ServerFrame::decode(&m)
                    .expect("valid frame")
                    .expect("frame")
                {
                    ServerFrame::Stdout(d) => e.stdout.extend_from_slice(&d),
                    ServerFrame::Exit(x) => e.exit = Some(x.exit_code),
                    ServerFrame::Error(x) => e.error = Some(x.code.to_string()),
                    ServerFrame::Stderr(_) | ServerFrame::Target(_) => {}
                }
            }
            Ok(Message::Close(_)) => {
                while ws.read().is_ok() {}
                return e;
            }
            Ok(_) => {}
            Err(_) => return e,
        }
    }
}

/// The value of one series on `/metrics` (0 when absent).
fn metric(d: &DaemonProc, series: &str) -> i64 {
    let (st, m) = d.request("GET", "/metrics", Some(&d.token), None);
    assert_eq!(st, 200);
    String::from_utf8_lossy(&m)
        .lines()
        .find_map(|l| l.strip_prefix(series).and_then(|r| r.strip_prefix(' ')))
        .and_then(|v| v.parse().ok())
        .unwrap_or(0)
}

#[test]
fn a_capped_recording_ends_with_a_marker_while_the_exec_output_keeps_flowing() {
    const CAP: u64 = 65_536;
    let d = DaemonProc::start_with(
        |c| {
            c.replace(
                "[exec]\n",
                &format!("[exec]\nrecording_dir = \"./state/rec\"\nrecording_max_bytes = {CAP}\n"),
            )
        },
        "info",
    );
    // Far more output than the cap: 1 MB of 'a', then a last word.
    let mut ws = open_ws(
        &d,
        &[
            "sh",
            "-c",
            "head -c 1000000 /dev/zero | tr '\\0' a; printf done; exit 7",
        ],
    );
    let e = read_to_end(&mut ws);
    assert_eq!(e.error, None);
    assert_eq!(e.exit, Some(7), "the exec ran to its end");
    assert_eq!(
        e.stdout.len(),
        1_000_004,
        "all of the output reached the client"
    );
    assert!(e.stdout[..1_000_000].iter().all(|b| *b == b'a'));
    assert_eq!(&e.stdout[1_000_000..], b"done");

    let audit = lines_of(&audit_path(&d));
    assert_eq!(audit.len(), 1);
    assert_eq!(audit[0]["exitCode"], 7);
    assert_eq!(audit[0]["bytesOut"], 1_000_004);
    let name = audit[0]["recording"]
        .as_str()
        .expect("the recording is named");
    let why = audit[0]["recordingTruncated"]
        .as_str()
        .expect("the audit line says the recording was cut");
    assert!(why.contains("exec.recording_max_bytes"), "{why}");

    let path = d.dir.join("state").join("rec").join(name);
    let size = std::fs::metadata(&path).unwrap().len();
    assert!(size <= CAP, "the recording holds {size} bytes, over {CAP}");
    assert!(size > CAP / 2, "the recording used its room ({size} bytes)");
    let events = lines_of(&path);
    assert_eq!(events[0]["version"], 2);
    let last = events.last().unwrap();
    assert_eq!(last[1], "m", "the last event is a marker: {last}");
    let text = last[2].as_str().unwrap();
    assert!(
        text.contains(&format!("recording stopped at {CAP} bytes"))
            && text.contains("exec.recording_max_bytes"),
        "{text}"
    );
    // Before the marker: a visible notice for a player that ignores
    // markers, and before it only the output, unaltered.
    let notice = &events[events.len() - 2];
    assert_eq!(notice[1], "o");
    assert!(notice[2].as_str().unwrap().contains("recording stopped"));
    let recorded: String = events[1..events.len() - 2]
        .iter()
        .map(|e| {
            assert_eq!(e[1], "o", "{e}");
            e[2].as_str().unwrap().to_string()
        })
        .collect();
    assert!(!recorded.is_empty());
    assert!(
        recorded.bytes().all(|b| b == b'a'),
        "only the output's own bytes"
    );
    assert_eq!(
        metric(
            &d,
            r#"kubegate_exec_recordings_truncated_total{reason="max_bytes"}"#
        ),
        1
    );
}

#[test]
fn below_the_free_space_floor_no_recording_is_started_and_the_audit_says_why() {
    let d = DaemonProc::start_with(
        |c| {
            c.replace(
                "[exec]\n",
                // 4 EiB: more than any disk has free.
                "[exec]\nrecording_dir = \"./state/rec\"\nrecording_min_free_bytes = 4611686018427387904\n",
            )
        },
        "info",
    );
    let mut ws = open_ws(&d, &["sh", "-c", "printf hello; exit 3"]);
    let e = read_to_end(&mut ws);
    assert_eq!(e.exit, Some(3), "the exec ran");
    assert_eq!(e.stdout, b"hello");
    let audit = lines_of(&audit_path(&d));
    assert_eq!(audit.len(), 1);
    assert!(audit[0].get("recording").is_none(), "{}", audit[0]);
    let why = audit[0]["recordingSkipped"]
        .as_str()
        .unwrap_or_else(|| panic!("no recordingSkipped in {}", audit[0]));
    assert!(
        why.contains("free space") && why.contains("below the floor"),
        "{why}"
    );
    let rec = d.dir.join("state").join("rec");
    let files: Vec<_> = std::fs::read_dir(&rec).unwrap().flatten().collect();
    assert!(files.is_empty(), "no recording file: {files:?}");
    assert_eq!(
        metric(
            &d,
            r#"kubegate_exec_recordings_skipped_total{reason="free_space"}"#
        ),
        1
    );
    assert!(d.log_text().contains("below the floor"), "{}", d.log_text());
}

#[test]
fn sighup_reopens_the_audit_log_after_logrotate_renamed_or_truncated_it() {
    let d = DaemonProc::start();
    let path = audit_path(&d);
    oneshot(&d, &["printf", "one"]);
    assert_eq!(lines_of(&path).len(), 1);

    // logrotate's `create`: the file is renamed, then the daemon signalled.
    let rotated = d.dir.join("state").join("audit.jsonl.rotated");
    std::fs::rename(&path, &rotated).unwrap();
    crate::common::unsafe_kill(d.child.id(), 1);
    wait_for(
        "the daemon to reopen the audit log at its path",
        Duration::from_secs(10),
        || path.exists().then_some(()),
    );
    oneshot(&d, &["printf", "two"]);
    let old = lines_of(&rotated);
    let new = lines_of(&path);
    assert_eq!(old.len(), 1, "nothing more went to the renamed file");
    assert_eq!(old[0]["argv"][1], "one");
    assert_eq!(new.len(), 1, "the new line is in a fresh file");
    assert_eq!(new[0]["argv"][1], "two");
    use std::os::unix::fs::PermissionsExt;
    assert_eq!(
        std::fs::metadata(&path).unwrap().permissions().mode() & 0o777,
        0o600
    );
    assert!(
        d.log_text().contains("audit log reopened"),
        "{}",
        d.log_text()
    );

    // logrotate's `copytruncate`: the file is emptied in place; the next
    // line starts at offset 0 (no hole of NULs before it).
    std::fs::OpenOptions::new()
        .write(true)
        .open(&path)
        .unwrap()
        .set_len(0)
        .unwrap();
    oneshot(&d, &["printf", "three"]);
    let raw = std::fs::read(&path).unwrap();
    assert_eq!(
        raw.first(),
        Some(&b'{'),
        "{:?}",
        String::from_utf8_lossy(&raw)
    );
    let new = lines_of(&path);
    assert_eq!(new.len(), 1);
    assert_eq!(new[0]["argv"][1], "three");
}

#[test]
fn the_audit_log_rotates_itself_to_dot_1_at_its_size_cap() {
    const CAP: u64 = 4096;
    let d = DaemonProc::start_with(
        |c| c.replace("[exec]\n", &format!("[exec]\naudit_max_bytes = {CAP}\n")),
        "info",
    );
    let path = audit_path(&d);
    let old = d.dir.join("state").join("audit.jsonl.1");
    let mut n = 0;
    while !old.exists() {
        n += 1;
        assert!(
            n <= 40,
            "no rotation after 40 audit lines of a {CAP}-byte cap"
        );
        oneshot(&d, &["printf", &format!("exec-{n}")]);
    }
    oneshot(&d, &["printf", "after"]);
    n += 1;
    let (a, b) = (lines_of(&old), lines_of(&path));
    assert_eq!(a.len() + b.len(), n, "no line lost in one rotation");
    assert_eq!(a[0]["argv"][1], "exec-1");
    assert_eq!(b.last().unwrap()["argv"][1], "after");
    for p in [&old, &path] {
        let size = std::fs::metadata(p).unwrap().len();
        assert!(size <= CAP, "{} holds {size} bytes", p.display());
    }
    assert_eq!(metric(&d, "kubegate_audit_rotations_total"), 1);
    let log = d.log_text();
    assert_eq!(
        log.matches("exec.audit_max_bytes").count(),
        1,
        "one log line per rotation: {log}"
    );
}
