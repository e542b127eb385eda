//! The connection to the daemon: TCP and TLS through the same code the
//! Kubernetes exec client uses (`kube::remote::connect::dial`, one deadline
//! for connect + TLS + request + answer), then either a small HTTP/1.1 GET
//! (`Connection: close`, body bounded by `handshake::MAX_BODY`) or a
//! WebSocket upgrade offering `kubegate.exec.v1`. The token goes in the
//! `Authorization` header only, never in a URL, a log or an error.

use super::args::{CommonArgs, ExecArgs};
use super::CliError;
use crate::api::ApiError;
use crate::exec::frames::SUBPROTOCOL;
use crate::exit::codes;
use crate::http::client::check_accept;
use crate::http::endpoint::{parse_server, pct, Endpoint};
use crate::http::response::Head;
use crate::http::stream::ClientSocket;
use crate::kube::connection::{Anonymous, Connection, TlsMaterial};
use crate::kube::remote::connect::{self, dial, read_body, read_head};
use crate::kube::remote::handshake::{self, encode_upgrade};
use crate::kube::remote::RemoteError;
use std::sync::Arc;
use std::time::{Duration, Instant};
use tungstenite::handshake::client::generate_key;
use tungstenite::WebSocket;

/// Deadline for connect + TLS + request + the whole answer (HTTP) or the
/// 101 (WebSocket).
pub const CONNECT_TIMEOUT: Duration = Duration::from_secs(30);

/// Where and how to reach the daemon.
pub struct Client {
    conn: Connection,
    ep: Endpoint,
    token: String,
}

impl std::fmt::Debug for Client {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Client")
            .field("server", &self.conn.server)
            .finish_non_exhaustive()
    }
}

fn config(m: impl Into<String>) -> CliError {
    CliError::new(codes::CONFIG, m)
}

impl Client {
    /// Resolves the token (reading the token file) and the CA file.
    pub fn new(c: &CommonArgs) -> Result<Client, CliError> {
        let ep = parse_server(&c.server).map_err(CliError::usage)?;
        let token = c.token()?;
        let mut tls = TlsMaterial::default();
        if let Some(path) = &c.ca_file {
            let pem = std::fs::read(path)
                .map_err(|e| config(format!("--ca-file {}: {e}", path.display())))?;
            tls.ca_certs = crate::http::tls::certs_from_pem(&pem)
                .map_err(|e| config(format!("--ca-file {}: {e}", path.display())))?;
        }
        let conn = Connection {
            server: c.server.trim_end_matches('/').to_string(),
            tls,
            // The token goes into our own requests; `dial` needs no
            // credentials (no client certificate).
            credentials: Arc::new(Anonymous),
            namespace: String::new(),
        };
        Ok(Client { conn, ep, token })
    }

    pub fn server(&self) -> &str {
        &self.conn.server
    }

    /// The path with the server's prefix (`https://h/gw` -> `/gw/v1/...`).
    pub fn path(&self, p: &str) -> String {
        format!("{}{p}", self.ep.prefix)
    }

    fn unreachable(&self, e: RemoteError) -> CliError {
        match e {
            RemoteError::Handshake(m) => {
                CliError::new(codes::PROTOCOL, format!("{}: {m}", self.server()))
            }
            // A CA that rustls refuses is a configuration problem.
            RemoteError::Tls(e) => config(format!("TLS settings: {e}")),
            other => CliError::new(
                codes::UNREACHABLE,
                format!("cannot reach the daemon at {}: {other}", self.server()),
            ),
        }
    }

    fn dial(&self, deadline: Instant) -> Result<ClientSocket, CliError> {
        dial(&self.conn, &self.ep, deadline).map_err(|e| self.unreachable(e))
    }

    fn send(
        &self,
        sock: &mut ClientSocket,
        bytes: &[u8],
        deadline: Instant,
    ) -> Result<(), CliError> {
        connect::write_all(sock, bytes, deadline).map_err(|e| {
            self.unreachable(RemoteError::Transport(format!(
                "sending the request to {}: {e}",
                self.ep.authority
            )))
        })
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
        let deadline = Instant::now() + CONNECT_TIMEOUT;
        let mut sock = self.dial(deadline)?;
        let mut req = self.request_head(method, path, "application/json");
        if let Some(b) = body {
            req.push_str(&format!(
                "Content-Type: application/json\r\nContent-Length: {}\r\n",
                b.len()
            ));
        }
        req.push_str("\r\n");
        let mut bytes = req.into_bytes();
        bytes.extend_from_slice(body.unwrap_or_default());
        self.send(&mut sock, &bytes, deadline)?;
        let (head, rest) =
            read_head(&mut sock, &self.ep, deadline).map_err(|e| self.unreachable(e))?;
        let body = read_body(&mut sock, &head, &rest, deadline);
        sock.send_close_notify();
        if !(200..300).contains(&head.code) {
            return Err(Self::answer_error(&head, &body));
        }
        if body.len() >= handshake::MAX_BODY {
            return Err(CliError::new(
                codes::PROTOCOL,
                format!("the answer is larger than {} bytes", handshake::MAX_BODY),
            ));
        }
        Ok(body)
    }

    /// The request line and the headers every request of ours carries
    /// (`Connection: close`, the token), each line ending in CRLF, without
    /// the blank line that ends the head.
    fn request_head(&self, method: &str, path: &str, accept: &str) -> String {
        format!(
            "{method} {} HTTP/1.1\r\nHost: {}\r\nAccept: {accept}\r\nConnection: close\r\nUser-Agent: kubegate/{}\r\nAuthorization: Bearer {}\r\n",
            self.path(path),
            self.ep.authority,
            env!("CARGO_PKG_VERSION"),
            self.token,
        )
    }

    /// `GET path` with the token and `extra` header lines (each ending in
    /// CRLF), for an answer read as it comes (an event stream): the
    /// socket, the head (2xx; otherwise the daemon's error) and the body
    /// bytes read past the head.
    pub fn open_stream(
        &self,
        path: &str,
        accept: &str,
        extra: &str,
    ) -> Result<(ClientSocket, Head, Vec<u8>), CliError> {
        let deadline = Instant::now() + CONNECT_TIMEOUT;
        let mut sock = self.dial(deadline)?;
        let mut req = self.request_head("GET", path, accept);
        req.push_str(extra);
        req.push_str("\r\n");
        self.send(&mut sock, req.as_bytes(), deadline)?;
        let (head, rest) =
            read_head(&mut sock, &self.ep, deadline).map_err(|e| self.unreachable(e))?;
        if !(200..300).contains(&head.code) {
            let body = read_body(&mut sock, &head, &rest, deadline);
            sock.send_close_notify();
            return Err(Self::answer_error(&head, &body));
        }
        Ok((sock, head, rest))
    }

    /// A connected (and, for https, TLS-established) socket to the daemon,
    /// for a request of the caller's own (the port forwarder's proxying).
    pub fn connect(&self, deadline: Instant) -> Result<ClientSocket, CliError> {
        self.dial(deadline)
    }

    /// Writes `bytes` to a socket from [`Client::connect`] before `deadline`.
    pub fn write(
        &self,
        sock: &mut ClientSocket,
        bytes: &[u8],
        deadline: Instant,
    ) -> Result<(), CliError> {
        self.send(sock, bytes, deadline)
    }

    /// Reads an answer's head from a socket from [`Client::connect`]: the
    /// head and the bytes read past it.
    pub fn read_head(
        &self,
        sock: &mut ClientSocket,
        deadline: Instant,
    ) -> Result<(Head, Vec<u8>), CliError> {
        read_head(sock, &self.ep, deadline).map_err(|e| self.unreachable(e))
    }

    /// A WebSocket to any daemon path (already prefixed by
    /// [`Client::path`]) offering `offer` as it is, with `headers` added;
    /// the socket and the subprotocol chosen.
    pub fn open_ws_any(
        &self,
        path_and_query: &str,
        headers: &[(String, String)],
        offer: Option<&str>,
    ) -> Result<(WebSocket<ClientSocket>, Option<String>), CliError> {
        let deadline = Instant::now() + CONNECT_TIMEOUT;
        let sock = self.dial(deadline)?;
        let scheme = if self.ep.tls { "wss" } else { "ws" };
        let url = format!("{scheme}://{}{path_and_query}", self.ep.authority);
        crate::kube::remote::upgrade_on(
            sock,
            &url,
            headers,
            Some(&self.token),
            offer,
            deadline.saturating_duration_since(Instant::now()),
        )
        .map_err(|e| self.unreachable(e))
    }

    /// `Host` and `Authorization` lines of a request to the daemon (each
    /// ending in CRLF). The token goes nowhere else.
    pub fn host_and_auth_headers(&self) -> String {
        format!(
            "Host: {}\r\nAuthorization: Bearer {}\r\n",
            self.ep.authority, self.token
        )
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
        let deadline = Instant::now() + CONNECT_TIMEOUT;
        let mut sock = self.dial(deadline)?;
        let key = generate_key();
        let req = encode_upgrade(
            path_and_query,
            &self.ep.authority,
            &key,
            subprotocol,
            Some(&self.token),
        );
        self.send(&mut sock, &req, deadline)?;
        let (head, rest) =
            read_head(&mut sock, &self.ep, deadline).map_err(|e| self.unreachable(e))?;
        if head.code != 101 {
            let body = read_body(&mut sock, &head, &rest, deadline);
            sock.send_close_notify();
            return Err(Self::answer_error(&head, &body));
        }
        check_accept(&head, &key).map_err(|m| self.unreachable(RemoteError::Handshake(m)))?;
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
        connect::into_websocket(sock, rest, &self.ep, None).map_err(|e| self.unreachable(e))
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
