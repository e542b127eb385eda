//! The debug stream's fan-out and its HTTP route (`GET /events` on
//! `http::Server`).
//!
//! - Publishing never waits: every subscriber has its own bounded queue
//!   (frames and bytes); a subscriber whose queue is full is dropped (its
//!   stream ends; the daemon's relay reconnects and gets the replay), so a
//!   slow reader never holds the program's output or the supervisor.
//! - Replay: a new subscriber first gets the last `Runner.RunStarted`, the
//!   last `Runner.RunEnded` and the last `Kernel.PortsResolved`, in the
//!   order they were published, each marked `metadata.replayed = true`,
//!   so a relay that reconnects learns the current state. Taken under the
//!   same lock as publishing: nothing is missed or sent twice between the
//!   replay and the live frames. Log lines are not replayed.
//! - Each subscriber's stream runs on its connection thread
//!   (`runner-conn`): it waits on its queue, writes what is there as one
//!   chunk, sends a heartbeat comment after `heartbeat` without frames,
//!   and ends when the client goes, the hub drops it, or the hub closes.

use super::frames;
use crate::http::{ChunkSink, Handler, Reply, Request, Response};
use crossbeam_channel::{bounded, Receiver, RecvTimeoutError, Sender, TrySendError};
use parking_lot::{Condvar, Mutex};
use serde_json::Value;
use std::io;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// The path of the debug stream.
pub const EVENTS_PATH: &str = "/events";

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct HubLimits {
    /// Frames queued per subscriber before it is dropped.
    pub queue_frames: usize,
    /// Bytes queued per subscriber before it is dropped.
    pub queue_bytes: usize,
    /// A comment after this long without frames.
    pub heartbeat: Duration,
}

impl Default for HubLimits {
    fn default() -> Self {
        HubLimits {
            queue_frames: 1024,
            queue_bytes: 4 << 20,
            heartbeat: Duration::from_secs(15),
        }
    }
}

/// What a frame is, for the replay.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    RunStarted,
    RunEnded,
    Ports,
    /// Not replayed (log lines).
    Live,
}

type Bytes = Arc<[u8]>;

struct Sub {
    tx: Sender<Bytes>,
    queued: Arc<AtomicUsize>,
}

#[derive(Default)]
struct Inner {
    subs: Vec<Sub>,
    /// (publication number, frame) of the last frame of each replayed kind.
    started: Option<(u64, Value)>,
    ended: Option<(u64, Value)>,
    ports: Option<(u64, Value)>,
    published: u64,
    dropped: u64,
    closed: bool,
}

/// The fan-out (see the module documentation).
pub struct Hub {
    limits: HubLimits,
    inner: Mutex<Inner>,
    /// Streams being served, for [`Hub::close_and_wait`].
    active: Mutex<usize>,
    idle: Condvar,
}

/// One subscriber's end.
pub struct Subscription {
    rx: Receiver<Bytes>,
    queued: Arc<AtomicUsize>,
}

impl Hub {
    pub fn new(limits: HubLimits) -> Arc<Hub> {
        Arc::new(Hub {
            limits,
            inner: Mutex::new(Inner::default()),
            active: Mutex::new(0),
            idle: Condvar::new(),
        })
    }

    pub fn limits(&self) -> HubLimits {
        self.limits
    }

    /// Sends a frame to every subscriber (never waits); keeps it for the
    /// replay when its kind is replayed.
    pub fn publish(&self, kind: Kind, frame: Value) {
        let bytes: Bytes = frames::encode(&frame).into();
        let mut g = self.inner.lock();
        if g.closed {
            return;
        }
        g.published += 1;
        let n = g.published;
        match kind {
            Kind::RunStarted => g.started = Some((n, frame)),
            Kind::RunEnded => g.ended = Some((n, frame)),
            Kind::Ports => g.ports = Some((n, frame)),
            Kind::Live => {}
        }
        let limits = self.limits;
        let before = g.subs.len();
        g.subs.retain(|s| offer(s, &bytes, limits));
        let dropped = before - g.subs.len();
        if dropped > 0 {
            g.dropped += dropped as u64;
            log::warn!("debug stream: dropped {dropped} slow subscriber(s)");
        }
    }

    /// A new subscriber, its queue already holding the replay; None once
    /// the hub is closed.
    pub fn subscribe(&self) -> Option<Subscription> {
        let mut g = self.inner.lock();
        if g.closed {
            return None;
        }
        let (tx, rx) = bounded(self.limits.queue_frames.max(4));
        let queued = Arc::new(AtomicUsize::new(0));
        let sub = Sub {
            tx,
            queued: queued.clone(),
        };
        let mut replay: Vec<&(u64, Value)> = [&g.started, &g.ended, &g.ports]
            .into_iter()
            .flatten()
            .collect();
        replay.sort_by_key(|(n, _)| *n);
        // The queue holds at least 4 frames and no byte bound applies to
        // the replay: it always fits.
        let unbounded_bytes = HubLimits {
            queue_bytes: usize::MAX,
            ..self.limits
        };
        for (_, f) in replay {
            let bytes: Bytes = frames::encode(&frames::replayed(f)).into();
            offer(&sub, &bytes, unbounded_bytes);
        }
        g.subs.push(sub);
        Some(Subscription { rx, queued })
    }

    /// Subscribers now.
    pub fn subscribers(&self) -> usize {
        self.inner.lock().subs.len()
    }

    /// Subscribers dropped for being slow, so far.
    pub fn dropped(&self) -> u64 {
        self.inner.lock().dropped
    }

    /// No more frames or subscribers; every stream ends once it has sent
    /// what it has queued. Waits up to `within` for the streams to finish;
    /// true when they all did.
    pub fn close_and_wait(&self, within: Duration) -> bool {
        {
            let mut g = self.inner.lock();
            g.closed = true;
            g.subs.clear();
        }
        let deadline = Instant::now() + within;
        let mut n = self.active.lock();
        while *n > 0 {
            if self.idle.wait_until(&mut n, deadline).timed_out() {
                return *n == 0;
            }
        }
        true
    }

    fn enter(self: &Arc<Hub>) -> Active {
        *self.active.lock() += 1;
        Active(self.clone())
    }
}

/// Counts a stream being served.
struct Active(Arc<Hub>);

impl Drop for Active {
    fn drop(&mut self) {
        let mut n = self.0.active.lock();
        *n = n.saturating_sub(1);
        self.0.idle.notify_all();
    }
}

/// Queues a frame for one subscriber: false when it must be dropped (its
/// queue is full, by frames or bytes, or its stream is gone).
fn offer(s: &Sub, bytes: &Bytes, limits: HubLimits) -> bool {
    let q = s.queued.load(Ordering::Acquire);
    if q.saturating_add(bytes.len()) > limits.queue_bytes {
        return false;
    }
    s.queued.fetch_add(bytes.len(), Ordering::AcqRel);
    match s.tx.try_send(bytes.clone()) {
        Ok(()) => true,
        Err(TrySendError::Full(_)) | Err(TrySendError::Disconnected(_)) => false,
    }
}

/// Most bytes written as one chunk.
const MAX_CHUNK: usize = 64 * 1024;
/// How often an idle stream checks that its client is still there.
const PEER_CHECK: Duration = Duration::from_secs(1);

/// Serves one subscription to `sink` until the client goes or the hub
/// drops or closes it.
pub fn serve_stream(
    sub: Subscription,
    sink: &mut dyn ChunkSink,
    heartbeat: Duration,
) -> io::Result<()> {
    let mut last_write = Instant::now();
    let mut chunk = Vec::new();
    loop {
        let heartbeat_at = last_write + heartbeat;
        let wait = heartbeat_at
            .saturating_duration_since(Instant::now())
            .min(PEER_CHECK);
        match sub.rx.recv_timeout(wait) {
            Ok(first) => {
                chunk.clear();
                chunk.extend_from_slice(&first);
                let mut taken = first.len();
                while chunk.len() < MAX_CHUNK {
                    match sub.rx.try_recv() {
                        Ok(more) => {
                            chunk.extend_from_slice(&more);
                            taken += more.len();
                        }
                        Err(_) => break,
                    }
                }
                sub.queued.fetch_sub(taken, Ordering::AcqRel);
                sink.send(&chunk)?;
                last_write = Instant::now();
            }
            Err(RecvTimeoutError::Timeout) => {
                if sink.peer_closed() {
                    return Ok(());
                }
                if Instant::now() >= heartbeat_at {
                    sink.send(frames::HEARTBEAT)?;
                    last_write = Instant::now();
                }
            }
            Err(RecvTimeoutError::Disconnected) => return Ok(()),
        }
    }
}

/// The inspect server's handler: `GET /events`, nothing else.
pub struct Inspect {
    pub hub: Arc<Hub>,
}

impl Handler for Inspect {
    fn handle(&self, req: Request) -> Reply {
        if req.path != EVENTS_PATH {
            return Response::text(404, "not found: the debug stream is GET /events\n").into();
        }
        if req.method != "GET" {
            return Response::text(405, "method not allowed\n")
                .with_header("Allow", "GET")
                .into();
        }
        let Some(sub) = self.hub.subscribe() else {
            return Response::text(503, "the runner is stopping\n").into();
        };
        let active = self.hub.enter();
        let heartbeat = self.hub.limits.heartbeat;
        Response::stream(
            200,
            "text/event-stream",
            Box::new(move |sink| {
                let _active = active;
                serve_stream(sub, sink, heartbeat)
            }),
        )
        .with_header("Cache-Control", "no-cache")
        .into()
    }

    fn admit(&self, _head: &Request) -> crate::http::Admission {
        crate::http::Admission::Admit(crate::http::Admit::with_limit(0))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::session::frame::parse_frame;
    use crate::session::sse::SseParser;
    use serde_json::json;

    fn drain(sub: &Subscription) -> Vec<Value> {
        let mut p = SseParser::default();
        while let Ok(b) = sub.rx.try_recv() {
            sub.queued.fetch_sub(b.len(), Ordering::AcqRel);
            p.push(&b);
        }
        std::iter::from_fn(|| p.next_event())
            .map(|e| parse_frame(&e.expect("event").data).expect("frame"))
            .collect()
    }

    fn ev(name: &str, n: u64) -> Value {
        json!({"kind": "event", "timestamp": "t", "event": name, "payload": {"n": n}})
    }

    fn log(line: &str) -> Value {
        json!({"kind": "log", "timestamp": "t", "stream": "stdout", "line": line})
    }

    #[test]
    fn a_new_subscriber_gets_the_state_first_in_order_then_live_frames() {
        let hub = Hub::new(HubLimits::default());
        let early = hub.subscribe().expect("open");
        hub.publish(Kind::Ports, ev("Kernel.PortsResolved", 1));
        hub.publish(Kind::RunStarted, ev("Runner.RunStarted", 1));
        hub.publish(Kind::Live, log("one"));
        hub.publish(Kind::RunEnded, ev("Runner.RunEnded", 1));
        hub.publish(Kind::RunStarted, ev("Runner.RunStarted", 2));
        hub.publish(Kind::Live, log("two"));
        // The early subscriber saw everything as it came, unmarked.
        let got = drain(&early);
        assert_eq!(got.len(), 6);
        assert!(got.iter().all(|f| f.get("metadata").is_none()));

        let late = hub.subscribe().expect("open");
        hub.publish(Kind::Live, log("three"));
        let got = drain(&late);
        let names: Vec<String> = got
            .iter()
            .map(|f| {
                f.get("event")
                    .and_then(Value::as_str)
                    .map(|e| format!("{e} {}", f["payload"]["n"]))
                    .unwrap_or_else(|| f["line"].as_str().unwrap_or("?").to_string())
            })
            .collect();
        assert_eq!(
            names,
            vec![
                "Kernel.PortsResolved 1",
                "Runner.RunEnded 1",
                "Runner.RunStarted 2",
                "three"
            ]
        );
        assert!(got[..3]
            .iter()
            .all(|f| f["metadata"] == json!({"replayed": true})));
        assert!(got[3].get("metadata").is_none());
    }

    #[test]
    fn a_slow_subscriber_is_dropped_not_waited_on() {
        let hub = Hub::new(HubLimits {
            queue_frames: 4,
            ..HubLimits::default()
        });
        let slow = hub.subscribe().expect("open");
        let fast = hub.subscribe().expect("open");
        let mut seen = 0;
        for i in 0..10 {
            hub.publish(Kind::Live, log(&format!("{i}")));
            seen += drain(&fast).len();
        }
        assert_eq!(seen, 10, "the fast one got every frame");
        assert_eq!(hub.subscribers(), 1);
        assert_eq!(hub.dropped(), 1);
        // The slow one keeps what was queued, then its stream ends.
        assert_eq!(drain(&slow).len(), 4);
        assert!(matches!(
            slow.rx.recv_timeout(Duration::from_secs(1)),
            Err(RecvTimeoutError::Disconnected)
        ));

        // The byte bound counts too.
        let hub = Hub::new(HubLimits {
            queue_bytes: 300,
            ..HubLimits::default()
        });
        let _slow = hub.subscribe().expect("open");
        hub.publish(Kind::Live, log(&"x".repeat(100)));
        assert_eq!(hub.subscribers(), 1);
        hub.publish(Kind::Live, log(&"x".repeat(200)));
        assert_eq!(hub.subscribers(), 0);
    }

    struct FakeSink {
        out: Vec<u8>,
        closed: Arc<std::sync::atomic::AtomicBool>,
    }

    impl ChunkSink for FakeSink {
        fn send(&mut self, data: &[u8]) -> io::Result<()> {
            self.out.extend_from_slice(data);
            Ok(())
        }
        fn peer_closed(&self) -> bool {
            self.closed.load(Ordering::SeqCst)
        }
    }

    #[test]
    fn the_stream_sends_what_is_queued_and_ends_when_the_hub_closes() {
        let hub = Hub::new(HubLimits {
            heartbeat: Duration::from_millis(30),
            ..HubLimits::default()
        });
        hub.publish(Kind::RunStarted, ev("Runner.RunStarted", 1));
        let sub = hub.subscribe().expect("open");
        let active = hub.enter();
        let h = hub.clone();
        let t = std::thread::spawn(move || {
            let _active = active;
            let mut sink = FakeSink {
                out: Vec::new(),
                closed: Arc::default(),
            };
            serve_stream(sub, &mut sink, h.limits().heartbeat).expect("served");
            sink.out
        });
        hub.publish(Kind::Live, log("hello"));
        // Closing waits (bounded) for the stream to send what it has and
        // end.
        assert!(
            hub.close_and_wait(Duration::from_secs(10)),
            "the stream ended when the hub closed"
        );
        let out = t.join().expect("thread");
        let mut p = SseParser::default();
        p.push(&out);
        let frames: Vec<Value> = std::iter::from_fn(|| p.next_event())
            .map(|e| parse_frame(&e.expect("event").data).expect("frame"))
            .collect();
        assert_eq!(frames.len(), 2);
        assert_eq!(frames[1]["line"], "hello");
        assert!(hub.subscribe().is_none(), "closed");
    }

    #[test]
    fn an_idle_stream_heartbeats_and_ends_when_its_client_goes() {
        let hub = Hub::new(HubLimits::default());
        let sub = hub.subscribe().expect("open");
        let closed: Arc<std::sync::atomic::AtomicBool> = Arc::default();
        let c = closed.clone();
        let (tx, rx) = bounded::<Vec<u8>>(1);
        let t = std::thread::spawn(move || {
            struct Sink {
                out: Vec<u8>,
                closed: Arc<std::sync::atomic::AtomicBool>,
                tx: Sender<Vec<u8>>,
            }
            impl ChunkSink for Sink {
                fn send(&mut self, data: &[u8]) -> io::Result<()> {
                    self.out.extend_from_slice(data);
                    let _ = self.tx.try_send(self.out.clone());
                    Ok(())
                }
                fn peer_closed(&self) -> bool {
                    self.closed.load(Ordering::SeqCst)
                }
            }
            let mut sink = Sink {
                out: Vec::new(),
                closed: c,
                tx,
            };
            serve_stream(sub, &mut sink, Duration::from_millis(20))
        });
        let first = rx
            .recv_timeout(Duration::from_secs(10))
            .expect("a heartbeat");
        assert_eq!(first, frames::HEARTBEAT);
        closed.store(true, Ordering::SeqCst);
        // It notices within its peer check (1 s).
        let deadline = Instant::now() + Duration::from_secs(10);
        while !t.is_finished() {
            assert!(Instant::now() < deadline, "the stream did not end");
            let _ = rx.recv_timeout(Duration::from_millis(50));
        }
        assert!(t.join().expect("thread").is_ok());
    }
}
