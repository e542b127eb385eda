//! The front door's admission and connection limits against a real
//! `kubegate serve` over sockets (issue 13, items 2 and 3): strangers are
//! answered from their request head without their body being read or a
//! `100 Continue` sent; the body budget answers 503 OVERLOADED with
//! Retry-After, with a share per principal; a principal over its
//! event-stream cap gets 429 TOO_MANY_CONNECTIONS while another is served;
//! half-open connections hit the per-peer cap while an authenticated
//! request from the same address is still served; `/healthz` answers when
//! every slot is taken. Figures come from the daemon's `/metrics`. Every
//! wait is a condition with a deadline.

use crate::common::daemon::{parse_response, token_digest, DaemonProc};
use crate::common::wait_for;
use serde_json::{json, Value};
use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::Duration;

/// Two more principals: `other` (may start sessions) and `viewer` (may not).
fn principals(c: String) -> String {
    format!(
        "{c}\n[[principal]]\nname = \"other\"\ntoken_sha256 = \"{}\"\nworkspaces = []\nmay_start_sessions = true\n\
         \n[[principal]]\nname = \"viewer\"\ntoken_sha256 = \"{}\"\nworkspaces = []\nmay_start_sessions = false\n",
        token_digest("other-token"),
        token_digest("viewer-token"),
    )
}

/// `[server]` keys added to the example's section.
fn server_keys(c: String, keys: &str) -> String {
    let out = c.replace("[server]\n", &format!("[server]\n{keys}\n"));
    assert_ne!(out, c, "the example has a [server] section");
    out
}

fn connect(d: &DaemonProc) -> TcpStream {
    let s = TcpStream::connect(&d.addr).expect("connect");
    s.set_read_timeout(Some(Duration::from_secs(10)))
        .expect("timeout");
    s
}

/// Reads one response head (and a Content-Length body) from `s`; status,
/// head text, body. Panics when nothing complete arrives within the read
/// timeout (the daemon waiting for a body it should not want).
fn read_answer(s: &mut TcpStream) -> (u16, String, Vec<u8>) {
    let mut buf = Vec::new();
    let mut chunk = [0u8; 4096];
    let split = loop {
        if let Some(p) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
            break p;
        }
        match s.read(&mut chunk) {
            Ok(0) => panic!(
                "connection closed before an answer: {:?}",
                String::from_utf8_lossy(&buf)
            ),
            Ok(n) => buf.extend_from_slice(&chunk[..n]),
            Err(e) => panic!(
                "no answer from the head alone ({e}): {:?}",
                String::from_utf8_lossy(&buf)
            ),
        }
    };
    let head = String::from_utf8_lossy(&buf[..split]).to_string();
    let status = head
        .split(' ')
        .nth(1)
        .and_then(|c| c.parse().ok())
        .expect("status");
    let len: usize = head
        .lines()
        .find_map(|l| {
            let (k, v) = l.split_once(':')?;
            k.eq_ignore_ascii_case("content-length")
                .then(|| v.trim().parse().ok())
                .flatten()
        })
        .unwrap_or(0);
    let mut body = buf[split + 4..].to_vec();
    while body.len() < len {
        match s.read(&mut chunk) {
            Ok(0) | Err(_) => break,
            Ok(n) => body.extend_from_slice(&chunk[..n]),
        }
    }
    (status, head, body)
}

fn code_of(body: &[u8]) -> String {
    serde_json::from_slice::<Value>(body)
        .ok()
        .and_then(|v| v["error"]["code"].as_str().map(str::to_string))
        .unwrap_or_else(|| String::from_utf8_lossy(body).into_owned())
}

fn header_of<'a>(head: &'a str, name: &str) -> Option<&'a str> {
    head.lines().find_map(|l| {
        let (k, v) = l.split_once(':')?;
        k.eq_ignore_ascii_case(name).then(|| v.trim())
    })
}

/// Sends a request head (and `body_part` of its body) and leaves the
/// connection open.
fn send_head(d: &DaemonProc, head: &str, body_part: &[u8]) -> TcpStream {
    let mut s = connect(d);
    s.write_all(head.as_bytes()).expect("write head");
    s.write_all(body_part).expect("write body");
    s
}

/// One series of the daemon's `/metrics` (0 when absent).
fn metric(d: &DaemonProc, series: &str) -> i64 {
    let (st, body) = d.request("GET", "/metrics", Some(&d.token), None);
    assert_eq!(st, 200, "{}", String::from_utf8_lossy(&body));
    String::from_utf8_lossy(&body)
        .lines()
        .find_map(|l| {
            let (k, v) = l.rsplit_once(' ')?;
            (k == series).then(|| v.parse().ok()).flatten()
        })
        .unwrap_or(0)
}

#[test]
fn strangers_are_answered_from_the_head_and_the_budget_has_shares() {
    let _w = crate::common::bench::watchdog("strangers_are_answered_from_the_head", 120);
    let d = DaemonProc::start_with(
        |c| {
            server_keys(
                principals(c),
                "body_budget_bytes = 100000\nbody_budget_per_principal_bytes = 60000",
            )
        },
        "info",
    );

    // A 90 MiB upload without a token: 401 from its head, with 16 KiB of
    // the body sent and the rest never asked for.
    let mut s = send_head(
        &d,
        "POST /v1/sessions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: 94371840\r\n\r\n",
        &[b'x'; 16 * 1024],
    );
    let (st, head, body) = read_answer(&mut s);
    assert_eq!(st, 401, "{head}");
    assert_eq!(code_of(&body), "UNAUTHORIZED");
    assert!(
        header_of(&head, "connection").is_some_and(|v| v.eq_ignore_ascii_case("close")),
        "a refused body closes the connection: {head}"
    );
    drop(s);

    // With Expect: 100-continue the stranger gets 401, not 100.
    let mut s = send_head(
        &d,
        "POST /v1/exec HTTP/1.1\r\nHost: x\r\nExpect: 100-continue\r\nContent-Type: application/json\r\nContent-Length: 1000\r\n\r\n",
        b"",
    );
    let (st, head, _) = read_answer(&mut s);
    assert_eq!(st, 401, "no 100 Continue for a stranger: {head}");
    drop(s);

    // A token that may not start sessions: 403 from the head, body unread.
    let mut s = send_head(
        &d,
        "POST /v1/sessions HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer viewer-token\r\nExpect: 100-continue\r\nContent-Length: 94371840\r\n\r\n",
        b"",
    );
    let (st, head, body) = read_answer(&mut s);
    assert_eq!(st, 403, "{head}");
    assert_eq!(code_of(&body), "FORBIDDEN");
    drop(s);

    // Another principal's session is "no such session" from the head.
    let (st, v) = d.json(
        "POST",
        "/v1/sessions",
        Some(&json!({
            "apps": [{"name": "web", "entry": "main.sh", "command": ["sh", "main.sh"]}],
            "bundle": {"files": [{"path": "main.sh", "content": "sleep 600"}]}
        })),
    );
    assert_eq!(st, 201, "{v}");
    let id = v["sessionId"].as_str().expect("sessionId").to_string();
    let mut s = send_head(
        &d,
        &format!(
            "POST /v1/sessions/{id}/workspace HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer other-token\r\nContent-Length: 500000\r\n\r\n"
        ),
        b"",
    );
    let (st, _, body) = read_answer(&mut s);
    assert_eq!((st, code_of(&body).as_str()), (404, "NOT_FOUND"));
    drop(s);

    // Nothing of the refused bodies is held; the session's start body is
    // held in the budget until its workspace is seeded, then given back.
    wait_for("no body held", Duration::from_secs(10), || {
        (metric(&d, "kubegate_body_bytes_buffered") == 0).then_some(())
    });
    wait_for(
        "the seeded session's reservation given back",
        Duration::from_secs(60),
        || (metric(&d, "kubegate_body_budget_bytes") == 0).then_some(()),
    );
    assert!(metric(&d, "kubegate_refusals_total{reason=\"unauthenticated\"}") >= 2);
    assert!(metric(&d, "kubegate_refusals_total{reason=\"forbidden\"}") >= 1);
    assert!(metric(&d, "kubegate_refusals_total{reason=\"not_found\"}") >= 1);

    // The budget: demo holds 50,000 of its 60,000 share with a body it is
    // still sending.
    let exec_head = |token: &str, n: usize| {
        format!(
            "POST /v1/exec HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer {token}\r\nContent-Type: application/json\r\nContent-Length: {n}\r\n\r\n"
        )
    };
    let held_demo = send_head(&d, &exec_head(&d.token, 50_000), b"{\"proj");
    wait_for("demo's reservation", Duration::from_secs(10), || {
        (metric(&d, "kubegate_body_budget_bytes") == 50_000).then_some(())
    });
    assert!(metric(&d, "kubegate_body_bytes_buffered") <= 16 * 1024);
    // Over demo's share: 503 OVERLOADED with Retry-After, from the head.
    let mut s = send_head(&d, &exec_head(&d.token, 20_000), b"");
    let (st, head, body) = read_answer(&mut s);
    assert_eq!((st, code_of(&body).as_str()), (503, "OVERLOADED"), "{head}");
    assert!(header_of(&head, "retry-after").is_some(), "{head}");
    drop(s);
    // Another principal is within its share and the total: admitted (its
    // body is read and found not to be JSON).
    let mut s = send_head(&d, &exec_head("other-token", 40_000), &[b'x'; 40_000]);
    let (st, _, body) = read_answer(&mut s);
    assert_eq!((st, code_of(&body).as_str()), (400, "BAD_REQUEST"));
    drop(s);
    wait_for(
        "other's first reservation given back",
        Duration::from_secs(10),
        || (metric(&d, "kubegate_body_budget_bytes") == 50_000).then_some(()),
    );
    // With other holding 40,000 too, viewer's 20,000 is over the total.
    let held_other = send_head(&d, &exec_head("other-token", 40_000), b"");
    wait_for("other's reservation", Duration::from_secs(10), || {
        (metric(&d, "kubegate_body_budget_bytes") == 90_000).then_some(())
    });
    let mut s = send_head(&d, &exec_head("viewer-token", 20_000), b"");
    let (st, head, body) = read_answer(&mut s);
    assert_eq!((st, code_of(&body).as_str()), (503, "OVERLOADED"), "{head}");
    assert!(header_of(&head, "retry-after").is_some(), "{head}");
    drop(s);
    // A chunked body grows its reservation as it comes: past viewer's
    // room it is refused mid-body.
    drop(held_other);
    wait_for(
        "other's reservation given back",
        Duration::from_secs(10),
        || (metric(&d, "kubegate_body_budget_bytes") == 50_000).then_some(()),
    );
    let mut s = send_head(
        &d,
        "POST /v1/exec HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer viewer-token\r\nTransfer-Encoding: chunked\r\n\r\n",
        b"",
    );
    for _ in 0..8 {
        // 8 x 8,000 = 64,000 > 60,000 (viewer's share) and > 50,000 left.
        let chunk = format!("{:x}\r\n{}\r\n", 8000, "x".repeat(8000));
        if s.write_all(chunk.as_bytes()).is_err() {
            break;
        }
    }
    let (st, _, body) = read_answer(&mut s);
    assert_eq!((st, code_of(&body).as_str()), (503, "OVERLOADED"));
    drop(s);
    // Everything is given back when the held bodies go.
    drop(held_demo);
    wait_for("an empty budget", Duration::from_secs(10), || {
        (metric(&d, "kubegate_body_budget_bytes") == 0
            && metric(&d, "kubegate_body_bytes_buffered") == 0)
            .then_some(())
    });
    assert!(metric(&d, "kubegate_refusals_total{reason=\"budget_share\"}") >= 1);
    assert!(metric(&d, "kubegate_refusals_total{reason=\"budget\"}") >= 1);
    // And demo is served as before.
    let (st, v) = d.json("GET", "/v1/workspaces", None);
    assert_eq!(st, 200, "{v}");
}

/// Opens `GET path` with `token` and reads the answer's head; the stream
/// stays open on 200.
fn open_stream(d: &DaemonProc, path: &str, token: &str) -> (u16, String, Vec<u8>, TcpStream) {
    let mut s = send_head(
        d,
        &format!("GET {path} HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer {token}\r\n\r\n"),
        b"",
    );
    let mut buf = Vec::new();
    let mut chunk = [0u8; 4096];
    let split = loop {
        if let Some(p) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
            break p;
        }
        match s.read(&mut chunk) {
            Ok(n) if n > 0 => buf.extend_from_slice(&chunk[..n]),
            other => panic!("no answer: {other:?}"),
        }
    };
    let head = String::from_utf8_lossy(&buf[..split]).to_string();
    let status = head.split(' ').nth(1).and_then(|c| c.parse().ok()).unwrap();
    let mut body = buf[split + 4..].to_vec();
    if status != 200 {
        let (_, b) = parse_response(&buf);
        body = b;
    }
    (status, head, body, s)
}

fn start_session(d: &DaemonProc, token: &str) -> String {
    let body = json!({
        "apps": [{"name": "web", "entry": "main.sh", "command": ["sh", "main.sh"]}],
        "bundle": {"files": [{"path": "main.sh", "content": "sleep 600"}]}
    })
    .to_string();
    let (st, resp) = d.request("POST", "/v1/sessions", Some(token), Some(body.as_bytes()));
    assert_eq!(st, 201, "{}", String::from_utf8_lossy(&resp));
    let v: Value = serde_json::from_slice(&resp).expect("json");
    v["sessionId"].as_str().expect("sessionId").to_string()
}

#[test]
fn a_principal_over_its_event_stream_cap_gets_429_while_another_is_served() {
    let _w = crate::common::bench::watchdog("event_stream_cap", 120);
    let d = DaemonProc::start_with(
        |c| {
            server_keys(
                principals(c),
                "max_event_streams_per_principal = 2\nmax_io_sockets_per_principal = 1",
            )
        },
        "info",
    );
    let mine = start_session(&d, &d.token);
    let theirs = start_session(&d, "other-token");
    let events = |id: &str| format!("/v1/sessions/{id}/events");
    let (a, _, _, s1) = open_stream(&d, &events(&mine), &d.token);
    let (b, _, _, _s2) = open_stream(&d, &events(&mine), &d.token);
    assert_eq!((a, b), (200, 200));
    let (st, head, body, _) = open_stream(&d, &events(&mine), &d.token);
    assert_eq!(
        (st, code_of(&body).as_str()),
        (429, "TOO_MANY_CONNECTIONS"),
        "{head}"
    );
    assert!(header_of(&head, "retry-after").is_some(), "{head}");
    assert_eq!(
        metric(
            &d,
            "kubegate_principal_connections{principal=\"demo\",kind=\"events\"}"
        ),
        2
    );
    // Another principal is served meanwhile.
    let (st, _, _, _s3) = open_stream(&d, &events(&theirs), "other-token");
    assert_eq!(st, 200);
    // A closed stream gives its place back.
    drop(s1);
    wait_for("a free event-stream place", Duration::from_secs(15), || {
        let (st, _, _, s) = open_stream(&d, &events(&mine), &d.token);
        (st == 200).then_some(s)
    });
    assert!(metric(&d, "kubegate_refusals_total{reason=\"events\"}") >= 1);

    // The io socket cap (1 here): a second socket is refused from its head
    // with 429, another principal's is accepted.
    let auth = format!("Bearer {}", d.token);
    let io = format!("/v1/sessions/{mine}/io?app=web");
    let (_first, _) = d
        .ws(
            &io,
            &[("Authorization", auth.as_str())],
            &["kubegate.io.v1"],
        )
        .expect("the first io socket");
    match d.ws(
        &io,
        &[("Authorization", auth.as_str())],
        &["kubegate.io.v1"],
    ) {
        Err((st, body)) => assert_eq!((st, code_of(&body).as_str()), (429, "TOO_MANY_CONNECTIONS")),
        Ok(_) => panic!("a second io socket over the cap was accepted"),
    }
    let (_theirs, _) = d
        .ws(
            &format!("/v1/sessions/{theirs}/io?app=web"),
            &[("Authorization", "Bearer other-token")],
            &["kubegate.io.v1"],
        )
        .expect("another principal's io socket");
    assert_eq!(
        metric(
            &d,
            "kubegate_principal_connections{principal=\"demo\",kind=\"io\"}"
        ),
        1
    );
}

#[test]
fn half_open_connections_hit_the_per_peer_cap_but_authenticated_requests_pass() {
    let _w = crate::common::bench::watchdog("per_peer_cap", 120);
    let d = DaemonProc::start_with(
        |c| {
            server_keys(
                c,
                "max_connections_per_peer = 4\nhead_grace_secs = 60\nmax_connections_per_principal = 2",
            )
        },
        "info",
    );
    // Four connections that never send a head hold this address's places.
    let half_open: Vec<TcpStream> = (0..4).map(|_| connect(&d)).collect();
    wait_for("four counted connections", Duration::from_secs(10), || {
        (metric(&d, "kubegate_peer_connections_max") == 4).then_some(())
    });
    // A stranger from the same address: 429 from the overflow path.
    let (st, body) = d.request("GET", "/v1/workspaces", None, None);
    assert_eq!((st, code_of(&body).as_str()), (429, "TOO_MANY_CONNECTIONS"));
    // An authenticated request from the same address is served; its
    // connection stops counting against the address.
    let (st, v) = d.json("GET", "/v1/workspaces", None);
    assert_eq!(st, 200, "{v}");
    let mut s = connect(&d);
    s.write_all(
        format!(
            "GET /v1/workspaces HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer {}\r\n\r\n",
            d.token
        )
        .as_bytes(),
    )
    .unwrap();
    let (st, _, _) = read_answer(&mut s);
    assert_eq!(st, 200);
    // Kept alive and authenticated: a second request on it is served too.
    s.write_all(
        format!(
            "GET /v1/workspaces HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer {}\r\n\r\n",
            d.token
        )
        .as_bytes(),
    )
    .unwrap();
    let (st, head, _) = read_answer(&mut s);
    assert_eq!(st, 200);
    assert!(header_of(&head, "connection").is_none(), "{head}");
    // The principal's keep-alive places (2 here): a second kept-alive
    // connection is kept, a third is answered and closed.
    let keep = |s: &mut TcpStream| {
        s.write_all(
            format!(
                "GET /v1/workspaces HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer {}\r\n\r\n",
                d.token
            )
            .as_bytes(),
        )
        .unwrap();
        read_answer(s)
    };
    let mut s2 = connect(&d);
    let (st, head, _) = keep(&mut s2);
    assert_eq!(st, 200);
    assert!(header_of(&head, "connection").is_none(), "{head}");
    let mut s3 = connect(&d);
    let (st, head, _) = keep(&mut s3);
    assert_eq!(st, 200);
    assert_eq!(header_of(&head, "connection"), Some("close"), "{head}");
    assert_eq!(
        metric(
            &d,
            "kubegate_principal_connections{principal=\"demo\",kind=\"keepalive\"}"
        ),
        2
    );
    drop((s2, s3));
    // Health is answered all along.
    let (st, _) = d.request("GET", "/healthz", None, None);
    assert_eq!(st, 200);
    assert_eq!(metric(&d, "kubegate_peer_connections_max"), 4);
    drop(half_open);
    wait_for(
        "the address's places given back",
        Duration::from_secs(10),
        || (metric(&d, "kubegate_peer_connections_max") == 0).then_some(()),
    );
    let (st, body) = d.request("GET", "/v1/workspaces", None, None);
    assert_eq!((st, code_of(&body).as_str()), (401, "UNAUTHORIZED"));
}

#[test]
fn health_is_answered_when_every_slot_is_taken() {
    let _w = crate::common::bench::watchdog("every_slot_taken", 120);
    let d = DaemonProc::start_with(
        |c| server_keys(c, "max_connections = 4\nhead_grace_secs = 60"),
        "info",
    );
    let (st, _) = d.request("GET", "/readyz", None, None);
    assert_eq!(st, 200);
    // Half-open connections hold no slot (the listener reads their heads):
    // a request is served beside them.
    let half_open: Vec<TcpStream> = (0..8).map(|_| connect(&d)).collect();
    let (st, _) = d.request("GET", "/v1/workspaces", Some(&d.token), None);
    assert_eq!(st, 200, "half-open connections took slots");
    // Four admitted requests whose bodies are still coming take the four
    // slots (one that came while a slot was still being given back was
    // answered 503 instead: it is made again).
    let hold = || {
        send_head(
            &d,
            &format!(
                "POST /v1/exec HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer {}\r\nContent-Length: 1000\r\n\r\n",
                d.token
            ),
            b"{",
        )
    };
    let answered = |s: &TcpStream| {
        s.set_nonblocking(true).expect("nonblocking");
        let r = (&*s).read(&mut [0u8; 1]);
        s.set_nonblocking(false).expect("blocking");
        !matches!(r, Err(ref e) if e.kind() == std::io::ErrorKind::WouldBlock)
    };
    let mut held: Vec<TcpStream> = (0..4).map(|_| hold()).collect();
    // Every slot is taken: an authenticated request gets 503, health is
    // still answered.
    wait_for("every slot taken", Duration::from_secs(10), || {
        for h in held.iter_mut() {
            if answered(h) {
                *h = hold();
            }
        }
        let (st, _) = d.request("GET", "/v1/workspaces", Some(&d.token), None);
        (st == 503).then_some(())
    });
    let (st, body) = d.request("GET", "/v1/workspaces", Some(&d.token), None);
    assert_eq!((st, code_of(&body).as_str()), (503, "OVERLOADED"));
    let (st, body) = d.request("GET", "/healthz", None, None);
    assert_eq!(st, 200, "{}", String::from_utf8_lossy(&body));
    let (st, body) = d.request("GET", "/readyz", None, None);
    assert_eq!(st, 200, "{}", String::from_utf8_lossy(&body));
    drop((held, half_open));
    wait_for("a free slot", Duration::from_secs(10), || {
        let (st, _) = d.request("GET", "/v1/workspaces", Some(&d.token), None);
        (st == 200).then_some(())
    });
}
