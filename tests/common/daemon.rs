//! A real `kubegate serve` for integration tests: the example config with
//! `listen = "127.0.0.1:0"` and the demo principal's published token
//! replaced by a random one (`DaemonProc::token`; the daemon refuses the
//! published one beside another principal or outside sim mode), a fresh
//! state folder, optional extra TOML, stderr captured to a file (tests grep
//! it), and the demo Deployment waited for. Plus small blocking HTTP and
//! WebSocket clients that speak to it.
#![allow(dead_code)]

use super::{temp_dir, wait_for, KUBEGATE};
use kubegate::http::client::close_request;
use std::io::{BufRead, Read, Write};
use std::net::TcpStream;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

pub const EXAMPLE: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/config.example.toml");

/// A random bearer token and its SHA-256 hex digest (for `token_sha256`).
/// (`kubegate::token`, the daemon's own helper).
pub fn random_token() -> (String, String) {
    let token = kubegate::token::random_hex();
    let digest = token_digest(&token);
    (token, digest)
}

/// The SHA-256 hex digest of a token, as `token_sha256` holds it
/// (`kubegate::token::digest_hex`).
pub fn token_digest(token: &str) -> String {
    kubegate::token::digest_hex(token)
}

pub struct DaemonProc {
    pub child: Child,
    /// `http://127.0.0.1:PORT`
    pub url: String,
    /// `127.0.0.1:PORT`
    pub addr: String,
    /// The bearer token of the config's principal (the demo one, with a
    /// random token), or the one given to [`DaemonProc::start_config`].
    pub token: String,
    pub dir: PathBuf,
    pub config: PathBuf,
    /// The embedded sim's kubeconfig.
    pub kubeconfig: PathBuf,
    pub cache_dir: PathBuf,
    /// The daemon's stderr (its log; a restart writes a new one).
    pub log: PathBuf,
    /// Extra environment of the daemon process.
    env: Vec<(String, String)>,
    /// Starts so far on this folder, minus one.
    restarts: u32,
    /// Replaced by a restart: its drop leaves the folder to the new one.
    replaced: bool,
    _watchdog: crossbeam_channel::Sender<()>,
}

impl DaemonProc {
    /// The session's pods in the sim (by its session-id label).
    pub fn session_pods(&self, id: &str) -> Vec<String> {
        let out = self.kubectl_ok(
            &[
                "get",
                "pods",
                "-n",
                "default",
                "-l",
                &format!("kubegate.dev/session-id={id}"),
                "-o",
                "jsonpath={.items[*].metadata.name}",
            ],
            None,
        );
        out.split_whitespace().map(str::to_string).collect()
    }

    /// POSTs a session (201 expected) and opens its event stream; the id
    /// and the stream.
    pub fn create_session(&self, body: &serde_json::Value) -> (String, SseClient) {
        let (st, v) = self.json("POST", "/v1/sessions", Some(body));
        assert_eq!(st, 201, "{v}");
        let id = v["sessionId"].as_str().expect("sessionId").to_string();
        let sse = SseClient::open(self, &format!("/v1/sessions/{id}/events"), None);
        (id, sse)
    }

    /// The example config (plus `listen = 127.0.0.1:0`, and a random token
    /// for its demo principal).
    pub fn start() -> DaemonProc {
        DaemonProc::start_with(|c| c, "info")
    }

    /// `edit` rewrites the config text (appending TOML is the usual way);
    /// `rust_log` is the daemon's `RUST_LOG`.
    pub fn start_with(edit: impl FnOnce(String) -> String, rust_log: &str) -> DaemonProc {
        DaemonProc::start_with_env(edit, rust_log, &[])
    }

    /// [`DaemonProc::start_with`] with extra environment variables (the
    /// test hooks: `KUBEGATE_TEST_HOOKS=1`).
    pub fn start_with_env(
        edit: impl FnOnce(String) -> String,
        rust_log: &str,
        env: &[(&str, &str)],
    ) -> DaemonProc {
        let dir = temp_dir("daemon");
        let example = std::fs::read_to_string(EXAMPLE).expect("read the example config");
        let listen = example.replace("listen = \"127.0.0.1:7443\"", "listen = \"127.0.0.1:0\"");
        assert_ne!(listen, example, "the example's listen line changed");
        let (token, digest) = random_token();
        let own = listen.replace(kubegate::config::DEMO_TOKEN_SHA256, &digest);
        assert_ne!(own, listen, "the example's demo digest changed");
        let kubeconfig = dir.join("state").join("sim.kubeconfig");
        let env = env
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        let log = dir.join("daemon.log");
        let d = DaemonProc::spawn(dir, &edit(own), kubeconfig, rust_log, env, log, token);
        d.wait_deployment_ready("demo", "hello");
        d
    }

    /// `kubegate serve` with this config text as is (write `listen =
    /// "127.0.0.1:0"` in it), e.g. `mode = "kubeconfig"` against a
    /// separate sim whose kubeconfig is `kubeconfig` (what `kubectl()`
    /// uses); `token` is the bearer token requests carry (its digest in the
    /// text: [`random_token`]). Returns once the daemon printed its
    /// listening line; waits for nothing in the cluster.
    pub fn start_config(
        text: &str,
        kubeconfig: PathBuf,
        token: &str,
        rust_log: &str,
    ) -> DaemonProc {
        let dir = temp_dir("daemon");
        let log = dir.join("daemon.log");
        DaemonProc::spawn(
            dir,
            text,
            kubeconfig,
            rust_log,
            Vec::new(),
            log,
            token.to_string(),
        )
    }

    /// Starts the daemon again after a stop, on the same folder, config
    /// and state directory (a restart: recorded sessions are re-adopted);
    /// its log goes to a new file (`daemon-N.log`).
    pub fn restart(&mut self, rust_log: &str) {
        assert!(
            matches!(self.child.try_wait(), Ok(Some(_))),
            "restart needs a stopped daemon"
        );
        let text = std::fs::read_to_string(&self.config).expect("read the config");
        let n = self.restarts + 1;
        let log = self.dir.join(format!("daemon-{n}.log"));
        let mut next = DaemonProc::spawn(
            self.dir.clone(),
            &text,
            self.kubeconfig.clone(),
            rust_log,
            self.env.clone(),
            log,
            self.token.clone(),
        );
        next.restarts = n;
        std::mem::swap(self, &mut next);
        next.replaced = true;
    }

    fn spawn(
        dir: PathBuf,
        text: &str,
        kubeconfig: PathBuf,
        rust_log: &str,
        env: Vec<(String, String)>,
        log: PathBuf,
        token: String,
    ) -> DaemonProc {
        let config = dir.join("kubegate.toml");
        std::fs::write(&config, text).expect("write config");
        let log_file = std::fs::File::create(&log).expect("create log");
        let mut child = Command::new(KUBEGATE)
            .arg("serve")
            .arg("--config")
            .arg(&config)
            .env("RUST_LOG", rust_log)
            .env_remove("NOTIFY_SOCKET")
            .envs(env.iter().map(|(k, v)| (k.as_str(), v.as_str())))
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::from(log_file))
            .spawn()
            .expect("spawn kubegate serve");
        let pid = child.id();
        let (cancel, cancelled) = crossbeam_channel::bounded::<()>(0);
        std::thread::spawn(move || {
            if let Err(crossbeam_channel::RecvTimeoutError::Timeout) =
                cancelled.recv_timeout(Duration::from_secs(300))
            {
                eprintln!("watchdog: killing kubegate serve {pid}");
                let _ = Command::new("kill").arg("-9").arg(pid.to_string()).status();
            }
        });
        let Some(line) = super::first_line(&mut child, Duration::from_secs(90)) else {
            panic!(
                "kubegate serve printed no line within 90 s; log:\n{}",
                std::fs::read_to_string(&log).unwrap_or_default()
            );
        };
        let url = match line
            .strip_suffix('\n')
            .and_then(|l| l.strip_prefix("kubegate listening on "))
        {
            Some(u) => u.to_string(),
            None => {
                let _ = child.kill();
                let _ = child.wait();
                panic!(
                    "unexpected first line {line:?}; log:\n{}",
                    std::fs::read_to_string(&log).unwrap_or_default()
                );
            }
        };
        let addr = url
            .trim_start_matches("http://")
            .trim_start_matches("https://")
            .to_string();
        DaemonProc {
            child,
            url,
            addr,
            token,
            kubeconfig,
            cache_dir: dir.join("kube-cache"),
            config,
            log,
            dir,
            env,
            restarts: 0,
            replaced: false,
            _watchdog: cancel,
        }
    }

    pub fn kubectl(&self) -> Command {
        let mut c = Command::new("kubectl");
        c.arg("--kubeconfig")
            .arg(&self.kubeconfig)
            .arg("--cache-dir")
            .arg(&self.cache_dir)
            .arg("--request-timeout=30s");
        c
    }

    /// `kubectl ARGS` must succeed; returns stdout.
    pub fn kubectl_ok(&self, args: &[&str], stdin: Option<&[u8]>) -> String {
        let mut c = self.kubectl();
        c.args(args);
        let out = super::run_with_timeout(c, stdin, Duration::from_secs(60));
        assert_eq!(out.code, Some(0), "kubectl {args:?}: {}", out.stderr_str());
        out.stdout_str()
    }

    /// Creates an object from JSON with `kubectl create -f -`.
    pub fn create(&self, obj: &serde_json::Value) {
        self.kubectl_ok(&["create", "-f", "-"], Some(obj.to_string().as_bytes()));
    }

    /// Waits until `namespace/name` has all its replicas ready.
    pub fn wait_deployment_ready(&self, namespace: &str, name: &str) {
        wait_for(
            &format!("deployment {namespace}/{name} ready"),
            Duration::from_secs(60),
            || {
                let mut c = self.kubectl();
                c.args(["-n", namespace, "get", "deployment", name, "-o", "json"]);
                let out = super::run_with_timeout(c, None, Duration::from_secs(60));
                let v: serde_json::Value = serde_json::from_slice(&out.stdout).ok()?;
                let want = v["spec"]["replicas"].as_i64()?;
                (v["status"]["readyReplicas"].as_i64() == Some(want)).then_some(())
            },
        );
    }

    /// The daemon's log so far.
    pub fn log_text(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    /// SIGTERM and a bounded wait; the exit code.
    pub fn stop(&mut self) -> Option<i32> {
        super::terminate(&mut self.child, Duration::from_secs(30))
    }

    /// One request with `Connection: close`; status and body.
    pub fn request(
        &self,
        method: &str,
        path: &str,
        token: Option<&str>,
        body: Option<&[u8]>,
    ) -> (u16, Vec<u8>) {
        self.request_with_headers(method, path, token, body, &[])
    }

    /// [`DaemonProc::request`] with `extra` headers after the token.
    pub fn request_with_headers(
        &self,
        method: &str,
        path: &str,
        token: Option<&str>,
        body: Option<&[u8]>,
        extra: &[(&str, &str)],
    ) -> (u16, Vec<u8>) {
        let bearer = token.map(|t| format!("Bearer {t}"));
        let mut headers: Vec<(&str, &str)> = bearer
            .iter()
            .map(|b| ("Authorization", b.as_str()))
            .collect();
        headers.extend_from_slice(extra);
        let body = body.map(|b| ("application/json", b));
        let raw = close_request(method, path, &self.addr, &headers, body);
        raw_exchange(&self.addr, &raw)
    }

    /// A JSON request with the daemon's token; status and parsed body.
    pub fn json(
        &self,
        method: &str,
        path: &str,
        body: Option<&serde_json::Value>,
    ) -> (u16, serde_json::Value) {
        let b = body.map(|v| v.to_string().into_bytes());
        let (st, resp) = self.request(method, path, Some(&self.token), b.as_deref());
        let v = serde_json::from_slice(&resp).unwrap_or_else(|_| {
            serde_json::Value::String(String::from_utf8_lossy(&resp).into_owned())
        });
        (st, v)
    }

    /// Opens a WebSocket at `path` with these extra headers and offered
    /// subprotocols; the HTTP status and body when it is refused.
    pub fn ws(
        &self,
        path: &str,
        headers: &[(&str, &str)],
        protocols: &[&str],
    ) -> Result<
        (
            tungstenite::WebSocket<TcpStream>,
            tungstenite::handshake::client::Response,
        ),
        (u16, Vec<u8>),
    > {
        use tungstenite::client::IntoClientRequest;
        let mut req = format!("ws://{}{}", self.addr, path)
            .into_client_request()
            .expect("request");
        for (k, v) in headers {
            req.headers_mut().insert(
                tungstenite::http::HeaderName::from_bytes(k.as_bytes()).expect("name"),
                v.parse().expect("value"),
            );
        }
        if !protocols.is_empty() {
            req.headers_mut().insert(
                "Sec-WebSocket-Protocol",
                protocols.join(", ").parse().expect("protocols"),
            );
        }
        let tcp = TcpStream::connect(&self.addr).expect("connect");
        tcp.set_read_timeout(Some(Duration::from_secs(60)))
            .expect("timeout");
        tcp.set_nodelay(true).expect("nodelay");
        match tungstenite::client::client(req, tcp) {
            Ok(x) => Ok(x),
            Err(tungstenite::HandshakeError::Failure(tungstenite::Error::Http(resp))) => {
                let status = resp.status().as_u16();
                Err((status, resp.into_body().unwrap_or_default()))
            }
            Err(e) => panic!("websocket handshake: {e}"),
        }
    }
}

impl Drop for DaemonProc {
    fn drop(&mut self) {
        if let Ok(None) = self.child.try_wait() {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
        if !std::thread::panicking() && !self.replaced {
            // The sim's containers die with it (parent-death signal), a
            // moment later.
            let dir = self.dir.clone();
            wait_for(
                "no process left under the daemon's folder",
                Duration::from_secs(15),
                || super::processes_under(&dir).is_empty().then_some(()),
            );
        }
    }
}

/// Writes raw bytes, reads the whole answer (the server closes); status and body.
pub fn raw_exchange(addr: &str, raw: &[u8]) -> (u16, Vec<u8>) {
    let mut s = TcpStream::connect(addr).expect("connect");
    s.set_read_timeout(Some(Duration::from_secs(60)))
        .expect("timeout");
    s.write_all(raw).expect("write request");
    let mut resp = Vec::new();
    let _ = s.read_to_end(&mut resp);
    parse_response(&resp)
}

/// Status and de-chunked body of one HTTP/1.1 response.
pub fn parse_response(resp: &[u8]) -> (u16, Vec<u8>) {
    let split = resp
        .windows(4)
        .position(|w| w == b"\r\n\r\n")
        .unwrap_or_else(|| panic!("no response head in {:?}", String::from_utf8_lossy(resp)));
    let head = String::from_utf8_lossy(&resp[..split]).to_string();
    let status = head
        .split(' ')
        .nth(1)
        .and_then(|c| c.parse().ok())
        .unwrap_or_else(|| panic!("no status in {head:?}"));
    let mut body = resp[split + 4..].to_vec();
    if head
        .to_ascii_lowercase()
        .contains("transfer-encoding: chunked")
    {
        let mut out = Vec::new();
        let mut rest = &body[..];
        while let Some(p) = rest.windows(2).position(|w| w == b"\r\n") {
            let n =
                usize::from_str_radix(String::from_utf8_lossy(&rest[..p]).trim(), 16).unwrap_or(0);
            if n == 0 {
                break;
            }
            out.extend_from_slice(&rest[p + 2..p + 2 + n]);
            rest = &rest[p + 2 + n + 2..];
        }
        body = out;
    }
    (status, body)
}

/// One Server-Sent Event.
#[derive(Debug, Clone, PartialEq)]
pub struct SseEvent {
    pub id: Option<u64>,
    pub event: String,
    pub data: serde_json::Value,
}

/// A blocking reader of a daemon's event stream (chunked HTTP/1.1).
pub struct SseClient {
    r: std::io::BufReader<TcpStream>,
    pending: String,
    ended: bool,
}

impl SseClient {
    /// `GET path` with the token and optional `Last-Event-ID`; panics unless 200.
    pub fn open(d: &DaemonProc, path: &str, last_event_id: Option<u64>) -> SseClient {
        let mut s = TcpStream::connect(&d.addr).expect("connect");
        s.set_read_timeout(Some(Duration::from_secs(60)))
            .expect("timeout");
        let mut head = format!(
            "GET {path} HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer {}\r\nAccept: text/event-stream\r\n",
            d.token
        );
        if let Some(id) = last_event_id {
            head.push_str(&format!("Last-Event-ID: {id}\r\n"));
        }
        head.push_str("\r\n");
        s.write_all(head.as_bytes()).expect("write");
        let mut r = std::io::BufReader::new(s);
        let mut status = String::new();
        r.read_line(&mut status).expect("status line");
        assert!(status.contains(" 200 "), "event stream refused: {status}");
        loop {
            let mut l = String::new();
            r.read_line(&mut l).expect("header");
            if l == "\r\n" || l.is_empty() {
                break;
            }
        }
        SseClient {
            r,
            pending: String::new(),
            ended: false,
        }
    }

    /// The next event (comments skipped); None when the stream ended.
    pub fn next(&mut self) -> Option<SseEvent> {
        loop {
            if let Some(end) = self.pending.find("\n\n") {
                let block: String = self.pending.drain(..end + 2).collect();
                let (mut id, mut event, mut data) = (None, String::new(), String::new());
                for line in block.lines() {
                    if let Some(v) = line.strip_prefix("id: ") {
                        id = v.parse().ok();
                    } else if let Some(v) = line.strip_prefix("event: ") {
                        event = v.to_string();
                    } else if let Some(v) = line.strip_prefix("data: ") {
                        data.push_str(v);
                    }
                }
                if event.is_empty() {
                    continue; // a comment (heartbeat)
                }
                let data = serde_json::from_str(&data).unwrap_or(serde_json::Value::Null);
                return Some(SseEvent { id, event, data });
            }
            if self.ended {
                return None;
            }
            // One chunk: size line, data, CRLF.
            let mut size = String::new();
            match self.r.read_line(&mut size) {
                Ok(0) => {
                    self.ended = true;
                    continue;
                }
                Ok(_) => {}
                Err(e) => panic!("reading the event stream: {e}"),
            }
            let n = usize::from_str_radix(size.trim(), 16)
                .unwrap_or_else(|_| panic!("bad chunk size line {size:?}"));
            if n == 0 {
                self.ended = true;
                continue;
            }
            let mut buf = vec![0u8; n + 2];
            if let Err(e) = self.r.read_exact(&mut buf) {
                panic!("reading a chunk of the event stream: {e}");
            }
            self.pending.push_str(&String::from_utf8_lossy(&buf[..n]));
        }
    }

    /// Reads events until `f` says stop; all events read, in order.
    pub fn until(&mut self, mut f: impl FnMut(&SseEvent) -> bool) -> Vec<SseEvent> {
        let mut seen = Vec::new();
        while let Some(e) = self.next() {
            let stop = f(&e);
            seen.push(e);
            if stop {
                break;
            }
        }
        seen
    }
}
