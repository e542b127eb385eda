//! Target resolution (docs/exec.md#resolving-the-target): the Deployment, its
//! labels, then a running pod it controls through a ReplicaSet, checked by
//! UIDs at each step. [`check_deployment`] and [`choose_pod`] are the
//! sans-IO rules; [`resolve`] makes the three API calls (GET Deployment,
//! LIST pods and ReplicaSets by the Deployment's selector).

use super::frames::Target;
use super::validate::ExecSpec;
use crate::api::{ApiError, Code};
use crate::kube::client::{Api, Client, Deployment, KubeError, ListParams, Pod, ReplicaSet};
use crate::kube::labels::MANAGED_BY_LABEL;
use std::collections::{BTreeMap, HashMap};

/// What the workspace check needs to know about the labels.
#[derive(Debug, Clone)]
pub struct Ownership {
    /// Value of `app.kubernetes.io/managed-by`.
    pub managed_by: String,
    /// Key of the workspace-uid label.
    pub uid_label: String,
}

/// The parts of a Deployment the pod choice needs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Checked {
    pub name: String,
    pub uid: String,
    pub selector: BTreeMap<String, String>,
    pub container: String,
}

fn not_found(deployment: &str) -> ApiError {
    ApiError::new(
        Code::ExecTargetNotFound,
        format!("deployment {deployment} was not found"),
    )
}

/// Steps 1-4: the Deployment exists under the asked name, belongs to the
/// workspace, has a UID and a selector, and a container to exec into.
pub fn check_deployment(
    spec: &ExecSpec,
    own: &Ownership,
    dep: Option<&Deployment>,
) -> Result<Checked, ApiError> {
    let Some(dep) = dep else {
        return Err(not_found(&spec.deployment));
    };
    if dep.metadata.name.as_deref() != Some(spec.deployment.as_str()) {
        return Err(not_found(&spec.deployment));
    }
    let labels = dep.metadata.labels.clone().unwrap_or_default();
    if labels.get(MANAGED_BY_LABEL) != Some(&own.managed_by)
        || labels.get(&own.uid_label) != Some(&spec.uid)
    {
        return Err(ApiError::new(
            Code::ExecTargetForbidden,
            format!(
                "deployment {} is not owned by this workspace",
                spec.deployment
            ),
        ));
    }
    let uid = dep.metadata.uid.clone().unwrap_or_default();
    let spec_ = dep.spec.clone().unwrap_or_default();
    let selector = spec_.selector.match_labels.clone().unwrap_or_default();
    if uid.is_empty() || selector.is_empty() {
        return Err(ApiError::new(
            Code::ExecTargetNotReady,
            format!("deployment {} has no usable pod selector", spec.deployment),
        ));
    }
    let first = spec_
        .template
        .spec
        .as_ref()
        .and_then(|s| s.containers.first())
        .map(|c| c.name.clone());
    let Some(container) = spec.container.clone().or(first) else {
        return Err(ApiError::new(
            Code::ExecTargetNotReady,
            format!("deployment {} has no container", spec.deployment),
        ));
    };
    Ok(Checked {
        name: spec.deployment.clone(),
        uid,
        selector,
        container,
    })
}

/// The Deployment UID controlling `pod` through a ReplicaSet, given the
/// ReplicaSets by UID (`rs_owner`: RS uid -> its controlling Deployment uid).
fn deployment_uid_of(pod: &Pod, rs_owner: &HashMap<String, String>) -> Option<String> {
    let r = pod.metadata.controller_ref()?;
    if r.kind != "ReplicaSet" {
        return None;
    }
    rs_owner.get(&r.uid).cloned()
}

fn container_state(pod: &Pod, name: &str) -> Option<(bool, bool)> {
    let st = pod.status.as_ref()?.container_statuses.as_ref()?;
    let c = st.iter().find(|c| c.name == name)?;
    let running = c.state.as_ref().is_some_and(|s| s.running.is_some());
    Some((running, c.ready))
}

/// Steps 5-7: among `pods`, those Running, not being deleted, controlled by
/// this Deployment, whose container runs; ready first, then by name.
pub fn choose_pod(
    spec: &ExecSpec,
    dep: &Checked,
    namespace: &str,
    pods: &[Pod],
    rs_owner: &HashMap<String, String>,
) -> Result<Target, ApiError> {
    let owned_running: Vec<&Pod> = pods
        .iter()
        .filter(|p| {
            p.status.as_ref().and_then(|s| s.phase.as_deref()) == Some("Running")
                && p.metadata.deletion_timestamp.is_none()
                && deployment_uid_of(p, rs_owner).as_deref() == Some(dep.uid.as_str())
                && !p.metadata.name().is_empty()
                && p.metadata.uid.as_deref().is_some_and(|u| !u.is_empty())
        })
        .collect();
    let mut candidates: Vec<(&Pod, bool)> = owned_running
        .iter()
        .filter_map(|p| match container_state(p, &dep.container) {
            Some((true, ready)) => Some((*p, ready)),
            _ => None,
        })
        .collect();
    candidates.sort_by(|(a, ra), (b, rb)| {
        rb.cmp(ra)
            .then_with(|| a.metadata.name().cmp(b.metadata.name()))
    });
    match candidates.first() {
        Some((pod, _)) => Ok(Target {
            namespace: namespace.to_string(),
            deployment: dep.name.clone(),
            deployment_uid: dep.uid.clone(),
            pod: pod.metadata.name().to_string(),
            pod_uid: pod.metadata.uid.clone().unwrap_or_default(),
            container: dep.container.clone(),
        }),
        None if spec.container.is_some() && !owned_running.is_empty() => Err(ApiError::new(
            Code::ExecTargetNotFound,
            format!(
                "container {} was not found or is not running in a pod of deployment {}",
                dep.container, dep.name
            ),
        )),
        None => Err(ApiError::new(
            Code::ExecTargetNotReady,
            format!(
                "deployment {} has no running pod with container {}",
                dep.name, dep.container
            ),
        )),
    }
}

/// A cluster error while resolving: messages from Kubernetes are passed on
/// (they name objects, never credentials); the rest says what failed.
///
/// A 403 is the cluster's RBAC refusing (with impersonation, refusing the
/// principal): `EXEC_TARGET_FORBIDDEN` with the cluster's own message, so
/// the caller reads who was refused what.
pub fn cluster_error(what: &str, e: &KubeError) -> ApiError {
    match e {
        KubeError::Forbidden(status) => ApiError::new(
            Code::ExecTargetForbidden,
            format!("{what}: {}", status.message),
        ),
        _ => ApiError::new(Code::ExecFailed, format!("{what}: {e}")),
    }
}

fn selector_string(sel: &BTreeMap<String, String>) -> String {
    sel.iter()
        .map(|(k, v)| format!("{k}={v}"))
        .collect::<Vec<_>>()
        .join(",")
}

/// Resolves `spec` in the cluster (validation and the principal's workspace
/// check come first, in the caller).
pub fn resolve(client: &Client, own: &Ownership, spec: &ExecSpec) -> Result<Target, ApiError> {
    resolve_pod(client, own, spec).map(|(t, _)| t)
}

/// [`resolve`], with the chosen pod's IP (empty when it has none).
pub fn resolve_pod(
    client: &Client,
    own: &Ownership,
    spec: &ExecSpec,
) -> Result<(Target, String), ApiError> {
    let ns = spec.project.as_str();
    let dep = match Api::<Deployment>::namespaced(client, ns).get_opt(&spec.deployment) {
        Ok(d) => d,
        Err(e) => return Err(cluster_error("reading the deployment", &e)),
    };
    let checked = check_deployment(spec, own, dep.as_ref())?;
    let params = ListParams::labels(&selector_string(&checked.selector));
    let pods = Api::<Pod>::namespaced(client, ns)
        .list(&params)
        .map_err(|e| cluster_error("listing the deployment's pods", &e))?
        .items;
    let sets = Api::<ReplicaSet>::namespaced(client, ns)
        .list(&params)
        .map_err(|e| cluster_error("listing the deployment's replica sets", &e))?
        .items;
    let rs_owner: HashMap<String, String> = sets
        .iter()
        .filter_map(|rs| {
            let r = rs.metadata.controller_ref()?;
            let uid = rs.metadata.uid.clone()?;
            (r.kind == "Deployment").then(|| (uid, r.uid.clone()))
        })
        .collect();
    let target = choose_pod(spec, &checked, ns, &pods, &rs_owner)?;
    let ip = pods
        .iter()
        .find(|p| p.metadata.name() == target.pod)
        .and_then(|p| p.status.as_ref()?.pod_ip.clone())
        .unwrap_or_default();
    Ok((target, ip))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn own() -> Ownership {
        Ownership {
            managed_by: "kubegate".into(),
            uid_label: "kubegate.dev/workspace-uid".into(),
        }
    }

    fn spec(container: Option<&str>) -> ExecSpec {
        ExecSpec {
            project: "demo".into(),
            uid: "demo-uid".into(),
            deployment: "hello".into(),
            container: container.map(str::to_string),
            command: vec!["true".into()],
        }
    }

    fn dep(labels: serde_json::Value) -> Deployment {
        serde_json::from_value(json!({
            "metadata": {"name": "hello", "uid": "dep-1", "labels": labels},
            "spec": {
                "selector": {"matchLabels": {"app": "hello"}},
                "template": {"spec": {"containers": [{"name": "main"}, {"name": "side"}]}}
            }
        }))
        .unwrap()
    }

    fn good_labels() -> serde_json::Value {
        json!({"app.kubernetes.io/managed-by": "kubegate", "kubegate.dev/workspace-uid": "demo-uid"})
    }

    fn pod(name: &str, rs_uid: &str, phase: &str, containers: &[(&str, bool, bool)]) -> Pod {
        let statuses: Vec<_> = containers
            .iter()
            .map(|(n, running, ready)| {
                let state = if *running {
                    json!({"running": {"startedAt": "2026-01-01T00:00:00Z"}})
                } else {
                    json!({"waiting": {"reason": "ContainerCreating"}})
                };
                json!({"name": n, "ready": ready, "restartCount": 0, "state": state})
            })
            .collect();
        serde_json::from_value(json!({
            "metadata": {"name": name, "uid": format!("uid-{name}"), "ownerReferences": [
                {"apiVersion": "apps/v1", "kind": "ReplicaSet", "name": "hello-rs", "uid": rs_uid, "controller": true}
            ]},
            "status": {"phase": phase, "containerStatuses": statuses}
        }))
        .unwrap()
    }

    fn owners() -> HashMap<String, String> {
        HashMap::from([
            ("rs-1".to_string(), "dep-1".to_string()),
            ("rs-other".to_string(), "dep-2".to_string()),
        ])
    }

    #[test]
    fn deployment_checks() {
        let c = check_deployment(&spec(None), &own(), Some(&dep(good_labels()))).unwrap();
        assert_eq!(c.container, "main");
        assert_eq!(c.uid, "dep-1");
        let c = check_deployment(&spec(Some("side")), &own(), Some(&dep(good_labels()))).unwrap();
        assert_eq!(c.container, "side");

        let e = check_deployment(&spec(None), &own(), None).unwrap_err();
        assert_eq!(e.code, Code::ExecTargetNotFound);
        let mut renamed = dep(good_labels());
        renamed.metadata.name = Some("other".into());
        assert_eq!(
            check_deployment(&spec(None), &own(), Some(&renamed))
                .unwrap_err()
                .code,
            Code::ExecTargetNotFound
        );
        for labels in [
            json!({}),
            json!({"app.kubernetes.io/managed-by": "kubegate"}),
            json!({"app.kubernetes.io/managed-by": "helm", "kubegate.dev/workspace-uid": "demo-uid"}),
            json!({"app.kubernetes.io/managed-by": "kubegate", "kubegate.dev/workspace-uid": "secret-other-uid"}),
        ] {
            let e = check_deployment(&spec(None), &own(), Some(&dep(labels))).unwrap_err();
            assert_eq!(e.code, Code::ExecTargetForbidden);
            assert!(e.message.contains("not owned by this workspace"));
            assert!(
                !e.message.contains("secret-other-uid"),
                "leaks: {}",
                e.message
            );
        }
        let mut no_sel = dep(good_labels());
        no_sel.spec.as_mut().unwrap().selector.match_labels = Some(BTreeMap::new());
        assert_eq!(
            check_deployment(&spec(None), &own(), Some(&no_sel))
                .unwrap_err()
                .code,
            Code::ExecTargetNotReady
        );
        let mut no_c = dep(good_labels());
        no_c.spec.as_mut().unwrap().template.spec = None;
        assert_eq!(
            check_deployment(&spec(None), &own(), Some(&no_c))
                .unwrap_err()
                .code,
            Code::ExecTargetNotReady
        );
    }

    fn choose(spec_: &ExecSpec, pods: &[Pod]) -> Result<Target, ApiError> {
        let c = check_deployment(spec_, &own(), Some(&dep(good_labels()))).unwrap();
        choose_pod(spec_, &c, "demo", pods, &owners())
    }

    #[test]
    fn prefers_ready_then_name_among_owned_running() {
        let pods = vec![
            pod("c", "rs-1", "Running", &[("main", true, false)]),
            pod("b", "rs-1", "Running", &[("main", true, true)]),
            pod("a", "rs-1", "Running", &[("main", true, false)]),
            pod("0-foreign", "rs-other", "Running", &[("main", true, true)]),
            pod("0-pending", "rs-1", "Pending", &[("main", false, false)]),
        ];
        let t = choose(&spec(None), &pods).unwrap();
        assert_eq!(t.pod, "b");
        assert_eq!(t.pod_uid, "uid-b");
        assert_eq!(t.deployment_uid, "dep-1");
        assert_eq!(t.container, "main");
        let t = choose(&spec(None), &pods[2..]).unwrap();
        assert_eq!(t.pod, "a");
    }

    #[test]
    fn deleting_and_foreign_pods_are_skipped() {
        let mut deleting = pod("a", "rs-1", "Running", &[("main", true, true)]);
        deleting.metadata.deletion_timestamp = Some("2026-01-01T00:00:00Z".into());
        let foreign = pod("b", "rs-other", "Running", &[("main", true, true)]);
        let e = choose(&spec(None), &[deleting, foreign]).unwrap_err();
        assert_eq!(e.code, Code::ExecTargetNotReady);
    }

    #[test]
    fn a_missing_named_container_is_not_found_but_none_running_is_not_ready() {
        let pods = vec![pod("a", "rs-1", "Running", &[("main", true, true)])];
        let e = choose(&spec(Some("nope")), &pods).unwrap_err();
        assert_eq!(e.code, Code::ExecTargetNotFound);
        assert!(e.message.contains("nope"));
        let e = choose(&spec(None), &[]).unwrap_err();
        assert_eq!(e.code, Code::ExecTargetNotReady);
        let waiting = vec![pod("a", "rs-1", "Running", &[("main", false, false)])];
        assert_eq!(
            choose(&spec(None), &waiting).unwrap_err().code,
            Code::ExecTargetNotReady
        );
    }
}
