//! The owner's commands carried out against the cluster, each on a
//! `session-work` thread: create and delete the pod, create its token
//! Secret, publish (create, replace or delete) its Service and the
//! configured routing layer's objects (an Ingress, or one HTTPRoute per
//! tcp port), and read its HTTPRoutes back (docs/sessions.md#routing-states).

use super::owner::Owner;
use crate::kube::client::{
    Api, Client, DeleteParams, HttpRoute, Ingress, KubeError, ListParams, Pod, Resource, Secret,
    Service,
};
use crate::session::gateway::{endpoint_state, route_port, route_state, Routing};
use crate::session::machine::{Input, Session};
use crate::session::pod::SESSION_ID_LABEL;
use std::fmt;
use std::time::Duration;

impl Owner {
    pub(super) fn create_pod(&self, pod: Pod) {
        let api = Api::<Pod>::namespaced(&self.engine.client, &self.engine.settings.pod.namespace);
        let name = pod.metadata.name().to_string();
        self.work(move || match api.create(&pod) {
            Ok(p) => Input::PodCreated {
                pod: name,
                uid: p.metadata.uid.unwrap_or_default(),
            },
            Err(e) => Input::PodCreateFailed {
                pod: name,
                message: e.to_string(),
            },
        });
    }

    /// The pod's token Secret (docs/sessions.md "The workspace token"):
    /// created, AlreadyExists being success (a re-adoption, or a retry
    /// after an answer that was lost); transient failures (transport,
    /// 429, 5xx) are tried again 3 times over about 2 s, then the
    /// machine hears [`Input::SecretFailed`]. Neither the Secret nor an
    /// error about it is logged with the token.
    pub(super) fn create_secret(&self, s: &Session, pod: String, uid: String) {
        let settings = &self.engine.settings.pod;
        let Some(secret) = crate::session::pod::build_token_secret(
            settings,
            &self.handle.id,
            &pod,
            &uid,
            s.workspace_token(),
        ) else {
            // Our own JSON: cannot happen (a unit test pins it).
            log::error!(
                "session {}: building the token Secret failed",
                self.handle.id
            );
            return;
        };
        let api = Api::<Secret>::namespaced(&self.engine.client, &settings.namespace);
        let id = self.handle.id.clone();
        self.work_opt(move || {
            let name = crate::session::pod::token_secret_name(&pod);
            let mut delay = Duration::from_millis(250);
            let mut tries = 0;
            let message = loop {
                tries += 1;
                let e = match api.create(&secret) {
                    Ok(_) | Err(KubeError::AlreadyExists(_)) => return None,
                    Err(e) => e,
                };
                let transient = matches!(
                    e,
                    KubeError::Transport(_)
                        | KubeError::Throttled { .. }
                        | KubeError::Server { .. }
                );
                if !transient || tries > 3 {
                    break e.to_string();
                }
                log::warn!("session {id}: creating Secret {name}: {e} (trying again)");
                std::thread::sleep(delay);
                delay *= 2;
            };
            log::warn!("session {id}: creating Secret {name}: {message}");
            Some(Input::SecretFailed { pod, message })
        });
    }

    pub(super) fn delete_pod(&self, name: String) {
        let api = Api::<Pod>::namespaced(&self.engine.client, &self.engine.settings.pod.namespace);
        let id = self.handle.id.clone();
        self.work_opt(move || {
            let params = DeleteParams {
                grace_period: Some(0),
                ..DeleteParams::default()
            };
            match api.delete(&name, &params) {
                Ok(_) | Err(KubeError::NotFound(_)) => {}
                Err(e) => log::warn!("session {id}: deleting pod {name}: {e}"),
            }
            None
        });
    }

    pub(super) fn publish(
        &self,
        id: u64,
        service: Option<Box<Service>>,
        ingress: Option<Box<Ingress>>,
        routes: Vec<HttpRoute>,
    ) {
        let client = self.engine.client.clone();
        let ns = self.engine.settings.pod.namespace.clone();
        let routing = self.engine.settings.pod.routing.clone();
        let sid = self.handle.id.clone();
        self.work(move || {
            let name = crate::session::pod::service_name(&sid);
            let r = upsert_or_delete::<Service>(&client, &ns, &name, service.map(|b| *b)).and_then(
                |()| match routing {
                    Routing::Ingress => {
                        upsert_or_delete::<Ingress>(&client, &ns, &name, ingress.map(|b| *b))
                    }
                    Routing::Gateway(_) => publish_routes(&client, &ns, &sid, routes),
                    Routing::None => Ok(()),
                },
            );
            match r {
                Ok(()) => Input::PublishDone { id },
                Err(e) => Input::PublishFailed {
                    id,
                    message: e.to_string(),
                },
            }
        });
    }

    /// Lists the session's HTTPRoutes (by label) on a worker and reads
    /// each one's state for the configured Gateway, as the Gateway's own
    /// state (the engine's one reader's, `gateway_reader`) allows
    /// ([`Input::RoutesRead`]).
    pub(super) fn read_routes(&self) {
        let Routing::Gateway(parent) = self.engine.settings.pod.routing.clone() else {
            return;
        };
        let api =
            Api::<HttpRoute>::namespaced(&self.engine.client, &self.engine.settings.pod.namespace);
        let sid = self.handle.id.clone();
        let gateway = self.engine.gateway.clone();
        self.work(move || {
            let selector = format!("{SESSION_ID_LABEL}={sid}");
            let reading = match api.list(&ListParams::labels(&selector)) {
                Ok(list) => {
                    let gw = gateway.read().clone();
                    Ok(list
                        .items
                        .iter()
                        .filter_map(|r| {
                            let state = endpoint_state(route_state(r, &parent), &gw, &parent);
                            Some((route_port(&sid, r.name())?, state))
                        })
                        .collect())
                }
                Err(e) => {
                    log::warn!("session {sid}: reading its HTTPRoutes: {e}");
                    Err(e.to_string())
                }
            };
            Input::RoutesRead { reading }
        });
    }
}

/// Upserts each of the session's routes, then deletes any other route
/// labelled with its id (a port no longer published). A route already
/// gone is no error.
fn publish_routes(
    client: &Client,
    ns: &str,
    sid: &str,
    routes: Vec<HttpRoute>,
) -> Result<(), PublishError> {
    let keep: Vec<String> = routes.iter().map(|r| r.name().to_string()).collect();
    for r in routes {
        let name = r.name().to_string();
        upsert_or_delete::<HttpRoute>(client, ns, &name, Some(r))?;
    }
    let api = Api::<HttpRoute>::namespaced(client, ns);
    let selector = format!("{SESSION_ID_LABEL}={sid}");
    let list = api
        .list(&ListParams::labels(&selector))
        .map_err(|reason| PublishError::Kube {
            step: PublishStep::Listing,
            kind: HttpRoute::KIND,
            name: selector.clone(),
            reason,
        })?;
    for r in list
        .items
        .iter()
        .filter(|r| !keep.iter().any(|k| k == r.name()))
    {
        upsert_or_delete::<HttpRoute>(client, ns, r.name(), None)?;
    }
    Ok(())
}

/// What [`upsert_or_delete`] was doing when it failed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PublishStep {
    Listing,
    Deleting,
    Creating,
    Reading,
    Replacing,
}

impl PublishStep {
    fn as_str(self) -> &'static str {
        match self {
            PublishStep::Listing => "listing",
            PublishStep::Deleting => "deleting",
            PublishStep::Creating => "creating",
            PublishStep::Reading => "reading",
            PublishStep::Replacing => "replacing",
        }
    }
}

/// Why a Service or Ingress could not be published (the text goes to the
/// machine: `PublishFailed`).
#[derive(Debug)]
pub enum PublishError {
    /// The API server refused a step.
    Kube {
        step: PublishStep,
        kind: &'static str,
        name: String,
        reason: KubeError,
    },
    /// The object could not be carried through JSON (our own types: not
    /// expected).
    Json(serde_json::Error),
    /// Every replace met a newer version.
    StillConflicting { kind: &'static str, name: String },
}

impl fmt::Display for PublishError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            PublishError::Kube {
                step,
                kind,
                name,
                reason,
            } => write!(f, "{} {kind} {name}: {reason}", step.as_str()),
            PublishError::Json(e) => e.fmt(f),
            PublishError::StillConflicting { kind, name } => {
                write!(
                    f,
                    "replacing {kind} {name}: still conflicting after 5 tries"
                )
            }
        }
    }
}

impl std::error::Error for PublishError {}

/// Create; on AlreadyExists read and replace carrying resourceVersion (and
/// a Service's clusterIP/clusterIPs); a Conflict on the replace retries
/// (bounded). `None`: delete, 404 tolerated.
fn upsert_or_delete<K>(
    client: &Client,
    ns: &str,
    name: &str,
    obj: Option<K>,
) -> Result<(), PublishError>
where
    K: Resource + serde::Serialize + serde::de::DeserializeOwned + Clone,
{
    let failed = |step, reason| PublishError::Kube {
        step,
        kind: K::KIND,
        name: name.to_string(),
        reason,
    };
    let api = Api::<K>::namespaced(client, ns);
    let Some(obj) = obj else {
        return match api.delete(name, &DeleteParams::default()) {
            Ok(_) | Err(KubeError::NotFound(_)) => Ok(()),
            Err(e) => Err(failed(PublishStep::Deleting, e)),
        };
    };
    match api.create(&obj) {
        Ok(_) => return Ok(()),
        Err(KubeError::AlreadyExists(_)) => {}
        Err(e) => return Err(failed(PublishStep::Creating, e)),
    }
    for _ in 0..5 {
        let current = api.get(name).map_err(|e| failed(PublishStep::Reading, e))?;
        let mut next = serde_json::to_value(&obj).map_err(PublishError::Json)?;
        let cur = serde_json::to_value(&current).map_err(PublishError::Json)?;
        next["metadata"]["resourceVersion"] = cur["metadata"]["resourceVersion"].clone();
        if K::KIND == "Service" {
            for k in ["clusterIP", "clusterIPs"] {
                if let Some(v) = cur["spec"].get(k) {
                    next["spec"][k] = v.clone();
                }
            }
        }
        let next: K = serde_json::from_value(next).map_err(PublishError::Json)?;
        match api.replace(name, &next) {
            Ok(_) => return Ok(()),
            Err(KubeError::Conflict(_)) => continue,
            Err(e) => return Err(failed(PublishStep::Replacing, e)),
        }
    }
    Err(PublishError::StillConflicting {
        kind: K::KIND,
        name: name.to_string(),
    })
}
