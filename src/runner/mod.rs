//! `kubegate app-runner -- CMD…` (docs/sessions.md#a-sessions-pod, docs/runner.md):
//! runs a program in the workspace, restarts it when workspace files
//! change, and serves the session's debug stream (server-sent events on
//! `GET /events`) with `Runner.RunStarted`/`Runner.RunEnded`, the program's
//! output lines, and `Kernel.PortsResolved` from the workspace's
//! `kubegate.toml`.
//!
//! Pieces: `args` (the command line, pure), `error` ([`RunnerError`]: the
//! runner's own failures, their codes and exit codes), `ignore` (the
//! `.kubegateignore` matcher and the fixed exclusions, sans-IO),
//! `debounce` (when a restart is due, sans-IO), `manifest` (the app's
//! ports, sans-IO), `frames` (the wire format, sans-IO), `hub` (fan-out to
//! subscribers with replay; the `/events` route), `watch` (inotify or
//! polling on the `runner-watch` thread), `process` (spawn in a new
//! process group with the terminal's foreground, group signals, reaping),
//! `install` (`kubegate install-self DEST`).
//! The supervisor below is the main thread: it owns the program's state
//! and acts on one bounded input channel (changes, signals, exits, output
//! ends), waiting on it with a deadline (debounce, grace, output drain).
//!
//! Threads: main (the supervisor), `runner-watch`, `runner-signals`
//! (signal-hook's iterator; reaps on SIGCHLD), `runner-stdout` and
//! `runner-stderr` per run without a terminal (pass the program's output
//! through and publish its lines), and the inspect server's `runner-listen`
//! and `runner-conn` (one per subscriber).

mod args;
pub mod debounce;
mod error;
pub mod frames;
pub mod hub;
pub mod ignore;
pub mod install;
pub mod manifest;
mod process;
pub mod watch;

pub use error::RunnerError;

use crate::exit::{self, codes, Parsed};
use crate::http::{Server, ServerConfig};
use crate::session::spec::Port;
use args::{InspectAddr, RunnerArgs};
use crossbeam_channel::{bounded, Receiver, RecvTimeoutError, Sender};
use debounce::Debounce;
use hub::{Hub, HubLimits, Inspect, Kind};
use manifest::{ManifestError, PortsTracker, MANIFEST, MAX_MANIFEST_BYTES};
use process::{Exit, SpawnLock};
use std::io::{Read, Write};
use std::net::{SocketAddr, ToSocketAddrs};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime};

/// After the program's leader exits, how long its output may take to reach
/// its end before `RunEnded` is reported anyway (a process that left the
/// group may hold the pipes open).
const OUTPUT_DRAIN: Duration = Duration::from_millis(500);
/// How often a stop checks whether the group is empty once the leader is
/// gone.
const GROUP_POLL: Duration = Duration::from_millis(20);
/// After SIGKILL, how long before the stop is considered done anyway.
const KILL_SETTLE: Duration = Duration::from_secs(1);
/// How long the streams get to send the last frames at exit.
const CLOSE_WAIT: Duration = Duration::from_millis(500);
/// The variable the program gets with its generation.
pub const ENV_GENERATION: &str = "KUBEGATE_GENERATION";

/// `kubegate app-runner …`: the exit code (the program's, 128+N when it
/// or the runner was ended by signal N; 2 for usage and configuration
/// errors; 1 for other failures of the runner).
pub fn app_runner_main(argv: &[String]) -> i32 {
    let a = match args::parse(argv, &|k| std::env::var(k).ok()) {
        Ok(Parsed::Help) => {
            print!("{}", args::HELP);
            return exit::SUCCESS;
        }
        Ok(Parsed::Run(a)) => a,
        Err(e) => {
            eprintln!("kubegate: {e}\n{}", args::SYNOPSIS);
            return exit::USAGE;
        }
    };
    match run(a) {
        Ok(code) => code,
        Err(e) => {
            eprintln!("kubegate: {e}");
            e.exit_code()
        }
    }
}

fn config_err(m: impl Into<String>) -> RunnerError {
    RunnerError::config(m)
}

/// The workspace root: absolute, an existing readable folder.
fn workspace_root(root: Option<&Path>) -> Result<PathBuf, RunnerError> {
    let given = match root {
        Some(r) => r.to_path_buf(),
        None => {
            std::env::current_dir().map_err(|e| config_err(format!("the current folder: {e}")))?
        }
    };
    let what = |e: std::io::Error| config_err(format!("workspace root {}: {e}", given.display()));
    let abs = given.canonicalize().map_err(what)?;
    if !abs.is_dir() {
        return Err(config_err(format!(
            "workspace root {}: not a folder",
            given.display()
        )));
    }
    std::fs::read_dir(&abs).map_err(what)?;
    Ok(abs)
}

fn resolve(addr: &InspectAddr) -> Result<SocketAddr, RunnerError> {
    match addr {
        InspectAddr::Ip(a) => Ok(*a),
        InspectAddr::Name(host, port) => (host.as_str(), *port)
            .to_socket_addrs()
            .ok()
            .and_then(|mut it| it.next())
            .ok_or_else(|| {
                RunnerError::usage(format!(
                    "inspect address {host}:{port}: the name does not resolve"
                ))
            }),
    }
}

/// Everything the supervisor needs to know about the program.
struct Program {
    command: Vec<String>,
    root: PathBuf,
    app: Option<String>,
    grace: Duration,
    /// stdin is a terminal: the program keeps it (and stdout/stderr); no
    /// log frames. Its settings at start, restored before every later run
    /// and at exit.
    tty: Option<process::TtySettings>,
}

fn run(a: RunnerArgs) -> Result<i32, RunnerError> {
    // Before any thread starts, so all inherit it (process.rs).
    process::block_sigttou();
    let root = workspace_root(a.root.as_deref())?;
    let hub = Hub::new(HubLimits::default());
    let server = match &a.inspect {
        None => None,
        Some(addr) => {
            let addr = resolve(addr)?;
            let cfg = ServerConfig {
                max_connections: 64,
                max_body_bytes: 0,
                write_timeout: Duration::from_secs(10),
                name: "runner",
                ..ServerConfig::default()
            };
            let handler = Arc::new(Inspect { hub: hub.clone() });
            let s = Server::bind(addr, cfg, handler)
                .map_err(|e| config_err(format!("inspect address {addr}: cannot listen: {e}")))?;
            log::info!("debug stream on http://{}/events", s.local_addr());
            Some(s)
        }
    };
    let mut signals = signal_hook::iterator::Signals::new([
        signal_hook::consts::SIGTERM,
        signal_hook::consts::SIGINT,
        signal_hook::consts::SIGHUP,
        signal_hook::consts::SIGCHLD,
    ])
    .map_err(|e| RunnerError::new(codes::INTERNAL, format!("installing signal handlers: {e}")))?;
    process::become_subreaper();
    let (tx, rx) = bounded::<Input>(256);
    let watch_tx = tx.clone();
    let watcher = watch::start(&root, a.watch, a.poll, move |c| {
        let _ = watch_tx.send(Input::Changed(c));
    })
    .map_err(|e| config_err(format!("watching {}: {e}", root.display())))?;
    let lock = SpawnLock::default();
    {
        let tx = tx.clone();
        let lock = lock.clone();
        std::thread::Builder::new()
            .name("runner-signals".into())
            .spawn(move || {
                for sig in signals.forever() {
                    if sig == signal_hook::consts::SIGCHLD {
                        // Collected under the spawn lock, sent after it.
                        for (pid, how) in process::reap(&lock) {
                            let _ = tx.send(Input::Reaped(pid, how));
                        }
                    } else if tx.send(Input::Signal(sig)).is_err() {
                        return;
                    }
                }
            })
            .map_err(|e| RunnerError::new(codes::INTERNAL, format!("starting a thread: {e}")))?;
    }
    let tty = if process::stdin_is_tty() {
        process::TtySettings::save()
    } else {
        None
    };
    let mut sup = Supervisor::new(
        Program {
            command: a.command,
            root,
            app: a.app,
            grace: a.grace,
            tty,
        },
        hub.clone(),
        tx,
        lock,
        a.debounce,
    );
    sup.announce_initial_ports();
    let code = sup.run(&rx);
    if let Some(t) = &sup.program.tty {
        t.restore();
    }
    // Senders blocked on a full inbox fail now instead of waiting forever
    // (the watcher is joined next).
    drop(rx);
    drop(watcher);
    if !hub.close_and_wait(CLOSE_WAIT) {
        log::debug!("a debug stream was still sending at exit");
    }
    if let Some(s) = server {
        s.shutdown();
    }
    let _ = std::io::stdout().flush();
    let _ = std::io::stderr().flush();
    Ok(code)
}

/// What the supervisor waits on.
enum Input {
    Changed(watch::Change),
    Signal(i32),
    Reaped(i32, Exit),
    /// One output pipe of that generation reached its end.
    OutputDone(u64),
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Then {
    Restart,
    Exit,
}

#[derive(Debug)]
struct Stopping {
    /// SIGKILL when the group is not gone by then.
    kill_at: Instant,
    killed_at: Option<Instant>,
    then: Then,
}

#[derive(Debug)]
struct Run {
    generation: u64,
    /// Also the process group.
    pid: i32,
    exit: Option<(Exit, Instant)>,
    outputs_open: u8,
    /// `RunEnded` published.
    reported: bool,
    stop: Option<Stopping>,
}

#[derive(Debug, Clone, Copy)]
struct Shutdown {
    sig: i32,
    /// The program was running when the signal came: exit with its status.
    program_running: bool,
}

struct Supervisor {
    program: Program,
    hub: Arc<Hub>,
    tx: Sender<Input>,
    lock: SpawnLock,
    generation: u64,
    run: Option<Run>,
    debounce: Debounce,
    ports: PortsTracker,
    manifest_error: Option<ManifestError>,
    shutdown: Option<Shutdown>,
}

fn now_ts() -> String {
    frames::timestamp(SystemTime::now())
}

impl Supervisor {
    fn new(
        program: Program,
        hub: Arc<Hub>,
        tx: Sender<Input>,
        lock: SpawnLock,
        quiet: Duration,
    ) -> Supervisor {
        Supervisor {
            program,
            hub,
            tx,
            lock,
            generation: 0,
            run: None,
            debounce: Debounce::new(quiet),
            ports: PortsTracker::default(),
            manifest_error: None,
            shutdown: None,
        }
    }

    /// The main loop: starts generation 1, then acts on inputs and
    /// deadlines until the runner is told to stop; the exit code.
    fn run(&mut self, rx: &Receiver<Input>) -> i32 {
        self.start_next();
        loop {
            let now = Instant::now();
            if let Some(code) = self.progress(now) {
                return code;
            }
            let got = match self.next_deadline(now) {
                Some(d) => rx.recv_deadline(d),
                None => rx.recv().map_err(|_| RecvTimeoutError::Disconnected),
            };
            match got {
                Ok(input) => self.handle(input, Instant::now()),
                Err(RecvTimeoutError::Timeout) => {}
                // We hold a sender ourselves: cannot happen.
                Err(RecvTimeoutError::Disconnected) => return 1,
            }
        }
    }

    fn handle(&mut self, input: Input, now: Instant) {
        match input {
            Input::Changed(c) => {
                if c.restart {
                    log::info!("changed: {}", c.paths.join(", "));
                }
                self.debounce.change(now, c.restart, c.manifest);
            }
            Input::Signal(sig) => self.on_signal(sig, now),
            Input::Reaped(pid, how) => {
                if let Some(run) = self.run.as_mut() {
                    if run.pid == pid && run.exit.is_none() {
                        log::info!("generation {} ended ({})", run.generation, describe(how));
                        run.exit = Some((how, now));
                    }
                }
            }
            Input::OutputDone(generation) => {
                if let Some(run) = self.run.as_mut() {
                    if run.generation == generation {
                        run.outputs_open = run.outputs_open.saturating_sub(1);
                    }
                }
            }
        }
    }

    /// Acts on what is due at `now`; the exit code once the runner is done.
    fn progress(&mut self, now: Instant) -> Option<i32> {
        if let Some(due) = self.debounce.poll(now) {
            if due.manifest {
                self.check_manifest();
            }
            if due.restart && self.shutdown.is_none() {
                self.restart_due(now);
            }
        }
        let Some(run) = self.run.as_mut() else {
            return self.shutdown.map(|s| 128 + s.sig);
        };
        if let Some((how, at)) = run.exit {
            if !run.reported && (run.outputs_open == 0 || now >= at + OUTPUT_DRAIN) {
                run.reported = true;
                let ended = frames::Ended {
                    exit_code: how.code(),
                    signal: how.signal(),
                    error: None,
                };
                let frame = frames::run_ended(&now_ts(), run.generation, &ended);
                self.hub.publish(Kind::RunEnded, frame);
            }
        }
        let stop = run.stop.as_mut()?;
        if stop.killed_at.is_none() && now >= stop.kill_at {
            if process::kill_group(run.pid, libc::SIGKILL) {
                log::info!(
                    "generation {} still running after the grace period: SIGKILL",
                    run.generation
                );
            }
            stop.killed_at = Some(now);
        }
        let settled = stop.killed_at.is_some_and(|k| now >= k + KILL_SETTLE);
        if settled && run.exit.is_none() {
            // Not reaped a second after SIGKILL (uninterruptible sleep):
            // report it killed and go on.
            log::warn!("generation {} did not end after SIGKILL", run.generation);
            run.exit = Some((Exit::Signal(libc::SIGKILL), now));
            run.outputs_open = 0;
            return None; // reported on the next pass
        }
        if !run.reported || (process::group_alive(run.pid) && !settled) {
            return None;
        }
        let then = stop.then;
        let exit = run.exit.map(|(how, _)| how);
        self.run = None;
        match then {
            Then::Restart => {
                self.start_next();
                None
            }
            Then::Exit => {
                let s = self.shutdown?;
                Some(match exit {
                    Some(how) if s.program_running => how.code(),
                    _ => 128 + s.sig,
                })
            }
        }
    }

    fn next_deadline(&self, now: Instant) -> Option<Instant> {
        let mut d = self.debounce.deadline();
        let mut at = |t: Instant| d = Some(d.map_or(t, |x| x.min(t)));
        if let Some(run) = &self.run {
            if let (Some((_, exited)), false) = (run.exit, run.reported) {
                at(exited + OUTPUT_DRAIN);
            }
            if let Some(stop) = &run.stop {
                match stop.killed_at {
                    None => at(stop.kill_at),
                    Some(k) => at(k + KILL_SETTLE),
                }
                if run.reported {
                    // Waiting for the rest of the group to go.
                    at(now + GROUP_POLL);
                }
            }
        }
        d
    }

    fn restart_due(&mut self, now: Instant) {
        match &self.run {
            None => self.start_next(),
            // A stop under way: the next run starts after it anyway.
            Some(run) if run.stop.is_some() => {}
            Some(_) => self.begin_stop(libc::SIGTERM, Then::Restart, now),
        }
    }

    fn begin_stop(&mut self, sig: i32, then: Then, now: Instant) {
        let grace = self.program.grace;
        if let Some(run) = self.run.as_mut() {
            process::signal_group(run.pid, sig);
            run.stop = Some(Stopping {
                kill_at: now + grace,
                killed_at: None,
                then,
            });
        }
    }

    fn on_signal(&mut self, sig: i32, now: Instant) {
        if self.shutdown.is_some() {
            // Asked again: no more grace.
            if let Some(run) = self.run.as_mut() {
                process::kill_group(run.pid, libc::SIGKILL);
                if let Some(stop) = run.stop.as_mut() {
                    stop.killed_at.get_or_insert(now);
                }
            }
            return;
        }
        let program_running = self.run.as_ref().is_some_and(|r| r.exit.is_none());
        self.shutdown = Some(Shutdown {
            sig,
            program_running,
        });
        log::info!("{}: stopping", frames::signal_name(sig));
        let Some(run) = self.run.as_mut() else {
            return;
        };
        match run.stop.as_mut() {
            Some(stop) => {
                stop.then = Then::Exit;
                process::signal_group(run.pid, sig);
            }
            None => self.begin_stop(sig, Then::Exit, now),
        }
    }

    /// Starts the next generation (or reports why it could not start).
    fn start_next(&mut self) {
        self.generation += 1;
        let generation = self.generation;
        self.debounce.run_started();
        let env = [(ENV_GENERATION.to_string(), generation.to_string())];
        let p = &self.program;
        if let (Some(t), true) = (&p.tty, generation > 1) {
            t.restore();
        }
        match process::spawn(
            &self.lock,
            &p.command,
            &p.root,
            &env,
            &[args::ENV_INSPECT],
            p.tty.is_some(),
            p.tty.is_none(),
        ) {
            Ok(sp) => {
                log::info!("generation {generation} started (pid {})", sp.pid);
                self.hub
                    .publish(Kind::RunStarted, frames::run_started(&now_ts(), generation));
                let mut open = 0;
                if let Some(o) = sp.stdout {
                    open += u8::from(self.pass_through(generation, "stdout", o));
                }
                if let Some(e) = sp.stderr {
                    open += u8::from(self.pass_through(generation, "stderr", e));
                }
                self.run = Some(Run {
                    generation,
                    pid: sp.pid,
                    exit: None,
                    outputs_open: open,
                    reported: false,
                    stop: None,
                });
            }
            Err(e) => {
                let code = if e.kind() == std::io::ErrorKind::NotFound {
                    127
                } else {
                    126
                };
                eprintln!(
                    "kubegate app-runner: cannot start {:?}: {e}; waiting for a change",
                    p.command[0]
                );
                let ts = now_ts();
                self.hub
                    .publish(Kind::RunStarted, frames::run_started(&ts, generation));
                let ended = frames::Ended {
                    exit_code: code,
                    signal: None,
                    error: Some(e.to_string()),
                };
                self.hub
                    .publish(Kind::RunEnded, frames::run_ended(&ts, generation, &ended));
                self.run = None;
            }
        }
    }

    /// Starts the thread copying one output pipe; false when it could not.
    fn pass_through(
        &self,
        generation: u64,
        stream: &'static str,
        pipe: impl Read + Send + 'static,
    ) -> bool {
        let hub = self.hub.clone();
        let tx = self.tx.clone();
        let spawned = std::thread::Builder::new()
            .name(format!("runner-{stream}"))
            .spawn(move || {
                copy_output(pipe, stream, &hub);
                let _ = tx.send(Input::OutputDone(generation));
            });
        match spawned {
            Ok(_) => true,
            Err(e) => {
                log::error!("starting the {stream} thread: {e}");
                false
            }
        }
    }

    fn read_manifest(&self, app: &str) -> Result<Option<Vec<Port>>, ManifestError> {
        let path = self.program.root.join(MANIFEST);
        let f = match std::fs::File::open(&path) {
            Ok(f) => f,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
            Err(e) => return Err(ManifestError::Read(e.to_string())),
        };
        let mut text = String::new();
        f.take(MAX_MANIFEST_BYTES + 1)
            .read_to_string(&mut text)
            .map_err(|e| ManifestError::Read(e.to_string()))?;
        if text.len() as u64 > MAX_MANIFEST_BYTES {
            return Err(ManifestError::Read(format!(
                "larger than {MAX_MANIFEST_BYTES} bytes"
            )));
        }
        manifest::app_ports(&text, app)
    }

    fn note_manifest_error(&mut self, read: &Result<Option<Vec<Port>>, ManifestError>) {
        match read {
            Err(e) if self.manifest_error.as_ref() != Some(e) => {
                log::warn!("{MANIFEST}: {e}; ports unchanged");
                self.manifest_error = Some(e.clone());
            }
            Err(_) => {}
            Ok(_) => self.manifest_error = None,
        }
    }

    /// At start: the app's declared ports, when it declares some.
    fn announce_initial_ports(&mut self) {
        let Some(app) = self.program.app.clone() else {
            return;
        };
        let read = self.read_manifest(&app);
        self.note_manifest_error(&read);
        let (tracker, first) = PortsTracker::start(&read);
        self.ports = tracker;
        if let Some(ports) = first {
            self.hub
                .publish(Kind::Ports, frames::ports_resolved(&now_ts(), &ports));
        }
    }

    /// `kubegate.toml` changed: announce the app's ports if they did.
    fn check_manifest(&mut self) {
        let Some(app) = self.program.app.clone() else {
            return;
        };
        let read = self.read_manifest(&app);
        self.note_manifest_error(&read);
        if let Some(ports) = self.ports.update(&read) {
            log::info!(
                "ports of {app}: {}",
                ports.iter().map(|p| p.key()).collect::<Vec<_>>().join(", ")
            );
            self.hub
                .publish(Kind::Ports, frames::ports_resolved(&now_ts(), &ports));
        }
    }
}

fn describe(how: Exit) -> String {
    match how {
        Exit::Code(c) => format!("exit code {c}"),
        Exit::Signal(s) => frames::signal_name(s),
    }
}

/// Copies one of the program's pipes to the runner's own stdout or stderr,
/// unchanged and flushed as it comes, and publishes its lines. A failing
/// write (our reader gone) stops the copy but not the reading, so the
/// program never blocks on a full pipe.
fn copy_output(mut pipe: impl Read, stream: &'static str, hub: &Hub) {
    let mut buf = vec![0u8; 64 * 1024];
    let mut split = frames::LineSplitter::new(frames::MAX_LINE_BYTES);
    let mut broken = false;
    loop {
        let n = match pipe.read(&mut buf) {
            Ok(0) => break,
            Ok(n) => n,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
            Err(e) => {
                log::warn!("reading the program's {stream}: {e}");
                break;
            }
        };
        if !broken {
            let r = if stream == "stderr" {
                let mut o = std::io::stderr().lock();
                o.write_all(&buf[..n]).and_then(|()| o.flush())
            } else {
                let mut o = std::io::stdout().lock();
                o.write_all(&buf[..n]).and_then(|()| o.flush())
            };
            if let Err(e) = r {
                broken = true;
                log::warn!("writing the program's {stream} through: {e}");
            }
        }
        let lines = split.push(&buf[..n]);
        if !lines.is_empty() {
            let ts = now_ts();
            for line in lines {
                hub.publish(Kind::Live, frames::log_line(&ts, stream, &line));
            }
        }
    }
    if let Some(line) = split.finish() {
        hub.publish(Kind::Live, frames::log_line(&now_ts(), stream, &line));
    }
}
