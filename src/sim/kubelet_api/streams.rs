//! The sans-IO half of exec and attach over SPDY (the kubelet's
//! remotecommand server): the subprotocol negotiation of the upgrade
//! (`X-Stream-Protocol-Version`), the stream set a session waits for
//! before its process runs (streams named by their `streamtype` header),
//! and the error stream's last words per version. No socket, thread or
//! clock: the caller passes the time.

use crate::kube::spdy::{Headers, RST_REFUSED_STREAM};
use std::time::{Duration, Instant};

/// How long a client has to open every stream it asked for
/// (`DefaultStreamCreationTimeout`).
pub const STREAM_CREATION_TIMEOUT: Duration = Duration::from_secs(30);
/// Streams a session accepts at most, counted or not (an exec uses 5 at
/// most); one more is refused (REFUSED_STREAM).
pub const MAX_STREAMS: usize = 8;

/// A remotecommand subprotocol over SPDY.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Version {
    /// `channel.k8s.io`: error text only on failure, no resize.
    V1,
    /// `v2.channel.k8s.io`: as v1 (the error stream is no longer reset).
    V2,
    /// `v3.channel.k8s.io`: adds the resize stream.
    V3,
    /// `v4.channel.k8s.io`: the error stream carries a JSON Status.
    V4,
    /// `v5.channel.k8s.io`: over SPDY, v4 itself (its CLOSE signal is a
    /// WebSocket matter; SPDY half-closes a stream with FIN).
    V5,
}

/// What the server offers, preferred first (apimachinery's
/// `SupportedStreamingProtocols`).
pub const SERVER_PROTOCOLS: [Version; 5] = [
    Version::V5,
    Version::V4,
    Version::V3,
    Version::V2,
    Version::V1,
];

impl Version {
    /// The `X-Stream-Protocol-Version` token.
    pub fn name(self) -> &'static str {
        match self {
            Version::V1 => "channel.k8s.io",
            Version::V2 => "v2.channel.k8s.io",
            Version::V3 => "v3.channel.k8s.io",
            Version::V4 => "v4.channel.k8s.io",
            Version::V5 => "v5.channel.k8s.io",
        }
    }

    fn parse(token: &str) -> Option<Version> {
        SERVER_PROTOCOLS.into_iter().find(|v| v.name() == token)
    }

    /// Whether a tty session also opens the resize stream (v3 and later).
    pub fn resizes(self) -> bool {
        self >= Version::V3
    }

    /// Whether the error stream carries a JSON Status (v4 and later), not
    /// the failure's text alone.
    pub fn json_status(self) -> bool {
        self >= Version::V4
    }
}

/// Why the upgrade is refused.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Refusal {
    /// No `X-Stream-Protocol-Version` at all: 400.
    Missing,
    /// None in common: 403, naming both sides; the answer lists the
    /// server's in `X-Accepted-Stream-Protocol-Versions`.
    NoCommon(Vec<String>),
}

impl Refusal {
    /// The HTTP status.
    pub fn status(&self) -> u16 {
        match self {
            Refusal::Missing => 400,
            Refusal::NoCommon(_) => 403,
        }
    }

    /// The plain-text body. With no common protocol, upstream's
    /// `Handshake` writes its message and then its caller writes the
    /// same error again (`http.Error` after the 403): both lines.
    pub fn body(&self) -> String {
        match self {
            Refusal::Missing => "unable to upgrade: X-Stream-Protocol-Version is required\n".into(),
            Refusal::NoCommon(client) => {
                let server: Vec<&str> = SERVER_PROTOCOLS.iter().map(|v| v.name()).collect();
                let msg = format!(
                    "unable to upgrade: unable to negotiate protocol: client supports [{}], server accepts [{}]\n",
                    client.join(" "),
                    server.join(" ")
                );
                format!("{msg}{msg}")
            }
        }
    }
}

/// `httpstream.Handshake`: every `X-Stream-Protocol-Version` value, split
/// on commas and trimmed, in the client's order; the first the server
/// supports wins.
pub fn negotiate<'a>(values: impl IntoIterator<Item = &'a str>) -> Result<Version, Refusal> {
    let client: Vec<String> = values
        .into_iter()
        .flat_map(|v| v.split(','))
        .map(|t| t.trim_matches(' ').to_string())
        .filter(|t| !t.is_empty())
        .collect();
    if client.is_empty() {
        return Err(Refusal::Missing);
    }
    client
        .iter()
        .find_map(|t| Version::parse(t))
        .ok_or(Refusal::NoCommon(client))
}

/// A stream's role, from its `streamtype` header.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StreamType {
    Error,
    Stdin,
    Stdout,
    Stderr,
    Resize,
}

impl StreamType {
    fn parse(s: &str) -> Option<StreamType> {
        Some(match s {
            "error" => StreamType::Error,
            "stdin" => StreamType::Stdin,
            "stdout" => StreamType::Stdout,
            "stderr" => StreamType::Stderr,
            "resize" => StreamType::Resize,
            _ => return None,
        })
    }
}

/// The streams a session asked for ([`StreamSet::new`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Wanted {
    pub stdin: bool,
    pub stdout: bool,
    pub stderr: bool,
    pub tty: bool,
}

/// What to answer a client's SYN_STREAM.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Offer {
    /// SYN_REPLY; the stream plays `Some(role)` or none (an unknown or
    /// unasked-for type: replied, never counted, its data dropped, as
    /// upstream only logs it).
    Accept(Option<StreamType>),
    /// RST_STREAM with this status: a second stream of a role, a stream
    /// past [`MAX_STREAMS`], or one after the set was complete.
    Refuse(u32),
}

/// The stream set of one session: which streams are expected (the error
/// stream always, then stdin/stdout/stderr as asked, resize for a tty from
/// v3 on), which came, and the creation deadline.
#[derive(Debug, Clone)]
pub struct StreamSet {
    version: Version,
    wanted: Wanted,
    deadline: Instant,
    streams: usize,
    /// The stream id of each role, once opened.
    pub error: Option<u32>,
    pub stdin: Option<u32>,
    pub stdout: Option<u32>,
    pub stderr: Option<u32>,
    pub resize: Option<u32>,
}

impl StreamSet {
    /// A set waiting from `now` for [`STREAM_CREATION_TIMEOUT`].
    pub fn new(version: Version, wanted: Wanted, now: Instant) -> StreamSet {
        StreamSet {
            version,
            wanted: Wanted {
                // With a tty, stderr is merged into stdout.
                stderr: wanted.stderr && !wanted.tty,
                ..wanted
            },
            deadline: now + STREAM_CREATION_TIMEOUT,
            streams: 0,
            error: None,
            stdin: None,
            stdout: None,
            stderr: None,
            resize: None,
        }
    }

    /// How many streams complete the set.
    pub fn expected(&self) -> usize {
        let w = self.wanted;
        1 + usize::from(w.stdin)
            + usize::from(w.stdout)
            + usize::from(w.stderr)
            + usize::from(w.tty && self.version.resizes())
    }

    fn received(&self) -> usize {
        [
            self.error,
            self.stdin,
            self.stdout,
            self.stderr,
            self.resize,
        ]
        .iter()
        .filter(|s| s.is_some())
        .count()
    }

    /// Every expected stream is open.
    pub fn complete(&self) -> bool {
        self.received() == self.expected()
    }

    /// The deadline passed with the set incomplete.
    pub fn expired(&self, now: Instant) -> bool {
        !self.complete() && now >= self.deadline
    }

    /// When the set expires.
    pub fn deadline(&self) -> Instant {
        self.deadline
    }

    /// A client SYN_STREAM `id` with `headers`.
    pub fn offer(&mut self, id: u32, headers: &Headers) -> Offer {
        if self.complete() || self.streams >= MAX_STREAMS {
            return Offer::Refuse(RST_REFUSED_STREAM);
        }
        self.streams += 1;
        let w = self.wanted;
        let role = headers.get("streamtype").and_then(StreamType::parse);
        let slot = match role {
            Some(StreamType::Error) => &mut self.error,
            Some(StreamType::Stdin) if w.stdin => &mut self.stdin,
            Some(StreamType::Stdout) if w.stdout => &mut self.stdout,
            Some(StreamType::Stderr) if w.stderr => &mut self.stderr,
            Some(StreamType::Resize) if w.tty && self.version.resizes() => &mut self.resize,
            _ => return Offer::Accept(None),
        };
        if slot.is_some() {
            return Offer::Refuse(RST_REFUSED_STREAM);
        }
        *slot = Some(id);
        Offer::Accept(role)
    }

    /// The role of stream `id`, if it has one.
    pub fn role_of(&self, id: u32) -> Option<StreamType> {
        [
            (self.error, StreamType::Error),
            (self.stdin, StreamType::Stdin),
            (self.stdout, StreamType::Stdout),
            (self.stderr, StreamType::Stderr),
            (self.resize, StreamType::Resize),
        ]
        .into_iter()
        .find(|(s, _)| *s == Some(id))
        .map(|(_, r)| r)
    }
}

/// The bytes the error stream carries at the end, or `None`: v4 and v5
/// write `status_json` (a Status, Success included); v1 to v3 write a
/// failure's message only (`StatusError.Error()`), nothing on success.
pub fn final_words(version: Version, status_json: &[u8]) -> Option<Vec<u8>> {
    if version.json_status() {
        return Some(status_json.to_vec());
    }
    let v: serde_json::Value = serde_json::from_slice(status_json).ok()?;
    if v["status"] == "Success" {
        return None;
    }
    Some(v["message"].as_str().unwrap_or("").as_bytes().to_vec())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn h(t: &str) -> Headers {
        Headers::from_pairs(&[("streamtype", t)])
    }

    #[test]
    fn negotiates_in_the_clients_order() {
        let offer = "v5.channel.k8s.io, v4.channel.k8s.io,v3.channel.k8s.io";
        assert_eq!(negotiate([offer]), Ok(Version::V5));
        assert_eq!(
            negotiate(["v4.channel.k8s.io", "v5.channel.k8s.io"]),
            Ok(Version::V4)
        );
        assert_eq!(negotiate(["x", "channel.k8s.io"]), Ok(Version::V1));
        assert_eq!(negotiate([" , "]), Err(Refusal::Missing));
        assert_eq!(negotiate(std::iter::empty()), Err(Refusal::Missing));
        let r = negotiate(["a,b"]).unwrap_err();
        assert_eq!(r.status(), 403);
        assert!(r.body().starts_with(
            "unable to upgrade: unable to negotiate protocol: client supports [a b], server accepts [v5.channel.k8s.io v4.channel.k8s.io"
        ));
    }

    #[test]
    fn waits_for_exactly_the_asked_streams() {
        let now = Instant::now();
        let w = Wanted {
            stdin: true,
            stdout: true,
            stderr: true,
            tty: true,
        };
        let mut s = StreamSet::new(Version::V4, w, now);
        // tty: stderr merged, resize expected.
        assert_eq!(s.expected(), 4);
        assert_eq!(
            s.offer(1, &h("error")),
            Offer::Accept(Some(StreamType::Error))
        );
        assert_eq!(s.offer(3, &h("stderr")), Offer::Accept(None));
        assert_eq!(s.offer(5, &h("bogus")), Offer::Accept(None));
        assert_eq!(s.offer(7, &h("error")), Offer::Refuse(RST_REFUSED_STREAM));
        assert_eq!(
            s.offer(9, &h("stdin")),
            Offer::Accept(Some(StreamType::Stdin))
        );
        assert_eq!(
            s.offer(11, &h("stdout")),
            Offer::Accept(Some(StreamType::Stdout))
        );
        assert!(!s.complete());
        assert!(!s.expired(now + STREAM_CREATION_TIMEOUT / 2));
        assert!(s.expired(now + STREAM_CREATION_TIMEOUT));
        assert_eq!(
            s.offer(13, &h("resize")),
            Offer::Accept(Some(StreamType::Resize))
        );
        assert!(s.complete());
        assert!(!s.expired(now + STREAM_CREATION_TIMEOUT * 2));
        assert_eq!(s.role_of(13), Some(StreamType::Resize));
        assert_eq!(s.role_of(3), None);
        // Nothing more once complete.
        assert_eq!(s.offer(15, &h("stdout")), Offer::Refuse(RST_REFUSED_STREAM));
    }

    #[test]
    fn v2_has_no_resize_and_streams_are_bounded() {
        let w = Wanted {
            stdout: true,
            tty: true,
            ..Wanted::default()
        };
        let mut s = StreamSet::new(Version::V2, w, Instant::now());
        assert_eq!(s.expected(), 2);
        for i in 0..MAX_STREAMS as u32 {
            assert_eq!(s.offer(2 * i + 1, &h("resize")), Offer::Accept(None));
        }
        assert_eq!(s.offer(99, &h("error")), Offer::Refuse(RST_REFUSED_STREAM));
    }

    #[test]
    fn final_words_per_version() {
        let ok = br#"{"metadata":{},"status":"Success"}"#;
        let bad =
            br#"{"metadata":{},"status":"Failure","message":"boom","reason":"NonZeroExitCode"}"#;
        assert_eq!(final_words(Version::V5, ok).as_deref(), Some(&ok[..]));
        assert_eq!(final_words(Version::V4, bad).as_deref(), Some(&bad[..]));
        assert_eq!(final_words(Version::V3, ok), None);
        assert_eq!(final_words(Version::V1, bad).as_deref(), Some(&b"boom"[..]));
    }
}
