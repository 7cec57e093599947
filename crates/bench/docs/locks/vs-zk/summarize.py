#!/usr/bin/env python3
"""vs-zk.sh's points as one Markdown table: per setting and recipe, our
acquisitions/s beside ZooKeeper's (same run) and the ratio, with acquire
latency p50/p99. Usage: summarize.py DIR"""
import csv, glob, os, sys

root = sys.argv[1] if len(sys.argv) > 1 else os.path.dirname(os.path.abspath(__file__))
print("| setting | N | disk | recipe | arrivals/s | quorumkv acq/s | ZooKeeper acq/s | ratio | quorumkv p50 / p99 ms | ZooKeeper p50 / p99 ms |")
print("|---|---|---|---|---:|---:|---:|---:|---:|---:|")
order = {"one": 0, "cs0": 1, "many": 2}
dirs = sorted(glob.glob(os.path.join(root, "*-*-*", "lock.csv")),
              key=lambda p: (p.split(os.sep)[-2].split("-")[0], p.split(os.sep)[-2].split("-")[1], order.get(p.split(os.sep)[-2].split("-")[2], 9)))
for f in dirs:
    label = f.split(os.sep)[-2]
    disk, n, kind = label.split("-")
    rows = list(csv.DictReader(open(f)))
    ours = {r["recipe"]: r for r in rows if not r["target"].startswith("zookeeper")}
    zk = {r["recipe"]: r for r in rows if r["target"].startswith("zookeeper")}
    for rec, o in ours.items():
        z = zk.get(rec)
        if z is None:
            continue
        oa, za = float(o["acq_per_s"]), float(z["acq_per_s"])
        setting = {"one": "1 lock, cs 1 ms", "cs0": "1 lock, cs 0", "many": f"{o['locks']} locks, cs 1 ms"}[kind]
        arr = 1000.0 / float(o["arrival_ms"])
        print(f"| {setting} | {n[1:]} | {disk} | {rec} | {arr:.0f} | {oa:.0f} | {za:.0f} | {oa / za:.2f} | "
              f"{float(o['p50_ms']):.1f} / {float(o['p99_ms']):.1f} | {float(z['p50_ms']):.1f} / {float(z['p99_ms']):.1f} |")
bad = []
for f in glob.glob(os.path.join(root, "*", "lock.csv")):
    for r in csv.DictReader(open(f)):
        if r["overlaps"] != "0" or r["order_violations"] != "0" or r["failed"] != "0":
            bad.append((f.split(os.sep)[-2], r["target"], r["recipe"], r["overlaps"], r["order_violations"], r["failed"]))
print(f"\nPoints with overlaps, token order violations or failed acquisitions: {bad or 'none'}")
