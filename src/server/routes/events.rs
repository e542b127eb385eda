//! `GET /v1/sessions/{id}/events`: a session's event log as Server-Sent
//! Events (docs/api.md), resumed after `Last-Event-ID`.

use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Duration, Instant};

use serde_json::json;

use crate::http::{Request, Response};
use crate::session::engine::Handle;

/// Heartbeat comment period on an idle event stream (docs/api.md#sessions).
const SSE_HEARTBEAT: Duration = Duration::from_secs(20);

/// `GET /v1/sessions/{id}/events`: Server-Sent Events from the session's
/// log, after `Last-Event-ID` when given (a `gap` event when the history no
/// longer holds what was asked), a heartbeat comment every 20 s, ending
/// after a terminal status.
pub(super) fn sse_stream(h: &Arc<Handle>, req: &Request) -> Response {
    let mut after: u64 = req
        .header("last-event-id")
        .and_then(|v| v.trim().parse().ok())
        .unwrap_or(0);
    let events = h.events.clone();
    let handle = h.clone();
    Response::stream(
        200,
        "text/event-stream",
        Box::new(move |sink| {
            // Counted as a subscriber while attached (the idle rule).
            struct Reader(Arc<Handle>);
            impl Drop for Reader {
                fn drop(&mut self) {
                    self.0.sse_readers.fetch_sub(1, Ordering::Relaxed);
                }
            }
            handle.sse_readers.fetch_add(1, Ordering::Relaxed);
            let _reader = Reader(handle);
            let mut last_beat = Instant::now();
            loop {
                let s = events.since(after, Duration::from_secs(1));
                let mut out = String::new();
                if let Some((from, to)) = s.gap {
                    out.push_str(&format!(
                        "event: gap\ndata: {}\n\n",
                        json!({"from": from, "to": to})
                    ));
                }
                for e in &s.events {
                    out.push_str(&format!(
                        "id: {}\nevent: {}\ndata: {}\n\n",
                        e.id, e.kind, e.data
                    ));
                    after = e.id;
                }
                if out.is_empty() && last_beat.elapsed() >= SSE_HEARTBEAT {
                    out.push_str(": heartbeat\n\n");
                }
                if !out.is_empty() {
                    sink.send(out.as_bytes())?;
                    last_beat = Instant::now();
                }
                if s.closed && after >= events.last_id() {
                    return Ok(());
                }
                if sink.peer_closed() {
                    return Ok(());
                }
            }
        }),
    )
    .with_header("Cache-Control", "no-cache")
}
