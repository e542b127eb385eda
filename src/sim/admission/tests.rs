//! Admission rule tests: defaults, validation messages, update immutability.

use super::*;
use serde_json::json;

fn causes(r: Result<(), Rejection>) -> Vec<String> {
    match r {
        Err(Rejection::Invalid(c)) => c.iter().map(FieldCause::message).collect(),
        other => panic!("expected Invalid, got {other:?}"),
    }
}

fn has(msgs: &[String], want: &str) {
    assert!(
        msgs.iter().any(|m| m.contains(want)),
        "{want:?} not in {msgs:#?}"
    );
}

fn pod(spec: Value) -> Obj {
    json!({"metadata": {"name": "p", "namespace": "default"}, "spec": spec})
}

#[test]
fn pod_defaults_applied() {
    let mut p = pod(json!({"containers": [
        {"name": "a", "image": "nginx"},
        {"name": "b", "image": "nginx:latest"},
        {"name": "c", "image": "nginx:1.25", "ports": [{"containerPort": 80}]},
        {"name": "d", "image": "localhost:5000/app"},
        {"name": "e", "image": "app@sha256:abc"},
        {"name": "f", "image": "x", "imagePullPolicy": "Never",
         "env": [{"name": "IP", "valueFrom": {"fieldRef": {"fieldPath": "status.podIP"}}}]}
    ]}));
    admit_create(Resource::Pod, &mut p).unwrap();
    let s = &p["spec"];
    let pulls: Vec<&str> = s["containers"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c["imagePullPolicy"].as_str().unwrap())
        .collect();
    assert_eq!(
        pulls,
        [
            "Always",
            "Always",
            "IfNotPresent",
            "Always",
            "IfNotPresent",
            "Never"
        ]
    );
    assert_eq!(s["restartPolicy"], "Always");
    assert_eq!(s["terminationGracePeriodSeconds"], 30);
    assert_eq!(s["dnsPolicy"], "ClusterFirst");
    assert_eq!(s["schedulerName"], "default-scheduler");
    assert_eq!(s["serviceAccountName"], "default");
    let c = &s["containers"][2];
    assert_eq!(c["terminationMessagePath"], "/dev/termination-log");
    assert_eq!(c["terminationMessagePolicy"], "File");
    assert_eq!(c["ports"][0]["protocol"], "TCP");
    assert_eq!(
        s["containers"][5]["env"][0]["valueFrom"]["fieldRef"]["apiVersion"],
        "v1"
    );
    assert_eq!(
        p["status"],
        json!({"phase": "Pending", "qosClass": "BestEffort"})
    );
    // defaults are idempotent
    let before = p.clone();
    super::pod_defaults(&mut p);
    assert_eq!(p, before);
}

#[test]
fn qos_classes() {
    let res = |r: Value| {
        qos_class(Some(
            &json!({"containers": [{"name": "a", "image": "i", "resources": r}]}),
        ))
    };
    assert_eq!(res(json!({})), "BestEffort");
    assert_eq!(res(json!({"requests": {"cpu": "1"}})), "Burstable");
    assert_eq!(
        res(json!({"limits": {"cpu": "1", "memory": "1Gi"}})),
        "Guaranteed"
    );
    assert_eq!(
        res(
            json!({"limits": {"cpu": "1", "memory": "1Gi"}, "requests": {"cpu": "500m", "memory": "1Gi"}})
        ),
        "Burstable"
    );
}

#[test]
fn pod_validation() {
    let m = causes(admit_create(Resource::Pod, &mut pod(json!({}))));
    assert_eq!(m, ["spec.containers: Required value"]);
    let m = causes(admit_create(
        Resource::Pod,
        &mut json!({"metadata": {"name": "p"}}),
    ));
    assert_eq!(m, ["spec.containers: Required value"]);
    let mut p = pod(json!({
        "restartPolicy": "Sometimes",
        "activeDeadlineSeconds": 0,
        "volumes": [{"name": "data", "emptyDir": {}}, {"name": "data"}],
        "initContainers": [{"name": "init", "image": "x"}],
        "containers": [
            {"image": "x"},
            {"name": "Bad_Name", "image": "x"},
            {"name": "init", "image": "x"},
            {"name": "noimg"},
            {"name": "ports", "image": "x", "ports": [{"containerPort": 0}, {"containerPort": 70000}, {"containerPort": 1, "protocol": "ICMP"}],
             "env": [{"value": "v"}], "volumeMounts": [{"name": "nope", "mountPath": "/x"}, {"name": "data"}]}
        ]
    }));
    let m = causes(admit_create(Resource::Pod, &mut p));
    has(&m, "spec.containers[0].name: Required value");
    has(
        &m,
        r#"spec.containers[1].name: Invalid value: "Bad_Name": a lowercase RFC 1123 label must consist of"#,
    );
    has(&m, r#"spec.containers[2].name: Duplicate value: "init""#);
    has(&m, "spec.containers[3].image: Required value");
    has(&m, "spec.containers[4].ports[0].containerPort: Invalid value: 0: must be between 1 and 65535, inclusive");
    has(&m, "spec.containers[4].ports[1].containerPort: Invalid value: 70000: must be between 1 and 65535, inclusive");
    has(
        &m,
        r#"spec.containers[4].ports[2].protocol: Unsupported value: "ICMP": supported values: "SCTP", "TCP", "UDP""#,
    );
    has(&m, "spec.containers[4].env[0].name: Required value");
    has(
        &m,
        r#"spec.containers[4].volumeMounts[0].name: Not found: "nope""#,
    );
    has(
        &m,
        "spec.containers[4].volumeMounts[1].mountPath: Required value",
    );
    has(&m, r#"spec.volumes[1].name: Duplicate value: "data""#);
    has(
        &m,
        r#"spec.restartPolicy: Unsupported value: "Sometimes": supported values: "Always", "OnFailure", "Never""#,
    );
    has(
        &m,
        "spec.activeDeadlineSeconds: Invalid value: 0: must be between 1 and 2147483647, inclusive",
    );
    // wrong JSON types never panic
    for spec in [
        json!("x"),
        json!({"containers": "x"}),
        json!({"containers": [1, null, {"name": 5, "image": []}]}),
    ] {
        let _ = admit_create(Resource::Pod, &mut pod(spec));
    }
    let _ = admit_create(
        Resource::Pod,
        &mut json!({"metadata": {"name": "p"}, "spec": null}),
    );
}

#[test]
fn metadata_validation() {
    let mut c = json!({"metadata": {"name": "c", "labels": {"bad key": "v", "ok": "bad value", "a/b/c": "x"},
                                     "annotations": {"fine.example.com/Anything_Goes": "any text at all"}}});
    let m = causes(admit_create(Resource::ConfigMap, &mut c));
    assert_eq!(m.len(), 3, "{m:#?}");
    has(
        &m,
        r#"metadata.labels: Invalid value: "bad key": name part must consist of alphanumeric characters"#,
    );
    has(
        &m,
        r#"metadata.labels: Invalid value: "bad value": a valid label must be an empty string or consist of"#,
    );
    let m = causes(admit_create(
        Resource::Service,
        &mut json!({"metadata": {"name": "1svc"}, "spec": {"ports": [{"port": 80}]}}),
    ));
    has(
        &m,
        r#"metadata.name: Invalid value: "1svc": a DNS-1035 label must consist of"#,
    );
    let m = causes(admit_create(
        Resource::ConfigMap,
        &mut json!({"metadata": {"name": "x".repeat(254)}}),
    ));
    has(&m, "must be no more than 253 characters");
}

fn running_pod() -> Obj {
    let mut p = pod(
        json!({"containers": [{"name": "a", "image": "x:1"}], "tolerations": [{"key": "k", "operator": "Exists"}],
                           "activeDeadlineSeconds": 100}),
    );
    admit_create(Resource::Pod, &mut p).unwrap();
    p
}

#[test]
fn pod_update_rules() {
    let old = running_pod();
    let mut new = old.clone();
    new["spec"]["containers"][0]["image"] = json!("x:2");
    new["spec"]["tolerations"]
        .as_array_mut()
        .unwrap()
        .push(json!({"key": "k2", "operator": "Exists"}));
    new["spec"]["activeDeadlineSeconds"] = json!(50);
    new["metadata"]["labels"] = json!({"any": "change"});
    admit_update(Resource::Pod, &mut new, &old).unwrap();
    // omitted defaults are re-applied, so a PUT of the user's original spec is fine
    let mut sparse = pod(
        json!({"containers": [{"name": "a", "image": "x:1"}], "tolerations": [{"key": "k", "operator": "Exists"}],
                                "activeDeadlineSeconds": 100}),
    );
    admit_update(Resource::Pod, &mut sparse, &old).unwrap();
    for change in [
        json!({"restartPolicy": "Never"}),
        json!({"containers": [{"name": "a", "image": "x:1"}, {"name": "b", "image": "y"}]}),
        json!({"tolerations": []}),
        json!({"nodeName": "elsewhere"}),
    ] {
        let mut new = old.clone();
        for (k, v) in change.as_object().unwrap() {
            new["spec"][k] = v.clone();
        }
        let m = causes(admit_update(Resource::Pod, &mut new, &old));
        has(&m, "spec: Forbidden: pod updates may not change fields other than `spec.containers[*].image`");
    }
    let mut new = old.clone();
    new["spec"]["activeDeadlineSeconds"] = json!(200);
    has(
        &causes(admit_update(Resource::Pod, &mut new, &old)),
        "spec.activeDeadlineSeconds: Invalid value: 200: must be less than or equal to previous value",
    );
}

fn svc(spec: Value) -> Obj {
    json!({"metadata": {"name": "s"}, "spec": spec})
}

#[test]
fn service_defaults_and_validation() {
    let mut s = svc(json!({"ports": [{"port": 80, "targetPort": "http"}]}));
    admit_create(Resource::Service, &mut s).unwrap();
    assert_eq!(s["spec"]["type"], "ClusterIP");
    assert_eq!(s["spec"]["sessionAffinity"], "None");
    assert_eq!(s["spec"]["ports"][0]["targetPort"], "http");
    assert_eq!(s["spec"]["ipFamilies"], json!(["IPv4"]));
    assert_eq!(s["status"], json!({"loadBalancer": {}}));
    let m = causes(admit_create(Resource::Service, &mut svc(json!({}))));
    assert_eq!(m, ["spec.ports: Required value"]);
    admit_create(Resource::Service, &mut svc(json!({"clusterIP": "None"}))).unwrap();
    let m = causes(admit_create(
        Resource::Service,
        &mut svc(json!({"type": "Fancy", "ports": [{"port": 80}]})),
    ));
    has(
        &m,
        r#"spec.type: Unsupported value: "Fancy": supported values: "ClusterIP", "ExternalName", "LoadBalancer", "NodePort""#,
    );
    let m = causes(admit_create(
        Resource::Service,
        &mut svc(
            json!({"ports": [{"port": 80}, {"port": 0, "name": "b"}, {"port": 81, "name": "b", "protocol": "X"},
                                   {"name": "t", "port": 82, "targetPort": "Not_A_Name"}, {"name": "n", "port": 83, "nodePort": 30001}]}),
        ),
    ));
    has(&m, "spec.ports[0].name: Required value");
    has(
        &m,
        "spec.ports[1].port: Invalid value: 0: must be between 1 and 65535, inclusive",
    );
    has(&m, r#"spec.ports[2].name: Duplicate value: "b""#);
    has(&m, r#"spec.ports[2].protocol: Unsupported value: "X""#);
    has(
        &m,
        r#"spec.ports[3].targetPort: Invalid value: "Not_A_Name""#,
    );
    has(
        &m,
        "spec.ports[4].nodePort: Forbidden: may not be used when `type` is 'ClusterIP'",
    );
    let m = causes(admit_create(
        Resource::Service,
        &mut svc(json!({"type": "ExternalName"})),
    ));
    assert_eq!(m, ["spec.externalName: Required value"]);
    admit_create(
        Resource::Service,
        &mut svc(json!({"type": "ExternalName", "externalName": "db.example.com"})),
    )
    .unwrap();
    let m = causes(admit_create(
        Resource::Service,
        &mut svc(json!({"clusterIP": "10.96.0.300", "ports": [{"port": 1}]})),
    ));
    has(&m, "must be a valid IP address");
}

fn deploy(labels: Value, selector: Value) -> Obj {
    json!({"metadata": {"name": "d"}, "spec": {"selector": selector,
        "template": {"metadata": {"labels": labels}, "spec": {"containers": [{"name": "c", "image": "i"}]}}}})
}

#[test]
fn workload_defaults_and_validation() {
    let mut d = deploy(
        json!({"app": "web"}),
        json!({"matchLabels": {"app": "web"}}),
    );
    admit_create(Resource::Deployment, &mut d).unwrap();
    let s = &d["spec"];
    assert_eq!(s["replicas"], 1);
    assert_eq!(
        s["strategy"],
        json!({"type": "RollingUpdate", "rollingUpdate": {"maxUnavailable": "25%", "maxSurge": "25%"}})
    );
    assert_eq!(s["revisionHistoryLimit"], 10);
    assert_eq!(s["progressDeadlineSeconds"], 600);
    assert_eq!(s["template"]["spec"]["restartPolicy"], "Always");
    assert_eq!(
        s["template"]["spec"]["containers"][0]["imagePullPolicy"],
        "Always"
    );
    assert!(
        s["template"]["spec"].get("serviceAccountName").is_none(),
        "pod-only defaults stay off templates"
    );
    assert_eq!(d["status"], json!({}));
    let mut rs = deploy(
        json!({"app": "web"}),
        json!({"matchLabels": {"app": "web"}}),
    );
    admit_create(Resource::ReplicaSet, &mut rs).unwrap();
    assert!(rs["spec"].get("strategy").is_none());
    assert_eq!(rs["status"], json!({"replicas": 0}));

    let m = causes(admit_create(
        Resource::Deployment,
        &mut deploy(json!({"app": "x"}), json!({"matchLabels": {"app": "web"}})),
    ));
    assert_eq!(
        m,
        [
            r#"spec.template.metadata.labels: Invalid value: {"app":"x"}: `selector` does not match template `labels`"#
        ]
    );
    let mut d = deploy(json!({"app": "x"}), json!(null));
    d["spec"].as_object_mut().unwrap().remove("selector");
    assert_eq!(
        causes(admit_create(Resource::Deployment, &mut d)),
        ["spec.selector: Required value"]
    );
    has(
        &causes(admit_create(
            Resource::Deployment,
            &mut deploy(json!({"app": "x"}), json!({})),
        )),
        "empty selector is invalid for deployment",
    );
    let mut d = deploy(
        json!({"app": "web", "env": "a"}),
        json!({"matchExpressions": [{"key": "env", "operator": "In", "values": ["a"]}]}),
    );
    admit_create(Resource::Deployment, &mut d).unwrap();
    let mut d = deploy(
        json!({"app": "web"}),
        json!({"matchLabels": {"app": "web"}}),
    );
    d["spec"]["replicas"] = json!(-1);
    d["spec"]["template"]["spec"]["restartPolicy"] = json!("Never");
    d["spec"]["strategy"] = json!({"type": "Recreate", "rollingUpdate": {"maxSurge": 1}});
    let m = causes(admit_create(Resource::Deployment, &mut d));
    has(
        &m,
        "spec.replicas: Invalid value: -1: must be greater than or equal to 0",
    );
    has(
        &m,
        r#"spec.template.spec.restartPolicy: Unsupported value: "Never": supported values: "Always""#,
    );
    has(&m, "spec.strategy.rollingUpdate: Forbidden: may not be specified when strategy `type` is 'Recreate'");
    let mut d = deploy(
        json!({"app": "web"}),
        json!({"matchLabels": {"app": "web"}}),
    );
    d["spec"]["strategy"] = json!({"rollingUpdate": {"maxSurge": 0, "maxUnavailable": "0%"}});
    has(
        &causes(admit_create(Resource::Deployment, &mut d)),
        "may not be 0 when `maxSurge` is 0",
    );
    d["spec"]["strategy"] = json!({"rollingUpdate": {"maxSurge": "lots"}});
    has(
        &causes(admit_create(Resource::Deployment, &mut d)),
        "a valid percent string must be",
    );
    // template pod spec is validated
    let mut d = deploy(
        json!({"app": "web"}),
        json!({"matchLabels": {"app": "web"}}),
    );
    d["spec"]["template"]["spec"]["containers"][0]
        .as_object_mut()
        .unwrap()
        .remove("image");
    has(
        &causes(admit_create(Resource::Deployment, &mut d)),
        "spec.template.spec.containers[0].image: Required value",
    );
    // selector is immutable
    let mut old = deploy(
        json!({"app": "web", "v": "1"}),
        json!({"matchLabels": {"app": "web"}}),
    );
    admit_create(Resource::Deployment, &mut old).unwrap();
    let mut new = deploy(
        json!({"app": "web", "v": "1"}),
        json!({"matchLabels": {"app": "web", "v": "1"}}),
    );
    has(
        &causes(admit_update(Resource::Deployment, &mut new, &old)),
        r#"spec.selector: Invalid value: v1.LabelSelector{MatchLabels:map[string]string{"app":"web", "v":"1"}, MatchExpressions:[]v1.LabelSelectorRequirement(nil)}: field is immutable"#,
    );
}

fn ingress(spec: Value) -> Obj {
    json!({"metadata": {"name": "i"}, "spec": spec})
}

#[test]
fn ingress_validation() {
    let ok = json!({"rules": [{"host": "app.example.com", "http": {"paths": [
        {"path": "/", "pathType": "Prefix", "backend": {"service": {"name": "web", "port": {"number": 80}}}},
        {"path": "/api", "pathType": "Exact", "backend": {"service": {"name": "api", "port": {"name": "http"}}}}
    ]}}]});
    let mut i = ingress(ok);
    admit_create(Resource::Ingress, &mut i).unwrap();
    assert_eq!(i["status"], json!({"loadBalancer": {}}));
    admit_create(Resource::Ingress, &mut ingress(json!({"rules": [{"host": "*.example.com", "http": {"paths": [
        {"path": "anything", "pathType": "ImplementationSpecific", "backend": {"service": {"name": "web", "port": {"number": 80}}}}]}}]})))
    .unwrap();
    let m = causes(admit_create(
        Resource::Ingress,
        &mut ingress(json!({"rules": [{"host": "Bad_Host", "http": {"paths": [
            {"path": "/"},
            {"path": "/", "pathType": "Regex", "backend": {"service": {"name": "web", "port": {"number": 80}}}},
            {"path": "rel", "pathType": "Prefix", "backend": {"service": {"port": {"number": 0}}}},
            {"path": "/", "pathType": "Exact", "backend": {"service": {"name": "web", "port": {}}}},
            {"path": "/", "pathType": "Exact", "backend": {}}
        ]}}]})),
    ));
    let p = "spec.rules[0].http.paths";
    has(&m, r#"spec.rules[0].host: Invalid value: "Bad_Host""#);
    has(
        &m,
        &format!("{p}[0].pathType: Required value: pathType must be specified"),
    );
    has(&m, &format!("{p}[0].backend: Required value"));
    has(
        &m,
        &format!(
            r#"{p}[1].pathType: Unsupported value: "Regex": supported values: "Exact", "ImplementationSpecific", "Prefix""#
        ),
    );
    has(
        &m,
        &format!(r#"{p}[2].path: Invalid value: "rel": must be an absolute path"#),
    );
    has(&m, &format!("{p}[2].backend.service.name: Required value"));
    has(&m, &format!("{p}[2].backend.service.port.number: Invalid value: 0: must be between 1 and 65535, inclusive"));
    has(
        &m,
        &format!(
            "{p}[3].backend.service.port.name: Required value: port name or number is required"
        ),
    );
    has(&m, &format!("{p}[4].backend: Invalid value"));
    has(
        &causes(admit_create(Resource::Ingress, &mut ingress(json!({})))),
        "either `defaultBackend` or `rules` must be specified",
    );
}

#[test]
fn configmaps_and_secrets() {
    let mut c = json!({"metadata": {"name": "c"}, "data": {"ok.key_1-x": "v", "bad/key": "v", "..x": "v"}, "binaryData": {"ok.key_1-x": "AA=="}});
    let m = causes(admit_create(Resource::ConfigMap, &mut c));
    has(
        &m,
        r#"data[bad/key]: Invalid value: "bad/key": a valid config key must consist of alphanumeric characters"#,
    );
    has(&m, "must not start with '..'");
    has(
        &m,
        r#"binaryData[ok.key_1-x]: Duplicate value: "ok.key_1-x""#,
    );
    assert!(matches!(
        admit_create(
            Resource::ConfigMap,
            &mut json!({"metadata": {"name": "c"}, "data": {"k": 1}})
        ),
        Err(Rejection::BadRequest(_))
    ));
    let mut s = json!({"metadata": {"name": "s"}, "data": {"a": "eA=="}, "stringData": {"b": "hello", "a": "y"}});
    admit_create(Resource::Secret, &mut s).unwrap();
    assert_eq!(s["data"], json!({"a": "eQ==", "b": "aGVsbG8="}));
    assert!(s.get("stringData").is_none());
    assert_eq!(s["type"], "Opaque");
    let r = admit_create(
        Resource::Secret,
        &mut json!({"metadata": {"name": "s"}, "data": {"a": "not base64!"}}),
    );
    assert!(
        matches!(r, Err(Rejection::BadRequest(m)) if m.starts_with("Secret in version \"v1\" cannot be handled as a Secret"))
    );
    let m = causes(admit_create(
        Resource::Secret,
        &mut json!({"metadata": {"name": "s"}, "type": "kubernetes.io/tls", "data": {"tls.crt": ""}}),
    ));
    assert_eq!(m, ["data[tls.key]: Required value"]);
    // type and immutable data are frozen
    let old = json!({"metadata": {"name": "s"}, "type": "Opaque", "immutable": true, "data": {"a": "eA=="}});
    let mut new = json!({"metadata": {"name": "s"}, "type": "other", "immutable": true, "data": {"a": "eQ=="}});
    let m = causes(admit_update(Resource::Secret, &mut new, &old));
    has(&m, r#"type: Invalid value: "other": field is immutable"#);
    has(
        &m,
        "data: Forbidden: field is immutable when `immutable` is set",
    );
    let old = json!({"metadata": {"name": "c"}, "immutable": true, "data": {"a": "x"}});
    let mut same = old.clone();
    admit_update(Resource::ConfigMap, &mut same, &old).unwrap();
}

#[test]
fn namespaces() {
    let mut n = json!({"metadata": {"name": "team"}});
    admit_create(Resource::Namespace, &mut n).unwrap();
    assert_eq!(n["status"], json!({"phase": "Active"}));
    assert_eq!(n["spec"], json!({"finalizers": ["kubernetes"]}));
    assert_eq!(
        n["metadata"]["labels"]["kubernetes.io/metadata.name"],
        "team"
    );
    let mut up =
        json!({"metadata": {"name": "team", "labels": {"x": "y"}}, "spec": {"finalizers": []}});
    admit_update(Resource::Namespace, &mut up, &n).unwrap();
    assert_eq!(
        up["metadata"]["labels"],
        json!({"x": "y", "kubernetes.io/metadata.name": "team"})
    );
    assert_eq!(up["spec"], json!({"finalizers": ["kubernetes"]}));
}

#[test]
fn null_values_in_string_maps_are_empty_strings() {
    // Go decodes null into a string as "" without an error.
    let mut c = json!({"metadata": {"name": "c"}, "data": {"a": null, "b": "x"}});
    admit_create(Resource::ConfigMap, &mut c).unwrap();
    assert_eq!(c["data"], json!({"a": "", "b": "x"}));
    let mut s = json!({"metadata": {"name": "s"}, "stringData": {"a": null}});
    admit_create(Resource::Secret, &mut s).unwrap();
    assert_eq!(s["data"], json!({"a": ""}));
}
