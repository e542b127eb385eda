#!/usr/bin/env bash
# Benchmarks: builds in release mode, runs each benchmark once, prints a
# table per benchmark. Timings on shared machines are noisy: read medians
# over several runs (BENCH_RUNS) rather than one figure.
set -euo pipefail
cd "$(dirname "$0")/.."
runs="${BENCH_RUNS:-1}"
cargo build --release --tests --locked
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
done
