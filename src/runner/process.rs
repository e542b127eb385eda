//! The program's process: start it in its own process group (in the
//! foreground of the terminal when there is one), signal its group, reap.
//!
//! - Start: `std::process::Command` with a `pre_exec` step that, in the
//!   child, makes a new process group (pgid = its pid), hands it the
//!   terminal's foreground when stdin is a terminal (`tcsetpgrp` with
//!   SIGTTOU blocked for that call, as shells do), and asks for SIGKILL
//!   when the runner dies (`PR_SET_PDEATHSIG`; it follows the spawning
//!   thread, which is the runner's main thread, alive to the end). These
//!   are raw syscalls only (async-signal-safe: the runner has threads).
//! - Reaping: the runner reaps every child with `waitpid(-1)` on SIGCHLD
//!   (it is a child subreaper, and PID 1 in its container: orphans of the
//!   program come back to it and must not pile up as zombies). The
//!   standard library reaps a child whose exec failed itself and panics if
//!   someone else did, so spawning and reaping share one lock
//!   ([`SpawnLock`]).
//! - The runner itself blocks SIGTTOU: once the program holds the
//!   terminal's foreground, a runner message on a terminal with `tostop`
//!   set must not stop the runner. The standard library resets the signal
//!   mask in the child before the exec.

use std::io;
use std::os::unix::process::CommandExt;
use std::path::Path;
use std::process::{ChildStderr, ChildStdout, Command, Stdio};
use std::sync::Arc;

use parking_lot::Mutex;
use rustix::process::{Pid, Signal, WaitOptions};

/// Serialises spawning and reaping (see the module documentation).
#[derive(Clone, Default)]
pub struct SpawnLock(Arc<Mutex<()>>);

/// How a process ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Exit {
    Code(i32),
    Signal(i32),
}

impl Exit {
    /// The shell's convention: the code, or 128 + the signal.
    pub fn code(self) -> i32 {
        match self {
            Exit::Code(c) => c,
            Exit::Signal(s) => 128 + s,
        }
    }

    pub fn signal(self) -> Option<i32> {
        match self {
            Exit::Signal(s) => Some(s),
            Exit::Code(_) => None,
        }
    }
}

/// A started program.
pub struct Spawned {
    /// Its pid, also its process group id.
    pub pid: i32,
    pub stdout: Option<ChildStdout>,
    pub stderr: Option<ChildStderr>,
}

/// Blocks SIGTTOU in the calling thread (call it before any thread
/// starts, so every thread inherits it).
pub fn block_sigttou() {
    // SAFETY: plain signal-set manipulation on a local value and the
    // calling thread's own mask.
    unsafe {
        let mut set: libc::sigset_t = std::mem::zeroed();
        libc::sigemptyset(&mut set);
        libc::sigaddset(&mut set, libc::SIGTTOU);
        libc::pthread_sigmask(libc::SIG_BLOCK, &set, std::ptr::null_mut());
    }
}

/// Makes the runner a child subreaper (orphaned descendants of the
/// program are re-parented to it, so it can reap them and see them).
pub fn become_subreaper() {
    if let Err(e) = rustix::process::set_child_subreaper(Some(rustix::process::getpid())) {
        log::debug!("PR_SET_CHILD_SUBREAPER: {e}");
    }
}

/// Starts `argv` in `cwd` in a new process group. `tty`: give it the
/// terminal's foreground. `pipe_output`: its stdout/stderr are pipes the
/// caller reads (else inherited). `env`: added to the inherited
/// environment; `env_remove`: taken out of it.
pub fn spawn(
    lock: &SpawnLock,
    argv: &[String],
    cwd: &Path,
    env: &[(String, String)],
    env_remove: &[&str],
    tty: bool,
    pipe_output: bool,
) -> io::Result<Spawned> {
    let (prog, args) = argv
        .split_first()
        .ok_or_else(|| io::Error::new(io::ErrorKind::InvalidInput, "empty command"))?;
    let mut cmd = Command::new(prog);
    cmd.args(args).current_dir(cwd).stdin(Stdio::inherit());
    for k in env_remove {
        cmd.env_remove(k);
    }
    for (k, v) in env {
        cmd.env(k, v);
    }
    if pipe_output {
        cmd.stdout(Stdio::piped()).stderr(Stdio::piped());
    } else {
        cmd.stdout(Stdio::inherit()).stderr(Stdio::inherit());
    }
    // SAFETY: the closure runs in the forked child before exec and makes
    // raw syscalls only (no allocation, no locks): setpgid, prctl,
    // pthread_sigmask, tcsetpgrp, getpid.
    unsafe {
        cmd.pre_exec(move || child_setup(tty));
    }
    let _g = lock.0.lock();
    let mut child = cmd.spawn()?;
    let pid = child.id() as i32;
    Ok(Spawned {
        pid,
        stdout: child.stdout.take(),
        stderr: child.stderr.take(),
    })
    // `child` is dropped without waiting: the reaper collects it.
}

/// In the child, between fork and exec.
fn child_setup(tty: bool) -> io::Result<()> {
    rustix::process::setpgid(None, None)?;
    // Best effort: without it the program still runs.
    let _ = rustix::process::set_parent_process_death_signal(Some(Signal::KILL));
    if tty {
        // SAFETY: signal-set manipulation on locals and this thread's mask.
        unsafe {
            let mut set: libc::sigset_t = std::mem::zeroed();
            let mut old: libc::sigset_t = std::mem::zeroed();
            libc::sigemptyset(&mut set);
            libc::sigaddset(&mut set, libc::SIGTTOU);
            libc::pthread_sigmask(libc::SIG_BLOCK, &set, &mut old);
            // Not our controlling terminal (ENOTTY): nothing to hand over.
            let _ = rustix::termios::tcsetpgrp(
                std::os::fd::BorrowedFd::borrow_raw(0),
                rustix::process::getpid(),
            );
            libc::pthread_sigmask(libc::SIG_SETMASK, &old, std::ptr::null_mut());
        }
    }
    Ok(())
}

/// Sends `sig` to process group `pgid`; false when the group is gone.
pub fn kill_group(pgid: i32, sig: i32) -> bool {
    let (Some(pid), Some(sig)) = (Pid::from_raw(pgid), Signal::from_named_raw(sig)) else {
        return false;
    };
    match rustix::process::kill_process_group(pid, sig) {
        Ok(()) => true,
        Err(e) => {
            if e != rustix::io::Errno::SRCH {
                log::warn!("signalling process group {pgid}: {e}");
            }
            false
        }
    }
}

/// Sends `sig` to group `pgid`, then SIGCONT: a stopped program (Ctrl-Z,
/// or SIGTTOU from a background write to the terminal) only acts on the
/// signal once continued. False when the group is gone.
pub fn signal_group(pgid: i32, sig: i32) -> bool {
    let alive = kill_group(pgid, sig);
    if alive && sig != libc::SIGKILL && sig != libc::SIGCONT {
        kill_group(pgid, libc::SIGCONT);
    }
    alive
}

/// Whether any process is left in group `pgid` (zombies count until
/// reaped).
pub fn group_alive(pgid: i32) -> bool {
    let Some(pid) = Pid::from_raw(pgid) else {
        return false;
    };
    !matches!(
        rustix::process::test_kill_process_group(pid),
        Err(rustix::io::Errno::SRCH)
    )
}

/// Reaps every child that has ended; (pid, how) for each.
pub fn reap(lock: &SpawnLock) -> Vec<(i32, Exit)> {
    let _g = lock.0.lock();
    let mut out = Vec::new();
    loop {
        // `wait` is waitpid(-1): any child (rustix's `waitpid(None)` is pid 0,
        // our own process group only).
        match rustix::process::wait(WaitOptions::NOHANG) {
            Ok(Some((pid, st))) => {
                let how = match (st.exit_status(), st.terminating_signal()) {
                    (Some(c), _) => Exit::Code(c),
                    (None, Some(s)) => Exit::Signal(s),
                    // Stopped/continued are not asked for; skip.
                    (None, None) => continue,
                };
                out.push((pid.as_raw_nonzero().get(), how));
            }
            Ok(None) => break,
            Err(rustix::io::Errno::INTR) => continue,
            Err(_) => break, // ECHILD: nothing left
        }
    }
    out
}

/// Whether stdin is a terminal.
pub fn stdin_is_tty() -> bool {
    rustix::termios::isatty(std::io::stdin())
}

/// The terminal's settings as the runner found them. A program killed in
/// raw mode (or with echo off) leaves the terminal so; the next run, and
/// the terminal after the runner, get these back.
pub struct TtySettings(rustix::termios::Termios);

impl TtySettings {
    /// The settings of stdin, when it is a terminal.
    pub fn save() -> Option<TtySettings> {
        rustix::termios::tcgetattr(std::io::stdin())
            .ok()
            .map(TtySettings)
    }

    /// Puts them back (SIGTTOU is blocked: allowed from the background).
    pub fn restore(&self) {
        if let Err(e) = rustix::termios::tcsetattr(
            std::io::stdin(),
            rustix::termios::OptionalActions::Now,
            &self.0,
        ) {
            log::debug!("restoring the terminal's settings: {e}");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn exit_codes_follow_the_shell() {
        assert_eq!(Exit::Code(3).code(), 3);
        assert_eq!(Exit::Signal(15).code(), 143);
        assert_eq!(Exit::Signal(9).signal(), Some(9));
        assert_eq!(Exit::Code(0).signal(), None);
    }
}
