//! `kubegate workspace-agent`: the small HTTP/JSON server in a session
//! pod's `workspace` container that owns the workspace folder (docs/agent.md).
//! The daemon seeds, syncs, reads and snapshots a session's files only through it.
//!
//! - `wire.rs` ([`wire`]): the protocol both ends share — version, headers,
//!   port, token variable, limits, JSON bodies, and the path rules
//!   ([`wire::paths`]). It is the only part of `agent` the daemon's
//!   session and runner code import.
//! - `fs/` ([`fs`]): the folder itself: tree with hashes, atomic writes,
//!   deletes, reads, snapshot, limits; every path walked without following
//!   links.
//! - here: the routes on an `http::Server` (threads `agent-listen`,
//!   `agent-conn`), the bearer token (checked from the head), the command
//!   line ([`parse_args`], read with lexopt; refused with the binary's one
//!   [`UsageError`]).
//!
//! The token comes from `KUBEGATE_WORKSPACE_TOKEN` ([`wire::TOKEN_ENV`]) and
//! is kept only as its SHA-256 digest, compared in constant time; it is
//! never logged. Clients send it as `Authorization: Bearer TOKEN` or,
//! through the API server's pod proxy (which consumes `Authorization` as
//! the daemon's own credential and drops it), as
//! `X-Kubegate-Agent-Token: TOKEN` ([`wire::TOKEN_HEADER`]).

pub mod fs;
pub mod wire;

use crate::api::{ApiError, Code};
use crate::exit::UsageError;
use crate::http::{Handler, HttpError, Reply, Request, Response, Server, ServerConfig};
use crate::token::{self, TokenDigest};
use base64::Engine as _;
use fs::{FileWrite, Workspace};
use serde_json::json;
use std::io::Write as _;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;
use wire::paths;
use wire::{
    ApplyRequest, ApplyResult, Encoding, FileContent, Snapshot, SnapshotFile, Tree, TreeEntry,
    VersionInfo,
};
use wire::{Limits, AGENT_PROTOCOL, DEFAULT_PORT, PROTOCOL_HEADER, TOKEN_ENV, TOKEN_HEADER};

/// The command line of `kubegate workspace-agent`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Options {
    pub listen: SocketAddr,
    pub root: PathBuf,
    pub limits: Limits,
}

impl Default for Options {
    fn default() -> Self {
        Options {
            listen: SocketAddr::from(([127, 0, 0, 1], DEFAULT_PORT)),
            root: PathBuf::from("."),
            limits: Limits::default(),
        }
    }
}

pub const USAGE: &str = "usage: kubegate workspace-agent [--listen ADDR] [--root DIR]
                                 [--max-file-bytes N] [--max-files N] [--max-total-bytes N]

Serves the workspace folder DIR (default: the current folder) over HTTP/JSON
on ADDR (default 127.0.0.1:8099; in a session pod, $(POD_IP):8099). The
bearer token is read from the environment variable KUBEGATE_WORKSPACE_TOKEN
(required). Limits default to 8 MiB per file, 10,000 files, 64 MiB in total.
";

/// Parses the arguments after `workspace-agent` (with lexopt, as every
/// command of the binary: `--flag V` or `--flag=V`). `Ok(None)` is
/// `--help`. A refusal is the binary's one [`UsageError`] (exit 2, with
/// [`USAGE`]); its `Display` is the line printed after the program name.
pub fn parse_args(args: &[String]) -> Result<Option<Options>, UsageError> {
    use lexopt::prelude::*;
    let unknown = |a: &str| UsageError(format!("unknown option {a:?}"));
    let mut o = Options::default();
    let mut p = lexopt::Parser::from_args(args);
    while let Some(arg) = p.next()? {
        let flag = match &arg {
            Short('h') | Long("help") => return Ok(None),
            Long(name) => format!("--{name}"),
            Short(c) => return Err(unknown(&format!("-{c}"))),
            Value(v) => return Err(unknown(&v.to_string_lossy())),
        };
        let value = p
            .value()
            .map_err(|_| UsageError(format!("{flag} needs a value")))
            .and_then(|v| v.string().map_err(UsageError::from));
        let positive = |v: String| -> Result<u64, UsageError> {
            match v.parse::<u64>() {
                Ok(n) if n > 0 => Ok(n),
                _ => Err(UsageError(format!(
                    "{flag} {v:?}: expected a positive whole number"
                ))),
            }
        };
        match flag.as_str() {
            "--listen" => {
                let v = value?;
                o.listen = v
                    .parse::<SocketAddr>()
                    .map_err(|e| UsageError(format!("--listen {v:?}: {e} (expected IP:PORT)")))?;
            }
            "--root" => {
                let v = value?;
                if v.is_empty() {
                    return Err(UsageError("--root must not be empty".into()));
                }
                o.root = PathBuf::from(v);
            }
            "--max-file-bytes" => o.limits.max_file_bytes = positive(value?)?,
            "--max-files" => o.limits.max_files = positive(value?)?,
            "--max-total-bytes" => o.limits.max_total_bytes = positive(value?)?,
            _ => return Err(unknown(&flag)),
        }
    }
    Ok(Some(o))
}

/// The HTTP handler: authentication, routing, and the JSON bodies.
pub struct Agent {
    ws: Workspace,
    token_digest: TokenDigest,
}

fn b64() -> base64::engine::GeneralPurpose {
    base64::engine::general_purpose::STANDARD
}

fn json_ok(v: serde_json::Value) -> Response {
    Response::json(200, v.to_string().into_bytes())
}

fn json_body<T: serde::Serialize>(v: &T) -> Response {
    match serde_json::to_vec(v) {
        Ok(b) => Response::json(200, b),
        Err(e) => api_error(&ApiError::new(Code::Internal, format!("encoding: {e}"))),
    }
}

/// An [`ApiError`] as its answer: the status of its code, the JSON shape.
fn api_error(e: &ApiError) -> Response {
    e.response()
}

/// The routes behind the token, and their methods.
const ROUTES: &[(&str, &[&str])] = &[
    ("/workspace", &["GET", "POST"]),
    ("/workspace/file", &["GET"]),
    ("/workspace/snapshot", &["GET"]),
    ("/version", &["GET"]),
];

impl Agent {
    /// An agent over `ws` that accepts `token` (kept as its digest).
    pub fn new(ws: Workspace, token: &str) -> Agent {
        Agent {
            ws,
            token_digest: token::digest(token),
        }
    }

    fn authenticate(&self, req: &Request) -> Result<(), ApiError> {
        let token = req
            .bearer_token()
            .or_else(|| req.header(TOKEN_HEADER).map(str::trim));
        let ok = token.is_some_and(|t| token::same_digest(&token::digest(t), &self.token_digest));
        if ok {
            Ok(())
        } else {
            Err(ApiError::new(
                Code::Unauthorized,
                "a valid bearer token is required (Authorization: Bearer TOKEN, \
                 or X-Kubegate-Agent-Token: TOKEN)",
            ))
        }
    }

    fn route(&self, req: &Request) -> Result<Response, ApiError> {
        // Authenticate first: unknown routes tell nothing to strangers.
        self.authenticate(req)?;
        let path = req.path.as_str();
        let Some(&(_, methods)) = ROUTES.iter().find(|(p, _)| *p == path) else {
            return Err(ApiError::new(Code::NotFound, format!("no route {path}")));
        };
        if !methods.contains(&req.method.as_str()) {
            return Err(ApiError::new(
                Code::MethodNotAllowed,
                format!("{path} accepts {} only", methods.join(", ")),
            ));
        }
        match (req.method.as_str(), path) {
            ("GET", "/version") => Ok(json_body(&VersionInfo {
                protocol: AGENT_PROTOCOL,
                version: env!("CARGO_PKG_VERSION").into(),
            })),
            ("GET", "/workspace") => self.tree(),
            ("POST", "/workspace") => self.apply(&req.body),
            ("GET", "/workspace/file") => self.file(req),
            ("GET", "/workspace/snapshot") => self.snapshot(),
            _ => Err(ApiError::new(Code::NotFound, format!("no route {path}"))),
        }
    }

    fn tree(&self) -> Result<Response, ApiError> {
        let files = self
            .ws
            .tree()?
            .into_iter()
            .map(|(path, hash)| TreeEntry { path, hash })
            .collect();
        Ok(json_body(&Tree { files }))
    }

    fn snapshot(&self) -> Result<Response, ApiError> {
        let files = self
            .ws
            .snapshot()?
            .into_iter()
            .map(|f| SnapshotFile {
                content: b64().encode(&f.content),
                path: f.path,
                hash: f.hash,
                encoding: Encoding::Base64,
            })
            .collect();
        Ok(json_body(&Snapshot { files }))
    }

    fn file(&self, req: &Request) -> Result<Response, ApiError> {
        let raw = req.query("path").ok_or_else(|| {
            ApiError::new(Code::BadRequest, "the query parameter path is required")
        })?;
        let enc = match req.query("encoding") {
            None => Encoding::Utf8,
            Some(e) => Encoding::parse(e).ok_or_else(|| {
                ApiError::new(
                    Code::BadRequest,
                    format!("encoding {e:?}: expected utf8 or base64"),
                )
            })?,
        };
        let path =
            paths::normalize(raw).map_err(|e| ApiError::new(Code::InvalidPath, e.to_string()))?;
        let bytes = self.ws.read(&path)?;
        let size = bytes.len();
        let content = match enc {
            Encoding::Base64 => b64().encode(&bytes),
            Encoding::Utf8 => String::from_utf8(bytes).map_err(|_| {
                ApiError::new(
                    Code::BadRequest,
                    format!("{path:?} is not valid UTF-8 text; ask for it with encoding=base64"),
                )
            })?,
        };
        Ok(json_body(&FileContent {
            content,
            size: size as u64,
        }))
    }

    /// `POST /workspace`: parse, normalise and decode everything, then hand
    /// the whole plan to `Workspace::apply`, which checks before changing.
    fn apply(&self, body: &[u8]) -> Result<Response, ApiError> {
        let bad = |m: String| ApiError::new(Code::BadRequest, format!("request body: {m}"));
        let value: serde_json::Value =
            serde_json::from_slice(body).map_err(|e| bad(e.to_string()))?;
        // serde would also read a struct from an array (`[]`, `[[p, c]]`):
        // only objects are accepted.
        if !value.is_object() {
            return Err(bad("expected a JSON object".into()));
        }
        if let Some(items) = value.get("write").and_then(|w| w.as_array()) {
            if let Some(i) = items.iter().position(|w| !w.is_object()) {
                return Err(bad(format!("write[{i}]: expected an object")));
            }
        }
        let body: ApplyRequest = serde_json::from_value(value).map_err(|e| bad(e.to_string()))?;
        let items = body.write.unwrap_or_default();
        let deletes_raw = body.delete.unwrap_or_default();
        let norm = |raw: &str| {
            paths::normalize(raw).map_err(|e| ApiError::new(Code::InvalidPath, e.to_string()))
        };
        let mut deletes = Vec::with_capacity(deletes_raw.len());
        for d in &deletes_raw {
            deletes.push(norm(d)?);
        }
        let mut writes = Vec::with_capacity(items.len());
        for w in &items {
            writes.push(norm(&w.path)?);
        }
        let max = self.ws.limits().max_file_bytes;
        let mut files = Vec::with_capacity(items.len());
        for (w, path) in items.into_iter().zip(writes) {
            let content = match w.encoding.unwrap_or_default() {
                Encoding::Utf8 => w.content.into_bytes(),
                Encoding::Base64 => {
                    // Decoded size is at most 3/4 of the text: refuse an
                    // oversized file before decoding it.
                    if (w.content.len() as u64 / 4).saturating_mul(3) > max.saturating_add(3) {
                        return Err(ApiError::new(
                            Code::WorkspaceLimit,
                            format!("{path:?} is over the {max} byte file limit"),
                        ));
                    }
                    b64().decode(w.content.as_bytes()).map_err(|e| {
                        ApiError::new(
                            Code::BadRequest,
                            format!("{path:?}: content is not valid base64: {e}"),
                        )
                    })?
                }
            };
            files.push(FileWrite { path, content });
        }
        let a = self.ws.apply(files, deletes)?;
        Ok(json_body(&ApplyResult {
            written: a.written as u64,
            deleted: a.deleted as u64,
        }))
    }
}

impl Handler for Agent {
    /// The token is checked from the head: a stranger's body (up to the
    /// agent's body cap) is never read.
    fn admit(&self, head: &Request) -> crate::http::Admission {
        if (head.method == "GET" && head.path == "/healthz") || self.authenticate(head).is_ok() {
            return crate::http::Admission::Admit(crate::http::Admit::default());
        }
        let e = ApiError::new(
            Code::Unauthorized,
            "a valid bearer token is required (Authorization: Bearer TOKEN, \
             or X-Kubegate-Agent-Token: TOKEN)",
        );
        crate::http::Admission::Refuse(
            api_error(&e).with_header(PROTOCOL_HEADER, &AGENT_PROTOCOL.to_string()),
        )
    }

    fn handle(&self, req: Request) -> Reply {
        let resp = match (req.method.as_str(), req.path.as_str()) {
            ("GET", "/healthz") => json_ok(json!({"status": "ok"})),
            _ => match self.route(&req) {
                Ok(r) => r,
                Err(e) => {
                    if e.code == Code::Internal {
                        log::error!("{} {}: {}", req.method, req.path, e.message);
                    } else {
                        log::debug!("{} {}: {}", req.method, req.path, e);
                    }
                    api_error(&e)
                }
            },
        };
        resp.with_header(PROTOCOL_HEADER, &AGENT_PROTOCOL.to_string())
            .into()
    }

    fn error_response(&self, err: &HttpError) -> Response {
        ApiError::http_response(err).with_header(PROTOCOL_HEADER, &AGENT_PROTOCOL.to_string())
    }
}

/// The agent's HTTP server settings: few connections (32; each may carry a
/// body of up to `body_cap` bytes), a body cap from the limits, time for a
/// large body to arrive through the API server's proxy, 1 MiB thread
/// stacks (folder walks recurse up to `paths::MAX_DEPTH` levels).
pub fn server_config(limits: &Limits) -> ServerConfig {
    ServerConfig {
        max_connections: 32,
        max_body_bytes: limits.body_cap(),
        request_read_timeout: Duration::from_secs(120),
        // Folder walks and deletes recurse up to paths::MAX_DEPTH levels.
        thread_stack_bytes: 1 << 20,
        name: "agent",
        ..ServerConfig::default()
    }
}

/// `kubegate workspace-agent ARGS`: returns the exit code (0 after
/// SIGTERM/SIGINT, 2 for usage or a missing token, 1 when it cannot start).
pub fn agent_main(args: &[String]) -> i32 {
    let opts = match parse_args(args) {
        Ok(Some(o)) => o,
        Ok(None) => {
            print!("{USAGE}");
            return 0;
        }
        Err(m) => {
            eprintln!("kubegate workspace-agent: {m}\n\n{USAGE}");
            return 2;
        }
    };
    let token = match std::env::var(TOKEN_ENV) {
        Ok(t) if !t.trim().is_empty() => t,
        _ => {
            eprintln!("kubegate workspace-agent: the environment variable {TOKEN_ENV} must hold the bearer token");
            return 2;
        }
    };
    let mut signals = match crate::signals::install(
        "kubegate workspace-agent",
        &[signal_hook::consts::SIGINT, signal_hook::consts::SIGTERM],
    ) {
        Ok(s) => s,
        Err(code) => return code,
    };
    let ws = match Workspace::open(&opts.root, opts.limits) {
        Ok(ws) => ws,
        Err(e) => {
            eprintln!(
                "kubegate workspace-agent: --root {}: {e} (expected an existing folder)",
                opts.root.display()
            );
            return 2;
        }
    };
    match ws.sweep_temps() {
        Ok(0) => {}
        Ok(n) => log::info!("removed {n} leftover temporary files"),
        Err(e) => log::warn!("sweeping leftover temporary files: {e}"),
    }
    let root = ws.root_path().display().to_string();
    let handler = Arc::new(Agent::new(ws, token.trim()));
    let server = match Server::bind(opts.listen, server_config(&opts.limits), handler) {
        Ok(s) => s,
        Err(e) => {
            eprintln!("kubegate workspace-agent: binding {}: {e}", opts.listen);
            return 1;
        }
    };
    log::info!(
        "serving {root} (limits: {} bytes per file, {} files, {} bytes in total)",
        opts.limits.max_file_bytes,
        opts.limits.max_files,
        opts.limits.max_total_bytes
    );
    {
        let mut out = std::io::stdout().lock();
        let _ = writeln!(
            out,
            "kubegate workspace-agent listening on http://{}",
            server.local_addr()
        );
        let _ = out.flush();
    }
    if let Some(sig) = signals.forever().next() {
        log::info!("signal {sig}: stopping");
    }
    server.shutdown();
    0
}

#[cfg(test)]
mod tests {
    use super::*;

    fn args(v: &[&str]) -> Vec<String> {
        v.iter().map(|s| s.to_string()).collect()
    }

    #[test]
    fn command_line() {
        let o = parse_args(&[]).unwrap().unwrap();
        assert_eq!(o, Options::default());
        assert_eq!(o.listen.to_string(), "127.0.0.1:8099");
        let o = parse_args(&args(&[
            "--listen",
            "10.1.2.3:8099",
            "--root=/ws",
            "--max-file-bytes",
            "5",
            "--max-files=6",
            "--max-total-bytes",
            "7",
        ]))
        .unwrap()
        .unwrap();
        assert_eq!(o.listen.to_string(), "10.1.2.3:8099");
        assert_eq!(o.root, PathBuf::from("/ws"));
        assert_eq!(
            o.limits,
            Limits {
                max_file_bytes: 5,
                max_files: 6,
                max_total_bytes: 7
            }
        );
        assert_eq!(parse_args(&args(&["--help"])).unwrap(), None);
        for bad in [
            &["--listen"][..],
            &["--listen", "localhost"],
            &["--max-files", "0"],
            &["--max-files", "-1"],
            &["--max-total-bytes=x"],
            &["--root", ""],
            &["--frobnicate"],
        ] {
            assert!(parse_args(&args(bad)).is_err(), "{bad:?}");
        }
        let text = |v: &[&str]| parse_args(&args(v)).unwrap_err().to_string();
        assert_eq!(text(&["--listen"]), "--listen needs a value");
        assert_eq!(text(&["--frobnicate"]), "unknown option \"--frobnicate\"");
        assert_eq!(text(&["stray"]), "unknown option \"stray\"");
        assert_eq!(
            text(&["--max-files=0"]),
            "--max-files \"0\": expected a positive whole number"
        );
        assert_eq!(text(&["--root="]), "--root must not be empty");
    }
}
