//! A session's event stream (`GET /v1/sessions/{id}/events`,
//! `text/event-stream`, docs/api.md#sessions) read as it comes: the
//! daemon's chunked framing undone by `http::parse::ChunkedDecoder`, the
//! events split by `session::sse::SseParser` (the parser the daemon's debug
//! relay uses), each event's data decoded as JSON.
//!
//! [`follow`] keeps a stream going: it resumes after a cut with
//! `Last-Event-ID` (the daemon replays what it still holds, or sends a
//! `gap` event), backing off from 0.5 s to 5 s, and gives up after
//! [`GIVE_UP`] without a successful connection. The stream ends for good
//! after the session's terminal status (the daemon closes it).

use super::net::Client;
use super::CliError;
use crate::exit::codes;
use crate::http::parse::ChunkedDecoder;
use crate::http::response::{framing, Framing};
use crate::http::stream::ClientSocket;
use crate::session::sse::SseParser;
use serde_json::Value;
use std::io::Read;
use std::time::{Duration, Instant};

/// Silence longer than this (the daemon sends a heartbeat every 20 s) is a
/// dead connection.
const READ_IDLE: Duration = Duration::from_secs(60);
/// One event's bound.
const MAX_EVENT_BYTES: usize = 1 << 20;
/// Reconnecting stops after this long without a connection.
pub const GIVE_UP: Duration = Duration::from_secs(60);
const BACKOFF_FIRST: Duration = Duration::from_millis(500);
const BACKOFF_MAX: Duration = Duration::from_secs(5);

/// One event of the stream.
#[derive(Debug, Clone, PartialEq)]
pub struct SessionEvent {
    pub id: Option<u64>,
    /// `status`, `progress`, `endpoints`, `reachability`, `run`, `debug`,
    /// `gap`.
    pub kind: String,
    pub data: Value,
}

/// An open event stream.
pub struct EventStream {
    sock: ClientSocket,
    /// `None`: the body runs until the daemon closes.
    chunked: Option<ChunkedDecoder>,
    parser: SseParser,
    /// Raw bytes read, not yet decoded.
    pending: Vec<u8>,
    ended: bool,
}

fn protocol(m: impl Into<String>) -> CliError {
    CliError::new(codes::PROTOCOL, m)
}

impl EventStream {
    /// Opens the stream of `session`, after `last_event_id` when given.
    pub fn open(
        client: &Client,
        session: &str,
        last_event_id: Option<u64>,
    ) -> Result<EventStream, CliError> {
        let id = last_event_id.map(|id| id.to_string());
        let extra: Vec<(&str, &str)> = id.iter().map(|id| ("Last-Event-ID", id.as_str())).collect();
        let (sock, head, rest) = client.open_stream(
            &format!("/v1/sessions/{session}/events"),
            "text/event-stream",
            &extra,
        )?;
        sock.set_read_timeout(Some(READ_IDLE))
            .map_err(|e| protocol(format!("setting the stream's read timeout: {e}")))?;
        let chunked = match framing(&head) {
            Framing::Chunked => Some(ChunkedDecoder::new(usize::MAX, 64 * 1024)),
            Framing::UntilClose => None,
            Framing::Length(_) => {
                return Err(protocol(
                    "the daemon's event stream came with a Content-Length: not a stream",
                ))
            }
        };
        Ok(EventStream {
            sock,
            chunked,
            parser: SseParser::new(MAX_EVENT_BYTES),
            pending: rest,
            ended: false,
        })
    }

    /// The next event; `Ok(None)` when the daemon ended the stream (after
    /// the session's terminal status); `Err` when it broke.
    pub fn next(&mut self) -> Result<Option<SessionEvent>, CliError> {
        let mut buf = vec![0u8; 16 * 1024];
        loop {
            while let Some(ev) = self.parser.next_event() {
                // An oversized event is skipped (the parser said so once).
                let Ok(ev) = ev else { continue };
                let Some(kind) = ev.event else { continue };
                let data = serde_json::from_str(&ev.data)
                    .map_err(|e| protocol(format!("a {kind} event whose data is not JSON: {e}")))?;
                return Ok(Some(SessionEvent {
                    id: ev.id.and_then(|i| i.parse().ok()),
                    kind,
                    data,
                }));
            }
            if self.ended {
                return Ok(None);
            }
            if !self.pending.is_empty() {
                let raw = std::mem::take(&mut self.pending);
                match &mut self.chunked {
                    Some(dec) => {
                        let mut body = Vec::new();
                        dec.feed(&raw, &mut body)
                            .map_err(|e| protocol(format!("the event stream's framing: {e:?}")))?;
                        self.parser.push(&body);
                        if dec.is_done() {
                            self.ended = true;
                        }
                    }
                    None => self.parser.push(&raw),
                }
                continue;
            }
            match self.sock.read(&mut buf) {
                Ok(0) => {
                    if self.chunked.is_some() {
                        return Err(CliError::new(
                            codes::DISCONNECTED,
                            "the event stream was cut",
                        ));
                    }
                    self.ended = true;
                }
                Ok(n) => self.pending.extend_from_slice(&buf[..n]),
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
                Err(e) => {
                    return Err(CliError::new(
                        codes::DISCONNECTED,
                        format!("reading the event stream: {e}"),
                    ))
                }
            }
        }
    }
}

/// Follows `session`'s events from the start, handing each to `on` until
/// it returns false; resumes a broken stream with `Last-Event-ID`.
/// `Ok(())` once the daemon ended the stream or `on` said stop; `Err` when
/// no connection could be made for [`GIVE_UP`], or the daemon refused one
/// (an unknown session: `NOT_FOUND`).
pub fn follow(
    client: &Client,
    session: &str,
    mut on: impl FnMut(SessionEvent) -> bool,
) -> Result<(), CliError> {
    let mut last: Option<u64> = None;
    let mut backoff = BACKOFF_FIRST;
    let mut failing_since: Option<Instant> = None;
    loop {
        match EventStream::open(client, session, last) {
            Ok(mut stream) => {
                failing_since = None;
                backoff = BACKOFF_FIRST;
                loop {
                    match stream.next() {
                        Ok(Some(ev)) => {
                            if ev.id.is_some() {
                                last = ev.id;
                            }
                            if !on(ev) {
                                return Ok(());
                            }
                        }
                        Ok(None) => return Ok(()),
                        Err(e) => {
                            log::debug!("the event stream broke: {e}; resuming");
                            break;
                        }
                    }
                }
            }
            // The daemon answered and refused: no point in asking again.
            Err(e) if e.code != codes::UNREACHABLE && e.code != codes::PROTOCOL => return Err(e),
            Err(e) => {
                let since = *failing_since.get_or_insert_with(Instant::now);
                if since.elapsed() >= GIVE_UP {
                    return Err(e);
                }
                std::thread::sleep(backoff);
                backoff = (backoff * 2).min(BACKOFF_MAX);
            }
        }
    }
}
