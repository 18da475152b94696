#!/usr/bin/env bash
# test/integration/docs.sh: the documentation cannot rot.  Every ```sql
# block of README.md and doc/*.md runs, in file order, against a fresh
# database, and a block that shows its output must print exactly that.
#
# Conventions for writing the pages (doc/reference.md, "About the examples",
# sums them up):
#
#   ```sql            runs; it must succeed (psql -X -q -v ON_ERROR_STOP=1).
#   ```sql error      runs; it must fail with an ERROR (an example of one).
#   ```sql norun      is shown, never run: it needs what a fresh database
#                     lacks (another database, a standby, a placeholder).
#   ```output         directly after a sql block (blank lines between are
#                     allowed): what psql prints for it, compared line by
#                     line, trailing blanks ignored.  Command tags are not
#                     printed (-q); an error reads "ERROR:  ..." as in an
#                     interactive psql (the "psql:<stdin>:N: " prefix is
#                     dropped).
#   other blocks      (```sh, ```json, ``` ...) are not touched.
#
# Each file gets its own fresh database named "app" (so that examples may
# say ALTER DATABASE app), with CREATE EXTENSION idempotency done; its
# blocks run in order, each in its own psql session, so what one block
# creates the next can use, but settings do not carry over.  After the
# file the database is dropped, and so are the roles its blocks created.
# The session runs with TimeZone UTC, DateStyle ISO and the C.UTF-8 locale.
#
# It also checks that README.md stays a front page (at most 30 KB) and
# names every page of doc/.
#
# In make test (test/run.sh, integration group) PGHOST, PGPORT and PGUSER
# point at the throwaway cluster.  By hand, against any server with the
# extension installed: bash test/integration/docs.sh [FILE...]
# DOCS_SHOW=1 prints what every block printed, to write ```output blocks.
. "$(dirname "$0")/lib.bash"
cd "$TOP"
export PSQL=${IDEM_TEST_BIN:+$IDEM_TEST_BIN/}psql
export PGTZ=UTC PGDATESTYLE='ISO, MDY' PGCLIENTENCODING=UTF8 LC_ALL=C.UTF-8
unset PGDATABASE PGOPTIONS
python3 - "$@" <<'PY'
import difflib, glob, os, re, subprocess, sys

PSQL = os.environ["PSQL"]
SHOW = os.environ.get("DOCS_SHOW") == "1"
DB = "app"
README_LIMIT = 30 * 1024
failures = []

def fail(where, msg, text=""):
    failures.append(f"{where}: {msg}" + ("\n" + text if text else ""))

def psql(db, sql, extra=()):
    """run sql on db; returns (exit code, stdout+stderr)"""
    p = subprocess.run([PSQL, "-X", "-q", "-v", "ON_ERROR_STOP=1", "-d", db, *extra, "-f", "-"],
                       input=sql, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    return p.returncode, p.stdout

def admin(sql):
    rc, out = psql("postgres", sql, ("-At",))
    if rc != 0:
        print(f"docs: set-up failed: {sql}\n{out}")
        sys.exit(1)
    return out

FENCE = re.compile(r"^( {0,3})(```+)\s*([^`]*?)\s*$")

def blocks(path):
    """yield (line, info words, text) of every fenced block"""
    lines = open(path, encoding="utf-8").read().split("\n")
    i = 0
    while i < len(lines):
        m = FENCE.match(lines[i])
        if not m:
            i += 1
            continue
        indent, ticks, info = len(m.group(1)), m.group(2), m.group(3).split()
        start, body = i + 1, []
        i += 1
        while i < len(lines):
            c = re.match(r"^ {0,3}(```+)\s*$", lines[i])
            if c and len(c.group(1)) >= len(ticks):
                break
            l = lines[i]
            body.append(l[indent:] if l[:indent].strip() == "" else l)
            i += 1
        else:
            fail(f"{path}:{start}", "block is never closed")
        # the line after the closing fence, for "directly after" checks
        yield start, info, "\n".join(body), i + 1
        i += 1

def normalize(text):
    out = []
    for l in text.split("\n"):
        l = re.sub(r"^psql:<stdin>:\d+: ", "", l).rstrip()
        out.append(l)
    while out and out[0] == "":
        out.pop(0)
    while out and out[-1] == "":
        out.pop()
    return out

def check_file(path, counts):
    bl = list(blocks(path))
    if not any(b[1][:1] == ["sql"] and "norun" not in b[1] for b in bl):
        return
    lines = open(path, encoding="utf-8").read().split("\n")
    admin(f'DROP DATABASE IF EXISTS "{DB}" WITH (FORCE)')
    roles_before = set(admin("SELECT rolname FROM pg_roles").split("\n"))
    admin(f'CREATE DATABASE "{DB}"')
    rc, out = psql(DB, "CREATE EXTENSION idempotency;")
    if rc != 0:
        fail(path, "CREATE EXTENSION failed", out)
        return
    counts["files"] += 1
    last = None          # (line, output, end line) of the previous sql block
    for start, info, text, end in bl:
        where = f"{path}:{start}"
        kind = info[0] if info else ""
        if kind == "output":
            if last is None or any(l.strip() for l in lines[last[2]:start - 1]):
                fail(where, "an output block must directly follow a sql block that runs")
                continue
            counts["compared"] += 1
            want, got = normalize(text), normalize(last[1])
            if want != got:
                diff = "\n".join(difflib.unified_diff(want, got, "documented", "printed", lineterm=""))
                fail(where, f"output differs from what the sql block at line {last[0]} prints", diff)
            last = None
            continue
        last = None
        if kind != "sql":
            continue
        flags = set(info[1:])
        unknown = flags - {"norun", "error"}
        if unknown:
            fail(where, f"unknown flag(s) {' '.join(sorted(unknown))} (norun, error)")
            continue
        if "norun" in flags:
            counts["norun"] += 1
            continue
        counts["ran"] += 1
        rc, out = psql(DB, text + "\n")
        if SHOW:
            print(f"----- {where} (exit {rc})\n{out}", end="" if out.endswith("\n") else "\n")
        if "error" in flags:
            if rc == 0 or "ERROR:" not in out:
                fail(where, "block marked error ran without an error", out)
        elif rc != 0:
            fail(where, f"block failed (psql exit {rc})", out)
        last = (start, out, end)
    admin(f'DROP DATABASE IF EXISTS "{DB}" WITH (FORCE)')
    for r in sorted(set(admin("SELECT rolname FROM pg_roles").split("\n")) - roles_before):
        admin(f'DROP ROLE "{r}"')

files = sys.argv[1:] or ["README.md"] + sorted(glob.glob("doc/*.md"))
counts = {"files": 0, "ran": 0, "compared": 0, "norun": 0}
for f in files:
    check_file(f, counts)

if not sys.argv[1:]:
    readme = open("README.md", encoding="utf-8").read()
    size = len(readme.encode("utf-8"))
    if size > README_LIMIT:
        fail("README.md", f"{size} bytes: keep the front page at most {README_LIMIT} and move the rest into doc/")
    for page in sorted(glob.glob("doc/*.md")):
        if f"({page})" not in readme and f"({page}#" not in readme:
            fail("README.md", f"does not link {page} (the map of the documentation names every page)")

if failures:
    for f in failures:
        print(f"FAIL: {f}\n")
    print(f"docs: {len(failures)} problem(s)")
    sys.exit(1)
print(f"docs: {counts['ran']} sql blocks ran in {counts['files']} files, "
      f"{counts['compared']} outputs compared, {counts['norun']} blocks not run")
PY
