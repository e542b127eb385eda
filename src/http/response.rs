//! Sans-IO HTTP/1.1 responses as a client reads them: the response head
//! (via httparse), the body framing it announces (RFC 9112 §6.3), and the
//! de-framing of the body (Content-Length, chunked with extensions and
//! trailers, or read to close).
//!
//! In scope: bytes in, a [`Head`] and body bytes out, however the bytes are
//! split across reads; interim 1xx answers skipped ([`parse_final_head`],
//! 101 being final); every limit that needs no socket (head size, header
//! count, conflicting lengths). Chunked bodies go through the request
//! side's one decoder (`http::parse::ChunkedDecoder`).
//!
//! Out of scope: sockets and deadlines (the client half, [`super::client`],
//! and each caller's own reader drive these functions); what a status code
//! means to the caller; WebSocket checks of a 101 ([`super::client`]).
//!
//! Lenient where a client should be, strict where a proxy in between could
//! read other bytes than we do: header lines ending in a bare LF are taken
//! (as Go's and curl's clients take them) unless [`Limits::strict_crlf`];
//! obs-fold continuation lines are refused (httparse's default for
//! responses), and so are differing `Content-Length` values.

use super::parse::ChunkedDecoder;
use super::types::HttpError;
use std::fmt;
use std::io::{self, Read};

/// Largest response head accepted by default: 64 KiB, the request side's
/// default too; real heads are a few hundred bytes.
pub const MAX_HEAD_BYTES: usize = 64 * 1024;
/// Most headers a response may carry (more is an error): the request
/// side's limit.
pub const MAX_HEADERS: usize = 128;
/// Largest trailer section of a chunked body accepted: trailers are
/// skipped, not kept, so this only bounds the work.
pub const MAX_TRAILER_BYTES: usize = 16 * 1024;

/// The limits a head is parsed with.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limits {
    /// Largest head, in bytes (default [`MAX_HEAD_BYTES`]).
    pub max_head_bytes: usize,
    /// Refuse a head line ended by a bare LF (default false: lenient).
    pub strict_crlf: bool,
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            max_head_bytes: MAX_HEAD_BYTES,
            strict_crlf: false,
        }
    }
}

/// Why a response could not be read.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ResponseError {
    /// The head did not end within `limit` bytes.
    HeadTooLarge { limit: usize },
    /// More than [`MAX_HEADERS`] headers.
    TooManyHeaders,
    /// The bytes are not an HTTP/1.x response head (httparse's reason).
    Malformed(String),
    /// The head announces a body framing that cannot be trusted
    /// (differing or invalid `Content-Length`).
    BadFraming(String),
    /// The chunked body is malformed.
    Chunked(String),
    /// The connection closed before the body announced was complete.
    Truncated,
}

impl fmt::Display for ResponseError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ResponseError::HeadTooLarge { limit } => {
                write!(f, "response head larger than {limit} bytes")
            }
            ResponseError::TooManyHeaders => {
                write!(f, "response head with more than {MAX_HEADERS} headers")
            }
            ResponseError::Malformed(m) => write!(f, "malformed HTTP response: {m}"),
            ResponseError::BadFraming(m) => write!(f, "response framing: {m}"),
            ResponseError::Chunked(m) => write!(f, "chunked body: {m}"),
            ResponseError::Truncated => f.write_str("the connection closed inside the body"),
        }
    }
}

impl std::error::Error for ResponseError {}

impl From<ResponseError> for io::Error {
    fn from(e: ResponseError) -> io::Error {
        let kind = match e {
            ResponseError::Truncated => io::ErrorKind::UnexpectedEof,
            _ => io::ErrorKind::InvalidData,
        };
        io::Error::new(kind, e)
    }
}

/// A parsed response head. Header names keep the case they came in;
/// values are trimmed (and read as UTF-8, lossily).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Head {
    pub code: u16,
    /// The reason phrase (informative only).
    pub reason: String,
    pub headers: Vec<(String, String)>,
}

impl Head {
    /// The first value of a header (name case-insensitive).
    pub fn header<'a>(&'a self, name: &'a str) -> Option<&'a str> {
        self.values(name).next()
    }

    /// Every value of a header, in order.
    pub fn values<'a>(&'a self, name: &'a str) -> impl Iterator<Item = &'a str> + 'a {
        self.headers
            .iter()
            .filter(move |(k, _)| k.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
    }

    /// Whether a comma-separated header (`Connection`, `Upgrade`) holds
    /// `token` (case-insensitive) in any of its lines.
    pub fn has_token(&self, name: &str, token: &str) -> bool {
        self.values(name)
            .flat_map(|v| v.split(','))
            .any(|t| t.trim().eq_ignore_ascii_case(token))
    }
}

/// Parses a response head from the start of `buf`: `Ok(None)` means read
/// more; `Ok(Some((head, n)))` means the head took the first `n` bytes
/// (the rest belongs to the body, or to the protocol after a 101).
pub fn parse_head(buf: &[u8], limits: &Limits) -> Result<Option<(Head, usize)>, ResponseError> {
    let mut headers = [httparse::EMPTY_HEADER; MAX_HEADERS];
    let mut resp = httparse::Response::new(&mut headers);
    let n = match resp.parse(buf) {
        Ok(httparse::Status::Complete(n)) => n,
        Ok(httparse::Status::Partial) if buf.len() >= limits.max_head_bytes => {
            return Err(ResponseError::HeadTooLarge {
                limit: limits.max_head_bytes,
            })
        }
        Ok(httparse::Status::Partial) => return Ok(None),
        Err(httparse::Error::TooManyHeaders) => return Err(ResponseError::TooManyHeaders),
        Err(e) => return Err(ResponseError::Malformed(e.to_string())),
    };
    if n > limits.max_head_bytes {
        return Err(ResponseError::HeadTooLarge {
            limit: limits.max_head_bytes,
        });
    }
    if limits.strict_crlf && super::parse::has_bare_lf(&buf[..n]) {
        return Err(ResponseError::Malformed(
            "a line ends in a bare LF (lines end in CRLF)".into(),
        ));
    }
    let code = resp
        .code
        .ok_or_else(|| ResponseError::Malformed("response without a status code".into()))?;
    let headers = resp
        .headers
        .iter()
        .map(|h| {
            (
                h.name.to_string(),
                String::from_utf8_lossy(h.value).trim().to_string(),
            )
        })
        .collect();
    let reason = resp.reason.unwrap_or("").to_string();
    Ok(Some((
        Head {
            code,
            reason,
            headers,
        },
        n,
    )))
}

/// [`parse_head`] past any interim 1xx answers (100 Continue, 103 Early
/// Hints), which carry no body: the final head and the bytes it and the
/// interim heads took. 101 is final (the connection then speaks another
/// protocol). The head size limit applies to each head.
pub fn parse_final_head(
    buf: &[u8],
    limits: &Limits,
) -> Result<Option<(Head, usize)>, ResponseError> {
    let mut at = 0;
    loop {
        match parse_head(&buf[at..], limits)? {
            None => return Ok(None),
            Some((head, n)) if (100..200).contains(&head.code) && head.code != 101 => at += n,
            Some((head, n)) => return Ok(Some((head, at + n))),
        }
    }
}

/// How a response body ends (RFC 9112 §6.3).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Framing {
    /// Exactly this many bytes (0: no body).
    Length(u64),
    /// Chunked transfer coding.
    Chunked,
    /// Everything until the server closes the connection.
    UntilClose,
}

/// The framing of the body after `head`, answering a request that was not
/// HEAD; a head whose lengths cannot be trusted reads to close (for
/// callers that only show what arrives: error bodies, event streams).
/// [`checked_framing`] refuses it instead.
pub fn framing(head: &Head) -> Framing {
    checked_framing(head, false).unwrap_or(Framing::UntilClose)
}

/// The framing of the body after `head` (`head_request`: it answers a
/// HEAD, so it has none). 1xx, 204 and 304 have no body; a
/// `Transfer-Encoding` whose last coding is chunked is chunked, any other
/// reads to close (and wins over `Content-Length`); `Content-Length`
/// values must all be the same number.
pub fn checked_framing(head: &Head, head_request: bool) -> Result<Framing, ResponseError> {
    if head_request || head.code == 204 || head.code == 304 || (100..200).contains(&head.code) {
        return Ok(Framing::Length(0));
    }
    let codings: Vec<&str> = head
        .values("transfer-encoding")
        .flat_map(|v| v.split(','))
        .map(str::trim)
        .filter(|c| !c.is_empty())
        .collect();
    if let Some(last) = codings.last() {
        return Ok(if last.eq_ignore_ascii_case("chunked") {
            Framing::Chunked
        } else {
            Framing::UntilClose
        });
    }
    let mut length: Option<u64> = None;
    for part in head.values("content-length").flat_map(|v| v.split(',')) {
        let part = part.trim();
        let n = part
            .parse::<u64>()
            .ok()
            .filter(|_| part.bytes().all(|b| b.is_ascii_digit()))
            .ok_or_else(|| ResponseError::BadFraming(format!("invalid Content-Length {part:?}")))?;
        if length.is_some_and(|l| l != n) {
            return Err(ResponseError::BadFraming(
                "conflicting Content-Length values".into(),
            ));
        }
        length = Some(n);
    }
    Ok(length.map_or(Framing::UntilClose, Framing::Length))
}

/// Incremental body de-framer: feed it the bytes after the head as they
/// arrive; it appends the payload to `out`.
#[derive(Debug)]
pub struct BodyDecoder {
    state: DecoderState,
}

#[derive(Debug)]
enum DecoderState {
    Length(u64),
    Chunked(Box<ChunkedDecoder>),
    UntilClose,
    Done,
}

impl BodyDecoder {
    pub fn new(framing: Framing) -> BodyDecoder {
        let state = match framing {
            Framing::Length(0) => DecoderState::Done,
            Framing::Length(n) => DecoderState::Length(n),
            Framing::Chunked => {
                DecoderState::Chunked(Box::new(ChunkedDecoder::new(usize::MAX, MAX_TRAILER_BYTES)))
            }
            Framing::UntilClose => DecoderState::UntilClose,
        };
        BodyDecoder { state }
    }

    /// Consumes a prefix of `input` (all of it unless the body ends inside
    /// it: the rest follows the response) and returns its length.
    pub fn feed(&mut self, input: &[u8], out: &mut Vec<u8>) -> Result<usize, ResponseError> {
        match &mut self.state {
            DecoderState::Done => Ok(0),
            DecoderState::UntilClose => {
                out.extend_from_slice(input);
                Ok(input.len())
            }
            DecoderState::Length(left) => {
                let n = input
                    .len()
                    .min(usize::try_from(*left).unwrap_or(usize::MAX));
                out.extend_from_slice(&input[..n]);
                *left -= n as u64;
                if *left == 0 {
                    self.state = DecoderState::Done;
                }
                Ok(n)
            }
            DecoderState::Chunked(dec) => {
                let n = dec.feed(input, out).map_err(|e| match e {
                    HttpError::BadRequest(m) => ResponseError::Chunked(m),
                    other => ResponseError::Chunked(format!("{other:?}")),
                })?;
                if dec.is_done() {
                    self.state = DecoderState::Done;
                }
                Ok(n)
            }
        }
    }

    /// The whole body is in (a read-to-close body is done at EOF only).
    pub fn is_done(&self) -> bool {
        matches!(self.state, DecoderState::Done)
    }

    /// The connection closed: fine for a body read to close or complete,
    /// [`ResponseError::Truncated`] otherwise.
    pub fn finish(&self) -> Result<(), ResponseError> {
        match self.state {
            DecoderState::Done | DecoderState::UntilClose => Ok(()),
            _ => Err(ResponseError::Truncated),
        }
    }
}

/// A response body, de-framed, as a [`Read`]: the bytes read past the head
/// first, then `src`. Reads 0 at the body's end (whatever follows stays in
/// `src`'s stream, unread beyond one buffer); a connection closed inside a
/// sized or chunked body is an `UnexpectedEof` error.
pub struct BodyReader<R> {
    src: R,
    leftover: Vec<u8>,
    pos: usize,
    decoder: BodyDecoder,
    out: Vec<u8>,
    out_pos: usize,
}

impl<R: Read> BodyReader<R> {
    pub fn new(src: R, leftover: Vec<u8>, framing: Framing) -> BodyReader<R> {
        BodyReader {
            src,
            leftover,
            pos: 0,
            decoder: BodyDecoder::new(framing),
            out: Vec::new(),
            out_pos: 0,
        }
    }

    /// The body has been read whole.
    pub fn is_done(&self) -> bool {
        self.decoder.is_done() && self.out_pos >= self.out.len()
    }

    /// The source, for reuse of the connection once [`Self::is_done`].
    pub fn into_inner(self) -> R {
        self.src
    }

    /// The source, e.g. to set its timeouts.
    pub fn get_mut(&mut self) -> &mut R {
        &mut self.src
    }

    /// The source, e.g. to poll its descriptor.
    pub fn get_ref(&self) -> &R {
        &self.src
    }

    /// Bytes of the body can be handed out without reading `src` (read
    /// with the head, or decoded and not yet taken): a poll loop reads
    /// before it waits.
    pub fn has_buffered(&self) -> bool {
        self.pos < self.leftover.len() || self.out_pos < self.out.len()
    }
}

impl<R: Read> Read for BodyReader<R> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        if buf.is_empty() {
            return Ok(0);
        }
        loop {
            if self.out_pos < self.out.len() {
                let n = buf.len().min(self.out.len() - self.out_pos);
                buf[..n].copy_from_slice(&self.out[self.out_pos..self.out_pos + n]);
                self.out_pos += n;
                return Ok(n);
            }
            if self.decoder.is_done() {
                return Ok(0);
            }
            self.out.clear();
            self.out_pos = 0;
            if self.pos < self.leftover.len() {
                // Consumes all unless the body ends inside: no busy loop.
                self.pos += self
                    .decoder
                    .feed(&self.leftover[self.pos..], &mut self.out)?;
                continue;
            }
            let mut raw = [0u8; 16 * 1024];
            let n = match self.src.read(&mut raw) {
                Ok(n) => n,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                Err(e) => return Err(e),
            };
            if n == 0 {
                self.decoder.finish()?;
                return Ok(0);
            }
            // Bytes past the body's end stay unread by the caller.
            let used = self.decoder.feed(&raw[..n], &mut self.out)?;
            self.leftover = raw[used..n].to_vec();
            self.pos = 0;
        }
    }
}

/// Collects a body bounded by `max` bytes, as it arrives, leniently: for
/// an error answer whose body is shown to someone, so a cut or badly
/// framed body still yields what came. A chunked body is de-framed as it
/// arrives (each byte once), and ends where its framing breaks.
#[derive(Debug)]
pub struct BodyCollector {
    framing: Framing,
    /// The payload so far (de-framed when chunked).
    body: Vec<u8>,
    /// The chunked decoder; `None` once its framing broke.
    chunks: Option<ChunkedDecoder>,
    /// Raw bytes taken so far (framing included).
    taken: usize,
    max: usize,
}

/// Raw bytes kept beyond a collector's `max`: room for the chunk framing
/// around `max` bytes of payload.
const FRAMING_SLACK: usize = 4096;

impl BodyCollector {
    /// A collector for a body framed as `framing`, `already` being the
    /// bytes that came with the head.
    pub fn new(framing: Framing, already: &[u8], max: usize) -> BodyCollector {
        let mut r = BodyCollector {
            framing,
            body: Vec::new(),
            chunks: (framing == Framing::Chunked)
                .then(|| ChunkedDecoder::new(usize::MAX, MAX_TRAILER_BYTES)),
            taken: 0,
            max,
        };
        r.push(already);
        r
    }

    /// Appends raw bytes (beyond `max` plus framing slack they are
    /// ignored: the body is then cut).
    pub fn push(&mut self, bytes: &[u8]) {
        let room = (self.max + FRAMING_SLACK).saturating_sub(self.taken);
        let bytes = &bytes[..bytes.len().min(room)];
        self.taken += bytes.len();
        if self.framing != Framing::Chunked {
            self.body.extend_from_slice(bytes);
        } else if let Some(dec) = &mut self.chunks {
            if dec.feed(bytes, &mut self.body).is_err() {
                self.chunks = None;
            }
        }
    }

    /// The body, once complete; at `eof` (or when the cap is hit) whatever
    /// arrived, so a cut body still yields what can be shown.
    pub fn body(&self, eof: bool) -> Option<Vec<u8>> {
        let full = self.taken >= self.max;
        let mut body = match self.framing {
            Framing::Length(n) if self.body.len() as u64 >= n => self.body[..n as usize].to_vec(),
            Framing::Length(_) | Framing::UntilClose if eof || full => self.body.clone(),
            Framing::Length(_) | Framing::UntilClose => return None,
            Framing::Chunked => {
                let done = self
                    .chunks
                    .as_ref()
                    .is_none_or(ChunkedDecoder::last_chunk_seen);
                if !(done || eof || full) {
                    return None;
                }
                self.body.clone()
            }
        };
        body.truncate(self.max);
        Some(body)
    }
}

/// A whole response read to the connection's close (a `Connection: close`
/// exchange): the final head and the de-framed body. A body cut short is
/// [`ResponseError::Truncated`].
pub fn parse_complete(bytes: &[u8], limits: &Limits) -> Result<(Head, Vec<u8>), ResponseError> {
    let (head, n) = parse_final_head(bytes, limits)?.ok_or(ResponseError::Truncated)?;
    let mut dec = BodyDecoder::new(checked_framing(&head, false)?);
    let mut body = Vec::new();
    dec.feed(&bytes[n..], &mut body)?;
    dec.finish()?;
    Ok((head, body))
}

#[cfg(test)]
#[path = "response_tests.rs"]
mod tests;
