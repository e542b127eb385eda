//! A Kubernetes attach into an [`AppIo`]: output pushed in place from the
//! stream's own thread, the attach's input installed into the `AppIo`,
//! its end reported through a callback.

use super::input::AttachInput;
use super::ring::AppIo;
use crate::kube::connection::Connection;
use crate::kube::remote::{self, ExecOptions, Output, RemoteError, SinkProcess};
use crate::session::machine::OutStream;
use parking_lot::Mutex;
use std::sync::Arc;

/// A running attach (see [`attach`]). Dropping it closes it.
pub struct AttachHandle {
    on_end: Arc<Mutex<Option<EndFn>>>,
    io: Arc<AppIo>,
    input_id: u64,
    process: Option<SinkProcess>,
}

type EndFn = Box<dyn FnOnce(Result<(), RemoteError>) + Send>;

impl AttachHandle {
    /// Ends the attach without waiting: the input is removed from the
    /// `AppIo` and the stream is closed (a Close 1000 queued without
    /// blocking). The `on_end` callback is not called after this (unless
    /// it was already running).
    pub fn close(mut self) {
        self.stop_now();
    }

    /// Whether the stream's thread is done (the stream ended or was closed).
    pub fn is_finished(&self) -> bool {
        self.process.as_ref().is_none_or(SinkProcess::is_finished)
    }

    fn stop_now(&mut self) {
        self.on_end.lock().take();
        self.io.clear_input(self.input_id);
        self.process.take();
    }
}

impl Drop for AttachHandle {
    fn drop(&mut self) {
        self.stop_now();
    }
}

/// Attaches to `container` of `namespace/pod` (stdin on, `tty` as
/// declared; without a tty stdout and stderr stay apart as streams 1 and
/// 2, with one everything is stream 0) and pushes its output into `io`
/// from the stream's own thread (`kube-remote-io`, one per attach: the
/// ring never blocks, so no output channel or relay thread is needed);
/// installs the attach's input into `io`. Blocks for the connect and
/// upgrade (up to 30 s): call it off the session's owner thread. With a tty
/// the stream starts at the last size a viewer asked for.
///
/// `on_end` is called once, from the stream's thread, when the stream ends
/// by itself: `Ok(())` for a normal end (the container's process exited or
/// closed its streams), `Err` with the reason otherwise. It is not called
/// after [`AttachHandle::close`].
pub fn attach(
    conn: &Connection,
    namespace: &str,
    pod: &str,
    container: &str,
    tty: bool,
    io: Arc<AppIo>,
    on_end: impl FnOnce(Result<(), RemoteError>) + Send + 'static,
) -> Result<AttachHandle, RemoteError> {
    let opts = ExecOptions {
        stdin: true,
        stdout: true,
        stderr: !tty,
        tty,
        initial_size: if tty { io.term_size() } else { None },
        // Held for the session's life, mostly idle: a small read buffer.
        read_buffer_bytes: Some(remote::SMALL_READ_BUFFER),
        ..ExecOptions::default()
    };
    let on_end: Arc<Mutex<Option<EndFn>>> = Arc::new(Mutex::new(Some(Box::new(on_end))));
    // The input id is known only once the stream is open; the end
    // callback (which may run at once) reads it from here.
    let input_slot: Arc<Mutex<Option<u64>>> = Arc::new(Mutex::new(None));
    let out_stream = if tty {
        OutStream::Tty
    } else {
        OutStream::Stdout
    };
    let sink = {
        let io = io.clone();
        Box::new(move |o: Output| match o {
            Output::Stdout(d) => {
                io.push(out_stream, d);
            }
            Output::Stderr(d) => {
                io.push(OutStream::Stderr, d);
            }
            // Not asked for (raw_frames is off); handled anyway:
            // `[channel][data]`, copied so the ring never pins a larger
            // read buffer.
            Output::Frame(f) => {
                let s = if f.first() == Some(&2) {
                    OutStream::Stderr
                } else {
                    out_stream
                };
                io.push(s, f.get(1..).unwrap_or_default().to_vec());
            }
        })
    };
    let end = {
        let io = io.clone();
        let on_end = on_end.clone();
        let input_slot = input_slot.clone();
        Box::new(move |r: Result<remote::ExitStatus, RemoteError>| {
            if let Some(id) = *input_slot.lock() {
                io.clear_input(id);
            }
            let cb = on_end.lock().take();
            if let Some(cb) = cb {
                cb(r.map(|_| ()));
            }
        })
    };
    let process = remote::attach_into(conn, namespace, pod, Some(container), opts, sink, end)?;
    let input_id = {
        // Under the slot's lock: an end racing with this sees either no id
        // (and this installs an input the finished stream refuses: cleared
        // below) or the id.
        let mut slot = input_slot.lock();
        let id = io.set_input(Some(AttachInput {
            stdin: process.stdin(),
            controller: process.controller(),
            tty,
        }));
        *slot = Some(id);
        id
    };
    if process.is_finished() {
        io.clear_input(input_id);
    }
    Ok(AttachHandle {
        on_end,
        io,
        input_id,
        process: Some(process),
    })
}
