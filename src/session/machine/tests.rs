use super::*;
use crate::session::gateway::Routing;
use crate::session::spec::{AppSpec, Io, Port, Protocol, SessionSpec};

pub(super) const T0: Millis = 1_700_000_000_000;

pub(super) fn timings() -> Timings {
    Timings {
        start_deadline_ms: 180_000,
        agent_deadline_ms: 120_000,
        idle_ms: 300_000,
        max_life_ms: 6 * 3_600_000,
        suspended_ttl_ms: 86_400_000,
        checkpoint_interval_ms: 30_000,
        reloads_per_minute: 3,
    }
}

/// The pods sim mode builds (no uid named), apps under the app runner
/// (the default).
pub(super) fn settings(domain: Option<&str>) -> Arc<PodSettings> {
    Arc::new(PodSettings {
        base_domain: domain.map(str::to_string),
        routing: if domain.is_some() {
            Routing::Ingress
        } else {
            Routing::None
        },
        app_runner: true,
        run_as: None,
        ..PodSettings::default()
    })
}

pub(super) fn app(name: &str, ports: Vec<Port>) -> AppSpec {
    AppSpec {
        name: name.into(),
        entry: format!("{name}.js"),
        command: None,
        image: None,
        ports,
        io: Io::Tty,
        runner: true,
    }
}

fn udp(port: u16) -> Port {
    Port {
        port,
        protocol: Protocol::Udp,
    }
}

pub(super) fn new_session(domain: Option<&str>) -> (Session, Vec<Command>) {
    let mut worker = app("worker", vec![Port::tcp(3000), udp(5353)]);
    worker.io = Io::Streams;
    Session::start(
        NewSession {
            id: "sid000000001".into(),
            principal: "demo".into(),
            spec: SessionSpec {
                apps: vec![app("web", vec![Port::tcp(8080)]), worker],
                env: vec![],
                image: None,
                pull_policy: None,
            },
            workspace_token: "tok".into(),
            settings: settings(domain),
            timings: timings(),
        },
        T0,
    )
}

/// The attaches among the commands: `(app, container, tty, recover)`.
pub(super) fn attach_commands(cmds: &[Command]) -> Vec<(&str, &str, bool, bool)> {
    cmds.iter()
        .filter_map(|x| match x {
            Command::Attach {
                app,
                container,
                tty,
                recover,
                ..
            } => Some((app.as_str(), container.as_str(), *tty, *recover)),
            _ => None,
        })
        .collect()
}

/// The create of `pod` answered with `uid`.
pub(super) fn created(s: &mut Session, pod: &str, uid: &str, at: Millis) -> Vec<Command> {
    s.handle(
        Input::PodCreated {
            pod: pod.into(),
            uid: uid.into(),
        },
        at,
    )
}

pub(super) fn created_pod(cmds: &[Command]) -> Pod {
    cmds.iter()
        .find_map(|c| match c {
            Command::CreatePod { pod } => Some((**pod).clone()),
            _ => None,
        })
        .expect("a CreatePod command")
}

pub(super) fn pod_json(name: &str, status: Value) -> Box<Pod> {
    Box::new(
        serde_json::from_value(json!({"metadata": {"name": name, "uid": "u-1"}, "status": status}))
            .unwrap(),
    )
}

pub(super) fn running(name: &str) -> Input {
    Input::PodObserved {
        pod: pod_json(
            name,
            json!({"phase": "Running", "podIP": "10.0.0.7", "containerStatuses": [
                {"name": "workspace", "state": {"running": {}}},
                {"name": "app-web", "state": {"running": {}}},
            ]}),
        ),
    }
}

pub(super) fn events(cmds: &[Command]) -> Vec<(&'static str, Value)> {
    cmds.iter()
        .filter_map(|c| match c {
            Command::Emit(e) => Some((e.kind(), e.data())),
            _ => None,
        })
        .collect()
}

pub(super) fn statuses(cmds: &[Command]) -> Vec<String> {
    events(cmds)
        .into_iter()
        .filter(|(k, _)| *k == "status")
        .map(|(_, d)| d["status"].as_str().unwrap().to_string())
        .collect()
}

pub(super) fn has(cmds: &[Command], f: impl Fn(&Command) -> bool) -> bool {
    cmds.iter().any(f)
}

pub(super) fn publish_id(cmds: &[Command]) -> u64 {
    cmds.iter()
        .find_map(|c| match c {
            Command::Publish { id, .. } => Some(*id),
            _ => None,
        })
        .expect("a Publish command")
}

/// A new pod of a session that had one (a resume, an apps change):
/// created, running, the agent ready (the seed is from the checkpoint),
/// seeded, at `t + 1` to `t + 4`; the seed's commands.
pub(super) fn recreated(s: &mut Session, pod: &str, t: Millis) -> Vec<Command> {
    created(s, pod, "u2", t + 1);
    s.handle(running(pod), t + 2);
    let c = s.handle(Input::AgentReady { pod: pod.into() }, t + 3);
    assert!(has(&c, |x| matches!(
        x,
        Command::Seed {
            source: SeedSource::Checkpoint,
            ..
        }
    )));
    s.handle(Input::SeedDone { pod: pod.into() }, t + 4)
}

/// Every app's attach answers OK (the bring-up waits for them and the
/// publish before `running`).
pub(super) fn attach_all(s: &mut Session, pod: &str, now: Millis) {
    let apps: Vec<String> = s.apps().iter().map(|a| a.spec.name.clone()).collect();
    for app in apps {
        let c = s.handle(
            Input::AttachOk {
                pod: pod.to_string(),
                app,
            },
            now,
        );
        assert!(
            statuses(&c).is_empty(),
            "not running before the publish: {c:?}"
        );
    }
}

/// Drives a start to `running`; returns the session, the pod name and the
/// commands of the last step.
pub(super) fn up(domain: Option<&str>) -> (Session, String, Vec<Command>) {
    let (mut s, c) = new_session(domain);
    let name = created_pod(&c).metadata.name().to_string();
    created(&mut s, &name, "u-1", T0 + 100);
    s.handle(running(&name), T0 + 2_000);
    s.handle(Input::AgentReady { pod: name.clone() }, T0 + 3_000);
    let c = s.handle(Input::SeedDone { pod: name.clone() }, T0 + 4_000);
    let id = publish_id(&c);
    attach_all(&mut s, &name, T0 + 4_500);
    let c = s.handle(Input::PublishDone { id }, T0 + 5_000);
    assert_eq!(s.status(), &Status::Running);
    (s, name, c)
}

#[test]
fn happy_start() {
    let (mut s, c) = new_session(Some("dev.example.com"));
    assert_eq!(statuses(&c), ["starting"]);
    assert!(matches!(c[1], Command::WriteRecord));
    let pod = created_pod(&c);
    let name = pod.metadata.name().to_string();
    assert!(name.starts_with("kubegate-watch-sid000000001-"), "{name}");
    assert_eq!(
        pod.metadata.labels.as_ref().unwrap()["kubegate.dev/session-id"],
        "sid000000001"
    );
    let deadline = pod.spec.as_ref().unwrap().extra["activeDeadlineSeconds"].clone();
    assert_eq!(deadline, 21600);

    let c = created(&mut s, &name, "u-1", T0 + 100);
    assert_eq!(
        c[..2],
        [
            Command::CreateSecret {
                pod: name.clone(),
                uid: "u-1".into()
            },
            Command::WatchPod { name: name.clone() }
        ]
    );
    assert_eq!(events(&c)[0].1["message"], "Scheduling");

    // Provisioning progress, reported when it changes.
    let pending = |reason: &str| Input::PodObserved {
        pod: pod_json(
            &name,
            json!({"phase": "Pending", "containerStatuses": [
                {"name": "workspace", "state": {"waiting": {"reason": reason}}}]}),
        ),
    };
    let c = s.handle(pending("ContainerCreating"), T0 + 200);
    assert_eq!(
        events(&c),
        [(
            "progress",
            json!({"phase": "schedule", "message": "Creating container"})
        )]
    );
    assert!(s.handle(pending("ContainerCreating"), T0 + 300).is_empty());
    let c = s.handle(pending("ErrImagePull"), T0 + 400);
    assert_eq!(events(&c)[0].1["message"], "Pulling image");

    // Running with an IP: probe the agent.
    let c = s.handle(running(&name), T0 + 2_000);
    assert!(has(&c, |x| *x
        == Command::ProbeAgent {
            pod: name.clone(),
            ip: "10.0.0.7".into(),
            deadline: T0 + 2_000 + 120_000
        }));
    assert_eq!(events(&c)[0].1["message"], "Starting workspace");
    assert_eq!(s.pod().unwrap().ip.as_deref(), Some("10.0.0.7"));

    let c = s.handle(Input::AgentReady { pod: name.clone() }, T0 + 3_000);
    assert!(has(&c, |x| *x
        == Command::Seed {
            pod: name.clone(),
            ip: "10.0.0.7".into(),
            source: SeedSource::Bundle
        }));

    let id = happy_start_publishes(&mut s, name.clone());
    happy_start_goes_running_once_attached(&mut s, name, id);
}

/// [`happy_start`] from the seed: every app attached, the Service and
/// the Ingress published.
fn happy_start_publishes(s: &mut Session, name: String) -> u64 {
    let c = s.handle(Input::SeedDone { pod: name.clone() }, T0 + 4_000);
    assert!(has(&c, |x| *x == Command::DropBundle));
    let attaches: Vec<_> = attach_commands(&c)
        .into_iter()
        .map(|(app, container, tty, _)| (app, container, tty))
        .collect();
    assert_eq!(
        attaches,
        [("web", "app-web", true), ("worker", "app-worker", false)]
    );
    let (id, svc, ing) = c
        .iter()
        .find_map(|x| match x {
            Command::Publish {
                id,
                service,
                ingress,
                ..
            } => Some((*id, service.clone(), ingress.clone())),
            _ => None,
        })
        .unwrap();
    let svc = svc.expect("a Service");
    assert_eq!(svc.spec.as_ref().unwrap().ports.as_ref().unwrap().len(), 3);
    assert_eq!(
        svc.metadata.owner_references.as_ref().unwrap()[0].uid,
        "u-1"
    );
    assert_eq!(
        ing.expect("an Ingress").spec.unwrap().rules.unwrap().len(),
        2
    );
    assert_eq!(
        s.status(),
        &Status::Starting {
            stage: Stage::Publish
        }
    );
    id
}

/// [`happy_start`] from the publish: `running` once every attach answered.
fn happy_start_goes_running_once_attached(s: &mut Session, name: String, id: u64) {
    // Published, but `running` waits for every app's attach to answer (a
    // failed one counts: it is reported on the app's own channel).
    let c = s.handle(Input::PublishDone { id }, T0 + 5_000);
    assert!(statuses(&c).is_empty(), "{c:?}");
    let c = s.handle(
        Input::AttachFailed {
            pod: "some-older-pod".into(),
            app: "web".into(),
            message: "late".into(),
        },
        T0 + 5_001,
    );
    assert!(c.is_empty(), "another pod's attach is ignored: {c:?}");
    let c = s.handle(
        Input::AttachOk {
            pod: name.clone(),
            app: "web".into(),
        },
        T0 + 5_002,
    );
    assert!(statuses(&c).is_empty(), "{c:?}");
    let c = s.handle(
        Input::AttachOk {
            pod: name.clone(),
            app: "worker".into(),
        },
        T0 + 5_003,
    );
    let ev = events(&c);
    assert_eq!(ev[0].0, "status");
    assert_eq!(ev[0].1["status"], "running");
    assert_eq!(
        ev[0].1["endpoints"][0]["host"],
        "8080-sid000000001.dev.example.com"
    );
    let relays: Vec<_> = c
        .iter()
        .filter_map(|x| match x {
            Command::StartRelay { app, port, ip, .. } => Some((app.as_str(), *port, ip.as_str())),
            _ => None,
        })
        .collect();
    assert_eq!(
        relays,
        [("web", 9230, "10.0.0.7"), ("worker", 9231, "10.0.0.7")]
    );
    let probes: Vec<_> = c
        .iter()
        .filter_map(|x| match x {
            Command::StartProbe { app, port, .. } => Some((app.as_str(), *port)),
            _ => None,
        })
        .collect();
    assert_eq!(probes, [("web", 8080), ("worker", 3000)], "tcp ports only");
    let runs: Vec<_> = ev.iter().filter(|(k, _)| *k == "run").collect();
    assert_eq!(runs.len(), 2);
    assert_eq!(
        runs[0].1,
        json!({"app": "web", "generation": 1, "phase": "started"})
    );
    let v = s.view();
    assert_eq!(v["status"], "running");
    assert_eq!(v["apps"][1]["generation"], 1);
    assert_eq!(v["apps"][1]["io"], "streams");
    assert_eq!(
        v["apps"][1]["ports"],
        json!([{"port": 3000, "protocol": "tcp"}, {"port": 5353, "protocol": "udp"}])
    );
    assert_eq!(v["createdAt"], "2023-11-14T22:13:20Z");
    assert!(v.get("error").is_none());
    // Reachability reports pass through for probed ports only.
    let c = s.handle(
        Input::Reachability {
            pod: name.clone(),
            app: "web".into(),
            port: 8080,
            state: Reach::Reachable,
        },
        T0 + 6_000,
    );
    assert_eq!(
        events(&c),
        [(
            "reachability",
            json!({"app": "web", "port": 8080, "state": "reachable"})
        )]
    );
    assert!(s
        .handle(
            Input::Reachability {
                pod: name,
                app: "web".into(),
                port: 1,
                state: Reach::Reachable
            },
            T0 + 6_000
        )
        .is_empty());
}

/// Each start step's failure: the pod is deleted, the session fails with
/// the step's stage, and its slot is released.
#[test]
fn every_start_failure_deletes_the_pod_with_its_stage() {
    type Step = fn(&mut Session, &str) -> Vec<Command>;
    let created: Step = |s, n| created(s, n, "u", T0 + 10);
    // The steps every later stage's case takes first.
    let running_pod: Step = |s, n| s.handle(running(n), T0 + 20);
    let agent_ready: Step = |s, n| s.handle(Input::AgentReady { pod: n.into() }, T0 + 30);
    let cases: Vec<(&str, Vec<Step>, Stage, &str)> = vec![
        (
            "create",
            vec![|s, n| {
                s.handle(
                    Input::PodCreateFailed {
                        pod: n.into(),
                        message: "quota exceeded".into(),
                    },
                    T0 + 10,
                )
            }],
            Stage::Create,
            "failed to create pod: quota exceeded",
        ),
        (
            "start deadline",
            vec![created, |s, _| s.handle(Input::Tick, T0 + 10 + 180_000)],
            Stage::Schedule,
            "pod did not reach Running within 180 s (last: Scheduling)",
        ),
        (
            "failed before serving",
            vec![created, |s, n| {
                s.handle(
                    Input::PodObserved {
                        pod: pod_json(n, json!({"phase": "Failed", "reason": "Evicted", "message": "low memory"})),
                    },
                    T0 + 20,
                )
            }],
            Stage::Schedule,
            "pod reached Failed before serving (Failed: Evicted: low memory)",
        ),
        (
            "vanished",
            vec![created, |s, n| {
                s.handle(Input::PodGone { pod: n.into() }, T0 + 20)
            }],
            Stage::Schedule,
            "pod disappeared before reaching Running",
        ),
        (
            "agent",
            vec![created, running_pod, |s, n| {
                s.handle(
                    Input::AgentFailed {
                        pod: n.into(),
                        message: "connection refused".into(),
                    },
                    T0 + 30,
                )
            }],
            Stage::Workspace,
            "workspace agent did not become ready: connection refused",
        ),
        (
            "agent deadline backstop",
            vec![created, running_pod, |s, _| {
                s.handle(Input::Tick, T0 + 20 + 125_000)
            }],
            Stage::Workspace,
            "workspace agent did not answer within 120 s",
        ),
        (
            "seed",
            vec![created, running_pod, agent_ready, |s, n| {
                s.handle(
                    Input::SeedFailed {
                        pod: n.into(),
                        message: "disk full".into(),
                    },
                    T0 + 40,
                )
            }],
            Stage::Seed,
            "seeding the workspace failed: disk full",
        ),
        (
            "publish",
            vec![
                created,
                running_pod,
                agent_ready,
                |s, n| s.handle(Input::SeedDone { pod: n.into() }, T0 + 40),
                |s, _| {
                    s.handle(
                        Input::PublishFailed {
                            id: 1,
                            message: "forbidden".into(),
                        },
                        T0 + 50,
                    )
                },
            ],
            Stage::Publish,
            "publishing the session's endpoints failed: forbidden",
        ),
    ];
    for (what, steps, stage, message) in cases {
        let (mut s, c) = new_session(None);
        let name = created_pod(&c).metadata.name().to_string();
        let mut last = vec![];
        for step in steps {
            last = step(&mut s, &name);
        }
        assert_eq!(
            s.status(),
            &Status::Failed {
                stage,
                message: message.into()
            },
            "{what}"
        );
        assert!(
            has(&last, |x| *x == Command::DeletePod { name: name.clone() }),
            "{what}: {last:?}"
        );
        assert!(has(&last, |x| *x == Command::Finished), "{what}");
        let ev = events(&last);
        let st = ev.iter().find(|(k, _)| *k == "status").unwrap();
        assert_eq!(
            st.1,
            json!({"status": "failed", "error": {"stage": stage.as_str(), "message": message}}),
            "{what}"
        );
        assert_eq!(s.view()["error"]["stage"], stage.as_str());
        // Nothing more happens to a failed session.
        assert!(s.handle(Input::Tick, T0 + 1_000_000).is_empty(), "{what}");
        assert!(
            s.handle(running(&name), T0 + 1_000_001).is_empty(),
            "{what}"
        );
    }
}

/// Whether the commands stop the watch of pod `name`, then delete it.
fn watch_stops_before_delete(c: &[Command], name: &str) -> bool {
    let at = |want: Command| c.iter().position(|x| *x == want).unwrap();
    let i_watch = at(Command::StopWatch { name: name.into() });
    let i_del = at(Command::DeletePod { name: name.into() });
    i_watch < i_del
}

#[test]
fn the_pod_vanishing_or_dying_while_running_fails_the_session() {
    let (mut s, name, _) = up(None);
    let c = s.handle(Input::PodGone { pod: name.clone() }, T0 + 10_000);
    assert_eq!(
        s.status(),
        &Status::Failed {
            stage: Stage::Run,
            message: "session pod was deleted".into()
        }
    );
    // The watch is stopped before the pod is deleted.
    assert!(watch_stops_before_delete(&c, &name));
    assert!(has(&c, |x| *x == Command::StopRelays { pod: name.clone() }));
    assert!(has(&c, |x| *x == Command::CloseAttaches { pod: name.clone() }));

    let (mut s, name, _) = up(None);
    s.handle(
        Input::PodObserved {
            pod: pod_json(&name, json!({"phase": "Failed"})),
        },
        T0 + 10_000,
    );
    assert_eq!(
        s.status(),
        &Status::Failed {
            stage: Stage::Run,
            message: "session pod reached Failed (Failed)".into()
        }
    );
    // The maximum life (activeDeadlineSeconds) is a stop, not a failure.
    let (mut s, name, _) = up(None);
    let c = s.handle(
        Input::PodObserved {
            pod: pod_json(
                &name,
                json!({"phase": "Failed", "reason": "DeadlineExceeded"}),
            ),
        },
        T0 + 10_000,
    );
    assert_eq!(s.status(), &Status::Stopped);
    assert!(events(&c).iter().any(|(_, d)| d["message"]
        .as_str()
        .is_some_and(|m| m.contains("maximum life"))));
}

#[test]
fn an_ended_container_is_reported_once_per_pod() {
    let (mut s, name, _) = up(None);
    let ended = || Input::PodObserved {
        pod: pod_json(
            &name,
            json!({"phase": "Running", "podIP": "10.0.0.7", "containerStatuses": [
                {"name": "workspace", "state": {"running": {}}},
                {"name": "app-web", "state": {"terminated": {"exitCode": 137, "reason": "OOMKilled"}}},
                {"name": "app-worker", "state": {"running": {}}},
            ]}),
        ),
    };
    let c = s.handle(ended(), T0 + 10_000);
    assert_eq!(
        events(&c),
        [(
            "run",
            json!({"app": "web", "generation": 1, "phase": "ended", "exitCode": 137,
                   "reason": "application container OOMKilled (exit code 137)"})
        )]
    );
    assert!(s.handle(ended(), T0 + 11_000).is_empty());
    assert_eq!(s.status(), &Status::Running, "the session goes on");
}

#[test]
fn stop_during_start_and_after() {
    // While the create is in flight: delete at once, and again when the
    // late create answer arrives.
    let (mut s, c) = new_session(None);
    let name = created_pod(&c).metadata.name().to_string();
    let c = s.user(UserOp::Stop, T0 + 10).unwrap();
    assert!(has(&c, |x| *x == Command::DeletePod { name: name.clone() }));
    assert!(!has(&c, |x| matches!(x, Command::StopWatch { .. })));
    assert_eq!(statuses(&c), ["stopped"]);
    assert!(has(&c, |x| *x == Command::Finished));
    let c = created(&mut s, &name, "u", T0 + 20);
    assert_eq!(c, [Command::DeletePod { name: name.clone() }]);
    assert!(s
        .handle(Input::PodGone { pod: name.clone() }, T0 + 30)
        .is_empty());
    assert_eq!(s.status(), &Status::Stopped);
    // Stop is idempotent.
    assert_eq!(s.user(UserOp::Stop, T0 + 40).unwrap(), []);

    // While scheduling: the watch ends first, then the delete.
    let (mut s, c) = new_session(None);
    let name = created_pod(&c).metadata.name().to_string();
    created(&mut s, &name, "u", T0 + 10);
    let c = s.user(UserOp::Stop, T0 + 20).unwrap();
    assert_eq!(c[0], Command::StopWatch { name: name.clone() });
    assert_eq!(c[1], Command::DeletePod { name: name.clone() });

    // While running: the pod's end is not a failure.
    let (mut s, name, _) = up(None);
    s.user(UserOp::Stop, T0 + 10_000).unwrap();
    let c = s.handle(
        Input::PodObserved {
            pod: pod_json(&name, json!({"phase": "Failed"})),
        },
        T0 + 10_001,
    );
    assert!(c.is_empty());
    assert_eq!(s.status(), &Status::Stopped);
}

#[test]
fn suspend_and_resume() {
    let (mut s, name, _) = up(None);
    let e = s.user(UserOp::Resume, T0 + 6_000).unwrap_err();
    assert_eq!(e.code, Code::NotSuspended);
    let c = s.user(UserOp::Suspend, T0 + 6_000).unwrap();
    assert!(has(&c, |x| *x
        == Command::Checkpoint {
            pod: name.clone(),
            ip: "10.0.0.7".into()
        }));
    assert_eq!(s.status(), &Status::Running);
    // A second operation meanwhile is refused.
    assert_eq!(
        s.user(UserOp::Suspend, T0 + 6_001).unwrap_err().code,
        Code::NotRunning
    );
    let c = s.handle(Input::CheckpointDone { pod: name.clone() }, T0 + 7_000);
    assert_eq!(s.status(), &Status::Suspended);
    assert!(
        watch_stops_before_delete(&c, &name),
        "the watch stops before the delete"
    );
    assert_eq!(statuses(&c), ["suspended"]);
    assert!(s.pod().is_none());
    assert_eq!(
        s.user(UserOp::Suspend, T0 + 8_000).unwrap_err().code,
        Code::NotRunning
    );
    assert_eq!(
        s.user(UserOp::Reload { app: "web".into() }, T0 + 8_000)
            .unwrap_err()
            .code,
        Code::NotRunning
    );

    // Resume: a new pod, a new name, the rest of the life, seeded from
    // the checkpoint.
    let later = T0 + 3_600_000;
    let c = s.user(UserOp::Resume, later).unwrap();
    assert_eq!(statuses(&c), ["starting"]);
    let pod = created_pod(&c);
    let name2 = pod.metadata.name().to_string();
    assert_ne!(name2, name);
    // Suspended time does not count: 7 s of life were used.
    assert_eq!(
        pod.spec.as_ref().unwrap().extra["activeDeadlineSeconds"],
        6 * 3600 - 7
    );
    let c = recreated(&mut s, &name2, later);
    assert!(!has(&c, |x| *x == Command::DropBundle));
    // A late answer about the old pod changes nothing.
    assert!(s
        .handle(Input::AgentReady { pod: name.clone() }, later + 5)
        .is_empty());
    assert!(s.handle(Input::PodGone { pod: name }, later + 5).is_empty());
    let id = publish_id(&c);
    attach_all(&mut s, &name2, later + 6);
    let c = s.handle(Input::PublishDone { id }, later + 6);
    assert_eq!(statuses(&c), ["running"]);
    assert_eq!(s.apps()[0].generation, 2, "a second start of the process");
}

#[test]
fn set_apps_recreates_the_pod_from_a_checkpoint() {
    let (mut s, name, _) = up(None);
    let new_apps = vec![app("web", vec![Port::tcp(8081)]), app("api", vec![])];
    let c = s
        .user(
            UserOp::SetApps {
                apps: new_apps.clone(),
            },
            T0 + 6_000,
        )
        .unwrap();
    assert!(has(&c, |x| matches!(x, Command::Checkpoint { .. })));
    let c = s.handle(Input::CheckpointDone { pod: name.clone() }, T0 + 7_000);
    assert!(has(&c, |x| *x == Command::DeletePod { name: name.clone() }));
    let pod = created_pod(&c);
    let containers: Vec<String> = pod
        .spec
        .as_ref()
        .unwrap()
        .containers
        .iter()
        .map(|c| c.name.clone())
        .collect();
    assert_eq!(containers, ["workspace", "app-web", "app-api"]);
    assert_eq!(statuses(&c), ["starting"]);
    let name2 = pod.metadata.name().to_string();
    let c = recreated(&mut s, &name2, T0 + 7_000);
    let id = publish_id(&c);
    attach_all(&mut s, &name2, T0 + 7_005);
    s.handle(Input::PublishDone { id }, T0 + 7_005);
    let gens: Vec<(String, u64)> = s
        .apps()
        .iter()
        .map(|a| (a.spec.name.clone(), a.generation))
        .collect();
    assert_eq!(gens, [("web".into(), 2), ("api".into(), 1)]);
    assert_eq!(s.endpoints()[0].port, 8081);

    // While suspended, the set is just replaced for the next resume.
    let (mut s, name, _) = up(None);
    s.user(UserOp::Suspend, T0 + 6_000).unwrap();
    s.handle(Input::CheckpointDone { pod: name }, T0 + 6_001);
    let c = s
        .user(UserOp::SetApps { apps: new_apps }, T0 + 6_002)
        .unwrap();
    assert_eq!(c, [Command::WriteRecord]);
    assert_eq!(s.apps().len(), 2);
    assert_eq!(s.status(), &Status::Suspended);
    // A failed checkpoint leaves the session running as it was.
    let (mut s, name, _) = up(None);
    s.user(
        UserOp::SetApps {
            apps: vec![app("x", vec![])],
        },
        T0 + 6_000,
    )
    .unwrap();
    let c = s.handle(
        Input::CheckpointFailed {
            pod: name,
            message: "agent gone".into(),
        },
        T0 + 6_001,
    );
    assert!(events(&c)[0].1["message"]
        .as_str()
        .unwrap()
        .contains("agent gone"));
    assert_eq!(s.status(), &Status::Running);
    assert_eq!(s.apps()[0].spec.name, "web");
}

fn ports_frame(ports: Value) -> Value {
    json!({"kind": "event", "timestamp": "t", "event": "Kernel.PortsResolved", "payload": {"ports": ports}})
}

#[test]
fn ports_are_re_routed() {
    let (mut s, name, _) = up(Some("d.io"));
    let dbg = |s: &mut Session, frame: Value, at: Millis| {
        s.handle(
            Input::Debug {
                pod: name.clone(),
                app: "web".into(),
                frame,
            },
            at,
        )
    };
    // An ordinary frame is relayed, nothing else.
    let c = dbg(
        &mut s,
        json!({"kind": "log", "stream": "stdout", "line": "hi"}),
        T0 + 6_000,
    );
    assert_eq!(
        events(&c),
        [(
            "debug",
            json!({"app": "web", "frame": {"kind": "log", "stream": "stdout", "line": "hi"}})
        )]
    );
    // Add 9000, keep 8080, ask for 3000 (the worker's) and 8099 (the agent's).
    let c = dbg(
        &mut s,
        ports_frame(
            json!([{"port": 8080}, {"port": 9000, "protocol": "tcp"}, {"port": 3000}, {"port": 8099}]),
        ),
        T0 + 6_100,
    );
    let id = publish_id(&c);
    let svc_ports = c
        .iter()
        .find_map(|x| match x {
            Command::Publish { service, .. } => service.clone(),
            _ => None,
        })
        .unwrap()
        .spec
        .unwrap()
        .ports
        .unwrap()
        .len();
    assert_eq!(svc_ports, 4, "8080, 9000, the worker's 3000 and 5353");
    let c = s.handle(Input::PublishDone { id }, T0 + 6_200);
    let ev = events(&c);
    assert_eq!(ev[0].0, "endpoints");
    let d = &ev[0].1;
    assert_eq!(d["app"], "web");
    assert_eq!(d["added"][0]["port"], 9000);
    assert_eq!(d["added"][0]["host"], "9000-sid000000001.d.io");
    assert!(d.get("removed").is_none());
    assert_eq!(d["rejected"][0]["port"], 3000);
    assert!(d["rejected"][0]["reason"]
        .as_str()
        .unwrap()
        .contains("another app in this session (worker)"));
    assert_eq!(d["rejected"][1]["port"], 8099);
    assert!(has(&c, |x| matches!(
        x,
        Command::StartProbe { port: 9000, .. }
    )));
    assert_eq!(s.apps()[0].spec.ports, [Port::tcp(8080), Port::tcp(9000)]);
    // The same set again: nothing.
    let c = dbg(&mut s, ports_frame(json!([9000, 8080])), T0 + 6_300);
    assert_eq!(c.len(), 1, "only the debug event: {c:?}");
    // Remove 8080: its probe stops, publish, then reported removed.
    let c = dbg(&mut s, ports_frame(json!([{"port": 9000}])), T0 + 6_400);
    assert!(has(&c, |x| matches!(
        x,
        Command::StopProbe { port: 8080, .. }
    )));
    let id = publish_id(&c);
    let c = s.handle(Input::PublishDone { id }, T0 + 6_500);
    assert_eq!(events(&c)[0].1["removed"][0]["port"], 8080);
    // A publish failure: the added port is rejected with the error and
    // leaves the set again.
    let c = dbg(
        &mut s,
        ports_frame(json!([{"port": 9000}, {"port": 7000, "protocol": "udp"}])),
        T0 + 6_600,
    );
    let id = publish_id(&c);
    let c = s.handle(
        Input::PublishFailed {
            id,
            message: "services is forbidden".into(),
        },
        T0 + 6_700,
    );
    assert_eq!(
        events(&c)[0].1,
        json!({"app": "web", "rejected": [{"port": 7000, "reason": "services is forbidden"}]})
    );
    assert_eq!(s.apps()[0].spec.ports, [Port::tcp(9000)]);
    // Only rejections: reported without a publish.
    let c = dbg(&mut s, ports_frame(json!([9000, 3000])), T0 + 6_800);
    assert!(!has(&c, |x| matches!(x, Command::Publish { .. })));
    assert_eq!(events(&c)[1].1["rejected"][0]["port"], 3000);
}

#[test]
fn ports_resolved_frames() {
    assert_eq!(
        ports_resolved_from(&ports_frame(
            json!([80, {"port": 53, "protocol": "udp"}, {"port": 80}])
        )),
        Some(vec![Port::tcp(80), udp(53)])
    );
    assert_eq!(ports_resolved_from(&ports_frame(json!([]))), Some(vec![]));
    assert_eq!(ports_resolved_from(&ports_frame(json!([0]))), None);
    assert_eq!(ports_resolved_from(&ports_frame(json!([70000]))), None);
    assert_eq!(ports_resolved_from(&ports_frame(json!("80"))), None);
    assert_eq!(
        ports_resolved_from(&json!({"event": "Other", "payload": {"ports": [1]}})),
        None
    );
    assert_eq!(
        ports_resolved_from(&json!({"event": "Kernel.PortsResolved"})),
        None
    );
}

#[test]
fn idle_sessions_are_suspended_and_periodic_checkpoints() {
    let (mut s, name, _) = up(None);
    // Periodic checkpoint after the interval; none while one is in flight.
    assert!(s.handle(Input::Tick, T0 + 5_000 + 29_999).is_empty());
    let c = s.handle(Input::Tick, T0 + 35_000);
    assert!(has(&c, |x| matches!(x, Command::Checkpoint { .. })));
    assert!(s.handle(Input::Tick, T0 + 36_000).is_empty());
    let c = s.handle(Input::CheckpointDone { pod: name.clone() }, T0 + 36_500);
    assert_eq!(
        c,
        [Command::WriteRecord],
        "the first checkpoint is recorded"
    );
    assert_eq!(s.status(), &Status::Running);

    // A subscriber keeps it up; leaving starts the idle clock.
    s.handle(Input::Subscribers { count: 1 }, T0 + 40_000);
    let c = s.handle(Input::Tick, T0 + 400_000);
    assert!(!events(&c).iter().any(|(_, d)| d["phase"] == "suspend"));
    s.handle(Input::CheckpointDone { pod: name.clone() }, T0 + 400_001);
    s.handle(Input::Subscribers { count: 0 }, T0 + 500_000);
    assert!(!has(&s.handle(Input::Tick, T0 + 799_999), |x| matches!(
        x,
        Command::Emit(Event::Progress { .. })
    )));
    let c = s.handle(Input::Tick, T0 + 800_000);
    assert!(events(&c)[0].1["message"]
        .as_str()
        .unwrap()
        .contains("no subscriber for 300 s"));
    let c = s.handle(Input::CheckpointDone { pod: name }, T0 + 800_100);
    assert_eq!(statuses(&c), ["suspended"]);

    // A suspended session expires after its TTL.
    assert!(s.handle(Input::Tick, T0 + 800_100 + 86_399_999).is_empty());
    let c = s.handle(Input::Tick, T0 + 800_100 + 86_400_000);
    assert_eq!(statuses(&c), ["stopped"]);
    assert!(has(&c, |x| *x == Command::DeleteCheckpoint));
    assert!(has(&c, |x| *x == Command::Finished));
}

#[test]
fn maximum_life() {
    let (mut s, name, _) = up(None);
    let c = s.handle(Input::Tick, T0 + 6 * 3_600_000);
    assert_eq!(s.status(), &Status::Stopped);
    assert!(has(&c, |x| *x == Command::DeletePod { name: name.clone() }));
    // Life is pod time: 5 h running, a long suspend, then 1 h left.
    let (mut s, name, _) = up(None);
    let five_h = T0 + 5 * 3_600_000;
    s.user(UserOp::Suspend, five_h).unwrap();
    s.handle(Input::CheckpointDone { pod: name }, five_h);
    let back = five_h + 20 * 3_600_000;
    assert!(
        s.handle(Input::Tick, back).is_empty(),
        "suspended time is free"
    );
    let c = s.user(UserOp::Resume, back).unwrap();
    let pod = created_pod(&c);
    assert_eq!(
        pod.spec.as_ref().unwrap().extra["activeDeadlineSeconds"],
        3600
    );
    s.handle(Input::Tick, back + 3_599_999);
    assert!(!s.status().is_terminal());
    s.handle(Input::Tick, back + 3_600_000);
    assert_eq!(s.status(), &Status::Stopped);
}

#[test]
fn reloads() {
    let (mut s, name, _) = up(None);
    let reload =
        |s: &mut Session, app: &str, at: Millis| s.user(UserOp::Reload { app: app.into() }, at);
    assert_eq!(
        reload(&mut s, "nope", T0 + 6_000).unwrap_err().code,
        Code::NotFound
    );
    let c = reload(&mut s, "web", T0 + 6_000).unwrap();
    assert_eq!(
        c,
        [Command::Touch {
            pod: name.clone(),
            ip: "10.0.0.7".into(),
            path: "web.js".into()
        }]
    );
    reload(&mut s, "web", T0 + 7_000).unwrap();
    reload(&mut s, "worker", T0 + 8_000).unwrap();
    let e = reload(&mut s, "web", T0 + 9_000).unwrap_err();
    assert_eq!(e.code, Code::ReloadRateLimited);
    assert_eq!(e.status(), 429);
    // A minute after the first, one slot is free again.
    reload(&mut s, "web", T0 + 66_000).unwrap();
    let c = s.handle(
        Input::ReloadFailed {
            pod: name,
            app: "worker".into(),
            message: "timeout".into(),
        },
        T0 + 67_000,
    );
    assert_eq!(
        c,
        [Command::Output {
            app: "worker".into(),
            stream: OutStream::Stderr,
            text: "\r\n[kubegate] reload failed: timeout\r\n".into()
        }]
    );
}

#[test]
fn attach_failures_go_to_the_app_not_the_session() {
    let (mut s, name, _) = up(None);
    let c = s.handle(
        Input::AttachFailed {
            pod: name,
            app: "web".into(),
            message: "container not running".into(),
        },
        T0 + 6_000,
    );
    assert_eq!(
        c,
        [Command::Output {
            app: "web".into(),
            stream: OutStream::Tty,
            text: "\r\n[kubegate] attach lost: container not running; attaching again\r\n".into()
        }]
    );
    assert_eq!(s.status(), &Status::Running);
}

fn outputs(c: &[Command]) -> Vec<String> {
    c.iter()
        .filter_map(|c| match c {
            Command::Output { text, .. } => Some(text.clone()),
            _ => None,
        })
        .collect()
}

fn attaches(c: &[Command]) -> Vec<(String, bool)> {
    c.iter()
        .filter_map(|c| match c {
            Command::Attach { app, recover, .. } => Some((app.clone(), *recover)),
            _ => None,
        })
        .collect()
}

/// A stream cut while its attach was still being answered (the recovery
/// reads the container log first): the loss comes before the answer, and
/// the re-attach it scheduled is still made. Seen on a real API server
/// behind a proxy cut twice within a second (scripts/soak.sh --real).
#[test]
fn a_loss_reported_before_its_attach_answer_is_still_made_again() {
    let (mut s, name, _) = up(None);
    let lost = Input::AttachFailed {
        pod: name.clone(),
        app: "worker".into(),
        message: "stream cut".into(),
    };
    s.handle(lost.clone(), T0 + 10_000);
    assert_eq!(attaches(&s.handle(Input::Tick, T0 + 10_500)).len(), 1);
    // The re-attach is made and cut at once: its end, then its answer.
    s.handle(lost, T0 + 10_600);
    s.handle(
        Input::AttachOk {
            pod: name.clone(),
            app: "worker".into(),
        },
        T0 + 11_000,
    );
    assert_eq!(
        attaches(&s.handle(Input::Tick, T0 + 12_000)),
        [("worker".to_string(), true)],
        "the re-attach the loss scheduled still goes out"
    );
    // Its answer, with no loss before it, settles the app.
    s.handle(
        Input::AttachOk {
            pod: name.clone(),
            app: "worker".into(),
        },
        T0 + 12_100,
    );
    assert!(attaches(&s.handle(Input::Tick, T0 + 30_000)).is_empty());
    assert_eq!(s.tick_interval_ms(), 5_000, "settled again");
}

#[test]
fn a_lost_attach_is_made_again_with_recovery_with_backoff_then_given_up() {
    let (mut s, name, _) = up(None);
    let lost = |m: &str| Input::AttachFailed {
        pod: name.clone(),
        app: "worker".into(),
        message: m.into(),
    };
    let c = s.handle(lost("stream cut"), T0 + 10_000);
    assert_eq!(
        outputs(&c),
        ["\r\n[kubegate] attach lost: stream cut; attaching again\r\n"]
    );
    assert_eq!(
        s.tick_interval_ms(),
        500,
        "ticks come sooner while reattaching"
    );
    assert!(
        attaches(&s.handle(Input::Tick, T0 + 10_400)).is_empty(),
        "not before 0.5 s"
    );
    let c = s.handle(Input::Tick, T0 + 10_500);
    assert_eq!(
        attaches(&c),
        [("worker".to_string(), true)],
        "with recovery"
    );
    assert!(
        attaches(&s.handle(Input::Tick, T0 + 10_600)).is_empty(),
        "one in flight"
    );
    // It fails again: 1 s later, quietly; then back after an attach.
    let c = s.handle(lost("refused"), T0 + 11_000);
    assert!(outputs(&c).is_empty(), "said once: {c:?}");
    assert!(attaches(&s.handle(Input::Tick, T0 + 11_900)).is_empty());
    assert_eq!(attaches(&s.handle(Input::Tick, T0 + 12_000)).len(), 1);
    s.handle(
        Input::AttachOk {
            pod: name.clone(),
            app: "worker".into(),
        },
        T0 + 12_100,
    );
    assert_eq!(s.tick_interval_ms(), 5_000, "settled again");
    // A clean end (a container exiting ends its attach too) is quiet, and
    // nothing is made again once the pod says the container ended.
    let c = s.handle(
        Input::AttachEnded {
            pod: name.clone(),
            app: "web".into(),
        },
        T0 + 20_000,
    );
    assert!(c.is_empty(), "{c:?}");
    s.handle(
        Input::PodObserved {
            pod: pod_json(
                &name,
                json!({"phase": "Running", "podIP": "10.0.0.7", "containerStatuses": [
                    {"name": "workspace", "state": {"running": {}}},
                    {"name": "app-web", "state": {"terminated": {"exitCode": 0}}},
                    {"name": "app-worker", "state": {"running": {}}},
                ]}),
            ),
        },
        T0 + 20_100,
    );
    assert!(attaches(&s.handle(Input::Tick, T0 + 21_000)).is_empty());
    // Failing every time: 8 attempts, then given up, said once more.
    let mut now = T0 + 30_000;
    let mut tries = 0;
    let mut last = s.handle(lost("gone"), now);
    while tries < 20 {
        now += 20_000;
        let c = s.handle(Input::Tick, now);
        if attaches(&c).is_empty() {
            break;
        }
        tries += 1;
        last = s.handle(lost("gone"), now + 1);
    }
    assert_eq!(tries, 8);
    assert_eq!(
        outputs(&last),
        ["\r\n[kubegate] failed to attach again after 8 attempts: gone\r\n"]
    );
    assert_eq!(s.status(), &Status::Running);
}

#[test]
fn records() {
    let (s, name, _) = up(None);
    let r = s.record();
    assert_eq!(r["sessionId"], "sid000000001");
    assert_eq!(r["status"], json!({"status": "running"}));
    assert_eq!(r["pod"]["name"], name);
    assert_eq!(r["apps"][0]["generation"], 1);
    assert_eq!(r["podSeq"], 1);
    let f = Status::Failed {
        stage: Stage::Seed,
        message: "m".into(),
    };
    assert_eq!(
        serde_json::to_value(&f).unwrap(),
        json!({"status": "failed", "stage": "seed", "message": "m"})
    );
    let back: Status =
        serde_json::from_value(json!({"status": "starting", "stage": "schedule"})).unwrap();
    assert_eq!(
        back,
        Status::Starting {
            stage: Stage::Schedule
        }
    );
}

pub(super) fn run_started(generation: u64, replayed: bool) -> Value {
    let mut f = json!({"kind": "event", "timestamp": "2024-01-01T00:00:00.000Z",
                       "event": "Runner.RunStarted", "payload": {"generation": generation}});
    if replayed {
        f["metadata"] = json!({"replayed": true});
    }
    f
}

fn run_ended(generation: u64, payload: Value, replayed: bool) -> Value {
    let mut p = payload;
    p["generation"] = json!(generation);
    let mut f = json!({"kind": "event", "timestamp": "2024-01-01T00:00:00.000Z",
                       "event": "Runner.RunEnded", "payload": p});
    if replayed {
        f["metadata"] = json!({"replayed": true});
    }
    f
}

pub(super) fn debug(pod: &str, app: &str, frame: Value) -> Input {
    Input::Debug {
        pod: pod.into(),
        app: app.into(),
        frame,
    }
}

/// The `run` events a debug frame of the app `web` of `pod` produces.
fn web_runs(s: &mut Session, pod: &str, frame: Value, at: Millis) -> Vec<Value> {
    runs(&s.handle(debug(pod, "web", frame), at))
}

/// The `run` events among the commands.
pub(super) fn runs(cmds: &[Command]) -> Vec<Value> {
    events(cmds)
        .into_iter()
        .filter(|(k, _)| *k == "run")
        .map(|(_, d)| d)
        .collect()
}

#[test]
fn runner_frames_become_run_events_once_and_drive_the_generation() {
    let (mut s, name, c) = up(None);
    // Going running announced generation 1 of every app.
    assert_eq!(
        runs(&c),
        [
            json!({"app": "web", "generation": 1, "phase": "started"}),
            json!({"app": "worker", "generation": 1, "phase": "started"}),
        ]
    );
    // The relay's replay on connect: the runner's first start, already
    // announced. Still relayed as a debug frame.
    let c = s.handle(debug(&name, "web", run_started(1, true)), T0 + 6_000);
    assert!(runs(&c).is_empty(), "{c:?}");
    assert_eq!(events(&c)[0].0, "debug");
    // A workspace edit: the run ends with SIGTERM, generation 2 starts.
    let killed = run_ended(1, json!({"exitCode": 143, "signal": "SIGTERM"}), false);
    assert_eq!(
        web_runs(&mut s, &name, killed, T0 + 7_000),
        [
            json!({"app": "web", "generation": 1, "phase": "ended", "exitCode": 143,
                "signal": "SIGTERM", "reason": "program killed by SIGTERM (exit code 143)"})
        ]
    );
    let c = s.handle(debug(&name, "web", run_started(2, false)), T0 + 7_100);
    assert_eq!(
        runs(&c),
        [json!({"app": "web", "generation": 2, "phase": "started"})]
    );
    assert!(
        has(&c, |x| *x == Command::WriteRecord),
        "the record keeps it"
    );
    assert_eq!(s.apps()[0].generation, 2);
    assert_eq!(s.view()["apps"][0]["generation"], 2);
    assert_eq!(s.apps()[1].generation, 1, "another app is untouched");
    // The relay reconnects: the replay (last start, last end) and a
    // duplicate live frame produce nothing new.
    for f in [
        run_ended(1, json!({"exitCode": 143, "signal": "SIGTERM"}), true),
        run_started(2, true),
        run_started(2, false),
        run_started(1, false),
    ] {
        let c = s.handle(debug(&name, "web", f), T0 + 8_000);
        assert!(runs(&c).is_empty(), "{c:?}");
    }
    assert_eq!(s.apps()[0].generation, 2);
    // The program exits by itself; a later replay of that end is a
    // duplicate too. A start it could not make carries the error.
    let c = s.handle(
        debug(&name, "web", run_ended(2, json!({"exitCode": 3}), false)),
        T0 + 9_000,
    );
    assert_eq!(
        runs(&c),
        [
            json!({"app": "web", "generation": 2, "phase": "ended", "exitCode": 3,
                "reason": "program exited (code 3)"})
        ]
    );
    assert!(runs(&s.handle(
        debug(&name, "web", run_ended(2, json!({"exitCode": 3}), true)),
        T0 + 9_100
    ))
    .is_empty());
    // A relay that missed generation 3 entirely learns of its end: the
    // generation follows.
    let missed = run_ended(3, json!({"exitCode": 127, "error": "sh: not found"}), true);
    assert_eq!(
        web_runs(&mut s, &name, missed, T0 + 10_000),
        [
            json!({"app": "web", "generation": 3, "phase": "ended", "exitCode": 127,
                "reason": "program could not start: sh: not found"})
        ]
    );
    assert_eq!(s.apps()[0].generation, 3);
    // Malformed runner frames are relayed and otherwise ignored.
    for f in [
        json!({"event": "Runner.RunStarted", "payload": {}}),
        json!({"event": "Runner.RunStarted", "payload": {"generation": 0}}),
        json!({"event": "Runner.RunStarted", "payload": {"generation": "9"}}),
    ] {
        let c = s.handle(debug(&name, "web", f), T0 + 11_000);
        assert!(runs(&c).is_empty(), "{c:?}");
        assert_eq!(events(&c).len(), 1);
    }
    assert_eq!(s.status(), &Status::Running);
}

#[test]
fn a_container_end_after_the_runner_reported_the_run_end_is_not_repeated() {
    let (mut s, name, _) = up(None);
    s.handle(
        debug(&name, "web", run_ended(1, json!({"exitCode": 3}), false)),
        T0 + 6_000,
    );
    // The runner itself is killed later: its container ends.
    let c = s.handle(
        Input::PodObserved {
            pod: pod_json(
                &name,
                json!({"phase": "Running", "podIP": "10.0.0.7", "containerStatuses": [
                    {"name": "app-web", "state": {"terminated": {"exitCode": 143}}},
                ]}),
            ),
        },
        T0 + 7_000,
    );
    assert!(runs(&c).is_empty(), "{c:?}");
}

#[test]
fn runner_generations_continue_the_session_count_on_a_new_pod() {
    let (mut s, name, _) = up(None);
    s.handle(debug(&name, "web", run_started(2, false)), T0 + 6_000);
    s.handle(debug(&name, "web", run_started(3, false)), T0 + 6_100);
    assert_eq!(s.apps()[0].generation, 3);
    // Suspend and resume: the new pod's runner counts from 1 again.
    s.user(UserOp::Suspend, T0 + 7_000).unwrap();
    s.handle(Input::CheckpointDone { pod: name.clone() }, T0 + 7_100);
    let c = s.user(UserOp::Resume, T0 + 8_000).unwrap();
    let name2 = created_pod(&c).metadata.name().to_string();
    let c = recreated(&mut s, &name2, T0 + 8_000);
    let id = publish_id(&c);
    attach_all(&mut s, &name2, T0 + 8_005);
    let c = s.handle(Input::PublishDone { id }, T0 + 8_006);
    assert_eq!(
        runs(&c)[0],
        json!({"app": "web", "generation": 4, "phase": "started"})
    );
    // The runner's generation 1 is the session's 4 (already announced);
    // its 2 is the session's 5. Frames from the old pod are ignored.
    assert!(runs(&s.handle(debug(&name2, "web", run_started(1, true)), T0 + 9_000)).is_empty());
    assert!(s
        .handle(debug(&name, "web", run_started(9, false)), T0 + 9_000)
        .is_empty());
    let killed = run_ended(1, json!({"exitCode": 143, "signal": "SIGTERM"}), false);
    assert_eq!(
        web_runs(&mut s, &name2, killed, T0 + 9_100)[0]["generation"],
        4
    );
    let c = s.handle(debug(&name2, "web", run_started(2, false)), T0 + 9_200);
    assert_eq!(
        runs(&c),
        [json!({"app": "web", "generation": 5, "phase": "started"})]
    );
    assert_eq!(s.apps()[0].generation, 5);
}

#[test]
fn runner_frames_count_only_for_apps_under_the_runner() {
    // An app with `runner: false`: its own stream's runner-like frames are
    // relayed, never turned into runs.
    let (mut s, c) = {
        let mut worker = app("worker", vec![]);
        worker.runner = false;
        Session::start(
            NewSession {
                id: "sid000000002".into(),
                principal: "demo".into(),
                spec: SessionSpec {
                    apps: vec![app("web", vec![]), worker],
                    env: vec![],
                    image: None,
                    pull_policy: None,
                },
                workspace_token: "tok".into(),
                settings: settings(None),
                timings: timings(),
            },
            T0,
        )
    };
    let name = created_pod(&c).metadata.name().to_string();
    created(&mut s, &name, "u", T0 + 1);
    s.handle(running(&name), T0 + 2);
    s.handle(Input::AgentReady { pod: name.clone() }, T0 + 3);
    let c = s.handle(Input::SeedDone { pod: name.clone() }, T0 + 4);
    let id = publish_id(&c);
    attach_all(&mut s, &name, T0 + 5);
    s.handle(Input::PublishDone { id }, T0 + 6);
    let c = s.handle(debug(&name, "worker", run_started(2, false)), T0 + 7);
    assert!(runs(&c).is_empty());
    assert_eq!(s.apps()[1].generation, 1);
    // The whole runner turned off in the configuration: the same.
    let c = s.handle(debug(&name, "web", run_started(2, false)), T0 + 8);
    assert_eq!(runs(&c).len(), 1, "on for web");
    let mut st = (*settings(None)).clone();
    st.app_runner = false;
    s.settings = Arc::new(st);
    let c = s.handle(debug(&name, "web", run_started(3, false)), T0 + 9);
    assert!(runs(&c).is_empty());
}

#[test]
fn runner_frames_are_parsed() {
    assert_eq!(
        runner_event_from(&run_started(4, true)),
        Some(RunnerEvent::Started { generation: 4 })
    );
    assert_eq!(
        runner_event_from(&run_ended(
            2,
            json!({"exitCode": 137, "signal": "SIGKILL"}),
            false
        )),
        Some(RunnerEvent::Ended {
            generation: 2,
            exit_code: Some(137),
            signal: Some("SIGKILL".into()),
            error: None,
        })
    );
    assert_eq!(runner_event_from(&ports_frame(json!([8080]))), None);
    assert_eq!(
        runner_event_from(
            &json!({"event": "Runner.RunEnded", "payload": {"generation": 1,
            "exitCode": 99999999999u64, "signal": ""}})
        ),
        Some(RunnerEvent::Ended {
            generation: 1,
            exit_code: None,
            signal: None,
            error: None,
        })
    );
}

/// The pod's token Secret is created right after the pod (it needs the
/// pod's uid for its owner reference); a Secret that cannot be created
/// fails the start at stage create and deletes the pod, which would wait
/// for it for ever. Answers about an older pod are ignored.
#[test]
fn the_token_secret_follows_the_pod_and_its_failure_fails_the_start() {
    let (mut s, c) = new_session(None);
    let name = created_pod(&c).metadata.name().to_string();
    let c = created(&mut s, &name, "u-1", T0 + 100);
    assert_eq!(
        c[0],
        Command::CreateSecret {
            pod: name.clone(),
            uid: "u-1".into()
        }
    );
    assert!(has(&c, |x| *x == Command::WatchPod { name: name.clone() }));
    // Not for a pod that is no longer the session's.
    assert!(s
        .handle(
            Input::SecretFailed {
                pod: "kubegate-watch-older".into(),
                message: "x".into()
            },
            T0 + 150
        )
        .is_empty());
    let c = s.handle(
        Input::SecretFailed {
            pod: name.clone(),
            message: "secrets is forbidden".into(),
        },
        T0 + 200,
    );
    assert_eq!(statuses(&c), ["failed"]);
    let (_, data) = events(&c)
        .into_iter()
        .find(|(k, _)| *k == "status")
        .unwrap();
    assert_eq!(
        data["error"],
        json!({"stage": "create",
               "message": "failed to create the workspace token Secret: secrets is forbidden"})
    );
    assert!(has(&c, |x| *x == Command::DeletePod { name: name.clone() }));
    // Commands never carry the token (they are Debug-printed in tests and
    // could be logged).
    assert!(!format!("{c:?}").contains("\"tok\""));
}

/// Once the session runs, a late Secret failure (a retry's answer) does
/// not fail it: the agent answered, so the Secret was there.
#[test]
fn a_secret_failure_after_the_agent_answered_changes_nothing() {
    let (mut s, name, _) = up(None);
    let c = s.handle(
        Input::SecretFailed {
            pod: name,
            message: "x".into(),
        },
        T0 + 6_000,
    );
    assert!(c.is_empty(), "{c:?}");
    assert_eq!(s.status(), &Status::Running);
}
