#!/usr/bin/env bash
# test/portable/lexer.sh MODE ROLE: the two paths of the portable execute()'s
# lexer (sql/portable/execute.sql) read every text alike.  A text of ASCII
# words, numbers, operators and $n only goes through a few regular
# expressions, any other through the character lexer; both must give the
# same number of statements, words outside parentheses, first bad
# parameter and rewritten text.  The lexer is taken out of the body into
# two functions of a scratch database, one that takes the short path where
# it can and one that never does, and both read some 25000 generated texts
# (fixed seeds), about half of them fit for the short path, of words,
# keywords, numbers, parameters in and out of range, operators,
# parentheses paired or not, white space and, rarely, what only the
# character lexer reads (quotes, comments, semicolons, dollar quotes,
# backslashes, non-ASCII, vertical tabs).  MODE and ROLE are not used (the
# texts do not depend on the route).
#
# Run by test/portable/run.sh's group lexer as the OS user of a superuser
# role (PGUSER), with psql in PATH and PGHOST/PGPORT set; creates and
# drops the database portable_lexer.  Prints "ok: ..." and exits 0 when
# both paths agree on every text.
set -euo pipefail
TOP=$(cd "$(dirname "$0")/../.." && pwd)
db=portable_lexer
sql=$(mktemp /tmp/portable-lexer.XXXXXX.sql)
trap 'rm -f "$sql"' EXIT
python3 - "$TOP/sql/portable/execute.sql" >"$sql" <<'PY'
import random, sys
src = open(sys.argv[1]).read()
decl_start = src.index("DECLARE\n", src.index("CREATE OR REPLACE FUNCTION idempotency.execute("))
decl = src[decl_start:src.index("BEGIN\n", decl_start)]
# (no extension in the scratch database: its types are not needed here)
decl = ''.join(l for l in decl.splitlines(True) if 'idempotency.' not in l)
lex = src[src.index("    -- the lexer: statements,"):src.index("    -- (one test for the usual statement, as above)")]
mark = "    IF NOT by_characters THEN\n        first_words"
assert lex.count(mark) == 1, "the lexer's short path is not where this test looks for it"
slow = lex.replace(mark, "    by_characters := true;\n" + mark)
for name, body in (("lex_short", lex), ("lex_characters", slow)):
    print("CREATE FUNCTION %s(statement text, params text[]) RETURNS text LANGUAGE plpgsql AS $f$\n%sBEGIN\n%s"
          "    RETURN pg_catalog.concat_ws(' | ', statements, first_words::text, COALESCE(bad_param::text, '-'),\n"
          "                                rewritten, by_characters);\nEND\n$f$;" % (name, decl, body))
words = ['select', 'insert', 'into', 'update', 'delete', 'with', 'returning', 'copy', 'stdin', 'stdout',
         'prepare', 'transaction', 'begin', 'values', 'table', 'from', 'where', 'e5', 'a$b', 'x1', '_y',
         'SET', 'Returning', 'WITH', 'Select', 'merge', 't']
nums = ['1', '12', '1e5', '0', '007', '3.14', '.5', '10a']
params = ['$0', '$1', '$2', '$3', '$10', '$01', '$1234567890', '$99999999']
punct = list('(),.*+-/<>=:!|&%^[]{}@#~?') + ['::', '->']
other = ['--', '/*', '$', "'", '"', ';', '\x0b', '\u00e9', '$x', '\\', '$$', "E'"]
spaces = [' ', '  ', '\t', '\n', '\r', '']
def token(rnd):
    r = rnd.random()
    if r < 0.4: return rnd.choice(words)
    if r < 0.55: return rnd.choice(nums)
    if r < 0.7: return rnd.choice(params)
    if r < 0.97: return rnd.choice(punct)
    return rnd.choice(other)
def literal(s):
    return "E'" + ''.join({'\\': '\\\\', "'": "\\'", '\n': '\\n', '\r': '\\r', '\t': '\\t',
                           '\x0b': '\\013'}.get(c, c) for c in s) + "'"
print("CREATE TABLE texts (t text, params text[]);")
for seed, params_given in enumerate(["'{a,b}'", "'{}'", "'{a,b,c,d,e,f,g,h,i,j,k}'"] * 2):
    rnd = random.Random(seed)
    texts = [''.join(rnd.choice(spaces) + token(rnd) for _ in range(rnd.randint(0, 14))) + rnd.choice(spaces)
             for _ in range(4000)]
    print("INSERT INTO texts VALUES %s;" % ", ".join("(%s, %s)" % (literal(t), params_given) for t in texts))
print("INSERT INTO texts VALUES ('', '{}'), (' ', '{}'), ('$1', '{a}'), ('($1)', '{a}'), "
      "('SELECT (1', '{}'), ('SELECT 1)', '{}'), ('((a))b', '{}'), ('a$1', '{a}'), ('1$1', '{a}');")
print(r"""
SELECT count(*) AS texts,
       count(*) FILTER (WHERE lex_short(t, params) LIKE '%| f') AS short_path,
       count(*) FILTER (WHERE regexp_replace(lex_short(t, params), ' \| [tf]$', '')
                              IS DISTINCT FROM regexp_replace(lex_characters(t, params), ' \| [tf]$', '')) AS differ
  FROM texts \gset
\echo :texts texts, :short_path on the short path, :differ read otherwise than by the character lexer
SELECT :differ = 0 AND :short_path > :texts / 3 AS agree \gset
\if :agree
\else
SELECT quote_literal(t), lex_short(t, params), lex_characters(t, params) FROM texts
 WHERE regexp_replace(lex_short(t, params), ' \| [tf]$', '')
       IS DISTINCT FROM regexp_replace(lex_characters(t, params), ' \| [tf]$', '') LIMIT 5;
DO $$ BEGIN RAISE EXCEPTION 'the two paths of the lexer differ, or the short one is too rarely taken'; END $$;
\endif
""")
PY
chmod 644 "$sql"
psql -X -q -v ON_ERROR_STOP=1 -d postgres -c "DROP DATABASE IF EXISTS $db" -c "CREATE DATABASE $db TEMPLATE template0"
psql -X -q -v ON_ERROR_STOP=1 -d "$db" -f "$sql"
psql -X -q -v ON_ERROR_STOP=1 -d postgres -c "DROP DATABASE $db"
echo "ok: the short path of execute()'s lexer reads every text as the character lexer does"
