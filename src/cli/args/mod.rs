//! Argument parsing of the client commands, pure: the environment comes in
//! as a function, nothing is read from disk (the token file is read later,
//! by [`CommonArgs::token`]). The help texts: [`help`].
//!
//! Style (lexopt's): `--flag VALUE` or `--flag=VALUE`; short flags cluster
//! (`-it`, `-itc main`, `-cmain`, `-w=p/u`). For `exec`, options may come
//! before or after DEPLOYMENT, and everything after the first `--` is the
//! command, untouched (so the command's own flags never reach our parser).

pub mod help;

use super::CliError;
use crate::exit::{self, codes, Parsed};
use crate::http::endpoint::parse_server;
use lexopt::prelude::*;
use std::path::PathBuf;

pub const DEFAULT_SERVER: &str = "http://127.0.0.1:7443";
/// A token file larger than this is not a token file.
const MAX_TOKEN_FILE: u64 = 64 * 1024;

/// Where the token comes from.
#[derive(Clone, PartialEq, Eq)]
pub enum TokenSource {
    /// `--token` or `KUBEGATE_TOKEN`.
    Value(String),
    /// `--token-file`.
    File(PathBuf),
    /// None given: the ID token `kubegate login` stored for the daemon URL
    /// (refreshed when it expires within a minute; docs/cli.md, "The token
    /// store").
    Stored,
}

impl std::fmt::Debug for TokenSource {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            // Never print a token, not even in a debug dump.
            TokenSource::Value(_) => f.write_str("Value(<redacted>)"),
            TokenSource::File(p) => f.debug_tuple("File").field(p).finish(),
            TokenSource::Stored => f.write_str("Stored"),
        }
    }
}

/// The flags every client command has.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CommonArgs {
    pub server: String,
    pub token: TokenSource,
    pub ca_file: Option<PathBuf>,
}

impl CommonArgs {
    /// The token: the value, the trimmed contents of the token file, or
    /// the stored ID token for the daemon URL (refreshed if need be).
    pub fn token(&self) -> Result<String, CliError> {
        match &self.token {
            TokenSource::Value(t) => Ok(t.clone()),
            TokenSource::File(p) => read_token_file(p),
            TokenSource::Stored => super::login::stored_token(&self.server),
        }
    }
}

/// Reads a token file: its contents with surrounding whitespace (a trailing
/// newline) trimmed. Errors name the file, never its contents.
pub fn read_token_file(path: &std::path::Path) -> Result<String, CliError> {
    use std::io::Read;
    let config = |m: String| CliError::new(codes::CONFIG, m);
    let f = std::fs::File::open(path)
        .map_err(|e| config(format!("token file {}: {e}", path.display())))?;
    let mut raw = Vec::new();
    f.take(MAX_TOKEN_FILE + 1)
        .read_to_end(&mut raw)
        .map_err(|e| config(format!("token file {}: {e}", path.display())))?;
    if raw.len() as u64 > MAX_TOKEN_FILE {
        return Err(config(format!(
            "token file {}: larger than {MAX_TOKEN_FILE} bytes",
            path.display()
        )));
    }
    let s = String::from_utf8(raw)
        .map_err(|_| config(format!("token file {}: not UTF-8 text", path.display())))?;
    let t = s.trim();
    if t.is_empty() {
        return Err(config(format!("token file {} is empty", path.display())));
    }
    if t.chars().any(|c| c.is_control()) {
        return Err(config(format!(
            "token file {}: the token must be one line without control characters",
            path.display()
        )));
    }
    Ok(t.to_string())
}

/// `kubegate exec` arguments.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ExecArgs {
    pub common: CommonArgs,
    pub stdin: bool,
    pub tty: bool,
    pub container: Option<String>,
    pub project: String,
    pub uid: String,
    pub deployment: String,
    pub command: Vec<String>,
}

/// How `kubegate workspaces` prints.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum OutputFormat {
    Table,
    Json,
}

/// `kubegate workspaces` arguments.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WorkspacesArgs {
    pub common: CommonArgs,
    pub output: OutputFormat,
}

type Env<'a> = &'a dyn Fn(&str) -> Option<String>;

fn usage(m: impl Into<String>) -> CliError {
    CliError::usage(m)
}

impl From<lexopt::Error> for CliError {
    fn from(e: lexopt::Error) -> CliError {
        CliError::usage(exit::usage_text(e))
    }
}

/// The raw values of the common flags, before env fallbacks.
#[derive(Default)]
struct CommonRaw {
    server: Option<String>,
    token: Option<String>,
    token_file: Option<String>,
    ca_file: Option<String>,
}

/// The next value, as text.
fn value(p: &mut lexopt::Parser) -> Result<String, CliError> {
    Ok(p.value()?.string()?)
}

fn non_empty(flag: &str, v: String) -> Result<String, CliError> {
    if v.is_empty() {
        return Err(usage(format!("{flag} must not be empty")));
    }
    Ok(v)
}

impl CommonRaw {
    /// Takes option `name` (`--server`, …) and its value; false when it is
    /// not a common option.
    fn take(&mut self, name: &str, p: &mut lexopt::Parser) -> Result<bool, CliError> {
        let slot = match name {
            "--server" => &mut self.server,
            "--token" => &mut self.token,
            "--token-file" => &mut self.token_file,
            "--ca-file" => &mut self.ca_file,
            _ => return Ok(false),
        };
        *slot = Some(non_empty(name, value(p)?)?);
        Ok(true)
    }

    fn finish(self, env: Env<'_>) -> Result<CommonArgs, CliError> {
        let server = match self.server {
            Some(s) => s,
            None => env("KUBEGATE_SERVER")
                .filter(|s| !s.is_empty())
                .unwrap_or_else(|| DEFAULT_SERVER.to_string()),
        };
        parse_server(&server).map_err(|m| usage(format!("--server: {m}")))?;
        let token = match (self.token, self.token_file) {
            (Some(_), Some(_)) => {
                return Err(usage("give --token or --token-file, not both"));
            }
            (Some(t), None) => TokenSource::Value(t),
            (None, Some(f)) => TokenSource::File(PathBuf::from(f)),
            (None, None) => match env("KUBEGATE_TOKEN").filter(|t| !t.trim().is_empty()) {
                Some(t) => TokenSource::Value(t.trim().to_string()),
                None => TokenSource::Stored,
            },
        };
        Ok(CommonArgs {
            server,
            token,
            ca_file: self.ca_file.map(PathBuf::from),
        })
    }
}

/// Reads a command's options and positionals: the common flags, `-h`
/// (`None`: print the help), and `extra`, which takes the options of the
/// command's own (given the option's name, `-o` or `--output`, and the
/// parser for its value) or says it is not one (an unknown option).
fn read_options(
    args: &[String],
    common: &mut CommonRaw,
    mut extra: impl FnMut(&str, &mut lexopt::Parser) -> Result<bool, CliError>,
) -> Result<Option<Vec<String>>, CliError> {
    let mut positional = Vec::new();
    let mut p = lexopt::Parser::from_args(args);
    while let Some(arg) = p.next()? {
        let name = match arg {
            Value(v) => {
                positional.push(v.string()?);
                continue;
            }
            Short(c) => format!("-{c}"),
            Long(l) => format!("--{l}"),
        };
        if name == "-h" || name == "--help" {
            return Ok(None);
        }
        if !common.take(&name, &mut p)? && !extra(&name, &mut p)? {
            return Err(usage(format!("unknown option {name}")));
        }
    }
    Ok(Some(positional))
}

/// Parses `kubegate exec` arguments (after the word `exec`).
pub fn parse_exec(args: &[String], env: Env<'_>) -> Result<Parsed<ExecArgs>, CliError> {
    let mut common = CommonRaw::default();
    let mut stdin = false;
    let mut tty = false;
    let mut container: Option<String> = None;
    let mut workspace: Option<String> = None;
    // Everything after the first `--` is the command, never an option.
    let (options, command) = match args.iter().position(|a| a == "--") {
        Some(at) => (&args[..at], Some(args[at + 1..].to_vec())),
        None => (args, None),
    };
    let Some(positional) = read_options(options, &mut common, |name, p| {
        match name {
            "-i" | "--stdin" => stdin = true,
            "-t" | "--tty" => tty = true,
            "-c" | "--container" => container = Some(non_empty(name, value(p)?)?),
            "-w" | "--workspace" => workspace = Some(non_empty(name, value(p)?)?),
            _ => return Ok(false),
        }
        Ok(true)
    })?
    else {
        return Ok(Parsed::Help);
    };
    let deployment = match positional.as_slice() {
        [] => return Err(usage("missing DEPLOYMENT")),
        [d] => d.clone(),
        [d, extra, ..] => {
            return Err(usage(format!(
                "unexpected argument {extra:?}: put the command after --, as in: kubegate exec {d} -- {extra} ..."
            )))
        }
    };
    let command = match command {
        None => {
            return Err(usage(format!(
                "missing the command: kubegate exec {deployment} -- CMD [ARGS...]"
            )))
        }
        Some(c) if c.is_empty() => return Err(usage("missing the command after --")),
        Some(c) => c,
    };
    if command[0].is_empty() {
        return Err(usage("the command must not be an empty string"));
    }
    let workspace = match workspace.or_else(|| env("KUBEGATE_WORKSPACE").filter(|w| !w.is_empty()))
    {
        Some(w) => w,
        None => {
            return Err(usage(
                "missing --workspace PROJECT/UID (or set KUBEGATE_WORKSPACE)",
            ))
        }
    };
    let (project, uid) = parse_workspace(&workspace)?;
    let common = common.finish(env)?;
    Ok(Parsed::Run(ExecArgs {
        common,
        stdin,
        tty,
        container,
        project,
        uid,
        deployment,
        command,
    }))
}

/// `kubegate login` arguments.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LoginArgs {
    pub server: String,
    pub ca_file: Option<PathBuf>,
    /// `--issuer-ca-file`: the CA certificates trusted for the issuer
    /// (instead of the web PKI roots), at login and at every refresh.
    pub issuer_ca_file: Option<PathBuf>,
    /// `--browser`: open the verification page with `xdg-open`.
    pub browser: bool,
}

/// `kubegate logout` arguments.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LogoutArgs {
    pub server: String,
}

/// `kubegate whoami` arguments.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WhoamiArgs {
    pub common: CommonArgs,
    pub output: OutputFormat,
}

impl CommonRaw {
    /// `--server` (or its environment variable, or the default) and
    /// `--ca-file` of a command that takes no token (`login`, `logout`).
    fn server_only(self, cmd: &str, env: Env<'_>) -> Result<(String, Option<PathBuf>), CliError> {
        if self.token.is_some() || self.token_file.is_some() {
            return Err(usage(format!(
                "{cmd} takes no --token or --token-file: it is about the stored login"
            )));
        }
        let ca_file = self.ca_file.clone();
        let mut raw = self;
        raw.token = Some("-".into());
        let c = raw.finish(env)?;
        Ok((c.server, ca_file.map(PathBuf::from)))
    }
}

/// Parses `kubegate login` arguments (after the word `login`).
pub fn parse_login(args: &[String], env: Env<'_>) -> Result<Parsed<LoginArgs>, CliError> {
    let mut common = CommonRaw::default();
    let mut browser = false;
    let mut issuer_ca_file = None;
    let Some(pos) = read_options(args, &mut common, |name, p| {
        match name {
            "--browser" => browser = true,
            "--issuer-ca-file" => issuer_ca_file = Some(PathBuf::from(non_empty(name, value(p)?)?)),
            _ => return Ok(false),
        }
        Ok(true)
    })?
    else {
        return Ok(Parsed::Help);
    };
    if let Some(extra) = pos.first() {
        return Err(usage(format!("unexpected argument {extra:?}")));
    }
    let (server, ca_file) = common.server_only("login", env)?;
    Ok(Parsed::Run(LoginArgs {
        server,
        ca_file,
        issuer_ca_file,
        browser,
    }))
}

/// Parses `kubegate logout` arguments (after the word `logout`).
pub fn parse_logout(args: &[String], env: Env<'_>) -> Result<Parsed<LogoutArgs>, CliError> {
    let mut common = CommonRaw::default();
    let Some(pos) = read_options(args, &mut common, |_, _| Ok(false))? else {
        return Ok(Parsed::Help);
    };
    if let Some(extra) = pos.first() {
        return Err(usage(format!("unexpected argument {extra:?}")));
    }
    let (server, _) = common.server_only("logout", env)?;
    Ok(Parsed::Run(LogoutArgs { server }))
}

/// Parses `kubegate whoami` arguments (after the word `whoami`).
pub fn parse_whoami(args: &[String], env: Env<'_>) -> Result<Parsed<WhoamiArgs>, CliError> {
    let mut common = CommonRaw::default();
    let mut output = None;
    let Some(pos) = read_output_options(args, &mut common, &mut output)? else {
        return Ok(Parsed::Help);
    };
    if let Some(extra) = pos.first() {
        return Err(usage(format!("unexpected argument {extra:?}")));
    }
    Ok(Parsed::Run(WhoamiArgs {
        common: common.finish(env)?,
        output: output.unwrap_or(OutputFormat::Table),
    }))
}

/// `PROJECT/UID`, both parts non-empty, one slash.
pub fn parse_workspace(w: &str) -> Result<(String, String), CliError> {
    match w.split_once('/') {
        Some((p, u)) if !p.is_empty() && !u.is_empty() && !u.contains('/') => {
            Ok((p.to_string(), u.to_string()))
        }
        _ => Err(usage(format!(
            "workspace {w:?} is not PROJECT/UID (for example demo/demo-uid)"
        ))),
    }
}

/// `-o FORMAT` / `--output FORMAT`: true when `name` is that option.
fn output_flag(
    name: &str,
    p: &mut lexopt::Parser,
    output: &mut Option<OutputFormat>,
) -> Result<bool, CliError> {
    if name != "-o" && name != "--output" {
        return Ok(false);
    }
    *output = Some(match value(p)?.as_str() {
        "table" => OutputFormat::Table,
        "json" => OutputFormat::Json,
        other => return Err(usage(format!("--output {other:?}: expected table or json"))),
    });
    Ok(true)
}

/// [`read_options`] for a command whose own option is `--output`.
fn read_output_options(
    args: &[String],
    common: &mut CommonRaw,
    output: &mut Option<OutputFormat>,
) -> Result<Option<Vec<String>>, CliError> {
    read_options(args, common, |name, p| output_flag(name, p, output))
}

/// Parses `kubegate workspaces` arguments (after the word `workspaces`).
pub fn parse_workspaces(args: &[String], env: Env<'_>) -> Result<Parsed<WorkspacesArgs>, CliError> {
    let mut common = CommonRaw::default();
    let mut output = None;
    let Some(pos) = read_output_options(args, &mut common, &mut output)? else {
        return Ok(Parsed::Help);
    };
    if let Some(extra) = pos.first() {
        return Err(usage(format!("unexpected argument {extra:?}")));
    }
    Ok(Parsed::Run(WorkspacesArgs {
        common: common.finish(env)?,
        output: output.unwrap_or(OutputFormat::Table),
    }))
}

/// `kubegate dev` arguments.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DevArgs {
    pub common: CommonArgs,
    /// The project folder.
    pub dir: PathBuf,
    /// `--stdin APP`.
    pub stdin: Option<String>,
}

/// Parses `kubegate dev` arguments (after the word `dev`).
pub fn parse_dev(args: &[String], env: Env<'_>) -> Result<Parsed<DevArgs>, CliError> {
    let mut common = CommonRaw::default();
    let mut stdin = None;
    let Some(pos) = read_options(args, &mut common, |name, p| {
        if name != "--stdin" {
            return Ok(false);
        }
        stdin = Some(non_empty(name, value(p)?)?);
        Ok(true)
    })?
    else {
        return Ok(Parsed::Help);
    };
    let dir = match pos.as_slice() {
        [] => PathBuf::from("."),
        [d] if !d.is_empty() => PathBuf::from(d),
        [_] => return Err(usage("DIR must not be empty")),
        [_, extra, ..] => return Err(usage(format!("unexpected argument {extra:?}"))),
    };
    Ok(Parsed::Run(DevArgs {
        common: common.finish(env)?,
        dir,
        stdin,
    }))
}

/// What `kubegate sessions` does.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SessionsOp {
    List,
    Stop(String),
    Resume(String),
}

/// `kubegate sessions` arguments.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SessionsArgs {
    pub common: CommonArgs,
    pub output: OutputFormat,
    pub op: SessionsOp,
}

/// `kubegate attach` arguments.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AttachArgs {
    pub common: CommonArgs,
    pub session: String,
    pub app: String,
    pub from_start: bool,
}

/// What `kubegate port-forward` forwards to.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ForwardTarget {
    /// A watch session's pod (whichever pod it has at each connection).
    Session(String),
    /// A pod of a workspace Deployment (`--workspace P/U DEPLOYMENT`).
    Deployment {
        project: String,
        uid: String,
        deployment: String,
    },
}

/// One `[LOCAL:]REMOTE`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PortPair {
    /// 0: a free port, picked when listening.
    pub local: u16,
    pub remote: u16,
}

/// `kubegate port-forward` arguments.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PortForwardArgs {
    pub common: CommonArgs,
    pub target: ForwardTarget,
    pub ports: Vec<PortPair>,
    /// `--address`, as given (default `localhost`: 127.0.0.1 and ::1).
    pub addresses: Vec<String>,
    /// The old `SESSION PORT LOCAL` form was used (a deprecation line).
    pub deprecated_local: bool,
}

/// A session id as given: non-empty, no slash or other URL syntax (the
/// daemon checks the exact shape).
fn session_id(s: &str) -> Result<String, CliError> {
    if s.is_empty()
        || !s
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_')
    {
        return Err(usage(format!("{s:?} is not a session id")));
    }
    Ok(s.to_string())
}

fn port_arg(what: &str, s: &str, zero_ok: bool) -> Result<u16, CliError> {
    match s.parse::<u16>() {
        Ok(0) if !zero_ok => Err(usage(format!("{what} must be 1..65535, not 0"))),
        Ok(p) => Ok(p),
        Err(_) => Err(usage(format!("{what} {s:?} is not a port number"))),
    }
}

/// Parses `kubegate sessions` arguments (after the word `sessions`).
pub fn parse_sessions(args: &[String], env: Env<'_>) -> Result<Parsed<SessionsArgs>, CliError> {
    let mut common = CommonRaw::default();
    let mut output = None;
    let Some(pos) = read_output_options(args, &mut common, &mut output)? else {
        return Ok(Parsed::Help);
    };
    let op = match pos
        .iter()
        .map(String::as_str)
        .collect::<Vec<_>>()
        .as_slice()
    {
        [] | ["list"] => SessionsOp::List,
        ["stop", id] => SessionsOp::Stop(session_id(id)?),
        ["resume", id] => SessionsOp::Resume(session_id(id)?),
        [op @ ("stop" | "resume")] => {
            return Err(usage(format!(
                "missing the session ID: kubegate sessions {op} ID"
            )))
        }
        ["list" | "stop" | "resume", .., extra] => {
            return Err(usage(format!("unexpected argument {extra:?}")))
        }
        [other, ..] => {
            return Err(usage(format!(
                "unknown sessions command {other:?}: expected list, stop or resume"
            )))
        }
    };
    if output.is_some() && op != SessionsOp::List {
        return Err(usage("--output applies to sessions list only"));
    }
    Ok(Parsed::Run(SessionsArgs {
        common: common.finish(env)?,
        output: output.unwrap_or(OutputFormat::Table),
        op,
    }))
}

/// Parses `kubegate attach` arguments (after the word `attach`).
pub fn parse_attach(args: &[String], env: Env<'_>) -> Result<Parsed<AttachArgs>, CliError> {
    let mut common = CommonRaw::default();
    let mut from_start = false;
    let Some(pos) = read_options(args, &mut common, |name, _| {
        from_start |= name == "--from-start";
        Ok(name == "--from-start")
    })?
    else {
        return Ok(Parsed::Help);
    };
    let (session, app) = match pos.as_slice() {
        [s, a] if !a.is_empty() => (session_id(s)?, a.clone()),
        [_, _] => return Err(usage("APP must not be empty")),
        [] => return Err(usage("missing SESSION and APP")),
        [_] => return Err(usage("missing APP")),
        [_, _, extra, ..] => return Err(usage(format!("unexpected argument {extra:?}"))),
    };
    Ok(Parsed::Run(AttachArgs {
        common: common.finish(env)?,
        session,
        app,
        from_start,
    }))
}

/// `[LOCAL:]REMOTE`: `8080`, `5000:8080`, `:8080` (or `0:8080`) for a free
/// local port.
pub fn port_pair(s: &str) -> Result<PortPair, CliError> {
    match s.split_once(':') {
        None => {
            let remote = port_arg("port", s, false)?;
            Ok(PortPair {
                local: remote,
                remote,
            })
        }
        Some((l, r)) => {
            if r.is_empty() {
                return Err(usage(format!("{s:?}: the remote port is missing")));
            }
            let local = if l.is_empty() {
                0
            } else {
                port_arg("local port", l, true)?
            };
            Ok(PortPair {
                local,
                remote: port_arg("remote port", r, false)?,
            })
        }
    }
}

/// Parses `kubegate port-forward` arguments (after the word).
pub fn parse_port_forward(
    args: &[String],
    env: Env<'_>,
) -> Result<Parsed<PortForwardArgs>, CliError> {
    let mut common = CommonRaw::default();
    let mut workspace: Option<String> = None;
    let mut addresses: Vec<String> = Vec::new();
    let Some(pos) = read_options(args, &mut common, |name, p| {
        match name {
            "-w" | "--workspace" => workspace = Some(non_empty(name, value(p)?)?),
            "--address" => {
                let v = value(p)?;
                for a in v.split(',').map(str::trim) {
                    if a.is_empty() {
                        return Err(usage(format!("--address {v:?}: an empty address")));
                    }
                    addresses.push(a.to_string());
                }
            }
            _ => return Ok(false),
        }
        Ok(true)
    })?
    else {
        return Ok(Parsed::Help);
    };
    let what = if workspace.is_some() {
        "DEPLOYMENT"
    } else {
        "SESSION"
    };
    let (name, specs) = match pos.split_first() {
        None => return Err(usage(format!("missing {what} and a port"))),
        Some((_, [])) => return Err(usage("missing a port ([LOCAL:]REMOTE)")),
        Some((n, rest)) => (n.clone(), rest),
    };
    // The old form, `SESSION PORT LOCAL`: two bare numbers after a session.
    let bare = |s: &String| !s.is_empty() && s.bytes().all(|b| b.is_ascii_digit());
    let deprecated_local = workspace.is_none() && specs.len() == 2 && specs.iter().all(bare);
    let ports = if deprecated_local {
        vec![PortPair {
            remote: port_arg("PORT", &specs[0], false)?,
            local: port_arg("LOCAL", &specs[1], true)?,
        }]
    } else {
        specs
            .iter()
            .map(|s| port_pair(s))
            .collect::<Result<_, _>>()?
    };
    let target = match workspace {
        None => ForwardTarget::Session(session_id(&name)?),
        Some(w) => {
            let (project, uid) = parse_workspace(&w)?;
            if name.is_empty() {
                return Err(usage("DEPLOYMENT must not be empty"));
            }
            ForwardTarget::Deployment {
                project,
                uid,
                deployment: name,
            }
        }
    };
    if addresses.is_empty() {
        addresses.push("localhost".into());
    }
    Ok(Parsed::Run(PortForwardArgs {
        common: common.finish(env)?,
        target,
        ports,
        addresses,
        deprecated_local,
    }))
}

#[cfg(test)]
mod tests;
