//! `kubegate exec`: one interactive exec WebSocket (`kubegate.exec.v1`),
//! always, on these threads:
//!
//! ```text
//!  stdin thread (-i): read 32 KiB ─┐
//!  signal thread (-t): SIGWINCH ───┴─> Outbox (bounded) ─┐ kubegate-exec-io:
//!                                                        │ http::ws::run_stream
//!  main: stdout/stderr <── inbound (bounded) <───────────┘ (the one pump)
//! ```
//!
//! The main thread writes stdout and stderr frames as they come (flushed,
//! byte for byte) until the `exit` or `error` frame, then closes the stream
//! and returns the remote exit code. A slow stdout slows the pump (it holds
//! a message and stops reading the socket: TCP backpressure reaches the
//! daemon); a full outbox blocks the stdin thread. Nothing is dropped.
//! Threads still blocked (reading a terminal that will never give EOF) end
//! with the process.

use super::args::ExecArgs;
use super::net::{exec_query, Client};
use super::term::{self, RawMode};
use super::{local_io, CliError};
use crate::exec::frames::{ClientFrame, ServerFrame};
use crate::exit::codes;
use crate::http::ws::{run_stream, try_outbox, Outbox, WsEnd, WsOptions};
use crossbeam_channel::{bounded, Receiver};
use std::io::{self, Read, Write};
use std::time::Duration;
use tungstenite::Message;

/// Bytes of stdin per frame (the daemon accepts up to 64 KiB).
pub const STDIN_CHUNK: usize = 32 * 1024;
/// Messages queued towards the daemon: 16, at most ~512 KiB of stdin in
/// flight.
const OUTBOX_CAPACITY: usize = 16;
/// Messages between the pump and the main thread: 16.
const INBOUND_CAPACITY: usize = 16;
/// A ping after this long without sending (load balancers cut idle streams
/// at 60 s). No idle timeout: while our stdout is slow (a pager) the socket
/// is not read, and that must not end the command.
const PING_INTERVAL: Duration = Duration::from_secs(30);
/// How long our Close waits for the daemon's.
const CLOSE_TIMEOUT: Duration = Duration::from_secs(5);
/// Bound on waiting for the pump to end after the exit status.
const END_WAIT: Duration = Duration::from_secs(10);

/// How the relay ended.
enum Outcome {
    /// The `exit` frame: the remote exit code.
    Exit(i32),
    /// An `error` frame, an undecodable frame, or a local write failure.
    Failed(CliError),
    /// Our stdout was closed by its reader (`| head`): stop quietly.
    StdoutClosed,
    /// The stream ended before any exit status.
    Ended,
}

/// Runs the command; `Ok(code)` is the exit code to leave with.
pub fn run(a: &ExecArgs) -> Result<i32, CliError> {
    let client = Client::new(&a.common)?;
    let on_terminal = term::stdin_is_terminal();
    let tty = a.tty && on_terminal;
    if a.tty && !on_terminal {
        // As ssh ("Pseudo-terminal will not be allocated because stdin is
        // not a terminal"): say it once, go on without a terminal.
        eprintln!("kubegate: warning: -t ignored: stdin is not a terminal");
    }
    let raw = tty && a.stdin;
    let size = if tty { term::window_size() } else { None };
    // The size travels in the query: the remote terminal has it before the
    // command starts (a resize frame could arrive after its first read).
    let path = exec_query(&client.path("/v1/exec/interactive"), a, tty, size);
    let ws = client.open_exec(&path)?;

    // Signals are caught before the terminal goes raw, so none can leave it
    // raw; the guard restores it on every return below, and on a panic.
    let signals = if tty { Some(catch_signals(raw)?) } else { None };
    let _raw = if raw {
        Some(RawMode::enable().map_err(|e| local_io("setting the terminal to raw mode", e))?)
    } else {
        None
    };

    let (outbox, out_rx) =
        try_outbox(OUTBOX_CAPACITY).map_err(|e| local_io("creating the stream's waker", e))?;
    let (in_tx, in_rx) = bounded::<Message>(INBOUND_CAPACITY);
    let (end_tx, end_rx) = bounded::<WsEnd>(1);
    let opts = WsOptions {
        ping_interval: Some(PING_INTERVAL),
        idle_timeout: None,
        close_timeout: CLOSE_TIMEOUT,
    };
    std::thread::Builder::new()
        .name("kubegate-exec-io".into())
        .spawn(move || {
            let end = run_stream(ws, out_rx, in_tx, opts);
            let _ = end_tx.send(end);
        })
        .map_err(|e| local_io("spawning the stream thread", e))?;
    if let Some(signals) = signals {
        let ob = outbox.clone();
        std::thread::Builder::new()
            .name("kubegate-exec-signals".into())
            .spawn(move || forward_signals(signals, ob))
            .map_err(|e| local_io("spawning the signal thread", e))?;
    }
    if a.stdin {
        let ob = outbox.clone();
        std::thread::Builder::new()
            .name("kubegate-exec-stdin".into())
            .spawn(move || send_stdin(ob))
            .map_err(|e| local_io("spawning the stdin thread", e))?;
    }

    let outcome = relay(&in_rx, &outbox);
    // From here on nothing more is read: let the pump discard what comes
    // (never hold a message for us), and close. Our Close ends the command
    // on the daemon's side if it still runs (an error on our side).
    drop(in_rx);
    let _ = outbox.send_timeout(Message::Close(None), Duration::from_secs(1));
    drop(outbox);
    let end = end_rx.recv_timeout(END_WAIT).ok();
    match outcome {
        Outcome::Exit(code) => Ok(code),
        Outcome::Failed(e) => Err(e),
        Outcome::StdoutClosed => Ok(crate::exit::OWN_ERROR),
        Outcome::Ended => Err(CliError::new(
            codes::DISCONNECTED,
            format!(
                "the connection to {} ended before the command's exit status ({})",
                client.server(),
                describe(end.as_ref())
            ),
        )),
    }
}

/// Writes output frames until the exit status.
fn relay(in_rx: &Receiver<Message>, outbox: &Outbox) -> Outcome {
    let stdout = io::stdout();
    let stderr = io::stderr();
    for m in in_rx.iter() {
        if in_rx.len() + 1 >= INBOUND_CAPACITY {
            // The channel was full: the pump may hold a message; take it now.
            outbox.wake();
        }
        match ServerFrame::decode(&m) {
            Ok(Some(ServerFrame::Stdout(d))) => {
                if let Err(e) = write_flush(&mut stdout.lock(), &d) {
                    if e.kind() == io::ErrorKind::BrokenPipe {
                        return Outcome::StdoutClosed;
                    }
                    return Outcome::Failed(local_io("writing stdout", e));
                }
            }
            Ok(Some(ServerFrame::Stderr(d))) => {
                // stderr closed is not worth stopping the command for.
                let _ = write_flush(&mut stderr.lock(), &d);
            }
            Ok(Some(ServerFrame::Target(_))) | Ok(None) => {}
            Ok(Some(ServerFrame::Exit(e))) => return Outcome::Exit(exit_code(e.exit_code)),
            Ok(Some(ServerFrame::Error(e))) => {
                return Outcome::Failed(CliError::new(e.code.as_str(), e.message))
            }
            Err(e) => {
                return Outcome::Failed(CliError::new(
                    codes::PROTOCOL,
                    format!("a frame from the daemon does not decode: {e}"),
                ))
            }
        }
    }
    Outcome::Ended
}

fn write_flush(w: &mut impl Write, d: &[u8]) -> io::Result<()> {
    w.write_all(d)?;
    w.flush()
}

/// Our exit code for a remote one: 0..=255 pass through; anything else
/// (not a process exit code) is 255.
pub fn exit_code(remote: i32) -> i32 {
    if (0..=255).contains(&remote) {
        remote
    } else {
        crate::exit::OWN_ERROR
    }
}

fn describe(end: Option<&WsEnd>) -> String {
    match end {
        None => "the stream did not end in time".into(),
        Some(WsEnd::Closed) => "closed".into(),
        Some(WsEnd::PeerClosed(None)) => "closed by the daemon".into(),
        Some(WsEnd::PeerClosed(Some(f))) if f.reason.is_empty() => {
            format!("closed by the daemon with code {}", u16::from(f.code))
        }
        Some(WsEnd::PeerClosed(Some(f))) => format!(
            "closed by the daemon with code {}: {}",
            u16::from(f.code),
            f.reason
        ),
        Some(WsEnd::Idle) => "idle".into(),
        Some(WsEnd::Error(e)) => e.clone(),
    }
}

/// Sends our stdin in chunks, then stdin EOF. Ends early when the stream
/// is gone.
fn send_stdin(outbox: Outbox) {
    let mut stdin = io::stdin().lock();
    let mut buf = vec![0u8; STDIN_CHUNK];
    loop {
        match stdin.read(&mut buf) {
            Ok(0) => break,
            Ok(n) => {
                let f = ClientFrame::Stdin {
                    data: buf[..n].to_vec(),
                    eof: false,
                };
                if outbox.send(f.encode()).is_err() {
                    return;
                }
            }
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => {
                eprintln!("kubegate: warning: reading stdin: {e}; closing the command's stdin");
                break;
            }
        }
    }
    let eof = ClientFrame::Stdin {
        data: Vec::new(),
        eof: true,
    };
    let _ = outbox.send(eof.encode());
}

use signal_hook::consts::{SIGHUP, SIGINT, SIGQUIT, SIGTERM, SIGWINCH};
use signal_hook::iterator::Signals;

/// SIGWINCH always (with a terminal); with raw mode also the signals that
/// would end us with the terminal still raw.
fn catch_signals(raw: bool) -> Result<Signals, CliError> {
    let mut sigs = vec![SIGWINCH];
    if raw {
        sigs.extend([SIGTERM, SIGHUP, SIGINT, SIGQUIT]);
    }
    Signals::new(sigs).map_err(|e| local_io("installing signal handlers", e))
}

/// SIGWINCH: send the new size. A terminating signal: restore the
/// terminal and exit 128+N, as a shell reports a signal.
fn forward_signals(mut signals: Signals, outbox: Outbox) {
    for sig in signals.forever() {
        if sig == SIGWINCH {
            if let Some((cols, rows)) = term::window_size() {
                let _ = outbox.send_timeout(
                    ClientFrame::Resize { cols, rows }.encode(),
                    Duration::from_secs(1),
                );
            }
            continue;
        }
        // No Close frame first: the daemon would answer it and the main
        // thread, seeing the stream end, could exit 255 before this thread
        // exits 128+N. Our exit closes the socket; the daemon ends the
        // command on its own.
        term::restore();
        std::process::exit(128 + sig);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tungstenite::protocol::frame::coding::CloseCode;
    use tungstenite::protocol::CloseFrame;

    #[test]
    fn remote_exit_codes_pass_through_and_odd_ones_are_ours() {
        for c in [0, 1, 7, 127, 137, 255] {
            assert_eq!(exit_code(c), c);
        }
        for c in [-1, 256, i32::MAX] {
            assert_eq!(exit_code(c), 255);
        }
    }

    #[test]
    fn stream_ends_are_described() {
        assert!(describe(None).contains("in time"));
        let f = CloseFrame {
            code: CloseCode::Away,
            reason: "daemon shutting down".into(),
        };
        assert_eq!(
            describe(Some(&WsEnd::PeerClosed(Some(f)))),
            "closed by the daemon with code 1001: daemon shutting down"
        );
        assert_eq!(
            describe(Some(&WsEnd::Error("connection reset".into()))),
            "connection reset"
        );
    }
}
