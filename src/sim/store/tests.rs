//! Store behaviour tests: CRUD semantics, concurrency control, patches through
//! the store, and watch delivery (resume, expiry, selection transitions,
//! overflow, concurrent writers).

use super::*;
use serde_json::json;
use std::time::{Duration, Instant};

/// A store without ServiceAccounts, so each test's resourceVersions count
/// only its own objects (`service_accounts_come_with_namespaces` covers
/// them).
fn store() -> Arc<Store> {
    Store::new(StoreConfig {
        service_accounts: false,
        ..StoreConfig::default()
    })
}

/// A store holding the pod `default/p`, and that pod as created.
fn store_with_pod() -> (Arc<Store>, Obj) {
    let s = store();
    let p = s.create(Resource::Pod, "default", pod("p")).unwrap();
    (s, p)
}

fn small(history: usize, queue: usize) -> Arc<Store> {
    Store::new(StoreConfig {
        history_window: history,
        watch_queue: queue,
        service_accounts: false,
    })
}

fn pod(name: &str) -> Obj {
    json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "labels": {"app": "web"}},
           "spec": {"containers": [{"name": "main", "image": "busybox"}]}})
}

fn cm(name: &str) -> Obj {
    json!({"metadata": {"name": name}, "data": {"k": "v"}})
}

fn everything() -> Selectors {
    Selectors::default()
}

fn sel(res: Resource, label: &str, field: &str) -> Selectors {
    Selectors::parse(res, Some(label), Some(field)).unwrap()
}

const T: Duration = Duration::from_secs(2);
const SHORT: Duration = Duration::from_millis(30);

fn next(w: &WatchStream) -> Arc<Event> {
    w.recv_timeout(T).expect("event")
}

fn none(w: &WatchStream) {
    match w.recv_timeout(SHORT) {
        Err(RecvTimeoutError::Timeout) => {}
        other => panic!("expected no event, got {other:?}"),
    }
}

/// `s.patch` of the pod `name` in `default`.
fn patch_pod(
    s: &Store,
    name: &str,
    ty: PatchType,
    body: &[u8],
    sub: Subresource,
) -> Result<Obj, StoreError> {
    s.patch(Resource::Pod, "default", name, ty, body, sub)
}

fn name(o: &Obj) -> &str {
    meta_str(o, "name")
}

// ---------------------------------------------------------------- create

#[test]
fn starts_with_default_namespaces() {
    let s = store();
    assert_eq!(s.current_rv(), 2);
    let (items, rv) = s.list(Resource::Namespace, None, &everything());
    assert_eq!(rv, 2);
    let names: Vec<&str> = items.iter().map(name).collect();
    assert_eq!(names, ["default", "kube-system"]);
    assert_eq!(items[0]["status"]["phase"], "Active");
    assert_eq!(
        items[0]["metadata"]["labels"]["kubernetes.io/metadata.name"],
        "default"
    );
    assert_eq!(items[0]["kind"], "Namespace");
}

#[test]
fn create_fills_identity_and_defaults() {
    let s = store();
    let p = s.create(Resource::Pod, "default", pod("p1")).unwrap();
    let m = &p["metadata"];
    assert_eq!(m["namespace"], "default");
    assert_eq!(m["resourceVersion"], "3");
    assert_eq!(m["generation"], 1);
    let uid = m["uid"].as_str().unwrap();
    assert_eq!(uid.len(), 36);
    assert_eq!(&uid[14..15], "4");
    assert!(m["creationTimestamp"].as_str().unwrap().ends_with('Z'));
    assert_eq!(
        p["status"],
        json!({"phase": "Pending", "qosClass": "BestEffort"})
    );
    assert_eq!(p["spec"]["restartPolicy"], "Always");
    assert_eq!(s.get(Resource::Pod, "default", "p1").unwrap(), p);
    assert_eq!(s.current_rv(), 3);
    // kind and apiVersion filled when absent; no generation for configmaps.
    let c = s.create(Resource::ConfigMap, "default", cm("c")).unwrap();
    assert_eq!(c["kind"], "ConfigMap");
    assert_eq!(c["apiVersion"], "v1");
    assert!(c["metadata"].get("generation").is_none());
    let d = s
        .create(
            Resource::Deployment,
            "default",
            json!({"metadata": {"name": "d"}, "spec": {"selector": {"matchLabels": {"a": "b"}},
                   "template": {"metadata": {"labels": {"a": "b"}}, "spec": {"containers": [{"name": "c", "image": "i"}]}}}}),
        )
        .unwrap();
    assert_eq!(d["apiVersion"], "apps/v1");
}

#[test]
fn create_errors() {
    let s = store();
    let e = s.create(Resource::Pod, "nope", pod("p")).unwrap_err();
    assert_eq!(
        e,
        StoreError::NotFound {
            resource: Resource::Namespace,
            name: "nope".into()
        }
    );
    assert_eq!(e.message(), r#"namespaces "nope" not found"#);
    let mut bad = pod("p");
    bad["kind"] = json!("Service");
    assert!(matches!(
        s.create(Resource::Pod, "default", bad),
        Err(StoreError::BadRequest(_))
    ));
    let mut bad = pod("p");
    bad["apiVersion"] = json!("apps/v1");
    let e = s.create(Resource::Pod, "default", bad).unwrap_err();
    assert_eq!(
        e.message(),
        "the API version in the data (apps/v1) does not match the expected API version (v1)"
    );
    assert!(matches!(
        s.create(Resource::Pod, "default", json!([1])),
        Err(StoreError::BadRequest(_))
    ));
    assert!(matches!(
        s.create(Resource::Pod, "default", json!({"metadata": {"name": 5}})),
        Err(StoreError::BadRequest(_))
    ));
    assert!(matches!(
        s.create(
            Resource::Pod,
            "default",
            json!({"metadata": {"name": "x", "labels": {"a": 1}}})
        ),
        Err(StoreError::BadRequest(_))
    ));
    let mut with_ns = pod("p");
    with_ns["metadata"]["namespace"] = json!("kube-system");
    assert!(matches!(
        s.create(Resource::Pod, "default", with_ns),
        Err(StoreError::BadRequest(_))
    ));
    let mut with_rv = pod("p");
    with_rv["metadata"]["resourceVersion"] = json!("7");
    assert!(matches!(
        s.create(Resource::Pod, "default", with_rv),
        Err(StoreError::BadRequest(_))
    ));
    let e = s
        .create(Resource::Pod, "default", json!({"metadata": {}}))
        .unwrap_err();
    let StoreError::Invalid { causes, .. } = &e else {
        panic!("{e:?}")
    };
    assert_eq!(
        causes[0].message(),
        "metadata.name: Required value: name or generateName is required"
    );
    let e = s
        .create(Resource::ConfigMap, "default", cm("Bad_Name"))
        .unwrap_err();
    assert!(
        e.message().starts_with(r#"ConfigMap "Bad_Name" is invalid: metadata.name: Invalid value: "Bad_Name": a lowercase RFC 1123 subdomain must consist of"#),
        "{}",
        e.message()
    );
    s.create(Resource::Pod, "default", pod("p")).unwrap();
    let e = s.create(Resource::Pod, "default", pod("p")).unwrap_err();
    assert_eq!(e.message(), r#"pods "p" already exists"#);
    assert_eq!(e.code(), 409);
    // the same name in another namespace is fine
    s.create(Resource::Pod, "kube-system", pod("p")).unwrap();
    // failed creates do not consume RVs or emit events
    assert_eq!(s.current_rv(), 4);
}

#[test]
fn create_drops_client_identity_and_deletion_fields() {
    let s = store();
    let mut p = pod("p");
    p["metadata"]["uid"] = json!("mine");
    p["metadata"]["deletionTimestamp"] = json!("2020-01-01T00:00:00Z");
    p["metadata"]["generation"] = json!(9);
    let p = s.create(Resource::Pod, "default", p).unwrap();
    assert_ne!(p["metadata"]["uid"], "mine");
    assert!(p["metadata"].get("deletionTimestamp").is_none());
    assert_eq!(p["metadata"]["generation"], 1);
}

#[test]
fn generate_name() {
    let s = store();
    let mut names = std::collections::HashSet::new();
    for _ in 0..50 {
        let o = s
            .create(
                Resource::ConfigMap,
                "default",
                json!({"metadata": {"generateName": "web-"}}),
            )
            .unwrap();
        let n = name(&o).to_string();
        assert!(n.starts_with("web-") && n.len() == 9, "{n}");
        assert!(n[4..]
            .chars()
            .all(|c| "bcdfghjklmnpqrstvwxz2456789".contains(c)));
        assert!(names.insert(n));
    }
    // A long base is cut so the name stays a valid 63-char label.
    let o = s
        .create(
            Resource::Pod,
            "default",
            json!({"metadata": {"generateName": "a".repeat(70)},
            "spec": {"containers": [{"name": "c", "image": "i"}]}}),
        )
        .unwrap();
    assert_eq!(name(&o).len(), 63);
}

#[test]
fn namespaces_cluster_scoped_and_terminating() {
    let s = store();
    let n = s
        .create(
            Resource::Namespace,
            "ignored",
            json!({"metadata": {"name": "team-a", "namespace": "x"}}),
        )
        .unwrap();
    assert!(n["metadata"].get("namespace").is_none());
    assert!(s.get(Resource::Namespace, "whatever", "team-a").is_ok());
    let e = s
        .create(
            Resource::Namespace,
            "",
            json!({"metadata": {"name": "a.b"}}),
        )
        .unwrap_err();
    assert!(e.message().contains("RFC 1123 label"), "{}", e.message());
    s.modify(Resource::Namespace, "", "team-a", &mut |o| {
        o["status"]["phase"] = json!("Terminating");
        Ok(())
    })
    .unwrap();
    let e = s.create(Resource::Pod, "team-a", pod("p")).unwrap_err();
    assert_eq!(e.code(), 403);
    assert_eq!(
        e.message(),
        r#"pods "p" is forbidden: unable to create new content in namespace team-a because it is being terminated"#
    );
}

// ---------------------------------------------------------------- update

#[test]
fn update_semantics() {
    let (s, p) = store_with_pod();
    // name mismatch
    let mut other = p.clone();
    other["metadata"]["name"] = json!("q");
    let e = s
        .update(Resource::Pod, "default", "p", other, Subresource::Main)
        .unwrap_err();
    assert_eq!(
        e,
        StoreError::BadRequest(
            "the name of the object (q) does not match the name on the URL (p)".into()
        )
    );
    // label change with the current RV
    let mut up = p.clone();
    up["metadata"]["labels"]["x"] = json!("1");
    up["status"] = json!({"phase": "Running"});
    up["metadata"]["creationTimestamp"] = json!("1999-01-01T00:00:00Z");
    let u = s
        .update(Resource::Pod, "default", "p", up.clone(), Subresource::Main)
        .unwrap();
    assert_eq!(u["metadata"]["resourceVersion"], "4");
    assert_eq!(u["metadata"]["labels"]["x"], "1");
    assert_eq!(
        u["status"]["phase"], "Pending",
        "status ignored on the main resource"
    );
    assert_eq!(
        u["metadata"]["creationTimestamp"],
        p["metadata"]["creationTimestamp"]
    );
    assert_eq!(u["metadata"]["uid"], p["metadata"]["uid"]);
    assert_eq!(
        u["metadata"]["generation"], 1,
        "metadata-only change keeps generation"
    );
    // stale RV
    let e = s
        .update(Resource::Pod, "default", "p", up.clone(), Subresource::Main)
        .unwrap_err();
    assert!(matches!(e, StoreError::Conflict { .. }));
    assert!(e.message().contains("the object has been modified"));
    // no RV: unconditional
    let mut no_rv = up.clone();
    no_rv["metadata"]
        .as_object_mut()
        .unwrap()
        .remove("resourceVersion");
    no_rv["metadata"]["labels"]["y"] = json!("2");
    let u2 = s
        .update(
            Resource::Pod,
            "default",
            "p",
            no_rv.clone(),
            Subresource::Main,
        )
        .unwrap();
    assert_eq!(u2["metadata"]["resourceVersion"], "5");
    // no-op: no RV bump
    let same = s
        .update(Resource::Pod, "default", "p", no_rv, Subresource::Main)
        .unwrap();
    assert_eq!(same, u2);
    assert_eq!(s.current_rv(), 5);
    // a different uid is a precondition conflict
    let mut wrong_uid = u2.clone();
    wrong_uid["metadata"]["uid"] = json!("x");
    let e = s
        .update(Resource::Pod, "default", "p", wrong_uid, Subresource::Main)
        .unwrap_err();
    assert!(
        e.message()
            .contains("Precondition failed: UID in precondition: x"),
        "{}",
        e.message()
    );
    // missing
    assert_eq!(
        s.update(
            Resource::Pod,
            "default",
            "nope",
            pod("nope"),
            Subresource::Main
        )
        .unwrap_err()
        .code(),
        404
    );
}

#[test]
fn status_subresource_takes_only_status() {
    let (s, p) = store_with_pod();
    let mut st = p.clone();
    st["status"] = json!({"phase": "Running", "podIP": "127.0.1.1"});
    st["metadata"]["labels"]["ignored"] = json!("1");
    st["spec"]["containers"][0]["image"] = json!("other");
    let u = s
        .update(Resource::Pod, "default", "p", st, Subresource::Status)
        .unwrap();
    assert_eq!(u["status"]["phase"], "Running");
    assert!(u["metadata"]["labels"].get("ignored").is_none());
    assert_eq!(u["spec"]["containers"][0]["image"], "busybox");
    assert_eq!(u["metadata"]["generation"], 1);
    let cm_status = || {
        s.update(
            Resource::ConfigMap,
            "default",
            "c",
            cm("c"),
            Subresource::Status,
        )
    };
    let e = cm_status().unwrap_err();
    assert_eq!(e.code(), 404);
    s.create(Resource::ConfigMap, "default", cm("c")).unwrap();
    let e = cm_status().unwrap_err();
    assert_eq!(e.code(), 400);
}

#[test]
fn generation_follows_spec() {
    let s = store();
    let d = json!({"metadata": {"name": "d"}, "spec": {"selector": {"matchLabels": {"a": "b"}},
        "template": {"metadata": {"labels": {"a": "b"}}, "spec": {"containers": [{"name": "c", "image": "i"}]}}}});
    let d = s.create(Resource::Deployment, "default", d).unwrap();
    assert_eq!(d["metadata"]["generation"], 1);
    assert_eq!(d["spec"]["replicas"], 1);
    let mut up = d.clone();
    up["spec"]["replicas"] = json!(3);
    let u = s
        .update(Resource::Deployment, "default", "d", up, Subresource::Main)
        .unwrap();
    assert_eq!(u["metadata"]["generation"], 2);
    // status writes never bump it
    let mut st = u.clone();
    st["status"] = json!({"observedGeneration": 2, "replicas": 3});
    let u = s
        .update(
            Resource::Deployment,
            "default",
            "d",
            st,
            Subresource::Status,
        )
        .unwrap();
    assert_eq!(u["metadata"]["generation"], 2);
    assert_eq!(u["status"]["replicas"], 3);
    // a client cannot set generation
    let mut g = u.clone();
    g["metadata"]["generation"] = json!(40);
    let u = s
        .update(Resource::Deployment, "default", "d", g, Subresource::Main)
        .unwrap();
    assert_eq!(u["metadata"]["generation"], 2);
    // modify also follows spec
    let m = s
        .modify(Resource::Deployment, "default", "d", &mut |o| {
            o["spec"]["replicas"] = json!(5);
            Ok(())
        })
        .unwrap();
    assert_eq!(m["metadata"]["generation"], 3);
}

#[test]
fn unconditional_update_of_configmap() {
    let s = store();
    s.create(Resource::ConfigMap, "default", cm("c")).unwrap();
    let u = s
        .update(
            Resource::ConfigMap,
            "default",
            "c",
            json!({"metadata": {"name": "c"}, "data": {"k": "w"}}),
            Subresource::Main,
        )
        .unwrap();
    assert_eq!(u["data"]["k"], "w");
    assert_eq!(u["kind"], "ConfigMap");
    assert_eq!(u["metadata"]["namespace"], "default");
}

// ---------------------------------------------------------------- patch

#[test]
fn patches_through_the_store() {
    let s = store();
    s.create(Resource::Pod, "default", pod("p")).unwrap();
    let p = patch_pod(
        &s,
        "p",
        PatchType::Merge,
        br#"{"metadata":{"labels":{"x":"1"}}}"#,
        Subresource::Main,
    )
    .unwrap();
    assert_eq!(p["metadata"]["labels"], json!({"app": "web", "x": "1"}));
    let p = patch_pod(
        &s,
        "p",
        PatchType::Json,
        br#"[{"op":"remove","path":"/metadata/labels/x"}]"#,
        Subresource::Main,
    )
    .unwrap();
    assert_eq!(p["metadata"]["labels"], json!({"app": "web"}));
    // kubectl set image on a pod
    let p = patch_pod(
        &s,
        "p",
        PatchType::StrategicMerge,
        br#"{"spec":{"containers":[{"name":"main","image":"busybox:2"}]}}"#,
        Subresource::Main,
    )
    .unwrap();
    assert_eq!(p["spec"]["containers"][0]["image"], "busybox:2");
    assert_eq!(
        p["spec"]["containers"][0]["imagePullPolicy"], "Always",
        "other fields kept"
    );
    assert_eq!(p["metadata"]["generation"], 2);
    // validation runs on the result: pod spec is otherwise immutable
    let e = patch_pod(
        &s,
        "p",
        PatchType::Merge,
        br#"{"spec":{"restartPolicy":"Never"}}"#,
        Subresource::Main,
    )
    .unwrap_err();
    assert!(
        e.message()
            .contains("pod updates may not change fields other than"),
        "{}",
        e.message()
    );
    // a stale RV in the patch is a conflict; none is unconditional
    let e = patch_pod(
        &s,
        "p",
        PatchType::Merge,
        br#"{"metadata":{"resourceVersion":"3"}}"#,
        Subresource::Main,
    )
    .unwrap_err();
    assert!(matches!(e, StoreError::Conflict { .. }));
    // a failed test is 422, malformed JSON 400, a missing object 404
    let e = patch_pod(
        &s,
        "p",
        PatchType::Json,
        br#"[{"op":"test","path":"/kind","value":"X"}]"#,
        Subresource::Main,
    )
    .unwrap_err();
    assert_eq!(e.code(), 422);
    assert_eq!(
        e.message(),
        "the server rejected our request due to an error in our request"
    );
    assert_eq!(e.reason(), "Invalid");
    assert!(e.subject().is_none(), "upstream's details are empty");
    let e = patch_pod(&s, "p", PatchType::Merge, b"{", Subresource::Main).unwrap_err();
    assert_eq!(e.code(), 400);
    let e = patch_pod(&s, "q", PatchType::Merge, b"{}", Subresource::Main).unwrap_err();
    assert_eq!(e.code(), 404);
    // renaming through a patch is refused
    let e = patch_pod(
        &s,
        "p",
        PatchType::Merge,
        br#"{"metadata":{"name":"z"}}"#,
        Subresource::Main,
    )
    .unwrap_err();
    assert_eq!(e.code(), 400);
    // status patch
    let p = patch_pod(
        &s,
        "p",
        PatchType::Merge,
        br#"{"status":{"phase":"Running"}}"#,
        Subresource::Status,
    )
    .unwrap();
    assert_eq!(p["status"]["phase"], "Running");
    assert_eq!(p["status"]["qosClass"], "BestEffort");
    // an empty patch is a no-op
    let rv = s.current_rv();
    s.patch(
        Resource::Pod,
        "default",
        "p",
        PatchType::Merge,
        b"{}",
        Subresource::Main,
    )
    .unwrap();
    assert_eq!(s.current_rv(), rv);
}

#[test]
fn kubectl_apply_patch_on_deployment() {
    let s = store();
    let d = json!({"metadata": {"name": "web", "annotations": {"kubectl.kubernetes.io/last-applied-configuration": "{}"}},
        "spec": {"selector": {"matchLabels": {"app": "web"}},
        "template": {"metadata": {"labels": {"app": "web"}}, "spec": {"containers": [
            {"name": "web", "image": "nginx:1", "ports": [{"containerPort": 80}]}]}}}});
    s.create(Resource::Deployment, "default", d).unwrap();
    let patch = br#"{"metadata":{"annotations":{"kubectl.kubernetes.io/last-applied-configuration":"{\"new\":1}\n"}},"spec":{"replicas":2,"template":{"spec":{"$setElementOrder/containers":[{"name":"web"},{"name":"log"}],"containers":[{"image":"nginx:2","name":"web"},{"image":"busybox","name":"log"}]}}}}"#;
    let u = s
        .patch(
            Resource::Deployment,
            "default",
            "web",
            PatchType::StrategicMerge,
            patch,
            Subresource::Main,
        )
        .unwrap();
    let cs = u["spec"]["template"]["spec"]["containers"]
        .as_array()
        .unwrap();
    assert_eq!(cs.len(), 2);
    assert_eq!(cs[0]["image"], "nginx:2");
    assert_eq!(cs[0]["ports"][0]["protocol"], "TCP");
    assert_eq!(cs[1]["name"], "log");
    assert_eq!(
        cs[1]["terminationMessagePath"], "/dev/termination-log",
        "defaults applied to the new container"
    );
    assert_eq!(u["spec"]["replicas"], 2);
    assert_eq!(u["metadata"]["generation"], 2);
    assert!(!u.to_string().contains("$setElementOrder"));
}

// ---------------------------------------------------------------- modify

#[test]
fn modify_semantics() {
    let s = store();
    s.create(Resource::Pod, "default", pod("p")).unwrap();
    let rv = s.current_rv();
    let same = s
        .modify(Resource::Pod, "default", "p", &mut |_| Ok(()))
        .unwrap();
    assert_eq!(s.current_rv(), rv);
    assert_eq!(obj_rv(&same), rv);
    let m = s
        .modify(Resource::Pod, "default", "p", &mut |o| {
            o["status"]["phase"] = json!("Running");
            o["metadata"]["name"] = json!("hijack");
            o["metadata"]["uid"] = json!("x");
            Ok(())
        })
        .unwrap();
    assert_eq!(m["status"]["phase"], "Running");
    assert_eq!(name(&m), "p");
    assert_ne!(m["metadata"]["uid"], "x");
    assert_eq!(obj_rv(&m), rv + 1);
    let e = s
        .modify(Resource::Pod, "default", "p", &mut |o| {
            o["status"]["phase"] = json!("Failed");
            Err(StoreError::BadRequest("no".into()))
        })
        .unwrap_err();
    assert_eq!(e, StoreError::BadRequest("no".into()));
    assert_eq!(
        s.get(Resource::Pod, "default", "p").unwrap()["status"]["phase"],
        "Running"
    );
    assert_eq!(
        s.modify(Resource::Pod, "default", "q", &mut |_| Ok(()))
            .unwrap_err()
            .code(),
        404
    );
}

// ---------------------------------------------------------------- delete and list

#[test]
fn delete_semantics() {
    let (s, p) = store_with_pod();
    let pre = Preconditions {
        uid: Some("other".into()),
        resource_version: None,
    };
    let e = s.delete(Resource::Pod, "default", "p", &pre).unwrap_err();
    assert_eq!(
        e.message(),
        format!(
            r#"Operation cannot be fulfilled on Pod "p": the UID in the precondition (other) does not match the UID in record ({}). The object might have been deleted and then recreated"#,
            p["metadata"]["uid"].as_str().unwrap()
        )
    );
    let pre = Preconditions {
        uid: None,
        resource_version: Some("1".into()),
    };
    let e = s.delete(Resource::Pod, "default", "p", &pre).unwrap_err();
    assert!(e.message().contains(
        "the ResourceVersion in the precondition (1) does not match the ResourceVersion in record (3)"
    ));
    let pre = Preconditions {
        uid: p["metadata"]["uid"].as_str().map(str::to_string),
        resource_version: Some("3".into()),
    };
    let d = s.delete(Resource::Pod, "default", "p", &pre).unwrap();
    assert_eq!(obj_rv(&d), 4);
    assert_eq!(s.current_rv(), 4);
    assert_eq!(
        s.get(Resource::Pod, "default", "p").unwrap_err().code(),
        404
    );
    assert_eq!(
        s.delete(Resource::Pod, "default", "p", &Preconditions::default())
            .unwrap_err()
            .code(),
        404
    );
}

#[test]
fn list_filters_and_orders() {
    let s = store();
    for (ns, n, app) in [
        ("default", "b", "web"),
        ("default", "a", "db"),
        ("kube-system", "c", "web"),
    ] {
        let mut p = pod(n);
        p["metadata"]["labels"]["app"] = json!(app);
        s.create(Resource::Pod, ns, p).unwrap();
    }
    let (all, rv) = s.list(Resource::Pod, None, &everything());
    assert_eq!(all.iter().map(name).collect::<Vec<_>>(), ["a", "b", "c"]);
    assert_eq!(rv, s.current_rv());
    let (d, _) = s.list(Resource::Pod, Some("default"), &everything());
    assert_eq!(d.iter().map(name).collect::<Vec<_>>(), ["a", "b"]);
    let (w, _) = s.list(Resource::Pod, None, &sel(Resource::Pod, "app=web", ""));
    assert_eq!(w.iter().map(name).collect::<Vec<_>>(), ["b", "c"]);
    let (f, _) = s.list(
        Resource::Pod,
        None,
        &sel(Resource::Pod, "", "metadata.namespace=kube-system"),
    );
    assert_eq!(f.iter().map(name).collect::<Vec<_>>(), ["c"]);
    let (none, _) = s.list(Resource::Pod, Some("nope"), &everything());
    assert!(none.is_empty());
    let gone = s.delete_collection(
        Resource::Pod,
        Some("default"),
        &sel(Resource::Pod, "app=web", ""),
    );
    assert_eq!(gone.len(), 1);
    assert_eq!(s.list(Resource::Pod, None, &everything()).0.len(), 2);
}

// ---------------------------------------------------------------- services

fn svc(name: &str) -> Obj {
    json!({"metadata": {"name": name}, "spec": {"selector": {"app": "web"}, "ports": [{"port": 80}]}})
}

#[test]
fn service_cluster_ip_lifecycle() {
    let s = store();
    let a = s.create(Resource::Service, "default", svc("a")).unwrap();
    assert_eq!(a["spec"]["clusterIP"], "10.96.0.11");
    assert_eq!(a["spec"]["clusterIPs"], json!(["10.96.0.11"]));
    assert_eq!(
        a["spec"]["ports"][0],
        json!({"port": 80, "protocol": "TCP", "targetPort": 80})
    );
    assert_eq!(a["spec"]["type"], "ClusterIP");
    let b = s.create(Resource::Service, "default", svc("b")).unwrap();
    assert_eq!(b["spec"]["clusterIP"], "10.96.0.12");
    // PUT without clusterIP keeps it (echoed back)
    let mut put = svc("a");
    put["spec"]["ports"][0]["port"] = json!(81);
    let u = s
        .update(Resource::Service, "default", "a", put, Subresource::Main)
        .unwrap();
    assert_eq!(u["spec"]["clusterIP"], "10.96.0.11");
    assert_eq!(u["spec"]["clusterIPs"], json!(["10.96.0.11"]));
    // changing it is 422
    let mut put = svc("a");
    put["spec"]["clusterIP"] = json!("10.96.0.99");
    let e = s
        .update(Resource::Service, "default", "a", put, Subresource::Main)
        .unwrap_err();
    assert_eq!(e.code(), 422);
    let msg = e.message();
    assert!(
        msg.contains(r#"spec.clusterIP: Invalid value: "10.96.0.99": field is immutable"#),
        "{msg}"
    );
    assert!(msg.contains("may not change once set"), "{msg}");
    // a taken IP cannot be requested; a freed one can
    let mut c = svc("c");
    c["spec"]["clusterIP"] = json!("10.96.0.12");
    let e = s
        .create(Resource::Service, "default", c.clone())
        .unwrap_err();
    assert!(
        e.message().contains("provided IP is already allocated"),
        "{}",
        e.message()
    );
    s.delete(Resource::Service, "default", "b", &Preconditions::default())
        .unwrap();
    let c = s.create(Resource::Service, "default", c).unwrap();
    assert_eq!(c["spec"]["clusterIP"], "10.96.0.12");
    let mut out = svc("d");
    out["spec"]["clusterIP"] = json!("192.168.0.1");
    let e = s.create(Resource::Service, "default", out).unwrap_err();
    assert!(
        e.message()
            .contains("not in the valid range. The range of valid IPs is 10.96.0.0/12"),
        "{}",
        e.message()
    );
    // headless
    let mut h = svc("h");
    h["spec"]["clusterIP"] = json!("None");
    let h = s.create(Resource::Service, "default", h).unwrap();
    assert_eq!(h["spec"]["clusterIPs"], json!(["None"]));
    // a failed create released nothing it did not take
    assert_eq!(s.inner.read().alloc.ips_in_use(), 2);
    // the well-known kubernetes service address can be named
    let mut k = svc("kubernetes");
    k["spec"]["clusterIP"] = json!("10.96.0.1");
    assert!(s.create(Resource::Service, "default", k).is_ok());
    // NodePort allocation and release
    let mut np = svc("np");
    np["spec"]["type"] = json!("NodePort");
    let np = s.create(Resource::Service, "default", np).unwrap();
    assert_eq!(np["spec"]["ports"][0]["nodePort"], 30000);
    let mut put = svc("np");
    put["spec"]["type"] = json!("NodePort");
    let u = s
        .update(Resource::Service, "default", "np", put, Subresource::Main)
        .unwrap();
    assert_eq!(
        u["spec"]["ports"][0]["nodePort"], 30000,
        "nodePort kept on PUT"
    );
}

// ---------------------------------------------------------------- watch

#[test]
fn watch_now_sees_changes_in_order() {
    let s = store();
    let w = s
        .watch(Resource::Pod, Some("default"), everything(), WatchFrom::Now)
        .unwrap();
    assert_eq!(w.rv(), 2);
    s.create(Resource::Pod, "default", pod("p")).unwrap();
    s.create(Resource::Pod, "kube-system", pod("other-ns"))
        .unwrap();
    s.create(Resource::ConfigMap, "default", cm("other-kind"))
        .unwrap();
    s.modify(Resource::Pod, "default", "p", &mut |o| {
        o["status"]["phase"] = json!("Running");
        Ok(())
    })
    .unwrap();
    s.delete(Resource::Pod, "default", "p", &Preconditions::default())
        .unwrap();
    let e1 = next(&w);
    assert_eq!((e1.ty, e1.rv), (EventType::Added, 3));
    let e2 = next(&w);
    assert_eq!((e2.ty, e2.rv), (EventType::Modified, 6));
    assert_eq!(e2.object["status"]["phase"], "Running");
    let e3 = next(&w);
    assert_eq!((e3.ty, e3.rv), (EventType::Deleted, 7));
    assert_eq!(obj_rv(&e3.object), 7, "DELETED carries the deletion RV");
    assert_eq!(w.rv(), 7);
    none(&w);
    // serialized once, shared
    let j = e3.object_json();
    assert!(std::ptr::eq(j, e3.object_json()));
    let line = std::str::from_utf8(e3.line()).unwrap();
    assert!(line.starts_with(r#"{"type":"DELETED","object":{"#) && line.ends_with("}\n"));
    let v: Value = serde_json::from_str(line.trim_end()).unwrap();
    assert_eq!(v["object"]["metadata"]["name"], "p");
}

#[test]
fn watch_initial_added_then_live() {
    let s = store();
    s.create(Resource::Pod, "default", pod("b")).unwrap();
    s.create(Resource::Pod, "default", pod("a")).unwrap();
    let w = s
        .watch(Resource::Pod, None, everything(), WatchFrom::InitialAdded)
        .unwrap();
    let a = next(&w);
    let b = next(&w);
    assert_eq!((a.ty, name(&a.object)), (EventType::Added, "a"));
    assert_eq!((b.ty, name(&b.object)), (EventType::Added, "b"));
    assert_eq!(w.rv(), 4);
    s.create(Resource::Pod, "default", pod("c")).unwrap();
    assert_eq!(name(&next(&w).object), "c");
    none(&w);
}

#[test]
fn watch_resume_from_rv() {
    let s = store();
    s.create(Resource::Pod, "default", pod("a")).unwrap(); // 3
    s.create(Resource::ConfigMap, "default", cm("c")).unwrap(); // 4
    s.create(Resource::Pod, "default", pod("b")).unwrap(); // 5
    s.delete(Resource::Pod, "default", "a", &Preconditions::default())
        .unwrap(); // 6
    let w = s
        .watch(Resource::Pod, None, everything(), WatchFrom::Rv(3))
        .unwrap();
    let got: Vec<(EventType, u64)> = (0..2).map(|_| next(&w)).map(|e| (e.ty, e.rv)).collect();
    assert_eq!(got, [(EventType::Added, 5), (EventType::Deleted, 6)]);
    none(&w);
    assert_eq!(w.rv(), 6);
    // resume at the current RV: nothing old
    let w = s
        .watch(Resource::Pod, None, everything(), WatchFrom::Rv(6))
        .unwrap();
    none(&w);
    s.create(Resource::Pod, "default", pod("c")).unwrap();
    assert_eq!(next(&w).rv, 7);
}

#[test]
fn watch_future_rv_waits() {
    let s = store();
    let w = s
        .watch(Resource::Pod, None, everything(), WatchFrom::Rv(4))
        .unwrap();
    s.create(Resource::Pod, "default", pod("a")).unwrap(); // 3
    s.create(Resource::Pod, "default", pod("b")).unwrap(); // 4
    s.create(Resource::Pod, "default", pod("c")).unwrap(); // 5
    let e = next(&w);
    assert_eq!((e.rv, name(&e.object)), (5, "c"));
    none(&w);
}

#[test]
fn watch_expired_outside_window() {
    let s = small(3, 100);
    for i in 0..6 {
        s.create(Resource::ConfigMap, "default", cm(&format!("c{i}")))
            .unwrap(); // 3..=8
    }
    // ring holds 6,7,8; evicted up to 5: resuming after 5 is complete, 4 is not
    let e = s
        .watch(Resource::ConfigMap, None, everything(), WatchFrom::Rv(4))
        .unwrap_err();
    assert_eq!(
        e,
        StoreError::Expired("too old resource version: 4 (6)".into())
    );
    assert_eq!(e.code(), 410);
    assert_eq!(e.reason(), "Expired");
    let w = s
        .watch(Resource::ConfigMap, None, everything(), WatchFrom::Rv(5))
        .unwrap();
    assert_eq!((0..3).map(|_| next(&w).rv).collect::<Vec<_>>(), [6, 7, 8]);
    // RV 0 semantics are InitialAdded, never expired
    let w = s
        .watch(
            Resource::ConfigMap,
            None,
            everything(),
            WatchFrom::InitialAdded,
        )
        .unwrap();
    assert_eq!(
        (0..6)
            .map(|_| next(&w).ty)
            .filter(|t| *t == EventType::Added)
            .count(),
        6
    );
}

#[test]
fn selected_watch_transitions() {
    let s = store();
    let w = s
        .watch(
            Resource::Pod,
            Some("default"),
            sel(Resource::Pod, "tier=fe", ""),
            WatchFrom::Now,
        )
        .unwrap();
    let fw = s
        .watch(
            Resource::Pod,
            None,
            sel(Resource::Pod, "", "status.phase=Running"),
            WatchFrom::Now,
        )
        .unwrap();
    s.create(Resource::Pod, "default", pod("p")).unwrap(); // 3, not selected
    let set_tier = |v: Option<&str>| {
        s.modify(Resource::Pod, "default", "p", &mut |o| {
            match v {
                Some(v) => o["metadata"]["labels"]["tier"] = json!(v),
                None => {
                    o["metadata"]["labels"]
                        .as_object_mut()
                        .unwrap()
                        .remove("tier");
                }
            }
            Ok(())
        })
        .unwrap()
    };
    set_tier(Some("fe")); // 4: into the selection -> ADDED
    set_tier(Some("fe2")); // 5: out -> DELETED (previous state, new RV)
    set_tier(Some("fe")); // 6: in again -> ADDED
    s.modify(Resource::Pod, "default", "p", &mut |o| {
        o["status"]["phase"] = json!("Running");
        Ok(())
    })
    .unwrap(); // 7: still selected -> MODIFIED; phase watcher: ADDED
    set_tier(None); // 8: out -> DELETED; phase watcher: MODIFIED
    s.delete(Resource::Pod, "default", "p", &Preconditions::default())
        .unwrap(); // 9: phase watcher DELETED
    let got: Vec<(EventType, u64)> = (0..4).map(|_| next(&w)).map(|e| (e.ty, e.rv)).collect();
    assert_eq!(
        got,
        [
            (EventType::Added, 4),
            (EventType::Deleted, 5),
            (EventType::Added, 6),
            (EventType::Modified, 7)
        ]
    );
    let del = next(&w);
    assert_eq!((del.ty, del.rv), (EventType::Deleted, 8));
    assert_eq!(
        del.object["metadata"]["labels"]["tier"], "fe",
        "previous state"
    );
    assert_eq!(obj_rv(&del.object), 8, "at the new RV");
    none(&w);
    let got: Vec<(EventType, u64)> = (0..3).map(|_| next(&fw)).map(|e| (e.ty, e.rv)).collect();
    assert_eq!(
        got,
        [
            (EventType::Added, 7),
            (EventType::Modified, 8),
            (EventType::Deleted, 9)
        ]
    );
    none(&fw);
    // the same transitions replay from history
    let r = s
        .watch(
            Resource::Pod,
            Some("default"),
            sel(Resource::Pod, "tier=fe", ""),
            WatchFrom::Rv(3),
        )
        .unwrap();
    let got: Vec<EventType> = (0..5).map(|_| next(&r).ty).collect();
    assert_eq!(
        got,
        [
            EventType::Added,
            EventType::Deleted,
            EventType::Added,
            EventType::Modified,
            EventType::Deleted
        ]
    );
    none(&r);
}

#[test]
fn single_object_watch_by_name() {
    let s = store();
    let w = s
        .watch(
            Resource::Pod,
            Some("default"),
            sel(Resource::Pod, "", "metadata.name=b"),
            WatchFrom::InitialAdded,
        )
        .unwrap();
    s.create(Resource::Pod, "default", pod("a")).unwrap();
    s.create(Resource::Pod, "default", pod("b")).unwrap();
    let e = next(&w);
    assert_eq!(name(&e.object), "b");
    none(&w);
}

#[test]
fn full_queue_terminates_the_watcher_without_blocking() {
    let s = small(100, 3);
    let slow = s
        .watch(Resource::ConfigMap, None, everything(), WatchFrom::Now)
        .unwrap();
    let fast = s
        .watch(Resource::ConfigMap, None, everything(), WatchFrom::Now)
        .unwrap();
    for i in 0..5 {
        s.create(Resource::ConfigMap, "default", cm(&format!("c{i}")))
            .unwrap();
        assert_eq!(fast.recv_timeout(T).unwrap().rv, 3 + i);
    }
    // the slow one keeps what was queued, then is disconnected
    assert_eq!(
        (0..3).map(|_| next(&slow).rv).collect::<Vec<_>>(),
        [3, 4, 5]
    );
    assert_eq!(
        slow.recv_timeout(SHORT).unwrap_err(),
        RecvTimeoutError::Disconnected
    );
    assert_eq!(slow.rv(), 5, "the client re-watches from here");
    assert_eq!(s.watch_stats(), (1, 1));
    let again = s
        .watch(
            Resource::ConfigMap,
            None,
            everything(),
            WatchFrom::Rv(slow.rv()),
        )
        .unwrap();
    assert_eq!((0..2).map(|_| next(&again).rv).collect::<Vec<_>>(), [6, 7]);
}

#[test]
fn drop_deregisters_and_terminate_disconnects() {
    let s = store();
    let w1 = s
        .watch(Resource::Pod, None, everything(), WatchFrom::Now)
        .unwrap();
    let w2 = s
        .watch(Resource::ConfigMap, None, everything(), WatchFrom::Now)
        .unwrap();
    let pinned: Vec<WatchStream> = (0..3)
        .map(|_| {
            s.watch(
                Resource::Pod,
                None,
                sel(Resource::Pod, "", "metadata.name=x"),
                WatchFrom::Now,
            )
            .unwrap()
        })
        .collect();
    assert_eq!(s.watch_stats().0, 5);
    drop(w1);
    drop(pinned);
    assert_eq!(s.watch_stats().0, 1);
    assert_eq!(s.terminate_watches(Some(Resource::Pod)), 0);
    assert_eq!(s.terminate_watches(None), 1);
    assert_eq!(
        w2.recv_timeout(SHORT).unwrap_err(),
        RecvTimeoutError::Disconnected
    );
    assert!(matches!(w2.try_recv(), Err(TryRecvError::Disconnected)));
}

#[test]
fn concurrent_writers_lose_no_events() {
    let s = small(100_000, 100_000);
    let watchers: Vec<WatchStream> = (0..8)
        .map(|_| {
            s.watch(Resource::ConfigMap, None, everything(), WatchFrom::Now)
                .unwrap()
        })
        .collect();
    let named = s
        .watch(
            Resource::ConfigMap,
            None,
            sel(Resource::ConfigMap, "", "metadata.name=t0-5"),
            WatchFrom::Now,
        )
        .unwrap();
    let threads = 4;
    let per = 250;
    std::thread::scope(|sc| {
        for t in 0..threads {
            let s = &s;
            sc.spawn(move || {
                for i in 0..per {
                    let n = format!("t{t}-{i}");
                    s.create(Resource::ConfigMap, "default", cm(&n)).unwrap();
                    s.modify(Resource::ConfigMap, "default", &n, &mut |o| {
                        o["data"]["k"] = json!("changed");
                        Ok(())
                    })
                    .unwrap();
                    if i % 2 == 0 {
                        s.delete(
                            Resource::ConfigMap,
                            "default",
                            &n,
                            &Preconditions::default(),
                        )
                        .unwrap();
                    }
                }
            });
        }
    });
    let total = threads * per * 2 + threads * per / 2;
    for w in &watchers {
        let mut last = 2;
        for _ in 0..total {
            let e = w.recv_timeout(T).unwrap();
            assert_eq!(e.rv, last + 1, "gap-free, ordered");
            last = e.rv;
        }
        assert!(w.try_recv().is_err());
    }
    let got: Vec<EventType> = (0..2).map(|_| named.recv_timeout(T).unwrap().ty).collect();
    assert_eq!(got, [EventType::Added, EventType::Modified]);
}

#[test]
fn watch_registration_races_writers_without_gaps() {
    // Watches opened from a listed RV while writers run must continue
    // exactly where the list left off.
    let s = small(100_000, 100_000);
    let stop = std::sync::atomic::AtomicBool::new(false);
    std::thread::scope(|sc| {
        let s2 = &s;
        let stop = &stop;
        sc.spawn(move || {
            let mut i = 0;
            while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                s2.create(Resource::ConfigMap, "default", cm(&format!("c{i}")))
                    .unwrap();
                i += 1;
                if i % 8 == 0 {
                    std::thread::sleep(Duration::from_micros(200));
                }
            }
        });
        for _ in 0..30 {
            let (items, rv) = s.list(Resource::ConfigMap, None, &everything());
            let w = s
                .watch(Resource::ConfigMap, None, everything(), WatchFrom::Rv(rv))
                .unwrap();
            let target = rv + 10;
            let mut seen = items.len() as u64;
            let mut last = rv;
            while last < target {
                let e = w.recv_timeout(T).unwrap();
                assert_eq!(e.rv, last + 1);
                last = e.rv;
                seen += 1;
            }
            assert_eq!(seen, last - 2, "every configmap seen exactly once");
        }
        stop.store(true, std::sync::atomic::Ordering::Relaxed);
    });
}

/// Scale smoke test: 5,000 pod creates with 2,000 watchers registered
/// (1,990 single-pod watches like `kubectl delete` opens, 10 unselected ones
/// drained by threads). Prints timings; asserts only correctness.
/// `cargo test --release -- --ignored --nocapture perf_smoke`
#[test]
#[ignore]
fn perf_smoke_5000_pods_2000_watchers() {
    let s = store();
    let mut named = Vec::new();
    for i in 0..1_990 {
        let f = format!("metadata.name=p{i}");
        named.push(
            s.watch(
                Resource::Pod,
                Some("default"),
                sel(Resource::Pod, "", &f),
                WatchFrom::Now,
            )
            .unwrap(),
        );
    }
    let all: Vec<WatchStream> = (0..10)
        .map(|_| {
            s.watch(Resource::Pod, None, everything(), WatchFrom::Now)
                .unwrap()
        })
        .collect();
    let start = Instant::now();
    let counted = std::thread::scope(|sc| {
        let readers: Vec<_> = all
            .iter()
            .map(|w| {
                sc.spawn(move || {
                    let mut n = 0;
                    while n < 5_000 {
                        match w.recv_timeout(Duration::from_secs(10)) {
                            Ok(e) => {
                                let _ = e.line();
                                n += 1;
                            }
                            Err(_) => break,
                        }
                    }
                    n
                })
            })
            .collect();
        for i in 0..5_000 {
            s.create(Resource::Pod, "default", pod(&format!("p{i}")))
                .unwrap();
        }
        let created = start.elapsed();
        let counts: Vec<usize> = readers.into_iter().map(|r| r.join().unwrap()).collect();
        (created, counts)
    });
    let (created, counts) = counted;
    let delivered = start.elapsed();
    let named_got = named.iter().filter(|w| w.try_recv().is_ok()).count();
    let t = Instant::now();
    let (items, _) = s.list(Resource::Pod, None, &everything());
    let list = t.elapsed();
    let t = Instant::now();
    let w = s
        .watch(Resource::Pod, None, everything(), WatchFrom::InitialAdded)
        .unwrap();
    let initial = t.elapsed();
    drop(w);
    println!(
        "perf: 5000 creates with 2000 watchers: created in {created:?}, all delivered in {delivered:?} \
         ({:.0} creates/s); list of {} pods {list:?}; initial-ADDED watch snapshot {initial:?}",
        5_000.0 / created.as_secs_f64(),
        items.len()
    );
    assert!(counts.iter().all(|c| *c == 5_000), "{counts:?}");
    assert_eq!(named_got, 1_990);
}

/// Worst case: 2,000 unselected watchers (every event goes to every one),
/// drained by 4 threads. Prints timings only.
#[test]
#[ignore]
fn perf_smoke_2000_unselected_watchers() {
    let s = store();
    let watchers: Vec<WatchStream> = (0..2_000)
        .map(|_| {
            s.watch(Resource::Pod, None, everything(), WatchFrom::Now)
                .unwrap()
        })
        .collect();
    let done = std::sync::atomic::AtomicBool::new(false);
    let start = Instant::now();
    let (created, total) = std::thread::scope(|sc| {
        let readers: Vec<_> = watchers
            .chunks(500)
            .map(|chunk| {
                let done = &done;
                sc.spawn(move || {
                    let mut n = 0usize;
                    loop {
                        let mut idle = true;
                        for w in chunk {
                            while let Ok(e) = w.try_recv() {
                                let _ = e.line();
                                n += 1;
                                idle = false;
                            }
                        }
                        if idle {
                            if done.load(std::sync::atomic::Ordering::Relaxed) {
                                return n;
                            }
                            std::thread::sleep(Duration::from_millis(1));
                        }
                    }
                })
            })
            .collect();
        for i in 0..5_000 {
            s.create(Resource::Pod, "default", pod(&format!("p{i}")))
                .unwrap();
        }
        let created = start.elapsed();
        done.store(true, std::sync::atomic::Ordering::Relaxed);
        (
            created,
            readers
                .into_iter()
                .map(|r| r.join().unwrap())
                .sum::<usize>(),
        )
    });
    println!(
        "perf: 5000 creates x 2000 unselected watchers: created in {created:?}, {total} deliveries in {:?}; overflowed {}",
        start.elapsed(),
        s.watch_stats().1
    );
}

#[test]
fn service_accounts_come_with_namespaces() {
    let s = Store::new(StoreConfig::default());
    // `default` and `kube-system`, each with its account: 4 writes.
    assert_eq!(s.current_rv(), 4);
    let w = s
        .watch(Resource::ServiceAccount, None, everything(), WatchFrom::Now)
        .unwrap();
    let ns = json!({"metadata": {"name": "team"}});
    let created = s.create(Resource::Namespace, "", ns).unwrap();
    assert_eq!(obj_rv(&created), 5);
    // The account is there the moment the namespace is, one RV later.
    let sa = s.get(Resource::ServiceAccount, "team", "default").unwrap();
    assert_eq!(obj_rv(&sa), 6);
    assert_eq!(sa["kind"], "ServiceAccount");
    let ev = w.recv_timeout(T).unwrap();
    assert_eq!((ev.ty, ev.rv), (EventType::Added, 6));
    // Pods must name an account that exists.
    let p = s.create(Resource::Pod, "team", pod("ok")).unwrap();
    assert_eq!(p["spec"]["serviceAccountName"], "default");
    let mut bad = pod("bad");
    bad["spec"]["serviceAccountName"] = json!("robot");
    let e = s.create(Resource::Pod, "team", bad).unwrap_err();
    assert_eq!(e.code(), 403);
    assert_eq!(
        e.message(),
        r#"pods "bad" is forbidden: error looking up service account team/robot: serviceaccount "robot" not found"#
    );
    s.delete(
        Resource::ServiceAccount,
        "team",
        "default",
        &Preconditions::default(),
    )
    .unwrap();
    let e = s.create(Resource::Pod, "team", pod("late")).unwrap_err();
    assert_eq!(e.code(), 403);
}
