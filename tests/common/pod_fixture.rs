//! A sim with one pod Running with an IP, for the tests of the pieces that
//! reach into session pods (the pod-access seam, the relay).
#![allow(dead_code)]

use super::{wait_for, SimProc};
use kubegate::kube::client::resources::Pod;
use kubegate::kube::client::{Api, Client};
use kubegate::kube::connection::Connection;
use kubegate::session::access::PodTarget;
use std::time::Duration;

pub struct Fixture {
    pub sim: SimProc,
    pub client: Client,
    pub target: PodTarget,
}

/// Starts a sim, creates `pod` in `default` and waits (up to `within`)
/// until it runs with an IP.
pub fn fixture(pod: serde_json::Value, within: Duration) -> Fixture {
    let sim = SimProc::start(&[]);
    let client = Client::new(Connection::plain(&sim.url)).expect("client");
    let pods = Api::<Pod>::namespaced(&client, "default");
    let pod: Pod = serde_json::from_value(pod).expect("pod");
    let name = pod.metadata.name().to_string();
    pods.create(&pod).expect("create the pod");
    let ip = wait_for("the pod Running with an IP", within, || {
        let p = pods.get(&name).ok()?;
        let ip = p.status.as_ref()?.pod_ip.clone()?;
        (p.phase() == "Running" && !ip.is_empty()).then_some(ip)
    });
    Fixture {
        sim,
        client,
        target: PodTarget {
            namespace: "default".into(),
            name,
            ip,
        },
    }
}
