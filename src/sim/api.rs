//! The sim's REST surface: routes Kubernetes API paths to the store, turns
//! store errors into Status responses, streams watches, and hands pod
//! subresources (exec, attach, log, proxy) to the kubelet's [`PodStreams`].
//! It owns no objects: everything lives in the [`Store`]; it never blocks
//! the store's lock while writing to a socket.

use super::discovery;
use super::faults::Faults;
use super::lifecycle::{self, DeleteOptions};
use super::managed;
use super::resources::{Resource, ResourceInfo};
use super::store::{Event, PatchType, Selectors, Store, StoreError, Subresource, WatchFrom};
use super::table;

mod events_view;
mod gate;
mod review;
use crate::http::{ChunkSink, Handler, HttpError, Reply, Request, Response};
use crate::kube::status::Status;
use crossbeam_channel::RecvTimeoutError;
use serde_json::{json, Value};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// Streams served on behalf of pods: implemented by the kubelet.
pub trait PodStreams: Send + Sync {
    fn exec(&self, req: &Request, ns: &str, pod: &str) -> Reply;
    fn attach(&self, req: &Request, ns: &str, pod: &str) -> Reply;
    fn log(&self, req: &Request, ns: &str, pod: &str) -> Reply;
    /// `pods/portforward`: SPDY tunnelled in WebSocket (GET), plain SPDY
    /// (POST, raw upgrade) and the v4 WebSocket (`sim::portforward`).
    fn port_forward(&self, req: &Request, ns: &str, pod: &str) -> Reply;
    /// `target`: the request-target for the pod, path and query, already
    /// cleaned and encoded (`proxy::pod_target`).
    fn proxy(&self, req: &Request, ns: &str, pod: &str, port: u16, target: &str) -> Reply;
}

/// How clients prove who they are (`sim::authn`).
pub use super::authn::Authenticator as Auth;

pub struct ApiConfig {
    /// Interval between BOOKMARK events on watches that asked for them.
    pub bookmark_interval: Duration,
    /// Bounds of the server-chosen timeout of a watch without timeoutSeconds.
    pub default_watch_timeout: (Duration, Duration),
}

impl Default for ApiConfig {
    fn default() -> Self {
        ApiConfig {
            bookmark_interval: Duration::from_secs(10),
            default_watch_timeout: (Duration::from_secs(1800), Duration::from_secs(3600)),
        }
    }
}

pub struct ApiServer {
    store: Arc<Store>,
    streams: Option<Arc<dyn PodStreams>>,
    faults: Arc<Faults>,
    auth: Auth,
    cfg: ApiConfig,
    /// `host:port` reported by `/api`, known once the listener is bound.
    server_address: std::sync::OnceLock<String>,
    /// `--request-log FILE`: one JSON line per request (docs/sim.md).
    request_log: Option<parking_lot::Mutex<std::fs::File>>,
    /// `--audit-log FILE`: one audit Event per request (`sim::audit`).
    audit: Option<super::audit::AuditLog>,
    /// The impersonation mode each requestor last used (`sim::impersonate`).
    impersonator: super::impersonate::Impersonator,
}

/// A parsed API path.
#[derive(Debug, PartialEq)]
enum Route<'a> {
    Version,
    Health,
    ApiVersions,
    GroupList,
    Group(&'a str),
    ResourceList(&'a str, &'a str),
    Faults,
    OpenApiIndex,
    OpenApiDoc(&'a str),
    /// A collection, in a namespace or across all namespaces (ns None).
    Collection(Resource, Option<&'a str>),
    Object(Resource, &'a str, &'a str),
    Sub(Resource, &'a str, &'a str, &'a str),
    /// `pods/{name}[:port]/proxy/{rest}`
    Proxy(&'a str, &'a str),
    NotFound,
    /// A path under an API group the sim does not serve: plain-text 404.
    NoHandler,
}

fn route(path: &str) -> Route<'_> {
    let segs: Vec<&str> = path
        .trim_start_matches('/')
        .trim_end_matches('/')
        .split('/')
        .collect();
    match segs.as_slice() {
        ["version"] => Route::Version,
        ["healthz"] | ["readyz"] | ["livez"] => Route::Health,
        ["sim", "faults"] => Route::Faults,
        ["openapi", "v3"] => Route::OpenApiIndex,
        ["openapi", "v3", "api", "v1"] => Route::OpenApiDoc(""),
        ["openapi", "v3", "apis", g, "v1"] => Route::OpenApiDoc(g),
        ["api"] => Route::ApiVersions,
        ["apis"] => Route::GroupList,
        // A group nobody serves: upstream's mux has no handler for it and
        // its NotFoundHandler answers in plain text, not a Status.
        ["apis", g, ..] if !discovery::serves_group(g) => Route::NoHandler,
        ["apis", g] => Route::Group(g),
        ["api", "v1"] => Route::ResourceList("", "v1"),
        ["apis", g, v] => Route::ResourceList(g, v),
        ["api", "v1", rest @ ..] => resource_route("", rest),
        ["apis", g, "v1", rest @ ..] => resource_route(g, rest),
        _ => Route::NotFound,
    }
}

fn resource_route<'a>(group: &'a str, rest: &[&'a str]) -> Route<'a> {
    let namespaced =
        |plural: &str| Resource::from_path(group, plural).filter(|r| r.info().namespaced);
    if rest.len() >= 3 && rest[0] == "namespaces" {
        if let Some(res) = namespaced(rest[2]) {
            let ns = rest[1];
            return match &rest[3..] {
                [] => Route::Collection(res, Some(ns)),
                [name] => Route::Object(res, ns, name),
                // The path after `/proxy` is taken from the raw
                // request-target (`proxy::pod_target`), slashes and all.
                [name, "proxy", ..] if res == Resource::Pod => Route::Proxy(ns, name),
                [name, sub] => Route::Sub(res, ns, name, sub),
                _ => Route::NotFound,
            };
        }
    }
    let Some(res) = Resource::from_path(group, rest.first().copied().unwrap_or("")) else {
        return Route::NotFound;
    };
    match &rest[1..] {
        [] => Route::Collection(res, None),
        [name] if !res.info().namespaced => Route::Object(res, "", name),
        [name, sub] if !res.info().namespaced && res.info().subresources.contains(sub) => {
            Route::Sub(res, "", name, sub)
        }
        _ => Route::NotFound,
    }
}

fn status_response(s: &Status) -> Response {
    let mut r = Response::json(s.http_code(), s.to_json());
    if let Some(secs) = s.retry_after_seconds() {
        r = r.with_header("Retry-After", &secs.to_string());
    }
    r
}

/// The one place store errors become Status responses.
fn store_error(e: StoreError) -> Response {
    status_response(&status_of(e))
}

fn status_of(e: StoreError) -> Status {
    use crate::kube::status::{StatusCause, StatusDetails, StatusReason};
    let mut details = StatusDetails::default();
    if let Some((res, name)) = e.subject() {
        let i = res.info();
        details.name = name.to_string();
        details.group = i.group.to_string();
        details.kind = i.plural.to_string();
    }
    let cause = |c: &super::store::FieldCause| StatusCause {
        reason: c.kind.reason().to_string(),
        message: c.body(),
        field: c.field.clone(),
    };
    match &e {
        StoreError::PreconditionFailed { resource, .. } => {
            details.kind = resource.info().kind.to_string();
        }
        StoreError::ApplyConflict { causes, .. } => {
            details.causes = causes
                .iter()
                .map(|c| StatusCause {
                    reason: c["reason"].as_str().unwrap_or("").to_string(),
                    message: c["message"].as_str().unwrap_or("").to_string(),
                    field: c["field"].as_str().unwrap_or("").to_string(),
                })
                .collect();
        }
        StoreError::Invalid {
            resource, causes, ..
        } => {
            details.kind = resource.info().kind.to_string();
            details.causes = causes.iter().map(cause).collect();
        }
        // Upstream names the resource here (`details.kind` stays the plural).
        StoreError::ResourceVersionRequired { .. } => {
            details.causes = vec![cause(&super::store::error::resource_version_required())];
        }
        _ => {}
    }
    let code = e.code();
    Status {
        kind: Some("Status".into()),
        api_version: Some("v1".into()),
        status: "Failure".into(),
        message: e.message(),
        reason: Some(StatusReason::parse(e.reason())),
        details: (details != StatusDetails::default()).then_some(details),
        code: code as i32,
        ..Status::default()
    }
}

fn json_response<T: serde::Serialize>(code: u16, v: &T) -> Response {
    match serde_json::to_vec(v) {
        Ok(mut b) => {
            b.push(b'\n');
            Response::json(code, b)
        }
        Err(e) => status_response(&Status::internal_error(&format!("encoding response: {e}"))),
    }
}

fn bad_request(msg: &str) -> Response {
    status_response(&Status::bad_request(msg))
}

fn method_not_allowed() -> Response {
    let mut s = Status::method_not_allowed("", "", "this method");
    s.message = "the server does not allow this method on the requested resource".into();
    status_response(&s)
}

/// Decodes a request body as a JSON object for `info`'s kind: JSON, or the
/// Kubernetes protobuf encoding that kubectl's typed clients send
/// (`kubectl create configmap|deployment|service|…`).
fn body_object(req: &Request, info: &ResourceInfo) -> Result<Value, Response> {
    let ct = req.header("content-type").unwrap_or("");
    if crate::kube::protobuf::is_protobuf(ct) {
        return match crate::kube::protobuf::decode(&req.body) {
            Ok(v) => Ok(v),
            Err(crate::kube::protobuf::ProtobufError::UnsupportedKind { .. }) => {
                Err(status_response(&Status::unsupported_media_type(&[
                    "application/json",
                ])))
            }
            Err(e) => Err(bad_request(&format!(
                "the object provided is unrecognized (must be of type {}): {e}",
                info.kind
            ))),
        };
    }
    let base = ct.split(';').next().unwrap_or("").trim();
    if !base.is_empty() && base != "application/json" && base != "*/*" {
        return Err(status_response(&Status::unsupported_media_type(&[
            "application/json",
            "application/vnd.kubernetes.protobuf",
        ])));
    }
    let v: Value = serde_json::from_slice(&req.body).map_err(|e| {
        bad_request(&format!(
            "the object provided is unrecognized (must be of type {}): couldn't get version/kind; json parse error: {e}",
            info.kind
        ))
    })?;
    if !v.is_object() {
        return Err(bad_request(&format!(
            "the object provided is unrecognized (must be of type {}): not a JSON object",
            info.kind
        )));
    }
    Ok(v)
}

fn patch_type(req: &Request) -> Result<PatchType, Response> {
    let ct = req.header("content-type").unwrap_or("");
    let base = ct.split(';').next().unwrap_or("").trim();
    match base {
        "application/merge-patch+json" => Ok(PatchType::Merge),
        "application/json-patch+json" => Ok(PatchType::Json),
        "application/strategic-merge-patch+json" => Ok(PatchType::StrategicMerge),
        // Upstream's router refuses a PATCH whose Content-Type no route
        // consumes before any handler runs, in go-restful's words.
        _ => Err(status_response(&Status::failure(
            415,
            crate::kube::status::StatusReason::UnsupportedMediaType,
            "415: Unsupported Media Type".into(),
        ))),
    }
}

/// A PATCH whose Content-Type is a server-side apply.
fn is_apply(req: &Request) -> bool {
    req.header("content-type")
        .unwrap_or("")
        .split(';')
        .next()
        .is_some_and(|t| t.trim() == "application/apply-patch+yaml")
}

/// The writer of a client's create, update or patch (`sim::managed`), or
/// the 422 of a `fieldManager` upstream refuses.
fn update_writer(req: &Request, options: &str) -> Result<managed::Writer, Response> {
    if let Some(m) = req.query("fieldManager") {
        if let Some((reason, body)) = managed::check_field_manager(m) {
            return Err(options_invalid(options, "fieldManager", reason, &body));
        }
    }
    Ok(managed::Writer::Update(managed::update_manager(
        req.query("fieldManager"),
        req.header("user-agent"),
    )))
}

/// Upstream's 422 for a bad query option: `PatchOptions.meta.k8s.io ""
/// is invalid: fieldManager: Required value: …`.
fn options_invalid(kind: &str, field: &str, reason: &str, body: &str) -> Response {
    use crate::kube::status::{StatusCause, StatusDetails, StatusReason};
    status_response(&Status {
        kind: Some("Status".into()),
        api_version: Some("v1".into()),
        status: "Failure".into(),
        message: format!("{kind}.meta.k8s.io \"\" is invalid: {field}: {body}"),
        reason: Some(StatusReason::parse("Invalid")),
        details: Some(StatusDetails {
            group: "meta.k8s.io".into(),
            kind: kind.into(),
            causes: vec![StatusCause {
                reason: reason.into(),
                message: body.into(),
                field: field.into(),
            }],
            ..StatusDetails::default()
        }),
        code: 422,
        ..Status::default()
    })
}

fn selectors(req: &Request, res: Resource) -> Result<Selectors, Response> {
    Selectors::parse(res, req.query("labelSelector"), req.query("fieldSelector"))
        .map_err(store_error)
}

fn delete_options(req: &Request) -> Result<DeleteOptions, Response> {
    let mut o = DeleteOptions::default();
    let body = String::from_utf8_lossy(&req.body);
    if !body.trim().is_empty() {
        let v: Value = serde_json::from_str(&body)
            .map_err(|e| bad_request(&format!("invalid DeleteOptions: {e}")))?;
        o.grace = v.get("gracePeriodSeconds").and_then(Value::as_i64);
        o.propagation = v
            .get("propagationPolicy")
            .and_then(Value::as_str)
            .map(str::to_string);
        if let Some(p) = v.get("preconditions") {
            o.pre.uid = p.get("uid").and_then(Value::as_str).map(str::to_string);
            o.pre.resource_version = p
                .get("resourceVersion")
                .and_then(Value::as_str)
                .map(str::to_string);
        }
    }
    if let Some(g) = req.query("gracePeriodSeconds") {
        o.grace = Some(
            g.parse()
                .map_err(|_| bad_request(&format!("invalid gracePeriodSeconds {g:?}")))?,
        );
    }
    if let Some(p) = req.query("propagationPolicy") {
        o.propagation = Some(p.to_string());
    }
    if let Some(p) = &o.propagation {
        if !matches!(p.as_str(), "Orphan" | "Background" | "Foreground") {
            return Err(status_response(&Status::invalid_message(
                &format!("propagationPolicy: Unsupported value: {p:?}: supported values: \"Foreground\", \"Background\", \"Orphan\""),
            )));
        }
    }
    if let Some(g) = o.grace {
        if g < 0 {
            return Err(status_response(&Status::invalid_message(
                "gracePeriodSeconds: Invalid value: must be >= 0",
            )));
        }
    }
    Ok(o)
}

/// A list response. Items in real list responses carry no kind/apiVersion.
fn list_json(info: &ResourceInfo, items: Vec<Value>, rv: u64) -> Value {
    let items: Vec<Value> = items
        .into_iter()
        .map(|mut o| {
            if let Value::Object(m) = &mut o {
                m.remove("kind");
                m.remove("apiVersion");
            }
            o
        })
        .collect();
    json!({
        "kind": info.list_kind(),
        "apiVersion": info.api_version(),
        "metadata": {"resourceVersion": rv.to_string()},
        "items": items,
    })
}

fn scale_of(obj: &Value) -> Value {
    let m = &obj["metadata"];
    let selector = obj["spec"]["selector"]["matchLabels"]
        .as_object()
        .map(|l| {
            l.iter()
                .map(|(k, v)| format!("{k}={}", v.as_str().unwrap_or("")))
                .collect::<Vec<_>>()
                .join(",")
        })
        .unwrap_or_default();
    json!({
        "kind": "Scale",
        "apiVersion": "autoscaling/v1",
        "metadata": {
            "name": m["name"], "namespace": m["namespace"], "uid": m["uid"],
            "resourceVersion": m["resourceVersion"], "creationTimestamp": m["creationTimestamp"],
        },
        "spec": {"replicas": obj["spec"]["replicas"].as_i64().unwrap_or(0)},
        "status": {
            "replicas": obj["status"]["replicas"].as_i64().unwrap_or(0),
            "selector": selector,
        },
    })
}

impl ApiServer {
    pub fn new(
        store: Arc<Store>,
        streams: Option<Arc<dyn PodStreams>>,
        faults: Arc<Faults>,
        auth: Auth,
        cfg: ApiConfig,
    ) -> ApiServer {
        ApiServer {
            store,
            streams,
            faults,
            auth,
            cfg,
            server_address: std::sync::OnceLock::new(),
            request_log: None,
            audit: None,
            impersonator: super::impersonate::Impersonator::default(),
        }
    }

    /// Writes an audit Event per request to `log` from now on.
    pub fn with_audit_log(mut self, log: super::audit::AuditLog) -> ApiServer {
        self.audit = Some(log);
        self
    }

    /// Appends one JSON line per request to `file` from now on:
    /// `{"method","path","target","query","status","upgrade","userAgent"}`,
    /// where `path` is percent-decoded, `target` the raw request-target as
    /// it came, `query` the raw query string, `status`
    /// the answer's (101 for a WebSocket upgrade) and `upgrade` whether the
    /// request asked for a WebSocket. Never headers or bodies (no tokens).
    pub fn with_request_log(mut self, file: std::fs::File) -> ApiServer {
        self.request_log = Some(parking_lot::Mutex::new(file));
        self
    }

    fn log_request(&self, req: &Request, reply: &Reply) {
        let Some(log) = &self.request_log else {
            return;
        };
        let status = match reply {
            Reply::Response(r) => r.status,
            Reply::Upgrade(_) | Reply::RawUpgrade(_) => 101,
        };
        let query = req.target.split_once('?').map_or("", |(_, q)| q);
        let mut line = json!({
            "method": req.method,
            "path": req.path,
            "target": req.target,
            "query": query,
            "status": status,
            "upgrade": req.is_websocket_upgrade(),
            "userAgent": req.header("user-agent").unwrap_or(""),
        })
        .to_string();
        line.push('\n');
        use std::io::Write;
        if let Err(e) = log.lock().write_all(line.as_bytes()) {
            log::warn!("writing the request log: {e}");
        }
    }

    /// Records the bound address that `/api` reports.
    pub fn set_server_address(&self, addr: String) {
        let _ = self.server_address.set(addr);
    }

    fn dispatch(&self, req: &Request) -> Reply {
        let path = req.path.as_str();
        let r = route(path);
        let m = req.method.as_str();
        match r {
            Route::Version if m == "GET" => json_response(200, &discovery::version()).into(),
            Route::Health if m == "GET" => Response::text(200, "ok").into(),
            Route::Faults => self.faults.handle(req).into(),
            Route::OpenApiIndex if m == "GET" => {
                json_response(200, &discovery::openapi_v3_index()).into()
            }
            Route::OpenApiDoc(g) if m == "GET" => match discovery::openapi_v3_doc(g) {
                Some(v) => json_response(200, &v).into(),
                None => not_found_path().into(),
            },
            Route::ApiVersions if m == "GET" => json_response(
                200,
                &discovery::api_versions(
                    self.server_address
                        .get()
                        .map(String::as_str)
                        .unwrap_or("127.0.0.1:6443"),
                ),
            )
            .into(),
            Route::GroupList if m == "GET" => {
                json_response(200, &discovery::api_group_list()).into()
            }
            Route::Group(g) if m == "GET" => match discovery::api_group(g) {
                Some(v) => json_response(200, &v).into(),
                None => not_found_path().into(),
            },
            Route::ResourceList(g, v) if m == "GET" => match discovery::resource_list(g, v) {
                Some(v) => json_response(200, &v).into(),
                None => not_found_path().into(),
            },
            Route::Collection(res, None) if res.is_review() => self.review(req, res).into(),
            Route::Collection(Resource::EventV1, ns) => self.events_v1_collection(req, ns),
            Route::Object(Resource::EventV1, ns, name) => {
                self.events_v1_object(req, ns, name).into()
            }
            Route::Collection(res, ns) => self.collection(req, res, ns),
            Route::Object(res, ns, name) => self.object(req, res, ns, name).into(),
            Route::Sub(res, ns, name, sub) => self.subresource(req, res, ns, name, sub),
            Route::Proxy(ns, name) => self.proxy(req, ns, name),
            Route::NotFound => not_found_path().into(),
            Route::NoHandler => Response::text(404, "404 page not found\n").into(),
            _ => method_not_allowed().into(),
        }
    }

    fn collection(&self, req: &Request, res: Resource, ns: Option<&str>) -> Reply {
        let info = res.info();
        match req.method.as_str() {
            "GET" => {
                // Listing or watching in a missing namespace is an empty
                // result upstream, not an error: only writes need it.
                let sel = match selectors(req, res) {
                    Ok(s) => s,
                    Err(r) => return r.into(),
                };
                if req.query_flag("watch") {
                    return self.watch(req, res, res, ns, sel).into();
                }
                let (items, rv) = self.store.list(res, ns, &sel);
                if table::wants_table(req.header("accept")) {
                    return json_response(200, &table::table(res, &items, rv)).into();
                }
                json_response(200, &list_json(info, items, rv)).into()
            }
            "POST" => {
                let Some(ns) = ns.or((!info.namespaced).then_some("")) else {
                    return method_not_allowed().into();
                };
                let obj = match body_object(req, info) {
                    Ok(o) => o,
                    Err(r) => return r.into(),
                };
                if dry_run(req) {
                    return json_response(201, &obj).into();
                }
                let writer = match update_writer(req, "CreateOptions") {
                    Ok(w) => w,
                    Err(r) => return r.into(),
                };
                match managed::with_writer(writer, || self.store.create(res, ns, obj)) {
                    Ok(o) => json_response(201, &o).into(),
                    Err(e) => store_error(e).into(),
                }
            }
            "DELETE" => {
                let Some(ns) = ns.or((!info.namespaced).then_some("")) else {
                    return method_not_allowed().into();
                };
                let sel = match selectors(req, res) {
                    Ok(s) => s,
                    Err(r) => return r.into(),
                };
                let opts = match delete_options(req) {
                    Ok(o) => o,
                    Err(r) => return r.into(),
                };
                let (items, _) = self.store.list(res, Some(ns), &sel);
                let mut deleted = Vec::new();
                for o in items {
                    let name = o["metadata"]["name"].as_str().unwrap_or("").to_string();
                    match self.delete_one(res, ns, &name, &opts) {
                        Ok(v) => deleted.push(v),
                        Err(StoreError::NotFound { .. }) => {}
                        Err(e) => return store_error(e).into(),
                    }
                }
                let rv = self.store.current_rv();
                json_response(200, &list_json(info, deleted, rv)).into()
            }
            _ => method_not_allowed().into(),
        }
    }

    fn object(&self, req: &Request, res: Resource, ns: &str, name: &str) -> Response {
        let info = res.info();
        match req.method.as_str() {
            "GET" => match self.store.get(res, ns, name) {
                Ok(o) if table::wants_table(req.header("accept")) => {
                    let rv = super::store::obj_rv(&o);
                    json_response(200, &table::table(res, &[o], rv))
                }
                Ok(o) => json_response(200, &o),
                Err(e) => store_error(e),
            },
            "PUT" => {
                let obj = match body_object(req, info) {
                    Ok(o) => o,
                    Err(r) => return r,
                };
                if dry_run(req) {
                    return json_response(200, &obj);
                }
                let writer = match update_writer(req, "UpdateOptions") {
                    Ok(w) => w,
                    Err(r) => return r,
                };
                match managed::with_writer(writer, || {
                    self.store.update_or_create(res, ns, name, obj)
                }) {
                    Ok((o, created)) => json_response(if created { 201 } else { 200 }, &o),
                    Err(e) => store_error(e),
                }
            }
            "PATCH" if is_apply(req) => self.apply(req, res, ns, name),
            "PATCH" => {
                let pt = match patch_type(req) {
                    Ok(p) => p,
                    Err(r) => return r,
                };
                if req.query("force").is_some() {
                    return options_invalid(
                        "PatchOptions",
                        "force",
                        "FieldValueForbidden",
                        "Forbidden: may not be specified for non-apply patch",
                    );
                }
                let writer = match update_writer(req, "PatchOptions") {
                    Ok(w) => w,
                    Err(r) => return r,
                };
                match managed::with_writer(writer, || {
                    self.store
                        .patch(res, ns, name, pt, &req.body, Subresource::Main)
                }) {
                    Ok(o) => json_response(200, &o),
                    Err(e) => store_error(e),
                }
            }
            "DELETE" => {
                let opts = match delete_options(req) {
                    Ok(o) => o,
                    Err(r) => return r,
                };
                match self.delete_one(res, ns, name, &opts) {
                    Ok(o) => {
                        // Kinds whose registry sets `ReturnDeletedObject`.
                        if matches!(
                            res,
                            Resource::Pod
                                | Resource::Service
                                | Resource::Namespace
                                | Resource::ServiceAccount
                                | Resource::PersistentVolumeClaim
                        ) {
                            json_response(200, &o)
                        } else {
                            let uid = o["metadata"]["uid"].as_str().unwrap_or("");
                            status_response(&Status::success_delete(
                                info.group,
                                info.plural,
                                name,
                                uid,
                            ))
                        }
                    }
                    Err(e) => store_error(e),
                }
            }
            _ => method_not_allowed(),
        }
    }

    /// A server-side apply (`application/apply-patch+yaml`;
    /// docs/sim.md#server-side-apply): `fieldManager` required, `force`
    /// taken, the body read as JSON (the sim has no YAML decoder; kubectl
    /// and client libraries send JSON), created when absent (201).
    fn apply(&self, req: &Request, res: Resource, ns: &str, name: &str) -> Response {
        let Some(manager) = req.query("fieldManager").filter(|m| !m.is_empty()) else {
            return options_invalid(
                "PatchOptions",
                "fieldManager",
                "FieldValueRequired",
                "Required value: is required for apply patch",
            );
        };
        if let Some((reason, body)) = managed::check_field_manager(manager) {
            return options_invalid("PatchOptions", "fieldManager", reason, &body);
        }
        let force = req.query_flag("force");
        let applied: Value = match serde_json::from_slice(&req.body) {
            Ok(v @ Value::Object(_)) => v,
            Ok(_) => return bad_request("error decoding YAML: the apply patch must be an object"),
            Err(e) => {
                return bad_request(&format!(
                    "error decoding YAML: the sim reads apply patches as JSON only: {e}"
                ))
            }
        };
        let kind = applied["kind"].as_str().unwrap_or("");
        let api_version = applied["apiVersion"].as_str().unwrap_or("");
        if kind.is_empty() || api_version.is_empty() {
            let (g, v) = api_version.rsplit_once('/').unwrap_or(("", api_version));
            return bad_request(&format!("invalid object type: {g}/{v}, Kind={kind}"));
        }
        if dry_run(req) {
            let live = self.store.get(res, ns, name).ok();
            return match managed::apply(res, live.as_ref(), &applied, manager, force) {
                Ok(o) => json_response(if live.is_some() { 200 } else { 201 }, &o),
                Err(e) => store_error(e),
            };
        }
        match self.store.apply(res, ns, name, applied, manager, force) {
            Ok((o, created)) => json_response(if created { 201 } else { 200 }, &o),
            Err(e) => store_error(e),
        }
    }

    fn delete_one(
        &self,
        res: Resource,
        ns: &str,
        name: &str,
        opts: &DeleteOptions,
    ) -> Result<Value, StoreError> {
        lifecycle::delete(&self.store, res, ns, name, opts)
    }

    fn subresource(&self, req: &Request, res: Resource, ns: &str, name: &str, sub: &str) -> Reply {
        let info = res.info();
        if !info.subresources.contains(&sub) {
            return not_found_path().into();
        }
        match (sub, req.method.as_str()) {
            ("status", "GET") => self.object(req, res, ns, name).into(),
            ("status", "PUT") => {
                let obj = match body_object(req, info) {
                    Ok(o) => o,
                    Err(r) => return r.into(),
                };
                match self.store.update(res, ns, name, obj, Subresource::Status) {
                    Ok(o) => json_response(200, &o).into(),
                    Err(e) => store_error(e).into(),
                }
            }
            ("status", "PATCH") => {
                let pt = match patch_type(req) {
                    Ok(p) => p,
                    Err(r) => return r.into(),
                };
                match self
                    .store
                    .patch(res, ns, name, pt, &req.body, Subresource::Status)
                {
                    Ok(o) => json_response(200, &o).into(),
                    Err(e) => store_error(e).into(),
                }
            }
            ("scale", _) => self.scale(req, res, ns, name).into(),
            ("exec", "GET" | "POST") => match &self.streams {
                Some(s) => s.exec(req, ns, name),
                None => no_kubelet(),
            },
            ("attach", "GET" | "POST") => match &self.streams {
                Some(s) => s.attach(req, ns, name),
                None => no_kubelet(),
            },
            ("portforward", "GET" | "POST") => match &self.streams {
                Some(s) => s.port_forward(req, ns, name),
                None => no_kubelet(),
            },
            ("log", "GET") => match &self.streams {
                Some(s) => s.log(req, ns, name),
                None => no_kubelet(),
            },
            _ => method_not_allowed().into(),
        }
    }

    fn scale(&self, req: &Request, res: Resource, ns: &str, name: &str) -> Response {
        let current = match self.store.get(res, ns, name) {
            Ok(o) => o,
            Err(e) => return store_error(e),
        };
        let desired: i64 = match req.method.as_str() {
            "GET" => return json_response(200, &scale_of(&current)),
            "PUT" => {
                let v: Value = match serde_json::from_slice(&req.body) {
                    Ok(v) => v,
                    Err(e) => return bad_request(&format!("invalid Scale: {e}")),
                };
                if let Some(rv) = v["metadata"]["resourceVersion"].as_str() {
                    if Some(rv) != current["metadata"]["resourceVersion"].as_str() {
                        return store_error(StoreError::Conflict {
                            resource: res,
                            name: name.to_string(),
                            message: "the object has been modified; please apply your changes to the latest version and try again".into(),
                        });
                    }
                }
                match v["spec"]["replicas"].as_i64() {
                    Some(n) => n,
                    None => return bad_request("Scale spec.replicas is required"),
                }
            }
            "PATCH" => {
                let pt = match patch_type(req) {
                    Ok(p) => p,
                    Err(r) => return r,
                };
                let scale = scale_of(&current);
                match super::patch::apply(pt, &scale, &req.body) {
                    Ok(v) => match v["spec"]["replicas"].as_i64() {
                        Some(n) => n,
                        None => return bad_request("Scale spec.replicas is required"),
                    },
                    Err(super::patch::PatchError::BadRequest(m)) => return bad_request(&m),
                    Err(super::patch::PatchError::Unprocessable(m)) => {
                        return store_error(StoreError::PatchNotApplicable(m))
                    }
                }
            }
            _ => return method_not_allowed(),
        };
        if desired < 0 {
            return status_response(&Status::invalid_message(
                "spec.replicas: Invalid value: must be greater than or equal to 0",
            ));
        }
        match self.store.modify(res, ns, name, &mut |o: &mut Value| {
            o["spec"]["replicas"] = json!(desired);
            Ok(())
        }) {
            Ok(o) => json_response(200, &scale_of(&o)),
            Err(e) => store_error(e),
        }
    }

    fn proxy(&self, req: &Request, ns: &str, name_port: &str) -> Reply {
        let Some(streams) = &self.streams else {
            return no_kubelet();
        };
        // `name`, `name:port` or `scheme:name:port`.
        let parts: Vec<&str> = name_port.split(':').collect();
        let (name, port) = match parts.as_slice() {
            [n] => (*n, None),
            [n, p] => (*n, Some(*p)),
            [_scheme, n, p] => (*n, Some(*p)),
            _ => return bad_request(&format!("invalid pod proxy target {name_port:?}")).into(),
        };
        let port: u16 = match port {
            None => 80,
            Some(p) => match p.parse() {
                Ok(p) => p,
                Err(_) => return bad_request(&format!("invalid port {p:?}")).into(),
            },
        };
        // Decoded, cleaned and encoded again as upstream does; control
        // characters refused (docs/sim.md "Pod proxy").
        let target = match super::proxy::pod_target(&req.target) {
            Ok(t) => t,
            Err(m) => return bad_request(&m.to_string()).into(),
        };
        streams.proxy(req, ns, name, port, &target)
    }

    /// A watch on the store's `res`, shown as `view` (the same kind, or
    /// [`Resource::EventV1`] over the core Events).
    fn watch(
        &self,
        req: &Request,
        res: Resource,
        view: Resource,
        ns: Option<&str>,
        sel: Selectors,
    ) -> Response {
        let from = match req.query("resourceVersion") {
            None | Some("") | Some("0") => WatchFrom::InitialAdded,
            Some(v) => match v.parse::<u64>() {
                Ok(n) => WatchFrom::Rv(n),
                Err(_) => {
                    return status_response(&Status::invalid_message(&format!(
                        "resourceVersion: Invalid value: {v:?}: must be a valid resource version"
                    )))
                }
            },
        };
        if req.query_flag("sendInitialEvents") {
            return status_response(&Status::invalid_message(
                "sendInitialEvents: Forbidden: sendInitialEvents is not supported by this server",
            ));
        }
        let timeout = match req.query("timeoutSeconds") {
            Some(t) => match t.parse::<u64>() {
                Ok(s) => Duration::from_secs(s),
                Err(_) => return bad_request(&format!("invalid timeoutSeconds {t:?}")),
            },
            None => {
                let (lo, hi) = self.cfg.default_watch_timeout;
                let span = hi.saturating_sub(lo).as_secs().max(1);
                lo + Duration::from_secs(rand::random::<u64>() % span)
            }
        };
        let bookmarks = req.query_flag("allowWatchBookmarks");
        let as_table = table::wants_table(req.header("accept"));
        let info = view.info();
        let converted = view != res;
        let start_rv = self.store.current_rv();
        let stream = match self.store.watch(res, ns, sel, from) {
            Ok(s) => s,
            Err(StoreError::Expired(msg)) => {
                let ev = crate::kube::watch::error_event(&Status::expired(&msg));
                return Response::stream(
                    200,
                    "application/json",
                    Box::new(move |sink: &mut dyn ChunkSink| sink.send(&ev)),
                );
            }
            Err(e) => return store_error(e),
        };
        let interval = self.cfg.bookmark_interval;
        let faults = self.faults.clone();
        let epoch = faults.watch_epoch();
        let api_version = info.api_version();
        let kind = info.kind;
        Response::stream(
            200,
            "application/json",
            Box::new(move |sink: &mut dyn ChunkSink| {
                let started = Instant::now();
                let deadline = started + timeout;
                let mut last_rv = start_rv;
                let mut last_bookmark = Instant::now();
                loop {
                    let now = Instant::now();
                    if now >= deadline {
                        if bookmarks {
                            let _ = sink.send(&crate::kube::watch::bookmark_event(
                                &api_version,
                                kind,
                                &last_rv.to_string(),
                            ));
                        }
                        return Ok(());
                    }
                    let wait = (deadline - now).min(Duration::from_millis(500));
                    match stream.recv_timeout(wait) {
                        Ok(ev) => {
                            last_rv = last_rv.max(ev.rv);
                            if as_table {
                                let t = table::table(res, std::slice::from_ref(&ev.object), ev.rv);
                                let mut line = serde_json::to_vec(
                                    &json!({"type": ev.ty.as_str(), "object": t}),
                                )
                                .unwrap_or_default();
                                line.push(b'\n');
                                sink.send(&line)?;
                            } else if converted {
                                let object = super::events::to_events_v1(&ev.object);
                                let mut line = serde_json::to_vec(
                                    &json!({"type": ev.ty.as_str(), "object": object}),
                                )
                                .unwrap_or_default();
                                line.push(b'\n');
                                sink.send(&line)?;
                            } else {
                                sink.send(&encode(&ev))?;
                            }
                        }
                        Err(RecvTimeoutError::Timeout) => {
                            if sink.peer_closed() || faults.watch_epoch() != epoch {
                                return Ok(());
                            }
                            last_rv = last_rv.max(stream.rv());
                            if bookmarks && last_bookmark.elapsed() >= interval {
                                last_bookmark = Instant::now();
                                sink.send(&crate::kube::watch::bookmark_event(
                                    &api_version,
                                    kind,
                                    &last_rv.to_string(),
                                ))?;
                            }
                        }
                        // The store ended this watcher (its queue overflowed):
                        // end cleanly, the client re-watches from its last RV.
                        Err(RecvTimeoutError::Disconnected) => return Ok(()),
                    }
                    if faults.watch_epoch() != epoch {
                        return Ok(());
                    }
                }
            }),
        )
    }
}

fn encode(ev: &Event) -> Vec<u8> {
    ev.line().to_vec()
}

fn dry_run(req: &Request) -> bool {
    req.query("dryRun").is_some_and(|v| v == "All")
}

fn not_found_path() -> Response {
    status_response(&Status::not_found_message(
        "the server could not find the requested resource",
    ))
}

fn no_kubelet() -> Reply {
    status_response(&Status::internal_error(
        "no kubelet is attached to this API server",
    ))
    .into()
}

impl Handler for ApiServer {
    /// Authentication from the head (`api::gate`): a stranger's body is
    /// never read. Impersonation and authorization, which read the store,
    /// run on the connection's thread in `handle`, not on the listener's.
    fn admit(&self, head: &Request) -> crate::http::Admission {
        if let super::authn::Authn::User(_) = self.auth.authenticate(head) {
            return crate::http::Admission::Admit(crate::http::Admit {
                known: true,
                ..crate::http::Admit::default()
            });
        }
        let Err(refused) = self.gate(head) else {
            return crate::http::Admission::Admit(crate::http::Admit::default());
        };
        let refused = *refused;
        let reply: Reply = refused.response.into();
        self.log_request(head, &reply);
        self.audit(head, &refused.who, &reply, refused.failure);
        match reply {
            Reply::Response(r) => crate::http::Admission::Refuse(r),
            Reply::Upgrade(_) | Reply::RawUpgrade(_) => {
                crate::http::Admission::Admit(crate::http::Admit::default())
            }
        }
    }

    fn handle(&self, mut req: Request) -> Reply {
        let (reply, who, failure) = match self.gate(&req) {
            Err(refused) => {
                let refused = *refused;
                (refused.response.into(), refused.who, refused.failure)
            }
            Ok(who) => {
                // The reviews answer for this caller (`api::review`).
                req.admitted = crate::http::Context(Some(Arc::new(who.clone())));
                match self.faults.before_request(&req) {
                    Some(r) => (r.into(), who, None),
                    None => (self.dispatch(&req), who, None),
                }
            }
        };
        self.log_request(&req, &reply);
        self.audit(&req, &who, &reply, failure);
        reply
    }

    fn error_response(&self, err: &HttpError) -> Response {
        let s = match err {
            HttpError::BodyTooLarge { limit } => Status::request_entity_too_large(&format!(
                "the request body is larger than the limit of {limit} bytes"
            )),
            HttpError::HeadersTooLarge => Status::bad_request("request headers too large"),
            HttpError::BadRequest(m) => Status::bad_request(m),
            HttpError::Overloaded | HttpError::Busy | HttpError::TooManyConnections => {
                Status::too_many_requests(1)
            }
            HttpError::Internal => Status::internal_error("internal error"),
        };
        let mut r = status_response(&s);
        r.status = err.status();
        r
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn routes_paths() {
        assert_eq!(route("/version"), Route::Version);
        assert_eq!(route("/api"), Route::ApiVersions);
        assert_eq!(route("/api/v1"), Route::ResourceList("", "v1"));
        assert_eq!(route("/apis/apps/v1"), Route::ResourceList("apps", "v1"));
        assert_eq!(
            route("/api/v1/pods"),
            Route::Collection(Resource::Pod, None)
        );
        assert_eq!(
            route("/api/v1/namespaces/default/pods"),
            Route::Collection(Resource::Pod, Some("default"))
        );
        assert_eq!(
            route("/api/v1/namespaces/default/pods/x/exec"),
            Route::Sub(Resource::Pod, "default", "x", "exec")
        );
        assert_eq!(
            route("/api/v1/namespaces"),
            Route::Collection(Resource::Namespace, None)
        );
        assert_eq!(
            route("/api/v1/namespaces/demo"),
            Route::Object(Resource::Namespace, "", "demo")
        );
        assert_eq!(
            route("/api/v1/namespaces/demo/status"),
            Route::Sub(Resource::Namespace, "", "demo", "status")
        );
        assert_eq!(
            route("/apis/apps/v1/namespaces/d/deployments/web/scale"),
            Route::Sub(Resource::Deployment, "d", "web", "scale")
        );
        assert_eq!(
            route("/api/v1/namespaces/d/pods/web:8080/proxy/a/b"),
            Route::Proxy("d", "web:8080")
        );
        assert_eq!(route("/apis/apps/v1/pods"), Route::NotFound);
        assert_eq!(route("/api/v1/namespaces/d/widgets"), Route::NotFound);
    }
}
