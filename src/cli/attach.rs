//! `kubegate attach SESSION APP`: the app's io socket (`kubegate.io.v1`,
//! docs/api.md#sessions), on these threads:
//!
//! ```text
//!  stdin thread: read 32 KiB (Ctrl-] in raw mode: detach) ─┐
//!  signal thread: SIGWINCH -> resize; INT/TERM/HUP/QUIT ───┴─> input (bounded 16) ─┐
//!                                                                                  v
//!  main: stdout/stderr <── inbound (bounded 16) <── kubegate-attach-io  <── outbox (bounded 16)
//!                                                  (http::ws::run_stream)
//! ```
//!
//! The main thread is the only one that decides: it writes output frames
//! as they come and remembers the last seq written, forwards input to the
//! current socket's outbox, reconnects with `lastSeq` when the daemon
//! closes with 4001 `slow_subscriber`, and saves the last seq per (server,
//! session, app) in the state file (every 2 s when it changed, and on every
//! way out), so the next attach replays only what this one did not show.

use super::args::AttachArgs;
use super::io_socket::{self, Closed, Frame, IoSocket};
use super::net::Client;
use super::term::{self, RawMode};
use super::{local_io, CliError};
use crate::exit::{self, codes};
use crossbeam_channel::{bounded, never, select, tick, Receiver, Sender};
use serde_json::Value;
use std::collections::BTreeMap;
use std::io::{self, Read, Write};
use std::path::PathBuf;
use std::time::{Duration, SystemTime, UNIX_EPOCH};
use tungstenite::Message;

/// Ctrl-]: detaches in raw mode (as telnet's escape character).
pub const DETACH_KEY: u8 = 0x1d;
/// Bytes of stdin per frame.
pub const STDIN_CHUNK: usize = 32 * 1024;
/// Input (stdin chunks, resizes, a detach) queued for the main thread: 16;
/// the stdin thread waits when it is full.
const INPUT_CAPACITY: usize = 16;
/// How often a changed last seq is written to the state file.
const SAVE_EVERY: Duration = Duration::from_secs(2);
/// 4001 closes in a row, without a frame shown in between, before giving up.
const MAX_SLOW_RECONNECTS: u32 = 10;
/// Entries kept in the state file (the least recently used go first).
const MAX_STATE_ENTRIES: usize = 1000;

/// What the stdin and signal threads ask of the main thread.
enum Input {
    Stdin(Vec<u8>),
    Resize(u16, u16),
    /// Detach; the reason is shown.
    Detach(String),
}

/// Runs the attach; `Ok(code)` is the exit code (0 detached, 1 the
/// session ended).
pub fn run(a: &AttachArgs) -> Result<i32, CliError> {
    let client = Client::new(&a.common)?;
    let view = session_view(&client, &a.session)?;
    let apps: Vec<(String, String)> = view["apps"]
        .as_array()
        .map(|apps| {
            apps.iter()
                .map(|x| {
                    (
                        x["name"].as_str().unwrap_or("").to_string(),
                        x["io"].as_str().unwrap_or("tty").to_string(),
                    )
                })
                .collect()
        })
        .unwrap_or_default();
    let Some((_, io_mode)) = apps.iter().find(|(n, _)| *n == a.app) else {
        let names: Vec<&str> = apps.iter().map(|(n, _)| n.as_str()).collect();
        return Err(CliError::new(
            "NOT_FOUND",
            format!(
                "session {} has no app {:?} (its apps: {})",
                a.session,
                a.app,
                names.join(", ")
            ),
        ));
    };
    let on_terminal = term::stdin_is_terminal();
    let raw = on_terminal && io_mode == "tty";

    let state = StateFile::locate();
    let key = format!("{}|{}|{}", client.server(), a.session, a.app);
    let start = if a.from_start {
        None
    } else {
        state.as_ref().and_then(|s| s.get(&key))
    };

    let (input_tx, input_rx) = bounded::<Input>(INPUT_CAPACITY);
    // Signals are caught before the terminal goes raw, so none can leave it
    // raw; the guard restores it on every return below, and on a panic.
    let signals = catch_signals()?;
    if raw {
        eprintln!(
            "kubegate: attached to {} app {}; Ctrl-] detaches (the session keeps running)",
            a.session, a.app
        );
    }
    let _raw = if raw {
        Some(RawMode::enable().map_err(|e| local_io("setting the terminal to raw mode", e))?)
    } else {
        None
    };
    {
        let tx = input_tx.clone();
        std::thread::Builder::new()
            .name("kubegate-attach-signals".into())
            .spawn(move || forward_signals(signals, tx))
            .map_err(|e| local_io("spawning the signal thread", e))?;
    }
    std::thread::Builder::new()
        .name("kubegate-attach-stdin".into())
        .spawn(move || send_stdin(input_tx, raw))
        .map_err(|e| local_io("spawning the stdin thread", e))?;

    let mut seen = Seen {
        last: start,
        saved: start,
    };
    let at = Attach {
        client: &client,
        on_terminal,
        raw,
        input_rx: &input_rx,
        state: &state,
        key: &key,
    };
    let result = attach_loop(&at, a, &mut seen);
    if let Some(s) = &state {
        seen.save(s, &key);
    }
    let nl = if raw { "\r\n" } else { "" };
    match result {
        Ok(End::Detached(why)) => {
            eprint!(
                "{nl}kubegate: detached from session {} app {} ({why}); the session keeps running: kubegate attach {} {}{}",
                a.session,
                a.app,
                a.session,
                a.app,
                if raw { "\r\n" } else { "\n" }
            );
            Ok(0)
        }
        Ok(End::SessionEnded) => {
            let status = match session_view(&client, &a.session) {
                Ok(v) => {
                    let mut s = v["status"].as_str().unwrap_or("ended").to_string();
                    if let Some(m) = v["error"]["message"].as_str() {
                        s.push_str(&format!(
                            " ({}: {m})",
                            v["error"]["stage"].as_str().unwrap_or("error")
                        ));
                    }
                    s
                }
                Err(_) => "ended".into(),
            };
            eprint!(
                "{nl}kubegate: session {} ended: {status}{}",
                a.session,
                if raw { "\r\n" } else { "\n" }
            );
            Ok(1)
        }
        Ok(End::StdoutClosed) => Ok(exit::OWN_ERROR),
        Err(e) => {
            if raw {
                eprint!("\r\n");
            }
            Err(e)
        }
    }
}

fn session_view(client: &Client, id: &str) -> Result<Value, CliError> {
    let body = client.get(&format!("/v1/sessions/{id}"))?;
    serde_json::from_slice(&body).map_err(|e| {
        CliError::new(
            codes::PROTOCOL,
            format!("the daemon's session does not decode: {e}"),
        )
    })
}

/// The last seq shown and the last one saved.
struct Seen {
    last: Option<u32>,
    saved: Option<u32>,
}

impl Seen {
    fn save(&mut self, state: &StateFile, key: &str) {
        if let (Some(last), true) = (self.last, self.last != self.saved) {
            if let Err(e) = state.put(key, last) {
                eprintln!(
                    "kubegate: warning: saving the attach state in {}: {e}",
                    state.path.display()
                );
            }
            self.saved = self.last;
        }
    }
}

enum End {
    Detached(String),
    SessionEnded,
    StdoutClosed,
}

/// How one socket ended.
enum SocketEnd {
    End(End),
    /// 4001: reconnect with the last seq.
    Slow,
}

/// What every socket of one attach shares: the daemon, the terminal, our
/// input, and where the last seq seen is kept.
struct Attach<'a> {
    client: &'a Client,
    on_terminal: bool,
    /// The local terminal is in raw mode (a tty app on a terminal).
    raw: bool,
    input_rx: &'a Receiver<Input>,
    state: &'a Option<StateFile>,
    /// The state file's key: server, session and app.
    key: &'a str,
}

fn attach_loop(at: &Attach<'_>, a: &AttachArgs, seen: &mut Seen) -> Result<End, CliError> {
    let mut slow_in_a_row = 0;
    loop {
        let sock = IoSocket::open(
            at.client,
            &a.session,
            &a.app,
            seen.last,
            "kubegate-attach-io",
        )?;
        let before = seen.last;
        match one_socket(at, sock, seen)? {
            SocketEnd::End(e) => return Ok(e),
            SocketEnd::Slow => {
                slow_in_a_row = if seen.last == before {
                    slow_in_a_row + 1
                } else {
                    1
                };
                if slow_in_a_row > MAX_SLOW_RECONNECTS {
                    return Err(CliError::new(
                        codes::DISCONNECTED,
                        "the daemon closed the stream again and again for a slow reader (4001 slow_subscriber) without any progress",
                    ));
                }
            }
        }
    }
}

fn one_socket(at: &Attach<'_>, sock: IoSocket, seen: &mut Seen) -> Result<SocketEnd, CliError> {
    let Attach {
        client,
        on_terminal,
        raw,
        input_rx,
        state,
        key,
    } = *at;
    // The app's terminal gets our size (a streams app ignores it).
    if on_terminal {
        if let Some((cols, rows)) = term::window_size() {
            let _ = sock.outbox.send(io_socket::resize(cols, rows));
        }
    }
    let nl = if raw { "\r\n" } else { "\n" };
    let stdout = io::stdout();
    let stderr = io::stderr();
    let saver = tick(SAVE_EVERY);
    let mut input = Some(input_rx);
    let nothing: Receiver<Input> = never();
    loop {
        let input_rx = input.unwrap_or(&nothing);
        select! {
            recv(sock.inbound) -> m => match m {
                Ok(m) => {
                    sock.took_one();
                    match io_socket::frame(&m)? {
                        Frame::Output { seq, stream, payload } => {
                            if seen.last.is_some_and(|l| seq <= l) {
                                continue;
                            }
                            let r = if stream == 2 {
                                write_flush(&mut stderr.lock(), payload)
                            } else {
                                write_flush(&mut stdout.lock(), payload)
                            };
                            if let Err(e) = r {
                                if stream != 2 {
                                    sock.close_and_wait();
                                    if e.kind() == io::ErrorKind::BrokenPipe {
                                        return Ok(SocketEnd::End(End::StdoutClosed));
                                    }
                                    return Err(local_io("writing stdout", e));
                                }
                            }
                            seen.last = Some(seq);
                        }
                        Frame::Gap { from, to } => {
                            let _ = write_flush(
                                &mut stderr.lock(),
                                format!(
                                    "{nl}kubegate: output frames {from} to {to} are no longer in the daemon's replay buffer: that output is lost{nl}"
                                )
                                .as_bytes(),
                            );
                            // Shown as lost: not asked for again.
                            seen.last = Some(seen.last.map_or(to, |l| l.max(to)));
                        }
                        Frame::Other => {}
                    }
                }
                Err(_) => {
                    // The pump ended: why?
                    return match sock.ended(client)? {
                        Closed::Slow => Ok(SocketEnd::Slow),
                        Closed::SessionEnded => Ok(SocketEnd::End(End::SessionEnded)),
                    };
                }
            },
            recv(input_rx) -> m => match m {
                Ok(Input::Stdin(d)) => {
                    if sock.outbox.send(Message::Binary(d.into())).is_err() {
                        // The pump is gone; inbound says why next.
                    }
                }
                Ok(Input::Resize(cols, rows)) => {
                    let _ = sock.outbox.send(io_socket::resize(cols, rows));
                }
                Ok(Input::Detach(why)) => {
                    sock.close_and_wait();
                    return Ok(SocketEnd::End(End::Detached(why)));
                }
                Err(_) => input = None,
            },
            recv(saver) -> _ => {
                if let Some(s) = state {
                    seen.save(s, key);
                }
            }
        }
    }
}

fn write_flush(w: &mut impl Write, d: &[u8]) -> io::Result<()> {
    w.write_all(d)?;
    w.flush()
}

/// Reads our stdin and hands it to the main thread. In raw mode a Ctrl-]
/// ends the attach (the bytes before it still go). At EOF the thread ends:
/// the io socket has no end-of-input, output keeps coming.
fn send_stdin(tx: Sender<Input>, raw: bool) {
    let mut stdin = io::stdin().lock();
    let mut buf = vec![0u8; STDIN_CHUNK];
    loop {
        match stdin.read(&mut buf) {
            Ok(0) => return,
            Ok(n) => {
                let data = &buf[..n];
                let cut = raw
                    .then(|| data.iter().position(|b| *b == DETACH_KEY))
                    .flatten();
                let send = &data[..cut.unwrap_or(n)];
                if !send.is_empty() && tx.send(Input::Stdin(send.to_vec())).is_err() {
                    return;
                }
                if cut.is_some() {
                    let _ = tx.send(Input::Detach("Ctrl-]".into()));
                    return;
                }
            }
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => {
                eprintln!("kubegate: warning: reading stdin: {e}; not reading it any more");
                return;
            }
        }
    }
}

use signal_hook::consts::{SIGHUP, SIGINT, SIGQUIT, SIGTERM, SIGWINCH};
use signal_hook::iterator::Signals;

fn catch_signals() -> Result<Signals, CliError> {
    Signals::new([SIGWINCH, SIGTERM, SIGHUP, SIGINT, SIGQUIT])
        .map_err(|e| local_io("installing signal handlers", e))
}

/// SIGWINCH: the new size. A terminating signal: a detach (the state is
/// saved, the terminal restored); a second one while that is under way:
/// restore the terminal and exit 128+N at once.
fn forward_signals(mut signals: Signals, tx: Sender<Input>) {
    let mut detaching = false;
    for sig in signals.forever() {
        if sig == SIGWINCH {
            if let Some((cols, rows)) = term::window_size() {
                let _ = tx.send_timeout(Input::Resize(cols, rows), Duration::from_secs(1));
            }
            continue;
        }
        if detaching {
            term::restore();
            std::process::exit(128 + sig);
        }
        detaching = true;
        let name = match sig {
            SIGINT => "SIGINT",
            SIGTERM => "SIGTERM",
            SIGHUP => "SIGHUP",
            _ => "SIGQUIT",
        };
        let _ = tx.send_timeout(Input::Detach(name.into()), Duration::from_secs(1));
    }
}

/// The last seq shown per (server, session, app):
/// `$XDG_STATE_HOME/kubegate/attach.json` (or
/// `~/.local/state/kubegate/attach.json`), mode 0600 in a 0700 folder,
/// replaced atomically (temp file and rename).
pub struct StateFile {
    pub path: PathBuf,
}

#[derive(serde::Serialize, serde::Deserialize, Default)]
struct StateData {
    /// key -> (seq, unix seconds of the last write)
    #[serde(default)]
    seqs: BTreeMap<String, (u32, u64)>,
}

impl StateFile {
    /// The state file's place, from the environment; `None` (and a
    /// warning) without `XDG_STATE_HOME` or `HOME`.
    pub fn locate() -> Option<StateFile> {
        match super::token_store::state_base() {
            Some(b) => Some(StateFile {
                path: b.join("kubegate").join("attach.json"),
            }),
            None => {
                eprintln!("kubegate: warning: neither XDG_STATE_HOME nor HOME is set: every attach replays from the start");
                None
            }
        }
    }

    fn load(&self) -> StateData {
        std::fs::read(&self.path)
            .ok()
            .and_then(|b| serde_json::from_slice(&b).ok())
            .unwrap_or_default()
    }

    pub fn get(&self, key: &str) -> Option<u32> {
        self.load().seqs.get(key).map(|(s, _)| *s)
    }

    pub fn put(&self, key: &str, seq: u32) -> io::Result<()> {
        use std::os::unix::fs::DirBuilderExt;
        let dir = self
            .path
            .parent()
            .ok_or_else(|| io::Error::other("the state file has no folder"))?;
        std::fs::DirBuilder::new()
            .recursive(true)
            .mode(0o700)
            .create(dir)?;
        let mut data = self.load();
        let now = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_or(0, |d| d.as_secs());
        data.seqs.insert(key.to_string(), (seq, now));
        while data.seqs.len() > MAX_STATE_ENTRIES {
            let oldest = data
                .seqs
                .iter()
                .min_by_key(|(_, (_, t))| *t)
                .map(|(k, _)| k.clone());
            match oldest {
                Some(k) => data.seqs.remove(&k),
                None => break,
            };
        }
        let bytes = serde_json::to_vec(&data).map_err(io::Error::other)?;
        crate::files::write_atomic(&self.path, &bytes, 0o600)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn state_file_keeps_seqs_privately() {
        use std::os::unix::fs::PermissionsExt;
        let dir =
            std::env::temp_dir().join(format!("kubegate-attach-state-{}", std::process::id()));
        let s = StateFile {
            path: dir.join("kubegate").join("attach.json"),
        };
        assert_eq!(s.get("a"), None);
        s.put("a", 7).unwrap();
        s.put("b", 9).unwrap();
        s.put("a", 8).unwrap();
        assert_eq!((s.get("a"), s.get("b")), (Some(8), Some(9)));
        let mode = std::fs::metadata(&s.path).unwrap().permissions().mode();
        assert_eq!(mode & 0o777, 0o600);
        let _ = std::fs::remove_dir_all(&dir);
    }
}
