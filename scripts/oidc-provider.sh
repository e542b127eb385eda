#!/usr/bin/env bash
# Installs panva's oidc-provider (OpenID Certified), pinned, into a cache
# folder outside the checkout, for the login tests (tests/cli_login.rs,
# tests/peer/oidc/provider.mjs, docs/cli.md#kubegate-login):
#   ${XDG_CACHE_HOME:-$HOME/.cache}/kubegate/oidc-provider/node_modules/oidc-provider
# Idempotent: the version already there is kept. The tests find it there;
# without it they fail when CI is set and print a skip line otherwise.
#
# Version: 9.13.3 declares no `engines` (npm view oidc-provider@9.13.3
# engines prints nothing) and runs on Node 20 (its jose 6 and koa 3 need
# Node >= 18).
set -euo pipefail

OIDC_PROVIDER=9.13.3
dir="${XDG_CACHE_HOME:-$HOME/.cache}/kubegate/oidc-provider"
mkdir -p "$dir"

pkg="$dir/node_modules/oidc-provider/package.json"
if ! grep -q "\"version\": \"$OIDC_PROVIDER\"" "$pkg" 2>/dev/null; then
  if ! command -v npm >/dev/null 2>&1; then
    apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq nodejs npm
  fi
  # A package.json of our own keeps npm from climbing to a parent folder's;
  # no lock file is kept (the one pin is the version above).
  [ -f "$dir/package.json" ] || echo '{"name":"kubegate-oidc-provider","private":true}' >"$dir/package.json"
  (cd "$dir" && npm install --no-audit --no-fund --silent --no-package-lock \
    "oidc-provider@$OIDC_PROVIDER")
fi
echo "oidc-provider $OIDC_PROVIDER in $dir"
