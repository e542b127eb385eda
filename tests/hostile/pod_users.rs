//! Pod users in `kubegate sim` (docs/sim.md, "Pod users"): each pod runs
//! as its own host uid, pods cannot read each other's files nor signal each
//! other's processes nor read the sim's own files, the security contexts'
//! users and groups are honoured for containers, init containers, exec and
//! attach, and `runAsNonRoot` is enforced as a kubelet does.
//!
//! Switching users needs root: CI runs these as root; elsewhere each test
//! prints that it was skipped.

use crate::common::{wait_for, SimProc};
use serde_json::{json, Value};
use std::path::PathBuf;
use std::time::Duration;

const LOOP: &str = "trap 'exit 0' TERM; while :; do sleep 1; done";
const RANGE: std::ops::RangeInclusive<u32> = 200_000..=265_535;

fn need_root(test: &str) -> bool {
    if kubegate::sim::runtime::can_switch_users() {
        return true;
    }
    eprintln!("SKIPPED {test}: switching users needs root; CI runs it as root");
    false
}

fn pod(name: &str, spec: Value) -> Value {
    json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name}, "spec": spec})
}

fn wait_pod(sim: &SimProc, name: &str, what: &str, f: impl Fn(&Value) -> bool) -> Value {
    wait_for(
        &format!("pod {name}: {what}"),
        Duration::from_secs(60),
        || {
            let p = sim.kubectl_json(&["get", "pod", name]);
            f(&p).then_some(p)
        },
    )
}

fn running(sim: &SimProc, name: &str) -> Value {
    wait_pod(sim, name, "Running", |p| p["status"]["phase"] == "Running")
}

/// `kubectl exec POD -- ARGV`: (exit code, stdout, stderr).
fn exec(sim: &SimProc, pod: &str, argv: &[&str]) -> (Option<i32>, String, String) {
    let mut args = vec!["exec", pod, "--"];
    args.extend_from_slice(argv);
    let out = sim.kubectl_run(&args, None, Duration::from_secs(60));
    (out.code, out.stdout_str(), out.stderr_str())
}

fn exec_ok(sim: &SimProc, pod: &str, argv: &[&str]) -> String {
    let (code, out, err) = exec(sim, pod, argv);
    assert_eq!(code, Some(0), "exec {argv:?} in {pod}: {out} {err}");
    out
}

/// The host folder of pod `name` (namespace default).
fn pod_dir(sim: &SimProc, name: &str) -> PathBuf {
    let prefix = format!("default_{name}_");
    let pods = sim.state_dir.join("pods");
    wait_for(
        &format!("the folder of pod {name}"),
        Duration::from_secs(30),
        || {
            std::fs::read_dir(&pods).ok()?.flatten().find_map(|e| {
                e.file_name()
                    .to_string_lossy()
                    .starts_with(&prefix)
                    .then(|| e.path())
            })
        },
    )
}

fn uid_of(sim: &SimProc, pod: &str) -> u32 {
    exec_ok(sim, pod, &["id", "-u"])
        .trim()
        .parse()
        .expect("a uid")
}

#[test]
fn pods_run_as_their_own_users_and_cannot_reach_each_other() {
    if !need_root("pods_run_as_their_own_users_and_cannot_reach_each_other") {
        return;
    }
    let sim = SimProc::start(&[]);
    // `$$$$`: Kubernetes makes `$$` of it (its `$(VAR)` escape).
    let keeper = format!("echo secret > /data/secret; echo $$$$ > /data/pid; {LOOP}");
    for name in ["a", "b"] {
        sim.apply(&pod(
            name,
            json!({
                "volumes": [{"name": "data", "emptyDir": {}}],
                "containers": [{"name": "c", "image": "busybox", "command": ["sh", "-c", keeper],
                    "volumeMounts": [{"name": "data", "mountPath": "/data"}]}],
            }),
        ));
    }
    running(&sim, "a");
    running(&sim, "b");
    let (ua, ub) = (uid_of(&sim, "a"), uid_of(&sim, "b"));
    assert!(
        RANGE.contains(&ua) && RANGE.contains(&ub),
        "uids {ua} and {ub} outside the sim's range"
    );
    assert_ne!(ua, ub, "two pods share a host uid");

    let a_dir = pod_dir(&sim, "a");
    let secret = a_dir.join("volumes/data/secret");
    let pid_file = a_dir.join("volumes/data/pid");
    let a_pid = wait_for("pod a's pid file", Duration::from_secs(30), || {
        std::fs::read_to_string(&pid_file)
            .ok()
            .filter(|s| s.ends_with('\n'))
    });
    let a_pid = a_pid.trim();
    // a reads its own volume (through the mapped path and the host path).
    assert_eq!(exec_ok(&sim, "a", &["cat", "/data/secret"]), "secret\n");
    assert_eq!(
        exec_ok(&sim, "a", &["cat", secret.to_str().unwrap()]),
        "secret\n"
    );

    // b cannot: not the file, not the folder, not the pods' root listing.
    for argv in [
        vec!["cat", secret.to_str().unwrap()],
        vec!["ls", a_dir.to_str().unwrap()],
        vec!["ls", sim.state_dir.join("pods").to_str().unwrap()],
        vec!["cat", &format!("/proc/{a_pid}/environ")],
        vec!["ls", &format!("/proc/{a_pid}/cwd/")],
    ] {
        let (code, out, err) = exec(&sim, "b", &argv);
        assert_ne!(code, Some(0), "pod b ran {argv:?}: {out}");
        assert!(err.contains("ermission denied"), "{argv:?}: {err}");
    }
    // b cannot signal a's processes; a can signal its own.
    let (code, _, err) = exec(&sim, "b", &["sh", "-c", &format!("kill -0 {a_pid}")]);
    assert_ne!(code, Some(0), "pod b signalled pod a's process");
    assert!(err.contains("not permitted"), "{err}");
    exec_ok(&sim, "a", &["sh", "-c", &format!("kill -0 {a_pid}")]);

    // The folders are the pods': the pod folder 0770 owned by the pod's
    // user (group: the pod's id), its emptyDir 0777 inside that fence.
    use std::os::unix::fs::MetadataExt;
    let m = std::fs::metadata(&a_dir).unwrap();
    assert_eq!((m.uid(), m.gid(), m.mode() & 0o7777), (ua, ua, 0o770));
    let m = std::fs::metadata(sim.state_dir.join("pods")).unwrap();
    assert_eq!(m.mode() & 0o7777, 0o711);
}

#[test]
fn an_exec_cannot_read_the_sims_files() {
    if !need_root("an_exec_cannot_read_the_sims_files") {
        return;
    }
    let sim = SimProc::start(&[]);
    sim.apply(&pod(
        "nosy",
        json!({"containers": [{"name": "c", "image": "busybox", "command": ["sh", "-c", LOOP]}]}),
    ));
    running(&sim, "nosy");
    // The sim's admin kubeconfig (0600, the sim's user).
    let (code, out, err) = exec(&sim, "nosy", &["cat", sim.kubeconfig.to_str().unwrap()]);
    assert_ne!(code, Some(0), "the pod read the sim's kubeconfig: {out}");
    assert!(err.contains("ermission denied"), "{err}");
    // Nor can it write next to it.
    let planted = sim.dir.join("planted");
    let (code, _, _) = exec(
        &sim,
        "nosy",
        &["sh", "-c", &format!("echo x > {}", planted.display())],
    );
    assert_ne!(code, Some(0));
    assert!(!planted.exists());
}

#[test]
fn security_contexts_choose_users_for_containers_init_exec_and_attach() {
    if !need_root("security_contexts_choose_users_for_containers_init_exec_and_attach") {
        return;
    }
    let sim = SimProc::start(&[]);
    let main =
        "echo main=`id -u`:`id -g` groups=`id -G`; while read l; do echo attached=`id -u`:$l; done";
    sim.apply(&pod(
        "who",
        json!({
            "securityContext": {"runAsUser": 4242, "runAsGroup": 4343, "fsGroup": 4444, "supplementalGroups": [4545]},
            "volumes": [{"name": "data", "emptyDir": {}}],
            "initContainers": [{"name": "init", "image": "busybox",
                "securityContext": {"runAsUser": 4646},
                "command": ["sh", "-c", "id -u > /data/init-uid; touch /data/by-init"],
                "volumeMounts": [{"name": "data", "mountPath": "/data"}]}],
            "restartPolicy": "Never",
            "containers": [{"name": "main", "image": "busybox", "stdin": true, "stdinOnce": true,
                "command": ["sh", "-c", main],
                "volumeMounts": [{"name": "data", "mountPath": "/data"}]}],
        }),
    ));
    running(&sim, "who");
    // The container (its log), pod-level ids.
    let logs = wait_for("main's first line", Duration::from_secs(30), || {
        let l = sim.kubectl_ok(&["logs", "who", "-c", "main"]);
        l.contains("main=").then_some(l)
    });
    assert!(logs.starts_with("main=4242:4343 groups="), "{logs}");
    let groups: Vec<&str> = logs
        .lines()
        .next()
        .unwrap()
        .split("groups=")
        .nth(1)
        .unwrap()
        .split_whitespace()
        .collect();
    for g in ["4343", "4444", "4545"] {
        assert!(groups.contains(&g), "group {g} missing: {logs}");
    }
    // The init container's own override; fsGroup owns the volume, setgid,
    // so what the init container wrote is group 4444.
    assert_eq!(exec_ok(&sim, "who", &["cat", "/data/init-uid"]), "4646\n");
    assert_eq!(
        exec_ok(&sim, "who", &["stat", "-c", "%g:%a", "/data"]),
        "4444:2777\n"
    );
    assert_eq!(
        exec_ok(&sim, "who", &["stat", "-c", "%g", "/data/by-init"]),
        "4444\n"
    );
    // An exec runs as the container's user.
    assert_eq!(exec_ok(&sim, "who", &["id", "-u"]), "4242\n");
    assert_eq!(exec_ok(&sim, "who", &["id", "-g"]), "4343\n");
    // Attach reaches the container's process (its user).
    let out = sim.kubectl_run(
        &["attach", "-i", "who", "-c", "main"],
        Some(b"hello\n"),
        Duration::from_secs(60),
    );
    assert!(
        out.stdout_str().contains("attached=4242:hello"),
        "{} {}",
        out.stdout_str(),
        out.stderr_str()
    );
}

#[test]
fn run_as_non_root_refuses_uid_0_as_a_kubelet_does() {
    if !need_root("run_as_non_root_refuses_uid_0_as_a_kubelet_does") {
        return;
    }
    let sim = SimProc::start(&[]);
    sim.apply(&pod(
        "rootish",
        json!({
            "securityContext": {"runAsNonRoot": true},
            "containers": [{"name": "c", "image": "busybox", "command": ["sh", "-c", LOOP],
                "securityContext": {"runAsUser": 0}}],
        }),
    ));
    sim.apply(&pod(
        "fine",
        json!({
            "securityContext": {"runAsNonRoot": true},
            "containers": [{"name": "c", "image": "busybox", "command": ["sh", "-c", LOOP]}],
        }),
    ));
    let p = wait_pod(&sim, "rootish", "CreateContainerConfigError", |p| {
        p["status"]["containerStatuses"][0]["state"]["waiting"]["reason"]
            == "CreateContainerConfigError"
    });
    let uid = p["metadata"]["uid"].as_str().unwrap();
    assert_eq!(
        p["status"]["containerStatuses"][0]["state"]["waiting"]["message"],
        format!("container's runAsUser breaks non-root policy (pod: \"rootish_default({uid})\", container: c)")
    );
    // Without a uid named, the image's user is the pod's own: non-root.
    running(&sim, "fine");
    assert!(RANGE.contains(&uid_of(&sim, "fine")));
}

/// The daemon's embedded sim: its demo pod (what every principal's exec
/// reaches) runs as its own user and cannot read or change the daemon's
/// state: the sim's admin kubeconfig, the session records, the audit log.
#[test]
fn the_daemons_pods_cannot_reach_its_state() {
    if !need_root("the_daemons_pods_cannot_reach_its_state") {
        return;
    }
    let d = crate::common::daemon::DaemonProc::start();
    let pods = d.kubectl_ok(
        &[
            "get",
            "pods",
            "-n",
            "demo",
            "-l",
            "app=hello",
            "-o",
            "jsonpath={.items[0].metadata.name}",
        ],
        None,
    );
    let run = |argv: &[&str]| {
        let mut c = d.kubectl();
        c.args(["exec", "-n", "demo", pods.trim(), "--"]).args(argv);
        crate::common::run_with_timeout(c, None, Duration::from_secs(60))
    };
    let out = run(&["id", "-u"]);
    let uid: u32 = out.stdout_str().trim().parse().expect("a uid");
    assert!(RANGE.contains(&uid), "the demo pod runs as {uid}");
    let state = d.dir.join("state");
    for argv in [
        vec!["cat", d.kubeconfig.to_str().unwrap()],
        vec!["ls", state.to_str().unwrap()],
        vec!["ls", state.join("sessions").to_str().unwrap()],
    ] {
        let out = run(&argv);
        assert_ne!(
            out.code,
            Some(0),
            "the pod ran {argv:?}: {}",
            out.stdout_str()
        );
        assert!(
            out.stderr_str().contains("ermission denied"),
            "{argv:?}: {}",
            out.stderr_str()
        );
    }
    let audit = state.join("audit.jsonl");
    let before = std::fs::read(&audit).unwrap_or_default();
    let out = run(&["sh", "-c", &format!("echo forged >> {}", audit.display())]);
    assert_ne!(out.code, Some(0), "the pod wrote the audit log");
    assert_eq!(std::fs::read(&audit).unwrap_or_default(), before);
}

/// The pods' folder must be reachable by pod users: a configured one that
/// is not is refused at start, naming the folder at fault; the default one
/// (under the state dir) that is not moves to a fresh folder under the
/// system's temporary folder for the run, removed at the end.
#[test]
fn a_pods_folder_out_of_reach_is_refused_or_replaced() {
    if !need_root("a_pods_folder_out_of_reach_is_refused_or_replaced") {
        return;
    }
    use std::os::unix::fs::PermissionsExt;
    let dir = crate::common::temp_dir("reach");
    let private = dir.join("private");
    std::fs::create_dir(&private).unwrap();
    std::fs::set_permissions(&private, std::fs::Permissions::from_mode(0o700)).unwrap();
    let mut c = std::process::Command::new(crate::common::KUBEGATE);
    c.args(["sim", "--listen", "127.0.0.1:0", "--state-dir"])
        .arg(dir.join("state"))
        .arg("--kubeconfig-out")
        .arg(dir.join("kc"))
        .arg("--pods-dir")
        .arg(private.join("pods"));
    let out = crate::common::run_with_timeout(c, None, Duration::from_secs(30));
    assert_eq!(out.code, Some(1), "{}", out.stderr_str());
    let err = out.stderr_str();
    assert!(
        err.contains("out of reach of pod users")
            && err.contains(&format!("{} is mode 0700", private.display())),
        "{err}"
    );

    let mut sim = SimProc::start(&["--state-dir", private.join("state").to_str().unwrap()]);
    sim.apply(&pod(
        "p",
        json!({"containers": [{"name": "c", "image": "busybox", "command": ["sh", "-c", LOOP]}]}),
    ));
    running(&sim, "p");
    let cwd = PathBuf::from(exec_ok(&sim, "p", &["pwd"]).trim());
    let root = cwd.parent().expect("the pods' folder").to_path_buf();
    assert!(
        root.starts_with(std::env::temp_dir())
            && root
                .file_name()
                .unwrap()
                .to_string_lossy()
                .starts_with("kubegate-pods-"),
        "{}",
        cwd.display()
    );
    assert_eq!(sim.stop(), Some(0));
    assert!(!root.exists(), "{} left behind", root.display());
}

/// Two principals' watch sessions on the embedded sim: each session pod has
/// its own host uid, and one cannot read the other's workspace nor its
/// agent's environment (which holds the workspace token).
#[test]
fn two_principals_session_pods_cannot_reach_each_other() {
    if !need_root("two_principals_session_pods_cannot_reach_each_other") {
        return;
    }
    use sha2::Digest;
    let other: String = sha2::Sha256::digest(b"other-token-0123456789")
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect();
    let d = crate::common::daemon::DaemonProc::start_with(
        |c| {
            format!("{c}\n[[principal]]\nname = \"other\"\ntoken_sha256 = \"{other}\"\nmay_start_sessions = true\n")
        },
        "warn",
    );
    let body = |secret: &str| {
        json!({
            "apps": [{"name": "web", "entry": "main.sh", "command": ["sh", "main.sh"], "io": "streams"}],
            "bundle": {"files": [
                {"path": "main.sh", "content": "while :; do sleep 1; done"},
                {"path": "secret.txt", "content": secret},
            ]}
        })
        .to_string()
    };
    let mut pods = Vec::new();
    for (token, secret) in [
        (d.token.clone(), "demo's"),
        ("other-token-0123456789".to_string(), "other's"),
    ] {
        let b = body(secret);
        let (st, resp) = d.request("POST", "/v1/sessions", Some(&token), Some(b.as_bytes()));
        assert_eq!(st, 201, "{}", String::from_utf8_lossy(&resp));
        let v: Value = serde_json::from_slice(&resp).unwrap();
        let id = v["sessionId"].as_str().unwrap().to_string();
        let pod = wait_for("the session's pod", Duration::from_secs(60), || {
            d.session_pods(&id).into_iter().next()
        });
        pods.push(pod);
    }
    let exec = |pod: &str, argv: &[&str]| {
        let mut c = d.kubectl();
        c.args(["exec", "-n", "default", pod, "-c", "workspace", "--"])
            .args(argv);
        crate::common::run_with_timeout(c, None, Duration::from_secs(60))
    };
    let uid = |pod: &str| -> u32 {
        wait_for("the workspace container", Duration::from_secs(60), || {
            let out = exec(pod, &["id", "-u"]);
            out.stdout_str().trim().parse().ok()
        })
    };
    let (u0, u1) = (uid(&pods[0]), uid(&pods[1]));
    assert!(
        RANGE.contains(&u0) && RANGE.contains(&u1) && u0 != u1,
        "{u0} {u1}"
    );
    // The demo session's workspace file and agent, from the other's pod.
    let prefix = format!("default_{}_", pods[0]);
    let pods_root = d.dir.join("state-pods");
    let dir0 = wait_for(
        "the demo session's pod folder",
        Duration::from_secs(30),
        || {
            std::fs::read_dir(&pods_root).ok()?.flatten().find_map(|e| {
                e.file_name()
                    .to_string_lossy()
                    .starts_with(&prefix)
                    .then(|| e.path())
            })
        },
    );
    let secret = dir0.join("volumes/workspace/secret.txt");
    wait_for(
        "the bundle in the demo session's workspace",
        Duration::from_secs(60),
        || {
            std::fs::read_to_string(&secret)
                .ok()
                .filter(|s| s == "demo's")
        },
    );
    // Written `/./…`: the sim maps a session pod's mount paths in a
    // command's words textually (docs/sim.md), and a checkout under /tmp
    // (the pod's scratch mount) would otherwise have `cat` read a path in
    // the pod's own scratch folder, "No such file" instead of the refusal.
    let across = format!("/.{}", secret.display());
    let out = exec(&pods[1], &["cat", &across]);
    assert_ne!(
        out.code,
        Some(0),
        "read across principals: {}",
        out.stdout_str()
    );
    assert!(
        out.stderr_str().contains("ermission denied"),
        "{}",
        out.stderr_str()
    );
    let agent_pid = crate::common::processes_under(&dir0)
        .into_iter()
        .find(|pid| {
            std::fs::read(format!("/proc/{pid}/cmdline")).is_ok_and(|c| {
                let c = String::from_utf8_lossy(&c);
                c.contains("workspace-agent") && !c.contains("__shim")
            })
        })
        .expect("the demo session's agent");
    let environ = format!("/proc/{agent_pid}/environ");
    // Its own pod reads it (so the refusal below is about the other user)...
    let own = exec(&pods[0], &["cat", &environ]);
    assert_eq!(own.code, Some(0), "{}", own.stderr_str());
    assert!(own.stdout_str().contains("KUBEGATE_WORKSPACE_TOKEN="));
    // ... the other principal's pod does not.
    let out = exec(&pods[1], &["cat", &environ]);
    assert_ne!(
        out.code,
        Some(0),
        "read the other's environment: {}",
        out.stdout_str()
    );
    assert!(
        out.stderr_str().contains("ermission denied"),
        "{}",
        out.stderr_str()
    );
}

/// Sim mode without pod users (`uid_range = "off"` stands for "cannot
/// switch users", so this runs as root too): a SIGHUP that would add a
/// second principal keeps the current one.
#[test]
fn an_unconfined_sims_reload_cannot_add_a_second_principal() {
    let hex = crate::common::daemon::token_digest;
    let one = format!(
        "[server]\nlisten = \"127.0.0.1:0\"\nstate_dir = \"state\"\n[cluster]\nmode = \"sim\"\n[cluster.sim]\nuid_range = \"off\"\n[[principal]]\nname = \"alice\"\ntoken_sha256 = \"{}\"\n",
        hex("alice-token-0123456789")
    );
    let dir_kubeconfig = PathBuf::from("unused");
    let d = crate::common::daemon::DaemonProc::start_config(
        &one,
        dir_kubeconfig,
        "alice-token-0123456789",
        "info",
    );
    let (st, _) = d.request(
        "GET",
        "/v1/workspaces",
        Some("alice-token-0123456789"),
        None,
    );
    assert_eq!(st, 200);
    let two = format!(
        "{one}[[principal]]\nname = \"bob\"\ntoken_sha256 = \"{}\"\n",
        hex("bob-token-0123456789")
    );
    std::fs::write(&d.config, two).unwrap();
    crate::common::unsafe_kill(d.child.id(), 1);
    wait_for(
        "the refused reload in the log",
        Duration::from_secs(30),
        || {
            let log = std::fs::read_to_string(&d.log).unwrap_or_default();
            log.contains("SIGHUP: keeping the current principals: 2 principals in sim mode without pod users")
            .then_some(())
        },
    );
    let (st, _) = d.request("GET", "/v1/workspaces", Some("bob-token-0123456789"), None);
    assert_eq!(st, 401);
    let (st, _) = d.request(
        "GET",
        "/v1/workspaces",
        Some("alice-token-0123456789"),
        None,
    );
    assert_eq!(st, 200);
}
