//! Pure builders of a session's Kubernetes objects (docs/sessions.md#a-sessions-pod,
//! docs/sessions.md#service-and-ingress), the endpoints list, and the
//! readings of a pod the state machine needs. No I/O.
//!
//! The pod:
//! - name `kubegate-watch-<sessionId>-<millis base36><counter base36>` (a new
//!   name at every recreate; lookups key on labels);
//! - labels: managed-by (configured), `kubegate.dev/session-id`,
//!   `kubegate.dev/mode: watch`, `kubegate.dev/principal` (the principal's
//!   name when it is a valid label value, else a sanitised prefix plus 12 hex
//!   digits of its SHA-256, see [`principal_label`]); the full name is kept
//!   in the annotation of the same key;
//! - `restartPolicy: Never`, `activeDeadlineSeconds` = what remains of the
//!   session's life, no service account token, no service links (their env
//!   would leak other Services into the apps), a non-root uid ([`RUN_AS`];
//!   in sim mode none is named, the sim gives each pod its own),
//!   seccomp RuntimeDefault, no privilege escalation, all capabilities
//!   dropped, read-only root file systems;
//! - volumes: `workspace` (emptyDir at [`WORKSPACE_ROOT`] in every
//!   container), `scratch` (emptyDir at `/tmp`, one sub-folder per container,
//!   also `HOME`), and, with the app runner, `kubegate-bin` (emptyDir filled
//!   by the init container `kubegate install-self /kubegate/bin` from the
//!   workspace image, mounted read-only in app containers);
//! - containers: `workspace` (the agent on `$(POD_IP):8099`, root
//!   `/workspace`, token in `KUBEGATE_WORKSPACE_TOKEN` from the pod's own
//!   Secret through `valueFrom.secretKeyRef`: the pod JSON, which anyone who
//!   may list pods in the namespace reads, holds no token), then
//!   `app-<name>` in the order given.
//!
//! The token's Secret ([`build_token_secret`], docs/sessions.md "The
//! workspace token"): one per pod, named [`token_secret_name`] (the pod's
//! name and `-token`: nothing about the principal), key [`TOKEN_KEY`], type
//! Opaque, immutable, labels managed-by and session-id, owned by the pod
//! (its uid), so it is created right after the pod and garbage-collected
//! with it; the workspace container waits in `CreateContainerConfigError`
//! until it exists.
//!
//! An app container runs `sh -c '<wait for "$KUBEGATE_ENTRY">; exec "$@"' sh
//! <argv…>`: the entry path reaches the shell through the env, never inside
//! the script, so no file name can inject shell. User-given argv and env
//! values are made literal for Kubernetes (`$` doubled, so `$(X)` is not
//! expanded); the configured default command is not, so it may use
//! `$(KUBEGATE_ENTRY)`.
//!
//! The app runner (`kubegate app-runner -- CMD…`, docs/runner.md): with
//! [`PodSettings::app_runner`] (`[sessions] app_runner`, on by default) the
//! pod gets the init container, the binary volume and, for apps with
//! `runner: true`, the `exec /kubegate/bin/kubegate app-runner -- "$@"`
//! wrapper; `runner: false` apps run their command directly.
//!
//! The sim (src/sim/podspec/mod.rs) runs these pods as local processes: it
//! honours `command`/`args` (argv `kubegate` becomes its own binary, a copy
//! in a volume runs as is), `$(VAR)` and `$$`, env with the downward API
//! (`status.podIP`: a loopback 127.0.x.y per pod, so agent, debug and app
//! ports do not collide between pods), emptyDir volumes with `subPath`,
//! mount paths rewritten in argv, env values and `workingDir`, `tty`/`stdin`,
//! init containers and `activeDeadlineSeconds`, and (run as root) the
//! security contexts' users: each pod its own host uid (docs/sim.md, "Pod
//! users"). It ignores images (no ENTRYPOINT: our pods always give a
//! command), the rest of the security contexts and resources (admission
//! only defaults them). What it needs from the host:
//! `sh` and `sleep` (the wait loop), and the default app command's program.

use super::gateway::RouteState;
pub use super::gateway::Routing;
use super::spec::{AppSpec, Io, Port, Protocol, SessionSpec, AGENT_PORT, INSPECT_BASE_PORT};
use crate::kube::client::resources::ContainerStateTerminated;
use crate::kube::client::{Ingress, Pod, Secret, Service};
use crate::kube::labels::MANAGED_BY_LABEL;
use crate::kube::names::check_label_value;
use crate::kube::quantity;
use serde::{Deserialize, Serialize};
use serde_json::{json, Value};
use sha2::{Digest, Sha256};

pub use crate::kube::labels::{MODE_LABEL, MODE_WATCH, PRINCIPAL_LABEL, SESSION_ID_LABEL};
/// Where the workspace volume is mounted in every container.
pub const WORKSPACE_ROOT: &str = "/workspace";
/// Where the binary volume is mounted (app runner).
pub const BIN_DIR: &str = "/kubegate/bin";
/// The uid and gid every session container runs as.
pub const RUN_AS: i64 = 65532;
/// The workspace container's name (also a reserved app name).
pub const WORKSPACE_CONTAINER: &str = "workspace";
/// The init container carrying the binary (app runner).
pub const INSTALL_CONTAINER: &str = "install-kubegate";
/// The workspace token's key in its Secret.
pub const TOKEN_KEY: &str = "token";
/// Grace period of a session pod (stop and suspend delete with 0).
pub const TERMINATION_GRACE_SECS: i64 = 5;
/// The app container's wait loop: polls for the entry every 0.2 s, then
/// runs its arguments. The entry comes from the env, never from the script.
pub const WAIT_SCRIPT: &str = r#"while [ ! -f "$KUBEGATE_ENTRY" ]; do sleep 0.2; done; exec "$@""#;
/// The same, under the app runner.
pub const WAIT_SCRIPT_RUNNER: &str = r#"while [ ! -f "$KUBEGATE_ENTRY" ]; do sleep 0.2; done; exec /kubegate/bin/kubegate app-runner -- "$@""#;

/// What the builders take from the daemon's settings (the engine builds
/// them from the config's `[cluster]` and `[sessions]`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PodSettings {
    pub namespace: String,
    pub managed_by: String,
    pub workspace_image: String,
    pub default_app_image: String,
    pub default_app_command: Vec<String>,
    /// Endpoints get `<port>-<sessionId>.<domain>` (either routing layer).
    pub base_domain: Option<String>,
    /// Which layer routes the endpoints (`[cluster] routing`, resolved).
    pub routing: Routing,
    pub ingress_class: Option<String>,
    pub ingress_tls_secret: Option<String>,
    pub max_cpu: String,
    pub max_memory: String,
    pub max_ephemeral_storage: String,
    /// Wrap `runner: true` apps in `kubegate app-runner` (with its init
    /// container): `[sessions] app_runner`, on by default.
    pub app_runner: bool,
    /// The uid and gid the pod names ([`RUN_AS`]); `None` in sim mode,
    /// where the sim gives each pod its own host uid (a fixed one would be
    /// shared by every principal's pods on that host: docs/sim.md, "Pod
    /// users"). Either way `runAsNonRoot: true`.
    pub run_as: Option<i64>,
}

impl Default for PodSettings {
    /// The daemon's defaults outside sim mode (`[cluster]` and `[sessions]`
    /// with nothing set; a test in `session::engine::settings` keeps the
    /// two equal): namespace `default`, managed by `kubegate`, this
    /// release's workspace image, busybox apps running their entry with
    /// `sh`, no Ingress, 1 CPU, 1 GiB of memory and 2 GiB of ephemeral
    /// storage per container, the app runner on, [`RUN_AS`].
    fn default() -> Self {
        PodSettings {
            namespace: "default".into(),
            managed_by: "kubegate".into(),
            workspace_image: concat!("ghcr.io/kubegate/kubegate:", env!("CARGO_PKG_VERSION"))
                .into(),
            default_app_image: "docker.io/library/busybox:1.37".into(),
            default_app_command: vec!["sh".into(), "$(KUBEGATE_ENTRY)".into()],
            base_domain: None,
            routing: Routing::None,
            ingress_class: None,
            ingress_tls_secret: None,
            max_cpu: "1".into(),
            max_memory: "1Gi".into(),
            max_ephemeral_storage: "2Gi".into(),
            app_runner: true,
            run_as: Some(RUN_AS),
        }
    }
}

/// Requested per-container resources (none today: the start request has no
/// field for them); each is clamped to its ceiling.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Requested {
    pub cpu: Option<String>,
    pub memory: Option<String>,
    pub ephemeral_storage: Option<String>,
}

/// Everything one pod is built from.
#[derive(Debug, Clone, Copy)]
pub struct PodInput<'a> {
    pub session_id: &'a str,
    pub principal: &'a str,
    pub spec: &'a SessionSpec,
    pub pod_name: &'a str,
    /// `activeDeadlineSeconds` (at least 1).
    pub remaining_life_secs: u64,
    pub requested: &'a Requested,
}

/// `kubegate-watch-<sessionId>-<millis base36><counter base36>`.
pub fn pod_name(session_id: &str, millis: u64, counter: u64) -> String {
    format!(
        "kubegate-watch-{session_id}-{}{}",
        base36(millis),
        base36(counter)
    )
}

/// `kubegate-run-<sessionId>`: the Service and the Ingress.
pub fn service_name(session_id: &str) -> String {
    format!("kubegate-run-{session_id}")
}

fn base36(mut n: u64) -> String {
    const DIGITS: &[u8] = b"0123456789abcdefghijklmnopqrstuvwxyz";
    let mut out = Vec::new();
    loop {
        out.push(DIGITS[(n % 36) as usize]);
        n /= 36;
        if n == 0 {
            break;
        }
    }
    out.reverse();
    String::from_utf8(out).unwrap_or_default()
}

/// A label value for a principal name: the name itself when it is a valid
/// label value; else its characters outside `[A-Za-z0-9._-]` replaced by
/// `-`, trimmed to alphanumeric ends, cut to 40, then `-` and the first 12
/// hex digits of the name's SHA-256 (`p-<hash>` when nothing is left). The
/// hash keeps two names that sanitise alike apart.
pub fn principal_label(name: &str) -> String {
    if check_label_value(name).is_ok() {
        return name.to_string();
    }
    let hash = hex12(name.as_bytes());
    let cleaned: String = name
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-') {
                c
            } else {
                '-'
            }
        })
        .collect();
    let trimmed = cleaned.trim_matches(|c: char| !c.is_ascii_alphanumeric());
    let mut cut: String = trimmed.chars().take(40).collect();
    while cut.ends_with(|c: char| !c.is_ascii_alphanumeric()) {
        cut.pop();
    }
    if cut.is_empty() {
        format!("p-{hash}")
    } else {
        format!("{cut}-{hash}")
    }
}

fn hex12(b: &[u8]) -> String {
    Sha256::digest(b)
        .iter()
        .take(6)
        .map(|x| format!("{x:02x}"))
        .collect()
}

/// The labels every object of a session carries.
pub fn session_labels(settings: &PodSettings, session_id: &str, principal: &str) -> Value {
    json!({
        MANAGED_BY_LABEL: settings.managed_by,
        SESSION_ID_LABEL: session_id,
        MODE_LABEL: MODE_WATCH,
        PRINCIPAL_LABEL: principal_label(principal),
    })
}

/// Kubernetes expands `$(VAR)` in command, args and env values; `$$` is a
/// literal `$`. User-given strings are made literal.
fn literal(s: &str) -> String {
    s.replace('$', "$$")
}

fn resources(settings: &PodSettings, r: &Requested) -> Value {
    let q = json!({
        "cpu": quantity::clamp(r.cpu.as_deref(), &settings.max_cpu),
        "memory": quantity::clamp(r.memory.as_deref(), &settings.max_memory),
        "ephemeral-storage": quantity::clamp(r.ephemeral_storage.as_deref(), &settings.max_ephemeral_storage),
    });
    json!({"requests": q, "limits": q})
}

fn container_security(settings: &PodSettings) -> Value {
    let mut sc = json!({
        "allowPrivilegeEscalation": false,
        "capabilities": {"drop": ["ALL"]},
        "readOnlyRootFilesystem": true,
        "runAsNonRoot": true,
    });
    if let Some(id) = settings.run_as {
        sc["runAsUser"] = json!(id);
        sc["runAsGroup"] = json!(id);
    }
    sc
}

fn pod_security(settings: &PodSettings) -> Value {
    let mut sc = json!({
        "runAsNonRoot": true,
        "seccompProfile": {"type": "RuntimeDefault"},
    });
    if let Some(id) = settings.run_as {
        sc["runAsUser"] = json!(id);
        sc["runAsGroup"] = json!(id);
        sc["fsGroup"] = json!(id);
    }
    sc
}

fn pod_ip_env() -> Value {
    json!({"name": "POD_IP", "valueFrom": {"fieldRef": {"fieldPath": "status.podIP"}}})
}

/// The absolute path of `entry` in the containers.
pub fn entry_path(entry: &str) -> String {
    format!("{WORKSPACE_ROOT}/{entry}")
}

/// `KUBEGATE_INSPECT_ADDR` port of app `index`.
pub fn inspect_port(index: usize) -> u16 {
    INSPECT_BASE_PORT.saturating_add(index as u16)
}

fn uses_runner(settings: &PodSettings, app: &AppSpec) -> bool {
    settings.app_runner && app.runner
}

fn app_container(
    settings: &PodSettings,
    input: &PodInput<'_>,
    index: usize,
    app: &AppSpec,
) -> Value {
    let spec = input.spec;
    let image = app
        .image
        .as_deref()
        .or(spec.image.as_deref())
        .unwrap_or(&settings.default_app_image);
    let argv: Vec<String> = match &app.command {
        Some(cmd) => cmd.iter().map(|a| literal(a)).collect(),
        None => settings.default_app_command.clone(),
    };
    let runner = uses_runner(settings, app);
    let script = if runner {
        WAIT_SCRIPT_RUNNER
    } else {
        WAIT_SCRIPT
    };
    let mut env = vec![pod_ip_env()];
    if !spec.env.iter().any(|(k, _)| k == "HOME") {
        env.push(json!({"name": "HOME", "value": "/tmp"}));
    }
    for (k, v) in &spec.env {
        env.push(json!({"name": k, "value": literal(v)}));
    }
    env.push(json!({"name": "KUBEGATE_APP", "value": app.name}));
    env.push(json!({"name": "KUBEGATE_WORKSPACE", "value": WORKSPACE_ROOT}));
    env.push(json!({"name": "KUBEGATE_ENTRY", "value": literal(&entry_path(&app.entry))}));
    env.push(json!({
        "name": "KUBEGATE_INSPECT_ADDR",
        "value": format!("$(POD_IP):{}", inspect_port(index)),
    }));
    let container = app.container();
    let mut mounts = vec![
        json!({"name": "workspace", "mountPath": WORKSPACE_ROOT}),
        json!({"name": "scratch", "mountPath": "/tmp", "subPath": container}),
    ];
    if runner {
        mounts.push(json!({"name": "kubegate-bin", "mountPath": BIN_DIR, "readOnly": true}));
    }
    let mut c = json!({
        "name": container,
        "image": image,
        "command": ["sh", "-c", script, "sh"],
        "args": argv,
        "env": env,
        "workingDir": WORKSPACE_ROOT,
        "stdin": true,
        "tty": app.io == Io::Tty,
        "volumeMounts": mounts,
        "securityContext": container_security(settings),
        "resources": resources(settings, input.requested),
    });
    if !app.ports.is_empty() {
        c["ports"] = Value::Array(
            app.ports
                .iter()
                .map(|p| json!({"containerPort": p.port, "protocol": p.protocol.kube()}))
                .collect(),
        );
    }
    if let Some(p) = spec.pull_policy {
        c["imagePullPolicy"] = json!(p.kube());
    }
    c
}

/// The session pod as JSON (it round-trips into [`Pod`]).
pub fn build_pod_json(settings: &PodSettings, input: &PodInput<'_>) -> Value {
    let runner = input.spec.apps.iter().any(|a| uses_runner(settings, a));
    let workspace = json!({
        "name": WORKSPACE_CONTAINER,
        "image": settings.workspace_image,
        "command": [
            "kubegate", "workspace-agent",
            "--listen", format!("$(POD_IP):{AGENT_PORT}"),
            "--root", WORKSPACE_ROOT,
        ],
        "env": [
            pod_ip_env(),
            {"name": "HOME", "value": "/tmp"},
            {"name": crate::agent::wire::TOKEN_ENV, "valueFrom": {"secretKeyRef": {
                "name": token_secret_name(input.pod_name),
                "key": TOKEN_KEY,
            }}},
        ],
        "ports": [{"containerPort": AGENT_PORT, "protocol": "TCP", "name": "agent"}],
        "volumeMounts": [
            {"name": "workspace", "mountPath": WORKSPACE_ROOT},
            {"name": "scratch", "mountPath": "/tmp", "subPath": WORKSPACE_CONTAINER},
        ],
        "securityContext": container_security(settings),
        "resources": resources(settings, &Requested::default()),
    });
    let mut containers = vec![workspace];
    for (i, app) in input.spec.apps.iter().enumerate() {
        containers.push(app_container(settings, input, i, app));
    }
    let mut volumes = vec![
        json!({"name": "workspace", "emptyDir": {}}),
        json!({"name": "scratch", "emptyDir": {}}),
    ];
    let mut spec = json!({
        "restartPolicy": "Never",
        "activeDeadlineSeconds": input.remaining_life_secs.max(1),
        "automountServiceAccountToken": false,
        "enableServiceLinks": false,
        "terminationGracePeriodSeconds": TERMINATION_GRACE_SECS,
        "securityContext": pod_security(settings),
        "containers": containers,
    });
    if runner {
        volumes.push(json!({"name": "kubegate-bin", "emptyDir": {}}));
        spec["initContainers"] = json!([{
            "name": INSTALL_CONTAINER,
            "image": settings.workspace_image,
            "command": ["kubegate", "install-self", BIN_DIR],
            "volumeMounts": [{"name": "kubegate-bin", "mountPath": BIN_DIR}],
            "securityContext": container_security(settings),
            "resources": resources(settings, &Requested::default()),
        }]);
    }
    spec["volumes"] = Value::Array(volumes);
    json!({
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": input.pod_name,
            "namespace": settings.namespace,
            "labels": session_labels(settings, input.session_id, input.principal),
            "annotations": {PRINCIPAL_LABEL: input.principal},
        },
        "spec": spec,
    })
}

/// The session pod, typed.
pub fn build_pod(settings: &PodSettings, input: &PodInput<'_>) -> Pod {
    // Built from our own JSON above, whose every field Pod models or keeps
    // in `extra`: this cannot fail (a unit test pins the round trip).
    serde_json::from_value(build_pod_json(settings, input)).unwrap_or_default()
}

// ------------------------------------------------- the token's Secret

/// `<pod name>-token`: the Secret holding the workspace token of that pod.
pub fn token_secret_name(pod_name: &str) -> String {
    format!("{pod_name}-token")
}

/// The pod's token Secret: Opaque, immutable, the token base64 under
/// [`TOKEN_KEY`], labels managed-by and session-id (an operator finds a
/// session's Secrets by them), owned by the pod (no `blockOwnerDeletion`:
/// nothing waits for it, and setting it would need `update` on
/// `pods/finalizers` where OwnerReferencesPermissionEnforcement is on).
/// Its `Debug` shows the token: never log it.
pub fn build_token_secret(
    settings: &PodSettings,
    session_id: &str,
    pod_name: &str,
    pod_uid: &str,
    token: &str,
) -> Option<Secret> {
    use base64::Engine;
    let v = json!({
        "apiVersion": "v1",
        "kind": "Secret",
        "metadata": {
            "name": token_secret_name(pod_name),
            "namespace": settings.namespace,
            "labels": {
                MANAGED_BY_LABEL: settings.managed_by,
                SESSION_ID_LABEL: session_id,
            },
            "ownerReferences": [{
                "apiVersion": "v1",
                "kind": "Pod",
                "name": pod_name,
                "uid": pod_uid,
            }],
        },
        "type": "Opaque",
        "immutable": true,
        "data": {TOKEN_KEY: base64::engine::general_purpose::STANDARD.encode(token)},
    });
    serde_json::from_value(v).ok()
}

/// Whether `pod`'s workspace container takes its token from the pod's
/// Secret (false for a pod built before the token moved there: its token
/// is a literal env value, and it needs no Secret).
pub fn uses_token_secret(pod: &Pod) -> bool {
    let want = token_secret_name(pod.metadata.name());
    pod.spec
        .iter()
        .flat_map(|s| s.containers.iter())
        .filter(|c| c.name == WORKSPACE_CONTAINER)
        .flat_map(|c| c.env.iter().flatten())
        .filter(|e| e.name == crate::agent::wire::TOKEN_ENV)
        .filter_map(|e| e.value_from.as_ref()?.extra.get("secretKeyRef"))
        .any(|r| r["name"].as_str() == Some(want.as_str()))
}

// ------------------------------------------------- Service and Ingress

/// Every declared port of the session, in app order: `(app, port)`.
pub type AppPorts<'a> = &'a [(String, Vec<Port>)];

/// The Service's and the Ingress's metadata: both named
/// [`service_name`], labelled as the session, owned by the pod (its
/// controller: they go with it).
pub(super) fn published_metadata(settings: &PodSettings, p: &Published<'_>) -> Value {
    json!({
        "name": service_name(p.session_id),
        "namespace": settings.namespace,
        "labels": session_labels(settings, p.session_id, p.principal),
        "ownerReferences": [{
            "apiVersion": "v1",
            "kind": "Pod",
            "name": p.pod_name,
            "uid": p.pod_uid,
            "controller": true,
            "blockOwnerDeletion": true,
        }],
    })
}

fn service_port_name(p: Port, all: &[Port]) -> String {
    match p.protocol {
        Protocol::Tcp => format!("p{}", p.port),
        // Port names are unique per Service: a udp port whose number is
        // also a tcp port gets a suffix.
        Protocol::Udp if all.contains(&Port::tcp(p.port)) => format!("p{}-udp", p.port),
        Protocol::Udp => format!("p{}", p.port),
    }
}

/// What the Service and the Ingress are built from: the session, the pod
/// that owns them (they go with it), and every declared port.
#[derive(Debug, Clone, Copy)]
pub struct Published<'a> {
    pub session_id: &'a str,
    pub principal: &'a str,
    pub pod_name: &'a str,
    pub pod_uid: &'a str,
    pub ports: AppPorts<'a>,
}

/// The session's Service, owned by the pod; `None` without ports (a
/// ClusterIP Service needs one).
pub fn build_service(settings: &PodSettings, p: &Published<'_>) -> Option<Service> {
    let (session_id, ports) = (p.session_id, p.ports);
    let all: Vec<Port> = ports.iter().flat_map(|(_, p)| p.iter().copied()).collect();
    if all.is_empty() {
        return None;
    }
    let entries: Vec<Value> = all
        .iter()
        .map(|&p| {
            json!({
                "name": service_port_name(p, &all),
                "protocol": p.protocol.kube(),
                "port": p.port,
                "targetPort": p.port,
            })
        })
        .collect();
    let v = json!({
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": published_metadata(settings, p),
        "spec": {
            "type": "ClusterIP",
            "selector": {SESSION_ID_LABEL: session_id},
            "ports": entries,
        },
    });
    serde_json::from_value(v).ok()
}

/// `<port>-<sessionId>.<baseDomain>`.
pub fn endpoint_host(port: u16, session_id: &str, base_domain: &str) -> String {
    format!("{port}-{session_id}.{base_domain}")
}

/// The session's Ingress, owned by the pod: one rule per tcp port; `None`
/// without ingress routing, a base domain or tcp ports.
pub fn build_ingress(settings: &PodSettings, p: &Published<'_>) -> Option<Ingress> {
    let (session_id, ports) = (p.session_id, p.ports);
    if settings.routing != Routing::Ingress {
        return None;
    }
    let domain = settings.base_domain.as_deref()?;
    let svc = service_name(session_id);
    let tcp: Vec<u16> = ports
        .iter()
        .flat_map(|(_, p)| p.iter())
        .filter(|p| p.protocol == Protocol::Tcp)
        .map(|p| p.port)
        .collect();
    if tcp.is_empty() {
        return None;
    }
    let hosts: Vec<String> = tcp
        .iter()
        .map(|&p| endpoint_host(p, session_id, domain))
        .collect();
    let rules: Vec<Value> = tcp
        .iter()
        .zip(&hosts)
        .map(|(&p, h)| {
            json!({
                "host": h,
                "http": {"paths": [{
                    "path": "/",
                    "pathType": "Prefix",
                    "backend": {"service": {"name": svc, "port": {"number": p}}},
                }]},
            })
        })
        .collect();
    let mut spec = json!({"rules": rules});
    if let Some(class) = &settings.ingress_class {
        spec["ingressClassName"] = json!(class);
    }
    if let Some(secret) = &settings.ingress_tls_secret {
        spec["tls"] = json!([{"hosts": hosts, "secretName": secret}]);
    }
    let v = json!({
        "apiVersion": "networking.k8s.io/v1",
        "kind": "Ingress",
        "metadata": published_metadata(settings, p),
        "spec": spec,
    });
    serde_json::from_value(v).ok()
}

/// One endpoint (docs/api.md#sessions: `{app, port, protocol, host, url}`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Endpoint {
    pub app: String,
    pub port: u16,
    pub protocol: Protocol,
    /// `<port>-<sessionId>.<baseDomain>`, or "" without a base domain and
    /// for udp ports (an Ingress routes HTTP only).
    pub host: String,
    /// `https://<host>`, or null where host is "".
    pub url: Option<String>,
    /// With gateway routing, the route's state for a tcp port
    /// (docs/sessions.md#routing-states); absent otherwise.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub routing: Option<RouteState>,
}

/// The endpoints of `ports` (in order).
pub fn endpoints(
    base_domain: Option<&str>,
    session_id: &str,
    app: &str,
    ports: &[Port],
) -> Vec<Endpoint> {
    ports
        .iter()
        .map(|p| {
            let host = match (base_domain, p.protocol) {
                (Some(d), Protocol::Tcp) => endpoint_host(p.port, session_id, d),
                _ => String::new(),
            };
            Endpoint {
                app: app.to_string(),
                port: p.port,
                protocol: p.protocol,
                url: (!host.is_empty()).then(|| format!("https://{host}")),
                host,
                routing: None,
            }
        })
        .collect()
}

/// The endpoints of every app.
pub fn all_endpoints(
    base_domain: Option<&str>,
    session_id: &str,
    ports: AppPorts<'_>,
) -> Vec<Endpoint> {
    ports
        .iter()
        .flat_map(|(app, p)| endpoints(base_domain, session_id, app, p))
        .collect()
}

// ------------------------------------------------------ reading a pod

/// Provisioning progress: the first waiting reason of the init containers,
/// then of the containers, mapped (ContainerCreating -> "Creating
/// container", PodInitializing -> "Delivering application",
/// ErrImagePull/ImagePullBackOff -> "Pulling image", others raw); else an
/// unschedulable pod's condition reason (e.g. "Unschedulable: 0/3 nodes are
/// available…"); else "Scheduling".
pub fn provision_message(pod: &Pod) -> String {
    let Some(status) = pod.status.as_ref() else {
        return "Scheduling".into();
    };
    let reasons: Vec<&str> = status
        .init_container_statuses
        .iter()
        .flatten()
        .chain(status.container_statuses.iter().flatten())
        .filter_map(|c| {
            c.state
                .as_ref()?
                .waiting
                .as_ref()?
                .reason
                .as_deref()
                .filter(|r| !r.is_empty())
        })
        .collect();
    // The first waiting reason, except that an image that cannot be pulled
    // is said first wherever it is: the other containers of such a pod wait
    // in ContainerCreating, which would hide the one thing to fix.
    let waiting = reasons
        .iter()
        .find(|r| matches!(**r, "ErrImagePull" | "ImagePullBackOff"))
        .or(reasons.first())
        .copied();
    if let Some(r) = waiting {
        return match r {
            "ContainerCreating" => "Creating container",
            "PodInitializing" => "Delivering application",
            "ErrImagePull" | "ImagePullBackOff" => "Pulling image",
            other => other,
        }
        .to_string();
    }
    let unschedulable = status
        .conditions
        .iter()
        .flatten()
        .find(|c| c.type_ == "PodScheduled" && c.status == "False" && c.reason.is_some());
    if let Some(c) = unschedulable {
        let reason = c.reason.as_deref().unwrap_or_default();
        return match c.message.as_deref() {
            Some(m) if !m.is_empty() => format!("{reason}: {m}"),
            _ => reason.to_string(),
        };
    }
    "Scheduling".into()
}

/// `application container REASON (exit code N)`, or `application
/// container exited (code N)` when the reason is absent or `Completed`.
pub fn ended_message(t: &ContainerStateTerminated) -> String {
    match t.reason.as_deref() {
        Some(r) if !r.is_empty() && r != "Completed" => {
            format!("application container {r} (exit code {})", t.exit_code)
        }
        _ => format!("application container exited (code {})", t.exit_code),
    }
}

/// An app container that has terminated: `(app name, exit code, message)`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EndedApp {
    pub app: String,
    pub exit_code: i32,
    pub message: String,
}

/// Every `app-*` container of `pod` in state terminated.
pub fn ended_apps(pod: &Pod) -> Vec<EndedApp> {
    pod.status
        .iter()
        .flat_map(|s| s.container_statuses.iter().flatten())
        .filter_map(|c| {
            let app = c.name.strip_prefix("app-")?;
            let t = c.state.as_ref()?.terminated.as_ref()?;
            Some(EndedApp {
                app: app.to_string(),
                exit_code: t.exit_code,
                message: ended_message(t),
            })
        })
        .collect()
}

/// Why a pod failed, from its own status: `status.reason`/`message` (e.g.
/// DeadlineExceeded), else the first terminated container's reason, exit
/// code and message, else the phase alone.
pub fn failure_detail(pod: &Pod) -> String {
    let phase = match pod.phase() {
        "" => "Unknown",
        p => p,
    };
    let Some(s) = pod.status.as_ref() else {
        return phase.to_string();
    };
    let text = |k: &str| {
        s.extra
            .get(k)
            .and_then(Value::as_str)
            .filter(|x| !x.is_empty())
    };
    match (text("reason"), text("message")) {
        (Some(r), Some(m)) => return format!("{phase}: {r}: {m}"),
        (Some(r), None) => return format!("{phase}: {r}"),
        (None, Some(m)) => return format!("{phase}: {m}"),
        (None, None) => {}
    }
    let term = s
        .init_container_statuses
        .iter()
        .flatten()
        .chain(s.container_statuses.iter().flatten())
        .find_map(|c| {
            let t = c.state.as_ref()?.terminated.as_ref()?;
            (t.exit_code != 0 || t.reason.as_deref().is_some_and(|r| r != "Completed"))
                .then_some((c.name.as_str(), t))
        });
    match term {
        Some((name, t)) => {
            let mut m = format!(
                "{phase}: container {name} {} (exit code {})",
                t.reason.as_deref().unwrap_or("terminated"),
                t.exit_code
            );
            if let Some(msg) = t.message.as_deref().filter(|x| !x.is_empty()) {
                m.push_str(": ");
                m.push_str(msg);
            }
            m
        }
        None => phase.to_string(),
    }
}

/// `status.reason == "DeadlineExceeded"`: the pod reached its
/// `activeDeadlineSeconds` (the session's maximum life).
pub fn deadline_exceeded(pod: &Pod) -> bool {
    pod.status
        .as_ref()
        .and_then(|s| s.extra.get("reason"))
        .and_then(Value::as_str)
        == Some("DeadlineExceeded")
}

#[cfg(test)]
#[path = "pod_tests.rs"]
mod tests;
