//! The exec/attach WebSocket protocol at the frame level
//! (docs/kubernetes.md#exec-and-attach-over-websocket),
//! the way clients other than kubectl speak it: v4 and v5, stdin in text
//! frames (the Python client), the v5 stdin close, exact channel-3 statuses,
//! pings while idle, several attachers, and the stream faults.

mod common;

use common::{wait_for, SimProc};
use serde_json::{json, Value};
use std::net::TcpStream;
use std::time::{Duration, Instant};
use tungstenite::client::IntoClientRequest;
use tungstenite::{Message, WebSocket};

type Ws = WebSocket<TcpStream>;

fn running_pod(sim: &SimProc, name: &str, container: Value) {
    sim.apply(&json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name}, "spec": {"containers": [container]}}),
    );
    wait_for(&format!("{name} running"), Duration::from_secs(30), || {
        (sim.kubectl_json(&["get", "pod", name])["status"]["phase"] == "Running").then_some(())
    });
}

fn connect(sim: &SimProc, path_query: &str, protocols: &str) -> (Ws, String) {
    let addr = sim.url.trim_start_matches("http://");
    let mut req = format!("ws://{addr}{path_query}")
        .into_client_request()
        .expect("request");
    req.headers_mut()
        .insert("Sec-WebSocket-Protocol", protocols.parse().expect("header"));
    let stream = TcpStream::connect(addr).expect("connect");
    stream
        .set_read_timeout(Some(Duration::from_secs(30)))
        .expect("timeout");
    let (ws, resp) = tungstenite::client(req, stream).expect("handshake");
    let proto = resp
        .headers()
        .get("sec-websocket-protocol")
        .and_then(|v| v.to_str().ok())
        .unwrap_or("")
        .to_string();
    (ws, proto)
}

/// Everything the server sends until it closes: (channel, bytes) per
/// frame, and the close code.
fn drain(ws: &mut Ws) -> (Vec<(u8, Vec<u8>)>, Option<u16>) {
    let mut frames = Vec::new();
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        assert!(Instant::now() < deadline, "no close within 30 s");
        match ws.read() {
            Ok(Message::Binary(b)) => {
                if let Some((&ch, rest)) = b.split_first() {
                    frames.push((ch, rest.to_vec()));
                }
            }
            Ok(Message::Close(c)) => return (frames, c.map(|c| u16::from(c.code))),
            Ok(Message::Text(t)) => panic!("server sent a text frame: {t}"),
            Ok(_) => {}
            Err(tungstenite::Error::ConnectionClosed) | Err(tungstenite::Error::AlreadyClosed) => {
                return (frames, None)
            }
            Err(e) => panic!("read: {e}"),
        }
    }
}

fn channel(frames: &[(u8, Vec<u8>)], ch: u8) -> Vec<u8> {
    frames
        .iter()
        .filter(|(c, _)| *c == ch)
        .flat_map(|(_, d)| d.clone())
        .collect()
}

const EXEC: &str = "/api/v1/namespaces/default/pods/box/exec";

fn box_pod(sim: &SimProc) {
    running_pod(
        sim,
        "box",
        json!({"name": "main", "image": "busybox", "command": ["sh", "-c", "trap 'exit 0' TERM; while :; do sleep 1; done"]}),
    );
}

#[test]
fn v5_stdin_close_and_exit_status() {
    let sim = SimProc::start(&[]);
    box_pod(&sim);
    let (mut ws, proto) = connect(&sim, &format!("{EXEC}?command=sh&command=-c&command=cat%3B%20echo%20done%3B%20exit%205&stdin=true&stdout=true&stderr=true"), "v5.channel.k8s.io");
    assert_eq!(proto, "v5.channel.k8s.io");
    ws.send(Message::Binary(b"\x00hello ".to_vec().into()))
        .expect("stdin");
    // Stdin in a TEXT frame, as the Python client sends it.
    ws.send(Message::Text("\u{0}world\n".into()))
        .expect("stdin text");
    ws.send(Message::Binary(vec![255, 0].into()))
        .expect("close stdin");
    let (frames, close) = drain(&mut ws);
    assert_eq!(
        frames.first().map(|f| f.1.len()),
        Some(0),
        "first frame is the empty open marker"
    );
    assert_eq!(
        String::from_utf8_lossy(&channel(&frames, 1)),
        "hello world\ndone\n"
    );
    let status: Value = serde_json::from_slice(&channel(&frames, 3)).expect("status JSON");
    assert_eq!(status["status"], "Failure");
    assert_eq!(status["reason"], "NonZeroExitCode");
    assert_eq!(status["details"]["causes"][0]["reason"], "ExitCode");
    assert_eq!(status["details"]["causes"][0]["message"], "5");
    assert_eq!(close, Some(1000));
    // Channel 3 comes after every output byte.
    let last_out = frames
        .iter()
        .rposition(|(c, d)| *c == 1 && !d.is_empty())
        .expect("output");
    let status_at = frames.iter().position(|(c, _)| *c == 3).expect("status");
    assert!(status_at > last_out);
}

#[test]
fn v4_is_chosen_when_offered_first_and_success_status() {
    let sim = SimProc::start(&[]);
    box_pod(&sim);
    let (mut ws, proto) = connect(
        &sim,
        &format!("{EXEC}?command=echo&command=hi&stdout=true&stderr=true"),
        "v4.channel.k8s.io,v5.channel.k8s.io",
    );
    assert_eq!(proto, "v4.channel.k8s.io");
    let (frames, close) = drain(&mut ws);
    assert_eq!(channel(&frames, 1), b"hi\n");
    let status: Value = serde_json::from_slice(&channel(&frames, 3)).expect("status JSON");
    assert_eq!(status, json!({"metadata": {}, "status": "Success"}));
    assert_eq!(close, Some(1000));
    // The Python client's form: v5 first in one header.
    let (ws, proto) = connect(
        &sim,
        &format!("{EXEC}?command=true&stdin=false&stdout=true&stderr=true&tty=false"),
        "v5.channel.k8s.io,v4.channel.k8s.io",
    );
    assert_eq!(proto, "v5.channel.k8s.io");
    drop(ws);
}

#[test]
fn errors_before_the_upgrade_are_statuses() {
    let sim = SimProc::start(&[]);
    box_pod(&sim);
    let a: ureq::Agent = ureq::Agent::config_builder()
        .http_status_as_error(false)
        .proxy(None)
        .build()
        .into();
    let get = |path: &str| -> (u16, Value) {
        let mut r = a.get(&format!("{}{path}", sim.url)).call().expect("http");
        (
            r.status().as_u16(),
            r.body_mut().read_json().unwrap_or(Value::Null),
        )
    };
    let (code, s) = get(&format!("{EXEC}?command=true&stdout=true"));
    assert_eq!(code, 400);
    assert_eq!(s["message"], "Upgrade request required");
    let (code, s) = get("/api/v1/namespaces/default/pods/nope/exec?command=true&stdout=true");
    assert_eq!(code, 404, "{s}");
    let (code, s) = get(&format!("{EXEC}?command=true&stdout=true&container=other"));
    assert_eq!(code, 400);
    assert_eq!(s["message"], "container other is not valid for pod box");
}

#[test]
fn idle_pings_are_answered_and_attachers_share_output() {
    let sim = SimProc::start(&[]);
    running_pod(
        &sim,
        "talker",
        json!({"name": "main", "image": "busybox", "stdin": true,
        "command": ["sh", "-c", "while read l; do echo said:$l; done"]}),
    );
    let attach = "/api/v1/namespaces/default/pods/talker/attach?stdin=true&stdout=true&stderr=true";
    let (mut a, _) = connect(&sim, attach, "v5.channel.k8s.io");
    let (mut b, _) = connect(
        &sim,
        "/api/v1/namespaces/default/pods/talker/attach?stdout=true",
        "v5.channel.k8s.io",
    );
    // An idle ping gets its pong.
    a.send(Message::Ping(b"are-you-there".to_vec().into()))
        .expect("ping");
    let t0 = Instant::now();
    loop {
        match a.read().expect("read") {
            Message::Pong(p) => {
                assert_eq!(&p[..], b"are-you-there");
                break;
            }
            _ => assert!(t0.elapsed() < Duration::from_secs(5), "no pong"),
        }
    }
    assert!(
        t0.elapsed() < Duration::from_secs(1),
        "pong took {:?}",
        t0.elapsed()
    );
    // An attach is answered (101) before it subscribes to the output, as
    // a kubelet's is, and nothing is replayed: a line said before b's
    // subscription reaches only a. So a line goes in every half second
    // until both attachers have seen one said.
    for ws in [&mut a, &mut b] {
        ws.get_mut()
            .set_read_timeout(Some(Duration::from_millis(500)))
            .expect("timeout");
    }
    let deadline = Instant::now() + Duration::from_secs(30);
    let mut got = [Vec::new(), Vec::new()];
    while !got
        .iter()
        .all(|g| String::from_utf8_lossy(g).contains("said:x"))
    {
        assert!(Instant::now() < deadline, "not both attachers: {got:?}");
        a.send(Message::Binary(b"\x00x\n".to_vec().into()))
            .expect("stdin");
        for (ws, g) in [&mut a, &mut b].into_iter().zip(got.iter_mut()) {
            match ws.read() {
                Ok(Message::Binary(d)) if d.first() == Some(&1) => g.extend_from_slice(&d[1..]),
                Ok(_) => {}
                Err(tungstenite::Error::Io(e))
                    if matches!(
                        e.kind(),
                        std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
                    ) => {}
                Err(e) => panic!("read: {e}"),
            }
        }
    }
}

#[test]
fn not_running_container_and_cut_streams() {
    let sim = SimProc::start(&[]);
    sim.apply(&json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "done"},
        "spec": {"restartPolicy": "Never", "containers": [{"name": "main", "image": "busybox", "command": ["true"]}]}}),
    );
    wait_for("done to finish", Duration::from_secs(30), || {
        (sim.kubectl_json(&["get", "pod", "done"])["status"]["phase"] == "Succeeded").then_some(())
    });
    let (mut ws, _) = connect(
        &sim,
        "/api/v1/namespaces/default/pods/done/exec?command=true&stdout=true",
        "v5.channel.k8s.io",
    );
    let (frames, _) = drain(&mut ws);
    let status: Value = serde_json::from_slice(&channel(&frames, 3)).expect("status JSON");
    assert_eq!(status["reason"], "InternalError");
    assert_eq!(status["code"], 500);

    // A cut stream ends without any exit status.
    box_pod(&sim);
    let (mut ws, _) = connect(
        &sim,
        &format!("{EXEC}?command=sleep&command=30&stdout=true"),
        "v5.channel.k8s.io",
    );
    // Wait for the open marker, so the exec is running before the cut.
    let _ = ws.read().expect("open marker");
    let a: ureq::Agent = ureq::Agent::config_builder()
        .http_status_as_error(false)
        .proxy(None)
        .build()
        .into();
    let r = a
        .post(&format!("{}/sim/faults", sim.url))
        .send_json(json!({"cutStreams": true}))
        .expect("fault");
    assert_eq!(r.status().as_u16(), 200);
    let (frames, close) = drain(&mut ws);
    assert!(
        channel(&frames, 3).is_empty(),
        "a cut stream carries no status"
    );
    assert_ne!(close, Some(1000));

    // A killed container is reported terminated with 137, then restarted.
    let r = a
        .post(&format!("{}/sim/faults", sim.url))
        .send_json(json!({"killContainer": {"pod": "box"}}))
        .expect("fault");
    assert_eq!(r.status().as_u16(), 200);
    let p = wait_for(
        "box restarted after the kill",
        Duration::from_secs(30),
        || {
            let p = sim.kubectl_json(&["get", "pod", "box"]);
            (p["status"]["containerStatuses"][0]["restartCount"].as_u64() == Some(1)).then_some(p)
        },
    );
    assert_eq!(
        p["status"]["containerStatuses"][0]["lastState"]["terminated"]["exitCode"],
        137
    );
}

#[test]
fn exec_commands_are_not_expanded() {
    let sim = SimProc::start(&[]);
    box_pod(&sim);
    let (mut ws, _) = connect(
        &sim,
        &format!("{EXEC}?command=sh&command=-c&command=echo%20%24%24%20%24(HOME)x&stdout=true&stderr=true"),
        "v5.channel.k8s.io",
    );
    let (frames, _) = drain(&mut ws);
    let out = String::from_utf8_lossy(&channel(&frames, 1)).to_string();
    // `$$` reached the shell as `$$` (its pid), `$(HOME)` as a command
    // substitution that fails: nothing was expanded by the sim.
    let first = out.split_whitespace().next().unwrap_or("");
    assert!(first.parse::<u32>().is_ok(), "{out:?}");
}
