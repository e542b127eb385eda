#!/usr/bin/env bash
# Runs the whole test suite: formatting, lints, unit and integration tests.
# Builds once; nextest runs test binaries in parallel, each test in its own
# process (every integration test starts its own sim on a free loopback port).
set -euo pipefail
cd "$(dirname "$0")/.."

cargo fmt --check
cargo clippy --all-targets --locked -- -D warnings
cargo build --all-targets --locked
# Moved modules break intra-doc links silently: deny them, and every other
# rustdoc warning, private items included (the maintainers' docs are the
# private ones).
RUSTDOCFLAGS="-D warnings" \
  cargo doc --no-deps --locked --document-private-items
# The real control plane (docs/control-plane.md): built from Go modules
# into a cache outside the checkout, started once for the whole run on
# loopback, stopped when this script exits however it exits. Its tests
# (NAME::real) find it through DIR/env. A machine that cannot build it
# (no Go, or one older than tests/control-plane/go.mod asks) says so in
# the summary; where it can, a failed build or start fails the run, and
# KUBEGATE_REAL_REQUIRED=1 makes every NAME::real test fail rather than
# skip if the plane went missing.
REAL_SUMMARY=
real_summary() { [ -z "$REAL_SUMMARY" ] || echo "$REAL_SUMMARY"; }
trap real_summary EXIT
if [ "${KUBEGATE_REAL:-auto}" = off ]; then
  REAL_SUMMARY="real control plane: SKIPPED (KUBEGATE_REAL=off)"
elif why=$(scripts/control-plane.sh check); then
  REAL_DIR=$(mktemp -d "${TMPDIR:-/tmp}/kubegate-cp.XXXXXX")
  trap 'scripts/control-plane.sh stop "$REAL_DIR" || true; real_summary' EXIT
  # The plane's second Node is this build's `kubegate sim node`
  # (docs/control-plane.md#the-sim-node): the debug binary just built.
  SIM_NODE_BIN=$(cd "${CARGO_TARGET_DIR:-target}" && pwd)/debug/kubegate
  KUBEGATE_BIN=$SIM_NODE_BIN KUBEGATE_CP_OWNER_PID=$$ scripts/control-plane.sh start "$REAL_DIR"
  # shellcheck disable=SC1091
  . "$REAL_DIR/env"
  export KUBEGATE_REAL_REQUIRED=1
  REAL_SUMMARY="real control plane: Kubernetes $KUBEGATE_REAL_KUBE_VERSION, sim node ${KUBEGATE_REAL_SIM_NODE:-SKIPPED}, ready in ${KUBEGATE_REAL_START_SECONDS}s (logs: $REAL_DIR/logs)"
else
  rc=$?
  if [ "$rc" -ne 3 ]; then
    echo "real control plane: $why" >&2
    exit "$rc"
  fi
  REAL_SUMMARY="real control plane: SKIPPED ($why)"
  echo "$REAL_SUMMARY" >&2
fi

if cargo nextest --version >/dev/null 2>&1; then
  cargo nextest run --locked --profile ci "$@"
  # nextest does not run doctests.
  cargo test --doc --locked
else
  cargo test --locked "$@"
fi

# The native-tls build of the client (docs/tls.md): lints, and its TLS
# tests against the sim (REST, watch, exec, client certificates).
cargo clippy --all-targets --locked --features native-tls -- -D warnings
if cargo nextest --version >/dev/null 2>&1; then
  cargo nextest run --locked --profile ci --features native-tls --test kube_native_tls
else
  cargo test --locked --features native-tls --test kube_native_tls
fi
