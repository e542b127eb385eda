//! The exec/attach WebSocket subprotocols `v4.channel.k8s.io` and
//! `v5.channel.k8s.io`: channel framing, subprotocol negotiation, the stream
//! close signal, terminal resizes and the channel-3 exit status.
//!
//! It owns the bytes inside WebSocket messages, for both the simulated server
//! and the client. It never touches WebSocket framing itself (opcodes, masks,
//! ping/pong: `http::ws` and tungstenite do that), never reads or writes a
//! socket, and never decides when to send what; that is the session code's
//! job. Frames are classified the same whatever the WebSocket opcode: the
//! Python client sends stdin in TEXT messages, kubectl only in BINARY ones,
//! and servers must accept both (output must always go out as BINARY).
//!
//! Upstream references: apimachinery `pkg/util/httpstream/wsstream/conn.go`
//! (negotiation, v5 CLOSE handling), apiserver `pkg/util/proxy/streamtranslator.go`
//! (the v5 path's statuses), client-go `tools/remotecommand/v4.go`
//! (`errorDecoderV4`, the status decoding), kubelet/CRI streaming (v4 path).

use crate::kube::jsonstream::{JsonSplitter, SplitError};
use crate::kube::status::{Status, StatusCause, StatusDetails, StatusReason, FAILURE, SUCCESS};
use serde_json::{Map, Value};
use std::fmt;

/// Channel 0: client to server, the process's stdin.
pub const STDIN: u8 = 0;
/// Channel 1: server to client, stdout (and stderr when tty).
pub const STDOUT: u8 = 1;
/// Channel 2: server to client, stderr.
pub const STDERR: u8 = 2;
/// Channel 3: server to client, the final Status, written once.
pub const ERROR: u8 = 3;
/// Channel 4: client to server, terminal size JSON.
pub const RESIZE: u8 = 4;
/// v5 only: `[CLOSE, n]` half-closes channel n.
pub const CLOSE: u8 = 255;
/// The exact v5 message that signals stdin EOF.
pub const CLOSE_STDIN_V5: [u8; 2] = [CLOSE, STDIN];

/// Cause type carrying the exit code (`remotecommand.ExitCodeCauseType`).
pub const EXIT_CODE_CAUSE: &str = "ExitCode";

/// Largest resize message buffered; real ones are about 30 bytes.
const MAX_RESIZE_VALUE: usize = 4096;

/// Largest channel-3 payload collected before giving up.
pub const MAX_STATUS_BYTES: usize = 1024 * 1024;

/// A channel subprotocol this project speaks. Older ones (v1–v3,
/// `channel.k8s.io`, the base64 variants) are not supported.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Protocol {
    /// `v4.channel.k8s.io`: Status on channel 3, no half-close.
    V4,
    /// `v5.channel.k8s.io`: v4 plus the CLOSE signal (channel 255).
    V5,
}

impl Protocol {
    /// The `Sec-WebSocket-Protocol` token.
    pub fn name(self) -> &'static str {
        match self {
            Protocol::V4 => "v4.channel.k8s.io",
            Protocol::V5 => "v5.channel.k8s.io",
        }
    }

    /// Parses one token (surrounding whitespace ignored).
    pub fn parse(token: &str) -> Option<Protocol> {
        match token.trim() {
            "v4.channel.k8s.io" => Some(Protocol::V4),
            "v5.channel.k8s.io" => Some(Protocol::V5),
            _ => None,
        }
    }

    /// Whether `[255, n]` is a close signal (v5) or just an unknown channel (v4).
    pub fn supports_close(self) -> bool {
        self == Protocol::V5
    }
}

impl fmt::Display for Protocol {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// Picks the subprotocol to echo in the 101, as upstream does: walk the
/// CLIENT's offers in the order given and take the first one the server
/// supports (wsstream `handshake`: outer loop over `config.Protocol`, the
/// client's list; golang.org/x/net/websocket splits the header on commas and
/// trims spaces). So kubectl's `v5.channel.k8s.io` gets v5, the Python
/// client's `v5.channel.k8s.io,v4.channel.k8s.io` gets v5, and an offer
/// listing v4 first gets v4. Entries may be whole header values: each is
/// split on commas. `None` (no supported offer) means: refuse the upgrade
/// (upstream answers 400 "requested protocol(s) are not supported").
pub fn server_negotiate(offered: &[String]) -> Option<Protocol> {
    offered
        .iter()
        .flat_map(|h| h.split(','))
        .find_map(Protocol::parse)
}

/// The `Sec-WebSocket-Protocol` value a client sends, preferred first, in
/// one header: `v5.channel.k8s.io,v4.channel.k8s.io`.
pub fn client_offer(protocols: &[Protocol]) -> String {
    protocols
        .iter()
        .map(|p| p.name())
        .collect::<Vec<_>>()
        .join(",")
}

/// One WebSocket message's payload: the channel byte, then the data.
pub fn encode_frame(channel: u8, data: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(data.len() + 1);
    out.push(channel);
    out.extend_from_slice(data);
    out
}

/// The empty frame a server sends on open, on the lowest channel it writes
/// (e.g. `[1]`).
pub fn open_marker(channel: u8) -> [u8; 1] {
    [channel]
}

/// Frames of length <= 1 carry no data: the open markers. Ignore them.
pub fn is_empty_marker(frame: &[u8]) -> bool {
    frame.len() <= 1
}

/// Splits a frame into channel and payload; `None` for an empty message.
/// A one-byte frame gives an empty payload (see [`is_empty_marker`]).
pub fn decode_frame(frame: &[u8]) -> Option<(u8, &[u8])> {
    let (&channel, data) = frame.split_first()?;
    Some((channel, data))
}

/// The channel a v5 close signal closes: `Some(n)` for exactly `[255, n]`.
pub fn parse_close(frame: &[u8]) -> Option<u8> {
    match frame {
        [CLOSE, channel] => Some(*channel),
        _ => None,
    }
}

/// The v5 close signal for `channel`.
pub fn close_frame(channel: u8) -> [u8; 2] {
    [CLOSE, channel]
}

/// A classified incoming message.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Frame<'a> {
    /// Length <= 1: an open marker, ignore.
    Empty,
    /// Data for a channel (which may be one the receiver does not use;
    /// upstream ignores such frames).
    Data { channel: u8, payload: &'a [u8] },
    /// v5 `[255, n]`: channel n is half-closed (for stdin: EOF).
    Close { channel: u8 },
    /// v5 frame on channel 255 that is not exactly two bytes: upstream treats
    /// it as a protocol error and ends the connection.
    BadClose,
}

impl<'a> Frame<'a> {
    /// Classifies a message received under `protocol`.
    pub fn parse(protocol: Protocol, frame: &'a [u8]) -> Frame<'a> {
        if is_empty_marker(frame) {
            return Frame::Empty;
        }
        if protocol.supports_close() && frame[0] == CLOSE {
            return match parse_close(frame) {
                Some(channel) => Frame::Close { channel },
                None => Frame::BadClose,
            };
        }
        Frame::Data {
            channel: frame[0],
            payload: &frame[1..],
        }
    }
}

fn exit_status(code: i32, message: String) -> Status {
    Status {
        status: FAILURE.into(),
        message,
        reason: Some(StatusReason::NonZeroExitCode),
        details: Some(StatusDetails {
            causes: vec![StatusCause {
                reason: EXIT_CODE_CAUSE.into(),
                message: code.to_string(),
                field: String::new(),
            }],
            ..StatusDetails::default()
        }),
        ..Status::default()
    }
}

/// The channel-3 status for an exit code, as the apiserver's v5 stream
/// translator writes it (what kubectl 1.30+ sees): 0 gives
/// `{"metadata":{},"status":"Success"}`; N gives
/// `{"metadata":{},"status":"Failure","message":"command terminated with non-zero exit code: command terminated with exit code N","reason":"NonZeroExitCode","details":{"causes":[{"reason":"ExitCode","message":"N"}]}}`.
/// The doubled wording is upstream's: `codeExitToStatusError` wraps the
/// client-go `CodeExitError` ("command terminated with exit code N") that its
/// SPDY leg to the kubelet produced. Clients accept only 0..=255.
pub fn exit_status_json(code: i32) -> Vec<u8> {
    if code == 0 {
        return success_status_json();
    }
    exit_status(
        code,
        format!(
            "command terminated with non-zero exit code: command terminated with exit code {code}"
        ),
    )
    .to_json()
}

/// The channel-3 status the kubelet/container runtime writes on the v4 path
/// (containerd and CRI-O `CodeExitError`): message
/// `command terminated with non-zero exit code: error executing command [sh -c exit 3], exit code 3`.
/// `cmd` is printed like Go's `%v` of a `[]string`.
pub fn exit_status_json_cri(code: i32, cmd: &[String]) -> Vec<u8> {
    if code == 0 {
        return success_status_json();
    }
    exit_status(
        code,
        format!(
            "command terminated with non-zero exit code: error executing command [{}], exit code {code}",
            cmd.join(" ")
        ),
    )
    .to_json()
}

/// `{"metadata":{},"status":"Success"}`: the end of a successful exec, and
/// of every attach.
pub fn success_status_json() -> Vec<u8> {
    Status {
        status: SUCCESS.into(),
        ..Status::default()
    }
    .to_json()
}

/// A channel-3 InternalError (`NewInternalError` marshalled without
/// kind/apiVersion): message `Internal error occurred: <msg>`, one cause
/// with `msg`, code 500. Used e.g. when the container is not running.
pub fn internal_error_status_json(msg: &str) -> Vec<u8> {
    let mut s = Status::internal_error(msg);
    s.kind = None;
    s.api_version = None;
    s.to_json()
}

/// An exec/attach that did not end with an exit code.
#[derive(Debug, Clone, PartialEq)]
pub struct ExecStatusError {
    /// Text to show the user (kubectl prints it after `error: `).
    pub message: String,
    /// The server's reason for a Failure status; `None` for protocol errors
    /// (garbage, a malformed status, or no status at all).
    pub reason: Option<StatusReason>,
    /// The Status `code` (e.g. 500), 0 when none.
    pub code: i32,
}

impl ExecStatusError {
    fn protocol(message: String) -> ExecStatusError {
        ExecStatusError {
            message,
            reason: None,
            code: 0,
        }
    }
}

impl fmt::Display for ExecStatusError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.message)
    }
}

impl std::error::Error for ExecStatusError {}

/// Decodes ALL bytes received on channel 3, once, after the socket closed,
/// exactly as client-go's `errorDecoderV4` does:
/// - empty: exit code 0 (upstream treats a channel that closed empty as
///   success; the caller must separately treat a socket that closed without a
///   close frame and without status as an error, see [`StatusCollector`]);
/// - `status: Success`: 0;
/// - Failure, reason `NonZeroExitCode`: the first `ExitCode` cause's message
///   parsed as 0..=255; no details -> "error stream protocol error: details
///   must be set"; no such cause -> "error stream protocol error: no ExitCode
///   cause given"; a bad number -> "error stream protocol error: invalid exit
///   code value \"x\"";
/// - any other Failure: an error with the Status's message and reason;
/// - any other `status`: "error stream protocol error: unknown error";
/// - not JSON: `"error stream protocol error: <parse error> in \"<bytes>\""`.
pub fn decode_exit_status(bytes: &[u8]) -> Result<i32, ExecStatusError> {
    if bytes.is_empty() {
        return Ok(0);
    }
    let status: Status = match parse_status_object(bytes) {
        Ok(s) => s,
        Err(e) => {
            return Err(ExecStatusError::protocol(format!(
                "error stream protocol error: {e} in {}",
                crate::kube::status::go_quote(&String::from_utf8_lossy(bytes))
            )))
        }
    };
    match status.status.as_str() {
        SUCCESS => Ok(0),
        FAILURE => {
            if status.reason == Some(StatusReason::NonZeroExitCode) {
                let Some(details) = &status.details else {
                    return Err(ExecStatusError::protocol(
                        "error stream protocol error: details must be set".into(),
                    ));
                };
                if let Some(c) = details.causes.iter().find(|c| c.reason == EXIT_CODE_CAUSE) {
                    return c.message.parse::<u8>().map(i32::from).map_err(|_| {
                        ExecStatusError::protocol(format!(
                            "error stream protocol error: invalid exit code value {}",
                            crate::kube::status::go_quote(&c.message)
                        ))
                    });
                }
                return Err(ExecStatusError::protocol(format!(
                    "error stream protocol error: no {EXIT_CODE_CAUSE} cause given"
                )));
            }
            Err(ExecStatusError {
                message: status.message.clone(),
                reason: status.reason.clone(),
                code: status.code,
            })
        }
        _ => Err(ExecStatusError::protocol(
            "error stream protocol error: unknown error".into(),
        )),
    }
}

/// Parses one JSON object as a Status, tolerating trailing whitespace only.
fn parse_status_object(bytes: &[u8]) -> Result<Status, serde_json::Error> {
    let v: Value = serde_json::from_slice(bytes)?;
    if !v.is_object() {
        return Err(serde::de::Error::custom(format!(
            "expected a JSON object, got {v}"
        )));
    }
    serde_json::from_value(v)
}

/// Collects channel-3 payloads over a session and decides the outcome at
/// the end, so the "socket closed, no status" trap cannot yield exit code 0.
#[derive(Debug, Default)]
pub struct StatusCollector {
    buf: Vec<u8>,
    overflow: bool,
}

impl StatusCollector {
    pub fn new() -> StatusCollector {
        StatusCollector::default()
    }

    /// Appends one channel-3 payload (without the channel byte).
    pub fn push(&mut self, payload: &[u8]) {
        if self.buf.len() + payload.len() > MAX_STATUS_BYTES {
            self.overflow = true;
            return;
        }
        self.buf.extend_from_slice(payload);
    }

    /// True once any status byte arrived.
    pub fn has_status(&self) -> bool {
        !self.buf.is_empty() || self.overflow
    }

    /// The exit code. `clean_close` says whether the peer ended with a
    /// WebSocket close frame; without one and without any status bytes the
    /// session is an error ("ended without exit status"), never exit 0.
    pub fn finish(&self, clean_close: bool) -> Result<i32, ExecStatusError> {
        if self.overflow {
            return Err(ExecStatusError::protocol(format!(
                "error stream protocol error: status larger than {MAX_STATUS_BYTES} bytes"
            )));
        }
        if self.buf.is_empty() && !clean_close {
            return Err(ExecStatusError::protocol(
                "exec stream ended without exit status".into(),
            ));
        }
        decode_exit_status(&self.buf)
    }
}

/// A terminal size as client-go's `TerminalSize` (JSON keys `Width`, `Height`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct TermSize {
    pub width: u16,
    pub height: u16,
}

/// The resize payload as client-go writes it (`json.Encoder`, so a trailing
/// newline): `{"Width":100,"Height":30}\n`.
pub fn resize_payload(size: TermSize) -> Vec<u8> {
    format!("{{\"Width\":{},\"Height\":{}}}\n", size.width, size.height).into_bytes()
}

/// A complete resize frame: channel 4, then [`resize_payload`].
pub fn encode_resize(size: TermSize) -> Vec<u8> {
    encode_frame(RESIZE, &resize_payload(size))
}

/// Why a resize message was not understood.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ResizeError {
    /// The channel-4 byte stream is not a stream of JSON objects. Fatal.
    Framing(SplitError),
    /// One value was not a terminal size (bad JSON, a width over 65535…).
    /// The decoder continues with the next value.
    Invalid(String),
}

impl fmt::Display for ResizeError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ResizeError::Framing(e) => write!(f, "resize stream: {e}"),
            ResizeError::Invalid(m) => write!(f, "resize stream: invalid size: {m}"),
        }
    }
}

impl std::error::Error for ResizeError {}

/// Decodes channel-4 payloads: a stream of JSON values, possibly several per
/// frame, possibly split across frames, newlines optional. Keys match
/// case-insensitively and unknown keys are ignored, as Go's `encoding/json`
/// does; a missing key leaves 0.
#[derive(Debug)]
pub struct ResizeDecoder {
    splitter: JsonSplitter,
    /// A framing error was reported; later calls return None.
    failed: bool,
}

impl Default for ResizeDecoder {
    fn default() -> Self {
        ResizeDecoder::new()
    }
}

impl ResizeDecoder {
    pub fn new() -> ResizeDecoder {
        ResizeDecoder {
            splitter: JsonSplitter::new(MAX_RESIZE_VALUE),
            failed: false,
        }
    }

    /// Appends one channel-4 payload (without the channel byte).
    pub fn push(&mut self, payload: &[u8]) {
        self.splitter.push(payload);
    }

    /// The next size, `None` when more bytes are needed.
    /// The next size; after a framing error (reported once) always None.
    pub fn next_size(&mut self) -> Option<Result<TermSize, ResizeError>> {
        if self.failed {
            return None;
        }
        match self.splitter.next_value()? {
            Ok(raw) => Some(parse_size(raw)),
            Err(e) => {
                self.failed = true;
                Some(Err(ResizeError::Framing(e)))
            }
        }
    }
}

impl Iterator for ResizeDecoder {
    type Item = Result<TermSize, ResizeError>;

    fn next(&mut self) -> Option<Self::Item> {
        self.next_size()
    }
}

fn parse_size(raw: &[u8]) -> Result<TermSize, ResizeError> {
    let v: Map<String, Value> =
        serde_json::from_slice(raw).map_err(|e| ResizeError::Invalid(e.to_string()))?;
    let mut size = TermSize::default();
    for (k, val) in &v {
        let slot = if k.eq_ignore_ascii_case("width") {
            &mut size.width
        } else if k.eq_ignore_ascii_case("height") {
            &mut size.height
        } else {
            continue;
        };
        *slot = match val {
            Value::Null => 0,
            Value::Number(n) => n
                .as_u64()
                .and_then(|n| u16::try_from(n).ok())
                .ok_or_else(|| ResizeError::Invalid(format!("{k} {n} is not a uint16")))?,
            other => return Err(ResizeError::Invalid(format!("{k} is {other}"))),
        };
    }
    Ok(size)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn offers(v: &[&str]) -> Vec<String> {
        v.iter().map(|s| s.to_string()).collect()
    }

    #[test]
    fn constants() {
        assert_eq!(
            (STDIN, STDOUT, STDERR, ERROR, RESIZE, CLOSE),
            (0, 1, 2, 3, 4, 255)
        );
        assert_eq!(CLOSE_STDIN_V5, [255, 0]);
        assert_eq!(close_frame(STDIN), CLOSE_STDIN_V5);
        assert_eq!(Protocol::V4.name(), "v4.channel.k8s.io");
        assert_eq!(Protocol::V5.to_string(), "v5.channel.k8s.io");
        assert!(Protocol::V5.supports_close() && !Protocol::V4.supports_close());
    }

    #[test]
    fn negotiation_follows_client_order() {
        assert_eq!(
            server_negotiate(&offers(&["v5.channel.k8s.io"])),
            Some(Protocol::V5)
        );
        // Python client: one header, no space.
        assert_eq!(
            server_negotiate(&offers(&["v5.channel.k8s.io,v4.channel.k8s.io"])),
            Some(Protocol::V5)
        );
        // Already split, with spaces.
        assert_eq!(
            server_negotiate(&offers(&[" v5.channel.k8s.io", " v4.channel.k8s.io "])),
            Some(Protocol::V5)
        );
        assert_eq!(
            server_negotiate(&offers(&["v4.channel.k8s.io, v5.channel.k8s.io"])),
            Some(Protocol::V4)
        );
        assert_eq!(
            server_negotiate(&offers(&[
                "v3.channel.k8s.io",
                "base64.channel.k8s.io, v4.channel.k8s.io"
            ])),
            Some(Protocol::V4)
        );
        assert_eq!(server_negotiate(&offers(&["channel.k8s.io"])), None);
        assert_eq!(server_negotiate(&[]), None);
        assert_eq!(server_negotiate(&offers(&[""])), None);
        assert_eq!(
            client_offer(&[Protocol::V5, Protocol::V4]),
            "v5.channel.k8s.io,v4.channel.k8s.io"
        );
        assert_eq!(
            server_negotiate(&[client_offer(&[Protocol::V5, Protocol::V4])]),
            Some(Protocol::V5)
        );
    }

    #[test]
    fn framing() {
        assert_eq!(encode_frame(STDOUT, b"hi"), b"\x01hi");
        assert_eq!(encode_frame(ERROR, b""), [3]);
        assert_eq!(decode_frame(b"\x02err"), Some((2, &b"err"[..])));
        assert_eq!(decode_frame(&[1]), Some((1, &b""[..])));
        assert_eq!(decode_frame(&[]), None);
        assert!(is_empty_marker(&[]) && is_empty_marker(&open_marker(1)));
        assert!(!is_empty_marker(&[1, b'x']));
        assert_eq!(parse_close(&[255, 0]), Some(0));
        assert_eq!(parse_close(&[255, 2]), Some(2));
        assert_eq!(parse_close(&[255]), None);
        assert_eq!(parse_close(&[255, 0, 0]), None);
        assert_eq!(parse_close(&[0, 0]), None);
        // Binary data of every size round-trips.
        for n in 0..300usize {
            let data: Vec<u8> = (0..n).map(|i| (i * 7) as u8).collect();
            let f = encode_frame(STDIN, &data);
            assert_eq!(decode_frame(&f), Some((STDIN, &data[..])));
        }
    }

    #[test]
    fn frame_classification() {
        use Frame::*;
        let v5 = Protocol::V5;
        let v4 = Protocol::V4;
        assert_eq!(Frame::parse(v5, &[]), Empty);
        assert_eq!(Frame::parse(v5, &[1]), Empty);
        assert_eq!(Frame::parse(v5, &[255]), Empty);
        assert_eq!(Frame::parse(v5, &[255, 0]), Close { channel: 0 });
        assert_eq!(Frame::parse(v5, &[255, 0, 1]), BadClose);
        assert_eq!(
            Frame::parse(v4, &[255, 0]),
            Data {
                channel: 255,
                payload: &[0]
            }
        );
        assert_eq!(
            Frame::parse(v5, b"\x00a\n"),
            Data {
                channel: 0,
                payload: b"a\n"
            }
        );
    }

    #[test]
    fn exit_status_encoding() {
        assert_eq!(
            exit_status_json(0),
            br#"{"metadata":{},"status":"Success"}"#
        );
        assert_eq!(
            success_status_json(),
            br#"{"metadata":{},"status":"Success"}"#
        );
        assert_eq!(
            String::from_utf8(exit_status_json(3)).unwrap(),
            r#"{"metadata":{},"status":"Failure","message":"command terminated with non-zero exit code: command terminated with exit code 3","reason":"NonZeroExitCode","details":{"causes":[{"reason":"ExitCode","message":"3"}]}}"#
        );
        let cmd: Vec<String> = ["sh", "-c", "exit 1"]
            .iter()
            .map(|s| s.to_string())
            .collect();
        assert_eq!(
            String::from_utf8(exit_status_json_cri(1, &cmd)).unwrap(),
            r#"{"metadata":{},"status":"Failure","message":"command terminated with non-zero exit code: error executing command [sh -c exit 1], exit code 1","reason":"NonZeroExitCode","details":{"causes":[{"reason":"ExitCode","message":"1"}]}}"#
        );
        assert_eq!(exit_status_json_cri(0, &cmd), success_status_json());
        assert_eq!(
            String::from_utf8(internal_error_status_json("container main is not running")).unwrap(),
            r#"{"metadata":{},"status":"Failure","message":"Internal error occurred: container main is not running","reason":"InternalError","details":{"causes":[{"message":"container main is not running"}]},"code":500}"#
        );
    }

    #[test]
    fn exit_status_round_trips_for_all_codes() {
        for code in 0..=255 {
            assert_eq!(decode_exit_status(&exit_status_json(code)), Ok(code));
            assert_eq!(
                decode_exit_status(&exit_status_json_cri(code, &["x".into()])),
                Ok(code)
            );
        }
    }

    fn err(bytes: &[u8]) -> ExecStatusError {
        decode_exit_status(bytes).unwrap_err()
    }

    #[test]
    fn exit_status_decoding_cases() {
        assert_eq!(decode_exit_status(b""), Ok(0));
        assert_eq!(
            decode_exit_status(br#"{"metadata":{},"status":"Success"}"#),
            Ok(0)
        );
        // kind/apiVersion present, trailing newline: still fine.
        assert_eq!(
            decode_exit_status(b"{\"kind\":\"Status\",\"apiVersion\":\"v1\",\"metadata\":{},\"status\":\"Success\"}\n"),
            Ok(0)
        );
        // The spec's own example shape; message text does not matter.
        assert_eq!(
            decode_exit_status(br#"{"metadata":{},"status":"Failure","message":"command terminated with non-zero exit code: Error executing in Docker Container: 3","reason":"NonZeroExitCode","details":{"causes":[{"reason":"ExitCode","message":"3"}]}}"#),
            Ok(3)
        );
        // The ExitCode cause need not be first.
        assert_eq!(
            decode_exit_status(br#"{"status":"Failure","reason":"NonZeroExitCode","details":{"causes":[{"reason":"Other","message":"x"},{"reason":"ExitCode","message":"42"}]}}"#),
            Ok(42)
        );

        let e = err(br#"{"metadata":{},"status":"Failure","message":"m","reason":"NonZeroExitCode","details":{"causes":[]}}"#);
        assert_eq!(
            e.message,
            "error stream protocol error: no ExitCode cause given"
        );
        assert_eq!(e.reason, None);
        let e = err(br#"{"status":"Failure","reason":"NonZeroExitCode"}"#);
        assert_eq!(
            e.message,
            "error stream protocol error: details must be set"
        );
        let e = err(br#"{"status":"Failure","reason":"NonZeroExitCode","details":{"causes":[{"reason":"ExitCode","message":"256"}]}}"#);
        assert_eq!(
            e.message,
            "error stream protocol error: invalid exit code value \"256\""
        );
        let e = err(br#"{"status":"Failure","reason":"NonZeroExitCode","details":{"causes":[{"reason":"ExitCode","message":"-1"}]}}"#);
        assert_eq!(
            e.message,
            "error stream protocol error: invalid exit code value \"-1\""
        );

        let e = err(&internal_error_status_json("boom"));
        assert_eq!(e.message, "Internal error occurred: boom");
        assert_eq!(e.reason, Some(StatusReason::InternalError));
        assert_eq!(e.code, 500);
        let e = err(br#"{"status":"Failure","message":"","reason":"Forbidden","code":403}"#);
        assert_eq!((e.reason, e.code), (Some(StatusReason::Forbidden), 403));

        let e = err(br#"{"metadata":{}}"#);
        assert_eq!(e.message, "error stream protocol error: unknown error");
        let e = err(br#"{"status":"Weird"}"#);
        assert_eq!(e.message, "error stream protocol error: unknown error");

        for garbage in [
            &b"not json"[..],
            b"{",
            b"[]",
            b"3",
            b"\xff\xfe",
            b" ",
            b"{\"status\":1}",
        ] {
            let e = err(garbage);
            assert!(
                e.message.starts_with("error stream protocol error: "),
                "{garbage:?}: {}",
                e.message
            );
            assert_eq!(e.reason, None);
        }
    }

    #[test]
    fn collector_never_turns_silence_into_zero() {
        let c = StatusCollector::new();
        assert!(!c.has_status());
        assert_eq!(
            c.finish(false).unwrap_err().message,
            "exec stream ended without exit status"
        );
        assert_eq!(c.finish(true), Ok(0));

        let mut c = StatusCollector::new();
        let s = exit_status_json(7);
        let (a, b) = s.split_at(10);
        c.push(a);
        c.push(b);
        assert!(c.has_status());
        assert_eq!(c.finish(false), Ok(7));
        assert_eq!(c.finish(true), Ok(7));

        let mut c = StatusCollector::new();
        c.push(&vec![b' '; MAX_STATUS_BYTES]);
        c.push(b"x");
        assert!(c.finish(true).is_err());
    }

    #[test]
    fn resize_encoding() {
        let s = TermSize {
            width: 100,
            height: 30,
        };
        assert_eq!(resize_payload(s), b"{\"Width\":100,\"Height\":30}\n");
        assert_eq!(encode_resize(s), b"\x04{\"Width\":100,\"Height\":30}\n");
    }

    fn sizes(d: &mut ResizeDecoder) -> Vec<Result<TermSize, ResizeError>> {
        d.by_ref().collect()
    }

    #[test]
    fn resize_decoding_stream() {
        let ts = |w, h| {
            Ok(TermSize {
                width: w,
                height: h,
            })
        };
        let mut d = ResizeDecoder::new();
        d.push(b"{\"Width\":100,\"Height\":30}\n");
        assert_eq!(sizes(&mut d), vec![ts(100, 30)]);
        // Several per frame, with and without separators.
        d.push(
            b"{\"Width\":1,\"Height\":2}{\"Width\":3,\"Height\":4}\n\n{\"Width\":5,\"Height\":6}",
        );
        assert_eq!(sizes(&mut d), vec![ts(1, 2), ts(3, 4), ts(5, 6)]);
        // Split across frames.
        d.push(b"{\"Wid");
        assert_eq!(sizes(&mut d), vec![]);
        d.push(b"th\":80, \"Height\": 24}");
        assert_eq!(sizes(&mut d), vec![ts(80, 24)]);
        // Go's case-insensitive keys, unknown keys ignored, missing -> 0.
        d.push(br#"{"width":7,"HEIGHT":8,"x":1}{"Width":9}{"Height":null}"#);
        assert_eq!(sizes(&mut d), vec![ts(7, 8), ts(9, 0), ts(0, 0)]);
        // Values that are not sizes are errors; the stream goes on.
        d.push(br#"{"Width":70000,"Height":1}{"Width":-1}{"Width":"80"}{"Width":1.5}[1]{"Width":2,"Height":3}"#);
        let got = sizes(&mut d);
        assert_eq!(got.len(), 6);
        assert!(got[..5]
            .iter()
            .all(|r| matches!(r, Err(ResizeError::Invalid(_)))));
        assert_eq!(got[5], ts(2, 3));
        // Garbage framing is fatal: reported once, then the stream ends
        // (an iterator over it always terminates).
        d.push(b"hello");
        assert!(matches!(d.next_size(), Some(Err(ResizeError::Framing(_)))));
        d.push(b"{\"Width\":1,\"Height\":1}");
        assert!(d.next_size().is_none());
        // Oversized values too.
        let mut d = ResizeDecoder::new();
        d.push(b"{\"Width\":");
        d.push(&vec![b' '; 5000]);
        assert!(matches!(d.next_size(), Some(Err(ResizeError::Framing(_)))));
    }

    #[test]
    fn resize_round_trip_every_split() {
        let mut stream = Vec::new();
        let want: Vec<TermSize> = (0..20u16)
            .map(|i| TermSize {
                width: i * 1000,
                height: u16::MAX - i,
            })
            .collect();
        for s in &want {
            stream.extend_from_slice(&resize_payload(*s));
        }
        for cut in 0..=stream.len() {
            let mut d = ResizeDecoder::new();
            d.push(&stream[..cut]);
            let mut got: Vec<TermSize> = d.by_ref().map(|r| r.unwrap()).collect();
            d.push(&stream[cut..]);
            got.extend(d.by_ref().map(|r| r.unwrap()));
            assert_eq!(got, want, "cut {cut}");
        }
    }
}
