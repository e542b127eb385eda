//! The kubelet API against an in-process sim, driven as kube-apiserver
//! drives a kubelet: TLS with a client certificate of the kubelet's client
//! CA, SPDY/3.1 exec and attach (streams named by `streamtype`, the error
//! stream's Status), logs, plain SPDY port-forward, the WebSocket v5 exec;
//! and the hostile cases first: no certificate, another CA's, odd paths.
//!
//! The pods' processes run under the runtime's shim, which is this test
//! binary itself: a constructor in `.init_array` routes `__shim` to
//! `shim_main` before libtest's `main` (as `tests/sim_runtime.rs` does).
//! Every test has a watchdog that aborts the run when it hangs, and waits
//! on conditions with deadlines.

use super::{KubeletApi, KubeletApiConfig};
use crate::kube::spdy::{Decoder, Encoder, Frame, Headers, Limits};
use crate::sim::cluster::{Sim, SimOptions};
use crate::sim::resources::Resource;
use rcgen::{
    BasicConstraints, CertificateParams, CertifiedIssuer, DistinguishedName, DnType,
    ExtendedKeyUsagePurpose, IsCa, KeyPair, KeyUsagePurpose,
};
use rustls_pki_types::pem::PemObject;
use rustls_pki_types::{CertificateDer, PrivateKeyDer, ServerName};
use serde_json::{json, Value};
use std::collections::HashMap;
use std::io::{Read, Write};
use std::net::TcpStream;
use std::sync::Arc;
use std::time::{Duration, Instant};

// ---------------------------------------------------------------------------
// This binary doubles as the runtime's shim.

#[used]
#[link_section = ".init_array"]
static PRE_MAIN: extern "C" fn(
    libc::c_int,
    *const *const libc::c_char,
    *const *const libc::c_char,
) = pre_main;

extern "C" fn pre_main(
    argc: libc::c_int,
    argv: *const *const libc::c_char,
    _envp: *const *const libc::c_char,
) {
    if argc < 2 || argv.is_null() {
        return;
    }
    // SAFETY: glibc passes the process's argc/argv to .init_array
    // functions; each of the argc entries is a NUL-terminated string.
    let args: Vec<String> = (0..argc as usize)
        .map(|i| {
            unsafe { std::ffi::CStr::from_ptr(*argv.add(i)) }
                .to_string_lossy()
                .into_owned()
        })
        .collect();
    if args[1] == crate::sim::runtime::SHIM_SUBCOMMAND {
        std::process::exit(crate::sim::runtime::shim_main(&args[2..]));
    }
}

// ---------------------------------------------------------------------------
// Watchdog, waits.

/// Aborts the whole run when a test outlives `limit` (a hang fails).
struct Watchdog(Option<crossbeam_channel::Sender<()>>);

fn watchdog(name: &'static str, limit: Duration) -> Watchdog {
    let (tx, rx) = crossbeam_channel::bounded::<()>(1);
    std::thread::spawn(move || {
        if let Err(crossbeam_channel::RecvTimeoutError::Timeout) = rx.recv_timeout(limit) {
            eprintln!("watchdog: {name} still running after {limit:?}");
            std::process::abort();
        }
    });
    Watchdog(Some(tx))
}

impl Drop for Watchdog {
    fn drop(&mut self) {
        if let Some(tx) = self.0.take() {
            let _ = tx.send(());
        }
    }
}

fn wait_for<T>(what: &str, limit: Duration, mut f: impl FnMut() -> Option<T>) -> T {
    let end = Instant::now() + limit;
    loop {
        if let Some(v) = f() {
            return v;
        }
        assert!(Instant::now() < end, "timed out waiting for {what}");
        std::thread::sleep(Duration::from_millis(20));
    }
}

// ---------------------------------------------------------------------------
// Certificates.

struct Ca {
    issuer: CertifiedIssuer<'static, KeyPair>,
    pem: String,
}

fn ca(cn: &str) -> Ca {
    let mut p = CertificateParams::new(Vec::<String>::new()).expect("params");
    p.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    p.key_usages = vec![
        KeyUsagePurpose::KeyCertSign,
        KeyUsagePurpose::DigitalSignature,
    ];
    let mut dn = DistinguishedName::new();
    dn.push(DnType::CommonName, cn);
    p.distinguished_name = dn;
    let issuer = CertifiedIssuer::self_signed(p, KeyPair::generate().expect("key")).expect("ca");
    let pem = issuer.pem();
    Ca { issuer, pem }
}

/// (certificate PEM, key PEM) signed by `ca`.
fn leaf(ca: &Ca, cn: &str, server: bool) -> (String, String) {
    let names = if server {
        vec!["localhost".to_string(), "127.0.0.1".to_string()]
    } else {
        Vec::new()
    };
    let mut p = CertificateParams::new(names).expect("params");
    let mut dn = DistinguishedName::new();
    dn.push(DnType::CommonName, cn);
    p.distinguished_name = dn;
    p.extended_key_usages = vec![if server {
        ExtendedKeyUsagePurpose::ServerAuth
    } else {
        ExtendedKeyUsagePurpose::ClientAuth
    }];
    let key = KeyPair::generate().expect("key");
    let cert = p.signed_by(&key, &ca.issuer).expect("sign");
    (cert.pem(), key.serialize_pem())
}

fn client_config(server_ca: &str, client: Option<&(String, String)>) -> Arc<rustls::ClientConfig> {
    let mut roots = rustls::RootCertStore::empty();
    for c in CertificateDer::pem_slice_iter(server_ca.as_bytes()) {
        roots.add(c.expect("ca pem")).expect("root");
    }
    let b = rustls::ClientConfig::builder_with_provider(Arc::new(
        rustls::crypto::ring::default_provider(),
    ))
    .with_safe_default_protocol_versions()
    .expect("versions")
    .with_root_certificates(roots);
    let cfg = match client {
        Some((cert, key)) => {
            let certs: Vec<CertificateDer<'static>> =
                CertificateDer::pem_slice_iter(cert.as_bytes())
                    .collect::<Result<_, _>>()
                    .expect("cert pem");
            let key = PrivateKeyDer::from_pem_slice(key.as_bytes()).expect("key pem");
            b.with_client_auth_cert(certs, key).expect("client auth")
        }
        None => b.with_no_client_auth(),
    };
    Arc::new(cfg)
}

// ---------------------------------------------------------------------------
// The fixture: a sim, its kubelet API, a good client and its pods.

struct Fixture {
    sim: Sim,
    api: KubeletApi,
    server_ca: String,
    good: Arc<rustls::ClientConfig>,
    kubelet_ca: Ca,
}

fn fixture() -> Fixture {
    let sim = Sim::start(SimOptions {
        namespaces: vec!["default".into()],
        uid_range: None,
        ..SimOptions::default()
    })
    .expect("sim");
    let serving_ca = ca("kubelet-serving-ca");
    let client_ca = ca("kubelet-client-ca");
    let (cert, key) = leaf(&serving_ca, "sim-node", true);
    let api = KubeletApi::start(
        sim.kubelet().expect("kubelet"),
        KubeletApiConfig {
            listen: "127.0.0.1:0".parse().expect("addr"),
            cert_pem: cert.into_bytes(),
            key_pem: key.into_bytes(),
            client_ca_pem: client_ca.pem.clone().into_bytes(),
        },
    )
    .expect("kubelet api");
    let apiserver = leaf(&client_ca, "kube-apiserver-kubelet-client", false);
    let good = client_config(&serving_ca.pem, Some(&apiserver));
    Fixture {
        sim,
        api,
        server_ca: serving_ca.pem,
        good,
        kubelet_ca: client_ca,
    }
}

impl Fixture {
    /// Creates pod `name` with `containers` and waits until it runs.
    fn pod(&self, name: &str, containers: Value) -> Value {
        let pod = json!({
            "apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": name, "namespace": "default"},
            "spec": {"restartPolicy": "Always", "containers": containers},
        });
        self.sim
            .store
            .create(Resource::Pod, "default", pod)
            .expect("create pod");
        wait_for(
            &format!("pod {name} running"),
            Duration::from_secs(30),
            || {
                let p = self.sim.store.get(Resource::Pod, "default", name).ok()?;
                let running = p["status"]["phase"] == "Running"
                    && p["status"]["containerStatuses"]
                        .as_array()
                        .is_some_and(|cs| cs.iter().all(|c| c["ready"] == true));
                running.then_some(p)
            },
        )
    }

    fn connect(&self) -> Tls {
        connect(self.api.port(), &self.good)
    }
}

const LOOP: &str = "trap 'exit 0' TERM; while :; do sleep 1; done";

fn box_pod(f: &Fixture) {
    f.pod(
        "box",
        json!([{"name": "main", "image": "busybox", "command": ["sh", "-c", LOOP]}]),
    );
}

type Tls = rustls::StreamOwned<rustls::ClientConnection, TcpStream>;

fn connect(port: u16, cfg: &Arc<rustls::ClientConfig>) -> Tls {
    let tcp = TcpStream::connect(("127.0.0.1", port)).expect("connect");
    tcp.set_read_timeout(Some(Duration::from_secs(20)))
        .expect("timeout");
    let conn = rustls::ClientConnection::new(
        cfg.clone(),
        ServerName::try_from("localhost").expect("name"),
    )
    .expect("tls client");
    rustls::StreamOwned::new(conn, tcp)
}

/// Writes a request head, reads the answer's head: (status, headers,
/// bytes read past the head).
fn request(
    s: &mut Tls,
    method: &str,
    target: &str,
    headers: &[(&str, &str)],
) -> (u16, HashMap<String, Vec<String>>, Vec<u8>) {
    let mut head = format!("{method} {target} HTTP/1.1\r\nHost: localhost\r\n");
    for (k, v) in headers {
        head.push_str(&format!("{k}: {v}\r\n"));
    }
    head.push_str("\r\n");
    s.write_all(head.as_bytes()).expect("write head");
    s.flush().expect("flush");
    let mut buf = Vec::new();
    let mut chunk = [0u8; 4096];
    let end = loop {
        if let Some(i) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
            break i;
        }
        let n = s.read(&mut chunk).expect("read head");
        assert!(n > 0, "eof before the answer's head: {buf:?}");
        buf.extend_from_slice(&chunk[..n]);
    };
    let text = String::from_utf8_lossy(&buf[..end]).to_string();
    let mut lines = text.split("\r\n");
    let status: u16 = lines
        .next()
        .and_then(|l| l.split(' ').nth(1))
        .and_then(|c| c.parse().ok())
        .expect("status line");
    let mut h: HashMap<String, Vec<String>> = HashMap::new();
    for l in lines {
        if let Some((k, v)) = l.split_once(':') {
            h.entry(k.trim().to_ascii_lowercase())
                .or_default()
                .push(v.trim().to_string());
        }
    }
    (status, h, buf[end + 4..].to_vec())
}

/// A whole (non-upgraded) answer: status and body (chunked or sized).
fn get(f: &Fixture, target: &str) -> (u16, String) {
    let mut s = f.connect();
    let (status, h, mut rest) = request(&mut s, "GET", target, &[("Connection", "close")]);
    let chunked = h
        .get("transfer-encoding")
        .is_some_and(|v| v.iter().any(|v| v.contains("chunked")));
    let mut chunk = [0u8; 8192];
    loop {
        match s.read(&mut chunk) {
            Ok(0) | Err(_) => break,
            Ok(n) => rest.extend_from_slice(&chunk[..n]),
        }
    }
    let body = if chunked { dechunk(&rest) } else { rest };
    (status, String::from_utf8_lossy(&body).to_string())
}

fn dechunk(mut b: &[u8]) -> Vec<u8> {
    let mut out = Vec::new();
    while let Some(i) = b.windows(2).position(|w| w == b"\r\n") {
        let size = usize::from_str_radix(String::from_utf8_lossy(&b[..i]).trim(), 16).unwrap_or(0);
        if size == 0 || b.len() < i + 2 + size {
            break;
        }
        out.extend_from_slice(&b[i + 2..i + 2 + size]);
        b = &b[(i + 4 + size).min(b.len())..];
    }
    out
}

// ---------------------------------------------------------------------------
// A SPDY remotecommand client, as the API server's stream translator.

struct Spdy {
    s: Tls,
    enc: Encoder,
    dec: Decoder,
    next_id: u32,
    /// Data per stream id, and which streams FINed or were reset.
    data: HashMap<u32, Vec<u8>>,
    fin: HashMap<u32, bool>,
    replied: Vec<u32>,
    reset: Vec<(u32, u32)>,
    /// Our PINGs the server echoed.
    pongs: Vec<u32>,
    eof: bool,
}

impl Spdy {
    /// POSTs the SPDY upgrade of `target` offering `versions`.
    fn open(f: &Fixture, target: &str, versions: &[&str]) -> (Spdy, String) {
        let mut s = f.connect();
        let mut h = vec![("Connection", "Upgrade"), ("Upgrade", "SPDY/3.1")];
        for v in versions {
            h.push(("X-Stream-Protocol-Version", v));
        }
        let (status, headers, rest) = request(&mut s, "POST", target, &h);
        assert_eq!(status, 101, "upgrade of {target}");
        let chosen = headers
            .get("x-stream-protocol-version")
            .and_then(|v| v.first().cloned())
            .unwrap_or_default();
        let mut dec = Decoder::new(Limits::DEFAULT);
        dec.push(&rest);
        (
            Spdy {
                s,
                enc: Encoder::new(),
                dec,
                next_id: 1,
                data: HashMap::new(),
                fin: HashMap::new(),
                replied: Vec::new(),
                reset: Vec::new(),
                pongs: Vec::new(),
                eof: false,
            },
            chosen,
        )
    }

    fn send(&mut self, f: &Frame) {
        let mut b = Vec::new();
        self.enc.encode(f, &mut b).expect("encode");
        self.s.write_all(&b).expect("write frame");
        self.s.flush().expect("flush");
    }

    /// Opens a stream of `kind` (more headers in `extra`); its id.
    fn stream(&mut self, kind: &str, extra: &[(&str, &str)]) -> u32 {
        let id = self.next_id;
        self.next_id += 2;
        let mut h = vec![("streamtype", kind)];
        h.extend_from_slice(extra);
        self.send(&Frame::SynStream {
            stream_id: id,
            assoc_id: 0,
            priority: 0,
            fin: false,
            unidirectional: false,
            headers: Headers::from_pairs(&h),
        });
        id
    }

    fn data(&mut self, id: u32, data: &[u8], fin: bool) {
        self.send(&Frame::Data {
            stream_id: id,
            data: data.to_vec(),
            fin,
        });
    }

    /// Reads and files frames for up to `wait` (a read timeout is no
    /// error); false at EOF.
    fn pump(&mut self, wait: Duration) -> bool {
        if self.eof {
            return false;
        }
        let _ = self.s.sock.set_read_timeout(Some(wait));
        let mut buf = [0u8; 65536];
        match self.s.read(&mut buf) {
            Ok(0) => self.eof = true,
            Ok(n) => self.dec.push(&buf[..n]),
            Err(e)
                if matches!(
                    e.kind(),
                    std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
                ) => {}
            Err(_) => self.eof = true,
        }
        while let Some(f) = self
            .dec
            .next()
            .expect("a well-formed frame from the server")
        {
            match f {
                Frame::Data {
                    stream_id,
                    data,
                    fin,
                } => {
                    self.data
                        .entry(stream_id)
                        .or_default()
                        .extend_from_slice(&data);
                    if fin {
                        self.fin.insert(stream_id, true);
                    }
                }
                Frame::SynReply { stream_id, .. } => self.replied.push(stream_id),
                Frame::RstStream { stream_id, status } => self.reset.push((stream_id, status)),
                Frame::Ping { id } if id % 2 == 0 => self.send(&Frame::Ping { id }),
                Frame::Ping { id } => self.pongs.push(id),
                _ => {}
            }
        }
        !self.eof
    }

    /// Pumps until `done` or EOF, within `limit`.
    fn until(&mut self, what: &str, limit: Duration, done: impl Fn(&Spdy) -> bool) {
        let end = Instant::now() + limit;
        while !done(self) {
            assert!(Instant::now() < end, "timed out waiting for {what}");
            if !self.pump(Duration::from_millis(50)) && !done(self) {
                panic!("connection ended before {what}: {:?}", self.text_all());
            }
        }
    }

    fn text(&self, id: u32) -> String {
        String::from_utf8_lossy(self.data.get(&id).map(Vec::as_slice).unwrap_or(&[])).to_string()
    }

    fn text_all(&self) -> Vec<(u32, String)> {
        let mut v: Vec<(u32, String)> = self.data.keys().map(|k| (*k, self.text(*k))).collect();
        v.sort();
        v
    }

    /// Runs to the end of the connection: everything the server sent.
    fn finish(&mut self, limit: Duration) {
        let end = Instant::now() + limit;
        while self.pump(Duration::from_millis(50)) {
            assert!(
                Instant::now() < end,
                "the server never closed: {:?}",
                self.text_all()
            );
        }
    }
}

fn q(command: &[&str], flags: &str) -> String {
    let mut s = String::from(flags);
    for c in command {
        s.push_str("&command=");
        for b in c.bytes() {
            if b.is_ascii_alphanumeric() || b"-_.~".contains(&b) {
                s.push(b as char);
            } else {
                s.push_str(&format!("%{b:02X}"));
            }
        }
    }
    s
}

const TRANSLATOR: &[&str] = &[
    "v5.channel.k8s.io",
    "v4.channel.k8s.io",
    "v3.channel.k8s.io",
    "v2.channel.k8s.io",
    "channel.k8s.io",
];

// ---------------------------------------------------------------------------
// Hostile cases first.

#[test]
fn refuses_a_client_without_a_certificate_or_of_another_ca() {
    let _w = watchdog("tls refusals", Duration::from_secs(60));
    let f = fixture();
    let other = ca("someone-else");
    let stranger = leaf(&other, "kube-apiserver-kubelet-client", false);
    // The API server's own kind of CA, but not the kubelet's client CA.
    let own_but_server = leaf(&f.kubelet_ca, "not-a-client", true);
    let cases = [
        ("no certificate", client_config(&f.server_ca, None)),
        ("another CA", client_config(&f.server_ca, Some(&stranger))),
        (
            "a server-only certificate",
            client_config(&f.server_ca, Some(&own_but_server)),
        ),
    ];
    for (what, cfg) in cases {
        let mut s = connect(f.api.port(), &cfg);
        let _ = s.write_all(b"GET /healthz HTTP/1.1\r\nHost: localhost\r\n\r\n");
        let _ = s.flush();
        let mut buf = Vec::new();
        let got = s.read_to_end(&mut buf);
        assert!(
            got.is_err() || buf.is_empty(),
            "{what}: the server answered {:?}",
            String::from_utf8_lossy(&buf)
        );
        assert!(
            !String::from_utf8_lossy(&buf).contains("HTTP/1.1"),
            "{what}"
        );
    }
    // And the good client is served.
    assert_eq!(get(&f, "/healthz"), (200, "ok".to_string()));
}

#[test]
fn unknown_routes_and_dot_segments_are_404() {
    let _w = watchdog("404s", Duration::from_secs(60));
    let f = fixture();
    box_pod(&f);
    for p in [
        "/",
        "/pods",
        "/exec/default/box",
        "/exec/default/../box/main?command=true&output=1",
        "/exec/default/box/../main?command=true&output=1",
        "/containerLogs/default/box/main/..",
        "/containerLogs//box/main",
        "/exec/default/box%2Fmain/main?command=true&output=1",
        "/portforward/default/box",
        "/run/default/box/main",
    ] {
        let (status, _) = get(&f, p);
        assert_eq!(status, 404, "{p}");
    }
    let (status, _) = get(&f, "/containerLogs/default/nosuchpod/main");
    assert_eq!(status, 404);
}

#[test]
fn spdy_refusals_as_the_kubelet_answers_them() {
    let _w = watchdog("spdy refusals", Duration::from_secs(60));
    let f = fixture();
    box_pod(&f);
    let target = format!("/exec/default/box/main?{}", q(&["true"], "output=1"));
    // No subprotocol offered: 400.
    let mut s = f.connect();
    let (status, _, _) = request(
        &mut s,
        "POST",
        &target,
        &[("Connection", "Upgrade"), ("Upgrade", "SPDY/3.1")],
    );
    assert_eq!(status, 400);
    // None in common: 403 and the accepted list.
    let mut s = f.connect();
    let (status, h, _) = request(
        &mut s,
        "POST",
        &target,
        &[
            ("Connection", "Upgrade"),
            ("Upgrade", "SPDY/3.1"),
            ("X-Stream-Protocol-Version", "v9.channel.k8s.io"),
        ],
    );
    assert_eq!(status, 403);
    assert_eq!(h["x-accepted-stream-protocol-versions"].len(), 5);
    // No stream asked for: 400 before any upgrade.
    let mut s = f.connect();
    let (status, _, _) = request(
        &mut s,
        "POST",
        &format!("/exec/default/box/main?{}", q(&["true"], "output=true")),
        &[
            ("Connection", "Upgrade"),
            ("Upgrade", "SPDY/3.1"),
            ("X-Stream-Protocol-Version", "v4.channel.k8s.io"),
        ],
    );
    assert_eq!(status, 400);
    // The kubelet's texts: the streams, then the pod.
    let (status, body) = get(&f, "/exec/default/box/main?command=true");
    assert_eq!(
        (status, body.as_str()),
        (400, "you must specify at least 1 of stdin, stdout, stderr")
    );
    let (status, body) = get(&f, "/attach/default/nosuch/main?output=1");
    assert_eq!((status, body.as_str()), (404, "pod does not exist"));
}

// ---------------------------------------------------------------------------
// Exec and attach over SPDY.

#[test]
fn spdy_exec_reports_a_non_zero_exit_code() {
    let _w = watchdog("exit code", Duration::from_secs(90));
    let f = fixture();
    box_pod(&f);
    let target = format!(
        "/exec/default/box/main?{}",
        q(
            &["sh", "-c", "echo out; echo err >&2; exit 3"],
            "output=1&error=1"
        )
    );
    let (mut c, chosen) = Spdy::open(&f, &target, TRANSLATOR);
    assert_eq!(chosen, "v5.channel.k8s.io");
    // The API server pings every 5 s: echoed, before and during the run.
    c.send(&Frame::Ping { id: 1 });
    let e = c.stream("error", &[]);
    let o = c.stream("stdout", &[]);
    c.send(&Frame::Ping { id: 3 });
    let er = c.stream("stderr", &[]);
    c.finish(Duration::from_secs(30));
    assert_eq!(c.pongs, vec![1, 3]);
    assert_eq!(c.replied, vec![e, o, er]);
    assert_eq!(c.text(o), "out\n");
    assert_eq!(c.text(er), "err\n");
    let st: Value = serde_json::from_str(&c.text(e)).expect("status json");
    assert_eq!(st["status"], "Failure");
    assert_eq!(st["reason"], "NonZeroExitCode");
    assert_eq!(st["details"]["causes"][0]["reason"], "ExitCode");
    assert_eq!(st["details"]["causes"][0]["message"], "3");
    assert!(c.fin.get(&e).copied().unwrap_or(false));
}

#[test]
fn spdy_exec_stdin_fin_reaches_cat_and_v3_reports_failure_as_text() {
    let _w = watchdog("stdin", Duration::from_secs(90));
    let f = fixture();
    box_pod(&f);
    let target = format!(
        "/exec/default/box/main?{}",
        q(&["cat"], "input=1&output=1&error=1")
    );
    let (mut c, chosen) = Spdy::open(&f, &target, &["v4.channel.k8s.io"]);
    assert_eq!(chosen, "v4.channel.k8s.io");
    let e = c.stream("error", &[]);
    let i = c.stream("stdin", &[]);
    let o = c.stream("stdout", &[]);
    let _er = c.stream("stderr", &[]);
    c.until("the replies", Duration::from_secs(10), |c| {
        c.replied.len() == 4
    });
    c.data(i, b"hi\n", false);
    c.until("the echo", Duration::from_secs(10), |c| c.text(o) == "hi\n");
    c.data(i, b"", true);
    c.finish(Duration::from_secs(30));
    assert_eq!(c.text(o), "hi\n");
    assert_eq!(c.text(e), r#"{"metadata":{},"status":"Success"}"#);

    // v3: a failure's message alone, nothing on success.
    let target = format!(
        "/exec/default/box/main?{}",
        q(&["sh", "-c", "exit 4"], "output=1")
    );
    let (mut c, chosen) = Spdy::open(&f, &target, &["v3.channel.k8s.io"]);
    assert_eq!(chosen, "v3.channel.k8s.io");
    let e = c.stream("error", &[]);
    let _o = c.stream("stdout", &[]);
    c.finish(Duration::from_secs(30));
    assert!(
        c.text(e)
            .starts_with("command terminated with non-zero exit code"),
        "{:?}",
        c.text(e)
    );
    assert!(c.text(e).ends_with("exit code 4"), "{:?}", c.text(e));

    // v1 (`channel.k8s.io`): the error stream is reset once the set is in,
    // so a failure is never told.
    let target = format!(
        "/exec/default/box/main?{}",
        q(&["sh", "-c", "echo v1; exit 2"], "output=1")
    );
    let (mut c, chosen) = Spdy::open(&f, &target, &["channel.k8s.io"]);
    assert_eq!(chosen, "channel.k8s.io");
    let e = c.stream("error", &[]);
    let o = c.stream("stdout", &[]);
    c.finish(Duration::from_secs(30));
    assert_eq!(c.text(o), "v1\n");
    assert!(c.text(e).is_empty(), "{:?}", c.text(e));
    assert!(
        c.reset.contains(&(e, crate::kube::spdy::RST_CANCEL)),
        "{:?}",
        c.reset
    );
}

#[test]
fn spdy_tty_exec_honours_resize() {
    let _w = watchdog("tty", Duration::from_secs(90));
    let f = fixture();
    box_pod(&f);
    let target = format!(
        "/exec/default/box/main?{}",
        q(
            &["sh", "-c", "read x; stty size"],
            "input=1&output=1&error=1&tty=1"
        )
    );
    let (mut c, _) = Spdy::open(&f, &target, TRANSLATOR);
    let e = c.stream("error", &[]);
    let i = c.stream("stdin", &[]);
    let o = c.stream("stdout", &[]);
    // With a tty stderr is merged: its stream is accepted, never counted.
    let _er = c.stream("stderr", &[]);
    let r = c.stream("resize", &[]);
    c.until("the replies", Duration::from_secs(10), |c| {
        c.replied.len() == 5
    });
    c.data(r, b"{\"Width\":120,\"Height\":40}\n", false);
    c.data(i, b"go\n", false);
    c.finish(Duration::from_secs(30));
    assert!(c.text(o).contains("40 120"), "{:?}", c.text(o));
    assert_eq!(c.text(e), r#"{"metadata":{},"status":"Success"}"#);
}

#[test]
fn spdy_attach_to_a_running_container() {
    let _w = watchdog("attach", Duration::from_secs(90));
    let f = fixture();
    f.pod(
        "talk",
        json!([{"name": "main", "image": "busybox", "stdin": true,
            "command": ["sh", "-c", "while read l; do echo got:$l; done"]}]),
    );
    let (mut c, _) = Spdy::open(&f, "/attach/default/talk/main?input=1&output=1", TRANSLATOR);
    let e = c.stream("error", &[]);
    let i = c.stream("stdin", &[]);
    let o = c.stream("stdout", &[]);
    c.until("the replies", Duration::from_secs(10), |c| {
        c.replied.len() == 3
    });
    // The attach may start after the first line: send until one is seen.
    let end = Instant::now() + Duration::from_secs(20);
    while !c.text(o).contains("got:hello") {
        assert!(Instant::now() < end, "no echo: {:?}", c.text_all());
        c.data(i, b"hello\n", false);
        c.pump(Duration::from_millis(200));
    }
    // Leaving ends the attach; the container lives on.
    drop(c);
    let _ = e;
    wait_for(
        "the container still running",
        Duration::from_secs(5),
        || {
            let p = f.sim.store.get(Resource::Pod, "default", "talk").ok()?;
            (p["status"]["containerStatuses"][0]["restartCount"] == 0
                && p["status"]["phase"] == "Running")
                .then_some(())
        },
    );
}

// ---------------------------------------------------------------------------
// Logs.

#[test]
fn container_logs_with_the_kubelets_options() {
    let _w = watchdog("logs", Duration::from_secs(90));
    let f = fixture();
    f.pod(
        "talker",
        json!([{"name": "main", "image": "busybox",
            "command": ["sh", "-c", "for i in 1 2 3 4 5; do echo line$i; done; while :; do echo tick; sleep 0.2; done"]}]),
    );
    wait_for("five lines", Duration::from_secs(20), || {
        let (s, b) = get(&f, "/containerLogs/default/talker/main");
        (s == 200 && b.contains("line5")).then_some(())
    });
    let (s, b) = get(&f, "/containerLogs/default/talker/main?limitBytes=3");
    assert_eq!((s, b.as_str()), (200, "lin"));
    let (_, b) = get(&f, "/containerLogs/default/talker/main?tailLines=1");
    assert_eq!(b.lines().count(), 1, "{b:?}");
    let (_, b) = get(&f, "/containerLogs/default/talker/main?tail=1");
    assert_eq!(b.lines().count(), 1, "{b:?}");
    let (_, b) = get(
        &f,
        "/containerLogs/default/talker/main?timestamps=true&limitBytes=200",
    );
    let first = b.lines().next().unwrap_or_default();
    assert!(
        first.ends_with(" line1") && first.contains('T') && first.contains('Z'),
        "{first:?}"
    );
    let (s, b) = get(&f, "/containerLogs/default/talker/main?previous=true");
    assert_eq!(s, 400, "{b}");
    assert!(b.contains("previous terminated container"), "{b}");
    let (s, b) = get(&f, "/containerLogs/default/talker/nosuch");
    assert_eq!(
        (s, b.as_str()),
        (404, "container \"nosuch\" not found in pod \"talker\"")
    );
    let (s, b) = get(&f, "/containerLogs/default/nosuch/main");
    assert_eq!((s, b.as_str()), (404, "pod \"nosuch\" does not exist"));

    // follow: the lines so far, then new ones as they come.
    let mut s = f.connect();
    let (status, _, mut rest) = request(
        &mut s,
        "GET",
        "/containerLogs/default/talker/main?follow=true&tailLines=0",
        &[],
    );
    assert_eq!(status, 200);
    let mut chunk = [0u8; 4096];
    let end = Instant::now() + Duration::from_secs(20);
    while String::from_utf8_lossy(&dechunk(&rest))
        .matches("tick")
        .count()
        < 3
    {
        assert!(Instant::now() < end, "no ticks followed: {rest:?}");
        let n = s.read(&mut chunk).expect("read follow");
        assert!(n > 0, "the follow ended");
        rest.extend_from_slice(&chunk[..n]);
    }
}

// ---------------------------------------------------------------------------
// Port-forward over plain SPDY.

#[test]
fn port_forward_plain_spdy_carries_mebibytes_each_way_and_v4_takes_port() {
    let _w = watchdog("port-forward", Duration::from_secs(120));
    if !std::path::Path::new("/usr/bin/python3").exists() {
        eprintln!("skipped: no /usr/bin/python3 for the echo server");
        return;
    }
    let f = fixture();
    let echo = [
        "import os,socket,threading",
        "s=socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)",
        "s.bind((os.environ['POD_IP'], 7070)); s.listen(8)",
        "def serve(c):",
        "  while True:",
        "    b=c.recv(65536)",
        "    if not b: break",
        "    c.sendall(b)",
        "  c.close()",
        "while True:",
        "  c,_=s.accept(); threading.Thread(target=serve, args=(c,), daemon=True).start()",
    ]
    .join("\n");
    let pod = f.pod(
        "echo",
        json!([{"name": "main", "image": "python",
            "command": ["/usr/bin/python3", "-c", &echo],
            "env": [{"name": "POD_IP", "valueFrom": {"fieldRef": {"fieldPath": "status.podIP"}}}]}]),
    );
    let ip = pod["status"]["podIP"].as_str().expect("pod ip").to_string();
    wait_for("the echo server", Duration::from_secs(20), || {
        TcpStream::connect((ip.as_str(), 7070)).ok()
    });
    let (mut c, chosen) = Spdy::open(&f, "/portForward/default/echo", &["portforward.k8s.io"]);
    assert_eq!(chosen, "portforward.k8s.io");
    let e = c.stream("error", &[("port", "7070"), ("requestid", "0")]);
    let d = c.stream("data", &[("port", "7070"), ("requestid", "0")]);
    c.until("the replies", Duration::from_secs(10), |c| {
        c.replied.len() == 2
    });
    let payload: Vec<u8> = (0..3 * 1024 * 1024u32).map(|i| (i % 251) as u8).collect();
    let mut sent = 0;
    let end = Instant::now() + Duration::from_secs(60);
    while c.data.get(&d).map_or(0, Vec::len) < payload.len() {
        assert!(
            Instant::now() < end,
            "echoed {} bytes",
            c.data.get(&d).map_or(0, Vec::len)
        );
        if sent < payload.len() {
            let n = (payload.len() - sent).min(32 * 1024);
            c.data(d, &payload[sent..sent + n], false);
            sent += n;
        }
        c.pump(Duration::from_millis(5));
    }
    assert!(c.data[&d] == payload, "the echo differs");
    assert!(c.text(e).is_empty(), "{:?}", c.text(e));
    // Our FIN reaches the pod: it closes, and both streams FIN.
    c.data(d, b"", true);
    c.until("the FINs", Duration::from_secs(10), |c| {
        c.fin.contains_key(&d) && c.fin.contains_key(&e)
    });

    // The v4 WebSocket, ports in the kubelet's `?port=`.
    use tungstenite::Message;
    let url = format!(
        "wss://localhost:{}/portForward/default/echo?port=7070",
        f.api.port()
    );
    let (mut ws, chosen) = crate::http::ws::client_handshake(
        f.connect(),
        &url,
        &[],
        Some("v4.channel.k8s.io"),
        1 << 20,
    )
    .expect("websocket");
    assert_eq!(chosen.as_deref(), Some("v4.channel.k8s.io"));
    let mut opened = 0;
    let mut echoed = Vec::new();
    let mut sent = false;
    while echoed != b"over v4" {
        match ws.read().expect("a v4 message") {
            Message::Binary(b) if b.first() == Some(&0) && opened < 2 => opened += 1,
            Message::Binary(b) if b.first() == Some(&1) && opened < 2 => opened += 1,
            Message::Binary(b) if b.first() == Some(&0) => echoed.extend_from_slice(&b[1..]),
            other => panic!("unexpected {other:?}"),
        }
        if opened == 2 && !sent {
            ws.send(Message::Binary(b"\0over v4".to_vec().into()))
                .expect("send");
            sent = true;
        }
    }

    // kubectl's SPDY-in-WebSocket tunnel is the API server's, not ours.
    let mut s = f.connect();
    let (status, _, _) = request(
        &mut s,
        "GET",
        "/portForward/default/echo",
        &[
            ("Connection", "Upgrade"),
            ("Upgrade", "websocket"),
            ("Sec-WebSocket-Version", "13"),
            ("Sec-WebSocket-Key", "dGhlIHNhbXBsZSBub25jZQ=="),
            ("Sec-WebSocket-Protocol", "SPDY/3.1+portforward.k8s.io"),
        ],
    );
    assert_eq!(status, 400);
}

// ---------------------------------------------------------------------------
// The WebSocket form.

#[test]
fn websocket_v5_exec_through_the_kubelet_path() {
    use crate::kube::channel;
    use tungstenite::Message;
    let _w = watchdog("websocket exec", Duration::from_secs(90));
    let f = fixture();
    box_pod(&f);
    let s = f.connect();
    let url = format!(
        "wss://localhost:{}/exec/default/box/main?{}",
        f.api.port(),
        q(&["sh", "-c", "cat; exit 5"], "input=1&output=1&error=1")
    );
    let (mut ws, chosen) =
        crate::http::ws::client_handshake(s, &url, &[], Some("v5.channel.k8s.io"), 1 << 20)
            .expect("websocket");
    assert_eq!(chosen.as_deref(), Some("v5.channel.k8s.io"));
    ws.send(Message::Binary(
        channel::encode_frame(channel::STDIN, b"ws-in\n").into(),
    ))
    .expect("stdin");
    ws.send(Message::Binary(
        channel::close_frame(channel::STDIN).to_vec().into(),
    ))
    .expect("close stdin");
    let mut out = Vec::new();
    let mut status = Vec::new();
    loop {
        match ws.read() {
            Ok(Message::Binary(b)) => match channel::decode_frame(&b) {
                Some((channel::STDOUT, d)) => out.extend_from_slice(d),
                Some((channel::ERROR, d)) => status.extend_from_slice(d),
                _ => {}
            },
            Ok(Message::Close(_)) | Err(_) => break,
            Ok(_) => {}
        }
    }
    assert_eq!(String::from_utf8_lossy(&out), "ws-in\n");
    let st: Value = serde_json::from_slice(&status).expect("status");
    assert_eq!(st["details"]["causes"][0]["message"], "5");
    // The kubelet's words: the container runtime's, naming the command.
    assert!(
        st["message"]
            .as_str()
            .is_some_and(|m| m.contains("error executing command [sh -c cat; exit 5]")),
        "{st}"
    );
}

// ---------------------------------------------------------------------------
// Hostile SPDY clients, a slow reader, a client that leaves.

#[test]
fn spdy_refuses_bad_streams_and_ends_on_garbage() {
    use crate::kube::spdy::{RST_PROTOCOL_ERROR, RST_REFUSED_STREAM};
    let _w = watchdog("hostile spdy", Duration::from_secs(60));
    let f = fixture();
    box_pod(&f);
    let target = format!(
        "/exec/default/box/main?{}",
        q(&["sh", "-c", "sleep 30"], "output=1")
    );
    let (mut c, _) = Spdy::open(&f, &target, TRANSLATOR);
    let e = c.stream("error", &[]);
    // A second error stream is refused; an unknown type is replied, unused.
    let dup = c.stream("error", &[]);
    let odd = c.stream("telemetry", &[]);
    // A server-parity id is a protocol error on that stream.
    c.send(&Frame::SynStream {
        stream_id: 100,
        assoc_id: 0,
        priority: 0,
        fin: false,
        unidirectional: false,
        headers: Headers::from_pairs(&[("streamtype", "stdout")]),
    });
    c.until("the answers", Duration::from_secs(10), |c| {
        c.replied.len() == 2 && c.reset.len() == 2
    });
    assert_eq!(c.replied, vec![e, odd]);
    assert!(
        c.reset.contains(&(dup, RST_REFUSED_STREAM)),
        "{:?}",
        c.reset
    );
    assert!(
        c.reset.contains(&(100, RST_PROTOCOL_ERROR)),
        "{:?}",
        c.reset
    );
    // Garbage where a frame should be: GOAWAY, and the connection ends.
    c.s.write_all(&[0x80, 0x07, 0x00, 0x63, 0, 0, 0, 0])
        .expect("garbage");
    c.s.flush().expect("flush");
    let mut saw_goaway = false;
    let end = Instant::now() + Duration::from_secs(10);
    let mut buf = [0u8; 4096];
    loop {
        assert!(Instant::now() < end, "the server kept the connection");
        match c.s.read(&mut buf) {
            Ok(0) | Err(_) => break,
            Ok(n) => {
                c.dec.push(&buf[..n]);
                while let Ok(Some(fr)) = c.dec.next() {
                    saw_goaway |= matches!(fr, Frame::GoAway { .. });
                }
            }
        }
    }
    assert!(saw_goaway);
}

#[test]
fn spdy_exec_output_waits_for_a_slow_reader_and_loses_nothing() {
    let _w = watchdog("slow reader", Duration::from_secs(120));
    let f = fixture();
    box_pod(&f);
    // 16 MiB of output, far more than every queue on the way holds.
    let target = format!(
        "/exec/default/box/main?{}",
        q(&["sh", "-c", "head -c 16777216 /dev/zero"], "output=1")
    );
    let (mut c, _) = Spdy::open(&f, &target, TRANSLATOR);
    let e = c.stream("error", &[]);
    let o = c.stream("stdout", &[]);
    // The scenario itself, not a wait for a condition: a reader that
    // stalls. The process must block on its pipe meanwhile, not the sim
    // buffer its output.
    std::thread::sleep(Duration::from_millis(1500));
    c.finish(Duration::from_secs(90));
    assert_eq!(c.data.get(&o).map_or(0, Vec::len), 16 << 20);
    assert_eq!(c.text(e), r#"{"metadata":{},"status":"Success"}"#);
}

#[test]
fn an_execs_process_ends_with_its_connection() {
    let _w = watchdog("exec cleanup", Duration::from_secs(60));
    let f = fixture();
    box_pod(&f);
    let target = format!(
        "/exec/default/box/main?{}",
        q(&["sh", "-c", "echo $$; exec sleep 300"], "output=1")
    );
    let (mut c, _) = Spdy::open(&f, &target, TRANSLATOR);
    let _e = c.stream("error", &[]);
    let o = c.stream("stdout", &[]);
    c.until("the pid", Duration::from_secs(10), |c| {
        c.text(o).ends_with('\n')
    });
    let pid: u32 = c.text(o).trim().parse().expect("pid");
    assert!(std::path::Path::new(&format!("/proc/{pid}")).exists());
    drop(c);
    wait_for("the process gone", Duration::from_secs(20), || {
        let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
        // Gone, or a zombie about to be reaped.
        (stat.is_empty() || stat.contains(") Z ")).then_some(())
    });
}

#[test]
fn an_incomplete_stream_set_is_given_up_after_30_seconds() {
    let _w = watchdog("stream creation timeout", Duration::from_secs(75));
    let f = fixture();
    box_pod(&f);
    let target = format!(
        "/exec/default/box/main?{}",
        q(&["sh", "-c", "echo never"], "output=1&error=1")
    );
    let started = Instant::now();
    let (mut c, _) = Spdy::open(&f, &target, TRANSLATOR);
    let _e = c.stream("error", &[]);
    let o = c.stream("stdout", &[]);
    // No stderr stream: the set never completes, nothing runs.
    let end = Instant::now() + Duration::from_secs(45);
    let mut saw_goaway = false;
    let mut buf = [0u8; 4096];
    loop {
        assert!(Instant::now() < end, "the server waited past 45 s");
        let _ = c.s.sock.set_read_timeout(Some(Duration::from_secs(1)));
        match c.s.read(&mut buf) {
            Ok(0) => break,
            Ok(n) => {
                c.dec.push(&buf[..n]);
                while let Ok(Some(fr)) = c.dec.next() {
                    saw_goaway |= matches!(fr, Frame::GoAway { .. });
                    if let Frame::Data {
                        stream_id, data, ..
                    } = fr
                    {
                        assert!(stream_id != o || data.is_empty(), "the command ran");
                    }
                }
            }
            Err(e)
                if matches!(
                    e.kind(),
                    std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
                ) => {}
            Err(_) => break,
        }
    }
    assert!(saw_goaway);
    assert!(
        started.elapsed() >= super::streams::STREAM_CREATION_TIMEOUT - Duration::from_secs(1),
        "given up after {:?}",
        started.elapsed()
    );
}
