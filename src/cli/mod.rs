//! The client commands that talk to a running daemon (contract.md, "Client
//! commands"): `kubegate exec`, `kubegate workspaces`, `kubegate sessions`,
//! `kubegate attach`, `kubegate port-forward` and `kubegate dev`. Decisions (exit codes,
//! client-side error codes, `-t` without a terminal, environment variables,
//! the attach state file, the detach key): docs/cli.md.
//!
//! - `args`: argument parsing, pure (the environment is passed in), so every
//!   case is unit-tested;
//! - `net`: the daemon connection: TCP + TLS through `kube::remote::connect`
//!   (one connect path, one deadline), a tiny HTTP/1.1 GET and the WebSocket
//!   upgrade;
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
//! - `dev`: `kubegate dev [DIR]`, a folder run as a session: the manifest,
//!   the bundle, prefixed output of every app, file sync, input, Ctrl-C.
//!
//! Every kubegate-side failure is one [`CliError`], printed as
//! `kubegate: CODE: message` on stderr. The token is never printed.

mod args;
mod attach;
mod dev;
mod events;
mod exec;
mod io_socket;
mod net;
mod port_forward;
mod sessions;
mod term;
mod workspaces;

pub use args::{
    AttachArgs, DevArgs, ExecArgs, Parsed, PortForwardArgs, SessionsArgs, WorkspacesArgs,
};

use std::fmt;

/// Exit code of `kubegate exec` for its own errors, usage errors included
/// (as ssh does): the remote command's codes are 0..=255 and pass through.
pub const EXEC_OWN_ERROR: i32 = 255;

/// Client-side error codes (the daemon's own are `api::Code`).
pub mod codes {
    /// Bad flags or arguments.
    pub const USAGE: &str = "USAGE";
    /// A token file or CA file that cannot be used, or no token at all.
    pub const CONFIG: &str = "CONFIG";
    /// The daemon could not be reached: DNS, TCP connect, TLS handshake
    /// (certificate verification included) or no answer before the deadline.
    pub const UNREACHABLE: &str = "UNREACHABLE";
    /// The server answered, but not as a kubegate daemon does (not a
    /// WebSocket, wrong subprotocol, a frame or body that does not decode).
    pub const PROTOCOL: &str = "PROTOCOL";
    /// The exec stream ended before the command's exit status came.
    pub const DISCONNECTED: &str = "DISCONNECTED";
    /// Reading our stdin or writing our stdout/stderr failed.
    pub const LOCAL_IO: &str = "LOCAL_IO";
    /// `kubegate dev`: the folder's `kubegate.toml` is missing, malformed,
    /// or declares something a session cannot have (a configuration
    /// error: exit 2).
    pub const MANIFEST: &str = "MANIFEST";
}

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

/// `kubegate exec …`: returns the process exit code (the remote command's,
/// or 255 for kubegate's own errors).
pub fn exec_main(argv: &[String]) -> i32 {
    match args::parse_exec(argv, &env_var) {
        Ok(Parsed::Help) => {
            print!("{}", args::EXEC_HELP);
            0
        }
        Ok(Parsed::Run(a)) => match exec::run(&a) {
            Ok(code) => code,
            Err(e) => {
                report(&e, args::EXEC_SYNOPSIS);
                EXEC_OWN_ERROR
            }
        },
        Err(e) => {
            report(&e, args::EXEC_SYNOPSIS);
            EXEC_OWN_ERROR
        }
    }
}

/// `kubegate workspaces …`: 0 success, 2 usage or configuration error, 1
/// any other failure.
pub fn workspaces_main(argv: &[String]) -> i32 {
    let a = match args::parse_workspaces(argv, &env_var) {
        Ok(Parsed::Help) => {
            print!("{}", args::WORKSPACES_HELP);
            return 0;
        }
        Ok(Parsed::Run(a)) => a,
        Err(e) => {
            report(&e, args::WORKSPACES_SYNOPSIS);
            return 2;
        }
    };
    match workspaces::run(&a) {
        Ok(()) => 0,
        Err(e) => {
            report(&e, args::WORKSPACES_SYNOPSIS);
            if e.is_usage() || e.is_config() {
                2
            } else {
                1
            }
        }
    }
}

/// Exit code of the 0/1/2 commands for an error.
fn plain_exit(e: &CliError, synopsis: &str) -> i32 {
    report(e, synopsis);
    if e.is_usage() || e.is_config() {
        2
    } else {
        1
    }
}

/// `kubegate sessions …`: 0 success, 2 usage or configuration error, 1
/// any other failure.
pub fn sessions_main(argv: &[String]) -> i32 {
    match args::parse_sessions(argv, &env_var) {
        Ok(Parsed::Help) => {
            print!("{}", args::sessions_help());
            0
        }
        Ok(Parsed::Run(a)) => match sessions::run(&a) {
            Ok(()) => 0,
            Err(e) => plain_exit(&e, args::SESSIONS_SYNOPSIS),
        },
        Err(e) => plain_exit(&e, args::SESSIONS_SYNOPSIS),
    }
}

/// `kubegate attach …`: 0 detached, 1 the session ended, 255 kubegate's
/// own errors (usage included, as exec).
pub fn attach_main(argv: &[String]) -> i32 {
    match args::parse_attach(argv, &env_var) {
        Ok(Parsed::Help) => {
            print!("{}", args::attach_help());
            0
        }
        Ok(Parsed::Run(a)) => match attach::run(&a) {
            Ok(code) => code,
            Err(e) => {
                report(&e, args::ATTACH_SYNOPSIS);
                EXEC_OWN_ERROR
            }
        },
        Err(e) => {
            report(&e, args::ATTACH_SYNOPSIS);
            EXEC_OWN_ERROR
        }
    }
}

/// `kubegate port-forward …`: 0 after a stop by signal, 2 usage or
/// configuration error, 1 any other failure.
pub fn port_forward_main(argv: &[String]) -> i32 {
    match args::parse_port_forward(argv, &env_var) {
        Ok(Parsed::Help) => {
            print!("{}", args::port_forward_help());
            0
        }
        Ok(Parsed::Run(a)) => match port_forward::run(&a) {
            Ok(()) => 0,
            Err(e) => plain_exit(&e, args::PORT_FORWARD_SYNOPSIS),
        },
        Err(e) => plain_exit(&e, args::PORT_FORWARD_SYNOPSIS),
    }
}

/// `kubegate dev …`: 0 once the session stopped (or was suspended) after
/// Ctrl-C; 2 usage, configuration or manifest error (nothing started); 1
/// any other failure (docs/dev.md).
pub fn dev_main(argv: &[String]) -> i32 {
    match args::parse_dev(argv, &env_var) {
        Ok(Parsed::Help) => {
            print!("{}", args::dev_help());
            0
        }
        Ok(Parsed::Run(a)) => match dev::run(&a) {
            Ok(code) => code,
            Err(e) => plain_exit(&e, args::DEV_SYNOPSIS),
        },
        Err(e) => plain_exit(&e, args::DEV_SYNOPSIS),
    }
}
