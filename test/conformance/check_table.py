#!/usr/bin/env python3
"""test/conformance/check_table.py [TOP]: http.json and doc/clients.md's
behaviour table ("The HTTP mapping") name the same rows.  Every row of the
table (its first column, as written) is the row of a case of http.json or
a key of its "elsewhere" (a row checked only by the packages' own suites,
with the reason), and every row http.json names is in the table; each
step of a case expects a status or says what it expects instead.  Prints
the differences and exits 1 when there are any."""
import json
import os
import sys

top = sys.argv[1] if len(sys.argv) > 1 else os.path.join(os.path.dirname(__file__), "..", "..")
doc = open(os.path.join(top, "doc", "clients.md"), encoding="utf-8").read()
fixture = json.load(open(os.path.join(top, "test", "conformance", "http.json"), encoding="utf-8"))

section = doc.split("\n## The HTTP mapping\n", 1)[1].split("\n## ", 1)[0]
lines = section.splitlines()
start = next((i for i, line in enumerate(lines) if line.startswith("| HTTP case |")), len(lines))
table = []
for line in lines[start:]:
    if not line.startswith("|"):
        break
    table.append(line)
if len(table) < 3:
    sys.exit("check_table: no behaviour table in doc/clients.md's \"The HTTP mapping\"")
rows = [line.split(" | ")[0][2:].strip() for line in table[2:]]

cased = [case["row"] for case in fixture["cases"]]
named = set(cased) | set(fixture["elsewhere"])
errors = []
errors += [f"a row of the table has no case and is not elsewhere: {r}" for r in rows if r not in named]
errors += [f"http.json names a row the table lacks: {r}" for r in sorted(named) if r not in rows]
errors += [f"a row is both a case and elsewhere: {r}" for r in sorted(set(cased) & set(fixture["elsewhere"]))]
errors += [f"a step of \"{case['row']}\" expects nothing" for case in fixture["cases"]
           for step in case["steps"] if not step.get("expect")]
for e in errors:
    print("FAIL: " + e)
if errors:
    sys.exit(1)
print(f"http.json: {len(fixture['cases'])} cases for {len(set(cased))} rows, "
      f"{len(fixture['elsewhere'])} rows elsewhere, as doc/clients.md's table")
