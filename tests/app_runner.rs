//! `kubegate app-runner` as a real process (docs/runner.md): a temp
//! workspace, a loopback inspect address, small `sh` programs, and the
//! debug stream read over a real TCP socket. Every frame of that stream
//! goes through the daemon's own SSE parser (`session::sse`) and frame
//! check (`session::frame::parse_frame`): a frame either of them refused
//! fails the test.
//!
//! Waiting is on conditions with deadlines (frames on a channel, process
//! exits); an "absence" check reads the stream for a bounded window longer
//! than the debounce. A watchdog kills a hung runner, and every test checks
//! that no process of the programs' groups outlives the runner.

mod common;

use common::{temp_dir, unsafe_kill, wait_for, KUBEGATE};
use crossbeam_channel::{unbounded, Receiver, RecvTimeoutError};
use kubegate::session::frame::parse_frame;
use kubegate::session::sse::SseParser;
use serde_json::{json, Value};
use std::io::{BufRead, BufReader, Read, Write};
use std::net::{TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

const WAIT: Duration = Duration::from_secs(20);
/// Longer than the tests' 50 ms debounce by a wide margin.
const QUIET: Duration = Duration::from_millis(600);

fn free_port() -> u16 {
    let l = TcpListener::bind("127.0.0.1:0").expect("bind");
    l.local_addr().expect("addr").port()
}

/// A running `kubegate app-runner`, its output captured.
struct Runner {
    child: Child,
    /// A file outside the workspace the programs wait for (`$GATE`):
    /// created once the test has subscribed, so no line of the first run
    /// is printed before anyone listens (log lines are not replayed).
    gate: PathBuf,
    addr: String,
    root: PathBuf,
    stdout: Arc<Mutex<Vec<u8>>>,
    stderr: Arc<Mutex<Vec<u8>>>,
    readers: Vec<std::thread::JoinHandle<()>>,
    _watchdog: crossbeam_channel::Sender<()>,
}

fn collect(
    mut r: impl Read + Send + 'static,
    into: Arc<Mutex<Vec<u8>>>,
) -> std::thread::JoinHandle<()> {
    std::thread::spawn(move || {
        let mut buf = [0u8; 8192];
        loop {
            match r.read(&mut buf) {
                Ok(0) | Err(_) => return,
                Ok(n) => into.lock().expect("lock").extend_from_slice(&buf[..n]),
            }
        }
    })
}

impl Runner {
    /// `app-runner --root ROOT --inspect-addr 127.0.0.1:PORT --debounce-ms
    /// 50 EXTRA -- sh -c SCRIPT`.
    fn start(root: &Path, extra: &[&str], script: &str) -> Runner {
        Runner::start_with(root, extra, script, "warn")
    }

    fn start_with(root: &Path, extra: &[&str], script: &str, rust_log: &str) -> Runner {
        let addr = format!("127.0.0.1:{}", free_port());
        let gate = temp_dir("runner-gate").join("open");
        let mut cmd = Command::new(KUBEGATE);
        cmd.env("GATE", &gate);
        cmd.arg("app-runner")
            .arg("--root")
            .arg(root)
            .arg("--inspect-addr")
            .arg(&addr)
            .arg("--debounce-ms")
            .arg("50")
            .args(extra)
            .arg("--")
            .arg("sh")
            .arg("-c")
            .arg(script);
        for k in [
            "KUBEGATE_WORKSPACE",
            "KUBEGATE_INSPECT_ADDR",
            "KUBEGATE_APP",
            "KUBEGATE_RUNNER_DEBOUNCE_MS",
            "KUBEGATE_RUNNER_GRACE_MS",
            "KUBEGATE_RUNNER_WATCH",
            "KUBEGATE_RUNNER_POLL_MS",
        ] {
            cmd.env_remove(k);
        }
        cmd.env("RUST_LOG", rust_log)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        let mut child = cmd.spawn().expect("spawn kubegate app-runner");
        let pid = child.id();
        let (cancel, cancelled) = crossbeam_channel::bounded::<()>(0);
        std::thread::spawn(move || {
            if let Err(RecvTimeoutError::Timeout) = cancelled.recv_timeout(Duration::from_secs(120))
            {
                eprintln!("watchdog: killing kubegate app-runner {pid}");
                unsafe_kill(pid, 9);
            }
        });
        let stdout = Arc::new(Mutex::new(Vec::new()));
        let stderr = Arc::new(Mutex::new(Vec::new()));
        let readers = vec![
            collect(child.stdout.take().expect("stdout"), stdout.clone()),
            collect(child.stderr.take().expect("stderr"), stderr.clone()),
        ];
        Runner {
            child,
            gate,
            addr,
            root: root.to_path_buf(),
            stdout,
            stderr,
            readers,
            _watchdog: cancel,
        }
    }

    fn stdout(&self) -> Vec<u8> {
        self.stdout.lock().expect("lock").clone()
    }

    fn stderr_str(&self) -> String {
        String::from_utf8_lossy(&self.stderr.lock().expect("lock")).into_owned()
    }

    /// A subscriber on `/events` (retried until the runner listens); the
    /// gate opens once it is connected.
    fn subscribe(&self) -> Events {
        let ev = Events::open(&self.addr);
        std::fs::write(&self.gate, "").expect("open the gate");
        ev
    }

    fn write(&self, rel: &str, content: &str) {
        let p = self.root.join(rel);
        if let Some(d) = p.parent() {
            std::fs::create_dir_all(d).expect("mkdir");
        }
        std::fs::write(p, content).expect("write");
    }

    fn signal(&self, sig: i32) {
        unsafe_kill(self.child.id(), sig);
    }

    /// Waits for the runner's exit (bounded); its code, and its output
    /// readers finished.
    fn wait_exit(&mut self) -> Option<i32> {
        let deadline = Instant::now() + WAIT;
        let st = loop {
            if let Some(st) = self.child.try_wait().expect("try_wait") {
                break st;
            }
            assert!(
                Instant::now() < deadline,
                "the runner did not exit; stderr: {}",
                self.stderr_str()
            );
            std::thread::sleep(Duration::from_millis(10));
        };
        for r in self.readers.drain(..) {
            let _ = r.join();
        }
        st.code()
    }
}

impl Drop for Runner {
    fn drop(&mut self) {
        if let Ok(None) = self.child.try_wait() {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
    }
}

/// The members of process group `pgid` (from /proc/*/stat).
fn group_members(pgid: u32) -> Vec<u32> {
    let mut out = Vec::new();
    let Ok(rd) = std::fs::read_dir("/proc") else {
        return out;
    };
    for e in rd.flatten() {
        let Ok(pid) = e.file_name().to_string_lossy().parse::<u32>() else {
            continue;
        };
        let Ok(stat) = std::fs::read_to_string(e.path().join("stat")) else {
            continue;
        };
        // pid (comm) state ppid pgrp ...: comm may hold spaces and parens.
        let Some(rest) = stat.rfind(')').map(|i| &stat[i + 1..]) else {
            continue;
        };
        let fields: Vec<&str> = rest.split_whitespace().collect();
        if fields.get(2).and_then(|g| g.parse::<u32>().ok()) == Some(pgid) {
            out.push(pid);
        }
    }
    out
}

/// No process is left in any of these groups (bounded wait: the kernel
/// may take a moment to clear a killed process).
fn assert_no_leftovers(groups: &[u32]) {
    assert!(!groups.is_empty(), "no program group was recorded");
    for &g in groups {
        wait_for(&format!("process group {g} to be empty"), WAIT, || {
            group_members(g).is_empty().then_some(())
        });
    }
}

/// The debug stream, decoded (chunked -> SSE -> frames) on a thread.
struct Events {
    /// Frames, or what the daemon's parser refused (fails the test).
    rx: Receiver<Result<Value, String>>,
    /// Every SSE byte received.
    raw: Arc<Mutex<Vec<u8>>>,
    /// Every frame received so far (also those handed out).
    seen: Vec<Value>,
}

impl Events {
    fn open(addr: &str) -> Events {
        let mut sock = wait_for("the inspect server to accept", WAIT, || {
            TcpStream::connect(addr).ok()
        });
        write!(
            sock,
            "GET /events HTTP/1.1\r\nHost: {addr}\r\nAccept: text/event-stream\r\n\r\n"
        )
        .expect("send request");
        let mut r = BufReader::new(sock);
        let mut head = String::new();
        loop {
            let mut line = String::new();
            r.read_line(&mut line).expect("read head");
            if line == "\r\n" || line.is_empty() {
                break;
            }
            head.push_str(&line);
        }
        let lower = head.to_ascii_lowercase();
        assert!(head.starts_with("HTTP/1.1 200"), "{head}");
        assert!(lower.contains("content-type: text/event-stream"), "{head}");
        assert!(lower.contains("transfer-encoding: chunked"), "{head}");
        let (tx, rx) = unbounded();
        let raw = Arc::new(Mutex::new(Vec::new()));
        let raw2 = raw.clone();
        std::thread::spawn(move || {
            let mut parser = SseParser::default();
            loop {
                // One chunk: size line, data, CRLF.
                let mut size = String::new();
                if r.read_line(&mut size).unwrap_or(0) == 0 {
                    return;
                }
                let Ok(n) = usize::from_str_radix(size.trim(), 16) else {
                    let _ = tx.send(Err(format!("bad chunk size line {size:?}")));
                    return;
                };
                if n == 0 {
                    return;
                }
                let mut data = vec![0u8; n + 2];
                if r.read_exact(&mut data).is_err() {
                    return;
                }
                if &data[n..] != b"\r\n" {
                    let _ = tx.send(Err("chunk not ended by CRLF".into()));
                    return;
                }
                data.truncate(n);
                raw2.lock().expect("lock").extend_from_slice(&data);
                parser.push(&data);
                while let Some(ev) = parser.next_event() {
                    let frame = match ev {
                        Ok(ev) => parse_frame(&ev.data)
                            .ok_or_else(|| format!("the daemon's relay refuses {:?}", ev.data)),
                        Err(e) => Err(format!("the daemon's parser: {e}")),
                    };
                    if tx.send(frame).is_err() {
                        return;
                    }
                }
            }
        });
        Events {
            rx,
            raw,
            seen: Vec::new(),
        }
    }

    fn next(&mut self, within: Duration) -> Option<Value> {
        let f = match self.rx.recv_timeout(within).ok()? {
            Ok(f) => f,
            Err(e) => panic!("{e}"),
        };
        self.seen.push(f.clone());
        Some(f)
    }

    /// Frames up to and including the first that satisfies `pred`.
    fn until(&mut self, what: &str, pred: impl Fn(&Value) -> bool) -> Vec<Value> {
        let deadline = Instant::now() + WAIT;
        let mut got = Vec::new();
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            let Some(f) = self.next(left) else {
                panic!("timed out waiting for {what}; got {got:#?}");
            };
            let done = pred(&f);
            got.push(f);
            if done {
                return got;
            }
        }
    }

    /// Every frame that arrives within `d`.
    fn during(&mut self, d: Duration) -> Vec<Value> {
        let deadline = Instant::now() + d;
        let mut got = Vec::new();
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return got;
            }
            match self.next(left) {
                Some(f) => got.push(f),
                None => return got,
            }
        }
    }
}

fn is_event(f: &Value, name: &str) -> bool {
    f["kind"] == "event" && f["event"] == name
}

fn started(gen: u64) -> impl Fn(&Value) -> bool {
    move |f| is_event(f, "Runner.RunStarted") && f["payload"]["generation"] == gen
}

fn ended(gen: u64) -> impl Fn(&Value) -> bool {
    move |f| is_event(f, "Runner.RunEnded") && f["payload"]["generation"] == gen
}

fn log_line(prefix: &'static str) -> impl Fn(&Value) -> bool {
    move |f| f["kind"] == "log" && f["line"].as_str().is_some_and(|l| l.starts_with(prefix))
}

fn events_only(frames: &[Value]) -> Vec<&Value> {
    frames.iter().filter(|f| f["kind"] == "event").collect()
}

/// The pid in a `start GEN PID ...` line.
fn pid_of(line: &Value) -> u32 {
    line["line"]
        .as_str()
        .and_then(|l| l.split_whitespace().nth(2))
        .and_then(|p| p.parse().ok())
        .unwrap_or_else(|| panic!("no pid in {line}"))
}

/// Waits for `$GATE` (see `Runner::gate`).
macro_rules! gated {
    ($script:literal) => {
        concat!(r#"while [ ! -e "$GATE" ]; do sleep 0.02; done; "#, $script)
    };
}

/// Prints `start GEN PID MSG`, then a counter every 0.2 s.
const COUNTER: &str = gated!(
    r#"echo "start $KUBEGATE_GENERATION $$ $(cat msg.txt 2>/dev/null)"; i=0; while :; do i=$((i+1)); echo "count $i"; sleep 0.2; done"#
);

#[test]
fn restarts_on_relevant_changes_only_and_ends_with_sigterm() {
    let root = temp_dir("runner-restart");
    std::fs::write(root.join("msg.txt"), "v1").expect("write");
    std::fs::write(
        root.join(".kubegateignore"),
        "# build output\nbuild/\n*.log\n!keep.log\n",
    )
    .expect("write");
    let mut r = Runner::start(&root, &[], COUNTER);
    let mut ev = r.subscribe();
    let mut groups = Vec::new();

    let first = ev.until("generation 1", started(1));
    assert!(events_only(&first).len() == 1, "{first:#?}");
    let start1 = ev.until("gen 1's first line", log_line("start 1 "));
    let start1 = start1.last().expect("line");
    assert!(
        start1["line"].as_str().is_some_and(|l| l.ends_with(" v1")),
        "{start1}"
    );
    assert_eq!(start1["stream"], "stdout");
    groups.push(pid_of(start1));
    ev.until("gen 1 counting", log_line("count 1"));

    // A relevant change: SIGTERM, RunEnded, then generation 2 with the
    // new content, and gen 2's first output comes after its RunStarted.
    r.write("msg.txt", "v2");
    let end1 = ev.until("gen 1's end", ended(1));
    assert_eq!(
        end1.last().expect("frame")["payload"],
        json!({"generation": 1, "exitCode": 143, "signal": "SIGTERM"})
    );
    let between = ev.until("generation 2", started(2));
    assert!(between.iter().all(
        |f| f["kind"] == "event" || f["line"].as_str().is_some_and(|l| !l.starts_with("start"))
    ));
    let next = ev.next(WAIT).expect("a frame");
    assert!(
        log_line("start 2 ")(&next),
        "gen 2's first frame is its first line: {next}"
    );
    assert!(
        next["line"].as_str().is_some_and(|l| l.ends_with(" v2")),
        "{next}"
    );
    groups.push(pid_of(&next));

    // Ignored and excluded paths: nothing restarts...
    r.write(".git/objects/ab", "x");
    r.write("node_modules/pkg/index.js", "x");
    r.write("__pycache__/m.pyc", "x");
    r.write("build/out.o", "x");
    r.write("sub/build/deep.o", "x");
    r.write("debug.log", "x");
    let quiet = ev.during(QUIET);
    assert!(
        events_only(&quiet).is_empty(),
        "ignored writes restarted: {quiet:#?}"
    );
    // ...and the next relevant write is the very next restart.
    r.write("src/new.js", "x");
    let frames = ev.until("gen 3", started(3));
    let evs = events_only(&frames);
    assert_eq!(evs.len(), 2, "{evs:#?}");
    assert!(ended(2)(evs[0]));
    // A negated pattern is relevant again.
    let l = ev.until("gen 3's line", log_line("start 3 "));
    groups.push(pid_of(l.last().expect("line")));
    r.write("keep.log", "x");
    ev.until("gen 4", started(4));
    let l = ev.until("gen 4's line", log_line("start 4 "));
    groups.push(pid_of(l.last().expect("line")));

    // The output went through unchanged, in order. (The runner's stdout is
    // read on its own thread, so it may trail the event stream: wait.)
    let out = wait_for("four starts on stdout", WAIT, || {
        let out = String::from_utf8_lossy(&r.stdout()).into_owned();
        (out.lines().filter(|l| l.starts_with("start")).count() >= 4).then_some(out)
    });
    let starts: Vec<&str> = out.lines().filter(|l| l.starts_with("start")).collect();
    assert_eq!(starts.len(), 4, "{out}");
    for (i, l) in starts.iter().enumerate() {
        assert!(l.starts_with(&format!("start {} ", i + 1)), "{out}");
    }

    // SIGTERM to the runner: the program's group gets it, the runner
    // exits with the program's status (sh killed by SIGTERM: 143).
    r.signal(15);
    let last = ev.until("gen 4's end", ended(4));
    assert_eq!(last.last().expect("frame")["payload"]["signal"], "SIGTERM");
    assert_eq!(r.wait_exit(), Some(143), "stderr: {}", r.stderr_str());
    assert_no_leftovers(&groups);
}

#[test]
fn polling_restarts_too() {
    let root = temp_dir("runner-poll");
    std::fs::write(root.join("msg.txt"), "v1").expect("write");
    let mut r = Runner::start(&root, &["--watch", "poll", "--poll-ms", "50"], COUNTER);
    let mut ev = r.subscribe();
    let l = ev.until("gen 1's line", log_line("start 1 "));
    let mut groups = vec![pid_of(l.last().expect("line"))];
    r.write(".git/HEAD", "x");
    let quiet = ev.during(QUIET);
    assert!(events_only(&quiet).is_empty(), "{quiet:#?}");
    r.write("msg.txt", "v22");
    let frames = ev.until("gen 2", started(2));
    assert_eq!(events_only(&frames).len(), 2, "{frames:#?}");
    let l = ev.until("gen 2's line", log_line("start 2 "));
    assert!(l.last().expect("line")["line"]
        .as_str()
        .is_some_and(|s| s.ends_with("v22")));
    groups.push(pid_of(l.last().expect("line")));
    r.signal(15);
    assert_eq!(r.wait_exit(), Some(143));
    assert_no_leftovers(&groups);
}

#[test]
fn a_program_ignoring_sigterm_is_killed_after_the_grace() {
    let root = temp_dir("runner-grace");
    // The group's sleeps inherit the ignored SIGTERM too.
    let script = gated!(
        r#"trap '' TERM; echo "start $KUBEGATE_GENERATION $$"; while :; do sleep 0.1; done"#
    );
    let mut r = Runner::start(&root, &["--grace-ms", "400"], script);
    let mut ev = r.subscribe();
    let l = ev.until("gen 1's line", log_line("start 1 "));
    let mut groups = vec![pid_of(l.last().expect("line"))];
    let t0 = Instant::now();
    r.write("a.txt", "x");
    let f = ev.until("gen 1's end", ended(1));
    let waited = t0.elapsed();
    assert_eq!(
        f.last().expect("frame")["payload"],
        json!({"generation": 1, "exitCode": 137, "signal": "SIGKILL"})
    );
    assert!(
        waited >= Duration::from_millis(400),
        "killed after {waited:?}, before the grace"
    );
    ev.until("gen 2", started(2));
    let l = ev.until("gen 2's line", log_line("start 2 "));
    groups.push(pid_of(l.last().expect("line")));

    // The runner's own SIGTERM: the same grace, then SIGKILL; the runner
    // passes on the program's status.
    let t0 = Instant::now();
    r.signal(15);
    assert_eq!(r.wait_exit(), Some(137));
    assert!(t0.elapsed() >= Duration::from_millis(400));
    assert_no_leftovers(&groups);
}

#[test]
fn a_stopped_program_is_continued_to_take_its_sigterm() {
    let root = temp_dir("runner-stopped");
    // The program stops itself (as Ctrl-Z or a background terminal write
    // would); SIGTERM alone would wait for a SIGCONT, then the SIGKILL.
    let script = gated!(r#"echo "start $KUBEGATE_GENERATION $$"; kill -STOP $$; echo resumed"#);
    let mut r = Runner::start(&root, &["--grace-ms", "10000"], script);
    let mut ev = r.subscribe();
    let l = ev.until("gen 1's line", log_line("start 1 "));
    let groups = vec![pid_of(l.last().expect("line"))];
    let stopped = |pid: u32| {
        std::fs::read_to_string(format!("/proc/{pid}/stat"))
            .ok()
            .and_then(|s| s.rfind(')').map(|i| s[i + 2..].starts_with('T')))
            .unwrap_or(false)
    };
    wait_for("the program to stop", WAIT, || {
        stopped(groups[0]).then_some(())
    });
    let t0 = Instant::now();
    r.write("a.txt", "x");
    let f = ev.until("gen 1's end", ended(1));
    assert_eq!(
        f.last().expect("frame")["payload"],
        json!({"generation": 1, "exitCode": 143, "signal": "SIGTERM"})
    );
    assert!(
        t0.elapsed() < Duration::from_secs(10),
        "it waited for the grace"
    );
    r.signal(15);
    assert_eq!(r.wait_exit(), Some(143));
    assert_no_leftovers(&groups);
}

#[test]
fn a_program_that_exits_waits_for_the_next_change() {
    let root = temp_dir("runner-exit");
    let script = gated!(r#"echo "start $KUBEGATE_GENERATION $$"; echo oops >&2; exit 3"#);
    let mut r = Runner::start(&root, &[], script);
    let mut ev = r.subscribe();
    let f = ev.until("gen 1's end", ended(1));
    let groups = vec![pid_of(
        f.iter().find(|f| log_line("start 1")(f)).expect("line"),
    )];
    assert_eq!(
        f.last().expect("frame")["payload"],
        json!({"generation": 1, "exitCode": 3})
    );
    assert!(
        f.iter()
            .any(|x| x["kind"] == "log" && x["stream"] == "stderr" && x["line"] == "oops"),
        "{f:#?}"
    );
    // Not restarted by itself.
    let quiet = ev.during(QUIET);
    assert!(events_only(&quiet).is_empty(), "{quiet:#?}");
    // A new subscriber learns the state from the replay.
    let mut late = r.subscribe();
    let replay = late.until("the replayed end", ended(1));
    let evs = events_only(&replay);
    assert_eq!(evs.len(), 2, "{replay:#?}");
    assert!(started(1)(evs[0]) && evs.iter().all(|e| e["metadata"]["replayed"] == true));
    // The next change starts generation 2.
    r.write("main.sh", "x");
    ev.until("gen 2", started(2));
    let f = ev.until("gen 2's end", ended(2));
    assert_eq!(f.last().expect("frame")["payload"]["exitCode"], 3);
    late.until("gen 2 live on the late stream", started(2));
    // SIGTERM with no program running: 128 + 15.
    r.signal(15);
    assert_eq!(r.wait_exit(), Some(143));
    assert_no_leftovers(&groups);
}

#[test]
fn sigterm_passes_the_programs_own_status_and_leaves_no_process() {
    let root = temp_dir("runner-status");
    // A background child in the group, and a TERM handler that exits 7.
    let script = gated!(
        r#"trap 'echo bye; exit 7' TERM; sleep 300 & echo "start $KUBEGATE_GENERATION $$ $!"; wait"#
    );
    let mut r = Runner::start(&root, &[], script);
    let mut ev = r.subscribe();
    let l = ev.until("gen 1's line", log_line("start 1 "));
    let groups = vec![pid_of(l.last().expect("line"))];
    r.signal(15);
    let f = ev.until("gen 1's end", ended(1));
    assert_eq!(
        f.last().expect("frame")["payload"],
        json!({"generation": 1, "exitCode": 7})
    );
    assert!(f.iter().any(|x| x["line"] == "bye"), "{f:#?}");
    assert_eq!(r.wait_exit(), Some(7));
    assert_no_leftovers(&groups);
    // SIGINT and SIGHUP are forwarded the same way.
    for (sig, code) in [(2, 130), (1, 129)] {
        let mut r = Runner::start(&root, &[], COUNTER);
        let mut ev = r.subscribe();
        let l = ev.until("the line", log_line("start 1 "));
        let g = pid_of(l.last().expect("line"));
        r.signal(sig);
        assert_eq!(r.wait_exit(), Some(code), "signal {sig}");
        assert_no_leftovers(&[g]);
    }
}

#[test]
fn ports_follow_the_manifest() {
    let root = temp_dir("runner-ports");
    let manifest = |ports: &str, entry: &str| {
        format!("image = \"x\"\n\n[[app]]\nname = \"web\"\nentry = \"{entry}\"\nports = {ports}\n\n[[app]]\nname = \"worker\"\nports = [7000]\n")
    };
    std::fs::write(root.join("kubegate.toml"), manifest("[8080]", "a.js")).expect("write");
    let mut r = Runner::start(&root, &["--app", "web"], COUNTER);
    let mut ev = r.subscribe();
    let ports = |f: &Value| is_event(f, "Kernel.PortsResolved");
    let f = ev.until("the initial ports", ports);
    assert_eq!(
        f.last().expect("frame")["payload"],
        json!({"ports": [{"port": 8080, "protocol": "tcp"}]})
    );
    let l = ev.until("gen 1's line", log_line("start 1 "));
    let mut groups = vec![pid_of(l.last().expect("line"))];

    // The app's ports change: the new list (and, the manifest being a
    // workspace file, a restart).
    r.write(
        "kubegate.toml",
        &manifest("[8080, { port = 9000, protocol = \"udp\" }]", "a.js"),
    );
    let f = ev.until("the new ports", ports);
    assert_eq!(
        f.last().expect("frame")["payload"],
        json!({"ports": [{"port": 8080, "protocol": "tcp"}, {"port": 9000, "protocol": "udp"}]})
    );
    ev.until("gen 2", started(2));
    let l = ev.until("gen 2's line", log_line("start 2 "));
    groups.push(pid_of(l.last().expect("line")));

    // Edits that do not change the app's ports: another key, another
    // app's ports, the same list reordered, a broken manifest, another
    // file. Restarts, but no PortsResolved.
    let mut gen = 2;
    for edit in [
        manifest("[8080, { port = 9000, protocol = \"udp\" }]", "b.js"),
        manifest("[{ port = 9000, protocol = \"udp\" }, 8080]", "b.js").replace("[7000]", "[7001]"),
        "[[app]\nname = ".to_string(),
    ] {
        r.write("kubegate.toml", &edit);
        gen += 1;
        let f = ev.until("the restart", started(gen));
        assert!(
            !f.iter().any(ports),
            "unrelated edit {edit:?} announced ports: {f:#?}"
        );
        let l = ev.until("the line", log_line("start "));
        groups.push(pid_of(l.last().expect("line")));
    }
    r.write("other.txt", "x");
    gen += 1;
    let f = ev.until("the restart", started(gen));
    assert!(!f.iter().any(ports), "{f:#?}");
    let l = ev.until("the line", log_line("start "));
    groups.push(pid_of(l.last().expect("line")));

    // A late subscriber's replay carries the current ports.
    let mut late = r.subscribe();
    let f = late.until("replayed ports", ports);
    assert_eq!(
        f.last().expect("frame")["payload"]["ports"]
            .as_array()
            .map(Vec::len),
        Some(2)
    );

    r.signal(15);
    assert_eq!(r.wait_exit(), Some(143));
    assert_no_leftovers(&groups);
}

#[test]
fn output_passes_through_unchanged_and_every_frame_parses() {
    let root = temp_dir("runner-output");
    // A 40,000-byte line, CRLF, bytes that are not UTF-8, multibyte
    // characters, an empty line, stderr, and no newline at the very end.
    let long = "x".repeat(40_000);
    std::fs::write(root.join("long.txt"), &long).expect("write");
    let script = gated!(
        r#"cat long.txt; printf '\r\n'; printf 'caf\303\251 \377 end\n\n'; printf 'to stderr\n' >&2; printf 'no newline'"#
    );
    let mut r = Runner::start_with(&root, &[], script, "off");
    let mut ev = r.subscribe();
    ev.until("the end", ended(1));
    r.signal(15);
    assert_eq!(r.wait_exit(), Some(143));

    let mut expected = long.as_bytes().to_vec();
    expected.extend_from_slice(b"\r\ncaf\xc3\xa9 \xff end\n\nno newline");
    assert_eq!(r.stdout(), expected, "stdout passed through byte for byte");
    assert_eq!(r.stderr_str(), "to stderr\n");

    let logs: Vec<(String, String)> = ev
        .seen
        .iter()
        .filter(|f| f["kind"] == "log")
        .map(|f| {
            (
                f["stream"].as_str().unwrap_or("?").to_string(),
                f["line"].as_str().unwrap_or("?").to_string(),
            )
        })
        .collect();
    let stdout: Vec<&str> = logs
        .iter()
        .filter(|(s, _)| s == "stdout")
        .map(|(_, l)| l.as_str())
        .collect();
    // The long line in 16 KiB pieces.
    assert_eq!(
        stdout.len(),
        3 + 3,
        "{:?}",
        stdout.iter().map(|l| l.len()).collect::<Vec<_>>()
    );
    assert!(stdout[..3].iter().all(|l| l.bytes().all(|b| b == b'x')));
    assert_eq!(
        stdout[..3].iter().map(|l| l.len()).collect::<Vec<_>>(),
        vec![16384, 16384, 40_000 - 32768]
    );
    assert_eq!(&stdout[3..], &["caf\u{e9} \u{fffd} end", "", "no newline"]);
    assert_eq!(
        logs.iter()
            .filter(|(s, _)| s == "stderr")
            .map(|(_, l)| l.as_str())
            .collect::<Vec<_>>(),
        vec!["to stderr"]
    );
    // The raw stream, pushed through the daemon's parser in odd chunks,
    // gives exactly the frames seen.
    let raw = ev.raw.lock().expect("lock").clone();
    for step in [1, 3, 1000] {
        let mut p = SseParser::default();
        let mut n = 0;
        for c in raw.chunks(step) {
            p.push(c);
            while let Some(e) = p.next_event() {
                let e = e.expect("within the bound");
                assert!(parse_frame(&e.data).is_some(), "{:?}", e.data);
                n += 1;
            }
        }
        assert_eq!(n, ev.seen.len(), "chunks of {step}");
    }
}

#[test]
fn a_missing_program_is_reported_and_retried_on_change() {
    let root = temp_dir("runner-missing");
    let addr = format!("127.0.0.1:{}", free_port());
    let mut child = Command::new(KUBEGATE)
        .args([
            "app-runner",
            "--debounce-ms",
            "50",
            "--inspect-addr",
            &addr,
            "--root",
        ])
        .arg(&root)
        .args(["--", "./app.sh"])
        .env("RUST_LOG", "warn")
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn");
    let mut ev = Events::open(&addr);
    let f = ev.until("gen 1's end", ended(1));
    let p = &f.last().expect("frame")["payload"];
    assert_eq!(p["exitCode"], 127, "{p}");
    assert!(p["error"].as_str().is_some(), "{p}");
    // The program appears (written beside the workspace, then renamed
    // in: one change): the change starts it.
    let staging = temp_dir("runner-missing-staging").join("app.sh");
    std::fs::write(&staging, "#!/bin/sh\necho here\n").expect("write");
    let st = Command::new("chmod")
        .arg("+x")
        .arg(&staging)
        .status()
        .expect("chmod");
    assert!(st.success());
    std::fs::rename(&staging, root.join("app.sh")).expect("rename");
    ev.until("gen 2", started(2));
    ev.until("gen 2's line", |f| f["line"] == "here");
    let f = ev.until("gen 2's end", ended(2));
    assert_eq!(f.last().expect("frame")["payload"]["exitCode"], 0);
    unsafe_kill(child.id(), 15);
    let code = wait_for("the runner's exit", WAIT, || {
        child.try_wait().ok().flatten()
    });
    assert_eq!(code.code(), Some(143));
    let mut err = String::new();
    child
        .stderr
        .take()
        .expect("stderr")
        .read_to_string(&mut err)
        .expect("read");
    assert!(err.contains("cannot start \"./app.sh\""), "{err}");
}

#[test]
fn usage_and_configuration_errors_exit_2() {
    let root = temp_dir("runner-errors");
    let taken = TcpListener::bind("127.0.0.1:0").expect("bind");
    let taken_addr = taken.local_addr().expect("addr").to_string();
    let missing = root.join("nope");
    let cases: Vec<(Vec<String>, &str)> = vec![
        (vec![], "kubegate: USAGE: missing command"),
        (
            vec!["--root".into(), root.display().to_string()],
            "kubegate: USAGE: missing command",
        ),
        (
            vec![
                "--inspect-addr".into(),
                "not-an-address".into(),
                "--".into(),
                "true".into(),
            ],
            "kubegate: USAGE: inspect address",
        ),
        (
            vec![
                "--root".into(),
                missing.display().to_string(),
                "--".into(),
                "true".into(),
            ],
            "kubegate: CONFIG: workspace root",
        ),
        (
            vec![
                "--root".into(),
                root.display().to_string(),
                "--inspect-addr".into(),
                taken_addr,
                "--".into(),
                "true".into(),
            ],
            "kubegate: CONFIG: inspect address",
        ),
        (
            vec![
                "--root".into(),
                root.join("file").display().to_string(),
                "--".into(),
                "true".into(),
            ],
            "kubegate: CONFIG: workspace root",
        ),
    ];
    std::fs::write(root.join("file"), "x").expect("write");
    for (args, needle) in cases {
        let mut c = Command::new(KUBEGATE);
        c.arg("app-runner").args(&args);
        c.env_remove("KUBEGATE_INSPECT_ADDR")
            .env_remove("KUBEGATE_WORKSPACE");
        let out = common::run_with_timeout(c, None, WAIT);
        assert_eq!(out.code, Some(2), "{args:?}: {}", out.stderr_str());
        assert!(
            out.stderr_str().contains(needle),
            "{args:?}: {}",
            out.stderr_str()
        );
    }
    drop(taken);
}

/// Runs argv[1:] on a new pseudo-terminal as its controlling terminal (as
/// a container runtime does for `tty: true`); copies the terminal's output
/// to stdout; stdin lines are commands: `send HEX` writes bytes to the
/// terminal, `term` sends SIGTERM to the child. At the child's exit prints
/// `EXIT <code>`.
const PTY_DRIVER: &str = r#"
import os, pty, signal, select, sys
pid, fd = pty.fork()
if pid == 0:
    os.execvp(sys.argv[1], sys.argv[1:])
inp = sys.stdin.fileno()
out = sys.stdout.buffer
pending = b''
reading_cmds = True
while True:
    fds = [fd] + ([inp] if reading_cmds else [])
    r, _, _ = select.select(fds, [], [])
    if fd in r:
        try:
            data = os.read(fd, 65536)
        except OSError:
            data = b''
        if not data:
            break
        out.write(data)
        out.flush()
    if reading_cmds and inp in r:
        chunk = os.read(inp, 4096)
        if not chunk:
            reading_cmds = False
        pending += chunk
        while b'\n' in pending:
            line, pending = pending.split(b'\n', 1)
            words = line.decode().split()
            if words[:1] == ['send']:
                os.write(fd, bytes.fromhex(words[1]))
            elif words[:1] == ['term']:
                os.kill(pid, signal.SIGTERM)
_, st = os.waitpid(pid, 0)
out.write(b'\nEXIT %d\n' % os.waitstatus_to_exitcode(st))
out.flush()
"#;

#[test]
fn on_a_terminal_the_program_keeps_it() {
    let root = temp_dir("runner-tty");
    let gate = temp_dir("runner-tty-gate").join("open");
    let addr = format!("127.0.0.1:{}", free_port());
    // The program reports whether stdin is a terminal, whether its group
    // is the terminal's foreground group, and whether echo is on; it turns
    // echo off (a later run must find it on again) and traps SIGINT (exit
    // 5) *before* it says so: the test sends ^C as soon as it reads the
    // line, and a ^C before the trap killed the shell without "got-int".
    let script = gated!(
        r#"read -r _ _ _ _ pgrp _ _ tpgid _ < /proc/$$/stat; if [ -t 0 ]; then t=tty; else t=notty; fi; if [ "$pgrp" = "$tpgid" ]; then fg=yes; else fg=no; fi; if stty -a | tr ' ' '\n' | grep -qx -- -echo; then e=off; else e=on; fi; stty -echo; trap 'echo got-int; exit 5' INT; echo "start $KUBEGATE_GENERATION $$ $t fg=$fg echo=$e"; while :; do sleep 0.1; done"#
    );
    let child = Command::new("python3")
        .arg("-c")
        .arg(PTY_DRIVER)
        .arg(KUBEGATE)
        .args([
            "app-runner",
            "--debounce-ms",
            "50",
            "--inspect-addr",
            &addr,
            "--root",
        ])
        .arg(&root)
        .args(["--", "sh", "-c", script])
        .env("GATE", &gate)
        .env("RUST_LOG", "warn")
        .env_remove("KUBEGATE_INSPECT_ADDR")
        .env_remove("KUBEGATE_WORKSPACE")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .expect("python3 (the pty driver)");
    // Killed if the test fails: the terminal hangs up, the runner gets
    // SIGHUP and ends its program.
    struct Driver(Child);
    impl Drop for Driver {
        fn drop(&mut self) {
            let _ = self.0.kill();
            let _ = self.0.wait();
        }
    }
    let mut child = Driver(child);
    let pid = child.0.id();
    let (cancel, cancelled) = crossbeam_channel::bounded::<()>(0);
    std::thread::spawn(move || {
        if let Err(RecvTimeoutError::Timeout) = cancelled.recv_timeout(Duration::from_secs(120)) {
            eprintln!("watchdog: killing the pty driver {pid}");
            unsafe_kill(pid, 9);
        }
    });
    let mut cmds = child.0.stdin.take().expect("stdin");
    let screen = Arc::new(Mutex::new(Vec::new()));
    let reader = collect(child.0.stdout.take().expect("stdout"), screen.clone());
    let screen_has = |needle: &str| {
        let s = screen.clone();
        let needle = needle.to_string();
        wait_for(&format!("{needle:?} on the terminal"), WAIT, move || {
            let text = String::from_utf8_lossy(&s.lock().expect("lock")).into_owned();
            text.contains(&needle).then_some(text)
        })
    };

    let mut ev = Events::open(&addr);
    std::fs::write(&gate, "").expect("open the gate");
    ev.until("gen 1", started(1));
    let text = screen_has("start 1 ");
    assert!(text.contains(" tty fg=yes echo=on"), "{text}");
    let g1: u32 = text
        .split("start 1 ")
        .nth(1)
        .and_then(|r| r.split_whitespace().next())
        .and_then(|p| p.parse().ok())
        .expect("pid");

    // Gen 1 turned echo off and is killed by the restart: gen 2 finds the
    // terminal as the runner did, and in the foreground.
    std::fs::write(root.join("a.txt"), "x").expect("write");
    ev.until("gen 2", started(2));
    let text = screen_has("start 2 ");
    assert!(
        text.contains("start 2 ")
            && text
                .split("start 2 ")
                .nth(1)
                .is_some_and(|r| r.contains(" tty fg=yes echo=on")),
        "{text}"
    );
    let g2: u32 = text
        .split("start 2 ")
        .nth(1)
        .and_then(|r| r.split_whitespace().next())
        .and_then(|p| p.parse().ok())
        .expect("pid");

    // Ctrl-C reaches the program (the foreground group), not the runner:
    // the run ends with the program's own code and nothing restarts.
    writeln!(cmds, "send 03").expect("send ^C");
    screen_has("got-int");
    let f = ev.until("gen 2's end", ended(2));
    assert_eq!(
        f.last().expect("frame")["payload"],
        json!({"generation": 2, "exitCode": 5})
    );
    let quiet = ev.during(QUIET);
    assert!(events_only(&quiet).is_empty(), "{quiet:#?}");
    assert!(!String::from_utf8_lossy(&screen.lock().expect("lock")).contains("EXIT"));
    // With a terminal the output is the program's own: no log frames.
    assert!(ev.seen.iter().all(|f| f["kind"] != "log"), "{:#?}", ev.seen);

    // SIGTERM to the runner with no program running: 128 + 15.
    writeln!(cmds, "term").expect("term");
    let text = screen_has("EXIT ");
    assert!(text.contains("EXIT 143"), "{text}");
    drop(cmds);
    let _ = reader.join();
    let _ = child.0.wait();
    drop(cancel);
    assert_no_leftovers(&[g1, g2]);
}

#[test]
fn a_subscriber_that_never_reads_holds_nothing_up() {
    let root = temp_dir("runner-slow");
    // 8 MB of output in 8,000 lines: far more than a subscriber's queue
    // plus the socket buffers.
    let script = gated!(
        r#"echo "start $KUBEGATE_GENERATION $$"; head -c 8000000 /dev/zero | tr '\0' y | fold -w 1000; echo done"#
    );
    let mut r = Runner::start(&root, &[], script);
    // A subscriber that connects and never reads.
    let mut stalled = wait_for("the inspect server", WAIT, || {
        TcpStream::connect(&r.addr).ok()
    });
    write!(stalled, "GET /events HTTP/1.1\r\nHost: x\r\n\r\n").expect("send");
    // Several subscribers that do; the gate opens with the first.
    let mut readers: Vec<Events> = (0..8).map(|_| r.subscribe()).collect();
    // (They may be dropped too if they fall behind the burst: publishing
    // waits for nobody.)
    let l = readers[0].until("gen 1's line", log_line("start 1 "));
    let groups = vec![pid_of(l.last().expect("line"))];
    // The program runs to its end: its output went through whole.
    let out = wait_for("the whole output on stdout", WAIT, || {
        let out = r.stdout();
        out.ends_with(b"done\n").then_some(out)
    });
    assert_eq!(out.iter().filter(|&&b| b == b'y').count(), 8_000_000);
    // The stalled one was dropped (the runner says so at warn).
    wait_for("the slow subscriber to be dropped", WAIT, || {
        r.stderr_str().contains("slow subscriber").then_some(())
    });
    // A late subscriber learns that it ended, from the replay.
    let mut late = r.subscribe();
    let f = late.until("the end", ended(1));
    assert_eq!(f.last().expect("frame")["payload"]["exitCode"], 0);
    drop(stalled);
    r.signal(15);
    assert_eq!(r.wait_exit(), Some(143));
    assert_no_leftovers(&groups);
}

#[test]
fn the_daemons_debug_relay_consumes_the_stream() {
    use kubegate::session::access::direct::DirectAccess;
    use kubegate::session::access::PodTarget;
    use kubegate::session::relay;
    let root = temp_dir("runner-relay");
    std::fs::write(
        root.join("kubegate.toml"),
        "[[app]]\nname = \"web\"\nports = [8080]\n",
    )
    .expect("write");
    let mut r = Runner::start(&root, &["--app", "web"], COUNTER);
    let port: u16 = r
        .addr
        .rsplit(':')
        .next()
        .and_then(|p| p.parse().ok())
        .expect("port");
    // The relay the daemon runs per app, in `direct` mode to 127.0.0.1.
    let (tx, frames) = unbounded::<Value>();
    let handle = relay::start_relay(
        Arc::new(DirectAccess::new()),
        PodTarget {
            namespace: "default".into(),
            name: "runner".into(),
            ip: "127.0.0.1".into(),
        },
        port,
        move |f| {
            let _ = tx.send(f);
            Ok(())
        },
    );
    let next = |pred: &dyn Fn(&Value) -> bool| -> Value {
        let deadline = Instant::now() + WAIT;
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            let f = frames.recv_timeout(left).expect("a frame from the relay");
            if pred(&f) {
                return f;
            }
        }
    };
    // The relay retries until the runner listens, then gets the replay.
    let ports = next(&|f| is_event(f, "Kernel.PortsResolved"));
    assert_eq!(
        ports["payload"]["ports"],
        json!([{"port": 8080, "protocol": "tcp"}])
    );
    next(&started(1));
    std::fs::write(r.gate.clone(), "").expect("open the gate");
    let line = next(&log_line("start 1 "));
    let first = pid_of(&line);
    r.write("b.txt", "x");
    next(&ended(1));
    next(&started(2));
    let line = next(&log_line("start 2 "));
    assert!(handle.stop_and_wait(WAIT), "the relay stopped");
    r.signal(15);
    assert_eq!(r.wait_exit(), Some(143));
    assert_no_leftovers(&[first, pid_of(&line)]);
}
