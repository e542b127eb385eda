//! The sim's one Node, `sim-node`, as its kubelet registers and keeps it
//! (docs/sim.md#nodes): the host's capacity and identity, the conditions a
//! healthy kubelet reports, its addresses, and the node Lease in
//! `kube-node-lease` it renews.
//!
//! The kubelet ([`super::kubelet::Kubelet::register_node`]) registers the
//! Node once the API server's port is known, and its watcher thread calls
//! [`NodeAgent::tick`]: every 10 s the Lease is renewed (and the Node, the
//! Lease or its namespace made again when deleted), every 5 minutes the
//! conditions' `lastHeartbeatTime` moves, as a kubelet's
//! `nodeStatusReportFrequency` has it when nothing else changed.

use super::kubelet::{HOST_IP, NODE_NAME};
use super::resources::Resource;
use super::store::{Store, StoreError};
use crate::kube::time::now_rfc3339;
use serde_json::{json, Value};
use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// Where every Node's heartbeat Lease lives.
pub const NODE_LEASE_NAMESPACE: &str = "kube-node-lease";
/// The kubelet's `nodeLeaseDurationSeconds` default.
const LEASE_DURATION_SECONDS: i64 = 40;
/// A kubelet renews its Lease every quarter of its duration.
const LEASE_RENEW: Duration = Duration::from_secs(10);
/// `nodeStatusReportFrequency`: how often an unchanged status is written.
const STATUS_REPORT: Duration = Duration::from_secs(300);
/// The taint the API server's TaintNodesByCondition plugin puts on every
/// new Node, which the node-lifecycle controller lifts once it is Ready.
pub const NOT_READY_TAINT: &str = "node.kubernetes.io/not-ready";
/// Pods the Node takes: the sim's scale target (docs/sim.md), above the
/// kubelet's default of 110.
const MAX_PODS: u32 = 5_000;
/// The kubelet's default hard eviction thresholds, which allocatable
/// leaves out: `memory.available<100Mi`, `nodefs.available<10%`.
const EVICTION_MEMORY_KIB: u64 = 100 * 1024;

/// What the Node says about the host, read once at registration.
#[derive(Debug, Clone, Default)]
pub struct HostFacts {
    pub cpus: usize,
    pub memory_kib: u64,
    pub storage_kib: u64,
    pub machine_id: String,
    pub boot_id: String,
    pub kernel: String,
    pub os_image: String,
}

fn read_trimmed(path: &str) -> String {
    std::fs::read_to_string(path)
        .map(|s| s.trim().to_string())
        .unwrap_or_default()
}

/// `MemTotal` of `/proc/meminfo`, in KiB (0 when unreadable).
fn mem_total_kib() -> u64 {
    std::fs::read_to_string("/proc/meminfo")
        .unwrap_or_default()
        .lines()
        .find_map(|l| l.strip_prefix("MemTotal:"))
        .and_then(|rest| rest.trim().trim_end_matches("kB").trim().parse().ok())
        .unwrap_or(0)
}

/// `PRETTY_NAME` of `/etc/os-release` (what a kubelet reports as osImage).
fn os_image() -> String {
    std::fs::read_to_string("/etc/os-release")
        .unwrap_or_default()
        .lines()
        .find_map(|l| l.strip_prefix("PRETTY_NAME="))
        .map(|v| v.trim().trim_matches('"').to_string())
        .unwrap_or_default()
}

impl HostFacts {
    /// The host's facts; `storage` is the folder pods write under (its
    /// file system is the Node's `ephemeral-storage`). A fact that cannot
    /// be read is empty or zero, never an error.
    pub fn read(storage: &Path) -> HostFacts {
        let storage_kib = rustix::fs::statvfs(storage)
            .map(|s| s.f_blocks.saturating_mul(s.f_frsize) / 1024)
            .unwrap_or(0);
        HostFacts {
            cpus: std::thread::available_parallelism().map_or(1, |n| n.get()),
            memory_kib: mem_total_kib(),
            storage_kib,
            machine_id: read_trimmed("/etc/machine-id"),
            boot_id: read_trimmed("/proc/sys/kernel/random/boot_id"),
            kernel: read_trimmed("/proc/sys/kernel/osrelease"),
            os_image: os_image(),
        }
    }
}

/// Go's name for the machine's architecture (`GOARCH`).
fn go_arch() -> &'static str {
    match std::env::consts::ARCH {
        "x86_64" => "amd64",
        "aarch64" => "arm64",
        "x86" => "386",
        "powerpc64" => "ppc64le",
        other => other,
    }
}

fn condition(ty: &str, status: &str, reason: &str, message: &str, now: &str) -> Value {
    json!({"type": ty, "status": status, "lastHeartbeatTime": now,
           "lastTransitionTime": now, "reason": reason, "message": message})
}

/// The Node as the sim's kubelet registers it: `kubelet_port` is where
/// the node's API is served (the sim's own API server: the kubelet is in
/// it), `pod_cidr` the block its pod IPs come from.
pub fn node_object(name: &str, facts: &HostFacts, kubelet_port: u16, pod_cidr: &str) -> Value {
    let now = now_rfc3339();
    let arch = go_arch();
    let capacity = json!({
        "cpu": facts.cpus.to_string(),
        "ephemeral-storage": format!("{}Ki", facts.storage_kib),
        "hugepages-1Gi": "0",
        "hugepages-2Mi": "0",
        "memory": format!("{}Ki", facts.memory_kib),
        "pods": MAX_PODS.to_string(),
    });
    let allocatable = json!({
        "cpu": facts.cpus.to_string(),
        "ephemeral-storage": format!("{}Ki", facts.storage_kib / 10 * 9),
        "hugepages-1Gi": "0",
        "hugepages-2Mi": "0",
        "memory": format!("{}Ki", facts.memory_kib.saturating_sub(EVICTION_MEMORY_KIB)),
        "pods": MAX_PODS.to_string(),
    });
    json!({
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {
            "name": name,
            "labels": {
                "beta.kubernetes.io/arch": arch,
                "beta.kubernetes.io/os": "linux",
                "kubernetes.io/arch": arch,
                "kubernetes.io/hostname": name,
                "kubernetes.io/os": "linux",
            },
            "annotations": {
                "node.alpha.kubernetes.io/ttl": "0",
                "volumes.kubernetes.io/controller-managed-attach-detach": "true",
            },
        },
        "spec": {"podCIDR": pod_cidr, "podCIDRs": [pod_cidr]},
        "status": {
            "capacity": capacity,
            "allocatable": allocatable,
            "conditions": [
                condition("MemoryPressure", "False", "KubeletHasSufficientMemory",
                          "kubelet has sufficient memory available", &now),
                condition("DiskPressure", "False", "KubeletHasNoDiskPressure",
                          "kubelet has no disk pressure", &now),
                condition("PIDPressure", "False", "KubeletHasSufficientPID",
                          "kubelet has sufficient PID available", &now),
                condition("Ready", "True", "KubeletReady",
                          "kubelet is posting ready status", &now),
            ],
            "addresses": [
                {"type": "InternalIP", "address": HOST_IP},
                {"type": "Hostname", "address": name},
            ],
            "daemonEndpoints": {"kubeletEndpoint": {"Port": kubelet_port}},
            "nodeInfo": {
                "machineID": facts.machine_id,
                "systemUUID": "",
                "bootID": facts.boot_id,
                "kernelVersion": facts.kernel,
                "osImage": facts.os_image,
                "containerRuntimeVersion": format!("kubegate-sim://{}", env!("CARGO_PKG_VERSION")),
                "kubeletVersion": super::discovery::version()["gitVersion"],
                "kubeProxyVersion": "",
                "operatingSystem": "linux",
                "architecture": arch,
            },
        },
    })
}

/// The kubelet's side of its Node: registration, the Lease, heartbeats.
pub struct NodeAgent {
    store: Arc<Store>,
    node: Value,
    next_lease: Instant,
    next_status: Instant,
}

impl NodeAgent {
    /// An agent for `node` ([`node_object`]); nothing is written until
    /// [`NodeAgent::register`].
    pub fn new(store: Arc<Store>, node: Value) -> NodeAgent {
        let now = Instant::now();
        NodeAgent {
            store,
            node,
            next_lease: now + LEASE_RENEW,
            next_status: now + STATUS_REPORT,
        }
    }

    /// Creates the Node (or brings an existing one's status up to date),
    /// lifts the not-ready taint admission put on it (the node-lifecycle
    /// controller's part once it is Ready), and makes its Lease.
    pub fn register(&mut self) -> Result<(), StoreError> {
        match self.store.create(Resource::Node, "", self.node.clone()) {
            Ok(_) => {}
            Err(StoreError::AlreadyExists { .. }) => {
                let status = self.node["status"].clone();
                self.store
                    .modify(Resource::Node, "", NODE_NAME, &mut |o: &mut Value| {
                        o["status"] = status.clone();
                        Ok(())
                    })?;
            }
            Err(e) => return Err(e),
        }
        self.store
            .modify(Resource::Node, "", NODE_NAME, &mut |o: &mut Value| {
                if let Some(taints) = o["spec"]["taints"].as_array_mut() {
                    taints.retain(|t| t["key"] != NOT_READY_TAINT);
                    if taints.is_empty() {
                        if let Some(spec) = o["spec"].as_object_mut() {
                            spec.remove("taints");
                        }
                    }
                }
                Ok(())
            })?;
        self.renew_lease()
    }

    /// Called often (the kubelet's watcher loop, every 200 ms at most):
    /// does what is due.
    pub fn tick(&mut self) {
        let now = Instant::now();
        if now >= self.next_lease {
            self.next_lease = now + LEASE_RENEW;
            let r = match self.store.get(Resource::Node, "", NODE_NAME) {
                Err(StoreError::NotFound { .. }) => self.register(),
                _ => self.renew_lease(),
            };
            if let Err(e) = r {
                log::warn!("kubelet: node {NODE_NAME}: {e}");
            }
        }
        if now >= self.next_status {
            self.next_status = now + STATUS_REPORT;
            let stamp = now_rfc3339();
            let r = self
                .store
                .modify(Resource::Node, "", NODE_NAME, &mut |o: &mut Value| {
                    for c in o["status"]["conditions"]
                        .as_array_mut()
                        .into_iter()
                        .flatten()
                    {
                        c["lastHeartbeatTime"] = json!(stamp);
                    }
                    Ok(())
                });
            if let Err(e) = r {
                log::warn!("kubelet: status of node {NODE_NAME}: {e}");
            }
        }
    }

    /// Renews the Lease, or makes it (and its namespace) when missing.
    fn renew_lease(&self) -> Result<(), StoreError> {
        let renew = super::apitime::Instant::now().micro();
        match self.store.modify(
            Resource::Lease,
            NODE_LEASE_NAMESPACE,
            NODE_NAME,
            &mut |o: &mut Value| {
                o["spec"]["renewTime"] = json!(renew);
                Ok(())
            },
        ) {
            Ok(_) => return Ok(()),
            Err(StoreError::NotFound { .. }) => {}
            Err(e) => return Err(e),
        }
        let ns = json!({"apiVersion": "v1", "kind": "Namespace",
                        "metadata": {"name": NODE_LEASE_NAMESPACE}});
        match self.store.create(Resource::Namespace, "", ns) {
            Ok(_) | Err(StoreError::AlreadyExists { .. }) => {}
            Err(e) => return Err(e),
        }
        let node = self.store.get(Resource::Node, "", NODE_NAME)?;
        let lease = json!({
            "apiVersion": "coordination.k8s.io/v1",
            "kind": "Lease",
            "metadata": {
                "name": NODE_NAME,
                "ownerReferences": [{"apiVersion": "v1", "kind": "Node", "name": NODE_NAME,
                                     "uid": node["metadata"]["uid"]}],
            },
            "spec": {"holderIdentity": NODE_NAME,
                     "leaseDurationSeconds": LEASE_DURATION_SECONDS,
                     "renewTime": renew},
        });
        match self
            .store
            .create(Resource::Lease, NODE_LEASE_NAMESPACE, lease)
        {
            Ok(_) | Err(StoreError::AlreadyExists { .. }) => Ok(()),
            // The namespace is being deleted: the next tick tries again.
            Err(StoreError::Forbidden { .. }) => Ok(()),
            Err(e) => Err(e),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_node_reads_as_a_kubelets() {
        let facts = HostFacts {
            cpus: 2,
            memory_kib: 1_048_576,
            storage_kib: 1000,
            ..HostFacts::default()
        };
        let n = node_object(NODE_NAME, &facts, 6443, "127.9.0.0/16");
        assert_eq!(n["metadata"]["name"], NODE_NAME);
        assert_eq!(n["status"]["capacity"]["pods"], "5000");
        assert_eq!(n["status"]["allocatable"]["memory"], "946176Ki");
        assert_eq!(n["status"]["allocatable"]["ephemeral-storage"], "900Ki");
        assert_eq!(n["status"]["addresses"][0]["address"], "127.0.0.1");
        assert_eq!(
            n["status"]["daemonEndpoints"]["kubeletEndpoint"]["Port"],
            6443
        );
        let types: Vec<&str> = n["status"]["conditions"]
            .as_array()
            .unwrap()
            .iter()
            .filter_map(|c| c["type"].as_str())
            .collect();
        assert_eq!(
            types,
            ["MemoryPressure", "DiskPressure", "PIDPressure", "Ready"]
        );
    }
}
