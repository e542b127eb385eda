//! The connection to the daemon, on `http`'s client half
//! ([`crate::http::client`]: TCP, TLS, one deadline for connect + TLS +
//! request + answer), with the TLS settings built once from the CA file
//! (`kube::tls_client`'s rustls config, or native-tls under the
//! `native-tls` feature); then either a small HTTP/1.1 request
//! (`Connection: close`, body bounded by [`MAX_BODY`]) or a WebSocket
//! upgrade offering `kubegate.exec.v1`. The token goes in the
//! `Authorization` header only, never in a URL, a log or an error.

use super::args::{CommonArgs, ExecArgs};
use super::CliError;
use crate::api::ApiError;
use crate::exec::frames::SUBPROTOCOL;
use crate::exit::codes;
use crate::http::client::{
    self as http_client, check_accept, close_request, upgrade_request, ClientTls, DialError,
};
use crate::http::endpoint::{parse_server, pct, Endpoint};
use crate::http::response::{Head, Limits};
use crate::http::stream::ClientSocket;
use crate::kube::connection::{Anonymous, Connection, TlsMaterial};
use crate::kube::remote::connect::{client_tls, ws_config};
use crate::kube::remote::RemoteError;
use std::fmt;
use std::sync::Arc;
use std::time::{Duration, Instant};
use tungstenite::handshake::client::generate_key;
use tungstenite::WebSocket;

/// Deadline for connect + TLS + request + the whole answer (HTTP) or the
/// 101 (WebSocket).
pub const CONNECT_TIMEOUT: Duration = Duration::from_secs(30);

/// Largest answer body kept (the daemon's answers are small JSON; a
/// larger one is refused, not cut).
pub const MAX_BODY: usize = 1024 * 1024;

/// Where and how to reach the daemon.
pub struct Client {
    server: String,
    ep: Endpoint,
    /// None: requests without `Authorization` (the login's own requests:
    /// the daemon's `/v1/auth/config`, the issuer's endpoints).
    token: Option<String>,
    /// What the server is, for messages: "the daemon", "the issuer".
    what: &'static str,
    /// The flag that gives this server's CA file (`--ca-file` for the
    /// daemon, `--issuer-ca-file` for the issuer), for messages.
    ca_flag: &'static str,
    /// The TLS settings of an https server (none for http), built once.
    tls: Option<ClientTls>,
}

impl std::fmt::Debug for Client {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Client")
            .field("server", &self.server)
            .finish_non_exhaustive()
    }
}

fn config(m: impl Into<String>) -> CliError {
    CliError::new(codes::CONFIG, m)
}

impl Client {
    /// Resolves the token (reading the token file), the CA file and the
    /// TLS settings.
    pub fn new(c: &CommonArgs) -> Result<Client, CliError> {
        let token = c.token()?;
        Client::build(
            &c.server,
            Some(token),
            c.ca_file.as_deref(),
            "the daemon",
            "--ca-file",
        )
    }

    /// A client that sends no token to the daemon `server`, trusting
    /// `ca_file` (`--ca-file`) or the web PKI roots.
    pub fn anonymous(server: &str, ca_file: Option<&std::path::Path>) -> Result<Client, CliError> {
        Client::build(server, None, ca_file, "the daemon", "--ca-file")
    }

    /// A client that sends no token to one of the issuer's endpoint URLs
    /// (its path is the prefix: [`Client::path`] of `""` is the URL's own
    /// path), trusting only the certificates of `ca_file`
    /// (`kubegate login --issuer-ca-file`) when given, else the web PKI
    /// roots.
    pub fn issuer(url: &str, ca_file: Option<&std::path::Path>) -> Result<Client, CliError> {
        Client::build(url, None, ca_file, "the issuer", "--issuer-ca-file")
    }

    fn build(
        server: &str,
        token: Option<String>,
        ca_file: Option<&std::path::Path>,
        what: &'static str,
        ca_flag: &'static str,
    ) -> Result<Client, CliError> {
        let ep = parse_server(server).map_err(CliError::usage)?;
        let mut tls = TlsMaterial::default();
        if let Some(path) = ca_file {
            let pem = std::fs::read(path)
                .map_err(|e| config(format!("{ca_flag} {}: {e}", path.display())))?;
            tls.ca_certs = crate::http::tls::certs_from_pem(&pem)
                .map_err(|e| config(format!("{ca_flag} {}: {e}", path.display())))?;
        }
        let server = server.trim_end_matches('/').to_string();
        let conn = Connection {
            server: server.clone(),
            tls,
            // The token goes into our own requests; the TLS settings need
            // no credentials (no client certificate).
            credentials: Arc::new(Anonymous),
            namespace: String::new(),
            impersonate: None,
        };
        let tls = client_tls(&conn, &ep).map_err(|e| match e {
            // A CA that rustls refuses is a configuration problem.
            RemoteError::Tls(e) => config(format!("TLS settings: {e}")),
            other => config(format!("TLS settings: {other}")),
        })?;
        Ok(Client {
            server,
            ep,
            token,
            what,
            ca_flag,
            tls,
        })
    }

    pub fn server(&self) -> &str {
        &self.server
    }

    /// The path with the server's prefix (`https://h/gw` -> `/gw/v1/...`).
    pub fn path(&self, p: &str) -> String {
        let full = format!("{}{p}", self.ep.prefix);
        if full.is_empty() {
            "/".to_string()
        } else {
            full
        }
    }

    fn unreachable(&self, e: impl fmt::Display) -> CliError {
        CliError::new(
            codes::UNREACHABLE,
            format!("cannot reach {} at {}: {e}", self.what, self.server()),
        )
    }

    fn protocol(&self, e: impl fmt::Display) -> CliError {
        CliError::new(codes::PROTOCOL, format!("{}: {e}", self.server()))
    }

    /// A connection or exchange failure: TLS settings the library refuses
    /// are configuration, an unreadable answer is a protocol error, the
    /// rest is an unreachable daemon.
    fn dial_error(&self, e: DialError) -> CliError {
        match e {
            DialError::TlsSetup(m) => config(format!("TLS settings: TLS setup: {m}")),
            DialError::Response(e) => self.protocol(e),
            // Most often a certificate signed by a CA we do not trust: say
            // which flag gives it.
            e @ DialError::TlsHandshake { .. } => self.unreachable(format_args!(
                "{e} (a certificate from a private CA is trusted with {} F)",
                self.ca_flag
            )),
            other => self.unreachable(other),
        }
    }

    fn dial(&self, deadline: Instant) -> Result<ClientSocket, CliError> {
        http_client::dial(&self.ep, self.tls.as_ref(), deadline).map_err(|e| self.dial_error(e))
    }

    fn send(
        &self,
        sock: &mut ClientSocket,
        bytes: &[u8],
        deadline: Instant,
    ) -> Result<(), CliError> {
        http_client::write_all(sock, bytes, deadline).map_err(|e| {
            self.unreachable(format_args!(
                "sending the request to {}: {e}",
                self.ep.authority
            ))
        })
    }

    fn head(
        &self,
        sock: &mut ClientSocket,
        deadline: Instant,
    ) -> Result<(Head, Vec<u8>), CliError> {
        http_client::read_head(sock, &self.ep, &Limits::default(), deadline)
            .map_err(|e| self.dial_error(e))
    }

    /// The whole body after `head` (at most [`MAX_BODY`] bytes kept).
    fn body(sock: &mut ClientSocket, head: &Head, rest: &[u8], deadline: Instant) -> Vec<u8> {
        http_client::read_body(sock, head, rest, MAX_BODY, deadline)
    }

    /// The error a non-success answer carries (`{"error": {...}}`), the
    /// connection closed.
    fn refused(sock: &mut ClientSocket, head: &Head, rest: &[u8], deadline: Instant) -> CliError {
        let body = Self::body(sock, head, rest, deadline);
        sock.send_close_notify();
        Self::answer_error(head, &body)
    }

    /// The error a non-success answer carries (`{"error": {...}}`).
    fn answer_error(head: &Head, body: &[u8]) -> CliError {
        let e = ApiError::from_body(head.code, body);
        CliError {
            code: e.code.as_str().to_string(),
            message: e.message,
        }
    }

    /// `GET path` with the bearer token: the whole body.
    /// Non-2xx answers become the daemon's error.
    pub fn get(&self, path: &str) -> Result<Vec<u8>, CliError> {
        self.call("GET", path, None)
    }

    /// `METHOD path` with the bearer token and an optional JSON body: the
    /// whole answer body. Non-2xx answers become the daemon's error.
    pub fn call(&self, method: &str, path: &str, body: Option<&[u8]>) -> Result<Vec<u8>, CliError> {
        issuer_retry(|| self.call_once(method, path, body))
    }

    fn call_once(
        &self,
        method: &str,
        path: &str,
        body: Option<&[u8]>,
    ) -> Result<Vec<u8>, CliError> {
        let deadline = Instant::now() + CONNECT_TIMEOUT;
        let mut sock = self.dial(deadline)?;
        let body_part = body.map(|b| ("application/json", b));
        let bytes = self.request(method, path, "application/json", &[], body_part);
        self.send(&mut sock, &bytes, deadline)?;
        let (head, rest) = self.head(&mut sock, deadline)?;
        let body = Self::body(&mut sock, &head, &rest, deadline);
        sock.send_close_notify();
        if !(200..300).contains(&head.code) {
            return Err(Self::answer_error(&head, &body));
        }
        if body.len() >= MAX_BODY {
            return Err(CliError::new(
                codes::PROTOCOL,
                format!("the answer is larger than {MAX_BODY} bytes"),
            ));
        }
        Ok(body)
    }

    /// `METHOD path` with an optional body (content type and bytes): the
    /// answer's status and whole body, whatever the status (the OAuth
    /// endpoints answer errors as 400 with their own JSON). A body over
    /// [`MAX_BODY`] is a protocol error.
    pub fn exchange(
        &self,
        method: &str,
        path: &str,
        body: Option<(&str, &[u8])>,
    ) -> Result<(u16, Vec<u8>), CliError> {
        let deadline = Instant::now() + CONNECT_TIMEOUT;
        let mut sock = self.dial(deadline)?;
        let bytes = self.request(method, path, "application/json", &[], body);
        self.send(&mut sock, &bytes, deadline)?;
        let (head, rest) = self.head(&mut sock, deadline)?;
        let body = Self::body(&mut sock, &head, &rest, deadline);
        sock.send_close_notify();
        if body.len() >= MAX_BODY {
            return Err(self.protocol(format_args!("the answer is larger than {MAX_BODY} bytes")));
        }
        Ok((head.code, body))
    }

    /// One request with the headers every request of ours carries
    /// (`Connection: close`, `Accept`, our `User-Agent`, the token), then
    /// `extra` and the body.
    fn request(
        &self,
        method: &str,
        path: &str,
        accept: &str,
        extra: &[(&str, &str)],
        body: Option<(&str, &[u8])>,
    ) -> Vec<u8> {
        let agent = concat!("kubegate/", env!("CARGO_PKG_VERSION"));
        let bearer = self.token.as_ref().map(|t| format!("Bearer {t}"));
        let mut headers = vec![("Accept", accept), ("User-Agent", agent)];
        if let Some(b) = &bearer {
            headers.push(("Authorization", b.as_str()));
        }
        headers.extend_from_slice(extra);
        close_request(method, &self.path(path), &self.ep.authority, &headers, body)
    }

    /// `GET path` with the token and the `extra` headers, for an answer read as it comes (an event stream): the
    /// socket, the head (2xx; otherwise the daemon's error) and the body
    /// bytes read past the head.
    pub fn open_stream(
        &self,
        path: &str,
        accept: &str,
        extra: &[(&str, &str)],
    ) -> Result<(ClientSocket, Head, Vec<u8>), CliError> {
        issuer_retry(|| self.open_stream_once(path, accept, extra))
    }

    fn open_stream_once(
        &self,
        path: &str,
        accept: &str,
        extra: &[(&str, &str)],
    ) -> Result<(ClientSocket, Head, Vec<u8>), CliError> {
        let deadline = Instant::now() + CONNECT_TIMEOUT;
        let mut sock = self.dial(deadline)?;
        let req = self.request("GET", path, accept, extra, None);
        self.send(&mut sock, &req, deadline)?;
        let (head, rest) = self.head(&mut sock, deadline)?;
        if !(200..300).contains(&head.code) {
            return Err(Self::refused(&mut sock, &head, &rest, deadline));
        }
        Ok((sock, head, rest))
    }

    /// Opens the interactive exec WebSocket at `path_and_query` (already
    /// prefixed by [`Client::path`]). Errors before the upgrade are the
    /// daemon's JSON errors.
    pub fn open_exec(&self, path_and_query: &str) -> Result<WebSocket<ClientSocket>, CliError> {
        self.open_ws(path_and_query, SUBPROTOCOL)
    }

    /// Opens a WebSocket at `path_and_query` (already prefixed by
    /// [`Client::path`]) offering `subprotocol` only; the server must
    /// choose it.
    pub fn open_ws(
        &self,
        path_and_query: &str,
        subprotocol: &str,
    ) -> Result<WebSocket<ClientSocket>, CliError> {
        issuer_retry(|| self.open_ws_once(path_and_query, subprotocol))
    }

    fn open_ws_once(
        &self,
        path_and_query: &str,
        subprotocol: &str,
    ) -> Result<WebSocket<ClientSocket>, CliError> {
        let deadline = Instant::now() + CONNECT_TIMEOUT;
        let mut sock = self.dial(deadline)?;
        let key = generate_key();
        let agent = concat!("kubegate/", env!("CARGO_PKG_VERSION"));
        let auth = self.token.as_ref().map(|t| format!("Bearer {t}"));
        let mut headers = vec![("User-Agent", agent)];
        if let Some(a) = &auth {
            headers.push(("Authorization", a.as_str()));
        }
        let req = upgrade_request(
            path_and_query,
            &self.ep.authority,
            &key,
            Some(subprotocol),
            &headers,
        );
        self.send(&mut sock, &req, deadline)?;
        let (head, rest) = self.head(&mut sock, deadline)?;
        if head.code != 101 {
            return Err(Self::refused(&mut sock, &head, &rest, deadline));
        }
        check_accept(&head, &key).map_err(|m| self.protocol(m))?;
        let chosen: Vec<&str> = head.values("sec-websocket-protocol").collect();
        if chosen != [subprotocol] {
            return Err(CliError::new(
                codes::PROTOCOL,
                format!(
                    "{}: the server did not choose the {subprotocol} subprotocol (chose {chosen:?}); is it a kubegate daemon?",
                    self.server()
                ),
            ));
        }
        http_client::into_websocket(sock, rest, &self.ep, ws_config())
            .map_err(|e| self.dial_error(e))
    }
}

/// How often, and how far apart, a request refused with
/// `ISSUER_UNAVAILABLE` is sent again.
const ISSUER_RETRIES: u32 = 8;
const ISSUER_RETRY_WAIT: Duration = Duration::from_secs(1);

/// `f` again while the daemon answers `ISSUER_UNAVAILABLE`: it has no key
/// for the token's `kid` yet and is fetching the issuer's keys (right
/// after a rotation or its own start; docs/api.md#authentication). The
/// refusal comes from the request head, before the daemon read a body or
/// did anything, so every request may be repeated. After about 8 s the
/// issuer counts as down and the error stands.
fn issuer_retry<T>(mut f: impl FnMut() -> Result<T, CliError>) -> Result<T, CliError> {
    let mut left = ISSUER_RETRIES;
    loop {
        match f() {
            Err(e) if e.code == "ISSUER_UNAVAILABLE" && left > 0 => {
                left -= 1;
                std::thread::sleep(ISSUER_RETRY_WAIT);
            }
            other => return other,
        }
    }
}

/// The interactive exec request path and query (docs/api.md#exec).
/// `tty` is what is asked of the server (`-t` may be dropped when our stdin
/// is not a terminal).
/// With `size` (a terminal), `cols`/`rows` ask the daemon to size the
/// remote terminal before the command starts.
pub fn exec_query(path: &str, a: &ExecArgs, tty: bool, size: Option<(u16, u16)>) -> String {
    let mut q = vec![
        format!("project={}", pct(&a.project)),
        format!("uid={}", pct(&a.uid)),
        format!("deployment={}", pct(&a.deployment)),
    ];
    if let Some(c) = &a.container {
        q.push(format!("container={}", pct(c)));
    }
    q.extend(a.command.iter().map(|c| format!("command={}", pct(c))));
    q.push(format!("tty={tty}"));
    q.push(format!("stdin={}", a.stdin));
    if let (true, Some((cols, rows))) = (tty, size) {
        q.push(format!("cols={cols}&rows={rows}"));
    }
    format!("{path}?{}", q.join("&"))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cli::args::TokenSource;

    #[test]
    fn an_issuer_being_fetched_is_waited_for_and_nothing_else_is() {
        let err = |code: &str| CliError::new(code, "x");
        let mut calls = 0;
        let r = issuer_retry(|| {
            calls += 1;
            if calls < 3 {
                Err(err("ISSUER_UNAVAILABLE"))
            } else {
                Ok(calls)
            }
        });
        assert_eq!(r.ok(), Some(3));
        let mut calls = 0;
        let r: Result<(), _> = issuer_retry(|| {
            calls += 1;
            Err(err("TOKEN_EXPIRED"))
        });
        assert_eq!((r.unwrap_err().code.as_str(), calls), ("TOKEN_EXPIRED", 1));
    }

    #[test]
    fn query_encodes_every_argument() {
        let mut a = ExecArgs {
            common: CommonArgs {
                server: "http://h".into(),
                token: TokenSource::Value("t".into()),
                ca_file: None,
            },
            stdin: false,
            tty: true,
            container: Some("main".into()),
            project: "demo".into(),
            uid: "demo-uid".into(),
            deployment: "hello".into(),
            command: vec!["sh".into(), "-c".into(), "echo a&b=c +d; exit 7".into()],
        };
        assert_eq!(
            exec_query("/gw/v1/exec/interactive", &a, true, Some((80, 24))),
            "/gw/v1/exec/interactive?project=demo&uid=demo-uid&deployment=hello&container=main&command=sh&command=-c&command=echo%20a%26b%3Dc%20%2Bd%3B%20exit%207&tty=true&stdin=false&cols=80&rows=24"
        );
        a.container = None;
        a.stdin = true;
        a.command = vec!["ls".into()];
        assert_eq!(
            exec_query("/v1/exec/interactive", &a, false, Some((80, 24))),
            "/v1/exec/interactive?project=demo&uid=demo-uid&deployment=hello&command=ls&tty=false&stdin=true"
        );
    }

    #[test]
    fn client_keeps_the_prefix_and_checks_the_ca_file() {
        let mut c = CommonArgs {
            server: "https://gw.example:8443/kg/".into(),
            token: TokenSource::Value("t".into()),
            ca_file: None,
        };
        let client = Client::new(&c).unwrap();
        assert_eq!(client.path("/v1/workspaces"), "/kg/v1/workspaces");
        assert!(!format!("{client:?}").contains("\"t\""));

        c.ca_file = Some("/nonexistent/ca.pem".into());
        let e = Client::new(&c).unwrap_err();
        assert!(
            e.is_config() && e.message.contains("/nonexistent/ca.pem"),
            "{e}"
        );
        let dir = std::env::temp_dir().join(format!("kubegate-cli-ca-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let f = dir.join("ca.pem");
        std::fs::write(&f, "not a pem").unwrap();
        c.ca_file = Some(f);
        let e = Client::new(&c).unwrap_err();
        assert!(e.is_config(), "{e}");
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn a_closed_port_is_unreachable() {
        // Bind then drop: the port is (almost certainly) closed now.
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        let c = CommonArgs {
            server: format!("http://127.0.0.1:{port}"),
            token: TokenSource::Value("t".into()),
            ca_file: None,
        };
        let e = Client::new(&c).unwrap().get("/v1/workspaces").unwrap_err();
        assert_eq!(e.code, codes::UNREACHABLE, "{e}");
        assert!(e.message.contains(&format!("127.0.0.1:{port}")), "{e}");
    }
}
