//! Watch events on the wire: `{"type":"ADDED","object":{…}}\n`, one after
//! another in a chunked 200 response.
//!
//! It owns the event encoding the simulated server writes (with a fast path
//! that wraps an object serialised once for thousands of watchers), the
//! BOOKMARK and ERROR events, and a sans-IO decoder for the client that turns
//! bytes, however they were chunked, into events. It never does I/O, never
//! tracks resourceVersions or decides to relist (the client's watch loop does),
//! and never interprets objects beyond `metadata.resourceVersion` and the
//! Status of ERROR events: objects stay `serde_json::Value` because a
//! BOOKMARK's zero-valued object (`"spec":{"containers":null}`) must not fail
//! a typed decode.

use crate::kube::jsonstream::{JsonSplitter, SplitError};
use crate::kube::status::Status;
use serde::{Deserialize, Serialize};
use serde_json::Value;
use std::fmt;

/// Largest single event the decoder buffers. etcd objects are at most about
/// 1.5 MiB and requests 3 MiB; 16 MiB leaves room without letting a broken
/// stream exhaust memory.
pub const DEFAULT_MAX_EVENT_SIZE: usize = 16 * 1024 * 1024;

/// The `type` of a watch event.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "SCREAMING_SNAKE_CASE")]
pub enum EventType {
    Added,
    Modified,
    Deleted,
    Bookmark,
    Error,
}

impl EventType {
    /// The wire string (`ADDED`, …).
    pub fn as_str(self) -> &'static str {
        match self {
            EventType::Added => "ADDED",
            EventType::Modified => "MODIFIED",
            EventType::Deleted => "DELETED",
            EventType::Bookmark => "BOOKMARK",
            EventType::Error => "ERROR",
        }
    }

    /// Parses a wire string; `None` for anything else.
    pub fn parse(s: &str) -> Option<EventType> {
        match s {
            "ADDED" => Some(EventType::Added),
            "MODIFIED" => Some(EventType::Modified),
            "DELETED" => Some(EventType::Deleted),
            "BOOKMARK" => Some(EventType::Bookmark),
            "ERROR" => Some(EventType::Error),
            _ => None,
        }
    }
}

impl fmt::Display for EventType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Encodes one event line from an object already serialised as JSON: the
/// fast path for fan-out, where one object goes to many watchers. Trailing
/// whitespace in `object_json` is dropped so the line stays one line; the
/// bytes are otherwise trusted to be one JSON object.
pub fn encode_event_raw(ty: EventType, object_json: &[u8]) -> Vec<u8> {
    let mut end = object_json.len();
    while end > 0 && matches!(object_json[end - 1], b' ' | b'\n' | b'\r' | b'\t') {
        end -= 1;
    }
    let obj = &object_json[..end];
    let mut out = Vec::with_capacity(obj.len() + 32);
    out.extend_from_slice(b"{\"type\":\"");
    out.extend_from_slice(ty.as_str().as_bytes());
    out.extend_from_slice(b"\",\"object\":");
    out.extend_from_slice(obj);
    out.extend_from_slice(b"}\n");
    out
}

/// Encodes one event line from a value.
pub fn encode_event(ty: EventType, object: &Value) -> Vec<u8> {
    // Serialising a Value cannot fail (its map keys are strings).
    let bytes = serde_json::to_vec(object).unwrap_or_else(|_| b"{}".to_vec());
    encode_event_raw(ty, &bytes)
}

/// Go's zero value of a kind's spec/status, in Go field order, as a real
/// server serialises it inside a BOOKMARK.
fn zero_body(kind: &str) -> &'static str {
    match kind {
        "Pod" => r#","spec":{"containers":null},"status":{}"#,
        "Deployment" => {
            r#","spec":{"selector":null,"template":{"metadata":{"creationTimestamp":null},"spec":{"containers":null}},"strategy":{}},"status":{}"#
        }
        "ReplicaSet" => {
            r#","spec":{"selector":null,"template":{"metadata":{"creationTimestamp":null},"spec":{"containers":null}}},"status":{"replicas":0}"#
        }
        "Service" | "Ingress" => r#","spec":{},"status":{"loadBalancer":{}}"#,
        _ => "",
    }
}

fn json_str(s: &str) -> String {
    // Serialising a &str cannot fail.
    serde_json::to_string(s).unwrap_or_else(|_| "\"\"".into())
}

/// The bytes of the zero-valued object a real server puts in a BOOKMARK,
/// in Go field order: only `kind`, `apiVersion` and
/// `metadata.resourceVersion` mean anything; the rest is the Go zero value
/// of the kind (`"creationTimestamp":null`, a Pod's
/// `"spec":{"containers":null}`), which clients must tolerate.
pub fn bookmark_object_json(api_version: &str, kind: &str, rv: &str) -> Vec<u8> {
    format!(
        r#"{{"kind":{},"apiVersion":{},"metadata":{{"resourceVersion":{},"creationTimestamp":null}}{}}}"#,
        json_str(kind),
        json_str(api_version),
        json_str(rv),
        zero_body(kind)
    )
    .into_bytes()
}

/// [`bookmark_object_json`] as a value.
pub fn bookmark_object(api_version: &str, kind: &str, rv: &str) -> Value {
    serde_json::from_slice(&bookmark_object_json(api_version, kind, rv)).unwrap_or(Value::Null)
}

/// A BOOKMARK event line carrying `rv`.
pub fn bookmark_event(api_version: &str, kind: &str, rv: &str) -> Vec<u8> {
    encode_event_raw(
        EventType::Bookmark,
        &bookmark_object_json(api_version, kind, rv),
    )
}

/// An ERROR event line carrying a Status (e.g. 410 Expired for a too-old RV).
pub fn error_event(status: &Status) -> Vec<u8> {
    encode_event_raw(EventType::Error, &status.to_json())
}

/// One decoded event. The object is untyped on purpose (see the module doc).
#[derive(Debug, Clone, PartialEq)]
pub struct RawEvent {
    pub ty: EventType,
    pub object: Value,
}

impl RawEvent {
    /// `object.metadata.resourceVersion`, for any event type (a BOOKMARK's is
    /// the whole point of it).
    pub fn resource_version(&self) -> Option<&str> {
        self.object
            .get("metadata")?
            .get("resourceVersion")?
            .as_str()
    }

    /// The Status of an ERROR event; `None` for other types or when the
    /// object is not a Status.
    pub fn as_status(&self) -> Option<Status> {
        if self.ty != EventType::Error {
            return None;
        }
        serde_json::from_value(self.object.clone()).ok()
    }

    /// True for an ERROR event with a 410 Expired/Gone Status: relist, then
    /// watch from the list's resourceVersion.
    pub fn is_expired(&self) -> bool {
        self.as_status().is_some_and(|s| s.is_expired())
    }
}

/// Why the decoder could not produce an event.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum WatchDecodeError {
    /// The byte stream is not a sequence of JSON objects, or one is larger
    /// than the limit. Fatal: every later call returns it again.
    Framing(SplitError),
    /// A complete value that is not valid JSON or not a watch event. The
    /// decoder continues with the next value.
    Malformed(String),
    /// A well-formed event with a `type` this decoder does not know. The
    /// decoder continues.
    UnknownType(String),
    /// The stream ended in the middle of an event.
    Truncated { buffered: usize },
}

impl WatchDecodeError {
    /// True when the stream cannot be read further.
    pub fn is_fatal(&self) -> bool {
        matches!(
            self,
            WatchDecodeError::Framing(_) | WatchDecodeError::Truncated { .. }
        )
    }
}

impl fmt::Display for WatchDecodeError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            WatchDecodeError::Framing(e) => write!(f, "watch stream: {e}"),
            WatchDecodeError::Malformed(m) => write!(f, "watch stream: malformed event: {m}"),
            WatchDecodeError::UnknownType(t) => {
                write!(f, "watch stream: got invalid watch event type: {t}")
            }
            WatchDecodeError::Truncated { buffered } => write!(
                f,
                "watch stream ended inside an event ({buffered} bytes buffered)"
            ),
        }
    }
}

impl std::error::Error for WatchDecodeError {}

#[derive(Deserialize)]
struct WireEvent {
    #[serde(rename = "type")]
    ty: String,
    #[serde(default)]
    object: Option<Value>,
}

/// Sans-IO watch decoder: `push` bytes as they arrive, then drain
/// `next_event` until it returns `None`. Events split across pushes, several
/// in one push, with or without newlines between them, all decode the same.
#[derive(Debug)]
pub struct WatchDecoder {
    splitter: JsonSplitter,
    /// A framing error was reported: the stream is unusable, and every
    /// later call returns None, so `for ev in decoder` always ends.
    failed: bool,
}

impl Default for WatchDecoder {
    fn default() -> Self {
        WatchDecoder::new()
    }
}

impl WatchDecoder {
    /// A decoder with [`DEFAULT_MAX_EVENT_SIZE`].
    pub fn new() -> WatchDecoder {
        WatchDecoder::with_max_event_size(DEFAULT_MAX_EVENT_SIZE)
    }

    /// A decoder refusing events larger than `max` bytes.
    pub fn with_max_event_size(max: usize) -> WatchDecoder {
        WatchDecoder {
            splitter: JsonSplitter::new(max),
            failed: false,
        }
    }

    /// Appends received bytes.
    pub fn push(&mut self, bytes: &[u8]) {
        self.splitter.push(bytes);
    }

    /// The next event, `None` when more bytes are needed — or forever after
    /// a framing error, which is reported once (the stream cannot be
    /// resynchronised: reconnect).
    pub fn next_event(&mut self) -> Option<Result<RawEvent, WatchDecodeError>> {
        if self.failed {
            return None;
        }
        let raw = match self.splitter.next_value()? {
            Ok(raw) => raw,
            Err(e) => {
                self.failed = true;
                return Some(Err(WatchDecodeError::Framing(e)));
            }
        };
        Some(decode_one(raw))
    }

    /// Call at end of stream: an error if a partial event is buffered.
    pub fn finish(&self) -> Result<(), WatchDecodeError> {
        if self.splitter.is_idle() {
            Ok(())
        } else {
            Err(WatchDecodeError::Truncated {
                buffered: self.splitter.buffered(),
            })
        }
    }
}

impl Iterator for WatchDecoder {
    type Item = Result<RawEvent, WatchDecodeError>;

    fn next(&mut self) -> Option<Self::Item> {
        self.next_event()
    }
}

fn decode_one(raw: &[u8]) -> Result<RawEvent, WatchDecodeError> {
    let wire: WireEvent =
        serde_json::from_slice(raw).map_err(|e| WatchDecodeError::Malformed(e.to_string()))?;
    let ty = EventType::parse(&wire.ty).ok_or(WatchDecodeError::UnknownType(wire.ty))?;
    let object = match wire.object {
        Some(Value::Object(m)) => Value::Object(m),
        Some(other) => {
            return Err(WatchDecodeError::Malformed(format!(
                "{ty} event object is not a JSON object: {other}"
            )))
        }
        None => {
            return Err(WatchDecodeError::Malformed(format!(
                "{ty} event without an object"
            )))
        }
    };
    Ok(RawEvent { ty, object })
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn decode_all(d: &mut WatchDecoder) -> Vec<Result<RawEvent, WatchDecodeError>> {
        let mut v = Vec::new();
        while let Some(e) = d.next_event() {
            let fatal = e.as_ref().is_err_and(|e| e.is_fatal());
            v.push(e);
            if fatal {
                break;
            }
        }
        v
    }

    #[test]
    fn encode_shapes() {
        let obj = json!({"kind":"Pod","metadata":{"name":"a","resourceVersion":"5"}});
        // Value encoding sorts keys (serde_json without preserve_order).
        let line = encode_event(EventType::Added, &obj);
        assert_eq!(
            line,
            br#"{"type":"ADDED","object":{"kind":"Pod","metadata":{"name":"a","resourceVersion":"5"}}}
"#
        );
        assert_eq!(
            encode_event_raw(EventType::Deleted, b"{\"a\":1}\n"),
            b"{\"type\":\"DELETED\",\"object\":{\"a\":1}}\n"
        );
        assert_eq!(
            bookmark_event("v1", "Pod", "3845"),
            b"{\"type\":\"BOOKMARK\",\"object\":{\"kind\":\"Pod\",\"apiVersion\":\"v1\",\"metadata\":{\"resourceVersion\":\"3845\",\"creationTimestamp\":null},\"spec\":{\"containers\":null},\"status\":{}}}\n"
        );
        // Byte-identical to the real 2020 bookmark in the fixtures.
        let fixture = std::fs::read_to_string(concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/tests/fixtures/kube/watch/bookmark-and-error-events.ndjson"
        ))
        .unwrap();
        let mut lines = fixture.lines();
        assert_eq!(
            String::from_utf8(bookmark_event("v1", "Pod", "3845")).unwrap(),
            format!("{}\n", lines.next().unwrap())
        );
        lines.next();
        assert_eq!(
            String::from_utf8(error_event(&Status::expired(
                "too old resource version: 657887 (680402)"
            )))
            .unwrap(),
            format!("{}\n", lines.next().unwrap())
        );
        let e = error_event(&Status::expired(
            "too old resource version: 657887 (680402)",
        ));
        assert_eq!(
            e,
            b"{\"type\":\"ERROR\",\"object\":{\"kind\":\"Status\",\"apiVersion\":\"v1\",\"metadata\":{},\"status\":\"Failure\",\"message\":\"too old resource version: 657887 (680402)\",\"reason\":\"Expired\",\"code\":410}}\n"
        );
    }

    #[test]
    fn bookmark_objects_for_each_kind_carry_the_rv() {
        for (av, kind) in [
            ("v1", "Pod"),
            ("v1", "Service"),
            ("v1", "ConfigMap"),
            ("apps/v1", "Deployment"),
            ("apps/v1", "ReplicaSet"),
            ("networking.k8s.io/v1", "Ingress"),
        ] {
            let mut d = WatchDecoder::new();
            d.push(&bookmark_event(av, kind, "42"));
            let ev = d.next_event().unwrap().unwrap();
            assert_eq!(ev.ty, EventType::Bookmark);
            assert_eq!(ev.resource_version(), Some("42"));
            assert_eq!(ev.object["kind"], kind);
            assert_eq!(ev.object["apiVersion"], av);
            assert!(ev.as_status().is_none());
        }
    }

    #[test]
    fn round_trip_and_status() {
        let mut d = WatchDecoder::new();
        d.push(&error_event(&Status::gone("old")));
        d.push(&encode_event(
            EventType::Modified,
            &json!({"metadata":{"resourceVersion":"9"}}),
        ));
        let ev = d.next_event().unwrap().unwrap();
        assert!(ev.is_expired());
        assert_eq!(ev.as_status().unwrap().message, "old");
        let ev = d.next_event().unwrap().unwrap();
        assert_eq!(
            (ev.ty, ev.resource_version()),
            (EventType::Modified, Some("9"))
        );
        assert!(!ev.is_expired());
        assert!(d.next_event().is_none());
        assert!(d.finish().is_ok());
    }

    #[test]
    fn non_fatal_errors_skip_one_value() {
        let mut d = WatchDecoder::new();
        d.push(br#"{"type":"WHAT","object":{}}{"type":"ADDED"}{"type":"ADDED","object":3}{"nope":1}{"type":"ADDED","object":{"a":[1,]}}"#);
        d.push(br#"{"type":"DELETED","object":{"metadata":{}}}"#);
        let got = decode_all(&mut d);
        assert_eq!(got.len(), 6);
        assert_eq!(got[0], Err(WatchDecodeError::UnknownType("WHAT".into())));
        assert!(matches!(got[1], Err(WatchDecodeError::Malformed(_))));
        assert!(matches!(got[2], Err(WatchDecodeError::Malformed(_))));
        assert!(matches!(got[3], Err(WatchDecodeError::Malformed(_))));
        assert!(matches!(got[4], Err(WatchDecodeError::Malformed(_))));
        assert_eq!(got[5].as_ref().unwrap().ty, EventType::Deleted);
        assert!(!got[0].as_ref().unwrap_err().is_fatal());
    }

    #[test]
    fn fatal_errors() {
        let mut d = WatchDecoder::with_max_event_size(64);
        d.push(b"{\"type\":\"ADDED\",\"object\":{\"data\":\"");
        d.push(&[b'x'; 100]);
        let e = d.next_event().unwrap().unwrap_err();
        assert!(e.is_fatal());
        assert_eq!(
            e,
            WatchDecodeError::Framing(SplitError::TooLarge { limit: 64 })
        );
        // Reported once; the stream is over after that.
        assert!(d.next_event().is_none());

        let mut d = WatchDecoder::new();
        d.push(b"Too many requests");
        assert!(d.next_event().unwrap().unwrap_err().is_fatal());

        let mut d = WatchDecoder::new();
        d.push(b"{\"type\":\"ADDED\",\"obj");
        assert!(d.next_event().is_none());
        assert_eq!(
            d.finish(),
            Err(WatchDecodeError::Truncated { buffered: 20 })
        );
    }

    #[test]
    fn iterator_works() {
        let mut d = WatchDecoder::new();
        d.push(&bookmark_event("v1", "Pod", "1"));
        d.push(&bookmark_event("v1", "Pod", "2"));
        let rvs: Vec<String> = d
            .by_ref()
            .map(|e| e.unwrap().resource_version().unwrap().to_string())
            .collect();
        assert_eq!(rvs, ["1", "2"]);
    }
}

#[cfg(test)]
mod poison_tests {
    use super::*;

    /// Found by the fuzzer: a framing error used to repeat forever, so
    /// `while let Some(ev) = decoder.next_event()` never ended.
    #[test]
    fn a_framing_error_is_reported_once_then_the_stream_ends() {
        let mut d = WatchDecoder::new();
        d.push(b"$\n");
        assert!(matches!(
            d.next_event(),
            Some(Err(WatchDecodeError::Framing(_)))
        ));
        assert!(d.next_event().is_none());
        d.push(b"{\"type\":\"ADDED\",\"object\":{}}\n");
        assert!(d.next_event().is_none());
        assert_eq!(d.count(), 0);
    }
}
