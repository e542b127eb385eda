//! The HTTP server and the WebSocket pump on a real loopback listener: raw
//! TCP clients, rustls clients with client certificates, tungstenite
//! clients. Every test binds port 0 and keeps a watchdog that aborts the run
//! instead of hanging it; waits are on channels or conditions with deadlines.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use crossbeam_channel::{bounded, RecvTimeoutError, Sender};
use kubegate::http::ws::{self, WsEnd, WsOptions};
use kubegate::http::{
    tls, Admission, Admit, BodyCharge, ChunkSink, Context, Handler, HttpError, Reply, Request,
    Response, Server, ServerConfig, Upgrade,
};
use tungstenite::client::IntoClientRequest;
use tungstenite::protocol::frame::coding::CloseCode;
use tungstenite::protocol::CloseFrame;
use tungstenite::Message;

// ---------------------------------------------------------------- helpers

/// Aborts the test process if the test is not done (dropped) in time.
struct Watchdog(#[allow(dead_code)] Sender<()>);

fn watchdog(secs: u64) -> Watchdog {
    let (tx, rx) = bounded::<()>(0);
    let name = std::thread::current().name().unwrap_or("?").to_string();
    std::thread::spawn(move || {
        if let Err(RecvTimeoutError::Timeout) = rx.recv_timeout(Duration::from_secs(secs)) {
            eprintln!("watchdog: test {name} hung for {secs}s");
            std::process::abort();
        }
    });
    Watchdog(tx)
}

/// Waits for `cond` with a deadline.
fn wait_for(what: &str, timeout: Duration, mut cond: impl FnMut() -> bool) {
    let deadline = Instant::now() + timeout;
    while !cond() {
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        std::thread::sleep(Duration::from_millis(2));
    }
}

type HandleFn = dyn Fn(Request) -> Reply + Send + Sync;

struct TestHandler(Box<HandleFn>);

impl Handler for TestHandler {
    fn handle(&self, req: Request) -> Reply {
        (self.0)(req)
    }
    fn error_response(&self, err: &HttpError) -> Response {
        Response::json(
            err.status(),
            format!("{{\"handler_error\":{}}}", err.status()).into_bytes(),
        )
    }
}

fn serve(cfg: ServerConfig, f: impl Fn(Request) -> Reply + Send + Sync + 'static) -> Server {
    Server::bind(
        "127.0.0.1:0".parse().unwrap(),
        cfg,
        Arc::new(TestHandler(Box::new(f))),
    )
    .unwrap()
}

/// Echoes method, path, query and body.
fn echo(req: Request) -> Reply {
    let q: Vec<String> = req.query.iter().map(|(k, v)| format!("{k}={v}")).collect();
    let mut body = format!("{} {} {}|", req.method, req.path, q.join("&")).into_bytes();
    body.extend_from_slice(&req.body);
    Response::text(200, std::str::from_utf8(&body).unwrap_or("?")).into()
}

#[derive(Debug)]
struct Resp {
    status: u16,
    headers: Vec<(String, String)>,
    body: Vec<u8>,
}

impl Resp {
    fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(k, _)| k.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
    }
    fn text(&self) -> &str {
        std::str::from_utf8(&self.body).unwrap()
    }
}

/// A raw HTTP/1.1 client over any stream.
struct Client<S: Read + Write> {
    r: BufReader<S>,
}

impl<S: Read + Write> Client<S> {
    fn new(s: S) -> Self {
        Client {
            r: BufReader::new(s),
        }
    }
    fn send(&mut self, raw: &[u8]) {
        self.r.get_mut().write_all(raw).unwrap();
        self.r.get_mut().flush().unwrap();
    }
    fn line(&mut self) -> String {
        let mut l = String::new();
        self.r.read_line(&mut l).unwrap();
        l
    }
    /// Reads a status line and headers (skipping 1xx responses when asked).
    fn head(&mut self) -> Resp {
        let status_line = self.line();
        assert!(
            status_line.starts_with("HTTP/1.1 "),
            "bad status line {status_line:?}"
        );
        let status: u16 = status_line[9..12].parse().unwrap();
        let mut headers = Vec::new();
        loop {
            let l = self.line();
            let l = l.trim_end();
            if l.is_empty() {
                break;
            }
            let (k, v) = l.split_once(':').unwrap();
            headers.push((k.trim().to_string(), v.trim().to_string()));
        }
        Resp {
            status,
            headers,
            body: Vec::new(),
        }
    }
    /// One chunk of a chunked body; None at the last chunk.
    fn chunk(&mut self) -> Option<Vec<u8>> {
        let size = usize::from_str_radix(self.line().trim(), 16).unwrap();
        if size == 0 {
            assert_eq!(self.line(), "\r\n");
            return None;
        }
        let mut data = vec![0; size + 2];
        self.r.read_exact(&mut data).unwrap();
        data.truncate(size);
        Some(data)
    }
    fn response(&mut self) -> Resp {
        let mut resp = self.head();
        if let Some(n) = resp.header("content-length") {
            let mut body = vec![0; n.parse().unwrap()];
            self.r.read_exact(&mut body).unwrap();
            resp.body = body;
        } else if resp.header("transfer-encoding") == Some("chunked") {
            while let Some(c) = self.chunk() {
                resp.body.extend(c);
            }
        }
        resp
    }
    /// True when the server closed the connection (EOF or reset).
    fn closed(&mut self) -> bool {
        let mut b = [0u8; 1];
        !matches!(self.r.read(&mut b), Ok(n) if n > 0)
    }
}

fn connect(addr: SocketAddr) -> Client<TcpStream> {
    let s = TcpStream::connect(addr).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    Client::new(s)
}

// ---------------------------------------------------------------- HTTP

#[test]
fn keep_alive_serves_several_requests_on_one_connection() {
    let _w = watchdog(30);
    let server = serve(ServerConfig::default(), echo);
    let mut c = connect(server.local_addr());
    for i in 0..5 {
        c.send(format!("GET /a%20b/{i}?x=1+2&y=%26 HTTP/1.1\r\nHost: t\r\n\r\n").as_bytes());
        let r = c.response();
        assert_eq!(r.status, 200);
        assert_eq!(r.text(), format!("GET /a b/{i} x=1 2&y=&|"));
        assert!(r.header("date").unwrap().ends_with(" GMT"));
        assert_eq!(r.header("connection"), None);
    }
    // Pipelined: two requests (one with a body) in one write.
    c.send(b"POST /p HTTP/1.1\r\nContent-Length: 5\r\n\r\nhelloGET /q HTTP/1.1\r\n\r\n");
    assert_eq!(c.response().text(), "POST /p |hello");
    assert_eq!(c.response().text(), "GET /q |");
    // A chunked request body, then Connection: close.
    c.send(b"PUT /c HTTP/1.1\r\nTransfer-Encoding: chunked\r\nConnection: close\r\n\r\n3\r\nabc\r\n2;x=y\r\nde\r\n0\r\n\r\n");
    let r = c.response();
    assert_eq!(r.text(), "PUT /c |abcde");
    assert_eq!(r.header("connection"), Some("close"));
    assert!(c.closed());
    assert_eq!(server.connections(), server.connections()); // accessor works
}

#[test]
fn http10_head_and_expect_continue() {
    let _w = watchdog(30);
    let server = serve(ServerConfig::default(), echo);
    // HTTP/1.0 without keep-alive: answered, then closed.
    let mut c = connect(server.local_addr());
    c.send(b"GET /old HTTP/1.0\r\n\r\n");
    let r = c.response();
    assert_eq!(r.text(), "GET /old |");
    assert_eq!(r.header("connection"), Some("close"));
    assert!(c.closed());
    // HTTP/1.0 with keep-alive stays open.
    let mut c = connect(server.local_addr());
    c.send(b"GET /1 HTTP/1.0\r\nConnection: keep-alive\r\n\r\n");
    assert_eq!(c.response().header("connection"), Some("keep-alive"));
    c.send(b"HEAD /2 HTTP/1.0\r\nConnection: keep-alive\r\n\r\n");
    let r = c.head();
    assert_eq!(r.header("content-length"), Some("9")); // "HEAD /2 |": no body sent
    c.send(b"GET /3 HTTP/1.0\r\nConnection: keep-alive\r\n\r\n");
    assert_eq!(c.response().text(), "GET /3 |");
    // Expect: 100-continue gets the interim response before the body.
    let mut c = connect(server.local_addr());
    c.send(b"POST /e HTTP/1.1\r\nContent-Length: 4\r\nExpect: 100-continue\r\n\r\n");
    assert_eq!(c.head().status, 100);
    c.send(b"body");
    assert_eq!(c.response().text(), "POST /e |body");
}

#[test]
fn errors_use_the_handlers_body_and_the_server_keeps_serving() {
    let _w = watchdog(30);
    let cfg = ServerConfig {
        max_header_bytes: 1024,
        max_body_bytes: 100,
        ..Default::default()
    };
    let server = serve(cfg, echo);
    let addr = server.local_addr();

    // 431: a head over the limit.
    let mut c = connect(addr);
    let big = format!("GET / HTTP/1.1\r\nX-Big: {}\r\n\r\n", "a".repeat(2000));
    c.send(big.as_bytes());
    let r = c.response();
    assert_eq!(r.status, 431);
    assert_eq!(r.text(), "{\"handler_error\":431}");
    assert_eq!(r.header("connection"), Some("close"));
    assert!(c.closed());

    // 413: Content-Length over the limit, answered before the body is sent.
    let mut c = connect(addr);
    c.send(b"POST / HTTP/1.1\r\nContent-Length: 1000000\r\n\r\n");
    let r = c.response();
    assert_eq!(r.status, 413);
    assert_eq!(r.text(), "{\"handler_error\":413}");
    assert!(c.closed());

    // 413: a chunked body growing over the limit.
    let mut c = connect(addr);
    c.send(b"POST / HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n50\r\n");
    c.send(&[b'x'; 80]);
    c.send(b"\r\n50\r\n");
    let r = c.response();
    assert_eq!(r.status, 413);
    assert!(c.closed());

    // 400: garbage, a bad chunk size, conflicting framing.
    for raw in [
        &b"NOT HTTP AT ALL\r\n\r\n"[..],
        b"POST / HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n",
        b"POST / HTTP/1.1\r\nContent-Length: 1\r\nTransfer-Encoding: chunked\r\n\r\n",
        b"GET /%zz HTTP/1.1\r\n\r\n",
    ] {
        let mut c = connect(addr);
        c.send(raw);
        let r = c.response();
        assert_eq!(r.status, 400, "{:?}", String::from_utf8_lossy(raw));
        assert_eq!(r.text(), "{\"handler_error\":400}");
        assert!(c.closed());
    }

    // Still serving.
    let mut c = connect(addr);
    c.send(b"GET /ok HTTP/1.1\r\n\r\n");
    assert_eq!(c.response().status, 200);
}

#[test]
fn panicking_handler_gets_500_and_the_server_survives() {
    let _w = watchdog(30);
    let server = serve(ServerConfig::default(), |req| {
        if req.path == "/boom" {
            panic!("handler bug (expected by the test)");
        }
        echo(req)
    });
    let mut c = connect(server.local_addr());
    c.send(b"GET /boom HTTP/1.1\r\n\r\n");
    let r = c.response();
    assert_eq!(r.status, 500);
    assert_eq!(r.text(), "{\"handler_error\":500}");
    assert!(c.closed());
    let mut c = connect(server.local_addr());
    c.send(b"GET /fine HTTP/1.1\r\n\r\n");
    assert_eq!(c.response().status, 200);
}

#[test]
fn chunked_stream_arrives_chunk_by_chunk() {
    let _w = watchdog(30);
    // The test releases each chunk only after the client saw the previous one.
    let (gate_tx, gate_rx) = bounded::<Vec<u8>>(0);
    let gate_rx = Arc::new(parking_lot::Mutex::new(Some(gate_rx)));
    let server = serve(ServerConfig::default(), move |req| {
        if req.path != "/watch" {
            return echo(req);
        }
        let rx = gate_rx.lock().take().unwrap();
        Response::stream(
            200,
            "application/json",
            Box::new(move |sink: &mut dyn ChunkSink| {
                for data in rx {
                    sink.send(&data)?;
                }
                Ok(())
            }),
        )
        .into()
    });
    let mut c = connect(server.local_addr());
    c.send(b"GET /watch HTTP/1.1\r\n\r\n");
    let head = c.head();
    assert_eq!(head.status, 200);
    assert_eq!(head.header("transfer-encoding"), Some("chunked"));
    assert_eq!(head.header("content-length"), None);
    for i in 0..3 {
        let ev = format!("{{\"event\":{i}}}\n").into_bytes();
        gate_tx.send(ev.clone()).unwrap();
        assert_eq!(c.chunk().unwrap(), ev);
    }
    gate_tx.send(Vec::new()).unwrap(); // ignored: would end the stream
    drop(gate_tx);
    assert_eq!(c.chunk(), None);
    // Keep-alive holds after a finished stream.
    c.send(b"GET /again HTTP/1.1\r\n\r\n");
    assert_eq!(c.head().status, 200);
}

#[test]
fn peer_closed_turns_true_when_the_client_goes_away() {
    let _w = watchdog(30);
    let (done_tx, done_rx) = bounded::<bool>(1);
    let server = serve(ServerConfig::default(), move |_req| {
        let done = done_tx.clone();
        Response::stream(
            200,
            "text/plain",
            Box::new(move |sink: &mut dyn ChunkSink| {
                sink.send(b"first")?;
                let deadline = Instant::now() + Duration::from_secs(10);
                // An idle watch: check between (absent) events.
                while !sink.peer_closed() && Instant::now() < deadline {
                    std::thread::sleep(Duration::from_millis(5));
                }
                let _ = done.send(sink.peer_closed());
                Ok(())
            }),
        )
        .into()
    });
    let mut c = connect(server.local_addr());
    c.send(b"GET /watch HTTP/1.1\r\n\r\n");
    c.head();
    assert_eq!(c.chunk().unwrap(), b"first");
    drop(c);
    assert!(done_rx.recv_timeout(Duration::from_secs(10)).unwrap());
    wait_for("connection slot freed", Duration::from_secs(10), || {
        server.connections() == 0
    });
}

#[test]
fn connection_limit_answers_503() {
    let _w = watchdog(30);
    let cfg = ServerConfig {
        max_connections: 2,
        ..Default::default()
    };
    let server = serve(cfg, echo);
    let addr = server.local_addr();
    let mut held = Vec::new();
    for _ in 0..2 {
        let mut c = connect(addr);
        c.send(b"GET / HTTP/1.1\r\n\r\n");
        assert_eq!(c.response().status, 200);
        held.push(c);
    }
    assert_eq!(server.connections(), 2);
    let mut c = connect(addr);
    c.send(b"GET / HTTP/1.1\r\n\r\n");
    let r = c.response();
    assert_eq!(r.status, 503);
    assert_eq!(r.text(), "{\"handler_error\":503}");
    assert_eq!(r.header("connection"), Some("close"));
    assert!(c.closed());
    // A freed slot is usable again.
    drop(held.pop());
    wait_for("a free slot", Duration::from_secs(10), || {
        server.connections() == 1
    });
    let mut c = connect(addr);
    c.send(b"GET / HTTP/1.1\r\n\r\n");
    assert_eq!(c.response().status, 200);
}

type AdmitFn = dyn Fn(&Request) -> Admission + Send + Sync;

/// A handler with an admission.
struct Admitting {
    admit: Box<AdmitFn>,
    handle: Box<HandleFn>,
}

impl Handler for Admitting {
    fn admit(&self, head: &Request) -> Admission {
        (self.admit)(head)
    }
    fn handle(&self, req: Request) -> Reply {
        (self.handle)(req)
    }
    fn overflow(&self, head: &Request, _err: &HttpError) -> Option<Response> {
        (head.path == "/healthz").then(|| Response::text(200, "ok"))
    }
    fn error_response(&self, err: &HttpError) -> Response {
        Response::json(
            err.status(),
            format!("{{\"handler_error\":{}}}", err.status()).into_bytes(),
        )
    }
}

fn serve_admitting(
    cfg: ServerConfig,
    admit: impl Fn(&Request) -> Admission + Send + Sync + 'static,
    f: impl Fn(Request) -> Reply + Send + Sync + 'static,
) -> Server {
    Server::bind(
        "127.0.0.1:0".parse().unwrap(),
        cfg,
        Arc::new(Admitting {
            admit: Box::new(admit),
            handle: Box::new(f),
        }),
    )
    .unwrap()
}

/// Admits requests carrying `x-who`, with it as the context; refuses the
/// rest with 401.
fn who_admission(head: &Request) -> Admission {
    match head.header("x-who") {
        Some(w) => Admission::Admit(Admit {
            max_body_bytes: Some(1 << 20),
            context: Context(Some(Arc::new(w.to_string()))),
            known: true,
            ..Admit::default()
        }),
        None => Admission::Refuse(Response::text(401, "who are you")),
    }
}

#[test]
fn a_refused_head_is_answered_without_its_body_or_100_continue() {
    let _w = watchdog(30);
    let handled = Arc::new(AtomicUsize::new(0));
    let h = handled.clone();
    let server = serve_admitting(ServerConfig::default(), who_admission, move |req| {
        h.fetch_add(1, Ordering::SeqCst);
        echo(req)
    });
    // 90 MiB announced, with Expect: the first answer is the refusal.
    let mut c = connect(server.local_addr());
    c.send(b"POST /up HTTP/1.1\r\nExpect: 100-continue\r\nContent-Length: 94371840\r\n\r\n");
    let r = c.response();
    assert_eq!(r.status, 401, "no 100 Continue before the refusal");
    assert_eq!(r.text(), "who are you");
    assert_eq!(r.header("connection"), Some("close"));
    // Without Expect and with some of the body sent: the same, and what
    // was sent is never kept.
    let mut c = connect(server.local_addr());
    c.send(b"POST /up HTTP/1.1\r\nContent-Length: 94371840\r\n\r\n");
    c.send(&[b'x'; 64 * 1024]);
    assert_eq!(c.response().status, 401);
    assert!(c.closed());
    assert_eq!(server.body_bytes_buffered(), 0);
    assert_eq!(server.refused_at_head(), 2);
    // A refused first request closes its connection (the listener
    // answered it); later on a kept-alive connection, a refused request
    // without a body leaves it open.
    let mut c = connect(server.local_addr());
    c.send(b"GET /a HTTP/1.1\r\n\r\n");
    assert_eq!(c.response().status, 401);
    assert!(c.closed());
    let mut c = connect(server.local_addr());
    c.send(b"GET /a HTTP/1.1\r\nx-who: alice\r\n\r\n");
    assert_eq!(c.response().status, 200);
    c.send(b"GET /a HTTP/1.1\r\n\r\n");
    assert_eq!(c.response().status, 401);
    c.send(b"GET /a HTTP/1.1\r\nx-who: alice\r\n\r\n");
    assert_eq!(c.response().status, 200);
    assert_eq!(handled.load(Ordering::SeqCst), 2);
    // An admitted head with Expect still gets its 100 Continue.
    let mut c = connect(server.local_addr());
    c.send(
        b"POST /p HTTP/1.1\r\nx-who: alice\r\nExpect: 100-continue\r\nContent-Length: 5\r\n\r\n",
    );
    assert_eq!(c.head().status, 100);
    c.send(b"hello");
    assert_eq!(c.response().text(), "POST /p |hello");
}

#[test]
fn the_admission_context_and_body_limit_reach_the_handler() {
    let _w = watchdog(30);
    let server = serve_admitting(
        ServerConfig::default(),
        |head| {
            let mut a = match who_admission(head) {
                Admission::Admit(a) => a,
                r => return r,
            };
            a.max_body_bytes = Some(5);
            Admission::Admit(a)
        },
        |req| {
            let who = req
                .admitted
                .get::<String>()
                .expect("the admission's context");
            Response::text(
                200,
                &format!("{who}:{}", String::from_utf8_lossy(&req.body)),
            )
            .into()
        },
    );
    let mut c = connect(server.local_addr());
    c.send(b"POST /p HTTP/1.1\r\nx-who: alice\r\nContent-Length: 5\r\n\r\nhello");
    assert_eq!(c.response().text(), "alice:hello");
    c.send(b"POST /p HTTP/1.1\r\nx-who: alice\r\nContent-Length: 6\r\n\r\n");
    let r = c.response();
    assert_eq!(r.status, 413, "the admission's limit, not the server's");
}

/// Refuses to hold more than its limit.
struct Limited(usize, AtomicUsize);

impl BodyCharge for Limited {
    fn grow(&self, total: usize) -> bool {
        self.1.fetch_max(total, Ordering::SeqCst);
        total <= self.0
    }
}

#[test]
fn a_body_charge_refuses_a_chunked_body_as_it_grows() {
    let _w = watchdog(30);
    let charge = Arc::new(Limited(10, AtomicUsize::new(0)));
    let ch = charge.clone();
    let server = serve_admitting(
        ServerConfig::default(),
        move |_| {
            Admission::Admit(Admit {
                charge: Some(ch.clone() as Arc<dyn BodyCharge>),
                ..Admit::default()
            })
        },
        echo,
    );
    let mut c = connect(server.local_addr());
    c.send(b"POST /p HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n8\r\naaaaaaaa\r\n");
    c.send(b"8\r\nbbbbbbbb\r\n8\r\ncccccccc\r\n0\r\n\r\n");
    let r = c.response();
    assert_eq!(r.status, 503);
    assert_eq!(r.header("retry-after"), Some("1"));
    // Charged as the decoded body grows (one read at a time), refused at
    // its first growth past 10.
    let seen = charge.1.load(Ordering::SeqCst);
    assert!(seen > 10 && seen <= 24, "{seen}");
    // A Content-Length body is charged whole before it is read.
    let mut c = connect(server.local_addr());
    c.send(b"POST /p HTTP/1.1\r\nContent-Length: 11\r\n\r\n");
    assert_eq!(c.response().status, 503);
    let mut c = connect(server.local_addr());
    c.send(b"POST /p HTTP/1.1\r\nContent-Length: 10\r\n\r\n0123456789");
    assert_eq!(c.response().text(), "POST /p |0123456789");
}

#[test]
fn half_open_connections_hold_no_slot_and_slow_heads_are_closed() {
    let _w = watchdog(30);
    let cfg = ServerConfig {
        max_connections: 2,
        head_grace: Duration::from_millis(300),
        min_head_bytes_per_sec: 1,
        ..Default::default()
    };
    let server = serve(cfg, echo);
    let addr = server.local_addr();
    // Many connections that send nothing, or half a head.
    let mut idle: Vec<Client<TcpStream>> = (0..20).map(|_| connect(addr)).collect();
    idle[0].send(b"GET /slow HTTP/1.1\r\n");
    for _ in 0..3 {
        let mut c = connect(addr);
        c.send(b"GET /a HTTP/1.1\r\nConnection: close\r\n\r\n");
        assert_eq!(c.response().text(), "GET /a |");
        assert!(c.closed());
        // None of the idle ones holds a slot: every slot comes back.
        wait_for("every slot free", Duration::from_secs(10), || {
            server.connections() == 0
        });
    }
    // Past their deadline they are closed (half a head earns 19 bytes / 1
    // byte/s here: the one that sent it is closed later, within 30 s).
    for c in idle.iter_mut().skip(1) {
        assert!(c.closed(), "a silent connection is closed after head_grace");
    }
}

#[test]
fn over_the_per_peer_limit_only_known_heads_and_health_are_served() {
    let _w = watchdog(30);
    let cfg = ServerConfig {
        max_connections_per_peer: 2,
        ..Default::default()
    };
    let server = serve_admitting(cfg, who_admission, echo);
    let addr = server.local_addr();
    let held: Vec<Client<TcpStream>> = (0..2).map(|_| connect(addr)).collect();
    wait_for("two counted", Duration::from_secs(10), || {
        server.max_connections_of_a_peer() == 2
    });
    let mut c = connect(addr);
    c.send(b"GET /a HTTP/1.1\r\n\r\n");
    let r = c.response();
    assert_eq!(r.status, 429);
    assert_eq!(r.header("retry-after"), Some("1"));
    let mut c = connect(addr);
    c.send(b"GET /healthz HTTP/1.1\r\n\r\n");
    assert_eq!(c.response().text(), "ok");
    // A known caller is served, and keeps its connection.
    let mut c = connect(addr);
    c.send(b"GET /a HTTP/1.1\r\nx-who: alice\r\n\r\n");
    assert_eq!(c.response().status, 200);
    c.send(b"GET /b HTTP/1.1\r\nx-who: alice\r\n\r\n");
    assert_eq!(c.response().text(), "GET /b |");
    assert_eq!(server.max_connections_of_a_peer(), 2);
    drop(held);
    wait_for("places given back", Duration::from_secs(10), || {
        server.max_connections_of_a_peer() == 0
    });
    let mut c = connect(addr);
    c.send(b"GET /a HTTP/1.1\r\n\r\n");
    assert_eq!(
        c.response().status,
        401,
        "within the limit: the admission's answer"
    );
}

#[test]
fn shutdown_stops_the_listener_and_closes_idle_connections() {
    let _w = watchdog(30);
    let server = serve(ServerConfig::default(), echo);
    let addr = server.local_addr();
    let mut idle = connect(addr);
    idle.send(b"GET / HTTP/1.1\r\n\r\n");
    assert_eq!(idle.response().status, 200);
    let t = Instant::now();
    server.shutdown();
    assert!(t.elapsed() < Duration::from_secs(5));
    assert!(
        idle.closed(),
        "idle keep-alive connection closed by shutdown"
    );
    assert!(
        TcpStream::connect(addr).is_err(),
        "listener still accepting"
    );
    wait_for("no connections", Duration::from_secs(10), || {
        server.connections() == 0
    });
}

// ---------------------------------------------------------------- TLS

struct Pki {
    ca_pem: String,
    server_chain_pem: String,
    server_key_pem: String,
    client_cert_der: Vec<u8>,
    client_cert_pem: String,
    client_key_pem: String,
}

fn pki() -> Pki {
    use rcgen::{BasicConstraints, CertificateParams, IsCa, Issuer, KeyPair};
    let ca_key = KeyPair::generate().unwrap();
    let mut ca_params = CertificateParams::new(Vec::<String>::new()).unwrap();
    ca_params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    let ca_cert = ca_params.self_signed(&ca_key).unwrap();
    let issuer = Issuer::new(ca_params, ca_key);
    let srv_key = KeyPair::generate().unwrap();
    let srv = CertificateParams::new(vec!["localhost".to_string()])
        .unwrap()
        .signed_by(&srv_key, &issuer)
        .unwrap();
    let cli_key = KeyPair::generate().unwrap();
    let cli = CertificateParams::new(vec!["client.test".to_string()])
        .unwrap()
        .signed_by(&cli_key, &issuer)
        .unwrap();
    Pki {
        ca_pem: ca_cert.pem(),
        server_chain_pem: srv.pem(),
        server_key_pem: srv_key.serialize_pem(),
        client_cert_der: cli.der().to_vec(),
        client_cert_pem: cli.pem(),
        client_key_pem: cli_key.serialize_pem(),
    }
}

fn tls_client(pki: &Pki, with_cert: bool) -> Arc<rustls::ClientConfig> {
    use rustls_pki_types::pem::PemObject;
    use rustls_pki_types::{CertificateDer, PrivateKeyDer};
    let mut roots = rustls::RootCertStore::empty();
    roots
        .add(CertificateDer::from_pem_slice(pki.ca_pem.as_bytes()).unwrap())
        .unwrap();
    let b = rustls::ClientConfig::builder_with_provider(Arc::new(
        rustls::crypto::ring::default_provider(),
    ))
    .with_safe_default_protocol_versions()
    .unwrap()
    .with_root_certificates(roots);
    let cfg = if with_cert {
        b.with_client_auth_cert(
            vec![CertificateDer::from_pem_slice(pki.client_cert_pem.as_bytes()).unwrap()],
            PrivateKeyDer::from_pem_slice(pki.client_key_pem.as_bytes()).unwrap(),
        )
        .unwrap()
    } else {
        b.with_no_client_auth()
    };
    Arc::new(cfg)
}

type TlsClientStream = rustls::StreamOwned<rustls::ClientConnection, TcpStream>;

fn tls_connect(addr: SocketAddr, cfg: Arc<rustls::ClientConfig>) -> TlsClientStream {
    let tcp = TcpStream::connect(addr).unwrap();
    tcp.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    let conn = rustls::ClientConnection::new(cfg, "localhost".try_into().unwrap()).unwrap();
    rustls::StreamOwned::new(conn, tcp)
}

#[test]
fn tls_round_trip_with_and_without_client_certificate() {
    let _w = watchdog(60);
    let pki = pki();
    let tls_cfg = tls::server_config_from_pem(
        pki.server_chain_pem.as_bytes(),
        pki.server_key_pem.as_bytes(),
        Some(pki.ca_pem.as_bytes()),
    )
    .unwrap();
    let cfg = ServerConfig {
        tls: Some(tls_cfg),
        ..Default::default()
    };
    let server = serve(cfg, |req| {
        let who = match &req.client_cert_der {
            Some(der) => format!("cert:{}", der.len()),
            None => "anonymous".to_string(),
        };
        Response::text(200, &format!("tls={} {who} {}", req.tls, req.body.len())).into()
    });
    let addr = server.local_addr();

    let mut c = Client::new(tls_connect(addr, tls_client(&pki, true)));
    for _ in 0..3 {
        c.send(b"POST /x HTTP/1.1\r\nContent-Length: 3\r\n\r\nabc");
        let r = c.response();
        assert_eq!(r.status, 200);
        assert_eq!(
            r.text(),
            format!("tls=true cert:{} 3", pki.client_cert_der.len())
        );
    }
    // Connection: close ends with close_notify: a clean EOF, not a truncation error.
    c.send(b"GET /bye HTTP/1.1\r\nConnection: close\r\n\r\n");
    assert_eq!(c.response().status, 200);
    let mut rest = Vec::new();
    c.r.read_to_end(&mut rest)
        .expect("clean TLS close (close_notify)");
    assert!(rest.is_empty());

    let mut c = Client::new(tls_connect(addr, tls_client(&pki, false)));
    c.send(b"GET / HTTP/1.1\r\n\r\n");
    assert_eq!(c.response().text(), "tls=true anonymous 0");

    // A plaintext client gets nowhere, and the server survives it.
    let mut raw = connect(addr);
    raw.send(b"GET / HTTP/1.1\r\n\r\n");
    let mut answer = Vec::new();
    let _ = raw.r.read_to_end(&mut answer); // a TLS alert at most, then EOF
    assert!(!answer.starts_with(b"HTTP/"));
    let mut c = Client::new(tls_connect(addr, tls_client(&pki, false)));
    c.send(b"GET / HTTP/1.1\r\n\r\n");
    assert_eq!(c.response().status, 200);
}

#[test]
fn tls_handshakes_that_never_finish_hold_no_slot() {
    let _w = watchdog(60);
    let pki = pki();
    let tls_cfg = tls::server_config_from_pem(
        pki.server_chain_pem.as_bytes(),
        pki.server_key_pem.as_bytes(),
        None,
    )
    .unwrap();
    let cfg = ServerConfig {
        tls: Some(tls_cfg),
        max_connections: 1,
        head_grace: Duration::from_millis(500),
        ..Default::default()
    };
    let server = serve(cfg, echo);
    let addr = server.local_addr();
    // Connections that never start their handshake, and one that sends
    // half a ClientHello.
    let mut silent: Vec<TcpStream> = (0..10).map(|_| TcpStream::connect(addr).unwrap()).collect();
    silent[0]
        .write_all(&[0x16, 0x03, 0x01, 0x02, 0x00, 0x01])
        .unwrap();
    // The one slot is still there for a real client.
    let mut c = Client::new(tls_connect(addr, tls_client(&pki, false)));
    c.send(b"GET /t HTTP/1.1\r\n\r\n");
    assert_eq!(c.response().text(), "GET /t |");
    assert_eq!(server.connections(), 1);
    // The handshake is inside the head's deadline: past it they are closed.
    for s in silent.iter_mut() {
        s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
        let mut b = [0u8; 1];
        assert!(
            !matches!(s.read(&mut b), Ok(n) if n > 0),
            "closed without a handshake"
        );
    }
}

#[test]
fn tls_config_rejects_bad_pem() {
    assert!(tls::server_config_from_pem(b"nope", b"nope", None).is_err());
    let pki = pki();
    assert!(tls::server_config_from_pem(
        pki.server_chain_pem.as_bytes(),
        pki.client_key_pem.as_bytes(), // wrong key
        None
    )
    .is_err());
}

// ---------------------------------------------------------------- WebSocket

/// A WebSocket echo endpoint driven by the pump: inbound capacity
/// `in_cap`, every message sent straight back through the outbox (a
/// blocking send: the consumer waits on outbound, the deadlock case).
/// Each pump's end is reported on `ends`.
fn ws_echo_server(
    in_cap: usize,
    ends: Sender<WsEnd>,
    tls: Option<Arc<rustls::ServerConfig>>,
) -> Server {
    let cfg = ServerConfig {
        tls,
        ..Default::default()
    };
    serve(cfg, move |req| {
        if !req.is_websocket_upgrade() {
            return Response::text(400, "Upgrade request required").into();
        }
        let protocol = req
            .websocket_protocols()
            .into_iter()
            .find(|p| p == "v5.channel.k8s.io" || p == "v4.channel.k8s.io");
        let close_with = req.query("close_with").and_then(|c| c.parse::<u16>().ok());
        let ends = ends.clone();
        Reply::Upgrade(Upgrade {
            protocol,
            headers: vec![("X-Test".into(), "1".into())],
            max_message_bytes: 1 << 20,
            on_open: Box::new(move |conn| {
                let (out, out_rx) = ws::outbox(16);
                let (in_tx, in_rx) = bounded::<Message>(in_cap);
                let echo = std::thread::spawn(move || {
                    if let Some(code) = close_with {
                        out.send(Message::Close(Some(CloseFrame {
                            code: CloseCode::from(code),
                            reason: "server done".into(),
                        })))
                        .unwrap();
                    }
                    for m in in_rx {
                        if m.is_close() {
                            break;
                        }
                        if out.send(m).is_err() {
                            break;
                        }
                    }
                });
                let opts = WsOptions {
                    ping_interval: None,
                    ..Default::default()
                };
                let end = ws::run(conn, out_rx, in_tx, opts);
                let _ = echo.join();
                let _ = ends.send(end);
            }),
        })
    })
}

fn ws_connect(
    addr: SocketAddr,
    path: &str,
    protocols: &[&str],
) -> (
    tungstenite::WebSocket<TcpStream>,
    tungstenite::handshake::client::Response,
) {
    let mut req = format!("ws://{addr}{path}").into_client_request().unwrap();
    if !protocols.is_empty() {
        req.headers_mut().insert(
            "Sec-WebSocket-Protocol",
            protocols.join(", ").parse().unwrap(),
        );
    }
    let tcp = TcpStream::connect(addr).unwrap();
    tcp.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    tcp.set_nodelay(true).unwrap();
    tungstenite::client::client(req, tcp).unwrap()
}

#[test]
fn websocket_echo_text_and_binary_with_subprotocol() {
    let _w = watchdog(30);
    let (ends_tx, ends_rx) = bounded(4);
    let server = ws_echo_server(4, ends_tx, None);
    let (mut c, resp) = ws_connect(
        server.local_addr(),
        "/exec",
        &["v5.channel.k8s.io", "v4.channel.k8s.io"],
    );
    assert_eq!(resp.status(), 101);
    assert_eq!(
        resp.headers().get("sec-websocket-protocol").unwrap(),
        "v5.channel.k8s.io"
    );
    assert_eq!(resp.headers().get("x-test").unwrap(), "1");
    c.send(Message::binary(vec![0u8, 1, 2, 255])).unwrap();
    assert_eq!(c.read().unwrap(), Message::binary(vec![0u8, 1, 2, 255]));
    c.send(Message::text("hello ✓")).unwrap();
    assert_eq!(c.read().unwrap(), Message::text("hello ✓"));
    // Pings are answered while the server side is idle.
    c.send(Message::Ping(b"are you there".to_vec().into()))
        .unwrap();
    assert_eq!(
        c.read().unwrap(),
        Message::Pong(b"are you there".to_vec().into())
    );
    // Client closes with 1000: the pump reports the peer's frame.
    c.close(Some(CloseFrame {
        code: CloseCode::Normal,
        reason: "bye".into(),
    }))
    .unwrap();
    loop {
        match c.read() {
            Ok(Message::Close(f)) => {
                assert_eq!(f.unwrap().code, CloseCode::Normal);
            }
            Ok(m) => panic!("unexpected {m:?}"),
            Err(tungstenite::Error::ConnectionClosed) => break,
            Err(e) => panic!("{e}"),
        }
    }
    match ends_rx.recv_timeout(Duration::from_secs(10)).unwrap() {
        WsEnd::PeerClosed(Some(f)) => {
            assert_eq!(f.code, CloseCode::Normal);
            assert_eq!(f.reason.as_str(), "bye");
        }
        other => panic!("{other:?}"),
    }
}

#[test]
fn websocket_without_matching_protocol_and_non_upgrade_requests() {
    let _w = watchdog(30);
    let (ends_tx, _ends_rx) = bounded(4);
    let server = ws_echo_server(4, ends_tx, None);
    // No offered protocol matches: no Sec-WebSocket-Protocol in the 101.
    let (mut c, resp) = ws_connect(server.local_addr(), "/exec", &[]);
    assert!(resp.headers().get("sec-websocket-protocol").is_none());
    c.send(Message::text("x")).unwrap();
    assert_eq!(c.read().unwrap(), Message::text("x"));
    // A plain GET is the handler's business (400 here).
    let mut h = connect(server.local_addr());
    h.send(b"GET /exec HTTP/1.1\r\n\r\n");
    assert_eq!(h.response().status, 400);
}

#[test]
fn websocket_server_initiated_close_code() {
    let _w = watchdog(30);
    let (ends_tx, ends_rx) = bounded(4);
    let server = ws_echo_server(4, ends_tx, None);
    let (mut c, _) = ws_connect(server.local_addr(), "/exec?close_with=4001", &[]);
    match c.read().unwrap() {
        Message::Close(Some(f)) => {
            assert_eq!(u16::from(f.code), 4001);
            assert_eq!(f.reason.as_str(), "server done");
        }
        other => panic!("{other:?}"),
    }
    // tungstenite queued our reply; flushing it completes the handshake.
    let _ = c.flush();
    assert_eq!(
        ends_rx.recv_timeout(Duration::from_secs(10)).unwrap(),
        WsEnd::Closed
    );
}

/// Both ends driven by pumps: the client floods 2,000 x 8 KiB messages, the
/// server's inbound holds ONE message and its consumer echoes each through a
/// blocking outbox send. Nothing is lost, nothing reorders, nothing deadlocks.
#[test]
fn websocket_backpressure_loses_nothing_and_does_not_deadlock() {
    let _w = watchdog(60);
    let (ends_tx, ends_rx) = bounded(4);
    let server = ws_echo_server(1, ends_tx, None);
    let (c, _) = ws_connect(server.local_addr(), "/exec", &[]);
    c.get_ref().set_read_timeout(None).unwrap();
    let (out, out_rx) = ws::outbox(8);
    let (in_tx, in_rx) = bounded::<Message>(2);
    let pump = std::thread::spawn(move || ws::run_stream(c, out_rx, in_tx, WsOptions::default()));
    const N: u32 = 2000;
    let sender = std::thread::spawn(move || {
        for i in 0..N {
            let mut payload = vec![(i % 251) as u8; 8192];
            payload[..4].copy_from_slice(&i.to_be_bytes());
            out.send(Message::binary(payload)).unwrap();
        }
        out // keep the socket open until everything came back
    });
    let mut got = 0u32;
    while got < N {
        let m = in_rx
            .recv_timeout(Duration::from_secs(20))
            .expect("echo stalled");
        let Message::Binary(b) = m else {
            panic!("unexpected {m:?}")
        };
        assert_eq!(b.len(), 8192);
        let seq = u32::from_be_bytes(b[..4].try_into().unwrap());
        assert_eq!(seq, got, "lost or reordered");
        assert!(b[4..].iter().all(|x| *x == (seq % 251) as u8));
        got += 1;
    }
    let out = sender.join().unwrap();
    out.send(Message::Close(None)).unwrap();
    drop(out);
    assert_eq!(pump.join().unwrap(), WsEnd::Closed);
    match ends_rx.recv_timeout(Duration::from_secs(10)).unwrap() {
        WsEnd::PeerClosed(_) => {}
        other => panic!("{other:?}"),
    }
}

/// A slow consumer on the server while the server also produces: outbound
/// keeps flowing while inbound is held.
#[test]
fn websocket_outbound_flows_while_inbound_is_held() {
    let _w = watchdog(60);
    let release = Arc::new(AtomicBool::new(false));
    let consumed = Arc::new(AtomicUsize::new(0));
    let (ends_tx, ends_rx) = bounded(2);
    let (r2, c2) = (release.clone(), consumed.clone());
    let server = serve(ServerConfig::default(), move |_req| {
        let (release, consumed, ends) = (r2.clone(), c2.clone(), ends_tx.clone());
        Reply::Upgrade(Upgrade {
            protocol: None,
            headers: Vec::new(),
            max_message_bytes: 1 << 20,
            on_open: Box::new(move |conn| {
                let (out, out_rx) = ws::outbox(4);
                let (in_tx, in_rx) = bounded::<Message>(1);
                // Consumer: takes nothing until released.
                let consumer = std::thread::spawn(move || {
                    while !release.load(Ordering::Acquire) {
                        std::thread::sleep(Duration::from_millis(1));
                    }
                    for m in in_rx {
                        if m.is_close() {
                            break;
                        }
                        consumed.fetch_add(1, Ordering::AcqRel);
                    }
                });
                // Producer: 500 messages while the consumer is stuck.
                let producer = std::thread::spawn(move || {
                    for i in 0..500u32 {
                        out.send(Message::binary(i.to_be_bytes().to_vec())).unwrap();
                    }
                    out
                });
                let opts = WsOptions {
                    ping_interval: None,
                    ..Default::default()
                };
                let end = ws::run(conn, out_rx, in_tx, opts);
                let _ = producer.join();
                let _ = consumer.join();
                let _ = ends.send(end);
            }),
        })
    });
    let (c, _) = ws_connect(server.local_addr(), "/", &[]);
    c.get_ref().set_read_timeout(None).unwrap();
    let (out, out_rx) = ws::outbox(64);
    let (in_tx, in_rx) = bounded::<Message>(1024);
    let pump = std::thread::spawn(move || ws::run_stream(c, out_rx, in_tx, WsOptions::default()));
    // Flood the server: far more than socket buffers hold, from a thread.
    const N: usize = 1000;
    let flood = std::thread::spawn(move || {
        for _ in 0..N {
            out.send(Message::binary(vec![7u8; 16 * 1024])).unwrap();
        }
        out
    });
    // All 500 server messages arrive although the server consumer is stuck.
    for i in 0..500u32 {
        let m = in_rx
            .recv_timeout(Duration::from_secs(20))
            .expect("outbound stalled");
        assert_eq!(m, Message::binary(i.to_be_bytes().to_vec()));
    }
    assert_eq!(consumed.load(Ordering::Acquire), 0);
    release.store(true, Ordering::Release);
    let out = flood.join().unwrap();
    wait_for(
        "all flood messages consumed",
        Duration::from_secs(30),
        || consumed.load(Ordering::Acquire) == N,
    );
    out.send(Message::Close(None)).unwrap();
    drop(out);
    assert_eq!(pump.join().unwrap(), WsEnd::Closed);
    assert!(matches!(
        ends_rx.recv_timeout(Duration::from_secs(10)).unwrap(),
        WsEnd::PeerClosed(_)
    ));
}

#[test]
fn websocket_over_tls_with_a_pump_on_both_ends() {
    let _w = watchdog(60);
    let pki = pki();
    let tls_cfg = tls::server_config_from_pem(
        pki.server_chain_pem.as_bytes(),
        pki.server_key_pem.as_bytes(),
        None,
    )
    .unwrap();
    let (ends_tx, ends_rx) = bounded(4);
    let server = ws_echo_server(1, ends_tx, Some(tls_cfg));
    let addr = server.local_addr();
    // Client side: our TlsStream over a rustls ClientConnection.
    let tcp = TcpStream::connect(addr).unwrap();
    tcp.set_nodelay(true).unwrap();
    let conn =
        rustls::ClientConnection::new(tls_client(&pki, false), "localhost".try_into().unwrap())
            .unwrap();
    let mut stream = kubegate::http::TlsStream::new(conn, tcp);
    stream
        .handshake(Instant::now() + Duration::from_secs(10))
        .unwrap();
    let req = format!("wss://localhost:{}/exec", addr.port())
        .into_client_request()
        .unwrap();
    let (c, resp) = tungstenite::client::client(req, stream).unwrap();
    assert_eq!(resp.status(), 101);
    let (out, out_rx) = ws::outbox(8);
    let (in_tx, in_rx) = bounded::<Message>(4);
    let pump = std::thread::spawn(move || ws::run_stream(c, out_rx, in_tx, WsOptions::default()));
    let sender = std::thread::spawn(move || {
        for i in 0..500u32 {
            let mut p = vec![1u8; 20_000];
            p[..4].copy_from_slice(&i.to_be_bytes());
            out.send(Message::binary(p)).unwrap();
        }
        out
    });
    for i in 0..500u32 {
        let Message::Binary(b) = in_rx.recv_timeout(Duration::from_secs(20)).unwrap() else {
            panic!("not binary")
        };
        assert_eq!(u32::from_be_bytes(b[..4].try_into().unwrap()), i);
        assert_eq!(b.len(), 20_000);
    }
    let out = sender.join().unwrap();
    drop(out); // all senders gone: a normal close
    assert_eq!(pump.join().unwrap(), WsEnd::Closed);
    match ends_rx.recv_timeout(Duration::from_secs(10)).unwrap() {
        WsEnd::PeerClosed(Some(f)) => assert_eq!(f.code, CloseCode::Normal),
        other => panic!("{other:?}"),
    }
}

#[test]
fn websocket_message_over_the_limit_is_refused_with_1009() {
    let _w = watchdog(30);
    let (ends_tx, ends_rx) = bounded(4);
    let server = ws_echo_server(4, ends_tx, None);
    let (mut c, _) = ws_connect(server.local_addr(), "/exec", &[]);
    // The server may refuse (and close) before the whole frame is written.
    let _ = c.send(Message::binary(vec![0u8; (1 << 20) + 1]));
    match c.read() {
        Ok(Message::Close(Some(f))) => assert_eq!(f.code, CloseCode::Size),
        Ok(other) => panic!("{other:?}"),
        Err(_) => {} // the close frame can be lost to a reset
    }
    match ends_rx.recv_timeout(Duration::from_secs(10)).unwrap() {
        WsEnd::Error(e) => assert!(e.contains("too long"), "{e}"),
        other => panic!("{other:?}"),
    }
}

/// Echo latency added by the pump, against a blocking single-thread echo.
/// Not a pass/fail figure: run with
/// `cargo test --release --test http_server -- --ignored ws_echo_latency --nocapture`.
#[test]
#[ignore]
fn ws_echo_latency() {
    fn measure(c: &mut tungstenite::WebSocket<TcpStream>) -> (Duration, Duration) {
        let mut v = Vec::new();
        for i in 0..2000u32 {
            let t = Instant::now();
            c.send(Message::binary(vec![(i % 256) as u8])).unwrap();
            let _ = c.read().unwrap();
            v.push(t.elapsed());
        }
        v.sort();
        (v[v.len() / 2], v[v.len() * 99 / 100])
    }
    let (ends_tx, _ends_rx) = bounded(4);
    let pumped = ws_echo_server(16, ends_tx, None);
    let (mut c, _) = ws_connect(pumped.local_addr(), "/", &[]);
    let _ = measure(&mut c);
    let (p50, p99) = measure(&mut c);
    let direct = serve(ServerConfig::default(), |_req| {
        Reply::Upgrade(Upgrade {
            protocol: None,
            headers: Vec::new(),
            max_message_bytes: 1 << 20,
            on_open: Box::new(|mut conn| {
                let ws = conn.websocket_mut();
                while let Ok(m) = ws.read() {
                    if m.is_binary() && ws.send(m).is_err() {
                        break;
                    }
                }
            }),
        })
    });
    let (mut d, _) = ws_connect(direct.local_addr(), "/", &[]);
    let _ = measure(&mut d);
    let (d50, d99) = measure(&mut d);
    println!("pump echo:     p50 {p50:?} p99 {p99:?}");
    println!("blocking echo: p50 {d50:?} p99 {d99:?}");
    println!(
        "added by pump: p50 {:?} p99 {:?}",
        p50.saturating_sub(d50),
        p99.saturating_sub(d99)
    );
}

// ---------------------------------------------------------- raw upgrades

/// A raw upgrade to a made-up `echo/1` protocol: bytes come back as sent
/// (a line `bye` makes the server send `bye` and close).
fn raw_echo(req: Request) -> Reply {
    use kubegate::http::raw::{self, RawUpgrade};
    if req.header("upgrade") != Some("echo/1") {
        return Response::text(400, "upgrade to echo/1").into();
    }
    Reply::RawUpgrade(RawUpgrade {
        headers: vec![
            ("Connection".into(), "Upgrade".into()),
            ("Upgrade".into(), "echo/1".into()),
            ("X-Bad".into(), "a\r\nX-Injected: 1".into()),
        ],
        on_open: Box::new(|conn| {
            let (out, out_rx) = ws::outbox(4);
            let (in_tx, in_rx) = bounded::<Message>(4);
            let echo = std::thread::spawn(move || {
                for m in in_rx {
                    let bye = matches!(&m, Message::Binary(b) if b.ends_with(b"bye\n"));
                    if out.send(m).is_err() {
                        break;
                    }
                    if bye {
                        let _ = out.send(Message::Close(None));
                        break;
                    }
                }
            });
            let (end, inbound) = raw::run(conn, out_rx, in_tx, None);
            drop(inbound);
            let _ = echo.join();
            let _ = end;
        }),
    })
}

#[test]
fn raw_upgrade_carries_bytes_both_ways_early_bytes_included() {
    let _w = watchdog(30);
    let server = serve(ServerConfig::default(), raw_echo);
    let mut s = TcpStream::connect(server.local_addr()).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    // The head and the first protocol bytes in one write.
    s.write_all(
        b"POST /x HTTP/1.1\r\nConnection: Upgrade\r\nUpgrade: echo/1\r\nContent-Length: 0\r\n\r\nearly ",
    )
    .unwrap();
    let mut r = BufReader::new(s.try_clone().unwrap());
    let mut head = String::new();
    loop {
        let mut line = String::new();
        r.read_line(&mut line).unwrap();
        head.push_str(&line);
        if line == "\r\n" {
            break;
        }
    }
    assert!(
        head.starts_with("HTTP/1.1 101 Switching Protocols\r\n"),
        "{head}"
    );
    assert!(head.contains("\r\nUpgrade: echo/1\r\n"), "{head}");
    assert!(head.contains("\r\nConnection: Upgrade\r\n"), "{head}");
    assert!(head.contains("\r\nDate: "), "{head}");
    assert!(!head.contains("X-Injected"), "{head}");
    let mut got = [0u8; 6];
    r.read_exact(&mut got).unwrap();
    assert_eq!(&got, b"early ");
    // A megabyte each way, then the server's close after `bye`.
    let data: Vec<u8> = (0..1 << 20).map(|i: u32| (i % 251) as u8).collect();
    let mut w = s.try_clone().unwrap();
    let sent = data.clone();
    let writer = std::thread::spawn(move || {
        w.write_all(&sent).unwrap();
        w.write_all(b"bye\n").unwrap();
    });
    let mut back = Vec::new();
    r.read_to_end(&mut back).unwrap();
    writer.join().unwrap();
    assert_eq!(back.len(), data.len() + 4);
    assert!(back[..data.len()] == data[..]);
    assert_eq!(&back[data.len()..], b"bye\n");
}

/// Set by [`raw_stuck`]'s consumer once its inbound is full.
static STUCK_INBOUND_FULL: AtomicBool = AtomicBool::new(false);

/// A raw upgrade whose consumer never takes anything (a far side that
/// does not read): the pump ends up holding a chunk, reading nothing more.
fn raw_stuck(_req: Request) -> Reply {
    use kubegate::http::raw::{self, RawUpgrade};
    Reply::RawUpgrade(RawUpgrade {
        headers: vec![("Upgrade".into(), "stuck/1".into())],
        on_open: Box::new(|conn| {
            let (_out, out_rx) = ws::outbox(4);
            let (in_tx, in_rx) = bounded::<Message>(1);
            let (release, released) = bounded::<()>(0);
            let stuck = std::thread::spawn(move || {
                // Says when the pump's first message is waiting, so the
                // test knows the next read will be held.
                while released.recv_timeout(Duration::from_millis(5))
                    == Err(crossbeam_channel::RecvTimeoutError::Timeout)
                {
                    if in_rx.is_full() {
                        STUCK_INBOUND_FULL.store(true, Ordering::SeqCst);
                    }
                }
                drop(in_rx);
            });
            let _ = raw::run(conn, out_rx, in_tx, None);
            drop(release);
            let _ = stuck.join();
        }),
    })
}

/// Opens a `stuck/1` raw upgrade, sends a little (the consumer takes
/// none: it fills its inbound), waits for the inbound to be full, then
/// sends `chunks` chunks of 64 KiB (the first read of them is held; with
/// `reset`, until the buffers are full if that comes first), then closes:
/// with a FIN, or a reset (SO_LINGER 0) as a crashed client's kernel sends
/// once it gives up. With a FIN, `chunks` must leave little enough unread
/// that the FIN is not queued behind a closed receive window.
fn stuck_then_gone(chunks: usize, reset: bool) {
    STUCK_INBOUND_FULL.store(false, Ordering::SeqCst);
    let server = serve(ServerConfig::default(), raw_stuck);
    let mut s = TcpStream::connect(server.local_addr()).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    s.write_all(b"GET /x HTTP/1.1\r\nConnection: Upgrade\r\nUpgrade: stuck/1\r\n\r\n")
        .unwrap();
    let mut buf = [0u8; 512];
    let n = s.read(&mut buf).unwrap();
    assert!(buf[..n].starts_with(b"HTTP/1.1 101 "));
    s.set_write_timeout(Some(Duration::from_secs(2))).unwrap();
    s.write_all(b"first").unwrap();
    wait_for(
        "the consumer's inbound to fill",
        Duration::from_secs(10),
        || STUCK_INBOUND_FULL.load(Ordering::SeqCst),
    );
    let chunk = vec![7u8; 64 * 1024];
    for _ in 0..chunks {
        match s.write_all(&chunk) {
            Ok(()) => {}
            // Sending until the buffers are full: how much fits depends
            // on the kernel's autotuning, so a write that times out is
            // the point reached, not a failure.
            Err(e)
                if reset
                    && matches!(
                        e.kind(),
                        std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
                    ) =>
            {
                break
            }
            Err(e) => panic!("sending chunk: {e}"),
        }
    }
    assert_eq!(server.connections(), 1);
    if reset {
        rustix::net::sockopt::set_socket_linger(&s, Some(Duration::ZERO)).unwrap();
    }
    drop(s);
    wait_for(
        "the held connection to end",
        Duration::from_secs(30),
        || server.connections() == 0,
    );
}

#[test]
fn a_raw_upgrade_holding_for_a_stuck_consumer_still_sees_the_client_go() {
    let _w = watchdog(90);
    // One message waiting, one chunk held, little left unread: the FIN
    // is seen although nothing more is read; the held chunk gets its
    // 5 s, then the end.
    stuck_then_gone(1, false);
    // More than fits: the FIN waits behind refused bytes, but the reset
    // ends it at once.
    stuck_then_gone(64, true);
}

#[test]
fn raw_upgrade_ends_when_the_client_closes() {
    let _w = watchdog(30);
    let server = serve(ServerConfig::default(), raw_echo);
    let mut s = TcpStream::connect(server.local_addr()).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    s.write_all(b"GET /x HTTP/1.1\r\nConnection: Upgrade\r\nUpgrade: echo/1\r\n\r\n")
        .unwrap();
    let mut buf = [0u8; 512];
    let n = s.read(&mut buf).unwrap();
    assert!(buf[..n].starts_with(b"HTTP/1.1 101 "));
    assert_eq!(server.connections(), 1);
    drop(s);
    wait_for(
        "the upgraded connection to end",
        Duration::from_secs(10),
        || server.connections() == 0,
    );
}
