//! The local terminal of `kubegate exec -i -t`: raw mode and its restore,
//! the window size, and the signals that must not leave a raw terminal
//! behind.
//!
//! The termios saved on entering raw mode lives in one process-wide slot,
//! so every exit path restores it: the [`RawMode`] guard's `Drop` (normal
//! return, error, panic unwinding on the main thread) and the signal thread
//! (SIGTERM, SIGHUP, SIGINT, SIGQUIT: restore, then exit 128+N). Restoring
//! twice is harmless: the slot is emptied by the first.

use parking_lot::Mutex;
use rustix::termios::{self, OptionalActions, Termios};
use std::io;
use std::os::fd::AsFd;

static SAVED: Mutex<Option<Termios>> = Mutex::new(None);

/// True when our stdin is a terminal.
pub fn stdin_is_terminal() -> bool {
    termios::isatty(io::stdin().as_fd())
}

/// The window size of the terminal on our stdin, as (cols, rows); `None`
/// when it is not a terminal or reports 0×0.
pub fn window_size() -> Option<(u16, u16)> {
    let ws = termios::tcgetwinsize(io::stdin().as_fd()).ok()?;
    (ws.ws_col > 0 && ws.ws_row > 0).then_some((ws.ws_col, ws.ws_row))
}

/// The terminal on our stdin in raw mode while this lives.
#[must_use]
pub struct RawMode(());

impl RawMode {
    /// Saves the current settings and switches to raw mode (cfmakeraw: no
    /// echo, no line editing, no signals from keys, no output processing;
    /// the remote terminal does all of that).
    pub fn enable() -> io::Result<RawMode> {
        let stdin = io::stdin();
        let orig = termios::tcgetattr(stdin.as_fd())?;
        let mut raw = orig.clone();
        raw.make_raw();
        // Saved first: a signal arriving between the two calls restores.
        *SAVED.lock() = Some(orig);
        if let Err(e) = termios::tcsetattr(stdin.as_fd(), OptionalActions::Drain, &raw) {
            SAVED.lock().take();
            return Err(e.into());
        }
        Ok(RawMode(()))
    }
}

impl Drop for RawMode {
    fn drop(&mut self) {
        restore();
    }
}

/// Puts back the settings saved by [`RawMode::enable`], if not done yet.
pub fn restore() {
    if let Some(t) = SAVED.lock().take() {
        let _ = termios::tcsetattr(io::stdin().as_fd(), OptionalActions::Drain, &t);
    }
}
