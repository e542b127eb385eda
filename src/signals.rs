//! Installing the signal handlers of the binary's long-running commands
//! (`serve`, `sim`, `workspace-agent`), in a leaf module so each layer that
//! owns a command reaches the one way of doing it without importing the
//! others: [`install`] before anything is started, so a signal that arrives
//! during start-up still leads to a clean stop.
//!
//! Out of scope: what a command does on each signal (its own loop), and
//! the client commands' and the runner's handlers, which forward signals
//! rather than stop on them. Uses only [`crate::exit`].

use signal_hook::iterator::Signals;
use std::ffi::c_int;

/// Installs handlers for `signals`. On failure prints
/// `{who}: installing signal handlers: …` on stderr (`who` is the
/// program's prefix, e.g. `kubegate` or `kubegate workspace-agent`) and
/// gives the exit code ([`crate::exit::FAILURE`]).
pub fn install(who: &str, signals: &[c_int]) -> Result<Signals, i32> {
    Signals::new(signals).map_err(|e| {
        eprintln!("{who}: installing signal handlers: {e}");
        crate::exit::FAILURE
    })
}
