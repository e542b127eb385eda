//! `kubegate WORD …`: the binary's top-level command line, pure.
//! [`parse`] reads the command word and, for `serve` and `check-config`,
//! their one flag; the other commands get the rest of the line and parse
//! it themselves (`cli::args`, `sim::args`, `runner`, `agent`). `main.rs`
//! only matches on the [`Command`] and calls the layer that owns it.
//!
//! Not here: `__shim` (the sim's per-container guardian reads its own
//! words before anything else, once per container and exec), the sim's
//! flags (`sim` and `cli` do not import each other: the sim reads its own,
//! and prints [`USAGE`], passed in by `main.rs`, on a usage error).

use crate::exit::{self, UsageError};
use lexopt::prelude::*;
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
                kubegate sim node --kubeconfig F --name NAME --state-dir DIR --listen 127.0.0.1:PORT
                             --tls-cert-file F --tls-private-key-file F --client-ca-file F
                             [--pod-cidr 127.B.0.0/16] [--register-with-taints K=V:EFFECT,...]
                             [--node-labels K=V,...] [--capacity RESOURCE=QUANTITY,...]
                             [--uid-range FIRST-LAST]
                             (join a real control plane as Node NAME; docs/sim.md)
  exec          run a command in a workspace Deployment through the daemon
                kubegate exec [-i] [-t] [-c CONTAINER] --workspace PROJECT/UID DEPLOYMENT -- CMD [ARGS...]
  workspaces    list the workspaces and Deployments the token may exec into
                kubegate workspaces [--output table|json]
  sessions      list, stop or resume the token's watch sessions
                kubegate sessions [list [--output table|json] | stop ID | resume ID]
  attach        join a session app's output and input (Ctrl-] detaches in raw mode)
                kubegate attach [--from-start] SESSION APP
  port-forward  forward local TCP connections to a port of a session's pod
                kubegate port-forward SESSION [LOCAL:]REMOTE...
  dev           run a project folder (its kubegate.toml) as a session: prefixed output,
                local edits synced, Ctrl-C stops it
                kubegate dev [--stdin APP] [DIR]
  login         sign in with the daemon's OpenID provider (device code); later
                commands without a token use the stored, refreshed ID token
                kubegate login [--browser]
  logout        remove the tokens stored for the daemon
                kubegate logout
  whoami        who the daemon takes the token for: principal, groups, workspaces, expiry
                kubegate whoami [--output table|json]
  app-runner    run a program with live reload and a debug event stream (in app containers)
                kubegate app-runner [--root DIR] [--inspect-addr HOST:PORT] [--app NAME] -- CMD [ARGS...]
  install-self  copy this executable to DEST/kubegate, atomically (session pods' init container)
                kubegate install-self DEST
  workspace-agent
                serve a session pod's workspace folder (token in KUBEGATE_WORKSPACE_TOKEN)
                kubegate workspace-agent [--listen ADDR] [--root DIR] [--max-file-bytes N]
                                         [--max-files N] [--max-total-bytes N]

client commands (exec, workspaces, sessions, attach, port-forward, dev,
whoami) take --server URL (env KUBEGATE_SERVER, default
http://127.0.0.1:7443), --token T or --token-file F (env KUBEGATE_TOKEN;
none: the token kubegate login stored) and --ca-file F; `kubegate COMMAND
--help` for details.
";

fn usage(m: impl Into<String>) -> UsageError {
    UsageError(m.into())
}

/// Prints a top-level usage error and the usage; the exit code (2).
pub fn usage_error(e: &UsageError) -> i32 {
    exit::usage_error(e, USAGE)
}

/// Refuses a command line with an argument that is not UTF-8 text (every
/// command reads its words as text; `first` is the command word, if it is
/// text): as a usage error of the command it was given to, a client
/// command's own (`kubegate: USAGE: message` and its synopsis; 255 for
/// exec and attach, 2 for the others), any other command's as the
/// binary's (exit 2).
pub fn refuse_non_text(first: Option<&str>, e: &UsageError) -> i32 {
    let word: Vec<String> = first.map(String::from).into_iter().collect();
    match parse(&word) {
        Ok(Command::Client(c, _)) => super::refuse_usage(c, e),
        _ => usage_error(e),
    }
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
    Login,
    Logout,
    Whoami,
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
            Client::Login => super::login_main(argv),
            Client::Logout => super::logout_main(argv),
            Client::Whoami => super::whoami_main(argv),
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
    /// `sim …`: the simulated cluster (`sim::args` parses the rest).
    Sim(&'a [String]),
    /// A client command and the words after its name.
    Client(Client, &'a [String]),
    /// `workspace-agent …` (the agent parses the rest).
    WorkspaceAgent(&'a [String]),
    /// `app-runner …` (the runner parses the rest).
    AppRunner(&'a [String]),
    /// `install-self …` (the runner parses the rest).
    InstallSelf(&'a [String]),
}

/// Reads the command line after the program name.
pub fn parse(argv: &[String]) -> Result<Command<'_>, UsageError> {
    let Some((word, rest)) = argv.split_first() else {
        return Err(usage("missing command"));
    };
    let client = |c| Ok(Command::Client(c, rest));
    match word.as_str() {
        "serve" => Ok(Command::Serve(config_flag(rest)?)),
        "check-config" => Ok(Command::CheckConfig(config_flag(rest)?)),
        "sim" => Ok(Command::Sim(rest)),
        "exec" => client(Client::Exec),
        "workspaces" => client(Client::Workspaces),
        "sessions" => client(Client::Sessions),
        "attach" => client(Client::Attach),
        "port-forward" => client(Client::PortForward),
        "dev" => client(Client::Dev),
        "login" => client(Client::Login),
        "logout" => client(Client::Logout),
        "whoami" => client(Client::Whoami),
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

#[cfg(test)]
mod tests;
