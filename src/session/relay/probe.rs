//! The reachability prober: one `session-probe` thread per tcp port of
//! an app, asking the pod-access seam whether the port accepts a
//! connection (`checking`, then `reachable` or, once, `unreachable`).

use super::{wait, Stop, Worker};
use crate::session::access::{PodAccess, PodTarget};
use crate::session::machine::Reach;
use crossbeam_channel::Receiver;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// The prober's timings (the defaults are docs/sessions.md's, "Debug
/// relay, reachability, port proxy").
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ProbeTimings {
    /// Between probe starts until `unreachable` is reported: 1 s.
    pub interval: Duration,
    /// One probe's timeout: 1 s.
    pub timeout: Duration,
    /// Without success for this long, `unreachable` (once): 30 s.
    pub unreachable_after: Duration,
    /// Between probe starts after that: 5 s.
    pub slow_interval: Duration,
}

impl Default for ProbeTimings {
    fn default() -> Self {
        ProbeTimings {
            interval: Duration::from_secs(1),
            timeout: Duration::from_secs(1),
            unreachable_after: Duration::from_secs(30),
            slow_interval: Duration::from_secs(5),
        }
    }
}

/// A running probe; stops when told, dropped, or after `reachable`.
pub struct ProbeHandle {
    worker: Worker,
}

impl ProbeHandle {
    /// Ends the probe (a probe in flight ends within its timeout; no state
    /// is reported after it). Returns at once.
    pub fn stop(&self) {
        self.worker.stop.stop();
    }

    /// [`ProbeHandle::stop`], then waits up to `timeout` for the thread to
    /// end; true when it did.
    pub fn stop_and_wait(mut self, timeout: Duration) -> bool {
        self.worker.stop_and_wait(timeout)
    }

    /// Whether the thread has ended (stopped, or `reachable` reported).
    pub fn is_finished(&self) -> bool {
        self.worker.is_finished()
    }
}

impl Drop for ProbeHandle {
    fn drop(&mut self) {
        self.worker.stop.stop();
    }
}

/// Probes `port` with the default timings.
pub fn start_probe(
    access: Arc<dyn PodAccess>,
    target: PodTarget,
    port: u16,
    on_state: impl Fn(Reach) + Send + 'static,
) -> ProbeHandle {
    start_probe_with(access, target, port, ProbeTimings::default(), on_state)
}

/// Probes `port` (`PodAccess::probe_tcp`): `Checking` at once, `Reachable`
/// on the first success (then the thread ends), `Unreachable` once after
/// `unreachable_after` without success, then slower probes that may still
/// report `Reachable`. A failure to ask (the pod not found, the API server
/// refusing) counts as not reachable; the engine stops the probe with the
/// pod.
pub fn start_probe_with(
    access: Arc<dyn PodAccess>,
    target: PodTarget,
    port: u16,
    timings: ProbeTimings,
    on_state: impl Fn(Reach) + Send + 'static,
) -> ProbeHandle {
    let worker = Worker::spawn("session-probe", move |stop, wake| {
        probe_loop(&*access, &target, port, timings, stop, wake, &on_state)
    });
    ProbeHandle { worker }
}

fn probe_loop(
    access: &dyn PodAccess,
    target: &PodTarget,
    port: u16,
    timings: ProbeTimings,
    stop: &Stop,
    wake: &Receiver<()>,
    on_state: &dyn Fn(Reach),
) {
    let tell = |r: Reach| {
        if !stop.is_stopped() {
            on_state(r);
        }
    };
    tell(Reach::Checking);
    let start = Instant::now();
    let mut told_unreachable = false;
    let mut last_error = String::new();
    loop {
        if stop.is_stopped() {
            return;
        }
        let t0 = Instant::now();
        let ok = match access.probe_tcp(target, port, timings.timeout) {
            Ok(ok) => ok,
            Err(e) => {
                let m = e.to_string();
                if m != last_error {
                    log::debug!("probing {}:{port}: {m}", target.name);
                    last_error = m;
                }
                false
            }
        };
        if ok {
            tell(Reach::Reachable);
            return;
        }
        if !told_unreachable && start.elapsed() >= timings.unreachable_after {
            told_unreachable = true;
            tell(Reach::Unreachable);
        }
        let every = if told_unreachable {
            timings.slow_interval
        } else {
            timings.interval
        };
        if !wait(
            wake,
            stop,
            (t0 + every).saturating_duration_since(Instant::now()),
        ) {
            return;
        }
    }
}
