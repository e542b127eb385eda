//! The exec gateway benchmark through a REAL Kubernetes API server (run by
//! `scripts/bench.sh`, which starts a plane for it; ignored by the test
//! suite). tests/bench_exec.rs measures the gateway against the daemon's
//! embedded sim; here the same figures go through the real control plane
//! of scripts/control-plane.sh (kube-apiserver v1.36.3) to a pod on its sim
//! node (`kubegate sim node`, docs/control-plane.md#the-sim-node), so the
//! API server's exec handling and its stream to the kubelet are in every
//! path, the daemon's and its peers' alike.
//!
//! Set-up: a workspace namespace annotated for the sim node
//! (`common::real_daemon::Namespaces`, as tests/product_real.rs), the
//! workspace Deployment there (`create_deployment`), and `kubegate serve`
//! in `mode = "kubeconfig"` with the plane's ADMIN kubeconfig: a benchmark
//! measures the relay, not the RBAC file (tests/product_real.rs runs the
//! daemon with exactly scripts/rbac.yaml's grants; authorization costs the
//! API server the same for either identity on a cached RBAC lookup).
//!
//! 1. Exec stdout throughput: `head -c 256MiB /dev/zero` (1 to 2 s per
//!    path on this 2-core machine) through the daemon (a tungstenite client
//!    discarding frames) against `kubectl exec` (the plane's own v1.36.3)
//!    straight to the API server, same pod, same command; `kube::remote`
//!    straight to the API server (the daemon's upstream leg alone) as a
//!    breakdown. Bar >= 1.0x kubectl.
//! 2. Keystroke round trip: interactive `cat`, 2,000 single bytes each
//!    timed to its echo, through the daemon, `kube::remote` and `kubectl
//!    exec -i` (`common::exec_bench::figure_keystrokes`, as bench_exec).
//!    "Added by the daemon" = daemon minus `kube::remote`; bar <= 1 ms at
//!    p50 and p99.
//!
//! Medians over `BENCH_RUNS` (default 3) runs, interleaved; nothing here
//! asserts a timing. Without a plane with a sim node (`DIR/env` sourced) it
//! says why on stderr and passes.
//! `cargo test --release --test bench_real -- --ignored --nocapture --test-threads 1`

mod common;

use common::bench::{bar, median};
use common::daemon::{random_token, DaemonProc};
use common::exec_bench::{
    figure_keystrokes, mbps, runs, spread, throughput_direct, throughput_kubectl, throughput_ws,
    Target,
};
use common::real_daemon::{
    config_with, create_deployment, plane_with_sim_node_or_skip, Namespaces, NsOptions, Plane,
    WORKSPACE_UID,
};
use kubegate::kube::config::{load, LoadOptions};
use kubegate::kube::connection::Connection;

const TAG: &str = "bench-real";
const BYTES: u64 = 268_435_456;

fn figure_throughput(plane: &Plane, d: &DaemonProc, conn: &Connection, t: &Target) {
    let runs = runs();
    let (mut k, mut w, mut r) = (Vec::new(), Vec::new(), Vec::new());
    // Interleaved, so drift on a shared machine hits every path alike.
    for i in 0..runs {
        k.push(mbps(BYTES, throughput_kubectl(plane.command(), t, BYTES)));
        w.push(mbps(BYTES, throughput_ws(d, t, BYTES).0));
        r.push(mbps(BYTES, throughput_direct(conn, t, BYTES).0));
        eprintln!(
            "throughput run {}: kubectl {:.0} MB/s, daemon {:.0} MB/s, kube::remote {:.0} MB/s",
            i + 1,
            k[i],
            w[i],
            r[i]
        );
    }
    let km = median(&k);
    println!();
    println!(
        "### exec stdout throughput through the real API server to the sim node: {} MiB of /dev/zero, client discards (MB/s = 10^6 B/s; median of {runs})",
        BYTES >> 20
    );
    println!();
    println!("| path | MB/s | min-max | ratio vs kubectl | bar (>= 1.0x) |");
    println!("|---|---|---|---|---|");
    let row = |name: &str, v: &[f64], verdict: Option<&str>| {
        let (m, (lo, hi)) = (median(v), spread(v));
        let ratio = m / km;
        let verdict = verdict.unwrap_or_else(|| bar(ratio >= 1.0));
        println!("| {name} | {m:.0} | {lo:.0}-{hi:.0} | {ratio:.2} | {verdict} |");
    };
    row(
        "kubectl exec (v1.36.3) straight to the API server",
        &k,
        Some("peer"),
    );
    row(
        "kubegate daemon (kubeconfig mode), WebSocket client",
        &w,
        None,
    );
    row(
        "breakdown: kube::remote straight to the API server (the daemon's upstream leg alone)",
        &r,
        Some("-"),
    );
}

#[test]
#[ignore]
fn bench_real() {
    let _w = common::bench::watchdog("bench_real", 290);
    let Some(plane) = plane_with_sim_node_or_skip("bench_real") else {
        return;
    };
    let node = plane.sim_node.clone().expect("the sim node");
    let ns = Namespaces::create(&plane, TAG, NsOptions::on_sim_node());
    create_deployment(&plane, &ns.workspace);
    let pods = plane.list(&ns.workspace, "pods", "app=hello");
    let [pod] = pods.as_slice() else {
        panic!("one pod of Deployment hello: {pods:#?}");
    };
    assert_eq!(pod["spec"]["nodeName"], node.as_str(), "{pod}");
    let pod = pod["metadata"]["name"].as_str().expect("the pod's name");

    let (token, digest) = random_token();
    let principal = format!(
        "name = \"{TAG}\"\ntoken_sha256 = \"{digest}\"\nworkspaces = [\"{}/{WORKSPACE_UID}\"]\n",
        ns.workspace
    );
    let d = DaemonProc::start_config(
        &config_with(&plane.admin, &ns, "direct", "", "", &principal),
        plane.admin.clone(),
        &token,
        "info",
    );
    let conn = load(&LoadOptions {
        kubeconfig: Some(plane.admin.clone()),
        ..LoadOptions::default()
    })
    .expect("a connection from the plane's admin kubeconfig");
    let t = Target {
        project: ns.workspace.clone(),
        uid: WORKSPACE_UID.into(),
        deployment: "hello".into(),
        pod: pod.into(),
    };

    // Warm-up, and the check that the daemon resolves the same pod.
    let body = serde_json::json!({
        "workspace": {"project": t.project, "uid": t.uid},
        "deployment": t.deployment,
        "command": ["true"],
    });
    let (st, v) = d.json("POST", "/v1/exec", Some(&body));
    assert_eq!(st, 200, "{v}");
    assert_eq!(v["pod"], t.pod.as_str(), "{v}");
    eprintln!(
        "bench_real: daemon {}, API server {} (Kubernetes {}), pod {}/{} on {node}",
        d.url,
        plane.server,
        std::env::var("KUBEGATE_REAL_KUBE_VERSION").unwrap_or_default(),
        t.project,
        t.pod
    );

    figure_throughput(&plane, &d, &conn, &t);
    figure_keystrokes(&d, &conn, &t, || plane.command(), "the API server");
}
