#!/usr/bin/env bash
# Benchmarks: builds in release mode, runs each benchmark once, prints a
# table per benchmark. Timings on shared machines are noisy: read medians
# over several runs (BENCH_RUNS) rather than one figure.
set -euo pipefail
cd "$(dirname "$0")/.."
runs="${BENCH_RUNS:-1}"
cargo build --release --tests --locked

# The exec gateway through a real API server (tests/bench_real.rs): a real
# control plane (docs/control-plane.md) of its own for each run, its sim
# node this release build, on pod blocks that stay clear of another plane
# on the host (the defaults are 127.243/16 and 127.244/16), started only
# for its section so it does not load the machine under the others, and
# stopped however this script exits (its logs are then kept and named).
# A machine that cannot build the plane (`control-plane.sh check` exits 3:
# no Go, or too old) says SKIPPED; any other failure fails.
kubegate_bin="$(cd "${CARGO_TARGET_DIR:-target}" && pwd)/release/kubegate"
real_plane=""
stop_real_plane() {
  [ -n "$real_plane" ] || return 0
  scripts/control-plane.sh stop "$real_plane" || true
  echo "bench: the real plane's logs are in $real_plane/logs" >&2
  real_plane=""
}
trap stop_real_plane EXIT
bench_real() {
  local why rc
  if why=$(scripts/control-plane.sh check); then :; else
    rc=$?
    [ "$rc" -eq 3 ] || { echo "real control plane: $why" >&2; exit "$rc"; }
    echo "SKIPPED: no real control plane on this machine ($why)"
    return 0
  fi
  real_plane=$(mktemp -d "${TMPDIR:-/tmp}/kubegate-bench-cp.XXXXXX")
  KUBEGATE_CP_POD_CIDR=127.247.0.0/16 KUBEGATE_CP_SIM_NODE_CIDR=127.248.0.0/16 \
    KUBEGATE_BIN="$kubegate_bin" KUBEGATE_CP_OWNER_PID=$$ \
    scripts/control-plane.sh start "$real_plane" >&2
  (
    # shellcheck disable=SC1091
    . "$real_plane/env"
    KUBEGATE_REAL_REQUIRED=1 cargo test --release --locked --test bench_real -- --ignored --nocapture --test-threads 1 2>&1
  ) | grep -E '^(\||###)' || { echo "bench_real failed"; exit 1; }
  scripts/control-plane.sh stop "$real_plane"
  rm -rf "$real_plane"
  real_plane=""
}

for i in $(seq 1 "$runs"); do
  echo "## sim scale (run $i of $runs)"
  cargo test --release --locked --test bench_sim -- --ignored --nocapture --test-threads 1 2>&1 \
    | grep -E '^\|' || { echo "bench_sim failed"; exit 1; }
  echo
  echo "## exec stdout throughput: kube::remote vs kubectl exec, same sim (run $i of $runs)"
  echo "bar: ratio >= 1.0"
  cargo test --release --locked --test kube_remote bench_exec_throughput -- --ignored --nocapture 2>&1 \
    | grep -E '^\|' || { echo "bench_exec_throughput failed"; exit 1; }
  echo
  echo "## exec gateway: one daemon vs the same embedded sim reached directly (run $i of $runs)"
  cargo test --release --locked --test bench_exec -- --ignored --nocapture --test-threads 1 2>&1 \
    | grep -E '^(\||###)' || { echo "bench_exec failed"; exit 1; }
  echo
  echo "## watch sessions: start overhead and idle footprint, a daemon against a separate sim (run $i of $runs)"
  cargo test --release --locked --test bench_sessions -- --ignored --nocapture --test-threads 1 2>&1 \
    | grep -E '^(\||###)' || { echo "bench_sessions failed"; exit 1; }
  echo
  echo "## kubegate dev: edit-to-restart latency, embedded sim, app under the app runner (run $i of $runs)"
  echo "bar: p99 <= 300 ms (debounce included)"
  cargo test --release --locked --test bench_dev -- --ignored --nocapture --test-threads 1 2>&1 \
    | grep -E '^(\||###)' || { echo "bench_dev failed"; exit 1; }
  echo
  echo "## TCP tunnels: kubegate port-forward through the daemon (direct, api-proxy) vs kubectl port-forward straight to the sim (run $i of $runs)"
  echo "bar: direct >= 1.0x kubectl, both directions"
  cargo test --release --locked --test bench_tunnels -- --ignored --nocapture --test-threads 1 2>&1 \
    | grep -E '^(\||###)' || { echo "bench_tunnels failed"; exit 1; }
  echo
  echo "## OIDC principals: whoami per fresh connection, an RS256 ID token vs a static token, same daemon (run $i of $runs)"
  cargo test --release --locked --test bench_auth -- --ignored --nocapture --test-threads 1 2>&1 \
    | grep -E '^\|' || { echo "bench_auth failed"; exit 1; }
  echo
  echo "## hostile clients: unauthenticated 90 MB uploads, slow half-open heads (run $i of $runs)"
  echo "bars: RSS growth < 32 KiB per upload connection, every upload 401; /healthz p99 <= 200 ms and an exec succeeds beside the slow heads"
  cargo test --release --locked --test bench_hostile -- --ignored --nocapture --test-threads 1 2>&1 \
    | grep -E '^(\||###)' || { echo "bench_hostile failed"; exit 1; }
  echo
  echo "## exec gateway through a real API server: one daemon (kubeconfig mode) vs kubectl exec, to a pod on the real plane's sim node (run $i of $runs)"
  echo "bars: throughput >= 1.0x kubectl; added by the daemon <= 1 ms at p50 and p99"
  bench_real
done
