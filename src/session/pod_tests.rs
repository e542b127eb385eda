use super::*;
use crate::session::spec::{AppSpec, Io, Port, Protocol, PullPolicy, SessionSpec};

// The fixtures tests/session_pods.rs shares (one copy of them).
#[path = "pod_fixtures.rs"]
mod fixtures;
use fixtures::*;

fn env_of(c: &Value) -> Vec<(String, Value)> {
    c["env"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| {
            (
                e["name"].as_str().unwrap().to_string(),
                e.get("value")
                    .cloned()
                    .or_else(|| e.get("valueFrom").cloned())
                    .unwrap(),
            )
        })
        .collect()
}

#[test]
fn names() {
    assert_eq!(
        pod_name("abc123def456", 1_700_000_000_000, 1),
        "kubegate-watch-abc123def456-loyw3v281"
    );
    assert_eq!(pod_name("s", 0, 0), "kubegate-watch-s-00");
    assert_eq!(pod_name("s", 35, 36), "kubegate-watch-s-z10");
    assert_eq!(service_name("abc"), "kubegate-run-abc");
    let longest = pod_name("abcdefghijkl", u64::MAX, u64::MAX);
    assert!(crate::kube::names::check_dns_subdomain(&longest).is_ok());
}

#[test]
fn principal_labels() {
    assert_eq!(principal_label("demo"), "demo");
    assert_eq!(principal_label("Team.A_1"), "Team.A_1");
    let l = principal_label("alice@example.com");
    assert!(l.starts_with("alice-example.com-"), "{l}");
    assert_eq!(l.len(), "alice-example.com-".len() + 12);
    // Two names that sanitise alike stay apart.
    assert_ne!(principal_label("a b"), principal_label("a+b"));
    for name in ["ü", "  ", "-x-", &"y".repeat(100), "a/b/c", "名前"] {
        let l = principal_label(name);
        assert!(check_label_value(&l).is_ok(), "{name:?} -> {l:?}");
    }
    assert!(principal_label("ü").starts_with("p-"));
}

#[test]
fn the_pod_round_trips_into_the_typed_pod() {
    let s = spec();
    let v = build_pod_json(&settings(), &input(&s, &NO_REQUEST));
    let typed: Pod = serde_json::from_value(v.clone()).unwrap();
    assert_eq!(serde_json::to_value(&typed).unwrap(), v);
    assert_eq!(build_pod(&settings(), &input(&s, &NO_REQUEST)), typed);
    assert_eq!(typed.metadata.name(), "kubegate-watch-abc123def456-x1");
    assert_eq!(typed.spec.as_ref().unwrap().containers.len(), 3);
}

#[test]
fn pod_level_fields() {
    let s = spec();
    let v = build_pod_json(&settings(), &input(&s, &NO_REQUEST));
    let m = &v["metadata"];
    assert_eq!(m["namespace"], "default");
    assert_eq!(m["labels"]["app.kubernetes.io/managed-by"], "kubegate");
    assert_eq!(m["labels"]["kubegate.dev/session-id"], "abc123def456");
    assert_eq!(m["labels"]["kubegate.dev/mode"], "watch");
    assert_eq!(m["labels"]["kubegate.dev/principal"], "demo");
    assert_eq!(m["annotations"]["kubegate.dev/principal"], "demo");
    let sp = &v["spec"];
    assert_eq!(sp["restartPolicy"], "Never");
    assert_eq!(sp["activeDeadlineSeconds"], 21000);
    assert_eq!(sp["automountServiceAccountToken"], false);
    assert_eq!(sp["securityContext"]["runAsNonRoot"], true);
    // Sim mode: no fixed uid, the sim gives each pod its own.
    assert!(sp["securityContext"].get("runAsUser").is_none(), "{sp}");
    assert!(sp["containers"][0]["securityContext"]
        .get("runAsUser")
        .is_none());
    assert_eq!(sp["containers"][0]["securityContext"]["runAsNonRoot"], true);
    assert_eq!(
        sp["securityContext"]["seccompProfile"]["type"],
        "RuntimeDefault"
    );
    let vols: Vec<&str> = sp["volumes"]
        .as_array()
        .unwrap()
        .iter()
        .map(|v| v["name"].as_str().unwrap())
        .collect();
    // The app runner is on by default: its binary volume and init container.
    assert_eq!(vols, ["workspace", "scratch", "kubegate-bin"]);
    let init = &sp["initContainers"][0];
    assert_eq!(init["name"], INSTALL_CONTAINER);
    assert_eq!(init["securityContext"], container_security(&settings()));
    assert_eq!(init["resources"]["requests"], init["resources"]["limits"]);
    let names: Vec<&str> = sp["containers"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c["name"].as_str().unwrap())
        .collect();
    assert_eq!(names, ["workspace", "app-web", "app-worker"]);
    for c in sp["containers"].as_array().unwrap() {
        let sc = &c["securityContext"];
        assert_eq!(sc["allowPrivilegeEscalation"], false);
        assert_eq!(sc["capabilities"]["drop"], json!(["ALL"]));
        assert_eq!(sc["readOnlyRootFilesystem"], true);
        assert_eq!(sc["runAsNonRoot"], true);
        assert_eq!(c["resources"]["requests"], c["resources"]["limits"]);
        assert_eq!(c["resources"]["limits"]["cpu"], "2");
        assert_eq!(c["resources"]["limits"]["memory"], "1Gi");
        assert_eq!(c["resources"]["limits"]["ephemeral-storage"], "2Gi");
        assert_eq!(c["volumeMounts"][0]["mountPath"], "/workspace");
        assert_eq!(c["volumeMounts"][1]["mountPath"], "/tmp");
        assert_eq!(c["volumeMounts"][1]["subPath"], c["name"]);
    }
    // Remaining life is at least one second.
    let mut i = input(&s, &NO_REQUEST);
    i.remaining_life_secs = 0;
    assert_eq!(
        build_pod_json(&settings(), &i)["spec"]["activeDeadlineSeconds"],
        1
    );
}

#[test]
fn workspace_container() {
    let s = spec();
    let v = build_pod_json(&settings(), &input(&s, &NO_REQUEST));
    let w = &v["spec"]["containers"][0];
    assert!(w["image"]
        .as_str()
        .unwrap()
        .starts_with("ghcr.io/kubegate/kubegate:"));
    assert_eq!(
        w["command"],
        json!([
            "kubegate",
            "workspace-agent",
            "--listen",
            "$(POD_IP):8099",
            "--root",
            "/workspace"
        ])
    );
    let env = env_of(w);
    assert_eq!(env[0].0, "POD_IP");
    assert_eq!(env[0].1["fieldRef"]["fieldPath"], "status.podIP");
    assert!(w.get("stdin").is_none());
}

/// The pod carries no token: anyone who may list pods in the session
/// namespace reads the pod JSON (the builder is not even given the token).
/// The agent's variable comes from the pod's own Secret instead.
#[test]
fn the_pod_holds_no_token_only_a_reference_to_its_secret() {
    let s = spec();
    let v = build_pod_json(&settings(), &input(&s, &NO_REQUEST));
    let all = v["spec"]["containers"]
        .as_array()
        .unwrap()
        .iter()
        .chain(v["spec"]["initContainers"].as_array().unwrap());
    let mut refs = Vec::new();
    for c in all {
        for e in c["env"].as_array().into_iter().flatten() {
            if e["name"] == "KUBEGATE_WORKSPACE_TOKEN" {
                assert!(e.get("value").is_none(), "a literal token: {e}");
                refs.push((c["name"].clone(), e["valueFrom"].clone()));
            }
        }
    }
    assert_eq!(
        refs,
        [(
            json!("workspace"),
            json!({"secretKeyRef": {"name": "kubegate-watch-abc123def456-x1-token", "key": "token"}})
        )]
    );
    let pod = build_pod(&settings(), &input(&s, &NO_REQUEST));
    assert!(uses_token_secret(&pod));
}

/// A pod built before the token moved to a Secret (a literal env value)
/// needs no Secret: a re-adoption must not create one for it.
#[test]
fn a_pod_from_before_the_secret_uses_none() {
    let s = spec();
    let mut v = build_pod_json(&settings(), &input(&s, &NO_REQUEST));
    v["spec"]["containers"][0]["env"][2] =
        json!({"name": "KUBEGATE_WORKSPACE_TOKEN", "value": "old-literal"});
    let old: Pod = serde_json::from_value(v.clone()).unwrap();
    assert!(!uses_token_secret(&old));
    // Nor does a reference to a Secret that is not the pod's own.
    v["spec"]["containers"][0]["env"][2] = json!({"name": "KUBEGATE_WORKSPACE_TOKEN",
        "valueFrom": {"secretKeyRef": {"name": "someone-elses", "key": "token"}}});
    let other: Pod = serde_json::from_value(v).unwrap();
    assert!(!uses_token_secret(&other));
}

#[test]
fn the_token_secret() {
    let st = settings();
    let sec = build_token_secret(&st, "sid", "kubegate-watch-sid-x1", "uid-1", "tok-en").unwrap();
    assert_eq!(sec.decoded(TOKEN_KEY).as_deref(), Some(&b"tok-en"[..]));
    let v = serde_json::to_value(&sec).unwrap();
    assert_eq!(
        v,
        json!({
            "apiVersion": "v1",
            "kind": "Secret",
            "metadata": {
                "name": "kubegate-watch-sid-x1-token",
                "namespace": "default",
                "labels": {"app.kubernetes.io/managed-by": "kubegate", "kubegate.dev/session-id": "sid"},
                "ownerReferences": [{"apiVersion": "v1", "kind": "Pod",
                    "name": "kubegate-watch-sid-x1", "uid": "uid-1"}],
            },
            "type": "Opaque",
            "immutable": true,
            "data": {"token": "dG9rLWVu"},
        })
    );
}

#[test]
fn app_containers() {
    let s = spec();
    let v = build_pod_json(&settings(), &input(&s, &NO_REQUEST));
    let web = &v["spec"]["containers"][1];
    assert_eq!(web["image"], "node:22", "the session's image");
    assert_eq!(web["imagePullPolicy"], "Always");
    assert_eq!(web["stdin"], true);
    assert_eq!(web["tty"], true);
    assert_eq!(web["workingDir"], "/workspace");
    assert_eq!(
        web["command"],
        json!(["sh", "-c", WAIT_SCRIPT_RUNNER, "sh"])
    );
    // User argv is literal for Kubernetes: `$(HOME)` is not expanded.
    assert_eq!(web["args"], json!(["node", "--watch", "$$(HOME)"]));
    assert_eq!(
        web["ports"],
        json!([{"containerPort": 8080, "protocol": "TCP"}])
    );
    let env = env_of(web);
    let names: Vec<&str> = env.iter().map(|(n, _)| n.as_str()).collect();
    assert_eq!(
        names,
        [
            "POD_IP",
            "HOME",
            "MODE",
            "KUBEGATE_APP",
            "KUBEGATE_WORKSPACE",
            "KUBEGATE_ENTRY",
            "KUBEGATE_INSPECT_ADDR"
        ]
    );
    let get = |n: &str| env.iter().find(|(k, _)| k == n).unwrap().1.clone();
    assert_eq!(get("MODE"), "dev $$(X)");
    assert_eq!(get("KUBEGATE_ENTRY"), "/workspace/src/main.js");
    assert_eq!(get("KUBEGATE_INSPECT_ADDR"), "$(POD_IP):9230");
    let worker = &v["spec"]["containers"][2];
    assert_eq!(worker["image"], "alpine:3", "the app's own image");
    assert_eq!(worker["tty"], false);
    assert_eq!(
        worker["ports"],
        json!([{"containerPort": 5353, "protocol": "UDP"}])
    );
    // The configured default command, not made literal.
    assert_eq!(worker["args"], json!(["sh", "$(KUBEGATE_ENTRY)"]));
    let env = env_of(worker);
    assert!(env.contains(&("KUBEGATE_INSPECT_ADDR".into(), json!("$(POD_IP):9231"))));
    // No session image: the default; no pull policy: none set.
    let mut s2 = spec();
    s2.image = None;
    s2.pull_policy = None;
    s2.env = vec![("HOME".into(), "/home/me".into())];
    let v = build_pod_json(&settings(), &input(&s2, &NO_REQUEST));
    let web = &v["spec"]["containers"][1];
    assert_eq!(web["image"], DEFAULT_APP_IMAGE_FOR_TEST);
    assert!(web.get("imagePullPolicy").is_none());
    let homes: Vec<_> = env_of(web)
        .into_iter()
        .filter(|(k, _)| k == "HOME")
        .collect();
    assert_eq!(homes, vec![("HOME".to_string(), json!("/home/me"))]);
}

/// The default app image (`cluster.default_app_image`'s default).
const DEFAULT_APP_IMAGE_FOR_TEST: &str = "docker.io/library/busybox:1.37";

#[test]
fn resources_are_clamped() {
    let s = spec();
    let r = Requested {
        cpu: Some("500m".into()),
        memory: Some("4Gi".into()),
        ephemeral_storage: Some("much".into()),
    };
    let v = build_pod_json(&settings(), &input(&s, &r));
    let app = &v["spec"]["containers"][1]["resources"];
    assert_eq!(
        app["limits"],
        json!({"cpu": "500m", "memory": "1Gi", "ephemeral-storage": "2Gi"})
    );
    assert_eq!(app["requests"], app["limits"]);
}

#[test]
fn the_app_runner_when_enabled() {
    let mut st = settings();
    st.app_runner = true;
    let mut s = spec();
    s.apps[1].runner = false;
    let v = build_pod_json(&st, &input(&s, &NO_REQUEST));
    let sp = &v["spec"];
    assert_eq!(sp["volumes"][2]["name"], "kubegate-bin");
    let init = &sp["initContainers"][0];
    assert_eq!(init["name"], INSTALL_CONTAINER);
    assert_eq!(init["image"], st.workspace_image);
    assert_eq!(
        init["command"],
        json!(["kubegate", "install-self", "/kubegate/bin"])
    );
    let web = &sp["containers"][1];
    assert_eq!(web["command"][2], WAIT_SCRIPT_RUNNER);
    assert_eq!(web["volumeMounts"][2]["mountPath"], "/kubegate/bin");
    assert_eq!(web["volumeMounts"][2]["readOnly"], true);
    let worker = &sp["containers"][2];
    assert_eq!(worker["command"][2], WAIT_SCRIPT);
    assert_eq!(worker["volumeMounts"].as_array().unwrap().len(), 2);
    // Nobody wants the runner: no init container.
    s.apps[0].runner = false;
    let v = build_pod_json(&st, &input(&s, &NO_REQUEST));
    assert!(v["spec"].get("initContainers").is_none());
}

#[test]
fn without_the_app_runner_apps_run_directly() {
    let mut st = settings();
    st.app_runner = false;
    let s = spec();
    let v = build_pod_json(&st, &input(&s, &NO_REQUEST));
    let sp = &v["spec"];
    assert!(sp.get("initContainers").is_none());
    assert_eq!(sp["volumes"].as_array().unwrap().len(), 2);
    for c in &sp["containers"].as_array().unwrap()[1..] {
        assert_eq!(c["command"][2], WAIT_SCRIPT);
        assert_eq!(c["volumeMounts"].as_array().unwrap().len(), 2);
    }
}

/// The wait loop runs the app only once the entry exists, and the entry's
/// name never reaches the shell as code.
#[test]
fn the_wait_script_waits_and_never_interprets_the_path() {
    let dir = std::env::temp_dir().join(format!("kg-wait-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let entry = dir.join("a'; touch pwned; echo '$(touch pwned2)");
    let out = dir.join("ran");
    let mut child = std::process::Command::new("sh")
        .args(["-c", WAIT_SCRIPT, "sh", "sh", "-c", "echo ok > \"$0\""])
        .arg(&out)
        .env("KUBEGATE_ENTRY", &entry)
        .current_dir(&dir)
        .spawn()
        .unwrap();
    std::thread::sleep(std::time::Duration::from_millis(300));
    assert!(!out.exists(), "ran before the entry existed");
    std::fs::write(&entry, "x").unwrap();
    let status = child.wait().unwrap();
    assert!(status.success());
    assert_eq!(std::fs::read_to_string(&out).unwrap(), "ok\n");
    assert!(!dir.join("pwned").exists() && !dir.join("pwned2").exists());
    let _ = std::fs::remove_dir_all(&dir);
}

fn published<'a>(
    session_id: &'a str,
    principal: &'a str,
    pod_name: &'a str,
    pod_uid: &'a str,
    ports: AppPorts<'a>,
) -> Published<'a> {
    Published {
        session_id,
        principal,
        pod_name,
        pod_uid,
        ports,
    }
}

fn ports() -> Vec<(String, Vec<Port>)> {
    vec![
        (
            "web".into(),
            vec![
                Port::tcp(8080),
                Port {
                    port: 53,
                    protocol: Protocol::Udp,
                },
            ],
        ),
        (
            "dns".into(),
            vec![
                Port::tcp(53),
                Port {
                    port: 5353,
                    protocol: Protocol::Udp,
                },
            ],
        ),
    ]
}

#[test]
fn service() {
    let st = settings();
    let p = ports();
    let svc = build_service(&st, &published("sid", "demo", "pod-1", "uid-1", &p)).unwrap();
    let v = serde_json::to_value(&svc).unwrap();
    assert_eq!(v["metadata"]["name"], "kubegate-run-sid");
    assert_eq!(v["metadata"]["labels"]["kubegate.dev/session-id"], "sid");
    assert_eq!(
        v["metadata"]["ownerReferences"],
        json!([{"apiVersion": "v1", "kind": "Pod", "name": "pod-1", "uid": "uid-1",
                "controller": true, "blockOwnerDeletion": true}])
    );
    assert_eq!(
        v["spec"]["selector"],
        json!({"kubegate.dev/session-id": "sid"})
    );
    let names: Vec<&str> = v["spec"]["ports"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| p["name"].as_str().unwrap())
        .collect();
    assert_eq!(names, ["p8080", "p53-udp", "p53", "p5353"]);
    assert_eq!(v["spec"]["ports"][1]["protocol"], "UDP");
    assert_eq!(v["spec"]["ports"][0]["targetPort"], 8080);
    assert!(build_service(
        &st,
        &published("sid", "demo", "pod", "uid", &[("a".into(), vec![])])
    )
    .is_none());
}

#[test]
fn ingress() {
    let mut st = settings();
    let p = ports();
    assert!(
        build_ingress(&st, &published("sid", "demo", "pod", "uid", &p)).is_none(),
        "no base domain: Service only"
    );
    st.base_domain = Some("dev.example.com".into());
    assert!(
        build_ingress(&st, &published("sid", "demo", "pod", "uid", &p)).is_none(),
        "no ingress routing: no Ingress"
    );
    st.routing = Routing::Ingress;
    let ing = build_ingress(&st, &published("sid", "demo", "pod", "uid", &p)).unwrap();
    let v = serde_json::to_value(&ing).unwrap();
    assert_eq!(v["metadata"]["name"], "kubegate-run-sid");
    assert_eq!(v["metadata"]["ownerReferences"][0]["name"], "pod");
    assert!(v["spec"].get("ingressClassName").is_none());
    assert!(v["spec"].get("tls").is_none());
    let rules = v["spec"]["rules"].as_array().unwrap();
    assert_eq!(rules.len(), 2, "tcp ports only");
    assert_eq!(rules[0]["host"], "8080-sid.dev.example.com");
    assert_eq!(
        rules[0]["http"]["paths"][0],
        json!({"path": "/", "pathType": "Prefix",
               "backend": {"service": {"name": "kubegate-run-sid", "port": {"number": 8080}}}})
    );
    assert_eq!(rules[1]["host"], "53-sid.dev.example.com");
    st.ingress_class = Some("nginx".into());
    st.ingress_tls_secret = Some("wild".into());
    let v = serde_json::to_value(
        build_ingress(&st, &published("sid", "demo", "pod", "uid", &p)).unwrap(),
    )
    .unwrap();
    assert_eq!(v["spec"]["ingressClassName"], "nginx");
    assert_eq!(
        v["spec"]["tls"],
        json!([{"hosts": ["8080-sid.dev.example.com", "53-sid.dev.example.com"], "secretName": "wild"}])
    );
    let udp_only = vec![(
        "a".to_string(),
        vec![Port {
            port: 1,
            protocol: Protocol::Udp,
        }],
    )];
    assert!(build_ingress(&st, &published("sid", "demo", "pod", "uid", &udp_only)).is_none());
}

#[test]
fn endpoint_lists() {
    let p = ports();
    let with = all_endpoints(Some("d.io"), "sid", &p);
    assert_eq!(
        serde_json::to_value(&with[0]).unwrap(),
        json!({"app": "web", "port": 8080, "protocol": "tcp", "host": "8080-sid.d.io", "url": "https://8080-sid.d.io"})
    );
    assert_eq!(
        serde_json::to_value(&with[1]).unwrap(),
        json!({"app": "web", "port": 53, "protocol": "udp", "host": "", "url": null})
    );
    let without = all_endpoints(None, "sid", &p);
    assert_eq!(without.len(), 4);
    assert!(without.iter().all(|e| e.host.is_empty() && e.url.is_none()));
    assert_eq!(without[2].app, "dns");
}

fn pod_with_status(status: Value) -> Pod {
    serde_json::from_value(json!({"metadata": {"name": "p"}, "status": status})).unwrap()
}

fn waiting(name: &str, reason: &str) -> Value {
    json!({"name": name, "state": {"waiting": {"reason": reason}}})
}

#[test]
fn provisioning_progress() {
    let msg = |s: Value| provision_message(&pod_with_status(s));
    assert_eq!(provision_message(&Pod::default()), "Scheduling");
    assert_eq!(msg(json!({"phase": "Pending"})), "Scheduling");
    assert_eq!(
        msg(json!({"containerStatuses": [waiting("workspace", "ContainerCreating")]})),
        "Creating container"
    );
    assert_eq!(
        msg(json!({"containerStatuses": [waiting("app-a", "ErrImagePull")]})),
        "Pulling image"
    );
    assert_eq!(
        msg(json!({"containerStatuses": [waiting("app-a", "ImagePullBackOff")]})),
        "Pulling image"
    );
    assert_eq!(
        msg(json!({"containerStatuses": [waiting("app-a", "CreateContainerConfigError")]})),
        "CreateContainerConfigError"
    );
    // Init containers come first...
    assert_eq!(
        msg(json!({
            "initContainerStatuses": [waiting("install-kubegate", "PodInitializing")],
            "containerStatuses": [waiting("app-a", "ContainerCreating")]
        })),
        "Delivering application"
    );
    // ...but an image that cannot be pulled is said first wherever it is.
    assert_eq!(
        msg(json!({
            "initContainerStatuses": [waiting("install-kubegate", "PodInitializing")],
            "containerStatuses": [waiting("app-a", "ErrImagePull")]
        })),
        "Pulling image"
    );
    // The first WAITING one: a running container is skipped.
    assert_eq!(
        msg(json!({"containerStatuses": [
            {"name": "workspace", "state": {"running": {}}},
            waiting("app-a", "ContainerCreating")
        ]})),
        "Creating container"
    );
    assert_eq!(
        msg(
            json!({"conditions": [{"type": "PodScheduled", "status": "False", "reason": "Unschedulable", "message": "0/1 nodes"}]})
        ),
        "Unschedulable: 0/1 nodes"
    );
}

#[test]
fn ended_containers() {
    let t = |reason: Option<&str>, code: i32| ContainerStateTerminated {
        exit_code: code,
        reason: reason.map(str::to_string),
        ..Default::default()
    };
    assert_eq!(
        ended_message(&t(Some("OOMKilled"), 137)),
        "application container OOMKilled (exit code 137)"
    );
    assert_eq!(
        ended_message(&t(Some("Error"), 2)),
        "application container Error (exit code 2)"
    );
    assert_eq!(
        ended_message(&t(Some("Completed"), 0)),
        "application container exited (code 0)"
    );
    assert_eq!(
        ended_message(&t(None, 3)),
        "application container exited (code 3)"
    );
    let pod = pod_with_status(json!({"phase": "Running", "containerStatuses": [
        {"name": "workspace", "state": {"terminated": {"exitCode": 1}}},
        {"name": "app-web", "state": {"terminated": {"exitCode": 1, "reason": "Error"}}},
        {"name": "app-ok", "state": {"running": {}}}
    ]}));
    assert_eq!(
        ended_apps(&pod),
        vec![EndedApp {
            app: "web".into(),
            exit_code: 1,
            message: "application container Error (exit code 1)".into()
        }]
    );
}

#[test]
fn failure_details() {
    let d = |s: Value| failure_detail(&pod_with_status(s));
    assert_eq!(
        d(
            json!({"phase": "Failed", "reason": "DeadlineExceeded", "message": "Pod was active too long"})
        ),
        "Failed: DeadlineExceeded: Pod was active too long"
    );
    assert!(deadline_exceeded(&pod_with_status(
        json!({"phase": "Failed", "reason": "DeadlineExceeded"})
    )));
    assert_eq!(
        d(json!({"phase": "Failed", "containerStatuses": [
            {"name": "workspace", "state": {"terminated": {"exitCode": 0, "reason": "Completed"}}},
            {"name": "app-a", "state": {"terminated": {"exitCode": 127, "reason": "Error", "message": "sh: not found"}}}
        ]})),
        "Failed: container app-a Error (exit code 127): sh: not found"
    );
    assert_eq!(d(json!({"phase": "Succeeded"})), "Succeeded");
    assert_eq!(failure_detail(&Pod::default()), "Unknown");
}

#[test]
fn outside_sim_mode_pods_name_the_fixed_non_root_uid() {
    // The conversion from the config: session::engine::settings's test.
    let s = PodSettings::default();
    assert_eq!(s.run_as, Some(RUN_AS));
    let p = pod_security(&s);
    assert_eq!(
        (&p["runAsUser"], &p["runAsGroup"], &p["fsGroup"]),
        (&json!(RUN_AS), &json!(RUN_AS), &json!(RUN_AS))
    );
    assert_eq!(p["runAsNonRoot"], true);
    let c = container_security(&s);
    assert_eq!(
        (&c["runAsUser"], &c["runAsNonRoot"]),
        (&json!(RUN_AS), &json!(true))
    );
}
