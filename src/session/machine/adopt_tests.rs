//! Sessions rebuilt from their records after a daemon restart
//! (`adopt.rs`).

use super::tests::{
    attach_all, attach_commands, created, created_pod, debug, events, has, pod_json, publish_id,
    run_started, runs, settings, statuses, timings, up, T0,
};
use super::*;

fn record_of(s: &Session) -> Record {
    Record::parse(s.record().to_string().as_bytes()).expect("a valid record")
}

fn pod(name: &str, status: Value) -> Pod {
    *pod_json(name, status)
}

fn running_pod(name: &str) -> Pod {
    pod(name, json!({"phase": "Running", "podIP": "10.0.0.9"}))
}

fn terminating(mut p: Pod) -> Pod {
    p.metadata.deletion_timestamp = Some("2024-01-01T00:00:00Z".into());
    p
}

fn progress_messages(cmds: &[Command]) -> Vec<String> {
    events(cmds)
        .into_iter()
        .filter(|(k, _)| *k == "progress")
        .map(|(_, d)| d["message"].as_str().unwrap_or("").to_string())
        .collect()
}

fn restore(rec: Record, pods: Vec<Pod>, now: Millis) -> (Session, Vec<Command>) {
    Session::restore(rec, settings(None), timings(), pods, now)
}

const LATER: Millis = T0 + 600_000;

#[test]
fn records_read_back_what_they_hold() {
    let (s, name, _) = up(None);
    let r = record_of(&s);
    assert_eq!(r.session_id, "sid000000001");
    assert_eq!(r.status, Status::Running);
    assert_eq!(r.pod.as_ref().map(|p| p.name.as_str()), Some(name.as_str()));
    assert_eq!(r.apps.len(), 2);
    assert_eq!(r.life_since, Some(T0));
    assert_eq!(
        r.runs["web"],
        RunRecord {
            base: 0,
            reported: 2
        }
    );
    let mut v = s.record();
    v["version"] = json!(2);
    assert!(Record::parse(v.to_string().as_bytes()).is_err());
    let mut v = s.record();
    v["sessionId"] = json!("../etc");
    assert!(Record::parse(v.to_string().as_bytes()).is_err());
    assert!(Record::parse(b"{").is_err());
}

#[test]
fn a_running_session_re_adopts_its_pod_without_a_seed_or_repeated_run_events() {
    let (s, name, _) = up(None);
    let stray = "kubegate-watch-sid000000001-stray";
    let pods = vec![running_pod(&name), running_pod(stray)];
    let (mut r, c) = restore(record_of(&s), pods, LATER);
    assert_eq!(statuses(&c), ["starting"]);
    assert_eq!(
        progress_messages(&c),
        ["Re-adopting the session pod after a kubegate restart"]
    );
    assert!(has(&c, |x| *x == Command::DeletePod { name: stray.into() }));
    assert!(has(&c, |x| *x == Command::WatchPod { name: name.clone() }));
    let attaches = attach_commands(&c);
    assert_eq!(
        attaches,
        [
            ("web", "app-web", true, true),
            ("worker", "app-worker", false, true)
        ]
    );
    assert!(!has(&c, |x| matches!(
        x,
        Command::CreatePod { .. } | Command::Seed { .. } | Command::ProbeAgent { .. }
    )));
    // Until it is running again, the record still says running (a second
    // restart re-adopts again).
    assert_eq!(record_of(&r).status, Status::Running);
    assert_eq!(r.pod().and_then(|p| p.ip.as_deref()), Some("10.0.0.9"));
    let id = publish_id(&c);
    attach_all(&mut r, &name, LATER + 100);
    let c = r.handle(Input::PublishDone { id }, LATER + 200);
    assert_eq!(statuses(&c), ["running"]);
    assert!(runs(&c).is_empty(), "the starts were announced before");
    let relays = c
        .iter()
        .filter(|x| matches!(x, Command::StartRelay { .. }))
        .count();
    assert_eq!(relays, 2);
    assert!(has(&c, |x| matches!(
        x,
        Command::StartProbe { app, port: 3000, .. } if app == "worker"
    )));
    assert_eq!(r.apps()[0].generation, 1);
    assert_eq!(record_of(&r).status, Status::Running);
    // The life goes on from the recorded pod start.
    assert_eq!(record_of(&r).life_since, Some(T0));
}

#[test]
fn runner_generations_continue_across_a_re_adoption() {
    let (mut s, name, _) = up(None);
    // The runner restarted the app once: generation 2.
    let c = s.handle(debug(&name, "web", run_started(2, false)), T0 + 10_000);
    assert_eq!(runs(&c).len(), 1);
    let (mut r, c) = restore(record_of(&s), vec![running_pod(&name)], LATER);
    let id = publish_id(&c);
    attach_all(&mut r, &name, LATER + 100);
    r.handle(Input::PublishDone { id }, LATER + 200);
    // The relay's replay of the runner's last start is not news...
    let c = r.handle(debug(&name, "web", run_started(2, true)), LATER + 300);
    assert!(runs(&c).is_empty(), "{c:?}");
    // ...its next start is generation 3 of the session.
    let c = r.handle(debug(&name, "web", run_started(3, false)), LATER + 400);
    assert_eq!(runs(&c)[0]["generation"], 3);
    assert_eq!(r.apps()[0].generation, 3);
}

#[test]
fn a_terminating_pod_is_waited_for_then_the_session_is_recreated_from_its_checkpoint() {
    let (s, name, _) = up(None);
    let mut rec = record_of(&s);
    rec.has_checkpoint = true;
    let (mut r, c) = restore(rec.clone(), vec![terminating(running_pod(&name))], LATER);
    assert_eq!(statuses(&c), ["starting"]);
    assert!(has(&c, |x| *x == Command::WatchPod { name: name.clone() }));
    assert!(!has(&c, |x| matches!(
        x,
        Command::CreatePod { .. } | Command::DeletePod { .. }
    )));
    assert_eq!(record_of(&r).status, Status::Running);
    // Other pods' news is not this wait's.
    assert!(r
        .handle(
            Input::PodGone {
                pod: "other".into()
            },
            LATER + 1
        )
        .is_empty());
    let c = r.handle(Input::PodGone { pod: name.clone() }, LATER + 5_000);
    assert!(has(&c, |x| *x == Command::StopWatch { name: name.clone() }));
    let new = created_pod(&c).metadata.name().to_string();
    assert_ne!(new, name);
    assert!(progress_messages(&c)
        .iter()
        .any(|m| m.contains("recreating it from the last checkpoint")));
    // The bring-up seeds from the checkpoint.
    created(&mut r, &new, "u-2", LATER + 5_100);
    r.handle(
        Input::PodObserved {
            pod: pod_json(&new, json!({"phase": "Running", "podIP": "10.0.0.8"})),
        },
        LATER + 6_000,
    );
    let c = r.handle(Input::AgentReady { pod: new.clone() }, LATER + 7_000);
    assert!(has(&c, |x| matches!(
        x,
        Command::Seed {
            source: SeedSource::Checkpoint,
            ..
        }
    )));

    // A pod that never goes: recreated anyway after the bound.
    let (mut r, _) = restore(rec, vec![terminating(running_pod(&name))], LATER);
    assert!(r
        .handle(Input::Tick, LATER + DRAIN_DEADLINE_MS - 1)
        .is_empty());
    let c = r.handle(Input::Tick, LATER + DRAIN_DEADLINE_MS);
    assert!(has(&c, |x| *x == Command::StopWatch { name: name.clone() }));
    assert!(has(&c, |x| matches!(x, Command::CreatePod { .. })));
    assert!(progress_messages(&c)
        .iter()
        .any(|m| m.contains("still terminating after 60 s")));
}

#[test]
fn a_gone_pod_is_recreated_from_the_checkpoint_or_the_session_fails_without_one() {
    let (s, name, _) = up(None);
    let mut rec = record_of(&s);
    rec.has_checkpoint = true;
    let (r, c) = restore(rec.clone(), vec![], LATER);
    assert!(has(&c, |x| matches!(x, Command::CreatePod { .. })));
    assert_eq!(
        r.status(),
        &Status::Starting {
            stage: Stage::Create
        }
    );
    // A pod that is there but not running goes, and a new one comes.
    let pending = pod(&name, json!({"phase": "Pending"}));
    let (_, c) = restore(rec.clone(), vec![pending], LATER);
    assert!(has(&c, |x| *x == Command::DeletePod { name: name.clone() }));
    assert!(has(&c, |x| matches!(x, Command::CreatePod { .. })));

    rec.has_checkpoint = false;
    let (r, c) = restore(rec, vec![], LATER);
    assert_eq!(statuses(&c), ["running", "failed"]);
    match r.status() {
        Status::Failed { stage, message } => {
            assert_eq!(*stage, Stage::Run);
            assert!(message.contains("no checkpoint"), "{message}");
        }
        other => panic!("{other:?}"),
    }
    assert!(has(&c, |x| *x == Command::Finished));
    assert!(!has(&c, |x| matches!(x, Command::CreatePod { .. })));
}

#[test]
fn a_pod_that_ended_while_the_daemon_was_down_ends_the_session_as_the_watch_would_have() {
    let (s, name, _) = up(None);
    let failed = pod(
        &name,
        json!({"phase": "Failed", "reason": "Evicted", "message": "low on memory"}),
    );
    let (r, c) = restore(record_of(&s), vec![failed], LATER);
    match r.status() {
        Status::Failed { stage, message } => {
            assert_eq!(*stage, Stage::Run);
            assert!(
                message.starts_with("session pod reached Failed"),
                "{message}"
            );
        }
        other => panic!("{other:?}"),
    }
    assert!(has(&c, |x| *x == Command::DeletePod { name: name.clone() }));
    assert!(has(&c, |x| *x == Command::Finished));
    let over = pod(
        &name,
        json!({"phase": "Failed", "reason": "DeadlineExceeded"}),
    );
    let (r, _) = restore(record_of(&s), vec![over], LATER);
    assert_eq!(r.status(), &Status::Stopped);
}

#[test]
fn a_start_cut_by_the_restart_fails_unless_a_checkpoint_can_bring_it_up() {
    let (s, c) = super::tests::new_session(None);
    let name = created_pod(&c).metadata.name().to_string();
    let mut rec = record_of(&s);
    assert_eq!(rec.status.as_str(), "starting");
    let (r, c) = restore(rec.clone(), vec![running_pod(&name)], LATER);
    assert!(has(&c, |x| *x == Command::DeletePod { name: name.clone() }));
    match r.status() {
        Status::Failed { message, .. } => {
            assert!(
                message.contains("while the session was starting"),
                "{message}"
            )
        }
        other => panic!("{other:?}"),
    }
    // A resume or an apps change in flight: it starts over from the checkpoint.
    rec.has_checkpoint = true;
    let (_, c) = restore(rec, vec![running_pod(&name)], LATER);
    assert!(has(&c, |x| *x == Command::DeletePod { name: name.clone() }));
    assert!(has(&c, |x| matches!(x, Command::CreatePod { .. })));
}

#[test]
fn a_suspended_session_stays_suspended_and_resumes_or_expires_as_before() {
    let (mut s, name, _) = up(None);
    s.user(UserOp::Suspend, T0 + 10_000).unwrap();
    s.handle(Input::CheckpointDone { pod: name.clone() }, T0 + 11_000);
    assert_eq!(s.status(), &Status::Suspended);
    let rec = record_of(&s);
    assert_eq!(rec.suspended_at, Some(T0 + 11_000));
    // A leftover pod with its label goes; nothing is created.
    let (mut r, c) = restore(rec.clone(), vec![running_pod("leftover")], LATER);
    assert_eq!(statuses(&c), ["suspended"]);
    assert!(has(&c, |x| *x
        == Command::DeletePod {
            name: "leftover".into()
        }));
    assert!(!has(&c, |x| matches!(x, Command::CreatePod { .. })));
    let c = r.user(UserOp::Resume, LATER + 1).unwrap();
    assert!(has(&c, |x| matches!(x, Command::CreatePod { .. })));
    // The TTL counts from the suspension, not from the restart.
    let (mut r, _) = restore(rec, vec![], LATER);
    let c = r.handle(Input::Tick, T0 + 11_000 + timings().suspended_ttl_ms);
    assert_eq!(statuses(&c), ["stopped"]);
}

#[test]
fn a_stop_while_re_adopting_tears_the_pod_down() {
    let (s, name, _) = up(None);
    let (mut r, _) = restore(record_of(&s), vec![running_pod(&name)], LATER);
    let c = r.user(UserOp::Stop, LATER + 10).unwrap();
    for want in [
        Command::StopWatch { name: name.clone() },
        Command::CloseAttaches { pod: name.clone() },
        Command::DeletePod { name: name.clone() },
    ] {
        assert!(c.contains(&want), "{want:?} in {c:?}");
    }
    assert_eq!(statuses(&c), ["stopped"]);
    // Stopping while waiting for a terminating pod stops its watch.
    let mut rec = record_of(&s);
    rec.has_checkpoint = true;
    let (mut r, _) = restore(rec, vec![terminating(running_pod(&name))], LATER);
    let c = r.user(UserOp::Stop, LATER + 10).unwrap();
    assert!(c.contains(&Command::StopWatch { name: name.clone() }));
    assert!(!has(&c, |x| matches!(x, Command::DeletePod { .. })));
}

/// A re-adopted pod that takes its token from its Secret gets the Secret
/// created again (AlreadyExists is success: a crash between the pod's
/// create and the Secret's would leave the pod waiting for ever); a pod
/// started before the token moved to a Secret (a literal env value) keeps
/// working without one.
#[test]
fn a_re_adopted_pod_gets_its_secret_again_unless_it_predates_it() {
    let (s, name, _) = up(None);
    let (_, c0) = super::tests::new_session(None);
    // The pod the session built, as the cluster lists it.
    let mut built = serde_json::to_value(created_pod(&c0)).unwrap();
    built["metadata"]["name"] = json!(name);
    built["metadata"]["uid"] = json!("u-9");
    built["status"] = json!({"phase": "Running", "podIP": "10.0.0.9"});
    // The workspace container's token reference names the pod's Secret.
    built["spec"]["containers"][0]["env"][2]["valueFrom"]["secretKeyRef"]["name"] =
        json!(pod::token_secret_name(&name));
    let with_secret: Pod = serde_json::from_value(built.clone()).unwrap();
    let (_, c) = restore(record_of(&s), vec![with_secret], LATER);
    assert!(has(&c, |x| *x
        == Command::CreateSecret {
            pod: name.clone(),
            uid: "u-9".into()
        }));

    built["spec"]["containers"][0]["env"][2] =
        json!({"name": "KUBEGATE_WORKSPACE_TOKEN", "value": "tok"});
    let literal: Pod = serde_json::from_value(built).unwrap();
    let (mut r, c) = restore(record_of(&s), vec![literal], LATER);
    assert!(!has(&c, |x| matches!(x, Command::CreateSecret { .. })));
    assert_eq!(statuses(&c), ["starting"]);
    let id = publish_id(&c);
    attach_all(&mut r, &name, LATER + 100);
    let c = r.handle(Input::PublishDone { id }, LATER + 200);
    assert_eq!(statuses(&c), ["running"]);
}
