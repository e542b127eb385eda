//! `kubegate sim` as a process: the signal handlers installed first (so a
//! signal during start-up still leads to a clean stop), [`Sim::start`],
//! `kubegate sim listening on URL` on stdout (the line scripts and tests
//! wait for), then running until SIGINT or SIGTERM and [`Sim::shutdown`].
//!
//! The command line is read by [`super::args`] (the words after `sim`,
//! which `main.rs` passes on with the binary's usage text, since `sim` and
//! `cli` do not import each other). Exit codes: 0 after a signal, 2 for a
//! usage error (`kubegate: message`, then the usage) or a configuration
//! problem found at start ([`SimError::Usage`]), 1 for any other failure.

use super::args;
use super::cluster::{Sim, SimError};
use crate::exit;
use std::io::Write;

/// `kubegate sim ARGV…`: reads the flags (a usage error prints `usage`,
/// the binary's command list), logs what they ask that is risky or
/// deprecated, starts the sim and runs it until SIGINT or SIGTERM. Returns
/// the exit code.
pub fn sim_main(argv: &[String], usage: &str) -> i32 {
    if argv.first().map(String::as_str) == Some("node") {
        return super::nodemode::node_main(&argv[1..], usage);
    }
    let cmd = match args::parse(argv) {
        Ok(c) => c,
        Err(e) => return exit::usage_error(&e, usage),
    };
    for w in cmd.warnings() {
        log::warn!("{w}");
    }
    let mut signals = match crate::signals::install(
        "kubegate",
        &[signal_hook::consts::SIGINT, signal_hook::consts::SIGTERM],
    ) {
        Ok(s) => s,
        Err(code) => return code,
    };
    let sim = match Sim::start(cmd.opts) {
        Ok(s) => s,
        Err(e) => {
            eprintln!("kubegate: {e}");
            return match e {
                SimError::Usage(_) => exit::USAGE,
                SimError::Failed(_) => exit::FAILURE,
            };
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
    exit::SUCCESS
}
