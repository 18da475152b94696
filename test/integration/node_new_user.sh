#!/usr/bin/env bash
# test/integration/node_new_user.sh: clients/node/README.md followed by a
# new user: from a fresh copy of clients/node (no node_modules,
# no dist), `make node-package` builds the tarball; an empty project
# installs it (and express) with npm install, as the README's Install
# says; the README's Express quick start, taken from the README as
# written, runs there against the test database, on 127.0.0.1 (a port in
# 18000-18999). Over real HTTP: a payment answers 201, its retry replays
# the same bytes with Idempotent-Replayed: true, no caller answers 401,
# and 4 concurrent requests with distinct keys are answered 201.
. "$(dirname "$0")/lib.bash"
here=$(cd "$(dirname "$0")" && pwd)
idem_host_only "tests the Node package's README"
. "$here/fresh_db.bash"
. "$here/readme_block.bash"
. "$here/node_package.bash"
fresh_db idem_node_new_user

work_dir node_new_user

# a checkout as cloned: the package's sources without node_modules or dist
mkdir -p "$WORK/clone/clients" "$WORK/clone/scripts"
tar -C "$IDEM_TOP/clients" --exclude=node_modules --exclude=dist -cf - node \
  | tar -C "$WORK/clone/clients" -xf -
cp "$IDEM_TOP/Makefile" "$IDEM_TOP/idempotency.control" "$IDEM_TOP/META.json" "$WORK/clone/"
cp "$IDEM_TOP/scripts/node-package.sh" "$WORK/clone/scripts/"
[ ! -e "$WORK/clone/clients/node/dist" ] && [ ! -e "$WORK/clone/clients/node/node_modules" ]



idem_log "node_new_user: make node-package"
make -s -C "$WORK/clone" node-package >"$WORK/pack.out"
tarball=$(tail -1 "$WORK/pack.out")
[ -f "$tarball" ] || { echo "node_new_user: no tarball ($tarball)" >&2; exit 1; }
case "$tarball" in "$WORK/clone/build/pg-idempotency-"*.tgz) ;; *) echo "unexpected tarball $tarball" >&2; exit 1 ;; esac

# the README's Install: into an empty project
mkdir "$WORK/my-app"
cd "$WORK/my-app"
echo '{"name": "my-app", "private": true}' > package.json
idem_log "node_new_user: npm install of the tarball, pg and express"
npm install --no-audit --no-fund --loglevel=error "$tarball" pg express@5.1.0

# the README's Express quick start, as written
server=
at_exit '[ -z "$server" ] || kill "$server" 2>/dev/null'
node_package_quick_start "$WORK/my-app" "$WORK/app.log"
echo "node_new_user: the README's install and Express quick start work as written"
