//! The sim kubelet's process runtime: runs containers and exec sessions as
//! local processes, Linux only.
//!
//! What it owns:
//! - every fork of the sim, made on ONE long-lived spawner thread
//!   (`PR_SET_PDEATHSIG` fires when the *thread* that forked exits, so forking
//!   from a short-lived request thread would kill containers at random);
//! - every exit status: ONE reaper thread waits for any child (`waitid(P_ALL)`),
//!   including orphans reparented to the sim (it is a child subreaper), and
//!   dispatches by pid. Nothing else in the sim process may wait for children
//!   (a `std::process::Child::wait` would race it and see `ECHILD`);
//! - the shim ([`shim_main`], the hidden `kubegate __shim` subcommand) that sits
//!   between the sim and every container/exec command and guarantees that no
//!   descendant outlives the sim, even a SIGKILLed sim (see `shim.rs`);
//! - the process's stdio: pipes or a pty, one reader thread per process, the
//!   exec output channel (bounded: a slow consumer blocks the process, nothing
//!   is dropped) and the container log ring with its attach/follow subscribers
//!   (a slow subscriber is dropped, the container never blocks);
//! - escalation timers (SIGTERM, then SIGKILL after the grace period) on one
//!   timer thread with a heap, not a sleeping thread per process.
//!
//! What it never does: it knows nothing about pods, the API or pod status
//! (`podspec/` translates a pod into a [`ProcessSpec`]; the kubelet glue
//! reports statuses). It never inherits the sim's environment into a
//! container, and never blocks a container on a slow log reader.
//!
//! Threads: spawner, reaper and timer (one each per sim process, shared by
//! every [`Runtime`] in it, started on first use, never ended), plus one
//! reader thread per process that has output, which ends when the process's
//! output is drained.

mod global;
mod logring;
mod output;
mod process;
mod pty;
mod shim;
mod spawn;
mod users;

pub use logring::{LogLine, LogQuery, LOG_RING_BYTES};
pub use output::{OutputChunk, Stream};
pub use process::{ExitInfo, Process};
pub use shim::shim_main;
pub use users::{can_switch_users, missing_capabilities, User};

use parking_lot::Mutex;
use std::io;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Weak};
use std::time::{Duration, Instant};

/// The hidden subcommand that runs the shim: `kubegate __shim ARGS…`.
/// main.rs must route it to [`shim_main`] before doing anything else (no
/// logger, no threads, no signal handlers).
pub const SHIM_SUBCOMMAND: &str = "__shim";

/// `PATH` when the spec's environment has none (a typical image's).
pub const DEFAULT_PATH: &str = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin";

/// What to run. A pure value: `podspec::plan_container` builds one from a
/// pod, the exec route builds one from a request.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ProcessSpec {
    /// Command and arguments; `argv[0]` is resolved against `PATH` from
    /// `env` (or taken relative to `cwd` when it has a `/`). Empty: the idle
    /// process, which waits for SIGTERM (or SIGINT) and then exits 0.
    pub argv: Vec<String>,
    /// The full environment; the sim's own is never inherited.
    pub env: Vec<(String, String)>,
    /// Working directory; must exist.
    pub cwd: PathBuf,
    /// Run on a pseudo-terminal: stdin, stdout and stderr are its slave side
    /// (as with `docker run -t`, even without `stdin`); output is
    /// [`Stream::Tty`].
    pub tty: bool,
    /// Keep stdin open for [`Process::write_stdin`]. Without it (and without a
    /// tty) the child's stdin is /dev/null.
    pub stdin: bool,
    /// true: a container (output goes to the log ring and to subscribers);
    /// false: an exec (output goes only to [`Process::take_output`], with
    /// backpressure).
    pub log: bool,
    /// The host credentials the command runs with; `None`: the sim's own.
    /// The shim itself keeps the sim's credentials (so the command cannot
    /// signal or trace it, and its parent-death signal stays armed): the
    /// command's process switches, in the shim's fork, right before its
    /// `execv` (see `shim.rs`). A pty slave is given to this user first.
    pub user: Option<User>,
}

/// One sim's set of processes. Several may exist in one OS process (tests);
/// they share the spawner, reaper and timer threads.
pub struct Runtime {
    root: PathBuf,
    shim_program: PathBuf,
    shim_args: Vec<String>,
    /// This binary, when the shim is this binary too: a command that IS this
    /// binary (`kubegate …` in a pod) is then run as `/proc/self/exe` from
    /// the shim, which needs no path to the file (a pod user may not be
    /// able to search the folders above it).
    self_exe: Option<PathBuf>,
    global: Arc<global::Global>,
    procs: Mutex<Vec<Weak<process::ProcShared>>>,
}

impl Runtime {
    /// A runtime whose shim is this very binary (`/proc/self/exe __shim`).
    /// Marks this process a child subreaper, raises RLIMIT_NOFILE's soft
    /// limit to the hard one, starts the shared threads on first use, and
    /// creates `root`.
    pub fn new(root: PathBuf) -> io::Result<Arc<Runtime>> {
        Runtime::with_shim(
            root,
            PathBuf::from("/proc/self/exe"),
            vec![SHIM_SUBCOMMAND.to_string()],
        )
    }

    /// Like [`Runtime::new`] with another shim executable: the shim is run as
    /// `program leading_args… --ppid N [--exe PATH] -- ARGV…`, and whatever
    /// `program` is, it must hand the arguments after `leading_args` to
    /// [`shim_main`].
    pub fn with_shim(
        root: PathBuf,
        program: PathBuf,
        leading_args: Vec<String>,
    ) -> io::Result<Arc<Runtime>> {
        std::fs::create_dir_all(&root)?;
        let global = global::Global::get()?;
        let self_exe = if program == Path::new("/proc/self/exe") {
            std::env::current_exe().ok()
        } else {
            None
        };
        Ok(Arc::new(Runtime {
            root,
            self_exe,
            shim_program: program,
            shim_args: leading_args,
            global,
            procs: Mutex::new(Vec::new()),
        }))
    }

    /// The folder given at creation.
    pub fn root(&self) -> &Path {
        &self.root
    }

    /// Starts a process under the shim. Errors: the command is not found or
    /// not executable, `cwd` is missing, or the system is out of
    /// processes/fds/ptys (the error says which).
    pub fn start(&self, spec: ProcessSpec) -> io::Result<Arc<Process>> {
        let proc = process::start(
            &self.global,
            &self.shim_program,
            &self.shim_args,
            self.self_exe.as_deref(),
            spec,
        )?;
        let mut procs = self.procs.lock();
        procs.retain(|w| w.upgrade().is_some_and(|p| !p.is_reaped()));
        procs.push(Arc::downgrade(proc.shared()));
        Ok(proc)
    }

    /// Processes of this runtime that have not been reaped yet.
    pub fn live(&self) -> usize {
        self.live_procs().len()
    }

    fn live_procs(&self) -> Vec<Arc<process::ProcShared>> {
        let mut procs = self.procs.lock();
        procs.retain(|w| w.upgrade().is_some_and(|p| !p.is_reaped()));
        procs.iter().filter_map(Weak::upgrade).collect()
    }

    /// Terminates everything (SIGTERM to each group, SIGKILL after `grace`)
    /// and waits until every process is reaped, at most `grace` + 5 s.
    /// Returns how many are still alive (0 unless something is badly wrong).
    pub fn kill_all(&self, grace: Duration) -> usize {
        let procs = self.live_procs();
        for p in &procs {
            p.terminate(&self.global, grace);
        }
        let deadline = Instant::now() + grace + Duration::from_secs(5);
        for p in &procs {
            p.wait_reaped_until(deadline);
        }
        self.live()
    }
}

impl Drop for Runtime {
    /// No process outlives its runtime: whatever is still running is killed
    /// (asynchronously; call [`Runtime::kill_all`] to wait).
    fn drop(&mut self) {
        for p in self.live_procs() {
            p.kill_now(&self.global);
        }
    }
}
