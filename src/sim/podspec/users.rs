//! Which host user a container's processes run as, and who owns the pod's
//! folder and volumes: the security contexts read the way a kubelet reads
//! them, with the sim's pod ids standing in for the image's user
//! (docs/sim.md, "Pod users"). Sans-IO; the id pool itself is
//! `sim::pod_users`.

use super::{s, PlanContext, PlanError};
use serde_json::Value;

/// The largest id Kubernetes accepts in `runAsUser`, `runAsGroup`,
/// `fsGroup` and `supplementalGroups`.
const MAX_ID: i64 = 2_147_483_647;

/// One id field of a security context, validated as the API server does.
fn sc_id(sc: &Value, key: &str, at: &str) -> Result<Option<u32>, PlanError> {
    match sc.get(key) {
        None | Some(Value::Null) => Ok(None),
        Some(v) => id_value(v, &format!("{at}.{key}")).map(Some),
    }
}

fn id_value(v: &Value, at: &str) -> Result<u32, PlanError> {
    match v.as_i64() {
        Some(n) if (0..=MAX_ID).contains(&n) => Ok(n as u32),
        _ => Err(PlanError::Invalid(format!(
            "{at}: Invalid value: {v}: must be between 0 and {MAX_ID}, inclusive"
        ))),
    }
}

/// The host user a container's processes (its command, its execs; attach
/// joins the command) run as, the way a kubelet reads the security
/// contexts: the container's `runAsUser`/`runAsGroup`/`runAsNonRoot`
/// override the pod's; the pod's `fsGroup` and `supplementalGroups` are
/// supplementary groups of every process.
///
/// The sim's part (docs/sim.md, "Pod users"): no image names a user, so
/// the image's user is the pod's own host id (`ctx.pod_id`, from the sim's
/// uid range), and so is the default group; every process of the pod also
/// has that id as a supplementary group, which is what lets containers of
/// one pod that run as different users share its folder and volumes (the
/// sim's stand-in for the pod's mount namespace). `runAsNonRoot: true`
/// with uid 0 is refused with upstream's messages. Without `pod_id` (the
/// sim cannot switch users) nothing is switched (`None`) and only the
/// non-root check applies, against the sim's own uid.
pub fn process_user(
    pod: &Value,
    container: &Value,
    ctx: &PlanContext<'_>,
) -> Result<Option<crate::sim::runtime::User>, PlanError> {
    let name = s(container, "name");
    let psc = &pod["spec"]["securityContext"];
    let csc = &container["securityContext"];
    let pick = |key: &str| -> Result<Option<u32>, PlanError> {
        match sc_id(csc, key, "securityContext")? {
            Some(v) => Ok(Some(v)),
            None => sc_id(psc, key, "spec.securityContext"),
        }
    };
    let run_as_user = pick("runAsUser")?;
    let run_as_group = pick("runAsGroup")?;
    let non_root = csc
        .get("runAsNonRoot")
        .or_else(|| psc.get("runAsNonRoot"))
        .and_then(Value::as_bool)
        .unwrap_or(false);
    let uid = match ctx.pod_id {
        Some(id) => run_as_user.unwrap_or(id),
        None => ctx.sim_uid,
    };
    if non_root {
        let meta = &pod["metadata"];
        let who = format!(
            "{}_{}({})",
            s(meta, "name"),
            s(meta, "namespace"),
            s(meta, "uid")
        );
        if run_as_user == Some(0) {
            return Err(PlanError::Invalid(format!(
                "container's runAsUser breaks non-root policy (pod: {who:?}, container: {name})"
            )));
        }
        if uid == 0 {
            return Err(PlanError::Invalid(format!(
                "container has runAsNonRoot and image will run as root (pod: {who:?}, container: {name})"
            )));
        }
    }
    let Some(id) = ctx.pod_id else {
        return Ok(None);
    };
    let mut groups = vec![id];
    let fs_group = sc_id(psc, "fsGroup", "spec.securityContext")?;
    let supplemental = match psc.get("supplementalGroups") {
        None | Some(Value::Null) => Vec::new(),
        Some(Value::Array(a)) => a.clone(),
        Some(v) => {
            return Err(PlanError::Invalid(format!(
                "spec.securityContext.supplementalGroups: Invalid value: {v}: must be a list"
            )))
        }
    };
    groups.extend(fs_group);
    for (i, v) in supplemental.iter().enumerate() {
        groups.push(id_value(
            v,
            &format!("spec.securityContext.supplementalGroups[{i}]"),
        )?);
    }
    let mut seen = std::collections::BTreeSet::new();
    groups.retain(|g| seen.insert(*g));
    Ok(Some(crate::sim::runtime::User {
        uid,
        gid: run_as_group.unwrap_or(id),
        groups,
    }))
}

/// How the pod's folder and volumes are owned: the pod-level `runAsUser`
/// (else the pod's id) as owner, the pod's id as group, and the `fsGroup`
/// that volumes are given to (kubelet: group ownership plus setgid
/// folders). `None` without a pod id.
pub fn pod_owner(pod: &Value, pod_id: Option<u32>) -> Option<PodOwner> {
    let id = pod_id?;
    let psc = &pod["spec"]["securityContext"];
    let get = |k: &str| sc_id(psc, k, "spec.securityContext").ok().flatten();
    Some(PodOwner {
        uid: get("runAsUser").unwrap_or(id),
        gid: id,
        fs_group: get("fsGroup"),
    })
}

/// See [`pod_owner`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PodOwner {
    pub uid: u32,
    pub gid: u32,
    pub fs_group: Option<u32>,
}
