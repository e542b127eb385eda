//! Item 6: request heads whose lines end in a bare LF.

use crate::common::bench::watchdog;
use crate::common::daemon::{raw_exchange, DaemonProc};
use crate::common::SimProc;

/// Heads whose lines end in a bare LF somewhere: httparse takes them, a
/// proxy reading by RFC 9112 may not split them the same way.
const BARE_LF_HEADS: &[&str] = &[
    "GET /healthz HTTP/1.1\nHost: x\r\n\r\n",
    "GET /healthz HTTP/1.1\r\nHost: x\n\r\n",
    "GET /healthz HTTP/1.1\r\nHost: x\r\n\n",
    "GET /healthz HTTP/1.1\r\nX-A: 1\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n",
];

fn body_code(body: &[u8]) -> String {
    serde_json::from_slice::<serde_json::Value>(body)
        .ok()
        .and_then(|v| v["error"]["code"].as_str().map(str::to_string))
        .unwrap_or_default()
}

#[test]
fn the_daemon_refuses_a_head_with_a_bare_lf() {
    let _wd = watchdog("hostile: bare LF at the daemon", 120);
    let d = DaemonProc::start();
    for head in BARE_LF_HEADS {
        let (st, body) = raw_exchange(&d.addr, head.as_bytes());
        assert_eq!(st, 400, "{head:?}: {}", String::from_utf8_lossy(&body));
        assert_eq!(body_code(&body), "BAD_REQUEST", "{head:?}");
        assert!(
            String::from_utf8_lossy(&body).contains("bare LF"),
            "{head:?}: {}",
            String::from_utf8_lossy(&body)
        );
    }
    // The same request with CRLF line ends is served.
    let (st, _) = raw_exchange(
        &d.addr,
        b"GET /healthz HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n",
    );
    assert_eq!(st, 200);
}

#[test]
fn the_sim_accepts_a_bare_lf_as_the_api_server_does() {
    let _wd = watchdog("hostile: bare LF at the sim", 120);
    let sim = SimProc::start(&[]);
    let addr = sim
        .url
        .strip_prefix("http://")
        .unwrap_or_else(|| panic!("the sim serves plain HTTP by default: {}", sim.url))
        .to_string();
    let (st, body) = raw_exchange(
        &addr,
        b"GET /healthz HTTP/1.1\nHost: x\nConnection: close\n\n",
    );
    assert_eq!(st, 200, "{}", String::from_utf8_lossy(&body));
}
