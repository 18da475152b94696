# test/integration/node_example.bash: sourced by integration scripts (not
# run).  node_example DIR: makes the example in DIR (examples/<name>) ready
# to run: builds the package it links to, clients/node (npm ci, npm run
# build; once per tree), then installs the example's dependencies from its
# committed lock file (npm ci) and changes to DIR.
node_example() {
  local pkg
  pkg=$(cd "$1/../../clients/node" && pwd)
  if [ ! -f "$pkg/dist/cjs/index.js" ]; then
    (cd "$pkg" && npm ci --no-audit --no-fund --loglevel=error && npm run --silent build)
  fi
  cd "$1" || return 1
  npm ci --no-audit --no-fund --loglevel=error
}
