//! A sans-IO parser of server-sent events (the `text/event-stream` format
//! of the WHATWG HTML standard, "Server-sent events"): bytes in, in any
//! chunking, events out. Used by the debug relay
//! (docs/sessions.md#while-running) and by tests of the daemon's own event stream.
//!
//! What it follows from the standard: lines end with CRLF, LF or a lone CR
//! (a CRLF split between two pushes is still one line end); a leading UTF-8
//! BOM is dropped; lines starting with `:` are comments (heartbeats) and are
//! ignored; `field: value` drops one space after the colon, a line without
//! a colon is a field with an empty value; `data` lines are joined by `\n`;
//! a blank line dispatches the event, and a block without `data` dispatches
//! nothing; `id` containing NUL is ignored, and the last id seen persists
//! across events (it is what a reconnect sends as `Last-Event-ID`); `retry`
//! is kept when it is all digits; unknown fields are ignored; an event not
//! ended by a blank line when the stream ends is dropped. Bytes that are not
//! UTF-8 are replaced (U+FFFD), as the standard's decoder does.
//!
//! Bound: an event whose retained bytes (its field values and the line being
//! read) pass `max_event_bytes` is reported once as [`SseError::TooLarge`]
//! and the rest of it is skipped up to its blank line; parsing then goes on.
//! Memory is therefore bounded by the limit plus the events not yet taken
//! with [`SseParser::next_event`].

use std::collections::VecDeque;
use std::fmt;

/// Default bound of one event: 1 MiB.
pub const DEFAULT_MAX_EVENT_BYTES: usize = 1 << 20;

/// One dispatched event.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SseEvent {
    /// The last event id at dispatch (set by this event or an earlier one;
    /// `None` when none was ever set or the last `id:` was empty).
    pub id: Option<String>,
    /// The `event` field; `None` means the default type, `message`.
    pub event: Option<String>,
    /// The `data` lines joined by `\n`.
    pub data: String,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SseError {
    /// An event was larger than the bound; it was skipped.
    TooLarge { limit: usize },
}

impl fmt::Display for SseError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            SseError::TooLarge { limit } => {
                write!(
                    f,
                    "an event of the stream was larger than {limit} bytes; skipped"
                )
            }
        }
    }
}

impl std::error::Error for SseError {}

/// The incremental parser (see the module documentation).
#[derive(Debug)]
pub struct SseParser {
    max_event_bytes: usize,
    /// The line being read (not yet ended).
    line: Vec<u8>,
    /// Bytes of the current line, kept or not (a skipped line still ends).
    line_len: usize,
    /// The previous push ended with CR: a leading LF completes that CRLF.
    after_cr: bool,
    /// No line has ended yet (the BOM may open the first one).
    first_line: bool,
    /// Current event.
    data: String,
    has_data: bool,
    event: Option<String>,
    /// Retained bytes of the current event.
    size: usize,
    /// Over the bound: drop lines up to the next blank one.
    skipping: bool,
    last_event_id: Option<String>,
    retry: Option<u64>,
    ready: VecDeque<Result<SseEvent, SseError>>,
}

impl Default for SseParser {
    fn default() -> Self {
        SseParser::new(DEFAULT_MAX_EVENT_BYTES)
    }
}

impl SseParser {
    pub fn new(max_event_bytes: usize) -> SseParser {
        SseParser {
            max_event_bytes: max_event_bytes.max(1),
            line: Vec::new(),
            line_len: 0,
            after_cr: false,
            first_line: true,
            data: String::new(),
            has_data: false,
            event: None,
            size: 0,
            skipping: false,
            last_event_id: None,
            retry: None,
            ready: VecDeque::new(),
        }
    }

    /// Feeds the next bytes of the stream.
    pub fn push(&mut self, mut input: &[u8]) {
        while !input.is_empty() {
            if self.after_cr {
                self.after_cr = false;
                if input[0] == b'\n' {
                    input = &input[1..];
                    continue;
                }
            }
            match input.iter().position(|&b| b == b'\n' || b == b'\r') {
                None => {
                    self.append(input);
                    return;
                }
                Some(i) => {
                    self.append(&input[..i]);
                    self.after_cr = input[i] == b'\r';
                    self.end_line();
                    input = &input[i + 1..];
                }
            }
        }
    }

    /// The next complete event (or a skipped oversized one), in order.
    pub fn next_event(&mut self) -> Option<Result<SseEvent, SseError>> {
        self.ready.pop_front()
    }

    /// The last event id (what a reconnect sends as `Last-Event-ID`).
    pub fn last_event_id(&self) -> Option<&str> {
        self.last_event_id.as_deref()
    }

    /// The last valid `retry` value, in milliseconds.
    pub fn retry(&self) -> Option<u64> {
        self.retry
    }

    /// Forgets a partial event and line (the stream ended or was cut), as
    /// for a new connection; keeps the last event id and retry.
    pub fn reset(&mut self) {
        self.line.clear();
        self.line_len = 0;
        self.after_cr = false;
        self.first_line = true;
        self.skipping = false;
        self.clear_event();
    }

    fn clear_event(&mut self) {
        self.data.clear();
        self.has_data = false;
        self.event = None;
        self.size = 0;
    }

    fn append(&mut self, part: &[u8]) {
        if part.is_empty() {
            return;
        }
        self.line_len += part.len();
        if self.skipping {
            return;
        }
        if self.size + self.line.len() + part.len() > self.max_event_bytes {
            self.ready.push_back(Err(SseError::TooLarge {
                limit: self.max_event_bytes,
            }));
            self.skipping = true;
            self.line.clear();
            self.clear_event();
            return;
        }
        self.line.extend_from_slice(part);
    }

    fn end_line(&mut self) {
        let blank = self.line_len == 0;
        self.line_len = 0;
        let mut line = std::mem::take(&mut self.line);
        if std::mem::take(&mut self.first_line) && line.starts_with(b"\xEF\xBB\xBF") {
            line.drain(..3);
        }
        if self.skipping {
            if blank {
                self.skipping = false;
            }
            return;
        }
        if line.is_empty() {
            // A blank line (or a lone BOM, which the standard treats alike).
            self.dispatch();
            return;
        }
        if line[0] == b':' {
            return;
        }
        let (name, value) = match line.iter().position(|&b| b == b':') {
            Some(i) => {
                let v = &line[i + 1..];
                (&line[..i], v.strip_prefix(b" ").unwrap_or(v))
            }
            None => (&line[..], &b""[..]),
        };
        let value = String::from_utf8_lossy(value);
        match name {
            b"data" => {
                self.size += value.len() + 1;
                self.data.push_str(&value);
                self.data.push('\n');
                self.has_data = true;
            }
            b"event" => {
                self.size += value.len();
                self.event = Some(value.into_owned());
            }
            // An id with NUL is ignored; an empty one clears the last id.
            b"id" if !value.contains('\0') => {
                self.last_event_id = (!value.is_empty()).then(|| value.into_owned());
            }
            b"retry" if !value.is_empty() && value.bytes().all(|b| b.is_ascii_digit()) => {
                if let Ok(ms) = value.parse() {
                    self.retry = Some(ms);
                }
            }
            _ => {}
        }
    }

    fn dispatch(&mut self) {
        if self.has_data {
            let mut data = std::mem::take(&mut self.data);
            data.pop(); // the last "\n"
            let ev = SseEvent {
                id: self.last_event_id.clone(),
                event: self.event.take().filter(|e| !e.is_empty()),
                data,
            };
            self.ready.push_back(Ok(ev));
        }
        self.clear_event();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn all(p: &mut SseParser) -> Vec<Result<SseEvent, SseError>> {
        std::iter::from_fn(|| p.next_event()).collect()
    }

    fn parse(input: &[u8]) -> Vec<Result<SseEvent, SseError>> {
        let mut p = SseParser::new(1024);
        p.push(input);
        all(&mut p)
    }

    fn ev(id: Option<&str>, event: Option<&str>, data: &str) -> Result<SseEvent, SseError> {
        Ok(SseEvent {
            id: id.map(String::from),
            event: event.map(String::from),
            data: data.into(),
        })
    }

    const STREAM: &[u8] =
        b"\xEF\xBB\xBF: hello\r\n\r\nid: 1\r\nevent: tick\r\ndata: a\r\ndata:b\r\ndata\r\n\r\n\
: heartbeat\n\ndata: {\"x\": 1}\n\nid\ndata: no id\rretry: 1500\r\r\
data: last\n\ndata: never dispatched";

    fn expected() -> Vec<Result<SseEvent, SseError>> {
        vec![
            ev(Some("1"), Some("tick"), "a\nb\n"),
            ev(Some("1"), None, "{\"x\": 1}"),
            ev(None, None, "no id"),
            ev(None, None, "last"),
        ]
    }

    #[test]
    fn fields_comments_and_line_ends() {
        let mut p = SseParser::new(1024);
        p.push(STREAM);
        assert_eq!(all(&mut p), expected());
        assert_eq!(p.retry(), Some(1500));
        assert_eq!(p.last_event_id(), None);
    }

    #[test]
    fn any_chunking_gives_the_same_events() {
        for step in 1..STREAM.len() {
            let mut p = SseParser::new(1024);
            for chunk in STREAM.chunks(step) {
                p.push(chunk);
            }
            assert_eq!(all(&mut p), expected(), "chunks of {step}");
        }
        // Every split into two pieces, CRLF and the BOM included.
        for at in 0..=STREAM.len() {
            let mut p = SseParser::new(1024);
            p.push(&STREAM[..at]);
            p.push(&STREAM[at..]);
            assert_eq!(all(&mut p), expected(), "split at {at}");
        }
    }

    #[test]
    fn crlf_split_is_one_line_end_but_cr_cr_is_two() {
        let mut p = SseParser::new(1024);
        p.push(b"data: x\r");
        p.push(b"\n");
        assert!(p.next_event().is_none(), "one line end, not a blank line");
        p.push(b"\r");
        assert_eq!(all(&mut p), vec![ev(None, None, "x")]);
    }

    #[test]
    fn details_of_the_standard() {
        // No data: nothing dispatched, and the event type does not leak.
        assert_eq!(parse(b"event: a\n\ndata: x\n\n"), vec![ev(None, None, "x")]);
        // Only one leading space is dropped; a colon in the value stays.
        assert_eq!(
            parse(b"data:  two: spaces\n\n"),
            vec![ev(None, None, " two: spaces")]
        );
        // Empty data lines count.
        assert_eq!(parse(b"data\ndata\n\n"), vec![ev(None, None, "\n")]);
        // An id with NUL is ignored; unknown fields and a bad retry too.
        let mut p = SseParser::new(1024);
        p.push(b"id: 7\n\nid: 8\0\nretry: 1x\nfoo: bar\ndata: d\n\n");
        assert_eq!(all(&mut p), vec![ev(Some("7"), None, "d")]);
        assert_eq!(p.last_event_id(), Some("7"));
        assert_eq!(p.retry(), None);
        // Invalid UTF-8 is replaced, not fatal.
        assert_eq!(parse(b"data: \xff\n\n"), vec![ev(None, None, "\u{fffd}")]);
        // A BOM only counts at the very start.
        assert_eq!(
            parse(b"data: a\n\n\xEF\xBB\xBFdata: b\n\n"),
            vec![ev(None, None, "a")]
        );
    }

    #[test]
    fn reset_drops_the_partial_event_but_keeps_the_id() {
        let mut p = SseParser::new(1024);
        p.push(b"id: 3\ndata: done\n\ndata: half");
        p.reset();
        p.push(b"data: next\n\n");
        assert_eq!(
            all(&mut p),
            vec![ev(Some("3"), None, "done"), ev(Some("3"), None, "next")]
        );
    }

    #[test]
    fn oversized_events_are_reported_once_and_skipped() {
        let mut p = SseParser::new(16);
        p.push(b"data: 0123456789\n");
        p.push(b"data: 0123456789\n");
        p.push(b"data: more\n");
        p.push(b"\n");
        p.push(b"data: ok\n\n");
        assert_eq!(
            all(&mut p),
            vec![Err(SseError::TooLarge { limit: 16 }), ev(None, None, "ok")]
        );
        // A line that never ends is bounded too.
        let mut p = SseParser::new(16);
        for _ in 0..1000 {
            p.push(b"xxxxxxxxxxxxxxxx");
        }
        assert!(p.line.len() <= 16);
        p.push(b"\n\ndata: after\n\n");
        assert_eq!(
            all(&mut p),
            vec![
                Err(SseError::TooLarge { limit: 16 }),
                ev(None, None, "after")
            ]
        );
        // Comments do not count toward an event.
        let mut p = SseParser::new(16);
        for _ in 0..10 {
            p.push(b": heartbeat\n");
        }
        p.push(b"data: fits\n\n");
        assert_eq!(all(&mut p), vec![ev(None, None, "fits")]);
    }
}
