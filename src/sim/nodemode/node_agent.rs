//! The node's own objects on the API server, as a kubelet keeps them: it
//! registers its Node (`sim::node::node_object`, with the taints and labels
//! of its command line; no `podCIDR`, which is the node-ipam controller's),
//! renews its Lease in `kube-node-lease` every 10 s (40 s duration) by
//! update with the resourceVersion it read, and every 10 s reads its Node
//! back: when the node-lifecycle controller has marked it (its Ready
//! condition no longer `True`, after an outage) or 5 minutes have passed,
//! it writes its status again (a kubelet's `nodeStatusUpdateFrequency` and
//! `nodeStatusReportFrequency`). A failed round is tried again after 1 s.
//! Thread: `node-lease`.

use crate::kube::client::rest::Request;
use crate::kube::client::{Client, KubeError};
use crate::sim::apitime;
use crate::sim::node::{HostFacts, NODE_LEASE_NAMESPACE};
use serde_json::{json, Value};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};
use ureq::http::Method;

const LEASE_DURATION_SECONDS: i64 = 40;
const RENEW: Duration = Duration::from_secs(10);
const RETRY: Duration = Duration::from_secs(1);
const STATUS_REPORT: Duration = Duration::from_secs(300);

/// What the node registers as.
pub struct NodeSpec {
    pub name: String,
    pub kubelet_port: u16,
    pub pod_cidr: String,
    pub taints: Vec<super::args::Taint>,
    pub labels: Vec<(String, String)>,
    pub facts: HostFacts,
    /// Figures that replace the host's in capacity and allocatable.
    pub capacity: Vec<(String, String)>,
}

impl NodeSpec {
    /// The Node object this node registers.
    pub fn object(&self) -> Value {
        let mut node = crate::sim::node::node_object(
            &self.name,
            &self.facts,
            self.kubelet_port,
            &self.pod_cidr,
        );
        if let Some(spec) = node["spec"].as_object_mut() {
            spec.remove("podCIDR");
            spec.remove("podCIDRs");
            if !self.taints.is_empty() {
                let taints: Vec<Value> = self
                    .taints
                    .iter()
                    .map(|t| json!({"key": t.key, "value": t.value, "effect": t.effect}))
                    .collect();
                spec.insert("taints".into(), Value::from(taints));
            }
        }
        for (k, v) in &self.labels {
            node["metadata"]["labels"][k] = json!(v);
        }
        for (k, v) in &self.capacity {
            node["status"]["capacity"][k] = json!(v);
            node["status"]["allocatable"][k] = json!(v);
        }
        node
    }
}

pub struct NodeAgent {
    stop: Arc<AtomicBool>,
    /// Lease renewals the API server took (tests, the log).
    pub renewals: Arc<AtomicU64>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl NodeAgent {
    /// Registers the Node (returning once the API server took it, or
    /// with its refusal) and starts the renewals.
    pub fn start(client: Client, spec: NodeSpec) -> Result<NodeAgent, KubeError> {
        let mut state = State {
            client,
            spec,
            node_uid: String::new(),
            last_status: None,
        };
        state.register()?;
        let stop = Arc::new(AtomicBool::new(false));
        let renewals = Arc::new(AtomicU64::new(0));
        let (st, rn) = (stop.clone(), renewals.clone());
        let thread = std::thread::Builder::new()
            .name("node-lease".into())
            .spawn(move || state.run(&st, &rn))
            .map_err(|e| KubeError::Transport(format!("starting the node's lease thread: {e}")))?;
        Ok(NodeAgent {
            stop,
            renewals,
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

struct State {
    client: Client,
    spec: NodeSpec,
    node_uid: String,
    last_status: Option<Instant>,
}

impl State {
    fn run(mut self, stop: &AtomicBool, renewals: &AtomicU64) {
        let mut next = Instant::now();
        let mut last_error_log: Option<Instant> = None;
        while !stop.load(Ordering::SeqCst) {
            if Instant::now() < next {
                std::thread::sleep(Duration::from_millis(100));
                continue;
            }
            let round = self.round();
            next = Instant::now()
                + match &round {
                    Ok(()) => {
                        renewals.fetch_add(1, Ordering::Relaxed);
                        RENEW
                    }
                    Err(e) => {
                        if last_error_log.is_none_or(|t| t.elapsed() >= Duration::from_secs(10)) {
                            log::warn!("node {}: heartbeat: {e}", self.spec.name);
                            last_error_log = Some(Instant::now());
                        }
                        RETRY
                    }
                };
        }
    }

    /// One heartbeat: the Node there (made again if it was deleted), its
    /// status when due, the Lease renewed.
    fn round(&mut self) -> Result<(), KubeError> {
        let path = format!("/api/v1/nodes/{}", self.spec.name);
        let node: Value = match self.client.send_json(&Request::get(path)) {
            Ok(n) => n,
            Err(KubeError::NotFound(_)) => return self.register(),
            Err(e) => return Err(e),
        };
        self.node_uid = node["metadata"]["uid"].as_str().unwrap_or("").to_string();
        let ready = node["status"]["conditions"]
            .as_array()
            .into_iter()
            .flatten()
            .any(|c| c["type"] == "Ready" && c["status"] == "True");
        let due = self
            .last_status
            .is_none_or(|t| t.elapsed() >= STATUS_REPORT);
        if !ready || due {
            self.post_status()?;
        }
        self.renew_lease()
    }

    fn register(&mut self) -> Result<(), KubeError> {
        let obj = self.spec.object();
        let req = Request::new(Method::POST, "/api/v1/nodes").json(obj.to_string().into_bytes());
        match self.client.send_json::<Value>(&req) {
            Ok(n) => {
                self.node_uid = n["metadata"]["uid"].as_str().unwrap_or("").to_string();
                self.last_status = Some(Instant::now());
                log::info!("node {}: registered", self.spec.name);
            }
            Err(KubeError::AlreadyExists(_)) => {
                let n: Value = self
                    .client
                    .send_json(&Request::get(format!("/api/v1/nodes/{}", self.spec.name)))?;
                self.node_uid = n["metadata"]["uid"].as_str().unwrap_or("").to_string();
                self.post_status()?;
                log::info!(
                    "node {}: registered before; status brought up to date",
                    self.spec.name
                );
            }
            Err(e) => return Err(e),
        }
        self.renew_lease()
    }

    /// The Node's status as this node sees it now (conditions with a fresh
    /// heartbeat), by strategic merge: conditions merge by type.
    fn post_status(&mut self) -> Result<(), KubeError> {
        let status = self.spec.object()["status"].clone();
        let req = Request::new(
            Method::PATCH,
            format!("/api/v1/nodes/{}/status", self.spec.name),
        )
        .body(
            json!({ "status": status }).to_string().into_bytes(),
            "application/strategic-merge-patch+json",
        );
        self.client.send(&req)?;
        self.last_status = Some(Instant::now());
        Ok(())
    }

    fn renew_lease(&self) -> Result<(), KubeError> {
        let name = &self.spec.name;
        let path =
            format!("/apis/coordination.k8s.io/v1/namespaces/{NODE_LEASE_NAMESPACE}/leases/{name}");
        let renew = apitime::Instant::now().micro();
        match self.client.send_json::<Value>(&Request::get(path.clone())) {
            Ok(mut lease) => {
                lease["spec"]["renewTime"] = json!(renew);
                lease["spec"]["holderIdentity"] = json!(name);
                lease["spec"]["leaseDurationSeconds"] = json!(LEASE_DURATION_SECONDS);
                let req = Request::new(Method::PUT, path).json(lease.to_string().into_bytes());
                self.client.send(&req).map(|_| ())
            }
            Err(KubeError::NotFound(_)) => {
                let lease = json!({
                    "apiVersion": "coordination.k8s.io/v1",
                    "kind": "Lease",
                    "metadata": {
                        "name": name,
                        "namespace": NODE_LEASE_NAMESPACE,
                        "ownerReferences": [{"apiVersion": "v1", "kind": "Node", "name": name,
                                             "uid": self.node_uid}],
                    },
                    "spec": {"holderIdentity": name,
                             "leaseDurationSeconds": LEASE_DURATION_SECONDS,
                             "renewTime": renew},
                });
                let req = Request::new(
                    Method::POST,
                    format!(
                        "/apis/coordination.k8s.io/v1/namespaces/{NODE_LEASE_NAMESPACE}/leases"
                    ),
                )
                .json(lease.to_string().into_bytes());
                match self.client.send(&req) {
                    Ok(_) | Err(KubeError::AlreadyExists(_)) => Ok(()),
                    Err(e) => Err(e),
                }
            }
            Err(e) => Err(e),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_registered_node_carries_its_taints_and_labels_and_no_pod_cidr() {
        let spec = NodeSpec {
            name: "kubegate-node-0".into(),
            kubelet_port: 10250,
            pod_cidr: "127.244.0.0/16".into(),
            taints: vec![super::super::args::Taint {
                key: "kubegate.test/node".into(),
                value: "sim".into(),
                effect: "NoSchedule".into(),
            }],
            labels: vec![("kubegate.test/node".into(), "sim".into())],
            facts: HostFacts::default(),
            capacity: vec![("cpu".into(), "64".into())],
        };
        let n = spec.object();
        assert_eq!(n["metadata"]["name"], "kubegate-node-0");
        assert_eq!(
            n["metadata"]["labels"]["kubernetes.io/hostname"],
            "kubegate-node-0"
        );
        assert_eq!(n["metadata"]["labels"]["kubegate.test/node"], "sim");
        assert_eq!(
            n["spec"]["taints"],
            json!([{"key": "kubegate.test/node", "value": "sim", "effect": "NoSchedule"}])
        );
        assert!(n["spec"].get("podCIDR").is_none());
        assert_eq!(n["status"]["capacity"]["cpu"], "64");
        assert_eq!(n["status"]["allocatable"]["cpu"], "64");
        assert_eq!(
            n["status"]["daemonEndpoints"]["kubeletEndpoint"]["Port"],
            10250
        );
        assert_eq!(n["status"]["addresses"][1]["address"], "kubegate-node-0");
    }
}
