//! SPDY/3 frames: the [`Decoder`] (bytes in any split -> frames) and the
//! [`Encoder`] (frames -> bytes). Layouts: docs/portforward-wire.md §5.

use super::headers::{Deflater, Headers, Inflater};
use super::SpdyError;

/// The largest DATA payload SPDY/3 can carry (a 24-bit length).
pub const MAX_DATA_LENGTH: u32 = 0x00FF_FFFF;
/// GOAWAY status OK (the only one spdystream sends).
pub const GOAWAY_OK: u32 = 0;

const FLAG_FIN: u8 = 0x01;
const FLAG_UNIDIRECTIONAL: u8 = 0x02;
const VERSION: u16 = 3;

const SYN_STREAM: u16 = 1;
const SYN_REPLY: u16 = 2;
const RST_STREAM: u16 = 3;
const SETTINGS: u16 = 4;
const PING: u16 = 6;
const GOAWAY: u16 = 7;
const HEADERS: u16 = 8;
const WINDOW_UPDATE: u16 = 9;

/// What one connection's decoder accepts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limits {
    /// Largest DATA length a frame may announce (it is streamed in pieces,
    /// never held whole). At most [`MAX_DATA_LENGTH`].
    pub max_data: u32,
    /// Largest control-frame payload (held whole until complete).
    pub max_control: u32,
    /// Largest inflated header block.
    pub max_header_block: usize,
}

impl Limits {
    /// 2^24−1 for DATA, 16 KiB for a control payload and for an inflated
    /// header block.
    pub const DEFAULT: Limits = Limits {
        max_data: MAX_DATA_LENGTH,
        max_control: 16 * 1024,
        max_header_block: 16 * 1024,
    };
}

impl Default for Limits {
    fn default() -> Self {
        Limits::DEFAULT
    }
}

/// One frame. Stream ids are 31-bit (the reserved bit is dropped when
/// reading). SETTINGS and WINDOW_UPDATE are parsed (so their lengths are
/// checked) but port-forward ignores them.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Frame {
    /// DATA, or a piece of one: a frame's bytes are handed out as they
    /// arrive, `fin` only on its last piece.
    Data {
        /// The stream.
        stream_id: u32,
        /// The bytes of this piece.
        data: Vec<u8>,
        /// The frame had FIN and this is its last piece.
        fin: bool,
    },
    /// SYN_STREAM: the peer opens a stream.
    SynStream {
        /// The new stream.
        stream_id: u32,
        /// Associated stream (0 for port-forward).
        assoc_id: u32,
        /// 0 (highest) to 7.
        priority: u8,
        /// The opener will send nothing more.
        fin: bool,
        /// We may not send on it.
        unidirectional: bool,
        /// Its headers.
        headers: Headers,
    },
    /// SYN_REPLY: the answer to our SYN_STREAM.
    SynReply {
        /// The stream.
        stream_id: u32,
        /// The replier will send nothing more.
        fin: bool,
        /// Its headers (empty from the kubelet).
        headers: Headers,
    },
    /// RST_STREAM: the stream ends at once.
    RstStream {
        /// The stream.
        stream_id: u32,
        /// Status (`RST_*` in the parent module), never 0.
        status: u32,
    },
    /// SETTINGS: `(flags, id, value)` entries.
    Settings {
        /// Flags byte of the frame (CLEAR_SETTINGS = 1).
        flags: u8,
        /// The entries.
        entries: Vec<(u8, u32, u32)>,
    },
    /// PING: echoed when the peer started it ([`super::Role::owns_id`]).
    Ping {
        /// The id, never 0.
        id: u32,
    },
    /// GOAWAY: the peer ends the connection.
    GoAway {
        /// Highest stream id of ours the peer accepted.
        last_good_stream_id: u32,
        /// Status ([`GOAWAY_OK`], 1 protocol error, 2 internal error).
        status: u32,
    },
    /// HEADERS: more headers on a stream.
    Headers {
        /// The stream.
        stream_id: u32,
        /// The sender will send nothing more.
        fin: bool,
        /// The headers.
        headers: Headers,
    },
    /// WINDOW_UPDATE (ignored by port-forward peers).
    WindowUpdate {
        /// The stream.
        stream_id: u32,
        /// The window delta.
        delta: u32,
    },
}

fn u32_at(b: &[u8], at: usize) -> u32 {
    u32::from_be_bytes([b[at], b[at + 1], b[at + 2], b[at + 3]])
}

fn control_name(t: u16) -> &'static str {
    match t {
        SYN_STREAM => "SYN_STREAM",
        SYN_REPLY => "SYN_REPLY",
        RST_STREAM => "RST_STREAM",
        SETTINGS => "SETTINGS",
        PING => "PING",
        GOAWAY => "GOAWAY",
        HEADERS => "HEADERS",
        WINDOW_UPDATE => "WINDOW_UPDATE",
        _ => "unknown",
    }
}

/// The receiving side of one connection: push bytes, pull frames.
///
/// Memory: what was pushed and not yet pulled, at most one control frame
/// (its 8-byte head plus [`Limits::max_control`]) plus the last push, if
/// the caller pulls every frame before pushing more.
pub struct Decoder {
    buf: Vec<u8>,
    pos: usize,
    /// Inside a DATA frame: stream, FIN flag, payload bytes still to come.
    data: Option<(u32, bool, u32)>,
    inflater: Inflater,
    limits: Limits,
    failed: bool,
}

impl Default for Decoder {
    fn default() -> Self {
        Decoder::new(Limits::DEFAULT)
    }
}

impl Decoder {
    /// A decoder for a new connection.
    pub fn new(limits: Limits) -> Decoder {
        Decoder {
            buf: Vec::new(),
            pos: 0,
            data: None,
            inflater: Inflater::new(),
            limits,
            failed: false,
        }
    }

    /// Appends received bytes (any split, empty included).
    pub fn push(&mut self, bytes: &[u8]) {
        if self.failed {
            return;
        }
        if self.pos > 0 && (self.pos == self.buf.len() || self.pos >= 64 * 1024) {
            self.buf.drain(..self.pos);
            self.pos = 0;
        }
        self.buf.extend_from_slice(bytes);
    }

    /// Bytes pushed and not yet handed out.
    pub fn buffered(&self) -> usize {
        self.buf.len() - self.pos
    }

    /// Whether the bytes so far end on a frame boundary (nothing partial
    /// is waiting): a peer that closes now closed cleanly.
    pub fn at_boundary(&self) -> bool {
        self.data.is_none() && self.buffered() == 0
    }

    /// The next frame (or DATA piece) complete so far, `Ok(None)` when more
    /// bytes are needed. An error ends the decoder: every later call
    /// returns [`SpdyError::Failed`].
    #[allow(clippy::should_implement_trait)]
    pub fn next(&mut self) -> Result<Option<Frame>, SpdyError> {
        if self.failed {
            return Err(SpdyError::Failed);
        }
        match self.step() {
            Ok(f) => Ok(f),
            Err(e) => {
                self.failed = true;
                self.buf = Vec::new();
                self.pos = 0;
                Err(e)
            }
        }
    }

    fn step(&mut self) -> Result<Option<Frame>, SpdyError> {
        if let Some((stream_id, fin, left)) = self.data {
            let avail = self.buffered().min(left as usize);
            if avail == 0 && left > 0 {
                return Ok(None);
            }
            let data = self.buf[self.pos..self.pos + avail].to_vec();
            self.pos += avail;
            // avail <= left, and left is a u32.
            let left = left - avail as u32;
            let last = left == 0;
            self.data = if last {
                None
            } else {
                Some((stream_id, fin, left))
            };
            return Ok(Some(Frame::Data {
                stream_id,
                data,
                fin: fin && last,
            }));
        }
        if self.buffered() < 8 {
            return Ok(None);
        }
        let head = &self.buf[self.pos..self.pos + 8];
        let w0 = u32_at(head, 0);
        let flags = head[4];
        let len = u32_at(head, 4) & 0x00FF_FFFF;
        if w0 & 0x8000_0000 == 0 {
            if len > self.limits.max_data {
                return Err(SpdyError::FrameTooLarge {
                    kind: "DATA",
                    len,
                    max: self.limits.max_data,
                });
            }
            let stream_id = w0 & 0x7FFF_FFFF;
            if stream_id == 0 {
                return Err(SpdyError::Zero("DATA stream id"));
            }
            self.pos += 8;
            self.data = Some((stream_id, flags & FLAG_FIN != 0, len));
            return self.step();
        }
        let version = ((w0 >> 16) & 0x7FFF) as u16;
        let kind = (w0 & 0xFFFF) as u16;
        if version != VERSION {
            return Err(SpdyError::BadVersion(version));
        }
        if !matches!(
            kind,
            SYN_STREAM
                | SYN_REPLY
                | RST_STREAM
                | SETTINGS
                | PING
                | GOAWAY
                | HEADERS
                | WINDOW_UPDATE
        ) {
            return Err(SpdyError::UnknownControlType(kind));
        }
        if len > self.limits.max_control {
            return Err(SpdyError::FrameTooLarge {
                kind: control_name(kind),
                len,
                max: self.limits.max_control,
            });
        }
        check_control_shape(kind, flags, len)?;
        if self.buffered() < 8 + len as usize {
            return Ok(None);
        }
        let start = self.pos + 8;
        let end = start + len as usize;
        self.pos = end;
        let payload = std::mem::take(&mut self.buf);
        let frame = self.control(kind, flags, &payload[start..end]);
        self.buf = payload;
        frame.map(Some)
    }

    fn control(&mut self, kind: u16, flags: u8, p: &[u8]) -> Result<Frame, SpdyError> {
        let fin = flags & FLAG_FIN != 0;
        let id = |what: &'static str| {
            let id = u32_at(p, 0) & 0x7FFF_FFFF;
            if id == 0 {
                Err(SpdyError::Zero(what))
            } else {
                Ok(id)
            }
        };
        Ok(match kind {
            SYN_STREAM => Frame::SynStream {
                stream_id: id("SYN_STREAM stream id")?,
                assoc_id: u32_at(p, 4) & 0x7FFF_FFFF,
                priority: p[8] >> 5,
                fin,
                unidirectional: flags & FLAG_UNIDIRECTIONAL != 0,
                headers: self.headers(&p[10..])?,
            },
            SYN_REPLY => Frame::SynReply {
                stream_id: id("SYN_REPLY stream id")?,
                fin,
                headers: self.headers(&p[4..])?,
            },
            HEADERS => Frame::Headers {
                stream_id: id("HEADERS stream id")?,
                fin,
                headers: self.headers(&p[4..])?,
            },
            RST_STREAM => {
                let stream_id = id("RST_STREAM stream id")?;
                let status = u32_at(p, 4);
                if status == 0 {
                    return Err(SpdyError::Zero("RST_STREAM status"));
                }
                Frame::RstStream { stream_id, status }
            }
            SETTINGS => Frame::Settings {
                flags,
                entries: p[4..]
                    .chunks_exact(8)
                    .map(|e| (e[0], u32_at(e, 0) & 0x00FF_FFFF, u32_at(e, 4)))
                    .collect(),
            },
            PING => match u32_at(p, 0) {
                0 => return Err(SpdyError::Zero("PING id")),
                id => Frame::Ping { id },
            },
            GOAWAY => Frame::GoAway {
                last_good_stream_id: u32_at(p, 0) & 0x7FFF_FFFF,
                status: u32_at(p, 4),
            },
            _ => Frame::WindowUpdate {
                stream_id: u32_at(p, 0) & 0x7FFF_FFFF,
                delta: u32_at(p, 4) & 0x7FFF_FFFF,
            },
        })
    }

    fn headers(&mut self, compressed: &[u8]) -> Result<Headers, SpdyError> {
        let block = self
            .inflater
            .inflate(compressed, self.limits.max_header_block)?;
        Headers::from_block(&block)
    }
}

/// Length and flag rules per control type, checked from the 8-byte head
/// alone (before the payload is buffered).
fn check_control_shape(kind: u16, flags: u8, len: u32) -> Result<(), SpdyError> {
    let name = control_name(kind);
    let bad_len = || Err(SpdyError::BadLength { kind: name, len });
    match kind {
        SYN_STREAM if len < 10 => bad_len(),
        SYN_REPLY | HEADERS if len < 4 => bad_len(),
        RST_STREAM if len != 8 => bad_len(),
        SETTINGS if len < 4 || (len - 4) % 8 != 0 => bad_len(),
        PING if len != 4 => bad_len(),
        GOAWAY | WINDOW_UPDATE if len != 8 => bad_len(),
        PING | GOAWAY | WINDOW_UPDATE if flags != 0 => {
            Err(SpdyError::BadFlags { kind: name, flags })
        }
        _ => Ok(()),
    }
}

/// The sending side of one connection: frames to bytes, header blocks
/// through one zlib stream.
#[derive(Default)]
pub struct Encoder {
    deflater: Deflater,
}

impl Encoder {
    /// An encoder for a new connection.
    pub fn new() -> Encoder {
        Encoder {
            deflater: Deflater::new(),
        }
    }

    /// Appends `frame`'s bytes to `out`. Refused: a DATA payload over
    /// [`MAX_DATA_LENGTH`], a control payload over 2^24−1, a zero stream
    /// id where the reader would refuse one. On an error `out` is left as
    /// it was, but a header block may have gone into the zlib stream: end
    /// the connection.
    pub fn encode(&mut self, frame: &Frame, out: &mut Vec<u8>) -> Result<(), SpdyError> {
        let (kind, flags, payload) = match frame {
            Frame::Data {
                stream_id,
                data,
                fin,
            } => return write_data(out, *stream_id, data, *fin),
            Frame::SynStream {
                stream_id,
                assoc_id,
                priority,
                fin,
                unidirectional,
                headers,
            } => {
                let mut p = Vec::with_capacity(64);
                p.extend_from_slice(&nonzero(*stream_id)?.to_be_bytes());
                p.extend_from_slice(&(assoc_id & 0x7FFF_FFFF).to_be_bytes());
                p.push((priority & 7) << 5);
                p.push(0);
                self.deflater.deflate(&headers.to_block()?, &mut p)?;
                let flags = flag(*fin, FLAG_FIN) | flag(*unidirectional, FLAG_UNIDIRECTIONAL);
                (SYN_STREAM, flags, p)
            }
            Frame::SynReply {
                stream_id,
                fin,
                headers,
            }
            | Frame::Headers {
                stream_id,
                fin,
                headers,
            } => {
                let mut p = Vec::with_capacity(32);
                p.extend_from_slice(&nonzero(*stream_id)?.to_be_bytes());
                self.deflater.deflate(&headers.to_block()?, &mut p)?;
                let kind = if matches!(frame, Frame::SynReply { .. }) {
                    SYN_REPLY
                } else {
                    HEADERS
                };
                (kind, flag(*fin, FLAG_FIN), p)
            }
            Frame::RstStream { stream_id, status } => {
                (RST_STREAM, 0, two(nonzero(*stream_id)?, *status))
            }
            Frame::Settings { flags, entries } => {
                let mut p = Vec::with_capacity(4 + 8 * entries.len());
                let n = u32::try_from(entries.len())
                    .map_err(|_| SpdyError::Unencodable("too many SETTINGS entries"))?;
                p.extend_from_slice(&n.to_be_bytes());
                for (f, id, value) in entries {
                    p.extend_from_slice(&(u32::from(*f) << 24 | (id & 0x00FF_FFFF)).to_be_bytes());
                    p.extend_from_slice(&value.to_be_bytes());
                }
                (SETTINGS, *flags, p)
            }
            Frame::Ping { id } => match id {
                0 => return Err(SpdyError::Unencodable("a PING id of 0")),
                id => (PING, 0, id.to_be_bytes().to_vec()),
            },
            Frame::GoAway {
                last_good_stream_id,
                status,
            } => (GOAWAY, 0, two(last_good_stream_id & 0x7FFF_FFFF, *status)),
            Frame::WindowUpdate { stream_id, delta } => {
                (WINDOW_UPDATE, 0, two(stream_id & 0x7FFF_FFFF, *delta))
            }
        };
        let len = u32::try_from(payload.len())
            .ok()
            .filter(|&l| l <= 0x00FF_FFFF)
            .ok_or(SpdyError::Unencodable("control payload over 2^24-1 bytes"))?;
        out.extend_from_slice(
            &(0x8000_0000 | u32::from(VERSION) << 16 | u32::from(kind)).to_be_bytes(),
        );
        out.extend_from_slice(&(u32::from(flags) << 24 | len).to_be_bytes());
        out.extend_from_slice(&payload);
        Ok(())
    }
}

/// Appends a DATA frame to `out`. DATA needs no compressor state, so
/// any thread may write one without the connection's [`Encoder`].
/// Refused: a payload over [`MAX_DATA_LENGTH`], stream id 0.
pub fn write_data(
    out: &mut Vec<u8>,
    stream_id: u32,
    data: &[u8],
    fin: bool,
) -> Result<(), SpdyError> {
    let len = u32::try_from(data.len())
        .ok()
        .filter(|&l| l <= MAX_DATA_LENGTH)
        .ok_or(SpdyError::Unencodable("DATA payload over 2^24-1 bytes"))?;
    let id = nonzero(stream_id)?;
    out.reserve(8 + data.len());
    out.extend_from_slice(&id.to_be_bytes());
    out.extend_from_slice(&(u32::from(flag(fin, FLAG_FIN)) << 24 | len).to_be_bytes());
    out.extend_from_slice(data);
    Ok(())
}

fn flag(on: bool, bit: u8) -> u8 {
    if on {
        bit
    } else {
        0
    }
}

fn nonzero(id: u32) -> Result<u32, SpdyError> {
    match id & 0x7FFF_FFFF {
        0 => Err(SpdyError::Unencodable("a stream or PING id of 0")),
        id => Ok(id),
    }
}

fn two(a: u32, b: u32) -> Vec<u8> {
    let mut p = Vec::with_capacity(8);
    p.extend_from_slice(&a.to_be_bytes());
    p.extend_from_slice(&b.to_be_bytes());
    p
}
