#!/usr/bin/env bash
# A real Kubernetes control plane on loopback for kubegate's tests
# (docs/control-plane.md says what runs, how, and why).
#
#   scripts/control-plane.sh check        can it run here? exit 3 + reason if not
#   scripts/control-plane.sh build        build (or reuse) the cached binaries
#   scripts/control-plane.sh bin          print the cached bin folder (builds if needed)
#   scripts/control-plane.sh start DIR    start etcd, kube-apiserver, its proxy for the sim
#                                         node, controller-manager, scheduler, kwok and
#                                         `kubegate sim node`; write DIR/env and kubeconfigs
#   scripts/control-plane.sh stop DIR     stop everything start put in DIR
#
# Everything listens on 127.0.0.1 on ports picked at start. Binaries are built
# from the Go module in tests/control-plane/ (nothing but Go modules is
# downloaded) into ${XDG_CACHE_HOME:-$HOME/.cache}/kubegate/control-plane/<key>/,
# where <key> hashes every pinned version and the build flags.
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
MODULE="$ROOT/tests/control-plane"
CACHE_ROOT="${XDG_CACHE_HOME:-$HOME/.cache}/kubegate/control-plane"

# The versions the module pins. Written into DIR/env and the ldflags; the
# check below makes sure go.mod agrees, so they cannot drift apart silently.
KUBE_VERSION=v1.36.3
KUBE_MINOR=36
ETCD_VERSION=v3.6.8
KWOK_VERSION=v0.8.0
# The Gateway API CRDs (standard channel), from a module of their own beside
# the main one (tests/control-plane/gateway-api/go.mod says why).
GATEWAY_API_VERSION=v1.6.3
GATEWAY_MODULE="$MODULE/gateway-api"

# Exit code for "this machine cannot run the real control plane" (check).
EXIT_UNAVAILABLE=3

# How long start waits for each component before it gives up (seconds).
WAIT_SECONDS=${KUBEGATE_CP_WAIT_SECONDS:-60}

# The pinned staging modules take their version from the k8s.io/kubernetes
# release; without these the binaries report v0.0.0-master+$Format:%H$,
# which kubectl and client libraries cannot parse.
LDFLAGS="-s -w \
 -X k8s.io/component-base/version.gitVersion=$KUBE_VERSION \
 -X k8s.io/component-base/version.gitMajor=1 \
 -X k8s.io/component-base/version.gitMinor=$KUBE_MINOR \
 -X k8s.io/component-base/version.gitTreeState=clean \
 -X k8s.io/client-go/pkg/version.gitVersion=$KUBE_VERSION \
 -X k8s.io/client-go/pkg/version.gitMajor=1 \
 -X k8s.io/client-go/pkg/version.gitMinor=$KUBE_MINOR"

# The packages built, and the file name each gets in bin/.
PACKAGES=(
  k8s.io/kubernetes/cmd/kube-apiserver
  k8s.io/kubernetes/cmd/kube-controller-manager
  k8s.io/kubernetes/cmd/kube-scheduler
  k8s.io/kubernetes/cmd/kubectl
  kubegate.test/control-plane/apiproxy
  kubegate.test/control-plane/etcd
  kubegate.test/control-plane/freeport
  sigs.k8s.io/kwok/cmd/kwok
)
BINARIES=(kube-apiserver kube-controller-manager kube-scheduler kubectl apiproxy etcd freeport kwok)

# kwok's lifecycle stages, copied from its module at build time (they are
# YAML beside the Go code, not compiled in): the Node becomes Ready and keeps
# a Lease; pods go Running (with an IP), complete, and go away when deleted.
STAGE_FILES=(
  kustomize/stage/node/fast/node-initialize.yaml
  kustomize/stage/node/heartbeat-with-lease/node-heartbeat-with-lease.yaml
  kustomize/stage/pod/fast/pod-ready.yaml
  kustomize/stage/pod/fast/pod-complete.yaml
  kustomize/stage/pod/fast/pod-delete.yaml
)

# The Gateway API's standard channel, copied from its module at build time
# into the cache's gateway-api/ (YAML, not compiled) and applied at start:
# every file of this folder (the CRDs, and the ValidatingAdmissionPolicy
# that guards them against a downgrade or an experimental overwrite). The
# daemon's routes need these three; the build fails without them.
GATEWAY_CRD_DIR=config/crd/standard
GATEWAY_CRDS_NEEDED=(gatewayclasses gateways httproutes)

die() { echo "control-plane: $*" >&2; exit 1; }
log() { echo "control-plane: $*" >&2; }

# ---------------------------------------------------------------- check

# Prints why the real control plane cannot run here and returns 3, or
# returns 0. Only things a missing tool explains: a build or start that
# fails where the tools are present is a failure, not a skip.
check() {
  local need
  for tool in go openssl flock sha256sum; do
    command -v "$tool" >/dev/null 2>&1 || { echo "no $tool on PATH"; return $EXIT_UNAVAILABLE; }
  done
  # The go line of go.mod is the oldest Go that can build the module; a Go
  # older than that would try to fetch a toolchain (or refuse). Compare
  # with sort -V rather than trusting GOTOOLCHAIN settings.
  need=$(awk '$1 == "go" { print $2; exit }' "$MODULE/go.mod")
  local have
  have=$(GOTOOLCHAIN=local go env GOVERSION 2>/dev/null | sed 's/^go//') || { echo "go env failed"; return $EXIT_UNAVAILABLE; }
  have=${have%%-*}   # drop a suffix such as -X:nodwarf5 or -devel
  if [ "$(printf '%s\n%s\n' "$need" "$have" | sort -V | head -n1)" != "$need" ]; then
    echo "Go $have is older than go $need that tests/control-plane/go.mod requires"
    return $EXIT_UNAVAILABLE
  fi
  # The pins in this script must be the ones go.mod holds (tool modules
  # are marked // indirect there).
  local pin
  for pin in "k8s.io/kubernetes $KUBE_VERSION" "go.etcd.io/etcd/server/v3 $ETCD_VERSION" "sigs.k8s.io/kwok $KWOK_VERSION"; do
    grep -Eq "^(require)?[[:space:]]*$pin( |\$)" "$MODULE/go.mod" \
      || { echo "tests/control-plane/go.mod does not pin $pin (script and module disagree: a bug, not a skip)"; return 1; }
  done
  pin="sigs.k8s.io/gateway-api $GATEWAY_API_VERSION"
  grep -Eq "^(require)?[[:space:]]*$pin( |\$)" "$GATEWAY_MODULE/go.mod" \
    || { echo "tests/control-plane/gateway-api/go.mod does not pin $pin (script and module disagree: a bug, not a skip)"; return 1; }
  # Its go line, too (the check above read only the main module's).
  need=$(awk '$1 == "go" { print $2; exit }' "$GATEWAY_MODULE/go.mod")
  if [ "$(printf '%s\n%s\n' "$need" "$have" | sort -V | head -n1)" != "$need" ]; then
    echo "Go $have is older than go $need that tests/control-plane/gateway-api/go.mod requires"
    return $EXIT_UNAVAILABLE
  fi
  return 0
}

# ---------------------------------------------------------------- build

# The cache key: every input that changes what gets built. go.mod and go.sum
# pin every module version; the wrapper sources; the flags; the Go release
# and target (a different compiler makes different binaries).
cache_key() {
  {
    cat "$MODULE/go.mod" "$MODULE/go.sum" "$GATEWAY_MODULE/go.mod" "$GATEWAY_MODULE/go.sum"
    find "$MODULE" -name '*.go' | LC_ALL=C sort | xargs cat
    printf '%s\n' "$LDFLAGS" "${PACKAGES[@]}" "${STAGE_FILES[@]}" "$GATEWAY_CRD_DIR" "${GATEWAY_CRDS_NEEDED[@]}"
    go env GOVERSION GOOS GOARCH
    sed -n '/^# ---- build-recipe ----/,/^# ---- end build-recipe ----/p' "$0"
  } | sha256sum | cut -c1-16
}

# Builds into a temporary folder and renames it into place, under a lock,
# so parallel callers (several test binaries) build once and nobody ever
# sees a half-written bin/. Prints the cache folder.
build() {
  local why
  why=$(check) || die "cannot build: $why"
  local key dir lock
  key=$(cache_key)
  dir="$CACHE_ROOT/$key"
  [ -x "$dir/bin/kube-apiserver" ] && { echo "$dir"; return 0; }
  mkdir -p "$CACHE_ROOT"
  lock="$CACHE_ROOT/$key.lock"
  exec 9>"$lock"
  if ! flock -n 9; then
    log "another build of $key is running; waiting for it"
    flock 9
  fi
  if [ ! -x "$dir/bin/kube-apiserver" ]; then
    build_into "$dir"
  fi
  exec 9>&-
  echo "$dir"
}

# ---- build-recipe ----
build_into() {
  local dir=$1 tmp start
  tmp=$(mktemp -d "$CACHE_ROOT/.build.XXXXXX")
  # A failed or interrupted build leaves no half-made folder behind.
  BUILD_TMP=$tmp
  trap 'rm -rf "$BUILD_TMP"' EXIT
  start=$(date +%s)
  log "building Kubernetes $KUBE_VERSION, etcd $ETCD_VERSION and kwok $KWOK_VERSION (and copying the Gateway API $GATEWAY_API_VERSION CRDs) into $dir (a cold build takes several minutes)"
  mkdir -p "$tmp/bin" "$tmp/stages"
  # -mod=readonly: go.mod and go.sum are committed and must be complete;
  # a build never edits them. CGO off: static binaries, no C toolchain.
  # GOTOOLCHAIN=local: build with the Go that check approved, never fetch
  # another toolchain because of go.mod's go line.
  (cd "$MODULE" && CGO_ENABLED=0 GOTOOLCHAIN=local go build -mod=readonly -trimpath \
      -ldflags "$LDFLAGS" -o "$tmp/bin/" "${PACKAGES[@]}") \
    || die "go build failed (tests/control-plane)"
  local b
  for b in "${BINARIES[@]}"; do
    [ -x "$tmp/bin/$b" ] || die "go build made no $b"
  done
  local kwok_dir
  kwok_dir=$(cd "$MODULE" && GOTOOLCHAIN=local go list -mod=readonly -m -f '{{.Dir}}' sigs.k8s.io/kwok) \
    || die "cannot find the kwok module"
  local f
  for f in "${STAGE_FILES[@]}"; do
    cp "$kwok_dir/$f" "$tmp/stages/" || die "kwok $KWOK_VERSION has no $f"
  done
  chmod -R u+w "$tmp/stages"   # the module cache is read-only
  # The Gateway API CRDs: downloaded (and checked against go.sum) by their
  # own module, then copied as they are.
  local gw_dir
  gw_dir=$(cd "$GATEWAY_MODULE" && GOTOOLCHAIN=local go mod download -json sigs.k8s.io/gateway-api \
    | awk -F'"' '$2 == "Dir" { print $4 }') || die "cannot download the gateway-api module"
  if [ -z "$gw_dir" ] || ! [ -d "$gw_dir/$GATEWAY_CRD_DIR" ]; then
    die "gateway-api $GATEWAY_API_VERSION has no $GATEWAY_CRD_DIR"
  fi
  mkdir -p "$tmp/gateway-api"
  cp "$gw_dir/$GATEWAY_CRD_DIR"/*.yaml "$tmp/gateway-api/" || die "cannot copy gateway-api $GATEWAY_CRD_DIR"
  for f in "${GATEWAY_CRDS_NEEDED[@]}"; do
    [ -f "$tmp/gateway-api/gateway.networking.k8s.io_$f.yaml" ] || die "gateway-api $GATEWAY_API_VERSION has no $f CRD"
  done
  chmod -R u+w "$tmp/gateway-api"
  printf 'built %s in %ss with %s\n' "$(date -u +%FT%TZ)" "$(( $(date +%s) - start ))" "$(go env GOVERSION)" > "$tmp/BUILD"
  # Atomic: either the whole folder appears or none of it.
  mv -T "$tmp" "$dir"
  trap - EXIT
  log "built in $(( $(date +%s) - start ))s"
}
# ---- end build-recipe ----

# ---------------------------------------------------------------- start

NODE_NAME=kwok-node-0
NODE_LABEL=kubegate.test/node=kwok
# Both pod blocks can be moved (KUBEGATE_CP_POD_CIDR,
# KUBEGATE_CP_SIM_NODE_CIDR) so that a second plane on the same host (a
# benchmark beside a test run) has pod IPs of its own; keep them out of
# the embedded sims' 127.1-127.239 (docs/sim.md).
POD_CIDR=${KUBEGATE_CP_POD_CIDR:-127.243.0.0/16}
# The second Node: kubegate's simulated kubelet (`kubegate sim node`), which
# runs pods as local processes. Its taint keeps every pod off it but those
# of namespaces that ask for it (PodNodeSelector and PodTolerationRestriction
# annotations, docs/control-plane.md#the-sim-node); its pod IPs come from a
# loopback block of their own.
SIM_NODE_NAME=kubegate-node-0
SIM_NODE_LABEL=kubegate.test/node=sim
SIM_NODE_TAINT=kubegate.test/node=sim:NoSchedule
# What the sim node offers the scheduler: its pods are host processes that
# no request or limit binds, so it offers what the tests and the soak ask
# for at once (each session's containers request up to 1 CPU and 1 GiB),
# not the host's two CPUs.
SIM_NODE_CAPACITY=cpu=512,memory=2Ti,pods=5000
SIM_NODE_CIDR=${KUBEGATE_CP_SIM_NODE_CIDR:-127.244.0.0/16}
# Two users in different groups besides the admin; no RBAC binds them, so
# tests grant exactly what they mean to test.
USERS=(alice bob)
declare -A USER_GROUP=([alice]=kubegate-devs [bob]=kubegate-ops)
# Every component start may launch, in the order it launches them; stop
# stops them in the reverse order of DIR/pids, so the sim node goes before
# kwok, the proxy and the API server. launch refuses a name not listed.
COMPONENTS=(etcd kube-apiserver apiproxy kube-controller-manager kube-scheduler kwok sim-node)

# A random bearer token. Tokens are made fresh for each start, so a DIR's
# credentials are never reused and never committed.
new_token() { openssl rand -hex 24; }

# The CA, the serving certificates and the service-account key pair.
# ECDSA P-256: quick to generate, and every TLS stack kubegate uses takes it.
make_pki() {
  local pki=$1
  mkdir -p "$pki"
  (
    cd "$pki"
    openssl ecparam -name prime256v1 -genkey -noout -out ca.key 2>/dev/null
    openssl req -x509 -new -key ca.key -sha256 -days 30 -subj "/CN=kubegate-test-ca" \
      -addext "basicConstraints=critical,CA:TRUE" -addext "keyUsage=critical,keyCertSign,cRLSign" \
      -out ca.crt 2>/dev/null
    # A second CA for one certificate: the API server's client certificate
    # towards kubelets. The sim node trusts only this CA for clients
    # (--client-ca-file), so no other holder of a cluster-CA certificate (a
    # user, a controller, the node itself) can call its kubelet API, and the
    # API server's --client-ca-file (ca.crt) does not authenticate it.
    openssl ecparam -name prime256v1 -genkey -noout -out kubelet-client-ca.key 2>/dev/null
    openssl req -x509 -new -key kubelet-client-ca.key -sha256 -days 30 -subj "/CN=kubegate-test-kubelet-client-ca" \
      -addext "basicConstraints=critical,CA:TRUE" -addext "keyUsage=critical,keyCertSign,cRLSign" \
      -out kubelet-client-ca.crt 2>/dev/null
    # issue NAME SUBJECT EXTENSIONS [CA]: a key and a certificate signed by
    # CA (the file stem; default ca).
    issue() {
      local ca=${4:-ca}
      openssl ecparam -name prime256v1 -genkey -noout -out "$1.key" 2>/dev/null
      openssl req -new -key "$1.key" -subj "$2" -out "$1.csr" 2>/dev/null
      printf '%s\n' "$3" > "$1.ext"
      openssl x509 -req -in "$1.csr" -CA "$ca.crt" -CAkey "$ca.key" -CAcreateserial -sha256 -days 30 \
        -extfile "$1.ext" -out "$1.crt" 2>/dev/null
      rm -f "$1.csr" "$1.ext"
    }
    # The API server: every name a client in or out of the cluster uses.
    issue apiserver "/CN=kube-apiserver" "basicConstraints=CA:FALSE
keyUsage=critical,digitalSignature
extendedKeyUsage=serverAuth
subjectAltName=IP:127.0.0.1,DNS:localhost,DNS:kubernetes,DNS:kubernetes.default,DNS:kubernetes.default.svc,DNS:kubernetes.default.svc.cluster.local,IP:10.0.0.1"
    # kwok's kubelet API, which the API server verifies (--kubelet-certificate-authority)
    # at the Node's InternalIP 127.0.0.1.
    issue kubelet "/CN=system:node:$NODE_NAME/O=system:nodes" "basicConstraints=CA:FALSE
keyUsage=critical,digitalSignature
extendedKeyUsage=serverAuth
subjectAltName=IP:127.0.0.1,DNS:$NODE_NAME"
    # The sim node's kubelet API, likewise (serverAuth for 127.0.0.1 and its
    # name), from the CA the API server verifies kubelets with.
    issue sim-node-serving "/CN=$SIM_NODE_NAME" "basicConstraints=CA:FALSE
keyUsage=critical,digitalSignature
extendedKeyUsage=serverAuth
subjectAltName=IP:127.0.0.1,DNS:$SIM_NODE_NAME"
    # The sim node's identity towards the API server, as a kubelet's client
    # certificate: the Node authorizer and NodeRestriction know it by
    # CN system:node:NAME in O system:nodes.
    issue sim-node-client "/CN=system:node:$SIM_NODE_NAME/O=system:nodes" "basicConstraints=CA:FALSE
keyUsage=critical,digitalSignature
extendedKeyUsage=clientAuth"
    # The API server's client certificate towards kubelets, as kubeadm makes
    # it, from the kubelet-client CA only (kwok checks no client certificate;
    # the sim node checks it against that CA).
    issue apiserver-kubelet-client "/CN=kube-apiserver-kubelet-client/O=kubeadm:cluster-admins" "basicConstraints=CA:FALSE
keyUsage=critical,digitalSignature
extendedKeyUsage=clientAuth" kubelet-client-ca
    # An admin that authenticates with a client certificate instead of a
    # token (the API server's --client-ca-file is this CA): CN is the user,
    # O the group.
    issue admin-cert "/CN=kubegate-admin-cert/O=system:masters" "basicConstraints=CA:FALSE
keyUsage=critical,digitalSignature
extendedKeyUsage=clientAuth"
    # Service-account tokens: the API server signs with sa.key, checks with sa.pub.
    openssl ecparam -name prime256v1 -genkey -noout -out sa.key 2>/dev/null
    openssl ec -in sa.key -pubout -out sa.pub 2>/dev/null
    chmod 600 ./*.key
  )
}

# write_kubeconfig FILE USER CREDENTIALS...: a kubeconfig with the CA and
# the credentials embedded (`key: value` lines of its user entry), so the
# file works wherever it is copied. Its server is $SERVER, or
# $KUBECONFIG_SERVER when set (the proxy, for the sim node).
write_kubeconfig() {
  local file=$1 user=$2 line creds=""
  shift 2
  for line in "$@"; do creds+="    $line"$'\n'; done
  cat > "$file" <<EOF
apiVersion: v1
kind: Config
clusters:
- name: kubegate-real
  cluster:
    server: ${KUBECONFIG_SERVER:-$SERVER}
    certificate-authority-data: $(base64 -w0 < "$DIR/pki/ca.crt")
users:
- name: $user
  user:
${creds%$'\n'}
contexts:
- name: $user@kubegate-real
  context:
    cluster: kubegate-real
    user: $user
    namespace: default
current-context: $user@kubegate-real
EOF
  chmod 600 "$file"
}

# A token user's kubeconfig: FILE USER TOKEN.
token_kubeconfig() { write_kubeconfig "$1" "$2" "token: $3"; }

# kwok's configuration: the lifecycle stages from its module, and what its
# kubelet API does for exec, port-forward, logs and attach.
write_kwok_config() {
  local file=$1 stage
  : > "$file"
  for stage in "$CACHE_DIR"/stages/*.yaml; do
    cat "$stage" >> "$file"
    printf '\n---\n' >> "$file"
  done
  cat >> "$file" <<EOF
# kubectl exec runs the command on this machine, as the user running kwok,
# in a scratch folder of DIR (kwok has no containers).
apiVersion: kwok.x-k8s.io/v1alpha1
kind: ClusterExec
metadata:
  name: kubegate-local-exec
spec:
  execs:
  - local:
      workDir: $DIR/exec
---
# kubectl port-forward: pod port 7 echoes (cat); every other pod port goes
# to 127.0.0.1:$FORWARD_PORT, where a test may listen (see DIR/env).
apiVersion: kwok.x-k8s.io/v1alpha1
kind: ClusterPortForward
metadata:
  name: kubegate-local-forward
spec:
  forwards:
  - ports: [7]
    command: [cat]
  - target:
      address: 127.0.0.1
      port: $FORWARD_PORT
---
# kubectl logs and attach read this file (tests may append to it).
apiVersion: kwok.x-k8s.io/v1alpha1
kind: ClusterLogs
metadata:
  name: kubegate-local-logs
spec:
  logs:
  - logsFile: $DIR/logs/pods.log
    follow: true
---
apiVersion: kwok.x-k8s.io/v1alpha1
kind: ClusterAttach
metadata:
  name: kubegate-local-attach
spec:
  attaches:
  - logsFile: $DIR/logs/pods.log
EOF
}

# launch NAME ARGS...: runs the component in its own session (so a signal to
# the caller's process group does not reach it, and stop owns its fate),
# stdout and stderr in DIR/logs/NAME.log, and records its pid in DIR/pids.
launch() {
  local name=$1; shift
  launch_exe "$name" "$BIN/$name" "$@"
}

# launch_exe NAME EXE ARGS...: the same for a binary from elsewhere. EXE
# must be the canonical path: stop compares it with /proc/PID/exe.
launch_exe() {
  local name=$1 exe=$2; shift 2
  [[ " ${COMPONENTS[*]} " == *" $name "* ]] || die "launch: $name is not in COMPONENTS"
  setsid "$exe" "$@" > "$DIR/logs/$name.log" 2>&1 < /dev/null &
  echo "$name $! $exe" >> "$DIR/pids"
}

# fail NAME WHAT: the start cannot go on; say which component and where
# its log is, show the log's tail, and let the EXIT trap stop everything.
fail() {
  local name=$1 what=$2 logf="$DIR/logs/$1.log"
  echo "control-plane: $name: $what (log: $logf)" >&2
  if [ -s "$logf" ]; then
    echo "---- last lines of $logf ----" >&2
    tail -n 20 "$logf" >&2
    echo "----" >&2
  fi
  exit 1
}

# alive NAME: is the component start launched still running?
alive() {
  local pid
  pid=$(awk -v n="$1" '$1 == n { print $2 }' "$DIR/pids")
  [ -n "$pid" ] && kill -0 "$pid" 2>/dev/null
}

# wait_for NAME WHAT COMMAND...: runs COMMAND every 0.2 s until it succeeds,
# for at most WAIT_SECONDS; fails naming the component if it exits or the
# time runs out.
wait_for() {
  local name=$1 what=$2; shift 2
  local deadline=$(( $(date +%s) + WAIT_SECONDS ))
  until "$@" >/dev/null 2>&1; do
    alive "$name" || fail "$name" "exited while waiting for $what"
    [ "$(date +%s)" -lt "$deadline" ] || fail "$name" "no $what after ${WAIT_SECONDS}s"
    sleep 0.2
  done
}

admin_kubectl() { "$BIN/kubectl" --kubeconfig "$DIR/admin.kubeconfig" --request-timeout=5s "$@"; }

# node_ready NODE: its Ready condition is True.
node_ready() {
  [ "$(admin_kubectl get node "$1" -o 'jsonpath={.status.conditions[?(@.type=="Ready")].status}')" = True ]
}
# node_taints_are NODE [KEY=VALUE:EFFECT...]: the Node's taints are exactly
# these (none when none are given), in any order.
node_taints_are() {
  local have want
  have=$(admin_kubectl get node "$1" -o 'jsonpath={range .spec.taints[*]}{.key}={.value}:{.effect}{"\n"}{end}') || return 1
  shift
  want=$(printf '%s\n' "$@" | sed '/^$/d' | LC_ALL=C sort)
  [ "$(printf '%s\n' "$have" | sed '/^$/d' | LC_ALL=C sort)" = "$want" ]
}

# crd_established NAME: the CRD's Established condition is True.
crd_established() {
  [ "$(admin_kubectl get crd "$1" -o 'jsonpath={.status.conditions[?(@.type=="Established")].status}')" = True ]
}
# gateway_discovered: /apis lists gateway.networking.k8s.io and its v1 lists
# every resource the daemon's routes need.
gateway_discovered() {
  local apis v1 r
  apis=$(admin_kubectl get --raw /apis) || return 1
  [[ $apis == *'"gateway.networking.k8s.io/v1"'* ]] || return 1
  v1=$(admin_kubectl get --raw /apis/gateway.networking.k8s.io/v1) || return 1
  for r in "${GATEWAY_CRDS_NEEDED[@]}"; do
    [[ $v1 == *"\"name\":\"$r\""* ]] || return 1
  done
}

# The sim node's binary: $KUBEGATE_BIN (an absolute path), else the
# checkout's debug build. Sets SIM_NODE_EXE (canonical, for stop's check),
# or leaves it empty when KUBEGATE_CP_SIM_NODE=0 skips the sim node.
resolve_sim_node() {
  SIM_NODE_EXE=
  if [ "${KUBEGATE_CP_SIM_NODE:-1}" = 0 ]; then
    log "sim node: skipped (KUBEGATE_CP_SIM_NODE=0); only kwok's Node runs"
    return 0
  fi
  local exe
  if [ -n "${KUBEGATE_BIN:-}" ]; then
    case "$KUBEGATE_BIN" in
      /*) ;;
      *) die "KUBEGATE_BIN must be an absolute path (it is '$KUBEGATE_BIN')" ;;
    esac
    if ! [ -f "$KUBEGATE_BIN" ] || ! [ -x "$KUBEGATE_BIN" ]; then
      die "KUBEGATE_BIN=$KUBEGATE_BIN is not an executable file (the sim node runs \`kubegate sim node\`)"
    fi
    exe=$KUBEGATE_BIN
  elif [ -f "$ROOT/target/debug/kubegate" ] && [ -x "$ROOT/target/debug/kubegate" ]; then
    exe=$ROOT/target/debug/kubegate
  else
    die "no kubegate binary for the sim node: set KUBEGATE_BIN to one (absolute path), build $ROOT/target/debug/kubegate (cargo build --bin kubegate), or set KUBEGATE_CP_SIM_NODE=0 to run without the sim node"
  fi
  SIM_NODE_EXE=$(readlink -f "$exe")
}

start() {
  DIR=${1:?usage: $0 start DIR}
  mkdir -p "$DIR"
  DIR=$(cd "$DIR" && pwd)
  if [ -s "$DIR/pids" ]; then
    die "$DIR already has a control plane (pids file); run: $0 stop $DIR"
  fi
  CACHE_DIR=$(build)
  BIN="$CACHE_DIR/bin"
  resolve_sim_node
  local t0
  t0=$(date +%s.%N)

  # From here on, a failure or a signal stops whatever was started.
  trap 'rc=$?; if [ $rc -ne 0 ]; then log "start failed; stopping what it started"; stop_dir "$DIR"; fi' EXIT
  trap 'exit 130' INT TERM

  rm -rf "$DIR/logs" "$DIR/etcd" "$DIR/pki" "$DIR/exec" "$DIR/env" "$DIR/sim-node"
  mkdir -p "$DIR/logs" "$DIR/exec"
  : > "$DIR/pids"
  : > "$DIR/logs/pods.log"

  # Ports: etcd client and peer, the API server, the controller-manager's
  # and scheduler's health endpoints, kwok's kubelet API, the port-forward
  # target, the API server's proxy and its control endpoint, and the sim
  # node's kubelet API.
  local ports
  mapfile -t ports < <("$BIN/freeport" 10)
  [ "${#ports[@]}" -eq 10 ] || die "freeport gave no ports"
  local etcd_port=${ports[0]} etcd_peer_port=${ports[1]} api_port=${ports[2]}
  local kcm_port=${ports[3]} sched_port=${ports[4]} kubelet_port=${ports[5]}
  FORWARD_PORT=${ports[6]}
  local proxy_port=${ports[7]} proxy_ctl_port=${ports[8]} sim_node_port=${ports[9]}
  SERVER="https://127.0.0.1:$api_port"
  local proxy_server="https://127.0.0.1:$proxy_port" proxy_ctl="http://127.0.0.1:$proxy_ctl_port"

  make_pki "$DIR/pki"

  # Static tokens: token,user,uid,"groups". The components get their usual
  # identities, which the API server's default RBAC already binds.
  local -A token
  local u
  for u in admin kube-controller-manager kube-scheduler kwok "${USERS[@]}"; do token[$u]=$(new_token); done
  {
    echo "${token[admin]},kubegate-admin,uid-admin,\"system:masters\""
    echo "${token[kube-controller-manager]},system:kube-controller-manager,uid-kcm"
    echo "${token[kube-scheduler]},system:kube-scheduler,uid-scheduler"
    # kwok plays the Node's kubelet but also writes pod status for every pod
    # of its Node and leases: an admin identity rather than system:node:*.
    echo "${token[kwok]},kwok,uid-kwok,\"system:masters\""
    for u in "${USERS[@]}"; do echo "${token[$u]},$u,uid-$u,\"${USER_GROUP[$u]}\""; done
  } > "$DIR/pki/tokens.csv"
  chmod 600 "$DIR/pki/tokens.csv"

  token_kubeconfig "$DIR/admin.kubeconfig" kubegate-admin "${token[admin]}"
  write_kubeconfig "$DIR/admin-cert.kubeconfig" kubegate-admin-cert \
    "client-certificate-data: $(base64 -w0 < "$DIR/pki/admin-cert.crt")" \
    "client-key-data: $(base64 -w0 < "$DIR/pki/admin-cert.key")"
  for u in "${USERS[@]}"; do token_kubeconfig "$DIR/$u.kubeconfig" "$u" "${token[$u]}"; done
  token_kubeconfig "$DIR/pki/kube-controller-manager.kubeconfig" system:kube-controller-manager "${token[kube-controller-manager]}"
  token_kubeconfig "$DIR/pki/kube-scheduler.kubeconfig" system:kube-scheduler "${token[kube-scheduler]}"
  token_kubeconfig "$DIR/pki/kwok.kubeconfig" kwok "${token[kwok]}"
  # The sim node: its client certificate, and the proxy as its server (the
  # API server's certificate names 127.0.0.1, so TLS verifies through it).
  KUBECONFIG_SERVER=$proxy_server write_kubeconfig "$DIR/pki/sim-node.kubeconfig" "system:node:$SIM_NODE_NAME" \
    "client-certificate-data: $(base64 -w0 < "$DIR/pki/sim-node-client.crt")" \
    "client-key-data: $(base64 -w0 < "$DIR/pki/sim-node-client.key")"

  # etcd: plain HTTP, on loopback only, one member. No fsync: the data
  # lives for one test run, and fsync on a busy CI disk slows every write.
  launch etcd \
    --name default --data-dir "$DIR/etcd" \
    --listen-client-urls "http://127.0.0.1:$etcd_port" --advertise-client-urls "http://127.0.0.1:$etcd_port" \
    --listen-peer-urls "http://127.0.0.1:$etcd_peer_port" --initial-advertise-peer-urls "http://127.0.0.1:$etcd_peer_port" \
    --initial-cluster "default=http://127.0.0.1:$etcd_peer_port" \
    --unsafe-no-fsync --log-level warn
  wait_for etcd "/health" curl -fsS "http://127.0.0.1:$etcd_port/health"

  # An audit log of what the clients under test asked and were answered
  # (tests/rbac_real.rs checks every request of the daemon's ServiceAccount
  # against it): the plane's own components are left out.
  cat > "$DIR/audit-policy.yaml" <<'POLICY'
apiVersion: audit.k8s.io/v1
kind: Policy
omitStages: ["RequestReceived"]
rules:
  - level: None
    users: ["kwok", "system:kube-controller-manager", "system:kube-scheduler", "system:apiserver"]
  - level: None
    userGroups: ["system:serviceaccounts:kube-system", "system:nodes"]
  - level: Metadata
POLICY

  # The API server. Node,RBAC as a real cluster authorizes; NodeRestriction
  # beside it, and PodNodeSelector and PodTolerationRestriction, which put a
  # namespace's node selector and tolerations on its pods (how a test's pods
  # reach the sim node). Kubelet connections go to the Node's InternalIP
  # (127.0.0.1: kwok and the sim node), their serving certificates verified
  # against our CA, with a client certificate of the kubelet-client CA. The
  # service range stays the default: no kube-proxy runs, so nothing ever
  # dials a ClusterIP.
  launch kube-apiserver \
    --bind-address 127.0.0.1 --advertise-address 127.0.0.1 --secure-port "$api_port" \
    --etcd-servers "http://127.0.0.1:$etcd_port" \
    --tls-cert-file "$DIR/pki/apiserver.crt" --tls-private-key-file "$DIR/pki/apiserver.key" \
    --client-ca-file "$DIR/pki/ca.crt" \
    --token-auth-file "$DIR/pki/tokens.csv" \
    --authorization-mode Node,RBAC \
    --enable-admission-plugins NodeRestriction,PodNodeSelector,PodTolerationRestriction \
    --service-account-issuer https://kubernetes.default.svc.cluster.local \
    --service-account-key-file "$DIR/pki/sa.pub" \
    --service-account-signing-key-file "$DIR/pki/sa.key" \
    --kubelet-certificate-authority "$DIR/pki/ca.crt" \
    --kubelet-client-certificate "$DIR/pki/apiserver-kubelet-client.crt" \
    --kubelet-client-key "$DIR/pki/apiserver-kubelet-client.key" \
    --kubelet-preferred-address-types InternalIP \
    --audit-policy-file "$DIR/audit-policy.yaml" --audit-log-path "$DIR/logs/audit.log" \
    --audit-log-format json --audit-log-mode blocking \
    --profiling=false
  wait_for kube-apiserver "/readyz" admin_kubectl get --raw /readyz

  # The sim node's way to the API server: a loopback TCP proxy whose control
  # endpoint cuts it off and back (outage tests). Never stopping the API
  # server for that: its port is released slowly, and kwok and the
  # controllers would lose it too.
  launch apiproxy --listen "127.0.0.1:$proxy_port" --target "127.0.0.1:$api_port" \
    --control "127.0.0.1:$proxy_ctl_port" --max-conns 256
  wait_for apiproxy "/status" curl -fsS "$proxy_ctl/status"

  # The controller-manager, without the controllers that act for a cloud
  # or allocate what the nodes bring themselves: node-ipam (pod CIDRs: kwok's
  # --cidr and the sim node's --pod-cidr give the IPs), routes and load
  # balancers (no cloud). node-lifecycle runs: it lifts the not-ready taint
  # from a Ready Node and taints one whose Lease stops being renewed (kwok
  # renews its own every 10 s, as the sim node does). Each controller uses
  # its own ServiceAccount as in a real cluster. No leader election: one
  # instance, and a lost lease on a loaded CI machine would end the process.
  launch kube-controller-manager \
    --kubeconfig "$DIR/pki/kube-controller-manager.kubeconfig" \
    --authentication-kubeconfig "$DIR/pki/kube-controller-manager.kubeconfig" \
    --authorization-kubeconfig "$DIR/pki/kube-controller-manager.kubeconfig" \
    --bind-address 127.0.0.1 --secure-port "$kcm_port" --cert-dir "$DIR/pki/kube-controller-manager" \
    --controllers '*,-node-ipam-controller,-node-route-controller,-service-lb-controller,-cloud-node-lifecycle-controller' \
    --use-service-account-credentials \
    --service-account-private-key-file "$DIR/pki/sa.key" \
    --root-ca-file "$DIR/pki/ca.crt" \
    --cluster-signing-cert-file "$DIR/pki/ca.crt" --cluster-signing-key-file "$DIR/pki/ca.key" \
    --leader-elect=false --profiling=false

  launch kube-scheduler \
    --kubeconfig "$DIR/pki/kube-scheduler.kubeconfig" \
    --authentication-kubeconfig "$DIR/pki/kube-scheduler.kubeconfig" \
    --authorization-kubeconfig "$DIR/pki/kube-scheduler.kubeconfig" \
    --bind-address 127.0.0.1 --secure-port "$sched_port" --cert-dir "$DIR/pki/kube-scheduler" \
    --leader-elect=false --profiling=false

  # The Node kwok manages, created as a kubelet would register it; kwok
  # picks it up by its label. The annotation is kwok's convention for a
  # fake node (its docs and other tools use it to tell such nodes apart).
  admin_kubectl apply -f - >/dev/null <<EOF || fail kube-apiserver "cannot create Node $NODE_NAME"
apiVersion: v1
kind: Node
metadata:
  name: $NODE_NAME
  labels:
    ${NODE_LABEL%%=*}: "${NODE_LABEL#*=}"
    kubernetes.io/hostname: $NODE_NAME
    kubernetes.io/os: linux
    kubernetes.io/arch: amd64
    type: kwok
  annotations:
    kwok.x-k8s.io/node: fake
    node.alpha.kubernetes.io/ttl: "0"
EOF

  # kwok: its kubelet API on TLS at 127.0.0.1:kubelet_port, which it also
  # writes into the Node's daemonEndpoints; pod IPs from a loopback range, so
  # nothing a test does can dial a private-range address. HOME points into
  # DIR so kwok never reads the user's ~/.kwok/kwok.yaml.
  write_kwok_config "$DIR/kwok.yaml"
  mkdir -p "$DIR/kwok-home"
  HOME="$DIR/kwok-home" launch kwok \
    --config "$DIR/kwok.yaml" \
    --kubeconfig "$DIR/pki/kwok.kubeconfig" \
    --manage-nodes-with-label-selector "$NODE_LABEL" \
    --node-ip 127.0.0.1 --node-name "$NODE_NAME" \
    --node-port "$kubelet_port" --server-address "127.0.0.1:$kubelet_port" \
    --tls-cert-file "$DIR/pki/kubelet.crt" --tls-private-key-file "$DIR/pki/kubelet.key" \
    --cidr "$POD_CIDR" \
    --node-lease-duration-seconds 40

  # The sim node, beside kwok: it registers its own Node (tainted and
  # labelled so only the pods meant for it land there), renews its Lease
  # through the proxy, serves its kubelet API on TLS and accepts only the
  # API server's kubelet client certificate.
  if [ -n "$SIM_NODE_EXE" ]; then
    # Pod users (each pod runs as a host user of its own) must pass
    # through DIR to their folders under sim-node/pods: DIR (mktemp's 0700)
    # becomes 0711, search without listing; pki/ stays the harness's alone.
    chmod 711 "$DIR"
    chmod 700 "$DIR/pki"
    mkdir -p "$DIR/sim-node"
    launch_exe sim-node "$SIM_NODE_EXE" sim node \
      --kubeconfig "$DIR/pki/sim-node.kubeconfig" \
      --name "$SIM_NODE_NAME" \
      --state-dir "$DIR/sim-node" \
      --pod-cidr "$SIM_NODE_CIDR" \
      --listen "127.0.0.1:$sim_node_port" \
      --tls-cert-file "$DIR/pki/sim-node-serving.crt" --tls-private-key-file "$DIR/pki/sim-node-serving.key" \
      --client-ca-file "$DIR/pki/kubelet-client-ca.crt" \
      --register-with-taints "$SIM_NODE_TAINT" \
      --node-labels "$SIM_NODE_LABEL" \
      --capacity "$SIM_NODE_CAPACITY"
  fi

  # The Gateway API (standard channel): its CRDs and their upgrade guard,
  # applied server-side (the CRDs are too large for client-side apply's
  # last-applied annotation) once kwok and the sim node are launched, so
  # the apply (about 3 s) overlaps their start; they become Established
  # meanwhile, and the wait is at the end.
  local gateway_crds
  # (A longer request timeout than admin_kubectl's 5 s, the last flag
  # winning: the HTTPRoute CRD is 430 KB, and a loaded machine is slow to
  # store it.)
  gateway_crds=$(admin_kubectl apply --server-side --field-manager=kubegate-control-plane \
      --request-timeout="${WAIT_SECONDS}s" \
      -f "$CACHE_DIR/gateway-api/" -o name 2>"$DIR/logs/gateway-api.log") \
    || fail gateway-api "cannot apply the Gateway API $GATEWAY_API_VERSION CRDs"
  gateway_crds=$(printf '%s\n' "$gateway_crds" | sed -n 's|^customresourcedefinition.apiextensions.k8s.io/||p')
  [ -n "$gateway_crds" ] || fail gateway-api "applying $CACHE_DIR/gateway-api/ made no CRD"

  wait_for kwok "Node $NODE_NAME Ready" node_ready "$NODE_NAME"
  # kwok reports no ephemeral storage, so the scheduler refuses any pod that
  # asks for some (a session's pods do): give the Node what a kubelet would
  # report. After kwok initialised it: patched earlier, kwok keeps only what
  # is there and drops its cpu, memory and pods.
  admin_kubectl patch node "$NODE_NAME" --subresource=status --type=merge \
    -p '{"status":{"capacity":{"ephemeral-storage":"1Ti"},"allocatable":{"ephemeral-storage":"1Ti"}}}' >/dev/null \
    || fail kube-apiserver "cannot give Node $NODE_NAME its ephemeral storage"
  # The API server's NodeTaint admission gives every new Node the
  # not-ready:NoSchedule taint; the node-lifecycle controller lifts it once
  # the Node is Ready, on its next pass (every 5 s). Lifting it here saves
  # that wait; the controller leaves a Ready Node untainted.
  admin_kubectl taint node "$NODE_NAME" node.kubernetes.io/not-ready:NoSchedule- >/dev/null 2>&1 || true
  wait_for kwok "Node $NODE_NAME without taints" node_taints_are "$NODE_NAME"
  # The sim node's Node: Ready, and with only its own taint once the
  # node-lifecycle controller has lifted not-ready (nothing here lifts it:
  # that the controller does is part of what this waits for).
  if [ -n "$SIM_NODE_EXE" ]; then
    wait_for sim-node "Node $SIM_NODE_NAME Ready" node_ready "$SIM_NODE_NAME"
    wait_for sim-node "Node $SIM_NODE_NAME with only the taint $SIM_NODE_TAINT" \
      node_taints_are "$SIM_NODE_NAME" "$SIM_NODE_TAINT"
  fi
  wait_for kube-controller-manager "ServiceAccount default/default" admin_kubectl get serviceaccount default -n default
  # Each Gateway API CRD Established, and the group in discovery with the
  # resources the daemon uses (discovery follows Established a little later).
  local crd
  for crd in $gateway_crds; do
    wait_for kube-apiserver "CRD $crd Established" crd_established "$crd"
  done
  wait_for kube-apiserver "gateway.networking.k8s.io/v1 in discovery" gateway_discovered
  wait_for kube-scheduler "/healthz" curl -fsSk "https://127.0.0.1:$sched_port/healthz"
  wait_for kube-controller-manager "/healthz" curl -fsSk "https://127.0.0.1:$kcm_port/healthz"

  local elapsed
  elapsed=$(awk -v a="$t0" -v b="$(date +%s.%N)" 'BEGIN { printf "%.1f", b - a }')
  {
    echo "# Written by scripts/control-plane.sh start; removed by stop. POSIX sh: source it."
    # Single quotes (a quote inside as '\''), which every sh reads.
    kv() { printf "export %s='%s'\n" "$1" "${2//\'/\'\\\'\'}"; }
    kv KUBEGATE_REAL_DIR "$DIR"
    kv KUBEGATE_REAL_KUBECONFIG "$DIR/admin.kubeconfig"
    kv KUBEGATE_REAL_KUBECONFIG_CERT "$DIR/admin-cert.kubeconfig"
    for u in "${USERS[@]}"; do kv "KUBEGATE_REAL_KUBECONFIG_${u^^}" "$DIR/$u.kubeconfig"; done
    kv KUBEGATE_REAL_USERS "${USERS[*]}"
    for u in "${USERS[@]}"; do kv "KUBEGATE_REAL_GROUP_${u^^}" "${USER_GROUP[$u]}"; done
    kv KUBEGATE_REAL_SERVER "$SERVER"
    kv KUBEGATE_REAL_CA "$DIR/pki/ca.crt"
    kv KUBEGATE_REAL_BIN "$BIN"
    kv KUBEGATE_REAL_KUBECTL "$BIN/kubectl"
    kv KUBEGATE_REAL_ETCD "http://127.0.0.1:$etcd_port"
    kv KUBEGATE_REAL_NODE "$NODE_NAME"
    kv KUBEGATE_REAL_NODE_LABEL "$NODE_LABEL"
    kv KUBEGATE_REAL_KUBELET_PORT "$kubelet_port"
    kv KUBEGATE_REAL_POD_CIDR "$POD_CIDR"
    kv KUBEGATE_REAL_PKI "$DIR/pki"
    kv KUBEGATE_REAL_KUBELET_CLIENT_CA "$DIR/pki/kubelet-client-ca.crt"
    kv KUBEGATE_REAL_APISERVER_PROXY "$proxy_ctl"
    kv KUBEGATE_REAL_APISERVER_PROXY_ADDR "127.0.0.1:$proxy_port"
    if [ -n "$SIM_NODE_EXE" ]; then
      kv KUBEGATE_REAL_SIM_NODE "$SIM_NODE_NAME"
      kv KUBEGATE_REAL_SIM_NODE_PORT "$sim_node_port"
      kv KUBEGATE_REAL_SIM_NODE_LOG "$DIR/logs/sim-node.log"
    else
      # Skipped (KUBEGATE_CP_SIM_NODE=0): empty name, port and log.
      kv KUBEGATE_REAL_SIM_NODE ""
      kv KUBEGATE_REAL_SIM_NODE_PORT ""
      kv KUBEGATE_REAL_SIM_NODE_LOG ""
    fi
    kv KUBEGATE_REAL_SIM_NODE_CIDR "$SIM_NODE_CIDR"
    kv KUBEGATE_REAL_SIM_NODE_LABEL "$SIM_NODE_LABEL"
    kv KUBEGATE_REAL_SIM_NODE_TAINT "$SIM_NODE_TAINT"
    kv KUBEGATE_REAL_FORWARD_PORT "$FORWARD_PORT"
    kv KUBEGATE_REAL_POD_LOG "$DIR/logs/pods.log"
    kv KUBEGATE_REAL_AUDIT_LOG "$DIR/logs/audit.log"
    kv KUBEGATE_REAL_KUBE_VERSION "$KUBE_VERSION"
    kv KUBEGATE_REAL_ETCD_VERSION "$ETCD_VERSION"
    kv KUBEGATE_REAL_KWOK_VERSION "$KWOK_VERSION"
    kv KUBEGATE_REAL_GATEWAY_API_VERSION "$GATEWAY_API_VERSION"
    kv KUBEGATE_REAL_START_SECONDS "$elapsed"
  } > "$DIR/env"

  # Optionally tie the control plane's life to a process (a test run): when
  # it exits, however it exits, a watcher stops everything.
  if [ -n "${KUBEGATE_CP_OWNER_PID:-}" ]; then
    # shellcheck disable=SC2016  # $1.. expand in the watcher's bash
    setsid bash -c 'while kill -0 "$1" 2>/dev/null; do sleep 1; done; exec "$2" stop "$3"' \
      watcher "$KUBEGATE_CP_OWNER_PID" "$(cd "$(dirname "$0")" && pwd)/$(basename "$0")" "$DIR" \
      > "$DIR/logs/watcher.log" 2>&1 < /dev/null &
    echo "watcher $!" > "$DIR/watcher.pid"
  fi

  trap - EXIT INT TERM
  local nodes="$NODE_NAME (kwok)"
  [ -z "$SIM_NODE_EXE" ] || nodes+=", $SIM_NODE_NAME (sim node)"
  log "ready in ${elapsed}s: source $DIR/env (server $SERVER, Kubernetes $KUBE_VERSION; nodes $nodes)"
}

# ---------------------------------------------------------------- stop

# is_ours PID EXE: the process still runs the binary start launched (so a
# pid the kernel has since reused for something else is never signalled).
# A binary replaced on disk since (a cargo build while the sim node runs)
# reads as "EXE (deleted)": still ours.
is_ours() {
  local exe
  exe=$(readlink "/proc/$1/exe" 2>/dev/null) || return 1
  [ "$exe" = "$2" ] || [ "$exe" = "$2 (deleted)" ]
}

# Stops what DIR/pids names, newest first: SIGTERM, up to 15 s to exit,
# then SIGKILL. Waits until every one is gone. Safe to run twice.
stop_dir() {
  local dir=$1 lines=() i name pid exe
  [ -f "$dir/pids" ] || return 0
  mapfile -t lines < "$dir/pids"
  for (( i=${#lines[@]}-1; i>=0; i-- )); do
    read -r name pid exe <<< "${lines[$i]}"
    [ -n "${exe:-}" ] || continue
    is_ours "$pid" "$exe" || continue
    kill -TERM "$pid" 2>/dev/null || continue
    local n=0
    while is_ours "$pid" "$exe" && [ $n -lt 150 ]; do sleep 0.1; n=$((n+1)); done
    if is_ours "$pid" "$exe"; then
      log "$name (pid $pid) still running 15s after SIGTERM; killing it"
      kill -KILL "$pid" 2>/dev/null || true
      while is_ours "$pid" "$exe"; do sleep 0.1; done
    fi
  done
  # env names ports nothing listens on now; logs and pki stay for a post-mortem.
  rm -f "$dir/pids" "$dir/env"
  # The owner watcher (if any) has nothing left to do. It is a bash loop;
  # when it is the one stopping (it execs this script), $$ is its pid.
  if [ -f "$dir/watcher.pid" ]; then
    read -r name pid < "$dir/watcher.pid"
    if [ "$pid" != "$$" ] && tr '\0' ' ' < "/proc/$pid/cmdline" 2>/dev/null | grep -q "^bash -c while kill"; then
      kill -TERM "$pid" 2>/dev/null || true
    fi
    rm -f "$dir/watcher.pid"
  fi
}

stop() {
  local dir=${1:?usage: $0 stop DIR}
  [ -d "$dir" ] || die "no such folder: $dir"
  stop_dir "$(cd "$dir" && pwd)"
}

# ---------------------------------------------------------------- main

cmd=${1:-}
case "$cmd" in
  check)
    if why=$(check); then echo "ok"; else rc=$?; echo "$why"; exit $rc; fi ;;
  build) build >/dev/null ;;
  bin) dir=$(build); echo "$dir/bin" ;;
  start) start "${2:-}" ;;
  stop) stop "${2:-}" ;;
  *) die "usage: $0 check|build|bin|start DIR|stop DIR" ;;
esac
