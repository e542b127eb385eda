//! One running (or finished) process: its exit state, signals, stdin, window
//! size, and access to its output.
//!
//! `ProcShared` is the part the reaper, the timer and the reader thread see;
//! `Process` is the caller's handle. Every signal is sent while holding the
//! state lock and only if the process is not reaped yet: the reaper reaps
//! under the same lock, so a signal can never hit a recycled pid.

use super::global::{wait_pid, Global, TimerAction, HARD_KILL_AFTER};
use super::logring::{LogLine, LogQuery, LogRing};
use super::output::{self, OutputChunk, Sink, Stream};
use super::spawn::{self, ChildStdio, Prepared};
use super::{pty, ProcessSpec};
use crossbeam_channel::{bounded, Receiver, Sender};
use parking_lot::{Condvar, Mutex};
use rustix::process::{kill_process, kill_process_group, Pid, Signal};
use std::io;
use std::os::fd::OwnedFd;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime};

/// How a process ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ExitInfo {
    /// The exit code; 128 + N when killed by signal N (what Kubernetes
    /// reports: 137 for SIGKILL, 143 for SIGTERM).
    pub code: i32,
    /// The terminating signal, if any.
    pub signal: Option<i32>,
    /// When the reaper collected it.
    pub finished_at: SystemTime,
}

impl ExitInfo {
    fn from_status(status: i32) -> ExitInfo {
        let finished_at = SystemTime::now();
        if libc::WIFSIGNALED(status) {
            let sig = libc::WTERMSIG(status);
            ExitInfo {
                code: 128 + sig,
                signal: Some(sig),
                finished_at,
            }
        } else {
            ExitInfo {
                code: libc::WEXITSTATUS(status),
                signal: None,
                finished_at,
            }
        }
    }
}

/// Capacity of an exec's output channel, in chunks of at most 64 KiB.
const EXEC_OUTPUT_QUEUE: usize = 16;

#[derive(Default)]
struct State {
    /// Set by the reaper.
    exit: Option<ExitInfo>,
    /// The reader thread has drained all output (always true for execs,
    /// whose completion does not wait for the consumer).
    io_done: bool,
    watchers: Vec<Sender<ExitInfo>>,
}

impl State {
    fn complete(&self) -> Option<ExitInfo> {
        if self.io_done {
            self.exit
        } else {
            None
        }
    }
}

pub(crate) struct ProcShared {
    pid: i32,
    state: Mutex<State>,
    cond: Condvar,
}

impl ProcShared {
    pub(super) fn is_reaped(&self) -> bool {
        self.state.lock().exit.is_some()
    }

    /// Reaper side: collects the zombie `pid` (ours) and records the exit.
    /// Returns whether it died by SIGKILL (its orphans may need a sweep).
    pub(super) fn reap(&self, pid: i32) -> bool {
        let mut st = self.state.lock();
        let info = match wait_pid(pid) {
            Ok(status) => ExitInfo::from_status(status),
            Err(e) => {
                log::error!("sim reaper: waitpid({pid}): {e}");
                ExitInfo {
                    code: 255,
                    signal: None,
                    finished_at: SystemTime::now(),
                }
            }
        };
        st.exit = Some(info);
        self.notify(&mut st);
        info.signal == Some(libc::SIGKILL)
    }

    /// Reader side: every byte of output is in the ring.
    pub(super) fn set_io_done(&self) {
        let mut st = self.state.lock();
        st.io_done = true;
        self.notify(&mut st);
    }

    fn notify(&self, st: &mut State) {
        self.cond.notify_all();
        if let Some(info) = st.complete() {
            for w in st.watchers.drain(..) {
                let _ = w.try_send(info);
            }
        }
    }

    fn pid(&self) -> Pid {
        // The pid came from a successful fork, so it is positive.
        Pid::from_raw(self.pid).unwrap_or(Pid::INIT)
    }

    fn signal_group_raw(&self, sig: Signal) -> io::Result<()> {
        let st = self.state.lock();
        if st.exit.is_some() {
            return Err(io::Error::new(
                io::ErrorKind::NotFound,
                "the process has exited",
            ));
        }
        kill_process_group(self.pid(), sig)?;
        Ok(())
    }

    /// Asks the shim to SIGKILL every descendant and then itself. Returns
    /// whether the request was sent (false: already reaped).
    pub(super) fn request_kill(&self) -> bool {
        let st = self.state.lock();
        if st.exit.is_some() {
            return false;
        }
        let _ = kill_process(self.pid(), Signal::USR2);
        true
    }

    /// The safety net when the shim did not act on `request_kill`.
    pub(super) fn hard_kill(&self) {
        let st = self.state.lock();
        if st.exit.is_none() {
            log::warn!("sim runtime: shim {} ignored a kill request", self.pid);
            let _ = kill_process_group(self.pid(), Signal::KILL);
            let _ = kill_process(self.pid(), Signal::KILL);
        }
    }

    pub(super) fn kill_now(self: &Arc<Self>, global: &Global) {
        if self.request_kill() {
            global.schedule(
                Instant::now() + HARD_KILL_AFTER,
                self,
                TimerAction::HardKill,
            );
        }
    }

    pub(super) fn terminate(self: &Arc<Self>, global: &Global, grace: Duration) {
        if grace.is_zero() {
            self.kill_now(global);
            return;
        }
        if self.signal_group_raw(Signal::TERM).is_ok() {
            global.schedule(Instant::now() + grace, self, TimerAction::KillNow);
        }
    }

    pub(super) fn wait_reaped(&self) {
        let mut st = self.state.lock();
        while st.exit.is_none() {
            self.cond.wait(&mut st);
        }
    }

    pub(super) fn wait_reaped_until(&self, deadline: Instant) -> bool {
        let mut st = self.state.lock();
        while st.exit.is_none() {
            if self.cond.wait_until(&mut st, deadline).timed_out() {
                return st.exit.is_some();
            }
        }
        true
    }

    fn wait_complete(&self, deadline: Option<Instant>) -> Option<ExitInfo> {
        let mut st = self.state.lock();
        loop {
            if let Some(info) = st.complete() {
                return Some(info);
            }
            match deadline {
                Some(d) => {
                    if self.cond.wait_until(&mut st, d).timed_out() {
                        return st.complete();
                    }
                }
                None => self.cond.wait(&mut st),
            }
        }
    }
}

/// Where `write_stdin` writes: a pipe's write end, or the pty master.
struct Stdin {
    fd: Option<Arc<OwnedFd>>,
}

/// A process started by [`super::Runtime::start`].
pub struct Process {
    shared: Arc<ProcShared>,
    global: Arc<Global>,
    tty: bool,
    stdin: Mutex<Stdin>,
    /// Serializes writers so that two callers' bytes never interleave.
    stdin_write: Mutex<()>,
    master: Option<Arc<OwnedFd>>,
    output: Mutex<Option<Receiver<OutputChunk>>>,
    ring: Option<Arc<LogRing>>,
}

impl Process {
    pub(super) fn shared(&self) -> &Arc<ProcShared> {
        &self.shared
    }

    /// The shim's pid (the process that `wait` reports on).
    pub fn pid(&self) -> i32 {
        self.shared.pid
    }

    /// The process group (and, with a tty, session) of the shim and the
    /// command: the shim leads it, so it equals [`Process::pid`].
    pub fn pgid(&self) -> i32 {
        self.shared.pid
    }

    /// Whether this process has a pty.
    pub fn tty(&self) -> bool {
        self.tty
    }

    /// Writes all of `data` to stdin, waiting while the pipe (or the pty's
    /// input queue) is full. Errors: stdin closed or not kept
    /// (`BrokenPipe`), or the process ended.
    pub fn write_stdin(&self, data: &[u8]) -> io::Result<()> {
        let fd = self
            .stdin
            .lock()
            .fd
            .clone()
            .ok_or_else(|| io::Error::new(io::ErrorKind::BrokenPipe, "stdin is closed"))?;
        let _serial = self.stdin_write.lock();
        let mut rest = data;
        while !rest.is_empty() {
            match rustix::io::write(&*fd, rest) {
                Ok(n) => rest = &rest[n..],
                Err(rustix::io::Errno::INTR) => {}
                Err(rustix::io::Errno::AGAIN) => {
                    if self.shared.is_reaped() {
                        return Err(io::Error::new(
                            io::ErrorKind::BrokenPipe,
                            "the process has exited",
                        ));
                    }
                    output::wait_writable(&fd, Duration::from_millis(100))?;
                }
                Err(e) => return Err(e.into()),
            }
        }
        Ok(())
    }

    /// Ends stdin: the pipe is closed (the command reads EOF once it has
    /// consumed what was written); on a pty, where input and output share the
    /// master, the terminal's EOF character (^D) is sent instead, as a
    /// terminal user would.
    pub fn close_stdin(&self) {
        let fd = self.stdin.lock().fd.take();
        if let (Some(fd), true) = (fd, self.tty) {
            let eof = rustix::termios::tcgetattr(&*fd)
                .map(|t| t.special_codes[rustix::termios::SpecialCodeIndex::VEOF])
                .unwrap_or(4);
            let _serial = self.stdin_write.lock();
            let _ = rustix::io::write(&*fd, &[eof]);
        }
    }

    /// Sets the pty's window size (the command gets SIGWINCH). Without a tty:
    /// `Unsupported`.
    pub fn resize(&self, cols: u16, rows: u16) -> io::Result<()> {
        match &self.master {
            Some(m) => pty::set_size(m, cols, rows),
            None => Err(io::Error::new(
                io::ErrorKind::Unsupported,
                "the process has no tty",
            )),
        }
    }

    /// Sends signal `sig` (e.g. `libc::SIGINT`) to the process group. The
    /// shim ignores the signals it is not meant to act on; SIGKILL is turned
    /// into "kill everything", which also reaches descendants that left the
    /// group. Errors: unknown signal, or the process has exited.
    pub fn signal_group(&self, sig: i32) -> io::Result<()> {
        if sig == libc::SIGKILL {
            if self.shared.is_reaped() {
                return Err(io::Error::new(
                    io::ErrorKind::NotFound,
                    "the process has exited",
                ));
            }
            self.shared.kill_now(&self.global);
            return Ok(());
        }
        let sig = Signal::from_named_raw(sig).ok_or_else(|| {
            io::Error::new(io::ErrorKind::InvalidInput, format!("unknown signal {sig}"))
        })?;
        self.shared.signal_group_raw(sig)
    }

    /// Graceful stop: SIGTERM to the group now, and if the process has not
    /// exited after `grace`, SIGKILL to it and every descendant (exit 137).
    /// Returns at once; a zero grace kills at once.
    pub fn terminate(&self, grace: Duration) {
        self.shared.terminate(&self.global, grace);
    }

    /// Kills the process and every descendant now (exit code 137).
    pub fn kill(&self) {
        self.shared.kill_now(&self.global);
    }

    /// Waits until the process has exited (for a container: and its output
    /// is all in the log ring).
    pub fn wait(&self) -> ExitInfo {
        loop {
            if let Some(info) = self.shared.wait_complete(None) {
                return info;
            }
        }
    }

    /// Like [`Process::wait`], giving up after `timeout`.
    pub fn wait_timeout(&self, timeout: Duration) -> Option<ExitInfo> {
        self.shared.wait_complete(Some(Instant::now() + timeout))
    }

    /// The exit, if it happened (see [`Process::wait`]).
    pub fn exited(&self) -> Option<ExitInfo> {
        self.shared.state.lock().complete()
    }

    /// A channel that receives the [`ExitInfo`] once (at once if the process
    /// already ended): for `select!` loops that must not poll.
    pub fn on_exit(&self) -> Receiver<ExitInfo> {
        let (tx, rx) = bounded(1);
        let mut st = self.shared.state.lock();
        match st.complete() {
            Some(info) => {
                let _ = tx.try_send(info);
            }
            None => st.watchers.push(tx),
        }
        rx
    }

    /// An exec's output (`log: false`), once: `None` on later calls and for
    /// containers. The channel is bounded: while it is full, the reader waits,
    /// the pipe fills and the process blocks; nothing is dropped. It
    /// disconnects once all output was sent AND the process has exited, so
    /// the exit code can then be read knowing every byte came first.
    /// Dropping the receiver closes the output pipes (the command gets
    /// EPIPE/SIGPIPE, as when a real exec stream is cut); with a tty, the
    /// output is read and discarded from then on.
    pub fn take_output(&self) -> Option<Receiver<OutputChunk>> {
        self.output.lock().take()
    }

    /// A container's logged output (`log: true`) matching `q`, as lines.
    /// Empty for execs. Readable after exit (the previous container's logs).
    pub fn log_snapshot(&self, q: &LogQuery) -> Vec<LogLine> {
        match &self.ring {
            Some(r) => r.snapshot(q),
            None => Vec::new(),
        }
    }

    /// New output from now on (attach, `logs -f`). Each subscriber has its own
    /// bounded queue; one that stops reading is disconnected once it has
    /// fallen 1 MiB behind or stayed full for 2 s; the container never waits.
    /// The channel disconnects when the output ends. For execs: a channel
    /// that is already disconnected.
    pub fn subscribe(&self) -> Receiver<OutputChunk> {
        self.log_follow(&LogQuery::tail(0)).1
    }

    /// `logs -f`: the lines matching `q`, then every later chunk, with no gap
    /// and no overlap between the two.
    pub fn log_follow(&self, q: &LogQuery) -> (Vec<LogLine>, Receiver<OutputChunk>) {
        match &self.ring {
            Some(r) => r.follow(q),
            None => (Vec::new(), bounded(1).1),
        }
    }
}

/// Resolves `argv0` like execvp would in the container: a name with a `/` is
/// taken relative to `cwd`; a bare name is searched in the `PATH` of `env`.
/// Resolving here (not in the shim) lets the caller report "not found" as a
/// start error, like a container runtime does.
pub(super) fn resolve_command(
    argv0: &str,
    env: &[(String, String)],
    cwd: &Path,
) -> io::Result<PathBuf> {
    use rustix::fs::{access, Access};
    let usable = |p: &Path| p.is_file() && access(p, Access::EXEC_OK).is_ok();
    if argv0.is_empty() {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            "exec: empty command name",
        ));
    }
    if argv0.contains('/') {
        let p = cwd.join(argv0);
        if usable(&p) {
            return Ok(p);
        }
        return Err(io::Error::new(
            io::ErrorKind::NotFound,
            format!("exec: {argv0:?}: no such file or not executable"),
        ));
    }
    let path = env
        .iter()
        .rev()
        .find(|(k, _)| k == "PATH")
        .map(|(_, v)| v.as_str())
        .unwrap_or(super::DEFAULT_PATH);
    for dir in path.split(':') {
        let dir = if dir.is_empty() {
            Path::new(".")
        } else {
            Path::new(dir)
        };
        let p = cwd.join(dir).join(argv0);
        if usable(&p) {
            return Ok(p);
        }
    }
    Err(io::Error::new(
        io::ErrorKind::NotFound,
        format!("exec: {argv0:?}: executable file not found in $PATH"),
    ))
}

/// Builds the stdio, forks the shim on the spawner thread, and starts the
/// reader thread.
pub(super) fn start(
    global: &Arc<Global>,
    shim_program: &Path,
    shim_args: &[String],
    self_exe: Option<&Path>,
    spec: ProcessSpec,
) -> io::Result<Arc<Process>> {
    use rustix::pipe::{pipe_with, PipeFlags};
    if !spec.cwd.is_dir() {
        return Err(io::Error::new(
            io::ErrorKind::NotFound,
            format!("working directory {} does not exist", spec.cwd.display()),
        ));
    }
    let exe = match spec.argv.first() {
        Some(a) => Some(resolve_command(a, &spec.env, &spec.cwd)?),
        None => None,
    };

    // The shim's command line.
    let mut argv = Vec::with_capacity(spec.argv.len() + shim_args.len() + 6);
    argv.push(shim_program.to_string_lossy().into_owned());
    argv.extend(shim_args.iter().cloned());
    argv.push("--ppid".into());
    argv.push(global.self_pid.to_string());
    if let Some(user) = &spec.user {
        argv.extend(user.shim_args());
    }
    if let Some(exe) = &exe {
        argv.push("--exe".into());
        if self_exe == Some(exe.as_path()) {
            // The shim is this binary: its own /proc/self/exe reaches it
            // without searching the folders above it.
            argv.push("/proc/self/exe".into());
        } else {
            argv.push(exe.to_string_lossy().into_owned());
        }
    }
    argv.push("--".into());
    argv.extend(spec.argv.iter().cloned());
    let prepared = Prepared::new(shim_program, &argv, &spec.env, &spec.cwd)?;

    // Stdio: our ends (reader fds, stdin) and the child's.
    let mut readers: Vec<(Arc<OwnedFd>, Stream)> = Vec::new();
    let mut stdin_fd = None;
    let mut master = None;
    let stdio = if spec.tty {
        let p = pty::open_pty()?;
        if let Some(user) = &spec.user {
            // The terminal belongs to the user it serves (as login does):
            // the command may reopen it (/dev/tty), nobody else may.
            pty::give_to(&p.slave, user.uid, user.gid)?;
        }
        let m = Arc::new(p.master);
        output::set_nonblocking(&m)?;
        readers.push((m.clone(), Stream::Tty));
        if spec.stdin {
            stdin_fd = Some(m.clone());
        }
        master = Some(m);
        ChildStdio {
            stdin: spawn::dup(&p.slave)?,
            stdout: spawn::dup(&p.slave)?,
            stderr: p.slave,
            ctty: true,
        }
    } else {
        let stdin = if spec.stdin {
            let (r, w) = pipe_with(PipeFlags::CLOEXEC)?;
            output::set_nonblocking(&w)?;
            stdin_fd = Some(Arc::new(w));
            r
        } else {
            spawn::dev_null(false)?
        };
        // The idle process writes nothing: no pipes, no reader thread.
        let (stdout, stderr) = if spec.argv.is_empty() {
            (spawn::dev_null(true)?, spawn::dev_null(true)?)
        } else {
            let (out_r, out_w) = pipe_with(PipeFlags::CLOEXEC)?;
            let (err_r, err_w) = pipe_with(PipeFlags::CLOEXEC)?;
            readers.push((Arc::new(out_r), Stream::Stdout));
            readers.push((Arc::new(err_r), Stream::Stderr));
            (out_w, err_w)
        };
        ChildStdio {
            stdin,
            stdout,
            stderr,
            ctty: false,
        }
    };

    let log = spec.log;
    let io_done = !log || readers.is_empty();
    let (reply_tx, reply_rx) = bounded::<io::Result<Arc<ProcShared>>>(1);
    let g = global.clone();
    global.on_spawner(Box::new(move || {
        let r = spawn_on_this_thread(&g, &prepared, stdio, io_done);
        let _ = reply_tx.send(r);
    }))?;
    let shared = reply_rx
        .recv()
        .map_err(|_| io::Error::other("the sim's spawner thread dropped a request"))??;

    let ring = if log {
        Some(Arc::new(LogRing::new()))
    } else {
        None
    };
    let mut output_rx = None;
    if !readers.is_empty() {
        let sink = match &ring {
            Some(r) => Sink::Log(r.clone()),
            None => {
                let (tx, rx) = bounded(EXEC_OUTPUT_QUEUE);
                output_rx = Some(rx);
                Sink::Exec(tx)
            }
        };
        if let Err(e) = output::spawn_reader(readers, sink, shared.clone()) {
            shared.kill_now(global);
            return Err(e);
        }
    }
    Ok(Arc::new(Process {
        shared,
        global: global.clone(),
        tty: spec.tty,
        stdin: Mutex::new(Stdin { fd: stdin_fd }),
        stdin_write: Mutex::new(()),
        master,
        output: Mutex::new(output_rx),
        ring,
    }))
}

/// The spawner-thread part: fork under the registry lock, register, close the
/// child's stdio in the sim, then learn whether the exec worked.
fn spawn_on_this_thread(
    global: &Global,
    prepared: &Prepared,
    stdio: ChildStdio,
    io_done: bool,
) -> io::Result<Arc<ProcShared>> {
    let mut registry = global.procs.lock();
    let (pid, err_r) = spawn::fork_child(prepared, &stdio)?;
    let shared = Arc::new(ProcShared {
        pid,
        state: Mutex::new(State {
            io_done,
            ..State::default()
        }),
        cond: Condvar::new(),
    });
    registry.insert(pid, shared.clone());
    drop(registry);
    global.kick_reaper();
    if !stdio.ctty {
        // Also from this side, so the group exists before we return (the
        // child may not have run yet). EACCES after its exec is fine.
        let child = Pid::from_raw(pid);
        let _ = rustix::process::setpgid(child, child);
    }
    drop(stdio);
    spawn::exec_result(err_r)?;
    Ok(shared)
}
