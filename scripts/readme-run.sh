#!/usr/bin/env bash
# Runs the README's "Run it" command exactly as written, from this checkout
# (CI calls it from a fresh clone): starts the daemon on the embedded sim
# with the example config, waits for /readyz, runs one non-interactive exec
# and `workspaces` through it as the README's next lines do, then stops it.
# The README command is read from README.md, so the two cannot drift apart.
#
# It binds the example's 127.0.0.1:7443 and writes ./state (gitignored), as
# a newcomer's first run does; it refuses to start if 7443 already answers.
set -euo pipefail
cd "$(dirname "$0")/.."

run_cmd=$(sed -n '/^## Run it/,/^## /p' README.md | grep -m1 '^cargo run --release -- serve ' || true)
[ -n "$run_cmd" ] || { echo "readme-run: no 'cargo run --release -- serve' line under '## Run it' in README.md" >&2; exit 1; }
url=http://127.0.0.1:7443
if curl -fsS --max-time 2 "$url/healthz" >/dev/null 2>&1; then
  echo "readme-run: something already answers on $url; stop it first" >&2
  exit 1
fi

# Build first, so the wait below is the daemon's start, not the compiler.
cargo build --release --locked --bins

log=$(mktemp "${TMPDIR:-/tmp}/kubegate-readme.XXXXXX")
echo "readme-run: \$ $run_cmd"
bash -c "exec $run_cmd" >"$log" 2>&1 &
pid=$!
stop() {
  kill -TERM "$pid" 2>/dev/null || return 0
  for _ in $(seq 1 200); do
    kill -0 "$pid" 2>/dev/null || { wait "$pid" 2>/dev/null || true; return 0; }
    sleep 0.1
  done
  echo "readme-run: the daemon did not stop within 20 s; killing it" >&2
  kill -KILL "$pid" 2>/dev/null || true
  wait "$pid" 2>/dev/null || true
}
fail() {
  echo "readme-run: $*" >&2
  echo "--- the daemon's output:" >&2
  tail -n 40 "$log" >&2
  stop
  exit 1
}
trap stop EXIT

ready=""
for _ in $(seq 1 600); do
  kill -0 "$pid" 2>/dev/null || fail "the daemon exited before it was ready"
  if curl -fsS --max-time 2 "$url/readyz" >/dev/null 2>&1; then ready=1; break; fi
  sleep 0.1
done
[ -n "$ready" ] || fail "no 200 from $url/readyz within 60 s"
grep -q "kubegate listening on $url" "$log" || fail "the README's line 'kubegate listening on $url' was not printed"

# The README's exec, non-interactive. The demo Deployment's pod may still be
# starting right after ready: retried for up to 60 s.
export KUBEGATE_TOKEN=kubegate-demo-token
ok=""
for _ in $(seq 1 60); do
  if out=$(cargo run --release --locked -- exec --workspace demo/demo-uid hello -- true 2>&1); then ok=1; break; fi
  sleep 1
done
[ -n "$ok" ] || fail "kubegate exec --workspace demo/demo-uid hello -- true failed for 60 s: $out"
cargo run --release --locked -- workspaces | grep -q 'demo' || fail "kubegate workspaces does not list demo"
echo "readme-run: the README's run command served /readyz, an exec and workspaces"
