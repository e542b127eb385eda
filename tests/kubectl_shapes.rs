//! The kubectl commands users reach for print the same shape against the
//! sim as against the real control plane (docs/control-plane.md): one
//! kubectl (the one built beside the plane, so no version skew decides
//! anything) runs each command on both, and the columns of every `get`,
//! the sections of `describe pod`, `auth can-i` and `auth whoami` must
//! agree. Without a real plane the test says so and passes, unless
//! `KUBEGATE_REAL_REQUIRED=1`.

mod common;

use common::backend::{on_real, watchdog, Backend};
use common::wait_for;
use std::collections::BTreeSet;
use std::time::Duration;

/// kubectl (the real plane's) against `b`, in its namespace: (ok, stdout,
/// stderr).
fn kubectl(b: &Backend, args: &[&str]) -> (bool, String, String) {
    let bin = std::env::var_os("KUBEGATE_REAL_KUBECTL").unwrap_or_else(|| "kubectl".into());
    let out = std::process::Command::new(bin)
        .arg("--kubeconfig")
        .arg(&b.kubeconfig)
        .arg("--request-timeout=60s")
        .arg("-n")
        .arg(&b.ns)
        .args(args)
        .output()
        .expect("kubectl");
    (
        out.status.success(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

fn ok(b: &Backend, args: &[&str]) -> String {
    let (ok, out, err) = kubectl(b, args);
    assert!(ok, "{:?} on {:?}: {err}", args, b.kind);
    out
}

/// The column names of a table kubectl printed.
fn columns(out: &str) -> Vec<String> {
    out.lines()
        .next()
        .unwrap_or("")
        .split("  ")
        .map(str::trim)
        .filter(|c| !c.is_empty())
        .map(str::to_string)
        .collect()
}

/// The top-level sections of `kubectl describe` (`Name:`, `Events:` …).
fn sections(out: &str) -> BTreeSet<String> {
    out.lines()
        .filter(|l| !l.starts_with(' ') && !l.starts_with('\t'))
        .filter_map(|l| l.split(':').next())
        .filter(|s| !s.is_empty())
        .map(str::to_string)
        .collect()
}

const POD: &str = r#"{"apiVersion":"v1","kind":"Pod","metadata":{"name":"shape"},
  "spec":{"containers":[{"name":"c","image":"busybox","command":["sleep","3600"]}]}}"#;

/// Makes the pod and waits until it runs and its events tell so.
fn running_pod(b: &Backend) {
    let (made, _, err) = {
        let bin = std::env::var_os("KUBEGATE_REAL_KUBECTL").unwrap_or_else(|| "kubectl".into());
        let mut c = std::process::Command::new(bin);
        c.arg("--kubeconfig")
            .arg(&b.kubeconfig)
            .arg("-n")
            .arg(&b.ns)
            .args(["create", "-f", "-"])
            .stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped());
        let mut child = c.spawn().expect("kubectl");
        use std::io::Write;
        child
            .stdin
            .take()
            .expect("stdin")
            .write_all(POD.as_bytes())
            .expect("write");
        let o = child.wait_with_output().expect("kubectl");
        (
            o.status.success(),
            String::from_utf8_lossy(&o.stdout).into_owned(),
            String::from_utf8_lossy(&o.stderr).into_owned(),
        )
    };
    assert!(made, "create pod on {:?}: {err}", b.kind);
    wait_for("the pod Running", Duration::from_secs(60), || {
        let (_, out, _) = kubectl(
            b,
            &["get", "pod", "shape", "-o", "jsonpath={.status.phase}"],
        );
        (out == "Running").then_some(())
    });
    wait_for("a Scheduled event", Duration::from_secs(60), || {
        ok(b, &["get", "events"])
            .contains("Scheduled")
            .then_some(())
    });
}

#[test]
fn kubectl_prints_the_same_shape_on_the_sim_and_the_real_server() {
    let _w = watchdog(300);
    on_real("kubectl-shapes", |real| {
        let sim = Backend::sim("kubectl-shapes");
        for b in [real, &sim] {
            running_pod(b);
        }
        let mut diffs = Vec::new();
        for args in [
            &["get", "nodes"][..],
            &["get", "nodes", "-o", "wide"],
            &["get", "events"],
            &["get", "events.v1.events.k8s.io"],
            &["get", "serviceaccounts"],
            &["get", "leases", "-n", "kube-node-lease"],
            &["get", "pods", "-o", "wide"],
        ] {
            let (r, s) = (columns(&ok(real, args)), columns(&ok(&sim, args)));
            if r != s {
                diffs.push(format!("{args:?}: real {r:?}, sim {s:?}"));
            }
        }
        let (r, s) = (
            sections(&ok(real, &["describe", "pod", "shape"])),
            sections(&ok(&sim, &["describe", "pod", "shape"])),
        );
        if r != s {
            diffs.push(format!("describe pod: real {r:?}, sim {s:?}"));
        }
        for b in [real, &sim] {
            let (r, s) = (
                ok(b, &["describe", "pod", "shape"]),
                ok(b, &["get", "events"]),
            );
            assert!(r.contains("Scheduled"), "{:?}: {r}", b.kind);
            assert!(s.contains("pod/shape"), "{:?}: {s}", b.kind);
            assert_eq!(
                ok(b, &["auth", "can-i", "create", "pods"]).trim(),
                "yes",
                "{:?}",
                b.kind
            );
            let who = ok(b, &["auth", "whoami"]);
            assert_eq!(columns(&who), ["ATTRIBUTE", "VALUE"], "{:?}: {who}", b.kind);
            assert!(who.contains("Username"), "{:?}: {who}", b.kind);
        }
        assert!(diffs.is_empty(), "{}", diffs.join("\n"));
    });
}
