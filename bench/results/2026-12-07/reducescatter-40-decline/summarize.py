#!/usr/bin/env python3
# SPDX-License-Identifier: BSD-3-Clause
"""Summarizes an ab.sh folder: per run and row (size, codec) the speedup
(plain's median block over squall's), the means' speedup (plain_mean_us /
mean_us: counts a slow block the median leaves out) and the wire bytes per
call (below the plain reduce-scatter's 3/4 of the send buffer on 4 ranks:
a compressed call among the timed ones), into DIR.json (compact: the
runs' full JSON is large) and DIR.md (medians and quartiles per side).
    summarize.py DIR"""
import glob, json, os, re, statistics as st, sys

d = sys.argv[1].rstrip("/")
runs = []
for f in glob.glob(f"{d}/*-*.json"):
    m = re.match(r"(before|after)-(\d+)\.json$", os.path.basename(f))
    if not m:
        continue
    rows = {}
    for r in json.load(open(f)):
        rows[f"{r['size_bytes']} {r['codec']}"] = {
            "speedup": r["speedup"],
            "means_speedup": round(r["plain_mean_us"] / r["mean_us"], 4) if r.get("mean_us") else None,
            "wire_bytes": r["wire_bytes"],
            "date": r["date"],
        }
    runs.append({"side": m.group(1), "run": int(m.group(2)), "rows": rows})
runs.sort(key=lambda r: (r["run"], r["side"] != "before"))
json.dump({"folder": os.path.basename(d), "runs": runs}, open(f"{d}.json", "w"), indent=0)


def col(side, key, field):
    return [r["rows"][key][field] for r in runs if r["side"] == side and key in r["rows"]]


def quart(v):
    q = st.quantiles(v, n=4)
    return f"{q[0]:.3f}..{q[2]:.3f}"


keys = sorted({k for r in runs for k in r["rows"]}, key=lambda k: (int(k.split()[0]), k))
out = ["| size | codec | runs a side | median speedup before | after | quartiles before | after "
       "| median means-speedup before | after | runs with a compressed call timed, before | after |",
       "|---|---|---|---|---|---|---|---|---|---|---|"]
for k in keys:
    size, codec = k.split(" ", 1)
    b, a = col("before", k, "speedup"), col("after", k, "speedup")
    mb, ma = col("before", k, "means_speedup"), col("after", k, "means_speedup")
    plain_wire = int(size) * 3 / 4
    wb = sum(w < plain_wire - 1 for w in col("before", k, "wire_bytes"))
    wa = sum(w < plain_wire - 1 for w in col("after", k, "wire_bytes"))
    out.append(f"| {int(size) // 1024} KiB | {codec} | {len(b)} | {st.median(b):.3f} | {st.median(a):.3f} | "
               f"{quart(b)} | {quart(a)} | {st.median(mb):.3f} | {st.median(ma):.3f} | {wb} | {wa} |")
open(f"{d}.md", "w").write("\n".join(out) + "\n")
print("\n".join(out))
