# bench/doc.sh: sourced by bench/run.sh, not run by itself.  After a run,
# write_doc writes doc/performance.md and its SVG charts (doc/bench-*.svg,
# with gnuplot) from the results of the run that just finished, so that the
# page never holds a figure that no run produced, and doc/dashboard.svg,
# monitoring/grafana-dashboard.json drawn from what Prometheus scraped
# during the run (dashboard_start, bench/dashboard.py).  Uses run.sh's
# variables (RESULTS, TARGETS, NOTES, WORK, BIN, CLUSTER, BENCH_*) and
# functions (colmed, table, qv).  The page is written when every group ran,
# or when BENCH_DOC=1 asks for it after a partial run; BENCH_DOC=0 never
# writes it, nor does a run in a chroot (make bench PG=17 or 18): the page
# is the host's run's, with a section "PostgreSQL 18" holding the targets
# of the newest bench/results/*-pg18.md that make bench PG=18 left, if any.

DOC_DIR=$IDEM_TOP/doc

# chart GROUP FILE TITLE YLABEL: clustered bars of the median TPS of every
# variant of GROUP (the C edition's first, then the portable edition's,
# then the baselines), one bar per
# client count.  Prints nothing and returns 1 when the group has no results.
chart() {
  local group=$1 out=$2 title=$3 ylabel=$4 data clients v c i plot role
  awk -v g="$group" '$1 == g {f = 1; exit} END {exit !f}' "$RESULTS" || return 1
  data=$WORK/chart-$group.dat
  clients=$(awk -v g="$group" '$1 == g && !s[$4]++ {print $4}' "$RESULTS" | sort -n)
  : >"$data"
  for role in ours portable base; do
    for v in $(awk -v g="$group" -v r="$role" '$1 == g && $3 == r && !s[$2]++ {print $2}' "$RESULTS"); do
      if [ "$role" = base ]; then printf '"%s (baseline)"' "$v"; else printf '"%s"' "$v"; fi
      for c in $clients; do printf ' %s' "$(colmed "$group" "$v" "$c" 6)"; done
      echo
    done >>"$data"
  done
  plot="plot"
  i=2
  for c in $clients; do
    [ "$i" -gt 2 ] && plot+=","
    plot+=" '$data' using $i$([ "$i" = 2 ] && echo ':xtic(1)') title '$c client$([ "$c" = 1 ] || echo s)'"
    i=$((i + 1))
  done
  gnuplot <<GP || return 1
set terminal svg size 760,400 dynamic noenhanced font "sans,12" background "#ffffff"
set output '$out'
set title "$title"
set datafile missing "NA"
set style data histograms
set style histogram clustered gap 1
set style fill solid 0.85 border -1
set boxwidth 0.9
set ylabel "$ylabel"
set yrange [0:*]
set format y "%.0f"
set grid ytics
set key outside top center horizontal
set xtics rotate by 25 right nomirror
set bmargin 7
$plot
GP
}

# other_major MAJOR: a section with the targets table of the newest report
# of make bench PG=MAJOR in bench/results (<UTC timestamp>-pgMAJOR.md, so
# the names sort by time), and its settings line.  Nothing without one.
other_major() {
  local m=$1 f
  f=$(ls "$IDEM_TOP"/bench/results/*-pg"$m".md 2>/dev/null | sort | tail -1)
  [ -n "$f" ] && grep -q '^### Targets' "$f" || return 0
  printf '\n## PostgreSQL %s\n\n' "$m"
  echo "The targets from the newest \`make bench PG=$m\` on this machine, in the Debian"
  echo "$(idem_suite_of "$m") chroot of \`scripts/chroot.sh\` ($(sed -n '1s/^# make bench[^,]*, //p' "$f"), report"
  echo "\`bench/results/$(basename "$f")\`, not in git), a separate run from the one above:"
  echo
  sed -n '3p' "$f"
  echo
  awk '/^### Targets/ {on = 1; next} on && /^#/ {exit} on && /^\|/ {print}' "$f"
}

# editions_doc: the section on the two editions, around run.sh's
# editions_table; nothing when the portable edition did not run.
editions_doc() {
  local range
  [ -n "$(editions_table)" ] || return 0
  range=$(editions_range)
  echo "## The C edition and the portable edition"
  echo
  echo "Every workload of the extension in both editions beside the hand-written"
  echo "SQL it replaces (the baseline named; the relay has none), from the rounds"
  echo "of the results below: medians of the per-round TPS ratios and, in"
  echo "brackets, of the p50 latency ratios; above 1, the first named is faster."
  echo
  editions_table
  echo
  if [ -n "$range" ]; then
    set -- $range
    echo "In this run the portable edition made between $1 and $2 times the"
    echo "C edition's transactions per second over these $3 rows (median of the"
    echo "per-round ratios of each)."
    echo
  fi
  echo "What a team on a managed service gets is the portable column: the same"
  echo "API and the same stored rows, at the cost of doing each call's work in"
  echo "PL/pgSQL and SQL instead of C (the interpreter and its expressions around"
  echo "the same statements; \`claim_events\`, \`transition\` and"
  echo "\`purge_expired_batch\` build theirs at each call). Where a durable"
  echo "commit's WAL flush and the round trip take most of the time, the editions"
  echo "are closer than where the CPU is the limit (replays, which write"
  echo "nothing; \`synchronous_commit=off\`; 8 clients on this machine's $(nproc)"
  echo "cores). These figures are from a local disk: a managed service's"
  echo "network storage adds the same wait to every durable commit of both"
  echo "editions and the baseline, which moves every ratio of a committing"
  echo "workload toward 1 and leaves the replays' as they are. The pg_tle"
  echo "route installs the same function bodies as the plain"
  echo "script measured here (\`CREATE EXTENSION\` runs the same scripts), so its"
  echo "calls cost the same; it is not measured separately. The speed of the C"
  echo "edition is the reason to run PostgreSQL where C extensions may be"
  echo "installed; doc/portable.md lists the other differences between the"
  echo "editions."
  [ -s "$WORK/profile.md" ] && cat "$WORK/profile.md"
}

# portable_doc: doc/portable.md's section "Speed" from this run, between
# its two marker lines (the rest of that page is written by hand).
PORTABLE_DOC_BEGIN='<!-- The section below is written by make bench (bench/doc.sh); do not edit it. -->'
PORTABLE_DOC_END='<!-- End of the section written by make bench. -->'
portable_doc() {
  local page=$DOC_DIR/portable.md range
  [ -n "$(editions_table)" ] && grep -qxF "$PORTABLE_DOC_BEGIN" "$page" && grep -qxF "$PORTABLE_DOC_END" "$page" || return 0
  range=$(editions_range)
  {
    awk -v b="$PORTABLE_DOC_BEGIN" '{print} $0 == b {exit}' "$page"
    echo
    echo "## Speed"
    echo
    echo "What a team on a managed service gets, from \`$BENCH_COMMAND\` ($(date -u '+%Y-%m-%d'),"
    echo "commit $(doc_commit); the whole run, its settings and the C edition's"
    echo "figures are in [performance.md](performance.md)): the portable edition's"
    echo "throughput beside the hand-written SQL it replaces and beside the C"
    echo "edition, as medians of the per-round TPS ratios (in brackets, of the p50"
    echo "latency ratios; above 1, the first named is faster), every workload run"
    echo "as an application role given \`grant_usage\`, the edition installed by a"
    echo "role that is no superuser."
    echo
    editions_table
    if [ -n "$range" ]; then
      set -- $range
      echo
      echo "The portable edition made between $1 and $2 times the C edition's"
      echo "transactions per second over these $3 rows."
    fi
    [ -s "$WORK/profile.md" ] && sed 's/^### /### /' "$WORK/profile.md"
    echo
    awk -v e="$PORTABLE_DOC_END" 'f {print} $0 == e {f = 1; print}' "$page"
  } >"$page.tmp" && mv "$page.tmp" "$page"
  idem_log "wrote doc/portable.md, section Speed"
}

# doc_wanted: true when this run writes the pages (every group ran, or
# BENCH_DOC=1; never with BENCH_DOC=0 nor in a chroot); says why not.
doc_wanted() {
  local g all=1
  if [ -n "${BENCH_CHROOT:-}" ]; then
    idem_log "doc/performance.md and doc/dashboard.svg left alone (a run in the $BENCH_CHROOT chroot; the host's run writes them)"
    return 1
  fi
  for g in $ALL_GROUPS; do [[ " $BENCH_GROUPS " == *" $g "* ]] || all=0; done
  if [ "${BENCH_DOC:-}" = 0 ] || { [ "$all" = 0 ] && [ "${BENCH_DOC:-}" != 1 ]; }; then
    idem_log "doc/performance.md and doc/dashboard.svg left alone (not every group ran; BENCH_DOC=1 writes them anyway)"
    return 1
  fi
}

# doc_commit: the commit the run measured, and whether src, sql or bench
# differed from it.
doc_commit() {
  echo "$(idem_commit)$([ -z "$(git -C "$IDEM_TOP" status --porcelain -- src sql bench 2>/dev/null)" ] ||
    echo ', with uncommitted changes to src, sql or bench')"
}

# dashboard_start: when the run writes the pages, bench/dashboard.py serve
# in the background from now on: postgres_exporter with
# monitoring/postgres_exporter.yaml on database bench (the C edition's),
# scraped by Prometheus every BENCH_SCRAPE seconds (default 15), both on
# 127.0.0.1; run.sh's cleanup stops it by DASHBOARD_PID.
dashboard_start() {
  doc_wanted 2>/dev/null || return 0
  DASHBOARD_DIR=$WORK/dashboard
  /usr/bin/python3 "$IDEM_TOP/bench/dashboard.py" serve "$DASHBOARD_DIR" \
    "host=$CLUSTER port=5432 user=postgres dbname=bench sslmode=disable" \
    --scrape "${BENCH_SCRAPE:-15}" 2>>"$WORK/errors.log" &
  DASHBOARD_PID=$!
}

write_doc() {
  local g page tmp cpu mem os groups_ran charts="" chart_file title
  doc_wanted || return 0
  command -v gnuplot >/dev/null || { echo "gnuplot missing: doc/performance.md not written" >&2; return 1; }
  mkdir -p "$DOC_DIR"
  rm -f "$DOC_DIR"/bench-*.svg
  declare -A YLABEL=([relay]="events per second")
  for g in $BENCH_GROUPS; do
    case $g in wal | memory | purge | notify | wait | waits | profile) continue ;; esac
    title=${TITLE[$g]}
    if chart "$g" "$DOC_DIR/bench-$g.svg" "$title" "${YLABEL[$g]:-transactions per second}"; then
      charts+=" $g"
    fi
  done
  if [[ " $charts " == *" e2e "* ]]; then
    chart e2e "$DOC_DIR/bench-headline.svg" \
      "Idempotent payment request (claim, business INSERT, stored answer)" "transactions per second" ||
      rm -f "$DOC_DIR/bench-headline.svg"
  fi

  cpu=$(sed -n 's/^model name[[:space:]]*: //p' /proc/cpuinfo | head -1)
  mem=$(awk '/^MemTotal/ {printf "%.1f GiB", $2 / 1048576}' /proc/meminfo)
  os=$(. /etc/os-release 2>/dev/null && echo "${PRETTY_NAME:-?}")
  groups_ran=$BENCH_GROUPS
  page=$DOC_DIR/performance.md
  tmp=$page.tmp
  {
    echo "# Performance"
    echo
    echo "What the extension costs against the SQL and the Redis scheme it replaces:"
    echo "throughput and latency of every workload beside its baselines, for the C"
    echo "edition and the portable edition (doc/portable.md), from one run of"
    echo "\`make bench\`. This page and its charts are written by \`make bench\`"
    echo "(\`bench/run.sh\`) from the run it just made; do not edit them by hand (the"
    echo "analysis at the end comes from \`bench/notes.md\`)."
    echo
    echo "## This run"
    echo
    echo "| | |"
    echo "| --- | --- |"
    echo "| command | \`$BENCH_COMMAND\` |"
    echo "| settings | \`BENCH_SECONDS=$BENCH_SECONDS BENCH_ROUNDS=$BENCH_ROUNDS BENCH_METRICS_ROUNDS=$BENCH_METRICS_ROUNDS BENCH_CLIENTS=\"$BENCH_CLIENTS\" BENCH_ROWS=$BENCH_ROWS BENCH_MEMORY_CALLS=$BENCH_MEMORY_CALLS\` |"
    echo "| workload groups | $groups_ran |"
    echo "| date | $(date -u '+%Y-%m-%d %H:%M UTC'), $(( $(date +%s) - START )) s |"
    echo "| commit | $(doc_commit) |"
    echo "| CPU | ${cpu:-?}, $(nproc) cores |"
    echo "| memory | $mem |"
    echo "| system | $os |"
    echo "| load average at the start | $BENCH_LOAD |"
    echo "| PostgreSQL | $(qv 'SHOW server_version'), \`fsync=on\`, \`synchronous_commit=on\`, \`full_page_writes=on\`, \`shared_buffers=1GB\` |"
    echo "| Redis | $(redis-server --version | cut -d' ' -f3 | sed 's/^v=//') (one server with \`appendfsync always\`, one without AOF) |"
    echo
    if [ "$BENCH_SECONDS" -lt 2 ] || [ "$BENCH_ROUNDS" -lt 7 ] || [ "$BENCH_ROWS" -lt 1000000 ]; then
      echo "**A reduced run** (shorter, fewer rounds or fewer rows than a full \`make bench\`):"
      echo "one noisy round can move any figure below by a large factor. Take the"
      echo "extension's speed from a full run; this one shows what the page holds."
      echo
    fi
    echo "Absolute figures depend on the machine and on what else ran on it; the"
    echo "ratios pair neighbouring runs of the extension and its baseline, and are"
    echo "the figures to compare between runs."
    echo
    echo "## How it is measured"
    echo
    echo "A throwaway cluster with durable settings, and two local Redis servers."
    echo "Every workload runs with pgbench (\`-M prepared\`, keys \`<client"
    echo "id>-<random 15-digit number>\`, so that B-tree inserts land at random"
    echo "places) for the extension and its baselines alternately, \`BENCH_ROUNDS\`"
    echo "rounds of \`BENCH_SECONDS\` each, the order rotating every round. Tables"
    echo "show medians over the rounds; a ratio cell is the median of the"
    echo "per-round TPS ratios (ours / baseline) and, in brackets, of the p50"
    echo "latency ratios (baseline / ours): above 1, ours is faster. The run also"
    echo "checks that a replay writes no WAL, that backend memory does not grow"
    echo "over many calls, how \`purge_expired\` compares with a bare \`DELETE\`,"
    echo "and (\`waits\`) where the backends of a new request's workloads and"
    echo "their baselines spend their time with the most clients: on a processor"
    echo "or waiting for the WAL flush, with the WAL each transaction writes."
    echo
    echo "The baselines are plain files in \`bench/\`: \`setup.sql\` (the hand-written"
    echo "key table of the service this extension replaces, a PL/pgSQL"
    echo "claim/complete, copies of the inbox and outbox tables), \`pgbench/*.sql\`"
    echo "(one script per workload and baseline) and \`redis_driver.c\` (the Redis"
    echo "scheme: \`SET NX EX\`, the business \`INSERT\` in PostgreSQL, \`SET XX EX\`,"
    echo "with libpq and hiredis, one thread per client)."
    echo
    echo "The portable edition runs in the same rounds, in a second cluster with"
    echo "the same settings and without the C library, as on a managed service: its"
    echo "plain script (\`scripts/portable.py build\`), run with \`psql -f\` by a"
    echo "role that has \`CREATE\` on the database and nothing more, takes the same"
    echo "pgbench scripts as the C edition (rows"
    echo "\`portable_<workload>\`). Every workload of both editions, and every"
    echo "baseline, runs as an application role (\`bench_app\`) given"
    echo "\`grant_usage\` and the baselines' tables (\`bench/grant_app.sql\`), no"
    echo "superuser; the outcome-count groups run as \`postgres\`, since only a"
    echo "superuser sets \`idempotency.track_outcomes\`. The WAL, waits, memory,"
    echo "purge and relay wake-up checks measure the C edition only; group"
    echo "\`profile\` the portable edition's functions (below)."
    echo
    echo "All the while Prometheus scrapes postgres_exporter with"
    echo "\`monitoring/postgres_exporter.yaml\` in the C edition's database every"
    echo "${BENCH_SCRAPE:-15} s, as a monitored server would be, for the picture of the"
    echo "Grafana dashboard in doc/operations.md (\`doc/dashboard.svg\`, drawn by"
    echo "\`bench/dashboard.py\`): the outcome counts (shared memory) at every"
    echo "scrape, and once a minute \`idempotency.stats\` and"
    echo "\`idempotency.stalled_keys\`, which read the keys' table."
    echo
    echo '```sh'
    echo 'make bench                          # the full run, about 20 minutes'
    echo 'BENCH_SECONDS=1 make bench          # the quick run, under 5 minutes'
    echo 'BENCH_GROUPS="e2e bare" make bench  # some workloads (BENCH_DOC=1 to write this page)'
    echo '```'
    echo
    echo "| knob | default (quick run) | what |"
    echo "| --- | --- | --- |"
    echo "| \`BENCH_SECONDS\` | 2 (1) | seconds per pgbench run |"
    echo "| \`BENCH_ROUNDS\` | 7 (3) | alternating rounds per workload (the purge: at most 3) |"
    echo "| \`BENCH_METRICS_ROUNDS\` | 15 (5) | rounds of the counted-vs-not groups (\`metrics_*\`), whose few percent are below one round's spread; never fewer than \`BENCH_ROUNDS\` |"
    echo "| \`BENCH_CLIENTS\` | \`1 8\` | client counts |"
    echo "| \`BENCH_ROWS\` | 1000000 (100000) | completed keys for the replay workload, expired keys for the purge |"
    echo "| \`BENCH_MEMORY_CALLS\` | 100000 (10000) | calls per function in the memory check |"
    echo "| \`BENCH_GROUPS\` | all | \`$ALL_GROUPS\` |"
    echo "| \`BENCH_EDITIONS\` | \`c portable\` | the editions measured beside the baselines |"
    echo "| \`BENCH_PROFILE_TX\` | 2000 (500) | transactions of each workload in group \`profile\` |"
    echo "| \`BENCH_DOC\` | write after a full run | \`1\`: write this page and doc/dashboard.svg after a partial run too; \`0\`: never |"
    echo "| \`BENCH_KEEP\` | unset | \`1\` keeps the work directory (cluster, logs) |"
    echo "| \`BENCH_SCRAPE\` | 15 | seconds between Prometheus' scrapes for doc/dashboard.svg |"
    echo
    editions_doc
    echo
    echo "## Results"
    for g in $BENCH_GROUPS; do
      case $g in wal | memory | purge | notify | wait | waits | profile) continue ;; esac
      table "$g" | sed 's/^### /### /'
      if [[ " $charts " == *" $g "* ]]; then
        printf '\n![%s: TPS at each client count](bench-%s.svg)\n' "${TITLE[$g]}" "$g"
      fi
    done
    [ -s "$WORK/purge.md" ] && cat "$WORK/purge.md"
    [ -s "$WORK/notify.md" ] && cat "$WORK/notify.md"
    [ -s "$WORK/wait.md" ] && cat "$WORK/wait.md"
    if [ -s "$TARGETS" ]; then
      printf '\n### Targets\n\nThe ratios the extension aims at, from this run.\n\n| target | measured | wanted | verdict |\n|---|---:|---:|---|\n'
      cat "$TARGETS"
    fi
    if [ -s "$NOTES" ]; then printf '\n### Notes\n\n'; cat "$NOTES"; fi
    if [ -s "$WORK/errors.log" ]; then printf '\n### Errors\n\n```\n'; tail -20 "$WORK/errors.log"; printf '```\n'; fi
    other_major 18
    if [ -s "$IDEM_TOP/bench/notes.md" ]; then
      echo
      # without its leading HTML comment, which is for the people editing it
      awk 'state == 0 && /^<!--/ {state = 1} state == 1 {if (/-->/) state = 2; next} {print}' "$IDEM_TOP/bench/notes.md"
    fi
  } >"$tmp" && mv "$tmp" "$page"
  idem_log "wrote $page and$(for g in $charts; do printf ' bench-%s.svg' "$g"; done)"
  portable_doc
  /usr/bin/python3 "$IDEM_TOP/bench/dashboard.py" draw "${DASHBOARD_DIR:-}" "$DOC_DIR/dashboard.svg" \
    --title "$BENCH_COMMAND, $(date -u '+%Y-%m-%d %H:%M UTC'), commit $(doc_commit)" ||
    { echo "doc/dashboard.svg not written" >&2; return 1; }
}
