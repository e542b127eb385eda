//! SPDY/3 as `pods/portforward` speaks it (docs/portforward-wire.md §4–§5):
//! a sans-IO frame codec, role-neutral, for the sim's server side and a
//! client alike. Bytes in, frames out ([`Decoder`]); frames in, bytes out
//! ([`Encoder`]). It opens no socket, starts no thread, keeps no per-stream
//! state and never decides what to answer: the caller owns streams, replies,
//! PING echoes and GOAWAY.
//!
//! - [`Decoder::push`] takes bytes as they come, however split (kubectl
//!   sends each frame field as its own WebSocket message); [`Decoder::next`]
//!   returns the frames complete so far. DATA is handed out in pieces as
//!   its bytes arrive ([`Frame::Data`], `fin` on the last piece only), so a
//!   16 MiB frame never sits in memory whole; a control frame is handed out
//!   whole once its last byte is in. After the first error the decoder
//!   refuses everything: the connection must end (spdystream tears it down
//!   on any frame error, and the header zlib stream is out of step).
//! - [`Encoder::encode`] writes any frame; header blocks go through its one
//!   zlib stream. [`write_data`] writes a DATA frame without it (any
//!   thread may).
//! - [`Role`]: stream and PING id parity (client odd, server even).
//!
//! Bounds ([`Limits`], defaults in [`Limits::DEFAULT`]): a DATA frame may
//! announce up to 2^24−1 bytes (SPDY's own maximum; it streams through in
//! pieces); a control frame's payload may be at most 16 KiB and a header
//! block may inflate to at most 16 KiB (kubectl's are under 100 bytes), so
//! a peer can make us buffer at most one control frame plus one read. What
//! upstream refuses as a connection error is refused here too (bad PING,
//! GOAWAY or WINDOW_UPDATE lengths or flags, RST_STREAM status 0, stream id
//! 0, unknown control types, uppercase or repeated header names); this codec
//! also refuses a control frame whose version is not 3 (spdystream does not
//! look; kubectl always writes 3).

pub mod dictionary;
mod frame;
mod headers;

#[cfg(test)]
mod frame_tests;

pub use frame::{write_data, Decoder, Encoder, Frame, Limits, GOAWAY_OK, MAX_DATA_LENGTH};
pub use headers::{Deflater, Headers, Inflater};

use std::fmt;

/// RST_STREAM status: PROTOCOL_ERROR.
pub const RST_PROTOCOL_ERROR: u32 = 1;
/// RST_STREAM status: INVALID_STREAM.
pub const RST_INVALID_STREAM: u32 = 2;
/// RST_STREAM status: REFUSED_STREAM.
pub const RST_REFUSED_STREAM: u32 = 3;
/// RST_STREAM status: CANCEL (the kubelet's answer to a bad stream).
pub const RST_CANCEL: u32 = 5;
/// RST_STREAM status: INTERNAL_ERROR.
pub const RST_INTERNAL_ERROR: u32 = 6;

/// Which end of the connection we are: the client opens odd stream ids
/// and PINGs with odd ids, the server even ones (spdystream
/// `NewConnection`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Role {
    /// The side that dialled (kubectl).
    Client,
    /// The side that accepted (the kubelet, the sim).
    Server,
}

impl Role {
    /// The first stream id this side opens (1 or 2); then +2 each.
    pub fn first_stream_id(self) -> u32 {
        match self {
            Role::Client => 1,
            Role::Server => 2,
        }
    }

    /// Whether `id` (a stream or PING id) is one this side opens. A PING
    /// whose id is not ours was started by the peer and is echoed back.
    pub fn owns_id(self, id: u32) -> bool {
        (id % 2 == 1) == (self == Role::Client)
    }
}

/// A frame error: the connection must end. [`SpdyError::code`] is stable.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SpdyError {
    /// A frame announced more than the limit for its kind.
    FrameTooLarge {
        /// `DATA` or the control type's name.
        kind: &'static str,
        /// The announced length.
        len: u32,
        /// The limit.
        max: u32,
    },
    /// A control frame's length is wrong for its type.
    BadLength {
        /// The control type's name.
        kind: &'static str,
        /// The announced length.
        len: u32,
    },
    /// Flags a frame type may not carry (PING, GOAWAY, WINDOW_UPDATE: none).
    BadFlags {
        /// The control type's name.
        kind: &'static str,
        /// The flags byte.
        flags: u8,
    },
    /// A control frame of a version other than 3.
    BadVersion(u16),
    /// A control type port-forward never uses (NOOP, CREDENTIAL, …).
    UnknownControlType(u16),
    /// A value that must not be 0 was (stream id, PING id, RST status).
    Zero(&'static str),
    /// A header block that does not inflate or parse.
    BadHeaderBlock(String),
    /// A header block inflating past the limit.
    HeaderBlockTooLarge {
        /// The limit in bytes.
        max: usize,
    },
    /// A header name with an uppercase letter.
    UppercaseHeaderName(String),
    /// A header name twice in one block.
    DuplicateHeader(String),
    /// A frame we were asked to write cannot be written.
    Unencodable(&'static str),
    /// An earlier error ended this decoder.
    Failed,
}

impl SpdyError {
    /// A stable code for logs and tests.
    pub fn code(&self) -> &'static str {
        match self {
            SpdyError::FrameTooLarge { .. } => "SPDY_FRAME_TOO_LARGE",
            SpdyError::BadLength { .. } => "SPDY_BAD_LENGTH",
            SpdyError::BadFlags { .. } => "SPDY_BAD_FLAGS",
            SpdyError::BadVersion(_) => "SPDY_BAD_VERSION",
            SpdyError::UnknownControlType(_) => "SPDY_UNKNOWN_CONTROL_TYPE",
            SpdyError::Zero(_) => "SPDY_ZERO_FIELD",
            SpdyError::BadHeaderBlock(_) => "SPDY_BAD_HEADER_BLOCK",
            SpdyError::HeaderBlockTooLarge { .. } => "SPDY_HEADER_BLOCK_TOO_LARGE",
            SpdyError::UppercaseHeaderName(_) => "SPDY_UPPERCASE_HEADER_NAME",
            SpdyError::DuplicateHeader(_) => "SPDY_DUPLICATE_HEADER",
            SpdyError::Unencodable(_) => "SPDY_UNENCODABLE",
            SpdyError::Failed => "SPDY_FAILED",
        }
    }
}

impl fmt::Display for SpdyError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: ", self.code())?;
        match self {
            SpdyError::FrameTooLarge { kind, len, max } => {
                write!(f, "{kind} frame of {len} bytes (at most {max})")
            }
            SpdyError::BadLength { kind, len } => write!(f, "{kind} frame with length {len}"),
            SpdyError::BadFlags { kind, flags } => {
                write!(f, "{kind} frame with flags {flags:#04x}")
            }
            SpdyError::BadVersion(v) => write!(f, "control frame of version {v}, not 3"),
            SpdyError::UnknownControlType(t) => write!(f, "unknown control frame type {t}"),
            SpdyError::Zero(what) => write!(f, "{what} is 0"),
            SpdyError::BadHeaderBlock(m) => write!(f, "{m}"),
            SpdyError::HeaderBlockTooLarge { max } => {
                write!(f, "header block inflates past {max} bytes")
            }
            SpdyError::UppercaseHeaderName(n) => write!(f, "header name {n:?} is not lowercase"),
            SpdyError::DuplicateHeader(n) => write!(f, "header {n:?} repeated"),
            SpdyError::Unencodable(m) => write!(f, "{m}"),
            SpdyError::Failed => write!(f, "the connection already failed"),
        }
    }
}

impl std::error::Error for SpdyError {}
