//! The daemon on the real control plane (docs/control-plane.md#the-rbac-run)
//! as the identity scripts/rbac.yaml makes, with exactly its grants.
//!
//! The run's real plane (`scripts/control-plane.sh`, found through
//! `KUBEGATE_REAL_KUBECONFIG` and the rest of its `DIR/env`) gets three
//! namespaces of this test's own: the session namespace, a workspace
//! namespace (project) and a Gateway namespace; with the plane's sim node,
//! two more projects for phase 4 whose pods run there. scripts/rbac.yaml
//! is applied with only its namespaces moved there, as its own comments say
//! (`common::rbac_file::adapted`); the ServiceAccount's token comes from the
//! TokenRequest API, and `kubegate serve` runs in `mode = "kubeconfig"` with
//! it, never as the admin.
//!
//! What it drives, in order:
//!
//! 1. `pod_access = "direct"`: `/readyz`, `GET /v1/workspaces` and a
//!    one-shot exec through kwok (`ClusterExec`); a watch session whose
//!    pod is scheduled and Running on the kwok Node. kwok runs no
//!    container, so the test plays the pod's insides on its loopback pod
//!    IP: the real `kubegate workspace-agent` (with the token read from the
//!    pod's Secret) and the app's debug stream. The session comes up;
//!    kwok's `ClusterAttach` carries a line written to its pod log to the
//!    app's output; the debug stream re-routes 8080 -> 8081 (Service and
//!    Ingress replaced), then declares no port (both deleted by the
//!    daemon), then 8081 again (created).
//! 2. A restart on the same state with `pod_access = "api-proxy"` (the
//!    default of kubeconfig mode): the pod re-adopted (a list, the Secret
//!    created again, a line written meanwhile read back through kwok's
//!    `ClusterLogs`); the port proxy with each method it forwards and the
//!    debug relay go to the API server's pod proxy, which authorizes them
//!    and then refuses the loopback pod IP (400 `address not allowed`); a
//!    TCP tunnel to the session pod and one to the workspace Deployment's
//!    pod, both to kwok's echo port 7 (`ClusterPortForward`). The stop
//!    deletes the pod; the real garbage collector deletes its Secret,
//!    Service and Ingress (their owner references).
//! 3. A second session, api-proxy: scheduled, Running, then failed at
//!    stage `workspace` (the pod proxy's 400), its pod deleted and its
//!    Secret collected.
//!
//! 4. On the sim node (`kubegate sim node`, which runs its pods' processes),
//!    `[cluster] impersonate = true`, scripts/rbac-impersonation.yaml
//!    applied too: a static principal and an OIDC one (a token of the test
//!    issuer, tests/common/issuer.rs), both in the developers' group, exec
//!    into their workspace Deployment's pod as themselves, one-shot (the
//!    process's exit code and output) and interactive (stdin echoed by
//!    `cat`, EOF, the exit code), and tunnel to the echo server the pod
//!    runs; a project whose Role lacks `pods/exec` (its pod on the sim node
//!    too) refuses it with the cluster's own message although kubegate's
//!    rules allow it. The audit log names the daemon as `user` and the
//!    principal as `impersonatedUser` (docs/SECURITY.md#impersonation).
//!    Without the sim node this phase is skipped, saying why (a failure
//!    under `KUBEGATE_REAL_REQUIRED=1`, as `on_sim_node`).
//!
//! Zero 403s: the daemon's log holds no Kubernetes refusal, and, when the
//! plane writes an audit log (`KUBEGATE_REAL_AUDIT_LOG`), every request of
//! the ServiceAccount is read from it: none was refused, each is granted in
//! its namespace by the file, and every grant of the file was used except
//! those in [`SIM_ONLY`] (each named with the sim test that exercises it).
//! Without a plane the test says why on stderr and passes; with
//! `KUBEGATE_REAL_REQUIRED=1` it fails instead.

mod common;

use common::daemon::{DaemonProc, SseClient};
use common::issuer::{claims, oidc_toml, RsaKey, TestIssuer};
use common::rbac_file::{
    adapted, documents, parse_rbac, Check, Triple, FILE_SESSION_NS, FILE_WORKSPACE_NS, RBAC,
};
use common::real_daemon::{
    apply_rbac, config_with, create_deployment, create_echo_deployment, deployment_pods_on, gone,
    no_refusal_logged, owner_is, plane_or_skip, published, running_pod, skip_without_sim_node,
    until_status, wait_published, write_kubeconfig, Namespaces, NsOptions, Plane, ECHO_PORT,
    NO_SIM_NODE, WAIT, WORKSPACE_UID,
};
use common::{first_line, run_with_timeout, temp_dir, terminate, wait_for, KUBEGATE};
use kubegate::exec::frames::{ClientFrame, ServerFrame, SUBPROTOCOL as EXEC_PROTOCOL};
use serde_json::{json, Value};
use std::collections::{BTreeMap, BTreeSet};
use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use std::time::{Duration, Instant};
use tungstenite::Message;

/// Grants of scripts/rbac.yaml the real-plane run cannot use: (apiGroup,
/// resource, verbs, why, and the sim test that does use them).
const SIM_ONLY: &[(&str, &str, &[&str], &str)] = &[
    (GATEWAY_API, "gateways", &["get"], GATEWAY_WHY),
    (
        GATEWAY_API,
        "httproutes",
        &["create", "get", "update", "delete", "list"],
        GATEWAY_WHY,
    ),
];

const GATEWAY_API: &str = "gateway.networking.k8s.io";
const GATEWAY_WHY: &str =
    "gateway routing: the real plane serves the Gateway API v1.6.3 CRDs, but this run's \
     daemons route by Ingress (a gateway-routed session would need another agent-backed \
     session here); tests/rbac.rs (drive_gateway) uses these grants on the sim, and \
     tests/routes_real.rs creates the daemon's HTTPRoutes on the real plane as the admin";

/// The debug stream of a session's first app (`INSPECT_BASE_PORT`), and
/// the workspace agent's port.
const INSPECT_PORT: u16 = 9230;
const AGENT_PORT: u16 = 8099;
/// How long the daemon waits for a workspace agent: the test starts one
/// in well under this, and the api-proxy session fails after it.
const AGENT_DEADLINE_SECS: u64 = 20;

fn agent_deadline() -> String {
    format!("agent_deadline_secs = {AGENT_DEADLINE_SECS}")
}

// ------------------------------------------------------------ the plane

/// A real kubelet reports the Node's ephemeral storage; kwok's Node has
/// none in `allocatable` unless given, and session pods request it
/// (`max_ephemeral_storage`), so the scheduler would find no room
/// (`Insufficient ephemeral-storage`). Give it some, as a kubelet would.
fn ensure_node_storage(plane: &Plane) {
    let node = plane
        .get("default", &format!("node/{}", plane.node))
        .expect("the plane's Node");
    if node["status"]["allocatable"]["ephemeral-storage"].is_string() {
        return;
    }
    eprintln!(
        "rbac_real: Node {} has no ephemeral-storage in allocatable; giving it 1Ti \
         (docs/control-plane.md#the-rbac-run)",
        plane.node
    );
    let patch = json!({"status": {"allocatable": {"ephemeral-storage": "1Ti"},
                                  "capacity": {"ephemeral-storage": "1Ti"}}});
    plane.ok(
        &[
            "patch",
            "node",
            &plane.node,
            "--subresource=status",
            "--type=merge",
            "-p",
            &patch.to_string(),
        ],
        None,
    );
}

fn daemon_config(kubeconfig: &Path, ns: &Namespaces, digest: &str, access: &str) -> String {
    let principal = format!(
        "name = \"rbac-real\"\ntoken_sha256 = \"{digest}\"\nworkspaces = [\"{}/{WORKSPACE_UID}\"]\n\
         may_start_sessions = true\n",
        ns.workspace
    );
    config_with(kubeconfig, ns, access, "", &agent_deadline(), &principal)
}

// ------------------------------------------------------------ the pod's insides

/// The port set the test declared last, and how many times it declared
/// one (0: never yet).
type Declared = (Mutex<(u64, Vec<u16>)>, Condvar);

/// The debug stream of a session's app, as its runner would serve it on
/// `$(POD_IP):9230`: SSE, a `Kernel.PortsResolved` frame whenever the test
/// declares a port set, heartbeats in between.
struct DebugStream {
    state: Arc<Declared>,
    stop: Arc<AtomicBool>,
}

impl DebugStream {
    fn start(ip: &str) -> DebugStream {
        let l = TcpListener::bind((ip, INSPECT_PORT))
            .unwrap_or_else(|e| panic!("bind {ip}:{INSPECT_PORT}: {e}"));
        l.set_nonblocking(true).expect("nonblocking listener");
        let state = Arc::new((Mutex::new((0u64, Vec::new())), Condvar::new()));
        let stop = Arc::new(AtomicBool::new(false));
        let (st, sp) = (state.clone(), stop.clone());
        std::thread::spawn(move || {
            while !sp.load(Ordering::Relaxed) {
                match l.accept() {
                    Ok((s, _)) => {
                        let (st, sp) = (st.clone(), sp.clone());
                        std::thread::spawn(move || serve_events(s, &st, &sp));
                    }
                    Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {
                        std::thread::sleep(Duration::from_millis(20));
                    }
                    Err(e) => {
                        eprintln!("rbac_real: the debug stream's accept: {e}");
                        return;
                    }
                }
            }
        });
        DebugStream { state, stop }
    }

    /// The app's ports are now `ports`.
    fn declare(&self, ports: &[u16]) {
        let (m, cv) = &*self.state;
        let mut g = m.lock().expect("lock");
        g.0 += 1;
        g.1 = ports.to_vec();
        cv.notify_all();
    }
}

impl Drop for DebugStream {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        self.state.1.notify_all();
    }
}

fn serve_events(mut s: TcpStream, state: &Declared, stop: &AtomicBool) {
    let _ = s.set_nonblocking(false);
    let _ = s.set_read_timeout(Some(Duration::from_secs(10)));
    let mut head = Vec::new();
    let mut buf = [0u8; 1024];
    while !head.windows(4).any(|w| w == b"\r\n\r\n") && head.len() < 65536 {
        match s.read(&mut buf) {
            Ok(0) | Err(_) => return,
            Ok(n) => head.extend_from_slice(&buf[..n]),
        }
    }
    let ok =
        b"HTTP/1.0 200 OK\r\nContent-Type: text/event-stream\r\nCache-Control: no-cache\r\n\r\n";
    if s.write_all(ok).is_err() {
        return;
    }
    let (m, cv) = state;
    let mut sent = 0u64;
    while !stop.load(Ordering::Relaxed) {
        let (version, ports) = {
            let g = m.lock().expect("lock");
            let (g, _) = cv
                .wait_timeout_while(g, Duration::from_millis(500), |g| g.0 == sent)
                .expect("wait");
            g.clone()
        };
        let out = if version != sent {
            sent = version;
            let list: Vec<Value> = ports.iter().map(|p| json!({"port": p})).collect();
            let ev = json!({"event": "Kernel.PortsResolved", "payload": {"ports": list}});
            format!("data: {ev}\n\n")
        } else {
            ": hb\n\n".to_string()
        };
        if s.write_all(out.as_bytes()).is_err() {
            return;
        }
    }
}

/// What kwok does not run of a session pod, played on its loopback IP: the
/// real workspace agent (its token read from the pod's Secret, as the
/// container's `secretKeyRef` would) and the first app's debug stream.
struct PodInsides {
    agent: Child,
    debug: DebugStream,
}

impl PodInsides {
    fn start(plane: &Plane, ns: &str, pod: &Value) -> PodInsides {
        let name = pod["metadata"]["name"].as_str().expect("pod name");
        let ip = pod["status"]["podIP"].as_str().expect("pod IP");
        assert!(ip.starts_with("127."), "a loopback pod IP: {ip}");
        let secret = plane
            .get(ns, &format!("secret/{name}-token"))
            .expect("the pod's token Secret");
        let b64 = secret["data"]["token"].as_str().expect("data.token");
        let token = String::from_utf8(
            base64::Engine::decode(&base64::engine::general_purpose::STANDARD, b64)
                .expect("base64"),
        )
        .expect("utf-8");
        let root = temp_dir("rbac-real-workspace");
        let mut agent = Command::new(KUBEGATE)
            .args(["workspace-agent", "--listen"])
            .arg(format!("{ip}:{AGENT_PORT}"))
            .arg("--root")
            .arg(&root)
            .current_dir(&root)
            .env("KUBEGATE_WORKSPACE_TOKEN", token)
            .env("RUST_LOG", "warn")
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .expect("spawn the workspace agent");
        let line = first_line(&mut agent, Duration::from_secs(30))
            .expect("the workspace agent's listening line");
        assert!(line.contains("listening on"), "{line}");
        PodInsides {
            agent,
            debug: DebugStream::start(ip),
        }
    }
}

impl Drop for PodInsides {
    fn drop(&mut self) {
        terminate(&mut self.agent, Duration::from_secs(10));
    }
}

// ------------------------------------------------------------ helpers

type Ws = tungstenite::WebSocket<TcpStream>;

fn open_ws(d: &DaemonProc, token: &str, path: &str, protocol: &str) -> Ws {
    let auth = format!("Bearer {token}");
    match d.ws(path, &[("Authorization", &auth)], &[protocol]) {
        Ok((ws, _)) => ws,
        Err((st, b)) => panic!("{path}: {st} {}", String::from_utf8_lossy(&b)),
    }
}

/// Reads an app's output (`kubegate.io.v1`) until it holds `marker`;
/// `poke` (when given) writes it again every 2 s, for a line that comes
/// through an attach which may still be connecting.
fn output_shows(d: &DaemonProc, id: &str, app: &str, marker: &str, poke: Option<&dyn Fn()>) {
    let mut ws = open_ws(
        d,
        &d.token,
        &format!("/v1/sessions/{id}/io?app={app}"),
        "kubegate.io.v1",
    );
    ws.get_mut()
        .set_read_timeout(Some(Duration::from_millis(500)))
        .expect("timeout");
    let deadline = Instant::now() + WAIT;
    let mut poked = Instant::now() - Duration::from_secs(2);
    let mut text = String::new();
    while !text.contains(marker) {
        assert!(
            Instant::now() < deadline,
            "{app}'s output never showed {marker:?}: {text:?}"
        );
        if let Some(p) = poke.filter(|_| poked.elapsed() >= Duration::from_secs(2)) {
            p();
            poked = Instant::now();
        }
        match ws.read() {
            Ok(tungstenite::Message::Binary(b)) if b.len() > 5 => {
                text.push_str(&String::from_utf8_lossy(&b[5..]));
            }
            Ok(_) => {}
            Err(tungstenite::Error::Io(e))
                if matches!(
                    e.kind(),
                    std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
                ) => {}
            Err(e) => panic!("reading {app}'s output: {e}"),
        }
    }
    let _ = ws.close(None);
    let _ = ws.flush();
}

/// One TCP connection through a `kubegate.tunnel.v1` tunnel, as the
/// principal of `token`, to an echo (kwok's port 7, or `ECHO_PY` in a
/// sim node's pod): the bytes sent come back.
fn tunnel_echo(d: &DaemonProc, token: &str, path: &str) {
    let mut ws = open_ws(d, token, path, "kubegate.tunnel.v1");
    let sent = b"kubegate rbac_real\n";
    ws.send(tungstenite::Message::Binary(sent.to_vec().into()))
        .expect("send through the tunnel");
    let mut got = Vec::new();
    while got.len() < sent.len() {
        match ws.read() {
            Ok(tungstenite::Message::Binary(b)) => got.extend_from_slice(&b),
            Ok(tungstenite::Message::Close(f)) => panic!("{path}: closed {f:?}, got {got:?}"),
            Ok(_) => {}
            Err(e) => panic!("{path}: {e}, got {got:?}"),
        }
    }
    assert_eq!(got, sent, "{path}");
    let _ = ws.close(None);
    let _ = ws.flush();
}

// ------------------------------------------------------------ the run

/// A session brought up in phase 1, and its pod's insides.
struct Session {
    id: String,
    pod: Value,
    /// Played until the session is stopped (dropped with it).
    _insides: PodInsides,
}

impl Session {
    fn pod_name(&self) -> &str {
        self.pod["metadata"]["name"].as_str().expect("pod name")
    }
}

/// Phase 1, `pod_access = "direct"`: the exec gateway, then a session
/// brought up with the test playing its pod's insides, whose Service and
/// Ingress are created, replaced, deleted and created again.
fn drive_direct(plane: &Plane, ns: &Namespaces, d: &DaemonProc) -> Session {
    let (st, _) = d.request("GET", "/readyz", None, None);
    assert_eq!(st, 200, "{}", d.log_text());
    let (st, v) = d.json("GET", "/v1/workspaces", None);
    assert_eq!(st, 200, "{v}");
    assert_eq!(v["workspaces"][0]["deployments"][0]["name"], "hello", "{v}");
    let exec = json!({"workspace": {"project": ns.workspace, "uid": WORKSPACE_UID},
                      "deployment": "hello", "command": ["sh", "-c", "echo hi"]});
    let (st, v) = d.json("POST", "/v1/exec", Some(&exec));
    assert_eq!(st, 200, "{v}");
    assert_eq!(
        (v["exitCode"].as_i64(), v["stdout"].as_str()),
        (Some(0), Some("hi\n")),
        "{v}"
    );

    // A streams app with a port (its own debug stream: no runner) and a
    // tty app under the app runner (its init container and volume go
    // through the real admission chain too).
    let body = json!({
        "apps": [{"name": "web", "entry": "app.py", "command": ["python3", "app.py"],
                  "io": "streams", "ports": [{"port": 8080}], "runner": false},
                 {"name": "term", "entry": "app.py", "io": "tty"}],
        "bundle": {"files": [{"path": "app.py", "content": "print('hello')\n"}]}
    });
    let (id, mut sse) = d.create_session(&body);
    let pod = running_pod(plane, &ns.session, &id, &plane.node);
    let insides = PodInsides::start(plane, &ns.session, &pod);
    until_status(&mut sse, "running");
    let name = pod["metadata"]["name"].as_str().expect("pod name");
    let secret = plane
        .get(&ns.session, &format!("secret/{name}-token"))
        .expect("the token Secret");
    owner_is(&secret, &pod, false);
    let (s, i) = wait_published(plane, &ns.session, &id, Some(8080));
    owner_is(&s, &pod, true);
    owner_is(&i, &pod, true);

    // kwok's ClusterAttach follows its pod log: a line written there now
    // reaches the app's output through the daemon's attach.
    let marker = format!("rbac_real attach {}", std::process::id());
    output_shows(
        d,
        &id,
        "web",
        &marker,
        Some(&|| plane.pod_log_line(&marker)),
    );

    // 8080 -> 8081: both replaced in place.
    insides.debug.declare(&[8081]);
    let (s2, i2) = wait_published(plane, &ns.session, &id, Some(8081));
    assert_eq!(s2["metadata"]["uid"], s["metadata"]["uid"]);
    assert_eq!(i2["metadata"]["uid"], i["metadata"]["uid"]);
    // No port: both deleted by the daemon, the pod still there.
    insides.debug.declare(&[]);
    wait_published(plane, &ns.session, &id, None);
    assert!(plane.get(&ns.session, &format!("pod/{name}")).is_some());
    // 8081 again: created afresh.
    insides.debug.declare(&[8081]);
    let (s3, _) = wait_published(plane, &ns.session, &id, Some(8081));
    assert_ne!(s3["metadata"]["uid"], s["metadata"]["uid"]);
    Session {
        id,
        pod,
        _insides: insides,
    }
}

/// Phase 2: the daemon restarted with `pod_access = "api-proxy"`
/// re-adopts the session, reaches the pod proxy and kwok's port-forward,
/// and stops the session; the garbage collector takes the rest.
fn drive_api_proxy(plane: &Plane, ns: &Namespaces, d: &mut DaemonProc, s: Session, config: &str) {
    assert_eq!(d.stop(), Some(0), "daemon log:\n{}", d.log_text());
    // Written while the daemon is down: only the container log has it.
    let marker = format!("rbac_real log {}", std::process::id());
    plane.pod_log_line(&marker);
    std::fs::write(&d.config, config).expect("write the config");
    d.restart("info");
    let id = s.id.clone();
    let base = format!("/v1/sessions/{id}");
    let mut sse = SseClient::open(d, &format!("{base}/events"), None);
    until_status(&mut sse, "running");
    output_shows(d, &id, "web", &marker, None);
    let (svc, _) = wait_published(plane, &ns.session, &id, Some(8081));
    owner_is(&svc, &s.pod, true);

    // The port proxy, each method through the API server's pod proxy:
    // authorized, then refused for the loopback pod IP. The refusal is a
    // Status the daemon reads (502 PORT_UNREACHABLE), except for HEAD,
    // whose answer has no body: the API server's 400 passes through as an
    // app's answer would (docs/control-plane.md#the-rbac-run).
    for m in ["GET", "HEAD", "POST", "PUT", "PATCH", "DELETE"] {
        let body = matches!(m, "POST" | "PUT" | "PATCH").then_some(&b"{}"[..]);
        let (st, b) = d.request(m, &format!("{base}/ports/8081/x"), Some(&d.token), body);
        let text = String::from_utf8_lossy(&b);
        if m == "HEAD" {
            assert_eq!((st, text.as_ref()), (400, ""), "{m}");
        } else {
            assert_eq!(st, 502, "{m}: {text}");
            assert!(text.contains("address not allowed"), "{m}: {text}");
        }
    }
    // Tunnels: the session pod's and the workspace Deployment's, to
    // kwok's echo port.
    tunnel_echo(d, &d.token, &format!("{base}/tunnels/7"));
    tunnel_echo(
        d,
        &d.token,
        &format!(
            "/v1/exec/tunnel?project={}&uid={WORKSPACE_UID}&deployment=hello&port=7",
            ns.workspace
        ),
    );

    // Stop: the daemon deletes the pod; the garbage collector its
    // Secret (the daemon may not delete Secrets), Service and Ingress.
    let (st, _) = d.request("DELETE", &base, Some(&d.token), None);
    assert_eq!(st, 204);
    until_status(&mut sse, "stopped");
    let name = s.pod_name().to_string();
    drop(s);
    for what in [
        format!("pod/{name}"),
        format!("secret/{name}-token"),
        format!("service/kubegate-run-{id}"),
        format!("ingress/kubegate-run-{id}"),
    ] {
        gone(plane, &ns.session, &what);
    }
}

/// Phase 3: an api-proxy session from the start fails cleanly at stage
/// `workspace`: its pod was scheduled and Running, the agent is behind a
/// loopback pod IP the API server will not proxy to.
fn failing_session(plane: &Plane, ns: &Namespaces, d: &DaemonProc) {
    let body = json!({
        "apps": [{"name": "web", "entry": "app.py", "command": ["python3", "app.py"],
                  "io": "streams", "ports": [{"port": 8080}], "runner": false}],
        "bundle": {"files": [{"path": "app.py", "content": "print('hello')\n"}]}
    });
    let (id, mut sse) = d.create_session(&body);
    let pod = running_pod(plane, &ns.session, &id, &plane.node);
    let name = pod["metadata"]["name"].as_str().expect("pod name");
    let seen = until_status(&mut sse, "failed");
    let error = &seen.last().expect("a status").data["error"];
    assert_eq!(error["stage"], "workspace", "{seen:#?}");
    let message = error["message"].as_str().unwrap_or("");
    assert!(message.contains("address not allowed"), "{message}");
    gone(plane, &ns.session, &format!("pod/{name}"));
    gone(plane, &ns.session, &format!("secret/{name}-token"));
    assert!(matches!(published(plane, &ns.session, &id), (None, None)));
}

/// The principal of phase 4, as the cluster will name it.
const ANN: &str = "rbac-real-ann";
/// The OIDC principal of phase 4 (`sub` ann, its email mapped with the
/// `oidc:` prefix, tests/common/issuer.rs).
const OIDC_ANN: &str = "oidc:ann@example.com";
/// The group rbac-impersonation.yaml lets the daemon impersonate and
/// binds its example developer Role to.
const DEVELOPERS: &str = "kubegate:developers";
const IMPERSONATION_RBAC: &str = concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/scripts/rbac-impersonation.yaml"
);

/// Phase 4, `[cluster] impersonate = true`, on the sim node:
/// scripts/rbac-impersonation.yaml applied (its project moved to the
/// `identity` namespace), and in the `denied` namespace a Role that lets
/// the developers look but not exec; both namespaces send their pods to
/// the sim node, which runs them. Each principal lists both workspaces,
/// execs (one-shot and interactive, real exit codes) and tunnels (to an
/// echo its pod runs) in its own, and is refused in the other with the
/// cluster's message although kubegate's rules allow it.
fn drive_impersonation(plane: &Plane, ns: &Namespaces, kubeconfig: &Path, node: &str) {
    let text = std::fs::read_to_string(IMPERSONATION_RBAC).expect("read rbac-impersonation.yaml");
    let map = [
        (FILE_SESSION_NS, ns.session.as_str()),
        (FILE_WORKSPACE_NS, ns.identity.as_str()),
    ];
    let items = adapted(&documents(&text), &map);
    let list = json!({"apiVersion": "v1", "kind": "List", "items": items});
    plane.ok(&["apply", "-f", "-"], Some(list.to_string().as_bytes()));
    let look_only = json!({"apiVersion": "v1", "kind": "List", "items": [
        {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "Role",
         "metadata": {"name": "look-only", "namespace": ns.denied},
         "rules": [{"apiGroups": ["apps"], "resources": ["deployments"], "verbs": ["get", "list"]},
                   {"apiGroups": ["apps"], "resources": ["replicasets"], "verbs": ["list"]},
                   {"apiGroups": [""], "resources": ["pods"], "verbs": ["list"]}]},
        {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "RoleBinding",
         "metadata": {"name": "look-only", "namespace": ns.denied},
         "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": "look-only"},
         "subjects": [{"apiGroup": "rbac.authorization.k8s.io", "kind": "Group", "name": DEVELOPERS}]}
    ]});
    plane.ok(
        &["apply", "-f", "-"],
        Some(look_only.to_string().as_bytes()),
    );
    create_echo_deployment(plane, &ns.identity, node);
    create_deployment(plane, &ns.denied);
    deployment_pods_on(plane, &ns.denied, node);

    let (token, digest) = common::daemon::random_token();
    let principal = format!(
        "name = \"{ANN}\"\ntoken_sha256 = \"{digest}\"\nkube_groups = [\"{DEVELOPERS}\"]\n\
         workspaces = [\"{}/{WORKSPACE_UID}\", \"{}/{WORKSPACE_UID}\"]\n",
        ns.identity, ns.denied
    );
    // And a person signing in through an OIDC issuer, mapped to the same
    // group by a rule.
    let keys = temp_dir("rbac-real-oidc");
    let key = RsaKey::generate(&keys, "k1");
    let issuer = TestIssuer::start(&[&key]);
    let rules = format!(
        "[[oidc.rule]]\ngroup = \"oidc:dev\"\nkube_groups = [\"{DEVELOPERS}\"]\n\
         workspaces = [\"{}/{WORKSPACE_UID}\", \"{}/{WORKSPACE_UID}\"]\n",
        ns.identity, ns.denied
    );
    let config = format!(
        "{}{}",
        config_with(
            kubeconfig,
            ns,
            "api-proxy",
            "impersonate = true\n",
            &agent_deadline(),
            &principal,
        ),
        oidc_toml(&issuer.url, &rules)
    );
    let mut d = DaemonProc::start_config(&config, kubeconfig.to_path_buf(), &token, "info");
    let oidc_token = key.sign(&claims(&issuer.url, "ann"));
    let exec = |project: &str| {
        json!({"workspace": {"project": project, "uid": WORKSPACE_UID},
               "deployment": "hello", "command": ["sh", "-c", "echo hi; exit 3"]})
    };
    let post = |t: &str, body: &Value| {
        let (st, b) = d.request(
            "POST",
            "/v1/exec",
            Some(t),
            Some(body.to_string().as_bytes()),
        );
        (
            st,
            serde_json::from_slice::<Value>(&b).unwrap_or(Value::Null),
        )
    };
    for (t, who) in [(token.as_str(), ANN), (oidc_token.as_str(), OIDC_ANN)] {
        // RBAC bindings reach the authorizer's cache a moment after the
        // apply; the issuer's keys are fetched at the first token.
        let (_, v) = wait_for(&format!("an exec in the workspace as {who}"), WAIT, || {
            let r = post(t, &exec(&ns.identity));
            (r.0 == 200).then_some(r)
        });
        // The sim node ran it in the pod: its exit code and output.
        assert_eq!(
            (v["exitCode"].as_i64(), v["stdout"].as_str()),
            (Some(3), Some("hi\n")),
            "{v}"
        );
        let pod = v["pod"].as_str().expect("the exec's pod");
        let on = plane.get(&ns.identity, &format!("pod/{pod}"));
        assert_eq!(on.map(|p| p["spec"]["nodeName"].clone()), Some(json!(node)));
        interactive_cat(&d, t, &ns.identity);
        // kubegate allows it; the cluster does not: its message, naming
        // the principal, comes back with kubegate's code.
        let (st, v) = post(t, &exec(&ns.denied));
        assert_eq!(st, 403, "{v}");
        assert_eq!(v["error"]["code"], "EXEC_TARGET_FORBIDDEN", "{v}");
        let message = v["error"]["message"].as_str().unwrap_or("");
        assert!(
            message.contains(&format!("User \"{who}\" cannot"))
                && message.contains("pods/exec")
                && message.contains(&ns.denied),
            "{message}"
        );
        // A tunnel to the echo server the pod runs.
        tunnel_echo(
            &d,
            t,
            &format!(
                "/v1/exec/tunnel?project={}&uid={WORKSPACE_UID}&deployment=hello&port={ECHO_PORT}",
                ns.identity
            ),
        );
    }
    let (st, v) = d.json("GET", "/v1/workspaces", None);
    assert_eq!(st, 200, "{v}");
    assert_eq!(v["workspaces"].as_array().map(Vec::len), Some(2), "{v}");
    assert!(!d.log_text().contains(&oidc_token));
    assert_eq!(d.stop(), Some(0), "daemon log:\n{}", d.log_text());
    // The token never reached the daemon's log.
    assert!(!d.log_text().contains(&token));
}

/// An interactive exec (`kubegate.exec.v1`) as the principal of `token`
/// on the sim node: `cat` echoes stdin back, stdin's EOF ends it, and the
/// shell's exit code comes back in the `exit` frame.
fn interactive_cat(d: &DaemonProc, token: &str, project: &str) {
    let mut path = format!(
        "/v1/exec/interactive?project={project}&uid={WORKSPACE_UID}&deployment=hello\
         &tty=false&stdin=true"
    );
    for arg in ["sh", "-c", "cat; exit 4"] {
        path.push_str("&command=");
        path.push_str(&kubegate::kube::client::api::encode_segment(arg));
    }
    let mut ws = open_ws(d, token, &path, EXEC_PROTOCOL);
    match next_frame(&mut ws) {
        ServerFrame::Target(t) => assert_eq!(t.namespace, project, "{t:?}"),
        other => panic!("{path}: first frame {other:?}"),
    }
    let line = b"kubegate rbac_real stdin\n";
    let stdin = |data: &[u8], eof: bool| {
        ClientFrame::Stdin {
            data: data.to_vec(),
            eof,
        }
        .encode()
    };
    ws.send(stdin(line, false)).expect("send stdin");
    // Echoed while stdin is still open: cat runs in the pod.
    let mut stdout = Vec::new();
    while stdout.len() < line.len() {
        match next_frame(&mut ws) {
            ServerFrame::Stdout(b) => stdout.extend_from_slice(&b),
            other => panic!("{path}: {other:?}, stdout so far {stdout:?}"),
        }
    }
    assert_eq!(stdout, line, "{path}");
    ws.send(stdin(b"", true)).expect("send stdin's EOF");
    match next_frame(&mut ws) {
        ServerFrame::Exit(x) => assert_eq!(x.exit_code, 4, "{path}: {x:?}"),
        other => panic!("{path}: {other:?} where the exit frame belongs"),
    }
    let _ = ws.close(None);
    let _ = ws.flush();
}

/// The next data or control frame of an interactive exec.
fn next_frame(ws: &mut Ws) -> ServerFrame {
    loop {
        match ws.read() {
            Ok(m @ (Message::Text(_) | Message::Binary(_))) => {
                return ServerFrame::decode(&m)
                    .expect("a valid server frame")
                    .expect("a frame");
            }
            Ok(Message::Close(f)) => panic!("the exec closed: {f:?}"),
            Ok(_) => {}
            Err(e) => panic!("reading the exec: {e}"),
        }
    }
}

/// Phase 4's requests in the audit log: authenticated as the daemon,
/// authorized as the principal in the developers' group; each principal's
/// execs and port-forward in its project allowed, its exec in the denied
/// namespace refused.
fn check_impersonated(audit: &Path, ns: &Namespaces) {
    let text = std::fs::read_to_string(audit).expect("read the audit log");
    let events: Vec<Value> = text
        .lines()
        .filter_map(|l| serde_json::from_str::<Value>(l).ok())
        .filter(|e| {
            e["impersonatedUser"]["username"] == ANN
                || e["impersonatedUser"]["username"] == OIDC_ANN
        })
        // This run's (the plane's log outlives one test run).
        .filter(|e| {
            let n = &e["objectRef"]["namespace"];
            *n == ns.identity.as_str() || *n == ns.denied.as_str()
        })
        .collect();
    assert!(!events.is_empty(), "no request as {ANN} in the audit log");
    for e in &events {
        assert_eq!(e["user"]["username"], ns.user().as_str(), "{e}");
        let groups: Vec<&str> = e["impersonatedUser"]["groups"]
            .as_array()
            .map(|g| g.iter().filter_map(Value::as_str).collect())
            .unwrap_or_default();
        assert!(groups.contains(&DEVELOPERS), "{e}");
    }
    let find = |who: &str, namespace: &str, sub: &str, refused: bool| {
        events.iter().any(|e| {
            let code = e["responseStatus"]["code"].as_u64().unwrap_or(0);
            e["impersonatedUser"]["username"] == who
                && e["objectRef"]["namespace"] == namespace
                && e["objectRef"]["subresource"] == sub
                && (code == 403) == refused
        })
    };
    for who in [ANN, OIDC_ANN] {
        for (namespace, sub, refused) in [
            (&ns.identity, "exec", false),
            (&ns.identity, "portforward", false),
            (&ns.denied, "exec", true),
        ] {
            assert!(
                find(who, namespace, sub, refused),
                "{who} {sub} in {namespace} (refused: {refused}): {events:#?}"
            );
        }
    }
    println!(
        "impersonated requests on the real plane: {} (user {}, impersonatedUser {ANN} and {OIDC_ANN})",
        events.len(),
        ns.user()
    );
}

// ------------------------------------------------------------ the audit log

/// Waits until the audit log shows a request made now as the daemon's
/// identity, so every earlier one is in it too.
fn flush_audit(plane: &Plane, kubeconfig: &Path, audit: &Path, ns: &Namespaces) {
    let uri = format!("/version?rbac_real={}", std::process::id());
    let mut c = Command::new(&plane.kubectl);
    c.arg("--kubeconfig")
        .arg(kubeconfig)
        .arg("--cache-dir")
        .arg(&plane.cache)
        .args(["get", "--raw", &uri]);
    let out = run_with_timeout(c, None, WAIT);
    assert_eq!(out.code, Some(0), "{}", out.stderr_str());
    let user = ns.user();
    wait_for("the marker in the audit log", WAIT, || {
        let text = std::fs::read_to_string(audit).ok()?;
        text.lines()
            .filter_map(|l| serde_json::from_str::<Value>(l).ok())
            .any(|e| e["user"]["username"] == user.as_str() && e["requestURI"] == uri.as_str())
            .then_some(())
    });
}

/// Every request of `user` with the daemon's User-Agent in the audit log,
/// as (authorization checks, status code) -> count, and the refused ones
/// (401 or 403) in full. A WebSocket GET of pods/exec, attach or
/// portforward is checked as `get` and, since Kubernetes 1.35, also as
/// `create` (AuthorizePodWebsocketUpgradeCreatePermission); the audit
/// event names the first.
type Audited = BTreeMap<(Check, u16), usize>;

fn audited(path: &Path, user: &str) -> (Audited, Vec<String>) {
    let text = std::fs::read_to_string(path).expect("read the audit log");
    let mut ids = BTreeSet::new();
    let mut out: Audited = BTreeMap::new();
    let mut refused = Vec::new();
    for l in text.lines() {
        // The last line may be half written.
        let Ok(e) = serde_json::from_str::<Value>(l) else {
            continue;
        };
        let ua = e["userAgent"].as_str().unwrap_or("");
        if e["user"]["username"] != user || !ua.starts_with("kubegate/") {
            continue;
        }
        // Authorized as the principal, not the daemon (phase 4): judged by
        // the principal's grants, in `check_impersonated`.
        if e.get("impersonatedUser").is_some() {
            continue;
        }
        // A long-running request has two events (ResponseStarted, then
        // ResponseComplete); one is enough.
        if !ids.insert(e["auditID"].as_str().unwrap_or("").to_string()) {
            continue;
        }
        let code = e["responseStatus"]["code"]
            .as_u64()
            .and_then(|c| u16::try_from(c).ok())
            .unwrap_or(0);
        if code == 401 || code == 403 {
            refused.push(l.to_string());
        }
        // Non-resource URLs (/version) are granted to every identity.
        let Some(o) = e.get("objectRef") else {
            continue;
        };
        let s = |k: &str| o[k].as_str().unwrap_or("").to_string();
        let resource = match o["subresource"].as_str() {
            Some(sub) => format!("{}/{sub}", s("resource")),
            None => s("resource"),
        };
        let verb = e["verb"].as_str().unwrap_or("").to_string();
        let mut verbs = vec![verb.clone()];
        if verb == "get"
            && ["pods/exec", "pods/attach", "pods/portforward"].contains(&resource.as_str())
        {
            verbs.push("create".into());
        }
        for v in verbs {
            let check = (s("namespace"), s("apiGroup"), resource.clone(), v);
            *out.entry((check, code)).or_default() += 1;
        }
    }
    (out, refused)
}

/// Zero refusals; every request granted in its namespace by the file; every
/// grant used, but those in [`SIM_ONLY`].
fn check_audit(audit: &Path, ns: &Namespaces) {
    let (seen, refused) = audited(audit, &ns.user());
    assert!(
        !seen.is_empty(),
        "no request of {} in the audit log",
        ns.user()
    );
    println!("the daemon's requests on the real plane (audit log):");
    for ((c, code), n) in &seen {
        println!(
            "  {n:>4} x {code} ns={:<6} group={:<18} {:<16} {}",
            ns.file_ns(&c.0),
            c.1,
            c.2,
            c.3
        );
    }
    assert!(
        refused.is_empty(),
        "refused on the real plane: {refused:#?}"
    );
    let rbac = std::fs::read_to_string(RBAC).expect("read scripts/rbac.yaml");
    let (grants, _) = parse_rbac(&rbac);
    let used: BTreeSet<Check> = seen
        .keys()
        .map(|(c, _)| (ns.file_ns(&c.0), c.1.clone(), c.2.clone(), c.3.clone()))
        .collect();
    let missing: Vec<&Check> = used.iter().filter(|c| !grants.grants(c)).collect();
    assert!(
        missing.is_empty(),
        "used but not granted in that namespace by scripts/rbac.yaml: {missing:#?}"
    );
    let used_triples: BTreeSet<Triple> = used
        .iter()
        .map(|(_, g, r, v)| (g.clone(), r.clone(), v.clone()))
        .collect();
    let unused: BTreeSet<Triple> = grants.all.difference(&used_triples).cloned().collect();
    let sim_only: BTreeSet<Triple> = SIM_ONLY
        .iter()
        .flat_map(|(g, r, verbs, _)| {
            verbs
                .iter()
                .map(move |v| (g.to_string(), r.to_string(), v.to_string()))
        })
        .collect();
    println!("granted, used only on the sim:");
    for (g, r, verbs, why) in SIM_ONLY {
        println!("  group={g} {r} {verbs:?}: {why}");
    }
    assert_eq!(
        unused, sim_only,
        "the grants the real-plane run does not use must be exactly SIM_ONLY \
         (a new use: take it out; a grant not reached: name it there with the sim test)"
    );
}

#[test]
fn the_daemon_needs_nothing_beyond_rbac_yaml_on_the_real_plane() {
    let _dog = common::backend::watchdog(900);
    let Some(plane) = plane_or_skip("rbac_real") else {
        return;
    };
    let t0 = Instant::now();
    let ns = Namespaces::create(
        &plane,
        "rbac-real",
        NsOptions {
            identity: plane.sim_node.is_some(),
            ..NsOptions::default()
        },
    );
    let sa_token = apply_rbac(&plane, &ns);
    let dir = temp_dir("rbac-real");
    let kubeconfig = write_kubeconfig(&plane, &sa_token, &dir);
    ensure_node_storage(&plane);
    create_deployment(&plane, &ns.workspace);
    let set_up = t0.elapsed();

    let (token, digest) = common::daemon::random_token();
    let mut d = DaemonProc::start_config(
        &daemon_config(&kubeconfig, &ns, &digest, "direct"),
        kubeconfig.clone(),
        &token,
        "info",
    );
    let session = drive_direct(&plane, &ns, &d);
    let direct = t0.elapsed();
    let api_proxy = daemon_config(&kubeconfig, &ns, &digest, "api-proxy");
    drive_api_proxy(&plane, &ns, &mut d, session, &api_proxy);
    let readopted = t0.elapsed();
    failing_session(&plane, &ns, &d);
    assert_eq!(d.stop(), Some(0), "daemon log:\n{}", d.log_text());
    no_refusal_logged(&d);
    let before_impersonation = t0.elapsed();
    if let Some(node) = &plane.sim_node {
        drive_impersonation(&plane, &ns, &kubeconfig, node);
    } else {
        skip_without_sim_node("rbac_real: phase 4 (impersonation)", NO_SIM_NODE);
    }
    match &plane.audit_log {
        Some(audit) => {
            flush_audit(&plane, &kubeconfig, audit, &ns);
            check_audit(audit, &ns);
            if plane.sim_node.is_some() {
                check_impersonated(audit, &ns);
            }
        }
        None => eprintln!(
            "rbac_real: KUBEGATE_REAL_AUDIT_LOG is not set: 403s were looked for in the \
             daemon's logs and answers only, not request by request \
             (docs/control-plane.md#the-rbac-run)"
        ),
    }
    eprintln!(
        "rbac_real: set-up {:.1} s, direct phase {:.1} s, api-proxy phase {:.1} s, \
         impersonation phase {:.1} s, all {:.1} s",
        set_up.as_secs_f64(),
        (direct - set_up).as_secs_f64(),
        (readopted - direct).as_secs_f64(),
        (t0.elapsed() - before_impersonation).as_secs_f64(),
        t0.elapsed().as_secs_f64()
    );
}
