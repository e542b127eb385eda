//! [`Watcher<K>`]: a blocking iterator over one collection's changes that
//! survives everything a long watch meets: the server's own timeout, dropped
//! and silently dead connections, 429s, and 410 Expired.
//!
//! It owns the resume logic of docs/kubernetes.md#watch: it remembers the last
//! resourceVersion (object events and BOOKMARKs advance it; bookmarks are
//! never yielded), re-watches from it after any end with exponential backoff
//! and jitter (0.8 s doubling to 30 s; a stream that delivered anything
//! starts the backoff over, one that delivered nothing escalates it; 429s
//! wait at least their Retry-After), and on 410 — an ERROR event inside a
//! 200 stream or an HTTP 410 — lists again and yields
//! [`WatchEvent::Resynced`] so the caller can reconcile, then watches from
//! the list's resourceVersion. Without a starting resourceVersion it begins
//! the same way (list, `Resynced`, watch).
//!
//! Bytes are parsed by the sans-IO `kube::watch::WatchDecoder` (chunk
//! boundaries do not matter). Each watcher has its OWN ureq agent with no
//! whole-request deadline and a per-read deadline a little longer than
//! `timeoutSeconds` (so a dead connection is noticed), which
//! [`WatchStopper::stop`] shuts down to end a blocked read at once.
//! It never spawns threads and never retries a non-retryable answer
//! (403, 404 namespace, 400…): that is yielded once as an error, then the
//! iterator ends.

use super::api::{list_on, with_query, ListParams};
use super::backoff::Backoff;
use super::error::KubeError;
use super::rest::{CallOptions, Client, Request};
use crate::kube::meta::ObjectList;
use crate::kube::watch::{EventType, RawEvent, WatchDecoder};
use parking_lot::{Condvar, Mutex};
use serde::de::DeserializeOwned;
use std::collections::VecDeque;
use std::io::Read;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// Watch options.
#[derive(Debug, Clone, PartialEq)]
pub struct WatchParams {
    pub label_selector: Option<String>,
    pub field_selector: Option<String>,
    /// Where to start. `None`: list first, yield `Resynced`, then watch
    /// from the list's RV (the robust choice). `Some("0")`: the server's
    /// synthetic ADDED for every current object (if the first connection
    /// drops before any event, they come again). `Some(rv)`: only changes
    /// after `rv`.
    pub resource_version: Option<String>,
    /// `timeoutSeconds` of each watch request (kube-rs uses 290 s).
    pub timeout: Duration,
    /// Per-read deadline; `None`: `timeout` + 5 s. No byte for this long
    /// means the connection is dead: reconnect.
    pub read_timeout: Option<Duration>,
    /// `allowWatchBookmarks` (keeps the resume point fresh on quiet
    /// collections).
    pub bookmarks: bool,
    /// Largest wait between reconnects (client-go: 30 s).
    pub max_backoff: Duration,
}

impl Default for WatchParams {
    fn default() -> Self {
        WatchParams {
            label_selector: None,
            field_selector: None,
            resource_version: None,
            timeout: Duration::from_secs(290),
            read_timeout: None,
            bookmarks: true,
            max_backoff: Duration::from_secs(30),
        }
    }
}

impl WatchParams {
    pub fn labels(selector: &str) -> WatchParams {
        WatchParams {
            label_selector: Some(selector.into()),
            ..WatchParams::default()
        }
    }

    /// Starts after `rv` (no initial list).
    pub fn from_version(mut self, rv: &str) -> WatchParams {
        self.resource_version = Some(rv.into());
        self
    }

    fn read_deadline(&self) -> Duration {
        self.read_timeout
            .unwrap_or(self.timeout + Duration::from_secs(5))
    }
}

/// One item of a watch.
#[derive(Debug, Clone, PartialEq)]
pub enum WatchEvent<K> {
    Added(K),
    Modified(K),
    /// Carries the object's last state.
    Deleted(K),
    /// The complete current state after a (re)list: at the start without a
    /// resourceVersion, and after 410 Expired. Objects missing from `items`
    /// were deleted while the watch could not see them.
    Resynced {
        items: Vec<K>,
        resource_version: String,
    },
}

/// Ends a watch from another thread (see [`Watcher::stopper`]).
#[derive(Clone)]
pub struct WatchStopper(Arc<Control>);

impl WatchStopper {
    /// Ends the watch: a blocked read or backoff wait returns at once and
    /// the iterator yields `None` from then on.
    pub fn stop(&self) {
        self.0.stop();
    }

    pub fn is_stopped(&self) -> bool {
        self.0.stopped.load(Ordering::SeqCst)
    }
}

struct Control {
    stopped: AtomicBool,
    agent: Mutex<Option<ureq::Agent>>,
    wake: Mutex<()>,
    cv: Condvar,
}

impl Control {
    fn stop(&self) {
        self.stopped.store(true, Ordering::SeqCst);
        {
            let _g = self.wake.lock();
            self.cv.notify_all();
        }
        if let Some(agent) = self.agent.lock().take() {
            agent.shutdown();
        }
    }

    /// Sleeps up to `d`; false when stopped meanwhile.
    fn sleep(&self, d: Duration) -> bool {
        let deadline = Instant::now() + d;
        let mut g = self.wake.lock();
        while !self.stopped.load(Ordering::SeqCst) {
            if self.cv.wait_until(&mut g, deadline).timed_out() {
                break;
            }
        }
        !self.stopped.load(Ordering::SeqCst)
    }
}

struct Stream {
    body: ureq::BodyReader<'static>,
    decoder: WatchDecoder,
    progressed: bool,
}

/// Watch requests re-sent by every [`Watcher`] of this process after its
/// first (a drop, a server timeout, an error, a 410 relist's new watch):
/// the daemon's `kubegate_watch_restarts_total`.
static RESTARTS: AtomicU64 = AtomicU64::new(0);

/// Watches re-opened so far in this process (see `RESTARTS`).
pub fn restarts_total() -> u64 {
    RESTARTS.load(Ordering::Relaxed)
}

/// Counters for tests and metrics.
#[derive(Debug, Default)]
pub struct WatchStats {
    /// Watch requests sent.
    pub opens: AtomicU64,
    /// Lists made (start and 410s).
    pub relists: AtomicU64,
    /// BOOKMARK events that carried a resourceVersion (each moved the
    /// resume point; none is yielded).
    pub bookmarks: AtomicU64,
}

/// A blocking iterator of `Result<WatchEvent<K>, KubeError>`. Errors that
/// do not end the watch (an event that does not decode as `K`) are yielded
/// and the watch goes on; a non-retryable answer is yielded and ends it.
pub struct Watcher<K> {
    client: Client,
    collection: String,
    params: WatchParams,
    agent: ureq::Agent,
    control: Arc<Control>,
    rv: Option<String>,
    need_list: bool,
    stream: Option<Stream>,
    backoff: Backoff,
    delay: Option<Duration>,
    pending: VecDeque<Result<WatchEvent<K>, KubeError>>,
    done: bool,
    stats: Arc<WatchStats>,
}

impl<K> std::fmt::Debug for Watcher<K> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Watcher")
            .field("collection", &self.collection)
            .field("rv", &self.rv)
            .finish_non_exhaustive()
    }
}

impl<K: DeserializeOwned> Watcher<K> {
    /// A watch of `collection` (a path such as `/api/v1/namespaces/x/pods`).
    /// Nothing is sent until the first `next()`.
    pub fn new(client: &Client, collection: String, params: WatchParams) -> Watcher<K> {
        let agent = client.stream_agent(Some(params.read_deadline()));
        let control = Arc::new(Control {
            stopped: AtomicBool::new(false),
            agent: Mutex::new(Some(agent.clone())),
            wake: Mutex::new(()),
            cv: Condvar::new(),
        });
        let backoff = Backoff::new(
            Duration::from_millis(800).min(params.max_backoff),
            params.max_backoff,
            1.0,
            Duration::from_secs(120),
        );
        Watcher {
            client: client.clone(),
            collection,
            rv: params.resource_version.clone(),
            need_list: params.resource_version.is_none(),
            params,
            agent,
            control,
            stream: None,
            backoff,
            delay: None,
            pending: VecDeque::new(),
            done: false,
            stats: Arc::new(WatchStats::default()),
        }
    }

    /// A handle that ends this watch from any thread.
    pub fn stopper(&self) -> WatchStopper {
        WatchStopper(self.control.clone())
    }

    /// Ends the watch (same as [`WatchStopper::stop`]).
    pub fn stop(&self) {
        self.control.stop();
    }

    /// The resume point: the last resourceVersion seen (events, bookmarks,
    /// lists).
    pub fn resource_version(&self) -> Option<&str> {
        self.rv.as_deref()
    }

    pub fn stats(&self) -> Arc<WatchStats> {
        self.stats.clone()
    }

    fn stopped(&self) -> bool {
        self.control.stopped.load(Ordering::SeqCst)
    }

    fn selectors(&self) -> ListParams {
        ListParams {
            label_selector: self.params.label_selector.clone(),
            field_selector: self.params.field_selector.clone(),
            ..ListParams::default()
        }
    }

    fn relist(&mut self) -> Result<(), KubeError> {
        self.stats.relists.fetch_add(1, Ordering::Relaxed);
        let list: ObjectList<K> = list_on(
            &self.client,
            &self.agent,
            &self.collection,
            &self.selectors(),
            self.client.rest_timeout(),
        )?;
        let rv = list.metadata.resource_version.unwrap_or_default();
        self.rv = (!rv.is_empty()).then(|| rv.clone());
        self.need_list = false;
        self.pending.push_back(Ok(WatchEvent::Resynced {
            items: list.items,
            resource_version: rv,
        }));
        Ok(())
    }

    fn open(&mut self) -> Result<(), KubeError> {
        let mut q = vec![("watch", "true".to_string())];
        if let Some(rv) = &self.rv {
            q.push(("resourceVersion", rv.clone()));
        }
        if self.params.bookmarks {
            q.push(("allowWatchBookmarks", "true".into()));
        }
        q.push((
            "timeoutSeconds",
            self.params.timeout.as_secs().max(1).to_string(),
        ));
        q.extend(self.selectors().query());
        let req = Request::get(with_query(&self.collection, &q));
        if self.stats.opens.fetch_add(1, Ordering::Relaxed) > 0 {
            RESTARTS.fetch_add(1, Ordering::Relaxed);
        }
        let resp = self
            .client
            .send_on(&self.agent, &req, CallOptions::STREAM, None)?;
        self.stream = Some(Stream {
            body: resp.into_body().into_reader(),
            decoder: WatchDecoder::new(),
            progressed: false,
        });
        Ok(())
    }

    /// Decides what an error means for the watch: relist, back off and
    /// reconnect, or yield it and end.
    fn on_error(&mut self, e: KubeError) {
        self.stream = None;
        if self.stopped() {
            return;
        }
        match &e {
            KubeError::Expired(_) => {
                log::debug!(
                    "watch {}: resourceVersion expired; relisting",
                    self.collection
                );
                self.need_list = true;
                self.delay = None;
            }
            // A garbled stream is the connection's fault, not the caller's:
            // reconnect like after a drop.
            e if e.is_retryable() || matches!(e, KubeError::Protocol(_)) => {
                let mut d = self.backoff.next_delay();
                if let Some(ra) = e.retry_after() {
                    d = d.max(ra.min(self.params.max_backoff));
                }
                log::debug!("watch {}: {e}; again in {d:?}", self.collection);
                self.delay = Some(d);
            }
            _ => {
                self.pending.push_back(Err(e));
                self.done = true;
            }
        }
    }

    /// The stream ended (cleanly, or the connection broke or went silent):
    /// resume from the last RV after a backoff step.
    fn on_end(&mut self, why: &str) {
        let progressed = self.stream.take().is_some_and(|s| s.progressed);
        if progressed {
            self.backoff.reset();
        }
        let d = self.backoff.next_delay();
        log::debug!(
            "watch {}: {why}; resuming from {:?} in {d:?}",
            self.collection,
            self.rv
        );
        self.delay = Some(d);
    }

    /// Handles one decoded event; false when the stream must be abandoned.
    fn on_event(&mut self, ev: RawEvent) -> bool {
        let ty = ev.ty;
        let rv = ev.resource_version().map(str::to_string);
        match ty {
            EventType::Added | EventType::Modified | EventType::Deleted => {
                if let Some(rv) = rv {
                    self.rv = Some(rv);
                }
                let item = serde_json::from_value::<K>(ev.object)
                    .map_err(|e| KubeError::Protocol(format!("watch {ty} event: {e}")))
                    .map(|k| match ty {
                        EventType::Added => WatchEvent::Added(k),
                        EventType::Modified => WatchEvent::Modified(k),
                        _ => WatchEvent::Deleted(k),
                    });
                self.pending.push_back(item);
                true
            }
            EventType::Bookmark => {
                if let Some(rv) = rv.filter(|r| !r.is_empty()) {
                    self.rv = Some(rv);
                    self.stats.bookmarks.fetch_add(1, Ordering::Relaxed);
                }
                true
            }
            EventType::Error => {
                let err = match ev.as_status() {
                    Some(s) => {
                        let code = s.http_code();
                        KubeError::from_status(code, s)
                    }
                    None => KubeError::Protocol("watch ERROR event without a Status".into()),
                };
                self.on_error(err);
                false
            }
        }
    }

    /// Reads once from the open stream and queues what it decodes.
    fn pump(&mut self) {
        let mut buf = [0u8; 16 * 1024];
        let Some(stream) = self.stream.as_mut() else {
            return;
        };
        match stream.body.read(&mut buf) {
            Ok(0) => {
                let why = match stream.decoder.finish() {
                    Ok(()) => "the server ended the watch".to_string(),
                    Err(e) => e.to_string(),
                };
                self.on_end(&why);
            }
            Ok(n) => {
                stream.decoder.push(&buf[..n]);
                loop {
                    let Some(stream) = self.stream.as_mut() else {
                        return;
                    };
                    let Some(next) = stream.decoder.next_event() else {
                        return;
                    };
                    stream.progressed = true;
                    match next {
                        Ok(ev) => {
                            if !self.on_event(ev) {
                                return;
                            }
                        }
                        Err(e) if e.is_fatal() => {
                            self.on_end(&e.to_string());
                            return;
                        }
                        Err(e) => self
                            .pending
                            .push_back(Err(KubeError::Protocol(e.to_string()))),
                    }
                }
            }
            Err(e) => {
                if !self.stopped() {
                    self.on_end(&format!("connection lost: {e}"));
                }
            }
        }
    }
}

impl<K: DeserializeOwned> Iterator for Watcher<K> {
    type Item = Result<WatchEvent<K>, KubeError>;

    fn next(&mut self) -> Option<Self::Item> {
        loop {
            if self.stopped() {
                self.stream = None;
                return None;
            }
            if let Some(item) = self.pending.pop_front() {
                return Some(item);
            }
            if self.done {
                return None;
            }
            if self.stream.is_none() {
                if let Some(d) = self.delay.take() {
                    if !self.control.sleep(d) {
                        continue;
                    }
                }
                if self.need_list {
                    if let Err(e) = self.relist() {
                        self.on_error(e);
                    }
                    continue;
                }
                if let Err(e) = self.open() {
                    self.on_error(e);
                }
                continue;
            }
            self.pump();
        }
    }
}

impl<K> Drop for Watcher<K> {
    fn drop(&mut self) {
        // Close the socket now rather than when the last stopper goes.
        self.stream = None;
        if let Some(agent) = self.control.agent.lock().take() {
            agent.shutdown();
        }
    }
}
