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
