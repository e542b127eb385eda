//! `kubegate WORD …`: the binary's top-level command line, pure but for
//! the sim's `--token-file` (read here, so a bad file is a usage error
//! before anything starts). [`parse`] reads the command word and, for the
//! commands whose flags are the binary's own (`serve`, `check-config`,
//! `sim`), their flags; the other commands get the rest of the line and
//! parse it themselves (`cli::args`, `runner`, `agent`). `main.rs` only
//! matches on the [`Command`] and calls the layer that owns it.
//!
//! Not here: `__shim` (the sim's per-container guardian reads its own
//! words before anything else, once per container and exec), the sim's
//! options type (`sim` is below `cli`: [`SimArgs`] is its command-line
//! picture, and `main.rs` turns it into the sim's options).

use crate::exit;
use lexopt::prelude::*;
use std::fmt;
use std::net::SocketAddr;
use std::path::PathBuf;

/// `kubegate --help`.
pub const USAGE: &str = "usage: kubegate <command> [options]

commands:
  serve         run the daemon
                kubegate serve --config FILE
  check-config  validate a config file without starting
                kubegate check-config --config FILE
  sim           run the simulated Kubernetes cluster
                kubegate sim [--listen ADDR] [--kubeconfig-out PATH] [--tls]
                             [--token-file F | --no-auth | --token T (deprecated)]
                             (default: TLS and a random token, in the kubeconfig only)
                             [--client-ca] [--state-dir DIR] [--namespace NAME]...
                             [--fail-image GLOB]... [--allow-remote] [--request-log FILE]
                             [--uid-range FIRST-LAST|off] [--pods-dir DIR]
  exec          run a command in a workspace Deployment through the daemon
                kubegate exec [-i] [-t] [-c CONTAINER] --workspace PROJECT/UID DEPLOYMENT -- CMD [ARGS...]
  workspaces    list the workspaces and Deployments the token may exec into
                kubegate workspaces [--output table|json]
  sessions      list, stop or resume the token's watch sessions
                kubegate sessions [list [--output table|json] | stop ID | resume ID]
  attach        join a session app's output and input (Ctrl-] detaches in raw mode)
                kubegate attach [--from-start] SESSION APP
  port-forward  forward local HTTP requests to a port of a session's pod
                kubegate port-forward SESSION PORT [LOCAL]
  dev           run a project folder (its kubegate.toml) as a session: prefixed output,
                local edits synced, Ctrl-C stops it
                kubegate dev [--stdin APP] [DIR]
  app-runner    run a program with live reload and a debug event stream (in app containers)
                kubegate app-runner [--root DIR] [--inspect-addr HOST:PORT] [--app NAME] -- CMD [ARGS...]
  install-self  copy this executable to DEST/kubegate, atomically (session pods' init container)
                kubegate install-self DEST
  workspace-agent
                serve a session pod's workspace folder (token in KUBEGATE_WORKSPACE_TOKEN)
                kubegate workspace-agent [--listen ADDR] [--root DIR] [--max-file-bytes N]
                                         [--max-files N] [--max-total-bytes N]

client commands (exec, workspaces, sessions, attach, port-forward, dev) take
--server URL (env KUBEGATE_SERVER, default http://127.0.0.1:7443), --token T
or --token-file F (env KUBEGATE_TOKEN) and --ca-file F; `kubegate COMMAND
--help` for details.
";

/// Where `kubegate sim` listens without `--listen`: loopback, any free port.
pub const SIM_DEFAULT_LISTEN: SocketAddr =
    SocketAddr::new(std::net::IpAddr::V4(std::net::Ipv4Addr::LOCALHOST), 0);

/// A top-level usage error: printed as `kubegate: message`, then
/// [`USAGE`], exit 2 ([`usage_error`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UsageError(pub String);

impl fmt::Display for UsageError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for UsageError {}

impl From<lexopt::Error> for UsageError {
    fn from(e: lexopt::Error) -> UsageError {
        UsageError(exit::usage_text(e))
    }
}

fn usage(m: impl Into<String>) -> UsageError {
    UsageError(m.into())
}

/// Prints a top-level usage error and the usage; the exit code (2).
pub fn usage_error(e: &UsageError) -> i32 {
    eprintln!("kubegate: {e}\n\n{USAGE}");
    exit::USAGE
}

/// A client command (`crate::cli`): each parses the rest of the line.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Client {
    Exec,
    Workspaces,
    Sessions,
    Attach,
    PortForward,
    Dev,
}

impl Client {
    /// Runs the command with the words after its name; the exit code.
    pub fn main(self, argv: &[String]) -> i32 {
        match self {
            Client::Exec => super::exec_main(argv),
            Client::Workspaces => super::workspaces_main(argv),
            Client::Sessions => super::sessions_main(argv),
            Client::Attach => super::attach_main(argv),
            Client::PortForward => super::port_forward_main(argv),
            Client::Dev => super::dev_main(argv),
        }
    }
}

/// What `kubegate …` asks for.
#[derive(Debug, PartialEq, Eq)]
pub enum Command<'a> {
    /// `--help`, `-h`, `help`: print [`USAGE`].
    Help,
    /// `--version`, `version`.
    Version,
    /// `serve --config FILE`: the daemon.
    Serve(PathBuf),
    /// `check-config --config FILE`.
    CheckConfig(PathBuf),
    /// `sim …`: the simulated cluster.
    Sim(SimArgs),
    /// A client command and the words after its name.
    Client(Client, &'a [String]),
    /// `workspace-agent …` (the agent parses the rest).
    WorkspaceAgent(&'a [String]),
    /// `app-runner …` (the runner parses the rest).
    AppRunner(&'a [String]),
    /// `install-self …` (the runner parses the rest).
    InstallSelf(&'a [String]),
}

/// How `--uid-range FIRST-LAST` is read: the sim's own rule
/// (`sim::pod_users::parse_range`), passed in by `main.rs` (`cli` does not
/// import `sim`).
pub type UidRangeRule<'a, E> = &'a dyn Fn(&str) -> Result<(u32, u32), E>;

/// Reads the command line after the program name. `uid_range` reads
/// `--uid-range FIRST-LAST` (the sim's own rule, `sim::pod_users`).
pub fn parse<'a, E: fmt::Display>(
    argv: &'a [String],
    uid_range: UidRangeRule<'_, E>,
) -> Result<Command<'a>, UsageError> {
    let Some((word, rest)) = argv.split_first() else {
        return Err(usage("missing command"));
    };
    let client = |c| Ok(Command::Client(c, rest));
    match word.as_str() {
        "serve" => Ok(Command::Serve(config_flag(rest)?)),
        "check-config" => Ok(Command::CheckConfig(config_flag(rest)?)),
        "sim" => Ok(Command::Sim(parse_sim(rest, uid_range)?)),
        "exec" => client(Client::Exec),
        "workspaces" => client(Client::Workspaces),
        "sessions" => client(Client::Sessions),
        "attach" => client(Client::Attach),
        "port-forward" => client(Client::PortForward),
        "dev" => client(Client::Dev),
        "workspace-agent" => Ok(Command::WorkspaceAgent(rest)),
        "app-runner" => Ok(Command::AppRunner(rest)),
        "install-self" => Ok(Command::InstallSelf(rest)),
        "-h" | "--help" | "help" => Ok(Command::Help),
        "--version" | "version" => Ok(Command::Version),
        other => Err(usage(format!("unknown command {other:?}"))),
    }
}

/// The one flag of `serve` and `check-config`: `--config FILE`.
fn config_flag(argv: &[String]) -> Result<PathBuf, UsageError> {
    let mut config = None;
    let mut p = lexopt::Parser::from_args(argv);
    while let Some(arg) = p.next()? {
        match arg {
            Long("config") => {
                let v = p.value()?.string()?;
                if v.is_empty() {
                    return Err(usage("--config must not be empty"));
                }
                config = Some(PathBuf::from(v));
            }
            other => return Err(other.unexpected().into()),
        }
    }
    config.ok_or_else(|| usage("--config FILE is required"))
}

/// `kubegate sim`'s command line, its credential settled (docs/sim.md,
/// "Command line and authentication"): the sim's options as the flags
/// give them.
#[derive(Clone, PartialEq, Eq)]
pub struct SimArgs {
    /// `--listen IP:PORT` (default [`SIM_DEFAULT_LISTEN`]).
    pub listen: SocketAddr,
    /// `--kubeconfig-out PATH`: where the sim writes a kubeconfig for it.
    pub kubeconfig_out: Option<PathBuf>,
    /// `--tls`, and implied by any credential: kubectl (client-go) sends no
    /// token or client certificate to a plain-HTTP server.
    pub tls: bool,
    /// The bearer token; `None` with `--no-auth` or `--client-ca` alone.
    pub token: Option<String>,
    /// `--client-ca`: clients authenticate with a certificate.
    pub client_ca: bool,
    /// `--state-dir DIR`: the sim's objects survive a restart there.
    pub state_dir: Option<PathBuf>,
    /// `--namespace NAME`, repeated: namespaces created at start.
    pub namespaces: Vec<String>,
    /// `--fail-image GLOB`, repeated: images whose pulls fail.
    pub fail_images: Vec<String>,
    /// `--allow-remote`: listen beyond loopback.
    pub allow_remote: bool,
    /// `--request-log FILE`: one JSON line per API request.
    pub request_log: Option<PathBuf>,
    /// `--pods-dir DIR`: where pods' folders live.
    pub pods_dir: Option<PathBuf>,
    /// `--uid-range`: `None` the sim's default, `Some(None)` `off`.
    pub uid_range: Option<Option<(u32, u32)>>,
    /// `--token T` was used (deprecated: every local user reads it in `ps`).
    pub deprecated_token: bool,
}

impl fmt::Debug for SimArgs {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        // Never print a token, not even in a debug dump.
        f.debug_struct("SimArgs")
            .field("listen", &self.listen)
            .field("tls", &self.tls)
            .field("token", &self.token.as_ref().map(|_| "<redacted>"))
            .field("client_ca", &self.client_ca)
            .finish_non_exhaustive()
    }
}

impl SimArgs {
    /// What the sim's start should warn about: the deprecated `--token`,
    /// and a sim that serves anyone.
    pub fn warnings(&self) -> Vec<String> {
        let mut w = Vec::new();
        if self.deprecated_token {
            w.push("--token is deprecated: every local user reads it in `ps`; use --token-file F, or no flag at all (a random token, written into the kubeconfig)".to_string());
        }
        if self.token.is_none() && !self.client_ca {
            w.push(format!("--no-auth: anyone who reaches {} is served, and the sim runs their commands as this user", self.listen));
        }
        w
    }
}

/// How a standalone sim authenticates its clients. Any credential implies
/// `--tls`.
enum SimAuth {
    /// No flag: a random token (none with `--client-ca`: the client
    /// certificate), written into the kubeconfig only.
    Random,
    /// `--token-file F`: the file's contents, whitespace trimmed.
    File(PathBuf),
    /// `--token T`: deprecated (every local user reads it in `ps`).
    Flag(String),
    /// `--no-auth`: anyone who reaches the port is served.
    None,
}

fn non_empty(flag: &str, v: String) -> Result<String, UsageError> {
    if v.is_empty() {
        return Err(usage(format!("{flag} must not be empty")));
    }
    Ok(v)
}

/// The sim's flags; the credential is settled by [`settle_auth`].
fn parse_sim<E: fmt::Display>(
    argv: &[String],
    uid_range: UidRangeRule<'_, E>,
) -> Result<SimArgs, UsageError> {
    let mut a = SimArgs {
        listen: SIM_DEFAULT_LISTEN,
        kubeconfig_out: None,
        tls: false,
        token: None,
        client_ca: false,
        state_dir: None,
        namespaces: Vec::new(),
        fail_images: Vec::new(),
        allow_remote: false,
        request_log: None,
        pods_dir: None,
        uid_range: None,
        deprecated_token: false,
    };
    let mut auth: Option<(SimAuth, &str)> = None;
    let mut set_auth = |x: SimAuth, flag: &'static str| -> Result<(), UsageError> {
        if let Some((_, prev)) = &auth {
            return Err(usage(format!("{flag} and {prev} exclude each other")));
        }
        auth = Some((x, flag));
        Ok(())
    };
    let mut p = lexopt::Parser::from_args(argv);
    while let Some(arg) = p.next()? {
        match arg {
            Long("no-auth") => set_auth(SimAuth::None, "--no-auth")?,
            Long("tls") => a.tls = true,
            Long("client-ca") => a.client_ca = true,
            Long("allow-remote") => a.allow_remote = true,
            Long("listen") => {
                let v = p.value()?.string()?;
                a.listen = v
                    .parse::<SocketAddr>()
                    .map_err(|e| usage(format!("--listen {v:?}: {e} (expected IP:PORT)")))?;
            }
            Long("kubeconfig-out") => a.kubeconfig_out = Some(p.value()?.string()?.into()),
            Long("token-file") => {
                let v = non_empty("--token-file", p.value()?.string()?)?;
                set_auth(SimAuth::File(v.into()), "--token-file")?;
            }
            Long("token") => {
                let v = non_empty("--token", p.value()?.string()?)?;
                set_auth(SimAuth::Flag(v), "--token")?;
            }
            Long("state-dir") => a.state_dir = Some(p.value()?.string()?.into()),
            Long("namespace") => a.namespaces.push(p.value()?.string()?),
            Long("fail-image") => a.fail_images.push(p.value()?.string()?),
            Long("request-log") => a.request_log = Some(p.value()?.string()?.into()),
            Long("uid-range") => {
                a.uid_range = Some(match p.value()?.string()?.as_str() {
                    "off" => None,
                    r => Some(uid_range(r).map_err(|e| usage(format!("--uid-range: {e}")))?),
                });
            }
            Long("pods-dir") => a.pods_dir = Some(p.value()?.string()?.into()),
            other => return Err(other.unexpected().into()),
        }
    }
    settle_auth(&mut a, auth.map_or(SimAuth::Random, |(x, _)| x))?;
    Ok(a)
}

/// Applies the credential the flags chose, refusing the combinations
/// that make no sense or serve anyone from anywhere.
fn settle_auth(a: &mut SimArgs, auth: SimAuth) -> Result<(), UsageError> {
    match auth {
        SimAuth::Random => {
            if a.kubeconfig_out.is_none() {
                return Err(usage("the sim's credential (a random token, or with --client-ca a client certificate) is written only into the kubeconfig: pass --kubeconfig-out FILE (or --token-file F, or --no-auth)"));
            }
            // With --client-ca the client certificate is the credential.
            if !a.client_ca {
                a.token = Some(crate::token::random_hex());
            }
        }
        SimAuth::File(p) => a.token = Some(read_sim_token(&p)?),
        SimAuth::Flag(t) => {
            a.token = Some(t);
            a.deprecated_token = true;
        }
        SimAuth::None => {
            if a.client_ca {
                return Err(usage("--no-auth and --client-ca exclude each other"));
            }
            if a.allow_remote {
                return Err(usage("--no-auth with --allow-remote would run anyone's commands on this host: give the sim a token (--token-file F, or none: a random one)"));
            }
        }
    }
    // A credential travels over TLS only: kubectl (client-go) sends no
    // token or client certificate to a plain-HTTP server.
    if a.token.is_some() || a.client_ca {
        a.tls = true;
    }
    Ok(())
}

/// `--token-file F`: one line without spaces, surrounding whitespace
/// trimmed.
fn read_sim_token(p: &std::path::Path) -> Result<String, UsageError> {
    let text = std::fs::read_to_string(p)
        .map_err(|e| usage(format!("--token-file {}: {e}", p.display())))?;
    let t = text.trim();
    if t.is_empty() {
        return Err(usage(format!(
            "--token-file {}: the file is empty",
            p.display()
        )));
    }
    if t.chars().any(|c| c.is_whitespace() || c.is_control()) {
        return Err(usage(format!(
            "--token-file {}: a token is one line without spaces",
            p.display()
        )));
    }
    Ok(t.to_string())
}

#[cfg(test)]
mod tests;
