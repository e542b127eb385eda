//! Two backends for one test body (docs/control-plane.md#two-backends): the
//! sim this test starts, and — when the run has one — the real control
//! plane `scripts/control-plane.sh` started (`KUBEGATE_REAL_KUBECONFIG`
//! names its admin kubeconfig). A body gets a [`Backend`]: a client and a
//! namespace of its own, so tests share the real plane without meeting.
//!
//! [`two_backends!`] makes a body two tests, `NAME::sim` and `NAME::real`,
//! so a failure names the backend. Without a real plane `NAME::real` says
//! it was skipped and why on stderr; with `KUBEGATE_REAL_REQUIRED=1` (CI on
//! a machine that built the plane) a missing plane fails it instead, so
//! nothing passes silently where the plane should be.
//!
//! [`Backend::real_on_sim_node`] and [`on_sim_node`] give a body a
//! namespace of the real plane whose pods go to the sim node
//! (`kubegate sim node`, `KUBEGATE_REAL_SIM_NODE`) instead of kwok's:
//! docs/control-plane.md#the-sim-node.

use super::{wait_for, SimProc};
use kubegate::kube::client::rest::Request;
use kubegate::kube::client::{Api, Client, DeleteParams, KubeError, Namespace};
use kubegate::kube::config::{load, LoadOptions};
use kubegate::kube::meta::ObjectMeta;
use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

/// Which server a [`Backend`] talks to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    Sim,
    Real,
}

/// A server, a client for it, and a namespace of this test's own.
pub struct Backend {
    pub kind: Kind,
    pub client: Client,
    /// This test's namespace, created for it (`default` belongs to no
    /// test on the real plane).
    pub ns: String,
    /// The admin kubeconfig (for kubectl).
    pub kubeconfig: PathBuf,
    /// The sim, for a sim backend (stopped on drop).
    pub sim: Option<SimProc>,
}

static SEQ: AtomicU64 = AtomicU64::new(0);

/// A namespace name unique to this process and test: `t-<tag>-<pid>-<n>`,
/// cut to the 63 characters a DNS label allows.
fn unique_ns(tag: &str) -> String {
    let tag: String = tag
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() {
                c.to_ascii_lowercase()
            } else {
                '-'
            }
        })
        .collect();
    let suffix = format!(
        "-{}-{}",
        std::process::id(),
        SEQ.fetch_add(1, Ordering::Relaxed)
    );
    let keep = 63 - 2 - suffix.len();
    let tag = tag.get(..tag.len().min(keep)).unwrap_or(&tag);
    format!("t-{}{suffix}", tag.trim_end_matches('-'))
}

impl Backend {
    /// A sim started for this test, with a namespace of its own.
    pub fn sim(tag: &str) -> Backend {
        let sim = SimProc::start(&["--tls"]);
        let client = Client::new(sim.connection()).expect("client");
        let kubeconfig = sim.kubeconfig.clone();
        let b = Backend {
            kind: Kind::Sim,
            client,
            ns: unique_ns(tag),
            kubeconfig,
            sim: Some(sim),
        };
        b.create_namespace(None);
        b
    }

    /// The run's real control plane with a namespace for this test, or
    /// why there is none (`KUBEGATE_REAL_KUBECONFIG` unset).
    pub fn real(tag: &str) -> Result<Backend, String> {
        Self::real_with(tag, None)
    }

    /// The run's real control plane with a namespace for this test whose
    /// pods run on the sim node: the namespace carries the two annotations
    /// ([`sim_node_annotations`]) that make the API server give each pod
    /// the sim node's selector and a toleration of its taint. `Err` says
    /// why not: no real plane, or one started without the sim node
    /// (`KUBEGATE_REAL_SIM_NODE` empty or unset).
    #[allow(dead_code)]
    pub fn real_on_sim_node(tag: &str) -> Result<Backend, String> {
        let node = std::env::var("KUBEGATE_REAL_SIM_NODE").unwrap_or_default();
        if node.is_empty() {
            return Err(
                "KUBEGATE_REAL_SIM_NODE is empty or unset: no sim node in this run \
                 (scripts/control-plane.sh start with KUBEGATE_CP_SIM_NODE=0, no plane, \
                 or a plane older than the sim node; docs/control-plane.md#the-sim-node)"
                    .into(),
            );
        }
        Self::real_with(tag, Some(sim_node_annotations()))
    }

    fn real_with(
        tag: &str,
        annotations: Option<BTreeMap<String, String>>,
    ) -> Result<Backend, String> {
        let Some(path) = std::env::var_os("KUBEGATE_REAL_KUBECONFIG") else {
            return Err(
                "KUBEGATE_REAL_KUBECONFIG is not set: no real control plane in this run \
                        (scripts/control-plane.sh; docs/control-plane.md)"
                    .into(),
            );
        };
        let kubeconfig = PathBuf::from(path);
        let opts = LoadOptions {
            kubeconfig: Some(kubeconfig.clone()),
            ..LoadOptions::default()
        };
        let conn = load(&opts).map_err(|e| format!("{}: {e}", kubeconfig.display()))?;
        let client = Client::new(conn).map_err(|e| e.to_string())?;
        let b = Backend {
            kind: Kind::Real,
            client,
            ns: unique_ns(tag),
            kubeconfig,
            sim: None,
        };
        b.create_namespace(annotations);
        Ok(b)
    }

    /// Creates this test's namespace and waits for what the real plane's
    /// controller-manager adds to every namespace a moment later: the
    /// `default` ServiceAccount (a pod create is refused until it exists)
    /// and the `kube-root-ca.crt` ConfigMap (so it never turns up in the
    /// middle of a test's watch). The sim publishes no `kube-root-ca.crt`
    /// (docs/sim.md); tests that list ConfigMaps leave it out.
    fn create_namespace(&self, annotations: Option<BTreeMap<String, String>>) {
        Api::<Namespace>::all(&self.client)
            .create(&Namespace {
                metadata: ObjectMeta {
                    name: Some(self.ns.clone()),
                    labels: Some([("kubegate.dev/test".to_string(), "true".to_string())].into()),
                    annotations,
                    ..ObjectMeta::default()
                },
                ..Namespace::default()
            })
            .expect("create the test's namespace");
        if self.kind != Kind::Real {
            return;
        }
        for what in ["serviceaccounts/default", "configmaps/kube-root-ca.crt"] {
            let path = format!("/api/v1/namespaces/{}/{what}", self.ns);
            wait_for(what, Duration::from_secs(30), || {
                match self.client.send(&Request::get(path.clone())) {
                    Ok(_) => Some(()),
                    Err(KubeError::NotFound(_)) => None,
                    Err(e) => panic!("reading {what}: {e}"),
                }
            });
        }
    }

    /// `kubectl` for this backend, as the admin: the PATH's for the sim
    /// (the minor it reports), the one built beside the real plane
    /// (`KUBEGATE_REAL_KUBECTL`, its own version) for the real one.
    #[allow(dead_code)]
    pub fn kubectl(&self) -> std::process::Command {
        let bin = match self.kind {
            Kind::Real => std::env::var_os("KUBEGATE_REAL_KUBECTL"),
            Kind::Sim => None,
        }
        .unwrap_or_else(|| "kubectl".into());
        let mut c = std::process::Command::new(bin);
        c.arg("--kubeconfig")
            .arg(&self.kubeconfig)
            .arg("--request-timeout=60s");
        c
    }
}

impl Drop for Backend {
    fn drop(&mut self) {
        if self.kind == Kind::Real {
            // Best effort: the plane is per run, and a namespace left behind
            // only costs that run.
            let _ = Api::<Namespace>::all(&self.client).delete(&self.ns, &DeleteParams::default());
        }
    }
}

/// Runs `body` against the real plane, or says on stderr why it cannot
/// (failing instead under `KUBEGATE_REAL_REQUIRED=1`).
pub fn on_real(tag: &str, body: impl FnOnce(&Backend)) {
    match Backend::real(tag) {
        Ok(b) => body(&b),
        Err(why) if std::env::var("KUBEGATE_REAL_REQUIRED").as_deref() == Ok("1") => {
            panic!("the real control plane is required here: {why}")
        }
        Err(why) => eprintln!("{tag}: real backend skipped: {why}"),
    }
}

/// The namespace annotations that send a namespace's pods to the sim node
/// (the API server's PodNodeSelector and PodTolerationRestriction admission
/// plugins read them at each pod create): its label as the node selector,
/// and a toleration of its taint. From `KUBEGATE_REAL_SIM_NODE_LABEL` and
/// `_TAINT` in DIR/env, else what scripts/control-plane.sh sets
/// (`kubegate.test/node=sim`, `kubegate.test/node=sim:NoSchedule`).
#[allow(dead_code)]
pub fn sim_node_annotations() -> BTreeMap<String, String> {
    let var = |name: &str, default: &str| {
        std::env::var(name)
            .ok()
            .filter(|v| !v.is_empty())
            .unwrap_or_else(|| default.to_string())
    };
    let label = var("KUBEGATE_REAL_SIM_NODE_LABEL", "kubegate.test/node=sim");
    let taint = var(
        "KUBEGATE_REAL_SIM_NODE_TAINT",
        "kubegate.test/node=sim:NoSchedule",
    );
    // KEY=VALUE:EFFECT, as kubelet's --register-with-taints takes it.
    let (kv, effect) = taint.rsplit_once(':').unwrap_or_else(|| {
        panic!("KUBEGATE_REAL_SIM_NODE_TAINT {taint:?} is not KEY=VALUE:EFFECT")
    });
    let (key, value) = kv.split_once('=').unwrap_or((kv, ""));
    let toleration = serde_json::json!([{
        "key": key, "operator": "Equal", "value": value, "effect": effect
    }]);
    BTreeMap::from([
        (
            "scheduler.alpha.kubernetes.io/node-selector".to_string(),
            label,
        ),
        (
            "scheduler.alpha.kubernetes.io/defaultTolerations".to_string(),
            toleration.to_string(),
        ),
    ])
}

/// What every pod IP of the sim node starts with (`127.B.`): its `/16`
/// block from `KUBEGATE_REAL_SIM_NODE_CIDR` in DIR/env (a second plane on
/// one host moves it), else scripts/control-plane.sh's 127.244.0.0/16.
#[allow(dead_code)]
pub fn sim_node_ip_prefix() -> String {
    let cidr = std::env::var("KUBEGATE_REAL_SIM_NODE_CIDR")
        .ok()
        .filter(|v| !v.is_empty())
        .unwrap_or_else(|| "127.244.0.0/16".to_string());
    let octets: Vec<&str> = cidr.split('.').take(2).collect();
    format!("{}.", octets.join("."))
}

/// Runs `body` on the real plane in a namespace whose pods go to the sim
/// node ([`Backend::real_on_sim_node`]), or says on stderr why it cannot.
/// Under `KUBEGATE_REAL_REQUIRED=1` a missing sim node fails instead,
/// unless the plane says it was started without one on purpose
/// (`KUBEGATE_REAL_SIM_NODE` set and empty: `KUBEGATE_CP_SIM_NODE=0`).
#[allow(dead_code)]
pub fn on_sim_node(tag: &str, body: impl FnOnce(&Backend)) {
    match Backend::real_on_sim_node(tag) {
        Ok(b) => body(&b),
        Err(why)
            if std::env::var("KUBEGATE_REAL_REQUIRED").as_deref() == Ok("1")
                && std::env::var_os("KUBEGATE_REAL_SIM_NODE").is_none_or(|v| !v.is_empty()) =>
        {
            panic!("the real control plane's sim node is required here: {why}")
        }
        Err(why) => eprintln!("{tag}: sim node backend skipped: {why}"),
    }
}

/// Aborts the test binary if the guard is not dropped within `secs`
/// (`common::bench::watchdog`, named for a test).
pub fn watchdog(secs: u64) -> crossbeam_channel::Sender<()> {
    super::bench::watchdog("a test", secs)
}

/// One test body, two tests: `NAME::sim` and `NAME::real`
/// ([`on_real`]), each under a watchdog of `secs`.
#[macro_export]
macro_rules! two_backends {
    ($name:ident, $secs:expr) => {
        mod $name {
            #[test]
            fn sim() {
                let _w = $crate::common::backend::watchdog($secs);
                let b = $crate::common::backend::Backend::sim(stringify!($name));
                super::$name(&b);
            }
            #[test]
            fn real() {
                let _w = $crate::common::backend::watchdog($secs);
                $crate::common::backend::on_real(stringify!($name), super::$name);
            }
        }
    };
}
