//! `session::io` against a real `kubegate sim`: an attach into an `AppIo`
//! (stdout and stderr on their own streams, merged on stream 0 with a tty,
//! stdin, resize reaching a tty app, seqs continuing across re-attaches,
//! replay after a seq, the attach ending by itself), and the io WebSocket
//! (`serve`) behind a tiny `http::Server`: replay, live frames, stdin through
//! the socket, a viewer that never reads cut with 4001 while the app and the
//! other viewer go on, bad frames, refusal, the session's end.
//! Every test has a watchdog; waits poll with deadlines, never sleep.

mod common;

use common::{wait_for, SimProc};
use crossbeam_channel::bounded;
use kubegate::http::{Handler, Reply, Request, Response, Server, ServerConfig, Socket, Upgrade};
use kubegate::kube::connection::Connection;
use kubegate::session::io::attach::attach;
use kubegate::session::io::ring::{AppIo, Item};
use kubegate::session::io::serve;
use kubegate::session::io::subscription::Subscription;
use kubegate::session::io::wire::{decode_frame, CLOSE_SLOW, SLOW_REASON, SUBPROTOCOL};
use kubegate::session::machine::OutStream;
use serde_json::{json, Value};
use std::net::{SocketAddr, TcpStream};
use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};
use tungstenite::client::IntoClientRequest;
use tungstenite::protocol::frame::coding::CloseCode;
use tungstenite::Message;

/// Aborts the test binary if the guard is not dropped within `secs`.
fn watchdog(secs: u64) -> crossbeam_channel::Sender<()> {
    let (tx, rx) = bounded::<()>(0);
    std::thread::spawn(move || {
        if let Err(crossbeam_channel::RecvTimeoutError::Timeout) =
            rx.recv_timeout(Duration::from_secs(secs))
        {
            eprintln!("watchdog: session_io test hung for {secs} s");
            std::process::abort();
        }
    });
    tx
}

const ECHO: &str =
    r#"while read l; do [ "$l" = quit ] && exit 0; echo "out:$l"; echo "err:$l" >&2; done"#;
const TTY_ECHO: &str =
    r#"while read l; do echo "out:$l"; echo "err:$l" >&2; echo "size:$(stty size)"; done"#;

fn start_pod(sim: &SimProc, name: &str, containers: Value) {
    sim.apply(
        &json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name},
        "spec": {"restartPolicy": "Never", "containers": containers}}),
    );
    wait_for(&format!("{name} running"), Duration::from_secs(60), || {
        (sim.kubectl_json(&["get", "pod", name])["status"]["phase"] == "Running").then_some(())
    });
}

/// What a subscription delivered, per stream, and every frame in order.
#[derive(Default)]
struct Seen {
    frames: Vec<(u32, u8, Vec<u8>)>,
}

impl Seen {
    fn text(&self, stream: u8) -> String {
        let mut s = Vec::new();
        for (_, st, d) in &self.frames {
            if *st == stream {
                s.extend_from_slice(d);
            }
        }
        String::from_utf8_lossy(&s).into_owned()
    }

    fn last_seq(&self) -> u32 {
        self.frames.last().map_or(0, |f| f.0)
    }

    /// Reads frames until `done` holds (60 s deadline); checks seqs are
    /// contiguous.
    fn read_until(&mut self, sub: &mut Subscription, what: &str, done: impl Fn(&Seen) -> bool) {
        let deadline = Instant::now() + Duration::from_secs(60);
        while !done(self) {
            let left = deadline.saturating_duration_since(Instant::now());
            match sub.recv_timeout(left) {
                Ok(Some(Item::Frame { seq, stream, data })) => {
                    if let Some(last) = self.frames.last() {
                        assert_eq!(seq, last.0 + 1, "seqs are contiguous");
                    }
                    self.frames.push((seq, stream, data.to_vec()));
                }
                other => panic!(
                    "waiting for {what}: {other:?}; stream 0 {:?}, 1 {:?}, 2 {:?}",
                    self.text(0),
                    self.text(1),
                    self.text(2)
                ),
            }
        }
    }
}

#[test]
fn attach_streams_tty_resize_replay_and_end() {
    let _w = watchdog(240);
    let sim = SimProc::start(&[]);
    start_pod(
        &sim,
        "apps",
        json!([
            {"name": "plain", "image": "busybox", "stdin": true, "command": ["sh", "-c", ECHO]},
            {"name": "term", "image": "busybox", "stdin": true, "tty": true,
             "command": ["sh", "-c", TTY_ECHO]},
        ]),
    );
    let conn = Connection::plain(&sim.url);

    // Streams apart: stdout on 1, stderr on 2.
    let plain = Arc::new(AppIo::new(1 << 20));
    let (end_tx, end_rx) = bounded::<Result<(), String>>(1);
    let h_plain = attach(
        &conn,
        "default",
        "apps",
        "plain",
        false,
        plain.clone(),
        move |r| {
            let _ = end_tx.send(r.map_err(|e| e.to_string()));
        },
    )
    .expect("attach plain");
    assert!(plain.has_input());
    let mut sub = plain.subscribe(None);
    let mut seen = Seen::default();
    assert!(plain.stdin(b"one\n"));
    seen.read_until(&mut sub, "one", |s| {
        s.text(1) == "out:one\n" && s.text(2) == "err:one\n"
    });
    assert_eq!(seen.frames[0].0, 1, "seqs start at 1");
    // Resizes are for tty apps only.
    assert!(!plain.resize(100, 40));

    // A second subscriber from a seq gets exactly what came after it.
    let s1 = plain.last_seq();
    assert_eq!(seen.last_seq(), s1);
    assert!(plain.stdin(b"two\n"));
    seen.read_until(&mut sub, "two", |s| {
        s.text(1).contains("out:two\n") && s.text(2).contains("err:two\n")
    });
    assert_eq!(plain.last_seq(), seen.last_seq(), "nothing else is coming");
    let mut late = plain.subscribe(Some(s1));
    let mut replay = Vec::new();
    while let Ok(Some(i)) = late.recv_timeout(Duration::ZERO) {
        match i {
            Item::Frame { seq, stream, data } => replay.push((seq, stream, data.to_vec())),
            other => panic!("{other:?}"),
        }
    }
    let missed: Vec<_> = seen.frames.iter().filter(|f| f.0 > s1).cloned().collect();
    assert!(!missed.is_empty());
    assert_eq!(replay, missed);

    // kubegate's own message on the app's channel is one more frame.
    let seq = plain
        .push(OutStream::Stderr, "[kubegate] note\n")
        .expect("pushed");
    assert_eq!(seq, s1 + missed.len() as u32 + 1);
    seen.read_until(&mut sub, "note", |s| s.text(2).contains("[kubegate] note"));

    // A tty: everything on stream 0, and resizes reach the terminal.
    let term = Arc::new(AppIo::new(1 << 20));
    let h_term =
        attach(&conn, "default", "apps", "term", true, term.clone(), |_| {}).expect("attach term");
    let mut tsub = term.subscribe(None);
    let mut tseen = Seen::default();
    assert!(term.stdin(b"hi\n"));
    tseen.read_until(&mut tsub, "hi", |s| {
        let t = s.text(0);
        t.contains("out:hi") && t.contains("err:hi") && t.contains("size:")
    });
    assert!(tseen.frames.iter().all(|f| f.1 == 0), "all on stream 0");
    assert!(term.resize(101, 37));
    // The size is applied concurrently with the shell's commands: ask until
    // a line shows it.
    let deadline = Instant::now() + Duration::from_secs(60);
    let mut n = 0;
    while !tseen.text(0).contains("size:37 101") {
        assert!(Instant::now() < deadline, "no resize: {:?}", tseen.text(0));
        n += 1;
        let line = format!("r{n}");
        assert!(term.stdin(format!("{line}\n").as_bytes()));
        let want = format!("out:{line}");
        tseen.read_until(&mut tsub, &want, |s| {
            let t = s.text(0);
            t.find(&want).is_some_and(|i| t[i..].contains("size:"))
        });
    }

    // Closing removes the input; a new attach (as after a pod recreate)
    // continues the seqs in the same AppIo.
    h_term.close();
    wait_for("input removed", Duration::from_secs(30), || {
        (!term.has_input()).then_some(())
    });
    assert!(!term.stdin(b"lost\n"));
    let before = term.last_seq();
    let h_term2 = attach(&conn, "default", "apps", "term", true, term.clone(), |_| {})
        .expect("re-attach term");
    assert!(term.stdin(b"again\n"));
    tseen.read_until(&mut tsub, "again", |s| s.text(0).contains("out:again"));
    assert!(tseen.frames.iter().any(|f| f.0 == before + 1));

    // The app exits: the attach ends by itself and says so.
    assert!(end_rx.try_recv().is_err());
    assert!(plain.stdin(b"quit\n"));
    let r = end_rx
        .recv_timeout(Duration::from_secs(60))
        .expect("on_end called");
    assert_eq!(r, Ok(()));
    wait_for(
        "input removed after the end",
        Duration::from_secs(10),
        || (!plain.has_input()).then_some(()),
    );
    drop(h_plain);
    drop(h_term2);
}

// ----------------------------------------------------------- the io socket

struct IoRoute(Arc<AppIo>);

impl Handler for IoRoute {
    fn handle(&self, req: Request) -> Reply {
        if !req.is_websocket_upgrade() {
            return Response::text(400, "Upgrade request required").into();
        }
        let protocol = req
            .websocket_protocols()
            .into_iter()
            .find(|p| p == SUBPROTOCOL);
        let last_seq = req.query("lastSeq").and_then(|s| s.parse::<u32>().ok());
        let tiny = req.query_flag("tiny");
        let unknown = req.path != "/io";
        let app = self.0.clone();
        Reply::Upgrade(Upgrade {
            protocol,
            headers: Vec::new(),
            max_message_bytes: 1 << 20,
            on_open: Box::new(move |mut conn| {
                if unknown {
                    return serve::refuse(conn, 4004, "unknown session or app");
                }
                if tiny {
                    // A small send buffer: a viewer that does not read is
                    // found out after a few frames, not megabytes.
                    if let Socket::Plain(s) = conn.websocket_mut().get_ref() {
                        let _ = rustix::net::sockopt::set_socket_send_buffer_size(s, 4096);
                    }
                }
                serve::serve(app, last_seq, conn, Duration::from_secs(30));
            }),
        })
    }
}

type Ws = tungstenite::WebSocket<TcpStream>;

fn connect(addr: SocketAddr, path: &str, tiny: bool) -> Ws {
    let mut req = format!("ws://{addr}{path}")
        .into_client_request()
        .expect("request");
    req.headers_mut().insert(
        "Sec-WebSocket-Protocol",
        SUBPROTOCOL.parse().expect("header"),
    );
    let tcp = TcpStream::connect(addr).expect("connect");
    if tiny {
        rustix::net::sockopt::set_socket_recv_buffer_size(&tcp, 4096).expect("SO_RCVBUF");
    }
    tcp.set_read_timeout(Some(Duration::from_secs(60)))
        .expect("timeout");
    tcp.set_nodelay(true).expect("nodelay");
    let (ws, resp) = tungstenite::client::client(req, tcp).expect("upgrade");
    assert_eq!(
        resp.headers()
            .get("sec-websocket-protocol")
            .and_then(|v| v.to_str().ok()),
        Some(SUBPROTOCOL)
    );
    ws
}

/// What a viewer read.
#[derive(Debug, PartialEq)]
enum Got {
    Frame(u32, u8, Vec<u8>),
    Gap(u32, u32),
    Close(u16, String),
}

fn read(ws: &mut Ws) -> Got {
    loop {
        match ws.read().expect("read") {
            Message::Binary(b) => {
                let (seq, stream, data) = decode_frame(&b).expect("a frame");
                return Got::Frame(seq, stream, data.to_vec());
            }
            Message::Text(t) => {
                let v: Value = serde_json::from_str(t.as_str()).expect("JSON");
                assert_eq!(v["type"], "gap", "{v}");
                let n = |k: &str| v[k].as_u64().expect("number") as u32;
                return Got::Gap(n("from"), n("to"));
            }
            Message::Close(f) => {
                let (code, reason) = f.map_or((1005, String::new()), |f| {
                    (u16::from(f.code), f.reason.to_string())
                });
                return Got::Close(code, reason);
            }
            _ => {}
        }
    }
}

/// Reads frames until the stdout text contains `want`; returns them.
fn read_until(ws: &mut Ws, frames: &mut Vec<(u32, u8, Vec<u8>)>, want: &str) {
    let text = |fr: &Vec<(u32, u8, Vec<u8>)>| {
        let mut t = String::new();
        for f in fr {
            t.push_str(&String::from_utf8_lossy(&f.2));
        }
        t
    };
    while !text(frames).contains(want) {
        match read(ws) {
            Got::Frame(seq, st, d) => {
                if let Some(l) = frames.last() {
                    assert_eq!(seq, l.0 + 1);
                }
                frames.push((seq, st, d));
            }
            other => panic!("waiting for {want:?}: {other:?}"),
        }
    }
}

/// Reads until the peer's Close; returns it and the frames before it.
fn read_to_close(ws: &mut Ws) -> (Vec<Got>, (u16, String)) {
    let mut got = Vec::new();
    loop {
        match read(ws) {
            Got::Close(c, r) => return (got, (c, r)),
            g => got.push(g),
        }
    }
}

#[test]
fn io_socket_replays_relays_stdin_and_cuts_a_slow_viewer() {
    let _w = watchdog(240);
    let sim = SimProc::start(&[]);
    start_pod(
        &sim,
        "viewers",
        json!([{"name": "plain", "image": "busybox", "stdin": true,
                "command": ["sh", "-c", ECHO]}]),
    );
    let conn = Connection::plain(&sim.url);
    let app = Arc::new(AppIo::new(1 << 20));
    let _h = attach(
        &conn,
        "default",
        "viewers",
        "plain",
        false,
        app.clone(),
        |_| {},
    )
    .expect("attach");
    let server = Server::bind(
        "127.0.0.1:0".parse().expect("addr"),
        ServerConfig::default(),
        Arc::new(IoRoute(app.clone())),
    )
    .expect("server");
    let addr = server.local_addr();

    // Output before anyone watches is replayed.
    assert!(app.stdin(b"a\n"));
    wait_for("a's output", Duration::from_secs(60), || {
        (app.last_seq() >= 2).then_some(())
    });
    let mut a = connect(addr, "/io", false);
    let mut fa = Vec::new();
    read_until(&mut a, &mut fa, "err:a\n");
    read_until(&mut a, &mut fa, "out:a\n");
    assert_eq!(fa[0].0, 1);
    let out_a: Vec<_> = fa.iter().filter(|f| f.1 == 1).collect();
    let err_a: Vec<_> = fa.iter().filter(|f| f.1 == 2).collect();
    assert_eq!(out_a.len(), 1);
    assert_eq!(out_a[0].2, b"out:a\n");
    assert_eq!(err_a[0].2, b"err:a\n");
    let s1 = fa.last().map(|f| f.0).expect("frames");

    // Stdin through the socket; live frames follow.
    a.send(Message::binary(b"b\n".to_vec())).expect("stdin");
    read_until(&mut a, &mut fa, "out:b\n");
    read_until(&mut a, &mut fa, "err:b\n");
    // A resize for a non-tty app is accepted and ignored.
    a.send(Message::text(r#"{"type":"resize","cols":90,"rows":30}"#))
        .expect("resize");

    // A viewer from lastSeq gets exactly the frames after it, then live ones.
    let mut b = connect(addr, &format!("/io?lastSeq={s1}"), false);
    let after: Vec<_> = fa.iter().filter(|f| f.0 > s1).cloned().collect();
    let mut fb = Vec::new();
    for _ in 0..after.len() {
        match read(&mut b) {
            Got::Frame(seq, st, d) => fb.push((seq, st, d)),
            other => panic!("{other:?}"),
        }
    }
    assert_eq!(fb, after);
    a.send(Message::binary(b"c\n".to_vec())).expect("stdin");
    read_until(&mut a, &mut fa, "out:c\n");
    read_until(&mut b, &mut fb, "out:c\n");

    // A going away unsubscribes it.
    assert_eq!(app.subscribers(), 2);
    a.close(None).expect("close");
    while a.read().is_ok() {}
    wait_for("a unsubscribed", Duration::from_secs(10), || {
        (app.subscribers() == 1).then_some(())
    });

    // B reads on its own thread from now on.
    let b_seq = Arc::new(AtomicU32::new(fb.last().map_or(0, |f| f.0)));
    let b_after = Arc::new(AtomicBool::new(false));
    let b_reader = {
        let b_seq = b_seq.clone();
        let b_after = b_after.clone();
        std::thread::spawn(move || loop {
            match read(&mut b) {
                Got::Frame(seq, _, d) => {
                    assert_eq!(seq, b_seq.load(Ordering::SeqCst) + 1, "b misses nothing");
                    if String::from_utf8_lossy(&d).contains("out:after") {
                        b_after.store(true, Ordering::SeqCst);
                    }
                    b_seq.store(seq, Ordering::SeqCst);
                }
                Got::Close(code, reason) => return (code, reason),
                Got::Gap(f, t) => panic!("b got a gap {f}-{t}"),
            }
        })
    };

    // C never reads: with small socket buffers it falls behind its queue
    // and is cut with 4001, while B keeps receiving and push never waits.
    let mut c = connect(addr, "/io?tiny=1", true);
    wait_for("c subscribed", Duration::from_secs(10), || {
        (app.subscribers() == 2).then_some(())
    });
    let flood = vec![b'z'; 1024];
    let t0 = Instant::now();
    let mut pushed = 0;
    while app.subscribers() == 2 {
        assert!(pushed < 20_000, "c was never cut");
        app.push(OutStream::Stdout, flood.clone()).expect("push");
        pushed += 1;
        if pushed % 32 == 0 {
            // Keep B within its queue: B is a fast viewer, C is the slow one.
            let target = app.last_seq();
            wait_for("b to keep up", Duration::from_secs(30), || {
                (b_seq.load(Ordering::SeqCst) >= target).then_some(())
            });
        }
    }
    assert!(t0.elapsed() < Duration::from_secs(60));
    // C reads now: what the buffers held, then 4001.
    let (got, close) = read_to_close(&mut c);
    assert_eq!(close, (CLOSE_SLOW, SLOW_REASON.to_string()));
    let mut expect = 1;
    for g in &got {
        match g {
            Got::Frame(seq, _, _) => {
                assert_eq!(*seq, expect);
                expect += 1;
            }
            other => panic!("{other:?}"),
        }
    }
    let c_last = expect - 1;
    assert!(c_last < app.last_seq());
    // C reconnects from its last seq and goes on where it stopped.
    let mut c2 = connect(addr, &format!("/io?lastSeq={c_last}"), false);
    match read(&mut c2) {
        Got::Frame(seq, _, _) => assert_eq!(seq, c_last + 1),
        Got::Gap(from, _) => assert_eq!(from, c_last + 1),
        other => panic!("{other:?}"),
    }
    drop(c2);

    // The app kept running: B sees its answer.
    assert!(app.stdin(b"after\n"));
    wait_for("b sees out:after", Duration::from_secs(60), || {
        b_after.load(Ordering::SeqCst).then_some(())
    });

    // A bad text frame closes that viewer with 1008.
    let mut d = connect(addr, &format!("/io?lastSeq={}", app.last_seq()), false);
    d.send(Message::text("not json")).expect("send");
    let (_, close) = read_to_close(&mut d);
    assert_eq!(close.0, u16::from(CloseCode::Policy));
    assert!(close.1.contains("JSON"), "{close:?}");

    // An unknown app is refused with 4004.
    let mut e = connect(addr, "/io/unknown", false);
    let (got, close) = read_to_close(&mut e);
    assert!(got.is_empty());
    assert_eq!(close, (4004, "unknown session or app".to_string()));

    // The session ends: B gets everything, then 1000.
    let last = app.last_seq();
    app.end(1000, "session ended");
    let (code, reason) = b_reader.join().expect("b reader");
    assert_eq!((code, reason.as_str()), (1000, "session ended"));
    assert_eq!(b_seq.load(Ordering::SeqCst), last);
    wait_for("no subscribers", Duration::from_secs(10), || {
        (app.subscribers() == 0).then_some(())
    });
    server.shutdown();
}
