# test/portable/lib.sh: what the tests of the portable edition
# (doc/portable.md) share, sourced after scripts/lib.sh.
#
#   portable_server_copy DIR   a private copy of the server in DIR/inst with
#                              none of the C edition's files; prints its
#                              bin directory
#   portable_build_tle DIR     pg_tle from ../shared/vendor, built with PGXS
#                              against the system's headers and installed
#                              into DIR/inst (log in DIR/pg_tle.log)
#   portable_build_edition DIR the edition's scripts into DIR/edition
#                              (scripts/portable.py build)
#   portable_prepare DIR MODES the three above (pg_tle only when MODES has
#                              tle) and a copy of the tree in DIR/repo;
#                              sets BIN, the copy's bin directory
#   portable_install MODE DB ROLE [PSQL_ARGS...]
#                              installs the edition into DB as ROLE, a role
#                              that is no superuser: MODE plain runs the
#                              plain script with psql -f, MODE tle runs
#                              idempotency-tle.sql, then CREATE EXTENSION
#                              (pg_tle must be created in DB and ROLE must
#                              have pgtle_admin).  Uses $PORTABLE_EDITION,
#                              set by portable_build_edition, and psql
#                              from PATH with PGHOST/PGPORT as set.
#
# The vendored pg_tle is found by idem_vendor (scripts/lib.sh).

PORTABLE_TLE_TARBALL=$(idem_vendor pg_tle-2f4b7b3.tar.gz) ||
  PORTABLE_TLE_TARBALL=../shared/vendor/pg_tle-2f4b7b3.tar.gz
PORTABLE_PACKAGES="flex bison libkrb5-dev"
PORTABLE_VERSION=$(sed -n "s/^default_version = '\(.*\)'/\1/p" "$IDEM_TOP/idempotency.control")

portable_server_copy() {
  local dir=$1
  rm -rf "$dir/inst"
  mkdir -p "$dir/inst/usr/lib/postgresql" "$dir/inst/usr/share/postgresql"
  cp -a /usr/lib/postgresql/$PG_MAJOR "$dir/inst/usr/lib/postgresql/"
  cp -a /usr/share/postgresql/$PG_MAJOR "$dir/inst/usr/share/postgresql/"
  rm -f "$dir/inst/usr/share/postgresql/$PG_MAJOR/extension/idempotency"* \
        "$dir/inst/usr/lib/postgresql/$PG_MAJOR/lib/idempotency.so"
  echo "$dir/inst$PG_BIN"
}

portable_build_tle() {
  local dir=$1
  [ -f "$PORTABLE_TLE_TARBALL" ] || { echo "pg_tle: $PORTABLE_TLE_TARBALL not found" >&2; return 1; }
  idem_log "building pg_tle from $(basename "$PORTABLE_TLE_TARBALL")"
  rm -rf "$dir/pg_tle"
  tar -C "$dir" -xzf "$PORTABLE_TLE_TARBALL" || return 1
  { nice -n 19 make -s -C "$dir/pg_tle" PG_CONFIG="$PG_BIN/pg_config" &&
    make -s -C "$dir/pg_tle" PG_CONFIG="$PG_BIN/pg_config" DESTDIR="$dir/inst" install; } \
    >"$dir/pg_tle.log" 2>&1 || { cat "$dir/pg_tle.log" >&2; return 1; }
}

portable_build_edition() {
  local dir=$1
  PORTABLE_EDITION=$dir/edition
  python3 "$IDEM_TOP/scripts/portable.py" build --out "$PORTABLE_EDITION" >/dev/null &&
    chmod -R a+rX "$PORTABLE_EDITION"
}

portable_prepare() {
  local dir=$1 modes=$2
  BIN=$(portable_server_copy "$dir") || { echo "cannot copy the server"; return 1; }
  case " $modes " in *" tle "*)
    portable_build_tle "$dir" || { echo "pg_tle build failed"; return 1; } ;;
  esac
  portable_build_edition "$dir" || { echo "portable.py build failed"; return 1; }
  mkdir -p "$dir/repo"
  tar -C "$IDEM_TOP" --exclude=.git --exclude=node_modules --exclude=build -cf - . | tar -C "$dir/repo" -xf -
}

portable_install() {
  local mode=$1 db=$2 role=$3
  shift 3
  case $mode in
  plain)
    psql -X -q -v ON_ERROR_STOP=1 -U "$role" -d "$db" "$@" \
      -f "$PORTABLE_EDITION/idempotency--$PORTABLE_VERSION.sql" >/dev/null
    ;;
  tle)
    psql -X -q -v ON_ERROR_STOP=1 -U "$role" -d "$db" "$@" \
      -f "$PORTABLE_EDITION/idempotency-tle.sql" >/dev/null &&
    psql -X -q -v ON_ERROR_STOP=1 -U "$role" -d "$db" "$@" -c 'CREATE EXTENSION idempotency'
    ;;
  *) echo "portable_install: unknown mode $mode" >&2; return 1 ;;
  esac
}
