use super::probe::{start_probe_with, ProbeHandle, ProbeTimings};
use super::proxy::proxy_http;
use super::*;
use crate::session::access::direct::DirectAccess;
use crate::session::access::AccessError;
use crate::session::machine::Reach;
use crossbeam_channel::unbounded;
use serde_json::json;
use std::io::Read;
use std::io::{BufReader, Write};
use std::net::{TcpListener, TcpStream};
use ureq::http::Method;

/// One connection as the server saw it: when it came, its request head
/// (names lower-cased) and body.
struct Conn {
    at: Instant,
    head: String,
    body: Vec<u8>,
}

/// A scripted HTTP server on 127.0.0.1: every connection's request is
/// reported on `conns`, then `handler(index, socket)` answers.
struct Script {
    port: u16,
    conns: Receiver<Conn>,
    stop: Arc<AtomicBool>,
}

impl Drop for Script {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::SeqCst);
        // Wakes the accept.
        let _ = TcpStream::connect(("127.0.0.1", self.port));
    }
}

fn script(handler: impl Fn(usize, TcpStream) + Send + Sync + 'static) -> Script {
    let l = TcpListener::bind("127.0.0.1:0").expect("bind");
    let port = l.local_addr().expect("addr").port();
    let (tx, conns) = unbounded();
    let stop = Arc::new(AtomicBool::new(false));
    let st = stop.clone();
    let handler = Arc::new(handler);
    std::thread::spawn(move || {
        for (i, s) in l.incoming().enumerate() {
            if st.load(Ordering::SeqCst) {
                return;
            }
            let Ok(s) = s else { continue };
            let (tx, handler) = (tx.clone(), handler.clone());
            std::thread::spawn(move || {
                let at = Instant::now();
                let Ok(r) = s.try_clone() else { return };
                let mut r = BufReader::new(r);
                let (head, body) = crate::session::test_http::read_request(&mut r);
                let head = head.to_ascii_lowercase();
                let _ = tx.send(Conn { at, head, body });
                handler(i, s);
            });
        }
    });
    Script { port, conns, stop }
}

const SSE_HEAD: &[u8] =
    b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nCache-Control: no-cache\r\n\r\n";

/// Reads until the client closes; then says so on `closed`.
fn hold(mut s: TcpStream, closed: &Sender<()>) {
    let mut buf = [0u8; 1024];
    while matches!(s.read(&mut buf), Ok(n) if n > 0) {}
    let _ = closed.send(());
}

fn target() -> PodTarget {
    PodTarget {
        namespace: "default".into(),
        name: "kubegate-watch-test".into(),
        ip: "127.0.0.1".into(),
    }
}

fn access() -> Arc<dyn PodAccess> {
    Arc::new(DirectAccess::new())
}

fn fast_relay() -> RelayTimings {
    RelayTimings {
        first_retry: Duration::from_millis(10),
        max_retry: Duration::from_millis(50),
        idle: Duration::from_secs(10),
    }
}

fn relay(port: u16, timings: RelayTimings) -> (RelayHandle, Receiver<Value>) {
    let (tx, rx) = unbounded();
    let h = start_relay_with(access(), target(), port, timings, move |f| {
        let _ = tx.send(f);
        Ok(())
    });
    (h, rx)
}

const WAIT: Duration = Duration::from_secs(10);

fn next<T>(rx: &Receiver<T>, what: &str) -> T {
    rx.recv_timeout(WAIT)
        .unwrap_or_else(|e| panic!("{what}: {e}"))
}

/// Polls `f` until true or the deadline (never a bare sleep as a wait).
fn until(what: &str, mut f: impl FnMut() -> bool) {
    let deadline = Instant::now() + WAIT;
    let (_tx, tick) = bounded::<()>(1);
    while !f() {
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        let _ = tick.recv_timeout(Duration::from_millis(5));
    }
}

#[test]
fn backoff_doubles_to_the_cap_and_resets_after_delivery() {
    let ms = Duration::from_millis;
    let mut b = Backoff::new(ms(500), ms(5000));
    let waits: Vec<_> = (0..7).map(|_| b.after(false)).collect();
    assert_eq!(
        waits,
        [500, 1000, 2000, 4000, 5000, 5000, 5000].map(ms).to_vec()
    );
    assert_eq!(b.after(true), ms(500));
    assert_eq!(b.after(false), ms(1000));
    assert_eq!(b.after(true), ms(500));
}

/// Serves `n` numbered events at once, then holds the stream open.
fn numbered(n: usize) -> Script {
    script(move |_, mut s| {
        let mut body = SSE_HEAD.to_vec();
        for i in 0..n {
            body.extend_from_slice(
                format!("id: {i}\ndata: {{\"event\":\"n\",\"payload\":{i}}}\n\n").as_bytes(),
            );
        }
        if s.write_all(&body).is_ok() {
            let (tx, _rx) = unbounded();
            hold(s, &tx);
        }
    })
}

#[test]
fn a_refused_frame_is_offered_again_and_nothing_is_dropped_or_reordered() {
    let srv = numbered(200);
    // Room for 4 frames; a slow consumer drains it. Refusals give the
    // frame back, which the relay must offer again, in order.
    let (tx, rx) = bounded::<Value>(4);
    let refused = Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let r = refused.clone();
    let h = start_relay_with(access(), target(), srv.port, fast_relay(), move |f| {
        tx.try_send(f).map_err(|e| {
            r.fetch_add(1, Ordering::SeqCst);
            e.into_inner()
        })
    });
    for i in 0..200 {
        let f = next(&rx, "the next frame");
        assert_eq!(f["payload"], i, "frame {i}");
        if i % 25 == 0 {
            // Slow now and then: the channel fills.
            let (_t, tick) = bounded::<()>(1);
            let _ = tick.recv_timeout(Duration::from_millis(30));
        }
    }
    assert!(
        refused.load(Ordering::SeqCst) > 0,
        "the consumer was slow enough to refuse"
    );
    assert!(h.stop_and_wait(WAIT));
}

#[test]
fn a_silent_stream_is_given_up_after_the_idle_time_and_reopened() {
    let srv = script(|_, mut s| {
        if s.write_all(SSE_HEAD).is_ok() {
            let (tx, _rx) = unbounded();
            hold(s, &tx);
        }
    });
    let timings = RelayTimings {
        idle: Duration::from_millis(300),
        ..fast_relay()
    };
    let (h, _frames) = relay(srv.port, timings);
    let first = next(&srv.conns, "the first request");
    let second = next(&srv.conns, "a new request after the silence");
    let gap = second.at - first.at;
    // The idle time, then the sweep's second at most, then the backoff.
    assert!(
        gap >= Duration::from_millis(300) && gap < Duration::from_secs(5),
        "{gap:?}"
    );
    assert!(h.stop_and_wait(WAIT));
}

#[test]
fn a_relay_whose_consumer_is_full_does_not_hold_up_the_others() {
    let (stuck_srv, free_srv) = (numbered(10), numbered(10));
    // Never any room.
    let stuck = start_relay_with(access(), target(), stuck_srv.port, fast_relay(), Err);
    let (free, rx) = relay(free_srv.port, fast_relay());
    for i in 0..10 {
        assert_eq!(next(&rx, "a frame of the free relay")["payload"], i);
    }
    assert!(
        stuck.stop_and_wait(WAIT),
        "a stopped relay ends while refused"
    );
    assert!(free.stop_and_wait(WAIT));
}

#[test]
fn relay_delivers_events_and_log_lines_skipping_the_rest() {
    let (closed_tx, closed) = unbounded();
    let srv = script(move |_, mut s| {
        let body: &[&[u8]] = &[
            SSE_HEAD,
            b": heartbeat\n\n",
            b"data: {\"event\":\"Kernel.PortsResolved\",\"payload\":{\"ports\":[{\"port\":8080}]}}\n\n",
            b"data: not json\n\n",
            b"event: odd\r\ndata: [1]\r\n\r\n",
            b"data: {\"kind\":\"log\",\"timestamp\":1,",
            b"\"stream\":\"stderr\",\"line\":\"boom\"}\n\n",
            b"data: {\"kind\":\"other\",\"event\":\"x\"}\n\n",
            b"data: {\"kind\":\"log\",\n",
            b"data: \"stream\":\"stdout\",\"line\":\"two data lines\"}\n\n",
            b": heartbeat\n\n",
        ];
        for part in body {
            if s.write_all(part).is_err() {
                return;
            }
        }
        hold(s, &closed_tx);
    });
    let (h, frames) = relay(srv.port, fast_relay());
    let conn = next(&srv.conns, "the relay's request");
    assert!(
        conn.head.starts_with("get /events http/1.1\r\n"),
        "{}",
        conn.head
    );
    assert!(conn.head.contains("accept: text/event-stream\r\n"));
    assert!(!conn.head.contains("last-event-id"));
    assert_eq!(
        next(&frames, "the event"),
        json!({"event": "Kernel.PortsResolved", "payload": {"ports": [{"port": 8080}]}})
    );
    assert_eq!(
        next(&frames, "the log line"),
        json!({"kind": "log", "timestamp": 1, "stream": "stderr", "line": "boom"})
    );
    assert_eq!(
        next(&frames, "the split log line"),
        json!({"kind": "log", "stream": "stdout", "line": "two data lines"})
    );
    assert!(h.stop_and_wait(WAIT));
    next(&closed, "the server saw the relay close");
    assert!(frames.try_recv().is_err(), "nothing else was delivered");
}

#[test]
fn relay_retries_with_growing_capped_waits() {
    // Every connection is closed before an answer: an error each time.
    let srv = script(|_, s| drop(s));
    let ms = Duration::from_millis;
    let timings = RelayTimings {
        first_retry: ms(25),
        max_retry: ms(200),
        idle: Duration::from_secs(10),
    };
    let (h, _frames) = relay(srv.port, timings);
    let at: Vec<Instant> = (0..7).map(|_| next(&srv.conns, "an attempt").at).collect();
    let gaps: Vec<Duration> = at.windows(2).map(|w| w[1] - w[0]).collect();
    let nominal = [25, 50, 100, 200, 200, 200].map(ms);
    for (g, n) in gaps.iter().zip(nominal) {
        // A wait is never shorter than asked (small slack for the
        // server thread's own clock reading).
        assert!(*g + ms(5) >= n, "gaps {gaps:?}");
    }
    // Uncapped, the last gap would be 800 ms.
    assert!(gaps[5] < ms(600), "capped: {gaps:?}");
    assert!(h.stop_and_wait(WAIT));
}

#[test]
fn relay_resumes_with_last_event_id() {
    let (closed_tx, closed) = unbounded();
    let srv = script(move |i, mut s| {
        let _ = s.write_all(SSE_HEAD);
        if i == 0 {
            // Two events, the second without an id of its own; then the
            // stream ends.
            let _ = s.write_all(b"id: 7\ndata: {\"event\":\"a\"}\n\ndata: {\"event\":\"b\"}\n\n");
        } else {
            let _ = s.write_all(b"data: {\"event\":\"c\"}\n\n");
            hold(s, &closed_tx);
        }
    });
    let (h, frames) = relay(srv.port, fast_relay());
    let names: Vec<Value> = (0..3)
        .map(|_| next(&frames, "a frame")["event"].clone())
        .collect();
    assert_eq!(names, vec![json!("a"), json!("b"), json!("c")]);
    let first = next(&srv.conns, "the first request");
    let second = next(&srv.conns, "the reconnect");
    assert!(!first.head.contains("last-event-id"), "{}", first.head);
    assert!(
        second.head.contains("last-event-id: 7\r\n"),
        "{}",
        second.head
    );
    // A stream that delivered is retried after the first wait.
    assert!(second.at - first.at < Duration::from_secs(5));
    drop(h);
    next(&closed, "dropping the handle stopped the relay");
}

#[test]
fn relay_stops_promptly_while_blocked_in_a_read() {
    let (closed_tx, closed) = unbounded();
    let srv = script(move |_, mut s| {
        let _ = s.write_all(SSE_HEAD);
        let _ = s.write_all(b"data: {\"event\":\"only\"}\n\n");
        hold(s, &closed_tx);
    });
    let timings = RelayTimings {
        idle: Duration::from_secs(600),
        ..fast_relay()
    };
    let (h, frames) = relay(srv.port, timings);
    next(&frames, "the frame");
    // The relay now waits on a silent stream (idle time 10 minutes).
    assert!(!h.is_finished());
    let t0 = Instant::now();
    assert!(h.stop_and_wait(WAIT), "the relay ended");
    assert!(t0.elapsed() < Duration::from_secs(2), "{:?}", t0.elapsed());
    next(&closed, "the connection was closed");
    assert_eq!(srv.conns.len(), 1, "no reconnect after the stop");
}

#[test]
fn relay_stops_promptly_in_a_backoff_wait() {
    let srv = script(|_, s| drop(s));
    let timings = RelayTimings {
        first_retry: Duration::from_secs(600),
        max_retry: Duration::from_secs(600),
        idle: Duration::from_secs(10),
    };
    let (h, _frames) = relay(srv.port, timings);
    next(&srv.conns, "the first attempt");
    let t0 = Instant::now();
    assert!(h.stop_and_wait(WAIT));
    assert!(t0.elapsed() < Duration::from_secs(2), "{:?}", t0.elapsed());
}

/// A port nothing listens on (bound, then released).
fn free_port() -> u16 {
    let l = TcpListener::bind("127.0.0.1:0").expect("bind");
    l.local_addr().expect("addr").port()
}

fn probe(port: u16, timings: ProbeTimings) -> (ProbeHandle, Receiver<Reach>) {
    let (tx, rx) = unbounded();
    let h = start_probe_with(access(), target(), port, timings, move |r| {
        let _ = tx.send(r);
    });
    (h, rx)
}

/// Every state until the probe's thread ends (its callback, holding the
/// sender, is dropped then).
fn rest(rx: &Receiver<Reach>) -> Vec<Reach> {
    let mut out = Vec::new();
    loop {
        match rx.recv_timeout(WAIT) {
            Ok(r) => out.push(r),
            Err(RecvTimeoutError::Disconnected) => return out,
            Err(RecvTimeoutError::Timeout) => panic!("the probe did not end: {out:?}"),
        }
    }
}

#[test]
fn probe_checking_then_reachable_when_a_listener_appears() {
    let port = free_port();
    let ms = Duration::from_millis;
    let timings = ProbeTimings {
        interval: ms(20),
        timeout: ms(500),
        unreachable_after: Duration::from_secs(600),
        slow_interval: ms(20),
    };
    let (h, states) = probe(port, timings);
    assert_eq!(next(&states, "checking"), Reach::Checking);
    assert!(!h.is_finished(), "still probing");
    let _l = TcpListener::bind(("127.0.0.1", port)).expect("listen on the probed port");
    assert_eq!(rest(&states), vec![Reach::Reachable]);
    until("the probe's thread ended", || h.is_finished());
}

#[test]
fn probe_unreachable_once_after_the_deadline_then_reachable() {
    let port = free_port();
    let ms = Duration::from_millis;
    let timings = ProbeTimings {
        interval: ms(10),
        timeout: ms(500),
        unreachable_after: ms(150),
        slow_interval: ms(30),
    };
    let t0 = Instant::now();
    let (_h, states) = probe(port, timings);
    assert_eq!(next(&states, "checking"), Reach::Checking);
    assert_eq!(next(&states, "unreachable"), Reach::Unreachable);
    assert!(t0.elapsed() >= ms(150), "{:?}", t0.elapsed());
    let _l = TcpListener::bind(("127.0.0.1", port)).expect("listen on the probed port");
    assert_eq!(
        rest(&states),
        vec![Reach::Reachable],
        "unreachable only once"
    );
}

#[test]
fn probe_stops_when_told() {
    let (h, states) = probe(free_port(), ProbeTimings::default());
    assert_eq!(next(&states, "checking"), Reach::Checking);
    assert!(h.stop_and_wait(WAIT));
    assert_eq!(rest(&states), vec![]);
}

#[test]
fn proxy_drops_hop_by_hop_headers_and_authorization() {
    let srv = script(|_, mut s| {
        let _ = s.write_all(
            b"HTTP/1.1 404 Not Found\r\nContent-Length: 5\r\nConnection: close, X-Hop\r\n\
X-Hop: a\r\nKeep-Alive: timeout=5\r\nX-App: yes\r\n\r\nnope!",
        );
    });
    let h = |k: &str, v: &str| (k.to_string(), v.to_string());
    let headers = vec![
        h("Host", "kubegate.example"),
        h("Authorization", "Bearer kubegate-token"),
        h("Connection", "keep-alive, X-Secret"),
        h("X-Secret", "hop"),
        h("Keep-Alive", "timeout=5"),
        h("Upgrade", "websocket"),
        h("Proxy-Authorization", "Basic x"),
        h("TE", "trailers"),
        h("Content-Type", "text/plain"),
        h("X-Foo", "bar"),
    ];
    let r = proxy_http(
        &DirectAccess::new(),
        &target(),
        srv.port,
        Method::POST,
        "/api/items?x=1&y=%20",
        &headers,
        Some(b"hello".to_vec()),
    )
    .expect("an answer");
    assert_eq!((r.status, r.body.as_slice()), (404, &b"nope!"[..]));
    assert_eq!(r.header("x-app"), Some("yes"));
    for gone in ["connection", "keep-alive", "x-hop", "content-length"] {
        assert_eq!(r.header(gone), None, "{gone}");
    }
    let conn = next(&srv.conns, "the request");
    assert!(
        conn.head
            .starts_with("post /api/items?x=1&y=%20 http/1.1\r\n"),
        "{}",
        conn.head
    );
    assert!(conn.head.contains("x-foo: bar\r\n"));
    assert!(conn.head.contains("content-type: text/plain\r\n"));
    for gone in [
        "authorization",
        "x-secret",
        "keep-alive",
        "upgrade",
        "te:",
        "kubegate.example",
    ] {
        assert!(!conn.head.contains(gone), "{gone} in {}", conn.head);
    }
    assert_eq!(conn.body, b"hello");

    // No answer at all is an error, not a response.
    match proxy_http(
        &DirectAccess::new(),
        &target(),
        free_port(),
        Method::GET,
        "/",
        &[],
        None,
    ) {
        Err(AccessError::Refused { .. }) => {}
        other => panic!("{other:?}"),
    }
}
