#!/bin/sh
# offline-modules.sh [DIR]: lets the Go module in DIR (default .) build and
# test in module mode offline from Debian's archive (golang-*-dev packages,
# sources under /usr/share/gocode/src), with no module proxy.
#
# Every module of its module graph, followed through the go.mod files it
# reaches (directory replacements already in DIR/go.mod included, such as
# pgidempotency's), gets a `replace` onto a directory, so go never looks a
# module up:
# - Debian's source tree when it has a go.mod declaring that path (a module
#   path's /vN suffix may be missing from Debian's directory, as chi's);
# - else DIR/.offline-modules/<path>, a go.mod of its own (a replacement
#   directory needs one) with links to Debian's files when Debian has the
#   path without a go.mod, or nothing when Debian lacks it.  Those empty
#   modules are the ones only named by old go.mod files (pgx v4's go 1.13
#   predates graph pruning, so its test-only requirements such as
#   Masterminds/semver are in every graph that has pgx): no package of them
#   is built.  A missing package that is imported fails the build by name;
#   install its golang-*-dev package and run this again.
# It runs again safely (after a new require, or an upgrade of Debian's).
set -eu
dir=$(cd "${1:-.}" && pwd)
src=${GOCODE:-/usr/share/gocode/src}
stubs=$dir/.offline-modules
[ -f "$dir/go.mod" ] || { echo "offline-modules.sh: no go.mod in $dir" >&2; exit 1; }

# modpaths FILE: the required module paths of a go.mod; replaced FILE: each
# replacement of it as "path dir" (directory replacements only).
modpaths() {
  sed -e 's://.*$::' -e 's/"//g' "$1" | awk '
    $1 == "require" && $2 == "(" { on = 1; next }
    on && $1 == ")" { on = 0; next }
    on && NF >= 2 { print $1 }
    $1 == "require" && NF >= 3 { print $2 }'
}
replaced() {
  sed -e 's://.*$::' -e 's/"//g' "$1" | awk '
    $1 == "replace" && $2 == "(" { on = 1; next }
    on && $1 == ")" { on = 0; next }
    !on && $1 != "replace" { next }
    { if ($1 == "replace") $1 = ""; $0 = $0
      for (i = 2; i < NF; i++) if ($i == "=>" && $(i + 1) ~ /^[.\/]/) print $1, $(i + 1) }'
}
modline() { awk '$1 == "module" { gsub(/"/, "", $2); print $2; exit }' "$1" 2>/dev/null || true; }

# more PATHS: appends the module paths in $1 to $next
more() { [ -z "$1" ] || next="$next $1"; }
seen=" "
next=
more "$(modpaths "$dir/go.mod")"
# the go.mod files behind the directory replacements the project has
for r in $(replaced "$dir/go.mod" | awk '{ print $1 "=" $2 }'); do
  p=${r%%=*} d=${r#*=}
  case $d in /*) ;; *) d=$dir/$d ;; esac
  # this script's own replacements of a former run are made afresh
  case $d in "$src"/* | "$stubs"/*) continue ;; esac
  seen="$seen$p "
  [ ! -f "$d/go.mod" ] || more "$(modpaths "$d/go.mod")"
done
edits=
todo=$next
while [ -n "$todo" ]; do
  next=
  for p in $todo; do
    case "$seen" in *" $p "*) continue ;; esac
    seen="$seen$p "
    target=
    for d in "$src/$p" "$src/${p%/v[0-9]*}"; do
      if [ "$(modline "$d/go.mod")" = "$p" ]; then target=$d; break; fi
    done
    if [ -z "$target" ]; then
      target=$stubs/$p
      rm -rf "$target" && mkdir -p "$target"
      if [ -d "$src/$p" ]; then
        for f in "$src/$p"/* "$src/$p"/.[!.]*; do
          if [ -e "$f" ] && [ "${f##*/}" != go.mod ]; then ln -s "$f" "$target/"; fi
        done
      fi
      printf 'module %s\n' "$p" >"$target/go.mod"
    fi
    edits="$edits -replace=$p=$target"
    [ "$target" = "$stubs/$p" ] || more "$(modpaths "$target/go.mod")"
  done
  todo=$next
done
# module paths and directories have no blanks: $edits splits into its flags
# shellcheck disable=SC2086
[ -z "$edits" ] || (cd "$dir" && go mod edit $edits)
