//! Who is calling the sim (docs/sim.md#identity): token-file and
//! certificate users, RBAC with upstream's Forbidden texts and bootstrap
//! roles, impersonation, `kubectl auth can-i`/`whoami`, and the audit log.
//!
//! Each scenario that the real control plane can run too runs on both
//! (`NAME_sim`, `NAME_real`; the real one says why it skipped when the run
//! has no plane, and fails under `KUBEGATE_REAL_REQUIRED=1`): the same
//! users (`alice` in `kubegate-devs`, `bob` in `kubegate-ops`, from
//! scripts/control-plane.sh's token file, which the sim's test file
//! mirrors), RBAC objects the test creates, and the same expected answers
//! (code, reason, message), read from kube-apiserver v1.36.3.

mod common;

use common::{run_with_timeout, temp_dir, wait_for, SimProc, KUBEGATE};
use serde_json::{json, Value};
use std::cell::RefCell;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

static SEQ: AtomicU64 = AtomicU64::new(0);

fn unique(tag: &str) -> String {
    format!(
        "{tag}-{}-{}",
        std::process::id(),
        SEQ.fetch_add(1, Ordering::Relaxed)
    )
}

/// A server the scenario talks to, and who may talk to it.
struct Plane {
    real: bool,
    server: String,
    ca: PathBuf,
    dir: PathBuf,
    /// Tokens by user ("admin", "alice", "bob", and on the sim "daemon").
    tokens: Vec<(&'static str, String)>,
    ns: String,
    kubectl: PathBuf,
    /// The sim (stopped on drop), for a sim plane.
    _sim: Option<SimProc>,
    audit: Option<PathBuf>,
    /// Cluster-scoped objects this scenario made (deleted on drop).
    cleanup: RefCell<Vec<String>>,
}

fn write_private(path: &Path, text: &str) {
    use std::os::unix::fs::OpenOptionsExt;
    let mut f = std::fs::OpenOptions::new()
        .create(true)
        .truncate(true)
        .write(true)
        .mode(0o600)
        .open(path)
        .expect("write a private file");
    std::io::Write::write_all(&mut f, text.as_bytes()).expect("write");
}

impl Plane {
    /// A sim with `--token-auth-file` (the real plane's users, and
    /// `kubegate-daemon`) and `--audit-log`.
    fn sim() -> Plane {
        let dir = temp_dir("simauth");
        let tok = |_: &str| kubegate::token::random_hex();
        let (alice, bob, daemon) = (tok("a"), tok("b"), tok("d"));
        let csv = dir.join("tokens.csv");
        write_private(
            &csv,
            &format!(
                "{alice},alice,uid-alice,\"kubegate-devs\"\n{bob},bob,uid-bob,\"kubegate-ops\"\n{daemon},kubegate-daemon,uid-daemon,\"kubegate:daemons\"\n"
            ),
        );
        let audit = dir.join("audit.log");
        let sim = SimProc::start(&[
            "--tls",
            "--token-auth-file",
            csv.to_str().expect("utf-8"),
            "--audit-log",
            audit.to_str().expect("utf-8"),
        ]);
        let text = std::fs::read_to_string(&sim.kubeconfig).expect("kubeconfig");
        let ca_b64 = text
            .lines()
            .find_map(|l| l.trim().strip_prefix("certificate-authority-data:"))
            .expect("the sim's CA")
            .trim()
            .to_string();
        use base64::Engine;
        let ca_pem = base64::engine::general_purpose::STANDARD
            .decode(ca_b64)
            .expect("base64");
        let ca = dir.join("ca.pem");
        std::fs::write(&ca, ca_pem).expect("write the CA");
        let admin = sim.token.clone().expect("the sim's admin token");
        let p = Plane {
            real: false,
            server: sim.url.clone(),
            ca,
            dir,
            tokens: vec![
                ("admin", admin),
                ("alice", alice),
                ("bob", bob),
                ("daemon", daemon),
            ],
            ns: unique("t-auth"),
            kubectl: "kubectl".into(),
            _sim: Some(sim),
            audit: Some(audit),
            cleanup: RefCell::new(Vec::new()),
        };
        p.create_namespace();
        p
    }

    /// The run's real control plane (scripts/control-plane.sh's env).
    fn real() -> Result<Plane, String> {
        let var = |k: &str| {
            std::env::var(k).map_err(|_| {
                format!("{k} is not set: no real control plane in this run (docs/control-plane.md)")
            })
        };
        let server = var("KUBEGATE_REAL_SERVER")?;
        let token_of = |k: &str| -> Result<String, String> {
            let path = var(k)?;
            let text = std::fs::read_to_string(&path).map_err(|e| format!("{path}: {e}"))?;
            common::kubeconfig_token(&text).ok_or(format!("{path}: no token"))
        };
        let p = Plane {
            real: true,
            server,
            ca: var("KUBEGATE_REAL_CA")?.into(),
            dir: temp_dir("simauth-real"),
            tokens: vec![
                ("admin", token_of("KUBEGATE_REAL_KUBECONFIG")?),
                ("alice", token_of("KUBEGATE_REAL_KUBECONFIG_ALICE")?),
                ("bob", token_of("KUBEGATE_REAL_KUBECONFIG_BOB")?),
            ],
            ns: unique("t-auth"),
            kubectl: var("KUBEGATE_REAL_KUBECTL")?.into(),
            _sim: None,
            // The plane's own audit log (docs/control-plane.md).
            audit: std::env::var_os("KUBEGATE_REAL_AUDIT_LOG").map(PathBuf::from),
            cleanup: RefCell::new(Vec::new()),
        };
        p.create_namespace();
        Ok(p)
    }

    fn token(&self, who: &str) -> &str {
        &self
            .tokens
            .iter()
            .find(|(n, _)| *n == who)
            .unwrap_or_else(|| panic!("no user {who}"))
            .1
    }

    /// `METHOD path` as `who`, with extra headers; (code, body as JSON or
    /// as a string). curl reads the token from a 0600 file.
    fn call(
        &self,
        who: &str,
        method: &str,
        path: &str,
        headers: &[(&str, &str)],
        body: Option<&Value>,
    ) -> (u16, Value) {
        let hfile = self.dir.join(format!("h-{who}"));
        if !hfile.exists() {
            write_private(
                &hfile,
                &format!("Authorization: Bearer {}\n", self.token(who)),
            );
        }
        let mut c = Command::new("curl");
        c.args(["-s", "-S", "-w", "\n%{http_code}", "--cacert"])
            .arg(&self.ca)
            .args(["-X", method, "-H"])
            .arg(format!("@{}", hfile.display()));
        for (k, v) in headers {
            c.arg("-H").arg(format!("{k}: {v}"));
        }
        let data = body.map(|b| b.to_string());
        if data.is_some() {
            c.args([
                "-H",
                "Content-Type: application/json",
                "--data-binary",
                "@-",
            ]);
        }
        c.arg(format!("{}{path}", self.server));
        let out = run_with_timeout(
            c,
            data.as_deref().map(str::as_bytes),
            Duration::from_secs(60),
        );
        let text = out.stdout_str();
        let (body, code) = text.rsplit_once('\n').unwrap_or(("", &text));
        let code: u16 = code
            .trim()
            .parse()
            .unwrap_or_else(|_| panic!("curl {method} {path}: no status ({})", out.stderr_str()));
        let v = serde_json::from_str(body).unwrap_or_else(|_| Value::String(body.to_string()));
        (code, v)
    }

    fn ok(&self, who: &str, method: &str, path: &str, body: &Value) -> Value {
        let (code, v) = self.call(who, method, path, &[], Some(body));
        assert!(
            (200..300).contains(&code),
            "{method} {path} as {who}: {code} {v}"
        );
        v
    }

    fn create_namespace(&self) {
        self.ok(
            "admin",
            "POST",
            "/api/v1/namespaces",
            &json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": self.ns}}),
        );
    }

    /// Creates a cluster-scoped RBAC object (deleted on drop).
    fn cluster_object(&self, plural: &str, obj: Value) {
        let name = obj["metadata"]["name"].as_str().expect("name").to_string();
        let path = format!("/apis/rbac.authorization.k8s.io/v1/{plural}");
        self.ok("admin", "POST", &path, &obj);
        self.cleanup.borrow_mut().push(format!("{path}/{name}"));
    }

    fn namespaced(&self, plural: &str, obj: Value) {
        let path = format!(
            "/apis/rbac.authorization.k8s.io/v1/namespaces/{}/{plural}",
            self.ns
        );
        self.ok("admin", "POST", &path, &obj);
    }

    /// Waits until `who`'s `GET path` (with headers) answers `code`: RBAC
    /// changes reach the real server's authorizer through its informers.
    fn until(&self, who: &str, path: &str, headers: &[(&str, &str)], code: u16) -> Value {
        wait_for(
            &format!("{path} as {who} to answer {code}"),
            Duration::from_secs(30),
            || {
                let (c, v) = self.call(who, "GET", path, headers, None);
                (c == code).then_some(v)
            },
        )
    }

    /// A kubeconfig for `who` (0600), for kubectl.
    fn kubeconfig(&self, who: &str) -> PathBuf {
        let path = self.dir.join(format!("{who}.kubeconfig"));
        write_private(
            &path,
            &format!(
                "apiVersion: v1\nkind: Config\nclusters:\n- name: c\n  cluster:\n    server: {}\n    certificate-authority: {}\nusers:\n- name: u\n  user:\n    token: {}\ncontexts:\n- name: x\n  context:\n    cluster: c\n    user: u\n    namespace: {}\ncurrent-context: x\n",
                self.server,
                self.ca.display(),
                self.token(who),
                self.ns
            ),
        );
        path
    }

    fn kubectl(&self, who: &str, args: &[&str]) -> common::Output {
        let mut c = Command::new(&self.kubectl);
        c.arg("--kubeconfig")
            .arg(self.kubeconfig(who))
            .arg("--cache-dir")
            .arg(self.dir.join("kube-cache"))
            .arg("--request-timeout=60s")
            .args(args);
        run_with_timeout(c, None, Duration::from_secs(60))
    }
}

impl Drop for Plane {
    fn drop(&mut self) {
        for path in self.cleanup.borrow().iter() {
            let _ = self.call("admin", "DELETE", path, &[], None);
        }
        if self.real {
            let _ = self.call(
                "admin",
                "DELETE",
                &format!("/api/v1/namespaces/{}", self.ns),
                &[],
                None,
            );
        }
    }
}

/// `NAME_sim` and `NAME_real`, each under a watchdog.
macro_rules! both {
    ($($name:ident),* $(,)?) => {$(
        mod $name {
            #[test]
            fn sim() {
                let _w = super::common::bench::watchdog(stringify!($name), 240);
                super::$name(&super::Plane::sim());
            }
            #[test]
            fn real() {
                let _w = super::common::bench::watchdog(stringify!($name), 240);
                match super::Plane::real() {
                    Ok(p) => super::$name(&p),
                    Err(why) if std::env::var("KUBEGATE_REAL_REQUIRED").as_deref() == Ok("1") => {
                        panic!("the real control plane is required here: {why}")
                    }
                    Err(why) => eprintln!("{}: real backend skipped: {why}", stringify!($name)),
                }
            }
        }
    )*};
}

both!(
    forbidden_answers_as_upstream,
    a_fresh_user_gets_discovery_and_self_reviews_only,
    kubectl_can_i_and_whoami_answer_as_the_caller,
    impersonation_allowed_and_refused,
);

fn assert_forbidden(got: &(u16, Value), message: &str) {
    assert_eq!(got.0, 403, "{}", got.1);
    assert_eq!(got.1["reason"], "Forbidden", "{}", got.1);
    assert_eq!(got.1["message"], message, "{}", got.1);
}

fn role(name: &str, rules: Value) -> Value {
    json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "Role",
           "metadata": {"name": name}, "rules": rules})
}

fn binding(kind: &str, name: &str, role_kind: &str, role: &str, subjects: Value) -> Value {
    json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": kind,
           "metadata": {"name": name},
           "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": role_kind, "name": role},
           "subjects": subjects})
}

fn user(name: &str) -> Value {
    json!([{"apiGroup": "rbac.authorization.k8s.io", "kind": "User", "name": name}])
}

/// A narrowly bound user meets upstream's Forbidden texts: resource,
/// subresource, cluster scope, non-resource, deletecollection, a binding
/// to a missing role, and the `create` a WebSocket exec needs (1.35+).
fn forbidden_answers_as_upstream(p: &Plane) {
    let ns = &p.ns;
    let got = p.call(
        "alice",
        "GET",
        &format!("/api/v1/namespaces/{ns}/pods/x"),
        &[],
        None,
    );
    assert_forbidden(
        &got,
        &format!("pods \"x\" is forbidden: User \"alice\" cannot get resource \"pods\" in API group \"\" in the namespace \"{ns}\""),
    );
    assert_eq!(got.1["details"], json!({"name": "x", "kind": "pods"}));
    let got = p.call("alice", "GET", "/apis/apps/v1/deployments", &[], None);
    assert_forbidden(&got, "deployments.apps is forbidden: User \"alice\" cannot list resource \"deployments\" in API group \"apps\" at the cluster scope");
    assert_eq!(
        got.1["details"],
        json!({"group": "apps", "kind": "deployments"})
    );
    assert_forbidden(
        &p.call("alice", "GET", &format!("/api/v1/namespaces/{ns}/pods/x/log"), &[], None),
        &format!("pods \"x\" is forbidden: User \"alice\" cannot get resource \"pods/log\" in API group \"\" in the namespace \"{ns}\""),
    );
    assert_forbidden(
        &p.call("alice", "GET", "/metrics", &[], None),
        "forbidden: User \"alice\" cannot get path \"/metrics\"",
    );
    assert_forbidden(
        &p.call("alice", "DELETE", &format!("/api/v1/namespaces/{ns}/configmaps"), &[], None),
        &format!("configmaps is forbidden: User \"alice\" cannot deletecollection resource \"configmaps\" in API group \"\" in the namespace \"{ns}\""),
    );

    p.namespaced(
        "roles",
        role(
            "read-pods",
            json!([{"apiGroups": [""], "resources": ["pods"], "verbs": ["get", "list"]},
                   {"apiGroups": [""], "resources": ["pods/exec"], "verbs": ["get"]}]),
        ),
    );
    p.namespaced(
        "rolebindings",
        binding(
            "RoleBinding",
            "alice-reads",
            "Role",
            "read-pods",
            user("alice"),
        ),
    );
    p.until("alice", &format!("/api/v1/namespaces/{ns}/pods"), &[], 200);
    assert_forbidden(
        &p.call("alice", "GET", &format!("/api/v1/namespaces/{ns}/configmaps"), &[], None),
        &format!("configmaps is forbidden: User \"alice\" cannot list resource \"configmaps\" in API group \"\" in the namespace \"{ns}\""),
    );
    assert_forbidden(
        &p.call("alice", "POST", &format!("/api/v1/namespaces/{ns}/pods/x/exec?command=true"), &[], None),
        &format!("pods \"x\" is forbidden: User \"alice\" cannot create resource \"pods/exec\" in API group \"\" in the namespace \"{ns}\""),
    );
    // A WebSocket exec is a GET: `get` is checked first, then `create`
    // (1.35+), whose refusal in the pod registry carries no reason.
    let ws = [
        ("Connection", "Upgrade"),
        ("Upgrade", "websocket"),
        ("Sec-WebSocket-Version", "13"),
        ("Sec-WebSocket-Key", "dGhlIHNhbXBsZSBub25jZQ=="),
        ("Sec-WebSocket-Protocol", "v5.channel.k8s.io"),
    ];
    assert_forbidden(
        &p.call(
            "alice",
            "GET",
            &format!("/api/v1/namespaces/{ns}/pods/x/exec?command=true&stdout=true"),
            &ws,
            None,
        ),
        "pods \"x\" is forbidden: ",
    );

    // A binding whose role is missing: its error is the reason.
    p.namespaced(
        "rolebindings",
        binding(
            "RoleBinding",
            "alice-missing",
            "Role",
            "nope",
            user("alice"),
        ),
    );
    let want = format!("secrets is forbidden: User \"alice\" cannot list resource \"secrets\" in API group \"\" in the namespace \"{ns}\": RBAC: role.rbac.authorization.k8s.io \"nope\" not found");
    let got = wait_for("the missing role to show", Duration::from_secs(30), || {
        let got = p.call(
            "alice",
            "GET",
            &format!("/api/v1/namespaces/{ns}/secrets"),
            &[],
            None,
        );
        (got.1["message"] == want.as_str()).then_some(got)
    });
    assert_forbidden(&got, &want);
}

fn review(p: &Plane, who: &str, attrs: Value, headers: &[(&str, &str)]) -> Value {
    let (code, v) = p.call(
        who,
        "POST",
        "/apis/authorization.k8s.io/v1/selfsubjectaccessreviews",
        headers,
        Some(&json!({"apiVersion": "authorization.k8s.io/v1", "kind": "SelfSubjectAccessReview", "spec": attrs})),
    );
    assert_eq!(code, 201, "{v}");
    v["status"].clone()
}

fn whoami(p: &Plane, who: &str, headers: &[(&str, &str)]) -> (u16, Value) {
    p.call(
        who,
        "POST",
        "/apis/authentication.k8s.io/v1/selfsubjectreviews",
        headers,
        Some(&json!({"apiVersion": "authentication.k8s.io/v1", "kind": "SelfSubjectReview"})),
    )
}

/// The bootstrap roles: `/version`, health, discovery and the self
/// reviews for any authenticated user, nothing else.
fn a_fresh_user_gets_discovery_and_self_reviews_only(p: &Plane) {
    for path in [
        "/version",
        "/healthz",
        "/livez",
        "/readyz",
        "/api",
        "/apis",
        "/api/v1",
        "/apis/apps/v1",
        "/openapi/v3",
    ] {
        let (code, v) = p.call("bob", "GET", path, &[], None);
        assert_eq!(code, 200, "{path}: {v}");
    }
    let (code, v) = whoami(p, "bob", &[]);
    assert_eq!(code, 201, "{v}");
    assert_eq!(
        v["status"]["userInfo"],
        json!({"username": "bob", "uid": "uid-bob", "groups": ["kubegate-ops", "system:authenticated"]})
    );
    let ns = &p.ns;
    assert_eq!(
        review(
            p,
            "bob",
            json!({"resourceAttributes": {"verb": "list", "resource": "pods", "namespace": ns}}),
            &[]
        ),
        json!({"allowed": false})
    );
    assert_eq!(
        review(
            p,
            "bob",
            json!({"resourceAttributes": {"verb": "create", "group": "authentication.k8s.io", "resource": "selfsubjectreviews"}}),
            &[]
        ),
        json!({"allowed": true, "reason": "RBAC: allowed by ClusterRoleBinding \"system:basic-user\" of ClusterRole \"system:basic-user\" to Group \"system:authenticated\""})
    );
    assert_eq!(
        review(
            p,
            "bob",
            json!({"nonResourceAttributes": {"verb": "get", "path": "/version"}}),
            &[]
        )["allowed"],
        true
    );
    assert_forbidden(
        &p.call("bob", "GET", "/api/v1/namespaces", &[], None),
        "namespaces is forbidden: User \"bob\" cannot list resource \"namespaces\" in API group \"\" at the cluster scope",
    );
    assert_forbidden(
        &p.call("bob", "GET", &format!("/api/v1/namespaces/{ns}"), &[], None),
        &format!("namespaces \"{ns}\" is forbidden: User \"bob\" cannot get resource \"namespaces\" in API group \"\" in the namespace \"{ns}\""),
    );
    assert_forbidden(
        &p.call("bob", "GET", "/apis/rbac.authorization.k8s.io/v1/clusterroles", &[], None),
        "clusterroles.rbac.authorization.k8s.io is forbidden: User \"bob\" cannot list resource \"clusterroles\" in API group \"rbac.authorization.k8s.io\" at the cluster scope",
    );
    // Without a credential: the sim says 401; the real server, anonymous
    // auth on by default, refuses system:anonymous with 403.
    let mut c = Command::new("curl");
    c.args(["-s", "-o", "/dev/null", "-w", "%{http_code}", "--cacert"])
        .arg(&p.ca)
        .arg(format!("{}/api/v1/namespaces", p.server));
    let want = if p.real { "403" } else { "401" };
    assert_eq!(
        run_with_timeout(c, None, Duration::from_secs(30)).stdout_str(),
        want
    );
}

/// `kubectl auth can-i` and `auth whoami`, as the caller and with `--as`.
fn kubectl_can_i_and_whoami_answer_as_the_caller(p: &Plane) {
    let out = p.kubectl("alice", &["auth", "can-i", "list", "secrets"]);
    assert_eq!(out.stdout_str().trim(), "no", "{}", out.stderr_str());
    assert_eq!(out.code, Some(1));
    p.namespaced(
        "roles",
        role(
            "read-secrets",
            json!([{"apiGroups": [""], "resources": ["secrets"], "verbs": ["list"]}]),
        ),
    );
    p.namespaced(
        "rolebindings",
        binding(
            "RoleBinding",
            "alice-secrets",
            "Role",
            "read-secrets",
            user("alice"),
        ),
    );
    wait_for("can-i to say yes", Duration::from_secs(30), || {
        let out = p.kubectl("alice", &["auth", "can-i", "list", "secrets"]);
        (out.code == Some(0) && out.stdout_str().trim() == "yes").then_some(())
    });
    let out = p.kubectl("alice", &["auth", "can-i", "delete", "secrets"]);
    assert_eq!(out.stdout_str().trim(), "no");
    let out = p.kubectl("alice", &["auth", "whoami", "-o", "json"]);
    assert_eq!(out.code, Some(0), "{}", out.stderr_str());
    let v: Value = serde_json::from_str(&out.stdout_str()).expect("whoami json");
    assert_eq!(v["status"]["userInfo"]["username"], "alice");
    assert_eq!(
        v["status"]["userInfo"]["groups"],
        json!(["kubegate-devs", "system:authenticated"])
    );
    // The admin impersonates (system:masters may).
    let out = p.kubectl(
        "admin",
        &[
            "auth",
            "whoami",
            "-o",
            "json",
            "--as",
            "bob",
            "--as-group",
            "team-x",
        ],
    );
    assert_eq!(out.code, Some(0), "{}", out.stderr_str());
    let v: Value = serde_json::from_str(&out.stdout_str()).expect("whoami json");
    assert_eq!(
        v["status"]["userInfo"],
        json!({"username": "bob", "groups": ["team-x", "system:authenticated"]})
    );
    let out = p.kubectl(
        "admin",
        &["auth", "can-i", "list", "secrets", "--as", "alice"],
    );
    assert_eq!(out.stdout_str().trim(), "yes");
}

/// Impersonation as kube-apiserver 1.36 does it: constrained
/// impersonation first (`impersonate-on:user-info:VERB`), legacy
/// `impersonate` on users/groups/uids behind it, resourceNames honoured,
/// groups without a user a 400.
fn impersonation_allowed_and_refused(p: &Plane) {
    let ns = &p.ns;
    let pods = format!("/api/v1/namespaces/{ns}/pods");
    refusals_of_a_requestor_that_never_impersonated(p, &pods);

    // alice may impersonate carol (resourceNames) and the group kubegate-devs.
    let tag = unique("imp");
    p.cluster_object(
        "clusterroles",
        json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole",
               "metadata": {"name": tag},
               "rules": [{"apiGroups": [""], "resources": ["users"], "verbs": ["impersonate"], "resourceNames": ["carol"]},
                         {"apiGroups": [""], "resources": ["groups"], "verbs": ["impersonate"], "resourceNames": ["kubegate-devs"]}]}),
    );
    p.cluster_object(
        "clusterrolebindings",
        binding(
            "ClusterRoleBinding",
            &tag,
            "ClusterRole",
            &tag,
            user("alice"),
        ),
    );
    let review_path = "/apis/authentication.k8s.io/v1/selfsubjectreviews";
    wait_for(
        "alice to impersonate carol",
        Duration::from_secs(30),
        || (whoami(p, "alice", &[("Impersonate-User", "carol")]).0 == 201).then_some(()),
    );
    let (_, v) = whoami(
        p,
        "alice",
        &[
            ("Impersonate-User", "carol"),
            ("Impersonate-Group", "kubegate-devs"),
        ],
    );
    assert_eq!(
        v["status"]["userInfo"],
        json!({"username": "carol", "groups": ["kubegate-devs", "system:authenticated"]}),
        "{review_path}"
    );
    // The request is authorized as carol.
    assert_forbidden(
        &p.call("alice", "GET", &pods, &[("Impersonate-User", "carol")], None),
        &format!("pods is forbidden: User \"carol\" cannot list resource \"pods\" in API group \"\" in the namespace \"{ns}\""),
    );
    // Legacy worked last for alice, so its refusals come first now.
    assert_forbidden(
        &p.call("alice", "GET", &pods, &[("Impersonate-User", "dave")], None),
        "users \"dave\" is forbidden: User \"alice\" cannot impersonate resource \"users\" in API group \"\" at the cluster scope",
    );
    assert_forbidden(
        &p.call("alice", "GET", &pods, &[("Impersonate-User", "carol"), ("Impersonate-Group", "kubegate-ops")], None),
        "groups \"kubegate-ops\" is forbidden: User \"alice\" cannot impersonate resource \"groups\" in API group \"\" at the cluster scope",
    );
    assert_forbidden(
        &p.call("alice", "GET", &pods, &[("Impersonate-User", "carol"), ("Impersonate-Uid", "9")], None),
        "uids.authentication.k8s.io \"9\" is forbidden: User \"alice\" cannot impersonate resource \"uids\" in API group \"authentication.k8s.io\" at the cluster scope",
    );
    assert_forbidden(
        &p.call("alice", "GET", &pods, &[("Impersonate-User", "carol"), ("Impersonate-Extra-Team", "a")], None),
        "userextras.authentication.k8s.io \"a\" is forbidden: User \"alice\" cannot impersonate resource \"userextras/team\" in API group \"authentication.k8s.io\" at the cluster scope",
    );
    assert_forbidden(
        &p.call("alice", "GET", "/version", &[("Impersonate-User", "system:serviceaccount:default:default")], None),
        "serviceaccounts \"default\" is forbidden: User \"alice\" cannot impersonate resource \"serviceaccounts\" in API group \"\" in the namespace \"default\"",
    );

    audit_lines_name_caller_and_principal(p, &pods);
}

/// bob's refusals: upstream's first mode for each kind of user.
fn refusals_of_a_requestor_that_never_impersonated(p: &Plane, pods: &str) {
    let ns = &p.ns;
    // bob never impersonates successfully (no test of this suite lets
    // him; the real server remembers per requestor which mode last
    // worked): the first mode tried is user-info, and its refusal is the
    // answer.
    assert_forbidden(
        &p.call("bob", "GET", pods, &[("Impersonate-User", "carol")], None),
        &format!("pods is forbidden: User \"bob\" cannot impersonate-on:user-info:list resource \"pods\" in API group \"\" in the namespace \"{ns}\""),
    );
    // Each mode names itself: a service account, a node, a non-resource
    // path, a subresource.
    assert_forbidden(
        &p.call("bob", "GET", pods, &[("Impersonate-User", "system:serviceaccount:default:default")], None),
        &format!("pods is forbidden: User \"bob\" cannot impersonate-on:serviceaccount:list resource \"pods\" in API group \"\" in the namespace \"{ns}\""),
    );
    assert_forbidden(
        &p.call("bob", "GET", &format!("{pods}?watch=1"), &[("Impersonate-User", "system:node:n1")], None),
        &format!("pods is forbidden: User \"bob\" cannot impersonate-on:arbitrary-node:watch resource \"pods\" in API group \"\" in the namespace \"{ns}\""),
    );
    assert_forbidden(
        &p.call(
            "bob",
            "GET",
            "/version",
            &[("Impersonate-User", "carol")],
            None,
        ),
        "forbidden: User \"bob\" cannot impersonate-on:user-info:get path \"/version\"",
    );
    assert_forbidden(
        &p.call("bob", "GET", &format!("/apis/apps/v1/namespaces/{ns}/deployments/x/scale"), &[("Impersonate-User", "carol")], None),
        &format!("deployments.apps \"x\" is forbidden: User \"bob\" cannot impersonate-on:user-info:get resource \"deployments/scale\" in API group \"apps\" in the namespace \"{ns}\""),
    );
    let (code, v) = p.call(
        "bob",
        "GET",
        "/api/v1/pods",
        &[
            ("Impersonate-Extra-Foo", "a"),
            ("Impersonate-Extra-Bar", "b"),
        ],
        None,
    );
    assert_eq!(code, 400, "{v}");
    assert_eq!(
        v["message"],
        "requested &user.DefaultInfo{Name:\"\", UID:\"\", Groups:[]string(nil), Extra:map[string][]string{\"bar\":[]string{\"b\"}, \"foo\":[]string{\"a\"}}} without impersonating a user name"
    );
    let (code, v) = p.call(
        "bob",
        "GET",
        pods,
        &[("Impersonate-Group", "g"), ("Impersonate-Uid", "7")],
        None,
    );
    assert_eq!(code, 400, "{v}");
    assert_eq!(v["reason"], "BadRequest");
    assert_eq!(
        v["message"],
        "requested &user.DefaultInfo{Name:\"\", UID:\"7\", Groups:[]string{\"g\"}, Extra:map[string][]string(nil)} without impersonating a user name"
    );
}

/// Two impersonated requests (alice as carol), read back from the audit
/// log: the sim's (`--audit-log`) or the plane's (`KUBEGATE_REAL_AUDIT_LOG`).
fn audit_lines_name_caller_and_principal(p: &Plane, pods: &str) {
    let ns = &p.ns;
    // The audit lines of an impersonated request: the caller as `user`,
    // the impersonated user as `impersonatedUser`, on either backend.
    let ua = unique("sim-auth-audit");
    let h = [
        ("Impersonate-User", "carol"),
        ("Impersonate-Group", "kubegate-devs"),
        ("User-Agent", ua.as_str()),
    ];
    assert_eq!(whoami(p, "alice", &h).0, 201);
    assert_eq!(
        p.call("alice", "GET", &format!("{pods}/x"), &h, None).0,
        403
    );
    let audit = p.audit.clone().expect("an audit log");
    let lines: Vec<Value> = wait_for("the audit lines", Duration::from_secs(30), || {
        let text = std::fs::read_to_string(&audit).ok()?;
        let l: Vec<Value> = text
            .lines()
            .filter(|l| l.contains(ua.as_str()))
            .filter_map(|l| serde_json::from_str(l).ok())
            .collect();
        (l.len() == 2).then_some(l)
    });
    let alice = json!({"username": "alice", "uid": "uid-alice", "groups": ["kubegate-devs", "system:authenticated"]});
    let carol = json!({"username": "carol", "groups": ["kubegate-devs", "system:authenticated"]});
    for l in &lines {
        assert_eq!(l["user"], alice, "{l}");
        assert_eq!(l["impersonatedUser"], carol, "{l}");
        assert_eq!(l["level"], "Metadata");
        assert_eq!(l["stage"], "ResponseComplete");
        assert_eq!(l["sourceIPs"], json!(["127.0.0.1"]));
    }
    assert_eq!(lines[0]["verb"], "create");
    assert_eq!(
        lines[0]["objectRef"],
        json!({"resource": "selfsubjectreviews", "apiGroup": "authentication.k8s.io", "apiVersion": "v1"})
    );
    assert_eq!(
        lines[0]["responseStatus"],
        json!({"metadata": {}, "code": 201})
    );
    assert_eq!(
        lines[0]["annotations"],
        json!({"authorization.k8s.io/decision": "allow",
               "authorization.k8s.io/reason": "RBAC: allowed by ClusterRoleBinding \"system:basic-user\" of ClusterRole \"system:basic-user\" to Group \"system:authenticated\""})
    );
    assert_eq!(lines[1]["verb"], "get");
    assert_eq!(
        lines[1]["objectRef"],
        json!({"resource": "pods", "namespace": ns, "name": "x", "apiVersion": "v1"})
    );
    assert_eq!(
        lines[1]["responseStatus"],
        json!({"metadata": {}, "status": "Failure", "reason": "Forbidden", "code": 403,
               "message": format!("pods \"x\" is forbidden: User \"carol\" cannot get resource \"pods\" in API group \"\" in the namespace \"{ns}\""),
               "details": {"name": "x", "kind": "pods"}})
    );
    assert_eq!(
        lines[1]["annotations"],
        json!({"authorization.k8s.io/decision": "forbid", "authorization.k8s.io/reason": ""})
    );
}

/// A bad token file refuses to start, naming the line.
#[test]
fn a_bad_token_file_is_refused_with_its_line() {
    let _w = common::bench::watchdog("a_bad_token_file", 60);
    let dir = temp_dir("simauth-bad");
    let csv = dir.join("tokens.csv");
    write_private(&csv, "t1,alice,uid-a\nt2,bob\n");
    let mut c = Command::new(KUBEGATE);
    c.args(["sim", "--token-auth-file"])
        .arg(&csv)
        .arg("--kubeconfig-out")
        .arg(dir.join("kc"));
    let out = run_with_timeout(c, None, Duration::from_secs(30));
    assert_eq!(out.code, Some(2), "{}", out.stderr_str());
    assert!(
        out.stderr_str()
            .contains("line 2: a record must have at least 3 columns"),
        "{}",
        out.stderr_str()
    );
    assert!(!out.stderr_str().contains("t1"), "a token was printed");
}

/// Client certificates from `--client-ca-file`: CN the user, each O a group.
#[test]
fn certificate_users_are_their_subject() {
    let _w = common::bench::watchdog("certificate_users", 120);
    use rcgen::{BasicConstraints, CertificateParams, CertifiedIssuer, DnType, IsCa, KeyPair};
    let dir = temp_dir("simauth-cert");
    let mut ca = CertificateParams::new(Vec::<String>::new()).expect("params");
    ca.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    ca.distinguished_name.push(DnType::CommonName, "test-ca");
    let ca = CertifiedIssuer::self_signed(ca, KeyPair::generate().expect("key")).expect("ca");
    let mut leaf = CertificateParams::new(Vec::<String>::new()).expect("params");
    leaf.distinguished_name.push(DnType::CommonName, "erin");
    leaf.distinguished_name
        .push(DnType::OrganizationName, "kubegate-devs");
    let key = KeyPair::generate().expect("key");
    let cert = leaf.signed_by(&key, &ca).expect("leaf");
    std::fs::write(dir.join("ca.pem"), ca.pem()).expect("write");
    std::fs::write(dir.join("erin.pem"), cert.pem()).expect("write");
    write_private(&dir.join("erin.key"), &key.serialize_pem());
    let sim = SimProc::start(&[
        "--tls",
        "--client-ca-file",
        dir.join("ca.pem").to_str().expect("utf-8"),
    ]);
    let text = std::fs::read_to_string(&sim.kubeconfig).expect("kubeconfig");
    let ca_b64 = text
        .lines()
        .find_map(|l| l.trim().strip_prefix("certificate-authority-data:"))
        .expect("CA")
        .trim()
        .to_string();
    use base64::Engine;
    std::fs::write(
        dir.join("server-ca.pem"),
        base64::engine::general_purpose::STANDARD
            .decode(ca_b64)
            .expect("b64"),
    )
    .expect("write");
    let mut c = Command::new("curl");
    c.args(["-s", "-S", "--cacert"])
        .arg(dir.join("server-ca.pem"))
        .arg("--cert")
        .arg(dir.join("erin.pem"))
        .arg("--key")
        .arg(dir.join("erin.key"))
        .args([
            "-X",
            "POST",
            "-H",
            "Content-Type: application/json",
            "--data-binary",
        ])
        .arg(r#"{"apiVersion":"authentication.k8s.io/v1","kind":"SelfSubjectReview"}"#)
        .arg(format!(
            "{}/apis/authentication.k8s.io/v1/selfsubjectreviews",
            sim.url
        ));
    let out = run_with_timeout(c, None, Duration::from_secs(30));
    let v: Value = serde_json::from_str(&out.stdout_str()).expect("json");
    assert_eq!(
        v["status"]["userInfo"],
        json!({"username": "erin", "groups": ["kubegate-devs", "system:authenticated"]})
    );
    // erin is no admin.
    let mut c = Command::new("curl");
    c.args(["-s", "-S", "--cacert"])
        .arg(dir.join("server-ca.pem"))
        .arg("--cert")
        .arg(dir.join("erin.pem"))
        .arg("--key")
        .arg(dir.join("erin.key"))
        .arg(format!("{}/api/v1/namespaces", sim.url));
    let v: Value =
        serde_json::from_str(&run_with_timeout(c, None, Duration::from_secs(30)).stdout_str())
            .expect("json");
    assert_eq!(v["code"], 403, "{v}");
    // The admin token still works.
    sim.kubectl_ok(&["get", "namespaces"]);
}

/// The daemon's impersonated exec: the audit line names the daemon as
/// `user` and the principal as `impersonatedUser`.
#[test]
fn an_impersonated_exec_is_audited_with_both_users() {
    let _w = common::bench::watchdog("impersonated_exec", 240);
    let p = Plane::sim();
    let ns = p.ns.clone();
    let tag = unique("daemon");
    p.cluster_object(
        "clusterroles",
        json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole",
               "metadata": {"name": tag},
               "rules": [{"apiGroups": [""], "resources": ["users", "groups"], "verbs": ["impersonate"]}]}),
    );
    p.cluster_object(
        "clusterrolebindings",
        binding(
            "ClusterRoleBinding",
            &tag,
            "ClusterRole",
            &tag,
            user("kubegate-daemon"),
        ),
    );
    p.namespaced(
        "roles",
        role(
            "exec",
            json!([{"apiGroups": [""], "resources": ["pods"], "verbs": ["get", "list"]},
                   {"apiGroups": [""], "resources": ["pods/exec"], "verbs": ["get", "create"]}]),
        ),
    );
    p.namespaced(
        "rolebindings",
        binding("RoleBinding", "devs-exec", "Role", "exec",
                json!([{"apiGroup": "rbac.authorization.k8s.io", "kind": "Group", "name": "kubegate-devs"}])),
    );
    let out = p.kubectl(
        "admin",
        &[
            "run",
            "box",
            "--image=busybox",
            "--restart=Never",
            "--",
            "sh",
            "-c",
            "trap 'exit 0' TERM; while :; do sleep 1; done",
        ],
    );
    assert_eq!(out.code, Some(0), "{}", out.stderr_str());
    wait_for("the pod to run", Duration::from_secs(60), || {
        let (_, v) = p.call(
            "admin",
            "GET",
            &format!("/api/v1/namespaces/{ns}/pods/box"),
            &[],
            None,
        );
        (v["status"]["phase"] == "Running").then_some(())
    });
    let out = p.kubectl(
        "daemon",
        &[
            "exec",
            "box",
            "--as",
            "alice",
            "--as-group",
            "kubegate-devs",
            "--",
            "echo",
            "hello",
        ],
    );
    assert_eq!(out.code, Some(0), "{}", out.stderr_str());
    assert_eq!(out.stdout_str().trim(), "hello");
    // Without the group, alice has no binding: the cluster's refusal.
    let out = p.kubectl("daemon", &["exec", "box", "--as", "alice", "--", "true"]);
    assert_ne!(out.code, Some(0));
    assert!(
        out.stderr_str().contains("User \"alice\" cannot"),
        "{}",
        out.stderr_str()
    );
    let audit = p.audit.clone().expect("audit log");
    let lines: Vec<Value> = std::fs::read_to_string(&audit)
        .expect("the audit log")
        .lines()
        .map(|l| serde_json::from_str(l).expect("a JSON line"))
        .collect();
    let exec = lines
        .iter()
        .find(|e| {
            e["objectRef"]["subresource"] == "exec"
                && e["responseStatus"]["code"] == 101
                && e["impersonatedUser"]["username"] == "alice"
        })
        .unwrap_or_else(|| panic!("no audit line for the exec in {lines:#?}"));
    assert_eq!(exec["kind"], "Event");
    assert_eq!(exec["apiVersion"], "audit.k8s.io/v1");
    assert_eq!(exec["level"], "Metadata");
    assert_eq!(exec["stage"], "ResponseComplete");
    assert_eq!(exec["verb"], "get");
    assert_eq!(
        exec["user"],
        json!({"username": "kubegate-daemon", "uid": "uid-daemon", "groups": ["kubegate:daemons", "system:authenticated"]})
    );
    assert_eq!(
        exec["impersonatedUser"],
        json!({"username": "alice", "groups": ["kubegate-devs", "system:authenticated"]})
    );
    assert_eq!(
        exec["objectRef"],
        json!({"resource": "pods", "namespace": ns, "name": "box", "apiVersion": "v1", "subresource": "exec"})
    );
    assert_eq!(exec["sourceIPs"], json!(["127.0.0.1"]));
    assert!(exec["requestURI"]
        .as_str()
        .is_some_and(|u| u.contains("/pods/box/exec?")));
    for k in ["requestReceivedTimestamp", "stageTimestamp"] {
        let t = exec[k].as_str().expect("a timestamp");
        assert_eq!(t.len(), "2026-01-01T00:00:00.000000Z".len(), "{t}");
    }
    let refused = lines
        .iter()
        .find(|e| {
            e["responseStatus"]["code"] == 403 && e["impersonatedUser"]["username"] == "alice"
        })
        .expect("the refused exec's line");
    assert_eq!(refused["responseStatus"]["reason"], "Forbidden");
    assert_eq!(
        refused["responseStatus"]["details"]["kind"], "pods",
        "{refused}"
    );
    assert_eq!(
        refused["annotations"]["authorization.k8s.io/decision"],
        "forbid"
    );
    assert_eq!(refused["user"]["username"], "kubegate-daemon");
    // No token in the log.
    let text = std::fs::read_to_string(&audit).expect("the audit log");
    for (_, t) in &p.tokens {
        assert!(!text.contains(t.as_str()), "a token is in the audit log");
    }
}
