//! The shim: `kubegate __shim --ppid N [--uid U --gid G --groups G,…]
//! [--exe PATH] -- ARGV…`, the process between the sim and every container
//! or exec command.
//!
//! Why it exists: PR_SET_PDEATHSIG only reaches the direct child, so a
//! command's own children (`sh -c 'sleep 100 & wait'`) would outlive a
//! SIGKILLed sim. The shim is that direct child, and:
//! - starts with its signals already blocked (the spawner blocked them before
//!   the exec) and takes them one by one with `sigwaitinfo`: no handlers, no
//!   async-signal-safety puzzles;
//! - is a child subreaper, so every orphaned descendant becomes its child;
//! - has SIGUSR2 as its parent-death signal (not SIGTERM, which the sim sends
//!   to the whole group for graceful stops), and checks `getppid()` against
//!   the expected sim pid to close the race with a sim that died before the
//!   prctl;
//! - runs ARGV as its child (as uid U, gid G and groups G,… when given,
//!   switched in the child right before its exec; the shim keeps the sim's
//!   credentials, see `start_command`) in its own process group (made by the spawner:
//!   `setsid` + controlling tty, or `setpgid`), with the fds it inherited and
//!   the environment it was given;
//! - when the command exits: SIGKILLs whatever descendants are left (a
//!   container's processes end with its main process, as in a pid
//!   namespace), then exits with the command's code, or re-raises its signal
//!   so the sim sees "killed by N" (exit code 128+N);
//! - on SIGUSR2 from the sim (a kill request) or on the sim's death: SIGKILLs
//!   every descendant, reaps until none is left, and dies by SIGKILL (137);
//! - ignores SIGTERM/SIGINT/SIGHUP/SIGQUIT (the group got them; the command
//!   decides), except with no command (the idle process), where SIGTERM or
//!   SIGINT means exit 0.
//!
//! It prints nothing unless it cannot start (stdout/stderr belong to the
//! container).

use std::ffi::CString;
use std::io::Write;
use std::time::{Duration, Instant};

struct Args {
    ppid: i32,
    exe: Option<String>,
    user: Option<super::User>,
    argv: Vec<String>,
}

fn id_arg(flag: &str, v: &str) -> Result<u32, ShimError> {
    v.parse::<u32>()
        .ok()
        .filter(|&n| n < u32::MAX)
        .ok_or(ShimError(format!("bad {flag} {v:?}")))
}

/// Why the shim refused its command line (exit 2) or could not start the
/// command (exit 127); printed after `kubegate __shim: `.
#[derive(Debug, Clone, PartialEq, Eq)]
struct ShimError(String);

impl From<String> for ShimError {
    fn from(s: String) -> Self {
        ShimError(s)
    }
}

impl From<&str> for ShimError {
    fn from(s: &str) -> Self {
        ShimError(s.to_string())
    }
}

impl std::fmt::Display for ShimError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

fn parse(args: &[String]) -> Result<Args, ShimError> {
    let mut ppid = None;
    let mut exe = None;
    let (mut uid, mut gid, mut groups) = (None, None, None);
    let mut it = args.iter();
    loop {
        match it.next().map(String::as_str) {
            Some(f @ ("--uid" | "--gid")) => {
                let v = id_arg(f, it.next().ok_or(format!("{f} needs a value"))?)?;
                if f == "--uid" {
                    uid = Some(v);
                } else {
                    gid = Some(v);
                }
            }
            Some("--groups") => {
                let v = it.next().ok_or("--groups needs a value")?;
                let list: Vec<u32> = v
                    .split(',')
                    .filter(|g| !g.is_empty())
                    .map(|g| id_arg("--groups", g))
                    .collect::<Result<_, _>>()?;
                groups = Some(list);
            }
            Some("--ppid") => {
                let v = it.next().ok_or("--ppid needs a value")?;
                ppid = Some(v.parse::<i32>().map_err(|_| format!("bad --ppid {v:?}"))?);
            }
            Some("--exe") => exe = Some(it.next().ok_or("--exe needs a value")?.clone()),
            Some("--") => break,
            Some(other) => return Err(format!("unexpected argument {other:?}").into()),
            None => return Err("missing --".into()),
        }
    }
    let argv: Vec<String> = it.cloned().collect();
    if argv.is_empty() != exe.is_none() {
        return Err("--exe and a command go together".into());
    }
    let user = match (uid, gid) {
        (Some(uid), Some(gid)) => Some(super::User {
            uid,
            gid,
            groups: groups.unwrap_or_default(),
        }),
        (None, None) if groups.is_none() => None,
        _ => return Err("--uid and --gid go together (with --groups)".into()),
    };
    Ok(Args {
        ppid: ppid.ok_or("missing --ppid")?,
        exe,
        user,
        argv,
    })
}

/// Entry point of `kubegate __shim`; `args` are the arguments after
/// `__shim`. Returns the exit code (it may also end by re-raising the
/// command's terminating signal).
///
/// main.rs must route it FIRST, before a logger, threads or signal handlers
/// exist (the shim must be single-threaded and print nothing):
///
/// ```text
/// let args: Vec<String> = std::env::args().collect();
/// if args.get(1).map(String::as_str) == Some(kubegate::sim::runtime::SHIM_SUBCOMMAND) {
///     std::process::exit(kubegate::sim::runtime::shim_main(&args[2..]));
/// }
/// ```
pub fn shim_main(args: &[String]) -> i32 {
    let args = match parse(args) {
        Ok(a) => a,
        Err(e) => {
            let _ = writeln!(std::io::stderr(), "kubegate __shim: {e}");
            return 2;
        }
    };
    let set = super::spawn::shim_sigset();
    // SAFETY: plain signal-mask and disposition calls on valid arguments; the
    // shim is single-threaded.
    unsafe {
        libc::sigprocmask(libc::SIG_BLOCK, &set, std::ptr::null_mut());
        // Job-control stops must not stop the shim (its child resets these).
        for sig in [libc::SIGTSTP, libc::SIGTTIN, libc::SIGTTOU] {
            libc::signal(sig, libc::SIG_IGN);
        }
    }
    let _ = rustix::process::set_child_subreaper(Some(rustix::process::getpid()));
    let _ = rustix::process::set_parent_process_death_signal(Some(rustix::process::Signal::USR2));
    if parent_gone(args.ppid) {
        return 1;
    }
    let child = match &args.exe {
        Some(exe) => match start_command(exe, &args.argv, args.user.as_ref()) {
            Ok(pid) => Some(pid),
            Err(e) => {
                let _ = writeln!(std::io::stderr(), "kubegate __shim: {e}");
                return 127;
            }
        },
        None => None,
    };
    loop {
        // SAFETY: siginfo_t is plain data; sigwaitinfo fills it.
        let mut info: libc::siginfo_t = unsafe { std::mem::zeroed() };
        // SAFETY: valid set and siginfo pointers.
        let sig = unsafe { libc::sigwaitinfo(&set, &mut info) };
        if sig < 0 {
            continue; // EINTR
        }
        match sig {
            libc::SIGCHLD => {
                if let Some(status) = reap_children(child) {
                    kill_descendants();
                    return exit_like(status);
                }
            }
            libc::SIGUSR2 => {
                // SAFETY: si_pid is valid for signals sent by kill() and by
                // the kernel's parent-death notification.
                let from = unsafe { info.si_pid() };
                if from == args.ppid || from == 0 || parent_gone(args.ppid) {
                    kill_descendants();
                    die_by(libc::SIGKILL);
                }
            }
            libc::SIGTERM | libc::SIGINT if child.is_none() => return 0,
            _ => {}
        }
    }
}

fn parent_gone(ppid: i32) -> bool {
    rustix::process::getppid().map(|p| p.as_raw_nonzero().get()) != Some(ppid)
}

/// Forks and execs the command in our group, with default signal handling,
/// as `user` when given.
///
/// The credentials change in the forked child, right before `execv`: the
/// shim is single-threaded and this is a real fork (not the spawner's
/// `CLONE_VM` child, which shares the sim's memory and must not call libc's
/// set*id wrappers, which signal every thread of the process). Order:
/// supplementary groups, then gid, then uid (after the uid change the others
/// are no longer permitted). The kernel clears the parent-death signal on a
/// credential change, so it is armed AFTER the switch (SIGKILL: the shim is
/// gone, so must the command be), then `getppid` closes the race with a shim
/// that died before the prctl. The shim itself keeps the sim's credentials:
/// its own parent-death signal stays armed and the pod cannot signal it.
fn start_command(exe: &str, argv: &[String], user: Option<&super::User>) -> Result<i32, ShimError> {
    let c_exe = CString::new(exe).map_err(|_| "NUL in command path".to_string())?;
    let c_args: Vec<CString> = argv
        .iter()
        .map(|a| CString::new(a.as_str()))
        .collect::<Result<_, _>>()
        .map_err(|_| "NUL in an argument".to_string())?;
    let mut ptrs: Vec<*const libc::c_char> = c_args.iter().map(|a| a.as_ptr()).collect();
    ptrs.push(std::ptr::null());
    let groups: Vec<libc::gid_t> = user.map(|u| u.groups.clone()).unwrap_or_default();
    let shim_pid = rustix::process::getpid().as_raw_nonzero().get();
    // SAFETY: the shim is single-threaded, so the child may do anything; it
    // only resets signals, switches credentials and execs data prepared
    // before the fork.
    let pid = unsafe { libc::fork() };
    if pid < 0 {
        return Err(format!("fork: {}", std::io::Error::last_os_error()).into());
    }
    if pid == 0 {
        // SAFETY: in the child: reset dispositions and the mask, then exec.
        unsafe {
            for sig in 1..65 {
                if sig != libc::SIGKILL && sig != libc::SIGSTOP {
                    libc::signal(sig, libc::SIG_DFL);
                }
            }
            let mut empty: libc::sigset_t = std::mem::zeroed();
            libc::sigemptyset(&mut empty);
            libc::sigprocmask(libc::SIG_SETMASK, &empty, std::ptr::null_mut());
            // A container runtime's umask (runc's), not the sim's own
            // (the daemon runs with 077).
            libc::umask(0o022);
            if let Some(u) = user {
                let step = if libc::setgroups(groups.len(), groups.as_ptr()) != 0 {
                    Some("setgroups")
                } else if libc::setresgid(u.gid, u.gid, u.gid) != 0 {
                    Some("setresgid")
                } else if libc::setresuid(u.uid, u.uid, u.uid) != 0 {
                    Some("setresuid")
                } else if libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL as libc::c_ulong) != 0 {
                    Some("prctl(PR_SET_PDEATHSIG)")
                } else {
                    None
                };
                if let Some(step) = step {
                    let err = std::io::Error::last_os_error();
                    let msg = format!(
                        "kubegate __shim: {step} for uid {} gid {}: {err}\n",
                        u.uid, u.gid
                    );
                    libc::write(2, msg.as_ptr().cast(), msg.len());
                    libc::_exit(126);
                }
                if libc::getppid() != shim_pid {
                    libc::_exit(1);
                }
            }
            libc::execv(c_exe.as_ptr(), ptrs.as_ptr());
            let err = std::io::Error::last_os_error();
            let code = if err.raw_os_error() == Some(libc::ENOENT) {
                127
            } else {
                126
            };
            let msg = format!("exec {exe}: {err}\n");
            libc::write(2, msg.as_ptr().cast(), msg.len());
            libc::_exit(code);
        }
    }
    Ok(pid)
}

/// Reaps every exited child. Returns the command's wait status once it has
/// exited.
fn reap_children(child: Option<i32>) -> Option<i32> {
    let mut main = None;
    loop {
        let mut status = 0;
        // SAFETY: waitpid with a valid status pointer.
        let pid = unsafe { libc::waitpid(-1, &mut status, libc::WNOHANG) };
        if pid <= 0 {
            return main;
        }
        if Some(pid) == child {
            main = Some(status);
        }
    }
}

/// SIGKILLs every descendant (all of them are our children or theirs: we are
/// a subreaper) and reaps until we have no child left. Bounded: 5 s.
fn kill_descendants() {
    let me = rustix::process::getpid().as_raw_nonzero().get();
    let deadline = Instant::now() + Duration::from_secs(5);
    loop {
        let mut status = 0;
        // Reap what is dead; ECHILD means nothing is left.
        loop {
            // SAFETY: waitpid with a valid status pointer.
            let pid = unsafe { libc::waitpid(-1, &mut status, libc::WNOHANG) };
            if pid == 0 {
                break;
            }
            if pid < 0 {
                if std::io::Error::last_os_error().raw_os_error() == Some(libc::EINTR) {
                    continue;
                }
                return;
            }
        }
        if Instant::now() > deadline {
            return;
        }
        for pid in descendants(me) {
            // SAFETY: kill has no memory effects; a pid that just exited is at
            // worst a zombie child of ours (not yet reaped), never reused.
            unsafe { libc::kill(pid, libc::SIGKILL) };
        }
        wait_sigchld(Duration::from_millis(20));
    }
}

fn wait_sigchld(timeout: Duration) {
    let ts = libc::timespec {
        tv_sec: timeout.as_secs() as _,
        tv_nsec: timeout.subsec_nanos() as _,
    };
    // SAFETY: local sigset and timespec; SIGCHLD is blocked, so it waits.
    unsafe {
        let mut set: libc::sigset_t = std::mem::zeroed();
        libc::sigemptyset(&mut set);
        libc::sigaddset(&mut set, libc::SIGCHLD);
        libc::sigtimedwait(&set, std::ptr::null_mut(), &ts);
    }
}

/// Pids below `root` in the process tree, from /proc.
fn descendants(root: i32) -> Vec<i32> {
    let mut parent_of = Vec::new();
    if let Ok(dir) = std::fs::read_dir("/proc") {
        for entry in dir.flatten() {
            let Some(pid) = entry
                .file_name()
                .to_str()
                .and_then(|s| s.parse::<i32>().ok())
            else {
                continue;
            };
            if let Some(ppid) = read_ppid(pid) {
                parent_of.push((pid, ppid));
            }
        }
    }
    let mut found = vec![root];
    let mut i = 0;
    while i < found.len() {
        let p = found[i];
        found.extend(parent_of.iter().filter(|(_, pp)| *pp == p).map(|(c, _)| *c));
        i += 1;
    }
    found.remove(0);
    found
}

/// The ppid field of /proc/PID/stat (after the parenthesised command name,
/// which may itself contain spaces and parentheses).
pub(crate) fn read_ppid(pid: i32) -> Option<i32> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    let after = &stat[stat.rfind(')')? + 1..];
    after.split_whitespace().nth(1)?.parse().ok()
}

/// Ends the shim the way the command ended.
fn exit_like(status: i32) -> i32 {
    if libc::WIFSIGNALED(status) {
        die_by(libc::WTERMSIG(status))
    } else {
        libc::WEXITSTATUS(status)
    }
}

/// Dies by `sig` (without a core dump), so the sim sees the same signal.
fn die_by(sig: i32) -> ! {
    let _ = rustix::process::setrlimit(
        rustix::process::Resource::Core,
        rustix::process::Rlimit {
            current: Some(0),
            maximum: None,
        },
    );
    // SAFETY: default disposition, unblock, and raise the signal on
    // ourselves; single-threaded.
    unsafe {
        libc::signal(sig, libc::SIG_DFL);
        let mut set: libc::sigset_t = std::mem::zeroed();
        libc::sigemptyset(&mut set);
        libc::sigaddset(&mut set, sig);
        libc::sigprocmask(libc::SIG_UNBLOCK, &set, std::ptr::null_mut());
        libc::kill(libc::getpid(), sig);
        // Signals whose default is to be ignored land here.
        libc::_exit(128 + sig)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_arguments() {
        let a: Vec<String> = ["--ppid", "7", "--exe", "/bin/sh", "--", "sh", "-c", "x"]
            .iter()
            .map(|s| s.to_string())
            .collect();
        let p = parse(&a).unwrap();
        assert_eq!(
            (p.ppid, p.exe.as_deref(), p.argv.len()),
            (7, Some("/bin/sh"), 3)
        );
        let idle: Vec<String> = ["--ppid", "7", "--"]
            .iter()
            .map(|s| s.to_string())
            .collect();
        assert!(parse(&idle).unwrap().argv.is_empty());
        assert!(parse(&a[..2]).is_err());
        assert!(parse(&["--ppid".to_string(), "x".into(), "--".into()]).is_err());
        let as_user: Vec<String> = [
            "--ppid", "7", "--uid", "200001", "--gid", "5", "--groups", "5,200001", "--",
        ]
        .iter()
        .map(|s| s.to_string())
        .collect();
        assert_eq!(
            parse(&as_user).unwrap().user,
            Some(crate::sim::runtime::User {
                uid: 200001,
                gid: 5,
                groups: vec![5, 200001]
            })
        );
        let half: Vec<String> = ["--ppid", "7", "--uid", "1", "--"]
            .iter()
            .map(|s| s.to_string())
            .collect();
        assert!(parse(&half).is_err());
        let minus: Vec<String> = ["--ppid", "7", "--uid", "4294967295", "--gid", "1", "--"]
            .iter()
            .map(|s| s.to_string())
            .collect();
        assert!(parse(&minus).is_err());
    }

    #[test]
    fn reads_own_ppid() {
        let me = std::process::id() as i32;
        assert_eq!(
            read_ppid(me),
            Some(std::os::unix::process::parent_id() as i32)
        );
    }
}
