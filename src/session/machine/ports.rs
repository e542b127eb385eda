//! The session's published ports: the Service, Ingress and HTTPRoute
//! upserts, port
//! re-routes asked by an app's debug stream (`Kernel.PortsResolved`:
//! diffed, checked against the other apps' ports and kubegate's own, then
//! published and reported as an `endpoints` event), and the reachability
//! probes of tcp ports.

use super::*;
use crate::session::gateway::build_http_routes;
use crate::session::pod::{build_ingress, build_service, Published};
use crate::session::spec::{Protocol, AGENT_PORT, INSPECT_BASE_PORT};

/// A port re-route waiting for its publish.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct PortChange {
    app: String,
    accepted: Vec<Port>,
    removed: Vec<Port>,
    rejected: Vec<Rejected>,
}

/// Reads `Kernel.PortsResolved`: `payload.ports` as a list of `{port,
/// protocol?}` (udp only when said). `None` for any other frame or a
/// malformed list.
pub fn ports_resolved_from(frame: &Value) -> Option<Vec<Port>> {
    if frame.get("event").and_then(Value::as_str) != Some("Kernel.PortsResolved") {
        return None;
    }
    let list = frame.pointer("/payload/ports")?.as_array()?;
    let mut out = Vec::with_capacity(list.len());
    for p in list {
        let (num, proto) = match p {
            Value::Number(n) => (n.as_u64()?, None),
            Value::Object(o) => (o.get("port")?.as_u64()?, o.get("protocol")),
            _ => return None,
        };
        let port = u16::try_from(num).ok().filter(|&x| x > 0)?;
        let protocol = match proto.and_then(Value::as_str) {
            Some("udp") | Some("UDP") => Protocol::Udp,
            _ => Protocol::Tcp,
        };
        let p = Port { port, protocol };
        if !out.contains(&p) {
            out.push(p);
        }
    }
    Some(out)
}

impl Session {
    pub(super) fn start_probe(&mut self, app: &str, port: u16, out: &mut Vec<Command>) {
        if self.routes.probes.insert((app.to_string(), port)) {
            out.push(Command::StartProbe {
                pod: self.pod_name(),
                ip: self.pod_ip(),
                app: app.to_string(),
                port,
            });
        }
    }

    /// Publishes the current port set; returns the publish id.
    pub(super) fn publish(&mut self, out: &mut Vec<Command>) -> u64 {
        let id = self.routes.next_publish;
        self.routes.next_publish += 1;
        let ports = self.app_ports();
        let (pod, uid) = match &self.pod.current {
            Some(p) => (p.name.clone(), p.uid.clone().unwrap_or_default()),
            None => Default::default(),
        };
        let published = Published {
            session_id: &self.who.id,
            principal: &self.who.principal,
            pod_name: &pod,
            pod_uid: &uid,
            ports: &ports,
        };
        out.push(Command::Publish {
            id,
            service: build_service(&self.settings, &published).map(Box::new),
            ingress: build_ingress(&self.settings, &published).map(Box::new),
            routes: build_http_routes(&self.settings, &published),
        });
        id
    }

    /// [`Input::PublishDone`]: the bring-up's, or a port change's.
    pub(super) fn publish_done(&mut self, id: u64, now: Millis, out: &mut Vec<Command>) {
        self.routes_published(now, out);
        if self.bring_up_published(id, now, out) {
            return;
        }
        if let Some(c) = self.routes.changes.remove(&id) {
            self.port_change_published(c, out);
            self.touch(now, out);
        }
    }

    /// [`Input::PublishFailed`]: the bring-up fails; a port change's added
    /// ports are rejected.
    pub(super) fn publish_failed(
        &mut self,
        id: u64,
        message: &str,
        now: Millis,
        out: &mut Vec<Command>,
    ) {
        if matches!(self.pod.phase, Phase::Publishing { id: current, .. } if current == id) {
            let message = format!("publishing the session's endpoints failed: {message}");
            self.fail(now, Stage::Publish, message, out);
        } else if let Some(c) = self.routes.changes.remove(&id) {
            self.port_change_failed(c, message, out);
            self.touch(now, out);
        }
    }

    /// [`Input::Reachability`]: passed on for the ports probed.
    pub(super) fn reachability(
        &mut self,
        pod: &str,
        app: String,
        port: u16,
        state: Reach,
        out: &mut Vec<Command>,
    ) {
        if self.is_current(pod) && self.routes.probes.contains(&(app.clone(), port)) {
            out.push(Command::Emit(Event::Reachability { app, port, state }));
        }
    }

    /// Probes every app's tcp ports (the session went running).
    pub(super) fn start_probes(&mut self, out: &mut Vec<Command>) {
        let tcp: Vec<(String, u16)> = self
            .apps
            .list
            .iter()
            .flat_map(|a| {
                a.spec
                    .ports
                    .iter()
                    .filter(|p| p.protocol == Protocol::Tcp)
                    .map(|p| (a.spec.name.clone(), p.port))
            })
            .collect();
        for (app, port) in tcp {
            self.start_probe(&app, port, out);
        }
    }

    /// `Kernel.PortsResolved` for `app`: diff, reject ports another app
    /// owns (or kubegate uses), replace the app's set, re-publish.
    pub(super) fn ports_resolved(
        &mut self,
        app: &str,
        declared: Vec<Port>,
        out: &mut Vec<Command>,
    ) {
        let Some(idx) = self.apps.list.iter().position(|a| a.spec.name == app) else {
            return;
        };
        let before = self.apps.list[idx].spec.ports.clone();
        let added: Vec<Port> = declared
            .iter()
            .filter(|p| !before.contains(p))
            .copied()
            .collect();
        let removed: Vec<Port> = before
            .iter()
            .filter(|p| !declared.contains(p))
            .copied()
            .collect();
        if added.is_empty() && removed.is_empty() {
            return;
        }
        let napps = self.apps.list.len();
        let mut accepted = Vec::new();
        let mut rejected = Vec::new();
        for p in added {
            let owner = self
                .apps
                .list
                .iter()
                .find(|a| a.spec.name != app && a.spec.ports.contains(&p));
            let reason = if let Some(o) = owner {
                Some(format!(
                    "another app in this session ({}) already declares {} port {}",
                    o.spec.name,
                    p.protocol.as_str(),
                    p.port
                ))
            } else if p.protocol == Protocol::Tcp && p.port == AGENT_PORT {
                Some(format!("tcp port {AGENT_PORT} is the workspace agent's"))
            } else if p.protocol == Protocol::Tcp
                && (INSPECT_BASE_PORT..INSPECT_BASE_PORT.saturating_add(napps as u16))
                    .contains(&p.port)
            {
                Some(format!("tcp port {} carries an app's debug stream", p.port))
            } else {
                None
            };
            match reason {
                Some(reason) => rejected.push(Rejected {
                    port: p.port,
                    reason,
                }),
                None => accepted.push(p),
            }
        }
        let mut now_ports: Vec<Port> = before
            .iter()
            .filter(|p| declared.contains(p))
            .copied()
            .collect();
        now_ports.extend(accepted.iter().copied());
        self.apps.list[idx].spec.ports = now_ports;
        self.apps.sync_spec();
        for p in &removed {
            if p.protocol == Protocol::Tcp && self.routes.probes.remove(&(app.to_string(), p.port))
            {
                out.push(Command::StopProbe {
                    pod: self.pod_name(),
                    app: app.to_string(),
                    port: p.port,
                });
            }
        }
        if accepted.is_empty() && removed.is_empty() {
            // Only rejections: nothing to publish.
            out.push(Command::Emit(Event::Endpoints {
                app: app.to_string(),
                added: vec![],
                removed: vec![],
                rejected,
            }));
            return;
        }
        let id = self.publish(out);
        self.routes.changes.insert(
            id,
            PortChange {
                app: app.to_string(),
                accepted,
                removed,
                rejected,
            },
        );
    }

    pub(super) fn port_change_published(&mut self, c: PortChange, out: &mut Vec<Command>) {
        let domain = self.settings.base_domain.clone();
        out.push(Command::Emit(Event::Endpoints {
            app: c.app.clone(),
            added: pod::endpoints(domain.as_deref(), &self.who.id, &c.app, &c.accepted),
            removed: pod::endpoints(domain.as_deref(), &self.who.id, &c.app, &c.removed),
            rejected: c.rejected,
        }));
        if self.pod.phase == Phase::Up && self.app(&c.app).is_some() {
            for p in c.accepted.iter().filter(|p| p.protocol == Protocol::Tcp) {
                self.start_probe(&c.app, p.port, out);
            }
        }
    }

    pub(super) fn port_change_failed(
        &mut self,
        c: PortChange,
        message: &str,
        out: &mut Vec<Command>,
    ) {
        // The added ports are not routed: they leave the app's set again
        // and are reported rejected with the error.
        if let Some(a) = self.apps.list.iter_mut().find(|a| a.spec.name == c.app) {
            a.spec.ports.retain(|p| !c.accepted.contains(p));
        }
        self.apps.sync_spec();
        let mut rejected = c.rejected;
        rejected.extend(c.accepted.iter().map(|p| Rejected {
            port: p.port,
            reason: message.to_string(),
        }));
        let domain = self.settings.base_domain.clone();
        out.push(Command::Emit(Event::Endpoints {
            app: c.app.clone(),
            added: vec![],
            removed: pod::endpoints(domain.as_deref(), &self.who.id, &c.app, &c.removed),
            rejected,
        }));
    }
}
