//! Argument parsing of the client commands, pure: the environment comes in
//! as a function, nothing is read from disk (the token file is read later,
//! by [`CommonArgs::token`]).
//!
//! Style: `--flag VALUE` or `--flag=VALUE`; short flags cluster (`-it`,
//! `-itc main`, `-cmain`). For `exec`, options may come before or after
//! DEPLOYMENT, and everything after the first `--` is the command, untouched
//! (so the command's own flags never reach our parser).

use super::{codes, CliError};
use crate::http::endpoint::parse_server;
use std::path::PathBuf;

pub const DEFAULT_SERVER: &str = "http://127.0.0.1:7443";
/// A token file larger than this is not a token file.
const MAX_TOKEN_FILE: u64 = 64 * 1024;

pub const EXEC_SYNOPSIS: &str = "usage: kubegate exec [-i] [-t] [-c CONTAINER] --workspace PROJECT/UID DEPLOYMENT -- CMD [ARGS...]
       (kubegate exec --help for more)";

pub const EXEC_HELP: &str = "usage: kubegate exec [-i] [-t] [-c CONTAINER] --workspace PROJECT/UID DEPLOYMENT -- CMD [ARGS...]

Runs CMD in a container of a pod of DEPLOYMENT (a Deployment of the
workspace) through the kubegate daemon, and exits with CMD's exit code.

options:
  -i, --stdin              send our stdin to CMD (without it CMD's stdin is
                           closed at once)
  -t, --tty                allocate a terminal for CMD; with -i and a terminal
                           on our stdin, the local terminal goes to raw mode
                           (restored on exit) and window size changes follow.
                           Ignored, with a warning, when stdin is not a terminal
  -c, --container NAME     the container (default: the pod's only or default one)
  -w, --workspace P/UID    the workspace (env KUBEGATE_WORKSPACE)
      --server URL         the daemon (env KUBEGATE_SERVER, default http://127.0.0.1:7443)
      --token T            the bearer token (env KUBEGATE_TOKEN)
      --token-file F       read the token from F (surrounding whitespace trimmed)
      --ca-file F          trust the CA certificates in PEM file F (https servers)
  -h, --help               this help

exit codes: CMD's exit code; 255 for kubegate's own errors (usage, connection,
refusals), printed as `kubegate: CODE: message` (docs/cli.md).
";

pub const WORKSPACES_SYNOPSIS: &str =
    "usage: kubegate workspaces [--output table|json] [--server URL] [--token T | --token-file F] [--ca-file F]
       (kubegate workspaces --help for more)";

pub const WORKSPACES_HELP: &str = "usage: kubegate workspaces [--output table|json] [--server URL] [--token T | --token-file F] [--ca-file F]

Lists the workspaces the token may exec into and the labelled Deployments in
each: WORKSPACE  DEPLOYMENT  CONTAINERS  READY (ready/desired replicas).

options:
  -o, --output FORMAT      table (default) or json (the daemon's answer as is)
      --server URL         the daemon (env KUBEGATE_SERVER, default http://127.0.0.1:7443)
      --token T            the bearer token (env KUBEGATE_TOKEN)
      --token-file F       read the token from F (surrounding whitespace trimmed)
      --ca-file F          trust the CA certificates in PEM file F (https servers)
  -h, --help               this help

exit codes: 0 success; 2 usage or configuration error; 1 any other failure.
";

/// A parsed command line: run it, or print the help.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Parsed<T> {
    Run(T),
    Help,
}

/// Where the token comes from.
#[derive(Clone, PartialEq, Eq)]
pub enum TokenSource {
    /// `--token` or `KUBEGATE_TOKEN`.
    Value(String),
    /// `--token-file`.
    File(PathBuf),
}

impl std::fmt::Debug for TokenSource {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            // Never print a token, not even in a debug dump.
            TokenSource::Value(_) => f.write_str("Value(<redacted>)"),
            TokenSource::File(p) => f.debug_tuple("File").field(p).finish(),
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
    /// The token: the value, or the trimmed contents of the token file.
    pub fn token(&self) -> Result<String, CliError> {
        match &self.token {
            TokenSource::Value(t) => Ok(t.clone()),
            TokenSource::File(p) => read_token_file(p),
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

/// The raw values of the common flags, before env fallbacks.
#[derive(Default)]
struct CommonRaw {
    server: Option<String>,
    token: Option<String>,
    token_file: Option<String>,
    ca_file: Option<String>,
}

/// Takes the value of long option `name` at `args[*i]` (`--name V` or
/// `--name=V`); `None` when `args[*i]` is another option.
fn long_value(args: &[String], i: &mut usize, name: &str) -> Result<Option<String>, CliError> {
    let a = &args[*i];
    if a == name {
        *i += 1;
        return match args.get(*i) {
            Some(v) => Ok(Some(v.clone())),
            None => Err(usage(format!("{name} needs a value"))),
        };
    }
    match a.strip_prefix(name).and_then(|r| r.strip_prefix('=')) {
        Some(v) => Ok(Some(v.to_string())),
        None => Ok(None),
    }
}

fn non_empty(flag: &str, v: String) -> Result<String, CliError> {
    if v.is_empty() {
        return Err(usage(format!("{flag} must not be empty")));
    }
    Ok(v)
}

impl CommonRaw {
    /// Consumes a common long option at `args[*i]`; false when it is not one.
    fn take(&mut self, args: &[String], i: &mut usize) -> Result<bool, CliError> {
        let slots: [(&str, &mut Option<String>); 4] = [
            ("--server", &mut self.server),
            ("--token", &mut self.token),
            ("--token-file", &mut self.token_file),
            ("--ca-file", &mut self.ca_file),
        ];
        for (name, slot) in slots {
            if let Some(v) = long_value(args, i, name)? {
                *slot = Some(non_empty(name, v)?);
                return Ok(true);
            }
        }
        Ok(false)
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
                None => {
                    return Err(CliError::new(
                        codes::CONFIG,
                        "no token: pass --token T or --token-file F, or set KUBEGATE_TOKEN",
                    ))
                }
            },
        };
        Ok(CommonArgs {
            server,
            token,
            ca_file: self.ca_file.map(PathBuf::from),
        })
    }
}

/// Parses `kubegate exec` arguments (after the word `exec`).
pub fn parse_exec(args: &[String], env: Env<'_>) -> Result<Parsed<ExecArgs>, CliError> {
    let mut common = CommonRaw::default();
    let mut stdin = false;
    let mut tty = false;
    let mut container: Option<String> = None;
    let mut workspace: Option<String> = None;
    let mut positional: Vec<String> = Vec::new();
    let mut command: Option<Vec<String>> = None;
    let mut i = 0;
    while i < args.len() {
        let a = args[i].as_str();
        if a == "--" {
            command = Some(args[i + 1..].to_vec());
            break;
        }
        if a == "-h" || a == "--help" {
            return Ok(Parsed::Help);
        }
        if a == "--stdin" {
            stdin = true;
        } else if a == "--tty" {
            tty = true;
        } else if common.take(args, &mut i)? {
        } else if let Some(v) = long_value(args, &mut i, "--container")? {
            container = Some(non_empty("--container", v)?);
        } else if let Some(v) = long_value(args, &mut i, "--workspace")? {
            workspace = Some(non_empty("--workspace", v)?);
        } else if a.starts_with("--") {
            return Err(usage(format!("unknown option {a:?}")));
        } else if a.len() > 1 && a.starts_with('-') {
            // A cluster of short flags: -i -t -it -itc NAME -cNAME -w P/U.
            let flags = &a[1..];
            for (at, ch) in flags.char_indices() {
                match ch {
                    'i' => stdin = true,
                    't' => tty = true,
                    'h' => return Ok(Parsed::Help),
                    'c' | 'w' => {
                        let rest = &flags[at + 1..];
                        let v = if !rest.is_empty() {
                            rest.strip_prefix('=').unwrap_or(rest).to_string()
                        } else {
                            i += 1;
                            args.get(i)
                                .cloned()
                                .ok_or_else(|| usage(format!("-{ch} needs a value")))?
                        };
                        if ch == 'c' {
                            container = Some(non_empty("-c", v)?);
                        } else {
                            workspace = Some(non_empty("-w", v)?);
                        }
                        break;
                    }
                    other => return Err(usage(format!("unknown option -{other} (in {a:?})"))),
                }
            }
        } else {
            positional.push(args[i].clone());
        }
        i += 1;
    }

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

/// Parses `kubegate workspaces` arguments (after the word `workspaces`).
pub fn parse_workspaces(args: &[String], env: Env<'_>) -> Result<Parsed<WorkspacesArgs>, CliError> {
    let mut common = CommonRaw::default();
    let mut output = OutputFormat::Table;
    let mut i = 0;
    while i < args.len() {
        let a = args[i].as_str();
        if a == "-h" || a == "--help" {
            return Ok(Parsed::Help);
        }
        let out = if a == "-o" {
            i += 1;
            Some(
                args.get(i)
                    .cloned()
                    .ok_or_else(|| usage("-o needs a value"))?,
            )
        } else {
            long_value(args, &mut i, "--output")?
        };
        if let Some(v) = out {
            output = match v.as_str() {
                "table" => OutputFormat::Table,
                "json" => OutputFormat::Json,
                other => return Err(usage(format!("--output {other:?}: expected table or json"))),
            };
        } else if !common.take(args, &mut i)? {
            return Err(usage(format!("unexpected argument {a:?}")));
        }
        i += 1;
    }
    Ok(Parsed::Run(WorkspacesArgs {
        common: common.finish(env)?,
        output,
    }))
}

/// Common text of the three session commands' help.
const COMMON_HELP: &str =
    "      --server URL         the daemon (env KUBEGATE_SERVER, default http://127.0.0.1:7443)
      --token T            the bearer token (env KUBEGATE_TOKEN)
      --token-file F       read the token from F (surrounding whitespace trimmed)
      --ca-file F          trust the CA certificates in PEM file F (https servers)
  -h, --help               this help
";

pub const SESSIONS_SYNOPSIS: &str =
    "usage: kubegate sessions [list [--output table|json] | stop ID | resume ID]
       (kubegate sessions --help for more)";

pub fn sessions_help() -> String {
    format!(
        "usage: kubegate sessions [list [--output table|json] | stop ID | resume ID]

Lists the token's watch sessions (the default: ID  STATUS  APPS  CREATED
ENDPOINTS), stops one (its pod is deleted), or resumes a suspended one.

options:
  -o, --output FORMAT      list: table (default) or json (the daemon's answer as is)
{COMMON_HELP}
exit codes: 0 success; 2 usage or configuration error; 1 any other failure
(an unknown session: NOT_FOUND; a session in the wrong state: NOT_SUSPENDED).
"
    )
}

pub const ATTACH_SYNOPSIS: &str = "usage: kubegate attach [--from-start] SESSION APP
       (kubegate attach --help for more)";

pub fn attach_help() -> String {
    format!(
        "usage: kubegate attach [--from-start] SESSION APP

Joins APP of watch session SESSION: its output on our stdout (its stderr
on our stderr), our stdin to the app. Without --from-start only what came
since the last attach from this machine is replayed (the last seq seen is
kept in $XDG_STATE_HOME/kubegate/attach.json).

With a terminal on stdin and a tty app, the terminal goes to raw mode and
follows window size changes; Ctrl-] detaches (the session keeps running).
Otherwise Ctrl-C (SIGINT) or SIGTERM detaches.

options:
      --from-start         replay everything the daemon still buffers
{COMMON_HELP}
exit codes: 0 detached; 1 the session ended (its status is printed);
255 kubegate's own errors (usage, connection, refusals), printed as
`kubegate: CODE: message`.
"
    )
}

pub const PORT_FORWARD_SYNOPSIS: &str = "usage: kubegate port-forward SESSION PORT [LOCAL]
       (kubegate port-forward --help for more)";

pub fn port_forward_help() -> String {
    format!(
        "usage: kubegate port-forward SESSION PORT [LOCAL]

Listens on 127.0.0.1:LOCAL (default: PORT; 0 picks a free port) and sends
every HTTP request it receives to PORT of the session's pod through the
daemon's port proxy. One request per connection (answers carry
Connection: close); WebSocket upgrades are answered 501 (the daemon's port
proxy forwards plain HTTP only). Ctrl-C or SIGTERM stops it.

options:
{COMMON_HELP}
exit codes: 0 stopped by a signal; 2 usage or configuration error; 1 any
other failure (an unknown session, a local port in use).
"
    )
}

pub const DEV_SYNOPSIS: &str = "usage: kubegate dev [--stdin APP] [DIR]
       (kubegate dev --help for more)";

pub fn dev_help() -> String {
    format!(
        "usage: kubegate dev [--stdin APP] [DIR]

Runs the project in DIR (default: the current folder) as a watch session:
reads DIR/kubegate.toml ([[app]] tables: name, entry, command, ports, io,
runner; top-level image and env), uploads the folder (minus .git/ and
what .kubegateignore names) and starts the session; shows every app's
output prefixed with its name, pushes local file changes into the session
as they happen, sends the lines typed here to one app, and prints the
endpoints and their reachability as they come.

Ctrl-C stops the session and exits once it is stopped; a second Ctrl-C
within a second of the first suspends it instead (resume it with
`kubegate sessions resume ID`). SIGTERM stops at once; SIGHUP (the
terminal went away) suspends. Details: docs/dev.md.

options:
      --stdin APP          the app that gets the lines typed here (default:
                           the first tty app, else the first app)
{COMMON_HELP}
exit codes: 0 the session was stopped or suspended on request; 2 usage,
configuration or manifest error (nothing was started); 1 any other
failure (the folder over the bundle limits, a refusal, the session failing
or ending under us).
"
    )
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
    let Some(pos) = split_simple(args, &mut common, |args, i| {
        Ok(match long_value(args, i, "--stdin")? {
            Some(v) => {
                stdin = Some(non_empty("--stdin", v)?);
                true
            }
            None => false,
        })
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

/// `kubegate port-forward` arguments.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PortForwardArgs {
    pub common: CommonArgs,
    pub session: String,
    pub port: u16,
    /// 0: any free port.
    pub local: u16,
}

/// The options and positionals of a simple command: common flags, `-h`,
/// and `extra` (which consumes its own option, or says it is not one).
fn split_simple(
    args: &[String],
    common: &mut CommonRaw,
    mut extra: impl FnMut(&[String], &mut usize) -> Result<bool, CliError>,
) -> Result<Option<Vec<String>>, CliError> {
    let mut positional = Vec::new();
    let mut i = 0;
    while i < args.len() {
        let a = args[i].as_str();
        if a == "-h" || a == "--help" {
            return Ok(None);
        }
        if a == "--" {
            positional.extend(args[i + 1..].iter().cloned());
            break;
        }
        if common.take(args, &mut i)? || extra(args, &mut i)? {
        } else if a.starts_with('-') && a.len() > 1 {
            return Err(usage(format!("unknown option {a:?}")));
        } else {
            positional.push(args[i].clone());
        }
        i += 1;
    }
    Ok(Some(positional))
}

fn output_flag(args: &[String], i: &mut usize) -> Result<Option<OutputFormat>, CliError> {
    let v = if args[*i] == "-o" {
        *i += 1;
        Some(
            args.get(*i)
                .cloned()
                .ok_or_else(|| usage("-o needs a value"))?,
        )
    } else {
        long_value(args, i, "--output")?
    };
    v.map(|v| match v.as_str() {
        "table" => Ok(OutputFormat::Table),
        "json" => Ok(OutputFormat::Json),
        other => Err(usage(format!("--output {other:?}: expected table or json"))),
    })
    .transpose()
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
    let Some(pos) = split_simple(args, &mut common, |args, i| {
        Ok(match output_flag(args, i)? {
            Some(o) => {
                output = Some(o);
                true
            }
            None => false,
        })
    })?
    else {
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
    let Some(pos) = split_simple(args, &mut common, |args, i| {
        Ok(args[*i] == "--from-start" && {
            from_start = true;
            true
        })
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

/// Parses `kubegate port-forward` arguments (after the word).
pub fn parse_port_forward(
    args: &[String],
    env: Env<'_>,
) -> Result<Parsed<PortForwardArgs>, CliError> {
    let mut common = CommonRaw::default();
    let Some(pos) = split_simple(args, &mut common, |_, _| Ok(false))? else {
        return Ok(Parsed::Help);
    };
    let (session, port, local) = match pos.as_slice() {
        [] => return Err(usage("missing SESSION and PORT")),
        [_] => return Err(usage("missing PORT")),
        [s, p] => {
            let port = port_arg("PORT", p, false)?;
            (session_id(s)?, port, port)
        }
        [s, p, l] => (
            session_id(s)?,
            port_arg("PORT", p, false)?,
            port_arg("LOCAL", l, true)?,
        ),
        [_, _, _, extra, ..] => return Err(usage(format!("unexpected argument {extra:?}"))),
    };
    Ok(Parsed::Run(PortForwardArgs {
        common: common.finish(env)?,
        session,
        port,
        local,
    }))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashMap;

    fn v(args: &[&str]) -> Vec<String> {
        args.iter().map(|s| s.to_string()).collect()
    }

    fn env_of(pairs: &[(&str, &str)]) -> impl Fn(&str) -> Option<String> {
        let m: HashMap<String, String> = pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        move |k| m.get(k).cloned()
    }

    fn exec(args: &[&str], env: &[(&str, &str)]) -> Result<Parsed<ExecArgs>, CliError> {
        parse_exec(&v(args), &env_of(env))
    }

    fn exec_ok(args: &[&str], env: &[(&str, &str)]) -> ExecArgs {
        match exec(args, env) {
            Ok(Parsed::Run(a)) => a,
            other => panic!("{args:?}: {other:?}"),
        }
    }

    fn exec_err(args: &[&str], env: &[(&str, &str)]) -> CliError {
        match exec(args, env) {
            Err(e) => e,
            other => panic!("{args:?}: expected an error, got {other:?}"),
        }
    }

    const TOKEN: (&str, &str) = ("KUBEGATE_TOKEN", "tok");

    #[test]
    fn exec_full_command_line() {
        let a = exec_ok(
            &[
                "-i",
                "-t",
                "-c",
                "main",
                "--workspace",
                "demo/demo-uid",
                "--server=https://gw.example:8443/prefix",
                "--token",
                "secret",
                "--ca-file",
                "/etc/ca.pem",
                "hello",
                "--",
                "sh",
                "-c",
                "echo hi; exit 3",
            ],
            &[],
        );
        assert!(a.stdin && a.tty);
        assert_eq!(a.container.as_deref(), Some("main"));
        assert_eq!((a.project.as_str(), a.uid.as_str()), ("demo", "demo-uid"));
        assert_eq!(a.deployment, "hello");
        assert_eq!(a.command, v(&["sh", "-c", "echo hi; exit 3"]));
        assert_eq!(a.common.server, "https://gw.example:8443/prefix");
        assert_eq!(a.common.token, TokenSource::Value("secret".into()));
        assert_eq!(a.common.ca_file, Some(PathBuf::from("/etc/ca.pem")));
    }

    #[test]
    fn exec_defaults_and_env_fallbacks() {
        let a = exec_ok(
            &["hello", "--", "ls"],
            &[TOKEN, ("KUBEGATE_WORKSPACE", "p/u")],
        );
        assert!(!a.stdin && !a.tty);
        assert_eq!(a.container, None);
        assert_eq!(a.common.server, DEFAULT_SERVER);
        assert_eq!(a.common.token, TokenSource::Value("tok".into()));
        assert_eq!((a.project.as_str(), a.uid.as_str()), ("p", "u"));
        let a = exec_ok(
            &["hello", "--", "ls"],
            &[
                TOKEN,
                ("KUBEGATE_WORKSPACE", "p/u"),
                ("KUBEGATE_SERVER", "http://10.0.0.1:7000"),
            ],
        );
        assert_eq!(a.common.server, "http://10.0.0.1:7000");
        // Flags win over the environment.
        let a = exec_ok(
            &[
                "--server",
                "http://127.0.0.1:1",
                "--token=flag",
                "-w",
                "a/b",
                "hello",
                "--",
                "ls",
            ],
            &[
                TOKEN,
                ("KUBEGATE_WORKSPACE", "p/u"),
                ("KUBEGATE_SERVER", "http://10.0.0.1:7000"),
            ],
        );
        assert_eq!(a.common.server, "http://127.0.0.1:1");
        assert_eq!(a.common.token, TokenSource::Value("flag".into()));
        assert_eq!((a.project.as_str(), a.uid.as_str()), ("a", "b"));
        // --token-file instead of the env token.
        let a = exec_ok(
            &["--token-file", "/run/tok", "-w", "a/b", "hello", "--", "ls"],
            &[TOKEN],
        );
        assert_eq!(a.common.token, TokenSource::File("/run/tok".into()));
    }

    #[test]
    fn exec_short_clusters_and_positions() {
        for args in [
            &["-it", "-w", "p/u", "d", "--", "sh"][..],
            &["-ti", "-wp/u", "d", "--", "sh"],
            &["d", "-i", "--tty", "--workspace=p/u", "--", "sh"],
            &["--stdin", "-t", "d", "-w=p/u", "--", "sh"],
        ] {
            let a = exec_ok(args, &[TOKEN]);
            assert!(a.stdin && a.tty, "{args:?}");
            assert_eq!(a.deployment, "d");
            assert_eq!(a.command, v(&["sh"]));
        }
        let a = exec_ok(&["-itc", "side", "-w", "p/u", "d", "--", "sh"], &[TOKEN]);
        assert_eq!(a.container.as_deref(), Some("side"));
        let a = exec_ok(&["-cside", "-w", "p/u", "d", "--", "sh"], &[TOKEN]);
        assert_eq!(a.container.as_deref(), Some("side"));
        let a = exec_ok(&["--container=x", "-w", "p/u", "d", "--", "sh"], &[TOKEN]);
        assert_eq!(a.container.as_deref(), Some("x"));
    }

    #[test]
    fn everything_after_the_double_dash_is_the_command() {
        let a = exec_ok(
            &[
                "-w", "p/u", "d", "--", "ls", "-la", "--", "-i", "--help", "--token", "x",
            ],
            &[TOKEN],
        );
        assert_eq!(
            a.command,
            v(&["ls", "-la", "--", "-i", "--help", "--token", "x"])
        );
        assert!(!a.stdin);
        assert_eq!(a.common.token, TokenSource::Value("tok".into()));
    }

    #[test]
    fn exec_usage_errors() {
        let cases: &[(&[&str], &str)] = &[
            (&["-w", "p/u", "--", "ls"], "missing DEPLOYMENT"),
            (&["-w", "p/u", "d"], "missing the command"),
            (&["-w", "p/u", "d", "--"], "missing the command after --"),
            (&["-w", "p/u", "d", "--", ""], "empty string"),
            (&["-w", "p/u", "d", "ls"], "put the command after --"),
            (&["d", "--", "ls"], "missing --workspace"),
            (&["-w", "demo", "d", "--", "ls"], "not PROJECT/UID"),
            (&["-w", "/u", "d", "--", "ls"], "not PROJECT/UID"),
            (&["-w", "p/", "d", "--", "ls"], "not PROJECT/UID"),
            (&["-w", "p/u/x", "d", "--", "ls"], "not PROJECT/UID"),
            (&["-x", "-w", "p/u", "d", "--", "ls"], "unknown option -x"),
            (&["--frob", "-w", "p/u", "d", "--", "ls"], "unknown option"),
            (&["-w", "p/u", "-c"], "-c needs a value"),
            (
                &["-w", "p/u", "d", "--container"],
                "--container needs a value",
            ),
            (
                &["-w", "p/u", "--container=", "d", "--", "ls"],
                "must not be empty",
            ),
            (
                &["-w", "p/u", "--server", "ftp://x", "d", "--", "ls"],
                "--server",
            ),
            (
                &[
                    "-w",
                    "p/u",
                    "--token",
                    "a",
                    "--token-file",
                    "f",
                    "d",
                    "--",
                    "ls",
                ],
                "not both",
            ),
        ];
        for (args, want) in cases {
            let e = exec_err(args, &[TOKEN]);
            assert!(e.is_usage(), "{args:?}: {e}");
            assert!(e.message.contains(want), "{args:?}: {e}");
        }
    }

    #[test]
    fn exec_without_any_token_is_a_config_error() {
        let e = exec_err(&["-w", "p/u", "d", "--", "ls"], &[]);
        assert_eq!(e.code, codes::CONFIG);
        assert!(e.message.contains("KUBEGATE_TOKEN"), "{e}");
        // A blank env token counts as none.
        let e = exec_err(
            &["-w", "p/u", "d", "--", "ls"],
            &[("KUBEGATE_TOKEN", " \n")],
        );
        assert_eq!(e.code, codes::CONFIG);
    }

    #[test]
    fn help_anywhere_before_the_command() {
        assert_eq!(exec(&["--help"], &[]), Ok(Parsed::Help));
        assert_eq!(exec(&["-w", "p/u", "-h"], &[]), Ok(Parsed::Help));
        assert_eq!(exec(&["-ih"], &[]), Ok(Parsed::Help));
        // After `--` it belongs to the command.
        assert!(matches!(
            exec(&["-w", "p/u", "d", "--", "ls", "--help"], &[TOKEN]),
            Ok(Parsed::Run(_))
        ));
        assert_eq!(
            parse_workspaces(&v(&["-h"]), &env_of(&[])),
            Ok(Parsed::Help)
        );
    }

    #[test]
    fn workspaces_arguments() {
        let ok =
            |args: &[&str], env: &[(&str, &str)]| match parse_workspaces(&v(args), &env_of(env)) {
                Ok(Parsed::Run(a)) => a,
                other => panic!("{args:?}: {other:?}"),
            };
        let a = ok(&[], &[TOKEN]);
        assert_eq!(a.output, OutputFormat::Table);
        assert_eq!(a.common.server, DEFAULT_SERVER);
        let a = ok(&["-o", "json", "--server", "http://h:1"], &[TOKEN]);
        assert_eq!(a.output, OutputFormat::Json);
        assert_eq!(a.common.server, "http://h:1");
        let a = ok(&["--output=table", "--token-file=/t"], &[]);
        assert_eq!(a.output, OutputFormat::Table);
        assert_eq!(a.common.token, TokenSource::File("/t".into()));
        for (args, want) in [
            (&["--output", "yaml"][..], "expected table or json"),
            (&["-o"], "-o needs a value"),
            (&["extra"], "unexpected argument"),
            (&["--token"], "--token needs a value"),
        ] {
            match parse_workspaces(&v(args), &env_of(&[TOKEN])) {
                Err(e) => {
                    assert!(e.is_usage(), "{args:?}: {e}");
                    assert!(e.message.contains(want), "{args:?}: {e}");
                }
                other => panic!("{args:?}: {other:?}"),
            }
        }
        match parse_workspaces(&v(&[]), &env_of(&[])) {
            Err(e) => assert!(e.is_config(), "{e}"),
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn token_file_contents_are_trimmed_and_checked() {
        let dir = std::env::temp_dir().join(format!("kubegate-cli-token-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let f = dir.join("token");
        std::fs::write(&f, "  kubegate-demo-token\n").unwrap();
        assert_eq!(read_token_file(&f).unwrap(), "kubegate-demo-token");
        let common = CommonArgs {
            server: DEFAULT_SERVER.into(),
            token: TokenSource::File(f.clone()),
            ca_file: None,
        };
        assert_eq!(common.token().unwrap(), "kubegate-demo-token");

        std::fs::write(&f, "\n\n").unwrap();
        let e = read_token_file(&f).unwrap_err();
        assert!(e.is_config() && e.message.contains("empty"), "{e}");

        std::fs::write(&f, "two\nlines\n").unwrap();
        let e = read_token_file(&f).unwrap_err();
        assert!(e.message.contains("one line"), "{e}");
        assert!(!e.message.contains("two"), "the token leaked: {e}");

        std::fs::write(&f, vec![b'a'; (MAX_TOKEN_FILE + 1) as usize]).unwrap();
        assert!(read_token_file(&f).unwrap_err().message.contains("larger"));

        let e = read_token_file(&dir.join("missing")).unwrap_err();
        assert!(e.is_config() && e.message.contains("missing"), "{e}");
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn debug_output_never_shows_the_token() {
        let a = exec_ok(&["--token", "s3cr3t", "-w", "p/u", "d", "--", "ls"], &[]);
        assert!(!format!("{a:?}").contains("s3cr3t"));
    }
    #[test]
    fn session_command_arguments() {
        let e = env_of(&[TOKEN]);
        let run = |r: Result<Parsed<SessionsArgs>, CliError>| match r {
            Ok(Parsed::Run(a)) => a,
            other => panic!("{other:?}"),
        };
        assert_eq!(run(parse_sessions(&v(&[]), &e)).op, SessionsOp::List);
        let a = run(parse_sessions(&v(&["list", "-o", "json"]), &e));
        assert_eq!((a.op, a.output), (SessionsOp::List, OutputFormat::Json));
        assert_eq!(
            run(parse_sessions(&v(&["stop", "abc123"]), &e)).op,
            SessionsOp::Stop("abc123".into())
        );
        assert_eq!(
            run(parse_sessions(
                &v(&["--server=http://h:1", "resume", "x1"]),
                &e
            ))
            .op,
            SessionsOp::Resume("x1".into())
        );
        for (args, want) in [
            (&["stop"][..], "missing the session ID"),
            (&["resume"], "missing the session ID"),
            (&["frob"], "unknown sessions command"),
            (&["stop", "a", "b"], "unexpected argument"),
            (&["stop", "../x"], "not a session id"),
            (&["stop", "a", "-o", "json"], "list only"),
        ] {
            match parse_sessions(&v(args), &e) {
                Err(err) => assert!(
                    err.is_usage() && err.message.contains(want),
                    "{args:?}: {err}"
                ),
                other => panic!("{args:?}: {other:?}"),
            }
        }

        match parse_attach(&v(&["--from-start", "s1", "web"]), &e) {
            Ok(Parsed::Run(a)) => {
                assert!(a.from_start);
                assert_eq!((a.session.as_str(), a.app.as_str()), ("s1", "web"));
            }
            other => panic!("{other:?}"),
        }
        for (args, want) in [
            (&["s1"][..], "missing APP"),
            (&[], "missing SESSION"),
            (&["s1", "a", "b"], "unexpected"),
            (&["--bogus", "s1", "a"], "unknown option"),
        ] {
            match parse_attach(&v(args), &e) {
                Err(err) => assert!(
                    err.is_usage() && err.message.contains(want),
                    "{args:?}: {err}"
                ),
                other => panic!("{args:?}: {other:?}"),
            }
        }

        match parse_port_forward(&v(&["s1", "8080"]), &e) {
            Ok(Parsed::Run(a)) => assert_eq!((a.port, a.local), (8080, 8080)),
            other => panic!("{other:?}"),
        }
        match parse_port_forward(&v(&["s1", "8080", "0"]), &e) {
            Ok(Parsed::Run(a)) => assert_eq!((a.port, a.local), (8080, 0)),
            other => panic!("{other:?}"),
        }
        for (args, want) in [
            (&["s1"][..], "missing PORT"),
            (&["s1", "0"], "not 0"),
            (&["s1", "http"], "not a port"),
            (&["s1", "80", "70000"], "not a port"),
        ] {
            match parse_port_forward(&v(args), &e) {
                Err(err) => assert!(
                    err.is_usage() && err.message.contains(want),
                    "{args:?}: {err}"
                ),
                other => panic!("{args:?}: {other:?}"),
            }
        }
        assert_eq!(parse_port_forward(&v(&["-h"]), &e), Ok(Parsed::Help));
    }

    #[test]
    fn dev_arguments() {
        let e = env_of(&[TOKEN]);
        let run = |args: &[&str]| match parse_dev(&v(args), &e) {
            Ok(Parsed::Run(a)) => a,
            other => panic!("{args:?}: {other:?}"),
        };
        let a = run(&[]);
        assert_eq!((a.dir, a.stdin), (PathBuf::from("."), None));
        let a = run(&["--stdin", "worker", "examples/x"]);
        assert_eq!(
            (a.dir, a.stdin.as_deref()),
            (PathBuf::from("examples/x"), Some("worker"))
        );
        let a = run(&["proj", "--stdin=web", "--server", "http://h:1"]);
        assert_eq!(
            (a.dir, a.stdin.as_deref(), a.common.server.as_str()),
            (PathBuf::from("proj"), Some("web"), "http://h:1")
        );
        for (args, want) in [
            (&["a", "b"][..], "unexpected argument"),
            (&["--stdin"], "--stdin needs a value"),
            (&["--stdin="], "must not be empty"),
            (&["--frob"], "unknown option"),
            (&[""], "DIR must not be empty"),
        ] {
            match parse_dev(&v(args), &e) {
                Err(err) => assert!(
                    err.is_usage() && err.message.contains(want),
                    "{args:?}: {err}"
                ),
                other => panic!("{args:?}: {other:?}"),
            }
        }
        assert_eq!(parse_dev(&v(&["--help"]), &e), Ok(Parsed::Help));
    }
}
