//! The session pod fixtures both the unit tests (`pod_tests.rs`) and
//! tests/session_pods.rs build from; the including module imports the
//! types (`session::pod`, `session::spec`).

use super::*;

/// The pods sim mode builds (no uid named), with a CPU ceiling of 2 and
/// the app runner on (the tests cover the pod under it; one turns it off).
pub fn settings() -> PodSettings {
    PodSettings {
        max_cpu: "2".into(),
        run_as: None,
        ..PodSettings::default()
    }
}

pub fn app(name: &str, entry: &str) -> AppSpec {
    AppSpec {
        name: name.into(),
        entry: entry.into(),
        command: None,
        image: None,
        ports: vec![],
        io: Io::Tty,
        runner: true,
    }
}

/// Two apps: `web` (its own command, a tcp port) and `worker` (streams,
/// its own image, a udp port, the default command).
pub fn spec() -> SessionSpec {
    let mut web = app("web", "src/main.js");
    web.command = Some(vec!["node".into(), "--watch".into(), "$(HOME)".into()]);
    web.ports = vec![Port::tcp(8080)];
    let mut worker = app("worker", "w.sh");
    worker.io = Io::Streams;
    worker.image = Some("alpine:3".into());
    worker.ports = vec![Port {
        port: 5353,
        protocol: Protocol::Udp,
    }];
    SessionSpec {
        apps: vec![web, worker],
        env: vec![("MODE".into(), "dev $(X)".into())],
        image: Some("node:22".into()),
        pull_policy: Some(PullPolicy::Always),
    }
}

pub const NO_REQUEST: Requested = Requested {
    cpu: None,
    memory: None,
    ephemeral_storage: None,
};

pub fn input<'a>(spec: &'a SessionSpec, requested: &'a Requested) -> PodInput<'a> {
    PodInput {
        session_id: "abc123def456",
        principal: "demo",
        spec,
        pod_name: "kubegate-watch-abc123def456-x1",
        remaining_life_secs: 21000,
        requested,
    }
}
