#!/usr/bin/env python3
"""Tables of contention.sh's points (seed 001 Fig. 13, 14 and 16): mean
acquire latency in ms per recipe, with acquisitions/s where the lock is
saturated. Standard library only. Usage: contention.py [DOCS_DIR] (ZooKeeper's
points, contention.sh with ZK=1, get tables of their own when present)."""
import csv, os, sys

D = sys.argv[1] if len(sys.argv) > 1 else os.path.dirname(os.path.abspath(__file__))
RECIPES = ["tas", "tas-watch", "async-tas", "queue", "async-queue"]

def rows(path):
    f = os.path.join(D, path, "lock.csv")
    return {r["recipe"]: r for r in csv.DictReader(open(f))} if os.path.exists(f) else {}

def table(title, cols):
    print(f"\n**{title}**: mean acquire latency, ms (p99 in brackets)\n")
    print("| recipe | " + " | ".join(c for c, _ in cols) + " |")
    print("|---|" + "---:|" * len(cols))
    pts = [rows(p) for _, p in cols]
    for rec in RECIPES:
        cells = []
        for pt in pts:
            r = pt.get(rec)
            cells.append("-" if r is None else f'{float(r["mean_ms"]):.1f} ({float(r["p99_ms"]):.0f})')
        print(f"| {rec} | " + " | ".join(cells) + " |")
    bad = [(c, rec) for (c, _), pt in zip(cols, pts) for rec, r in pt.items()
           if r["overlaps"] != "0" or r["order_violations"] != "0" or r["failed"] != "0"]
    print(f"\npoints with overlaps, token order violations or failures: {bad or 'none'}")

for who, sfx, fig14 in (("", "", "cs{}"), ("ZooKeeper 3.8, ", "-zk", "fig14-zk/cs{}")):
    if sfx and not os.path.isdir(os.path.join(D, "fig13-zk")):
        continue
    table(f"{who}Fig. 13: client RTT 100 ms, arrivals every 200 ms",
          [(f"cs {c} ms", f"fig13{sfx}/cs{c}") for c in (1, 50, 100, 150)])
    table(f"{who}Fig. 14: no added RTT, arrivals every 200 ms",
          [(f"cs {c} ms", fig14.format(c)) for c in (1, 50, 100, 150)])
    table(f"{who}Fig. 16: critical section 150 ms, arrivals every 200 ms",
          [(f"client RTT {c} ms", f"fig16{sfx}/c{c}-cs150") for c in (0, 50, 100, 200)])
