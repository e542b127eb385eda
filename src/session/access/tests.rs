use super::api_proxy::from_proxy;
use super::api_proxy::ApiProxyAccess;
use super::direct::DirectAccess;
use super::*;
use std::io::BufReader;
use std::net::TcpListener;
use std::sync::mpsc;

/// A one-connection server: reads the request head (and a body of
/// `Content-Length`), hands it over, then writes `parts`, waiting for
/// a go from `gates` before each part after the first.
fn serve(parts: Vec<Vec<u8>>) -> (PodTarget, u16, mpsc::Receiver<String>, mpsc::Sender<()>) {
    let l = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = l.local_addr().unwrap().port();
    let (req_tx, req_rx) = mpsc::channel();
    let (gate_tx, gate_rx) = mpsc::channel::<()>();
    std::thread::spawn(move || {
        let (s, _) = l.accept().unwrap();
        let mut r = BufReader::new(s.try_clone().unwrap());
        let (mut head, body) = crate::session::test_http::read_request(&mut r);
        head.push_str(&String::from_utf8_lossy(&body));
        let _ = req_tx.send(head);
        let mut w = &s;
        for (i, p) in parts.iter().enumerate() {
            if i > 0 && gate_rx.recv().is_err() {
                return;
            }
            if w.write_all(p).is_err() {
                return;
            }
        }
        // Hold the connection until the client is done.
        let _ = gate_rx.recv();
    });
    (target(), port, req_rx, gate_tx)
}

fn target() -> PodTarget {
    PodTarget {
        namespace: "ns".into(),
        name: "p".into(),
        ip: "127.0.0.1".into(),
    }
}

fn get(parts: &[&[u8]]) -> Result<PodResponse, AccessError> {
    let (t, p, _rx, _gate) = serve(parts.iter().map(|p| p.to_vec()).collect());
    DirectAccess::new().request(
        &t,
        p,
        &PodRequest::get("/x").timeout(Duration::from_secs(5)),
    )
}

#[test]
fn direct_request_bodies() {
    let r = get(&[b"HTTP/1.1 200 OK\r\nContent-Length: 5\r\nX-A: b\r\n\r\nhello"]).unwrap();
    assert_eq!(
        (r.status, r.body.as_slice(), r.header("x-a")),
        (200, &b"hello"[..], Some("b"))
    );
    // Chunked, with an interim 100 and a trailer.
    let r = get(
        &[b"HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 404 Not Found\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nabc\r\n2;x=y\r\nde\r\n0\r\nT: 1\r\n\r\n"],
    )
    .unwrap();
    assert_eq!((r.status, r.body.as_slice()), (404, &b"abcde"[..]));
    // Until the connection closes.
    let (t, p, _rx, gate) = serve(vec![b"HTTP/1.0 200 OK\r\n\r\nall of it".to_vec()]);
    let h = std::thread::spawn(move || DirectAccess::new().request(&t, p, &PodRequest::get("/")));
    drop(gate); // the server closes after writing
    assert_eq!(h.join().unwrap().unwrap().body, b"all of it");
    // 204 has no body even with bytes after it.
    let r = get(&[b"HTTP/1.1 204 No Content\r\n\r\n"]).unwrap();
    assert!(r.body.is_empty());
}

#[test]
fn direct_request_is_sent_as_given() {
    let (t, p, rx, _gate) = serve(vec![
        b"HTTP/1.1 201 Created\r\nContent-Length: 0\r\n\r\n".to_vec()
    ]);
    let r = DirectAccess::new()
        .request(
            &t,
            p,
            &PodRequest::post("/w?a=1", b"{}".to_vec(), "application/json")
                .header("Authorization", "Bearer t"),
        )
        .unwrap();
    assert_eq!(r.status, 201);
    let req = rx.recv().unwrap();
    assert!(req.starts_with("POST /w?a=1 HTTP/1.1\r\n"), "{req}");
    for want in [
        "Content-Type: application/json\r\n",
        "Authorization: Bearer t\r\n",
        "Content-Length: 2\r\n",
        "Connection: close\r\n",
    ] {
        assert!(req.contains(want), "{want} in {req}");
    }
    assert!(req.ends_with("\r\n\r\n{}"), "{req}");
}

#[test]
fn direct_request_failures() {
    let big = format!(
        "HTTP/1.1 200 OK\r\nContent-Length: 10\r\n\r\n{}",
        "x".repeat(10)
    );
    let (t, p, _rx, _gate) = serve(vec![big.into_bytes()]);
    let e = DirectAccess::new()
        .request(&t, p, &PodRequest::get("/").max_response_bytes(9))
        .unwrap_err();
    assert!(matches!(e, AccessError::TooLarge { limit: 9 }), "{e:?}");
    for bad in [
        &b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n"[..],
        b"NOT HTTP\r\n\r\n",
        b"HTTP/1.1 200 OK\r\nContent-Length: 1\r\nContent-Length: 2\r\n\r\nab",
    ] {
        let e = get(&[bad]).unwrap_err();
        assert!(matches!(e, AccessError::Http { .. }), "{bad:?}: {e:?}");
    }
    // Cut short inside a Content-Length body.
    let (t, p, _rx, gate) = serve(vec![
        b"HTTP/1.1 200 OK\r\nContent-Length: 10\r\n\r\nab".to_vec()
    ]);
    let h = std::thread::spawn(move || DirectAccess::new().request(&t, p, &PodRequest::get("/")));
    drop(gate);
    assert!(matches!(h.join().unwrap(), Err(AccessError::Http { .. })));
    // A head that never ends is bounded.
    let mut huge = b"HTTP/1.1 200 OK\r\n".to_vec();
    huge.extend(std::iter::repeat_n(b'a', MAX_HEAD_BYTES + 10));
    assert!(matches!(get(&[&huge]), Err(AccessError::Http { .. })));
    // A silent server: the whole call is bounded by the timeout.
    let (t, p, _rx, _gate) = serve(vec![
        b"HTTP/1.1 200 OK\r\nContent-Length: 10\r\n\r\nab".to_vec()
    ]);
    let t0 = Instant::now();
    let e = DirectAccess::new()
        .request(
            &t,
            p,
            &PodRequest::get("/").timeout(Duration::from_millis(300)),
        )
        .unwrap_err();
    assert!(matches!(e, AccessError::Timeout { .. }), "{e:?}");
    assert!(t0.elapsed() < Duration::from_secs(3));
    // Bad calls never reach the network.
    let d = DirectAccess::new();
    for req in [
        PodRequest::get("no-slash"),
        PodRequest::get("/a b"),
        PodRequest::get("/").header("X", "a\r\nInjected: 1"),
        PodRequest::get("/").header("Bad Name", "v"),
    ] {
        assert!(
            matches!(d.request(&target(), 1, &req), Err(AccessError::Invalid(_))),
            "{req:?}"
        );
    }
    let bad_ip = PodTarget {
        ip: "not-an-ip".into(),
        ..target()
    };
    assert!(matches!(
        d.probe_tcp(&bad_ip, 1, Duration::from_secs(1)),
        Err(AccessError::Invalid(_))
    ));
}

#[test]
fn direct_refused_and_probe() {
    let l = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = l.local_addr().unwrap().port();
    let d = DirectAccess::new();
    assert!(d
        .probe_tcp(&target(), port, Duration::from_secs(1))
        .unwrap());
    drop(l);
    assert!(!d
        .probe_tcp(&target(), port, Duration::from_secs(1))
        .unwrap());
    let e = d
        .request(&target(), port, &PodRequest::get("/"))
        .unwrap_err();
    assert!(
        matches!(e, AccessError::Refused { .. }) && e.is_not_reachable(),
        "{e:?}"
    );
}

#[test]
fn direct_stream_reads_as_it_comes_and_cancels() {
    let (t, p, _rx, gate) = serve(vec![
        b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n6\r\nfirst\n\r\n".to_vec(),
        b"7\r\nsecond\n\r\n".to_vec(),
    ]);
    let mut s = DirectAccess::new()
        .stream(
            &t,
            p,
            &PodRequest {
                timeout: Duration::from_secs(10),
                ..PodRequest::get("/events")
            },
        )
        .unwrap();
    assert_eq!(s.status, 200);
    let mut buf = [0u8; 64];
    let n = s.read(&mut buf).unwrap();
    assert_eq!(&buf[..n], b"first\n");
    gate.send(()).unwrap();
    let n = s.read(&mut buf).unwrap();
    assert_eq!(&buf[..n], b"second\n");
    // Blocked in a read; the canceller ends it from another thread.
    let c = s.canceller();
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        let _ = tx.send(s.read(&mut buf).map(|n| n == 0));
    });
    assert!(
        rx.recv_timeout(Duration::from_millis(100)).is_err(),
        "still blocked"
    );
    c.cancel();
    let r = rx
        .recv_timeout(Duration::from_secs(5))
        .expect("the read returned");
    assert!(r.is_err() || r.unwrap(), "ended");
    drop(gate);
}

#[test]
fn direct_stream_error_status_and_idle() {
    let (t, p, _rx, _gate) = serve(vec![
        b"HTTP/1.1 404 Not Found\r\nContent-Length: 7\r\n\r\nno page".to_vec(),
    ]);
    match DirectAccess::new().stream(
        &t,
        p,
        &PodRequest {
            timeout: Duration::from_secs(5),
            ..PodRequest::get("/events")
        },
    ) {
        Err(AccessError::Status { status: 404, body }) => assert_eq!(body, "no page"),
        other => panic!("{other:?}"),
    }
    let (t, p, _rx, _gate) = serve(vec![b"HTTP/1.1 200 OK\r\n\r\n".to_vec()]);
    let mut s = DirectAccess::new()
        .stream(
            &t,
            p,
            &PodRequest {
                timeout: Duration::from_millis(200),
                ..PodRequest::get("/")
            },
        )
        .unwrap();
    let e = s.read(&mut [0u8; 8]).unwrap_err();
    assert_eq!(e.kind(), io::ErrorKind::TimedOut);
}

#[test]
fn api_proxy_refuses_authorization_headers() {
    let client = Client::new(crate::kube::connection::Connection::plain(
        "http://127.0.0.1:9",
    ))
    .unwrap();
    let a = ApiProxyAccess::new(client);
    let req = PodRequest::get("/").header("authorization", "Bearer x");
    assert!(matches!(
        a.request(&target(), 80, &req),
        Err(AccessError::Invalid(_))
    ));
    assert_eq!(a.mode(), PodAccessMode::ApiProxy);
}

#[test]
fn proxy_errors_map() {
    assert!(matches!(
        from_proxy(ProxyError::ConnectionRefused {
            message: "x".into()
        }),
        AccessError::Refused { .. }
    ));
    assert!(matches!(
        from_proxy(ProxyError::Kube(KubeError::Transport(
            "timeout: per read".into()
        ))),
        AccessError::Timeout { .. }
    ));
    assert!(matches!(
        from_proxy(ProxyError::Kube(KubeError::Transport("reset".into()))),
        AccessError::Kube(_)
    ));
}
