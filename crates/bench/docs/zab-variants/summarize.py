#!/usr/bin/env python3
"""Seed 003 chapter 5 on local clusters: mean and 95 % interval over the
repetitions (bench --seed) of each (N, variant, write ratio), and each
variant's improvement over Zab in throughput (Tv - T)/T and in all-ops mean
latency (L - Lv)/L (Table 5.1's definitions), paired: each run's variant
against Zab in the same run (the same machine state), then the mean and
interval of those ratios over the runs. Usage: summarize.py DIR...
With --tails: PUT p90 / p95 and the coin's p instead (Fig. 5.7, 5.10; the
adaptive runs of run2.sh)."""
import json, sys, statistics, collections
T = {2: 12.706, 3: 4.303, 4: 3.182, 5: 2.776, 6: 2.571}  # t(0.975, n-1)
pts = collections.defaultdict(list)
tails = "--tails" in sys.argv
import os
for d in [a for a in sys.argv[1:] if a != "--tails"]:
    if not os.path.exists(f"{d}/results.json"):
        continue  # a run's .txt, or one still running
    for r in json.load(open(f"{d}/results.json"))["results"]:
        v = r["target"].split("/")[0].replace("zab+broadcast=", "").replace("zab", "zab")
        if v == "zab": pass
        wr = round((1 - r["get_fraction"]) * 100)
        r["run"] = d
        pts[(r["replicas"], v, wr)].append(r)
def ci(xs):
    m = statistics.mean(xs)
    if len(xs) < 2: return m, None
    return m, T.get(len(xs), 2.0) * statistics.stdev(xs) / len(xs) ** 0.5
def paired(n, v, wr, f):
    """Mean and interval over the runs of f(variant point, Zab point)."""
    z = {r["run"]: r for r in pts.get((n, "zab", wr), [])}
    xs = [f(r, z[r["run"]]) * 100 for r in pts[(n, v, wr)] if r["run"] in z]
    if v == "zab" or not xs:
        return "—"
    m, h = ci(xs)
    return f"{m:+.1f}" + (f" ± {h:.1f}" if h is not None else "") + " %"
def gain_t(r, z): return (r["throughput"] - z["throughput"]) / z["throughput"]
def gain_l(r, z): return (z["all"]["avg_us"] - r["all"]["avg_us"]) / z["all"]["avg_us"]
def fmt(m, h, p=0):
    return f"{m:,.{p}f}" + (f" ± {h:,.{p}f}" if h is not None else "")
rows = []
if tails:
    print("| N | variant | write % | runs | ops/s (95 % CI) | vs Zab | PUT p50 ms | PUT p90 ms | PUT p95 ms | GET p95 ms | acks/commit | msgs/commit | heads/toss |")
    print("|---|---|---|---|---|---|---|---|---|---|---|---|---|")
    for (n, v, wr) in sorted(pts, key=lambda k: (k[0], k[2], k[1] != "zab", k[1])):
        rs = pts[(n, v, wr)]
        tp = ci([r["throughput"] for r in rs])
        q = lambda op, k: statistics.mean(r[op].get(k, 0) / 1000 for r in rs)
        ratio = lambda k: statistics.mean(dict(r["ratios"]).get(k, float("nan")) for r in rs)
        dt = paired(n, v, wr, gain_t)
        bad = sum(1 for r in rs if r["check"] not in ("ok", None))
        name = v if v != "zab" else "zab (Zab)"
        gp95 = f"{q('get', 'p95_us'):.2f}" if wr < 100 else "—"
        print(f"| {n} | `{name}` | {wr} | {len(rs)}{' (' + str(bad) + ' not ok)' if bad else ''} | {fmt(*tp)} | {dt} | {q('put', 'p50_us'):.2f} | {q('put', 'p90_us'):.2f} | {q('put', 'p95_us'):.2f} | {gp95} | {ratio('acks/commit'):.2f} | {ratio('msgs/commit'):.2f} | {'—' if ratio('heads/toss') != ratio('heads/toss') else format(ratio('heads/toss'), '.3f')} |")
    sys.exit(0)
print("| N | variant | write % | runs | ops/s (95 % CI) | vs Zab | mean latency ms | vs Zab | PUT p50 ms | acks/commit | msgs/commit | deliver ms |")
print("|---|---|---|---|---|---|---|---|---|---|---|---|")
for (n, v, wr) in sorted(pts, key=lambda k: (k[0], k[2], k[1] != "zab", k[1])):
    rs = pts[(n, v, wr)]
    tp = ci([r["throughput"] for r in rs])
    lat = ci([r["all"]["avg_us"] / 1000 for r in rs])
    p50 = statistics.mean(r["put"]["p50_us"] / 1000 for r in rs)
    ratio = lambda k: statistics.mean(dict(r["ratios"]).get(k, float("nan")) for r in rs)
    dt, dl = paired(n, v, wr, gain_t), paired(n, v, wr, gain_l)
    bad = sum(1 for r in rs if r["check"] not in ("ok", None))
    name = v if v != "zab" else "zab (Zab)"
    print(f"| {n} | `{name}` | {wr} | {len(rs)}{' (' + str(bad) + ' not ok)' if bad else ''} | {fmt(*tp)} | {dt} | {fmt(*lat, p=2)} | {dl} | {p50:.2f} | {ratio('acks/commit'):.2f} | {ratio('msgs/commit'):.2f} | {ratio('deliver ms'):.2f} |")
