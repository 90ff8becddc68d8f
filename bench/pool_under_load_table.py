#!/usr/bin/env python3
"""Summarizes bench/pool_under_load.sh output: medians over rounds, one row per figure."""
import glob, json, os, statistics, sys
from collections import defaultdict

out = sys.argv[1]
mm = defaultdict(list)   # (name, load, build, t) -> [us]
dec = defaultdict(list)  # (figure, load, build, t) -> [value]
for f in glob.glob(os.path.join(out, "*.json")):
    base = os.path.basename(f)
    load, build, t, _r = base.split(".")[0].split("_")
    try:
        d = json.load(open(f))
    except Exception:
        continue
    if base.endswith(".matmul.json"):
        for b in d.get("benchmarks", []):
            if b.get("aggregate_name") == "median":
                name = b["run_name"].replace("Matmul/", "").replace("/real_time", "")
                mm[(name, load, build, t)].append(b["real_time"])
    else:
        dec[("decode tok/s", load, build, t)].append(d["decode_tok_s"])
        for k, v in d.get("verify_ms", {}).items():
            dec[(f"verify {k} ms", load, build, t)].append(v)

def med(xs):
    return statistics.median(xs) if xs else float("nan")

def table(data, fmt, unit):
    names = sorted({k[0] for k in data}, key=lambda s: (s.split("/")[0], s))
    print(f"| figure ({unit}) | old t1 | old t2 | new t1 | new t2 | old t1 loaded | old t2 loaded | new t1 loaded | new t2 loaded |")
    print("|---|" + "---:|" * 8)
    for n in names:
        cells = []
        for load in ("none", "one"):
            for build in ("old", "new"):
                for t in ("t1", "t2"):
                    cells.append(fmt % med(data[(n, load, build, t)]))
        print(f"| {n} | " + " | ".join(cells) + " |")

table(mm, "%.0f", "µs, median")
print()
table(dec, "%.1f", "median")
