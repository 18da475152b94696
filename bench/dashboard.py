#!/usr/bin/python3
"""bench/dashboard.py: monitoring/grafana-dashboard.json drawn from a real run.

    dashboard.py serve DIR DSN [--scrape SECONDS]
    dashboard.py check DIR [--dashboard FILE]
    dashboard.py draw DIR OUT.svg [--title TEXT] [--dashboard FILE]

serve runs Debian's prometheus-postgres-exporter with
monitoring/postgres_exporter.yaml against the database of DSN (a libpq
key=value string), and Debian's prometheus scraping it every SECONDS
(default 15, Prometheus' own default), both bound to 127.0.0.1 at free
ports, their files in DIR.  Once both answer it writes DIR/serve.json
(Prometheus' address, the start time, the versions), then runs until
SIGTERM or SIGINT, when it stops the two by PID and exits.  make bench
(bench/doc.sh) and test/integration/monitoring.sh start it in the
background and stop it by its PID.

check asks that Prometheus for every target of every panel of the
dashboard (FILE, default monitoring/grafana-dashboard.json) over the time since serve started, as Grafana would with the
variables at All: $datname and $scope become their allValue (.*), and
$__rate_interval max(step + scrape interval, 4 x scrape interval), the
step being the scrape interval or a 300th of the range.  It fails on
anything it cannot evaluate or draw: a variable it does not know, an
expression Prometheus refuses, one that matches no series (a metric the
queries file does not produce), a panel type, unit, legend or stacking it
does not draw.  So the dashboard and its picture cannot drift apart.

draw does the same, then draws every panel at its gridPos, with its title,
series, legend table and time axis (minutes since serve started), and the
row headers, into one SVG with gnuplot; TEXT names the run in its title.
Grafana is not in Debian; this is what it would show, in its light theme.
"""
import argparse
import ctypes
import json
import math
import os
import re
import signal
import socket
import subprocess
import sys
import textwrap
import time
import urllib.error
import urllib.parse
import urllib.request

TOP = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
DASHBOARD = os.path.join(TOP, "monitoring", "grafana-dashboard.json")
QUERIES = os.path.join(TOP, "monitoring", "postgres_exporter.yaml")
EXPORTER = "prometheus-postgres-exporter"
PROMETHEUS = "prometheus"

# the picture: pixels of its width, of a grid row (Grafana's 30 + 8 margin,
# a little less) and between panels
WIDTH = 1600
ROW = 34
GAP = 8
CHAR = 6.2          # average width of a character of the 11 px font
LINE = 15           # a legend row
# Grafana's classic palette, darkened for a white panel
COLORS = ["#37872D", "#1F60C4", "#E0B400", "#FA6400", "#C4162A", "#8F3BB8",
          "#56A64B", "#3274D9", "#A352CC", "#FF9830"]
CALCS = {"mean": "Mean", "max": "Max", "min": "Min", "last": "Last", "lastNotNull": "Last *"}


class Unsupported(Exception):
    """something in the dashboard this script does not evaluate or draw"""


def fail(message):
    sys.exit("dashboard.py: " + message)


# --- serve

def free_port():
    """a port of 127.0.0.1 that nothing listens on now"""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def die_with_parent():
    """in a child: SIGTERM when serve dies, even by SIGKILL"""
    ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG


def get(url, timeout=5):
    """the body of url, or None while nothing answers there"""
    try:
        with urllib.request.urlopen(url, timeout=timeout) as r:
            return r.read()
    except (urllib.error.URLError, ConnectionError, socket.timeout):
        return None


def version(line):
    """the version number in line ("postgres_exporter, version 0.11.1 ...")"""
    m = re.search(r"version (\S+)", line)
    return m.group(1) if m else "?"


def serve(args):
    os.makedirs(args.dir, exist_ok=True)
    exporter_port, prometheus_port = free_port(), free_port()
    with open(os.path.join(args.dir, "prometheus.yml"), "w", encoding="utf-8") as f:
        f.write("global:\n  scrape_interval: %ds\n  scrape_timeout: %ds\n"
                "scrape_configs:\n  - job_name: postgres\n    static_configs:\n"
                "      - targets: ['127.0.0.1:%d']\n"
                % (args.scrape, min(args.scrape, 10), exporter_port))
    # the exporter: the queries file only (no default metrics, no
    # pg_settings, no database or bgwriter collector), one connection
    exporter = [EXPORTER, "--web.listen-address=127.0.0.1:%d" % exporter_port,
                "--extend.query-path=" + QUERIES, "--disable-default-metrics",
                "--disable-settings-metrics", "--no-collector.database",
                "--no-collector.bgwriter", "--log.level=warn"]
    prometheus = [PROMETHEUS, "--config.file=" + os.path.join(args.dir, "prometheus.yml"),
                  "--storage.tsdb.path=" + os.path.join(args.dir, "tsdb"),
                  "--storage.tsdb.retention.time=1d",
                  "--web.listen-address=127.0.0.1:%d" % prometheus_port, "--log.level=warn"]
    children = []
    stopping = []

    def stop(*_):
        stopping.append(True)

    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGINT, stop)
    try:
        for name, cmd, env in (("exporter", exporter, {"DATA_SOURCE_NAME": args.dsn}),
                               ("prometheus", prometheus, {})):
            log = open(os.path.join(args.dir, name + ".log"), "w", encoding="utf-8")
            children.append((name, subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT,
                                                    env=dict(os.environ, **env),
                                                    preexec_fn=die_with_parent)))
        url = "http://127.0.0.1:%d" % prometheus_port
        deadline = time.time() + 60
        while not (get("http://127.0.0.1:%d/metrics" % exporter_port)
                   and get(url + "/-/ready")):
            if time.time() > deadline or stopping or any(p.poll() is not None for _, p in children):
                fail("serve: the exporter or Prometheus did not start (logs in %s)" % args.dir)
            time.sleep(0.2)
        info = {"url": url, "start": time.time(), "scrape": args.scrape,
                "prometheus": json.loads(get(url + "/api/v1/status/buildinfo"))["data"]["version"],
                "exporter": version(subprocess.run([EXPORTER, "--version"], capture_output=True,
                                                   text=True).stderr)}
        with open(os.path.join(args.dir, "serve.json.tmp"), "w", encoding="utf-8") as f:
            json.dump(info, f)
        os.rename(os.path.join(args.dir, "serve.json.tmp"), os.path.join(args.dir, "serve.json"))
        while not stopping:
            for name, p in children:
                if p.poll() is not None:
                    fail("serve: %s exited with %s (log %s)" % (name, p.returncode,
                                                                os.path.join(args.dir, name + ".log")))
            time.sleep(0.5)
    finally:
        for _, p in children:
            if p.poll() is None:
                p.terminate()
        for _, p in children:
            try:
                p.wait(timeout=20)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait()


# --- check: the panels' expressions, evaluated by Prometheus

def load_serve(directory):
    try:
        with open(os.path.join(directory, "serve.json"), encoding="utf-8") as f:
            return json.load(f)
    except OSError as e:
        fail("no %s/serve.json (is serve running?): %s" % (directory, e))


def variables(dashboard, step, scrape):
    """what Grafana puts for each variable with every one at All"""
    values = {"__rate_interval": "%ds" % max(step + scrape, 4 * scrape),
              "__interval": "%ds" % step}
    for v in dashboard.get("templating", {}).get("list", []):
        if v.get("type") == "datasource":
            continue
        if not v.get("includeAll") or v.get("allValue") is None:
            raise Unsupported("variable $%s has no allValue to put for All" % v.get("name"))
        values[v["name"]] = v["allValue"]
    return values


def expand(expr, values):
    """expr with its $name and ${name} replaced; Unsupported if one is unknown"""
    def one(m):
        name = m.group(1) or m.group(2)
        if name not in values:
            raise Unsupported("unknown variable $%s" % name)
        return values[name]
    return re.sub(r"\$\{(\w+)\}|\$(\w+)", one, expr)


def query_range(url, expr, start, end, step):
    """Prometheus' matrix for expr; Unsupported with its error if it refuses"""
    q = urllib.parse.urlencode({"query": expr, "start": "%.3f" % start, "end": "%.3f" % end,
                                "step": step})
    try:
        with urllib.request.urlopen(url + "/api/v1/query_range?" + q, timeout=60) as r:
            answer = json.load(r)
    except urllib.error.HTTPError as e:
        answer = json.load(e)
    if answer.get("status") != "success":
        raise Unsupported("Prometheus: %s" % answer.get("error"))
    if answer["data"]["resultType"] != "matrix":
        raise Unsupported("not a range query (%s)" % answer["data"]["resultType"])
    return answer["data"]["result"]


def legend_name(fmt, labels):
    """legendFormat with {{label}} filled in; a label the series lacks (an
    empty one: Prometheus drops those, the default scope '') shows as \"\""""
    return re.sub(r"\{\{\s*(\w+)\s*\}\}", lambda m: labels.get(m.group(1), '""'), fmt) or "{}"


def panel_check(panel):
    """Unsupported unless draw can draw this panel as Grafana would"""
    if panel.get("type") == "row":
        if panel.get("collapsed") or panel.get("panels"):
            raise Unsupported("a collapsed row (its panels are not drawn)")
        return
    if panel.get("type") != "timeseries":
        raise Unsupported("panel type %r" % panel.get("type"))
    defaults = panel.get("fieldConfig", {}).get("defaults", {})
    custom = defaults.get("custom", {})
    if panel.get("fieldConfig", {}).get("overrides"):
        raise Unsupported("field overrides")
    unit = defaults.get("unit", "short")
    if unit not in UNITS:
        raise Unsupported("unit %r" % unit)
    if custom.get("drawStyle", "line") != "line":
        raise Unsupported("drawStyle %r" % custom.get("drawStyle"))
    if custom.get("stacking", {}).get("mode", "none") not in ("none", "normal"):
        raise Unsupported("stacking %r" % custom["stacking"]["mode"])
    legend = panel.get("options", {}).get("legend", {})
    if (legend.get("displayMode"), legend.get("placement")) != ("table", "right"):
        raise Unsupported("legend %s at %s (only a table at the right)"
                          % (legend.get("displayMode"), legend.get("placement")))
    for calc in legend.get("calcs", []):
        if calc not in CALCS:
            raise Unsupported("legend calc %r" % calc)
    for target in panel.get("targets", []):
        if target.get("instant") or target.get("hide") or "expr" not in target:
            raise Unsupported("target %s is not a visible range query" % target.get("refId"))
    if not panel.get("targets"):
        raise Unsupported("no targets")


def evaluate(args):
    """the dashboard, serve.json's facts and, per panel, its series
    [(name, [(t, value)...])]; exits naming the panel on anything
    Unsupported"""
    with open(args.dashboard, encoding="utf-8") as f:
        dashboard = json.load(f)
    info = load_serve(args.dir)
    end = time.time()
    start = info["start"]
    scrape = info["scrape"]
    if end - start < 3 * scrape:
        fail("only %.0f s since serve started: too short to draw a rate of %d s scrapes"
             % (end - start, scrape))
    step = max(scrape, math.ceil((end - start) / 300))
    info.update(end=end, step=step)
    try:
        values = variables(dashboard, step, scrape)
    except Unsupported as e:
        fail("%s: %s" % (args.dashboard, e))
    info["rate_interval"] = values["__rate_interval"]
    panels = []
    for panel in dashboard.get("panels", []):
        where = "%s: panel %r" % (args.dashboard, panel.get("title"))
        try:
            panel_check(panel)
            series = []
            for target in panel.get("targets", []):
                result = query_range(info["url"], expand(target["expr"], values), start, end, step)
                if not result:
                    raise Unsupported("target %s matches no series: %s"
                                      % (target["refId"], target["expr"]))
                for s in result:
                    series.append((legend_name(target.get("legendFormat", ""), s["metric"]),
                                   [(float(t), float(v)) for t, v in s["values"]]))
        except Unsupported as e:
            fail("%s: %s" % (where, e))
        series.sort(key=lambda s: s[0])
        panels.append((panel, series))
    return dashboard, info, panels


def check(args):
    _, info, panels = evaluate(args)
    n = 0
    for panel, series in panels:
        if panel["type"] == "row":
            continue
        n += len(panel["targets"])
        print("%s: %s" % (panel["title"], ", ".join(name for name, _ in series)))
    print("ok: %d expressions of %d panels evaluate (Prometheus %s, postgres_exporter %s, "
          "%.0f s of %d s scrapes)" % (n, sum(p["type"] != "row" for p, _ in panels),
                                       info["prometheus"], info["exporter"],
                                       info["end"] - info["start"], info["scrape"]))


# --- draw

def scaled(v, steps, suffix):
    """v with Grafana's scaled suffixes (' K', ' Mil', ...) and suffix"""
    for i, step in enumerate(steps):
        if abs(v) < 1000 or i == len(steps) - 1:
            return number(v) + step + suffix
        v /= 1000.0
    return None


def number(v):
    """three significant digits, no exponent"""
    if v == 0:
        return "0"
    digits = max(0, 2 - int(math.floor(math.log10(abs(v)))))
    return ("%.*f" % (digits, v)).rstrip("0").rstrip(".") if digits else "%.0f" % v


def seconds(v):
    for limit, div, name in ((60, 1, " s"), (3600, 60, " min"), (86400, 3600, " hour")):
        if abs(v) < limit:
            return number(v / div) + name
    return number(v / 86400) + " day"


SHORT = ["", " K", " Mil", " Bil", " Tri"]
UNITS = {
    "short": lambda v: scaled(v, SHORT, ""),
    "ops": lambda v: scaled(v, SHORT, " ops/s"),
    "percentunit": lambda v: number(v * 100) + "%",
    "s": seconds,
}


def ticks(low, high, count=4):
    """about count round steps from low (<= 0) to high or just above"""
    if high <= low:
        high = low + 1
    raw = (high - low) / count
    mag = 10 ** math.floor(math.log10(raw))
    step = next(m * mag for m in (1, 2, 2.5, 5, 10) if m * mag >= raw)
    first = math.floor(low / step) * step
    n = math.ceil((high - first) / step - 1e-9)
    return [first + i * step for i in range(n + 1)]


def q(text):
    """a gnuplot string"""
    return '"%s"' % text.replace("\\", "\\\\").replace('"', '\\"')


def calc(name, values):
    ok = [v for v in values if not math.isnan(v)]
    if not ok:
        return None
    if name == "lastNotNull":
        return ok[-1]
    if name == "last":
        return values[-1] if not math.isnan(values[-1]) else None
    return {"mean": sum(ok) / len(ok), "max": max(ok), "min": min(ok)}[name]


class Canvas:
    """gnuplot's multiplot on a pixel grid whose y runs down"""

    def __init__(self, height):
        self.height = height
        self.out = []

    def x(self, px):
        return px / WIDTH

    def y(self, py):
        return 1 - py / self.height

    def label(self, text, px, py, align="left", font="sans,11", color="#464c54"):
        self.out.append("set label %s at screen %.5f,%.5f %s font %s textcolor rgb %s front"
                        % (q(text), self.x(px), self.y(py), align, q(font), q(color)))

    def box(self, px0, py0, px1, py1, fill, border=None):
        self.out.append("set object rectangle from screen %.5f,%.5f to screen %.5f,%.5f "
                        "fillcolor rgb %s fillstyle solid 1.0 %s behind"
                        % (self.x(px0), self.y(py1), self.x(px1), self.y(py0), q(fill),
                           "border lc rgb %s" % q(border) if border else "noborder"))

    def empty_plot(self):
        """draws the labels and objects set so far, then forgets them"""
        self.out += ["unset border", "unset tics", "unset grid", "set margins 0,0,0,0",
                     "set xrange [0:1]", "set yrange [0:1]", "plot NaN notitle",
                     "unset label", "unset object"]


def fit(text, chars):
    return text if len(text) <= chars else text[:max(1, chars - 1)] + "…"


def draw_panel(c, n, panel, series, info, box):
    """the gnuplot lines of one timeseries panel in box (pixels)"""
    bx0, by0, bx1, by1 = box
    defaults = panel.get("fieldConfig", {}).get("defaults", {})
    custom = defaults.get("custom", {})
    unit = UNITS[defaults.get("unit", "short")]
    stacked = custom.get("stacking", {}).get("mode", "none") == "normal"
    alpha = custom.get("fillOpacity", 0) / 100.0
    calcs = panel["options"]["legend"].get("calcs", [])

    # every series on the same steps: the range's
    times = [info["start"] + i * info["step"]
             for i in range(int((info["end"] - info["start"]) // info["step"]) + 1)]
    index = {round(t, 3): i for i, t in enumerate(times)}
    columns = []
    for _, points in series:
        col = [math.nan] * len(times)
        for t, v in points:
            i = index.get(round(t, 3))
            if i is not None:
                col[i] = v
        columns.append(col)
    if stacked:     # in legend order; a gap stays one, and adds 0 to those above
        tops, below = [], [0.0] * len(times)
        for col in columns:
            below = [b + (0.0 if math.isnan(v) else v) for b, v in zip(below, col)]
            tops.append([math.nan if math.isnan(v) else b for b, v in zip(below, col)])
        drawn = tops
    else:
        drawn = columns
    finite = [v for col in drawn for v in col if not math.isnan(v) and not math.isinf(v)]
    ys = ticks(min([0.0] + finite), max([0.0] + finite))

    # the legend table at the right: name, then one column per calc, as
    # wide as their text, at most half the panel (names cut short then)
    c.label(panel["title"], bx0 + 8, by0 + 15, font="sans:Bold,12", color="#24292e")
    names = [name for name, _ in series]
    cells = [[("-" if v is None else unit(v)) for v in (calc(k, col) for k in calcs)]
             for col in columns]
    widths = [max(len(CALCS[k]), *(len(row[i]) for row in cells)) * CHAR + 14
              for i, k in enumerate(calcs)]
    nw = max(min(max(len(name) for name in names) * CHAR + 22,
                 (bx1 - bx0) / 2 - sum(widths)), 8 * CHAR + 22)
    lx0 = bx1 - 8 - sum(widths) - nw
    ly = by0 + 38
    edges = [lx0 + nw + sum(widths[:i + 1]) for i in range(len(calcs))]
    for edge, k in zip(edges, calcs):
        c.label(CALCS[k], edge, ly, align="right", color="#6e7781")
    rows = int((by1 - ly - 6) // LINE)
    for k, (name, row) in enumerate(zip(names, cells)):
        yy = ly + (k + 1) * LINE
        if k == rows - 1 and len(names) > rows:
            c.label("+ %d more" % (len(names) - k), lx0, yy)
            break
        c.box(lx0, yy - 6, lx0 + 12, yy - 2, COLORS[k % len(COLORS)])
        c.label(fit(name, int((nw - 22) / CHAR)), lx0 + 17, yy)
        for edge, text in zip(edges, row):
            c.label(text, edge, yy, align="right")

    # the graph
    ylabels = [unit(v) for v in ys]
    left = bx0 + 14 + max(len(t) for t in ylabels) * CHAR
    right = lx0 - 14
    minutes = (info["end"] - info["start"]) / 60
    # a tick label ("10 min") takes about 70 px
    xs = [x for x in ticks(0, minutes, max(2, int((right - left) / 70)))
          if x <= minutes + 1e-9]
    c.out += [
        "set lmargin at screen %.5f" % c.x(left), "set rmargin at screen %.5f" % c.x(right),
        "set tmargin at screen %.5f" % c.y(by0 + 34), "set bmargin at screen %.5f" % c.y(by1 - 20),
        "set xrange [0:%.4f]" % minutes, "set yrange [%r:%r]" % (ys[0], ys[-1]),
        "set ytics (%s) nomirror scale 0 textcolor rgb '#6e7781'"
        % ", ".join("%s %r" % (q(t.replace("%", "%%")), v) for t, v in zip(ylabels, ys)),
        "set xtics (%s) nomirror out scale 0.5 textcolor rgb '#6e7781'"
        % ", ".join("%s %r" % (q(number(x) + " min"), x) for x in xs),
        "set grid xtics ytics lc rgb '#e4e6e8' lw 1 dt solid",
        "set border 1 lc rgb '#c7ccd1'",
    ]
    data = "$p%d" % n
    lines = ["%s << EOD" % data]
    for i, t in enumerate(times):
        lines.append(" ".join(["%.4f" % ((t - info["start"]) / 60)] +
                              ["%r" % col[i] if math.isfinite(col[i]) else "nan"
                               for col in drawn]))
    lines.append("EOD")
    plots = ["NaN notitle"]     # a panel none of whose series has a value
    for k, col in enumerate(drawn):
        if not any(math.isfinite(v) for v in col):
            continue        # in the legend, with no value
        color = q(COLORS[k % len(COLORS)])
        low = "(0)" if not stacked or k == 0 else "%d" % (k + 1)
        if alpha > 0:
            plots.append("%s using 1:%s:%d with filledcurves fillcolor rgb %s "
                         "fillstyle transparent solid %.2f noborder notitle"
                         % (data, low, k + 2, color, alpha))
        plots.append("%s using 1:%d with lines lw 1.5 lc rgb %s notitle" % (data, k + 2, color))
    c.out = lines + c.out
    c.out.append("plot " + ", \\\n  ".join(plots[len(plots) > 1:]))
    c.out += ["unset label", "unset object"]


def draw(args):
    dashboard, info, panels = evaluate(args)
    about = textwrap.wrap(
        "%s drawn by bench/dashboard.py with gnuplot (Grafana is not in Debian) from the answers "
        "of Prometheus %s to the panels' queries; Prometheus scraped postgres_exporter %s "
        "(%s) every %d s. Variables: $datname and $scope All, $__rate_interval %s. "
        "Time axis: minutes since the scraping started." % (
            os.path.relpath(os.path.abspath(args.dashboard), TOP), info["prometheus"],
            info["exporter"],
            os.path.relpath(QUERIES, TOP), info["scrape"], info["rate_interval"]),
        int((WIDTH - 24) / (CHAR + 0.2)))
    # the title's 15 px bold characters are about 10 px wide
    title = textwrap.wrap(dashboard.get("title", "dashboard")
                          + (" — " + args.title if args.title else ""), int((WIDTH - 24) / 10.5))
    head = 20 + 20 * len(title) + LINE * len(about)
    rows = max(p["gridPos"]["y"] + p["gridPos"]["h"] for p, _ in panels)
    height = head + rows * ROW + GAP
    col = WIDTH / 24
    c = Canvas(height)
    for i, line in enumerate(title):
        c.label(line, 12, 24 + 20 * i, font="sans:Bold,15", color="#24292e")
    for i, line in enumerate(about):
        c.label(line, 12, 24 + 20 * len(title) + i * LINE, color="#6e7781")

    def box(p):
        g = p["gridPos"]
        return (g["x"] * col + GAP / 2, head + g["y"] * ROW + GAP / 2,
                (g["x"] + g["w"]) * col - GAP / 2, head + (g["y"] + g["h"]) * ROW - GAP / 2)

    for p, _ in panels:
        x0, y0, x1, y1 = box(p)
        if p["type"] == "row":
            c.label(p["title"], x0 + 2, (y0 + y1) / 2 + 5, font="sans:Bold,13", color="#24292e")
        else:
            c.box(x0, y0, x1, y1, "#ffffff", "#d8dbde")
    c.empty_plot()
    for n, (p, series) in enumerate(panels):
        if p["type"] != "row":
            draw_panel(c, n, p, series, info, box(p))
    tmp = args.out + ".tmp"
    script = "\n".join(
        ["set terminal svg size %d,%d dynamic noenhanced font 'sans,11' background '#f4f5f5'"
         % (WIDTH, height), "set encoding utf8", "set output %s" % q(tmp),
         "set datafile missing 'nan'", "unset key", "set multiplot"]
        + c.out + ["unset multiplot"]) + "\n"
    p = subprocess.run(["gnuplot"], input=script, text=True, capture_output=True)
    if p.returncode != 0 or p.stderr.strip():
        with open(args.out + ".gp", "w", encoding="utf-8") as f:
            f.write(script)
        fail("gnuplot (script in %s.gp): %s" % (args.out, p.stderr.strip()))
    # gnuplot's svg terminal writes a font as it is named ("sans:Bold")
    with open(tmp, encoding="utf-8") as f:
        svg = f.read()
    with open(tmp, "w", encoding="utf-8") as f:
        f.write(svg.replace('font-family="sans:Bold"', 'font-family="sans" font-weight="bold"'))
    os.replace(tmp, args.out)
    print("wrote %s: %d panels, %.0f s of %d s scrapes"
          % (args.out, sum(p["type"] != "row" for p, _ in panels), info["end"] - info["start"],
             info["scrape"]))


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    sub = parser.add_subparsers(dest="command", required=True)
    s = sub.add_parser("serve")
    s.add_argument("dir")
    s.add_argument("dsn")
    s.add_argument("--scrape", type=int, default=15)
    s = sub.add_parser("check")
    s.add_argument("dir")
    s.add_argument("--dashboard", default=DASHBOARD)
    s = sub.add_parser("draw")
    s.add_argument("dir")
    s.add_argument("out")
    s.add_argument("--title")
    s.add_argument("--dashboard", default=DASHBOARD)
    args = parser.parse_args()
    {"serve": serve, "check": check, "draw": draw}[args.command](args)


if __name__ == "__main__":
    main()
