//! The one reader of the configured Gateway (docs/sessions.md#routing-states):
//! a `session-gateway` thread per daemon, with gateway routing only, GETs
//! the Gateway at start and every [`GATEWAY_POLL`] after, and publishes
//! what it found ([`GatewayState`]) where every session's route reads
//! take it ([`crate::session::gateway::endpoint_state`]): one GET per
//! poll, however many sessions there are. A 404 is `Missing`; a failed
//! read leaves the last state. It logs once per change
//! ([`GatewayWatch::read`]). It ends when its stop sender is dropped
//! ([`GatewayReader::stop`]): the wait between reads is on that channel,
//! and a read is bounded by the client's own timeouts.

use crate::kube::client::{Api, Client, Gateway, KubeError};
use crate::session::gateway::{GatewayParent, GatewayState, GatewayWatch};
use crossbeam_channel::{bounded, Receiver, RecvTimeoutError, Sender};
use parking_lot::RwLock;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// The period of the Gateway's reads.
pub const GATEWAY_POLL: Duration = Duration::from_secs(5);

/// The running reader: dropping `stop` ends it; `done` is closed when it
/// has.
pub(super) struct GatewayReader {
    stop: Sender<()>,
    done: Receiver<()>,
}

impl GatewayReader {
    /// Starts the `session-gateway` thread; `None` (logged) when the
    /// thread cannot be spawned: endpoints then follow their routes alone.
    pub(super) fn start(
        client: Client,
        parent: GatewayParent,
        shared: Arc<RwLock<GatewayState>>,
    ) -> Option<GatewayReader> {
        let (stop, stop_rx) = bounded::<()>(0);
        let (done_tx, done) = bounded::<()>(0);
        let spawned = std::thread::Builder::new()
            .name("session-gateway".into())
            .spawn(move || {
                // Dropped when the loop ends: `done` sees it closed.
                let _done = done_tx;
                let api = Api::<Gateway>::namespaced(&client, &parent.namespace);
                let mut watch = GatewayWatch::default();
                loop {
                    let reading = match api.get(&parent.name) {
                        Ok(g) => Ok(GatewayState::of(&g)),
                        Err(KubeError::NotFound(_)) => Ok(GatewayState::Missing),
                        Err(e) => Err(e.to_string()),
                    };
                    if let Some((level, line)) = watch.read(reading, &parent) {
                        log::log!(level, "{line}");
                    }
                    if *shared.read() != *watch.state() {
                        *shared.write() = watch.state().clone();
                    }
                    match stop_rx.recv_timeout(GATEWAY_POLL) {
                        Err(RecvTimeoutError::Timeout) => {}
                        _ => return,
                    }
                }
            });
        match spawned {
            Ok(_) => Some(GatewayReader { stop, done }),
            Err(e) => {
                log::error!(
                    "spawning the Gateway reader: {e}; session endpoints follow their routes alone"
                );
                None
            }
        }
    }

    /// Ends the thread, waiting for it until `deadline` (a read in flight
    /// ends within the client's timeouts); false when it had not ended by
    /// then.
    pub(super) fn stop(self, deadline: Instant) -> bool {
        drop(self.stop);
        matches!(
            self.done.recv_deadline(deadline),
            Err(crossbeam_channel::RecvTimeoutError::Disconnected)
        )
    }
}
