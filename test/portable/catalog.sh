#!/usr/bin/env bash
# test/portable/catalog.sh: the catalog of the portable edition against the
# C edition's (doc/portable.md, "Catalog differences").
#
#   catalog.sh dump [PSQL_ARGS...]
#       writes the catalog of a database (psql's connection: PSQL_ARGS and
#       the PG* environment) to stdout, one line per function of schema
#       idempotency and attribute, and one per object of the schema with
#       the privileges it grants to PUBLIC (COPY's text format).
#   catalog.sh C PORTABLE [NAME]
#       compares two catalogs, each a file written by "dump" or a database
#       (a name or a connection string for psql -d); NAME names the
#       portable one in the messages (plain, tle).
#
# Per function (regprocedure): prokind, arguments (with their defaults),
# result, provolatile, proisstrict, proparallel, proleakproof, prosecdef,
# proconfig, prorows, proretset, language, proacl (the owner's name
# replaced by OWNER, since the owners differ: the C edition's is a
# superuser, the portable edition's the installing role; a NULL proacl
# spelled out as its default) and comment.  In each catalog, every
# SECURITY DEFINER function must set search_path in proconfig, and
# nothing of schema idempotency (the schema, its functions, tables,
# views, sequences) may grant anything to PUBLIC.  Then every difference
# between the two, function by function (a function that only one has:
# attribute "exists"), must be a row of the table of doc/portable.md's
# section "Catalog differences" (CATALOG_DOC), and every row (each
# function of its first cell) must match a difference.
#
# Prints "ok: ..." for each check passed and "FAILED: ..." for each
# failure; exits 0 when all pass.  PSQL: the psql to run (default psql).
# test/portable/run.sh runs it in its group "catalog", in each mode,
# against the C edition's catalog that test/run.sh's group "portable"
# dumps (PORTABLE_C_CATALOG).
set -uo pipefail
IDEM_TOP=$(cd "$(dirname "$0")/../.." && pwd)
PSQL=${PSQL:-psql}
CATALOG_DOC=${CATALOG_DOC:-$IDEM_TOP/doc/portable.md}

dump() {
  "$PSQL" -X -q -v ON_ERROR_STOP=1 "$@" -f - <<'SQL'
COPY (
WITH f AS (
  SELECT p.oid, p.oid::pg_catalog.regprocedure::pg_catalog.text AS sig, p.proowner, p.proacl,
         p.prokind, p.provolatile, p.proisstrict, p.proparallel, p.proleakproof, p.prosecdef,
         p.proconfig, p.prorows, p.proretset, l.lanname
    FROM pg_catalog.pg_proc p
    JOIN pg_catalog.pg_language l ON l.oid OPERATOR(pg_catalog.=) p.prolang
   WHERE p.pronamespace OPERATOR(pg_catalog.=) 'idempotency'::pg_catalog.regnamespace
),
-- every object of the schema with its privileges, a NULL ACL as its default
o AS (
  SELECT 'schema ' OPERATOR(pg_catalog.||) pg_catalog.quote_ident(n.nspname) AS what,
         n.nspowner AS owner, COALESCE(n.nspacl, pg_catalog.acldefault('n', n.nspowner)) AS acl
    FROM pg_catalog.pg_namespace n
   WHERE n.nspname OPERATOR(pg_catalog.=) 'idempotency'
  UNION ALL
  SELECT 'function ' OPERATOR(pg_catalog.||) f.sig, f.proowner,
         COALESCE(f.proacl, pg_catalog.acldefault('f', f.proowner))
    FROM f
  UNION ALL
  SELECT CASE c.relkind WHEN 'S' THEN 'sequence ' WHEN 'v' THEN 'view '
                        WHEN 'm' THEN 'materialized view ' ELSE 'table ' END
         OPERATOR(pg_catalog.||) pg_catalog.format('%I.%I', n.nspname, c.relname),
         c.relowner,
         COALESCE(c.relacl, pg_catalog.acldefault(CASE c.relkind WHEN 'S' THEN 's' ELSE 'r' END::pg_catalog."char", c.relowner))
    FROM pg_catalog.pg_class c
    JOIN pg_catalog.pg_namespace n ON n.oid OPERATOR(pg_catalog.=) c.relnamespace
   WHERE n.nspname OPERATOR(pg_catalog.=) 'idempotency'
     AND c.relkind OPERATOR(pg_catalog.=) ANY (ARRAY['r', 'p', 'v', 'm', 'S', 'f']::pg_catalog."char"[])
)
SELECT 'function', f.sig, a.attr, a.val
  FROM f, LATERAL (VALUES
    ('prokind', f.prokind::pg_catalog.text),
    ('arguments', pg_catalog.pg_get_function_arguments(f.oid)),
    ('result', pg_catalog.pg_get_function_result(f.oid)),
    ('provolatile', f.provolatile::pg_catalog.text),
    ('proisstrict', f.proisstrict::pg_catalog.text),
    ('proparallel', f.proparallel::pg_catalog.text),
    ('proleakproof', f.proleakproof::pg_catalog.text),
    ('prosecdef', f.prosecdef::pg_catalog.text),
    ('proconfig', f.proconfig::pg_catalog.text),
    ('prorows', f.prorows::pg_catalog.text),
    ('proretset', f.proretset::pg_catalog.text),
    ('language', f.lanname::pg_catalog.text),
    ('proacl', (SELECT pg_catalog.string_agg(s.e, ', ' ORDER BY s.e) FROM (
        SELECT pg_catalog.format('%s=%s%s/%s',
                 CASE WHEN a.grantee OPERATOR(pg_catalog.=) 0 THEN 'PUBLIC'
                      WHEN a.grantee OPERATOR(pg_catalog.=) f.proowner THEN 'OWNER'
                      ELSE pg_catalog.quote_ident(pg_catalog.pg_get_userbyid(a.grantee)) END,
                 a.privilege_type, CASE WHEN a.is_grantable THEN '*' ELSE '' END,
                 CASE WHEN a.grantor OPERATOR(pg_catalog.=) f.proowner THEN 'OWNER'
                      ELSE pg_catalog.quote_ident(pg_catalog.pg_get_userbyid(a.grantor)) END) AS e
          FROM pg_catalog.aclexplode(COALESCE(f.proacl, pg_catalog.acldefault('f', f.proowner))) a) s)),
    ('comment', pg_catalog.obj_description(f.oid, 'pg_proc'))
  ) AS a(attr, val)
UNION ALL
SELECT 'object', o.what, 'public',
       (SELECT pg_catalog.string_agg(a.privilege_type, ', ' ORDER BY a.privilege_type)
          FROM pg_catalog.aclexplode(o.acl) a
         WHERE a.grantee OPERATOR(pg_catalog.=) 0)
  FROM o
ORDER BY 1, 2, 3
) TO STDOUT;
SQL
}

if [ "${1:-}" = dump ]; then
  shift
  dump "$@"
  exit
fi
[ $# -ge 2 ] || { echo "usage: $0 dump [PSQL_ARGS...] | $0 C PORTABLE [NAME]" >&2; exit 2; }
label="portable edition${3:+ ($3)}"

tmp=$(mktemp -d /tmp/idempotency-catalog.XXXXXX)
trap 'rm -rf "$tmp"' EXIT
# catalog SOURCE FILE: a dump of SOURCE (a file written by "dump", or a
# database) in FILE
catalog() {
  if [ -f "$1" ]; then
    cp "$1" "$2"
  else
    dump -d "$1" >"$2"
  fi
}
catalog "$1" "$tmp/c" || { echo "FAILED: cannot read the C edition's catalog ($1)"; exit 1; }
catalog "$2" "$tmp/p" || { echo "FAILED: cannot read the $label's catalog ($2)"; exit 1; }
[ -f "$CATALOG_DOC" ] || { echo "FAILED: no $CATALOG_DOC"; exit 1; }

# The table of the section "Catalog differences", one line per function
# of a row: row number, function pattern, attribute, C value, portable
# value (backquotes taken off; NULL as COPY writes it, \N).
awk '
  /^## / { in_section = ($0 == "## Catalog differences"); next }
  !in_section || !/^\|/ { next }
  {
    line++
    if (line <= 2) next                     # the header and its rule
    n = split($0, cell, "|")
    if (n != 7) { printf "malformed\t%d\t%s\n", NR, $0; next }
    for (i = 2; i <= 6; i++) { gsub(/^[ \t]+|[ \t]+$/, "", cell[i]) }
    for (i = 3; i <= 5; i++) {
      if (cell[i] == "NULL") cell[i] = "\\N"
      else if (cell[i] ~ /^`.*`$/) cell[i] = substr(cell[i], 2, length(cell[i]) - 2)
    }
    f = cell[2]; found = 0
    while (match(f, /`[^`]+`/)) {
      printf "row\t%d\t%s\t%s\t%s\t%s\n", NR, substr(f, RSTART + 1, RLENGTH - 2), cell[3], cell[4], cell[5]
      f = substr(f, RSTART + RLENGTH); found = 1
    }
    if (!found) printf "malformed\t%d\t%s\n", NR, $0
  }
' "$CATALOG_DOC" >"$tmp/rows"

doc=${CATALOG_DOC#"$IDEM_TOP"/}
awk -F '\t' -v plabel="$label" -v doc="$doc" -v cfile="$tmp/c" -v pfile="$tmp/p" -v rfile="$tmp/rows" '
  # glob(s, p): whether s matches p, in which "*" stands for any text
  function glob(s, p,   parts, n, i, at) {
    n = split(p, parts, "*")
    if (n == 1) return s == p
    if (substr(s, 1, length(parts[1])) != parts[1]) return 0
    s = substr(s, length(parts[1]) + 1)
    for (i = 2; i < n; i++) {
      if (parts[i] == "") continue
      at = index(s, parts[i])
      if (!at) return 0
      s = substr(s, at + length(parts[i]))
    }
    return length(s) >= length(parts[n]) && substr(s, length(s) - length(parts[n]) + 1) == parts[n]
  }
  function show(v) { return v == "\\N" ? "NULL" : v }
  function fail(msg) { print "FAILED: " msg; failures++ }
  # difference(sig, attr, c, p): a difference, which a row must list
  function difference(fsig, fattr, c, p,   r, listed) {
    ndiff++
    listed = 0
    for (r = 1; r <= nrows; r++)
      if (rattr[r] == fattr && rc[r] == c && rp[r] == p && glob(fsig, rfun[r])) { used[r] = 1; listed = 1 }
    if (!listed)
      fail(sprintf("%s %s: C edition %s, %s %s, not listed in %s (\"Catalog differences\")",
                   fsig, fattr, show(c), plabel, show(p), doc))
  }
  FILENAME == rfile && $1 == "malformed" { fail(sprintf("%s:%s: a malformed row of \"Catalog differences\": %s", doc, $2, $3)); next }
  FILENAME == rfile { nrows++; rline[nrows] = $2; rfun[nrows] = $3; rattr[nrows] = $4; rc[nrows] = $5; rp[nrows] = $6; next }
  {
    e = (FILENAME == cfile) ? "c" : "p"
    if ($1 == "function") {
      v[e, $2, $3] = $4
      if (!((e, $2) in fn)) { fn[e, $2] = 1; nfn[e]++ }
      # in the order of the files (the dump is sorted)
      if (!($2 in seen)) { seen[$2] = 1; sig[++nsig] = $2 }
      if (!($3 in seen_attr)) { seen_attr[$3] = 1; attr[++nattr] = $3 }
    } else if ($1 == "object") {
      nobj[e]++
      if ($4 != "\\N") public[e] = public[e] sprintf("\n  %s grants %s to PUBLIC", $2, $4)
    }
  }
  END {
    label["c"] = "C edition"; label["p"] = plabel
    for (i = 1; i <= 2; i++) {
      e = i == 1 ? "c" : "p"
      if (!nfn[e]) { fail("the " label[e] " has no function in schema idempotency"); continue }
      # every SECURITY DEFINER function pins search_path
      ndef = 0; bad = ""
      for (j = 1; j <= nsig; j++) {
        if (!((e, sig[j]) in fn) || v[e, sig[j], "prosecdef"] != "true") continue
        ndef++
        if (v[e, sig[j], "proconfig"] !~ /search_path=/) bad = bad "\n  " sig[j]
      }
      if (bad != "") fail(label[e] ": SECURITY DEFINER without search_path in proconfig:" bad)
      else print "ok: " label[e] ": its " ndef " SECURITY DEFINER functions set search_path"
      if (public[e] != "") fail(label[e] ": granted to PUBLIC:" public[e])
      else print "ok: " label[e] ": none of the " nobj[e] " objects of schema idempotency grants anything to PUBLIC"
    }
    # function by function
    both = 0
    for (j = 1; j <= nsig; j++) {
      s = sig[j]
      if (!(("c", s) in fn)) { difference(s, "exists", "false", "true"); continue }
      if (!(("p", s) in fn)) { difference(s, "exists", "true", "false"); continue }
      both++
      for (k = 1; k <= nattr; k++) {
        a = attr[k]
        cv = (("c", s, a) in v) ? v["c", s, a] : "\\N"
        pv = (("p", s, a) in v) ? v["p", s, a] : "\\N"
        if (cv != pv) difference(s, a, cv, pv)
      }
    }
    if (!nrows) fail("no table in the section \"Catalog differences\" of " doc)
    for (r = 1; r <= nrows; r++)
      if (!used[r]) {
        fail(sprintf("%s:%d: the row for %s %s (C edition %s, portable edition %s) matches no difference with the %s",
                     doc, rline[r], rfun[r], rattr[r], show(rc[r]), show(rp[r]), plabel))
      }
    if (!failures) {
      print "ok: " both " functions in both editions, " ndiff " differences with the " plabel ", each listed in " doc
      print "ok: each of the " nrows " functions or patterns of its table matches a difference"
    }
    exit failures ? 1 : 0
  }
' "$tmp/rows" "$tmp/c" "$tmp/p"
