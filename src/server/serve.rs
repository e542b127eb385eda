//! `kubegate serve --config F` as a process (and `kubegate check-config`,
//! [`check_config_main`], its load-and-validate step alone): signal
//! handlers installed before anything starts, the config loaded (exit 2 when it is wrong),
//! the process settings a server wants (umask 077, the open-file limit
//! raised, few malloc arenas), [`Daemon::start`], the readiness
//! announcement, then the signal loop: SIGHUP reopens the audit log and
//! reloads the principals (framed by systemd's `RELOADING=1` and
//! `READY=1`), SIGINT/SIGTERM stop (`STOPPING=1`, then
//! [`Daemon::shutdown`]).

use std::path::Path;

use super::daemon::Daemon;
use super::demo::warn_demo_token;
use super::systemd::{announce_ready, notify_reloading, notify_systemd};
use crate::config::Config;

/// `kubegate check-config --config F`: loads and validates the config as
/// `serve` would, without starting anything. Prints `config ok` and gives
/// 0, or prints the error (which names the key at fault) and gives 2.
pub fn check_config_main(config_path: &Path) -> i32 {
    match Config::load(config_path) {
        Ok(_) => {
            println!("config ok");
            crate::exit::SUCCESS
        }
        Err(e) => {
            eprintln!("{e}");
            crate::exit::USAGE
        }
    }
}

/// `kubegate serve --config F`: returns the exit code.
pub fn serve_main(config_path: &Path) -> i32 {
    let mut signals = match crate::signals::install(
        "kubegate",
        &[
            signal_hook::consts::SIGINT,
            signal_hook::consts::SIGTERM,
            signal_hook::consts::SIGHUP,
        ],
    ) {
        Ok(s) => s,
        Err(code) => return code,
    };
    let cfg = match Config::load(config_path) {
        Ok(c) => c,
        Err(e) => {
            eprintln!("{e}");
            return 2;
        }
    };
    // What the shipped unit sets (UMask=0077), wherever the daemon runs:
    // everything it and the embedded sim's pods create under the state
    // directory is the daemon's uid's alone (docs/deploy.md, "The state
    // directory").
    rustix::process::umask(rustix::fs::Mode::from_raw_mode(0o077));
    raise_open_file_limit();
    super::memory::limit_malloc_arenas();
    let daemon = match Daemon::start(&cfg) {
        Ok(d) => d,
        Err(e) => {
            eprintln!("kubegate: {e}");
            return e.exit_code();
        }
    };
    if let Err(e) = announce_ready(daemon.url()) {
        log::warn!("announcing readiness: {e}");
    }
    log::info!("ready on {}", daemon.url());
    for sig in signals.forever() {
        if sig == signal_hook::consts::SIGHUP {
            reload(&daemon, config_path);
            continue;
        }
        log::info!("signal {sig}: stopping");
        break;
    }
    notify_systemd("STOPPING=1");
    daemon.shutdown();
    log::info!("stopped");
    0
}

/// SIGHUP: systemd's reload cycle (sd_notify(3)) around the audit log
/// reopened and the principals reloaded; `READY=1` whatever the outcome (a
/// bad file keeps the current principals: still serving).
fn reload(daemon: &Daemon, config_path: &Path) {
    notify_reloading();
    // First, and whatever the config file says now: logrotate's
    // postrotate sends this signal.
    daemon.reopen_logs();
    match Config::load(config_path) {
        Ok(c) => {
            warn_demo_token(&c);
            match daemon.reload_principals(&c) {
                Ok(()) => log::info!(
                    "SIGHUP: {} principals, {} OIDC issuers and {} OIDC rules reloaded",
                    c.principals.len(),
                    c.oidc.issuers.len(),
                    c.oidc.rules.len()
                ),
                Err(e) => log::error!("SIGHUP: keeping the current principals: {e}"),
            }
        }
        Err(e) => log::error!("SIGHUP: keeping the current principals: {e}"),
    }
    notify_systemd("READY=1");
}

/// Every exec, watch and connection holds descriptors: the soft limit goes
/// up to the hard one (docs/RELIABILITY.md#the-bars), as servers do.
fn raise_open_file_limit() {
    use rustix::process::{getrlimit, setrlimit, Resource, Rlimit};
    let lim = getrlimit(Resource::Nofile);
    if let Some(max) = lim.maximum {
        if lim.current != Some(max) {
            match setrlimit(
                Resource::Nofile,
                Rlimit {
                    current: Some(max),
                    maximum: Some(max),
                },
            ) {
                Ok(()) => log::info!("open-file limit raised to {max}"),
                Err(e) => log::warn!("raising the open-file limit to {max}: {e}"),
            }
        }
    }
}
