#!/usr/bin/env bash
# scripts/node-package.sh [OUTDIR] (make node-package): the npm tarball of
# clients/node, pg-idempotency-<version>.tgz, in OUTDIR (default build/),
# from a checkout as it is cloned: its devDependencies (TypeScript, which
# `npm pack`'s prepack build needs) come from the committed lock file with
# `npm ci` first. Prints the tarball's path. The package is not on the npm
# registry yet; this tarball is how it is installed (clients/node/README.md).
set -euo pipefail
top=$(cd "$(dirname "$0")/.." && pwd)
out=${1:-$top/build}
src=${IDEM_NODE_SRC:-$top/clients/node}
mkdir -p "$out"
out=$(cd "$out" && pwd)
cd "$src"
npm ci --no-audit --no-fund --loglevel=error >&2
name=$(npm pack --silent --pack-destination "$out" | tail -1)
echo "$out/$name"
