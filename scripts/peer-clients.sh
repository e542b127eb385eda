#!/usr/bin/env bash
# Installs the peer clients that check the sim's port-forward independently
# of kubegate's own code (tests/sim_portforward.rs, docs/sim.md#port-forward):
# the JavaScript client (@kubernetes/client-node, its `PortForward`) and the
# Python client (`kubernetes`, its `portforward`), pinned, into a cache
# folder outside the checkout:
#   ${XDG_CACHE_HOME:-$HOME/.cache}/kubegate/peer-clients/{node,python}
# Idempotent: a version already there is kept. The tests find them there;
# without them they fail when CI is set and print a skip line otherwise.
#
# Versions: client-node 1.4.0 is the newest that runs on Node 20 (2.x needs
# undici 8, Node >= 22.19); kubernetes 37.0.2 for Python.
set -euo pipefail

NODE_CLIENT=1.4.0
PYTHON_CLIENT=37.0.2
dir="${XDG_CACHE_HOME:-$HOME/.cache}/kubegate/peer-clients"
mkdir -p "$dir/node" "$dir/python"

node_pkg="$dir/node/node_modules/@kubernetes/client-node/package.json"
if ! grep -q "\"version\": \"$NODE_CLIENT\"" "$node_pkg" 2>/dev/null; then
  if ! command -v npm >/dev/null 2>&1; then
    apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq nodejs npm
  fi
  (cd "$dir/node" && npm install --no-audit --no-fund --silent \
    "@kubernetes/client-node@$NODE_CLIENT")
fi

py_meta="$dir/python/kubernetes-$PYTHON_CLIENT.dist-info"
if [ ! -d "$py_meta" ]; then
  rm -rf "$dir/python" && mkdir -p "$dir/python"
  PIP_ROOT_USER_ACTION=ignore python3 -m pip install --quiet --disable-pip-version-check --no-warn-conflicts \
    --target "$dir/python" "kubernetes==$PYTHON_CLIENT"
fi
echo "peer clients in $dir: @kubernetes/client-node $NODE_CLIENT, kubernetes $PYTHON_CLIENT"
