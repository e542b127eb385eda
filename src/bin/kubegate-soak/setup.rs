//! The cluster-side set-up and checks: the exec target Deployment, the
//! session pods left, the daemon's metrics.

use crate::args::{Args, Cluster};
use crate::SoakError;
use kubegate::kube::client::rest::Request as KubeRequest;
use kubegate::kube::client::Client;
use kubegate::kube::connection::Connection;
use serde_json::{json, Value};
use std::time::{Duration, Instant};

/// A client of the cluster as its admin: the sim's (no auth), or the real
/// plane's admin kubeconfig.
pub(crate) fn cluster_client(a: &Args) -> Result<Client, SoakError> {
    let conn = match &a.cluster {
        Cluster::Sim(url) => Connection::plain(url),
        Cluster::Real { kubeconfig, .. } => {
            kubegate::kube::config::load(&kubegate::kube::config::LoadOptions {
                kubeconfig: Some(kubeconfig.clone()),
                ..Default::default()
            })
            .map_err(|e| SoakError::Setup(format!("{}: {e}", kubeconfig.display())))?
        }
    };
    Client::new(conn).map_err(|e| SoakError::Setup(format!("cluster client: {e}")))
}

/// The exec target: a Deployment of two idle pods labelled for the
/// workspace; waits until both are ready.
pub(crate) fn ensure_target(a: &Args, sim: &Client) -> Result<(), SoakError> {
    let labels = json!({"app.kubernetes.io/managed-by": "kubegate",
                        "kubegate.dev/workspace-uid": a.uid, "app": a.deployment});
    let dep = json!({
        "apiVersion": "apps/v1", "kind": "Deployment",
        "metadata": {"name": a.deployment, "namespace": a.project, "labels": labels},
        "spec": {"replicas": 2, "selector": {"matchLabels": {"app": a.deployment}},
                 "template": {"metadata": {"labels": {"app": a.deployment}},
                              "spec": {"containers": [{"name": "main", "image": "busybox",
                                 "command": ["sh", "-c", "trap 'exit 0' TERM; while :; do sleep 1; done"]}]}}}
    });
    let path = format!("/apis/apps/v1/namespaces/{}/deployments", a.project);
    let req = KubeRequest::new(ureq::http::Method::POST, path).json(dep.to_string().into_bytes());
    match sim.send_json::<Value>(&req) {
        Ok(_) => {}
        Err(e) if e.to_string().contains("already exists") => {}
        Err(e) => return Err(SoakError::Setup(format!("creating the exec target: {e}"))),
    }
    let get = format!(
        "/apis/apps/v1/namespaces/{}/deployments/{}",
        a.project, a.deployment
    );
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let v: Value = sim
            .send_json(&KubeRequest::get(get.clone()))
            .map_err(|e| SoakError::Io(format!("reading the exec target: {e}")))?;
        if v["status"]["readyReplicas"].as_i64() == Some(2) {
            return Ok(());
        }
        if Instant::now() >= deadline {
            return Err(SoakError::Setup(format!(
                "exec target not ready within 60 s: {}",
                v["status"]
            )));
        }
        std::thread::sleep(Duration::from_millis(100));
    }
}

pub(crate) fn watch_pods(sim: &Client, ns: &str) -> Result<Vec<String>, SoakError> {
    let v: Value = sim
        .send_json(&KubeRequest::get(format!(
            "/api/v1/namespaces/{ns}/pods?labelSelector=kubegate.dev%2Fmode%3Dwatch"
        )))
        .map_err(|e| SoakError::Setup(format!("listing session pods: {e}")))?;
    Ok(v["items"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|p| p["metadata"]["name"].as_str().map(str::to_string))
        .collect())
}

pub(crate) fn metric(text: &str, name: &str) -> Option<i64> {
    text.lines()
        .filter(|l| !l.starts_with('#'))
        .find_map(|l| l.strip_prefix(name)?.strip_prefix(' ')?.trim().parse().ok())
}
