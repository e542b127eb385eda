//! The interactive exec streams: each echoes numbered lines back in
//! lockstep and must end with exit 7 (or, when a fault cut it, an `error`
//! frame with a code).

use crate::args::Args;
use crate::sessions::pause;
use crate::state::Shared;
use crate::wire::{ws_close, ws_open, ws_read, Got};
use crate::{EXEC_EXIT, EXEC_SCRIPT, STALL};
use kubegate::exec::frames::{ClientFrame, ServerFrame, SUBPROTOCOL as EXEC_PROTOCOL};
use rand::rngs::StdRng;
use rand::Rng;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};
use tungstenite::Message;

pub(crate) enum ExecEnd {
    /// `exit` with the right code after every echo.
    Completed,
    /// An `error` frame with a code (a fault cut it, the target was not
    /// ready…): a clear error, not a fake exit code.
    Error(String),
    Refused(String),
    ExitWrong(String),
    ExitLost(String),
    Stalled(String),
}

pub(crate) fn exec_path(a: &Args, lines: u64) -> String {
    let enc = |s: &str| {
        s.bytes()
            .map(|b| match b {
                b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'_' | b'.' | b'~' => {
                    (b as char).to_string()
                }
                _ => format!("%{b:02X}"),
            })
            .collect::<String>()
    };
    let mut p = format!(
        "/v1/exec/interactive?project={}&uid={}&deployment={}&tty=false&stdin=true",
        enc(&a.project),
        enc(&a.uid),
        enc(&a.deployment)
    );
    for c in ["sh", "-c", EXEC_SCRIPT, "soak", &lines.to_string()] {
        p.push_str("&command=");
        p.push_str(&enc(c));
    }
    p
}

/// One exec: `lines` lines echoed in lockstep, then the exit.
pub(crate) fn exec_once(
    sh: &Shared,
    w: usize,
    iter: u64,
    lines: u64,
    rng: &mut StdRng,
) -> (ExecEnd, u64) {
    let a = &sh.args;
    let steady = &sh.exec_steady[w];
    let mut ws = match ws_open(&a.daemon, &a.token, &exec_path(a, lines), EXEC_PROTOCOL) {
        Ok(ws) => ws,
        Err(e) => return (ExecEnd::Refused(e.to_string()), 0),
    };
    let mut echoed = 0u64;
    let mut out: Vec<u8> = Vec::new();
    let mut got_target = false;
    let mut deadline = Instant::now() + STALL;
    // Sends line `echoed` once the previous echo is in.
    let mut sent = 0u64;
    let end = loop {
        if got_target && sent == echoed && sent < lines {
            if sh.holding() {
                steady.store(true, Ordering::SeqCst);
                let mut ended = None;
                while sh.holding() && !sh.stopping() {
                    // Reading answers the daemon's pings while held.
                    match ws_read(&mut ws) {
                        Got::Idle => {}
                        Got::Closed(code, reason) => {
                            ended = Some(format!("closed ({code:?} {reason}) while held"));
                            break;
                        }
                        Got::Msg(m) => {
                            if !matches!(m, Message::Ping(_) | Message::Pong(_)) {
                                ended = Some(format!("unexpected {m:?} while held"));
                                break;
                            }
                        }
                    }
                }
                steady.store(false, Ordering::SeqCst);
                if let Some(e) = ended {
                    break ExecEnd::ExitLost(e);
                }
            }
            let line = format!("x{w}-{iter}-{sent}\n");
            let f = ClientFrame::Stdin {
                data: line.into_bytes(),
                eof: false,
            };
            if let Err(e) = ws.send(f.encode()) {
                break ExecEnd::ExitLost(format!("sending stdin: {e}"));
            }
            sent += 1;
            deadline = Instant::now() + STALL;
            // A little pacing, so streams live long enough to meet faults.
            std::thread::sleep(Duration::from_millis(rng.random_range(5..30)));
        }
        if Instant::now() >= deadline {
            break ExecEnd::Stalled(format!(
                "nothing for {} s after {echoed}/{lines} echoes",
                STALL.as_secs()
            ));
        }
        let m = match ws_read(&mut ws) {
            Got::Idle => continue,
            Got::Closed(code, reason) => {
                break ExecEnd::ExitLost(format!(
                    "closed ({code:?} {reason}) after {echoed}/{lines} echoes without exit or error"
                ))
            }
            Got::Msg(m) => m,
        };
        let frame = match ServerFrame::decode(&m) {
            Ok(Some(f)) => f,
            Ok(None) => continue,
            Err(e) => break ExecEnd::ExitLost(format!("bad frame: {}", e.0)),
        };
        match frame {
            ServerFrame::Target(_) => got_target = true,
            ServerFrame::Stdout(d) => {
                deadline = Instant::now() + STALL;
                out.extend_from_slice(&d);
                while let Some(p) = out.iter().position(|b| *b == b'\n') {
                    let l: Vec<u8> = out.drain(..=p).collect();
                    let want = format!("x{w}-{iter}-{echoed}\n");
                    if l != want.as_bytes() {
                        let mut t = sh.execs.lock();
                        t.lost_bytes += want.len() as u64;
                        t.detail(format!(
                            "exec {w}/{iter}: echo {:?} where {want:?} was due",
                            String::from_utf8_lossy(&l)
                        ));
                    }
                    echoed += 1;
                    let mut t = sh.execs.lock();
                    t.lines += 1;
                    t.bytes += l.len() as u64;
                }
            }
            ServerFrame::Stderr(d) => {
                sh.execs.lock().detail(format!(
                    "exec {w}/{iter}: stderr {:?}",
                    String::from_utf8_lossy(&d)
                ));
            }
            ServerFrame::Exit(e) => {
                break if echoed == lines && e.exit_code == EXEC_EXIT {
                    ExecEnd::Completed
                } else {
                    ExecEnd::ExitWrong(format!(
                        "exit {} ({:?} {:?}) after {echoed}/{lines} echoes",
                        e.exit_code, e.reason, e.message
                    ))
                };
            }
            ServerFrame::Error(e) => {
                break ExecEnd::Error(format!("{}: {}", e.code.as_str(), e.message));
            }
        }
    };
    steady.store(false, Ordering::SeqCst);
    ws_close(ws);
    (end, echoed)
}

pub(crate) fn exec_worker(sh: &Shared, w: usize, mut rng: StdRng) {
    let mut iter = 0u64;
    while !sh.stopping() {
        let lines = rng.random_range(40..120);
        sh.execs.lock().started += 1;
        let (end, _) = exec_once(sh, w, iter, lines, &mut rng);
        iter += 1;
        let mut t = sh.execs.lock();
        let code = |s: &str| s.split(':').next().unwrap_or(s).to_string();
        let retry = match end {
            ExecEnd::Completed => {
                t.completed += 1;
                false
            }
            ExecEnd::Error(e) => {
                *t.errors.entry(code(&e)).or_default() += 1;
                *t.messages.entry(e).or_default() += 1;
                true
            }
            ExecEnd::Refused(e) => {
                *t.refused.entry(code(&e)).or_default() += 1;
                *t.messages.entry(format!("refused: {e}")).or_default() += 1;
                true
            }
            ExecEnd::ExitWrong(d) => {
                t.exit_wrong += 1;
                t.detail(format!("exec {w}/{iter}: WRONG {d}"));
                false
            }
            ExecEnd::ExitLost(d) => {
                t.exit_lost += 1;
                t.detail(format!("exec {w}/{iter}: LOST {d}"));
                false
            }
            ExecEnd::Stalled(d) => {
                t.stalled += 1;
                t.detail(format!("exec {w}/{iter}: STALLED {d}"));
                false
            }
        };
        drop(t);
        if retry {
            pause(Duration::from_millis(300), || sh.stopping());
        }
    }
}
