//! The `events.k8s.io/v1` Events: a view of the core Events the store
//! keeps (docs/sim.md#events), bodies, lists, watches, patches and errors
//! converted through `sim::events`.

use super::*;

/// A store error on the core Events as the `events.k8s.io/v1` view words
/// it: the resource is `events.events.k8s.io` (an `Invalid` keeps the core
/// kind, as upstream's does: `Event "x" is invalid`).
fn events_v1_error(e: StoreError) -> StoreError {
    let view = |resource: Resource| {
        if resource == Resource::Event {
            Resource::EventV1
        } else {
            resource
        }
    };
    match e {
        StoreError::NotFound { resource, name } => StoreError::NotFound {
            resource: view(resource),
            name,
        },
        StoreError::AlreadyExists { resource, name } => StoreError::AlreadyExists {
            resource: view(resource),
            name,
        },
        StoreError::Conflict {
            resource,
            name,
            message,
        } => StoreError::Conflict {
            resource: view(resource),
            name,
            message,
        },
        StoreError::Forbidden {
            resource,
            name,
            message,
        } => StoreError::Forbidden {
            resource: view(resource),
            name,
            message,
        },
        StoreError::Invalid {
            resource: Resource::EventV1,
            name,
            causes,
        } => StoreError::Invalid {
            resource: Resource::Event,
            name,
            causes,
        },
        other => other,
    }
}

impl ApiServer {
    /// `events.k8s.io/v1` Events, a view of the core ones the store keeps
    /// (docs/sim.md#events): bodies converted in and out, selectors mapped
    /// to the core fields, upstream's stricter validation for this group.
    pub(super) fn events_v1_collection(&self, req: &Request, ns: Option<&str>) -> Reply {
        let view = Resource::EventV1;
        let info = view.info();
        let ev1 = |o: &Value| crate::sim::events::to_events_v1(o);
        match req.method.as_str() {
            "GET" => {
                let sel = match selectors(req, view) {
                    Ok(s) => s,
                    Err(r) => return r.into(),
                };
                if req.query_flag("watch") {
                    return self.watch(req, Resource::Event, view, ns, sel).into();
                }
                let (items, rv) = self.store.list(Resource::Event, ns, &sel);
                if table::wants_table(req.header("accept")) {
                    return json_response(200, &table::table(view, &items, rv)).into();
                }
                json_response(200, &list_json(info, items.iter().map(ev1).collect(), rv)).into()
            }
            "POST" => {
                let Some(ns) = ns else {
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
                match managed::with_writer(writer, || self.write_event_v1(ns, None, obj)) {
                    Ok((o, _)) => json_response(201, &ev1(&o)).into(),
                    Err(e) => store_error(e).into(),
                }
            }
            "DELETE" => {
                let Some(ns) = ns else {
                    return method_not_allowed().into();
                };
                let sel = match selectors(req, view) {
                    Ok(s) => s,
                    Err(r) => return r.into(),
                };
                let opts = match delete_options(req) {
                    Ok(o) => o,
                    Err(r) => return r.into(),
                };
                let (items, _) = self.store.list(Resource::Event, Some(ns), &sel);
                let mut deleted = Vec::new();
                for o in items {
                    let name = o["metadata"]["name"].as_str().unwrap_or("").to_string();
                    match self.delete_one(Resource::Event, ns, &name, &opts) {
                        Ok(v) => deleted.push(ev1(&v)),
                        Err(StoreError::NotFound { .. }) => {}
                        Err(e) => return store_error(events_v1_error(e)).into(),
                    }
                }
                let rv = self.store.current_rv();
                json_response(200, &list_json(info, deleted, rv)).into()
            }
            _ => method_not_allowed().into(),
        }
    }

    pub(super) fn events_v1_object(&self, req: &Request, ns: &str, name: &str) -> Response {
        let view = Resource::EventV1;
        let info = view.info();
        let ev1 = |o: &Value| crate::sim::events::to_events_v1(o);
        match req.method.as_str() {
            "GET" => match self.store.get(Resource::Event, ns, name) {
                Ok(o) if table::wants_table(req.header("accept")) => {
                    let rv = crate::sim::store::obj_rv(&o);
                    json_response(200, &table::table(view, &[o], rv))
                }
                Ok(o) => json_response(200, &ev1(&o)),
                Err(e) => store_error(events_v1_error(e)),
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
                match managed::with_writer(writer, || self.write_event_v1(ns, Some(name), obj)) {
                    Ok((o, created)) => json_response(if created { 201 } else { 200 }, &ev1(&o)),
                    Err(e) => store_error(e),
                }
            }
            "PATCH" => {
                let pt = match patch_type(req) {
                    Ok(p) => p,
                    Err(r) => return r,
                };
                let stored = match self.store.get(Resource::Event, ns, name) {
                    Ok(o) => o,
                    Err(e) => return store_error(events_v1_error(e)),
                };
                let patched = match crate::sim::patch::apply(pt, &ev1(&stored), &req.body) {
                    Ok(v) => v,
                    Err(crate::sim::patch::PatchError::BadRequest(m)) => return bad_request(&m),
                    Err(crate::sim::patch::PatchError::Unprocessable(m)) => {
                        return store_error(StoreError::Invalid {
                            resource: Resource::Event,
                            name: name.to_string(),
                            causes: vec![crate::sim::store::FieldCause::new(
                                crate::sim::store::CauseKind::Invalid,
                                "",
                                None,
                                m,
                            )],
                        })
                    }
                };
                let writer = match update_writer(req, "PatchOptions") {
                    Ok(w) => w,
                    Err(r) => return r,
                };
                match managed::with_writer(writer, || self.write_event_v1(ns, Some(name), patched))
                {
                    Ok((o, _)) => json_response(200, &ev1(&o)),
                    Err(e) => store_error(e),
                }
            }
            "DELETE" => {
                let opts = match delete_options(req) {
                    Ok(o) => o,
                    Err(r) => return r,
                };
                match self.delete_one(Resource::Event, ns, name, &opts) {
                    Ok(o) => {
                        let uid = o["metadata"]["uid"].as_str().unwrap_or("");
                        status_response(&Status::success_delete(info.group, info.plural, name, uid))
                    }
                    Err(e) => store_error(events_v1_error(e)),
                }
            }
            _ => method_not_allowed(),
        }
    }

    /// An `events.k8s.io/v1` body written as a core Event: decoded and
    /// converted, checked by upstream's rules for this group (which word
    /// some fields differently), then created (`name` None) or put; the
    /// flag says whether it was created.
    fn write_event_v1(
        &self,
        ns: &str,
        name: Option<&str>,
        body: Value,
    ) -> Result<(Value, bool), StoreError> {
        use crate::sim::events::{self, Version};
        let body =
            crate::sim::store::check_body(Resource::EventV1, body).map_err(events_v1_error)?;
        let mut core = events::to_core(body);
        if let Some(m) = core["metadata"].as_object_mut() {
            m.entry("namespace").or_insert_with(|| json!(ns));
        }
        let old = match name {
            Some(n) => match self.store.get(Resource::Event, ns, n) {
                Ok(o) => Some(o),
                Err(StoreError::NotFound { .. }) => None,
                Err(e) => return Err(events_v1_error(e)),
            },
            None => None,
        };
        let mut causes = Vec::new();
        match &old {
            Some(o) => events::validate_update(&core, o, Version::EventsV1, &mut causes),
            None => events::validate_create(&core, Version::EventsV1, &mut causes),
        }
        if !causes.is_empty() {
            return Err(StoreError::Invalid {
                resource: Resource::Event,
                name: core["metadata"]["name"].as_str().unwrap_or("").to_string(),
                causes,
            });
        }
        let written = match name {
            None => self
                .store
                .create(Resource::Event, ns, core)
                .map(|o| (o, true)),
            Some(n) => self.store.update_or_create(Resource::Event, ns, n, core),
        };
        written.map_err(events_v1_error)
    }
}
