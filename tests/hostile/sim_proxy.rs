//! The sim's pod proxy (`pods/{name}:{port}/proxy/{path}`) against a
//! standalone `kubegate sim` (issue 13, item 5), over raw sockets: the
//! path is decoded, cleaned and percent-encoded again as upstream's API
//! server does (`JoinPreservingTrailingSlash`, then Go's path escaping),
//! so `%0D%0A` cannot inject a header or a second request (control
//! characters are refused with a 400 Status) and dot-segments are
//! resolved before anything reaches the pod. The app records every byte
//! it receives.

use crate::common::{wait_for, SimProc};
use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::Duration;

/// A raw HTTP server on `$POD_IP:8080` that keeps every byte each
/// connection sent (what follows the head too, read for a moment: a
/// smuggled second request would be there), answers with the request
/// line it got, and `GET /__seen` with everything recorded so far.
const RECORDER_PY: &str = r#"
import os, socket, threading
ip = os.environ["POD_IP"]
seen = []
lock = threading.Lock()
def serve(c):
    data = b""
    c.settimeout(5)
    try:
        while b"\r\n\r\n" not in data:
            chunk = c.recv(65536)
            if not chunk:
                break
            data += chunk
        c.settimeout(0.3)
        while True:
            chunk = c.recv(65536)
            if not chunk:
                break
            data += chunk
    except OSError:
        pass
    line = data.split(b"\r\n", 1)[0]
    with lock:
        if line.startswith(b"GET /__seen "):
            body = b"".join(seen)
        else:
            seen.append(data + b"\n=====\n")
            body = line
    c.sendall(b"HTTP/1.1 200 OK\r\nContent-Length: %d\r\nConnection: close\r\n\r\n" % len(body) + body)
    c.close()
s = socket.socket()
s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
s.bind((ip, 8080))
s.listen(64)
while True:
    c, _ = s.accept()
    threading.Thread(target=serve, args=(c,), daemon=True).start()
"#;

/// The bearer token in the sim's kubeconfig, when it wrote one.
fn kubeconfig_token(sim: &SimProc) -> Option<String> {
    let text = std::fs::read_to_string(&sim.kubeconfig).ok()?;
    text.lines()
        .filter_map(|l| l.trim().strip_prefix("token:"))
        .map(|t| t.trim().trim_matches('"').to_string())
        .find(|t| !t.is_empty())
}

/// One raw request to the sim; status and body (the sim closes).
fn get(sim: &SimProc, target: &str) -> (u16, String) {
    let addr = sim.url.trim_start_matches("http://");
    let mut s = TcpStream::connect(addr).expect("connect");
    s.set_read_timeout(Some(Duration::from_secs(30)))
        .expect("timeout");
    let auth = kubeconfig_token(sim)
        .map(|t| format!("Authorization: Bearer {t}\r\n"))
        .unwrap_or_default();
    write!(
        s,
        "GET {target} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n{auth}\r\n"
    )
    .expect("write");
    let mut resp = Vec::new();
    let _ = s.read_to_end(&mut resp);
    let text = String::from_utf8_lossy(&resp).to_string();
    let status = text
        .split(' ')
        .nth(1)
        .and_then(|c| c.parse().ok())
        .unwrap_or_else(|| panic!("no status in {text:?}"));
    let body = text
        .split_once("\r\n\r\n")
        .map(|(_, b)| b.to_string())
        .unwrap_or_default();
    (status, body)
}

const PROXY: &str = "/api/v1/namespaces/default/pods/rec:8080/proxy";

fn start() -> SimProc {
    let sim = SimProc::start(&[]);
    sim.apply(&serde_json::json!({
        "apiVersion": "v1", "kind": "Pod", "metadata": {"name": "rec"},
        "spec": {"containers": [{"name": "rec", "image": "python",
            "command": ["python3", "-c", RECORDER_PY],
            "env": [{"name": "POD_IP", "valueFrom": {"fieldRef": {"fieldPath": "status.podIP"}}}]}]}
    }));
    wait_for(
        "the recorder to answer through the proxy",
        Duration::from_secs(30),
        || (get(&sim, &format!("{PROXY}/ready")).0 == 200).then_some(()),
    );
    sim
}

#[test]
fn control_characters_in_a_proxied_path_cannot_split_the_request() {
    let sim = start();
    for tail in [
        "/x%0D%0AX-Injected:%20yes%0D%0A%0D%0AGET%20/smuggled%20HTTP/1.1%0D%0AX-Smuggled:%201",
        "/x%0AX-Injected:%20yes",
        "/x%0DX-Injected:%20yes",
        "/x%00y",
        "/x%7Fy",
        "/x%09y",
    ] {
        let (st, body) = get(&sim, &format!("{PROXY}{tail}?after=1"));
        assert_eq!(st, 400, "{tail}: {body}");
        let status: serde_json::Value = serde_json::from_str(&body).expect("a Status");
        assert_eq!(
            (status["kind"].as_str(), status["reason"].as_str()),
            (Some("Status"), Some("BadRequest")),
            "{body}"
        );
    }
    let (st, seen) = get(&sim, &format!("{PROXY}/__seen"));
    assert_eq!(st, 200);
    for bad in ["X-Injected", "smuggled", "X-Smuggled", "after=1"] {
        assert!(!seen.contains(bad), "{bad} reached the pod:\n{seen}");
    }
    // The query is passed on with its escapes as they were: an encoded
    // line break stays encoded.
    let (st, line) = get(&sim, &format!("{PROXY}/q?k=%0D%0A&v=a+b"));
    assert_eq!((st, line.as_str()), (200, "GET /q?k=%0D%0A&v=a+b HTTP/1.1"));
}

#[test]
fn dot_segments_are_cleaned_as_upstream_cleans_them() {
    let sim = start();
    // (tail after `/proxy`, the request line the pod gets)
    let cases = [
        ("/a/b/../../../../c/./d/", "GET /c/d/ HTTP/1.1"),
        ("/x/%2e%2e/%2E%2E/y", "GET /y HTTP/1.1"),
        ("/a%2F..%2F..%2Fz", "GET /z HTTP/1.1"),
        ("/a//b/./", "GET /a/b/ HTTP/1.1"),
        ("/..", "GET / HTTP/1.1"),
        ("", "GET / HTTP/1.1"),
        ("/", "GET / HTTP/1.1"),
        ("?q=1", "GET /?q=1 HTTP/1.1"),
        (
            "/sp%20ace/%7euser/a%2bb/caf%c3%a9/q%3Fm/x%23y",
            "GET /sp%20ace/~user/a+b/caf%C3%A9/q%3Fm/x%23y HTTP/1.1",
        ),
        ("/a'b(c)*!", "GET /a%27b%28c%29%2A%21 HTTP/1.1"),
    ];
    for (tail, want) in cases {
        let (st, line) = get(&sim, &format!("{PROXY}{tail}"));
        assert_eq!((st, line.as_str()), (200, want), "{tail}");
    }
}
