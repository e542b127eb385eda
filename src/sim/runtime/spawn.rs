//! The fork and exec of a shim: the only place the sim forks.
//!
//! Runs on the spawner thread only (see `global.rs`). Everything the child
//! needs (C strings, pointer arrays, signal sets) is built BEFORE the fork:
//! between fork and exec the child of a multi-threaded process may only make
//! async-signal-safe calls (no allocation, no locks), so the child code below
//! is a straight line of raw syscalls. An exec failure comes back through a
//! close-on-exec pipe as an errno.
//!
//! The fork is vfork-style (`CLONE_VM | CLONE_VFORK`, every signal blocked
//! across it, as posix_spawn does): the child borrows the parent's memory
//! until it has exec'd, so no page tables are copied however big the
//! process is (the daemon with the sim embedded).

use std::ffi::CString;
use std::io;
use std::os::fd::{AsRawFd, OwnedFd, RawFd};
use std::ptr;

/// Argument vector and environment, ready for `execve`.
pub(super) struct Prepared {
    exe: CString,
    argv: Vec<CString>,
    envp: Vec<CString>,
    cwd: CString,
}

/// The child's stdin, stdout and stderr (the sim's copies are closed by the
/// caller after the fork), and whether stdin is a pty slave to become the
/// controlling terminal of a new session.
pub(super) struct ChildStdio {
    pub(super) stdin: OwnedFd,
    pub(super) stdout: OwnedFd,
    pub(super) stderr: OwnedFd,
    pub(super) ctty: bool,
}

fn cstring(what: &str, s: &[u8]) -> io::Result<CString> {
    CString::new(s).map_err(|_| {
        io::Error::new(
            io::ErrorKind::InvalidInput,
            format!("{what} contains a NUL byte"),
        )
    })
}

impl Prepared {
    pub(super) fn new(
        exe: &std::path::Path,
        argv: &[String],
        env: &[(String, String)],
        cwd: &std::path::Path,
    ) -> io::Result<Prepared> {
        use std::os::unix::ffi::OsStrExt;
        let mut envp = Vec::with_capacity(env.len());
        for (k, v) in env {
            if k.is_empty() || k.contains('=') {
                return Err(io::Error::new(
                    io::ErrorKind::InvalidInput,
                    format!("invalid environment variable name {k:?}"),
                ));
            }
            envp.push(cstring(
                "an environment variable",
                format!("{k}={v}").as_bytes(),
            )?);
        }
        Ok(Prepared {
            exe: cstring("the shim path", exe.as_os_str().as_bytes())?,
            argv: argv
                .iter()
                .map(|a| cstring("an argument", a.as_bytes()))
                .collect::<io::Result<_>>()?,
            envp,
            cwd: cstring("the working directory", cwd.as_os_str().as_bytes())?,
        })
    }
}

/// Signals the shim keeps blocked from its first instruction (it takes them
/// with `sigwaitinfo`): blocking them before the exec means none can kill the
/// shim before it is ready.
pub(super) fn shim_sigset() -> libc::sigset_t {
    // SAFETY: sigemptyset/sigaddset only write into the local set.
    unsafe {
        let mut set: libc::sigset_t = std::mem::zeroed();
        libc::sigemptyset(&mut set);
        for sig in [
            libc::SIGCHLD,
            libc::SIGUSR2,
            libc::SIGTERM,
            libc::SIGINT,
            libc::SIGHUP,
            libc::SIGQUIT,
        ] {
            libc::sigaddset(&mut set, sig);
        }
        set
    }
}

/// Forks and execs the shim. Returns the child's pid and the read end of the
/// exec-error pipe (pass it to [`exec_result`] once the pid is registered).
/// Caller: the spawner thread, holding the registry lock.
pub(super) fn fork_child(p: &Prepared, stdio: &ChildStdio) -> io::Result<(i32, OwnedFd)> {
    use rustix::pipe::{pipe_with, PipeFlags};
    let (err_r, err_w) = pipe_with(PipeFlags::CLOEXEC)?;
    let mut argv: Vec<*const libc::c_char> = p.argv.iter().map(|a| a.as_ptr()).collect();
    argv.push(ptr::null());
    let mut envp: Vec<*const libc::c_char> = p.envp.iter().map(|a| a.as_ptr()).collect();
    envp.push(ptr::null());
    let shim_mask = shim_sigset();
    let args = ChildArgs {
        p,
        argv: argv.as_ptr(),
        envp: envp.as_ptr(),
        fds: [
            stdio.stdin.as_raw_fd(),
            stdio.stdout.as_raw_fd(),
            stdio.stderr.as_raw_fd(),
        ],
        ctty: stdio.ctty,
        shim_mask: &shim_mask,
        err_w: err_w.as_raw_fd(),
    };
    // vfork-style: the child borrows our memory (no page tables copied, no
    // copy-on-write faults in the sim's other threads) and this thread waits
    // until it has exec'd or failed, so everything it reads stays alive. A
    // plain fork of a process as big as the daemon (sim embedded) cost ~1 ms
    // per container and exec. The child has its own fd table, signal
    // handlers and mask (no CLONE_FILES / CLONE_SIGHAND), as after fork.
    let mut stack = vec![0u8; CHILD_STACK];
    // SAFETY: one past the end of the buffer, rounded down to 16 bytes (the
    // stack grows down from there).
    let top = unsafe { stack.as_mut_ptr().add(stack.len()) };
    let top = ((top as usize) & !15) as *mut libc::c_void;
    // Every signal blocked across the clone (as posix_spawn does): a handler
    // of the sim must never run in the child, which shares its memory until
    // it has reset the dispositions.
    // SAFETY: plain sigset manipulation on local values.
    let old_mask = unsafe {
        let mut all: libc::sigset_t = std::mem::zeroed();
        let mut old: libc::sigset_t = std::mem::zeroed();
        libc::sigfillset(&mut all);
        libc::pthread_sigmask(libc::SIG_SETMASK, &all, &mut old);
        old
    };
    // SAFETY: the child runs `child_entry` on `stack` with `args`, both alive
    // until clone returns (CLONE_VFORK); it makes async-signal-safe calls
    // only and never returns.
    let pid = unsafe {
        libc::clone(
            child_entry,
            top,
            libc::CLONE_VM | libc::CLONE_VFORK | libc::SIGCHLD,
            (&args as *const ChildArgs<'_>).cast_mut().cast(),
        )
    };
    let clone_error = io::Error::last_os_error();
    // SAFETY: restores this thread's own mask.
    unsafe {
        libc::pthread_sigmask(libc::SIG_SETMASK, &old_mask, ptr::null_mut());
    }
    drop(stack);
    if pid < 0 {
        return Err(clone_error);
    }
    drop(err_w);
    Ok((pid, err_r))
}

/// Stack of the vfork-style child (it only makes system calls).
const CHILD_STACK: usize = 128 * 1024;

/// What the child needs, prepared before the clone.
struct ChildArgs<'a> {
    p: &'a Prepared,
    argv: *const *const libc::c_char,
    envp: *const *const libc::c_char,
    fds: [RawFd; 3],
    ctty: bool,
    shim_mask: &'a libc::sigset_t,
    err_w: RawFd,
}

extern "C" fn child_entry(arg: *mut libc::c_void) -> libc::c_int {
    // SAFETY: `arg` is the parent's `ChildArgs`, alive while the parent
    // waits (CLONE_VFORK); we are the new child.
    unsafe {
        let a = &*(arg as *const ChildArgs<'_>);
        child_exec(a.p, a.argv, a.envp, a.fds, a.ctty, a.shim_mask, a.err_w)
    }
}

/// Waits for the exec: EOF on the close-on-exec pipe means it happened; four
/// bytes are the errno of the step that failed (the child then exits 127 and
/// the reaper collects it).
pub(super) fn exec_result(err_r: OwnedFd) -> io::Result<()> {
    let mut buf = [0u8; 4];
    let mut got = 0;
    while got < 4 {
        match rustix::io::read(&err_r, &mut buf[got..]) {
            Ok(0) => break,
            Ok(n) => got += n,
            Err(rustix::io::Errno::INTR) => continue,
            Err(e) => return Err(e.into()),
        }
    }
    if got == 0 {
        return Ok(());
    }
    let errno = i32::from_ne_bytes(buf);
    let e = io::Error::from_raw_os_error(errno);
    Err(io::Error::new(e.kind(), format!("starting the shim: {e}")))
}

/// The child up to `execve`. Async-signal-safe calls only: it shares the
/// parent's memory until then.
///
/// # Safety
/// Must only be called in the child right after the clone, with pointers
/// into data that the parent built before.
unsafe fn child_exec(
    p: &Prepared,
    argv: *const *const libc::c_char,
    envp: *const *const libc::c_char,
    fds: [RawFd; 3],
    ctty: bool,
    shim_mask: &libc::sigset_t,
    err_w: RawFd,
) -> ! {
    let fail = |_step: &str| -> ! { child_fail(err_w) };
    // Block everything while dispositions are reset, so no inherited handler
    // (the sim's signal-hook handlers) ever runs in this child.
    let mut all: libc::sigset_t = std::mem::zeroed();
    libc::sigfillset(&mut all);
    libc::pthread_sigmask(libc::SIG_SETMASK, &all, ptr::null_mut());
    for sig in 1..65 {
        if sig != libc::SIGKILL && sig != libc::SIGSTOP {
            // Fails harmlessly for the libc-reserved real-time signals.
            libc::signal(sig, libc::SIG_DFL);
        }
    }
    if ctty {
        if libc::setsid() < 0 {
            fail("setsid");
        }
    } else if libc::setpgid(0, 0) < 0 {
        fail("setpgid");
    }
    // Move the three fds above 2 first, so none is clobbered by a dup2 when
    // the sim itself runs with 0/1/2 closed.
    let mut high = [0; 3];
    for (i, fd) in fds.iter().enumerate() {
        high[i] = libc::fcntl(*fd, libc::F_DUPFD_CLOEXEC, 3);
        if high[i] < 0 {
            fail("dup");
        }
    }
    for (i, fd) in high.iter().enumerate() {
        if libc::dup2(*fd, i as i32) < 0 {
            fail("dup2");
        }
    }
    if ctty && libc::ioctl(0, libc::TIOCSCTTY, 0) < 0 {
        fail("TIOCSCTTY");
    }
    if libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGUSR2 as libc::c_ulong) < 0 {
        fail("prctl");
    }
    if libc::chdir(p.cwd.as_ptr()) < 0 {
        fail("chdir");
    }
    // Anything the sim inherited without close-on-exec stays out of the
    // container. Best effort: old kernels lack close_range.
    libc::syscall(
        libc::SYS_close_range,
        3u32,
        u32::MAX,
        libc::CLOSE_RANGE_CLOEXEC as libc::c_uint,
    );
    libc::pthread_sigmask(libc::SIG_SETMASK, shim_mask, ptr::null_mut());
    libc::execve(p.exe.as_ptr(), argv, envp);
    fail("execve")
}

/// Reports errno through the exec-error pipe and exits (child side).
unsafe fn child_fail(err_w: RawFd) -> ! {
    let bytes = (*libc::__errno_location()).to_ne_bytes();
    libc::write(err_w, bytes.as_ptr().cast(), 4);
    libc::_exit(127)
}

/// Opens /dev/null close-on-exec, for a child's unused stdio.
pub(super) fn dev_null(write: bool) -> io::Result<OwnedFd> {
    use rustix::fs::{Mode, OFlags};
    let mode = if write {
        OFlags::WRONLY
    } else {
        OFlags::RDONLY
    };
    Ok(rustix::fs::open(
        "/dev/null",
        mode | OFlags::CLOEXEC,
        Mode::empty(),
    )?)
}

/// Duplicates an fd (close-on-exec): the pty slave serves as all three stdio
/// fds.
pub(super) fn dup(fd: &OwnedFd) -> io::Result<OwnedFd> {
    fd.try_clone()
}
