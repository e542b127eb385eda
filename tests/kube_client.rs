//! The REST client (`kube::client`) against the simulated cluster, over plain
//! HTTP, TLS + bearer token and TLS + client certificate: every verb on every
//! kind, each Status reason mapped to its `KubeError` variant, retries on
//! injected faults, selectors, preconditions, read-modify-write that keeps
//! unknown fields, and the pod proxy. Each test starts its own sim (faults
//! are global to a sim), so tests run in parallel. Waits poll with
//! deadlines; the client's own 30 s request deadline bounds every call.
//!
//! The cases that need no real container and no injected fault run on two
//! backends (`two_backends!`, tests/common/backend.rs): `NAME::sim` on a
//! sim of their own, `NAME::real` on the run's real control plane
//! (docs/control-plane.md), each in a namespace of its own. A difference
//! between the two is a bug in the client or the sim.

mod common;

use base64::Engine;
use common::backend::Backend;
use common::{wait_for, SimProc};
use kubegate::kube::client::resources::{
    Container, ContainerPort, EnvVar, HttpIngressPath, HttpIngressRuleValue, IngressBackend,
    IngressRule, IngressServiceBackend, IngressSpec, LabelSelector, PodSpec, PodTemplateSpec,
    ServiceBackendPort, ServicePort, ServiceSpec,
};
use kubegate::kube::client::{
    pod_deployment, pod_replicaset, Api, Client, ClientOptions, ConfigMap, DeleteParams, Deleted,
    Deployment, Ingress, KubeError, ListParams, Namespace, Pod, Preconditions, Propagation,
    ProxyError, ProxyRequest, ReplicaSet, Resource, RetryPolicy, Secret, Service,
};
use kubegate::kube::connection::{
    ClientCert, Connection, Credentials, CredentialsError, StaticToken, TlsMaterial,
};
use kubegate::kube::meta::ObjectMeta;
use rustls_pki_types::pem::PemObject;
use rustls_pki_types::{CertificateDer, PrivateKeyDer};
use serde_json::{json, Value};
use std::collections::BTreeMap;
use std::io::{BufRead, BufReader, Read};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

// ------------------------------------------------------------ helpers

/// The fields of the sim's kubeconfig this test needs (a tiny local parse:
/// the sim writes one fixed shape; the real loader lives in `kube::config`).
struct SimKubeconfig {
    server: String,
    ca_pem: Option<Vec<u8>>,
    token: Option<String>,
    cert_pem: Option<Vec<u8>>,
    key_pem: Option<Vec<u8>>,
}

fn read_kubeconfig(sim: &SimProc) -> SimKubeconfig {
    let text = std::fs::read_to_string(&sim.kubeconfig).expect("kubeconfig");
    let field = |key: &str| -> Option<String> {
        text.lines().find_map(|l| {
            l.trim()
                .strip_prefix(&format!("{key}: "))
                .map(|v| v.trim().trim_matches('"').to_string())
        })
    };
    let b64 = |key: &str| {
        field(key).map(|v| {
            base64::engine::general_purpose::STANDARD
                .decode(v)
                .expect("base64")
        })
    };
    SimKubeconfig {
        server: field("server").expect("server"),
        ca_pem: b64("certificate-authority-data"),
        token: field("token"),
        cert_pem: b64("client-certificate-data"),
        key_pem: b64("client-key-data"),
    }
}

fn tls_material(kc: &SimKubeconfig, with_cert: bool) -> TlsMaterial {
    let ca = kc.ca_pem.as_deref().expect("CA in kubeconfig");
    let ca_certs = CertificateDer::pem_slice_iter(ca)
        .collect::<Result<Vec<_>, _>>()
        .expect("CA PEM");
    let client_cert = with_cert.then(|| ClientCert {
        chain: CertificateDer::pem_slice_iter(kc.cert_pem.as_deref().expect("client cert"))
            .collect::<Result<Vec<_>, _>>()
            .expect("cert PEM"),
        key: PrivateKeyDer::from_pem_slice(kc.key_pem.as_deref().expect("client key"))
            .expect("key PEM"),
    });
    TlsMaterial {
        ca_certs,
        client_cert,
        ..TlsMaterial::default()
    }
}

fn tls_token_connection(sim: &SimProc, token: Arc<dyn Credentials>) -> Connection {
    let kc = read_kubeconfig(sim);
    Connection {
        server: kc.server.clone(),
        tls: tls_material(&kc, false),
        credentials: token,
        namespace: "default".into(),
        impersonate: None,
    }
}

fn plain() -> (SimProc, Client) {
    let sim = SimProc::start(&[]);
    let client = Client::new(Connection::plain(&sim.url)).expect("client");
    (sim, client)
}

fn agent() -> ureq::Agent {
    ureq::Agent::config_builder()
        .proxy(None)
        .http_status_as_error(false)
        .build()
        .new_agent()
}

/// `POST /sim/faults` (plain-HTTP sims only).
fn fault(sim: &SimProc, body: Value) {
    let resp = agent()
        .post(format!("{}/sim/faults", sim.url))
        .send_json(&body)
        .expect("faults");
    assert_eq!(resp.status().as_u16(), 200, "fault {body} refused");
}

fn failed_requests(sim: &SimProc) -> u64 {
    let v: Value = agent()
        .get(format!("{}/sim/faults", sim.url))
        .call()
        .expect("faults")
        .body_mut()
        .read_json()
        .expect("json");
    v["failedRequests"].as_u64().expect("failedRequests")
}

fn meta(name: &str) -> ObjectMeta {
    ObjectMeta {
        name: Some(name.into()),
        ..ObjectMeta::default()
    }
}

fn labelled(name: &str, labels: &[(&str, &str)]) -> ObjectMeta {
    ObjectMeta {
        labels: Some(
            labels
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect(),
        ),
        ..meta(name)
    }
}

fn container(name: &str) -> Container {
    Container {
        name: name.into(),
        image: Some("busybox".into()),
        ..Container::default()
    }
}

fn pod(name: &str, labels: &[(&str, &str)]) -> Pod {
    Pod {
        metadata: labelled(name, labels),
        spec: Some(PodSpec {
            containers: vec![container("main")],
            ..PodSpec::default()
        }),
        ..Pod::default()
    }
}

fn config_map(name: &str, data: &[(&str, &str)]) -> ConfigMap {
    ConfigMap {
        metadata: meta(name),
        data: Some(
            data.iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect(),
        ),
        ..ConfigMap::default()
    }
}

fn wait_running(pods: &Api<Pod>, name: &str) -> Pod {
    wait_for(
        &format!("pod {name} running"),
        Duration::from_secs(30),
        || pods.get(name).ok().filter(|p| p.phase() == "Running"),
    )
}

fn status_reason(e: &KubeError) -> String {
    e.status()
        .map(|s| s.reason().to_string())
        .unwrap_or_default()
}

// ------------------------------------------------------ every verb

two_backends!(configmaps_and_secrets_every_verb, 180);
fn configmaps_and_secrets_every_verb(b: &Backend) {
    let client = &b.client;
    let ns = b.ns.as_str();
    let cms = Api::<ConfigMap>::namespaced(client, ns);

    let created = cms
        .create(&config_map("cm1", &[("a", "1")]))
        .expect("create");
    assert_eq!(created.metadata.name(), "cm1");
    let rv1 = created.resource_version().expect("rv").to_string();
    assert!(created.uid().is_some());

    let mut got = cms.get("cm1").expect("get");
    assert_eq!(
        got.data
            .as_ref()
            .and_then(|d| d.get("a"))
            .map(String::as_str),
        Some("1")
    );
    // A field this client does not model survives a read-modify-write.
    got.extra
        .insert("futureField".into(), json!({"kept": true}));
    got.data
        .get_or_insert_with(BTreeMap::new)
        .insert("b".into(), "2".into());
    let replaced = cms.replace("cm1", &got).expect("replace");
    assert_ne!(replaced.resource_version(), Some(rv1.as_str()));
    assert_eq!(replaced.data.as_ref().map(|d| d.len()), Some(2));

    let patched = cms
        .patch_merge("cm1", &json!({"data": {"a": null, "c": "3"}}))
        .expect("patch");
    let keys: Vec<&str> = patched
        .data
        .as_ref()
        .map(|d| d.keys().map(String::as_str).collect())
        .unwrap_or_default();
    assert_eq!(keys, ["b", "c"]);

    cms.create(&config_map("cm2", &[])).expect("create 2");
    let list = cms.list(&ListParams::default()).expect("list");
    let names: Vec<&str> = list.items.iter().map(|c| c.metadata.name()).collect();
    assert!(
        names.contains(&"cm1") && names.contains(&"cm2"),
        "{names:?}"
    );
    assert!(!list.resource_version().is_empty());
    // List items carry no kind; typed decoding does not need it.
    assert!(list.items.iter().all(|c| c.kind.is_none()));

    match cms.delete("cm1", &DeleteParams::default()).expect("delete") {
        Deleted::Status(s) => assert!(s.is_success(), "{s:?}"),
        Deleted::Object(o) => panic!("configmap delete answered the object {o:?}"),
    }
    assert!(cms.get_opt("cm1").expect("get_opt").is_none());

    let secrets = Api::<Secret>::namespaced(client, ns);
    let s = Secret {
        metadata: meta("s1"),
        data: Some(BTreeMap::from([(
            "password".to_string(),
            base64::engine::general_purpose::STANDARD.encode("hunter2"),
        )])),
        type_: Some("Opaque".into()),
        ..Secret::default()
    };
    secrets.create(&s).expect("create secret");
    let got = secrets.get("s1").expect("get secret");
    assert_eq!(got.decoded("password").as_deref(), Some(&b"hunter2"[..]));
    let p = secrets
        .patch_merge("s1", &json!({"metadata": {"labels": {"x": "y"}}}))
        .expect("patch secret");
    assert_eq!(p.metadata.label("x"), Some("y"));
    secrets.replace("s1", &p).expect("replace secret");
    assert_eq!(
        secrets
            .list(&ListParams::default())
            .expect("list")
            .items
            .len(),
        1
    );
    secrets
        .delete("s1", &DeleteParams::default())
        .expect("delete secret");
    assert!(secrets.get("s1").expect_err("gone").is_not_found());
}

two_backends!(namespaces_are_cluster_scoped, 180);
fn namespaces_are_cluster_scoped(b: &Backend) {
    let client = &b.client;
    // A name of this test's own: the real plane is shared.
    let team = format!("{}-a", b.ns);
    let team = team.as_str();
    let nss = Api::<Namespace>::all(client);
    let ns = nss
        .create(&Namespace {
            metadata: meta(team),
            ..Namespace::default()
        })
        .expect("create ns");
    assert_eq!(ns.metadata.name(), team);
    let names: Vec<String> = nss
        .list(&ListParams::default())
        .expect("list")
        .items
        .iter()
        .map(|n| n.metadata.name().to_string())
        .collect();
    assert!(names.iter().any(|n| n == "default"), "{names:?}");
    assert!(names.iter().any(|n| n == team), "{names:?}");
    let got = nss.get(team).expect("get");
    nss.patch_merge(team, &json!({"metadata": {"labels": {"t": "1"}}}))
        .expect("patch");
    let _ = nss
        .replace(team, &nss.get(team).expect("get"))
        .expect("replace");
    assert_eq!(got.metadata.uid, nss.get(team).expect("get").metadata.uid);
    // Objects can be created in it.
    Api::<ConfigMap>::namespaced(client, team)
        .create(&config_map("x", &[]))
        .expect("create in new namespace");
    nss.delete(team, &DeleteParams::default())
        .expect("delete ns");
}

two_backends!(services_replace_keeps_cluster_ip_and_detects_conflicts, 180);
fn services_replace_keeps_cluster_ip_and_detects_conflicts(b: &Backend) {
    let client = &b.client;
    let ns = b.ns.as_str();
    let svcs = Api::<Service>::namespaced(client, ns);
    let svc = Service {
        metadata: meta("web"),
        spec: Some(ServiceSpec {
            selector: Some(BTreeMap::from([("app".to_string(), "web".to_string())])),
            ports: Some(vec![ServicePort {
                port: 80,
                target_port: Some(kubegate::kube::client::resources::IntOrString::Int(8080)),
                ..ServicePort::default()
            }]),
            ..ServiceSpec::default()
        }),
        ..Service::default()
    };
    let created = svcs.create(&svc).expect("create");
    let ip = created
        .spec
        .as_ref()
        .and_then(|s| s.cluster_ip.clone())
        .expect("clusterIP allocated");

    // Replace carrying resourceVersion and clusterIP (echoed back).
    let mut edit = svcs.get("web").expect("get");
    let stale = edit.clone();
    edit.spec.as_mut().expect("spec").ports = Some(vec![ServicePort {
        port: 81,
        ..ServicePort::default()
    }]);
    let replaced = svcs.replace("web", &edit).expect("replace");
    assert_eq!(
        replaced.spec.as_ref().and_then(|s| s.cluster_ip.as_deref()),
        Some(ip.as_str())
    );
    assert_eq!(
        replaced
            .spec
            .as_ref()
            .and_then(|s| s.ports.as_ref())
            .map(|p| p[0].port),
        Some(81)
    );

    // The stale copy is a Conflict.
    let err = svcs.replace("web", &stale).expect_err("stale replace");
    assert!(err.is_conflict(), "{err:?}");
    assert!(
        err.to_string().contains("the object has been modified"),
        "{err}"
    );

    // A changed clusterIP is Invalid.
    let mut bad = svcs.get("web").expect("get");
    bad.spec.as_mut().expect("spec").cluster_ip = Some("10.96.99.99".into());
    bad.spec.as_mut().expect("spec").cluster_ips = Some(vec!["10.96.99.99".into()]);
    match svcs.replace("web", &bad).expect_err("immutable clusterIP") {
        KubeError::Invalid { causes, .. } => {
            assert!(
                causes.iter().any(|c| c.field.contains("clusterIP")),
                "{causes:?}"
            )
        }
        other => panic!("{other:?}"),
    }
    let list = svcs.list(&ListParams::default()).expect("list");
    assert!(list.items.iter().any(|s| s.metadata.name() == "web"));
    svcs.patch_merge("web", &json!({"metadata": {"annotations": {"a": "b"}}}))
        .expect("patch");
    // Services answer DELETE with the object.
    match svcs
        .delete("web", &DeleteParams::default())
        .expect("delete")
    {
        Deleted::Object(s) => assert_eq!(s.metadata.name(), "web"),
        Deleted::Status(s) => panic!("service delete answered a Status {s:?}"),
    }
}

two_backends!(pods_status_delete_with_grace_and_preconditions, 180);
fn pods_status_delete_with_grace_and_preconditions(b: &Backend) {
    let client = &b.client;
    let ns = b.ns.as_str();
    let pods = Api::<Pod>::namespaced(client, ns);
    pods.create(&pod("p1", &[("app", "a")])).expect("create");
    let running = wait_running(&pods, "p1");
    assert!(running.pod_ip().is_some());
    assert!(running
        .container_status("main")
        .is_some_and(|c| c.state.as_ref().is_some_and(|s| s.running.is_some())));

    let st = pods.get_status("p1").expect("get_status");
    assert_eq!(st.phase(), "Running");
    // replace_status: a condition of our own, read back.
    let mut st2 = st.clone();
    st2.status
        .as_mut()
        .expect("status")
        .conditions
        .get_or_insert_with(Vec::new)
        .push(kubegate::kube::client::resources::PodCondition {
            type_: "example.com/Checked".into(),
            status: "True".into(),
            ..Default::default()
        });
    let after = pods.replace_status("p1", &st2).expect("replace_status");
    assert!(after
        .status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .is_some_and(|c| c.iter().any(|c| c.type_ == "example.com/Checked")));

    // Preconditions: a wrong uid is a Conflict and deletes nothing.
    let err = pods
        .delete(
            "p1",
            &DeleteParams {
                preconditions: Some(Preconditions {
                    uid: Some("not-the-uid".into()),
                    resource_version: None,
                }),
                ..DeleteParams::default()
            },
        )
        .expect_err("precondition");
    assert!(err.is_conflict(), "{err:?}");
    assert!(pods.get("p1").is_ok());

    // A graceful delete returns the pod with a deletionTimestamp.
    let uid = after.uid().map(str::to_string);
    let deleted = pods
        .delete(
            "p1",
            &DeleteParams {
                grace_period: Some(30),
                propagation: Some(Propagation::Background),
                preconditions: Some(Preconditions {
                    uid,
                    resource_version: None,
                }),
            },
        )
        .expect("delete")
        .object()
        .expect("pods answer DELETE with the object");
    assert!(deleted.metadata.deletion_timestamp.is_some(), "{deleted:?}");
    wait_for("p1 gone", Duration::from_secs(40), || {
        pods.get_opt("p1").expect("get").is_none().then_some(())
    });

    // grace 0: gone at once.
    pods.create(&pod("p2", &[])).expect("create p2");
    wait_running(&pods, "p2");
    pods.delete(
        "p2",
        &DeleteParams {
            grace_period: Some(0),
            ..DeleteParams::default()
        },
    )
    .expect("delete p2");
    wait_for("p2 gone", Duration::from_secs(10), || {
        pods.get_opt("p2").expect("get").is_none().then_some(())
    });
    let err = pods
        .delete("p2", &DeleteParams::default())
        .expect_err("404");
    assert!(err.is_not_found());
}

two_backends!(list_with_label_and_field_selectors, 180);
fn list_with_label_and_field_selectors(b: &Backend) {
    let client = &b.client;
    let ns = b.ns.as_str();
    let pods = Api::<Pod>::namespaced(client, ns);
    for (n, app, tier) in [("a1", "a", "fe"), ("a2", "a", "be"), ("b1", "b", "fe")] {
        pods.create(&pod(n, &[("app", app), ("tier", tier)]))
            .expect("create");
    }
    let names = |lp: &ListParams| -> Vec<String> {
        let mut v: Vec<String> = pods
            .list(lp)
            .expect("list")
            .items
            .iter()
            .map(|p| p.metadata.name().to_string())
            .collect();
        v.sort();
        v
    };
    assert_eq!(names(&ListParams::labels("app=a")), ["a1", "a2"]);
    assert_eq!(
        names(&ListParams::labels("app in (a,b),tier!=be")),
        ["a1", "b1"]
    );
    assert_eq!(names(&ListParams::labels("tier")), ["a1", "a2", "b1"]);
    assert_eq!(names(&ListParams::fields("metadata.name=b1")), ["b1"]);
    assert_eq!(
        names(&ListParams {
            label_selector: Some("app=a".into()),
            field_selector: Some("metadata.name!=a1".into()),
            ..ListParams::default()
        }),
        ["a2"]
    );
    // Across namespaces (others' pods may match on a shared server).
    let all = Api::<Pod>::all(client);
    let found = all.list(&ListParams::labels("app=b")).expect("all").items;
    assert!(
        found.iter().all(|p| p.metadata.label("app") == Some("b")),
        "{found:?}"
    );
    assert!(
        found
            .iter()
            .any(|p| p.metadata.name() == "b1" && p.metadata.namespace.as_deref() == Some(ns)),
        "{found:?}"
    );
}

two_backends!(large_lists_stream_past_ten_megabytes, 180);
fn large_lists_stream_past_ten_megabytes(b: &Backend) {
    let cms = Api::<ConfigMap>::namespaced(&b.client, &b.ns);
    let blob = "x".repeat(200 * 1024);
    for i in 0..55 {
        cms.create(&config_map(&format!("big-{i}"), &[("blob", &blob)]))
            .expect("create");
    }
    // 55 x 200 KiB = 11 MB: more than ureq's read_json cap. (The real
    // plane's namespaces also hold kube-root-ca.crt.)
    let list = cms.list(&ListParams::default()).expect("list");
    let big = list
        .items
        .iter()
        .filter(|c| c.metadata.name().starts_with("big-"))
        .count();
    assert_eq!(big, 55);
}

two_backends!(deployments_replicasets_and_owner_walk_by_uid, 180);
fn deployments_replicasets_and_owner_walk_by_uid(b: &Backend) {
    let client = &b.client;
    let ns = b.ns.as_str();
    let deps = Api::<Deployment>::namespaced(client, ns);
    let labels = BTreeMap::from([("app".to_string(), "web".to_string())]);
    let d = Deployment {
        metadata: meta("web"),
        spec: Some(kubegate::kube::client::resources::DeploymentSpec {
            replicas: Some(1),
            selector: LabelSelector {
                match_labels: Some(labels.clone()),
                ..LabelSelector::default()
            },
            template: PodTemplateSpec {
                metadata: Some(ObjectMeta {
                    labels: Some(labels),
                    ..ObjectMeta::default()
                }),
                spec: Some(PodSpec {
                    containers: vec![container("main")],
                    ..PodSpec::default()
                }),
                ..PodTemplateSpec::default()
            },
            ..Default::default()
        }),
        ..Deployment::default()
    };
    let created = deps.create(&d).expect("create");
    let pods = Api::<Pod>::namespaced(client, ns);
    let p = wait_for("a pod of the deployment", Duration::from_secs(30), || {
        pods.list(&ListParams::labels("app=web"))
            .ok()?
            .items
            .into_iter()
            .next()
    });
    let rs = pod_replicaset(client, &p)
        .expect("rs")
        .expect("owned by a RS");
    assert!(rs.metadata.name().starts_with("web-"));
    let owner = pod_deployment(client, &p).expect("dep").expect("owned");
    assert_eq!(owner.uid(), created.uid());

    let rss = Api::<ReplicaSet>::namespaced(client, ns);
    let listed = rss.list(&ListParams::labels("app=web")).expect("list rs");
    assert_eq!(listed.items.len(), 1);
    let got = rss.get(rs.metadata.name()).expect("get rs");
    assert!(got.spec.as_ref().is_some_and(|s| s.template.is_some()));
    rss.patch_merge(
        rs.metadata.name(),
        &json!({"metadata": {"annotations": {"n": "1"}}}),
    )
    .expect("patch rs");

    // Scale through a merge patch, then a replace.
    deps.patch_merge("web", &json!({"spec": {"replicas": 2}}))
        .expect("patch");
    wait_for("2 pods", Duration::from_secs(30), || {
        (pods.list(&ListParams::labels("app=web")).ok()?.items.len() == 2).then_some(())
    });
    // The controller writes the Deployment's status meanwhile, so a
    // read-modify-write may meet a Conflict: retry it, as clients must.
    wait_for("a replace that wins", Duration::from_secs(30), || {
        let mut cur = deps.get("web").expect("get");
        cur.spec.as_mut().expect("spec").replicas = Some(1);
        match deps.replace("web", &cur) {
            Ok(_) => Some(()),
            Err(KubeError::Conflict(_)) => None,
            Err(e) => panic!("replace: {e:?}"),
        }
    });
    wait_for("ready status", Duration::from_secs(30), || {
        let d = deps.get("web").ok()?;
        let s = d.status?;
        (s.ready_replicas == Some(1) && s.replicas == Some(1)).then_some(())
    });

    // A ReplicaSet re-created under the same name is not the owner: UIDs rule.
    let mut impostor = p.clone();
    if let Some(refs) = impostor.metadata.owner_references.as_mut() {
        for r in refs.iter_mut() {
            r.uid = "some-other-uid".into();
        }
    }
    assert!(pod_replicaset(client, &impostor).expect("rs").is_none());

    // Deployments answer DELETE with a Status.
    match deps
        .delete("web", &DeleteParams::default())
        .expect("delete")
    {
        Deleted::Status(s) => assert!(s.is_success()),
        Deleted::Object(_) => panic!("deployment delete answered the object"),
    }
}

two_backends!(ingresses_every_verb, 180);
fn ingresses_every_verb(b: &Backend) {
    let client = &b.client;
    let ns = b.ns.as_str();
    let ings = Api::<Ingress>::namespaced(client, ns);
    let ing = Ingress {
        metadata: meta("web"),
        spec: Some(IngressSpec {
            ingress_class_name: Some("nginx".into()),
            rules: Some(vec![IngressRule {
                host: Some("web.example.com".into()),
                http: Some(HttpIngressRuleValue {
                    paths: vec![HttpIngressPath {
                        path: Some("/".into()),
                        path_type: "Prefix".into(),
                        backend: IngressBackend {
                            service: Some(IngressServiceBackend {
                                name: "web".into(),
                                port: ServiceBackendPort {
                                    number: Some(80),
                                    ..Default::default()
                                },
                                ..Default::default()
                            }),
                            ..Default::default()
                        },
                        ..Default::default()
                    }],
                    ..Default::default()
                }),
                ..Default::default()
            }]),
            ..Default::default()
        }),
        ..Ingress::default()
    };
    ings.create(&ing).expect("create");
    let mut got = ings.get("web").expect("get");
    assert_eq!(
        got.spec
            .as_ref()
            .and_then(|s| s.ingress_class_name.as_deref()),
        Some("nginx")
    );
    got.spec.as_mut().expect("spec").tls =
        Some(vec![kubegate::kube::client::resources::IngressTls {
            hosts: Some(vec!["web.example.com".into()]),
            secret_name: Some("web-tls".into()),
            ..Default::default()
        }]);
    let replaced = ings.replace("web", &got).expect("replace");
    assert!(replaced.spec.as_ref().is_some_and(|s| s.tls.is_some()));
    ings.patch_merge("web", &json!({"metadata": {"labels": {"a": "b"}}}))
        .expect("patch");
    assert_eq!(
        ings.list(&ListParams::labels("a=b"))
            .expect("list")
            .items
            .len(),
        1
    );

    // pathType is required: Invalid with a cause naming the field.
    let mut bad = ing.clone();
    bad.metadata = meta("bad");
    if let Some(rules) = bad.spec.as_mut().and_then(|s| s.rules.as_mut()) {
        if let Some(http) = rules[0].http.as_mut() {
            http.paths[0].path_type = String::new();
        }
    }
    match ings.create(&bad).expect_err("invalid") {
        KubeError::Invalid { causes, .. } => {
            assert!(
                causes.iter().any(|c| c.field.contains("pathType")),
                "{causes:?}"
            )
        }
        other => panic!("{other:?}"),
    }
    assert!(matches!(
        ings.delete("web", &DeleteParams::default())
            .expect("delete"),
        Deleted::Status(_)
    ));
}

// --------------------------------------------------- errors mapping

two_backends!(status_reasons_map_to_variants, 180);
fn status_reasons_map_to_variants(b: &Backend) {
    let client = &b.client;
    let ns = b.ns.as_str();
    let cms = Api::<ConfigMap>::namespaced(client, ns);
    let pods = Api::<Pod>::namespaced(client, ns);

    let e = cms.get("nope").expect_err("404");
    assert!(matches!(e, KubeError::NotFound(_)), "{e:?}");
    assert!(
        e.to_string().contains("configmaps \"nope\" not found"),
        "{e}"
    );

    cms.create(&config_map("dup", &[])).expect("create");
    let e = cms.create(&config_map("dup", &[])).expect_err("409");
    assert!(matches!(e, KubeError::AlreadyExists(_)), "{e:?}");
    assert_eq!(status_reason(&e), "AlreadyExists");

    let mut stale = cms.get("dup").expect("get");
    cms.patch_merge("dup", &json!({"data": {"x": "1"}}))
        .expect("patch");
    stale.data = Some(BTreeMap::new());
    let e = cms.replace("dup", &stale).expect_err("conflict");
    assert!(matches!(e, KubeError::Conflict(_)), "{e:?}");
    assert!(!e.is_retryable());

    // Invalid, with causes.
    let mut p = pod("bad", &[]);
    p.spec.as_mut().expect("spec").containers = vec![Container {
        name: "main".into(),
        ports: Some(vec![ContainerPort::default()]),
        env: Some(vec![EnvVar::value("", "x")]),
        ..Container::default()
    }];
    match pods.create(&p).expect_err("invalid") {
        KubeError::Invalid {
            message, causes, ..
        } => {
            assert!(message.contains("Pod \"bad\" is invalid"), "{message}");
            let fields: Vec<&str> = causes.iter().map(|c| c.field.as_str()).collect();
            assert!(fields.contains(&"spec.containers[0].image"), "{fields:?}");
            assert!(causes.len() >= 2, "{causes:?}");
        }
        other => panic!("{other:?}"),
    }

    // BadRequest: the name in the body differs from the URL.
    let mut other = cms.get("dup").expect("get");
    other.metadata.name = Some("different".into());
    let e = cms.replace("dup", &other).expect_err("400");
    assert!(matches!(e, KubeError::BadRequest(_)), "{e:?}");

    // A namespace that does not exist is NotFound too.
    let e = Api::<ConfigMap>::namespaced(client, "no-such-ns")
        .create(&config_map("x", &[]))
        .expect_err("ns 404");
    assert!(e.is_not_found(), "{e:?}");

    // Misuse is a Config error, not a request.
    let e = Api::<ConfigMap>::all(client).get("x").expect_err("config");
    assert!(matches!(e, KubeError::Config(_)), "{e:?}");

    // Nothing listening: Transport.
    let dead = Client::with_options(
        Connection::plain("http://127.0.0.1:9"),
        ClientOptions {
            retry: RetryPolicy::none(),
            ..ClientOptions::default()
        },
    )
    .expect("client");
    let e = Api::<ConfigMap>::namespaced(&dead, "default")
        .get("x")
        .expect_err("transport");
    assert!(matches!(e, KubeError::Transport(_)), "{e:?}");
    assert!(e.is_retryable());
}

#[test]
fn throttling_is_retried_after_retry_after_then_reported() {
    let (sim, client) = plain();
    let cms = Api::<ConfigMap>::namespaced(&client, "default");
    cms.create(&config_map("c", &[])).expect("create");

    // Two plain-text 429s with Retry-After: 1, then success; a write too
    // (the server did not act on a throttled request).
    fault(
        &sim,
        json!({"failRequests": {"count": 2, "status": 429, "retryAfterSecs": 1}}),
    );
    let t0 = Instant::now();
    let before = client.retries();
    cms.patch_merge("c", &json!({"data": {"k": "v"}}))
        .expect("patch after 429s");
    assert_eq!(client.retries() - before, 2);
    assert!(
        t0.elapsed() >= Duration::from_millis(1900),
        "{:?}",
        t0.elapsed()
    );
    assert_eq!(failed_requests(&sim), 2);

    // Without retries the caller sees Throttled with the server's delay.
    let no_retry = Client::with_options(
        Connection::plain(&sim.url),
        ClientOptions {
            retry: RetryPolicy::none(),
            ..ClientOptions::default()
        },
    )
    .expect("client");
    fault(
        &sim,
        json!({"failRequests": {"count": 1, "status": 429, "retryAfterSecs": 7}}),
    );
    let e = Api::<ConfigMap>::namespaced(&no_retry, "default")
        .get("c")
        .expect_err("throttled");
    match &e {
        KubeError::Throttled { retry_after, .. } => {
            assert_eq!(*retry_after, Some(Duration::from_secs(7)))
        }
        other => panic!("{other:?}"),
    }
    assert!(e.is_retryable());
    assert_eq!(status_reason(&e), "TooManyRequests");
}

#[test]
fn server_errors_retry_reads_but_not_writes() {
    let (sim, client) = plain();
    let cms = Api::<ConfigMap>::namespaced(&client, "default");
    cms.create(&config_map("c", &[])).expect("create");

    // 503 + Retry-After: retried for reads and writes.
    fault(
        &sim,
        json!({"failRequests": {"count": 2, "status": 503, "retryAfterSecs": 1}}),
    );
    let before = client.retries();
    cms.get("c").expect("get after 503s");
    assert_eq!(client.retries() - before, 2);

    // 500 without Retry-After: a GET is retried with backoff...
    fault(&sim, json!({"failRequests": {"count": 2, "status": 500}}));
    let before = client.retries();
    cms.list(&ListParams::default()).expect("list after 500s");
    assert_eq!(client.retries() - before, 2);

    // ...a write is not: the server may have acted on it.
    fault(&sim, json!({"failRequests": {"count": 1, "status": 500}}));
    let before = client.retries();
    let e = cms.create(&config_map("d", &[])).expect_err("500");
    assert!(matches!(e, KubeError::Server { code: 500, .. }), "{e:?}");
    assert_eq!(client.retries(), before);
    assert_eq!(status_reason(&e), "InternalError");

    // Retries are bounded: a long outage surfaces as Server 503.
    fault(
        &sim,
        json!({"failRequests": {"count": 100, "status": 503, "retryAfterSecs": 0}}),
    );
    let quick = Client::with_options(
        Connection::plain(&sim.url),
        ClientOptions {
            retry: RetryPolicy {
                max_retries: 2,
                initial_backoff: Duration::from_millis(10),
                ..RetryPolicy::default()
            },
            ..ClientOptions::default()
        },
    )
    .expect("client");
    let e = Api::<ConfigMap>::namespaced(&quick, "default")
        .get("c")
        .expect_err("503");
    assert!(matches!(e, KubeError::Server { code: 503, .. }), "{e:?}");
    assert_eq!(quick.retries(), 2);
    let _ = agent().delete(format!("{}/sim/faults", sim.url)).call();
}

// ------------------------------------------------------------- TLS

/// A token source whose first token is wrong: the client must invalidate
/// it on 401 and succeed with the next one.
struct Rotating {
    good: String,
    invalidated: AtomicUsize,
}

impl Credentials for Rotating {
    fn bearer(&self) -> Result<Option<String>, CredentialsError> {
        Ok(Some(if self.invalidated.load(Ordering::SeqCst) == 0 {
            "stale-token".to_string()
        } else {
            self.good.clone()
        }))
    }
    fn invalidate(&self) {
        self.invalidated.fetch_add(1, Ordering::SeqCst);
    }
}

#[test]
fn tls_with_bearer_token() {
    let sim = SimProc::start(&["--tls", "--token", "sekret-token"]);
    assert!(sim.url.starts_with("https://"));
    assert_eq!(read_kubeconfig(&sim).token.as_deref(), Some("sekret-token"));
    let client = Client::new(tls_token_connection(
        &sim,
        Arc::new(StaticToken("sekret-token".into())),
    ))
    .expect("client");
    let cms = Api::<ConfigMap>::namespaced(&client, "default");
    cms.create(&config_map("t", &[("a", "b")]))
        .expect("create over TLS");
    assert_eq!(
        cms.list(&ListParams::default()).expect("list").items.len(),
        1
    );
    cms.delete("t", &DeleteParams::default()).expect("delete");

    // A wrong token: Unauthorized (after one refresh that did not help).
    let wrong = Client::new(tls_token_connection(
        &sim,
        Arc::new(StaticToken("wrong".into())),
    ))
    .expect("client");
    let e = Api::<ConfigMap>::namespaced(&wrong, "default")
        .get("t")
        .expect_err("401");
    assert!(matches!(e, KubeError::Unauthorized(_)), "{e:?}");
    assert!(
        !e.to_string().contains("wrong"),
        "the token leaked into {e}"
    );

    // A rotated token: one 401, invalidate, then success.
    let rot = Arc::new(Rotating {
        good: "sekret-token".into(),
        invalidated: AtomicUsize::new(0),
    });
    let c = Client::new(tls_token_connection(&sim, rot.clone())).expect("client");
    Api::<ConfigMap>::namespaced(&c, "default")
        .list(&ListParams::default())
        .expect("list after refresh");
    assert_eq!(rot.invalidated.load(Ordering::SeqCst), 1);

    // tls-server-name: the certificate is for 127.0.0.1/localhost; naming
    // another server fails verification, naming localhost works.
    let mut conn = tls_token_connection(&sim, Arc::new(StaticToken("sekret-token".into())));
    conn.tls.server_name = Some("kubernetes.example".into());
    let e = Api::<ConfigMap>::namespaced(&Client::new(conn.clone()).expect("client"), "default")
        .list(&ListParams::default())
        .expect_err("name mismatch");
    assert!(matches!(e, KubeError::Transport(_)), "{e:?}");
    conn.tls.server_name = Some("localhost".into());
    Api::<ConfigMap>::namespaced(&Client::new(conn).expect("client"), "default")
        .list(&ListParams::default())
        .expect("tls-server-name localhost");

    // Without the CA: the handshake fails, as Transport.
    let mut untrusted = tls_token_connection(&sim, Arc::new(StaticToken("sekret-token".into())));
    untrusted.tls.ca_certs.clear();
    let e = Api::<ConfigMap>::namespaced(&Client::new(untrusted).expect("client"), "default")
        .list(&ListParams::default())
        .expect_err("unknown CA");
    assert!(matches!(e, KubeError::Transport(_)), "{e:?}");
}

/// The same on the real API server: the plane's `admin-cert.kubeconfig`
/// (a client certificate in `system:masters`, an EC key, no token) through
/// the real kubeconfig loader; without the certificate the caller is
/// `system:anonymous` and refused.
#[test]
fn tls_with_client_certificate_on_the_real_server() {
    let _w = common::backend::watchdog(120);
    common::backend::on_real("client-cert", |b| {
        let path = std::env::var_os("KUBEGATE_REAL_KUBECONFIG_CERT")
            .expect("the plane's env names KUBEGATE_REAL_KUBECONFIG_CERT");
        let conn = kubegate::kube::config::load(&kubegate::kube::config::LoadOptions {
            kubeconfig: Some(path.into()),
            ..Default::default()
        })
        .expect("load the certificate kubeconfig");
        assert!(conn.tls.client_cert.is_some());
        assert!(
            conn.credentials.bearer().expect("credentials").is_none(),
            "no token"
        );
        let cms = Api::<ConfigMap>::namespaced(&Client::new(conn.clone()).expect("client"), &b.ns);
        cms.create(&config_map("cert", &[("k", "v")]))
            .expect("create with a client cert");
        assert_eq!(cms.get("cert").expect("get").metadata.name(), "cert");
        cms.delete("cert", &DeleteParams::default())
            .expect("delete");
        let mut anon = conn;
        anon.tls.client_cert = None;
        let e = Api::<ConfigMap>::namespaced(&Client::new(anon).expect("client"), &b.ns)
            .list(&ListParams::default())
            .expect_err("no cert");
        // kube-apiserver's default `--anonymous-auth=true`: no credentials
        // is the user system:anonymous, whom RBAC refuses (the sim, which
        // has no anonymous user, says 401 instead; docs/sim.md).
        match &e {
            KubeError::Forbidden(s) => assert!(s.message.contains("system:anonymous"), "{s:?}"),
            other => panic!("{other:?}"),
        }
    });
}

#[test]
fn tls_with_client_certificate() {
    let sim = SimProc::start(&["--tls", "--client-ca"]);
    let kc = read_kubeconfig(&sim);
    let conn = Connection {
        server: kc.server.clone(),
        tls: tls_material(&kc, true),
        credentials: Arc::new(kubegate::kube::connection::Anonymous),
        namespace: "default".into(),
        impersonate: None,
    };
    let client = Client::new(conn).expect("client");
    let pods = Api::<Pod>::namespaced(&client, "default");
    pods.create(&pod("c1", &[]))
        .expect("create with a client cert");
    assert_eq!(pods.get("c1").expect("get").metadata.name(), "c1");
    pods.delete(
        "c1",
        &DeleteParams {
            grace_period: Some(0),
            ..DeleteParams::default()
        },
    )
    .expect("delete");

    // Without the certificate the sim refuses us.
    let anon = Connection {
        server: kc.server.clone(),
        tls: tls_material(&kc, false),
        credentials: Arc::new(kubegate::kube::connection::Anonymous),
        namespace: "default".into(),
        impersonate: None,
    };
    let e = Api::<Pod>::namespaced(&Client::new(anon).expect("client"), "default")
        .list(&ListParams::default())
        .expect_err("no cert");
    assert!(matches!(e, KubeError::Unauthorized(_)), "{e:?}");
}

// ----------------------------------------------------------- proxy

/// A pod serving HTTP on its own IP (`$(POD_IP)`): `python3 -m http.server`
/// in the container's working directory, plus a slow streaming endpoint.
fn http_pod(name: &str, port: u16) -> Pod {
    let script = format!(
        r#"
import http.server, os, sys, time
class H(http.server.SimpleHTTPRequestHandler):
    def do_GET(self):
        if self.path.startswith('/stream'):
            self.send_response(200)
            self.send_header('Content-Type', 'text/plain')
            self.end_headers()
            for i in range(5):
                self.wfile.write(('line %d\n' % i).encode()); self.wfile.flush()
                time.sleep(0.3)
            return
        if self.path == '/hello':
            body = b'hello from the pod\n'
            self.send_response(200)
            self.send_header('Content-Length', str(len(body)))
            self.send_header('X-App', 'yes')
            self.end_headers(); self.wfile.write(body); return
        self.send_error(404, 'no such page')
    def do_POST(self):
        n = int(self.headers.get('Content-Length', '0'))
        data = self.rfile.read(n)
        self.send_response(201)
        self.send_header('Content-Length', str(len(data)))
        self.end_headers(); self.wfile.write(data)
    def log_message(self, *a): pass
http.server.ThreadingHTTPServer.protocol_version = 'HTTP/1.0'
http.server.ThreadingHTTPServer((os.environ['POD_IP'], {port}), H).serve_forever()
"#
    );
    Pod {
        metadata: meta(name),
        spec: Some(PodSpec {
            containers: vec![Container {
                command: Some(vec!["python3".into(), "-c".into(), script]),
                env: Some(vec![EnvVar::field_ref("POD_IP", "status.podIP")]),
                ..container("main")
            }],
            ..PodSpec::default()
        }),
        ..Pod::default()
    }
}

#[test]
fn pod_proxy_get_post_stream_and_refused() {
    let (_sim, client) = plain();
    let pods = Api::<Pod>::namespaced(&client, "default");
    pods.create(&http_pod("web", 8080)).expect("create");
    wait_running(&pods, "web");

    // Until the server binds, the port refuses: a clear error, not a 503 body.
    let resp = wait_for("the app answers", Duration::from_secs(30), || match client
        .pod_proxy(&ProxyRequest::get("default", "web", 8080, "/hello"))
    {
        Ok(r) => Some(r),
        Err(ProxyError::ConnectionRefused { .. }) => None,
        Err(e) => panic!("unexpected proxy error {e:?}"),
    });
    assert_eq!(resp.status, 200);
    assert_eq!(resp.header("x-app"), Some("yes"));
    assert_eq!(resp.into_string().expect("body"), "hello from the pod\n");

    // The app's own 404 is a normal response.
    let r = client
        .pod_proxy(&ProxyRequest::get("default", "web", 8080, "/missing"))
        .expect("404 is an answer");
    assert_eq!(r.status, 404);
    assert!(r.into_string().expect("body").contains("no such page"));

    // POST with a body.
    let r = client
        .pod_proxy(&ProxyRequest::post(
            "default",
            "web",
            8080,
            "/echo",
            b"ping".to_vec(),
        ))
        .expect("post");
    assert_eq!(r.status, 201);
    assert_eq!(r.into_string().expect("body"), "ping");

    // A streamed response arrives line by line, before the app finishes.
    let t0 = Instant::now();
    let r = client
        .pod_proxy(&ProxyRequest::get("default", "web", 8080, "/stream"))
        .expect("stream");
    let mut lines = BufReader::new(r).lines();
    let first = lines.next().expect("a line").expect("read");
    let first_at = t0.elapsed();
    assert_eq!(first, "line 0");
    let rest: Vec<String> = lines.map(|l| l.expect("read")).collect();
    assert_eq!(rest.len(), 4, "{rest:?}");
    assert!(
        first_at + Duration::from_millis(900) < t0.elapsed(),
        "the first line ({first_at:?}) came only with the rest ({:?})",
        t0.elapsed()
    );

    // A port nobody listens on: ConnectionRefused.
    match client.pod_proxy(&ProxyRequest::get("default", "web", 9, "/")) {
        Err(ProxyError::ConnectionRefused { message }) => {
            assert!(message.contains("connection refused"), "{message}")
        }
        other => panic!("{other:?}"),
    }
    // A pod that does not exist: NotFound from the API server.
    match client.pod_proxy(&ProxyRequest::get("default", "nope", 80, "/")) {
        Err(ProxyError::Kube(KubeError::NotFound(_))) => {}
        other => panic!("{other:?}"),
    }
}

#[test]
fn proxy_stream_can_be_cancelled() {
    let (_sim, client) = plain();
    let pods = Api::<Pod>::namespaced(&client, "default");
    // A server that sends headers and one line, then stays silent.
    let script = r#"
import socket, os, time
s = socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
s.bind((os.environ['POD_IP'], 8081)); s.listen(8)
while True:
    c, _ = s.accept()
    c.recv(65536)
    c.sendall(b'HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nTransfer-Encoding: chunked\r\n\r\n6\r\nhello\n\r\n')
"#;
    let p = Pod {
        metadata: meta("silent"),
        spec: Some(PodSpec {
            containers: vec![Container {
                command: Some(vec!["python3".into(), "-c".into(), script.into()]),
                env: Some(vec![EnvVar::field_ref("POD_IP", "status.podIP")]),
                ..container("main")
            }],
            ..PodSpec::default()
        }),
        ..Pod::default()
    };
    pods.create(&p).expect("create");
    wait_running(&pods, "silent");
    let mut resp = wait_for("the app answers", Duration::from_secs(30), || {
        client
            .pod_proxy(&ProxyRequest::get("default", "silent", 8081, "/"))
            .ok()
    });
    let mut buf = [0u8; 6];
    resp.read_exact(&mut buf).expect("first chunk");
    assert_eq!(&buf, b"hello\n");
    let cancel = resp.canceller();
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let mut more = [0u8; 16];
        let _ = tx.send(resp.read(&mut more).map(|n| n == 0));
    });
    // The reader is blocked; cancelling ends it promptly.
    assert!(rx.recv_timeout(Duration::from_millis(300)).is_err());
    let t0 = Instant::now();
    cancel.cancel();
    let ended = rx
        .recv_timeout(Duration::from_secs(5))
        .expect("the read returned after cancel");
    assert!(ended.unwrap_or(true), "cancel ends the stream");
    assert!(t0.elapsed() < Duration::from_secs(2));
}

#[test]
fn resource_constants() {
    assert_eq!(Pod::PLURAL, "pods");
    assert_eq!(Ingress::GROUP, "networking.k8s.io");
    const { assert!(!Namespace::NAMESPACED) };
}
