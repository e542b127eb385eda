//! [`Api<K>`]: the verbs on one kind, in one namespace or across all of
//! them, over a [`Client`]. It owns URL building (paths of docs/kubernetes.md#rest-basics,
//! query encoding), the request bodies (DeleteOptions, merge patches), the
//! decoding of answers (streamed, no size cap; DELETE's object-or-Status),
//! and the pod -> ReplicaSet -> Deployment walk by controller UIDs.
//!
//! It never retries or maps errors itself (the [`Client`] does) and never
//! caches: every call is one round trip (plus the client's retries).

use super::error::KubeError;
use super::resources::{api_prefix, Deployment, Pod, ReplicaSet, Resource};
use super::rest::{read_json, Client, Idempotency, Request};
use super::watch::{WatchParams, Watcher};
use crate::kube::meta::{ListMeta, ObjectList};
use crate::kube::status::Status;
use serde::Serialize;
use serde_json::Value;
use std::marker::PhantomData;
use std::time::Duration;
use ureq::http::Method;

/// Verbs on kind `K`.
#[derive(Clone)]
pub struct Api<K> {
    client: Client,
    namespace: Option<String>,
    _kind: PhantomData<fn() -> K>,
}

impl<K> std::fmt::Debug for Api<K> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Api")
            .field("namespace", &self.namespace)
            .finish_non_exhaustive()
    }
}

/// `DeleteOptions`.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct DeleteParams {
    #[serde(rename = "gracePeriodSeconds", skip_serializing_if = "Option::is_none")]
    pub grace_period: Option<i64>,
    /// Foreground | Background | Orphan.
    #[serde(rename = "propagationPolicy", skip_serializing_if = "Option::is_none")]
    pub propagation: Option<Propagation>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub preconditions: Option<Preconditions>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub enum Propagation {
    Foreground,
    Background,
    Orphan,
}

#[derive(Debug, Clone, Default, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Preconditions {
    #[serde(skip_serializing_if = "Option::is_none")]
    pub uid: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub resource_version: Option<String>,
}

/// What a DELETE answered: the object (pods, services: still there with a
/// `deletionTimestamp` while graceful, or its last state) or a Success
/// Status (most other kinds).
#[derive(Debug, Clone)]
pub enum Deleted<K> {
    Object(K),
    Status(Box<Status>),
}

impl<K> Deleted<K> {
    pub fn object(self) -> Option<K> {
        match self {
            Deleted::Object(k) => Some(k),
            Deleted::Status(_) => None,
        }
    }
}

/// List options.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct ListParams {
    /// `app=web,tier in (a,b)`.
    pub label_selector: Option<String>,
    /// `metadata.name=x`, `status.phase=Running`.
    pub field_selector: Option<String>,
    /// Page size; the answer's `metadata.continue` then names the next page.
    pub limit: Option<u32>,
    pub continue_token: Option<String>,
    /// `"0"`: any cached state is fine (cheaper on a real server).
    pub resource_version: Option<String>,
}

impl ListParams {
    pub fn labels(selector: &str) -> ListParams {
        ListParams {
            label_selector: Some(selector.into()),
            ..ListParams::default()
        }
    }

    pub fn fields(selector: &str) -> ListParams {
        ListParams {
            field_selector: Some(selector.into()),
            ..ListParams::default()
        }
    }

    pub(crate) fn query(&self) -> Vec<(&'static str, String)> {
        let mut q = Vec::new();
        if let Some(s) = &self.label_selector {
            q.push(("labelSelector", s.clone()));
        }
        if let Some(s) = &self.field_selector {
            q.push(("fieldSelector", s.clone()));
        }
        if let Some(l) = self.limit {
            q.push(("limit", l.to_string()));
        }
        if let Some(c) = &self.continue_token {
            q.push(("continue", c.clone()));
        }
        if let Some(rv) = &self.resource_version {
            q.push(("resourceVersion", rv.clone()));
        }
        q
    }
}

/// A list answer: the items and the list's resourceVersion (watch from it).
#[derive(Debug, Clone)]
pub struct List<K> {
    pub items: Vec<K>,
    pub metadata: ListMeta,
}

impl<K> List<K> {
    /// The list's resourceVersion ("" when the server gave none).
    pub fn resource_version(&self) -> &str {
        self.metadata.resource_version.as_deref().unwrap_or("")
    }
}

impl<K: Resource> Api<K> {
    /// `K` in `namespace` (for a cluster-scoped kind the namespace is ignored).
    pub fn namespaced(client: &Client, namespace: &str) -> Api<K> {
        Api {
            client: client.clone(),
            namespace: K::NAMESPACED.then(|| namespace.to_string()),
            _kind: PhantomData,
        }
    }

    /// `K` in the connection's default namespace.
    pub fn default_namespaced(client: &Client) -> Api<K> {
        Api::namespaced(client, client.default_namespace())
    }

    /// `K` across all namespaces (list and watch), or a cluster-scoped kind.
    pub fn all(client: &Client) -> Api<K> {
        Api {
            client: client.clone(),
            namespace: None,
            _kind: PhantomData,
        }
    }

    pub fn client(&self) -> &Client {
        &self.client
    }

    pub fn namespace(&self) -> Option<&str> {
        self.namespace.as_deref()
    }

    /// The collection path: `/api/v1/namespaces/ns/pods`, `/api/v1/pods`.
    pub fn collection_path(&self) -> String {
        let mut p = api_prefix(K::API_VERSION);
        if let Some(ns) = &self.namespace {
            p.push_str("/namespaces/");
            p.push_str(&encode_segment(ns));
        }
        p.push('/');
        p.push_str(K::PLURAL);
        p
    }

    /// One object's path, optionally with a subresource.
    fn object_path(&self, name: &str, sub: Option<&str>) -> Result<String, KubeError> {
        if K::NAMESPACED && self.namespace.is_none() {
            return Err(KubeError::Config(format!(
                "{} {name:?}: a namespaced kind needs Api::namespaced for single-object calls",
                K::PLURAL
            )));
        }
        if name.is_empty() {
            return Err(KubeError::Config(format!("{}: empty name", K::PLURAL)));
        }
        let mut p = self.collection_path();
        p.push('/');
        p.push_str(&encode_segment(name));
        if let Some(s) = sub {
            p.push('/');
            p.push_str(s);
        }
        Ok(p)
    }

    fn body(obj: &K) -> Result<Vec<u8>, KubeError> {
        serde_json::to_vec(&obj.clone().with_type_fields())
            .map_err(|e| KubeError::Protocol(format!("encoding {}: {e}", K::KIND)))
    }

    /// POST to the collection. `metadata.generateName` works.
    pub fn create(&self, obj: &K) -> Result<K, KubeError> {
        if K::NAMESPACED && self.namespace.is_none() {
            return Err(KubeError::Config(format!(
                "{}: create needs Api::namespaced",
                K::PLURAL
            )));
        }
        let req = Request::new(Method::POST, self.collection_path()).json(Self::body(obj)?);
        self.client.send_json(&req)
    }

    /// GET one object.
    pub fn get(&self, name: &str) -> Result<K, KubeError> {
        self.client
            .send_json(&Request::get(self.object_path(name, None)?))
    }

    /// GET one object; `None` when it does not exist.
    pub fn get_opt(&self, name: &str) -> Result<Option<K>, KubeError> {
        match self.get(name) {
            Ok(k) => Ok(Some(k)),
            Err(KubeError::NotFound(_)) => Ok(None),
            Err(e) => Err(e),
        }
    }

    /// PUT the object. Its `metadata.resourceVersion` makes it conditional
    /// (a stale one is [`KubeError::Conflict`]); keep it from the read.
    pub fn replace(&self, name: &str, obj: &K) -> Result<K, KubeError> {
        let req = Request::new(Method::PUT, self.object_path(name, None)?).json(Self::body(obj)?);
        self.client.send_json(&req)
    }

    /// PATCH with `application/merge-patch+json` (RFC 7386: `null` deletes).
    pub fn patch_merge(&self, name: &str, patch: &Value) -> Result<K, KubeError> {
        let body = serde_json::to_vec(patch)
            .map_err(|e| KubeError::Protocol(format!("encoding patch: {e}")))?;
        let req = Request::new(Method::PATCH, self.object_path(name, None)?)
            .body(body, "application/merge-patch+json");
        self.client.send_json(&req)
    }

    /// DELETE with DeleteOptions in the body.
    pub fn delete(&self, name: &str, params: &DeleteParams) -> Result<Deleted<K>, KubeError> {
        let body = serde_json::to_vec(&DeleteBody {
            kind: "DeleteOptions",
            api_version: "v1",
            params,
        })
        .map_err(|e| KubeError::Protocol(format!("encoding DeleteOptions: {e}")))?;
        let req = Request::new(Method::DELETE, self.object_path(name, None)?).json(body);
        let v: Value = self.client.send_json(&req)?;
        decode_deleted(v)
    }

    /// GET the collection. The answer is decoded straight from the socket
    /// (no size cap). With `limit`, one page: follow `metadata.continue`.
    pub fn list(&self, params: &ListParams) -> Result<List<K>, KubeError> {
        let path = with_query(&self.collection_path(), &params.query());
        let l: ObjectList<K> = self.client.send_json(&Request::get(path))?;
        Ok(List {
            items: l.items,
            metadata: l.metadata,
        })
    }

    /// Every page of a paged list, concatenated; the resourceVersion is the
    /// first page's (the snapshot the pages belong to).
    pub fn list_all(&self, params: &ListParams) -> Result<List<K>, KubeError> {
        let mut p = params.clone();
        let mut out = self.list(&p)?;
        let mut next = out.metadata.continue_token.take();
        while let Some(c) = next.filter(|c| !c.is_empty()) {
            p.continue_token = Some(c);
            let mut page = self.list(&p)?;
            out.items.append(&mut page.items);
            next = page.metadata.continue_token.take();
        }
        Ok(out)
    }

    /// GET `…/{name}/status`.
    pub fn get_status(&self, name: &str) -> Result<K, KubeError> {
        self.client
            .send_json(&Request::get(self.object_path(name, Some("status"))?))
    }

    /// PUT `…/{name}/status` (only the status is changed by the server).
    pub fn replace_status(&self, name: &str, obj: &K) -> Result<K, KubeError> {
        let req = Request::new(Method::PUT, self.object_path(name, Some("status"))?)
            .json(Self::body(obj)?);
        self.client.send_json(&req)
    }

    /// A watch of the collection (see [`Watcher`]).
    pub fn watch(&self, params: WatchParams) -> Watcher<K> {
        Watcher::new(&self.client, self.collection_path(), params)
    }

    /// A watch of one object, through `fieldSelector=metadata.name=X`.
    pub fn watch_object(&self, name: &str, mut params: WatchParams) -> Watcher<K> {
        let by_name = format!("metadata.name={name}");
        params.field_selector = Some(match params.field_selector.take() {
            Some(f) if !f.is_empty() => format!("{by_name},{f}"),
            _ => by_name,
        });
        self.watch(params)
    }
}

/// Options of `GET …/pods/{name}/log` (not followed).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct LogParams {
    pub container: Option<String>,
    /// RFC 3339; the API server forwards whole seconds to the kubelet.
    pub since_time: Option<String>,
    /// Each line starts with its RFC 3339 (nanoseconds) time and a space.
    pub timestamps: bool,
    pub tail_lines: Option<u64>,
}

/// A log answer, read up to a bound.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PodLog {
    pub body: Vec<u8>,
    /// The answer was longer than the bound: `body` is its start.
    pub truncated: bool,
}

impl Api<Pod> {
    /// A container's log as it is now (`follow` off), at most `max_bytes`
    /// of it.
    pub fn logs(&self, name: &str, p: &LogParams, max_bytes: usize) -> Result<PodLog, KubeError> {
        use std::io::Read;
        let mut q: Vec<(&str, String)> = Vec::new();
        if let Some(c) = &p.container {
            q.push(("container", c.clone()));
        }
        if let Some(t) = &p.since_time {
            q.push(("sinceTime", t.clone()));
        }
        if p.timestamps {
            q.push(("timestamps", "true".into()));
        }
        if let Some(n) = p.tail_lines {
            q.push(("tailLines", n.to_string()));
        }
        let mut req = Request::get(with_query(&self.object_path(name, Some("log"))?, &q));
        req.accept = "text/plain, */*";
        let resp = self.client.send(&req)?;
        let mut body = Vec::new();
        resp.into_body()
            .into_reader()
            .take(
                u64::try_from(max_bytes)
                    .unwrap_or(u64::MAX)
                    .saturating_add(1),
            )
            .read_to_end(&mut body)
            .map_err(|e| KubeError::Transport(format!("reading the log: {e}")))?;
        let truncated = body.len() > max_bytes;
        body.truncate(max_bytes);
        Ok(PodLog { body, truncated })
    }
}

#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct DeleteBody<'a> {
    kind: &'static str,
    api_version: &'static str,
    #[serde(flatten)]
    params: &'a DeleteParams,
}

/// DELETE answers a Status (`kind: Status`) or the object.
fn decode_deleted<K: Resource>(v: Value) -> Result<Deleted<K>, KubeError> {
    let is_status = v.get("kind").and_then(Value::as_str) == Some("Status") && K::KIND != "Status";
    if is_status {
        let s: Status = serde_json::from_value(v)
            .map_err(|e| KubeError::Protocol(format!("decoding the delete Status: {e}")))?;
        return Ok(Deleted::Status(Box::new(s)));
    }
    serde_json::from_value(v)
        .map(Deleted::Object)
        .map_err(|e| KubeError::Protocol(format!("decoding the deleted {}: {e}", K::KIND)))
}

/// The ReplicaSet controlling `pod`, found through the pod's controller
/// ownerReference and checked by UID (a ReplicaSet re-created under the
/// same name is not the owner). `None` when there is no such owner.
pub fn pod_replicaset(client: &Client, pod: &Pod) -> Result<Option<ReplicaSet>, KubeError> {
    let Some(ns) = pod.metadata.namespace.as_deref() else {
        return Ok(None);
    };
    controller_owner::<ReplicaSet>(client, ns, &pod.metadata)
}

/// The Deployment controlling `pod` (pod -> ReplicaSet -> Deployment, by
/// controller UIDs at each step).
pub fn pod_deployment(client: &Client, pod: &Pod) -> Result<Option<Deployment>, KubeError> {
    let Some(rs) = pod_replicaset(client, pod)? else {
        return Ok(None);
    };
    let Some(ns) = rs.metadata.namespace.as_deref() else {
        return Ok(None);
    };
    controller_owner::<Deployment>(client, ns, &rs.metadata)
}

fn controller_owner<O: Resource>(
    client: &Client,
    ns: &str,
    meta: &crate::kube::meta::ObjectMeta,
) -> Result<Option<O>, KubeError> {
    let Some(r) = meta.controller_ref() else {
        return Ok(None);
    };
    let group = r.api_version.rsplit_once('/').map_or("", |(g, _)| g);
    if r.kind != O::KIND || group != O::GROUP || r.uid.is_empty() {
        return Ok(None);
    }
    let owner = Api::<O>::namespaced(client, ns).get_opt(&r.name)?;
    Ok(owner.filter(|o| o.uid() == Some(r.uid.as_str())))
}

/// Percent-encodes one query value or path segment (RFC 3986 unreserved
/// characters pass through).
pub fn encode_segment(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for b in s.bytes() {
        match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'.' | b'_' | b'~' => {
                out.push(b as char)
            }
            _ => out.push_str(&format!("%{b:02X}")),
        }
    }
    out
}

/// `path?k=v&…` with encoded values.
pub fn with_query(path: &str, query: &[(&str, String)]) -> String {
    if query.is_empty() {
        return path.to_string();
    }
    let q: Vec<String> = query
        .iter()
        .map(|(k, v)| format!("{k}={}", encode_segment(v)))
        .collect();
    format!("{path}?{}", q.join("&"))
}

/// A list on an explicit agent (the watcher's own, so `stop` cancels it),
/// with the REST deadline.
pub(crate) fn list_on<K: serde::de::DeserializeOwned>(
    client: &Client,
    agent: &ureq::Agent,
    collection: &str,
    params: &ListParams,
    deadline: Duration,
) -> Result<ObjectList<K>, KubeError> {
    let mut req = Request::get(with_query(collection, &params.query()));
    req.idempotency = Idempotency::Safe;
    let resp = client.send_on(agent, &req, super::rest::CallOptions::REST, Some(deadline))?;
    read_json(resp)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::kube::connection::Connection;

    #[test]
    fn paths_and_queries() {
        let c = Client::new(Connection::plain("http://127.0.0.1:1")).expect("client");
        let pods = Api::<Pod>::namespaced(&c, "ns1");
        assert_eq!(pods.collection_path(), "/api/v1/namespaces/ns1/pods");
        assert_eq!(
            pods.object_path("p", Some("status")).expect("path"),
            "/api/v1/namespaces/ns1/pods/p/status"
        );
        let all = Api::<Deployment>::all(&c);
        assert_eq!(all.collection_path(), "/apis/apps/v1/deployments");
        assert!(all.object_path("d", None).is_err());
        let ns = Api::<super::super::resources::Namespace>::namespaced(&c, "ignored");
        assert_eq!(
            ns.object_path("x", None).expect("ns"),
            "/api/v1/namespaces/x"
        );
        assert_eq!(
            with_query("/p", &[("labelSelector", "app in (a,b),x!=y".into())]),
            "/p?labelSelector=app%20in%20%28a%2Cb%29%2Cx%21%3Dy"
        );
    }

    #[test]
    fn delete_body_and_answers() {
        let p = DeleteParams {
            grace_period: Some(0),
            propagation: Some(Propagation::Background),
            preconditions: Some(Preconditions {
                uid: Some("u".into()),
                resource_version: None,
            }),
        };
        let v = serde_json::to_value(DeleteBody {
            kind: "DeleteOptions",
            api_version: "v1",
            params: &p,
        })
        .expect("json");
        assert_eq!(
            v,
            serde_json::json!({"kind": "DeleteOptions", "apiVersion": "v1", "gracePeriodSeconds": 0,
                "propagationPolicy": "Background", "preconditions": {"uid": "u"}})
        );
        let d: Deleted<Pod> =
            decode_deleted(serde_json::json!({"kind": "Status", "status": "Success"})).expect("s");
        assert!(matches!(d, Deleted::Status(_)));
        let d: Deleted<Pod> =
            decode_deleted(serde_json::json!({"kind": "Pod", "metadata": {"name": "p"}}))
                .expect("p");
        assert_eq!(
            d.object().map(|p| p.metadata.name().to_string()),
            Some("p".into())
        );
    }
}
