#!/usr/bin/python3
"""bench/profile_doc.py: the per-phase report of `make profile` (bench/profile.sh).

    profile_doc.py RUNS_DIR TX FUNCTIONS.tsv [OUT.md]

RUNS_DIR holds, per profiled script, the callgrind files of the backend
that ran it for TX and for 3 x TX transactions (SCRIPT.short, SCRIPT.long).
FUNCTIONS.tsv lists the C symbols of the extension's SQL functions, each
with t when it is a trigger function.  Each figure is the difference of the
two files divided by 2 x TX: one transaction without the connection's start
and end.  The tables go to stdout; with OUT.md also the page
doc/profile.md, their head added (the command line, PostgreSQL version and commit come from
PROFILE_COMMAND, PROFILE_PG and PROFILE_COMMIT).

Debian's postgres binary has no debug information: its exported functions
are named, its static ones (exec_bind_message, CommitTransaction,
_SPI_execute_plan) are bare addresses, often inlined.  Each phase is
therefore the inclusive cost of exported functions, summed over the call
arcs into them; callgrind names a function entered again while it is
already on the stack NAME'2, so the arcs into the plain name are the
outermost calls, which never count the same instructions twice.
"""
import collections
import datetime
import os
import re
import sys
import textwrap

# workloads and their baselines (bench/run.sh's pairs): the first is ours,
# the next the baseline the paragraph compares it with
GROUPS = [
    ("`execute` with the business `INSERT`",
     ["e2e_execute.sql", "e2e_floor.sql", "e2e_insert_only.sql"]),
    ("phased request (claim; complete)", ["phased.sql", "floor.sql"]),
    ("one-transaction request", ["onetx.sql", "onetx_raw.sql"]),
    ("replay of a completed key", ["replay.sql", "replay_pk.sql"]),
    ("`process_once`", ["process_once.sql", "inbox.sql"]),
    ("`enqueue_event`", ["enqueue_event.sql", "outbox.sql"]),
    ("`transition`", ["transition.sql", "transition_raw.sql"]),
    ("`process_once` of a batch of 100 ids",
     ["inbox_batch_100.sql", "inbox_multirow_100.sql", "inbox_multirow_arrays_100.sql"]),
    ("`enqueue_events` of a batch of 100",
     ["enqueue_batch_100.sql", "outbox_multirow_100.sql", "outbox_multirow_arrays_100.sql"]),
]

SPI_STATEMENTS = {
    "SPI_execute", "SPI_execute_extended", "SPI_execute_plan",
    "SPI_execute_plan_extended", "SPI_execute_plan_with_paramlist",
    "SPI_execute_snapshot", "SPI_execute_with_args", "SPI_execp",
    "SPI_cursor_open", "SPI_cursor_open_with_args",
    "SPI_cursor_open_with_paramlist", "SPI_cursor_parse_open"}
SPI_ENTRIES = SPI_STATEMENTS | {
    "SPI_cursor_fetch", "SPI_cursor_move", "SPI_scroll_cursor_fetch",
    "SPI_scroll_cursor_move"}
PARSE = {"pg_parse_query", "pg_analyze_and_rewrite_fixedparams",
         "pg_analyze_and_rewrite_varparams", "pg_analyze_and_rewrite_withcb"}
TRIGGERS = {"ExecBSInsertTriggers", "ExecASInsertTriggers", "ExecBRInsertTriggers",
            "ExecARInsertTriggers", "ExecBSUpdateTriggers", "ExecASUpdateTriggers",
            "ExecBRUpdateTriggers", "ExecARUpdateTriggers", "AfterTriggerEndQuery"}
EXT = "idempotency.so"

PURPOSE = """What this page is for: for each workload and the hand-written SQL it
is measured against, the instructions of one transaction split by phase
(the client's statement, the executor's start, run and end, SPI, index
inserts, WAL, commit), so that a change to the library shows where it
saved: run it again after the change and compare the pages (`git diff
doc/profile.md`). The totals of [performance.md](performance.md) ("Where
the time goes") come from the same tool."""

MEASURED = """How it is measured: a throwaway cluster whose backends run under
callgrind (fsync off, autovacuum off); each script runs twice with one
client (`pgbench -M prepared`), and every figure is the difference of the
two backends' counts divided by twice the shorter run's transactions, so
the connection's start and end cancel out, and so do parsing the
statements (once per connection) and their first executions. A
transaction is one run of the script, as for pgbench: `phased.sql`'s
holds two SQL transactions. A phase is the inclusive count of PostgreSQL
functions that Debian's stripped binary still names (exported ones);
static functions such as `exec_bind_message`, `CommitTransaction` and
`_SPI_execute_plan` are unnamed there, so a phase is found by the named
function it calls (`GetCachedPlan` called from `PostgresMain`, where
`exec_bind_message` is inlined) or that calls it. The extension's SQL
and trigger functions are the C symbols `pg_proc` gives for it; the
`SPI_execute*` calls they make are its SPI statements, the executor
calls made by SPI's unnamed internals are those statements', and its
`ExecSimpleRelationInsert` and `ExecSimpleRelationUpdate` calls are
the rows it writes without a statement (a new key's since 0e8c5d5, a
completion's since 5d8ac30). Only the
outermost calls of a function count, so a row never counts the same
instructions twice; an indented row is part of the row above it, and the
rows below *across the rows above* cut through them. A cell reads
instructions per transaction, then (calls per transaction × instructions
per call) where a transaction makes other than one call; *difference* is
the first column minus the second. Small negative figures are
differences in the two runs' one-off work (catalog caches), not costs.
callgrind's processor has no SHA extensions, so the extension's hashing
counts the portable code."""


def wrap(text):
    return textwrap.fill(" ".join(text.split()), 72, break_on_hyphens=False, break_long_words=False)
HEX = re.compile(r"^0x[0-9a-f]+$")


def split(name):
    """(function, True when callgrind marks it as a recursive entry)"""
    base, _, rec = name.partition("'")
    return base, bool(rec)


class Profile:
    """One callgrind file: the total, each function's own cost, and per call
    arc (caller, callee) the number of calls and their inclusive cost;
    functions are (object file's base name, name)."""

    FIELD = re.compile(r"^(ob|fl|fi|fe|fn|cob|cfi|cfl|cfn)=(?:\((\d+)\))?\s*(.*)$")
    SPACE = {"ob": "ob", "cob": "ob", "fn": "fn", "cfn": "fn"}

    def __init__(self, path):
        names = {"ob": {}, "fl": {}, "fn": {}}
        self.own = collections.Counter()
        self.arcs = collections.defaultdict(lambda: [0, 0])
        self.total = 0
        ob = fn = cob = cfn = None
        calls = None
        with open(path, errors="replace") as f:
            for line in f:
                if line[:1].isdigit() or line[:1] in "+-*":
                    cost = line.split()
                    cost = int(cost[1]) if len(cost) > 1 else 0
                    if calls is None:
                        self.own[fn] += cost
                    else:
                        arc = self.arcs[(fn, cfn)]
                        arc[0] += calls
                        arc[1] += cost
                        calls = None
                    continue
                m = self.FIELD.match(line)
                if m:
                    key, ident, value = m.group(1), m.group(2), m.group(3).strip()
                    table = names[self.SPACE.get(key, "fl")]
                    if ident is not None:
                        if value:
                            table[ident] = os.path.basename(value) if key in ("ob", "cob") else value
                        value = table.get(ident, ident)
                    if key == "ob":
                        ob = value
                    elif key == "cob":
                        cob = value
                    elif key == "fn":
                        fn, cob = (ob, value), None
                    elif key == "cfn":
                        cfn, cob = (cob or ob, value), None
                elif line.startswith("calls="):
                    calls = int(line[6:].split()[0])
                elif line.startswith("totals:"):
                    self.total = int(line.split()[1])

    def into(self, names, callers=None, outermost=True, obj=None):
        """(calls, cost) of the arcs into functions named in names, from
        callers in the set callers (any caller if None), only the
        outermost entries unless outermost is False."""
        n = c = 0
        for (a, b), (k, x) in self.arcs.items():
            base, rec = split(b[1])
            if base in names and (obj is None or b[0] == obj) and not (outermost and rec) \
                    and (callers is None or a in callers):
                n += k
                c += x
        return n, c

    def static_callees(self, roots, depth=3):
        """postgres's unnamed (static) functions reached from the functions
        in roots through unnamed ones only: the statics of their file"""
        found, edge = set(), set(roots)
        for _ in range(depth):
            nxt = {b for (a, b) in self.arcs if a in edge and b[0] == "postgres"
                   and HEX.match(b[1]) and b not in found}
            found |= nxt
            edge = nxt
        return found

    def functions(self, names):
        return {k for k in list(self.own) + [b for _, b in self.arcs] if split(k[1])[0] in names}


def phases(p, ext_functions):
    """{row: (calls, instructions)} of one callgrind file; see ROWS"""
    r = {"transaction": (None, p.total)}
    main = p.functions({"PostgresMain"})
    client = main | p.static_callees(main, depth=1)
    r["parse"] = p.into(PARSE, client)
    r["plancache"] = p.into({"GetCachedPlan"}, client)
    r["plancache.plan"] = p.into({"pg_plan_queries", "pg_plan_query"}, p.functions({"GetCachedPlan"}))
    r["portalstart"] = p.into({"PortalStart"}, client)
    r["portalrun"] = p.into({"PortalRun"}, client)
    r["commit"] = p.into({"CommitTransactionCommand"}, client)
    r["commit.flush"] = p.into({"XLogFlush"})
    r["commit.record"] = p.into({"XactLogCommitRecord"})
    r["other"] = (None, p.total - sum(r[k][1] for k in
                                      ("parse", "plancache", "portalstart", "portalrun", "commit")))

    callable_, triggers = ext_functions
    r["ext"] = p.into(callable_, {a for (a, _) in p.arcs if a[0] != EXT}, obj=EXT)
    ext_callers = {a for (a, _) in p.arcs if a[0] == EXT}
    spi = p.functions(SPI_ENTRIES)
    spi_stmt = p.into(SPI_STATEMENTS, ext_callers)
    r["spi"] = (spi_stmt[0], p.into(SPI_ENTRIES, ext_callers)[1])
    inner = p.static_callees({k for k in spi if not split(k[1])[1]})
    r["spi.plancache"] = p.into({"GetCachedPlan"}, inner)
    for ph in ("Start", "Run", "Finish", "End"):
        r["spi." + ph.lower()] = p.into({"Executor" + ph}, inner, outermost=False)
    r["spi.other"] = (None, r["spi"][1] - sum(r["spi." + k][1] for k in
                                              ("plancache", "start", "run", "finish", "end")))
    r["ext.rows"] = p.into({"ExecSimpleRelationInsert", "ExecSimpleRelationUpdate"}, ext_callers)
    r["ext.outside"] = (None, r["ext"][1] - r["spi"][1] - r["ext.rows"][1])

    for ph in ("Start", "Finish", "End"):
        r["exec." + ph.lower()] = p.into({"Executor" + ph})
        r["exec.%s.spi" % ph.lower()] = r["spi." + ph.lower()]
    r["exec.run"] = p.into({"ExecutorRun"})
    r["heap_insert"] = p.into({"heap_insert"})
    r["heap_update"] = p.into({"heap_update"})
    r["index_insert"] = p.into({"ExecInsertIndexTuples"})
    r["index_scan"] = p.into({"index_getnext_slot"})
    r["triggers"] = (None, p.into(TRIGGERS)[1])
    r["triggers.ext"] = p.into(triggers, obj=EXT)
    r["wal"] = p.into({"XLogInsert"})
    r["ext.own"] = (None, sum(c for k, c in p.own.items() if k[0] == EXT))
    return r


# (key, depth, label); a row at depth d is part of the row above it at
# depth d - 1
ROWS = [
    ("transaction", 0, "the transaction (all the backend's instructions)"),
    ("parse", 1, "parse and analysis of the client's statements (`pg_parse_query`, `pg_analyze_and_rewrite_*`)"),
    ("plancache", 1, "plan cache check of the client's statements (`GetCachedPlan`, in `exec_bind_message`)"),
    ("plancache.plan", 2, "planning, any statement's (`pg_plan_queries`, `pg_plan_query` called by `GetCachedPlan`)"),
    ("portalstart", 1, "portal start (`PortalStart`: a `SELECT`'s executor start)"),
    ("portalrun", 1, "portal run (`PortalRun`: the statement, and all the extension's function does)"),
    ("ext", 2, "the extension's SQL function (`idempotency.so`, entered from the statement)"),
    ("spi", 3, "its SPI statements (`SPI_execute_plan` and the other `SPI_execute*`)"),
    ("spi.plancache", 4, "plan cache check (`GetCachedPlan`)"),
    ("spi.start", 4, "executor start (`ExecutorStart`)"),
    ("spi.run", 4, "executor run (`ExecutorRun`)"),
    ("spi.finish", 4, "executor finish (`ExecutorFinish`: `AFTER` triggers)"),
    ("spi.end", 4, "executor end (`ExecutorEnd`)"),
    ("spi.other", 4, "other: SPI's own (snapshot, parameters, result)"),
    ("ext.rows", 3, "its rows written with the executor's row functions (`ExecSimpleRelationInsert`, `ExecSimpleRelationUpdate`: triggers, heap, indexes)"),
    ("ext.outside", 3, "outside SPI: the extension's C and what it calls directly (probes, locks, hashing)"),
    ("commit", 1, "commit (`CommitTransactionCommand`, called after each statement by `finish_xact_command`; it commits outside `BEGIN`)"),
    ("commit.record", 2, "commit record (`XactLogCommitRecord`)"),
    ("commit.flush", 2, "WAL flush (`XLogFlush`)"),
    ("other", 1, "other: the protocol's messages, parameters' input, results sent, portals dropped, transaction start"),
    (None, 0, "*across the rows above, all statements (the client's and SPI's):*"),
    ("exec.start", 1, "executor start (`ExecutorStart`)"),
    ("exec.start.spi", 2, "of the SPI statements"),
    ("exec.run", 1, "executor run (`ExecutorRun`, outermost: the SPI statements run inside the client's)"),
    ("exec.finish", 1, "executor finish (`ExecutorFinish`)"),
    ("exec.end", 1, "executor end (`ExecutorEnd`)"),
    ("heap_insert", 1, "heap insert (`heap_insert`)"),
    ("heap_update", 1, "heap update (`heap_update`)"),
    ("index_insert", 1, "index inserts (`ExecInsertIndexTuples`, per row)"),
    ("index_scan", 1, "index lookups (`index_getnext_slot`)"),
    ("triggers", 1, "triggers (`ExecB*/ExecA*Triggers`, `AfterTriggerEndQuery`)"),
    ("triggers.ext", 2, "the extension's trigger functions"),
    ("wal", 1, "WAL insert (`XLogInsert`: rows, index entries, commit record)"),
    ("ext.own", 1, "the extension's own instructions (self cost of `idempotency.so`'s functions)"),
]


def per_transaction(runs, script, tx, ext_functions):
    """{row: (calls, instructions)} per transaction, or None"""
    paths = [os.path.join(runs, script + s) for s in (".short", ".long")]
    if not all(os.path.exists(x) for x in paths):
        return None
    a, b = (phases(Profile(x), ext_functions) for x in paths)
    d = {}
    for k in b:
        n = None if b[k][0] is None else (b[k][0] - a[k][0]) / (2 * tx)
        d[k] = (n, (b[k][1] - a[k][1]) / (2 * tx))
    d["total"] = (b["transaction"][1] - a["transaction"][1]) // (2 * tx)
    d["transaction"] = (None, d["total"])
    return d


def statements(n):
    return fmt_calls(n) + (" statement" if fmt_calls(n) == "1" else " statements")


def fmt_n(x):
    return f"{x:,.0f}"


def fmt_calls(n):
    return f"{n:.0f}" if abs(n - round(n)) < 0.05 else f"{n:.2f}"


def cell(v):
    n, c = v
    if round(c) == 0 and not n:
        return "0"
    if n is None or abs(n - 1) < 0.05 or n < 0.05:
        return fmt_n(c)
    return f"{fmt_n(c)} ({fmt_calls(n)} × {fmt_n(c / n)})"


def table(scripts, figures):
    out = ["| per transaction | " + " | ".join(f"`{s}`" for s in scripts) + " | difference |",
           "| --- | " + " | ".join("---:" for _ in scripts) + " | ---: |"]
    for key, depth, label in ROWS:
        pad = "&emsp;" * depth
        if key is None:
            out.append(f"| {label} | " + " | ".join("" for _ in scripts) + " | |")
            continue
        vals = [figures[s][key] for s in scripts]
        if all(round(v[1]) == 0 for v in vals):
            continue
        diff = vals[0][1] - vals[1][1] if len(vals) > 1 else None
        out.append(f"| {pad}{label} | " + " | ".join(cell(v) for v in vals)
                   + f" | {'' if diff is None else f'{diff:+,.0f}'} |")
    return out


def startup(f):
    """(statements whose executor starts, the instructions of their start and
    end with the plan cache check: GetCachedPlan, ExecutorStart,
    ExecutorFinish, ExecutorEnd) per transaction"""
    return (f["exec.start"][0],
            f["exec.start"][1] + f["exec.finish"][1] + f["exec.end"][1]
            + f["plancache"][1] + f["spi.plancache"][1])


def running(f):
    """the executor's run of the statements, without the extension's calls
    (which run inside the client's statement) but with their SPI statements'"""
    return f["exec.run"][1] - f["ext"][1] + f["spi.run"][1]


def paragraph(title, ours, base, fo, fb):
    """the gap between ours and its baseline, split into parts that add up"""
    gap = fo["transaction"][1] - fb["transaction"][1]
    (no, so), (nb, sb) = startup(fo), startup(fb)
    parts = [("the extension's work outside SPI (probes, locks, hashing, C)", fo["ext.outside"][1]),
             ("its rows written with the row functions", fo["ext.rows"][1]),
             ("SPI's own", fo["spi.other"][1]),
             ("running the statements", running(fo) - running(fb))]
    parts.append(("everything else (commit, portals, the protocol)", gap - (so - sb) - sum(x for _, x in parts)))
    text = (f"{title}: `{ours}` costs {fmt_n(abs(gap))} instructions "
            f"{'more' if gap >= 0 else 'fewer'} a transaction than `{base}`. "
            f"It starts the executor for {statements(no)}"
            + (f" ({fmt_calls(fo['spi'][0])} through SPI)" if fo["spi"][0] else "")
            + f", `{base}` for {fmt_calls(nb)}. Their start-up and end (plan cache check, "
            f"`ExecutorStart`, `ExecutorFinish`, `ExecutorEnd`) cost `{ours}` "
            f"{fmt_n(so / no if no else 0)} a statement and `{base}` {fmt_n(sb / nb if nb else 0)}")
    if no - nb >= 0.05:
        text += (f"; at `{ours}`'s price the {statements(no - nb)} that `{base}` does not "
                 f"run would come to {fmt_n((no - nb) * so / no)}; measured, their")
    else:
        text += "; their"
    text += f" start-ups and ends differ by {so - sb:+,.0f}"
    if gap > 0:
        text += f" ({100 * (so - sb) / gap:.0f}% of the gap)"
    text += ". The rest: " + "; ".join(
        f"{label} {x:+,.0f}" for label, x in parts if round(x)) + "."
    return text


def page_head(tx):
    """What doc/profile.md says before the tables."""
    return "\n".join([
        "<!-- written by make profile (bench/profile.sh, bench/profile_doc.py) with PROFILE_DOC=1; do not edit -->",
        "# Where the instructions go: `make profile` per phase", "", wrap(PURPOSE), "",
        f"Command: `{os.environ.get('PROFILE_COMMAND', 'make profile')}`, {tx} and {3 * tx} "
        f"transactions per script, {datetime.date.today().isoformat()}, "
        f"{os.environ.get('PROFILE_PG', 'PostgreSQL')}, commit {os.environ.get('PROFILE_COMMIT', 'unknown')}.",
        "", wrap(MEASURED), "", ""])


def report(runs, tx, ext_functions):
    # in the order they ran
    scripts = sorted((x[:-len(".short")] for x in os.listdir(runs) if x.endswith(".short")),
                     key=lambda x: os.path.getmtime(os.path.join(runs, x + ".short")))
    figures = {s: per_transaction(runs, s, tx, ext_functions) for s in scripts}
    figures = {s: f for s, f in figures.items() if f}
    lines = []
    w = lines.append
    w("## Totals")
    w("")
    w("| script | instructions/tx |")
    w("| --- | ---: |")
    for s in scripts:
        if s in figures:
            w(f"| `{s}` | {figures[s]['total']:,} |")
    done = set()
    for title, members in GROUPS:
        present = [s for s in members if s in figures]
        if not present or present[0] != members[0]:
            continue
        done |= set(present)
        w("")
        w(f"## {title}")
        w("")
        lines.extend(table(present, figures))
        if len(present) > 1:
            w("")
            w(paragraph(title[0].upper() + title[1:], present[0], present[1],
                        figures[present[0]], figures[present[1]]))
    for s in scripts:
        if s in figures and s not in done:
            w("")
            w(f"## `{s}`")
            w("")
            lines.extend(table([s], figures))
    return "\n".join(lines) + "\n"


def main():
    runs, tx, funcs = sys.argv[1], int(sys.argv[2]), sys.argv[3]
    callable_, triggers = set(), set()
    with open(funcs) as f:
        for line in f:
            if line.strip():
                name, trigger = line.rstrip("\n").split("\t")
                (triggers if trigger == "t" else callable_).add(name)
    text = report(runs, tx, (callable_, triggers))
    sys.stdout.write(text)
    if len(sys.argv) > 4:
        with open(sys.argv[4], "w") as f:
            f.write(page_head(tx) + text)


if __name__ == "__main__":
    main()
