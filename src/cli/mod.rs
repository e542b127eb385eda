//! The binary's command line (`command`: the command word and the flags of
//! `serve`, `check-config` and `sim`) and the client commands that talk to
//! a running daemon (docs/cli.md#the-client-commands): `kubegate exec`,
//! `kubegate workspaces`, `kubegate sessions`, `kubegate attach`, `kubegate
//! port-forward` and `kubegate dev`. Decisions (exit codes, client-side
//! error codes, `-t` without a terminal, environment variables, the attach
//! state file, the detach key): docs/cli.md. Exit codes and the client-side
//! error codes live in `crate::exit`; every command line is read with
//! lexopt.
//!
//! - `command`: the binary's top-level command line (`kubegate WORD …`,
//!   the `serve` and `check-config` flags; `sim` reads its own, in
//!   `sim::args`), what `main.rs` dispatches on;
//! - `args`: the client commands' argument parsing, pure (the environment
//!   is passed in), so every case is unit-tested; `args::help` their help
//!   texts;
//! - `net`: the daemon connection through `http::client` (the crate's one
//!   client path: TCP, TLS, one deadline), a tiny HTTP/1.1 GET and the
//!   WebSocket upgrade;
//! - `exec`: the interactive exec session, its threads and its exit code;
//! - `term`: the local terminal: raw mode with a restoring guard, the window
//!   size, signals;
//! - `workspaces`: the listing and its table;
//! - `sessions`: the session listing, stop and resume;
//! - `attach`: a session app's io socket (`kubegate.io.v1`), replay from
//!   the last seq seen (kept in a state file), detach;
//! - `port_forward`: a local HTTP listener through the daemon's port proxy;
//! - `io_socket`: one connection to a session app's io socket (its pump,
//!   its frames, what its close means), for `attach` and `dev`;
//! - `events`: a session's event stream (SSE over chunked HTTP), resumed
//!   with `Last-Event-ID`;
//! - `login`: `kubegate login` (the device authorization grant),
//!   `logout`, `whoami`, and the stored ID token (refreshed under a lock)
//!   that every command sends when given no token; `oidc`: their OAuth and
//!   OpenID messages and the poll schedule, sans I/O; `token_store`: the
//!   token files and their locks;
//! - `dev`: `kubegate dev [DIR]`, a folder run as a session: the manifest,
//!   the bundle, prefixed output of every app, file sync, input, Ctrl-C.
//!
//! Every kubegate-side failure is one [`CliError`], printed as
//! `kubegate: CODE: message` on stderr. The token is never printed.

mod args;
mod attach;
pub mod command;
mod dev;
mod events;
mod exec;
mod io_socket;
mod login;
mod net;
mod oidc;
mod port_forward;
mod sessions;
mod term;
mod token_store;
mod workspaces;

pub use args::{AttachArgs, DevArgs, ExecArgs, PortForwardArgs, SessionsArgs, WorkspacesArgs};

use crate::exit::{self, codes, Parsed};
use std::fmt;

/// A local I/O failure: `LOCAL_IO`, saying what was being done.
pub(crate) fn local_io(what: &str, e: impl fmt::Display) -> CliError {
    CliError::new(codes::LOCAL_IO, format!("{what}: {e}"))
}

/// One kubegate-side failure: a code (a daemon code such as
/// `EXEC_TARGET_NOT_FOUND`, or one of [`codes`]) and a message.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CliError {
    pub code: String,
    pub message: String,
}

impl CliError {
    pub fn new(code: &str, message: impl Into<String>) -> CliError {
        CliError {
            code: code.to_string(),
            message: message.into(),
        }
    }

    pub fn usage(message: impl Into<String>) -> CliError {
        CliError::new(codes::USAGE, message)
    }

    pub fn is_usage(&self) -> bool {
        self.code == codes::USAGE
    }

    /// A configuration error (exit 2): the token or CA file, or a `kubegate
    /// dev` manifest.
    pub fn is_config(&self) -> bool {
        self.code == codes::CONFIG || self.code == codes::MANIFEST
    }
}

impl fmt::Display for CliError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}", self.code, self.message)
    }
}

impl std::error::Error for CliError {}

/// Prints `kubegate: CODE: message` on stderr (plus the command's synopsis
/// for a usage error).
fn report(e: &CliError, synopsis: &str) {
    if e.is_usage() {
        eprintln!("kubegate: {e}\n{synopsis}");
    } else {
        eprintln!("kubegate: {e}");
    }
}

fn env_var(name: &str) -> Option<String> {
    std::env::var(name).ok()
}

/// How a client command's own failures become exit codes.
#[derive(Clone, Copy)]
enum Exits {
    /// 2 usage or configuration error, 1 any other failure.
    Plain,
    /// [`exit::OWN_ERROR`] (255) for every failure of kubegate's own: the
    /// command passes a remote exit code on (`exec`, `attach`).
    Own,
    /// `login`: as [`Exits::Plain`], and 3 denied, 4 the code expired.
    Login,
}

/// One client command: its parsed arguments (or the parse error), its help,
/// its synopsis, how it exits, and what runs it (returning the exit code).
fn client_main<A>(
    parsed: Result<Parsed<A>, CliError>,
    help: &str,
    synopsis: &str,
    exits: Exits,
    run: impl FnOnce(&A) -> Result<i32, CliError>,
) -> i32 {
    let result = match parsed {
        Ok(Parsed::Help) => {
            print!("{help}");
            return exit::SUCCESS;
        }
        Ok(Parsed::Run(a)) => run(&a),
        Err(e) => Err(e),
    };
    match result {
        Ok(code) => code,
        Err(e) => fail(&e, synopsis, exits),
    }
}

/// Reports a client command's failure; its exit code.
fn fail(e: &CliError, synopsis: &str, exits: Exits) -> i32 {
    report(e, synopsis);
    match exits {
        Exits::Plain => exit::for_code(&e.code),
        Exits::Own => exit::OWN_ERROR,
        Exits::Login => login::login_exit_code(&e.code),
    }
}

/// A client command's usage error found before its own parser ran (an
/// argument that is not UTF-8 text): reported as its parser's would be,
/// with its synopsis and its exit code (255 for exec and attach).
pub fn refuse_usage(c: command::Client, e: &exit::UsageError) -> i32 {
    use args::help;
    use command::Client;
    let (synopsis, exits) = match c {
        Client::Exec => (help::EXEC_SYNOPSIS, Exits::Own),
        Client::Attach => (help::ATTACH_SYNOPSIS, Exits::Own),
        Client::Workspaces => (help::WORKSPACES_SYNOPSIS, Exits::Plain),
        Client::Sessions => (help::SESSIONS_SYNOPSIS, Exits::Plain),
        Client::PortForward => (help::PORT_FORWARD_SYNOPSIS, Exits::Plain),
        Client::Dev => (help::DEV_SYNOPSIS, Exits::Plain),
        Client::Login => (help::LOGIN_SYNOPSIS, Exits::Login),
        Client::Logout => (help::LOGOUT_SYNOPSIS, Exits::Plain),
        Client::Whoami => (help::WHOAMI_SYNOPSIS, Exits::Plain),
    };
    fail(&CliError::usage(e.to_string()), synopsis, exits)
}

/// `kubegate exec …`: returns the process exit code (the remote command's,
/// or 255 for kubegate's own errors).
pub fn exec_main(argv: &[String]) -> i32 {
    let parsed = args::parse_exec(argv, &env_var);
    client_main(
        parsed,
        &args::help::exec_help(),
        args::help::EXEC_SYNOPSIS,
        Exits::Own,
        exec::run,
    )
}

/// `kubegate workspaces …`: 0 success, 2 usage or configuration error, 1
/// any other failure.
pub fn workspaces_main(argv: &[String]) -> i32 {
    let parsed = args::parse_workspaces(argv, &env_var);
    client_main(
        parsed,
        &args::help::workspaces_help(),
        args::help::WORKSPACES_SYNOPSIS,
        Exits::Plain,
        |a| workspaces::run(a).map(|()| exit::SUCCESS),
    )
}

/// `kubegate sessions …`: 0 success, 2 usage or configuration error, 1
/// any other failure.
pub fn sessions_main(argv: &[String]) -> i32 {
    let parsed = args::parse_sessions(argv, &env_var);
    client_main(
        parsed,
        &args::help::sessions_help(),
        args::help::SESSIONS_SYNOPSIS,
        Exits::Plain,
        |a| sessions::run(a).map(|()| exit::SUCCESS),
    )
}

/// `kubegate attach …`: 0 detached, 1 the session ended, 255 kubegate's
/// own errors (usage included, as exec).
pub fn attach_main(argv: &[String]) -> i32 {
    let parsed = args::parse_attach(argv, &env_var);
    client_main(
        parsed,
        &args::help::attach_help(),
        args::help::ATTACH_SYNOPSIS,
        Exits::Own,
        attach::run,
    )
}

/// `kubegate port-forward …`: 0 after a stop by signal, 2 usage or
/// configuration error, 1 any other failure.
pub fn port_forward_main(argv: &[String]) -> i32 {
    let parsed = args::parse_port_forward(argv, &env_var);
    client_main(
        parsed,
        &args::help::port_forward_help(),
        args::help::PORT_FORWARD_SYNOPSIS,
        Exits::Plain,
        |a| port_forward::run(a).map(|()| exit::SUCCESS),
    )
}

/// `kubegate dev …`: 0 once the session stopped (or was suspended) after
/// Ctrl-C; 2 usage, configuration or manifest error (nothing started); 1
/// any other failure (docs/dev.md).
pub fn dev_main(argv: &[String]) -> i32 {
    let parsed = args::parse_dev(argv, &env_var);
    client_main(
        parsed,
        &args::help::dev_help(),
        args::help::DEV_SYNOPSIS,
        Exits::Plain,
        dev::run,
    )
}

/// `kubegate login`: 0 signed in, 2 usage or configuration error, 3
/// denied, 4 the code expired, 1 any other failure.
pub fn login_main(argv: &[String]) -> i32 {
    let parsed = args::parse_login(argv, &env_var);
    client_main(
        parsed,
        &args::help::login_help(),
        args::help::LOGIN_SYNOPSIS,
        Exits::Login,
        login::run_login,
    )
}

/// `kubegate logout`: 0 success, 2 usage error, 1 any other failure.
pub fn logout_main(argv: &[String]) -> i32 {
    let parsed = args::parse_logout(argv, &env_var);
    client_main(
        parsed,
        &args::help::logout_help(),
        args::help::LOGOUT_SYNOPSIS,
        Exits::Plain,
        login::run_logout,
    )
}

/// `kubegate whoami`: 0 success, 2 usage or configuration error, 1 any
/// other failure.
pub fn whoami_main(argv: &[String]) -> i32 {
    let parsed = args::parse_whoami(argv, &env_var);
    client_main(
        parsed,
        &args::help::whoami_help(),
        args::help::WHOAMI_SYNOPSIS,
        Exits::Plain,
        login::run_whoami,
    )
}
