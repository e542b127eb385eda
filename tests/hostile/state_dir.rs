//! The daemon's state directory at start (docs/deploy.md, "The state
//! directory"): one made earlier with loose modes (0755 folders, 0644
//! files, as umask 022 leaves them) is made private (0700 / 0600) by the
//! next start; one that is not the daemon's (another owner, a symbolic
//! link anyone could have planted, a file) is refused with a message; and
//! after a watch session ran on the embedded sim, nothing under it is
//! readable by group or others: `sessions/`, `sim/`, the session record,
//! every folder of the pods' root, the workspace files the agent wrote.

use crate::common::bench::watchdog;
use crate::common::daemon::{random_token, DaemonProc, EXAMPLE};
use crate::common::{run_with_timeout, temp_dir, KUBEGATE};
use serde_json::json;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

/// The example config on a free port, with `state_dir` and a principal
/// holding `digest`.
fn config(state: &Path, digest: &str) -> String {
    let example = std::fs::read_to_string(EXAMPLE).expect("read the example config");
    let text = example
        .replace("listen = \"127.0.0.1:7443\"", "listen = \"127.0.0.1:0\"")
        .replace(
            "state_dir = \"./state\"",
            &format!("state_dir = \"{}\"", state.display()),
        )
        .replace(
            "audit_log = \"./state/audit.jsonl\"",
            &format!("audit_log = \"{}\"", state.join("audit.jsonl").display()),
        )
        .replace(kubegate::config::DEMO_TOKEN_SHA256, digest);
    assert!(
        text.contains("127.0.0.1:0")
            && text.contains(digest)
            && text.contains(&format!("state_dir = \"{}\"", state.display()))
            && !text.contains("./state/audit.jsonl"),
        "the example's listen, state_dir, audit_log or digest line changed"
    );
    text
}

fn mode(p: &Path) -> u32 {
    std::fs::symlink_metadata(p)
        .unwrap_or_else(|e| panic!("{}: {e}", p.display()))
        .permissions()
        .mode()
        & 0o7777
}

fn chmod(p: &Path, m: u32) {
    std::fs::set_permissions(p, std::fs::Permissions::from_mode(m)).expect("chmod");
}

/// Every entry below `dir` (not following links) with a group or other bit.
fn loose_entries(dir: &Path) -> Vec<(PathBuf, u32)> {
    let mut out = Vec::new();
    let mut todo = vec![dir.to_path_buf()];
    while let Some(d) = todo.pop() {
        let Ok(rd) = std::fs::read_dir(&d) else {
            continue;
        };
        for e in rd.flatten() {
            let p = e.path();
            let Ok(m) = std::fs::symlink_metadata(&p) else {
                continue;
            };
            if m.file_type().is_symlink() || !(m.is_dir() || m.is_file()) {
                continue;
            }
            if m.permissions().mode() & 0o077 != 0 {
                out.push((p.clone(), m.permissions().mode() & 0o7777));
            }
            if m.is_dir() {
                todo.push(p);
            }
        }
    }
    out
}

#[test]
fn a_loose_state_dir_is_made_private_and_stays_so_while_a_session_runs() {
    let _dog = watchdog("state dir modes", 240);
    let base = temp_dir("state-modes");
    let state = base.join("state");
    // As a daemon under umask 022 (or an operator's cp -r) leaves it.
    for d in ["", "sessions", "recordings", "sim"] {
        std::fs::create_dir_all(state.join(d)).expect("mkdir");
        chmod(&state.join(d), 0o755);
    }
    for f in ["recordings/old.cast", "notes.txt", "sim/leftover.log"] {
        std::fs::write(state.join(f), "x").expect("write");
        chmod(&state.join(f), 0o644);
    }
    std::fs::write(state.join("tool.sh"), "#!/bin/sh\n").expect("write");
    chmod(&state.join("tool.sh"), 0o755);
    // A link out of the state: never followed by the fix.
    let outside = base.join("outside.txt");
    std::fs::write(&outside, "x").expect("write");
    chmod(&outside, 0o644);
    std::os::unix::fs::symlink(&outside, state.join("link")).expect("symlink");

    let (token, digest) = random_token();
    let d = DaemonProc::start_config(
        &config(&state, &digest),
        state.join("sim.kubeconfig"),
        &token,
        "info",
    );
    for p in ["", "sessions", "recordings", "sim"] {
        assert_eq!(mode(&state.join(p)), 0o700, "{p:?}");
    }
    for f in [
        "recordings/old.cast",
        "notes.txt",
        "sim/leftover.log",
        "sim.kubeconfig",
        "audit.jsonl",
    ] {
        assert_eq!(mode(&state.join(f)), 0o600, "{f}");
    }
    assert_eq!(
        mode(&state.join("tool.sh")),
        0o700,
        "the owner's bits are kept"
    );
    assert_eq!(
        mode(&outside),
        0o644,
        "the fix followed a link out of the state"
    );
    assert!(
        d.log_text().contains("modes made private"),
        "no log line about the fix:\n{}",
        d.log_text()
    );

    // A session: its record, its pod's folder and the workspace files the
    // agent writes there are created private too.
    d.wait_deployment_ready("demo", "hello");
    let (id, mut sse) = d.create_session(&json!({
        "apps": [{"name": "web", "entry": "main.sh", "command": ["sh", "main.sh"], "io": "streams"}],
        "bundle": {"files": [
            {"path": "main.sh", "content": "echo started; while :; do sleep 1; done"},
            {"path": "data/readme.txt", "content": "aGVsbG8=", "encoding": "base64"}
        ]}
    }));
    let seen = sse.until(|e| {
        e.event == "status" && matches!(e.data["status"].as_str(), Some("running" | "failed"))
    });
    assert_eq!(
        seen.last().map(|e| e.data["status"].clone()),
        Some(json!("running")),
        "{seen:#?}"
    );
    let records: Vec<PathBuf> = std::fs::read_dir(state.join("sessions"))
        .expect("sessions/")
        .flatten()
        .map(|e| e.path())
        .filter(|p| p.to_string_lossy().contains(&id))
        .collect();
    assert!(
        !records.is_empty(),
        "no record of session {id} in sessions/"
    );
    for r in &records {
        assert_eq!(mode(r), 0o600, "{}", r.display());
    }
    // The pod's files: with pod users (the sim runs as root) the pods'
    // folders live beside the state directory and each pod's folder is its
    // own user's alone; without, they stay in the state (sim/pods) and are
    // private like the rest of it.
    let beside = base.join("state-pods");
    let readme = crate::common::wait_for(
        "the workspace file in the pod's folder",
        Duration::from_secs(30),
        || find_file(&beside, "readme.txt").or_else(|| find_file(&state.join("sim"), "readme.txt")),
    );
    let pods = if readme.starts_with(&beside) {
        let pod_dir = readme
            .strip_prefix(&beside)
            .ok()
            .and_then(|r| r.components().next())
            .map(|c| beside.join(c))
            .expect("the pod's own folder");
        assert_eq!(
            mode(&pod_dir) & 0o007,
            0,
            "{} is open to others",
            pod_dir.display()
        );
        beside.clone()
    } else {
        assert_eq!(mode(&readme), 0o600, "{}", readme.display());
        state.join("sim").join("pods")
    };
    // Below the pods' root a pod's own files keep the modes the pod gave
    // them (the kubegate binary its init container copies is 0755, as in a
    // real pod), behind folders nobody else can enter; everything else in
    // the state directory is private.
    let loose: Vec<(PathBuf, u32)> = loose_entries(&state)
        .into_iter()
        .filter(|(p, _)| !p.starts_with(&pods) || p.is_dir())
        .collect();
    assert!(loose.is_empty(), "readable by group or others: {loose:#?}");
    let (st, _) = d.json("DELETE", &format!("/v1/sessions/{id}"), None);
    assert!((200..300).contains(&st), "{st}");
}

fn find_file(dir: &Path, name: &str) -> Option<PathBuf> {
    let mut todo = vec![dir.to_path_buf()];
    while let Some(d) = todo.pop() {
        for e in std::fs::read_dir(&d).ok()?.flatten() {
            let p = e.path();
            let Ok(m) = std::fs::symlink_metadata(&p) else {
                continue;
            };
            if m.is_dir() {
                todo.push(p);
            } else if m.is_file() && p.file_name().is_some_and(|n| n == name) {
                return Some(p);
            }
        }
    }
    None
}

/// `kubegate serve` on a config whose state directory is `state`: it must
/// refuse to start (exit 1) with a message containing every `said`,
/// before printing anything on stdout.
fn assert_refused(base: &Path, state: &Path, said: &[&str]) {
    let (_, digest) = random_token();
    let cfg = base.join(format!("refused-{}.toml", rand_suffix()));
    std::fs::write(&cfg, config(state, &digest)).expect("write config");
    let mut c = Command::new(KUBEGATE);
    c.arg("serve")
        .arg("--config")
        .arg(&cfg)
        .env("RUST_LOG", "warn");
    let out = run_with_timeout(c, None, Duration::from_secs(60));
    let err = out.stderr_str();
    assert_eq!(out.code, Some(1), "{}: {err}", state.display());
    for s in said {
        assert!(err.contains(s), "{}: {s:?} not in: {err}", state.display());
    }
    assert!(out.stdout.is_empty(), "it started: {}", out.stdout_str());
}

fn rand_suffix() -> u32 {
    rand::random()
}

#[test]
fn a_state_dir_that_is_not_the_daemons_own_is_refused() {
    let _dog = watchdog("state dir refusals", 120);
    let base = temp_dir("state-refused");

    // A file.
    let file = base.join("a-file");
    std::fs::write(&file, "").expect("write");
    assert_refused(&base, &file, &["state directory", "is not a directory"]);

    // A symbolic link in a folder anyone can write (where another user
    // could have planted it): refused, its target untouched.
    let target = base.join("target");
    std::fs::create_dir(&target).expect("mkdir");
    chmod(&target, 0o755);
    let shared = base.join("shared");
    std::fs::create_dir(&shared).expect("mkdir");
    chmod(&shared, 0o1777);
    let link = shared.join("state");
    std::os::unix::fs::symlink(&target, &link).expect("symlink");
    assert_refused(
        &base,
        &link,
        &["state directory", "symbolic link", "other users can change"],
    );
    assert_eq!(
        mode(&target),
        0o755,
        "the refused link's target was changed"
    );

    if rustix::process::geteuid().as_raw() != 0 {
        println!("SKIPPED: the other-owner cases need root (chown); the rest ran");
        return;
    }
    const NOBODY: u32 = 65534;
    // A symbolic link another user owns, in our own folder.
    let theirs = base.join("their-link");
    std::os::unix::fs::symlink(&target, &theirs).expect("symlink");
    std::os::unix::fs::lchown(&theirs, Some(NOBODY), Some(NOBODY)).expect("lchown");
    assert_refused(
        &base,
        &theirs,
        &["state directory", "symbolic link owned by uid 65534"],
    );
    // A directory another user owns.
    let other = base.join("other-owner");
    std::fs::create_dir(&other).expect("mkdir");
    chmod(&other, 0o755);
    std::os::unix::fs::chown(&other, Some(NOBODY), Some(NOBODY)).expect("chown");
    assert_refused(
        &base,
        &other,
        &["state directory", "belongs to uid 65534", "not to uid 0"],
    );
    assert_eq!(mode(&other), 0o755, "the refused directory was changed");
    assert_eq!(
        std::fs::read_dir(&other).expect("read").count(),
        0,
        "the daemon wrote into another user's directory"
    );
}
