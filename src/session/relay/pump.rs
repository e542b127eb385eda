//! The one thread that reads every open debug stream of the process
//! (`session-relay-pump`): epoll on their sockets and an eventfd, so an
//! idle app's open stream costs its socket and a small entry, not a
//! thread and buffers of its own. Frames are offered to the relay's
//! `on_frame` without blocking; a refused one is kept (one per stream)
//! and that stream is not read until it is taken: its TCP window fills
//! and the app's writes wait, as they would with a reader thread blocked
//! on a full inbox. A stream ends at its end, on an error, after `idle`
//! without a byte, or when its relay stops; the relay's next attempt is
//! then scheduled as before.

use super::{finish, lock, what, Relay};
use crate::http::stream::Waker;
use crate::session::access::PollBody;
use crate::session::frame::parse_frame;
use crate::session::sse::SseError;
use rustix::buffer::spare_capacity;
use rustix::event::epoll;
use serde_json::Value;
use std::collections::HashMap;
use std::io::ErrorKind;
use std::os::fd::OwnedFd;
use std::sync::{Arc, OnceLock};
use std::time::{Duration, Instant};

/// One read's size, 16 KiB; the buffer is the thread's, not a stream's.
const READ_BUF: usize = 16 * 1024;
/// Reads of one stream per turn, so a busy stream cannot starve the
/// others (poll reports it readable again at once).
const READS_PER_TURN: usize = 16;
/// How soon a refused frame is offered again: 20 ms.
const RETRY_PENDING: Duration = Duration::from_millis(20);
/// Stops and idle deadlines are looked at this often (and on a wake):
/// once a second.
const SWEEP: Duration = Duration::from_secs(1);
/// The eventfd's key; streams get the keys after it.
const WAKER: u64 = 0;

struct Open {
    relay: Arc<Relay>,
    body: Box<dyn PollBody>,
    delivered: usize,
    last_data: Instant,
    pending: Option<Value>,
}

struct Pump {
    waker: Waker,
    incoming: parking_lot::Mutex<Vec<Open>>,
}

static PUMP: OnceLock<Option<Arc<Pump>>> = OnceLock::new();

fn get() -> Option<&'static Arc<Pump>> {
    PUMP.get_or_init(|| {
        let waker = match Waker::new() {
            Ok(w) => w,
            Err(e) => {
                log::error!("the debug relays' reader: eventfd: {e}");
                return None;
            }
        };
        let p = Arc::new(Pump {
            waker,
            incoming: parking_lot::Mutex::new(Vec::new()),
        });
        let q = p.clone();
        match std::thread::Builder::new()
            .name("session-relay-pump".into())
            .spawn(move || run(&q))
        {
            Ok(_) => Some(p),
            Err(e) => {
                log::error!("spawning the debug relays' reader thread: {e}");
                None
            }
        }
    })
    .as_ref()
}

/// Wakes the reader: a relay stopped (its stream is dropped on the
/// next turn).
pub(super) fn wake() {
    if let Some(p) = get() {
        p.waker.wake();
    }
}

/// Hands an opened stream to the reader thread.
pub(super) fn add(relay: Arc<Relay>, body: Box<dyn PollBody>) {
    let Some(p) = get() else {
        relay.stop.clear_current();
        let wait = relay.timings.max_retry;
        return finish(&relay, wait);
    };
    p.incoming.lock().push(Open {
        relay,
        body,
        delivered: 0,
        last_data: Instant::now(),
        pending: None,
    });
    p.waker.wake();
}

/// The reader's loop. epoll, one-shot per stream: a wake costs the
/// streams that have something, not a pass over every open stream (a
/// poll(2) over all of them cost 18% of a core at 1,400 idle streams,
/// each runner's heartbeat waking the whole set). A stream is re-armed
/// after its turn unless a frame of it waits for room (retried every
/// 20 ms, unread meanwhile) or it has bytes buffered (another turn at
/// once). Stops (the eventfd) and idle deadlines are checked in a sweep
/// over every stream: on a wake, and once a second.
fn run(p: &Pump) {
    let ep = match epoll::create(epoll::CreateFlags::CLOEXEC) {
        Ok(fd) => fd,
        Err(e) => return fail_all(p, &format!("epoll_create: {e}")),
    };
    if let Err(e) = epoll::add(
        &ep,
        p.waker.fd(),
        epoll::EventData::new_u64(WAKER),
        epoll::EventFlags::IN,
    ) {
        return fail_all(p, &format!("epoll_ctl: {e}"));
    }
    let mut open: HashMap<u64, Open> = HashMap::new();
    let mut next_key = WAKER + 1;
    let mut buf = vec![0u8; READ_BUF];
    let mut ready: Vec<u64> = Vec::new();
    let mut pending: Vec<u64> = Vec::new();
    let mut events: Vec<epoll::Event> = Vec::with_capacity(256);
    let mut next_sweep = Instant::now() + SWEEP;
    let mut next_retry = Instant::now();
    loop {
        let mut sweep = false;
        for o in p.incoming.lock().drain(..) {
            let key = next_key;
            next_key += 1;
            // Bytes may have come with the head: a turn at once.
            ready.push(key);
            open.insert(key, o);
        }
        let now = Instant::now();
        if !pending.is_empty() && now >= next_retry {
            ready.append(&mut pending);
            next_retry = now + RETRY_PENDING;
        }
        for key in std::mem::take(&mut ready) {
            let Some(o) = open.get_mut(&key) else {
                continue;
            };
            if !turn(o, true, &mut buf) {
                close(&ep, &mut open, key);
            } else if o.pending.is_some() {
                pending.push(key);
            } else if o.body.has_buffered_input() {
                ready.push(key);
            } else if !arm(&ep, o, key) {
                close(&ep, &mut open, key);
            }
        }
        // Wait: for a stream with bytes, the eventfd, the sweep, or the
        // next offer of a kept frame.
        let now = Instant::now();
        let mut until = next_sweep;
        if !pending.is_empty() {
            until = until.min(next_retry);
        }
        let timeout = if ready.is_empty() {
            until.saturating_duration_since(now)
        } else {
            Duration::ZERO
        };
        let ts = rustix::event::Timespec::try_from(timeout).ok();
        events.clear();
        match epoll::wait(&ep, spare_capacity(&mut events), ts.as_ref()) {
            Ok(_) | Err(rustix::io::Errno::INTR) => {}
            Err(e) => {
                log::error!("the debug relays' reader: epoll_wait: {e}");
                std::thread::sleep(Duration::from_millis(100));
            }
        }
        for ev in &events {
            match ev.data.u64() {
                WAKER => {
                    p.waker.reset();
                    sweep = true;
                }
                key => ready.push(key),
            }
        }
        let now = Instant::now();
        if sweep || now >= next_sweep {
            next_sweep = now + SWEEP;
            let over: Vec<u64> = open
                .iter()
                .filter(|(_, o)| {
                    o.relay.stop.is_stopped()
                        || (o.pending.is_none()
                            && now.duration_since(o.last_data) >= o.relay.timings.idle)
                })
                .map(|(k, _)| *k)
                .collect();
            for key in over {
                if let Some(o) = open.get(&key) {
                    if !o.relay.stop.is_stopped() {
                        log::debug!(
                            "{}: nothing for {:?}; reconnecting",
                            what(&o.relay),
                            o.relay.timings.idle
                        );
                    }
                }
                close(&ep, &mut open, key);
                pending.retain(|k| *k != key);
                ready.retain(|k| *k != key);
            }
        }
    }
}

/// Waits for the stream's next bytes (one event, then re-armed after
/// its turn); false when the kernel refuses.
fn arm(ep: &OwnedFd, o: &Open, key: u64) -> bool {
    let flags = epoll::EventFlags::IN | epoll::EventFlags::ONESHOT;
    let data = epoll::EventData::new_u64(key);
    match epoll::modify(ep, o.body.fd(), data, flags) {
        Ok(()) => true,
        Err(rustix::io::Errno::NOENT) => epoll::add(ep, o.body.fd(), data, flags).is_ok(),
        Err(e) => {
            log::debug!("{}: epoll_ctl: {e}", what(&o.relay));
            false
        }
    }
}

/// Ends a stream: out of the interest list, the next attempt scheduled.
fn close(ep: &OwnedFd, open: &mut HashMap<u64, Open>, key: u64) {
    if let Some(o) = open.remove(&key) {
        let _ = epoll::delete(ep, o.body.fd());
        end(o);
    }
}

/// Without epoll, no stream can be read: each relay retries later.
fn fail_all(p: &Pump, why: &str) {
    log::error!("the debug relays' reader: {why}");
    loop {
        for o in p.incoming.lock().drain(..) {
            end(o);
        }
        let _ = crate::http::stream::wait_readable(p.waker.fd(), &p.waker, Duration::from_secs(1));
        p.waker.reset();
    }
}

/// One turn of a stream: offer a kept frame, hand out the events the
/// parser holds, read what the socket has. False when it is over.
fn turn(o: &mut Open, readable: bool, buf: &mut [u8]) -> bool {
    if o.relay.stop.is_stopped() {
        return false;
    }
    let now = Instant::now();
    let may_read = readable || o.body.has_buffered_input();
    if o.pending.is_none() && !may_read {
        if now.duration_since(o.last_data) >= o.relay.timings.idle {
            log::debug!(
                "{}: nothing for {:?}; reconnecting",
                what(&o.relay),
                o.relay.timings.idle
            );
            return false;
        }
        return true;
    }
    let relay = o.relay.clone();
    let mut guard = lock(&relay.progress);
    let p = &mut *guard;
    if let Some(f) = o.pending.take() {
        match (p.on_frame)(f) {
            Ok(()) => o.delivered += 1,
            Err(f) => {
                o.pending = Some(f);
                return true;
            }
        }
    }
    if !hand_out(o, p) {
        return true;
    }
    for _ in 0..READS_PER_TURN {
        match o.body.read(buf) {
            Ok(0) => {
                log::debug!("{}: ended", what(&o.relay));
                return false;
            }
            Ok(n) => {
                o.last_data = now;
                p.parser.push(&buf[..n]);
                if !hand_out(o, p) {
                    return true;
                }
            }
            Err(e) if e.kind() == ErrorKind::WouldBlock => return true,
            Err(e) if e.kind() == ErrorKind::Interrupted => {}
            Err(e) => {
                if !o.relay.stop.is_stopped() {
                    log::debug!("{}: {e}", what(&o.relay));
                }
                return false;
            }
        }
    }
    true
}

/// Offers the parsed events' frames; false when one was refused (kept).
fn hand_out(o: &mut Open, p: &mut super::Progress) -> bool {
    while let Some(ev) = p.parser.next_event() {
        match ev {
            Ok(ev) => {
                let Some(frame) = parse_frame(&ev.data) else {
                    continue;
                };
                if o.relay.stop.is_stopped() {
                    return true;
                }
                match (p.on_frame)(frame) {
                    Ok(()) => o.delivered += 1,
                    Err(f) => {
                        o.pending = Some(f);
                        return false;
                    }
                }
            }
            Err(e @ SseError::TooLarge { .. }) => log::warn!("{}: {e}", what(&o.relay)),
        }
    }
    true
}

/// The stream is over: the next attempt after the backoff.
fn end(o: Open) {
    let Open {
        relay,
        body,
        delivered,
        ..
    } = o;
    drop(body);
    relay.stop.clear_current();
    let wait = lock(&relay.progress).backoff.after(delivered > 0);
    finish(&relay, wait);
}
