//! The reader thread of a process: moves output from its pipes or pty master
//! to where it goes.
//!
//! - Exec (`Sink::Exec`): a bounded channel. `send` waits while the consumer
//!   is behind, so the pipe fills and the command blocks in `write`: this is
//!   the backpressure, and nothing is ever dropped. After the last byte, the
//!   thread waits for the process's exit and only then drops the sender, so
//!   "channel disconnected" means "all output delivered and exit known".
//! - Container (`Sink::Log`): the log ring, which never blocks (slow
//!   subscribers are cut, see `logring.rs`).
//!
//! One thread per process (small stack) rather than one poller for all: it
//! keeps the exec backpressure a plain blocking `send`. Idle containers have
//! no output and no thread.

use super::logring::LogRing;
use super::process::ProcShared;
use crossbeam_channel::Sender;
use rustix::event::{poll, PollFd, PollFlags, Timespec};
use rustix::io::Errno;
use std::io;
use std::os::fd::OwnedFd;
use std::sync::Arc;
use std::time::{Duration, SystemTime};

/// Which stream a chunk came from. With a tty, stdout and stderr are one
/// stream: `Tty`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Stream {
    Stdout,
    Stderr,
    Tty,
}

/// A piece of output as one `read` returned it (at most 64 KiB).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct OutputChunk {
    pub stream: Stream,
    pub data: Vec<u8>,
    /// When the sim read it (the log timestamp).
    pub ts: SystemTime,
}

pub(super) enum Sink {
    Exec(Sender<OutputChunk>),
    Log(Arc<LogRing>),
}

const READ_BUF: usize = 64 * 1024;
/// Enough for poll + a heap buffer; thousands of these may exist.
const READER_STACK: usize = 128 * 1024;

pub(super) fn set_nonblocking(fd: &OwnedFd) -> io::Result<()> {
    use rustix::fs::{fcntl_getfl, fcntl_setfl, OFlags};
    let flags = fcntl_getfl(fd)?;
    fcntl_setfl(fd, flags | OFlags::NONBLOCK)?;
    Ok(())
}

fn timespec(d: Duration) -> Timespec {
    Timespec {
        tv_sec: d.as_secs() as _,
        tv_nsec: d.subsec_nanos() as _,
    }
}

/// Waits until `fd` is writable or `timeout` passes.
pub(super) fn wait_writable(fd: &OwnedFd, timeout: Duration) -> io::Result<()> {
    let mut fds = [PollFd::new(fd, PollFlags::OUT)];
    match poll(&mut fds, Some(&timespec(timeout))) {
        Ok(_) | Err(Errno::INTR) => Ok(()),
        Err(e) => Err(e.into()),
    }
}

pub(super) fn spawn_reader(
    fds: Vec<(Arc<OwnedFd>, Stream)>,
    sink: Sink,
    proc: Arc<ProcShared>,
) -> io::Result<()> {
    std::thread::Builder::new()
        .name("sim-output".into())
        .stack_size(READER_STACK)
        .spawn(move || reader_loop(fds, sink, proc))?;
    Ok(())
}

fn reader_loop(mut open: Vec<(Arc<OwnedFd>, Stream)>, sink: Sink, proc: Arc<ProcShared>) {
    let mut buf = vec![0u8; READ_BUF];
    // An exec's consumer went away while the process has a pty: the master
    // stays open (stdin, resize), so output is read and dropped rather than
    // left to fill the terminal and block the process.
    let mut discard = false;
    while !open.is_empty() {
        let timeout = match &sink {
            Sink::Log(ring) if ring.has_pending() => Some(timespec(Duration::from_millis(50))),
            _ => None,
        };
        let ready: Vec<bool> = {
            let mut pfds: Vec<PollFd<'_>> = open
                .iter()
                .map(|(fd, _)| PollFd::new(&**fd, PollFlags::IN))
                .collect();
            match poll(&mut pfds, timeout.as_ref()) {
                Ok(_) | Err(Errno::INTR) => {}
                Err(e) => {
                    log::error!("sim output reader: poll: {e}");
                    break;
                }
            }
            pfds.iter().map(|p| !p.revents().is_empty()).collect()
        };
        if let Sink::Log(ring) = &sink {
            ring.tick();
        }
        let mut closed = Vec::new();
        for (i, (fd, stream)) in open.iter().enumerate() {
            if !ready[i] {
                continue;
            }
            match rustix::io::read(&**fd, &mut buf) {
                // EOF; a pty master reads EIO once no slave fd is left.
                Ok(0) | Err(Errno::IO) => closed.push(i),
                Ok(_) if discard => {}
                Ok(n) => {
                    let chunk = OutputChunk {
                        stream: *stream,
                        data: buf[..n].to_vec(),
                        ts: SystemTime::now(),
                    };
                    match &sink {
                        Sink::Log(ring) => ring.push(chunk),
                        Sink::Exec(tx) => {
                            if tx.send(chunk).is_err() {
                                if *stream == Stream::Tty {
                                    discard = true;
                                } else {
                                    // The consumer is gone: close our ends
                                    // (the command gets EPIPE/SIGPIPE).
                                    closed = (0..open.len()).collect();
                                    break;
                                }
                            }
                        }
                    }
                }
                Err(Errno::AGAIN) | Err(Errno::INTR) => {}
                Err(e) => {
                    log::warn!("sim output reader: read: {e}");
                    closed.push(i);
                }
            }
        }
        for i in closed.into_iter().rev() {
            open.remove(i);
        }
    }
    match sink {
        Sink::Exec(tx) => {
            proc.wait_reaped();
            drop(tx);
        }
        Sink::Log(ring) => {
            ring.finish();
            proc.set_io_done();
        }
    }
}
