#!/usr/bin/env bash
# Installs kubegate as a systemd service (docs/deploy.md):
#   PREFIX/bin/kubegate                      the binary (mode 0755)
#   /etc/systemd/system/kubegate.service     the unit (0644), ExecStart -> PREFIX/bin/kubegate
#   /etc/kubegate/config.toml                from config.example.toml, ONLY if absent (0644),
#                                            with its one principal `admin` holding a new token
#   /etc/kubegate/admin.token                that token (0600, root only; reused when present)
# then `systemctl daemon-reload`. It never starts or enables the service,
# never overwrites a config and never prints a token. Running it again is safe.
#
#   scripts/install.sh [--binary PATH] [--prefix DIR] [--dry-run]
#
#   --binary PATH  the kubegate binary to install; default: target/release/kubegate,
#                  built with `cargo build --release` when missing
#   --prefix DIR   where the binary goes (DIR/bin); default /usr/local
#   --dry-run      print what would be done, change nothing
#
# DESTDIR=/some/dir stages everything under that folder (packaging, tests):
# no root needed, and systemctl is not called.
set -euo pipefail
umask 077 # temporary files (the token among them) are ours alone

prefix=/usr/local
binary=
dry_run=0
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
repo="$(dirname "$here")"
destdir="${DESTDIR:-}"
destdir="${destdir%/}"

usage() {
    sed -n '2,21p' "${BASH_SOURCE[0]}" | sed 's/^# \{0,1\}//'
}

die() {
    echo "install.sh: $*" >&2
    exit 2
}

while [ $# -gt 0 ]; do
    case "$1" in
    --binary) [ $# -ge 2 ] || die "--binary needs a path"; binary="$2"; shift 2 ;;
    --binary=*) binary="${1#*=}"; shift ;;
    --prefix) [ $# -ge 2 ] || die "--prefix needs a folder"; prefix="$2"; shift 2 ;;
    --prefix=*) prefix="${1#*=}"; shift ;;
    --dry-run) dry_run=1; shift ;;
    -h | --help) usage; exit 0 ;;
    *) die "unknown option $1 (see --help)" ;;
    esac
done
case "$prefix" in
/*) prefix="${prefix%/}" ;;
*) die "--prefix must be an absolute path, not $prefix" ;;
esac
[ -n "$prefix" ] || prefix=/ # --prefix / stays /
if [ -n "$destdir" ]; then
    case "$destdir" in /*) ;; *) die "DESTDIR must be an absolute path, not $destdir" ;; esac
fi

if [ -z "$destdir" ] && [ "$dry_run" = 0 ] && [ "$(id -u)" != 0 ]; then
    die "installing into / needs root (or set DESTDIR=/some/dir to stage, or --dry-run)"
fi

bindir="${prefix%/}/bin"
unit_dir=/etc/systemd/system
conf_dir=/etc/kubegate
unit_src="$here/kubegate.service"
example="$repo/config.example.toml"
[ -f "$unit_src" ] || die "missing $unit_src"
[ -f "$example" ] || die "missing $example"

# Runs a command, or only shows it with --dry-run.
run() {
    if [ "$dry_run" = 1 ]; then
        echo "would run: $*"
    else
        "$@"
    fi
}

# install(1) through a temporary file and a rename, so a running binary or
# a half-written file is never seen.
put() { # MODE SOURCE TARGET
    local mode="$1" src="$2" dst="$3"
    if [ -f "$dst" ] && cmp -s "$src" "$dst" && [ "$(stat -c %a "$dst")" = "${mode#0}" ]; then
        echo "unchanged  $dst"
        return
    fi
    if [ "$dry_run" = 1 ]; then
        echo "would install $dst (mode $mode)"
        return
    fi
    install -m "$mode" "$src" "$dst.tmp.$$"
    mv -f "$dst.tmp.$$" "$dst"
    echo "installed  $dst (mode $mode)"
}

# 1. The binary.
if [ -z "$binary" ]; then
    binary="$repo/target/release/kubegate"
    if [ ! -x "$binary" ]; then
        echo "no $binary yet: building it (cargo build --release)"
        run cargo build --release --manifest-path "$repo/Cargo.toml"
    fi
fi
if [ "$dry_run" = 0 ] || [ -e "$binary" ]; then
    [ -x "$binary" ] || die "not an executable file: $binary"
fi

tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT

run install -d -m 0755 "$destdir$bindir" "$destdir$unit_dir" "$destdir$conf_dir"
if [ -e "$binary" ]; then
    put 0755 "$binary" "$destdir$bindir/kubegate"
else
    echo "would install $destdir$bindir/kubegate (mode 0755) from $binary"
fi

# 2. The unit, pointing at this prefix's binary.
sed "s#^ExecStart=/usr/local/bin/kubegate #ExecStart=$bindir/kubegate #" "$unit_src" >"$tmp/kubegate.service"
grep -q "^ExecStart=$bindir/kubegate serve " "$tmp/kubegate.service" ||
    die "could not point ExecStart at $bindir/kubegate in $unit_src"
put 0644 "$tmp/kubegate.service" "$destdir$unit_dir/kubegate.service"

# 3. The config, only when there is none: the example, with its state in the
# service's StateDirectory and the audit log in its LogsDirectory (paths
# beside /etc/kubegate are read-only to the service). 0644: the service's
# transient user must read it, and it holds token DIGESTS only; secrets go
# through LoadCredential= (docs/deploy.md).
#
# The example's demo principal holds a published token (any local user of
# the host knows it): the installed config's one principal, `admin`, gets a
# random token instead, kept in a root-only file beside the config, and
# only its SHA-256 digest goes into the config. An existing token file is
# reused (a config removed and installed again matches it). The token is
# never printed, only the file's path.
demo_digest=d53fa4ceb5e3b6f776103045182f6b4fbdfdea415d83039a16017381c567f997
config="$destdir$conf_dir/config.toml"
token_file="$conf_dir/admin.token"
if [ -e "$config" ]; then
    echo "kept       $config (exists; never overwritten)"
    installed_token=0
else
    if [ -e "$destdir$token_file" ]; then
        token="$(tr -d ' \t\r\n' <"$destdir$token_file")"
        [ "${#token}" -ge 32 ] || die "$destdir$token_file holds no usable token (32 characters at least); remove it to have a new one made"
        echo "reusing    $destdir$token_file"
    else
        token="$(od -An -tx1 -N32 /dev/urandom | tr -d ' \n')"
        [ "${#token}" = 64 ] || die "could not read 32 random bytes from /dev/urandom"
    fi
    digest="$(printf '%s' "$token" | sha256sum | cut -d' ' -f1)"
    {
        echo "# Installed by scripts/install.sh from config.example.toml; edit freely,"
        echo "# it is never overwritten. Reload principals: systemctl reload kubegate."
        echo "# The token of principal \"admin\" is in $token_file (root only)."
        sed -e 's#^state_dir = "./state"$#state_dir = "/var/lib/kubegate"#' \
            -e 's#^audit_log = "./state/audit.jsonl"$#audit_log = "/var/log/kubegate/audit.jsonl"#' \
            -e 's#^name = "demo"$#name = "admin"#' \
            -e "s#one demo principal whose token is \`kubegate-demo-token\`#one principal, admin, whose token is in $token_file#" \
            -e "s#^token_sha256 = \"$demo_digest\"\$#token_sha256 = \"$digest\"#" \
            -e "s#printf '%s' 'kubegate-demo-token' | sha256sum#printf '%s' \"\$(sudo cat $token_file)\" | sha256sum#" \
            "$example"
    } >"$tmp/config.toml"
    grep -q '^state_dir = "/var/lib/kubegate"$' "$tmp/config.toml" &&
        grep -q '^audit_log = "/var/log/kubegate/audit.jsonl"$' "$tmp/config.toml" &&
        grep -q "^token_sha256 = \"$digest\"\$" "$tmp/config.toml" &&
        grep -q '^name = "admin"$' "$tmp/config.toml" &&
        ! grep -q "$demo_digest" "$tmp/config.toml" ||
        die "config.example.toml changed: could not set state_dir, audit_log and the admin principal"
    printf '%s\n' "$token" >"$tmp/admin.token"
    unset token
    put 0600 "$tmp/admin.token" "$destdir$token_file"
    put 0644 "$tmp/config.toml" "$config"
    installed_token=1
fi

# 4. Tell systemd (not for a staged install).
if [ -n "$destdir" ]; then
    echo "DESTDIR is set: not running systemctl daemon-reload"
elif command -v systemctl >/dev/null 2>&1 && [ -d /run/systemd/system ]; then
    run systemctl daemon-reload
else
    echo "systemd is not running here: run 'systemctl daemon-reload' on the target host"
fi

if [ "$installed_token" = 1 ]; then
    echo "principal \"admin\": its token is in $destdir$token_file (mode 0600, root only; never printed)"
fi
cat <<EOF
done. Next:
  edit $conf_dir/config.toml (principals, [cluster] mode; docs/deploy.md)
  client token: KUBEGATE_TOKEN="\$(sudo cat $token_file)" kubegate workspaces
  systemctl enable --now kubegate
  journalctl -u kubegate -f
EOF
