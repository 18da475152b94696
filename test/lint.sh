#!/usr/bin/env bash
# test/lint.sh (make lint): static analysis of src/*.c with cppcheck and
# clang-tidy.  Any finding fails the run, except these, which are known
# and harmless:
#   cppcheck shadowFunction   PostgreSQL's fmgrprotos.h declares every
#       built-in SQL function as a C symbol (now(), ...); a local variable
#       named "now" shadows that declaration and nothing else.
#   cppcheck variableScope    suggests moving declarations into inner
#       blocks; the style guide declares at the top of a block.
#   clang-tidy bugprone-narrowing-conversions in execute.c's
#       statement_key_hash(): strlen() of a statement text goes to
#       hash_bytes()'s int length; a text value is at most 1 GB.
#   clang-tidy clang-analyzer-security.insecureAPI.*: asks for C11 Annex K
#       functions (memset_s), which neither glibc nor PostgreSQL provide.
#   clang-tidy performance-no-int-to-ptr: every DatumGetPointer() and
#       PG_GETARG_*_P() is an integer-to-pointer cast; that is how fmgr
#       passes values.
#   clang-tidy bugprone-implicit-widening-of-multiplication-result: flags
#       PostgreSQL's ALLOCSET_DEFAULT_SIZES macro (int products as Size).
#   cppcheck returnDanglingLifetime in cron.c's in_cron_session(): it
#       returns what its worker returned, a pstrdup() copy, not a pointer
#       into the local session.
#   cppcheck uninitvar in transition.c's run_plan(): rc is set in PG_TRY;
#       when that throws, PG_FINALLY re-throws and rc is never read.
#   cppcheck shadowVariable in state_machine.c: a block-local "old" memory
#       context inside a function that has one too; same meaning, no bug.
#   clang-tidy misc-no-recursion in state_machine.c's lookup_machine(): it
#       starts over once when its catalog read took in an invalidation.
#   clang-tidy bugprone-narrowing-conversions from int to AttrNumber in
#       state_machine.c and transition.c: attribute numbers of a table fit
#       (at most 1600 columns).
set -uo pipefail
IDEM_TOP=$(cd "$(dirname "$0")/.." && pwd)
. "$IDEM_TOP/scripts/lib.sh"
idem_ensure_packages $IDEM_PACKAGES cppcheck clang-tidy || exit 1
cd "$IDEM_TOP"
INCLUDES="-I src -I $($PG_BIN/pg_config --includedir-server) -I $($PG_BIN/pg_config --includedir)"
status=0
# Both tools parse PostgreSQL's headers for every file, which is most of
# their time: cppcheck in the background, clang-tidy a file at a time, on
# every core.
jobs=$(nproc)
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

cppcheck --quiet -j "$jobs" --enable=warning,style,performance,portability \
  --inline-suppr --template='{file}:{line}: {severity} {id}: {message}' \
  --suppress=missingIncludeSystem --suppress=missingInclude \
  --suppress=shadowFunction --suppress=variableScope \
  --suppress=returnDanglingLifetime:src/cron.c --suppress=uninitvar:src/transition.c \
  --suppress=shadowVariable:src/state_machine.c \
  -D__GNUC__ -D__x86_64__ $INCLUDES src/*.c >"$tmp/cppcheck" 2>&1 &
cppcheck_pid=$!

checks='-*,clang-analyzer-*,-clang-analyzer-security.insecureAPI.*,bugprone-*'
checks+=',-bugprone-easily-swappable-parameters,-bugprone-reserved-identifier'
checks+=',-bugprone-implicit-widening-of-multiplication-result'
checks+=',cert-*,-cert-dcl37-c,-cert-dcl51-cpp,misc-*,-misc-unused-parameters'
checks+=',performance-*,-performance-no-int-to-ptr,portability-*'
for f in src/*.c; do
  while [ "$(jobs -rp | wc -l)" -gt "$jobs" ]; do wait -n; done
  clang-tidy --quiet -checks="$checks" "$f" -- $INCLUDES -D_GNU_SOURCE >"$tmp/$(basename "$f").tidy" 2>/dev/null &
done
wait "$cppcheck_pid"
out=$(cat "$tmp/cppcheck")
if [ -n "$out" ]; then echo "$out"; status=1; else echo "cppcheck: clean"; fi
wait
hash_line=$(grep -n 'return hash_bytes((const unsigned char \*) k->sql' src/execute.c | cut -d: -f1)
out=$(cat "$tmp"/*.tidy |
  grep -E '^/.*: (warning|error):' |
  grep -vE "src/execute\.c:${hash_line:-0}:[0-9]+: warning: narrowing conversion from 'unsigned long' to signed type 'int'" |
  grep -vE "src/state_machine\.c:[0-9]+:[0-9]+: warning: function 'lookup_machine' is within a recursive call chain" |
  grep -vE "src/(state_machine|transition)\.c:[0-9]+:[0-9]+: warning: narrowing conversion from 'int' to signed type 'AttrNumber'")
if [ -n "$out" ]; then echo "$out"; status=1; else echo "clang-tidy: clean (besides the findings explained in test/lint.sh)"; fi
exit $status
