//! Who a standalone `kubegate sim` serves (docs/sim.md, "Command line and
//! authentication"): by default TLS and a random token, written only into
//! the kubeconfig it writes (never on its command line); `--token-file F`;
//! `--token T` still works but warns (it shows in `ps`); `--no-auth`
//! serves anyone over plain HTTP, and says so. Requests without the token
//! get upstream's 401 Status. Contradictory flags are usage errors (exit 2).

use crate::common::bench::watchdog;
use crate::common::{run_with_timeout, temp_dir, SimProc, KUBEGATE};
use serde_json::Value;
use std::os::unix::fs::PermissionsExt;
use std::process::Command;
use std::time::Duration;

/// `GET /api/v1/namespaces` with this `Authorization` value (none when
/// None): the status and the JSON body.
fn get_namespaces(sim: &SimProc, auth: Option<&str>) -> (u16, Value) {
    let mut req = agent(sim).get(&format!("{}/api/v1/namespaces", sim.url));
    if let Some(a) = auth {
        req = req.header("Authorization", a);
    }
    let mut r = req.call().expect("http");
    let status = r.status().as_u16();
    let body = r.body_mut().read_json().unwrap_or(Value::Null);
    (status, body)
}

/// An HTTP agent that trusts the sim's CA (from its kubeconfig) and sends
/// no credential of its own.
fn agent(sim: &SimProc) -> ureq::Agent {
    kubegate::kube::client::Client::new(sim.connection())
        .expect("a client")
        .stream_agent(Some(Duration::from_secs(30)))
}

fn assert_unauthorized(sim: &SimProc, auth: Option<&str>) {
    let (st, v) = get_namespaces(sim, auth);
    assert_eq!(st, 401, "{v}");
    assert_eq!(v["kind"], "Status", "{v}");
    assert_eq!(v["code"], 401, "{v}");
    assert_eq!(v["reason"], "Unauthorized", "{v}");
    assert_eq!(v["message"], "Unauthorized", "{v}");
}

/// The sim's command line, as every local user reads it in /proc.
fn cmdline(sim: &SimProc) -> String {
    let raw = std::fs::read(format!("/proc/{}/cmdline", sim.child.id())).expect("cmdline");
    String::from_utf8_lossy(&raw).replace('\0', " ")
}

#[test]
fn a_default_sim_wants_the_random_token_of_its_kubeconfig() {
    let _dog = watchdog("sim auth", 120);
    let sim = SimProc::start_logged(&[]);
    assert!(sim.url.starts_with("https://"), "{}", sim.url);
    let token = sim.token.clone().expect("a token in the kubeconfig");
    assert!(
        token.len() == 64 && token.bytes().all(|b| b.is_ascii_hexdigit()),
        "not 32 random bytes in hex: {} characters",
        token.len()
    );
    let mode = std::fs::metadata(&sim.kubeconfig)
        .expect("kubeconfig")
        .permissions()
        .mode();
    assert_eq!(mode & 0o777, 0o600, "kubeconfig mode {mode:o}");
    assert!(
        !cmdline(&sim).contains(&token),
        "the token is on the command line"
    );
    assert!(!sim.log_text().contains(&token), "the token is in the log");

    assert_unauthorized(&sim, None);
    assert_unauthorized(&sim, Some("Bearer not-the-token"));
    assert_unauthorized(&sim, Some(&format!("Basic {token}")));
    let (st, v) = get_namespaces(&sim, Some(&sim.bearer()));
    assert_eq!(st, 200, "{v}");
    assert_eq!(v["kind"], "NamespaceList", "{v}");
    // Every route, the sim's own too.
    let r = agent(&sim)
        .post(&format!("{}/sim/faults", sim.url))
        .send_json(serde_json::json!({"outageSecs": 60}))
        .expect("http");
    assert_eq!(r.status().as_u16(), 401, "unauthenticated fault injection");
    // kubectl, through the kubeconfig alone.
    let out = sim.kubectl_ok(&["get", "namespaces", "-o", "name"]);
    assert!(out.contains("namespace/default"), "{out}");
}

#[test]
fn token_file_no_auth_and_the_deprecated_token_flag() {
    let _dog = watchdog("sim auth", 120);
    let dir = temp_dir("sim-token-file");
    let file = dir.join("sim.token");
    std::fs::write(&file, "  file-token-0123456789abcdef\n").expect("write the token file");
    let sim = SimProc::start_logged(&["--token-file", file.to_str().expect("utf-8")]);
    assert_eq!(sim.token.as_deref(), Some("file-token-0123456789abcdef"));
    assert!(!cmdline(&sim).contains("file-token-0123456789abcdef"));
    assert_unauthorized(&sim, None);
    let (st, _) = get_namespaces(&sim, Some("Bearer file-token-0123456789abcdef"));
    assert_eq!(st, 200);
    assert!(!sim.log_text().contains("deprecated"), "{}", sim.log_text());
    drop(sim);

    let open = SimProc::start_logged(&["--no-auth"]);
    assert_eq!(open.token, None);
    assert!(open.url.starts_with("http://"), "{}", open.url);
    let (st, v) = get_namespaces(&open, None);
    assert_eq!(st, 200, "--no-auth serves anyone: {v}");
    let log = open.log_text();
    assert!(
        log.lines()
            .any(|l| l.contains(" WARN ") && l.contains("--no-auth")),
        "no warning about --no-auth:\n{log}"
    );
    drop(open);

    let old = SimProc::start_logged(&["--token", "flag-token-0123456789"]);
    assert_unauthorized(&old, None);
    let (st, _) = get_namespaces(&old, Some("Bearer flag-token-0123456789"));
    assert_eq!(st, 200);
    let log = old.log_text();
    assert!(
        log.lines().any(|l| l.contains(" WARN ")
            && l.contains("--token is deprecated")
            && l.contains("ps")),
        "no deprecation warning for --token:\n{log}"
    );
    assert!(!log.contains("flag-token-0123456789"), "{log}");
}

#[test]
fn contradictory_or_unusable_auth_flags_are_usage_errors() {
    let _dog = watchdog("sim auth", 60);
    let dir = temp_dir("sim-auth-usage");
    let kc = dir.join("kubeconfig");
    let kc = kc.to_str().expect("utf-8");
    let empty = dir.join("empty.token");
    std::fs::write(&empty, "\n").expect("write");
    let empty = empty.to_str().expect("utf-8");
    let missing = dir.join("missing.token");
    let missing = missing.to_str().expect("utf-8");
    let cases: &[(&[&str], &str)] = &[
        (
            &["--kubeconfig-out", kc, "--no-auth", "--token", "t"],
            "exclude each other",
        ),
        (
            &["--kubeconfig-out", kc, "--token-file", empty],
            "the file is empty",
        ),
        (
            &["--kubeconfig-out", kc, "--token-file", missing],
            "missing.token",
        ),
        (
            &["--kubeconfig-out", kc, "--no-auth", "--client-ca", "--tls"],
            "exclude each other",
        ),
        (
            &["--kubeconfig-out", kc, "--no-auth", "--allow-remote"],
            "would run anyone's commands",
        ),
        (&[], "written only into the kubeconfig"),
    ];
    for (args, said) in cases {
        let mut c = Command::new(KUBEGATE);
        c.arg("sim").args(*args).env("RUST_LOG", "warn");
        let out = run_with_timeout(c, None, Duration::from_secs(30));
        assert_eq!(out.code, Some(2), "{args:?}: {}", out.stderr_str());
        assert!(
            out.stderr_str().contains(said),
            "{args:?}: {}",
            out.stderr_str()
        );
        assert!(out.stdout.is_empty(), "{args:?} started");
    }
    assert!(
        !std::path::Path::new(kc).exists(),
        "a refused start wrote a kubeconfig"
    );
}
