#!/usr/bin/env bash
# test/integration/node_package.sh: the npm package of clients/node against
# a real database: its node:test suites (client, relay, the HTTP table on
# Express, Fastify and NestJS, the storage adapters), then `npm pack`, the
# tarball installed into an empty project and an Express app run from it
# with real HTTP on 127.0.0.1, and from there the burst of duplicates with
# wait (wait_burst/: one execution whatever the pool's size). Dependencies come from the committed lock
# file (npm ci). Runs on the host's PostgreSQL 15 only.
#
# The suites run again under Node 18, the floor of package.json's engines:
# Debian 12's nodejs 18 is fetched with apt-get download (nothing is
# installed) and unpacked into $IDEM_NODE18_DIR (default /opt/node18) on
# first use. That node loads acorn, cjs-module-lexer and undici from
# /usr/share/nodejs, so it runs in a mount namespace of its own (unshare,
# as root) where $IDEM_NODE18_DIR/usr/share lies over /usr/share.
# IDEM_NODE18=0 leaves the step out.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
export IDEM_TOP=${IDEM_TOP:-$(cd "$here/../.." && pwd)}
. "$IDEM_TOP/scripts/lib.sh"
idem_host_only "tests the Node package"
. "$here/fresh_db.bash"
. "$here/wait_burst/wait_burst.bash"
. "$here/node_package.bash"
fresh_db idem_node_package

NODE18_DIR=${IDEM_NODE18_DIR:-/opt/node18}

# libnode_version: the archive's version of Debian 12's Node 18 (the
# installed nodejs may be another one, from elsewhere), or nothing.
libnode_version() {
  apt-cache madison libnode108 2>/dev/null | awk -F'|' 'NR == 1 { gsub(/ /, "", $2); print $2 }'
}

# node18_fetch: Debian 12's nodejs 18 and the modules it loads from
# /usr/share/nodejs, unpacked into $NODE18_DIR unless they are there.
node18_fetch() {
  local debs version part
  [ -x "$NODE18_DIR/usr/bin/node" ] && return 0
  version=$(libnode_version)
  [ -n "$version" ] || { apt-get update -q >/dev/null; version=$(libnode_version); }
  [ -n "$version" ] || { echo "node_package: no libnode108 (Node 18) in the apt archive" >&2; return 1; }
  debs=$(mktemp -d /tmp/idem-node18.XXXXXX)
  chown _apt: "$debs" 2>/dev/null || true
  (cd "$debs" && apt-get download -q "nodejs=$version" "libnode108=$version" \
    node-acorn node-cjs-module-lexer node-undici >/dev/null)
  # unpacked beside $NODE18_DIR, then renamed into place in one step (a
  # concurrent run's copy, there first, is kept)
  part=$NODE18_DIR.part.$$
  rm -rf "$part" && mkdir -p "$part"
  for deb in "$debs"/*.deb; do dpkg -x "$deb" "$part"; done
  rm -rf "$debs"
  [ -x "$NODE18_DIR/usr/bin/node" ] || rm -rf "$NODE18_DIR"
  mv -T "$part" "$NODE18_DIR" 2>/dev/null || rm -rf "$part"
  [ -x "$NODE18_DIR/usr/bin/node" ]
}

# node18 ARG...: that node, with its libnode and its /usr/share/nodejs.
node18() {
  local lib
  lib=$(dirname "$(ls "$NODE18_DIR"/usr/lib/*/libnode.so.108)")
  unshare --mount --propagation private sh -c '
    dir=$1 lib=$2; shift 2
    mount -t overlay overlay -o "lowerdir=$dir/usr/share:/usr/share" /usr/share &&
      LD_LIBRARY_PATH=$lib exec "$dir/usr/bin/node" "$@"' node18 "$NODE18_DIR" "$lib" "$@"
}

node_package_build "$here/../../clients/node"
node_package_suites

if [ "${IDEM_NODE18:-1}" != 0 ]; then
  [ "$(id -u)" -eq 0 ] || { echo "node_package: Node 18 needs root (unshare, mount); IDEM_NODE18=0 leaves it out" >&2; exit 1; }
  node18_fetch
  idem_log "node_package: the suites under Node $(node18 --version)"
  node18 --test --test-concurrency=1 test/*.test.cjs
fi

# the tarball, installed into an empty project
app=$(mktemp -d /tmp/idem-node-app.XXXXXX)
trap 'rm -rf "$app"' EXIT
tarball=$(npm pack --silent --pack-destination "$app" | tail -1)
cp test/packaged-app.cjs "$app/app.cjs"
cd "$app"
echo '{"name": "idem-packaged-app", "private": true}' > package.json
npm install --no-audit --no-fund --loglevel=error "./$tarball" express@5.1.0
node app.cjs

# bursts of duplicates with wait through small pools: one execution each
cp "$here/wait_burst/app.cjs" wait-burst.cjs
wait_burst node "$app/wait-burst.log" node wait-burst.cjs
