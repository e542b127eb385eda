//! The io socket's wire format (docs/api.md#sessions: `GET /v1/sessions/{id}/io`,
//! subprotocol `kubegate.io.v1`): server frames `[seq][stream][payload]`,
//! the close codes, the gap notice's text, and a viewer's messages (stdin
//! bytes, resize). Sans-IO; the only part of `session::io` the CLI and
//! the soak driver use.

use crate::session::machine::OutStream;
use serde_json::Value;
use std::fmt;
use tungstenite::{Bytes, Message};

/// The io socket's subprotocol.
pub const SUBPROTOCOL: &str = "kubegate.io.v1";
/// Close code for a subscriber that fell behind its queue.
pub const CLOSE_SLOW: u16 = 4001;
/// Close reason sent with [`CLOSE_SLOW`].
pub const SLOW_REASON: &str = "slow_subscriber";
/// Close code for an unknown session or app (the route's, see [`refuse`](super::serve::refuse)).
pub const CLOSE_UNKNOWN: u16 = 4004;
/// Close code when the session ended.
pub const CLOSE_ENDED: u16 = 1000;
/// Close code when the daemon stops (WebSocket "going away"): the
/// session lives on; reconnect with the last seq once it is back.
pub const CLOSE_GOING_AWAY: u16 = 1001;
/// The stream byte of a gap notice in the ring ([`AppIo::push_gap`](super::ring::AppIo::push_gap)):
/// a seq with no data, sent to viewers as `{"type":"gap"}`.
pub const GAP_STREAM: u8 = 0xFF;

/// The wire number of a stream: 0 tty, 1 stdout, 2 stderr.
pub fn stream_byte(s: OutStream) -> u8 {
    match s {
        OutStream::Tty => 0,
        OutStream::Stdout => 1,
        OutStream::Stderr => 2,
    }
}

/// A server binary frame: `[seq: u32 BE][stream: u8][payload]`.
pub fn encode_frame(seq: u32, stream: u8, payload: &[u8]) -> Vec<u8> {
    let mut b = Vec::with_capacity(5 + payload.len());
    b.extend_from_slice(&seq.to_be_bytes());
    b.push(stream);
    b.extend_from_slice(payload);
    b
}

/// The inverse of [`encode_frame`]: `(seq, stream, payload)`, or None for
/// fewer than 5 bytes.
pub fn decode_frame(b: &[u8]) -> Option<(u32, u8, &[u8])> {
    let seq = u32::from_be_bytes(b.get(..4)?.try_into().ok()?);
    let stream = *b.get(4)?;
    Some((seq, stream, &b[5..]))
}

/// The gap notice's text: `{"type":"gap","from":A,"to":B}`.
pub fn gap_text(from: u32, to: u32) -> String {
    serde_json::json!({"type": "gap", "from": from, "to": to}).to_string()
}

/// A message from a viewer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ClientMsg {
    /// Binary frame: bytes for the app's stdin.
    Stdin(Bytes),
    /// `{"type":"resize","cols":C,"rows":R}`, both 1..=65535.
    Resize { cols: u16, rows: u16 },
}

/// Why a viewer's text frame was refused (the socket is then closed
/// with 1008 and this text as the reason).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ClientMsgError {
    /// The text is not JSON.
    NotJson,
    /// The JSON has no string `type`.
    NoType,
    /// A `type` other than `resize`.
    UnknownType(String),
    /// `cols` or `rows` missing or out of 1..=65535.
    BadDimensions,
}

impl fmt::Display for ClientMsgError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ClientMsgError::NotJson => f.write_str("a text frame must be JSON"),
            ClientMsgError::NoType => f.write_str("a text frame needs a string \"type\""),
            ClientMsgError::UnknownType(t) => write!(f, "unknown frame type {t:?}"),
            ClientMsgError::BadDimensions => {
                f.write_str("terminal dimensions must be integers between 1 and 65535")
            }
        }
    }
}

impl std::error::Error for ClientMsgError {}

/// Reads a viewer's message. `Ok(None)` for messages that carry nothing
/// (pings, an empty binary frame); `Err` with a reason for a text frame
/// that is not a valid resize (the socket is then closed with 1008).
pub fn parse_client(m: &Message) -> Result<Option<ClientMsg>, ClientMsgError> {
    match m {
        Message::Binary(b) if b.is_empty() => Ok(None),
        Message::Binary(b) => Ok(Some(ClientMsg::Stdin(b.clone()))),
        Message::Text(t) => {
            let v: Value = serde_json::from_str(t.as_str()).map_err(|_| ClientMsgError::NotJson)?;
            match v.get("type").and_then(Value::as_str) {
                Some("resize") => {
                    let dim = |k: &str| {
                        v.get(k)
                            .and_then(Value::as_u64)
                            .and_then(|n| u16::try_from(n).ok())
                            .filter(|n| *n > 0)
                            .ok_or(ClientMsgError::BadDimensions)
                    };
                    Ok(Some(ClientMsg::Resize {
                        cols: dim("cols")?,
                        rows: dim("rows")?,
                    }))
                }
                Some(other) => Err(ClientMsgError::UnknownType(other.to_string())),
                None => Err(ClientMsgError::NoType),
            }
        }
        _ => Ok(None),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn wire_frames_round_trip() {
        let b = encode_frame(0x01020304, 2, b"hi");
        assert_eq!(b, [1, 2, 3, 4, 2, b'h', b'i']);
        assert_eq!(decode_frame(&b), Some((0x01020304, 2, &b"hi"[..])));
        assert_eq!(decode_frame(&b[..5]), Some((0x01020304, 2, &b""[..])));
        assert_eq!(decode_frame(&b[..4]), None);
        let g: Value = serde_json::from_str(&gap_text(3, 9)).unwrap();
        assert_eq!(g, serde_json::json!({"type": "gap", "from": 3, "to": 9}));
        assert_eq!(stream_byte(OutStream::Tty), 0);
        assert_eq!(stream_byte(OutStream::Stdout), 1);
        assert_eq!(stream_byte(OutStream::Stderr), 2);
    }

    #[test]
    fn client_messages() {
        let t = |s: &str| parse_client(&Message::Text(s.into()));
        assert_eq!(
            t(r#"{"type":"resize","cols":80,"rows":24}"#),
            Ok(Some(ClientMsg::Resize { cols: 80, rows: 24 }))
        );
        assert!(t(r#"{"type":"resize","cols":0,"rows":24}"#).is_err());
        assert!(t(r#"{"type":"resize","cols":70000,"rows":24}"#).is_err());
        assert!(t(r#"{"type":"resize","cols":1.5,"rows":24}"#).is_err());
        assert!(t(r#"{"type":"resize","cols":80}"#).is_err());
        assert!(t(r#"{"type":"bogus"}"#).is_err());
        assert!(t(r#"{"cols":1}"#).is_err());
        assert!(t("not json").is_err());
        assert_eq!(
            parse_client(&Message::Binary(Bytes::from_static(b"ls\n"))),
            Ok(Some(ClientMsg::Stdin(Bytes::from_static(b"ls\n"))))
        );
        assert_eq!(parse_client(&Message::Binary(Bytes::new())), Ok(None));
        assert_eq!(parse_client(&Message::Ping(Bytes::new())), Ok(None));
    }
}
