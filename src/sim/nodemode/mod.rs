//! `kubegate sim node`: the sim's kubelet joining a real control plane as
//! Node NAME (docs/sim.md#the-sim-as-a-node). The pods the scheduler binds
//! to it run exactly as the embedded sim runs its own (`sim::kubelet`, the
//! same pod workers and runtime); what differs is the backend under them:
//!
//! - `mirror.rs`: the pods bound to the node, watched on the API server
//!   (field selector `spec.nodeName=NAME`), mirrored into a private
//!   [`Store`]: the kubelet reads and writes that store and never waits on
//!   the network;
//! - `status.rs`: the status manager, sending the kubelet's latest status
//!   per pod upstream (coalesced, retried, written again after an outage)
//!   and the final delete of a pod whose graceful deletion finished;
//! - `events.rs`: the kubelet's Events, sent upstream;
//! - `node_agent.rs`: the Node object and its Lease;
//! - `config.rs`: ConfigMaps and Secrets for env and volumes, read over
//!   HTTP (a moment's 403 after a bind is retried by the pod worker);
//! - `args.rs`: the command line.
//!
//! All of it talks to the API server through the crate's own client
//! (`kube::client`), authenticated by the node's client certificate
//! (CN `system:node:NAME`, O `system:nodes`) from its kubeconfig, so the
//! real Node authorizer and NodeRestriction judge it as a kubelet. The
//! kubelet API the API server calls for exec, attach, logs and
//! port-forward is `sim::kubelet_api`, on TLS.
//!
//! Start-up: the pods' folders of a previous run are removed (their
//! processes died with it; the kubelet finds their pods again and reports
//! their containers lost: `sim::kubelet::worker`), the Node registered, and
//! only then pods taken. Node mode refuses to start where it cannot give
//! each pod its own host user (`runAsUser` and friends are honoured only
//! then; docs/sim.md, "Pod users").

pub mod args;
mod config;
mod events;
mod mirror;
mod node_agent;
mod status;

use crate::exit;
use crate::kube::client::{Client, ClientOptions, RetryPolicy};
use crate::kube::config::{load, LoadOptions};
use crate::sim::faults::Faults;
use crate::sim::kubelet::{Kubelet, KubeletConfig, NodeRole};
use crate::sim::store::{Store, StoreConfig};
use std::sync::Arc;

/// The deadline of a ConfigMap or Secret read by a pod's thread.
const CONFIG_READ_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(5);

/// `kubegate sim node ARGV…`: returns the exit code.
pub fn node_main(argv: &[String], usage: &str) -> i32 {
    let opts = match args::parse(argv) {
        Ok(o) => o,
        Err(e) => return exit::usage_error(&e, usage),
    };
    let mut signals = match crate::signals::install(
        "kubegate",
        &[signal_hook::consts::SIGINT, signal_hook::consts::SIGTERM],
    ) {
        Ok(s) => s,
        Err(code) => return code,
    };
    let node = match Node::start(opts) {
        Ok(n) => n,
        Err(e) => {
            eprintln!("kubegate: sim node: {e}");
            return exit::FAILURE;
        }
    };
    if let Some(sig) = signals.forever().next() {
        log::info!("signal {sig}: stopping node {}", node.name);
    }
    node.shutdown();
    exit::SUCCESS
}

/// A running node.
pub struct Node {
    pub name: String,
    kubelet: Arc<Kubelet>,
    api: crate::sim::kubelet_api::KubeletApi,
    agent: node_agent::NodeAgent,
    mirror: mirror::Mirror,
    status: status::StatusManager,
    events: events::EventSender,
}

impl Node {
    /// Starts the node: checks, the kubelet API, registration, then pods.
    pub fn start(opts: args::NodeOptions) -> Result<Node, String> {
        let missing = crate::sim::runtime::missing_capabilities();
        if !missing.is_empty() {
            return Err(format!(
                "a node gives every pod its own host user and cannot here (missing {}): run it as root (docs/sim.md, \"Pod users\")",
                missing.join(", ")
            ));
        }
        let conn = load(&LoadOptions {
            kubeconfig: Some(opts.kubeconfig.clone()),
            ..LoadOptions::default()
        })
        .map_err(|e| format!("{}: {e}", opts.kubeconfig.display()))?;
        let client = Client::with_options(conn.clone(), ClientOptions::default())
            .map_err(|e| format!("{}: {e}", opts.kubeconfig.display()))?;
        // Pod threads read ConfigMaps and Secrets themselves and try again
        // on their own schedule: a short deadline and no retries, so an
        // outage holds a pod's thread for seconds, not minutes.
        let config_client = Client::with_options(
            conn,
            ClientOptions {
                timeout: CONFIG_READ_TIMEOUT,
                connect_timeout: CONFIG_READ_TIMEOUT,
                retry: RetryPolicy::none(),
            },
        )
        .map_err(|e| format!("{}: {e}", opts.kubeconfig.display()))?;
        prepare_state_dir(&opts.state_dir)?;

        let name: &'static str = Box::leak(opts.name.clone().into_boxed_str());
        let store = Store::new(StoreConfig {
            service_accounts: false,
            ..StoreConfig::default()
        });
        let kubelet = Kubelet::start(KubeletConfig {
            store: store.clone(),
            faults: Faults::new(),
            state_dir: opts.state_dir.clone(),
            fail_images: Vec::new(),
            // Configured, so a folder pods cannot reach is an error at
            // start rather than a temporary folder a SIGKILL would leave.
            pods_dir: Some(opts.state_dir.join("pods")),
            default_pods_dir: None,
            uid_range: Some(opts.uid_range),
            role: NodeRole {
                name,
                pod_block: Some(opts.pod_block),
                binds: false,
                config: Some(Arc::new(config::RemoteConfig::new(config_client))),
            },
        })
        .map_err(|e| format!("starting the kubelet: {e}"))?;
        let api = crate::sim::kubelet_api::KubeletApi::start(
            kubelet.clone(),
            crate::sim::kubelet_api::KubeletApiConfig {
                listen: opts.listen,
                cert_pem: opts.tls_cert_pem.clone(),
                key_pem: opts.tls_key_pem.clone(),
                client_ca_pem: opts.client_ca_pem.clone(),
            },
        )
        .map_err(|e| format!("the kubelet API on {}: {e}", opts.listen))?;
        let spec = node_agent::NodeSpec {
            name: opts.name.clone(),
            kubelet_port: api.port(),
            pod_cidr: format!("127.{}.0.0/16", opts.pod_block),
            taints: opts.taints.clone(),
            labels: opts.labels.clone(),
            facts: crate::sim::node::HostFacts::read(&opts.state_dir),
            capacity: opts.capacity.clone(),
        };
        let agent = node_agent::NodeAgent::start(client.clone(), spec)
            .map_err(|e| format!("registering Node {}: {e}", opts.name))?;
        let gone = Arc::new(mirror::Gone::default());
        let io = |what: &str, e: std::io::Error| format!("starting {what}: {e}");
        let status = status::StatusManager::start(client.clone(), store.clone(), gone.clone())
            .map_err(|e| io("the status manager", e))?;
        let events = events::EventSender::start(client.clone(), store.clone())
            .map_err(|e| io("events", e))?;
        let mirror = mirror::Mirror::start(&client, &opts.name, store, gone)
            .map_err(|e| io("the pod watch", e))?;
        log::info!(
            "node {}: kubelet API on {}, pods in 127.{}.0.0/16",
            opts.name,
            opts.listen.ip().to_string() + ":" + &api.port().to_string(),
            opts.pod_block
        );
        Ok(Node {
            name: opts.name,
            kubelet,
            api,
            agent,
            mirror,
            status,
            events,
        })
    }

    /// Stops taking pods, kills every process (a kubelet's own stop leaves
    /// containers running; the sim's cannot outlive it), stops the threads.
    /// The Node and its pods stay on the API server: the node-lifecycle
    /// controller notices the silence.
    pub fn shutdown(mut self) {
        let (patches, deletes) = self.status.counts();
        log::info!(
            "node {}: stopping after {} Lease renewals, {patches} pod status writes, {deletes} final deletes, {} Events dropped; {} pods' news not sent",
            self.name,
            self.agent.renewals.load(std::sync::atomic::Ordering::Relaxed),
            self.events.dropped.load(std::sync::atomic::Ordering::Relaxed),
            self.status.backlog(),
        );
        self.mirror.stop();
        self.agent.stop();
        self.kubelet.shutdown();
        self.events.stop();
        self.status.stop();
        self.api.shutdown();
    }
}

/// The state folder: made 0711 if missing (pod users must pass through it
/// to their folders under `pods/`; nothing else in it is theirs to read);
/// what a previous run left in it (pods' folders, the runtime's) is
/// removed, since its processes are gone.
fn prepare_state_dir(dir: &std::path::Path) -> Result<(), String> {
    use std::os::unix::fs::DirBuilderExt;
    std::fs::DirBuilder::new()
        .recursive(true)
        .mode(0o711)
        .create(dir)
        .map_err(|e| format!("--state-dir {}: {e}", dir.display()))?;
    for sub in ["pods", "runtime"] {
        let p = dir.join(sub);
        match std::fs::remove_dir_all(&p) {
            Ok(()) => log::info!("node: removed {} of a previous run", p.display()),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            Err(e) => return Err(format!("removing {}: {e}", p.display())),
        }
    }
    Ok(())
}
