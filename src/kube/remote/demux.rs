//! What the client does with each message the server sends, and how the
//! end of a stream becomes an exit status. Sans-IO: messages in, output
//! chunks and a verdict out.
//!
//! - channel 1 and 2 become [`Output`] chunks (open markers, frames of
//!   length <= 1, are skipped);
//! - channel 3 is collected WHOLE by `StatusCollector` and decoded once,
//!   at the end;
//! - anything else (unknown channels, a v5 close signal the server has no
//!   reason to send) is counted and ignored, as upstream does.
//!
//! The verdict never turns silence into exit code 0: an exec whose stream
//! ended without channel-3 bytes is `NoStatus`, however it ended. Attach is
//! the one exception docs/kubernetes.md#exec-and-attach-over-websocket allows:
//! its status is always Success, so a normal close (1000) without a status is also Success.

use super::error::RemoteError;
use super::request::Kind;
use crate::http::ws::WsEnd;
use crate::kube::channel::{self, Frame, Protocol, StatusCollector};
use tungstenite::protocol::frame::coding::CloseCode;
use tungstenite::Message;

/// A chunk of the remote process's output, in arrival order.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Output {
    /// Channel 1 (with a tty: everything the terminal printed).
    Stdout(Vec<u8>),
    /// Channel 2 (never with a tty).
    Stderr(Vec<u8>),
    /// Only with [`super::ExecOptions::raw_frames`]: a channel-1 or -2
    /// frame exactly as the server sent it (`[channel][data…]`, never
    /// empty), shared rather than copied, for relays that forward frames
    /// in the same layout.
    Frame(tungstenite::Bytes),
}

/// How the remote process ended: its exit code (0..=255; 137 for SIGKILL).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ExitStatus {
    pub code: i32,
}

impl ExitStatus {
    pub fn success(self) -> bool {
        self.code == 0
    }
}

/// Per-stream receive state.
#[derive(Debug)]
pub struct Demux {
    protocol: Protocol,
    /// Pass stdout/stderr frames on whole ([`Output::Frame`]).
    raw: bool,
    status: StatusCollector,
    /// Frames on channels this client does not read.
    pub ignored: u64,
}

impl Demux {
    pub fn new(protocol: Protocol) -> Demux {
        Demux {
            protocol,
            raw: false,
            status: StatusCollector::new(),
            ignored: 0,
        }
    }

    /// Output as whole frames ([`Output::Frame`]) from now on.
    pub fn raw_frames(mut self) -> Demux {
        self.raw = true;
        self
    }

    /// Handles one message from the server; returns output to pass on.
    /// Text messages are classified like binary ones (servers must send
    /// binary, but nothing is gained by dropping a lenient server's output).
    pub fn message(&mut self, m: Message) -> Option<Output> {
        let bytes: &[u8] = match &m {
            Message::Binary(b) => b,
            Message::Text(t) => t.as_bytes(),
            // Close is learned from the pump's end; pings never get here.
            _ => return None,
        };
        let channel = match Frame::parse(self.protocol, bytes) {
            Frame::Empty => return None,
            Frame::Data { channel, payload } if channel == channel::ERROR => {
                self.status.push(payload);
                return None;
            }
            Frame::Data { channel, .. }
                if channel == channel::STDOUT || channel == channel::STDERR =>
            {
                channel
            }
            Frame::Data { .. } | Frame::Close { .. } | Frame::BadClose => {
                self.ignored += 1;
                return None;
            }
        };
        if self.raw {
            if let Message::Binary(b) = m {
                return Some(Output::Frame(b));
            }
        }
        // One copy out of the frame (the payload starts after the channel
        // byte, so the message's buffer cannot be reused as is).
        let payload = bytes[1..].to_vec();
        Some(if channel == channel::STDOUT {
            Output::Stdout(payload)
        } else {
            Output::Stderr(payload)
        })
    }

    #[cfg(test)]
    pub fn has_status(&self) -> bool {
        self.status.has_status()
    }

    /// The verdict once the socket is done (`end` is how the pump ended).
    pub fn finish(self, kind: Kind, end: &WsEnd) -> Result<ExitStatus, RemoteError> {
        if self.status.has_status() {
            return self
                .status
                .finish(true)
                .map(|code| ExitStatus { code })
                .map_err(RemoteError::Status);
        }
        if kind == Kind::Attach && normal_close(end) {
            return Ok(ExitStatus { code: 0 });
        }
        Err(RemoteError::NoStatus {
            ended: describe(end),
        })
    }
}

fn normal_close(end: &WsEnd) -> bool {
    matches!(end, WsEnd::PeerClosed(Some(f)) if f.code == CloseCode::Normal)
}

/// How a stream ended, in words for [`RemoteError::NoStatus`].
pub fn describe(end: &WsEnd) -> String {
    match end {
        WsEnd::Closed => "the client closed the stream".into(),
        WsEnd::PeerClosed(Some(f)) if f.reason.is_empty() => {
            format!("the server closed the stream (code {})", u16::from(f.code))
        }
        WsEnd::PeerClosed(Some(f)) => format!(
            "the server closed the stream (code {}: {})",
            u16::from(f.code),
            f.reason
        ),
        WsEnd::PeerClosed(None) => "the server closed the connection".into(),
        WsEnd::Idle => "nothing came from the server (not even a pong) for too long".into(),
        WsEnd::Error(e) => format!("connection error: {e}"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::kube::channel::{encode_frame, exit_status_json, internal_error_status_json};
    use tungstenite::protocol::CloseFrame;

    fn bin(b: &[u8]) -> Message {
        Message::Binary(b.to_vec().into())
    }

    fn peer(code: CloseCode, reason: &str) -> WsEnd {
        WsEnd::PeerClosed(Some(CloseFrame {
            code,
            reason: reason.into(),
        }))
    }

    #[test]
    fn routes_channels() {
        let mut d = Demux::new(Protocol::V5);
        assert_eq!(d.message(bin(&[1])), None, "open marker");
        assert_eq!(d.message(bin(&[])), None);
        assert_eq!(
            d.message(bin(b"\x01out")),
            Some(Output::Stdout(b"out".to_vec()))
        );
        assert_eq!(
            d.message(bin(b"\x02err")),
            Some(Output::Stderr(b"err".to_vec()))
        );
        assert_eq!(
            d.message(Message::Text("\u{1}txt".into())),
            Some(Output::Stdout(b"txt".to_vec()))
        );
        assert_eq!(d.message(bin(b"\x07x")), None);
        assert_eq!(d.message(bin(&[255, 1])), None);
        assert_eq!(d.message(bin(&[255, 1, 2])), None);
        assert_eq!(d.message(Message::Ping(Default::default())), None);
        assert_eq!(d.ignored, 3);
        assert!(!d.has_status());
        // Binary payloads survive untouched.
        let all: Vec<u8> = (0..=255u8).collect();
        assert_eq!(
            d.message(Message::Binary(encode_frame(1, &all).into())),
            Some(Output::Stdout(all))
        );
    }

    fn run(kind: Kind, frames: &[Vec<u8>], end: WsEnd) -> Result<ExitStatus, RemoteError> {
        let mut d = Demux::new(Protocol::V5);
        for f in frames {
            d.message(Message::Binary(f.clone().into()));
        }
        d.finish(kind, &end)
    }

    #[test]
    fn exit_codes_from_channel_3() {
        for code in [0, 1, 3, 137, 255] {
            let st = encode_frame(3, &exit_status_json(code));
            assert_eq!(
                run(
                    Kind::Exec,
                    std::slice::from_ref(&st),
                    peer(CloseCode::Normal, "")
                ),
                Ok(ExitStatus { code })
            );
            // A status that fully arrived counts even if the close was not clean.
            assert_eq!(
                run(Kind::Exec, &[st], WsEnd::Error("reset".into())),
                Ok(ExitStatus { code })
            );
        }
        // Split across frames: collected whole, parsed once.
        let st = exit_status_json(42);
        let (a, b) = st.split_at(7);
        assert_eq!(
            run(
                Kind::Exec,
                &[
                    encode_frame(3, a),
                    encode_frame(1, b"x"),
                    encode_frame(3, b)
                ],
                peer(CloseCode::Normal, "")
            ),
            Ok(ExitStatus { code: 42 })
        );
        match run(
            Kind::Exec,
            &[encode_frame(
                3,
                &internal_error_status_json("container main is not running"),
            )],
            peer(CloseCode::Normal, ""),
        ) {
            Err(RemoteError::Status(e)) => {
                assert_eq!(e.code, 500);
                assert!(e.message.contains("is not running"));
            }
            other => panic!("{other:?}"),
        }
        assert!(matches!(
            run(
                Kind::Exec,
                &[encode_frame(3, b"{oops")],
                peer(CloseCode::Normal, "")
            ),
            Err(RemoteError::Status(_))
        ));
    }

    #[test]
    fn silence_is_never_exit_zero_for_exec() {
        for end in [
            peer(CloseCode::Normal, ""),
            peer(CloseCode::Error, "stream cut (injected fault)"),
            WsEnd::PeerClosed(None),
            WsEnd::Closed,
            WsEnd::Idle,
            WsEnd::Error("Connection reset without closing handshake".into()),
        ] {
            match run(Kind::Exec, &[vec![1], encode_frame(1, b"out")], end.clone()) {
                Err(RemoteError::NoStatus { ended }) => assert!(!ended.is_empty()),
                other => panic!("{end:?}: {other:?}"),
            }
        }
        match run(
            Kind::Exec,
            &[],
            peer(CloseCode::Error, "stream cut (injected fault)"),
        ) {
            Err(e @ RemoteError::NoStatus { .. }) => {
                assert!(e.to_string().contains("1011: stream cut"), "{e}")
            }
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn attach_succeeds_on_a_normal_close() {
        assert_eq!(
            run(Kind::Attach, &[], peer(CloseCode::Normal, "")),
            Ok(ExitStatus { code: 0 })
        );
        assert_eq!(
            run(
                Kind::Attach,
                &[encode_frame(3, &exit_status_json(0))],
                WsEnd::PeerClosed(None)
            ),
            Ok(ExitStatus { code: 0 })
        );
        for end in [
            peer(CloseCode::Error, "cut"),
            WsEnd::PeerClosed(None),
            WsEnd::Closed,
            WsEnd::Error("x".into()),
        ] {
            assert!(matches!(
                run(Kind::Attach, &[], end),
                Err(RemoteError::NoStatus { .. })
            ),);
        }
    }
}
