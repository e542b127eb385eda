//! The interactive exec wire format (`kubegate.exec.v1`, docs/api.md#exec), both
//! directions, sans-IO: the daemon decodes client frames and encodes server
//! frames; `kubegate exec` does the opposite. Written once here.
//!
//! - Binary frames: one type byte, then data: 0 stdin (client), 1 stdout,
//!   2 stderr (server). Data travels as bytes, never re-encoded.
//! - Text frames (JSON): client `{"type":"stdin","eof":true}` (a `data`
//!   string is accepted too, UTF-8), `{"type":"resize","cols":C,"rows":R}`,
//!   `{"type":"close"}`; server `{"type":"target",…}` first, then last
//!   `{"type":"exit","exitCode":N,"reason"?,"message"?}` or
//!   `{"type":"error","code","message"}`.

use crate::api::{ApiError, Code};
use serde::{Deserialize, Serialize};
use serde_json::{json, Value};
use tungstenite::Message;

/// The resolved target, returned with every result (docs/exec.md#resolving-the-target).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Target {
    pub namespace: String,
    pub deployment: String,
    pub deployment_uid: String,
    pub pod: String,
    pub pod_uid: String,
    pub container: String,
}

/// The real subprotocol of interactive exec.
pub const SUBPROTOCOL: &str = "kubegate.exec.v1";
/// Prefix of the subprotocol entry that carries a bearer token (browsers
/// cannot set `Authorization` on a WebSocket); the rest is the token in
/// unpadded base64url.
pub const TOKEN_PROTOCOL_PREFIX: &str = "base64url.bearer.authorization.kubegate.dev.";

pub const TYPE_STDIN: u8 = 0;
pub const TYPE_STDOUT: u8 = 1;
pub const TYPE_STDERR: u8 = 2;

/// A frame from the client.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ClientFrame {
    /// Bytes for the process's stdin; `eof` closes stdin after them.
    Stdin {
        data: Vec<u8>,
        eof: bool,
    },
    Resize {
        cols: u16,
        rows: u16,
    },
    Close,
}

/// How the process ended (the `exit` frame).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Exit {
    pub exit_code: i32,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub message: Option<String>,
}

/// A frame from the server.
#[derive(Debug, Clone, PartialEq)]
pub enum ServerFrame {
    Target(Target),
    Stdout(Vec<u8>),
    Stderr(Vec<u8>),
    Exit(Exit),
    Error(ApiError),
}

/// A frame that breaks the protocol; the daemon answers it with an
/// `EXEC_INVALID` error frame.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FrameError(pub String);

impl std::fmt::Display for FrameError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

fn bad(m: impl Into<String>) -> FrameError {
    FrameError(m.into())
}

impl ClientFrame {
    /// Decodes one client message. `max_stdin` bounds the data of a stdin
    /// frame. Pings, pongs and closes are not frames (`Ok(None)`).
    pub fn decode(m: &Message, max_stdin: usize) -> Result<Option<ClientFrame>, FrameError> {
        match m {
            Message::Binary(b) => {
                let Some((&t, data)) = b.split_first() else {
                    return Err(bad("empty binary frame (expected a type byte)"));
                };
                if t != TYPE_STDIN {
                    return Err(bad(format!(
                        "binary frame type {t} is not stdin (0) from a client"
                    )));
                }
                check_stdin(data.len(), max_stdin)?;
                Ok(Some(ClientFrame::Stdin {
                    data: data.to_vec(),
                    eof: false,
                }))
            }
            Message::Text(t) => decode_text(t.as_str(), max_stdin).map(Some),
            _ => Ok(None),
        }
    }

    pub fn encode(&self) -> Message {
        match self {
            ClientFrame::Stdin { data, eof: false } => binary(TYPE_STDIN, data),
            ClientFrame::Stdin { data, eof: true } if data.is_empty() => {
                text(json!({"type": "stdin", "eof": true}))
            }
            ClientFrame::Stdin { data, eof: true } => match std::str::from_utf8(data) {
                Ok(s) => text(json!({"type": "stdin", "data": s, "eof": true})),
                // Not text: the bytes as a binary frame are the caller's
                // job (send Stdin{eof:false} then Stdin{eof:true}).
                Err(_) => text(json!({"type": "stdin", "eof": true})),
            },
            ClientFrame::Resize { cols, rows } => {
                text(json!({"type": "resize", "cols": cols, "rows": rows}))
            }
            ClientFrame::Close => text(json!({"type": "close"})),
        }
    }
}

fn check_stdin(len: usize, max: usize) -> Result<(), FrameError> {
    if len > max {
        return Err(bad(format!("stdin frame exceeds {max} bytes")));
    }
    Ok(())
}

fn decode_text(t: &str, max_stdin: usize) -> Result<ClientFrame, FrameError> {
    let v: Value =
        serde_json::from_str(t).map_err(|e| bad(format!("malformed JSON frame: {e}")))?;
    let Some(obj) = v.as_object() else {
        return Err(bad("a text frame must be a JSON object"));
    };
    match obj.get("type").and_then(Value::as_str) {
        Some("stdin") => {
            let data = match obj.get("data") {
                None | Some(Value::Null) => Vec::new(),
                Some(Value::String(s)) => s.as_bytes().to_vec(),
                Some(_) => return Err(bad("stdin data must be a string")),
            };
            check_stdin(data.len(), max_stdin)?;
            let eof = match obj.get("eof") {
                None | Some(Value::Null) => false,
                Some(Value::Bool(b)) => *b,
                Some(_) => return Err(bad("stdin eof must be a boolean")),
            };
            Ok(ClientFrame::Stdin { data, eof })
        }
        Some("resize") => {
            let dim = |k: &str| -> Result<u16, FrameError> {
                obj.get(k)
                    .and_then(Value::as_u64)
                    .filter(|n| (1..=65535).contains(n))
                    .and_then(|n| u16::try_from(n).ok())
                    .ok_or_else(|| bad("terminal dimensions must be integers between 1 and 65535"))
            };
            Ok(ClientFrame::Resize {
                cols: dim("cols")?,
                rows: dim("rows")?,
            })
        }
        Some("close") => Ok(ClientFrame::Close),
        Some(other) => Err(bad(format!("unknown frame type {other:?}"))),
        None => Err(bad("a text frame needs a string \"type\"")),
    }
}

fn binary(t: u8, data: &[u8]) -> Message {
    let mut b = Vec::with_capacity(data.len() + 1);
    b.push(t);
    b.extend_from_slice(data);
    Message::Binary(b.into())
}

fn text(v: Value) -> Message {
    Message::Text(v.to_string().into())
}

impl ServerFrame {
    pub fn encode(&self) -> Message {
        match self {
            ServerFrame::Target(t) => {
                let mut v = serde_json::to_value(t).unwrap_or_else(|_| json!({}));
                v["type"] = json!("target");
                text(v)
            }
            ServerFrame::Stdout(d) => binary(TYPE_STDOUT, d),
            ServerFrame::Stderr(d) => binary(TYPE_STDERR, d),
            ServerFrame::Exit(e) => {
                let mut v = serde_json::to_value(e).unwrap_or_else(|_| json!({}));
                v["type"] = json!("exit");
                text(v)
            }
            ServerFrame::Error(e) => text(json!({
                "type": "error",
                "code": e.code.as_str(),
                "message": e.message,
            })),
        }
    }

    /// Decodes one server message (the client's side). Pings, pongs and
    /// closes are not frames (`Ok(None)`).
    pub fn decode(m: &Message) -> Result<Option<ServerFrame>, FrameError> {
        match m {
            Message::Binary(b) => match b.split_first() {
                Some((&TYPE_STDOUT, d)) => Ok(Some(ServerFrame::Stdout(d.to_vec()))),
                Some((&TYPE_STDERR, d)) => Ok(Some(ServerFrame::Stderr(d.to_vec()))),
                Some((t, _)) => Err(bad(format!("unknown server binary frame type {t}"))),
                None => Err(bad("empty binary frame")),
            },
            Message::Text(t) => {
                let v: Value = serde_json::from_str(t.as_str())
                    .map_err(|e| bad(format!("malformed JSON frame: {e}")))?;
                match v.get("type").and_then(Value::as_str) {
                    Some("target") => serde_json::from_value(v)
                        .map(|t| Some(ServerFrame::Target(t)))
                        .map_err(|e| bad(format!("target frame: {e}"))),
                    Some("exit") => serde_json::from_value(v)
                        .map(|e| Some(ServerFrame::Exit(e)))
                        .map_err(|e| bad(format!("exit frame: {e}"))),
                    Some("error") => {
                        let code = v.get("code").and_then(Value::as_str).unwrap_or("");
                        let message = v
                            .get("message")
                            .and_then(Value::as_str)
                            .unwrap_or("")
                            .to_string();
                        let e = match Code::parse(code) {
                            Some(c) => ApiError::new(c, message),
                            None => ApiError::new(Code::Internal, format!("{code}: {message}")),
                        };
                        Ok(Some(ServerFrame::Error(e)))
                    }
                    other => Err(bad(format!("unknown server frame type {other:?}"))),
                }
            }
            _ => Ok(None),
        }
    }
}

/// The subprotocol entry carrying `token` (unpadded base64url).
pub fn token_protocol(token: &str) -> String {
    use base64::Engine;
    format!(
        "{TOKEN_PROTOCOL_PREFIX}{}",
        base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(token.as_bytes())
    )
}

/// The token inside an offered subprotocol entry, if it is one.
pub fn token_from_protocol(entry: &str) -> Option<String> {
    use base64::Engine;
    let b = entry.strip_prefix(TOKEN_PROTOCOL_PREFIX)?;
    let raw = base64::engine::general_purpose::URL_SAFE_NO_PAD
        .decode(b.trim_end_matches('='))
        .ok()?;
    String::from_utf8(raw).ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn target() -> Target {
        Target {
            namespace: "demo".into(),
            deployment: "hello".into(),
            deployment_uid: "d-1".into(),
            pod: "hello-abc".into(),
            pod_uid: "p-1".into(),
            container: "main".into(),
        }
    }

    #[test]
    fn client_frames_round_trip() {
        for f in [
            ClientFrame::Stdin {
                data: b"ls\n".to_vec(),
                eof: false,
            },
            ClientFrame::Stdin {
                data: vec![],
                eof: true,
            },
            ClientFrame::Stdin {
                data: b"tail".to_vec(),
                eof: true,
            },
            ClientFrame::Resize { cols: 80, rows: 24 },
            ClientFrame::Close,
        ] {
            assert_eq!(ClientFrame::decode(&f.encode(), 1024).unwrap(), Some(f));
        }
    }

    #[test]
    fn server_frames_round_trip() {
        for f in [
            ServerFrame::Target(target()),
            ServerFrame::Stdout(vec![0, 255, 10]),
            ServerFrame::Stderr(b"oops".to_vec()),
            ServerFrame::Exit(Exit {
                exit_code: 3,
                reason: None,
                message: None,
            }),
            ServerFrame::Exit(Exit {
                exit_code: 137,
                reason: Some("NonZeroExitCode".into()),
                message: Some("killed".into()),
            }),
            ServerFrame::Error(ApiError::new(Code::ExecTargetNotReady, "no pod")),
        ] {
            assert_eq!(ServerFrame::decode(&f.encode()).unwrap(), Some(f));
        }
    }

    #[test]
    fn wire_layout_is_the_contract() {
        assert_eq!(
            ServerFrame::Stdout(b"hi".to_vec()).encode(),
            Message::Binary(vec![1, b'h', b'i'].into())
        );
        let t: Value = match ServerFrame::Target(target()).encode() {
            Message::Text(t) => serde_json::from_str(t.as_str()).unwrap(),
            m => panic!("{m:?}"),
        };
        assert_eq!(
            t,
            json!({"type": "target", "namespace": "demo", "deployment": "hello",
                   "deploymentUid": "d-1", "pod": "hello-abc", "podUid": "p-1",
                   "container": "main"})
        );
        let e: Value = match ServerFrame::Exit(Exit {
            exit_code: 0,
            reason: None,
            message: None,
        })
        .encode()
        {
            Message::Text(t) => serde_json::from_str(t.as_str()).unwrap(),
            m => panic!("{m:?}"),
        };
        assert_eq!(e, json!({"type": "exit", "exitCode": 0}));
    }

    #[test]
    fn bad_client_frames_are_refused_with_a_reason() {
        let cases: Vec<(Message, &str)> = vec![
            (Message::Binary(vec![].into()), "empty"),
            (Message::Binary(vec![1, 2].into()), "not stdin"),
            (Message::Binary(vec![0; 12].into()), "exceeds 10"),
            (Message::Text("{".into()), "malformed JSON"),
            (Message::Text("[]".into()), "JSON object"),
            (
                Message::Text(r#"{"type":"dance"}"#.into()),
                "unknown frame type",
            ),
            (Message::Text(r#"{"cols":1}"#.into()), "\"type\""),
            (
                Message::Text(r#"{"type":"resize","cols":0,"rows":5}"#.into()),
                "between 1 and 65535",
            ),
            (
                Message::Text(r#"{"type":"resize","cols":70000,"rows":5}"#.into()),
                "between 1 and 65535",
            ),
            (
                Message::Text(r#"{"type":"resize","cols":1.5,"rows":5}"#.into()),
                "between 1 and 65535",
            ),
            (
                Message::Text(r#"{"type":"stdin","eof":"yes"}"#.into()),
                "boolean",
            ),
            (
                Message::Text(r#"{"type":"stdin","data":7}"#.into()),
                "string",
            ),
        ];
        for (m, want) in cases {
            let e = ClientFrame::decode(&m, 10).unwrap_err();
            assert!(e.0.contains(want), "{m:?}: {e}");
        }
        assert_eq!(
            ClientFrame::decode(&Message::Ping(vec![].into()), 10).unwrap(),
            None
        );
    }

    #[test]
    fn token_subprotocol_round_trips_unpadded() {
        let p = token_protocol("kubegate-demo-token");
        assert!(p.starts_with(TOKEN_PROTOCOL_PREFIX));
        assert!(!p.contains('='));
        assert_eq!(
            token_from_protocol(&p).as_deref(),
            Some("kubegate-demo-token")
        );
        assert_eq!(token_from_protocol(SUBPROTOCOL), None);
        assert_eq!(
            token_from_protocol(&format!("{TOKEN_PROTOCOL_PREFIX}!!")),
            None
        );
    }
}
