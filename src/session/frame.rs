//! The debug frame (docs/sessions.md#while-running): what an app's debug
//! stream carries in each server-sent event's data, checked without
//! I/O. The engine's relay offers every valid frame to its session; the
//! app runner and the CLI check theirs with the same rule.

use serde_json::Value;

/// A debug frame from an event's data, or `None` (skipped): a JSON object
/// that is either an event (`kind` absent or `"event"`, `event` a string;
/// `timestamp`, `payload`, `metadata` optional and passed as they are) or a
/// log line (`kind: "log"`, `stream` and `line` strings). Nothing is added
/// or removed: subscribers get the app's object.
pub fn parse_frame(data: &str) -> Option<Value> {
    let v: Value = serde_json::from_str(data).ok()?;
    let obj = v.as_object()?;
    let is_str = |k: &str| obj.get(k).is_some_and(Value::is_string);
    let ok = match obj.get("kind") {
        None => is_str("event"),
        Some(Value::String(k)) if k == "event" => is_str("event"),
        Some(Value::String(k)) if k == "log" => is_str("stream") && is_str("line"),
        Some(_) => false,
    };
    ok.then_some(v)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn frames_are_parsed_and_others_skipped() {
        let event =
            json!({"event": "Kernel.PortsResolved", "payload": {"ports": [{"port": 8080}]}});
        let typed = json!({"kind": "event", "timestamp": "2024-01-01T00:00:00Z", "event": "x", "metadata": {"a": 1}});
        let log = json!({"kind": "log", "timestamp": 1, "stream": "stdout", "line": "hi"});
        assert_eq!(parse_frame(&event.to_string()), Some(event.clone()));
        assert_eq!(parse_frame(&typed.to_string()), Some(typed));
        assert_eq!(parse_frame(&log.to_string()), Some(log));
        for bad in [
            "",
            "not json",
            "[1, 2]",
            "\"event\"",
            "{}",
            r#"{"event": 3}"#,
            r#"{"kind": "other", "event": "x"}"#,
            r#"{"kind": 1, "event": "x"}"#,
            r#"{"kind": "log", "stream": "stdout"}"#,
            r#"{"kind": "log", "stream": "stdout", "line": 3}"#,
            r#"{"kind": "event", "line": "x", "stream": "stdout"}"#,
        ] {
            assert_eq!(parse_frame(bad), None, "{bad}");
        }
    }
}
