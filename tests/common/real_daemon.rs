//! The daemon on the real control plane as scripts/rbac.yaml's
//! ServiceAccount, with exactly its grants: the plane (`DIR/env`), this
//! test's namespaces with the file's moved there
//! (`common::rbac_file::adapted`), a TokenRequest token in a kubeconfig of
//! its own, `kubegate serve` in `mode = "kubeconfig"`, and what both
//! tests/rbac_real.rs (on kwok's Node, its impersonation phase on the sim
//! node) and tests/product_real.rs (on the sim node) read back from the
//! plane.

use super::daemon::{DaemonProc, SseClient, SseEvent};
use super::rbac_file::{
    adapted, documents, FILE_GATEWAY_NS, FILE_SESSION_NS, FILE_WORKSPACE_NS, RBAC,
};
use super::{run_with_timeout, temp_dir, wait_for, Output};
use serde_json::{json, Value};
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, SystemTime};

/// The Deployment's workspace uid (`server::demo::demo_deployment`).
pub const WORKSPACE_UID: &str = "demo-uid";
/// What the daemon's ServiceAccount is called in rbac.yaml.
pub const SA: &str = "kubegate";
pub const WAIT: Duration = Duration::from_secs(60);

/// The run's real control plane, as `DIR/env` describes it.
pub struct Plane {
    pub admin: PathBuf,
    pub kubectl: PathBuf,
    pub server: String,
    pub ca: PathBuf,
    pub node: String,
    pub pod_log: PathBuf,
    pub audit_log: Option<PathBuf>,
    /// The sim node's Node name (`KUBEGATE_REAL_SIM_NODE`), None when the
    /// plane runs none.
    pub sim_node: Option<String>,
    pub cache: PathBuf,
}

impl Plane {
    /// The plane, or why there is none; `tag` names its kubectl cache.
    pub fn from_env(tag: &str) -> Result<Plane, String> {
        let Some(admin) = std::env::var_os("KUBEGATE_REAL_KUBECONFIG") else {
            return Err(
                "KUBEGATE_REAL_KUBECONFIG is not set: no real control plane in this \
                        run (scripts/control-plane.sh; docs/control-plane.md)"
                    .into(),
            );
        };
        let var = |k: &str| {
            std::env::var(k).map_err(|_| format!("{k} is not set beside KUBEGATE_REAL_KUBECONFIG"))
        };
        Ok(Plane {
            admin: admin.into(),
            kubectl: var("KUBEGATE_REAL_KUBECTL")?.into(),
            server: var("KUBEGATE_REAL_SERVER")?,
            ca: var("KUBEGATE_REAL_CA")?.into(),
            node: var("KUBEGATE_REAL_NODE")?,
            pod_log: var("KUBEGATE_REAL_POD_LOG")?.into(),
            audit_log: std::env::var_os("KUBEGATE_REAL_AUDIT_LOG").map(PathBuf::from),
            sim_node: std::env::var("KUBEGATE_REAL_SIM_NODE")
                .ok()
                .filter(|n| !n.is_empty()),
            cache: temp_dir(&format!("{tag}-kubectl")),
        })
    }

    /// The plane's kubectl as the admin, to add arguments to.
    pub fn command(&self) -> Command {
        let mut c = Command::new(&self.kubectl);
        c.arg("--kubeconfig")
            .arg(&self.admin)
            .arg("--cache-dir")
            .arg(&self.cache)
            .arg("--request-timeout=30s");
        c
    }

    /// kubectl as the admin.
    pub fn kubectl(&self, args: &[&str], stdin: Option<&[u8]>) -> Output {
        let mut c = self.command();
        c.args(args);
        run_with_timeout(c, stdin, WAIT)
    }

    /// kubectl as the admin, which must succeed; its stdout.
    pub fn ok(&self, args: &[&str], stdin: Option<&[u8]>) -> String {
        let out = self.kubectl(args, stdin);
        assert_eq!(out.code, Some(0), "kubectl {args:?}: {}", out.stderr_str());
        out.stdout_str()
    }

    /// One object, or None when it does not exist.
    pub fn get(&self, ns: &str, what: &str) -> Option<Value> {
        let out = self.kubectl(&["-n", ns, "get", what, "-o", "json"], None);
        if out.code != Some(0) && out.stderr_str().contains("NotFound") {
            return None;
        }
        assert_eq!(out.code, Some(0), "get {what}: {}", out.stderr_str());
        Some(serde_json::from_slice(&out.stdout).expect("kubectl's JSON"))
    }

    /// The items of a list by label.
    pub fn list(&self, ns: &str, kind: &str, selector: &str) -> Vec<Value> {
        let text = self.ok(&["-n", ns, "get", kind, "-l", selector, "-o", "json"], None);
        let v: Value = serde_json::from_str(&text).expect("kubectl's JSON");
        v["items"].as_array().cloned().unwrap_or_default()
    }

    /// Appends one line to the file kwok's `ClusterLogs` and
    /// `ClusterAttach` serve for every pod, in the CRI format kwok reads.
    pub fn pod_log_line(&self, text: &str) {
        let now = kubegate::kube::time::rfc3339_nanos(SystemTime::now());
        let mut f = std::fs::OpenOptions::new()
            .append(true)
            .open(&self.pod_log)
            .expect("open kwok's pod log");
        f.write_all(format!("{now} stdout F {text}\n").as_bytes())
            .expect("append to kwok's pod log");
    }
}

/// The plane, or None after saying on stderr why test `tag` is skipped
/// (a panic instead under `KUBEGATE_REAL_REQUIRED=1`).
pub fn plane_or_skip(tag: &str) -> Option<Plane> {
    match Plane::from_env(tag) {
        Ok(p) => Some(p),
        Err(why) if std::env::var("KUBEGATE_REAL_REQUIRED").as_deref() == Ok("1") => {
            panic!("the real control plane is required here: {why}")
        }
        Err(why) => {
            eprintln!("{tag}: skipped: {why}");
            None
        }
    }
}

/// The plane with its sim node, or None after saying on stderr why test
/// `tag` is skipped. Under `KUBEGATE_REAL_REQUIRED=1` a missing plane or
/// sim node fails instead, unless the plane says it was started without
/// one on purpose (`KUBEGATE_REAL_SIM_NODE` set and empty), as
/// `common::backend::on_sim_node` does.
pub fn plane_with_sim_node_or_skip(tag: &str) -> Option<Plane> {
    let why = match Plane::from_env(tag) {
        Ok(p) if p.sim_node.is_some() => return Some(p),
        Ok(_) => NO_SIM_NODE.to_string(),
        Err(why) => why,
    };
    skip_without_sim_node(tag, &why);
    None
}

pub const NO_SIM_NODE: &str = "KUBEGATE_REAL_SIM_NODE is empty or unset: no sim node in this \
                               run (docs/control-plane.md#the-sim-node)";

/// Says on stderr that `what` is skipped for want of the sim node, and
/// why; under `KUBEGATE_REAL_REQUIRED=1` panics instead, unless the plane
/// says it was started without one on purpose (`KUBEGATE_REAL_SIM_NODE`
/// set and empty), as `common::backend::on_sim_node` does.
pub fn skip_without_sim_node(what: &str, why: &str) {
    if std::env::var("KUBEGATE_REAL_REQUIRED").as_deref() == Ok("1")
        && std::env::var_os("KUBEGATE_REAL_SIM_NODE").is_none_or(|v| !v.is_empty())
    {
        panic!("the real control plane's sim node is required here ({what}): {why}");
    }
    eprintln!("{what}: skipped: {why}");
}

/// This test's namespaces on the plane, and what it made outside them;
/// removed on drop (best effort: the plane lives for one run).
pub struct Namespaces<'a> {
    pub plane: &'a Plane,
    pub session: String,
    pub workspace: String,
    pub gateway: String,
    /// The principals' project of rbac_real's phase 4 (impersonation),
    /// its pods on the sim node; empty unless asked for.
    pub identity: String,
    /// A second project of phase 4, where the developers' group may look
    /// but not exec, its pods on the sim node; empty unless asked for.
    pub denied: String,
}

/// What [`Namespaces::create`] makes besides the file's three.
#[derive(Clone, Copy, Default)]
pub struct NsOptions {
    /// The `identity` and `denied` namespaces too, both sending their
    /// pods to the sim node.
    pub identity: bool,
    /// The session and workspace namespaces send their pods to the sim
    /// node (`common::backend::sim_node_annotations`).
    pub on_sim_node: bool,
}

impl NsOptions {
    /// The file's three namespaces, pods on the sim node.
    pub fn on_sim_node() -> NsOptions {
        NsOptions {
            on_sim_node: true,
            ..NsOptions::default()
        }
    }
}

impl<'a> Namespaces<'a> {
    /// `t-TAG-PID-{s,w,g[,i,d]}`.
    pub fn create(plane: &'a Plane, tag: &str, opts: NsOptions) -> Namespaces<'a> {
        let base = format!("t-{tag}-{}", std::process::id());
        let phase4 = |suffix: &str| {
            if opts.identity {
                format!("{base}-{suffix}")
            } else {
                String::new()
            }
        };
        let ns = Namespaces {
            plane,
            session: format!("{base}-s"),
            workspace: format!("{base}-w"),
            gateway: format!("{base}-g"),
            identity: phase4("i"),
            denied: phase4("d"),
        };
        let on_sim_node = |n: &String| {
            (opts.on_sim_node && (*n == ns.session || *n == ns.workspace))
                || *n == ns.identity
                || *n == ns.denied
        };
        for n in ns.all() {
            let mut meta = json!({"name": n, "labels": {"kubegate.dev/test": "true"}});
            if on_sim_node(n) {
                meta["annotations"] = json!(super::backend::sim_node_annotations());
            }
            let obj = json!({"apiVersion": "v1", "kind": "Namespace", "metadata": meta});
            plane.ok(&["create", "-f", "-"], Some(obj.to_string().as_bytes()));
        }
        // Pods are refused until the controller-manager made the
        // namespace's `default` ServiceAccount (403 `error looking up
        // service account`): wait, so that no 403 comes from that.
        for n in ns.all().filter(|n| **n != ns.gateway) {
            wait_for(&format!("ServiceAccount {n}/default"), WAIT, || {
                plane.get(n, "serviceaccount/default").map(|_| ())
            });
        }
        ns
    }

    /// The file's namespace -> this test's.
    pub fn map(&self) -> [(&'static str, &str); 3] {
        [
            (FILE_SESSION_NS, self.session.as_str()),
            (FILE_WORKSPACE_NS, self.workspace.as_str()),
            (FILE_GATEWAY_NS, self.gateway.as_str()),
        ]
    }

    /// This test's namespace -> the file's (for reading grants).
    pub fn file_ns(&self, ns: &str) -> String {
        self.map()
            .iter()
            .find(|(_, ours)| *ours == ns)
            .map_or(ns, |(file, _)| file)
            .to_string()
    }

    /// Every namespace made.
    pub fn all(&self) -> impl Iterator<Item = &String> {
        [
            &self.session,
            &self.workspace,
            &self.gateway,
            &self.identity,
            &self.denied,
        ]
        .into_iter()
        .filter(|n| !n.is_empty())
    }

    /// The daemon's identity as the API server names it.
    pub fn user(&self) -> String {
        format!("system:serviceaccount:{}:{SA}", self.session)
    }
}

impl Drop for Namespaces<'_> {
    fn drop(&mut self) {
        for n in self.all() {
            let _ = self
                .plane
                .kubectl(&["delete", "namespace", n, "--wait=false"], None);
        }
        // rbac.yaml's and rbac-impersonation.yaml's cluster-scoped objects.
        for what in [
            "clusterrole/kubegate-exec",
            "clusterrole/kubegate-impersonate",
            "clusterrolebinding/kubegate-impersonate",
            "clusterrole/kubegate-developer",
        ] {
            let _ = self
                .plane
                .kubectl(&["delete", what, "--ignore-not-found"], None);
        }
    }
}

/// Applies scripts/rbac.yaml with its namespaces moved to this test's,
/// and returns a bearer token of its ServiceAccount (TokenRequest, as the
/// admin).
pub fn apply_rbac(plane: &Plane, ns: &Namespaces) -> String {
    let text = std::fs::read_to_string(RBAC).expect("read scripts/rbac.yaml");
    let items = adapted(&documents(&text), &ns.map());
    let list = json!({"apiVersion": "v1", "kind": "List", "items": items});
    plane.ok(&["apply", "-f", "-"], Some(list.to_string().as_bytes()));
    let req = json!({"apiVersion": "authentication.k8s.io/v1", "kind": "TokenRequest",
                     "spec": {"expirationSeconds": 3600}});
    let path = format!(
        "/api/v1/namespaces/{}/serviceaccounts/{SA}/token",
        ns.session
    );
    let out = plane.ok(
        &["create", "--raw", &path, "-f", "-"],
        Some(req.to_string().as_bytes()),
    );
    let v: Value = serde_json::from_str(&out).expect("a TokenRequest");
    v["status"]["token"]
        .as_str()
        .expect("status.token")
        .to_string()
}

/// A kubeconfig of the ServiceAccount's token and the plane's CA.
pub fn write_kubeconfig(plane: &Plane, token: &str, dir: &Path) -> PathBuf {
    let path = dir.join("kubegate.kubeconfig");
    let text = format!(
        "apiVersion: v1\nkind: Config\nclusters:\n- name: real\n  cluster:\n    server: {}\n    \
         certificate-authority: {}\nusers:\n- name: {SA}\n  user:\n    token: {token}\n\
         contexts:\n- name: {SA}\n  context:\n    cluster: real\n    user: {SA}\n\
         current-context: {SA}\n",
        plane.server,
        plane.ca.display()
    );
    std::fs::write(&path, text).expect("write the daemon's kubeconfig");
    path
}

/// The exec Deployment of the workspace, ready.
pub fn create_deployment(plane: &Plane, ns: &str) {
    create_deployment_with(plane, ns, |_| {});
}

/// The exec Deployment of the workspace (`server::demo::demo_deployment`,
/// changed by `edit`), ready.
pub fn create_deployment_with(plane: &Plane, ns: &str, edit: impl FnOnce(&mut Value)) {
    let mut d = kubegate::server::demo::demo_deployment("kubegate", "kubegate.dev/workspace-uid");
    d["metadata"]["namespace"] = json!(ns);
    edit(&mut d);
    plane.ok(&["apply", "-f", "-"], Some(d.to_string().as_bytes()));
    wait_for("Deployment hello ready", WAIT, || {
        let v = plane.get(ns, "deployment/hello")?;
        (v["status"]["readyReplicas"] == 1).then_some(())
    });
}

/// The demo Deployment with a second container, `echo`: a TCP echo on
/// `$POD_IP:`[`ECHO_PORT`] ([`ECHO_PY`]), for Deployment tunnels to a
/// server the pod itself runs (the sim node's pods). Ready, and every pod
/// of it on Node `node`.
pub fn create_echo_deployment(plane: &Plane, ns: &str, node: &str) {
    create_deployment_with(plane, ns, |d| {
        let containers = d["spec"]["template"]["spec"]["containers"]
            .as_array_mut()
            .expect("containers");
        containers.push(json!({
            "name": "echo", "image": "python",
            "command": ["python3", "-c", format!("{ECHO_PY}\necho_server()\n")],
            "env": [{"name": "POD_IP", "valueFrom": {"fieldRef": {"fieldPath": "status.podIP"}}}]
        }));
    });
    deployment_pods_on(plane, ns, node);
}

/// Every pod of the demo Deployment in `ns` is bound to Node `node`.
pub fn deployment_pods_on(plane: &Plane, ns: &str, node: &str) {
    let pods = plane.list(ns, "pods", "app=hello");
    assert!(
        !pods.is_empty() && pods.iter().all(|p| p["spec"]["nodeName"] == node),
        "the Deployment's pods in {ns} run on {node}: {pods:#?}"
    );
}

/// The port of [`ECHO_PY`]'s server.
pub const ECHO_PORT: u16 = 7000;

/// A TCP echo on `$POD_IP:7000` (half-closes after the client's EOF):
/// `echo_server()` serves it.
pub const ECHO_PY: &str = r#"
import os, socket, threading
def echo(c):
    try:
        while True:
            d = c.recv(65536)
            if not d:
                break
            c.sendall(d)
        c.shutdown(socket.SHUT_WR)
    except OSError:
        pass
    finally:
        c.close()
def echo_server():
    s = socket.socket()
    s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    s.bind((os.environ["POD_IP"], 7000))
    s.listen(64)
    while True:
        c, _ = s.accept()
        threading.Thread(target=echo, args=(c,), daemon=True).start()
"#;

/// The daemon's configuration on the plane: `cluster` adds `[cluster]`
/// keys, `sessions` `[sessions]` keys, `principal` is the one
/// `[[principal]]` table's body.
pub fn config_with(
    kubeconfig: &Path,
    ns: &Namespaces,
    access: &str,
    cluster: &str,
    sessions: &str,
    principal: &str,
) -> String {
    format!(
        r#"[server]
listen = "127.0.0.1:0"
state_dir = "./state"

[cluster]
mode = "kubeconfig"
kubeconfig = "{}"
session_namespace = "{}"
base_domain = "dev.example.com"
pod_access = "{access}"
{cluster}
[sessions]
{sessions}

[[principal]]
{principal}"#,
        kubeconfig.display(),
        ns.session,
    )
}

pub fn status_of(e: &SseEvent) -> Option<&str> {
    (e.event == "status")
        .then(|| e.data["status"].as_str())
        .flatten()
}

pub fn until_status(sse: &mut SseClient, want: &str) -> Vec<SseEvent> {
    let seen = sse.until(|e| matches!(status_of(e), Some(s) if s == want || s == "failed"));
    assert_eq!(seen.last().and_then(status_of), Some(want), "{seen:#?}");
    seen
}

/// The session's pod that is not being deleted, once it is Running with an
/// IP; checks it runs on Node `node`.
pub fn running_pod(plane: &Plane, ns: &str, id: &str, node: &str) -> Value {
    let pod = wait_for("the session pod Running with an IP", WAIT, || {
        plane
            .list(ns, "pods", &format!("kubegate.dev/session-id={id}"))
            .into_iter()
            .find(|p| {
                p["metadata"]["deletionTimestamp"].is_null()
                    && p["status"]["phase"] == "Running"
                    && p["status"]["podIP"].is_string()
            })
    });
    assert_eq!(pod["spec"]["nodeName"], node, "{pod}");
    pod
}

/// The single port of a session's Service and of its Ingress rule, or
/// None for each that does not exist.
pub fn published(plane: &Plane, ns: &str, id: &str) -> (Option<Value>, Option<Value>) {
    let name = format!("kubegate-run-{id}");
    (
        plane.get(ns, &format!("service/{name}")),
        plane.get(ns, &format!("ingress/{name}")),
    )
}

pub fn service_port(s: &Value) -> &Value {
    &s["spec"]["ports"][0]["port"]
}

pub fn ingress_port(i: &Value) -> &Value {
    &i["spec"]["rules"][0]["http"]["paths"][0]["backend"]["service"]["port"]["number"]
}

/// Waits until the Service and the Ingress both route `port` (or, with
/// None, are both gone); returns them.
pub fn wait_published(plane: &Plane, ns: &str, id: &str, port: Option<u16>) -> (Value, Value) {
    wait_for(
        &format!("Service and Ingress at {port:?}"),
        WAIT,
        || match (published(plane, ns, id), port) {
            ((None, None), None) => Some((Value::Null, Value::Null)),
            ((Some(s), Some(i)), Some(p)) => {
                (service_port(&s) == p && ingress_port(&i) == p).then_some((s, i))
            }
            _ => None,
        },
    )
}

/// The owner reference of an object, which must name `pod`.
pub fn owner_is(obj: &Value, pod: &Value, controller: bool) {
    let r = &obj["metadata"]["ownerReferences"][0];
    assert_eq!(r["kind"], "Pod", "{obj}");
    assert_eq!(r["uid"], pod["metadata"]["uid"], "{obj}");
    assert_eq!(
        r["controller"].as_bool().unwrap_or(false),
        controller,
        "{obj}"
    );
    assert_eq!(
        r["blockOwnerDeletion"].as_bool().unwrap_or(false),
        controller,
        "{obj}"
    );
}

pub fn gone(plane: &Plane, ns: &str, what: &str) {
    wait_for(&format!("{what} gone"), WAIT, || {
        plane.get(ns, what).is_none().then_some(())
    });
}

/// No Kubernetes refusal in any of the daemon's logs.
pub fn no_refusal_logged(d: &DaemonProc) {
    for e in std::fs::read_dir(&d.dir)
        .expect("the daemon's folder")
        .flatten()
    {
        let name = e.file_name().to_string_lossy().into_owned();
        if !(name.starts_with("daemon") && name.ends_with(".log")) {
            continue;
        }
        let text = std::fs::read_to_string(e.path()).expect("read a daemon log");
        let refused: Vec<&str> = text
            .lines()
            .filter(|l| l.to_ascii_lowercase().contains("forbidden"))
            .collect();
        assert!(refused.is_empty(), "{name}: {refused:#?}");
    }
}
