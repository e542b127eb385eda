//! kubeconfig and in-cluster loading (`kube::config`): the real kubeconfig
//! fixtures, KUBECONFIG merging, context selection, relative paths, data
//! versus file fields, token-file rotation, exec plugins (fake plugins
//! written here as shell scripts), bad files, and the kubeconfig that
//! `kubegate sim --tls --token --client-ca` writes, proven with a real TLS
//! handshake and `GET /version`.
//!
//! Parallel-safe: every test has its own temp folder and its own injected
//! environment (the process environment is never read or changed), and
//! waits with deadlines, never bare sleeps.

mod common;

use base64::Engine;
use common::{temp_dir, wait_for, SimProc};
use kubegate::kube::config::{
    self, Env, KubeconfigError, KubeconfigErrorKind, LoadOptions, TokenFile,
};
use kubegate::kube::connection::{Connection, Credentials};
use kubegate::kube::tls_client;
use std::io::{Read, Write};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

// ---------------------------------------------------------------- helpers

fn fixture_path(name: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures/kube/kubeconfig")
        .join(name)
}

fn fixture(name: &str) -> String {
    std::fs::read_to_string(fixture_path(name)).expect("fixture")
}

fn b64(s: &str) -> String {
    base64::engine::general_purpose::STANDARD.encode(s.as_bytes())
}

fn write(dir: &Path, name: &str, contents: &str) -> PathBuf {
    let p = dir.join(name);
    if let Some(parent) = p.parent() {
        std::fs::create_dir_all(parent).expect("mkdir");
    }
    std::fs::write(&p, contents).expect("write");
    p
}

/// A `#!/bin/sh` script, executable.
fn script(dir: &Path, name: &str, body: &str) -> PathBuf {
    use std::os::unix::fs::PermissionsExt;
    let p = write(dir, name, &format!("#!/bin/sh\n{body}\n"));
    std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o755)).expect("chmod");
    p
}

/// An environment with only HOME (no KUBECONFIG) and a PATH for sh tools.
fn env_home(home: &Path) -> Env {
    Env::empty()
        .with("HOME", home)
        .with("PATH", "/usr/bin:/bin")
}

fn opts_file(env: Env, path: &Path) -> LoadOptions {
    LoadOptions {
        kubeconfig: Some(path.to_path_buf()),
        ..LoadOptions::with_env(env)
    }
}

fn load_file(path: &Path, context: Option<&str>) -> Result<Connection, KubeconfigError> {
    let dir = path.parent().expect("dir").to_path_buf();
    config::load(&LoadOptions {
        context: context.map(str::to_string),
        ..opts_file(env_home(&dir), path)
    })
}

/// A CA plus a client certificate and key (PKCS#8 ECDSA), as the sim makes.
struct Pki {
    ca: String,
    cert: String,
    key: String,
}

fn pki() -> Pki {
    let c = kubegate::sim::tls::generate(&[], true).expect("certs");
    let client = c.client.expect("client cert");
    Pki {
        ca: c.ca_pem,
        cert: client.cert_pem,
        key: client.key_pem,
    }
}

fn bearer(c: &Connection) -> Option<String> {
    c.credentials.bearer().expect("bearer")
}

fn err_of(r: Result<Connection, KubeconfigError>) -> KubeconfigError {
    match r {
        Ok(c) => panic!("expected an error, loaded {c:?}"),
        Err(e) => e,
    }
}

/// The error names the file and key and says `what`.
fn assert_err(e: &KubeconfigError, file: &str, key: &str, what: &str) {
    let s = e.to_string();
    assert!(
        s.starts_with(&format!("{file}: {key}: ")),
        "want prefix {file:?}: {key:?}, got: {s}"
    );
    assert!(s.contains(what), "want {what:?} in: {s}");
}

fn tls_ok(c: &Connection) {
    tls_client::client_config(&c.tls).expect("rustls client config");
}

// ---------------------------------------------------------------- fixtures

#[test]
fn multi_context_fixture_with_relative_paths_and_tokens() {
    let dir = temp_dir("kcfg-multi");
    let p = write(
        &dir,
        "config",
        &fixture("kubeconfig-multi-context-relative-paths-tokens.yaml"),
    );
    // The relative `ca.crt`, `client.crt`, `client.key` live beside it.
    let pki = pki();
    write(&dir, "ca.crt", &pki.ca);
    write(&dir, "client.crt", &pki.cert);
    write(&dir, "client.key", &pki.key);

    // current-context: federal-context -> horse-cluster + green-user.
    let c = load_file(&p, None).expect("federal-context");
    assert_eq!(c.server, "https://horse.org:4443");
    assert_eq!(c.namespace, "chisel-ns");
    assert_eq!(c.tls.ca_certs.len(), 1);
    assert!(!c.tls.insecure_skip_verify);
    assert!(c.tls.client_cert.is_some(), "client.crt/client.key");
    assert_eq!(bearer(&c), None);
    tls_ok(&c);
    assert_eq!(
        tls_client::server_name(&c).expect("name").to_str(),
        "horse.org"
    );

    let c = load_file(&p, Some("queen-anne-context")).expect("queen-anne");
    assert_eq!(c.server, "https://pig.org:443");
    assert!(c.tls.insecure_skip_verify);
    assert_eq!(c.namespace, "saw-ns");
    assert_eq!(bearer(&c).as_deref(), Some("black-token"));
    tls_ok(&c);

    // victorian-context: the fixture's inline CA is fake (PEM armour around
    // placeholder text that is not even base64): a clear error, naming the
    // key.
    let e = err_of(load_file(&p, Some("victorian-context")));
    assert_err(
        &e,
        &p.display().to_string(),
        "clusters[llama-cluster].certificate-authority-data",
        "a PEM section's body is not valid base64",
    );

    // Straight from the fixture folder: the relative ca.crt resolves there
    // (and is absent), and the error says which file it looked for.
    let fp = fixture_path("kubeconfig-multi-context-relative-paths-tokens.yaml");
    let e = err_of(load_file(&fp, None));
    assert_eq!(e.kind, KubeconfigErrorKind::Io);
    let want = fp.parent().expect("dir").join("ca.crt");
    assert_err(
        &e,
        &fp.display().to_string(),
        "clusters[horse-cluster].certificate-authority",
        &format!("cannot read {}", want.display()),
    );
}

#[test]
fn docker_desktop_fixture_inline_client_cert() {
    let dir = temp_dir("kcfg-dd");
    let text = fixture("kubeconfig-docker-desktop-inline-client-cert.yaml");
    // As shipped, the certificate and key are placeholders: refused up
    // front, never a panic later in ureq.
    let p = write(&dir, "as-shipped", &text);
    let e = err_of(load_file(&p, None));
    let s = e.to_string();
    assert!(
        e.key
            .as_deref()
            .is_some_and(|k| k.starts_with("users[docker-for-desktop].client-")),
        "{s}"
    );
    assert!(!s.contains("LS0tLS1CRUdJTi"), "no key material in: {s}");

    // The same file with real material loads, and rustls accepts it.
    let pki = pki();
    let mut yaml = String::new();
    for line in text.lines() {
        if line.trim_start().starts_with("client-certificate-data:") {
            yaml.push_str(&format!(
                "    client-certificate-data: {}\n",
                b64(&pki.cert)
            ));
        } else if line.trim_start().starts_with("client-key-data:") {
            yaml.push_str(&format!("    client-key-data: {}\n", b64(&pki.key)));
        } else {
            yaml.push_str(line);
            yaml.push('\n');
        }
    }
    let p = write(&dir, "real", &yaml);
    let c = load_file(&p, None).expect("docker-desktop");
    assert_eq!(c.server, "https://localhost:6443");
    assert!(c.tls.insecure_skip_verify);
    assert!(c.tls.client_cert.is_some());
    assert_eq!(c.namespace, "default");
    assert_eq!(bearer(&c), None);
    tls_ok(&c);
}

/// The EKS fixture's `command: aws`, answered by a fake `aws` on the
/// injected PATH that prints the real `aws eks get-token` fixture.
#[test]
fn eks_fixture_exec_plugin() {
    let dir = temp_dir("kcfg-eks");
    let bin = dir.join("bin");
    let cred = fixture_path("exec-credential-aws-eks-get-token.json");
    script(
        &bin,
        "aws",
        &format!(
            "echo run >> \"{d}/runs\"\necho \"$@\" > \"{d}/args\"\n\
             printf '%s' \"$KUBERNETES_EXEC_INFO\" > \"{d}/info\"\ncat \"{c}\"",
            d = dir.display(),
            c = cred.display()
        ),
    );
    let env = Env::empty()
        .with("HOME", &dir)
        .with("PATH", format!("{}:/usr/bin:/bin", bin.display()));
    let text = fixture("kubeconfig-eks-exec-plugin-aws-cli.yaml");

    // As shipped, the CA data is AWS's placeholder: a clear error.
    let p = write(&dir, "as-shipped", &text);
    let e = err_of(config::load(&opts_file(env.clone(), &p)));
    assert_err(
        &e,
        &p.display().to_string(),
        "clusters[arn:aws:eks:region:111222333444:cluster/ExampleCluster].certificate-authority-data",
        "not a valid X.509 certificate",
    );
    let e = err_of(config::load(&LoadOptions {
        context: Some("arn:aws:eks:us-west-2:111222333444:cluster/Existing".into()),
        ..opts_file(env.clone(), &p)
    }));
    assert_err(
        &e,
        &p.display().to_string(),
        "clusters[arn:aws:eks:us-west-2:111222333444:cluster/Existing].certificate-authority-data",
        "not valid base64",
    );

    // With a real CA in its place, the exec user works.
    let pki = pki();
    let mut yaml = String::new();
    for line in text.lines() {
        if line.trim_start().starts_with("certificate-authority-data:") {
            yaml.push_str(&format!(
                "    certificate-authority-data: {}\n",
                b64(&pki.ca)
            ));
        } else {
            yaml.push_str(line);
            yaml.push('\n');
        }
    }
    let p = write(&dir, "config", &yaml);
    let c = config::load(&opts_file(env.clone(), &p)).expect("eks");
    assert_eq!(c.server, "https://endpoint.amazonaws.com");
    assert_eq!(c.namespace, "default");
    tls_ok(&c);
    assert!(
        !dir.join("runs").exists(),
        "loading must not run the plugin"
    );
    assert_eq!(
        bearer(&c).as_deref(),
        Some("k8s-aws-v1.EXAMPLE_TOKEN_DATA_STRING...")
    );
    let args = std::fs::read_to_string(dir.join("args")).expect("args");
    assert_eq!(
        args.trim(),
        "--region region eks get-token --cluster-name ExampleCluster --output json"
    );
    let info: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(dir.join("info")).expect("info"))
            .expect("KUBERNETES_EXEC_INFO is JSON");
    assert_eq!(info["kind"], "ExecCredential");
    assert_eq!(info["apiVersion"], "client.authentication.k8s.io/v1beta1");
    assert_eq!(info["spec"]["interactive"], false);
    assert!(
        info["spec"].get("cluster").is_none(),
        "no provideClusterInfo"
    );
    // The fixture's token expired in 2024: it is used, but not cached.
    assert_eq!(
        bearer(&c).as_deref(),
        Some("k8s-aws-v1.EXAMPLE_TOKEN_DATA_STRING...")
    );
    let runs = std::fs::read_to_string(dir.join("runs")).expect("runs");
    assert_eq!(runs.lines().count(), 2);

    // Without the plugin on PATH: a load-time error naming the command.
    let e = err_of(config::load(&opts_file(env_home(&dir), &p)));
    assert_eq!(e.kind, KubeconfigErrorKind::Credentials);
    assert!(
        e.to_string()
            .contains("exec plugin \"aws\": not found in PATH"),
        "{e}"
    );
}

#[test]
fn tokenfile_fixture_and_rotation() {
    let dir = temp_dir("kcfg-tokenfile");
    let text = fixture("kubeconfig-tokenfile-incluster-paths.yaml");
    let sa = "/var/run/secrets/kubernetes.io/serviceaccount";
    if !Path::new(sa).join("ca.crt").exists() {
        // Not in a pod: the absolute CA path is reported as unreadable.
        let fp = fixture_path("kubeconfig-tokenfile-incluster-paths.yaml");
        let e = err_of(load_file(&fp, None));
        assert_err(
            &e,
            &fp.display().to_string(),
            "clusters[kubeconfig-cluster].certificate-authority",
            &format!("cannot read {sa}/ca.crt"),
        );
    }
    // The same file pointed at a service-account folder of our own.
    let sa_dir = dir.join("sa");
    let pki = pki();
    write(&sa_dir, "ca.crt", &pki.ca);
    let token = write(&sa_dir, "token", "token-one\n");
    let p = write(
        &dir,
        "config",
        &text.replace(sa, &sa_dir.display().to_string()),
    );
    let c = load_file(&p, None).expect("tokenfile");
    assert_eq!(c.server, "https://kubernetes.default.svc:443");
    assert_eq!(c.namespace, "default");
    assert_eq!(bearer(&c).as_deref(), Some("token-one"));
    tls_ok(&c);

    // Rotation: the new token shows after a 401 (invalidate), not before
    // (the cache holds for a minute).
    std::fs::write(&token, "token-two").expect("rotate");
    assert_eq!(bearer(&c).as_deref(), Some("token-one"));
    c.credentials.invalidate();
    assert_eq!(bearer(&c).as_deref(), Some("token-two"));

    // And with a short max age, without any 401.
    let tf = TokenFile::with_max_age(&token, Duration::from_millis(50));
    assert_eq!(tf.bearer().expect("read").as_deref(), Some("token-two"));
    std::fs::write(&token, "token-three").expect("rotate");
    wait_for("the re-read token", Duration::from_secs(10), || {
        (tf.bearer().expect("read").as_deref() == Some("token-three")).then_some(())
    });

    // A missing token file after a 401 names the path.
    std::fs::remove_file(&token).expect("rm");
    c.credentials.invalidate();
    let e = c.credentials.bearer().expect_err("missing");
    assert!(e.0.contains(&token.display().to_string()), "{e}");

    // ... and at load time, with the kubeconfig key.
    let e = err_of(load_file(&p, None));
    assert_eq!(e.kind, KubeconfigErrorKind::Credentials);
    assert_eq!(e.key.as_deref(), Some("users[kubeconfig-user].tokenFile"));
    assert!(e.to_string().contains(&token.display().to_string()), "{e}");
}

// ---------------------------------------------------------------- in-cluster

fn service_account(dir: &Path, ns: Option<&str>) -> PathBuf {
    let sa = dir.join("serviceaccount");
    write(&sa, "ca.crt", &pki().ca);
    write(&sa, "token", "sa-token\n");
    if let Some(ns) = ns {
        write(&sa, "namespace", ns);
    }
    sa
}

#[test]
fn in_cluster_config() {
    let dir = temp_dir("kcfg-incluster");
    let sa = service_account(&dir, Some("team-a\n"));
    let env = Env::empty()
        .with("KUBERNETES_SERVICE_HOST", "10.96.0.1")
        .with("KUBERNETES_SERVICE_PORT", "443");
    let c = config::in_cluster(&env, &sa).expect("in-cluster");
    assert_eq!(c.server, "https://10.96.0.1:443");
    assert_eq!(c.namespace, "team-a");
    assert_eq!(c.tls.ca_certs.len(), 1);
    assert_eq!(bearer(&c).as_deref(), Some("sa-token"));
    tls_ok(&c);
    assert_eq!(
        tls_client::server_name(&c).expect("name").to_str(),
        "10.96.0.1"
    );

    // IPv6 service host: bracketed.
    let v6 = env.clone().with("KUBERNETES_SERVICE_HOST", "fd00:10:96::1");
    let c = config::in_cluster(&v6, &sa).expect("v6");
    assert_eq!(c.server, "https://[fd00:10:96::1]:443");
    assert_eq!(
        tls_client::server_name(&c).expect("name").to_str(),
        "fd00:10:96::1"
    );

    // POD_NAMESPACE wins over the file; no file and no variable: default.
    let c = config::in_cluster(&env.clone().with("POD_NAMESPACE", "other"), &sa).expect("ns");
    assert_eq!(c.namespace, "other");
    let bare = service_account(&dir.join("bare"), None);
    assert_eq!(
        config::in_cluster(&env, &bare).expect("bare").namespace,
        "default"
    );

    // Rotation works here too.
    std::fs::write(sa.join("token"), "sa-token-2").expect("rotate");
    let c = config::in_cluster(&env, &sa).expect("again");
    std::fs::write(sa.join("token"), "sa-token-3").expect("rotate");
    c.credentials.invalidate();
    assert_eq!(bearer(&c).as_deref(), Some("sa-token-3"));

    // Errors name the variable or the file.
    let e = err_of(config::in_cluster(&Env::empty(), &sa));
    assert_eq!(e.kind, KubeconfigErrorKind::NoConfig);
    assert_eq!(e.key.as_deref(), Some("KUBERNETES_SERVICE_HOST"));
    let e = err_of(config::in_cluster(
        &env.clone().with("KUBERNETES_SERVICE_PORT", "https"),
        &sa,
    ));
    assert_eq!(e.key.as_deref(), Some("KUBERNETES_SERVICE_PORT"));
    std::fs::remove_file(sa.join("token")).expect("rm");
    let e = err_of(config::in_cluster(&env, &sa));
    assert_eq!(e.key.as_deref(), Some("token"));
    assert!(
        e.to_string()
            .contains(&sa.join("token").display().to_string()),
        "{e}"
    );
    let e = err_of(config::in_cluster(&env, &dir.join("nowhere")));
    assert_eq!(e.key.as_deref(), Some("ca.crt"));
}

#[test]
fn auto_prefers_in_cluster_unless_a_kubeconfig_is_named() {
    let dir = temp_dir("kcfg-auto");
    let sa = service_account(&dir, Some("pod-ns"));
    let home = dir.join("home");
    write(
        &home,
        ".kube/config",
        "current-context: c\ncontexts: [{name: c, context: {cluster: c}}]\n\
         clusters: [{name: c, cluster: {server: 'http://127.0.0.1:8080'}}]\n",
    );
    let pod_env = env_home(&home)
        .with("KUBERNETES_SERVICE_HOST", "10.0.0.1")
        .with("KUBERNETES_SERVICE_PORT", "6443");
    let mut o = LoadOptions::with_env(pod_env.clone());
    o.service_account_dir = sa.clone();
    assert_eq!(
        config::auto(&o).expect("pod").server,
        "https://10.0.0.1:6443"
    );
    // An explicit kubeconfig or context means the caller wants the file.
    let o2 = LoadOptions {
        context: Some("c".into()),
        ..o.clone()
    };
    assert_eq!(
        config::auto(&o2).expect("ctx").server,
        "http://127.0.0.1:8080"
    );
    // Outside a pod: ~/.kube/config.
    let mut o3 = LoadOptions::with_env(env_home(&home));
    o3.service_account_dir = sa;
    let c = config::auto(&o3).expect("laptop");
    assert_eq!(c.server, "http://127.0.0.1:8080");
    assert_eq!(c.namespace, "default");
    assert_eq!(bearer(&c), None);
}

// ---------------------------------------------------------------- merging

#[test]
fn kubeconfig_merge_order_and_context_selection() {
    let dir = temp_dir("kcfg-merge");
    let a = write(
        &dir,
        "a/config",
        "current-context: ctx-a\n\
         clusters:\n\
         - {name: shared, cluster: {server: 'http://a.example:1'}}\n\
         contexts:\n\
         - {name: ctx-a, context: {cluster: shared, user: ua, namespace: ns-a}}\n\
         - {name: both, context: {cluster: shared, user: ua, namespace: from-a}}\n\
         users:\n\
         - {name: ua, user: {token: token-a}}\n\
         - {name: shared-user, user: {token: shared-from-a}}\n",
    );
    let b = write(
        &dir,
        "b/config",
        "current-context: ctx-b\n\
         clusters:\n\
         - {name: shared, cluster: {server: 'http://b.example:2'}}\n\
         - {name: only-b, cluster: {server: 'http://only-b.example:3'}}\n\
         contexts:\n\
         - {name: ctx-b, context: {cluster: only-b, user: shared-user}}\n\
         - {name: both, context: {cluster: only-b, user: ub, namespace: from-b}}\n\
         users:\n\
         - {name: ub, user: {token: token-b}}\n\
         - {name: shared-user, user: {token: shared-from-b}}\n",
    );
    let kc = |list: &str| Env::empty().with("KUBECONFIG", list).with("HOME", &dir);
    let load = |list: &str, ctx: Option<&str>| {
        config::load(&LoadOptions {
            context: ctx.map(str::to_string),
            ..LoadOptions::with_env(kc(list))
        })
    };
    let missing = dir.join("missing/config");
    let ab = format!("{}:{}:{}", a.display(), missing.display(), b.display());
    let ba = format!("{}::{}", b.display(), a.display());

    // a first: a's current-context; a's `shared` cluster.
    let c = load(&ab, None).expect("a:b");
    assert_eq!(
        (c.server.as_str(), c.namespace.as_str()),
        ("http://a.example:1", "ns-a")
    );
    assert_eq!(bearer(&c).as_deref(), Some("token-a"));
    // A context from b still sees the first-wins users.
    let c = load(&ab, Some("ctx-b")).expect("ctx-b");
    assert_eq!(c.server, "http://only-b.example:3");
    assert_eq!(bearer(&c).as_deref(), Some("shared-from-a"));
    // Same-named context: a's.
    assert_eq!(load(&ab, Some("both")).expect("both").namespace, "from-a");

    // b first: everything flips.
    let c = load(&ba, None).expect("b:a");
    assert_eq!(c.server, "http://only-b.example:3");
    assert_eq!(bearer(&c).as_deref(), Some("shared-from-b"));
    assert_eq!(load(&ba, Some("both")).expect("both").namespace, "from-b");
    assert_eq!(
        load(&ba, Some("ctx-a")).expect("ctx-a").server,
        "http://b.example:2",
        "ctx-a's cluster `shared` is b's when b comes first"
    );

    // An explicit path ignores KUBECONFIG; a missing one is an error.
    let c = config::load(&opts_file(kc(&ba), &a)).expect("explicit");
    assert_eq!(c.server, "http://a.example:1");
    let e = err_of(config::load(&opts_file(kc(&ba), &missing)));
    assert_eq!(e.kind, KubeconfigErrorKind::NoConfig);
    // KUBECONFIG naming no existing file; no KUBECONFIG and no ~/.kube/config.
    let e = err_of(load(&missing.display().to_string(), None));
    assert_eq!(e.kind, KubeconfigErrorKind::NoConfig);
    assert!(e.to_string().contains("KUBECONFIG"), "{e}");
    let e = err_of(config::load(&LoadOptions::with_env(env_home(&dir))));
    assert_eq!(e.kind, KubeconfigErrorKind::NoConfig);
    assert!(e.to_string().contains(".kube/config"), "{e}");
    let e = err_of(config::load(&LoadOptions::with_env(Env::empty())));
    assert_eq!(e.kind, KubeconfigErrorKind::NoConfig);

    // Unknown context: the error lists the known ones.
    let e = err_of(load(&ab, Some("nope")));
    assert!(
        e.to_string().contains("context \"nope\" is not defined"),
        "{e}"
    );
    assert!(e.to_string().contains("ctx-a, both, ctx-b"), "{e}");
}

#[test]
fn relative_paths_resolve_against_the_defining_file() {
    let dir = temp_dir("kcfg-rel");
    let pki = pki();
    // The cluster (and its relative CA) in one folder, the user (and its
    // relative cert and key) in another, the context in a third.
    let a = write(
        &dir,
        "clusters/config",
        "clusters: [{name: c, cluster: {server: 'https://127.0.0.1:6443', certificate-authority: pki/ca.pem}}]\n",
    );
    write(&dir, "clusters/pki/ca.pem", &pki.ca);
    let b = write(
        &dir,
        "users/config",
        "users: [{name: u, user: {client-certificate: me.crt, client-key: ../users/keys/me.key}}]\n",
    );
    write(&dir, "users/me.crt", &pki.cert);
    write(&dir, "users/keys/me.key", &pki.key);
    let ctx = write(
        &dir,
        "ctx/config",
        "current-context: x\ncontexts: [{name: x, context: {cluster: c, user: u}}]\n",
    );
    let list = format!("{}:{}:{}", ctx.display(), a.display(), b.display());
    let env = Env::empty().with("KUBECONFIG", list);
    let c = config::load(&LoadOptions::with_env(env)).expect("relative");
    assert_eq!(c.tls.ca_certs.len(), 1);
    assert!(c.tls.client_cert.is_some());
    tls_ok(&c);
}

#[test]
fn data_fields_win_over_file_fields() {
    let dir = temp_dir("kcfg-data");
    let pki = pki();
    let p = write(
        &dir,
        "config",
        &format!(
            "current-context: x\n\
             contexts: [{{name: x, context: {{cluster: c, user: u}}}}]\n\
             clusters: [{{name: c, cluster: {{server: 'https://127.0.0.1:6443', \
             certificate-authority: does-not-exist.pem, certificate-authority-data: {ca}}}}}]\n\
             users: [{{name: u, user: {{client-certificate: nope.crt, client-certificate-data: {cert}, \
             client-key: nope.key, client-key-data: {key}}}}}]\n",
            ca = b64(&pki.ca),
            cert = b64(&pki.cert),
            key = b64(&pki.key)
        ),
    );
    let c = load_file(&p, None).expect("data wins");
    assert_eq!(c.tls.ca_certs.len(), 1);
    assert!(c.tls.client_cert.is_some());
    tls_ok(&c);
}

// ------------------------------------------------------------ key formats

// Test-only keys made with `openssl genrsa -traditional 2048` (PKCS#1) and
// `openssl ecparam -name prime256v1 -genkey -noout` (SEC1), each with a
// self-signed certificate (`openssl req -new -x509 -days 36500`). rcgen
// writes only PKCS#8, so these two formats are pinned here. They protect
// nothing.

const RSA_PKCS1_KEY: &str = r#"-----BEGIN RSA PRIVATE KEY-----
MIIEpAIBAAKCAQEAy9mjJlFH/vd7FaNRaGRfVGZDeuvytTwtRnUinaeVlhvB2U5g
E6+33Wy4XUSRd0mjS035oxXOV6Ntu8D/fwowj4ESbLlnVtUVM4zSavaPuRsItQ9C
kaG5Zk91ZS2W5W181ytNlgPrh5GLqvHE+Ws+gl0GXPOH+hsRxww0oZTVyL8i8+ip
cppyuJ7k3HRK7A8wtoWxTQ9MBmhTMIM/GbSE2cZKLo4fWfvlCY7QLVVnmJFS7UOS
edO7hf/mAnvQ0VEtVomn/KL/dk1ufialMlUr/bCvLzSzF9YlPrFi4APCp2fZz5C6
XMQtD0PyKl/BVRiNaSZuaDorMPCDhehtvsK+owIDAQABAoIBAD9u4oN2cJJpHW6O
yzLSZQ3E4sO572UxLB+MLLDlaLl0ur4t0tzdZbgr8DTptOBrVDqHMaLrkrGXw/pU
ZMz59UF6lyqpCPyuwvGvJP0u62tc+7kn3f2mVyR8nlnVNWsARoRIT9TaNG0Tv+P6
ZuJ8Wk/Dtcqv54TO7pnDdQ9A2sOkFDmPVLZre9EHJSpJg00h+uoZNrkjgzHnvvYC
SmymDPwRIjLRAe2xprwLvn6cJCbQIOHOJHk6Z/bgiNFqckx6zFHirqYwqPDH7G1j
v/rNsNyFqt+Vm4FoCRq2HFPKBs6FRqZ6gSGyJDBoWQax4TvvZQL3wgM/m0Uh8xC6
531JUOECgYEA88oHej+MaU5gyBdoaaFjSb8Cp4ibFhIi3vAg1Yedx1d+emr+cNXq
LqxqDHLku+/3tYkc1YBjSCzUTf2fwXbdYWlbD5ZtXdqOQG5dIc2+nlZGkBceANu9
IXzRK3N526WSn+tL1j920OL0lEhndIZZjUskKiKWR3fl/fzaowJf+8MCgYEA1g9+
EypXL8B1DfU/bYt0P3CFeCqyAU00M6AXfZMcufR2F1q6eMyLBPSwsUvG+1iCHpAH
tCBJPSJyBr/yTR138qgSQ0D0XDdONnMN4O5a9+ZpWDA3Pr2TR+xj5a4S1FpP1E84
CQ/Pf6dRDLbezKmUzdzpaxEqxYEz1/s5VepDY6ECgYEA5mezZ3t2BfS4jYNqACMy
hnlLVfFKubJMWK1UKtswaD0t4R8L+LKD0LbMx5Uyzth+IYlDwhjEPGt5/3fLq/ne
QvliwbmnBYPQ294ykQc1t8nMiNQAXElRV7vyqIFL0yaKDDBCjWuPrN5Cz34aoMt1
CY/Rzyy/IS6VJNX8AQH2mycCgYA2qf4oJsfdCejah6aK8vHcwX9UEJMkgfKyvE9D
Yi4TzrnZfPHhp1pZCaOVoyRNS2zvIRjWhugtFH7J+nqF9uCKtyDyy8ObSQRQI1GH
/1Z7t/tu6eExxHe4BkX8gVeNowJ/1TsaFU+H6dJozMpYuXWmnKN/FAM4LKZwoVci
+Y/8AQKBgQC71XNPymumQ+OjOkRE0AYu4W6BhTHGczUlxVI+kQrRMcuL8KMiLN4I
0AxqUydJ9mZfV5iMVxOmjj39ldHSf1ptQAiXBUQCtN/3d3q6mFi8kuz5GGjAk/0B
/Xfp2y3TjOb4PJGTk3DcD0ByeVYNcHeKXB1WVFXnUlEfuZWiCsL+Vw==
-----END RSA PRIVATE KEY-----
"#;
const RSA_CERT: &str = r#"-----BEGIN CERTIFICATE-----
MIIDGzCCAgOgAwIBAgIUfatFxqlQj0GhWhrJJSv/MdiVkxwwDQYJKoZIhvcNAQEL
BQAwHDEaMBgGA1UEAwwRa3ViZWdhdGUtdGVzdC1yc2EwIBcNMjYxMTI5MjIzNjMy
WhgPMjEyNjExMDUyMjM2MzJaMBwxGjAYBgNVBAMMEWt1YmVnYXRlLXRlc3QtcnNh
MIIBIjANBgkqhkiG9w0BAQEFAAOCAQ8AMIIBCgKCAQEAy9mjJlFH/vd7FaNRaGRf
VGZDeuvytTwtRnUinaeVlhvB2U5gE6+33Wy4XUSRd0mjS035oxXOV6Ntu8D/fwow
j4ESbLlnVtUVM4zSavaPuRsItQ9CkaG5Zk91ZS2W5W181ytNlgPrh5GLqvHE+Ws+
gl0GXPOH+hsRxww0oZTVyL8i8+ipcppyuJ7k3HRK7A8wtoWxTQ9MBmhTMIM/GbSE
2cZKLo4fWfvlCY7QLVVnmJFS7UOSedO7hf/mAnvQ0VEtVomn/KL/dk1ufialMlUr
/bCvLzSzF9YlPrFi4APCp2fZz5C6XMQtD0PyKl/BVRiNaSZuaDorMPCDhehtvsK+
owIDAQABo1MwUTAdBgNVHQ4EFgQUjjc+kseb/YDJASuNla8Vo+wnNrswHwYDVR0j
BBgwFoAUjjc+kseb/YDJASuNla8Vo+wnNrswDwYDVR0TAQH/BAUwAwEB/zANBgkq
hkiG9w0BAQsFAAOCAQEAkKDNdhVDntHi3SR9VTscy8kzvGkRXjPAoJQLnlJR52WO
E2rY5BvrsdAo9vuQLeoxumqVjeHZWO3HDiSQHrG8OFdpKJrKasM2g+WZwtB0Bg8Q
UvRRkDLjCWo/8n2x413nzb+ZSF/cA2RLwOK3UAmb7POkK6wlWiO31kbTh6JHLQsp
5U7KZp0QIF75xUX5N8d8rizLoeV3dMqMlu5xOQPE7ZYTTZ/9QCud5KhdRoAPsR8d
pd9mCKqZAbEhSggoZ9ShYJ/OPyBsL18eDTTdQMxkX6cY37NIDWTrTwrlj1kJwDbR
SnVwQkfFLJ8pm2fylypl6qDNMJeTvW0B+JczlH789Q==
-----END CERTIFICATE-----
"#;
const EC_SEC1_KEY: &str = r#"-----BEGIN EC PRIVATE KEY-----
MHcCAQEEIP6fYWm8mkrzvq768Tm2KMnxL/cTX27/rur12mOByrhYoAoGCCqGSM49
AwEHoUQDQgAESwG3GYfiJYbjuHzmiC54KW2Tab478fJAXkRGjieXv8tsgSD+ItG/
8ufXYi1GNWnUvMSNRK/s0gRphVKlrAJ4iQ==
-----END EC PRIVATE KEY-----
"#;
const EC_CERT: &str = r#"-----BEGIN CERTIFICATE-----
MIIBjjCCATOgAwIBAgIUba1kx3t1fJJKk8+EI5cF3uO5QE8wCgYIKoZIzj0EAwIw
GzEZMBcGA1UEAwwQa3ViZWdhdGUtdGVzdC1lYzAgFw0yNjExMjkyMjM2MzJaGA8y
MTI2MTEwNTIyMzYzMlowGzEZMBcGA1UEAwwQa3ViZWdhdGUtdGVzdC1lYzBZMBMG
ByqGSM49AgEGCCqGSM49AwEHA0IABEsBtxmH4iWG47h85ogueCltk2m+O/HyQF5E
Ro4nl7/LbIEg/iLRv/Ln12ItRjVp1LzEjUSv7NIEaYVSpawCeImjUzBRMB0GA1Ud
DgQWBBSk5xMC9nA39tlEokgmNV81eLCJ2zAfBgNVHSMEGDAWgBSk5xMC9nA39tlE
okgmNV81eLCJ2zAPBgNVHRMBAf8EBTADAQH/MAoGCCqGSM49BAMCA0kAMEYCIQDw
iNw26JW4XMQFy23deqk2LrTJSt/eVznlHW9BRxfxdwIhAMtMpmLMbn4fE9vzSRqK
M44inqEEP1gH7gbU38jgzOY1
-----END CERTIFICATE-----
"#;

fn cert_user_config(dir: &Path, name: &str, cert: &str, key: &str) -> PathBuf {
    write(
        dir,
        name,
        &format!(
            "current-context: x\n\
             contexts: [{{name: x, context: {{cluster: c, user: u}}}}]\n\
             clusters: [{{name: c, cluster: {{server: 'https://127.0.0.1:6443', insecure-skip-tls-verify: true}}}}]\n\
             users: [{{name: u, user: {{client-certificate-data: {}, client-key-data: {}}}}}]\n",
            b64(cert),
            b64(key)
        ),
    )
}

#[test]
fn pkcs1_pkcs8_and_sec1_keys() {
    let dir = temp_dir("kcfg-keys");
    let pki = pki();
    assert!(pki.key.contains("BEGIN PRIVATE KEY"), "rcgen writes PKCS#8");
    assert!(RSA_PKCS1_KEY.starts_with("-----BEGIN RSA PRIVATE KEY-----"));
    assert!(EC_SEC1_KEY.starts_with("-----BEGIN EC PRIVATE KEY-----"));
    for (name, cert, key) in [
        ("pkcs8", pki.cert.as_str(), pki.key.as_str()),
        ("pkcs1", RSA_CERT, RSA_PKCS1_KEY),
        ("sec1", EC_CERT, EC_SEC1_KEY),
    ] {
        let p = cert_user_config(&dir, name, cert, key);
        let c = load_file(&p, None).unwrap_or_else(|e| panic!("{name}: {e}"));
        assert!(c.tls.client_cert.is_some(), "{name}");
        tls_ok(&c);
    }
    // Crossed pairs are caught at load time.
    let p = cert_user_config(&dir, "crossed", RSA_CERT, EC_SEC1_KEY);
    let e = err_of(load_file(&p, None));
    assert_err(
        &e,
        &p.display().to_string(),
        "users[u].client-key-data",
        "the key does not match the certificate in users[u].client-certificate-data",
    );
}

// ---------------------------------------------------------------- bad files

/// A bad kubeconfig: what is wrong, the file, the key named, the
/// message, the kind.
type BadFile<'a> = (
    &'a str,
    String,
    Option<&'a str>,
    &'a str,
    KubeconfigErrorKind,
);

/// The bad kubeconfigs of [`bad_files_give_clear_errors_naming_file_and_key`]:
/// what is wrong, the file, the key named, the message, the kind.
fn bad_file_cases<'a>(
    pki: &Pki,
    other: &Pki,
    secret: &'a str,
) -> Vec<(
    &'a str,
    String,
    Option<&'a str>,
    &'a str,
    KubeconfigErrorKind,
)> {
    let ctx = "current-context: x\ncontexts: [{name: x, context: {cluster: c, user: u}}]\n";
    let cluster = "clusters: [{name: c, cluster: {server: 'https://127.0.0.1:6443', insecure-skip-tls-verify: true}}]\n";
    let user = |u: &str| format!("{ctx}{cluster}users: [{{name: u, user: {u}}}]\n");
    let mut v = vec![
        (
            "no current-context",
            format!("contexts: []\n{cluster}"),
            Some("current-context"),
            "not set",
            KubeconfigErrorKind::NoConfig,
        ),
        (
            "unknown cluster",
            format!("current-context: x\ncontexts: [{{name: x, context: {{cluster: nope, user: u}}}}]\n{cluster}"),
            Some("contexts[x].cluster"),
            "cluster \"nope\" is not defined (defined: c)",
            KubeconfigErrorKind::Invalid,
        ),
        (
            "unknown user",
            format!("{ctx}{cluster}users: [{{name: someone, user: {{token: {secret}}}}}]\n"),
            Some("contexts[x].user"),
            "user \"u\" is not defined (defined: someone)",
            KubeconfigErrorKind::Invalid,
        ),
        (
            "bad base64",
            user(&format!("{{client-certificate-data: {}, client-key-data: '{secret}!!'}}", b64(&pki.cert))),
            Some("users[u].client-key-data"),
            "not valid base64",
            KubeconfigErrorKind::Invalid,
        ),
        (
            "not PEM",
            user(&format!("{{client-certificate-data: {}, client-key-data: {}}}", b64(&pki.cert), b64(secret))),
            Some("users[u].client-key-data"),
            "does not contain PEM data",
            KubeconfigErrorKind::Invalid,
        ),
        (
            "bad PEM body",
            user(&format!(
                "{{client-certificate-data: {}, client-key-data: {}}}",
                b64(&pki.cert),
                b64("-----BEGIN PRIVATE KEY-----\nnot*base64\n-----END PRIVATE KEY-----\n")
            )),
            Some("users[u].client-key-data"),
            "not valid base64",
            KubeconfigErrorKind::Invalid,
        ),
        (
            "key not matching cert",
            user(&format!("{{client-certificate-data: {}, client-key-data: {}}}", b64(&pki.cert), b64(&other.key))),
            Some("users[u].client-key-data"),
            "does not match the certificate",
            KubeconfigErrorKind::Invalid,
        ),
        (
            "cert without key",
            user(&format!("{{client-certificate-data: {}}}", b64(&pki.cert))),
            Some("users[u].client-key-data"),
            "missing",
            KubeconfigErrorKind::Invalid,
        ),
        (
            "CA not PEM",
            format!("{ctx}clusters: [{{name: c, cluster: {{server: 'https://h:1', certificate-authority-data: {}}}}}]\n", b64("junk")),
            Some("clusters[c].certificate-authority-data"),
            "does not contain PEM data",
            KubeconfigErrorKind::Invalid,
        ),
        (
            "CA and insecure",
            format!("{ctx}clusters: [{{name: c, cluster: {{server: 'https://h:1', insecure-skip-tls-verify: true, certificate-authority-data: {}}}}}]\n", b64(&pki.ca)),
            Some("clusters[c].insecure-skip-tls-verify"),
            "cannot be combined with clusters[c].certificate-authority-data",
            KubeconfigErrorKind::Invalid,
        ),
        (
            "no server",
            format!("{ctx}clusters: [{{name: c, cluster: {{insecure-skip-tls-verify: true}}}}]\n"),
            Some("clusters[c].server"),
            "missing",
            KubeconfigErrorKind::Invalid,
        ),
    ];
    v.extend(more_bad_file_cases(secret));
    v
}

/// The rest of [`bad_file_cases`].
fn more_bad_file_cases(secret: &str) -> Vec<BadFile<'_>> {
    let ctx = "current-context: x\ncontexts: [{name: x, context: {cluster: c, user: u}}]\n";
    let cluster = "clusters: [{name: c, cluster: {server: 'https://127.0.0.1:6443', insecure-skip-tls-verify: true}}]\n";
    let user = |u: &str| format!("{ctx}{cluster}users: [{{name: u, user: {u}}}]\n");
    vec![
        (
            "bad scheme",
            format!("{ctx}clusters: [{{name: c, cluster: {{server: 'ftp://h'}}}}]\n"),
            Some("clusters[c].server"),
            "https:// or http://",
            KubeconfigErrorKind::Invalid,
        ),
        (
            "proxy-url",
            format!("{ctx}clusters: [{{name: c, cluster: {{server: 'https://h:1', proxy-url: 'http://proxy:3128'}}}}]\n"),
            Some("clusters[c].proxy-url"),
            "proxies are not supported",
            KubeconfigErrorKind::Unsupported,
        ),
        (
            "basic auth",
            user(&format!("{{username: admin, password: {secret}}}")),
            Some("users[u].username"),
            "basic authentication (username/password) is not supported",
            KubeconfigErrorKind::Unsupported,
        ),
        (
            "auth-provider",
            user(&format!("{{auth-provider: {{name: gcp, config: {{access-token: {secret}}}}}}}")),
            Some("users[u].auth-provider"),
            "auth provider \"gcp\" is not supported",
            KubeconfigErrorKind::Unsupported,
        ),
        (
            "impersonation",
            user(&format!("{{token: {secret}, as: root}}")),
            Some("users[u].as"),
            "impersonation is not supported",
            KubeconfigErrorKind::Unsupported,
        ),
        (
            "token is a number",
            user("{token: 1234567890}"),
            Some("users[u].token"),
            "expected a string, found a number",
            KubeconfigErrorKind::Invalid,
        ),
        (
            "token with a line break",
            user("{token: \"abc\\r\\nX-Injected: 1\"}"),
            Some("users[u].token"),
            "not a bearer token",
            KubeconfigErrorKind::Invalid,
        ),
        (
            "exec and token",
            user(&format!("{{token: {secret}, exec: {{apiVersion: client.authentication.k8s.io/v1, command: x}}}}")),
            Some("users[u].exec"),
            "cannot be combined with token",
            KubeconfigErrorKind::Invalid,
        ),
        (
            "exec v1alpha1",
            user("{exec: {apiVersion: client.authentication.k8s.io/v1alpha1, command: x}}"),
            Some("users[u].exec.apiVersion"),
            "removed in Kubernetes 1.24",
            KubeconfigErrorKind::Unsupported,
        ),
        (
            "exec interactive",
            user("{exec: {apiVersion: client.authentication.k8s.io/v1, command: x, interactiveMode: Always}}"),
            Some("users[u].exec.interactiveMode"),
            "needs a terminal",
            KubeconfigErrorKind::Unsupported,
        ),
        (
            "exec without command",
            user("{exec: {apiVersion: client.authentication.k8s.io/v1}}"),
            Some("users[u].exec.command"),
            "missing",
            KubeconfigErrorKind::Invalid,
        ),
        (
            "entry without name",
            format!("{ctx}clusters: [{{cluster: {{server: 'https://h:1'}}}}]\n"),
            Some("clusters[0].name"),
            "missing",
            KubeconfigErrorKind::Invalid,
        ),
        (
            "clusters not a list",
            format!("{ctx}clusters: {{c: 1}}\n"),
            Some("clusters"),
            "expected a list, found a mapping",
            KubeconfigErrorKind::Invalid,
        ),
        (
            "YAML syntax",
            format!("users: [{{name: u, user: {{token: \"{secret}}}]\n"),
            None,
            "not valid YAML",
            KubeconfigErrorKind::Invalid,
        ),
        (
            "not a mapping",
            "- just\n- a list\n".to_string(),
            None,
            "the document is a list",
            KubeconfigErrorKind::Invalid,
        ),
    ]
}

#[test]
fn bad_files_give_clear_errors_naming_file_and_key() {
    let dir = temp_dir("kcfg-bad");
    let pki = pki();
    let other = self::pki();
    let secret = "s3cr3t-t0ken-value";
    let ctx = "current-context: x\ncontexts: [{name: x, context: {cluster: c, user: u}}]\n";
    let cluster = "clusters: [{name: c, cluster: {server: 'https://127.0.0.1:6443', insecure-skip-tls-verify: true}}]\n";
    let user = |u: &str| format!("{ctx}{cluster}users: [{{name: u, user: {u}}}]\n");
    let cases = bad_file_cases(&pki, &other, secret);
    for (i, (what, yaml, key, msg, kind)) in cases.into_iter().enumerate() {
        let p = write(&dir, &format!("case-{i}"), &yaml);
        let e = err_of(load_file(&p, None));
        let s = e.to_string();
        let file = p.display().to_string();
        match key {
            Some(k) => assert!(
                s.starts_with(&format!("{file}: {k}: ")),
                "{what}: want {file}: {k}: …, got: {s}"
            ),
            None => assert!(s.starts_with(&format!("{file}: ")), "{what}: got: {s}"),
        }
        assert!(s.contains(msg), "{what}: want {msg:?} in: {s}");
        assert_eq!(e.kind, kind, "{what}: {s}");
        assert!(!s.contains(secret), "{what}: secret leaked: {s}");
    }

    // The exact shape of one message, as a user reads it.
    let p = write(
        &dir,
        "exact",
        &user(&format!(
            "{{client-certificate-data: {}, client-key-data: '%%%'}}",
            b64(&pki.cert)
        )),
    );
    assert_eq!(
        err_of(load_file(&p, None)).to_string(),
        format!(
            "{}: users[u].client-key-data: not valid base64",
            p.display()
        )
    );

    // An unknown --context.
    let p = write(&dir, "ctx", &user("{token: t}"));
    let e = err_of(load_file(&p, Some("elsewhere")));
    assert_err(
        &e,
        &p.display().to_string(),
        "context",
        "context \"elsewhere\" is not defined (defined: x)",
    );

    // A broken user no context uses does not matter.
    let p = write(
        &dir,
        "unused",
        &format!(
            "{}  - {{name: broken, user: {{client-key-data: '%%%'}}}}\n",
            user("{token: t}").replace(
                "users: [{name: u, user: {token: t}}]",
                "users:\n  - {name: u, user: {token: t}}"
            )
        ),
    );
    assert_eq!(
        bearer(&load_file(&p, None).expect("unused broken user")).as_deref(),
        Some("t")
    );
}

#[test]
fn secrets_are_redacted_in_debug() {
    let dir = temp_dir("kcfg-debug");
    let p = write(
        &dir,
        "config",
        "current-context: x\ncontexts: [{name: x, context: {cluster: c, user: u}}]\n\
         clusters: [{name: c, cluster: {server: 'http://127.0.0.1:1'}}]\n\
         users: [{name: u, user: {token: very-secret-token}}]\n",
    );
    let c = load_file(&p, None).expect("load");
    assert_eq!(bearer(&c).as_deref(), Some("very-secret-token"));
    let dbg = format!("{c:?}");
    assert!(!dbg.contains("very-secret-token"), "{dbg}");
    let env = Env::empty().with("AWS_SECRET_ACCESS_KEY", "hunter2");
    assert!(!format!("{env:?}").contains("hunter2"));
}

// ---------------------------------------------------------------- exec

/// A kubeconfig whose user runs `sh SCRIPT` (the script is read, not
/// executed, so there is no "text file busy" race with other tests).
fn exec_config(dir: &Path, script_body: &str, extra: &str) -> PathBuf {
    let s = write(dir, "plugin.sh", script_body);
    write(
        dir,
        "config",
        &format!(
            "current-context: x\n\
             contexts: [{{name: x, context: {{cluster: c, user: u}}}}]\n\
             clusters: [{{name: c, cluster: {{server: 'http://127.0.0.1:1'}}}}]\n\
             users:\n\
             - name: u\n  user:\n    exec:\n      command: /bin/sh\n      args: ['{}']\n{extra}",
            s.display()
        ),
    )
}

const V1: &str = "client.authentication.k8s.io/v1";
const V1B1: &str = "client.authentication.k8s.io/v1beta1";

fn exec_load(dir: &Path, body: &str, api: &str, extra: &str) -> Connection {
    let p = exec_config(dir, body, &format!("      apiVersion: {api}\n{extra}"));
    load_file(&p, None).expect("exec kubeconfig")
}

fn runs(dir: &Path) -> usize {
    std::fs::read_to_string(dir.join("runs"))
        .map(|s| s.lines().count())
        .unwrap_or(0)
}

#[test]
fn exec_plugin_expiry_and_invalidate() {
    let dir = temp_dir("kcfg-exec-expiry");
    // Token N on run N, expiring 2 s after the run (whole seconds, so
    // between 1 and 2 s of real lifetime).
    let body = format!(
        "echo run >> '{d}/runs'\n\
         n=$(wc -l < '{d}/runs' | tr -d ' ')\n\
         exp=$(date -u -d \"@$(( $(date +%s) + 2 ))\" +%Y-%m-%dT%H:%M:%SZ)\n\
         printf '{{\"kind\":\"ExecCredential\",\"apiVersion\":\"{V1}\",\"status\":{{\"token\":\"tok-%s\",\"expirationTimestamp\":\"%s\"}}}}' \"$n\" \"$exp\"\n",
        d = dir.display()
    );
    let c = exec_load(&dir, &body, V1, "");
    assert_eq!(runs(&dir), 0);
    assert_eq!(bearer(&c).as_deref(), Some("tok-1"));
    assert_eq!(bearer(&c).as_deref(), Some("tok-1"), "cached");
    assert_eq!(runs(&dir), 1);
    // Renewed once it (nearly) expires.
    wait_for("an expiry re-run", Duration::from_secs(15), || {
        (bearer(&c).as_deref() == Some("tok-2")).then_some(())
    });
    assert_eq!(runs(&dir), 2);
    // A 401 re-runs at once.
    c.credentials.invalidate();
    assert_eq!(bearer(&c).as_deref(), Some("tok-3"));
}

#[test]
fn exec_plugin_env_args_and_cluster_info() {
    let dir = temp_dir("kcfg-exec-env");
    let pki = pki();
    let body = format!(
        "printf '%s' \"$KUBERNETES_EXEC_INFO\" > '{d}/info'\n\
         printf '{{\"kind\":\"ExecCredential\",\"apiVersion\":\"{V1B1}\",\"status\":{{\"token\":\"%s-%s-%s\"}}}}' \"$FROM_EXEC\" \"$FROM_LOADER\" \"$1\"\n",
        d = dir.display()
    );
    let s = write(&dir, "plugin.sh", &body);
    let p = write(
        &dir,
        "config",
        &format!(
            "current-context: x\n\
             contexts: [{{name: x, context: {{cluster: c, user: u}}}}]\n\
             clusters:\n- name: c\n  cluster:\n    server: https://127.0.0.1:6443\n    certificate-authority-data: {ca}\n    extensions:\n    - name: client.authentication.k8s.io/exec\n      extension: {{audience: kubegate}}\n\
             users:\n- name: u\n  user:\n    exec:\n      apiVersion: {V1B1}\n      command: /bin/sh\n      args: ['{s}', arg1]\n      env: [{{name: FROM_EXEC, value: e}}]\n      provideClusterInfo: true\n      interactiveMode: IfAvailable\n",
            ca = b64(&pki.ca),
            s = s.display()
        ),
    );
    let env = env_home(&dir).with("FROM_LOADER", "l");
    let c = config::load(&opts_file(env, &p)).expect("load");
    assert_eq!(bearer(&c).as_deref(), Some("e-l-arg1"));
    let info: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(dir.join("info")).expect("info"))
            .expect("json");
    assert_eq!(info["spec"]["interactive"], false);
    let cl = &info["spec"]["cluster"];
    assert_eq!(cl["server"], "https://127.0.0.1:6443");
    assert_eq!(cl["certificate-authority-data"], b64(&pki.ca));
    assert_eq!(cl["config"]["audience"], "kubegate");
}

#[test]
fn exec_plugin_client_certificate() {
    let dir = temp_dir("kcfg-exec-cert");
    let pki = pki();
    let answer = serde_json::json!({
        "kind": "ExecCredential",
        "apiVersion": V1,
        "status": {"clientCertificateData": pki.cert, "clientKeyData": pki.key}
    });
    write(&dir, "answer.json", &answer.to_string());
    let c = exec_load(
        &dir,
        &format!("cat '{}/answer.json'", dir.display()),
        V1,
        "",
    );
    assert_eq!(bearer(&c), None);
    let cc = c.credentials.client_cert().expect("cert").expect("some");
    let mut tls = c.tls.clone();
    tls.client_cert = Some(cc);
    tls_client::client_config(&tls).expect("rustls accepts the plugin's pair");
}

#[test]
fn exec_plugin_failures() {
    let base = temp_dir("kcfg-exec-fail");
    let case = |name: &str, body: &str, api: &str| -> String {
        let dir = base.join(name);
        std::fs::create_dir_all(&dir).expect("dir");
        let c = exec_load(&dir, body, api, "");
        let e = c.credentials.bearer().expect_err(name);
        let s = e.0;
        assert!(
            s.starts_with(&format!(
                "{}: users[u].exec: exec plugin \"/bin/sh\": ",
                dir.join("config").display()
            )),
            "{name}: {s}"
        );
        assert!(!s.contains("s3cr3t"), "{name}: leaked: {s}");
        s
    };
    let s = case(
        "exit",
        "echo 'partial s3cr3t output'\necho 'error: the SSO session has expired' >&2\nexit 3",
        V1,
    );
    assert!(s.contains("exited with status 3"), "{s}");
    assert!(
        s.contains("stderr: error: the SSO session has expired"),
        "{s}"
    );
    let s = case("json", "echo '{\"token\": s3cr3t'", V1);
    assert!(s.contains("not an ExecCredential JSON object"), "{s}");
    let s = case(
        "version",
        &format!("echo '{{\"kind\":\"ExecCredential\",\"apiVersion\":\"{V1}\",\"status\":{{\"token\":\"s3cr3t\"}}}}'"),
        V1B1,
    );
    assert!(s.contains("apiVersion \"client.authentication.k8s.io/v1\" does not match the kubeconfig's client.authentication.k8s.io/v1beta1"), "{s}");
    let s = case("empty", "exit 0", V1);
    assert!(s.contains("printed nothing"), "{s}");
    let s = case(
        "nostatus",
        &format!("echo '{{\"kind\":\"ExecCredential\",\"apiVersion\":\"{V1}\"}}'"),
        V1,
    );
    assert!(s.contains("no status"), "{s}");

    // Timeout: killed (with its whole process group: the `sleep` child
    // holds stdout), well before the sleep would end.
    let dir = base.join("timeout");
    std::fs::create_dir_all(&dir).expect("dir");
    let p = exec_config(
        &dir,
        "echo 'waiting for browser login' >&2\nsleep 60\necho never",
        &format!("      apiVersion: {V1}\n"),
    );
    let c = config::load(&LoadOptions {
        exec_timeout: Duration::from_secs(1),
        ..opts_file(env_home(&dir), &p)
    })
    .expect("load");
    let t0 = Instant::now();
    let e = c.credentials.bearer().expect_err("timeout");
    assert!(
        t0.elapsed() < Duration::from_secs(20),
        "took {:?}",
        t0.elapsed()
    );
    assert!(
        e.0.contains("did not finish within 1s and was killed"),
        "{e}"
    );
    assert!(e.0.contains("waiting for browser login"), "{e}");

    // Not installed: the installHint is part of the load error.
    let dir = base.join("hint");
    let p = write(
        &dir,
        "config",
        "current-context: x\ncontexts: [{name: x, context: {cluster: c, user: u}}]\n\
         clusters: [{name: c, cluster: {server: 'http://127.0.0.1:1'}}]\n\
         users:\n- name: u\n  user:\n    exec:\n      apiVersion: client.authentication.k8s.io/v1\n      command: kubegate-no-such-plugin\n      installHint: |\n        Install it with: brew install no-such-plugin\n",
    );
    let e = err_of(load_file(&p, None));
    assert_eq!(e.key.as_deref(), Some("users[u].exec.command"));
    let s = e.to_string();
    assert!(
        s.contains("\"kubegate-no-such-plugin\": not found in PATH"),
        "{s}"
    );
    assert!(
        s.contains("Install it with: brew install no-such-plugin"),
        "{s}"
    );
}

#[test]
fn exec_plugin_runs_once_for_concurrent_callers() {
    let dir = temp_dir("kcfg-exec-conc");
    let body = format!(
        "echo run >> '{d}/runs'\n\
         printf '{{\"kind\":\"ExecCredential\",\"apiVersion\":\"{V1}\",\"status\":{{\"token\":\"shared\"}}}}'\n",
        d = dir.display()
    );
    let c = exec_load(&dir, &body, V1, "");
    let creds = c.credentials.clone();
    let handles: Vec<_> = (0..8)
        .map(|_| {
            let cr = creds.clone();
            std::thread::spawn(move || cr.bearer().expect("bearer"))
        })
        .collect();
    for h in handles {
        assert_eq!(h.join().expect("thread").as_deref(), Some("shared"));
    }
    assert_eq!(runs(&dir), 1, "no expiry: one run serves everyone");
}

/// A plugin found through PATH by bare name, as real kubeconfigs do it.
#[test]
fn exec_plugin_by_name_on_path() {
    let dir = temp_dir("kcfg-exec-path");
    let bin = dir.join("bin");
    script(
        &bin,
        "kubegate-test-auth",
        &format!("echo '{{\"kind\":\"ExecCredential\",\"apiVersion\":\"{V1}\",\"status\":{{\"token\":\"from-path\"}}}}'"),
    );
    let p = write(
        &dir,
        "config",
        &format!(
            "current-context: x\ncontexts: [{{name: x, context: {{cluster: c, user: u}}}}]\n\
             clusters: [{{name: c, cluster: {{server: 'http://127.0.0.1:1'}}}}]\n\
             users: [{{name: u, user: {{exec: {{apiVersion: {V1}, command: kubegate-test-auth}}}}}}]\n"
        ),
    );
    let env = env_home(&dir).with("PATH", format!("/nonexistent:{}", bin.display()));
    let c = config::load(&opts_file(env, &p)).expect("load");
    assert_eq!(bearer(&c).as_deref(), Some("from-path"));
}

// ---------------------------------------------------------------- the sim

/// `GET /version` over a raw rustls connection built from `conn`.
fn get_version(conn: &Connection, token: Option<&str>) -> String {
    let cfg = tls_client::client_config(&conn.tls).expect("client config");
    let name = tls_client::server_name(conn).expect("server name");
    let addr = conn.server.strip_prefix("https://").expect("https");
    let tcp = std::net::TcpStream::connect(addr).expect("connect");
    tcp.set_read_timeout(Some(Duration::from_secs(20)))
        .expect("timeout");
    let cc = rustls::ClientConnection::new(cfg, name).expect("client connection");
    let mut tls = rustls::StreamOwned::new(cc, tcp);
    let auth = token
        .map(|t| format!("Authorization: Bearer {t}\r\n"))
        .unwrap_or_default();
    write!(
        tls,
        "GET /version HTTP/1.1\r\nHost: {addr}\r\n{auth}Connection: close\r\n\r\n"
    )
    .expect("write");
    tls.flush().expect("flush");
    let mut out = Vec::new();
    let mut buf = [0u8; 4096];
    loop {
        match tls.read(&mut buf) {
            Ok(0) => break,
            Ok(n) => out.extend_from_slice(&buf[..n]),
            // A peer that closes without close_notify: the response is in.
            Err(e) if e.kind() == std::io::ErrorKind::UnexpectedEof && !out.is_empty() => break,
            Err(e) => panic!("reading the response: {e}"),
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

#[test]
fn sim_kubeconfig_tls_token_and_client_cert() {
    let token = "sim-T0ken-for-kcfg";
    let sim = SimProc::start(&["--tls", "--token", token, "--client-ca"]);
    let home = sim.dir.join("home");
    std::fs::create_dir_all(&home).expect("home");
    let c = config::load(&opts_file(env_home(&home), &sim.kubeconfig)).expect("sim kubeconfig");
    assert_eq!(c.server, sim.url);
    assert_eq!(c.namespace, "default");
    assert_eq!(bearer(&c).as_deref(), Some(token));
    assert!(c.tls.client_cert.is_some());
    assert_eq!(c.tls.ca_certs.len(), 1);

    // The same kubeconfig handed over as a string.
    let text = std::fs::read_to_string(&sim.kubeconfig).expect("read");
    let s = config::from_kubeconfig_str(&text, &sim.dir, None).expect("from string");
    assert_eq!(s.server, c.server);

    // Token and certificate together, then each alone: 200. Neither: 401.
    let r = get_version(&c, Some(token));
    assert!(r.starts_with("HTTP/1.1 200"), "{r}");
    assert!(r.contains("\"gitVersion\""), "{r}");
    assert!(
        get_version(&c, None).starts_with("HTTP/1.1 200"),
        "certificate alone"
    );
    let mut no_cert = s.clone();
    no_cert.tls.client_cert = None;
    assert!(
        get_version(&no_cert, Some(token)).starts_with("HTTP/1.1 200"),
        "token alone"
    );
    let r = get_version(&no_cert, Some("wrong"));
    assert!(r.starts_with("HTTP/1.1 401"), "{r}");
}
