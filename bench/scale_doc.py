#!/usr/bin/python3
"""bench/scale_doc.py: the report of `make bench-scale` (bench/scale.sh).

    scale_doc.py [--outlive OUTLIVE.tsv] RUNS.tsv STATES.tsv OUT.md [CHART_DIR]
    scale_doc.py --kept DIR OUT.md [CHART_DIR]
    scale_doc.py --about OUT.json

Reads the per-run and per-cycle records of bench/scale.sh and writes the
Markdown report: per live-key count the medians of every workload, the
ratios to the baselines, WAL per new key, size per live key over the run,
purge throughput, the targets of doc/performance-at-scale.md and, when
the cycles of a count rotated wal_compression (SCALE_WAL_COMPRESSION), the
WAL and TPS figures per setting.  With CHART_DIR it also draws SVG charts
there (gnuplot) and links them.  With the records of SCALE_OUTLIVE
(OUTLIVE.tsv: "keys phase item value" lines) it adds "Keys that outlive
their answers": the space of the keys' table with the answers, after the
purge that drops them and a VACUUM, and after a VACUUM FULL, and what each
step took.
The command line, machine, skipped counts and a note on the run come
from the environment (SCALE_COMMAND, SCALE_SKIPPED, SCALE_NOTE, and
SCALE_UPGRADE for the update's timing).

With --kept, the records come from the runs kept in DIR (bench/scale/runs:
STAMP-runs.tsv, STAMP-states.tsv, STAMP-outlive.tsv and STAMP.json with
what the environment gives otherwise, the commit and the server's
version): for each key count the newest run that has it, so a page can hold counts measured by
different runs, each section saying which.  --about writes such a JSON
file for the run just made (bench/scale.sh; SCALE_COMMIT and SCALE_SERVER
give the commit and the server's version).
"""
import csv
import glob
import json
import os
import platform
import statistics
import subprocess
import sys
import textwrap
import time

NEW = ("execute", "phased")
TARGETS_AT = 10000000


def met(ok):
    return "met" if ok else "**not met**"


def read(path):
    with open(path) as f:
        return list(csv.DictReader(f, delimiter="\t"))


def num(x):
    try:
        return float(x)
    except (TypeError, ValueError):
        return None


def med(xs):
    xs = [x for x in xs if x is not None]
    return statistics.median(xs) if xs else None


def mean(xs):
    xs = [x for x in xs if x is not None]
    return sum(xs) / len(xs) if xs else None


def fmt(x, digits=2):
    return "n/a" if x is None else f"{x:,.{digits}f}"


def human(n):
    return f"{n // 1000000}M" if n >= 1000000 else f"{n // 1000}k"


def by_cycle(runs, keys, setting=None):
    """{cycle: {variant: row}} for one key count, warm-up cycle dropped;
    with setting, only the cycles that ran with that wal_compression."""
    out = {}
    for r in runs:
        if int(r["keys"]) == keys and int(r["cycle"]) > 1 and setting in (None, compression(r)):
            out.setdefault(int(r["cycle"]), {})[r["variant"]] = r
    return out


def compression(row):
    """The wal_compression a run or cycle had ("" in reports before it was recorded)."""
    return row.get("wal_compression") or ""


def settings_of(runs, keys=None):
    """The wal_compression settings of the runs (of one key count), in the
    order they first ran (the order of SCALE_WAL_COMPRESSION)."""
    out = []
    for r in runs:
        if keys in (None, int(r["keys"])) and compression(r) not in out:
            out.append(compression(r))
    return out


def wal_per_key(cycles, variant):
    """Mean WAL bytes per request of variant minus the business INSERT's."""
    a = mean(num(c[variant]["wal_bytes"]) for c in cycles.values() if variant in c)
    b = mean(num(c["insert_only"]["wal_bytes"]) for c in cycles.values() if "insert_only" in c)
    return None if a is None or b is None else a - b


def least_squares(pts):
    """(intercept, slope) of y on x over the points, or None."""
    pts = [(x, y) for x, y in pts if x is not None and y is not None]
    if len(pts) < 3:
        return None
    mx = sum(x for x, _ in pts) / len(pts)
    my = sum(y for _, y in pts) / len(pts)
    sxx = sum((x - mx) ** 2 for x, _ in pts)
    if sxx == 0:
        return None
    slope = sum((x - mx) * (y - my) for x, y in pts) / sxx
    return my - slope * mx, slope


def variant_med(cycles, variant, field):
    return med(num(c[variant][field]) for c in cycles.values() if variant in c)


def ratio(cycles, a, b, field="tps", invert=False):
    rs = []
    for c in cycles.values():
        x, y = num(c.get(a, {}).get(field)), num(c.get(b, {}).get(field))
        if x and y:
            rs.append(y / x if invert else x / y)
    return med(rs)


def chart(chart_dir, name, title, ylabel, series, t_of):
    """series: [(label, [(t, y)])]; writes CHART_DIR/name.svg."""
    data = os.path.join(chart_dir, name + ".dat")
    with open(data, "w") as f:
        for label, pts in series:
            f.write(f'"{label}"\n')
            for t, y in pts:
                if y is not None:
                    f.write(f"{t / 60:.2f} {y}\n")
            f.write("\n\n")
    plots = ", ".join(
        f"'{data}' index {i} with linespoints title columnheader(1)"
        for i in range(len(series)))
    script = f"""set terminal svg size 720,360 dynamic font 'sans,11'
set output '{os.path.join(chart_dir, name + '.svg')}'
set title '{title}'
set xlabel 'minutes'
set ylabel '{ylabel}'
set key outside right top
set grid
set yrange [0:*]
plot {plots}
"""
    subprocess.run(["gnuplot"], input=script, text=True, check=True)
    os.unlink(data)
    return name + ".svg"


def the_environment():
    """What bench/scale.sh tells about the run it just made."""
    return {k: os.environ.get("SCALE_" + k.upper(), "")
            for k in ("command", "skipped", "note", "upgrade")}


def write_about(path):
    """The JSON kept beside a run's records (see --kept)."""
    about = the_environment()
    about.update(date=time.strftime("%Y-%m-%d", time.gmtime()),
                 commit=os.environ.get("SCALE_COMMIT", "?"),
                 server=os.environ.get("SCALE_SERVER", "?"), machine=machine())
    with open(path, "w") as f:
        json.dump(about, f, indent=1)


def newest_runs(directory, kind):
    """{count: STAMP} of the kept runs' STAMP-KIND.tsv in DIR: for each key
    count the newest run that has it (STAMP with DIR)."""
    newest = {}
    for path in sorted(glob.glob(os.path.join(directory, f"*-{kind}.tsv")), reverse=True):
        for r in read(path):
            newest.setdefault(int(r["keys"]), path[:-len(f"-{kind}.tsv")])
    return newest


def records(newest, kind):
    """The lines of STAMP-KIND.tsv of each count's run in newest."""
    return [r for n, stamp in sorted(newest.items())
            for r in read(f"{stamp}-{kind}.tsv") if int(r["keys"]) == n]


def abouts_of(newest):
    """{count: the STAMP.json of its run}"""
    meta = {}
    for n, stamp in newest.items():
        with open(stamp + ".json") as f:
            meta[n] = json.load(f)
    return meta


def kept_runs(directory):
    """Runs, states and per-count metadata of the newest kept run of each count."""
    newest = newest_runs(directory, "runs")
    return records(newest, "runs"), records(newest, "states"), abouts_of(newest)


def kept_outlive(directory):
    """The SCALE_OUTLIVE records and per-count metadata of the newest kept
    run of each count."""
    newest = newest_runs(directory, "outlive")
    return records(newest, "outlive"), abouts_of(newest)


def provenance(about):
    """The line on a run: command, machine and, for a kept run, its date,
    commit and server."""
    when = ""
    if about.get("date"):
        when = (f" Run of {about['date']}, commit {about.get('commit', '?')}, "
                f"PostgreSQL {about.get('server', '?')}.")
    return (f"Command: `{about.get('command') or 'make bench-scale'}`. "
            f"Machine: {about.get('machine') or machine()}.{when}")


def mb(x):
    return fmt(None if x is None else x / 2**20, 1)


def per(x, n):
    return None if x is None or not n else x / n


# The states of the keys' table that SCALE_OUTLIVE measures, in order.
OUTLIVE_STATES = (("loaded", "with their answers"),
                  ("purged", "answers dropped, after `VACUUM`"),
                  ("compact", "after `VACUUM FULL`"))
OUTLIVE_STEPS = (("purge", "the purge, `CALL idempotency.purge_expired()`"),
                 ("vacuum", "`VACUUM` after it"),
                 ("vacuum_full", "`VACUUM FULL`"))


def outlive_section(w, recs, meta, shown, runs):
    """'Keys that outlive their answers' from the SCALE_OUTLIVE records of
    each count; meta: {count: about}; shown: the abouts said above; runs:
    the steady states' records, for the WAL of a new key."""
    counts = sorted({int(r["keys"]) for r in recs})
    if not counts:
        return
    w("")
    w("## Keys that outlive their answers")
    w("")
    w(textwrap.fill(
        "How much a key takes once `response_ttl` has dropped its answer, and what "
        "dropping the answers costs. `SCALE_OUTLIVE=N make bench-scale` loads N "
        "completed keys on a fresh cluster as the steady-state runs load theirs (the "
        "same keys and answers: the payment row for three in four, a small answer for "
        "the rest; the primary key built by sorting after the load, here at its "
        "default fill), with their answers already past `response_expires_at` "
        "(written by the loader, as `complete(..., response_ttl)` writes it) and the "
        "keys living on. It measures the keys' table after `VACUUM ANALYZE`, drops "
        "every answer with `CALL idempotency.purge_expired()` (batches of 10000, what "
        "the job of `schedule_cleanup` runs; autovacuum on), runs `VACUUM` and "
        "measures again, then `VACUUM FULL`, which writes the kept keys compactly. "
        "Bytes per key: the table, its TOAST and every index over the keys; free "
        "space and row sizes from pgstattuple, the fill of the indexes' leaf pages "
        "from pgstatindex. WAL: what the whole server wrote during each step "
        "(autovacuum included).", 78, break_on_hyphens=False))
    for n in counts:
        v = {(r["phase"], r["item"]): r["value"] for r in recs if int(r["keys"]) == n}

        def f(phase, item):
            return num(v.get((phase, item)))

        about = meta[n]
        w("")
        w(f"### {human(n)} keys")
        w("")
        w(provenance(about))
        if about not in shown and about.get("note"):
            w("")
            w(about["note"])
        indexes = sorted({item.split(":", 1)[1] for _, item in v if item.startswith("index:")})
        w("")
        w("| " + " | ".join(["the keys' table"] + [name for _, name in OUTLIVE_STATES]) + " |")
        w("| --- |" + " ---: |" * len(OUTLIVE_STATES))

        def row(label, cell):
            w(f"| {label} | " + " | ".join(cell(state) for state, _ in OUTLIVE_STATES) + " |")

        row("heap (MB)", lambda s: mb(f(s, "heap")))
        row("of which free (MB)", lambda s: mb(f(s, "free_space")))
        row("TOAST (MB)", lambda s: mb(f(s, "toast")))
        for i in indexes:
            row(f"`{i}` (MB)", lambda s: mb(f(s, "index:" + i)))
        row("free space and visibility maps (MB)", lambda s: mb(f(s, "maps")))
        row("**total (MB)**", lambda s: mb(f(s, "total")))
        row("**bytes per key**", lambda s: fmt(per(f(s, "total"), f(s, "keys")), 0))
        row("keys", lambda s: fmt(f(s, "keys"), 0))
        row("answers stored", lambda s: fmt(f(s, "answers"), 0))
        row("mean answer (bytes)", lambda s: fmt(per(f(s, "answer_bytes"), f(s, "answers")), 0))
        row("mean row in the heap (bytes)", lambda s: fmt(per(f(s, "tuple_len"), f(s, "keys")), 0))
        for i in indexes:
            row(f"leaf pages' fill, `{i}` (%)", lambda s: fmt(f(s, "leaf_density:" + i), 0))
        dropped = (f("loaded", "answers") or 0) - (f("purged", "answers") or 0)
        w("")
        w("| step | seconds | rows per second | WAL (MB) | WAL bytes per row | "
          "full-page images per row | checkpoints meanwhile | autovacuums of the table meanwhile |")
        w("| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: |")
        for step, name in OUTLIVE_STEPS:
            rows = dropped if step == "purge" else f("purged" if step == "vacuum" else "compact", "keys")
            w(f"| {name} | {fmt(f(step, 'seconds'), 1)} | {fmt(per(rows, f(step, 'seconds')), 0)} "
              f"| {mb(f(step, 'wal_bytes'))} | {fmt(per(f(step, 'wal_bytes'), rows), 0)} "
              f"| {fmt(per(f(step, 'wal_fpi'), rows), 3)} | {fmt(f(step, 'checkpoints'), 0)} "
              f"| {fmt(f(step, 'autovacuums'), 0)} |")
        with_answer = per(f("loaded", "total"), f("loaded", "keys"))
        kept = per(f("compact", "total"), f("compact", "keys"))
        purged = per(f("purged", "total"), f("purged", "keys"))
        wc = v.get(("server", "wal_compression"), "?")
        new_key = wal_per_key(by_cycle(runs, n, wc), "execute")
        said = ["The rows of the purge are the answers it dropped, those of the vacuums "
                f"the keys; `wal_compression` was `{wc}`."]
        if with_answer and kept and purged:
            said.append(f"A key with its answer took {fmt(with_answer, 0)} bytes; rewritten "
                        f"without it, a kept key takes {fmt(kept, 0)} bytes, "
                        f"{fmt((1 - kept / with_answer) * 100, 0)}% less.")
            if purged > kept * 1.05:
                more = ", more than with the answers" if purged > with_answer else ""
                said.append(
                    f"Until then, after the purge and a `VACUUM`, the files hold {fmt(purged, 0)} "
                    f"bytes per key{more}: the purge writes every row again without its answer, "
                    "with a new entry in each index but the partial one (it changes "
                    "`response_expires_at`, which is indexed, so the update cannot be HOT), and "
                    "`VACUUM` leaves the space it frees inside the files, for new keys; "
                    "`VACUUM FULL` (which locks the table out for its whole run) or `pg_repack` "
                    "gives it back to the disk.")
        if dropped:
            said.append(f"The purge dropped {fmt(per(dropped, f('purge', 'seconds')), 0)} answers "
                        f"per second and wrote {fmt(per(f('purge', 'wal_bytes'), dropped), 0)} "
                        "bytes of WAL per answer dropped"
                        + (f" (a new key wrote {fmt(new_key, 0)} in the steady state of "
                           f"{human(n)} live keys above, in its cycles with the same "
                           "`wal_compression`)." if new_key else "."))
            if f("purge", "checkpoints"):
                said.append(f"That WAL holds {fmt(per(f('purge', 'wal_fpi'), dropped), 2)} full-page "
                            "images per answer: the first change to a page after a checkpoint "
                            "writes the whole page, and a checkpoint came every "
                            f"{fmt(f('purge', 'seconds') / f('purge', 'checkpoints'), 0)} seconds "
                            f"(`max_wal_size` {v.get(('server', 'max_wal_size'), '?')}).")
            if f("purge", "autovacuums") == 0 and f("purge", "seconds") > 60:
                said.append("No autovacuum ran during the purge, for all its minutes: the "
                            "server counts the dead rows of a `CALL` for autovacuum only when "
                            "it returns.")
        w("")
        w(textwrap.fill(" ".join(said), 78, break_on_hyphens=False))


def machine():
    return (f"{os.cpu_count()} cores, "
            f"{os.sysconf('SC_PAGE_SIZE') * os.sysconf('SC_PHYS_PAGES') // 2**30} GiB, "
            f"{platform.system()} {platform.release()}")


def main():
    if sys.argv[1] == "--about":
        write_about(sys.argv[2])
        return
    args = sys.argv[1:]
    if args[0] == "--kept":
        runs, states, meta = kept_runs(args[1])
        outlive, outlive_meta = kept_outlive(args[1])
    else:
        outlive = []
        if args[0] == "--outlive":
            outlive = read(args[1])
            args = args[2:]
        runs, states = read(args[0]), read(args[1])
        meta = {int(r["keys"]): the_environment() for r in runs}
        outlive_meta = {int(r["keys"]): the_environment() for r in outlive}
    args = args[2:]
    out, chart_dir = args[0], args[1] if len(args) > 1 and args[1] else None
    counts = sorted({int(r["keys"]) for r in runs})
    abouts = []
    for n in counts:
        if meta[n] not in abouts:
            abouts.append(meta[n])
    lines = []
    w = lines.append
    if chart_dir:
        w("<!-- written by make bench-scale (bench/scale.sh, bench/scale_doc.py); do not edit -->")
        w("# Performance at scale: millions of live keys")
        w("")
        w("What this page is for: how the extension behaves in a steady state with")
        w("millions of live keys, beside the hand-written SQL it replaces under the")
        w("same churn, and what an operator should set for a given request rate and")
        w("ttl. `make bench-scale` wrote it from the run it just made; the")
        w("short-run benchmarks are in [performance.md](performance.md).")
    else:
        w("# make bench-scale report")
    w("")
    for about in abouts:
        which = ", ".join(human(n) for n in counts if meta[n] == about)
        head = f"{which}: " if len(abouts) > 1 else ""
        w(f"{head}{provenance(about)}")
        for note in ("skipped", "note"):
            if about.get(note):
                w("")
                w(about[note])
        w("")
    w("How to read it: each cycle runs every workload once, for the same number")
    w("of seconds, in a rotating order, while pg_cron purges expired keys every")
    w("minute (ours with `idempotency.schedule_cleanup`, the baseline's with a")
    w("batched `DELETE`), autovacuum runs and checkpoints come at PostgreSQL's")
    w("defaults. Figures are medians over the cycles after the first; ratios are")
    w("medians of per-cycle ratios. WAL and full-page images are what the whole")
    w("server wrote during a run (purge and autovacuum included) divided by the")
    w("run's requests; \"WAL per new key\" is the mean of `execute` minus the mean")
    w("of the business INSERT alone, over every cycle, so over several checkpoint")
    w("cycles.")
    used = settings_of(runs)
    if len(used) > 1:
        w("")
        w("The cycles rotate `wal_compression` through these settings, one per cycle,")
        w(", ".join(f"`{x}`" for x in used) + " (set with `ALTER SYSTEM` and a reload before the")
        w("cycle's runs), so each setting's cycles are spread over the whole run: the")
        w("same growth of the tables, checkpoints and purges; the order of the runs")
        w("rotates once per round of the settings, so the settings see the same orders.")
        w("The tables of each count are over all the cycles, whatever their setting;")
        w("\"WAL by wal_compression\" splits the WAL and TPS figures by setting.")
    elif used and used[0]:
        w(f"`wal_compression` was `{used[0]}` throughout.")
    for n in counts:
        cycles = by_cycle(runs, n)
        st = [s for s in states if int(s["keys"]) == n]
        if not cycles or len(st) < 2:
            continue
        minutes = int(st[-1]["t"]) / 60
        w("")
        w(f"## {human(n)} live keys ({len(cycles) + 1} cycles, {minutes:.0f} minutes)")
        w("")
        w("| workload | TPS | p50 ms | p99 ms | WAL bytes / request | full-page images / request |")
        w("| --- | ---: | ---: | ---: | ---: | ---: |")
        variants = ["execute", "phased", "insert_only", "raw_new", "replay", "replay_pk"]
        names = {"execute": "ours: new request, `execute` + business INSERT",
                 "phased": "ours: new request, `claim`, INSERT, `complete`",
                 "insert_only": "the business INSERT alone",
                 "raw_new": "hand-written: INSERT ON CONFLICT, INSERT, UPDATE",
                 "replay": "ours: retry of a completed key (`claim`)",
                 "replay_pk": "hand-written: bare primary-key SELECT"}
        for v in variants:
            rows = [c[v] for c in cycles.values() if v in c]
            w(f"| {names[v]} | {fmt(med(num(r['tps']) for r in rows), 0)} "
              f"| {fmt(med(num(r['p50_ms']) for r in rows), 3)} "
              f"| {fmt(med(num(r['p99_ms']) for r in rows), 3)} "
              f"| {fmt(med(num(r['wal_bytes']) for r in rows), 0)} "
              f"| {fmt(med(num(r['fpi']) for r in rows), 3)} |")
        first, last = st[0], st[-1]

        def per_key(s, side):
            live = num(s[side + "_live"])
            return num(s[side + "_bytes"]) / live if live else None

        def purged(side):
            return (num(last[side + "_deleted"]) - num(first[side + "_deleted"])) / max(1, int(last["t"]))

        exec_ratio = ratio(cycles, "execute", "insert_only")
        raw_ratio = ratio(cycles, "raw_new", "insert_only")
        replay_tps = ratio(cycles, "replay", "replay_pk")
        p99_ratio = ratio(cycles, "replay", "replay_pk", "p99_ms")
        wal_key = wal_per_key(cycles, "execute")
        wal_raw = wal_per_key(cycles, "raw_new")
        size_growth = num(last["ext_bytes"]) / num(first["ext_bytes"])
        key_growth = per_key(last, "ext") / per_key(first, "ext")
        # size over the last 40 minutes of the run (or all of it when shorter)
        tail = [x for x in st if int(x["t"]) >= int(last["t"]) - 40 * 60]
        sizes = [num(x["ext_bytes"]) for x in tail]
        if len(sizes) >= 2 and int(last["t"]) >= 40 * 60:
            spread = max(sizes) / min(sizes)
            flat_text = (f"{min(sizes) / 2**20:,.0f} to {max(sizes) / 2**20:,.0f} MB, "
                         f"{fmt((spread - 1) * 100, 1)}% apart, {met(spread <= 1.10)}")
        else:
            flat_text = "the run was shorter than 40 minutes, not measured"
        w("")
        w("| figure | ours | hand-written |")
        w("| --- | ---: | ---: |")
        w(f"| new request TPS / the business INSERT alone | {fmt(exec_ratio)} (`execute`), "
          f"{fmt(ratio(cycles, 'phased', 'insert_only'))} (phased) | {fmt(raw_ratio)} |")
        w(f"| WAL per new key (bytes, mean) | {fmt(wal_key, 0)} | {fmt(wal_raw, 0)} |")
        w(f"| retry TPS / bare primary-key SELECT | {fmt(replay_tps)} | 1 |")
        w(f"| retry p99 / bare primary-key SELECT p99 | {fmt(p99_ratio)} | 1 |")
        w(f"| table + indexes at start / end (MB) | {num(first['ext_bytes']) / 2**20:,.0f} / "
          f"{num(last['ext_bytes']) / 2**20:,.0f} | {num(first['raw_bytes']) / 2**20:,.0f} / "
          f"{num(last['raw_bytes']) / 2**20:,.0f} |")
        w(f"| bytes per live key at start / end | {fmt(per_key(first, 'ext'), 0)} / "
          f"{fmt(per_key(last, 'ext'), 0)} | {fmt(per_key(first, 'raw'), 0)} / "
          f"{fmt(per_key(last, 'raw'), 0)} |")
        w(f"| live keys at start / end | {int(num(first['ext_live'])):,} / {int(num(last['ext_live'])):,} "
          f"| {int(num(first['raw_live'])):,} / {int(num(last['raw_live'])):,} |")
        w(f"| dead tuples at the end | {int(num(last['ext_dead'])):,} | {int(num(last['raw_dead'])):,} |")
        w(f"| rows purged per second | {fmt(purged('ext'), 0)} | {fmt(purged('raw'), 0)} |")
        w(f"| checkpoints during the run | {int(num(last['checkpoints']) - num(first['checkpoints']))} | (same server) |")
        settings = [x for x in settings_of(runs, n) if by_cycle(runs, n, x)]
        if len(settings) > 1:
            w("")
            w(f"WAL by wal_compression, {human(n)} live keys: per setting, the cycles after")
            w("the first that ran with it; WAL per new key over them as above, medians of")
            w("WAL bytes and full-page images (FPI) per request, median of the per-cycle")
            w("TPS ratios.")
            w("")
            w("| wal_compression | cycles | WAL per new key (bytes, mean) "
              "| WAL bytes / request, `execute` | WAL, phased | WAL, hand-written "
              "| FPI / request, `execute` | FPI, phased | FPI, hand-written "
              "| `execute` TPS / the business INSERT alone |")
            w("| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |")
            for x in settings:
                sc = by_cycle(runs, n, x)
                trio = ("execute", "phased", "raw_new")
                w(f"| `{x}` | {len(sc)} | {fmt(wal_per_key(sc, 'execute'), 0)} | "
                  + " | ".join(fmt(variant_med(sc, v, "wal_bytes"), 0) for v in trio) + " | "
                  + " | ".join(fmt(variant_med(sc, v, "fpi"), 3) for v in trio)
                  + f" | {fmt(ratio(sc, 'execute', 'insert_only'))} |")
            # A run's WAL depends on where it fell between two checkpoints
            # (right after one, most new keys write a full-page image), so
            # the settings are also compared at the same rate of images:
            # per setting, execute's WAL per request fitted as base + size
            # of an image x images per request, read at the mean rate of all
            # the cycles.
            everyone = mean(num(c["execute"]["fpi"]) for c in cycles.values() if "execute" in c)
            base = mean(num(c["insert_only"]["wal_bytes"]) for c in cycles.values() if "insert_only" in c)
            w("")
            w("The same at one rate of full-page images: per setting, `execute`'s WAL per")
            w("request fitted by least squares as *base + bytes per image x images per")
            w("request* over its runs, read at the mean rate of all the cycles "
              f"({fmt(everyone, 3)} images per request), minus the business INSERT's WAL.")
            w("")
            w("| wal_compression | bytes per full-page image | WAL per new key at that rate (bytes) |")
            w("| --- | ---: | ---: |")
            for x in settings:
                pts = [(num(c["execute"]["fpi"]), num(c["execute"]["wal_bytes"]))
                       for c in by_cycle(runs, n, x).values() if "execute" in c]
                fit = least_squares(pts)
                at = None if fit is None or everyone is None or base is None else fit[0] + fit[1] * everyone - base
                w(f"| `{x}` | {fmt(fit and fit[1], 0)} | {fmt(at, 0)} |")
        if n == TARGETS_AT:
            w("")
            w(f"Targets at {human(n)} live keys:")
            w("")
            w(f"- `execute` + business INSERT >= 0.75x the INSERT alone: {fmt(exec_ratio)}, "
              f"{met(exec_ratio is not None and exec_ratio >= 0.75)}")
            w(f"- WAL per new key <= 2 kB on average: {fmt(wal_key, 0)} bytes, "
              f"{met(wal_key is not None and wal_key <= 2048)}")
            w(f"- retry p99 <= 1.2x the bare SELECT's: {fmt(p99_ratio)}, "
              f"{met(p99_ratio is not None and p99_ratio <= 1.2)}")
            w(f"- table + indexes flat within 10% over the last 40 minutes: {flat_text}")
        if chart_dir:
            def pts(v, field):
                return [(int(c[v]["t"]), num(c[v][field])) for _, c in sorted(cycles.items()) if v in c]
            tag = human(n).lower()
            svgs = [
                chart(chart_dir, f"scale-{tag}-tps", f"TPS, {human(n)} live keys", "TPS",
                      [(v, pts(v, "tps")) for v in ("execute", "phased", "insert_only", "raw_new")], None),
                chart(chart_dir, f"scale-{tag}-wal", f"WAL bytes per request, {human(n)} live keys",
                      "bytes", [(v, pts(v, "wal_bytes")) for v in ("execute", "phased", "insert_only", "raw_new")], None),
                chart(chart_dir, f"scale-{tag}-p99", f"p99 latency of a retry, {human(n)} live keys",
                      "ms", [(v, pts(v, "p99_ms")) for v in ("replay", "replay_pk")], None),
                chart(chart_dir, f"scale-{tag}-size", f"bytes per live key, {human(n)} live keys",
                      "bytes", [("ours", [(int(s["t"]), per_key(s, "ext")) for s in st]),
                                ("hand-written", [(int(s["t"]), per_key(s, "raw")) for s in st])], None),
            ]
            w("")
            for s in svgs:
                w(f"![{s}]({s})")
    outlive_section(w, outlive, outlive_meta, abouts, runs)
    upgrades = [a["upgrade"] for a in abouts if a.get("upgrade")]
    if upgrades:
        keys, seconds = upgrades[0].split()
        w("")
        w("## Updating to 1.2")
        w("")
        w(f"`ALTER EXTENSION idempotency UPDATE` from 1.1 with {int(keys):,} live keys took "
          f"{float(seconds):.1f} s on this machine (the table rewrite and the new primary "
          f"key; claims wait meanwhile): about {float(seconds) / (int(keys) / 1e6):.1f} s per "
          f"million keys.")
        w("")
    with open(out, "w") as f:
        f.write("\n".join(lines) + "\n")


if __name__ == "__main__":
    main()
