//! Exec and attach over a plain SPDY/3.1 upgrade: the kubelet's
//! remotecommand server as the API server's stream translator (and any
//! client-go SPDY executor) reaches it.
//!
//! The upgrade's 101 names the negotiated subprotocol
//! (`X-Stream-Protocol-Version`, [`super::streams::negotiate`]). Then:
//!
//! - the connection's thread pumps the socket (`http::raw::run`, idle
//!   bound [`IDLE_TIMEOUT`]);
//! - `sim-kapi-spdy` (1 per session) owns the SPDY decoder and encoder:
//!   it answers the client's SYN_STREAMs ([`super::streams::StreamSet`]),
//!   echoes PINGs, and once the set is complete starts (exec) or finds
//!   (attach) the process; then it writes stdin DATA to the process
//!   (blocking: a process that does not read stops this thread, the
//!   bounded inbound channel fills and the pump stops reading the socket),
//!   turns stdin's FIN into the process's stdin EOF, and resize DATA
//!   (JSON `{"Width","Height"}` values) into window sizes;
//! - `sim-kapi-out` (1 per session) moves process output into DATA frames
//!   on the stdout/stderr streams through the bounded outbox (waiting when
//!   it is full: backpressure to the process), then FINs them, writes the
//!   final Status on the error stream ([`super::streams::final_words`]),
//!   FINs it and closes the connection.
//!
//! A set that is not complete within 30 s, or a frame error, ends the
//! connection (GOAWAY); an exec's process never outlives its connection.

use super::streams::{self, Offer, StreamSet, StreamType, Version, Wanted};
use crate::http::raw::{self, RawConn, RawUpgrade};
use crate::http::ws::{self, Outbox};
use crate::http::Reply;
use crate::kube::channel::{self, ResizeDecoder};
use crate::kube::spdy::{
    write_data, Decoder, Encoder, Frame, Headers, Limits, Role, GOAWAY_OK, RST_CANCEL,
    RST_PROTOCOL_ERROR,
};
use crate::sim::podio::{ExitWording, Mode, Opened, Prepared};
use crate::sim::runtime::{OutputChunk, Process, Stream};
use crossbeam_channel::{bounded, Receiver, RecvTimeoutError, Sender};
use std::sync::Arc;
use std::time::{Duration, Instant};
use tungstenite::Message;

/// How long a session may go without a byte from the client (the
/// kubelet's `--streaming-connection-idle-timeout` default: 4 h).
pub const IDLE_TIMEOUT: Duration = Duration::from_secs(4 * 60 * 60);
/// Messages queued from the session and its output thread to the pump.
const QUEUE: usize = 64;
/// Messages queued from the pump to the session (chunks of at most
/// 64 KiB: 1 MiB held per session at most).
const INBOUND: usize = 16;
/// Stdin bytes held for a process not yet started; more ends the session.
const MAX_EARLY_STDIN: usize = 1 << 20;
/// GOAWAY status: protocol error.
const GOAWAY_PROTOCOL_ERROR: u32 = 1;

/// The raw 101 upgrade of a prepared exec or attach.
pub(crate) fn upgrade(p: Prepared, version: Version) -> Reply {
    Reply::RawUpgrade(RawUpgrade {
        headers: vec![
            ("Connection".into(), "Upgrade".into()),
            ("Upgrade".into(), "SPDY/3.1".into()),
            ("X-Stream-Protocol-Version".into(), version.name().into()),
        ],
        on_open: Box::new(move |conn: RawConn| serve(conn, p, version)),
    })
}

fn serve(conn: RawConn, p: Prepared, version: Version) {
    let Ok((out, out_rx)) = ws::try_outbox(QUEUE) else {
        return;
    };
    let (in_tx, in_rx) = bounded::<Message>(INBOUND);
    let (proc_tx, proc_rx) = bounded::<Arc<Process>>(1);
    let session = std::thread::Builder::new()
        .name("sim-kapi-spdy".into())
        .spawn(move || Session::new(out, p, version).run(&in_rx, &proc_tx));
    let Ok(session) = session else {
        log::warn!("kubelet API: no session thread");
        return;
    };
    let _ = raw::run(conn, out_rx, in_tx, Some(IDLE_TIMEOUT));
    // The client is gone or the session is over: an exec's process may
    // not outlive it (this also ends a stdin write the session blocks on).
    // The session hands its exec's process over when it starts it; it
    // drops the sender when it ends (an attach never sends).
    if let Ok(process) = proc_rx.recv() {
        if process.exited().is_none() {
            process.kill();
        }
    }
    let _ = session.join();
}

struct Session {
    out: Outbox,
    enc: Encoder,
    dec: Decoder,
    version: Version,
    set: StreamSet,
    last_id: u32,
    flags_mode: Mode,
    close_stdin_on_eof: bool,
    wording: ExitWording,
    open: Option<Box<dyn FnOnce() -> Opened + Send>>,
    /// Stdin bytes (and its EOF) that came before the process.
    early_stdin: Vec<u8>,
    early_eof: bool,
    resize: ResizeDecoder,
    process: Option<Arc<Process>>,
    out_thread: Option<std::thread::JoinHandle<()>>,
}

/// Why a session ends.
enum End {
    /// The client went away or the output thread closed the connection.
    Done,
    /// A frame error or a broken rule: GOAWAY PROTOCOL_ERROR.
    Protocol(String),
    /// The stream set did not come in time: GOAWAY OK.
    Timeout,
}

impl Session {
    fn new(out: Outbox, p: Prepared, version: Version) -> Session {
        let wanted = Wanted {
            stdin: p.flags.stdin,
            stdout: p.flags.stdout,
            stderr: p.flags.stderr,
            tty: p.flags.tty,
        };
        Session {
            out,
            enc: Encoder::new(),
            dec: Decoder::new(Limits::DEFAULT),
            version,
            set: StreamSet::new(version, wanted, Instant::now()),
            last_id: 0,
            flags_mode: p.mode,
            close_stdin_on_eof: p.close_stdin_on_eof,
            wording: p.wording,
            open: Some(p.open),
            early_stdin: Vec::new(),
            early_eof: false,
            resize: ResizeDecoder::new(),
            process: None,
            out_thread: None,
        }
    }

    fn run(mut self, inbound: &Receiver<Message>, proc_tx: &Sender<Arc<Process>>) {
        let end = self.serve(inbound, proc_tx);
        match end {
            End::Done => {}
            End::Protocol(why) => {
                log::info!("kubelet API exec: {why}");
                self.goaway(GOAWAY_PROTOCOL_ERROR);
            }
            End::Timeout => {
                log::info!("kubelet API exec: timed out waiting for client to create streams");
                self.goaway(GOAWAY_OK);
            }
        }
        if let Some(p) = &self.process {
            if self.flags_mode == Mode::Exec && p.exited().is_none() {
                p.kill();
            }
        }
        drop(self.out);
        if let Some(h) = self.out_thread.take() {
            let _ = h.join();
        }
    }

    fn goaway(&mut self, status: u32) {
        self.send(&Frame::GoAway {
            last_good_stream_id: self.last_id,
            status,
        });
        let _ = self.out.send(Message::Close(None));
    }

    fn serve(&mut self, inbound: &Receiver<Message>, proc_tx: &Sender<Arc<Process>>) -> End {
        loop {
            let m = if self.open.is_some() {
                let wait = self
                    .set
                    .deadline()
                    .saturating_duration_since(Instant::now());
                match inbound.recv_timeout(wait) {
                    Ok(m) => m,
                    Err(RecvTimeoutError::Timeout) => return End::Timeout,
                    Err(RecvTimeoutError::Disconnected) => return End::Done,
                }
            } else {
                match inbound.recv() {
                    Ok(m) => m,
                    Err(_) => return End::Done,
                }
            };
            // Room again in a channel the pump may be holding for.
            self.out.wake();
            match m {
                Message::Binary(b) => self.dec.push(&b),
                Message::Close(_) => return End::Done,
                _ => continue,
            }
            loop {
                match self.dec.next() {
                    Ok(Some(f)) => {
                        if let Some(end) = self.frame(f) {
                            return end;
                        }
                        if self.open.is_some() && self.set.complete() {
                            self.start(proc_tx);
                        }
                    }
                    Ok(None) => break,
                    Err(e) => return End::Protocol(e.to_string()),
                }
            }
            if self.set.expired(Instant::now()) {
                return End::Timeout;
            }
        }
    }

    fn send(&mut self, f: &Frame) {
        let mut b = Vec::new();
        if self.enc.encode(f, &mut b).is_ok() {
            let _ = self.out.send(Message::Binary(b.into()));
        }
    }

    fn frame(&mut self, f: Frame) -> Option<End> {
        match f {
            // The API server pings every 5 s: echo the client's.
            Frame::Ping { id } if !Role::Server.owns_id(id) => self.send(&Frame::Ping { id }),
            Frame::GoAway { .. } => return Some(End::Done),
            Frame::SynStream {
                stream_id: id,
                headers,
                ..
            } => self.syn_stream(id, &headers),
            Frame::Data {
                stream_id: id,
                data,
                fin,
            } => return self.data(id, &data, fin),
            // A reset stdin is its end.
            Frame::RstStream { stream_id, .. }
                if self.set.role_of(stream_id) == Some(StreamType::Stdin) =>
            {
                self.stdin_eof();
            }
            _ => {}
        }
        None
    }

    fn syn_stream(&mut self, id: u32, h: &Headers) {
        // spdystream's `validateStreamId`: the client's parity, going up.
        if Role::Server.owns_id(id) || id <= self.last_id {
            self.send(&Frame::RstStream {
                stream_id: id,
                status: RST_PROTOCOL_ERROR,
            });
            return;
        }
        self.last_id = id;
        match self.set.offer(id, h) {
            Offer::Accept(_) => self.send(&Frame::SynReply {
                stream_id: id,
                fin: false,
                headers: Headers::new(),
            }),
            Offer::Refuse(status) => self.send(&Frame::RstStream {
                stream_id: id,
                status,
            }),
        }
    }

    fn data(&mut self, id: u32, data: &[u8], fin: bool) -> Option<End> {
        match self.set.role_of(id) {
            Some(StreamType::Stdin) => {
                match &self.process {
                    Some(p) => {
                        // A process that closed its stdin: keep reading
                        // frames so the connection stays serviced.
                        let _ = p.write_stdin(data);
                    }
                    None => {
                        if self.early_stdin.len() + data.len() > MAX_EARLY_STDIN {
                            return Some(End::Protocol(
                                "stdin before the streams were complete".into(),
                            ));
                        }
                        self.early_stdin.extend_from_slice(data);
                    }
                }
                if fin {
                    self.stdin_eof();
                }
            }
            Some(StreamType::Resize) => {
                self.resize.push(data);
                self.apply_resizes();
            }
            // Nothing else is read (spdystream drops what no one reads).
            _ => {}
        }
        None
    }

    fn stdin_eof(&mut self) {
        match &self.process {
            Some(p) if self.close_stdin_on_eof => p.close_stdin(),
            Some(_) => {}
            None => self.early_eof = true,
        }
    }

    fn apply_resizes(&mut self) {
        let Some(p) = &self.process else { return };
        while let Some(r) = self.resize.next_size() {
            match r {
                Ok(sz) => {
                    let _ = p.resize(sz.width, sz.height);
                }
                Err(e) => {
                    // upstream's decoder stops at the first bad value.
                    log::debug!("kubelet API exec: {e}");
                    if matches!(e, channel::ResizeError::Framing(_)) {
                        return;
                    }
                }
            }
        }
    }

    /// The set is complete: start or find the process and its output.
    fn start(&mut self, proc_tx: &Sender<Arc<Process>>) {
        let Some(open) = self.open.take() else { return };
        if self.version == Version::V1 {
            // 1.0 kubelets reset the error stream once the set is in, and
            // close their side of stdin.
            if let Some(e) = self.set.error {
                self.send(&Frame::RstStream {
                    stream_id: e,
                    status: RST_CANCEL,
                });
            }
            if let Some(i) = self.set.stdin {
                let _ = self.out.send(data_message(i, &[], true));
            }
        }
        let ids = OutIds {
            error: self.set.error.filter(|_| self.version != Version::V1),
            stdout: self.set.stdout,
            stderr: self.set.stderr,
        };
        let (process, output) = match open() {
            Ok(x) => x,
            Err(e) => {
                let st = channel::internal_error_status_json(&e.to_string());
                finish(&self.out, &ids, self.version, &st);
                return;
            }
        };
        if self.flags_mode == Mode::Exec {
            let _ = proc_tx.try_send(process.clone());
        }
        if !self.early_stdin.is_empty() {
            let _ = process.write_stdin(&std::mem::take(&mut self.early_stdin));
        }
        if self.early_eof && self.close_stdin_on_eof {
            process.close_stdin();
        }
        self.process = Some(process.clone());
        self.apply_resizes();
        let out = self.out.clone();
        let (mode, wording, version) = (self.flags_mode, self.wording.clone(), self.version);
        let spawned = std::thread::Builder::new()
            .name("sim-kapi-out".into())
            .spawn(move || relay_output(&out, &ids, &process, &output, mode, &wording, version));
        match spawned {
            Ok(h) => self.out_thread = Some(h),
            Err(e) => {
                log::warn!("kubelet API exec: no output thread: {e}");
                let _ = self.out.send(Message::Close(None));
            }
        }
    }
}

/// The server's writing ends of a session's streams.
#[derive(Clone, Copy)]
struct OutIds {
    error: Option<u32>,
    stdout: Option<u32>,
    stderr: Option<u32>,
}

fn data_message(stream_id: u32, data: &[u8], fin: bool) -> Message {
    let mut b = Vec::new();
    // At most one output chunk, on a stream id the client opened.
    let _ = write_data(&mut b, stream_id, data, fin);
    Message::Binary(b.into())
}

/// FIN on stdout and stderr, the final words on the error stream and its
/// FIN, then the connection's close (after everything queued).
fn finish(out: &Outbox, ids: &OutIds, version: Version, status_json: &[u8]) {
    for id in [ids.stdout, ids.stderr].into_iter().flatten() {
        let _ = out.send(data_message(id, &[], true));
    }
    if let Some(e) = ids.error {
        if let Some(words) = streams::final_words(version, status_json) {
            let _ = out.send(data_message(e, &words, false));
        }
        let _ = out.send(data_message(e, &[], true));
    }
    let _ = out.send(Message::Close(None));
}

/// A `sim-kapi-out` thread: output as DATA (the outbox waits when full),
/// then the exit's Status (an exec) or Success (an attach).
fn relay_output(
    out: &Outbox,
    ids: &OutIds,
    process: &Arc<Process>,
    output: &Receiver<OutputChunk>,
    mode: Mode,
    wording: &ExitWording,
    version: Version,
) {
    loop {
        match output.recv_timeout(Duration::from_millis(250)) {
            Ok(chunk) => {
                let id = match chunk.stream {
                    Stream::Tty | Stream::Stdout => ids.stdout,
                    Stream::Stderr => ids.stderr,
                };
                if let Some(id) = id {
                    if out.send(data_message(id, &chunk.data, false)).is_err() {
                        return;
                    }
                }
            }
            Err(RecvTimeoutError::Timeout) => {
                if mode == Mode::Attach && process.exited().is_some() && output.is_empty() {
                    break;
                }
            }
            Err(RecvTimeoutError::Disconnected) => break,
        }
    }
    let st = match mode {
        Mode::Exec => wording.status_json(process.wait().code),
        // Attach reports Success whatever the container did.
        Mode::Attach => channel::success_status_json(),
    };
    finish(out, ids, version, &st);
}
