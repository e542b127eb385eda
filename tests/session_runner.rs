//! Sessions whose apps run under `kubegate app-runner` (issue 6 step 2),
//! through a real `kubegate serve` on its embedded sim: the pod's init
//! container installs the binary (`kubegate install-self /kubegate/bin`),
//! a workspace edit restarts the app (run ended with SIGTERM, run started
//! with generation 2 on the event stream, the new output on the io
//! socket), a changed `ports` in the workspace's `kubegate.toml` re-routes
//! the app, an app without `command` runs the configured default under the
//! runner, and a `runner: false` app runs its command directly. Waits are
//! conditions with deadlines.

mod common;

use common::daemon::{DaemonProc, SseClient, SseEvent};
use common::wait_for;
use serde_json::{json, Value};
use std::time::Duration;

fn status_of(e: &SseEvent) -> Option<&str> {
    (e.event == "status")
        .then(|| e.data["status"].as_str())
        .flatten()
}

/// Reads events until `f` holds (each printed, for a failing run's log);
/// the daemon's watchdog bounds a stream that never gets there.
fn until(sse: &mut SseClient, mut f: impl FnMut(&SseEvent) -> bool) -> Vec<SseEvent> {
    sse.until(|e| {
        eprintln!("event {} {}", e.event, e.data);
        f(e)
    })
}

fn is_run(e: &SseEvent, app: &str, phase: &str) -> bool {
    e.event == "run" && e.data["app"] == app && e.data["phase"] == phase
}

fn session_pod(d: &DaemonProc, id: &str) -> Option<Value> {
    let out = d.kubectl_ok(
        &[
            "get",
            "pods",
            "-n",
            "default",
            "-l",
            &format!("kubegate.dev/session-id={id}"),
            "-o",
            "json",
        ],
        None,
    );
    let v: Value = serde_json::from_str(&out).expect("pod list JSON");
    v["items"].as_array().and_then(|i| i.first().cloned())
}

type Ws = tungstenite::WebSocket<std::net::TcpStream>;

fn open_io(d: &DaemonProc, id: &str, app: &str) -> Ws {
    let a = format!("Bearer {}", d.token);
    d.ws(
        &format!("/v1/sessions/{id}/io?app={app}"),
        &[("Authorization", &a)],
        &[kubegate::session::io::wire::SUBPROTOCOL],
    )
    .map(|(ws, _)| ws)
    .unwrap_or_else(|(st, b)| panic!("{st} {}", String::from_utf8_lossy(&b)))
}

/// Reads output frames (the socket's read timeout bounds each read) until
/// the text seen contains `want`; the text.
fn read_until(ws: &mut Ws, want: &str) -> String {
    use tungstenite::Message;
    eprintln!("waiting for output {want:?}");
    let mut text = String::new();
    while !text.contains(want) {
        match ws.read() {
            Ok(Message::Binary(b)) => {
                let (_, _, p) = kubegate::session::io::wire::decode_frame(&b).expect("frame");
                text.push_str(&String::from_utf8_lossy(p));
            }
            Ok(Message::Close(f)) => panic!("closed {f:?} waiting for {want:?} in {text:?}"),
            Ok(_) => {}
            Err(e) => panic!("{e} waiting for {want:?} in {text:?}"),
        }
    }
    text
}

const MAIN_SH: &str =
    "echo \"web says $(cat msg.txt) in generation $KUBEGATE_GENERATION\"; while :; do sleep 1; done";
const DIRECT_SH: &str =
    "echo \"direct runs with generation ${KUBEGATE_GENERATION:-unset}\"; while :; do sleep 1; done";
const PLAIN_SH: &str =
    "echo \"plain runs with generation ${KUBEGATE_GENERATION:-unset}\"; while :; do sleep 1; done";

/// The pod of the apps test: the init container installed the binary and
/// ended well; runner apps mount it read-only and start it; `direct` does
/// not.
fn assert_runner_containers(pod: &Value) {
    let init = &pod["status"]["initContainerStatuses"][0];
    assert_eq!(init["name"], "install-kubegate", "{pod:#}");
    assert_eq!(init["state"]["terminated"]["exitCode"], 0, "{init:#}");
    let containers = pod["spec"]["containers"].as_array().expect("containers");
    let by_name = |n: &str| {
        containers
            .iter()
            .find(|c| c["name"] == n)
            .unwrap_or_else(|| panic!("container {n}"))
    };
    for n in ["app-web", "app-plain"] {
        let c = by_name(n);
        let script = c["command"][2].as_str().unwrap_or("");
        assert!(
            script.contains("exec /kubegate/bin/kubegate app-runner --"),
            "{n}: {c:#}"
        );
        assert!(
            c["volumeMounts"]
                .as_array()
                .unwrap()
                .iter()
                .any(|m| m["name"] == "kubegate-bin"
                    && m["mountPath"] == "/kubegate/bin"
                    && m["readOnly"] == true),
            "{n}: {c:#}"
        );
    }
    let direct = by_name("app-direct");
    assert!(
        !direct["command"][2]
            .as_str()
            .unwrap_or("")
            .contains("app-runner"),
        "{direct:#}"
    );
    assert!(
        !direct["volumeMounts"]
            .as_array()
            .unwrap()
            .iter()
            .any(|m| m["name"] == "kubegate-bin"),
        "{direct:#}"
    );
}

#[test]
fn apps_run_under_the_runner_restart_on_edits_and_re_route_from_the_manifest() {
    // The runner is on by default: the example config leaves it so.
    let d = DaemonProc::start_with(
        |c| {
            assert!(
                c.contains("# app_runner = true"),
                "the example config's app_runner line changed"
            );
            c
        },
        "info",
    );
    let body = json!({
        "apps": [
            {"name": "web", "entry": "main.sh", "command": ["sh", "main.sh"], "io": "streams",
             "ports": [{"port": 8080}]},
            {"name": "direct", "entry": "direct.sh", "command": ["sh", "direct.sh"],
             "io": "streams", "runner": false},
            {"name": "plain", "entry": "plain.sh", "io": "streams"}
        ],
        "bundle": {"files": [
            {"path": "msg.txt", "content": "v1"},
            {"path": "kubegate.toml", "content": "[[app]]\nname = \"web\"\nports = [8080]\n"},
            {"path": "direct.sh", "content": DIRECT_SH},
            {"path": "plain.sh", "content": PLAIN_SH},
            {"path": "main.sh", "content": MAIN_SH}
        ]}
    });
    let (st, v) = d.json("POST", "/v1/sessions", Some(&body));
    assert_eq!(st, 201, "{v}");
    let id = v["sessionId"].as_str().expect("sessionId").to_string();
    let base = format!("/v1/sessions/{id}");
    let mut sse = SseClient::open(&d, &format!("{base}/events"), None);
    let seen = until(&mut sse, |e| {
        matches!(status_of(e), Some("running" | "failed"))
    });
    assert_eq!(
        seen.last().and_then(status_of),
        Some("running"),
        "{seen:#?}"
    );

    // The pod: the init container installed the binary and ended well;
    // runner apps mount it read-only and start it; `direct` does not.
    assert_runner_containers(&session_pod(&d, &id).expect("the session pod"));

    // Output of the first run of every app; only runner apps get a
    // generation from the runner. `plain` has no command: the configured
    // default (`sh $(KUBEGATE_ENTRY)`) runs under the runner.
    let mut web = open_io(&d, &id, "web");
    read_until(&mut web, "web says v1 in generation 1\n");
    let mut direct_io = open_io(&d, &id, "direct");
    read_until(&mut direct_io, "direct runs with generation unset\n");
    let mut plain = open_io(&d, &id, "plain");
    read_until(&mut plain, "plain runs with generation 1\n");

    // An edit through the workspace route restarts the app: the run ends
    // with SIGTERM, generation 2 starts, its output shows the new file.
    let (st, v) = d.json(
        "POST",
        &format!("{base}/workspace"),
        Some(&json!({"write": [{"path": "msg.txt", "content": "v2"}]})),
    );
    assert_eq!((st, v["written"].as_u64()), (200, Some(1)), "{v}");
    let seen = until(&mut sse, |e| {
        is_run(e, "web", "started") && e.data["generation"] == 2
    });
    let ended: Vec<&SseEvent> = seen.iter().filter(|e| is_run(e, "web", "ended")).collect();
    assert_eq!(ended.len(), 1, "{seen:#?}");
    assert_eq!(ended[0].data["generation"], 1, "{seen:#?}");
    assert_eq!(ended[0].data["signal"], "SIGTERM", "{seen:#?}");
    assert_eq!(ended[0].data["exitCode"], 143, "{seen:#?}");
    assert!(ended[0].data["reason"].as_str().is_some(), "{seen:#?}");
    let text = read_until(&mut web, "web says v2 in generation 2\n");
    assert!(!text.contains("generation 3"), "{text}");
    let (_, g) = d.json("GET", &base, None);
    let gen_of = |g: &Value, app: &str| {
        g["apps"]
            .as_array()
            .and_then(|a| a.iter().find(|x| x["name"] == app))
            .map(|x| x["generation"].clone())
    };
    assert_eq!(gen_of(&g, "web"), Some(json!(2)), "{g}");

    // The app's ports in the workspace's kubegate.toml: re-routed from
    // 8080 to 8081 (the edit also restarts it, as any edit).
    let (st, v) = d.json(
        "POST",
        &format!("{base}/workspace"),
        Some(&json!({"write": [{"path": "kubegate.toml",
            "content": "[[app]]\nname = \"web\"\nports = [8081]\n"}]})),
    );
    assert_eq!(st, 200, "{v}");
    let seen = until(&mut sse, |e| {
        e.event == "endpoints" && e.data["app"] == "web"
    });
    let ep = &seen.last().expect("events").data;
    assert_eq!(ep["added"][0]["port"], 8081, "{seen:#?}");
    assert_eq!(ep["removed"][0]["port"], 8080, "{seen:#?}");
    assert!(ep.get("rejected").is_none(), "{seen:#?}");
    let (_, g) = d.json("GET", &base, None);
    let ports: Vec<u64> = g["endpoints"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|e| e["app"] == "web")
        .filter_map(|e| e["port"].as_u64())
        .collect();
    assert_eq!(ports, vec![8081], "{g}");

    // Runner apps watch the whole workspace (plain restarted too); the
    // direct app is outside any runner: still its container's one start.
    wait_for("plain to restart", Duration::from_secs(20), || {
        let (_, g) = d.json("GET", &base, None);
        (gen_of(&g, "plain").and_then(|v| v.as_u64()) >= Some(2)).then_some(())
    });
    let (_, g) = d.json("GET", &base, None);
    assert_eq!(gen_of(&g, "direct"), Some(json!(1)), "{g}");

    let (st, _) = d.request("DELETE", &base, Some(&d.token), None);
    assert_eq!(st, 204);
    wait_for(
        "the session pod to be gone",
        Duration::from_secs(30),
        || session_pod(&d, &id).is_none().then_some(()),
    );
}
