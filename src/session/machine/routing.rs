//! Gateway routing's states (docs/sessions.md#routing-states): the
//! session's HTTPRoutes are read back ([`Command::ReadRoutes`], answered by
//! [`Input::RoutesRead`]) after every publish and on ticks while the pod is
//! up: every [`ROUTE_POLL_UNSETTLED_MS`] while a route is `pending` within
//! [`ROUTE_POLL_FAST_FOR_MS`] of the last publish (a controller is about to
//! answer), every [`ROUTE_POLL_SETTLED_MS`] otherwise (all programmed, a
//! known failure, or a controller that never answers: a cluster without
//! one is not polled every second forever). A change of a tcp port's state
//! is a `routing` event; the view's endpoints carry the last state read.

use super::*;
use crate::session::gateway::{RouteState, Routing};
use crate::session::spec::Protocol;

/// The poll period while some route is `pending`, shortly after a publish.
pub const ROUTE_POLL_UNSETTLED_MS: Millis = 1_000;
/// How long after a publish a `pending` route is polled fast.
pub const ROUTE_POLL_FAST_FOR_MS: Millis = 30_000;
/// The poll period otherwise (a Gateway deleted under programmed routes
/// shows within this when its controller says so in the routes, within
/// this plus the engine's Gateway reader's period when only the Gateway
/// tells).
pub const ROUTE_POLL_SETTLED_MS: Millis = 5_000;

/// What a read of the session's routes found: the state of each route
/// by its port (a port without a route is `pending`), or why the read
/// failed.
pub type RoutesReading = Result<Vec<(u16, RouteState)>, String>;

/// The read-back of the routes. Rules: one read in flight at most, except
/// right after a publish (a newer answer may overtake an older one; the
/// next poll corrects it); `states` holds the last state read per tcp port
/// (absent: `pending`).
#[derive(Debug, Clone, Default)]
pub(super) struct RouteReads {
    pub(super) states: BTreeMap<u16, RouteState>,
    pub(super) in_flight: bool,
    pub(super) last_at: Option<Millis>,
    /// Until when a `pending` route is polled fast (the last publish plus
    /// [`ROUTE_POLL_FAST_FOR_MS`]); cleared by the first tick past it.
    pub(super) fast_until: Option<Millis>,
}

impl Session {
    fn gateway_routing(&self) -> bool {
        matches!(self.settings.routing, Routing::Gateway(_))
    }

    /// The tcp ports of every app with the app's name, in order (the ports
    /// a route exists for).
    fn routed_ports(&self) -> Vec<(String, u16)> {
        self.apps
            .list
            .iter()
            .flat_map(|a| {
                a.spec
                    .ports
                    .iter()
                    .filter(|p| p.protocol == Protocol::Tcp)
                    .map(|p| (a.spec.name.clone(), p.port))
            })
            .collect()
    }

    /// An endpoint's routing state: `None` without gateway routing or for
    /// a udp port; `pending` while the pod is not up (its routes go with
    /// it, and a new pod's are not read yet).
    pub(super) fn route_state_of(&self, port: u16, protocol: Protocol) -> Option<RouteState> {
        (self.gateway_routing() && protocol == Protocol::Tcp).then(|| {
            let known = self.pod.phase == Phase::Up;
            known
                .then(|| self.route_reads.states.get(&port).cloned())
                .flatten()
                .unwrap_or(RouteState::Pending)
        })
    }

    /// True while a gateway route of a running pod is `pending` shortly
    /// after a publish (the ticks come faster then).
    pub(super) fn routes_unsettled(&self) -> bool {
        self.gateway_routing()
            && self.pod.phase == Phase::Up
            && self.route_reads.fast_until.is_some()
            && self.routed_ports().iter().any(|(_, p)| {
                matches!(
                    self.route_reads.states.get(p),
                    None | Some(RouteState::Pending)
                )
            })
    }

    /// After a publish: read the routes at once, then fast while pending.
    pub(super) fn routes_published(&mut self, now: Millis, out: &mut Vec<Command>) {
        if self.pod.phase != Phase::Up {
            // A bring-up's publish: the routes are a new pod's, read afresh.
            self.route_reads.states.clear();
        }
        self.route_reads.fast_until = Some(now + ROUTE_POLL_FAST_FOR_MS);
        self.read_routes_now(now, out);
    }

    fn read_routes_now(&mut self, now: Millis, out: &mut Vec<Command>) {
        if self.gateway_routing() && !self.routed_ports().is_empty() {
            self.route_reads.in_flight = true;
            self.route_reads.last_at = Some(now);
            out.push(Command::ReadRoutes);
        }
    }

    /// On a tick: a read when one is due.
    pub(super) fn poll_routes(&mut self, now: Millis, out: &mut Vec<Command>) {
        if self.route_reads.fast_until.is_some_and(|t| now >= t) {
            self.route_reads.fast_until = None;
        }
        if !self.gateway_routing()
            || self.pod.phase != Phase::Up
            || self.route_reads.in_flight
            || self.routed_ports().is_empty()
        {
            return;
        }
        let period = if self.routes_unsettled() {
            ROUTE_POLL_UNSETTLED_MS
        } else {
            ROUTE_POLL_SETTLED_MS
        };
        if self
            .route_reads
            .last_at
            .is_none_or(|t| now.saturating_sub(t) >= period)
        {
            self.read_routes_now(now, out);
        }
    }

    /// [`Input::RoutesRead`]: new states become `routing` events.
    pub(super) fn routes_read(&mut self, reading: RoutesReading, out: &mut Vec<Command>) {
        self.route_reads.in_flight = false;
        let found = match reading {
            Ok(found) => found,
            // The last states stand (the engine logged why); the next poll
            // tries again.
            Err(_) => return,
        };
        let found: BTreeMap<u16, RouteState> = found.into_iter().collect();
        let domain = self.settings.base_domain.clone().unwrap_or_default();
        for (app, port) in self.routed_ports() {
            let now_state = found.get(&port).cloned().unwrap_or(RouteState::Pending);
            let before = self
                .route_reads
                .states
                .get(&port)
                .cloned()
                .unwrap_or(RouteState::Pending);
            if now_state != before {
                out.push(Command::Emit(Event::Routing {
                    app,
                    port,
                    host: pod::endpoint_host(port, &self.who.id, &domain),
                    state: now_state.clone(),
                }));
            }
        }
        self.route_reads.states = found;
    }
}
