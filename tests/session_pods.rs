//! The session pod builders (`kubegate::session::pod`) checked against
//! the sim's kubelet (`kubegate::sim::podspec`): the pods the daemon builds
//! are the processes the sim runs. An integration test because the
//! session core must not depend on the sim.

use kubegate::session::pod::{
    build_pod_json, PodInput, PodSettings, Requested, WAIT_SCRIPT_RUNNER,
};
use kubegate::session::spec::{AppSpec, Io, Port, Protocol, PullPolicy, SessionSpec};
use kubegate::sim::podspec::{plan_container, PlanContext};
use std::collections::BTreeMap;
use std::path::PathBuf;

// The fixtures the unit tests of `session::pod` use too.
#[path = "../src/session/pod_fixtures.rs"]
mod fixtures;
use fixtures::*;

/// The sim's kubelet turns these containers into processes; plan them the
/// way it does and check what the processes would see.
#[test]
fn the_sim_plans_these_containers() {
    let s = spec();
    let v = build_pod_json(&settings(), &input(&s, &NO_REQUEST));
    let lookup = |kind: &str, name: &str| -> Option<BTreeMap<String, Vec<u8>>> {
        (kind == "Secret" && name == "kubegate-watch-abc123def456-x1-token")
            .then(|| BTreeMap::from([("token".to_string(), b"tok-en".to_vec())]))
    };
    let ctx = PlanContext {
        pod_ip: "127.0.1.7".into(),
        host_ip: "127.0.0.1".into(),
        node_name: "sim-node".into(),
        pod_dir: PathBuf::from("/pods/p"),
        self_exe: PathBuf::from("/opt/kubegate"),
        lookup: &lookup,
        pod_id: None,
        sim_uid: 1000,
    };
    let ws = plan_container(&v, &v["spec"]["containers"][0], &ctx).unwrap();
    assert_eq!(
        ws.argv,
        [
            "/opt/kubegate",
            "workspace-agent",
            "--listen",
            "127.0.1.7:8099",
            "--root",
            "/pods/p/volumes/workspace"
        ]
    );
    assert!(ws
        .env
        .contains(&("KUBEGATE_WORKSPACE_TOKEN".into(), "tok-en".into())));
    // The init container runs the sim's own binary into the volume's folder.
    let init = plan_container(&v, &v["spec"]["initContainers"][0], &ctx).unwrap();
    assert_eq!(
        init.argv,
        [
            "/opt/kubegate",
            "install-self",
            "/pods/p/volumes/kubegate-bin"
        ]
    );
    // The app starts the installed copy, found in that folder.
    let web = plan_container(&v, &v["spec"]["containers"][1], &ctx).unwrap();
    let script = WAIT_SCRIPT_RUNNER.replace(
        "/kubegate/bin/kubegate",
        "/pods/p/volumes/kubegate-bin/kubegate",
    );
    assert_eq!(&web.argv[..4], ["sh", "-c", script.as_str(), "sh"]);
    assert_eq!(&web.argv[4..], ["node", "--watch", "$(HOME)"]);
    assert_eq!(web.cwd, PathBuf::from("/pods/p/volumes/workspace"));
    assert!(web.tty && web.stdin);
    let env = |n: &str| {
        web.env
            .iter()
            .find(|(k, _)| k == n)
            .map(|(_, v)| v.clone())
            .unwrap()
    };
    assert_eq!(
        env("KUBEGATE_ENTRY"),
        "/pods/p/volumes/workspace/src/main.js"
    );
    assert_eq!(env("KUBEGATE_INSPECT_ADDR"), "127.0.1.7:9230");
    assert_eq!(env("HOME"), "/pods/p/volumes/scratch/app-web");
    assert_eq!(env("MODE"), "dev $(X)");
    let worker = plan_container(&v, &v["spec"]["containers"][2], &ctx).unwrap();
    assert_eq!(&worker.argv[4..], ["sh", "/pods/p/volumes/workspace/w.sh"]);
}
