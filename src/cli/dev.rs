//! `kubegate dev [DIR]`: a project folder run as a watch session, from a
//! terminal (issue 6; decisions in docs/dev.md).
//!
//! Before anything is sent: `DIR/kubegate.toml` is read and checked
//! (`project`: the app runner's manifest parser, the daemon's validation),
//! the folder is watched (`runner::watch`, so nothing changed during the
//! upload is missed) and read into the bundle within the bundle limits.
//! Then `POST /v1/sessions`, and these threads:
//!
//! ```text
//!  kubegate-dev-events: the session's event stream ──┐
//!  kubegate-dev-io (1 per app, from `running`) ──────┤ output, gaps
//!  kubegate-dev-sync: sync outcomes ─────────────────┼──> main (bounded 256):
//!  kubegate-dev-signals: SIGINT/TERM/HUP ────────────┘    prints everything,
//!                                                         decides the stop
//!  kubegate-dev-stdin ──> the chosen app's io thread (bounded 16)
//!  kubegate-dev-watch (runner::watch) ──> kubegate-dev-sync (bounded 16, try_send)
//! ```
//!
//! The main thread is the only writer of our stdout and stderr, so lines
//! of different apps and kubegate's own notes never mix. Output lines are
//! prefixed with the app's name (`output`). The terminal is left as it is
//! (cooked): typed lines go to one app, Ctrl-C is ours.
//!
//! Ctrl-C: a one-second window in which a second Ctrl-C suspends the
//! session instead, then `DELETE`, then exit 0 once the event stream says
//! `stopped`. SIGTERM stops at once; SIGHUP (the terminal is gone)
//! suspends.

mod output;
mod project;
mod sync;

use super::args::DevArgs;
use super::events::{self, SessionEvent};
use super::io_socket::{self, Closed, Frame, IoSocket};
use super::net::Client;
use super::{local_io, term, CliError};
use crate::exit::codes;
use crate::runner::watch::{self, WatchMode};
use crate::session::spec::{BundleLimits, Io};
use crossbeam_channel::{bounded, never, select, Receiver, RecvTimeoutError, Sender};
use output::{Lines, Prefixes};
use project::Project;
use serde_json::Value;
use signal_hook::consts::{SIGHUP, SIGINT, SIGTERM};
use std::collections::VecDeque;
use std::io::{self, Read, Write};
use std::os::fd::AsFd;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};
use sync::{Outcome, SyncMsg};
use tungstenite::Message;

/// After a first Ctrl-C, how long a second one suspends instead.
pub const SUSPEND_WINDOW: Duration = Duration::from_secs(1);
/// How long the stop may take to show as `stopped` on the event stream.
const STOP_WAIT: Duration = Duration::from_secs(30);
/// How long a suspend (a checkpoint of the workspace) may take.
const SUSPEND_WAIT: Duration = Duration::from_secs(120);
/// How long pending file changes get to reach the workspace before a
/// suspend.
const FLUSH_WAIT: Duration = Duration::from_secs(10);
const MAIN_CAPACITY: usize = 256;
const INPUT_CAPACITY: usize = 16;
/// An io socket that cannot be (re)opened this many times in a row gives up.
const IO_MAX_FAILURES: u32 = 10;
const IO_BACKOFF_FIRST: Duration = Duration::from_millis(250);
const IO_BACKOFF_MAX: Duration = Duration::from_secs(5);
/// Polling interval of the folder when inotify is not available.
const POLL_EVERY: Duration = Duration::from_millis(250);

/// What the other threads tell the main thread.
enum Msg {
    Event(SessionEvent),
    /// The event stream ended (after a terminal status) or was lost.
    EventsEnded(Result<(), CliError>),
    Output {
        app: usize,
        stream: u8,
        data: Vec<u8>,
    },
    Gap {
        app: usize,
        from: u32,
        to: u32,
    },
    /// An app's io socket ended for good (the session ended: `Ok`).
    IoEnded(usize, Result<(), CliError>),
    Sync(Outcome),
    Signal(i32),
}

/// Where the session is, as far as we drive it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Phase {
    Live,
    /// After a first Ctrl-C: a second one before this suspends.
    Window(Instant),
    /// DELETE sent; `stopped` expected before this.
    Stopping(Instant),
    /// Suspend asked; `suspended` expected before this.
    Suspending(Instant),
}

pub fn run(a: &DevArgs) -> Result<i32, CliError> {
    let project = Project::load(&a.dir)?;
    let stdin_app = project.stdin_app(a.stdin.as_deref())?;
    let client = Arc::new(Client::new(&a.common)?);
    let limits = BundleLimits::default();

    // Watching starts before the folder is read: a change made while the
    // bundle is read or uploaded is synced once the session runs.
    let (sync_tx, sync_rx) = sync::inbox();
    let watcher = {
        let tx = sync_tx.clone();
        watch::start_named(
            "kubegate-dev-watch",
            &project.dir,
            WatchMode::Auto,
            POLL_EVERY,
            move |_| {
                let _ = tx.try_send(SyncMsg::Changed);
            },
        )
        .map_err(|e| local_io(&format!("watching {}", project.dir.display()), e))?
    };
    let (files, picture) = project.bundle(&limits)?;
    let nfiles = files.len();
    let body = serde_json::to_vec(&project.start_request(files))
        .map_err(|e| local_io("encoding the start request", e))?;

    // Caught before the session exists: a Ctrl-C during the upload waits
    // in the iterator and stops the session as soon as it has an id.
    let signals = signal_hook::iterator::Signals::new([SIGINT, SIGTERM, SIGHUP])
        .map_err(|e| local_io("installing signal handlers", e))?;
    let created = client.call("POST", "/v1/sessions", Some(&body))?;
    drop(body);
    let created: Value = serde_json::from_slice(&created).map_err(|e| {
        CliError::new(
            codes::PROTOCOL,
            format!("the daemon's answer to the start does not decode: {e}"),
        )
    })?;
    let id = created["sessionId"]
        .as_str()
        .filter(|s| !s.is_empty())
        .ok_or_else(|| CliError::new(codes::PROTOCOL, "the daemon's answer has no sessionId"))?
        .to_string();

    let names = project.names();
    let colour = output::use_colour(
        rustix::termios::isatty(io::stdout().as_fd()),
        std::env::var("NO_COLOR").ok().as_deref(),
        std::env::var("TERM").ok().as_deref(),
    );
    let ui = Ui::new(&names, colour);
    ui.note(&format!(
        "session {id} starting: {} from {} ({nfiles} files); Ctrl-C stops it",
        names.join(", "),
        project.dir.display()
    ));
    ui.note(&format!(
        "typed lines go to {}; `kubegate attach {id} APP` gives an app a whole terminal",
        names[stdin_app]
    ));

    let (tx, rx) = bounded::<Msg>(MAIN_CAPACITY);
    spawn("kubegate-dev-signals", {
        let tx = tx.clone();
        let mut signals = signals;
        move || {
            for sig in signals.forever() {
                if tx.send(Msg::Signal(sig)).is_err() {
                    return;
                }
            }
        }
    })?;
    spawn("kubegate-dev-events", {
        let (tx, client, id) = (tx.clone(), client.clone(), id.clone());
        move || {
            let r = events::follow(&client, &id, |ev| tx.send(Msg::Event(ev)).is_ok());
            let _ = tx.send(Msg::EventsEnded(r));
        }
    })?;
    let running = Arc::new(AtomicBool::new(false));
    sync::spawn(
        sync_rx,
        running.clone(),
        sync::Target {
            client: client.clone(),
            session: id.clone(),
            dir: project.dir.clone(),
            picture,
            limits,
        },
        {
            let tx = tx.clone();
            move |o| {
                let _ = tx.send(Msg::Sync(o));
            }
        },
    )
    .map_err(|e| local_io("spawning the sync thread", e))?;
    let (input_tx, input_rx) = bounded::<Vec<u8>>(INPUT_CAPACITY);
    spawn("kubegate-dev-stdin", move || read_stdin(&input_tx))?;

    let mut dev = Dev {
        client,
        id,
        names,
        ios: (0..project.apps.len()).map(|i| project.io(i)).collect(),
        stdin_app,
        input: Some(input_rx),
        tx,
        rx,
        held: VecDeque::new(),
        ui,
        sync_tx,
        running,
        phase: Phase::Live,
        io_started: false,
        last_progress: String::new(),
    };
    let code = dev.main_loop();
    dev.ui.finish();
    drop(watcher);
    code
}

fn spawn(name: &str, f: impl FnOnce() + Send + 'static) -> Result<(), CliError> {
    std::thread::Builder::new()
        .name(name.into())
        .spawn(f)
        .map(|_| ())
        .map_err(|e| local_io(&format!("spawning {name}"), e))
}

/// Our stdout and stderr: prefixed lines, kubegate's notes.
struct Ui {
    prefixes: Prefixes,
    colour: bool,
    /// Per app: [stdout and tty, stderr].
    lines: Vec<[Lines; 2]>,
}

impl Ui {
    fn new(names: &[String], colour: bool) -> Ui {
        Ui {
            prefixes: Prefixes::new(names, colour),
            colour,
            lines: names.iter().map(|_| Default::default()).collect(),
        }
    }

    /// A note of kubegate's own, on stderr.
    fn note(&self, m: &str) {
        let line = if self.colour {
            format!("\x1b[2mkubegate:\x1b[0m {m}\n")
        } else {
            format!("kubegate: {m}\n")
        };
        // A terminal that went away is SIGHUP's business; nothing to do here.
        let _ = write_flush(&mut io::stderr().lock(), line.as_bytes());
    }

    fn write(&self, app: usize, err: bool, lines: Vec<Vec<u8>>) {
        if lines.is_empty() {
            return;
        }
        let prefix = self.prefixes.of(app);
        let mut out = Vec::new();
        for l in lines {
            out.extend_from_slice(&output::render(prefix, &l, self.colour));
        }
        let _ = if err {
            write_flush(&mut io::stderr().lock(), &out)
        } else {
            write_flush(&mut io::stdout().lock(), &out)
        };
    }

    fn output(&mut self, app: usize, stream: u8, data: &[u8]) {
        let err = stream == 2;
        let Some(l) = self.lines.get_mut(app) else {
            return;
        };
        let lines = l[usize::from(err)].push(data, Instant::now());
        self.write(app, err, lines);
    }

    /// When a partial line is due.
    fn due(&self) -> Option<Instant> {
        self.lines.iter().flatten().filter_map(Lines::due).min()
    }

    /// Shows the partial lines that are due (all of them with `force`).
    fn flush_partial(&mut self, force: bool) {
        let now = Instant::now();
        for app in 0..self.lines.len() {
            for err in [false, true] {
                if let Some(p) = self.lines[app][usize::from(err)].take_partial(now, force) {
                    self.write(app, err, vec![p]);
                }
            }
        }
    }

    fn finish(&mut self) {
        self.flush_partial(true);
    }
}

fn write_flush(w: &mut impl Write, b: &[u8]) -> io::Result<()> {
    w.write_all(b)?;
    w.flush()
}

struct Dev {
    client: Arc<Client>,
    id: String,
    names: Vec<String>,
    ios: Vec<Io>,
    stdin_app: usize,
    /// Typed input, for the stdin app's io thread (taken when it starts).
    input: Option<Receiver<Vec<u8>>>,
    tx: Sender<Msg>,
    rx: Receiver<Msg>,
    /// Messages taken while waiting for a flush, for the main loop.
    held: VecDeque<Msg>,
    ui: Ui,
    sync_tx: Sender<SyncMsg>,
    running: Arc<AtomicBool>,
    phase: Phase,
    io_started: bool,
    last_progress: String,
}

impl Dev {
    fn main_loop(&mut self) -> Result<i32, CliError> {
        let rx = self.rx.clone();
        loop {
            let deadline = [self.ui.due(), self.phase_deadline()]
                .into_iter()
                .flatten()
                .min();
            let msg = if let Some(m) = self.held.pop_front() {
                Ok(m)
            } else {
                match deadline {
                    Some(d) => rx.recv_deadline(d),
                    None => rx.recv().map_err(|_| RecvTimeoutError::Disconnected),
                }
            };
            let done = match msg {
                Ok(m) => self.on_msg(m)?,
                Err(RecvTimeoutError::Timeout) => self.on_time()?,
                Err(RecvTimeoutError::Disconnected) => {
                    return Err(CliError::new(codes::DISCONNECTED, "every stream ended"))
                }
            };
            if let Some(code) = done {
                return Ok(code);
            }
        }
    }

    fn phase_deadline(&self) -> Option<Instant> {
        match self.phase {
            Phase::Live => None,
            Phase::Window(t) | Phase::Stopping(t) | Phase::Suspending(t) => Some(t),
        }
    }

    /// A deadline passed: partial lines, or the phase's.
    fn on_time(&mut self) -> Result<Option<i32>, CliError> {
        self.ui.flush_partial(false);
        let now = Instant::now();
        match self.phase {
            Phase::Window(t) if now >= t => {
                self.stop()?;
                Ok(None)
            }
            Phase::Stopping(t) if now >= t => Err(CliError::new(
                codes::DISCONNECTED,
                format!(
                    "session {} was not reported stopped within {} s; `kubegate sessions` shows where it is",
                    self.id,
                    STOP_WAIT.as_secs()
                ),
            )),
            Phase::Suspending(t) if now >= t => Err(CliError::new(
                codes::DISCONNECTED,
                format!(
                    "session {} was not reported suspended within {} s; `kubegate sessions` shows where it is",
                    self.id,
                    SUSPEND_WAIT.as_secs()
                ),
            )),
            _ => Ok(None),
        }
    }

    fn on_msg(&mut self, m: Msg) -> Result<Option<i32>, CliError> {
        match m {
            Msg::Output { app, stream, data } => self.ui.output(app, stream, &data),
            Msg::Gap { app, from, to } => self.ui.note(&format!(
                "{}: output frames {from} to {to} are no longer in the daemon's replay buffer: that output is lost",
                self.names[app]
            )),
            Msg::IoEnded(app, r) => {
                if let Err(e) = r {
                    self.ui.note(&format!(
                        "{}: no more output from this app: {e}",
                        self.names[app]
                    ));
                }
            }
            Msg::Sync(o) => self.on_sync(o),
            Msg::Event(ev) => return self.on_event(ev),
            Msg::EventsEnded(Ok(())) => {
                return Err(CliError::new(
                    codes::DISCONNECTED,
                    format!("the event stream of session {} ended", self.id),
                ))
            }
            Msg::EventsEnded(Err(e)) => {
                return Err(CliError::new(
                    &e.code,
                    format!(
                        "{}; session {} is left as it is (`kubegate sessions stop {}` stops it)",
                        e.message, self.id, self.id
                    ),
                ))
            }
            Msg::Signal(sig) => return self.on_signal(sig),
        }
        Ok(None)
    }

    fn on_sync(&mut self, o: Outcome) {
        match o {
            Outcome::Synced { written, deleted } => {
                let list = |v: &[String]| {
                    let mut s = v.iter().take(3).cloned().collect::<Vec<_>>().join(", ");
                    if v.len() > 3 {
                        s.push_str(&format!(" and {} more", v.len() - 3));
                    }
                    s
                };
                let mut parts = Vec::new();
                if !written.is_empty() {
                    parts.push(format!("synced {}", list(&written)));
                }
                if !deleted.is_empty() {
                    parts.push(format!("deleted {}", list(&deleted)));
                }
                self.ui.note(&parts.join("; "));
            }
            Outcome::Skipped { path, why } => {
                self.ui.note(&format!("warning: {path} not synced: {why}"))
            }
            Outcome::Failed(e) => self.ui.note(&format!(
                "warning: syncing files failed ({e}); trying again in {} s or at the next change",
                sync::RETRY.as_secs()
            )),
        }
    }

    fn on_signal(&mut self, sig: i32) -> Result<Option<i32>, CliError> {
        match (self.phase, sig) {
            (Phase::Live, SIGINT) => {
                self.ui.note(&format!(
                    "stopping session {}; Ctrl-C again within {} s suspends it instead",
                    self.id,
                    SUSPEND_WINDOW.as_secs()
                ));
                self.phase = Phase::Window(Instant::now() + SUSPEND_WINDOW);
            }
            (Phase::Live | Phase::Window(_), SIGTERM) => self.stop()?,
            (Phase::Window(_), SIGINT) | (Phase::Live | Phase::Window(_), SIGHUP) => {
                self.suspend()?
            }
            (Phase::Stopping(_) | Phase::Suspending(_), _) => {
                self.ui.note(&format!(
                    "leaving now; session {} goes on {} (`kubegate sessions` shows it)",
                    self.id,
                    if matches!(self.phase, Phase::Stopping(_)) {
                        "stopping"
                    } else {
                        "suspending"
                    }
                ));
                return Ok(Some(128 + sig));
            }
            _ => {}
        }
        Ok(None)
    }

    /// `DELETE`: the session stops (its pod is deleted).
    fn stop(&mut self) -> Result<(), CliError> {
        // Nothing more to sync into a workspace about to go.
        self.running.store(false, Ordering::SeqCst);
        self.client
            .call("DELETE", &format!("/v1/sessions/{}", self.id), None)?;
        self.phase = Phase::Stopping(Instant::now() + STOP_WAIT);
        Ok(())
    }

    /// Pending file changes first, then `POST …/suspend`; a session that
    /// cannot be suspended (still starting) is stopped instead.
    fn suspend(&mut self) -> Result<(), CliError> {
        self.flush_sync();
        match self.client.call(
            "POST",
            &format!("/v1/sessions/{}/suspend", self.id),
            Some(b"{}"),
        ) {
            Ok(_) => {
                self.running.store(false, Ordering::SeqCst);
                self.ui.note(&format!(
                    "suspending session {} (its files are kept)",
                    self.id
                ));
                self.phase = Phase::Suspending(Instant::now() + SUSPEND_WAIT);
                Ok(())
            }
            Err(e) => {
                self.ui
                    .note(&format!("cannot suspend ({e}); stopping it instead"));
                self.stop()
            }
        }
    }

    /// Asks the sync thread to send what is pending and waits for it
    /// (bounded), showing output meanwhile; other messages wait for the
    /// main loop.
    fn flush_sync(&mut self) {
        let (reply_tx, reply_rx) = bounded(1);
        if self.sync_tx.try_send(SyncMsg::Flush(reply_tx)).is_err() {
            return;
        }
        let deadline = Instant::now() + FLUSH_WAIT;
        let rx = self.rx.clone();
        loop {
            select! {
                recv(reply_rx) -> _ => return,
                recv(rx) -> m => match m {
                    Ok(Msg::Output { app, stream, data }) => self.ui.output(app, stream, &data),
                    Ok(Msg::Sync(o)) => self.on_sync(o),
                    Ok(other) => self.held.push_back(other),
                    Err(_) => return,
                },
                default(deadline.saturating_duration_since(Instant::now())) => return,
            }
        }
    }

    fn on_event(&mut self, ev: SessionEvent) -> Result<Option<i32>, CliError> {
        let d = &ev.data;
        let app = d["app"].as_str().unwrap_or("?");
        match ev.kind.as_str() {
            "status" => return self.on_status(d),
            "progress" => {
                if let Some(m) = d["message"].as_str() {
                    if m != self.last_progress {
                        self.last_progress = m.to_string();
                        match d["app"].as_str() {
                            Some(a) => self.ui.note(&format!("{a}: {m}")),
                            None => self.ui.note(m),
                        }
                    }
                }
            }
            "endpoints" => {
                for e in d["added"].as_array().into_iter().flatten() {
                    let mut e = e.clone();
                    e["app"] = Value::from(app);
                    self.ui.note(&self.endpoint_line(&e));
                }
                for e in d["removed"].as_array().into_iter().flatten() {
                    self.ui
                        .note(&format!("{app}: port {} no longer published", port_name(e)));
                }
                for e in d["rejected"].as_array().into_iter().flatten() {
                    self.ui.note(&format!(
                        "{app}: port {} rejected: {}",
                        port_name(e),
                        e["reason"].as_str().unwrap_or("no reason given")
                    ));
                }
            }
            "reachability" => match d["state"].as_str() {
                Some("reachable") => self
                    .ui
                    .note(&format!("{app}: port {} reachable", d["port"])),
                Some("unreachable") => self.ui.note(&format!(
                    "{app}: port {} not reachable yet (is the app listening on $POD_IP?)",
                    d["port"]
                )),
                _ => {}
            },
            "run" => {
                let generation = d["generation"].as_u64().unwrap_or(0);
                match d["phase"].as_str() {
                    Some("started") if generation > 1 => {
                        self.ui.note(&format!("{app}: run {generation} started"))
                    }
                    Some("ended") => self.ui.note(&format!(
                        "{app}: run {generation} ended: {}",
                        d["reason"]
                            .as_str()
                            .map(str::to_string)
                            .unwrap_or_else(|| format!("exit code {}", d["exitCode"]))
                    )),
                    _ => {}
                }
            }
            "gap" => self.ui.note(&format!(
                "events {} to {} of the session are no longer kept by the daemon",
                d["from"], d["to"]
            )),
            // The apps' debug frames (their log lines are the output
            // already shown); unknown kinds.
            _ => {}
        }
        Ok(None)
    }

    fn on_status(&mut self, d: &Value) -> Result<Option<i32>, CliError> {
        let status = d["status"].as_str().unwrap_or("");
        let was_running = self.running.swap(status == "running", Ordering::SeqCst);
        if (status == "running") != was_running {
            let _ = self.sync_tx.try_send(SyncMsg::Wake);
        }
        match status {
            "running" => {
                self.ui.note(&format!("session {} running", self.id));
                for e in d["endpoints"].as_array().into_iter().flatten() {
                    self.ui.note(&self.endpoint_line(e));
                }
                if !self.io_started {
                    self.io_started = true;
                    self.start_io()?;
                }
            }
            "starting" => self.ui.note(&format!("session {} starting", self.id)),
            "suspended" => {
                if matches!(self.phase, Phase::Suspending(_)) {
                    self.ui.note(&format!(
                        "session {} suspended; resume it with: kubegate sessions resume {}",
                        self.id, self.id
                    ));
                    return Ok(Some(0));
                }
                self.ui.note(&format!(
                    "session {} suspended (not by us); `kubegate sessions resume {}` brings it back",
                    self.id, self.id
                ));
            }
            "stopped" => {
                if matches!(self.phase, Phase::Stopping(_)) {
                    self.ui.note(&format!("session {} stopped", self.id));
                    return Ok(Some(0));
                }
                return Err(CliError::new(
                    "SESSION_ENDED",
                    format!("session {} was stopped (not by us)", self.id),
                ));
            }
            "failed" => {
                return Err(CliError::new(
                    "SESSION_FAILED",
                    format!(
                        "session {} failed at stage {}: {}",
                        self.id,
                        d["error"]["stage"].as_str().unwrap_or("?"),
                        d["error"]["message"].as_str().unwrap_or("no message")
                    ),
                ))
            }
            _ => {}
        }
        Ok(None)
    }

    /// `web: port 8080/tcp at URL`, or how to reach it without one.
    fn endpoint_line(&self, e: &Value) -> String {
        let app = e["app"].as_str().unwrap_or("?");
        let port = port_name(e);
        match e["url"].as_str() {
            Some(u) if !u.is_empty() => format!("{app}: port {port} at {u}"),
            _ if e["protocol"] == "udp" => format!("{app}: port {port} (inside the cluster only)"),
            _ => format!(
                "{app}: port {port}: kubegate port-forward {} {}",
                self.id, e["port"]
            ),
        }
    }

    /// One io thread per app; the stdin app's gets the typed input.
    fn start_io(&mut self) -> Result<(), CliError> {
        let size = term::window_size().map(|(c, r)| {
            let cols = usize::from(c)
                .saturating_sub(self.ui.prefixes.columns())
                .max(20);
            (u16::try_from(cols).unwrap_or(c), r)
        });
        for (i, name) in self.names.iter().enumerate() {
            let input = if i == self.stdin_app {
                self.input.take()
            } else {
                None
            };
            let resize = if self.ios[i] == Io::Tty { size } else { None };
            let (client, id, name, tx) = (
                self.client.clone(),
                self.id.clone(),
                name.clone(),
                self.tx.clone(),
            );
            spawn("kubegate-dev-io", move || {
                follow_io(&client, &id, &name, i, &tx, input, resize)
            })?;
        }
        Ok(())
    }
}

fn port_name(e: &Value) -> String {
    format!("{}/{}", e["port"], e["protocol"].as_str().unwrap_or("tcp"))
}

/// One app's output, for the session's life: reconnects after a 4001 (we
/// fell behind) or a broken connection with the last seq shown; ends when
/// the session ends.
fn follow_io(
    client: &Client,
    session: &str,
    app: &str,
    i: usize,
    tx: &Sender<Msg>,
    mut input: Option<Receiver<Vec<u8>>>,
    resize: Option<(u16, u16)>,
) {
    let mut last: Option<u32> = None;
    let mut failures = 0u32;
    let mut backoff = IO_BACKOFF_FIRST;
    let nothing: Receiver<Vec<u8>> = never();
    let fail = |failures: &mut u32, backoff: &mut Duration, e: CliError| -> bool {
        *failures += 1;
        if *failures >= IO_MAX_FAILURES || e.code == "NOT_FOUND" {
            let _ = tx.send(Msg::IoEnded(i, Err(e)));
            return false;
        }
        std::thread::sleep(*backoff);
        *backoff = (*backoff * 2).min(IO_BACKOFF_MAX);
        true
    };
    loop {
        let sock = match IoSocket::open(client, session, app, last, "kubegate-dev-io-pump") {
            Ok(s) => s,
            Err(e) => {
                if fail(&mut failures, &mut backoff, e) {
                    continue;
                }
                return;
            }
        };
        if let Some((cols, rows)) = resize {
            let _ = sock.outbox.send(io_socket::resize(cols, rows));
        }
        loop {
            let input_rx = input.as_ref().unwrap_or(&nothing);
            select! {
                recv(sock.inbound) -> m => match m {
                    Ok(m) => {
                        sock.took_one();
                        match io_socket::frame(&m) {
                            Ok(Frame::Output { seq, stream, payload }) => {
                                if last.is_some_and(|l| seq <= l) {
                                    continue;
                                }
                                last = Some(seq);
                                failures = 0;
                                backoff = IO_BACKOFF_FIRST;
                                let data = payload.to_vec();
                                if tx.send(Msg::Output { app: i, stream, data }).is_err() {
                                    return;
                                }
                            }
                            Ok(Frame::Gap { from, to }) => {
                                last = Some(last.map_or(to, |l| l.max(to)));
                                let _ = tx.send(Msg::Gap { app: i, from, to });
                            }
                            Ok(Frame::Other) => {}
                            Err(e) => {
                                let _ = tx.send(Msg::IoEnded(i, Err(e)));
                                return;
                            }
                        }
                    }
                    Err(_) => match sock.ended(client) {
                        Ok(Closed::Slow) => break,
                        Ok(Closed::SessionEnded) => {
                            let _ = tx.send(Msg::IoEnded(i, Ok(())));
                            return;
                        }
                        Err(e) => {
                            if fail(&mut failures, &mut backoff, e) {
                                break;
                            }
                            return;
                        }
                    },
                },
                recv(input_rx) -> d => match d {
                    Ok(d) => {
                        let _ = sock.outbox.send(Message::Binary(d.into()));
                    }
                    Err(_) => input = None,
                },
            }
        }
    }
}

/// Our stdin, as it comes (a line at a time from a terminal), to the
/// stdin app's io thread. At EOF (Ctrl-D) nothing more is read: the io
/// socket has no end-of-input.
fn read_stdin(tx: &Sender<Vec<u8>>) {
    let mut stdin = io::stdin().lock();
    let mut buf = vec![0u8; super::attach::STDIN_CHUNK];
    loop {
        match stdin.read(&mut buf) {
            Ok(0) => return,
            Ok(n) => {
                if tx.send(buf[..n].to_vec()).is_err() {
                    return;
                }
            }
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(_) => return,
        }
    }
}
