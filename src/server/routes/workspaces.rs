//! `GET /v1/workspaces` (the caller's workspaces and their labelled
//! Deployments) and a session's workspace files (`GET|POST
//! /v1/sessions/{id}/workspace`, `GET …/workspace/file`) through the
//! session's workspace agent; paths are checked here again before
//! anything is sent (docs/agent.md rules).

use serde_json::{json, Value};

use super::{json_body, json_reply, FrontDoor};
use crate::agent::wire::paths::{check_plan, normalize, WorkspacePathError};
use crate::agent::wire::{ApplyRequest, Encoding};
use crate::api::{ApiError, Code, Identity};
use crate::http::{Reply, Request};
use crate::kube::client::{Api, Deployment, KubeError, ListParams};
use crate::kube::labels::MANAGED_BY_LABEL;
use crate::session::agent_client::AgentError;
use crate::session::engine::Handle;

fn bad_path(e: WorkspacePathError) -> ApiError {
    ApiError::new(Code::InvalidPath, e.to_string())
}

/// An agent's answer as the daemon's: 200 with its JSON, or its error.
fn answer<T: serde::Serialize>(v: Result<T, AgentError>) -> Result<Reply, ApiError> {
    match v {
        Ok(v) => Ok(json_reply(
            200,
            &serde_json::to_value(v).unwrap_or(Value::Null),
        )),
        Err(e) => Err(agent_error(&e)),
    }
}

/// An agent's answer as the daemon's error: the agent's own codes (bad
/// paths, limits, a missing file) pass through with their status; a
/// transport or protocol problem is the session's, 502.
fn agent_error(e: &AgentError) -> ApiError {
    match e {
        AgentError::Agent { code, message, .. } => match Code::parse(code) {
            Some(c) => ApiError::new(c, message.clone()),
            None => ApiError::new(
                Code::WorkspaceUnavailable,
                format!("workspace agent: {code}: {message}"),
            ),
        },
        other => ApiError::new(
            Code::WorkspaceUnavailable,
            format!("workspace agent: {other}"),
        ),
    }
}

/// A workspace write's body with every path normalized and the plan
/// checked.
fn apply_request(req: &Request) -> Result<ApplyRequest, ApiError> {
    let mut body: ApplyRequest = json_body(req)?;
    let mut writes = Vec::new();
    for w in body.write.iter_mut().flatten() {
        w.path = normalize(&w.path).map_err(bad_path)?;
        writes.push(w.path.clone());
    }
    let mut deletes = Vec::new();
    for d in body.delete.iter_mut().flatten() {
        *d = normalize(d).map_err(bad_path)?;
        deletes.push(d.clone());
    }
    check_plan(&writes, &deletes).map_err(bad_path)?;
    Ok(body)
}

impl FrontDoor {
    /// `GET …/workspace`: the tree with hashes.
    pub(super) fn workspace_tree(&self, h: &Handle) -> Result<Reply, ApiError> {
        answer(self.engine.agent_of(h)?.tree())
    }

    /// `POST …/workspace`: writes and deletes, all or nothing.
    pub(super) fn workspace_apply(&self, h: &Handle, req: &Request) -> Result<Reply, ApiError> {
        let agent = self.engine.agent_of(h)?;
        let body = apply_request(req)?;
        answer(agent.apply(
            body.write.unwrap_or_default(),
            body.delete.unwrap_or_default(),
        ))
    }

    /// `GET …/workspace/file?path=P&encoding=utf8|base64`.
    pub(super) fn workspace_file(&self, h: &Handle, req: &Request) -> Result<Reply, ApiError> {
        let agent = self.engine.agent_of(h)?;
        let path = normalize(req.query("path").unwrap_or("")).map_err(bad_path)?;
        let encoding = match req.query("encoding") {
            None | Some("utf8") => Encoding::Utf8,
            Some("base64") => Encoding::Base64,
            Some(other) => {
                return Err(ApiError::new(
                    Code::BadRequest,
                    format!("encoding must be utf8 or base64, not {other:?}"),
                ))
            }
        };
        answer(agent.file(&path, encoding))
    }

    /// `GET /v1/workspaces`.
    pub(super) fn workspaces(&self, who: &Identity) -> Result<Reply, ApiError> {
        let own = &self.gateway.settings().ownership;
        let selector = format!("{MANAGED_BY_LABEL}={}", own.managed_by);
        // Into the principal's workspaces: as the principal under
        // `[cluster] impersonate`.
        let acting = self.gateway.as_principal(who)?;
        let client = acting.client(&self.gateway);
        let mut out = Vec::new();
        for w in &who.workspaces {
            let list = match Api::<Deployment>::namespaced(client, &w.project)
                .list(&ListParams::labels(&selector))
            {
                Ok(l) => l.items,
                Err(KubeError::NotFound(_)) => Vec::new(),
                Err(e) => {
                    return Err(crate::exec::resolve::cluster_error(
                        &format!("listing deployments in {}", w.project),
                        &e,
                    ))
                }
            };
            let mut deployments: Vec<Value> = list
                .iter()
                .filter(|d| {
                    d.metadata
                        .labels
                        .as_ref()
                        .and_then(|l| l.get(&own.uid_label))
                        == Some(&w.uid)
                })
                .map(|d| {
                    let spec = d.spec.clone().unwrap_or_default();
                    let containers: Vec<String> = spec
                        .template
                        .spec
                        .map(|s| s.containers.into_iter().map(|c| c.name).collect())
                        .unwrap_or_default();
                    let status = d.status.clone().unwrap_or_default();
                    json!({
                        "name": d.metadata.name(),
                        "containers": containers,
                        "replicas": spec.replicas.unwrap_or(1),
                        "readyReplicas": status.ready_replicas.unwrap_or(0),
                    })
                })
                .collect();
            deployments.sort_by(|a, b| a["name"].as_str().cmp(&b["name"].as_str()));
            out.push(json!({"project": w.project, "uid": w.uid, "deployments": deployments}));
        }
        Ok(json_reply(200, &json!({ "workspaces": out })))
    }
}
