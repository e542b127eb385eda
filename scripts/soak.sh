#!/usr/bin/env bash
# The soak test (docs/RELIABILITY.md, "The bars" and the rest of the page):
#
#   scripts/soak.sh DURATION [--sessions N] [--execs M] [--seed S] [--real]
#
# --real: on a real control plane instead of the sim (docs/RELIABILITY.md,
# "On a real control plane"): scripts/control-plane.sh starts one here with
# `kubegate sim node` as the node the sessions' pods run on, and the daemon
# reaches its API server through a loopback TCP proxy the driver cuts.
#
# DURATION like 90s, 30m or 1h: the loaded, faulted run after the sessions
# are up. Builds once, starts a `kubegate sim` on a free loopback port and
# a daemon in mode kubeconfig pointed at it (a temporary config and state
# folder), then runs the driver `kubegate-soak`, which prints the table and
# exits non-zero when a bar fails. Both processes are stopped at the end.
#
# SOAK_PROFILE=release (default) or debug: which build to run (CI runs the
# debug build its tests already made). SOAK_KEEP=1 keeps the folder with
# the logs. SOAK_LOG sets RUST_LOG of the daemon and the sim (default warn).
set -euo pipefail
cd "$(dirname "$0")/.."

usage() {
  echo "usage: scripts/soak.sh DURATION [--sessions N] [--execs M] [--seed S] [--real]" >&2
  exit 2
}
[ $# -ge 1 ] || usage
duration=$1
shift
sessions=20
execs=10
seed=1
real=0
while [ $# -gt 0 ]; do
  case "$1" in
    --real) real=1; shift ;;
    --sessions) sessions=${2:?}; shift 2 ;;
    --execs) execs=${2:?}; shift 2 ;;
    --seed) seed=${2:?}; shift 2 ;;
    *) usage ;;
  esac
done
for n in "$sessions" "$execs" "$seed"; do
  case "$n" in ''|*[!0-9]*) usage ;; esac
done
case "$duration" in ''|*[!0-9smh]*) usage ;; esac

profile=${SOAK_PROFILE:-release}
case "$profile" in
  release) cargo build --release --locked --bins; bin=target/release ;;
  debug) cargo build --locked --bins; bin=target/debug ;;
  *) echo "SOAK_PROFILE must be release or debug" >&2; exit 2 ;;
esac
log_level=${SOAK_LOG:-warn}

dir=$(mktemp -d "${TMPDIR:-/tmp}/kubegate-soak.XXXXXX")
sim_pid=""
daemon_pid=""
proxy_pid=""
plane=""

# SIGTERM, then a bounded wait, then SIGKILL: only the processes started here.
stop_pid() {
  local pid=$1
  [ -n "$pid" ] || return 0
  kill -TERM "$pid" 2>/dev/null || return 0
  for _ in $(seq 1 200); do
    kill -0 "$pid" 2>/dev/null || { wait "$pid" 2>/dev/null || true; return 0; }
    sleep 0.1
  done
  echo "soak: $pid did not stop within 20 s; killing it" >&2
  kill -KILL "$pid" 2>/dev/null || true
  wait "$pid" 2>/dev/null || true
}

cleanup() {
  stop_pid "$daemon_pid"
  stop_pid "$sim_pid"
  stop_pid "$proxy_pid"
  if [ -n "$plane" ]; then
    scripts/control-plane.sh stop "$plane" || true
  fi
  if [ "${SOAK_KEEP:-0}" = 1 ]; then
    echo "soak: logs kept in $dir" >&2
  else
    rm -rf "$dir"
  fi
}
trap cleanup EXIT

# The first line of FILE starting with PREFIX, without the prefix; polls
# until it is there, PID died, or 60 s passed.
first_line() {
  local file=$1 prefix=$2 pid=$3 line
  for _ in $(seq 1 600); do
    if line=$(grep -m1 "^$prefix" "$file" 2>/dev/null); then
      printf '%s\n' "${line#"$prefix"}"
      return 0
    fi
    kill -0 "$pid" 2>/dev/null || break
    sleep 0.1
  done
  return 1
}

if [ "$real" = 1 ]; then
  # The real plane, its sim node running this build's kubegate. Every pod
  # of the soak's two namespaces is placed on the sim node (the namespace
  # annotations of docs/control-plane.md#the-sim-node).
  plane="$dir/plane"
  # Pod users pass through here to the node's pods' folders (search only).
  chmod 711 "$dir"
  KUBEGATE_CP_OWNER_PID=$$ KUBEGATE_BIN="$PWD/$bin/kubegate" scripts/control-plane.sh start "$plane" >&2
  # shellcheck disable=SC1091
  . "$plane/env"
  [ -n "${KUBEGATE_REAL_SIM_NODE:-}" ] || { echo "soak: the plane has no sim node" >&2; exit 2; }
  kctl() { "$KUBEGATE_REAL_KUBECTL" --kubeconfig "$KUBEGATE_REAL_KUBECONFIG" --request-timeout=30s "$@"; }
  session_ns=soak-sessions
  for ns in soak "$session_ns"; do
    kctl apply -f - >/dev/null <<NS
apiVersion: v1
kind: Namespace
metadata:
  name: $ns
  annotations:
    scheduler.alpha.kubernetes.io/node-selector: "$KUBEGATE_REAL_SIM_NODE_LABEL"
    scheduler.alpha.kubernetes.io/defaultTolerations: '[{"key":"${KUBEGATE_REAL_SIM_NODE_TAINT%%=*}","operator":"Equal","value":"$(t=${KUBEGATE_REAL_SIM_NODE_TAINT#*=}; echo "${t%%:*}")","effect":"NoSchedule"}]'
NS
  done
  for ns in soak "$session_ns"; do
    for _ in $(seq 1 300); do
      kctl -n "$ns" get serviceaccount default >/dev/null 2>&1 && break
      sleep 0.2
    done
  done
  # The daemon's own way to the API server: a proxy the driver cuts (watch
  # drops, stream cuts, outages), as the sim's /sim/faults would.
  mapfile -t pp < <("$KUBEGATE_REAL_BIN/freeport" 2)
  "$KUBEGATE_REAL_BIN/apiproxy" --listen "127.0.0.1:${pp[0]}" --target "${KUBEGATE_REAL_SERVER#https://}" \
    --control "127.0.0.1:${pp[1]}" --max-conns 4096 </dev/null >"$dir/apiproxy.log" 2>&1 &
  proxy_pid=$!
  proxy_ctl="http://127.0.0.1:${pp[1]}"
  for _ in $(seq 1 100); do curl -fsS "$proxy_ctl/status" >/dev/null 2>&1 && break; sleep 0.1; done
  sed "s#server: .*#server: https://127.0.0.1:${pp[0]}#" "$KUBEGATE_REAL_KUBECONFIG" > "$dir/kubeconfig"
  chmod 600 "$dir/kubeconfig"
  cluster_extra="pod_access = \"direct\"
session_namespace = \"$session_ns\""
  driver_cluster=(--real-kubeconfig "$KUBEGATE_REAL_KUBECONFIG" --proxy "$proxy_ctl" --session-namespace "$session_ns")
  where="real plane (Kubernetes $KUBEGATE_REAL_KUBE_VERSION, node $KUBEGATE_REAL_SIM_NODE), proxy $proxy_ctl (pid $proxy_pid)"
  # The proxy's outage cuts the attach streams too (the sim's keeps them),
  # so the app's output of the whole outage and of the re-attach's
  # back-off (up to 18 s, about 33 KiB) comes back at once from its
  # container log: 32 KiB rings evicted it before a viewer away for a
  # second came back (a gap in 2 of 20 sessions in 2 runs of 4). 64 KiB
  # rings hold it and that second; they fill in about 34 s, inside the
  # warm-up of any run long enough for the RSS bar (420 s).
  ring_bytes=65536
else
# --no-auth: the driver reaches the sim's API and /sim/faults without a
# token (a loopback sim that lives for this run only; the daemon still
# uses the kubeconfig).
RUST_LOG=$log_level "$bin/kubegate" sim --listen 127.0.0.1:0 --no-auth \
  --kubeconfig-out "$dir/kubeconfig" --state-dir "$dir/sim-state" --namespace soak \
  </dev/null >"$dir/sim.out" 2>"$dir/sim.log" &
sim_pid=$!
if ! sim_url=$(first_line "$dir/sim.out" "kubegate sim listening on " "$sim_pid"); then
  echo "soak: the sim did not start; its log:" >&2
  tail -n 30 "$dir/sim.log" >&2
  exit 2
fi
cluster_extra=""
ring_bytes=32768
driver_cluster=(--sim "$sim_url")
where="sim $sim_url (pid $sim_pid)"
fi

# A token for this run only; the daemon keeps its digest.
token=$(od -An -tx1 -N16 /dev/urandom | tr -d ' \n')
digest=$(printf '%s' "$token" | sha256sum | cut -d' ' -f1)
cat >"$dir/kubegate.toml" <<EOF
[server]
listen = "127.0.0.1:0"
state_dir = "$dir/state"
max_connections = 4096
# One principal stands for a whole team here: its keep-alive connections
# and the connections it opens at once are a team's (docs/api.md
# "Admission and limits"); the io and event-stream caps follow
# sessions.max_sessions_per_principal below.
max_connections_per_peer = 4096
max_connections_per_principal = 4096
max_port_streams_per_principal = $((sessions * 4 + 64))

[cluster]
mode = "kubeconfig"
kubeconfig = "$dir/kubeconfig"
$cluster_extra

[exec]
max_sessions = $((execs + 64))
max_sessions_per_principal = $((execs + 32))

[sessions]
max_sessions = $((sessions + 8))
max_sessions_per_principal = $((sessions + 8))
idle_secs = 86400
# Small rings fill during the warm-up, so a full ring is not read as drift
# (docs/RELIABILITY.md); they still hold ~10 s of an app's output, more
# than a reconnecting client is away.
io_ring_bytes = $ring_bytes
# Under app-runner (the default) every output line is also a debug log
# frame in the session's event history: 100 events fill within seconds.
sse_history_events = 100

[[principal]]
name = "soak"
token_sha256 = "$digest"
workspaces = ["soak/soak-uid"]
may_start_sessions = true
EOF

RUST_LOG=$log_level "$bin/kubegate" serve --config "$dir/kubegate.toml" \
  </dev/null >"$dir/daemon.out" 2>"$dir/daemon.log" &
daemon_pid=$!
if ! daemon_url=$(first_line "$dir/daemon.out" "kubegate listening on " "$daemon_pid"); then
  echo "soak: the daemon did not start; its log:" >&2
  tail -n 30 "$dir/daemon.log" >&2
  exit 2
fi

echo "soak: $where, daemon $daemon_url (pid $daemon_pid), $profile build" >&2
rc=0
KUBEGATE_SOAK_TOKEN=$token "$bin/kubegate-soak" \
  --daemon "${daemon_url#http://}" "${driver_cluster[@]}" --daemon-pid "$daemon_pid" \
  --duration "$duration" --sessions "$sessions" --execs "$execs" --seed "$seed" || rc=$?
if [ "$rc" -ne 0 ]; then
  echo "soak: failed ($rc); the daemon's last log lines:" >&2
  tail -n 40 "$dir/daemon.log" >&2
fi
exit "$rc"
