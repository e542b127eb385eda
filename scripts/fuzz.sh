#!/usr/bin/env bash
# Runs every cargo-fuzz target for SECONDS each (default 15). Installs
# cargo-fuzz when missing. The machine has only the stable toolchain;
# cargo-fuzz needs nightly flags (-Zsanitizer), which RUSTC_BOOTSTRAP=1
# allows on stable. Exits non-zero when a target crashes, hangs or leaks.
set -euo pipefail
cd "$(dirname "$0")/.."
secs="${1:-15}"
if ! cargo fuzz --version >/dev/null 2>&1; then
  cargo install cargo-fuzz --locked --quiet
fi
export RUSTC_BOOTSTRAP=1
targets=$(cargo fuzz list)
cargo fuzz build -O
for t in $targets; do
  echo "fuzz: $t for ${secs}s"
  cargo fuzz run -O "$t" -- -max_total_time="$secs" -timeout=5 -rss_limit_mb=2048 2>&1 | tail -1
done
