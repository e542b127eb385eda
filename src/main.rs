//! The `kubegate` binary: reads the command line with
//! `kubegate::cli::command` and calls the layer that owns the command.
//! Exit codes (`kubegate::exit`, docs/cli.md): 0 success, 2 usage or
//! configuration error, 1 any other failure; `exec` passes on the remote
//! exit code and uses 255 for its own errors, as `attach` does.

use kubegate::cli::command::{self, Command};
use kubegate::exit;
use std::ffi::OsString;

fn main() {
    // Read as OsStrings: an argument that is not UTF-8 is a usage error,
    // not a panic.
    let raw: Vec<OsString> = std::env::args_os().skip(1).collect();
    let args = match exit::utf8_args(&raw) {
        Ok(a) => a,
        Err(e) => {
            let first = raw.first().and_then(|w| w.to_str());
            std::process::exit(command::refuse_non_text(first, &e));
        }
    };
    // Internal: the per-container guardian the sim's kubelet runs (see
    // sim/runtime), before anything else. Not a user command.
    if args.first().map(String::as_str) == Some("__shim") {
        std::process::exit(kubegate::sim::runtime::shim_main(&args[1..]));
    }
    let code = match command::parse(&args) {
        Err(e) => command::usage_error(&e),
        Ok(Command::Help) => {
            print!("{}", command::USAGE);
            0
        }
        Ok(Command::Version) => {
            println!("kubegate {}", env!("CARGO_PKG_VERSION"));
            0
        }
        Ok(Command::Serve(path)) => {
            init_logging_with("info");
            kubegate::server::serve_main(&path)
        }
        Ok(Command::CheckConfig(path)) => kubegate::server::serve::check_config_main(&path),
        // The sim reads its own flags; on a usage error it prints the
        // binary's usage, as `command::usage_error` does.
        Ok(Command::Sim(rest)) => {
            init_logging_with("info");
            kubegate::sim::standalone::sim_main(rest, command::USAGE)
        }
        // Client commands: exit codes of their own (exec: the remote
        // command's, 255 for kubegate's errors; docs/cli.md).
        Ok(Command::Client(c, rest)) => c.main(rest),
        // Runs inside a session pod's `workspace` container (docs/agent.md).
        Ok(Command::WorkspaceAgent(rest)) => {
            init_logging_with("info");
            kubegate::agent::agent_main(rest)
        }
        // Runs a session app's program inside its container
        // (docs/runner.md). Its stderr is the app's terminal: warnings only
        // unless RUST_LOG says otherwise.
        Ok(Command::AppRunner(rest)) => {
            init_logging_with("warn");
            kubegate::runner::app_runner_main(rest)
        }
        // Runs in a session pod's init container (docs/runner.md).
        Ok(Command::InstallSelf(rest)) => {
            init_logging_with("warn");
            kubegate::runner::install::install_self_main(rest)
        }
    };
    std::process::exit(code);
}

fn init_logging_with(default_level: &str) {
    // Capped whatever RUST_LOG says: at debug/trace these crates log
    // request headers (bearer tokens) and frame payloads.
    env_logger::Builder::from_env(env_logger::Env::default().default_filter_or(default_level))
        .filter_module("ureq", log::LevelFilter::Info)
        .filter_module("ureq_proto", log::LevelFilter::Info)
        .filter_module("rustls", log::LevelFilter::Info)
        .filter_module("tungstenite", log::LevelFilter::Info)
        .target(env_logger::Target::Stderr)
        .init();
}
