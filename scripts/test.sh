#!/usr/bin/env bash
# Runs the whole test suite: formatting, lints, unit and integration tests.
# Builds once; nextest runs test binaries in parallel, each test in its own
# process (every integration test starts its own sim on a free loopback port).
set -euo pipefail
cd "$(dirname "$0")/.."

cargo fmt --check
cargo clippy --all-targets --locked -- -D warnings
cargo build --all-targets --locked
if cargo nextest --version >/dev/null 2>&1; then
  cargo nextest run --locked --profile ci "$@"
  # nextest does not run doctests.
  cargo test --doc --locked
else
  cargo test --locked "$@"
fi
