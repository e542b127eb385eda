//! The kubelet's Events, sent upstream: the kubelet's recorder
//! (`sim::events::Recorder`) writes them into the mirror as the embedded
//! sim's does (its spam filter and counts included); this thread
//! (`node-events`) sends each new one with POST and each raised count with
//! a merge PATCH of `count` and `lastTimestamp`, as client-go's recorder
//! does. Best effort, as upstream's: an Event the API server does not take
//! (an outage, a namespace going away) is dropped and counted, never
//! retried, and never holds up a pod.

use crate::kube::client::rest::Request;
use crate::kube::client::Client;
use crate::sim::resources::Resource;
use crate::sim::store::{RecvTimeoutError, Selectors, Store, WatchFrom};
use serde_json::{json, Value};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};
use ureq::http::Method;

pub struct EventSender {
    stop: Arc<AtomicBool>,
    pub dropped: Arc<AtomicU64>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl EventSender {
    pub fn start(client: Client, store: Arc<Store>) -> std::io::Result<EventSender> {
        let stop = Arc::new(AtomicBool::new(false));
        let dropped = Arc::new(AtomicU64::new(0));
        let (st, dr) = (stop.clone(), dropped.clone());
        let thread = std::thread::Builder::new()
            .name("node-events".into())
            .spawn(move || run(&client, &store, &st, &dr))?;
        Ok(EventSender {
            stop,
            dropped,
            thread: Some(thread),
        })
    }

    pub fn stop(&mut self) {
        self.stop.store(true, Ordering::SeqCst);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

fn run(client: &Client, store: &Store, stop: &AtomicBool, dropped: &AtomicU64) {
    let mut last_log: Option<Instant> = None;
    while !stop.load(Ordering::SeqCst) {
        let Ok(stream) = store.watch(Resource::Event, None, Selectors::default(), WatchFrom::Now)
        else {
            std::thread::sleep(Duration::from_millis(100));
            continue;
        };
        loop {
            if stop.load(Ordering::SeqCst) {
                return;
            }
            let ev = match stream.recv_timeout(Duration::from_millis(250)) {
                Ok(ev) => ev,
                Err(RecvTimeoutError::Timeout) => continue,
                Err(RecvTimeoutError::Disconnected) => break,
            };
            let req = match ev.ty {
                crate::kube::watch::EventType::Added => create(&ev.object),
                crate::kube::watch::EventType::Modified => raise(&ev.object),
                _ => continue,
            };
            let Some(req) = req else { continue };
            if let Err(e) = client.send(&req) {
                dropped.fetch_add(1, Ordering::Relaxed);
                if last_log.is_none_or(|t| t.elapsed() >= Duration::from_secs(10)) {
                    log::info!(
                        "node: an Event was not taken ({e}); {} dropped so far",
                        dropped.load(Ordering::Relaxed)
                    );
                    last_log = Some(Instant::now());
                }
            }
        }
    }
}

/// The POST of a new Event: the mirror's bookkeeping left out.
fn create(ev: &Value) -> Option<Request> {
    let ns = ev["metadata"]["namespace"].as_str()?;
    let name = ev["metadata"]["name"].as_str()?;
    let mut body = ev.clone();
    body["metadata"] = json!({"name": name, "namespace": ns});
    Some(
        Request::new(Method::POST, format!("/api/v1/namespaces/{ns}/events"))
            .json(body.to_string().into_bytes()),
    )
}

/// A repeat of an Event: its count and last time.
fn raise(ev: &Value) -> Option<Request> {
    let ns = ev["metadata"]["namespace"].as_str()?;
    let name = ev["metadata"]["name"].as_str()?;
    let body = json!({"count": ev["count"], "lastTimestamp": ev["lastTimestamp"]});
    Some(
        Request::new(
            Method::PATCH,
            format!("/api/v1/namespaces/{ns}/events/{name}"),
        )
        .body(
            body.to_string().into_bytes(),
            "application/merge-patch+json",
        ),
    )
}
