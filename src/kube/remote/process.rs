//! A running exec/attach stream and its handles, on two threads:
//!
//! ```text
//!  StdinWriter::write ─┐                       ┌─> socket
//!  resize / cancel ────┴─> Outbox (bounded, 16) ┤ kube-remote-io: http::ws::run_stream,
//!                                               │ poll(2) on socket + eventfd waker
//!  socket ──> pump ─> inbound (bounded, 16) ────┘
//!           kube-remote-out: Demux ─> Output channel (bounded, output_capacity)
//!                                  └> channel 3 collected for wait()
//! ```
//!
//! `kube-remote-io` owns the socket; it never blocks on the inbound channel
//! (a message the channel cannot take is held, and the socket is not read
//! until it can: TCP backpressure reaches the server, nothing is dropped)
//! and keeps sending stdin while output is held, so stdin writes cannot
//! deadlock against unread output inside this client. `kube-remote-out`
//! blocks on the bounded Output channel: a slow consumer slows everything
//! down to its pace. Both threads end when the socket ends; `wait` joins
//! them.
//!
//! [`SinkProcess`] (`attach_into`) is the one-thread variant: the pump
//! hands each message to the demux in place ([`Inbound`]) and the output to
//! a sink that must never block; no output channel, no `kube-remote-out`.
//!
//! Like an OS pipe pair, a consumer that writes stdin and never reads
//! output can still deadlock with a remote process that stops reading its
//! stdin because its stdout is full (`cat`): read output on another thread.

use super::connect::Opened;
use super::demux::{Demux, ExitStatus, Output};
use super::error::RemoteError;
use super::request::{Kind, Streams};
use crate::http::ws::{
    run_stream, run_stream_into, try_outbox, Inbound, Outbox, OutboxReceiver, Refused, WsEnd,
    WsOptions,
};
use crate::kube::channel::{
    encode_frame, encode_resize, Protocol, TermSize, CLOSE_STDIN_V5, STDIN,
};
use crossbeam_channel::{bounded, Receiver};
use parking_lot::Mutex;
use std::io;
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::Duration;
use tungstenite::protocol::frame::coding::CloseCode;
use tungstenite::protocol::CloseFrame;
use tungstenite::Message;

/// Largest stdin payload per frame (kubectl: 32 KiB + the channel byte).
pub const MAX_STDIN_CHUNK: usize = 32 * 1024;
/// Messages queued towards the socket (stdin, resizes). Each is at most
/// 32 KiB + 1, so at most ~512 KiB in flight per stream.
const OUTBOX_CAPACITY: usize = 16;
/// Messages between the pump and the demux thread: 16.
const INBOUND_CAPACITY: usize = 16;
/// How long a Close we send waits for the server's reply.
const CLOSE_TIMEOUT: Duration = Duration::from_secs(5);

/// The settings [`super::exec`]/[`super::attach`] start threads with.
pub(crate) struct StartOptions {
    pub kind: Kind,
    pub streams: Streams,
    pub initial_size: Option<TermSize>,
    pub output_capacity: usize,
    pub raw_frames: bool,
    pub ping_interval: Option<Duration>,
    pub idle_timeout: Option<Duration>,
}

/// A running remote process (exec) or an attachment to a container's main
/// process (attach). See the module docs for the threads behind it.
///
/// Dropping it without [`RemoteProcess::wait`] closes the stream (a
/// WebSocket Close 1000; the server then ends an exec'd process) and
/// detaches the threads, which end with the socket.
pub struct RemoteProcess {
    kind: Kind,
    protocol: Protocol,
    streams: Streams,
    outbox: Option<Outbox>,
    /// The demux thread's way to wake the pump; emptied when this handle
    /// goes, so it never keeps the stream open by itself.
    room: Arc<Mutex<Option<Outbox>>>,
    output: Option<Receiver<Output>>,
    io: Option<JoinHandle<WsEnd>>,
    demux: Option<JoinHandle<Demux>>,
}

/// The stream's outbox, with the first terminal size already in it (it
/// goes out before any stdin, as kubectl does), and the pump's settings.
fn outbox_and_options(
    o: &StartOptions,
) -> Result<(Outbox, OutboxReceiver, WsOptions), RemoteError> {
    let (outbox, out_rx) = try_outbox(OUTBOX_CAPACITY)
        .map_err(|e| RemoteError::Transport(format!("creating the stream's waker: {e}")))?;
    if let (true, Some(size)) = (o.streams.tty, o.initial_size) {
        let _ = outbox.try_send(Message::Binary(encode_resize(size).into()));
    }
    let ws_opts = WsOptions {
        ping_interval: o.ping_interval,
        idle_timeout: o.idle_timeout,
        close_timeout: CLOSE_TIMEOUT,
    };
    Ok((outbox, out_rx, ws_opts))
}

pub(crate) fn start(opened: Opened, o: StartOptions) -> Result<RemoteProcess, RemoteError> {
    let Opened { ws, protocol } = opened;
    let (outbox, out_rx, ws_opts) = outbox_and_options(&o)?;
    let (in_tx, in_rx) = bounded::<Message>(INBOUND_CAPACITY);
    let (o_tx, o_rx) = bounded::<Output>(o.output_capacity.max(1));
    let io = std::thread::Builder::new()
        .name("kube-remote-io".into())
        .spawn(move || run_stream(ws, out_rx, in_tx, ws_opts))
        .map_err(|e| RemoteError::Transport(format!("spawning the stream thread: {e}")))?;
    let room = Arc::new(Mutex::new(Some(outbox.clone())));
    let room_out = room.clone();
    let raw_frames = o.raw_frames;
    let demux = std::thread::Builder::new()
        .name("kube-remote-out".into())
        .spawn(move || {
            let mut d = Demux::new(protocol);
            if raw_frames {
                d = d.raw_frames();
            }
            let mut out = Some(o_tx);
            for m in in_rx.iter() {
                if in_rx.len() + 1 >= INBOUND_CAPACITY {
                    wake_pump(&room_out);
                }
                if let Some(chunk) = d.message(m) {
                    // Blocking send: the backpressure. A consumer that
                    // dropped every receiver no longer wants output; keep
                    // draining for the status.
                    if out.as_ref().is_some_and(|tx| tx.send(chunk).is_err()) {
                        out = None;
                    }
                }
            }
            d
        });
    let demux = match demux {
        Ok(h) => h,
        Err(e) => {
            // The pump closes the socket once its last Outbox is gone.
            room.lock().take();
            drop(outbox);
            let _ = io.join();
            return Err(RemoteError::Transport(format!(
                "spawning the output thread: {e}"
            )));
        }
    };
    Ok(RemoteProcess {
        kind: o.kind,
        protocol,
        streams: o.streams,
        outbox: Some(outbox),
        room,
        output: Some(o_rx),
        io: Some(io),
        demux: Some(demux),
    })
}

/// What a [`SinkProcess`] does with output: called on the stream's own
/// thread for every chunk, in order. It must not block (the socket is not
/// read meanwhile); push into a buffer that drops or closes its own slow
/// readers instead.
pub type OutputSink = Box<dyn FnMut(Output) + Send>;
/// Called once on the stream's thread when it ends: the verdict
/// [`RemoteProcess::wait`] would give.
pub type EndSink = Box<dyn FnOnce(Result<ExitStatus, RemoteError>) + Send>;

/// A running stream whose output goes to an [`OutputSink`] on the
/// stream's one thread (`kube-remote-io` demultiplexes in place): no
/// output channel and no second thread. For long-lived, mostly idle
/// streams whose consumer never blocks (a watch session's attaches).
/// Dropping it closes the stream (a Close 1000, as [`RemoteProcess`]).
pub struct SinkProcess {
    protocol: Protocol,
    streams: Streams,
    outbox: Option<Outbox>,
    thread: Option<JoinHandle<()>>,
}

/// Feeds each message through the demux into the sink.
struct DemuxSink {
    demux: Demux,
    sink: OutputSink,
}

impl Inbound for DemuxSink {
    fn offer(&mut self, m: Message) -> Result<(), Refused> {
        if let Some(out) = self.demux.message(m) {
            (self.sink)(out);
        }
        Ok(())
    }
}

pub(crate) fn start_sink(
    opened: Opened,
    o: StartOptions,
    sink: OutputSink,
    on_end: EndSink,
) -> Result<SinkProcess, RemoteError> {
    let Opened { ws, protocol } = opened;
    let (outbox, out_rx, ws_opts) = outbox_and_options(&o)?;
    let kind = o.kind;
    let mut demux = Demux::new(protocol);
    if o.raw_frames {
        demux = demux.raw_frames();
    }
    let thread = std::thread::Builder::new()
        .name("kube-remote-io".into())
        .spawn(move || {
            let (end, s) = run_stream_into(ws, out_rx, DemuxSink { demux, sink }, ws_opts);
            drop(s.sink);
            on_end(s.demux.finish(kind, &end));
        })
        .map_err(|e| RemoteError::Transport(format!("spawning the stream thread: {e}")))?;
    Ok(SinkProcess {
        protocol,
        streams: o.streams,
        outbox: Some(outbox),
        thread: Some(thread),
    })
}

impl SinkProcess {
    /// See [`RemoteProcess::protocol`].
    pub fn protocol(&self) -> Protocol {
        self.protocol
    }

    /// See [`RemoteProcess::stdin`].
    pub fn stdin(&self) -> StdinWriter {
        StdinWriter::new(&self.outbox, self.protocol, self.streams)
    }

    /// See [`RemoteProcess::controller`].
    pub fn controller(&self) -> Controller {
        Controller {
            outbox: self.outbox.clone(),
        }
    }

    /// Whether the stream's thread is done (the end callback has run).
    pub fn is_finished(&self) -> bool {
        self.thread.as_ref().is_none_or(JoinHandle::is_finished)
    }
}

impl Drop for SinkProcess {
    fn drop(&mut self) {
        if let Some(o) = self.outbox.take() {
            // Best effort without blocking; a full queue gets its Close
            // when the last Outbox clone (a StdinWriter's) goes.
            let _ = o.try_send(close_normal());
        }
        // Detached: the thread ends with the socket.
        self.thread.take();
    }
}

impl RemoteProcess {
    /// The negotiated subprotocol. On [`Protocol::V4`] stdin cannot be
    /// closed on its own (see [`StdinWriter::close`]): a caller that needs
    /// stdin EOF should warn that output may be truncated.
    pub fn protocol(&self) -> Protocol {
        self.protocol
    }

    /// The output channel (a clone of the receiver; clone it into a reader
    /// thread). Chunks come in arrival order; the channel disconnects when
    /// the stream is over. Read it to the end (until `recv` fails) or drop
    /// every clone: a clone kept but not read holds the stream open, and
    /// `wait` with it.
    pub fn output(&self) -> Receiver<Output> {
        match &self.output {
            Some(rx) => rx.clone(),
            // Not reachable: only `wait` (which consumes self) takes it.
            None => bounded(0).1,
        }
    }

    /// A writer for the process's stdin (an error on write when stdin was
    /// not requested).
    pub fn stdin(&self) -> StdinWriter {
        StdinWriter::new(&self.outbox, self.protocol, self.streams)
    }

    /// A handle to resize the terminal or cancel the stream from another
    /// thread.
    pub fn controller(&self) -> Controller {
        Controller {
            outbox: self.outbox.clone(),
        }
    }

    /// Sends a terminal size (channel 4). Meaningful only with a tty.
    pub fn resize(&self, size: TermSize) -> Result<(), RemoteError> {
        self.controller().resize(size)
    }

    /// Waits for the stream to end and returns the process's exit code from
    /// channel 3: 0 for Success, N for NonZeroExitCode (137 for a process
    /// killed by SIGKILL). Other Failures are [`RemoteError::Status`]; a
    /// stream that ended without any status is [`RemoteError::NoStatus`],
    /// never exit code 0. Attach: Success on a normal end.
    ///
    /// Output still in the channel is discarded unless a clone of the
    /// receiver is alive (then it must be read, see [`RemoteProcess::output`]).
    pub fn wait(mut self) -> Result<ExitStatus, RemoteError> {
        self.output = None;
        // The demux thread ends after the pump (its inbound sender is the
        // pump's); the Outbox stays alive until then so the stream is not
        // closed under the server's feet.
        let demux = self.demux.take().map(JoinHandle::join);
        let end = match self.io.take().map(JoinHandle::join) {
            Some(Ok(end)) => end,
            _ => WsEnd::Error("the stream thread panicked".into()),
        };
        self.outbox = None;
        match demux {
            Some(Ok(d)) => d.finish(self.kind, &end),
            _ => Err(RemoteError::NoStatus {
                ended: "the output thread panicked".into(),
            }),
        }
    }
}

impl Drop for RemoteProcess {
    fn drop(&mut self) {
        self.room.lock().take();
        if self.io.is_some() {
            if let Some(o) = &self.outbox {
                // Best effort without blocking: if the queue is full, the
                // Close follows when the last Outbox (ours, and any
                // StdinWriter's) is dropped.
                let _ = o.try_send(close_normal());
            }
        }
    }
}

/// Tells the pump there is room in its inbound channel again. The pump
/// retries a message it holds only every 2 ms on its own (`http::ws`
/// HELD_RETRY); without this prompt wake a bulk stream whose consumer fell
/// behind once settles at one message per retry (measured: 9 MB/s instead
/// of ~500 MB/s). No message is sent: dropping an `Outbox` clone signals
/// the pump's waker (`impl Drop for Outbox`), and the pump polls that
/// waker while it holds a message and may write. TODO(http::ws): an
/// explicit `Outbox::wake`, and polling the waker whenever a message is
/// held, would make this independent of that detail.
fn wake_pump(room: &Mutex<Option<Outbox>>) {
    if let Some(o) = room.lock().as_ref() {
        o.wake();
    }
}

fn close_normal() -> Message {
    Message::Close(Some(CloseFrame {
        code: CloseCode::Normal,
        reason: "".into(),
    }))
}

/// Splits stdin data into channel-0 frames of at most [`MAX_STDIN_CHUNK`]
/// payload bytes. Empty input gives no frame: `[0]` alone would read as an
/// open marker.
pub fn stdin_frames(data: &[u8]) -> impl Iterator<Item = Vec<u8>> + '_ {
    data.chunks(MAX_STDIN_CHUNK)
        .map(|chunk| encode_frame(STDIN, chunk))
}

/// Writes the process's stdin. Each `write` blocks while the stream's
/// outbound queue is full (backpressure from the socket and the server).
///
/// Closing stdin: on v5, [`StdinWriter::close`] sends `[255, 0]`; the
/// process sees EOF and its output keeps flowing to the end. On v4 there is
/// no half-close, and this client does NOT close the socket for you:
/// `close` returns [`RemoteError::HalfCloseUnsupported`] and sends nothing,
/// so output is never truncated silently. A caller that must end the
/// process's input anyway can cancel the whole stream
/// ([`Controller::cancel`]), accepting that the tail of the output and the
/// exit status may be lost (`wait` then reports `NoStatus`).
///
/// Dropping a writer does not close stdin (several writers may exist).
pub struct StdinWriter {
    outbox: Option<Outbox>,
    protocol: Protocol,
    enabled: bool,
    closed: bool,
}

impl StdinWriter {
    fn new(outbox: &Option<Outbox>, protocol: Protocol, streams: Streams) -> StdinWriter {
        StdinWriter {
            outbox: outbox.clone(),
            protocol,
            enabled: streams.stdin,
            closed: false,
        }
    }

    fn queue(&self, m: Message) -> Result<(), RemoteError> {
        match &self.outbox {
            Some(o) => o.send(m).map_err(|_| RemoteError::Closed),
            None => Err(RemoteError::Closed),
        }
    }

    fn check(&self) -> Result<(), RemoteError> {
        if !self.enabled {
            return Err(RemoteError::InvalidRequest(
                "stdin was not requested for this stream".into(),
            ));
        }
        if self.closed {
            return Err(RemoteError::Closed);
        }
        Ok(())
    }

    /// Sends all of `data`, in frames of at most 32 KiB.
    pub fn write(&mut self, data: &[u8]) -> Result<(), RemoteError> {
        self.check()?;
        for frame in stdin_frames(data) {
            self.queue(Message::Binary(frame.into()))?;
        }
        Ok(())
    }

    /// Signals EOF (v5), see the type's docs for v4. Idempotent.
    pub fn close(&mut self) -> Result<(), RemoteError> {
        if self.closed {
            return Ok(());
        }
        self.check()?;
        if !self.protocol.supports_close() {
            return Err(RemoteError::HalfCloseUnsupported);
        }
        self.queue(Message::Binary(CLOSE_STDIN_V5.to_vec().into()))?;
        self.closed = true;
        // Our Outbox clone must not keep the stream open any longer.
        self.outbox = None;
        Ok(())
    }
}

impl io::Write for StdinWriter {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        match StdinWriter::write(self, buf) {
            Ok(()) => Ok(buf.len()),
            Err(RemoteError::Closed) => Err(io::ErrorKind::BrokenPipe.into()),
            Err(e) => Err(io::Error::other(e)),
        }
    }

    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

/// Resizes the terminal or cancels the stream, from any thread.
#[derive(Clone)]
pub struct Controller {
    outbox: Option<Outbox>,
}

impl Controller {
    /// Sends a terminal size on channel 4 (`{"Width":W,"Height":H}\n`).
    pub fn resize(&self, size: TermSize) -> Result<(), RemoteError> {
        match &self.outbox {
            Some(o) => o
                .send(Message::Binary(encode_resize(size).into()))
                .map_err(|_| RemoteError::Closed),
            None => Err(RemoteError::Closed),
        }
    }

    /// Ends the stream now with a WebSocket Close (1000). The server stops
    /// an exec'd process; `wait` then reports whatever status had arrived,
    /// usually `NoStatus`. Waits at most 5 s for room in the queue.
    pub fn cancel(&self) -> Result<(), RemoteError> {
        match &self.outbox {
            Some(o) => o
                .send_timeout(close_normal(), CLOSE_TIMEOUT)
                .map_err(|_| RemoteError::Closed),
            None => Err(RemoteError::Closed),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stdin_is_framed_in_32k_chunks() {
        assert_eq!(stdin_frames(b"").count(), 0);
        assert_eq!(
            stdin_frames(b"ab").collect::<Vec<_>>(),
            vec![b"\x00ab".to_vec()]
        );
        let data: Vec<u8> = (0..(2 * MAX_STDIN_CHUNK + 5)).map(|i| i as u8).collect();
        let frames: Vec<Vec<u8>> = stdin_frames(&data).collect();
        assert_eq!(
            frames.iter().map(Vec::len).collect::<Vec<_>>(),
            vec![MAX_STDIN_CHUNK + 1, MAX_STDIN_CHUNK + 1, 6]
        );
        assert!(frames.iter().all(|f| f[0] == STDIN));
        let joined: Vec<u8> = frames.iter().flat_map(|f| f[1..].to_vec()).collect();
        assert_eq!(joined, data);
    }
}
