//! The `kubegate` binary: reads the command line with
//! `kubegate::cli::command` and calls the layer that owns the command.
//! Exit codes (`kubegate::exit`, docs/cli.md): 0 success, 2 usage or
//! configuration error, 1 any other failure; `exec` passes on the remote
//! exit code and uses 255 for its own errors, as `attach` does.

use kubegate::cli::command::{self, Command, SimArgs};
use kubegate::sim::cluster::{Sim, SimError, SimOptions};
use std::io::Write;

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    // Internal: the per-container guardian the sim's kubelet runs (see
    // sim/runtime), before anything else. Not a user command.
    if args.first().map(String::as_str) == Some("__shim") {
        std::process::exit(kubegate::sim::runtime::shim_main(&args[1..]));
    }
    let code = match command::parse(&args, &kubegate::sim::pod_users::parse_range) {
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
        Ok(Command::Sim(a)) => {
            init_logging_with("info");
            sim_main(a)
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

/// `kubegate sim`: starts the sim and runs it until SIGINT or SIGTERM.
fn sim_main(a: SimArgs) -> i32 {
    for w in a.warnings() {
        log::warn!("{w}");
    }
    let mut opts = SimOptions {
        listen: a.listen,
        kubeconfig_out: a.kubeconfig_out,
        tls: a.tls,
        token: a.token,
        client_ca: a.client_ca,
        state_dir: a.state_dir,
        namespaces: a.namespaces,
        fail_images: a.fail_images,
        allow_remote: a.allow_remote,
        request_log: a.request_log,
        pods_dir: a.pods_dir,
        ..SimOptions::default()
    };
    if let Some(range) = a.uid_range {
        opts.uid_range = range;
    }
    // Install the signal handler before anything is started, so a signal
    // that arrives during start-up still leads to a clean stop.
    let mut signals = match signal_hook::iterator::Signals::new([
        signal_hook::consts::SIGINT,
        signal_hook::consts::SIGTERM,
    ]) {
        Ok(s) => s,
        Err(e) => {
            eprintln!("kubegate: installing signal handlers: {e}");
            return 1;
        }
    };
    let sim = match Sim::start(opts) {
        Ok(s) => s,
        Err(SimError::Usage(m)) => {
            eprintln!("kubegate: {m}");
            return 2;
        }
        Err(SimError::Failed(m)) => {
            eprintln!("kubegate: {m}");
            return 1;
        }
    };
    {
        let mut out = std::io::stdout().lock();
        let _ = writeln!(out, "kubegate sim listening on {}", sim.url);
        let _ = out.flush();
    }
    if let Some(sig) = signals.forever().next() {
        log::info!("signal {sig}: stopping the sim");
    }
    sim.shutdown();
    0
}
