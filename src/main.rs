//! The `kubegate` command line: parses arguments and calls one function per
//! command. Exit codes (contract.md): 0 success, 2 usage or configuration
//! error, 1 any other failure; `exec` passes on the remote exit code and
//! uses 255 for its own errors, as `attach` does (docs/cli.md).

use kubegate::sim::cluster::{Sim, SimError, SimOptions};
use std::io::Write;
use std::net::SocketAddr;
use std::path::PathBuf;

const USAGE: &str = "usage: kubegate <command> [options]

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

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let code = match args.first().map(String::as_str) {
        // Internal: the per-container guardian the sim's kubelet runs
        // (see sim/runtime). Not a user command.
        Some("__shim") => kubegate::sim::runtime::shim_main(&args[1..]),
        Some("sim") => {
            init_logging();
            cmd_sim(&args[1..])
        }
        Some("serve") => match parse_config_flag(&args[1..]) {
            Ok(path) => {
                init_logging();
                kubegate::server::serve_main(&path)
            }
            Err(m) => usage_error(&m),
        },
        // Client commands: exit codes of their own (exec: the remote
        // command's, 255 for kubegate's errors; docs/cli.md).
        Some("exec") => kubegate::cli::exec_main(&args[1..]),
        Some("workspaces") => kubegate::cli::workspaces_main(&args[1..]),
        Some("sessions") => kubegate::cli::sessions_main(&args[1..]),
        Some("attach") => kubegate::cli::attach_main(&args[1..]),
        Some("port-forward") => kubegate::cli::port_forward_main(&args[1..]),
        Some("dev") => kubegate::cli::dev_main(&args[1..]),
        // Runs inside a session pod's `workspace` container (docs/agent.md).
        Some("workspace-agent") => {
            init_logging();
            kubegate::agent::agent_main(&args[1..])
        }
        // Runs a session app's program inside its container
        // (docs/runner.md). Its stderr is the app's terminal: warnings only
        // unless RUST_LOG says otherwise.
        Some("app-runner") => {
            init_logging_with("warn");
            kubegate::runner::app_runner_main(&args[1..])
        }
        // Runs in a session pod's init container (docs/runner.md).
        Some("install-self") => {
            init_logging_with("warn");
            kubegate::runner::install::install_self_main(&args[1..])
        }
        Some("check-config") => match parse_config_flag(&args[1..]) {
            Ok(path) => cmd_check_config(&path),
            Err(m) => usage_error(&m),
        },
        Some("-h") | Some("--help") | Some("help") => {
            print!("{USAGE}");
            0
        }
        Some("--version") | Some("version") => {
            println!("kubegate {}", env!("CARGO_PKG_VERSION"));
            0
        }
        Some(other) => usage_error(&format!("unknown command {other:?}")),
        None => usage_error("missing command"),
    };
    std::process::exit(code);
}

fn init_logging() {
    init_logging_with("info");
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

fn usage_error(msg: &str) -> i32 {
    eprintln!("kubegate: {msg}\n\n{USAGE}");
    2
}

/// Takes the value of a flag given as `--flag VALUE` or `--flag=VALUE`.
fn flag_value(args: &[String], i: &mut usize, flag: &str) -> Result<Option<String>, String> {
    let a = &args[*i];
    if a == flag {
        *i += 1;
        return args
            .get(*i)
            .cloned()
            .map(Some)
            .ok_or_else(|| format!("{flag} needs a value"));
    }
    if let Some(v) = a.strip_prefix(flag).and_then(|r| r.strip_prefix('=')) {
        return Ok(Some(v.to_string()));
    }
    Ok(None)
}

/// The one flag of `serve` and `check-config`: `--config FILE`.
fn parse_config_flag(args: &[String]) -> Result<PathBuf, String> {
    let mut config = None;
    let mut i = 0;
    while i < args.len() {
        if let Some(v) = flag_value(args, &mut i, "--config")? {
            if v.is_empty() {
                return Err("--config must not be empty".into());
            }
            config = Some(PathBuf::from(v));
        } else {
            return Err(format!("unknown option {:?}", args[i]));
        }
        i += 1;
    }
    config.ok_or_else(|| "--config FILE is required".into())
}

fn cmd_check_config(path: &std::path::Path) -> i32 {
    match kubegate::config::Config::load(path) {
        Ok(_) => {
            println!("config ok");
            0
        }
        Err(e) => {
            eprintln!("{e}");
            2
        }
    }
}

/// How a standalone sim authenticates its clients (docs/sim.md,
/// "Command line and authentication"). Any credential implies `--tls`.
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

/// The sim's options, and whether `--token` (deprecated) was used.
fn parse_sim_args(args: &[String]) -> Result<(SimOptions, bool), String> {
    let mut o = SimOptions::default();
    let mut auth: Option<(SimAuth, &str)> = None;
    let mut set_auth = |a: SimAuth, flag: &'static str| -> Result<(), String> {
        if let Some((_, prev)) = &auth {
            return Err(format!("{flag} and {prev} exclude each other"));
        }
        auth = Some((a, flag));
        Ok(())
    };
    let mut i = 0;
    while i < args.len() {
        let a = args[i].as_str();
        match a {
            "--no-auth" => set_auth(SimAuth::None, "--no-auth")?,
            "--tls" => o.tls = true,
            "--client-ca" => o.client_ca = true,
            "--allow-remote" => o.allow_remote = true,
            _ => {
                if let Some(v) = flag_value(args, &mut i, "--listen")? {
                    o.listen = v
                        .parse::<SocketAddr>()
                        .map_err(|e| format!("--listen {v:?}: {e} (expected IP:PORT)"))?;
                } else if let Some(v) = flag_value(args, &mut i, "--kubeconfig-out")? {
                    o.kubeconfig_out = Some(PathBuf::from(v));
                } else if let Some(v) = flag_value(args, &mut i, "--token-file")? {
                    if v.is_empty() {
                        return Err("--token-file must not be empty".into());
                    }
                    set_auth(SimAuth::File(PathBuf::from(v)), "--token-file")?;
                } else if let Some(v) = flag_value(args, &mut i, "--token")? {
                    if v.is_empty() {
                        return Err("--token must not be empty".into());
                    }
                    set_auth(SimAuth::Flag(v), "--token")?;
                } else if let Some(v) = flag_value(args, &mut i, "--state-dir")? {
                    o.state_dir = Some(PathBuf::from(v));
                } else if let Some(v) = flag_value(args, &mut i, "--namespace")? {
                    o.namespaces.push(v);
                } else if let Some(v) = flag_value(args, &mut i, "--fail-image")? {
                    o.fail_images.push(v);
                } else if let Some(v) = flag_value(args, &mut i, "--request-log")? {
                    o.request_log = Some(PathBuf::from(v));
                } else if let Some(v) = flag_value(args, &mut i, "--uid-range")? {
                    o.uid_range = match v.as_str() {
                        "off" => None,
                        r => Some(
                            kubegate::sim::pod_users::parse_range(r)
                                .map_err(|e| format!("--uid-range: {e}"))?,
                        ),
                    };
                } else if let Some(v) = flag_value(args, &mut i, "--pods-dir")? {
                    o.pods_dir = Some(PathBuf::from(v));
                } else {
                    return Err(format!("unknown option {a:?}"));
                }
            }
        }
        i += 1;
    }
    let auth = auth.map_or(SimAuth::Random, |(a, _)| a);
    let mut deprecated = false;
    match auth {
        SimAuth::Random => {
            if o.kubeconfig_out.is_none() {
                return Err("the sim's credential (a random token, or with --client-ca a client certificate) is written only into the kubeconfig: pass --kubeconfig-out FILE (or --token-file F, or --no-auth)".into());
            }
            // With --client-ca the client certificate is the credential.
            if !o.client_ca {
                let bytes: [u8; 32] = rand::random();
                o.token = Some(bytes.iter().map(|b| format!("{b:02x}")).collect());
            }
        }
        SimAuth::File(p) => {
            let text = std::fs::read_to_string(&p)
                .map_err(|e| format!("--token-file {}: {e}", p.display()))?;
            let t = text.trim();
            if t.is_empty() {
                return Err(format!("--token-file {}: the file is empty", p.display()));
            }
            if t.chars().any(|c| c.is_whitespace() || c.is_control()) {
                return Err(format!(
                    "--token-file {}: a token is one line without spaces",
                    p.display()
                ));
            }
            o.token = Some(t.to_string());
        }
        SimAuth::Flag(t) => {
            o.token = Some(t);
            deprecated = true;
        }
        SimAuth::None => {
            if o.client_ca {
                return Err("--no-auth and --client-ca exclude each other".into());
            }
            if o.allow_remote {
                return Err("--no-auth with --allow-remote would run anyone's commands on this host: give the sim a token (--token-file F, or none: a random one)".into());
            }
        }
    }
    // A credential travels over TLS only: kubectl (client-go) sends no
    // token or client certificate to a plain-HTTP server.
    if o.token.is_some() || o.client_ca {
        o.tls = true;
    }
    Ok((o, deprecated))
}

fn cmd_sim(args: &[String]) -> i32 {
    let opts = match parse_sim_args(args) {
        Ok((o, deprecated_token)) => {
            if deprecated_token {
                log::warn!("--token is deprecated: every local user reads it in `ps`; use --token-file F, or no flag at all (a random token, written into the kubeconfig)");
            }
            if o.token.is_none() && !o.client_ca {
                log::warn!("--no-auth: anyone who reaches {} is served, and the sim runs their commands as this user", o.listen);
            }
            o
        }
        Err(m) => return usage_error(&m),
    };
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
