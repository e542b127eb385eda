//! Pseudo-terminal pairs for `tty: true` processes (rustix, no unsafe).
//!
//! The master stays in the sim (output reader, stdin writes, resize); the
//! slave becomes the child's stdin/stdout/stderr and controlling terminal
//! (set up in `spawn.rs`), and the sim's copy is closed right after the fork
//! so that the master reads EIO (end of output) once the child side is gone.

use rustix::fs::{Mode, OFlags};
use rustix::pty::{grantpt, openpt, ptsname, unlockpt, OpenptFlags};
use rustix::termios::{tcsetwinsize, Winsize};
use std::io;
use std::os::fd::OwnedFd;

pub(super) struct Pty {
    pub(super) master: OwnedFd,
    pub(super) slave: OwnedFd,
}

/// Default window size until the first resize (what a terminal-less
/// `docker run -t` shows).
const DEFAULT_COLS: u16 = 80;
const DEFAULT_ROWS: u16 = 24;

pub(super) fn open_pty() -> io::Result<Pty> {
    let master = openpt(OpenptFlags::RDWR | OpenptFlags::NOCTTY | OpenptFlags::CLOEXEC)?;
    grantpt(&master)?;
    unlockpt(&master)?;
    let name = ptsname(&master, Vec::new())?;
    let slave = rustix::fs::open(
        name.as_c_str(),
        OFlags::RDWR | OFlags::NOCTTY | OFlags::CLOEXEC,
        Mode::empty(),
    )?;
    set_size(&master, DEFAULT_COLS, DEFAULT_ROWS)?;
    Ok(Pty { master, slave })
}

/// TIOCSWINSZ on the master; the kernel sends SIGWINCH to the foreground group.
pub(super) fn set_size(master: &OwnedFd, cols: u16, rows: u16) -> io::Result<()> {
    tcsetwinsize(
        master,
        Winsize {
            ws_row: rows,
            ws_col: cols,
            ws_xpixel: 0,
            ws_ypixel: 0,
        },
    )?;
    Ok(())
}

/// Gives the slave to `uid`:`gid`, mode 0620 (owner read/write, group
/// write), what a login session's terminal gets.
pub(super) fn give_to(slave: &OwnedFd, uid: u32, gid: u32) -> io::Result<()> {
    use rustix::fs::{Gid, Uid};
    // Ids come from `podspec` (0 to 2^31 - 1), never -1.
    rustix::fs::fchown(slave, Some(Uid::from_raw(uid)), Some(Gid::from_raw(gid)))?;
    rustix::fs::fchmod(slave, Mode::from_raw_mode(0o620))?;
    Ok(())
}
