//! The sim's process runtime with real processes: output and exit codes,
//! backpressure, stdin, pty, signals, logs, and the promise that no process
//! outlives the sim even when the sim is SIGKILLed.
//!
//! The shim is this test binary itself: a constructor in `.init_array` runs
//! before libtest's `main` and routes `__shim` to `shim_main` (and
//! `__runtime_child` to the SIGKILL scenario), exactly as kubegate's main.rs
//! routes `__shim`. So `Runtime::new` (shim = /proc/self/exe __shim) is
//! tested as shipped.
//!
//! Every test runs under a watchdog (`deadline`), waits on conditions with
//! deadlines, and uses its own temporary root, so tests run in parallel.

use crossbeam_channel::Receiver;
use kubegate::sim::runtime::{
    shim_main, ExitInfo, LogQuery, OutputChunk, Process, ProcessSpec, Runtime, Stream, User,
};
use std::ffi::CStr;
use std::io::{BufRead, BufReader};
use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

// ---------------------------------------------------------------------------
// The pre-main hook: this binary doubles as the shim and as the sim child.

#[used]
#[link_section = ".init_array"]
static PRE_MAIN: extern "C" fn(
    libc::c_int,
    *const *const libc::c_char,
    *const *const libc::c_char,
) = pre_main;

extern "C" fn pre_main(
    argc: libc::c_int,
    argv: *const *const libc::c_char,
    _envp: *const *const libc::c_char,
) {
    if argc < 2 || argv.is_null() {
        return;
    }
    // SAFETY: glibc passes the process's argc/argv to .init_array functions;
    // each of the argc entries is a NUL-terminated string.
    let args: Vec<String> = (0..argc as usize)
        .map(|i| {
            unsafe { CStr::from_ptr(*argv.add(i)) }
                .to_string_lossy()
                .into_owned()
        })
        .collect();
    match args[1].as_str() {
        "__shim" => std::process::exit(shim_main(&args[2..])),
        "__runtime_child" => runtime_child(&args[2..]),
        _ => {}
    }
}

/// The sim stand-in for the SIGKILL test: starts a container whose shell has
/// two background children, prints `READY` and the pids of its whole process
/// tree, then waits to be killed.
fn runtime_child(args: &[String]) -> ! {
    let root = PathBuf::from(&args[0]);
    let rt = Runtime::new(root.clone()).expect("runtime");
    let mut s = spec(&["sh", "-c", "sleep 300 & sleep 300 & wait"], true);
    if args.get(1).map(String::as_str) == Some("as-user") {
        s.user = Some(test_user());
    }
    let p = rt.start(s).expect("start");
    let tree = wait_for(Duration::from_secs(20), || {
        let d = descendants(p.pid());
        (d.len() >= 3).then_some(d)
    });
    let mut line = format!("READY {}", p.pid());
    for pid in tree {
        line.push_str(&format!(" {pid}"));
    }
    println!("{line}");
    loop {
        std::thread::park();
    }
}

// ---------------------------------------------------------------------------
// Helpers.

fn deadline<T: Send + 'static>(secs: u64, f: impl FnOnce() -> T + Send + 'static) -> T {
    let (tx, rx) = crossbeam_channel::bounded(1);
    let h = std::thread::spawn(move || {
        let _ = tx.send(f());
    });
    match rx.recv_timeout(Duration::from_secs(secs)) {
        Ok(v) => v,
        Err(crossbeam_channel::RecvTimeoutError::Disconnected) => match h.join() {
            Err(p) => std::panic::resume_unwind(p),
            Ok(()) => unreachable!("the test thread ended without a result"),
        },
        Err(crossbeam_channel::RecvTimeoutError::Timeout) => {
            panic!("watchdog: test still running after {secs} s")
        }
    }
}

fn wait_for<T>(within: Duration, mut f: impl FnMut() -> Option<T>) -> T {
    let end = Instant::now() + within;
    loop {
        if let Some(v) = f() {
            return v;
        }
        assert!(Instant::now() < end, "condition not met within {within:?}");
        std::thread::sleep(Duration::from_millis(10));
    }
}

fn root(name: &str) -> PathBuf {
    let p = std::env::temp_dir().join(format!("kubegate-rt-{}-{name}", std::process::id()));
    std::fs::create_dir_all(&p).expect("temp dir");
    p
}

/// Removes a test's folder when the test ends.
struct TempRoot(PathBuf);

impl Drop for TempRoot {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

fn runtime(name: &str) -> (Arc<Runtime>, TempRoot) {
    let dir = root(name);
    (Runtime::new(dir.clone()).expect("runtime"), TempRoot(dir))
}

fn spec(argv: &[&str], log: bool) -> ProcessSpec {
    ProcessSpec {
        argv: argv.iter().map(|s| s.to_string()).collect(),
        env: vec![(
            "PATH".into(),
            "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin".into(),
        )],
        cwd: std::env::temp_dir(),
        tty: false,
        stdin: false,
        log,
        user: None,
    }
}

/// A host user no account on a test machine has (inside the sim's default
/// pod range).
fn test_user() -> User {
    User {
        uid: 264_001,
        gid: 264_002,
        groups: vec![264_002, 264_003],
    }
}

/// Switching users needs root (CI runs as root): elsewhere the test says
/// it was skipped, and is not counted as a pass of the behaviour.
fn need_root(test: &str) -> bool {
    if kubegate::sim::runtime::can_switch_users() {
        return true;
    }
    eprintln!("SKIPPED {test}: switching users needs root (CAP_SETUID, CAP_SETGID, CAP_CHOWN, ...); CI runs it as root");
    false
}

/// Real, effective, saved and filesystem uids of a process, from /proc.
fn uids_of(pid: i32) -> Option<String> {
    let s = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    let line = s.lines().find(|l| l.starts_with("Uid:"))?;
    Some(
        line["Uid:".len()..]
            .split_whitespace()
            .collect::<Vec<_>>()
            .join(" "),
    )
}

/// Reads an exec's output to the end: (stdout, stderr, tty).
fn collect(rx: Receiver<OutputChunk>) -> (Vec<u8>, Vec<u8>, Vec<u8>) {
    let (mut out, mut err, mut tty) = (Vec::new(), Vec::new(), Vec::new());
    for c in rx {
        match c.stream {
            Stream::Stdout => out.extend(c.data),
            Stream::Stderr => err.extend(c.data),
            Stream::Tty => tty.extend(c.data),
        }
    }
    (out, err, tty)
}

/// Reads until the accumulated output contains `needle`.
fn read_until(rx: &Receiver<OutputChunk>, acc: &mut Vec<u8>, needle: &str) {
    let end = Instant::now() + Duration::from_secs(20);
    while !String::from_utf8_lossy(acc).contains(needle) {
        let left = end.saturating_duration_since(Instant::now());
        match rx.recv_timeout(left) {
            Ok(c) => acc.extend(c.data),
            Err(e) => panic!(
                "waiting for {needle:?}: {e}; got {:?}",
                String::from_utf8_lossy(acc)
            ),
        }
    }
}

fn exit_within(p: &Process, secs: u64) -> ExitInfo {
    p.wait_timeout(Duration::from_secs(secs))
        .unwrap_or_else(|| panic!("process {} did not exit within {secs} s", p.pid()))
}

/// (ppid, starttime, state) from /proc/PID/stat.
fn stat(pid: i32) -> Option<(i32, u64, char)> {
    let s = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    let after = &s[s.rfind(')')? + 2..];
    let f: Vec<&str> = after.split_whitespace().collect();
    Some((
        f[1].parse().ok()?,
        f[19].parse().ok()?,
        f[0].chars().next()?,
    ))
}

/// The process tree below `root` (not including it).
fn descendants(root: i32) -> Vec<i32> {
    let mut all = Vec::new();
    for e in std::fs::read_dir("/proc").expect("/proc").flatten() {
        if let Some(pid) = e.file_name().to_str().and_then(|s| s.parse::<i32>().ok()) {
            if let Some((ppid, _, _)) = stat(pid) {
                all.push((pid, ppid));
            }
        }
    }
    let mut found = vec![root];
    let mut i = 0;
    while i < found.len() {
        let p = found[i];
        found.extend(all.iter().filter(|(_, pp)| *pp == p).map(|(c, _)| *c));
        i += 1;
    }
    found.remove(0);
    found
}

/// Identities (pid + start time) of processes, to check later that they are
/// gone without being fooled by pid reuse.
fn identities(pids: &[i32]) -> Vec<(i32, u64)> {
    pids.iter()
        .filter_map(|&p| stat(p).map(|(_, start, _)| (p, start)))
        .collect()
}

fn alive(ids: &[(i32, u64)]) -> Vec<i32> {
    ids.iter()
        .filter(|(pid, start)| matches!(stat(*pid), Some((_, s, st)) if s == *start && st != 'Z'))
        .map(|(p, _)| *p)
        .collect()
}

fn all_gone(ids: &[(i32, u64)]) {
    wait_for(Duration::from_secs(15), || {
        alive(ids).is_empty().then_some(())
    });
}

// ---------------------------------------------------------------------------
// Core: output, exit codes, backpressure.

#[test]
fn stdout_stderr_are_separate_and_exit_code_is_reported() {
    deadline(60, || {
        let (rt, _dir) = runtime("basic");
        let p = rt
            .start(spec(
                &["sh", "-c", "echo out; echo err >&2; echo out2; exit 3"],
                false,
            ))
            .unwrap();
        let (out, err, tty) = collect(p.take_output().unwrap());
        assert_eq!(String::from_utf8(out).unwrap(), "out\nout2\n");
        assert_eq!(String::from_utf8(err).unwrap(), "err\n");
        assert!(tty.is_empty());
        // The channel ends only after the exit, so it is known now.
        let info = p.exited().expect("exit known when the output ends");
        assert_eq!((info.code, info.signal), (3, None));
        assert!(p.take_output().is_none());
    });
}

#[test]
fn killed_by_a_signal_reports_128_plus_n() {
    deadline(60, || {
        let (rt, _dir) = runtime("sig");
        let p = rt.start(spec(&["sh", "-c", "kill -9 $$"], false)).unwrap();
        let _ = collect(p.take_output().unwrap());
        let info = p.wait();
        assert_eq!((info.code, info.signal), (137, Some(9)));
        let p = rt
            .start(spec(&["sh", "-c", "kill -TERM $$"], false))
            .unwrap();
        let _ = collect(p.take_output().unwrap());
        assert_eq!(p.wait().code, 143);
    });
}

#[test]
fn environment_is_exactly_the_spec() {
    deadline(60, || {
        let (rt, _dir) = runtime("env");
        let mut s = spec(&["env"], false);
        s.env.push(("A".into(), "1 2".into()));
        let p = rt.start(s).unwrap();
        let (out, _, _) = collect(p.take_output().unwrap());
        assert_eq!(
            String::from_utf8(out).unwrap(),
            "PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin\nA=1 2\n"
        );
        let mut s = spec(&["pwd"], false);
        s.cwd = rt.root().to_path_buf();
        let p = rt.start(s).unwrap();
        let (out, _, _) = collect(p.take_output().unwrap());
        assert_eq!(
            String::from_utf8(out).unwrap().trim(),
            rt.root().to_str().unwrap()
        );
    });
}

#[test]
fn start_errors_are_reported_synchronously() {
    deadline(60, || {
        let (rt, _dir) = runtime("errors");
        let e = rt
            .start(spec(&["no-such-command-kubegate"], false))
            .err()
            .unwrap();
        assert_eq!(e.kind(), std::io::ErrorKind::NotFound);
        assert!(e.to_string().contains("not found in $PATH"), "{e}");
        let mut s = spec(&["true"], false);
        s.cwd = rt.root().join("missing");
        assert_eq!(
            rt.start(s).err().unwrap().kind(),
            std::io::ErrorKind::NotFound
        );
        assert_eq!(rt.live(), 0);
    });
}

#[test]
fn large_output_through_a_slow_consumer_loses_nothing() {
    deadline(120, || {
        const TOTAL: usize = 50_000_000;
        let (rt, _dir) = runtime("large");
        let p = rt
            .start(spec(
                &[
                    "sh",
                    "-c",
                    &format!("yes 0123456789abcdefghijklmnopqrstuvwxyzABCD | head -c {TOTAL}"),
                ],
                false,
            ))
            .unwrap();
        let rx = p.take_output().unwrap();
        // Not reading: the pipe and the channel fill, and the command blocks.
        assert!(p.wait_timeout(Duration::from_millis(300)).is_none());
        let started = Instant::now();
        let mut got = 0usize;
        let mut line = Vec::new();
        let mut chunks = 0usize;
        for c in rx {
            assert_eq!(c.stream, Stream::Stdout);
            chunks += 1;
            if chunks % 64 == 0 {
                // A slow consumer.
                std::thread::sleep(Duration::from_millis(1));
            }
            for &b in &c.data {
                line.push(b);
                if b == b'\n' {
                    assert_eq!(&line[..], b"0123456789abcdefghijklmnopqrstuvwxyzABCD\n");
                    line.clear();
                }
            }
            got += c.data.len();
        }
        let secs = started.elapsed().as_secs_f64();
        assert_eq!(got, TOTAL);
        assert_eq!(p.exited().unwrap().code, 0);
        eprintln!(
            "exec output: {} MB in {:.2} s = {:.0} MB/s (checked consumer, {chunks} chunks)",
            TOTAL / 1_000_000,
            secs,
            TOTAL as f64 / 1e6 / secs
        );
    });
}

#[test]
fn dropping_the_output_receiver_closes_the_pipes() {
    deadline(60, || {
        let (rt, _dir) = runtime("drop");
        let p = rt.start(spec(&["yes"], false)).unwrap();
        drop(p.take_output());
        // `yes` gets SIGPIPE: 128 + 13.
        assert_eq!(exit_within(&p, 20).code, 141);
    });
}

#[test]
fn stdin_to_eof_and_output_after_it() {
    deadline(60, || {
        let (rt, _dir) = runtime("stdin");
        let mut s = spec(&["sh", "-c", "cat; echo after-eof"], false);
        s.stdin = true;
        let p = rt.start(s).unwrap();
        let rx = p.take_output().unwrap();
        p.write_stdin(b"hello\n").unwrap();
        let mut acc = Vec::new();
        read_until(&rx, &mut acc, "hello\n");
        // 1 MiB more through stdin: larger than the pipe, so the write waits.
        let big = vec![b'z'; 1 << 20];
        let writer = {
            let p = p.clone();
            std::thread::spawn(move || {
                p.write_stdin(&big).unwrap();
                p.close_stdin();
            })
        };
        let (out, _, _) = collect(rx);
        writer.join().unwrap();
        acc.extend(out);
        assert_eq!(acc.len(), 6 + (1 << 20) + "after-eof\n".len());
        assert!(acc.ends_with(b"zzz\nafter-eof\n") || acc.ends_with(b"zafter-eof\n"));
        assert_eq!(p.exited().unwrap().code, 0);
        assert_eq!(
            p.write_stdin(b"x").unwrap_err().kind(),
            std::io::ErrorKind::BrokenPipe
        );
    });
}

#[test]
fn without_stdin_the_child_reads_dev_null() {
    deadline(60, || {
        let (rt, _dir) = runtime("nostdin");
        let p = rt
            .start(spec(&["sh", "-c", "cat; echo eof"], false))
            .unwrap();
        let (out, _, _) = collect(p.take_output().unwrap());
        assert_eq!(out, b"eof\n");
        assert!(p.write_stdin(b"x").is_err());
    });
}

// ---------------------------------------------------------------------------
// Signals, termination, descendants.

#[test]
fn idle_process_exits_0_on_sigterm() {
    deadline(60, || {
        let (rt, _dir) = runtime("idle");
        let p = rt.start(spec(&[], true)).unwrap();
        assert!(p.wait_timeout(Duration::from_millis(100)).is_none());
        assert_eq!(rt.live(), 1);
        let t = Instant::now();
        p.terminate(Duration::from_secs(30));
        let info = exit_within(&p, 20);
        assert_eq!((info.code, info.signal), (0, None));
        assert!(t.elapsed() < Duration::from_secs(10));
        assert!(p.log_snapshot(&LogQuery::default()).is_empty());
        assert_eq!(rt.live(), 0);
    });
}

#[test]
fn terminate_escalates_to_sigkill_when_term_is_trapped() {
    deadline(60, || {
        let (rt, _dir) = runtime("trap");
        let p = rt
            .start(spec(
                &[
                    "sh",
                    "-c",
                    "trap '' TERM; echo ready; while :; do sleep 1; done",
                ],
                false,
            ))
            .unwrap();
        let rx = p.take_output().unwrap();
        read_until(&rx, &mut Vec::new(), "ready");
        let tree = identities(&descendants(p.pid()));
        let t = Instant::now();
        p.terminate(Duration::from_millis(500));
        assert!(p.wait_timeout(Duration::from_millis(300)).is_none());
        let info = exit_within(&p, 20);
        assert!(t.elapsed() >= Duration::from_millis(500));
        assert_eq!((info.code, info.signal), (137, Some(9)));
        all_gone(&tree);
    });
}

#[test]
fn grandchildren_die_with_the_container_even_outside_its_group() {
    deadline(60, || {
        let (rt, _dir) = runtime("grand");
        // One child in the group, one in a new session (left the group).
        let p = rt
            .start(spec(
                &[
                    "sh",
                    "-c",
                    "sleep 300 & setsid sleep 301 & echo started; wait",
                ],
                false,
            ))
            .unwrap();
        let rx = p.take_output().unwrap();
        read_until(&rx, &mut Vec::new(), "started");
        let tree = wait_for(Duration::from_secs(10), || {
            let d = descendants(p.pid());
            (d.len() >= 3).then_some(d)
        });
        let ids = identities(&tree);
        p.terminate(Duration::from_secs(5));
        let _ = collect(rx);
        assert_eq!(p.exited().unwrap().code, 143);
        all_gone(&ids);
    });
}

#[test]
fn orphans_of_an_externally_killed_shim_are_swept() {
    deadline(60, || {
        let (rt, _dir) = runtime("sweep");
        let p = rt
            .start(spec(
                &["sh", "-c", "setsid sleep 302 & echo started; wait"],
                true,
            ))
            .unwrap();
        wait_for(Duration::from_secs(10), || {
            let d = descendants(p.pid());
            (d.len() >= 2).then_some(())
        });
        let ids = identities(&descendants(p.pid()));
        // Someone else SIGKILLs the shim: its children become ours.
        // SAFETY: kill on a pid that is alive (our unreaped child).
        unsafe { libc::kill(p.pid(), libc::SIGKILL) };
        let info = exit_within(&p, 20);
        assert_eq!(info.code, 137);
        all_gone(&ids);
    });
}

#[test]
fn leftovers_die_when_the_main_process_exits() {
    deadline(60, || {
        let (rt, _dir) = runtime("leftover");
        let p = rt
            .start(spec(&["sh", "-c", "sleep 300 & echo $!"], false))
            .unwrap();
        let (out, _, _) = collect(p.take_output().unwrap());
        let bg: i32 = String::from_utf8(out).unwrap().trim().parse().unwrap();
        assert_eq!(p.exited().unwrap().code, 0);
        // The shim reaped it (it was its child): it is gone, not a zombie.
        wait_for(Duration::from_secs(10), || stat(bg).is_none().then_some(()));
    });
}

#[test]
fn signal_group_and_kill() {
    deadline(60, || {
        let (rt, _dir) = runtime("signal");
        let p = rt
            .start(spec(
                &[
                    "sh",
                    "-c",
                    "trap 'echo got-int; exit 5' INT; echo ready; while :; do sleep 1; done",
                ],
                false,
            ))
            .unwrap();
        let rx = p.take_output().unwrap();
        read_until(&rx, &mut Vec::new(), "ready");
        p.signal_group(libc::SIGINT).unwrap();
        let (out, _, _) = collect(rx);
        assert!(String::from_utf8_lossy(&out).contains("got-int"));
        assert_eq!(p.exited().unwrap().code, 5);
        assert!(p.signal_group(libc::SIGINT).is_err());

        let p = rt.start(spec(&["sleep", "300"], true)).unwrap();
        p.kill();
        assert_eq!(exit_within(&p, 20).code, 137);
    });
}

#[test]
fn kill_all_reaps_everything() {
    deadline(60, || {
        let (rt, _dir) = runtime("killall");
        let mut procs = Vec::new();
        for _ in 0..3 {
            procs.push(
                rt.start(spec(&["sh", "-c", "trap '' TERM; sleep 300 & wait"], true))
                    .unwrap(),
            );
        }
        procs.push(rt.start(spec(&[], true)).unwrap());
        assert_eq!(rt.live(), 4);
        let exits: Vec<_> = procs.iter().map(|p| p.on_exit()).collect();
        assert_eq!(rt.kill_all(Duration::from_millis(200)), 0);
        for (p, rx) in procs.iter().zip(exits) {
            let info = rx.recv_timeout(Duration::from_secs(10)).expect("on_exit");
            assert_eq!(Some(info), p.exited());
        }
        assert_eq!(procs[3].exited().unwrap().code, 0);
        assert_eq!(procs[0].exited().unwrap().code, 137);
    });
}

/// THE promise: SIGKILL the sim, and every process it started dies too.
#[test]
fn nothing_outlives_a_sigkilled_sim() {
    sigkilled_sim("sigkill", false);
}

/// The same with the command switched to another user: the kernel clears
/// a parent-death signal on a credential change, and a process of another
/// user cannot be signalled by an unprivileged one, so this is where the
/// promise would quietly break.
#[test]
fn nothing_outlives_a_sigkilled_sim_with_switched_users() {
    if !need_root("nothing_outlives_a_sigkilled_sim_with_switched_users") {
        return;
    }
    sigkilled_sim("sigkill-user", true);
}

fn sigkilled_sim(name: &'static str, as_user: bool) {
    deadline(90, move || {
        let dir = root(name);
        // The runtime's reaper (process-wide) collects the killed child; a
        // `Child::wait` would race it, so the child is never waited for here.
        let _reaper = runtime("sigkill-parent");
        let _child_dir = TempRoot(dir.clone());
        #[allow(clippy::zombie_processes)]
        let mut child = std::process::Command::new(std::env::current_exe().unwrap())
            .arg("__runtime_child")
            .arg(&dir)
            .args(as_user.then_some("as-user"))
            .stdout(std::process::Stdio::piped())
            .spawn()
            .unwrap();
        let sim_pid = child.id() as i32;
        let stdout = child.stdout.take().unwrap();
        let (tx, rx) = crossbeam_channel::bounded(1);
        std::thread::spawn(move || {
            let mut line = String::new();
            let _ = BufReader::new(stdout).read_line(&mut line);
            let _ = tx.send(line);
        });
        let line = rx
            .recv_timeout(Duration::from_secs(30))
            .expect("READY line");
        let pids: Vec<i32> = line
            .strip_prefix("READY ")
            .unwrap_or_else(|| panic!("bad line {line:?}"))
            .split_whitespace()
            .map(|s| s.parse().unwrap())
            .collect();
        assert!(pids.len() >= 4, "shim, sh, two sleeps: {pids:?}");
        if as_user {
            // The shim keeps the sim's uid; the command and its children
            // run as the user.
            let me = rustix::process::geteuid().as_raw();
            assert_eq!(uids_of(pids[0]), Some(format!("{me} {me} {me} {me}")));
            let u = test_user().uid;
            for &pid in &pids[1..] {
                assert_eq!(uids_of(pid), Some(format!("{u} {u} {u} {u}")), "pid {pid}");
            }
        }
        let ids = identities(&pids);
        assert_eq!(alive(&ids).len(), pids.len());
        // SAFETY: kill on the pid of our own child, not yet waited for.
        unsafe { libc::kill(sim_pid, libc::SIGKILL) };
        all_gone(&ids);
        // The shim of the dead sim was a descendant as well.
        assert!(stat(pids[0]).is_none_or(|(_, _, s)| s == 'Z'));
    });
}

// ---------------------------------------------------------------------------
// Users.

#[test]
fn a_command_runs_as_its_user_with_its_groups() {
    if !need_root("a_command_runs_as_its_user_with_its_groups") {
        return;
    }
    deadline(60, || {
        let (rt, _dir) = runtime("user");
        let mut s = spec(
            &[
                "sh",
                "-c",
                "id -u; id -g; id -G; cat /proc/self/status | grep -i '^nonewprivs\\|^uid'",
            ],
            false,
        );
        s.user = Some(test_user());
        let p = rt.start(s).unwrap();
        let (out, err, _) = collect(p.take_output().unwrap());
        let out = String::from_utf8_lossy(&out);
        let lines: Vec<&str> = out.lines().collect();
        assert_eq!(
            lines[..3],
            ["264001", "264002", "264002 264003"],
            "{out}\n{}",
            String::from_utf8_lossy(&err)
        );
        assert!(
            out.contains("Uid:\t264001\t264001\t264001\t264001"),
            "{out}"
        );
        assert_eq!(p.exited().unwrap().code, 0);
    });
}

#[test]
fn a_tty_is_given_to_the_commands_user() {
    if !need_root("a_tty_is_given_to_the_commands_user") {
        return;
    }
    deadline(60, || {
        let (rt, _dir) = runtime("user-tty");
        let mut s = spec(
            &["sh", "-c", "stat -c 'owner=%u:%g mode=%a' \"$(tty)\""],
            false,
        );
        s.tty = true;
        s.user = Some(test_user());
        let p = rt.start(s).unwrap();
        let (_, _, tty) = collect(p.take_output().unwrap());
        let text = String::from_utf8_lossy(&tty);
        assert!(text.contains("owner=264001:264002 mode=620"), "{text:?}");
    });
}

#[test]
fn a_switched_user_cannot_signal_its_shim_or_the_sim() {
    if !need_root("a_switched_user_cannot_signal_its_shim_or_the_sim") {
        return;
    }
    deadline(60, || {
        let (rt, _dir) = runtime("user-kill");
        let me = std::process::id();
        // $PPID is the shim.
        let script = format!("kill -USR2 $PPID; a=$?; kill -0 {me}; b=$?; echo $a $b");
        let mut s = spec(&["sh", "-c", &script], false);
        s.user = Some(test_user());
        let p = rt.start(s).unwrap();
        let (out, _, _) = collect(p.take_output().unwrap());
        assert_eq!(String::from_utf8_lossy(&out), "1 1\n");
        // The shim did not act on a SIGUSR2 (which would kill the command):
        // the command's own exit is reported.
        assert_eq!(p.exited().unwrap().code, 0);
    });
}

// ---------------------------------------------------------------------------
// Pty.

#[test]
fn tty_carries_everything_and_resize_shows_in_stty() {
    deadline(60, || {
        let (rt, _dir) = runtime("tty");
        let mut s = spec(
            &[
                "sh",
                "-c",
                "echo to-err >&2; read a; stty size; read b; stty size; exit 4",
            ],
            false,
        );
        s.tty = true;
        s.stdin = true;
        let p = rt.start(s).unwrap();
        assert!(p.tty());
        let rx = p.take_output().unwrap();
        let mut acc = Vec::new();
        read_until(&rx, &mut acc, "to-err");
        p.resize(100, 40).unwrap();
        p.write_stdin(b"\n").unwrap();
        read_until(&rx, &mut acc, "40 100");
        p.resize(132, 50).unwrap();
        p.write_stdin(b"\n").unwrap();
        let mut rest = Vec::new();
        for c in rx {
            assert_eq!(c.stream, Stream::Tty);
            rest.extend(c.data);
        }
        acc.extend(rest);
        let text = String::from_utf8_lossy(&acc);
        assert!(text.contains("50 132"), "{text:?}");
        assert_eq!(p.exited().unwrap().code, 4);
    });
}

#[test]
fn tty_without_a_resize_has_a_default_size_and_is_a_terminal() {
    deadline(60, || {
        let (rt, _dir) = runtime("tty2");
        let mut s = spec(
            &["sh", "-c", "stty size; tty >/dev/null && echo is-tty"],
            false,
        );
        s.tty = true;
        let p = rt.start(s).unwrap();
        let (_, _, tty) = collect(p.take_output().unwrap());
        let text = String::from_utf8_lossy(&tty);
        assert!(
            text.contains("24 80") && text.contains("is-tty"),
            "{text:?}"
        );
        assert!(rt
            .start(spec(&["true"], false))
            .unwrap()
            .resize(1, 1)
            .is_err());
    });
}

#[test]
fn tty_stdin_close_sends_eof() {
    deadline(60, || {
        let (rt, _dir) = runtime("tty3");
        let mut s = spec(&["sh", "-c", "cat; echo done"], false);
        s.tty = true;
        s.stdin = true;
        let p = rt.start(s).unwrap();
        let rx = p.take_output().unwrap();
        p.write_stdin(b"abc\n").unwrap();
        let mut acc = Vec::new();
        read_until(&rx, &mut acc, "abc\r\nabc\r\n");
        p.close_stdin();
        let (_, _, rest) = collect(rx);
        assert!(String::from_utf8_lossy(&rest).contains("done"));
        assert_eq!(p.exited().unwrap().code, 0);
    });
}

// ---------------------------------------------------------------------------
// Container logs and subscribers.

#[test]
fn container_log_ring_and_two_subscribers() {
    deadline(60, || {
        let (rt, _dir) = runtime("logs");
        let mut s = spec(
            &[
                "sh",
                "-c",
                "echo first; read x; echo one; echo two >&2; read y; printf three",
            ],
            true,
        );
        s.stdin = true;
        let p = rt.start(s).unwrap();
        assert!(p.take_output().is_none());
        wait_for(Duration::from_secs(10), || {
            (!p.log_snapshot(&LogQuery::default()).is_empty()).then_some(())
        });
        let (before, a) = p.log_follow(&LogQuery::default());
        assert_eq!(before.len(), 1);
        assert_eq!(before[0].data, b"first\n");
        let b = p.subscribe();
        p.write_stdin(b"\n").unwrap();
        for rx in [&a, &b] {
            let mut got: Vec<(Stream, Vec<u8>)> = Vec::new();
            while got.len() < 2 {
                let c = rx.recv_timeout(Duration::from_secs(10)).expect("chunk");
                got.push((c.stream, c.data));
            }
            got.sort();
            assert_eq!(
                got,
                [
                    (Stream::Stdout, b"one\n".to_vec()),
                    (Stream::Stderr, b"two\n".to_vec())
                ]
            );
        }
        p.write_stdin(b"\n").unwrap();
        let info = exit_within(&p, 20);
        assert_eq!(info.code, 0);
        // Exit is reported only once the output is in the ring, and the
        // subscribers' channels end after it.
        for rx in [a, b] {
            let rest: Vec<u8> = rx.iter().flat_map(|c| c.data).collect();
            assert_eq!(rest, b"three");
        }
        let all = p.log_snapshot(&LogQuery::default());
        let texts: Vec<_> = all
            .iter()
            .map(|l| String::from_utf8_lossy(&l.data).into_owned())
            .collect();
        assert_eq!(texts.len(), 4, "{texts:?}");
        assert_eq!(texts[0], "first\n");
        assert_eq!(texts[3], "three");
        assert_eq!(p.log_snapshot(&LogQuery::tail(1))[0].data, b"three");
        assert!(p.subscribe().recv().is_err());
    });
}

#[test]
fn a_stalled_subscriber_never_blocks_the_container() {
    deadline(90, || {
        let (rt, _dir) = runtime("stall");
        let p = rt
            .start(spec(
                &["sh", "-c", "sleep 0.2; head -c 30000000 /dev/zero"],
                true,
            ))
            .unwrap();
        let stalled = p.subscribe();
        let info = exit_within(&p, 60);
        assert_eq!(info.code, 0);
        // The ring kept the newest 8 MiB.
        let kept: usize = p
            .log_snapshot(&LogQuery::default())
            .iter()
            .map(|l| l.data.len())
            .sum();
        assert!(
            kept <= kubegate::sim::runtime::LOG_RING_BYTES && kept > 7 << 20,
            "{kept}"
        );
        // The stalled subscriber was cut: its channel ends after what it held.
        let got: usize = stalled.iter().map(|c| c.data.len()).sum();
        assert!(got < 30_000_000, "{got}");
    });
}

// ---------------------------------------------------------------------------
// Figures (printed, never asserted).

#[test]
fn spawn_latency_figures() {
    deadline(120, || {
        let (rt, _dir) = runtime("latency");
        let mut times = Vec::new();
        for _ in 0..100 {
            let t = Instant::now();
            let p = rt.start(spec(&["true"], false)).unwrap();
            let started = t.elapsed();
            let _ = collect(p.take_output().unwrap());
            times.push((started, t.elapsed()));
        }
        times.sort();
        let start_med = times[50].0;
        let mut ends: Vec<_> = times.iter().map(|t| t.1).collect();
        ends.sort();
        eprintln!(
            "spawn: start() median {:?} p90 {:?}; start-to-exit-collected median {:?} p90 {:?}",
            start_med, times[90].0, ends[50], ends[90]
        );
        if kubegate::sim::runtime::can_switch_users() {
            // The same with the command switched to a pod user (three more
            // system calls and a prctl in the shim's fork).
            let mut as_user: Vec<Duration> = (0..100)
                .map(|_| {
                    let t = Instant::now();
                    let mut s = spec(&["true"], false);
                    s.user = Some(test_user());
                    let p = rt.start(s).unwrap();
                    let _ = collect(p.take_output().unwrap());
                    assert_eq!(p.exited().unwrap().code, 0);
                    t.elapsed()
                })
                .collect();
            as_user.sort();
            eprintln!(
                "spawn as a pod user: start-to-exit-collected median {:?} p90 {:?}",
                as_user[50], as_user[90]
            );
        }
        let t = Instant::now();
        let n = 200;
        let handles: Vec<_> = (0..8)
            .map(|_| {
                let rt = rt.clone();
                std::thread::spawn(move || {
                    for _ in 0..n / 8 {
                        let p = rt.start(spec(&["true"], false)).unwrap();
                        let _ = collect(p.take_output().unwrap());
                    }
                })
            })
            .collect();
        for h in handles {
            h.join().unwrap();
        }
        eprintln!(
            "spawn: {n} `true` execs from 8 threads: {:.0}/s",
            n as f64 / t.elapsed().as_secs_f64()
        );

        // Raw exec output throughput (consumer discards).
        let total: u64 = 256 << 20;
        let t = Instant::now();
        let p = rt
            .start(spec(
                &["head", "-c", &total.to_string(), "/dev/zero"],
                false,
            ))
            .unwrap();
        let got: u64 = p
            .take_output()
            .unwrap()
            .iter()
            .map(|c| c.data.len() as u64)
            .sum();
        assert_eq!(got, total);
        eprintln!(
            "exec output: 256 MiB in {:.2} s = {:.0} MiB/s",
            t.elapsed().as_secs_f64(),
            256.0 / t.elapsed().as_secs_f64()
        );

        // Many idle containers (no pipes, no reader thread each).
        let n = 300;
        let t = Instant::now();
        let idle: Vec<_> = (0..n).map(|_| rt.start(spec(&[], true)).unwrap()).collect();
        let started = t.elapsed();
        let t = Instant::now();
        assert_eq!(rt.kill_all(Duration::from_secs(10)), 0);
        assert!(idle.iter().all(|p| p.exited().is_some_and(|e| e.code == 0)));
        eprintln!(
            "idle containers: {n} started in {:?} ({:.0}/s), all terminated and reaped in {:?}",
            started,
            n as f64 / started.as_secs_f64(),
            t.elapsed()
        );
    });
}

// ---------------------------------------------------------------------------
// podspec + runtime: a pod written for a real cluster runs unmodified.

#[test]
fn a_planned_pod_runs_with_its_volumes_mapped() {
    use kubegate::sim::podspec::volumes::materialize_volumes;
    use kubegate::sim::podspec::{plan_container, PlanContext};
    use std::collections::BTreeMap;
    deadline(60, || {
        let (rt, _dir) = runtime("podspec");
        let pod_dir = rt.root().join("pod");
        std::fs::create_dir_all(&pod_dir).unwrap();
        let pod = serde_json::json!({
            "metadata": {"name": "web-1", "namespace": "dev", "uid": "u1"},
            "spec": {
                "volumes": [
                    {"name": "work", "emptyDir": {}},
                    {"name": "cfg", "configMap": {"name": "app"}}
                ],
                "containers": [{
                    "name": "app",
                    "command": ["sh", "-c"],
                    "args": ["cat /etc/app/greeting; echo $(POD) > /work/name; pwd; echo $HOME"],
                    "workingDir": "/work",
                    "env": [{"name": "POD", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}}],
                    "volumeMounts": [
                        {"name": "work", "mountPath": "/work"},
                        {"name": "cfg", "mountPath": "/etc/app", "readOnly": true}
                    ]
                }]
            }
        });
        let lookup = |kind: &str, name: &str| -> Option<BTreeMap<String, Vec<u8>>> {
            (kind == "ConfigMap" && name == "app")
                .then(|| BTreeMap::from([("greeting".to_string(), b"hello\n".to_vec())]))
        };
        materialize_volumes(&pod, &pod_dir, &lookup).unwrap();
        let ctx = PlanContext {
            pod_ip: "127.0.1.2".into(),
            host_ip: "127.0.0.1".into(),
            node_name: "sim-node".into(),
            pod_dir: pod_dir.clone(),
            self_exe: std::env::current_exe().unwrap(),
            lookup: &lookup,
            pod_id: None,
            sim_uid: 0,
        };
        let spec = plan_container(&pod, &pod["spec"]["containers"][0], &ctx).unwrap();
        let p = rt.start(spec).unwrap();
        assert_eq!(exit_within(&p, 20).code, 0);
        let out: String = p
            .log_snapshot(&LogQuery::default())
            .iter()
            .map(|l| String::from_utf8_lossy(&l.data).into_owned())
            .collect();
        let work = pod_dir.join("volumes/work");
        assert_eq!(
            out,
            format!("hello\n{}\n{}\n", work.display(), pod_dir.display())
        );
        assert_eq!(
            std::fs::read_to_string(work.join("name")).unwrap(),
            "web-1\n"
        );
    });
}

#[test]
fn a_tty_exec_whose_consumer_left_is_not_blocked() {
    deadline(60, || {
        let (rt, _dir) = runtime("ttydrop");
        let mut s = spec(
            &["sh", "-c", "head -c 5000000 /dev/zero | od; echo end"],
            false,
        );
        s.tty = true;
        let p = rt.start(s).unwrap();
        drop(p.take_output());
        assert_eq!(exit_within(&p, 30).code, 0);
    });
}
