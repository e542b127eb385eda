//! Sim mode (`[cluster] mode = "sim"`): the embedded simulated cluster the
//! daemon starts in its own process, the rule that decides whether its pods
//! may run without their own host users ([`sim_refusal`]), and the demo
//! workspace created in it (docs/config.md#the-example-file): namespace
//! `demo`, Deployment `hello`, labelled for workspace `demo/demo-uid`.
//! Also the warning the published demo token earns at every start.

use std::fmt;
use std::path::{Path, PathBuf};

use serde_json::{json, Value};

use super::daemon::{failed, StartError};
use crate::config::Config;
use crate::kube::client::{Api, Client, Deployment, KubeError, Namespace};
use crate::kube::connection::Connection;
use crate::kube::labels::MANAGED_BY_LABEL;
use crate::sim::cluster::{Sim, SimOptions};

/// The demo workspace the daemon creates in the embedded sim
/// (docs/config.md#the-example-file).
pub const DEMO_PROJECT: &str = "demo";
pub const DEMO_UID: &str = "demo-uid";
pub const DEMO_DEPLOYMENT: &str = "hello";
/// The sim's kubeconfig, inside the state directory (mode 0600).
pub const SIM_KUBECONFIG: &str = "sim.kubeconfig";

/// The published demo token is only accepted where it harms nobody (the
/// config refuses it elsewhere: `Config::check_demo_token`); even there,
/// every start says so.
pub(super) fn warn_demo_token(cfg: &Config) {
    if let Some(name) = cfg.demo_token_principal() {
        log::warn!(
            "principal {name:?} uses the published demo token (config.example.toml): anyone who read the example holds it; it is accepted only in sim mode, as the one principal, on a loopback front door; put the digest of a token of your own in its token_sha256 (docs/deploy.md, \"Principals\")"
        );
    }
}

/// Why the embedded sim's pods would NOT run as their own host users
/// (`None`: they will): `cluster.sim.uid_range = "off"`, or this process
/// lacks the capabilities (docs/sim.md, "Pod users").
pub(super) fn sim_unconfined_reason(cfg: &Config) -> Option<String> {
    if cfg.cluster.sim.uid_range().is_none() {
        return Some("cluster.sim.uid_range is \"off\"".into());
    }
    let missing = crate::sim::runtime::missing_capabilities();
    if missing.is_empty() {
        None
    } else {
        Some(format!("this process lacks {}", missing.join(", ")))
    }
}

/// The decision for sim mode whose pods cannot run as their own users
/// (`why`): every pod then runs as the daemon's user and can read its
/// state (every session record and workspace, the sim's admin kubeconfig,
/// the audit log), so such a daemon may serve one principal at most, and
/// only on loopback. `Some(message)`: refuse to start.
pub fn sim_refusal(why: &str, principals: usize, listen: &str) -> Option<String> {
    let loopback = listen
        .parse::<std::net::SocketAddr>()
        .is_ok_and(|a| a.ip().is_loopback());
    let problem = if principals > 1 {
        format!("{principals} principals are configured")
    } else if !loopback {
        format!("server.listen = {listen:?} is not a loopback address")
    } else {
        return None;
    };
    Some(format!(
        "refusing sim mode: its pods cannot run as their own users ({why}), so each would run as this daemon's user and could read every principal's sessions and workspaces, the sim's admin kubeconfig and the audit log; {problem}. Run the daemon as root (or with CAP_SETUID, CAP_SETGID, CAP_CHOWN, CAP_FOWNER, CAP_DAC_OVERRIDE and CAP_KILL) with cluster.sim.uid_range set, or keep one principal and a loopback server.listen (docs/sim.md, \"Pod users\")"
    ))
}

/// Where the embedded sim's pods' folders go by default: beside the state
/// directory (`/var/lib/kubegate` -> `/var/lib/kubegate-pods`), since pods
/// must reach their folders and the state directory is the daemon's alone.
pub fn default_pods_dir(state_dir: &Path) -> PathBuf {
    match (state_dir.parent(), state_dir.file_name()) {
        (Some(parent), Some(name)) => {
            let mut n = name.to_os_string();
            n.push("-pods");
            parent.join(n)
        }
        _ => state_dir.join("sim").join("pods"),
    }
}

/// Starts the embedded sim on loopback with TLS and a random token; its
/// kubeconfig goes to `<state_dir>/sim.kubeconfig`, its own state to
/// `<state_dir>/sim`, its pods' folders to `cluster.sim.pods_dir`
/// ([`default_pods_dir`]).
pub(super) fn start_sim(cfg: &Config) -> Result<(Sim, Connection), StartError> {
    let state_dir = &cfg.server.state_dir;
    let opts = SimOptions {
        pods_dir: cfg.cluster.sim.pods_dir.clone(),
        default_pods_dir: Some(default_pods_dir(state_dir)),
        uid_range: cfg.cluster.sim.uid_range(),
        listen: std::net::SocketAddr::from(([127, 0, 0, 1], 0)),
        kubeconfig_out: Some(state_dir.join(SIM_KUBECONFIG)),
        tls: true,
        token: Some(crate::token::random_hex()),
        state_dir: Some(state_dir.join("sim")),
        namespaces: cfg.cluster.sim.namespaces.clone(),
        fail_images: cfg.cluster.sim.fail_images.clone(),
        request_log: cfg.cluster.sim.request_log.clone(),
        ..SimOptions::default()
    };
    let sim = Sim::start(opts).map_err(|e| failed(format!("starting the embedded sim: {e}")))?;
    log::info!(
        "embedded sim on {} (kubeconfig {})",
        sim.url,
        state_dir.join(SIM_KUBECONFIG).display()
    );
    let conn = crate::kube::config::from_kubeconfig_str(&sim.kubeconfig, state_dir, None)
        .map_err(|e| failed(format!("the sim's kubeconfig: {e}")))?;
    Ok((sim, conn))
}

/// The demo Deployment: labelled on the Deployment itself with the
/// managed-by and workspace-uid labels of `demo/demo-uid` (docs/exec.md#who-may-exec-where).
pub fn demo_deployment(managed_by: &str, workspace_uid_label: &str) -> Value {
    json!({
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {
            "name": DEMO_DEPLOYMENT,
            "namespace": DEMO_PROJECT,
            "labels": {
                MANAGED_BY_LABEL: managed_by,
                workspace_uid_label: DEMO_UID,
            },
        },
        "spec": {
            "replicas": 1,
            "selector": {"matchLabels": {"app": DEMO_DEPLOYMENT}},
            "template": {
                "metadata": {"labels": {"app": DEMO_DEPLOYMENT}},
                "spec": {
                    // Non-root, with no uid named: the sim gives the pod
                    // its own host uid (docs/sim.md, "Pod users").
                    "securityContext": {"runAsNonRoot": true},
                    "containers": [{
                        "name": "main",
                        "image": "busybox",
                        "command": ["sh", "-c", "trap 'exit 0' TERM; while :; do sleep 1; done"],
                        "securityContext": {
                            "allowPrivilegeEscalation": false,
                            "capabilities": {"drop": ["ALL"]},
                        },
                    }],
                },
            },
        },
    })
}

/// Why the demo workspace could not be created.
#[derive(Debug)]
pub enum SeedError {
    /// The object's JSON does not make a typed object (a bug here).
    Shape(serde_json::Error),
    /// The API server refused to create `what` (other than AlreadyExists).
    Create { what: String, error: KubeError },
}

impl fmt::Display for SeedError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            SeedError::Shape(e) => e.fmt(f),
            SeedError::Create { what, error } => write!(f, "{what}: {error}"),
        }
    }
}

impl std::error::Error for SeedError {}

/// Creates namespace `demo` and Deployment `hello`; AlreadyExists is fine.
pub(super) fn seed_demo(client: &Client, cfg: &Config) -> Result<(), SeedError> {
    let ns: Namespace = serde_json::from_value(json!({
        "apiVersion": "v1",
        "kind": "Namespace",
        "metadata": {"name": DEMO_PROJECT},
    }))
    .map_err(SeedError::Shape)?;
    match Api::<Namespace>::all(client).create(&ns) {
        Ok(_) | Err(KubeError::AlreadyExists(_)) => {}
        Err(error) => {
            return Err(SeedError::Create {
                what: format!("namespace {DEMO_PROJECT}"),
                error,
            })
        }
    }
    let dep: Deployment = serde_json::from_value(demo_deployment(
        &cfg.cluster.managed_by,
        &cfg.exec.workspace_uid_label,
    ))
    .map_err(SeedError::Shape)?;
    match Api::<Deployment>::namespaced(client, DEMO_PROJECT).create(&dep) {
        Ok(_) | Err(KubeError::AlreadyExists(_)) => Ok(()),
        Err(error) => Err(SeedError::Create {
            what: format!("deployment {DEMO_PROJECT}/{DEMO_DEPLOYMENT}"),
            error,
        }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_unconfined_sim_serves_one_local_principal_at_most() {
        let why = "cluster.sim.uid_range is \"off\"";
        assert_eq!(sim_refusal(why, 0, "127.0.0.1:7443"), None);
        assert_eq!(sim_refusal(why, 1, "127.0.0.1:0"), None);
        assert_eq!(sim_refusal(why, 1, "[::1]:7443"), None);
        let m = sim_refusal(why, 2, "127.0.0.1:7443").expect("refused");
        assert!(
            m.contains("2 principals are configured") && m.contains(why),
            "{m}"
        );
        for listen in ["0.0.0.0:7443", "10.0.0.5:7443", "[::]:7443", "nonsense"] {
            let m = sim_refusal(why, 1, listen).expect("refused");
            assert!(m.contains("is not a loopback address"), "{listen}: {m}");
        }
    }

    #[test]
    fn pods_live_beside_the_state_directory() {
        assert_eq!(
            default_pods_dir(Path::new("/var/lib/kubegate")),
            PathBuf::from("/var/lib/kubegate-pods")
        );
        assert_eq!(
            default_pods_dir(Path::new("/etc/kubegate/state")),
            PathBuf::from("/etc/kubegate/state-pods")
        );
    }

    #[test]
    fn the_demo_runs_as_non_root_without_naming_a_uid() {
        let d = demo_deployment("kubegate", "kubegate.dev/workspace-uid");
        let spec = &d["spec"]["template"]["spec"];
        assert_eq!(spec["securityContext"]["runAsNonRoot"], true);
        assert!(spec["securityContext"].get("runAsUser").is_none());
        let c = &spec["containers"][0]["securityContext"];
        assert_eq!(c["allowPrivilegeEscalation"], false);
        assert!(c.get("runAsUser").is_none());
    }

    #[test]
    fn demo_deployment_is_labelled_for_the_demo_workspace() {
        let d = demo_deployment("kubegate", "kubegate.dev/workspace-uid");
        let labels = &d["metadata"]["labels"];
        assert_eq!(labels["app.kubernetes.io/managed-by"], "kubegate");
        assert_eq!(labels["kubegate.dev/workspace-uid"], "demo-uid");
        assert_eq!(d["metadata"]["namespace"], "demo");
        assert_eq!(d["spec"]["replicas"], 1);
        let c = &d["spec"]["template"]["spec"]["containers"][0];
        assert_eq!(c["name"], "main");
        assert_eq!(c["command"][0], "sh");
        let _: Deployment = serde_json::from_value(d).unwrap();
    }
}
